//! Worker threads: one per core, pinned, run-to-completion. Each owns its graph, packet
//! memory and ports; the only shared state is read-mostly (the FIB) or single-writer
//! (counters), so the poll loop takes no lock.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crate::buffer::{PacketMemory, Pkt, Vector};
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
}

/// Shared state a worker publishes to the control thread.
pub struct WorkerShared {
    /// Worker index.
    pub id: usize,
    /// Core it is pinned to, if pinning succeeded.
    pub core: Option<usize>,
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
    total
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

/// Start worker `id` pinned to `core` (if given and available), running `body` until it
/// returns. A panic inside `body` is caught and reported by [`WorkerHandle::join`].
pub fn spawn<F>(id: usize, core: Option<usize>, body: F) -> std::io::Result<WorkerHandle>
where
    F: FnOnce(&WorkerShared) + Send + 'static,
{
    let shared = Arc::new(WorkerShared {
        id,
        core,
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
        std::thread::sleep(std::time::Duration::from_millis(20));
        ok.stop();
        assert_eq!(ok.join(), WorkerExit::Stopped);
        assert!(aggregate([&ok.shared]).rx > 0);
    }
}
