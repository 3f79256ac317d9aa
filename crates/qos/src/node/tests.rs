//! The nodes in a real graph: input marking and policing, and the egress scheduler between
//! the graph and a port, over simulated time.

use std::sync::Arc;

use dataplane::feature::Registry;
use dataplane::interfaces::{PuntPath, VlanTags};
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
    // 10.100/16 is behind p1.100 (interface 2: VLAN 100 on p1).
    let nh = w
        .add_next_hop(NextHop::Forward(Adjacency {
            port: 2,
            dst_mac: PEER,
            src_mac: MAC1,
            mtu: 1500,
        }))
        .unwrap();
    w.add4(0x0a64_0000, 16, nh).unwrap();
    let port = |name: &str, mac, ip| PortInfo {
        name: name.into(),
        mac,
        mtu: 1500,
        ip4: vec![ip],
        ..Default::default()
    };
    let vlan = |name: &str, parent: u16, mac, id: u16, ip| PortInfo {
        vlan: Some(VlanTags {
            parent,
            tpid: 0x8100,
            outer: id,
            inner: 0,
        }),
        punt_path: PuntPath::Queue,
        ..port(name, mac, ip)
    };
    // Interface 3: VLAN 5 on p0.
    let ifaces = Interfaces::from_ports(vec![
        port("p0", MAC0, 0xc0a8_0001),
        port("p1", MAC1, 0x0a00_0001),
        vlan("p1.100", 1, MAC1, 100, 0x0a64_0001),
        vlan("p0.5", 0, MAC0, 5, 0xc0a9_0001),
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
        let all = ["p0", "p1", "p1.100", "p0.5"];
        assert_eq!(cfg.validate(&all, &["p0", "p1"], &all[2..]), vec![]);
        let names: Vec<String> = all.iter().map(|s| s.to_string()).collect();
        self.qos.apply(&cfg, &names, 2, 0).unwrap();
        // As the daemon enables them (control::features::wanted).
        let wanted = |i: usize| {
            let mut v = Vec::new();
            for f in cfg.interfaces.iter().filter(|f| f.name == names[i]) {
                if f.input.is_some() {
                    v.extend(NAMES);
                }
                if f.output.is_some() && i >= 2 {
                    v.extend(PCP_NAMES);
                }
            }
            v
        };
        let s = self.registry.state(all.len(), wanted).unwrap();
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

    /// Receive `frames` on p0 every ms for `ms` ms from `t0`, draining the egress every
    /// 100 µs.
    fn offer_for(&mut self, frames: &[Vec<u8>], t0: u64, ms: u64) {
        for i in 0..ms {
            let now = t0 + i * MS;
            self.run(frames, now);
            for k in 1..10 {
                self.drain(now + k * MS / 10);
            }
        }
    }

    /// Remove every policy at `now`: every buffer is back (`free0` of them), nothing held.
    fn remove_all(&mut self, now: u64, free0: usize) {
        self.apply("");
        self.drain(now);
        assert_eq!(self.graph.egress_held(), 0);
        assert_eq!(self.arena.free_count(), free0, "no buffer leaked");
    }

    /// The bytes p1 sent to 10.1.`b`.0/24.
    fn bytes_to(&self, b: u8) -> usize {
        self.ports[1]
            .sent
            .iter()
            .filter(|f| f[14 + 18] == b)
            .map(Vec::len)
            .sum()
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
    udp(None, [10, 1, 2, 3], 12345, dscp, len)
}

/// Ethernet (with a VLAN tag `(id, pcp)`) + IPv4 + UDP from 192.168.0.9 to `dst`, port
/// 12345 to `dport`, DSCP `dscp`, `len` bytes in all (the tag aside).
fn udp(tag: Option<(u16, u8)>, dst: [u8; 4], dport: u16, dscp: u8, len: usize) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&MAC0);
    f.extend_from_slice(&[2, 0, 0, 0, 0, 0xa0]);
    if let Some((id, pcp)) = tag {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&(u16::from(pcp) << 13 | id).to_be_bytes());
    }
    f.extend_from_slice(&[0x08, 0x00]);
    let l3 = f.len();
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
        dst[0],
        dst[1],
        dst[2],
        dst[3],
    ];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let c = wire_checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0x30, 0x39]);
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&(total - 20).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.resize(len + l3 - 14, 0xab);
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

/// [`SHAPE`] with `tables` (of its policy "wan": pipes, subports) before its interface.
fn wan_with(tables: &str) -> String {
    let interface = "[[interface]]\nname = \"p1\"\noutput = \"wan\"\n";
    format!("{}{tables}\n{interface}", SHAPE.replacen(interface, "", 1))
}

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

const MATCH: &str = r#"
[[policy]]
name = "edge"
default_class = "be"

[[policy.class]]
name = "ef"
dscp = ["ef"]
mark = "ef"
pcp = 5
pcp_in = [6]

[[policy.class]]
name = "af4"
dscp = ["af41"]
pcp = 4

[[policy.class]]
name = "be"

# SIP from 192.168/16: EF, whatever it arrived marked as.
[[policy.rule]]
class = "ef"
src = "192.168.0.0/16"
protocol = "udp"
dport = "5060-5061"

[[interface]]
name = "p0"
input = "edge"

[[interface]]
name = "p0.5"
trusted = true
input = "edge"

[[interface]]
name = "p1.100"
output = "edge"
"#;

/// The PCP of a tagged frame, and its DSCP.
fn pcp_dscp(f: &[u8]) -> (u8, u8) {
    assert_eq!(&f[12..14], &[0x81, 0x00], "tagged");
    (f[14] >> 5, f[19] >> 2)
}

#[test]
fn rules_classify_and_vlan_sub_interfaces_carry_their_classs_pcp() {
    let mut l = lab(MATCH);
    // From untrusted p0 to 10.100/16 (out by p1.100): SIP is EF by the rule (marked EF,
    // PCP 5); the next port up, and an EF-marked frame, are best effort (re-marked 0, the
    // tag's priority left at 0).
    l.run(
        &[
            udp(None, [10, 100, 0, 7], 5060, 0, 200),
            udp(None, [10, 100, 0, 7], 5061, 10, 200),
            udp(None, [10, 100, 0, 7], 5062, 0, 200),
            udp(None, [10, 100, 0, 7], 12345, EF, 200),
        ],
        MS,
    );
    let got: Vec<(u8, u8)> = l.ports[1].sent.iter().map(|f| pcp_dscp(f)).collect();
    assert_eq!(got, [(5, EF), (5, EF), (0, 0), (0, 0)]);
    for f in &l.ports[1].sent {
        assert_eq!(wire_checksum(&f[18..38]), 0);
        assert_eq!(
            u16::from_be_bytes([f[14], f[15]]) & 0xfff,
            100,
            "VLAN id kept"
        );
    }
    // Untagged out of p1 itself: no tag to mark.
    l.ports[1].sent.clear();
    l.run(&[udp(None, [10, 1, 2, 3], 5060, 0, 200)], 2 * MS);
    assert_eq!(dscp(&l.ports[1].sent[0]), EF);
    assert_eq!(&l.ports[1].sent[0][12..14], &[0x08, 0x00]);

    // Tagged on trusted p0.5: DSCP first (AF41 stays AF41, PCP 4 out), then the PCP
    // (6 is EF's: marked EF, PCP 5 out), else the default class.
    l.ports[1].sent.clear();
    l.run(
        &[
            udp(Some((5, 6)), [10, 100, 0, 7], 12345, 34, 200),
            udp(Some((5, 6)), [10, 100, 0, 7], 12345, 0, 200),
            udp(Some((5, 3)), [10, 100, 0, 7], 12345, 0, 200),
            udp(Some((5, 3)), [10, 100, 0, 7], 5060, 12, 200),
        ],
        3 * MS,
    );
    let got: Vec<(u8, u8)> = l.ports[1].sent.iter().map(|f| pcp_dscp(f)).collect();
    assert_eq!(got, [(4, 34), (5, EF), (0, 0), (5, EF)]);
}

#[test]
fn each_rule_counts_what_it_matched_per_interface() {
    let mut l = lab(MATCH);
    let to = [10, 100, 0, 7];
    l.run(
        &[
            udp(None, to, 5060, 0, 200),
            udp(None, to, 5061, 10, 200),
            udp(None, to, 5062, 0, 200),
        ],
        MS,
    );
    l.run(&[udp(Some((5, 3)), to, 5060, 12, 200)], 2 * MS);
    let rule = |l: &Lab, iface: &str| {
        let v = l.qos.view();
        let i = v.inputs.iter().find(|x| x.interface == iface).unwrap();
        assert_eq!(i.policy, "edge");
        i.rules[0].clone()
    };
    let r = rule(&l, "p0");
    assert_eq!(r.class, "ef");
    assert_eq!(r.matches, "src 192.168.0.0/16 protocol udp dport 5060-5061");
    // Two packets of 186 IP bytes on p0, one on p0.5.
    assert_eq!((r.packets, r.bytes), (2, 372));
    let r = rule(&l, "p0.5");
    assert_eq!((r.packets, r.bytes), (1, 186));
    // The same rules again: the counts go on; changed rules start from zero.
    l.apply(MATCH);
    assert_eq!(rule(&l, "p0").packets, 2);
    l.apply(&MATCH.replace("5060-5061", "5060"));
    assert_eq!(rule(&l, "p0").packets, 0);
}

/// `MATCH` with a rule that puts UDP to port 7000 in AF4, which has a PCP but no mark.
fn match_af4_rule() -> String {
    MATCH.replace(
        "[[interface]]\nname = \"p0\"",
        "[[policy.rule]]\nclass = \"af4\"\nprotocol = \"udp\"\ndport = 7000\n\n[[interface]]\nname = \"p0\"",
    )
}

#[test]
fn a_class_without_a_mark_and_every_fragment_leave_with_the_classs_pcp() {
    let mut l = lab(&match_af4_rule());
    // AF4 by the rule, not re-marked (trusted p0.5 keeps CS1): the class's PCP 4 all the
    // same, which its DSCP would not give (CS1 is no class's: the default, no PCP).
    l.run(&[udp(Some((5, 0)), [10, 100, 0, 7], 7000, 8, 200)], MS);
    let got: Vec<(u8, u8)> = l.ports[1].sent.iter().map(|f| pcp_dscp(f)).collect();
    assert_eq!(got, [(4, 8)]);
    // SIP too big for p1.100's MTU (1500), DF clear: ip4-frag cuts it, and every
    // fragment carries EF's PCP 5.
    l.ports[1].sent.clear();
    let mut big = udp(None, [10, 100, 0, 7], 5060, 0, 3000);
    big[20] = 0;
    big[24..26].copy_from_slice(&[0, 0]);
    let c = wire_checksum(&big[14..34]);
    big[24..26].copy_from_slice(&c.to_be_bytes());
    l.run(&[big], 2 * MS);
    let got: Vec<(u8, u8)> = l.ports[1].sent.iter().map(|f| pcp_dscp(f)).collect();
    assert_eq!(got, [(5, EF), (5, EF), (5, EF)]);
    for f in &l.ports[1].sent {
        assert_eq!(u16::from_be_bytes([f[14], f[15]]) & 0xfff, 100);
        assert_eq!(wire_checksum(&f[18..38]), 0);
    }
}

#[test]
fn a_carried_class_counts_only_for_the_policy_that_chose_it() {
    let aux = with_class(0, 3, 5);
    assert_eq!(class_from(aux, 3), Some(5));
    assert_eq!(class_from(aux, 4), None, "another policy's class");
    assert_eq!(class_from(0, 3), None, "none carried");
    assert_eq!(class_from(0, 0), None, "no output policy matches nothing");
    assert_eq!(class_from(with_class(0, 0, 5), 0), None);
    // The rest of aux is left alone.
    assert_eq!(with_class(0x000f_ffff, 3, 5) & !CLASS_META, 0x000f_ffff);
}

/// A policy whose rule puts UDP to port 5060 in strict-priority EF, without a mark; input
/// on p0, output on p1.
const CARRY: &str = r#"
[[policy]]
name = "edge"
default_class = "be"

[[policy.class]]
name = "ef"
dscp = ["ef"]
priority = 0

[[policy.class]]
name = "be"

[[policy.rule]]
class = "ef"
protocol = "udp"
dport = 5060

[[interface]]
name = "p0"
trusted = true
input = "edge"

[[interface]]
name = "p1"
output = "edge"
"#;

#[test]
fn the_port_scheduler_queues_in_the_class_its_own_policy_chose_on_input() {
    let enqueued = |l: &Lab| -> Vec<u64> {
        let v = l.qos.view();
        v.ports[0].classes.iter().map(|c| c.enqueued).collect()
    };
    let sip = || udp(None, [10, 1, 2, 3], 5060, 0, 200);
    let mut l = lab(CARRY);
    // DSCP 0 (best effort's) both: the rule's packet in EF all the same, unmarked.
    l.run(&[sip(), udp(None, [10, 1, 2, 3], 7000, 0, 200)], MS);
    assert_eq!(enqueued(&l), [1, 1]);
    assert!(l.ports[1].sent.iter().all(|f| dscp(f) == 0));
    // Another policy (the same classes and rule) classifies on input: its class is not
    // the port's, the DSCP is. Listed first, it renumbers "edge": the port keeps its
    // scheduler (and its counts).
    let other = CARRY[..CARRY.find("[[interface]]").unwrap()].replace("edge", "other");
    l.apply(&format!(
        "{other}{}",
        CARRY.replace("input = \"edge\"", "input = \"other\"")
    ));
    l.run(&[sip()], 2 * MS);
    assert_eq!(enqueued(&l), [1, 2], "by DSCP");
    // "edge" on input again, still second in the list: its class again.
    l.apply(&format!("{other}{CARRY}"));
    l.run(&[sip()], 3 * MS);
    assert_eq!(enqueued(&l), [2, 2], "renumbered, kept");
    assert_eq!(l.ports[1].sent.len(), 4);
}

/// WRED's drop precedence is the DSCP's: in one vector, ten AF11 frames then ten AF13 into
/// a class whose red profile drops from an average of 4 packets, its green one from 30.
/// The vector is more than the shaper's burst, so it is queued (a list the buckets can
/// take whole, with nothing queued, passes through: no queue forms, nothing to drop).
#[test]
fn wred_drops_by_the_dscps_drop_precedence() {
    let mut l = lab(r#"
[[policy]]
name = "wan"
default_class = "af1"
shaper = "100mbit"
burst = 9216

[[policy.class]]
name = "af1"
weight = 1
limit = 64
wred = { min = 30, max = 60, probability = 0.1, weight = 1, red = { min = 2, max = 4, probability = 1 } }

[[interface]]
name = "p1"
output = "wan"
"#);
    let free0 = l.arena.free_count();
    let (af11, af13) = (10, 14);
    let mut frames = vec![frame(af11, 600); 10];
    frames.extend(vec![frame(af13, 600); 10]);
    l.run(&frames, MS);
    l.drain(2 * MS);
    let sent = &l.ports[1].sent;
    let count = |d| sent.iter().filter(|f| dscp(f) == d).count();
    assert_eq!((count(af11), count(af13)), (10, 0));
    let v = l.qos.view();
    let c = &v.ports[0].classes[0];
    assert!(c.wred && !c.codel);
    assert_eq!((c.dropped_wred, c.dropped_tail, c.sent), (10, 0, 10));
    // WRED's drops freed their buffers.
    assert_eq!(l.graph.egress_held(), 0);
    assert_eq!(l.arena.free_count(), free0, "no buffer leaked");
    assert_eq!(l.arena.bad_frees(), 0);
}

/// A policy decided by the DSCP alone (no policer, no rule, no PCP) goes through the
/// input node's one-lookup path ([`InNode::plain`]): EF kept, AF42 re-marked AF41, the
/// rest re-marked CS0, ECN and checksums kept right, and each packet carries its class to
/// the port's scheduler.
#[test]
fn a_dscp_only_policy_marks_and_carries_its_class_in_one_lookup() {
    let cfg = r#"
[[policy]]
name = "edge"
default_class = "be"

[[policy.class]]
name = "ef"
dscp = ["ef"]
priority = 0

[[policy.class]]
name = "af41"
dscp = ["af41", "af42", "af43"]
mark = "af41"
weight = 40

[[policy.class]]
name = "be"
mark = "cs0"
weight = 60

[[interface]]
name = "p0"
trusted = true
input = "edge"

[[interface]]
name = "p1"
output = "edge"
"#;
    let mut l = lab(cfg);
    {
        let table = l.qos.input.load();
        let policy = table[0].as_ref().expect("p0's input policy");
        assert!(policy.plain.is_some(), "decided by the DSCP alone");
    }
    // AF42 is DSCP 36, CS1 8, AF21 18.
    l.run(
        &[
            frame(EF, 200),
            frame(36, 200),
            frame(8, 200),
            frame(18, 200),
        ],
        MS,
    );
    let sent = &l.ports[1].sent;
    let marks: Vec<u8> = sent.iter().map(|f| dscp(f)).collect();
    assert_eq!(marks, [EF, 34, 0, 0]);
    for f in sent {
        assert_eq!(wire_checksum(&f[14..34]), 0, "checksum");
        assert_eq!(f[15] & 3, 1, "ECN kept");
    }
    let v = l.qos.view();
    let enqueued: Vec<u64> = v.ports[0].classes.iter().map(|c| c.enqueued).collect();
    assert_eq!(enqueued, [1, 1, 2], "ef, af41, be");
}

#[test]
fn pipes_shape_each_destination_at_its_rate_in_the_graph() {
    // A 10 Mbit/s port with two pipes of 2 and 4 Mbit/s; 10.1.2.0/24's traffic is of no
    // pipe. Each pipe offered 2,000 bytes per ms (16 Mbit/s), no pipe 250 (2 Mbit/s): the
    // port has room for what the pipes let through.
    let config = wan_with(
        "[[policy.pipe]]
name = \"s1\"
rate = \"2mbit\"
burst = 15000
dst = \"10.1.3.0/24\"

[[policy.pipe]]
name = \"s2\"
rate = \"40%\"
burst = 15000
dst = [\"10.1.4.0/24\", \"10.1.4.128/25\"]
",
    );
    let mut l = lab(&config);
    let free0 = l.arena.free_count();
    let t0 = MS;
    l.offer_for(
        &[
            udp(None, [10, 1, 3, 9], 1, 0, 1000),
            udp(None, [10, 1, 3, 9], 1, 0, 1000),
            udp(None, [10, 1, 4, 200], 1, 0, 1000),
            udp(None, [10, 1, 4, 9], 1, 0, 1000),
            udp(None, [10, 1, 2, 3], 1, 0, 250),
        ],
        t0,
        400,
    );
    let bytes_to = |b: u8| l.bytes_to(b);
    // 400 ms at the rate plus the 15,000-byte bucket, within a frame.
    for (b, rate_bytes_per_ms) in [(3u8, 250), (4, 500)] {
        let expect = 400 * rate_bytes_per_ms + 15_000;
        let got = bytes_to(b);
        assert!(
            got.abs_diff(expect) <= 1_000,
            "10.1.{b}.0/24: {got} bytes, expected about {expect}"
        );
    }
    assert_eq!(bytes_to(2), 400 * 250, "no pipe: all of it");
    let v = l.qos.view();
    let pipes = &v.ports[0].pipes;
    assert_eq!(
        pipes
            .iter()
            .map(|p| (p.name.as_str(), p.rate_bps))
            .collect::<Vec<_>>(),
        [("s1", 2_000_000), ("s2", 4_000_000)]
    );
    assert_eq!(pipes[0].sent_bytes as usize, bytes_to(3));
    assert!(pipes[0].dropped_tail > 0 && pipes[1].dropped_tail > 0);
    assert_eq!(pipes[1].enqueued, pipes[1].sent + pipes[1].depth);
    // Renaming a pipe (and a class) changes nothing the scheduler does: the port keeps its
    // queues and its counters, and shows the new names.
    let (held, sent) = (pipes[1].depth, pipes[0].sent_bytes);
    assert!(held > 0, "packets are queued in s2");
    l.apply(
        &config
            .replace("name = \"s1\"", "name = \"line-1\"")
            .replace("name = \"be\"", "name = \"best-effort\"")
            .replace("default_class = \"be\"", "default_class = \"best-effort\""),
    );
    let v = l.qos.view();
    let pipes = &v.ports[0].pipes;
    assert_eq!(pipes[0].name, "line-1");
    assert_eq!((pipes[0].sent_bytes, pipes[1].depth), (sent, held));
    assert_eq!(pipes[1].dropped_flush, 0, "nothing flushed");
    assert!(v.ports[0].classes.iter().any(|c| c.name == "best-effort"));
    l.remove_all(t0 + 401 * MS, free0);
}

#[test]
fn a_subport_shapes_its_pipes_together_in_the_graph() {
    // A 10 Mbit/s port; subport w of 3 Mbit/s over pipes s1 and s2 of 2 Mbit/s each, both
    // offered 16 Mbit/s: together they get w's rate, about half each.
    let config = wan_with(
        "[[policy.subport]]
name = \"w\"
rate = \"3mbit\"
burst = 15000
limit = 100

[[policy.pipe]]
name = \"s1\"
subport = \"w\"
rate = \"2mbit\"
burst = 15000
dst = \"10.1.3.0/24\"

[[policy.pipe]]
name = \"s2\"
subport = \"w\"
rate = \"2mbit\"
burst = 15000
dst = \"10.1.4.0/24\"
",
    );
    let mut l = lab(&config);
    let free0 = l.arena.free_count();
    let t0 = MS;
    l.offer_for(
        &[
            udp(None, [10, 1, 3, 9], 1, 0, 1000),
            udp(None, [10, 1, 3, 9], 1, 0, 1000),
            udp(None, [10, 1, 4, 9], 1, 0, 1000),
            udp(None, [10, 1, 4, 9], 1, 0, 1000),
        ],
        t0,
        400,
    );
    let bytes_to = |b: u8| l.bytes_to(b);
    // 400 ms at 3 Mbit/s (375 bytes a ms) plus w's 15,000-byte bucket, within a frame
    // or two.
    let (a, b) = (bytes_to(3), bytes_to(4));
    let expect = 400 * 375 + 15_000;
    assert!(
        (a + b).abs_diff(expect) <= 2_000,
        "w: {} bytes, expected about {expect}",
        a + b
    );
    let share = a as f64 / (a + b) as f64;
    assert!((share - 0.5).abs() < 0.05, "s1's share of w: {share}");
    let v = l.qos.view();
    let w = &v.ports[0].subports[0];
    assert_eq!((w.name.as_str(), w.limit, w.pipes), ("w", Some(100), 2));
    assert_eq!(w.sent_bytes as usize, a + b);
    assert!(w.dropped > 0 && w.depth <= 100);
    l.remove_all(t0 + 401 * MS, free0);
}

#[test]
fn a_class_keeps_to_its_maximum_within_its_pipe_in_the_graph() {
    // A 10 Mbit/s port; pipe s1 of 4 Mbit/s whose best effort may have half of it, offered
    // 16 Mbit/s of best effort: it gets 2 Mbit/s; s2 (4 Mbit/s, no such limit) gets 4.
    let config = wan_with(
        "[[policy.pipe]]
name = \"s1\"
rate = \"4mbit\"
burst = 15000
max_rates = { be = \"50%\" }
dst = \"10.1.3.0/24\"

[[policy.pipe]]
name = \"s2\"
rate = \"4mbit\"
burst = 15000
dst = \"10.1.4.0/24\"
",
    );
    let mut l = lab(&config);
    let free0 = l.arena.free_count();
    let t0 = MS;
    let f = |b: u8| udp(None, [10, 1, b, 9], 1, 0, 1000);
    l.offer_for(&[f(3), f(3), f(4), f(4)], t0, 400);
    // 400 ms at the rate plus the 15,000-byte bucket, within a frame.
    for (b, rate_bytes_per_ms) in [(3u8, 250), (4, 500)] {
        let expect = 400 * rate_bytes_per_ms + 15_000;
        let got = l.bytes_to(b);
        assert!(
            got.abs_diff(expect) <= 1_000,
            "10.1.{b}.0/24: {got} bytes, expected about {expect}"
        );
    }
    let v = l.qos.view();
    assert_eq!(v.ports[0].pipes[0].max_bps, [("be".to_string(), 2_000_000)]);
    assert!(v.ports[0].pipes[1].max_bps.is_empty());
    l.remove_all(t0 + 401 * MS, free0);
}
