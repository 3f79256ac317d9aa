//! uRPF through the graph: spoofed sources are dropped and counted, per family and mode,
//! on the interfaces that enable it, and nowhere else.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use dataplane::feature::Registry;
use dataplane::{
    Arena, Counters, Graph, GraphConfig, Interfaces, Output, PacketMemory, PortInfo, Reason, Vector,
};
use fib::{Adjacency, NextHop};
use urpf::{Mode, Urpf};
use wire::checksum;

const MAC: [[u8; 6]; 2] = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
const PEER: [[u8; 6]; 2] = [[2, 0, 0, 0, 0, 0xa0], [2, 0, 0, 0, 0, 0xa1]];

fn v4(s: &str) -> u32 {
    u32::from(s.parse::<Ipv4Addr>().unwrap())
}
fn v6(s: &str) -> [u8; 16] {
    s.parse::<Ipv6Addr>().unwrap().octets()
}

struct Lab {
    graph: Graph,
    arena: Arena,
    out: Output,
    counters: Arc<Counters>,
    registry: Arc<Registry>,
    writer: fib::FibWriter,
}

/// Port 0: 192.168.0.0/16 and 2001:db8:1::/48; port 1: 10.0.0.0/8 and 2001:db8:2::/48.
/// 100.64.0.0/10 and 2001:db8:64::/48 are ECMP over both ports; 198.51.100.0/24 is a
/// connected subnet of port 0 (glean); 203.0.113.0/24 and 2001:db8:dead::/48 blackholes.
fn lab() -> Lab {
    let (mut w, r) = fib::new(fib::FibConfig {
        max_tbl8_v4: 64,
        max_tbl8_v6: 512,
        max_readers: 2,
    });
    let adj = |port: u16| {
        NextHop::Forward(Adjacency {
            port,
            dst_mac: PEER[port as usize],
            src_mac: MAC[port as usize],
            mtu: 1500,
        })
    };
    let p0 = w.add_next_hop(adj(0)).unwrap();
    let p1 = w.add_next_hop(adj(1)).unwrap();
    let ecmp = w
        .add_next_hop(NextHop::Ecmp(vec![p0, p1].into_boxed_slice()))
        .unwrap();
    let glean = w.add_next_hop(NextHop::Glean { port: 0 }).unwrap();
    let drop = w.add_next_hop(NextHop::Drop).unwrap();
    w.add4(v4("192.168.0.0"), 16, p0).unwrap();
    w.add4(v4("10.0.0.0"), 8, p1).unwrap();
    w.add4(v4("100.64.0.0"), 10, ecmp).unwrap();
    w.add4(v4("198.51.100.0"), 24, glean).unwrap();
    w.add4(v4("203.0.113.0"), 24, drop).unwrap();
    w.add6(&v6("2001:db8:1::"), 48, p0).unwrap();
    w.add6(&v6("2001:db8:2::"), 48, p1).unwrap();
    w.add6(&v6("2001:db8:64::"), 48, ecmp).unwrap();
    w.add6(&v6("2001:db8:dead::"), 48, drop).unwrap();
    let ifaces = Interfaces::from_ports(
        (0..2)
            .map(|i| PortInfo {
                name: format!("p{i}"),
                mac: MAC[i],
                mtu: 1500,
                ..Default::default()
            })
            .collect(),
    );
    let counters = Arc::new(Counters::default());
    let mut graph = Graph::new(
        r.register(),
        Arc::new(ifaces),
        counters.clone(),
        None,
        GraphConfig::default(),
    );
    let registry = Arc::new(Registry::new(Urpf::all()).unwrap());
    graph.set_features(registry.clone(), 0);
    Lab {
        graph,
        arena: Arena::new(256),
        out: Output::new(2),
        counters,
        registry,
        writer: w,
    }
}

fn frame4(src: u32, dst: u32) -> Vec<u8> {
    let mut f = MAC[0].to_vec();
    f.extend_from_slice(&PEER[0]);
    f.extend_from_slice(&[0x08, 0x00]);
    let mut ip = vec![0x45, 0, 0, 28, 0, 1, 0x40, 0, 64, 17, 0, 0];
    ip.extend_from_slice(&src.to_be_bytes());
    ip.extend_from_slice(&dst.to_be_bytes());
    let c = checksum::checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0x04, 0xd2, 0x16, 0x2e, 0, 8, 0, 0]);
    f
}

fn frame6(src: [u8; 16], dst: [u8; 16]) -> Vec<u8> {
    let mut f = MAC[0].to_vec();
    f.extend_from_slice(&PEER[0]);
    f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 8, 17, 64]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&[0x04, 0xd2, 0x16, 0x2e, 0, 8, 0, 0]);
    f
}

impl Lab {
    /// Enable `names` on port 0 only.
    fn enable(&mut self, names: &[&'static str]) {
        let s = self
            .registry
            .state(2, |i| if i == 0 { names.to_vec() } else { vec![] })
            .unwrap();
        self.graph.set_feature_state(Arc::new(s));
    }
    /// Send `frame` in on port 0; whether it was forwarded (to port 1).
    fn forwarded(&mut self, frame: Vec<u8>) -> bool {
        let mut v = Vector::default();
        v.push(self.arena.load(&frame, 0).unwrap());
        self.graph
            .process(&mut v, &mut self.arena, &mut self.out, 1);
        let sent = self.out.tx_count();
        for p in self.out.tx.iter().flatten() {
            self.arena.free(p.buf);
        }
        for &b in &self.out.free {
            self.arena.free(b);
        }
        self.out.clear();
        assert_eq!(self.arena.free_count(), 256, "no buffer leaked");
        sent == 1
    }
    /// Drops of feature `name` under reason `r` (0 no_route, 1 wrong_interface).
    fn drops(&self, name: &str, r: u8) -> u64 {
        let e = self.registry.get(self.registry.id(name).unwrap()).unwrap();
        self.counters.feature(e.counter_base + 1 + r as usize)
    }
}

#[test]
fn ipv4_strict_and_loose() {
    let mut l = lab();
    let to = v4("10.1.2.3");
    let cases = [
        // (source, strict passes, loose passes)
        ("192.168.7.7", true, true),   // the route back is by port 0
        ("10.9.9.9", false, true),     // by port 1: spoofed for strict
        ("8.8.8.8", false, false),     // no route
        ("203.0.113.5", false, false), // a blackhole is no way back
        ("100.64.0.5", true, true),    // ECMP, one member by port 0
        ("198.51.100.7", true, true),  // connected to port 0, neighbour unresolved
    ];
    // Without uRPF, every one is forwarded.
    for (src, _, _) in cases {
        assert!(l.forwarded(frame4(v4(src), to)), "{src} without uRPF");
    }
    for (mode, name) in [
        (Mode::Strict, "ip4-urpf-strict"),
        (Mode::Loose, "ip4-urpf-loose"),
    ] {
        l.enable(&[name]);
        for (src, strict, loose) in cases {
            let want = if mode == Mode::Strict { strict } else { loose };
            assert_eq!(l.forwarded(frame4(v4(src), to)), want, "{name} {src}");
        }
    }
    assert_eq!(l.drops("ip4-urpf-strict", urpf::WRONG_INTERFACE), 1);
    assert_eq!(l.drops("ip4-urpf-strict", urpf::NO_ROUTE), 2);
    assert_eq!(l.drops("ip4-urpf-loose", urpf::NO_ROUTE), 2);
    assert_eq!(l.drops("ip4-urpf-loose", urpf::WRONG_INTERFACE), 0);
    assert_eq!(l.counters.get(Reason::FeatureDrop), 5);
    // IPv6 is not checked by the IPv4 features.
    assert!(l.forwarded(frame6(v6("2001:db8:bad::1"), v6("2001:db8:2::9"))));
}

#[test]
fn ipv6_strict_and_loose() {
    let mut l = lab();
    let to = v6("2001:db8:2::9");
    let cases = [
        ("2001:db8:1::7", true, true),
        ("2001:db8:2::7", false, true),
        ("2001:db8:bad::1", false, false),
        ("2001:db8:dead::1", false, false),
        ("2001:db8:64::1", true, true),
    ];
    for (src, _, _) in cases {
        assert!(l.forwarded(frame6(v6(src), to)), "{src} without uRPF");
    }
    for (mode, name) in [
        (Mode::Strict, "ip6-urpf-strict"),
        (Mode::Loose, "ip6-urpf-loose"),
    ] {
        l.enable(&[name]);
        for (src, strict, loose) in cases {
            let want = if mode == Mode::Strict { strict } else { loose };
            assert_eq!(l.forwarded(frame6(v6(src), to)), want, "{name} {src}");
        }
    }
    assert_eq!(l.drops("ip6-urpf-strict", urpf::WRONG_INTERFACE), 1);
    assert_eq!(l.drops("ip6-urpf-strict", urpf::NO_ROUTE), 2);
    assert_eq!(l.drops("ip6-urpf-loose", urpf::NO_ROUTE), 2);
    // Both families at once.
    l.enable(&["ip4-urpf-strict", "ip6-urpf-strict"]);
    assert!(!l.forwarded(frame4(v4("10.9.9.9"), v4("10.1.2.3"))));
    assert!(!l.forwarded(frame6(v6("2001:db8:2::7"), to)));
}

/// A default route makes every source reachable for loose mode; strict mode still wants
/// the default route's interface.
#[test]
fn a_default_route_counts() {
    let mut l = lab();
    let p1 = l
        .writer
        .add_next_hop(NextHop::Forward(Adjacency {
            port: 1,
            dst_mac: PEER[1],
            src_mac: MAC[1],
            mtu: 1500,
        }))
        .unwrap();
    l.writer.add4(0, 0, p1).unwrap();
    l.enable(&["ip4-urpf-loose"]);
    assert!(l.forwarded(frame4(v4("8.8.8.8"), v4("10.1.2.3"))));
    l.enable(&["ip4-urpf-strict"]);
    assert!(!l.forwarded(frame4(v4("8.8.8.8"), v4("10.1.2.3"))));
    assert_eq!(l.drops("ip4-urpf-strict", urpf::WRONG_INTERFACE), 1);
}
