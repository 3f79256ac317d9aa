//! How fast the generator builds, sends, receives and accounts frames on one core, over
//! the in-memory port pair (no I/O): the tester's own ceiling, before any port or DUT.
//!
//! `cargo run --release -p tester --example loopback_rate [profile] [flows] [seconds]`

use std::time::Duration;

use dataplane::Arena;
use tester::testing::{lab_traffic, loop_pair};
use tester::{Generator, Profile, TrialConfig};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let profile = Profile::parse(args.get(1).map_or("ipv4-64", |s| s.as_str()))?;
    let flows: u32 = args.get(2).map_or(Ok(1000), |s| s.parse())?;
    let secs: f64 = args.get(3).map_or(Ok(1.0), |s| s.parse())?;
    for bidirectional in [false, true] {
        let mut traffic = lab_traffic(profile.clone(), bidirectional);
        traffic.flows = flows;
        let mut gen = Generator::new(&traffic)?;
        let (mut p0, mut p1) = loop_pair(4096);
        let mut mem = Arena::new(16384);
        // Ask for far more than one core can do: the achieved rate is the ceiling.
        let mut t = TrialConfig::new(1e9, Duration::from_secs_f64(secs));
        t.bidirectional = bidirectional;
        t.drain = Duration::from_millis(10);
        let r = gen.run_trial(&mut mem, &mut p0, &mut p1, &t)?;
        println!(
            "{} flows={} {}: {:.2} Mpps sent+received+accounted ({:.1} ns/frame), lost {}, \
             latency p99 {:.1} µs",
            profile,
            flows,
            if bidirectional { "bi " } else { "uni" },
            r.tx_pps / 1e6,
            1e9 / r.tx_pps,
            r.lost,
            r.latency.p99_us
        );
    }
    Ok(())
}
