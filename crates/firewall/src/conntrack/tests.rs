use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::tcp_flags::{ACK, FIN, RST, SYN};
use super::*;

const SEC: u64 = 1_000_000_000;
const T0: u64 = 1000 * SEC;

fn ct(max: usize) -> Conntrack {
    Conntrack::new(&Config {
        max_entries: max,
        seed: Some(42),
        ..Config::default()
    })
    .unwrap()
}

fn client() -> Tuple {
    Tuple::v4(
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(192, 0, 2, 80),
        40000,
        80,
        proto::TCP,
    )
}

fn seg(t: Tuple, flags: u8, seq: u32, ack: u32, len: u32, now: u64) -> Packet {
    Packet {
        tuple: t,
        l4: L4::Tcp(Segment {
            flags,
            seq,
            ack,
            window: 65535,
            wscale: None,
            payload_len: len,
        }),
        now_ns: now,
    }
}

fn syn(t: Tuple, isn: u32, wscale: Option<u8>, now: u64) -> Packet {
    let mut p = seg(t, SYN, isn, 0, 0, now);
    if let L4::Tcp(s) = &mut p.l4 {
        s.wscale = wscale;
    }
    p
}

/// Opens a flow with a full handshake: client ISN 1000, server ISN 5000.
fn handshake(ct: &mut Conntrack, t: Tuple, now: u64) -> FlowId {
    let p = syn(t, 1000, Some(7), now);
    let v = ct.lookup(&p);
    assert_eq!(v.state, CtState::New);
    assert_eq!(v.flow, None);
    let id = ct.create(&p, &v).unwrap();
    let mut sa = syn(t.reversed(), 5000, Some(7), now);
    if let L4::Tcp(s) = &mut sa.l4 {
        s.flags = SYN | ACK;
        s.ack = 1001;
    }
    let v = ct.lookup(&sa);
    assert_eq!(
        (v.state, v.dir, v.flow),
        (CtState::Established, Dir::Reply, Some(id))
    );
    assert_eq!(ct.flow(id).unwrap().state, FlowState::SynRecv);
    let v = ct.lookup(&seg(t, ACK, 1001, 5001, 0, now));
    assert_eq!((v.state, v.dir), (CtState::Established, Dir::Original));
    let f = ct.flow(id).unwrap();
    assert_eq!(f.state, FlowState::Established);
    assert!(f.assured && f.seen_reply);
    id
}

fn state(ct: &Conntrack, id: FlowId) -> FlowState {
    ct.flow(id).unwrap().state
}

#[test]
fn entry_is_at_most_128_bytes() {
    assert_eq!(Conntrack::ENTRY_BYTES, 88);
    let c = ct(1_000_000);
    let per_flow = c.memory_bytes() as f64 / c.max_entries() as f64;
    assert!(per_flow <= 98.0, "{per_flow} bytes per flow");
}

#[test]
fn config_out_of_range_is_refused() {
    let e = Conntrack::new(&Config {
        max_entries: 0,
        ..Config::default()
    });
    assert!(e.is_err());
}

#[test]
fn handshake_data_close_in_both_directions() {
    let mut c = ct(1000);
    let t = client();
    let id = handshake(&mut c, t, T0);
    // Data both ways.
    let v = c.lookup(&seg(t, ACK, 1001, 5001, 100, T0));
    assert_eq!(v.state, CtState::Established);
    let v = c.lookup(&seg(t.reversed(), ACK, 5001, 1101, 200, T0));
    assert_eq!((v.state, v.dir), (CtState::Established, Dir::Reply));
    // The client closes, the server acknowledges, closes, the client acknowledges.
    c.lookup(&seg(t, FIN | ACK, 1101, 5201, 0, T0));
    assert_eq!(state(&c, id), FlowState::FinWait);
    c.lookup(&seg(t.reversed(), ACK, 5201, 1102, 0, T0));
    assert_eq!(state(&c, id), FlowState::CloseWait);
    c.lookup(&seg(t.reversed(), FIN | ACK, 5201, 1102, 0, T0));
    assert_eq!(state(&c, id), FlowState::LastAck);
    let v = c.lookup(&seg(t, ACK, 1102, 5202, 0, T0));
    assert_eq!(v.state, CtState::Established);
    assert_eq!(state(&c, id), FlowState::TimeWait);
    let f = c.flow(id).unwrap();
    let expect = (T0 >> 30) + ticks(120) as u64;
    assert_eq!(f.expires_ns >> 30, expect);
    assert_eq!(c.counters().invalid, 0);
    assert_eq!(c.counters().created, 1);
}

#[test]
fn unacknowledged_data_shortens_the_timeout() {
    let mut c = ct(1000);
    let t = client();
    let id = handshake(&mut c, t, T0);
    let deadline = |c: &Conntrack| (c.flow(id).unwrap().expires_ns >> 30) - (T0 >> 30);
    assert_eq!(deadline(&c), ticks(432_000) as u64);
    // The client sends data the server never acknowledges.
    c.lookup(&seg(t, ACK, 1001, 5001, 500, T0));
    assert_eq!(deadline(&c), ticks(300) as u64);
    // Once acknowledged, the established timeout is back.
    c.lookup(&seg(t.reversed(), ACK, 5001, 1501, 0, T0));
    assert_eq!(deadline(&c), ticks(432_000) as u64);
}

#[test]
fn ipv6_handshake() {
    let mut c = ct(1000);
    let t = Tuple::v6(
        "2001:db8::1".parse::<Ipv6Addr>().unwrap(),
        "2001:db8::2".parse().unwrap(),
        50000,
        443,
        proto::TCP,
    );
    let id = handshake(&mut c, t, T0);
    assert_eq!(c.flow(id).unwrap().tuple, t);
}

#[test]
fn segments_out_of_the_window_are_invalid_and_change_nothing() {
    let mut c = ct(1000);
    let t = client();
    let id = handshake(&mut c, t, T0);
    let before = *c.table.get(id.0).unwrap();
    let later = T0 + 5 * SEC;
    let bad = [
        // Data far beyond what the server allowed.
        seg(t, ACK, 1001 + 10_000_000, 5001, 100, later),
        // Data from long before the window.
        seg(t, ACK, 1001u32.wrapping_sub(3_000_000), 5001, 100, later),
        // Acknowledging data the server never sent.
        seg(t, ACK, 1001, 5001 + 1_000_000, 0, later),
        // A FIN out of the window.
        seg(t.reversed(), FIN | ACK, 5001 + 9_000_000, 1001, 0, later),
    ];
    for p in &bad {
        let v = c.lookup(p);
        assert_eq!(v.state, CtState::Invalid, "{p:?}");
        assert_eq!(v.flow, Some(id));
    }
    assert_eq!(*c.table.get(id.0).unwrap(), before);
    assert_eq!(c.counters().out_of_window, 4);
    assert_eq!(c.counters().invalid, 4);
}

#[test]
fn window_scaling_widens_the_window() {
    let mut c = ct(1000);
    let t = client();
    handshake(&mut c, t, T0);
    // The server advertises 512 << 7 = 65536 bytes.
    let mut p = seg(t.reversed(), ACK, 5001, 1001, 0, T0);
    if let L4::Tcp(s) = &mut p.l4 {
        s.window = 512;
    }
    assert_eq!(c.lookup(&p).state, CtState::Established);
    // 60,000 bytes ahead is inside it.
    let v = c.lookup(&seg(t, ACK, 1001 + 60_000, 5001, 1000, T0));
    assert_eq!(v.state, CtState::Established);
}

#[test]
fn rst_is_accepted_only_in_the_window() {
    let mut c = ct(1000);
    let t = client();
    let id = handshake(&mut c, t, T0);
    c.lookup(&seg(t, ACK, 1001, 5001, 1000, T0));
    c.lookup(&seg(t.reversed(), ACK, 5001, 2001, 0, T0));
    // A blind reset, guesses beyond the window (65535 << 7 bytes).
    for guess in [
        0x8000_0000u32,
        2001 + 20_000_000,
        2001u32.wrapping_sub(20_000_000),
    ] {
        let v = c.lookup(&seg(t, RST, guess, 0, 0, T0));
        assert_eq!(v.state, CtState::Invalid);
        assert_eq!(state(&c, id), FlowState::Established);
    }
    // Before what the server already acknowledged (2001): stale.
    let v = c.lookup(&seg(t, RST, 1500, 0, 0, T0));
    assert_eq!(v.state, CtState::Invalid);
    assert_eq!(state(&c, id), FlowState::Established);
    assert_eq!(c.counters().out_of_window, 4);
    // At the expected sequence number: the flow closes.
    let v = c.lookup(&seg(t, RST, 2001, 0, 0, T0));
    assert_eq!(v.state, CtState::Established);
    assert_eq!(state(&c, id), FlowState::Close);
}

#[test]
fn an_rst_flood_does_not_close_an_established_flow() {
    use rand::{Rng, SeedableRng};
    let mut c = ct(1000);
    let t = client();
    let id = handshake(&mut c, t, T0);
    // Windows are 65535 << 7 bytes each way: stay 16M away from both sides' sequences.
    let near = |seq: u32, around: u32| seq.wrapping_sub(around).wrapping_add(16 << 20) < (32 << 20);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let mut sent = 0;
    while sent < 20_000 {
        let (seq, ack): (u32, u32) = (rng.gen(), rng.gen());
        if near(seq, 1001) || near(seq, 5001) {
            continue;
        }
        let reply = rng.gen_bool(0.5);
        let tuple = if reply { t.reversed() } else { t };
        let flags = if rng.gen_bool(0.5) { RST } else { RST | ACK };
        let v = c.lookup(&seg(tuple, flags, seq, ack, 0, T0));
        assert_eq!(v.state, CtState::Invalid);
        sent += 1;
    }
    assert_eq!(state(&c, id), FlowState::Established);
    assert_eq!(c.counters().out_of_window, 20_000);
    let v = c.lookup(&seg(t, ACK, 1001, 5001, 10, T0));
    assert_eq!(v.state, CtState::Established);
}

#[test]
fn rst_from_a_closed_port_closes_the_flow() {
    let mut c = ct(1000);
    let t = client();
    let p = syn(t, 1000, None, T0);
    let v = c.lookup(&p);
    let id = c.create(&p, &v).unwrap();
    let v = c.lookup(&seg(t.reversed(), RST | ACK, 0, 1001, 0, T0));
    assert_eq!(v.state, CtState::Established);
    assert_eq!(state(&c, id), FlowState::Close);
}

#[test]
fn packets_without_a_flow_that_cannot_open_one_are_invalid() {
    let mut c = ct(1000);
    let t = client();
    for f in [ACK, SYN | ACK, RST, FIN, FIN | ACK, 0] {
        let v = c.lookup(&seg(t, f, 1, 1, 0, T0));
        assert_eq!(v.state, CtState::Invalid, "flags {f:#x}");
    }
    assert_eq!(c.counters().no_flow, 6);
    let p = seg(t, ACK, 1, 1, 0, T0);
    let v = c.lookup(&p);
    assert_eq!(c.create(&p, &v), Err(Refused::NotNew));
    assert!(c.is_empty());
}

#[test]
fn a_syn_after_time_wait_reopens() {
    let mut c = ct(1000);
    let t = client();
    let id = handshake(&mut c, t, T0);
    c.lookup(&seg(t, FIN | ACK, 1001, 5001, 0, T0));
    c.lookup(&seg(t.reversed(), FIN | ACK, 5001, 1002, 0, T0));
    c.lookup(&seg(t, ACK, 1002, 5002, 0, T0));
    assert_eq!(state(&c, id), FlowState::TimeWait);
    let p = syn(t, 900_000, None, T0 + SEC);
    let v = c.lookup(&p);
    assert_eq!((v.state, v.flow), (CtState::New, None));
    let id2 = c.create(&p, &v).unwrap();
    assert_eq!(state(&c, id2), FlowState::SynSent);
    assert_eq!(c.counters().reopened, 1);
    assert_eq!(c.len(), 1);
}

#[test]
fn a_repeated_syn_is_new_and_finds_its_flow() {
    let mut c = ct(1000);
    let t = client();
    let p = syn(t, 1000, None, T0);
    let v = c.lookup(&p);
    let id = c.create(&p, &v).unwrap();
    let v = c.lookup(&p);
    assert_eq!((v.state, v.flow), (CtState::New, Some(id)));
    assert!(c.holds(&v));
    assert_eq!(c.create(&p, &v), Ok(id));
    // Once the flow is gone, its handle no longer holds.
    assert!(c.remove(id));
    assert!(!c.holds(&v));
    assert_eq!(c.counters().created, 1);
}

#[test]
fn udp_replied_is_assured_and_lives_longer() {
    let mut c = ct(1000);
    let t = Tuple::v4(
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(192, 0, 2, 53),
        5353,
        53,
        proto::UDP,
    );
    let p = Packet {
        tuple: t,
        l4: L4::Udp,
        now_ns: T0,
    };
    let v = c.lookup(&p);
    let id = c.create(&p, &v).unwrap();
    assert_eq!(c.lookup(&p).state, CtState::New);
    let r = Packet {
        tuple: t.reversed(),
        ..p
    };
    let v = c.lookup(&r);
    assert_eq!((v.state, v.dir), (CtState::Established, Dir::Reply));
    let f = c.flow(id).unwrap();
    assert_eq!(f.state, FlowState::UdpReplied);
    assert!(f.assured);
    // Alive after the unreplied timeout, gone after the replied one.
    let p2 = Packet {
        now_ns: T0 + 100 * SEC,
        ..p
    };
    assert_eq!(c.lookup(&p2).state, CtState::Established);
    let p3 = Packet {
        now_ns: T0 + 100 * SEC + 122 * SEC,
        ..p
    };
    let v = c.lookup(&p3);
    assert_eq!((v.state, v.flow), (CtState::New, None));
    assert_eq!(c.counters().expired, 1);
    assert!(c.is_empty());
}

#[test]
fn icmp_echo_and_related_errors() {
    let mut c = ct(1000);
    let a = Ipv4Addr::new(10, 0, 0, 1);
    let b = Ipv4Addr::new(192, 0, 2, 1);
    let echo = Tuple::v4(a, b, 77, 77, proto::ICMP);
    let req = Packet {
        tuple: echo,
        l4: L4::IcmpEcho { reply: false },
        now_ns: T0,
    };
    let rep = Packet {
        tuple: echo.reversed(),
        l4: L4::IcmpEcho { reply: true },
        now_ns: T0,
    };
    assert_eq!(c.lookup(&rep).state, CtState::Invalid);
    let v = c.lookup(&req);
    let id = c.create(&req, &v).unwrap();
    assert_eq!(c.lookup(&rep).state, CtState::Established);
    assert_eq!(state(&c, id), FlowState::Icmp);
    // A reply in the request's direction is not an answer.
    let wrong = Packet { tuple: echo, ..rep };
    assert_eq!(c.lookup(&wrong).state, CtState::Invalid);

    // A TCP flow, and a router's "port unreachable"-like error about its SYN on the way
    // back to the client.
    let t = client();
    let tid = handshake(&mut c, t, T0);
    let err = Packet {
        tuple: Tuple::v4(Ipv4Addr::new(198, 51, 100, 1), a, 0, 0, proto::ICMP),
        l4: L4::IcmpError { inner: t },
        now_ns: T0,
    };
    let v = c.lookup(&err);
    assert_eq!(
        (v.state, v.flow, v.dir),
        (CtState::Related, Some(tid), Dir::Reply)
    );
    // About a flow nobody has: invalid.
    let other = Packet {
        l4: L4::IcmpError {
            inner: Tuple { sport: 1, ..t },
        },
        ..err
    };
    assert_eq!(c.lookup(&other).state, CtState::Invalid);
    let v = c.lookup(&other);
    assert_eq!(c.create(&other, &v), Err(Refused::NotNew));
    assert_eq!(c.counters().related, 1);
}

#[test]
fn expiry_is_lazy_and_swept_in_bounded_steps() {
    let mut c = ct(10_000);
    for i in 0..1000u32 {
        let p = Packet {
            tuple: Tuple::v4(
                Ipv4Addr::from(0x0a00_0000 + i),
                Ipv4Addr::new(192, 0, 2, 1),
                1000,
                53,
                proto::UDP,
            ),
            l4: L4::Udp,
            now_ns: T0,
        };
        let v = c.lookup(&p);
        c.create(&p, &v).unwrap();
    }
    assert_eq!(c.len(), 1000);
    // Not yet expired.
    assert_eq!(c.sweep(T0 + 20 * SEC, usize::MAX), 0);
    // One entry per call: at most one removed.
    let later = T0 + 40 * SEC;
    assert!(c.sweep(later, 1) <= 1);
    let mut total = 0;
    let mut calls = 0;
    while !c.is_empty() && calls < 10_000 {
        total += c.sweep(later, 16);
        calls += 1;
    }
    assert!(c.is_empty());
    assert_eq!(c.counters().expired, 1000);
    assert!(total <= 1000);
}

#[test]
fn a_syn_flood_evicts_half_open_flows_never_established_ones() {
    let max = 1000;
    let mut c = ct(max);
    // 400 established flows.
    let mut est = Vec::new();
    for i in 0..400u32 {
        let t = Tuple::v4(
            Ipv4Addr::from(0x0a00_0000 + i),
            Ipv4Addr::new(192, 0, 2, 80),
            40000,
            80,
            proto::TCP,
        );
        est.push((t, handshake(&mut c, t, T0)));
    }
    // A flood of SYNs from spoofed sources, 20 times the table.
    let mut refused = 0;
    for i in 0..20_000u32 {
        let t = Tuple::v4(
            Ipv4Addr::from(0xc633_6400u32.wrapping_add(i.wrapping_mul(2_654_435_761))),
            Ipv4Addr::new(192, 0, 2, 80),
            (i % 60000) as u16 + 1024,
            80,
            proto::TCP,
        );
        let p = syn(t, i, None, T0 + SEC);
        let v = c.lookup(&p);
        if v.state == CtState::New && c.create(&p, &v).is_err() {
            refused += 1;
        }
    }
    assert!(c.len() <= max);
    assert!(c.counters().early_dropped > 10_000);
    // A handle of a flow dropped early no longer holds.
    let first = syn(
        Tuple::v4(
            Ipv4Addr::from(0xc633_6400u32),
            Ipv4Addr::new(192, 0, 2, 80),
            1024,
            80,
            proto::TCP,
        ),
        0,
        None,
        T0 + SEC,
    );
    let v = c.lookup(&first);
    assert!(v.flow.is_none() || c.holds(&v));
    assert_eq!(c.counters().refused, refused);
    // Every established flow is still there and still works.
    for (t, id) in &est {
        let v = c.lookup(&seg(*t, ACK, 1001, 5001, 10, T0 + 2 * SEC));
        assert_eq!((v.state, v.flow), (CtState::Established, Some(*id)));
    }
    let counts = c.state_counts();
    assert_eq!(counts[FlowState::Established as usize], 400);
    assert_eq!(counts[FlowState::SynSent as usize], c.len() - 400);
}

#[test]
fn a_table_of_assured_flows_refuses_new_ones() {
    let max = 200;
    let mut c = ct(max);
    let mut n = 0;
    // Until the table holds its maximum (a few creates meet two full buckets on the way).
    for i in 0..10 * max as u32 {
        if c.len() == max {
            break;
        }
        let t = Tuple::v4(
            Ipv4Addr::from(0x0a00_0000 + i),
            Ipv4Addr::new(192, 0, 2, 80),
            40000,
            80,
            proto::UDP,
        );
        let p = Packet {
            tuple: t,
            l4: L4::Udp,
            now_ns: T0,
        };
        let v = c.lookup(&p);
        if c.create(&p, &v).is_ok() {
            c.lookup(&Packet {
                tuple: t.reversed(),
                ..p
            });
            n += 1;
        }
    }
    assert_eq!(c.len(), n);
    for i in 0..1000u32 {
        let p = syn(
            Tuple::v4(
                Ipv4Addr::from(0xc633_6400 + i),
                Ipv4Addr::new(192, 0, 2, 80),
                1,
                80,
                proto::TCP,
            ),
            i,
            None,
            T0,
        );
        let v = c.lookup(&p);
        assert_eq!(c.create(&p, &v), Err(Refused::TableFull));
    }
    assert_eq!(n, max);
    assert!(c.counters().refused >= 1000);
    assert_eq!(c.counters().early_dropped, 0);
    assert_eq!(c.state_counts()[FlowState::UdpReplied as usize], n);
}

#[test]
fn bursts_agree_with_single_lookups() {
    let mut a = ct(5000);
    let mut b = ct(5000);
    let mut pkts = Vec::new();
    for i in 0..300u32 {
        let t = Tuple::v4(
            Ipv4Addr::from(0x0a00_0000 + i % 100),
            Ipv4Addr::new(192, 0, 2, 1),
            1000 + (i % 7) as u16,
            53,
            proto::UDP,
        );
        let t = if i % 3 == 0 { t.reversed() } else { t };
        pkts.push(Packet {
            tuple: t,
            l4: L4::Udp,
            now_ns: T0,
        });
    }
    for chunk in pkts.chunks(37) {
        let mut out = [Verdict::default(); 37];
        b.lookup_burst(chunk, &mut out);
        for (p, vb) in chunk.iter().zip(out) {
            let va = a.lookup(p);
            assert_eq!((va.state, va.dir, va.flow), (vb.state, vb.dir, vb.flow));
            if va.state == CtState::New {
                assert_eq!(a.create(p, &va), b.create(p, &vb));
            }
        }
    }
    assert_eq!(a.counters(), b.counters());
}

#[test]
fn nat_binding_is_kept() {
    let mut c = ct(100);
    let id = handshake(&mut c, client(), T0);
    assert_eq!(c.nat(id), None);
    assert!(c.set_nat(id, 7));
    assert_eq!(c.nat(id), Some(7));
    assert_eq!(c.flow(id).unwrap().nat, Some(7));
    assert!(c.remove(id));
    assert!(!c.set_nat(id, 8));
    assert_eq!(c.counters().removed, 1);
}

mod props {
    use super::*;
    use proptest::prelude::*;

    fn tcp_packet() -> impl Strategy<Value = (bool, u8, u32, u32, u16, u32, u64)> {
        (
            any::<bool>(),
            prop_oneof![
                Just(SYN),
                Just(SYN | ACK),
                Just(ACK),
                Just(FIN | ACK),
                Just(RST),
                Just(RST | ACK),
                any::<u8>()
            ],
            prop_oneof![0u32..3000, 4000u32..8000, any::<u32>()],
            prop_oneof![0u32..3000, 4000u32..8000, any::<u32>()],
            any::<u16>(),
            prop_oneof![Just(0u32), 0u32..2000, any::<u32>()],
            0u64..400,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Random segments in both directions: nothing panics, an `Invalid` verdict leaves
        /// the entry as it was, and the flow's key never changes.
        #[test]
        fn tcp_tracking_never_panics_and_invalid_changes_nothing(
            pkts in proptest::collection::vec(tcp_packet(), 1..60),
            established in any::<bool>(),
        ) {
            let mut c = ct(64);
            let t = client();
            let id = if established {
                handshake(&mut c, t, T0)
            } else {
                let p = syn(t, 1000, Some(3), T0);
                let v = c.lookup(&p);
                c.create(&p, &v).unwrap()
            };
            let mut now = T0;
            for (reply, flags, seq, ack, window, len, dt) in pkts {
                now += dt * SEC / 10;
                let tuple = if reply { t.reversed() } else { t };
                let mut p = seg(tuple, flags, seq, ack, len, now);
                if let L4::Tcp(s) = &mut p.l4 {
                    s.window = window;
                    s.wscale = (flags & SYN != 0).then_some((window % 16) as u8);
                }
                let before = c.table.get(id.0).copied();
                let v = c.lookup(&p);
                if v.state == CtState::Invalid && v.flow.is_some() {
                    prop_assert_eq!(c.table.get(id.0).copied(), before);
                }
                if let Some(f) = v.flow {
                    prop_assert_eq!(f, id);
                    let info = c.flow(id).unwrap();
                    prop_assert_eq!(info.tuple, t);
                    prop_assert!(info.state.is_tcp());
                }
                if v.state == CtState::New && v.flow.is_none() {
                    // Expired or reopened: start over with this SYN.
                    let r = c.create(&p, &v);
                    prop_assert!(r.is_ok());
                    return Ok(());
                }
            }
        }

        /// A created flow is found from both directions with the right direction, and is
        /// gone once removed.
        #[test]
        fn conntrack_round_trip(
            src in any::<u128>(), dst in any::<u128>(), sport in any::<u16>(),
            dport in any::<u16>(), kind in 0u8..4, v6 in any::<bool>(), zone in 0u16..3,
        ) {
            let (src, dst) = if v6 { (src, dst) } else { (src & 0xffff_ffff, dst & 0xffff_ffff) };
            let proto = [proto::TCP, proto::UDP, proto::ICMP, 47][kind as usize];
            let mut t = Tuple { src, dst, sport, dport, proto, v6, zone };
            let l4 = match kind {
                0 => L4::Tcp(Segment { flags: SYN, seq: 1, window: 1000, ..Segment::default() }),
                1 => L4::Udp,
                2 => { t.dport = t.sport; L4::IcmpEcho { reply: false } }
                _ => { t.sport = 0; t.dport = 0; L4::Other }
            };
            prop_assume!(t != t.reversed());
            let mut c = ct(16);
            let p = Packet { tuple: t, l4, now_ns: T0 };
            let v = c.lookup(&p);
            prop_assert_eq!(v.state, CtState::New);
            let id = c.create(&p, &v).unwrap();
            prop_assert_eq!(c.flow(id).unwrap().tuple, t);
            let again = c.lookup(&p);
            prop_assert_eq!((again.flow, again.dir), (Some(id), Dir::Original));
            let reply_l4 = match l4 {
                L4::Tcp(_) => L4::Tcp(Segment { flags: SYN | ACK, seq: 9, ack: 2, window: 1000, ..Segment::default() }),
                L4::IcmpEcho { .. } => L4::IcmpEcho { reply: true },
                other => other,
            };
            let r = c.lookup(&Packet { tuple: t.reversed(), l4: reply_l4, now_ns: T0 });
            prop_assert_eq!((r.state, r.flow, r.dir), (CtState::Established, Some(id), Dir::Reply));
            prop_assert!(c.remove(id));
            prop_assert_eq!(c.lookup(&p).flow, None);
        }

        /// The table against a map: random creates and removes of UDP flows.
        #[test]
        fn table_agrees_with_a_map(ops in proptest::collection::vec((0u32..300, any::<bool>()), 1..600)) {
            let mut c = ct(1000);
            let mut model: HashMap<u32, FlowId> = HashMap::new();
            for (n, add) in ops {
                let p = Packet {
                    tuple: Tuple::v4(Ipv4Addr::from(n), Ipv4Addr::new(192, 0, 2, 1), 7, 7, proto::UDP),
                    l4: L4::Udp,
                    now_ns: T0,
                };
                let v = c.lookup(&p);
                prop_assert_eq!(v.flow, model.get(&n).copied());
                if add {
                    let id = c.create(&p, &v).unwrap();
                    prop_assert_eq!(*model.entry(n).or_insert(id), id);
                } else if let Some(id) = model.remove(&n) {
                    prop_assert!(c.remove(id));
                }
                prop_assert_eq!(c.len(), model.len());
            }
            prop_assert_eq!(c.flows().count(), model.len());
        }
    }
}

#[test]
fn the_table_fills_to_its_maximum() {
    // Two choices and one cuckoo step leave no flow refused at 90 % of the index.
    let max = 50_000;
    let mut c = ct(max);
    for i in 0..max as u32 {
        let p = Packet {
            tuple: Tuple::v4(
                Ipv4Addr::from(i.wrapping_mul(2_654_435_761)),
                Ipv4Addr::new(192, 0, 2, 1),
                1,
                2,
                proto::UDP,
            ),
            l4: L4::Udp,
            now_ns: T0,
        };
        let v = c.lookup(&p);
        c.create(&p, &v).unwrap();
    }
    assert_eq!(c.len(), max);
    assert_eq!(c.counters().early_dropped, 0);
    // Every flow is still found where the cuckoo steps moved it.
    assert_eq!(c.flows().count(), max);
    for (id, f) in c.flows().collect::<Vec<_>>() {
        let v = c.lookup(&Packet {
            tuple: f.tuple,
            l4: L4::Udp,
            now_ns: T0,
        });
        assert_eq!(v.flow, Some(id));
    }
}
