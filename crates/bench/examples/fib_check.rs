//! Check the FIB against an exact-probe reference at scale: every key's lookup must equal the
//! longest matching generated route's next hop. `cargo run --release -p bench --example
//! fib_check -- ROUTES4 KEYS`.

use rustc_hash::FxHashMap;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .map_or(6_000_000, |a| a.parse().expect("ROUTES4"));
    let k: usize = args.next().map_or(1_000_000, |a| a.parse().expect("KEYS"));
    let loaded = bench::pipeline::load_fib(n, 0, 64, 1).expect("load");
    let nh = &loaded.nexthops;
    let mut reference: Vec<FxHashMap<u32, u32>> = (0..=32).map(|_| FxHashMap::default()).collect();
    for (i, &(p, l)) in loaded.routes4.iter().enumerate() {
        reference[l as usize].insert(p, nh[i % nh.len()]);
    }
    let keys = bench::routes::keys_v4(&loaded.routes4, k, 7);
    let mut bad = 0usize;
    for &key in &keys {
        let want = (0..=32u32)
            .rev()
            .find_map(|l| {
                let m = if l == 0 { 0 } else { u32::MAX << (32 - l) };
                reference[l as usize].get(&(key & m)).copied()
            })
            .unwrap_or(fib::MISS);
        let got = loaded.writer.lookup4(key);
        if got != want {
            bad += 1;
            if bad <= 10 {
                println!("key {key:#010x}: fib {got} reference {want}");
            }
        }
    }
    println!(
        "{} routes, {} keys, {} mismatches",
        loaded.routes4.len(),
        keys.len(),
        bad
    );
    pipeline_drops(&loaded);
}

/// The pipeline over the same table for a few passes, with its drop reasons.
#[allow(dead_code)]
fn pipeline_drops(loaded: &bench::pipeline::LoadedFib) {
    use std::sync::Arc;
    let p = bench::pipeline::profile("ipv4-64").unwrap();
    let mut t = bench::pipeline::build_traffic(loaded, p, 4096, 1, false);
    let counters = Arc::new(dataplane::Counters::default());
    let mut g = dataplane::Graph::new(
        loaded.readers.register(),
        Arc::new(bench::pipeline::bench_interfaces()),
        counters.clone(),
        None,
        dataplane::GraphConfig::default(),
    );
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (off, sent) = bench::pipeline::forward_loop(&mut g, &mut t, &stop, 10, None, || {});
    println!(
        "pipeline: offered {off} sent {sent}: {:?}",
        counters.snapshot().nonzero()
    );
}
