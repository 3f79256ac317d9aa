//! Generated rule sets and traffic for tests and benchmarks (feature `gen`): ACL-like IPv4
//! rules and the 5-tuples that exercise them.

use std::net::Ipv4Addr;
use std::ops::RangeInclusive;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::classify::{Match, Rule, DIMS};

/// `n` rules in the shape of real ACLs: prefixes of mixed lengths over a few networks,
/// well-known and ranged ports, a handful of protocols, some wildcards.
pub fn acl_rules(n: usize, seed: u64) -> Vec<Match<Ipv4Addr>> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let nets = [
        0x0a00_0000u32,
        0xc0a8_0000,
        0xac10_0000,
        0xc633_6400,
        0x6440_0000,
    ];
    let prefix = |rng: &mut SmallRng| -> Option<(Ipv4Addr, u8)> {
        if rng.gen_bool(0.15) {
            return None;
        }
        let len = [8u8, 16, 20, 24, 24, 24, 28, 32, 32][rng.gen_range(0..9)];
        let base = nets[rng.gen_range(0..nets.len())] | (rng.gen::<u32>() & 0x00ff_ffff);
        let mask = u32::MAX << (32 - len);
        Some((Ipv4Addr::from(base & mask), len))
    };
    let port = |rng: &mut SmallRng| -> RangeInclusive<u16> {
        match rng.gen_range(0..6) {
            0 | 1 => 0..=65535,
            2 => 1024..=65535,
            3 => {
                let p = [22u16, 53, 80, 123, 443, 8080][rng.gen_range(0..6)];
                p..=p
            }
            4 => {
                let a = rng.gen_range(0..60000u16);
                a..=a + rng.gen_range(0..5000)
            }
            _ => {
                let p = rng.gen();
                p..=p
            }
        }
    };
    (0..n)
        .map(|_| Match {
            src: prefix(&mut rng),
            dst: prefix(&mut rng),
            sport: if rng.gen_bool(0.8) {
                0..=65535
            } else {
                port(&mut rng)
            },
            dport: port(&mut rng),
            proto: [None, Some(6), Some(6), Some(17), Some(1)][rng.gen_range(0..5)],
        })
        .collect()
}

/// `n` keys: three in four inside a random rule's box or just past its edge, the rest
/// random.
pub fn traces(rules: &[Rule<u32>], n: usize, seed: u64) -> Vec<[u32; DIMS]> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let max = [u32::MAX, u32::MAX, 65535, 65535, 255];
    (0..n)
        .map(|i| {
            let mut k = [0u32; DIMS];
            if rules.is_empty() || i % 4 == 3 {
                for (v, m) in k.iter_mut().zip(max) {
                    *v = rng.gen_range(0..=m);
                }
                return k;
            }
            let r = &rules[rng.gen_range(0..rules.len())];
            for (d, v) in k.iter_mut().enumerate() {
                *v = match rng.gen_range(0..4) {
                    0 => r.lo[d],
                    1 => r.hi[d],
                    2 => r.hi[d].saturating_add(1),
                    _ => rng.gen_range(r.lo[d]..=r.hi[d]),
                }
                .min(max[d]);
            }
            k
        })
        .collect()
}
