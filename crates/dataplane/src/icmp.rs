//! ICMP and ICMPv6 error generation (RFC 1812 §4.3.2, RFC 4443 §2.4), rate limited.
//!
//! The error is built in place: the new IP and ICMP headers are written into the headroom
//! in front of the offending packet, which becomes the quote without being copied.

use crate::buffer::{PacketMemory, Vector};
use crate::family::Family;
use crate::graph::{Graph, Output};
use crate::trace::{Step, F_TRACED};

/// ICMPv4 destination unreachable.
pub const V4_DST_UNREACH: u8 = 3;
/// Code: network unreachable (no route).
pub const V4_NET_UNREACH: u8 = 0;
/// Code: fragmentation needed and DF set.
pub const V4_FRAG_NEEDED: u8 = 4;
/// ICMPv4 time exceeded.
pub const V4_TIME_EXCEEDED: u8 = 11;
/// ICMPv4 parameter problem (the `mtu` argument of [`kind`] carries the pointer).
pub const V4_PARAM_PROBLEM: u8 = 12;
/// ICMPv6 destination unreachable.
pub const V6_DST_UNREACH: u8 = 1;
/// Code: no route to destination.
pub const V6_NO_ROUTE: u8 = 0;
/// ICMPv6 packet too big.
pub const V6_PACKET_TOO_BIG: u8 = 2;
/// ICMPv6 time exceeded.
pub const V6_TIME_EXCEEDED: u8 = 3;

/// RFC 1812 §4.3.2.3: the error, quote included, fits in 576 bytes.
pub(crate) const V4_MAX_ERROR: usize = 576;
/// RFC 4443 §2.4(c): the error fits in the IPv6 minimum MTU.
pub(crate) const V6_MAX_ERROR: usize = 1280;

/// Pack an error kind into `Pkt::aux`.
#[inline]
pub const fn kind(ty: u8, code: u8, mtu: u16) -> u32 {
    (ty as u32) << 24 | (code as u32) << 16 | mtu as u32
}

pub(crate) fn unpack(aux: u32) -> (u8, u8, u16) {
    ((aux >> 24) as u8, (aux >> 16) as u8, aux as u16)
}

/// icmp4-error / icmp6-error: replace each packet by the ICMP error in its `aux` (built in
/// place by the family), routed back to its source through the lookup. Packets the router
/// generates do not pass the unicast feature arcs (`Graph::local_lookup` says some are on
/// the lookup's list).
pub(crate) fn error<const T: bool, F: Family, M: PacketMemory>(
    g: &mut Graph,
    v: &mut Vector,
    mem: &mut M,
    out: &mut Output,
    list: &[u16],
) {
    for &i in list {
        let p = v.pkts[i as usize];
        match F::build_error(g, mem, &p) {
            Ok(mut np) => {
                g.counters.add(F::ICMP_SENT, 1);
                if T {
                    // The error keeps the packet's buffer, and its trace record.
                    np.flags |= p.flags & F_TRACED;
                    let (ty, code, _) = unpack(p.aux);
                    g.trace::<T>(
                        &np,
                        Step::IcmpError {
                            v6: F::V6,
                            ty,
                            code,
                        },
                    );
                }
                v.pkts[i as usize] = np;
                g.local_lookup = true;
                g.enqueue(F::LOOKUP, i);
            }
            Err(r) => g.drop_pkt::<T>(out, &p, r),
        }
    }
}

#[cfg(test)]
mod kind_tests {
    #[test]
    fn features_pack_error_kinds_as_the_icmp_node_reads_them() {
        for (ty, code) in [(3u8, 13u8), (1, 1), (255, 255)] {
            assert_eq!(
                crate::feature::icmp_kind(ty, code),
                super::kind(ty, code, 0)
            );
        }
    }
}
