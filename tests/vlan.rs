//! VLAN sub-interfaces end to end: h2's link is an 802.1Q trunk through a switch
//! (`lab::vlan`), with an untagged station (h2), a VLAN 100 station (hv) and a QinQ station
//! (hq); the router routes between them and h1 through its `[[vlan]]` sub-interfaces.
//! Needs root, clang and tc (scripts/test.sh installs them).

use std::net::UdpSocket;
use std::sync::Mutex;
use std::time::Duration;

use lab::{vlan, Guard, Lab};
use serde_json::Value;

mod common;
use common::*;

static SERIAL: Mutex<()> = Mutex::new(());

fn vlan_lab(tag: &str, backend: &str) -> Guard {
    let mut lab = Lab::new(&format!("t{}{}", std::process::id() % 10000, tag));
    lab.vlans = true;
    lab.backend = backend.into();
    start_lab(lab)
}

#[test]
fn vlan_and_qinq_stations_reach_h1_and_each_other_through_sub_interfaces() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let g = vlan_lab("v", "auto");
    let lab = &g.0;
    for (ns, dst) in [
        (lab.h1(), vlan::HV_V4),
        (lab.h1(), vlan::HQ_V4),
        (lab.h1(), vlan::HV_V6),
        (lab.h1(), vlan::HQ_V6),
        (lab.hv(), lab::H1_V4),
        (lab.hq(), lab::H1_V6),
        (lab.hv(), vlan::HQ_V4),
        (lab.hq(), lab::H2_V4),
    ] {
        ping_until_ok(lab, &ns, dst);
    }
    // The router's own addresses on the sub-interfaces answer (through their TAPs).
    ping_until_ok(lab, &lab.hv(), vlan::RV_V4);
    ping_until_ok(lab, &lab.hq(), vlan::RQ_V6);
    // The untagged station on the same trunk still works.
    ping_until_ok(lab, &lab.h1(), lab::H2_V4);

    // TCP both ways (TSO and checksum offload at the hosts' defaults) through the QinQ
    // sub-interface, UDP from the VLAN 100 one.
    let server = lab
        .spawn(&lab.hq(), &["iperf3", "-s", "-1", "-B", vlan::HQ_V4])
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let out = lab
        .exec_status(
            &lab.h1(),
            &["iperf3", "-c", vlan::HQ_V4, "-t", "2", "-J", "--bidir"],
        )
        .unwrap();
    drop(server);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    for dir in ["sum_received", "sum_received_bidir_reverse"] {
        let b = v["end"][dir]["bytes"].as_u64().unwrap_or(0);
        assert!(b > 1_000_000, "TCP {dir}: {b} bytes: {v}");
    }
    let server = lab
        .spawn(&lab.h1(), &["iperf3", "-s", "-1", "-B", lab::H1_V4])
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let out = lab
        .exec_status(
            &lab.hv(),
            &[
                "iperf3",
                "-c",
                lab::H1_V4,
                "-u",
                "-b",
                "20M",
                "-t",
                "1",
                "-J",
                "-l",
                "1400",
            ],
        )
        .unwrap();
    drop(server);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let sent = v["end"]["sum"]["packets"].as_u64().unwrap_or(0);
    assert!(sent > 1000, "{v}");
    for ns in [lab.h1(), lab.hv(), lab.hq()] {
        assert_eq!(snmp(lab, &ns, "Udp:", "InCsumErrors"), 0, "{ns}");
        assert_eq!(snmp(lab, &ns, "Tcp:", "InCsumErrors"), 0, "{ns}");
    }

    // `show interfaces` lists the sub-interfaces with their tags, addresses and counts.
    let ifs = api(lab, "interfaces", None);
    let sub = |name: &str| {
        ifs.as_array()
            .unwrap()
            .iter()
            .find(|i| i["name"] == name)
            .unwrap_or_else(|| panic!("{name} not in {ifs}"))
            .clone()
    };
    let r2 = sub("r2");
    assert_eq!(
        r2["backend"], "af_packet",
        "a port with sub-interfaces runs AF_PACKET"
    );
    let (v100, q) = (sub("r2.100"), sub("r2.q"));
    assert_eq!(v100["parent"], "r2");
    assert_eq!(v100["vlan"]["id"], 100);
    assert_eq!(v100["vlan"]["tpid"], "0x8100");
    assert_eq!(q["vlan"]["tpid"], "0x88a8");
    assert_eq!(q["vlan"]["inner_id"], 300);
    assert_eq!(
        v100["mac"], r2["mac"],
        "a sub-interface has its parent's MAC"
    );
    // What r2 (MTU 1500) carries: one 802.1Q tag on top of 1500, not QinQ's eight bytes.
    assert_eq!(v100["mtu"], 1500);
    assert_eq!(q["mtu"], 1492);
    assert_eq!(v100["ipv4"][0], vlan::RV_V4);
    assert_eq!(
        q["ipv6"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| *a == vlan::RQ_V6)
            .count(),
        1
    );
    assert!(v100["rx_packets"].as_u64().unwrap() >= sent, "{v100}");
    for i in [&v100, &q] {
        assert!(i["tx_packets"].as_u64().unwrap() > 10, "{i}");
        assert!(i["ifindex"].as_u64().unwrap() > 0, "{i}");
    }
    assert_eq!(kernel_forwarded(lab), (0, 0));
}

/// Crafted frames from the untagged station: a frame is routed as received on the
/// sub-interface of its tags, and tags no sub-interface has are dropped, never routed as
/// untagged.
#[test]
fn frames_are_routed_by_their_tags_and_unknown_tags_are_dropped() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let g = vlan_lab("c", "auto");
    let lab = &g.0;
    ping_until_ok(lab, &lab.h2(), lab::H1_V4);
    let r2 = mac_of(api(lab, "interfaces", None)[1]["mac"].as_str().unwrap());
    let sock = in_netns(&lab.h1(), || UdpSocket::bind("0.0.0.0:7003").unwrap());
    let before = api(lab, "counters", None);
    let frame = |tags: &[(u16, u16)], payload: &[u8]| tagged_udp4(r2, tags, payload);
    let frames = vec![
        frame(&[(0x8100, 100)], b"v100"),
        frame(&[(0x88a8, 200), (0x8100, 300)], b"qinq"),
        frame(&[], b"untagged"),
        frame(&[(0x8100, 101)], b"v101"),
        frame(&[(0x88a8, 100)], b"s100"),
        frame(&[(0x88a8, 200), (0x8100, 301)], b"qinq301"),
        frame(&[(0x88a8, 200)], b"s200"),
    ];
    const N: usize = 5;
    send_frames_from(&lab.h2(), "eth0", frames, N);
    let got = received(&sock, Duration::from_millis(1500));
    let n = |t: &[u8]| got.iter().filter(|g| g.as_slice() == t).count();
    for t in [&b"v100"[..], b"qinq", b"untagged"] {
        assert_eq!(n(t), N, "{}: {got:?}", String::from_utf8_lossy(t));
    }
    for t in [&b"v101"[..], b"s100", b"qinq301", b"s200"] {
        assert_eq!(n(t), 0, "{} arrived", String::from_utf8_lossy(t));
    }
    let after = api(lab, "counters", None);
    let delta = |r: &str| reason_in(&after, r) - reason_in(&before, r);
    assert_eq!(delta("EthVlanNoSubif"), 4 * N as u64, "{after}");
    assert_eq!(kernel_forwarded(lab), (0, 0));
}
