//! Repetition and comparison for every benchmark that measures DUTs against each other
//! (RFC 2544 today; the firewall, IPsec and QoS benches reuse it): the DUTs alternate over
//! the repetitions (A B A B …) so host noise lands on both sides of a ratio, each DUT's
//! figure gets its median, spread and coefficient of variation, and a ratio is the median of
//! the per-repetition ratios. A failed or missing measurement is `None`: it is counted as
//! missing, never taken as 0.

use serde::Serialize;

/// Above this coefficient of variation a DUT's figure is flagged as unstable.
pub const CV_WARN: f64 = 0.10;

/// The runs of `repeat` repetitions of `duts`, interleaved: `(repetition, dut)` for
/// repetition 0 of every DUT, then repetition 1, and so on.
pub fn interleaved<D: Copy>(duts: &[D], repeat: usize) -> impl Iterator<Item = (usize, D)> + '_ {
    (0..repeat.max(1)).flat_map(move |k| duts.iter().map(move |&d| (k, d)))
}

/// Median of `v` (sorted here); `None` when empty.
pub fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => {
            let (a, b) = (v[n / 2 - 1], v[n / 2]);
            let m = (a + b) / 2.0;
            // Overflow of the sum, or rounding: stay between the two.
            let m = if m.is_finite() { m } else { a / 2.0 + b / 2.0 };
            Some(if a <= b { m.clamp(a, b) } else { m })
        }
    }
}

/// One figure over the repetitions.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct Spread {
    /// Measurements (finite values).
    pub n: usize,
    /// Median.
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// Coefficient of variation (sample standard deviation / mean); `None` for one
    /// measurement or a mean of 0.
    pub cv: Option<f64>,
}

impl Spread {
    /// Whether the figure varies more than [`CV_WARN`].
    pub fn unstable(&self) -> bool {
        self.cv.is_some_and(|c| c > CV_WARN)
    }
}

/// The spread of the finite values among `values` (`None` and NaN are skipped); `None`
/// when there is none.
pub fn spread(values: impl IntoIterator<Item = Option<f64>>) -> Option<Spread> {
    let mut v: Vec<f64> = values
        .into_iter()
        .flatten()
        .filter(|x| x.is_finite())
        .collect();
    let n = v.len();
    if n == 0 {
        return None;
    }
    let mean = v.iter().sum::<f64>() / n as f64;
    let cv = (n > 1 && mean > 0.0).then(|| {
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        var.sqrt() / mean
    });
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some(Spread {
        n,
        median: median(&mut v)?,
        min,
        max,
        cv,
    })
}

/// The ratio A/B over paired repetitions.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct PairedRatio {
    /// Median of the per-pair ratios (`None` when no pair is complete).
    pub median: Option<f64>,
    /// Smallest per-pair ratio.
    pub min: Option<f64>,
    /// Largest per-pair ratio.
    pub max: Option<f64>,
    /// Complete pairs.
    pub pairs: usize,
    /// Repetitions with one side missing (failed), a ratio that is not finite, or the
    /// reference at 0.
    pub missing: usize,
}

/// A/B pair by pair: `pairs` yields, per repetition, A's and B's figures (`None` when
/// that run failed or did not happen). A repetition with neither is not counted; one with
/// only one side, a non-finite figure or B at 0 is counted as missing.
pub fn paired_ratio(pairs: impl IntoIterator<Item = (Option<f64>, Option<f64>)>) -> PairedRatio {
    let mut ratios = Vec::new();
    let mut missing = 0;
    for p in pairs {
        match p {
            (Some(x), Some(y)) if y > 0.0 && (x / y).is_finite() => ratios.push(x / y),
            (None, None) => {}
            _ => missing += 1,
        }
    }
    PairedRatio {
        pairs: ratios.len(),
        min: ratios.iter().copied().reduce(f64::min),
        max: ratios.iter().copied().reduce(f64::max),
        median: median(&mut ratios),
        missing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaving_alternates_the_duts() {
        let v: Vec<_> = interleaved(&["a", "b"], 3).collect();
        assert_eq!(
            v,
            [(0, "a"), (0, "b"), (1, "a"), (1, "b"), (2, "a"), (2, "b")]
        );
        assert_eq!(interleaved(&["a"], 0).count(), 1, "at least one repetition");
    }

    #[test]
    fn spread_and_ratio_skip_what_was_not_measured() {
        let s = spread([Some(1.0), None, Some(f64::NAN), Some(1.2), Some(0.9)]).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max), (3, 1.0, 0.9, 1.2));
        assert!((s.cv.unwrap() - 0.1478).abs() < 1e-3);
        assert!(s.unstable());
        assert_eq!(spread([None, Some(f64::INFINITY)]), None);
        assert_eq!(spread([Some(2.0)]).unwrap().cv, None);
        let r = paired_ratio([
            (Some(1.0), Some(0.5)),
            (Some(1.2), Some(1.0)),
            (Some(0.9), None),
            (None, None),
            (Some(1.0), Some(0.0)),
        ]);
        assert_eq!(
            (r.median, r.min, r.max, r.pairs, r.missing),
            (Some(1.6), Some(1.2), Some(2.0), 2, 2)
        );
        assert_eq!(paired_ratio([]).median, None);
    }

    proptest::proptest! {
        /// Any figures, failed and absurd ones included: no panic, and the median lies
        /// between the min and the max.
        #[test]
        fn never_panics(v in proptest::collection::vec(
            (proptest::option::of(proptest::num::f64::ANY), proptest::option::of(proptest::num::f64::ANY)), 0..20))
        {
            let r = paired_ratio(v.iter().copied());
            if let (Some(m), Some(lo), Some(hi)) = (r.median, r.min, r.max) {
                proptest::prop_assert!(lo <= m && m <= hi);
            }
            if let Some(s) = spread(v.iter().map(|p| p.0)) {
                proptest::prop_assert!(s.min <= s.median && s.median <= s.max);
            }
        }
    }
}
