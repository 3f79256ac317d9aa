//! The generator over in-memory port pairs, with "DUTs" made of link filters and rewrites:
//! every count exact, and every frame buffer back in the memory afterwards.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dataplane::Arena;
use wire::checksum::{update16, update32};

use super::segment::{parse, Parsed, L3_OFF, L4_OFF};
use super::*;
use crate::clock::VirtualClock;
use crate::testing::{loop_pair, LoopPort, Verdict, DUT_MAC0, DUT_MAC1, TESTER_MAC0, TESTER_MAC1};

const FRAMES: u32 = 16384;

fn addr(s: &str) -> std::net::IpAddr {
    s.parse().unwrap()
}

/// 4 clients × 64512 ports to 2 servers, 10,000 connections/s for 100 ms (1000
/// connections), 5 ms timeouts, 1 ms reuse delay.
fn config(proto: Proto) -> StatefulConfig {
    let mut c = StatefulConfig::new(
        proto,
        Macs {
            src: TESTER_MAC0,
            dst: DUT_MAC0,
        },
        Macs {
            src: TESTER_MAC1,
            dst: DUT_MAC1,
        },
        AddrRange::new(addr("198.18.1.1"), 4),
        AddrRange::new(addr("198.19.1.1"), 2),
    );
    c.cps = 10_000.0;
    c.duration = Duration::from_millis(100);
    c.syn_timeout = Duration::from_millis(5);
    c.response_timeout = Duration::from_millis(5);
    c.close_timeout = Duration::from_millis(5);
    c.reuse_delay = Duration::from_millis(1);
    c
}

/// Run `cfg` over a loop pair prepared by `setup` on a virtual clock (1 µs per read);
/// check the accounting identity and that no frame buffer leaked.
fn run_on(cfg: &StatefulConfig, setup: impl FnOnce(&LoopPort, &LoopPort)) -> StatefulResult {
    let (mut a, mut b) = loop_pair(8192);
    setup(&a, &b);
    let mut mem = Arena::new(FRAMES);
    let mut g = Stateful::new(cfg).unwrap();
    let r = g
        .run_with_clock(&mut mem, &mut a, &mut b, &mut VirtualClock::new(0, 1000))
        .unwrap();
    assert!(r.balanced(), "{r:#?}");
    assert_eq!(r.planned, r.attempted + r.skipped.total(), "{r:#?}");
    assert_eq!(r.failed, r.failures.total());
    assert!(r.completed <= r.established && r.established <= r.attempted);
    // Frames still on the links belong to the memory: take them back, then count.
    a.release_held();
    b.release_held();
    let mut v = Vector::default();
    for p in [&mut a, &mut b] {
        loop {
            v.len = 0;
            if Port::<Arena>::rx_burst(p, &mut mem, &mut v) == 0 {
                break;
            }
            for q in v.as_slice() {
                mem.free(q.buf);
            }
        }
    }
    assert_eq!(mem.free_count(), FRAMES as usize, "frame buffers leaked");
    r
}

/// The TCP header of a frame this generator wrote: (source port, destination port, flags,
/// payload length).
fn tcp_of(f: &[u8]) -> Option<(u16, u16, u8, u32)> {
    match parse(f) {
        Parsed::Seg(s) if s.proto == 6 => Some((s.sport, s.dport, s.flags, s.len)),
        _ => None,
    }
}

/// Counts frames that do not parse as valid TCP/UDP (bad checksums included).
fn checker(bad: &Arc<AtomicU64>) -> impl FnMut(&[u8]) -> Verdict + Send + 'static {
    let bad = bad.clone();
    move |f: &[u8]| {
        if !matches!(parse(f), Parsed::Seg(_)) {
            bad.fetch_add(1, Ordering::Relaxed);
        }
        Verdict::Pass
    }
}

#[test]
fn every_tcp_connection_completes_with_exact_counts() {
    let mut cfg = config(Proto::Tcp);
    cfg.request_bytes = 3000;
    cfg.response_bytes = 5000;
    cfg.mss = 1000;
    let bad = Arc::new(AtomicU64::new(0));
    let r = run_on(&cfg, |a, b| {
        a.set_filter(checker(&bad));
        b.set_filter(checker(&bad));
    });
    assert_eq!(bad.load(Ordering::Relaxed), 0);
    assert_eq!(
        (r.planned, r.attempted, r.established, r.completed),
        (1000, 1000, 1000, 1000)
    );
    assert_eq!(
        (r.failed, r.reset, r.unfinished, r.skipped.total()),
        (0, 0, 0, 0)
    );
    // Client: SYN, ACK, 3 request segments, FIN, last ACK. Server: SYN-ACK, 5 response
    // segments, FIN-ACK.
    assert_eq!(r.tx_packets, [7000, 7000]);
    assert_eq!(r.rx_packets, [7000, 7000]);
    // SYN 70 bytes (12 bytes of options), 58 per segment besides its payload.
    assert_eq!(
        r.tx_bytes,
        [
            1000 * (70 + 3 * 58 + 3 * 58 + 3000),
            1000 * (70 + 6 * 58 + 5000)
        ]
    );
    assert_eq!(r.rx_bytes, [r.tx_bytes[1], r.tx_bytes[0]]);
    let s = r.server;
    assert_eq!((s.accepted, s.responses, s.closed), (1000, 1000, 1000));
    assert_eq!((s.reset, s.expired, s.table_full), (0, 0, 0));
    assert_eq!((r.rx_unexpected, r.rx_malformed, r.rx_foreign), (0, 0, 0));
    for l in [
        &r.connect_latency,
        &r.transaction_latency,
        &r.response_latency,
    ] {
        assert_eq!(l.samples, 1000);
        assert!(l.min_us > 0.0 && l.max_us < 1000.0, "{l:?}");
    }
    assert!(r.transaction_latency.avg_us > r.response_latency.avg_us);
    assert!(
        (r.cps_achieved - 10_000.0).abs() < 100.0,
        "{}",
        r.cps_achieved
    );
    assert!(r.concurrent_max >= 1 && r.concurrent_max < 100);
}

#[test]
fn every_udp_pair_completes_with_exact_counts() {
    let cfg = config(Proto::Udp);
    let bad = Arc::new(AtomicU64::new(0));
    let r = run_on(&cfg, |a, b| {
        a.set_filter(checker(&bad));
        b.set_filter(checker(&bad));
    });
    assert_eq!(bad.load(Ordering::Relaxed), 0);
    assert_eq!(
        (r.attempted, r.established, r.completed, r.failed, r.reset),
        (1000, 1000, 1000, 0, 0)
    );
    assert_eq!(r.tx_packets, [1000, 1000]);
    assert_eq!(
        r.tx_bytes,
        [
            1000 * (14 + 20 + 8 + 64 + 4),
            1000 * (14 + 20 + 8 + 1024 + 4)
        ]
    );
    assert_eq!(r.server.accepted, 1000);
    assert_eq!(r.transaction_latency.samples, 1000);
}

#[test]
fn dropped_syn_acks_fail_every_connection_after_its_retries() {
    let mut cfg = config(Proto::Tcp);
    cfg.retries = 2;
    let r = run_on(&cfg, |_, b| {
        b.set_filter(|f: &[u8]| match tcp_of(f) {
            Some((_, _, fl, _)) if fl & flags::SYN != 0 => Verdict::Drop,
            _ => Verdict::Pass,
        })
    });
    assert_eq!((r.attempted, r.established, r.completed), (1000, 0, 0));
    assert_eq!((r.failed, r.failures.syn_timeout, r.reset), (1000, 1000, 0));
    assert_eq!(r.syn_retransmits, 2000);
    assert_eq!(r.server.syn_ack_retransmits, 2000);
    assert_eq!(r.tx_packets[0], 3000, "SYN and two retransmissions each");
    assert_eq!(r.connect_latency.samples, 0);
}

/// The client port of connection `k` (tuples go address first: 4 addresses).
fn port_of(k: u64) -> u16 {
    1024 + (k / 4) as u16
}

#[test]
fn a_lossy_dut_fails_exactly_the_connections_it_broke() {
    let cfg = config(Proto::Tcp);
    // Lose every SYN of ports ≡ 0 (mod 5), only the first SYN of ports ≡ 0 (mod 3), and
    // the response to ports ≡ 0 (mod 7).
    let first_syn_seen = Arc::new(Mutex::new(HashSet::new()));
    let seen = first_syn_seen.clone();
    let r = run_on(&cfg, |a, b| {
        a.set_filter(move |f: &[u8]| match tcp_of(f) {
            Some((sp, _, fl, _)) if fl == flags::SYN => {
                if sp % 5 == 0
                    || (sp % 3 == 0 && seen.lock().unwrap().insert((f[26..30].to_vec(), sp)))
                {
                    Verdict::Drop
                } else {
                    Verdict::Pass
                }
            }
            _ => Verdict::Pass,
        });
        b.set_filter(|f: &[u8]| match tcp_of(f) {
            Some((_, dp, _, len)) if len > 0 && dp % 7 == 0 => Verdict::Drop,
            _ => Verdict::Pass,
        });
    });
    let ports: Vec<u16> = (0..1000).map(port_of).collect();
    let n = |p: &dyn Fn(u16) -> bool| ports.iter().filter(|&&x| p(x)).count() as u64;
    let syn_fail = n(&|p| p % 5 == 0);
    let resp_fail = n(&|p| p % 5 != 0 && p % 7 == 0);
    let retried = n(&|p| p % 5 != 0 && p % 3 == 0);
    assert!(syn_fail > 0 && resp_fail > 0 && retried > 0);
    assert_eq!(r.failures.syn_timeout, syn_fail);
    assert_eq!(r.failures.response_timeout, resp_fail);
    assert_eq!(r.failures.close_timeout, 0);
    assert_eq!(r.completed, 1000 - syn_fail - resp_fail);
    assert_eq!(r.syn_retransmits, syn_fail + retried);
    assert_eq!(r.established, 1000 - syn_fail);
    // A client that gave up on its response aborts with a RST the server takes.
    assert_eq!(r.server.reset, resp_fail);
    assert_eq!(r.reset, 0);
}

/// Rewrite the TCP flags of frame `f` (checksum updated incrementally).
fn set_tcp_flags(f: &mut [u8], fl: u8) {
    let old = u16::from_be_bytes([f[L4_OFF + 12], f[L4_OFF + 13]]);
    let new = (old & 0xff00) | u16::from(fl);
    f[L4_OFF + 12..L4_OFF + 14].copy_from_slice(&new.to_be_bytes());
    let c = u16::from_be_bytes([f[L4_OFF + 16], f[L4_OFF + 17]]);
    f[L4_OFF + 16..L4_OFF + 18].copy_from_slice(&update16(c, old, new).to_be_bytes());
}

#[test]
fn a_dut_answering_with_resets_is_counted_as_reset() {
    let cfg = config(Proto::Tcp);
    // The DUT turns the SYN-ACK to even client ports into a RST-ACK (it acknowledges the
    // SYN, so the client must take it), and the response to ports ≡ 1 (mod 3) into a RST.
    let r = run_on(&cfg, |_, b| {
        b.set_rewrite(|f: &mut [u8]| {
            if let Some((_, dp, fl, len)) = tcp_of(f) {
                let early = fl & flags::SYN != 0 && dp % 2 == 0;
                let late = len > 0 && dp % 2 == 1 && dp % 3 == 1;
                if early || late {
                    set_tcp_flags(f, flags::RST | flags::ACK);
                }
            }
            Verdict::Pass
        })
    });
    let ports: Vec<u16> = (0..1000).map(port_of).collect();
    let early = ports.iter().filter(|&&p| p % 2 == 0).count() as u64;
    let late = ports.iter().filter(|&&p| p % 2 == 1 && p % 3 == 1).count() as u64;
    assert_eq!(r.reset, early + late);
    assert_eq!(r.reset_before_established, early);
    assert_eq!(r.established, 1000 - early);
    assert_eq!(r.completed, 1000 - early - late);
    assert_eq!(r.failed, 0);
}

/// Source NAT in the "DUT": every client (address, port) leaves as 203.0.113.7 and a port
/// of its own; replies are translated back. Checksums updated incrementally (RFC 1624).
fn snat(a: &LoopPort, b: &LoopPort) {
    const PUBLIC: u32 = 0xcb00_7107;
    /// (client address, port) → public port, and back.
    type Map = (HashMap<(u32, u16), u16>, HashMap<u16, (u32, u16)>);
    let map: Arc<Mutex<Map>> = Arc::default();
    let rewrite = |f: &mut [u8], src: bool, to: (u32, u16)| {
        let a_off = L3_OFF + if src { 12 } else { 16 };
        let p_off = L4_OFF + if src { 0 } else { 2 };
        let c_off = L4_OFF + if f[L3_OFF + 9] == 6 { 16 } else { 6 };
        let old_a = u32::from_be_bytes(f[a_off..a_off + 4].try_into().unwrap());
        let old_p = u16::from_be_bytes([f[p_off], f[p_off + 1]]);
        f[a_off..a_off + 4].copy_from_slice(&to.0.to_be_bytes());
        f[p_off..p_off + 2].copy_from_slice(&to.1.to_be_bytes());
        let ip = u16::from_be_bytes([f[L3_OFF + 10], f[L3_OFF + 11]]);
        f[L3_OFF + 10..L3_OFF + 12].copy_from_slice(&update32(ip, old_a, to.0).to_be_bytes());
        let l4 = u16::from_be_bytes([f[c_off], f[c_off + 1]]);
        let l4 = update16(update32(l4, old_a, to.0), old_p, to.1);
        f[c_off..c_off + 2].copy_from_slice(&l4.to_be_bytes());
    };
    let m = map.clone();
    a.set_rewrite(move |f: &mut [u8]| {
        let Parsed::Seg(s) = parse(f) else {
            return Verdict::Drop;
        };
        let mut g = m.lock().unwrap();
        let next = 20000 + g.0.len() as u16;
        let port = *g.0.entry((s.src, s.sport)).or_insert(next);
        g.1.insert(port, (s.src, s.sport));
        drop(g);
        rewrite(f, true, (PUBLIC, port));
        Verdict::Pass
    });
    b.set_rewrite(move |f: &mut [u8]| {
        let Parsed::Seg(s) = parse(f) else {
            return Verdict::Drop;
        };
        match map.lock().unwrap().1.get(&s.dport) {
            Some(&orig) if s.dst == PUBLIC => {
                rewrite(f, false, orig);
                Verdict::Pass
            }
            _ => Verdict::Drop,
        }
    });
}

#[test]
fn connections_complete_through_a_source_nat() {
    for proto in [Proto::Tcp, Proto::Udp] {
        let cfg = config(proto);
        let bad = Arc::new(AtomicU64::new(0));
        let r = run_on(&cfg, |a, b| {
            snat(a, b);
            a.set_filter(checker(&bad));
            b.set_filter(checker(&bad));
        });
        assert_eq!(
            bad.load(Ordering::Relaxed),
            0,
            "{proto}: NAT broke a checksum"
        );
        assert_eq!(
            (r.attempted, r.completed, r.failed, r.reset, r.rx_unexpected),
            (1000, 1000, 0, 0, 0),
            "{proto}"
        );
        assert_eq!(r.server.accepted, 1000);
        if proto == Proto::Tcp {
            assert_eq!(r.server.closed, 1000);
        }
    }
}

#[test]
fn concurrency_is_capped_and_connections_are_held() {
    let mut cfg = config(Proto::Tcp);
    cfg.hold = Duration::from_millis(20);
    cfg.max_concurrent = 50;
    let r = run_on(&cfg, |_, _| {});
    assert_eq!(r.concurrent_max, 50);
    assert!(r.skipped.concurrency > 0, "{:?}", r.skipped);
    assert_eq!(r.skipped.tuples, 0);
    assert_eq!(r.completed, r.attempted);
    assert_eq!(r.failed + r.reset + r.unfinished, 0);
    // Each connection lives a little over 20 ms: 50 at a time for 100 ms is about 250.
    assert!((200..=300).contains(&r.attempted), "{}", r.attempted);
    // Held connections acknowledged the response before closing: one more client frame.
    assert_eq!(r.tx_packets[0], r.attempted * 6);
    assert!(r.transaction_latency.max_us < 1000.0);
}

#[test]
fn tuples_rest_before_reuse() {
    let mut cfg = config(Proto::Udp);
    cfg.clients = AddrRange::single(addr("198.18.1.1"));
    cfg.client_ports = PortRange::new(40000, 10);
    cfg.cps = 1000.0;
    cfg.reuse_delay = Duration::from_millis(50);
    // Record which source port each request used, in order.
    let used = Arc::new(Mutex::new(Vec::new()));
    let u = used.clone();
    let r = run_on(&cfg, |a, _| {
        a.set_filter(move |f: &[u8]| {
            if let Parsed::Seg(s) = parse(f) {
                u.lock().unwrap().push(s.sport);
            }
            Verdict::Pass
        })
    });
    // Ten tuples, each reusable 50 ms after its (sub-millisecond) transaction: used at
    // about k ms and k + 51 ms, and never a third time within the 100 ms.
    assert_eq!(r.planned, 100);
    assert_eq!((r.attempted, r.completed), (20, 20));
    assert_eq!(r.skipped.tuples, 80, "{:?}", r.skipped);
    let used = used.lock().unwrap();
    let expect: Vec<u16> = (40000..40010).chain(40000..40010).collect();
    assert_eq!(*used, expect);
}

#[test]
fn garbage_on_the_ports_is_counted_and_ignored() {
    let cfg = config(Proto::Tcp);
    let mut mem = Arena::new(FRAMES);
    let (mut a, mut b) = loop_pair(8192);
    // On each port: an ARP frame, a truncated IPv4 TCP frame, a frame with a bad TCP
    // checksum, and a valid segment nobody expects.
    let w = Writer::new([2; 6], [3; 6], 64);
    let mut seg = [0u8; 128];
    let f = TcpFields {
        src: u32::from(Ipv4Addr::new(198, 19, 1, 1)),
        dst: u32::from(Ipv4Addr::new(198, 18, 1, 1)),
        sport: 80,
        dport: 1024,
        seq: 1,
        ack: 1,
        flags: flags::ACK,
        mss: 0,
        len: 10,
    };
    let n = w.tcp(&mut seg, &f);
    let mut bad = seg;
    bad[n - 1] ^= 0xff;
    let mut arp = [0u8; 60];
    arp[12] = 8;
    arp[13] = 6;
    for p in [&a, &b] {
        for frame in [&arp[..], &seg[..40], &bad[..n], &seg[..n]] {
            p.inject(mem.load(frame, 0).unwrap());
        }
    }
    let mut g = Stateful::new(&cfg).unwrap();
    let r = g
        .run_with_clock(&mut mem, &mut a, &mut b, &mut VirtualClock::new(0, 1000))
        .unwrap();
    assert_eq!((r.rx_foreign, r.rx_malformed, r.rx_unexpected), (2, 4, 2));
    assert_eq!((r.attempted, r.completed), (1000, 1000));
}

#[test]
fn configs_outside_the_limits_are_refused_with_the_reason() {
    let bad = |f: &dyn Fn(&mut StatefulConfig), what: &str| {
        let mut c = config(Proto::Udp);
        f(&mut c);
        let e = format!("{:#}", Stateful::new(&c).unwrap_err());
        assert!(e.contains(what), "{e}");
    };
    bad(&|c| c.request_bytes = 2000, "request size 2000");
    bad(&|c| c.response_bytes = 0, "response size 0");
    bad(
        &|c| c.clients = AddrRange::single(addr("2001:db8::1")),
        "IPv4 only",
    );
    bad(&|c| c.cps = 0.0, "connection rate");
    bad(&|c| c.mss = 20, "MSS 20");
    bad(
        &|c| c.client_ports = PortRange::new(65000, 1000),
        "client ports",
    );
    bad(
        &|c| c.duration = Duration::from_micros(1),
        "less than one connection",
    );
    assert_eq!("tcp".parse::<Proto>().unwrap(), Proto::Tcp);
    assert!("sctp".parse::<Proto>().is_err());
}

/// A deterministic "random" loss of `percent` of the frames.
fn lossy(seed: u64, percent: u64) -> impl FnMut(&[u8]) -> Verdict + Send + 'static {
    let mut x = seed | 1;
    move |_: &[u8]| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if x % 100 < percent {
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
    /// Whatever the loss, protocol, hold and limits: every attempted connection is
    /// counted exactly once, and no frame buffer leaks (checked by `run_on`).
    #[test]
    fn counts_always_add_up(
        tcp in proptest::bool::ANY,
        seed in 1u64..u64::MAX,
        loss in 0u64..40,
        hold_ms in 0u64..10,
        max_concurrent in 1u32..100,
        retries in 0u8..3,
        drain_ms in proptest::option::of(0u64..30),
    ) {
        let mut cfg = config(if tcp { Proto::Tcp } else { Proto::Udp });
        cfg.duration = Duration::from_millis(30);
        cfg.hold = Duration::from_millis(hold_ms);
        cfg.max_concurrent = max_concurrent;
        cfg.retries = retries;
        cfg.request_bytes = 1200;
        cfg.response_bytes = if tcp { 3000 } else { 1400 };
        cfg.drain = drain_ms.map(Duration::from_millis);
        let r = run_on(&cfg, |a, b| {
            a.set_filter(lossy(seed, loss));
            b.set_filter(lossy(seed.rotate_left(7), loss));
        });
        proptest::prop_assert!(r.attempted > 0);
        proptest::prop_assert!(r.concurrent_max <= max_concurrent);
        if loss == 0 {
            proptest::prop_assert_eq!(r.completed + r.unfinished, r.attempted);
        }
        if cfg.drain.is_none() {
            proptest::prop_assert_eq!(r.unfinished, 0);
        }
    }
}
