//! IPv6 nodes: ip6-input (RFC 8200 validation, bounded extension-header walk) and
//! ip6-rewrite (hop limit, MTU — routers never fragment IPv6 — and L2 rewrite).

use fib::NextHop;
use wire::Ipv6Packet;

use crate::buffer::{PacketMemory, Pkt, Vector, F_CSUM_UNKNOWN, F_L2_MCAST, F_LOCAL_ORIGIN};
use crate::counters::Reason;
use crate::feature::ArcId;
use crate::graph::{mix32, Graph, Node, Output};
use crate::icmp;
use crate::ip4::{l3, l3_mut};
use crate::trace::Step;

const ETH_HLEN: usize = 14;

/// Next-header values that start an extension header (and so need the walk).
#[inline]
fn is_ext(nh: u8) -> bool {
    matches!(nh, 0 | 43 | 44 | 51 | 60 | 135 | 139 | 140)
}

#[inline]
fn is_unspecified_or_loopback(a: &[u8; 16]) -> bool {
    a[..15].iter().all(|&b| b == 0) && a[15] <= 1
}

/// The input node for one packet: validate, classify, hand unicast transit to the lookup.
/// ethernet-input calls it inline per packet (counters keep this node's name).
#[inline(always)]
pub(crate) fn input_one<const T: bool, M: PacketMemory>(
    g: &mut Graph,
    mem: &mut M,
    out: &mut Output,
    i: u16,
    p: Pkt,
) {
    let ip = match Ipv6Packet::new_checked(l3(mem, &p)) {
        Ok(ip) => ip,
        Err(e) => {
            let r = match e {
                wire::Error::BadVersion => Reason::Ip6BadVersion,
                wire::Error::Truncated => Reason::Ip6Truncated,
                _ => Reason::Ip6BadLength,
            };
            g.drop_pkt::<T>(out, &p, r);
            return;
        }
    };
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    // Multicast destinations carry ND, MLD, OSPFv3, DHCPv6 — all for the kernel; checked
    // before the source because DAD uses the unspecified source.
    if dst[0] == 0xff {
        g.punt::<T, M>(mem, out, &p, Reason::PuntMulticast);
        return;
    }
    if src[0] == 0xff || is_unspecified_or_loopback(&src) {
        g.drop_pkt::<T>(out, &p, Reason::Ip6MartianSrc);
        return;
    }
    if is_unspecified_or_loopback(&dst) {
        g.drop_pkt::<T>(out, &p, Reason::Ip6MartianDst);
        return;
    }
    if dst[0] == 0xfe && dst[1] & 0xc0 == 0x80 {
        g.punt::<T, M>(mem, out, &p, Reason::PuntLinkLocal);
        return;
    }
    if src[0] == 0xfe && src[1] & 0xc0 == 0x80 {
        g.drop_pkt::<T>(out, &p, Reason::Ip6LinkLocalSrc);
        return;
    }
    if g.ifaces
        .own
        .contains6(l3(mem, &p).get(8..24).unwrap_or(&[]))
    {
        g.drop_pkt::<T>(out, &p, Reason::Ip6OwnSrc);
        return;
    }
    // Extension headers are the end hosts' business (RFC 8200 §4): transit packets are
    // forwarded whatever their chain, Hop-by-Hop included (RFC 9098), as Linux forwards
    // them. Only the ECMP hash and ICMP errors look past them (bounded walks that give up
    // quietly). Hop-by-Hop for the router itself (MLD, router alert to a local address)
    // reaches the kernel as local or multicast traffic.
    if p.flags & F_L2_MCAST != 0 {
        g.punt::<T, M>(mem, out, &p, Reason::PuntL2Mcast);
        return;
    }
    g.trace::<T>(&p, Step::IpInput { v6: true });
    g.enqueue(Node::Ip6Lookup, i);
}

/// Upper-layer protocol and its bytes, past any extension headers (bounded walk).
pub(crate) fn upper<'a>(ip: &Ipv6Packet<&'a [u8]>) -> Option<(u8, &'a [u8], bool)> {
    let next = ip.next_header();
    let plen = ip.payload_len() as usize;
    let bytes: &'a [u8] = ip.clone().into_inner();
    let payload = bytes.get(40..40 + plen)?;
    if !is_ext(next) {
        return Some((next, payload, false));
    }
    let w = wire::walk_ext_headers(next, payload, wire::MAX_EXT_HEADERS).ok()?;
    let non_first_fragment = w.fragment.is_some_and(|f| f.offset_bytes != 0);
    Some((
        w.upper_protocol,
        payload.get(w.upper_offset..)?,
        non_first_fragment,
    ))
}

/// ECMP flow hash: addresses, flow label, upper protocol and ports.
pub(crate) fn flow_hash<M: PacketMemory>(mem: &M, p: &Pkt) -> u32 {
    let Ok(ip) = Ipv6Packet::new_checked(l3(mem, p)) else {
        return 0;
    };
    let fold = |a: [u8; 16]| {
        let w = u128::from_be_bytes(a);
        (w as u32)
            ^ ((w >> 32) as u32)
            ^ ((w >> 64) as u32).rotate_left(11)
            ^ ((w >> 96) as u32).rotate_left(23)
    };
    let mut h = mix32(fold(ip.src_addr())) ^ fold(ip.dst_addr()) ^ ip.flow_label();
    if let Some((proto, l4, nonfirst)) = upper(&ip) {
        h ^= (proto as u32) << 24;
        if !nonfirst {
            if let Some((s, d)) = wire::flow_ports(proto, l4) {
                h ^= (s as u32) << 16 | d as u32;
            }
        }
    }
    mix32(h)
}

/// ip6-rewrite: hop limit, MTU, L2 header; then port-tx or icmp6-error.
pub(crate) fn rewrite<const T: bool, const F: bool, M: PacketMemory>(
    g: &mut Graph,
    v: &mut Vector,
    mem: &mut M,
    out: &mut Output,
    list: &[u16],
) {
    for &i in list {
        let mut p = v.pkts[i as usize];
        let adj = match g.fib.next_hop(p.nh) {
            Some(NextHop::Forward(a)) => *a,
            _ => {
                g.drop_pkt::<T>(out, &p, Reason::Ip6NoRoute);
                continue;
            }
        };
        let local = p.flags & F_LOCAL_ORIGIN != 0;
        let ip = l3_mut(mem, &p);
        if ip.len() < 40 {
            g.drop_pkt::<T>(out, &p, Reason::Ip6Truncated);
            continue;
        }
        let hl = ip[7];
        if !local && hl <= 1 {
            g.counters.add(Reason::Ip6HopLimitExpired, 1);
            g.trace::<T>(&p, Step::ToIcmp(Reason::Ip6HopLimitExpired));
            v.pkts[i as usize].aux = icmp::kind(icmp::V6_TIME_EXCEEDED, 0, 0);
            g.enqueue(Node::Icmp6Error, i);
            continue;
        }
        let total = 40 + u16::from_be_bytes([ip[4], ip[5]]) as usize;
        if total > adj.mtu as usize {
            g.counters.add(Reason::Ip6TooBig, 1);
            g.trace::<T>(&p, Step::ToIcmp(Reason::Ip6TooBig));
            v.pkts[i as usize].aux = icmp::kind(icmp::V6_PACKET_TOO_BIG, 0, adj.mtu);
            g.enqueue(Node::Icmp6Error, i);
            continue;
        }
        if p.flags & F_CSUM_UNKNOWN != 0 && wire::offload::complete_if_partial(ip) {
            g.counters.add(Reason::CsumCompleted, 1);
        }
        if !local {
            ip[7] = hl - 1;
        }
        let (tx_port, tags) = g.egress(&adj);
        let hlen = ETH_HLEN + tags.map_or(0, |t| t.len());
        let l3_abs = p.off as usize + p.l3 as usize;
        let frame = mem.frame_mut(p.buf);
        let Some(eth) = l3_abs
            .checked_sub(hlen)
            .and_then(|s| frame.get_mut(s..l3_abs))
        else {
            g.drop_pkt::<T>(out, &p, Reason::EthRunt);
            continue;
        };
        crate::graph::write_eth(eth, &adj, tags, wire::ethertype::IPV6);
        p.off = (l3_abs - hlen) as u16;
        p.l3 = hlen as u16;
        p.len = (hlen + total) as u16;
        p.tx_port = tx_port;
        if tags.is_some() {
            g.subif_sent(adj.port, p.len as usize);
        }
        if !local {
            g.counters.add(Reason::Ip6Forwarded, 1);
        }
        if T {
            let new_hl = if local { hl } else { hl - 1 };
            g.trace::<T>(&p, crate::ip4::rewrite_step(true, hl, new_hl, &adj));
        }
        if g.has_features::<F>(ArcId::Ip6Output, adj.port) {
            v.pkts[i as usize] = p;
            g.enqueue(Node::Ip6Output, i);
            continue;
        }
        g.transmit::<T>(out, p);
    }
}
