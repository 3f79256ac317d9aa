//! QoS end to end: `[qos]` in the config of `ferrouter run` in a namespace lab, with real
//! UDP traffic from iperf3. h1 sends h2 twice what r2's shaper lets through: best effort
//! at 20 Mbit/s and an EF-marked flow at 2 Mbit/s, through a shaper of 10 Mbit/s with EF
//! in a strict-priority class. What arrives is near the shaper's rate, EF loses nothing
//! and best effort is dropped, through a live change that keeps the port's queues;
//! `show qos` counts it all. Then WRED: best effort alone at twice the shaper's rate into a
//! class whose WRED holds the queue below its limit. Correctness only: the bounds
//! are generous and nothing is timed.

use serde_json::Value;

use lab::{H2_V4, H2_V6};

mod common;
use common::*;

const QOS: &str = r#"
[[qos.policy]]
name = "wan"
default_class = "be"
shaper = "10mbit"

[[qos.policy.class]]
name = "ef"
dscp = ["ef"]
priority = 0
max_rate = "50%"

[[qos.policy.class]]
name = "be"
weight = 1
limit = 128

[[qos.interface]]
name = "r1"
trusted = true
input = "wan"

[[qos.interface]]
name = "r2"
output = "wan"
"#;

/// A UDP iperf3 run of `secs` s from h1 to h2's server on `port` at `rate`, with `tos`:
/// its JSON report.
fn udp(
    lab: &lab::Lab,
    port: u16,
    rate: &str,
    tos: u8,
    secs: u32,
) -> std::thread::JoinHandle<Value> {
    udp_to(lab, H2_V4, port, rate, tos, secs)
}

/// [`udp`] to h2's address `dst`.
fn udp_to(
    lab: &lab::Lab,
    dst: &str,
    port: u16,
    rate: &str,
    tos: u8,
    secs: u32,
) -> std::thread::JoinHandle<Value> {
    let h1 = lab.h1();
    let (dst, port, rate, tos, secs) = (
        dst.to_string(),
        port.to_string(),
        rate.to_string(),
        tos.to_string(),
        secs.to_string(),
    );
    std::thread::spawn(move || {
        let out = std::process::Command::new("ip")
            .args([
                "netns", "exec", &h1, "iperf3", "-c", &dst, "-p", &port, "-u", "-b", &rate, "-l",
                "1000", "-t", &secs, "-S", &tos, "-J",
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "iperf3 to port {port}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    })
}

/// Bits per second h2 received in an iperf3 UDP report, and the datagrams lost.
fn received(v: &Value) -> (f64, u64) {
    let s = &v["end"]["sum"];
    let lost = s["lost_packets"].as_u64().unwrap_or_else(|| panic!("{v}"));
    let packets = s["packets"].as_u64().unwrap();
    let secs = s["seconds"].as_f64().unwrap();
    // What arrived: the datagrams sent less those lost, 1,000 bytes each.
    ((packets - lost) as f64 * 8000.0 / secs, lost)
}

fn class<'a>(q: &'a Value, name: &str) -> &'a Value {
    q["ports"][0]["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("class {name}: {q}"))
}

/// The tests here one at a time: each loads the 2 cores with its traffic, which would
/// disturb the other's.
static ONE_LAB: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_shaper_delivers_its_rate_and_ef_loses_nothing_while_best_effort_is_dropped() {
    let _one = ONE_LAB.lock().unwrap_or_else(|e| e.into_inner());
    let g = start("qos", QOS);
    let lab = &g.0;
    let h2 = lab.h2();
    ping_until_ok(lab, &lab.h1(), H2_V4);
    let _servers: Vec<Bg> = [5201u16, 5202]
        .iter()
        .map(|p| {
            spawn(
                &h2,
                &["iperf3", "-s", "-1", "-B", H2_V4, "-p", &p.to_string()],
            )
        })
        .collect();
    assert!(bound(lab, &h2, 5201, "-ltnH") && bound(lab, &h2, 5202, "-ltnH"));
    let secs = 5;
    // EF is DSCP 46: TOS 184.
    let base = std::fs::read_to_string(lab.config_file())
        .unwrap()
        .replace(QOS, "");
    let ef = udp(lab, 5202, "2M", 184, secs);
    let be = udp(lab, 5201, "20M", 0, secs);
    // Under that traffic, a change that leaves r2's policy as it is (a policer added)
    // keeps its queues: nothing is flushed, EF still loses nothing.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let more = format!(
        "{QOS}\n[[qos.policer]]\nname = \"spare\"\nkind = \"srtcm\"\ncir = \"1mbit\"\ncbs = 3000\nebs = 3000\n"
    );
    let (ok, out) = apply(lab, &base, &more, "live");
    assert!(ok, "{out}");
    assert!(
        out.contains("~ qos: 1 policy, 1 policer, 2 interfaces"),
        "{out}"
    );
    let (ef, be) = (ef.join().unwrap(), be.join().unwrap());
    let (ef_bps, ef_lost) = received(&ef);
    let (be_bps, be_lost) = received(&be);
    eprintln!("EF {ef_bps:.0} bit/s lost {ef_lost}; BE {be_bps:.0} bit/s lost {be_lost}");
    assert_eq!(ef_lost, 0, "EF lost datagrams: {ef}");
    assert!(be_lost > 0, "best effort at twice the rate must lose: {be}");
    // Payload at a 10 Mbit/s shaper of frames (1,042 bytes on the wire per 1,000 of
    // payload): about 9.6 Mbit/s. Generous bounds: this checks that the shaper shapes.
    let total = ef_bps + be_bps;
    assert!(
        (6.0e6..11.5e6).contains(&total),
        "delivered {total:.0} bit/s through a 10 Mbit/s shaper"
    );

    let q = api(lab, "qos", None);
    assert_eq!(q["ports"][0]["interface"], "r2", "{q}");
    assert_eq!(q["ports"][0]["shaper_bps"], 10_000_000u64, "{q}");
    let (efc, bec) = (class(&q, "ef"), class(&q, "be"));
    assert_eq!(efc["dropped_tail"], 0, "{q}");
    assert_eq!(
        efc["dropped_flush"], 0,
        "queues kept through the change: {q}"
    );
    assert_eq!(
        bec["dropped_flush"], 0,
        "queues kept through the change: {q}"
    );
    assert_eq!(q["policers"][0]["name"], "spare", "{q}");
    assert!(
        efc["sent"].as_u64().unwrap() >= ef["end"]["sum"]["packets"].as_u64().unwrap(),
        "{q}"
    );
    assert!(bec["dropped_tail"].as_u64().unwrap() > 0, "{q}");
    let text = cli(lab, &["show", "qos"]).1;
    eprintln!("{text}");
    assert!(
        text.contains("port r2 (policy wan, shaper 10Mbit)"),
        "{text}"
    );
    let tail = metric(
        lab,
        "ferrouter_qos_queue_dropped_packets_total{interface=\"r2\",class=\"be\",reason=\"tail\"}",
    );
    assert!(tail.is_some_and(|n| n > 0.0), "{tail:?}");

    // Removed live: the queues are flushed, their buffers freed, and traffic flows on
    // unshaped.
    let (ok, out) = apply(lab, &base, "", "noqos");
    assert!(ok, "{out}");
    assert!(
        out.contains("~ qos: 0 policies, 0 policers, 0 interfaces"),
        "{out}"
    );
    let q = api(lab, "qos", None);
    assert_eq!(q["ports"].as_array().map(Vec::len), Some(0), "{q}");
    ping_until_ok(lab, &lab.h1(), H2_V4);
}

const WRED: &str = r#"
[[qos.policy]]
name = "wan"
default_class = "be"
shaper = "10mbit"

[[qos.policy.class]]
name = "be"
weight = 1
limit = 256
wred = { min = 16, max = 64, probability = 0.2, weight = 3 }

[[qos.interface]]
name = "r2"
output = "wan"
"#;

/// Best effort at 20 Mbit/s through a 10 Mbit/s shaper into a class with WRED whose
/// maximum (64 packets) is far below its limit (256): WRED drops, the queue never fills.
#[test]
fn wred_drops_early_and_the_queue_never_fills() {
    let _one = ONE_LAB.lock().unwrap_or_else(|e| e.into_inner());
    let g = start("qosw", WRED);
    let lab = &g.0;
    let h2 = lab.h2();
    ping_until_ok(lab, &lab.h1(), H2_V4);
    let _server = spawn(&h2, &["iperf3", "-s", "-1", "-B", H2_V4, "-p", "5201"]);
    assert!(bound(lab, &h2, 5201, "-ltnH"));
    let be = udp(lab, 5201, "20M", 0, 3).join().unwrap();
    let (be_bps, be_lost) = received(&be);
    eprintln!("BE {be_bps:.0} bit/s lost {be_lost}");
    assert!(be_lost > 0, "best effort at twice the rate must lose: {be}");

    let q = api(lab, "qos", None);
    let c = class(&q, "be");
    assert_eq!(c["wred"], true, "{q}");
    assert_eq!(c["codel"], false, "{q}");
    assert!(c["dropped_wred"].as_u64().unwrap() > 0, "{q}");
    assert_eq!(
        c["dropped_tail"], 0,
        "WRED kept the queue below its limit: {q}"
    );
    assert!(c["sent"].as_u64().unwrap() > 0, "{q}");
    let text = cli(lab, &["show", "qos"]).1;
    eprintln!("{text}");
    assert!(text.contains("WRED"), "{text}");
    let wred = metric(
        lab,
        "ferrouter_qos_queue_dropped_packets_total{interface=\"r2\",class=\"be\",reason=\"wred\"}",
    );
    assert!(wred.is_some_and(|n| n > 0.0), "{wred:?}");
}

const PIPES: &str = r#"
[[qos.policy]]
name = "bng"
default_class = "be"
shaper = "50mbit"

[[qos.policy.class]]
name = "be"
weight = 1

[[qos.policy.subport]]
name = "wholesale"
rate = "8mbit"
limit = 1000

[[qos.policy.pipe]]
name = "sub-v4"
subport = "wholesale"
rate = "5mbit"
burst = 25000
dst = "198.51.100.2/32"

[[qos.policy.pipe_profile]]
name = "line10"
rate = "10mbit"
burst = 25000

[[qos.policy.pipe]]
name = "sub-v6"
profile = "line10"
dst = ["2001:db8:2::/64", "2001:db8:2::2/128"]

[[qos.interface]]
name = "r2"
output = "bng"
"#;

/// Two pipes behind r2's 50 Mbit/s shaper, h2's IPv4 address in one (5 Mbit/s, under a
/// subport of 8) and its IPv6 address in the other (10 Mbit/s from its profile; its
/// /128, the longer of its two prefixes), each offered twice its rate by iperf3: each
/// delivers near its own rate, and `show qos`, the API and the metrics count each pipe
/// (and show the first's subport and the second's profile).
#[test]
fn two_pipes_each_deliver_their_own_rate() {
    let _one = ONE_LAB.lock().unwrap_or_else(|e| e.into_inner());
    let g = start("qosp", PIPES);
    let lab = &g.0;
    let h2 = lab.h2();
    ping_until_ok(lab, &lab.h1(), H2_V4);
    ping_until_ok(lab, &lab.h1(), H2_V6);
    let _servers = [
        spawn(&h2, &["iperf3", "-s", "-1", "-B", H2_V4, "-p", "5201"]),
        spawn(&h2, &["iperf3", "-s", "-1", "-B", H2_V6, "-p", "5202"]),
    ];
    assert!(bound(lab, &h2, 5201, "-ltnH") && bound(lab, &h2, 5202, "-ltnH"));
    let secs = 4;
    let v4 = udp_to(lab, H2_V4, 5201, "10M", 0, secs);
    let v6 = udp_to(lab, H2_V6, 5202, "20M", 0, secs);
    let (v4, v6) = (v4.join().unwrap(), v6.join().unwrap());
    let (v4_bps, v4_lost) = received(&v4);
    let (v6_bps, v6_lost) = received(&v6);
    eprintln!(
        "IPv4 pipe {v4_bps:.0} bit/s lost {v4_lost}; IPv6 pipe {v6_bps:.0} bit/s lost {v6_lost}"
    );
    // Payload through a shaper of frames: 1,000 of 1,042 bytes (IPv4), of 1,062 (IPv6).
    // Generous bounds, as the port shaper's test has them (a worker preempted on a shared
    // host sends less; the 25,000-byte buckets add at most 50 kbit/s over 4 s): this checks
    // that each pipe shapes at its own rate.
    for (what, got, rate, payload, lost) in [
        ("IPv4", v4_bps, 5e6, 1000.0 / 1042.0, v4_lost),
        ("IPv6", v6_bps, 10e6, 1000.0 / 1062.0, v6_lost),
    ] {
        let expect = rate * payload;
        assert!(
            (0.6 * expect..1.1 * expect).contains(&got),
            "{what} pipe delivered {got:.0} bit/s, expected about {expect:.0}"
        );
        assert!(lost > 0, "{what}: twice the pipe's rate must lose");
    }

    let q = api(lab, "qos", None);
    let pipes = q["ports"][0]["pipes"]
        .as_array()
        .unwrap_or_else(|| panic!("{q}"));
    let pipe = |name: &str| {
        pipes
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("pipe {name}: {q}"))
    };
    let (p4, p6) = (pipe("sub-v4"), pipe("sub-v6"));
    assert_eq!(p4["rate_bps"], 5_000_000u64, "{q}");
    assert_eq!(p6["rate_bps"], 10_000_000u64, "{q}");
    assert_eq!(p6["profile"], "line10", "{q}");
    assert!(p4["profile"].is_null(), "{q}");
    assert_eq!(p4["subport"], "wholesale", "{q}");
    assert!(p6["subport"].is_null(), "{q}");
    for p in [p4, p6] {
        assert!(p["sent"].as_u64().unwrap() > 0, "{q}");
        assert!(p["dropped_tail"].as_u64().unwrap() > 0, "{q}");
    }
    // Each pipe sent its own datagrams (and a few of iperf3's control frames at most).
    let sent_v4 = p4["sent"].as_u64().unwrap();
    let got_v4 = v4["end"]["sum"]["packets"].as_u64().unwrap()
        - v4["end"]["sum"]["lost_packets"].as_u64().unwrap();
    assert!(
        sent_v4 >= got_v4,
        "{sent_v4} sent for {got_v4} received: {q}"
    );
    // The subport: its rate, and its one pipe's counters as its own.
    let sub = &q["ports"][0]["subports"][0];
    assert_eq!(sub["name"], "wholesale", "{q}");
    assert_eq!(sub["rate_bps"], 8_000_000u64, "{q}");
    assert_eq!(sub["pipes"], 1, "{q}");
    assert_eq!(sub["limit"], 1000, "{q}");
    assert_eq!(sub["sent"], p4["sent"], "{q}");
    assert_eq!(sub["sent_bytes"], p4["sent_bytes"], "{q}");
    let text = cli(lab, &["show", "qos"]).1;
    eprintln!("{text}");
    assert!(
        text.contains("PIPE") && text.contains("sub-v6") && text.contains("line10"),
        "{text}"
    );
    assert!(
        text.contains("SUBPORT") && text.contains("wholesale"),
        "{text}"
    );
    let tail = metric(
        lab,
        "ferrouter_qos_pipe_dropped_packets_total{interface=\"r2\",pipe=\"sub-v6\",reason=\"tail\"}",
    );
    assert!(tail.is_some_and(|n| n > 0.0), "{tail:?}");
    let sub_sent = metric(
        lab,
        "ferrouter_qos_subport_sent_packets_total{interface=\"r2\",subport=\"wholesale\"}",
    );
    // Read after the API: as many or more.
    let api_sent = sub["sent"].as_f64().unwrap_or(f64::MAX);
    assert!(sub_sent.is_some_and(|n| n >= api_sent), "{sub_sent:?}: {q}");
}
