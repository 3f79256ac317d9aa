//! The IP nodes written once for both families ([`Family`]): ip4-lookup / ip6-lookup
//! (longest-prefix match, ECMP, the unicast feature arc at their head) and ip4-rewrite /
//! ip6-rewrite (TTL or hop limit, MTU, L2 header, the output feature arc).

use fib::NextHop;

use crate::buffer::{
    l3_mut, PacketMemory, Vector, F_CSUM_UNKNOWN, F_LINK_LOCAL_SRC, F_LOCAL_ORIGIN,
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
        write_eth(eth, &adj, tags, F::ETHERTYPE);
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
