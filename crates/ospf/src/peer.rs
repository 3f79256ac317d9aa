//! An emulated OSPFv2 neighbour: what a hardware tester's "emulated router" does, as the
//! route source for OSPF convergence at millions of routes. It forms one point-to-point
//! adjacency in area 0 with a real router (FRR's ospfd in the lab), originates a
//! router-LSA (ASBR, a point-to-point link to the neighbour and a stub for the link's
//! subnet) and one AS-external-LSA (type 2 metric, no forwarding address) per prefix, and
//! on command withdraws them all (premature aging: the same instance at MaxAge) or
//! advertises them again (the next sequence number).
//!
//! What makes it scale where a full OSPF implementation in the same role stalled (BIRD, in
//! docs/performance.md "OSPF at 2M routes"):
//! - it keeps no link-state database for the neighbour's LSAs: every LSA flooded to it is
//!   acknowledged at once, in as few packets as fit, and otherwise forgotten, so the
//!   neighbour's retransmission lists drain as fast as it sends;
//! - its socket has a 64 MiB receive buffer (`SO_RCVBUFFORCE`, past `rmem_max`);
//! - it floods its own LSAs under a window: at most [`Config::window`] LSAs sent and not
//!   yet acknowledged, so a neighbour that falls behind is not buried (its receive buffer
//!   is bounded by `rmem_max`) but paced by its own acknowledgments; an LSA not
//!   acknowledged within [`Config::retransmit`] is sent again.
//!
//! It does not request the neighbour's LSAs during the database exchange (it has no use
//! for them), does not refresh its LSAs (a run must end within MaxAge, an hour), and
//! handles one neighbour. Bad packets are counted and dropped.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use crate::wire::{self, DbDesc, External, LsaHeader};

/// What the emulated router is.
#[derive(Clone, Debug)]
pub struct Config {
    /// The interface towards the router, in the namespace the peer runs in.
    pub ifname: String,
    /// Our address on the link; also our router ID.
    pub address: Ipv4Addr,
    /// The link's prefix length.
    pub prefix_len: u8,
    /// HelloInterval and RouterDeadInterval (s): the neighbour's must be the same.
    pub hello: u16,
    /// RouterDeadInterval (s).
    pub dead: u32,
    /// An LSA (or the master's Database Description) not acknowledged this long is sent
    /// again; for LSAs, at least three times the smoothed acknowledgment latency (a busy
    /// neighbour acknowledges late, and resending to it then only adds to its backlog).
    pub retransmit: Duration,
    /// The interface MTU (advertised in Database Descriptions; packets are built to fit it).
    pub mtu: u16,
    /// At most this many of our LSAs sent and not yet acknowledged.
    pub window: usize,
    /// The prefixes (address in host order, length) to originate as externals.
    pub externals: Vec<(u32, u8)>,
    /// Their type 2 metric.
    pub metric: u32,
}

/// The adjacency's state, as [`Stats::state`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// No neighbour heard (or it went away).
    Down,
    /// Heard, but it does not list us yet.
    Init,
    /// Deciding master and slave.
    ExStart,
    /// Exchanging database summaries.
    Exchange,
    /// Adjacent: flooding.
    Full,
}

/// Counters since start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// The adjacency's state now.
    pub state: Option<State>,
    /// Times an adjacency went back to Down or ExStart after forming.
    pub adjacency_resets: u64,
    /// Our LSAs sent (flooded, retransmitted or requested).
    pub lsas_sent: u64,
    /// Of those, retransmissions.
    pub lsas_retransmitted: u64,
    /// Our LSAs the neighbour acknowledged.
    pub lsas_acked: u64,
    /// Our LSAs of the current instance sent and not yet acknowledged.
    pub unacked: u64,
    /// Our LSAs of the current instance not yet sent at all.
    pub unsent: u64,
    /// LSAs the neighbour flooded to us (each acknowledged).
    pub lsas_received: u64,
    /// Packets dropped as malformed (or an LSA whose checksum failed).
    pub bad_packets: u64,
    /// sendto failures (the LSAs involved are retransmitted).
    pub send_errors: u64,
    /// Smoothed time from sending one of our LSAs to its acknowledgment, ms.
    pub ack_latency_ms: u64,
    /// Prefixes not originated: no free Link State ID inside them (see `link_state_ids`).
    pub unoriginated: u64,
}

#[derive(Default)]
struct Counters {
    state: AtomicU64,
    adjacency_resets: AtomicU64,
    lsas_sent: AtomicU64,
    lsas_retransmitted: AtomicU64,
    lsas_acked: AtomicU64,
    unacked: AtomicU64,
    unsent: AtomicU64,
    lsas_received: AtomicU64,
    bad_packets: AtomicU64,
    send_errors: AtomicU64,
    ack_latency_ms: AtomicU64,
    unoriginated: AtomicU64,
}

enum Cmd {
    Advertise,
    Withdraw,
}

/// A running emulated neighbour (its own thread); stopped when dropped.
pub struct Peer {
    cmd: mpsc::Sender<Cmd>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl Peer {
    /// Start the peer's thread: `enter` runs on it first (e.g. to join the namespace the
    /// interface is in), then it opens its socket and starts sending hellos. It
    /// originates no externals until [`Peer::advertise`].
    pub fn start(
        cfg: Config,
        enter: Box<dyn FnOnce() -> io::Result<()> + Send>,
    ) -> io::Result<Peer> {
        let (tx, rx) = mpsc::channel();
        let counters = Arc::new(Counters::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (counters.clone(), stop.clone());
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("ospf-peer-{}", cfg.address))
            .spawn(move || {
                let sock = enter().and_then(|()| open_socket(&cfg.ifname));
                let sock = match sock {
                    Ok(s) => {
                        let _ = ready_tx.send(Ok(()));
                        s
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(io::Error::new(e.kind(), e.to_string())));
                        return Err(e);
                    }
                };
                Emulated::new(cfg, sock, c).run(&rx, &s)
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => return Err(io::Error::other("the OSPF peer's thread ended")),
        }
        Ok(Peer {
            cmd: tx,
            counters,
            stop,
            thread: Some(thread),
        })
    }

    /// Originate every external (the first time), or originate them again with the next
    /// sequence number (after [`Peer::withdraw`]).
    pub fn advertise(&self) -> io::Result<()> {
        self.send(Cmd::Advertise)
    }

    /// Flush every external: the current instance at MaxAge.
    pub fn withdraw(&self) -> io::Result<()> {
        self.send(Cmd::Withdraw)
    }

    fn send(&self, c: Cmd) -> io::Result<()> {
        self.cmd
            .send(c)
            .map_err(|_| io::Error::other("the OSPF peer's thread ended"))
    }

    /// Whether the thread is still running (it ends only on a socket error or stop).
    pub fn alive(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// The counters now.
    pub fn stats(&self) -> Stats {
        let c = &self.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            state: Some(match g(&c.state) {
                1 => State::Init,
                2 => State::ExStart,
                3 => State::Exchange,
                4 => State::Full,
                _ => State::Down,
            }),
            adjacency_resets: g(&c.adjacency_resets),
            lsas_sent: g(&c.lsas_sent),
            lsas_retransmitted: g(&c.lsas_retransmitted),
            lsas_acked: g(&c.lsas_acked),
            unacked: g(&c.unacked),
            unsent: g(&c.unsent),
            lsas_received: g(&c.lsas_received),
            bad_packets: g(&c.bad_packets),
            send_errors: g(&c.send_errors),
            ack_latency_ms: g(&c.ack_latency_ms),
            unoriginated: g(&c.unoriginated),
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn check(rc: libc::c_int, what: &str) -> io::Result<()> {
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(())
}

fn setopt<T>(fd: i32, level: i32, name: i32, v: &T, what: &str) -> io::Result<()> {
    // SAFETY: `v` points at a live T of the size given.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    check(rc, what)
}

/// A raw IPv4 socket for protocol 89 on `ifname`, in AllSPFRouters, with large buffers and
/// a 10 ms receive timeout.
fn open_socket(ifname: &str) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the fd is owned at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, wire::IPPROTO_OSPF) };
    check(fd, "socket(AF_INET, SOCK_RAW, 89)")?;
    // SAFETY: fd is a new, valid descriptor nobody else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let name = std::ffi::CString::new(ifname)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name"))?;
    // SAFETY: the C string is valid for the call.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no interface {ifname}"),
        ));
    }
    let bytes = name.as_bytes_with_nul();
    // SAFETY: the name's bytes, with their length.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_BINDTODEVICE,
            bytes.as_ptr().cast(),
            bytes.len() as libc::socklen_t,
        )
    };
    check(rc, "SO_BINDTODEVICE")?;
    let mreq = libc::ip_mreqn {
        imr_multiaddr: libc::in_addr {
            s_addr: u32::from(wire::ALL_SPF_ROUTERS).to_be(),
        },
        imr_address: libc::in_addr { s_addr: 0 },
        imr_ifindex: ifindex as i32,
    };
    setopt(
        fd,
        libc::IPPROTO_IP,
        libc::IP_ADD_MEMBERSHIP,
        &mreq,
        "join 224.0.0.5",
    )?;
    setopt(
        fd,
        libc::IPPROTO_IP,
        libc::IP_MULTICAST_IF,
        &mreq,
        "IP_MULTICAST_IF",
    )?;
    setopt(
        fd,
        libc::IPPROTO_IP,
        libc::IP_MULTICAST_LOOP,
        &0i32,
        "IP_MULTICAST_LOOP",
    )?;
    setopt(
        fd,
        libc::IPPROTO_IP,
        libc::IP_MULTICAST_TTL,
        &1i32,
        "IP_MULTICAST_TTL",
    )?;
    setopt(fd, libc::IPPROTO_IP, libc::IP_TOS, &0xc0i32, "IP_TOS")?;
    // Larger than the MTU: fragment (the neighbour reassembles) rather than fail.
    setopt(
        fd,
        libc::IPPROTO_IP,
        libc::IP_MTU_DISCOVER,
        &libc::IP_PMTUDISC_DONT,
        "IP_MTU_DISCOVER",
    )?;
    setopt(
        fd,
        libc::SOL_SOCKET,
        libc::SO_RCVBUFFORCE,
        &(64i32 << 20),
        "SO_RCVBUFFORCE",
    )?;
    setopt(
        fd,
        libc::SOL_SOCKET,
        libc::SO_SNDBUFFORCE,
        &(16i32 << 20),
        "SO_SNDBUFFORCE",
    )?;
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 10_000,
    };
    setopt(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv, "SO_RCVTIMEO")?;
    Ok(sock)
}

/// Link State IDs tried per prefix after the network address (see [`link_state_ids`]).
const ID_TRIES: u32 = 64;

fn mask_of(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len.min(32)))
    }
}

/// Link State IDs for `prefixes` (RFC 2328 appendix E): the network address, or, when
/// that is taken (prefixes are taken longest first), the network with its host bits set.
/// Nested Internet-like prefixes can take both (2M generated prefixes had 5,202 such): then
/// the next free address below that, within the prefix; the router masks the ID with the
/// LSA's mask, so any of them names the same network. At most [`ID_TRIES`] are tried;
/// `None` when all are taken (a /32 whose address another prefix's LSA took).
fn link_state_ids(prefixes: &[(u32, u8)]) -> Vec<Option<u32>> {
    let mut order: Vec<usize> = (0..prefixes.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(prefixes[i].1));
    let mut taken: FxHashMap<u32, ()> = FxHashMap::default();
    taken.reserve(prefixes.len());
    let mut ids = vec![None; prefixes.len()];
    for i in order {
        let (a, l) = prefixes[i];
        let m = mask_of(l);
        let net = a & m;
        let top = net | !m;
        let candidates = std::iter::once(net)
            .chain((0..ID_TRIES).map(|k| top.wrapping_sub(k)))
            .filter(|id| id & m == net);
        for id in candidates {
            if taken.insert(id, ()).is_none() {
                ids[i] = Some(id);
                break;
            }
        }
    }
    ids
}

/// The Database Description exchange in progress.
struct Exchange {
    master: bool,
    seq: u32,
    /// Our summary and how much of it has gone out.
    summary: Vec<LsaHeader>,
    pos: usize,
    /// The last DBD we sent (master: until acknowledged; slave: for duplicates).
    last: Vec<u8>,
    last_more: bool,
    sent_at: Instant,
}

struct Emulated {
    cfg: Config,
    sock: OwnedFd,
    c: Arc<Counters>,
    rid: Ipv4Addr,
    state: State,
    nbr: Option<Ipv4Addr>,
    last_hello_rx: Instant,
    next_hello: Instant,
    xchg: Option<Exchange>,
    /// Our router-LSA: sequence number, bytes, and when sent if not yet acknowledged.
    router_seq: u32,
    router: Vec<u8>,
    router_sent: Option<Instant>,
    /// The externals: Link State ID and mask, by index; the index by ID.
    ext: Vec<Option<External>>,
    by_id: FxHashMap<u32, usize>,
    /// The current instance: sequence number (0: none yet) and whether flushed (MaxAge).
    seq: u32,
    flushed: bool,
    /// Per external: when last sent (ns since `epoch`), 0 when acknowledged or not sent.
    sent_ns: Vec<u64>,
    /// Externals `[cursor..]` have not been sent in the current instance.
    cursor: usize,
    unacked: usize,
    /// Smoothed acknowledgment latency (ns), 1/8 weight per sample as TCP's SRTT.
    srtt_ns: u64,
    last_scan: Instant,
    epoch: Instant,
    out: Vec<u8>,
    acks: Vec<LsaHeader>,
    established_once: bool,
}

impl Emulated {
    fn new(cfg: Config, sock: OwnedFd, c: Arc<Counters>) -> Emulated {
        let ids = link_state_ids(&cfg.externals);
        let mut by_id = FxHashMap::default();
        by_id.reserve(ids.len());
        let mut ext = Vec::with_capacity(ids.len());
        let mut missing = 0;
        for (i, (id, &(_, l))) in ids.iter().zip(&cfg.externals).enumerate() {
            match id {
                Some(id) => {
                    by_id.insert(*id, i);
                    ext.push(Some(External {
                        id: *id,
                        mask: mask_of(l),
                        metric: cfg.metric,
                    }));
                }
                None => {
                    missing += 1;
                    ext.push(None);
                }
            }
        }
        c.unoriginated.store(missing, Ordering::Relaxed);
        let now = Instant::now();
        let n = ext.len();
        let mut e = Emulated {
            rid: cfg.address,
            cfg,
            sock,
            c,
            state: State::Down,
            nbr: None,
            last_hello_rx: now,
            next_hello: now,
            xchg: None,
            router_seq: wire::INITIAL_SEQ - 1,
            router: Vec::new(),
            router_sent: None,
            ext,
            by_id,
            seq: 0,
            flushed: false,
            sent_ns: vec![0; n],
            cursor: n,
            unacked: 0,
            srtt_ns: 0,
            last_scan: now,
            epoch: now,
            out: Vec::with_capacity(65_536),
            acks: Vec::new(),
            established_once: false,
        };
        e.originate_router();
        e
    }

    fn set_state(&mut self, s: State) {
        if s == self.state {
            return;
        }
        if self.established_once
            && matches!(s, State::Down | State::Init | State::ExStart)
            && matches!(self.state, State::Exchange | State::Full)
        {
            self.c.adjacency_resets.fetch_add(1, Ordering::Relaxed);
        }
        tracing::debug!(peer = %self.rid, from = ?self.state, to = ?s, "OSPF adjacency");
        self.state = s;
        if s == State::Full {
            self.established_once = true;
        }
        if s != State::Exchange {
            self.xchg = None;
        }
        self.c.state.store(
            match s {
                State::Down => 0,
                State::Init => 1,
                State::ExStart => 2,
                State::Exchange => 3,
                State::Full => 4,
            },
            Ordering::Relaxed,
        );
    }

    /// A new instance of our router-LSA: ASBR, the link to the neighbour (once known), the
    /// link's subnet.
    fn originate_router(&mut self) {
        self.router_seq += 1;
        let mask = mask_of(self.cfg.prefix_len);
        let me = u32::from(self.cfg.address);
        let mut links = Vec::with_capacity(2);
        if let Some(n) = self.nbr {
            links.push((u32::from(n), me, wire::LINK_P2P, 10));
        }
        links.push((me & mask, mask, wire::LINK_STUB, 10));
        wire::router_lsa(
            &mut self.router,
            self.rid,
            0,
            self.router_seq,
            wire::ROUTER_E,
            &links,
        );
        self.router_sent = None;
    }

    fn run(mut self, rx: &mpsc::Receiver<Cmd>, stop: &AtomicBool) -> io::Result<()> {
        let mut buf = vec![0u8; 70_000];
        while !stop.load(Ordering::Relaxed) {
            // Up to 512 packets, the first waiting at most the 10 ms receive timeout.
            for i in 0..512 {
                let flags = if i == 0 { 0 } else { libc::MSG_DONTWAIT };
                // SAFETY: buf is valid for its length.
                let n = unsafe {
                    libc::recv(
                        self.sock.as_raw_fd(),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        flags,
                    )
                };
                if n < 0 {
                    let e = io::Error::last_os_error();
                    match e.kind() {
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => break,
                        _ => return Err(e),
                    }
                }
                let n = n as usize;
                self.receive(&buf[..n.min(buf.len())]);
            }
            while let Ok(cmd) = rx.try_recv() {
                self.command(cmd);
            }
            self.timers();
            self.flood();
        }
        Ok(())
    }

    fn command(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Advertise => {
                self.seq = if self.seq == 0 {
                    wire::INITIAL_SEQ
                } else {
                    self.seq + 1
                };
                self.flushed = false;
            }
            Cmd::Withdraw => {
                if self.seq == 0 {
                    return;
                }
                self.flushed = true;
            }
        }
        self.sent_ns.fill(0);
        self.cursor = 0;
        self.unacked = 0;
        self.publish();
    }

    fn publish(&self) {
        self.c.unacked.store(self.unacked as u64, Ordering::Relaxed);
        self.c.unsent.store(
            if self.seq == 0 {
                0
            } else {
                (self.ext.len() - self.cursor) as u64
            },
            Ordering::Relaxed,
        );
    }

    fn now_ns(&self) -> u64 {
        // Never 0: 0 means "not pending".
        self.epoch.elapsed().as_nanos() as u64 + 1
    }

    fn send_out(&mut self) {
        let dst = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from(wire::ALL_SPF_ROUTERS).to_be(),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: out and dst are valid for the lengths given.
        let rc = unsafe {
            libc::sendto(
                self.sock.as_raw_fd(),
                self.out.as_ptr().cast(),
                self.out.len(),
                0,
                (&dst as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            self.c.send_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The most payload bytes a packet may carry after the OSPF header.
    fn room(&self) -> usize {
        usize::from(self.cfg.mtu).saturating_sub(20 + wire::HEADER_LEN)
    }

    fn receive(&mut self, ip: &[u8]) {
        let ihl = usize::from(ip.first().copied().unwrap_or(0) & 0x0f) * 4;
        if ihl < 20 || ip.len() < ihl {
            self.c.bad_packets.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
        if src == self.cfg.address {
            return;
        }
        let p = match wire::parse(&ip[ihl..]) {
            Ok(p) => p,
            Err(e) => {
                self.c.bad_packets.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(peer = %self.rid, %src, error = %e, "bad OSPF packet");
                return;
            }
        };
        if p.header.area != Ipv4Addr::UNSPECIFIED {
            self.c.bad_packets.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let from = p.header.router_id;
        match p.header.kind {
            wire::HELLO => match wire::parse_hello(p.body) {
                Ok(h) => self.hello(from, &h),
                Err(_) => {
                    self.c.bad_packets.fetch_add(1, Ordering::Relaxed);
                }
            },
            _ if Some(from) != self.nbr => {}
            wire::DB_DESC => match wire::parse_db_desc(p.body) {
                Ok((d, hdrs)) => self.db_desc(from, d, hdrs.len()),
                Err(_) => {
                    self.c.bad_packets.fetch_add(1, Ordering::Relaxed);
                }
            },
            wire::LS_REQUEST if matches!(self.state, State::Exchange | State::Full) => {
                let wanted: Vec<(u32, u32, u32)> = wire::parse_ls_request(p.body).collect();
                self.ls_request(&wanted);
            }
            wire::LS_UPDATE if matches!(self.state, State::Exchange | State::Full) => {
                self.ls_update(p.body)
            }
            wire::LS_ACK if matches!(self.state, State::Exchange | State::Full) => {
                let hs: Vec<LsaHeader> = wire::headers(p.body).collect();
                self.ls_ack(&hs);
            }
            _ => {}
        }
    }

    fn hello(&mut self, from: Ipv4Addr, h: &wire::Hello) {
        if h.hello_interval != self.cfg.hello || h.dead_interval != self.cfg.dead {
            self.c.bad_packets.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if self.nbr.is_some_and(|n| n != from) {
            // One neighbour only.
            return;
        }
        self.last_hello_rx = Instant::now();
        if self.nbr.is_none() {
            self.nbr = Some(from);
            self.originate_router();
            // Answer at once: the neighbour reaches 2-Way on seeing itself listed.
            self.next_hello = Instant::now();
        }
        let two_way = h.neighbors.contains(&self.rid);
        match (self.state, two_way) {
            (State::Down, false) => self.set_state(State::Init),
            (State::Down | State::Init, true) => self.start_exchange(),
            (State::ExStart | State::Exchange | State::Full, false) => self.set_state(State::Init),
            _ => {}
        }
    }

    /// ExStart: propose ourselves as master (the higher router ID wins).
    fn start_exchange(&mut self) {
        self.set_state(State::ExStart);
        let seq = (self.epoch.elapsed().as_micros() as u32) | 1;
        self.xchg = Some(Exchange {
            master: true,
            seq,
            summary: Vec::new(),
            pos: 0,
            last: Vec::new(),
            last_more: true,
            sent_at: Instant::now(),
        });
        self.send_initial_dd();
    }

    fn send_initial_dd(&mut self) {
        let Some(x) = self.xchg.as_mut() else {
            return;
        };
        let d = DbDesc {
            mtu: self.cfg.mtu,
            options: wire::OPT_E,
            flags: wire::DD_I | wire::DD_M | wire::DD_MS,
            seq: x.seq,
        };
        wire::encode_db_desc(&mut x.last, self.rid, d, &[]);
        x.sent_at = Instant::now();
        self.out.clone_from(&x.last);
        self.send_out();
    }

    /// Our database's headers: the router-LSA and the externals of the current instance
    /// (unless flushed).
    fn summary(&self) -> Vec<LsaHeader> {
        let mut v = Vec::new();
        let mut b = [0u8; wire::LSA_HEADER_LEN];
        b.copy_from_slice(&self.router[..wire::LSA_HEADER_LEN]);
        v.push(LsaHeader::read(&b));
        if self.seq != 0 && !self.flushed {
            v.reserve(self.ext.len());
            let mut lsa = [0u8; wire::EXTERNAL_LSA_LEN];
            for e in self.ext.iter().flatten() {
                wire::external_lsa(&mut lsa, self.rid, 0, self.seq, *e);
                b.copy_from_slice(&lsa[..wire::LSA_HEADER_LEN]);
                v.push(LsaHeader::read(&b));
            }
        }
        v
    }

    /// ExStart decided: Exchange, as master or slave, from DD sequence number `seq`, with
    /// our database's summary to send.
    fn begin_exchange(&mut self, master: bool, seq: u32) {
        self.set_state(State::Exchange);
        let summary = self.summary();
        self.xchg = Some(Exchange {
            master,
            seq,
            summary,
            pos: 0,
            last: Vec::new(),
            last_more: true,
            sent_at: Instant::now(),
        });
    }

    /// Send the next Database Description of the exchange (master or slave) with `seq`.
    fn send_next_dd(&mut self, seq: u32) {
        let per = self.room().saturating_sub(8) / wire::LSA_HEADER_LEN;
        let rid = self.rid;
        let mtu = self.cfg.mtu;
        let Some(x) = self.xchg.as_mut() else {
            return;
        };
        let end = (x.pos + per.max(1)).min(x.summary.len());
        let more = end < x.summary.len();
        let flags = if more { wire::DD_M } else { 0 } | if x.master { wire::DD_MS } else { 0 };
        let d = DbDesc {
            mtu,
            options: wire::OPT_E,
            flags,
            seq,
        };
        wire::encode_db_desc(&mut x.last, rid, d, &x.summary[x.pos..end]);
        x.pos = end;
        x.seq = seq;
        x.last_more = more;
        x.sent_at = Instant::now();
        self.out.clone_from(&x.last);
        self.send_out();
    }

    fn resend_last_dd(&mut self) {
        if let Some(x) = self.xchg.as_mut() {
            x.sent_at = Instant::now();
            self.out.clone_from(&x.last);
            self.send_out();
        }
    }

    fn db_desc(&mut self, from: Ipv4Addr, d: DbDesc, _headers_len: usize) {
        let init = d.flags & (wire::DD_I | wire::DD_MS) == (wire::DD_I | wire::DD_MS);
        let nbr_more = d.flags & wire::DD_M != 0;
        let we_are_master = u32::from(self.rid) > u32::from(from);
        match self.state {
            State::Down | State::Init => {}
            State::Full | State::Exchange
                if init
                    && self
                        .xchg
                        .as_ref()
                        .is_some_and(|x| !x.master && x.seq == d.seq) =>
            {
                // The master's initial packet again: our answer was lost.
                self.resend_last_dd();
            }
            State::Full | State::Exchange if init => {
                // The neighbour started over (SeqNumberMismatch or a restart).
                self.start_exchange();
                self.db_desc(from, d, _headers_len);
            }
            State::ExStart => {
                if init && !we_are_master {
                    // We are the slave: take the master's sequence number.
                    self.begin_exchange(false, d.seq);
                    self.send_next_dd(d.seq);
                } else if d.flags & (wire::DD_I | wire::DD_MS) == 0
                    && we_are_master
                    && self.xchg.as_ref().is_some_and(|x| x.seq == d.seq)
                {
                    // The slave answered our initial packet.
                    self.begin_exchange(true, d.seq);
                    self.send_next_dd(d.seq.wrapping_add(1));
                }
            }
            State::Exchange => {
                let Some(x) = self.xchg.as_ref() else {
                    return;
                };
                let (master, seq, last_more) = (x.master, x.seq, x.last_more);
                if master {
                    if d.seq != seq || d.flags & wire::DD_MS != 0 {
                        return; // a duplicate
                    }
                    if !last_more && !nbr_more {
                        self.full();
                    } else {
                        self.send_next_dd(seq.wrapping_add(1));
                    }
                } else if d.seq == seq {
                    self.resend_last_dd();
                } else if d.seq == seq.wrapping_add(1) && d.flags & wire::DD_MS != 0 {
                    self.send_next_dd(d.seq);
                    let done = self.xchg.as_ref().is_some_and(|x| !x.last_more);
                    if done && !nbr_more {
                        self.full();
                    }
                } else {
                    self.start_exchange();
                }
            }
            State::Full => {
                // The slave answers the master's last packet again if it comes again.
                if self
                    .xchg
                    .as_ref()
                    .is_some_and(|x| !x.master && x.seq == d.seq)
                {
                    self.resend_last_dd();
                }
            }
        }
    }

    /// Exchange done: we request nothing, so Full at once. Flood the router-LSA, and the
    /// externals from the start if there are any.
    fn full(&mut self) {
        // Keep the slave's last packet to answer a repeated one.
        let keep = self.xchg.take();
        self.set_state(State::Full);
        self.xchg = keep.filter(|x| !x.master);
        self.router_sent = None;
        self.send_router();
        if self.seq != 0 {
            self.sent_ns.fill(0);
            self.cursor = 0;
            self.unacked = 0;
        }
    }

    fn send_router(&mut self) {
        wire::lsu_begin(&mut self.out, self.rid);
        let r = std::mem::take(&mut self.router);
        wire::lsu_push(&mut self.out, &r);
        self.router = r;
        wire::finish(&mut self.out);
        self.send_out();
        self.router_sent = Some(Instant::now());
        self.c.lsas_sent.fetch_add(1, Ordering::Relaxed);
    }

    fn external_bytes(&self, i: usize, out: &mut [u8; wire::EXTERNAL_LSA_LEN]) -> bool {
        match self.ext[i] {
            Some(e) => {
                let age = if self.flushed { wire::MAX_AGE } else { 1 };
                wire::external_lsa(out, self.rid, age, self.seq, e);
                true
            }
            None => false,
        }
    }

    fn ls_request(&mut self, wanted: &[(u32, u32, u32)]) {
        let me = u32::from(self.rid);
        let room = self.room();
        wire::lsu_begin(&mut self.out, self.rid);
        let mut lsa = [0u8; wire::EXTERNAL_LSA_LEN];
        let mut n = 0u64;
        for &(kind, id, adv) in wanted {
            if adv != me {
                continue;
            }
            let bytes: Vec<u8> = match kind as u8 {
                wire::ROUTER_LSA if id == me => self.router.clone(),
                wire::EXTERNAL_LSA if self.seq != 0 => match self.by_id.get(&id).copied() {
                    Some(i) if self.external_bytes(i, &mut lsa) => lsa.to_vec(),
                    _ => continue,
                },
                _ => continue,
            };
            if self.out.len() + bytes.len() > wire::HEADER_LEN + room && n > 0 {
                wire::finish(&mut self.out);
                self.send_out();
                wire::lsu_begin(&mut self.out, self.rid);
            }
            wire::lsu_push(&mut self.out, &bytes);
            n += 1;
        }
        if n > 0 {
            wire::finish(&mut self.out);
            self.send_out();
            self.c.lsas_sent.fetch_add(n, Ordering::Relaxed);
        }
    }

    fn ls_update(&mut self, body: &[u8]) {
        let lsas = match wire::parse_ls_update(body) {
            Ok(l) => l,
            Err(_) => {
                self.c.bad_packets.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        self.acks.clear();
        for (h, _, ok) in lsas {
            if !ok {
                self.c.bad_packets.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.acks.push(h);
        }
        self.c
            .lsas_received
            .fetch_add(self.acks.len() as u64, Ordering::Relaxed);
        let per = (self.room() / wire::LSA_HEADER_LEN).max(1);
        let acks = std::mem::take(&mut self.acks);
        for chunk in acks.chunks(per) {
            wire::encode_ls_ack(&mut self.out, self.rid, chunk);
            self.send_out();
        }
        self.acks = acks;
    }

    fn ls_ack(&mut self, hs: &[LsaHeader]) {
        let me = u32::from(self.rid);
        let mut acked = 0u64;
        let now = self.now_ns();
        for h in hs.iter().filter(|h| h.adv == me) {
            match h.kind {
                wire::ROUTER_LSA if h.seq == self.router_seq => self.router_sent = None,
                wire::EXTERNAL_LSA if h.seq == self.seq => {
                    if (h.age >= wire::MAX_AGE) != self.flushed {
                        continue;
                    }
                    if let Some(&i) = self.by_id.get(&h.id) {
                        if self.sent_ns[i] != 0 {
                            let lat = now.saturating_sub(self.sent_ns[i]);
                            self.srtt_ns = if self.srtt_ns == 0 {
                                lat
                            } else {
                                (self.srtt_ns * 7 + lat) / 8
                            };
                            self.sent_ns[i] = 0;
                            self.unacked -= 1;
                            acked += 1;
                        }
                    }
                }
                _ => {}
            }
        }
        if acked > 0 {
            self.c.lsas_acked.fetch_add(acked, Ordering::Relaxed);
            self.c
                .ack_latency_ms
                .store(self.srtt_ns / 1_000_000, Ordering::Relaxed);
            self.publish();
        }
    }

    fn timers(&mut self) {
        let now = Instant::now();
        if now >= self.next_hello {
            let h = wire::Hello {
                mask: Ipv4Addr::from(mask_of(self.cfg.prefix_len)),
                hello_interval: self.cfg.hello,
                options: wire::OPT_E,
                priority: 1,
                dead_interval: self.cfg.dead,
                neighbors: self.nbr.into_iter().collect(),
            };
            wire::encode_hello(&mut self.out, self.rid, &h);
            self.send_out();
            self.next_hello = now + Duration::from_secs(u64::from(self.cfg.hello.max(1)));
        }
        if self.nbr.is_some()
            && self.state != State::Down
            && now.duration_since(self.last_hello_rx)
                > Duration::from_secs(u64::from(self.cfg.dead))
        {
            self.set_state(State::Down);
        }
        let rxmt = self.cfg.retransmit;
        match self.state {
            State::ExStart
                if self
                    .xchg
                    .as_ref()
                    .is_some_and(|x| now.duration_since(x.sent_at) >= rxmt) =>
            {
                self.send_initial_dd()
            }
            State::Exchange
                if self
                    .xchg
                    .as_ref()
                    .is_some_and(|x| x.master && now.duration_since(x.sent_at) >= rxmt) =>
            {
                self.resend_last_dd()
            }
            State::Full => {
                if self
                    .router_sent
                    .is_some_and(|t| now.duration_since(t) >= rxmt)
                {
                    self.send_router();
                    self.c.lsas_retransmitted.fetch_add(1, Ordering::Relaxed);
                }
                if now.duration_since(self.last_scan) >= Duration::from_millis(500) {
                    self.last_scan = now;
                    self.retransmit();
                }
            }
            _ => {}
        }
    }

    /// Send again the externals not acknowledged within the retransmission interval (or
    /// three smoothed acknowledgment latencies, if longer), at most a quarter window per
    /// scan.
    fn retransmit(&mut self) {
        if self.unacked == 0 {
            return;
        }
        let now = self.now_ns();
        let rxmt = (self.cfg.retransmit.as_nanos() as u64).max(self.srtt_ns * 3);
        let due: Vec<usize> = (0..self.cursor)
            .filter(|&i| self.sent_ns[i] != 0 && now.saturating_sub(self.sent_ns[i]) >= rxmt)
            .take((self.cfg.window / 4).max(1))
            .collect();
        if due.is_empty() {
            return;
        }
        self.c
            .lsas_retransmitted
            .fetch_add(due.len() as u64, Ordering::Relaxed);
        self.send_externals(&due, now);
    }

    /// Send the externals `idx` in as few Link State Updates as fit.
    fn send_externals(&mut self, idx: &[usize], now: u64) {
        let per = (self.room().saturating_sub(4) / wire::EXTERNAL_LSA_LEN).max(1);
        let mut lsa = [0u8; wire::EXTERNAL_LSA_LEN];
        let mut sent = 0u64;
        for chunk in idx.chunks(per) {
            wire::lsu_begin(&mut self.out, self.rid);
            let mut any = false;
            for &i in chunk {
                let mut bytes = std::mem::take(&mut self.out);
                let ok = self.external_bytes(i, &mut lsa);
                if ok {
                    wire::lsu_push(&mut bytes, &lsa);
                    self.sent_ns[i] = now;
                    any = true;
                    sent += 1;
                }
                self.out = bytes;
            }
            if any {
                wire::finish(&mut self.out);
                self.send_out();
            }
        }
        self.c.lsas_sent.fetch_add(sent, Ordering::Relaxed);
    }

    /// Flood externals not yet sent, while the window has room.
    fn flood(&mut self) {
        if self.state != State::Full || self.seq == 0 || self.cursor >= self.ext.len() {
            return;
        }
        let room = self.cfg.window.saturating_sub(self.unacked);
        if room == 0 {
            return;
        }
        let mut idx = Vec::with_capacity(room.min(self.ext.len() - self.cursor));
        while idx.len() < room && self.cursor < self.ext.len() {
            if self.ext[self.cursor].is_some() {
                idx.push(self.cursor);
            }
            self.cursor += 1;
        }
        self.unacked += idx.len();
        let now = self.now_ns();
        self.send_externals(&idx, now);
        self.publish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_state_ids_follow_appendix_e() {
        let p = |s: [u8; 4], l: u8| (u32::from(Ipv4Addr::from(s)), l);
        let ids = link_state_ids(&[
            p([10, 1, 0, 0], 16),
            p([10, 1, 0, 0], 24),
            p([10, 2, 0, 0], 16),
            p([10, 1, 0, 0], 8),
            p([10, 1, 0, 0], 32),
        ]);
        let ip = |s: [u8; 4]| Some(u32::from(Ipv4Addr::from(s)));
        // Longest first: the /32 takes 10.1.0.0, the /24 its broadcast, the /16 too.
        assert_eq!(ids[4], ip([10, 1, 0, 0]));
        assert_eq!(ids[1], ip([10, 1, 0, 255]));
        assert_eq!(ids[0], ip([10, 1, 255, 255]));
        assert_eq!(ids[2], ip([10, 2, 0, 0]));
        // 10.0.0.0/8 is its own network.
        assert_eq!(ids[3], ip([10, 0, 0, 0]));
        // Three prefixes on one network with no host bits left: the third goes without.
        let ids = link_state_ids(&[
            p([10, 3, 0, 0], 32),
            p([10, 3, 0, 0], 31),
            p([10, 3, 0, 0], 30),
        ]);
        assert_eq!(ids.iter().filter(|i| i.is_none()).count(), 0);
        let ids = link_state_ids(&[
            p([10, 4, 0, 1], 32),
            p([10, 4, 0, 0], 31),
            p([10, 4, 0, 0], 32),
        ]);
        assert_eq!(ids.iter().filter(|i| i.is_none()).count(), 1);
    }
}
