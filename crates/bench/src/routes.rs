//! Synthetic route sets with an Internet-like shape, and lookup keys drawn from them.
//!
//! There is no real Internet table in any registry we can reach, so benchmarks use
//! generated tables whose prefix-length mix follows the public BGP table: IPv4 is mostly
//! /24 with a shoulder at /22–/23 and a tail of /16–/21; IPv6 is clustered under
//! allocations (/29–/32) with many /48 more-specifics, which is what makes real IPv6 tables
//! compressible by multibit tries.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rustc_hash::FxHashSet;

/// IPv4 prefix-length distribution in percent (sums to 100).
const V4_MIX: &[(u8, u32)] = &[
    (24, 60),
    (23, 11),
    (22, 13),
    (21, 4),
    (20, 4),
    (19, 3),
    (18, 1),
    (17, 1),
    (16, 2),
    (25, 1),
];

/// IPv6 more-specific length distribution in percent under one allocation.
const V6_MIX: &[(u8, u32)] = &[
    (48, 55),
    (44, 12),
    (40, 12),
    (36, 6),
    (46, 5),
    (47, 5),
    (56, 2),
    (64, 3),
];

fn pick_len(rng: &mut SmallRng, mix: &[(u8, u32)]) -> u8 {
    let total: u32 = mix.iter().map(|m| m.1).sum();
    let mut r = rng.gen_range(0..total);
    for &(len, w) in mix {
        if r < w {
            return len;
        }
        r -= w;
    }
    mix[0].0
}

fn mask4(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - len as u32)
    }
}

fn mask6(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - len as u32)
    }
}

/// The documentation ranges (RFC 5737: 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24), as
/// the top 24 bits. No Internet table carries them, and the lab numbers its links from them:
/// a generated route equal to or inside one would shadow a lab link (found by a 6M-route
/// `bench bgp-scale`, where 198.51.100.0/24 stayed out of the FIB behind the connected route).
const DOC_NETS_V4: [u32; 3] = [0xc0_0002, 0xc6_3364, 0xcb_0071];

/// Whether `addr/len` is one of [`DOC_NETS_V4`] or inside one.
fn in_doc_net_v4(addr: u32, len: u8) -> bool {
    len >= 24 && DOC_NETS_V4.contains(&(addr >> 8))
}

/// `n` unique IPv4 prefixes (host byte order, host bits zero) in unicast space
/// 1.0.0.0–223.255.255.255 excluding 127/8, 169.254/16 and any prefix equal to or inside
/// the documentation ranges ([`DOC_NETS_V4`]).
pub fn gen_v4(n: usize, seed: u64) -> Vec<(u32, u8)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut seen: FxHashSet<(u32, u8)> = FxHashSet::default();
    seen.reserve(n);
    let mut out = Vec::with_capacity(n);
    // Bounded: the unicast /24 space holds 14.5M prefixes, far above any n we are asked for;
    // the attempt cap turns an impossible request into a short result instead of a hang.
    let mut attempts = 0usize;
    while out.len() < n && attempts < n.saturating_mul(20) + 1000 {
        attempts += 1;
        let len = pick_len(&mut rng, V4_MIX);
        let first = loop {
            let f: u32 = rng.gen_range(1..224);
            if f != 127 {
                break f;
            }
        };
        let addr = (first << 24 | rng.gen_range(0..1u32 << 24)) & mask4(len);
        // 169.254/16 is link-local: never in a routing table, and a router never forwards it.
        if addr >> 16 == 0xa9fe || in_doc_net_v4(addr, len) {
            continue;
        }
        if seen.insert((addr, len)) {
            out.push((addr, len));
        }
    }
    out
}

/// `n` unique IPv6 prefixes under 2000::/3: allocations (/29–/32), each with a cluster of
/// more-specifics taken from a few /40 blocks, as ISPs assign customer prefixes.
pub fn gen_v6(n: usize, seed: u64) -> Vec<([u8; 16], u8)> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x6666);
    let allocations = (n / 25).max(1);
    let mut allocs: Vec<(u128, u8)> = Vec::with_capacity(allocations);
    let mut seen: FxHashSet<(u128, u8)> = FxHashSet::default();
    seen.reserve(n);
    let mut out = Vec::with_capacity(n);
    let mut attempts = 0usize;
    while allocs.len() < allocations && attempts < allocations * 20 + 1000 {
        attempts += 1;
        let len = if rng.gen_ratio(1, 5) { 29 } else { 32 };
        let a = ((0x2u128 << 124) | ((rng.gen::<u32>() as u128 & 0x1fff_ffff) << 96)) & mask6(len);
        // 2001:db8::/32 is for documentation (RFC 3849), and the lab's IPv6 range.
        let m = u32::MAX << (32 - u32::from(len));
        if (a >> 96) as u32 & m == 0x2001_0db8 & m {
            continue;
        }
        if seen.insert((a, len)) {
            allocs.push((a, len));
            if out.len() < n {
                out.push((a.to_be_bytes(), len));
            }
        }
    }
    attempts = 0;
    while out.len() < n && attempts < n.saturating_mul(20) + 1000 {
        attempts += 1;
        let (base, alen) = allocs[rng.gen_range(0..allocs.len())];
        let len = pick_len(&mut rng, V6_MIX);
        // One of four /40 blocks per allocation, chosen from the allocation's own bits so
        // every more-specific of an allocation lands in the same few blocks.
        let block = ((base >> 96) as u32)
            .wrapping_mul(2654435761)
            .rotate_left(rng.gen_range(0..4) * 8)
            & 0xff;
        let sub_bits = 40 - alen as u32; // bits between the allocation and the /40 block
        let block40 = base | (((block as u128) & ((1u128 << sub_bits) - 1)) << 88);
        let host: u128 = (rng.gen::<u64>() as u128) << 24; // bits 40..104 random
        let addr = (block40 | (host & !mask6(40))) & mask6(len);
        if seen.insert((addr, len)) {
            out.push((addr.to_be_bytes(), len));
        }
    }
    out
}

/// `n` random addresses, each inside a randomly chosen route of `routes`.
pub fn keys_v4(routes: &[(u32, u8)], n: usize, seed: u64) -> Vec<u32> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x4444);
    if routes.is_empty() {
        return (0..n).map(|_| rng.gen()).collect();
    }
    (0..n)
        .map(|_| {
            let (p, len) = routes[rng.gen_range(0..routes.len())];
            p | (rng.gen::<u32>() & !mask4(len))
        })
        .collect()
}

/// `n` random IPv6 addresses, each inside a randomly chosen route of `routes`.
pub fn keys_v6(routes: &[([u8; 16], u8)], n: usize, seed: u64) -> Vec<[u8; 16]> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x4646);
    if routes.is_empty() {
        return (0..n).map(|_| rng.gen::<u128>().to_be_bytes()).collect();
    }
    (0..n)
        .map(|_| {
            let (p, len) = routes[rng.gen_range(0..routes.len())];
            (u128::from_be_bytes(p) | (rng.gen::<u128>() & !mask6(len))).to_be_bytes()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v4_unique_masked_and_mostly_24() {
        let r = gen_v4(20_000, 1);
        assert_eq!(r.len(), 20_000);
        let set: FxHashSet<_> = r.iter().copied().collect();
        assert_eq!(set.len(), r.len());
        for &(p, l) in &r {
            assert_eq!(p & !mask4(l), 0, "host bits set in {p:#x}/{l}");
            assert!((1..224).contains(&(p >> 24)) && p >> 24 != 127 && p >> 16 != 0xa9fe);
        }
        let n24 = r.iter().filter(|x| x.1 == 24).count();
        assert!(n24 > 10_000 && n24 < 14_000, "{n24} /24s");
    }

    #[test]
    fn no_route_equal_to_or_inside_a_documentation_range() {
        assert!(in_doc_net_v4(0xc633_6400, 24)); // 198.51.100.0/24
        assert!(in_doc_net_v4(0xc000_0280, 25)); // 192.0.2.128/25
        assert!(in_doc_net_v4(0xcb00_71ff, 32)); // 203.0.113.255/32
        assert!(!in_doc_net_v4(0xc633_0000, 16)); // 198.51.0.0/16 covers: harmless
        assert!(!in_doc_net_v4(0xc633_6500, 24)); // 198.51.101.0/24
        let r = gen_v4(200_000, 1);
        assert!(r.iter().all(|&(p, l)| !in_doc_net_v4(p, l)));
        let doc6 = 0x2001_0db8u128 << 96;
        for &(p, l) in &gen_v6(50_000, 1) {
            let v = u128::from_be_bytes(p);
            let m = mask6(l.min(32));
            assert_ne!(v & m, doc6 & m, "{v:#x}/{l}");
        }
    }

    #[test]
    fn v6_unique_clustered() {
        let r = gen_v6(10_000, 2);
        assert_eq!(r.len(), 10_000);
        let set: FxHashSet<_> = r.iter().copied().collect();
        assert_eq!(set.len(), r.len());
        for &(p, l) in &r {
            let v = u128::from_be_bytes(p);
            assert_eq!(v & !mask6(l), 0);
            assert_eq!(v >> 125, 1, "not in 2000::/3");
        }
        // Clustering: far fewer distinct /40s than /48s.
        let blocks: FxHashSet<u128> = r
            .iter()
            .map(|(p, _)| u128::from_be_bytes(*p) >> 88)
            .collect();
        assert!(blocks.len() < r.len() / 2, "{} blocks", blocks.len());
    }

    #[test]
    fn keys_fall_inside_routes() {
        let r = gen_v4(100, 3);
        for k in keys_v4(&r, 1000, 4) {
            assert!(r.iter().any(|&(p, l)| k & mask4(l) == p));
        }
        let r6 = gen_v6(100, 3);
        for k in keys_v6(&r6, 1000, 4) {
            let k = u128::from_be_bytes(k);
            assert!(r6
                .iter()
                .any(|&(p, l)| k & mask6(l) == u128::from_be_bytes(p)));
        }
    }
}
