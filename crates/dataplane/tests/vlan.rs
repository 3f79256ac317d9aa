//! VLAN sub-interfaces in the graph: tagged frames are received on the sub-interface of
//! their tags, and what a sub-interface sends leaves by its parent with its tags pushed.

use std::sync::Arc;

use dataplane::interfaces::{PuntPath, VlanTags};
use dataplane::punt::{self, PuntConsumer};
use dataplane::{Arena, Counters, Graph, GraphConfig, Interfaces, Output, PortInfo, Reason};
use fib::{Adjacency, NextHop};
use wire::checksum;

mod common;

const MAC0: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC1: [u8; 6] = [2, 0, 0, 0, 0, 2];
const PEER0: [u8; 6] = [2, 0, 0, 0, 0, 0xa0];
const PEER_V100: [u8; 6] = [2, 0, 0, 0, 1, 0];
const PEER_QINQ: [u8; 6] = [2, 0, 0, 0, 2, 0];

/// Port 0 and port 1 untagged; port 2 = 802.1Q 100 on port 1; port 3 = 802.1ad 200 /
/// 802.1Q 300 on port 1.
const DOT1Q: VlanTags = VlanTags {
    parent: 1,
    tpid: 0x8100,
    outer: 100,
    inner: 0,
};
const QINQ: VlanTags = VlanTags {
    parent: 1,
    tpid: 0x88a8,
    outer: 200,
    inner: 300,
};

fn ip4(s: &str) -> u32 {
    u32::from(s.parse::<std::net::Ipv4Addr>().unwrap())
}

struct Lab {
    graph: Graph,
    arena: Arena,
    out: Output,
    punts: PuntConsumer,
    counters: Arc<Counters>,
    _writer: fib::FibWriter,
}

fn port(name: &str, mac: [u8; 6], ip: &str, vlan: Option<VlanTags>) -> PortInfo {
    PortInfo {
        name: name.into(),
        mac,
        mtu: 1500,
        ip4: vec![ip4(ip)],
        ip6: vec![],
        punt_path: if vlan.is_some() {
            PuntPath::Queue
        } else {
            PuntPath::KernelSawIt
        },
        vlan,
        down: false,
    }
}

fn lab() -> Lab {
    let (mut w, r) = fib::new(fib::FibConfig {
        max_tbl8_v4: 64,
        max_tbl8_v6: 64,
        max_readers: 4,
    });
    let adj = |port, dst_mac, mtu| {
        NextHop::Forward(Adjacency {
            port,
            dst_mac,
            src_mac: if port == 0 { MAC0 } else { MAC1 },
            mtu,
        })
    };
    let to0 = w.add_next_hop(adj(0, PEER0, 1500)).unwrap();
    let to_v100 = w.add_next_hop(adj(2, PEER_V100, 1500)).unwrap();
    let to_qinq = w.add_next_hop(adj(3, PEER_QINQ, 1500)).unwrap();
    let small_qinq = w.add_next_hop(adj(3, PEER_QINQ, 576)).unwrap();
    let local = w.add_next_hop(NextHop::Local).unwrap();
    w.add4(ip4("192.168.0.0"), 16, to0).unwrap();
    w.add4(ip4("10.100.0.0"), 16, to_v100).unwrap();
    w.add4(ip4("10.200.0.0"), 16, to_qinq).unwrap();
    w.add4(ip4("10.201.0.0"), 16, small_qinq).unwrap();
    w.add4(ip4("10.100.0.1"), 32, local).unwrap();
    w.add6(
        &"2001:db8:100::"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
        48,
        to_v100,
    )
    .unwrap();
    let ifaces = Interfaces::from_ports(vec![
        port("p0", MAC0, "192.168.0.1", None),
        port("p1", MAC1, "172.16.0.1", None),
        port("p1.100", MAC1, "10.100.0.1", Some(DOT1Q)),
        port("p1.qinq", MAC1, "10.200.0.1", Some(QINQ)),
    ]);
    let counters = Arc::new(Counters::default());
    let (prod, cons) = punt::queue(64);
    let graph = Graph::new(
        r.register(),
        Arc::new(ifaces),
        counters.clone(),
        Some(prod),
        GraphConfig::default(),
    );
    Lab {
        graph,
        arena: Arena::new(256),
        out: Output::new(2),
        punts: cons,
        counters,
        _writer: w,
    }
}

impl Lab {
    /// Frames received on `rx`; returns (port, bytes) of what was sent.
    fn run(&mut self, rx: u16, frames: &[Vec<u8>]) -> Vec<(u16, Vec<u8>)> {
        common::run_frames(&mut self.graph, &mut self.arena, &mut self.out, rx, frames)
    }
    fn count(&self, r: Reason) -> u64 {
        self.counters.get(r)
    }
}

/// Ethernet (to `dst_mac`, with `tags` as (TPID, VID) pairs) + IPv4 + UDP.
fn frame4(
    dst_mac: [u8; 6],
    tags: &[(u16, u16)],
    src: u32,
    dst: u32,
    ttl: u8,
    len: usize,
) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&PEER0);
    for (tpid, vid) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&vid.to_be_bytes());
    }
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let total = 28 + len;
    let mut ip = vec![0x45, 0, 0, 0, 0x12, 0x34, 0, 0, ttl, 17, 0, 0];
    ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    ip.extend_from_slice(&src.to_be_bytes());
    ip.extend_from_slice(&dst.to_be_bytes());
    let c = checksum::checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0x04, 0xd2, 0x16, 0x2e]);
    f.extend_from_slice(&((8 + len) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend((0..len).map(|i| i as u8));
    f
}

/// The tags of a frame as (TPID, VID) pairs, and where its EtherType is.
fn tags_of(f: &[u8]) -> (Vec<(u16, u16)>, usize) {
    let mut at = 12;
    let mut tags = Vec::new();
    loop {
        let t = u16::from_be_bytes([f[at], f[at + 1]]);
        if t != 0x8100 && t != 0x88a8 {
            return (tags, at);
        }
        tags.push((t, u16::from_be_bytes([f[at + 2], f[at + 3]]) & 0xfff));
        at += 4;
    }
}

#[test]
fn routed_to_a_sub_interface_leaves_by_its_parent_tagged() {
    let mut l = lab();
    let out = l.run(
        0,
        &[frame4(
            MAC0,
            &[],
            ip4("192.168.0.9"),
            ip4("10.100.3.4"),
            64,
            100,
        )],
    );
    assert_eq!(out.len(), 1, "{out:?}");
    let (port, f) = &out[0];
    assert_eq!(*port, 1, "the parent port transmits");
    assert_eq!(&f[0..6], &PEER_V100);
    assert_eq!(&f[6..12], &MAC1);
    let (tags, et) = tags_of(f);
    assert_eq!(tags, vec![(0x8100, 100)]);
    assert_eq!(&f[et..et + 2], &[0x08, 0x00]);
    let ip = wire::Ipv4Packet::new_checked(&f[et + 2..]).unwrap();
    assert_eq!(ip.ttl(), 63);
    assert!(ip.verify_checksum());
    assert_eq!(f.len(), 18 + 128);

    // QinQ: 802.1ad outer, 802.1Q inner.
    let out = l.run(
        0,
        &[frame4(
            MAC0,
            &[],
            ip4("192.168.0.9"),
            ip4("10.200.3.4"),
            64,
            100,
        )],
    );
    let (port, f) = &out[0];
    assert_eq!(*port, 1);
    assert_eq!(&f[0..6], &PEER_QINQ);
    assert_eq!(tags_of(f).0, vec![(0x88a8, 200), (0x8100, 300)]);
    assert_eq!(f.len(), 22 + 128);

    // IPv6 too.
    let mut f6 = frame4(MAC0, &[], 0, 0, 64, 0)[..12].to_vec();
    f6.extend_from_slice(&0x86ddu16.to_be_bytes());
    f6.extend_from_slice(&[0x60, 0, 0, 0, 0, 8, 17, 64]);
    f6.extend_from_slice(
        &"2001:db8:1::9"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    f6.extend_from_slice(
        &"2001:db8:100::9"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    f6.extend_from_slice(&[0x04, 0xd2, 0x16, 0x2e, 0, 8, 0, 0]);
    let out = l.run(0, &[f6]);
    let (port, f) = &out[0];
    assert_eq!(*port, 1);
    let (tags, et) = tags_of(f);
    assert_eq!(tags, vec![(0x8100, 100)]);
    assert_eq!(&f[et..et + 2], &[0x86, 0xdd]);
    assert_eq!(f[et + 2 + 7], 63, "hop limit");
    assert_eq!(l.count(Reason::Ip4Forwarded), 2);
    assert_eq!(l.count(Reason::Ip6Forwarded), 1);
    let (v100, qinq) = (l.counters.subif(0), l.counters.subif(1));
    assert_eq!((v100.tx_packets, v100.tx_bytes), (2, 146 + 18 + 48));
    assert_eq!((qinq.tx_packets, qinq.tx_bytes), (1, 150));
    assert_eq!(v100.rx_packets + qinq.rx_packets, 0);
}

#[test]
fn tagged_frames_are_received_on_the_sub_interface_of_their_tags() {
    let mut l = lab();
    // From VLAN 100 (priority bits set: they do not matter) to port 0: sent untagged.
    let out = l.run(
        1,
        &[frame4(
            MAC1,
            &[(0x8100, 0xa000 | 100)],
            ip4("10.100.0.9"),
            ip4("192.168.1.1"),
            64,
            50,
        )],
    );
    assert_eq!(out.len(), 1, "{out:?}");
    let (port, f) = &out[0];
    assert_eq!(*port, 0);
    assert_eq!(tags_of(f).0, vec![]);
    assert_eq!(f.len(), 14 + 78);
    // From the QinQ sub-interface into VLAN 100: retagged.
    let out = l.run(
        1,
        &[frame4(
            MAC1,
            &[(0x88a8, 200), (0x8100, 300)],
            ip4("10.200.0.9"),
            ip4("10.100.0.7"),
            64,
            50,
        )],
    );
    let (port, f) = &out[0];
    assert_eq!(*port, 1);
    assert_eq!(tags_of(f).0, vec![(0x8100, 100)]);
    assert_eq!(f.len(), 18 + 78);
    assert_eq!(l.count(Reason::Ip4Forwarded), 2);

    // Tags no sub-interface has, or a sub-interface's tags on another port: dropped.
    let bad: Vec<(u16, Vec<(u16, u16)>)> = vec![
        (1, vec![(0x8100, 101)]),
        (0, vec![(0x8100, 100)]),
        (1, vec![(0x88a8, 100)]),
        (1, vec![(0x8100, 200), (0x8100, 300)]),
        (1, vec![(0x88a8, 200)]),
        (1, vec![(0x88a8, 200), (0x8100, 301)]),
        (1, vec![(0x8100, 100), (0x8100, 5)]),
        (1, vec![(0x88a8, 200), (0x88a8, 300)]),
    ];
    let n = bad.len() as u64;
    for (rx, tags) in bad {
        let mac = if rx == 0 { MAC0 } else { MAC1 };
        let f = frame4(mac, &tags, ip4("10.100.0.9"), ip4("192.168.1.1"), 64, 50);
        assert!(l.run(rx, &[f]).is_empty(), "{tags:?} on port {rx}");
    }
    assert_eq!(l.count(Reason::EthVlanNoSubif), n);
    assert_eq!(l.count(Reason::Ip4Forwarded), 2);
    let (v100, qinq) = (l.counters.subif(0), l.counters.subif(1));
    assert_eq!((v100.rx_packets, v100.rx_bytes), (1, 18 + 78));
    assert_eq!((qinq.rx_packets, qinq.rx_bytes), (1, 22 + 78));
    assert_eq!((v100.tx_packets, qinq.tx_packets), (1, 0));
}

#[test]
fn a_sub_interface_punts_as_itself_and_answers_errors_from_its_address() {
    let mut l = lab();
    // To the sub-interface's own address: punted as received on it (port 2).
    let f = frame4(
        MAC1,
        &[(0x8100, 100)],
        ip4("10.100.0.9"),
        ip4("10.100.0.1"),
        64,
        8,
    );
    assert!(l.run(1, std::slice::from_ref(&f)).is_empty());
    let p = l.punts.pop().expect("punted");
    assert_eq!(p.port, 2);
    assert_eq!(p.reason, Reason::PuntLocal);
    assert_eq!(p.frame(), &f[..], "the frame as received, tags included");
    // TTL expired: time exceeded goes back into VLAN 100, from 10.100.0.1.
    let f = frame4(
        MAC1,
        &[(0x8100, 100)],
        ip4("10.100.0.9"),
        ip4("192.168.1.1"),
        1,
        8,
    );
    let out = l.run(1, &[f]);
    assert_eq!(out.len(), 1, "{out:?}");
    let (port, e) = &out[0];
    assert_eq!(*port, 1);
    let (tags, et) = tags_of(e);
    assert_eq!(tags, vec![(0x8100, 100)]);
    let ip = wire::Ipv4Packet::new_checked(&e[et + 2..]).unwrap();
    assert_eq!(ip.src_addr(), ip4("10.100.0.1"));
    assert_eq!(ip.dst_addr(), ip4("10.100.0.9"));
    assert_eq!(e[et + 2 + 20], 11, "ICMP time exceeded");
}

#[test]
fn fragments_for_a_sub_interface_are_all_tagged() {
    let mut l = lab();
    let out = l.run(
        0,
        &[frame4(
            MAC0,
            &[],
            ip4("192.168.0.9"),
            ip4("10.201.0.1"),
            64,
            1400,
        )],
    );
    assert!(out.len() >= 3, "{}", out.len());
    let mut payload = 0;
    for (port, f) in &out {
        assert_eq!(*port, 1);
        let (tags, et) = tags_of(f);
        assert_eq!(tags, vec![(0x88a8, 200), (0x8100, 300)]);
        let ip = wire::Ipv4Packet::new_checked(&f[et + 2..]).unwrap();
        assert!(ip.total_len() <= 576);
        assert!(ip.verify_checksum());
        payload += ip.total_len() as usize - ip.header_len();
    }
    assert_eq!(payload, 1408);
    let qinq = l.counters.subif(1);
    assert_eq!(qinq.tx_packets, out.len() as u64);
    assert_eq!(
        qinq.tx_bytes,
        out.iter().map(|f| f.1.len() as u64).sum::<u64>()
    );
}

/// Hostile tagged frames: valid ones with one or two tags of any TPID and id, received on
/// either port, truncated anywhere and with bytes overwritten. The graph never panics, and
/// every buffer is sent or released exactly once (`Lab::run` checks).
fn hostile() -> impl proptest::strategy::Strategy<Value = (u16, Vec<u8>)> {
    use proptest::prelude::*;
    let tpid = prop_oneof![Just(0x8100u16), Just(0x88a8u16), any::<u16>()];
    let tag = (
        tpid,
        prop_oneof![Just(100u16), Just(200), Just(300), any::<u16>()],
    );
    (
        0u16..2,
        proptest::collection::vec(tag, 0..4),
        prop_oneof![
            Just("10.100.0.7"),
            Just("10.200.0.7"),
            Just("10.201.0.7"),
            Just("192.168.1.1")
        ],
        0usize..1500,
        proptest::collection::vec((0usize..1600, any::<u8>()), 0..6),
        1usize..1600,
    )
        .prop_map(|(rx, tags, dst, len, flips, cut)| {
            let mac = if rx == 0 { MAC0 } else { MAC1 };
            let mut f = frame4(mac, &tags, ip4("10.100.0.9"), ip4(dst), 64, len);
            for (i, b) in flips {
                let k = i % f.len();
                f[k] = b;
            }
            f.truncate(cut);
            (rx, f)
        })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 300, ..Default::default() })]
    #[test]
    fn hostile_tagged_frames_never_panic_and_leak_nothing(frames in proptest::collection::vec(hostile(), 1..30)) {
        let mut l = lab();
        for (rx, f) in frames {
            for (port, out) in l.run(rx, &[f]) {
                // Whatever leaves, leaves by a port that exists, as a whole Ethernet frame.
                proptest::prop_assert!(port < 2);
                proptest::prop_assert!(out.len() >= 14);
            }
        }
    }
}
