//! WRED (weighted random early detection), the other active queue management of
//! best-effort queues: RED (Floyd and Jacobson, 1993) with a profile per drop precedence.
//!
//! At every arrival the queue's average depth is updated, an exponentially weighted
//! moving average of its depth in packets with weight 2^-n (`avg += (q - avg) / 2^n`);
//! after an idle period (the queue was empty) the average instead decays as if `m`
//! packets of the typical size had been sent meanwhile: `avg *= (1 - 2^-n)^m`, as RED does.
//! The packet's profile (by its drop precedence: green, yellow, red) then decides: below
//! `min` it is queued, from `max` on it is dropped, and in between it is dropped with
//! probability `max_p * (avg - min) / (max - min)`, each packet on its own (no spacing by
//! the count since the last drop).
//!
//! Fixed point throughout: the average in 1/65,536 of a packet, probabilities in 1/2^32,
//! the random numbers from a xorshift64* per queue. Nothing allocates, locks or panics.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The average's fractional bits.
const AVG_SHIFT: u32 = 16;
/// Probability 1 in the fixed point of [`WredProfile::max_p`].
pub const P_ONE: u64 = 1 << 32;
/// The weights a configuration may give (`n` of 2^-n).
pub const WEIGHTS: std::ops::RangeInclusive<u8> = 1..=16;
/// The weight when none is given (Cisco's and rte_red's default exponent).
pub const DEFAULT_WEIGHT: u8 = 9;
/// The size of the typical packet of the idle decay, bytes (tc red's default `avpkt`).
pub const IDLE_PACKET_BYTES: u64 = 1_000;

/// One drop precedence's thresholds and probability.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WredProfile {
    /// Below this average depth (packets) nothing is dropped.
    pub min: u32,
    /// From this average depth on everything is dropped.
    pub max: u32,
    /// The drop probability as the average reaches `max`, in 1/2^32 ([`P_ONE`]: 1).
    pub max_p: u64,
}

impl WredProfile {
    /// The drop probability at average `avg` (fixed point), in 1/2^32.
    #[inline]
    fn probability(&self, avg: u64) -> u64 {
        let lo = u64::from(self.min) << AVG_SHIFT;
        let hi = u64::from(self.max) << AVG_SHIFT;
        if avg < lo {
            0
        } else if avg >= hi {
            P_ONE
        } else {
            // max_p <= 2^32 and avg - lo < 2^32: no overflow.
            (self.max_p.min(P_ONE) * (avg - lo))
                .checked_div(hi - lo)
                .unwrap_or(P_ONE)
        }
    }
}

/// A queue's WRED parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WredParams {
    /// The average's weight is 2^-`weight`.
    pub weight: u8,
    /// The profiles by drop precedence: green (AFx1, and every DSCP that is not AF),
    /// yellow (AFx2), red (AFx3).
    pub profiles: [WredProfile; 3],
    /// The time to send one typical packet, ns: an idle period of `t` decays the
    /// average as `t / idle_packet_ns` arrivals of an empty queue would.
    pub idle_packet_ns: u64,
}

impl WredParams {
    /// The time [`IDLE_PACKET_BYTES`] take at `rate_bps` (at least 1 ns).
    pub fn packet_time_ns(rate_bps: u64) -> u64 {
        (IDLE_PACKET_BYTES * 8 * 1_000_000_000)
            .checked_div(rate_bps)
            .unwrap_or(1)
            .max(1)
    }

    /// What is wrong with them for a queue of `limit` packets, if anything.
    pub fn check(&self, limit: usize) -> Result<(), String> {
        if !WEIGHTS.contains(&self.weight) {
            return Err(format!(
                "weight {} is out of range: {} to {}",
                self.weight,
                WEIGHTS.start(),
                WEIGHTS.end()
            ));
        }
        for (p, name) in self.profiles.iter().zip(["green", "yellow", "red"]) {
            if p.min >= p.max {
                return Err(format!("{name}: min {} is not below max {}", p.min, p.max));
            }
            if p.max as usize > limit {
                return Err(format!(
                    "{name}: max {} is above the queue's limit ({limit} packets)",
                    p.max
                ));
            }
            if p.max_p == 0 || p.max_p > P_ONE {
                return Err(format!(
                    "{name}: the probability must be above 0 and at most 1"
                ));
            }
        }
        Ok(())
    }
}

/// Seeds for the queues' random sources: each [`Wred::seeded`] queue takes the next.
static SEEDS: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);

/// One queue's WRED state.
#[derive(Clone, Debug)]
pub struct Wred {
    params: WredParams,
    /// The average depth, in 1/65,536 of a packet.
    avg: u64,
    /// Since when the queue has been empty, if it became empty by a dequeue.
    idle_since: Option<u64>,
    rng: u64,
}

/// splitmix64's finaliser: a well-mixed state from any seed.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `avg * (1 - 2^-n)^m`, by squaring in 32-bit fixed point (at most 64 rounds).
fn decay(avg: u64, n: u8, mut m: u64) -> u64 {
    let n = u32::from(n.clamp(1, 31));
    let mut base: u64 = P_ONE - (P_ONE >> n);
    let mut f: u64 = P_ONE;
    while m > 0 && f > 0 {
        if m & 1 == 1 {
            // Both at most 2^32, and base below it: the product fits.
            f = (f * base) >> 32;
        }
        base = (base * base) >> 32;
        m >>= 1;
    }
    ((u128::from(avg) * u128::from(f)) >> 32) as u64
}

impl Wred {
    /// A queue's state with its random source seeded from `seed`, average 0.
    pub fn new(params: WredParams, seed: u64) -> Wred {
        Wred {
            params,
            avg: 0,
            idle_since: None,
            rng: mix(seed) | 1,
        }
    }

    /// A queue's state with the next seed of the process (each queue its own sequence).
    pub fn seeded(params: WredParams) -> Wred {
        Wred::new(params, SEEDS.fetch_add(0x9e37_79b9_7f4a_7c15, Relaxed))
    }

    /// Its parameters.
    pub fn params(&self) -> &WredParams {
        &self.params
    }

    /// The average depth, packets.
    pub fn average(&self) -> f64 {
        self.avg as f64 / f64::from(1u32 << AVG_SHIFT)
    }

    #[inline]
    fn next_random(&mut self) -> u64 {
        // xorshift64*.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Update the average for an arrival at `now` to a queue of `depth` packets.
    #[inline]
    fn update(&mut self, now: u64, depth: usize) {
        let n = u32::from(self.params.weight.clamp(1, 31));
        if depth == 0 {
            if let Some(since) = self.idle_since {
                let m = now.saturating_sub(since) / self.params.idle_packet_ns.max(1);
                self.avg = decay(self.avg, self.params.weight, m);
                // Idle on from now, unless this packet is queued.
                self.idle_since = Some(now);
                return;
            }
        } else {
            self.idle_since = None;
        }
        let q = (depth.min(1 << 31) as u64) << AVG_SHIFT;
        self.avg = self.avg - (self.avg >> n) + (q >> n);
    }

    /// Whether to drop a packet of drop precedence `precedence` (0 green, 1 yellow, 2
    /// red; above: red) that arrives at `now` at a queue of `depth` packets.
    #[inline]
    pub fn arrival(&mut self, now: u64, depth: usize, precedence: u8) -> bool {
        self.update(now, depth);
        self.decide(precedence)
    }

    /// The decision at the current average.
    #[inline]
    fn decide(&mut self, precedence: u8) -> bool {
        let prof = self.params.profiles[usize::from(precedence.min(2))];
        match prof.probability(self.avg) {
            0 => false,
            P_ONE => true,
            p => self.next_random() >> 32 < p,
        }
    }

    /// The queue became empty at `now` (its last packet left).
    #[inline]
    pub fn idle(&mut self, now: u64) {
        self.idle_since = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn profile(min: u32, max: u32, p: f64) -> WredProfile {
        WredProfile {
            min,
            max,
            max_p: (p * P_ONE as f64) as u64,
        }
    }

    fn params(weight: u8) -> WredParams {
        WredParams {
            weight,
            profiles: [
                profile(40, 100, 0.1),
                profile(30, 100, 0.2),
                profile(20, 100, 0.5),
            ],
            idle_packet_ns: 1_000,
        }
    }

    #[test]
    fn the_average_is_an_ewma_of_the_depth() {
        let mut w = Wred::new(params(2), 1);
        // From 0 at depth 64: a quarter of the way each time.
        w.update(0, 64);
        assert_eq!(w.average(), 16.0);
        w.update(0, 64);
        assert_eq!(w.average(), 28.0);
        for _ in 0..200 {
            w.update(0, 64);
        }
        assert!((w.average() - 64.0).abs() < 0.01, "{}", w.average());
        // Weight 9: 1/512 of the way.
        let mut w = Wred::new(params(9), 1);
        w.update(0, 512);
        assert_eq!(w.average(), 1.0);
        // 512 arrivals at a steady depth: 1 - 1/e of the way, as an EWMA.
        let mut w = Wred::new(params(9), 1);
        for _ in 0..512 {
            w.update(0, 100);
        }
        let want = 100.0 * (1.0 - (1.0f64 - 1.0 / 512.0).powi(512));
        assert!((w.average() - want).abs() < 0.1, "{} {want}", w.average());
    }

    /// Drop fractions over many decisions at a fixed average: never below `min`, always
    /// from `max` on, linear in between (within 3.5 standard deviations, 4 * sqrt(p(1-p)/n)).
    #[test]
    fn the_drop_probability_is_linear_between_min_and_max() {
        let n = 100_000;
        let mut w = Wred::new(params(9), 7);
        let mut fraction = |avg: f64, prec: u8| {
            w.avg = (avg * 65_536.0) as u64;
            (0..n).filter(|_| w.decide(prec)).count() as f64 / n as f64
        };
        for avg in [0.0, 10.0, 39.9] {
            assert_eq!(fraction(avg, 0), 0.0, "avg {avg}");
        }
        for avg in [100.0, 100.5, 1_000.0] {
            for prec in 0..3 {
                assert_eq!(fraction(avg, prec), 1.0, "avg {avg}");
            }
        }
        for (avg, prec, want) in [
            (40.0, 0, 0.0),
            (55.0, 0, 0.025),
            (70.0, 0, 0.05),
            (85.0, 0, 0.075),
            (99.0, 0, 0.1 * 59.0 / 60.0),
            (65.0, 1, 0.2 * 35.0 / 70.0),
            (60.0, 2, 0.5 * 0.5),
            (20.0, 2, 0.0),
            (36.0, 2, 0.1),
        ] {
            let got = fraction(avg, prec);
            let sd = (want * (1.0 - want) / n as f64).sqrt();
            assert!(
                (got - want).abs() <= 4.0 * sd + 1e-9,
                "avg {avg} precedence {prec}: dropped {got}, expected {want}"
            );
        }
        // Precedences above red are red: 0.5 * 5 / 80.
        let (want, got) = (0.031_25, fraction(25.0, 9));
        assert!((got - want).abs() <= 4.0 * (want * (1.0 - want) / n as f64).sqrt());
    }

    #[test]
    fn an_idle_queue_decays_its_average_as_red_does() {
        let mut w = Wred::new(params(4), 1);
        for _ in 0..400 {
            w.update(0, 80);
        }
        let a0 = w.average();
        assert!((a0 - 80.0).abs() < 0.01);
        // Empty at t = 1 ms; an arrival 50 µs later: 50 packet times of 1 µs.
        w.idle(1_000_000);
        w.update(1_050_000, 0);
        let want = a0 * (1.0f64 - 1.0 / 16.0).powi(50);
        assert!((w.average() - want).abs() < 0.01, "{} {want}", w.average());
        // The packet was dropped (still empty): idle on from there, not from 1 ms.
        w.update(1_060_000, 0);
        let want = want * (1.0f64 - 1.0 / 16.0).powi(10);
        assert!((w.average() - want).abs() < 0.01, "{} {want}", w.average());
        // A long idle period forgets it all.
        w.idle(2_000_000);
        w.update(1_000_000_000_000, 0);
        assert_eq!(w.average(), 0.0);
        // Not idle (never emptied by a dequeue): an ordinary update with depth 0.
        let mut w = Wred::new(params(1), 1);
        w.update(0, 8);
        w.update(5, 0);
        assert_eq!(w.average(), 2.0);
    }

    #[test]
    fn decay_matches_the_power() {
        for (n, m) in [
            (1, 1),
            (9, 1),
            (9, 512),
            (4, 1_000),
            (16, 70_000),
            (3, u64::MAX),
        ] {
            let got = decay(1_000 << AVG_SHIFT, n, m) as f64 / 65_536.0;
            let want = 1_000.0 * (1.0f64 - 0.5f64.powi(i32::from(n))).powf(m as f64);
            assert!(
                (got - want).abs() < 0.01 + want * 1e-4,
                "n {n} m {m}: {got} {want}"
            );
        }
    }

    #[test]
    fn bad_parameters_are_named() {
        let ok = params(9);
        assert_eq!(ok.check(100), Ok(()));
        assert!(ok
            .check(99)
            .unwrap_err()
            .contains("above the queue's limit"));
        let mut p = ok;
        p.weight = 0;
        assert!(p.check(100).unwrap_err().starts_with("weight 0"));
        let mut p = ok;
        p.profiles[1].min = 100;
        assert_eq!(
            p.check(100).unwrap_err(),
            "yellow: min 100 is not below max 100"
        );
        let mut p = ok;
        p.profiles[2].max_p = 0;
        assert!(p
            .check(100)
            .unwrap_err()
            .starts_with("red: the probability"));
        assert_eq!(WredParams::packet_time_ns(8_000_000), 1_000_000);
        assert_eq!(WredParams::packet_time_ns(0), 1);
    }

    proptest! {
        /// Over any arrivals and idle periods the average stays between 0 and the
        /// deepest queue seen, and the decision never panics.
        #[test]
        fn the_average_stays_within_the_depths_seen(
            weight in 1u8..=16,
            ops in proptest::collection::vec((0u64..10_000_000, 0usize..2_048, any::<bool>(), 0u8..4), 1..500),
        ) {
            let mut w = Wred::new(params(weight), 3);
            let (mut now, mut deepest) = (0u64, 0usize);
            for (dt, depth, empties, prec) in ops {
                now += dt;
                deepest = deepest.max(depth);
                let _ = w.arrival(now, depth, prec);
                prop_assert!(w.average() <= deepest as f64 + 1e-9);
                if empties {
                    w.idle(now);
                }
            }
        }
    }
}
