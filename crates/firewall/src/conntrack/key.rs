//! Flow keys: a packet's tuple as seen on the wire ([`Tuple`]), the direction-normalized key
//! the table stores ([`FlowKey`]), and the symmetric hash both the table and a dispatcher
//! use.
//!
//! **Normalization.** Of a packet's two endpoints `(source address, source port)` and
//! `(destination address, destination port)`, the smaller (addresses compared first, then
//! ports) goes first in the key. A packet and its reply therefore build the same key, and
//! one lookup finds the flow whichever way the packet goes; whether the endpoints were
//! swapped says which way it goes ([`FlowKey::from_tuple`]).
//!
//! **Symmetric hash.** [`FlowKey::hash`] hashes the normalized key, so
//! `hash(a→b) == hash(b→a)` by construction ([`Tuple::symmetric_hash`]): the table finds a
//! flow by either direction. Which worker owns a flow is decided before the table, by
//! [`crate::steer`] (a hash of the addresses alone, so that fragments follow their flow,
//! and NAT's replies by their port), with its own constants: the table takes its buckets
//! from its hash's bits, and a steering hash sharing them would leave each worker's table
//! using a fraction of its buckets.

use std::net::{Ipv4Addr, Ipv6Addr};

/// IP protocol numbers the tracker knows.
pub mod proto {
    /// ICMP (IPv4).
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
}

/// A packet's tuple as it is on the wire (not normalized).
///
/// Addresses are `u128`: an IPv4 address sits in the low 32 bits and [`Tuple::v6`] is
/// false. ICMP and ICMPv6 echo requests and replies carry their identifier in both ports;
/// protocols without ports carry zeros.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Tuple {
    /// Source address.
    pub src: u128,
    /// Destination address.
    pub dst: u128,
    /// Source port (ICMP echo: the identifier).
    pub sport: u16,
    /// Destination port (ICMP echo: the identifier).
    pub dport: u16,
    /// IP protocol (IPv6: the upper-layer protocol).
    pub proto: u8,
    /// IPv6 (else IPv4).
    pub v6: bool,
    /// Zone or VRF: flows of different zones never match each other.
    pub zone: u16,
}

impl Tuple {
    /// An IPv4 tuple in zone 0.
    pub fn v4(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, proto: u8) -> Tuple {
        Tuple {
            src: u32::from(src) as u128,
            dst: u32::from(dst) as u128,
            sport,
            dport,
            proto,
            v6: false,
            zone: 0,
        }
    }

    /// An IPv6 tuple in zone 0.
    pub fn v6(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, proto: u8) -> Tuple {
        Tuple {
            src: u128::from(src),
            dst: u128::from(dst),
            sport,
            dport,
            proto,
            v6: true,
            zone: 0,
        }
    }

    /// The same tuple in `zone`.
    pub fn in_zone(self, zone: u16) -> Tuple {
        Tuple { zone, ..self }
    }

    /// The reply's tuple: endpoints swapped.
    pub fn reversed(&self) -> Tuple {
        Tuple {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            ..*self
        }
    }

    /// The hash of the direction-normalized tuple: equal for a tuple and its reverse (the
    /// table's hash of the flow's key).
    pub fn symmetric_hash(&self, seed: u64) -> u64 {
        FlowKey::from_tuple(self).0.hash(seed)
    }
}

/// A flow's key as the table stores it: the tuple with the smaller endpoint first.
///
/// 40 bytes, aligned to 8 (addresses as two `u64` halves, not `u128`, so that the entry
/// is not padded to 16-byte alignment).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(C)]
pub struct FlowKey {
    /// The smaller endpoint's address (high half, low half).
    lo_addr: [u64; 2],
    /// The larger endpoint's address.
    hi_addr: [u64; 2],
    /// The smaller endpoint's port.
    lo_port: u16,
    /// The larger endpoint's port.
    hi_port: u16,
    /// IP protocol.
    proto: u8,
    /// 4 or 6.
    family: u8,
    /// Zone or VRF.
    zone: u16,
}

const fn halves(a: u128) -> [u64; 2] {
    [(a >> 64) as u64, a as u64]
}

const fn join(h: [u64; 2]) -> u128 {
    ((h[0] as u128) << 64) | h[1] as u128
}

#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let p = (a as u128).wrapping_mul(b as u128);
    (p as u64) ^ ((p >> 64) as u64)
}

// Odd constants of no structure (the digits of pi), as wyhash uses.
const K: [u64; 6] = [
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7344,
    0xa409_3822_299f_31d0,
    0x082e_fa98_ec4e_6c89,
    0x4528_21e6_38d0_1377,
    0xbe54_66cf_34e9_0c6d,
];

impl FlowKey {
    /// The normalized key of `t`, and whether the endpoints were swapped to build it
    /// (`t` goes from the larger endpoint to the smaller).
    #[inline]
    pub fn from_tuple(t: &Tuple) -> (FlowKey, bool) {
        let swap = (t.src, t.sport) > (t.dst, t.dport);
        let (lo, lp, hi, hp) = if swap {
            (t.dst, t.dport, t.src, t.sport)
        } else {
            (t.src, t.sport, t.dst, t.dport)
        };
        (
            FlowKey {
                lo_addr: halves(lo),
                hi_addr: halves(hi),
                lo_port: lp,
                hi_port: hp,
                proto: t.proto,
                family: if t.v6 { 6 } else { 4 },
                zone: t.zone,
            },
            swap,
        )
    }

    /// The tuple going from the smaller endpoint to the larger (`swapped` false), or back.
    pub fn tuple(&self, swapped: bool) -> Tuple {
        let t = Tuple {
            src: join(self.lo_addr),
            dst: join(self.hi_addr),
            sport: self.lo_port,
            dport: self.hi_port,
            proto: self.proto,
            v6: self.family == 6,
            zone: self.zone,
        };
        if swapped {
            t.reversed()
        } else {
            t
        }
    }

    /// IP protocol.
    pub fn proto(&self) -> u8 {
        self.proto
    }

    /// A 64-bit hash of the key under `seed` (folded 64×64→128-bit multiplies, wyhash's
    /// mixing). Symmetric in the packet's direction because the key is normalized.
    #[inline]
    pub fn hash(&self, seed: u64) -> u64 {
        let w4 = (self.lo_port as u64)
            | (self.hi_port as u64) << 16
            | (self.proto as u64) << 32
            | (self.family as u64) << 40
            | (self.zone as u64) << 48;
        let a = fold(self.lo_addr[0] ^ K[0] ^ seed, self.lo_addr[1] ^ K[1]);
        let b = fold(self.hi_addr[0] ^ K[2] ^ seed, self.hi_addr[1] ^ K[3]);
        let c = fold(w4 ^ K[4] ^ seed, a ^ K[5]);
        fold(b ^ c ^ K[1], seed ^ K[4])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_forty_bytes() {
        assert_eq!(std::mem::size_of::<FlowKey>(), 40);
    }

    #[test]
    fn both_directions_build_one_key() {
        let t = Tuple::v4(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            40000,
            443,
            proto::TCP,
        );
        let (k1, s1) = FlowKey::from_tuple(&t);
        let (k2, s2) = FlowKey::from_tuple(&t.reversed());
        assert_eq!(k1, k2);
        assert_ne!(s1, s2);
        assert_eq!(k1.tuple(s1), t);
        assert_eq!(k1.tuple(s2), t.reversed());
    }

    #[test]
    fn families_and_zones_differ() {
        let t4 = Tuple {
            src: 1,
            dst: 2,
            sport: 3,
            dport: 4,
            proto: proto::UDP,
            v6: false,
            zone: 0,
        };
        let t6 = Tuple { v6: true, ..t4 };
        assert_ne!(FlowKey::from_tuple(&t4).0, FlowKey::from_tuple(&t6).0);
        assert_ne!(
            FlowKey::from_tuple(&t4).0,
            FlowKey::from_tuple(&t4.in_zone(1)).0
        );
        assert_ne!(t4.symmetric_hash(7), t6.symmetric_hash(7));
    }

    fn tuple() -> impl proptest::strategy::Strategy<Value = Tuple> {
        use proptest::prelude::*;
        (
            any::<u128>(),
            any::<u128>(),
            any::<u16>(),
            any::<u16>(),
            any::<u8>(),
            any::<bool>(),
            0u16..4,
        )
            .prop_map(|(src, dst, sport, dport, proto, v6, zone)| {
                let (src, dst) = if v6 {
                    (src, dst)
                } else {
                    (src & 0xffff_ffff, dst & 0xffff_ffff)
                };
                Tuple {
                    src,
                    dst,
                    sport,
                    dport,
                    proto,
                    v6,
                    zone,
                }
            })
    }

    proptest::proptest! {
        #[test]
        fn hash_is_symmetric(t in tuple(), seed in proptest::num::u64::ANY) {
            proptest::prop_assert_eq!(t.symmetric_hash(seed), t.reversed().symmetric_hash(seed));
        }

        #[test]
        fn key_round_trips(t in tuple()) {
            let (k, swapped) = FlowKey::from_tuple(&t);
            proptest::prop_assert_eq!(k.tuple(swapped), t);
            let (k2, swapped2) = FlowKey::from_tuple(&t.reversed());
            proptest::prop_assert_eq!(k, k2);
            // A flow whose two endpoints are equal has one direction only.
            proptest::prop_assert_eq!(swapped == swapped2, t == t.reversed());
        }
    }
}
