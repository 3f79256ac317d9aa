//! Anti-replay (RFC 4303 §3.4.3) with extended sequence numbers (RFC 4303 Appendix A),
//! kept as RFC 6479's ring of 64-bit blocks: sliding the window clears the blocks it
//! enters and never shifts the bitmap.
//!
//! Receiving a packet is two steps, as the RFC requires: [`Replay::check`] before the ICV
//! is verified (cheap rejection of replays, no state changed), [`Replay::update`] after it
//! verified (only authenticated packets move the window).
//!
//! The ring has a power-of-two number of blocks, at least one more than the window needs,
//! so the blocks the window spans are never cleared while in it. Which packets are
//! accepted depends on the configured window only: a packet is new if it is right of the
//! highest accepted number (`top`), or within `window` of it and not yet seen.

/// The receive window of an inbound SA.
#[derive(Clone, Debug)]
pub struct Replay {
    window: u64,
    /// The highest sequence number accepted so far (0: none).
    top: u64,
    /// Block count minus one (a power of two minus one).
    mask: u64,
    /// In the SA chunks for windows up to 1,984 packets (huge pages, beside the SAs: no
    /// TLB miss of its own), on the heap beyond.
    bits: crate::arena::Blocks,
}

impl Replay {
    /// Smallest and largest window sizes accepted (multiples of 64).
    pub const WINDOW_RANGE: std::ops::RangeInclusive<u32> = 64..=65536;

    /// A window of `window` packets: a multiple of 64 in [`Replay::WINDOW_RANGE`] (the SA
    /// checks; other values are rounded up into it).
    pub fn new(window: u32) -> Replay {
        let window = window.clamp(64, 65536).div_ceil(64) * 64;
        let blocks = (window as usize / 64 + 1).next_power_of_two();
        Replay {
            window: u64::from(window),
            top: 0,
            mask: blocks as u64 - 1,
            bits: crate::arena::Blocks::zeroed(blocks),
        }
    }

    /// The window size in packets.
    pub fn window(&self) -> u32 {
        self.window as u32
    }

    /// The highest sequence number accepted (0 before the first).
    pub fn top(&self) -> u64 {
        self.top
    }

    /// Bytes of the bitmap (apart from the SA: in the SA chunks or on the heap).
    pub fn bitmap_bytes(&self) -> usize {
        self.bits.len() * 8
    }

    /// Hint the CPU to bring in the bitmap's block for `top + 1` (where the next packet
    /// in order lands).
    #[inline]
    pub(crate) fn prefetch_next(&self) {
        let i = (((self.top + 1) >> 6) & self.mask) as usize;
        dataplane::buffer::prefetch(self.bits.as_ptr().wrapping_add(i).cast::<u8>());
    }

    /// The full 64-bit sequence number of a packet carrying `low` (RFC 4303 Appendix A2.2:
    /// the high half is inferred from the window's position). `None` for a number that
    /// would lie before sequence number 0: necessarily a replay.
    pub fn infer(&self, low: u32) -> Option<u64> {
        let w = self.window as u32;
        let tl = self.top as u32;
        let th = (self.top >> 32) as u32;
        let high = if tl >= w - 1 {
            // Case A: the window lies within one subspace of 2^32.
            if low >= tl - (w - 1) {
                th
            } else {
                th.checked_add(1)?
            }
        } else if low >= tl.wrapping_sub(w - 1) {
            // Case B: the window spans two subspaces; `low` is in the lower (older) one.
            th.checked_sub(1)?
        } else {
            th
        };
        Some(u64::from(high) << 32 | u64::from(low))
    }

    /// Whether `seq` may be accepted: not 0 (never sent), not left of the window, not seen.
    /// Changes nothing.
    pub fn check(&self, seq: u64) -> bool {
        if seq == 0 {
            return false;
        }
        if seq > self.top {
            return true;
        }
        if self.top - seq >= self.window {
            return false;
        }
        self.bits
            .get(((seq >> 6) & self.mask) as usize)
            .is_some_and(|b| b & (1 << (seq & 63)) == 0)
    }

    /// Records `seq`, whose ICV verified, moving the window if it is new on the right.
    /// False (and nothing changed) if [`Replay::check`] would refuse it.
    pub fn update(&mut self, seq: u64) -> bool {
        if !self.check(seq) {
            return false;
        }
        if seq > self.top {
            let from = self.top >> 6;
            let to = seq >> 6;
            let clear = (to - from).min(self.mask + 1);
            for i in 1..=clear {
                if let Some(b) = self.bits.get_mut(((from + i) & self.mask) as usize) {
                    *b = 0;
                }
            }
            self.top = seq;
        }
        if let Some(b) = self.bits.get_mut(((seq >> 6) & self.mask) as usize) {
            *b |= 1 << (seq & 63);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    /// The window as the RFC describes it, without tricks.
    struct Model {
        window: u64,
        seen: BTreeSet<u64>,
    }

    impl Model {
        fn top(&self) -> u64 {
            self.seen.last().copied().unwrap_or(0)
        }
        fn check(&self, seq: u64) -> bool {
            seq != 0
                && !self.seen.contains(&seq)
                && (seq > self.top() || self.top() - seq < self.window)
        }
        fn update(&mut self, seq: u64) -> bool {
            let ok = self.check(seq);
            if ok {
                self.seen.insert(seq);
                let top = self.top();
                // Forget what left the window (the model would otherwise grow).
                while self.seen.first().is_some_and(|&s| top - s >= self.window) {
                    self.seen.pop_first();
                }
            }
            ok
        }
    }

    #[test]
    fn in_order_replay_and_reorder() {
        let mut r = Replay::new(64);
        assert!(!r.check(0));
        for s in 1..=100 {
            assert!(r.check(s));
            assert!(r.update(s));
            assert!(!r.check(s), "{s} replayed");
        }
        assert!(!r.check(36), "left of the window");
        assert!(r.check(200));
        assert!(r.update(200));
        assert!(r.check(199) && r.check(137));
        assert!(!r.check(136), "200 - 64");
        assert!(r.update(150));
        assert!(!r.update(150));
    }

    #[test]
    fn esn_inference() {
        let mut r = Replay::new(1024);
        // Case A, same subspace.
        r.update(5000);
        assert_eq!(r.infer(4500), Some(4500));
        assert_eq!(
            r.infer(3000),
            Some((1 << 32) | 3000),
            "left of the window: next subspace"
        );
        // Near the top of a subspace, the next packets wrap.
        let mut r = Replay::new(1024);
        r.update(0xffff_fff0);
        assert_eq!(r.infer(0xffff_fff5), Some(0xffff_fff5));
        assert_eq!(r.infer(3), Some((1 << 32) | 3));
        // Case B: just after the wrap, late packets of the old subspace.
        r.update((1 << 32) | 3);
        assert_eq!(r.infer(0xffff_ff00), Some(0xffff_ff00));
        assert_eq!(r.infer(10), Some((1 << 32) | 10));
        // Before sequence number 0.
        let r = Replay::new(1024);
        assert_eq!(r.infer(0xffff_ffff), None);
        assert_eq!(r.infer(1), Some(1));
    }

    #[test]
    fn window_sizes() {
        for (w, blocks) in [(64, 2), (1024, 32), (4096, 128), (65536, 2048)] {
            let r = Replay::new(w);
            assert_eq!(r.window(), w);
            assert_eq!(r.bitmap_bytes(), blocks * 8, "{w}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Arbitrary arrivals (jumps forward, late and repeated packets) against the model.
        #[test]
        fn matches_the_model(
            w in prop::sample::select(vec![64u32, 128, 1024, 4096]),
            steps in prop::collection::vec((0u8..4, 0u64..5000), 1..400),
        ) {
            let mut r = Replay::new(w);
            let mut m = Model { window: u64::from(w), seen: BTreeSet::new() };
            let mut last = 0u64;
            for (kind, n) in steps {
                let seq = match kind {
                    0 => m.top() + 1 + n % 8,        // in order, small gaps
                    1 => m.top() + n,                 // jump (maybe far)
                    2 => m.top().saturating_sub(n % (u64::from(w) + 64)), // late, around the edge
                    _ => last,                        // replay
                };
                prop_assert_eq!(r.check(seq), m.check(seq), "check {} top {}", seq, m.top());
                prop_assert_eq!(r.update(seq), m.update(seq), "update {}", seq);
                prop_assert_eq!(r.top(), m.top());
                last = seq;
            }
        }

        /// With ESN, the sender's 64-bit numbers are recovered from their low halves across
        /// 2^32 boundaries, for arrivals within the window.
        #[test]
        fn esn_recovers(start in (1u64 << 32) - 3000..(1u64 << 32) + 3000,
                        jitter in prop::collection::vec(0u64..1000, 1..300)) {
            let mut r = Replay::new(1024);
            r.update(start);
            for (i, j) in jitter.into_iter().enumerate() {
                // Up to 1000 ahead or within the window behind.
                let seq = if i % 3 == 0 { r.top().saturating_sub(j % 1023) } else { r.top() + j };
                if seq == 0 { continue; }
                prop_assert_eq!(r.infer(seq as u32), Some(seq), "top {}", r.top());
                r.update(seq);
            }
        }
    }
}
