//! The API's connections: one accept loop for the control unix socket and one for TCP, each
//! with a budget of its own, so that clients on TCP (who have not even authenticated when
//! they connect) can never take the file descriptors, tasks or slots the local CLI needs.
//!
//! - **Caps.** TCP: `api.max_connections` at once in all, `api.max_connections_per_address`
//!   from one client address; the unix socket: [`UNIX_MAX_CONNECTIONS`]. A connection over
//!   a cap is closed as soon as it is accepted, counted, and reported in the log at most
//!   every [`REPORT_EVERY`] with the number since the last report.
//! - **File descriptors.** The daemon raises its soft `RLIMIT_NOFILE` to the hard limit at
//!   start ([`raise_fd_limit`]); the TCP cap is then fitted under it with room for the unix
//!   socket's budget and [`FD_RESERVE`] for everything else ([`Limits::new`]).
//! - **Timeouts** (both listeners). A connection without a request in progress is closed
//!   `api.idle_timeout_s` after its accept or the end of its last response (bytes it sends
//!   or reads meanwhile count as activity); once the first byte of a request arrived, its
//!   head must be complete within `api.header_read_timeout_s`; its body must then arrive
//!   within `api.idle_timeout_s` (408). While the daemon works on a request (a capture may
//!   take an hour) nothing times out.
//!
//! The timers are this module's rather than hyper's `header_read_timeout`: hyper starts
//! that one as soon as it waits for a request, so it would also close keep-alive
//! connections after the (short) header timeout.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::response::Response;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::config::ApiSettings;

/// Connections the control unix socket serves at once (the CLI, local scripts, a local
/// Prometheus). More are closed at once and counted.
pub const UNIX_MAX_CONNECTIONS: usize = 64;

/// File descriptors kept for everything but the API's connections: ports and their
/// sockets, netlink, TAPs, BGP sessions, the history's files, the runtime's own.
pub const FD_RESERVE: u64 = 256;

/// How often at most a listener logs that it closed connections over its caps (or failed
/// to accept); the counters have every one.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);

/// The listeners' caps and timeouts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// TCP connections at once, in all.
    pub tcp_total: usize,
    /// TCP connections at once from one client address.
    pub tcp_per_address: usize,
    /// Unix socket connections at once.
    pub unix_total: usize,
    /// Time for a request's head, from its first byte.
    pub header_read: Duration,
    /// Time without a request in progress before a connection is closed; also the time a
    /// request's body may take.
    pub idle: Duration,
}

impl Limits {
    /// The limits of `api`, with the TCP cap fitted under the file descriptor limit
    /// `nofile` (a lower cap is logged). Fails when TCP is configured and `nofile` leaves
    /// no room for it.
    pub fn new(api: &ApiSettings, nofile: u64) -> anyhow::Result<Limits> {
        let kept = FD_RESERVE + UNIX_MAX_CONNECTIONS as u64;
        let room = nofile.saturating_sub(kept);
        let mut tcp_total = api.max_connections;
        if api.listen.is_some() {
            if room < 16 {
                anyhow::bail!(
                    "the file descriptor limit (RLIMIT_NOFILE) is {nofile}: the API on TCP needs more than {} (the unix socket's {UNIX_MAX_CONNECTIONS} connections and {FD_RESERVE} for the rest of the daemon, then at least 16 for TCP); raise it (LimitNOFILE= in the systemd unit, ulimit -n)",
                    kept + 15
                );
            }
            if tcp_total as u64 > room {
                tcp_total = room as usize;
                tracing::warn!(
                    "api.max_connections = {} does not fit the file descriptor limit (RLIMIT_NOFILE {nofile}) with room for the unix socket and the rest of the daemon: at most {tcp_total} TCP connections",
                    api.max_connections
                );
            }
        }
        Ok(Limits {
            tcp_total,
            tcp_per_address: api.max_connections_per_address.min(tcp_total),
            unix_total: UNIX_MAX_CONNECTIONS,
            header_read: Duration::from_secs(api.header_read_timeout_s),
            idle: Duration::from_secs(api.idle_timeout_s),
        })
    }
}

/// The soft `RLIMIT_NOFILE`: how many file descriptors the daemon may hold.
pub fn fd_limit() -> io::Result<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into `r`, which lives across the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r.rlim_cur)
}

/// Raise the soft `RLIMIT_NOFILE` to the hard limit (at most the kernel's `fs.nr_open`
/// when the hard limit is unlimited). Returns the soft limit before and after.
pub fn raise_fd_limit() -> io::Result<(u64, u64)> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into `r`, which lives across the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let before = r.rlim_cur;
    let mut want = r.rlim_max;
    if want == libc::RLIM_INFINITY {
        want = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1 << 20);
    }
    if want > before {
        r.rlim_cur = want;
        // SAFETY: setrlimit reads `r`, which lives across the call.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((before, r.rlim_cur.max(before)))
}

/// One listener's counters (the API's `/metrics` reads them).
#[derive(Debug, Default)]
pub struct ListenerStats {
    /// Connections open now.
    pub open: AtomicU64,
    /// Connections accepted and served.
    pub accepted: AtomicU64,
    /// Connections closed at once: the listener's total cap was reached.
    pub refused_total: AtomicU64,
    /// Connections closed at once: the client address's cap was reached (TCP).
    pub refused_per_address: AtomicU64,
    /// Connections closed because a request's head did not arrive in time.
    pub header_timeouts: AtomicU64,
    /// Connections closed after idling.
    pub idle_timeouts: AtomicU64,
    /// Requests answered 408: their body did not arrive in time.
    pub body_timeouts: AtomicU64,
    /// Failed accepts (out of file descriptors, say).
    pub accept_errors: AtomicU64,
}

/// Both listeners' counters.
#[derive(Debug, Default)]
pub struct ConnStats {
    /// The TCP listener's.
    pub tcp: Arc<ListenerStats>,
    /// The control unix socket's.
    pub unix: Arc<ListenerStats>,
}

/// Counts events and says when one report of them is due (at most every [`REPORT_EVERY`]).
#[derive(Default)]
struct Throttle {
    last: Option<Instant>,
    pending: u64,
}

impl Throttle {
    /// Count one event; `Some(n)` when a report of the `n` events since the last one is due.
    fn hit(&mut self) -> Option<u64> {
        self.pending += 1;
        let now = Instant::now();
        if self
            .last
            .is_none_or(|t| now.duration_since(t) >= REPORT_EVERY)
        {
            self.last = Some(now);
            Some(std::mem::take(&mut self.pending))
        } else {
            None
        }
    }
}

/// A listening socket.
pub enum Listener {
    /// TCP (remote clients, with a token).
    Tcp(tokio::net::TcpListener),
    /// The control unix socket (local clients).
    Unix(tokio::net::UnixListener),
}

enum Stream {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

impl Listener {
    fn name(&self) -> &'static str {
        match self {
            Listener::Tcp(_) => "TCP",
            Listener::Unix(_) => "unix socket",
        }
    }

    async fn accept(&self) -> io::Result<(Stream, Option<IpAddr>)> {
        match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                Ok((Stream::Tcp(s), Some(peer.ip().to_canonical())))
            }
            Listener::Unix(l) => Ok((Stream::Unix(l.accept().await?.0), None)),
        }
    }
}

/// Open connections per client address.
type PerAddress = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// A connection's place in its listener's budget, given back when it is dropped.
struct Slot {
    stats: Arc<ListenerStats>,
    addr: Option<(IpAddr, PerAddress)>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.stats.open.fetch_sub(1, Ordering::Relaxed);
        if let Some((ip, map)) = &self.addr {
            let mut m = map.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = m.get_mut(ip) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    m.remove(ip);
                }
            }
        }
    }
}

/// Answers one request of a connection (the routes, behind the checks that come first).
pub type Handler = Arc<
    dyn Fn(hyper::Request<Incoming>) -> Pin<Box<dyn Future<Output = Response> + Send>>
        + Send
        + Sync,
>;

/// What one listener serves, and with what.
pub struct Serving {
    /// Answers each request.
    pub handler: Handler,
    /// Caps and timeouts.
    pub limits: Arc<Limits>,
    /// Its counters.
    pub stats: Arc<ListenerStats>,
}

async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// Accept and serve connections on `l` until `stop` turns true; then stop accepting, let
/// each connection finish its request in progress (idle ones close at once) and return
/// when all are closed.
pub async fn run(l: Listener, s: Serving, stop: watch::Receiver<bool>) {
    let kind = l.name();
    let per_address: PerAddress = Arc::default();
    let (total, per) = match l {
        Listener::Tcp(_) => (s.limits.tcp_total, s.limits.tcp_per_address),
        Listener::Unix(_) => (s.limits.unix_total, s.limits.unix_total),
    };
    let mut conns = JoinSet::new();
    let (mut refusals, mut errors) = (Throttle::default(), Throttle::default());
    let halt = stopped(stop.clone());
    tokio::pin!(halt);
    loop {
        let accepted = tokio::select! {
            r = l.accept() => r,
            _ = &mut halt => break,
        };
        while conns.try_join_next().is_some() {}
        let (stream, addr) = match accepted {
            Ok(a) => a,
            Err(e) => {
                s.stats.accept_errors.fetch_add(1, Ordering::Relaxed);
                if let Some(n) = errors.hit() {
                    tracing::warn!(
                        "API on the {kind}: {n} accept(s) failed since the last report, the last with: {e}"
                    );
                }
                // Out of file descriptors, typically: give closing connections a moment
                // rather than spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let refused = if s.stats.open.load(Ordering::Relaxed) >= total as u64 {
            s.stats.refused_total.fetch_add(1, Ordering::Relaxed);
            Some("total")
        } else if let Some(ip) = addr {
            let mut m = per_address.lock().unwrap_or_else(|e| e.into_inner());
            let n = m.entry(ip).or_insert(0);
            if *n >= per {
                s.stats.refused_per_address.fetch_add(1, Ordering::Relaxed);
                Some("per-address")
            } else {
                *n += 1;
                None
            }
        } else {
            None
        };
        if let Some(which) = refused {
            drop(stream);
            if let Some(n) = refusals.hit() {
                let limits = match addr {
                    Some(ip) => format!(
                        "api.max_connections = {total}, api.max_connections_per_address = {per}; the last from {ip}, over the {which} limit"
                    ),
                    None => format!("{total} at once"),
                };
                tracing::warn!(
                    "API on the {kind}: closed {n} connection(s) over the limit since the last report ({limits}); all are counted in ferrouter_api_connections_refused_total"
                );
            }
            continue;
        }
        s.stats.open.fetch_add(1, Ordering::Relaxed);
        s.stats.accepted.fetch_add(1, Ordering::Relaxed);
        let slot = Slot {
            stats: s.stats.clone(),
            addr: addr.map(|ip| (ip, per_address.clone())),
        };
        let handler = s.handler.clone();
        let (limits, stats, stop) = (s.limits.clone(), s.stats.clone(), stop.clone());
        match stream {
            Stream::Tcp(io) => {
                conns.spawn(serve(io, handler, (limits, stats), stop, slot, kind));
            }
            Stream::Unix(io) => {
                conns.spawn(serve(io, handler, (limits, stats), stop, slot, kind));
            }
        }
    }
    drop(l);
    while conns.join_next().await.is_some() {}
}

/// When a connection last did something, and whether a request is in progress: what its
/// timeouts are measured from. Times are milliseconds since `base`.
struct Activity {
    base: Instant,
    /// Last byte read or written, or the end of the last response.
    last_io: AtomicU64,
    /// First byte of a request head not yet complete ([`NONE`]: none).
    head_since: AtomicU64,
    /// Requests the daemon is working on.
    in_flight: AtomicU32,
}

const NONE: u64 = u64::MAX;

/// Why a connection was closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expiry {
    Header,
    Idle,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            base: Instant::now(),
            last_io: AtomicU64::new(0),
            head_since: AtomicU64::new(NONE),
            in_flight: AtomicU32::new(0),
        }
    }
    fn now(&self) -> u64 {
        self.base.elapsed().as_millis() as u64
    }
    fn read(&self) {
        self.read_at(self.now());
    }
    fn read_at(&self, now: u64) {
        self.last_io.store(now, Ordering::Relaxed);
        if self.in_flight.load(Ordering::Relaxed) == 0 {
            let _ =
                self.head_since
                    .compare_exchange(NONE, now, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
    fn wrote(&self) {
        self.wrote_at(self.now());
    }
    fn wrote_at(&self, now: u64) {
        self.last_io.store(now, Ordering::Relaxed);
    }
    /// A request's head is complete: the daemon works on it until the guard drops.
    fn begin(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.head_since.store(NONE, Ordering::Relaxed);
        Busy(self.clone())
    }
    /// When the connection must be closed and why; none while a request is in progress.
    fn deadline(&self, l: &Limits) -> Option<(Instant, Expiry)> {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let at = |ms: u64, d: Duration| self.base + Duration::from_millis(ms) + d;
        match self.head_since.load(Ordering::Relaxed) {
            NONE => Some((
                at(self.last_io.load(Ordering::Relaxed), l.idle),
                Expiry::Idle,
            )),
            t => Some((at(t, l.header_read), Expiry::Header)),
        }
    }
}

/// A request in progress.
struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.wrote();
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection's socket, noting its reads and writes in its [`Activity`].
struct Tracked<I> {
    io: I,
    activity: Arc<Activity>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Tracked<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read();
        }
        r
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Tracked<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        r
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        r
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Serve one connection (HTTP/1.1, keep-alive) until the client closes it, it times out,
/// or the daemon stops (then after its request in progress).
async fn serve<I>(
    io: I,
    handler: Handler,
    (limits, stats): (Arc<Limits>, Arc<ListenerStats>),
    stop: watch::Receiver<bool>,
    _slot: Slot,
    kind: &'static str,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Tracked {
        io,
        activity: activity.clone(),
    });
    let service = {
        let activity = activity.clone();
        hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            // Marked before the future first runs: the head is in, the timers stop.
            let busy = activity.begin();
            let answer = handler(req);
            async move {
                let answer = answer.await;
                drop(busy);
                Ok::<_, Infallible>(answer)
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    // Our own timers (see the module's doc); hyper's would also cut idle keep-alive.
    builder.timer(TokioTimer::new()).header_read_timeout(None);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let halt = stopped(stop);
    tokio::pin!(halt);
    let mut stopping = false;
    loop {
        // A request head that starts while this sleeps is due no sooner than
        // `header_read` from now; while a request is in progress nothing expires, so
        // look again then.
        let soon = Instant::now() + limits.header_read.min(limits.idle);
        let wake = activity
            .deadline(&limits)
            .map_or(soon, |(t, _)| t.min(soon));
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!("API on the {kind}: connection closed: {e}");
                }
                return;
            }
            _ = tokio::time::sleep_until(wake) => {
                let due = activity.deadline(&limits).filter(|(t, _)| *t <= Instant::now());
                if let Some((_, e)) = due {
                    let counter = match e {
                        Expiry::Header => &stats.header_timeouts,
                        Expiry::Idle => &stats.idle_timeouts,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!("API on the {kind}: connection closed: {e:?} timeout");
                    // Dropping the connection closes its socket.
                    return;
                }
            }
            _ = &mut halt, if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(max: usize, per: usize) -> ApiSettings {
        ApiSettings {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            max_connections: max,
            max_connections_per_address: per,
            ..ApiSettings::default()
        }
    }

    #[test]
    fn the_tcp_cap_fits_under_the_fd_limit() {
        let l = Limits::new(&api(256, 32), 65536).unwrap();
        assert_eq!((l.tcp_total, l.tcp_per_address), (256, 32));
        assert_eq!(l.unix_total, UNIX_MAX_CONNECTIONS);
        // ulimit -n 1024: 1024 - 256 - 64 = 704 left for TCP.
        let l = Limits::new(&api(4096, 4096), 1024).unwrap();
        assert_eq!((l.tcp_total, l.tcp_per_address), (704, 704));
        let e = Limits::new(&api(256, 32), 300).unwrap_err().to_string();
        assert!(
            e.contains("RLIMIT_NOFILE) is 300") && e.contains("LimitNOFILE"),
            "{e}"
        );
        // Without TCP, the limit is not the API's concern.
        let no_tcp = ApiSettings {
            listen: None,
            ..api(256, 32)
        };
        assert!(Limits::new(&no_tcp, 300).is_ok());
    }

    #[test]
    fn reports_are_throttled_and_count_what_they_skipped() {
        let mut t = Throttle::default();
        assert_eq!(t.hit(), Some(1));
        for _ in 0..99 {
            assert_eq!(t.hit(), None);
        }
        t.last = Some(Instant::now() - REPORT_EVERY);
        assert_eq!(t.hit(), Some(100));
    }

    #[test]
    fn raising_the_fd_limit_reaches_the_hard_limit() {
        let (before, after) = raise_fd_limit().unwrap();
        assert!(after >= before);
        assert_eq!(fd_limit().unwrap(), after);
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into `r`, which lives across the call.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) }, 0);
        assert!(r.rlim_cur == r.rlim_max || r.rlim_max == libc::RLIM_INFINITY);
    }

    #[test]
    fn timeouts_follow_the_connection_state() {
        let l = Limits {
            tcp_total: 1,
            tcp_per_address: 1,
            unix_total: 1,
            header_read: Duration::from_secs(2),
            idle: Duration::from_secs(10),
        };
        let a = Arc::new(Activity::new());
        let at = |ms: u64| a.base + Duration::from_millis(ms);
        // Accepted, nothing sent: the idle timeout from the accept.
        assert_eq!(a.deadline(&l), Some((at(10_000), Expiry::Idle)));
        // Bytes the daemon sends (the end of a response) count as activity.
        a.wrote_at(500);
        assert_eq!(a.deadline(&l), Some((at(10_500), Expiry::Idle)));
        // A request's first byte: its head must be complete 2 s later, however slowly it
        // trickles in.
        a.read_at(1_000);
        a.read_at(2_000);
        assert_eq!(a.deadline(&l), Some((at(3_000), Expiry::Header)));
        // A request in progress: nothing expires, even with nothing moving.
        let busy = a.begin();
        a.read_at(100_000);
        assert_eq!(a.deadline(&l), None);
        drop(busy);
        // Answered: idle again, from the end of the response.
        let (t, e) = a.deadline(&l).unwrap();
        assert_eq!(e, Expiry::Idle);
        assert!(t >= at(10_000) && t <= Instant::now() + l.idle, "{t:?}");
    }
}
