//! The egress scheduler of a port.
//!
//! Packets are sorted into the port's classes by the class the port's own output policy
//! chose for them on input (carried with the packet), or else by their DSCP (marked on
//! input), and queued per class; the port takes them out in this order:
//! 1. strict-priority classes, the lowest priority number first, each while under its
//!    maximum rate;
//! 2. weighted classes below their minimum rate (round robin among them);
//! 3. weighted classes under their maximum rate, by deficit round robin (a class's
//!    quantum is proportional to its weight; the smallest weight gets 1,536 bytes).
//!
//! Nothing leaves while the port's shaper is in debt. Each class queue has a tail-drop
//! limit and, if configured, CoDel or WRED. The rate buckets (port shaper, class minimum and
//! maximum) are [`Shaper`]s shared by every worker's scheduler of the port, so the rates
//! hold for the port as a whole; the queues, the DRR state and the order among classes
//! are per worker (strict priority holds among the packets of one worker).
//!
//! **Pipes** ([`PipeSpec`]): under the port's shaper, each pipe (a subscriber line, by
//! destination prefix: [`crate::pipes`]) has its own rate bucket, shared by the workers
//! like the class buckets, and its own queue per class. The pipes with something queued
//! and tokens in their bucket are served by deficit round robin by bytes (the same
//! quantum each, [`PIPE_QUANTUM_BYTES`]); the packets of no pipe take part as one more
//! pipe without a bucket ("lane 0"); within a pipe, the classes' order above. Class
//! minimum and maximum rates are port-wide; a pipe may give its classes maximum and
//! minimum rates of their own within it ([`PipeSpec::max_bps`], [`PipeSpec::min_bps`]: a
//! bucket per pipe and class, shared by the workers like the pipe's): a class at its
//! maximum in a pipe waits as one at its port-wide maximum does, and one below its
//! minimum in a pipe is served before the pipe's DRR as one below its port-wide minimum
//! is.
//!
//! **Subports** ([`SubportSpec`]): between the port and its pipes, each subport (a group
//! of pipes: a wholesale customer, a DSLAM) has its own rate bucket, shared like a pipe's.
//! The subports with something queued and tokens in their bucket are served by deficit
//! round robin by bytes ([`SUBPORT_QUANTUM_BYTES`]), the pipes of no subport (and lane 0)
//! taking part as one more subport without a bucket; within a subport, its pipes as
//! above. A port without subports has that one member only, and no round among members.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crate::bucket::{cost, Shaper, MAX_BURST_BYTES, MAX_RATE_BPS};
use crate::codel::{Codel, CodelParams};
pub use crate::config::MAX_PORT_QUEUED;
use crate::pipes::PipeTable;
use crate::queue::{Entry, Fifo};
use crate::wred::{Wred, WredParams};

/// Most classes a port has.
pub const MAX_CLASSES: usize = 8;
/// The DRR quantum of the smallest weight, in bytes (an Ethernet MTU and then some).
pub const QUANTUM_BYTES: u64 = 1_536;
/// The largest packet the scheduler is sized for (a jumbo frame).
pub const MAX_PACKET: u64 = 9_216;
/// The largest queue limit, in packets.
pub const MAX_LIMIT: usize = 65_536;
/// Most pipes a port has: each has a queue per class in every worker's scheduler, and a
/// dequeue may pass over every pipe in debt.
pub const MAX_PIPES: usize = 1_024;
/// Most queue places (packets) a port's pipes have together, per worker: each is an entry
/// of 40 bytes allocated with the scheduler (5 MiB per worker at most).
pub const MAX_PIPE_PACKETS: usize = 131_072;
/// The deficit round robin quantum among a port's pipes, bytes.
pub const PIPE_QUANTUM_BYTES: u64 = 1_536;
/// Most subports a port has.
pub const MAX_SUBPORTS: usize = 64;
/// The deficit round robin quantum among a port's subports, bytes.
pub const SUBPORT_QUANTUM_BYTES: u64 = 1_536;

/// One subport of a port (a group of its pipes sharing a rate), as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubportSpec {
    /// Its name.
    pub name: String,
    /// Its shaper's rate in bit/s.
    pub rate_bps: u64,
    /// Its shaper's burst in bytes.
    pub burst_bytes: u64,
    /// The most packets its pipes hold together, per worker (none: only their own
    /// limits); beyond, a tail drop.
    pub limit: Option<usize>,
}

/// One pipe of a port (a subscriber line behind it), as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipeSpec {
    /// Its name.
    pub name: String,
    /// Its shaper's rate in bit/s.
    pub rate_bps: u64,
    /// Its shaper's burst in bytes.
    pub burst_bytes: u64,
    /// The limit of each of its class queues, packets (at most the class's own limit).
    pub limit: usize,
    /// Its destination prefixes, as written.
    pub dst: Vec<String>,
    /// The profile it took its parameters from (`[[qos.policy.pipe_profile]]`), if any:
    /// shown, not used by the scheduler.
    pub profile: Option<String>,
    /// Its own DRR weights of the classes, by class index (empty: the classes' weights);
    /// the entries of strict-priority classes are not used.
    pub weights: Vec<u32>,
    /// Its subport, by index into [`SchedSpec::subports`] (none: directly under the port).
    pub subport: Option<u16>,
    /// Its classes' maximum rates within it, bit/s, by class index (empty, or 0 for a
    /// class: none but the class's port-wide one); each a bucket of the pipe's burst.
    pub max_bps: Vec<u64>,
    /// Its weighted classes' minimum rates within it, bit/s, by class index (empty, or 0
    /// for a class: none but the class's port-wide one); each a bucket of the pipe's burst.
    pub min_bps: Vec<u64>,
}

/// One class of a port, as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassSpec {
    /// Its name.
    pub name: String,
    /// Strict priority (lower first) if set; weighted otherwise.
    pub priority: Option<u8>,
    /// Its DRR weight (weighted classes), at least 1.
    pub weight: u32,
    /// Minimum rate in bit/s (0: none).
    pub min_bps: u64,
    /// Maximum rate in bit/s (0: none).
    pub max_bps: u64,
    /// Burst of its rate buckets, in bytes.
    pub burst_bytes: u64,
    /// Queue limit in packets (tail drop beyond).
    pub limit: usize,
    /// CoDel on its queue.
    pub codel: Option<CodelParams>,
    /// WRED on its queue.
    pub wred: Option<WredParams>,
}

/// A port's scheduler, as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedSpec {
    /// The port shaper's rate in bit/s (0: no shaper, the port's own pace).
    pub rate_bps: u64,
    /// The shaper's burst in bytes.
    pub burst_bytes: u64,
    /// The classes, by index.
    pub classes: Vec<ClassSpec>,
    /// Class by DSCP.
    pub by_dscp: [u8; 64],
    /// The class of DSCPs no class names.
    pub default_class: u8,
    /// Its pipes (none: every packet is scheduled at the port level).
    pub pipes: Vec<PipeSpec>,
    /// Its subports, which its pipes may name (none: the pipes are directly under the
    /// port).
    pub subports: Vec<SubportSpec>,
}

/// Why a [`SchedSpec`] is refused (the config says where).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchedError {
    /// No class, or more than [`MAX_CLASSES`].
    ClassCount(usize),
    /// A rate out of range (class name or "port", what, value).
    Rate(String, &'static str, u64),
    /// A burst out of range.
    Burst(String, u64),
    /// A weight of 0 on a weighted class.
    Weight(String),
    /// A queue limit of 0 or above [`MAX_LIMIT`].
    Limit(String, usize),
    /// A class whose minimum exceeds its maximum.
    MinAboveMax(String),
    /// The minimum rates add up to more than the port's rate.
    MinsAboveRate(u64, u64),
    /// A DSCP mapped to a class that does not exist.
    UnknownClass(u8),
    /// WRED parameters that do not fit (class, what).
    Wred(String, String),
    /// A pipe that does not fit (pipe, what).
    Pipe(String, String),
    /// A subport that does not fit (subport, what).
    Subport(String, String),
}

impl std::fmt::Display for SchedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SchedError::ClassCount(n) => {
                write!(f, "{n} classes: a port has 1 to {MAX_CLASSES}")
            }
            SchedError::Rate(c, k, v) => write!(
                f,
                "{c}: {k} = {v} bit/s: must be 1 to {MAX_RATE_BPS} bit/s (or left out)"
            ),
            SchedError::Burst(c, v) => write!(
                f,
                "{c}: burst = {v} bytes: must be {MAX_PACKET} to {MAX_BURST_BYTES} bytes"
            ),
            SchedError::Weight(c) => write!(f, "{c}: weight must be at least 1"),
            SchedError::Limit(c, v) => {
                write!(f, "{c}: limit = {v} packets: must be 1 to {MAX_LIMIT}")
            }
            SchedError::MinAboveMax(c) => write!(f, "{c}: min_rate is above max_rate"),
            SchedError::MinsAboveRate(m, r) => write!(
                f,
                "the classes' minimum rates add up to {m} bit/s, more than the port's {r} bit/s"
            ),
            SchedError::UnknownClass(c) => write!(f, "class index {c} does not exist"),
            SchedError::Wred(c, e) => write!(f, "{c}: wred: {e}"),
            // No name: the port's pipes or subports as a whole.
            SchedError::Pipe(p, e) if p.is_empty() => write!(f, "pipes: {e}"),
            SchedError::Subport(p, e) if p.is_empty() => write!(f, "subports: {e}"),
            SchedError::Pipe(p, e) => write!(f, "pipe {p}: {e}"),
            SchedError::Subport(p, e) => write!(f, "subport {p}: {e}"),
        }
    }
}

impl std::error::Error for SchedError {}

impl SchedSpec {
    /// Check counts, rates, bursts, weights and limits.
    pub fn validate(&self) -> Result<(), SchedError> {
        let n = self.classes.len();
        if n == 0 || n > MAX_CLASSES {
            return Err(SchedError::ClassCount(n));
        }
        let rate = |c: &str, k, v: u64| {
            if v > MAX_RATE_BPS {
                Err(SchedError::Rate(c.to_string(), k, v))
            } else {
                Ok(())
            }
        };
        let burst = |c: &str, v: u64| {
            if !(MAX_PACKET..=MAX_BURST_BYTES).contains(&v) {
                Err(SchedError::Burst(c.to_string(), v))
            } else {
                Ok(())
            }
        };
        rate("port", "rate", self.rate_bps)?;
        if self.rate_bps > 0 {
            burst("port", self.burst_bytes)?;
        }
        let mut mins = 0u64;
        for c in &self.classes {
            rate(&c.name, "min_rate", c.min_bps)?;
            rate(&c.name, "max_rate", c.max_bps)?;
            if c.min_bps > 0 || c.max_bps > 0 {
                burst(&c.name, c.burst_bytes)?;
            }
            if c.priority.is_none() && c.weight == 0 {
                return Err(SchedError::Weight(c.name.clone()));
            }
            if c.limit == 0 || c.limit > MAX_LIMIT {
                return Err(SchedError::Limit(c.name.clone(), c.limit));
            }
            if c.max_bps > 0 && c.min_bps > c.max_bps {
                return Err(SchedError::MinAboveMax(c.name.clone()));
            }
            if let Some(w) = &c.wred {
                let bad = |e: String| SchedError::Wred(c.name.clone(), e);
                w.check(c.limit).map_err(bad)?;
                if c.codel.is_some() {
                    return Err(bad("a queue has CoDel or WRED, not both".into()));
                }
                if c.priority.is_some() {
                    return Err(bad("WRED is for weighted classes, not strict ones".into()));
                }
            }
            mins = mins.saturating_add(c.min_bps);
        }
        if self.rate_bps > 0 && mins > self.rate_bps {
            return Err(SchedError::MinsAboveRate(mins, self.rate_bps));
        }
        for &c in self.by_dscp.iter().chain([&self.default_class]) {
            if c as usize >= n {
                return Err(SchedError::UnknownClass(c));
            }
        }
        self.validate_pipes()
    }

    fn validate_subports(&self) -> Result<(), SchedError> {
        if self.subports.len() > MAX_SUBPORTS {
            return Err(SchedError::Subport(
                String::new(),
                format!(
                    "{} subports: a port has at most {MAX_SUBPORTS}",
                    self.subports.len()
                ),
            ));
        }
        for (k, s) in self.subports.iter().enumerate() {
            let bad = |e: String| Err(SchedError::Subport(s.name.clone(), e));
            if self.subports[..k].iter().any(|o| o.name == s.name) {
                return bad("a subport of that name is defined already".into());
            }
            if let Some(l) = s.limit.filter(|&l| l == 0 || l > MAX_PORT_QUEUED) {
                return bad(format!(
                    "limit = {l} packets: must be 1 to {MAX_PORT_QUEUED}"
                ));
            }
            if self.rate_bps == 0 {
                return bad("subports need the port's shaper".into());
            }
            if s.rate_bps == 0 || s.rate_bps > self.rate_bps {
                return bad(format!(
                    "rate = {} bit/s: must be 1 to the port's {} bit/s",
                    s.rate_bps, self.rate_bps
                ));
            }
            if !(MAX_PACKET..=MAX_BURST_BYTES).contains(&s.burst_bytes) {
                return bad(format!(
                    "burst = {} bytes: must be {MAX_PACKET} to {MAX_BURST_BYTES} bytes",
                    s.burst_bytes
                ));
            }
        }
        Ok(())
    }

    fn validate_pipes(&self) -> Result<(), SchedError> {
        self.validate_subports()?;
        if self.pipes.is_empty() {
            return Ok(());
        }
        let bad = |p: &PipeSpec, e: String| Err(SchedError::Pipe(p.name.clone(), e));
        if self.pipes.len() > MAX_PIPES {
            return Err(SchedError::Pipe(
                String::new(),
                format!("{} pipes: a port has at most {MAX_PIPES}", self.pipes.len()),
            ));
        }
        let mut places = 0usize;
        for p in &self.pipes {
            if self.rate_bps == 0 {
                return bad(p, "pipes need the port's shaper".into());
            }
            if p.rate_bps == 0 || p.rate_bps > self.rate_bps {
                return bad(
                    p,
                    format!(
                        "rate = {} bit/s: must be 1 to the port's {} bit/s",
                        p.rate_bps, self.rate_bps
                    ),
                );
            }
            if !(MAX_PACKET..=MAX_BURST_BYTES).contains(&p.burst_bytes) {
                return bad(
                    p,
                    format!(
                        "burst = {} bytes: must be {MAX_PACKET} to {MAX_BURST_BYTES} bytes",
                        p.burst_bytes
                    ),
                );
            }
            if p.limit == 0 || p.limit > MAX_LIMIT {
                return bad(
                    p,
                    format!("limit = {} packets: must be 1 to {MAX_LIMIT}", p.limit),
                );
            }
            if let Some(k) = p.subport {
                let Some(s) = self.subports.get(usize::from(k)) else {
                    return bad(p, format!("subport index {k} does not exist"));
                };
                if p.rate_bps > s.rate_bps {
                    return bad(
                        p,
                        format!(
                            "rate = {} bit/s: above its subport {}'s {} bit/s",
                            p.rate_bps, s.name, s.rate_bps
                        ),
                    );
                }
            }
            if !p.weights.is_empty() {
                if p.weights.len() != self.classes.len() {
                    return bad(
                        p,
                        format!(
                            "{} weights for {} classes: one per class, or none",
                            p.weights.len(),
                            self.classes.len()
                        ),
                    );
                }
                let zero = self
                    .classes
                    .iter()
                    .zip(&p.weights)
                    .find(|(c, &w)| c.priority.is_none() && w == 0);
                if let Some((c, _)) = zero {
                    return bad(p, format!("{}: weight must be at least 1", c.name));
                }
            }
            if !p.max_bps.is_empty() {
                if p.max_bps.len() != self.classes.len() {
                    return bad(
                        p,
                        format!(
                            "{} maximum rates for {} classes: one per class, or none",
                            p.max_bps.len(),
                            self.classes.len()
                        ),
                    );
                }
                let above = self
                    .classes
                    .iter()
                    .zip(&p.max_bps)
                    .find(|(_, &m)| m > p.rate_bps);
                if let Some((c, m)) = above {
                    return bad(
                        p,
                        format!(
                            "{}: max_rate = {m} bit/s: above the pipe's {} bit/s",
                            c.name, p.rate_bps
                        ),
                    );
                }
            }
            if !p.min_bps.is_empty() {
                if p.min_bps.len() != self.classes.len() {
                    return bad(
                        p,
                        format!(
                            "{} minimum rates for {} classes: one per class, or none",
                            p.min_bps.len(),
                            self.classes.len()
                        ),
                    );
                }
                for (k, (c, &m)) in self.classes.iter().zip(&p.min_bps).enumerate() {
                    let max = p.max_bps.get(k).copied().filter(|&x| x > 0);
                    if m > 0 && c.priority.is_some() {
                        return bad(
                            p,
                            format!("{}: a minimum rate is for weighted classes", c.name),
                        );
                    }
                    if max.is_some_and(|x| m > x) {
                        return bad(p, format!("{}: min_rate is above max_rate", c.name));
                    }
                }
                let sum = p.min_bps.iter().fold(0u64, |a, &m| a.saturating_add(m));
                if sum > p.rate_bps {
                    return bad(
                        p,
                        format!(
                            "minimum rates add up to {sum} bit/s, more than the pipe's {} bit/s",
                            p.rate_bps
                        ),
                    );
                }
            }
            places += self
                .classes
                .iter()
                .map(|c| c.limit.min(p.limit))
                .sum::<usize>();
        }
        if places > MAX_PIPE_PACKETS {
            return Err(SchedError::Pipe(
                String::new(),
                format!("the pipes' queues hold {places} packets: at most {MAX_PIPE_PACKETS}"),
            ));
        }
        let dst: Vec<Vec<String>> = self.pipes.iter().map(|p| p.dst.clone()).collect();
        PipeTable::build(&dst).map_err(|e| SchedError::Pipe(String::new(), e))?;
        Ok(())
    }

    /// Whether `other` schedules packets as this one does: the same in everything but the
    /// names of its classes, pipes and subports and the profiles its pipes name, which
    /// only show (a port whose policy changed only in those keeps its queues).
    pub fn schedules_as(&self, other: &SchedSpec) -> bool {
        let unnamed = |s: &SchedSpec| {
            let mut s = s.clone();
            s.classes.iter_mut().for_each(|c| c.name.clear());
            s.pipes.iter_mut().for_each(|p| {
                p.name.clear();
                p.profile = None;
            });
            s.subports.iter_mut().for_each(|p| p.name.clear());
            s
        };
        unnamed(self) == unnamed(other)
    }

    /// The class of a packet of DSCP `dscp`.
    #[inline]
    pub fn class_of(&self, dscp: u8) -> u8 {
        self.by_dscp
            .get(dscp as usize)
            .copied()
            .unwrap_or(self.default_class)
    }
}

/// The rate buckets of a port, shared by its workers' schedulers.
#[derive(Debug)]
pub struct Rates {
    port: Option<Shaper>,
    min: Vec<Option<Shaper>>,
    max: Vec<Option<Shaper>>,
    /// By pipe.
    pipes: Vec<Shaper>,
    /// By subport.
    subports: Vec<Shaper>,
    /// Each pipe's classes' maximum and minimum rates within it, by pipe then class
    /// (`classes` a pipe); empty when no pipe has them.
    pipe_max: Vec<Option<Shaper>>,
    pipe_min: Vec<Option<Shaper>>,
    classes: usize,
    /// The pipe of a destination (none without pipes).
    table: Option<PipeTable>,
}

impl Rates {
    /// The buckets of `spec` (validated), full at `now_ns`.
    pub fn new(spec: &SchedSpec, now_ns: u64) -> Rates {
        let b = |rate: u64, burst| (rate > 0).then(|| Shaper::new(rate, burst, now_ns));
        // A bucket for each pipe and class of the rates `of` gives (none if no pipe does).
        let per_pipe_class = |of: fn(&PipeSpec) -> &Vec<u64>| -> Vec<Option<Shaper>> {
            if spec.pipes.iter().all(|p| of(p).is_empty()) {
                return Vec::new();
            }
            spec.pipes
                .iter()
                .flat_map(|p| {
                    (0..spec.classes.len())
                        .map(move |c| b(of(p).get(c).copied().unwrap_or(0), p.burst_bytes))
                })
                .collect()
        };
        Rates {
            port: b(spec.rate_bps, spec.burst_bytes),
            min: spec
                .classes
                .iter()
                .map(|c| b(c.min_bps, c.burst_bytes))
                .collect(),
            max: spec
                .classes
                .iter()
                .map(|c| b(c.max_bps, c.burst_bytes))
                .collect(),
            pipes: spec
                .pipes
                .iter()
                .map(|p| Shaper::new(p.rate_bps, p.burst_bytes, now_ns))
                .collect(),
            subports: spec
                .subports
                .iter()
                .map(|s| Shaper::new(s.rate_bps, s.burst_bytes, now_ns))
                .collect(),
            pipe_max: per_pipe_class(|p| &p.max_bps),
            pipe_min: per_pipe_class(|p| &p.min_bps),
            classes: spec.classes.len(),
            // Validated: it builds (else no packet is of a pipe).
            table: (!spec.pipes.is_empty())
                .then(|| {
                    let dst: Vec<Vec<String>> = spec.pipes.iter().map(|p| p.dst.clone()).collect();
                    PipeTable::build(&dst).ok()
                })
                .flatten(),
        }
    }
}

/// Why a packet was dropped by the scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum DropReason {
    /// Its queue was full.
    Tail = 0,
    /// CoDel dropped it.
    Codel = 1,
    /// The scheduler was replaced or removed with it queued.
    Flush = 2,
    /// WRED dropped it on arrival.
    Wred = 3,
}

impl DropReason {
    /// Every reason, in index order.
    pub const ALL: [DropReason; 4] = [
        DropReason::Tail,
        DropReason::Codel,
        DropReason::Flush,
        DropReason::Wred,
    ];
    /// Its name in `show` and metrics.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Tail => "tail",
            DropReason::Codel => "codel",
            DropReason::Flush => "flush",
            DropReason::Wred => "wred",
        }
    }
}

/// The counters of one class queue of one worker, written by the worker alone (a load
/// and a store each, no locked instruction) and read by the control thread.
#[derive(Debug, Default)]
pub struct QueueStats {
    /// Packets queued.
    pub enqueued: AtomicU64,
    /// Bytes queued.
    pub enqueued_bytes: AtomicU64,
    /// Packets sent.
    pub sent: AtomicU64,
    /// Bytes sent.
    pub sent_bytes: AtomicU64,
    /// Drops by [`DropReason`] index.
    pub dropped: [AtomicU64; 4],
    /// Packets in the queue now.
    pub depth: AtomicU64,
    /// Bytes in the queue now.
    pub depth_bytes: AtomicU64,
    /// Sojourn time of the last packet sent, ns.
    pub sojourn_last_ns: AtomicU64,
    /// Longest sojourn time seen, ns.
    pub sojourn_max_ns: AtomicU64,
    /// Sum of the sojourn times of the packets sent, ns (the mean is this over `sent`).
    pub sojourn_sum_ns: AtomicU64,
}

#[inline]
fn bump(a: &AtomicU64, n: u64) {
    a.store(a.load(Relaxed).wrapping_add(n), Relaxed);
}

/// A plain copy of [`QueueStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueCounts {
    /// Packets queued.
    pub enqueued: u64,
    /// Bytes queued.
    pub enqueued_bytes: u64,
    /// Packets sent.
    pub sent: u64,
    /// Bytes sent.
    pub sent_bytes: u64,
    /// Drops by [`DropReason`] index.
    pub dropped: [u64; 4],
    /// Packets queued now.
    pub depth: u64,
    /// Bytes queued now.
    pub depth_bytes: u64,
    /// Sojourn time of the last packet sent, ns.
    pub sojourn_last_ns: u64,
    /// Longest sojourn time, ns.
    pub sojourn_max_ns: u64,
    /// Sum of sojourn times, ns.
    pub sojourn_sum_ns: u64,
}

impl QueueStats {
    /// Read them.
    pub fn read(&self) -> QueueCounts {
        QueueCounts {
            enqueued: self.enqueued.load(Relaxed),
            enqueued_bytes: self.enqueued_bytes.load(Relaxed),
            sent: self.sent.load(Relaxed),
            sent_bytes: self.sent_bytes.load(Relaxed),
            dropped: self.dropped.each_ref().map(|d| d.load(Relaxed)),
            depth: self.depth.load(Relaxed),
            depth_bytes: self.depth_bytes.load(Relaxed),
            sojourn_last_ns: self.sojourn_last_ns.load(Relaxed),
            sojourn_max_ns: self.sojourn_max_ns.load(Relaxed),
            sojourn_sum_ns: self.sojourn_sum_ns.load(Relaxed),
        }
    }
}

impl QueueCounts {
    /// Add another worker's counts (the longest sojourn is the larger).
    pub fn add(&mut self, o: &QueueCounts) {
        self.enqueued += o.enqueued;
        self.enqueued_bytes += o.enqueued_bytes;
        self.sent += o.sent;
        self.sent_bytes += o.sent_bytes;
        for (a, b) in self.dropped.iter_mut().zip(o.dropped) {
            *a += b;
        }
        self.depth += o.depth;
        self.depth_bytes += o.depth_bytes;
        self.sojourn_last_ns = self.sojourn_last_ns.max(o.sojourn_last_ns);
        self.sojourn_max_ns = self.sojourn_max_ns.max(o.sojourn_max_ns);
        self.sojourn_sum_ns += o.sojourn_sum_ns;
    }
}

/// What one burst of dequeues knows of the port's buckets, which every worker shares: their
/// tokens, read once when it starts and spent here packet by packet, and the bytes it sent
/// through each, charged to the bucket once when it ends. One locked instruction per
/// bucket per burst instead of one per packet (a vector's worth of packets at a time); the
/// price is that another worker's charges made during a burst are seen at the next one,
/// so the buckets may go further into debt, by at most what the bursts sent meanwhile,
/// and pay it back before anything more leaves. A bucket that does not exist reads as
/// `i64::MAX` tokens (a port shaper or class maximum: never holds back) or `i64::MIN`
/// (a class minimum: never below it).
struct Spend {
    port: i64,
    port_bytes: u64,
    max: [i64; MAX_CLASSES],
    max_bytes: [u64; MAX_CLASSES],
    min: [i64; MAX_CLASSES],
    min_bytes: [u64; MAX_CLASSES],
}

impl Spend {
    fn read(r: &Rates) -> Spend {
        let tokens = |b: Option<&Shaper>, none| b.map_or(none, Shaper::tokens);
        let mut sp = Spend {
            port: tokens(r.port.as_ref(), i64::MAX),
            port_bytes: 0,
            max: [i64::MAX; MAX_CLASSES],
            max_bytes: [0; MAX_CLASSES],
            min: [i64::MIN; MAX_CLASSES],
            min_bytes: [0; MAX_CLASSES],
        };
        for (t, b) in sp.max.iter_mut().zip(&r.max) {
            *t = tokens(b.as_ref(), i64::MAX);
        }
        for (t, b) in sp.min.iter_mut().zip(&r.min) {
            *t = tokens(b.as_ref(), i64::MIN);
        }
        sp
    }

    #[inline]
    fn max_ok(&self, c: usize) -> bool {
        self.max.get(c).is_none_or(|&t| t > 0)
    }

    #[inline]
    fn below_min(&self, c: usize) -> bool {
        self.min.get(c).is_some_and(|&t| t > 0)
    }

    /// `len` bytes of class `c` sent.
    #[inline]
    fn spend(&mut self, c: usize, len: u64) {
        let k = tokens_of(len);
        self.port = self.port.saturating_sub(k);
        self.port_bytes += len;
        if let (Some(t), Some(b)) = (self.max.get_mut(c), self.max_bytes.get_mut(c)) {
            *t = t.saturating_sub(k);
            *b += len;
        }
        if let (Some(t), Some(b)) = (self.min.get_mut(c), self.min_bytes.get_mut(c)) {
            *t = t.saturating_sub(k);
            *b += len;
        }
    }

    /// Charge what was sent to the buckets.
    fn settle(&self, r: &Rates) {
        if let Some(p) = &r.port {
            if self.port_bytes > 0 {
                p.charge(self.port_bytes);
            }
        }
        for (b, &n) in r.max.iter().zip(&self.max_bytes) {
            if let (Some(b), true) = (b, n > 0) {
                b.charge(n);
            }
        }
        for (b, &n) in r.min.iter().zip(&self.min_bytes) {
            if let (Some(b), true) = (b, n > 0) {
                b.charge_floored(n);
            }
        }
    }
}

struct Class<T> {
    fifo: Fifo<T>,
    codel: Option<Codel>,
    wred: Option<Wred>,
    quantum: i64,
    deficit: i64,
}

/// The queues of one pipe of one worker (lane 0: the packets of no pipe, which no pipe
/// shaper holds back), with the order among its classes and its place among the pipes.
struct Lane<T> {
    classes: Vec<Class<T>>,
    drr_cursor: usize,
    drr_fresh: bool,
    min_cursor: usize,
    /// Packets and bytes it holds.
    queued: usize,
    bytes: u64,
    /// The smallest of its class queues' limits (the pass-through's bound).
    min_limit: usize,
    /// Its place in the round of pipes and its view of its pipe's bucket.
    round: Round,
    /// Its member of the round among subports ([`Scheduler::groups`]).
    group: u16,
    /// Its classes' maximum and minimum rates within its pipe, if the pipe gives any
    /// ([`PipeSpec::max_bps`], [`PipeSpec::min_bps`]): boxed, so that the lanes of other
    /// pipes (and of ports without such rates) stay as small as they were.
    rates: Option<Box<ClassRates>>,
}

impl<T> Lane<T> {
    /// Whether class `c` is under its maximum rate within the lane's pipe, as this burst
    /// sees it (always, without such rates).
    #[inline(always)]
    fn max_ok(&self, c: usize) -> bool {
        self.rates.as_ref().is_none_or(|m| m.max_ok(c))
    }

    /// Whether class `c` is below its minimum rate within the lane's pipe, as this burst
    /// sees it (never, without such rates).
    #[inline(always)]
    fn below_min(&self, c: usize) -> bool {
        self.rates.as_ref().is_some_and(|m| m.below_min(c))
    }
}

/// A lane's view of its classes' rate buckets within its pipe, in one worker.
struct ClassRates {
    /// This burst's view of each maximum's bucket: its tokens then less what the burst
    /// sent (`i64::MAX`: no bucket), read when the burst opens the lane.
    max: [i64; MAX_CLASSES],
    /// The same of each minimum's (`i64::MIN`: no bucket, never below it).
    min: [i64; MAX_CLASSES],
    /// The bytes sent of each class, by the burst under way or by a pass-through (never
    /// both at once: a pass-through needs every queue empty, and starts and ends with
    /// these at 0).
    bytes: [u64; MAX_CLASSES],
}

impl ClassRates {
    fn new() -> Box<ClassRates> {
        Box::new(ClassRates {
            max: [i64::MAX; MAX_CLASSES],
            min: [i64::MIN; MAX_CLASSES],
            bytes: [0; MAX_CLASSES],
        })
    }

    #[inline(always)]
    fn max_ok(&self, c: usize) -> bool {
        // Within the array whatever `c` is.
        self.max[c % MAX_CLASSES] > 0
    }

    #[inline(always)]
    fn below_min(&self, c: usize) -> bool {
        self.min[c % MAX_CLASSES] > 0
    }

    /// `len` bytes of class `c` sent by the burst.
    #[inline(always)]
    fn spend(&mut self, c: usize, len: u64) {
        let c = c % MAX_CLASSES;
        self.max[c] = self.max[c].saturating_sub(tokens_of(len));
        self.min[c] = self.min[c].saturating_sub(tokens_of(len));
        self.bytes[c] += len;
    }

    /// Read its buckets (those of lane `l`) for a burst.
    fn open(&mut self, r: &Rates, l: usize, now_ns: u64) {
        let read = |b: Option<&Shaper>, none| {
            b.map_or(none, |b| {
                b.refill(now_ns);
                b.tokens()
            })
        };
        for c in 0..MAX_CLASSES {
            self.bytes[c] = 0;
            self.max[c] = read(r_pipe_class(&r.pipe_max, r, l, c), i64::MAX);
            self.min[c] = read(r_pipe_class(&r.pipe_min, r, l, c), i64::MIN);
        }
    }

    /// Whether its maximums' buckets (lane `l`'s) have the tokens for the bytes a
    /// pass-through tallied (a minimum never holds anything back).
    fn fit(&self, r: &Rates, l: usize, now_ns: u64) -> bool {
        self.bytes.iter().enumerate().all(|(c, &b)| {
            b == 0
                || r_pipe_class(&r.pipe_max, r, l, c).is_none_or(|m| {
                    m.refill(now_ns);
                    m.tokens() >= tokens_of(b)
                })
        })
    }

    /// Charge its buckets (lane `l`'s) at `now_ns` with the bytes sent through them, and
    /// start again (a minimum's, as the port's, no further below empty than its burst).
    fn settle(&mut self, r: &Rates, l: usize, now_ns: u64) {
        for (c, b) in self.bytes.iter_mut().enumerate() {
            if *b > 0 {
                if let Some(m) = r_pipe_class(&r.pipe_max, r, l, c) {
                    m.charge(*b);
                }
                if let Some(m) = r_pipe_class(&r.pipe_min, r, l, c) {
                    m.refill(now_ns);
                    m.charge_floored(*b);
                }
                *b = 0;
            }
        }
    }
}

/// A member of a deficit round robin with a bucket of its own (a pipe among pipes, a
/// subport among subports), in one worker.
#[derive(Clone, Copy, Debug, Default)]
struct Round {
    /// In the round of members with something queued.
    active: bool,
    /// Its deficit in the round, bytes: it is served while this is above 0, then goes to
    /// the back of the round with a quantum more.
    allot: i64,
    /// This burst of dequeues' view of its bucket (see [`Spend`]): the burst it was read
    /// in, its tokens then less what the burst sent, and the bytes sent.
    epoch: u64,
    tokens: i64,
    spent: u64,
    /// A pass-through's packets and bytes of this member.
    pt_count: usize,
    pt_bytes: u64,
}

impl Round {
    /// Its view of `bucket` (none: never holds back) for burst `epoch`, read the first time
    /// the burst comes to it; true then (the caller charges it at the burst's end).
    #[inline(always)]
    fn open(&mut self, epoch: u64, bucket: Option<&Shaper>, now_ns: u64) -> bool {
        if self.epoch == epoch {
            return false;
        }
        self.epoch = epoch;
        self.spent = 0;
        self.tokens = match bucket {
            Some(b) => {
                b.refill(now_ns);
                b.tokens()
            }
            None => i64::MAX,
        };
        true
    }

    /// `len` bytes it sent: out of its allotment and, if it has a bucket, its tokens.
    #[inline(always)]
    fn spend(&mut self, len: u64, bucketed: bool) {
        if bucketed {
            self.tokens = self.tokens.saturating_sub(tokens_of(len));
            self.spent += len;
        }
        self.allot -= len as i64;
    }

    /// After a visit to it at the front of `ring`: out of the round if it has nothing
    /// queued (`empty`); else, if it `sent` and its allotment is spent or if it has spent
    /// it already, a quantum more and to the back; else, if it could not send, to the back
    /// as blocked. Whether it was blocked.
    #[inline(always)]
    fn advance(&mut self, ring: &mut VecDeque<u16>, empty: bool, sent: bool, quantum: u64) -> bool {
        if empty {
            self.active = false;
            ring.pop_front();
            false
        } else if !sent {
            ring.rotate_left(1);
            true
        } else {
            if self.allot <= 0 {
                self.allot += quantum as i64;
                ring.rotate_left(1);
            }
            false
        }
    }
}

/// A member of the round among a port's subports, in one worker: a subport's lanes (or,
/// the last, those of no subport), with its place in that round and its view of its
/// subport's bucket (as [`Lane`]'s of its pipe's).
struct Group {
    /// Its lanes with something queued, in round-robin order (room for all of them).
    ring: VecDeque<u16>,
    /// Packets its lanes hold, and the most they may ([`SubportSpec::limit`]; no limit:
    /// `usize::MAX`).
    queued: usize,
    limit: usize,
    /// Its place in the round of subports and its view of its subport's bucket.
    round: Round,
}

/// What every lane of a worker's scheduler shares: the order among classes, the counters,
/// and the depths summed over the lanes.
struct Book {
    stats: Arc<[QueueStats]>,
    /// By pipe (lane 1 is pipe 0).
    pipe_stats: Arc<[QueueStats]>,
    /// Strict classes, highest precedence first.
    strict: Vec<u8>,
    /// Weighted classes, in round-robin order.
    weighted: Vec<u8>,
    /// Packets in all lanes.
    queued: usize,
    /// Each class's packets and bytes over all lanes.
    class_depth: [usize; MAX_CLASSES],
    class_bytes: [u64; MAX_CLASSES],
}

#[inline]
fn count_sent(s: &QueueStats, len: u64, sojourn: u64) {
    bump(&s.sent, 1);
    bump(&s.sent_bytes, len);
    s.sojourn_last_ns.store(sojourn, Relaxed);
    if sojourn > s.sojourn_max_ns.load(Relaxed) {
        s.sojourn_max_ns.store(sojourn, Relaxed);
    }
    bump(&s.sojourn_sum_ns, sojourn);
}

impl Book {
    /// Take the next packet of class `c` of lane `l` (through CoDel if it has it),
    /// counting it and spending its bytes in `sp`; CoDel's drops go to `drop`.
    #[inline(always)]
    fn pop<T>(
        &mut self,
        lane: &mut Lane<T>,
        l: usize,
        c: usize,
        now: u64,
        sp: &mut Spend,
        drop: &mut impl FnMut(T, DropReason),
    ) -> Option<Entry<T>> {
        let s = self.stats.get(c)?;
        let ps = l.checked_sub(1).and_then(|p| self.pipe_stats.get(p));
        let class = lane.classes.get_mut(c)?;
        let (before, before_bytes) = (class.fifo.len(), class.fifo.bytes());
        let e = match &mut class.codel {
            Some(codel) => codel.dequeue(now, &mut class.fifo, &mut |e: Entry<T>| {
                bump(&s.dropped[DropReason::Codel as usize], 1);
                if let Some(ps) = ps {
                    bump(&ps.dropped[DropReason::Codel as usize], 1);
                }
                drop(e.item, DropReason::Codel)
            }),
            None => class.fifo.pop(),
        };
        let gone = before - class.fifo.len();
        let gone_bytes = before_bytes - class.fifo.bytes();
        lane.queued -= gone;
        lane.bytes -= gone_bytes;
        self.queued -= gone;
        if let (Some(d), Some(b)) = (self.class_depth.get_mut(c), self.class_bytes.get_mut(c)) {
            *d -= gone;
            *b -= gone_bytes;
            s.depth.store(*d as u64, Relaxed);
            s.depth_bytes.store(*b, Relaxed);
        }
        if class.fifo.is_empty() {
            if let Some(w) = &mut class.wred {
                w.idle(now);
            }
        }
        if let Some(ps) = ps {
            ps.depth.store(lane.queued as u64, Relaxed);
            ps.depth_bytes.store(lane.bytes, Relaxed);
        }
        let e = e?;
        let len = u64::from(e.len);
        let sojourn = now.saturating_sub(e.enq_ns);
        count_sent(s, len, sojourn);
        if let Some(ps) = ps {
            count_sent(ps, len, sojourn);
        }
        sp.spend(c, len);
        if let Some(m) = &mut lane.rates {
            m.spend(c, len);
        }
        Some(e)
    }

    /// The next packet of lane `l` (its classes' order, on `sp`'s tokens), its class and
    /// length.
    #[inline(always)]
    fn next_in<T>(
        &mut self,
        lane: &mut Lane<T>,
        l: usize,
        now_ns: u64,
        sp: &mut Spend,
        drop: &mut impl FnMut(T, DropReason),
    ) -> Option<(T, u8, u32)> {
        if lane.queued == 0 {
            return None;
        }
        // 1. Strict priority.
        for k in 0..self.strict.len() {
            let c = self.strict[k] as usize;
            while !lane.classes[c].fifo.is_empty() && sp.max_ok(c) && lane.max_ok(c) {
                if let Some(e) = self.pop(lane, l, c, now_ns, sp, drop) {
                    return Some((e.item, c as u8, e.len));
                }
            }
        }
        let n = self.weighted.len();
        if n == 0 {
            return None;
        }
        // 2. Weighted classes below their minimum rate.
        for k in 0..n {
            let c = self.weighted[(lane.min_cursor + k) % n] as usize;
            while !lane.classes[c].fifo.is_empty()
                && (sp.below_min(c) || lane.below_min(c))
                && sp.max_ok(c)
                && lane.max_ok(c)
            {
                if let Some(e) = self.pop(lane, l, c, now_ns, sp, drop) {
                    lane.min_cursor = (lane.min_cursor + k + 1) % n;
                    return Some((e.item, c as u8, e.len));
                }
            }
        }
        // 3. DRR. A visit adds a quantum (at least 1,536 bytes), so a class with a packet
        // of at most MAX_PACKET bytes sends within MAX_PACKET / 1,536 + 1 visits: the
        // bound finds any class that may send.
        let visits = n * (MAX_PACKET / QUANTUM_BYTES + 2) as usize;
        for _ in 0..visits {
            lane.drr_cursor %= n;
            let c = self.weighted[lane.drr_cursor] as usize;
            let head = lane.classes[c].fifo.head_len();
            let Some(head) = head.filter(|_| sp.max_ok(c) && lane.max_ok(c)) else {
                if lane.classes[c].fifo.is_empty() {
                    lane.classes[c].deficit = 0;
                }
                lane.drr_cursor += 1;
                lane.drr_fresh = true;
                continue;
            };
            if lane.drr_fresh {
                lane.classes[c].deficit += lane.classes[c].quantum;
                lane.drr_fresh = false;
            }
            if lane.classes[c].deficit >= i64::from(head) {
                if let Some(e) = self.pop(lane, l, c, now_ns, sp, drop) {
                    lane.classes[c].deficit -= i64::from(e.len);
                    return Some((e.item, c as u8, e.len));
                }
                // CoDel emptied it: on to the next class.
                continue;
            }
            lane.drr_cursor += 1;
            lane.drr_fresh = true;
        }
        None
    }
}

/// One worker's scheduler of one port: its queues, over the port's shared [`Rates`].
pub struct Scheduler<T> {
    /// Lane 0: the packets of no pipe; lane `k + 1`: pipe `k`'s.
    lanes: Vec<Lane<T>>,
    book: Book,
    rates: Arc<Rates>,
    /// The members of the round among subports: subport `k` is member `k`, the lanes of
    /// no subport the last (the only one of a port without subports).
    groups: Vec<Group>,
    /// The members with something queued, in round-robin order (room for all of them,
    /// allocated with the scheduler; kept for ports with subports only).
    gring: VecDeque<u16>,
    /// The pipes a burst of dequeues (or a pass-through) read (room for all).
    touched: Vec<u16>,
    /// The subports a burst of dequeues (or a pass-through) read (room for all).
    touched_groups: Vec<u16>,
    /// The burst of dequeues under way.
    epoch: u64,
    /// The most packets all lanes hold together.
    cap: usize,
    by_dscp: [u8; 64],
    default_class: u8,
}

impl<T> Scheduler<T> {
    /// A scheduler of `spec` (validated) over `rates` (built from the same spec),
    /// with its queues allocated now.
    pub fn new(spec: &SchedSpec, rates: Arc<Rates>) -> Scheduler<T> {
        // A lane's classes' quanta: proportional to its weights (a pipe's own, else the
        // classes'), the smallest weight of its weighted classes getting QUANTUM_BYTES.
        let lane = |limit: Option<usize>, weights: &[u32]| {
            let weight = |k: usize, c: &ClassSpec| {
                u64::from(weights.get(k).copied().unwrap_or(c.weight).max(1))
            };
            let min_w = spec
                .classes
                .iter()
                .enumerate()
                .filter(|(_, c)| c.priority.is_none())
                .map(|(k, c)| weight(k, c))
                .min()
                .unwrap_or(1);
            let classes: Vec<Class<T>> = spec
                .classes
                .iter()
                .enumerate()
                .map(|(k, c)| Class {
                    fifo: Fifo::new(limit.map_or(c.limit, |l| l.min(c.limit))),
                    codel: c.codel.map(Codel::new),
                    wred: c.wred.map(Wred::seeded),
                    quantum: (weight(k, c) * QUANTUM_BYTES / min_w).min(i64::MAX as u64 / 4) as i64,
                    deficit: 0,
                })
                .collect();
            Lane {
                min_limit: classes.iter().map(|c| c.fifo.limit()).min().unwrap_or(0),
                classes,
                drr_cursor: 0,
                drr_fresh: true,
                min_cursor: 0,
                queued: 0,
                bytes: 0,
                round: Round::default(),
                group: 0,
                rates: None,
            }
        };
        let mut lanes: Vec<Lane<T>> = std::iter::once(lane(None, &[]))
            .chain(spec.pipes.iter().map(|p| {
                Lane {
                    rates: p
                        .max_bps
                        .iter()
                        .chain(&p.min_bps)
                        .any(|&m| m > 0)
                        .then(ClassRates::new),
                    ..lane(Some(p.limit), &p.weights)
                }
            }))
            .collect();
        // The lanes of no subport (lane 0 among them) are the last member. Subports
        // without pipes have no lanes: then no round among members.
        let none = if spec.pipes.is_empty() {
            0
        } else {
            spec.subports.len()
        };
        let mut members = vec![0usize; none + 1];
        for (l, lane) in lanes.iter_mut().enumerate() {
            let g = l
                .checked_sub(1)
                .and_then(|p| spec.pipes.get(p))
                .and_then(|p| p.subport)
                .map_or(none, usize::from)
                .min(none);
            lane.group = g as u16;
            members[g] += 1;
        }
        let groups = members
            .iter()
            .enumerate()
            .map(|(g, &n)| Group {
                ring: VecDeque::with_capacity(n),
                queued: 0,
                limit: spec
                    .subports
                    .get(g)
                    .filter(|_| g < none)
                    .and_then(|s| s.limit)
                    .unwrap_or(usize::MAX),
                round: Round::default(),
            })
            .collect::<Vec<_>>();
        let mut strict: Vec<(u8, u8)> = spec
            .classes
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.priority.map(|p| (p, i as u8)))
            .collect();
        strict.sort();
        let weighted = spec
            .classes
            .iter()
            .enumerate()
            .filter(|(_, c)| c.priority.is_none())
            .map(|(i, _)| i as u8)
            .collect();
        Scheduler {
            gring: VecDeque::with_capacity(groups.len()),
            touched: Vec::with_capacity(lanes.len()),
            touched_groups: Vec::with_capacity(groups.len()),
            groups,
            lanes,
            book: Book {
                stats: spec.classes.iter().map(|_| QueueStats::default()).collect(),
                pipe_stats: spec.pipes.iter().map(|_| QueueStats::default()).collect(),
                strict: strict.into_iter().map(|(_, i)| i).collect(),
                weighted,
                queued: 0,
                class_depth: [0; MAX_CLASSES],
                class_bytes: [0; MAX_CLASSES],
            },
            rates,
            epoch: 0,
            cap: if spec.pipes.is_empty() {
                usize::MAX
            } else {
                MAX_PORT_QUEUED
            },
            by_dscp: spec.by_dscp,
            default_class: spec.default_class,
        }
    }

    /// The class of a packet of DSCP `dscp` (`None`: not IP, the default class).
    #[inline]
    pub fn class_of(&self, dscp: Option<u8>) -> u8 {
        dscp.and_then(|d| self.by_dscp.get(d as usize).copied())
            .unwrap_or(self.default_class)
    }

    /// The class of a packet for which the port's own output policy chose class `chosen`
    /// on input (`None`: none did), if this scheduler has that class; else the class of
    /// its DSCP (`dscp` is read only then).
    #[inline]
    pub fn class_of_chosen(&self, chosen: Option<u8>, dscp: impl FnOnce() -> Option<u8>) -> u8 {
        match chosen {
            Some(c) if usize::from(c) < self.book.stats.len() => c,
            _ => self.class_of(dscp()),
        }
    }

    /// Whether the port has pipes.
    #[inline]
    pub fn has_pipes(&self) -> bool {
        self.lanes.len() > 1
    }

    /// The lane of the IP packet whose header is at `at` in `frame` (`v6`: IPv6): its
    /// pipe's number plus 1, 0 for a packet of no pipe.
    #[inline]
    pub fn lane_of_frame(&self, frame: &[u8], at: usize, v6: bool) -> u16 {
        self.rates
            .table
            .as_ref()
            .map_or(0, |t| t.lane_of_frame(frame, at, v6))
    }

    /// Its counters, by class, for the control thread.
    pub fn stats(&self) -> Arc<[QueueStats]> {
        self.book.stats.clone()
    }

    /// Its counters, by pipe, for the control thread.
    pub fn pipe_stats(&self) -> Arc<[QueueStats]> {
        self.book.pipe_stats.clone()
    }

    /// Packets queued in all classes.
    #[inline]
    pub fn queued(&self) -> usize {
        self.book.queued
    }

    /// Let a whole list of packets through without queueing them, when nothing is queued
    /// and every bucket has the tokens for all of it (Linux's qdisc bypass, with the rates
    /// still kept): they leave in the order they came, which is the order a scheduler with
    /// empty queues and room on the link gives them too. `class_len(self, k)` is the class
    /// and length of the list's packet `k` (`len` packets), all of no pipe.
    pub fn pass_through(
        &mut self,
        len: usize,
        now_ns: u64,
        mut class_len: impl FnMut(&Self, usize) -> (u8, u32),
    ) -> bool {
        self.pass_through_lanes(len, now_ns, |s, k| {
            let (c, l) = class_len(s, k);
            (0, c, l)
        })
    }

    /// [`Scheduler::pass_through`] with each packet's lane: `lane_class_len(self, k)` is
    /// the lane ([`Scheduler::lane_of_frame`]), class and length of packet `k`. Each class
    /// and pipe counts its packets as queued and sent with a sojourn of 0, and the buckets
    /// (pipes' too) are charged as if they had been dequeued. Returns false, with nothing
    /// done, when any of it would have to wait: a packet queued already, a bucket without
    /// the tokens for its share (the port shaper for all of it, a class maximum for its
    /// class's, a pipe's for its pipe's, a subport's for its pipes'), more packets of a
    /// class than its queue's limit (of a pipe than its smallest queue's), a class or lane
    /// that does not exist; the caller then queues them as usual.
    pub fn pass_through_lanes(
        &mut self,
        len: usize,
        now_ns: u64,
        mut lane_class_len: impl FnMut(&Self, usize) -> (u16, u8, u32),
    ) -> bool {
        if self.book.queued != 0 || len > self.cap {
            return false;
        }
        if len == 0 {
            return true;
        }
        let mut bytes = [0u64; MAX_CLASSES];
        let mut count = [0usize; MAX_CLASSES];
        self.touched.clear();
        let mut ok = true;
        for k in 0..len {
            let (l, c, n) = lane_class_len(self, k);
            let c = usize::from(c);
            if c >= self.book.stats.len() {
                ok = false;
                break;
            }
            // Lane 0 (every packet of a port without pipes) keeps no tally of its own.
            if l > 0 {
                let Some(lane) = self.lanes.get_mut(usize::from(l)) else {
                    ok = false;
                    break;
                };
                if lane.round.pt_count == 0 {
                    self.touched.push(l);
                }
                lane.round.pt_count += 1;
                lane.round.pt_bytes += u64::from(n);
                if let Some(m) = &mut lane.rates {
                    m.bytes[c % MAX_CLASSES] += u64::from(n);
                }
            }
            bytes[c] += u64::from(n);
            count[c] += 1;
        }
        // With subports, their shares of it (a port without has no subport to look at).
        self.touched_groups.clear();
        if ok && self.groups.len() > 1 {
            for &l in &self.touched {
                let Some(lane) = self.lanes.get(usize::from(l)) else {
                    continue;
                };
                let g = lane.group;
                if self.rates.subports.get(usize::from(g)).is_none() {
                    continue;
                }
                if let Some(grp) = self.groups.get_mut(usize::from(g)) {
                    if grp.round.pt_count == 0 {
                        self.touched_groups.push(g);
                    }
                    grp.round.pt_count += lane.round.pt_count;
                    grp.round.pt_bytes += lane.round.pt_bytes;
                }
            }
        }
        let ok = ok && self.pass_through_fits(now_ns, &bytes, &count);
        if ok {
            let r = &self.rates;
            if let Some(p) = &r.port {
                p.charge(bytes.iter().sum());
            }
            for (c, s) in self.book.stats.iter().enumerate().take(MAX_CLASSES) {
                if count[c] == 0 {
                    continue;
                }
                if let Some(Some(m)) = r.max.get(c) {
                    m.charge(bytes[c]);
                }
                if let Some(Some(m)) = r.min.get(c) {
                    m.refill(now_ns);
                    m.charge_floored(bytes[c]);
                }
                bump(&s.enqueued, count[c] as u64);
                bump(&s.enqueued_bytes, bytes[c]);
                bump(&s.sent, count[c] as u64);
                bump(&s.sent_bytes, bytes[c]);
                s.sojourn_last_ns.store(0, Relaxed);
            }
        }
        for &l in &self.touched {
            let l = usize::from(l);
            let Some(lane) = self.lanes.get_mut(l) else {
                continue;
            };
            if ok {
                if let Some(p) = r_pipe(&self.rates, l) {
                    p.charge(lane.round.pt_bytes);
                }
                if let Some(m) = &mut lane.rates {
                    m.settle(&self.rates, l, now_ns);
                }
                if let Some(s) = self.book.pipe_stats.get(l - 1) {
                    bump(&s.enqueued, lane.round.pt_count as u64);
                    bump(&s.enqueued_bytes, lane.round.pt_bytes);
                    bump(&s.sent, lane.round.pt_count as u64);
                    bump(&s.sent_bytes, lane.round.pt_bytes);
                    s.sojourn_last_ns.store(0, Relaxed);
                }
            }
            lane.round.pt_count = 0;
            lane.round.pt_bytes = 0;
            if let Some(m) = &mut lane.rates {
                m.bytes = [0; MAX_CLASSES];
            }
        }
        self.touched.clear();
        for &g in &self.touched_groups {
            let g = usize::from(g);
            let Some(grp) = self.groups.get_mut(g) else {
                continue;
            };
            if ok {
                if let Some(b) = self.rates.subports.get(g) {
                    b.charge(grp.round.pt_bytes);
                }
            }
            grp.round.pt_count = 0;
            grp.round.pt_bytes = 0;
        }
        self.touched_groups.clear();
        ok
    }

    /// Whether a pass-through's packets fit: `bytes` and `count` by class, the lanes'
    /// in their `pt_` fields (the pipes among `touched`).
    fn pass_through_fits(
        &self,
        now_ns: u64,
        bytes: &[u64; MAX_CLASSES],
        count: &[usize; MAX_CLASSES],
    ) -> bool {
        let total: u64 = bytes.iter().sum();
        let r = &self.rates;
        if let Some(p) = &r.port {
            p.refill(now_ns);
            if p.tokens() < tokens_of(total) {
                return false;
            }
        }
        for (c, class) in self.lanes[0].classes.iter().enumerate() {
            if count[c] > class.fifo.limit() {
                return false;
            }
            if let Some(Some(m)) = r.max.get(c) {
                m.refill(now_ns);
                if count[c] > 0 && m.tokens() < tokens_of(bytes[c]) {
                    return false;
                }
            }
        }
        for &l in &self.touched {
            let l = usize::from(l);
            let (Some(lane), Some(p)) = (self.lanes.get(l), r_pipe(r, l)) else {
                return false;
            };
            if lane.round.pt_count > lane.min_limit {
                return false;
            }
            p.refill(now_ns);
            if p.tokens() < tokens_of(lane.round.pt_bytes) {
                return false;
            }
            if lane.rates.as_ref().is_some_and(|m| !m.fit(r, l, now_ns)) {
                return false;
            }
        }
        for &g in &self.touched_groups {
            let g = usize::from(g);
            let (Some(grp), Some(b)) = (self.groups.get(g), r.subports.get(g)) else {
                return false;
            };
            if grp.round.pt_count > grp.limit {
                return false;
            }
            b.refill(now_ns);
            if b.tokens() < tokens_of(grp.round.pt_bytes) {
                return false;
            }
        }
        true
    }

    /// Queue a packet of `len` bytes in class `class` at `now_ns`; a full queue (or a
    /// class that does not exist) hands it back, counted as a tail drop. With WRED, as a
    /// packet of the lowest drop precedence (green).
    #[inline]
    pub fn enqueue(&mut self, item: T, len: u32, class: u8, now_ns: u64) -> Result<(), T> {
        self.enqueue_in(item, len, 0, class, 0, now_ns)
    }

    /// Whether class `class` has WRED (whose decision needs the packet's drop
    /// precedence: [`Scheduler::enqueue_coloured`]).
    #[inline]
    pub fn has_wred(&self, class: u8) -> bool {
        self.lanes[0]
            .classes
            .get(class as usize)
            .is_some_and(|c| c.wred.is_some())
    }

    /// [`Scheduler::enqueue`] for a packet of drop precedence `precedence` (0 green, 1
    /// yellow, 2 red): a class with WRED may drop it first (handed back, counted as a
    /// `wred` drop).
    #[inline]
    pub fn enqueue_coloured(
        &mut self,
        item: T,
        len: u32,
        class: u8,
        precedence: u8,
        now_ns: u64,
    ) -> Result<(), T> {
        self.enqueue_in(item, len, 0, class, precedence, now_ns)
    }

    /// [`Scheduler::enqueue_coloured`] in lane `lane` ([`Scheduler::lane_of_frame`]; one
    /// that does not exist is lane 0). With pipes, the port's lanes hold at most
    /// [`MAX_PORT_QUEUED`] packets together: beyond, a tail drop.
    #[inline]
    pub fn enqueue_in(
        &mut self,
        item: T,
        len: u32,
        lane: u16,
        class: u8,
        precedence: u8,
        now_ns: u64,
    ) -> Result<(), T> {
        let mut l = usize::from(lane);
        if l >= self.lanes.len() {
            l = 0;
        }
        let ps = l.checked_sub(1).and_then(|p| self.book.pipe_stats.get(p));
        let (Some(ln), Some(s)) = (self.lanes.get_mut(l), self.book.stats.get(class as usize))
        else {
            return Err(item);
        };
        let Some(c) = ln.classes.get_mut(class as usize) else {
            return Err(item);
        };
        let drop = |why: DropReason| {
            bump(&s.dropped[why as usize], 1);
            if let Some(ps) = ps {
                bump(&ps.dropped[why as usize], 1);
            }
        };
        if self.book.queued >= self.cap {
            drop(DropReason::Tail);
            return Err(item);
        }
        let Some(grp) = self.groups.get_mut(usize::from(ln.group)) else {
            return Err(item);
        };
        if grp.queued >= grp.limit {
            drop(DropReason::Tail);
            return Err(item);
        }
        if let Some(w) = &mut c.wred {
            if w.arrival(now_ns, c.fifo.len(), precedence) {
                drop(DropReason::Wred);
                return Err(item);
            }
        }
        match c.fifo.push(Entry {
            item,
            len,
            enq_ns: now_ns,
        }) {
            Ok(()) => {
                let k = class as usize;
                self.book.queued += 1;
                ln.queued += 1;
                ln.bytes += u64::from(len);
                bump(&s.enqueued, 1);
                bump(&s.enqueued_bytes, u64::from(len));
                if let (Some(d), Some(b)) = (
                    self.book.class_depth.get_mut(k),
                    self.book.class_bytes.get_mut(k),
                ) {
                    *d += 1;
                    *b += u64::from(len);
                    s.depth.store(*d as u64, Relaxed);
                    s.depth_bytes.store(*b, Relaxed);
                }
                if let Some(ps) = ps {
                    bump(&ps.enqueued, 1);
                    bump(&ps.enqueued_bytes, u64::from(len));
                    ps.depth.store(ln.queued as u64, Relaxed);
                    ps.depth_bytes.store(ln.bytes, Relaxed);
                }
                grp.queued += 1;
                if !ln.round.active {
                    ln.round.active = true;
                    ln.round.allot = PIPE_QUANTUM_BYTES as i64;
                    // Room for every lane of the member: never grows.
                    grp.ring.push_back(l as u16);
                    if !grp.round.active {
                        grp.round.active = true;
                        grp.round.allot = SUBPORT_QUANTUM_BYTES as i64;
                        // Room for every member: never grows. Without subports, no round
                        // among members.
                        if self.groups.len() > 1 {
                            self.gring.push_back(ln.group);
                        }
                    }
                }
                Ok(())
            }
            Err(e) => {
                drop(DropReason::Tail);
                Err(e.item)
            }
        }
    }

    /// Whether class `c` is under its maximum rate now (the shared bucket's tokens).
    #[cfg(test)]
    fn max_ok(&self, c: usize) -> bool {
        self.rates
            .max
            .get(c)
            .and_then(Option::as_ref)
            .is_none_or(Shaper::conforms)
    }

    /// The next packet to send at `now_ns` and its class, or `None` when nothing may leave
    /// now (all empty, the shaper in debt, every class with packets at its maximum).
    /// Packets CoDel drops on the way go to `drop`.
    pub fn dequeue(
        &mut self,
        now_ns: u64,
        drop: &mut impl FnMut(T, DropReason),
    ) -> Option<(T, u8)> {
        let mut got = None;
        self.dequeue_burst(now_ns, 1, &mut |t, c| got = Some((t, c)), drop);
        got
    }

    /// Up to `max` packets that may leave at `now_ns`, in the order [`Scheduler::dequeue`]
    /// would give them one at a time, each handed to `out` with its class; returns how
    /// many. The buckets are refilled once and read once, and what the burst sent is
    /// charged to each once at its end (see [`Spend`]); a pipe's bucket is read the first
    /// time the burst comes to the pipe. Packets CoDel drops on the way go to `drop`.
    pub fn dequeue_burst(
        &mut self,
        now_ns: u64,
        max: usize,
        out: &mut impl FnMut(T, u8),
        drop: &mut impl FnMut(T, DropReason),
    ) -> usize {
        if self.book.queued == 0 || max == 0 {
            return 0;
        }
        let r = &self.rates;
        for s in r.port.iter().chain(r.min.iter().flatten()) {
            s.refill(now_ns);
        }
        for s in r.max.iter().flatten() {
            s.refill(now_ns);
        }
        let mut sp = Spend::read(r);
        self.epoch += 1;
        self.touched.clear();
        self.touched_groups.clear();
        let mut n = 0;
        while n < max {
            let Some((item, c)) = self.next(now_ns, &mut sp, drop) else {
                break;
            };
            out(item, c);
            n += 1;
        }
        sp.settle(&self.rates);
        for &l in &self.touched {
            let l = usize::from(l);
            if let (Some(lane), Some(p)) = (self.lanes.get_mut(l), r_pipe(&self.rates, l)) {
                if lane.round.spent > 0 {
                    p.charge(lane.round.spent);
                }
                if let Some(m) = &mut lane.rates {
                    m.settle(&self.rates, l, now_ns);
                }
            }
        }
        self.touched.clear();
        for &g in &self.touched_groups {
            let g = usize::from(g);
            if let (Some(grp), Some(b)) = (self.groups.get(g), self.rates.subports.get(g)) {
                if grp.round.spent > 0 {
                    b.charge(grp.round.spent);
                }
            }
        }
        self.touched_groups.clear();
        n
    }

    /// One packet of a burst: with subports, the members of the round among them in turn
    /// (deficit round robin by bytes, a quantum of [`SUBPORT_QUANTUM_BYTES`] each), a
    /// subport in debt or none of whose lanes may send passed over; in the member (the only
    /// one without subports), [`Scheduler::next_lane`].
    #[inline(always)]
    fn next(
        &mut self,
        now_ns: u64,
        sp: &mut Spend,
        drop: &mut impl FnMut(T, DropReason),
    ) -> Option<(T, u8)> {
        if self.book.queued == 0 || sp.port <= 0 {
            return None;
        }
        if self.groups.len() <= 1 {
            return self.next_lane(0, now_ns, sp, drop).map(|(t, c, _)| (t, c));
        }
        // As among the lanes: a member needs at most MAX_PACKET / quantum + 1 quanta.
        let mut visits = self.gring.len() * (MAX_PACKET / SUBPORT_QUANTUM_BYTES + 2) as usize;
        let mut blocked = 0;
        while visits > 0 && blocked < self.gring.len() {
            visits -= 1;
            let &g16 = self.gring.front()?;
            let g = usize::from(g16);
            let Some(grp) = self.groups.get_mut(g) else {
                self.gring.pop_front();
                continue;
            };
            let r = &mut grp.round;
            if grp.ring.is_empty() {
                r.advance(&mut self.gring, true, false, SUBPORT_QUANTUM_BYTES);
                continue;
            }
            if r.allot <= 0 {
                // A quantum more and to the back: every member is to be tried again after
                // it, so the count starts over.
                r.advance(&mut self.gring, false, true, SUBPORT_QUANTUM_BYTES);
                blocked = 0;
                continue;
            }
            let bucket = self.rates.subports.get(g);
            let bucketed = bucket.is_some();
            if bucketed {
                if r.open(self.epoch, bucket, now_ns) {
                    // Once per subport per burst: within its room.
                    self.touched_groups.push(g16);
                }
                if r.tokens <= 0 {
                    blocked += 1;
                    self.gring.rotate_left(1);
                    continue;
                }
            }
            let got = self.next_lane(g, now_ns, sp, drop);
            let Some(grp) = self.groups.get_mut(g) else {
                return got.map(|(t, c, _)| (t, c));
            };
            if let Some((_, _, len)) = &got {
                grp.round.spend(u64::from(*len), bucketed);
            }
            let empty = grp.ring.is_empty();
            if grp
                .round
                .advance(&mut self.gring, empty, got.is_some(), SUBPORT_QUANTUM_BYTES)
            {
                blocked += 1;
            }
            if let Some((item, c, _)) = got {
                return Some((item, c));
            }
        }
        None
    }

    /// One packet of member `g` of the round among subports: its lanes in turn (deficit
    /// round robin by bytes, a quantum of [`PIPE_QUANTUM_BYTES`] each), a lane whose pipe
    /// is in debt or whose classes may not send passed over; in the lane, its classes'
    /// order. Its class and length.
    #[inline(always)]
    fn next_lane(
        &mut self,
        g: usize,
        now_ns: u64,
        sp: &mut Spend,
        drop: &mut impl FnMut(T, DropReason),
    ) -> Option<(T, u8, u32)> {
        let Group {
            ring,
            queued: group_queued,
            ..
        } = self.groups.get_mut(g)?;
        // A lane needs at most MAX_PACKET / quantum + 1 quanta to send its largest packet;
        // every visit either sends, passes a lane that cannot send, or adds a quantum.
        let mut visits = ring.len() * (MAX_PACKET / PIPE_QUANTUM_BYTES + 2) as usize;
        let mut blocked = 0;
        while visits > 0 && blocked < ring.len() {
            visits -= 1;
            let &l16 = ring.front()?;
            let l = usize::from(l16);
            let Some(lane) = self.lanes.get_mut(l) else {
                ring.pop_front();
                continue;
            };
            if lane.queued == 0 {
                lane.round.advance(ring, true, false, PIPE_QUANTUM_BYTES);
                continue;
            }
            if lane.round.allot <= 0 {
                // A quantum more and to the back: every lane is to be tried again after it,
                // so the count starts over.
                lane.round.advance(ring, false, true, PIPE_QUANTUM_BYTES);
                blocked = 0;
                continue;
            }
            // Lane 0 has no pipe, and no bucket to look at.
            if l > 0 {
                if lane.round.open(self.epoch, r_pipe(&self.rates, l), now_ns) {
                    // Once per lane per burst: within its room.
                    self.touched.push(l16);
                    if let Some(m) = &mut lane.rates {
                        m.open(&self.rates, l, now_ns);
                    }
                }
                if lane.round.tokens <= 0 {
                    blocked += 1;
                    ring.rotate_left(1);
                    continue;
                }
            }
            let before = lane.queued;
            let got = self.book.next_in(lane, l, now_ns, sp, drop);
            // Sent, or dropped by CoDel on the way.
            *group_queued = group_queued.saturating_sub(before - lane.queued);
            if let Some((_, _, len)) = &got {
                lane.round.spend(u64::from(*len), l > 0);
            }
            if lane
                .round
                .advance(ring, lane.queued == 0, got.is_some(), PIPE_QUANTUM_BYTES)
            {
                blocked += 1;
            }
            if got.is_some() {
                return got;
            }
        }
        None
    }

    /// Hand every queued packet to `drop` (the scheduler is being replaced or removed).
    pub fn flush(&mut self, drop: &mut impl FnMut(T, DropReason)) {
        for (l, lane) in self.lanes.iter_mut().enumerate() {
            let ps = l.checked_sub(1).and_then(|p| self.book.pipe_stats.get(p));
            for (c, s) in lane.classes.iter_mut().zip(self.book.stats.iter()) {
                while let Some(e) = c.fifo.pop() {
                    bump(&s.dropped[DropReason::Flush as usize], 1);
                    if let Some(ps) = ps {
                        bump(&ps.dropped[DropReason::Flush as usize], 1);
                    }
                    drop(e.item, DropReason::Flush);
                }
                s.depth.store(0, Relaxed);
                s.depth_bytes.store(0, Relaxed);
            }
            if let Some(ps) = ps {
                ps.depth.store(0, Relaxed);
                ps.depth_bytes.store(0, Relaxed);
            }
            lane.queued = 0;
            lane.bytes = 0;
            lane.round.active = false;
        }
        for grp in &mut self.groups {
            grp.ring.clear();
            grp.queued = 0;
            grp.round.active = false;
        }
        self.gring.clear();
        self.book.queued = 0;
        self.book.class_depth = [0; MAX_CLASSES];
        self.book.class_bytes = [0; MAX_CLASSES];
    }
}

/// What `bytes` bytes cost in a bucket's signed tokens (saturating).
#[inline(always)]
fn tokens_of(bytes: u64) -> i64 {
    cost(bytes).min(i64::MAX as u64) as i64
}

/// The bucket of lane `l`'s pipe (lane 0 has none).
#[inline]
fn r_pipe(r: &Rates, l: usize) -> Option<&Shaper> {
    r.pipes.get(l.checked_sub(1)?)
}

/// The bucket of class `c`'s rate within lane `l`'s pipe in `v` (the port's
/// [`Rates::pipe_max`] or [`Rates::pipe_min`]), if it has one.
#[inline]
fn r_pipe_class<'a>(v: &'a [Option<Shaper>], r: &Rates, l: usize, c: usize) -> Option<&'a Shaper> {
    if c >= r.classes {
        return None;
    }
    v.get((l.checked_sub(1)? * r.classes).checked_add(c)?)?
        .as_ref()
}

#[cfg(test)]
mod tests;
