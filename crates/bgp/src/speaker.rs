//! Sessions and the RIB thread.
//!
//! One thread per neighbour runs its session (RFC 4271 §8, the active side: we connect,
//! OPEN, KEEPALIVE, then UPDATEs until an error, a NOTIFICATION or the hold timer ends it,
//! and we connect again after `connect_retry`). It parses each UPDATE in its own thread and
//! hands the RIB thread the prefixes with one shared path per UPDATE, over a bounded
//! channel: when the RIB falls behind, the session stops reading and TCP's window pushes
//! back on the neighbour.
//!
//! The RIB thread owns [`Rib`], applies what the sessions send, and gives the resulting FIB
//! changes to a [`FibSink`] in batches (everything that is queued, up to
//! [`MAX_BATCH`] changes).
//!
//! This first version only receives: it advertises nothing (no export policy yet), which is
//! what a router learning a table from its upstreams needs for forwarding.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::{BgpConfig, Family, NeighborConfig};
use crate::rib::{Change, PathInfo, PeerId, Rib};
use crate::wire::{self, Notification};

/// Most FIB changes handed to the sink at once.
pub const MAX_BATCH: usize = 65_536;

/// Most FIB changes handed to the sink in one call (the sink holds the sync's lock for it).
const SINK_CHUNK: usize = 8192;

/// UPDATEs queued from the sessions to the RIB thread (each up to ~900 prefixes).
const QUEUE: usize = 256;

/// Prefixes of an UPDATE whose RIB entries are read ahead at once ([`Rib::look_ahead`]).
const LOOK_AHEAD: usize = 64;

/// How often a session looks at its timers and the stop flag while waiting for data.
const TICK: Duration = Duration::from_millis(100);

/// The MP_REACH_NLRI a session takes: AFI, next hop, prefixes.
type MpNlri = (u16, IpAddr, Vec<(IpAddr, u8)>);

/// Distinct unresolved next hops a session watches for becoming usable (see
/// [`Conn::refresh_if_resolved`]); past this many, further ones are not watched.
const WATCHED_NEXT_HOPS: usize = 64;

/// Whether a next hop can be installed (RFC 4271 §9.1.2.1): on a connected subnet and not
/// one of the router's own addresses. Paths whose next hop is not are left out of the
/// decision (counted as `unresolved`), so that a less preferred usable path wins.
pub type Resolvable = Arc<dyn Fn(IpAddr) -> bool + Send + std::marker::Sync>;

/// Where the RIB's decisions go: ferrouter's FIB sync.
pub trait FibSink: Send + 'static {
    /// Apply these changes, in order.
    fn apply(&mut self, changes: &[Change]);
}

impl<F: FnMut(&[Change]) + Send + 'static> FibSink for F {
    fn apply(&mut self, changes: &[Change]) {
        self(changes)
    }
}

/// RFC 4271 §8 session states.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Not connected (waiting to retry).
    Idle,
    /// Connecting.
    Connect,
    /// OPEN sent, waiting for the neighbour's.
    OpenSent,
    /// OPENs exchanged, waiting for its KEEPALIVE.
    OpenConfirm,
    /// Up: routes flow.
    Established,
}

/// Counters of one neighbour (monotonic unless said).
#[derive(Debug, Default)]
struct Counters {
    updates_received: AtomicU64,
    prefixes_announced: AtomicU64,
    prefixes_withdrawn: AtomicU64,
    treat_as_withdraw: AtomicU64,
    attributes_discarded: AtomicU64,
    as_loops: AtomicU64,
    unresolved: AtomicU64,
    route_refresh_sent: AtomicU64,
    notifications_sent: AtomicU64,
    notifications_received: AtomicU64,
    established_transitions: AtomicU64,
    /// Prefixes this neighbour has a path for now (set by the RIB thread).
    prefixes: AtomicU64,
}

/// What changes rarely: the state and why the last session ended.
#[derive(Debug)]
struct Session {
    state: State,
    since: Instant,
    remote_router_id: Option<std::net::Ipv4Addr>,
    hold_time: Option<u16>,
    families: Vec<Family>,
    last_error: Option<String>,
}

/// One neighbour's live status.
#[derive(Debug)]
struct Neighbor {
    cfg: NeighborConfig,
    counters: Counters,
    session: Mutex<Session>,
}

impl Neighbor {
    fn set_state(&self, state: State) {
        if let Ok(mut s) = self.session.lock() {
            if s.state != state {
                s.state = state;
                s.since = Instant::now();
            }
        }
    }

    fn session_ended(&self, why: String) {
        if let Ok(mut s) = self.session.lock() {
            s.state = State::Idle;
            s.since = Instant::now();
            s.remote_router_id = None;
            s.hold_time = None;
            s.families.clear();
            s.last_error = Some(why);
        }
    }
}

/// The RIB's size, as the RIB thread last published it.
#[derive(Debug, Default)]
struct RibCounters {
    prefixes_v4: AtomicU64,
    prefixes_v6: AtomicU64,
    paths: AtomicU64,
    fib_changes: AtomicU64,
    batches: AtomicU64,
}

/// The speaker's status, shared with the API.
#[derive(Debug)]
pub struct Status {
    asn: u32,
    router_id: std::net::Ipv4Addr,
    neighbors: Vec<Neighbor>,
    rib: RibCounters,
}

/// One neighbour as `show bgp` prints it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct NeighborView {
    /// Its address.
    pub address: IpAddr,
    /// Its AS.
    pub remote_as: u32,
    /// From the config.
    pub description: Option<String>,
    /// Session state.
    pub state: State,
    /// Seconds in this state.
    pub state_s: u64,
    /// Its BGP identifier (while a session is up).
    pub remote_router_id: Option<std::net::Ipv4Addr>,
    /// Negotiated hold time.
    pub hold_time: Option<u16>,
    /// Negotiated families.
    pub families: Vec<Family>,
    /// Prefixes it has a path for now.
    pub prefixes: u64,
    /// UPDATE messages received.
    pub updates_received: u64,
    /// Prefixes announced to us (all UPDATEs).
    pub prefixes_announced: u64,
    /// Prefixes withdrawn (all UPDATEs).
    pub prefixes_withdrawn: u64,
    /// UPDATEs whose announcements were treated as withdrawals (RFC 7606).
    pub treat_as_withdraw: u64,
    /// Malformed optional attributes dropped (RFC 7606 attribute discard).
    pub attributes_discarded: u64,
    /// UPDATEs refused because our AS was in their AS_PATH.
    pub as_loops: u64,
    /// Announcements left out of the decision: next hop on no connected subnet, or ours.
    pub unresolved: u64,
    /// ROUTE-REFRESH requests sent (RFC 2918): a next hop that was unresolved has become
    /// usable, so the neighbour is asked to send its routes again.
    pub route_refresh_sent: u64,
    /// NOTIFICATIONs sent.
    pub notifications_sent: u64,
    /// NOTIFICATIONs received.
    pub notifications_received: u64,
    /// Times the session reached Established.
    pub established_transitions: u64,
    /// Why the last session ended.
    pub last_error: Option<String>,
}

/// The speaker as `show bgp` prints it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct View {
    /// Our AS.
    pub asn: u32,
    /// Our BGP identifier.
    pub router_id: std::net::Ipv4Addr,
    /// IPv4 prefixes with a best path.
    pub prefixes_v4: u64,
    /// IPv6 prefixes with a best path.
    pub prefixes_v6: u64,
    /// Distinct paths (attribute sets per neighbour) held.
    pub paths: u64,
    /// FIB changes handed to the fast path.
    pub fib_changes: u64,
    /// The neighbours, in config order.
    pub neighbors: Vec<NeighborView>,
}

impl Status {
    fn new(cfg: &BgpConfig) -> Status {
        Status {
            asn: cfg.asn,
            router_id: cfg.router_id,
            neighbors: cfg
                .neighbors
                .iter()
                .map(|n| Neighbor {
                    cfg: n.clone(),
                    counters: Counters::default(),
                    session: Mutex::new(Session {
                        state: State::Idle,
                        since: Instant::now(),
                        remote_router_id: None,
                        hold_time: None,
                        families: Vec::new(),
                        last_error: None,
                    }),
                })
                .collect(),
            rib: RibCounters::default(),
        }
    }

    /// A snapshot for the API.
    pub fn view(&self) -> View {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        View {
            asn: self.asn,
            router_id: self.router_id,
            prefixes_v4: get(&self.rib.prefixes_v4),
            prefixes_v6: get(&self.rib.prefixes_v6),
            paths: get(&self.rib.paths),
            fib_changes: get(&self.rib.fib_changes),
            neighbors: self
                .neighbors
                .iter()
                .map(|n| {
                    let c = &n.counters;
                    let (state, state_s, rid, hold, fams, err) = match n.session.lock() {
                        Ok(s) => (
                            s.state,
                            s.since.elapsed().as_secs(),
                            s.remote_router_id,
                            s.hold_time,
                            s.families.clone(),
                            s.last_error.clone(),
                        ),
                        Err(_) => (State::Idle, 0, None, None, vec![], None),
                    };
                    NeighborView {
                        address: n.cfg.address,
                        remote_as: n.cfg.remote_as,
                        description: n.cfg.description.clone(),
                        state,
                        state_s,
                        remote_router_id: rid,
                        hold_time: hold,
                        families: fams,
                        prefixes: get(&c.prefixes),
                        updates_received: get(&c.updates_received),
                        prefixes_announced: get(&c.prefixes_announced),
                        prefixes_withdrawn: get(&c.prefixes_withdrawn),
                        treat_as_withdraw: get(&c.treat_as_withdraw),
                        attributes_discarded: get(&c.attributes_discarded),
                        as_loops: get(&c.as_loops),
                        unresolved: get(&c.unresolved),
                        route_refresh_sent: get(&c.route_refresh_sent),
                        notifications_sent: get(&c.notifications_sent),
                        notifications_received: get(&c.notifications_received),
                        established_transitions: get(&c.established_transitions),
                        last_error: err,
                    }
                })
                .collect(),
        }
    }
}

/// A prefix: address (host bits clear) and length.
type Prefix = (IpAddr, u8);

/// What a session hands the RIB thread.
enum RibMsg {
    /// One UPDATE's effect.
    Update {
        peer: PeerId,
        withdraw: Vec<Prefix>,
        announce: Vec<(Arc<PathInfo>, Vec<Prefix>)>,
    },
    /// The session ended: drop its paths.
    Down { peer: PeerId },
}

/// A running speaker.
pub struct Speaker {
    status: Arc<Status>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Speaker {
    /// Start a session per neighbour and the RIB thread feeding `sink`; announcements whose
    /// next hop is not `resolvable` are left out of the decision.
    pub fn start(
        cfg: BgpConfig,
        resolvable: Resolvable,
        sink: impl FibSink,
    ) -> std::io::Result<Speaker> {
        let status = Arc::new(Status::new(&cfg));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = sync_channel(QUEUE);
        let mut threads = Vec::new();
        let cfg = Arc::new(cfg);
        {
            let (status, stop) = (status.clone(), stop.clone());
            let decision = crate::rib::Decision {
                always_compare_med: cfg.always_compare_med,
            };
            threads.push(
                std::thread::Builder::new()
                    .name("bgp-rib".into())
                    .spawn(move || rib_thread(rx, status, sink, stop, decision))?,
            );
        }
        for i in 0..cfg.neighbors.len() {
            let (st, sp, tx, cfg) = (status.clone(), stop.clone(), tx.clone(), cfg.clone());
            let res = resolvable.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("bgp-{}", cfg.neighbors[i].address))
                .spawn(move || session_thread(i as PeerId, &cfg, &st, &tx, &sp, &res));
            match spawned {
                Ok(h) => threads.push(h),
                Err(e) => {
                    let mut s = Speaker {
                        status,
                        stop,
                        threads,
                    };
                    s.shutdown();
                    return Err(e);
                }
            }
        }
        Ok(Speaker {
            status,
            stop,
            threads,
        })
    }

    /// The status the API reads.
    pub fn status(&self) -> Arc<Status> {
        self.status.clone()
    }

    /// Close every session (Cease / Administrative Shutdown) and stop the threads.
    pub fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Speaker {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn rib_thread(
    rx: Receiver<RibMsg>,
    status: Arc<Status>,
    mut sink: impl FibSink,
    stop: Arc<AtomicBool>,
    decision: crate::rib::Decision,
) {
    let mut rib = Rib::with_decision(status.neighbors.len(), decision);
    let mut changes: Vec<Change> = Vec::with_capacity(MAX_BATCH);
    let mut touched = vec![false; status.neighbors.len()];
    loop {
        let first = match rx.recv_timeout(TICK) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
        apply(&mut rib, first, &mut changes, &mut touched);
        while changes.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(m) => apply(&mut rib, m, &mut changes, &mut touched),
                Err(_) => break,
            }
        }
        if !changes.is_empty() {
            // A session going down yields a change per prefix it had: hand them over in
            // pieces, so the sync's lock is let go in between.
            for c in changes.chunks(SINK_CHUNK) {
                sink.apply(c);
            }
            status
                .rib
                .fib_changes
                .fetch_add(changes.len() as u64, Ordering::Relaxed);
            status.rib.batches.fetch_add(1, Ordering::Relaxed);
            changes.clear();
        }
        let (v4, v6) = rib.prefixes();
        status.rib.prefixes_v4.store(v4 as u64, Ordering::Relaxed);
        status.rib.prefixes_v6.store(v6 as u64, Ordering::Relaxed);
        status
            .rib
            .paths
            .store(rib.path_count() as u64, Ordering::Relaxed);
        for (i, t) in touched.iter_mut().enumerate() {
            if std::mem::take(t) {
                status.neighbors[i]
                    .counters
                    .prefixes
                    .store(rib.prefixes_of(i as PeerId) as u64, Ordering::Relaxed);
            }
        }
    }
}

fn apply(rib: &mut Rib, m: RibMsg, out: &mut Vec<Change>, touched: &mut [bool]) {
    match m {
        RibMsg::Update {
            peer,
            withdraw,
            announce,
        } => {
            for chunk in withdraw.chunks(LOOK_AHEAD) {
                rib.look_ahead(chunk);
                for &p in chunk {
                    rib.withdraw(peer, p, out);
                }
            }
            for (path, prefixes) in announce {
                let h = rib.path(&path);
                for chunk in prefixes.chunks(LOOK_AHEAD) {
                    rib.look_ahead(chunk);
                    for &p in chunk {
                        rib.announce(peer, p, h, out);
                    }
                }
                rib.done_with(h);
            }
            if let Some(t) = touched.get_mut(peer as usize) {
                *t = true;
            }
        }
        RibMsg::Down { peer } => {
            rib.peer_down(peer, out);
            if let Some(t) = touched.get_mut(peer as usize) {
                *t = true;
            }
        }
    }
}

/// Why a session ended.
enum End {
    /// We are stopping.
    Stop,
    /// The connection failed or closed.
    Io(String),
    /// We sent this NOTIFICATION.
    Sent(Notification),
    /// The neighbour sent this NOTIFICATION.
    Received(Notification),
}

impl End {
    fn describe(&self) -> String {
        match self {
            End::Stop => "stopped".into(),
            End::Io(e) => e.clone(),
            End::Sent(n) => format!("sent NOTIFICATION: {n}"),
            End::Received(n) => format!("received NOTIFICATION: {n}"),
        }
    }
}

fn session_thread(
    peer: PeerId,
    cfg: &BgpConfig,
    status: &Status,
    tx: &SyncSender<RibMsg>,
    stop: &AtomicBool,
    resolvable: &Resolvable,
) {
    let me = &status.neighbors[peer as usize];
    let retry = Duration::from_secs(u64::from(cfg.connect_retry.max(1)));
    while !stop.load(Ordering::Relaxed) {
        me.set_state(State::Connect);
        let addr = SocketAddr::new(me.cfg.address, me.cfg.port);
        let end = match TcpStream::connect_timeout(&addr, retry.min(Duration::from_secs(5))) {
            Ok(s) => {
                let mut sess = Conn::new(s, peer, cfg, me, tx, stop, resolvable);
                let end = sess.run();
                if sess.established {
                    // Its routes go whatever ended it.
                    let _ = tx.send(RibMsg::Down { peer });
                }
                end
            }
            Err(e) => End::Io(format!("connect to {addr}: {e}")),
        };
        if let End::Stop = end {
            me.set_state(State::Idle);
            return;
        }
        let why = end.describe();
        tracing::info!(neighbor = %me.cfg.address, "BGP session down: {why}");
        me.session_ended(why);
        let until = Instant::now() + retry;
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(TICK);
        }
    }
}

/// One TCP connection's session.
struct Conn<'a> {
    s: TcpStream,
    peer: PeerId,
    cfg: &'a BgpConfig,
    me: &'a Neighbor,
    tx: &'a SyncSender<RibMsg>,
    stop: &'a AtomicBool,
    resolvable: &'a Resolvable,
    buf: Vec<u8>,
    /// Start of unparsed data in `buf`.
    start: usize,
    out: Vec<u8>,
    hold: Duration,
    /// The hold time agreed in the OPENs, in force once Established.
    negotiated_hold: Duration,
    last_rx: Instant,
    last_tx: Instant,
    four_octet: bool,
    ebgp: bool,
    families: Vec<Family>,
    remote_id: std::net::Ipv4Addr,
    established: bool,
    /// The neighbour advertised the route refresh capability (RFC 2918).
    route_refresh: bool,
    /// Next hops of paths left out of the decision, with the AFI of their prefixes: when
    /// one becomes usable, the neighbour is asked for that AFI's routes again.
    watched: Vec<(IpAddr, u16)>,
}

impl<'a> Conn<'a> {
    fn new(
        s: TcpStream,
        peer: PeerId,
        cfg: &'a BgpConfig,
        me: &'a Neighbor,
        tx: &'a SyncSender<RibMsg>,
        stop: &'a AtomicBool,
        resolvable: &'a Resolvable,
    ) -> Conn<'a> {
        Conn {
            s,
            peer,
            cfg,
            me,
            tx,
            stop,
            resolvable,
            buf: Vec::with_capacity(1 << 18),
            start: 0,
            out: Vec::with_capacity(wire::MAX_MESSAGE_LEN),
            // RFC 4271 §8.2.2: a large hold timer until the OPENs are exchanged.
            hold: Duration::from_secs(240),
            negotiated_hold: Duration::from_secs(240),
            last_rx: Instant::now(),
            last_tx: Instant::now(),
            four_octet: false,
            ebgp: me.cfg.remote_as != cfg.asn,
            families: Vec::new(),
            remote_id: std::net::Ipv4Addr::UNSPECIFIED,
            established: false,
            route_refresh: false,
            watched: Vec::new(),
        }
    }

    fn send(&mut self) -> Result<(), End> {
        let r = self.s.write_all(&self.out);
        self.out.clear();
        self.last_tx = Instant::now();
        r.map_err(|e| End::Io(format!("write: {e}")))
    }

    fn notify(&mut self, n: Notification) -> End {
        wire::encode_notification(&mut self.out, &n);
        let _ = self.send();
        self.me
            .counters
            .notifications_sent
            .fetch_add(1, Ordering::Relaxed);
        End::Sent(n)
    }

    fn run(&mut self) -> End {
        let _ = self.s.set_nodelay(true);
        if let Err(e) = self
            .s
            .set_read_timeout(Some(TICK))
            .and_then(|_| self.s.set_write_timeout(Some(Duration::from_secs(10))))
        {
            return End::Io(format!("socket options: {e}"));
        }
        let fams: Vec<(u16, u8)> = self
            .me
            .cfg
            .families()
            .iter()
            .map(|f| match f {
                Family::Ipv4 => (wire::AFI_IPV4, wire::SAFI_UNICAST),
                Family::Ipv6 => (wire::AFI_IPV6, wire::SAFI_UNICAST),
            })
            .collect();
        wire::encode_open(
            &mut self.out,
            self.cfg.asn,
            self.cfg.hold_time,
            self.cfg.router_id,
            &fams,
        );
        if let Err(e) = self.send() {
            return e;
        }
        self.me.set_state(State::OpenSent);
        match self.session() {
            Ok(()) => End::Stop,
            Err(e) => e,
        }
    }

    /// Read and handle messages until the session ends (Err) or we stop (Ok, after a
    /// Cease).
    fn session(&mut self) -> Result<(), End> {
        let mut state = State::OpenSent;
        loop {
            if self.stop.load(Ordering::Relaxed) {
                // Administrative Shutdown (our OPEN has gone out: RFC 4271 §8.2.2).
                let _ = self.notify(Notification::new(wire::ERR_CEASE, 2, &[]));
                return Ok(());
            }
            // Everything whole in the buffer.
            while let Some((kind, len)) = self.next_message()? {
                self.last_rx = Instant::now();
                let body_at = self.start + wire::HEADER_LEN;
                let end = self.start + len;
                state = self.handle(state, kind, body_at, end)?;
                self.start = end;
            }
            // Compact and read more.
            if self.start > 0 {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            let old = self.buf.len();
            self.buf.resize(old + (1 << 16), 0);
            let r = self.s.read(&mut self.buf[old..]);
            match r {
                Ok(0) => {
                    self.buf.truncate(old);
                    return Err(End::Io("the neighbour closed the connection".into()));
                }
                Ok(n) => {
                    self.buf.truncate(old + n);
                    // Bytes arrived: the neighbour is alive even before they are parsed.
                    self.last_rx = Instant::now();
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) =>
                {
                    self.buf.truncate(old);
                }
                Err(e) => {
                    self.buf.truncate(old);
                    return Err(End::Io(format!("read: {e}")));
                }
            }
            self.timers(state)?;
        }
    }

    fn next_message(&self) -> Result<Option<(u8, usize)>, End> {
        match wire::frame(&self.buf[self.start..]) {
            Ok(m) => Ok(m),
            Err(n) => Err(End::Sent(n)),
        }
        .map_err(|e| match e {
            End::Sent(n) => {
                // Send it (frame errors are ours to report).
                let mut out = Vec::new();
                wire::encode_notification(&mut out, &n);
                let _ = (&self.s).write_all(&out);
                self.me
                    .counters
                    .notifications_sent
                    .fetch_add(1, Ordering::Relaxed);
                End::Sent(n)
            }
            other => other,
        })
    }

    /// End the session (Cease / Maximum Number of Prefixes Reached, RFC 4486) if the
    /// neighbour has paths for more prefixes than its `max_prefixes`. Checked against what
    /// the RIB holds for it, which trails the session by the UPDATEs queued (at most
    /// `QUEUE`), after each UPDATE and at every tick.
    fn check_max_prefixes(&mut self) -> Result<(), End> {
        let Some(max) = self.me.cfg.max_prefixes else {
            return Ok(());
        };
        if self.me.counters.prefixes.load(Ordering::Relaxed) <= u64::from(max) {
            return Ok(());
        }
        // AFI, SAFI and the limit, as RFC 4486 suggests.
        let mut data = wire::AFI_IPV4.to_be_bytes().to_vec();
        data.push(wire::SAFI_UNICAST);
        data.extend_from_slice(&max.to_be_bytes());
        Err(self.notify(Notification::new(wire::ERR_CEASE, 1, &data)))
    }

    /// Hold timer, keepalives, the prefix limit and the watched next hops.
    fn timers(&mut self, state: State) -> Result<(), End> {
        if state == State::Established {
            self.check_max_prefixes()?;
            self.refresh_if_resolved()?;
        }
        if !self.hold.is_zero() && self.last_rx.elapsed() > self.hold {
            return Err(self.notify(Notification::new(wire::ERR_HOLD, 0, &[])));
        }
        self.keepalive_if_due(state)
    }

    /// A path whose next hop could not be installed was dropped, not kept (the RIB holds
    /// only usable paths), so when such a next hop becomes usable (an address added on its
    /// subnet), ask the neighbour to send that AFI's routes again (ROUTE-REFRESH, RFC 2918),
    /// if it advertised the capability. Checked every tick, for at most
    /// [`WATCHED_NEXT_HOPS`] next hops; each is forgotten once refreshed.
    fn refresh_if_resolved(&mut self) -> Result<(), End> {
        if self.watched.is_empty() {
            return Ok(());
        }
        let resolvable = self.resolvable;
        let mut afis: Vec<u16> = Vec::new();
        self.watched.retain(|&(nh, afi)| {
            let now = resolvable(nh);
            if now && !afis.contains(&afi) {
                afis.push(afi);
            }
            !now
        });
        if afis.is_empty() || !self.route_refresh {
            return Ok(());
        }
        for afi in afis {
            wire::encode_route_refresh(&mut self.out, afi, wire::SAFI_UNICAST);
            self.me
                .counters
                .route_refresh_sent
                .fetch_add(1, Ordering::Relaxed);
            tracing::info!(neighbor = %self.me.cfg.address, afi, "next hop usable now: route refresh requested");
        }
        self.send()
    }

    /// Send a KEEPALIVE if a third of the hold time has passed since we last sent anything.
    fn keepalive_if_due(&mut self, state: State) -> Result<(), End> {
        if state != State::OpenSent
            && !self.hold.is_zero()
            && self.last_tx.elapsed() >= self.hold / 3
        {
            wire::encode_keepalive(&mut self.out);
            self.send()?;
        }
        Ok(())
    }

    fn handle(&mut self, state: State, kind: u8, body_at: usize, end: usize) -> Result<State, End> {
        match (state, kind) {
            (_, wire::MSG_NOTIFICATION) => {
                self.me
                    .counters
                    .notifications_received
                    .fetch_add(1, Ordering::Relaxed);
                Err(End::Received(wire::parse_notification(
                    &self.buf[body_at..end],
                )))
            }
            (State::OpenSent, wire::MSG_OPEN) => {
                let open = match wire::parse_open(&self.buf[body_at..end]) {
                    Ok(o) => o,
                    Err(n) => return Err(self.notify(n)),
                };
                self.opened(open)?;
                Ok(State::OpenConfirm)
            }
            (State::OpenConfirm, wire::MSG_KEEPALIVE) => {
                // The negotiated hold time from here on (a 0 one would have left OpenConfirm
                // waiting for ever).
                self.hold = self.negotiated_hold;
                self.established = true;
                self.me.set_state(State::Established);
                self.me
                    .counters
                    .established_transitions
                    .fetch_add(1, Ordering::Relaxed);
                tracing::info!(neighbor = %self.me.cfg.address, "BGP session established");
                Ok(State::Established)
            }
            (State::Established, wire::MSG_KEEPALIVE) => Ok(state),
            (State::Established, wire::MSG_UPDATE) => {
                self.update(body_at, end)?;
                Ok(state)
            }
            // We advertise nothing, so there is nothing to refresh.
            (State::Established, wire::MSG_ROUTE_REFRESH) => Ok(state),
            // RFC 4271 §6.6: any other message in this state is a Finite State Machine
            // Error (subcode per RFC 6608: 1 OpenSent, 2 OpenConfirm, 3 Established).
            (s, _) => {
                let sub = match s {
                    State::OpenSent => 1,
                    State::OpenConfirm => 2,
                    _ => 3,
                };
                Err(self.notify(Notification::new(wire::ERR_FSM, sub, &[])))
            }
        }
    }

    /// The neighbour's OPEN: check it, settle the session's parameters, KEEPALIVE.
    fn opened(&mut self, open: wire::Open) -> Result<(), End> {
        let n = &self.me.cfg;
        if open.asn != n.remote_as {
            // Bad Peer AS, with the AS it sent (2 octets, as the field in the OPEN).
            let data = (open.asn.min(u32::from(u16::MAX)) as u16).to_be_bytes();
            return Err(self.notify(Notification::new(wire::ERR_OPEN, 2, &data)));
        }
        if !self.ebgp && open.router_id == self.cfg.router_id {
            return Err(self.notify(Notification::new(wire::ERR_OPEN, 3, &[])));
        }
        let ours = self.cfg.hold_time;
        let hold = if ours == 0 || open.hold_time == 0 {
            0
        } else {
            ours.min(open.hold_time)
        };
        self.negotiated_hold = Duration::from_secs(u64::from(hold));
        self.four_octet = open.four_octet_as;
        // A neighbour without multiprotocol capabilities speaks IPv4 unicast (RFC 4760 §8).
        let theirs: Vec<(u16, u8)> = if open.families.is_empty() {
            vec![(wire::AFI_IPV4, wire::SAFI_UNICAST)]
        } else {
            open.families.clone()
        };
        self.families = n
            .families()
            .into_iter()
            .filter(|f| {
                let afi = match f {
                    Family::Ipv4 => wire::AFI_IPV4,
                    Family::Ipv6 => wire::AFI_IPV6,
                };
                theirs.contains(&(afi, wire::SAFI_UNICAST))
            })
            .collect();
        self.remote_id = open.router_id;
        self.route_refresh = open.route_refresh;
        if let Ok(mut s) = self.me.session.lock() {
            s.remote_router_id = Some(open.router_id);
            s.hold_time = Some(hold);
            s.families = self.families.clone();
        }
        self.me.set_state(State::OpenConfirm);
        wire::encode_keepalive(&mut self.out);
        self.send()
    }

    fn update(&mut self, body_at: usize, end: usize) -> Result<(), End> {
        let c = &self.me.counters;
        c.updates_received.fetch_add(1, Ordering::Relaxed);
        let u = match wire::parse_update(&self.buf[body_at..end], self.four_octet) {
            Ok(u) => u,
            Err(n) => return Err(self.notify(n)),
        };
        c.attributes_discarded
            .fetch_add(u64::from(u.discarded_attrs), Ordering::Relaxed);
        let v4 = self.families.contains(&Family::Ipv4);
        let v6 = self.families.contains(&Family::Ipv6);
        let mut withdraw: Vec<(IpAddr, u8)> = Vec::new();
        if v4 {
            withdraw.extend(u.withdrawn.iter());
        }
        if let Some(mp) = &u.mp_unreach {
            if (mp.afi() == wire::AFI_IPV6 && v6) || (mp.afi() == wire::AFI_IPV4 && v4) {
                withdraw.extend(mp.iter());
            }
        }
        let mut refuse = u.treat_as_withdraw.is_some();
        if refuse {
            c.treat_as_withdraw.fetch_add(1, Ordering::Relaxed);
        } else if u.attrs.as_path.contains(self.cfg.asn) {
            c.as_loops.fetch_add(1, Ordering::Relaxed);
            refuse = true;
        }
        let mut announce = Vec::new();
        let v4_nlri: Vec<(IpAddr, u8)> = if v4 {
            u.nlri.iter().collect()
        } else {
            Vec::new()
        };
        let mp_nlri: Option<MpNlri> = u.mp_reach.as_ref().and_then(|mp| {
            let ok = (mp.afi == wire::AFI_IPV6 && v6) || (mp.afi == wire::AFI_IPV4 && v4);
            ok.then(|| (mp.afi, mp.next_hop, mp.nlri.iter().collect()))
        });
        let announced = v4_nlri.len() + mp_nlri.as_ref().map_or(0, |m| m.2.len());
        c.prefixes_announced
            .fetch_add(announced as u64, Ordering::Relaxed);
        if refuse {
            withdraw.extend(v4_nlri);
            if let Some((_, _, p)) = mp_nlri {
                withdraw.extend(p);
            }
        } else {
            let attrs = Arc::new(u.attrs);
            let local_pref = if self.ebgp {
                self.me.cfg.local_pref
            } else {
                attrs.local_pref.unwrap_or(100)
            };
            let path = |next_hop: IpAddr| {
                Arc::new(PathInfo {
                    peer: self.peer,
                    peer_router_id: self.remote_id,
                    peer_addr: self.me.cfg.address,
                    ebgp: self.ebgp,
                    local_pref,
                    next_hop,
                    attrs: attrs.clone(),
                })
            };
            // A path whose next hop cannot be installed takes no part in the decision: it
            // is a withdrawal of this neighbour's earlier path for those prefixes. Its next
            // hop is watched (`refresh_if_resolved`).
            let mut unresolved: Vec<(IpAddr, u16)> = Vec::new();
            let mut add = |nh: Option<IpAddr>, afi: u16, p: Vec<Prefix>| match nh {
                Some(nh) if (self.resolvable)(nh) => announce.push((path(nh), p)),
                _ => {
                    c.unresolved.fetch_add(1, Ordering::Relaxed);
                    if let Some(nh) = nh {
                        unresolved.push((nh, afi));
                    }
                    withdraw.extend(p);
                }
            };
            if !v4_nlri.is_empty() {
                // parse_update guarantees NEXT_HOP when there are IPv4 NLRI (else it is a
                // treat-as-withdraw); a missing one is unresolvable anyway.
                add(attrs.next_hop, wire::AFI_IPV4, v4_nlri);
            }
            if let Some((afi, nh, p)) = mp_nlri {
                if !p.is_empty() {
                    add(Some(nh), afi, p);
                }
            }
            for w in unresolved {
                if !self.watched.contains(&w) && self.watched.len() < WATCHED_NEXT_HOPS {
                    self.watched.push(w);
                }
            }
        }
        c.prefixes_withdrawn
            .fetch_add(withdraw.len() as u64, Ordering::Relaxed);
        self.check_max_prefixes()?;
        if withdraw.is_empty() && announce.is_empty() {
            return Ok(());
        }
        // Waits while the RIB thread is behind: we stop reading and TCP pushes back, but
        // KEEPALIVEs still go out, so that the neighbour's hold timer does not expire.
        let mut msg = RibMsg::Update {
            peer: self.peer,
            withdraw,
            announce,
        };
        loop {
            match self.tx.try_send(msg) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Full(m)) => {
                    msg = m;
                    if self.stop.load(Ordering::Relaxed) {
                        return Err(End::Stop);
                    }
                    self.keepalive_if_due(State::Established)?;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(TrySendError::Disconnected(_)) => {
                    return Err(End::Io("the RIB thread stopped".into()))
                }
            }
        }
    }
}

/// The session state machine (RFC 4271 §8) on a real loopback TCP connection, the test
/// playing the neighbour: every message in every state the session can be in once
/// connected (OpenSent, OpenConfirm, Established), header and OPEN errors, the hold and
/// keepalive timers (with the clock moved by setting the last-received/sent instants),
/// a manual stop, the neighbour closing, and the Idle/Connect loop of an unreachable
/// neighbour.
///
/// Collisions (§6.8) cannot arise: the speaker only opens connections (it never listens),
/// so there is never a second connection to the same neighbour to resolve; an OPEN on an
/// open session is therefore a Finite State Machine Error, which the table checks.
#[cfg(test)]
mod fsm_tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener};

    const OURS: u32 = 65000;
    const THEIRS: u32 = 65001;
    const OUR_ID: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);

    struct Rig {
        cfg: BgpConfig,
        status: Status,
        stop: AtomicBool,
        tx: SyncSender<RibMsg>,
        _rx: Receiver<RibMsg>,
        resolvable: Resolvable,
        ours: Option<TcpStream>,
        peer: TcpStream,
    }

    fn rig(remote_as: u32, hold_time: u16) -> Rig {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let ours = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (peer, _) = l.accept().unwrap();
        peer.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let cfg = BgpConfig {
            asn: OURS,
            router_id: OUR_ID,
            hold_time,
            connect_retry: 1,
            always_compare_med: false,
            neighbors: vec![NeighborConfig {
                address: "127.0.0.1".parse().unwrap(),
                remote_as,
                port: l.local_addr().unwrap().port(),
                local_pref: 100,
                max_prefixes: None,
                families: vec![],
                description: None,
            }],
        };
        let status = Status::new(&cfg);
        let (tx, rx) = sync_channel(QUEUE);
        Rig {
            cfg,
            status,
            stop: AtomicBool::new(false),
            tx,
            _rx: rx,
            resolvable: Arc::new(|_| true),
            ours: Some(ours),
            peer,
        }
    }

    impl Rig {
        fn conn(&mut self) -> (Conn<'_>, &TcpStream) {
            let s = self.ours.take().expect("one connection per rig");
            s.set_read_timeout(Some(TICK)).unwrap();
            let c = Conn::new(
                s,
                0,
                &self.cfg,
                &self.status.neighbors[0],
                &self.tx,
                &self.stop,
                &self.resolvable,
            );
            (c, &self.peer)
        }
    }

    /// The messages the session sent that have arrived at the neighbour's end by now.
    fn received(peer: &TcpStream) -> Vec<(u8, Vec<u8>)> {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let mut r = peer;
        while let Ok(n) = r.read(&mut chunk) {
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            if wire::frame(&buf)
                .ok()
                .flatten()
                .is_some_and(|(_, l)| l == buf.len())
            {
                // Whole messages: wait briefly for more, then stop.
                peer.set_read_timeout(Some(Duration::from_millis(50)))
                    .unwrap();
            }
        }
        peer.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut out = Vec::new();
        let mut at = 0;
        while let Ok(Some((kind, len))) = wire::frame(&buf[at..]) {
            out.push((kind, buf[at + wire::HEADER_LEN..at + len].to_vec()));
            at += len;
        }
        out
    }

    fn open(asn: u32, hold: u16, id: Ipv4Addr) -> Vec<u8> {
        let mut m = Vec::new();
        wire::encode_open(
            &mut m,
            asn,
            hold,
            id,
            &[(wire::AFI_IPV4, wire::SAFI_UNICAST)],
        );
        m
    }

    fn keepalive() -> Vec<u8> {
        let mut m = Vec::new();
        wire::encode_keepalive(&mut m);
        m
    }

    /// An UPDATE with nothing in it (the End-of-RIB marker for IPv4, RFC 4724).
    fn end_of_rib() -> Vec<u8> {
        let mut m = vec![0xff; 16];
        m.extend_from_slice(&[0, 23, wire::MSG_UPDATE, 0, 0, 0, 0]);
        m
    }

    fn notification() -> Vec<u8> {
        let mut m = Vec::new();
        wire::encode_notification(&mut m, &Notification::new(wire::ERR_CEASE, 2, &[]));
        m
    }

    fn route_refresh() -> Vec<u8> {
        let mut m = Vec::new();
        wire::encode_route_refresh(&mut m, wire::AFI_IPV4, wire::SAFI_UNICAST);
        m
    }

    /// Hand the session one message as if it had just been read, and run the FSM on it.
    fn feed(c: &mut Conn<'_>, state: State, msg: &[u8]) -> Result<State, End> {
        c.buf.clear();
        c.buf.extend_from_slice(msg);
        c.start = 0;
        let (kind, len) = c.next_message()?.expect("a whole message");
        let r = c.handle(state, kind, wire::HEADER_LEN, len);
        c.start = len;
        r
    }

    /// Bring a fresh session to `state` the way a neighbour would.
    fn to_state(c: &mut Conn<'_>, peer: &TcpStream, state: State) {
        if state == State::OpenSent {
            return;
        }
        assert_eq!(
            feed(
                c,
                State::OpenSent,
                &open(THEIRS, 90, Ipv4Addr::new(10, 0, 0, 2))
            )
            .ok(),
            Some(State::OpenConfirm)
        );
        if state == State::Established {
            assert_eq!(
                feed(c, State::OpenConfirm, &keepalive()).ok(),
                Some(State::Established)
            );
        }
        let _ = received(peer);
    }

    fn sent_notification(e: &End, code: u8, subcode: u8) -> bool {
        matches!(e, End::Sent(n) if n.code == code && n.subcode == subcode)
    }

    #[derive(Debug, Clone, Copy)]
    enum Expect {
        /// The next state, and whether a KEEPALIVE goes out.
        Next(State, bool),
        /// A NOTIFICATION with this code and subcode ends the session.
        Notify(u8, u8),
        /// The neighbour's NOTIFICATION ends it; nothing is sent back.
        Ends,
    }

    /// Every message in every connected state: RFC 4271 §8.2.2's table for the active side.
    #[test]
    fn every_message_in_every_state() {
        use Expect::*;
        use State::*;
        let fsm = wire::ERR_FSM;
        type Case = (&'static str, fn() -> Vec<u8>, [Expect; 3]);
        let table: [Case; 5] = [
            (
                "OPEN",
                || open(THEIRS, 90, Ipv4Addr::new(10, 0, 0, 2)),
                [Next(OpenConfirm, true), Notify(fsm, 2), Notify(fsm, 3)],
            ),
            (
                "KEEPALIVE",
                keepalive,
                [
                    Notify(fsm, 1),
                    Next(Established, false),
                    Next(Established, false),
                ],
            ),
            (
                "UPDATE",
                end_of_rib,
                [Notify(fsm, 1), Notify(fsm, 2), Next(Established, false)],
            ),
            ("NOTIFICATION", notification, [Ends, Ends, Ends]),
            (
                "ROUTE-REFRESH",
                route_refresh,
                [Notify(fsm, 1), Notify(fsm, 2), Next(Established, false)],
            ),
        ];
        for (name, msg, expect) in table {
            for (state, want) in [OpenSent, OpenConfirm, Established].into_iter().zip(expect) {
                let mut r = rig(THEIRS, 90);
                let (mut c, peer) = r.conn();
                to_state(&mut c, peer, state);
                let got = feed(&mut c, state, &msg());
                let out = received(peer);
                let what = format!("{name} in {state:?}");
                match want {
                    Next(next, ka) => {
                        assert_eq!(got.as_ref().ok(), Some(&next), "{what}");
                        let kinds: Vec<u8> = out.iter().map(|m| m.0).collect();
                        let want: &[u8] = if ka { &[wire::MSG_KEEPALIVE] } else { &[] };
                        assert_eq!(kinds, want, "{what}: sent");
                    }
                    Notify(code, sub) => {
                        let e = got.err().unwrap_or_else(|| panic!("{what}: went on"));
                        assert!(sent_notification(&e, code, sub), "{what}: {}", e.describe());
                        assert_eq!(
                            out.last().map(|m| (m.0, m.1[0], m.1[1])),
                            Some((wire::MSG_NOTIFICATION, code, sub)),
                            "{what}: on the wire"
                        );
                    }
                    Ends => {
                        let e = got.err().unwrap_or_else(|| panic!("{what}: went on"));
                        assert!(
                            matches!(&e, End::Received(n) if n.code == wire::ERR_CEASE),
                            "{what}: {}",
                            e.describe()
                        );
                        assert!(out.is_empty(), "{what}: answered {out:?}");
                    }
                }
            }
        }
    }

    /// Header errors in any state end the session with a Message Header Error.
    #[test]
    fn header_errors() {
        let mut bad_marker = keepalive();
        bad_marker[3] = 0;
        let mut bad_len = keepalive();
        bad_len[17] = 18;
        let mut bad_type = keepalive();
        bad_type[18] = 9;
        let mut long_keepalive = keepalive();
        long_keepalive[17] = 20;
        long_keepalive.push(0);
        for (what, msg, sub) in [
            ("marker", bad_marker, 1),
            ("length 18", bad_len, 2),
            ("type 9", bad_type, 3),
            ("KEEPALIVE of 20 bytes", long_keepalive, 2),
        ] {
            for state in [State::OpenSent, State::Established] {
                let mut r = rig(THEIRS, 90);
                let (mut c, peer) = r.conn();
                to_state(&mut c, peer, state);
                c.buf.clear();
                c.buf.extend_from_slice(&msg);
                c.start = 0;
                let e = c.next_message().err().unwrap_or_else(|| panic!("{what}"));
                assert!(sent_notification(&e, wire::ERR_HEADER, sub), "{what}");
                let out = received(peer);
                assert_eq!(
                    out.last().map(|m| (m.0, m.1[1])),
                    Some((wire::MSG_NOTIFICATION, sub))
                );
            }
        }
    }

    /// The neighbour's OPEN is checked: its AS, our own identifier on iBGP, its version and
    /// hold time; the hold time and families are negotiated.
    #[test]
    fn open_errors_and_negotiation() {
        let id2 = Ipv4Addr::new(10, 0, 0, 2);
        // Bad Peer AS.
        let mut r = rig(THEIRS, 90);
        let (mut c, _) = r.conn();
        let e = feed(&mut c, State::OpenSent, &open(64999, 90, id2))
            .err()
            .unwrap();
        assert!(sent_notification(&e, wire::ERR_OPEN, 2), "{}", e.describe());
        // iBGP neighbour with our BGP identifier.
        let mut r = rig(OURS, 90);
        let (mut c, _) = r.conn();
        let e = feed(&mut c, State::OpenSent, &open(OURS, 90, OUR_ID))
            .err()
            .unwrap();
        assert!(sent_notification(&e, wire::ERR_OPEN, 3), "{}", e.describe());
        // Hold time 1 (unacceptable), version 3.
        // (Body after the 19-byte header: version, AS (2), hold time (2), identifier.)
        for (patch, sub) in [((23usize, 1u8), 6u8), ((19, 3), 1)] {
            let mut r = rig(THEIRS, 90);
            let (mut c, _) = r.conn();
            let mut m = open(THEIRS, 90, id2);
            if patch.0 == 23 {
                m[22] = 0;
            }
            m[patch.0] = patch.1;
            let e = feed(&mut c, State::OpenSent, &m).err().unwrap();
            assert!(
                sent_notification(&e, wire::ERR_OPEN, sub),
                "{}",
                e.describe()
            );
        }
        // The smaller hold time wins; 0 on either side turns the timers off.
        for (ours, theirs, want) in [(90, 30, 30), (9, 90, 9), (0, 90, 0), (90, 0, 0)] {
            let mut r = rig(THEIRS, ours);
            let (mut c, _) = r.conn();
            feed(&mut c, State::OpenSent, &open(THEIRS, theirs, id2))
                .ok()
                .unwrap();
            assert_eq!(
                c.negotiated_hold,
                Duration::from_secs(want),
                "{ours}/{theirs}"
            );
            // In force from Established on, not before (RFC 4271 §8.2.2).
            assert_eq!(c.hold, Duration::from_secs(240));
            feed(&mut c, State::OpenConfirm, &keepalive()).ok().unwrap();
            assert_eq!(c.hold, Duration::from_secs(want));
            assert_eq!(r.status.view().neighbors[0].state, State::Established);
        }
    }

    fn ago(s: u64) -> Instant {
        Instant::now()
            .checked_sub(Duration::from_secs(s))
            .expect("the machine has been up longer than the test's intervals")
    }

    /// HoldTimer_Expires in every connected state is a Hold Timer Expired NOTIFICATION;
    /// KeepaliveTimer_Expires sends a KEEPALIVE after OpenSent; a hold time of 0 runs no
    /// timer at all.
    #[test]
    fn hold_and_keepalive_timers() {
        for state in [State::OpenSent, State::OpenConfirm, State::Established] {
            let mut r = rig(THEIRS, 9);
            let (mut c, peer) = r.conn();
            to_state(&mut c, peer, state);
            // Within the hold time: nothing.
            c.last_rx = Instant::now();
            c.last_tx = Instant::now();
            assert!(c.timers(state).is_ok(), "{state:?}");
            assert!(received(peer).is_empty(), "{state:?}");
            // A third of the hold time since we last sent: a KEEPALIVE, except in OpenSent.
            let hold = c.hold.as_secs();
            c.last_tx = ago(hold / 3 + 1);
            assert!(c.timers(state).is_ok(), "{state:?}");
            let kinds: Vec<u8> = received(peer).iter().map(|m| m.0).collect();
            if state == State::OpenSent {
                assert!(kinds.is_empty(), "{state:?}: {kinds:?}");
            } else {
                assert_eq!(kinds, [wire::MSG_KEEPALIVE], "{state:?}");
            }
            // Nothing from the neighbour for longer than the hold time.
            c.last_rx = ago(hold + 1);
            let e = c.timers(state).err().unwrap_or_else(|| panic!("{state:?}"));
            assert!(sent_notification(&e, wire::ERR_HOLD, 0), "{state:?}");
            let out = received(peer);
            assert_eq!(
                out.last().map(|m| (m.0, m.1[0])),
                Some((wire::MSG_NOTIFICATION, wire::ERR_HOLD))
            );
        }
        // Hold time 0 negotiated: no hold timer, no keepalives, once Established.
        let mut r = rig(THEIRS, 0);
        let (mut c, peer) = r.conn();
        to_state(&mut c, peer, State::Established);
        c.last_rx = ago(3600);
        c.last_tx = ago(3600);
        assert!(c.timers(State::Established).is_ok());
        assert!(received(peer).is_empty());
    }

    /// ManualStop: a Cease / Administrative Shutdown goes out and the session ends cleanly;
    /// the neighbour closing the connection ends it as an I/O event.
    #[test]
    fn stop_and_close() {
        let mut r = rig(THEIRS, 90);
        r.stop.store(true, Ordering::Relaxed);
        let (mut c, peer) = r.conn();
        assert!(c.session().is_ok());
        let out = received(peer);
        assert_eq!(
            out.last().map(|m| (m.0, m.1[0], m.1[1])),
            Some((wire::MSG_NOTIFICATION, wire::ERR_CEASE, 2))
        );
        let mut r = rig(THEIRS, 90);
        let peer = r.peer.try_clone().unwrap();
        let (mut c, _) = r.conn();
        peer.shutdown(std::net::Shutdown::Both).unwrap();
        drop(peer);
        let e = c.session().expect_err("ended");
        assert!(
            matches!(&e, End::Io(m) if m.contains("closed")),
            "{}",
            e.describe()
        );
    }

    /// Idle and Connect: a neighbour that refuses the connection leaves the session Idle
    /// with the reason, and it is tried again every `connect_retry`; once the neighbour
    /// listens, the session reaches OpenSent (our OPEN arrives).
    #[test]
    fn connect_retry_from_idle() {
        // A port nothing listens on: bind, note it, close.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut r = rig(THEIRS, 90);
        r.cfg.neighbors[0].port = port;
        let cfg = Arc::new(r.cfg.clone());
        let status = Arc::new(Status::new(&cfg));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, _rx) = sync_channel(QUEUE);
        let t = {
            let (cfg, status, stop, res) = (
                cfg.clone(),
                status.clone(),
                stop.clone(),
                r.resolvable.clone(),
            );
            std::thread::spawn(move || session_thread(0, &cfg, &status, &tx, &stop, &res))
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let err = loop {
            let v = status.view();
            if let Some(e) = v.neighbors[0].last_error.clone() {
                break e;
            }
            assert!(Instant::now() < deadline, "never failed to connect");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(err.contains("connect to"), "{err}");
        let s = status.view().neighbors[0].state;
        assert!(matches!(s, State::Idle | State::Connect), "{s:?}");
        // The neighbour comes up on that port: the retry connects and sends our OPEN.
        let l = TcpListener::bind(("127.0.0.1", port)).unwrap();
        l.set_nonblocking(false).unwrap();
        let (peer, _) = l.accept().unwrap();
        peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let out = received(&peer);
        assert_eq!(out.first().map(|m| m.0), Some(wire::MSG_OPEN));
        stop.store(true, Ordering::Relaxed);
        drop(peer);
        t.join().unwrap();
        assert_eq!(status.view().neighbors[0].state, State::Idle);
    }
}
