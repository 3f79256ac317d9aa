//! A throughput search that tolerates noise, after the IETF BMWG's Multiple Loss Ratio
//! Search (MLRsearch, draft-ietf-bmwg-mlrsearch, as FD.io CSIT runs it). Used by
//! [`crate::rfc2544`] when [`crate::Rfc2544Config::mlr`] is set.
//!
//! # Loss goals and load classification
//! A search serves several [`LossGoal`]s at once (by default NDR, 0 % loss, and PDR,
//! 0.5 %). A trial is *high-loss* for a goal when its loss ratio exceeds the goal's
//! `loss_ratio`. A load (an offered rate) is classified for a goal from **all** the valid
//! trials made at it, weighted by their durations:
//! - an **upper bound** when the high-loss share exceeds the goal's `exceed_ratio` even if
//!   every trial still missing up to the stage's duration sum were low-loss;
//! - a **lower bound** when the high-loss share stays within `exceed_ratio` even if every
//!   missing trial were high-loss;
//! - **undecided** otherwise: it gets another trial.
//!
//! Trials shorter than the stage's trial duration are weaker evidence: their low-loss time
//! only cancels their own high-loss time, never counts as low-loss, so a short trial can
//! make a load look worse but never better.
//!
//! The goal's result is its *relevant lower bound*: the highest lower bound below the
//! lowest upper bound (a lower bound above an upper bound, an artefact of noise, is
//! ignored).
//!
//! # Stages
//! Trials start short ([`MlrConfig::initial_duration`]) and double in duration from stage
//! to stage up to the final duration, while the width the bounds must reach halves down
//! to [`MlrConfig::width`] (relative: `(upper − lower) ≤ width × upper`). In exploratory
//! stages the trial time a load is judged against is one trial, so a single trial decides
//! it; in the final stage it is [`MlrConfig::duration_sum`] (by default two final trials:
//! one low-loss trial makes a lower bound, a high-loss one needs confirming by another).
//! Each stage starts from the previous stage's bounds (re-measured at the longer
//! duration), so the final bounds always rest on final-duration trials.
//!
//! Within a stage, a goal's next load is: the previous stage's bounds first; without an
//! upper bound, the maximum load; without a lower bound, first the forwarding rate
//! measured at the upper bound, then steps downward that double in size; with both, a step
//! that doubles from the bound that moved last, capped at the (geometric) middle.
//!
//! # Underruns
//! A trial in which the tester could not offer the load (see
//! [`crate::Rfc2544Config::min_offered_ratio`]) is *invalid*: it is not evidence about
//! the DUT, and it is retried up to [`MlrConfig::max_retries`] times. When every attempt
//! at a load underruns, the load is beyond the tester: the search's maximum load drops to
//! what the tester did send, and results at that ceiling are flagged as tester-limited.
//!
//! # Bounds
//! The search stops when every goal's bounds are within the width at the final duration,
//! or when [`MlrConfig::max_trials`] trials (retries included) or [`MlrConfig::max_time`]
//! of trial time have been spent; then each goal reports the best bounds it has, flagged
//! as not converged.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One loss goal of a search.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LossGoal {
    /// Name in reports (`ndr`, `pdr`).
    pub name: String,
    /// A trial whose loss ratio (lost / sent) exceeds this is high-loss (0 for NDR).
    pub loss_ratio: f64,
    /// A load is an upper bound when more than this share of its trial time is high-loss
    /// (0.5: a majority).
    pub exceed_ratio: f64,
}

impl LossGoal {
    /// The non-drop rate: no loss at all, exceed ratio 0.5.
    pub fn ndr() -> LossGoal {
        LossGoal {
            name: "ndr".into(),
            loss_ratio: 0.0,
            exceed_ratio: 0.5,
        }
    }
    /// The partial drop rate at `loss_ratio` (0.005 = 0.5 %), exceed ratio 0.5.
    pub fn pdr(loss_ratio: f64) -> LossGoal {
        LossGoal {
            name: "pdr".into(),
            loss_ratio,
            exceed_ratio: 0.5,
        }
    }
}

/// Settings of an MLR search. The final trial duration is
/// [`crate::Rfc2544Config::trial_duration`].
#[derive(Clone, Debug, PartialEq)]
pub struct MlrConfig {
    /// The goals, searched together; the first is the one reported as the throughput
    /// (NDR by convention).
    pub goals: Vec<LossGoal>,
    /// Duration of the first (shortest) exploratory trials; stages double it up to the
    /// final duration (default a quarter of the final duration).
    pub initial_duration: Duration,
    /// Final-duration trial time a load needs before it can be classified as a lower
    /// bound (default twice the final duration: one noisy trial at a load is outvoted).
    pub duration_sum: Duration,
    /// Relative width the final bounds must reach: `upper − lower ≤ width × upper`
    /// (default 0.005).
    pub width: f64,
    /// Most search trials, retries included (default 60).
    pub max_trials: u32,
    /// Most search trial time, retries included (default 20 final durations).
    pub max_time: Duration,
    /// Retries of a trial invalidated by an underrun (default 4: a tester that underruns
    /// one trial in four still misjudges a load as beyond it only once in a thousand).
    pub max_retries: u32,
}

impl MlrConfig {
    /// NDR and PDR (0.5 %) with final trials of `final_duration`.
    pub fn new(final_duration: Duration) -> MlrConfig {
        MlrConfig {
            goals: vec![LossGoal::ndr(), LossGoal::pdr(0.005)],
            initial_duration: final_duration / 4,
            duration_sum: final_duration * 2,
            width: 0.005,
            max_trials: 60,
            max_time: final_duration * 20,
            max_retries: 4,
        }
    }

    /// Trial durations of the stages, shortest first; the last is `final_duration`.
    pub fn stage_durations(&self, final_duration: Duration) -> Vec<Duration> {
        let fin = final_duration.max(Duration::from_nanos(1));
        let init = self.initial_duration.clamp(Duration::from_nanos(1), fin);
        let mut v = vec![fin];
        let mut d = fin;
        while d / 2 >= init && v.len() < 12 {
            d /= 2;
            v.push(d);
        }
        v.reverse();
        v
    }
}

/// Which kind of stage a search trial belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchStage {
    /// Shorter than the final duration, to narrow the bounds cheaply.
    Exploratory,
    /// At the final duration: the evidence the results rest on.
    Final,
}

/// What a search found for one goal. Rates per direction unless said otherwise.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GoalResult {
    /// Goal name (`ndr`, `pdr`).
    pub name: String,
    /// The goal's loss ratio.
    pub loss_ratio: f64,
    /// The goal's exceed ratio.
    pub exceed_ratio: f64,
    /// Whether a lower bound was found.
    pub found: bool,
    /// The result: the relevant lower bound, frames/s per direction (0 when none).
    pub load_pps: f64,
    /// The relevant upper bound, frames/s per direction (None when the maximum load is a
    /// lower bound, or nothing was classified as an upper bound).
    pub upper_pps: Option<f64>,
    /// The result over all directions, millions of frames/s.
    pub mpps: f64,
    /// The same at L1, Gbit/s.
    pub gbps_l1: f64,
    /// The result as a percent of the line rate.
    pub percent: f64,
    /// Duration of the trials the bounds rest on, s (the final duration unless the
    /// budget ran out earlier).
    pub trial_duration_s: f64,
    /// Whether the bounds reached the width at the final duration (or the maximum load,
    /// or the minimum load, was classified at it).
    pub converged: bool,
    /// The result is the tester's ceiling (it could not offer more), not the DUT's limit.
    pub tester_limited: bool,
    /// Search trials made on this goal's behalf, retries included.
    pub trials: u32,
}

/// A trial the search asks for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request {
    /// Offered load per direction, frames/s.
    pub rate: f64,
    /// Trial duration.
    pub duration: Duration,
    /// Index of the goal it serves.
    pub goal: usize,
    /// Stage kind.
    pub stage: SearchStage,
}

/// What the search needs of a trial.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Meas {
    /// Frames sent.
    pub tx: u64,
    /// Frames lost.
    pub lost: u64,
    /// False when the tester could not offer the load (underrun) or sent nothing.
    pub valid: bool,
    /// Sent rate per direction, frames/s.
    pub tx_pps: f64,
    /// Received rate per direction, frames/s.
    pub rx_pps: f64,
}

/// One goal's bounds at the end of a search.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct GoalBounds {
    pub lower: Option<f64>,
    pub upper: Option<f64>,
    pub duration: Duration,
    pub converged: bool,
    pub tester_limited: bool,
    pub trials: u32,
}

/// The outcome of a search.
#[derive(Clone, Debug, Default)]
pub(crate) struct Outcome {
    pub goals: Vec<GoalBounds>,
    /// The trial or time budget ran out before every goal converged.
    pub budget_exhausted: bool,
    /// The maximum load after persistent underruns lowered it (None: never lowered).
    pub ceiling: Option<f64>,
}

/// Limits of the search space, per direction, frames/s.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Space {
    pub min_load: f64,
    pub max_load: f64,
    /// A trial losing no more frames than this is never high-loss.
    pub tolerance_frames: u64,
    /// [`crate::Rfc2544Config::min_offered_ratio`], for the ceiling after underruns.
    pub min_offered_ratio: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Lower,
    Upper,
    Undecided,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Lo,
    Hi,
}

#[derive(Clone, Copy, Debug)]
struct Stage {
    dur: Duration,
    d: f64,
    dsum: f64,
    width: f64,
    kind: SearchStage,
}

#[derive(Clone, Copy, Debug, Default)]
struct GoalState {
    pending: Option<f64>,
    up: u32,
    down: u32,
    last: Option<Side>,
    prev: (Option<f64>, Option<f64>),
    prev_stage: Option<usize>,
    trials: u32,
}

struct Load {
    rate: f64,
    /// (duration s, tx, lost, rx_pps) of its valid trials.
    trials: Vec<(f64, u64, u64, f64)>,
}

struct Search<'a> {
    cfg: &'a MlrConfig,
    goals: Vec<LossGoal>,
    space: Space,
    loads: Vec<Load>,
    state: Vec<GoalState>,
    trials: u32,
    time_s: f64,
    exhausted: bool,
    dead: bool,
    ceiling: Option<f64>,
}

/// Relative tolerance of load comparisons.
const EPS: f64 = 1e-9;

fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= EPS * a.abs().max(b.abs())
}

impl Search<'_> {
    fn load(&self, rate: f64) -> Option<&Load> {
        self.loads.iter().find(|l| same(l.rate, rate))
    }

    fn class(&self, load: &Load, g: usize, st: &Stage) -> Class {
        let goal = &self.goals[g];
        let tol = self.space.tolerance_frames as f64;
        let (mut hf, mut lf, mut hs, mut ls) = (0.0, 0.0, 0.0, 0.0);
        for &(d, tx, lost, _) in &load.trials {
            let high = lost as f64 > (goal.loss_ratio * tx as f64).max(tol);
            let full = d >= st.d * (1.0 - EPS);
            match (full, high) {
                (true, true) => hf += d,
                (true, false) => lf += d,
                (false, true) => hs += d,
                (false, false) => ls += d,
            }
        }
        let high = hf + f64::max(hs - ls, 0.0);
        let sum = lf + high;
        let denom = st.dsum.max(sum);
        if denom <= 0.0 {
            return Class::Undecided;
        }
        let missing = (st.dsum - sum).max(0.0);
        if high / denom > goal.exceed_ratio + EPS {
            Class::Upper
        } else if (high + missing) / denom <= goal.exceed_ratio + EPS {
            Class::Lower
        } else {
            Class::Undecided
        }
    }

    fn class_at(&self, rate: f64, g: usize, st: &Stage) -> Class {
        self.load(rate)
            .map_or(Class::Undecided, |l| self.class(l, g, st))
    }

    /// The relevant (lower, upper) bounds of goal `g` in stage `st`.
    fn bounds(&self, g: usize, st: &Stage) -> (Option<f64>, Option<f64>) {
        let max = self.space.max_load * (1.0 + EPS);
        let mut u: Option<f64> = None;
        for l in self.loads.iter().filter(|l| l.rate <= max) {
            if self.class(l, g, st) == Class::Upper && u.is_none_or(|u| l.rate < u) {
                u = Some(l.rate);
            }
        }
        let mut lo: Option<f64> = None;
        for l in self
            .loads
            .iter()
            .filter(|l| l.rate <= max && u.is_none_or(|u| l.rate < u * (1.0 - EPS)))
        {
            if self.class(l, g, st) == Class::Lower && lo.is_none_or(|x| l.rate > x) {
                lo = Some(l.rate);
            }
        }
        (lo, u)
    }

    /// Mean received rate per direction of the valid trials at `rate`.
    fn mrr(&self, rate: f64) -> Option<f64> {
        let l = self.load(rate)?;
        if l.trials.is_empty() {
            return None;
        }
        Some(l.trials.iter().map(|t| t.3).sum::<f64>() / l.trials.len() as f64)
    }

    /// The next load goal `g` needs measured in stage `st`, or None when it is done.
    fn candidate(&mut self, g: usize, st: &Stage) -> Option<f64> {
        let (l, u) = self.bounds(g, st);
        let (min, max) = (self.space.min_load, self.space.max_load);
        if let Some(p) = self.state[g].pending {
            let c = self.class_at(p, g, st);
            let inside = p <= max * (1.0 + EPS)
                && l.is_none_or(|l| p > l * (1.0 + EPS))
                && u.is_none_or(|u| p < u * (1.0 - EPS));
            if c == Class::Undecided && inside {
                return Some(p);
            }
            let s = &mut self.state[g];
            s.pending = None;
            match c {
                Class::Lower => s.last = Some(Side::Lo),
                Class::Upper => s.last = Some(Side::Hi),
                Class::Undecided => {}
            }
        }
        if self.done(st, l, u) {
            return None;
        }
        let w = st.width;
        let mrr = u.and_then(|u| self.mrr(u));
        let loss = self.goals[g].loss_ratio;
        let s = &mut self.state[g];
        let pow = |n: u32| w * f64::from(2u32.saturating_pow(n.min(30)));
        let cand = match (l, u) {
            (None, None) => match s.prev.1 {
                Some(pu) if pu < max && pu >= min => pu,
                _ => max,
            },
            (Some(l), None) => match s.prev.1 {
                Some(pu) if pu > l * (1.0 + EPS) && pu <= max => pu,
                _ => {
                    let c = (l * (1.0 + pow(s.up))).min(max);
                    s.up += 1;
                    s.down = 0;
                    c
                }
            },
            (None, Some(u)) => match s.prev.0 {
                Some(pl) if pl < u * (1.0 - EPS) && pl >= min => pl,
                _ => {
                    let step = u / (1.0 + pow(s.down));
                    let c = match mrr {
                        // The forwarding rate at the upper bound: where an overloaded DUT
                        // tops out, a good first guess of the goal's load.
                        Some(f) if s.down == 0 && s.up == 0 => {
                            (f / (1.0 - loss).max(f64::MIN_POSITIVE)).min(step)
                        }
                        _ => step,
                    };
                    s.down += 1;
                    s.up = 0;
                    c.max(min)
                }
            },
            (Some(l), Some(u)) => {
                let mid = (l * u).sqrt();
                match s.last {
                    Some(Side::Lo) => {
                        let c = (l * (1.0 + pow(s.up))).min(mid);
                        s.up += 1;
                        s.down = 0;
                        c
                    }
                    Some(Side::Hi) => {
                        let c = (u / (1.0 + pow(s.down))).max(mid);
                        s.down += 1;
                        s.up = 0;
                        c
                    }
                    // No bound of this goal moved yet in this stage (another goal's
                    // trials made them): guess from the forwarding rate at the upper
                    // bound, as when there was no lower bound.
                    None => match mrr.map(|f| f / (1.0 - loss).max(f64::MIN_POSITIVE)) {
                        Some(f) if f > l && f < u && l * (1.0 + w) < u / (1.0 + w) => {
                            f.clamp(l * (1.0 + w), u / (1.0 + w))
                        }
                        _ => mid,
                    },
                }
            }
        };
        s.pending = Some(cand);
        Some(cand)
    }

    /// Measure `rate` in stage `st` for goal `g`, retrying underruns. False when the
    /// budget ran out or nothing can be measured any more.
    fn measure<E>(
        &mut self,
        rate: f64,
        st: &Stage,
        g: usize,
        exec: &mut dyn FnMut(&Request) -> Result<Meas, E>,
    ) -> Result<bool, E> {
        let mut best_tx = 0.0f64;
        for _ in 0..=self.cfg.max_retries {
            if self.trials >= self.cfg.max_trials
                || self.time_s + st.d > self.cfg.max_time.as_secs_f64() * (1.0 + EPS)
            {
                self.exhausted = true;
                return Ok(false);
            }
            self.trials += 1;
            self.time_s += st.d;
            self.state[g].trials += 1;
            let m = exec(&Request {
                rate,
                duration: st.dur,
                goal: g,
                stage: st.kind,
            })?;
            if m.valid {
                let t = (st.d, m.tx, m.lost, m.rx_pps);
                match self.loads.iter_mut().find(|l| same(l.rate, rate)) {
                    Some(l) => l.trials.push(t),
                    None => self.loads.push(Load {
                        rate,
                        trials: vec![t],
                    }),
                }
                return Ok(true);
            }
            best_tx = best_tx.max(m.tx_pps);
        }
        // Every attempt underran: this load is beyond the tester. Lower the ceiling to a
        // little under what it did send, so a trial there is offered in full.
        let ceil = best_tx * (1.0 + self.space.min_offered_ratio.clamp(0.0, 1.0)) / 2.0;
        let ceil = ceil.min(rate * (1.0 - 1e-6));
        self.space.max_load = self.space.max_load.min(ceil);
        self.space.min_load = self.space.min_load.min(self.space.max_load);
        self.ceiling = Some(self.space.max_load);
        if self.space.max_load <= 0.0 || !self.space.max_load.is_finite() {
            self.dead = true;
            return Ok(false);
        }
        Ok(true)
    }

    /// Whether bounds `l`, `u` are final for stage `st`.
    fn done(&self, st: &Stage, l: Option<f64>, u: Option<f64>) -> bool {
        let (min, max) = (self.space.min_load, self.space.max_load);
        match (l, u) {
            (Some(l), None) => l >= max * (1.0 - EPS),
            (None, Some(u)) => u <= min * (1.0 + EPS),
            (Some(l), Some(u)) => u - l <= st.width * u * (1.0 + EPS),
            (None, None) => false,
        }
    }
}

/// Run a search over `space` with `exec` running each trial.
pub(crate) fn search<E>(
    cfg: &MlrConfig,
    final_duration: Duration,
    space: Space,
    exec: &mut dyn FnMut(&Request) -> Result<Meas, E>,
) -> Result<Outcome, E> {
    let mut goals: Vec<LossGoal> = cfg
        .goals
        .iter()
        .map(|g| LossGoal {
            name: g.name.clone(),
            loss_ratio: if g.loss_ratio.is_finite() {
                g.loss_ratio.clamp(0.0, 1.0)
            } else {
                0.0
            },
            exceed_ratio: if g.exceed_ratio.is_finite() {
                g.exceed_ratio.clamp(0.0, 0.999)
            } else {
                0.5
            },
        })
        .collect();
    if goals.is_empty() {
        goals.push(LossGoal::ndr());
    }
    let width = if cfg.width.is_finite() && cfg.width > 0.0 {
        cfg.width.min(0.5)
    } else {
        0.005
    };
    let durs = cfg.stage_durations(final_duration);
    let last = durs.len() - 1;
    let stages: Vec<Stage> = durs
        .iter()
        .enumerate()
        .map(|(k, &dur)| Stage {
            dur,
            d: dur.as_secs_f64(),
            dsum: if k == last {
                cfg.duration_sum.max(dur).as_secs_f64()
            } else {
                dur.as_secs_f64()
            },
            width: (width * f64::from(1u32 << (last - k).min(20))).min(0.5),
            kind: if k == last {
                SearchStage::Final
            } else {
                SearchStage::Exploratory
            },
        })
        .collect();
    let max_load = space.max_load.max(f64::MIN_POSITIVE);
    let mut s = Search {
        cfg,
        space: Space {
            max_load,
            min_load: space.min_load.clamp(f64::MIN_POSITIVE, max_load),
            ..space
        },
        state: vec![GoalState::default(); goals.len()],
        goals,
        loads: Vec::new(),
        trials: 0,
        time_s: 0.0,
        exhausted: false,
        dead: false,
        ceiling: None,
    };
    let mut reached = 0;
    'stages: for (k, st) in stages.iter().enumerate() {
        reached = k;
        for gs in &mut s.state {
            gs.pending = None;
            gs.up = 0;
            gs.down = 0;
            gs.last = None;
        }
        loop {
            let mut pick = None;
            for g in 0..s.goals.len() {
                if let Some(c) = s.candidate(g, st) {
                    pick = Some((g, c));
                    break;
                }
            }
            let Some((g, c)) = pick else { break };
            if !s.measure(c, st, g, exec)? {
                break 'stages;
            }
        }
        for g in 0..s.goals.len() {
            let b = s.bounds(g, st);
            s.state[g].prev = b;
            s.state[g].prev_stage = Some(k);
        }
    }
    let complete = !s.exhausted && !s.dead;
    let goals = (0..s.goals.len())
        .map(|g| {
            let st = &stages[reached];
            let (mut l, mut u) = s.bounds(g, st);
            let mut k = reached;
            if !complete && l.is_none() {
                if let Some(pk) = s.state[g].prev_stage.filter(|&pk| pk < reached) {
                    (l, u) = s.state[g].prev;
                    k = pk;
                }
            }
            let converged = k == last && s.done(&stages[k], l, u);
            GoalBounds {
                lower: l,
                upper: u,
                duration: stages[k].dur,
                converged,
                tester_limited: s.ceiling.is_some()
                    && l.is_some_and(|l| l >= s.space.max_load * (1.0 - EPS)),
                trials: s.state[g].trials,
            }
        })
        .collect();
    Ok(Outcome {
        goals,
        budget_exhausted: s.exhausted,
        ceiling: s.ceiling,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(d: f64, dsum: f64) -> Stage {
        Stage {
            dur: Duration::from_secs_f64(d),
            d,
            dsum,
            width: 0.01,
            kind: SearchStage::Final,
        }
    }

    fn search_with(trials: Vec<(f64, u64, u64)>, goal: LossGoal, st: Stage) -> Class {
        let cfg = MlrConfig::new(Duration::from_secs(1));
        let s = Search {
            cfg: &cfg,
            goals: vec![goal],
            space: Space {
                min_load: 1.0,
                max_load: 100.0,
                tolerance_frames: 0,
                min_offered_ratio: 0.99,
            },
            loads: vec![Load {
                rate: 50.0,
                trials: trials
                    .into_iter()
                    .map(|(d, tx, lost)| (d, tx, lost, 0.0))
                    .collect(),
            }],
            state: vec![GoalState::default()],
            trials: 0,
            time_s: 0.0,
            exhausted: false,
            dead: false,
            ceiling: None,
        };
        s.class(&s.loads[0], 0, &st)
    }

    #[test]
    fn classification_by_share_of_high_loss_time() {
        let ndr = LossGoal::ndr();
        let st = stage(1.0, 2.0);
        // One clean trial of two needed: even if the second were lossy, half ≤ 0.5.
        assert_eq!(
            search_with(vec![(1.0, 1000, 0)], ndr.clone(), st),
            Class::Lower
        );
        // One lossy trial: undecided (a clean second trial would outvote it).
        assert_eq!(
            search_with(vec![(1.0, 1000, 1)], ndr.clone(), st),
            Class::Undecided
        );
        assert_eq!(
            search_with(vec![(1.0, 1000, 1), (1.0, 1000, 0)], ndr.clone(), st),
            Class::Lower
        );
        assert_eq!(
            search_with(vec![(1.0, 1000, 1), (1.0, 1000, 3)], ndr.clone(), st),
            Class::Upper
        );
        // PDR at 0.5 %: 4 of 1000 lost is low-loss, 6 is high-loss.
        let pdr = LossGoal::pdr(0.005);
        assert_eq!(
            search_with(vec![(1.0, 1000, 4)], pdr.clone(), st),
            Class::Lower
        );
        assert_eq!(
            search_with(vec![(1.0, 1000, 6), (1.0, 1000, 6)], pdr, st),
            Class::Upper
        );
        // Short trials: a clean one proves nothing; a lossy one counts (half a trial).
        assert_eq!(
            search_with(vec![(0.5, 500, 0), (0.5, 500, 0)], ndr.clone(), st),
            Class::Undecided
        );
        assert_eq!(
            search_with(
                vec![(0.5, 500, 5), (0.5, 500, 5), (0.5, 500, 5)],
                ndr.clone(),
                st
            ),
            Class::Upper
        );
        // ... and a clean short trial cancels a lossy short one.
        assert_eq!(
            search_with(
                vec![(0.5, 500, 5), (0.5, 500, 0), (1.0, 1000, 0)],
                ndr.clone(),
                st
            ),
            Class::Lower
        );
        // Exceed ratio 0: strict, as RFC 2544 (one lossy trial is enough).
        let strict = LossGoal {
            exceed_ratio: 0.0,
            ..LossGoal::ndr()
        };
        assert_eq!(
            search_with(vec![(1.0, 1000, 1)], strict.clone(), stage(1.0, 1.0)),
            Class::Upper
        );
        assert_eq!(
            search_with(vec![(1.0, 1000, 0)], strict, stage(1.0, 1.0)),
            Class::Lower
        );
    }

    #[test]
    fn stages_double_up_to_the_final_duration() {
        let mut c = MlrConfig::new(Duration::from_secs(2));
        assert_eq!(
            c.stage_durations(Duration::from_secs(2)),
            [
                Duration::from_millis(500),
                Duration::from_secs(1),
                Duration::from_secs(2)
            ]
        );
        c.initial_duration = Duration::from_secs(5);
        assert_eq!(
            c.stage_durations(Duration::from_secs(2)),
            [Duration::from_secs(2)]
        );
        c.initial_duration = Duration::ZERO;
        assert_eq!(c.stage_durations(Duration::from_secs(2)).len(), 12);
    }
}
