//! Issue 28: "Policers stay correct across workers without a lock on the packet path.
//! Options are per-worker token shares with periodic rebalancing, or atomics: measure which
//! is better." This measures both, from memory, with 1 and 2 threads (one per core, as
//! workers are) policing the same traffic with one srTCM policer:
//!
//! - **atomics** (what `qos` does): one [`qos::policer::Policer`] shared by the threads;
//!   every decision refills and takes tokens with compare-and-swap on the same cache lines
//!   (buckets, refill clock, colour counters).
//! - **shares**: each thread owns a private copy of the same marker (plain integers, no
//!   atomic on the packet path) refilled at its share of the rate; every millisecond of its
//!   clock it publishes what it was offered in the last one (one relaxed store on its own
//!   cache line) and takes as its share the rate in proportion to its part of all the
//!   threads' offered load (loads of the others' lines). Bursts are split evenly.
//!
//! Per design and thread count, two loads: `green` (46-byte packets, CIR 1 Tbit/s: every
//! packet takes tokens, the worst case for contention) and `over` (IMIX sizes, CIR
//! 1 Gbit/s, far below what the threads offer: mostly red). Figures: ns per decision per thread, decisions per second
//! over all threads, and the accuracy: green bits ÷ the least of (CIR × time + CBS) and
//! what was offered (1.0: exact; a thread that is descheduled longer than its burst takes
//! to fill loses its share's tokens meanwhile, where a shared bucket is refilled by the
//! other thread). With 2 threads the
//! `over` load also runs skewed: thread 1 offers a tenth of thread 0's packets, as when
//! one worker's RSS queue carries most of a policed class.
//!
//! `cargo run --release -p qos --example policer_sharing [-- SECONDS [--json]]` (default
//! 1 s per case).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use qos::bucket::cost;
use qos::policer::{Action, Colour, Kind, Policer, PolicerSpec};

/// Packets per clock read (a worker reads its clock once per vector).
const VECTOR: usize = 32;
/// Rebalancing period of the shares design, ns.
const PERIOD_NS: u64 = 1_000_000;
/// Packet sizes, cycled (IP bytes): 7:4:1 as IMIX.
const IMIX: [u32; 12] = [46, 46, 46, 46, 46, 46, 46, 576, 576, 576, 576, 1500];
/// The smallest packets only: what the threads offer stays far below 1 Tbit/s.
const SMALL: [u32; 1] = [46];

fn spec(cir_bps: u64) -> PolicerSpec {
    PolicerSpec {
        kind: Kind::SrTcm,
        cir_bps,
        cbs_bytes: 100_000,
        pir_bps: 0,
        ebs_bytes: 100_000,
        colour_aware: false,
        actions: [Action::Transmit, Action::Transmit, Action::Drop],
    }
}

/// One thread's share: srTCM (RFC 2697, colour-blind) on plain integers, its rate
/// rebalanced every [`PERIOD_NS`] from the offered loads the threads publish.
struct Share {
    cir_bps: u64,
    rate_bps: u64,
    c: u64,
    c_size: u64,
    e: u64,
    e_size: u64,
    last_ns: u64,
    period_start: u64,
    offered: u64,
    me: usize,
    demand: Arc<Vec<Padded>>,
}

/// An atomic alone on its cache line.
#[repr(align(128))]
#[derive(Default)]
struct Padded(AtomicU64);

impl Share {
    fn new(s: &PolicerSpec, me: usize, threads: usize, demand: Arc<Vec<Padded>>) -> Share {
        let n = threads as u64;
        Share {
            cir_bps: s.cir_bps,
            rate_bps: s.cir_bps / n,
            c: cost(s.cbs_bytes / n),
            c_size: cost(s.cbs_bytes / n),
            e: cost(s.ebs_bytes / n),
            e_size: cost(s.ebs_bytes / n),
            last_ns: 0,
            period_start: 0,
            offered: 0,
            me,
            demand,
        }
    }

    #[inline]
    fn colour(&mut self, now_ns: u64, len: u32) -> Colour {
        if now_ns.saturating_sub(self.period_start) >= PERIOD_NS {
            self.demand[self.me].0.store(self.offered, Relaxed);
            let total: u64 = self.demand.iter().map(|d| d.0.load(Relaxed)).sum();
            if total > 0 {
                self.rate_bps = (u128::from(self.cir_bps) * u128::from(self.offered)
                    / u128::from(total)) as u64;
            }
            self.period_start = now_ns;
            self.offered = 0;
        }
        self.offered += u64::from(len);
        let dt = now_ns.saturating_sub(self.last_ns);
        if dt > 0 {
            self.last_ns = now_ns;
            let add = dt.saturating_mul(self.rate_bps);
            let room = self.c_size - self.c;
            if add <= room {
                self.c += add;
            } else {
                self.c = self.c_size;
                self.e = (self.e + (add - room)).min(self.e_size);
            }
        }
        let b = cost(u64::from(len));
        if self.c >= b {
            self.c -= b;
            Colour::Green
        } else if self.e >= b {
            self.e -= b;
            Colour::Yellow
        } else {
            Colour::Red
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Design {
    Atomics,
    Shares,
}

/// One thread's result: decisions, seconds, bytes offered and marked green.
struct Out {
    decisions: u64,
    secs: f64,
    offered_bytes: u64,
    green_bytes: u64,
}

fn now_ns(epoch: Instant) -> u64 {
    epoch.elapsed().as_nanos() as u64
}

/// Run `threads` threads for `secs`; thread `i` offers a vector every `every[i]` clock
/// reads (1: flat out).
fn run(
    design: Design,
    threads: usize,
    (cir_bps, sizes): (u64, &'static [u32]),
    every: &[u32],
    secs: f64,
) -> Vec<Out> {
    let epoch = Instant::now();
    let s = spec(cir_bps);
    let shared = Arc::new(Policer::new(s, 0));
    let demand: Arc<Vec<Padded>> = Arc::new((0..threads).map(|_| Padded::default()).collect());
    let barrier = Arc::new(Barrier::new(threads));
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (shared, demand, barrier) = (shared.clone(), demand.clone(), barrier.clone());
            let core = cores.get(i % cores.len().max(1)).copied();
            let every = every.get(i).copied().unwrap_or(1).max(1);
            std::thread::spawn(move || {
                if let Some(c) = core {
                    core_affinity::set_for_current(c);
                }
                let mut share = Share::new(&s, i, threads, demand);
                barrier.wait();
                let t0 = now_ns(epoch);
                let end = t0 + (secs * 1e9) as u64;
                let (mut n, mut offered, mut green) = (0u64, 0u64, 0u64);
                let (mut k, mut tick) = (0usize, 0u32);
                loop {
                    let now = now_ns(epoch);
                    if now >= end {
                        break;
                    }
                    tick += 1;
                    if tick < every {
                        std::hint::spin_loop();
                        continue;
                    }
                    tick = 0;
                    for _ in 0..VECTOR {
                        let len = sizes[k];
                        k = if k + 1 == sizes.len() { 0 } else { k + 1 };
                        let c = match design {
                            Design::Atomics => shared.colour(now, len, Colour::Green),
                            Design::Shares => share.colour(now, len),
                        };
                        offered += u64::from(len);
                        if c == Colour::Green {
                            green += u64::from(len);
                        }
                    }
                    n += VECTOR as u64;
                }
                Out {
                    decisions: n,
                    secs: (now_ns(epoch) - t0) as f64 / 1e9,
                    offered_bytes: offered,
                    green_bytes: green,
                }
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("thread"))
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let secs: f64 = args
        .iter()
        .find_map(|a| a.parse::<f64>().ok())
        .unwrap_or(1.0)
        .clamp(0.05, 60.0);
    let json = args.iter().any(|a| a == "--json");
    let mut rows = Vec::new();
    type Case = (&'static str, u64, &'static [u32], usize, &'static [u32]);
    let cases: [Case; 6] = [
        (
            "green (46 B, CIR 1 Tbit/s)",
            1_000_000_000_000,
            &SMALL,
            1,
            &[1],
        ),
        (
            "green (46 B, CIR 1 Tbit/s)",
            1_000_000_000_000,
            &SMALL,
            2,
            &[1, 1],
        ),
        ("over (IMIX, CIR 1 Gbit/s)", 1_000_000_000, &IMIX, 1, &[1]),
        (
            "over (IMIX, CIR 1 Gbit/s)",
            1_000_000_000,
            &IMIX,
            2,
            &[1, 1],
        ),
        ("over, skewed 10:1", 1_000_000_000, &IMIX, 2, &[1, 10]),
        (
            "over, skewed 10:1, 100 Mbit/s",
            100_000_000,
            &IMIX,
            2,
            &[1, 10],
        ),
    ];
    for (load, cir, sizes, threads, every) in cases {
        for design in [Design::Atomics, Design::Shares] {
            let out = run(design, threads, (cir, sizes), every, secs);
            let decisions: u64 = out.iter().map(|o| o.decisions).sum();
            let wall = out.iter().map(|o| o.secs).fold(0.0, f64::max);
            // ns per decision, per thread, over the threads that ran flat out.
            let flat: Vec<&Out> = out
                .iter()
                .zip(every)
                .filter(|(_, e)| **e == 1)
                .map(|(o, _)| o)
                .collect();
            let ns = flat
                .iter()
                .map(|o| o.secs * 1e9 / o.decisions.max(1) as f64)
                .sum::<f64>()
                / flat.len().max(1) as f64;
            let green: u64 = out.iter().map(|o| o.green_bytes).sum();
            let offered: u64 = out.iter().map(|o| o.offered_bytes).sum();
            let allowed = cir as f64 * wall / 8.0 + 100_000.0;
            // Below the CIR every byte should be green; above it, exactly what the CIR
            // and CBS allow.
            let accuracy = green as f64 / allowed.min(offered as f64).max(1.0);
            rows.push(serde_json::json!({
                "design": if design == Design::Atomics { "atomics" } else { "shares" },
                "threads": threads,
                "load": load,
                "cir_bps": cir,
                "ns_per_decision": ns,
                "mdecisions_per_s": decisions as f64 / wall / 1e6,
                "green_over_allowed": accuracy,
                "offered_gbps": offered as f64 * 8.0 / wall / 1e9,
            }));
        }
    }
    if json {
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!(
            "{}",
            serde_json::json!({"seconds": secs, "loadavg": load.trim(), "rows": rows})
        );
        return;
    }
    println!(
        "{:<32} {:<8} {:>7} {:>12} {:>14} {:>13} {:>16}",
        "load",
        "design",
        "threads",
        "ns/decision",
        "M decisions/s",
        "offered Gb/s",
        "green ÷ allowed"
    );
    for r in &rows {
        println!(
            "{:<32} {:<8} {:>7} {:>12.1} {:>14.1} {:>13.0} {:>16.4}",
            r["load"].as_str().unwrap_or(""),
            r["design"].as_str().unwrap_or(""),
            r["threads"],
            r["ns_per_decision"].as_f64().unwrap_or(0.0),
            r["mdecisions_per_s"].as_f64().unwrap_or(0.0),
            r["offered_gbps"].as_f64().unwrap_or(0.0),
            r["green_over_allowed"].as_f64().unwrap_or(0.0),
        );
    }
    println!("ns/decision: per thread offering flat out; green ÷ allowed: green bits ÷ the least of (CIR × time + CBS) and what was offered (1.0 is exact)");
}
