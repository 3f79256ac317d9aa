//! The RFC 2544 engine: throughput by binary search, frame loss at fixed offered loads, and
//! latency at the throughput rate. It never touches a port: each trial is a closure
//! `FnMut(rate_pps) -> TrialResult` (typically [`crate::Generator::run_trial`] on real
//! ports), so the engine runs against any DUT and is unit-tested with synthetic ones.
//!
//! # Units
//! Rates given to the closure and in [`Rfc2544Config`] are **per direction** (as
//! [`crate::TrialConfig::rate_pps`]); the report's `throughput_mpps` and
//! `throughput_gbps_l1` are **aggregates** over [`Rfc2544Config::directions`], as the
//! reference reports give them, and `throughput_mpps_per_direction` is there too.
//!
//! # Procedure
//! 1. **Throughput** (RFC 2544 §26.1): a trial at the line rate; if it passes, that is the
//!    throughput. Otherwise binary search between `min_rate_pps` and the line rate until
//!    the bracket is narrower than `resolution × line rate` or `max_search_trials` trials
//!    were run; the throughput is the highest passing rate (0 when none passed). A trial
//!    passes when `lost ≤ max(loss_tolerance_frames, loss_tolerance_ratio × tx)` **and**
//!    the generator really offered the rate (`tx_pps ≥ min_offered_ratio × rate ×
//!    directions`), so a generator that cannot keep up never inflates the throughput; that
//!    case is flagged as `generator_limited`.
//! 2. **Frame loss** (§26.3) at each of `loads_percent` of the line rate (25/50/75/100 by
//!    default, as the reports), loss in percent of frames sent. The throughput search's
//!    first trial *is* the 100 % trial and is reused (`reuse_line_rate_trial`).
//! 3. **Latency** (§26.2) in a separate trial at the throughput rate (`latency_trial`);
//!    otherwise taken from the best passing search trial.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::generator::TrialResult;
use crate::profile::gbps_l1;

/// Settings of an RFC 2544 run.
#[derive(Clone, Debug, PartialEq)]
pub struct Rfc2544Config {
    /// The line rate per direction, frames/s (see [`crate::line_rate_pps`]): the search's
    /// upper bound and the reference of the loads.
    pub line_rate_pps: f64,
    /// Lower bound of the search, frames/s per direction (default 0).
    pub min_rate_pps: f64,
    /// Search resolution as a fraction of the line rate (default 0.005 = 0.5 %).
    pub resolution: f64,
    /// Frames a passing trial may lose (default 0).
    pub loss_tolerance_frames: u64,
    /// Fraction of sent frames a passing trial may lose (default 0).
    pub loss_tolerance_ratio: f64,
    /// A trial passes only if it offered at least this fraction of the asked rate
    /// (default 0.99).
    pub min_offered_ratio: f64,
    /// Most trials of the throughput search, the first (line-rate) one included (default 20).
    pub max_search_trials: u32,
    /// Offered loads of the frame-loss test, percent of the line rate (default 25, 50, 75, 100).
    pub loads_percent: Vec<f64>,
    /// Reuse the search's line-rate trial as the 100 % load trial (default true).
    pub reuse_line_rate_trial: bool,
    /// Run a separate latency trial at the throughput rate (default true).
    pub latency_trial: bool,
    /// Directions each trial sends in (1 or 2), for the aggregate figures.
    pub directions: u32,
    /// Mean frame size with FCS, for L1 figures (see [`crate::Profile::avg_frame_size`]).
    pub avg_frame_size: f64,
}

impl Rfc2544Config {
    /// Defaults for a link of `line_rate_pps` per direction.
    pub fn new(line_rate_pps: f64, avg_frame_size: f64, directions: u32) -> Rfc2544Config {
        Rfc2544Config {
            line_rate_pps,
            min_rate_pps: 0.0,
            resolution: 0.005,
            loss_tolerance_frames: 0,
            loss_tolerance_ratio: 0.0,
            min_offered_ratio: 0.99,
            max_search_trials: 20,
            loads_percent: vec![25.0, 50.0, 75.0, 100.0],
            reuse_line_rate_trial: true,
            latency_trial: true,
            directions: directions.max(1),
            avg_frame_size,
        }
    }

    /// The search resolution in frames/s.
    pub fn resolution_pps(&self) -> f64 {
        self.resolution * self.line_rate_pps
    }

    /// Whether `r`, a trial at `rate_pps` per direction, passes (see the module docs).
    pub fn passes(&self, rate_pps: f64, r: &TrialResult) -> bool {
        self.judge(rate_pps, r).is_none()
    }

    /// Why a trial fails, or `None` when it passes.
    fn judge(&self, rate_pps: f64, r: &TrialResult) -> Option<FailReason> {
        let allowed =
            (self.loss_tolerance_ratio * r.tx as f64).max(self.loss_tolerance_frames as f64);
        if r.tx == 0 {
            return Some(FailReason::NothingSent);
        }
        if r.lost as f64 > allowed {
            return Some(FailReason::Loss);
        }
        let dirs = f64::from(r.directions.max(1));
        if r.tx_pps < self.min_offered_ratio * rate_pps * dirs {
            return Some(FailReason::Underrun);
        }
        None
    }

    /// Upper bound of the number of trials a run makes (for progress and ETA).
    pub fn max_trials(&self) -> u32 {
        let span = (self.line_rate_pps - self.min_rate_pps).max(0.0);
        let res = self.resolution_pps().max(f64::MIN_POSITIVE);
        let halvings = if span > res {
            (span / res).log2().ceil() as u32
        } else {
            0
        };
        let extra_min = u32::from(self.min_rate_pps > 0.0);
        let search = (1 + halvings + extra_min).min(self.max_search_trials.max(1));
        let loads = self
            .loads_percent
            .iter()
            .filter(|&&p| !(self.reuse_line_rate_trial && p == 100.0))
            .count() as u32;
        search + loads + u32::from(self.latency_trial)
    }
}

/// Which part of the procedure a trial belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Phase {
    /// Throughput search.
    Throughput,
    /// Frame loss at a load (percent of line rate).
    FrameLoss {
        /// Offered load, percent of the line rate.
        load_percent: f64,
    },
    /// Latency at the throughput rate.
    Latency,
}

/// Why a trial did not pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailReason {
    /// More loss than the tolerance.
    Loss,
    /// The generator (or its port) offered less than `min_offered_ratio` of the rate.
    Underrun,
    /// No frame was sent.
    NothingSent,
}

/// A progress event, for printing progress and an ETA.
#[derive(Clone, Copy, Debug)]
pub enum Progress<'a> {
    /// A trial is about to run.
    Starting {
        /// 1-based trial number.
        trial: u32,
        /// Upper bound of the trials of the run ([`Rfc2544Config::max_trials`]).
        max_trials: u32,
        /// Part of the procedure.
        phase: Phase,
        /// Rate per direction, frames/s.
        rate_pps: f64,
    },
    /// A trial finished.
    Finished {
        /// 1-based trial number.
        trial: u32,
        /// Upper bound of the trials of the run.
        max_trials: u32,
        /// Part of the procedure.
        phase: Phase,
        /// Rate per direction, frames/s.
        rate_pps: f64,
        /// What it measured.
        result: &'a TrialResult,
        /// Whether it passed the throughput criterion.
        passed: bool,
    },
}

/// One trial as run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrialRecord {
    /// 1-based number.
    pub n: u32,
    /// Part of the procedure.
    pub phase: Phase,
    /// Rate per direction, frames/s.
    pub rate_pps: f64,
    /// Rate as a percent of the line rate.
    pub load_percent: f64,
    /// Whether it passed the throughput criterion.
    pub passed: bool,
    /// Why not, when it did not.
    pub fail_reason: Option<FailReason>,
    /// What it measured.
    pub result: TrialResult,
}

/// Latency summary in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyUs {
    /// Minimum.
    pub min: f64,
    /// Mean.
    pub avg: f64,
    /// Maximum.
    pub max: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// The outcome of an RFC 2544 run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rfc2544Report {
    /// Line rate per direction, frames/s.
    pub line_rate_pps: f64,
    /// Directions per trial.
    pub directions: u32,
    /// Mean frame size with FCS, bytes.
    pub avg_frame_size: f64,
    /// Search resolution, frames/s per direction.
    pub resolution_pps: f64,
    /// Whether any rate passed.
    pub found: bool,
    /// Throughput per direction, millions of frames/s.
    pub throughput_mpps_per_direction: f64,
    /// Throughput over all directions, millions of frames/s.
    pub throughput_mpps: f64,
    /// Throughput over all directions at L1, Gbit/s.
    pub throughput_gbps_l1: f64,
    /// Throughput as a percent of the line rate.
    pub throughput_percent: f64,
    /// What the generator actually sent in the throughput trial, millions of frames/s
    /// (aggregate).
    pub throughput_offered_mpps: f64,
    /// A trial failed only because the generator could not offer its rate: the throughput
    /// is a lower bound set by the tester, not the DUT.
    pub generator_limited: bool,
    /// Frame loss, percent of frames sent, per offered load ("25", "50", "75", "100").
    pub loss_at_load: BTreeMap<String, f64>,
    /// Latency at the throughput rate (None when nothing passed or nothing was received).
    pub latency_us: Option<LatencyUs>,
    /// Every trial, in order.
    pub trials: Vec<TrialRecord>,
}

/// Key of a load in [`Rfc2544Report::loss_at_load`]: `25.0` → `"25"`, `12.5` → `"12.5"`.
pub fn load_key(load_percent: f64) -> String {
    format!("{load_percent}")
}

/// Run the procedure with an infallible trial closure.
pub fn run(
    cfg: &Rfc2544Config,
    mut trial: impl FnMut(f64) -> TrialResult,
    progress: Option<&mut dyn FnMut(Progress<'_>)>,
) -> Rfc2544Report {
    match try_run::<std::convert::Infallible>(cfg, |r| Ok(trial(r)), progress) {
        Ok(r) => r,
        Err(e) => match e {},
    }
}

/// Run the procedure; the first trial error aborts it (e.g. the user interrupted).
pub fn try_run<E>(
    cfg: &Rfc2544Config,
    mut trial: impl FnMut(f64) -> Result<TrialResult, E>,
    mut progress: Option<&mut dyn FnMut(Progress<'_>)>,
) -> Result<Rfc2544Report, E> {
    let line = cfg.line_rate_pps;
    let max_trials = cfg.max_trials();
    let mut records: Vec<TrialRecord> = Vec::new();
    let mut one = |phase: Phase, rate: f64, records: &mut Vec<TrialRecord>| -> Result<usize, E> {
        let n = records.len() as u32 + 1;
        if let Some(p) = progress.as_mut() {
            p(Progress::Starting {
                trial: n,
                max_trials,
                phase,
                rate_pps: rate,
            });
        }
        let result = trial(rate)?;
        let fail_reason = cfg.judge(rate, &result);
        if let Some(p) = progress.as_mut() {
            p(Progress::Finished {
                trial: n,
                max_trials,
                phase,
                rate_pps: rate,
                result: &result,
                passed: fail_reason.is_none(),
            });
        }
        records.push(TrialRecord {
            n,
            phase,
            rate_pps: rate,
            load_percent: if line > 0.0 { rate / line * 100.0 } else { 0.0 },
            passed: fail_reason.is_none(),
            fail_reason,
            result,
        });
        Ok(records.len() - 1)
    };

    // 1. Throughput.
    let first = one(Phase::Throughput, line, &mut records)?;
    let mut best: Option<usize> = records[first].passed.then_some(first);
    let mut search_trials = 1u32;
    if best.is_none() {
        let (mut lo, mut hi) = (cfg.min_rate_pps.max(0.0), line);
        let res = cfg.resolution_pps();
        while hi - lo > res && search_trials < cfg.max_search_trials {
            let mid = (lo + hi) / 2.0;
            let i = one(Phase::Throughput, mid, &mut records)?;
            search_trials += 1;
            if records[i].passed {
                lo = mid;
                best = Some(i);
            } else {
                hi = mid;
            }
        }
        if best.is_none() && cfg.min_rate_pps > 0.0 && search_trials < cfg.max_search_trials {
            let i = one(Phase::Throughput, cfg.min_rate_pps, &mut records)?;
            if records[i].passed {
                best = Some(i);
            }
        }
    }
    let tput = best.map_or(0.0, |i| records[i].rate_pps);
    let generator_limited = records
        .iter()
        .any(|r| r.fail_reason == Some(FailReason::Underrun));

    // 2. Frame loss at loads.
    let mut loss_at_load = BTreeMap::new();
    for &pct in &cfg.loads_percent {
        let i = if cfg.reuse_line_rate_trial && pct == 100.0 {
            first
        } else {
            one(
                Phase::FrameLoss { load_percent: pct },
                line * pct / 100.0,
                &mut records,
            )?
        };
        loss_at_load.insert(load_key(pct), records[i].result.loss_percent());
    }

    // 3. Latency.
    let lat_idx = match best {
        Some(_) if cfg.latency_trial => Some(one(Phase::Latency, tput, &mut records)?),
        b => b,
    };
    let latency_us = lat_idx.and_then(|i| {
        let l = records[i].result.latency;
        (l.samples > 0).then_some(LatencyUs {
            min: l.min_us,
            avg: l.avg_us,
            max: l.max_us,
            p99: l.p99_us,
        })
    });

    let dirs = f64::from(cfg.directions.max(1));
    Ok(Rfc2544Report {
        line_rate_pps: line,
        directions: cfg.directions.max(1),
        avg_frame_size: cfg.avg_frame_size,
        resolution_pps: cfg.resolution_pps(),
        found: best.is_some(),
        throughput_mpps_per_direction: tput / 1e6,
        throughput_mpps: tput * dirs / 1e6,
        throughput_gbps_l1: gbps_l1(tput * dirs, cfg.avg_frame_size),
        throughput_percent: if line > 0.0 { tput / line * 100.0 } else { 0.0 },
        throughput_offered_mpps: best.map_or(0.0, |i| records[i].result.tx_pps / 1e6),
        generator_limited,
        loss_at_load,
        latency_us,
        trials: records,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::LatencyStats;

    /// A DUT that forwards up to `cap` frames/s per direction and loses the excess,
    /// measured over 1 s trials.
    fn synthetic(cap: f64, rate: f64) -> TrialResult {
        let tx = rate.round() as u64;
        let rx = rate.min(cap).round() as u64;
        TrialResult {
            rate_pps: rate,
            directions: 1,
            duration_s: 1.0,
            tx,
            rx,
            lost: tx - rx,
            tx_pps: tx as f64,
            rx_pps: rx as f64,
            latency: LatencyStats {
                samples: rx,
                min_us: 1.0,
                avg_us: 2.0,
                max_us: 3.0,
                p99_us: 2.5,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn line_rate_pass_is_one_search_trial() {
        let cfg = Rfc2544Config::new(1e6, 64.0, 2);
        let r = run(&cfg, |rate| synthetic(2e6, rate), None);
        assert!(r.found);
        assert_eq!(r.throughput_mpps_per_direction, 1.0);
        assert_eq!(r.throughput_mpps, 2.0);
        assert!((r.throughput_gbps_l1 - gbps_l1(2e6, 64.0)).abs() < 1e-12);
        let search = r
            .trials
            .iter()
            .filter(|t| t.phase == Phase::Throughput)
            .count();
        assert_eq!(search, 1);
        // 25/50/75 run, 100 reused, plus latency.
        assert_eq!(r.trials.len(), 5);
        assert_eq!(
            r.loss_at_load.keys().collect::<Vec<_>>(),
            ["100", "25", "50", "75"]
        );
        assert!(r.loss_at_load.values().all(|&l| l == 0.0));
        assert_eq!(
            r.latency_us,
            Some(LatencyUs {
                min: 1.0,
                avg: 2.0,
                max: 3.0,
                p99: 2.5
            })
        );
    }

    #[test]
    fn binary_search_converges_within_resolution() {
        for cap in [1.0, 123_456.0, 613_000.0, 999_999.0] {
            let mut cfg = Rfc2544Config::new(1e6, 64.0, 1);
            cfg.resolution = 0.001;
            let mut events = Vec::new();
            let mut prog = |p: Progress<'_>| {
                if let Progress::Finished {
                    trial, max_trials, ..
                } = p
                {
                    events.push((trial, max_trials));
                }
            };
            let r = run(&cfg, |rate| synthetic(cap, rate), Some(&mut prog));
            let tput = r.throughput_mpps * 1e6;
            assert!(
                tput <= cap && cap - tput <= cfg.resolution_pps(),
                "cap {cap}: {tput}"
            );
            for t in r.trials.iter().filter(|t| t.phase == Phase::Throughput) {
                assert_eq!(t.passed, t.rate_pps <= cap, "{t:?}");
            }
            // Loss at load is exact for the synthetic DUT.
            for (k, pct) in [("25", 25.0), ("50", 50.0), ("75", 75.0), ("100", 100.0)] {
                let rate: f64 = 1e6 * pct / 100.0;
                let want = if rate <= cap {
                    0.0
                } else {
                    (rate - cap.round()) / rate * 100.0
                };
                assert!(
                    (r.loss_at_load[k] - want).abs() < 1e-6,
                    "{k}: {} vs {want}",
                    r.loss_at_load[k]
                );
            }
            assert_eq!(events.len(), r.trials.len());
            assert!(events.iter().all(|&(n, max)| n <= max));
            assert_eq!(r.found, tput > 0.0);
        }
    }

    #[test]
    fn tolerance_underrun_and_budget() {
        // Tolerance: 1 % loss allowed → the search finds ~cap / 0.99.
        let mut cfg = Rfc2544Config::new(1e6, 64.0, 1);
        cfg.loss_tolerance_ratio = 0.01;
        let r = run(&cfg, |rate| synthetic(500_000.0, rate), None);
        let t = r.throughput_mpps * 1e6;
        assert!(
            t <= 500_000.0 / 0.99 && 500_000.0 / 0.99 - t <= cfg.resolution_pps(),
            "{t}"
        );

        // A generator that cannot exceed 300k frames/s: lossless but under-offered trials
        // fail, so the throughput is the generator's limit, flagged.
        let cfg = Rfc2544Config::new(1e6, 64.0, 1);
        let r = run(
            &cfg,
            |rate| {
                let mut x = synthetic(f64::INFINITY, rate.min(300_000.0));
                x.rate_pps = rate;
                x
            },
            None,
        );
        assert!(r.generator_limited);
        assert!(r.throughput_mpps <= 0.300_001 / 0.99 && r.throughput_mpps > 0.29);
        assert_eq!(r.trials[0].fail_reason, Some(FailReason::Underrun));

        // Budget: at most max_search_trials search trials; nothing passes → not found.
        let mut cfg = Rfc2544Config::new(1e6, 64.0, 1);
        cfg.max_search_trials = 4;
        cfg.min_rate_pps = 1000.0;
        let r = run(&cfg, |rate| synthetic(0.0, rate), None);
        assert!(!r.found);
        assert_eq!(r.throughput_mpps, 0.0);
        assert_eq!(r.latency_us, None);
        assert_eq!(
            r.trials
                .iter()
                .filter(|t| t.phase == Phase::Throughput)
                .count(),
            4
        );
        assert!(r.trials.len() as u32 <= cfg.max_trials());

        // Errors abort.
        let mut n = 0;
        let e = try_run(
            &Rfc2544Config::new(1e6, 64.0, 1),
            |_| {
                n += 1;
                if n == 3 {
                    Err("interrupted")
                } else {
                    Ok(synthetic(10.0, 1e6))
                }
            },
            None,
        );
        assert_eq!(e.unwrap_err(), "interrupted");
    }

    #[test]
    fn report_serializes() {
        let r = run(
            &Rfc2544Config::new(1e6, 64.0, 1),
            |rate| synthetic(4e5, rate),
            None,
        );
        let j = serde_json::to_value(&r).unwrap();
        assert!(j["throughput_mpps"].as_f64().unwrap() > 0.39);
        assert!(j["loss_at_load"]["100"].as_f64().unwrap() > 59.0);
        assert_eq!(j["trials"][0]["phase"]["kind"], "throughput");
        assert_eq!(j["trials"][1]["phase"]["kind"], "throughput");
        assert!(j["latency_us"]["p99"].is_number());
        let back: Rfc2544Report = serde_json::from_value(j).unwrap();
        assert_eq!(back.trials.len(), r.trials.len());
        assert_eq!(back.trials[1].phase, r.trials[1].phase);
        assert_eq!(back.loss_at_load.len(), 4);
    }
}
