//! FIB tests: randomized comparison against a naive reference, concurrency, QSBR, errors.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;

fn small_cfg() -> FibConfig {
    FibConfig {
        max_tbl8_v4: 1 << 12,
        max_tbl8_v6: 1 << 14,
        max_readers: 8,
    }
}

fn adj(i: u16) -> NextHop {
    NextHop::Forward(Adjacency {
        port: i,
        dst_mac: [2, 0, 0, 0, 0, i as u8],
        src_mac: [2; 6],
        mtu: 1500,
    })
}

fn with_next_hops(cfg: FibConfig, n: u16) -> (FibWriter, FibReaders, Vec<NextHopId>) {
    let (mut w, r) = new(cfg);
    let ids = (0..n).map(|i| w.add_next_hop(adj(i)).unwrap()).collect();
    (w, r, ids)
}

// ---------------------------------------------------------------- reference model

/// Naive longest-prefix match over a list of routes (keys left-aligned in a u128).
#[derive(Default)]
struct Reference {
    routes: HashMap<(u128, u8), NextHopId>,
}

impl Reference {
    fn lookup(&self, addr: u128) -> NextHopId {
        self.routes
            .iter()
            .filter(|(&(p, l), _)| addr & mask6(l) == p)
            .max_by_key(|(&(_, l), _)| l)
            .map_or(MISS, |(_, &nh)| nh)
    }
}

/// Prefix lengths: mostly long enough to exercise tbl8 levels, a few very short ones
/// (which rewrite large parts of tbl24 and so are kept rare).
fn rand_len(rng: &mut SmallRng, max: u8) -> u8 {
    match rng.gen_range(0..100) {
        0..=2 => rng.gen_range(0..=8),
        3..=9 => max,
        10..=39 => rng.gen_range(9..=24),
        _ => rng.gen_range(25..=max),
    }
}

/// Addresses around every route's boundaries plus random ones (biased to the bases).
fn probe_addrs(rng: &mut SmallRng, r: &Reference, bases: &[u128], bits: u32) -> Vec<u128> {
    let top = if bits == 32 {
        u128::from(u32::MAX) << 96
    } else {
        u128::MAX
    };
    let mut v = Vec::new();
    for &(p, l) in r.routes.keys() {
        let last = p | (!mask6(l) & top);
        for a in [
            p,
            last,
            p.wrapping_sub(1 << (128 - bits)),
            last.wrapping_add(1 << (128 - bits)),
        ] {
            v.push(a & top);
        }
    }
    for _ in 0..300 {
        let b = bases[rng.gen_range(0..bases.len())];
        let flip = rng.gen::<u128>() & !mask6(rng.gen_range(0..=bits as u8));
        v.push((b ^ flip) & top);
        v.push(rng.gen::<u128>() & top);
    }
    v
}

fn check_family(
    w: &mut FibWriter,
    r: &FibReaders,
    rf: &Reference,
    rng: &mut SmallRng,
    bases: &[u128],
    v6: bool,
) {
    let addrs = probe_addrs(rng, rf, bases, if v6 { 128 } else { 32 });
    // Registered for the check only: no write happens while it is online.
    let r = r.register();
    let got: Vec<NextHopId> = if v6 {
        let keys: Vec<[u8; 16]> = addrs.iter().map(|a| a.to_be_bytes()).collect();
        let mut bulk = vec![0; keys.len()];
        r.lookup6_bulk(&keys, &mut bulk);
        let single: Vec<_> = keys.iter().map(|k| w.lookup6(k)).collect();
        assert_eq!(bulk, single, "lookup6_bulk differs from lookup6");
        single
    } else {
        let keys: Vec<u32> = addrs.iter().map(|a| (a >> 96) as u32).collect();
        let mut bulk = vec![0; keys.len()];
        r.lookup4_bulk(&keys, &mut bulk);
        let single: Vec<_> = keys.iter().map(|&k| w.lookup4(k)).collect();
        assert_eq!(bulk, single, "lookup4_bulk differs from lookup4");
        single
    };
    for (a, g) in addrs.iter().zip(got) {
        assert_eq!(g, rf.lookup(*a), "lookup of {a:#x} (v6={v6})");
    }
    for (&(p, l), &nh) in &rf.routes {
        let got = if v6 {
            w.get6(&p.to_be_bytes(), l)
        } else {
            w.get4((p >> 96) as u32, l)
        };
        assert_eq!(got, Some(nh));
    }
    let m = w.memory();
    assert_eq!(if v6 { m.routes_v6 } else { m.routes_v4 }, rf.routes.len());
}

fn random_ops(v6: bool, seed: u64, rounds: usize) {
    let bits: u32 = if v6 { 128 } else { 32 };
    let (mut w, r, nhs) = with_next_hops(small_cfg(), 8);
    let mut rng = SmallRng::seed_from_u64(seed);
    let top = if v6 {
        u128::MAX
    } else {
        u128::from(u32::MAX) << 96
    };
    for _ in 0..rounds {
        let mut rf = Reference::default();
        let bases: Vec<u128> = (0..6).map(|_| rng.gen::<u128>() & top).collect();
        for _batch in 0..6 {
            for _ in 0..30 {
                let len = rand_len(&mut rng, bits as u8);
                let base = if rng.gen_ratio(4, 5) {
                    bases[rng.gen_range(0..bases.len())]
                } else {
                    rng.gen::<u128>() & top
                };
                let p = base & mask6(len);
                if rng.gen_ratio(7, 10) {
                    let nh = nhs[rng.gen_range(0..nhs.len())];
                    // Host bits must be ignored.
                    let given = p | (rng.gen::<u128>() & !mask6(len) & top);
                    if v6 {
                        w.add6(&given.to_be_bytes(), len, nh).unwrap();
                    } else {
                        w.add4((given >> 96) as u32, len, nh).unwrap();
                    }
                    rf.routes.insert((p, len), nh);
                } else {
                    // Delete an existing route most of the time, a random one otherwise.
                    let (p, len) = if !rf.routes.is_empty() && rng.gen_ratio(3, 4) {
                        let k = rng.gen_range(0..rf.routes.len());
                        *rf.routes.keys().nth(k).unwrap()
                    } else {
                        (p, len)
                    };
                    let existed = if v6 {
                        w.del6(&p.to_be_bytes(), len)
                    } else {
                        w.del4((p >> 96) as u32, len)
                    };
                    assert_eq!(existed.unwrap(), rf.routes.remove(&(p, len)).is_some());
                }
            }
            check_family(&mut w, &r, &rf, &mut rng, &bases, v6);
        }
        // Delete everything in random order: every group must be folded back.
        let mut all: Vec<_> = rf.routes.keys().copied().collect();
        while !all.is_empty() {
            let (p, l) = all.swap_remove(rng.gen_range(0..all.len()));
            let ok = if v6 {
                w.del6(&p.to_be_bytes(), l)
            } else {
                w.del4((p >> 96) as u32, l)
            };
            assert!(ok.unwrap());
            rf.routes.remove(&(p, l));
        }
        check_family(&mut w, &r, &rf, &mut rng, &bases, v6);
        assert_eq!(
            w.tbl8_in_use(),
            (0, 0),
            "groups leaked after deleting every route"
        );
        w.synchronize();
        assert_eq!(w.pending_reclaim(), 0);
    }
    for &nh in &nhs {
        w.remove_next_hop(nh).unwrap();
    }
}

#[test]
fn v4_matches_reference() {
    for seed in 0..4 {
        random_ops(false, seed, 12);
    }
}

#[test]
fn v6_matches_reference() {
    for seed in 100..104 {
        random_ops(true, seed, 12);
    }
}

#[test]
fn v4_edge_prefixes() {
    let (mut w, _r, nh) = with_next_hops(small_cfg(), 4);
    w.add4(0, 0, nh[0]).unwrap();
    w.add4(0x0a00_0000, 8, nh[1]).unwrap();
    w.add4(0x0a01_0200, 24, nh[2]).unwrap();
    w.add4(0x0a01_0203, 32, nh[3]).unwrap();
    assert_eq!(w.lookup4(0x0b00_0000), nh[0]);
    assert_eq!(w.lookup4(0x0a02_0000), nh[1]);
    assert_eq!(w.lookup4(0x0a01_02ff), nh[2]);
    assert_eq!(w.lookup4(0x0a01_0203), nh[3]);
    assert_eq!(w.tbl8_in_use().0, 1);
    // Replacing the /24 must not disturb the /32 below it.
    w.add4(0x0a01_0200, 24, nh[1]).unwrap();
    assert_eq!(w.lookup4(0x0a01_0204), nh[1]);
    assert_eq!(w.lookup4(0x0a01_0203), nh[3]);
    assert!(w.del4(0x0a01_0203, 32).unwrap());
    assert_eq!(w.tbl8_in_use().0, 0);
    assert_eq!(w.lookup4(0x0a01_0203), nh[1]);
    assert!(!w.del4(0x0a01_0203, 32).unwrap());
    assert!(w.del4(0, 0).unwrap());
    assert_eq!(w.lookup4(0x0b00_0000), MISS);
    // Sixteen /28s with one next hop make a uniform group that must not be folded.
    for i in 0..16u32 {
        w.add4(0x1400_0000 | i << 4, 28, nh[2]).unwrap();
    }
    assert!(w.del4(0x1400_0010, 28).unwrap());
    assert_eq!(w.lookup4(0x1400_0011), MISS);
    assert_eq!(w.lookup4(0x1400_0021), nh[2]);
}

#[test]
fn v6_edge_prefixes() {
    let (mut w, _r, nh) = with_next_hops(small_cfg(), 4);
    let a: u128 = 0x2001_0db8_0000_0000_0000_0000_0000_0001;
    w.add6(&a.to_be_bytes(), 128, nh[0]).unwrap();
    assert_eq!(w.tbl8_in_use().1, 13);
    w.add6(&[0; 16], 0, nh[1]).unwrap();
    assert_eq!(w.lookup6(&a.to_be_bytes()), nh[0]);
    assert_eq!(w.lookup6(&(a + 1).to_be_bytes()), nh[1]);
    w.add6(&a.to_be_bytes(), 64, nh[2]).unwrap();
    assert_eq!(w.lookup6(&(a + 1).to_be_bytes()), nh[2]);
    assert!(w.del6(&a.to_be_bytes(), 128).unwrap());
    assert_eq!(w.lookup6(&a.to_be_bytes()), nh[2]);
    assert_eq!(w.tbl8_in_use().1, 5);
    assert!(w.del6(&a.to_be_bytes(), 64).unwrap());
    assert_eq!(w.tbl8_in_use().1, 0);
    assert_eq!(w.lookup6(&a.to_be_bytes()), nh[1]);
}

// ---------------------------------------------------------------- concurrency

/// Run `write` while a registered reader checks that every key's result is allowed.
/// `allowed(i, nh)` says whether key `i` may map to `nh` at any point during the update.
fn race(
    w: &mut FibWriter,
    r: &FibReaders,
    keys: Vec<u32>,
    allowed: impl Fn(usize, NextHopId) -> bool + Send + 'static,
    write: impl FnOnce(&mut FibWriter),
) -> usize {
    let done = Arc::new(AtomicBool::new(false));
    let readers = r.clone();
    let d = Arc::clone(&done);
    let t = std::thread::spawn(move || {
        let mut reader = readers.register();
        let mut out = vec![0; keys.len()];
        let start = Instant::now();
        let mut passes = 0;
        loop {
            let finished = d.load(Ordering::Acquire);
            for (kc, oc) in keys.chunks(64).zip(out.chunks_mut(64)) {
                reader.lookup4_bulk(kc, oc);
                reader.quiescent();
            }
            for (i, &nh) in out.iter().enumerate() {
                assert!(allowed(i, nh), "key {:#x} gave next hop {nh}", keys[i]);
            }
            passes += 1;
            if finished || start.elapsed() > Duration::from_secs(20) {
                break;
            }
        }
        passes
    });
    write(w);
    w.synchronize();
    done.store(true, Ordering::Release);
    t.join().expect("reader saw a wrong next hop")
}

#[test]
fn concurrent_replace() {
    let (mut w, r, nh) = with_next_hops(small_cfg(), 2);
    let (a, b) = (nh[0], nh[1]);
    let mut rng = SmallRng::seed_from_u64(7);
    let mut prefixes: Vec<u32> = (0..100_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) & 0x00ff_ffff) << 8)
        .collect();
    prefixes.sort_unstable();
    prefixes.dedup();
    for &p in &prefixes {
        w.add4(p, 24, a).unwrap();
    }
    let keys: Vec<u32> = (0..4096)
        .map(|_| prefixes[rng.gen_range(0..prefixes.len())] | rng.gen_range(0..256))
        .collect();
    let passes = race(
        &mut w,
        &r,
        keys.clone(),
        move |_, x| x == a || x == b,
        |w| {
            for &p in &prefixes {
                w.add4(p, 24, b).unwrap();
            }
        },
    );
    assert!(passes >= 1);
    assert!(keys.iter().all(|&k| w.lookup4(k) == b));
}

#[test]
fn concurrent_delete_more_specifics() {
    let (mut w, r, nh) = with_next_hops(small_cfg(), 2);
    let (a, b) = (nh[0], nh[1]);
    let mut specifics = Vec::new();
    for i in 0..400u32 {
        let covering = (i * 97 + 11) << 16;
        w.add4(covering, 16, a).unwrap();
        for j in 0..250u32 {
            specifics.push(covering | j << 8);
        }
    }
    for &p in &specifics {
        w.add4(p, 24, b).unwrap();
    }
    let keys: Vec<u32> = specifics.iter().step_by(25).map(|p| p | 0x42).collect();
    race(
        &mut w,
        &r,
        keys.clone(),
        move |_, x| x == a || x == b,
        |w| {
            for &p in &specifics {
                assert!(w.del4(p, 24).unwrap());
            }
        },
    );
    assert!(keys.iter().all(|&k| w.lookup4(k) == a));
}

#[test]
fn concurrent_group_churn() {
    // Even /24s point to A, odd ones to C; /28s inside them to B are added and deleted
    // repeatedly, so groups are created, folded and reused while the reader runs. A group
    // reused too early would show C on an even /24 (or A on an odd one).
    let (mut w, r, nh) = with_next_hops(
        FibConfig {
            max_tbl8_v4: 256,
            ..small_cfg()
        },
        3,
    );
    let (a, b, c) = (nh[0], nh[1], nh[2]);
    let base = 0x3000_0000u32;
    for i in 0..512u32 {
        w.add4(base | i << 8, 24, if i % 2 == 0 { a } else { c })
            .unwrap();
    }
    let mut keys = Vec::new();
    for i in 0..512u32 {
        keys.push(base | i << 8 | 0x15); // inside the /28 at .16
        keys.push(base | i << 8 | 0x85); // never covered by a /28
    }
    let allowed = move |k: usize, x: NextHopId| {
        let own = if (k / 2) & 1 == 0 { a } else { c };
        x == own || (k & 1 == 0 && x == b)
    };
    race(&mut w, &r, keys, allowed, |w| {
        for round in 0..40u32 {
            // Only 256 groups: deletes must recycle them through QSBR for adds to succeed.
            let range = (round % 2) * 256..(round % 2) * 256 + 200;
            for i in range.clone() {
                w.add4(base | i << 8 | 0x10, 28, b).unwrap();
            }
            for i in range {
                assert!(w.del4(base | i << 8 | 0x10, 28).unwrap());
            }
        }
    });
    assert_eq!(w.tbl8_in_use().0, 0);
}

// ---------------------------------------------------------------- QSBR

#[test]
fn replaced_next_hop_waits_for_readers() {
    let (mut w, readers, nh) = with_next_hops(small_cfg(), 1);
    let id = nh[0];
    let mut r = readers.register();
    let held = r.next_hop(id).unwrap().clone();
    w.set_next_hop(id, adj(99)).unwrap();
    assert_eq!(r.next_hop(id), Some(&adj(99)));
    w.reclaim();
    w.reclaim();
    assert_eq!(w.next_hops_freed(), 0, "freed while a reader may hold it");
    assert_eq!(held, adj(0));
    r.quiescent();
    w.reclaim();
    assert_eq!(w.next_hops_freed(), 1);

    // An offline reader does not block synchronize; an online one is waited for.
    let mut r2 = readers.register();
    w.set_next_hop(id, adj(5)).unwrap();
    let quiesced = Arc::new(AtomicUsize::new(0));
    let q = Arc::clone(&quiesced);
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        q.store(1, Ordering::SeqCst);
        r.quiescent();
        r
    });
    r2.offline_while(|| w.synchronize());
    assert_eq!(
        quiesced.load(Ordering::SeqCst),
        1,
        "synchronize returned before the online reader quiesced"
    );
    assert_eq!(w.next_hops_freed(), 2);
    drop(t.join().unwrap());
    drop(r2);
    // No reader registered: reclaim frees at once.
    w.set_next_hop(id, adj(6)).unwrap();
    w.reclaim();
    assert_eq!(w.next_hops_freed(), 3);
}

#[test]
fn readers_outlive_writer() {
    let (mut w, readers, nh) = with_next_hops(small_cfg(), 1);
    w.add4(0x0a00_0000, 8, nh[0]).unwrap();
    let r = readers.register();
    w.set_next_hop(nh[0], adj(3)).unwrap();
    drop(w);
    assert_eq!(r.lookup4(0x0a01_0203), nh[0]);
    assert_eq!(r.next_hop(nh[0]), Some(&adj(3)));
    // Registration still works, up to the configured number of readers.
    let more: Vec<FibReader> = (1..small_cfg().max_readers)
        .map(|_| readers.try_register().expect("a free slot"))
        .collect();
    assert!(readers.try_register().is_none(), "all slots are taken");
    drop(more);
    assert!(
        readers.try_register().is_some(),
        "slots are released on drop"
    );
}

// ---------------------------------------------------------------- errors

#[test]
fn errors_leave_fib_unchanged() {
    let (mut w, _r, nh) = with_next_hops(
        FibConfig {
            max_tbl8_v4: 2,
            max_tbl8_v6: 3,
            max_readers: 2,
        },
        3,
    );
    assert_eq!(
        w.add4(0, 33, nh[0]),
        Err(FibError::BadPrefixLength { len: 33, max: 32 })
    );
    assert_eq!(
        w.del4(0, 40),
        Err(FibError::BadPrefixLength { len: 40, max: 32 })
    );
    assert_eq!(
        w.add6(&[0; 16], 129, nh[0]),
        Err(FibError::BadPrefixLength { len: 129, max: 128 })
    );
    assert_eq!(
        w.del6(&[0; 16], 200),
        Err(FibError::BadPrefixLength { len: 200, max: 128 })
    );
    assert_eq!(
        w.add4(0x0a00_0000, 8, 77),
        Err(FibError::UnknownNextHop(77))
    );
    assert_eq!(
        w.add6(&[0x20; 16], 48, MISS),
        Err(FibError::UnknownNextHop(MISS))
    );
    assert_eq!(w.lookup4(0x0a00_0001), MISS);
    assert_eq!(w.get4(0x0a00_0000, 8), None);
    assert_eq!(w.memory().routes_v4 + w.memory().routes_v6, 0);

    // Next hops in use by a route or a group cannot be removed.
    w.add4(0x0a00_0000, 8, nh[0]).unwrap();
    assert_eq!(w.remove_next_hop(nh[0]), Err(FibError::NextHopInUse(nh[0])));
    let g = w
        .add_next_hop(NextHop::Ecmp(vec![nh[1], nh[2]].into()))
        .unwrap();
    assert_eq!(w.remove_next_hop(nh[1]), Err(FibError::NextHopInUse(nh[1])));
    assert_eq!(
        w.remove_next_hop(12345),
        Err(FibError::UnknownNextHop(12345))
    );
    assert_eq!(w.next_hop(nh[1]), Some(&adj(1)));

    // Bad groups.
    let bad: Vec<Box<[NextHopId]>> = vec![
        vec![].into(),
        vec![nh[1]; 65].into(),
        vec![nh[1], 999].into(),
        vec![nh[1], g].into(),
    ];
    for m in bad {
        assert_eq!(
            w.add_next_hop(NextHop::Ecmp(m.clone())),
            Err(FibError::BadEcmpGroup)
        );
        assert_eq!(
            w.set_next_hop(nh[0], NextHop::Ecmp(m)),
            Err(FibError::BadEcmpGroup)
        );
    }
    // A group naming itself, and a group member turning into a group.
    assert_eq!(
        w.set_next_hop(g, NextHop::Ecmp(vec![g].into())),
        Err(FibError::BadEcmpGroup)
    );
    assert_eq!(
        w.set_next_hop(nh[1], NextHop::Ecmp(vec![nh[0]].into())),
        Err(FibError::BadEcmpGroup)
    );
    assert_eq!(w.next_hop(nh[0]), Some(&adj(0)));
    assert_eq!(w.next_hop(nh[1]), Some(&adj(1)));
    assert_eq!(
        w.set_next_hop(MAX_NEXT_HOPS as u32, Drop_()),
        Err(FibError::NextHopTableFull(MAX_NEXT_HOPS))
    );

    // Removing the group releases its members.
    w.remove_next_hop(g).unwrap();
    w.remove_next_hop(nh[1]).unwrap();
    assert_eq!(w.next_hop(nh[1]), None);

    // tbl8 exhaustion (2 groups for v4, 3 for v6).
    w.add4(0x0b00_0080, 25, nh[0]).unwrap();
    w.add4(0x0c00_0080, 25, nh[0]).unwrap();
    assert_eq!(
        w.add4(0x0d00_0080, 25, nh[0]),
        Err(FibError::Tbl8Exhausted(2))
    );
    assert_eq!(w.get4(0x0d00_0080, 25), None);
    assert_eq!(w.lookup4(0x0d00_0081), MISS);
    assert_eq!(w.tbl8_in_use().0, 2);
    // A route inside an existing group needs no new group.
    w.add4(0x0b00_0000, 25, nh[2]).unwrap();
    let a: u128 = 0x2001_0db8_0000_0000_0000_0000_0000_0001;
    assert_eq!(
        w.add6(&a.to_be_bytes(), 128, nh[0]),
        Err(FibError::Tbl8Exhausted(3))
    );
    assert_eq!(w.tbl8_in_use().1, 0);
    assert_eq!(w.lookup6(&a.to_be_bytes()), MISS);
    w.add6(&a.to_be_bytes(), 48, nh[0]).unwrap();
    assert_eq!(w.tbl8_in_use().1, 3);
    // Deleting frees groups; after their grace period they can be used again.
    assert!(w.del4(0x0c00_0080, 25).unwrap());
    w.add4(0x0d00_0080, 25, nh[0]).unwrap();
    assert_eq!(w.lookup4(0x0d00_0081), nh[0]);
}

#[allow(non_snake_case)]
fn Drop_() -> NextHop {
    NextHop::Drop
}

// ---------------------------------------------------------------- ECMP

#[test]
fn ecmp_resolve_is_stable_and_spreads() {
    let (mut w, _r, nh) = with_next_hops(small_cfg(), 4);
    let g = w.add_next_hop(NextHop::Ecmp(nh.clone().into())).unwrap();
    w.add4(0x0a00_0000, 8, g).unwrap();
    assert_eq!(w.lookup4(0x0a00_0001), g);
    let mut rng = SmallRng::seed_from_u64(1);
    let mut hits = HashMap::new();
    for _ in 0..10_000 {
        let h: u32 = rng.gen();
        let m = w.resolve(g, h);
        assert_eq!(w.resolve(g, h), m);
        assert!(nh.contains(&m));
        *hits.entry(m).or_insert(0) += 1;
    }
    assert_eq!(hits.len(), 4);
    assert!(
        hits.values().all(|&n| (2000..=3000).contains(&n)),
        "{hits:?}"
    );
    assert_eq!(w.resolve(nh[0], 5), nh[0]);
    assert_eq!(w.resolve(4242, 5), 4242);
    // Ids are reused only after removal and a grace period.
    w.set_next_hop(g, NextHop::Local).unwrap();
    w.remove_next_hop(nh[3]).unwrap();
    w.synchronize();
    assert_eq!(w.add_next_hop(NextHop::Drop).unwrap(), nh[3]);
}

#[test]
fn handles_are_send_and_sync() {
    fn send<T: Send>() {}
    fn sync<T: Sync>() {}
    // A reader moves to its worker thread but is not shared (see the compile_fail
    // examples on `FibReader`); the spawner's handle is shared freely.
    send::<FibReader>();
    send::<FibReaders>();
    sync::<FibReaders>();
    send::<FibWriter>();
}
