//! The nodes in a real graph: input marking and policing, and the egress scheduler between
//! the graph and a port, over simulated time.

use std::sync::Arc;

use dataplane::feature::Registry;
use dataplane::worker::{drain_egress, flush, Port};
use dataplane::{
    Arena, Counters, Graph, GraphConfig, Interfaces, Output, PacketMemory, PortInfo, Vector,
};
use fib::{Adjacency, NextHop};

use super::*;
use crate::classify::EF;

const MAC0: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC1: [u8; 6] = [2, 0, 0, 0, 0, 2];
const PEER: [u8; 6] = [2, 0, 0, 0, 0, 0xa1];
const MS: u64 = 1_000_000;

/// A port that keeps what is sent (and frees its buffers).
#[derive(Default)]
struct Sink {
    sent: Vec<Vec<u8>>,
}

impl Port<Arena> for Sink {
    fn rx_burst(&mut self, _: &mut Arena, _: &mut Vector) -> usize {
        0
    }
    fn tx_burst(&mut self, mem: &mut Arena, pkts: &[Pkt]) -> usize {
        for p in pkts {
            self.sent.push(mem.data(p).to_vec());
            mem.free(p.buf);
        }
        pkts.len()
    }
}

struct Lab {
    graph: Graph,
    arena: Arena,
    out: Output,
    ports: Vec<Sink>,
    counters: Arc<Counters>,
    registry: Arc<Registry>,
    qos: Arc<QosShared>,
    _writer: fib::FibWriter,
}

fn lab(config: &str) -> Lab {
    let (mut w, r) = fib::new(fib::FibConfig {
        max_tbl8_v4: 16,
        max_tbl8_v6: 16,
        max_readers: 2,
    });
    let nh = w
        .add_next_hop(NextHop::Forward(Adjacency {
            port: 1,
            dst_mac: PEER,
            src_mac: MAC1,
            mtu: 1500,
        }))
        .unwrap();
    w.add4(0x0a00_0000, 8, nh).unwrap();
    let port = |name: &str, mac, ip| PortInfo {
        name: name.into(),
        mac,
        mtu: 1500,
        ip4: vec![ip],
        ..Default::default()
    };
    let ifaces = Interfaces::from_ports(vec![
        port("p0", MAC0, 0xc0a8_0001),
        port("p1", MAC1, 0x0a00_0001),
    ]);
    let counters = Arc::new(Counters::default());
    let mut graph = Graph::new(
        r.register(),
        Arc::new(ifaces),
        counters.clone(),
        None,
        GraphConfig::default(),
    );
    let qos = QosShared::new(1);
    let registry = Arc::new(Registry::new(qos.features()).unwrap());
    graph.set_features(registry.clone(), 0);
    graph.set_egress(qos.egress(0).unwrap());
    let mut l = Lab {
        graph,
        arena: Arena::new(4096),
        out: Output::new(2),
        ports: vec![Sink::default(), Sink::default()],
        counters,
        registry,
        qos,
        _writer: w,
    };
    l.apply(config);
    l
}

impl Lab {
    fn apply(&mut self, config: &str) {
        let cfg: QosConfig = toml::from_str(config).unwrap();
        assert_eq!(cfg.validate(&["p0", "p1"], &["p0", "p1"]), vec![]);
        let names = vec!["p0".to_string(), "p1".to_string()];
        self.qos.apply(&cfg, &names, 0).unwrap();
        let input = |i: usize| {
            cfg.interfaces
                .iter()
                .any(|f| f.name == names[i] && f.input.is_some())
        };
        let s = self
            .registry
            .state(2, |i| if input(i) { NAMES.to_vec() } else { vec![] })
            .unwrap();
        self.graph.set_feature_state(Arc::new(s));
        // The worker takes the new schedulers between vectors.
        self.drain(0);
    }

    /// Receive `frames` on p0 at `now`, and send what may leave.
    fn run(&mut self, frames: &[Vec<u8>], now: u64) {
        let mut v = Vector::default();
        for f in frames {
            assert!(v.push(self.arena.load(f, 0).unwrap()));
        }
        self.graph
            .process(&mut v, &mut self.arena, &mut self.out, now);
        flush(
            &mut self.graph,
            &mut self.arena,
            &mut self.ports,
            &mut self.out,
            false,
        );
        drain_egress(
            &mut self.graph,
            &mut self.arena,
            &mut self.ports,
            &mut self.out,
            now,
        );
    }

    fn drain(&mut self, now: u64) {
        drain_egress(
            &mut self.graph,
            &mut self.arena,
            &mut self.ports,
            &mut self.out,
            now,
        );
    }

    fn policed(&self) -> u64 {
        let base = self
            .registry
            .get(self.registry.id(IN4).unwrap())
            .unwrap()
            .counter_base;
        self.counters.feature(base + 1 + POLICED as usize)
    }
}

/// Ethernet + IPv4 + UDP to 10.1.2.3 with DSCP `dscp` and `len` bytes in all.
fn frame(dscp: u8, len: usize) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&MAC0);
    f.extend_from_slice(&[2, 0, 0, 0, 0, 0xa0]);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (len - 14) as u16;
    let mut ip = vec![
        0x45,
        dscp << 2 | 1,
        0,
        0,
        0,
        1,
        0x40,
        0,
        64,
        17,
        0,
        0,
        192,
        168,
        0,
        9,
        10,
        1,
        2,
        3,
    ];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let c = wire_checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0x30, 0x39, 0x30, 0x39]);
    f.extend_from_slice(&(total - 20).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.resize(len, 0xab);
    f
}

fn wire_checksum(h: &[u8]) -> u16 {
    let mut s: u32 = h
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

fn dscp(f: &[u8]) -> u8 {
    f[15] >> 2
}

const MARK: &str = r#"
[[policer]]
name = "ef-in"
kind = "srtcm"
cir = 8000
cbs = 3000
ebs = 2000
yellow = "af11"

[[policy]]
name = "edge"
default_class = "be"

[[policy.class]]
name = "ef"
dscp = ["ef"]
policer = "ef-in"

[[policy.class]]
name = "be"
mark = "cs1"

[[interface]]
name = "p0"
trusted = true
input = "edge"
"#;

#[test]
fn the_input_node_marks_and_polices_by_class() {
    let mut l = lab(MARK);
    // EF: 3,000 bytes green, 2,000 yellow (re-marked AF11), the rest red (dropped). Best
    // effort is marked CS1 and not policed. Checksums stay valid.
    let frames: Vec<Vec<u8>> = (0..6)
        .map(|_| frame(EF, 1000))
        .chain([frame(0, 1000), frame(10, 1000)])
        .collect();
    l.run(&frames, MS);
    let sent = &l.ports[1].sent;
    let marks: Vec<u8> = sent.iter().map(|f| dscp(f)).collect();
    assert_eq!(marks, [EF, EF, EF, 10, 10, 8, 8]);
    for f in sent {
        assert_eq!(wire_checksum(&f[14..34]), 0);
        assert_eq!(f[15] & 3, 1, "ECN kept");
    }
    assert_eq!(l.policed(), 1);
    let v = l.qos.view();
    assert_eq!(
        v.policers[0].colours,
        [(3, 3 * 986), (2, 2 * 986), (1, 986)]
    );

    // Untrusted: everything is best effort, marked CS1, and nothing is policed.
    l.apply(&MARK.replace("trusted = true", "trusted = false"));
    l.ports[1].sent.clear();
    l.run(&[frame(EF, 1000), frame(EF, 1000)], 2 * MS);
    let marks: Vec<u8> = l.ports[1].sent.iter().map(|f| dscp(f)).collect();
    assert_eq!(marks, [8, 8]);
    assert_eq!(l.policed(), 1);
}

const SHAPE: &str = r#"
[[policy]]
name = "wan"
default_class = "be"
shaper = "10mbit"
burst = 15000

[[policy.class]]
name = "ef"
dscp = ["ef"]
priority = 0
max_rate = "50%"

[[policy.class]]
name = "be"
weight = 1
limit = 64

[[interface]]
name = "p1"
output = "wan"
"#;

#[test]
fn the_scheduler_shapes_the_port_and_keeps_ef_whole() {
    let mut l = lab(SHAPE);
    let free0 = l.arena.free_count();
    // 10 Mbit/s is 1,250 bytes per ms. Offer 2,500: one EF frame of 500 bytes and two best
    // effort frames of 1,000 per ms, for 400 ms, sending every 100 us.
    let t0 = MS;
    for ms in 0..400u64 {
        let now = t0 + ms * MS;
        l.run(&[frame(EF, 500), frame(0, 1000), frame(0, 1000)], now);
        for k in 1..10 {
            l.drain(now + k * MS / 10);
        }
    }
    let sent = &l.ports[1].sent;
    let ef = sent.iter().filter(|f| dscp(f) == EF).count();
    let bytes: usize = sent.iter().map(Vec::len).sum();
    assert_eq!(ef, 400, "EF lost nothing");
    // 400 ms at the rate plus the burst, within a frame or two.
    let expect = 400 * 1_250 + 15_000;
    assert!(
        bytes.abs_diff(expect) <= 2_000,
        "sent {bytes} bytes, expected about {expect}"
    );
    let v = l.qos.view();
    let port = &v.ports[0];
    assert_eq!(
        (port.interface.as_str(), port.shaper_bps),
        ("p1", 10_000_000)
    );
    let (efc, be) = (&port.classes[0], &port.classes[1]);
    assert_eq!((efc.sent, efc.dropped_tail), (400, 0));
    assert!(
        be.dropped_tail > 300,
        "best effort dropped {}",
        be.dropped_tail
    );
    assert_eq!(be.depth, 64, "best effort's queue is full");
    assert_eq!(be.enqueued, be.sent + be.depth);
    // EF waits at most for the frame on the wire (1,000 bytes at 10 Mbit/s: 800 us) and
    // the next sending opportunity (100 us).
    assert!(
        efc.sojourn_max_ns <= 900_000,
        "EF waited {} ns",
        efc.sojourn_max_ns
    );
    assert!(l.graph.egress_held() > 0);
    // A change of another setting keeps the queues; removing the policy frees every buffer.
    l.apply(&format!(
        "{SHAPE}\n[[interface]]\nname = \"p0\"\ntrusted = true\n"
    ));
    l.drain(t0 + 400 * MS);
    assert!(l.graph.egress_held() > 0, "queues kept");
    l.apply("");
    l.drain(t0 + 401 * MS);
    assert_eq!(l.graph.egress_held(), 0);
    assert_eq!(l.arena.free_count(), free0, "no buffer leaked");
    assert_eq!(l.arena.bad_frees(), 0);
    // Without a scheduler, frames go straight out.
    let before = l.ports[1].sent.len();
    l.run(&[frame(0, 1000)], t0 + 402 * MS);
    assert_eq!(l.ports[1].sent.len(), before + 1);
}
