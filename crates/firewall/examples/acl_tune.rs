//! Tuning aid: cycles per classification of the classifier with settings from the
//! environment (`LEAF`, `KMAX`, `SPFAC`), as `ferrouter-lab bench acl` measures them.
//! `cargo run --release -p firewall --features gen --example acl_tune -- [RULES]`
use firewall::classify::{Classifier, Options, Rule};
use std::time::Instant;

fn env(name: &str, d: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    // `ACL_BAD=1`: boxes of random ranges in every dimension (every cut copies most).
    let rules: Vec<Rule<u32>> = if std::env::var("ACL_BAD").is_ok() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
        (0..n)
            .map(|_| {
                let mut r = Rule::any();
                for (d, max) in [
                    (0, u32::MAX),
                    (1, u32::MAX),
                    (2, 65535),
                    (3, 65535),
                    (4, 255),
                ] {
                    let (a, b) = (rng.gen_range(0..=max), rng.gen_range(0..=max));
                    (r.lo[d], r.hi[d]) = (a.min(b), a.max(b));
                }
                r
            })
            .collect()
    } else {
        firewall::gen::acl_rules(n, 1)
            .iter()
            .map(|m| m.rule().unwrap())
            .collect()
    };
    let traces = firewall::gen::traces(&rules, 100_000, 1 ^ 0x5eed);
    if std::env::var("V6").is_ok() {
        return v6(&rules, &traces);
    }
    let d = Options::default();
    let opts = Options {
        leaf_rules: env("LEAF", d.leaf_rules),
        max_cut_bits: env("KMAX", d.max_cut_bits as usize) as u32,
        space_factor: env("SPFAC", d.space_factor),
        ..d
    };
    let t = Instant::now();
    let c = Classifier::build(rules.clone(), opts).unwrap();
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let mut out = vec![None; traces.len()];
    let mut best = f64::MAX;
    for _ in 0..3 {
        let s0 = oncpu();
        let w0 = Instant::now();
        let s = unsafe { core::arch::x86_64::_rdtsc() };
        for _ in 0..10 {
            for (k, o) in traces.chunks(256).zip(out.chunks_mut(256)) {
                c.classify_burst(k, o);
                std::hint::black_box(&mut *o);
            }
        }
        let e = unsafe { core::arch::x86_64::_rdtsc() } - s;
        // Cycles while on the CPU: TSC rate times the thread's CPU time.
        let ghz = e as f64 / w0.elapsed().as_nanos() as f64;
        let cpu = (oncpu() - s0) as f64 * ghz;
        best = best.min(cpu / 1e6);
    }
    // One key at a time (the firewall node's path), as the bursts are timed.
    let mut single = f64::MAX;
    for _ in 0..3 {
        let s0 = oncpu();
        let w0 = Instant::now();
        let s = unsafe { core::arch::x86_64::_rdtsc() };
        for _ in 0..10 {
            for (k, o) in traces.iter().zip(out.iter_mut()) {
                *o = c.classify(k);
            }
            std::hint::black_box(&mut out);
        }
        let e = unsafe { core::arch::x86_64::_rdtsc() } - s;
        let ghz = e as f64 / w0.elapsed().as_nanos() as f64;
        single = single.min((oncpu() - s0) as f64 * ghz / 1e6);
    }
    println!("  one key at a time: {single:.1} cycles");
    for (i, k) in traces.iter().enumerate().step_by(50) {
        assert_eq!(
            out[i],
            rules.iter().position(|r| r.matches(k)).map(|x| x as u32)
        );
    }
    work(&c, &traces);
    println!(
        "{opts:?}\n  {best:.1} cycles, build {ms:.1} ms, {:?}",
        c.stats()
    );
}

#[allow(dead_code)]
fn work(c: &Classifier<u32>, traces: &[[u32; 5]]) {
    let (mut trees, mut steps, mut reads, mut maxs) = (0, 0, 0, 0);
    let mut hist = [0usize; 64];
    for k in traces {
        let w = c.work(k);
        trees += w.len();
        let mut m = 0;
        for (s, r) in w {
            steps += s;
            reads += r;
            m = m.max(s);
        }
        hist[m as usize] += 1;
        maxs += m;
    }
    let n = traces.len() as f64;
    println!(
        "  per key: {:.2} trees, {:.2} steps, {:.2} leaf reads, {:.2} deepest; deepest hist {:?}",
        trees as f64 / n,
        steps as f64 / n,
        reads as f64 / n,
        maxs as f64 / n,
        &hist[..20]
    );
}

fn oncpu() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// `V6=1`: the same rules and traces with their addresses moved into 2001:db8::/32 (the
/// IPv4 address in the low bits, prefixes 96 bits longer), through `Classifier<u128>`.
fn v6(rules: &[Rule<u32>], traces: &[[u32; 5]]) {
    let base = 0x2001_0db8u128 << 96;
    let up = |d: usize, v: u32| -> u128 {
        if d < 2 {
            base | u128::from(v)
        } else {
            u128::from(v)
        }
    };
    let r6: Vec<Rule<u128>> = rules
        .iter()
        .map(|r| {
            let mut x = Rule {
                lo: std::array::from_fn(|d| up(d, r.lo[d])),
                hi: std::array::from_fn(|d| up(d, r.hi[d])),
            };
            // "Any" address stays any.
            for d in 0..2 {
                if r.lo[d] == 0 && r.hi[d] == u32::MAX {
                    (x.lo[d], x.hi[d]) = (0, u128::MAX);
                }
            }
            x
        })
        .collect();
    let t6: Vec<[u128; 5]> = traces
        .iter()
        .map(|k| std::array::from_fn(|d| up(d, k[d])))
        .collect();
    let t = Instant::now();
    let c = Classifier::build(r6.clone(), Options::default()).unwrap();
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let mut out = vec![None; t6.len()];
    let mut best = f64::MAX;
    for _ in 0..3 {
        let s0 = oncpu();
        let w0 = Instant::now();
        let s = unsafe { core::arch::x86_64::_rdtsc() };
        for _ in 0..10 {
            for (k, o) in t6.chunks(256).zip(out.chunks_mut(256)) {
                c.classify_burst(k, o);
                std::hint::black_box(&mut *o);
            }
        }
        let e = unsafe { core::arch::x86_64::_rdtsc() } - s;
        let ghz = e as f64 / w0.elapsed().as_nanos() as f64;
        best = best.min((oncpu() - s0) as f64 * ghz / 1e6);
    }
    for (i, k) in t6.iter().enumerate().step_by(50) {
        assert_eq!(
            out[i],
            r6.iter().position(|r| r.matches(k)).map(|x| x as u32)
        );
    }
    println!("IPv6: {best:.1} cycles, build {ms:.1} ms, {:?}", c.stats());
}
