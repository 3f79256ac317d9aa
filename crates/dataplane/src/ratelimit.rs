//! Rate limits of the ICMP errors a worker sends: a token bucket for all, and a bounded
//! table of per-destination buckets (as Linux's `icmp_ratelimit` and its peer limit).

/// Token bucket, per worker (no sharing, no locks).
pub struct RateLimiter {
    rate: u64,
    burst_nano_tokens: u64,
    nano_tokens: u64,
    last_ns: u64,
}

impl RateLimiter {
    /// `rate` tokens per second, at most `burst` at once.
    pub fn new(rate: u64, burst: u64) -> RateLimiter {
        let burst_nano_tokens = burst.saturating_mul(1_000_000_000);
        RateLimiter {
            rate,
            burst_nano_tokens,
            nano_tokens: burst_nano_tokens,
            last_ns: 0,
        }
    }
    /// Add the tokens earned since the last call.
    #[inline]
    pub fn refill(&mut self, now_ns: u64) {
        let dt = now_ns.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(now_ns);
        self.nano_tokens = self
            .nano_tokens
            .saturating_add(dt.saturating_mul(self.rate))
            .min(self.burst_nano_tokens);
    }
    /// Whether a token is available (without taking it).
    #[inline]
    pub fn has_token(&self) -> bool {
        self.nano_tokens >= 1_000_000_000
    }
    /// Take one token if available.
    #[inline]
    pub fn take(&mut self) -> bool {
        if self.nano_tokens >= 1_000_000_000 {
            self.nano_tokens -= 1_000_000_000;
            true
        } else {
            false
        }
    }
}

/// Slots of the per-destination table (a power of two).
const PEER_SLOTS: usize = 1024;

/// One destination's bucket: credit in nanoseconds, as Linux's `inet_peer_xrlim_allow`
/// keeps it in jiffies.
#[derive(Clone, Copy, Default)]
struct PeerSlot {
    /// The destination (IPv4 as `::ffff:a.b.c.d`); 0 for an empty slot.
    key: u128,
    credit_ns: u64,
    last_ns: u64,
}

/// ICMP errors per destination, as Linux limits them per peer (`icmp_ratelimit`, 1 s, with
/// a burst of 6): on top of the worker's global bucket, so that one spoofed victim does not
/// get the whole budget. A direct-mapped table per worker, touched only when an error is
/// about to be built; a destination that lands on a taken slot takes it over with a fresh
/// bucket (Linux's peer cache evicts too), so the table never grows.
pub struct PeerLimiter {
    slots: Box<[PeerSlot; PEER_SLOTS]>,
    interval_ns: u64,
    burst: u64,
}

impl PeerLimiter {
    /// One error per `interval_ns` per destination, `burst` at once.
    pub fn new(interval_ns: u64, burst: u64) -> PeerLimiter {
        PeerLimiter {
            slots: Box::new([PeerSlot::default(); PEER_SLOTS]),
            interval_ns: interval_ns.max(1),
            burst: burst.max(1),
        }
    }

    /// Whether an error may go to `dst` at `now_ns` (taking its token if so).
    pub fn allow(&mut self, dst: u128, now_ns: u64) -> bool {
        let h = (dst as u64) ^ ((dst >> 64) as u64);
        let i = (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize % PEER_SLOTS;
        let cap = self.burst.saturating_mul(self.interval_ns);
        let s = &mut self.slots[i];
        if s.key != dst || dst == 0 {
            *s = PeerSlot {
                key: dst,
                credit_ns: cap,
                last_ns: now_ns,
            };
        }
        s.credit_ns = s
            .credit_ns
            .saturating_add(now_ns.saturating_sub(s.last_ns))
            .min(cap);
        s.last_ns = s.last_ns.max(now_ns);
        if s.credit_ns >= self.interval_ns {
            s.credit_ns -= self.interval_ns;
            true
        } else {
            false
        }
    }
}

/// The per-destination key of an IPv4 address.
pub(crate) fn peer4(a: u32) -> u128 {
    0xffff_0000_0000 | u128::from(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limiter_bursts_then_refills() {
        let mut r = RateLimiter::new(10, 3);
        r.refill(0);
        assert!(r.take() && r.take() && r.take());
        assert!(!r.take());
        r.refill(100_000_000); // 0.1 s at 10/s = 1 token
        assert!(r.take());
        assert!(!r.take());
        r.refill(100_000_000_000); // long idle: capped at the burst
        assert_eq!((0..10).filter(|_| r.take()).count(), 3);
    }

    #[test]
    fn peer_limiter_gives_each_destination_its_own_burst_then_one_a_second() {
        let s = 1_000_000_000u64;
        let mut l = PeerLimiter::new(s, 6);
        let victim = peer4(0xc000_0202);
        assert_eq!((0..100).filter(|_| l.allow(victim, 5 * s)).count(), 6);
        // Another destination is not affected.
        assert!(l.allow(peer4(0xc000_0203), 5 * s));
        // One more a second afterwards, and never more than the burst after a pause.
        assert!(!l.allow(victim, 5 * s + s / 2));
        assert!(l.allow(victim, 6 * s));
        assert!(!l.allow(victim, 6 * s));
        assert_eq!((0..100).filter(|_| l.allow(victim, 1000 * s)).count(), 6);
        // A thousand destinations churning the table never make it grow or panic.
        for a in 0..100_000u32 {
            l.allow(peer4(a), 2000 * s);
        }
    }
}
