//! AF_PACKET port against the real kernel: veth pairs between two fresh network
//! namespaces per test. Needs root (CAP_NET_ADMIN for the lab, CAP_NET_RAW for the port).

mod common;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use common::{frame, ip, is_test_frame, Lab, A_IF, B_IF};
use dataplane::worker::Port;
use dataplane::{Arena, PacketMemory, Pkt, Vector, HEADROOM, VECTOR_SIZE};
use ports::{AfPacket, AfPacketOptions, PortError};

/// Open `p0` in namespace `a` and `p1` in namespace `b` (from the calling lab thread).
fn open_pair(lab: &Lab, a: AfPacketOptions, b: AfPacketOptions) -> (AfPacket, AfPacket) {
    Lab::enter(&lab.a);
    let pa = AfPacket::open(A_IF, 0, a).expect("open p0");
    Lab::enter(&lab.b);
    let pb = AfPacket::open(B_IF, 1, b).expect("open p1");
    (pa, pb)
}

/// One rx_burst; copies out the test frames and frees every buffer. Returns how many
/// packets the burst delivered (test frames or not).
fn drain(port: &mut AfPacket, mem: &mut Arena, got: &mut Vec<Vec<u8>>) -> usize {
    let mut v = Vector::default();
    let n = port.rx_burst(mem, &mut v);
    assert_eq!(n, v.len);
    for p in v.as_slice() {
        assert_eq!(p.off as usize, HEADROOM);
        let d = mem.data(p).to_vec();
        if is_test_frame(&d) {
            got.push(d);
        }
        mem.free(p.buf);
    }
    n
}

/// Receive until `want` test frames arrived or `limit` passed.
fn collect(port: &mut AfPacket, mem: &mut Arena, want: usize, limit: Duration) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + limit;
    let mut got = Vec::new();
    while got.len() < want && Instant::now() < deadline {
        if drain(port, mem, &mut got) == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    got
}

/// Send `frames` from `port` in bursts of 64; every one must be accepted.
fn send_all(port: &mut AfPacket, mem: &mut Arena, frames: &[Vec<u8>]) {
    for chunk in frames.chunks(64) {
        let pkts: Vec<Pkt> = chunk.iter().map(|f| mem.load(f, 0).unwrap()).collect();
        assert_eq!(port.tx_burst(mem, &pkts), pkts.len());
    }
}

#[test]
fn thousand_frames_arrive_exactly_in_order() {
    let lab = Lab::new("order", 1500);
    lab.run(|| {
        let (mut a, mut b) = open_pair(&lab, Default::default(), Default::default());
        assert_eq!(a.ifname(), A_IF);
        assert!(a.ifindex() > 0);
        assert_eq!(a.mtu(), 1500);
        assert_ne!(a.mac(), b.mac());
        let mut mem = Arena::new(4096);
        let initial = mem.free_count();
        let frames: Vec<Vec<u8>> = (0..1000u32)
            .map(|i| frame(b.mac(), a.mac(), i, 60 + (i as usize * 37) % 1455))
            .collect();
        let mut got = Vec::new();
        for chunk in frames.chunks(64) {
            send_all(&mut a, &mut mem, chunk);
            drain(&mut b, &mut mem, &mut got);
        }
        got.extend(collect(
            &mut b,
            &mut mem,
            1000 - got.len(),
            Duration::from_secs(2),
        ));
        assert_eq!(got.len(), 1000, "received {} of 1000", got.len());
        for (i, (g, f)) in got.iter().zip(&frames).enumerate() {
            assert_eq!(g, f, "frame {i} differs");
        }
        assert_eq!(mem.free_count(), initial, "every buffer back in the arena");
        let bytes: u64 = frames.iter().map(|f| f.len() as u64).sum();
        let (sa, sb) = (a.stats(), b.stats());
        assert_eq!((sa.tx_packets, sa.tx_bytes, sa.tx_errors), (1000, bytes, 0));
        assert!(sb.rx_packets >= 1000 && sb.rx_bytes >= bytes);
        assert_eq!(sb.rx_dropped_too_big + sb.rx_dropped_no_buffer, 0);
        assert_eq!(sb.kernel_drops, 0);
    });
}

#[test]
fn partially_consumed_block_resumes_where_it_stopped() {
    let lab = Lab::new("resume", 1500);
    lab.run(|| {
        let (mut a, mut b) = open_pair(&lab, Default::default(), Default::default());
        let mut mem = Arena::new(1024);
        let frames: Vec<Vec<u8>> = (0..300u32)
            .map(|i| frame(b.mac(), a.mac(), i, 64))
            .collect();
        send_all(&mut a, &mut mem, &frames);
        // Let the kernel retire the block holding them all.
        std::thread::sleep(Duration::from_millis(20));
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(2);
        while got.len() < frames.len() && Instant::now() < deadline {
            // Only three slots free in the vector.
            let mut v = Vector {
                len: VECTOR_SIZE - 3,
                ..Default::default()
            };
            let n = b.rx_burst(&mut mem, &mut v);
            assert!(n <= 3);
            assert_eq!(v.len, VECTOR_SIZE - 3 + n);
            for p in &v.pkts[VECTOR_SIZE - 3..v.len] {
                let d = mem.data(p).to_vec();
                if is_test_frame(&d) {
                    got.push(d);
                }
                mem.free(p.buf);
            }
        }
        assert_eq!(got, frames);
        assert_eq!(mem.free_count(), 1024);
        // A full vector gets nothing.
        let mut full = Vector {
            len: VECTOR_SIZE,
            ..Default::default()
        };
        assert_eq!(b.rx_burst(&mut mem, &mut full), 0);
    });
}

/// Frames leaving `p0` — from this socket, from another socket on the same interface
/// (through the qdisc, so the kernel's taps see them), or from the kernel stack — are not
/// received by a port on `p0` opened with `opts`.
fn outgoing_frames_not_received(opts: AfPacketOptions) {
    let lab = Lab::new("echo", 1500);
    lab.run(|| {
        let (mut a, mut b) = open_pair(&lab, opts.clone(), Default::default());
        if !opts.kernel_ignore_outgoing {
            assert!(a.filters_outgoing());
        }
        Lab::enter(&lab.a);
        let through_qdisc = AfPacketOptions {
            qdisc_bypass: false,
            ..Default::default()
        };
        let mut other = AfPacket::open(A_IF, 2, through_qdisc).unwrap();
        let mut mem = Arena::new(1024);
        let frames: Vec<Vec<u8>> = (0..200u32)
            .map(|i| frame(b.mac(), a.mac(), i, 100))
            .collect();
        send_all(&mut a, &mut mem, &frames[..100]);
        send_all(&mut other, &mut mem, &frames[100..]);
        assert_eq!(
            collect(&mut b, &mut mem, 200, Duration::from_secs(2)).len(),
            200
        );
        // Give any looped-back copy time to show up on the sender's side.
        std::thread::sleep(Duration::from_millis(20));
        let echoed = collect(&mut a, &mut mem, 1, Duration::from_millis(100));
        assert!(
            echoed.is_empty(),
            "{} outgoing frames came back",
            echoed.len()
        );
        assert_eq!(mem.free_count(), 1024);
    });
}

#[test]
fn outgoing_frames_are_not_received() {
    outgoing_frames_not_received(AfPacketOptions::default());
}

#[test]
fn outgoing_frames_are_filtered_without_kernel_help() {
    // Without PACKET_IGNORE_OUTGOING the port's own PACKET_OUTGOING filter must do it.
    outgoing_frames_not_received(AfPacketOptions {
        kernel_ignore_outgoing: false,
        ..Default::default()
    });
}

#[test]
fn missing_interface_is_not_found_and_named() {
    let lab = Lab::new("missing", 1500);
    lab.run(|| {
        Lab::enter(&lab.a);
        let name = format!("nx{}", std::process::id());
        match AfPacket::open(&name, 0, Default::default()) {
            Err(e @ PortError::NotFound { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(&name), "{msg}");
            }
            other => panic!("expected NotFound, got {other:?}"),
        }
        // p1 lives in the other namespace.
        assert!(matches!(
            AfPacket::open(B_IF, 0, Default::default()),
            Err(PortError::NotFound { ifname }) if ifname == B_IF
        ));
        let long = "an-interface-name-too-long";
        assert!(matches!(
            AfPacket::open(long, 0, Default::default()),
            Err(PortError::NotFound { ifname }) if ifname == long
        ));
    });
}

#[test]
fn bad_ring_geometry_names_the_operation() {
    let lab = Lab::new("geom", 1500);
    lab.run(|| {
        Lab::enter(&lab.a);
        let opts = AfPacketOptions {
            block_size: 1000, // not a multiple of the page size
            ..Default::default()
        };
        let e = AfPacket::open(A_IF, 0, opts).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, PortError::Io { .. }), "{e:?}");
        assert!(
            msg.contains("PACKET_RX_RING") && msg.contains(A_IF),
            "{msg}"
        );
    });
}

/// On a link with an MTU above the largest jumbo frame: a 4000-byte frame arrives whole (in
/// a big buffer), a 9,314-byte one (over `MAX_FRAME`) is dropped and counted, never
/// delivered cut short, and the small datagram after them arrives.
#[test]
fn frame_above_the_largest_jumbo_is_dropped_as_too_big_not_truncated() {
    let lab = Lab::new("jumbo", 9500);
    lab.run(|| {
        let (a, mut b) = open_pair(&lab, Default::default(), Default::default());
        ip(&["-n", &lab.a, "addr", "add", "10.77.0.1/24", "dev", A_IF]);
        ip(&["-n", &lab.b, "addr", "add", "10.77.0.2/24", "dev", B_IF]);
        let m = b.mac();
        let mac = format!(
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        );
        ip(&[
            "-n",
            &lab.a,
            "neigh",
            "replace",
            "10.77.0.2",
            "lladdr",
            &mac,
            "dev",
            A_IF,
            "nud",
            "permanent",
        ]);
        assert_eq!(b.mtu(), 9500);
        drop(a);
        Lab::enter(&lab.a);
        let sock = UdpSocket::bind("10.77.0.1:0").unwrap();
        // 4000-byte frame = 14 Ethernet + 20 IPv4 + 8 UDP + 3958 payload.
        sock.send_to(&[0xabu8; 3958], "10.77.0.2:9").unwrap();
        // 9,314 bytes: over the 9,216 of the largest jumbo frame.
        sock.send_to(&[0xefu8; 9272], "10.77.0.2:9").unwrap();
        sock.send_to(&[0xcdu8; 100], "10.77.0.2:9").unwrap();
        let mut mem = Arena::new(256);
        let deadline = Instant::now() + Duration::from_secs(2);
        let (mut small, mut jumbo) = (0, 0);
        while small == 0 && Instant::now() < deadline {
            let mut v = Vector::default();
            b.rx_burst(&mut mem, &mut v);
            for p in v.as_slice() {
                let d = mem.data(p);
                assert!(d.len() <= dataplane::MAX_FRAME);
                if d.get(12..14) == Some(&[0x08, 0x00]) && d.len() >= 34 {
                    let ip_len = u16::from_be_bytes([d[16], d[17]]) as usize;
                    assert_eq!(d.len(), 14 + ip_len, "IPv4 frame delivered truncated");
                    if d[23] == 17 && ip_len == 128 {
                        small += 1;
                    }
                    if d[23] == 17 && ip_len == 3986 {
                        assert!(p.buf >= dataplane::BIG_BASE, "in a big buffer");
                        assert!(d[42..].iter().all(|&x| x == 0xab));
                        jumbo += 1;
                    }
                }
                mem.free(p.buf);
            }
        }
        assert_eq!(
            (jumbo, small),
            (1, 1),
            "the jumbo and the small datagram arrive"
        );
        let s = b.stats();
        assert_eq!(s.rx_dropped_too_big, 1, "{s:?}");
        assert_eq!((mem.free_count(), mem.big_free_count()), (256, 16));
    });
}

#[test]
fn idle_rx_burst_returns_at_once() {
    let lab = Lab::new("idle", 1500);
    lab.run(|| {
        let (_a, mut b) = open_pair(&lab, Default::default(), Default::default());
        let mut mem = Arena::new(256);
        // Anything the link said when it came up.
        std::thread::sleep(Duration::from_millis(10));
        collect(&mut b, &mut mem, usize::MAX, Duration::from_millis(20));
        let mut slowest = Duration::ZERO;
        let t = Instant::now();
        for _ in 0..1000 {
            let mut v = Vector::default();
            let t1 = Instant::now();
            assert_eq!(b.rx_burst(&mut mem, &mut v), 0);
            slowest = slowest.max(t1.elapsed());
        }
        // Microseconds in practice; generous bounds for a shared machine.
        assert!(slowest < Duration::from_millis(50), "slowest {slowest:?}");
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "{:?}",
            t.elapsed()
        );
    });
}

#[test]
fn vlan_tags_are_delivered_as_on_the_wire() {
    let lab = Lab::new("vlan", 1500);
    lab.run(|| {
        let (mut a, mut b) = open_pair(&lab, Default::default(), Default::default());
        let mut mem = Arena::new(256);
        let tagged = |tpid: u16, tci: u16, seq: u32| {
            let mut f = frame(b.mac(), a.mac(), seq, 96);
            let mut tag = tpid.to_be_bytes().to_vec();
            tag.extend_from_slice(&tci.to_be_bytes());
            f.splice(12..12, tag);
            f
        };
        let frames = vec![
            tagged(0x8100, 0x6005, 0),
            tagged(0x8100, 0x0000, 1), // priority tag, VLAN 0
            tagged(0x88a8, 0x0123, 2), // 802.1ad
            frame(b.mac(), a.mac(), 3, 96),
        ];
        send_all(&mut a, &mut mem, &frames);
        let got = collect(&mut b, &mut mem, frames.len(), Duration::from_secs(2));
        assert_eq!(got, frames);
    });
}

#[test]
fn exhausted_memory_counts_no_buffer_drops() {
    let lab = Lab::new("nobuf", 1500);
    lab.run(|| {
        let (mut a, mut b) = open_pair(&lab, Default::default(), Default::default());
        let mut txmem = Arena::new(64);
        let frames: Vec<Vec<u8>> = (0..20u32).map(|i| frame(b.mac(), a.mac(), i, 64)).collect();
        send_all(&mut a, &mut txmem, &frames);
        std::thread::sleep(Duration::from_millis(20));
        let mut rxmem = Arena::new(8);
        let mut v = Vector::default();
        let deadline = Instant::now() + Duration::from_secs(2);
        while b.stats().rx_packets + b.stats().rx_dropped_no_buffer < 20
            && Instant::now() < deadline
        {
            b.rx_burst(&mut rxmem, &mut v);
        }
        // Nothing freed: the first eight are held in `v`, the rest had no buffer.
        assert_eq!(v.len, 8);
        assert_eq!(b.stats().rx_dropped_no_buffer, 12);
        assert_eq!(rxmem.free_count(), 0);
        for (i, p) in v.as_slice().iter().enumerate() {
            assert_eq!(rxmem.data(p), &frames[i][..]);
        }
    });
}

#[test]
fn ring_overflow_is_counted_as_kernel_drops() {
    let lab = Lab::new("overflow", 1500);
    lab.run(|| {
        let small_ring = AfPacketOptions {
            block_size: 1 << 16,
            block_count: 2,
            ..Default::default()
        };
        let (mut a, mut b) = open_pair(&lab, Default::default(), small_ring);
        let mut mem = Arena::new(256);
        // 1000 x 1000 bytes into a 128 KiB ring nobody reads.
        for i in 0..1000u32 {
            let f = frame(b.mac(), a.mac(), i, 1000);
            let p = mem.load(&f, 0).unwrap();
            a.tx_burst(&mut mem, &[p]);
        }
        std::thread::sleep(Duration::from_millis(20));
        let s = b.stats();
        assert!(s.kernel_drops > 0, "{s:?}");
        // Accumulated, not reset by the read.
        assert!(b.stats().kernel_drops >= s.kernel_drops);
        let got = collect(&mut b, &mut mem, 1000, Duration::from_millis(200));
        assert!(!got.is_empty() && got.len() < 1000);
        assert_eq!(mem.free_count(), 256);
    });
}

#[test]
fn oversized_frame_in_a_burst_is_skipped_and_counted() {
    let lab = Lab::new("txerr", 1500);
    lab.run(|| {
        let (mut a, mut b) = open_pair(&lab, Default::default(), Default::default());
        let mut mem = Arena::new(64);
        // 1600 bytes exceed MTU 1500 + header + one VLAN tag: the kernel rejects it alone.
        let frames = [
            frame(b.mac(), a.mac(), 0, 100),
            frame(b.mac(), a.mac(), 1, 1600),
            frame(b.mac(), a.mac(), 2, 100),
        ];
        let pkts: Vec<Pkt> = frames.iter().map(|f| mem.load(f, 0).unwrap()).collect();
        assert_eq!(a.tx_burst(&mut mem, &pkts), 2);
        assert_eq!(mem.free_count(), 64, "all buffers freed, sent or not");
        let s = a.stats();
        assert_eq!((s.tx_packets, s.tx_errors), (2, 1));
        let got = collect(&mut b, &mut mem, 2, Duration::from_secs(2));
        assert_eq!(got, vec![frames[0].clone(), frames[2].clone()]);
    });
}
