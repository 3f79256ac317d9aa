//! The results of an RFC 2544 run: the reports' table layout, JSON and an SVG chart.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use serde::Serialize;
/// Latency at the measured throughput, microseconds (min, avg, max, p99).
pub use tester::rfc2544::LatencyUs as Latency;
use tester::rfc2544::{FailReason, SearchStage};

/// One offered-load trial (frame loss test).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LoadRow {
    /// Offered load, percent of the configured line rate.
    pub load_pct: f64,
    /// Frames per second the tester was asked to offer, millions.
    pub offered_mpps: f64,
    /// Frames per second it managed to send, millions (below `offered_mpps` when the
    /// transport, not the DUT, is the limit).
    pub sent_mpps: f64,
    /// Frames per second received back through the DUT, millions.
    pub rx_mpps: f64,
    /// Received bit rate at L1 (frame + 20 bytes of preamble and gap), Gbit/s.
    pub rx_gbps_l1: f64,
    /// Frames lost, percent of frames sent.
    pub loss_pct: f64,
}

/// One trial of a run, as run: the evidence behind its NDR, PDR and loss figures.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TrialRow {
    /// 1-based number within the run.
    pub n: u32,
    /// `search`, `load` (frame loss at a load) or `latency`.
    pub phase: String,
    /// The search goal it served (`ndr`, `pdr`; MLR search only). Every goal classifies
    /// the load from it.
    pub goal: Option<String>,
    /// `exploratory` (shorter trials) or `final` (MLR search only).
    pub stage: Option<SearchStage>,
    /// Requested duration, s.
    pub duration_s: f64,
    /// Offered load, percent of the line rate.
    pub load_pct: f64,
    /// Frames per second asked for (all directions), millions.
    pub offered_mpps: f64,
    /// Frames per second the tester sent, millions.
    pub sent_mpps: f64,
    /// Frames per second received through the DUT, millions.
    pub rx_mpps: f64,
    /// Frames sent.
    pub tx: u64,
    /// Frames received.
    pub rx: u64,
    /// Frames lost.
    pub lost: u64,
    /// Frames lost, percent of frames sent.
    pub loss_pct: f64,
    /// Whether it met its criterion (search trials: the goal's loss ratio).
    pub passed: bool,
    /// Invalidated: the tester could not offer the load (underrun). It was retried, and
    /// it is not evidence about the DUT.
    pub invalid: bool,
    /// Why it did not pass.
    pub fail_reason: Option<FailReason>,
    /// Transmit bursts the tester's port took only in part: over memif, the DUT had not
    /// yet emptied the ring (backpressure); over AF_XDP, the kernel's ring was full.
    pub tx_port_full: u64,
    /// Frames the tester gave up on because it fell too far behind its schedule.
    pub tx_skipped: u64,
    /// Per traffic class, when the traffic has classes ([`Options::classes`]).
    ///
    /// [`Options::classes`]: super::Options::classes
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<tester::ClassResult>,
}

/// Where one core's time went during a run (from /proc/stat), percent.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct CoreSplit {
    /// Core number.
    pub core: usize,
    /// What ran there: "tester" or "dut".
    pub role: String,
    /// Userspace (the tester, ferrouter's worker, testpmd).
    pub user: f64,
    /// Kernel, outside interrupts (system calls: AF_XDP/AF_PACKET kicks, veth transmit).
    pub system: f64,
    /// Softirq (NAPI: veth receive, XDP, the kernel's forwarding path).
    pub softirq: f64,
    /// Idle.
    pub idle: f64,
    /// Stolen by the hypervisor.
    pub steal: f64,
}

/// One DUT × transport × profile.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Run {
    /// `ferrouter`, `linux` or `testpmd`.
    pub dut: String,
    /// `veth` or `memif`.
    pub transport: String,
    /// Traffic profile (`ipv4-64`, `imix2`, ...).
    pub profile: String,
    /// Flows (distinct 5-tuples) per direction.
    pub flows: u32,
    /// Traffic pattern in the reports' notation (`1pp - uni`, `1pp - bi`).
    pub pattern: String,
    /// IPv4/IPv6 ratio, e.g. `100/0`.
    pub ratio: String,
    /// Frame size column: bytes for uniform profiles, the IMIX name otherwise.
    pub frame_size: String,
    /// Mean frame size, bytes (with FCS).
    pub avg_frame: f64,
    /// IPv4 routes in the DUT's table.
    pub routes4: usize,
    /// IPv6 routes in the DUT's table.
    pub routes6: usize,
    /// The line rate loads are relative to, Gbit/s.
    pub line_rate_gbps: f64,
    /// Loss the throughput search tolerated, percent (0 = RFC 2544 zero loss).
    pub loss_tolerance_pct: f64,
    /// The search: `mlr` (NDR and PDR from repeated trials) or `binary` (RFC 2544).
    pub search: String,
    /// Throughput: the NDR, the highest rate with no more loss than tolerated, Mpps.
    pub throughput_mpps: f64,
    /// The NDR (the same as `throughput_mpps`), Mpps.
    pub ndr_mpps: f64,
    /// The PDR: the highest rate losing at most `pdr_loss_pct`, Mpps (MLR search with a
    /// PDR goal only).
    pub pdr_mpps: Option<f64>,
    /// The PDR's loss goal, percent.
    pub pdr_loss_pct: Option<f64>,
    /// Search trials the tester could not offer in full (underruns), each retried and none
    /// counted as the DUT's loss.
    pub underruns: u32,
    /// The search's trial or time budget ran out before NDR and PDR reached the
    /// resolution.
    pub budget_exhausted: bool,
    /// The same at L1, Gbit/s.
    pub throughput_gbps_l1: f64,
    /// Throughput as a percent of the line rate.
    pub throughput_load_pct: f64,
    /// Frame loss percent at each offered load ("25", "50", "75", "100").
    pub loss_at_load: BTreeMap<String, f64>,
    /// The frame-loss trials in full.
    pub loads: Vec<LoadRow>,
    /// Latency at the throughput rate (absent when throughput is 0).
    pub latency_us: Option<Latency>,
    /// Trials run.
    pub trial_count: usize,
    /// Every trial, in order.
    pub trials: Vec<TrialRow>,
    /// Where the two cores' time went over the whole run of this profile.
    pub cpu: Vec<CoreSplit>,
    /// CPU cost per packet at a fixed offered load below the DUTs' limits (`--cost-load`):
    /// a figure that does not depend on how fast the tester can send.
    pub cost: Option<Cost>,
    /// What limited or qualified the run.
    pub notes: Vec<String>,
    /// Which repetition (0-based) of `--repeat` this run belongs to: the DUTs alternate
    /// within each one (A B A B ...).
    pub repeat: usize,
}

impl Run {
    /// The NDR as a measurement, or `None` when the search ran out of budget before any
    /// load passed (an NDR of 0 there says nothing about the DUT): such a run counts as
    /// missing in the ratios and the stability figures, never as 0.
    pub fn measured(&self) -> Option<f64> {
        (!(self.budget_exhausted && self.throughput_mpps <= 0.0)).then_some(self.throughput_mpps)
    }
}

/// CPU cost per packet in one trial at a fixed offered load.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Cost {
    /// The load, percent of the line rate.
    pub load_pct: f64,
    /// Offered, Mpps (all directions).
    pub offered_mpps: f64,
    /// Received by the tester, Mpps.
    pub rx_mpps: f64,
    /// Frames lost in the trial.
    pub lost: u64,
    /// Frames the tester sent in the trial.
    pub tx: u64,
    /// The DUT's own cost, ns of CPU per packet: ferrouter's workers' busy time (polling
    /// for nothing excluded) over the packets they received; Linux's kernel time
    /// (system, irq and softirq on both cores: it forwards in softirq, on the tester's core
    /// over veth) over the packets forwarded, the tester's own socket work included;
    /// testpmd's busy cycles (`--record-core-cycles`: receive bursts that returned packets,
    /// and their transmit) over the packets it received. `None` when not measured.
    pub ns_per_packet: Option<f64>,
    /// Kernel time on both cores (system, irq, softirq) over the packets forwarded: what
    /// the kernel's I/O costs each DUT, the tester's socket work included (so comparable
    /// across DUTs on one transport, not an absolute cost).
    pub kernel_ns_per_packet: f64,
}

/// The throughput ratio of two DUTs on one transport and profile over the repetitions,
/// pair by pair (repetition k of A against repetition k of B), so host noise lands on both
/// sides of each ratio.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RatioStat {
    /// The DUT on top (`ferrouter`).
    pub a: String,
    /// The reference (`linux`, `testpmd`).
    pub b: String,
    /// `veth` or `memif`.
    pub transport: String,
    /// Traffic profile.
    pub profile: String,
    /// Median of the per-pair ratios (`None` when no pair is complete).
    pub median: Option<f64>,
    /// Smallest per-pair ratio.
    pub min: Option<f64>,
    /// Largest per-pair ratio.
    pub max: Option<f64>,
    /// Complete pairs.
    pub pairs: usize,
    /// Repetitions with one side missing (its run failed) or the reference at 0.
    pub missing: usize,
}

/// One DUT's throughput over the repetitions.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DutStat {
    /// DUT.
    pub dut: String,
    /// Transport.
    pub transport: String,
    /// Profile.
    pub profile: String,
    /// Runs.
    pub runs: usize,
    /// Median throughput, Mpps.
    pub median_mpps: f64,
    /// Smallest, Mpps.
    pub min_mpps: f64,
    /// Largest, Mpps.
    pub max_mpps: f64,
    /// Coefficient of variation (standard deviation / mean) over the runs; `None` for one
    /// run or a mean of 0.
    pub cv: Option<f64>,
}

use tester::compare;
pub use tester::compare::CV_WARN;

/// The whole report.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Report {
    /// Every run, in execution order.
    pub runs: Vec<Run>,
    /// The reference ratios over the repetitions ([`Report::finish`]).
    pub ratios: Vec<RatioStat>,
    /// Each DUT's spread over the repetitions ([`Report::finish`]).
    pub stability: Vec<DutStat>,
}

/// The pairs whose ratios the RFC 2544 targets are stated in: (DUT, reference, transport).
pub const RATIO_PAIRS: [(&str, &str, &str); 2] = [
    ("ferrouter", "testpmd", "memif"),
    ("ferrouter", "linux", "veth"),
];

fn dut_label(r: &Run) -> String {
    format!("{}/{}", r.dut, r.transport)
}

impl Report {
    /// The frame-loss table in the reports' layout, followed by throughput and latency.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<7} {:<10} {:<9} {:<8} {:>8} {:>9} {:>9} {:>9} {:>10}  DUT",
            "Flows",
            "Pattern",
            "IPv4/v6",
            "Frame",
            "Load %",
            "Sent Mpps",
            "Mpps",
            "Gbps(L1)",
            "Loss %",
        );
        for r in &self.runs {
            for l in &r.loads {
                let _ = writeln!(
                    s,
                    "{:<7} {:<10} {:<9} {:<8} {:>8.0} {:>9.3} {:>9.3} {:>9.3} {:>10.3}  {}",
                    r.flows,
                    r.pattern,
                    r.ratio,
                    r.frame_size,
                    l.load_pct,
                    l.sent_mpps,
                    l.rx_mpps,
                    l.rx_gbps_l1,
                    l.loss_pct,
                    dut_label(r)
                );
            }
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "{:<18} {:<9} {:>7} {:>8} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9}",
            "DUT",
            "Profile",
            "Flows",
            "Routes4",
            "NDR Mpps",
            "PDR Mpps",
            "Gbps(L1)",
            "Lat min",
            "avg",
            "max",
            "p99 µs"
        );
        for r in &self.runs {
            let lat = r.latency_us.unwrap_or_default();
            let pdr = r.pdr_mpps.map_or("-".to_string(), |p| format!("{p:.3}"));
            let _ = writeln!(
                s,
                "{:<18} {:<9} {:>7} {:>8} {:>10.3} {:>10} {:>10.3} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
                dut_label(r),
                r.profile,
                r.flows,
                r.routes4,
                r.throughput_mpps,
                pdr,
                r.throughput_gbps_l1,
                lat.min,
                lat.avg,
                lat.max,
                lat.p99
            );
        }
        let ratios = self.ratio_stats();
        if !ratios.is_empty() {
            let _ = writeln!(s);
            for r in &ratios {
                let what = format!(
                    "{}: {}/{} ÷ {}/{} throughput",
                    r.profile, r.a, r.transport, r.b, r.transport
                );
                match (r.median, r.min, r.max) {
                    (Some(m), Some(lo), Some(hi)) if r.pairs > 1 => {
                        let _ = writeln!(
                            s,
                            "{what}: median {m:.2}x (min {lo:.2}, max {hi:.2}, {} pairs)",
                            r.pairs
                        );
                    }
                    (Some(m), ..) => {
                        let _ = writeln!(s, "{what}: {m:.2}x");
                    }
                    _ => {}
                }
                if r.missing > 0 {
                    let _ = writeln!(
                        s,
                        "{what}: {} repetition(s) without a complete pair (a run failed or the reference forwarded nothing)",
                        r.missing
                    );
                }
            }
        }
        let stats = self.dut_stats();
        if stats.iter().any(|d| d.runs > 1) {
            let _ = writeln!(s);
            for d in stats.iter().filter(|d| d.runs > 1) {
                let cv =
                    d.cv.map_or("-".to_string(), |c| format!("{:.1} %", c * 100.0));
                let _ = writeln!(
                    s,
                    "{}/{} {}: median {:.3} Mpps (min {:.3}, max {:.3}) over {} runs, CV {cv}",
                    d.dut, d.transport, d.profile, d.median_mpps, d.min_mpps, d.max_mpps, d.runs
                );
                if d.cv.is_some_and(|c| c > CV_WARN) {
                    let _ = writeln!(
                        s,
                        "warning: {}/{} {}: the runs vary by more than {:.0} % (CV): more repetitions or longer trials are needed for a stable figure",
                        d.dut,
                        d.transport,
                        d.profile,
                        CV_WARN * 100.0
                    );
                }
            }
        }
        if self.runs.iter().any(|r| !r.cpu.is_empty()) {
            let _ = writeln!(s);
            let _ = writeln!(
                s,
                "CPU time during each run (% of the core: user / system / softirq / idle / steal)"
            );
            for r in &self.runs {
                let cores: Vec<String> = r
                    .cpu
                    .iter()
                    .map(|c| {
                        format!(
                            "core {} ({}): {:.0}/{:.0}/{:.0}/{:.0}/{:.0}",
                            c.core, c.role, c.user, c.system, c.softirq, c.idle, c.steal
                        )
                    })
                    .collect();
                let _ = writeln!(
                    s,
                    "{:<18} {:<9} {}",
                    dut_label(r),
                    r.profile,
                    cores.join("   ")
                );
            }
        }
        if self.runs.iter().any(|r| r.cost.is_some()) {
            let _ = writeln!(
                s,
                "\nCPU cost per packet at a fixed load (DUT: ferrouter's busy worker time, Linux's kernel time; kernel: system+irq+softirq on both cores, the tester's included)"
            );
            for r in &self.runs {
                let Some(c) = &r.cost else { continue };
                let own = c
                    .ns_per_packet
                    .map_or("not measured".to_string(), |n| format!("{n:.0} ns/packet"));
                let _ = writeln!(
                    s,
                    "{:<18} {:<9} load {:.1}% ({:.3} Mpps offered, {:.3} received, {} lost): DUT {own}, kernel {:.0} ns/packet",
                    dut_label(r),
                    r.profile,
                    c.load_pct,
                    c.offered_mpps,
                    c.rx_mpps,
                    c.lost,
                    c.kernel_ns_per_packet
                );
            }
        }
        for r in &self.runs {
            for n in &r.notes {
                let _ = writeln!(s, "note ({} {}): {n}", dut_label(r), r.profile);
            }
        }
        s
    }

    /// Fill [`Report::ratios`] and [`Report::stability`] from the runs.
    pub fn finish(&mut self) {
        self.ratios = self.ratio_stats();
        self.stability = self.dut_stats();
    }

    /// The profiles measured, in order of first appearance.
    fn profiles(&self) -> Vec<&str> {
        let mut profiles: Vec<&str> = Vec::new();
        for r in &self.runs {
            if !profiles.contains(&r.profile.as_str()) {
                profiles.push(r.profile.as_str());
            }
        }
        profiles
    }

    /// The ratios the targets are stated in, for each profile measured with both DUTs:
    /// ferrouter/memif ÷ testpmd/memif and ferrouter/veth ÷ linux/veth, pair by pair over
    /// the repetitions.
    pub fn ratio_stats(&self) -> Vec<RatioStat> {
        let mut out = Vec::new();
        let of = |dut: &str, tr: &str, profile: &str, k: usize| {
            self.runs
                .iter()
                .find(|r| {
                    r.dut == dut && r.transport == tr && r.profile == profile && r.repeat == k
                })
                .and_then(Run::measured)
        };
        let reps = self.runs.iter().map(|r| r.repeat + 1).max().unwrap_or(0);
        for p in self.profiles() {
            for (a, b, tr) in RATIO_PAIRS {
                let seen = self
                    .runs
                    .iter()
                    .any(|r| r.profile == p && r.transport == tr && (r.dut == a || r.dut == b));
                if !seen {
                    continue;
                }
                let q =
                    compare::paired_ratio((0..reps).map(|k| (of(a, tr, p, k), of(b, tr, p, k))));
                // One side only, never paired: not a comparison this run asked for.
                if q.pairs == 0 && q.missing == 0 {
                    continue;
                }
                out.push(RatioStat {
                    a: a.into(),
                    b: b.into(),
                    transport: tr.into(),
                    profile: p.into(),
                    median: q.median,
                    min: q.min,
                    max: q.max,
                    pairs: q.pairs,
                    missing: q.missing,
                });
            }
        }
        out
    }

    /// Each DUT's throughput over the repetitions, per transport and profile.
    pub fn dut_stats(&self) -> Vec<DutStat> {
        let mut keys: Vec<(&str, &str, &str)> = Vec::new();
        for r in &self.runs {
            let k = (r.dut.as_str(), r.transport.as_str(), r.profile.as_str());
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        keys.into_iter()
            .map(|(dut, tr, p)| {
                let s = compare::spread(
                    self.runs
                        .iter()
                        .filter(|r| r.dut == dut && r.transport == tr && r.profile == p)
                        .map(Run::measured),
                );
                DutStat {
                    dut: dut.into(),
                    transport: tr.into(),
                    profile: p.into(),
                    runs: s.map_or(0, |s| s.n),
                    median_mpps: s.map_or(0.0, |s| s.median),
                    min_mpps: s.map_or(0.0, |s| s.min),
                    max_mpps: s.map_or(0.0, |s| s.max),
                    cv: s.and_then(|s| s.cv),
                }
            })
            .collect()
    }

    /// JSON: `{"runs":[...]}`.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// A grouped bar chart of throughput (Mpps) per profile and DUT, as SVG.
    pub fn chart(&self, path: &Path) -> Result<()> {
        let bars: Vec<crate::chart::Bar> = self
            .runs
            .iter()
            .map(|r| crate::chart::Bar {
                series: dut_label(r),
                group: r.profile.clone(),
                value: r.throughput_mpps,
            })
            .collect();
        crate::chart::bars(path, "RFC 2544 throughput (zero loss), Mpps", "Mpps", &bars)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(dut: &str, tr: &str, profile: &str, mpps: f64) -> Run {
        Run {
            dut: dut.into(),
            transport: tr.into(),
            profile: profile.into(),
            flows: 2,
            pattern: "1pp - uni".into(),
            ratio: "100/0".into(),
            frame_size: "64".into(),
            avg_frame: 64.0,
            routes4: 1000,
            routes6: 0,
            line_rate_gbps: 10.0,
            loss_tolerance_pct: 0.0,
            search: "mlr".into(),
            throughput_mpps: mpps,
            ndr_mpps: mpps,
            pdr_mpps: Some(mpps * 1.01),
            pdr_loss_pct: Some(0.5),
            underruns: 0,
            budget_exhausted: false,
            throughput_gbps_l1: mpps * 84.0 * 8.0 / 1000.0,
            throughput_load_pct: mpps / 14.88 * 100.0,
            loss_at_load: [("25".to_string(), 50.0)].into_iter().collect(),
            loads: vec![LoadRow {
                load_pct: 25.0,
                offered_mpps: 3.72,
                sent_mpps: 3.0,
                rx_mpps: 1.5,
                rx_gbps_l1: 1.0,
                loss_pct: 50.0,
            }],
            latency_us: Some(Latency {
                min: 1.0,
                avg: 2.0,
                max: 3.0,
                p99: 2.5,
            }),
            trial_count: 1,
            trials: vec![TrialRow {
                n: 1,
                phase: "search".into(),
                goal: Some("ndr".into()),
                stage: Some(SearchStage::Final),
                duration_s: 2.0,
                load_pct: 50.0,
                offered_mpps: 7.44,
                sent_mpps: 7.44,
                rx_mpps: 7.44,
                tx: 14_880_000,
                rx: 14_880_000,
                lost: 0,
                loss_pct: 0.0,
                passed: true,
                invalid: false,
                fail_reason: None,
                tx_port_full: 0,
                tx_skipped: 0,
                classes: vec![],
            }],
            cpu: vec![CoreSplit {
                core: 0,
                role: "tester".into(),
                user: 50.0,
                ..Default::default()
            }],
            cost: None,
            notes: vec![],
            repeat: 0,
        }
    }

    fn rep(mut r: Run, k: usize) -> Run {
        r.repeat = k;
        r
    }

    /// `--repeat 3`, A B A B A B: per-pair ratios, their median and spread, each DUT's CV,
    /// and a failed run counted as a missing pair, never as a 0 ratio.
    #[test]
    fn repetitions_give_pairwise_ratio_statistics() {
        let mut r = Report {
            runs: vec![
                rep(run("ferrouter", "veth", "ipv4-64", 1.0), 0),
                rep(run("linux", "veth", "ipv4-64", 0.5), 0),
                rep(run("ferrouter", "veth", "ipv4-64", 1.2), 1),
                rep(run("linux", "veth", "ipv4-64", 1.0), 1),
                rep(run("ferrouter", "veth", "ipv4-64", 0.9), 2),
                // linux's third run failed: absent.
            ],
            ..Default::default()
        };
        r.finish();
        assert_eq!(r.ratios.len(), 1);
        let q = &r.ratios[0];
        assert_eq!((q.pairs, q.missing), (2, 1));
        assert_eq!(q.median, Some(1.6));
        assert_eq!((q.min, q.max), (Some(1.2), Some(2.0)));
        let f = r.stability.iter().find(|d| d.dut == "ferrouter").unwrap();
        assert_eq!(
            (f.runs, f.median_mpps, f.min_mpps, f.max_mpps),
            (3, 1.0, 0.9, 1.2)
        );
        // Sample standard deviation 0.1528 over a mean of 1.0333.
        assert!((f.cv.unwrap() - 0.1478).abs() < 1e-3, "{:?}", f.cv);
        let t = r.table();
        assert!(
            t.contains("median 1.60x (min 1.20, max 2.00, 2 pairs)"),
            "{t}"
        );
        assert!(t.contains("1 repetition(s) without a complete pair"), "{t}");
        assert!(t.contains("warning: ferrouter/veth ipv4-64"), "{t}");
        let v: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(v["ratios"][0]["median"], 1.6);
        assert_eq!(v["runs"][2]["repeat"], 1);
        assert_eq!(v["stability"][1]["dut"], "linux");
        // Nothing but failures: said, no ratio.
        let mut none = Report {
            runs: vec![
                run("ferrouter", "veth", "ipv4-64", 1.0),
                run("linux", "veth", "ipv4-64", 0.0),
            ],
            ..Default::default()
        };
        none.finish();
        assert_eq!(none.ratios[0].median, None);
        assert_eq!(none.ratios[0].missing, 1);
        // A search that ran out of budget before any load passed: missing, not a 0 ratio
        // and not a 0 in the DUT's stability figures.
        let mut spent = run("ferrouter", "veth", "ipv4-64", 0.0);
        spent.budget_exhausted = true;
        let mut r = Report {
            runs: vec![
                spent,
                run("linux", "veth", "ipv4-64", 0.5),
                rep(run("ferrouter", "veth", "ipv4-64", 1.0), 1),
                rep(run("linux", "veth", "ipv4-64", 0.5), 1),
            ],
            ..Default::default()
        };
        r.finish();
        let q = &r.ratios[0];
        assert_eq!((q.pairs, q.missing, q.min), (1, 1, Some(2.0)), "{q:?}");
        let f = r.stability.iter().find(|d| d.dut == "ferrouter").unwrap();
        assert_eq!((f.runs, f.min_mpps), (1, 1.0));
    }

    proptest::proptest! {
        /// Any mix of runs, failed ones included (missing, 0, NaN throughput): the
        /// statistics never panic, each median lies between its min and max, and the JSON
        /// is valid.
        #[test]
        fn ratio_statistics_never_panic(
            runs in proptest::collection::vec(
                (0usize..3, 0usize..2, 0usize..2, 0usize..4, proptest::prop_oneof![proptest::strategy::Just(0.0), proptest::strategy::Just(f64::NAN), 0.0f64..20.0]),
                0..24,
            )
        ) {
            let duts = ["ferrouter", "linux", "testpmd"];
            let trs = ["veth", "memif"];
            let profiles = ["ipv4-64", "imix2"];
            let mut r = Report {
                runs: runs
                    .iter()
                    .map(|&(d, t, p, k, x)| rep(run(duts[d], trs[t], profiles[p], x), k))
                    .collect(),
                ..Default::default()
            };
            r.finish();
            for q in &r.ratios {
                if let (Some(m), Some(lo), Some(hi)) = (q.median, q.min, q.max) {
                    proptest::prop_assert!(lo <= m && m <= hi);
                }
            }
            let _ = r.table();
            proptest::prop_assert!(serde_json::from_str::<serde_json::Value>(&r.json()).is_ok());
        }
    }

    /// The CPU-cost trial is printed and kept in the JSON; a DUT without a figure of its
    /// own (testpmd) says "not measured" rather than a number.
    #[test]
    fn cpu_cost_per_packet_in_table_and_json() {
        let mut fr = run("ferrouter", "veth", "ipv4-64", 0.5);
        fr.cost = Some(Cost {
            load_pct: 1.5,
            offered_mpps: 0.223,
            rx_mpps: 0.223,
            lost: 0,
            tx: 446_000,
            ns_per_packet: Some(61.4),
            kernel_ns_per_packet: 3757.0,
        });
        let mut tp = run("testpmd", "memif", "ipv4-64", 9.0);
        tp.cost = Some(Cost {
            ns_per_packet: None,
            kernel_ns_per_packet: 0.0,
            ..fr.cost.clone().unwrap()
        });
        let mut r = Report {
            runs: vec![fr, tp],
            ..Default::default()
        };
        r.finish();
        let t = r.table();
        assert!(t.contains("DUT 61 ns/packet, kernel 3757 ns/packet"), "{t}");
        assert!(t.contains("DUT not measured, kernel 0 ns/packet"), "{t}");
        let v: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(v["runs"][0]["cost"]["ns_per_packet"], 61.4);
        assert_eq!(
            v["runs"][1]["cost"]["ns_per_packet"],
            serde_json::Value::Null
        );
        assert_eq!(v["runs"][0]["cost"]["kernel_ns_per_packet"], 3757.0);
    }

    #[test]
    fn table_json_ratios_and_chart() {
        let mut r = Report {
            runs: vec![
                run("ferrouter", "memif", "ipv4-64", 8.0),
                run("testpmd", "memif", "ipv4-64", 10.0),
                run("ferrouter", "veth", "ipv4-64", 0.3),
                run("linux", "veth", "ipv4-64", 0.1),
            ],
            ..Default::default()
        };
        r.finish();
        let t = r.table();
        assert!(
            t.contains("ferrouter/memif") && t.contains("linux/veth"),
            "{t}"
        );
        let ratios = &r.ratios;
        assert_eq!(ratios.len(), 2);
        assert!((ratios[0].median.unwrap() - 0.8).abs() < 1e-9);
        assert!((ratios[1].median.unwrap() - 3.0).abs() < 1e-9);
        assert!(
            t.contains("ipv4-64: ferrouter/veth ÷ linux/veth throughput: 3.00x"),
            "{t}"
        );
        let v: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(v["runs"][0]["dut"], "ferrouter");
        assert_eq!(v["runs"][0]["loss_at_load"]["25"], 50.0);
        assert_eq!(v["runs"][1]["latency_us"]["p99"], 2.5);
        // NDR and PDR, with the trials behind them.
        assert!(t.contains("NDR Mpps") && t.contains("PDR Mpps"), "{t}");
        assert!(t.contains("8.080"), "{t}");
        assert_eq!(v["runs"][0]["ndr_mpps"], 8.0);
        assert!((v["runs"][0]["pdr_mpps"].as_f64().unwrap() - 8.08).abs() < 1e-9);
        assert_eq!(v["runs"][0]["pdr_loss_pct"], 0.5);
        assert_eq!(v["runs"][0]["search"], "mlr");
        assert_eq!(v["runs"][0]["trial_count"], 1);
        let trial = &v["runs"][0]["trials"][0];
        assert_eq!(
            (
                &trial["phase"],
                &trial["goal"],
                &trial["stage"],
                &trial["invalid"]
            ),
            (
                &serde_json::json!("search"),
                &serde_json::json!("ndr"),
                &serde_json::json!("final"),
                &serde_json::json!(false)
            )
        );
        assert!(trial["fail_reason"].is_null() && trial["duration_s"] == 2.0);
        let mut no_pdr = r.clone();
        no_pdr.runs[0].pdr_mpps = None;
        assert!(no_pdr
            .table()
            .lines()
            .any(|l| l.contains("ferrouter/memif") && l.split_whitespace().nth(5) == Some("-")));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.svg");
        r.chart(&p).unwrap();
        let svg = std::fs::read_to_string(&p).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("ferrouter/memif") && svg.contains("ipv4-64")
        );
    }
}
