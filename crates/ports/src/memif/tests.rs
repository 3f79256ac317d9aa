//! Data-path unit tests against a hand-built connection: the rings live in a memfd region
//! laid out as a client would, and the test plays the peer by writing descriptors and
//! indices directly.

use std::sync::atomic::{AtomicU32, Ordering};

use dataplane::Arena;

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
        rx_chain: false,
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
    let off = c.rx_bufs + u32::from(slot) * BSIZE;
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

fn rx_all(m: &mut Memif, mem: &mut Arena) -> Vec<Vec<u8>> {
    let mut v = Vector::default();
    let n = Port::<Arena>::rx_burst(m, mem, &mut v);
    assert_eq!(n, v.len);
    let mut out = Vec::new();
    for p in v.as_slice() {
        assert_eq!(p.off as usize, HEADROOM);
        assert_eq!(p.rx_port, 7);
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
    // Inside the region but longer than a dataplane frame.
    conn(&m).rx.set_desc(
        6,
        Desc {
            flags: 0,
            region: 0,
            length: 4000,
            offset: conn(&m).rx_bufs,
        },
    );
    // A chained frame over two descriptors, then a good one.
    peer_put(&m, 7, b"chain-a", proto::DESC_FLAG_NEXT);
    peer_put(&m, 8, b"chain-b", 0);
    peer_put(&m, 9, b"third", 0);
    conn(&m).rx.head().store(10, Ordering::Release);

    let got = rx_all(&mut m, &mut mem);
    assert_eq!(
        got,
        vec![b"first".to_vec(), b"second".to_vec(), b"third".to_vec()]
    );
    let st = m.stats();
    assert_eq!(st.bad_descriptors, 4);
    assert_eq!(st.rx_dropped_too_big, 1);
    assert_eq!(st.rx_dropped_chained, 1);
    assert_eq!(st.rx_packets, 3);
    assert_eq!(st.ring_errors, 0);
    // Every slot was handed back.
    assert_eq!(conn(&m).rx.tail().load(Ordering::Acquire), 10);
    assert!(m.is_connected());
    assert_eq!(mem.free_count(), 64);
}

#[test]
fn chained_frame_split_across_calls_keeps_ring_state() {
    let (mut m, _p) = port(MemifRole::Server);
    let mut mem = Arena::new(16);
    peer_put(&m, 0, b"a1", proto::DESC_FLAG_NEXT);
    conn(&m).rx.head().store(1, Ordering::Release);
    assert!(rx_all(&mut m, &mut mem).is_empty());
    peer_put(&m, 1, b"a2", proto::DESC_FLAG_NEXT);
    peer_put(&m, 2, b"a3", 0);
    peer_put(&m, 3, b"ok", 0);
    conn(&m).rx.head().store(4, Ordering::Release);
    assert_eq!(rx_all(&mut m, &mut mem), vec![b"ok".to_vec()]);
    assert_eq!(m.stats().rx_dropped_chained, 1);
    assert_eq!(conn(&m).rx.tail().load(Ordering::Acquire), 4);
}

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
    // 20 → slot 0; 30 does not fit slot 1 (10 bytes): refused, and with it the rest of
    // the burst (what is sent is always a prefix).
    assert_eq!(Port::<Arena>::tx_burst(&mut m, &mut mem, &pkts), 1);
    assert_eq!(mem.free_count(), 16);
    let st = m.stats();
    assert_eq!(st.tx_packets, 1);
    assert_eq!(st.tx_dropped_too_big, 1);
    assert_eq!(st.tx_dropped_after_refusal, 2);
    let c = conn(&m);
    assert_eq!(c.tx.tail().load(Ordering::Acquire), 1);
    assert_eq!(c.tx.desc(0).length, 20);
    // The next burst uses the 10-byte buffer for an 8-byte frame.
    let small = mem.load(&[3u8; 8], 0).unwrap();
    assert_eq!(Port::<Arena>::tx_burst(&mut m, &mut mem, &[small]), 1);
    let c = conn(&m);
    assert_eq!(c.tx.desc(1).length, 8);
    let mut b = [0u8; 8];
    assert!(c.regions[0]
        .span(c.tx.desc(1).offset, 8)
        .unwrap()
        .read_into(&mut b));
    assert_eq!(b, [3u8; 8]);
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
