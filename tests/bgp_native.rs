//! Ferrouter's own BGP speaker (`[bgp]`), end to end with real peers: BIRD 2 in h2
//! (primary, local preference 200) and h3 (secondary, 100) advertise the same 2,000 IPv4
//! and 500 IPv6 prefixes over one IPv4 and one IPv6 session each. The speaker's best paths
//! go straight into the FIB (nothing in the kernel: no FRR runs), traffic from h1 crosses
//! the fast path to the primary, then to the secondary when the primary withdraws, and back.
//!
//! A second test is a hostile peer: a TCP listener in h2 that speaks BGP with the crate's
//! codec and sends a valid UPDATE, an UPDATE whose ORIGIN is malformed (RFC 7606
//! treat-as-withdraw: the session stays up, the prefixes leave the FIB), an UPDATE whose
//! attribute length overruns the message (a NOTIFICATION ends the session) and bytes that
//! are not BGP at all; the daemon forwards throughout and comes back to the peer.
//!
//! Needs root and bird2 (scripts/deps.sh). The daemons are children of the test and are
//! stopped, and the lab torn down, even when a test fails.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bgp::wire;
use lab::daemons::Daemons;
use lab::Lab;
use serde_json::Value;

mod common;
use common::*;

static SERIAL: Mutex<()> = Mutex::new(());

const V4: usize = 2000;
const V6: usize = 500;

fn v4_prefix(i: usize) -> String {
    format!("10.{}.{}.0/24", 200 + i / 256, i % 256)
}

fn v6_prefix(i: usize) -> String {
    format!(
        "{}/64",
        Ipv6Addr::new(0x2001, 0xdb8, 0x100, i as u16, 0, 0, 0, 0)
    )
}

fn speaker_config(with_v6: bool) -> String {
    let mut s = format!(
        "\n[bgp]\nasn = 65001\nrouter_id = \"{}\"\nconnect_retry = 1\nhold_time = 9\n",
        lab::R2_V4
    );
    let mut peers = vec![(lab::H2_V4, 65002, 200), (lab::H3_V4, 65003, 100)];
    if with_v6 {
        peers.extend([(lab::H2_V6, 65002, 200), (lab::H3_V6, 65003, 100)]);
    }
    for (addr, asn, lp) in peers {
        s.push_str(&format!(
            "\n[[bgp.neighbor]]\naddress = \"{addr}\"\nremote_as = {asn}\nlocal_pref = {lp}\n"
        ));
    }
    s
}

/// BIRD for one peer: the prefixes as disabled-by-nothing statics, exported over an IPv4
/// and an IPv6 session to the router.
fn bird_config(dir: &Path, asn: u32, (l4, r4): (&str, &str), (l6, r6): (&str, &str)) -> String {
    let mut s = format!(
        "router id {l4};\nlog \"{}/bird.log\" all;\nprotocol device {{}}\n",
        dir.display()
    );
    s.push_str("protocol static static4 {\n  ipv4;\n");
    for i in 0..V4 {
        s.push_str(&format!("  route {} blackhole;\n", v4_prefix(i)));
    }
    s.push_str("}\nprotocol static static6 {\n  ipv6;\n");
    for i in 0..V6 {
        s.push_str(&format!("  route {} blackhole;\n", v6_prefix(i)));
    }
    s.push_str("}\n");
    for (name, af, local, peer, proto) in [
        ("rtr4", "ipv4", l4, r4, "static4"),
        ("rtr6", "ipv6", l6, r6, "static6"),
    ] {
        s.push_str(&format!(
            "protocol bgp {name} {{
  local {local} as {asn};
  neighbor {peer} as 65001;
  strict bind yes;
  hold time 9;
  connect retry time 1;
  error wait time 1, 5;
  {af} {{ import none; export where proto = \"{proto}\"; next hop self; }};
}}
"
        ));
    }
    s
}

fn speaker(lab: &Lab) -> Value {
    api(lab, "bgp", None)["speaker"].clone()
}

/// Every FIB route from the speaker: prefix -> next hop description.
fn bgp_routes(lab: &Lab) -> std::collections::HashMap<String, String> {
    api(lab, "routes", None)["routes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["source"] == "bgp")
        .map(|r| {
            (
                r["prefix"].as_str().unwrap().to_string(),
                r["next_hop"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Whether every advertised prefix is in the FIB via `v4_gw` / `v6_gw`.
fn all_via(lab: &Lab, v4_gw: &str, v6_gw: &str) -> (bool, String) {
    let r = bgp_routes(lab);
    let ok4 = (0..V4).all(|i| {
        r.get(&v4_prefix(i))
            .is_some_and(|nh| nh.starts_with(&format!("via {v4_gw} ")))
    });
    let ok6 = (0..V6).all(|i| {
        r.get(&v6_prefix(i))
            .is_some_and(|nh| nh.starts_with(&format!("via {v6_gw} ")))
    });
    let on = |gw: &str| {
        r.values()
            .filter(|nh| nh.starts_with(&format!("via {gw} ")))
            .count()
    };
    (
        ok4 && ok6 && r.len() == V4 + V6,
        format!(
            "{} bgp routes: {} via {v4_gw}, {} via {v6_gw}",
            r.len(),
            on(v4_gw),
            on(v6_gw)
        ),
    )
}

fn wait(d: &mut Daemons, what: &str, mut f: impl FnMut() -> (bool, String)) {
    d.wait_for(what, Duration::from_secs(60), || Ok(f()))
        .unwrap_or_else(|e| panic!("{e:#}"));
}

/// Received by the interface of `ns` (rx packets, from /sys).
fn rx_packets(lab: &Lab, ns: &str) -> u64 {
    let (_, out) = sh(
        lab,
        ns,
        &["cat", "/sys/class/net/eth0/statistics/rx_packets"],
    );
    out.trim().parse().unwrap()
}

#[test]
fn native_speaker_two_bird_peers_v4_v6_failover_failback_in_fib_and_traffic() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut lab = Lab::new(&format!("n{}", std::process::id() % 10000));
    lab.h3 = true;
    lab.extra_config = speaker_config(true);
    let guard = start_lab(lab);
    let lab = &guard.0;
    let mut d = Daemons::new(&lab.dir.join("daemons")).unwrap();
    // Both peers answer pings on the first address of the first prefixes, so traffic shows
    // which one the fast path sends to.
    let probes = [0usize, 1, V4 - 1];
    for ns in [lab.h2(), lab.h3()] {
        for &i in &probes {
            let a = v4_prefix(i).replace(".0/24", ".1/32");
            lab.exec(&ns, &["ip", "addr", "add", &a, "dev", "lo"])
                .unwrap();
        }
    }
    let mut birds = Vec::new();
    for (name, ns, asn, v4, v6) in [
        (
            "bird-h2",
            lab.h2(),
            65002,
            (lab::H2_V4, lab::R2_V4),
            (lab::H2_V6, lab::R2_V6),
        ),
        (
            "bird-h3",
            lab.h3(),
            65003,
            (lab::H3_V4, lab::R3_V4),
            (lab::H3_V6, lab::R3_V6),
        ),
    ] {
        let dir = d.dir.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let conf = bird_config(&dir, asn, v4, v6);
        birds.push(d.start_bird(name, &ns, &conf).unwrap());
    }
    wait(
        &mut d,
        "4 sessions established, all prefixes learned",
        || {
            let s = speaker(lab);
            // Up, and each has a path for every prefix of its family.
            let up = s["neighbors"].as_array().unwrap().iter().all(|n| {
                let want = if n["address"].as_str().unwrap().contains(':') {
                    V6
                } else {
                    V4
                };
                n["state"] == "established" && n["prefixes"] == want as u64
            });
            (
                up && s["prefixes_v4"] == V4 as u64 && s["prefixes_v6"] == V6 as u64,
                s.to_string(),
            )
        },
    );
    // Best paths: the primary, for every prefix, in the FIB; nothing in the kernel.
    wait(&mut d, "FIB via the primary", || {
        all_via(lab, lab::H2_V4, lab::H2_V6)
    });
    let (_, k) = sh(lab, &lab.rtr(), &["ip", "route", "show", "10.200.0.0/24"]);
    assert!(k.trim().is_empty(), "the kernel has no BGP route: {k}");
    let s = speaker(lab);
    for n in s["neighbors"].as_array().unwrap() {
        // Each peer announced all of its prefixes and has a path for each.
        let want = if n["address"].as_str().unwrap().contains(':') {
            V6
        } else {
            V4
        };
        assert_eq!(n["prefixes"], want as u64, "{n}");
        assert!(
            n["prefixes_announced"].as_u64().unwrap() >= want as u64,
            "{n}"
        );
        assert_eq!(n["treat_as_withdraw"], 0, "{n}");
        assert_eq!(n["notifications_sent"], 0, "{n}");
        assert_eq!(n["hold_time"], 9, "{n}");
    }
    // Prometheus: the sessions and the RIB.
    let m = std::process::Command::new("curl")
        .args(["-sf", "--unix-socket"])
        .arg(lab.socket())
        .arg("http://x/metrics")
        .output()
        .unwrap();
    let m = String::from_utf8_lossy(&m.stdout);
    let metric = |series: String| -> f64 {
        m.lines()
            .find_map(|l| l.strip_prefix(&format!("{series} ")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{series} in:\n{m}"))
    };
    let n = |name: &str, addr: &str| format!("{name}{{neighbor=\"{addr}\"}}");
    for (series, want) in [
        (n("ferrouter_bgp_session_established", lab::H2_V4), 1),
        (n("ferrouter_bgp_session_established", lab::H3_V6), 1),
        (n("ferrouter_bgp_prefixes", lab::H3_V4), V4),
        (n("ferrouter_bgp_prefixes", lab::H2_V6), V6),
        (n("ferrouter_bgp_treat_as_withdraw_total", lab::H2_V4), 0),
        (
            "ferrouter_bgp_rib_prefixes{family=\"ipv4\"}".to_string(),
            V4,
        ),
        (
            "ferrouter_bgp_rib_prefixes{family=\"ipv6\"}".to_string(),
            V6,
        ),
        ("ferrouter_bgp_unresolved_total{}".to_string(), 0),
    ] {
        assert_eq!(metric(series.clone()), want as f64, "{series}");
    }
    assert!(metric("ferrouter_bgp_fib_changes_total{}".into()) >= (V4 + V6) as f64);
    let summary = api(lab, "routes", Some("summary"));
    assert_eq!(summary["by_source"]["bgp"], (V4 + V6) as u64, "{summary}");
    // The CLI's table.
    let out = std::process::Command::new(bin())
        .args(["show", "bgp", "--socket"])
        .arg(lab.socket())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert_eq!(text.matches("established").count(), 4, "{text}");
    // Traffic: h1 -> probes, through the fast path, to h2.
    let probe = |ns: String| {
        let before = rx_packets(lab, &ns);
        for &i in &probes {
            let a = v4_prefix(i).replace(".0/24", ".1");
            ping_ok(lab, &a).unwrap_or_else(|e| panic!("{a}: {e}"));
        }
        rx_packets(lab, &ns) - before
    };
    let fwd0 = forwarded(lab);
    assert!(probe(lab.h2()) >= probes.len() as u64);
    assert!(
        forwarded(lab) - fwd0 >= 2 * probes.len() as u64,
        "fast path forwarded both ways"
    );
    assert_eq!(kernel_forwarded(lab), (0, 0));

    // Failover: the primary withdraws everything (sessions stay up).
    birds[0].set_protocol("disable", "static4").unwrap();
    birds[0].set_protocol("disable", "static6").unwrap();
    wait(&mut d, "FIB via the secondary", || {
        all_via(lab, lab::H3_V4, lab::H3_V6)
    });
    assert!(probe(lab.h3()) >= probes.len() as u64);
    // Failback.
    birds[0].set_protocol("enable", "static4").unwrap();
    birds[0].set_protocol("enable", "static6").unwrap();
    wait(&mut d, "FIB back via the primary", || {
        all_via(lab, lab::H2_V4, lab::H2_V6)
    });
    assert!(probe(lab.h2()) >= probes.len() as u64);
    let s = speaker(lab);
    let h2 = &s["neighbors"][0];
    assert_eq!(h2["prefixes_withdrawn"], V4 as u64, "{h2}");
    assert_eq!(h2["established_transitions"], 1, "{h2}");

    // The primary's BIRD dies: its sessions close and its paths go; the secondary's stay.
    d.stop("bird-h2");
    wait(
        &mut d,
        "FIB via the secondary after the primary died",
        || all_via(lab, lab::H3_V4, lab::H3_V6),
    );
    let s = speaker(lab);
    let h2 = &s["neighbors"][0];
    assert_ne!(h2["state"], "established", "{h2}");
    assert!(h2["last_error"].is_string(), "{h2}");
    assert_eq!(h2["prefixes"], 0, "{h2}");
    assert_eq!(kernel_forwarded(lab), (0, 0));
    drop(birds);
    drop(d);
}

/// Read one whole BGP message (type, body) from `s`.
fn read_msg(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Ok(Some((kind, len))) = wire::frame(&buf) {
            return (kind, buf[wire::HEADER_LEN..len].to_vec());
        }
        let n = s.read(&mut chunk).expect("read from ferrouter");
        assert!(n > 0, "ferrouter closed the connection");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Accept ferrouter's connection and bring the session up: its OPEN, ours, KEEPALIVEs.
fn accept_session(l: &TcpListener) -> TcpStream {
    let (mut s, _) = l.accept().expect("ferrouter connects");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let (kind, body) = read_msg(&mut s);
    assert_eq!(kind, wire::MSG_OPEN);
    let open = wire::parse_open(&body).expect("ferrouter's OPEN parses");
    assert_eq!(open.asn, 65001);
    assert!(open.four_octet_as);
    assert!(open
        .families
        .contains(&(wire::AFI_IPV4, wire::SAFI_UNICAST)));
    let mut out = Vec::new();
    wire::encode_open(
        &mut out,
        65002,
        30,
        lab::H2_V4.parse().unwrap(),
        &[(wire::AFI_IPV4, wire::SAFI_UNICAST)],
    );
    wire::encode_keepalive(&mut out);
    s.write_all(&out).unwrap();
    let (kind, _) = read_msg(&mut s);
    assert_eq!(kind, wire::MSG_KEEPALIVE);
    s
}

fn attrs(origin: u8) -> wire::Attrs {
    wire::Attrs {
        origin,
        as_path: wire::AsPath {
            segments: vec![wire::AsSegment {
                kind: wire::SegmentKind::Sequence,
                asns: vec![65002, 64512],
            }],
        },
        next_hop: Some(lab::H2_V4.parse().unwrap()),
        ..Default::default()
    }
}

fn prefixes(v: &[&str]) -> Vec<(IpAddr, u8)> {
    v.iter()
        .map(|p| {
            let (a, l) = p.split_once('/').unwrap();
            (a.parse().unwrap(), l.parse().unwrap())
        })
        .collect()
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether the FIB has a route from the speaker for exactly `prefix`.
fn bgp_route_in_fib(lab: &Lab, prefix: &str) -> bool {
    api(lab, "routes", Some(prefix))["routes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["source"] == "bgp")
}

/// A lab whose ferrouter (AS 65001) has one neighbour, h2 (AS 65002, a codec speaking in
/// the test), with `extra` lines in its `[[bgp.neighbor]]`.
fn start_with_codec_neighbor(tag: char, extra: &str) -> lab::Guard {
    let cfg = format!(
        "\n[bgp]\nasn = 65001\nrouter_id = \"{}\"\nconnect_retry = 1\n\n[[bgp.neighbor]]\naddress = \"{}\"\nremote_as = 65002\n{extra}",
        lab::R2_V4,
        lab::H2_V4
    );
    start(&format!("{tag}{}", std::process::id() % 10000), &cfg)
}

#[test]
fn hostile_peer_malformed_updates_are_withdrawn_or_end_the_session_and_the_router_recovers() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let guard = start_with_codec_neighbor('b', "max_prefixes = 20\n");
    let lab = guard.0.clone();
    let ns = lab.h2();
    // The "peer" runs in h2's namespace on its own thread.
    let path = format!("/var/run/netns/{ns}");
    let peer = std::thread::spawn(move || -> Vec<Vec<u8>> {
        let file = std::fs::File::open(&path).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: setns on a valid namespace fd; only this thread changes namespace.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0);
        let l = TcpListener::bind((lab::H2_V4, 179)).expect("bind 179 in h2");
        let mut notifications = Vec::new();
        // Session 1: a good UPDATE, then a treat-as-withdraw one, then an overrun.
        let mut s = accept_session(&l);
        let mut out = Vec::new();
        wire::encode_updates(
            &mut out,
            &attrs(0),
            None,
            &prefixes(&["10.9.1.0/24", "10.9.2.0/24", "10.9.3.0/24"]),
            &[],
            true,
        );
        // A next hop on no connected subnet of the router: left out of the decision.
        let mut far = attrs(0);
        far.next_hop = Some("10.99.99.1".parse().unwrap());
        wire::encode_updates(&mut out, &far, None, &prefixes(&["10.9.5.0/24"]), &[], true);
        s.write_all(&out).unwrap();
        notifications.push(b"sent-good".to_vec());
        // Wait for the test to see them (it tells us by closing its side of a pipe: keep
        // it simple, poll the FIB from here is not possible; sleep on a marker file).
        wait_until("the test's go", || {
            Path::new(&format!("/tmp/{ns}-go1")).exists()
        });
        out.clear();
        // ORIGIN 7 is not IGP/EGP/INCOMPLETE: treat as withdraw.
        wire::encode_updates(
            &mut out,
            &attrs(7),
            None,
            &prefixes(&["10.9.2.0/24"]),
            &[],
            true,
        );
        s.write_all(&out).unwrap();
        wait_until("the test's go", || {
            Path::new(&format!("/tmp/{ns}-go2")).exists()
        });
        // A Total Path Attribute Length that runs past the end of the message: nothing
        // after it can be located, so RFC 7606 leaves only a session reset.
        let body: Vec<u8> = vec![0, 0, 0, 200, 0x40, 1, 1, 0];
        let mut msg = vec![0xff; 16];
        msg.extend_from_slice(&((wire::HEADER_LEN + body.len()) as u16).to_be_bytes());
        msg.push(wire::MSG_UPDATE);
        msg.extend_from_slice(&body);
        s.write_all(&msg).unwrap();
        let (kind, body) = read_msg(&mut s);
        assert_eq!(kind, wire::MSG_NOTIFICATION);
        notifications.push(body);
        drop(s);
        // Session 2 (ferrouter reconnects): bytes that are not BGP.
        let (mut s, _) = l.accept().expect("ferrouter reconnects");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let (kind, _) = read_msg(&mut s);
        assert_eq!(kind, wire::MSG_OPEN);
        s.write_all(&[0x55; 40]).unwrap();
        let (kind, body) = read_msg(&mut s);
        assert_eq!(kind, wire::MSG_NOTIFICATION);
        notifications.push(body);
        drop(s);
        // Session 3: a well-behaved peer again.
        let mut s = accept_session(&l);
        out.clear();
        wire::encode_updates(
            &mut out,
            &attrs(0),
            None,
            &prefixes(&["10.9.4.0/24"]),
            &[],
            true,
        );
        s.write_all(&out).unwrap();
        wait_until("the test's go", || {
            Path::new(&format!("/tmp/{ns}-go3")).exists()
        });
        // 30 more prefixes: past the neighbour's max_prefixes (20).
        out.clear();
        let many: Vec<String> = (0..30).map(|i| format!("10.10.{i}.0/24")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        wire::encode_updates(&mut out, &attrs(0), None, &prefixes(&many), &[], true);
        s.write_all(&out).unwrap();
        let (kind, body) = read_msg(&mut s);
        assert_eq!(kind, wire::MSG_NOTIFICATION);
        notifications.push(body);
        notifications
    });
    let ns = lab.h2();
    let fib_has = |p: &str| bgp_route_in_fib(&lab, p);
    let go = |n: u8| std::fs::write(format!("/tmp/{ns}-go{n}"), b"").unwrap();
    let cleanup = |ns: &str| {
        for n in 1..=3 {
            let _ = std::fs::remove_file(format!("/tmp/{ns}-go{n}"));
        }
    };
    cleanup(&ns);
    wait_until("three prefixes in the FIB", || {
        ["10.9.1.0/24", "10.9.2.0/24", "10.9.3.0/24"]
            .iter()
            .all(|p| fib_has(p))
    });
    wait_until("the unresolvable next hop counted", || {
        speaker(&lab)["neighbors"][0]["unresolved"] == 1
    });
    assert!(
        !fib_has("10.9.5.0/24"),
        "a next hop on no connected subnet is not installed"
    );
    go(1);
    wait_until("10.9.2.0/24 treated as withdrawn", || {
        !fib_has("10.9.2.0/24")
    });
    let n = &speaker(&lab)["neighbors"][0];
    assert_eq!(n["treat_as_withdraw"], 1, "{n}");
    assert_eq!(n["state"], "established", "{n}");
    assert!(fib_has("10.9.1.0/24") && fib_has("10.9.3.0/24"));
    go(2);
    wait_until("the session's routes gone", || !fib_has("10.9.1.0/24"));
    wait_until("the new session's route", || fib_has("10.9.4.0/24"));
    go(3);
    let notes = peer.join().expect("peer thread");
    cleanup(&ns);
    // UPDATE Message Error / Malformed Attribute List, then Message Header Error /
    // Connection Not Synchronized.
    assert_eq!(&notes[1][..2], &[3, 1], "{notes:?}");
    assert_eq!(&notes[2][..2], &[1, 1], "{notes:?}");
    // Cease / Maximum Number of Prefixes Reached, with AFI 1, SAFI 1 and the limit.
    assert_eq!(notes[3], [6, 1, 0, 1, 1, 0, 0, 0, 20], "{notes:?}");
    wait_until("the over-limit session's routes gone", || {
        !fib_has("10.9.4.0/24") && !fib_has("10.10.0.0/24")
    });
    let n = &speaker(&lab)["neighbors"][0];
    assert_eq!(n["notifications_sent"], 3, "{n}");
    // Sessions 1 and 3 (session 2 never left OpenSent).
    assert_eq!(n["established_transitions"], 2, "{n}");
    assert!(
        n["last_error"]
            .as_str()
            .unwrap()
            .contains("Maximum Number of Prefixes"),
        "{n}"
    );
    // The router forwarded throughout.
    ping_ok(&lab, lab::H2_V4).unwrap();
    assert_eq!(kernel_forwarded(&lab), (0, 0));
}

/// A path whose next hop is on no connected subnet is left out, and taken once an address
/// on that subnet appears: the speaker asks the neighbour (the codec speaking in h2, which
/// advertises the route refresh capability) for its IPv4 routes again with a ROUTE-REFRESH,
/// and installs the path the neighbour sends again.
#[test]
fn next_hop_that_becomes_reachable_is_taken_after_a_route_refresh() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let guard = start_with_codec_neighbor('r', "");
    let lab = guard.0.clone();
    let path = format!("/var/run/netns/{}", lab.h2());
    let far = || {
        let mut a = attrs(0);
        a.next_hop = Some("10.99.99.1".parse().unwrap());
        let mut out = Vec::new();
        wire::encode_updates(&mut out, &a, None, &prefixes(&["10.9.5.0/24"]), &[], true);
        out
    };
    // The peer: the UPDATE, then (on its own thread) wait for the ROUTE-REFRESH, skipping
    // KEEPALIVEs, and send the UPDATE again. It hands back the session to keep it up.
    let peer = std::thread::spawn(move || -> (TcpStream, (u16, u8)) {
        let file = std::fs::File::open(&path).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: setns on a valid namespace fd; only this thread changes namespace.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0);
        let l = TcpListener::bind((lab::H2_V4, 179)).expect("bind 179 in h2");
        let mut s = accept_session(&l);
        s.write_all(&far()).unwrap();
        // ferrouter's KEEPALIVEs come every 30 s at most (hold time 90 s).
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let started = Instant::now();
        let refresh = loop {
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "no ROUTE-REFRESH"
            );
            let (kind, body) = read_msg(&mut s);
            match kind {
                wire::MSG_KEEPALIVE => continue,
                wire::MSG_ROUTE_REFRESH => {
                    break wire::parse_route_refresh(&body).expect("a valid ROUTE-REFRESH")
                }
                k => panic!("unexpected message type {k}: {body:?}"),
            }
        };
        s.write_all(&far()).unwrap();
        (s, refresh)
    });
    let fib_has = |p: &str| bgp_route_in_fib(&lab, p);
    wait_until("the unresolvable next hop counted", || {
        speaker(&lab)["neighbors"][0]["unresolved"] == 1
    });
    assert!(!fib_has("10.9.5.0/24"), "a next hop on no connected subnet");
    assert_eq!(speaker(&lab)["neighbors"][0]["route_refresh_sent"], 0);
    // The next hop's subnet appears on the router's interface towards h2.
    let (ok, out) = sh(
        &lab,
        &lab.rtr(),
        &["ip", "addr", "add", "10.99.99.2/24", "dev", "r2"],
    );
    assert!(ok, "{out}");
    let (_session, refresh) = peer.join().expect("the peer got a ROUTE-REFRESH");
    assert_eq!(refresh, (wire::AFI_IPV4, wire::SAFI_UNICAST));
    wait_until("the path sent again is installed", || {
        fib_has("10.9.5.0/24")
    });
    let r = api(&lab, "routes", Some("10.9.5.0/24"));
    assert!(r.to_string().contains("10.99.99.1"), "{r}");
    let n = &speaker(&lab)["neighbors"][0];
    assert_eq!(n["route_refresh_sent"], 1, "{n}");
    assert_eq!(n["unresolved"], 1, "{n}");
    assert_eq!(n["state"], "established", "{n}");
}

/// `ferrouter-lab bench convergence --dut ferrouter-bgp` at a small scale: the speaker in place
/// of FRR, every phase converged with the speaker's FIB time inside the traffic's, no
/// kernel split (nothing changes in the kernel), no loss after convergence, the CPU of
/// ferrouter and both BIRD peers accounted, and no namespace left behind.
#[test]
fn bench_convergence_5k_routes_ferrouter_bgp_json() {
    check_ferrouter_bgp_convergence("bird", 5000, None);
}

/// The same with the tester's emulated BGP routers, and the traffic to a random sample of
/// the routes (`--sample`): the speaker's FIB time covers all 20,000 routes, the traffic
/// and the verification the 2,000 sampled.
#[test]
fn bench_convergence_20k_routes_ferrouter_bgp_tester_peers_sampled_json() {
    check_ferrouter_bgp_convergence("tester", 20_000, Some(2000));
}

fn check_ferrouter_bgp_convergence(speaker: &str, routes: u64, sample: Option<u64>) {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let prefix = format!("v{}", std::process::id() % 100_000);
    let routes_s = routes.to_string();
    let mut args = vec![
        "bench",
        "convergence",
        "--routes",
        &routes_s,
        "--speaker",
        speaker,
        "--dut",
        "ferrouter-bgp",
        "--rate",
        "50000",
        "--timeout",
        "120",
        "--json",
        "--netns-prefix",
        &prefix,
    ];
    let sample_s = sample.map(|k| k.to_string());
    if let Some(k) = &sample_s {
        args.extend(["--sample", k]);
    }
    let v = bench_json(&args);
    let r = &v["runs"][0];
    assert_eq!(v["runs"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(r["dut"], "ferrouter-bgp", "{r}");
    assert_eq!(
        (r["protocol"].as_str(), r["speaker"].as_str()),
        (Some("bgp"), Some(speaker))
    );
    assert_eq!(r["routes"], routes);
    let traffic = sample.unwrap_or(routes);
    assert_eq!(r["traffic_routes"], traffic, "{r}");
    assert_eq!(r["loss_after"], 0, "{r}");
    assert_eq!(r["routes_with_loss"], 0, "{r}");
    // Two verification passes over the routes the traffic goes to, and no more.
    let tx = r["verify_tx"].as_u64().unwrap();
    assert!(tx >= 2 * traffic && tx < 2 * routes.max(traffic + 1), "{r}");
    let nominal = r["sweep_period_s"].as_f64().unwrap();
    assert!((nominal - traffic as f64 / 50_000.0).abs() < 1e-6, "{r}");
    assert!(r["verify_dut_drops"].is_u64(), "{r}");
    assert!(r["fib_prefixes"].as_u64().unwrap() >= routes, "{r}");
    for (phase, total) in [
        ("learn", "learn_s"),
        ("failover", "failover_s"),
        ("failback", "converge_s"),
    ] {
        let p = &r[phase];
        let t = p["total_s"].as_f64().unwrap();
        assert_eq!(p["total_s"], r[total], "{phase}: {r}");
        assert!(t > 0.0, "{phase}: {p}");
        let fib = p["fib_done_s"].as_f64().unwrap_or(f64::NAN);
        // The traffic can only have moved once the FIB had the routes.
        assert!(fib >= 0.0 && fib <= t + 0.001, "{phase}: {p}");
        for k in ["first_kernel_change_s", "kernel_done_s", "after_kernel_s"] {
            assert!(p[k].is_null(), "{phase}: {k}: {p}");
        }
        let cpu = p["cpu_s"].as_object().unwrap();
        // The tester's routers are threads of the benchmark: no process of theirs.
        let peers: &[&str] = match speaker {
            "bird" => &["bird-primary", "bird-secondary"],
            _ => &[],
        };
        let processes: Vec<&str> = std::iter::once("ferrouter")
            .chain(peers.iter().copied())
            .collect();
        assert_phase_cpu(phase, p, &processes);
        assert_eq!(cpu.len(), 1 + peers.len(), "{phase}: {p}");
        assert!(
            !cpu.contains_key("zebra") && !cpu.contains_key("bgpd"),
            "{p}"
        );
    }
    let ns = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let ns = String::from_utf8_lossy(&ns.stdout);
    assert!(!ns.contains(&format!("{prefix}-")), "{ns}");
}
