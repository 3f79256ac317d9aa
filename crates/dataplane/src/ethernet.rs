//! ethernet-input: the port-input feature arc, then L2 classification (destination MAC,
//! VLAN tags to sub-interfaces, EtherType), handing IPv4 and IPv6 to their input nodes
//! inline and ARP to the kernel.

use crate::buffer::{prefetch, PacketMemory, Pkt, Vector, F_L2_MCAST, VECTOR_SIZE};
use crate::counters::Reason;
use crate::feature::ArcId;
use crate::graph::{Graph, Output, PREFETCH_AHEAD};
use crate::trace::Step;
use crate::{ip4, ip6};

/// ethernet-input over the packets `list` of `v`.
pub(crate) fn input<const T: bool, M: PacketMemory>(
    g: &mut Graph,
    v: &mut Vector,
    mem: &mut M,
    out: &mut Output,
    list: &[u16],
) {
    let mut keep = [0u16; VECTOR_SIZE];
    let list = g.input_arc::<T, M>(ArcId::PortInput, (v, mem, out), list, &mut keep);
    if g.arc_on(ArcId::PortInput) {
        // A feature may have moved packets to another interface (a tunnel's).
        let moved = list
            .iter()
            .any(|&i| v.pkts[i as usize].rx_port != g.vec_port);
        g.vec_mixed |= moved;
        if moved && g.capture.is_some() {
            g.capture_virtual_rx(v, &*mem, out, list);
        }
    }
    // Bring headers in a few packets ahead: the first touch of a frame is the most
    // expensive access of the whole path.
    for &i in list.iter().take(PREFETCH_AHEAD) {
        let p = &v.pkts[i as usize];
        prefetch(mem.frame(p.buf).as_ptr().wrapping_add(p.off as usize));
    }
    for (k, &i) in list.iter().enumerate() {
        if let Some(&j) = list.get(k + PREFETCH_AHEAD) {
            let q = &v.pkts[j as usize];
            prefetch(mem.frame(q.buf).as_ptr().wrapping_add(q.off as usize));
        }
        // Read once, not written in place before the input nodes run: they get a copy by
        // value. Narrow stores into a descriptor followed by a wide reload of it stall
        // store forwarding (measured with perf: a quarter of the IPv4 rate).
        let p = &v.pkts[i as usize];
        let mut flags = p.flags;
        let frame = mem.frame(p.buf);
        let data = frame
            .get(p.off as usize..p.off as usize + p.len as usize)
            .unwrap_or(&[]);
        if data.len() < 14 {
            let p = *p;
            g.drop_pkt::<T>(out, &p, Reason::EthRunt);
            continue;
        }
        // Untagged IPv4/IPv6 is the common case: no VLAN walk.
        let ethertype = u16::from_be_bytes([data[12], data[13]]);
        let l2 = if ethertype == wire::ethertype::IPV4 || ethertype == wire::ethertype::IPV6 {
            wire::L2Info {
                ethertype,
                vlan: None,
                tags: [(0, 0); wire::ethernet::MAX_VLAN_TAGS],
                l3_offset: 14,
            }
        } else {
            match wire::parse_l2(data) {
                Ok(l2) => l2,
                Err(_) => {
                    let p = *p;
                    g.drop_pkt::<T>(out, &p, Reason::EthMalformed);
                    continue;
                }
            }
        };
        let dst_group = data[0] & 1 == 1;
        if dst_group {
            flags |= F_L2_MCAST;
        } else if let Some(&mac) = g.port_macs.get(p.rx_port as usize) {
            let dst =
                u64::from_le_bytes([data[0], data[1], data[2], data[3], data[4], data[5], 0, 0]);
            if dst != mac {
                let p = *p;
                g.drop_pkt::<T>(out, &p, Reason::EthNotForUs);
                continue;
            }
        }
        // A tagged frame belongs to the VLAN sub-interface of its tags, and is received
        // there; without one it is dropped, never routed as if it were untagged.
        let mut rx_port = p.rx_port;
        if l2.vlan.is_some() {
            match g.subif_of(p.rx_port, data) {
                Some(s) => {
                    g.vec_mixed = true;
                    // Counted once: not again when a held packet comes back.
                    if (p.rx_port as usize) < g.first_subif {
                        g.counters
                            .subif_rx(s as usize - g.first_subif, u64::from(p.len));
                    }
                    rx_port = s;
                }
                None => {
                    let p = *p;
                    g.drop_pkt::<T>(out, &p, Reason::EthVlanNoSubif);
                    continue;
                }
            }
        }
        let pk = Pkt {
            l3: l2.l3_offset as u16,
            flags,
            rx_port,
            ..*p
        };
        if T {
            let p = pk;
            g.trace::<T>(
                &p,
                Step::EthernetInput {
                    ethertype: l2.ethertype,
                    vlan: l2.vlan,
                    l2_mcast: dst_group,
                },
            );
        }
        // Only the changed fields go back (a whole-descriptor store would reload the
        // copy just built field by field: the same stall).
        let d = &mut v.pkts[i as usize];
        d.l3 = pk.l3;
        d.flags = pk.flags;
        if l2.vlan.is_some() {
            d.rx_port = pk.rx_port;
        }
        match l2.ethertype {
            wire::ethertype::IPV4 => ip4::input_one::<T, M>(g, v, mem, out, i, pk),
            wire::ethertype::IPV6 => ip6::input_one::<T, M>(g, mem, out, i, pk),
            wire::ethertype::ARP => g.punt::<T, M>(mem, out, &pk, Reason::PuntArp),
            _ => g.drop_pkt::<T>(out, &pk, Reason::EthUnknownType),
        }
    }
}
