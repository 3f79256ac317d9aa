//! AF_XDP port against the real kernel: a veth pair between two fresh network namespaces
//! per test, the AF_XDP port on `p0` (namespace `a`), an AF_PACKET port on the peer `p1`
//! (namespace `b`) as traffic source and sink. Needs root.

mod common;

use std::net::IpAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{frame, ip, is_test_frame, Lab, A_IF, B_IF};
use dataplane::worker::Port;
use dataplane::{Arena, PacketMemory, Pkt, Vector, HEADROOM};
use ports::{AfPacket, AfXdp, AfXdpOptions, AttachMode, PortError};

/// Open the AF_XDP port on `p0` and an AF_PACKET port on `p1`.
fn open_pair(lab: &Lab, opts: AfXdpOptions) -> (AfXdp, AfPacket) {
    Lab::enter(&lab.a);
    let x = AfXdp::open(A_IF, 0, 0, opts).expect("open AF_XDP on p0");
    Lab::enter(&lab.b);
    let p = AfPacket::open(B_IF, 1, Default::default()).expect("open AF_PACKET on p1");
    (x, p)
}

/// One rx_burst: copies out every frame and frees its buffer.
fn drain<P: Port<Arena>>(port: &mut P, mem: &mut Arena, got: &mut Vec<Vec<u8>>) -> usize {
    let mut v = Vector::default();
    let n = port.rx_burst(mem, &mut v);
    assert_eq!(n, v.len);
    for p in v.as_slice() {
        assert_eq!(p.off as usize, HEADROOM);
        got.push(mem.data(p).to_vec());
        mem.free(p.buf);
    }
    n
}

/// Receive until `want` frames passing `keep` arrived or `limit` passed.
fn collect<P: Port<Arena>>(
    port: &mut P,
    mem: &mut Arena,
    want: usize,
    limit: Duration,
    keep: impl Fn(&[u8]) -> bool,
) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + limit;
    let mut got = Vec::new();
    while got.len() < want && Instant::now() < deadline {
        let mut all = Vec::new();
        if drain(port, mem, &mut all) == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
        got.extend(all.into_iter().filter(|f| keep(f)));
    }
    got
}

/// Send `frames` from `port` in bursts of 64; every one must be accepted.
fn send_all<P: Port<Arena>>(port: &mut P, mem: &mut Arena, frames: &[Vec<u8>]) {
    for chunk in frames.chunks(64) {
        let pkts: Vec<Pkt> = chunk.iter().map(|f| mem.load(f, 0).unwrap()).collect();
        assert_eq!(port.tx_burst(mem, &pkts), pkts.len());
    }
}

/// AF_XDP ports on `p0` and `p1` sharing one arena as their UMEM (p0's socket registers
/// it, p1's shares it): (frames in the arena, p0, p1, the arena).
fn open_shared_pair(lab: &Lab) -> (u32, AfXdp, AfXdp, Arena) {
    let frames_total = 1024 + 2 * AfXdp::shared_frames();
    let mut arenas = vec![Arena::new(frames_total)];
    Lab::enter(&lab.a);
    let x0 = AfXdp::open_queues_shared(A_IF, 0, Default::default(), &mut arenas, &[None])
        .expect("AF_XDP on p0 registering the arena")
        .remove(0);
    let owner = x0.umem_owner().expect("p0's socket owns the UMEM");
    Lab::enter(&lab.b);
    let x1 = AfXdp::open_queues_shared(B_IF, 1, Default::default(), &mut arenas, &[Some(owner)])
        .expect("AF_XDP on p1 sharing it")
        .remove(0);
    assert!(x1.umem_owner().is_some());
    (frames_total, x0, x1, arenas.pop().unwrap())
}

/// An Ethernet + IPv4 + UDP frame to `dst` with `payload` bytes carrying `seq`.
fn udp4(dmac: [u8; 6], smac: [u8; 6], dst: [u8; 4], seq: u32, payload: usize) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dmac);
    f.extend_from_slice(&smac);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + 8 + payload) as u16;
    f.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0]);
    f[16..18].copy_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&[10, 88, 0, 2]);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&[0x30, 0x39, 0x00, 0x09]);
    f.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&seq.to_be_bytes());
    while f.len() < 14 + total as usize {
        f.push(f.len() as u8 ^ seq as u8);
    }
    f
}

/// An Ethernet + IPv6 frame to `dst` with next header `nh` and 8 bytes of payload.
fn ip6(dmac: [u8; 6], smac: [u8; 6], dst: &str, nh: u8, seq: u32) -> Vec<u8> {
    let d: std::net::Ipv6Addr = dst.parse().unwrap();
    let mut f = Vec::new();
    f.extend_from_slice(&dmac);
    f.extend_from_slice(&smac);
    f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 8, nh, 64]);
    f.extend_from_slice(
        &"2001:db8::2"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    f.extend_from_slice(&d.octets());
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend_from_slice(&[0; 4]);
    f
}

/// Insert a VLAN tag with `tpid` after the MAC addresses.
fn tag(mut f: Vec<u8>, tpid: u16, vid: u16) -> Vec<u8> {
    let mut t = tpid.to_be_bytes().to_vec();
    t.extend_from_slice(&vid.to_be_bytes());
    f.splice(12..12, t);
    f
}

/// `ip -n ns -d link show dev` output.
fn link_show(ns: &str, dev: &str) -> String {
    let out = Command::new("ip")
        .args(["-n", ns, "-d", "link", "show", "dev", dev])
        .output()
        .expect("run ip");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn has_xdp(ns: &str, dev: &str) -> bool {
    link_show(ns, dev).contains("xdp")
}

fn is_ipv4(f: &[u8]) -> bool {
    f.get(12..14) == Some(&[0x08, 0x00])
}

#[test]
fn thousand_udp_frames_to_a_remote_address_arrive_exactly() {
    let lab = Lab::new("xrx", 1500);
    lab.run(|| {
        let (mut x, mut p) = open_pair(&lab, AfXdpOptions::default());
        assert_eq!(x.ifname(), A_IF);
        assert!(x.ifindex() > 0);
        assert_eq!(x.mtu(), 1500);
        // veth: native XDP, copy mode only.
        assert_eq!(x.mode(), "xdp-drv/copy");
        assert!(has_xdp(&lab.a, A_IF));
        let mut mem = Arena::new(4096);
        let frames: Vec<Vec<u8>> = (0..1000u32)
            .map(|i| {
                udp4(
                    x.mac(),
                    p.mac(),
                    [198, 51, 100, 7],
                    i,
                    18 + (i as usize * 37) % 1400,
                )
            })
            .collect();
        let mut got = Vec::new();
        for chunk in frames.chunks(64) {
            send_all(&mut p, &mut mem, chunk);
            let mut all = Vec::new();
            drain(&mut x, &mut mem, &mut all);
            got.extend(all.into_iter().filter(|f| is_ipv4(f)));
        }
        got.extend(collect(
            &mut x,
            &mut mem,
            frames.len() - got.len(),
            Duration::from_secs(3),
            is_ipv4,
        ));
        assert_eq!(got.len(), frames.len(), "stats {:?}", x.stats());
        assert!(got == frames, "frames differ or out of order");
        let s = x.stats();
        assert!(s.rx_packets >= 1000 && s.kernel_drops == 0, "{s:?}");
        assert_eq!(mem.free_count(), 4096);
    });
}

#[test]
fn generic_xdp_also_delivers() {
    let lab = Lab::new("xgen", 1500);
    lab.run(|| {
        let opts = AfXdpOptions {
            attach: AttachMode::Generic,
            ..Default::default()
        };
        let (mut x, mut p) = open_pair(&lab, opts);
        assert_eq!(x.mode(), "xdp-skb/copy");
        assert!(link_show(&lab.a, A_IF).contains("xdpgeneric"));
        let mut mem = Arena::new(1024);
        let frames: Vec<Vec<u8>> = (0..100u32)
            .map(|i| udp4(x.mac(), p.mac(), [203, 0, 113, 1], i, 64))
            .collect();
        send_all(&mut p, &mut mem, &frames);
        let got = collect(&mut x, &mut mem, 100, Duration::from_secs(3), is_ipv4);
        assert!(got == frames, "got {} of 100", got.len());
    });
}

#[test]
fn kernel_traffic_is_passed_and_the_rest_redirected() {
    let lab = Lab::new("xfilter", 1500);
    lab.run(|| {
        let (mut x, mut p) = open_pair(&lab, AfXdpOptions::default());
        let (xm, pm) = (x.mac(), p.mac());
        let local: IpAddr = "192.0.2.1".parse().unwrap();
        let local6: IpAddr = "2001:db8::1".parse().unwrap();
        x.set_local_addrs(&[local, local6]).unwrap();
        assert_eq!(x.local_addrs(), vec![local, local6]);
        let mut arp = frame([0xff; 6], pm, 0, 60);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let passed = vec![
            arp.clone(),
            tag(arp, 0x8100, 5),
            frame(xm, pm, 1, 60),                                   // not IP
            udp4(xm, pm, [192, 0, 2, 1], 2, 32),                    // local address
            udp4(xm, pm, [224, 0, 0, 5], 3, 32),                    // multicast
            udp4(xm, pm, [255, 255, 255, 255], 4, 32),              // broadcast
            udp4(xm, pm, [169, 254, 1, 1], 5, 32),                  // link-local
            ip6(xm, pm, "2001:db8::1", 17, 6),                      // local address
            ip6(xm, pm, "ff02::1", 17, 7),                          // multicast
            ip6(xm, pm, "fe80::1", 17, 8),                          // link-local
            udp4([0xff; 6], pm, [198, 51, 100, 1], 9, 32),          // link-layer broadcast
            udp4(xm, pm, [198, 51, 100, 1], 10, 32)[..24].to_vec(), // truncated IPv4
            tag(
                tag(udp4(xm, pm, [192, 0, 2, 1], 11, 32), 0x8100, 7),
                0x88a8,
                9,
            ),
        ];
        let redirected = vec![
            udp4(xm, pm, [198, 51, 100, 1], 20, 32),
            tag(udp4(xm, pm, [198, 51, 100, 1], 21, 32), 0x8100, 7),
            tag(
                tag(udp4(xm, pm, [198, 51, 100, 1], 22, 32), 0x8100, 7),
                0x88a8,
                9,
            ),
            udp4(xm, pm, [192, 0, 2, 2], 23, 32),
            ip6(xm, pm, "2001:db8:1::9", 17, 24),
            // Hop-by-Hop in transit is forwarded by the fast path (RFC 9098).
            ip6(xm, pm, "2001:db8:1::9", 0, 25),
        ];
        let mut mem = Arena::new(1024);
        let mut all = passed.clone();
        all.extend(redirected.iter().cloned());
        send_all(&mut p, &mut mem, &all);
        let got = collect(
            &mut x,
            &mut mem,
            usize::MAX,
            Duration::from_millis(500),
            |_| true,
        );
        assert_eq!(got, redirected);

        // Emptying the map sends the address's traffic to the fast path.
        x.set_local_addrs(&[]).unwrap();
        assert!(x.local_addrs().is_empty());
        let f = udp4(xm, pm, [192, 0, 2, 1], 30, 32);
        send_all(&mut p, &mut mem, std::slice::from_ref(&f));
        let got = collect(&mut x, &mut mem, 1, Duration::from_secs(2), |_| true);
        assert_eq!(got, vec![f]);
    });
}

#[test]
fn kernel_answers_arp_and_ping_to_a_local_address() {
    let lab = Lab::new("xping", 1500);
    lab.run(|| {
        ip(&["-n", &lab.a, "addr", "add", "10.88.0.1/24", "dev", A_IF]);
        ip(&["-n", &lab.b, "addr", "add", "10.88.0.2/24", "dev", B_IF]);
        Lab::enter(&lab.a);
        let mut x = AfXdp::open(A_IF, 0, 0, Default::default()).unwrap();
        x.set_local_addrs(&["10.88.0.1".parse().unwrap()]).unwrap();
        let ping = |count: &str| {
            Command::new("ip")
                .args([
                    "netns", "exec", &lab.b, "ping", "-c", count, "-i", "0.2", "-W", "1",
                ])
                .arg("10.88.0.1")
                .output()
                .expect("run ping (iputils-ping)")
        };
        // ARP request and echo request both reach the kernel, which answers.
        let out = ping("3");
        assert!(
            out.status.success(),
            "ping failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let mut mem = Arena::new(256);
        let got = collect(
            &mut x,
            &mut mem,
            usize::MAX,
            Duration::from_millis(100),
            |_| true,
        );
        assert!(got.is_empty(), "{} frames reached AF_XDP", got.len());

        // Without the address in the map, the echo requests go to the fast path instead
        // (ARP still to the kernel, which already resolved the neighbour anyway).
        x.set_local_addrs(&[]).unwrap();
        let out = ping("2");
        assert!(!out.status.success(), "kernel answered a redirected ping");
        let got = collect(&mut x, &mut mem, 2, Duration::from_secs(1), is_ipv4);
        assert_eq!(got.len(), 2);
        assert!(
            got.iter().all(|f| f[23] == 1 && f[34] == 8),
            "ICMP echo requests"
        );
    });
}

#[test]
fn tx_burst_frames_arrive_at_the_peer() {
    let lab = Lab::new("xtx", 1500);
    lab.run(|| {
        let (mut x, mut p) = open_pair(&lab, AfXdpOptions::default());
        let mut mem = Arena::new(4096);
        let frames: Vec<Vec<u8>> = (0..1000u32)
            .map(|i| frame(p.mac(), x.mac(), i, 60 + (i as usize * 37) % 1455))
            .collect();
        let mut got = Vec::new();
        for chunk in frames.chunks(256) {
            let pkts: Vec<Pkt> = chunk.iter().map(|f| mem.load(f, 0).unwrap()).collect();
            assert_eq!(x.tx_burst(&mut mem, &pkts), pkts.len(), "{:?}", x.stats());
            got.extend(collect(
                &mut p,
                &mut mem,
                chunk.len(),
                Duration::from_secs(2),
                is_test_frame,
            ));
        }
        assert_eq!(got.len(), frames.len());
        assert!(got == frames, "frames differ or out of order");
        let s = x.stats();
        assert_eq!((s.tx_packets, s.tx_errors), (1000, 0), "{s:?}");
        assert_eq!(mem.free_count(), 4096, "tx buffers returned at once");
        // Repeated bursts recycle the UMEM's transmit frames through the completion ring.
        for round in 0..20u32 {
            let pkts: Vec<Pkt> = (0..256)
                .map(|i| {
                    mem.load(&frame(p.mac(), x.mac(), round * 256 + i, 64), 0)
                        .unwrap()
                })
                .collect();
            assert_eq!(
                x.tx_burst(&mut mem, &pkts),
                256,
                "round {round}: {:?}",
                x.stats()
            );
            collect(&mut p, &mut mem, 256, Duration::from_secs(2), is_test_frame);
        }
    });
}

#[test]
fn drop_detaches_the_program() {
    let lab = Lab::new("xdrop", 1500);
    lab.run(|| {
        Lab::enter(&lab.a);
        let x = AfXdp::open(A_IF, 0, 0, Default::default()).unwrap();
        assert!(has_xdp(&lab.a, A_IF), "{}", link_show(&lab.a, A_IF));
        drop(x);
        // The kernel releases the program's link when its last reference goes, which can
        // trail the close by a moment (a CI run saw it still attached right after): wait
        // for it, bounded.
        let t = Instant::now();
        while has_xdp(&lab.a, A_IF) && t.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!has_xdp(&lab.a, A_IF), "{}", link_show(&lab.a, A_IF));
        // And the port can be opened again.
        let x = AfXdp::open(A_IF, 0, 0, Default::default()).unwrap();
        assert_eq!(x.mode(), "xdp-drv/copy");
    });
}

#[test]
fn stale_program_is_replaced_on_open() {
    let lab = Lab::new("xstale", 1500);
    let obj = std::env::temp_dir().join(format!("ferrouter-xdp-{}.o", std::process::id()));
    std::fs::write(&obj, ports::afxdp::XDP_OBJECT).unwrap();
    let obj_path = obj.to_str().unwrap().to_string();
    let r = std::panic::catch_unwind(|| {
        lab.run(|| {
            for (mode, shown) in [("xdpgeneric", "xdpgeneric"), ("xdpdrv", "xdp ")] {
                // What a crashed run of an older loader leaves: a netlink-attached program.
                ip(&[
                    "-n",
                    &lab.a,
                    "link",
                    "set",
                    "dev",
                    A_IF,
                    mode,
                    "obj",
                    &obj_path,
                    "sec",
                    "xdp.frags",
                ]);
                assert!(
                    link_show(&lab.a, A_IF).contains(shown),
                    "{}",
                    link_show(&lab.a, A_IF)
                );
                let (mut x, mut p) = open_pair(&lab, AfXdpOptions::default());
                assert_eq!(x.mode(), "xdp-drv/copy");
                let mut mem = Arena::new(256);
                let frames: Vec<Vec<u8>> = (0..10u32)
                    .map(|i| udp4(x.mac(), p.mac(), [198, 51, 100, 3], i, 40))
                    .collect();
                send_all(&mut p, &mut mem, &frames);
                let got = collect(&mut x, &mut mem, 10, Duration::from_secs(2), is_ipv4);
                assert!(got == frames, "{mode}: got {} of 10", got.len());
                drop(x);
                assert!(!has_xdp(&lab.a, A_IF), "{}", link_show(&lab.a, A_IF));
            }
        })
    });
    let _ = std::fs::remove_file(&obj);
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
}

#[test]
fn missing_interface_is_not_found_and_named() {
    let lab = Lab::new("xmissing", 1500);
    lab.run(|| {
        Lab::enter(&lab.a);
        let name = format!("nx{}", std::process::id());
        match AfXdp::open(&name, 0, 0, Default::default()) {
            Err(e @ PortError::NotFound { .. }) => {
                assert!(e.to_string().contains(&name), "{e}");
            }
            other => panic!("expected NotFound, got {other:?}"),
        }
        // A queue veth does not have: the bind error says so, and nothing stays attached.
        match AfXdp::open(A_IF, 7, 0, Default::default()) {
            Err(e @ PortError::Xdp { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains("bind") && msg.contains(A_IF), "{msg}");
            }
            other => panic!("expected Xdp error, got {other:?}"),
        }
        assert!(!has_xdp(&lab.a, A_IF), "{}", link_show(&lab.a, A_IF));
    });
}

/// Two AF_XDP ports on the two ends of the veth sharing one arena as their UMEM: p1's
/// port receives what p0's sends, in frames of the arena, and sends each frame back from
/// where it lies (its descriptor, not its bytes: the same frame index), MACs swapped; p0's
/// port gets them back intact. Every frame is accounted for: held, lent to a ring, or free.
#[test]
fn ports_sharing_an_arena_forward_descriptors_not_bytes() {
    let lab = Lab::new("xsh", 1500);
    lab.run(|| {
        let (frames_total, mut x0, mut x1, mut mem) = open_shared_pair(&lab);
        // Both fill rings are full of the arena's frames (half of each socket's share).
        assert_eq!(mem.lent_count(), 2 * (AfXdp::shared_frames() as usize / 2));
        let frames: Vec<Vec<u8>> = (0..500u32)
            .map(|i| {
                udp4(
                    x1.mac(),
                    x0.mac(),
                    [198, 51, 100, 7],
                    i,
                    18 + (i as usize * 37) % 1400,
                )
            })
            .collect();
        let mut back = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut sent = 0;
        while back.len() < frames.len() && Instant::now() < deadline {
            if sent < frames.len() {
                let chunk = &frames[sent..(sent + 50).min(frames.len())];
                let pkts: Vec<Pkt> = chunk.iter().map(|f| mem.load(f, 0).unwrap()).collect();
                assert_eq!(x0.tx_burst(&mut mem, &pkts), pkts.len(), "{:?}", x0.stats());
                sent += chunk.len();
            }
            // p1: receive in place and send each frame back as it lies.
            let mut v = Vector::default();
            x1.rx_burst(&mut mem, &mut v);
            let mut fwd = Vec::new();
            for p in v.as_slice() {
                assert_eq!(
                    p.off, 256,
                    "data where the kernel put it, headroom in front"
                );
                if !is_ipv4(mem.data(p)) {
                    mem.free(p.buf);
                    continue;
                }
                let f = mem.frame_mut(p.buf);
                let o = p.off as usize;
                let (dst, src) = (f[o..o + 6].to_vec(), f[o + 6..o + 12].to_vec());
                f[o..o + 6].copy_from_slice(&src);
                f[o + 6..o + 12].copy_from_slice(&dst);
                fwd.push(*p);
            }
            assert_eq!(x1.tx_burst(&mut mem, &fwd), fwd.len(), "{:?}", x1.stats());
            // Sent from where they lie: each frame itself is on the TX ring now (lent, so it
            // reads as zeros), not a copy of it.
            for p in &fwd {
                assert!(
                    mem.frame(p.buf).iter().all(|&b| b == 0),
                    "frame {} copied",
                    p.buf
                );
            }
            // p0: the same frames come back, in the arena's frames.
            let mut w = Vector::default();
            x0.rx_burst(&mut mem, &mut w);
            for p in w.as_slice() {
                if is_ipv4(mem.data(p)) {
                    back.push(mem.data(p).to_vec());
                }
                mem.free(p.buf);
            }
            if w.len == 0 && v.len == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        assert_eq!(
            back.len(),
            frames.len(),
            "{:?} {:?}",
            x0.stats(),
            x1.stats()
        );
        for (got, want) in back.iter().zip(&frames) {
            assert_eq!(got[..6], want[6..12], "MACs swapped");
            assert_eq!(got[12..], want[12..], "payload intact");
        }
        // Completions come back on the next bursts: everything is then free or on a fill
        // ring.
        std::thread::sleep(Duration::from_millis(50));
        x0.tx_burst(&mut mem, &[]);
        x1.tx_burst(&mut mem, &[]);
        assert_eq!(
            mem.free_count() + mem.lent_count(),
            frames_total as usize,
            "no frame lost"
        );
        assert_eq!(mem.bad_frees(), 0);
        let (s0, s1) = (x0.stats(), x1.stats());
        assert_eq!(
            (s0.tx_errors, s1.tx_errors, s0.kernel_drops, s1.kernel_drops),
            (0, 0, 0, 0)
        );
    });
}

/// A port on a shared UMEM driven with another memory (a caller's mistake) drops what it
/// is given and counts it, rather than touching frames that are not there.
#[test]
fn a_shared_port_refuses_a_foreign_memory() {
    let lab = Lab::new("xfm", 1500);
    lab.run(|| {
        let mut arenas = vec![Arena::new(1024 + AfXdp::shared_frames())];
        Lab::enter(&lab.a);
        let mut x = AfXdp::open_queues_shared(A_IF, 0, Default::default(), &mut arenas, &[None])
            .unwrap()
            .remove(0);
        let mut other = Arena::new(64);
        let p = other.load(&[0u8; 60], 0).unwrap();
        assert_eq!(x.tx_burst(&mut other, &[p]), 0);
        assert_eq!(x.stats().tx_errors, 1);
        assert_eq!(other.free_count(), 64, "the buffer was released");
        // Another worker's arena is refused at open.
        let mut second = vec![Arena::new(1024 + AfXdp::shared_frames())];
        Lab::enter(&lab.b);
        let e =
            AfXdp::open_queues_shared(B_IF, 1, Default::default(), &mut second, &[x.umem_owner()])
                .expect_err("refused");
        assert!(
            e.to_string().contains("another worker's packet memory"),
            "{e}"
        );
    });
}

/// Jumbo frames at MTU 9000 through an AF_XDP port with a UMEM of its own: frames larger
/// than a 2 KiB chunk arrive as several descriptors and are gathered into one big buffer,
/// byte for byte; sent from a big buffer, they leave as several descriptors and reach the
/// peer whole. Every buffer comes back.
#[test]
fn jumbo_frames_are_gathered_and_scattered() {
    let lab = Lab::new("xjb", 9000);
    lab.run(|| {
        let (mut x, mut p) = open_pair(&lab, AfXdpOptions::default());
        assert_eq!(x.mtu(), 9000);
        let mut mem = Arena::new(4096);
        let big = mem.big_frames() as usize;
        // 1,000 to 9,000 bytes of payload: 1 to 6 descriptors each.
        let sizes = |i: u32| {
            if i.is_multiple_of(10) {
                8972
            } else {
                1000 + (i as usize * 1777) % 7973
            }
        };
        let frames: Vec<Vec<u8>> = (0..200u32)
            .map(|i| udp4(x.mac(), p.mac(), [198, 51, 100, 7], i, sizes(i)))
            .collect();
        assert!(frames.iter().any(|f| f.len() > 9000));
        let mut got = Vec::new();
        for chunk in frames.chunks(16) {
            send_all(&mut p, &mut mem, chunk);
            got.extend(collect(
                &mut x,
                &mut mem,
                chunk.len(),
                Duration::from_secs(3),
                is_ipv4,
            ));
        }
        assert_eq!(got.len(), frames.len(), "stats {:?}", x.stats());
        assert!(got == frames, "jumbo frames differ or out of order");
        // And back: from big buffers, out as multi-buffer frames.
        let back: Vec<Vec<u8>> = (0..200u32)
            .map(|i| udp4(p.mac(), x.mac(), [198, 51, 100, 9], i, sizes(i)))
            .collect();
        let mut got = Vec::new();
        for chunk in back.chunks(16) {
            send_all(&mut x, &mut mem, chunk);
            got.extend(collect(
                &mut p,
                &mut mem,
                chunk.len(),
                Duration::from_secs(3),
                is_ipv4,
            ));
        }
        assert_eq!(
            got.len(),
            back.len(),
            "stats {:?} {:?}",
            x.stats(),
            p.stats()
        );
        assert!(got == back, "jumbo frames differ on the way back");
        let s = x.stats();
        assert_eq!(
            (s.rx_dropped_too_big, s.rx_dropped_no_buffer),
            (0, 0),
            "{s:?}"
        );
        assert_eq!((s.tx_errors, s.kernel_drops), (0, 0), "{s:?}");
        assert_eq!((mem.free_count(), mem.big_free_count()), (4096, big));
        assert_eq!(mem.bad_frees(), 0);
    });
}

/// Jumbo frames between two AF_XDP ports on one shared UMEM (the daemon's setup): received
/// into the arena's frames, gathered into a big buffer, and sent back from it as several
/// arena frames lent to the kernel; nothing is lost or leaked.
#[test]
fn jumbo_frames_on_a_shared_umem() {
    let lab = Lab::new("xjs", 9000);
    lab.run(|| {
        let (frames_total, mut x0, mut x1, mut mem) = open_shared_pair(&lab);
        let big = mem.big_frames() as usize;
        let frames: Vec<Vec<u8>> = (0..100u32)
            .map(|i| {
                udp4(
                    x1.mac(),
                    x0.mac(),
                    [198, 51, 100, 7],
                    i,
                    2000 + (i as usize * 613) % 6900,
                )
            })
            .collect();
        let mut back = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut sent = 0;
        while back.len() < frames.len() && Instant::now() < deadline {
            if sent < frames.len() {
                let chunk = &frames[sent..(sent + 10).min(frames.len())];
                let pkts: Vec<Pkt> = chunk.iter().map(|f| mem.load(f, 0).unwrap()).collect();
                assert!(pkts.iter().all(|p| p.buf >= dataplane::BIG_BASE));
                assert_eq!(x0.tx_burst(&mut mem, &pkts), pkts.len(), "{:?}", x0.stats());
                sent += chunk.len();
            }
            // p1: each frame, gathered, goes back as it is.
            let mut v = Vector::default();
            x1.rx_burst(&mut mem, &mut v);
            let fwd: Vec<Pkt> = v
                .as_slice()
                .iter()
                .copied()
                .filter(|p| {
                    let keep = is_ipv4(mem.data(p));
                    if !keep {
                        mem.free(p.buf);
                    }
                    keep
                })
                .collect();
            assert_eq!(x1.tx_burst(&mut mem, &fwd), fwd.len(), "{:?}", x1.stats());
            let mut w = Vector::default();
            x0.rx_burst(&mut mem, &mut w);
            for p in w.as_slice() {
                if is_ipv4(mem.data(p)) {
                    back.push(mem.data(p).to_vec());
                }
                mem.free(p.buf);
            }
            if w.len == 0 && v.len == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        assert_eq!(
            back.len(),
            frames.len(),
            "{:?} {:?}",
            x0.stats(),
            x1.stats()
        );
        assert!(back == frames, "jumbo frames differ");
        std::thread::sleep(Duration::from_millis(50));
        x0.tx_burst(&mut mem, &[]);
        x1.tx_burst(&mut mem, &[]);
        assert_eq!(
            mem.free_count() + mem.lent_count(),
            frames_total as usize,
            "no frame lost"
        );
        assert_eq!(mem.big_free_count(), big, "no big frame lost");
        assert_eq!(mem.bad_frees(), 0);
        let (s0, s1) = (x0.stats(), x1.stats());
        assert_eq!(
            (s0.tx_errors, s1.tx_errors, s0.kernel_drops, s1.kernel_drops),
            (0, 0, 0, 0)
        );
    });
}
