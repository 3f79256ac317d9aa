//! IPv4 nodes: ip4-input (RFC 1812 §5.2.2 validation), ip4-rewrite (TTL, MTU, L2) and
//! ip4-frag (RFC 791 fragmentation).

use fib::{Adjacency, NextHop};
use wire::{checksum, Ipv4Packet};

use crate::buffer::{
    l3, PacketMemory, Pkt, Vector, AUX_FEATURE_META, AUX_MTU, F_L2_MCAST, F_LINK_LOCAL_SRC,
    F_LOCAL_ORIGIN, F_TO_FRAG,
};
use crate::counters::Reason;
use crate::family::Family;
use crate::feature::ArcId;
use crate::graph::{mix32, Graph, Node, Output};
use crate::icmp;
use crate::interfaces::PuntPath;
use crate::trace::Step;

const ETH_HLEN: usize = 14;

/// First octets of destinations that need a closer look: 0/8, 127/8, 169/8 (for
/// 169.254/16), multicast 224/4 and 240/4 (incl. broadcast).
const SPECIAL_DST: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = (i == 0 || i == 127 || i == 169 || i >= 224) as u8;
        i += 1;
    }
    t
};
/// First octets of sources that are never valid, or never forwarded (169 for 169.254/16).
const SPECIAL_SRC: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = (i == 0 || i == 127 || i == 169 || i >= 224) as u8;
        i += 1;
    }
    t
};

/// True for 0.0.0.0/8, 127/8, multicast and limited broadcast — never valid sources.
#[inline]
fn martian_src(a: u32) -> bool {
    let b = a >> 24;
    b == 0 || b == 127 || b >= 224
}

/// The input node for one packet: validate, classify, hand unicast transit to the lookup.
/// ethernet-input calls it inline per packet (counters keep this node's name).
#[inline(always)]
pub(crate) fn input_one<const T: bool, M: PacketMemory>(
    g: &mut Graph,
    v: &mut Vector,
    mem: &mut M,
    out: &mut Output,
    i: u16,
    p: Pkt,
) {
    let bytes = l3(mem, &p);
    let ip = match Ipv4Packet::new_checked(bytes) {
        Ok(ip) => ip,
        Err(e) => {
            let r = match e {
                wire::Error::BadVersion => Reason::Ip4BadVersion,
                wire::Error::BadHeaderLen => Reason::Ip4BadIhl,
                wire::Error::BadTotalLen => Reason::Ip4BadLength,
                _ => Reason::Ip4Truncated,
            };
            g.drop_pkt::<T>(out, &p, r);
            return;
        }
    };
    if !ip.verify_checksum() {
        g.drop_pkt::<T>(out, &p, Reason::Ip4BadChecksum);
        return;
    }
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    // One table load per address settles the common case; only unusual first octets
    // take the detailed classification.
    if SPECIAL_DST[(dst >> 24) as usize] | SPECIAL_SRC[(src >> 24) as usize] != 0 {
        // Multicast and broadcast destinations are control traffic (OSPF, VRRP,
        // DHCP...): checked before the source, since DHCP clients send from 0.0.0.0.
        if dst >> 28 == 0xe || dst == u32::MAX {
            g.punt::<T, M>(mem, out, &p, Reason::PuntMulticast);
            return;
        }
        if martian_src(src) {
            g.drop_pkt::<T>(out, &p, Reason::Ip4MartianSrc);
            return;
        }
        let db = dst >> 24;
        if db == 0 || db == 127 || db >= 240 {
            g.drop_pkt::<T>(out, &p, Reason::Ip4MartianDst);
            return;
        }
        if dst >> 16 == 0xa9fe {
            g.punt::<T, M>(mem, out, &p, Reason::PuntLinkLocal);
            return;
        }
        // RFC 3927 §7: a link-local source may talk to the router, never through it.
        if src >> 16 == 0xa9fe {
            v.pkts[i as usize].flags |= F_LINK_LOCAL_SRC;
        }
    }
    // RFC 1812 §5.3.7: our own address as a source, from outside, is spoofed. A filter
    // load answers nearly every packet (about 10 instructions, measured with callgrind).
    if g.ifaces.own.contains4(src) {
        g.drop_pkt::<T>(out, &p, Reason::Ip4OwnSrc);
        return;
    }
    if ip.header_len() > 20 {
        match check_options(ip.options()) {
            // Record Route and Timestamp are forwarded unchanged, Router Alert in transit
            // forwarded (RFC 6398 §3: a router that does not process it forwards it).
            Ok(o) if !o.source_route => {}
            Ok(_) => {
                g.drop_pkt::<T>(out, &p, Reason::Ip4SourceRoute);
                return;
            }
            // The kernel saw the frame too (AF_PACKET) and answers it itself.
            Err(_)
                if g.ifaces.port(p.rx_port).map(|x| x.punt_path) == Some(PuntPath::KernelSawIt) =>
            {
                g.drop_pkt::<T>(out, &p, Reason::Ip4BadOptions);
                return;
            }
            Err(k) => {
                // RFC 1812 §5.2.5 / §4.3.2.2: parameter problem pointing at the bad octet.
                g.counters.add(Reason::Ip4BadOptions, 1);
                g.trace::<T>(&p, Step::ToIcmp(Reason::Ip4BadOptions));
                v.pkts[i as usize].aux =
                    icmp::kind(icmp::V4_PARAM_PROBLEM, 0, (20 + k).min(59) as u16);
                g.enqueue(Node::Icmp4Error, i);
                return;
            }
        }
    }
    // RFC 1812 §5.3.4: a packet sent as link-layer broadcast is not forwarded.
    if p.flags & F_L2_MCAST != 0 {
        g.punt::<T, M>(mem, out, &p, Reason::PuntL2Mcast);
        return;
    }
    v.pkts[i as usize].nh = dst;
    g.trace::<T>(&p, Step::IpInput { v6: false });
    g.enqueue(Node::Ip4Lookup, i);
}

/// The option check, out of line: options are rare, and inlined into the input loop the
/// walk costs every packet registers (measured with callgrind).
#[cold]
#[inline(never)]
fn check_options(opts: &[u8]) -> Result<wire::OptionSummary, usize> {
    wire::check_options(opts)
}

/// ECMP flow hash over the 5-tuple (ports only for unfragmented TCP/UDP/SCTP).
pub(crate) fn flow_hash<M: PacketMemory>(mem: &M, p: &Pkt) -> u32 {
    let b = l3(mem, p);
    let Ok(ip) = Ipv4Packet::new_checked(b) else {
        return 0;
    };
    let mut h =
        mix32(ip.src_addr()) ^ ip.dst_addr().rotate_left(7) ^ ((ip.protocol() as u32) << 24);
    if !ip.more_frags() && ip.frag_offset() == 0 {
        if let Some((s, d)) = wire::flow_ports(ip.protocol(), ip.payload()) {
            h ^= (s as u32) << 16 | d as u32;
        }
    }
    mix32(h)
}

/// IPv4, for the family-generic nodes.
pub(crate) struct V4;

impl Family for V4 {
    const V6: bool = false;
    const ETHERTYPE: u16 = wire::ethertype::IPV4;
    const LOOKUP: Node = Node::Ip4Lookup;
    const REWRITE: Node = Node::Ip4Rewrite;
    const ICMP_ERROR: Node = Node::Icmp4Error;
    const UNICAST_ARC: ArcId = ArcId::Ip4Unicast;
    const OUTPUT_ARC: ArcId = ArcId::Ip4Output;
    const NO_ROUTE: Reason = Reason::Ip4NoRoute;
    const BLACKHOLE: Reason = Reason::Ip4Blackhole;
    const TRUNCATED: Reason = Reason::Ip4Truncated;
    const TTL_EXPIRED: Reason = Reason::Ip4TtlExpired;
    const FORWARDED: Reason = Reason::Ip4Forwarded;
    const ICMP_SENT: Reason = Reason::Icmp4Sent;
    const LINK_LOCAL_SRC: Option<Reason> = Some(Reason::Ip4LinkLocalSrc);
    const NO_ROUTE_ICMP: u32 = icmp::kind(icmp::V4_DST_UNREACH, icmp::V4_NET_UNREACH, 0);
    const TIME_EXCEEDED_ICMP: u32 = icmp::kind(icmp::V4_TIME_EXCEEDED, 0, 0);
    const HEADER_LEN: usize = 20;
    const TTL_AT: usize = 8;

    #[inline]
    fn lookup_bulk<M: PacketMemory>(g: &mut Graph, v: &Vector, _mem: &M, list: &[u16]) {
        let n = list.len();
        // ip4-input (and icmp4-error) left the destination address in `nh`.
        for (k, &i) in list.iter().enumerate() {
            g.keys4[k] = v.pkts[i as usize].nh;
        }
        g.fib.lookup4_bulk(&g.keys4[..n], &mut g.results[..n]);
    }

    #[inline]
    fn flow_hash<M: PacketMemory>(mem: &M, p: &Pkt) -> u32 {
        flow_hash(mem, p)
    }

    #[inline]
    fn total_len(ip: &[u8]) -> usize {
        u16::from_be_bytes([ip[2], ip[3]]) as usize
    }

    #[inline]
    fn decrement_ttl(ip: &mut [u8]) {
        Ipv4Packet::new_unchecked(ip).decrement_ttl();
    }

    fn too_big<const T: bool, const O: bool>(
        g: &mut Graph,
        v: &mut Vector,
        ip: &mut [u8],
        i: u16,
        mut p: Pkt,
        adj: &Adjacency,
        ttl: Option<u8>,
    ) {
        if ip[6] & 0x40 != 0 {
            // DF: undo the decrement, the quote must show the packet as received.
            if let Some(ttl) = ttl {
                restore_ttl(ip, ttl);
            }
            g.counters.add(Reason::Ip4FragNeeded, 1);
            g.trace::<T>(&p, Step::ToIcmp(Reason::Ip4FragNeeded));
            v.pkts[i as usize].aux =
                icmp::kind(icmp::V4_DST_UNREACH, icmp::V4_FRAG_NEEDED, adj.mtu);
            g.enqueue(Node::Icmp4Error, i);
        } else {
            p.tx_port = adj.port;
            p.aux = p.aux & AUX_FEATURE_META | u32::from(adj.mtu);
            v.pkts[i as usize] = p;
            g.trace::<T>(&p, Step::ToFrag { mtu: adj.mtu });
            if g.has_features::<O>(ArcId::Ip4Output, adj.port) {
                v.pkts[i as usize].flags |= F_TO_FRAG;
                g.enqueue(Node::Ip4Output, i);
            } else {
                g.enqueue(Node::Ip4Frag, i);
            }
        }
    }

    fn build_error<M: PacketMemory>(g: &mut Graph, mem: &mut M, p: &Pkt) -> Result<Pkt, Reason> {
        build4(g, mem, p)
    }
}

fn restore_ttl(ip: &mut [u8], ttl: u8) {
    let old = u16::from_be_bytes([ip[8], ip[9]]);
    let new = u16::from_be_bytes([ttl, ip[9]]);
    let c = checksum::update16(u16::from_be_bytes([ip[10], ip[11]]), old, new);
    ip[8] = ttl;
    ip[10..12].copy_from_slice(&c.to_be_bytes());
}

/// ip4-frag: split a packet (already TTL-decremented, DF clear) into fragments of at most
/// `p.aux` bytes (the egress MTU). RFC 791: offsets in 8-byte units, MF on all but the last
/// (or on all if the original had MF), options without the copy bit only in the first.
pub(crate) fn fragment<const T: bool, M: PacketMemory>(
    g: &mut Graph,
    v: &mut Vector,
    mem: &mut M,
    out: &mut Output,
    list: &[u16],
) {
    for &i in list {
        let p = v.pkts[i as usize];
        let mtu = (p.aux & AUX_MTU) as usize;
        match fragment_one(g, mem, out, &p, mtu) {
            None => g.drop_pkt::<T>(out, &p, Reason::Ip4FragFailed),
            Some((count, port)) => {
                g.trace::<T>(&p, Step::Fragmented { count, port });
                out.free.push(p.buf);
            }
        }
    }
}

// Slow path, shared by the traced and untraced graph: kept out of line and cold so it
// does not shape register allocation of the hot per-packet loops.
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
        Some(NextHop::Forward(a)) => *a,
        _ => return None,
    };
    let (hlen, total, orig_off, orig_mf) = {
        let ip = Ipv4Packet::new_checked(l3(mem, p)).ok()?;
        (
            ip.header_len(),
            ip.total_len() as usize,
            ip.frag_offset() as usize,
            ip.more_frags(),
        )
    };
    // Header of later fragments: fixed part plus options with the copy bit.
    let mut later_hdr = [0u8; 60];
    let later_hlen = {
        let ip = l3(mem, p);
        later_hdr[..20].copy_from_slice(ip.get(..20)?);
        let mut n = 20;
        let opts = ip.get(20..hlen)?;
        let mut k = 0;
        while k < opts.len() {
            let t = opts[k];
            if t == 0 {
                break;
            }
            if t == 1 {
                k += 1;
                continue;
            }
            let l = (*opts.get(k + 1)? as usize).max(2);
            if t & 0x80 != 0 {
                later_hdr[n..n + l].copy_from_slice(opts.get(k..k + l)?);
                n += l;
            }
            k += l;
        }
        // Pad to a 4-byte multiple with EOL.
        (n + 3) & !3
    };
    let first_chunk = mtu.checked_sub(hlen)? & !7;
    let later_chunk = mtu.checked_sub(later_hlen)? & !7;
    let shape = crate::ip::FragShape {
        ethertype: wire::ethertype::IPV4,
        payload: hlen..total,
        first: (hlen, first_chunk),
        later: (later_hlen, later_chunk),
    };
    let (sent, tx_port) =
        crate::ip::emit_fragments(g, mem, out, p, &adj, shape, |hdr, src, piece| {
            if piece.first {
                hdr.copy_from_slice(src.get(..hlen)?);
            } else {
                hdr.copy_from_slice(later_hdr.get(..later_hlen)?);
            }
            let h = hdr.len();
            let mut ip = Ipv4Packet::new_unchecked(hdr);
            ip.set_header_len(h);
            ip.set_total_len((h + piece.len) as u16);
            ip.set_flags_frag(
                false,
                !piece.last || orig_mf,
                (orig_off + piece.offset) as u16,
            );
            ip.fill_checksum();
            Some(())
        })?;
    g.counters.add(Reason::Ip4Fragments, sent);
    g.counters.add(Reason::Ip4Forwarded, 1);
    Some((sent as u16, tx_port))
}

/// The ICMPv4 error in `p.aux`, built in place in front of `p` (which it quotes).
// Slow path, shared by the traced and untraced graph: kept out of line and cold so it
// does not shape register allocation of the hot per-packet loops.
#[cold]
#[inline(never)]
fn build4<M: PacketMemory>(g: &mut Graph, mem: &mut M, p: &Pkt) -> Result<Pkt, Reason> {
    let (ty, code, mtu) = icmp::unpack(p.aux);
    let (orig_src, quote_len) = {
        let ip = Ipv4Packet::new_checked(l3(mem, p)).map_err(|_| Reason::IcmpSuppressed)?;
        // No error about an error, nor about a non-initial fragment (RFC 1812 §4.3.2.7).
        if ip.frag_offset() != 0 {
            return Err(Reason::IcmpSuppressed);
        }
        if ip.protocol() == 1
            && ip
                .payload()
                .first()
                .is_some_and(|&t| wire::icmpv4::msg_type::is_error(t))
        {
            return Err(Reason::IcmpSuppressed);
        }
        if p.flags & F_LOCAL_ORIGIN != 0 {
            return Err(Reason::IcmpSuppressed);
        }
        (
            ip.src_addr(),
            (ip.total_len() as usize).min(icmp::V4_MAX_ERROR - 28),
        )
    };
    let src = g
        .ifaces
        .port(p.rx_port)
        .and_then(|x| x.primary_ip4())
        .ok_or(Reason::IcmpNoSource)?;
    // Path MTU discovery is not limited per destination (as Linux): a sender needs every
    // "fragmentation needed" to find the path's MTU.
    let pmtu = ty == icmp::V4_DST_UNREACH && code == icmp::V4_FRAG_NEEDED;
    // The global bucket is looked at first and charged last, so that an error the
    // destination's own limit refuses costs the others nothing (as Linux since 6.2).
    if !g.icmp_limit.has_token() {
        return Err(Reason::IcmpRateLimited);
    }
    if !pmtu
        && !g
            .icmp_peers
            .allow(crate::ratelimit::peer4(orig_src), g.now_ns)
    {
        return Err(Reason::IcmpRateLimitedPeer);
    }
    g.icmp_limit.take();
    let orig = p.off as usize + p.l3 as usize;
    let ip_at = orig.checked_sub(28).ok_or(Reason::IcmpSuppressed)?;
    let eth_at = ip_at.checked_sub(ETH_HLEN).ok_or(Reason::IcmpSuppressed)?;
    let end = orig + quote_len;
    if end > mem.frame(p.buf).len() {
        return Err(Reason::IcmpSuppressed);
    }
    g.ip_ident = g.ip_ident.wrapping_add(1);
    let ident = g.ip_ident;
    let frame = mem.frame_mut(p.buf);
    let pkt = &mut frame[ip_at..end];
    {
        let mut ip = Ipv4Packet::new_unchecked(&mut pkt[..]);
        ip.set_version(4);
        ip.set_header_len(20);
        ip.set_dscp(0);
        ip.set_ecn(0);
        ip.set_total_len((28 + quote_len) as u16);
        ip.set_ident(ident);
        ip.set_flags_frag(false, false, 0);
        ip.set_ttl(64);
        ip.set_protocol(1);
        ip.set_src_addr(src);
        ip.set_dst_addr(orig_src);
        ip.fill_checksum();
    }
    let icmp = &mut pkt[20..];
    icmp[0] = ty;
    icmp[1] = code;
    icmp[2..4].copy_from_slice(&[0, 0]);
    if ty == icmp::V4_PARAM_PROBLEM {
        // RFC 792: the pointer is the first octet after the checksum.
        icmp[4..8].copy_from_slice(&[mtu as u8, 0, 0, 0]);
    } else {
        icmp[4..6].copy_from_slice(&[0, 0]);
        icmp[6..8].copy_from_slice(&mtu.to_be_bytes());
    }
    let c = checksum::checksum(icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    Ok(Pkt {
        buf: p.buf,
        off: eth_at as u16,
        len: (ETH_HLEN + 28 + quote_len) as u16,
        rx_port: p.rx_port,
        tx_port: 0,
        l3: ETH_HLEN as u16,
        flags: F_LOCAL_ORIGIN,
        nh: orig_src,
        aux: 0,
    })
}
