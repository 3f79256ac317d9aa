//! Worker threads: one per core, pinned, run-to-completion. Each owns its graph, packet
//! memory and ports; the only shared state is read-mostly (the FIB) or single-writer
//! (counters), so the poll loop takes no lock.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::buffer::{PacketMemory, Pkt, Vector};
use crate::capture::Capturer;
use crate::counters::{Counters, Snapshot};
use crate::graph::{Graph, Output};

/// A packet port as a worker drives it.
pub trait Port<M: PacketMemory> {
    /// Append up to `VECTOR_SIZE - v.len` received frames to `v`; returns how many.
    fn rx_burst(&mut self, mem: &mut M, v: &mut Vector) -> usize;
    /// Send `pkts`; the port owns their buffers afterwards (returns them to `mem` when the
    /// hardware is done, or at once for copying ports). Returns how many were sent, and
    /// those are always the first ones: a port that cannot send a frame drops it and every
    /// frame after it in `pkts` (the tester relies on this to reuse sequence numbers). Only
    /// a `Pkt` that does not fit its own buffer (a caller bug) may be skipped and counted.
    fn tx_burst(&mut self, mem: &mut M, pkts: &[Pkt]) -> usize;
    /// What poll(2) waits on while the worker sleeps; -1 (the default), which poll ignores,
    /// for a port with no receive notification.
    fn wait_fd(&self) -> std::os::fd::RawFd {
        -1
    }
    /// Whether [`Port::wait_fd`] wakes a sleeping worker as soon as one frame arrives.
    fn wakes_per_frame(&self) -> bool {
        false
    }
}

/// Shared state a worker publishes to the control thread.
pub struct WorkerShared {
    /// Worker index.
    pub id: usize,
    /// Core it is pinned to, if pinning succeeded.
    pub core: Option<usize>,
    /// The nice value the thread runs at, read back after setting it ([`NICE_UNKNOWN`]
    /// until the thread has started, or if it could not be read).
    pub nice: AtomicI32,
    /// Why the requested nice value could not be set, if it could not.
    pub nice_error: OnceLock<String>,
    /// Counters (single writer: the worker).
    pub counters: Arc<Counters>,
    /// Set by the control thread to stop the loop.
    pub stop: AtomicBool,
}

/// One poll-loop iteration over every port: receive, process, transmit, release. Returns
/// the number of packets received.
pub fn poll_once<M: PacketMemory, P: Port<M>>(
    graph: &mut Graph,
    mem: &mut M,
    ports: &mut [P],
    v: &mut Vector,
    out: &mut Output,
    now_ns: u64,
) -> usize {
    let mut total = 0;
    for rx in 0..ports.len() {
        v.len = 0;
        let n = ports[rx].rx_burst(mem, v);
        if n == 0 {
            graph.counters().idle_polls.add(1);
            continue;
        }
        total += n;
        graph.counters().rx.add(n as u64);
        graph.counters().vectors.add(1);
        // One check per burst; the copies happen only while a capture is armed.
        let mut capture = false;
        if let Some(c) = graph.capture.as_deref_mut() {
            if c.armed() {
                c.rx(rx as u16, mem, v.as_slice());
                capture = true;
            }
        }
        graph.process(v, mem, out, now_ns);
        flush(graph, mem, ports, out, capture);
    }
    total
}

/// Send what [`Graph::process`] left in `out` on `ports`, give the rest of the buffers back
/// to `mem`, and empty `out`. `capture`: a capture is armed and copies what is sent.
pub fn flush<M: PacketMemory, P: Port<M>>(
    graph: &mut Graph,
    mem: &mut M,
    ports: &mut [P],
    out: &mut Output,
    mut capture: bool,
) {
    // The egress hook (QoS) takes what must wait and adds what may leave now, at the
    // clock of the vector just processed (or of the loop iteration, when draining).
    if let Some(e) = graph.egress.as_deref_mut() {
        let now = graph.now_ns;
        for (port, list) in out.tx.iter_mut().enumerate() {
            if e.takes(port as u16) {
                e.schedule(port as u16, list, mem, now);
            }
        }
    }
    for (port, list) in out.tx.iter().enumerate() {
        if !list.is_empty() {
            if let Some(p) = ports.get_mut(port) {
                if capture {
                    if let Some(c) = graph.capture.as_deref_mut() {
                        c.tx(port as u16, mem, list);
                        capture = c.armed();
                    }
                }
                let sent = p.tx_burst(mem, list);
                graph.counters().tx.add(sent as u64);
            }
        }
    }
    for &b in &out.free {
        mem.free(b);
    }
    out.clear();
}

/// Between vectors: let the egress hook follow its configuration, and send what it holds
/// that may leave at `now_ns`. Returns how many packets left its queues (sent or dropped),
/// which count as work (the worker does not sleep while they drain).
pub fn drain_egress<M: PacketMemory, P: Port<M>>(
    graph: &mut Graph,
    mem: &mut M,
    ports: &mut [P],
    out: &mut Output,
    now_ns: u64,
) -> usize {
    let Some(e) = graph.egress.as_deref_mut() else {
        return 0;
    };
    e.update(mem);
    let before = e.held();
    if before == 0 {
        return 0;
    }
    graph.now_ns = now_ns;
    let capture = graph.capture.as_deref_mut().is_some_and(Capturer::armed);
    flush(graph, mem, ports, out, capture);
    before.saturating_sub(graph.egress_held())
}

/// Nanoseconds of `CLOCK_MONOTONIC` (vDSO: no system call). The clock every process on
/// the host shares, so times the daemon reports compare with a tester's or a benchmark's.
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Monotonic nanoseconds since `epoch` (read once per poll, not per packet).
#[inline]
pub fn now_ns(epoch: Instant) -> u64 {
    epoch.elapsed().as_nanos() as u64
}

/// Empty polls before the worker sleeps in poll(2) for up to 1 ms (adaptive polling: a busy
/// port is polled continuously, an idle one costs no CPU).
const IDLE_POLLS_BEFORE_SLEEP: u32 = 2048;
/// Adaptive polling, as VPP's adaptive mode: below this many frames per second (measured
/// over [`LOAD_WINDOW_NS`]) a worker whose ports all wake it per frame (AF_XDP) sleeps in
/// poll(2) as soon as they are empty, after [`IDLE_POLLS_LIGHT`] empty polls, instead of
/// polling on. Busy polling a port that brings a frame every few tens of microseconds
/// burns its core for nothing: at 50K frames/s it took 80-90 % of a core that the routing
/// daemons, on a small host, then lacked. A wake-up costs a few microseconds, so above this
/// rate the worker polls (and frames queue while it works, so it finds full batches).
const LIGHT_LOAD_PPS: u64 = 100_000;
/// The window over which the worker measures its rate.
const LOAD_WINDOW_NS: u64 = 1_000_000;
/// Empty polls before sleeping under light load: a frame right behind the last one is
/// still taken without a wake-up.
const IDLE_POLLS_LIGHT: u32 = 32;

/// When a worker sleeps: after [`IDLE_POLLS_BEFORE_SLEEP`] empty polls, or after
/// [`IDLE_POLLS_LIGHT`] when its ports wake it per frame and the last load window brought
/// fewer than [`LIGHT_LOAD_PPS`]. The rate is averaged over the window's real span, so a
/// worker descheduled for a while does not mistake the frames that queued meanwhile for load.
#[derive(Debug)]
pub(crate) struct AdaptivePoll {
    wakes_per_frame: bool,
    light: bool,
    idle: u32,
    window_start: u64,
    window_rx: u64,
}

impl AdaptivePoll {
    pub(crate) fn new(wakes_per_frame: bool) -> Self {
        Self {
            wakes_per_frame,
            light: wakes_per_frame,
            idle: 0,
            window_start: 0,
            window_rx: 0,
        }
    }

    /// Accounts one poll that brought `frames` at `now_ns`; true when the worker should
    /// sleep in poll(2) now.
    pub(crate) fn after_poll(&mut self, frames: usize, now_ns: u64) -> bool {
        self.window_rx += frames as u64;
        let span = now_ns.saturating_sub(self.window_start);
        if span >= LOAD_WINDOW_NS {
            self.light = self.wakes_per_frame
                && u128::from(self.window_rx) * 1_000_000_000
                    < u128::from(LIGHT_LOAD_PPS) * u128::from(span);
            (self.window_start, self.window_rx) = (now_ns, 0);
        }
        if frames != 0 {
            self.idle = 0;
            return false;
        }
        self.idle = self.idle.saturating_add(1);
        let limit = if self.light {
            IDLE_POLLS_LIGHT
        } else {
            IDLE_POLLS_BEFORE_SLEEP
        };
        self.idle >= limit
    }
}

/// What a worker's owner does around the fast path, once per loop iteration.
pub trait LoopHooks<M: PacketMemory, P: Port<M>> {
    /// Before the ports are polled: follow control-plane changes (the interface table) and
    /// push frames from elsewhere through the graph (or out of a port). Returns how many
    /// frames it handled (they count as work, as received frames do).
    fn before_poll(
        &mut self,
        graph: &mut Graph,
        mem: &mut M,
        ports: &mut [P],
        scratch: (&mut Vector, &mut Output),
        now_ns: u64,
    ) -> usize;
    /// Publish the ports' counters: every 256 busy iterations, before each sleep, and when
    /// the loop ends.
    fn publish(&mut self, ports: &[P]);
    /// Another descriptor the sleeping worker polls with its ports' (frames from elsewhere
    /// arriving: a handoff's doorbell).
    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
    /// The worker is about to sleep: false keeps it awake (work arrived meanwhile).
    fn may_sleep(&mut self) -> bool {
        true
    }
    /// The worker woke from a sleep.
    fn woke(&mut self) {}
}

/// A worker's poll loop, until [`WorkerShared::stop`]: the hooks, one poll of every port
/// through the graph, a quiescent point of the graph's FIB reader, and adaptive polling
/// (sleep in poll(2), the FIB reader offline, after empty polls: see `AdaptivePoll`).
pub fn run_loop<M: PacketMemory, P: Port<M>, H: LoopHooks<M, P>>(
    shared: &WorkerShared,
    graph: &mut Graph,
    mem: &mut M,
    ports: &mut [P],
    hooks: &mut H,
) {
    let mut v = Vector::default();
    let mut out = Output::new(ports.len());
    let epoch = Instant::now();
    let mut iter = 0u64;
    let mut pacing = AdaptivePoll::new(ports.iter().all(|p| p.wakes_per_frame()));
    let mut fds: Vec<libc::pollfd> = ports
        .iter()
        .map(|p| p.wait_fd())
        .chain(hooks.wait_fd())
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // Start of the previous iteration, if it found work: its time counts as busy (the
    // clock is read once per iteration anyway; a sleep only follows an idle iteration).
    let mut busy_since: Option<u64> = None;
    while !shared.stop.load(Ordering::Relaxed) {
        let now = now_ns(epoch);
        if let Some(t) = busy_since {
            shared.counters.busy_ns.add(now.saturating_sub(t));
        }
        let handled = hooks.before_poll(graph, mem, ports, (&mut v, &mut out), now);
        let mut n = poll_once(graph, mem, ports, &mut v, &mut out, now);
        n += drain_egress(graph, mem, ports, &mut out, now);
        graph.quiescent();
        iter += 1;
        busy_since = (n + handled != 0).then_some(now);
        if pacing.after_poll(n + handled, now) && hooks.may_sleep() {
            hooks.publish(ports);
            shared.counters.sleeps.add(1);
            graph.offline_while(|| {
                // SAFETY: `fds` is a live array of pollfd for descriptors `ports` and
                // `hooks` keep open (or -1, which poll ignores).
                unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 1) }
            });
            hooks.woke();
        } else if n + handled != 0 && iter.is_multiple_of(256) {
            hooks.publish(ports);
        }
    }
    hooks.publish(ports);
}

/// Why a worker is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerExit {
    /// Stopped on request.
    Stopped,
    /// Panicked: a bug. The message is reported, never swallowed.
    Panicked(String),
}

/// A running worker thread.
pub struct WorkerHandle {
    /// What the worker shares.
    pub shared: Arc<WorkerShared>,
    join: Option<JoinHandle<WorkerExit>>,
}

/// [`WorkerShared::nice`] before the thread has read its own.
pub const NICE_UNKNOWN: i32 = i32::MIN;

/// Set the calling thread's nice value (Linux: `setpriority` on the thread id affects that
/// thread alone). A value below the current one needs `CAP_SYS_NICE` (or `RLIMIT_NICE`).
pub fn set_thread_nice(nice: i32) -> std::io::Result<()> {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    // SAFETY: plain system call on our own thread id.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's nice value.
pub fn thread_nice() -> std::io::Result<i32> {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    // -1 is a valid nice value, so errors are told apart by errno (cleared first).
    // SAFETY: __errno_location returns this thread's errno.
    unsafe { *libc::__errno_location() = 0 };
    // SAFETY: plain system call on our own thread id.
    let n = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t) };
    let e = std::io::Error::last_os_error();
    if n == -1 && e.raw_os_error().unwrap_or(0) != 0 {
        return Err(e);
    }
    Ok(n)
}

/// Where and how a worker thread runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// The core to pin it to (if available).
    pub core: Option<usize>,
    /// The nice value to give it (`None`: inherit). A fast path gives its workers a higher
    /// priority than the routing daemons, so that their bursts of work do not starve
    /// forwarding on a core they share.
    pub nice: Option<i32>,
}

impl From<Option<usize>> for Placement {
    fn from(core: Option<usize>) -> Placement {
        Placement { core, nice: None }
    }
}

/// Start worker `id` placed as `at` says (pinned to its core if given and available, at its
/// nice value if given), running `body` until it returns. A nice value that cannot be set
/// leaves the thread at its inherited one, with the reason in
/// [`WorkerShared::nice_error`]. A panic inside `body` is caught and reported by
/// [`WorkerHandle::join`].
pub fn spawn<F>(id: usize, at: impl Into<Placement>, body: F) -> std::io::Result<WorkerHandle>
where
    F: FnOnce(&WorkerShared) + Send + 'static,
{
    let at: Placement = at.into();
    let shared = Arc::new(WorkerShared {
        id,
        core: at.core,
        nice: AtomicI32::new(NICE_UNKNOWN),
        nice_error: OnceLock::new(),
        counters: Arc::new(Counters::default()),
        stop: AtomicBool::new(false),
    });
    let s2 = shared.clone();
    let join = std::thread::Builder::new()
        .name(format!("ferrouter-w{id}"))
        .spawn(move || {
            if let Some(c) = s2.core {
                core_affinity::set_for_current(core_affinity::CoreId { id: c });
            }
            if let Some(n) = at.nice {
                if let Err(e) = set_thread_nice(n) {
                    let _ = s2.nice_error.set(format!("setting nice {n}: {e}"));
                }
            }
            if let Ok(n) = thread_nice() {
                s2.nice.store(n, Ordering::Relaxed);
            }
            match catch_unwind(AssertUnwindSafe(|| body(&s2))) {
                Ok(()) => WorkerExit::Stopped,
                Err(e) => {
                    let msg = e
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| e.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown panic".into());
                    WorkerExit::Panicked(msg)
                }
            }
        })?;
    Ok(WorkerHandle {
        shared,
        join: Some(join),
    })
}

impl WorkerHandle {
    /// Whether the thread has ended (stopped or died).
    pub fn is_finished(&self) -> bool {
        self.join.as_ref().is_none_or(|j| j.is_finished())
    }
    /// Ask the worker to stop.
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::Relaxed);
    }
    /// Wait for the thread and say how it ended.
    pub fn join(&mut self) -> WorkerExit {
        match self.join.take() {
            Some(j) => j
                .join()
                .unwrap_or_else(|_| WorkerExit::Panicked("join failed".into())),
            None => WorkerExit::Stopped,
        }
    }
}

/// Sum of the counters of several workers (no locks: each counter has one writer).
pub fn aggregate<'a>(workers: impl IntoIterator<Item = &'a Arc<WorkerShared>>) -> Snapshot {
    let mut s = Snapshot::default();
    for w in workers {
        s.merge(&w.counters.snapshot());
    }
    s
}

/// Cores available to this process, in order.
pub fn cores() -> Vec<usize> {
    core_affinity::get_core_ids()
        .map(|v| v.into_iter().map(|c| c.id).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panicking_worker_is_reported_not_lost() {
        let mut w = spawn(0, None, |_| panic!("boom in worker")).unwrap();
        assert_eq!(w.join(), WorkerExit::Panicked("boom in worker".into()));
        let mut ok = spawn(1, cores().first().copied(), |s| {
            while !s.stop.load(Ordering::Relaxed) {
                s.counters.rx.add(1);
                std::thread::yield_now();
            }
        })
        .unwrap();
        // Until it has counted something (a loaded machine may not run it at once):
        // bounded at 10 s.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while aggregate([&ok.shared]).rx == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        ok.stop();
        assert_eq!(ok.join(), WorkerExit::Stopped);
        assert!(aggregate([&ok.shared]).rx > 0);
    }

    #[test]
    fn worker_runs_at_the_nice_value_asked_for_or_says_why_not() {
        let ours = thread_nice().unwrap();
        // Raising the nice value (lower priority) needs no privilege.
        let want = (ours + 3).min(19);
        let mut w = spawn(
            0,
            Placement {
                core: None,
                nice: Some(want),
            },
            |s| {
                while !s.stop.load(Ordering::Relaxed) {
                    std::thread::yield_now();
                }
            },
        )
        .unwrap();
        let t0 = Instant::now();
        while w.shared.nice.load(Ordering::Relaxed) == NICE_UNKNOWN {
            assert!(
                t0.elapsed().as_secs() < 10,
                "the worker never read its nice value"
            );
            std::thread::yield_now();
        }
        assert_eq!(w.shared.nice.load(Ordering::Relaxed), want);
        assert!(w.shared.nice_error.get().is_none());
        w.stop();
        assert_eq!(w.join(), WorkerExit::Stopped);
        // The spawning thread is left as it was.
        assert_eq!(thread_nice().unwrap(), ours);
        // Below our own value needs CAP_SYS_NICE: the worker gets it, or says why not.
        let mut w = spawn(
            1,
            Placement {
                core: None,
                nice: Some(-20),
            },
            |_| {},
        )
        .unwrap();
        assert_eq!(w.join(), WorkerExit::Stopped);
        let got = w.shared.nice.load(Ordering::Relaxed);
        assert!(
            got == -20 || w.shared.nice_error.get().is_some(),
            "nice {got} without an error"
        );
    }

    /// Runs `polls` polls `gap_ns` apart, a frame every `every` polls; returns the sleeps.
    fn run(p: &mut AdaptivePoll, start: u64, polls: u64, gap_ns: u64, every: u64) -> u64 {
        (0..polls)
            .filter(|i| {
                let frames = usize::from(i % every == 0);
                p.after_poll(frames, start + i * gap_ns)
            })
            .count() as u64
    }

    #[test]
    fn light_load_on_ports_that_wake_per_frame_sleeps_soon_after_each_frame() {
        let mut p = AdaptivePoll::new(true);
        // 50K frames/s: a frame every 20 us, polls 200 ns apart (100 polls per frame).
        let sleeps = run(&mut p, 0, 1_000_000, 200, 100);
        let frames = 10_000;
        // Sleeps on the 32nd empty poll after each frame, then on every empty poll after it.
        assert_eq!(sleeps, frames * (100 - IDLE_POLLS_LIGHT as u64));
    }

    #[test]
    fn heavy_load_or_ports_that_do_not_wake_per_frame_poll_on() {
        // 500K frames/s: a frame every 2 us; the 9 empty polls between them never sleep.
        let mut p = AdaptivePoll::new(true);
        assert_eq!(run(&mut p, 0, 1_000_000, 200, 10), 0);
        // AF_PACKET-like ports: 50K frames/s is polled on, as 2,048 empty polls never pass.
        let mut p = AdaptivePoll::new(false);
        assert_eq!(run(&mut p, 0, 1_000_000, 200, 100), 0);
    }

    #[test]
    fn the_rate_is_averaged_over_the_real_span_and_idle_sleeps_either_way() {
        let mut p = AdaptivePoll::new(true);
        // Heavy first: polls on.
        assert_eq!(run(&mut p, 0, 100_000, 200, 10), 0);
        assert!(!p.light);
        // A worker descheduled for 10 ms finds 300 frames queued (30K/s over the real span):
        // light, although 300 frames arrived in one poll.
        let t = 20_000_000 + 10_000_000;
        assert!(!p.after_poll(300, t));
        assert!(p.light);
        // After a last frame, the first sleep comes on the 32nd empty poll when light, on
        // the 2,048th when heavy.
        let mut idle_light = AdaptivePoll::new(true);
        assert_eq!(run(&mut idle_light, 0, 1 + 32, 200, u64::MAX), 1);
        let mut idle_heavy = AdaptivePoll::new(false);
        assert_eq!(run(&mut idle_heavy, 0, 1 + 2_047, 200, u64::MAX), 0);
        assert!(idle_heavy.after_poll(0, 2_048 * 200));
    }
}
