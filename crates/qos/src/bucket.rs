//! Token buckets on a nanosecond clock, with exact integer arithmetic.
//!
//! A token is a billionth of a bit: a rate of `r` bit/s adds exactly `r` tokens per
//! nanosecond, so refilling is one multiplication with no rounding and no drift, and a
//! packet of `n` bytes costs `n * 8 * 10^9` tokens.
//!
//! **Across workers: atomics, not per-worker shares.** A policer or shaper is one object
//! that every worker charges with compare-and-swap on its counters; the worker that moves
//! the refill clock forward adds the tokens for the time elapsed. The decision is exact
//! however the flows are spread over the workers (per-worker shares police a flow hashed
//! to one worker at `rate / workers` until a rebalancing catches up, and need a thread to
//! do it), nothing is ever locked, and a single worker pays only uncontended atomic
//! operations. The price is a cache line that moves between cores when several workers
//! charge the same bucket at once: `examples/policer_sharing.rs` measures it against
//! per-worker shares (docs/performance.md, issue 28).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

/// Tokens per bit.
pub const TOKENS_PER_BIT: u64 = 1_000_000_000;
/// The largest burst (bucket size) a bucket accepts, in bytes (100 MB): its tokens fit
/// 63 bits.
pub const MAX_BURST_BYTES: u64 = 100_000_000;
/// The highest rate a bucket accepts, in bit/s (1 Tbit/s).
pub const MAX_RATE_BPS: u64 = 1_000_000_000_000;

/// What `bytes` bytes cost, in tokens.
#[inline]
pub const fn cost(bytes: u64) -> u64 {
    bytes.saturating_mul(8 * TOKENS_PER_BIT)
}

/// The refill clock of one or more buckets: the time up to which tokens have been added.
#[derive(Debug, Default)]
pub struct Clock {
    last_ns: AtomicU64,
}

impl Clock {
    /// A clock whose buckets are full at `now_ns`.
    pub fn new(now_ns: u64) -> Clock {
        Clock {
            last_ns: AtomicU64::new(now_ns),
        }
    }

    /// Move the clock to `now_ns` and return the nanoseconds elapsed since its last move,
    /// which the caller turns into tokens; `0` when `now_ns` is not later (another worker
    /// moved it first, or its clock reads a little behind). Each elapsed nanosecond is
    /// handed out exactly once, whichever worker asks.
    #[inline]
    pub fn advance(&self, now_ns: u64) -> u64 {
        let mut last = self.last_ns.load(Relaxed);
        loop {
            if now_ns <= last {
                return 0;
            }
            match self
                .last_ns
                .compare_exchange_weak(last, now_ns, Relaxed, Relaxed)
            {
                Ok(_) => return now_ns - last,
                Err(seen) => last = seen,
            }
        }
    }
}

/// A bucket of tokens between 0 and its size (the policers' buckets).
#[derive(Debug)]
pub struct Bucket {
    tokens: AtomicU64,
    size: u64,
}

impl Bucket {
    /// A full bucket of `burst_bytes` bytes (at most [`MAX_BURST_BYTES`]).
    pub fn full(burst_bytes: u64) -> Bucket {
        let size = cost(burst_bytes.min(MAX_BURST_BYTES));
        Bucket {
            tokens: AtomicU64::new(size),
            size,
        }
    }

    /// Its tokens now.
    #[inline]
    pub fn tokens(&self) -> u64 {
        self.tokens.load(Relaxed)
    }

    /// Its size in tokens.
    #[inline]
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Add `n` tokens up to the size; returns those that did not fit.
    #[inline]
    pub fn fill(&self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        let mut t = self.tokens.load(Relaxed);
        loop {
            let want = t.saturating_add(n);
            let new = want.min(self.size);
            if new == t {
                return n;
            }
            match self.tokens.compare_exchange_weak(t, new, Relaxed, Relaxed) {
                Ok(_) => return want - new,
                Err(seen) => t = seen,
            }
        }
    }

    /// Take `n` tokens if the bucket holds that many (`Tc - B >= 0` in the RFCs' words).
    #[inline]
    pub fn take(&self, n: u64) -> bool {
        let mut t = self.tokens.load(Relaxed);
        loop {
            if t < n {
                return false;
            }
            match self
                .tokens
                .compare_exchange_weak(t, t - n, Relaxed, Relaxed)
            {
                Ok(_) => return true,
                Err(seen) => t = seen,
            }
        }
    }
}

/// A shaper's bucket: a rate and a burst, where a packet may leave while any token is left
/// and the bucket then goes into debt. Over any interval of `T` ns it lets through at most
/// `rate * T + burst + one packet` bits, and exactly the rate over a long busy period
/// whatever the packet sizes (a bucket that must hold a whole packet's tokens would idle
/// while it fills up).
#[derive(Debug)]
pub struct Shaper {
    rate_bps: u64,
    size: i64,
    tokens: AtomicI64,
    clock: Clock,
}

impl Shaper {
    /// A full shaper of `rate_bps` bit/s and `burst_bytes` bytes, its clock at `now_ns`.
    /// Rate and burst are clamped to [`MAX_RATE_BPS`] and [`MAX_BURST_BYTES`].
    pub fn new(rate_bps: u64, burst_bytes: u64, now_ns: u64) -> Shaper {
        let size = cost(burst_bytes.min(MAX_BURST_BYTES)) as i64;
        Shaper {
            rate_bps: rate_bps.min(MAX_RATE_BPS),
            size,
            tokens: AtomicI64::new(size),
            clock: Clock::new(now_ns),
        }
    }

    /// Its rate in bit/s.
    pub fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    /// Add the tokens of the time elapsed up to `now_ns`.
    #[inline]
    pub fn refill(&self, now_ns: u64) {
        let dt = self.clock.advance(now_ns);
        if dt == 0 {
            return;
        }
        let add = i64::try_from(dt.saturating_mul(self.rate_bps)).unwrap_or(i64::MAX);
        let mut t = self.tokens.load(Relaxed);
        loop {
            let new = t.saturating_add(add).min(self.size);
            if new == t {
                return;
            }
            match self.tokens.compare_exchange_weak(t, new, Relaxed, Relaxed) {
                Ok(_) => return,
                Err(seen) => t = seen,
            }
        }
    }

    /// Whether a packet may leave now (some token left; call [`Shaper::refill`] first).
    #[inline]
    pub fn conforms(&self) -> bool {
        self.tokens.load(Relaxed) > 0
    }

    /// Charge `bytes` bytes (the bucket may go into debt).
    #[inline]
    pub fn charge(&self, bytes: u64) {
        let c = cost(bytes) as i64;
        self.tokens.fetch_sub(c, Relaxed);
    }

    /// Charge `bytes` bytes without going below minus the bucket size: a minimum-rate
    /// bucket forgets, after a while, what its class got beyond its minimum.
    #[inline]
    pub fn charge_floored(&self, bytes: u64) {
        let c = cost(bytes) as i64;
        let floor = -self.size;
        let mut t = self.tokens.load(Relaxed);
        loop {
            let new = t.saturating_sub(c).max(floor.min(t));
            match self.tokens.compare_exchange_weak(t, new, Relaxed, Relaxed) {
                Ok(_) => return,
                Err(seen) => t = seen,
            }
        }
    }

    /// Its tokens now (negative: in debt).
    pub fn tokens(&self) -> i64 {
        self.tokens.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn icost(b: u64) -> i64 {
        cost(b) as i64
    }

    #[test]
    fn the_clock_hands_out_each_nanosecond_once() {
        let c = Clock::new(100);
        assert_eq!(c.advance(150), 50);
        assert_eq!(c.advance(150), 0);
        assert_eq!(c.advance(120), 0, "a clock behind gets nothing");
        assert_eq!(c.advance(200), 50);
    }

    #[test]
    fn a_bucket_fills_to_its_size_and_returns_the_overflow() {
        let b = Bucket::full(100);
        assert!(b.take(cost(60)));
        assert!(!b.take(cost(41)));
        assert!(b.take(cost(40)));
        assert_eq!(b.tokens(), 0);
        assert_eq!(b.fill(cost(30)), 0);
        assert_eq!(b.fill(cost(100)), cost(30));
        assert_eq!(b.tokens(), b.size());
    }

    #[test]
    fn a_rate_adds_its_bits_per_second_exactly() {
        // 8 Mbit/s is one byte per microsecond.
        let s = Shaper::new(8_000_000, 1_000, 0);
        s.charge(1_000);
        assert_eq!(s.tokens(), 0);
        s.refill(1_000);
        assert_eq!(s.tokens(), icost(1));
        s.refill(1_000_000);
        assert_eq!(s.tokens(), icost(1_000), "capped at the burst");
    }

    #[test]
    fn a_shaper_goes_into_debt_and_waits_it_out() {
        let s = Shaper::new(8_000_000, 100, 0);
        assert!(s.conforms());
        s.charge(1_500);
        assert!(!s.conforms());
        s.refill(1_400_000);
        assert!(!s.conforms(), "1,400 bytes repaid, 1,400 owed");
        s.refill(1_400_001);
        assert!(s.conforms());
        s.charge_floored(1_000_000);
        assert_eq!(s.tokens(), -icost(100), "floored at minus the burst");
    }

    #[test]
    fn buckets_are_shared_by_threads_without_losing_tokens() {
        let b = std::sync::Arc::new(Bucket::full(1_000_000));
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || (0..100_000).filter(|_| b.take(cost(1))).count())
            })
            .collect();
        let taken: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(taken, 400_000);
        assert_eq!(b.tokens(), cost(600_000));
    }
}
