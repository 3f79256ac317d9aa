//! The RFC 2544 engine against a DUT of known throughput: the in-memory port pair with a
//! token bucket on each link, in virtual time, so every run is identical.

use std::time::Duration;

use dataplane::Arena;
use tester::rfc2544::{self, Phase, Progress, Rfc2544Config, Rfc2544Report};
use tester::testing::{lab_traffic, loop_pair, Shaper};
use tester::{line_rate_pps, Generator, Profile, TrialConfig, VirtualClock};

/// Bucket depth of the shaper, frames.
const DEPTH: u32 = 64;
/// Trial duration (virtual).
const TRIAL: Duration = Duration::from_millis(40);

/// RFC 2544 on `profile` through a DUT forwarding at most `cap` frames/s per direction,
/// with a "line rate" of 1 Gbit/s (virtual).
fn run(profile: &str, cap: f64, bidirectional: bool) -> (Rfc2544Report, f64, Vec<u32>) {
    let p = Profile::parse(profile).unwrap();
    let avg = p.avg_frame_size();
    let line = line_rate_pps(1.0, avg);
    let mut gen = Generator::new(&lab_traffic(p, bidirectional)).unwrap();
    let (mut p0, mut p1) = loop_pair(4096);
    p0.set_filter(Shaper::new(cap, DEPTH).into_filter());
    p1.set_filter(Shaper::new(cap, DEPTH).into_filter());
    let mut mem = Arena::new(8192);
    let mut clock = VirtualClock::new(5_000_000_000, 250);
    let mut cfg = Rfc2544Config::new(line, avg, if bidirectional { 2 } else { 1 });
    cfg.resolution = 0.005;
    let mut started = Vec::new();
    let mut progress = |p: Progress<'_>| {
        if let Progress::Starting { trial, .. } = p {
            started.push(trial);
        }
    };
    let report = rfc2544::run(
        &cfg,
        |rate| {
            let mut t = TrialConfig::new(rate, TRIAL);
            t.bidirectional = bidirectional;
            t.drain = Duration::from_micros(500);
            gen.run_trial_with_clock(&mut mem, &mut p0, &mut p1, &t, &mut clock)
                .unwrap()
        },
        Some(&mut progress),
    );
    (report, line, started)
}

fn check(report: &Rfc2544Report, line: f64, cap: f64) {
    let res = 0.005 * line;
    let tput = report.throughput_mpps_per_direction * 1e6;
    assert!(report.found);
    assert!(
        (tput - cap).abs() <= res,
        "throughput {tput} vs cap {cap} (resolution {res})"
    );
    // The bucket lets through at most DEPTH frames above the cap per trial.
    let slack = f64::from(DEPTH) / TRIAL.as_secs_f64();
    for t in &report.trials {
        let r = &t.result;
        assert_eq!(r.rx + r.lost, r.tx);
        assert_eq!(
            (r.duplicates, r.reordered, r.foreign, r.misdirected),
            (0, 0, 0, 0)
        );
        if t.rate_pps <= cap {
            assert_eq!(r.lost, 0, "below the cap: {t:?}");
            assert_eq!(r.tx_skipped, 0);
        }
        if t.rate_pps > cap + slack {
            assert!(r.lost > 0, "above the cap: {t:?}");
        }
    }
    // Loss at load: what a token bucket must drop, within one bucket per trial.
    for (k, pct) in [("25", 0.25), ("50", 0.5), ("75", 0.75), ("100", 1.0)] {
        let rate = line * pct;
        let want = if rate <= cap {
            0.0
        } else {
            (rate - cap) / rate * 100.0
        };
        let got = report.loss_at_load[k];
        let bucket = f64::from(DEPTH) / (rate * TRIAL.as_secs_f64()) * 100.0;
        let frame = 100.0 / (rate * TRIAL.as_secs_f64());
        assert!(
            got <= want + frame && got >= want - bucket - frame,
            "{k}%: loss {got} want {want}"
        );
    }
    let lat = report.latency_us.expect("latency measured");
    assert!(lat.min <= lat.avg && lat.avg <= lat.max && lat.p99 <= lat.max);
    assert!(report
        .trials
        .iter()
        .any(|t| t.phase == Phase::Latency && t.result.lost == 0));
}

#[test]
fn search_converges_on_the_shaped_dut() {
    let cap = 613_000.0;
    let (report, line, started) = run("ipv4-64", cap, false);
    assert!((line - 1_488_095.238).abs() < 0.01);
    check(&report, line, cap);
    assert_eq!(started.len(), report.trials.len());
    // Deterministic: the same run gives the same trials.
    let (again, _, _) = run("ipv4-64", cap, false);
    let sig = |r: &Rfc2544Report| -> Vec<(u64, u64, u64)> {
        r.trials
            .iter()
            .map(|t| (t.result.tx, t.result.rx, t.result.tx_bytes))
            .collect()
    };
    assert_eq!(sig(&report), sig(&again));
}

#[test]
fn bidirectional_imix_search_converges() {
    let p = Profile::parse("imix2").unwrap();
    let line = line_rate_pps(1.0, p.avg_frame_size());
    let cap = 0.4 * line;
    let (report, line, _) = run("imix2", cap, true);
    check(&report, line, cap);
    assert_eq!(report.directions, 2);
    assert!((report.throughput_mpps - 2.0 * report.throughput_mpps_per_direction).abs() < 1e-12);
}

#[test]
fn dut_faster_than_line_rate_passes_first_trial() {
    let p = Profile::parse("ipv6-78").unwrap();
    let line = line_rate_pps(1.0, p.avg_frame_size());
    let (report, _, _) = run("ipv6-78", 2.0 * line, false);
    assert_eq!(report.throughput_percent, 100.0);
    assert_eq!(
        report
            .trials
            .iter()
            .filter(|t| t.phase == Phase::Throughput)
            .count(),
        1
    );
    assert!(report.loss_at_load.values().all(|&l| l == 0.0));
}
