//! Malformed input: the parser never panics, whatever the bytes, and counts what it skips.

use std::sync::atomic::{AtomicUsize, Ordering};

use linux::parse_messages;
use proptest::prelude::*;

/// rtnetlink message types the parser decodes in depth (RTM_NEWLINK ..= RTM_GETROUTE), plus
/// a few it must skip.
const TYPES: [u16; 16] = [16, 17, 18, 20, 21, 22, 24, 25, 26, 28, 29, 30, 1, 2, 3, 4];

/// Real messages, as `ip monitor` shows them on the wire: a route with RTA_MULTIPATH, a
/// neighbour, an address and a link.
fn samples() -> Vec<Vec<u8>> {
    let mut all = vec![
        // RTM_NEWROUTE 100.64.0.0/16 nexthop via 10.1.0.9 dev 3 weight 1 nexthop via 10.2.0.9 dev 4 weight 3
        vec![
            80, 0, 0, 0, 24, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, //
            2, 16, 0, 0, 254, 3, 0, 1, 0, 0, 0, 0, //
            8, 0, 15, 0, 254, 0, 0, 0, // RTA_TABLE
            8, 0, 1, 0, 100, 64, 0, 0, // RTA_DST
            36, 0, 9, 0, // RTA_MULTIPATH
            16, 0, 0, 0, 3, 0, 0, 0, 8, 0, 5, 0, 10, 1, 0, 9, //
            16, 0, 0, 2, 4, 0, 0, 0, 8, 0, 5, 0, 10, 2, 0, 9,
        ],
        // RTM_NEWNEIGH 192.0.2.9 lladdr 02:00:00:00:00:09 dev 2 PERMANENT
        vec![
            48, 0, 0, 0, 28, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, //
            2, 0, 0, 0, 2, 0, 0, 0, 128, 0, 0, 1, //
            8, 0, 1, 0, 192, 0, 2, 9, //
            10, 0, 2, 0, 2, 0, 0, 0, 0, 9, 0, 0,
        ],
        // RTM_NEWADDR 2001:db8::1/64 dev 2
        vec![
            44, 0, 0, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, //
            10, 64, 128, 0, 2, 0, 0, 0, //
            20, 0, 1, 0, 0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
        ],
        // RTM_NEWLINK ifindex 2 "d0" UP|RUNNING mtu 1400 address 02:00:00:00:00:01
        vec![
            68, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, //
            0, 0, 1, 0, 2, 0, 0, 0, 0x43, 0, 1, 0, 0, 0, 0, 0, //
            7, 0, 3, 0, b'd', b'0', 0, 0, // IFLA_IFNAME
            8, 0, 4, 0, 0x78, 5, 0, 0, // IFLA_MTU
            10, 0, 1, 0, 2, 0, 0, 0, 0, 1, 0, 0, // IFLA_ADDRESS
            5, 0, 16, 0, 6, 0, 0, 0, // IFLA_OPERSTATE up
        ],
    ];
    for m in &mut all {
        assert_eq!(
            m[..4],
            (m.len() as u32).to_ne_bytes(),
            "sample length field"
        );
    }
    all
}

/// Panics anywhere in this test binary. `parse_messages` catches a panic in the
/// third-party decoder and counts the message as skipped; the properties also demand that
/// no such panic happened at all, so a panicky decoder version is noticed.
static PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::Relaxed);
            prev(info);
        }));
    });
}

#[test]
fn samples_parse() {
    let mut out = Vec::new();
    for s in samples() {
        assert_eq!(parse_messages(&s, &mut out), 0, "{s:?}");
    }
    assert_eq!(out.len(), 4, "{out:#?}");
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 400,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_bytes(buf in proptest::collection::vec(any::<u8>(), 0..600)) {
        count_panics();
        let mut out = Vec::new();
        parse_messages(&buf, &mut out);
        prop_assert_eq!(PANICS.load(Ordering::Relaxed), 0);
    }

    /// A consistent header in front of random payload reaches the attribute parsers.
    #[test]
    fn random_payload(ty in proptest::sample::select(&TYPES[..]),
                      payload in proptest::collection::vec(any::<u8>(), 0..400)) {
        count_panics();
        let mut buf = Vec::with_capacity(16 + payload.len());
        buf.extend_from_slice(&((16 + payload.len()) as u32).to_ne_bytes());
        buf.extend_from_slice(&ty.to_ne_bytes());
        buf.extend_from_slice(&[0; 10]);
        buf.extend_from_slice(&payload);
        let mut out = Vec::new();
        let skipped = parse_messages(&buf, &mut out);
        // Every message but NLMSG_NOOP is either reported or counted.
        prop_assert!(ty == 1 || skipped + out.len() == 1);
        prop_assert_eq!(PANICS.load(Ordering::Relaxed), 0);
    }

    /// Real messages, truncated (with the header length kept consistent) and bit-flipped.
    #[test]
    fn mutated_samples(which in 0usize..4, cut in 0usize..80,
                       flips in proptest::collection::vec((0usize..80, any::<u8>()), 0..6)) {
        count_panics();
        let mut buf = samples().swap_remove(which);
        buf.truncate(buf.len().saturating_sub(cut).max(16));
        for (at, x) in flips {
            let i = 16 + at % (buf.len() - 16).max(1);
            if let Some(b) = buf.get_mut(i) {
                *b ^= x;
            }
        }
        let len = buf.len() as u32;
        buf[..4].copy_from_slice(&len.to_ne_bytes());
        let mut out = Vec::new();
        let skipped = parse_messages(&buf, &mut out);
        prop_assert!(skipped + out.len() <= 1);
        prop_assert_eq!(PANICS.load(Ordering::Relaxed), 0);
    }
}
