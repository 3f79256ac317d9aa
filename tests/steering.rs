//! Two workers with flow state, end to end: `workers = 2` in the lab (each veth with two
//! queues, one AF_XDP socket per queue and worker), connection tracking and NAT44 on, and
//! real TCP, UDP and ICMP from many inside addresses, so that flows belong to both
//! workers while the links deliver their frames to either. Every packet must reach the
//! worker that owns its flow (`ip4-handoff`): replies find their flows, translations hold,
//! a stateful filter lets only replies in, and the handoffs are counted.

use lab::{Lab, H1_V4, H2_V4, R2_V4};
use serde_json::Value;

mod common;
use common::*;

/// Inside addresses h1 gets besides its own: enough that flows land on both workers (the
/// owner is a hash of the inside address; the hash is fixed, so the spread is too).
const EXTRA: std::ops::RangeInclusive<u8> = 10..=25;

const STATEFUL: &str = r#"
[firewall]
conntrack = true

[[firewall.filter]]
name = "outside-in"
hook = "ingress"
interfaces = ["r2"]
policy = "drop"

[[firewall.filter.rule]]
action = "accept"
state = ["established", "related"]

[[firewall.filter.rule]]
action = "accept"
protocol = "tcp"
destination_port = 8080
comment = "the port forward"
"#;

const NAT: &str = r#"
[[nat.source]]
outbound_interface = "r2"
source = ["192.0.2.0/24"]
translation = "masquerade"

[[nat.destination]]
destination = ["198.51.100.1"]
protocol = "tcp"
destination_port = 8080
translation_address = "192.0.2.2"
translation_port = 8000
"#;

fn add_inside_addresses(lab: &Lab) {
    let h1 = lab.h1();
    for i in EXTRA {
        let (ok, out) = sh(
            lab,
            &h1,
            &[
                "ip",
                "addr",
                "add",
                &format!("192.0.2.{i}/24"),
                "dev",
                "eth0",
            ],
        );
        assert!(ok, "{out}");
    }
}

/// A two-worker lab with `config`, h1's extra inside addresses, and h2's TCP (7000) and UDP
/// (7001) servers that answer with the address they see.
fn lab_with_peers(tag: &str, config: &str) -> (lab::Guard, [Bg; 2]) {
    let g = start_workers(tag, config, 2);
    let lab = &g.0;
    let (h1, h2) = (lab.h1(), lab.h2());
    add_inside_addresses(lab);
    ping_until_ok(lab, &h1, H2_V4);
    let peers = [peer_echo_tcp(&h2, 7000), peer_echo_udp(&h2, 7001)];
    wait_listening(lab, &h2, 7000);
    assert!(bound(lab, &h2, 7001, "-lunH"));
    (g, peers)
}

/// From every inside address of h1, TCP and UDP to h2's servers: each answers with the
/// address it saw, which must be `seen(source)`.
fn talk_from_every_inside_address(lab: &Lab, seen: impl Fn(&str) -> String) {
    let h1 = lab.h1();
    for i in EXTRA {
        let src = format!("192.0.2.{i}");
        let (ok, out) = tcp_peer_from(lab, &h1, &src, H2_V4, 7000);
        assert!(ok, "TCP from {src}: {out}");
        assert_eq!(
            out.trim(),
            seen(&src),
            "the address h2 saw over TCP from {src}"
        );
        let (ok, out) = udp_peer_from(lab, &h1, &src, H2_V4, 7001);
        assert!(ok, "UDP from {src}: {out}");
        assert_eq!(
            out.trim(),
            seen(&src),
            "the address h2 saw over UDP from {src}"
        );
    }
}

fn iperf3_bytes(out: &str) -> u64 {
    let v: Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("iperf3 JSON: {e}: {out}"));
    v["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0)
}

/// Per worker: NAT sessions held.
fn nat_sessions_per_worker(lab: &Lab) -> Vec<u64> {
    api(lab, "nat", None)["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["sessions"].as_u64().unwrap())
        .collect()
}

#[test]
fn two_workers_with_nat_and_a_stateful_filter_keep_every_flow_on_its_owner() {
    let (g, _peers) = lab_with_peers("st", &format!("{STATEFUL}{NAT}"));
    let lab = &g.0;
    let (h1, h2) = (lab.h1(), lab.h2());
    // From every inside address: TCP and UDP through masquerade, answers back.
    talk_from_every_inside_address(lab, |_| R2_V4.to_string());
    // Both workers own flows: each holds sessions (the spread of 17 inside addresses).
    let per = nat_sessions_per_worker(lab);
    assert_eq!(per.len(), 2, "{per:?}");
    assert!(per.iter().all(|&n| n > 0), "sessions per worker: {per:?}");
    let (ok, out) = ping(lab, &h1, H2_V4, &["-c", "3", "-i", "0.2"]);
    assert!(ok, "ping through masquerade: {out}");

    // Bulk TCP both ways, from two inside addresses at once.
    let _s1 = spawn(&h2, &["iperf3", "-s", "-p", "5211"]);
    let _s2 = spawn(&h2, &["iperf3", "-s", "-p", "5212"]);
    assert!(bound(lab, &h2, 5211, "-ltnH") && bound(lab, &h2, 5212, "-ltnH"));
    let run = |src: &'static str, port: &'static str, reverse: bool| {
        let (lab2, h1c) = (lab.clone(), h1.clone());
        std::thread::spawn(move || {
            let mut a = vec![
                "iperf3", "-c", H2_V4, "-p", port, "-B", src, "-t", "2", "-J",
            ];
            if reverse {
                a.push("-R");
            }
            sh(&lab2, &h1c, &a)
        })
    };
    let up = run("192.0.2.10", "5211", false);
    let down = run("192.0.2.11", "5212", true);
    for (what, j) in [("h1 -> h2", up), ("h2 -> h1", down)] {
        let (ok, out) = j.join().unwrap();
        assert!(ok && iperf3_bytes(&out) > 1_000_000, "iperf3 {what}: {out}");
    }

    // The port forward from outside, several connections (several client ports).
    let _fwd = peer_echo_tcp(&h1, 8000);
    wait_listening(lab, &h1, 8000);
    for k in 0..6 {
        let (ok, out) = tcp_peer(lab, &h2, R2_V4, 8080);
        assert!(ok, "h2 -> router:8080 -> h1:8000 ({k}): {out}");
        assert_eq!(out.trim(), H2_V4, "h1 must see h2's address");
    }
    // The stateful filter: nothing new gets in from outside but the forward.
    let (ok, out) = sh(lab, &h2, &["nc", "-z", "-w", "2", H1_V4, "7000"]);
    assert!(!ok, "a new connection from outside must be dropped: {out}");

    // The handoffs happened and were all taken.
    let handed = metric(lab, "ferrouter_handoff_events_total{event=\"handed_off\"}").unwrap_or(0.0);
    let received = metric(lab, "ferrouter_handoff_events_total{event=\"received\"}").unwrap_or(0.0);
    assert!(handed > 0.0, "no packet was handed off");
    assert!(
        received > 0.0 && received <= handed,
        "received {received} of {handed}"
    );
    assert_eq!(
        metric(lab, "ferrouter_handoff_events_total{event=\"unsteered\"}"),
        Some(0.0)
    );
    // NAT refused nothing, and no translated reply went astray (a reply at a worker that
    // does not own its session would be a forged one: `unsupported` or dropped as new).
    for reason in ["table_full", "no_port", "collision", "busy"] {
        for f in ["ip4-nat-reply", "ip4-nat-in", "ip4-nat-out"] {
            assert_eq!(feature_drops(lab, f, reason), 0, "{f} {reason}");
        }
    }
    let ct = api(lab, "conntrack", None);
    assert!(
        ct["flows"].as_array().is_some_and(|a| !a.is_empty()),
        "{ct}"
    );
}

#[test]
fn two_workers_tracking_without_nat_let_replies_in_and_nothing_else() {
    let (g, _peers) = lab_with_peers("sc", STATEFUL);
    let lab = &g.0;
    let (h1, h2) = (lab.h1(), lab.h2());
    // No NAT: h2 sees each inside address.
    talk_from_every_inside_address(lab, |src| src.to_string());
    let _s = spawn(&h2, &["iperf3", "-s", "-p", "5213"]);
    assert!(bound(lab, &h2, 5213, "-ltnH"));
    let (ok, out) = sh(
        lab,
        &h1,
        &[
            "iperf3",
            "-c",
            H2_V4,
            "-p",
            "5213",
            "-B",
            "192.0.2.12",
            "-t",
            "2",
            "-J",
            "-R",
        ],
    );
    assert!(
        ok && iperf3_bytes(&out) > 1_000_000,
        "iperf3 h2 -> h1: {out}"
    );
    let _in = peer_echo_tcp(&h1, 7100);
    wait_listening(lab, &h1, 7100);
    let (ok, out) = sh(lab, &h2, &["nc", "-z", "-w", "2", H1_V4, "7100"]);
    assert!(!ok, "a new connection from outside must be dropped: {out}");
    assert!(
        metric(lab, "ferrouter_handoff_events_total{event=\"handed_off\"}").unwrap_or(0.0) > 0.0
    );
    // Both workers track flows.
    let flows = api(lab, "conntrack", None)["flows"]
        .as_array()
        .unwrap()
        .clone();
    let workers: std::collections::BTreeSet<u64> =
        flows.iter().filter_map(|f| f["worker"].as_u64()).collect();
    assert_eq!(workers.len(), 2, "flows by worker: {flows:?}");
}
