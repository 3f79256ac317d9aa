//! IPv6 nodes: ip6-input (RFC 8200 validation, bounded extension-header walk) and
//! ip6-rewrite (hop limit, MTU — routers never fragment IPv6 in transit — and L2 rewrite),
//! and ip6-frag for the router's own packets (a tunnel's ESP), of which it is the source.

use fib::Adjacency;
use wire::{checksum, Ipv6Packet};

use crate::buffer::{
    l3, PacketMemory, Pkt, Vector, AUX_FEATURE_META, AUX_MTU, F_L2_MCAST, F_LOCAL_ORIGIN, F_TO_FRAG,
};
use crate::counters::Reason;
use crate::family::Family;
use crate::feature::ArcId;
use crate::graph::{mix32, Graph, Node, Output};
use crate::icmp;
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

/// IPv6, for the family-generic nodes. Routers never fragment IPv6: a packet too big for
/// the egress MTU is answered with a Packet Too Big.
pub(crate) struct V6;

impl Family for V6 {
    const V6: bool = true;
    const ETHERTYPE: u16 = wire::ethertype::IPV6;
    const LOOKUP: Node = Node::Ip6Lookup;
    const REWRITE: Node = Node::Ip6Rewrite;
    const ICMP_ERROR: Node = Node::Icmp6Error;
    const UNICAST_ARC: ArcId = ArcId::Ip6Unicast;
    const OUTPUT_ARC: ArcId = ArcId::Ip6Output;
    const NO_ROUTE: Reason = Reason::Ip6NoRoute;
    const BLACKHOLE: Reason = Reason::Ip6Blackhole;
    const TRUNCATED: Reason = Reason::Ip6Truncated;
    const TTL_EXPIRED: Reason = Reason::Ip6HopLimitExpired;
    const FORWARDED: Reason = Reason::Ip6Forwarded;
    const ICMP_SENT: Reason = Reason::Icmp6Sent;
    // ip6-input drops link-local sources (they are never forwarded).
    const LINK_LOCAL_SRC: Option<Reason> = None;
    const NO_ROUTE_ICMP: u32 = icmp::kind(icmp::V6_DST_UNREACH, icmp::V6_NO_ROUTE, 0);
    const TIME_EXCEEDED_ICMP: u32 = icmp::kind(icmp::V6_TIME_EXCEEDED, 0, 0);
    const HEADER_LEN: usize = 40;
    const TTL_AT: usize = 7;

    #[inline]
    fn lookup_bulk<M: PacketMemory>(g: &mut Graph, v: &Vector, mem: &M, list: &[u16]) {
        let n = list.len();
        for (k, &i) in list.iter().enumerate() {
            let p = &v.pkts[i as usize];
            let base = p.off as usize + p.l3 as usize;
            g.keys6[k] = mem
                .frame(p.buf)
                .get(base + 24..base + 40)
                .and_then(|s| <[u8; 16]>::try_from(s).ok())
                .unwrap_or([0; 16]);
        }
        g.fib.lookup6_bulk(&g.keys6[..n], &mut g.results[..n]);
    }

    #[inline]
    fn flow_hash<M: PacketMemory>(mem: &M, p: &Pkt) -> u32 {
        flow_hash(mem, p)
    }

    #[inline]
    fn total_len(ip: &[u8]) -> usize {
        40 + u16::from_be_bytes([ip[4], ip[5]]) as usize
    }

    #[inline]
    fn decrement_ttl(ip: &mut [u8]) {
        ip[7] -= 1;
    }

    fn too_big<const T: bool, const O: bool>(
        g: &mut Graph,
        v: &mut Vector,
        ip: &mut [u8],
        i: u16,
        p: Pkt,
        adj: &Adjacency,
        ttl: Option<u8>,
    ) {
        // The router's own packet (an encrypted one, rerouted): it is the source, so it
        // fragments (RFC 8200 §4.5), as Linux does its own.
        if ttl.is_none() {
            let mut p = p;
            p.tx_port = adj.port;
            p.aux = p.aux & AUX_FEATURE_META | u32::from(adj.mtu);
            v.pkts[i as usize] = p;
            g.trace::<T>(&p, Step::ToFrag { mtu: adj.mtu });
            if g.has_features::<O>(ArcId::Ip6Output, adj.port) {
                v.pkts[i as usize].flags |= F_TO_FRAG;
                g.enqueue(Node::Ip6Output, i);
            } else {
                g.enqueue(Node::Ip6Frag, i);
            }
            return;
        }
        // The quote shows the packet as received.
        if let Some(ttl) = ttl {
            ip[7] = ttl;
        }
        g.counters.add(Reason::Ip6TooBig, 1);
        g.trace::<T>(&p, Step::ToIcmp(Reason::Ip6TooBig));
        v.pkts[i as usize].aux = icmp::kind(icmp::V6_PACKET_TOO_BIG, 0, adj.mtu);
        g.enqueue(Node::Icmp6Error, i);
    }

    fn build_error<M: PacketMemory>(g: &mut Graph, mem: &mut M, p: &Pkt) -> Result<Pkt, Reason> {
        build6(g, mem, p)
    }
}

/// The ICMPv6 error in `p.aux`, built in place in front of `p` (which it quotes).
// Slow path, shared by the traced and untraced graph: kept out of line and cold so it
// does not shape register allocation of the hot per-packet loops.
#[cold]
#[inline(never)]
fn build6<M: PacketMemory>(g: &mut Graph, mem: &mut M, p: &Pkt) -> Result<Pkt, Reason> {
    let (ty, code, mtu) = icmp::unpack(p.aux);
    let (orig_src, quote_len) = {
        let ip = Ipv6Packet::new_checked(l3(mem, p)).map_err(|_| Reason::IcmpSuppressed)?;
        if p.flags & F_LOCAL_ORIGIN != 0 {
            return Err(Reason::IcmpSuppressed);
        }
        // RFC 4443 §2.4(e): never for an ICMPv6 error message.
        if let Some((58, l4, _)) = upper(&ip) {
            if l4
                .first()
                .is_some_and(|&t| wire::icmpv6::msg_type::is_error(t))
            {
                return Err(Reason::IcmpSuppressed);
            }
        }
        (
            ip.src_addr(),
            (40 + ip.payload_len() as usize).min(icmp::V6_MAX_ERROR - 48),
        )
    };
    let src = g
        .ifaces
        .port(p.rx_port)
        .and_then(|x| x.primary_ip6())
        .ok_or(Reason::IcmpNoSource)?;
    if !g.icmp_limit.has_token() {
        return Err(Reason::IcmpRateLimited);
    }
    if ty != icmp::V6_PACKET_TOO_BIG && !g.icmp_peers.allow(u128::from_be_bytes(orig_src), g.now_ns)
    {
        return Err(Reason::IcmpRateLimitedPeer);
    }
    g.icmp_limit.take();
    let orig = p.off as usize + p.l3 as usize;
    let ip_at = orig.checked_sub(48).ok_or(Reason::IcmpSuppressed)?;
    let eth_at = ip_at.checked_sub(ETH_HLEN).ok_or(Reason::IcmpSuppressed)?;
    let end = orig + quote_len;
    if end > mem.frame(p.buf).len() {
        return Err(Reason::IcmpSuppressed);
    }
    let frame = mem.frame_mut(p.buf);
    let pkt = &mut frame[ip_at..end];
    let plen = (8 + quote_len) as u16;
    // Version 6, traffic class 0, flow label 0.
    pkt[..4].copy_from_slice(&[0x60, 0, 0, 0]);
    {
        let mut ip = Ipv6Packet::new_unchecked(&mut pkt[..]);
        ip.set_payload_len(plen);
        ip.set_next_header(58);
        ip.set_hop_limit(64);
        ip.set_src_addr(src);
        ip.set_dst_addr(orig_src);
    }
    let icmp = &mut pkt[40..];
    icmp[0] = ty;
    icmp[1] = code;
    icmp[2..4].copy_from_slice(&[0, 0]);
    icmp[4..8].copy_from_slice(&(mtu as u32).to_be_bytes());
    let sum = checksum::pseudo_v6(&src, &orig_src, 58, plen as u32) + checksum::sum(icmp);
    let c = !checksum::fold(sum);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    Ok(Pkt {
        buf: p.buf,
        off: eth_at as u16,
        len: (ETH_HLEN + 48 + quote_len) as u16,
        rx_port: p.rx_port,
        tx_port: 0,
        l3: ETH_HLEN as u16,
        flags: F_LOCAL_ORIGIN,
        nh: 0,
        aux: 0,
    })
}

/// ip6-frag: split the router's own packets (no extension headers) into fragments of at
/// most `p.aux` bytes (the egress MTU), each with a fragment header (RFC 8200 §4.5): the
/// same identification, offsets in 8-byte units, M on all but the last.
pub(crate) fn fragment<const T: bool, M: PacketMemory>(
    g: &mut Graph,
    v: &mut Vector,
    mem: &mut M,
    out: &mut Output,
    list: &[u16],
) {
    for &i in list {
        let p = v.pkts[i as usize];
        match fragment_one(g, mem, out, &p, (p.aux & AUX_MTU) as usize) {
            None => g.drop_pkt::<T>(out, &p, Reason::Ip6FragFailed),
            Some((count, port)) => {
                g.trace::<T>(&p, Step::Fragmented { count, port });
                out.free.push(p.buf);
            }
        }
    }
}

// Slow path, kept out of line and cold (as ip4-frag's).
#[cold]
#[inline(never)]
fn fragment_one<M: PacketMemory>(
    g: &mut Graph,
    mem: &mut M,
    out: &mut Output,
    p: &Pkt,
    mtu: usize,
) -> Option<(u16, u16)> {
    let adj = match g.fib.next_hop(p.nh) {
        Some(fib::NextHop::Forward(a)) => *a,
        _ => return None,
    };
    let (next, total) = {
        let ip = l3(mem, p);
        let hdr = ip.get(..40)?;
        (hdr[6], 40 + u16::from_be_bytes([hdr[4], hdr[5]]) as usize)
    };
    // The router's own packets carry none: one with extension headers (its unfragmentable
    // part would need finding) is not fragmented.
    if is_ext(next) || total > l3(mem, p).len() {
        return None;
    }
    let chunk = mtu.checked_sub(48)? & !7;
    if chunk == 0 {
        return None;
    }
    g.frag_id6 = g.frag_id6.wrapping_add(1);
    let id = mix32(g.frag_id6);
    let shape = crate::ip::FragShape {
        ethertype: wire::ethertype::IPV6,
        payload: 40..total,
        first: (48, chunk),
        later: (48, chunk),
    };
    let (sent, tx_port) =
        crate::ip::emit_fragments(g, mem, out, p, &adj, shape, |hdr, src, piece| {
            hdr.get_mut(..40)?.copy_from_slice(src.get(..40)?);
            hdr[4..6].copy_from_slice(&((8 + piece.len) as u16).to_be_bytes());
            hdr[6] = 44;
            let om = (piece.offset as u16) | u16::from(!piece.last);
            hdr[40] = next;
            hdr[41] = 0;
            hdr[42..44].copy_from_slice(&om.to_be_bytes());
            hdr[44..48].copy_from_slice(&id.to_be_bytes());
            Some(())
        })?;
    g.counters.add(Reason::Ip6Fragments, sent);
    g.counters.add(Reason::Ip6Forwarded, 1);
    Some((sent as u16, tx_port))
}
