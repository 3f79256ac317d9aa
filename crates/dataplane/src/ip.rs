//! The IP nodes written once for both families ([`Family`]): ip4-lookup / ip6-lookup
//! (longest-prefix match, ECMP, the unicast feature arc at their head) and ip4-rewrite /
//! ip6-rewrite (TTL or hop limit, MTU, L2 header, the output feature arc).

use fib::{Adjacency, NextHop};

use crate::buffer::{
    l3_mut, PacketMemory, Pkt, Vector, F_CSUM_UNKNOWN, F_LINK_LOCAL_SRC, F_LOCAL_ORIGIN, HEADROOM,
};
use crate::counters::Reason;
use crate::family::Family;
use crate::graph::{write_eth, Graph, Output, Resolved};
use crate::interfaces::VlanTags;
use crate::trace::Step;
use crate::VECTOR_SIZE;

const ETH_HLEN: usize = 14;

/// ip4-lookup / ip6-lookup: the unicast arc's features, then the FIB; forward to rewrite,
/// punt (local, glean), drop (blackhole) or answer "no route".
pub(crate) fn lookup<const T: bool, F: Family, M: PacketMemory>(
    g: &mut Graph,
    v: &mut Vector,
    mem: &mut M,
    out: &mut Output,
    list: &[u16],
) {
    let mut keep = [0u16; VECTOR_SIZE];
    let list = g.input_arc::<T, M>(F::UNICAST_ARC, (v, mem, out), list, &mut keep);
    F::lookup_bulk(g, v, mem, list);
    for (k, &i) in list.iter().enumerate() {
        let id = g.results[k];
        let mut p = v.pkts[i as usize];
        let local = p.flags & F_LOCAL_ORIGIN != 0;
        let Some(nh) = g.resolve(id, || F::flow_hash(mem, &p)) else {
            if local {
                g.drop_pkt::<T>(out, &p, Reason::IcmpNoRouteBack);
            } else {
                g.counters.add(F::NO_ROUTE, 1);
                g.trace::<T>(&p, Step::ToIcmp(F::NO_ROUTE));
                p.aux = F::NO_ROUTE_ICMP;
                v.pkts[i as usize] = p;
                g.enqueue(F::ICMP_ERROR, i);
            }
            continue;
        };
        match (nh, F::LINK_LOCAL_SRC) {
            (Resolved::Forward(_), Some(r)) if p.flags & F_LINK_LOCAL_SRC != 0 => {
                g.drop_pkt::<T>(out, &p, r)
            }
            (Resolved::Forward(id), _) => {
                v.pkts[i as usize].nh = id;
                if T {
                    g.trace_forward::<T>(&p, F::V6, id);
                }
                g.enqueue(F::REWRITE, i);
            }
            (Resolved::Drop, _) => g.drop_pkt::<T>(out, &p, F::BLACKHOLE),
            (Resolved::Local, _) => g.punt::<T, M>(mem, out, &p, Reason::PuntLocal),
            (Resolved::Glean, _) => g.punt::<T, M>(mem, out, &p, Reason::PuntUnresolved),
        }
    }
}

/// ip4-rewrite / ip6-rewrite: TTL or hop limit, MTU, L2 header; then the output arc,
/// port-tx, or (too big) ip4-frag or an ICMP error. `O`: some interface has output
/// features (the instantiation without them has no per-packet check).
pub(crate) fn rewrite<const T: bool, const O: bool, F: Family, M: PacketMemory>(
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
            // The next hop changed between lookup and rewrite (control-plane update).
            _ => {
                g.drop_pkt::<T>(out, &p, F::NO_ROUTE);
                continue;
            }
        };
        let local = p.flags & F_LOCAL_ORIGIN != 0;
        let ip = l3_mut(mem, &p);
        if ip.len() < F::HEADER_LEN {
            g.drop_pkt::<T>(out, &p, F::TRUNCATED);
            continue;
        }
        let ttl = ip[F::TTL_AT];
        if !local && ttl <= 1 {
            g.counters.add(F::TTL_EXPIRED, 1);
            g.trace::<T>(&p, Step::ToIcmp(F::TTL_EXPIRED));
            v.pkts[i as usize].aux = F::TIME_EXCEEDED_ICMP;
            g.enqueue(F::ICMP_ERROR, i);
            continue;
        }
        // A checksum the sender left to the hardware is finished before the packet leaves
        // (or is fragmented): its receiver would drop it.
        if p.flags & F_CSUM_UNKNOWN != 0 && wire::offload::complete_if_partial(ip) {
            g.counters.add(Reason::CsumCompleted, 1);
        }
        let total = F::total_len(ip);
        if !local {
            F::decrement_ttl(ip);
        }
        if total > adj.mtu as usize {
            F::too_big::<T, O>(g, v, ip, i, p, &adj, (!local).then_some(ttl));
            continue;
        }
        // New Ethernet header right in front of the IP header: the received tags, if any,
        // are replaced by the egress sub-interface's, if any.
        let (tx_port, tags) = g.egress(&adj);
        let hlen = ETH_HLEN + tags.map_or(0, |t: VlanTags| t.len());
        let l3_abs = p.off as usize + p.l3 as usize;
        let frame = mem.frame_mut(p.buf);
        let Some(eth) = l3_abs
            .checked_sub(hlen)
            .and_then(|s| frame.get_mut(s..l3_abs))
        else {
            g.drop_pkt::<T>(out, &p, Reason::EthRunt);
            continue;
        };
        // Priority 0: a feature on the output arc may set it (QoS's 802.1p marking).
        write_eth(eth, &adj, tags, F::ETHERTYPE, 0);
        p.off = (l3_abs - hlen) as u16;
        p.l3 = hlen as u16;
        p.len = (hlen + total) as u16;
        p.tx_port = tx_port;
        if tags.is_some() {
            g.subif_sent(adj.port, p.len as usize);
        }
        if !local {
            g.counters.add(F::FORWARDED, 1);
        }
        if T {
            let new_ttl = if local { ttl } else { ttl - 1 };
            g.trace::<T>(&p, rewrite_step(F::V6, ttl, new_ttl, &adj));
        }
        if g.has_features::<O>(F::OUTPUT_ARC, adj.port) {
            v.pkts[i as usize] = p;
            g.enqueue(crate::graph::Node::of_output_arc(F::OUTPUT_ARC), i);
            continue;
        }
        g.transmit::<T>(out, p);
    }
}

/// The trace step of a rewrite.
#[cold]
pub(crate) fn rewrite_step(v6: bool, ttl: u8, new_ttl: u8, adj: &fib::Adjacency) -> Step {
    Step::Rewrite {
        v6,
        ttl,
        new_ttl,
        port: adj.port,
        src_mac: adj.src_mac,
        dst_mac: adj.dst_mac,
    }
}

/// How [`emit_fragments`] cuts a packet: its payload (after the headers that every
/// fragment repeats) as a range of its L3 bytes, and the header length and payload bytes
/// (a multiple of 8, not 0) of the first fragment and of the later ones.
pub(crate) struct FragShape {
    pub(crate) ethertype: u16,
    pub(crate) payload: std::ops::Range<usize>,
    pub(crate) first: (usize, usize),
    pub(crate) later: (usize, usize),
}

/// One fragment, as [`emit_fragments`] asks its header of the caller.
#[derive(Clone, Copy)]
pub(crate) struct Piece {
    /// The first fragment of the packet.
    pub(crate) first: bool,
    /// Where its payload starts in the packet's payload (bytes).
    pub(crate) offset: usize,
    /// Its payload's length.
    pub(crate) len: usize,
    /// The last fragment.
    pub(crate) last: bool,
}

/// Queue `p` cut into fragments on the egress port of `adj` (ip4-frag, ip6-frag): each
/// in a new frame, its L2 header written, its IP header by `header` (given the fragment's
/// header bytes to fill and `p`'s L3 bytes), then its share of the payload. All or
/// nothing: if a frame or queue room runs out, or `header` fails, the fragments queued
/// are taken back and `None` returned. Returns the fragments queued and the port.
pub(crate) fn emit_fragments<M: PacketMemory>(
    g: &mut Graph,
    mem: &mut M,
    out: &mut Output,
    p: &Pkt,
    adj: &Adjacency,
    shape: FragShape,
    mut header: impl FnMut(&mut [u8], &[u8], Piece) -> Option<()>,
) -> Option<(u64, u16)> {
    let FragShape {
        ethertype,
        payload,
        first: (first_hlen, first_chunk),
        later: (later_hlen, later_chunk),
    } = shape;
    if first_chunk == 0 || later_chunk == 0 || payload.start > payload.end {
        return None;
    }
    let payload_len = payload.end - payload.start;
    let src_l3 = p.off as usize + p.l3 as usize;
    let (tx_port, tags) = g.egress(adj);
    let eth_len = ETH_HLEN + tags.map_or(0, |t| t.len());
    // The priority a feature on the output arc chose for the packet's tags.
    let pcp = crate::buffer::frag_pcp(p.aux);
    let start_len = out.tx.get(tx_port as usize)?.len();
    let mut done = 0usize;
    // Bounded: each iteration consumes ≥ 8 payload bytes.
    while done < payload_len {
        let first = done == 0;
        let (h, chunk) = if first {
            (first_hlen, first_chunk)
        } else {
            (later_hlen, later_chunk)
        };
        let n = chunk.min(payload_len - done);
        let piece = Piece {
            first,
            offset: done,
            len: n,
            last: done + n == payload_len,
        };
        let Some(buf) = mem.alloc_for(eth_len + h + n) else {
            rollback(out, tx_port as usize, start_len);
            return None;
        };
        let room = out
            .tx
            .get(tx_port as usize)
            .is_some_and(|q| q.len() < q.capacity());
        let (src, dst) = mem.frame_pair(p.buf, buf);
        let ipd = HEADROOM + eth_len;
        let mut write = || {
            let l3 = src.get(src_l3..)?;
            write_eth(dst.get_mut(HEADROOM..ipd)?, adj, tags, ethertype, pcp);
            header(dst.get_mut(ipd..ipd + h)?, l3, piece)?;
            let from = payload.start + done;
            dst.get_mut(ipd + h..ipd + h + n)?
                .copy_from_slice(l3.get(from..from + n)?);
            Some(())
        };
        if !room || write().is_none() {
            mem.free(buf);
            rollback(out, tx_port as usize, start_len);
            return None;
        }
        out.tx.get_mut(tx_port as usize)?.push(Pkt {
            buf,
            off: HEADROOM as u16,
            len: (eth_len + h + n) as u16,
            rx_port: p.rx_port,
            tx_port,
            l3: eth_len as u16,
            flags: p.flags,
            nh: p.nh,
            aux: 0,
        });
        done += n;
    }
    let queued = out.tx.get(tx_port as usize)?;
    if tags.is_some() {
        for f in &queued[start_len..] {
            g.subif_sent(adj.port, f.len as usize);
        }
    }
    Some(((queued.len() - start_len) as u64, tx_port))
}

/// Take back fragments already queued when a later one could not be built; their buffers
/// are returned through `free`.
pub(crate) fn rollback(out: &mut Output, port: usize, start_len: usize) {
    if let Some(q) = out.tx.get_mut(port) {
        // Bounded by the queue length; `drain` would allocate nothing either, but this
        // keeps the borrow of `out.free` separate.
        while q.len() > start_len {
            if let Some(f) = q.pop() {
                out.free.push(f.buf);
            }
        }
    }
}
