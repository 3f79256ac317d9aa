//! The IKE daemon: the engine ([`crate::engine`]) on UDP port 500 of each local address
//! its peers use, in a thread of its own, with the child SAs handed to the data plane
//! through [`Dataplane`].
//!
//! The sockets are the Linux stack's: ferrouter's fast path passes traffic for the
//! router's own addresses to Linux, as it does BGP's. Commands (initiate, terminate, new
//! peers, `show`) take the engine's lock briefly; the thread holds it only while handling
//! one datagram or one tick.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::config::Peer;
use crate::engine::{ChildSpec, Counters, Engine, Event, SaInfo, NATT_PORT};

/// IKE's port (NAT traversal moves to [`NATT_PORT`]).
pub const IKE_PORT: u16 = 500;
/// How often timers run.
const TICK: Duration = Duration::from_millis(100);
/// Datagrams read from one socket per wake-up, so a flood on one cannot starve timers.
const BURST: usize = 64;

/// Where child SAs go: the fast path's SAD, or a test's list.
pub trait Dataplane: Send + 'static {
    /// Installs both directions, or neither: an error is logged, the child counted as
    /// failed and deleted ([`Engine::child_failed`]).
    fn child_up(&mut self, child: &ChildSpec) -> Result<(), String>;
    /// Removes both directions (`chosen`: [`Event::ChildDown`]'s).
    fn child_down(
        &mut self,
        peer: &str,
        tunnel: &str,
        spi_in: u32,
        spi_out: u32,
        chosen: Option<(std::net::IpAddr, u16)>,
    );
}

struct Shared {
    engine: Mutex<Engine>,
    /// By local address and port (500, and 4500 for NAT traversal).
    sockets: Mutex<HashMap<SocketAddr, Arc<UdpSocket>>>,
    dataplane: Mutex<Box<dyn Dataplane>>,
    stop: AtomicBool,
    port: u16,
}

/// The running daemon; stopped when dropped.
pub struct Daemon {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere must not take IKE down with it: the state is still consistent
    // between whole operations.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn dispatch(&self, events: Vec<Event>) {
        for e in events {
            match e {
                Event::Send {
                    local,
                    remote,
                    mut data,
                } => {
                    if local.port() == NATT_PORT {
                        // The non-ESP marker (RFC 3948 §2.2).
                        data.splice(0..0, [0u8; 4]);
                    }
                    self.send(local, remote, &data);
                }
                Event::Keepalive { local, remote } => self.send(local, remote, &[0xff]),
                Event::ChildUp(c) => {
                    let r = lock(&self.dataplane).child_up(&c);
                    match r {
                        Ok(()) => tracing::info!(
                            peer = c.peer,
                            tunnel = c.tunnel,
                            "IKE: child SA in {:08x} out {:08x} installed",
                            c.spi_in,
                            c.spi_out
                        ),
                        Err(e) => {
                            tracing::warn!(
                                peer = c.peer,
                                tunnel = c.tunnel,
                                "IKE: child SA in {:08x} out {:08x} not installed (deleted): {e}",
                                c.spi_in,
                                c.spi_out
                            );
                            let mut ev = Vec::new();
                            lock(&self.engine).child_failed(c.spi_in, Instant::now(), &mut ev);
                            self.dispatch(ev);
                        }
                    }
                }
                Event::ChildDown {
                    peer,
                    tunnel,
                    spi_in,
                    spi_out,
                    chosen,
                } => lock(&self.dataplane).child_down(&peer, &tunnel, spi_in, spi_out, chosen),
            }
        }
    }
    fn send(&self, local: SocketAddr, remote: SocketAddr, data: &[u8]) {
        let s = lock(&self.sockets).get(&local).cloned();
        match s {
            Some(s) => {
                if let Err(e) = s.send_to(data, remote) {
                    tracing::debug!(%local, %remote, "IKE: send failed: {e}");
                }
            }
            None => tracing::debug!(%local, "IKE: no socket on this address yet"),
        }
    }

    /// Binds the addresses the peers need that are not bound yet (they may appear later):
    /// IKE's port, and 4500 for NAT traversal when IKE is on 500.
    fn bind(&self, addrs: &[IpAddr]) {
        let mut want: Vec<SocketAddr> = addrs
            .iter()
            .map(|a| SocketAddr::new(*a, self.port))
            .collect();
        if self.port == IKE_PORT {
            want.extend(addrs.iter().map(|a| SocketAddr::new(*a, NATT_PORT)));
        }
        let mut socks = lock(&self.sockets);
        socks.retain(|a, _| want.contains(a));
        for a in want {
            if socks.contains_key(&a) {
                continue;
            }
            match UdpSocket::bind(a) {
                Ok(s) => {
                    if let Err(e) = s.set_nonblocking(true) {
                        tracing::warn!(addr = %a, "IKE: socket: {e}");
                        continue;
                    }
                    grow_receive_buffer(&s, a);
                    tracing::info!(addr = %a, "IKE: listening");
                    socks.insert(a, Arc::new(s));
                }
                Err(e) => tracing::debug!(addr = %a, "IKE: cannot bind: {e} (retrying)"),
            }
        }
    }
}

/// Receive buffer of each IKE socket: room for the bursts of thousands of initiators
/// (after a restart every peer comes back at once). The kernel's default (about 200 KB,
/// a hundred or so small datagrams by their memory cost) overflowed at 256 exchanges
/// outstanding in `ferrouter-lab bench ike`, and each loss cost its initiator a 2 s
/// retransmission.
const RECEIVE_BUFFER: libc::c_int = 4 << 20;

/// Give `s` [`RECEIVE_BUFFER`] bytes of receive buffer: past `net.core.rmem_max` as the
/// daemon may (CAP_NET_ADMIN), else as much as that allows.
fn grow_receive_buffer(s: &UdpSocket, addr: SocketAddr) {
    let set = |opt: libc::c_int| {
        // SAFETY: the descriptor is `s`'s, open for the call; the option value is a
        // c_int that lives across it, and its size is passed.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&RECEIVE_BUFFER as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        }
    };
    if set(libc::SO_RCVBUFFORCE) != 0 && set(libc::SO_RCVBUF) != 0 {
        tracing::debug!(%addr, "IKE: receive buffer: {}", std::io::Error::last_os_error());
    }
}

impl Daemon {
    /// Starts the daemon on port 500.
    pub fn start(peers: Vec<Peer>, dataplane: Box<dyn Dataplane>) -> std::io::Result<Daemon> {
        Daemon::start_on(peers, dataplane, IKE_PORT)
    }

    /// Starts it on another port (tests).
    pub fn start_on(
        peers: Vec<Peer>,
        dataplane: Box<dyn Dataplane>,
        port: u16,
    ) -> std::io::Result<Daemon> {
        let shared = Arc::new(Shared {
            engine: Mutex::new({
                let mut e = Engine::new(peers);
                e.set_port(port);
                e
            }),
            sockets: Mutex::new(HashMap::new()),
            dataplane: Mutex::new(dataplane),
            stop: AtomicBool::new(false),
            port,
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("ike".into())
            .spawn(move || run(&s))?;
        Ok(Daemon {
            shared,
            thread: Some(thread),
        })
    }

    /// New peers, live.
    pub fn set_peers(&self, peers: Vec<Peer>) {
        let mut ev = Vec::new();
        lock(&self.shared.engine).set_peers(peers, Instant::now(), &mut ev);
        self.shared.dispatch(ev);
    }

    pub fn initiate(&self, peer: &str) -> Result<(), String> {
        let mut ev = Vec::new();
        let r = lock(&self.shared.engine).initiate(peer, Instant::now(), &mut ev);
        self.shared.dispatch(ev);
        r
    }

    pub fn terminate(&self, peer: &str) -> Result<usize, String> {
        let mut ev = Vec::new();
        let r = lock(&self.shared.engine).terminate(peer, Instant::now(), &mut ev);
        self.shared.dispatch(ev);
        r
    }

    pub fn sas(&self) -> Vec<SaInfo> {
        lock(&self.shared.engine).sa_info(Instant::now())
    }

    /// [`Engine::sa_page`].
    pub fn sa_page(&self, peer: Option<&str>, skip: usize, limit: usize) -> (Vec<SaInfo>, usize) {
        lock(&self.shared.engine).sa_page(Instant::now(), peer, skip, limit)
    }

    pub fn counters(&self) -> (Counters, usize, usize) {
        let e = lock(&self.shared.engine);
        (e.counters.clone(), e.established(), e.half_open())
    }

    /// [`Daemon::counters`] and the child SAs of established IKE SAs, without a list.
    pub fn summary(&self) -> (Counters, usize, usize, usize) {
        let e = lock(&self.shared.engine);
        (
            e.counters.clone(),
            e.established(),
            e.half_open(),
            e.child_sas(),
        )
    }

    /// Virtual IPs leased from the peers' pools.
    pub fn leases(&self) -> usize {
        lock(&self.shared.engine).leases()
    }

    /// Half-open SAs above which cookies are asked for.
    pub fn set_cookie_threshold(&self, n: usize) {
        lock(&self.shared.engine).set_cookie_threshold(n);
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(s: &Shared) {
    let mut buf = vec![0u8; 65_536];
    let mut last_tick = Instant::now();
    let mut last_bind = Instant::now() - Duration::from_secs(10);
    while !s.stop.load(Ordering::Relaxed) {
        if last_bind.elapsed() >= Duration::from_secs(1) {
            let addrs = lock(&s.engine).local_addrs();
            s.bind(&addrs);
            last_bind = Instant::now();
        }
        let socks: Vec<(SocketAddr, Arc<UdpSocket>)> = lock(&s.sockets)
            .iter()
            .map(|(a, s)| (*a, s.clone()))
            .collect();
        let mut fds: Vec<libc::pollfd> = socks
            .iter()
            .map(|(_, s)| libc::pollfd {
                fd: s.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        if fds.is_empty() {
            std::thread::sleep(TICK);
        } else {
            // SAFETY: `fds` is a valid array of `fds.len()` pollfd structures for the whole
            // call, and the sockets it names stay open (held by `socks`).
            unsafe {
                libc::poll(
                    fds.as_mut_ptr(),
                    fds.len() as libc::nfds_t,
                    TICK.as_millis() as i32,
                )
            };
        }
        for (k, (addr, sock)) in socks.iter().enumerate() {
            if fds.get(k).is_none_or(|f| f.revents == 0) {
                continue;
            }
            for _ in 0..BURST {
                match sock.recv_from(&mut buf) {
                    Ok((n, from)) => {
                        let mut data = &buf[..n];
                        if addr.port() == NATT_PORT {
                            // IKE after the non-ESP marker; keepalives (and ESP, which
                            // the fast path keeps) are not IKE's.
                            match data {
                                [0, 0, 0, 0, rest @ ..] => data = rest,
                                _ => continue,
                            }
                        }
                        let mut ev = Vec::new();
                        lock(&s.engine).handle(Instant::now(), *addr, from, data, &mut ev);
                        s.dispatch(ev);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        tracing::debug!(addr = %addr, "IKE: receive: {e}");
                        break;
                    }
                }
            }
        }
        if last_tick.elapsed() >= TICK {
            let mut ev = Vec::new();
            lock(&s.engine).tick(Instant::now(), &mut ev);
            s.dispatch(ev);
            last_tick = Instant::now();
        }
    }
}
