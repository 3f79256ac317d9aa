//! Tests of the config, the compiled rule set and the packet handling of the filters.

use std::net::IpAddr;

use proptest::prelude::*;

use crate::config::*;
use crate::node::{parse4, parse6, rst_in_place, set_dscp, MALFORMED, TINY_FRAGMENT};
use crate::ruleset::{shadowed, PacketKey, RuleSet, NO_L4};

fn cfg(text: &str) -> FirewallConfig {
    #[derive(serde::Deserialize)]
    struct Top {
        firewall: FirewallConfig,
    }
    toml::from_str::<Top>(text).unwrap().firewall
}

const IFACES: &[&str] = &["eth0", "eth1"];

fn problems(text: &str) -> Vec<(String, String)> {
    cfg(text).validate(IFACES)
}

const BASE: &str = r#"
[[firewall.set]]
name = "admins"
addresses = ["192.0.2.0/28", "2001:db8:a::/48"]

[[firewall.filter]]
name = "in"
hook = "ingress"
interfaces = ["eth0"]
policy = "drop"

[[firewall.filter.rule]]
action = "accept"
protocol = "tcp"
source = ["@admins"]
destination_port = [22, "8000-8080"]

[[firewall.filter.rule]]
action = "reject"
protocol = "tcp"
tcp_flags = ["syn", "!ack"]
destination_port = 25

[[firewall.filter.rule]]
action = "accept"
protocol = "icmp"
icmp_type = 8

[[firewall.filter.rule]]
action = "accept"
protocol = "icmpv6"

[[firewall.filter.rule]]
action = "accept"
dscp = [46]
set_dscp = 0

[[firewall.filter.rule]]
action = "accept"
protocol = "udp"
"#;

fn k4(src: &str, dst: &str, proto: u8, sport: u16, dport: u16) -> PacketKey<u32> {
    let a = |s: &str| u32::from(s.parse::<std::net::Ipv4Addr>().unwrap());
    PacketKey {
        src: a(src),
        dst: a(dst),
        sport,
        dport,
        proto: proto.into(),
        flags: 0,
        dscp: 0,
        state: 0,
    }
}

#[test]
fn a_valid_config_has_no_problems_and_judges_as_written() {
    let c = cfg(BASE);
    assert_eq!(c.validate(IFACES), vec![]);
    let names = vec!["eth0".to_string(), "eth1".to_string()];
    let rs = RuleSet::compile(&c, &names, 2).unwrap();
    let f = rs.filter(Hook::Ingress, 0).unwrap();
    assert!(rs.filter(Hook::Ingress, 1).is_none());
    assert!(rs.filter(Hook::Egress, 0).is_none());
    // SSH from an admin: rule 0.
    let v = f.judge4(&k4("192.0.2.5", "10.0.0.1", TCP, 40000, 22));
    assert_eq!((v.action, v.rule), (Action::Accept, Some(0)));
    // From elsewhere: the policy.
    let v = f.judge4(&k4("192.0.2.16", "10.0.0.1", TCP, 40000, 22));
    assert_eq!((v.action, v.rule), (Action::Drop, None));
    // 8080 is in the range, 8081 is not.
    assert_eq!(
        f.judge4(&k4("192.0.2.1", "10.0.0.1", TCP, 1, 8080)).rule,
        Some(0)
    );
    assert_eq!(
        f.judge4(&k4("192.0.2.1", "10.0.0.1", TCP, 1, 8081)).rule,
        None
    );
    // SMTP SYN is rejected; an ACK segment to 25 is not (flags).
    let mut syn = k4("198.51.100.1", "10.0.0.1", TCP, 1, 25);
    syn.flags = 0x02;
    assert_eq!(f.judge4(&syn).action, Action::Reject);
    syn.flags = 0x10;
    assert_eq!(f.judge4(&syn).rule, None);
    // Echo request, not echo reply.
    assert_eq!(
        f.judge4(&k4("198.51.100.1", "10.0.0.1", ICMP, 8, 0)).rule,
        Some(2)
    );
    assert_eq!(
        f.judge4(&k4("198.51.100.1", "10.0.0.1", ICMP, 0, 0)).rule,
        None
    );
    // DSCP EF anything.
    let mut ef = k4("198.51.100.1", "10.0.0.1", 47, 0, 0);
    ef.dscp = 46;
    assert_eq!(f.judge4(&ef).rule, Some(4));
    assert_eq!(f.rules[4].set_dscp, 0);
    // A later UDP fragment (no transport header) matches "protocol udp" (no ports)...
    let mut frag = k4("198.51.100.1", "10.0.0.1", UDP, 0, 0);
    frag.proto = NO_L4 + u32::from(UDP);
    assert_eq!(f.judge4(&frag).rule, Some(5));
    // ...but a later TCP fragment never matches a rule with ports.
    let mut frag = k4("192.0.2.1", "10.0.0.1", TCP, 0, 22);
    frag.proto = NO_L4 + u32::from(TCP);
    assert_eq!(f.judge4(&frag).rule, None);
    // IPv6: the set's v6 prefix, and ICMPv6.
    let k6 = |src: &str, proto: u8, dport: u16| PacketKey {
        src: u128::from(src.parse::<std::net::Ipv6Addr>().unwrap()),
        dst: 1,
        sport: 1,
        dport,
        proto: proto.into(),
        flags: 0,
        dscp: 0,
        state: 0,
    };
    assert_eq!(f.judge6(&k6("2001:db8:a::1", TCP, 22)).rule, Some(0));
    assert_eq!(f.judge6(&k6("2001:db8:b::1", TCP, 22)).rule, None);
    assert_eq!(f.judge6(&k6("2001:db8:b::1", ICMPV6, 0)).rule, Some(3));
}

#[test]
fn every_mistake_is_named_with_its_path() {
    let bad = r#"
[[firewall.set]]
name = "empty"
addresses = []

[[firewall.filter]]
name = "a"
hook = "ingress"
interfaces = ["eth0", "nope"]

[[firewall.filter.rule]]
action = "accept"
source = ["@missing", "10.0.0.1/8"]
destination_port = 80

[[firewall.filter.rule]]
action = "drop"
protocol = "tcp"
tcp_flags = ["syn", "bogus"]
state = ["established"]

[[firewall.filter.rule]]
source = ["192.0.2.0/24"]
destination = ["2001:db8::/32"]

[[firewall.filter.rule]]
action = "drop"
icmp_type = 3
set_dscp = 70

[[firewall.filter]]
name = "b"
hook = "ingress"
interfaces = ["eth0"]
"#;
    let p = problems(bad);
    let has = |path: &str, needle: &str| {
        assert!(
            p.iter().any(|(a, m)| a == path && m.contains(needle)),
            "no problem at {path} containing {needle:?} in {p:#?}"
        )
    };
    has("firewall.set[0].addresses", "empty");
    has("firewall.filter[0].interfaces[1]", "not a [[port]]");
    has("firewall.filter[0].rule[0].source[0]", "unknown set");
    has("firewall.filter[0].rule[0].source[1]", "host bits");
    has(
        "firewall.filter[0].rule[0].destination_port",
        "need protocol",
    );
    has(
        "firewall.filter[0].rule[1].tcp_flags[1]",
        "unknown TCP flag",
    );
    has("firewall.filter[0].rule[1].state", "connection tracking");
    has("firewall.filter[0].rule[2]", "no action");
    has("firewall.filter[0].rule[2]", "never match");
    has("firewall.filter[0].rule[3].icmp_type", "need protocol");
    has("firewall.filter[0].rule[3].set_dscp", "0-63");
    has("firewall.filter[0].rule[3].set_dscp", "accept");
    has("firewall.filter[1].interfaces[0]", "one filter per hook");
}

#[test]
fn reversed_ranges_and_bad_values_fail_to_parse_with_a_reason() {
    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Top {
        firewall: FirewallConfig,
    }
    for (text, needle) in [
        ("destination_port = \"90-80\"", "reversed"),
        ("destination_port = 70000", "0-65535"),
        ("destination_port = [\"x\"]", "is not a port"),
        ("protocol = \"tcpx\"", "unknown protocol"),
        ("protocol = 300", "0-255"),
    ] {
        let t = format!(
            "[[firewall.filter]]\nname=\"a\"\nhook=\"ingress\"\ninterfaces=[\"eth0\"]\n[[firewall.filter.rule]]\naction=\"drop\"\n{text}\n"
        );
        let e = toml::from_str::<Top>(&t).unwrap_err().to_string();
        assert!(e.contains(needle), "{text}: {e}");
    }
}

#[test]
fn shadowed_rules_are_found() {
    let c = cfg(r#"
[[firewall.filter]]
name = "a"
hook = "ingress"
interfaces = ["eth0"]
[[firewall.filter.rule]]
action = "drop"
source = ["10.0.0.0/8"]
[[firewall.filter.rule]]
action = "accept"
protocol = "tcp"
source = ["10.1.0.0/16"]
destination_port = 22
[[firewall.filter.rule]]
action = "accept"
protocol = "tcp"
source = ["192.0.2.0/24"]
tcp_flags = ["syn"]
[[firewall.filter.rule]]
action = "drop"
protocol = "tcp"
source = ["192.0.2.0/25"]
"#);
    // Rule 1 lies inside rule 0 (IPv4 only: its source is IPv4). Rule 3 is not hidden by
    // rule 2, whose TCP-flag condition lets packets through.
    assert_eq!(shadowed(&c, 1 << 20), vec![(0, 1, 0)]);
}

// ---- A linear reference over the config, for random rule sets and packets ----

#[derive(Clone, Debug)]
struct Pkt {
    v6: bool,
    src: u128,
    dst: u128,
    proto: u8,
    l4: bool,
    sport: u16,
    dport: u16,
    flags: u8,
    dscp: u8,
}

fn net_contains(n: &Net, v6: bool, a: u128) -> bool {
    match n.addr {
        IpAddr::V4(x) if !v6 => {
            let host = u32::MAX.checked_shr(u32::from(n.len)).unwrap_or(0);
            (a as u32) & !host == u32::from(x) & !host
        }
        IpAddr::V6(x) if v6 => {
            let host = u128::MAX.checked_shr(u32::from(n.len)).unwrap_or(0);
            a & !host == u128::from(x) & !host
        }
        _ => false,
    }
}

fn side_ok(list: &[String], c: &FirewallConfig, v6: bool, a: u128) -> bool {
    if list.is_empty() {
        return true;
    }
    list.iter().any(|s| match s.strip_prefix('@') {
        Some(n) => c.sets.iter().find(|x| x.name == n).is_some_and(|x| {
            x.addresses
                .iter()
                .any(|y| net_contains(&parse_net(y).unwrap(), v6, a))
        }),
        None => net_contains(&parse_net(s).unwrap(), v6, a),
    })
}

fn reference(c: &FirewallConfig, f: &Filter, p: &Pkt) -> (Action, Option<u32>) {
    for (i, r) in f.rules.iter().enumerate() {
        let fam = match r.family {
            Some(Family::Ipv4) => !p.v6,
            Some(Family::Ipv6) => p.v6,
            None => true,
        };
        let proto = r.protocol.is_none_or(|x| x.0 == p.proto)
            && (r.protocol.map(|x| x.0) != Some(ICMP) || !p.v6)
            && (r.protocol.map(|x| x.0) != Some(ICMPV6) || p.v6);
        let l4_needed = !r.source_port.is_empty()
            || !r.destination_port.is_empty()
            || r.icmp_type.is_some()
            || !r.tcp_flags.is_empty();
        let ports = |l: &PortList, v: u16| l.is_empty() || l.0.iter().any(|x| x.contains(&v));
        let icmp = r.icmp_type.is_none_or(|t| u16::from(t) == p.sport)
            && r.icmp_code.is_none_or(|t| u16::from(t) == p.dport);
        let (fm, fv) = parse_tcp_flags(&r.tcp_flags).unwrap();
        let ok = fam
            && proto
            && (!l4_needed || p.l4)
            && side_ok(&r.source, c, p.v6, p.src)
            && side_ok(&r.destination, c, p.v6, p.dst)
            && ports(&r.source_port, p.sport)
            && ports(&r.destination_port, p.dport)
            && icmp
            && p.flags & fm == fv
            && (r.dscp.is_empty() || r.dscp.contains(&p.dscp));
        if ok {
            return (r.action.unwrap(), Some(i as u32));
        }
    }
    (f.policy, None)
}

fn arb_rule() -> impl Strategy<Value = RuleConfig> {
    let nets4 = prop::sample::select(vec![
        "10.0.0.0/8",
        "10.1.0.0/16",
        "10.1.2.3",
        "192.0.2.0/24",
        "0.0.0.0/0",
        "@s",
    ]);
    let nets6 = prop::sample::select(vec!["2001:db8::/32", "2001:db8:1::/48", "::/0", "@s"]);
    let side = prop::collection::vec(prop_oneof![nets4, nets6], 0..3);
    (
        prop::sample::select(vec![Action::Accept, Action::Drop, Action::Reject]),
        prop::option::of(prop::sample::select(vec![TCP, UDP, ICMP, ICMPV6, 47])),
        side.clone(),
        side,
        prop::collection::vec((0u16..100, 0u16..30), 0..3),
        prop::option::of(0u8..4),
        prop::collection::vec(prop::sample::select(vec!["syn", "!ack", "fin"]), 0..2),
        prop::collection::vec(0u8..4, 0..2),
        prop::option::of(prop::sample::select(vec![Family::Ipv4, Family::Ipv6])),
    )
        .prop_map(
            |(action, proto, src, dst, ports, icmp_type, flags, dscp, family)| {
                let mut r = RuleConfig {
                    action: Some(action),
                    protocol: proto.map(Protocol),
                    source: src.into_iter().map(String::from).collect(),
                    destination: dst.into_iter().map(String::from).collect(),
                    family,
                    dscp,
                    ..Default::default()
                };
                match proto {
                    Some(TCP) | Some(UDP) => {
                        r.destination_port =
                            PortList(ports.iter().map(|&(a, w)| a..=a + w).collect());
                        if proto == Some(TCP) {
                            let mut f: Vec<String> = flags.into_iter().map(String::from).collect();
                            f.dedup();
                            r.tcp_flags = f;
                        }
                    }
                    Some(ICMP) | Some(ICMPV6) => r.icmp_type = icmp_type,
                    _ => {}
                }
                r
            },
        )
}

fn arb_pkt() -> impl Strategy<Value = Pkt> {
    let a4 = prop::sample::select(vec![
        0x0a01_0203u128,
        0x0a01_0000,
        0x0a02_0000,
        0xc000_0205,
        0x0808_0808,
    ]);
    let a6 = prop::sample::select(vec![
        0x2001_0db8_0000_0000_0000_0000_0000_0001u128,
        0x2001_0db8_0001_0000_0000_0000_0000_0001,
        0x2001_0db9 << 96,
    ]);
    (
        any::<bool>(),
        a4.clone(),
        a4,
        a6.clone(),
        a6,
        prop::sample::select(vec![TCP, UDP, ICMP, ICMPV6, 47]),
        prop::bool::weighted(0.85),
        0u16..140,
        0u16..140,
        any::<u8>(),
        0u8..5,
    )
        .prop_map(
            |(v6, s4, d4, s6, d6, proto, l4, sport, dport, flags, dscp)| Pkt {
                v6,
                src: if v6 { s6 } else { s4 },
                dst: if v6 { d6 } else { d4 },
                proto,
                l4,
                sport: if l4 { sport } else { 0 },
                dport: if l4 { dport } else { 0 },
                flags: if l4 && proto == TCP { flags } else { 0 },
                dscp,
            },
        )
}

proptest! {
    /// Any valid rule set judges any packet as a linear walk over the config does.
    #[test]
    fn the_compiled_filter_judges_as_the_config_reads(
        rules in prop::collection::vec(arb_rule(), 0..25),
        pkts in prop::collection::vec(arb_pkt(), 1..80),
        policy in prop::sample::select(vec![Action::Accept, Action::Drop]),
    ) {
        let c = FirewallConfig {
            sets: vec![AddressSet { name: "s".into(), addresses: vec!["10.1.0.0/16".into(), "2001:db8:1::/48".into()] }],
            filters: vec![Filter { name: "f".into(), hook: Hook::Egress, interfaces: vec!["eth1".into()], policy, rules }],
            ..Default::default()
        };
        // Rules the checker refuses (they could never match) are left out of the set.
        let bad: Vec<usize> = c.validate(IFACES).iter().filter_map(|(p, _)| {
            p.strip_prefix("firewall.filter[0].rule[")?.split(']').next()?.parse().ok()
        }).collect();
        let mut c = c;
        let mut i = 0;
        c.filters[0].rules.retain(|_| { i += 1; !bad.contains(&(i - 1)) });
        prop_assert_eq!(c.validate(IFACES), vec![]);
        let rs = RuleSet::compile(&c, &["eth0".into(), "eth1".into()], 1).unwrap();
        let f = rs.filter(Hook::Egress, 1).unwrap();
        for p in &pkts {
            let key = |proto: u8| u32::from(proto) + if p.l4 { 0 } else { NO_L4 };
            let got = if p.v6 {
                f.judge6(&PacketKey { src: p.src, dst: p.dst, sport: p.sport, dport: p.dport, proto: key(p.proto), flags: p.flags, dscp: p.dscp, state: 0 })
            } else {
                f.judge4(&PacketKey { src: p.src as u32, dst: p.dst as u32, sport: p.sport, dport: p.dport, proto: key(p.proto), flags: p.flags, dscp: p.dscp, state: 0 })
            };
            prop_assert_eq!((got.action, got.rule), reference(&c, &c.filters[0], p), "{:?}", p);
        }
    }

    /// The header readers never panic, whatever the bytes.
    #[test]
    fn parsing_any_bytes_is_safe(bytes in prop::collection::vec(any::<u8>(), 0..120), at in 0usize..20) {
        let _ = parse4(&bytes, at);
        let _ = parse6(&bytes, at);
    }
}

fn ipv4_tcp(flags: u8, payload: usize, frag: u16) -> Vec<u8> {
    let total = 20 + 20 + payload;
    let mut f = vec![0u8; 14 + total];
    let ip = &mut f[14..];
    ip[0] = 0x45;
    ip[1] = 46 << 2;
    ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    ip[6..8].copy_from_slice(&frag.to_be_bytes());
    ip[8] = 63;
    ip[9] = TCP;
    ip[12..16].copy_from_slice(&[192, 0, 2, 1]);
    ip[16..20].copy_from_slice(&[198, 51, 100, 7]);
    let c = wire::checksum::checksum(&ip[..20]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let t = &mut ip[20..40];
    t[0..2].copy_from_slice(&40000u16.to_be_bytes());
    t[2..4].copy_from_slice(&25u16.to_be_bytes());
    t[4..8].copy_from_slice(&1000u32.to_be_bytes());
    t[8..12].copy_from_slice(&5000u32.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = flags;
    f
}

#[test]
fn ipv4_headers_are_read_and_tiny_or_truncated_fragments_refused() {
    let f = ipv4_tcp(0x02, 0, 0);
    let p = parse4(&f, 14).unwrap();
    assert_eq!(
        (p.proto, p.sport, p.dport, p.flags, p.dscp, p.l4),
        (TCP, 40000, 25, 0x02, 46, true)
    );
    assert_eq!(p.src[12..], [192, 0, 2, 1]);
    // A later fragment: no transport header.
    let p = parse4(&ipv4_tcp(0x02, 0, 100), 14).unwrap();
    assert!(!p.l4);
    assert_eq!(parse4(&ipv4_tcp(0x02, 0, 1), 14), Err(TINY_FRAGMENT));
    // A first fragment too short for the TCP header.
    let mut f = ipv4_tcp(0x02, 0, 0x2000);
    f[14 + 2..14 + 4].copy_from_slice(&30u16.to_be_bytes());
    assert_eq!(parse4(&f, 14), Err(MALFORMED));
}

#[test]
fn a_rejected_segment_becomes_a_valid_rst_to_its_sender() {
    for (flags, payload, want_seq, want_ack, want_flags) in [
        // A SYN: no ACK, so SEQ 0 and ACK = its SEQ + 1.
        (0x02u8, 0usize, 0u32, 1001u32, 0x14u8),
        // Data with ACK: SEQ = its ACK.
        (0x18, 100, 5000, 0, 0x04),
    ] {
        let mut f = ipv4_tcp(flags, payload, 0);
        let p = parse4(&f, 14).unwrap();
        let len = rst_in_place(&mut f, 14, false, &p).unwrap();
        assert_eq!(len, 40);
        let ip = &f[14..54];
        assert_eq!(wire::checksum::checksum(&ip[..20]), 0, "IP checksum");
        assert_eq!(ip[12..16], [198, 51, 100, 7]);
        assert_eq!(ip[16..20], [192, 0, 2, 1]);
        let t = &ip[20..40];
        assert_eq!(u16::from_be_bytes([t[0], t[1]]), 25);
        assert_eq!(u16::from_be_bytes([t[2], t[3]]), 40000);
        assert_eq!(u32::from_be_bytes([t[4], t[5], t[6], t[7]]), want_seq);
        assert_eq!(u32::from_be_bytes([t[8], t[9], t[10], t[11]]), want_ack);
        assert_eq!(t[13], want_flags);
        let sum = wire::checksum::pseudo_v4(
            u32::from_be_bytes([198, 51, 100, 7]),
            u32::from_be_bytes([192, 0, 2, 1]),
            TCP,
            20,
        ) + wire::checksum::sum(t);
        assert_eq!(wire::checksum::fold(sum), 0xffff, "TCP checksum");
    }
    // A RST is never answered.
    let mut f = ipv4_tcp(0x04, 0, 0);
    let p = parse4(&f, 14).unwrap();
    assert_eq!(rst_in_place(&mut f, 14, false, &p), None);
}

#[test]
fn ipv6_headers_are_read_and_an_rst_built() {
    let mut f = vec![0u8; 14 + 40 + 20];
    let ip = &mut f[14..];
    ip[0] = 0x60 | (46 >> 2);
    ip[1] = (46 << 2 & 0x0f) << 4;
    ip[4..6].copy_from_slice(&20u16.to_be_bytes());
    ip[6] = TCP;
    ip[7] = 64;
    ip[8..24].copy_from_slice(
        &"2001:db8::1"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    ip[24..40].copy_from_slice(
        &"2001:db8::2"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    ip[40..42].copy_from_slice(&1234u16.to_be_bytes());
    ip[42..44].copy_from_slice(&443u16.to_be_bytes());
    ip[52] = 5 << 4;
    ip[53] = 0x02;
    let p = parse6(&f, 14).unwrap();
    assert_eq!(
        (p.proto, p.sport, p.dport, p.dscp, p.l4),
        (TCP, 1234, 443, 46, true)
    );
    let len = rst_in_place(&mut f, 14, true, &p).unwrap();
    assert_eq!(len, 60);
    let ip = &f[14..74];
    assert_eq!(
        ip[24..40],
        "2001:db8::1"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets()
    );
    let mut src = [0u8; 16];
    src.copy_from_slice(&ip[8..24]);
    let mut dst = [0u8; 16];
    dst.copy_from_slice(&ip[24..40]);
    let sum = wire::checksum::pseudo_v6(&src, &dst, TCP, 20) + wire::checksum::sum(&ip[40..60]);
    assert_eq!(wire::checksum::fold(sum), 0xffff);
}

#[test]
fn setting_the_dscp_keeps_the_ipv4_checksum_valid_and_the_ecn_bits() {
    let mut f = ipv4_tcp(0x02, 0, 0);
    f[14 + 1] |= 0x01; // ECN
    let c = wire::checksum::checksum(&{
        let mut h = [0u8; 20];
        h.copy_from_slice(&f[14..34]);
        h[10] = 0;
        h[11] = 0;
        h
    });
    f[24..26].copy_from_slice(&c.to_be_bytes());
    set_dscp(&mut f, 14, false, 10);
    assert_eq!(f[15], 10 << 2 | 1);
    assert_eq!(wire::checksum::checksum(&f[14..34]), 0);
    let mut g = vec![0x60 | 0x0b, 0x85, 0, 0];
    set_dscp(&mut g, 0, true, 0);
    // Traffic class 0xb8 (EF, ECN 0) became 0x00, flow-label nibble kept.
    assert_eq!(g[..2], [0x60, 0x05]);
}

#[test]
fn the_tracker_sees_tcp_windows_echo_ids_and_what_errors_quote() {
    use crate::conntrack::L4;
    use crate::node::ct_packet;
    // A SYN with options: MSS, NOP, window scale 7.
    let mut f = ipv4_tcp(0x02, 0, 0);
    let ip = &mut f[14..];
    ip[32] = 8 << 4; // data offset 32 bytes
    let mut g = f[..14 + 40].to_vec();
    g.extend_from_slice(&[2, 4, 0x05, 0xb4, 1, 3, 3, 7, 0, 0, 0, 0]);
    let total = (g.len() - 14) as u16;
    g[16..18].copy_from_slice(&total.to_be_bytes());
    let p = parse4(&g, 14).unwrap();
    let cp = ct_packet(&g, &p, false, 5).unwrap();
    match cp.l4 {
        L4::Tcp(s) => {
            assert_eq!(
                (s.flags, s.seq, s.wscale, s.payload_len),
                (0x02, 1000, Some(7), 0)
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        (cp.tuple.sport, cp.tuple.dport, cp.tuple.proto),
        (40000, 25, TCP)
    );
    // An ICMP port unreachable quoting a UDP datagram 192.0.2.1:5000 -> 198.51.100.7:9.
    let mut e = vec![0u8; 14 + 20 + 8 + 20 + 8];
    let ip = &mut e[14..];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&56u16.to_be_bytes());
    ip[9] = ICMP;
    ip[12..16].copy_from_slice(&[198, 51, 100, 7]);
    ip[16..20].copy_from_slice(&[192, 0, 2, 1]);
    ip[20] = 3;
    ip[21] = 3;
    let q = &mut ip[28..];
    q[0] = 0x45;
    q[9] = UDP;
    q[12..16].copy_from_slice(&[192, 0, 2, 1]);
    q[16..20].copy_from_slice(&[198, 51, 100, 7]);
    q[20..22].copy_from_slice(&5000u16.to_be_bytes());
    q[22..24].copy_from_slice(&9u16.to_be_bytes());
    let p = parse4(&e, 14).unwrap();
    match ct_packet(&e, &p, false, 5).unwrap().l4 {
        L4::IcmpError { inner } => {
            assert_eq!((inner.sport, inner.dport, inner.proto), (5000, 9, UDP));
            assert_eq!(inner.src, u128::from(u32::from_be_bytes([192, 0, 2, 1])));
        }
        other => panic!("{other:?}"),
    }
    // An echo request: its identifier in both ports.
    e[14 + 20] = 8;
    e[14 + 24..14 + 26].copy_from_slice(&0x1234u16.to_be_bytes());
    let p = parse4(&e, 14).unwrap();
    let cp = ct_packet(&e, &p, false, 5).unwrap();
    assert_eq!((cp.tuple.sport, cp.tuple.dport), (0x1234, 0x1234));
    assert!(matches!(cp.l4, L4::IcmpEcho { reply: false }));
    // A later fragment is not tracked.
    let f = ipv4_tcp(0x02, 0, 100);
    assert!(ct_packet(&f, &parse4(&f, 14).unwrap(), false, 5).is_none());
}

proptest! {
    /// The tracker's view of any bytes never panics.
    #[test]
    fn the_trackers_view_of_any_bytes_is_safe(bytes in prop::collection::vec(any::<u8>(), 0..160), at in 0usize..16) {
        for v6 in [false, true] {
            let p = if v6 { parse6(&bytes, at) } else { parse4(&bytes, at) };
            if let Ok(p) = p {
                let _ = crate::node::ct_packet(&bytes, &p, v6, 0);
            }
        }
    }
}

/// A filter whose first rules match on state alone (in some family), then others.
fn stateful_filter(lead: &[(&str, &str, Option<&str>)]) -> crate::ruleset::RuleSet {
    let mut text = String::from(
        "[firewall]\nconntrack = true\n[[firewall.filter]]\nname = \"in\"\nhook = \"ingress\"\ninterfaces = [\"eth0\"]\npolicy = \"drop\"\n",
    );
    for (action, states, family) in lead {
        text.push_str(&format!(
            "[[firewall.filter.rule]]\naction = \"{action}\"\nstate = [{states}]\n"
        ));
        if let Some(f) = family {
            text.push_str(&format!("family = \"{f}\"\n"));
        }
    }
    text.push_str(
        "[[firewall.filter.rule]]\naction = \"accept\"\nprotocol = \"tcp\"\ndestination_port = 22\n\
         [[firewall.filter.rule]]\naction = \"reject\"\nstate = [\"new\"]\nprotocol = \"udp\"\n\
         [[firewall.filter.rule]]\naction = \"accept\"\nstate = [\"established\"]\nsource = [\"192.0.2.0/24\", \"2001:db8::/32\"]\n",
    );
    let names = vec!["eth0".to_string(), "eth1".to_string()];
    RuleSet::compile(&cfg(&text), &names, 1).unwrap()
}

#[test]
fn leading_state_rules_decide_without_classifying() {
    use crate::config::state::*;
    let rs = stateful_filter(&[
        ("accept", "\"established\", \"related\"", None),
        ("drop", "\"invalid\"", Some("ipv4")),
    ]);
    let f = rs.filter(Hook::Ingress, 0).unwrap();
    assert_eq!(f.by_state(false, ESTABLISHED).unwrap().rule, Some(0));
    assert_eq!(f.by_state(true, RELATED).unwrap().rule, Some(0));
    assert_eq!(f.by_state(false, INVALID).unwrap().rule, Some(1));
    // Rule 1 is IPv4's: for IPv6 the state-only rules end at the TCP rule.
    assert_eq!(f.by_state(true, INVALID), None);
    assert_eq!(f.by_state(false, NEW), None);
    assert_eq!(f.by_state(false, 0), None, "untracked");
    // Not first: no shortcut.
    let rs = stateful_filter(&[]);
    let f = rs.filter(Hook::Ingress, 0).unwrap();
    assert_eq!(f.by_state(false, ESTABLISHED), None);
}

proptest! {
    /// Whenever the leading state-only rules decide, classifying gives the same verdict.
    #[test]
    fn the_state_shortcut_agrees_with_the_classifier(
        src in any::<u32>(), dst in any::<u32>(), sport in any::<u16>(), dport in any::<u16>(),
        proto in prop::sample::select(vec![6u32, 17, 1, 256 + 6]),
        flags in any::<u8>(), dscp in 0u8..64, lead in 0usize..4, which in 0usize..4,
    ) {
        use crate::config::state::*;
        let leads: [&[(&str, &str, Option<&str>)]; 4] = [
            &[],
            &[("accept", "\"established\", \"related\"", None)],
            &[("accept", "\"established\"", Some("ipv6")), ("drop", "\"invalid\", \"established\"", None)],
            &[("reject", "\"new\"", Some("ipv4")), ("accept", "\"related\"", None)],
        ];
        let rs = stateful_filter(leads[lead]);
        let f = rs.filter(Hook::Ingress, 0).unwrap();
        let st = [NEW, ESTABLISHED, RELATED, INVALID][which];
        let k = PacketKey { src, dst, sport, dport, proto, flags, dscp, state: st };
        if let Some(v) = f.by_state(false, st) {
            prop_assert_eq!(v, f.judge4(&k));
        }
        let k6 = PacketKey { src: u128::from(src) << 96 | u128::from(dst), dst: u128::from(dst), sport, dport, proto, flags, dscp, state: st };
        if let Some(v) = f.by_state(true, st) {
            prop_assert_eq!(v, f.judge6(&k6));
        }
    }
}
