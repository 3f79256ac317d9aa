//! The generator over the in-memory port pair, on a virtual clock: exact accounting under
//! drops, reordering, duplication, foreign and stale frames, full rings and exhausted
//! memory; frame sizes, checksums and weights of every profile; flows.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dataplane::{Arena, PacketMemory, Pkt, HEADROOM};
use tester::flows::{AddrRange, Endpoints, FlowSet, Prefix};
use tester::frame::{stream_field, Template};
use tester::testing::{lab_traffic, loop_pair, LoopPort, Verdict};
use tester::{
    Family, FrameKind, Generator, Profile, Signature, TrafficConfig, TrialConfig, TrialResult,
    VirtualClock,
};
use wire::checksum::{pseudo_v4, pseudo_v6};
use wire::{EthernetFrame, Ipv4Packet, Ipv6Packet, UdpPacket};

/// A trial of `frames` frames per direction at 1 Mpps (virtual), 100 ns per clock read.
fn trial(frames: u64, bidirectional: bool) -> TrialConfig {
    let mut t = TrialConfig::new(1e6, Duration::from_micros(frames));
    t.bidirectional = bidirectional;
    t.drain = Duration::from_micros(200);
    t
}

fn gen(profile: &str, bidirectional: bool) -> Generator {
    Generator::new(&lab_traffic(
        Profile::parse(profile).unwrap(),
        bidirectional,
    ))
    .unwrap()
}

fn run(
    g: &mut Generator,
    mem: &mut Arena,
    p0: &mut LoopPort,
    p1: &mut LoopPort,
    t: &TrialConfig,
) -> TrialResult {
    g.run_trial_with_clock(mem, p0, p1, t, &mut VirtualClock::new(1_000_000, 100))
        .unwrap()
}

/// Drop/duplicate/hold frames of direction 0 whose sequence number is in the lists.
fn impair(
    drop: &'static [u32],
    dup: &'static [u32],
    hold: &'static [u32],
) -> impl FnMut(&[u8]) -> Verdict + Send {
    move |f: &[u8]| match Signature::parse(f) {
        Some(s) if drop.contains(&s.seq) => Verdict::Drop,
        Some(s) if dup.contains(&s.seq) => Verdict::Duplicate,
        Some(s) if hold.contains(&s.seq) => Verdict::Hold,
        _ => Verdict::Pass,
    }
}

#[test]
fn exact_accounting_without_impairment() {
    let mut g = gen("imix2", false);
    let (mut p0, mut p1) = loop_pair(4096);
    let mut mem = Arena::new(8192);
    let r = run(&mut g, &mut mem, &mut p0, &mut p1, &trial(20_000, false));
    assert_eq!((r.tx, r.rx, r.lost), (20_000, 20_000, 0));
    assert_eq!(
        (r.duplicates, r.reordered, r.foreign, r.stale, r.misdirected),
        (0, 0, 0, 0, 0)
    );
    assert_eq!((r.tx_skipped, r.tx_no_buffer), (0, 0));
    assert_eq!(r.directions, 1);
    assert_eq!(r.streams.len(), 2);
    assert_eq!(r.streams.iter().map(|s| s.tx).sum::<u64>(), 20_000);
    assert_eq!(r.latency.samples, 20_000);
    assert!((r.tx_pps - 1e6).abs() < 1.0, "{}", r.tx_pps);
    assert_eq!(r.tx_bytes, r.rx_bytes);
    // Every frame went back to the memory.
    assert_eq!(mem.free_count(), 8192);
    // Trials repeat exactly.
    let r2 = run(&mut g, &mut mem, &mut p0, &mut p1, &trial(20_000, false));
    assert_eq!((r2.tx, r2.rx, r2.tx_bytes), (r.tx, r.rx, r.tx_bytes));
}

#[test]
fn deliberate_drops_are_exactly_the_loss() {
    let mut g = gen("imix1", false);
    let (mut p0, mut p1) = loop_pair(4096);
    p0.set_filter(impair(&[0, 1, 500, 4_999], &[], &[]));
    let mut mem = Arena::new(8192);
    let r = run(&mut g, &mut mem, &mut p0, &mut p1, &trial(5_000, false));
    assert_eq!((r.tx, r.rx, r.lost), (5_000, 4_996, 4));
    assert_eq!((r.duplicates, r.reordered), (0, 0));
    assert_eq!(p0.stats().dropped, 4);
    assert_eq!(r.streams[0].lost, 4);
    assert_eq!(mem.free_count(), 8192);
}

#[test]
fn swapped_frames_are_reordered_not_lost() {
    let mut g = gen("ipv4-64", false);
    let (mut p0, mut p1) = loop_pair(4096);
    p0.set_filter(impair(&[], &[], &[100, 2_000]));
    let mut mem = Arena::new(8192);
    let r = run(&mut g, &mut mem, &mut p0, &mut p1, &trial(5_000, false));
    assert_eq!(
        (r.tx, r.rx, r.lost, r.reordered, r.duplicates),
        (5_000, 5_000, 0, 2, 0)
    );
}

#[test]
fn duplicates_are_detected() {
    let mut g = gen("ipv6-78", false);
    let (mut p0, mut p1) = loop_pair(4096);
    p0.set_filter(impair(&[7], &[3, 4, 4_000], &[]));
    let mut mem = Arena::new(8192);
    let r = run(&mut g, &mut mem, &mut p0, &mut p1, &trial(5_000, false));
    assert_eq!(
        (r.tx, r.rx, r.lost, r.duplicates, r.reordered),
        (5_000, 4_999, 1, 3, 0)
    );
    assert_eq!(r.streams[0].family, Family::Ipv6);
    // Every received signature frame is a latency sample, copies included.
    assert_eq!(r.latency.samples, 5_002);
}

#[test]
fn foreign_stale_and_misdirected_frames_are_counted_apart() {
    let mut g = gen("ipv4-64", false);
    let (mut p0, mut p1) = loop_pair(4096);
    let mut mem = Arena::new(8192);
    // Trial 1 holds its last frame: lost now, delivered late into trial 2.
    p0.set_filter(impair(&[], &[], &[999]));
    let r1 = run(&mut g, &mut mem, &mut p0, &mut p1, &trial(1_000, false));
    assert_eq!((r1.tx, r1.rx, r1.lost), (1_000, 999, 1));
    p0.clear_filter();
    p0.release_held();
    // Foreign frames on both ports, and a frame of trial 2's direction 0 arriving on port 0.
    for _ in 0..3 {
        let p = mem.load(&[0xab; 60], 0).unwrap();
        p1.inject(p);
        let p = mem.load(&[0xcd; 80], 0).unwrap();
        p0.inject(p);
    }
    let t = Template::new(
        FrameKind {
            family: Family::Ipv4,
            size: 64,
        },
        [2, 0, 0, 0, 0, 9],
        [2, 0, 0, 0, 0, 1],
        64,
        true,
    );
    let buf = mem.alloc().unwrap();
    let next_tag = (g.tag() + 1) & 0x1fff;
    t.fill(
        &mut mem.frame_mut(buf)[HEADROOM..],
        1,
        2,
        3,
        4,
        stream_field(next_tag, 0, Family::Ipv4),
        0,
        0,
    );
    p0.inject(Pkt::new(buf, HEADROOM as u16, t.len() as u16, 0));
    let r2 = run(&mut g, &mut mem, &mut p0, &mut p1, &trial(1_000, false));
    assert_eq!((r2.tx, r2.rx, r2.lost, r2.duplicates), (1_000, 1_000, 0, 0));
    assert_eq!((r2.foreign, r2.stale, r2.misdirected), (6, 1, 1));
    assert_eq!(mem.free_count(), 8192);
}

#[test]
fn bidirectional_counts_each_direction() {
    let mut g = gen("simple", true);
    let (mut p0, mut p1) = loop_pair(4096);
    p1.set_filter(impair(&[10, 11], &[], &[]));
    let mut mem = Arena::new(8192);
    let r = run(&mut g, &mut mem, &mut p0, &mut p1, &trial(6_000, true));
    assert_eq!(r.directions, 2);
    assert_eq!((r.tx, r.rx, r.lost), (12_000, 11_998, 2));
    let per_dir = |d: u8| -> (u64, u64) {
        r.streams
            .iter()
            .filter(|s| s.direction == d)
            .fold((0, 0), |a, s| (a.0 + s.tx, a.1 + s.lost))
    };
    assert_eq!(per_dir(0), (6_000, 0));
    assert_eq!(per_dir(1), (6_000, 2));
    assert!((r.tx_pps - 2e6).abs() < 2.0);
    // A unidirectional generator refuses a bidirectional trial.
    let mut u = gen("simple", false);
    assert!(u
        .run_trial_with_clock(
            &mut mem,
            &mut p0,
            &mut p1,
            &trial(10, true),
            &mut VirtualClock::new(0, 1)
        )
        .is_err());
}

#[test]
fn full_ring_and_exhausted_memory_keep_accounting_exact() {
    // The link queues 8 frames; the generator wants bursts of 32: refused frames are
    // retried, what cannot be caught up is skipped, and what was sent all arrives.
    let mut g = gen("imix2", false);
    let (mut p0, mut p1) = loop_pair(8);
    let mut mem = Arena::new(4096);
    let mut t = trial(20_000, false);
    t.rate_pps = 2e8; // 200 Mpps virtual: 20 frames due per clock read
    t.duration = Duration::from_micros(100);
    t.max_lag = Duration::from_micros(1);
    let r = run(&mut g, &mut mem, &mut p0, &mut p1, &t);
    assert!(r.tx_port_full > 0 && r.tx_skipped > 0);
    assert_eq!(r.tx + r.tx_skipped, 20_000);
    assert_eq!((r.rx, r.lost, r.duplicates, r.reordered), (r.tx, 0, 0, 0));
    assert!(r.tx_pps < 0.5 * t.rate_pps);
    // Refused frames are resent with the same content: sizes follow the pattern exactly.
    let cycle = g.profile().cycle(1);
    let want: u64 = cycle
        .iter()
        .cycle()
        .take(r.tx as usize)
        .map(|k| u64::from(k.size))
        .sum();
    assert_eq!(r.tx_bytes, want);

    // 16 frames of memory, frames queue on the link until polled.
    let mut small = Arena::new(16);
    let (mut p0, mut p1) = loop_pair(1024);
    let mut t = trial(5_000, false);
    t.rate_pps = 1e8;
    t.duration = Duration::from_micros(50);
    let r = run(&mut g, &mut small, &mut p0, &mut p1, &t);
    assert!(r.tx_no_buffer > 0);
    assert_eq!((r.rx, r.lost), (r.tx, 0));
    assert_eq!(small.free_count(), 16);
}

#[test]
fn jumbo_frames_beyond_packet_memory_are_refused_at_setup() {
    let p = Profile::parse("eantc1").unwrap();
    assert_eq!(p.max_frame_size(), 9000);
    let mut g = Generator::new(&lab_traffic(p.clone(), false)).unwrap();
    let (mut p0, mut p1) = loop_pair(64);
    // Packet memory without big frames cannot hold a jumbo frame.
    let mut mem = Arena::with_big(64, 0);
    let e = g
        .run_trial_with_clock(
            &mut mem,
            &mut p0,
            &mut p1,
            &trial(10, false),
            &mut VirtualClock::new(0, 1),
        )
        .unwrap_err();
    assert!(e.to_string().contains("9000-byte frames"), "{e}");
    let mut g = Generator::new(&lab_traffic(p.without_frames_over(1518).unwrap(), false)).unwrap();
    let r = run(&mut g, &mut mem, &mut p0, &mut p1, &trial(10, false));
    assert_eq!(r.rx, 10);
}

/// With big frames in the packet memory, the whole `eantc1` mix (9000-byte frames
/// included) is sent and received, every buffer returned.
#[test]
fn jumbo_frames_go_into_big_frames() {
    let p = Profile::parse("eantc1").unwrap();
    let mut g = Generator::new(&lab_traffic(p, false)).unwrap();
    let (mut p0, mut p1) = loop_pair(1024);
    let mut mem = Arena::with_big(512, 64);
    let r = run(&mut g, &mut mem, &mut p0, &mut p1, &trial(600, false));
    assert_eq!((r.rx, r.lost, r.tx), (600, 0, 600));
    assert_eq!((mem.free_count(), mem.big_free_count()), (512, 64));
    let g9 = Generator::new(&lab_traffic(Profile::parse("ipv6-9000").unwrap(), false)).unwrap();
    assert_eq!(g9.max_buffer_len(), 8996);
}

#[derive(Default)]
struct Seen {
    kinds: BTreeMap<FrameKind, u64>,
    bad: Vec<String>,
    tuples: HashMap<(IpAddr, IpAddr, u16, u16), u64>,
    /// IPv4 frames sent without UDP checksum (legal; must match the setting).
    v4_no_udp_csum: u64,
    v4: u64,
}

/// Check one frame: size, Ethernet/IP/UDP validity and checksums, signature; record it.
fn inspect(f: &[u8], seen: &mut Seen) {
    let size = f.len() as u16 + 4;
    let eth = EthernetFrame::new_checked(f).unwrap();
    let sig = Signature::parse(f).unwrap();
    let (fam, tuple, ok) = match eth.ethertype() {
        0x0800 => {
            let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
            let u = UdpPacket::new_checked(ip.payload()).unwrap();
            seen.v4 += 1;
            if u.checksum() == 0 {
                seen.v4_no_udp_csum += 1;
            }
            let ok = ip.verify_checksum()
                && usize::from(ip.total_len()) == f.len() - 14
                && (u.checksum() == 0
                    || u.verify_checksum(pseudo_v4(ip.src_addr(), ip.dst_addr(), 17, u.len())));
            let t = (
                IpAddr::from(ip.src_addr().to_be_bytes()),
                IpAddr::from(ip.dst_addr().to_be_bytes()),
                u.src_port(),
                u.dst_port(),
            );
            (Family::Ipv4, t, ok)
        }
        0x86dd => {
            let ip = Ipv6Packet::new_checked(eth.payload()).unwrap();
            let u = UdpPacket::new_checked(ip.payload()).unwrap();
            let ps = pseudo_v6(&ip.src_addr(), &ip.dst_addr(), 17, u32::from(u.len()));
            let ok = u.checksum() != 0
                && u.verify_checksum(ps)
                && usize::from(ip.payload_len()) == f.len() - 54;
            let t = (
                IpAddr::from(ip.src_addr()),
                IpAddr::from(ip.dst_addr()),
                u.src_port(),
                u.dst_port(),
            );
            (Family::Ipv6, t, ok)
        }
        e => panic!("ethertype {e:#x}"),
    };
    if !ok || sig.family != fam {
        seen.bad
            .push(format!("{fam} {size}: {:02x?}", &f[..f.len().min(80)]));
    }
    *seen
        .kinds
        .entry(FrameKind { family: fam, size })
        .or_default() += 1;
    *seen.tuples.entry(tuple).or_default() += 1;
}

fn recording(seen: &Arc<Mutex<Seen>>) -> impl FnMut(&[u8]) -> Verdict + Send {
    let seen = seen.clone();
    move |f: &[u8]| {
        inspect(f, &mut seen.lock().unwrap());
        Verdict::Pass
    }
}

#[test]
fn every_profile_sends_exact_sizes_valid_checksums_and_weights() {
    let profiles = [
        ("ipv4-64", None),
        ("ipv4-1518", None),
        ("ipv6-78", None),
        ("ipv6-1280", None),
        ("imix1", None),
        ("imix2", None),
        ("imix2", Some(20)),
        ("imix3", None),
        ("eantc2", None),
        ("eantc2", Some(0)),
        ("simple", Some(75)),
    ];
    let mut mem = Arena::new(8192);
    for (name, v6) in profiles {
        let mut p = Profile::parse(name).unwrap();
        if let Some(pct) = v6 {
            p = p.with_ipv6_percent(pct).unwrap();
        }
        let mut traffic = lab_traffic(p.clone(), false);
        traffic.flows = 100;
        for udp_v4 in [true, false] {
            traffic.udp_checksum_v4 = udp_v4;
            let mut g = Generator::new(&traffic).unwrap();
            let cycle = p.cycle(traffic.seed);
            let (mut p0, mut p1) = loop_pair(4096);
            let seen = Arc::new(Mutex::new(Seen::default()));
            p0.set_filter(recording(&seen));
            let n = cycle.len() as u64 * 2;
            let r = run(&mut g, &mut mem, &mut p0, &mut p1, &trial(n, false));
            assert_eq!((r.tx, r.rx), (n, n), "{name}");
            let s = seen.lock().unwrap();
            assert!(
                s.bad.is_empty(),
                "{name}: {:?}",
                &s.bad[..s.bad.len().min(3)]
            );
            assert_eq!(s.v4_no_udp_csum, if udp_v4 { 0 } else { s.v4 }, "{name}");
            // Weights exact over whole cycles.
            for e in p.mix() {
                let want = e.share * n as f64;
                assert!(
                    (want - want.round()).abs() < 1e-6,
                    "{name}: share {want} not exact"
                );
                assert_eq!(
                    s.kinds.get(&e.kind).copied().unwrap_or(0),
                    want.round() as u64,
                    "{name} {:?}",
                    e.kind
                );
            }
            assert_eq!(s.kinds.len(), p.mix().len(), "{name}");
            assert!(
                (r.tx_bytes as f64 - p.avg_frame_size() * n as f64).abs() < 1e-6,
                "{name}"
            );
        }
    }
}

#[test]
fn cycles_are_deterministic_and_exact() {
    for (name, len) in [
        ("imix1", 1000),
        ("imix2", 1000),
        ("eantc1", 1080),
        ("eantc2", 1044),
        ("simple", 1008),
        ("ipv4-64", 1000),
    ] {
        let p = Profile::parse(name).unwrap();
        let c = p.cycle(7);
        assert_eq!(c.len(), len, "{name}");
        assert_eq!(c, p.cycle(7));
        if p.mix().len() > 1 {
            assert!(c != p.cycle(8), "{name}: the seed shuffles");
        }
        let mut count: BTreeMap<FrameKind, usize> = BTreeMap::new();
        for k in &c {
            *count.entry(*k).or_default() += 1;
        }
        for e in p.mix() {
            assert!(
                (count[&e.kind] as f64 - e.share * len as f64).abs() < 1e-9,
                "{name}"
            );
        }
    }
}

#[test]
fn flows_give_distinct_tuples_in_frames() {
    let mut mem = Arena::new(8192);
    for flows in [1u32, 2, 1000] {
        let mut traffic = lab_traffic(Profile::parse("imix1").unwrap(), false);
        traffic.flows = flows;
        let mut g = Generator::new(&traffic).unwrap();
        let (mut p0, mut p1) = loop_pair(4096);
        let seen = Arc::new(Mutex::new(Seen::default()));
        p0.set_filter(recording(&seen));
        let n = u64::from(flows) * 3;
        run(&mut g, &mut mem, &mut p0, &mut p1, &trial(n, false));
        let s = seen.lock().unwrap();
        assert_eq!(s.tuples.len(), flows as usize);
        assert!(s.tuples.values().all(|&c| c == 3), "each flow thrice");
        let fs = g.flow_set(0, Family::Ipv4).unwrap();
        let want: HashSet<_> = fs
            .iter()
            .map(|t| (t.src, t.dst, t.sport, t.dport))
            .collect();
        assert_eq!(want, s.tuples.keys().copied().collect::<HashSet<_>>());
    }
    // Dual stack: flows are split between families by the IPv6 share.
    let mut traffic = lab_traffic(
        Profile::parse("imix2")
            .unwrap()
            .with_ipv6_percent(25)
            .unwrap(),
        true,
    );
    traffic.flows = 1000;
    assert_eq!(traffic.flows_per_family(), [750, 250]);
    let g = Generator::new(&traffic).unwrap();
    assert_eq!(g.flow_set(1, Family::Ipv6).unwrap().len(), 250);
}

#[test]
fn two_million_flows_are_distinct() {
    let ep = Endpoints::new(
        AddrRange::new("198.18.0.0".parse().unwrap(), 256),
        vec![
            "16.0.0.0/8".parse::<Prefix>().unwrap(),
            "17.0.0.0/12".parse().unwrap(),
        ],
    );
    let fs = FlowSet::new(Family::Ipv4, &ep, 2_000_000).unwrap();
    let mut keys: Vec<u128> = fs
        .iter()
        .map(|t| {
            let (IpAddr::V4(s), IpAddr::V4(d)) = (t.src, t.dst) else {
                unreachable!()
            };
            u128::from(u32::from(s)) << 64
                | u128::from(u32::from(d)) << 32
                | u128::from(t.sport) << 16
                | u128::from(t.dport)
        })
        .collect();
    assert_eq!(keys.len(), 2_000_000);
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), 2_000_000);
    assert_eq!(fs.nth(1_999_999), fs.iter().last().unwrap());
    // IPv6 with a single /64: 2M hosts.
    let ep6 = Endpoints::new(
        AddrRange::single("2001:2:0:a::2".parse().unwrap()),
        vec!["2001:2:0:b::/64".parse().unwrap()],
    );
    let fs6 = FlowSet::new(Family::Ipv6, &ep6, 2_000_000).unwrap();
    let mut n = 0u32;
    let mut last = 0u128;
    for t in fs6.iter() {
        let IpAddr::V6(d) = t.dst else { unreachable!() };
        assert!(u128::from(d) > last);
        last = u128::from(d);
        n += 1;
    }
    assert_eq!(n, 2_000_000);
}

#[test]
fn setup_errors_are_reported() {
    let mut traffic: TrafficConfig = lab_traffic(Profile::parse("imix2").unwrap(), false);
    traffic.forward.v6 = None;
    assert!(Generator::new(&traffic)
        .unwrap_err()
        .to_string()
        .contains("no ipv6 addresses"));
    let mut g = gen("ipv4-64", false);
    let (mut p0, mut p1) = loop_pair(64);
    let mut mem = Arena::new(64);
    let mut clock = VirtualClock::new(0, 1);
    for t in [
        TrialConfig::new(0.0, Duration::from_secs(1)),
        TrialConfig::new(f64::NAN, Duration::from_secs(1)),
        TrialConfig::new(1.0, Duration::ZERO),
        TrialConfig::new(1.0, Duration::from_millis(10)),
        TrialConfig {
            burst: 0,
            ..TrialConfig::new(1e6, Duration::from_secs(1))
        },
        TrialConfig::new(1e12, Duration::from_secs(1_000_000)),
    ] {
        assert!(
            g.run_trial_with_clock(&mut mem, &mut p0, &mut p1, &t, &mut clock)
                .is_err(),
            "{t:?}"
        );
    }
}

#[test]
fn real_clock_trial_accounts_exactly() {
    // On the monotonic clock timing varies run to run (a preempted tester skips slots),
    // but the accounting identities hold whatever happens.
    let mut g = gen("imix2", true);
    let (mut p0, mut p1) = loop_pair(4096);
    let mut mem = Arena::new(8192);
    let mut t = TrialConfig::new(200_000.0, Duration::from_millis(20));
    t.bidirectional = true;
    t.drain = Duration::from_millis(100);
    let r = g.run_trial(&mut mem, &mut p0, &mut p1, &t).unwrap();
    assert_eq!(r.tx + r.tx_skipped, 2 * 4_000);
    assert_eq!((r.rx, r.lost, r.duplicates, r.reordered), (r.tx, 0, 0, 0));
    assert_eq!(r.latency.samples, r.rx);
    assert!(r.tx > 0 && r.latency.min_us <= r.latency.max_us);
    assert_eq!(mem.free_count(), 8192);
}

#[test]
fn traffic_classes_are_marked_interleaved_and_counted_apart() {
    use tester::TrafficClass;
    let class = |name: &str, dscp: u8, weight: u32| TrafficClass {
        name: name.into(),
        dscp,
        weight,
    };
    let classes = vec![
        class("ef", 46, 10),
        class("af4", 36, 45),
        class("be", 8, 45),
    ];
    // One round: 20 slots (the weights over their gcd, 5), each class spread over it.
    let cycle = tester::class_cycle(&classes).unwrap();
    assert_eq!(cycle.len(), 20);
    let count = |c: u8| cycle.iter().filter(|&&x| x == c).count();
    assert_eq!((count(0), count(1), count(2)), (2, 9, 9));
    assert!(
        cycle.windows(2).all(|w| w[0] != w[1] || w[0] != 0),
        "EF's slots are apart: {cycle:?}"
    );
    let mut cfg = lab_traffic(Profile::parse("imix1").unwrap(), true);
    cfg.classes = classes.clone();
    let mut g = Generator::new(&cfg).unwrap();
    let (mut p0, mut p1) = loop_pair(4096);
    // Every frame's DSCP is its class's (by its sequence number), and the frames of
    // sequence 5 and 6 of direction 0 are lost.
    let seen = Arc::new(Mutex::new(HashMap::<u8, u64>::new()));
    let s2 = seen.clone();
    let cyc = cycle.clone();
    p0.set_filter(move |f: &[u8]| {
        let eth = EthernetFrame::new_checked(f).unwrap();
        let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
        let sig = Signature::parse(f).unwrap();
        let want = [46u8, 36, 8][usize::from(cyc[sig.seq as usize % cyc.len()])];
        assert_eq!(ip.dscp(), want, "frame {}", sig.seq);
        *s2.lock().unwrap().entry(ip.dscp()).or_default() += 1;
        if sig.seq == 5 || sig.seq == 6 {
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    });
    let mut mem = Arena::new(8192);
    let r = run(&mut g, &mut mem, &mut p0, &mut p1, &trial(20_000, true));
    assert_eq!((r.tx, r.lost), (40_000, 2));
    assert_eq!(r.classes.len(), 3);
    let names: Vec<&str> = r.classes.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["ef", "af4", "be"]);
    // 20,000 slots per direction, 1,000 rounds: exactly the weights.
    let tx: Vec<u64> = r.classes.iter().map(|c| c.tx).collect();
    assert_eq!(tx, [4_000, 18_000, 18_000]);
    assert_eq!(
        r.classes.iter().map(|c| c.tx_bytes).sum::<u64>(),
        r.tx_bytes
    );
    // Each class goes through the profile's sizes on its own: every class's mean size is
    // the profile's, whatever the weights.
    let avg = Profile::parse("imix1").unwrap().avg_frame_size();
    for c in &r.classes {
        let mean = c.tx_bytes as f64 / c.tx as f64;
        assert!(
            (mean / avg - 1.0).abs() < 0.01,
            "{}: {mean} vs {avg}",
            c.name
        );
    }
    assert_eq!(
        r.classes.iter().map(|c| c.rx_bytes).sum::<u64>(),
        r.rx_bytes
    );
    // Sequence numbers 5 and 6: slots 5 and 6 of the round.
    for (i, c) in r.classes.iter().enumerate() {
        let lost = [5usize, 6]
            .iter()
            .filter(|&&s| cycle[s] as usize == i)
            .count() as u64;
        assert_eq!((c.lost, c.rx), (lost, c.tx - lost), "{c:?}");
        assert_eq!(c.latency.samples, c.rx);
        assert!(c.latency.max_us >= c.latency.p99_us);
        let ratio = c.loss_ratio();
        assert!(ratio.is_finite() && ratio < 1.0);
    }
    assert_eq!(seen.lock().unwrap().values().sum::<u64>(), 20_000);
    assert!(
        r.rx_window_s > 0.0 && r.rx_window_s < 0.1,
        "{}",
        r.rx_window_s
    );
    // Without classes: no per-class results, DSCP 0, as before.
    p0.clear_filter();
    let mut g = gen("ipv4-64", false);
    let r = run(&mut g, &mut mem, &mut p0, &mut p1, &trial(100, false));
    assert!(r.classes.is_empty());
    // Bad classes are refused with the class named.
    for (bad, what) in [
        (vec![class("x", 64, 1)], "DSCP 64"),
        (vec![class("x", 0, 0)], "weight 0"),
        (vec![class("a", 0, 65_537), class("b", 0, 1)], "round of"),
    ] {
        let e = tester::class_cycle(&bad).unwrap_err().to_string();
        assert!(e.contains(what), "{e}");
    }
}
