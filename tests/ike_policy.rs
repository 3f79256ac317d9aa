//! Policy-based IPsec keyed by IKE (issue 27): peers with `interface = "wan"` and traffic
//! selectors instead of a tunnel interface, each child SA bringing a PROTECT policy each
//! way into the WAN port's SPD (`lab::ipsec`'s `policy` lab with `ike`). Between two
//! `ferrouter run` gateways: ping (both families) crosses as ESP only, a child rekey under
//! a ping stream loses nothing (the shared outbound policy switches to the new SA), and
//! once the SAs are gone the config's discard policies behind IKE's keep the traffic from
//! leaving in the clear. With strongSwan's charon (Debian charon-systemd, kernel-libipsec)
//! as the other gateway: each side initiating, ESP in UDP.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::ike::{cli, count, ike, ping_stream, wait_established};
use common::ipsec::{ipsec, ping_until, read_dump, sh, stop, wire_dump};
use lab::ipsec::{IpsecGuard, IpsecLab, H2, H2_V6};
use serde_json::Value;

/// gw's policies IKE made, by peer.
fn ike_policies(l: &IpsecLab, gw: u8) -> Vec<Value> {
    ipsec(l, gw)["policies"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["peer"].is_string())
        .cloned()
        .collect()
}

/// The SPI (hex, as `show ike` writes it) of a policy's SAs.
fn spis(p: &Value) -> Vec<String> {
    p["sa"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| format!("{:08x}", s.as_u64().unwrap()))
        .collect()
}

/// Checks gw1's IKE policies against its one child SA: out (both families) with its
/// outbound SA, in with its inbound SA alone; `peer` made them. Waits (at most 10 s) for
/// a rekey's old child to be gone first.
fn policies_follow_the_child(l: &IpsecLab, peer: &str) -> Value {
    let t = Instant::now();
    loop {
        let sa = wait_established(l, 1, String::new);
        let children = sa["children"].as_array().unwrap();
        let pols = ike_policies(l, 1);
        let child = &children[0];
        let ok = children.len() == 1
            && pols.len() == 4
            && pols.iter().all(|p| {
                p["peer"] == peer
                    && p["action"] == "protect"
                    && spis(p)
                        == [if p["direction"] == "out" {
                            child["spi_out"].as_str().unwrap()
                        } else {
                            child["spi_in"].as_str().unwrap()
                        }]
            });
        if ok {
            return sa;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "gw1's IKE policies do not follow its child SA: {sa:#}\n{pols:#?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn two_ferrouter_gateways_fill_their_spds_with_ike() {
    let mut l = common::ike::lab("ikp");
    l.policy = true;
    l.ike = true;
    let g = IpsecGuard(l);
    let l = &g.0;
    l.build()
        .unwrap_or_else(|e| panic!("building the lab: {e:#}"));
    // gw1 rekeys its child SA 10.8 s in (90 % of 12 s).
    l.write_config(1, "child_lifetime_s = 12\n").unwrap();
    l.write_config(2, "").unwrap();
    for n in [1, 2] {
        l.start(n, Path::new(common::bin()))
            .unwrap_or_else(|e| panic!("starting gw{n}: {e:#}"));
    }
    let (mut tcpdump, dump) = wire_dump(
        l,
        "wan.pcap",
        &["(ip or ip6) and not ip multicast and not ip6 multicast"],
    );
    wait_established(l, 1, || {
        format!(
            "gw2 log ({}):\n{}",
            l.log_file(2).display(),
            lab::swan::tail(
                &std::fs::read_to_string(l.log_file(2)).unwrap_or_default(),
                30,
            )
        )
    });
    ping_until(l, &l.h1(), H2);
    ping_until(l, &l.h1(), H2_V6);
    let sa = policies_follow_the_child(l, "gw2");
    let first = sa["children"][0]["spi_in"].as_str().unwrap().to_string();
    // The selectors as configured: the hosts' prefixes.
    assert_eq!(
        sa["children"][0]["local_ts"],
        serde_json::json!([
            "10.1.0.0-10.1.0.255",
            "2001:db8:a1::-2001:db8:a1:0:ffff:ffff:ffff:ffff"
        ]),
        "{sa:#}"
    );
    // 16 s of ping at 20 a second across gw1's rekey.
    let text = ping_stream(l, 320).join().unwrap();
    assert!(
        text.contains("320 packets transmitted, 320 received"),
        "{text}\n{:#}",
        ike(l, 1)
    );
    assert!(count(&ike(l, 1), "child_rekeys") >= 1, "{:#}", ike(l, 1));
    let sa = policies_follow_the_child(l, "gw2");
    assert_ne!(sa["children"][0]["spi_in"], first.as_str(), "{sa:#}");
    let pols = ike_policies(l, 1);
    assert!(
        pols.iter()
            .any(|p| p["direction"] == "out" && p["matches"].as_u64() > Some(0)),
        "{pols:#?}"
    );
    let listing = cli(l, 1, &["show", "ipsec"]);
    assert!(listing.contains("(IKE peer gw2)"), "{listing}");
    let c = control::client::Client::new(control::client::Endpoint::Unix(l.socket(1)));
    let m = String::from_utf8_lossy(&c.call("GET", "/metrics", None).unwrap().body).into_owned();
    assert!(
        m.contains("policy=\"ike:gw2:10.1.0.0/24:any>10.2.0.0/24:any/any\",action=\"protect\""),
        "{m}"
    );
    stop(&mut tcpdump);
    // Between the hosts, only ESP crossed the WAN.
    let text = read_dump(&dump);
    let clear: Vec<&str> = text
        .lines()
        .filter(|s| s.contains(" 10.1.0.2") || s.contains(" 2001:db8:a1::"))
        .filter(|s| !s.contains("ESP(spi="))
        .collect();
    assert!(
        clear.is_empty(),
        "clear packets between the hosts: {clear:?}"
    );
    assert!(text.contains("ESP(spi="), "{text:.2000}");
    // Without SAs, IKE's policies leave with them; the config's discard policies behind
    // them keep the hosts' traffic off the WAN.
    let out = cli(l, 1, &["ipsec", "terminate", "gw2"]);
    assert!(out.contains("1 IKE SA(s) deleted"), "{out}");
    let t = Instant::now();
    while !(ike_policies(l, 1).is_empty() && ike_policies(l, 2).is_empty()) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "IKE policies left: {:#?} {:#?}",
            ike_policies(l, 1),
            ike_policies(l, 2)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(ipsec(l, 1)["sas"].as_array().unwrap().is_empty());
    let (ok, out) = sh(l, &l.h1(), &["ping", "-c2", "-i0.2", "-W1", H2]);
    assert!(!ok, "ping crossed without SAs: {out}");
    let discarded = ipsec(l, 1)["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["direction"] == "out" && p["action"] == "discard" && p["priority"] == 1000)
        .map(|p| p["matches"].as_u64().unwrap())
        .unwrap();
    assert!(discarded >= 2, "{:#}", ipsec(l, 1));
    // And back.
    cli(l, 1, &["ipsec", "initiate", "gw2"]);
    wait_established(l, 1, String::new);
    ping_until(l, &l.h1(), H2);
    policies_follow_the_child(l, "gw2");
}

/// strongSwan's side of the policy lab: the hosts' networks, ESP in UDP.
fn swanctl_policy_conf(l: &IpsecLab) -> String {
    common::ike::swanctl_conf(l, "aes128gcm16-prfsha256-curve25519", "aes128gcm16").replace(
        "local_ts = 10.2.0.0/24\n        remote_ts = 10.1.0.0/24",
        "local_ts = 10.2.0.0/24,2001:db8:a2::/64\n        remote_ts = 10.1.0.0/24,2001:db8:a1::/64",
    )
}

#[test]
fn ferrouter_fills_its_spd_with_ike_against_strongswan_each_side_initiating() {
    let (g, mut charon) = common::ike::swan_lab_with("ikq", |l| {
        l.policy = true;
        l.ike = true;
    });
    let l = &g.0;
    // strongSwan's gateway routes the hosts' networks (its policies do the rest).
    l.exec(
        &l.gw(2),
        &["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"],
    )
    .unwrap();
    for ferrouter_initiates in [true, false] {
        let what = format!("initiator {}", common::ike::initiator(ferrouter_initiates));
        charon.stop();
        charon.write(1, "", &swanctl_policy_conf(l)).unwrap();
        charon
            .start(None)
            .unwrap_or_else(|e| panic!("{what}: {e:#}"));
        charon.load().unwrap_or_else(|e| panic!("{what}: {e:#}"));
        if ferrouter_initiates {
            l.write_config(1, "").unwrap();
            l.start(1, Path::new(common::bin()))
                .unwrap_or_else(|e| panic!("starting gw1: {e:#}"));
        } else {
            let f = l.dir.join("gw1-respond.toml");
            let text = l
                .config_text(1, "")
                .replace("start = \"initiate\"", "start = \"respond\"");
            std::fs::write(&f, text).unwrap();
            cli(l, 1, &["config", "apply", f.to_str().unwrap()]);
            charon
                .swanctl(&["--initiate", "--child", "net", "--timeout", "20"])
                .unwrap_or_else(|e| {
                    panic!(
                        "{what}: strongSwan's initiate: {e:#}\n{}",
                        charon.log_tail(40)
                    )
                });
        }
        let sa = wait_established(l, 1, || charon.log_tail(40));
        assert_eq!(sa["initiator"], ferrouter_initiates, "{what}: {sa:#}");
        assert!(
            sa["local"].as_str().unwrap().ends_with(":4500"),
            "{what}: ESP in UDP: {sa:#}"
        );
        ping_until(l, &l.h1(), H2);
        policies_follow_the_child(l, "gw2");
        let listing = charon.listing().unwrap();
        assert!(
            listing.installed >= 1 && listing.packets_in >= 1 && listing.packets_out >= 1,
            "{what}: {listing:?}\n{}",
            charon.log_tail(40)
        );
    }
    charon.stop();
    l.stop(1);
}

/// gw1 behind a Linux NAT (`masquerade random`: its ports mapped to others), both
/// gateways policy-based: IKE finds the NAT and moves to 4500, and gw2's policy SAs send
/// their ESP in UDP to the port the NAT gave gw1's 4500.
#[test]
fn policy_sas_go_in_udp_through_a_nat() {
    let mut l = common::ike::lab("ikn");
    l.policy = true;
    l.ike = true;
    l.nat = Some(1);
    let g = IpsecGuard(l);
    let l = &g.0;
    l.build()
        .unwrap_or_else(|e| panic!("building the lab: {e:#}"));
    for n in [1, 2] {
        l.write_config(n, "").unwrap();
        l.start(n, Path::new(common::bin()))
            .unwrap_or_else(|e| panic!("starting gw{n}: {e:#}"));
    }
    let sa = wait_established(l, 2, String::new);
    let remote: std::net::SocketAddr = sa["remote"].as_str().unwrap().parse().unwrap();
    assert_eq!(remote.ip().to_string(), "192.0.2.1", "{sa:#}");
    assert!(sa["local"].as_str().unwrap().ends_with(":4500"), "{sa:#}");
    ping_until(l, &l.h1(), H2);
    let (ok, out) = sh(l, &l.h2(), &["ping", "-c3", "-i0.2", "-W1", lab::ipsec::H1]);
    assert!(ok, "h2 to h1: {out}");
    // gw2's policy SAs: in UDP between its 4500 and the NAT's port for gw1's.
    let sas = ipsec(l, 2)["sas"].as_array().unwrap().clone();
    common::ike::sas_in_udp_to(&sas, remote.port(), "gw2 behind no NAT");
    assert_eq!(ike_policies(l, 2).len(), 4, "{:#?}", ike_policies(l, 2));
}
