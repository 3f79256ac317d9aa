use proptest::prelude::*;
use wire::checksum::{checksum, pseudo_v4, sum};

use super::config::NatConfig;
use super::rewrite::{self, Frag};
use super::table::{proto, Key4, NatTable, Pool, Refused, Side, Timeouts};
use super::NatRules;

const S: u64 = 1_000_000_000;

pub(crate) fn a(s: &str) -> u32 {
    s.parse::<std::net::Ipv4Addr>().unwrap().into()
}

pub(crate) fn key(src: &str, sport: u16, dst: &str, dport: u16, proto: u8) -> Key4 {
    Key4 {
        src: a(src),
        dst: a(dst),
        sport,
        dport,
        proto,
    }
}

fn table(max: usize) -> NatTable {
    NatTable::new(max, 0, 1, &Timeouts::default())
}

#[test]
fn snat_session_is_found_both_ways_and_mappings_are_endpoint_independent() {
    let mut t = table(1024);
    let pool = [(a("203.0.113.1"), a("203.0.113.1"))];
    let o = key("10.0.0.2", 40000, "198.51.100.7", 80, proto::TCP);
    let id = t.create_snat(o, Pool { ranges: &pool }, 0x02, S).unwrap();
    let s = *t.get(id).unwrap();
    assert_eq!(s.t.src, a("203.0.113.1"));
    assert_eq!(s.t.dst, o.dst);
    assert_eq!(s.t.dport, 80);
    // The inside port is kept when it is free and in the worker's range.
    assert_eq!(s.t.sport, 40000);
    assert_eq!(t.lookup(&o, S), Some((id, Side::Orig)));
    assert_eq!(t.lookup(&s.t.reversed(), S), Some((id, Side::Reply)));
    assert_eq!(
        t.lookup(&s.t, S),
        None,
        "the translated tuple itself is no key"
    );
    // Same inside endpoint, another destination: the same external endpoint.
    let o2 = key("10.0.0.2", 40000, "192.0.2.9", 443, proto::TCP);
    let id2 = t.create_snat(o2, Pool { ranges: &pool }, 0x02, S).unwrap();
    let s2 = *t.get(id2).unwrap();
    assert_eq!((s2.t.src, s2.t.sport), (s.t.src, s.t.sport));
    assert_eq!(t.mappings(), 1);
    // Another inside host wanting the same port gets another.
    let o3 = key("10.0.0.3", 40000, "198.51.100.7", 80, proto::TCP);
    let id3 = t.create_snat(o3, Pool { ranges: &pool }, 0x02, S).unwrap();
    assert_ne!(t.get(id3).unwrap().t.sport, 40000);
    assert_eq!(t.mappings(), 2);
    // Removing the sessions frees the mapping only with its last session.
    assert!(t.remove(id));
    assert_eq!(t.mappings(), 2);
    assert!(t.remove(id2));
    assert_eq!(t.mappings(), 1);
    assert_eq!(t.lookup(&o, S), None);
    assert_eq!(t.len(), 1);
}

#[test]
fn workers_hand_out_disjoint_ports() {
    let pool = [(a("203.0.113.1"), a("203.0.113.1"))];
    let mut seen = std::collections::HashSet::new();
    for w in 0..4 {
        let mut t = NatTable::new(2048, w, 4, &Timeouts::default());
        let (lo, hi) = t.port_range();
        assert!(lo >= 1024);
        for i in 0..500u32 {
            let o = Key4 {
                src: a("10.0.0.0") + i,
                dst: a("198.51.100.7"),
                sport: 5000,
                dport: 53,
                proto: proto::UDP,
            };
            let id = t.create_snat(o, Pool { ranges: &pool }, 0, S).unwrap();
            let p = t.get(id).unwrap().t.sport;
            assert!((lo..=hi).contains(&p), "worker {w}: {p} outside {lo}-{hi}");
            assert!(seen.insert(p), "port {p} handed out twice");
        }
    }
}

#[test]
fn ports_run_out_and_the_table_fills_with_counted_refusals() {
    let pool = [(a("203.0.113.1"), a("203.0.113.1"))];
    // 64 workers: 1008 ports each.
    let mut t = NatTable::new(4096, 0, 64, &Timeouts::default());
    let mut ok = 0;
    let mut refused = None;
    for i in 0..2000u32 {
        let o = Key4 {
            src: a("10.0.0.0") + i,
            dst: a("198.51.100.7"),
            sport: 5000,
            dport: 53,
            proto: proto::UDP,
        };
        match t.create_snat(o, Pool { ranges: &pool }, 0, S) {
            Ok(_) => ok += 1,
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    assert_eq!(refused, Some(Refused::NoPort));
    assert!(
        (256..=1008).contains(&ok),
        "{ok} mappings before running out"
    );
    assert_eq!(t.counters().no_port, 1);
    // A full table.
    let mut t = table(1024);
    let mut n = 0;
    loop {
        let o = key("10.0.0.2", 1, "198.51.100.7", 80, proto::TCP);
        let o = Key4 {
            sport: 2000 + n,
            ..o
        };
        match t.create_dnat(o, (a("10.0.0.9"), 80), 0x02, S) {
            Ok(_) => n += 1,
            Err(e) => {
                assert_eq!(e, Refused::Full);
                break;
            }
        }
        assert!(n <= 1024);
    }
    assert_eq!(n, 1024);
    assert_eq!(t.counters().full, 1);
}

#[test]
fn sessions_expire_by_protocol_and_tcp_state() {
    let tm = Timeouts {
        tcp_established: 100,
        tcp_transitory: 10,
        udp: 30,
        icmp: 5,
    };
    let mut t = NatTable::new(1024, 0, 1, &tm);
    let pool = [(a("203.0.113.1"), a("203.0.113.1"))];
    let o = key("10.0.0.2", 40000, "198.51.100.7", 80, proto::TCP);
    let id = t.create_snat(o, Pool { ranges: &pool }, 0x02, S).unwrap();
    // Half open: the transitory timeout.
    assert!(t.lookup(&o, 9 * S).is_some());
    assert!(
        t.lookup(&o, 13 * S).is_none(),
        "half-open expires after 10 s"
    );
    let id2 = t
        .create_snat(o, Pool { ranges: &pool }, 0x02, 20 * S)
        .unwrap();
    let r = t.get(id2).unwrap().t.reversed();
    t.refresh(id2, Side::Reply, 0x12, 21 * S);
    // Established: 100 s.
    assert!(t.lookup(&o, 110 * S).is_some());
    t.refresh(id2, Side::Orig, 0x10, 110 * S);
    assert!(t.lookup(&r, 200 * S).is_some());
    // A RST moves it back to transitory.
    t.refresh(id2, Side::Reply, 0x04, 200 * S);
    assert!(t.lookup(&r, 220 * S).is_none());
    let _ = id;
    // The sweep removes what no lookup meets.
    let u = key("10.0.0.2", 5353, "198.51.100.7", 53, proto::UDP);
    t.create_snat(u, Pool { ranges: &pool }, 0, 300 * S)
        .unwrap();
    assert_eq!(t.len(), 1);
    assert_eq!(t.sweep(400 * S, 1024), 1);
    assert_eq!(t.len(), 0);
    assert_eq!(t.mappings(), 0);
}

#[test]
fn dnat_then_snat_rekeys_the_reply_side() {
    let mut t = table(1024);
    let o = key("192.0.2.50", 33000, "203.0.113.1", 8080, proto::TCP);
    let id = t.create_dnat(o, (a("10.0.0.2"), 80), 0x02, S).unwrap();
    let m = t.get(id).unwrap().t;
    assert_eq!((m.dst, m.dport, m.src), (a("10.0.0.2"), 80, o.src));
    assert_eq!(t.lookup(&m.reversed(), S), Some((id, Side::Reply)));
    let pool = [(a("10.0.0.1"), a("10.0.0.1"))];
    t.add_snat(id, Pool { ranges: &pool }).unwrap();
    let tt = t.get(id).unwrap().t;
    assert_eq!(tt.src, a("10.0.0.1"));
    assert_eq!(
        t.lookup(&m.reversed(), S),
        None,
        "the old reply key is gone"
    );
    assert_eq!(t.lookup(&tt.reversed(), S), Some((id, Side::Reply)));
    assert_eq!(t.lookup(&o, S), Some((id, Side::Orig)));
}

/// An IPv4 packet: header, then a transport header of `proto` with `payload` bytes,
/// checksums valid.
pub(crate) fn packet(k: &Key4, payload: &[u8], frag: u16) -> Vec<u8> {
    let l4_len = match k.proto {
        proto::TCP => 20,
        _ => 8,
    } + payload.len();
    let total = 20 + l4_len;
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
    p[6..8].copy_from_slice(&frag.to_be_bytes());
    p[8] = 64;
    p[9] = k.proto;
    p[12..16].copy_from_slice(&k.src.to_be_bytes());
    p[16..20].copy_from_slice(&k.dst.to_be_bytes());
    let c = checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    let l4 = &mut p[20..];
    match k.proto {
        proto::ICMP => {
            l4[0] = 8;
            l4[4..6].copy_from_slice(&k.sport.to_be_bytes());
            l4[8..].copy_from_slice(payload);
            let c = checksum(l4);
            l4[2..4].copy_from_slice(&c.to_be_bytes());
        }
        _ => {
            l4[0..2].copy_from_slice(&k.sport.to_be_bytes());
            l4[2..4].copy_from_slice(&k.dport.to_be_bytes());
            let hl = if k.proto == proto::TCP {
                l4[12] = 5 << 4;
                l4[13] = 0x18;
                20
            } else {
                l4[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
                8
            };
            l4[hl..].copy_from_slice(payload);
            let at = if k.proto == proto::TCP { 16 } else { 6 };
            let c =
                !wire::checksum::fold(pseudo_v4(k.src, k.dst, k.proto, l4_len as u16) + sum(l4));
            l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
        }
    }
    p
}

fn ip_ok(p: &[u8]) -> bool {
    wire::checksum::fold(sum(&p[..20])) == 0xffff
}

fn l4_ok(p: &[u8]) -> bool {
    match p[9] {
        proto::ICMP => wire::checksum::fold(sum(&p[20..])) == 0xffff,
        _ => wire::offload::transport_checksum_ok(p) != Some(false),
    }
}

fn arb_key() -> impl Strategy<Value = Key4> {
    (
        any::<u32>(),
        any::<u32>(),
        any::<u16>(),
        any::<u16>(),
        prop::sample::select(vec![proto::TCP, proto::UDP, proto::ICMP]),
    )
        .prop_map(|(src, dst, sport, dport, proto)| Key4 {
            src,
            dst,
            sport,
            dport: if proto == proto::ICMP { sport } else { dport },
            proto,
        })
}

proptest! {
    /// Translation keeps every checksum valid, and translating back restores the packet
    /// (all but the representation of a checksum).
    #[test]
    fn translation_keeps_checksums_and_round_trips(
        k in arb_key(),
        new in (any::<u32>(), any::<u32>(), any::<u16>(), any::<u16>()),
        payload in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let n = Key4 {
            src: new.0,
            dst: new.1,
            sport: new.2,
            dport: if k.proto == proto::ICMP { new.2 } else { new.3 },
            proto: k.proto,
        };
        let orig = packet(&k, &payload, 0);
        let mut p = orig.clone();
        let parsed = rewrite::parse(&p).unwrap();
        prop_assert_eq!(parsed.key, k);
        rewrite::rewrite(&mut p, &parsed, &n);
        prop_assert!(ip_ok(&p));
        prop_assert!(l4_ok(&p), "transport checksum after translation");
        let back = rewrite::parse(&p).unwrap();
        prop_assert_eq!(back.key, n);
        rewrite::rewrite(&mut p, &back, &k);
        prop_assert!(ip_ok(&p) && l4_ok(&p));
        let csum = match k.proto { proto::TCP => 36, proto::UDP => 26, _ => 22 };
        let mut a = orig.clone();
        let mut b = p.clone();
        for x in [&mut a, &mut b] {
            x[10] = 0; x[11] = 0; x[csum] = 0; x[csum + 1] = 0;
        }
        prop_assert_eq!(a, b);
    }

    /// The fuzz target's body (`fuzz/`'s `nat_rewrite`) on random bytes: no input makes
    /// the parser or the rewriter panic or break a checksum.
    #[test]
    fn fuzz_random_bytes(mut bytes in prop::collection::vec(any::<u8>(), 13..160)) {
        bytes[12] = 0x45 | (bytes[12] & 0x0f);
        super::fuzzing::exercise(&bytes);
    }

    /// The same on valid packets (TCP, UDP, echo; whole, first and later fragments) and
    /// on ICMP errors quoting them, with bytes overwritten and cut.
    #[test]
    fn fuzz_mutated_packets(
        k in arb_key(),
        to in prop::collection::vec(any::<u8>(), 12),
        payload in prop::collection::vec(any::<u8>(), 0..48),
        frag in prop::sample::select(vec![0u16, 0x2000, 0x4000, 0x0005]),
        as_error in any::<bool>(),
        edits in prop::collection::vec((any::<usize>(), any::<u8>()), 0..3),
        cut in any::<usize>(),
    ) {
        let mut p = packet(&k, &payload, frag);
        if as_error {
            let mut e = vec![0u8; 28];
            e[0] = 0x45;
            e[9] = proto::ICMP;
            e[20] = 3;
            e.extend_from_slice(&p);
            let total = e.len() as u16;
            e[2..4].copy_from_slice(&total.to_be_bytes());
            let c = checksum(&e[..20]);
            e[10..12].copy_from_slice(&c.to_be_bytes());
            let c = checksum(&e[20..]);
            e[22..24].copy_from_slice(&c.to_be_bytes());
            p = e;
        }
        for (at, v) in edits {
            let n = p.len();
            p[at % n] = v;
        }
        let keep = p.len() - cut % 8;
        p.truncate(keep);
        let mut input = to;
        input.extend_from_slice(&p);
        super::fuzzing::exercise(&input);
    }

    /// Sessions are always found by both keys until removed, whatever the mix of
    /// creations and removals.
    #[test]
    fn sessions_are_found_by_both_keys(ops in prop::collection::vec((any::<u16>(), any::<bool>()), 1..300)) {
        let mut t = table(1024);
        let pool = [(a("203.0.113.1"), a("203.0.113.4"))];
        let mut live: Vec<(u32, Key4)> = Vec::new();
        for (x, remove) in ops {
            if remove && !live.is_empty() {
                let (id, o) = live.remove(x as usize % live.len());
                prop_assert!(t.remove(id));
                prop_assert_eq!(t.lookup(&o, S), None);
            } else {
                let o = Key4 { src: a("10.0.0.0") + u32::from(x % 64), dst: a("198.51.100.1"), sport: x, dport: 80, proto: proto::TCP };
                if live.iter().any(|(_, l)| *l == o) { continue; }
                let id = t.create_snat(o, Pool { ranges: &pool }, 0x02, S).unwrap();
                live.push((id, o));
            }
            for (id, o) in &live {
                prop_assert_eq!(t.lookup(o, S), Some((*id, Side::Orig)));
                let r = t.get(*id).unwrap().t.reversed();
                prop_assert_eq!(t.lookup(&r, S), Some((*id, Side::Reply)));
            }
        }
        prop_assert_eq!(t.len(), live.len());
    }
}

#[test]
fn icmp_errors_are_translated_inside_and_out() {
    // The flow: 10.0.0.2:5000 -> 198.51.100.7:53 UDP, out as 203.0.113.1:6000.
    let o = key("10.0.0.2", 5000, "198.51.100.7", 53, proto::UDP);
    let t = Key4 {
        src: a("203.0.113.1"),
        sport: 6000,
        ..o
    };
    // What left: `t`, quoted by a router 192.0.2.99 in a port unreachable to t.src.
    let sent = packet(&t, b"query", 0);
    let mut e = vec![0u8; 20 + 8 + sent.len()];
    let total = e.len() as u16;
    e[0] = 0x45;
    e[2..4].copy_from_slice(&total.to_be_bytes());
    e[8] = 64;
    e[9] = proto::ICMP;
    e[12..16].copy_from_slice(&a("192.0.2.99").to_be_bytes());
    e[16..20].copy_from_slice(&t.src.to_be_bytes());
    let c = checksum(&e[..20]);
    e[10..12].copy_from_slice(&c.to_be_bytes());
    e[20] = 3;
    e[21] = 3;
    e[28..].copy_from_slice(&sent);
    let c = checksum(&e[20..]);
    e[22..24].copy_from_slice(&c.to_be_bytes());
    let p = rewrite::parse(&e).unwrap();
    let q = p.error.unwrap();
    assert_eq!(q.key, t);
    rewrite::rewrite_error(&mut e, &p, a("192.0.2.99"), o.src, &o);
    assert!(ip_ok(&e));
    assert_eq!(wire::checksum::fold(sum(&e[20..])), 0xffff, "ICMP checksum");
    let inner = &e[28..];
    assert!(ip_ok(inner), "quoted IP header checksum");
    assert!(l4_ok(inner), "quoted UDP checksum");
    let p2 = rewrite::parse(&e).unwrap();
    assert_eq!(p2.key.dst, o.src);
    assert_eq!(p2.error.unwrap().key, o);
}

#[test]
fn later_fragments_carry_no_ports() {
    let k = key("10.0.0.2", 5000, "198.51.100.7", 53, proto::UDP);
    let first = packet(&k, &[0; 32], 0x2000);
    let p = rewrite::parse(&first).unwrap();
    assert_eq!(p.frag, Frag::First);
    assert_eq!(p.key, k);
    let later = packet(&k, &[0; 32], 0x0004);
    let p = rewrite::parse(&later).unwrap();
    assert_eq!(p.frag, Frag::Later);
    assert_eq!((p.key.sport, p.key.dport), (0, 0));
    let mut l = later.clone();
    rewrite::rewrite_addresses(
        &mut l,
        &p,
        &Key4 {
            src: a("203.0.113.1"),
            ..k
        },
    );
    assert!(ip_ok(&l));
    assert_eq!(
        &l[20..],
        &later[20..],
        "the payload of a later fragment is not touched"
    );
}

#[test]
fn config_problems_have_paths_and_rules_compile() {
    let cfg: NatConfig = toml::from_str(
        r#"
        [[source]]
        outbound_interface = "eth9"
        source = ["10.0.0.0/33", "2001:db8::/32"]
        destination_port = 80
        translation = "masq"

        [[source]]
        translation = ["203.0.113.9-203.0.113.1"]

        [[destination]]
        protocol = "gre"
        translation_address = "10.0.0.300"
        translation_port = 80
        "#,
    )
    .unwrap();
    let p = cfg.validate(&["eth0", "eth1"]);
    let has = |path: &str, text: &str| p.iter().any(|(a, m)| a == path && m.contains(text));
    assert!(
        has("nat.source[0].outbound_interface", "\"eth9\" is not"),
        "{p:?}"
    );
    assert!(has("nat.source[0].source[0]", "prefix length"), "{p:?}");
    assert!(has("nat.source[0].source[1]", "IPv6"), "{p:?}");
    assert!(
        has("nat.source[0].destination_port", "ports need protocol"),
        "{p:?}"
    );
    assert!(
        has("nat.source[0].translation", "\"masq\" is not a translation"),
        "{p:?}"
    );
    assert!(has("nat.source[1].translation[0]", "reversed"), "{p:?}");
    assert!(
        has("nat.destination[0].protocol", "tcp, udp and icmp only"),
        "{p:?}"
    );
    assert!(
        has(
            "nat.destination[0].translation_address",
            "not an IPv4 address"
        ),
        "{p:?}"
    );
    assert!(
        has("nat.destination[0].translation_port", "needs protocol"),
        "{p:?}"
    );

    let cfg: NatConfig = toml::from_str(
        r#"
        [[source]]
        outbound_interface = "eth1"
        source = ["10.0.0.0/8"]
        destination = ["10.0.0.0/8"]
        translation = "exclude"

        [[source]]
        outbound_interface = "eth1"
        source = ["10.0.0.0/8"]
        translation = "masquerade"

        [[destination]]
        inbound_interface = "eth1"
        destination = ["203.0.113.1"]
        protocol = "tcp"
        destination_port = "8080-8081"
        translation_address = "10.0.0.2"
        translation_port = 80
        "#,
    )
    .unwrap();
    let names: Vec<String> = ["eth0", "eth1"].iter().map(|s| s.to_string()).collect();
    assert!(cfg.validate(&["eth0", "eth1"]).is_empty());
    let r = NatRules::compile(&cfg, &names).unwrap();
    let out = key("10.1.2.3", 1000, "198.51.100.1", 80, proto::TCP);
    assert_eq!(r.snat_for(1, &out).map(|x| x.0), Some(1));
    assert_eq!(r.snat_for(0, &out).map(|x| x.0), None, "another interface");
    let inner = key("10.1.2.3", 1000, "10.9.9.9", 80, proto::TCP);
    assert_eq!(
        r.snat_for(1, &inner).map(|x| x.0),
        Some(0),
        "excluded first"
    );
    let web = key("198.51.100.1", 1000, "203.0.113.1", 8081, proto::TCP);
    assert_eq!(r.dnat_for(1, &web), Some((0, (a("10.0.0.2"), 80))));
    assert_eq!(r.dnat_for(0, &web), None);
    let udp = Key4 {
        proto: proto::UDP,
        ..web
    };
    assert_eq!(r.dnat_for(1, &udp), None);
}

#[test]
fn memory_per_session() {
    let t = table(1 << 20);
    let per = t.memory_bytes() as f64 / (1u64 << 20) as f64;
    assert!(per < 200.0, "{per} bytes per session");
}

#[test]
fn echo_sessions_are_found_by_their_replies() {
    let mut t = table(1024);
    let pool = [(a("198.51.100.1"), a("198.51.100.1"))];
    let o = key("192.0.2.2", 28622, "198.51.100.2", 28622, proto::ICMP);
    let id = t.create_snat(o, Pool { ranges: &pool }, 0, S).unwrap();
    let s = *t.get(id).unwrap();
    let mut reply = packet(&s.t.reversed(), b"ping", 0);
    reply[20] = 0;
    let c = checksum(&reply[20..]);
    reply[22..24].copy_from_slice(&c.to_be_bytes());
    let p = rewrite::parse(&reply).unwrap();
    assert_eq!(
        t.lookup(&p.key, 2 * S),
        Some((id, Side::Reply)),
        "{:?} {:?}",
        p.key,
        s
    );
}
