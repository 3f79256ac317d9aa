//! Forwarding behaviour end to end (docs/forwarding.md): crafted frames sent from h1 through
//! the router, with what arrives at h2 (real sockets), what comes back to h1 and what the
//! router counts. Needs root; the labs run one at a time and are always torn down.

use std::net::UdpSocket;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lab::Lab;

mod common;
use common::*;

static SERIAL: Mutex<()> = Mutex::new(());

const H1: [u8; 4] = [192, 0, 2, 2];
const H2: [u8; 4] = [198, 51, 100, 2];
const R1: [u8; 4] = [192, 0, 2, 1];

/// The lab's addresses as 16 bytes.
fn v6(s: &str) -> [u8; 16] {
    s.parse::<std::net::Ipv6Addr>().unwrap().octets()
}

/// Ethernet + IPv4 (with `opts`, padded) + UDP to `dport` carrying `tag`.
fn udp4(l2: &[u8; 12], src: [u8; 4], dst: [u8; 4], opts: &[u8], dport: u16, tag: &[u8]) -> Vec<u8> {
    let mut o = opts.to_vec();
    while !o.len().is_multiple_of(4) {
        o.push(0);
    }
    let hlen = 20 + o.len();
    let total = (hlen + 8 + tag.len()) as u16;
    let mut ip = vec![0x40 | (hlen / 4) as u8, 0, 0, 0, 0, 7, 0, 0, 64, 17, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    ip.extend_from_slice(&o);
    let c = wire::checksum::checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut f = l2.to_vec();
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&40000u16.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&((8 + tag.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]); // no UDP checksum (IPv4 allows it)
    f.extend_from_slice(tag);
    f
}

/// Ethernet + IPv6 + `ext` (extension headers, the last naming UDP) + UDP to `dport`.
fn udp6(l2: &[u8; 12], first: u8, ext: &[u8], dport: u16, tag: &[u8]) -> Vec<u8> {
    let (src, dst) = (v6(lab::H1_V6), v6(lab::H2_V6));
    let ulen = 8 + tag.len();
    let mut u = 40000u16.to_be_bytes().to_vec();
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&(ulen as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(tag);
    let s = wire::checksum::pseudo_v6(&src, &dst, 17, ulen as u32) + wire::checksum::sum(&u);
    let c = !wire::checksum::fold(s);
    u[6..8].copy_from_slice(&c.to_be_bytes());
    let mut f = l2.to_vec();
    f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
    f.extend_from_slice(&((ext.len() + ulen) as u16).to_be_bytes());
    f.extend_from_slice(&[first, 64]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(ext);
    f.extend_from_slice(&u);
    f
}

/// `n` destination-options headers of 8 bytes (PadN), the last naming UDP.
fn dst_opts(n: usize) -> Vec<u8> {
    let mut v = Vec::new();
    for k in 0..n {
        v.extend_from_slice(&[if k + 1 == n { 17 } else { 60 }, 0, 1, 4, 0, 0, 0, 0]);
    }
    v
}

/// Datagrams received on `sock` within `wait`, by payload.
/// h1's eth0: its ifindex and the L2 header of a frame from it to the router.
fn h1_link(lab: &Lab) -> (u32, [u8; 12]) {
    let r1 = mac_of(api(lab, "interfaces", None)[0]["mac"].as_str().unwrap());
    let (ifindex, mac) = in_netns(&lab.h1(), || {
        let i = nix_ifindex("eth0");
        let mac = std::fs::read_to_string("/sys/class/net/eth0/address").unwrap();
        (i, mac)
    });
    let mut l2 = [0u8; 12];
    l2[..6].copy_from_slice(&r1);
    l2[6..].copy_from_slice(&mac_of(mac.trim()));
    (ifindex, l2)
}

fn nix_ifindex(name: &str) -> u32 {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: a valid NUL-terminated name; the call only reads it.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    assert!(i != 0, "{name}: {}", std::io::Error::last_os_error());
    i
}

fn send_from_h1(lab: &Lab, ifindex: u32, frames: Vec<Vec<u8>>) {
    in_netns(&lab.h1(), move || {
        for f in &frames {
            send_raw(ifindex, f);
        }
    });
}

/// IPv4 options, martian sources, VLAN tags and IPv6 extension headers in transit, sent as
/// crafted frames from h1: what must arrive at h2 arrives, what must not is counted.
#[test]
fn transit_policy_on_crafted_frames_af_xdp() {
    transit_policy("af_xdp", "fx");
}

#[test]
fn transit_policy_on_crafted_frames_af_packet() {
    transit_policy("af_packet", "fp");
}

fn transit_policy(backend: &str, tag: &str) {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let g = start_with(tag, "", backend);
    let lab = &g.0;
    ping_ok(lab, lab::H2_V4).unwrap();
    ping_ok(lab, lab::H2_V6).unwrap();
    let (ifindex, l2) = h1_link(lab);
    let socks: (UdpSocket, UdpSocket) = in_netns(&lab.h2(), || {
        (
            UdpSocket::bind("0.0.0.0:7001").unwrap(),
            UdpSocket::bind("[::]:7002").unwrap(),
        )
    });
    let parm_before = snmp(lab, &lab.h1(), "Icmp:", "InParmProbs");
    let before = api(lab, "counters", None);
    const N: usize = 5;
    let mut frames = Vec::new();
    for _ in 0..N {
        // Forwarded: Router Alert, Record Route and Timestamp in transit (RFC 6398, RFC 7126).
        frames.push(udp4(&l2, H1, H2, &[148, 4, 0, 0], 7001, b"ra"));
        frames.push(udp4(&l2, H1, H2, &[7, 7, 4, 0, 0, 0, 0], 7001, b"rr"));
        frames.push(udp4(
            &l2,
            H1,
            H2,
            &[68, 12, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            7001,
            b"ts",
        ));
        // Dropped: source routes, our own address and link-local as sources.
        frames.push(udp4(
            &l2,
            H1,
            H2,
            &[131, 7, 4, 198, 51, 100, 2],
            7001,
            b"lsrr",
        ));
        frames.push(udp4(
            &l2,
            H1,
            H2,
            &[137, 7, 4, 198, 51, 100, 2],
            7001,
            b"ssrr",
        ));
        frames.push(udp4(&l2, R1, H2, &[], 7001, b"own"));
        frames.push(udp4(&l2, [169, 254, 1, 2], H2, &[], 7001, b"ll"));
        // Answered by a parameter problem: a Record Route pointer below 4.
        frames.push(udp4(&l2, H1, H2, &[7, 3, 2, 0], 7001, b"bad"));
        // 802.1Q and QinQ on an untagged port: dropped, not routed untagged.
        for tpids in [&[0x8100u16][..], &[0x88a8, 0x8100]] {
            let f = udp4(&l2, H1, H2, &[], 7001, b"vlan");
            let mut t = f[..12].to_vec();
            for tpid in tpids {
                t.extend_from_slice(&tpid.to_be_bytes());
                t.extend_from_slice(&100u16.to_be_bytes());
            }
            t.extend_from_slice(&f[12..]);
            frames.push(t);
        }
        // IPv6: Hop-by-Hop (PadN), ten destination-options headers, both forwarded.
        frames.push(udp6(&l2, 0, &[17, 0, 1, 4, 0, 0, 0, 0], 7002, b"hbh"));
        frames.push(udp6(&l2, 60, &dst_opts(10), 7002, b"chain"));
    }
    send_from_h1(lab, ifindex, frames);
    let got4 = received(&socks.0, Duration::from_millis(1500));
    let got6 = received(&socks.1, Duration::from_millis(300));
    let n = |got: &[Vec<u8>], t: &[u8]| got.iter().filter(|g| g.as_slice() == t).count();
    for t in [&b"ra"[..], b"rr", b"ts"] {
        assert_eq!(n(&got4, t), N, "{}: {got4:?}", String::from_utf8_lossy(t));
    }
    for t in [&b"lsrr"[..], b"ssrr", b"own", b"ll", b"bad", b"vlan"] {
        assert_eq!(n(&got4, t), 0, "{} arrived", String::from_utf8_lossy(t));
    }
    for t in [&b"hbh"[..], b"chain"] {
        assert_eq!(n(&got6, t), N, "{}: {got6:?}", String::from_utf8_lossy(t));
    }
    let after = api(lab, "counters", None);
    let delta = |r: &str| reason_in(&after, r) - reason_in(&before, r);
    let n = N as u64;
    assert_eq!(delta("Ip4SourceRoute"), 2 * n, "{after}");
    assert_eq!(delta("Ip4OwnSrc"), n, "{after}");
    assert_eq!(delta("Ip4LinkLocalSrc"), n, "{after}");
    assert_eq!(delta("Ip4BadOptions"), n, "{after}");
    assert_eq!(delta("EthVlanNoSubif"), 2 * n, "{after}");
    // The parameter problems reached h1 (the global ICMP bucket allows a burst of 200).
    assert_eq!(
        snmp(lab, &lab.h1(), "Icmp:", "InParmProbs") - parm_before,
        n,
        "parameter problems received by h1"
    );
    assert_eq!(kernel_forwarded(lab), (0, 0));
}

/// Punts that arrive: datagrams to the h1 subnet's directed broadcast, sent from h1 (a
/// link-layer broadcast) and from h2 (a unicast frame to the router), reach a UDP socket on
/// the router through either backend.
#[test]
fn directed_broadcasts_reach_the_routers_socket_af_xdp() {
    directed_broadcasts("af_xdp", "bx");
}

#[test]
fn directed_broadcasts_reach_the_routers_socket_af_packet() {
    directed_broadcasts("af_packet", "bp");
}

fn directed_broadcasts(backend: &str, tag: &str) {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let g = start_with(tag, "", backend);
    let lab = &g.0;
    ping_ok(lab, lab::H2_V4).unwrap();
    let sock = in_netns(&lab.rtr(), || UdpSocket::bind("0.0.0.0:7003").unwrap());
    const N: usize = 20;
    for (ns, what) in [(lab.h1(), &b"from-h1"[..]), (lab.h2(), b"from-h2")] {
        let what = what.to_vec();
        in_netns(&ns, move || {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            s.set_broadcast(true).unwrap();
            for _ in 0..N {
                s.send_to(&what, "192.0.2.255:7003").unwrap();
                std::thread::sleep(Duration::from_millis(5));
            }
        });
    }
    let got = received(&sock, Duration::from_millis(1000));
    for t in [&b"from-h1"[..], b"from-h2"] {
        let n = got.iter().filter(|g| g.as_slice() == t).count();
        assert_eq!(n, N, "{}: {} of {N}", String::from_utf8_lossy(t), n);
    }
    assert_eq!(reason_count(lab, "PuntNoKernelPath"), 0);
    assert_eq!(kernel_forwarded(lab), (0, 0));
}

/// ICMP errors toward one source are limited as Linux limits them per peer (6, then one a
/// second): 200 expiring packets from h1 earn it a handful of time-exceeded messages, where
/// the global bucket alone would have sent 200.
#[test]
fn icmp_errors_toward_one_source_are_limited_per_destination() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let g = start("ic", "");
    let lab = &g.0;
    ping_ok(lab, lab::H2_V4).unwrap();
    let (ifindex, l2) = h1_link(lab);
    let before = (
        snmp(lab, &lab.h1(), "Icmp:", "InTimeExcds"),
        reason_count(lab, "IcmpRateLimitedPeer"),
    );
    let mut frames = Vec::new();
    for _ in 0..200 {
        let mut f = udp4(&l2, H1, H2, &[], 7005, b"ttl");
        f[22] = 1; // TTL 1
        f[24..26].copy_from_slice(&[0, 0]);
        let c = wire::checksum::checksum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        frames.push(f);
    }
    let t = Instant::now();
    send_from_h1(lab, ifindex, frames);
    let secs = t.elapsed().as_secs();
    std::thread::sleep(Duration::from_millis(300));
    let got = snmp(lab, &lab.h1(), "Icmp:", "InTimeExcds") - before.0;
    // 6 at once, plus one for each further second the 200 frames took to send.
    assert!(
        (6..=7 + secs).contains(&got),
        "h1 received {got} time-exceeded messages for 200 packets"
    );
    assert!(reason_count(lab, "IcmpRateLimitedPeer") - before.1 >= 200 - 7 - secs);
}

/// The first packets toward a neighbour the router has not resolved yet are held while the
/// kernel resolves it, then sent (a few per next hop, as Linux queues them), where they used
/// to be lost.
#[test]
fn first_packets_to_an_unresolved_neighbour_arrive_af_xdp() {
    first_packets("af_xdp", "gx");
}

#[test]
fn first_packets_to_an_unresolved_neighbour_arrive_af_packet() {
    first_packets("af_packet", "gp");
}

fn first_packets(backend: &str, tag: &str) {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let g = start_with(tag, "", backend);
    let lab = &g.0;
    let n = api(lab, "neighbors", None);
    assert!(
        !n.as_array()
            .unwrap()
            .iter()
            .any(|x| x["ip"] == lab::H2_V4 || x["ip"] == lab::H2_V6),
        "h2 must not be resolved yet: {n}"
    );
    let socks: (UdpSocket, UdpSocket) = in_netns(&lab.h2(), || {
        (
            UdpSocket::bind("0.0.0.0:7011").unwrap(),
            UdpSocket::bind("[::]:7012").unwrap(),
        )
    });
    let (v4, v6) = (lab::H2_V4.to_string(), lab::H2_V6.to_string());
    in_netns(&lab.h1(), move || {
        let s4 = UdpSocket::bind("0.0.0.0:0").unwrap();
        let s6 = UdpSocket::bind("[::]:0").unwrap();
        for k in 0..3u8 {
            s4.send_to(&[k], (v4.as_str(), 7011)).unwrap();
            s6.send_to(&[k], (v6.as_str(), 7012)).unwrap();
        }
    });
    let mut got4 = received(&socks.0, Duration::from_millis(2500));
    let mut got6 = received(&socks.1, Duration::from_millis(500));
    // All of them; a packet sent just as the neighbour resolved may overtake a held one
    // (docs/forwarding.md), so the order is not asserted.
    got4.sort();
    got6.sort();
    assert_eq!(got4, vec![vec![0], vec![1], vec![2]], "IPv4");
    assert_eq!(got6, vec![vec![0], vec![1], vec![2]], "IPv6");
    let c = api(lab, "counters", None);
    assert!(c["glean"]["sent"].as_u64().unwrap() >= 2, "{c}");
    assert_eq!(c["glean"]["expired"], 0, "{c}");
    assert_eq!(kernel_forwarded(lab), (0, 0));
}
