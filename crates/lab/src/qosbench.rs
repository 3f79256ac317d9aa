//! `ferrouter-lab bench qos --dut ferrouter,linux`: ferrouter's QoS against Linux tc
//! (issue 28), in the RFC 2544 bench's veth topology ([`crate::rfc2544::topo`]), with the
//! same policy on both DUTs. Two tests:
//!
//! - **cost** (`qos-off`, `qos-on`), as the Ekinops report measures it: the zero-loss
//!   throughput (NDR) per profile with classification, marking, three queues and a shaper
//!   at the line rate turned on, and the same with QoS off, in the same run. It is the
//!   RFC 2544 bench's NDR search ([`crate::rfc2544::run`]: MLR search, underruns retried),
//!   with the policy given to each DUT through its [`DutSetup`] hook; the two cases
//!   alternate over `--repeat` ([`tester::compare::interleaved`]) and the cost is the
//!   median of the paired ratios on ÷ off ([`tester::compare::paired_ratio`]).
//! - **congestion**: a shaper at rate R on the port toward side B, offered 2R in three
//!   classes at once from the tester (one paced trial, [`tester::Generator`] with
//!   [`tester::TrafficClass`]es: every frame's class is known from its signature): EF's
//!   loss and latency, each class's delivered rate against its share, and the shaper's
//!   accuracy (delivered ÷ R).
//!
//! **The traffic** (both tests): UDP from side A's host to side B's, `flows` source ports,
//! frames in three classes by count, interleaved: EF (DSCP 46) 10 %, AF4 45 % sent as AF42
//! (DSCP 36), best effort 45 % sent as CS1 (DSCP 8). At 2R, EF offers 0.2R, AF4 and best
//! effort 0.9R each.
//!
//! **The policy, the same for both DUTs** (on both ports; side A's input and side B's
//! output are the ones the traffic meets):
//!
//! ```text
//! input (trusted):  EF kept; AF41/AF42/AF43 re-marked AF41; anything else re-marked CS0
//! output:           shaper (the line rate, or R), then
//!   ef    DSCP EF          strict priority, at most 30 % of the shaper; tail drop, 256 packets
//!   af41  DSCP AF41-43     weight 40 (40 % of what EF leaves); CoDel
//!   be    everything else  weight 60 (the rest); CoDel
//! ```
//!
//! Ferrouter gets it as `[qos]` ([`ferrouter_config`]). Linux gets it as ([`linux_up`]):
//! nftables in prerouting (`ip dscp set`) for the marking, and on each port's egress an HTB
//! root (`rate` = `ceil` = the shaper) with three classes: EF `prio 0`, `rate` = `ceil` =
//! 30 %, a `pfifo` of 256 packets; AF41 and best effort `prio 1`, `rate` 40 % and 60 % of
//! the 70 % EF's ceiling leaves, `ceil` the shaper, `quantum` 1,536 and 2,304 bytes (so
//! they share what EF leaves 40:60, as ferrouter's DRR quanta do), each with an `fq_codel`
//! leaf — or, on a kernel without `sch_fq_codel` (`CONFIG_NET_SCH_FQ_CODEL`), a `pfifo` of
//! 256 packets, tail drop and no AQM: [`linux_leaf`] finds out, and the report says which
//! (`linux_leaf`); `u32` filters on the DS field (EF, AF41) choose the class, best effort
//! is HTB's default. Both shapers count Ethernet frames without FCS, and so do the rates
//! this bench reports (Mbit/s).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use dataplane::Arena;
use serde::Serialize;
use tester::flows::{AddrRange, Endpoints, Prefix};
use tester::{DirectionConfig, Generator, Profile, TrafficClass, TrafficConfig, TrialConfig};

use crate::ipsecbench::Machine;
use crate::rfc2544::dut::{DutKind, Transport};
use crate::rfc2544::topo::{self, Topo, TopoGuard};
use crate::rfc2544::{DutSetup, SearchOptions};
use crate::stateful::netns_exec;

/// The nftables table the bench installs in the Linux DUT's namespace.
pub const TABLE: &str = "ferrouter_qos";

pub use bench::qos::{
    ferrouter_config, BenchClass, AF41_WEIGHT, BE_WEIGHT, CLASSES, EF_MAX_PCT, LIMIT,
};

/// The tester's classes ([`CLASSES`] as [`TrafficClass`]es).
pub fn traffic_classes() -> Vec<TrafficClass> {
    CLASSES
        .iter()
        .map(|c| TrafficClass {
            name: c.name.into(),
            dscp: c.sent_dscp,
            weight: c.frames_pct,
        })
        .collect()
}

/// A test of the bench.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    /// NDR with QoS off and on.
    Cost,
    /// The shaper at R offered 2R.
    Congestion,
}

impl Test {
    /// Parse a command-line name.
    pub fn parse(s: &str) -> Result<Test> {
        Ok(match s {
            "cost" => Test::Cost,
            "congestion" => Test::Congestion,
            _ => bail!("unknown test {s:?} (cost, congestion)"),
        })
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct Options {
    /// Namespace prefix (`PREFIX-t`, `PREFIX-d`).
    pub prefix: String,
    /// DUTs (ferrouter, linux).
    pub duts: Vec<DutKind>,
    /// Tests, in order.
    pub tests: Vec<Test>,
    /// Cost: transports (empty: veth; ferrouter also runs on memif when asked).
    pub transports: Vec<Transport>,
    /// Cost: traffic profiles (IPv4 only: the Linux policy classifies IPv4).
    pub profiles: Vec<String>,
    /// Flows (UDP source ports) per direction (both tests); the cost test's search: the
    /// line rate it starts from (also the shaper's rate in qos-on), its trials and
    /// resolution.
    pub search: SearchOptions,
    /// Repetitions: qos-off and qos-on alternate (cost), as do the DUTs (both tests).
    pub repeat: usize,
    /// Congestion: the shaper's rate R, bit/s.
    pub rate_bps: u64,
    /// Congestion: the offered load, times R (the issue's 2).
    pub oversubscription: f64,
    /// Congestion: the traffic profile.
    pub congestion_profile: String,
    /// Congestion: seconds of the trial.
    pub congestion_s: f64,
    /// Ferrouter's shaper burst, milliseconds of its rate (`burst` in its policy:
    /// [`shaper_burst_bytes`]): R in the congestion test, the line rate in the cost test's
    /// qos-on runs; `None`: no `burst` written, ferrouter's default (2 ms of the rate, at
    /// least 15,000 bytes). Linux's HTB keeps tc's default either way.
    pub shaper_burst_ms: Option<f64>,
    /// The ferrouter binary.
    pub ferrouter_bin: PathBuf,
    /// Core of the tester.
    pub tester_core: usize,
    /// Core of the DUT.
    pub dut_core: usize,
    /// Seed of the frame-size shuffle.
    pub seed: u64,
    /// Cost: the CPU-cost trial after each search, percent of the line rate (0: none):
    /// each DUT's CPU time per packet at that fixed load ([`Run::ns_per_packet`]), which
    /// the tester's ceiling does not bound.
    pub cost_load_pct: f64,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            prefix: "fqs".into(),
            duts: vec![DutKind::Ferrouter, DutKind::Linux],
            tests: vec![Test::Cost, Test::Congestion],
            transports: vec![],
            profiles: vec!["ipv4-64".into(), "imix1".into()],
            search: SearchOptions::default(),
            repeat: 1,
            rate_bps: 100_000_000,
            oversubscription: 2.0,
            congestion_profile: "imix1".into(),
            congestion_s: 5.0,
            shaper_burst_ms: None,
            ferrouter_bin: PathBuf::from("ferrouter"),
            tester_core: 0,
            dut_core: 1,
            seed: 1,
            cost_load_pct: 25.0,
        }
    }
}

/// One class in one run. Rates are Mbit/s of Ethernet frames without FCS (what both
/// DUTs' shapers count).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ClassRow {
    /// `ef`, `af41`, `be`.
    pub name: String,
    /// DSCP the tester sent it with.
    pub dscp: u8,
    /// Offered: what the tester sent, over its sending time.
    pub offered_mbps: f64,
    /// Delivered: what came back through the DUT (congestion: over the receive window,
    /// the shaper's busy period; cost: over the trial).
    pub delivered_mbps: f64,
    /// Frames lost, fraction of those sent (0 to 1).
    pub loss: f64,
    /// 99th percentile of its frames' latency, µs (null: none received).
    pub latency_us_p99: Option<f64>,
    /// Largest latency, µs.
    pub latency_us_max: Option<f64>,
    /// Frames sent.
    pub tx: u64,
    /// Frames lost.
    pub lost: u64,
    /// Congestion: the rate the policy gives it here, Mbit/s (EF: what it offered, up to
    /// its maximum; AF41 and best effort: their weights' share of what EF left of what
    /// the shaper delivered).
    pub expected_mbps: Option<f64>,
    /// Congestion, AF41 and best effort: the class's share of what EF left.
    pub share: Option<f64>,
    /// Its target (0.4, 0.6).
    pub share_target: Option<f64>,
    /// `share / share_target − 1`, percent.
    pub share_error_pct: Option<f64>,
}

/// One DUT, one test, one profile, one repetition.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    /// `ferrouter` or `linux`.
    pub dut: String,
    /// `veth` (or `memif`).
    pub transport: String,
    /// `qos-off`, `qos-on` or `congestion`.
    pub test: String,
    /// Traffic profile.
    pub profile: String,
    /// Cost: the NDR, Mpps (null if the search found none). Congestion: the frames
    /// delivered per second over the receive window, Mpps.
    pub throughput_mpps: Option<f64>,
    /// Per class: cost, in the search trial that set the NDR (null latency and no classes
    /// when there is none); congestion, in the trial.
    pub classes: Vec<ClassRow>,
    /// Which repetition (0-based).
    pub repeat: usize,
    /// Cost: the highest rate the tester really sent in a search trial that lost nothing,
    /// valid or not, Mpps (a lower bound of the NDR).
    pub lossless_mpps: Option<f64>,
    /// The tester could not offer some loads even after retries: a result at its ceiling
    /// is the tester's, not the DUT's.
    pub tester_limited: bool,
    /// Congestion: the shaper's rate R, Mbit/s.
    pub rate_mbps: Option<f64>,
    /// Congestion: all classes offered, Mbit/s.
    pub offered_mbps: Option<f64>,
    /// Congestion: all classes delivered, Mbit/s.
    pub delivered_mbps: Option<f64>,
    /// Congestion: delivered ÷ R.
    pub shaper_accuracy: Option<f64>,
    /// Congestion: from the first to the last frame received, s.
    pub rx_window_s: Option<f64>,
    /// Congestion: trials the tester could not offer in full (retried).
    pub underruns: u32,
    /// Ferrouter's port shaper's burst (bucket), bytes, in the congestion test and the cost
    /// test's qos-on runs: `--shaper-burst-ms` of the shaper's rate, else its default (2 ms
    /// of it, at least 15,000). Null for Linux (HTB keeps tc's default burst) and qos-off.
    pub shaper_burst_bytes: Option<u64>,
    /// Cost: the DUT's own CPU time per packet in the CPU-cost trial at `--cost-load`
    /// (ferrouter: its worker's busy time over the packets received; Linux: the kernel's
    /// time on both cores, the tester's socket work included), ns; null: not measured.
    pub ns_per_packet: Option<f64>,
    /// Cost: frames the CPU-cost trial lost, fraction of those sent (0 to 1; above
    /// [`COST_TRIAL_LOSS`] the DUT was not keeping up, and its figure judges nothing).
    pub cost_trial_loss: Option<f64>,
    /// Cost: what the tester received in the CPU-cost trial, Mpps (below the load asked
    /// where the tester could not offer it).
    pub cost_rx_mpps: Option<f64>,
    /// Cost: the softirq share of the tester's core over the search, percent. On veth
    /// Linux forwards there (the tester's transmit runs the peer's receive): a search
    /// "the tester could not offer" with this at [`SOFTIRQ_BOUND`] or more was bound by
    /// Linux's own forwarding, not by the generator.
    pub tester_softirq_pct: Option<f64>,
    /// Congestion: the DUT's own queue counters at the end (ferrouter `show qos`, Linux
    /// `tc -s -j qdisc show dev db`).
    pub dut_counters: Option<serde_json::Value>,
    /// What qualifies the run.
    pub notes: Vec<String>,
    /// Cost: the RFC 2544 run in full (its search trials, per class).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rfc2544: Option<crate::rfc2544::report::Run>,
}

/// The most a CPU-cost trial may lose (fraction of the frames sent) and still judge the
/// cost: a worker preempted on a shared host loses a few frames from a full ring, and
/// those were never processed, so the time per packet of the rest still holds; a DUT
/// that cannot keep up loses far more.
pub const COST_TRIAL_LOSS: f64 = 0.001;

/// The most the qos-off and qos-on CPU-cost trials' received rates may differ (a fraction
/// of the larger) for their times per packet to be compared: a vector's fixed costs
/// spread over fewer packets at a lower rate.
pub const COST_LOADS_APART: f64 = 0.1;

/// The tester core's softirq share, percent, from which a Linux search on veth the tester
/// "could not offer" counts as bound by Linux's own forwarding (which runs there).
pub const SOFTIRQ_BOUND: f64 = 50.0;

/// One DUT's cost figures for one transport and profile over the repetitions.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CostSummary {
    /// DUT.
    pub dut: String,
    /// Transport.
    pub transport: String,
    /// Profile.
    pub profile: String,
    /// NDR with QoS off, over the repetitions.
    pub off: Option<tester::compare::Spread>,
    /// NDR with QoS on.
    pub on: Option<tester::compare::Spread>,
    /// on ÷ off, pair by pair.
    pub on_over_off: tester::compare::PairedRatio,
    /// The cost: `1 − median(on ÷ off)`, percent.
    pub cost_pct: Option<f64>,
    /// This DUT's qos-on NDR ÷ Linux's on the same transport (veth), pair by pair (not
    /// for Linux itself).
    pub over_linux_on: Option<tester::compare::PairedRatio>,
    /// The same against Linux given a whole core: where Linux's search was bound by its
    /// forwarding in softirq on the tester's core ([`Run::tester_softirq_pct`]), its NDR
    /// scaled by 100 ÷ that share (a conservative ratio: as if Linux had all of the core
    /// and nothing else ran there). Equal to `over_linux_on` otherwise.
    pub over_linux_core: Option<tester::compare::PairedRatio>,
    /// The tester set the ceiling of one of these searches: a figure is then the
    /// tester's, not the DUT's, and the NDRs judge no target (the CPU cost may: see
    /// `cpu_cost_pct`; and a ratio to Linux whose numerator alone is bounded is a lower
    /// bound).
    pub tester_limited: bool,
    /// Its CPU time per packet in the CPU-cost trials, QoS off.
    pub ns_off: Option<tester::compare::Spread>,
    /// The same, QoS on.
    pub ns_on: Option<tester::compare::Spread>,
    /// The cost by CPU time: `1 − median(ns off ÷ ns on)`, percent: the throughput a DUT
    /// bound by its own core loses to the policy, measured at a load below the tester's
    /// ceiling. Judges the cost target when the NDRs are the tester's.
    pub cpu_cost_pct: Option<f64>,
    /// Mpps offered in its CPU-cost trials.
    pub cost_load_mpps: Option<f64>,
    /// Mpps received in them, median.
    pub cost_rx_mpps: Option<f64>,
    /// In some repetition the qos-off and qos-on cost trials carried loads more than
    /// [`COST_LOADS_APART`] apart (the tester could not offer the load asked, and offered
    /// different ones): their times per packet are not compared on equal terms, and
    /// `cpu_cost_pct` is not judged on.
    pub cost_loads_apart: bool,
    /// A CPU-cost trial of this DUT lost more than [`COST_TRIAL_LOSS`] of its frames:
    /// `cpu_cost_pct` is not judged on.
    pub cost_trial_lost: bool,
}

/// One of the issue's targets, as this run measured it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Target {
    /// The target, in the issue's words.
    pub target: String,
    /// Which DUT (and transport, profile or class) it is about.
    pub subject: String,
    /// The measured figure (null: not measured).
    pub value: Option<f64>,
    /// The limit, as text.
    pub limit: String,
    /// Whether it is met (null: not measured).
    pub met: Option<bool>,
}

/// Everything: `{"machine","load_before","load_after","runs","cost","targets",...}`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// Where it ran.
    pub machine: Machine,
    /// /proc/loadavg (1, 5, 15 min) when the run started.
    pub load_before: [f64; 3],
    /// The same when it ended.
    pub load_after: [f64; 3],
    /// The policy, as ferrouter gets it (veth port names).
    pub ferrouter_policy: String,
    /// The policy, as Linux gets it.
    pub linux_policy: String,
    /// The leaf qdisc of Linux's AF41 and best-effort classes: `fq_codel`, or `pfifo` on
    /// a kernel without it (see [`linux_leaf`]).
    pub linux_leaf: String,
    /// Every run, in order.
    pub runs: Vec<Run>,
    /// The cost per DUT, transport and profile.
    pub cost: Vec<CostSummary>,
    /// The issue's targets.
    pub targets: Vec<Target>,
    /// What qualifies the whole run.
    pub notes: Vec<String>,
}

/// /proc/loadavg's three averages (0s when unreadable).
pub fn loadavg() -> [f64; 3] {
    let s = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut v = s.split_whitespace().map(|x| x.parse().unwrap_or(0.0));
    [
        v.next().unwrap_or(0.0),
        v.next().unwrap_or(0.0),
        v.next().unwrap_or(0.0),
    ]
}

// ---------------------------------------------------------------------------------------
// The policy.

/// The congestion test's shaper burst: `ms` milliseconds of `rate_bps` in bytes (rounded),
/// refused unless it is a burst ferrouter's policy accepts ([`qos::config::BURST_BYTES`]).
pub fn shaper_burst_bytes(rate_bps: u64, ms: f64) -> Result<u64> {
    let range = qos::config::BURST_BYTES;
    let ms_of = |bytes: u64| bytes as f64 * 8000.0 / rate_bps as f64;
    let bytes = rate_bps as f64 * ms / 8000.0;
    if !(ms.is_finite() && ms > 0.0 && rate_bps > 0) {
        bail!("--shaper-burst-ms must be a positive number of milliseconds, got {ms}");
    }
    let bytes = bytes.round();
    if !(bytes >= *range.start() as f64 && bytes <= *range.end() as f64) {
        bail!(
            "--shaper-burst-ms {ms}: {bytes:.0} bytes at --rate {} Mbit/s, out of the range of a policy's burst ({} to {} bytes: {:.3} to {:.0} ms at this rate)",
            rate_bps as f64 / 1e6,
            range.start(),
            range.end(),
            ms_of(*range.start()),
            ms_of(*range.end())
        );
    }
    Ok(bytes as u64)
}

/// The congestion test's `burst` for ferrouter's policy (`None`: none written).
fn congestion_burst(opts: &Options) -> Result<Option<u64>> {
    opts.shaper_burst_ms
        .map(|ms| shaper_burst_bytes(opts.rate_bps, ms))
        .transpose()
}

/// Linux's marking: an nftables prerouting chain that rewrites what ferrouter's input
/// policy rewrites (AF42/AF43 to AF41, anything but EF, AF4x and CS0 to CS0).
pub fn nft_ruleset() -> String {
    format!(
        "table ip {TABLE} {{\n  chain marking {{\n    type filter hook prerouting priority mangle; policy accept;\n    ip dscp {{ af42, af43 }} ip dscp set af41\n    ip dscp != {{ cs0, ef, af41, af42, af43 }} ip dscp set cs0\n  }}\n}}\n"
    )
}

/// The leaf qdisc of Linux's AF41 and best-effort classes: `fq_codel` when this kernel
/// has it (tried on the loopback of a scratch namespace, `PREFIX-probe`), else `pfifo`
/// (tail drop, no AQM; [`LIMIT`] packets).
pub fn linux_leaf(prefix: &str) -> Result<&'static str> {
    let ns = format!("{prefix}-probe");
    let _ = std::process::Command::new("ip")
        .args(["netns", "del", &ns])
        .output();
    crate::run(std::process::Command::new("ip").args(["netns", "add", &ns]))
        .with_context(|| format!("creating namespace {ns}"))?;
    let ok = netns_exec(
        &ns,
        &["tc", "qdisc", "add", "dev", "lo", "root", "fq_codel"],
    )
    .is_ok();
    crate::run(std::process::Command::new("ip").args(["netns", "del", &ns]))
        .with_context(|| format!("deleting namespace {ns}"))?;
    Ok(if ok { "fq_codel" } else { "pfifo" })
}

/// Linux's scheduling on `dev`: the `tc` commands (arguments after `tc`); `leaf` is the
/// AF41 and best-effort classes' qdisc ([`linux_leaf`]).
pub fn tc_commands(dev: &str, shaper_bps: u64, leaf: &str) -> Vec<Vec<String>> {
    let r = shaper_bps;
    let ef = r * EF_MAX_PCT / 100;
    let left = r - ef;
    let af = left * u64::from(AF41_WEIGHT) / 100;
    let be = left * u64::from(BE_WEIGHT) / 100;
    // ferrouter's DRR quanta: the smallest weight gets 1,536 bytes.
    let q = |w: u32| 1536 * u64::from(w) / u64::from(AF41_WEIGHT.min(BE_WEIGHT));
    let bit = |x: u64| format!("{x}bit");
    let leaf = match leaf {
        "fq_codel" => "fq_codel".to_string(),
        _ => format!("pfifo limit {LIMIT}"),
    };
    let lines: Vec<String> = vec![
        format!("qdisc replace dev {dev} root handle 1: htb default 30"),
        format!(
            "class add dev {dev} parent 1: classid 1:1 htb rate {} ceil {} quantum 1514",
            bit(r),
            bit(r)
        ),
        format!(
            "class add dev {dev} parent 1:1 classid 1:10 htb rate {} ceil {} prio 0 quantum 1514",
            bit(ef),
            bit(ef)
        ),
        format!(
            "class add dev {dev} parent 1:1 classid 1:20 htb rate {} ceil {} prio 1 quantum {}",
            bit(af),
            bit(r),
            q(AF41_WEIGHT)
        ),
        format!(
            "class add dev {dev} parent 1:1 classid 1:30 htb rate {} ceil {} prio 1 quantum {}",
            bit(be),
            bit(r),
            q(BE_WEIGHT)
        ),
        format!("qdisc add dev {dev} parent 1:10 handle 10: pfifo limit {LIMIT}"),
        format!("qdisc add dev {dev} parent 1:20 handle 20: {leaf}"),
        format!("qdisc add dev {dev} parent 1:30 handle 30: {leaf}"),
        format!(
            "filter add dev {dev} parent 1: protocol ip prio 1 u32 match ip dsfield 0x{:02x} 0xfc flowid 1:10",
            CLASSES[0].marked_dscp << 2
        ),
        format!(
            "filter add dev {dev} parent 1: protocol ip prio 2 u32 match ip dsfield 0x{:02x} 0xfc flowid 1:20",
            CLASSES[1].marked_dscp << 2
        ),
    ];
    lines
        .into_iter()
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

/// The whole Linux policy as text (the report's `linux_policy`).
pub fn linux_policy_text(shaper_bps: u64, leaf: &str) -> String {
    let mut s = nft_ruleset();
    s.push_str("# on da and db:\n");
    for c in tc_commands("db", shaper_bps, leaf) {
        s.push_str("tc ");
        s.push_str(&c.join(" "));
        s.push('\n');
    }
    s
}

/// Put the policy on the Linux DUT: the marking, and each port's scheduler.
pub fn linux_up(topo: &Topo, shaper_bps: u64, leaf: &str) -> Result<()> {
    let d = topo.dns();
    let path = topo.dir.join("qos.nft");
    std::fs::write(&path, nft_ruleset()).with_context(|| format!("writing {}", path.display()))?;
    netns_exec(&d, &["nft", "-f", &path.display().to_string()])
        .context("loading the Linux DUT's nftables marking")?;
    for dev in ["da", "db"] {
        for c in tc_commands(dev, shaper_bps, leaf) {
            let mut args = vec!["tc"];
            args.extend(c.iter().map(String::as_str));
            netns_exec(&d, &args).with_context(|| format!("tc {}", c.join(" ")))?;
        }
    }
    Ok(())
}

/// The Linux DUT's queue counters on `dev` (`tc -s -j qdisc show`).
fn tc_counters(topo: &Topo, dev: &str) -> Option<serde_json::Value> {
    let out = netns_exec(
        &topo.dns(),
        &["tc", "-s", "-j", "qdisc", "show", "dev", dev],
    )
    .ok()?;
    serde_json::from_str(&out).ok()
}

/// A line of what the Linux DUT's qdiscs on `dev` sent and dropped.
fn tc_summary(v: &serde_json::Value) -> String {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|q| {
            format!(
                "{} {}: sent {}, dropped {}",
                q["kind"].as_str().unwrap_or("?"),
                q["handle"].as_str().unwrap_or("?"),
                q["packets"].as_u64().unwrap_or(0),
                q["drops"].as_u64().unwrap_or(0)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Take the policy off the Linux DUT; notes: what its qdiscs on db counted.
pub fn linux_down(topo: &Topo) -> Vec<String> {
    let d = topo.dns();
    let mut notes = Vec::new();
    if let Some(v) = tc_counters(topo, "db") {
        notes.push(format!("Linux's qdiscs on db: {}", tc_summary(&v)));
    }
    for dev in ["da", "db"] {
        if let Err(e) = netns_exec(&d, &["tc", "qdisc", "del", "dev", dev, "root"]) {
            notes.push(format!("removing the qdiscs of {dev} failed: {e:#}"));
        }
    }
    if let Err(e) = netns_exec(&d, &["nft", "delete", "table", "ip", TABLE]) {
        notes.push(format!("removing the nftables marking failed: {e:#}"));
    }
    notes
}

/// The policy as the RFC 2544 bench's setup hook: the shaper at `shaper_bps`.
#[derive(Debug)]
struct QosSetup {
    shaper_bps: u64,
    /// Ferrouter's shaper burst, bytes (`None`: its default).
    burst_bytes: Option<u64>,
    leaf: &'static str,
}

impl DutSetup for QosSetup {
    fn ferrouter_config(&self, ports: [&str; 2]) -> String {
        ferrouter_config(self.shaper_bps, self.burst_bytes, ports)
    }

    fn linux_up(&self, topo: &Topo) -> Result<()> {
        linux_up(topo, self.shaper_bps, self.leaf)
    }

    fn linux_down(&self, topo: &Topo) -> Vec<String> {
        linux_down(topo)
    }
}

/// Tear the bench's namespaces down (and kill what runs in them) if the process is
/// interrupted (SIGINT, SIGTERM, SIGHUP); call [`crate::wait_if_tearing_down`] after
/// [`run`].
pub fn tear_down_on_signal(prefix: &str) -> Result<()> {
    let topo = Topo::new(prefix);
    crate::tear_down_namespaces_on_signal(
        topo.dir.clone(),
        vec![topo.tns(), topo.dns(), format!("{prefix}-probe")],
    )
}

// ---------------------------------------------------------------------------------------
// Checks.

/// Refuse options the bench cannot run, naming the option.
pub fn check(opts: &Options) -> Result<()> {
    if opts.duts.is_empty() || opts.tests.is_empty() {
        bail!("no DUT or no test to run");
    }
    if let Some(d) = opts.duts.iter().find(|d| **d == DutKind::Testpmd) {
        bail!("{} has no QoS: --dut ferrouter,linux", d.name());
    }
    if opts.tests.contains(&Test::Cost) && opts.profiles.is_empty() {
        bail!("--profile: no profile for the cost test");
    }
    let mut profiles: Vec<&str> = opts.profiles.iter().map(String::as_str).collect();
    profiles.push(&opts.congestion_profile);
    for p in profiles {
        let prof = Profile::parse(p).with_context(|| format!("profile {p}"))?;
        if prof.sends(tester::Family::Ipv6) {
            bail!("profile {p} sends IPv6: the bench's Linux policy (u32 on the IPv4 DS field, nftables `ip dscp`) classifies IPv4; use ipv4-<size> or imix1");
        }
    }
    if opts.search.flows == 0 || opts.search.flows > 60_000 {
        bail!(
            "--flows must be 1..=60000 (UDP source ports), got {}",
            opts.search.flows
        );
    }
    if !(opts.rate_bps >= 1_000_000 && opts.rate_bps <= 10_000_000_000) {
        bail!(
            "--rate must be 1 to 10,000 Mbit/s, got {} bit/s",
            opts.rate_bps
        );
    }
    if !(opts.oversubscription.is_finite() && (1.0..=10.0).contains(&opts.oversubscription)) {
        bail!(
            "--oversubscription must be 1 to 10, got {}",
            opts.oversubscription
        );
    }
    if !(opts.congestion_s.is_finite() && opts.congestion_s > 0.0 && opts.congestion_s <= 600.0) {
        bail!(
            "--congestion-duration must be 0 to 600 s, got {}",
            opts.congestion_s
        );
    }
    congestion_burst(opts)?;
    if opts.repeat == 0 || opts.repeat > 100 {
        bail!("--repeat must be 1..=100, got {}", opts.repeat);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The run.

/// Run the tests; progress lines go to `log`.
pub fn run(opts: &Options, log: &(dyn Fn(&str) + Sync)) -> Result<Report> {
    check(opts)?;
    crate::need_tool("ip", "iproute2")?;
    let leaf = if opts.duts.contains(&DutKind::Linux) {
        crate::need_tool("tc", "iproute2")?;
        crate::need_tool("nft", "nftables")?;
        linux_leaf(&opts.prefix)?
    } else {
        "fq_codel"
    };
    let mut report = Report {
        machine: Machine::probe(),
        load_before: loadavg(),
        ferrouter_policy: ferrouter_config(opts.rate_bps, congestion_burst(opts)?, ["da", "db"]),
        linux_policy: linux_policy_text(opts.rate_bps, leaf),
        linux_leaf: leaf.into(),
        ..Report::default()
    };
    if leaf != "fq_codel" {
        let n = format!(
            "this kernel has no fq_codel (CONFIG_NET_SCH_FQ_CODEL), nor codel or cake: Linux's AF41 and best-effort classes get pfifo leaves of {LIMIT} packets (tail drop, no AQM) where ferrouter's have CoDel"
        );
        log(&n);
        report.notes.push(n);
    }
    log(&format!(
        "machine: {}, {} cores; load average {:.2} {:.2} {:.2}",
        report.machine.cpu_model,
        report.machine.nproc,
        report.load_before[0],
        report.load_before[1],
        report.load_before[2]
    ));
    for t in &opts.tests {
        match t {
            Test::Cost => report.runs.extend(cost(opts, leaf, log)?),
            Test::Congestion => report.runs.extend(congestion(opts, leaf, log)?),
        }
    }
    report.load_after = loadavg();
    report.finish(opts);
    Ok(report)
}

/// The qos-off and qos-on NDR searches, alternating over the repetitions.
fn cost(opts: &Options, leaf: &'static str, log: &(dyn Fn(&str) + Sync)) -> Result<Vec<Run>> {
    let line_bps = (opts.search.line_rate_gbps * 1e9).round() as u64;
    // `--shaper-burst-ms` of the line rate, for ferrouter's qos-on shaper.
    let burst = opts
        .shaper_burst_ms
        .map(|ms| shaper_burst_bytes(line_bps, ms))
        .transpose()?;
    let mut runs = Vec::new();
    for (k, on) in tester::compare::interleaved(&[false, true], opts.repeat) {
        let test = if on { "qos-on" } else { "qos-off" };
        log(&format!(
            "cost: {test}{} (repetition {} of {})",
            if on {
                format!(
                    ", shaper at the line rate, {} Gbit/s",
                    opts.search.line_rate_gbps
                )
            } else {
                String::new()
            },
            k + 1,
            opts.repeat
        ));
        let ro = crate::rfc2544::Options {
            duts: opts.duts.clone(),
            transports: if opts.transports.is_empty() {
                vec![Transport::Veth]
            } else {
                opts.transports.clone()
            },
            profiles: opts.profiles.clone(),
            routes4: 0,
            routes6: 0,
            flows: opts.search.flows,
            duration: opts.search.duration,
            drain: 0.3,
            line_rate_gbps: opts.search.line_rate_gbps,
            resolution_pct: opts.search.resolution_pct,
            max_search_trials: opts.search.max_trials,
            loss_tolerance_pct: 0.0,
            pdr_loss_pct: 0.0,
            mlr: true,
            loads: vec![],
            bidirectional: false,
            ipv6_percent: None,
            prefix: opts.prefix.clone(),
            ferrouter_bin: opts.ferrouter_bin.clone(),
            tester_core: opts.tester_core,
            dut_core: opts.dut_core,
            seed: opts.seed,
            repeat: 1,
            cost_load_pct: opts.cost_load_pct,
            latency: false,
            warmup_s: 0.2,
            replies: None,
            setup: on.then(|| {
                Arc::new(QosSetup {
                    shaper_bps: line_bps,
                    burst_bytes: burst,
                    leaf,
                }) as Arc<dyn DutSetup>
            }),
            classes: traffic_classes(),
        };
        let rep = crate::rfc2544::run(&ro, log).with_context(|| format!("cost, {test}"))?;
        for r in rep.runs {
            let ndr = r.measured();
            // The trial that set the NDR: the longest valid passing search trial at it.
            let at_ndr = ndr.and_then(|n| {
                r.trials
                    .iter()
                    .filter(|t| {
                        t.phase == "search"
                            && t.passed
                            && !t.invalid
                            && n > 0.0
                            && (t.offered_mpps - n).abs() <= 1e-6 * n
                    })
                    .max_by(|a, b| a.duration_s.total_cmp(&b.duration_s))
            });
            let classes = at_ndr.map_or_else(Vec::new, |t| {
                t.classes
                    .iter()
                    .map(|c| class_row(c, t.duration_s, t.duration_s))
                    .collect()
            });
            let mut notes = r.notes.clone();
            if ndr.is_some() && at_ndr.is_none() {
                notes.push("no search trial at the NDR recorded per class".into());
            }
            runs.push(Run {
                dut: r.dut.clone(),
                transport: r.transport.clone(),
                test: test.into(),
                profile: r.profile.clone(),
                throughput_mpps: ndr,
                classes,
                repeat: k,
                lossless_mpps: r
                    .trials
                    .iter()
                    .filter(|t| t.phase == "search" && t.tx > 0 && t.lost == 0)
                    .map(|t| t.sent_mpps)
                    .max_by(f64::total_cmp),
                tester_limited: r.notes.iter().any(|n| n.contains("generator-limited")),
                ns_per_packet: r.cost.as_ref().and_then(|c| c.ns_per_packet),
                cost_rx_mpps: r.cost.as_ref().map(|c| c.rx_mpps),
                tester_softirq_pct: r.cpu.iter().find(|c| c.role == "tester").map(|c| c.softirq),
                cost_trial_loss: r.cost.as_ref().map(|c| c.lost as f64 / c.tx.max(1) as f64),
                rate_mbps: None,
                offered_mbps: None,
                delivered_mbps: None,
                shaper_accuracy: None,
                rx_window_s: None,
                underruns: r.underruns,
                shaper_burst_bytes: (on && r.dut == "ferrouter")
                    .then(|| burst.unwrap_or_else(|| qos::config::default_burst_bytes(line_bps))),
                dut_counters: None,
                notes,
                rfc2544: Some(r),
            });
        }
    }
    Ok(runs)
}

/// Mbit/s of Ethernet frames without FCS: `bytes` counted with FCS over `frames` frames.
fn mbps(bytes_with_fcs: u64, frames: u64, secs: f64) -> f64 {
    let bytes = bytes_with_fcs.saturating_sub(4 * frames) as f64;
    if secs > 0.0 {
        bytes * 8.0 / secs / 1e6
    } else {
        0.0
    }
}

/// A class's row from the tester's counts: offered over `tx_s`, delivered over `rx_s`.
fn class_row(c: &tester::ClassResult, tx_s: f64, rx_s: f64) -> ClassRow {
    let us = |v: f64| (c.latency.samples > 0).then_some(v);
    ClassRow {
        name: c.name.clone(),
        dscp: c.dscp,
        offered_mbps: mbps(c.tx_bytes, c.tx, tx_s),
        delivered_mbps: mbps(c.rx_bytes, c.rx, rx_s),
        loss: c.loss_ratio(),
        latency_us_p99: us(c.latency.p99_us),
        latency_us_max: us(c.latency.max_us),
        tx: c.tx,
        lost: c.lost,
        ..ClassRow::default()
    }
}

/// Fill in each class's expected rate and share of a congestion run: EF what it offered
/// (up to its maximum), AF41 and best effort their weights' shares of what EF left of what
/// the shaper delivered.
pub fn judge_shares(classes: &mut [ClassRow], rate_bps: u64) {
    let ef_max = rate_bps as f64 * EF_MAX_PCT as f64 / 100.0 / 1e6;
    let total: f64 = classes.iter().map(|c| c.delivered_mbps).sum();
    let ef = classes
        .iter()
        .find(|c| c.name == CLASSES[0].name)
        .map_or(0.0, |c| c.delivered_mbps);
    let left = total - ef;
    for c in classes.iter_mut() {
        let weight = match c.name.as_str() {
            "af41" => AF41_WEIGHT,
            "be" => BE_WEIGHT,
            _ => {
                c.expected_mbps = Some(c.offered_mbps.min(ef_max));
                continue;
            }
        };
        let target = f64::from(weight) / f64::from(AF41_WEIGHT + BE_WEIGHT);
        c.expected_mbps = Some(left * target);
        if left > 0.0 {
            let share = c.delivered_mbps / left;
            c.share = Some(share);
            c.share_target = Some(target);
            c.share_error_pct = Some((share / target - 1.0) * 100.0);
        }
    }
}

/// The congestion test: each DUT in turn (repetitions alternate them) in one topology.
fn congestion(opts: &Options, leaf: &'static str, log: &(dyn Fn(&str) + Sync)) -> Result<Vec<Run>> {
    let profile = Profile::parse(&opts.congestion_profile)
        .with_context(|| format!("profile {}", opts.congestion_profile))?;
    let burst = congestion_burst(opts)?;
    // The burst ferrouter's shaper has: the one given, else its default.
    let burst_used = burst.unwrap_or_else(|| qos::config::default_burst_bytes(opts.rate_bps));
    let setup: Arc<dyn DutSetup> = Arc::new(QosSetup {
        shaper_bps: opts.rate_bps,
        burst_bytes: burst,
        leaf,
    });
    let ro = crate::rfc2544::Options {
        duts: opts.duts.clone(),
        transports: vec![Transport::Veth],
        routes4: 0,
        routes6: 0,
        prefix: opts.prefix.clone(),
        ferrouter_bin: opts.ferrouter_bin.clone(),
        tester_core: opts.tester_core,
        dut_core: opts.dut_core,
        setup: Some(setup.clone()),
        ..crate::rfc2544::Options::default()
    };
    let duts: Vec<DutKind> = crate::rfc2544::plan(&ro)?
        .into_iter()
        .map(|(d, _)| d)
        .collect();
    let topo = Topo::new(&opts.prefix);
    topo.down();
    let _guard = TopoGuard(topo.clone());
    topo.create()?;
    let tester_macs = topo.veth(1500)?;
    let d = topo.dns();
    let dut_macs = [topo::read_mac(&d, "da")?, topo::read_mac(&d, "db")?];
    // The offered load: `oversubscription` × R of Ethernet frames without FCS.
    let offered_bps = opts.rate_bps as f64 * opts.oversubscription;
    let rate_pps = offered_bps / (8.0 * (profile.avg_frame_size() - 4.0));
    let mut runs = Vec::new();
    for (k, dut) in tester::compare::interleaved(&duts, opts.repeat) {
        let label = format!("congestion {}/veth", dut.name());
        log(&format!(
            "{label}: shaper {:.1} Mbit/s{}, offered {:.1} Mbit/s ({:.0} frames/s of {}), {} s (repetition {} of {})",
            opts.rate_bps as f64 / 1e6,
            match (dut, burst) {
                (DutKind::Linux, _) => String::new(),
                (_, Some(b)) => format!(" (burst {b} bytes)"),
                (_, None) => format!(" (default burst, {burst_used} bytes)"),
            },
            offered_bps / 1e6,
            rate_pps,
            profile.name(),
            opts.congestion_s,
            k + 1,
            opts.repeat
        ));
        let mut running = crate::rfc2544::start_dut(&ro, &topo, dut, Transport::Veth, 0, 0, log)?;
        let result = std::thread::scope(|s| {
            s.spawn(|| congestion_trial(opts, &topo, &profile, tester_macs, dut_macs, rate_pps))
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("the tester thread panicked")))
        });
        let counters = match dut {
            DutKind::Linux => tc_counters(&topo, "db"),
            _ => control::api::request_json(&topo.dir.join("ferrouter.sock"), "qos", None).ok(),
        };
        let alive = running.check();
        running.stop();
        let mut notes = match dut {
            DutKind::Linux => setup.linux_down(&topo),
            _ => vec![],
        };
        let (r, underruns, limited) = result.with_context(|| label.clone())?;
        alive?;
        if underruns > 0 {
            notes.push(format!(
                "{underruns} trial(s) the tester could not offer in full (underrun), retried"
            ));
        }
        if dut == DutKind::Linux {
            notes.push(format!("Linux: HTB, leaves EF pfifo, AF41 and best effort {leaf}; u32 filters on the DS field; nftables marking"));
            if burst.is_some() {
                notes.push(
                    "Linux: HTB keeps tc's default burst (--shaper-burst-ms sets ferrouter's only)"
                        .into(),
                );
            }
        } else if let Some(ms) = opts.shaper_burst_ms {
            notes.push(format!(
                "ferrouter's shaper burst: {burst_used} bytes ({ms} ms of R, --shaper-burst-ms)"
            ));
        }
        log(&format!(
            "{label}: sent {} frames ({:.0}/s of {rate_pps:.0}/s), {} given up behind schedule, {} bursts refused by the port in part, {} without a buffer; received {} ({} foreign)",
            r.tx,
            r.tx_pps,
            r.tx_skipped,
            r.tx_port_full,
            r.tx_no_buffer,
            r.rx,
            r.foreign
        ));
        let tx_s = r.tx_elapsed_s.max(r.duration_s);
        let rx_s = if r.rx_window_s > 0.0 {
            r.rx_window_s
        } else {
            tx_s
        };
        let mut classes: Vec<ClassRow> =
            r.classes.iter().map(|c| class_row(c, tx_s, rx_s)).collect();
        judge_shares(&mut classes, opts.rate_bps);
        let delivered: f64 = classes.iter().map(|c| c.delivered_mbps).sum();
        let offered: f64 = classes.iter().map(|c| c.offered_mbps).sum();
        if limited {
            let sent = mbps(r.tx_bytes, r.tx, r.tx_elapsed_s.max(r.duration_s));
            let n = format!(
                "the tester could not offer the load in full even after {underruns} retries: it sent {sent:.1} of {:.1} Mbit/s ({:.2}× R); {}",
                offered_bps / 1e6,
                sent * 1e6 / opts.rate_bps as f64,
                if judged(limited, Some(offered), offered_bps / 1e6) {
                    "the shaper was still offered nearly the load asked, and the targets are judged on this run"
                } else {
                    "too far below the load asked: no target is judged on this run"
                }
            );
            log(&format!("{label}: {n}"));
            notes.push(n);
        }
        let rate_mbps = opts.rate_bps as f64 / 1e6;
        for c in &classes {
            log(&format!(
                "{label} {}: offered {:.2} Mbit/s, delivered {:.2} (expected {}), loss {:.3} %, p99 {} µs",
                c.name,
                c.offered_mbps,
                c.delivered_mbps,
                c.expected_mbps.map_or("-".into(), |e| format!("{e:.2}")),
                c.loss * 100.0,
                c.latency_us_p99.map_or("-".into(), |l| format!("{l:.0}"))
            ));
        }
        log(&format!(
            "{label}: delivered {delivered:.2} of {rate_mbps:.2} Mbit/s ({:.2} %) over {rx_s:.2} s",
            delivered / rate_mbps * 100.0
        ));
        runs.push(Run {
            dut: dut.name().into(),
            transport: "veth".into(),
            test: "congestion".into(),
            profile: profile.name().into(),
            throughput_mpps: Some(r.rx as f64 / rx_s / 1e6),
            classes,
            repeat: k,
            lossless_mpps: None,
            tester_limited: limited,
            ns_per_packet: None,
            cost_trial_loss: None,
            cost_rx_mpps: None,
            tester_softirq_pct: None,
            rate_mbps: Some(rate_mbps),
            offered_mbps: Some(offered),
            delivered_mbps: Some(delivered),
            shaper_accuracy: Some(delivered / rate_mbps),
            rx_window_s: Some(rx_s),
            underruns,
            shaper_burst_bytes: (dut != DutKind::Linux).then_some(burst_used),
            dut_counters: counters,
            notes,
            rfc2544: None,
        });
    }
    Ok(runs)
}

/// On the tester's core and in its namespace: a warm-up, then the congestion trial at
/// `rate_pps`, retried while the tester underruns (as the MLR search retries them).
/// Returns the trial, the underruns, and whether the last trial underran too (the tester
/// could not offer the load even after the retries).
fn congestion_trial(
    opts: &Options,
    topo: &Topo,
    profile: &Profile,
    tester_macs: [[u8; 6]; 2],
    dut_macs: [[u8; 6]; 2],
    rate_pps: f64,
) -> Result<(tester::TrialResult, u32, bool)> {
    crate::rfc2544::pin(opts.tester_core);
    // As ferrouter's worker does: what else runs on a shared machine (builds) preempts the
    // tester less, so that it offers the load on schedule and its receive timestamps are
    // the frames' arrival, not its own wake-up. Best effort: without it the underruns are
    // counted and retried as usual.
    let _ = dataplane::worker::set_thread_nice(-10);
    crate::rfc2544::enter_netns(&topo.tns())?;
    let mut a =
        ports::AfXdp::open("ta", 0, 0, ports::AfXdpOptions::default()).context("tester port ta")?;
    let mut b =
        ports::AfXdp::open("tb", 0, 1, ports::AfXdpOptions::default()).context("tester port tb")?;
    let mut mem = Arena::new(16384);
    let dst = Prefix::new(topo::tester_host(1, false), 32)?;
    let mut ep = Endpoints::new(AddrRange::single(topo::tester_host(0, false)), vec![dst]);
    ep.src_ports = tester::PortRange::new(1024, opts.search.flows);
    let dir = DirectionConfig {
        src_mac: tester_macs[0],
        dst_mac: dut_macs[0],
        v4: Some(ep),
        v6: None,
    };
    let mut traffic = TrafficConfig::new(profile.clone(), dir, None);
    traffic.flows = opts.search.flows;
    traffic.seed = opts.seed;
    traffic.classes = traffic_classes();
    let mut gen = Generator::new(&traffic)?;
    let mut warm = TrialConfig::new(1000.0, Duration::from_millis(200));
    warm.drain = Duration::from_millis(200);
    let _ = gen.run_trial(&mut mem, &mut a, &mut b, &warm);
    let mut t = TrialConfig::new(rate_pps, Duration::from_secs_f64(opts.congestion_s));
    // What the shaper queued drains at R after the trial: 3 × 256 full-size frames take
    // 93 ms at 100 Mbit/s.
    t.drain = Duration::from_secs(1);
    t.max_lag = Duration::from_millis(5);
    let judge = tester::Rfc2544Config::new(rate_pps, profile.avg_frame_size(), 1);
    let retries = tester::MlrConfig::new(t.duration).max_retries;
    let mut underruns = 0;
    loop {
        let r = gen.run_trial(&mut mem, &mut a, &mut b, &t)?;
        let under = judge.underran(rate_pps, &r);
        if !under || underruns >= retries {
            return Ok((r, underruns, under));
        }
        underruns += 1;
        // Let the shaper's queues empty before the retry.
        std::thread::sleep(Duration::from_millis(300));
    }
}

// ---------------------------------------------------------------------------------------
// Summaries, targets, output.

/// A congestion run whose tester sent at least this share of the load asked is judged
/// against the targets (an underrun of a few percent leaves the shaper as oversubscribed).
pub const JUDGED_SHARE: f64 = 0.95;

/// Whether a congestion run is judged: the tester offered the load in full, or at least
/// [`JUDGED_SHARE`] of `asked_mbps` (what its classes were offered, `offered_mbps`).
fn judged(tester_limited: bool, offered_mbps: Option<f64>, asked_mbps: f64) -> bool {
    !tester_limited || offered_mbps.is_some_and(|o| o >= JUDGED_SHARE * asked_mbps)
}

/// EF's p99 latency limit at `rate_bps`: 1 ms plus one 1,500-byte MTU's serialisation.
pub fn ef_latency_limit_us(rate_bps: u64) -> f64 {
    1000.0 + 1500.0 * 8.0 / rate_bps as f64 * 1e6
}

impl Report {
    /// The cost per DUT, transport and profile, and the issue's targets.
    pub fn finish(&mut self, opts: &Options) {
        use tester::compare::{paired_ratio, spread};
        let mut keys: Vec<(String, String, String)> = Vec::new();
        for r in self.runs.iter().filter(|r| r.test != "congestion") {
            let k = (r.dut.clone(), r.transport.clone(), r.profile.clone());
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        let reps = opts.repeat.max(1);
        let run_of = |dut: &str, tr: &str, p: &str, test: &str, k: usize| {
            self.runs.iter().find(|r| {
                r.dut == dut
                    && r.transport == tr
                    && r.profile == p
                    && r.test == test
                    && r.repeat == k
            })
        };
        let ndr = |dut: &str, tr: &str, p: &str, test: &str, k: usize| {
            run_of(dut, tr, p, test, k).and_then(|r| r.throughput_mpps)
        };
        let ns = |dut: &str, tr: &str, p: &str, test: &str, k: usize| {
            run_of(dut, tr, p, test, k).and_then(|r| r.ns_per_packet)
        };
        let limited = |dut: &str, tr: &str, p: &str| {
            self.runs.iter().any(|r| {
                r.dut == dut
                    && r.transport == tr
                    && r.profile == p
                    && r.test != "congestion"
                    && r.tester_limited
            })
        };
        // Linux's NDR with the policy on veth as if it had a whole core: scaled where its
        // forwarding, in softirq on the tester's core, bound the search.
        let linux_core = |p: &str, k: usize| {
            let r = run_of("linux", "veth", p, "qos-on", k)?;
            let n = r.throughput_mpps?;
            Some(match r.tester_softirq_pct {
                Some(s) if r.tester_limited && s >= SOFTIRQ_BOUND => n * 100.0 / s,
                _ => n,
            })
        };
        // Whether every Linux qos-on search of profile `p` that the tester "could not
        // offer" was bound by Linux's softirq instead.
        let linux_own = |p: &str| {
            self.runs
                .iter()
                .filter(|r| r.dut == "linux" && r.transport == "veth" && r.profile == p)
                .filter(|r| r.test == "qos-on" && r.tester_limited)
                .all(|r| r.tester_softirq_pct.is_some_and(|s| s >= SOFTIRQ_BOUND))
        };
        self.cost = keys
            .iter()
            .map(|(dut, tr, p)| {
                let on_over_off = paired_ratio(
                    (0..reps)
                        .map(|k| (ndr(dut, tr, p, "qos-on", k), ndr(dut, tr, p, "qos-off", k))),
                );
                let cpu = paired_ratio(
                    (0..reps).map(|k| (ns(dut, tr, p, "qos-off", k), ns(dut, tr, p, "qos-on", k))),
                );
                let trials = || {
                    (0..reps).flat_map(|k| {
                        ["qos-off", "qos-on"]
                            .into_iter()
                            .filter_map(move |t| run_of(dut, tr, p, t, k))
                    })
                };
                CostSummary {
                    ns_off: spread((0..reps).map(|k| ns(dut, tr, p, "qos-off", k))),
                    ns_on: spread((0..reps).map(|k| ns(dut, tr, p, "qos-on", k))),
                    cpu_cost_pct: cpu.median.map(|m| (1.0 - m) * 100.0),
                    cost_load_mpps: trials()
                        .filter_map(|r| r.rfc2544.as_ref()?.cost.as_ref())
                        .map(|c| c.offered_mpps)
                        .next(),
                    cost_trial_lost: trials()
                        .any(|r| r.cost_trial_loss.is_some_and(|l| l > COST_TRIAL_LOSS)),
                    cost_rx_mpps: spread(trials().map(|r| r.cost_rx_mpps)).map(|s| s.median),
                    cost_loads_apart: (0..reps).any(|k| {
                        let rx = |t| run_of(dut, tr, p, t, k).and_then(|r| r.cost_rx_mpps);
                        match (rx("qos-off"), rx("qos-on")) {
                            (Some(a), Some(b)) => (a - b).abs() > COST_LOADS_APART * a.max(b),
                            _ => false,
                        }
                    }),
                    dut: dut.clone(),
                    transport: tr.clone(),
                    profile: p.clone(),
                    off: spread((0..reps).map(|k| ndr(dut, tr, p, "qos-off", k))),
                    on: spread((0..reps).map(|k| ndr(dut, tr, p, "qos-on", k))),
                    cost_pct: on_over_off.median.map(|m| (1.0 - m) * 100.0),
                    on_over_off,
                    over_linux_on: (dut != "linux").then(|| {
                        paired_ratio((0..reps).map(|k| {
                            (
                                ndr(dut, tr, p, "qos-on", k),
                                ndr("linux", "veth", p, "qos-on", k),
                            )
                        }))
                    }),
                    over_linux_core: (dut != "linux").then(|| {
                        paired_ratio(
                            (0..reps).map(|k| (ndr(dut, tr, p, "qos-on", k), linux_core(p, k))),
                        )
                    }),
                    tester_limited: limited(dut, tr, p)
                        || (dut != "linux" && limited("linux", "veth", p)),
                }
            })
            .collect();
        let mut targets = Vec::new();
        const COST: &str =
            "classification, marking and three queues cost ≤ 10 % of zero-loss throughput";
        for c in &self.cost {
            targets.push(Target {
                target: COST.into(),
                subject: format!("{}/{} {}", c.dut, c.transport, c.profile),
                value: c.cost_pct,
                limit: "≤ 10 %".into(),
                met: c.cost_pct.filter(|_| !c.tester_limited).map(|x| x <= 10.0),
            });
            // Where the tester bounded the NDRs, the DUT's own CPU time per packet at a
            // load below that bound says what the policy would cost a DUT bound by its
            // core. Ferrouter's figure is its worker's alone; Linux's includes the
            // tester's socket work, so it is shown, not judged.
            if c.tester_limited && c.cpu_cost_pct.is_some() {
                targets.push(Target {
                    target: format!("{COST} (by CPU time per packet: the tester bounded the NDRs)"),
                    subject: format!(
                        "{}/{} {} at {} Mpps",
                        c.dut,
                        c.transport,
                        c.profile,
                        c.cost_rx_mpps.map_or("-".into(), |m| format!("{m:.3}"))
                    ),
                    value: c.cpu_cost_pct,
                    limit: "≤ 10 %".into(),
                    met: c
                        .cpu_cost_pct
                        .filter(|_| c.dut != "linux" && !c.cost_trial_lost && !c.cost_loads_apart)
                        .map(|x| x <= 10.0),
                });
            }
        }
        for c in self
            .cost
            .iter()
            .filter(|c| c.dut == "ferrouter" && c.transport == "veth")
        {
            if let Some(r) = &c.over_linux_core {
                // Ferrouter's NDR bounded by the tester makes the ratio a lower bound: met
                // if even that reaches 2×. Linux's bounded by the generator would make it
                // an upper bound; bound by its own softirq on the tester's core, it is
                // Linux's, taken as if it had the whole core (`over_linux_core`).
                let linux_limited = self.cost.iter().any(|l| {
                    l.dut == "linux"
                        && l.transport == "veth"
                        && l.profile == c.profile
                        && l.tester_limited
                }) && !linux_own(&c.profile);
                let ours_limited = limited(&c.dut, &c.transport, &c.profile);
                targets.push(Target {
                    target:
                        "ferrouter's zero-loss throughput with the policy ≥ 2× Linux tc's on veth"
                            .into(),
                    subject: format!(
                        "ferrouter ÷ linux, veth {}{}",
                        c.profile,
                        if c.over_linux_core != c.over_linux_on {
                            " (linux given a whole core)"
                        } else {
                            ""
                        }
                    ),
                    value: r.median,
                    limit: "≥ 2×".into(),
                    met: r.median.filter(|_| !linux_limited).and_then(|x| {
                        if x >= 2.0 {
                            Some(true)
                        } else {
                            (!ours_limited).then_some(false)
                        }
                    }),
                });
            }
        }
        let ef_limit = ef_latency_limit_us(opts.rate_bps);
        let mut duts: Vec<&str> = Vec::new();
        for r in self.runs.iter().filter(|r| r.test == "congestion") {
            if !duts.contains(&r.dut.as_str()) {
                duts.push(&r.dut);
            }
        }
        for dut in duts {
            let all: Vec<&Run> = self
                .runs
                .iter()
                .filter(|r| r.test == "congestion" && r.dut == dut)
                .collect();
            // Runs where the tester offered (nearly) the load; without any, the figures are
            // shown but not judged.
            let asked = opts.rate_bps as f64 / 1e6 * opts.oversubscription;
            let valid: Vec<&Run> = all
                .iter()
                .copied()
                .filter(|r| judged(r.tester_limited, r.offered_mbps, asked))
                .collect();
            let judged = !valid.is_empty();
            let runs = if judged { valid } else { all };
            let judge = |m: Option<bool>| m.filter(|_| judged);
            let class = |name: &str| -> Vec<&ClassRow> {
                runs.iter()
                    .filter_map(|r| r.classes.iter().find(|c| c.name == name))
                    .collect()
            };
            // The worst repetition of each figure.
            let worst = |v: Vec<Option<f64>>, abs: bool| -> Option<f64> {
                v.into_iter().flatten().max_by(|a, b| {
                    if abs {
                        a.abs().total_cmp(&b.abs())
                    } else {
                        a.total_cmp(b)
                    }
                })
            };
            let acc = worst(
                runs.iter()
                    .map(|r| r.shaper_accuracy.map(|a| (a - 1.0) * 100.0))
                    .collect(),
                true,
            );
            targets.push(Target {
                target: "the shaper's delivered rate within 1 % of its configured rate".into(),
                subject: dut.into(),
                value: acc,
                limit: "±1 %".into(),
                met: judge(acc.map(|a| a.abs() <= 1.0)),
            });
            let ef = class("ef");
            let loss = worst(ef.iter().map(|c| Some(c.loss)).collect(), false);
            targets.push(Target {
                target: format!(
                    "EF loses nothing at {}× oversubscription",
                    opts.oversubscription
                ),
                subject: format!("{dut} ef"),
                value: loss.map(|l| l * 100.0),
                limit: "0 % lost".into(),
                met: judge(loss.map(|l| l == 0.0)),
            });
            let p99 = worst(ef.iter().map(|c| c.latency_us_p99).collect(), false);
            targets.push(Target {
                target: "EF's p99 latency under 1 ms plus one MTU's serialisation time at R".into(),
                subject: format!("{dut} ef"),
                value: p99,
                limit: format!("< {ef_limit:.0} µs"),
                met: judge(p99.map(|p| p < ef_limit)),
            });
            for name in ["af41", "be"] {
                let e = worst(
                    class(name).iter().map(|c| c.share_error_pct).collect(),
                    true,
                );
                targets.push(Target {
                    target: "AF41 and best effort each get their share within ±2 %".into(),
                    subject: format!("{dut} {name}"),
                    value: e,
                    limit: "±2 % of the share".into(),
                    met: judge(e.map(|x| x.abs() <= 2.0)),
                });
            }
        }
        self.targets = targets;
        if self.load_before[0] > 1.0 || self.load_after[0] > 1.0 {
            self.notes.push(format!(
                "the machine was busy: load average {:.2} before, {:.2} after (2 cores: the tester and the DUT share them with everything else)",
                self.load_before[0], self.load_after[0]
            ));
        }
    }

    /// The bars of [`Report::chart`]: the cost test's NDR (median over the repetitions) by
    /// profile and test when there is one, else the congestion test's delivered rate by
    /// class; one series per DUT and transport.
    pub fn bars(&self) -> (&'static str, &'static str, Vec<crate::chart::Bar>) {
        if !self.cost.is_empty() {
            let mut bars = Vec::new();
            for c in &self.cost {
                for (test, s) in [("qos-off", &c.off), ("qos-on", &c.on)] {
                    if let Some(s) = s {
                        bars.push(crate::chart::Bar {
                            series: format!("{}/{}", c.dut, c.transport),
                            group: format!("{} {test}", c.profile),
                            value: s.median,
                        });
                    }
                }
            }
            return (
                "QoS: zero-loss throughput, qos-off and qos-on (Mpps)",
                "Mpps",
                bars,
            );
        }
        let bars = self
            .runs
            .iter()
            .filter(|r| r.test == "congestion" && r.repeat == 0)
            .flat_map(|r| {
                r.classes.iter().map(move |c| crate::chart::Bar {
                    series: format!("{}/{}", r.dut, r.transport),
                    group: c.name.clone(),
                    value: c.delivered_mbps,
                })
            })
            .collect();
        (
            "QoS under congestion: delivered per class (Mbit/s)",
            "Mbit/s",
            bars,
        )
    }

    /// A grouped bar chart of the report, as SVG ([`Report::bars`]).
    pub fn chart(&self, path: &Path) -> Result<()> {
        let (title, y, bars) = self.bars();
        crate::chart::bars(path, title, y, &bars)
    }

    /// The report as text tables.
    pub fn table(&self) -> String {
        use std::fmt::Write as _;
        let opt = |v: Option<f64>, p: usize| v.map_or("-".into(), |x| format!("{x:.p$}"));
        let mut s = String::new();
        let _ = writeln!(
            s,
            "machine: {}, nproc {}, kernel {}; load average {:.2} → {:.2}",
            self.machine.cpu_model,
            self.machine.nproc,
            self.machine.kernel,
            self.load_before[0],
            self.load_after[0]
        );
        if !self.cost.is_empty() {
            let _ = writeln!(
                s,
                "\n{:<16} {:<8} {:>12} {:>12} {:>8} {:>14} {:>20} {:>9}",
                "DUT",
                "profile",
                "qos-off Mpps",
                "qos-on Mpps",
                "cost",
                "on ÷ linux on",
                "ns/packet off → on",
                "CPU cost"
            );
            for c in &self.cost {
                let _ = writeln!(
                    s,
                    "{:<16} {:<8} {:>12} {:>12} {:>8} {:>14} {:>20} {:>9}",
                    format!("{}/{}", c.dut, c.transport),
                    c.profile,
                    opt(c.off.map(|x| x.median), 3),
                    opt(c.on.map(|x| x.median), 3),
                    c.cost_pct.map_or("-".into(), |x| format!("{x:.1} %")),
                    c.over_linux_on
                        .as_ref()
                        .and_then(|r| r.median)
                        .map_or("-".into(), |x| format!("{x:.2}×")),
                    format!(
                        "{} → {}",
                        opt(c.ns_off.map(|x| x.median), 1),
                        opt(c.ns_on.map(|x| x.median), 1)
                    ),
                    c.cpu_cost_pct.map_or("-".into(), |x| format!("{x:.1} %")),
                );
            }
        }
        let cong: Vec<&Run> = self
            .runs
            .iter()
            .filter(|r| r.test == "congestion")
            .collect();
        if !cong.is_empty() {
            let _ = writeln!(
                s,
                "\n{:<16} {:<6} {:>10} {:>10} {:>10} {:>8} {:>9} {:>9}",
                "congestion",
                "class",
                "offered",
                "delivered",
                "expected",
                "share",
                "loss",
                "p99 µs"
            );
            for r in cong {
                for c in &r.classes {
                    let _ = writeln!(
                        s,
                        "{:<16} {:<6} {:>10.2} {:>10.2} {:>10} {:>8} {:>9} {:>9}",
                        format!("{}#{}", r.dut, r.repeat + 1),
                        c.name,
                        c.offered_mbps,
                        c.delivered_mbps,
                        opt(c.expected_mbps, 2),
                        c.share
                            .map_or("-".into(), |x| format!("{:.1} %", x * 100.0)),
                        format!("{:.3} %", c.loss * 100.0),
                        opt(c.latency_us_p99, 0),
                    );
                }
                let _ = writeln!(
                    s,
                    "{:<16} {:<6} {:>10} {:>10} of R = {} Mbit/s: {}{}",
                    "",
                    "total",
                    opt(r.offered_mbps, 2),
                    opt(r.delivered_mbps, 2),
                    opt(r.rate_mbps, 1),
                    r.shaper_accuracy
                        .map_or("-".into(), |a| format!("{:.2} % of R", a * 100.0)),
                    r.shaper_burst_bytes
                        .map_or(String::new(), |b| format!(" (shaper burst {b} bytes)"))
                );
            }
            let _ = writeln!(s, "rates: Mbit/s of Ethernet frames without FCS (what both shapers count); delivered over the receive window");
        }
        if !self.targets.is_empty() {
            let _ = writeln!(s, "\ntargets:");
            for t in &self.targets {
                let _ = writeln!(
                    s,
                    "  {} {}: {} (limit {}) {}",
                    match t.met {
                        Some(true) => "✓",
                        Some(false) => "✗",
                        None => "?",
                    },
                    t.subject,
                    opt(t.value, 2),
                    t.limit,
                    t.target
                );
            }
        }
        for r in &self.runs {
            for n in &r.notes {
                let _ = writeln!(s, "{}/{} {} {}: {n}", r.dut, r.transport, r.test, r.profile);
            }
        }
        for n in &self.notes {
            let _ = writeln!(s, "{n}");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ferrouter_policy_is_valid_and_linux_gets_the_same() {
        let text = ferrouter_config(100_000_000, None, ["da", "db"]);
        let v: toml::Value = toml::from_str(&text).unwrap();
        let cfg: qos::config::QosConfig =
            toml::from_str(&toml::to_string(&v["qos"]).unwrap()).unwrap();
        let errors = cfg.validate(&["da", "db"], &["da", "db"], &[]);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(cfg.policies[0].classes.len(), 3);
        let tc = linux_policy_text(100_000_000, "fq_codel");
        assert!(linux_policy_text(100_000_000, "pfifo").contains("handle 30: pfifo limit 256"));
        for want in [
            "htb rate 100000000bit ceil 100000000bit",
            "classid 1:10 htb rate 30000000bit ceil 30000000bit prio 0",
            "classid 1:20 htb rate 28000000bit ceil 100000000bit prio 1 quantum 1536",
            "classid 1:30 htb rate 42000000bit ceil 100000000bit prio 1 quantum 2304",
            "match ip dsfield 0xb8 0xfc flowid 1:10",
            "match ip dsfield 0x88 0xfc flowid 1:20",
            "pfifo limit 256",
            "ip dscp set af41",
            "ip dscp set cs0",
        ] {
            assert!(tc.contains(want), "{want} missing from:\n{tc}");
        }
        // The classes the tester sends: 10/45/45 % of the frames, EF marked EF.
        let t = traffic_classes();
        assert_eq!(t.iter().map(|c| c.weight).sum::<u32>(), 100);
        assert_eq!((t[0].dscp, t[1].dscp, t[2].dscp), (46, 36, 8));
    }

    /// The compiled scheduler of port `db` under `text`'s policy.
    fn compiled_db(text: &str) -> qos::sched::SchedSpec {
        let v: toml::Value = toml::from_str(text).unwrap();
        let cfg: qos::config::QosConfig =
            toml::from_str(&toml::to_string(&v["qos"]).unwrap()).unwrap();
        let errors = cfg.validate(&["da", "db"], &["da", "db"], &[]);
        assert!(errors.is_empty(), "{errors:?}");
        let names = ["da".to_string(), "db".to_string()];
        let c = cfg
            .compile(&names, 2, &qos::config::Compiled::default(), 0)
            .unwrap();
        c.output[1].clone().unwrap()
    }

    #[test]
    fn the_shaper_burst_is_milliseconds_of_r_in_range_and_left_out_by_default() {
        // 20 ms of 100 Mbit/s: 250,000 bytes, written into the policy.
        assert_eq!(shaper_burst_bytes(100_000_000, 20.0).unwrap(), 250_000);
        assert_eq!(shaper_burst_bytes(20_000_000, 20.0).unwrap(), 50_000);
        let text = ferrouter_config(100_000_000, Some(250_000), ["da", "db"]);
        assert!(text.contains("\nburst = 250000\n"), "{text}");
        assert_eq!(compiled_db(&text).burst_bytes, 250_000);
        // The default writes no `burst` (the policy as before), and ferrouter's shaper then
        // has its default, which is what a congestion run reports.
        let text = ferrouter_config(100_000_000, None, ["da", "db"]);
        assert!(!text.contains("burst"), "{text}");
        assert_eq!(compiled_db(&text).burst_bytes, 25_000);
        assert_eq!(qos::config::default_burst_bytes(100_000_000), 25_000);
        // Out of a policy's range (a jumbo frame to 100 MB), or not a duration: refused,
        // naming the option.
        for ms in [0.1, 10_000.0, 0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = shaper_burst_bytes(100_000_000, ms).unwrap_err().to_string();
            assert!(e.contains("--shaper-burst-ms"), "{ms}: {e}");
        }
        let e = shaper_burst_bytes(100_000_000, 0.1)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("1250 bytes") && e.contains("9216 to 100000000"),
            "{e}"
        );
        let opts = Options {
            shaper_burst_ms: Some(0.1),
            ..Options::default()
        };
        assert!(check(&opts).is_err());
        let opts = Options {
            shaper_burst_ms: Some(20.0),
            ..Options::default()
        };
        check(&opts).unwrap();
        check(&Options::default()).unwrap();
    }

    #[test]
    fn shares_are_judged_against_what_ef_leaves() {
        let row = |name: &str, offered: f64, delivered: f64| ClassRow {
            name: name.into(),
            offered_mbps: offered,
            delivered_mbps: delivered,
            ..ClassRow::default()
        };
        let mut c = vec![
            row("ef", 20.0, 20.0),
            row("af41", 90.0, 32.0),
            row("be", 90.0, 47.0),
        ];
        judge_shares(&mut c, 100_000_000);
        assert_eq!(c[0].expected_mbps, Some(20.0));
        assert!(c[0].share.is_none());
        // 79 Mbit/s left by EF: AF41 should get 31.6, best effort 47.4.
        assert!((c[1].expected_mbps.unwrap() - 31.6).abs() < 1e-9);
        assert!((c[2].expected_mbps.unwrap() - 47.4).abs() < 1e-9);
        assert!((c[1].share_error_pct.unwrap() - (32.0 / 79.0 / 0.4 - 1.0) * 100.0).abs() < 1e-9);
        assert!(c[2].share_error_pct.unwrap() < 0.0);
        // EF above its maximum is expected at the maximum.
        let mut c = vec![row("ef", 50.0, 30.0)];
        judge_shares(&mut c, 100_000_000);
        assert_eq!(c[0].expected_mbps, Some(30.0));
        assert!((ef_latency_limit_us(100_000_000) - 1120.0).abs() < 1e-9);
    }

    /// A cost run of `dut` on veth at ipv4-64 with NDR `ndr`, repetition `k`, nothing else
    /// measured.
    fn cost_run(dut: &str, test: &str, ndr: f64, k: usize) -> Run {
        Run {
            dut: dut.into(),
            transport: "veth".into(),
            test: test.into(),
            profile: "ipv4-64".into(),
            throughput_mpps: Some(ndr),
            classes: vec![],
            repeat: k,
            lossless_mpps: None,
            tester_limited: false,
            rate_mbps: None,
            offered_mbps: None,
            delivered_mbps: None,
            shaper_accuracy: None,
            rx_window_s: None,
            underruns: 0,
            shaper_burst_bytes: None,
            ns_per_packet: None,
            cost_trial_loss: None,
            cost_rx_mpps: None,
            tester_softirq_pct: None,
            dut_counters: None,
            notes: vec![],
            rfc2544: None,
        }
    }

    #[test]
    fn the_report_summarises_cost_and_targets() {
        let run = cost_run;
        let mut cong = run("ferrouter", "congestion", 0.1, 0);
        cong.shaper_accuracy = Some(0.995);
        cong.classes = vec![ClassRow {
            name: "ef".into(),
            loss: 0.0,
            latency_us_p99: Some(300.0),
            ..ClassRow::default()
        }];
        // A run whose tester sent half the load asked is shown, not judged.
        let mut short = run("linux", "congestion", 0.1, 0);
        short.shaper_accuracy = Some(0.5);
        short.tester_limited = true;
        short.offered_mbps = Some(100.0);
        let mut r = Report {
            runs: vec![
                run("linux", "qos-off", 0.5, 0),
                run("ferrouter", "qos-off", 1.0, 0),
                run("linux", "qos-on", 0.25, 0),
                run("ferrouter", "qos-on", 0.95, 0),
                cong,
                short,
            ],
            ..Report::default()
        };
        r.finish(&Options::default());
        let f = r.cost.iter().find(|c| c.dut == "ferrouter").unwrap();
        assert!((f.cost_pct.unwrap() - 5.0).abs() < 1e-9);
        assert!((f.over_linux_on.unwrap().median.unwrap() - 3.8).abs() < 1e-9);
        let l = r.cost.iter().find(|c| c.dut == "linux").unwrap();
        assert!((l.cost_pct.unwrap() - 50.0).abs() < 1e-9);
        assert!(l.over_linux_on.is_none());
        let met: Vec<(String, Option<bool>)> = r
            .targets
            .iter()
            .map(|t| (t.subject.clone(), t.met))
            .collect();
        assert!(
            met.contains(&("ferrouter/veth ipv4-64".into(), Some(true))),
            "{met:?}"
        );
        assert!(met.contains(&("linux/veth ipv4-64".into(), Some(false))));
        assert!(met.contains(&("ferrouter ÷ linux, veth ipv4-64".into(), Some(true))));
        assert!(
            met.contains(&("ferrouter".into(), Some(true))),
            "shaper: {met:?}"
        );
        assert!(
            met.contains(&("ferrouter af41".into(), None)),
            "not measured"
        );
        assert!(met.contains(&("linux".into(), None)), "not judged: {met:?}");
        let shaper = r.targets.iter().find(|t| t.subject == "linux").unwrap();
        assert!((shaper.value.unwrap() + 50.0).abs() < 1e-9, "still shown");
        // No CPU-cost trials: no CPU cost, and no target judged on one.
        assert!(f.cpu_cost_pct.is_none() && f.ns_on.is_none());
        assert!(!r.targets.iter().any(|t| t.target.contains("CPU time")));
        let (title, _, bars) = r.bars();
        assert!(title.contains("zero-loss"));
        assert_eq!(bars.len(), 4);
        let text = r.table();
        assert!(text.contains("5.0 %") && text.contains("3.80×"), "{text}");
        let path = std::env::temp_dir().join(format!("qoschart-{}.svg", std::process::id()));
        r.chart(&path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(svg.contains("<svg") && svg.contains("ferrouter/veth"));
    }

    /// Where the tester bounds ferrouter's NDRs, the cost is judged on its CPU time per
    /// packet, and the ratio to Linux is a lower bound: met only if it reaches 2×.
    #[test]
    fn a_tester_bound_cost_is_judged_by_cpu_time() {
        let run = |dut: &str, test: &str, ndr: f64, ns: Option<f64>, limited: bool| Run {
            tester_limited: limited,
            ns_per_packet: ns,
            cost_trial_loss: ns.map(|_| 0.0),
            cost_rx_mpps: ns.map(|_| 1.0),
            ..cost_run(dut, test, ndr, 0)
        };
        let report = |ours_on: f64, ours_ns_on: f64, loss: f64| {
            let mut on = run("ferrouter", "qos-on", ours_on, Some(ours_ns_on), true);
            on.cost_trial_loss = Some(loss);
            let mut r = Report {
                runs: vec![
                    run("linux", "qos-off", 0.6, Some(900.0), false),
                    run("ferrouter", "qos-off", 1.2, Some(100.0), true),
                    run("linux", "qos-on", 0.5, Some(1000.0), false),
                    on,
                ],
                ..Report::default()
            };
            r.finish(&Options::default());
            r
        };
        let judged = |r: &Report, subject: &str, cpu: bool| {
            r.targets
                .iter()
                .find(|t| t.subject.starts_with(subject) && t.target.contains("CPU time") == cpu)
                .unwrap_or_else(|| panic!("no target for {subject}: {:?}", r.targets))
                .met
        };
        // 100 → 108 ns: 7.4 % by CPU time; the NDRs (tester's) judge nothing.
        let r = report(1.2, 108.0, 0.0);
        let f = r.cost.iter().find(|c| c.dut == "ferrouter").unwrap();
        assert!((f.cpu_cost_pct.unwrap() - (1.0 - 100.0 / 108.0) * 100.0).abs() < 1e-9);
        assert_eq!(judged(&r, "ferrouter/veth ipv4-64", false), None);
        assert_eq!(judged(&r, "ferrouter/veth ipv4-64", true), Some(true));
        // Linux's CPU cost is shown, not judged (its time includes the tester's), and
        // its NDRs were not bounded, so no CPU-time target is written for it.
        let l = r.cost.iter().find(|c| c.dut == "linux").unwrap();
        assert!((l.cpu_cost_pct.unwrap() - 10.0).abs() < 1e-9);
        assert!(!r
            .targets
            .iter()
            .any(|t| t.subject.starts_with("linux") && t.target.contains("CPU time")));
        // 1.2 ÷ 0.5: a lower bound of 2.4×, met.
        assert_eq!(judged(&r, "ferrouter ÷ linux", false), Some(true));
        // 100 → 125 ns: 20 %, not met; and a lower bound of 1.8× says nothing.
        let r = report(0.9, 125.0, COST_TRIAL_LOSS);
        assert_eq!(judged(&r, "ferrouter/veth ipv4-64", true), Some(false));
        assert_eq!(judged(&r, "ferrouter ÷ linux", false), None);
        // A cost trial that lost more than a few frames is not judged on.
        let r = report(1.2, 108.0, 0.01);
        assert_eq!(judged(&r, "ferrouter/veth ipv4-64", true), None);
        // Nor trials the tester gave different loads (a vector's fixed costs weigh more
        // at the lower one).
        let mut r = report(1.2, 108.0, 0.0);
        for x in r
            .runs
            .iter_mut()
            .filter(|x| x.dut == "ferrouter" && x.test == "qos-on")
        {
            x.cost_rx_mpps = Some(0.8);
        }
        r.finish(&Options::default());
        assert!(r
            .cost
            .iter()
            .any(|c| c.dut == "ferrouter" && c.cost_loads_apart));
        assert_eq!(judged(&r, "ferrouter/veth ipv4-64", true), None);

        // Linux's qos-on search "tester-limited" too: with the tester's core 80 % in
        // softirq it was Linux's own forwarding there, taken as if it had the whole core
        // (0.5 → 0.625 Mpps); with 30 %, the generator's, and the ratio says nothing.
        let with_linux = |ours_on: f64, softirq: f64| {
            let mut r = report(ours_on, 108.0, 0.0);
            for x in r
                .runs
                .iter_mut()
                .filter(|x| x.dut == "linux" && x.test == "qos-on")
            {
                x.tester_limited = true;
                x.tester_softirq_pct = Some(softirq);
            }
            r.finish(&Options::default());
            r
        };
        let ratio = |r: &Report| {
            r.targets
                .iter()
                .find(|t| t.subject.starts_with("ferrouter ÷ linux"))
                .cloned()
                .unwrap()
        };
        let t = ratio(&with_linux(1.3, 80.0));
        assert!(t.subject.ends_with("(linux given a whole core)"), "{t:?}");
        assert!((t.value.unwrap() - 1.3 / 0.625).abs() < 1e-9, "{t:?}");
        assert_eq!(t.met, Some(true));
        assert_eq!(
            ratio(&with_linux(1.2, 80.0)).met,
            None,
            "1.92×, ours a lower bound"
        );
        assert_eq!(
            ratio(&with_linux(1.3, 30.0)).met,
            None,
            "Linux's an upper bound"
        );
    }
}
