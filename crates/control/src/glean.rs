//! Packets held while their next hop resolves (glean), as Linux queues them on an
//! unresolved neighbour (`unres_qlen`) instead of losing the first packet of every new flow.
//!
//! The workers punt a packet whose next hop has no MAC yet; the control thread asks the
//! kernel to resolve it and keeps a copy here, a few per next hop and a bounded number in
//! all. Once the kernel's neighbour entry is usable (the FIB has its adjacency from the same
//! netlink event), the copies go back to the worker that punted them, which pushes them
//! through its graph again as if just received: forwarded once, TTL decremented once. A
//! next hop that does not resolve within [`HOLD_TIME`] loses its packets, counted.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dataplane::punt::{PuntPacket, PuntProducer};
use rustc_hash::FxHashMap;

/// Packets held per unresolved next hop (Linux's historical `unres_qlen` of 3).
pub const HOLD_PER_TARGET: usize = 3;
/// Packets held in all, over every next hop: a scan of unused addresses cannot make the
/// control thread hold more.
pub const HOLD_TOTAL: usize = 256;
/// How long a next hop may take to resolve (ARP/ND give up after about 3 s).
pub const HOLD_TIME: Duration = Duration::from_secs(3);

/// What happened to glean packets, for `show counters` and `/metrics`.
#[derive(Debug, Default)]
pub struct GleanStats {
    /// Packets held while their next hop resolved.
    pub held: AtomicU64,
    /// Held packets sent on once it did.
    pub sent: AtomicU64,
    /// Held packets dropped because their next hop did not resolve in time.
    pub expired: AtomicU64,
    /// Packets not held: their next hop already had [`HOLD_PER_TARGET`], or
    /// [`HOLD_TOTAL`] were held, or no next hop to wait for was found, or the worker's queue
    /// back was full.
    pub dropped: AtomicU64,
}

impl GleanStats {
    /// Count a glean packet dropped without being held.
    pub fn not_held(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now, as `show counters` reports them.
    pub fn snapshot(&self) -> crate::model::GleanCounters {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        crate::model::GleanCounters {
            held: g(&self.held),
            sent: g(&self.sent),
            expired: g(&self.expired),
            dropped: g(&self.dropped),
        }
    }
}

struct Entry {
    worker: usize,
    since: Instant,
    packet: Box<PuntPacket>,
}

/// The held packets, by next hop (interface index, address).
#[derive(Default)]
pub struct GleanQueue {
    by_target: FxHashMap<(u32, IpAddr), Vec<Entry>>,
    total: usize,
}

impl GleanQueue {
    /// Hold `packet`, punted by `worker`, until `target` resolves. False (counted as
    /// dropped) when the bounds are reached.
    pub fn hold(
        &mut self,
        stats: &GleanStats,
        worker: usize,
        target: (u32, IpAddr),
        packet: Box<PuntPacket>,
        now: Instant,
    ) -> bool {
        let list = self.by_target.entry(target).or_default();
        if list.len() >= HOLD_PER_TARGET || self.total >= HOLD_TOTAL {
            stats.not_held();
            return false;
        }
        list.push(Entry {
            worker,
            since: now,
            packet,
        });
        self.total += 1;
        stats.held.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Number of packets held.
    pub fn len(&self) -> usize {
        self.total
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Send back to their workers (`to_worker[w]`) the packets whose next hop `resolved`
    /// says is usable now, and drop those held longer than [`HOLD_TIME`]. Cheap when
    /// nothing is held.
    pub fn release(
        &mut self,
        stats: &GleanStats,
        resolved: impl Fn(u32, IpAddr) -> bool,
        to_worker: &mut [PuntProducer],
        now: Instant,
    ) {
        if self.total == 0 {
            return;
        }
        let mut total = 0;
        self.by_target.retain(|&(ifx, ip), list| {
            if resolved(ifx, ip) {
                for e in list.drain(..) {
                    let sent = to_worker
                        .get_mut(e.worker)
                        .is_some_and(|q| q.push(*e.packet).is_ok());
                    let c = if sent { &stats.sent } else { &stats.dropped };
                    c.fetch_add(1, Ordering::Relaxed);
                }
                return false;
            }
            let before = list.len();
            list.retain(|e| now.duration_since(e.since) < HOLD_TIME);
            stats
                .expired
                .fetch_add((before - list.len()) as u64, Ordering::Relaxed);
            total += list.len();
            !list.is_empty()
        });
        self.total = total;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::Reason;

    fn packet(tag: u8) -> Box<PuntPacket> {
        let mut p = Box::new(PuntPacket {
            port: 1,
            reason: Reason::PuntUnresolved,
            len: 1,
            data: [0; dataplane::MAX_FRAME],
        });
        p.data[0] = tag;
        p
    }

    #[test]
    fn held_until_resolved_then_sent_to_the_worker_that_punted() {
        let stats = GleanStats::default();
        let mut q = GleanQueue::default();
        let (tx0, mut rx0) = dataplane::punt::queue(8);
        let (tx1, mut rx1) = dataplane::punt::queue(8);
        let mut workers = vec![tx0, tx1];
        let t0 = Instant::now();
        let a: (u32, IpAddr) = (7, "192.0.2.9".parse().unwrap());
        let b: (u32, IpAddr) = (7, "192.0.2.10".parse().unwrap());
        for k in 0..5 {
            q.hold(&stats, 1, a, packet(k), t0);
        }
        assert!(q.hold(&stats, 0, b, packet(9), t0));
        assert_eq!(q.len(), 4, "three for a, one for b");
        assert_eq!(stats.dropped.load(Ordering::Relaxed), 2);
        q.release(&stats, |_, ip| ip == a.1, &mut workers, t0);
        let got: Vec<u8> = std::iter::from_fn(|| rx1.pop().ok())
            .map(|p| p.data[0])
            .collect();
        assert_eq!(got, vec![0, 1, 2], "in order, to worker 1");
        assert!(rx0.pop().is_err());
        assert_eq!(q.len(), 1);
        // b never resolves: gone after HOLD_TIME, counted.
        q.release(&stats, |_, _| false, &mut workers, t0 + HOLD_TIME);
        assert!(q.is_empty());
        assert_eq!(stats.expired.load(Ordering::Relaxed), 1);
        assert_eq!(stats.sent.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_scan_of_many_next_hops_holds_at_most_the_total() {
        let stats = GleanStats::default();
        let mut q = GleanQueue::default();
        let t0 = Instant::now();
        for i in 0..10_000u32 {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            q.hold(&stats, 0, (1, ip), packet(0), t0);
        }
        assert_eq!(q.len(), HOLD_TOTAL);
        assert_eq!(
            stats.dropped.load(Ordering::Relaxed),
            10_000 - HOLD_TOTAL as u64
        );
    }
}
