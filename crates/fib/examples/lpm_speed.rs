//! LPM self-check benchmark: Internet-like IPv4 and clustered IPv6 tables.
//!
//! `cargo run --release -p fib --example lpm_speed [v4_routes] [v6_routes]`
//!
//! Prints add/delete rates, bytes per route and cycles per lookup (bulk of 64 random
//! destinations that fall inside installed routes, measured with rdtsc).

use std::time::Instant;

use fib::{Adjacency, FibConfig, NextHop, NextHopId};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const BULK: usize = 64;
const KEYS: usize = 1 << 20;

fn cycles() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdtsc has no preconditions on x86_64.
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        std::time::UNIX_EPOCH
            .elapsed()
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    }
}

fn v4_len(rng: &mut SmallRng) -> u8 {
    match rng.gen_range(0..100) {
        0..=59 => 24,
        60..=84 => rng.gen_range(22..=23),
        85..=98 => rng.gen_range(16..=21),
        _ => rng.gen_range(25..=32),
    }
}

fn v6_routes(rng: &mut SmallRng, n: usize) -> Vec<(u128, u8)> {
    let mut out = Vec::with_capacity(n);
    let allocs = 20_000;
    let per = n / allocs;
    for _ in 0..allocs {
        let a = (0x2u128 << 124) | (u128::from(rng.gen::<u32>() >> 4) << 96); // /32 under 2000::/4
        out.push((a, 32));
        if rng.gen_ratio(1, 10) {
            out.push((a & (u128::MAX << 99), 29));
        }
        let s40: Vec<u128> = (0..3)
            .map(|_| a | (u128::from(rng.gen::<u8>()) << 88))
            .collect();
        for &p in &s40 {
            out.push((p, 40));
            out.push((p & (u128::MAX << 92), 36));
        }
        while out.len() % per != 0 || out.is_empty() {
            let p = s40[rng.gen_range(0..3)];
            if rng.gen_ratio(1, 4) {
                out.push((p | (u128::from(rng.gen::<u8>() >> 4) << 84), 44));
            } else {
                out.push((p | (u128::from(rng.gen::<u8>()) << 80), 48));
            }
        }
    }
    out.truncate(n);
    out
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let n4 = args.first().copied().unwrap_or(1_000_000);
    let n6 = args.get(1).copied().unwrap_or(500_000);
    let mut rng = SmallRng::seed_from_u64(42);

    let (mut w, readers) = fib::new(FibConfig::default());
    let nhs: Vec<NextHopId> = (0..1024u16)
        .map(|i| {
            let adj = Adjacency {
                port: i % 8,
                dst_mac: [2, 0, 0, 0, 0, i as u8],
                src_mac: [2; 6],
                mtu: 1500,
            };
            w.add_next_hop(NextHop::Forward(adj)).unwrap()
        })
        .collect();

    // ---- IPv4 ----
    let mut routes4: Vec<(u32, u8)> = Vec::with_capacity(n4);
    let mut seen = rustc_hash::FxHashSet::default();
    while routes4.len() < n4 {
        let len = v4_len(&mut rng);
        let p = rng.gen::<u32>() & if len == 0 { 0 } else { u32::MAX << (32 - len) };
        if seen.insert((p, len)) {
            routes4.push((p, len));
        }
    }
    drop(seen);
    let route_nh: Vec<NextHopId> = (0..n4).map(|_| nhs[rng.gen_range(0..nhs.len())]).collect();
    let t = Instant::now();
    for (&(p, l), &nh) in routes4.iter().zip(&route_nh) {
        w.add4(p, l, nh).unwrap();
    }
    let add4 = n4 as f64 / t.elapsed().as_secs_f64();
    let m = w.memory();
    let bytes4 = m.v4_table_bytes + m.rib_bytes;
    let keys4: Vec<u32> = (0..KEYS)
        .map(|_| {
            let (p, l) = routes4[rng.gen_range(0..n4)];
            p | (rng.gen::<u32>() & !if l == 0 { 0 } else { u32::MAX << (32 - l) })
        })
        .collect();
    let mut out = vec![0; KEYS];
    // Online only while it looks up: a route add may wait for every online reader.
    let r = readers.register();
    let mut best4 = f64::MAX;
    for _ in 0..5 {
        let c = cycles();
        for (k, o) in keys4.chunks(BULK).zip(out.chunks_mut(BULK)) {
            r.lookup4_bulk(k, o);
        }
        best4 = best4.min((cycles() - c) as f64 / KEYS as f64);
    }
    assert!(out.iter().all(|&x| x != fib::MISS));
    let mut single4 = f64::MAX;
    for _ in 0..3 {
        let c = cycles();
        for (k, o) in keys4.iter().zip(out.iter_mut()) {
            *o = r.lookup4(*k);
        }
        single4 = single4.min((cycles() - c) as f64 / KEYS as f64);
    }
    let (g4, _) = w.tbl8_in_use();
    drop(r);

    // ---- IPv6 ----
    let routes6 = v6_routes(&mut rng, n6);
    let t = Instant::now();
    for (i, &(p, l)) in routes6.iter().enumerate() {
        w.add6(&p.to_be_bytes(), l, nhs[i % nhs.len()]).unwrap();
    }
    let add6 = routes6.len() as f64 / t.elapsed().as_secs_f64();
    let m6 = w.memory();
    let bytes6 = m6.v6_table_bytes + (m6.rib_bytes - m.rib_bytes);
    let keys6: Vec<[u8; 16]> = (0..KEYS)
        .map(|_| {
            let (p, l) = routes6[rng.gen_range(0..routes6.len())];
            (p | (rng.gen::<u128>() & !(u128::MAX << (128 - l)))).to_be_bytes()
        })
        .collect();
    let r = readers.register();
    let mut best6 = f64::MAX;
    for _ in 0..5 {
        let c = cycles();
        for (k, o) in keys6.chunks(BULK).zip(out.chunks_mut(BULK)) {
            r.lookup6_bulk(k, o);
        }
        best6 = best6.min((cycles() - c) as f64 / KEYS as f64);
    }
    assert!(out.iter().all(|&x| x != fib::MISS));
    let (_, g6) = w.tbl8_in_use();

    // ---- deletes ----
    routes4.shuffle(&mut rng);
    let t = Instant::now();
    for &(p, l) in &routes4 {
        assert!(w.del4(p, l).unwrap());
    }
    let del4 = n4 as f64 / t.elapsed().as_secs_f64();
    let mut routes6 = routes6;
    routes6.shuffle(&mut rng);
    let n6 = m6.routes_v6;
    let t = Instant::now();
    for &(p, l) in &routes6 {
        w.del6(&p.to_be_bytes(), l).unwrap();
    }
    let del6 = n6 as f64 / t.elapsed().as_secs_f64();
    w.synchronize();

    println!("IPv4: {n4} routes, {g4} tbl8 groups");
    println!("  add    {:>10.0} routes/s", add4);
    println!("  delete {:>10.0} routes/s", del4);
    println!(
        "  memory {:>10.1} bytes/route (tables + RIB, {} MiB)",
        bytes4 as f64 / n4 as f64,
        bytes4 >> 20
    );
    println!(
        "  lookup {:>10.1} cycles/lookup (bulk {BULK}), {:.1} single",
        best4, single4
    );
    println!("IPv6: {n6} routes, {g6} tbl8 groups");
    println!("  add    {:>10.0} routes/s", add6);
    println!("  delete {:>10.0} routes/s", del6);
    println!(
        "  memory {:>10.1} bytes/route (tables + RIB, {} MiB)",
        bytes6 as f64 / n6 as f64,
        bytes6 >> 20
    );
    println!("  lookup {:>10.1} cycles/lookup (bulk {BULK})", best6);
    println!(
        "after delete: tbl8 in use {:?}, routes {}/{}",
        w.tbl8_in_use(),
        w.memory().routes_v4,
        w.memory().routes_v6
    );
}
