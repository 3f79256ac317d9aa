//! An emulated BGP router: what a hardware tester's "emulated router" does, as the route
//! source for convergence at millions of routes. It listens for the router under test's
//! session (port 179 in its own namespace; it never connects), and holds one table, encoded
//! once up front as whole UPDATE messages (a few hundred prefixes each, as BIRD and the
//! testers pack them) together with the UPDATEs that withdraw it. On command it advertises
//! the table or withdraws it; sending is a copy from memory to the socket, so the peer
//! costs next to no CPU, and what a convergence run measures is the router's own work.
//!
//! It behaves as a BGP speaker towards the router: OPEN with the families configured (and
//! route refresh and 4-octet AS), keepalives at a third of the negotiated hold time, also
//! between the UPDATEs of a table being sent; the router's messages are read and counted
//! (UPDATEs discarded); a ROUTE-REFRESH is answered by sending the table again while it is
//! advertised; a NOTIFICATION, a malformed message, the hold timer or a closed connection
//! end the session, which is counted with its reason, and the next connection the router
//! makes is accepted and sent the table if it is advertised. Bad input never panics.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::wire;

/// What the emulated router is and what it advertises.
#[derive(Clone, Debug)]
pub struct Config {
    /// The address and port to accept the router's connection on (in the namespace the
    /// peer's thread enters).
    pub listen: SocketAddr,
    /// Our AS.
    pub asn: u32,
    /// Our BGP identifier.
    pub router_id: Ipv4Addr,
    /// Hold time we propose (0: none; else at least 3).
    pub hold_time: u16,
    /// The families in our OPEN's Multiprotocol capabilities.
    pub families: Vec<(u16, u8)>,
    /// Whole UPDATE messages announcing the table, encoded with 4-octet AS numbers
    /// ([`wire::encode_updates`]).
    pub table: Arc<Vec<u8>>,
    /// Whole UPDATE messages withdrawing it.
    pub withdrawal: Arc<Vec<u8>>,
}

/// Runs in the peer's thread before it binds (e.g. entering a network namespace).
pub type Enter = Box<dyn FnOnce() -> io::Result<()> + Send>;

/// The peer's counters and state.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Status {
    /// A session is established.
    pub established: bool,
    /// Sessions established so far.
    pub sessions: u64,
    /// Sessions that ended (each with its reason in `last_error`).
    pub resets: u64,
    /// The table is advertised (commanded; sent on every session while so).
    pub advertised: bool,
    /// Bytes queued to send, and sent, over all sessions (the table and its withdrawal).
    pub queued_bytes: u64,
    /// See `queued_bytes`.
    pub sent_bytes: u64,
    /// KEEPALIVEs sent.
    pub keepalives_sent: u64,
    /// Messages received from the router (all types), UPDATEs among them, ROUTE-REFRESHes.
    pub received: u64,
    /// See `received`.
    pub updates_received: u64,
    /// See `received`.
    pub refreshes_received: u64,
    /// Why the last session ended or could not start.
    pub last_error: Option<String>,
}

#[derive(Default)]
struct Shared {
    established: AtomicBool,
    advertised: AtomicBool,
    sessions: AtomicU64,
    resets: AtomicU64,
    queued: AtomicU64,
    sent: AtomicU64,
    keepalives: AtomicU64,
    received: AtomicU64,
    updates: AtomicU64,
    refreshes: AtomicU64,
    stop: AtomicBool,
    last_error: Mutex<Option<String>>,
}

impl Shared {
    fn set_error(&self, e: String) {
        if let Ok(mut g) = self.last_error.lock() {
            *g = Some(e);
        }
    }
}

enum Cmd {
    Advertise,
    Withdraw,
    /// The router asked for the table again (from the session's reader).
    Refresh,
}

/// A running emulated router; stopped (its session closed) when dropped.
pub struct Peer {
    local: SocketAddr,
    shared: Arc<Shared>,
    cmd: mpsc::Sender<Cmd>,
    thread: Option<JoinHandle<()>>,
}

/// Bytes written per step while sending a table: whole messages, so that a KEEPALIVE can go
/// between two steps.
const STEP: usize = 64 * 1024;
/// How often blocked reads, writes and accepts look at the stop flag.
const TICK: Duration = Duration::from_millis(100);
/// How long the router has to answer our OPEN and KEEPALIVE.
const OPEN_WAIT: Duration = Duration::from_secs(10);

impl Peer {
    /// Start the peer's thread: `enter()`, bind `cfg.listen`, and accept the router's
    /// sessions until dropped. Nothing is advertised until [`Peer::advertise`]. Returns once
    /// the socket listens (or with the reason it could not).
    pub fn start(cfg: Config, enter: Enter) -> io::Result<Peer> {
        if cfg.hold_time != 0 && cfg.hold_time < 3 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "hold time must be 0 or at least 3 s",
            ));
        }
        let shared = Arc::new(Shared::default());
        let (cmd, rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        let (s, c) = (shared.clone(), cmd.clone());
        let thread = std::thread::Builder::new()
            .name("emu-bgp".into())
            .spawn(move || {
                let l = enter().and_then(|()| {
                    let l = TcpListener::bind(cfg.listen)?;
                    l.set_nonblocking(true)?;
                    Ok(l)
                });
                match l.and_then(|l| Ok((l.local_addr()?, l))) {
                    Ok((local, l)) => {
                        let _ = ready_tx.send(Ok(local));
                        serve(&cfg, &l, &s, &rx, &c);
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            })?;
        match ready_rx.recv() {
            Ok(Ok(local)) => Ok(Peer {
                local,
                shared,
                cmd,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err(io::Error::other("the BGP peer's thread died")),
        }
    }

    /// The address it listens on (the port chosen when `cfg.listen`'s was 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Advertise the table (now if a session is up, else on the next one).
    pub fn advertise(&self) {
        let _ = self.cmd.send(Cmd::Advertise);
    }

    /// Withdraw the table.
    pub fn withdraw(&self) {
        let _ = self.cmd.send(Cmd::Withdraw);
    }

    /// Counters and state.
    pub fn status(&self) -> Status {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Status {
            established: self.shared.established.load(Ordering::Relaxed),
            sessions: r(&self.shared.sessions),
            resets: r(&self.shared.resets),
            advertised: self.shared.advertised.load(Ordering::Relaxed),
            queued_bytes: r(&self.shared.queued),
            sent_bytes: r(&self.shared.sent),
            keepalives_sent: r(&self.shared.keepalives),
            received: r(&self.shared.received),
            updates_received: r(&self.shared.updates),
            refreshes_received: r(&self.shared.refreshes),
            last_error: self.shared.last_error.lock().ok().and_then(|g| g.clone()),
        }
    }

    /// Whether the peer's thread is still running.
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Apply a command to the advertised state; returns what to send on a live session.
fn apply(cfg: &Config, shared: &Shared, c: Cmd) -> Option<Arc<Vec<u8>>> {
    let adv = shared.advertised.load(Ordering::Relaxed);
    match c {
        Cmd::Advertise if !adv => {
            shared.advertised.store(true, Ordering::Relaxed);
            Some(cfg.table.clone())
        }
        Cmd::Withdraw if adv => {
            shared.advertised.store(false, Ordering::Relaxed);
            Some(cfg.withdrawal.clone())
        }
        Cmd::Refresh if adv => Some(cfg.table.clone()),
        _ => None,
    }
}

/// Accept sessions until stopped; commands between sessions only change the state.
fn serve(
    cfg: &Config,
    l: &TcpListener,
    shared: &Arc<Shared>,
    rx: &mpsc::Receiver<Cmd>,
    cmd: &mpsc::Sender<Cmd>,
) {
    while !shared.stop.load(Ordering::Relaxed) {
        while let Ok(c) = rx.try_recv() {
            let _ = apply(cfg, shared, c);
        }
        match l.accept() {
            Ok((s, _)) => {
                let r = session(cfg, s, shared, rx, cmd);
                shared.established.store(false, Ordering::Relaxed);
                if let Err(e) = r {
                    shared.resets.fetch_add(1, Ordering::Relaxed);
                    shared.set_error(e);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(TICK),
            Err(e) => {
                shared.set_error(format!("accept: {e}"));
                std::thread::sleep(TICK);
            }
        }
    }
}

/// Read one whole message within `limit` (the stop flag is honoured).
fn read_message(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    shared: &Shared,
    limit: Duration,
) -> Result<(u8, Vec<u8>), String> {
    let t = Instant::now();
    let mut chunk = [0u8; 4096];
    loop {
        match wire::frame(buf) {
            Ok(Some((ty, len))) => {
                let body = buf[wire::HEADER_LEN..len].to_vec();
                buf.drain(..len);
                return Ok((ty, body));
            }
            Ok(None) => {}
            Err(n) => return Err(format!("malformed message from the router: {n}")),
        }
        if shared.stop.load(Ordering::Relaxed) {
            return Err("stopped".into());
        }
        if t.elapsed() > limit {
            return Err(format!("no message from the router within {limit:?}"));
        }
        match s.read(&mut chunk) {
            Ok(0) => return Err("the router closed the connection".into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Why a session's reader stopped, for the writer to report.
type Ended = Arc<Mutex<Option<String>>>;

/// One session: OPEN exchange, then the writer here and a reader thread. Returns `Ok` when
/// stopped, else why the session ended.
fn session(
    cfg: &Config,
    mut s: TcpStream,
    shared: &Arc<Shared>,
    rx: &mpsc::Receiver<Cmd>,
    cmd: &mpsc::Sender<Cmd>,
) -> Result<(), String> {
    let io = |e: io::Error| format!("socket: {e}");
    s.set_nonblocking(false).map_err(io)?;
    s.set_nodelay(true).map_err(io)?;
    s.set_read_timeout(Some(TICK)).map_err(io)?;
    s.set_write_timeout(Some(TICK)).map_err(io)?;
    let mut buf = Vec::new();
    let mut out = Vec::new();
    wire::encode_open(
        &mut out,
        cfg.asn,
        cfg.hold_time,
        cfg.router_id,
        &cfg.families,
    );
    write_all(&mut s, &out, shared)?;
    let (ty, body) = read_message(&mut s, &mut buf, shared, OPEN_WAIT)?;
    let open = match ty {
        wire::MSG_OPEN => wire::parse_open(&body).map_err(|n| {
            notify(&mut s, &n);
            format!("the router's OPEN: {n}")
        })?,
        wire::MSG_NOTIFICATION => {
            return Err(format!(
                "the router sent {} in reply to our OPEN",
                wire::parse_notification(&body)
            ))
        }
        t => return Err(format!("expected the router's OPEN, got message type {t}")),
    };
    if !open.four_octet_as {
        // The table is encoded with 4-octet AS paths (RFC 6793 §4.1: only for such peers).
        let n = wire::Notification::new(wire::ERR_OPEN, 7, &[]);
        notify(&mut s, &n);
        return Err("the router did not offer the 4-octet AS capability".into());
    }
    let hold = Duration::from_secs(u64::from(open.hold_time.min(cfg.hold_time)));
    out.clear();
    wire::encode_keepalive(&mut out);
    write_all(&mut s, &out, shared)?;
    let (ty, body) = read_message(&mut s, &mut buf, shared, OPEN_WAIT)?;
    match ty {
        wire::MSG_KEEPALIVE => {}
        wire::MSG_NOTIFICATION => {
            return Err(format!(
                "the router sent {} in OpenConfirm",
                wire::parse_notification(&body)
            ))
        }
        t => return Err(format!("expected a KEEPALIVE in OpenConfirm, got type {t}")),
    }
    shared.established.store(true, Ordering::Relaxed);
    shared.sessions.fetch_add(1, Ordering::Relaxed);

    let ended: Ended = Arc::new(Mutex::new(None));
    let reader = {
        let (mut r, shared, ended, cmd) = (
            s.try_clone().map_err(io)?,
            shared.clone(),
            ended.clone(),
            cmd.clone(),
        );
        std::thread::Builder::new()
            .name("emu-bgp-rx".into())
            .spawn(move || {
                let why = read_loop(&mut r, buf, &shared, hold, &cmd);
                if let Ok(mut g) = ended.lock() {
                    g.get_or_insert(why);
                }
                // A writer blocked on a router that stopped reading fails at once.
                let _ = r.shutdown(Shutdown::Both);
            })
            .map_err(io)?
    };
    let r = write_loop(cfg, &mut s, shared, rx, hold, &ended);
    let _ = s.shutdown(Shutdown::Both);
    let _ = reader.join();
    // A write that failed because the reader ended the session: the reader's reason.
    match (r, ended.lock().ok().and_then(|g| g.clone())) {
        (Err(_), Some(why)) if why != "stopped" => Err(why),
        (r, _) => r,
    }
}

/// Send a NOTIFICATION, best effort.
fn notify(s: &mut TcpStream, n: &wire::Notification) {
    let mut out = Vec::new();
    wire::encode_notification(&mut out, n);
    let _ = s.write_all(&out);
}

/// Write all of `b` (honouring the stop flag).
fn write_all(s: &mut TcpStream, mut b: &[u8], shared: &Shared) -> Result<(), String> {
    while !b.is_empty() {
        if shared.stop.load(Ordering::Relaxed) {
            return Err("stopped".into());
        }
        match s.write(b) {
            Ok(0) => return Err("write: the connection is closed".into()),
            Ok(n) => b = &b[n..],
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(format!("write: {e}")),
        }
    }
    Ok(())
}

/// Read the router's messages until the session ends; returns why.
fn read_loop(
    s: &mut TcpStream,
    mut buf: Vec<u8>,
    shared: &Shared,
    hold: Duration,
    cmd: &mpsc::Sender<Cmd>,
) -> String {
    let mut last = Instant::now();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        loop {
            match wire::frame(&buf) {
                Ok(Some((ty, len))) => {
                    last = Instant::now();
                    shared.received.fetch_add(1, Ordering::Relaxed);
                    match ty {
                        wire::MSG_UPDATE => {
                            shared.updates.fetch_add(1, Ordering::Relaxed);
                        }
                        wire::MSG_ROUTE_REFRESH => {
                            shared.refreshes.fetch_add(1, Ordering::Relaxed);
                            let _ = cmd.send(Cmd::Refresh);
                        }
                        wire::MSG_NOTIFICATION => {
                            let n = wire::parse_notification(&buf[wire::HEADER_LEN..len]);
                            return format!("the router sent {n}");
                        }
                        wire::MSG_OPEN => {
                            return "the router sent an OPEN on a live session".into()
                        }
                        _ => {}
                    }
                    buf.drain(..len);
                }
                Ok(None) => break,
                Err(n) => {
                    notify(s, &n);
                    return format!("malformed message from the router: {n}");
                }
            }
        }
        if shared.stop.load(Ordering::Relaxed) {
            return "stopped".into();
        }
        if !hold.is_zero() && last.elapsed() > hold {
            notify(s, &wire::Notification::new(wire::ERR_HOLD, 0, &[]));
            return format!("hold timer expired ({} s)", hold.as_secs());
        }
        match s.read(&mut chunk) {
            Ok(0) => return "the router closed the connection".into(),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if is_timeout(&e) => {}
            Err(e) => return format!("read: {e}"),
        }
    }
}

/// The end of the step of whole messages starting at `at` (about [`STEP`] bytes).
fn step_end(b: &[u8], at: usize) -> usize {
    let mut end = at;
    while end < b.len() && end - at < STEP {
        match wire::frame(&b[end..]) {
            Ok(Some((_, len))) => end += len,
            // Not whole messages (the caller's encoding): send the rest as it is.
            _ => return b.len(),
        }
    }
    end
}

/// Send what the commands ask, and keepalives, until the session ends.
fn write_loop(
    cfg: &Config,
    s: &mut TcpStream,
    shared: &Shared,
    rx: &mpsc::Receiver<Cmd>,
    hold: Duration,
    ended: &Ended,
) -> Result<(), String> {
    let keepalive_every = hold / 3;
    let mut queue: VecDeque<Arc<Vec<u8>>> = VecDeque::new();
    let queue_blob = |q: &mut VecDeque<Arc<Vec<u8>>>, b: Arc<Vec<u8>>| {
        shared.queued.fetch_add(b.len() as u64, Ordering::Relaxed);
        q.push_back(b);
    };
    if shared.advertised.load(Ordering::Relaxed) {
        queue_blob(&mut queue, cfg.table.clone());
    }
    let mut at = 0usize;
    let mut last_write = Instant::now();
    let mut ka = Vec::new();
    wire::encode_keepalive(&mut ka);
    loop {
        if let Some(why) = ended.lock().ok().and_then(|g| g.clone()) {
            return if why == "stopped" { Ok(()) } else { Err(why) };
        }
        if shared.stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        // Commands: waited for when idle, looked at between steps otherwise.
        let next = if queue.is_empty() {
            rx.recv_timeout(TICK).ok()
        } else {
            rx.try_recv().ok()
        };
        if let Some(c) = next {
            if let Some(b) = apply(cfg, shared, c) {
                queue_blob(&mut queue, b);
            }
        }
        if !keepalive_every.is_zero() && last_write.elapsed() >= keepalive_every {
            write_all(s, &ka, shared)?;
            shared.keepalives.fetch_add(1, Ordering::Relaxed);
            last_write = Instant::now();
        }
        if let Some(b) = queue.front().cloned() {
            let end = step_end(&b, at);
            write_all(s, &b[at..end], shared)?;
            shared.sent.fetch_add((end - at) as u64, Ordering::Relaxed);
            last_write = Instant::now();
            at = end;
            if at >= b.len() {
                queue.pop_front();
                at = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn table() -> (Arc<Vec<u8>>, Arc<Vec<u8>>) {
        let prefixes: Vec<(IpAddr, u8)> = (0..3000u32)
            .map(|i| (IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + (i << 8))), 24))
            .collect();
        let attrs = wire::Attrs {
            as_path: wire::AsPath::sequence(&[65002]),
            next_hop: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            ..Default::default()
        };
        let (mut a, mut w) = (Vec::new(), Vec::new());
        wire::encode_updates(&mut a, &attrs, None, &prefixes, &[], true);
        wire::encode_updates(&mut w, &attrs, None, &[], &prefixes, true);
        (Arc::new(a), Arc::new(w))
    }

    fn start(hold: u16) -> (Peer, SocketAddr, Arc<Vec<u8>>, Arc<Vec<u8>>) {
        let (t, w) = table();
        let cfg = Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            asn: 65002,
            router_id: Ipv4Addr::new(192, 0, 2, 2),
            hold_time: hold,
            families: vec![(wire::AFI_IPV4, wire::SAFI_UNICAST)],
            table: t.clone(),
            withdrawal: w.clone(),
        };
        let p = Peer::start(cfg, Box::new(|| Ok(()))).unwrap();
        let addr = p.local_addr();
        (p, addr, t, w)
    }

    /// The router side, by hand: connect, OPEN, KEEPALIVE.
    fn connect(addr: SocketAddr, four_octet: bool) -> (TcpStream, Vec<u8>) {
        connect_with_hold(addr, four_octet, 9)
    }

    fn connect_with_hold(addr: SocketAddr, four_octet: bool, hold: u16) -> (TcpStream, Vec<u8>) {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut out = Vec::new();
        wire::encode_open(
            &mut out,
            65001,
            hold,
            Ipv4Addr::new(192, 0, 2, 1),
            &[(wire::AFI_IPV4, wire::SAFI_UNICAST)],
        );
        if !four_octet {
            // Drop the 4-octet AS capability (the last 6 bytes) and fix the lengths.
            out.truncate(out.len() - 6);
            let len = out.len() as u16;
            out[16..18].copy_from_slice(&len.to_be_bytes());
            out[28] -= 6;
            out[30] -= 6;
        }
        wire::encode_keepalive(&mut out);
        s.write_all(&out).unwrap();
        (s, Vec::new())
    }

    fn next(s: &mut TcpStream, buf: &mut Vec<u8>) -> (u8, usize) {
        let mut chunk = [0u8; 65536];
        loop {
            if let Some((ty, len)) = wire::frame(buf).unwrap() {
                buf.drain(..len);
                return (ty, len);
            }
            let n = s.read(&mut chunk).unwrap();
            assert!(n > 0, "the peer closed the connection");
            buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Read messages until `bytes` of UPDATEs have arrived (keepalives may come between).
    fn read_updates(s: &mut TcpStream, buf: &mut Vec<u8>, bytes: usize) {
        let mut got = 0;
        while got < bytes {
            match next(s, buf) {
                (wire::MSG_UPDATE, len) => got += len,
                (wire::MSG_KEEPALIVE, _) => {}
                (t, _) => panic!("unexpected message type {t}"),
            }
        }
        assert_eq!(got, bytes);
    }

    fn wait(p: &Peer, f: impl Fn(&Status) -> bool) -> Status {
        let t = Instant::now();
        loop {
            let st = p.status();
            if f(&st) {
                return st;
            }
            assert!(t.elapsed() < Duration::from_secs(10), "{st:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn advertises_withdraws_keeps_alive_and_answers_a_refresh() {
        let (p, addr, t, w) = start(90);
        let (mut s, mut buf) = connect(addr, true);
        assert_eq!(next(&mut s, &mut buf).0, wire::MSG_OPEN);
        assert_eq!(next(&mut s, &mut buf).0, wire::MSG_KEEPALIVE);
        wait(&p, |st| st.established && st.sessions == 1);
        p.advertise();
        read_updates(&mut s, &mut buf, t.len());
        p.advertise(); // already advertised: nothing more is sent
        p.withdraw();
        read_updates(&mut s, &mut buf, w.len());
        // A refresh while withdrawn sends nothing; while advertised, the table again.
        let mut rr = Vec::new();
        wire::encode_route_refresh(&mut rr, wire::AFI_IPV4, wire::SAFI_UNICAST);
        s.write_all(&rr).unwrap();
        wait(&p, |st| st.refreshes_received == 1);
        p.advertise();
        read_updates(&mut s, &mut buf, t.len());
        s.write_all(&rr).unwrap();
        read_updates(&mut s, &mut buf, t.len());
        let st = wait(&p, |st| st.sent_bytes == st.queued_bytes);
        assert_eq!(st.sent_bytes as usize, 3 * t.len() + w.len());
        assert!(
            st.advertised && st.resets == 0 && st.refreshes_received == 2,
            "{st:?}"
        );
        // Keepalives every hold/3: 3 s, 9 s being negotiated.
        std::thread::sleep(Duration::from_millis(3500));
        assert_eq!(next(&mut s, &mut buf).0, wire::MSG_KEEPALIVE);
        assert!(p.status().keepalives_sent >= 1);
    }

    #[test]
    fn bad_input_ends_the_session_with_a_reason_and_the_next_one_gets_the_table() {
        let (p, addr, t, _) = start(90);
        p.advertise();
        // Garbage instead of an OPEN.
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(&[0x42; 40]).unwrap();
        let st = wait(&p, |st| st.resets == 1);
        assert!(
            st.last_error.as_deref().unwrap().contains("malformed"),
            "{st:?}"
        );
        // A router without 4-octet AS support.
        let (mut s, mut buf) = connect(addr, false);
        assert_eq!(next(&mut s, &mut buf).0, wire::MSG_OPEN);
        assert_eq!(next(&mut s, &mut buf).0, wire::MSG_NOTIFICATION);
        let st = wait(&p, |st| st.resets == 2);
        assert!(
            st.last_error.as_deref().unwrap().contains("4-octet"),
            "{st:?}"
        );
        // A good session gets the table at once (it was advertised before).
        let (mut s, mut buf) = connect(addr, true);
        assert_eq!(next(&mut s, &mut buf).0, wire::MSG_OPEN);
        assert_eq!(next(&mut s, &mut buf).0, wire::MSG_KEEPALIVE);
        read_updates(&mut s, &mut buf, t.len());
        // A malformed message on the live session: a NOTIFICATION back, the session ends.
        let mut bad = vec![0xff; 16];
        bad.extend_from_slice(&[0, 19, 9]);
        s.write_all(&bad).unwrap();
        let st = wait(&p, |st| st.resets == 3 && !st.established);
        assert!(
            st.last_error.as_deref().unwrap().contains("malformed"),
            "{st:?}"
        );
        assert_eq!(st.sessions, 1);
        drop(s);
        // The router going away: counted, and the peer still listens.
        let (mut s, mut buf) = connect(addr, true);
        assert_eq!(next(&mut s, &mut buf).0, wire::MSG_OPEN);
        wait(&p, |st| st.sessions == 2);
        drop(s);
        let st = wait(&p, |st| st.resets == 4);
        assert!(p.is_running(), "{st:?}");
    }

    #[test]
    fn a_silent_router_is_dropped_when_the_hold_timer_expires() {
        let (p, addr, _, _) = start(90);
        // 3 s negotiated; the router sends nothing after its KEEPALIVE, and reads nothing.
        let (mut s, mut buf) = connect_with_hold(addr, true, 3);
        assert_eq!(next(&mut s, &mut buf).0, wire::MSG_OPEN);
        wait(&p, |st| st.established);
        p.advertise();
        let st = wait(&p, |st| st.resets == 1);
        assert!(!st.established, "{st:?}");
        assert!(
            st.last_error
                .as_deref()
                .unwrap()
                .contains("hold timer expired"),
            "{st:?}"
        );
    }
}
