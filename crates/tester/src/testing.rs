//! Test fixtures, public so other crates' tests can use them: an in-memory port pair
//! ([`loop_pair`]) whose links can drop, duplicate or reorder chosen frames, and a
//! deterministic rate-limited "DUT" ([`Shaper`]) driven by the frames' own timestamps.
//!
//! ```
//! use std::time::Duration;
//! use dataplane::Arena;
//! use tester::testing::{lab_traffic, loop_pair, Verdict};
//! use tester::{Generator, Profile, Signature, TrialConfig, VirtualClock};
//!
//! let mut gen = Generator::new(&lab_traffic(Profile::parse("ipv4-64").unwrap(), false)).unwrap();
//! let (mut p0, mut p1) = loop_pair(1024);
//! // The link from port 0 loses the frame with sequence number 7.
//! p0.set_filter(|f: &[u8]| match Signature::parse(f) {
//!     Some(s) if s.seq == 7 => Verdict::Drop,
//!     _ => Verdict::Pass,
//! });
//! let mut mem = Arena::new(4096);
//! let mut trial = TrialConfig::new(100_000.0, Duration::from_millis(10));
//! trial.drain = Duration::from_millis(1);
//! let r = gen
//!     .run_trial_with_clock(&mut mem, &mut p0, &mut p1, &trial, &mut VirtualClock::new(0, 500))
//!     .unwrap();
//! assert_eq!((r.tx, r.rx, r.lost), (1000, 999, 1));
//! ```

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use dataplane::buffer::{PacketMemory, Pkt, Vector, VECTOR_SIZE};
use dataplane::worker::Port;

use crate::flows::{AddrRange, Endpoints};
use crate::frame::Signature;
use crate::generator::{DirectionConfig, TrafficConfig};
use crate::profile::Profile;

/// MAC of the tester's port 0 in [`lab_traffic`].
pub const TESTER_MAC0: [u8; 6] = [2, 0, 0, 0, 0, 1];
/// MAC of the tester's port 1 in [`lab_traffic`].
pub const TESTER_MAC1: [u8; 6] = [2, 0, 0, 0, 0, 2];
/// MAC of the DUT's port facing tester port 0 in [`lab_traffic`].
pub const DUT_MAC0: [u8; 6] = [2, 0, 0, 0, 1, 1];
/// MAC of the DUT's port facing tester port 1 in [`lab_traffic`].
pub const DUT_MAC1: [u8; 6] = [2, 0, 0, 0, 1, 2];

/// Traffic in the benchmarking ranges (RFC 2544 198.18.0.0/15, RFC 5180 2001:2::/48):
/// port 0's hosts 198.18.0.2 and 2001:2:0:a::2 send to 198.19.0.0/16 and
/// 2001:2:0:b::/64 behind port 1, and (if `bidirectional`) the reverse. One flow, seed 1.
pub fn lab_traffic(profile: Profile, bidirectional: bool) -> TrafficConfig {
    let ep = |src: &str, dst: &str| {
        Some(Endpoints::new(
            AddrRange::single(src.parse().expect("literal address")),
            vec![dst.parse().expect("literal prefix")],
        ))
    };
    let forward = DirectionConfig {
        src_mac: TESTER_MAC0,
        dst_mac: DUT_MAC0,
        v4: ep("198.18.0.2", "198.19.0.0/16"),
        v6: ep("2001:2:0:a::2", "2001:2:0:b::/64"),
    };
    let reverse = DirectionConfig {
        src_mac: TESTER_MAC1,
        dst_mac: DUT_MAC1,
        v4: ep("198.19.0.2", "198.18.0.0/16"),
        v6: ep("2001:2:0:b::2", "2001:2:0:a::/64"),
    };
    TrafficConfig::new(profile, forward, bidirectional.then_some(reverse))
}

/// What a link does with a frame handed to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Deliver it.
    Pass,
    /// Lose it (the sender still counts it as sent).
    Drop,
    /// Deliver it twice (a copy in a fresh buffer follows it).
    Duplicate,
    /// Deliver it right after the next frame that passes (swaps two frames). A second
    /// hold while one is pending releases the first.
    Hold,
}

/// Decides the fate of each frame (its bytes, Ethernet header first).
pub type Filter = Box<dyn FnMut(&[u8]) -> Verdict + Send>;

/// Like a [`Filter`], but may also change the frame in place (a NAT, a middlebox that
/// turns a segment into a reset). Runs before the filter; [`Verdict::Drop`] loses the
/// frame, any other verdict hands it on to the filter.
pub type Rewrite = Box<dyn FnMut(&mut [u8]) -> Verdict + Send>;

/// Counters of one link (the frames one port transmitted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Frames accepted by `tx_burst`.
    pub tx: u64,
    /// Frames refused because the queue was full (not counted in `tx`).
    pub refused: u64,
    /// Frames the filter dropped.
    pub dropped: u64,
    /// Copies the filter added.
    pub duplicated: u64,
    /// Frames the filter held for a swap.
    pub held: u64,
    /// Frames injected with [`LoopPort::inject`] toward the other side.
    pub injected: u64,
}

struct Link {
    queue: VecDeque<Pkt>,
    held: Option<Pkt>,
    filter: Option<Filter>,
    rewrite: Option<Rewrite>,
    stats: LinkStats,
}

impl Link {
    fn new(capacity: usize) -> Link {
        Link {
            queue: VecDeque::with_capacity(capacity + 2),
            held: None,
            filter: None,
            rewrite: None,
            stats: LinkStats::default(),
        }
    }
}

struct Shared {
    /// `links[i]` carries what side `i` transmits to side `1 - i`.
    links: [Link; 2],
    capacity: usize,
}

/// One end of an in-memory link (see [`loop_pair`]). Frames move as descriptors: both
/// ends must be driven with the same packet memory.
pub struct LoopPort {
    side: usize,
    port_id: u16,
    shared: Arc<Mutex<Shared>>,
}

/// Two connected ports: what one transmits, the other receives, in order. Each direction
/// queues at most `capacity` frames; `tx_burst` accepts frames up to that and refuses the
/// rest (it returns how many it took, and frees the others, like a full NIC ring). Port
/// ids (`Pkt::rx_port`) are 0 and 1.
pub fn loop_pair(capacity: usize) -> (LoopPort, LoopPort) {
    let shared = Arc::new(Mutex::new(Shared {
        links: [Link::new(capacity), Link::new(capacity)],
        capacity: capacity.max(1),
    }));
    (
        LoopPort {
            side: 0,
            port_id: 0,
            shared: shared.clone(),
        },
        LoopPort {
            side: 1,
            port_id: 1,
            shared,
        },
    )
}

impl LoopPort {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        // A panic elsewhere while holding the lock leaves plain data behind: keep going.
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Apply `f` to every frame this port transmits from now on.
    pub fn set_filter(&self, f: impl FnMut(&[u8]) -> Verdict + Send + 'static) {
        self.lock().links[self.side].filter = Some(Box::new(f));
    }

    /// Stop filtering this port's frames.
    pub fn clear_filter(&self) {
        self.lock().links[self.side].filter = None;
    }

    /// Apply `f` to every frame this port transmits from now on, with write access to
    /// its bytes (before the filter, if there is one).
    pub fn set_rewrite(&self, f: impl FnMut(&mut [u8]) -> Verdict + Send + 'static) {
        self.lock().links[self.side].rewrite = Some(Box::new(f));
    }

    /// Put `pkt` (a frame in the shared memory) on this port's receive queue, as if the
    /// other side had sent it, bypassing filter and capacity.
    pub fn inject(&self, pkt: Pkt) {
        let mut s = self.lock();
        let link = &mut s.links[1 - self.side];
        link.stats.injected += 1;
        link.queue.push_back(pkt);
    }

    /// Counters of the frames this port transmitted.
    pub fn stats(&self) -> LinkStats {
        self.lock().links[self.side].stats
    }

    /// Frames waiting to be received by this port.
    pub fn pending_rx(&self) -> usize {
        self.lock().links[1 - self.side].queue.len()
    }

    /// Deliver a frame still held for a swap (if any) to the other side now.
    pub fn release_held(&self) {
        let mut s = self.lock();
        let link = &mut s.links[self.side];
        if let Some(h) = link.held.take() {
            link.queue.push_back(h);
        }
    }
}

impl<M: PacketMemory> Port<M> for LoopPort {
    fn rx_burst(&mut self, _mem: &mut M, v: &mut Vector) -> usize {
        let mut s = self.lock();
        let link = &mut s.links[1 - self.side];
        let mut n = 0;
        while v.len < VECTOR_SIZE {
            let Some(mut p) = link.queue.pop_front() else {
                break;
            };
            p.rx_port = self.port_id;
            v.push(p);
            n += 1;
        }
        n
    }

    fn tx_burst(&mut self, mem: &mut M, pkts: &[Pkt]) -> usize {
        let mut guard = self.lock();
        let s = &mut *guard;
        let cap = s.capacity;
        let link = &mut s.links[self.side];
        for (i, p) in pkts.iter().enumerate() {
            if link.queue.len() >= cap {
                for q in &pkts[i..] {
                    mem.free(q.buf);
                }
                link.stats.refused += (pkts.len() - i) as u64;
                return i;
            }
            link.stats.tx += 1;
            if let Some(f) = link.rewrite.as_mut() {
                let off = usize::from(p.off);
                let v = match mem.frame_mut(p.buf).get_mut(off..off + usize::from(p.len)) {
                    Some(data) => f(data),
                    None => Verdict::Pass,
                };
                if v == Verdict::Drop {
                    link.stats.dropped += 1;
                    mem.free(p.buf);
                    continue;
                }
            }
            let verdict = match link.filter.as_mut() {
                Some(f) => {
                    let off = usize::from(p.off);
                    let data = mem
                        .frame(p.buf)
                        .get(off..off + usize::from(p.len))
                        .unwrap_or(&[]);
                    f(data)
                }
                None => Verdict::Pass,
            };
            match verdict {
                Verdict::Pass => {
                    link.queue.push_back(*p);
                    if let Some(h) = link.held.take() {
                        link.queue.push_back(h);
                    }
                }
                Verdict::Drop => {
                    link.stats.dropped += 1;
                    mem.free(p.buf);
                }
                Verdict::Duplicate => {
                    link.queue.push_back(*p);
                    if let Some(b) = mem.alloc() {
                        let (src, dst) = mem.frame_pair(p.buf, b);
                        dst.copy_from_slice(src);
                        link.queue.push_back(Pkt { buf: b, ..*p });
                        link.stats.duplicated += 1;
                    }
                    if let Some(h) = link.held.take() {
                        link.queue.push_back(h);
                    }
                }
                Verdict::Hold => {
                    if let Some(h) = link.held.take() {
                        link.queue.push_back(h);
                    }
                    link.held = Some(*p);
                    link.stats.held += 1;
                }
            }
        }
        pkts.len()
    }
}

/// A token-bucket rate limiter in virtual time: forwards at most `rate_pps` frames per
/// second with bursts of `depth` frames, reading time from each frame's signature
/// timestamp, so a trial on a [`crate::clock::VirtualClock`] through it is deterministic.
/// Frames without a signature pass. Use as a [`LoopPort`] filter: a DUT whose throughput
/// is exactly known.
#[derive(Clone, Debug)]
pub struct Shaper {
    rate_pps: f64,
    depth: f64,
    tokens: f64,
    last: Option<u32>,
    /// Frames forwarded.
    pub passed: u64,
    /// Frames dropped.
    pub dropped: u64,
}

impl Shaper {
    /// A full bucket of `depth` frames refilled at `rate_pps`.
    pub fn new(rate_pps: f64, depth: u32) -> Shaper {
        Shaper {
            rate_pps,
            depth: f64::from(depth.max(1)),
            tokens: f64::from(depth.max(1)),
            last: None,
            passed: 0,
            dropped: 0,
        }
    }

    /// Forward or drop one frame.
    pub fn verdict(&mut self, frame: &[u8]) -> Verdict {
        let Some(sig) = Signature::parse(frame) else {
            return Verdict::Pass;
        };
        if let Some(last) = self.last {
            let dt = sig.timestamp.wrapping_sub(last);
            // Timestamps of a burst are equal; a "negative" step (reordering) adds nothing.
            if dt < 1 << 31 {
                self.tokens = (self.tokens + f64::from(dt) * self.rate_pps / 1e9).min(self.depth);
                self.last = Some(sig.timestamp);
            }
        } else {
            self.last = Some(sig.timestamp);
        }
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            self.passed += 1;
            Verdict::Pass
        } else {
            self.dropped += 1;
            Verdict::Drop
        }
    }

    /// As a filter for [`LoopPort::set_filter`].
    pub fn into_filter(mut self) -> impl FnMut(&[u8]) -> Verdict + Send + 'static {
        move |f| self.verdict(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::Arena;

    #[test]
    fn loop_pair_moves_refuses_and_impairs() {
        let mut mem = Arena::new(64);
        let (mut a, mut b) = loop_pair(3);
        let pk: Vec<Pkt> = (0..5u8).map(|i| mem.load(&[i; 20], 0).unwrap()).collect();
        assert_eq!(Port::<Arena>::tx_burst(&mut a, &mut mem, &pk), 3);
        assert_eq!(a.stats().refused, 2);
        assert_eq!(mem.free_count(), 64 - 3);
        let mut v = Vector::default();
        assert_eq!(Port::<Arena>::rx_burst(&mut b, &mut mem, &mut v), 3);
        let got: Vec<u8> = v.as_slice().iter().map(|p| mem.data(p)[0]).collect();
        assert_eq!(got, [0, 1, 2]);
        assert!(v.as_slice().iter().all(|p| p.rx_port == 1));
        for p in v.as_slice() {
            mem.free(p.buf);
        }
        // Hold 0 (swap with 1), drop 2, duplicate 3.
        a.set_filter(|f: &[u8]| match f[0] {
            0 => Verdict::Hold,
            2 => Verdict::Drop,
            3 => Verdict::Duplicate,
            _ => Verdict::Pass,
        });
        let pk: Vec<Pkt> = (0..4u8).map(|i| mem.load(&[i; 20], 0).unwrap()).collect();
        assert_eq!(Port::<Arena>::tx_burst(&mut a, &mut mem, &pk[..2]), 2);
        assert_eq!(Port::<Arena>::tx_burst(&mut a, &mut mem, &pk[2..]), 2);
        let mut v = Vector::default();
        Port::<Arena>::rx_burst(&mut b, &mut mem, &mut v);
        let got: Vec<u8> = v.as_slice().iter().map(|p| mem.data(p)[0]).collect();
        assert_eq!(got, [1, 0, 3, 3]);
        let s = a.stats();
        assert_eq!((s.dropped, s.duplicated, s.held), (1, 1, 1));
    }
}
