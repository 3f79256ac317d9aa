//! `[qos]` as the config file writes it: named policers and policies (classes with their
//! DSCPs, marking, policer and scheduling), attached to interfaces for input
//! (classification, marking, policing) and output (the port's scheduler).
//!
//! ```toml
//! [[qos.policer]]
//! name = "af4-in"
//! kind = "trtcm"            # srtcm | trtcm | rfc4115
//! cir = "4mbit"             # bit/s: a number, or with kbit / mbit / gbit
//! cbs = 15000               # bytes
//! pir = "8mbit"             # trtcm: peak rate; rfc4115: excess rate (eir)
//! ebs = 30000               # srtcm, rfc4115: excess burst; trtcm: peak burst
//! colour_aware = false
//! yellow = "af42"           # per colour: "transmit", "drop", or a DSCP to re-mark
//! red = "drop"
//!
//! [[qos.policy]]
//! name = "edge"
//! default_class = "be"      # untrusted traffic and DSCPs no class names
//! shaper = "10mbit"         # output: the port's rate (left out: no shaper)
//!
//! [[qos.policy.class]]
//! name = "ef"
//! dscp = ["ef"]
//! priority = 0              # strict priority (lower first); else `weight`
//! max_rate = "30%"          # of the shaper, or a rate
//!
//! [[qos.policy.class]]
//! name = "af4"
//! dscp = ["af41", "af42", "af43"]
//! policer = "af4-in"
//! weight = 40
//!
//! [[qos.policy.class]]
//! name = "be"
//! weight = 60
//! codel = true
//!
//! [[qos.policy.class]]
//! name = "af1"
//! dscp = ["af11", "af12", "af13"]
//! weight = 20
//! # WRED: thresholds in packets of average depth; yellow (AFx2) and red (AFx3) profiles
//! # default to the green one.
//! wred = { min = 32, max = 96, probability = 0.1, weight = 9, red = { min = 16, max = 64, probability = 0.5 } }
//!
//! [[qos.interface]]
//! name = "eth0"
//! trusted = true
//! input = "edge"
//! output = "edge"
//! ```
//!
//! [`QosConfig::validate`] finds everything wrong, each problem with the dotted path of the
//! value (`qos.policy[0].class[2].max_rate`), so the config checker can give its line.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::bucket::{MAX_BURST_BYTES, MAX_RATE_BPS};
use crate::classify::{dscp_by_name, InputClass, InputPolicy, NO_CLASS};
use crate::codel::CodelParams;
use crate::policer::{Action, Kind, Policer, PolicerSpec};
use crate::rules::{RuleConfig, RuleTable};
use crate::sched::{
    ClassSpec, PipeSpec, SchedSpec, SubportSpec, MAX_CLASSES, MAX_PACKET, MAX_PIPES,
    MAX_PIPE_PACKETS, MAX_SUBPORTS,
};
use crate::wred::{WredParams, WredProfile, DEFAULT_WEIGHT, P_ONE, WEIGHTS};

/// `[qos]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct QosConfig {
    /// `[[qos.policer]]`.
    #[serde(rename = "policer", default, skip_serializing_if = "Vec::is_empty")]
    pub policers: Vec<PolicerConfig>,
    /// `[[qos.policy]]`.
    #[serde(rename = "policy", default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<PolicyConfig>,
    /// `[[qos.interface]]`.
    #[serde(rename = "interface", default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceConfig>,
}

/// A rate: bit/s as a number, or a string with a unit (`"10mbit"`), or a share of the
/// policy's shaper (`"40%"`, class rates only).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum RateValue {
    /// Bit/s.
    Bps(u64),
    /// With a unit, or a percentage.
    Text(String),
}

/// A DSCP: a number or a name (`"ef"`, `"af41"`, `"cs6"`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum DscpValue {
    /// 0 to 63.
    Num(u64),
    /// A name.
    Name(String),
}

/// `[[qos.policer]]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PolicerConfig {
    /// Its name, as classes and interfaces refer to it.
    pub name: String,
    /// `srtcm`, `trtcm` or `rfc4115`.
    pub kind: String,
    /// Committed rate.
    pub cir: RateValue,
    /// Committed burst, bytes.
    pub cbs: u64,
    /// trTCM's peak rate, RFC 4115's excess rate (`eir` is the same key).
    #[serde(default, alias = "eir", skip_serializing_if = "Option::is_none")]
    pub pir: Option<RateValue>,
    /// The excess burst (srTCM, RFC 4115) or peak burst (trTCM: `pbs` is the same key).
    #[serde(alias = "pbs")]
    pub ebs: u64,
    /// Whether packets' own colour (their AF drop precedence) counts.
    #[serde(default)]
    pub colour_aware: bool,
    /// Action on green packets (default `transmit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub green: Option<DscpValue>,
    /// Action on yellow packets (default `transmit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub yellow: Option<DscpValue>,
    /// Action on red packets (default `drop`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub red: Option<DscpValue>,
}

/// `[[qos.policy]]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// Its name.
    pub name: String,
    /// The class of untrusted traffic and of DSCPs no class names.
    pub default_class: String,
    /// The output shaper's rate (left out: none, the port's own pace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shaper: Option<RateValue>,
    /// The shaper's burst in bytes (default: 2 ms at its rate, at least 15,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    /// A policer for everything an interface with this input policy receives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policer: Option<String>,
    /// The classes (`[[qos.policy.class]]`).
    #[serde(rename = "class", default)]
    pub classes: Vec<ClassConfig>,
    /// Classifier rules (`[[qos.policy.rule]]`), first match first, before DSCP
    /// classification (input only).
    #[serde(rename = "rule", default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RuleConfig>,
    /// Pipes (`[[qos.policy.pipe]]`): subscriber lines behind the port, each with its
    /// own shaper and queues (output, with a shaper).
    #[serde(rename = "pipe", default, skip_serializing_if = "Vec::is_empty")]
    pub pipes: Vec<PipeConfig>,
    /// Pipe profiles (`[[qos.policy.pipe_profile]]`): the parameters many pipes share,
    /// written once.
    #[serde(
        rename = "pipe_profile",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub pipe_profiles: Vec<PipeProfileConfig>,
    /// Subports (`[[qos.policy.subport]]`): groups of pipes sharing a rate under the
    /// port's shaper.
    #[serde(rename = "subport", default, skip_serializing_if = "Vec::is_empty")]
    pub subports: Vec<SubportConfig>,
}

/// `[[qos.policy.subport]]`: the pipes that name it (`subport = "name"`) share its rate,
/// under the port's shaper.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SubportConfig {
    /// Its name.
    pub name: String,
    /// Its rate: bit/s, with a unit, or a share of the policy's shaper.
    pub rate: RateValue,
    /// Its bucket, bytes (default: 2 ms at its rate, at least 15,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    /// The most packets its pipes hold together in each worker (default: only each
    /// pipe's own limits); beyond, a tail drop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// `[[qos.policy.pipe_profile]]`: a pipe's parameters, for the pipes that name it
/// (`profile = "name"`); what a pipe gives itself overrides its profile's.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PipeProfileConfig {
    /// Its name.
    pub name: String,
    /// The pipes' rate: bit/s, with a unit, or a share of the policy's shaper.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<RateValue>,
    /// The pipes' bucket, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    /// The limit of each of the pipes' class queues, packets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// DRR weights of weighted classes within each of the pipes, by class name (a class
    /// left out keeps its own weight).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub weights: BTreeMap<String, u32>,
    /// Maximum rates of classes within each of the pipes, by class name: bit/s, with a
    /// unit, or a share of the pipe's rate.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub max_rates: BTreeMap<String, RateValue>,
    /// Minimum rates of weighted classes within each of the pipes, by class name (as
    /// `max_rates`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub min_rates: BTreeMap<String, RateValue>,
}

/// `[[qos.policy.pipe]]`: the packets leaving the port to its destinations (the pipe with
/// the longest matching prefix) are shaped at its rate, in queues of their own.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PipeConfig {
    /// Its name.
    pub name: String,
    /// The profile it takes its rate, burst, limit and weights from, unless it gives them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The subport it is under (left out: directly under the port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subport: Option<String>,
    /// Its rate: bit/s, with a unit, or a share of the policy's shaper (left out: its
    /// profile's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<RateValue>,
    /// Its bucket, bytes (default: its profile's, else 2 ms at its rate, at least 15,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    /// The limit of each of its class queues, packets (default: its profile's, else 64; at
    /// most the class's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// DRR weights of weighted classes within it, by class name: over its profile's, class
    /// by class (a class in neither keeps its own weight).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub weights: BTreeMap<String, u32>,
    /// Maximum rates of classes within it, by class name (bit/s, with a unit, or a share of
    /// its rate): over its profile's, class by class (a class in neither has none but its
    /// port-wide `max_rate`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub max_rates: BTreeMap<String, RateValue>,
    /// Minimum rates of weighted classes within it, by class name (as `max_rates`; a class
    /// below its minimum in the pipe is served before the pipe's DRR).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub min_rates: BTreeMap<String, RateValue>,
    /// Its destinations: a prefix or a list of them, IPv4 and/or IPv6.
    pub dst: crate::rules::Prefixes,
}

/// `[[qos.policy.class]]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClassConfig {
    /// Its name.
    pub name: String,
    /// The DSCPs of its packets (on trusted interfaces).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dscp: Vec<DscpValue>,
    /// The DSCP its packets are marked with on input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mark: Option<DscpValue>,
    /// Its policer on input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policer: Option<String>,
    /// Strict priority on output (lower first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// DRR weight on output (classes without a priority; default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// Minimum rate on output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_rate: Option<RateValue>,
    /// Maximum rate on output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rate: Option<RateValue>,
    /// Queue limit, packets (default 256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// CoDel on its queue.
    #[serde(default)]
    pub codel: bool,
    /// WRED on its queue (not with CoDel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wred: Option<WredConfig>,
    /// The 802.1p priority (0-7) of its frames that leave tagged by a VLAN sub-interface
    /// with this output policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcp: Option<u8>,
    /// The 802.1p priorities that put a tagged frame in this class on a trusted interface
    /// when no class names its DSCP.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pcp_in: Vec<u8>,
}

/// A probability, as the file writes it (a number; 1 may be written as an integer).
/// Equal when its bits are, so that configs compare (NaN is refused by validation).
#[derive(Clone, Copy, Debug, Deserialize, Serialize)]
#[serde(transparent)]
pub struct Probability(pub f64);

impl PartialEq for Probability {
    fn eq(&self, o: &Self) -> bool {
        self.0.to_bits() == o.0.to_bits()
    }
}

impl Eq for Probability {}

/// A class's `wred`: the green profile (AFx1 and every DSCP that is not AF) and the
/// average's weight, with the yellow (AFx2) and red (AFx3) profiles, which default to
/// the green one.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WredConfig {
    /// Below this average depth (packets) nothing is dropped.
    pub min: i64,
    /// From this average depth on everything is dropped (at most the class's limit).
    pub max: i64,
    /// The drop probability as the average reaches `max`: above 0, at most 1.
    pub probability: Probability,
    /// The average's weight is 2^-weight (1 to 16; default 9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i64>,
    /// The profile of yellow packets (AFx2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub yellow: Option<WredProfileConfig>,
    /// The profile of red packets (AFx3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub red: Option<WredProfileConfig>,
}

/// A drop precedence's WRED profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WredProfileConfig {
    /// Below this average depth (packets) nothing is dropped.
    pub min: i64,
    /// From this average depth on everything is dropped.
    pub max: i64,
    /// The drop probability as the average reaches `max`.
    pub probability: Probability,
}

impl WredConfig {
    /// The parameters of a queue of `limit` packets that drains at `rate_bps` (for the
    /// idle decay), or the problems (key under `wred`, message).
    pub fn params(&self, limit: usize, rate_bps: u64) -> Result<WredParams, Vec<(String, String)>> {
        let mut out = Vec::new();
        let green = WredProfileConfig {
            min: self.min,
            max: self.max,
            probability: self.probability,
        };
        let mut profiles = [WredProfile {
            min: 0,
            max: 1,
            max_p: P_ONE,
        }; 3];
        // Yellow and red left out: as green.
        let given = [
            ("", green),
            ("yellow.", self.yellow.unwrap_or(green)),
            ("red.", self.red.unwrap_or(green)),
        ];
        for (k, (key, p)) in given.iter().enumerate() {
            if k > 0 && *p == green {
                profiles[k] = profiles[0];
                continue;
            }
            let mut ok = true;
            if p.min < 0 {
                out.push((
                    format!("{key}min"),
                    format!("{} packets: min is at least 0", p.min),
                ));
                ok = false;
            }
            if p.max < 1 || p.max as u64 > limit as u64 {
                out.push((
                    format!("{key}max"),
                    format!(
                        "{} packets is out of range: 1 to the class's limit ({limit} packets)",
                        p.max
                    ),
                ));
                ok = false;
            } else if p.min >= p.max {
                out.push((
                    format!("{key}min"),
                    format!("{} packets: min must be below max ({})", p.min, p.max),
                ));
                ok = false;
            }
            let pr = p.probability.0;
            if !(pr > 0.0 && pr <= 1.0) {
                out.push((
                    format!("{key}probability"),
                    format!("{pr} is out of range: above 0, at most 1"),
                ));
                ok = false;
            }
            if ok {
                profiles[k] = WredProfile {
                    min: p.min as u32,
                    max: p.max as u32,
                    max_p: ((pr * P_ONE as f64).round() as u64).clamp(1, P_ONE),
                };
            }
        }
        let weight = self.weight.unwrap_or(i64::from(DEFAULT_WEIGHT));
        if !(i64::from(*WEIGHTS.start())..=i64::from(*WEIGHTS.end())).contains(&weight) {
            out.push((
                "weight".into(),
                format!(
                    "{weight} is out of range: {} to {} (the average's weight is 2^-weight)",
                    WEIGHTS.start(),
                    WEIGHTS.end()
                ),
            ));
        }
        if !out.is_empty() {
            return Err(out);
        }
        Ok(WredParams {
            weight: weight as u8,
            profiles,
            idle_packet_ns: WredParams::packet_time_ns(rate_bps),
        })
    }
}

/// The rate by which an idle WRED queue's average decays when neither the class nor the
/// policy has a rate (bit/s).
pub const WRED_IDLE_RATE_BPS: u64 = 1_000_000_000;

/// `[[qos.interface]]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct InterfaceConfig {
    /// A port or VLAN sub-interface (output: a port).
    pub name: String,
    /// Whether its received DSCPs are believed (default false: its traffic is in the
    /// input policy's default class and re-marked).
    #[serde(default)]
    pub trusted: bool,
    /// The policy that classifies, marks and polices what it receives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// The policy that schedules what leaves by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

/// No 802.1p marking for a DSCP or a class (in [`PcpOut`]).
pub const NO_PCP: u8 = 0xff;

/// Policies numbered beyond this carry no class from input to output (the 802.1p
/// marking goes by the DSCP for them): the number has 9 bits in the packet
/// ([`crate::node`]'s `CLASS_META`).
pub const MAX_POLICY_NUMBER: usize = 511;

/// The 802.1p marking of what leaves a VLAN sub-interface with an output policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcpOut {
    /// The policy's number ([`InputPolicy::number`]): a packet classified on input by
    /// the same policy has the priority of its class.
    pub policy: u16,
    /// By class ([`NO_PCP`]: the tag is left as written).
    pub by_class: [u8; MAX_CLASSES],
    /// By DSCP, for the other packets: the class of the DSCP, as the port's scheduler
    /// chooses.
    pub by_dscp: [u8; 64],
}

/// Default queue limit of a class, packets.
pub const DEFAULT_LIMIT: usize = 256;
/// Default limit of a pipe's class queues, packets.
pub const DEFAULT_PIPE_LIMIT: usize = 64;
/// The most packets one port's classes may hold together (per worker): queued packets
/// keep their buffers, of which a worker has 8,192 for everything.
pub const MAX_PORT_QUEUED: usize = 2_048;

/// A rate in bit/s from `v`; `of` is the policy's shaper rate for percentages.
pub fn parse_rate(v: &RateValue, of: Option<u64>) -> Result<u64, String> {
    let bps = match v {
        RateValue::Bps(n) => *n,
        RateValue::Text(t) => {
            let t = t.trim().to_ascii_lowercase();
            if let Some(p) = t.strip_suffix('%') {
                let p: u64 = p
                    .trim()
                    .parse()
                    .map_err(|_| format!("{t:?} is not a percentage (1% to 100%)"))?;
                if p == 0 || p > 100 {
                    return Err(format!("{t:?}: a share is 1% to 100%"));
                }
                let Some(of) = of else {
                    return Err(format!(
                        "{t:?} is a share of the policy's shaper, and the policy has none; give a rate"
                    ));
                };
                return Ok(of * p / 100);
            }
            let (num, mult) = [
                ("gbit", 1_000_000_000),
                ("mbit", 1_000_000),
                ("kbit", 1_000),
                ("bit", 1),
            ]
            .iter()
            .find_map(|(u, m)| t.strip_suffix(u).map(|n| (n, *m)))
            .unwrap_or((t.as_str(), 1));
            let n: u64 = num.trim().parse().map_err(|_| {
                format!("{t:?} is not a rate: a number of bit/s, or with kbit, mbit or gbit")
            })?;
            n.saturating_mul(mult)
        }
    };
    if bps == 0 || bps > MAX_RATE_BPS {
        return Err(format!("{bps} bit/s is out of range: 1 bit/s to 1 Tbit/s"));
    }
    Ok(bps)
}

/// A DSCP from `v`.
pub fn parse_dscp(v: &DscpValue) -> Result<u8, String> {
    match v {
        DscpValue::Num(n) if *n <= 63 => Ok(*n as u8),
        DscpValue::Num(n) => Err(format!("DSCP {n} is out of range: 0 to 63")),
        DscpValue::Name(s) => dscp_by_name(s)
            .ok_or_else(|| format!("{s:?} is not a DSCP: 0-63, ef, be, csN, afXY, va")),
    }
}

fn parse_action(v: &Option<DscpValue>, default: Action) -> Result<Action, String> {
    match v {
        None => Ok(default),
        Some(DscpValue::Name(s)) if s == "transmit" => Ok(Action::Transmit),
        Some(DscpValue::Name(s)) if s == "drop" => Ok(Action::Drop),
        Some(d) => parse_dscp(d)
            .map(Action::Remark)
            .map_err(|e| format!("{e} (or \"transmit\", \"drop\")")),
    }
}

/// A problem with `burst`, the bucket of what is at `at` (a policy's shaper, a subport, a
/// pipe or a profile): outside what a bucket holds.
fn check_burst(out: &mut Vec<(String, String)>, at: &str, burst: u64) {
    if !BURST_BYTES.contains(&burst) {
        out.push((
            format!("{at}.burst"),
            format!("{burst} bytes is out of range: {MAX_PACKET} to {MAX_BURST_BYTES}"),
        ));
    }
}

/// A problem with `limit`, the queue limit in packets of what is at `at` (a class, a
/// subport, a pipe or a profile), if it is given: outside what a port holds.
fn check_limit(out: &mut Vec<(String, String)>, at: &str, limit: Option<usize>) {
    if let Some(limit) = limit.filter(|&l| l == 0 || l > MAX_PORT_QUEUED) {
        out.push((
            format!("{at}.limit"),
            format!("{limit} packets is out of range: 1 to {MAX_PORT_QUEUED}"),
        ));
    }
}

/// Problems with `name`, a `kind` at `path` (the `k`th): not a valid name, or one `names`
/// (the names of its kind so far) has already.
fn check_name<'a>(
    out: &mut Vec<(String, String)>,
    path: &str,
    (kind, name): (&str, &'a str),
    (names, k): (&mut HashMap<&'a str, usize>, usize),
) {
    if !valid_name(name) {
        out.push((
            format!("{path}.name"),
            format!("{name:?} is not a valid name (letters, digits, '-', '_', 1-64 characters)"),
        ));
    } else if names.insert(name, k).is_some() {
        out.push((
            format!("{path}.name"),
            format!("{kind} {name:?} is defined twice"),
        ));
    }
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The bursts a policy's `burst` accepts, in bytes: a jumbo frame to [`MAX_BURST_BYTES`].
pub const BURST_BYTES: std::ops::RangeInclusive<u64> = MAX_PACKET..=MAX_BURST_BYTES;

/// A policy's shaper burst when it gives none: 2 ms at `shaper_bps`, at least 15,000
/// bytes (and at most [`MAX_BURST_BYTES`]).
pub fn default_burst_bytes(shaper_bps: u64) -> u64 {
    (shaper_bps / 8 / 500).clamp(15_000, MAX_BURST_BYTES)
}

/// What a config compiles to: for each fast-path interface (by index) its input policy,
/// and for each port its output scheduler.
#[derive(Clone, Debug, Default)]
pub struct Compiled {
    /// Input policies by interface index.
    pub input: Vec<Option<InputPolicy>>,
    /// Output schedulers by interface index (ports only).
    pub output: Vec<Option<SchedSpec>>,
    /// The number of each port's output policy ([`InputPolicy::number`]; 0: none, or
    /// numbered beyond [`MAX_POLICY_NUMBER`]), by interface index: a packet classified on
    /// input by the same policy is queued in the class it chose. Not in the port's
    /// [`SchedSpec`]: a policy added or removed before it in the list renumbers it, and that
    /// must not replace its scheduler (and drop what its classes hold).
    pub output_policy: Vec<u16>,
    /// The 802.1p marking of what leaves each VLAN sub-interface with an output policy,
    /// by interface index.
    pub pcp_out: Vec<Option<PcpOut>>,
    /// The policers, by name (shared by everything that names them).
    pub policers: Vec<(String, Arc<Policer>)>,
}

/// A pipe profile as its pipes take it (`[[qos.policy.pipe_profile]]`): what it gives.
#[derive(Debug)]
struct Profile<'a> {
    /// Rate, bit/s (0: one with a problem).
    rate: Option<u64>,
    /// Burst, bytes.
    burst: Option<u64>,
    /// Class queue limit, packets.
    limit: Option<usize>,
    /// Weights by class name, as written (checked at the profile).
    weights: &'a BTreeMap<String, u32>,
    /// Its name, and its classes' maximum rates by class name, as written (the names and
    /// the values that are not shares checked at the profile).
    name: &'a str,
    max_rates: &'a BTreeMap<String, RateValue>,
    min_rates: &'a BTreeMap<String, RateValue>,
}

/// Problems with `rates`, maximum or minimum rates by class name at `at.key` (a pipe
/// profile's `max_rates` or `min_rates`), over `classes` of policy `policy`: a class that
/// does not exist, a minimum for a strict-priority class, a rate that is not one (shares
/// are of each pipe's rate: checked at the pipes).
fn check_class_rates(
    out: &mut Vec<(String, String)>,
    (at, key): (&str, &str),
    rates: &BTreeMap<String, RateValue>,
    (classes, policy): (&[ClassSpec], &str),
) {
    for (name, v) in rates {
        let mp = format!("{at}.{key}.{name}");
        let Some(c) = classes.iter().find(|c| &c.name == name) else {
            out.push((mp, format!("{name:?} is not a class of policy {policy:?}")));
            continue;
        };
        if key == "min_rates" && c.priority.is_some() {
            out.push((mp, STRICT_MIN.into()));
            continue;
        }
        // Any rate stands in for the pipe's, which shares are of.
        if let Err(e) = parse_rate(v, Some(MAX_RATE_BPS)) {
            out.push((mp, e));
        }
    }
}

/// Rates by class name, as written (`max_rates`, `min_rates`).
type ClassRates = BTreeMap<String, RateValue>;

/// Why a strict-priority class has no minimum rate.
const STRICT_MIN: &str =
    "a strict-priority class is served first: a minimum rate is for weighted classes";

/// A pipe's classes' maximum or minimum rates within it (`key`: `max_rates` or
/// `min_rates`), bit/s by class index: its own (at `at.key`) over its profile's
/// (`theirs`, its name and its values), class by class, shares of its rate `rate`; empty
/// when neither gives one. Problems go to `out`, at the pipe: its own values', and a
/// profile's value above the pipe's rate (the profile's others are reported there).
fn pipe_class_rates(
    out: &mut Vec<(String, String)>,
    (at, key): (&str, &str),
    (own, theirs): (&ClassRates, Option<(&str, &ClassRates)>),
    rate: u64,
    (classes, policy): (&[ClassSpec], &str),
) -> Vec<u64> {
    let theirs_only = theirs
        .into_iter()
        .flat_map(|(f, m)| m.iter().map(move |(n, v)| (n, v, Some(f))))
        .filter(|(n, _, _)| !own.contains_key(*n));
    let mut max = vec![0; classes.len()];
    for (name, v, from) in own.iter().map(|(n, v)| (n, v, None)).chain(theirs_only) {
        let mp = format!("{at}.{key}.{name}");
        let k = classes.iter().position(|c| &c.name == name);
        let strict = k
            .and_then(|k| classes.get(k))
            .is_some_and(|c| c.priority.is_some());
        if key == "min_rates" && strict {
            if from.is_none() {
                out.push((mp, STRICT_MIN.into()));
            }
            continue;
        }
        let r = parse_rate(v, Some(rate.max(1)));
        let (Some(k), Ok(r)) = (k, &r) else {
            // A profile's problems are reported at the profile.
            if from.is_none() {
                out.push((
                    mp,
                    match r {
                        Err(e) => e,
                        Ok(_) => format!("{name:?} is not a class of policy {policy:?}"),
                    },
                ));
            }
            continue;
        };
        if rate > 0 && *r > rate {
            let whose = from.map_or(String::new(), |f| format!(" (its profile {f:?}'s)"));
            out.push((
                mp,
                format!("{r} bit/s{whose} is above the pipe's rate ({rate} bit/s)"),
            ));
            continue;
        }
        max[k] = *r;
    }
    if max.iter().all(|&m| m == 0) {
        max.clear();
    }
    max
}

/// Problems with `weights`, DRR weights by class name at `at` (a pipe's or a profile's),
/// over `classes` of policy `policy`: a class that does not exist, one of strict priority,
/// a weight of 0.
fn check_weights(
    out: &mut Vec<(String, String)>,
    at: &str,
    weights: &BTreeMap<String, u32>,
    (classes, policy): (&[ClassSpec], &str),
) {
    for (name, &w) in weights {
        let wp = format!("{at}.weights.{name}");
        match classes.iter().find(|c| &c.name == name) {
            None => out.push((wp, format!("{name:?} is not a class of policy {policy:?}"))),
            Some(c) if c.priority.is_some() => out.push((
                wp,
                format!("class {name:?} has a strict priority: weights are for weighted classes"),
            )),
            Some(_) if w == 0 => out.push((wp, "0: a weight is at least 1".into())),
            Some(_) => {}
        }
    }
}

impl QosConfig {
    /// Whether it says nothing.
    pub fn is_default(&self) -> bool {
        *self == QosConfig::default()
    }

    /// Whether any interface has an input policy.
    pub fn has_input(&self) -> bool {
        self.interfaces.iter().any(|i| i.input.is_some())
    }

    /// The policer `p` as the policers compute it.
    fn policer_spec(p: &PolicerConfig) -> Result<PolicerSpec, (&'static str, String)> {
        let kind = match p.kind.as_str() {
            "srtcm" => Kind::SrTcm,
            "trtcm" => Kind::TrTcm,
            "rfc4115" => Kind::Rfc4115,
            k => {
                return Err((
                    "kind",
                    format!("{k:?} is not a policer kind: srtcm, trtcm or rfc4115"),
                ))
            }
        };
        let cir = parse_rate(&p.cir, None).map_err(|e| ("cir", e))?;
        let pir = match (&p.pir, kind) {
            (Some(r), Kind::SrTcm) => {
                let _ = r;
                return Err(("pir", "srtcm has one rate: leave pir out".into()));
            }
            (Some(r), _) => parse_rate(r, None).map_err(|e| ("pir", e))?,
            (None, Kind::TrTcm) => return Err(("pir", "trtcm needs pir, its peak rate".into())),
            (None, _) => 0,
        };
        let actions = [
            parse_action(&p.green, Action::Transmit).map_err(|e| ("green", e))?,
            parse_action(&p.yellow, Action::Transmit).map_err(|e| ("yellow", e))?,
            parse_action(&p.red, Action::Drop).map_err(|e| ("red", e))?,
        ];
        let spec = PolicerSpec {
            kind,
            cir_bps: cir,
            cbs_bytes: p.cbs,
            pir_bps: pir,
            ebs_bytes: p.ebs,
            colour_aware: p.colour_aware,
            actions,
        };
        spec.validate().map_err(|e| {
            let key = match e {
                crate::policer::SpecError::Burst("pbs", _) => "ebs",
                crate::policer::SpecError::Burst(k, _) => k,
                crate::policer::SpecError::Rate(k, _) => {
                    if k == "eir" {
                        "pir"
                    } else {
                        k
                    }
                }
                crate::policer::SpecError::PeakBelowCommitted => "pir",
                crate::policer::SpecError::Dscp(_) => "kind",
            };
            (key, e.to_string())
        })?;
        if p.cbs < MAX_PACKET.min(1_514) {
            return Err((
                "cbs",
                format!(
                    "{} bytes is less than a full-size packet (1514 bytes)",
                    p.cbs
                ),
            ));
        }
        Ok(spec)
    }

    /// The output scheduler of policy `p`, or the problems with it (path, message).
    fn sched_spec(p: &PolicyConfig, path: &str) -> Result<SchedSpec, Vec<(String, String)>> {
        let mut out = Vec::new();
        let shaper = match &p.shaper {
            None => 0,
            Some(r) => parse_rate(r, None).unwrap_or_else(|e| {
                out.push((format!("{path}.shaper"), e));
                0
            }),
        };
        let burst = p.burst.unwrap_or_else(|| default_burst_bytes(shaper));
        if p.burst.is_some() {
            check_burst(&mut out, path, burst);
        }
        let of = (shaper > 0).then_some(shaper);
        let mut classes = Vec::new();
        let mut queued = 0usize;
        for (j, c) in p.classes.iter().enumerate() {
            let cp = format!("{path}.class[{j}]");
            let mut rate = |key: &str, v: &Option<RateValue>| match v {
                None => 0,
                Some(v) => parse_rate(v, of).unwrap_or_else(|e| {
                    out.push((format!("{cp}.{key}"), e));
                    0
                }),
            };
            let min_bps = rate("min_rate", &c.min_rate);
            let max_bps = rate("max_rate", &c.max_rate);
            if c.priority.is_some() && c.weight.is_some() {
                out.push((
                    format!("{cp}.weight"),
                    "a class has a priority (strict) or a weight (shared), not both".into(),
                ));
            }
            if c.priority.is_some() && c.min_rate.is_some() {
                out.push((format!("{cp}.min_rate"), STRICT_MIN.into()));
            }
            if c.weight == Some(0) {
                out.push((format!("{cp}.weight"), "0: a weight is at least 1".into()));
            }
            let limit = c.limit.unwrap_or(DEFAULT_LIMIT);
            check_limit(&mut out, &cp, Some(limit));
            queued += limit;
            if max_bps > 0 && min_bps > max_bps {
                out.push((
                    format!("{cp}.min_rate"),
                    format!("{min_bps} bit/s is above max_rate ({max_bps} bit/s)"),
                ));
            }
            if c.codel && c.priority.is_some() {
                out.push((
                    format!("{cp}.codel"),
                    "CoDel is for best-effort (weighted) classes, not strict-priority ones".into(),
                ));
            }
            // WRED's idle decay: the time of a typical packet at the class's maximum rate,
            // else the shaper's, else 1 Gbit/s.
            let drain = [max_bps, shaper, WRED_IDLE_RATE_BPS]
                .into_iter()
                .find(|&r| r > 0)
                .unwrap_or(WRED_IDLE_RATE_BPS);
            let wred = match &c.wred {
                None => None,
                Some(w) => {
                    if c.codel {
                        out.push((
                            format!("{cp}.wred"),
                            "a class has CoDel or WRED, not both (leave out codel or wred)".into(),
                        ));
                    }
                    if c.priority.is_some() {
                        out.push((
                            format!("{cp}.wred"),
                            "WRED is for best-effort (weighted) classes, not strict-priority ones"
                                .into(),
                        ));
                    }
                    match w.params(limit, drain) {
                        Ok(p) => Some(p),
                        Err(e) => {
                            out.extend(e.into_iter().map(|(k, m)| (format!("{cp}.wred.{k}"), m)));
                            None
                        }
                    }
                }
            };
            classes.push(ClassSpec {
                name: c.name.clone(),
                priority: c.priority,
                weight: c.weight.unwrap_or(1).max(1),
                min_bps,
                max_bps,
                burst_bytes: burst,
                limit: limit.clamp(1, MAX_PORT_QUEUED),
                codel: c.codel.then(CodelParams::default),
                wred,
            });
        }
        if queued > MAX_PORT_QUEUED && !p.classes.is_empty() {
            out.push((
                format!("{path}.class"),
                format!("the classes' limits add up to {queued} packets; a port holds at most {MAX_PORT_QUEUED}"),
            ));
        }
        let mins: u64 = classes.iter().map(|c| c.min_bps).sum();
        if shaper > 0 && mins > shaper {
            out.push((
                format!("{path}.class"),
                format!("the classes' min_rate add up to {mins} bit/s, more than the shaper's {shaper} bit/s"),
            ));
        }
        let index = |n: &str| p.classes.iter().position(|c| c.name == n);
        let default_class = index(&p.default_class).unwrap_or(0) as u8;
        let mut by_dscp = [default_class; 64];
        for (j, c) in p.classes.iter().enumerate() {
            for d in c.dscp.iter().filter_map(|d| parse_dscp(d).ok()) {
                by_dscp[d as usize] = j as u8;
            }
        }
        let subports = Self::subport_specs(p, path, shaper, &mut out);
        let pipes = Self::pipe_specs(p, path, shaper, &classes, &subports, &mut out);
        if !out.is_empty() {
            return Err(out);
        }
        Ok(SchedSpec {
            rate_bps: shaper,
            burst_bytes: burst,
            classes,
            by_dscp,
            default_class,
            pipes,
            subports,
        })
    }

    /// The subports of policy `p` (at `path`) under a shaper of `shaper` bit/s (0: none);
    /// problems go to `out` (a rate with a problem reads as 0).
    fn subport_specs(
        p: &PolicyConfig,
        path: &str,
        shaper: u64,
        out: &mut Vec<(String, String)>,
    ) -> Vec<SubportSpec> {
        let mut subports = Vec::new();
        let level = ("subport", "subports", p.subports.len());
        if !Self::level_fits(p, path, level, (MAX_SUBPORTS, ""), out) {
            return subports;
        }
        let mut names = HashMap::new();
        for (k, s) in p.subports.iter().enumerate() {
            let sp = format!("{path}.subport[{k}]");
            check_name(out, &sp, ("subport", &s.name), (&mut names, k));
            let rate = Self::pipe_rate(&s.rate, &sp, shaper, out);
            let burst = s.burst.unwrap_or_else(|| default_burst_bytes(rate));
            check_burst(out, &sp, burst);
            check_limit(out, &sp, s.limit);
            subports.push(SubportSpec {
                name: s.name.clone(),
                rate_bps: rate,
                burst_bytes: burst,
                limit: s.limit,
            });
        }
        subports
    }

    /// Whether the `n` entries of a level of policy `p` (`[[qos.policy.<key>]]`, called
    /// `what`) can be looked at one by one: at most `max` (`why` says why), reported at
    /// `path.<key>` otherwise. Subports and pipes are shaped under the policy's shaper:
    /// without one, that is reported too (profiles are only written-down values).
    fn level_fits(
        p: &PolicyConfig,
        path: &str,
        (key, what, n): (&str, &str, usize),
        (max, why): (usize, &str),
        out: &mut Vec<(String, String)>,
    ) -> bool {
        if n > 0 && key != "pipe_profile" && p.shaper.is_none() {
            out.push((
                format!("{path}.{key}"),
                format!("{what} are shaped under the port's shaper: the policy needs a shaper"),
            ));
        }
        if n > max {
            out.push((
                format!("{path}.{key}"),
                format!("{n} {what}: a policy has at most {max}{why}"),
            ));
            return false;
        }
        true
    }

    /// A pipe's or a pipe profile's rate `v` (at `at`) under a shaper of `shaper` bit/s (0:
    /// none), or 0 with its problem in `out`.
    fn pipe_rate(v: &RateValue, at: &str, shaper: u64, out: &mut Vec<(String, String)>) -> u64 {
        match parse_rate(v, (shaper > 0).then_some(shaper)) {
            Ok(r) if shaper > 0 && r > shaper => {
                out.push((
                    format!("{at}.rate"),
                    format!("{r} bit/s is above the policy's shaper ({shaper} bit/s)"),
                ));
                0
            }
            Ok(r) => r,
            Err(e) => {
                out.push((format!("{at}.rate"), e));
                0
            }
        }
    }

    /// The pipe profiles of policy `p` (at `path`) under a shaper of `shaper` bit/s, over
    /// `classes`, by name; problems go to `out` (a value with a problem reads as 0, which
    /// its pipes then report no more).
    fn pipe_profiles<'a>(
        p: &'a PolicyConfig,
        path: &str,
        shaper: u64,
        classes: &[ClassSpec],
        out: &mut Vec<(String, String)>,
    ) -> HashMap<&'a str, Profile<'a>> {
        let mut profiles = HashMap::new();
        let level = ("pipe_profile", "pipe profiles", p.pipe_profiles.len());
        if !Self::level_fits(p, path, level, (MAX_PIPES, " (as many as pipes)"), out) {
            return profiles;
        }
        let mut names = HashMap::new();
        for (k, f) in p.pipe_profiles.iter().enumerate() {
            let fp = format!("{path}.pipe_profile[{k}]");
            check_name(out, &fp, ("pipe profile", &f.name), (&mut names, k));
            let rate = f
                .rate
                .as_ref()
                .map(|r| Self::pipe_rate(r, &fp, shaper, out));
            if let Some(burst) = f.burst {
                check_burst(out, &fp, burst);
            }
            check_limit(out, &fp, f.limit);
            check_weights(out, &fp, &f.weights, (classes, &p.name));
            check_class_rates(out, (&fp, "max_rates"), &f.max_rates, (classes, &p.name));
            check_class_rates(out, (&fp, "min_rates"), &f.min_rates, (classes, &p.name));
            profiles.insert(
                f.name.as_str(),
                Profile {
                    rate,
                    burst: f.burst,
                    limit: f.limit,
                    weights: &f.weights,
                    name: &f.name,
                    max_rates: &f.max_rates,
                    min_rates: &f.min_rates,
                },
            );
        }
        profiles
    }

    /// Problems with a pipe's (at `qp`, of rate `rate`) classes' minimum rates `min` within
    /// it, against their maximums `max` within it (by class index, empty: none): a minimum
    /// above its maximum, minimums that add up to more than the pipe's rate.
    fn check_pipe_mins(
        out: &mut Vec<(String, String)>,
        qp: &str,
        (min, max): (&[u64], &[u64]),
        rate: u64,
        classes: &[ClassSpec],
    ) {
        for (k, (c, &m)) in classes.iter().zip(min).enumerate() {
            if max.get(k).is_some_and(|&x| x > 0 && m > x) {
                out.push((
                    format!("{qp}.min_rates.{}", c.name),
                    format!(
                        "{m} bit/s is above the class's maximum in the pipe ({} bit/s)",
                        max[k]
                    ),
                ));
            }
        }
        let sum = min.iter().fold(0u64, |a, &m| a.saturating_add(m));
        if rate > 0 && sum > rate {
            out.push((
                format!("{qp}.min_rates"),
                format!(
                    "the minimum rates add up to {sum} bit/s, more than the pipe's {rate} bit/s"
                ),
            ));
        }
    }

    /// The pipes of policy `p` (at `path`) under a shaper of `shaper` bit/s (0: none),
    /// over `classes`, under `subports` (those of `p`); problems go to `out`.
    fn pipe_specs(
        p: &PolicyConfig,
        path: &str,
        shaper: u64,
        classes: &[ClassSpec],
        subports: &[SubportSpec],
        out: &mut Vec<(String, String)>,
    ) -> Vec<PipeSpec> {
        let mut pipes = Vec::new();
        let profiles = Self::pipe_profiles(p, path, shaper, classes, out);
        if p.pipes.is_empty() {
            return pipes;
        }
        let level = ("pipe", "pipes", p.pipes.len());
        let why = " (each has a queue per class in every worker)";
        if !Self::level_fits(p, path, level, (MAX_PIPES, why), out) {
            return pipes;
        }
        let mut names = HashMap::new();
        let mut seen: HashMap<(std::net::IpAddr, u8), usize> = HashMap::new();
        let mut places = 0usize;
        for (k, q) in p.pipes.iter().enumerate() {
            let qp = format!("{path}.pipe[{k}]");
            check_name(out, &qp, ("pipe", &q.name), (&mut names, k));
            let profile = match &q.profile {
                None => None,
                Some(n) => {
                    let f = profiles.get(n.as_str());
                    if f.is_none() {
                        let known = if p.pipe_profiles.is_empty() {
                            format!("policy {:?} has no [[qos.policy.pipe_profile]]", p.name)
                        } else {
                            "a profile is a [[qos.policy.pipe_profile]] of the same policy"
                                .to_string()
                        };
                        out.push((
                            format!("{qp}.profile"),
                            format!("unknown pipe profile {n:?}: {known}"),
                        ));
                    }
                    f
                }
            };
            // Its own values, else its profile's (already checked there).
            let rate = match (&q.rate, profile.and_then(|f| f.rate)) {
                (Some(r), _) => Self::pipe_rate(r, &qp, shaper, out),
                (None, Some(r)) => r,
                (None, None) => {
                    // An unknown profile is reported already.
                    if q.profile.is_none() || profile.is_some() {
                        out.push((
                            format!("{qp}.rate"),
                            "a pipe needs a rate: its own, or its profile's".into(),
                        ));
                    }
                    0
                }
            };
            let subport = q.subport.as_ref().and_then(|n| {
                let k = p.subports.iter().position(|s| &s.name == n);
                if k.is_none() {
                    out.push((
                        format!("{qp}.subport"),
                        format!(
                            "unknown subport {n:?}: a subport is a [[qos.policy.subport]] of the same policy"
                        ),
                    ));
                }
                k
            });
            if let Some(s) = subport.and_then(|k| subports.get(k)) {
                if s.rate_bps > 0 && rate > s.rate_bps {
                    // Its own rate, or its profile's (then the subport is what to change
                    // in the pipe).
                    let (at, whose) = match (&q.rate, &q.profile) {
                        (None, Some(f)) => ("subport", format!(" (its profile {f:?}'s rate)")),
                        _ => ("rate", String::new()),
                    };
                    out.push((
                        format!("{qp}.{at}"),
                        format!(
                            "{rate} bit/s{whose} is above its subport {:?}'s rate ({} bit/s)",
                            s.name, s.rate_bps
                        ),
                    ));
                }
            }
            let burst = q
                .burst
                .or(profile.and_then(|f| f.burst))
                .unwrap_or_else(|| default_burst_bytes(rate));
            if q.burst.is_some() {
                check_burst(out, &qp, burst);
            }
            let limit = q
                .limit
                .or(profile.and_then(|f| f.limit))
                .unwrap_or(DEFAULT_PIPE_LIMIT);
            check_limit(out, &qp, q.limit);
            // Its weights over its profile's, class by class (a profile's are checked there).
            check_weights(out, &qp, &q.weights, (classes, &p.name));
            let theirs = profile.map(|f| f.weights);
            let weights = if q.weights.is_empty() && theirs.is_none_or(BTreeMap::is_empty) {
                Vec::new()
            } else {
                classes
                    .iter()
                    .map(|c| {
                        q.weights
                            .get(&c.name)
                            .or_else(|| theirs.and_then(|w| w.get(&c.name)))
                            .copied()
                            .unwrap_or(c.weight)
                            .max(1)
                    })
                    .collect()
            };
            let max_bps = pipe_class_rates(
                out,
                (&qp, "max_rates"),
                (&q.max_rates, profile.map(|f| (f.name, f.max_rates))),
                rate,
                (classes, &p.name),
            );
            let min_bps = pipe_class_rates(
                out,
                (&qp, "min_rates"),
                (&q.min_rates, profile.map(|f| (f.name, f.min_rates))),
                rate,
                (classes, &p.name),
            );
            Self::check_pipe_mins(out, &qp, (&min_bps, &max_bps), rate, classes);
            if q.dst.is_empty() {
                out.push((
                    format!("{qp}.dst"),
                    "a pipe needs its destinations: a prefix or a list of them".into(),
                ));
            }
            for (j, d) in q.dst.list().iter().enumerate() {
                let dp = q.dst.path(&qp, "dst", j);
                match firewall::config::parse_net(d) {
                    Err(e) => out.push((dp, e)),
                    Ok(n) => {
                        if let Some(other) = seen.insert((n.addr, n.len), k) {
                            out.push((
                                dp,
                                format!(
                                    "{d} is already a destination of pipe {:?}",
                                    p.pipes[other].name
                                ),
                            ));
                        }
                    }
                }
            }
            places += classes
                .iter()
                .map(|c| c.limit.min(limit.max(1)))
                .sum::<usize>();
            pipes.push(PipeSpec {
                name: q.name.clone(),
                rate_bps: rate,
                burst_bytes: burst,
                limit: limit.clamp(1, MAX_PORT_QUEUED),
                dst: q.dst.list().to_vec(),
                profile: q.profile.clone(),
                weights,
                subport: subport.map(|k| k as u16),
                max_bps,
                min_bps,
            });
        }
        // The lookup builds (the firewall's classifier: its own limits).
        if !out
            .iter()
            .any(|(k, _)| k.starts_with(&format!("{path}.pipe")))
        {
            let dst: Vec<Vec<String>> = pipes.iter().map(|p| p.dst.clone()).collect();
            if let Err(e) = crate::pipes::PipeTable::build(&dst) {
                out.push((format!("{path}.pipe"), e));
            }
        }
        if places > MAX_PIPE_PACKETS {
            out.push((
                format!("{path}.pipe"),
                format!(
                    "the pipes' queues hold {places} packets (each pipe has a queue per class, of the smaller of its limit and the class's); a port has at most {MAX_PIPE_PACKETS} (40 bytes each per worker): lower the pipes' limit"
                ),
            ));
        }
        pipes
    }

    /// Everything wrong, each with the dotted path of the value; `interfaces` are the fast
    /// path's interfaces, `ports` and `vlans` those of them that are ports and VLAN
    /// sub-interfaces (the others are tunnels).
    pub fn validate(
        &self,
        interfaces: &[&str],
        ports: &[&str],
        vlans: &[&str],
    ) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        let mut names = HashMap::new();
        for (i, p) in self.policers.iter().enumerate() {
            let path = format!("qos.policer[{i}]");
            check_name(&mut out, &path, ("policer", &p.name), (&mut names, i));
            if let Err((key, e)) = Self::policer_spec(p) {
                out.push((format!("{path}.{key}"), e));
            }
        }
        let mut policies = HashMap::new();
        for (i, p) in self.policies.iter().enumerate() {
            let path = format!("qos.policy[{i}]");
            check_name(&mut out, &path, ("policy", &p.name), (&mut policies, i));
            if p.classes.is_empty() || p.classes.len() > MAX_CLASSES {
                out.push((
                    format!("{path}.class"),
                    format!(
                        "{} classes: a policy has 1 to {MAX_CLASSES}",
                        p.classes.len()
                    ),
                ));
            }
            if !p.classes.iter().any(|c| c.name == p.default_class) {
                out.push((
                    format!("{path}.default_class"),
                    format!(
                        "{:?} is not a class of policy {:?}",
                        p.default_class, p.name
                    ),
                ));
            }
            if let Some(pol) = &p.policer {
                if !self.policers.iter().any(|q| &q.name == pol) {
                    out.push((
                        format!("{path}.policer"),
                        format!("unknown policer {pol:?}"),
                    ));
                }
            }
            let mut seen_dscp: HashMap<u8, usize> = HashMap::new();
            let mut seen_pcp: HashMap<u8, usize> = HashMap::new();
            let mut class_names = HashMap::new();
            for (j, c) in p.classes.iter().enumerate() {
                let cp = format!("{path}.class[{j}]");
                check_name(&mut out, &cp, ("class", &c.name), (&mut class_names, j));
                for (k, d) in c.dscp.iter().enumerate() {
                    match parse_dscp(d) {
                        Err(e) => out.push((format!("{cp}.dscp[{k}]"), e)),
                        Ok(d) => {
                            if let Some(other) = seen_dscp.insert(d, j) {
                                out.push((
                                    format!("{cp}.dscp[{k}]"),
                                    format!(
                                        "DSCP {d} is already in class {:?}",
                                        p.classes[other].name
                                    ),
                                ));
                            }
                        }
                    }
                }
                if let Some(m) = &c.mark {
                    if let Err(e) = parse_dscp(m) {
                        out.push((format!("{cp}.mark"), e));
                    }
                }
                if let Some(pol) = &c.policer {
                    if !self.policers.iter().any(|q| &q.name == pol) {
                        out.push((format!("{cp}.policer"), format!("unknown policer {pol:?}")));
                    }
                }
                if let Some(pcp) = c.pcp {
                    if pcp > 7 {
                        out.push((
                            format!("{cp}.pcp"),
                            format!("802.1p priority {pcp} is out of range: 0 to 7"),
                        ));
                    }
                }
                for (k, &pcp) in c.pcp_in.iter().enumerate() {
                    if pcp > 7 {
                        out.push((
                            format!("{cp}.pcp_in[{k}]"),
                            format!("802.1p priority {pcp} is out of range: 0 to 7"),
                        ));
                    } else if let Some(other) = seen_pcp.insert(pcp, j) {
                        out.push((
                            format!("{cp}.pcp_in[{k}]"),
                            format!(
                                "802.1p priority {pcp} is already in class {:?}",
                                p.classes[other].name
                            ),
                        ));
                    }
                }
            }
            let class_list: Vec<&str> = p.classes.iter().map(|c| c.name.as_str()).collect();
            crate::rules::validate(&p.rules, &class_list, &path, &mut out);
            if let Err(e) = Self::sched_spec(p, &path) {
                out.extend(e);
            }
        }
        let mut seen_if = HashMap::new();
        for (i, f) in self.interfaces.iter().enumerate() {
            let path = format!("qos.interface[{i}]");
            if !interfaces.contains(&f.name.as_str()) {
                out.push((
                    format!("{path}.name"),
                    format!("{:?} is not a [[port]] or [[vlan]]", f.name),
                ));
            } else if seen_if.insert(f.name.as_str(), i).is_some() {
                out.push((
                    format!("{path}.name"),
                    format!("interface {:?} has two [[qos.interface]]", f.name),
                ));
            }
            for (key, v) in [("input", &f.input), ("output", &f.output)] {
                if let Some(v) = v {
                    if !self.policies.iter().any(|p| &p.name == v) {
                        out.push((format!("{path}.{key}"), format!("unknown policy {v:?}")));
                    }
                }
            }
            // On a VLAN sub-interface, an output policy sets 802.1p only: the port it
            // rides on schedules. Elsewhere (a tunnel) it would do nothing.
            let name = f.name.as_str();
            if f.output.is_some()
                && interfaces.contains(&name)
                && !ports.contains(&name)
                && !vlans.contains(&name)
            {
                out.push((
                    format!("{path}.output"),
                    format!("{name:?} is neither a [[port]] (an output policy schedules it) nor a [[vlan]] (an output policy sets its 802.1p)"),
                ));
            }
            let vlan_policy = f
                .output
                .as_ref()
                .filter(|_| vlans.contains(&name))
                .and_then(|o| self.policies.iter().find(|p| &p.name == o));
            if let Some(p) = vlan_policy {
                if !p.pipes.is_empty() {
                    out.push((
                        format!("{path}.output"),
                        format!(
                            "{:?} is not a [[port]]: its output policy only sets 802.1p, and policy {:?} has pipes: pipes are per port (give them to its port's output policy)",
                            f.name, p.name
                        ),
                    ));
                } else if p.shaper.is_some() {
                    out.push((
                        format!("{path}.output"),
                        format!(
                            "{:?} is not a [[port]]: its output policy only sets 802.1p (the classes' pcp), and policy {:?} has a shaper: shaping is per port (give the shaper to its port's output policy)",
                            f.name, p.name
                        ),
                    ));
                } else if !p.classes.iter().any(|c| c.pcp.is_some()) {
                    out.push((
                        format!("{path}.output"),
                        format!(
                            "{:?} is not a [[port]]: its output policy only sets 802.1p, and no class of policy {:?} has a pcp",
                            f.name, p.name
                        ),
                    ));
                }
            }
            if let Some(k) = ports.iter().position(|p| *p == f.name) {
                if f.output.is_some() && k >= crate::node::MAX_PORTS {
                    out.push((
                        format!("{path}.output"),
                        format!(
                            "{:?} is [[port]] number {}: output scheduling covers the first {} ports only",
                            f.name,
                            k + 1,
                            crate::node::MAX_PORTS
                        ),
                    ));
                }
            }
        }
        out
    }

    /// Compile a config that passed [`QosConfig::validate`] for the fast path's
    /// `interfaces` (by index), of which the first `ports` are ports (VLAN sub-interfaces
    /// and tunnels follow). Policers whose spec did not change are taken from `old`,
    /// their buckets and counters as they are.
    pub fn compile(
        &self,
        interfaces: &[String],
        ports: usize,
        old: &Compiled,
        now_ns: u64,
    ) -> Result<Compiled, String> {
        let mut policers: Vec<(String, Arc<Policer>)> = Vec::new();
        for p in &self.policers {
            let spec =
                Self::policer_spec(p).map_err(|(k, e)| format!("policer {}: {k}: {e}", p.name))?;
            let keep = old
                .policers
                .iter()
                .find(|(n, q)| n == &p.name && *q.spec() == spec)
                .map(|(_, q)| q.clone());
            policers.push((
                p.name.clone(),
                keep.unwrap_or_else(|| Arc::new(Policer::new(spec, now_ns))),
            ));
        }
        let policer = |n: &Option<String>| {
            n.as_ref().and_then(|n| {
                policers
                    .iter()
                    .find(|(m, _)| m == n)
                    .map(|(_, p)| p.clone())
            })
        };
        // A policy's number: its place in the list, from 1 (0: none).
        let number = |name: &str| {
            self.policies
                .iter()
                .position(|p| p.name == name)
                .map(|i| i + 1)
                .filter(|&n| n <= MAX_POLICY_NUMBER)
                .map_or(0, |n| n as u16)
        };
        let mut c = Compiled {
            input: vec![None; interfaces.len()],
            output: vec![None; interfaces.len()],
            output_policy: vec![0; interfaces.len()],
            pcp_out: vec![None; interfaces.len()],
            policers: Vec::new(),
        };
        for f in &self.interfaces {
            let Some(idx) = interfaces.iter().position(|n| n == &f.name) else {
                return Err(format!("interface {:?} is not in the fast path", f.name));
            };
            if let Some(pn) = &f.input {
                let p = self
                    .policies
                    .iter()
                    .find(|p| &p.name == pn)
                    .ok_or(format!("unknown policy {pn:?}"))?;
                let sched = Self::sched_spec(p, "").map_err(|e| format!("policy {pn}: {e:?}"))?;
                let class_list: Vec<&str> = p.classes.iter().map(|c| c.name.as_str()).collect();
                let rules = RuleTable::compile(&p.rules, &class_list)
                    .map_err(|e| format!("policy {pn}: {e}"))?;
                let mut named = 0u64;
                let mut by_pcp = [NO_CLASS; 8];
                for (j, k) in p.classes.iter().enumerate() {
                    for d in k.dscp.iter().filter_map(|d| parse_dscp(d).ok()) {
                        named |= 1 << d;
                    }
                    for &q in &k.pcp_in {
                        if let Some(slot) = by_pcp.get_mut(q as usize) {
                            *slot = j as u8;
                        }
                    }
                }
                let mut input = InputPolicy {
                    policy: pn.clone(),
                    number: number(pn),
                    trusted: f.trusted,
                    rules: rules.map(Arc::new),
                    rule_counts: None,
                    by_dscp: sched.by_dscp,
                    named,
                    by_pcp,
                    default_class: sched.default_class,
                    classes: p
                        .classes
                        .iter()
                        .map(|k| InputClass {
                            mark: k.mark.as_ref().and_then(|m| parse_dscp(m).ok()),
                            policer: policer(&k.policer),
                        })
                        .collect(),
                    policer: policer(&p.policer),
                    plain: None,
                };
                input.plain = input.plain_table();
                c.input[idx] = Some(input);
            }
            if let Some(pn) = &f.output {
                let p = self
                    .policies
                    .iter()
                    .find(|p| &p.name == pn)
                    .ok_or(format!("unknown policy {pn:?}"))?;
                let sched = Self::sched_spec(p, "").map_err(|e| format!("policy {pn}: {e:?}"))?;
                if idx >= ports {
                    // A VLAN sub-interface: 802.1p by class, and by the class of each DSCP.
                    let pcp = |k: Option<&ClassConfig>| k.and_then(|k| k.pcp).unwrap_or(NO_PCP);
                    let mut out = PcpOut {
                        policy: number(pn),
                        by_class: [NO_PCP; MAX_CLASSES],
                        by_dscp: [NO_PCP; 64],
                    };
                    for (j, m) in out.by_class.iter_mut().enumerate() {
                        *m = pcp(p.classes.get(j));
                    }
                    for (d, m) in out.by_dscp.iter_mut().enumerate() {
                        *m = pcp(p.classes.get(sched.class_of(d as u8) as usize));
                    }
                    c.pcp_out[idx] = Some(out);
                    continue;
                }
                if idx >= crate::node::MAX_PORTS {
                    return Err(format!(
                        "interface {:?} is fast-path interface {} (ports, then VLAN sub-interfaces): egress scheduling covers the first {} only",
                        f.name,
                        idx + 1,
                        crate::node::MAX_PORTS
                    ));
                }
                c.output[idx] = Some(sched);
                c.output_policy[idx] = number(pn);
            }
        }
        c.policers = policers;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[[policer]]
name = "af4-in"
kind = "trtcm"
cir = "4mbit"
cbs = 15000
pir = "8mbit"
ebs = 30000
yellow = "af42"

[[policy]]
name = "edge"
default_class = "be"
shaper = "10mbit"

[[policy.class]]
name = "ef"
dscp = ["ef"]
priority = 0
max_rate = "30%"

[[policy.class]]
name = "af4"
dscp = ["af41", "af42", 38]
policer = "af4-in"
weight = 40

[[policy.class]]
name = "be"
weight = 60
codel = true

[[interface]]
name = "eth0"
trusted = true
input = "edge"
output = "edge"
"#;

    fn cfg(text: &str) -> QosConfig {
        toml::from_str(text).unwrap()
    }

    const IFS: &[&str] = &["eth0", "eth1", "eth0.100"];
    const PORTS: &[&str] = &["eth0", "eth1"];
    const VLANS: &[&str] = &["eth0.100"];

    #[test]
    fn a_good_config_compiles() {
        let c = cfg(GOOD);
        assert_eq!(
            c.validate(IFS, PORTS, VLANS),
            Vec::<(String, String)>::new()
        );
        let names: Vec<String> = IFS.iter().map(|s| s.to_string()).collect();
        let k = c.compile(&names, 2, &Compiled::default(), 0).unwrap();
        let s = k.output[0].as_ref().unwrap();
        assert_eq!(s.rate_bps, 10_000_000);
        assert_eq!(s.classes[0].max_bps, 3_000_000);
        assert_eq!(s.class_of(46), 0);
        assert_eq!(s.class_of(36), 1);
        assert_eq!(s.class_of(38), 1);
        assert_eq!(s.class_of(10), 2);
        assert!(s.classes[2].codel.is_some());
        s.validate().unwrap();
        let i = k.input[0].as_ref().unwrap();
        assert!(i.trusted && i.classes[1].policer.is_some());
        assert!(k.input[1].is_none() && k.output[1].is_none());
        // The same policy in and out: the same number, for the scheduler to take the
        // class chosen on input.
        assert_eq!((k.output_policy[0], i.number), (1, 1));
        assert_eq!(k.output_policy[1..], [0, 0]);
        // Recompiled unchanged, the policer is the same one (its buckets carry on).
        let k2 = c.compile(&names, 2, &k, 5).unwrap();
        assert!(Arc::ptr_eq(&k.policers[0].1, &k2.policers[0].1));
    }

    #[test]
    fn a_policy_decided_by_the_dscp_alone_gets_a_table_that_decides_the_same() {
        let names: Vec<String> = IFS.iter().map(|s| s.to_string()).collect();
        // GOOD's AF4 class has a policer: no table, the node decides packet by packet.
        let k = cfg(GOOD)
            .compile(&names, 2, &Compiled::default(), 0)
            .unwrap();
        assert!(k.input[0].as_ref().unwrap().plain.is_none());
        // Without it, trusted and untrusted, marks and all: the table is the decision.
        for trusted in [true, false] {
            let mut c = cfg(GOOD);
            c.policers.clear();
            c.policies[0].classes[1].policer = None;
            c.policies[0].classes[1].mark = Some(DscpValue::Name("af41".into()));
            c.policies[0].classes[2].mark = Some(DscpValue::Name("cs0".into()));
            c.interfaces[0].trusted = trusted;
            assert_eq!(
                c.validate(IFS, PORTS, VLANS),
                Vec::<(String, String)>::new()
            );
            let k = c.compile(&names, 2, &Compiled::default(), 0).unwrap();
            let i = k.input[0].as_ref().unwrap();
            let t = i.plain.expect("a table");
            for d in 0..64u8 {
                let crate::classify::Verdict::Pass { class, dscp } = i.decide(0, d, 100) else {
                    panic!("no policer, no drop");
                };
                assert_eq!(
                    t[d as usize],
                    u16::from(class) << 8 | u16::from(dscp),
                    "dscp {d}"
                );
            }
            if trusted {
                assert_eq!(t[46], 46, "EF kept in class 0");
                assert_eq!(t[36], 1 << 8 | 34, "AF42 re-marked AF41 in class 1");
            }
            assert_eq!(
                t[8],
                2 << 8,
                "CS1 re-marked CS0 in class 2 (or untrusted: the default)"
            );
        }
        // Classified by 802.1p: the frame's tag matters, no table.
        let mut c = cfg(GOOD);
        c.policers.clear();
        c.policies[0].classes[1].policer = None;
        c.policies[0].classes[0].pcp_in = vec![5];
        let k = c.compile(&names, 2, &Compiled::default(), 0).unwrap();
        assert!(k.input[0].as_ref().unwrap().plain.is_none());
    }

    #[test]
    fn output_policies_beyond_the_schedulers_ports_are_refused() {
        let mut c = cfg(GOOD);
        let ports: Vec<String> = (0..65).map(|k| format!("p{k}")).collect();
        let refs: Vec<&str> = ports.iter().map(String::as_str).collect();
        c.interfaces.truncate(1);
        c.interfaces[0].input = None;
        c.interfaces[0].name = "p64".into();
        let p = c.validate(&refs, &refs, &[]);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].0, "qos.interface[0].output");
        assert!(p[0].1.contains("number 65"), "{p:?}");
        let e = c
            .compile(&ports, ports.len(), &Compiled::default(), 0)
            .unwrap_err();
        assert!(e.contains("\"p64\""), "{e}");
        c.interfaces[0].name = "p63".into();
        assert!(c.validate(&refs, &refs, &[]).is_empty());
        assert!(c
            .compile(&ports, ports.len(), &Compiled::default(), 0)
            .unwrap()
            .output[63]
            .is_some());
    }

    fn problems(edit: impl Fn(&mut QosConfig)) -> Vec<(String, String)> {
        let mut c = cfg(GOOD);
        edit(&mut c);
        c.validate(IFS, PORTS, VLANS)
    }

    #[test]
    fn hostile_configs_are_refused_with_their_locations() {
        let p = problems(|c| c.policers[0].cir = RateValue::Bps(0));
        assert_eq!(
            p,
            [(
                "qos.policer[0].cir".to_string(),
                "0 bit/s is out of range: 1 bit/s to 1 Tbit/s".to_string()
            )]
        );
        let p =
            problems(|c| c.policies[0].classes[2].min_rate = Some(RateValue::Text("80%".into())));
        assert_eq!(p, [], "80 % is within the shaper");
        let p = problems(|c| {
            c.policies[0].classes[1].min_rate = Some(RateValue::Text("60%".into()));
            c.policies[0].classes[2].min_rate = Some(RateValue::Text("50%".into()));
        });
        assert_eq!(p[0].0, "qos.policy[0].class");
        assert!(
            p[0].1.contains(
                "min_rate add up to 11000000 bit/s, more than the shaper's 10000000 bit/s"
            ),
            "{p:?}"
        );
        let p = problems(|c| c.interfaces[0].input = Some("nope".into()));
        assert_eq!(
            p,
            [(
                "qos.interface[0].input".to_string(),
                "unknown policy \"nope\"".to_string()
            )]
        );
        let p = problems(|c| c.policies[0].default_class = "gold".into());
        assert_eq!(
            p[0],
            (
                "qos.policy[0].default_class".to_string(),
                "\"gold\" is not a class of policy \"edge\"".to_string()
            )
        );
        let p = problems(|c| c.policies[0].classes[1].policer = Some("x".into()));
        assert_eq!(p[0].0, "qos.policy[0].class[1].policer");
        let p = problems(|c| {
            c.policies[0].classes[0]
                .dscp
                .push(DscpValue::Name("af41".into()))
        });
        assert_eq!(p[0].0, "qos.policy[0].class[1].dscp[0]");
        let p = problems(|c| c.policies[0].classes[0].dscp.push(DscpValue::Num(64)));
        assert_eq!(
            p[0],
            (
                "qos.policy[0].class[0].dscp[1]".to_string(),
                "DSCP 64 is out of range: 0 to 63".to_string()
            )
        );
        let p = problems(|c| c.policies[0].shaper = Some(RateValue::Text("10 furlongs".into())));
        assert_eq!(p[0].0, "qos.policy[0].shaper");
        let p = problems(|c| c.policies[0].classes[2].weight = Some(0));
        assert_eq!(p[0].0, "qos.policy[0].class[2].weight");
        let p = problems(|c| c.policies[0].classes[0].codel = true);
        assert_eq!(p[0].0, "qos.policy[0].class[0].codel");
        let p = problems(|c| c.policers[0].pir = None);
        assert_eq!(
            p[0],
            (
                "qos.policer[0].pir".to_string(),
                "trtcm needs pir, its peak rate".to_string()
            )
        );
        let p = problems(|c| c.policers[0].pir = Some(RateValue::Text("1mbit".into())));
        assert_eq!(
            p[0],
            (
                "qos.policer[0].pir".to_string(),
                "pir must be at least cir (RFC 2698)".to_string()
            )
        );
        let p = problems(|c| c.policers[0].kind = "leaky".into());
        assert_eq!(p[0].0, "qos.policer[0].kind");
        let p = problems(|c| c.policers[0].red = Some(DscpValue::Name("sideways".into())));
        assert_eq!(p[0].0, "qos.policer[0].red");
        let p = problems(|c| c.interfaces[0].name = "eth0.100".into());
        assert_eq!(
            p[0],
            (
                "qos.interface[0].output".to_string(),
                "\"eth0.100\" is not a [[port]]: its output policy only sets 802.1p (the classes' pcp), and policy \"edge\" has a shaper: shaping is per port (give the shaper to its port's output policy)".to_string()
            )
        );
        let p = problems(|c| c.interfaces[0].name = "eth9".into());
        assert_eq!(p[0].0, "qos.interface[0].name");
        let p = problems(|c| c.policies[0].classes[2].limit = Some(100_000));
        assert_eq!(p[0].0, "qos.policy[0].class[2].limit");
        let p = problems(|c| {
            c.policies[0].shaper = None;
        });
        assert_eq!(p[0].0, "qos.policy[0].class[0].max_rate");
        assert!(p[0].1.contains("the policy has none"));
    }

    fn wred(min: i64, max: i64, p: f64) -> WredConfig {
        WredConfig {
            min,
            max,
            probability: Probability(p),
            weight: None,
            yellow: None,
            red: None,
        }
    }

    #[test]
    fn wred_compiles_with_a_profile_per_drop_precedence() {
        let text = GOOD.replace(
            "weight = 60\ncodel = true",
            "weight = 60\nlimit = 128\nwred = { min = 32, max = 96, probability = 0.1, red = { min = 16, max = 64, probability = 1 } }",
        );
        let c = cfg(&text);
        assert_eq!(
            c.validate(IFS, PORTS, VLANS),
            Vec::<(String, String)>::new()
        );
        let names: Vec<String> = IFS.iter().map(|s| s.to_string()).collect();
        let k = c.compile(&names, 2, &Compiled::default(), 0).unwrap();
        let s = k.output[0].as_ref().unwrap();
        let w = s.classes[2].wred.unwrap();
        assert!(s.classes[2].codel.is_none());
        assert_eq!(w.weight, 9, "the default weight");
        let green = WredProfile {
            min: 32,
            max: 96,
            max_p: 429_496_730,
        };
        assert_eq!(w.profiles[0], green);
        assert_eq!(w.profiles[1], green, "yellow left out: as green");
        assert_eq!(
            w.profiles[2],
            WredProfile {
                min: 16,
                max: 64,
                max_p: P_ONE
            }
        );
        // The idle decay's packet: 1,000 bytes at the 10 Mbit/s shaper.
        assert_eq!(w.idle_packet_ns, 800_000);
        s.validate().unwrap();
        // Written out and read back, the same.
        let again: QosConfig = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(again, c);
        // A key it does not know is refused as the file is read.
        let e = toml::from_str::<QosConfig>(
            &text.replace("probability = 0.1,", "probability = 0.1, ecn = true,"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("unknown field `ecn`"), "{e}");
    }

    #[test]
    fn hostile_wred_values_are_refused_by_name() {
        let one = |w: WredConfig| {
            problems(move |c| {
                c.policies[0].classes[2].codel = false;
                c.policies[0].classes[2].wred = Some(w.clone());
            })
        };
        let cp = "qos.policy[0].class[2]";
        assert_eq!(one(wred(32, 96, 0.1)), []);
        assert_eq!(
            one(wred(-1, 96, 0.1)),
            [(
                format!("{cp}.wred.min"),
                "-1 packets: min is at least 0".to_string()
            )]
        );
        assert_eq!(
            one(wred(32, 300, 0.1)),
            [(
                format!("{cp}.wred.max"),
                "300 packets is out of range: 1 to the class's limit (256 packets)".to_string()
            )]
        );
        assert_eq!(
            one(wred(96, 96, 0.1)),
            [(
                format!("{cp}.wred.min"),
                "96 packets: min must be below max (96)".to_string()
            )]
        );
        for p in [0.0, -0.5, 1.5, f64::NAN, f64::INFINITY] {
            let got = one(wred(32, 96, p));
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(got[0].0, format!("{cp}.wred.probability"));
            assert!(
                got[0].1.contains("out of range: above 0, at most 1"),
                "{got:?}"
            );
        }
        for w in [0, 17, -3] {
            let got = one(WredConfig {
                weight: Some(w),
                ..wred(32, 96, 0.1)
            });
            assert_eq!(
                got,
                [(
                    format!("{cp}.wred.weight"),
                    format!("{w} is out of range: 1 to 16 (the average's weight is 2^-weight)")
                )]
            );
        }
        let got = one(WredConfig {
            yellow: Some(WredProfileConfig {
                min: 10,
                max: 1_000,
                probability: Probability(0.2),
            }),
            ..wred(32, 96, 0.1)
        });
        assert_eq!(got[0].0, format!("{cp}.wred.yellow.max"), "{got:?}");
        // Not with CoDel, not on a strict-priority class.
        let got = problems(|c| {
            c.policies[0].classes[2].wred = Some(wred(32, 96, 0.1));
            c.policies[0].classes[2].codel = true;
        });
        assert_eq!(
            got,
            [(
                format!("{cp}.wred"),
                "a class has CoDel or WRED, not both (leave out codel or wred)".to_string()
            )]
        );
        let got = problems(|c| c.policies[0].classes[0].wred = Some(wred(32, 96, 0.1)));
        assert_eq!(got[0].0, "qos.policy[0].class[0].wred", "{got:?}");
        assert!(got[0].1.contains("not strict-priority"), "{got:?}");
        // Every problem at once, each by its name.
        let got = one(WredConfig {
            weight: Some(99),
            red: Some(WredProfileConfig {
                min: -5,
                max: 0,
                probability: Probability(2.0),
            }),
            ..wred(32, 96, 0.1)
        });
        let keys: Vec<&str> = got.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "qos.policy[0].class[2].wred.red.min",
                "qos.policy[0].class[2].wred.red.max",
                "qos.policy[0].class[2].wred.red.probability",
                "qos.policy[0].class[2].wred.weight"
            ]
        );
    }

    const MATCH: &str = r#"
[[policy]]
name = "edge"
default_class = "be"

[[policy.class]]
name = "ef"
dscp = ["ef"]
pcp = 5
pcp_in = [5, 6]

[[policy.class]]
name = "af4"
dscp = ["af41"]
mark = "af41"
pcp = 4

[[policy.class]]
name = "be"

[[policy.rule]]
class = "ef"
src = "10.1.0.0/16"
protocol = "udp"
dport = "5060-5061"

[[policy.rule]]
class = "af4"
dst = "2001:db8::/32"

[[interface]]
name = "eth0"
input = "edge"

[[interface]]
name = "eth0.100"
trusted = true
input = "edge"
output = "edge"
"#;

    #[test]
    fn rules_and_8021p_compile() {
        let c = cfg(MATCH);
        assert_eq!(
            c.validate(IFS, PORTS, VLANS),
            Vec::<(String, String)>::new()
        );
        let names: Vec<String> = IFS.iter().map(|s| s.to_string()).collect();
        let k = c.compile(&names, 2, &Compiled::default(), 0).unwrap();
        // eth0: untrusted, but its rules classify.
        let i = k.input[0].as_ref().unwrap();
        let r = i.rules.as_ref().unwrap();
        let a = |s: &str| s.parse().unwrap();
        assert_eq!(
            r.class4(a("10.1.0.1"), a("10.9.9.9"), (1, 5060, 17), 0, true),
            Some(0)
        );
        assert_eq!(i.class_of_tagged(46, Some(5)), 2, "untrusted: default");
        // eth0.100: trusted, PCP 5 or 6 is EF when the DSCP is no class's.
        let v = k.input[2].as_ref().unwrap();
        assert_eq!(v.class_of_tagged(0, Some(6)), 0);
        assert_eq!(v.class_of_tagged(34, Some(6)), 1);
        assert_eq!(v.class_of_tagged(0, Some(4)), 2);
        // What leaves eth0.100: EF with PCP 5, AF41 with 4, the rest as tagged (no
        // scheduler: it is not a port).
        assert!(k.output[2].is_none() && k.output[0].is_none());
        let m = k.pcp_out[2].unwrap().by_dscp;
        assert_eq!((m[46], m[34], m[0], m[36]), (5, 4, NO_PCP, NO_PCP));
        assert!(k.pcp_out[0].is_none() && k.pcp_out[1].is_none());
    }

    #[test]
    fn bad_rules_and_8021p_are_refused_with_their_locations() {
        let problems = |edit: &dyn Fn(&mut QosConfig)| {
            let mut c = cfg(MATCH);
            edit(&mut c);
            c.validate(IFS, PORTS, VLANS)
        };
        let p = problems(&|c| c.policies[0].classes[0].pcp = Some(8));
        assert_eq!(
            p,
            [(
                "qos.policy[0].class[0].pcp".to_string(),
                "802.1p priority 8 is out of range: 0 to 7".to_string()
            )]
        );
        let p = problems(&|c| c.policies[0].classes[1].pcp_in = vec![3, 6]);
        assert_eq!(
            p,
            [(
                "qos.policy[0].class[1].pcp_in[1]".to_string(),
                "802.1p priority 6 is already in class \"ef\"".to_string()
            )]
        );
        let p = problems(&|c| c.policies[0].classes[1].pcp_in = vec![9]);
        assert_eq!(p[0].0, "qos.policy[0].class[1].pcp_in[0]");
        let p = problems(&|c| c.policies[0].rules[1].class = "gold".into());
        assert_eq!(
            p,
            [(
                "qos.policy[0].rule[1].class".to_string(),
                "\"gold\" is not a class of the policy".to_string()
            )]
        );
        let p = problems(&|c| {
            c.policies[0].rules[0].dst = crate::rules::Prefixes::One("2001:db8::/32".into())
        });
        assert_eq!(p[0].0, "qos.policy[0].rule[0].dst");
        assert!(p[0].1.contains("a rule is IPv4 or IPv6"), "{p:?}");
        let p = problems(&|c| c.policies[0].rules[0].protocol = None);
        assert_eq!(p[0].0, "qos.policy[0].rule[0].dport");
        // A VLAN's output policy sets 802.1p only: one without a pcp does nothing.
        let p = problems(&|c| {
            for k in &mut c.policies[0].classes {
                k.pcp = None;
            }
        });
        assert_eq!(p[0].0, "qos.interface[1].output");
        assert!(
            p[0].1.contains("no class of policy \"edge\" has a pcp"),
            "{p:?}"
        );
        // A tunnel is neither: its output policy would do nothing.
        let mut c = cfg(MATCH);
        c.interfaces[1].name = "ipsec0".into();
        let p = c.validate(&["eth0", "eth1", "ipsec0"], PORTS, &[]);
        assert_eq!(p[0].0, "qos.interface[1].output", "{p:?}");
        assert!(p[0].1.contains("neither a [[port]]"), "{p:?}");
    }

    #[test]
    fn rates_and_dscps_parse() {
        let r = |s: &str| parse_rate(&RateValue::Text(s.into()), Some(1_000_000));
        assert_eq!(r("10mbit"), Ok(10_000_000));
        assert_eq!(r("1 Gbit"), Ok(1_000_000_000));
        assert_eq!(r("250kbit"), Ok(250_000));
        assert_eq!(r("40%"), Ok(400_000));
        assert!(r("0%").is_err() && r("101%").is_err() && r("fast").is_err());
        assert_eq!(parse_dscp(&DscpValue::Name("af41".into())), Ok(34));
        assert!(parse_dscp(&DscpValue::Name("af51".into())).is_err());
    }

    const PIPES: &str = r#"
[[policy]]
name = "bng"
default_class = "be"
shaper = "1gbit"

[[policy.class]]
name = "ef"
dscp = ["ef"]
priority = 0
max_rate = "10%"

[[policy.class]]
name = "be"
weight = 1

[[policy.pipe]]
name = "sub1"
rate = "100mbit"
dst = "10.1.0.0/24"

[[policy.pipe]]
name = "sub2"
rate = "20%"
burst = 50000
limit = 32
dst = ["10.2.0.0/24", "2001:db8:2::/48"]

[[interface]]
name = "eth0"
output = "bng"
"#;

    #[test]
    fn pipes_compile_with_their_rates_bursts_and_limits() {
        let c = cfg(PIPES);
        assert_eq!(
            c.validate(IFS, PORTS, VLANS),
            Vec::<(String, String)>::new()
        );
        let names: Vec<String> = IFS.iter().map(|s| s.to_string()).collect();
        let k = c.compile(&names, 2, &Compiled::default(), 0).unwrap();
        let s = k.output[0].as_ref().unwrap();
        assert_eq!(s.validate(), Ok(()));
        let p: Vec<_> = s
            .pipes
            .iter()
            .map(|p| {
                (
                    p.name.as_str(),
                    p.rate_bps,
                    p.burst_bytes,
                    p.limit,
                    p.dst.len(),
                )
            })
            .collect();
        assert_eq!(
            p,
            [
                ("sub1", 100_000_000, 25_000, DEFAULT_PIPE_LIMIT, 1),
                ("sub2", 200_000_000, 50_000, 32, 2)
            ]
        );
    }

    #[test]
    fn hostile_pipes_are_refused_with_their_locations() {
        let pipes = |edit: &dyn Fn(&mut PolicyConfig)| {
            let mut c = cfg(PIPES);
            edit(&mut c.policies[0]);
            c.validate(IFS, PORTS, VLANS)
        };
        let has = |p: &[(String, String)], path: &str, what: &str| {
            assert!(
                p.iter().any(|(k, m)| k == path && m.contains(what)),
                "{path}: {what:?} not in {p:?}"
            );
        };
        has(
            &pipes(&|p| p.shaper = None),
            "qos.policy[0].pipe",
            "needs a shaper",
        );
        has(
            &pipes(&|p| p.pipes[1].rate = Some(RateValue::Bps(0))),
            "qos.policy[0].pipe[1].rate",
            "out of range",
        );
        has(
            &pipes(&|p| p.pipes[1].rate = Some(RateValue::Text("120%".into()))),
            "qos.policy[0].pipe[1].rate",
            "a share is 1% to 100%",
        );
        has(
            &pipes(&|p| p.pipes[0].rate = Some(RateValue::Text("2gbit".into()))),
            "qos.policy[0].pipe[0].rate",
            "above the policy's shaper",
        );
        has(
            &pipes(&|p| p.pipes[0].burst = Some(100)),
            "qos.policy[0].pipe[0].burst",
            "out of range",
        );
        has(
            &pipes(&|p| p.pipes[0].limit = Some(0)),
            "qos.policy[0].pipe[0].limit",
            "out of range",
        );
        has(
            &pipes(&|p| p.pipes[0].dst = crate::rules::Prefixes::One("10.1.0.1/24".into())),
            "qos.policy[0].pipe[0].dst",
            "host bits",
        );
        has(
            &pipes(&|p| {
                p.pipes[1].dst = crate::rules::Prefixes::Many(vec![
                    "2001:db8:3::/48".into(),
                    "10.1.0.0/24".into(),
                ])
            }),
            "qos.policy[0].pipe[1].dst[1]",
            "already a destination of pipe \"sub1\"",
        );
        has(
            &pipes(&|p| p.pipes[0].dst = crate::rules::Prefixes::Many(vec![])),
            "qos.policy[0].pipe[0].dst",
            "needs its destinations",
        );
        has(
            &pipes(&|p| p.pipes[1].name = "sub1".into()),
            "qos.policy[0].pipe[1].name",
            "defined twice",
        );
        let many = |n: usize, limit: usize| {
            move |p: &mut PolicyConfig| {
                let one = p.pipes[0].clone();
                p.pipes = (0..n)
                    .map(|k| PipeConfig {
                        name: format!("s{k}"),
                        rate: Some(RateValue::Text("1mbit".into())),
                        limit: Some(limit),
                        dst: crate::rules::Prefixes::One(format!(
                            "10.{}.{}.0/24",
                            k / 256,
                            k % 256
                        )),
                        ..one.clone()
                    })
                    .collect();
            }
        };
        has(
            &pipes(&many(1_025, 1)),
            "qos.policy[0].pipe",
            "at most 1024",
        );
        has(
            &pipes(&many(1_024, 128)),
            "qos.policy[0].pipe",
            "lower the pipes' limit",
        );
        assert!(pipes(&many(1_024, 64)).is_empty());
        // On a VLAN sub-interface.
        let mut c = cfg(PIPES);
        c.interfaces[0].name = "eth0.100".into();
        let p = c.validate(IFS, PORTS, VLANS);
        has(&p, "qos.interface[0].output", "has pipes");
        // Unknown keys.
        let e = toml::from_str::<QosConfig>(&PIPES.replace("limit = 32", "limt = 32"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `limt`"), "{e}");
    }

    const PROFILES: &str = r#"
[[policy]]
name = "bng"
default_class = "be"
shaper = "1gbit"

[[policy.class]]
name = "ef"
dscp = ["ef"]
priority = 0

[[policy.class]]
name = "af"
dscp = ["af41"]
weight = 1

[[policy.class]]
name = "be"
weight = 1

[[policy.pipe_profile]]
name = "line100"
rate = "100mbit"
burst = 40000
limit = 32
weights = { af = 3 }

[[policy.pipe_profile]]
name = "unused"
rate = "1mbit"

[[policy.pipe]]
name = "sub1"
profile = "line100"
dst = "10.1.0.0/24"

[[policy.pipe]]
name = "sub2"
profile = "line100"
rate = "20%"
limit = 16
dst = "10.2.0.0/24"

[[policy.pipe]]
name = "sub3"
rate = "50mbit"
dst = "10.3.0.0/24"

[[interface]]
name = "eth0"
output = "bng"
"#;

    #[test]
    fn pipes_take_their_profiles_values_unless_they_give_their_own() {
        let c = cfg(PROFILES);
        assert_eq!(
            c.validate(IFS, PORTS, VLANS),
            Vec::<(String, String)>::new(),
            "an unused profile is fine"
        );
        let names: Vec<String> = IFS.iter().map(|s| s.to_string()).collect();
        let k = c.compile(&names, 2, &Compiled::default(), 0).unwrap();
        let s = k.output[0].as_ref().unwrap();
        assert_eq!(s.validate(), Ok(()));
        let p: Vec<_> = s
            .pipes
            .iter()
            .map(|p| {
                (
                    p.name.as_str(),
                    p.profile.as_deref(),
                    p.rate_bps,
                    p.burst_bytes,
                    p.limit,
                    p.weights.clone(),
                )
            })
            .collect();
        assert_eq!(
            p,
            [
                // The profile's all: weights by class index (ef's own, af 3, be's own).
                (
                    "sub1",
                    Some("line100"),
                    100_000_000,
                    40_000,
                    32,
                    vec![1, 3, 1]
                ),
                // Its own rate and limit, the profile's burst and weights.
                (
                    "sub2",
                    Some("line100"),
                    200_000_000,
                    40_000,
                    16,
                    vec![1, 3, 1]
                ),
                // No profile: defaults, the classes' weights.
                ("sub3", None, 50_000_000, 15_000, DEFAULT_PIPE_LIMIT, vec![]),
            ]
        );
        // A profile without weights leaves the classes' own.
        let mut c = cfg(PROFILES);
        c.policies[0].pipe_profiles[0].weights.clear();
        let k = c.compile(&names, 2, &Compiled::default(), 0).unwrap();
        assert!(k.output[0].as_ref().unwrap().pipes[0].weights.is_empty());
        // A pipe's own weights go over its profile's class by class, and a pipe without a
        // profile may have its own.
        let mut c = cfg(PROFILES);
        c.policies[0].pipes[1].weights.insert("be".into(), 5);
        c.policies[0].pipes[2].weights.insert("af".into(), 2);
        assert_eq!(
            c.validate(IFS, PORTS, VLANS),
            Vec::<(String, String)>::new()
        );
        let k = c.compile(&names, 2, &Compiled::default(), 0).unwrap();
        let w: Vec<Vec<u32>> = k.output[0]
            .as_ref()
            .unwrap()
            .pipes
            .iter()
            .map(|p| p.weights.clone())
            .collect();
        assert_eq!(w, [vec![1, 3, 1], vec![1, 3, 5], vec![1, 2, 1]]);
        // It round-trips through TOML.
        let back: QosConfig = toml::from_str(&toml::to_string(&cfg(PROFILES)).unwrap()).unwrap();
        assert_eq!(back, cfg(PROFILES));
    }

    #[test]
    fn classes_maximum_rates_within_pipes_compile_over_their_profiles() {
        let names: Vec<String> = IFS.iter().map(|s| s.to_string()).collect();
        // line100 caps EF at 10 % of each pipe's rate and AF at 30 Mbit/s; sub2 (200
        // Mbit/s) gives AF its own 50 % and BE 150 Mbit/s; sub3 has no profile and none.
        let mut c = cfg(PROFILES);
        let rate = |t: &str| RateValue::Text(t.into());
        let f = &mut c.policies[0].pipe_profiles[0];
        f.max_rates.insert("ef".into(), rate("10%"));
        f.max_rates.insert("af".into(), rate("30mbit"));
        f.min_rates.insert("af".into(), rate("20%"));
        let q = &mut c.policies[0].pipes[1];
        q.max_rates.insert("af".into(), rate("50%"));
        q.max_rates.insert("be".into(), RateValue::Bps(150_000_000));
        q.min_rates.insert("be".into(), rate("50mbit"));
        assert_eq!(
            c.validate(IFS, PORTS, VLANS),
            Vec::<(String, String)>::new()
        );
        let k = c.compile(&names, 2, &Compiled::default(), 0).unwrap();
        let s = k.output[0].as_ref().unwrap();
        assert_eq!(s.validate(), Ok(()));
        let m: Vec<Vec<u64>> = s.pipes.iter().map(|p| p.max_bps.clone()).collect();
        assert_eq!(
            m,
            [
                vec![10_000_000, 30_000_000, 0],
                vec![20_000_000, 100_000_000, 150_000_000],
                vec![],
            ]
        );
        // Minimums the same way: line100's AF 20 % of each pipe, sub2's own BE.
        let m: Vec<Vec<u64>> = s.pipes.iter().map(|p| p.min_bps.clone()).collect();
        assert_eq!(
            m,
            [
                vec![0, 20_000_000, 0],
                vec![0, 40_000_000, 50_000_000],
                vec![]
            ]
        );
        // It round-trips through TOML.
        let back: QosConfig = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        // Hostile ones, each at its place: (where, class, rate, path, problem), "where" a
        // pipe's index or the profile line100 (None). A profile's own problems are at the
        // profile, once; one of its rates above a pipe's rate at the pipe, naming it.
        let cases: [(Option<usize>, &str, &str, &str, &str); 9] = [
            (
                Some(2),
                "ef",
                "1mbit",
                "pipe[2].min_rates.ef",
                "a minimum rate is for weighted classes",
            ),
            (
                None,
                "ef",
                "1mbit",
                "pipe_profile[0].min_rates.ef",
                "a minimum rate is for weighted classes",
            ),
            (
                Some(2),
                "af",
                "60mbit",
                "pipe[2].min_rates.af",
                "above the pipe's rate",
            ),
            (
                Some(2),
                "gold",
                "1mbit",
                "pipe[2].max_rates.gold",
                "\"gold\" is not a class of policy \"bng\"",
            ),
            (
                Some(2),
                "af",
                "60mbit",
                "pipe[2].max_rates.af",
                "60000000 bit/s is above the pipe's rate (50000000 bit/s)",
            ),
            (
                Some(2),
                "af",
                "0%",
                "pipe[2].max_rates.af",
                "a share is 1% to 100%",
            ),
            (
                None,
                "gold",
                "1mbit",
                "pipe_profile[0].max_rates.gold",
                "not a class",
            ),
            (
                None,
                "af",
                "fast",
                "pipe_profile[0].max_rates.af",
                "is not a rate",
            ),
            // sub1 has line100's 100 Mbit/s, sub2 its own 200.
            (
                None,
                "af",
                "150mbit",
                "pipe[0].max_rates.af",
                "(its profile \"line100\"'s) is above the pipe's rate",
            ),
        ];
        for (at, class, r, path, what) in cases {
            let mut c = cfg(PROFILES);
            let p = &mut c.policies[0];
            let rates = match (at, path.contains("min_rates")) {
                (Some(k), false) => &mut p.pipes[k].max_rates,
                (Some(k), true) => &mut p.pipes[k].min_rates,
                (None, false) => &mut p.pipe_profiles[0].max_rates,
                (None, true) => &mut p.pipe_profiles[0].min_rates,
            };
            rates.insert(class.into(), rate(r));
            let got = c.validate(IFS, PORTS, VLANS);
            let path = format!("qos.policy[0].{path}");
            assert!(
                got.iter().any(|(k, m)| *k == path && m.contains(what)),
                "{path}: {what:?} not in {got:?}"
            );
            assert_eq!(got.len(), 1, "one problem: {got:?}");
        }
        // A pipe's minimums against its maximums and its rate (sub3: 50 Mbit/s).
        let mut c = cfg(PROFILES);
        let q = &mut c.policies[0].pipes[2];
        q.max_rates.insert("af".into(), rate("10mbit"));
        q.min_rates.insert("af".into(), rate("20mbit"));
        q.min_rates.insert("be".into(), rate("40mbit"));
        assert_eq!(
            c.validate(IFS, PORTS, VLANS),
            [
                (
                    "qos.policy[0].pipe[2].min_rates.af".to_string(),
                    "20000000 bit/s is above the class's maximum in the pipe (10000000 bit/s)"
                        .to_string()
                ),
                (
                    "qos.policy[0].pipe[2].min_rates".to_string(),
                    "the minimum rates add up to 60000000 bit/s, more than the pipe's 50000000 bit/s"
                        .to_string()
                ),
            ]
        );
    }

    #[test]
    fn hostile_pipe_profiles_are_refused_with_their_locations() {
        let profiles = |edit: &dyn Fn(&mut PolicyConfig)| {
            let mut c = cfg(PROFILES);
            edit(&mut c.policies[0]);
            c.validate(IFS, PORTS, VLANS)
        };
        let has = |p: &[(String, String)], path: &str, what: &str| {
            assert!(
                p.iter().any(|(k, m)| k == path && m.contains(what)),
                "{path}: {what:?} not in {p:?}"
            );
        };
        let only = |p: &[(String, String)], path: &str, what: &str| {
            has(p, path, what);
            assert_eq!(p.len(), 1, "one problem: {p:?}");
        };
        only(
            &profiles(&|p| p.pipes[2].profile = Some("line10".into())),
            "qos.policy[0].pipe[2].profile",
            "unknown pipe profile \"line10\"",
        );
        only(
            &profiles(&|p| {
                p.pipe_profiles.clear();
                p.pipes[0].rate = Some(RateValue::Text("1mbit".into()));
                p.pipes[1].profile = None;
            }),
            "qos.policy[0].pipe[0].profile",
            "policy \"bng\" has no [[qos.policy.pipe_profile]]",
        );
        only(
            &profiles(&|p| p.pipe_profiles[0].rate = None),
            "qos.policy[0].pipe[0].rate",
            "a pipe needs a rate: its own, or its profile's",
        );
        only(
            &profiles(&|p| p.pipes[2].rate = None),
            "qos.policy[0].pipe[2].rate",
            "a pipe needs a rate",
        );
        // A profile's bad values are reported once, at the profile, not at each pipe.
        only(
            &profiles(&|p| p.pipe_profiles[0].rate = Some(RateValue::Text("2gbit".into()))),
            "qos.policy[0].pipe_profile[0].rate",
            "above the policy's shaper",
        );
        only(
            &profiles(&|p| p.pipe_profiles[1].rate = Some(RateValue::Text("0%".into()))),
            "qos.policy[0].pipe_profile[1].rate",
            "a share is 1% to 100%",
        );
        only(
            &profiles(&|p| p.pipe_profiles[0].burst = Some(100)),
            "qos.policy[0].pipe_profile[0].burst",
            "out of range",
        );
        only(
            &profiles(&|p| p.pipe_profiles[0].limit = Some(0)),
            "qos.policy[0].pipe_profile[0].limit",
            "out of range",
        );
        only(
            &profiles(&|p| p.pipe_profiles[1].name = "line100".into()),
            "qos.policy[0].pipe_profile[1].name",
            "pipe profile \"line100\" is defined twice",
        );
        only(
            &profiles(&|p| p.pipe_profiles[1].name = "a b".into()),
            "qos.policy[0].pipe_profile[1].name",
            "not a valid name",
        );
        let weight = |class: &str, w: u32| {
            let class = class.to_string();
            move |p: &mut PolicyConfig| {
                p.pipe_profiles[0].weights.insert(class.clone(), w);
            }
        };
        only(
            &profiles(&weight("gold", 2)),
            "qos.policy[0].pipe_profile[0].weights.gold",
            "\"gold\" is not a class of policy \"bng\"",
        );
        only(
            &profiles(&weight("ef", 2)),
            "qos.policy[0].pipe_profile[0].weights.ef",
            "strict priority",
        );
        only(
            &profiles(&weight("be", 0)),
            "qos.policy[0].pipe_profile[0].weights.be",
            "a weight is at least 1",
        );
        // A pipe's own bad values still at the pipe.
        only(
            &profiles(&|p| p.pipes[1].limit = Some(5_000)),
            "qos.policy[0].pipe[1].limit",
            "out of range",
        );
        only(
            &profiles(&|p| {
                p.pipes[2].weights.insert("gold".into(), 2);
            }),
            "qos.policy[0].pipe[2].weights.gold",
            "\"gold\" is not a class of policy \"bng\"",
        );
        only(
            &profiles(&|p| {
                p.pipes[0].weights.insert("af".into(), 0);
            }),
            "qos.policy[0].pipe[0].weights.af",
            "a weight is at least 1",
        );
        // Too many profiles.
        has(
            &profiles(&|p| {
                let one = p.pipe_profiles[1].clone();
                p.pipe_profiles = (0..=MAX_PIPES)
                    .map(|k| PipeProfileConfig {
                        name: format!("p{k}"),
                        ..one.clone()
                    })
                    .collect();
                p.pipes[0].profile = None;
                p.pipes[0].rate = Some(RateValue::Text("1mbit".into()));
                p.pipes[1].profile = None;
            }),
            "qos.policy[0].pipe_profile",
            "at most 1024",
        );
        // Unknown keys.
        let e = toml::from_str::<QosConfig>(&PROFILES.replace("burst = 40000", "brust = 40000"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `brust`"), "{e}");
    }

    const SUBPORTS: &str = r#"
[[policy]]
name = "bng"
default_class = "be"
shaper = "1gbit"

[[policy.class]]
name = "be"
weight = 1

[[policy.subport]]
name = "wholesale-a"
rate = "300mbit"

[[policy.subport]]
name = "wholesale-b"
rate = "50%"
burst = 100000
limit = 256

[[policy.pipe]]
name = "sub1"
subport = "wholesale-a"
rate = "100mbit"
dst = "10.1.0.0/24"

[[policy.pipe]]
name = "sub2"
subport = "wholesale-b"
rate = "100mbit"
dst = "10.2.0.0/24"

[[policy.pipe]]
name = "sub3"
rate = "100mbit"
dst = "10.3.0.0/24"

[[interface]]
name = "eth0"
output = "bng"
"#;

    #[test]
    fn subports_compile_and_their_pipes_name_them() {
        let c = cfg(SUBPORTS);
        assert_eq!(
            c.validate(IFS, PORTS, VLANS),
            Vec::<(String, String)>::new()
        );
        let names: Vec<String> = IFS.iter().map(|s| s.to_string()).collect();
        let k = c.compile(&names, 2, &Compiled::default(), 0).unwrap();
        let s = k.output[0].as_ref().unwrap();
        assert_eq!(s.validate(), Ok(()));
        assert_eq!(
            s.subports,
            [
                SubportSpec {
                    name: "wholesale-a".into(),
                    rate_bps: 300_000_000,
                    burst_bytes: 75_000,
                    limit: None,
                },
                SubportSpec {
                    name: "wholesale-b".into(),
                    rate_bps: 500_000_000,
                    burst_bytes: 100_000,
                    limit: Some(256),
                },
            ]
        );
        let subs: Vec<Option<u16>> = s.pipes.iter().map(|p| p.subport).collect();
        assert_eq!(subs, [Some(0), Some(1), None]);
    }

    #[test]
    fn hostile_subports_are_refused_with_their_locations() {
        let subports = |edit: &dyn Fn(&mut PolicyConfig)| {
            let mut c = cfg(SUBPORTS);
            edit(&mut c.policies[0]);
            c.validate(IFS, PORTS, VLANS)
        };
        let only = |p: &[(String, String)], path: &str, what: &str| {
            assert!(
                p.iter().any(|(k, m)| k == path && m.contains(what)),
                "{path}: {what:?} not in {p:?}"
            );
            assert_eq!(p.len(), 1, "one problem: {p:?}");
        };
        only(
            &subports(&|p| p.pipes[1].subport = Some("wholesale-c".into())),
            "qos.policy[0].pipe[1].subport",
            "unknown subport \"wholesale-c\"",
        );
        only(
            &subports(&|p| p.subports[0].rate = RateValue::Text("2gbit".into())),
            "qos.policy[0].subport[0].rate",
            "above the policy's shaper",
        );
        only(
            &subports(&|p| p.subports[0].rate = RateValue::Bps(0)),
            "qos.policy[0].subport[0].rate",
            "out of range",
        );
        only(
            &subports(&|p| p.subports[1].burst = Some(100)),
            "qos.policy[0].subport[1].burst",
            "out of range",
        );
        only(
            &subports(&|p| {
                p.subports[1].name = "wholesale-a".into();
                p.pipes[1].subport = Some("wholesale-a".into());
            }),
            "qos.policy[0].subport[1].name",
            "subport \"wholesale-a\" is defined twice",
        );
        only(
            &subports(&|p| p.pipes[0].rate = Some(RateValue::Text("400mbit".into()))),
            "qos.policy[0].pipe[0].rate",
            "above its subport \"wholesale-a\"'s rate",
        );
        only(
            &subports(&|p| {
                p.pipe_profiles.push(PipeProfileConfig {
                    name: "fast".into(),
                    rate: Some(RateValue::Text("400mbit".into())),
                    burst: None,
                    limit: None,
                    weights: BTreeMap::new(),
                    max_rates: BTreeMap::new(),
                    min_rates: BTreeMap::new(),
                });
                p.pipes[0].rate = None;
                p.pipes[0].profile = Some("fast".into());
            }),
            "qos.policy[0].pipe[0].subport",
            "400000000 bit/s (its profile \"fast\"'s rate) is above its subport \"wholesale-a\"'s rate",
        );
        only(
            &subports(&|p| {
                p.pipes.clear();
                p.shaper = None;
                p.subports[1].rate = RateValue::Text("500mbit".into());
            }),
            "qos.policy[0].subport",
            "needs a shaper",
        );
        only(
            &subports(&|p| {
                let one = p.subports[0].clone();
                p.subports = (0..=MAX_SUBPORTS)
                    .map(|k| SubportConfig {
                        name: format!("s{k}"),
                        ..one.clone()
                    })
                    .collect();
                p.pipes[0].subport = None;
                p.pipes[1].subport = None;
            }),
            "qos.policy[0].subport",
            "at most 64",
        );
        for l in [0, MAX_PORT_QUEUED + 1] {
            only(
                &subports(&|p| p.subports[1].limit = Some(l)),
                "qos.policy[0].subport[1].limit",
                "out of range: 1 to 2048",
            );
        }
        let e = toml::from_str::<QosConfig>(&SUBPORTS.replace("burst = 100000", "ceil = 3"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `ceil`"), "{e}");
    }

    /// Random edits of a policy with classes, profiles, pipes and subports: whatever they
    /// make of it, validation never panics and names where each problem is, and what it
    /// accepts compiles into schedulers whose own check accepts them too (the config's
    /// checks are never weaker than the scheduler's).
    mod random_edits {
        use super::*;
        use proptest::prelude::*;

        fn rates(k: u8) -> RateValue {
            const TEXT: [&str; 9] = [
                "1gbit", "100mbit", "1mbit", "0", "50%", "0%", "150%", "fast", "10%",
            ];
            const BPS: [u64; 4] = [0, 1, u64::MAX, 2_000_000_000_000];
            match TEXT.get(usize::from(k) % 13) {
                Some(t) => RateValue::Text((*t).into()),
                None => RateValue::Bps(BPS[usize::from(k) % 13 - TEXT.len()]),
            }
        }

        fn name(k: u8) -> String {
            const NAMES: [&str; 9] = [
                "ef",
                "af",
                "be",
                "gold",
                "line100",
                "unused",
                "wholesale-a",
                "",
                "a b",
            ];
            NAMES[usize::from(k) % NAMES.len()].into()
        }

        fn edit(p: &mut PolicyConfig, (op, a, b, n): (u8, u8, u8, u32)) {
            let at = |len: usize| usize::from(a) % len.max(1);
            let some = b % 5 != 0;
            match op % 18 {
                0 => p.shaper = some.then(|| rates(b)),
                1 => p.burst = Some(u64::from(n)),
                2..=5 if !p.classes.is_empty() => {
                    let k = at(p.classes.len());
                    let c = &mut p.classes[k];
                    match op % 18 {
                        2 => c.limit = Some(n as usize % 5_000),
                        3 => c.weight = Some(n % 4),
                        4 => c.min_rate = some.then(|| rates(b)),
                        _ => c.max_rate = some.then(|| rates(b)),
                    }
                }
                6..=11 if !p.pipes.is_empty() => {
                    let k = at(p.pipes.len());
                    let q = &mut p.pipes[k];
                    match op % 18 {
                        6 => q.rate = some.then(|| rates(b)),
                        7 => q.limit = Some(n as usize % 3_000),
                        8 => q.subport = some.then(|| name(b)),
                        9 => q.profile = some.then(|| name(b)),
                        10 if n % 2 == 0 => {
                            q.max_rates.insert(name(b), rates(n as u8));
                        }
                        10 => {
                            q.min_rates.insert(name(b), rates(n as u8));
                        }
                        _ => {
                            q.weights.insert(name(b), n % 4);
                        }
                    }
                }
                12 if !p.pipe_profiles.is_empty() => {
                    let k = at(p.pipe_profiles.len());
                    let f = &mut p.pipe_profiles[k];
                    match n % 5 {
                        0 => f.rate = some.then(|| rates(b)),
                        1 => f.limit = Some(n as usize % 3_000),
                        2 => {
                            f.max_rates.insert(name(b), rates(n as u8));
                        }
                        3 => {
                            f.min_rates.insert(name(b), rates(n as u8));
                        }
                        _ => {
                            f.weights.insert(name(b), n % 4);
                        }
                    }
                }
                13 if !p.subports.is_empty() => {
                    let k = at(p.subports.len());
                    p.subports[k].rate = rates(b);
                }
                14 if !p.subports.is_empty() => {
                    let k = at(p.subports.len());
                    p.subports[k].limit = some.then_some(n as usize % 3_000);
                }
                15 if !p.pipes.is_empty() => {
                    let k = at(p.pipes.len());
                    if b % 2 == 0 {
                        let mut q = p.pipes[k].clone();
                        q.name = name(b);
                        q.dst = crate::rules::Prefixes::One(format!("10.{}.0.0/24", n % 256));
                        p.pipes.push(q);
                    } else {
                        p.pipes.remove(k);
                    }
                }
                16 if !p.subports.is_empty() => {
                    let k = at(p.subports.len());
                    if b % 2 == 0 {
                        let mut u = p.subports[k].clone();
                        u.name = name(b);
                        p.subports.push(u);
                    } else {
                        p.subports.remove(k);
                    }
                }
                17 if !p.classes.is_empty() => {
                    let k = at(p.classes.len());
                    p.classes[k].priority = some.then_some(b % 3);
                }
                _ => {}
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2_000))]
            #[test]
            fn whatever_is_accepted_compiles_and_the_scheduler_accepts_it(
                edits in proptest::collection::vec(
                    (any::<u8>(), any::<u8>(), any::<u8>(), any::<u32>()),
                    0..8,
                ),
            ) {
                let text = PROFILES.replace(
                    "[[interface]]",
                    "[[policy.subport]]\nname = \"wholesale-a\"\nrate = \"300mbit\"\n\n[[interface]]",
                );
                let mut c = cfg(&text);
                for e in edits {
                    edit(&mut c.policies[0], e);
                }
                let problems = c.validate(IFS, PORTS, VLANS);
                for (path, what) in &problems {
                    prop_assert!(path.starts_with("qos."), "{path}: {what}");
                    prop_assert!(!what.is_empty(), "{path}: no problem given");
                }
                if problems.is_empty() {
                    let names: Vec<String> = IFS.iter().map(|s| s.to_string()).collect();
                    let k = c.compile(&names, 2, &Compiled::default(), 0);
                    prop_assert!(k.is_ok(), "accepted, not compiled: {:?}", k.err());
                    for spec in k.unwrap().output.iter().flatten() {
                        prop_assert_eq!(spec.validate(), Ok(()), "{:?}", c);
                    }
                }
            }
        }
    }
}
