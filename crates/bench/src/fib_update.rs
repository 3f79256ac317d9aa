//! `ferrouter-lab bench fib-update`: bulk add and delete of a million routes by the single
//! writer while a worker keeps forwarding on another core. Reports routes/s for each phase
//! and the worker's forwarding rate before and during the update, with every packet that was
//! not forwarded counted (a correct update protocol loses none).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use dataplane::{Counters, Graph, GraphConfig};
use rustc_hash::FxHashSet;
use serde::Serialize;

use crate::pipeline::{self, bench_interfaces, build_traffic, forward_loop};
use crate::routes;

/// Options.
#[derive(Clone, Debug)]
pub struct Options {
    /// Routes added then deleted in bulk.
    pub routes: usize,
    /// Routes present throughout, which the worker's traffic targets.
    pub base_routes: usize,
    /// Seed.
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            routes: 1_000_000,
            base_routes: 100_000,
            seed: 1,
        }
    }
}

/// Result.
#[derive(Serialize, Clone, Debug)]
pub struct Report {
    /// Routes added and deleted.
    pub routes: usize,
    /// Bulk add rate.
    pub add_routes_per_s: f64,
    /// Bulk delete rate.
    pub del_routes_per_s: f64,
    /// Worker's rate with no update running.
    pub fwd_mpps_idle: f64,
    /// Worker's rate during the bulk add.
    pub fwd_mpps_during_add: f64,
    /// Worker's rate during the bulk delete.
    pub fwd_mpps_during_del: f64,
    /// Packets the worker failed to forward during the whole run (expected 0).
    pub not_forwarded: u64,
    /// Packets the worker forwarded during the run.
    pub forwarded: u64,
}

/// Run it.
pub fn run(opts: &Options, mut progress: impl FnMut(&str)) -> Result<Report> {
    progress(&format!("loading {} base routes", opts.base_routes));
    let mut fib = pipeline::load_fib(opts.base_routes, 0, 16, opts.seed)?;
    let base: FxHashSet<(u32, u8)> = fib.routes4.iter().copied().collect();
    // Bulk set: disjoint from the base, so deleting it never removes a route the worker uses.
    let bulk: Vec<(u32, u8)> = routes::gen_v4(opts.routes + opts.routes / 8, opts.seed ^ 0xb01c)
        .into_iter()
        .filter(|r| !base.contains(r))
        .take(opts.routes)
        .collect();
    let profile = pipeline::profile("ipv4-64")?;
    let mut traffic = build_traffic(&fib, profile, 16 * 1024, opts.seed, false);

    let cores = dataplane::worker::cores();
    let worker_core = cores.get(1).or(cores.first()).copied();
    if let Some(c) = cores.first() {
        core_affinity_set(*c);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let offered = Arc::new(AtomicU64::new(0));
    let sent = Arc::new(AtomicU64::new(0));
    let readers = fib.readers.clone();
    let (stop2, offered2, sent2) = (stop.clone(), offered.clone(), sent.clone());
    let mut worker = dataplane::worker::spawn(0, worker_core, move |_| {
        let mut g = Graph::new(
            readers.register(),
            Arc::new(bench_interfaces()),
            Arc::new(Counters::default()),
            None,
            GraphConfig::default(),
        );
        let pool = traffic.pkts.len() as u64;
        let mut passes = 0u64;
        // Offered packets are published per pass (for rates), forwarded once at the end.
        forward_loop(&mut g, &mut traffic, &stop2, u64::MAX, None, || {
            passes += 1;
            offered2.store(passes * pool, Ordering::Relaxed);
        });
        sent2.store(
            g.counters().get(dataplane::Reason::Ip4Forwarded),
            Ordering::Relaxed,
        );
    })?;

    let rate =
        |d: Duration, before: u64, after: u64| (after - before) as f64 / d.as_secs_f64() / 1e6;
    // Idle phase.
    std::thread::sleep(Duration::from_millis(300));
    let (t0, c0) = (Instant::now(), offered.load(Ordering::Relaxed));
    std::thread::sleep(Duration::from_secs(1));
    let fwd_mpps_idle = rate(t0.elapsed(), c0, offered.load(Ordering::Relaxed));

    progress(&format!("adding {} routes while forwarding", bulk.len()));
    let nh = fib.nexthops.clone();
    let (t1, c1) = (Instant::now(), offered.load(Ordering::Relaxed));
    for (k, &(p, l)) in bulk.iter().enumerate() {
        fib.writer.add4(p, l, nh[k % nh.len()])?;
    }
    let add_d = t1.elapsed();
    let fwd_mpps_during_add = rate(add_d, c1, offered.load(Ordering::Relaxed));

    progress(&format!("deleting {} routes while forwarding", bulk.len()));
    let (t2, c2) = (Instant::now(), offered.load(Ordering::Relaxed));
    for &(p, l) in &bulk {
        fib.writer.del4(p, l)?;
    }
    let del_d = t2.elapsed();
    let fwd_mpps_during_del = rate(del_d, c2, offered.load(Ordering::Relaxed));
    fib.writer.synchronize();

    stop.store(true, Ordering::Relaxed);
    if let dataplane::worker::WorkerExit::Panicked(m) = worker.join() {
        bail!("forwarding worker panicked: {m}");
    }
    let total = offered.load(Ordering::Relaxed);
    let forwarded = sent.load(Ordering::Relaxed);
    Ok(Report {
        routes: bulk.len(),
        add_routes_per_s: bulk.len() as f64 / add_d.as_secs_f64(),
        del_routes_per_s: bulk.len() as f64 / del_d.as_secs_f64(),
        fwd_mpps_idle,
        fwd_mpps_during_add,
        fwd_mpps_during_del,
        not_forwarded: total.saturating_sub(forwarded),
        forwarded,
    })
}

fn core_affinity_set(core: usize) {
    // SAFETY: plain syscall on a zero-initialised cpu_set_t owned by this frame.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Print a readable table.
pub fn print_table(r: &Report) {
    println!(
        "bulk FIB update of {} IPv4 routes with one worker forwarding on another core",
        r.routes
    );
    println!(
        "{:<28} {:>14}",
        "add",
        format!("{:.2} M routes/s", r.add_routes_per_s / 1e6)
    );
    println!(
        "{:<28} {:>14}",
        "delete",
        format!("{:.2} M routes/s", r.del_routes_per_s / 1e6)
    );
    println!(
        "{:<28} {:>14}",
        "forwarding, no update",
        format!("{:.2} Mpps", r.fwd_mpps_idle)
    );
    println!(
        "{:<28} {:>14}",
        "forwarding, during add",
        format!("{:.2} Mpps", r.fwd_mpps_during_add)
    );
    println!(
        "{:<28} {:>14}",
        "forwarding, during delete",
        format!("{:.2} Mpps", r.fwd_mpps_during_del)
    );
    println!("{:<28} {:>14}", "packets not forwarded", r.not_forwarded);
}
