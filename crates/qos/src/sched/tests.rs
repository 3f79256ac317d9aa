use super::*;
use proptest::prelude::*;

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;

fn class(name: &str, priority: Option<u8>, weight: u32) -> ClassSpec {
    ClassSpec {
        name: name.to_string(),
        priority,
        weight,
        min_bps: 0,
        max_bps: 0,
        burst_bytes: 15_000,
        limit: 1_000,
        codel: None,
        wred: None,
    }
}

fn spec(rate_bps: u64, classes: Vec<ClassSpec>) -> SchedSpec {
    SchedSpec {
        rate_bps,
        burst_bytes: 15_000,
        classes,
        by_dscp: [0; 64],
        default_class: 0,
        pipes: Vec::new(),
        subports: Vec::new(),
    }
}

fn sched(s: &SchedSpec) -> Scheduler<u64> {
    s.validate().unwrap();
    Scheduler::new(s, Arc::new(Rates::new(s, 0)))
}

/// Sent bytes per class.
fn sent(s: &Scheduler<u64>) -> Vec<u64> {
    s.stats().iter().map(|q| q.read().sent_bytes).collect()
}

#[test]
fn hostile_specs_are_refused_with_what_is_wrong() {
    let ok = spec(
        10_000_000,
        vec![class("ef", Some(0), 1), class("be", None, 1)],
    );
    assert_eq!(ok.validate(), Ok(()));
    let bad = |f: &dyn Fn(&mut SchedSpec)| {
        let mut s = ok.clone();
        f(&mut s);
        s.validate().unwrap_err().to_string()
    };
    assert_eq!(bad(&|s| s.classes.clear()), "0 classes: a port has 1 to 8");
    assert_eq!(
        bad(&|s| s.classes[1].weight = 0),
        "be: weight must be at least 1"
    );
    assert_eq!(
        bad(&|s| s.classes[1].limit = 0),
        "be: limit = 0 packets: must be 1 to 65536"
    );
    assert_eq!(
        bad(&|s| {
            s.classes[0].min_bps = 6_000_000;
            s.classes[1].min_bps = 6_000_000;
        }),
        "the classes' minimum rates add up to 12000000 bit/s, more than the port's 10000000 bit/s"
    );
    assert_eq!(
        bad(&|s| {
            s.classes[1].min_bps = 2_000;
            s.classes[1].max_bps = 1_000;
        }),
        "be: min_rate is above max_rate"
    );
    assert_eq!(bad(&|s| s.by_dscp[46] = 2), "class index 2 does not exist");
    assert!(bad(&|s| s.burst_bytes = 100).starts_with("port: burst = 100 bytes"));
    assert!(bad(&|s| s.rate_bps = u64::MAX).starts_with("port: rate = "));
}

#[test]
fn a_class_chosen_on_input_wins_over_the_dscp_if_the_port_has_it() {
    let mut sp = spec(0, vec![class("ef", Some(0), 1), class("be", None, 1)]);
    sp.default_class = 1;
    sp.by_dscp = [1; 64];
    sp.by_dscp[46] = 0;
    let s = sched(&sp);
    // Chosen: the class, whatever the DSCP (and the DSCP is not read).
    assert_eq!(s.class_of_chosen(Some(0), || unreachable!()), 0);
    assert_eq!(s.class_of_chosen(Some(1), || unreachable!()), 1);
    // None chosen: by DSCP (not IP: the default class).
    assert_eq!(s.class_of_chosen(None, || Some(46)), 0);
    assert_eq!(s.class_of_chosen(None, || Some(0)), 1);
    assert_eq!(s.class_of_chosen(None, || None), 1);
    // A class this port does not have: by DSCP.
    for c in [2, 7, u8::MAX] {
        assert_eq!(s.class_of_chosen(Some(c), || Some(46)), 0);
        assert_eq!(s.class_of_chosen(Some(c), || Some(10)), 1);
    }
}

#[test]
fn a_full_queue_tail_drops_and_a_flush_empties_every_queue() {
    let mut s = spec(0, vec![class("be", None, 1)]);
    s.classes[0].limit = 3;
    let mut q = sched(&s);
    for i in 0..3 {
        assert_eq!(q.enqueue(i, 100, 0, 0), Ok(()));
    }
    assert_eq!(q.enqueue(9, 100, 0, 0), Err(9));
    assert_eq!(q.enqueue(8, 100, 5, 0), Err(8), "no class 5");
    let c = q.stats()[0].read();
    assert_eq!(
        (c.enqueued, c.depth, c.depth_bytes, c.dropped),
        (3, 3, 300, [1, 0, 0, 0])
    );
    assert_eq!(q.dequeue(2 * US, &mut |_, _| ()), Some((0, 0)));
    let c = q.stats()[0].read();
    assert_eq!(
        (c.sent, c.sojourn_last_ns, c.sojourn_max_ns),
        (1, 2 * US, 2 * US)
    );
    let mut flushed = vec![];
    q.flush(&mut |i, r| flushed.push((i, r)));
    assert_eq!(flushed, [(1, DropReason::Flush), (2, DropReason::Flush)]);
    assert_eq!(q.queued(), 0);
    assert_eq!(q.stats()[0].read().dropped, [1, 0, 2, 0]);
}

/// Offer `bytes_per_ms` per class every ms (packets of `len`) and try to send every
/// 10 µs for `ms` ms; returns the scheduler and the tail drops per class.
fn offer(q: &mut Scheduler<u64>, bytes_per_ms: &[u64], len: u32, ms: u64) {
    let mut id = 0;
    for t in 0..ms * 100 {
        let now = t * 10 * US;
        if t % 100 == 0 {
            for (c, &b) in bytes_per_ms.iter().enumerate() {
                for _ in 0..b / u64::from(len) {
                    id += 1;
                    let _ = q.enqueue(id, len, c as u8, now);
                }
            }
        }
        while q.dequeue(now, &mut |_, _| ()).is_some() {}
    }
}

#[test]
fn the_shaper_delivers_its_rate_under_overload() {
    // 10 Mbit/s is 1,250 bytes per ms; offer twice that for a second.
    let s = spec(10_000_000, vec![class("be", None, 1)]);
    let mut q = sched(&s);
    offer(&mut q, &[2_500], 500, 1_000);
    let out = sent(&q)[0];
    // 1 s at the rate, plus the initial burst, within one packet (the last try is at
    // 999.99 ms).
    let expect = 1_250_000 + 15_000;
    assert!(
        out.abs_diff(expect) <= 500 + 13,
        "sent {out}, expected {expect}"
    );
    assert!(
        q.stats()[0].read().dropped[0] > 0,
        "the rest is tail dropped"
    );
}

#[test]
fn ef_loses_nothing_at_twice_the_rate_while_best_effort_is_dropped() {
    // EF strict at 20 % of the rate, AF41 weight 40, BE weight 60; offered 2x.
    let mut s = spec(
        10_000_000,
        vec![
            class("be", None, 60),
            class("af41", None, 40),
            class("ef", Some(0), 1),
        ],
    );
    s.classes[2].max_bps = 5_000_000;
    let mut q = sched(&s);
    // per ms: EF 250 bytes, AF41 1,000, BE 1,250: 2,500 = 2x 1,250.
    offer(&mut q, &[1_250, 1_000, 250], 250, 2_000);
    let st: Vec<QueueCounts> = q.stats().iter().map(|s| s.read()).collect();
    assert_eq!(st[2].dropped, [0; 4], "EF lost nothing");
    assert_eq!(st[2].sent, st[2].enqueued - st[2].depth);
    assert!(
        st[2].sojourn_max_ns <= MS,
        "EF waits at most until the next ms"
    );
    assert!(st[0].dropped[0] > 0 && st[1].dropped[0] > 0);
    // What is left after EF (1,000 bytes/ms) is shared 60:40, within a few quanta.
    let (be, af) = (st[0].sent_bytes as f64, st[1].sent_bytes as f64);
    let share = af / (af + be);
    assert!((share - 0.4).abs() < 0.01, "AF41 got {share}");
}

#[test]
fn a_minimum_rate_is_served_before_weights() {
    // a: weight 1 with a minimum of 40 %; b: weight 9. Both offered far more than R.
    let mut s = spec(8_000_000, vec![class("a", None, 1), class("b", None, 9)]);
    s.classes[0].min_bps = 3_200_000;
    let mut q = sched(&s);
    offer(&mut q, &[5_000, 5_000], 500, 1_000);
    let out = sent(&q);
    let share = out[0] as f64 / (out[0] + out[1]) as f64;
    assert!((0.39..0.45).contains(&share), "a got {share}");
}

#[test]
fn drr_shares_by_weight_with_mixed_sizes() {
    let s = spec(0, vec![class("a", None, 3), class("b", None, 1)]);
    let mut q = sched(&s);
    let (mut id, mut out) = (0u64, [0u64; 2]);
    for round in 0..20_000u64 {
        // Keep both backlogged with packets of varying sizes.
        for c in 0..2u8 {
            while q.lanes[0].classes[c as usize].fifo.len() < 10 {
                id += 1;
                let len = 64 + (id * 7919 % 1_400) as u32;
                q.enqueue(id, len, c, round).unwrap();
            }
        }
        let (_, c) = q.dequeue(round, &mut |_, _| ()).unwrap();
        out[c as usize] += 1;
    }
    let b = sent(&q);
    let ratio = b[0] as f64 / b[1] as f64;
    assert!((ratio - 3.0).abs() < 0.05, "ratio {ratio}");
}

#[test]
fn codel_drops_from_a_standing_best_effort_queue() {
    let mut s = spec(10_000_000, vec![class("be", None, 1)]);
    s.classes[0].codel = Some(CodelParams::default());
    s.classes[0].limit = 10_000;
    let mut q = sched(&s);
    offer(&mut q, &[2_500], 500, 2_000);
    let c = q.stats()[0].read();
    assert!(c.dropped[1] > 0, "CoDel dropped {:?}", c.dropped);
}

fn wred(min: u32, max: u32, p: f64, weight: u8) -> WredParams {
    let prof = crate::wred::WredProfile {
        min,
        max,
        max_p: (p * crate::wred::P_ONE as f64) as u64,
    };
    WredParams {
        weight,
        profiles: [prof; 3],
        idle_packet_ns: WredParams::packet_time_ns(10_000_000),
    }
}

/// Twice what the shaper sends, into a class whose WRED's maximum is below its limit:
/// WRED drops (early, then at its maximum) and keeps the queue from ever filling.
#[test]
fn wred_drops_before_the_queue_is_full() {
    let mut s = spec(10_000_000, vec![class("be", None, 1)]);
    s.classes[0].wred = Some(wred(16, 64, 0.2, 3));
    s.classes[0].limit = 256;
    let mut q = sched(&s);
    offer(&mut q, &[2_500], 500, 2_000);
    let c = q.stats()[0].read();
    let [tail, codel, flush, red] = c.dropped;
    assert_eq!((tail, codel, flush), (0, 0, 0), "{:?}", c.dropped);
    // About half of what came: it came at twice the rate.
    let share = red as f64 / (red + c.enqueued) as f64;
    assert!(
        (0.4..0.6).contains(&share),
        "WRED dropped {red} of {}",
        red + c.enqueued
    );
    // The shaper is still kept busy: WRED does not starve the link.
    let sent = c.sent_bytes * 8;
    assert!(
        sent > 19_000_000 && sent < 20_200_000,
        "sent {sent} bits in 2 s"
    );
}

/// Drop precedence: at the same depth, red packets (AFx3) are dropped first.
#[test]
fn wred_drops_red_before_green() {
    let mut s = spec(1_000_000, vec![class("af1", None, 1)]);
    let mut w = wred(200, 256, 0.1, 1);
    w.profiles[2] = crate::wred::WredProfile {
        min: 10,
        max: 30,
        max_p: crate::wred::P_ONE,
    };
    s.classes[0].wred = Some(w);
    s.classes[0].limit = 256;
    let mut q = sched(&s);
    assert!(q.has_wred(0) && !q.has_wred(1));
    // 35 queued (nothing leaves: no dequeue), then one of each colour, many times.
    for i in 0..35 {
        assert_eq!(q.enqueue(i, 100, 0, 0), Ok(()));
    }
    let (mut green, mut red) = (0, 0);
    for i in 0..100 {
        if q.enqueue_coloured(i, 100, 0, 2, 0).is_err() {
            red += 1;
        }
        if q.enqueue_coloured(i, 100, 0, 0, 0).is_err() {
            green += 1;
        }
    }
    assert_eq!((green, red), (0, 100));
    assert_eq!(q.stats()[0].read().dropped[DropReason::Wred as usize], 100);
}

#[test]
fn wred_specs_are_checked() {
    let mut s = spec(
        1_000_000,
        vec![class("ef", Some(0), 1), class("be", None, 1)],
    );
    s.classes[1].limit = 100;
    s.classes[1].wred = Some(wred(10, 101, 0.1, 9));
    assert_eq!(
        s.validate().unwrap_err().to_string(),
        "be: wred: green: max 101 is above the queue's limit (100 packets)"
    );
    s.classes[1].wred = Some(wred(10, 100, 0.1, 9));
    assert_eq!(s.validate(), Ok(()));
    s.classes[1].codel = Some(CodelParams::default());
    assert!(s
        .validate()
        .unwrap_err()
        .to_string()
        .contains("CoDel or WRED"));
    s.classes[1].codel = None;
    s.classes[0].wred = Some(wred(10, 100, 0.1, 9));
    assert!(s.validate().unwrap_err().to_string().contains("not strict"));
}

#[derive(Clone, Debug)]
enum Op {
    Enqueue {
        class: u8,
        len: u32,
    },
    Send {
        tries: u8,
    },
    /// A list offered to [`Scheduler::pass_through`] (queued if it refuses).
    List {
        classes: Vec<(u8, u32)>,
    },
}

fn op() -> impl Strategy<Value = (u64, Op)> {
    (
        0u64..200_000,
        prop_oneof![
            (0u8..4, 64u32..9_000).prop_map(|(class, len)| Op::Enqueue { class, len }),
            (1u8..20).prop_map(|tries| Op::Send { tries }),
            proptest::collection::vec((0u8..4, 64u32..9_000), 1..8)
                .prop_map(|classes| Op::List { classes }),
        ],
    )
}

proptest! {
    /// Over random arrivals and sending opportunities: no class exceeds its maximum
    /// rate, nor the port its shaper, and a packet of a lower class never leaves while a
    /// strict class above it has a packet and is under its maximum.
    #[test]
    fn no_class_exceeds_its_maximum_and_strict_priority_is_never_starved(
        port_rate in prop_oneof![Just(0u64), 1_000_000u64..100_000_000],
        maxes in proptest::collection::vec(prop_oneof![Just(0u64), 500_000u64..50_000_000], 4),
        min_b in prop_oneof![Just(0u64), 100_000u64..500_000],
        with_wred in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..400),
    ) {
        let mut classes = vec![
            class("ef", Some(0), 1),
            class("cs6", Some(1), 1),
            class("af", None, 4),
            class("be", None, 1),
        ];
        for (c, m) in classes.iter_mut().zip(&maxes) {
            c.max_bps = *m;
            c.burst_bytes = 10_000;
            c.limit = 50;
        }
        if classes[3].max_bps == 0 || classes[3].max_bps >= min_b {
            classes[3].min_bps = min_b;
        }
        // WRED on a weighted class drops some arrivals; the bounds hold all the same.
        if with_wred {
            classes[2].wred = Some(wred(2, 20, 0.5, 1));
        }
        let mut s = spec(port_rate, classes);
        s.burst_bytes = 10_000;
        let mut q = sched(&s);
        let mut now = 0;
        for (dt, op) in ops {
            now += dt;
            match op {
                Op::Enqueue { class, len } => { let _ = q.enqueue(now, len, class, now); }
                Op::List { classes } => {
                    if !q.pass_through(classes.len(), now, |_, k| classes[k]) {
                        for &(class, len) in &classes {
                            let _ = q.enqueue(now, len, class, now);
                        }
                    }
                }
                Op::Send { tries } => for _ in 0..tries {
                    let Some((_, c)) = q.dequeue(now, &mut |_, _| ()) else { break };
                    let rank = |c: u8| q.book.strict.iter().position(|&s| s == c);
                    let mine = rank(c).unwrap_or(usize::MAX);
                    for (r, &s) in q.book.strict.iter().enumerate() {
                        if r < mine {
                            let s = s as usize;
                            prop_assert!(
                                q.lanes[0].classes[s].fifo.is_empty() || !q.max_ok(s),
                                "class {c} sent while strict class {s} waited"
                            );
                        }
                    }
                },
            }
        }
        let out = sent(&q);
        let allowed = |rate: u64, burst: u64| {
            u128::from(rate) * u128::from(now) / u128::from(SEC) + u128::from(burst + 9_000) * 8
        };
        for (c, m) in maxes.iter().enumerate() {
            if *m > 0 {
                prop_assert!(u128::from(out[c]) * 8 <= allowed(*m, 10_000),
                    "class {c} sent {} bytes in {now} ns at max {m}", out[c]);
            }
        }
        if port_rate > 0 {
            let total: u64 = out.iter().sum();
            prop_assert!(u128::from(total) * 8 <= allowed(port_rate, 10_000));
        }
    }
}

proptest! {
    /// A burst of dequeues (the buckets read once, charged once) sends exactly what as
    /// many dequeues one at a time send, in the same order, with the same counts.
    #[test]
    fn a_burst_sends_what_one_dequeue_at_a_time_sends(
        port_rate in prop_oneof![Just(0u64), 1_000_000u64..100_000_000],
        maxes in proptest::collection::vec(prop_oneof![Just(0u64), 500_000u64..50_000_000], 3),
        min_b in prop_oneof![Just(0u64), 100_000u64..500_000],
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        let mut classes = vec![
            class("ef", Some(0), 1),
            class("af", None, 4),
            class("be", None, 1),
        ];
        for (c, m) in classes.iter_mut().zip(&maxes) {
            c.max_bps = *m;
            c.burst_bytes = 10_000;
            c.limit = 50;
        }
        classes[2].codel = Some(CodelParams::default());
        if classes[1].max_bps == 0 || classes[1].max_bps >= min_b {
            classes[1].min_bps = min_b;
        }
        let mut s = spec(port_rate, classes);
        s.burst_bytes = 10_000;
        let (mut one, mut burst) = (sched(&s), sched(&s));
        let mut now = 0;
        let mut id = 0u64;
        for (dt, op) in ops {
            now += dt;
            match op {
                Op::Enqueue { class, len } => {
                    id += 1;
                    prop_assert_eq!(
                        one.enqueue(id, len, class % 3, now).is_ok(),
                        burst.enqueue(id, len, class % 3, now).is_ok()
                    );
                }
                Op::List { classes } => {
                    for &(class, len) in &classes {
                        id += 1;
                        let _ = one.enqueue(id, len, class % 3, now);
                        let _ = burst.enqueue(id, len, class % 3, now);
                    }
                }
                Op::Send { tries } => {
                    let (mut a, mut b) = (Vec::new(), Vec::new());
                    let (mut da, mut db) = (Vec::new(), Vec::new());
                    for _ in 0..tries {
                        match one.dequeue(now, &mut |t, r| da.push((t, r))) {
                            Some(x) => a.push(x),
                            None => break,
                        }
                    }
                    let n = burst.dequeue_burst(
                        now,
                        usize::from(tries),
                        &mut |t, c| b.push((t, c)),
                        &mut |t, r| db.push((t, r)),
                    );
                    prop_assert_eq!(n, b.len());
                    prop_assert_eq!(&a, &b);
                    prop_assert_eq!(&da, &db);
                }
            }
        }
        prop_assert_eq!(sent(&one), sent(&burst));
        prop_assert_eq!(one.queued(), burst.queued());
    }
}

#[test]
fn a_list_passes_through_only_when_nothing_waits_and_the_tokens_suffice() {
    let mut ef = class("ef", Some(0), 1);
    ef.max_bps = 1_000_000;
    ef.burst_bytes = 10_000;
    let mut be = class("be", None, 1);
    be.limit = 4;
    let mut s = spec(100_000_000, vec![ef, be]);
    s.burst_bytes = 20_000;
    let mut q = sched(&s);
    // Both classes, within the shaper's 20,000 bytes and EF's 10,000.
    let list = [(0u8, 1_000u32), (1, 1_500), (1, 1_500), (0, 1_000)];
    assert!(q.pass_through(list.len(), 0, |_, k| list[k]));
    let st: Vec<QueueCounts> = q.stats().iter().map(|s| s.read()).collect();
    assert_eq!(
        (st[0].enqueued, st[0].sent, st[0].sent_bytes),
        (2, 2, 2_000)
    );
    assert_eq!(
        (st[1].enqueued, st[1].sent, st[1].sent_bytes),
        (2, 2, 3_000)
    );
    assert_eq!((st[0].depth, st[1].depth, q.queued()), (0, 0, 0));
    // The buckets were charged: EF has 8,000 bytes of tokens left, so 9,000 more of EF
    // must wait (the shaper has 15,000 left).
    let ef2 = [(0u8, 5_000u32), (0, 4_000)];
    assert!(!q.pass_through(ef2.len(), 0, |_, k| ef2[k]));
    assert_eq!(
        q.stats()[0].read().enqueued,
        2,
        "a refused list is not counted"
    );
    // More packets of a class than its queue holds: queued as usual (and tail-dropped).
    let five = [(1u8, 100u32); 5];
    assert!(!q.pass_through(five.len(), 0, |_, k| five[k]));
    // A class that does not exist.
    let bad = [(7u8, 100u32)];
    assert!(!q.pass_through(bad.len(), 0, |_, k| bad[k]));
    // Beyond the shaper's tokens.
    let big = [(1u8, 9_000u32), (1, 9_000)];
    assert!(!q.pass_through(big.len(), 0, |_, k| big[k]));
    // Something queued: nothing passes, however many tokens.
    assert!(q.enqueue(1, 100, 1, 0).is_ok());
    let one = [(1u8, 100u32)];
    assert!(!q.pass_through(one.len(), 10 * SEC, |_, k| one[k]));
    assert_eq!(q.dequeue(10 * SEC, &mut |_, _| ()), Some((1, 1)));
    assert!(q.pass_through(one.len(), 10 * SEC, |_, k| one[k]));
    // An empty list goes, trivially, when nothing waits.
    assert!(q.pass_through(0, 10 * SEC, |_, _| (0, 0)));
    assert!(q.enqueue(2, 100, 1, 0).is_ok());
    assert!(!q.pass_through(0, 10 * SEC, |_, _| (0, 0)));
}

#[test]
fn dequeue_on_an_idle_scheduler_is_none() {
    let s = spec(1_000_000, vec![class("be", None, 1)]);
    let mut q = sched(&s);
    assert_eq!(q.dequeue(5 * MS, &mut |_, _| ()), None);
}

/// The weight at 2x: how fast the average follows the queue. Every setting keeps the
/// queue below its limit (no tail drop); the figures (`--nocapture`) are in docs/qos.md.
#[test]
fn wred_weights_at_twice_the_rate() {
    for (min, max, w) in [
        (16, 64, 3),
        (16, 64, 9),
        (32, 96, 4),
        (32, 96, 6),
        (32, 96, 9),
    ] {
        let mut s = spec(10_000_000, vec![class("be", None, 1)]);
        s.classes[0].wred = Some(wred(min, max, 0.1, w));
        s.classes[0].limit = 256;
        let mut q = sched(&s);
        offer(&mut q, &[2_500], 500, 2_000);
        let c = q.stats()[0].read();
        eprintln!(
            "min {min} max {max} weight {w}: dropped (tail, codel, flush, wred) {:?}, sent {} bit in 2 s, mean sojourn {} us",
            c.dropped,
            c.sent_bytes * 8,
            c.sojourn_sum_ns / c.sent.max(1) / 1_000
        );
        assert_eq!(c.dropped[DropReason::Tail as usize], 0, "{:?}", c.dropped);
        assert!(c.dropped[DropReason::Wred as usize] > 0, "{:?}", c.dropped);
    }
}

// Pipes.

fn pipe(name: &str, rate_bps: u64, dst: &str) -> PipeSpec {
    PipeSpec {
        name: name.to_string(),
        rate_bps,
        burst_bytes: 15_000,
        limit: 64,
        dst: vec![dst.to_string()],
        profile: None,
        weights: vec![],
        subport: None,
        max_bps: vec![],
        min_bps: vec![],
    }
}

/// Offer, every ms, `bytes_per_ms` of packets of `len` in (lane, class) for `ms` ms, and
/// send in bursts of 32 every 10 µs; returns the bytes sent per lane (by the `out`
/// callback, lane found from the item's high bits) at each ms.
fn offer_lanes(
    q: &mut Scheduler<u64>,
    flows: &[(u16, u8, u64, u32)],
    ms: u64,
    each_ms: impl FnMut(u64, &[u64]),
) -> Vec<u64> {
    offer_by_class(q, flows, ms, each_ms).0
}

/// [`offer_lanes`], returning the bytes sent per lane and per lane and class (lane `l`'s
/// class `c` at `l * MAX_CLASSES + c`).
fn offer_by_class(
    q: &mut Scheduler<u64>,
    flows: &[(u16, u8, u64, u32)],
    ms: u64,
    mut each_ms: impl FnMut(u64, &[u64]),
) -> (Vec<u64>, Vec<u64>) {
    let lanes = flows.iter().map(|f| f.0 as usize).max().unwrap_or(0) + 1;
    let mut sent = vec![0u64; lanes];
    let mut by_class = vec![0u64; lanes * MAX_CLASSES];
    let mut id = 0u64;
    for t in 0..ms * 100 {
        let now = t * 10 * US;
        if t % 100 == 0 {
            each_ms(t / 100, &sent);
            for &(lane, class, b, len) in flows {
                for _ in 0..b / u64::from(len) {
                    id += 1;
                    // The item: its lane and length, and a serial.
                    let item = (u64::from(lane) << 48) | (u64::from(len) << 32) | id;
                    let _ = q.enqueue_in(item, len, lane, class, 0, now);
                }
            }
        }
        q.dequeue_burst(
            now,
            32,
            &mut |item, c| {
                let (l, len) = ((item >> 48) as usize, (item >> 32) & 0xffff);
                sent[l] += len;
                by_class[l * MAX_CLASSES + usize::from(c)] += len;
            },
            &mut |_, _| (),
        );
    }
    (sent, by_class)
}

#[test]
fn each_pipe_delivers_its_rate_within_1pct_when_offered_twice_it() {
    let mut s = spec(100_000_000, vec![class("be", None, 1)]);
    s.pipes = vec![
        pipe("a", 10_000_000, "10.0.1.0/24"),
        pipe("b", 20_000_000, "10.0.2.0/24"),
    ];
    let mut q = sched(&s);
    // 2x: 10 Mbit/s is 1,250 bytes per ms.
    let sent = offer_lanes(
        &mut q,
        &[(1, 0, 2_500, 500), (2, 0, 5_000, 1_000)],
        2_000,
        |_, _| (),
    );
    for (lane, rate) in [(1, 10_000_000u64), (2, 20_000_000)] {
        // 2 s at the rate, plus the bucket's 15,000 bytes at the start.
        let got = (sent[lane] - 15_000) as f64 * 8.0 / 2.0;
        let err = (got - rate as f64).abs() / rate as f64;
        assert!(err < 0.01, "pipe {lane}: {got} bit/s for {rate}");
        let c = q.pipe_stats()[lane - 1].read();
        assert_eq!(c.sent_bytes, sent[lane]);
        assert!(c.dropped[0] > 0, "the rest is tail dropped");
        assert!(c.depth <= 64, "a pipe's queue holds its limit");
    }
    // The class counts every pipe's packets.
    assert_eq!(q.stats()[0].read().sent_bytes, sent[1] + sent[2]);
}

#[test]
fn pipes_share_the_port_in_bytes_when_the_port_is_the_bottleneck() {
    // Three pipes each allowed the whole port, each offered it, in packets of different
    // sizes: each gets a third of the bytes.
    let mut s = spec(10_000_000, vec![class("be", None, 1)]);
    s.pipes = vec![
        pipe("a", 10_000_000, "10.0.1.0/24"),
        pipe("b", 10_000_000, "10.0.2.0/24"),
        pipe("c", 10_000_000, "10.0.3.0/24"),
    ];
    let mut q = sched(&s);
    let sent = offer_lanes(
        &mut q,
        &[(1, 0, 1_500, 1_500), (2, 0, 1_500, 500), (3, 0, 1_500, 100)],
        2_000,
        |_, _| (),
    );
    let total: u64 = sent.iter().sum();
    for (lane, &b) in sent.iter().enumerate().skip(1) {
        let share = b as f64 / total as f64;
        assert!((share - 1.0 / 3.0).abs() < 0.01, "pipe {lane}: {share}");
    }
    // The port sent its rate.
    let got = (total - 15_000) as f64 * 8.0 / 2.0;
    assert!((got - 10e6).abs() / 10e6 < 0.01, "port: {got}");
}

#[test]
fn a_strict_class_in_a_pipe_is_served_before_the_pipes_weighted_classes() {
    let mut s = spec(
        100_000_000,
        vec![
            class("be", None, 60),
            class("af", None, 40),
            class("ef", Some(0), 1),
        ],
    );
    s.classes[2].max_bps = 50_000_000;
    s.pipes = vec![pipe("a", 10_000_000, "10.0.1.0/24")];
    let mut q = sched(&s);
    // Per ms: EF 250 bytes, AF 1,000, BE 1,250: twice the pipe's 1,250.
    offer_lanes(
        &mut q,
        &[(1, 2, 250, 250), (1, 1, 1_000, 250), (1, 0, 1_250, 250)],
        2_000,
        |_, _| (),
    );
    let st: Vec<QueueCounts> = q.stats().iter().map(|s| s.read()).collect();
    assert_eq!(st[2].dropped, [0; 4], "EF lost nothing");
    assert!(
        st[2].sojourn_max_ns <= MS,
        "EF waited {} ns",
        st[2].sojourn_max_ns
    );
    assert!(st[0].dropped[0] > 0 && st[1].dropped[0] > 0);
    let (be, af) = (st[0].sent_bytes as f64, st[1].sent_bytes as f64);
    let share = af / (af + be);
    assert!((share - 0.4).abs() < 0.02, "AF got {share} of what EF left");
}

#[test]
fn a_pipes_own_weights_share_its_rate_among_its_classes() {
    // Two weighted classes of weight 1 each; pipe a weighs them 3 to 1 (its profile's
    // weights), pipe b keeps the classes' own. Each pipe is offered twice its rate in
    // each class: a's classes share its rate 3:1, b's 1:1.
    let mut s = spec(
        100_000_000,
        vec![class("be", None, 1), class("af", None, 1)],
    );
    s.pipes = vec![
        pipe("a", 10_000_000, "10.0.1.0/24"),
        pipe("b", 10_000_000, "10.0.2.0/24"),
    ];
    s.pipes[0].weights = vec![3, 1];
    let mut q = sched(&s);
    let mut by_lane_class = [[0u64; 2]; 3];
    let mut id = 0u64;
    for t in 0..2_000 * 100u64 {
        let now = t * 10 * US;
        if t % 100 == 0 {
            for lane in 1..=2u16 {
                for class in 0..2u8 {
                    for _ in 0..5 {
                        id += 1;
                        let item = (u64::from(lane) << 48) | (u64::from(class) << 40) | id;
                        let _ = q.enqueue_in(item, 500, lane, class, 0, now);
                    }
                }
            }
        }
        q.dequeue_burst(
            now,
            32,
            &mut |item, c| {
                assert_eq!(u64::from(c), (item >> 40) & 0xff, "its own class");
                by_lane_class[(item >> 48) as usize][c as usize] += 500;
            },
            &mut |_, _| (),
        );
    }
    let share =
        |l: usize| by_lane_class[l][1] as f64 / (by_lane_class[l].iter().sum::<u64>() as f64);
    assert!((share(1) - 0.25).abs() < 0.02, "pipe a's af: {}", share(1));
    assert!((share(2) - 0.5).abs() < 0.02, "pipe b's af: {}", share(2));
    // Each pipe still holds to its rate (plus its bucket).
    for (l, sent) in by_lane_class.iter().enumerate().skip(1) {
        let got = (sent.iter().sum::<u64>() - 15_000) as f64 * 8.0 / 2.0;
        assert!((got - 10e6).abs() / 10e6 < 0.01, "pipe {l}: {got}");
    }
}

#[test]
fn a_pipes_weights_are_one_per_class_and_at_least_1() {
    let mut s = spec(
        100_000_000,
        vec![class("ef", Some(0), 1), class("be", None, 1)],
    );
    s.pipes = vec![pipe("a", 10_000_000, "10.0.1.0/24")];
    s.pipes[0].weights = vec![0, 5];
    assert_eq!(s.validate(), Ok(()), "a strict class's weight is not used");
    s.pipes[0].weights = vec![1, 0];
    assert_eq!(
        s.validate().unwrap_err().to_string(),
        "pipe a: be: weight must be at least 1"
    );
    s.pipes[0].weights = vec![1];
    assert_eq!(
        s.validate().unwrap_err().to_string(),
        "pipe a: 1 weights for 2 classes: one per class, or none"
    );
}

#[test]
fn packets_of_no_pipe_still_flow_beside_the_pipes() {
    let mut s = spec(20_000_000, vec![class("be", None, 1)]);
    s.pipes = vec![pipe("a", 5_000_000, "10.0.1.0/24")];
    let mut q = sched(&s);
    // The pipe offered 10 Mbit/s (gets 5), no pipe 10 Mbit/s: 15 of the port's 20.
    let sent = offer_lanes(
        &mut q,
        &[(0, 0, 1_250, 250), (1, 0, 1_250, 250)],
        2_000,
        |_, _| (),
    );
    assert!(sent[0] >= 2_000 * 1_250 - 1_250, "no pipe: {}", sent[0]);
    let got = (sent[1] - 15_000) as f64 * 8.0 / 2.0;
    assert!((got - 5e6).abs() / 5e6 < 0.01, "pipe: {got}");
}

#[test]
fn a_pass_through_charges_the_pipes_and_holds_back_a_pipe_without_tokens() {
    let mut s = spec(100_000_000, vec![class("be", None, 1)]);
    s.pipes = vec![pipe("a", 1_000_000, "10.0.1.0/24")];
    let mut q = sched(&s);
    // 10 of 1,000 bytes: within the pipe's 15,000.
    assert!(q.pass_through_lanes(10, 0, |_, _| (1, 0, 1_000)));
    let c = q.pipe_stats()[0].read();
    assert_eq!((c.sent, c.sent_bytes, c.enqueued), (10, 10_000, 10));
    // 10 more: the pipe has 5,000 bytes left, so they would queue; the port's no-pipe
    // packets still pass (the port's bucket has 5,000 bytes left too).
    assert!(!q.pass_through_lanes(10, 0, |_, _| (1, 0, 1_000)));
    assert_eq!(q.pipe_stats()[0].read().sent, 10, "nothing counted");
    assert!(q.pass_through_lanes(4, 0, |_, _| (0, 0, 1_000)));
    // A lane that does not exist: queued (by the caller) instead.
    assert!(!q.pass_through_lanes(1, 0, |_, _| (7, 0, 100)));
    // More packets than the pipe's queue holds: queued.
    let mut s2 = s.clone();
    s2.pipes[0].limit = 2;
    s2.pipes[0].rate_bps = 100_000_000;
    let mut q2 = sched(&s2);
    assert!(!q2.pass_through_lanes(3, 0, |_, _| (1, 0, 100)));
    assert!(q2.pass_through_lanes(2, 0, |_, _| (1, 0, 100)));
}

#[test]
fn the_ports_lanes_hold_at_most_the_port_bound_and_a_flush_counts_per_pipe() {
    let mut s = spec(1_000_000, vec![class("be", None, 1)]);
    s.pipes = (0..40)
        .map(|k| pipe(&format!("p{k}"), 1_000_000, &format!("10.0.{k}.0/24")))
        .collect();
    let mut q = sched(&s);
    let mut ok = 0;
    for k in 0..40u16 {
        for i in 0..64 {
            if q.enqueue_in(u64::from(k) * 100 + i, 100, k + 1, 0, 0, 0)
                .is_ok()
            {
                ok += 1;
            }
        }
    }
    assert_eq!(
        ok, MAX_PORT_QUEUED,
        "40 x 64 offered, the port's bound kept"
    );
    assert_eq!(q.queued(), MAX_PORT_QUEUED);
    let tail: u64 = q.pipe_stats().iter().map(|p| p.read().dropped[0]).sum();
    assert_eq!(tail, 40 * 64 - MAX_PORT_QUEUED as u64);
    let mut n = 0;
    q.flush(&mut |_, _| n += 1);
    assert_eq!(n, MAX_PORT_QUEUED);
    let p0 = q.pipe_stats()[0].read();
    assert_eq!((p0.dropped[2], p0.depth), (64, 0));
}

#[test]
fn hostile_pipes_are_refused_with_what_is_wrong() {
    let mut ok = spec(10_000_000, vec![class("be", None, 1)]);
    ok.pipes = vec![pipe("a", 1_000_000, "10.0.1.0/24")];
    assert_eq!(ok.validate(), Ok(()));
    let bad = |f: &dyn Fn(&mut SchedSpec)| {
        let mut s = ok.clone();
        f(&mut s);
        s.validate().unwrap_err().to_string()
    };
    assert_eq!(
        bad(&|s| s.rate_bps = 0),
        "pipe a: pipes need the port's shaper"
    );
    assert_eq!(
        bad(&|s| s.pipes[0].rate_bps = 20_000_000),
        "pipe a: rate = 20000000 bit/s: must be 1 to the port's 10000000 bit/s"
    );
    assert!(bad(&|s| s.pipes[0].burst_bytes = 10).starts_with("pipe a: burst = 10 bytes"));
    assert!(bad(&|s| s.pipes[0].limit = 0).starts_with("pipe a: limit = 0"));
    assert!(bad(&|s| s.pipes[0].dst = vec!["10.0.1.1/24".into()]).contains("host bits"));
    assert!(bad(&|s| s.pipes = (0..=MAX_PIPES)
        .map(|k| pipe("p", 1_000, &format!("10.{}.{}.0/24", k / 256, k % 256)))
        .collect())
    .contains("at most 1024"));
}

#[test]
fn a_pipe_in_debt_does_not_keep_the_others_waiting() {
    // Pipe a's bucket holds one jumbo frame (9,216 bytes); pipe b's many. After a's first
    // frame it has no token left, and b (whose deficit its own jumbo frames spend) sends all of its.
    let mut s = spec(100_000_000, vec![class("be", None, 1)]);
    s.burst_bytes = 100_000;
    s.pipes = vec![
        pipe("a", 1_000_000, "10.0.1.0/24"),
        pipe("b", 100_000_000, "10.0.2.0/24"),
    ];
    s.pipes[0].burst_bytes = 9_216;
    s.pipes[1].burst_bytes = 100_000;
    let mut q = sched(&s);
    for i in 0..2 {
        q.enqueue_in(10 + i, 9_216, 1, 0, 0, 0).unwrap();
    }
    for i in 0..4 {
        q.enqueue_in(20 + i, 9_000, 2, 0, 0, 0).unwrap();
    }
    let mut out = vec![];
    q.dequeue_burst(0, 16, &mut |i, _| out.push(i), &mut |_, _| ());
    out.sort();
    assert_eq!(out, [10, 20, 21, 22, 23]);
    // One at a time too.
    let mut q = sched(&s);
    for i in 0..2 {
        q.enqueue_in(10 + i, 9_216, 1, 0, 0, 0).unwrap();
    }
    for i in 0..4 {
        q.enqueue_in(20 + i, 9_000, 2, 0, 0, 0).unwrap();
    }
    let mut n = 0;
    while q.dequeue(0, &mut |_, _| ()).is_some() {
        n += 1;
    }
    assert_eq!((n, q.queued()), (5, 1));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Over random arrivals in pipes of random rates whose classes have random maximum
    /// rates within them, no class of a pipe sends more than its maximum allows (its
    /// bucket and one packet of debt), nor any pipe more than its rate.
    #[test]
    fn a_class_never_exceeds_its_maximum_within_a_pipe(
        pipes in proptest::collection::vec((1u64..=40, 0u64..=40, 0u64..=40), 1..5),
        arrivals in proptest::collection::vec((0u16..5, 0u8..2, 64u32..1_500, 0u64..4), 200),
    ) {
        let mut s = spec(
            50_000_000,
            vec![class("ef", Some(0), 1), class("be", None, 3)],
        );
        // Each class's maximum in a pipe: none (0), or 1 Mbit/s to the pipe's rate.
        let max = |r: u64, m: u64| if m == 0 { 0 } else { m.min(r) * 1_000_000 };
        s.pipes = pipes
            .iter()
            .enumerate()
            .map(|(k, &(r, ef, be))| PipeSpec {
                max_bps: vec![max(r, ef), max(r, be)],
                ..pipe(&format!("p{k}"), r * 1_000_000, &format!("10.0.{k}.0/24"))
            })
            .collect();
        let n = pipes.len() as u16;
        let mut q = sched(&s);
        let flows: Vec<(u16, u8, u64, u32)> = arrivals
            .iter()
            .map(|&(l, c, len, k)| (l % (n + 1), c, u64::from(len) * (k + 1), len))
            .collect();
        let ms = 300;
        let (sent, by_class) = offer_by_class(&mut q, &flows, ms, |_, _| ());
        for (k, p) in s.pipes.iter().enumerate() {
            let l = k + 1;
            let allowed = |bps: u64| bps * ms / 8_000 + 15_000 + 1_500;
            let got = sent.get(l).copied().unwrap_or(0);
            prop_assert!(got <= allowed(p.rate_bps), "pipe {k}: {got} bytes");
            for (c, &m) in p.max_bps.iter().enumerate().filter(|(_, &m)| m > 0) {
                let got = by_class.get(l * MAX_CLASSES + c).copied().unwrap_or(0);
                prop_assert!(got <= allowed(m), "pipe {k} class {c}: {got} bytes, max {m} bit/s");
            }
        }
    }

    /// Over random arrivals in pipes of random rates, no pipe ever sends more than its
    /// rate allows since the start (its bucket and one packet of debt), and packets of no
    /// pipe are sent too.
    #[test]
    fn a_pipe_never_exceeds_its_rate(
        rates in proptest::collection::vec(1u64..=40, 1..5),
        arrivals in proptest::collection::vec((0u16..5, 0u8..2, 64u32..1_500, 0u64..4), 200),
    ) {
        let mut s = spec(
            50_000_000,
            vec![class("ef", Some(0), 1), class("be", None, 3)],
        );
        s.classes[0].max_bps = 25_000_000;
        s.pipes = rates
            .iter()
            .enumerate()
            .map(|(k, r)| pipe(&format!("p{k}"), r * 1_000_000, &format!("10.0.{k}.0/24")))
            .collect();
        let n = rates.len() as u16;
        let mut q = sched(&s);
        // Each ms, arrivals k..k+8 of the list (cycled): a bursty, random offer.
        let flows: Vec<(u16, u8, u64, u32)> = arrivals
            .iter()
            .map(|&(l, c, len, k)| (l % (n + 1), c, u64::from(len) * (k + 1), len))
            .collect();
        let mut worst = 0f64;
        let sent = offer_lanes(&mut q, &flows, 300, |ms, sent| {
            for (k, r) in rates.iter().enumerate() {
                let allowed = r * 1_000_000 * ms / 8_000 + 15_000 + 1_500;
                let got = sent.get(k + 1).copied().unwrap_or(0);
                worst = worst.max(got as f64 / allowed as f64);
            }
        });
        prop_assert!(worst <= 1.0, "a pipe sent {worst} of what its rate allows");
        if flows.iter().any(|f| f.0 == 0 && f.2 >= u64::from(f.3)) {
            prop_assert!(sent[0] > 0, "no pipe's packets flow");
        }
    }

    /// Over random arrivals in pipes of random rates under subports of random rates (and
    /// some pipes under none), no subport ever sends more than its rate allows since the
    /// start (its bucket and one packet of debt), nor does any pipe.
    #[test]
    fn a_subport_never_exceeds_its_rate(
        subports in proptest::collection::vec(1u64..=20, 1..4),
        pipes in proptest::collection::vec((1u64..=30, 0u16..4), 1..7),
        arrivals in proptest::collection::vec((0u16..7, 0u8..2, 64u32..1_500, 0u64..4), 200),
    ) {
        let mut s = spec(
            50_000_000,
            vec![class("ef", Some(0), 1), class("be", None, 3)],
        );
        s.classes[0].max_bps = 25_000_000;
        s.subports = subports
            .iter()
            .enumerate()
            .map(|(k, r)| subport(&format!("s{k}"), r * 1_000_000))
            .collect();
        let m = subports.len() as u16;
        s.pipes = pipes
            .iter()
            .enumerate()
            .map(|(k, &(r, sub))| {
                // Its subport's number, or none (sub >= m); at most its subport's rate.
                let r = subports.get(usize::from(sub)).map_or(r, |&s| r.min(s));
                PipeSpec {
                    subport: (sub < m).then_some(sub),
                    ..pipe(&format!("p{k}"), r * 1_000_000, &format!("10.0.{k}.0/24"))
                }
            })
            .collect();
        let n = pipes.len() as u16;
        let mut q = sched(&s);
        let flows: Vec<(u16, u8, u64, u32)> = arrivals
            .iter()
            .map(|&(l, c, len, k)| (l % (n + 1), c, u64::from(len) * (k + 1), len))
            .collect();
        let mut worst = 0f64;
        let mut worst_pipe = 0f64;
        offer_lanes(&mut q, &flows, 300, |ms, sent| {
            for (k, r) in subports.iter().enumerate() {
                let allowed = r * 1_000_000 * ms / 8_000 + 15_000 + 1_500;
                let got: u64 = pipes
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.1 == k as u16)
                    .map(|(j, _)| sent.get(j + 1).copied().unwrap_or(0))
                    .sum();
                worst = worst.max(got as f64 / allowed as f64);
            }
            for (j, p) in s.pipes.iter().enumerate() {
                let allowed = p.rate_bps * ms / 8_000 + 15_000 + 1_500;
                let got = sent.get(j + 1).copied().unwrap_or(0);
                worst_pipe = worst_pipe.max(got as f64 / allowed as f64);
            }
        });
        prop_assert!(worst <= 1.0, "a subport sent {worst} of what its rate allows");
        prop_assert!(worst_pipe <= 1.0, "a pipe sent {worst_pipe} of what its rate allows");
    }
}

// Subports.

fn subport(name: &str, rate_bps: u64) -> SubportSpec {
    SubportSpec {
        name: name.to_string(),
        rate_bps,
        burst_bytes: 15_000,
        limit: None,
    }
}

#[test]
fn pipes_under_a_subport_share_its_rate_beside_the_others() {
    // Subport s of 10 Mbit/s over pipes a and b, each allowed all of it; pipe c of no
    // subport. Each offered 20 Mbit/s: a and b share s's rate equally, c gets its own.
    let mut s = spec(100_000_000, vec![class("be", None, 1)]);
    s.subports = vec![subport("s", 10_000_000)];
    s.pipes = vec![
        pipe("a", 10_000_000, "10.0.1.0/24"),
        pipe("b", 10_000_000, "10.0.2.0/24"),
        pipe("c", 10_000_000, "10.0.3.0/24"),
    ];
    s.pipes[0].subport = Some(0);
    s.pipes[1].subport = Some(0);
    let mut q = sched(&s);
    // 20 Mbit/s is 2,500 bytes per ms; different packet sizes: shares are in bytes.
    let sent = offer_lanes(
        &mut q,
        &[(1, 0, 2_500, 500), (2, 0, 2_500, 1_250), (3, 0, 2_500, 250)],
        2_000,
        |_, _| (),
    );
    // 2 s at its rate plus its bucket's 15,000 bytes.
    let sub = (sent[1] + sent[2] - 15_000) as f64 * 8.0 / 2.0;
    assert!((sub - 10e6).abs() / 10e6 < 0.01, "subport: {sub} bit/s");
    let share = sent[1] as f64 / (sent[1] + sent[2]) as f64;
    assert!(
        (share - 0.5).abs() < 0.02,
        "a's share of the subport: {share}"
    );
    let c = (sent[3] - 15_000) as f64 * 8.0 / 2.0;
    assert!((c - 10e6).abs() / 10e6 < 0.01, "pipe c: {c} bit/s");
}

#[test]
fn subports_share_the_port_when_the_port_is_the_bottleneck() {
    // Two subports each allowed the whole port, one with one pipe and one with three, and
    // one pipe of no subport: the three members get a third each, whatever their pipes.
    let mut s = spec(10_000_000, vec![class("be", None, 1)]);
    s.subports = vec![subport("x", 10_000_000), subport("y", 10_000_000)];
    s.pipes = (1..=5)
        .map(|k| pipe(&format!("p{k}"), 10_000_000, &format!("10.0.{k}.0/24")))
        .collect();
    s.pipes[0].subport = Some(0);
    for p in &mut s.pipes[1..4] {
        p.subport = Some(1);
    }
    let mut q = sched(&s);
    let sent = offer_lanes(
        &mut q,
        &(1..=5).map(|l| (l, 0, 1_500, 500)).collect::<Vec<_>>(),
        2_000,
        |_, _| (),
    );
    let total: u64 = sent.iter().sum();
    let x = sent[1] as f64 / total as f64;
    let y = (sent[2] + sent[3] + sent[4]) as f64 / total as f64;
    let none = sent[5] as f64 / total as f64;
    for (what, got) in [("x", x), ("y", y), ("no subport", none)] {
        assert!((got - 1.0 / 3.0).abs() < 0.01, "{what}: {got}");
    }
    // Within y, a third each.
    for l in 2..=4 {
        let share = sent[l] as f64 / (sent[2] + sent[3] + sent[4]) as f64;
        assert!((share - 1.0 / 3.0).abs() < 0.02, "pipe {l} in y: {share}");
    }
}

#[test]
fn a_pass_through_charges_the_subports_and_holds_back_one_without_tokens() {
    let mut s = spec(100_000_000, vec![class("be", None, 1)]);
    s.subports = vec![subport("s", 1_000_000)];
    s.pipes = vec![
        pipe("a", 1_000_000, "10.0.1.0/24"),
        pipe("b", 1_000_000, "10.0.2.0/24"),
    ];
    s.pipes[0].burst_bytes = 100_000;
    s.pipes[1].burst_bytes = 100_000;
    s.burst_bytes = 100_000;
    s.pipes[0].subport = Some(0);
    s.pipes[1].subport = Some(0);
    let mut q = sched(&s);
    // 10 of 1,000 bytes, half in each pipe: within the subport's 15,000.
    assert!(q.pass_through_lanes(10, 0, |_, k| (1 + (k % 2) as u16, 0, 1_000)));
    // 10 more: each pipe's bucket has plenty, the subport only 5,000 bytes: queued.
    assert!(!q.pass_through_lanes(10, 0, |_, k| (1 + (k % 2) as u16, 0, 1_000)));
    let sent: u64 = q.pipe_stats().iter().map(|p| p.read().sent).sum();
    assert_eq!(sent, 10, "nothing counted");
    // 5 fit.
    assert!(q.pass_through_lanes(5, 0, |_, _| (2, 0, 1_000)));
    // Queued: nothing leaves until the subport's bucket refills (its pipe's is full);
    // then one packet (a bucket with any token sends, into debt), then the rest 40 ms
    // later (5,000 bytes at 1 Mbit/s).
    for i in 0..4 {
        q.enqueue_in(i, 1_000, 1, 0, 0, 0).unwrap();
    }
    let mut burst = |now| q.dequeue_burst(now, 32, &mut |_, _| (), &mut |_, _| ());
    assert_eq!(burst(0), 0);
    assert_eq!(burst(2 * MS), 1);
    assert_eq!(burst(2 * MS), 0);
    assert_eq!(burst(40 * MS), 3);
}

#[test]
fn hostile_subports_are_refused_with_what_is_wrong() {
    let mut ok = spec(10_000_000, vec![class("be", None, 1)]);
    ok.subports = vec![subport("s", 1_000_000)];
    ok.pipes = vec![pipe("a", 1_000_000, "10.0.1.0/24")];
    ok.pipes[0].subport = Some(0);
    assert_eq!(ok.validate(), Ok(()));
    let bad = |f: &dyn Fn(&mut SchedSpec)| {
        let mut s = ok.clone();
        f(&mut s);
        s.validate().unwrap_err().to_string()
    };
    assert_eq!(
        bad(&|s| s.subports[0].rate_bps = 20_000_000),
        "subport s: rate = 20000000 bit/s: must be 1 to the port's 10000000 bit/s"
    );
    assert_eq!(
        bad(&|s| s.subports[0].rate_bps = 0),
        "subport s: rate = 0 bit/s: must be 1 to the port's 10000000 bit/s"
    );
    assert!(bad(&|s| s.subports[0].burst_bytes = 10).starts_with("subport s: burst = 10 bytes"));
    assert_eq!(
        bad(&|s| s.pipes[0].subport = Some(1)),
        "pipe a: subport index 1 does not exist"
    );
    assert!(bad(&|s| s.subports = (0..=MAX_SUBPORTS)
        .map(|k| subport(&format!("s{k}"), 1_000))
        .collect())
    .contains("at most 64"));
    assert_eq!(
        bad(&|s| s.rate_bps = 0),
        "subport s: subports need the port's shaper"
    );
    assert_eq!(
        bad(&|s| s.pipes[0].rate_bps = 2_000_000),
        "pipe a: rate = 2000000 bit/s: above its subport s's 1000000 bit/s"
    );
    assert_eq!(
        bad(&|s| s.subports.push(subport("s", 1_000))),
        "subport s: a subport of that name is defined already"
    );
    for l in [0, MAX_PORT_QUEUED + 1] {
        assert_eq!(
            bad(&|s| s.subports[0].limit = Some(l)),
            format!("subport s: limit = {l} packets: must be 1 to {MAX_PORT_QUEUED}")
        );
    }
    assert_eq!(
        bad(&|s| s.pipes = (0..=MAX_PIPES)
            .map(|k| pipe(&format!("p{k}"), 1_000, "10.0.0.0/24"))
            .collect()),
        format!(
            "pipes: {} pipes: a port has at most {MAX_PIPES}",
            MAX_PIPES + 1
        )
    );
}

#[test]
fn a_subport_limit_holds_its_pipes_packets_together() {
    // Subport s (limit 5) over pipes a and b (64 each); pipe c of no subport.
    let mut s = spec(100_000_000, vec![class("be", None, 1)]);
    s.subports = vec![SubportSpec {
        limit: Some(5),
        ..subport("s", 10_000_000)
    }];
    s.pipes = vec![
        pipe("a", 10_000_000, "10.0.1.0/24"),
        pipe("b", 10_000_000, "10.0.2.0/24"),
        pipe("c", 10_000_000, "10.0.3.0/24"),
    ];
    s.pipes[0].subport = Some(0);
    s.pipes[1].subport = Some(0);
    let mut q = sched(&s);
    // A pass-through of more than the limit waits; of the limit, goes.
    assert!(!q.pass_through_lanes(6, 0, |_, k| (1 + (k % 2) as u16, 0, 100)));
    assert!(q.pass_through_lanes(5, 0, |_, k| (1 + (k % 2) as u16, 0, 100)));
    // Queued: three in a and two in b fill it; the sixth is a tail drop, in its pipe's
    // and its class's counters; c is not held by it.
    for i in 0..3 {
        q.enqueue_in(i, 100, 1, 0, 0, 0).unwrap();
    }
    for i in 3..5 {
        q.enqueue_in(i, 100, 2, 0, 0, 0).unwrap();
    }
    assert_eq!(q.enqueue_in(5, 100, 2, 0, 0, 0), Err(5));
    assert_eq!(q.enqueue_in(6, 100, 1, 0, 0, 0), Err(6));
    for i in 7..17 {
        q.enqueue_in(i, 100, 3, 0, 0, 0).unwrap();
    }
    let tail = |s: &QueueStats| s.read().dropped[DropReason::Tail as usize];
    let pipes = q.pipe_stats();
    assert_eq!(
        (tail(&pipes[0]), tail(&pipes[1]), tail(&pipes[2])),
        (1, 1, 0)
    );
    assert_eq!(tail(&q.stats()[0]), 2);
    // Two leave (a and b each have a turn of the subport's round): room for two more.
    let mut n = 0;
    for _ in 0..20 {
        let mut got = None;
        q.dequeue_burst(MS, 1, &mut |t, _| got = Some(t), &mut |_, _| ());
        n += usize::from(got.is_some_and(|t| t < 5));
        if n == 2 {
            break;
        }
    }
    assert_eq!(n, 2, "two of the subport's packets left");
    q.enqueue_in(20, 100, 1, 0, 0, MS).unwrap();
    q.enqueue_in(21, 100, 2, 0, 0, MS).unwrap();
    assert_eq!(q.enqueue_in(22, 100, 2, 0, 0, MS), Err(22));
    // A flush empties it: the limit's room is whole again.
    q.flush(&mut |_, _| ());
    for i in 0..5 {
        q.enqueue_in(30 + i, 100, 1 + (i % 2) as u16, 0, 0, 2 * MS)
            .unwrap();
    }
    assert_eq!(q.enqueue_in(40, 100, 1, 0, 0, 2 * MS), Err(40));
}

#[test]
fn subports_without_pipes_make_no_round() {
    // A policy may name subports before any pipe does: its port schedules as one without.
    let mut with = spec(
        10_000_000,
        vec![class("ef", Some(0), 1), class("be", None, 1)],
    );
    with.subports = vec![subport("s", 1_000_000)];
    let mut q = sched(&with);
    assert_eq!(q.groups.len(), 1);
    // Not held by the subport's 1 Mbit/s: 20 packets of 1,000 bytes pass at 10 Mbit/s.
    for i in 0..20 {
        q.enqueue(i, 1_000, 1, 0).unwrap();
    }
    let mut sent = 0;
    for ms in 0..=20 {
        sent += q.dequeue_burst(ms * MS, 32, &mut |_, _| (), &mut |_, _| ());
    }
    assert_eq!(sent, 20);
}

#[test]
fn names_and_profiles_do_not_change_how_a_port_schedules() {
    let mut a = spec(
        10_000_000,
        vec![class("ef", Some(0), 1), class("be", None, 1)],
    );
    a.subports = vec![subport("s", 1_000_000)];
    a.pipes = vec![pipe("a", 1_000_000, "10.0.1.0/24")];
    a.pipes[0].subport = Some(0);
    let mut b = a.clone();
    b.classes[1].name = "best-effort".into();
    b.subports[0].name = "wholesale".into();
    b.pipes[0].name = "line-1".into();
    b.pipes[0].profile = Some("home".into());
    assert!(a.schedules_as(&b) && b.schedules_as(&a));
    for f in [
        &(|s: &mut SchedSpec| s.pipes[0].rate_bps = 500_000) as &dyn Fn(&mut SchedSpec),
        &|s| s.subports[0].limit = Some(10),
        &|s| s.pipes[0].dst = vec!["10.0.2.0/24".into()],
        &|s| s.classes[1].weight = 2,
    ] {
        let mut c = b.clone();
        f(&mut c);
        assert!(!a.schedules_as(&c), "{c:?}");
    }
}

// Classes' maximum rates within a pipe.

#[test]
fn a_class_keeps_to_its_maximum_within_its_pipe_and_the_rest_goes_to_the_others() {
    // Pipes a and b of 10 Mbit/s under a 100 Mbit/s port; in a, EF (strict) may have 2
    // Mbit/s and AF 3; b has no such limits. Each class offered 10 Mbit/s in each pipe.
    let mut s = spec(
        100_000_000,
        vec![
            class("ef", Some(0), 1),
            class("af", None, 1),
            class("be", None, 1),
        ],
    );
    s.pipes = vec![
        PipeSpec {
            max_bps: vec![2_000_000, 3_000_000, 0],
            ..pipe("a", 10_000_000, "10.0.1.0/24")
        },
        pipe("b", 10_000_000, "10.0.2.0/24"),
    ];
    let mut q = sched(&s);
    let flows: Vec<(u16, u8, u64, u32)> = (1..=2)
        .flat_map(|l| (0..3).map(move |c| (l, c, 1_250, 250)))
        .collect();
    let (sent, by) = offer_by_class(&mut q, &flows, 2_000, |_, _| ());
    let mbps =
        |l: usize, c: usize, burst: u64| (by[l * MAX_CLASSES + c] - burst) as f64 * 8.0 / 2.0 / 1e6;
    // 2 s at the rate, plus the bucket's 15,000 bytes at the start.
    let (ef, af, be) = (mbps(1, 0, 15_000), mbps(1, 1, 15_000), mbps(1, 2, 0));
    assert!((ef - 2.0).abs() < 0.02, "a's EF: {ef} Mbit/s");
    assert!((af - 3.0).abs() < 0.03, "a's AF: {af} Mbit/s");
    // The pipe's rate is whole: best effort has what EF and AF may not take.
    let a = (sent[1] - 15_000) as f64 * 8.0 / 2.0 / 1e6;
    assert!((a - 10.0).abs() < 0.1, "pipe a: {a} Mbit/s");
    assert!(be > 4.8, "a's best effort: {be} Mbit/s");
    // In b, EF takes what it is offered, the whole pipe (strict, no limit of its own
    // there).
    let ef_b = mbps(2, 0, 0);
    assert!(ef_b > 9.8, "b's EF: {ef_b} Mbit/s");
}

#[test]
fn a_pass_through_keeps_to_a_class_maximum_within_a_pipe() {
    let mut s = spec(
        100_000_000,
        vec![class("ef", Some(0), 1), class("be", None, 1)],
    );
    s.pipes = vec![PipeSpec {
        max_bps: vec![1_000_000, 0],
        burst_bytes: 100_000,
        ..pipe("a", 10_000_000, "10.0.1.0/24")
    }];
    s.burst_bytes = 100_000;
    let mut q = sched(&s);
    // EF's bucket in a and the pipe's are 100,000 bytes each: 60 EF packets of 1,000 bytes
    // fit at 0, and leave 40,000 in both.
    assert!(q.pass_through_lanes(60, 0, |_, _| (1, 0, 1_000)));
    // At 100 ms the pipe's is full again (10 Mbit/s), EF's has 52,500 (1 Mbit/s): 60 more
    // EF do not fit, 52 do.
    let t = 100 * MS;
    assert!(!q.pass_through_lanes(60, t, |_, _| (1, 0, 1_000)));
    assert!(q.pass_through_lanes(52, t, |_, _| (1, 0, 1_000)));
    // Best effort in a is not held by EF's bucket: 40 of it go (the pipe's 48,000).
    assert!(q.pass_through_lanes(40, t, |_, _| (1, 1, 1_000)));
    // Queued: EF's 500 bytes let one go (a bucket with any token sends, into debt), then
    // none until EF's bucket is back above 0 (125 bytes a ms), though the pipe has room.
    for i in 0..3 {
        q.enqueue_in(i, 1_000, 1, 0, 0, t).unwrap();
    }
    let mut burst = |now| q.dequeue_burst(now, 32, &mut |_, _| (), &mut |_, _| ());
    assert_eq!(burst(t), 1);
    assert_eq!(burst(t + MS), 0);
    assert_eq!(burst(t + 40 * MS), 2);
}

#[test]
fn a_class_below_its_minimum_within_its_pipe_is_served_before_the_pipes_drr() {
    // Pipes a and b of 10 Mbit/s; AF has weight 1 and best effort 9, each offered 10
    // Mbit/s in each pipe. In b, AF gets its weight's share, a tenth; in a, whose AF may
    // have 4 Mbit/s at least, 4 (and best effort the rest).
    let mut s = spec(
        100_000_000,
        vec![class("af", None, 1), class("be", None, 9)],
    );
    s.pipes = vec![
        PipeSpec {
            min_bps: vec![4_000_000, 0],
            ..pipe("a", 10_000_000, "10.0.1.0/24")
        },
        pipe("b", 10_000_000, "10.0.2.0/24"),
    ];
    let mut q = sched(&s);
    let flows: Vec<(u16, u8, u64, u32)> = (1..=2)
        .flat_map(|l| (0..2).map(move |c| (l, c, 1_250, 250)))
        .collect();
    let (sent, by) = offer_by_class(&mut q, &flows, 2_000, |_, _| ());
    let share = |l: usize, c: usize| by[l * MAX_CLASSES + c] as f64 / sent[l] as f64;
    assert!((share(2, 0) - 0.1).abs() < 0.01, "b's AF: {}", share(2, 0));
    assert!((share(1, 0) - 0.4).abs() < 0.02, "a's AF: {}", share(1, 0));
    let a = (sent[1] - 15_000) as f64 * 8.0 / 2.0 / 1e6;
    assert!((a - 10.0).abs() < 0.1, "pipe a: {a} Mbit/s");
}

#[test]
fn hostile_class_rates_in_a_pipe_are_refused() {
    let mut ok = spec(
        10_000_000,
        vec![class("ef", Some(0), 1), class("be", None, 1)],
    );
    ok.pipes = vec![PipeSpec {
        min_bps: vec![0, 1_000_000],
        max_bps: vec![1_000_000, 2_000_000],
        ..pipe("a", 5_000_000, "10.0.1.0/24")
    }];
    assert_eq!(ok.validate(), Ok(()));
    let bad = |f: &dyn Fn(&mut SchedSpec)| {
        let mut s = ok.clone();
        f(&mut s);
        s.validate().unwrap_err().to_string()
    };
    type Edit<'a> = &'a dyn Fn(&mut SchedSpec);
    let cases: [(Edit, &str); 6] = [
        (
            &|s| s.pipes[0].max_bps = vec![1],
            "pipe a: 1 maximum rates for 2 classes: one per class, or none",
        ),
        (
            &|s| s.pipes[0].max_bps[1] = 20_000_000,
            "pipe a: be: max_rate = 20000000 bit/s: above the pipe's 5000000 bit/s",
        ),
        (
            &|s| s.pipes[0].min_bps = vec![1],
            "pipe a: 1 minimum rates for 2 classes: one per class, or none",
        ),
        (
            &|s| s.pipes[0].min_bps[0] = 1_000,
            "pipe a: ef: a minimum rate is for weighted classes",
        ),
        (
            &|s| s.pipes[0].min_bps[1] = 3_000_000,
            "pipe a: be: min_rate is above max_rate",
        ),
        (
            &|s| {
                s.pipes[0].max_bps.clear();
                s.pipes[0].min_bps[1] = 6_000_000;
            },
            "pipe a: minimum rates add up to 6000000 bit/s, more than the pipe's 5000000 bit/s",
        ),
    ];
    for (f, what) in cases {
        assert_eq!(bad(f), what);
    }
}
