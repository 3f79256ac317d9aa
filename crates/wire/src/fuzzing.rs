//! The body of the wire fuzz target, shared by `fuzz/` (cargo-fuzz, libFuzzer, nightly)
//! and the stable harness every CI run drives (`tests/fuzz_wire_parse.rs`, proptest): every
//! parser is fed the frame the way the dataplane does (L2 walk, IPv4/IPv6, extension
//! headers, then ICMP, NDP, TCP, UDP and ESP views, offload completion and segmentation),
//! every getter called, and the invariants a caller relies on asserted. Not for the hot
//! path: it allocates, and it panics on a bug by design.

use std::hint::black_box;

use crate::{
    checksum, icmpv4, ipv4, ipv6, parse_l2, protocol, tcp, udp, ArpPacket, ArpRepr, EspPacket,
    EthernetFrame, Icmpv4Packet, Icmpv6Packet, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, NdpRepr,
    TcpPacket, UdpPacket, UdpRepr,
};

/// Feed `data` (a frame) through every parser, the way the dataplane does, checking the
/// invariants a caller relies on. Panics on a bug: that is what a fuzzer looks for.
pub fn exercise(data: &[u8]) {
    if let Ok(eth) = EthernetFrame::new_checked(data) {
        let _ = black_box((
            eth.dst_addr(),
            eth.src_addr(),
            eth.ethertype(),
            eth.payload().len(),
        ));
    }
    let Ok(l2) = parse_l2(data) else { return };
    let Some(l3) = data.get(l2.l3_offset..) else {
        panic!("l3_offset past frame")
    };
    if matches!(
        l2.ethertype,
        crate::ethertype::IPV4 | crate::ethertype::IPV6
    ) {
        offload_path(l3);
    }
    match l2.ethertype {
        crate::ethertype::IPV4 => ipv4_path(l3),
        crate::ethertype::IPV6 => ipv6_path(l3),
        crate::ethertype::ARP => {
            if let Ok(arp) = ArpPacket::new_checked(l3) {
                let _ = black_box((arp.operation(), arp.sender_hw(), arp.sender_ip()));
                let _ = black_box((arp.target_hw(), arp.target_ip(), ArpRepr::parse(&arp)));
            }
        }
        _ => {}
    }
}

/// What the ports do with a sender's offloads: complete a partial checksum (which must
/// then verify), cut a super-frame (every segment of a plan must build and verify).
fn offload_path(l3: &[u8]) {
    let mut copy = l3.to_vec();
    if crate::offload::complete_if_partial(&mut copy) {
        assert_eq!(crate::offload::transport_checksum_ok(&copy), Some(true));
    }
    let mss = l3.first().map_or(1, |b| u16::from(*b) * 8 + 1);
    for kind in [crate::offload::GsoKind::Tcp, crate::offload::GsoKind::Udp] {
        if let Ok(seg) = crate::offload::Segmenter::new(l3, kind, mss) {
            let mut buf = vec![0u8; 65_600];
            for k in 0..seg.count() {
                let n = seg
                    .write(l3, k, &mut buf)
                    .expect("a planned segment builds");
                assert_eq!(n, seg.len(k));
                assert_eq!(crate::offload::transport_checksum_ok(&buf[..n]), Some(true));
            }
        }
    }
}

fn ipv4_path(l3: &[u8]) {
    let Ok(ip) = Ipv4Packet::new_checked(l3) else {
        return;
    };
    let _ = black_box((
        ip.version(),
        ip.header_len(),
        ip.dscp(),
        ip.ecn(),
        ip.total_len(),
    ));
    let _ = black_box((
        ip.ident(),
        ip.dont_frag(),
        ip.more_frags(),
        ip.frag_offset(),
        ip.ttl(),
    ));
    let _ = black_box((
        ip.protocol(),
        ip.checksum(),
        ip.src_addr(),
        ip.dst_addr(),
        ip.options(),
    ));
    let _ = black_box((
        ip.verify_checksum(),
        ip.validate_options(),
        ipv4::check_options(ip.options()),
        Ipv4Repr::parse(&ip),
    ));
    let l4 = ip.payload();
    let len = l4.len() as u16;
    let ph = checksum::pseudo_v4(ip.src_addr(), ip.dst_addr(), ip.protocol(), len);
    let _ = black_box(crate::flow_ports(ip.protocol(), l4));
    if ip.protocol() == protocol::ICMP {
        if let Ok(icmp) = Icmpv4Packet::new_checked(l4) {
            let _ = black_box((
                icmp.msg_type(),
                icmp.msg_code(),
                icmp.checksum(),
                icmp.rest_of_header(),
            ));
            let _ = black_box((
                icmp.echo_ident(),
                icmp.echo_seq_no(),
                icmp.next_hop_mtu(),
                icmp.pointer(),
            ));
            let _ = black_box((icmp.verify_checksum(), icmp.payload().len()));
            if icmp.msg_type() == icmpv4::msg_type::DST_UNREACHABLE {
                // The quoted header of an ICMP error is parsed like any other.
                if let Ok(inner) = Ipv4Packet::new_checked(icmp.payload()) {
                    let _ = black_box((inner.src_addr(), inner.payload().len()));
                }
            }
        }
    } else {
        l4_path(ip.protocol(), l4, ph);
    }
    let mut copy = l3.to_vec();
    if let Ok(mut ip) = Ipv4Packet::new_checked(&mut copy[..]) {
        ip.decrement_ttl();
        ip.fill_checksum();
        assert!(ip.verify_checksum());
        let _ = ipv4::Ipv4Packet::new_checked(ip.into_inner()).map(|p| p.payload().len());
    }
}

fn ipv6_path(l3: &[u8]) {
    let Ok(ip) = Ipv6Packet::new_checked(l3) else {
        return;
    };
    let _ = black_box((
        ip.version(),
        ip.traffic_class(),
        ip.flow_label(),
        ip.payload_len(),
    ));
    let _ = black_box((ip.next_header(), ip.hop_limit(), Ipv6Repr::parse(&ip)));
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let payload = ip.payload();
    let Ok(walk) = ipv6::walk_ext_headers(ip.next_header(), payload, ipv6::MAX_EXT_HEADERS) else {
        return;
    };
    let Some(l4) = payload.get(walk.upper_offset..) else {
        panic!("upper_offset past payload")
    };
    if walk.fragment.is_some_and(|f| f.offset_bytes != 0) {
        return;
    }
    let ph = checksum::pseudo_v6(&src, &dst, walk.upper_protocol, l4.len() as u32);
    if walk.upper_protocol == protocol::ICMPV6 {
        if let Ok(icmp) = Icmpv6Packet::new_checked(l4) {
            let _ = black_box((
                icmp.msg_type(),
                icmp.msg_code(),
                icmp.checksum(),
                icmp.mtu(),
            ));
            let _ = black_box((
                icmp.pointer(),
                icmp.echo_ident(),
                icmp.echo_seq_no(),
                icmp.payload().len(),
            ));
            let _ = black_box(icmp.verify_checksum(&src, &dst));
            if let Ok(ndp) = NdpRepr::parse(&icmp) {
                if let NdpRepr::RouterAdvert { prefixes, .. } = ndp {
                    for p in prefixes {
                        let _ = black_box(p);
                    }
                }
                let mut out = vec![0u8; ndp.buffer_len()];
                ndp.emit(&mut Icmpv6Packet::new_unchecked(&mut out[..]))
                    .expect("emit fits buffer_len");
            }
        }
    } else {
        l4_path(walk.upper_protocol, l4, ph);
    }
}

fn l4_path(proto: u8, l4: &[u8], ph: u32) {
    let _ = black_box(crate::flow_ports(proto, l4));
    match proto {
        protocol::TCP => {
            if let Ok(t) = TcpPacket::new_checked(l4) {
                let _ = black_box((t.src_port(), t.dst_port(), t.seq_number(), t.ack_number()));
                let _ = black_box((
                    t.header_len(),
                    t.flags(),
                    t.syn(),
                    t.ack(),
                    t.fin(),
                    t.rst(),
                ));
                let _ = black_box((
                    t.psh(),
                    t.urg(),
                    t.window_len(),
                    t.checksum(),
                    t.urgent_at(),
                ));
                let _ = black_box((
                    t.options(),
                    t.payload().len(),
                    t.mss(),
                    t.verify_checksum(ph),
                ));
                let mut copy = l4.to_vec();
                if let Ok(mut t) = tcp::TcpPacket::new_checked(&mut copy[..]) {
                    t.fill_checksum(ph);
                    t.clamp_mss(1200);
                    assert!(t.verify_checksum(ph));
                }
            }
        }
        protocol::UDP => {
            if let Ok(u) = UdpPacket::new_checked(l4) {
                let _ = black_box((
                    u.src_port(),
                    u.dst_port(),
                    u.len(),
                    u.checksum(),
                    u.payload().len(),
                ));
                let _ = black_box((u.verify_checksum(ph), UdpRepr::parse(&u)));
                let _ = black_box(udp::UdpPacket::new_checked(u.payload()).is_ok());
            }
        }
        protocol::ESP => {
            if let Ok(e) = EspPacket::new_checked(l4) {
                let _ = black_box((e.spi(), e.sequence_number(), e.payload().len()));
            }
        }
        _ => {}
    }
}
