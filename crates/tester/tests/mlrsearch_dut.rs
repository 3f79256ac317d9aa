//! The MLR search against simulated DUTs on the tester's virtual clock: the real generator
//! through the in-memory port pair, a token bucket as the DUT, and seeded impairments
//! (loss spikes, a drifting capacity, a tester that cannot keep up). Every run is
//! deterministic.

use std::time::Duration;

use dataplane::Arena;
use tester::rfc2544::{self, FailReason, Phase, Progress, Rfc2544Config, Rfc2544Report};
use tester::testing::{lab_traffic, loop_pair, LoopPort, Shaper, Verdict};
use tester::{
    line_rate_pps, Generator, MlrConfig, Profile, Signature, TrialConfig, TrialResult, VirtualClock,
};

/// Bucket depth of the shaper, frames.
const DEPTH: u32 = 16;
/// Final trial duration (virtual).
const FINAL: Duration = Duration::from_millis(40);
/// DUT capacity, frames/s (of a 1 Gbit/s line of 64-byte frames: 1.488M).
const CAP: f64 = 613_000.0;

/// SplitMix64: seeded impairments without a dependency.
struct Rng(u64);
impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What happens in one trial.
#[derive(Clone, Copy, Debug, Default)]
struct Impair {
    /// The DUT's capacity in this trial, frames/s.
    cap: f64,
    /// The DUT loses one frame in 100 on top.
    spike: bool,
    /// The tester runs on a slow clock and cannot offer the rate.
    slow_tester: bool,
}

/// The DUT of one trial on `port`: a token bucket of `cap` (fresh each trial), and in a
/// spike every hundredth frame lost.
fn dut(port: &LoopPort, im: Impair) {
    let mut shaper = Shaper::new(im.cap, DEPTH);
    port.set_filter(move |f: &[u8]| {
        let v = shaper.verdict(f);
        if v == Verdict::Pass && im.spike && Signature::parse(f).is_some_and(|s| s.seq % 100 == 7) {
            Verdict::Drop
        } else {
            v
        }
    });
}

/// An MLR search (NDR, PDR 0.5 %) of ipv4-64 on a 1 Gbit/s line; `impair` decides each
/// trial's conditions.
fn search(mut impair: impl FnMut() -> Impair) -> (Rfc2544Report, Rfc2544Config, u32) {
    let p = Profile::parse("ipv4-64").unwrap();
    let avg = p.avg_frame_size();
    let line = line_rate_pps(1.0, avg);
    let mut gen = Generator::new(&lab_traffic(p, false)).unwrap();
    let (mut p0, mut p1) = loop_pair(4096);
    let mut mem = Arena::new(8192);
    let mut clock = VirtualClock::new(5_000_000_000, 250);
    let mut cfg = Rfc2544Config::new(line, avg, 1);
    cfg.trial_duration = FINAL;
    cfg.mlr = Some(MlrConfig::new(FINAL));
    let mut events = 0;
    let mut progress = |p: Progress<'_>| {
        if let Progress::Finished {
            trial, max_trials, ..
        } = p
        {
            assert!(trial <= max_trials);
            events += 1;
        }
    };
    let report = rfc2544::try_run_timed(
        &cfg,
        |rate, duration| -> anyhow::Result<TrialResult> {
            let im = impair();
            dut(&p0, im);
            let mut t = TrialConfig::new(rate, duration);
            t.drain = Duration::from_micros(500);
            if im.slow_tester {
                // A tester preempted all along: one frame per loop on a clock that moves
                // 2 µs per read, so it falls behind and gives up the slots it missed.
                t.burst = 1;
                let mut slow = VirtualClock::new(clock.peek(), 2_000);
                let r = gen.run_trial_with_clock(&mut mem, &mut p0, &mut p1, &t, &mut slow);
                clock.advance(slow.peek() - clock.peek());
                r
            } else {
                gen.run_trial_with_clock(&mut mem, &mut p0, &mut p1, &t, &mut clock)
            }
        },
        Some(&mut progress),
    )
    .unwrap();
    assert_eq!(events as usize, report.trials.len());
    (report, cfg, events)
}

/// `got` within the search's width of `want`, plus what the bucket lets through.
fn near(got: f64, want: f64, width: f64) -> bool {
    let slack = f64::from(DEPTH) / FINAL.as_secs_f64();
    (got - want).abs() <= width * want + slack
}

fn check_sound(r: &Rfc2544Report, cfg: &Rfc2544Config) {
    let m = cfg.mlr.as_ref().unwrap();
    let search: Vec<_> = r
        .trials
        .iter()
        .filter(|t| t.phase == Phase::Throughput)
        .collect();
    assert!(search.len() as u32 <= m.max_trials);
    let time: f64 = search.iter().map(|t| t.duration_s).sum();
    assert!(time <= m.max_time.as_secs_f64() + 1e-9);
    for t in &r.trials {
        let x = &t.result;
        assert_eq!(x.rx + x.lost, x.tx);
        assert_eq!((x.duplicates, x.reordered, x.foreign), (0, 0, 0));
    }
    // The search's last trials are final-duration ones.
    assert_eq!(search.last().unwrap().duration_s, FINAL.as_secs_f64());
    assert_eq!(r.throughput_mpps, r.goal("ndr").unwrap().mpps);
}

#[test]
fn loss_spikes_one_trial_in_ten() {
    let mut rng = Rng(23);
    let mut spikes = 0;
    let (r, cfg, _) = search(|| {
        let spike = rng.unit() < 0.1;
        spikes += u32::from(spike);
        Impair {
            cap: CAP,
            spike,
            ..Default::default()
        }
    });
    check_sound(&r, &cfg);
    let w = cfg.mlr.as_ref().unwrap().width;
    let (ndr, pdr) = (r.goal("ndr").unwrap(), r.goal("pdr").unwrap());
    assert!(spikes >= 2, "{spikes} spikes");
    assert!(
        r.trials
            .iter()
            .any(|t| t.phase == Phase::Throughput && t.rate_pps < CAP && t.result.lost > 0),
        "a spike hit a search trial below the capacity"
    );
    assert!(ndr.converged && pdr.converged && !r.budget_exhausted);
    assert!(near(ndr.load_pps, CAP, w), "{ndr:?}");
    assert!(near(pdr.load_pps, CAP / 0.995, w), "{pdr:?}");
    assert_eq!(r.underruns, 0);
    let lat = r.latency_us.expect("latency at the NDR");
    assert!(lat.min <= lat.avg && lat.avg <= lat.max);
    // Deterministic.
    let mut rng = Rng(23);
    let (again, _, _) = search(|| Impair {
        cap: CAP,
        spike: rng.unit() < 0.1,
        ..Default::default()
    });
    assert_eq!(
        again.trials.iter().map(|t| t.result.rx).collect::<Vec<_>>(),
        r.trials.iter().map(|t| t.result.rx).collect::<Vec<_>>()
    );
}

#[test]
fn capacity_drifting_by_20_percent() {
    let mut rng = Rng(7);
    let (r, cfg, _) = search(|| Impair {
        cap: CAP * (0.8 + 0.4 * rng.unit()),
        ..Default::default()
    });
    check_sound(&r, &cfg);
    let slack = f64::from(DEPTH) / FINAL.as_secs_f64();
    for g in &r.goals {
        let hi = if g.name == "pdr" { 1.2 / 0.995 } else { 1.2 };
        assert!(
            g.found && g.load_pps >= 0.8 * CAP && g.load_pps <= hi * CAP + slack,
            "{g:?}"
        );
    }
}

#[test]
fn tester_underruns_are_retried_not_counted_as_loss() {
    let mut rng = Rng(5);
    let (r, cfg, _) = search(|| Impair {
        cap: CAP,
        slow_tester: rng.unit() < 0.25,
        ..Default::default()
    });
    check_sound(&r, &cfg);
    let w = cfg.mlr.as_ref().unwrap().width;
    let invalid: Vec<_> = r.trials.iter().filter(|t| t.invalid).collect();
    assert!(invalid.len() >= 3, "{} underruns", invalid.len());
    assert_eq!(r.underruns as usize, invalid.len());
    for t in &invalid {
        assert_eq!(t.fail_reason, Some(FailReason::Underrun), "{t:?}");
        assert!(
            t.result.tx_skipped > 0,
            "the generator gave up slots: {t:?}"
        );
        // Retried at the same rate.
        assert_eq!(r.trials[t.n as usize].rate_pps, t.rate_pps);
    }
    assert!(!r.generator_limited);
    let (ndr, pdr) = (r.goal("ndr").unwrap(), r.goal("pdr").unwrap());
    assert!(near(ndr.load_pps, CAP, w), "{ndr:?}");
    assert!(near(pdr.load_pps, CAP / 0.995, w), "{pdr:?}");
    assert!(!ndr.tester_limited && !pdr.tester_limited);
    // The loads below the capacity lose nothing: no underrun was taken for loss.
    assert_eq!(r.loss_at_load["25"], 0.0);
}
