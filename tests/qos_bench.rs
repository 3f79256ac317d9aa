//! `ferrouter-lab bench qos --dut ferrouter,linux` (issue 28) at small scale: the cost test
//! (NDR with QoS off and on, ipv4-64, at a line rate of 0.01 Gbit/s so that both DUTs pass
//! without loss on a shared machine) and the congestion test (a 20 Mbit/s shaper offered
//! twice that for 1 s, ferrouter's shaper burst set to 20 ms of it by `--shaper-burst-ms`).
//! Checks the JSON contract: every run of each DUT and test is there
//! with every field, rates finite, the three classes named; the chart is written; no
//! namespace is left behind. Performance is the bench's business, not this test's: no
//! figure is compared with a target. Needs root, iproute2 (tc) and nftables: the test fails
//! naming what is missing (never a silent pass). The bench removes its namespaces and
//! stops ferrouter however it ends; a guard here removes whatever a crashed bench left.

use serde_json::Value;

mod common;
use common::*;

/// The fields of every run, and of every class, as the issue specifies them.
const RUN_FIELDS: [&str; 8] = [
    "dut",
    "test",
    "profile",
    "throughput_mpps",
    "classes",
    "transport",
    "ns_per_packet",
    "cost_trial_loss",
];
const CLASS_FIELDS: [&str; 5] = [
    "name",
    "offered_mbps",
    "delivered_mbps",
    "loss",
    "latency_us_p99",
];

fn finite(v: &Value, what: &str) -> f64 {
    let x = v
        .as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"));
    assert!(x.is_finite() && x >= 0.0, "{what}: {x}");
    x
}

#[test]
fn bench_qos_cost_and_congestion_on_ferrouter_and_linux() {
    lab::preconditions(
        "network namespaces, tc, nftables, AF_XDP",
        &[("ip", "iproute2"), ("tc", "iproute2"), ("nft", "nftables")],
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    let prefix = format!("fq{}", std::process::id() % 10000);
    let _guard = NetnsGuard::new(
        ["t", "d", "probe"]
            .map(|s| format!("{prefix}-{s}"))
            .to_vec(),
        format!("/run/ferrouter-bench/{prefix}"),
    );
    let chart = std::env::temp_dir().join(format!("{prefix}-qos.svg"));
    let chart_s = chart.display().to_string();
    let v = bench_json(&[
        "bench",
        "qos",
        "--dut",
        "ferrouter,linux",
        "--profile",
        "ipv4-64",
        "--flows",
        "64",
        // Short trials with room for retries: a trial the tester could not offer in full
        // (preempted on a shared core) is retried, not counted as loss.
        "--duration",
        "0.1",
        "--line-rate",
        "0.01",
        "--max-trials",
        "30",
        "--rate",
        "20",
        "--congestion-duration",
        "1",
        // 20 ms of 20 Mbit/s: ferrouter's policy gets `burst = 50000` (Linux's HTB keeps
        // tc's default).
        "--shaper-burst-ms",
        "20",
        "--netns-prefix",
        &prefix,
        "--json",
        "--chart",
        &chart_s,
    ]);
    assert_no_namespaces_left(&prefix);
    let svg = std::fs::read_to_string(&chart).expect("the chart");
    let _ = std::fs::remove_file(&chart);
    assert!(
        svg.contains("<svg") && svg.contains("ferrouter/veth"),
        "{svg}"
    );

    assert!(v["machine"]["cpu_model"]
        .as_str()
        .is_some_and(|s| !s.is_empty()));
    assert!(v["machine"]["nproc"].as_u64().is_some_and(|n| n >= 2));
    for k in ["load_before", "load_after"] {
        assert_eq!(v[k].as_array().map(Vec::len), Some(3), "{k}: {v}");
    }
    let leaf = v["linux_leaf"].as_str().unwrap();
    assert!(["fq_codel", "pfifo"].contains(&leaf), "{leaf}");
    assert!(v["linux_policy"].as_str().unwrap().contains("htb"));
    assert!(
        v["ferrouter_policy"]
            .as_str()
            .unwrap()
            .contains("\nburst = 50000\n"),
        "{v}"
    );

    let runs = v["runs"].as_array().expect("runs");
    let mut got: Vec<(String, String)> = Vec::new();
    for r in runs {
        for k in RUN_FIELDS {
            assert!(r.get(k).is_some(), "{k} missing: {r}");
        }
        let (dut, test) = (r["dut"].as_str().unwrap(), r["test"].as_str().unwrap());
        got.push((dut.into(), test.into()));
        // The burst ferrouter's shaper had: 20 ms of R in the congestion test, of the line
        // rate (10 Mbit/s) in the cost test's qos-on runs; none for Linux (its HTB keeps
        // tc's default) or for qos-off.
        let burst = &r["shaper_burst_bytes"];
        match (dut, test) {
            ("ferrouter", "congestion") => assert_eq!(burst.as_u64(), Some(50_000), "{r}"),
            ("ferrouter", "qos-on") => assert_eq!(burst.as_u64(), Some(25_000), "{r}"),
            _ => assert!(burst.is_null(), "{r}"),
        }
        assert_eq!(r["transport"], "veth", "{r}");
        // The CPU-cost trial after each search (--cost-load, 25 % of the line rate by
        // default): ferrouter's worker's time per packet it forwarded.
        if dut == "ferrouter" && test != "congestion" {
            let ns = finite(&r["ns_per_packet"], "ns_per_packet");
            assert!(ns > 0.0, "{r}");
        }
        let classes = r["classes"].as_array().unwrap();
        // A search that found no zero-loss rate (on a busy machine the tester may not
        // offer even the lowest loads in full) has a null NDR and no trial to break down
        // per class; a congestion run always has its trial.
        if r["throughput_mpps"].is_null() && test != "congestion" {
            assert!(classes.is_empty(), "{r}");
            assert!(
                r["notes"].as_array().is_some_and(|n| !n.is_empty()),
                "a null NDR says why: {r}"
            );
            continue;
        }
        let tput = finite(&r["throughput_mpps"], "throughput_mpps");
        assert!(tput > 0.0, "nothing got through: {r}");
        let names: Vec<&str> = classes
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["ef", "af41", "be"], "{r}");
        for c in classes {
            for k in CLASS_FIELDS {
                assert!(c.get(k).is_some(), "{k} missing: {c}");
            }
            let offered = finite(&c["offered_mbps"], "offered_mbps");
            let delivered = finite(&c["delivered_mbps"], "delivered_mbps");
            assert!(offered > 0.0 && delivered > 0.0, "{c}");
            let loss = finite(&c["loss"], "loss");
            assert!(loss <= 1.0, "{c}");
            finite(&c["latency_us_p99"], "latency_us_p99");
        }
        if test == "congestion" {
            assert_eq!(r["profile"], "imix1");
            let rate = finite(&r["rate_mbps"], "rate_mbps");
            assert_eq!(rate, 20.0);
            let offered = finite(&r["offered_mbps"], "offered_mbps");
            // Offered at twice the shaper: loose bounds, the tester shares a core.
            assert!(offered > 1.5 * rate && offered < 2.5 * rate, "{r}");
            finite(&r["shaper_accuracy"], "shaper_accuracy");
            for c in &classes[1..] {
                finite(&c["share"], "share");
                finite(&c["expected_mbps"], "expected_mbps");
            }
            assert!(
                r["dut_counters"].is_object() || r["dut_counters"].is_array(),
                "{r}"
            );
        } else {
            assert_eq!(r["profile"], "ipv4-64");
        }
    }
    got.sort();
    let mut want = Vec::new();
    for dut in ["ferrouter", "linux"] {
        for test in ["congestion", "qos-off", "qos-on"] {
            want.push((dut.to_string(), test.to_string()));
        }
    }
    assert_eq!(got, want, "{v}");
    // The cost per DUT and the targets, each with its verdict or null.
    assert_eq!(v["cost"].as_array().unwrap().len(), 2, "{v}");
    for c in v["cost"].as_array().unwrap() {
        for k in [
            "ns_off",
            "ns_on",
            "cpu_cost_pct",
            "cost_load_mpps",
            "cost_rx_mpps",
            "cost_loads_apart",
        ] {
            assert!(c.get(k).is_some(), "{k} missing: {c}");
        }
    }
    let targets = v["targets"].as_array().unwrap();
    assert!(targets.len() >= 2 + 1 + 2 * 5, "{targets:?}");
    for t in targets {
        assert!(t["met"].is_boolean() || t["met"].is_null(), "{t}");
    }
}

/// A `--shaper-burst-ms` the policy cannot take (here 250 bytes, below a jumbo frame) is
/// refused before anything starts, naming the option and the range.
#[test]
fn bench_qos_refuses_a_shaper_burst_out_of_range() {
    let out = std::process::Command::new(lab_bin())
        .args([
            "bench",
            "qos",
            "--test",
            "congestion",
            "--rate",
            "20",
            "--shaper-burst-ms",
            "0.1",
        ])
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--shaper-burst-ms 0.1: 250 bytes")
            && stderr.contains("9216 to 100000000 bytes"),
        "{stderr}"
    );
}
