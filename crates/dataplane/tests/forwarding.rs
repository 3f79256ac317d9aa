//! RFC 1812 / RFC 8200 behaviour of the graph, packet by packet: every drop reason, every
//! ICMP error (with its quote and checksums), fragmentation, punts, ECMP, and malformed
//! input that must be counted, never panic.

use std::sync::Arc;

use dataplane::interfaces::PuntPath;
use dataplane::punt::{self, PuntConsumer};
use dataplane::{
    Arena, Counters, Graph, GraphConfig, Interfaces, Output, PacketMemory, Pkt, PortInfo, Reason,
    Vector,
};
use fib::{Adjacency, NextHop};
use proptest::prelude::*;
use wire::checksum;

mod common;

const MAC0: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC1: [u8; 6] = [2, 0, 0, 0, 0, 2];
const PEER0: [u8; 6] = [2, 0, 0, 0, 0, 0xa0];
const PEER1: [u8; 6] = [2, 0, 0, 0, 0, 0xa1];
const PEER2: [u8; 6] = [2, 0, 0, 0, 0, 0xa2];
const R0_V4: u32 = 0xc0a8_0001; // 192.168.0.1
const H0_V4: u32 = 0xc0a8_0064; // 192.168.0.100
const R0_V6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const H0_V6: [u8; 16] = [
    0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x64,
];
const DST6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9];

fn ip4(s: &str) -> u32 {
    u32::from(s.parse::<std::net::Ipv4Addr>().unwrap())
}

fn ip6(s: &str) -> [u8; 16] {
    s.parse::<std::net::Ipv6Addr>().unwrap().octets()
}

struct Lab {
    graph: Graph,
    arena: Arena,
    out: Output,
    punts: PuntConsumer,
    counters: Arc<Counters>,
    _writer: fib::FibWriter,
}

/// The two ports of the graph tests; punts from p0 reach the kernel as `p0_punts` says.
fn lab_interfaces(p0_punts: PuntPath) -> Interfaces {
    Interfaces::from_ports(vec![
        PortInfo {
            name: "p0".into(),
            mac: MAC0,
            mtu: 1500,
            ip4: vec![R0_V4],
            ip6: vec![R0_V6],
            punt_path: p0_punts,
            vlan: None,
            down: false,
        },
        PortInfo {
            name: "p1".into(),
            mac: MAC1,
            mtu: 1500,
            ip4: vec![ip4("10.0.0.1")],
            ip6: vec![],
            ..Default::default()
        },
    ])
}

fn lab_with(cfg: GraphConfig) -> Lab {
    let (mut w, r) = fib::new(fib::FibConfig {
        max_tbl8_v4: 256,
        max_tbl8_v6: 4096,
        max_readers: 8,
    });
    let adj = |port, dst_mac, src_mac, mtu| {
        NextHop::Forward(Adjacency {
            port,
            dst_mac,
            src_mac,
            mtu,
        })
    };
    let to_h0 = w.add_next_hop(adj(0, PEER0, MAC0, 1500)).unwrap();
    let to_r1 = w.add_next_hop(adj(1, PEER1, MAC1, 1500)).unwrap();
    let to_r2 = w.add_next_hop(adj(1, PEER2, MAC1, 1500)).unwrap();
    let small = w.add_next_hop(adj(1, PEER1, MAC1, 576)).unwrap();
    let local = w.add_next_hop(NextHop::Local).unwrap();
    let glean = w.add_next_hop(NextHop::Glean { port: 1 }).unwrap();
    let drop = w.add_next_hop(NextHop::Drop).unwrap();
    let ecmp = w
        .add_next_hop(NextHop::Ecmp(vec![to_r1, to_r2].into_boxed_slice()))
        .unwrap();
    w.add4(ip4("192.168.0.0"), 16, to_h0).unwrap();
    w.add4(ip4("10.0.0.0"), 8, to_r1).unwrap();
    w.add4(ip4("172.16.0.0"), 16, small).unwrap();
    w.add4(R0_V4, 32, local).unwrap();
    w.add4(ip4("198.51.100.0"), 24, glean).unwrap();
    w.add4(ip4("203.0.113.0"), 24, drop).unwrap();
    w.add4(ip4("100.64.0.0"), 10, ecmp).unwrap();
    w.add6(&ip6("2001:db8:1::"), 48, to_h0).unwrap();
    w.add6(&ip6("2001:db8:2::"), 48, to_r1).unwrap();
    w.add6(&ip6("2001:db8:3::"), 48, small).unwrap();
    w.add6(&R0_V6, 128, local).unwrap();
    let ifaces = lab_interfaces(PuntPath::Queue);
    let counters = Arc::new(Counters::default());
    let (prod, cons) = punt::queue(64);
    let graph = Graph::new(
        r.register(),
        Arc::new(ifaces),
        counters.clone(),
        Some(prod),
        cfg,
    );
    Lab {
        graph,
        arena: Arena::with_big(512, 64),
        out: Output::new(2),
        punts: cons,
        counters,
        _writer: w,
    }
}

fn lab() -> Lab {
    lab_with(GraphConfig::default())
}

/// Ethernet + IPv4 + UDP frame with correct checksums.
fn frame4(src: u32, dst: u32, ttl: u8, df: bool, payload_len: usize) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&MAC0);
    f.extend_from_slice(&PEER0);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let total = 20 + 8 + payload_len;
    let mut ip = vec![
        0x45,
        0,
        0,
        0,
        0x12,
        0x34,
        if df { 0x40 } else { 0 },
        0,
        ttl,
        17,
        0,
        0,
    ];
    ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    ip.extend_from_slice(&src.to_be_bytes());
    ip.extend_from_slice(&dst.to_be_bytes());
    let c = checksum::checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&1234u16.to_be_bytes());
    f.extend_from_slice(&5678u16.to_be_bytes());
    f.extend_from_slice(&((8 + payload_len) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend((0..payload_len).map(|i| i as u8));
    f
}

/// Ethernet + IPv6 + UDP frame.
fn frame6(src: [u8; 16], dst: [u8; 16], hop: u8, next: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&MAC0);
    f.extend_from_slice(&PEER0);
    f.extend_from_slice(&0x86ddu16.to_be_bytes());
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    f.push(next);
    f.push(hop);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(payload);
    f
}

fn udp6(n: usize) -> Vec<u8> {
    let mut u = vec![0x04, 0xd2, 0x16, 0x2e];
    u.extend_from_slice(&((8 + n) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend((0..n).map(|i| i as u8));
    u
}

impl Lab {
    /// Run frames through the graph; returns (port, frame bytes) of everything sent.
    fn run(&mut self, frames: &[Vec<u8>]) -> Vec<(u16, Vec<u8>)> {
        common::run_frames(&mut self.graph, &mut self.arena, &mut self.out, 0, frames)
    }
    fn count(&self, r: Reason) -> u64 {
        self.counters.get(r)
    }
}

fn ipv4_of(f: &[u8]) -> wire::Ipv4Packet<&[u8]> {
    wire::Ipv4Packet::new_checked(&f[14..]).expect("valid IPv4")
}

#[test]
fn forwards_ipv4_with_ttl_checksum_and_l2_rewrite() {
    let mut l = lab();
    let out = l.run(&[frame4(H0_V4, ip4("10.1.2.3"), 64, true, 100)]);
    assert_eq!(out.len(), 1);
    let (port, f) = &out[0];
    assert_eq!(*port, 1);
    assert_eq!(&f[0..6], &PEER1);
    assert_eq!(&f[6..12], &MAC1);
    let ip = ipv4_of(f);
    assert_eq!(ip.ttl(), 63);
    assert!(ip.verify_checksum(), "incremental checksum update is wrong");
    assert_eq!(f.len(), 14 + 128);
    assert_eq!(l.count(Reason::Ip4Forwarded), 1);
}

/// A packet whose next hop is on a port marked down (in the window before the control plane
/// withdraws its routes) is dropped and counted, not handed to a port that cannot send it;
/// once the port is up again it is sent.
#[test]
fn a_down_port_drops_and_counts_what_still_meets_it() {
    let mut l = lab();
    let mut ifaces = lab_interfaces(PuntPath::Queue);
    ifaces.ports[1].down = true;
    l.graph.set_interfaces(Arc::new(ifaces.clone()));
    let out = l.run(&[frame4(H0_V4, ip4("10.1.2.3"), 64, true, 100)]);
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(l.count(Reason::TxPortDown), 1);
    assert_eq!(Reason::TxPortDown.node(), "port-tx");
    // Traffic toward the port that is up is not affected.
    let out = l.run(&[frame4(ip4("10.1.2.3"), ip4("192.168.1.1"), 64, true, 100)]);
    assert_eq!(out.len(), 1, "{out:?}");
    ifaces.ports[1].down = false;
    l.graph.set_interfaces(Arc::new(ifaces));
    let out = l.run(&[frame4(H0_V4, ip4("10.1.2.3"), 64, true, 100)]);
    assert_eq!(out.len(), 1);
    assert_eq!(l.count(Reason::TxPortDown), 1);
}

#[test]
fn strips_ethernet_padding_on_short_frames() {
    let mut l = lab();
    let mut f = frame4(H0_V4, ip4("10.1.2.3"), 64, false, 0);
    f.extend_from_slice(&[0xee; 18]); // pad to the 60-byte minimum plus more
    let out = l.run(&[f]);
    assert_eq!(out[0].1.len(), 14 + 28);
}

fn check_icmp4_error(f: &[u8], ty: u8, code: u8, quoted_ttl: u8) -> u32 {
    let ip = ipv4_of(f);
    assert!(ip.verify_checksum());
    assert_eq!(ip.protocol(), 1);
    assert_eq!(
        ip.src_addr(),
        R0_V4,
        "error must come from the ingress port address"
    );
    assert_eq!(ip.dst_addr(), H0_V4);
    let icmp = ip.payload();
    assert_eq!((icmp[0], icmp[1]), (ty, code));
    assert_eq!(checksum::checksum(icmp), 0, "ICMP checksum");
    let quote = wire::Ipv4Packet::new_unchecked(&icmp[8..]);
    assert_eq!(quote.src_addr(), H0_V4);
    assert_eq!(
        quote.ttl(),
        quoted_ttl,
        "quote must be the packet as received"
    );
    assert!(ip.total_len() as usize <= 576);
    u32::from_be_bytes([icmp[4], icmp[5], icmp[6], icmp[7]])
}

#[test]
fn ttl_expired_sends_time_exceeded_back_to_source() {
    for ttl in [0u8, 1] {
        let mut l = lab();
        let out = l.run(&[frame4(H0_V4, ip4("10.1.2.3"), ttl, false, 600)]);
        assert_eq!(out.len(), 1, "ttl {ttl}");
        assert_eq!(out[0].0, 0, "error goes back out of the source port");
        assert_eq!(&out[0].1[0..6], &PEER0);
        check_icmp4_error(&out[0].1, 11, 0, ttl);
        assert_eq!(l.count(Reason::Ip4TtlExpired), 1);
        assert_eq!(l.count(Reason::Icmp4Sent), 1);
    }
}

#[test]
fn no_route_sends_net_unreachable() {
    let mut l = lab();
    let out = l.run(&[frame4(H0_V4, ip4("8.8.8.8"), 64, false, 10)]);
    assert_eq!(out.len(), 1);
    check_icmp4_error(&out[0].1, 3, 0, 64);
    assert_eq!(l.count(Reason::Ip4NoRoute), 1);
}

#[test]
fn df_and_too_big_sends_frag_needed_with_mtu() {
    let mut l = lab();
    let out = l.run(&[frame4(H0_V4, ip4("172.16.0.9"), 64, true, 1000)]);
    assert_eq!(out.len(), 1);
    let rest = check_icmp4_error(&out[0].1, 3, 4, 64);
    assert_eq!(rest & 0xffff, 576, "next-hop MTU");
    assert_eq!(l.count(Reason::Ip4FragNeeded), 1);
}

#[test]
fn fragments_when_df_clear() {
    let mut l = lab();
    let orig = frame4(H0_V4, ip4("172.16.0.9"), 64, false, 1400);
    let out = l.run(std::slice::from_ref(&orig));
    assert!(out.len() >= 3, "{} fragments", out.len());
    let mut data = vec![0u8; 1408];
    let mut covered = 0;
    for (i, (port, f)) in out.iter().enumerate() {
        assert_eq!(*port, 1);
        let ip = ipv4_of(f);
        assert!(ip.verify_checksum());
        assert!(ip.total_len() <= 576);
        assert_eq!(ip.ttl(), 63);
        assert_eq!(ip.ident(), 0x1234);
        assert_eq!(ip.more_frags(), i + 1 < out.len());
        let off = ip.frag_offset() as usize;
        assert_eq!(off % 8, 0);
        data[off..off + ip.payload().len()].copy_from_slice(ip.payload());
        covered += ip.payload().len();
    }
    assert_eq!(covered, 1408);
    assert_eq!(
        &data[..],
        &orig[34..],
        "reassembly must give back the original payload"
    );
    assert_eq!(l.count(Reason::Ip4Fragments), out.len() as u64);
}

/// A jumbo frame (9000-byte IPv4 packet, in a big buffer) toward 1500- and 576-byte links:
/// fragmented with DF clear (every fragment within the MTU, the payload intact), "fragmentation
/// needed" with DF set; an IPv6 one gets "packet too big" quoting at most 1280 bytes.
#[test]
fn jumbo_frames_are_fragmented_or_answered_at_any_mtu() {
    for (dst, mtu) in [("10.1.2.3", 1500usize), ("172.16.0.9", 576)] {
        let mut l = lab();
        let orig = frame4(H0_V4, ip4(dst), 64, false, 8972);
        assert_eq!(orig.len(), 14 + 9000);
        let out = l.run(std::slice::from_ref(&orig));
        let mut data = vec![0u8; 8980];
        let mut covered = 0;
        for (i, (_, f)) in out.iter().enumerate() {
            let ip = ipv4_of(f);
            assert!(ip.verify_checksum());
            assert!(ip.total_len() as usize <= mtu, "{} > {mtu}", ip.total_len());
            assert_eq!(ip.more_frags(), i + 1 < out.len());
            let off = ip.frag_offset() as usize;
            data[off..off + ip.payload().len()].copy_from_slice(ip.payload());
            covered += ip.payload().len();
        }
        assert_eq!(covered, 8980, "to {dst}");
        assert_eq!(&data[..], &orig[34..], "reassembly gives the payload back");
        assert_eq!(l.count(Reason::Ip4Fragments), out.len() as u64);
        let out = l.run(&[frame4(H0_V4, ip4(dst), 64, true, 8972)]);
        assert_eq!(out.len(), 1);
        let rest = check_icmp4_error(&out[0].1, 3, 4, 64);
        assert_eq!(rest & 0xffff, mtu as u32, "next-hop MTU");
    }
    let mut l = lab();
    let out = l.run(&[frame6(H0_V6, DST6, 64, 17, &udp6(8952))]);
    assert_eq!(out.len(), 1);
    let f = &out[0].1;
    assert_eq!(f[14 + 40], 2, "ICMPv6 packet too big");
    assert!(f.len() <= 14 + 1280, "the error fits the IPv6 minimum MTU");
    assert_eq!(l.count(Reason::Ip6TooBig), 1);
}

#[test]
fn header_errors_are_dropped_under_their_reason() {
    let good = frame4(H0_V4, ip4("10.1.2.3"), 64, false, 20);
    type Mangle = Box<dyn Fn(&mut Vec<u8>)>;
    let cases: Vec<(Mangle, Reason)> = vec![
        (Box::new(|f| f[24] ^= 0xff), Reason::Ip4BadChecksum),
        (Box::new(|f| f[14] = 0x55), Reason::Ip4BadVersion),
        (Box::new(|f| f[14] = 0x44), Reason::Ip4BadIhl),
        (Box::new(|f| f.truncate(14 + 12)), Reason::Ip4Truncated),
        (
            Box::new(|f| f[16..18].copy_from_slice(&2000u16.to_be_bytes())),
            Reason::Ip4BadLength,
        ),
        (Box::new(|f| f.truncate(10)), Reason::EthRunt),
        (
            Box::new(|f| f[12..14].copy_from_slice(&[0x88, 0xb5])),
            Reason::EthUnknownType,
        ),
        (
            Box::new(|f| f[0..6].copy_from_slice(&[2, 9, 9, 9, 9, 9])),
            Reason::EthNotForUs,
        ),
    ];
    for (mangle, reason) in cases {
        let mut l = lab();
        let mut f = good.clone();
        mangle(&mut f);
        let out = l.run(&[f]);
        assert!(out.is_empty(), "{reason:?} forwarded");
        assert_eq!(l.count(reason), 1, "{reason:?} not counted");
    }
}

fn with_src_dst(src: u32, dst: u32) -> Vec<u8> {
    frame4(src, dst, 64, false, 8)
}

#[test]
fn martians_blackholes_and_punts() {
    let cases = [
        (
            with_src_dst(ip4("127.0.0.1"), ip4("10.1.1.1")),
            Reason::Ip4MartianSrc,
        ),
        (
            with_src_dst(ip4("0.1.2.3"), ip4("10.1.1.1")),
            Reason::Ip4MartianSrc,
        ),
        (with_src_dst(H0_V4, ip4("127.0.0.1")), Reason::Ip4MartianDst),
        (
            with_src_dst(H0_V4, ip4("203.0.113.5")),
            Reason::Ip4Blackhole,
        ),
        (with_src_dst(H0_V4, R0_V4), Reason::PuntLocal),
        (
            with_src_dst(H0_V4, ip4("198.51.100.7")),
            Reason::PuntUnresolved,
        ),
        (with_src_dst(H0_V4, ip4("224.0.0.5")), Reason::PuntMulticast),
        (
            with_src_dst(ip4("0.0.0.0"), ip4("255.255.255.255")),
            Reason::PuntMulticast,
        ),
        (
            with_src_dst(H0_V4, ip4("169.254.1.1")),
            Reason::PuntLinkLocal,
        ),
    ];
    for (f, reason) in cases {
        let mut l = lab();
        let out = l.run(std::slice::from_ref(&f));
        assert!(out.is_empty(), "{reason:?}");
        assert_eq!(l.count(reason), 1, "{reason:?}");
        if reason.kind() == dataplane::Kind::Punt {
            let p = l.punts.pop().expect("punted frame in the queue");
            assert_eq!(p.frame(), &f[..]);
            assert_eq!(p.reason, reason);
        }
    }
}

/// An IPv4 frame to `dst` from `src` whose header carries `opts` (padded to a multiple of 4).
fn frame4_opts(src: u32, dst: u32, opts: &[u8]) -> Vec<u8> {
    let mut f = frame4(src, dst, 64, false, 8);
    let mut o = opts.to_vec();
    while !o.len().is_multiple_of(4) {
        o.push(0);
    }
    let mut ip: Vec<u8> = f[14..34].to_vec();
    ip[0] = 0x45 + (o.len() / 4) as u8;
    ip.extend_from_slice(&o);
    let total = u16::from_be_bytes([ip[2], ip[3]]) + o.len() as u16;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[10..12].copy_from_slice(&[0, 0]);
    let c = checksum::checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let rest = f.split_off(34);
    f.truncate(14);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&rest);
    f
}

#[test]
fn arp_is_punted() {
    let mut l = lab();
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&PEER0);
    arp.extend_from_slice(&[0x08, 0x06]);
    arp.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&[0; 20]);
    l.run(&[arp]);
    assert_eq!(l.count(Reason::PuntArp), 1);
}

/// RFC 6398 §3 / RFC 7126: Router Alert, Record Route and Timestamp in transit are
/// forwarded with their options unchanged; source routes are dropped.
#[test]
fn ipv4_options_in_transit() {
    for opts in [
        &[148u8, 4, 0, 0][..],
        &[7, 7, 4, 0, 0, 0, 0],
        &[68, 12, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    ] {
        let mut l = lab();
        let f = frame4_opts(H0_V4, ip4("10.1.1.1"), opts);
        let out = l.run(std::slice::from_ref(&f));
        assert_eq!(out.len(), 1, "{opts:?}");
        let ip = ipv4_of(&out[0].1);
        assert_eq!(&ip.options()[..opts.len()], opts);
        assert!(ip.verify_checksum());
        assert_eq!(ip.ttl(), 63);
        assert_eq!(l.count(Reason::Ip4Forwarded), 1);
    }
    for opts in [&[131u8, 7, 4, 10, 0, 0, 1][..], &[137, 7, 4, 10, 0, 0, 1]] {
        let mut l = lab();
        let out = l.run(&[frame4_opts(H0_V4, ip4("10.1.1.1"), opts)]);
        assert!(out.is_empty());
        assert_eq!(l.count(Reason::Ip4SourceRoute), 1);
    }
}

/// Malformed options are answered by a parameter problem whose pointer names the bad octet.
#[test]
fn malformed_ipv4_options_get_a_parameter_problem() {
    for (opts, pointer) in [
        (&[7u8, 3, 2, 0][..], 22u8), // Record Route pointer below 4
        (&[1, 1, 9, 1][..], 22),     // option of length 9 past the area
        (&[68, 4, 5, 2][..], 23),    // Timestamp flag 2
    ] {
        let mut l = lab();
        let out = l.run(&[frame4_opts(H0_V4, ip4("10.1.1.1"), opts)]);
        assert_eq!(out.len(), 1, "{opts:?}");
        let word = check_icmp4_error(&out[0].1, 12, 0, 64);
        assert_eq!(word, u32::from(pointer) << 24, "{opts:?}");
        assert_eq!(l.count(Reason::Ip4BadOptions), 1);
        assert_eq!(l.count(Reason::Icmp4Sent), 1);
    }
}

/// RFC 1812 §5.3.7, RFC 3927 §7: the router's own address as a source is spoofed; a
/// link-local source may reach the router but is never forwarded.
#[test]
fn own_and_link_local_sources() {
    let mut l = lab();
    assert!(l
        .run(&[frame4(R0_V4, ip4("10.1.1.1"), 64, false, 8)])
        .is_empty());
    assert_eq!(l.count(Reason::Ip4OwnSrc), 1);
    assert!(l.run(&[frame6(R0_V6, DST6, 64, 17, &udp6(4))]).is_empty());
    assert_eq!(l.count(Reason::Ip6OwnSrc), 1);
    assert!(l
        .run(&[frame4(ip4("169.254.7.7"), ip4("10.1.1.1"), 64, false, 8)])
        .is_empty());
    assert_eq!(l.count(Reason::Ip4LinkLocalSrc), 1);
    l.run(&[frame4(ip4("169.254.7.7"), R0_V4, 64, false, 8)]);
    assert_eq!(l.count(Reason::PuntLocal), 1, "to the router: delivered");
    assert_eq!(l.count(Reason::Ip4Forwarded), 0);
}

/// A tagged frame on a port without that VLAN sub-interface is not routed untagged.
#[test]
fn vlan_tagged_frames_are_dropped_on_an_untagged_port() {
    for tpids in [&[0x8100u16][..], &[0x88a8, 0x8100]] {
        let mut l = lab();
        let f = frame4(H0_V4, ip4("10.1.1.1"), 64, false, 8);
        let mut t = f[..12].to_vec();
        for tpid in tpids {
            t.extend_from_slice(&tpid.to_be_bytes());
            t.extend_from_slice(&100u16.to_be_bytes());
        }
        t.extend_from_slice(&f[12..]);
        assert!(l.run(&[t]).is_empty());
        assert_eq!(l.count(Reason::EthVlanNoSubif), 1);
        assert_eq!(l.count(Reason::Ip4Forwarded), 0);
    }
}

/// RFC 8200 §4, RFC 9098: extension headers in transit are forwarded, Hop-by-Hop and long
/// chains included.
#[test]
fn ipv6_extension_headers_are_forwarded() {
    let mut chain = Vec::new();
    for _ in 0..10 {
        chain.extend_from_slice(&[60, 0, 1, 4, 0, 0, 0, 0]);
    }
    chain[9 * 8] = 17;
    chain.extend_from_slice(&udp6(4));
    let hbh = [&[17u8, 0, 5, 2, 0, 0, 1, 0][..], &udp6(4)].concat();
    let hbh_later = [
        &[0u8, 0, 1, 4, 0, 0, 0, 0][..],
        &[17, 0, 1, 4, 0, 0, 0, 0],
        &udp6(4),
    ]
    .concat();
    for (next, payload) in [(60, chain), (0, hbh), (60, hbh_later)] {
        let mut l = lab();
        let out = l.run(&[frame6(H0_V6, DST6, 64, next, &payload)]);
        assert_eq!(out.len(), 1, "next header {next}");
        assert_eq!(&out[0].1[14 + 40..], &payload[..]);
        assert_eq!(l.count(Reason::Ip6Forwarded), 1);
    }
}

#[test]
fn no_icmp_error_about_an_icmp_error() {
    let mut l = lab();
    let mut f = frame4(H0_V4, ip4("10.1.2.3"), 1, false, 0);
    f[23] = 1; // protocol ICMP
    f[34] = 3; // destination unreachable
    f[24..26].copy_from_slice(&[0, 0]);
    let c = checksum::checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    let out = l.run(&[f]);
    assert!(out.is_empty());
    assert_eq!(l.count(Reason::IcmpSuppressed), 1);
}

#[test]
fn icmp_errors_are_rate_limited() {
    let mut l = lab_with(GraphConfig {
        icmp_rate: 1,
        icmp_burst: 3,
        ..GraphConfig::default()
    });
    let frames: Vec<_> = (0..10)
        .map(|_| frame4(H0_V4, ip4("10.1.2.3"), 1, false, 0))
        .collect();
    let out = l.run(&frames);
    assert_eq!(out.len(), 3);
    assert_eq!(l.count(Reason::IcmpRateLimited), 7);
}

/// One destination gets 6 errors, then one a second, as from Linux; another destination
/// still gets its own; "fragmentation needed" and "packet too big" are not limited per
/// destination (path MTU discovery needs every one).
#[test]
fn icmp_errors_are_limited_per_destination() {
    let mut l = lab();
    let ttl1: Vec<_> = (0..50)
        .map(|_| frame4(H0_V4, ip4("10.1.2.3"), 1, false, 0))
        .collect();
    assert_eq!(l.run(&ttl1).len(), 6);
    assert_eq!(l.count(Reason::IcmpRateLimitedPeer), 44);
    let other = frame4(H0_V4 + 1, ip4("10.1.2.3"), 1, false, 0);
    assert_eq!(l.run(&[other]).len(), 1, "another source is answered");
    let v6: Vec<_> = (0..20)
        .map(|_| frame6(H0_V6, DST6, 1, 17, &udp6(4)))
        .collect();
    assert_eq!(l.run(&v6).len(), 6);
    let big: Vec<_> = (0..20)
        .map(|_| frame4(H0_V4, ip4("172.16.1.1"), 64, true, 1000))
        .collect();
    assert_eq!(l.run(&big).len(), 20, "frag-needed to the same source");
    let big6: Vec<_> = (0..20)
        .map(|_| frame6(H0_V6, ip6("2001:db8:3::1"), 64, 17, &udp6(1000)))
        .collect();
    assert_eq!(l.run(&big6).len(), 20, "packet-too-big to the same source");
}

#[test]
fn ecmp_is_stable_per_flow_and_uses_all_members() {
    let mut l = lab();
    let mut seen = std::collections::HashMap::new();
    for round in 0..2 {
        for i in 0..64u32 {
            let f = frame4(H0_V4 + i, ip4("100.64.0.1"), 64, false, 4);
            let out = l.run(&[f]);
            let mac: [u8; 6] = out[0].1[0..6].try_into().unwrap();
            if round == 0 {
                seen.insert(i, mac);
            } else {
                assert_eq!(seen[&i], mac, "flow {i} moved between members");
            }
        }
    }
    let members: std::collections::HashSet<_> = seen.values().collect();
    assert_eq!(members.len(), 2, "both ECMP members used");
}

#[test]
fn forwards_ipv6_and_decrements_hop_limit() {
    let mut l = lab();
    let out = l.run(&[frame6(H0_V6, DST6, 64, 17, &udp6(50))]);
    assert_eq!(out.len(), 1);
    let (port, f) = &out[0];
    assert_eq!(*port, 1);
    assert_eq!(&f[0..6], &PEER1);
    assert_eq!(f[14 + 7], 63);
    assert_eq!(u16::from_be_bytes([f[12], f[13]]), 0x86dd);
    assert_eq!(l.count(Reason::Ip6Forwarded), 1);
}

fn check_icmp6_error(f: &[u8], ty: u8, code: u8) -> u32 {
    let ip = wire::Ipv6Packet::new_checked(&f[14..]).unwrap();
    assert_eq!(ip.next_header(), 58);
    assert_eq!(ip.src_addr(), R0_V6);
    assert_eq!(ip.dst_addr(), H0_V6);
    let icmp = ip.payload();
    assert_eq!((icmp[0], icmp[1]), (ty, code));
    let sum = checksum::pseudo_v6(&R0_V6, &H0_V6, 58, icmp.len() as u32) + checksum::sum(icmp);
    assert_eq!(checksum::fold(sum), 0xffff, "ICMPv6 checksum");
    assert!(40 + icmp.len() <= 1280);
    let quote = wire::Ipv6Packet::new_unchecked(&icmp[8..]);
    assert_eq!(quote.src_addr(), H0_V6);
    u32::from_be_bytes([icmp[4], icmp[5], icmp[6], icmp[7]])
}

#[test]
fn ipv6_errors_hop_limit_no_route_too_big() {
    let mut l = lab();
    let out = l.run(&[frame6(H0_V6, DST6, 1, 17, &udp6(10))]);
    check_icmp6_error(&out[0].1, 3, 0);
    assert_eq!(l.count(Reason::Ip6HopLimitExpired), 1);

    let out = l.run(&[frame6(H0_V6, ip6("2001:db8:99::1"), 64, 17, &udp6(10))]);
    check_icmp6_error(&out[0].1, 1, 0);
    assert_eq!(l.count(Reason::Ip6NoRoute), 1);

    let out = l.run(&[frame6(H0_V6, ip6("2001:db8:3::1"), 64, 17, &udp6(1000))]);
    assert_eq!(out.len(), 1);
    assert_eq!(check_icmp6_error(&out[0].1, 2, 0), 576);
    assert_eq!(l.count(Reason::Ip6TooBig), 1);
}

#[test]
fn ipv6_drops_and_punts() {
    let cases = [
        (
            frame6(ip6("fe80::1"), DST6, 64, 17, &udp6(4)),
            Reason::Ip6LinkLocalSrc,
        ),
        (
            frame6(ip6("ff02::1"), DST6, 64, 17, &udp6(4)),
            Reason::Ip6MartianSrc,
        ),
        (
            frame6(H0_V6, ip6("::1"), 64, 17, &udp6(4)),
            Reason::Ip6MartianDst,
        ),
        (
            frame6(H0_V6, ip6("ff02::5"), 1, 89, &udp6(4)),
            Reason::PuntMulticast,
        ),
        (
            frame6(H0_V6, ip6("fe80::2"), 255, 58, &udp6(4)),
            Reason::PuntLinkLocal,
        ),
        (frame6(H0_V6, R0_V6, 64, 58, &udp6(4)), Reason::PuntLocal),
    ];
    for (f, reason) in cases {
        let mut l = lab();
        let out = l.run(&[f]);
        assert!(out.is_empty(), "{reason:?}");
        assert_eq!(l.count(reason), 1, "{reason:?}");
    }
    let mut l = lab();
    let mut f = frame6(H0_V6, DST6, 64, 17, &udp6(4));
    f[14] = 0x40;
    l.run(&[f.clone()]);
    assert_eq!(l.count(Reason::Ip6BadVersion), 1);
    f[14] = 0x60;
    f[18..20].copy_from_slice(&500u16.to_be_bytes());
    l.run(&[f]);
    assert_eq!(l.count(Reason::Ip6BadLength), 1);
}

/// A generator of hostile frames: valid IPv4/IPv6 frames truncated anywhere and with
/// random bytes overwritten.
fn hostile() -> impl Strategy<Value = Vec<u8>> {
    let base = prop_oneof![
        (0u8..=255, 0usize..300, any::<bool>()).prop_map(|(ttl, n, df)| frame4(
            H0_V4,
            ip4("10.9.8.7"),
            ttl,
            df,
            n
        )),
        (0u8..=255, 0usize..300).prop_map(|(ttl, n)| frame4(
            H0_V4,
            ip4("172.16.1.1"),
            ttl,
            false,
            n + 600
        )),
        (0u8..=255, 0usize..300).prop_map(|(hop, n)| frame6(H0_V6, DST6, hop, 17, &udp6(n))),
        (0usize..200).prop_map(|n| frame6(H0_V6, DST6, 9, 60, &vec![60u8; n])),
        proptest::collection::vec(any::<u8>(), 0..120),
        // Jumbo frames (big buffers), fragmented or answered.
        (0u8..=255, 1500usize..9160, any::<bool>()).prop_map(|(ttl, n, df)| frame4(
            H0_V4,
            ip4("10.9.8.7"),
            ttl,
            df,
            n
        )),
        (0u8..=255, 1500usize..9140).prop_map(|(hop, n)| frame6(H0_V6, DST6, hop, 17, &udp6(n))),
    ];
    (
        base,
        proptest::collection::vec((0usize..9200, any::<u8>()), 0..8),
        prop_oneof![0usize..1600, 1600usize..9300],
    )
        .prop_map(|(mut f, flips, cut)| {
            for (i, b) in flips {
                if !f.is_empty() {
                    let k = i % f.len();
                    f[k] = b;
                }
            }
            f.truncate(cut.max(1));
            f
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]
    #[test]
    fn hostile_frames_never_panic_and_are_all_accounted_for(frames in proptest::collection::vec(hostile(), 1..40)) {
        let mut l = lab();
        let n = frames.len() as u64;
        let out = l.run(&frames); // also asserts buffer conservation
        let s = l.counters.snapshot();
        // Every input packet is forwarded (possibly as fragments), answered with an ICMP
        // error, dropped or punted — exactly one of them.
        let fwd = s.get(Reason::Ip4Forwarded) + s.get(Reason::Ip6Forwarded);
        let errors_out = out.iter().filter(|(_, f)| {
            (f.len() > 23 && f[12..14] == [8, 0] && f[23] == 1 && u32::from_be_bytes([f[26], f[27], f[28], f[29]]) == R0_V4)
                || (f.len() > 20 && f[12..14] == [0x86, 0xdd] && f[20] == 58 && f[22..38] == R0_V6)
        }).count() as u64;
        let icmp_drops = s.get(Reason::Ip4TtlExpired) + s.get(Reason::Ip4NoRoute) + s.get(Reason::Ip4FragNeeded)
            + s.get(Reason::Ip6HopLimitExpired) + s.get(Reason::Ip6NoRoute) + s.get(Reason::Ip6TooBig);
        let final_drops = s.drops() - icmp_drops;
        prop_assert_eq!(fwd + errors_out + final_drops + s.punts(), n, "counters: {:?}", s.nonzero());
    }
}

// ---- Packet trace (`trace add`) and capture ----

use dataplane::capture::{self, CaptureArm, Direction};
use dataplane::trace::{self, Filter, Pred, Prefix, Step, Term, TraceArm, TraceHandle};

impl Lab {
    /// Attach a tracer armed for `count` packets matching `filter`.
    fn trace(&mut self, count: u32, filter: Filter) -> TraceHandle {
        let (mut h, t) = trace::channel(256);
        self.graph.set_tracer(t);
        h.arm(TraceArm { count, filter }).unwrap();
        h
    }
}

fn steps_of(h: &mut TraceHandle) -> Vec<Vec<Step>> {
    std::iter::from_fn(|| h.pop())
        .map(|r| r.steps().to_vec())
        .collect()
}

fn eth(ethertype: u16) -> Step {
    Step::EthernetInput {
        ethertype,
        vlan: None,
        l2_mcast: false,
    }
}

#[test]
fn trace_shows_the_path_of_a_routed_packet() {
    let mut l = lab();
    let mut h = l.trace(10, Filter::default());
    l.run(&[frame4(H0_V4, ip4("10.1.2.3"), 64, true, 100)]);
    let t = steps_of(&mut h);
    assert_eq!(t.len(), 1);
    let s = &t[0];
    assert_eq!(s.len(), 5, "{s:?}");
    assert_eq!(s[0], eth(0x0800));
    assert_eq!(s[1], Step::IpInput { v6: false });
    assert!(
        matches!(
            s[2],
            Step::Lookup {
                v6: false,
                port: 1,
                ..
            }
        ),
        "{s:?}"
    );
    assert_eq!(
        s[3],
        Step::Rewrite {
            v6: false,
            ttl: 64,
            new_ttl: 63,
            port: 1,
            src_mac: MAC1,
            dst_mac: PEER1
        }
    );
    assert_eq!(s[4], Step::Tx { port: 1 });

    // IPv6 takes the same shape.
    l.run(&[frame6(H0_V6, DST6, 64, 17, &udp6(8))]);
    let s = &steps_of(&mut h)[0];
    assert_eq!(s[0], eth(0x86dd));
    assert_eq!(s[1], Step::IpInput { v6: true });
    assert!(matches!(
        s[3],
        Step::Rewrite {
            v6: true,
            ttl: 64,
            new_ttl: 63,
            ..
        }
    ));
    assert_eq!(s[4], Step::Tx { port: 1 });
}

#[test]
fn trace_shows_drops_and_icmp_errors() {
    let mut l = lab();
    let mut h = l.trace(10, Filter::default());
    l.run(&[frame4(H0_V4, ip4("203.0.113.9"), 64, false, 8)]);
    assert_eq!(
        steps_of(&mut h),
        vec![vec![
            eth(0x0800),
            Step::IpInput { v6: false },
            Step::Drop(Reason::Ip4Blackhole)
        ]]
    );
    // No route: counted, answered with an ICMP error that is itself routed back.
    l.run(&[frame4(H0_V4, ip4("8.8.8.8"), 64, false, 8)]);
    let s = &steps_of(&mut h)[0];
    assert_eq!(s[2], Step::ToIcmp(Reason::Ip4NoRoute));
    assert_eq!(
        s[3],
        Step::IcmpError {
            v6: false,
            ty: 3,
            code: 0
        }
    );
    assert!(matches!(s[4], Step::Lookup { port: 0, .. }));
    assert_eq!(s[6], Step::Tx { port: 0 });
    // Header errors are drops of ip4-input.
    let mut bad = frame4(H0_V4, ip4("10.1.2.3"), 64, false, 8);
    bad[24] ^= 0xff;
    l.run(&[bad]);
    assert_eq!(
        steps_of(&mut h),
        vec![vec![eth(0x0800), Step::Drop(Reason::Ip4BadChecksum)]]
    );
}

#[test]
fn trace_shows_punts() {
    let mut l = lab();
    let mut h = l.trace(10, Filter::default());
    l.run(&[frame4(H0_V4, R0_V4, 64, false, 8)]);
    assert_eq!(
        steps_of(&mut h),
        vec![vec![
            eth(0x0800),
            Step::IpInput { v6: false },
            Step::Punt(Reason::PuntLocal)
        ]]
    );
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&PEER0);
    arp.extend_from_slice(&[0x08, 0x06]);
    arp.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&[0; 20]);
    l.run(&[arp]);
    assert_eq!(
        steps_of(&mut h),
        vec![vec![
            Step::EthernetInput {
                ethertype: 0x0806,
                vlan: None,
                l2_mcast: true
            },
            Step::Punt(Reason::PuntArp)
        ]]
    );
}

#[test]
fn trace_honours_filter_count_and_disarm() {
    let mut l = lab();
    let mut f = Filter::default();
    f.push(Term {
        negate: false,
        pred: Pred::Dst(Prefix {
            v6: false,
            addr: ip4("10.0.0.0") as u128,
            len: 8,
        }),
    });
    let mut h = l.trace(2, f);
    let frames: Vec<_> = (0..5)
        .flat_map(|k| {
            [
                frame4(H0_V4, ip4("10.0.0.1") + k, 64, false, 8),
                frame4(H0_V4, ip4("172.16.0.1") + k, 64, false, 8),
            ]
        })
        .collect();
    l.run(&frames);
    let recs: Vec<_> = std::iter::from_fn(|| h.pop()).collect();
    assert_eq!(recs.len(), 2, "count limit");
    for r in &recs {
        assert_eq!(r.head()[30], 10, "destination in 10/8");
        assert!(matches!(r.steps()[2], Step::Lookup { port: 1, .. }));
    }
    // Budget spent: later packets are not traced.
    l.run(&frames);
    assert!(h.pop().is_none());
    // Re-armed, then disarmed before any traffic: nothing.
    h.arm(TraceArm {
        count: 5,
        filter: Filter::default(),
    })
    .unwrap();
    h.arm(TraceArm {
        count: 0,
        filter: Filter::default(),
    })
    .unwrap();
    l.run(&frames);
    assert!(h.pop().is_none());
    // Port filter.
    let mut f = Filter::default();
    f.port = Some(1);
    h.arm(TraceArm {
        count: 5,
        filter: f,
    })
    .unwrap();
    l.run(&frames); // all arrive on port 0
    assert!(h.pop().is_none());
}

#[test]
fn no_trace_when_not_armed() {
    let mut l = lab();
    let (mut h, t) = trace::channel(16);
    l.graph.set_tracer(t);
    l.run(&[frame4(H0_V4, ip4("10.1.2.3"), 64, false, 8)]);
    assert!(h.pop().is_none());
}

/// A port that receives from a list and keeps what it sends.
struct QueuePort {
    rx: std::collections::VecDeque<Vec<u8>>,
    id: u16,
    sent: Vec<Vec<u8>>,
}

impl dataplane::worker::Port<Arena> for QueuePort {
    fn rx_burst(&mut self, mem: &mut Arena, v: &mut Vector) -> usize {
        let mut n = 0;
        while v.len < dataplane::VECTOR_SIZE {
            let Some(f) = self.rx.pop_front() else { break };
            let Some(p) = mem.load(&f, self.id) else {
                break;
            };
            v.push(p);
            n += 1;
        }
        n
    }
    fn tx_burst(&mut self, mem: &mut Arena, pkts: &[Pkt]) -> usize {
        for p in pkts {
            self.sent.push(mem.data(p).to_vec());
            mem.free(p.buf);
        }
        pkts.len()
    }
}

#[test]
fn capture_copies_both_directions_up_to_the_count_without_disturbing_forwarding() {
    let mut l = lab();
    let (mut h, c) = capture::channel(64);
    l.graph.set_capturer(c);
    let port = |id, frames: Vec<Vec<u8>>| QueuePort {
        rx: frames.into(),
        id,
        sent: Vec::new(),
    };
    let to_r1: Vec<_> = (0..4)
        .map(|k| frame4(H0_V4, ip4("10.0.0.1") + k, 64, false, 8 + k as usize))
        .collect();
    let mut ports = vec![port(0, to_r1.clone()), port(1, vec![])];
    let mut v = Vector::default();
    // Idle: nothing captured.
    dataplane::worker::poll_once(
        &mut l.graph,
        &mut l.arena,
        &mut ports,
        &mut v,
        &mut l.out,
        0,
    );
    assert!(h.pop().is_none());
    assert_eq!(ports[1].sent.len(), 4);

    h.arm(CaptureArm {
        session: 1,
        port: 1,
        dir: Direction::Both,
        count: 3,
        snaplen: 2048,
    })
    .unwrap();
    ports[0].rx = to_r1.clone().into();
    dataplane::worker::poll_once(
        &mut l.graph,
        &mut l.arena,
        &mut ports,
        &mut v,
        &mut l.out,
        0,
    );
    assert_eq!(
        ports[1].sent.len(),
        8,
        "capturing must not change forwarding"
    );
    let got: Vec<_> = std::iter::from_fn(|| h.pop()).collect();
    assert_eq!(got.len(), 3, "count limit");
    for (r, sent) in got.iter().zip(&ports[1].sent[4..]) {
        assert_eq!(r.dir, Direction::Tx);
        assert_eq!(r.bytes(), &sent[..]);
        assert_eq!(r.orig_len as usize, sent.len());
    }

    // Rx on port 0 with a snap length.
    h.arm(CaptureArm {
        session: 2,
        port: 0,
        dir: Direction::Rx,
        count: 100,
        snaplen: 20,
    })
    .unwrap();
    ports[0].rx = to_r1.clone().into();
    dataplane::worker::poll_once(
        &mut l.graph,
        &mut l.arena,
        &mut ports,
        &mut v,
        &mut l.out,
        0,
    );
    let got: Vec<_> = std::iter::from_fn(|| h.pop()).collect();
    assert_eq!(got.len(), 4);
    for (r, f) in got.iter().zip(&to_r1) {
        assert_eq!((r.session, r.dir), (2, Direction::Rx));
        assert_eq!(r.bytes(), &f[..20]);
        assert_eq!(r.orig_len as usize, f.len());
    }
    assert_eq!(l.arena.free_count(), 512, "no buffer leaked");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
    /// Tracing changes nothing about what the graph does, whatever the input.
    #[test]
    fn traced_graph_decides_like_the_untraced_one(frames in proptest::collection::vec(hostile(), 1..40)) {
        let mut plain = lab();
        let mut traced = lab();
        let mut h = traced.trace(1000, Filter::default());
        let a = plain.run(&frames);
        let b = traced.run(&frames);
        prop_assert_eq!(a, b);
        prop_assert_eq!(plain.counters.snapshot(), traced.counters.snapshot());
        let recs: Vec<_> = std::iter::from_fn(|| h.pop()).collect();
        prop_assert_eq!(recs.len(), frames.len().min(trace::MAX_PER_VECTOR));
        for r in recs {
            // Every traced packet ends somewhere: a transmit, a drop or a punt.
            let last = r.steps().last().copied();
            prop_assert!(
                matches!(last, Some(Step::Tx { .. } | Step::Drop(_) | Step::Punt(_) | Step::Fragmented { .. })),
                "{:?}", r.steps()
            );
        }
    }
}

/// On a port whose frames cannot go back to the kernel (AF_XDP), what would be punted is a
/// counted drop, except the signal of an unresolved next hop, which the control thread needs.
#[test]
fn punts_that_cannot_reach_the_kernel_are_counted_as_drops() {
    let mut l = lab();
    l.graph
        .set_interfaces(Arc::new(lab_interfaces(PuntPath::Unreachable)));
    l.run(&[frame4(H0_V4, R0_V4, 64, false, 8)]);
    assert_eq!(l.count(Reason::PuntNoKernelPath), 1);
    assert_eq!(l.count(Reason::PuntLocal), 0);
    assert!(l.punts.pop().is_err(), "nothing queued");
    l.run(&[frame4(H0_V4, ip4("198.51.100.7"), 64, false, 8)]);
    assert_eq!(l.count(Reason::PuntUnresolved), 1);
    assert_eq!(l.punts.pop().unwrap().reason, Reason::PuntUnresolved);
}

// ---- Feature arcs ----

use dataplane::feature::{
    ArcId, Batch, Feature, FeatureCx, FeatureNode, FeatureSpec, FeatureState, Noop, Registry,
};

/// A test feature: `f` decides for each packet (its position in the batch).
type PerPacket = fn(&mut FeatureCx<'_>, &mut Batch<'_>, usize);

struct TestFeature {
    spec: FeatureSpec,
    f: PerPacket,
}

impl FeatureNode for TestFeature {
    fn process(&mut self, cx: &mut FeatureCx<'_>, b: &mut Batch<'_>) {
        for k in 0..b.len() {
            (self.f)(cx, b, k);
        }
    }
}

impl Feature for TestFeature {
    fn spec(&self) -> FeatureSpec {
        self.spec
    }
    fn node(&self, _: usize) -> Box<dyn FeatureNode> {
        Box::new(TestFeature {
            spec: self.spec,
            f: self.f,
        })
    }
}

fn test_feature(
    name: &'static str,
    arc: ArcId,
    after: &'static [&'static str],
    f: PerPacket,
) -> Arc<dyn Feature> {
    Arc::new(TestFeature {
        spec: FeatureSpec {
            name,
            arc,
            before: &[],
            after,
            drops: &[("unexpected", "not what the test feature expected")],
        },
        f,
    })
}

/// The IPv4 TOS byte of packet `k` of a batch.
fn tos(cx: &mut FeatureCx<'_>, b: &Batch<'_>, k: usize) -> u8 {
    let p = b.pkt(k).unwrap();
    cx.mem.frame(p.buf)[p.off as usize + p.l3 as usize + 1]
}

fn set_tos(cx: &mut FeatureCx<'_>, b: &Batch<'_>, k: usize, v: u8) {
    let p = b.pkt(k).unwrap();
    cx.mem.frame_mut(p.buf)[p.off as usize + p.l3 as usize + 1] = v;
}

impl Lab {
    /// Register `features` and enable on interface `i` the names `enabled[i]`.
    fn features(
        &mut self,
        features: Vec<Arc<dyn Feature>>,
        enabled: &[&[&'static str]],
    ) -> Arc<Registry> {
        let r = Arc::new(Registry::new(features).unwrap());
        self.graph.set_features(r.clone(), 0);
        self.enable(&r, enabled);
        r
    }
    fn enable(&mut self, r: &Registry, enabled: &[&[&'static str]]) {
        let s = r
            .state(2, |i| enabled.get(i).map_or(vec![], |e| e.to_vec()))
            .unwrap();
        self.graph.set_feature_state(Arc::new(s));
    }
    fn feature_count(&self, r: &Registry, name: &str, slot: usize) -> u64 {
        let base = r.get(r.id(name).unwrap()).unwrap().counter_base;
        self.counters.feature(base + slot)
    }
}

/// The tests' two ordered features: `mark-a` turns TOS 0 into 1, `mark-b` (after it) 1 into
/// 2; each drops anything else. Registered b first, so only the constraint orders them.
fn marks() -> Vec<Arc<dyn Feature>> {
    vec![
        test_feature("mark-b", ArcId::Ip4Unicast, &["mark-a"], |cx, b, k| {
            if tos(cx, b, k) == 1 {
                set_tos(cx, b, k, 2)
            } else {
                b.drop(k, 0)
            }
        }),
        test_feature("mark-a", ArcId::Ip4Unicast, &[], |cx, b, k| {
            if tos(cx, b, k) == 0 {
                set_tos(cx, b, k, 1)
            } else {
                // Twice: counted once.
                b.drop(k, 0);
                b.drop(k, 0);
            }
        }),
    ]
}

fn from_p1(mut f: Vec<u8>) -> Vec<u8> {
    f[..6].copy_from_slice(&MAC1);
    f
}

#[test]
fn features_run_in_their_order_on_the_interfaces_that_enable_them() {
    let mut l = lab();
    let r = l.features(marks(), &[&["mark-a", "mark-b"], &[]]);
    let out = l.run(&[frame4(H0_V4, ip4("10.1.2.3"), 64, true, 20)]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1[15], 2, "mark-a ran, then mark-b");
    assert_eq!(l.feature_count(&r, "mark-a", 0), 1);
    assert_eq!(l.feature_count(&r, "mark-b", 0), 1);
    // Port 1 has no features: its packet passes untouched.
    let back = common::run_frames(
        &mut l.graph,
        &mut l.arena,
        &mut l.out,
        1,
        &[from_p1(frame4(ip4("10.1.2.3"), H0_V4, 64, true, 20))],
    );
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].1[15], 0);
    assert_eq!(l.feature_count(&r, "mark-a", 0), 1);
    // A drop is counted under the feature's reason and as a feature drop; the buffer is
    // released (run_frames checks).
    let mut f = frame4(H0_V4, ip4("10.1.2.3"), 64, true, 20);
    f[15] = 7;
    let c = checksum::checksum(&{
        let mut h = f[14..34].to_vec();
        h[10] = 0;
        h[11] = 0;
        h
    });
    f[24..26].copy_from_slice(&c.to_be_bytes());
    assert!(l.run(&[f]).is_empty());
    assert_eq!(l.count(Reason::FeatureDrop), 1);
    assert_eq!(l.feature_count(&r, "mark-a", 1), 1, "mark-a dropped it");
    assert_eq!(l.feature_count(&r, "mark-b", 0), 1, "mark-b never saw it");
    // Only mark-b on port 0: it drops what mark-a did not mark.
    l.enable(&r, &[&["mark-b"], &[]]);
    assert!(l
        .run(&[frame4(H0_V4, ip4("10.1.2.3"), 64, true, 20)])
        .is_empty());
    assert_eq!(l.feature_count(&r, "mark-b", 1), 1);
    // None: forwarded as without features.
    l.enable(&r, &[&[], &[]]);
    let out = l.run(&[frame4(H0_V4, ip4("10.1.2.3"), 64, true, 20)]);
    assert_eq!(out[0].1[15], 0);
}

/// A feature that takes a packet (a handoff to another worker) ends its way through the
/// graph without a drop: its buffer is released, later features never see it, and
/// nothing counts it as dropped.
#[test]
fn a_taken_packet_leaves_the_graph_without_a_drop() {
    let mut l = lab();
    let r = l.features(
        vec![
            test_feature("take-odd-tos", ArcId::Ip4Unicast, &[], |cx, b, k| {
                if tos(cx, b, k) % 2 == 1 {
                    b.take(k);
                    // A drop after the take changes nothing.
                    b.drop(k, 0);
                }
            }),
            test_feature("after", ArcId::Ip4Unicast, &[], |_, _, _| {}),
        ],
        &[&["take-odd-tos", "after"], &[]],
    );
    let mut odd = frame4(H0_V4, ip4("10.1.2.3"), 64, true, 20);
    odd[15] = 1;
    let c = checksum::checksum(&{
        let mut h = odd[14..34].to_vec();
        h[10] = 0;
        h[11] = 0;
        h
    });
    odd[24..26].copy_from_slice(&c.to_be_bytes());
    // run_frames checks that every buffer came back.
    let out = l.run(&[
        odd.clone(),
        frame4(H0_V4, ip4("10.1.2.3"), 64, true, 20),
        odd,
    ]);
    assert_eq!(out.len(), 1, "only the even one is forwarded");
    assert_eq!(l.count(Reason::FeatureDrop), 0);
    assert_eq!(l.feature_count(&r, "take-odd-tos", 0), 3);
    assert_eq!(l.feature_count(&r, "take-odd-tos", 1), 0, "no drop counted");
    assert_eq!(l.feature_count(&r, "after", 0), 1);
}

#[test]
fn output_features_see_rewritten_packets_and_those_bound_for_fragmentation() {
    let mut l = lab();
    let r = l.features(
        vec![test_feature(
            "check-out",
            ArcId::Ip4Output,
            &[],
            |cx, b, k| {
                let p = *b.pkt(k).unwrap();
                let ttl = cx.mem.frame(p.buf)[p.off as usize + p.l3 as usize + 8];
                // Keyed by the egress interface; the TTL is already decremented.
                if b.iface(k) != 1 || ttl != 63 {
                    b.drop(k, 0);
                }
            },
        )],
        &[&[], &["check-out"]],
    );
    let out = l.run(&[frame4(H0_V4, ip4("10.1.2.3"), 64, true, 20)]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1[..6], PEER1, "sent rewritten");
    // Too big for 172.16/16's MTU of 576, DF clear: through the arc once, then fragmented.
    let out = l.run(&[frame4(H0_V4, ip4("172.16.1.1"), 64, false, 1000)]);
    assert!(out.len() >= 2, "fragments: {}", out.len());
    assert_eq!(l.count(Reason::Ip4Fragments), out.len() as u64);
    assert_eq!(l.feature_count(&r, "check-out", 0), 2);
    assert_eq!(l.count(Reason::FeatureDrop), 0);
    // Toward port 0 (no output features): not seen.
    common::run_frames(
        &mut l.graph,
        &mut l.arena,
        &mut l.out,
        1,
        &[from_p1(frame4(ip4("10.1.2.3"), H0_V4, 64, true, 20))],
    );
    assert_eq!(l.feature_count(&r, "check-out", 0), 2);
}

/// A port-input feature decapsulates: frames of EtherType 0x88b5 carry a whole Ethernet
/// frame after their header; the feature moves the descriptor past it, and ethernet-input
/// then routes the inner frame.
#[test]
fn port_input_features_can_decapsulate() {
    let mut l = lab();
    let r = l.features(
        vec![test_feature("decap", ArcId::PortInput, &[], |cx, b, k| {
            let p = *b.pkt(k).unwrap();
            let o = p.off as usize;
            if cx.mem.frame(p.buf)[o + 12..o + 14] == [0x88, 0xb5] && p.len > 14 {
                let d = b.pkt_mut(k).unwrap();
                d.off += 14;
                d.len -= 14;
            }
        })],
        &[&["decap"], &[]],
    );
    let inner = frame4(H0_V4, ip4("10.1.2.3"), 64, true, 20);
    let mut outer = inner[..12].to_vec();
    outer.extend_from_slice(&[0x88, 0xb5]);
    outer.extend_from_slice(&inner);
    let out = l.run(&[outer, inner.clone()]);
    assert_eq!(out.len(), 2, "both routed");
    assert_eq!(out[0].1, out[1].1);
    assert_eq!(l.feature_count(&r, "decap", 0), 2);
}

#[test]
fn features_are_enabled_and_disabled_between_vectors_losing_nothing() {
    let mut l = lab();
    let r = l.features(
        ArcId::ALL
            .iter()
            .map(|&arc| Arc::new(Noop { arc }) as Arc<dyn Feature>)
            .collect(),
        &[],
    );
    let all: Vec<&'static str> = ArcId::ALL.iter().map(|&a| Noop::name_on(a)).collect();
    let frames: Vec<Vec<u8>> = (0..32)
        .map(|k| frame4(H0_V4, ip4("10.1.2.3") + k, 64, true, 20))
        .collect();
    let mut sent = 0;
    for round in 0..100 {
        match round % 3 {
            0 => l.enable(&r, &[&all, &all]),
            1 => l.enable(&r, &[&[], &[]]),
            _ => l.graph.set_feature_state(Arc::new(FeatureState::default())),
        }
        sent += l.run(&frames).len();
    }
    assert_eq!(sent, 3200);
    assert_eq!(l.count(Reason::Ip4Forwarded), 3200);
    assert_eq!(l.counters.snapshot().drops(), 0);
    // 34 rounds with features: each packet through port-input, ip4-unicast, ip4-output.
    assert_eq!(l.feature_count(&r, "noop-ip4-unicast", 0), 34 * 32);
    assert_eq!(l.feature_count(&r, "noop-port-input", 0), 34 * 32);
    assert_eq!(l.feature_count(&r, "noop-ip4-output", 0), 34 * 32);
    assert_eq!(l.feature_count(&r, "noop-ip6-output", 0), 0);
}

#[test]
fn trace_shows_feature_nodes() {
    let mut l = lab();
    let r = l.features(marks(), &[&["mark-a", "mark-b"], &[]]);
    let mut h = l.trace(10, Filter::default());
    l.run(&[frame4(H0_V4, ip4("10.1.2.3"), 64, true, 20)]);
    let s = &steps_of(&mut h)[0];
    let (a, b) = (r.id("mark-a").unwrap(), r.id("mark-b").unwrap());
    assert_eq!(s[1], Step::IpInput { v6: false });
    assert_eq!(s[2], Step::Feature { id: a, drop: None });
    assert_eq!(s[3], Step::Feature { id: b, drop: None });
    assert!(matches!(s[4], Step::Lookup { .. }), "{s:?}");
    let mut f = frame4(H0_V4, ip4("10.1.2.3"), 64, true, 20);
    l.enable(&r, &[&["mark-b"], &[]]);
    f[15] = 0;
    l.run(&[f]);
    let s = &steps_of(&mut h)[0];
    assert_eq!(
        s.last(),
        Some(&Step::Feature {
            id: b,
            drop: Some(0)
        })
    );
    // A dropped packet's step is its drop, not a pass as well.
    assert!(!s.contains(&Step::Feature { id: b, drop: None }), "{s:?}");
}

/// A feature that drops every packet of a full vector several times drops them all, once
/// each: repeated drops never crowd later ones out.
#[test]
fn repeated_drops_of_a_full_vector_drop_every_packet_once() {
    let mut l = lab();
    let r = l.features(
        vec![test_feature(
            "drop-all",
            ArcId::Ip4Unicast,
            &[],
            |_, b, k| {
                for _ in 0..3 {
                    b.drop(k, 0);
                }
            },
        )],
        &[&["drop-all"], &[]],
    );
    let frames: Vec<Vec<u8>> = (0..256)
        .map(|k| frame4(H0_V4, ip4("10.1.2.3") + k, 64, true, 20))
        .collect();
    assert!(l.run(&frames).is_empty(), "every packet dropped");
    assert_eq!(l.count(Reason::FeatureDrop), 256);
    assert_eq!(l.feature_count(&r, "drop-all", 1), 256);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
    /// Features that let everything go on, on every arc and interface, change nothing the
    /// graph does, whatever the input; every buffer is still accounted for (run_frames).
    #[test]
    fn noop_features_on_every_arc_change_nothing(frames in proptest::collection::vec(hostile(), 1..40)) {
        let mut plain = lab();
        let mut featured = lab();
        let all: Vec<&'static str> = ArcId::ALL.iter().map(|&a| Noop::name_on(a)).collect();
        featured.features(
            ArcId::ALL.iter().map(|&arc| Arc::new(Noop { arc }) as Arc<dyn Feature>).collect(),
            &[&all, &all],
        );
        let a = plain.run(&frames);
        let b = featured.run(&frames);
        prop_assert_eq!(a, b);
        prop_assert_eq!(plain.counters.snapshot(), featured.counters.snapshot());
    }
}

/// ICMP errors the router generates re-enter the lookup, but not the unicast arcs: only
/// received packets pass them.
#[test]
fn locally_generated_icmp_errors_skip_the_unicast_arcs() {
    let mut l = lab();
    let r = l.features(marks()[1..].to_vec(), &[&["mark-a"], &[]]);
    let out = l.run(&[frame4(H0_V4, ip4("10.1.2.3"), 1, true, 20)]);
    assert_eq!(out.len(), 1, "time exceeded back to h0");
    assert_eq!(out[0].0, 0);
    assert_eq!(
        l.feature_count(&r, "mark-a", 0),
        1,
        "the received packet only"
    );
    assert_eq!(l.count(Reason::FeatureDrop), 0);
}

/// A vector whose packets come from several interfaces (the control thread's, or VLAN
/// sub-interfaces): each packet gets its own interface's features.
#[test]
fn mixed_vectors_give_each_packet_its_interfaces_features() {
    let mut l = lab();
    let r = l.features(marks()[1..].to_vec(), &[&["mark-a"], &[]]);
    let mut v = Vector::default();
    for k in 0..6u32 {
        let (port, f) = if k % 2 == 0 {
            (0, frame4(H0_V4, ip4("10.1.2.3") + k, 64, true, 20))
        } else {
            (
                1,
                from_p1(frame4(ip4("10.1.2.3") + k, H0_V4 + k, 64, true, 20)),
            )
        };
        assert!(v.push(l.arena.load(&f, port).unwrap()));
    }
    l.graph.process(&mut v, &mut l.arena, &mut l.out, 1);
    let sent: Vec<(usize, u8)> = l
        .out
        .tx
        .iter()
        .enumerate()
        .flat_map(|(port, q)| q.iter().map(move |p| (port, *p)))
        .map(|(port, p)| (port, l.arena.data(&p)[15]))
        .collect();
    assert_eq!(sent.len(), 6);
    for (port, tos) in sent {
        // Out of port 1: came in on port 0, marked; out of port 0: from port 1, not.
        assert_eq!(tos, if port == 1 { 1 } else { 0 }, "port {port}");
    }
    assert_eq!(l.feature_count(&r, "mark-a", 0), 3);
    for p in l.out.tx.iter().flatten() {
        l.arena.free(p.buf);
    }
    for &b in &l.out.free {
        l.arena.free(b);
    }
    l.out.clear();
    assert_eq!(l.arena.free_count(), 512);
}

/// Prepend an IPv4 header (protocol 4, IP-in-IP) from `R0_V4` to `dst` in front of packet
/// `k`'s IPv4 header, in its headroom, and reroute it: a tunnel's encapsulation.
fn encapsulate(cx: &mut FeatureCx<'_>, b: &mut Batch<'_>, k: usize, dst: u32) {
    let p = *b.pkt(k).unwrap();
    let at = p.off as usize + p.l3 as usize;
    let inner = p.len as usize - p.l3 as usize;
    let f = cx.mem.frame_mut(p.buf);
    let mut h = [0u8; 20];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&((20 + inner) as u16).to_be_bytes());
    h[8] = 64;
    h[9] = 4;
    h[12..16].copy_from_slice(&R0_V4.to_be_bytes());
    h[16..20].copy_from_slice(&dst.to_be_bytes());
    let c = checksum::checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    f[at - 20..at].copy_from_slice(&h);
    // An Ethernet header's room in front of it, with the EtherType.
    f[at - 22..at - 20].copy_from_slice(&0x0800u16.to_be_bytes());
    let d = b.pkt_mut(k).unwrap();
    d.off = (at - 34) as u16;
    d.l3 = 14;
    d.len = (14 + 20 + inner) as u16;
    b.reroute(k);
}

/// A feature on an output arc that encapsulates a packet and reroutes it: the outer packet
/// is looked up by its own destination and leaves by its port, as the router's own (TTL
/// as written, not counted as forwarded twice), and is not a drop. A feature that
/// reroutes forever is stopped by the round limit.
#[test]
fn a_rerouted_packet_is_routed_again_by_its_new_header() {
    let mut l = lab();
    let r = l.features(
        vec![test_feature("encap", ArcId::Ip4Output, &[], |cx, b, k| {
            encapsulate(cx, b, k, ip4("192.168.7.7"))
        })],
        &[&[], &["encap"]],
    );
    // 10/8 leaves by port 1, where encap runs; the outer header goes to 192.168/16, port 0.
    let out = l.run(&[frame4(H0_V4, ip4("10.1.2.3"), 64, true, 20)]);
    assert_eq!(out.len(), 1, "{out:?}");
    let (port, f) = &out[0];
    assert_eq!(*port, 0);
    assert_eq!(&f[..6], &PEER0, "rewritten for port 0's next hop");
    let outer = ipv4_of(f);
    assert_eq!(outer.dst_addr(), ip4("192.168.7.7"));
    assert_eq!(outer.ttl(), 64, "the router's own packet: TTL as written");
    assert_eq!(outer.protocol(), 4);
    let inner = wire::Ipv4Packet::new_checked(&f[34..]).unwrap();
    assert_eq!(inner.dst_addr(), ip4("10.1.2.3"));
    assert_eq!(inner.ttl(), 63);
    assert_eq!(l.count(Reason::Ip4Forwarded), 1);
    assert_eq!(l.count(Reason::FeatureDrop), 0);
    assert_eq!(l.feature_count(&r, "encap", 0), 1);
    assert_eq!(l.feature_count(&r, "encap", 1), 0);

    // Encapsulated toward 10/8 again: through encap again, and again, until the rounds
    // run out; dropped as a loop, every buffer released.
    let mut l = lab();
    l.features(
        vec![test_feature("encap", ArcId::Ip4Output, &[], |cx, b, k| {
            encapsulate(cx, b, k, ip4("10.9.9.9"))
        })],
        &[&[], &["encap"]],
    );
    assert!(l
        .run(&[frame4(H0_V4, ip4("10.1.2.3"), 64, true, 20)])
        .is_empty());
    assert_eq!(l.count(Reason::GraphLoop), 1);
}

/// The router's own packets sent on an interface go through its output arc
/// (`send_local`), or from the lookup (`process_local`); neither is checked as received
/// (their source is the router's) nor has its TTL changed.
#[test]
fn the_routers_own_packets_enter_at_the_lookup_or_an_output_arc() {
    let mut l = lab();
    let r = l.features(
        vec![test_feature(
            "seen-out",
            ArcId::Ip4Output,
            &[],
            |_, _, _| {},
        )],
        &[&[], &["seen-out"]],
    );
    let own = |l: &mut Lab, dst: u32, tx: u16, output: bool| {
        let f = frame4(R0_V4, dst, 64, true, 20);
        let mut v = dataplane::Vector::default();
        let mut p = l.arena.load(&f, 0).unwrap();
        p.l3 = 14;
        p.tx_port = tx;
        v.push(p);
        if output {
            l.graph.send_local(&mut v, &mut l.arena, &mut l.out, 1);
        } else {
            l.graph.process_local(&mut v, &mut l.arena, &mut l.out, 1);
        }
        let sent: Vec<(usize, u8)> = l
            .out
            .tx
            .iter()
            .enumerate()
            .flat_map(|(port, list)| list.iter().map(move |p| (port, *p)))
            .map(|(port, p)| (port, l.arena.data(&p)[22]))
            .collect();
        for p in l.out.tx.iter().flatten() {
            l.arena.free(p.buf);
        }
        for &b in &l.out.free {
            l.arena.free(b);
        }
        l.out.clear();
        sent
    };
    // From the lookup: 10/8 leaves by port 1, through its output arc, TTL unchanged.
    assert_eq!(own(&mut l, ip4("10.1.2.3"), 0, false), vec![(1, 64)]);
    assert_eq!(l.feature_count(&r, "seen-out", 0), 1);
    assert_eq!(l.count(Reason::Ip4OwnSrc), 0);
    assert_eq!(l.count(Reason::Ip4Forwarded), 0);
    // To port 1's output arc whatever the destination (a point-to-point link's).
    assert_eq!(own(&mut l, ip4("192.168.1.1"), 1, true), vec![(1, 64)]);
    assert_eq!(l.feature_count(&r, "seen-out", 0), 2);
    // Not IP at its L3 offset: dropped.
    let mut v = dataplane::Vector::default();
    let mut p = l.arena.load(&[0u8; 60], 0).unwrap();
    p.l3 = 14;
    v.push(p);
    l.graph.send_local(&mut v, &mut l.arena, &mut l.out, 1);
    assert!(l.out.tx.iter().all(Vec::is_empty));
    assert_eq!(l.out.free.len(), 1);
}

/// The router's own IPv6 packet (an encrypted tunnel packet, rerouted) above the egress
/// MTU is fragmented by ip6-frag, as its source may (RFC 8200 §4.5): fragment headers of
/// one identification, offsets in 8-byte units, M on all but the last, every fragment
/// within the MTU and the payload whole again; a transit packet of the same size gets
/// packet-too-big instead.
#[test]
fn the_routers_own_ipv6_packets_are_fragmented_transit_ones_answered() {
    let mut l = lab();
    let payload = udp6(1200);
    let dst = ip6("2001:db8:3::9");
    let mut v = dataplane::Vector::default();
    let mut p = l
        .arena
        .load(&frame6(R0_V6, dst, 64, 17, &payload), 0)
        .unwrap();
    p.l3 = 14;
    v.push(p);
    l.graph.process_local(&mut v, &mut l.arena, &mut l.out, 1);
    let frags: Vec<Vec<u8>> = l.out.tx[1]
        .iter()
        .map(|p| l.arena.data(p).to_vec())
        .collect();
    for p in l.out.tx.iter().flatten() {
        l.arena.free(p.buf);
    }
    for &b in &l.out.free {
        l.arena.free(b);
    }
    l.out.clear();
    assert_eq!(frags.len(), 3, "1208 bytes over 576: 528 + 528 + 152");
    let mut data = vec![0u8; payload.len()];
    let mut covered = 0;
    let id = u32::from_be_bytes(frags[0][14 + 44..14 + 48].try_into().unwrap());
    for (i, f) in frags.iter().enumerate() {
        let ip = &f[14..];
        assert!(ip.len() <= 576);
        assert_eq!(ip[6], 44, "fragment header");
        assert_eq!(ip[7], 64, "the router's own: hop limit untouched");
        assert_eq!(
            usize::from(u16::from_be_bytes([ip[4], ip[5]])),
            ip.len() - 40
        );
        assert_eq!(ip[40], 17, "next header of the fragmentable part");
        let om = u16::from_be_bytes([ip[42], ip[43]]);
        assert_eq!(om & 1 == 1, i + 1 < frags.len(), "M");
        assert_eq!(u32::from_be_bytes(ip[44..48].try_into().unwrap()), id);
        let off = usize::from(om & !7);
        let part = &ip[48..];
        data[off..off + part.len()].copy_from_slice(part);
        covered += part.len();
    }
    assert_eq!(covered, payload.len());
    assert_eq!(data, payload);
    assert_eq!(l.count(Reason::Ip6Fragments), 3);
    // The same from a host: packet-too-big with the MTU, nothing fragmented.
    let out = l.run(&[frame6(H0_V6, dst, 64, 17, &payload)]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1[14 + 40], 2, "ICMPv6 packet too big");
    assert_eq!(l.count(Reason::Ip6TooBig), 1);
    assert_eq!(l.count(Reason::Ip6Fragments), 3);
}
