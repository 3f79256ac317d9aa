//! The RFC 2544 engine: throughput search, frame loss at fixed offered loads, and latency
//! at the throughput rate. It never touches a port: each trial is a closure
//! `FnMut(rate_pps, duration) -> TrialResult` (typically [`crate::Generator::run_trial`]
//! on real ports, see [`try_run_timed`]; [`run`] and [`try_run`] take `FnMut(rate_pps)`
//! for a fixed duration), so the engine runs against any DUT and is unit-tested with
//! synthetic ones.
//!
//! # Units
//! Rates given to the closure and in [`Rfc2544Config`] are **per direction** (as
//! [`crate::TrialConfig::rate_pps`]); the report's `throughput_mpps` and
//! `throughput_gbps_l1` are **aggregates** over [`Rfc2544Config::directions`], as the
//! reference reports give them, and `throughput_mpps_per_direction` is there too.
//!
//! # Procedure
//! 1. **Throughput**, by one of two searches:
//!    - **MLR search** ([`Rfc2544Config::mlr`] set; see [`crate::mlrsearch`]): several
//!      loss goals at once (NDR and PDR by default), each load classified from repeated
//!      trials so one noisy trial does not move the result, short exploratory trials
//!      before final ones at [`Rfc2544Config::trial_duration`]. A trial the tester could
//!      not offer in full (an *underrun*: `tx_pps < min_offered_ratio × rate ×
//!      directions`) is invalid and retried, never counted as the DUT's loss. The
//!      throughput is the first goal's result (NDR); every goal is in
//!      [`Rfc2544Report::goals`].
//!    - **Binary search** (RFC 2544 §26.1, the default of [`Rfc2544Config::new`]): a trial
//!      at the line rate; if it passes, that is the throughput. Otherwise binary search
//!      between `min_rate_pps` and the line rate until the bracket is narrower than
//!      `resolution × line rate` or `max_search_trials` trials were run; the throughput is
//!      the highest passing rate (0 when none passed). A trial passes when `lost ≤
//!      max(loss_tolerance_frames, loss_tolerance_ratio × tx)` **and** the generator
//!      really offered the rate, so a generator that cannot keep up never inflates the
//!      throughput; that case is flagged as `generator_limited`.
//! 2. **Frame loss** (§26.3) at each of `loads_percent` of the line rate (25/50/75/100 by
//!    default, as the reports), loss in percent of frames sent. A search trial at the line
//!    rate and the full duration *is* the 100 % trial and is reused
//!    (`reuse_line_rate_trial`).
//! 3. **Latency** (§26.2) in a separate trial at the throughput rate (`latency_trial`);
//!    otherwise taken from the best passing search trial.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::generator::TrialResult;
use crate::mlrsearch::{self, Meas, Request, Space};
pub use crate::mlrsearch::{GoalResult, LossGoal, MlrConfig, SearchStage};
use crate::profile::gbps_l1;

/// Settings of an RFC 2544 run.
#[derive(Clone, Debug, PartialEq)]
pub struct Rfc2544Config {
    /// The line rate per direction, frames/s (see [`crate::line_rate_pps`]): the search's
    /// upper bound and the reference of the loads.
    pub line_rate_pps: f64,
    /// Lower bound of the search, frames/s per direction (default 0; the MLR search then
    /// stops at 0.01 % of the line rate).
    pub min_rate_pps: f64,
    /// Binary search resolution as a fraction of the line rate (default 0.005 = 0.5 %).
    pub resolution: f64,
    /// Frames a passing trial may lose (default 0).
    pub loss_tolerance_frames: u64,
    /// Fraction of sent frames a passing trial may lose (default 0; binary search).
    pub loss_tolerance_ratio: f64,
    /// A trial passes only if it offered at least this fraction of the asked rate
    /// (default 0.99); in the MLR search, one that did not is an underrun.
    pub min_offered_ratio: f64,
    /// Most trials of the binary search, the first (line-rate) one included (default 20).
    pub max_search_trials: u32,
    /// Offered loads of the frame-loss test, percent of the line rate (default 25, 50, 75, 100).
    pub loads_percent: Vec<f64>,
    /// Reuse a search trial at the line rate and full duration as the 100 % load trial
    /// (default true).
    pub reuse_line_rate_trial: bool,
    /// Run a separate latency trial at the throughput rate (default true).
    pub latency_trial: bool,
    /// Directions each trial sends in (1 or 2), for the aggregate figures.
    pub directions: u32,
    /// Mean frame size with FCS, for L1 figures (see [`crate::Profile::avg_frame_size`]).
    pub avg_frame_size: f64,
    /// Duration of a full trial, passed to [`try_run_timed`]'s closure (default 1 s): every
    /// trial of the binary search, the frame-loss and latency trials, and the MLR search's
    /// final trials.
    pub trial_duration: Duration,
    /// Search the throughput with MLR search instead of the binary search (default None:
    /// binary).
    pub mlr: Option<MlrConfig>,
}

impl Rfc2544Config {
    /// Defaults for a link of `line_rate_pps` per direction (binary search).
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
            trial_duration: Duration::from_secs(1),
            mlr: None,
        }
    }

    /// The search resolution in frames/s (binary search).
    pub fn resolution_pps(&self) -> f64 {
        self.resolution * self.line_rate_pps
    }

    /// Whether `r`, a trial at `rate_pps` per direction, passes (see the module docs).
    pub fn passes(&self, rate_pps: f64, r: &TrialResult) -> bool {
        self.judge(rate_pps, r).is_none()
    }

    /// Whether the tester failed to offer `rate_pps` per direction in `r` (an underrun:
    /// less than `min_offered_ratio` of it, or nothing at all).
    pub fn underran(&self, rate_pps: f64, r: &TrialResult) -> bool {
        let dirs = f64::from(r.directions.max(1));
        r.tx == 0 || r.tx_pps < self.min_offered_ratio * rate_pps * dirs
    }

    /// Why a trial fails, or `None` when it passes.
    fn judge(&self, rate_pps: f64, r: &TrialResult) -> Option<FailReason> {
        self.judge_ratio(rate_pps, r, self.loss_tolerance_ratio)
    }

    /// [`Self::judge`] with `loss_ratio` in place of the configured tolerance ratio.
    fn judge_ratio(&self, rate_pps: f64, r: &TrialResult, loss_ratio: f64) -> Option<FailReason> {
        let allowed = (loss_ratio * r.tx as f64).max(self.loss_tolerance_frames as f64);
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
        let loads = self
            .loads_percent
            .iter()
            .filter(|&&p| !(self.reuse_line_rate_trial && p == 100.0))
            .count() as u32;
        if let Some(m) = &self.mlr {
            // The 100 % trial is reused only when the search ran one at the full duration.
            let loads = self.loads_percent.len() as u32;
            let tries = m.max_retries.saturating_add(1);
            return m
                .max_trials
                .saturating_add((loads + u32::from(self.latency_trial)).saturating_mul(tries));
        }
        let span = (self.line_rate_pps - self.min_rate_pps).max(0.0);
        let res = self.resolution_pps().max(f64::MIN_POSITIVE);
        let halvings = if span > res {
            (span / res).log2().ceil() as u32
        } else {
            0
        };
        let extra_min = u32::from(self.min_rate_pps > 0.0);
        let search = (1 + halvings + extra_min).min(self.max_search_trials.max(1));
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
    /// More loss than the tolerance (or the served goal's loss ratio).
    Loss,
    /// The generator (or its port) offered less than `min_offered_ratio` of the rate.
    Underrun,
    /// No frame was sent.
    NothingSent,
}

/// Which search found the throughput.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchMethod {
    /// RFC 2544 binary search.
    #[default]
    Binary,
    /// Multiple loss ratio search.
    Mlr,
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
        /// Trial duration, s.
        duration_s: f64,
        /// The MLR goal the trial serves.
        goal: Option<&'a str>,
        /// The MLR stage.
        stage: Option<SearchStage>,
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
        /// Whether it passed the throughput criterion (of its goal).
        passed: bool,
        /// The trial as recorded (goal, stage, duration, whether it was invalidated).
        record: &'a TrialRecord,
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
    /// Requested duration, s.
    #[serde(default)]
    pub duration_s: f64,
    /// The MLR goal this search trial served (its classification counts for every goal).
    #[serde(default)]
    pub goal: Option<String>,
    /// The MLR stage of a search trial.
    #[serde(default)]
    pub stage: Option<SearchStage>,
    /// Invalidated (MLR search): the tester could not offer the rate (underrun), so the
    /// trial says nothing about the DUT and was retried.
    #[serde(default)]
    pub invalid: bool,
    /// Whether it passed the throughput criterion (for a search trial of the MLR search,
    /// its goal's loss ratio).
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
    /// Binary search resolution, frames/s per direction.
    pub resolution_pps: f64,
    /// Whether any rate passed.
    pub found: bool,
    /// Throughput (NDR) per direction, millions of frames/s.
    pub throughput_mpps_per_direction: f64,
    /// Throughput (NDR) over all directions, millions of frames/s.
    pub throughput_mpps: f64,
    /// Throughput over all directions at L1, Gbit/s.
    pub throughput_gbps_l1: f64,
    /// Throughput as a percent of the line rate.
    pub throughput_percent: f64,
    /// What the generator actually sent in the throughput trial, millions of frames/s
    /// (aggregate).
    pub throughput_offered_mpps: f64,
    /// The generator could not offer some rate even after retries: the throughput may be
    /// a lower bound set by the tester, not the DUT.
    pub generator_limited: bool,
    /// Frame loss, percent of frames sent, per offered load ("25", "50", "75", "100").
    pub loss_at_load: BTreeMap<String, f64>,
    /// Latency at the throughput rate (None when nothing passed or nothing was received).
    pub latency_us: Option<LatencyUs>,
    /// Every trial, in order.
    pub trials: Vec<TrialRecord>,
    /// The search used.
    #[serde(default)]
    pub search: SearchMethod,
    /// Each goal's result (the binary search has one: `ndr`, or `throughput` with a loss
    /// tolerance).
    #[serde(default)]
    pub goals: Vec<GoalResult>,
    /// Trials the tester could not offer in full (underruns). In the MLR search each was
    /// invalidated and retried.
    #[serde(default)]
    pub underruns: u32,
    /// The MLR search's trial or time budget ran out before every goal converged.
    #[serde(default)]
    pub budget_exhausted: bool,
}

impl Rfc2544Report {
    /// The result of the goal named `name` (`ndr`, `pdr`).
    pub fn goal(&self, name: &str) -> Option<&GoalResult> {
        self.goals.iter().find(|g| g.name == name)
    }
}

/// Key of a load in [`Rfc2544Report::loss_at_load`]: `25.0` → `"25"`, `12.5` → `"12.5"`.
pub fn load_key(load_percent: f64) -> String {
    format!("{load_percent}")
}

/// Run the procedure with an infallible trial closure of the fixed duration.
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

/// Run the procedure with a trial closure of the fixed duration; the first trial error
/// aborts it (e.g. the user interrupted). With the MLR search, use [`try_run_timed`]: its
/// exploratory trials are shorter.
pub fn try_run<E>(
    cfg: &Rfc2544Config,
    mut trial: impl FnMut(f64) -> Result<TrialResult, E>,
    progress: Option<&mut dyn FnMut(Progress<'_>)>,
) -> Result<Rfc2544Report, E> {
    try_run_timed(cfg, |r, _| trial(r), progress)
}

/// What one trial is for.
#[derive(Clone, Copy)]
struct Spec<'g> {
    phase: Phase,
    rate: f64,
    duration: Duration,
    goal: Option<&'g LossGoal>,
    stage: Option<SearchStage>,
}

/// Run the procedure; each trial is `trial(rate_pps per direction, duration)`. The first
/// trial error aborts it (e.g. the user interrupted).
pub fn try_run_timed<E>(
    cfg: &Rfc2544Config,
    mut trial: impl FnMut(f64, Duration) -> Result<TrialResult, E>,
    mut progress: Option<&mut dyn FnMut(Progress<'_>)>,
) -> Result<Rfc2544Report, E> {
    let line = cfg.line_rate_pps;
    let max_trials = cfg.max_trials();
    let full = cfg.trial_duration;
    let mlr = cfg.mlr.as_ref();
    let mut records: Vec<TrialRecord> = Vec::new();
    let mut one = |spec: Spec<'_>, records: &mut Vec<TrialRecord>| -> Result<usize, E> {
        let n = records.len() as u32 + 1;
        let Spec {
            phase,
            rate,
            duration,
            goal,
            stage,
        } = spec;
        if let Some(p) = progress.as_mut() {
            p(Progress::Starting {
                trial: n,
                max_trials,
                phase,
                rate_pps: rate,
                duration_s: duration.as_secs_f64(),
                goal: goal.map(|g| g.name.as_str()),
                stage,
            });
        }
        let result = trial(rate, duration)?;
        let invalid = mlr.is_some() && cfg.underran(rate, &result);
        let fail_reason = if invalid {
            Some(if result.tx == 0 {
                FailReason::NothingSent
            } else {
                FailReason::Underrun
            })
        } else {
            match goal {
                Some(g) => cfg.judge_ratio(rate, &result, g.loss_ratio),
                None => cfg.judge(rate, &result),
            }
        };
        records.push(TrialRecord {
            n,
            phase,
            rate_pps: rate,
            load_percent: if line > 0.0 { rate / line * 100.0 } else { 0.0 },
            duration_s: duration.as_secs_f64(),
            goal: goal.map(|g| g.name.clone()),
            stage,
            invalid,
            passed: fail_reason.is_none(),
            fail_reason,
            result,
        });
        let rec = &records[records.len() - 1];
        if let Some(p) = progress.as_mut() {
            p(Progress::Finished {
                trial: n,
                max_trials,
                phase,
                rate_pps: rate,
                result: &rec.result,
                passed: rec.passed,
                record: rec,
            });
        }
        Ok(records.len() - 1)
    };
    let dirs = f64::from(cfg.directions.max(1));
    let goal_result = |g: &LossGoal, load: Option<f64>| GoalResult {
        name: g.name.clone(),
        loss_ratio: g.loss_ratio,
        exceed_ratio: g.exceed_ratio,
        found: load.is_some(),
        load_pps: load.unwrap_or(0.0),
        mpps: load.unwrap_or(0.0) * dirs / 1e6,
        gbps_l1: gbps_l1(load.unwrap_or(0.0) * dirs, cfg.avg_frame_size),
        percent: if line > 0.0 {
            load.unwrap_or(0.0) / line * 100.0
        } else {
            0.0
        },
        trial_duration_s: full.as_secs_f64(),
        ..Default::default()
    };

    // 1. Throughput.
    let throughput_spec = |rate: f64| Spec {
        phase: Phase::Throughput,
        rate,
        duration: full,
        goal: None,
        stage: None,
    };
    let mut budget_exhausted = false;
    let (best, goals, generator_limited, first) = match mlr {
        None => {
            let first = one(throughput_spec(line), &mut records)?;
            let mut best: Option<usize> = records[first].passed.then_some(first);
            let mut search_trials = 1u32;
            let mut lo = cfg.min_rate_pps.max(0.0);
            let mut hi = line;
            if best.is_none() {
                let res = cfg.resolution_pps();
                while hi - lo > res && search_trials < cfg.max_search_trials {
                    let mid = (lo + hi) / 2.0;
                    let i = one(throughput_spec(mid), &mut records)?;
                    search_trials += 1;
                    if records[i].passed {
                        lo = mid;
                        best = Some(i);
                    } else {
                        hi = mid;
                    }
                }
                if best.is_none() && cfg.min_rate_pps > 0.0 && search_trials < cfg.max_search_trials
                {
                    let i = one(throughput_spec(cfg.min_rate_pps), &mut records)?;
                    if records[i].passed {
                        best = Some(i);
                    }
                }
            }
            let generator_limited = records
                .iter()
                .any(|r| r.fail_reason == Some(FailReason::Underrun));
            let goal = LossGoal {
                name: if cfg.loss_tolerance_ratio == 0.0 && cfg.loss_tolerance_frames == 0 {
                    "ndr".into()
                } else {
                    "throughput".into()
                },
                loss_ratio: cfg.loss_tolerance_ratio,
                exceed_ratio: 0.0,
            };
            let load = best.map(|i| records[i].rate_pps);
            let converged = best == Some(first) || hi - lo <= cfg.resolution_pps();
            let g = GoalResult {
                upper_pps: (best != Some(first)).then_some(hi),
                converged,
                trials: records.len() as u32,
                ..goal_result(&goal, load)
            };
            (best, vec![g], generator_limited, Some(first))
        }
        Some(m) => {
            let goals: Vec<LossGoal> = if m.goals.is_empty() {
                vec![LossGoal::ndr()]
            } else {
                m.goals.clone()
            };
            let space = Space {
                min_load: if cfg.min_rate_pps > 0.0 {
                    cfg.min_rate_pps.min(line)
                } else {
                    line * 1e-4
                },
                max_load: line,
                tolerance_frames: cfg.loss_tolerance_frames,
                min_offered_ratio: cfg.min_offered_ratio,
            };
            let out = {
                let records = &mut records;
                let one = &mut one;
                let goals = &goals;
                let mut exec = |q: &Request| -> Result<Meas, E> {
                    let i = one(
                        Spec {
                            phase: Phase::Throughput,
                            rate: q.rate,
                            duration: q.duration,
                            goal: goals.get(q.goal),
                            stage: Some(q.stage),
                        },
                        records,
                    )?;
                    let t = &records[i];
                    let d = f64::from(t.result.directions.max(1));
                    Ok(Meas {
                        tx: t.result.tx,
                        lost: t.result.lost,
                        valid: !t.invalid,
                        tx_pps: t.result.tx_pps / d,
                        rx_pps: t.result.rx_pps / d,
                    })
                };
                mlrsearch::search(m, full, space, &mut exec)?
            };
            budget_exhausted = out.budget_exhausted;
            let results: Vec<GoalResult> = out
                .goals
                .iter()
                .zip(&goals)
                .map(|(b, g)| GoalResult {
                    upper_pps: b.upper,
                    trial_duration_s: b.duration.as_secs_f64(),
                    converged: b.converged,
                    tester_limited: b.tester_limited,
                    trials: b.trials,
                    ..goal_result(g, b.lower)
                })
                .collect();
            // The best valid search trial at the throughput rate, longest first.
            let best = results[0].found.then(|| {
                let rate = results[0].load_pps;
                records
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| {
                        t.phase == Phase::Throughput
                            && !t.invalid
                            && (t.rate_pps - rate).abs() <= 1e-9 * rate
                    })
                    .max_by(|a, b| a.1.duration_s.total_cmp(&b.1.duration_s))
                    .map(|(i, _)| i)
            });
            (best.flatten(), results, out.ceiling.is_some(), None)
        }
    };
    let tput = goals[0].load_pps;
    let found = goals[0].found;

    // A trial, retried while the tester underruns (MLR search only).
    let retries = mlr.map_or(0, |m| m.max_retries);
    let mut retrying = |phase: Phase, rate: f64, records: &mut Vec<TrialRecord>| {
        let spec = Spec {
            phase,
            rate,
            duration: full,
            goal: None,
            stage: None,
        };
        let mut i = one(spec, records)?;
        let mut n = 0;
        while records[i].invalid && n < retries {
            i = one(spec, records)?;
            n += 1;
        }
        Ok::<usize, E>(i)
    };

    // 2. Frame loss at loads.
    let mut loss_at_load = BTreeMap::new();
    for &pct in &cfg.loads_percent {
        let rate = line * pct / 100.0;
        let reuse = if !(cfg.reuse_line_rate_trial && pct == 100.0) {
            None
        } else if mlr.is_none() {
            first
        } else {
            records.iter().rposition(|t| {
                t.phase == Phase::Throughput
                    && !t.invalid
                    && (t.rate_pps - rate).abs() <= 1e-9 * rate
                    && t.duration_s >= full.as_secs_f64() * (1.0 - 1e-9)
            })
        };
        let i = match reuse {
            Some(i) => i,
            None => retrying(Phase::FrameLoss { load_percent: pct }, rate, &mut records)?,
        };
        loss_at_load.insert(load_key(pct), records[i].result.loss_percent());
    }

    // 3. Latency.
    let lat_idx = match best {
        Some(_) if cfg.latency_trial => Some(retrying(Phase::Latency, tput, &mut records)?),
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

    let underruns = records
        .iter()
        .filter(|t| {
            t.invalid
                || matches!(
                    t.fail_reason,
                    Some(FailReason::Underrun | FailReason::NothingSent)
                )
        })
        .count() as u32;
    Ok(Rfc2544Report {
        line_rate_pps: line,
        directions: cfg.directions.max(1),
        avg_frame_size: cfg.avg_frame_size,
        resolution_pps: cfg.resolution_pps(),
        found,
        throughput_mpps_per_direction: tput / 1e6,
        throughput_mpps: tput * dirs / 1e6,
        throughput_gbps_l1: gbps_l1(tput * dirs, cfg.avg_frame_size),
        throughput_percent: if line > 0.0 { tput / line * 100.0 } else { 0.0 },
        throughput_offered_mpps: best.map_or(0.0, |i| records[i].result.tx_pps / 1e6),
        generator_limited,
        loss_at_load,
        latency_us,
        trials: records,
        search: if mlr.is_some() {
            SearchMethod::Mlr
        } else {
            SearchMethod::Binary
        },
        goals,
        underruns,
        budget_exhausted,
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
    /// SplitMix64: a seeded, dependency-free random sequence for the simulated DUTs.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        /// Uniform in [0, 1).
        fn unit(&mut self) -> f64 {
            (self.next() >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// A trial of `dur` at `rate` (per direction, one direction) through a DUT forwarding
    /// up to `cap` frames/s, losing at least `extra` of the frames sent, from a tester
    /// that offers only `offered` of the rate.
    fn sim(rate: f64, dur: Duration, cap: f64, extra: f64, offered: f64) -> TrialResult {
        let d = dur.as_secs_f64();
        let sent_rate = rate * offered;
        let tx = (sent_rate * d).round() as u64;
        let fwd = (sent_rate.min(cap) * d).round() as u64;
        let rx = fwd.min(tx - (tx as f64 * extra).ceil() as u64);
        TrialResult {
            rate_pps: rate,
            directions: 1,
            duration_s: d,
            tx_elapsed_s: d,
            tx,
            rx,
            lost: tx - rx,
            tx_pps: tx as f64 / d,
            rx_pps: rx as f64 / d,
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

    fn mlr_cfg() -> Rfc2544Config {
        let mut cfg = Rfc2544Config::new(1e6, 64.0, 1);
        cfg.trial_duration = Duration::from_secs(2);
        cfg.mlr = Some(MlrConfig::new(cfg.trial_duration));
        cfg
    }

    /// |got − want| within `width` of `want` (relative).
    fn near(got: f64, want: f64, width: f64) -> bool {
        (got - want).abs() <= width * want * (1.0 + 1e-9)
    }

    #[test]
    fn mlr_finds_ndr_and_pdr_of_a_clean_dut() {
        for cap in [613_000.0, 1e6 * 0.999, 2e6, 5_000.0] {
            let cfg = mlr_cfg();
            let mut events = 0;
            let mut prog = |p: Progress<'_>| {
                if let Progress::Finished {
                    trial, max_trials, ..
                } = p
                {
                    assert!(trial <= max_trials);
                    events += 1;
                }
            };
            let r = run_timed(&cfg, |rate, d| sim(rate, d, cap, 0.0, 1.0), Some(&mut prog));
            let w = cfg.mlr.as_ref().unwrap().width;
            let (ndr, pdr) = (r.goal("ndr").unwrap(), r.goal("pdr").unwrap());
            let want_pdr = (cap / 0.995).min(1e6);
            let want_ndr = cap.min(1e6);
            assert!(
                ndr.load_pps <= want_ndr && near(ndr.load_pps, want_ndr, w),
                "cap {cap}: {ndr:?}"
            );
            assert!(
                pdr.load_pps <= want_pdr * (1.0 + 1e-6) && near(pdr.load_pps, want_pdr, w),
                "cap {cap}: {pdr:?}"
            );
            assert!(ndr.converged && pdr.converged && !r.budget_exhausted);
            assert_eq!(r.search, SearchMethod::Mlr);
            assert_eq!(r.throughput_mpps, ndr.mpps);
            assert_eq!(r.underruns, 0);
            assert_eq!(events, r.trials.len());
            let search: Vec<&TrialRecord> = r
                .trials
                .iter()
                .filter(|t| t.phase == Phase::Throughput)
                .collect();
            // Exploratory trials first, then final ones; both goals served.
            assert!(search[0].stage == Some(SearchStage::Exploratory));
            assert!(search[0].duration_s == 0.5);
            assert!(search.iter().any(|t| t.stage == Some(SearchStage::Final)));
            let k = search
                .iter()
                .position(|t| t.stage == Some(SearchStage::Final))
                .unwrap();
            assert!(search[k..].iter().all(|t| t.duration_s == 2.0));
            println!("cap {cap}: {} search trials", search.len());
            assert!(search.len() <= 30, "{} search trials", search.len());
            assert_eq!(r.loss_at_load.len(), 4);
            assert!(r.latency_us.is_some());
        }
    }

    fn run_timed(
        cfg: &Rfc2544Config,
        mut trial: impl FnMut(f64, Duration) -> TrialResult,
        progress: Option<&mut dyn FnMut(Progress<'_>)>,
    ) -> Rfc2544Report {
        match try_run_timed::<std::convert::Infallible>(cfg, |r, d| Ok(trial(r, d)), progress) {
            Ok(r) => r,
            Err(e) => match e {},
        }
    }
    /// One trial in ten loses 1 % on top of what the DUT drops: the search outvotes the
    /// spikes and finds NDR and PDR within the width of the true capacity.
    #[test]
    fn mlr_tolerates_loss_spikes() {
        let cap = 613_000.0;
        let mut misses = 0;
        let mut total_spikes = 0;
        for seed in 1..=40u64 {
            let cfg = mlr_cfg();
            let w = cfg.mlr.as_ref().unwrap().width;
            let mut rng = Rng(seed);
            let mut spikes = 0;
            let r = run_timed(
                &cfg,
                |rate, d| {
                    let spike = rng.unit() < 0.1;
                    spikes += u32::from(spike);
                    sim(rate, d, cap, if spike { 0.01 } else { 0.0 }, 1.0)
                },
                None,
            );
            total_spikes += spikes;
            let (ndr, pdr) = (r.goal("ndr").unwrap(), r.goal("pdr").unwrap());
            assert!(!r.budget_exhausted, "seed {seed}");
            // Spikes only add loss: never above the truth.
            assert!(ndr.load_pps <= cap && pdr.load_pps <= cap / 0.995 * (1.0 + 1e-9));
            let ok = near(ndr.load_pps, cap, w) && near(pdr.load_pps, cap / 0.995, w);
            println!(
                "seed {seed}: ndr {:.0} pdr {:.0} {} trials, {spikes} spikes",
                ndr.load_pps,
                pdr.load_pps,
                r.trials.len()
            );
            if !ok {
                misses += 1;
                // Even then, never off by more than a few widths.
                assert!(near(ndr.load_pps, cap, 4.0 * w), "seed {seed}: {ndr:?}");
                assert!(
                    near(pdr.load_pps, cap / 0.995, 4.0 * w),
                    "seed {seed}: {pdr:?}"
                );
            }
        }
        println!("misses {misses}, {total_spikes} spikes");
        assert!(total_spikes > 40);
        assert!(
            misses <= 2,
            "{misses} of 40 searches off by more than the width"
        );
    }

    /// The capacity drifts by up to ±20 % from one trial to the next: both results land in
    /// the band, and the search ends within its budget.
    #[test]
    fn mlr_with_drifting_capacity_stays_in_the_band_and_ends() {
        let cap = 500_000.0;
        for seed in 1..=40u64 {
            let cfg = mlr_cfg();
            let m = cfg.mlr.as_ref().unwrap();
            let mut rng = Rng(seed);
            let r = run_timed(
                &cfg,
                |rate, d| sim(rate, d, cap * (0.8 + 0.4 * rng.unit()), 0.0, 1.0),
                None,
            );
            let search = r.trials.iter().filter(|t| t.phase == Phase::Throughput);
            let n = search.clone().count() as u32;
            let time: f64 = search.map(|t| t.duration_s).sum();
            assert!(n <= m.max_trials && time <= m.max_time.as_secs_f64() + 1e-9);
            for g in &r.goals {
                println!(
                    "seed {seed}: {} {:.0} {:?} conv {} trials {n}",
                    g.name, g.load_pps, g.upper_pps, g.converged
                );
                assert!(g.found, "seed {seed}: {g:?}");
                let hi = if g.name == "pdr" { 1.2 / 0.995 } else { 1.2 };
                assert!(
                    g.load_pps >= 0.8 * cap && g.load_pps <= hi * cap,
                    "seed {seed}: {g:?}"
                );
            }
        }
    }
    /// A tester that underruns one trial in four (it offers 60 % of the rate): each such
    /// trial is invalidated and retried, never taken for the DUT's loss, and the results
    /// are those of a clean run.
    #[test]
    fn mlr_retries_underruns_and_never_counts_them_as_loss() {
        let cap = 613_000.0;
        let mut limited = 0;
        let mut underruns = 0;
        for seed in 1..=40u64 {
            let cfg = mlr_cfg();
            let w = cfg.mlr.as_ref().unwrap().width;
            let mut rng = Rng(seed);
            let r = run_timed(
                &cfg,
                |rate, d| {
                    let offered = if rng.unit() < 0.25 { 0.6 } else { 1.0 };
                    sim(rate, d, cap, 0.0, offered)
                },
                None,
            );
            let invalid: Vec<&TrialRecord> = r.trials.iter().filter(|t| t.invalid).collect();
            assert_eq!(r.underruns as usize, invalid.len());
            underruns += invalid.len();
            for t in &invalid {
                assert_eq!(t.fail_reason, Some(FailReason::Underrun), "{t:?}");
                assert!(!t.passed);
            }
            // Every invalid trial was retried: the next trial is at the same rate.
            for t in &invalid {
                let next = &r.trials[t.n as usize];
                assert_eq!(next.rate_pps, t.rate_pps, "seed {seed}: {t:?}");
            }
            let (ndr, pdr) = (r.goal("ndr").unwrap(), r.goal("pdr").unwrap());
            if r.generator_limited {
                // Five underruns in a row at one load: taken for the tester's limit, and
                // said so, never for loss.
                limited += 1;
                assert!(ndr.load_pps <= cap);
                assert!(
                    ndr.tester_limited || near(ndr.load_pps, cap, w),
                    "seed {seed}"
                );
                continue;
            }
            assert!(
                near(ndr.load_pps, cap, w) && ndr.load_pps <= cap,
                "seed {seed}: {ndr:?}"
            );
            assert!(near(pdr.load_pps, cap / 0.995, w), "seed {seed}: {pdr:?}");
            // The loads' loss is the DUT's: at 25 and 50 % it forwards everything.
            assert_eq!(r.loss_at_load["25"], 0.0);
            assert_eq!(r.loss_at_load["50"], 0.0);
        }
        println!("underruns {underruns}, limited {limited}");
        assert!(underruns > 100, "{underruns}");
        assert!(
            limited <= 1,
            "{limited} of 40 searches took noise for a tester limit"
        );
    }

    /// A tester that can never send more than 300k frames/s in front of a 613k DUT: the
    /// loads beyond it underrun every time, the search's ceiling drops to what the tester
    /// sends, and the results are flagged as the tester's limit.
    #[test]
    fn mlr_tester_ceiling_is_flagged() {
        let cfg = mlr_cfg();
        let m = cfg.mlr.as_ref().unwrap();
        let r = run_timed(
            &cfg,
            |rate, d| {
                let mut x = sim(rate.min(300_000.0), d, 613_000.0, 0.0, 1.0);
                x.rate_pps = rate;
                x
            },
            None,
        );
        assert!(r.generator_limited);
        assert!(r.underruns > m.max_retries);
        for g in &r.goals {
            assert!(g.tester_limited && g.found, "{g:?}");
            assert!(
                g.load_pps <= 300_000.0 && g.load_pps > 0.98 * 300_000.0,
                "{g:?}"
            );
        }
        // The lossless but under-offered trials were invalid, never failures of the DUT.
        assert!(r
            .trials
            .iter()
            .filter(|t| t.phase == Phase::Throughput && !t.invalid)
            .all(|t| t.passed));
        assert!(r.throughput_mpps > 0.29);
    }

    #[test]
    fn mlr_budget_errors_and_json() {
        // A budget of 5 trials: the search stops, says so, and reports what it has.
        let mut cfg = mlr_cfg();
        cfg.mlr.as_mut().unwrap().max_trials = 5;
        let r = run_timed(&cfg, |rate, d| sim(rate, d, 400_000.0, 0.0, 1.0), None);
        assert!(r.budget_exhausted);
        let search = r
            .trials
            .iter()
            .filter(|t| t.phase == Phase::Throughput)
            .count();
        assert_eq!(search, 5);
        assert!(r.goals.iter().all(|g| !g.converged));
        assert!(r.trials.len() as u32 <= cfg.max_trials());
        // A DUT that forwards nothing: not found, the search ends at the minimum load.
        let cfg = mlr_cfg();
        let r = run_timed(&cfg, |rate, d| sim(rate, d, 0.0, 0.0, 1.0), None);
        assert!(!r.found && r.goals.iter().all(|g| !g.found && g.converged));
        assert_eq!((r.throughput_mpps, r.latency_us), (0.0, None));
        // Errors abort.
        let mut n = 0;
        let e = try_run_timed(
            &mlr_cfg(),
            |rate, d| {
                n += 1;
                if n == 3 {
                    Err("interrupted")
                } else {
                    Ok(sim(rate, d, 1e5, 0.0, 1.0))
                }
            },
            None,
        );
        assert_eq!(e.unwrap_err(), "interrupted");
        // JSON: goals, stages, goal of each trial, invalid flags; old JSON still reads.
        let r = run_timed(&mlr_cfg(), |rate, d| sim(rate, d, 4e5, 0.0, 1.0), None);
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["search"], "mlr");
        assert_eq!(j["goals"][0]["name"], "ndr");
        assert_eq!(j["goals"][1]["name"], "pdr");
        assert_eq!(j["goals"][1]["loss_ratio"], 0.005);
        assert_eq!(j["trials"][0]["stage"], "exploratory");
        assert_eq!(j["trials"][0]["goal"], "ndr");
        assert_eq!(j["trials"][0]["invalid"], false);
        assert_eq!(j["trials"][0]["duration_s"], 0.5);
        let back: Rfc2544Report = serde_json::from_value(j.clone()).unwrap();
        assert_eq!(back, r);
        let mut old = j;
        for k in ["search", "goals", "underruns", "budget_exhausted"] {
            old.as_object_mut().unwrap().remove(k);
        }
        for t in old["trials"].as_array_mut().unwrap() {
            for k in ["duration_s", "goal", "stage", "invalid"] {
                t.as_object_mut().unwrap().remove(k);
            }
        }
        let back: Rfc2544Report = serde_json::from_value(old).unwrap();
        assert_eq!(back.search, SearchMethod::Binary);
        assert!(back.goals.is_empty());
    }
}
