//! Data-path unit tests against a hand-built connection: the rings live in a memfd region
//! laid out as a client would, and the test plays the peer by writing descriptors and
//! indices directly.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use dataplane::buffer::{FRAME_SIZE, HEADROOM, MAX_FRAME};
use dataplane::Arena;
use proptest::prelude::*;

use super::control::prepare_client_memory;
use super::shm::Desc;
use super::*;

const LOG2: u8 = 4;
const BSIZE: u32 = 2048;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A unique socket path under /tmp, removed on drop.
struct TmpPath(PathBuf);

impl TmpPath {
    fn new() -> TmpPath {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        TmpPath(std::env::temp_dir().join(format!(
            "ferrouter-memif-unit-{}-{n}.sock",
            std::process::id()
        )))
    }
}

impl Drop for TmpPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A port in `role` with an injected connection over fresh client-style memory.
fn port(role: MemifRole) -> (Memif, TmpPath) {
    let path = TmpPath::new();
    let opts = MemifOptions {
        socket: path.0.clone(),
        role,
        ring_size_log2: LOG2,
        buffer_size: BSIZE,
        ..Default::default()
    };
    let mut m = Memif::open(7, opts).expect("open");
    let plan = prepare_client_memory(LOG2, BSIZE).expect("memory");
    let c2s = plan.region.ring(plan.c2s.offset, LOG2).unwrap();
    let s2c = plan.region.ring(plan.s2c.offset, LOG2).unwrap();
    let client = role == MemifRole::Client;
    let (rx, tx, rx_bufs, tx_bufs) = if client {
        (s2c, c2s, plan.s2c_bufs, plan.c2s_bufs)
    } else {
        (c2s, s2c, plan.c2s_bufs, plan.s2c_bufs)
    };
    let mut c = Conn {
        rx,
        tx,
        rx_next: 0,
        rx_head: 0,
        tx_next: 0,
        bsize: BSIZE,
        rx_bufs,
        tx_bufs,
        regions: vec![plan.region],
        _efds: plan.efds,
    };
    if client {
        c.refill();
    }
    m.conn = Some(c);
    (m, path)
}

fn conn(m: &Memif) -> &Conn {
    m.conn.as_ref().expect("connected")
}

/// Peer side: put `data` into the buffer of rx slot `slot` and describe it.
fn peer_put(m: &Memif, slot: u16, data: &[u8], flags: u16) {
    let c = conn(m);
    let off = c.rx_bufs + u32::from(slot & (c.rx.size() - 1)) * BSIZE;
    assert!(c.regions[0]
        .span(off, data.len() as u32)
        .unwrap()
        .write_from(data));
    c.rx.set_desc(
        slot,
        Desc {
            flags,
            region: 0,
            length: data.len() as u32,
            offset: off,
        },
    );
}

/// Peer side: the frames of tx slots `from..to`, chains gathered (a chain not ended by
/// `to` is returned as it stands).
fn gather_tx(c: &Conn, from: u16, to: u16) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    let mut s = from;
    while s != to {
        let d = c.tx.desc(s);
        let mut piece = vec![0u8; d.length as usize];
        assert!(c.regions[usize::from(d.region)]
            .span(d.offset, d.length)
            .expect("descriptor inside the region")
            .read_into(&mut piece));
        cur.extend_from_slice(&piece);
        if d.flags & proto::DESC_FLAG_NEXT == 0 {
            out.push(std::mem::take(&mut cur));
        }
        s = s.wrapping_add(1);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// A test frame of `len` bytes, its pattern derived from `seed`.
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7) ^ (i >> 8) as u8 ^ seed)
        .collect()
}

/// A server and a client connected over a socket, driven from this thread; the client
/// allocates buffers of `bsize` bytes.
fn pair(bsize: u32, log2: u8) -> (Memif, Memif, TmpPath) {
    let path = TmpPath::new();
    let opts = |role| MemifOptions {
        socket: path.0.clone(),
        role,
        ring_size_log2: log2,
        buffer_size: bsize,
        ..Default::default()
    };
    let mut server = Memif::open(1, opts(MemifRole::Server)).expect("server");
    let mut client = Memif::open(2, opts(MemifRole::Client)).expect("client");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !(server.is_connected() && client.is_connected()) {
        assert!(
            Instant::now() < deadline,
            "no connection: {:?} / {:?}",
            server.last_disconnect_reason(),
            client.last_disconnect_reason()
        );
        server.poll_control();
        client.poll_control();
        std::thread::sleep(Duration::from_micros(200));
    }
    (server, client, path)
}

fn rx_all(m: &mut Memif, mem: &mut Arena) -> Vec<Vec<u8>> {
    let mut v = Vector::default();
    let n = Port::<Arena>::rx_burst(m, mem, &mut v);
    assert_eq!(n, v.len);
    let mut out = Vec::new();
    for p in v.as_slice() {
        assert_eq!(p.off as usize, HEADROOM);
        assert_eq!(p.rx_port, m.port_id());
        out.push(mem.data(p).to_vec());
        mem.free(p.buf);
    }
    out
}

#[test]
fn rx_skips_descriptors_outside_the_regions_without_reading_them() {
    let (mut m, _p) = port(MemifRole::Server);
    let mut mem = Arena::new(64);
    let region_len = conn(&m).regions[0].len() as u32;
    peer_put(&m, 0, b"first", 0);
    let bad = [
        // Straddles the end of the region.
        Desc {
            flags: 0,
            region: 0,
            length: 64,
            offset: region_len - 10,
        },
        // A region that does not exist.
        Desc {
            flags: 0,
            region: 5,
            length: 10,
            offset: 0,
        },
        // Length that would wrap a 32-bit sum.
        Desc {
            flags: 0,
            region: 0,
            length: u32::MAX,
            offset: 16,
        },
        // Offset at the very top.
        Desc {
            flags: 0,
            region: 0,
            length: 1,
            offset: u32::MAX,
        },
    ];
    for (i, d) in bad.iter().enumerate() {
        conn(&m).rx.set_desc(1 + i as u16, *d);
    }
    peer_put(&m, 5, b"second", 0);
    // Inside the region but longer than the largest frame.
    conn(&m).rx.set_desc(
        6,
        Desc {
            flags: 0,
            region: 0,
            length: MAX_FRAME as u32 + 1,
            offset: conn(&m).rx_bufs,
        },
    );
    // A chained frame over two descriptors (gathered), then a good one.
    peer_put(&m, 7, b"chain-a", proto::DESC_FLAG_NEXT);
    peer_put(&m, 8, b"chain-b", 0);
    peer_put(&m, 9, b"third", 0);
    conn(&m).rx.head().store(10, Ordering::Release);

    let got = rx_all(&mut m, &mut mem);
    assert_eq!(
        got,
        vec![
            b"first".to_vec(),
            b"second".to_vec(),
            b"chain-achain-b".to_vec(),
            b"third".to_vec()
        ]
    );
    let st = m.stats();
    assert_eq!(st.bad_descriptors, 4);
    assert_eq!(st.rx_dropped_too_big, 1);
    assert_eq!(st.rx_chained, 1);
    assert_eq!(st.rx_dropped_chained, 0);
    assert_eq!(st.rx_packets, 4);
    assert_eq!(st.ring_errors, 0);
    // Every slot was handed back.
    assert_eq!(conn(&m).rx.tail().load(Ordering::Acquire), 10);
    assert!(m.is_connected());
    assert_eq!(mem.free_count(), 64);
}

#[test]
fn chain_published_in_parts_waits_in_the_ring_for_its_end() {
    let (mut m, _p) = port(MemifRole::Server);
    let mut mem = Arena::new(16);
    peer_put(&m, 0, b"before", 0);
    peer_put(&m, 1, b"a1", proto::DESC_FLAG_NEXT);
    conn(&m).rx.head().store(2, Ordering::Release);
    // The frame before it is taken; the chain's slot is not handed back.
    assert_eq!(rx_all(&mut m, &mut mem), vec![b"before".to_vec()]);
    assert_eq!(conn(&m).rx.tail().load(Ordering::Acquire), 1);
    peer_put(&m, 2, b"a2", proto::DESC_FLAG_NEXT);
    conn(&m).rx.head().store(3, Ordering::Release);
    assert!(rx_all(&mut m, &mut mem).is_empty());
    assert_eq!(conn(&m).rx.tail().load(Ordering::Acquire), 1);
    peer_put(&m, 3, b"a3", 0);
    peer_put(&m, 4, b"ok", 0);
    conn(&m).rx.head().store(5, Ordering::Release);
    assert_eq!(
        rx_all(&mut m, &mut mem),
        vec![b"a1a2a3".to_vec(), b"ok".to_vec()]
    );
    let st = m.stats();
    assert_eq!((st.rx_chained, st.rx_dropped_chained), (1, 0));
    assert_eq!(st.rx_packets, 3);
    assert_eq!(conn(&m).rx.tail().load(Ordering::Acquire), 5);
    assert_eq!(mem.free_count(), 16);
}

#[test]
fn jumbo_frames_round_trip_both_ways_as_chains() {
    // Buffer sizes: the default, one that divides nothing, the smallest, and one that
    // holds any frame in a single descriptor (a big frame without a chain).
    for bsize in [2048u32, 1000, 64, 10240] {
        let (mut server, mut client, _p) = pair(bsize, 8);
        let mut mem = Arena::with_big(64, 16);
        let b = (bsize as usize).min(MAX_FRAME - 1);
        let lens = [
            9000,
            MAX_FRAME,
            4097,
            60,
            b,
            b + 1,
            1500,
            FRAME_SIZE - HEADROOM + 1,
        ];
        let chained = |len: usize| u64::from(len > bsize as usize);
        let mut want_chained = 0;
        // One frame at a time, three rounds: chains wrap the 256-slot rings.
        for round in 0..3u8 {
            for (i, &len) in lens.iter().enumerate() {
                let f = pattern(round * 16 + i as u8, len);
                want_chained += chained(len);
                let p = mem.load(&f, 0).unwrap();
                assert_eq!(Port::<Arena>::tx_burst(&mut client, &mut mem, &[p]), 1);
                assert_eq!(
                    rx_all(&mut server, &mut mem),
                    vec![f.clone()],
                    "c2s {len}/{b}"
                );
                let p = mem.load(&f, 0).unwrap();
                assert_eq!(Port::<Arena>::tx_burst(&mut server, &mut mem, &[p]), 1);
                assert_eq!(rx_all(&mut client, &mut mem), vec![f], "s2c {len}/{b}");
            }
        }
        // A whole burst at once, in order.
        let frames: Vec<Vec<u8>> = lens.iter().map(|&l| pattern(0x5a, l)).collect();
        want_chained += lens.iter().map(|&l| chained(l)).sum::<u64>();
        if bsize >= 1000 {
            for c2s in [true, false] {
                let (from, to) = if c2s {
                    (&mut client, &mut server)
                } else {
                    (&mut server, &mut client)
                };
                let pkts: Vec<Pkt> = frames.iter().map(|f| mem.load(f, 0).unwrap()).collect();
                assert_eq!(Port::<Arena>::tx_burst(from, &mut mem, &pkts), lens.len());
                assert_eq!(rx_all(to, &mut mem), frames);
            }
        } else {
            want_chained -= lens.iter().map(|&l| chained(l)).sum::<u64>();
        }
        for m in [&server, &client] {
            let st = m.stats();
            assert_eq!(st.tx_chained, want_chained, "{bsize}: {st:?}");
            assert_eq!(st.rx_chained, want_chained, "{bsize}: {st:?}");
            assert_eq!(st.tx_packets, st.rx_packets);
            assert_eq!(
                st.rx_dropped_too_big
                    + st.rx_dropped_chained
                    + st.rx_dropped_no_big_frame
                    + st.bad_descriptors
                    + st.ring_errors
                    + st.tx_dropped_ring_full,
                0,
                "{bsize}: {st:?}"
            );
        }
        assert_eq!(mem.free_count(), 64);
        assert_eq!(mem.big_free_count(), 16);
    }
}

#[test]
fn frame_over_max_frame_is_sent_but_dropped_whole_by_the_receiver() {
    let (mut server, mut client, _p) = pair(2048, 6);
    let mut mem = Arena::with_big(32, 8);
    let big = pattern(1, MAX_FRAME + 1);
    let next = pattern(2, 100);
    for c2s in [true, false] {
        let (from, to) = if c2s {
            (&mut client, &mut server)
        } else {
            (&mut server, &mut client)
        };
        let pkts = [mem.load(&big, 0).unwrap(), mem.load(&next, 0).unwrap()];
        assert_eq!(Port::<Arena>::tx_burst(from, &mut mem, &pkts), 2);
        assert_eq!(rx_all(to, &mut mem), vec![next.clone()]);
        let st = to.stats();
        assert_eq!(
            (st.rx_dropped_too_big, st.rx_packets, st.rx_chained),
            (1, 1, 0)
        );
    }
    assert_eq!(mem.free_count(), 32);
    assert_eq!(mem.big_free_count(), 8);
}

#[test]
fn rx_drops_a_chain_over_max_frame_whole_and_takes_the_next_frame() {
    for role in [MemifRole::Server, MemifRole::Client] {
        let (mut m, _p) = port(role);
        let mut mem = Arena::with_big(32, 4);
        let full = vec![0xabu8; BSIZE as usize];
        // 4 × 2048 + 1025 = 9217 bytes: one too many.
        for s in 0..4 {
            peer_put(&m, s, &full, proto::DESC_FLAG_NEXT);
        }
        peer_put(&m, 4, &full[..MAX_FRAME - 4 * 2048 + 1], 0);
        peer_put(&m, 5, b"next", 0);
        // Exactly MAX_FRAME bytes: delivered.
        for s in 6..10 {
            peer_put(&m, s, &full, proto::DESC_FLAG_NEXT);
        }
        peer_put(&m, 10, &full[..MAX_FRAME - 4 * 2048], 0);
        let c = conn(&m);
        let idx = if role == MemifRole::Server {
            c.rx.head()
        } else {
            c.rx.tail()
        };
        idx.store(11, Ordering::Release);
        let got = rx_all(&mut m, &mut mem);
        assert_eq!(
            got,
            vec![b"next".to_vec(), vec![0xab; MAX_FRAME]],
            "{role:?}"
        );
        let st = m.stats();
        assert_eq!(st.rx_dropped_too_big, 1);
        assert_eq!((st.rx_packets, st.rx_chained), (2, 1));
        assert_eq!(st.bad_descriptors + st.rx_dropped_chained, 0);
        assert_eq!(conn(&m).rx_next, 11);
        assert!(m.is_connected());
        assert_eq!((mem.free_count(), mem.big_free_count()), (32, 4));
    }
}

#[test]
fn consumed_chain_slots_are_handed_back_without_next_flags() {
    // A DPDK client writes length and offset of the descriptors it sends but only ever
    // sets NEXT, never clears it: the server clears it on the chain's slots it consumes.
    let (mut m, _p) = port(MemifRole::Server);
    let mut mem = Arena::new(32);
    let size = 1u16 << LOG2;
    peer_put(&m, 0, b"a1", proto::DESC_FLAG_NEXT);
    peer_put(&m, 1, b"a2", proto::DESC_FLAG_NEXT);
    peer_put(&m, 2, b"a3", 0);
    conn(&m).rx.head().store(3, Ordering::Release);
    assert_eq!(rx_all(&mut m, &mut mem), vec![b"a1a2a3".to_vec()]);
    for s in 0..3 {
        assert_eq!(conn(&m).rx.desc(s).flags, 0, "slot {s}");
    }
    // The ring wraps; single frames land in the same slots, DPDK-style (flags as found).
    for s in 3..size + 3 {
        let c = conn(&m);
        let off = c.rx_bufs + u32::from(s & (size - 1)) * BSIZE;
        assert!(c.regions[0]
            .span(off, 2)
            .unwrap()
            .write_from(&[s as u8, 0xee]));
        let d = c.rx.desc(s);
        c.rx.set_desc(
            s,
            Desc {
                length: 2,
                offset: off,
                ..d
            },
        );
        c.rx.head().store(s + 1, Ordering::Release);
        assert_eq!(rx_all(&mut m, &mut mem), vec![vec![s as u8, 0xee]]);
    }
    assert_eq!(m.stats().rx_packets, u64::from(size) + 1);
}

#[test]
fn chain_with_a_bad_descriptor_is_dropped_whole_and_counted() {
    let (mut m, _p) = port(MemifRole::Server);
    let mut mem = Arena::with_big(32, 4);
    let region_len = conn(&m).regions[0].len() as u32;
    let bad = [
        Desc {
            flags: proto::DESC_FLAG_NEXT,
            region: 5,
            length: 10,
            offset: 0,
        },
        Desc {
            flags: proto::DESC_FLAG_NEXT,
            region: 0,
            length: u32::MAX,
            offset: 16,
        },
        Desc {
            flags: proto::DESC_FLAG_NEXT,
            region: 0,
            length: 64,
            offset: region_len - 10,
        },
    ];
    // Three chains, each good – bad – good, then a good frame.
    for (i, d) in bad.iter().enumerate() {
        let s = 3 * i as u16;
        peer_put(&m, s, b"head", proto::DESC_FLAG_NEXT);
        conn(&m).rx.set_desc(s + 1, *d);
        peer_put(&m, s + 2, b"tail", 0);
    }
    peer_put(&m, 9, b"after", 0);
    conn(&m).rx.head().store(10, Ordering::Release);
    assert_eq!(rx_all(&mut m, &mut mem), vec![b"after".to_vec()]);
    let st = m.stats();
    assert_eq!((st.bad_descriptors, st.rx_dropped_chained), (3, 3));
    assert_eq!(st.rx_dropped_too_big, 0);
    assert_eq!(st.rx_packets, 1);
    assert_eq!(conn(&m).rx.tail().load(Ordering::Acquire), 10);
    assert!(m.is_connected());
    assert_eq!((mem.free_count(), mem.big_free_count()), (32, 4));
}

#[test]
fn chain_filling_the_whole_ring_without_an_end_is_dropped() {
    let size = 1u16 << LOG2;
    for role in [MemifRole::Server, MemifRole::Client] {
        let (mut m, _p) = port(role);
        let mut mem = Arena::new(32);
        for s in 0..size {
            peer_put(&m, s, b"more", proto::DESC_FLAG_NEXT);
        }
        let c = conn(&m);
        let idx = if role == MemifRole::Server {
            c.rx.head()
        } else {
            c.rx.tail()
        };
        idx.store(size, Ordering::Release);
        assert!(rx_all(&mut m, &mut mem).is_empty());
        let st = m.stats();
        assert_eq!(
            (st.rx_dropped_chained, st.bad_descriptors),
            (1, 0),
            "{role:?}"
        );
        assert_eq!(conn(&m).rx_next, size);
        assert!(m.is_connected());
        // The ring moves on.
        peer_put(&m, size, b"ok", 0);
        let c = conn(&m);
        let idx = if role == MemifRole::Server {
            c.rx.head()
        } else {
            c.rx.tail()
        };
        idx.store(size + 1, Ordering::Release);
        assert_eq!(rx_all(&mut m, &mut mem), vec![b"ok".to_vec()]);
    }
}

#[test]
fn rx_without_a_free_big_frame_drops_jumbo_frames_but_keeps_small_ones_waiting() {
    let (mut m, _p) = port(MemifRole::Server);
    // No big frames at all: a jumbo frame must not block the ring.
    let mut mem = Arena::with_big(2, 0);
    let full = vec![7u8; BSIZE as usize];
    peer_put(&m, 0, &full, proto::DESC_FLAG_NEXT);
    peer_put(&m, 1, &full, proto::DESC_FLAG_NEXT);
    peer_put(&m, 2, b"x", 0);
    peer_put(&m, 3, b"small", 0);
    // A small chain (fits a small frame) and a small frame, with no small frame free.
    peer_put(&m, 4, b"c1", proto::DESC_FLAG_NEXT);
    peer_put(&m, 5, b"c2", 0);
    peer_put(&m, 6, b"last", 0);
    conn(&m).rx.head().store(7, Ordering::Release);
    let hold = [mem.alloc().unwrap()];
    // One small frame free: "small" takes it; the small chain waits.
    let mut v = Vector::default();
    assert_eq!(Port::<Arena>::rx_burst(&mut m, &mut mem, &mut v), 1);
    assert_eq!(mem.data(&v.pkts[0]), b"small");
    let st = m.stats();
    assert_eq!((st.rx_dropped_no_big_frame, st.rx_no_buffer), (1, 1));
    assert_eq!(conn(&m).rx.tail().load(Ordering::Acquire), 4);
    mem.free(v.pkts[0].buf);
    mem.free(hold[0]);
    assert_eq!(
        rx_all(&mut m, &mut mem),
        vec![b"c1c2".to_vec(), b"last".to_vec()]
    );
    assert_eq!(m.stats().port_stats().rx_dropped_no_buffer, 2);
}

#[test]
fn client_tx_chain_that_does_not_fit_ends_the_burst() {
    let (mut m, _p) = port(MemifRole::Client);
    let mut mem = Arena::with_big(64, 8);
    let size = 1u16 << LOG2;
    // Leave 4 free slots: 12 small frames, not consumed.
    let fill: Vec<Pkt> = (0..size - 4)
        .map(|_| mem.load(&[1u8; 60], 0).unwrap())
        .collect();
    assert_eq!(
        Port::<Arena>::tx_burst(&mut m, &mut mem, &fill),
        usize::from(size - 4)
    );
    // 60 bytes → 1 slot; 9000 bytes → 5 slots, only 3 left: not sent, nor what follows.
    let pkts = [
        mem.load(&[2u8; 60], 0).unwrap(),
        mem.load(&pattern(3, 9000), 0).unwrap(),
        mem.load(&[4u8; 60], 0).unwrap(),
    ];
    assert_eq!(Port::<Arena>::tx_burst(&mut m, &mut mem, &pkts), 1);
    let st = m.stats();
    assert_eq!(st.tx_dropped_ring_full, 2);
    assert_eq!(st.tx_chained, 0);
    assert_eq!(conn(&m).tx.head().load(Ordering::Acquire), size - 3);
    // The server consumes everything: now the chain fits.
    let c = conn(&m);
    c.tx.tail().store(size - 3, Ordering::Release);
    let p = mem.load(&pattern(3, 9000), 0).unwrap();
    assert_eq!(Port::<Arena>::tx_burst(&mut m, &mut mem, &[p]), 1);
    let c = conn(&m);
    assert_eq!(c.tx.head().load(Ordering::Acquire), size + 2);
    assert_eq!(gather_tx(c, size - 3, size + 2), vec![pattern(3, 9000)]);
    for s in size - 3..size + 1 {
        assert_eq!(c.tx.desc(s).flags, proto::DESC_FLAG_NEXT);
        assert_eq!(c.tx.desc(s).length, BSIZE);
    }
    assert_eq!(c.tx.desc(size + 1).flags, 0);
    assert_eq!(c.tx.desc(size + 1).length, 9000 - 4 * BSIZE);
    assert_eq!(m.stats().tx_chained, 1);
    assert_eq!((mem.free_count(), mem.big_free_count()), (64, 8));
}

/// One descriptor a hostile peer may write: flags (NEXT or not), region, length and
/// offset drawn from values that are fine, borderline or absurd.
fn hostile_desc() -> impl Strategy<Value = Desc> {
    // Mostly plausible (so that chains are often whole and good), sometimes absurd.
    let len = prop_oneof![
        6 => 0u32..=BSIZE,
        1 => Just(BSIZE + 1),
        1 => Just(MAX_FRAME as u32),
        1 => Just(MAX_FRAME as u32 + 1),
        1 => Just(u32::MAX),
        1 => any::<u32>(),
    ];
    let off = prop_oneof![
        8 => 0u32..(32 * BSIZE),
        1 => Just(u32::MAX),
        1 => any::<u32>(),
    ];
    (
        proptest::bool::weighted(0.6),
        prop_oneof![12 => Just(0u16), 1 => 1u16..3],
        len,
        off,
    )
        .prop_map(|(next, region, length, offset)| Desc {
            flags: if next { proto::DESC_FLAG_NEXT } else { 0 },
            region,
            length,
            offset,
        })
}

/// What a correct receiver makes of descriptors `descs` published from slot 0: the
/// frames delivered, the counters (bad descriptors, too big, malformed chains, chains
/// gathered) and the slot where it stops.
fn model_rx(c: &Conn, descs: &[Desc]) -> (Vec<Vec<u8>>, [u64; 4], usize) {
    let size = usize::from(c.rx.size());
    let read = |d: &Desc| {
        let span = c
            .regions
            .get(usize::from(d.region))?
            .span(d.offset, d.length)?;
        let mut b = vec![0u8; d.length as usize];
        span.read_into(&mut b).then_some(b)
    };
    let (mut frames, mut n) = (Vec::new(), [0u64; 4]);
    let mut i = 0;
    while i < descs.len() {
        let Some(k) = descs[i..]
            .iter()
            .position(|d| d.flags & proto::DESC_FLAG_NEXT == 0)
        else {
            if descs.len() - i >= size {
                n[0] += descs[i..].iter().filter(|d| read(d).is_none()).count() as u64;
                n[2] += 1;
                i = descs.len();
            }
            break;
        };
        let chain = &descs[i..=i + k];
        i += k + 1;
        let bad = chain.iter().filter(|d| read(d).is_none()).count() as u64;
        let total: u64 = chain.iter().map(|d| u64::from(d.length)).sum();
        if bad > 0 {
            n[0] += bad;
            n[2] += u64::from(chain.len() > 1);
        } else if total > MAX_FRAME as u64 {
            n[1] += 1;
        } else {
            frames.push(chain.iter().flat_map(|d| read(d).unwrap()).collect());
            n[3] += u64::from(chain.len() > 1);
        }
    }
    (frames, n, i)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        // No regression files outside this module's directory.
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// A hostile peer's descriptors — chains or not, pointing anywhere, of any length,
    /// ending or not — never make the receiver panic, leak a frame or read outside the
    /// peer's memory: it delivers exactly what a model receiver delivers, counts the
    /// rest, and stops exactly before an unfinished chain.
    #[test]
    fn hostile_descriptors_and_chains_are_contained(
        server in any::<bool>(),
        mut descs in proptest::collection::vec(hostile_desc(), 1..=16),
        seed in any::<u8>(),
    ) {
        let role = if server { MemifRole::Server } else { MemifRole::Client };
        let (mut m, _p) = port(role);
        let mut mem = Arena::with_big(32, 16);
        let c = conn(&m);
        let region_len = c.regions[0].len() as usize;
        let junk = pattern(seed, region_len - c.rx_bufs as usize);
        assert!(c.regions[0].span(c.rx_bufs, junk.len() as u32).unwrap().write_from(&junk));
        // Buffers never overlap the rings (the receiver writes its descriptors, which
        // the model would not see).
        let rings = 2 * proto::ring_bytes(LOG2) as u32;
        for d in &mut descs {
            if d.offset < rings {
                d.offset += rings;
            }
        }
        for (s, d) in descs.iter().enumerate() {
            c.rx.set_desc(s as u16, *d);
        }
        if server {
            c.rx.head().store(descs.len() as u16, Ordering::Release);
        } else {
            c.rx.tail().store(descs.len() as u16, Ordering::Release);
        }
        // (After publishing: a descriptor may name the ring's own memory.)
        let (want, counts, stop) = model_rx(c, &descs);
        let mut got = rx_all(&mut m, &mut mem);
        // A second call changes nothing (an unfinished chain still waits).
        got.extend(rx_all(&mut m, &mut mem));
        prop_assert_eq!(got, want);
        let st = m.stats();
        prop_assert_eq!(
            [st.bad_descriptors, st.rx_dropped_too_big, st.rx_dropped_chained, st.rx_chained],
            counts
        );
        prop_assert_eq!(usize::from(conn(&m).rx_next), stop);
        prop_assert_eq!(st.ring_errors, 0);
        prop_assert!(m.is_connected());
        prop_assert_eq!((mem.free_count(), mem.big_free_count()), (32, 16));
    }

    /// Frames of any length up to a big frame's room go out as chains over as many
    /// buffers as they need (client: our own, 2048 bytes each; server: what the client
    /// offered, of any length), all but the last flagged NEXT; what is sent is the prefix
    /// of the burst that fits, byte-exact; the rest is counted as ring full.
    #[test]
    fn tx_chains_carry_frames_byte_exact(
        server in any::<bool>(),
        lens in proptest::collection::vec(prop_oneof![0usize..=200, 0usize..=BIG_FRAME_ROOM], 1..8),
        offered in proptest::collection::vec(prop_oneof![Just(BSIZE), 0u32..=BSIZE], 16),
        n_offered in 0u16..=16,
    ) {
        let role = if server { MemifRole::Server } else { MemifRole::Client };
        let (mut m, _p) = port(role);
        let mut mem = Arena::with_big(16, 8);
        let c = conn(&m);
        let size = 1usize << LOG2;
        // Slots each frame needs, and how many slots there are.
        let (slots, room): (Vec<usize>, usize) = if server {
            for (s, &len) in offered.iter().enumerate() {
                let d = c.tx.desc(s as u16);
                c.tx.set_len_flags(s as u16, d, len, 0);
            }
            c.tx.head().store(n_offered, Ordering::Release);
            let mut at = 0usize;
            let need = lens.iter().map(|&len| {
                let start = at;
                let mut left = len;
                loop {
                    let o = offered.get(at).map_or(0, |&o| o as usize);
                    at += 1;
                    if left <= o || at > size {
                        break;
                    }
                    left -= o;
                }
                at - start
            }).collect();
            (need, usize::from(n_offered))
        } else {
            (lens.iter().map(|&l| l.div_ceil(BSIZE as usize).max(1)).collect(), size)
        };
        let mut k = 0;
        let mut used = 0;
        while k < lens.len() && used + slots[k] <= room {
            used += slots[k];
            k += 1;
        }
        let frames: Vec<Vec<u8>> = lens.iter().enumerate().map(|(i, &l)| pattern(i as u8, l)).collect();
        let pkts: Vec<Pkt> = frames.iter().map(|f| mem.load(f, 0).unwrap()).collect();
        prop_assert_eq!(Port::<Arena>::tx_burst(&mut m, &mut mem, &pkts), k);
        let c = conn(&m);
        let idx = if server { c.tx.tail() } else { c.tx.head() };
        prop_assert_eq!(usize::from(idx.load(Ordering::Acquire)), used);
        let mut sent = gather_tx(c, 0, used as u16);
        // A zero-length frame is one empty descriptor, which `gather_tx` reports too.
        sent.resize(k, Vec::new());
        prop_assert_eq!(&sent[..], &frames[..k]);
        let st = m.stats();
        prop_assert_eq!(st.tx_packets, k as u64);
        prop_assert_eq!(st.tx_dropped_ring_full, (lens.len() - k) as u64);
        prop_assert_eq!(st.tx_chained, slots[..k].iter().filter(|&&n| n > 1).count() as u64);
        prop_assert_eq!((mem.free_count(), mem.big_free_count()), (16, 8));
    }
}

/// Bytes a big frame holds after the headroom.
const BIG_FRAME_ROOM: usize = dataplane::buffer::BIG_FRAME_SIZE - HEADROOM;

#[test]
fn rx_leaves_frames_in_the_ring_when_packet_memory_is_empty() {
    let (mut m, _p) = port(MemifRole::Server);
    let mut mem = Arena::new(2);
    for i in 0..4u16 {
        peer_put(&m, i, &[i as u8; 60], 0);
    }
    conn(&m).rx.head().store(4, Ordering::Release);
    let mut v = Vector::default();
    assert_eq!(Port::<Arena>::rx_burst(&mut m, &mut mem, &mut v), 2);
    assert_eq!(m.stats().rx_no_buffer, 1);
    assert_eq!(conn(&m).rx.tail().load(Ordering::Acquire), 2);
    for p in v.as_slice() {
        mem.free(p.buf);
    }
    let got = rx_all(&mut m, &mut mem);
    assert_eq!(got, vec![vec![2u8; 60], vec![3u8; 60]]);
}

#[test]
fn head_past_the_ring_is_a_fault_that_disconnects() {
    let (mut m, _p) = port(MemifRole::Server);
    let mut mem = Arena::new(16);
    conn(&m).rx.head().store(1 << LOG2 | 1, Ordering::Release);
    assert!(rx_all(&mut m, &mut mem).is_empty());
    assert_eq!(m.stats().ring_errors, 1);
    assert!(!m.is_connected());
    // The next call tears the connection down.
    assert!(rx_all(&mut m, &mut mem).is_empty());
    assert!(m.conn.is_none());
    let st = m.stats();
    assert_eq!(st.disconnects, 1);
    assert_eq!(st.control_errors, 1);
    assert!(m.last_disconnect_reason().unwrap().contains("C2S head"));
}

#[test]
fn client_rejects_a_tail_beyond_the_offered_buffers() {
    let (mut m, _p) = port(MemifRole::Client);
    let mut mem = Arena::new(16);
    // Offered: the whole ring (refill at connect). Claim one more.
    assert_eq!(conn(&m).rx.head().load(Ordering::Acquire), 1 << LOG2);
    conn(&m).rx.tail().store((1 << LOG2) + 1, Ordering::Release);
    assert!(rx_all(&mut m, &mut mem).is_empty());
    assert_eq!(m.stats().ring_errors, 1);
    assert!(!m.is_connected());
}

#[test]
fn client_refills_what_it_consumed() {
    let (mut m, _p) = port(MemifRole::Client);
    let mut mem = Arena::new(16);
    let size = 1u16 << LOG2;
    for i in 0..3u16 {
        // The server writes into the offered buffer and sets the length.
        let c = conn(&m);
        let d = c.rx.desc(i);
        assert_eq!(d.length, BSIZE);
        assert!(c.regions[0]
            .span(d.offset, 4)
            .unwrap()
            .write_from(&[9, 9, 9, i as u8]));
        c.rx.set_len_flags(i, d, 4, 0);
    }
    conn(&m).rx.tail().store(3, Ordering::Release);
    let got = rx_all(&mut m, &mut mem);
    assert_eq!(got.len(), 3);
    assert_eq!(got[2], vec![9, 9, 9, 2]);
    let c = conn(&m);
    assert_eq!(c.rx.head().load(Ordering::Acquire), size + 3);
    // The refilled slots are empty buffers again.
    assert_eq!(c.rx.desc(0).length, BSIZE);
}

#[test]
fn server_tx_fills_offered_buffers_and_respects_their_size() {
    let (mut m, _p) = port(MemifRole::Server);
    let mut mem = Arena::new(16);
    // The client offered 2 buffers; the second is only 10 bytes long.
    let c = conn(&m);
    let d1 = c.tx.desc(1);
    c.tx.set_len_flags(1, d1, 10, 0);
    c.tx.head().store(2, Ordering::Release);
    let pkts: Vec<Pkt> = [&[1u8; 20][..], &[2u8; 30][..], &[3u8; 8][..], &[4u8; 8][..]]
        .iter()
        .map(|f| mem.load(f, 0).unwrap())
        .collect();
    // 20 → slot 0; 30 does not fit slot 1 (10 bytes) and would continue in slot 2, which
    // is not offered: not sent, and with it the rest of the burst (what is sent is always
    // a prefix).
    assert_eq!(Port::<Arena>::tx_burst(&mut m, &mut mem, &pkts), 1);
    assert_eq!(mem.free_count(), 16);
    let st = m.stats();
    assert_eq!(st.tx_packets, 1);
    assert_eq!(st.tx_dropped_ring_full, 3);
    assert_eq!(st.tx_dropped_too_big + st.tx_dropped_after_refusal, 0);
    let c = conn(&m);
    assert_eq!(c.tx.tail().load(Ordering::Acquire), 1);
    assert_eq!(c.tx.desc(0).length, 20);
    assert_eq!(
        c.tx.desc(1).length,
        10,
        "the offered buffer is left as offered"
    );
    // Two more buffers offered: the 30-byte frame is chained over the 10-byte buffer and
    // the next one; an 8-byte frame follows in a buffer of its own.
    c.tx.head().store(4, Ordering::Release);
    let pkts = [
        mem.load(&[2u8; 30], 0).unwrap(),
        mem.load(&[3u8; 8], 0).unwrap(),
    ];
    assert_eq!(Port::<Arena>::tx_burst(&mut m, &mut mem, &pkts), 2);
    let c = conn(&m);
    assert_eq!(c.tx.tail().load(Ordering::Acquire), 4);
    let flags_len = |s: u16| (c.tx.desc(s).flags, c.tx.desc(s).length);
    assert_eq!(flags_len(1), (proto::DESC_FLAG_NEXT, 10));
    assert_eq!(flags_len(2), (0, 20));
    assert_eq!(flags_len(3), (0, 8));
    assert_eq!(gather_tx(c, 1, 4), vec![vec![2u8; 30], vec![3u8; 8]]);
    assert_eq!(m.stats().tx_chained, 1);
    assert_eq!(mem.free_count(), 16);
}

#[test]
fn server_tx_to_a_buffer_outside_the_regions_is_a_fault() {
    let (mut m, _p) = port(MemifRole::Server);
    let mut mem = Arena::new(16);
    let c = conn(&m);
    let len = c.regions[0].len() as u32;
    c.tx.set_desc(
        0,
        Desc {
            flags: 0,
            region: 0,
            length: 2048,
            offset: len - 4,
        },
    );
    c.tx.head().store(4, Ordering::Release);
    let pkts: Vec<Pkt> = (0..3).map(|_| mem.load(&[5u8; 60], 0).unwrap()).collect();
    assert_eq!(Port::<Arena>::tx_burst(&mut m, &mut mem, &pkts), 0);
    assert_eq!(mem.free_count(), 16);
    let st = m.stats();
    assert_eq!(st.bad_descriptors, 1);
    assert_eq!(st.tx_dropped_disconnected, 3);
    assert_eq!(conn(&m).tx.tail().load(Ordering::Acquire), 0);
    assert!(!m.is_connected());
}

#[test]
fn client_tx_wraps_and_stops_when_full() {
    let (mut m, _p) = port(MemifRole::Client);
    let mut mem = Arena::new(64);
    let size = 1usize << LOG2;
    let mut next = 0u8;
    for round in 0..5 {
        let pkts: Vec<Pkt> = (0..size + 2)
            .map(|i| mem.load(&[round as u8, i as u8, 0, 0], 0).unwrap())
            .collect();
        assert_eq!(Port::<Arena>::tx_burst(&mut m, &mut mem, &pkts), size);
        assert_eq!(mem.free_count(), 64);
        // Peer (server) consumes everything.
        let c = conn(&m);
        let head = c.tx.head().load(Ordering::Acquire);
        for s in head.wrapping_sub(size as u16)..head {
            let d = c.tx.desc(s);
            let mut b = [0u8; 4];
            assert!(c.regions[0]
                .span(d.offset, d.length)
                .unwrap()
                .read_into(&mut b));
            assert_eq!(b[0], round as u8);
            assert_eq!(b[1], next % size as u8);
            next = next.wrapping_add(1);
        }
        c.tx.tail().store(head, Ordering::Release);
    }
    let st = m.stats();
    assert_eq!(st.tx_packets, 5 * size as u64);
    assert_eq!(st.tx_dropped_ring_full, 10);
}

#[test]
fn tx_without_a_peer_frees_and_counts() {
    let path = TmpPath::new();
    let opts = MemifOptions {
        socket: path.0.clone(),
        role: MemifRole::Client,
        ..Default::default()
    };
    let mut m = Memif::open(0, opts).unwrap();
    assert!(!m.is_connected());
    let mut mem = Arena::new(8);
    let pkts: Vec<Pkt> = (0..5).map(|_| mem.load(&[0u8; 64], 0).unwrap()).collect();
    assert_eq!(Port::<Arena>::tx_burst(&mut m, &mut mem, &pkts), 0);
    assert_eq!(mem.free_count(), 8);
    assert_eq!(m.stats().tx_dropped_disconnected, 5);
    let mut v = Vector::default();
    assert_eq!(Port::<Arena>::rx_burst(&mut m, &mut mem, &mut v), 0);
}

#[test]
fn options_are_validated() {
    let bad = [
        MemifOptions {
            ring_size_log2: 15,
            ..Default::default()
        },
        MemifOptions {
            ring_size_log2: 0,
            ..Default::default()
        },
        MemifOptions {
            buffer_size: 32,
            ..Default::default()
        },
        MemifOptions {
            secret: Some("x".repeat(24)),
            ..Default::default()
        },
        MemifOptions {
            socket: PathBuf::from("/tmp/".to_string() + &"x".repeat(120)),
            ..Default::default()
        },
    ];
    for o in bad {
        assert!(Memif::open(0, o.clone()).is_err(), "{o:?} accepted");
    }
}

#[test]
fn port_is_send() {
    fn assert_send<T: Send>() {}
    assert_send::<Memif>();
}
