//! `ferrouter-lab bench acl [--compare-dpdk]`: cycles per classification of the firewall's
//! rule classifier ([`firewall::classify`]), optionally next to DPDK's `rte_acl` measured
//! by the stock `dpdk-test-acl` on the same rules, the same packets, the same core, in the
//! same run.
//!
//! How both sides are measured (as app/test-acl/main.c of DPDK 22.11 does):
//! * the rules are ACL-like (prefixes of mixed lengths over a few networks, well-known and
//!   ranged ports, a handful of protocols, some wildcards), in order, the first match
//!   winning; the packets ("traces") hit rules, inside and at the edges of their boxes,
//!   three times in four, and are random otherwise;
//! * the traces are classified in bursts of 256 ([`BURST`], DPDK's `--tracestep`), `--iter`
//!   times over; the time stamp counter is read before the first burst and after the last,
//!   and the difference is divided by the classifications made;
//! * both run pinned to the same core (DPDK via EAL `-l`), with nothing else of ours
//!   running; each side makes [`REPS`] runs and the best is reported;
//! * the results are compared: ferrouter's against a linear scan of the rules on a sample,
//!   and against DPDK's own per-packet results (a separate `--verbose=2` run of
//!   `dpdk-test-acl`, as its timed runs print nothing per packet).

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::dpdk::tail;
use firewall::classify::{self, Classifier, Match, Rule, DIMS};

/// Traces per burst (DPDK `--tracestep`'s default).
pub const BURST: usize = 256;

/// Runs per side; the best is reported.
pub const REPS: usize = 3;

/// The DPDK binary.
pub const BINARY: &str = "dpdk-test-acl";

/// Keys checked against a linear scan after measuring.
const VERIFY_SAMPLE: usize = 20_000;

/// Settings.
#[derive(Clone, Debug)]
pub struct AclOptions {
    /// Rules.
    pub rules: usize,
    /// Traces (packets).
    pub traces: usize,
    /// Passes over the traces per run.
    pub iters: usize,
    /// Seed of the generators.
    pub seed: u64,
    /// Also run dpdk-test-acl.
    pub compare_dpdk: bool,
    /// DPDK's `--alg` (scalar, sse, avx2, avx512x16); its default when `None`.
    pub dpdk_alg: Option<String>,
}

impl Default for AclOptions {
    fn default() -> Self {
        AclOptions {
            rules: 10_000,
            traces: 100_000,
            iters: 10,
            seed: 1,
            compare_dpdk: false,
            dpdk_alg: None,
        }
    }
}

/// The result.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AclReport {
    /// Rules.
    pub rules: usize,
    /// Traces per pass.
    pub traces: usize,
    /// Passes per run.
    pub iters: usize,
    /// The core both sides ran on.
    pub core: usize,
    /// Best ferrouter cycles per classification.
    pub ferrouter_cycles: f64,
    /// Every ferrouter run.
    pub ferrouter_runs: Vec<f64>,
    /// Milliseconds to build ferrouter's classifier.
    pub build_ms: f64,
    /// The tree's shape.
    pub tree: TreeShape,
    /// Traces that matched a rule (ferrouter).
    pub matched: usize,
    /// Sample keys checked against a linear scan (all agreed, or the bench failed).
    pub verified_linear: usize,
    /// Best DPDK cycles per classification.
    pub dpdk_cycles: Option<f64>,
    /// Every DPDK run.
    pub dpdk_runs: Vec<f64>,
    /// Traces whose result DPDK and ferrouter agreed on (all of those compared, or the
    /// bench failed).
    pub verified_dpdk: usize,
    /// ferrouter / DPDK cycles (< 1: ferrouter is faster).
    pub ratio: Option<f64>,
    /// The last dpdk-test-acl command line.
    pub dpdk_command: Option<String>,
}

/// The classifier trees' shape.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct TreeShape {
    /// Trees.
    pub trees: usize,
    /// Inner nodes (each cuts `2^k` ways).
    pub splits: usize,
    /// Leaves.
    pub leaves: usize,
    /// Rule entries in the leaves, copies included.
    pub entries: usize,
    /// Longest leaf.
    pub max_leaf: usize,
    /// Deepest leaf.
    pub max_depth: usize,
    /// Bytes.
    pub bytes: usize,
}

pub use firewall::gen::{acl_rules as gen_rules, traces as gen_traces};

/// `@src/len dst/len sport : sport dport : dport proto/mask`, dpdk-test-acl's rule line.
fn rule_line(m: &Match<Ipv4Addr>) -> String {
    let p = |x: Option<(Ipv4Addr, u8)>| match x {
        Some((a, l)) => format!("{a}/{l}"),
        None => "0.0.0.0/0".into(),
    };
    let (proto, mask) = match m.proto {
        Some(v) => (v, 0xff),
        None => (0, 0),
    };
    format!(
        "@{}\t{}\t{} : {}\t{} : {}\t{proto:#04x}/{mask:#04x}",
        p(m.src),
        p(m.dst),
        m.sport.start(),
        m.sport.end(),
        m.dport.start(),
        m.dport.end()
    )
}

/// `src dst sport dport proto`, addresses as integers (dpdk-test-acl's IPv4 trace line).
fn trace_line(k: &[u32; DIMS]) -> String {
    format!("{:#x}\t{:#x}\t{}\t{}\t{}", k[0], k[1], k[2], k[3], k[4])
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rdtsc() -> u64 {
    // SAFETY: rdtsc is available on every x86_64 CPU.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
fn rdtsc() -> u64 {
    0
}

/// One run: `iters` passes over the traces in bursts; cycles per classification.
#[inline(never)]
fn run_once(
    c: &Classifier<u32>,
    traces: &[[u32; DIMS]],
    iters: usize,
    out: &mut [Option<u32>],
) -> f64 {
    let start = rdtsc();
    for _ in 0..iters {
        for (keys, res) in traces.chunks(BURST).zip(out.chunks_mut(BURST)) {
            c.classify_burst(keys, res);
            std::hint::black_box(&mut *res);
        }
    }
    let cycles = rdtsc().wrapping_sub(start);
    cycles as f64 / (traces.len() * iters).max(1) as f64
}

/// `... N cycles/pkt ...` from dpdk-test-acl's summary line.
pub fn parse_cycles(out: &str) -> Option<f64> {
    let line = out
        .lines()
        .find(|l| l.contains("search_ip5tuples") && l.contains("cycles/pkt"))?;
    let before = line.split("cycles/pkt").next()?;
    before.split_whitespace().last()?.parse().ok()
}

/// Per-packet results (`ipv4_5tuple: N, category: 0, result: R`) of a `--verbose=2` run, in
/// trace order; `None` for no match.
pub fn parse_results(out: &str) -> Vec<Option<u32>> {
    out.lines()
        .filter(|l| l.starts_with("ipv4_5tuple:") && l.contains("category: 0"))
        .filter_map(|l| l.rsplit("result:").next()?.trim().parse::<u64>().ok())
        .map(|r| u32::try_from(r).ok().filter(|&r| r != u32::MAX))
        .collect()
}

/// Run the benchmark.
pub fn run(opts: &AclOptions, mut progress: impl FnMut(&str)) -> anyhow::Result<AclReport> {
    if opts.rules == 0 || opts.traces == 0 || opts.iters == 0 {
        bail!("--rules, --traces and --iters must be at least 1");
    }
    let dpdk = if opts.compare_dpdk {
        Some(crate::dpdk::find_in_path(BINARY).with_context(|| {
            format!("--compare-dpdk: {BINARY} not found; install the Debian package dpdk-dev (apt-get install dpdk-dev)")
        })?)
    } else {
        None
    };
    let matches = gen_rules(opts.rules, opts.seed);
    let rules: Vec<Rule<u32>> = matches
        .iter()
        .enumerate()
        .map(|(i, m)| {
            m.rule()
                .map_err(|e| anyhow::anyhow!("generated rule {i}: {e}"))
        })
        .collect::<anyhow::Result<_>>()?;
    let traces = gen_traces(&rules, opts.traces, opts.seed ^ 0x5eed);
    let core = crate::dpdk::bench_core();
    progress(&format!(
        "{} rules, {} traces, {} passes per run, core {core}",
        opts.rules, opts.traces, opts.iters
    ));
    let t = Instant::now();
    let c = Classifier::build(rules.clone(), classify::Options::default())
        .context("building the classifier")?;
    let build_ms = t.elapsed().as_secs_f64() * 1e3;
    let s = c.stats();
    let mut out = vec![None; traces.len()];
    let mut runs = Vec::new();
    {
        let _pin = crate::lpm::Pin::to(core)?;
        for _ in 0..REPS {
            runs.push(run_once(&c, &traces, opts.iters, &mut out));
        }
    }
    let best = runs.iter().copied().fold(f64::INFINITY, f64::min);
    progress(&format!(
        "ferrouter: {best:.1} cycles per classification (best of {REPS})"
    ));
    // Against a linear scan, on a sample.
    let step = (traces.len() / VERIFY_SAMPLE).max(1);
    let mut verified_linear = 0;
    for (i, k) in traces.iter().enumerate().step_by(step) {
        let want = rules.iter().position(|r| r.matches(k)).map(|x| x as u32);
        if out[i] != want {
            bail!(
                "classifier disagrees with a linear scan on trace {i} {k:?}: {:?} against {want:?}",
                out[i]
            );
        }
        verified_linear += 1;
    }
    let matched = out.iter().filter(|r| r.is_some()).count();
    let mut report = AclReport {
        rules: opts.rules,
        traces: opts.traces,
        iters: opts.iters,
        core,
        ferrouter_cycles: best,
        ferrouter_runs: runs,
        build_ms,
        tree: TreeShape {
            trees: s.trees,
            splits: s.splits,
            leaves: s.leaves,
            entries: s.entries,
            max_leaf: s.max_leaf,
            max_depth: s.max_depth,
            bytes: s.bytes,
        },
        matched,
        verified_linear,
        dpdk_cycles: None,
        dpdk_runs: Vec::new(),
        verified_dpdk: 0,
        ratio: None,
        dpdk_command: None,
    };
    if let Some(bin) = dpdk {
        let dir = tempfile::tempdir().context("temporary directory for dpdk-test-acl's files")?;
        let rf = dir.path().join("rules.txt");
        let tf = dir.path().join("traces.txt");
        let mut text = String::new();
        for m in &matches {
            let _ = writeln!(text, "{}", rule_line(m));
        }
        std::fs::write(&rf, text).with_context(|| format!("writing {}", rf.display()))?;
        let mut text = String::new();
        for k in &traces {
            let _ = writeln!(text, "{}", trace_line(k));
        }
        std::fs::write(&tf, text).with_context(|| format!("writing {}", tf.display()))?;
        let args = |tracenum: usize, iters: usize, verbose: u8| -> Vec<String> {
            let mut a = vec![
                "--no-huge".to_string(),
                "-m".into(),
                "256".into(),
                format!("-l{core}"),
                "--no-pci".into(),
                "--log-level=lib.eal:warning".into(),
                format!("--file-prefix=ferrouter-acl-{}", std::process::id()),
                "--".into(),
                format!("--rulesf={}", rf.display()),
                format!("--tracef={}", tf.display()),
                format!("--rulenum={}", opts.rules.max(65536)),
                format!("--tracenum={tracenum}"),
                format!("--tracestep={BURST}"),
                format!("--iter={iters}"),
                format!("--verbose={verbose}"),
            ];
            if let Some(alg) = &opts.dpdk_alg {
                a.push(format!("--alg={alg}"));
            }
            a
        };
        let timeout = Duration::from_secs(300);
        for _ in 0..REPS {
            let a = args(opts.traces, opts.iters, 0);
            let (st, text) = crate::dpdk::run_with_timeout(&bin, &a, timeout)?;
            if !st.success() {
                bail!("{BINARY} failed ({st}):\n{}", tail(&text, 20));
            }
            let cyc = parse_cycles(&text).with_context(|| {
                format!(
                    "no cycles/pkt line in {BINARY}'s output:\n{}",
                    tail(&text, 20)
                )
            })?;
            report.dpdk_runs.push(cyc);
            report.dpdk_command = Some(format!("{} {}", bin.display(), a.join(" ")));
        }
        let d = report
            .dpdk_runs
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min);
        report.dpdk_cycles = Some(d);
        report.ratio = Some(best / d);
        progress(&format!(
            "dpdk-test-acl: {d:.1} cycles per classification (best of {REPS})"
        ));
        // DPDK's own answers, packet by packet, against ours.
        let n = opts.traces.min(VERIFY_SAMPLE);
        // Line-buffered, so every result is out before it exits: dpdk-test-acl 22.11
        // crashes (SIGSEGV) on exit after a --verbose=2 run here, once its work and summary
        // are done; a run counts when the summary line was printed.
        let mut a = vec!["-oL".to_string(), bin.display().to_string()];
        a.extend(args(n, 1, 2));
        let (st, text) =
            crate::dpdk::run_with_timeout(std::path::Path::new("stdbuf"), &a, timeout)?;
        if parse_cycles(&text).is_none() {
            bail!(
                "{BINARY} (verification run) failed ({st}):\n{}",
                tail(&text, 20)
            );
        }
        let mut theirs = parse_results(&text);
        // It reads one trace more than --tracenum asks for.
        theirs.truncate(n);
        if theirs.len() != n {
            bail!(
                "{BINARY} printed {} per-packet results for {n} traces:\n{}",
                theirs.len(),
                tail(&text, 20)
            );
        }
        for (i, (t, o)) in theirs.iter().zip(&out).enumerate() {
            if t != o {
                bail!(
                    "ferrouter and {BINARY} disagree on trace {i} {:?}: rule {o:?} against {t:?}",
                    traces[i]
                );
            }
        }
        report.verified_dpdk = n;
    }
    Ok(report)
}

/// The human table.
pub fn format_table(r: &AclReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "rule classification: {} rules, {} traces x {} passes, core {}",
        r.rules, r.traces, r.iters, r.core
    );
    let _ = writeln!(
        o,
        "  ferrouter (cut trees):     {:.1} cycles/classification (runs {:?}); built in {:.1} ms: {} trees, {} inner nodes, {} leaves, {} entries, longest leaf {}, depth {}, {} KiB",
        r.ferrouter_cycles,
        r.ferrouter_runs.iter().map(|x| (x * 10.0).round() / 10.0).collect::<Vec<_>>(),
        r.build_ms,
        r.tree.trees,
        r.tree.splits,
        r.tree.leaves,
        r.tree.entries,
        r.tree.max_leaf,
        r.tree.max_depth,
        r.tree.bytes / 1024
    );
    if let Some(d) = r.dpdk_cycles {
        let _ = writeln!(
            o,
            "  dpdk-test-acl (rte_acl):   {d:.1} cycles/classification (runs {:?})",
            r.dpdk_runs
                .iter()
                .map(|x| (x * 10.0).round() / 10.0)
                .collect::<Vec<_>>()
        );
        let _ = writeln!(
            o,
            "  ratio ferrouter/dpdk: {:.2} (< 1: ferrouter faster); results agree on {} traces",
            r.ratio.unwrap_or(f64::NAN),
            r.verified_dpdk
        );
    }
    let _ = writeln!(
        o,
        "  {} of {} traces matched a rule; {} checked against a linear scan",
        r.matched, r.traces, r.verified_linear
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dpdk_lines_and_outputs() {
        let m = Match {
            src: Some((Ipv4Addr::new(10, 0, 0, 0), 8)),
            dst: None,
            sport: 0..=65535,
            dport: 80..=80,
            proto: Some(6),
        };
        assert_eq!(
            rule_line(&m),
            "@10.0.0.0/8\t0.0.0.0/0\t0 : 65535\t80 : 80\t0x06/0xff"
        );
        assert_eq!(
            trace_line(&[0x0a00_0001, 2, 3, 4, 6]),
            "0xa000001\t0x2\t3\t4\t6"
        );
        let out = "search_ip5tuples_once(1, 256, default) returns 10\nsearch_ip5tuples  @lcore 0: 1 iterations, 10 pkts, 1 categories, 11388 cycles (0.00 sec), 1138.80 cycles/pkt, 2283105.02 pkt/sec\n";
        assert_eq!(parse_cycles(out), Some(1138.80));
        assert_eq!(parse_cycles("nothing"), None);
        let v = "ipv4_5tuple: 1, category: 0, result: 0\nipv4_5tuple: 2, category: 0, result: 4294967295\nother\n";
        assert_eq!(parse_results(v), vec![Some(0), None]);
    }

    #[test]
    fn generated_traces_mostly_match() {
        let rules: Vec<Rule<u32>> = gen_rules(500, 3)
            .iter()
            .map(|m| m.rule().unwrap())
            .collect();
        let t = gen_traces(&rules, 4000, 4);
        let hit = t
            .iter()
            .filter(|k| rules.iter().any(|r| r.matches(k)))
            .count();
        assert!(hit >= 2800, "{hit}");
    }
}
