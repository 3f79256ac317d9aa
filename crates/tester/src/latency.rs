//! Latency statistics: exact count, minimum, mean and maximum, and percentiles from a
//! log-linear histogram (HDR-style: values below 256 ns are exact, larger ones fall in
//! buckets 1/128 of their power of two wide, so a percentile is within 0.8 % of the true
//! sample). Recording is a few instructions and never allocates.

use serde::{Deserialize, Serialize};

/// Sub-bucket bits: 2^SUB exact values, then 2^(SUB-1) buckets per power of two.
const SUB: u32 = 8;
const HALF: u64 = 1 << (SUB - 1);
const BUCKETS: usize = (1 << SUB) + (64 - SUB as usize) * (1 << (SUB - 1));

/// A latency histogram in nanoseconds.
#[derive(Clone)]
pub struct LatencyHistogram {
    counts: Box<[u64]>,
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram::new()
    }
}

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("count", &self.count)
            .field("min", &self.min)
            .field("max", &self.max)
            .finish()
    }
}

#[inline]
fn index(v: u64) -> usize {
    if v < (1 << SUB) {
        return v as usize;
    }
    let e = 63 - v.leading_zeros(); // ≥ SUB
    let shift = e - (SUB - 1);
    let m = v >> shift; // in [HALF, 2*HALF)
    (1 << SUB) + (e - SUB) as usize * HALF as usize + (m - HALF) as usize
}

/// The largest value that falls into bucket `i`.
fn bucket_high(i: usize) -> u64 {
    if i < (1 << SUB) {
        return i as u64;
    }
    let j = i - (1 << SUB);
    let e = (j / HALF as usize) as u32 + SUB;
    let m = (j % HALF as usize) as u64 + HALF;
    let shift = e - (SUB - 1);
    let low = m << shift;
    low.saturating_add((1u64 << shift) - 1)
}

impl LatencyHistogram {
    /// An empty histogram (allocates its ~60 KiB of buckets once).
    pub fn new() -> LatencyHistogram {
        LatencyHistogram {
            counts: vec![0u64; BUCKETS].into_boxed_slice(),
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }

    /// Forget every sample (no allocation).
    pub fn clear(&mut self) {
        self.counts.fill(0);
        self.count = 0;
        self.sum = 0;
        self.min = u64::MAX;
        self.max = 0;
    }

    /// Record one sample of `ns` nanoseconds.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.counts[index(ns)] += 1;
        self.count += 1;
        self.sum += u128::from(ns);
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
    }

    /// Add every sample of `other`.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.count += other.count;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Smallest sample (exact), if any.
    pub fn min(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min)
    }

    /// Largest sample (exact), if any.
    pub fn max(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max)
    }

    /// Mean (exact), if any.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }

    /// The `q`-quantile (0 < q ≤ 1): the smallest recorded bucket value such that at least
    /// `ceil(q × count)` samples are at or below it, reported as the bucket's upper bound
    /// clamped to the exact [min, max] (so it is never below the true quantile and at most
    /// 1/128 above it).
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(bucket_high(i).clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }

    /// Summary in microseconds.
    pub fn stats(&self) -> LatencyStats {
        let us = |v: Option<u64>| v.map_or(0.0, |v| v as f64 / 1000.0);
        LatencyStats {
            samples: self.count,
            min_us: us(self.min()),
            avg_us: self.mean().map_or(0.0, |m| m / 1000.0),
            max_us: us(self.max()),
            p50_us: us(self.quantile(0.50)),
            p99_us: us(self.quantile(0.99)),
            p999_us: us(self.quantile(0.999)),
        }
    }
}

/// Latency summary in microseconds (all 0 when `samples` is 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyStats {
    /// Frames measured: every signature frame of the trial received on the right port,
    /// duplicates included (nothing is excluded).
    pub samples: u64,
    /// Minimum (exact).
    pub min_us: f64,
    /// Mean (exact).
    pub avg_us: f64,
    /// Maximum (exact).
    pub max_us: f64,
    /// Median (histogram, ≤ 0.8 % high).
    pub p50_us: f64,
    /// 99th percentile (histogram, ≤ 0.8 % high).
    pub p99_us: f64,
    /// 99.9th percentile (histogram, ≤ 0.8 % high).
    pub p999_us: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_monotone() {
        let mut last = 0usize;
        for v in (0..100_000u64).chain([u64::MAX / 2, u64::MAX]) {
            let i = index(v);
            assert!(i >= last && i < BUCKETS);
            assert!(bucket_high(i) >= v, "{v}");
            last = i;
        }
        assert_eq!(index(u64::MAX), BUCKETS - 1);
        for i in 1..BUCKETS {
            assert_eq!(index(bucket_high(i - 1) + 1), i);
        }
    }

    #[test]
    fn known_statistics() {
        let mut h = LatencyHistogram::new();
        assert_eq!(h.stats(), LatencyStats::default());
        // 1..=1000 µs, one sample each.
        for us in 1..=1000u64 {
            h.record(us * 1000);
        }
        let s = h.stats();
        assert_eq!(s.samples, 1000);
        assert_eq!(s.min_us, 1.0);
        assert_eq!(s.max_us, 1000.0);
        assert!((s.avg_us - 500.5).abs() < 1e-9);
        assert!(
            s.p99_us >= 990.0 && s.p99_us <= 990.0 * (1.0 + 1.0 / 128.0),
            "{}",
            s.p99_us
        );
        assert!(s.p50_us >= 500.0 && s.p50_us <= 500.0 * (1.0 + 1.0 / 128.0));
        // Small values are exact.
        let mut h = LatencyHistogram::new();
        for v in [7u64, 7, 7, 200, 100] {
            h.record(v);
        }
        assert_eq!(h.quantile(0.5), Some(7));
        assert_eq!(h.quantile(0.99), Some(200));
        assert_eq!(h.quantile(0.8), Some(100));
        let mut m = LatencyHistogram::new();
        m.record(1);
        m.merge(&h);
        assert_eq!((m.count(), m.min(), m.max()), (6, Some(1), Some(200)));
        m.clear();
        assert_eq!(m.count(), 0);
    }
}
