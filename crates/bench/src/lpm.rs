//! `ferrouter-lab bench lpm [--compare-dpdk]`: cycles per longest-prefix-match lookup of
//! ferrouter's FIB, optionally next to DPDK's `rte_fib` measured by the stock
//! `dpdk-test-fib` on the same route set, the same keys, the same core, in the same run.
//!
//! How both sides are measured (identically — this mirrors app/test-fib/main.c of DPDK 22.11):
//! * the table is built from the route set (route `i` → next hop
//!   [`dpdk::next_hop_index`]`(i)`), then ONE pass is made over the key array in chunks of
//!   `bulk` keys (DPDK: `BURST_SZ` = 64, fixed, so `--compare-dpdk` requires bulk 64);
//! * around every chunk's bulk lookup the time stamp is taken with `mfence; rdtsc`
//!   (DPDK's `rte_rdtsc_precise()`), the differences are summed, and the sum is divided by
//!   the number of keys — so both figures include the same per-burst fencing overhead;
//! * the key count is rounded up to a multiple of the bulk (DPDK always looks up whole bursts);
//!   the keys are padded by repeating from the start, identically for both sides;
//! * both run pinned to the same core ([`dpdk::bench_core`]; the dpdk-test-fib child via
//!   EAL `-l <core>`, our measuring thread via `sched_setaffinity`) with nothing else of ours
//!   running (we block in `wait` while DPDK runs);
//! * on a shared machine a pass can be disturbed, so each side makes [`REPS`] passes —
//!   ferrouter: `REPS` passes over the same built table; DPDK: `REPS` runs of the binary (each
//!   builds its table and makes one pass) — and reports the best (lowest) pass.
//!
//! Ferrouter's lookups are also checked against a brute-force LPM on a sample of keys, so a
//! fast-but-wrong table cannot win.

use std::fmt::Write as _;

use anyhow::{bail, Context};

use crate::dpdk;
use crate::routes;

/// Passes (ferrouter) / process runs (DPDK) per figure; the best is reported.
pub const REPS: usize = 3;

/// Keys checked against the brute-force reference after measuring.
const VERIFY_SAMPLE: usize = 4096;

#[derive(Debug, Clone, serde::Serialize)]
pub struct LpmSide {
    /// Best-of-[`REPS`] cycles per lookup of ferrouter's FIB.
    pub ferrouter_cycles: f64,
    /// Best-of-[`REPS`] `AVG FIB lookup` of dpdk-test-fib, when compared.
    pub dpdk_cycles: Option<f64>,
    /// ferrouter / dpdk (< 1 means ferrouter is faster).
    pub ratio: Option<f64>,
    pub routes: usize,
    /// Keys per pass (after rounding up to a multiple of the bulk).
    pub lookups: usize,
    /// Every pass, in order.
    pub ferrouter_runs: Vec<f64>,
    pub dpdk_runs: Vec<f64>,
    /// The dpdk-test-fib command line of the last run.
    pub dpdk_command: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct LpmReport {
    pub ipv4: LpmSide,
    pub ipv6: LpmSide,
    pub bulk: usize,
    pub core: usize,
}

#[derive(Debug, Clone)]
pub struct LpmOptions {
    pub routes4: usize,
    pub routes6: usize,
    pub lookups: usize,
    pub bulk: usize,
    pub compare_dpdk: bool,
    pub seed: u64,
}

impl Default for LpmOptions {
    fn default() -> Self {
        LpmOptions {
            routes4: 1_000_000,
            routes6: 500_000,
            lookups: 1 << 20,
            bulk: dpdk::DPDK_BURST,
            compare_dpdk: false,
            seed: 1,
        }
    }
}

/// Run the benchmark (IPv4 then IPv6).
pub fn run(opts: &LpmOptions) -> anyhow::Result<LpmReport> {
    if opts.bulk == 0 {
        bail!("bulk must be at least 1");
    }
    if opts.routes4 == 0 || opts.routes6 == 0 || opts.lookups == 0 {
        bail!("routes4, routes6 and lookups must be non-zero");
    }
    if opts.compare_dpdk {
        if opts.bulk != dpdk::DPDK_BURST {
            bail!(
                "--compare-dpdk needs bulk {} (dpdk-test-fib 22.11 has a fixed burst of {}), got {}",
                dpdk::DPDK_BURST,
                dpdk::DPDK_BURST,
                opts.bulk
            );
        }
        if !dpdk::available() {
            bail!(
                "--compare-dpdk: {} not found; install dpdk-dev: apt-get install dpdk-dev",
                dpdk::BINARY
            );
        }
    }
    let core = dpdk::bench_core();
    let nkeys = opts.lookups.div_ceil(opts.bulk) * opts.bulk;
    let _pin = Pin::to(core)?;

    // IPv4
    let r4 = routes::gen_v4(opts.routes4, opts.seed);
    let mut k4 = routes::keys_v4(&r4, opts.lookups, opts.seed ^ 0x6b65_7973_0004);
    pad(&mut k4, nkeys);
    let ipv4 = {
        let runs = measure_v4(&r4, &k4, opts.bulk, tbl8_budget(dpdk::tbl8_groups_v4(&r4)))?;
        let d = if opts.compare_dpdk {
            Some(
                dpdk::run_test_fib_v4_n(&r4, &k4, opts.bulk, core, REPS)
                    .context("IPv4 dpdk-test-fib")?,
            )
        } else {
            None
        };
        side(runs, d, r4.len(), k4.len())
    };
    drop((r4, k4));

    // IPv6
    let r6 = routes::gen_v6(opts.routes6, opts.seed);
    let mut k6 = routes::keys_v6(&r6, opts.lookups, opts.seed ^ 0x6b65_7973_0006);
    pad(&mut k6, nkeys);
    let ipv6 = {
        let runs = measure_v6(&r6, &k6, opts.bulk, tbl8_budget(dpdk::tbl8_groups_v6(&r6)))?;
        let d = if opts.compare_dpdk {
            Some(
                dpdk::run_test_fib_v6_n(&r6, &k6, opts.bulk, core, REPS)
                    .context("IPv6 dpdk-test-fib")?,
            )
        } else {
            None
        };
        side(runs, d, r6.len(), k6.len())
    };

    Ok(LpmReport {
        ipv4,
        ipv6,
        bulk: opts.bulk,
        core,
    })
}

fn side(
    ferrouter_runs: Vec<f64>,
    d: Option<dpdk::DpdkFibRun>,
    routes: usize,
    lookups: usize,
) -> LpmSide {
    let f = ferrouter_runs.iter().copied().fold(f64::INFINITY, f64::min);
    let dpdk_cycles = d.as_ref().map(|d| d.cycles_per_lookup);
    LpmSide {
        ferrouter_cycles: f,
        dpdk_cycles,
        ratio: dpdk_cycles.filter(|&c| c > 0.0).map(|c| f / c),
        routes,
        lookups,
        ferrouter_runs,
        dpdk_runs: d.as_ref().map(|d| d.all_runs.clone()).unwrap_or_default(),
        dpdk_command: d.map(|d| d.command),
    }
}

/// Pad (repeating from the start) or truncate to exactly `n` keys.
fn pad<T: Copy>(v: &mut Vec<T>, n: usize) {
    assert!(!v.is_empty(), "no lookup keys generated");
    let mut i = 0;
    while v.len() < n {
        v.push(v[i]);
        i += 1;
    }
    v.truncate(n);
}

/// Generous tbl8 reservation for our FIB: twice what DPDK's layout needs (ours may stride
/// differently), never below the crate default. Reservations are committed lazily.
fn tbl8_budget(dpdk_groups: usize) -> usize {
    dpdk_groups * 2 + 4096
}

fn fib_config(t4: usize, t6: usize) -> fib::FibConfig {
    let d = fib::FibConfig::default();
    fib::FibConfig {
        max_tbl8_v4: d.max_tbl8_v4.max(t4),
        max_tbl8_v6: d.max_tbl8_v6.max(t6),
        max_readers: 4,
    }
}

fn next_hops(w: &mut fib::FibWriter) -> anyhow::Result<Vec<fib::NextHopId>> {
    (0..dpdk::NEXT_HOPS)
        .map(|i| {
            let adj = fib::Adjacency {
                port: (i % 4) as u16,
                dst_mac: [0x02, 0, 0, 0, 1, i as u8],
                src_mac: [0x02, 0, 0, 0, 0, (i % 4) as u8],
                mtu: 1500,
            };
            w.add_next_hop(fib::NextHop::Forward(adj))
                .map_err(anyhow::Error::from)
        })
        .collect()
}

/// `mfence; rdtsc` — DPDK's `rte_rdtsc_precise()` on x86.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rdtsc_precise() -> u64 {
    // SAFETY: mfence and rdtsc are available on every x86_64 CPU.
    unsafe {
        core::arch::x86_64::_mm_mfence();
        core::arch::x86_64::_rdtsc()
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn rdtsc_precise() -> u64 {
    unimplemented!("bench lpm measures with rdtsc (x86_64 only)")
}

/// One pass, DPDK style: sum of per-bulk (mfence;rdtsc) deltas / number of keys.
#[inline(never)]
fn pass<K>(
    keys: &[K],
    bulk: usize,
    out: &mut [u32],
    mut lookup: impl FnMut(&[K], &mut [u32]),
) -> f64 {
    let mut acc = 0u64;
    for chunk in keys.chunks(bulk) {
        let start = rdtsc_precise();
        lookup(chunk, &mut out[..chunk.len()]);
        acc += rdtsc_precise().wrapping_sub(start);
        std::hint::black_box(&mut out[..chunk.len()]);
    }
    acc as f64 / keys.len() as f64
}

fn measure_v4(
    routes: &[(u32, u8)],
    keys: &[u32],
    bulk: usize,
    tbl8: usize,
) -> anyhow::Result<Vec<f64>> {
    let (mut w, readers) = fib::new(fib_config(tbl8, 0));
    let nh = next_hops(&mut w)?;
    for (i, &(p, l)) in routes.iter().enumerate() {
        w.add4(p, l, nh[dpdk::next_hop_index(i)])
            .with_context(|| format!("add4 route #{i} /{l}"))?;
    }
    // Registered once the routes are in (a route add may wait for every online reader);
    // it goes offline as it drops.
    let r = readers.register();
    let mut out = vec![0u32; bulk];
    let runs: Vec<f64> = (0..REPS)
        .map(|_| pass(keys, bulk, &mut out, |k, o| r.lookup4_bulk(k, o)))
        .collect();
    verify_v4(routes, keys, &nh, &r)?;
    Ok(runs)
}

fn measure_v6(
    routes: &[([u8; 16], u8)],
    keys: &[[u8; 16]],
    bulk: usize,
    tbl8: usize,
) -> anyhow::Result<Vec<f64>> {
    let (mut w, readers) = fib::new(fib_config(0, tbl8));
    let nh = next_hops(&mut w)?;
    for (i, (p, l)) in routes.iter().enumerate() {
        w.add6(p, *l, nh[dpdk::next_hop_index(i)])
            .with_context(|| format!("add6 route #{i} /{l}"))?;
    }
    // Registered once the routes are in (a route add may wait for every online reader);
    // it goes offline as it drops.
    let r = readers.register();
    let mut out = vec![0u32; bulk];
    let runs: Vec<f64> = (0..REPS)
        .map(|_| pass(keys, bulk, &mut out, |k, o| r.lookup6_bulk(k, o)))
        .collect();
    verify_v6(routes, keys, &nh, &r)?;
    Ok(runs)
}

fn mask4(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len))
    }
}

fn mask6(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len))
    }
}

fn sample_idx(n: usize) -> impl Iterator<Item = usize> {
    let step = (n / VERIFY_SAMPLE).max(1);
    (0..n).step_by(step)
}

/// Brute-force LPM on a sample of keys (a later duplicate route replaces an earlier one, as
/// in both FIBs).
fn verify_v4(
    routes: &[(u32, u8)],
    keys: &[u32],
    nh: &[u32],
    r: &fib::FibReader,
) -> anyhow::Result<()> {
    let mut exact: rustc_hash::FxHashMap<(u32, u8), u32> = Default::default();
    for (i, &(p, l)) in routes.iter().enumerate() {
        exact.insert((p & mask4(l), l), nh[dpdk::next_hop_index(i)]);
    }
    let idx: Vec<usize> = sample_idx(keys.len()).collect();
    let k: Vec<u32> = idx.iter().map(|&i| keys[i]).collect();
    let mut got = vec![0u32; k.len()];
    r.lookup4_bulk(&k, &mut got);
    for (j, &a) in k.iter().enumerate() {
        let want = (0..=32u8)
            .rev()
            .find_map(|l| exact.get(&(a & mask4(l), l)).copied())
            .unwrap_or(fib::MISS);
        if got[j] != want || r.lookup4(a) != want {
            bail!(
                "ferrouter IPv4 lookup of {} returned {} (single {}), expected {}",
                std::net::Ipv4Addr::from(a),
                got[j],
                r.lookup4(a),
                want
            );
        }
    }
    Ok(())
}

fn verify_v6(
    routes: &[([u8; 16], u8)],
    keys: &[[u8; 16]],
    nh: &[u32],
    r: &fib::FibReader,
) -> anyhow::Result<()> {
    let mut exact: rustc_hash::FxHashMap<(u128, u8), u32> = Default::default();
    let mut lens = [false; 129];
    for (i, (p, l)) in routes.iter().enumerate() {
        exact.insert(
            (u128::from_be_bytes(*p) & mask6(*l), *l),
            nh[dpdk::next_hop_index(i)],
        );
        lens[*l as usize] = true;
    }
    let idx: Vec<usize> = sample_idx(keys.len()).collect();
    let k: Vec<[u8; 16]> = idx.iter().map(|&i| keys[i]).collect();
    let mut got = vec![0u32; k.len()];
    r.lookup6_bulk(&k, &mut got);
    for (j, a) in k.iter().enumerate() {
        let x = u128::from_be_bytes(*a);
        let want = (0..=128u8)
            .rev()
            .filter(|&l| lens[l as usize])
            .find_map(|l| exact.get(&(x & mask6(l), l)).copied())
            .unwrap_or(fib::MISS);
        if got[j] != want || r.lookup6(a) != want {
            bail!(
                "ferrouter IPv6 lookup of {} returned {} (single {}), expected {}",
                std::net::Ipv6Addr::from(*a),
                got[j],
                r.lookup6(a),
                want
            );
        }
    }
    Ok(())
}

/// Pins the calling thread to one core; restores the previous mask on drop.
pub(crate) struct Pin {
    old: libc::cpu_set_t,
}

impl Pin {
    pub(crate) fn to(core: usize) -> anyhow::Result<Pin> {
        // SAFETY: cpu_set_t is plain data; the calls read/write at most its size.
        unsafe {
            let mut old: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut old) != 0 {
                bail!("sched_getaffinity: {}", std::io::Error::last_os_error());
            }
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(core, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                bail!("pin to core {core}: {}", std::io::Error::last_os_error());
            }
            Ok(Pin { old })
        }
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        // SAFETY: restoring a mask we read earlier.
        unsafe {
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.old);
        }
    }
}

fn fmt_opt(v: Option<f64>, prec: usize) -> String {
    v.map(|x| format!("{x:.prec$}"))
        .unwrap_or_else(|| "-".into())
}

/// Human-readable table.
pub fn format_table(r: &LpmReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "LPM lookup, cycles/lookup (bulk {}, core {}, best of {REPS}; ratio = ferrouter/dpdk)",
        r.bulk, r.core
    );
    let _ = writeln!(
        s,
        "{:<6} {:>9} {:>9} {:>10} {:>14} {:>7}",
        "family", "routes", "lookups", "ferrouter", "dpdk-test-fib", "ratio"
    );
    for (name, x) in [("IPv4", &r.ipv4), ("IPv6", &r.ipv6)] {
        let _ = writeln!(
            s,
            "{:<6} {:>9} {:>9} {:>10.1} {:>14} {:>7}",
            name,
            x.routes,
            x.lookups,
            x.ferrouter_cycles,
            fmt_opt(x.dpdk_cycles, 1),
            fmt_opt(x.ratio, 2)
        );
    }
    s
}

pub fn print_table(r: &LpmReport) {
    print!("{}", format_table(r));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pad_repeats_from_start() {
        let mut v = vec![1, 2, 3];
        pad(&mut v, 7);
        assert_eq!(v, [1, 2, 3, 1, 2, 3, 1]);
        pad(&mut v, 2);
        assert_eq!(v, [1, 2]);
    }

    #[test]
    fn report_json_shape() {
        let s = |d: Option<f64>| LpmSide {
            ferrouter_cycles: 20.0,
            dpdk_cycles: d,
            ratio: d.map(|d| 20.0 / d),
            routes: 10,
            lookups: 64,
            ferrouter_runs: vec![20.0],
            dpdk_runs: vec![],
            dpdk_command: None,
        };
        let r = LpmReport {
            ipv4: s(Some(40.0)),
            ipv6: s(None),
            bulk: 64,
            core: 1,
        };
        let j: serde_json::Value = serde_json::to_value(&r).unwrap();
        assert_eq!(j["ipv4"]["ferrouter_cycles"], 20.0);
        assert_eq!(j["ipv4"]["dpdk_cycles"], 40.0);
        assert_eq!(j["ipv4"]["ratio"], 0.5);
        assert!(j["ipv6"]["dpdk_cycles"].is_null());
        assert!(format_table(&r).contains("0.50"));
    }

    #[test]
    fn pass_divides_by_keys() {
        let keys = vec![0u32; 128];
        let mut out = vec![0u32; 64];
        let mut calls = 0;
        let c = pass(&keys, 64, &mut out, |k, o| {
            calls += 1;
            o.copy_from_slice(k);
        });
        assert_eq!(calls, 2);
        assert!(c > 0.0);
    }
}
