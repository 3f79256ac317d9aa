//! The codec: RFC 7634's ESP example, round trips for every algorithm, mode, family, ESN
//! and NAT-T, and each error on the packet that causes it.

use std::net::IpAddr;

use proptest::prelude::*;

use super::*;
use crate::sa::{Direction, Encryption, Integrity, Mode, NatT, SaConfig};
use crate::suite::tests::hex;

pub(crate) const HEADROOM: usize = 128;

pub(crate) const ALGS: [(Encryption, Integrity); 9] = [
    (Encryption::AesGcm128, Integrity::None),
    (Encryption::AesGcm256, Integrity::None),
    (Encryption::ChaCha20Poly1305, Integrity::None),
    (Encryption::AesCbc128, Integrity::HmacSha1_96),
    (Encryption::AesCbc128, Integrity::HmacSha256_128),
    (Encryption::AesCbc256, Integrity::HmacSha512_256),
    (Encryption::Null, Integrity::HmacSha1_96),
    (Encryption::Null, Integrity::HmacSha256_128),
    (Encryption::Null, Integrity::None),
];

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// An outbound and an inbound SA with the same keys.
pub(crate) fn pair(alg: (Encryption, Integrity), mode: Mode, esn: bool, natt: bool) -> (Sa, Sa) {
    let ek: Vec<u8> = (0..alg.0.key_len() as u8)
        .map(|b| b.wrapping_mul(7))
        .collect();
    let ak: Vec<u8> = (0..alg.1.key_len() as u8).map(|b| b ^ 0xa5).collect();
    let mk = |d| {
        let mut c = SaConfig::new(0x1234_5678, d, alg.0, &ek, alg.1, &ak);
        c.mode = mode;
        c.esn = esn;
        c.natt = natt.then(NatT::default);
        Sa::new(&c).unwrap()
    };
    (mk(Direction::Outbound), mk(Direction::Inbound))
}

pub(crate) use crate::testing::{udp4, udp6};

/// `pkt` in a frame buffer with the data plane's headroom and `tail` bytes of tailroom.
pub(crate) fn framed(pkt: &[u8], tail: usize) -> Vec<u8> {
    let mut b = vec![0u8; HEADROOM + pkt.len() + tail];
    b[HEADROOM..HEADROOM + pkt.len()].copy_from_slice(pkt);
    b
}

fn modes() -> [Mode; 3] {
    [
        Mode::Transport,
        Mode::Tunnel {
            src: ip("192.0.2.1"),
            dst: ip("192.0.2.2"),
        },
        Mode::Tunnel {
            src: ip("2001:db8::a"),
            dst: ip("2001:db8::b"),
        },
    ]
}

#[test]
fn rfc7634_esp_example() {
    // RFC 7634 Appendix A: key 80..9f, salt a0a1a2a3, SPI 0x01020304, sequence number 5,
    // a tunnel-mode packet carrying an ICMP echo. The outer header is ours (the RFC gives
    // the ESP payload).
    let mut key: Vec<u8> = (0x80..=0x9f).collect();
    key.extend_from_slice(&[0xa0, 0xa1, 0xa2, 0xa3]);
    let mut c = SaConfig::new(
        0x0102_0304,
        Direction::Inbound,
        Encryption::ChaCha20Poly1305,
        &key,
        Integrity::None,
        &[],
    );
    c.mode = Mode::Tunnel {
        src: ip("203.0.113.153"),
        dst: ip("203.0.113.5"),
    };
    let mut rx = Sa::new(&c).unwrap();
    let payload = hex(
        "10 11 12 13 14 15 16 17 24 03 94 28 b9 7f 41 7e 3c 13 75 3a 4f 05 08 7b 67 c3 52 e6
         a7 fa b1 b9 82 d4 66 ef 40 7a e5 c6 14 ee 80 99 d5 28 44 eb 61 aa 95 df ab 4c 02 f7
         2a a7 1e 7c 4c 4f 64 c9 be fe 2f ac c6 38 e8 f3 cb ec 16 3f ac 46 9b 50 27 73 f6 fb
         94 e6 64 da 91 65 b8 28 29 f6 41 e0 76 aa a8 26 6b 7f b0 f7 b1 1b 36 99 07 e1 ad 43",
    );
    let inner = hex(
        "45 00 00 54 a6 f2 00 00 40 01 e7 78 c6 33 64 05 c0 00 02 05 08 00 5b 7a 3a 08 00 00
         55 3b ec 10 00 07 36 27 08 09 0a 0b 0c 0d 0e 0f 10 11 12 13 14 15 16 17 18 19 1a 1b
         1c 1d 1e 1f 20 21 22 23 24 25 26 27 28 29 2a 2b 2c 2d 2e 2f 30 31 32 33 34 35 36 37",
    );
    let total = 20 + 8 + payload.len();
    let mut pkt = vec![
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        0,
        0,
        0,
        64,
        50,
        0,
        0,
        203,
        0,
        113,
        153,
        203,
        0,
        113,
        5,
        1,
        2,
        3,
        4,
        0,
        0,
        0,
        5,
    ];
    pkt.extend_from_slice(&payload);
    let mut buf = framed(&pkt, 0);
    let i = decrypt(&mut rx, &mut buf, HEADROOM, total).unwrap();
    assert_eq!(i.next_header, 4);
    assert_eq!(&buf[i.start..i.start + i.len], &inner[..]);
    assert_eq!(rx.counters().packets, 1);
    // Once only.
    let mut buf = framed(&pkt, 0);
    assert_eq!(
        decrypt(&mut rx, &mut buf, HEADROOM, total),
        Err(EspError::Replayed)
    );
    assert_eq!(rx.counters().replayed(), 1);
}

/// Every algorithm, mode, inner family, ESN and NAT-T, at several sizes; the outer header
/// checked field by field.
#[test]
fn round_trips() {
    for alg in ALGS {
        for mode in modes() {
            for esn in [false, true] {
                for natt in [false, true] {
                    let (mut tx, mut rx) = pair(alg, mode, esn, natt);
                    for (n, len) in [0usize, 1, 2, 3, 13, 14, 15, 16, 100, 1400]
                        .iter()
                        .enumerate()
                    {
                        let payload: Vec<u8> = (0..*len).map(|i| (i * 31 + n) as u8).collect();
                        for pkt in [udp4(&payload, 0xb8 | 2), udp6(&payload, 0x28 | 1)] {
                            let what = format!(
                                "{alg:?} {mode:?} esn {esn} natt {natt} len {len} v{}",
                                pkt[0] >> 4
                            );
                            let mut buf = framed(&pkt, 64);
                            let (s, l) =
                                encrypt(&mut tx, &mut buf, HEADROOM, pkt.len()).expect(&what);
                            check_outer(&tx, &buf[s..s + l], &pkt, natt, &what);
                            let i = decrypt(&mut rx, &mut buf, s, l).expect(&what);
                            assert_eq!(&buf[i.start..i.start + i.len], &pkt[..], "{what}");
                            let nh = match (mode, pkt[0] >> 4) {
                                (Mode::Transport, _) => 17,
                                (_, 4) => 4,
                                _ => 41,
                            };
                            assert_eq!(i.next_header, nh, "{what}");
                        }
                    }
                    assert_eq!(tx.counters().packets, 20);
                    assert_eq!(rx.counters().packets, 20);
                    assert!(rx.counters().errors().is_empty());
                }
            }
        }
    }
}

fn check_outer(sa: &Sa, out: &[u8], inner: &[u8], natt: bool, what: &str) {
    let v6 = out[0] >> 4 == 6;
    let (hl, proto) = if v6 { (40, out[6]) } else { (20, out[9]) };
    assert_eq!(proto, if natt { 17 } else { 50 }, "{what}");
    if v6 {
        assert_eq!(
            usize::from(u16::from_be_bytes([out[4], out[5]])) + 40,
            out.len(),
            "{what}"
        );
    } else {
        assert_eq!(
            usize::from(u16::from_be_bytes([out[2], out[3]])),
            out.len(),
            "{what}"
        );
        assert_eq!(checksum(&out[..20]), 0, "{what}: IPv4 header checksum");
    }
    let esp = if natt {
        let u = &out[hl..];
        assert_eq!(u16::from_be_bytes([u[0], u[1]]), 4500);
        assert_eq!(u16::from_be_bytes([u[2], u[3]]), 4500);
        assert_eq!(
            usize::from(u16::from_be_bytes([u[4], u[5]])),
            out.len() - hl
        );
        if v6 {
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s.copy_from_slice(&out[8..24]);
            d.copy_from_slice(&out[24..40]);
            let c = !fold(pseudo_v6(&s, &d, 17, (out.len() - hl) as u32) + sum(u));
            assert_eq!(c, 0, "{what}: UDP checksum");
        } else {
            assert_eq!(&u[6..8], &[0, 0], "{what}: IPv4 NAT-T checksum 0");
        }
        &out[hl + 8..]
    } else {
        &out[hl..]
    };
    assert_eq!(&esp[..4], &sa.spi().to_be_bytes());
    assert_eq!(
        u32::from_be_bytes([esp[4], esp[5], esp[6], esp[7]]),
        sa.sequence() as u32
    );
    let t = &sa.transform;
    assert_eq!(
        (esp.len() - 8 - t.iv_len() - t.icv_len()) % t.align(),
        0,
        "{what}: alignment"
    );
    if sa.tunnel.is_some() {
        let (itos, iv6) = if inner[0] >> 4 == 6 {
            ((inner[0] << 4) | (inner[1] >> 4), true)
        } else {
            (inner[1], false)
        };
        let otos = if v6 {
            (out[0] << 4) | (out[1] >> 4)
        } else {
            out[1]
        };
        assert_eq!(otos, itos, "{what}: DSCP and ECN copied");
        if v6 {
            assert_eq!(out[7], 64);
        } else {
            assert_eq!(out[8], 64);
            // DF copied from the inner IPv4 (set there), set for inner IPv6.
            assert_eq!(out[6] & 0x40, 0x40, "{what}: DF {iv6}");
        }
    }
}

#[test]
fn padding_is_monotonic_and_checked() {
    let alg = (Encryption::Null, Integrity::None);
    let (mut tx, mut rx) = pair(alg, Mode::Transport, false, false);
    // Payload 8 (UDP header) + 5 bytes: 13 + 2 = 15, padded to 16 with one byte.
    let pkt = udp4(&[1, 2, 3, 4, 5], 0);
    let mut buf = framed(&pkt, 64);
    let (s, l) = encrypt(&mut tx, &mut buf, HEADROOM, pkt.len()).unwrap();
    let trailer = &buf[s + l - 3..s + l];
    assert_eq!(trailer, &[1, 1, 17], "pad 1, pad length 1, next header UDP");
    // (NULL without integrity: the bytes can be changed without the ICV noticing.) An
    // authenticated packet moves the replay window before its padding is checked
    // (RFC 4303 §3.4.3), so each try uses a fresh receiver.
    let mut bad = buf.clone();
    bad[s + l - 3] = 7;
    assert_eq!(decrypt(&mut rx, &mut bad, s, l), Err(EspError::BadPadding));
    let mut bad = buf.clone();
    bad[s + l - 2] = 200;
    let (_, mut rx2) = pair(alg, Mode::Transport, false, false);
    assert_eq!(decrypt(&mut rx2, &mut bad, s, l), Err(EspError::BadPadding));
    assert_eq!(rx.counters().other(), 1);
    let (_, mut rx) = pair(alg, Mode::Transport, false, false);
    decrypt(&mut rx, &mut buf, s, l).unwrap();
    // CBC pads to 16.
    let (mut tx, _) = pair(
        (Encryption::AesCbc128, Integrity::HmacSha1_96),
        Mode::Transport,
        false,
        false,
    );
    let mut buf = framed(&pkt, 64);
    let (_, l) = encrypt(&mut tx, &mut buf, HEADROOM, pkt.len()).unwrap();
    assert_eq!((l - 20 - 8 - 16 - 12) % 16, 0);
}

#[test]
fn dummy_packets_are_reported() {
    let (mut tx, mut rx) = pair(
        (Encryption::AesGcm128, Integrity::None),
        Mode::Transport,
        false,
        false,
    );
    // An IPv6 packet with next header 59 and no payload: transport mode makes it a dummy.
    let mut pkt = udp6(&[], 0);
    pkt[6] = 59;
    pkt.truncate(40);
    pkt[4..6].copy_from_slice(&[0, 0]);
    let mut buf = framed(&pkt, 64);
    let (s, l) = encrypt(&mut tx, &mut buf, HEADROOM, pkt.len()).unwrap();
    assert_eq!(decrypt(&mut rx, &mut buf, s, l), Err(EspError::Dummy));
    assert!(EspError::Dummy.is_silent());
    // Not a refusal: the node counts it as a silent drop.
    assert_eq!(rx.counters().other(), 0);
}

#[test]
fn sequence_overflow_without_esn_and_roll_with_it() {
    let alg = (Encryption::AesGcm128, Integrity::None);
    let (mut tx, _) = pair(alg, Mode::Transport, false, false);
    tx.set_sequence(u64::from(u32::MAX) - 1);
    let pkt = udp4(b"x", 0);
    let mut buf = framed(&pkt, 64);
    assert!(encrypt(&mut tx, &mut buf, HEADROOM, pkt.len()).is_ok());
    let mut buf = framed(&pkt, 64);
    assert_eq!(
        encrypt(&mut tx, &mut buf, HEADROOM, pkt.len()),
        Err(EspError::SequenceOverflow)
    );
    assert_eq!(&buf[HEADROOM..HEADROOM + pkt.len()], &pkt[..], "untouched");
    assert_eq!(tx.counters().sequence_overflow(), 1);

    // With ESN the counter crosses 2^32 and the receiver follows.
    let (mut tx, mut rx) = pair(alg, Mode::Transport, true, false);
    tx.set_sequence(u64::from(u32::MAX) - 3);
    for _ in 0..8 {
        let mut buf = framed(&pkt, 64);
        let (s, l) = encrypt(&mut tx, &mut buf, HEADROOM, pkt.len()).unwrap();
        // The receiver starts where a long-lived SA would be.
        if rx.sequence() == 0 {
            if let State::In { replay } = &mut rx.state {
                replay.update(tx.sequence() - 1);
            }
        }
        decrypt(&mut rx, &mut buf, s, l).unwrap();
    }
    assert_eq!(tx.sequence(), (1 << 32) + 4);
    assert_eq!(rx.sequence(), tx.sequence());
}

#[test]
fn replay_and_reorder() {
    let (mut tx, mut rx) = pair(
        (Encryption::ChaCha20Poly1305, Integrity::None),
        Mode::Transport,
        false,
        false,
    );
    let pkt = udp4(b"hello", 0);
    let mut sealed = Vec::new();
    for _ in 0..2000 {
        let mut buf = framed(&pkt, 64);
        let (s, l) = encrypt(&mut tx, &mut buf, HEADROOM, pkt.len()).unwrap();
        sealed.push((buf, s, l));
    }
    // 2000 first, then 1000 (inside the 1024 window), 976 (outside), 1500 twice.
    let rx_one = |rx: &mut Sa, i: usize| {
        let (mut b, s, l) = sealed[i - 1].clone();
        decrypt(rx, &mut b, s, l).map(|_| ())
    };
    assert_eq!(rx_one(&mut rx, 2000), Ok(()));
    assert_eq!(
        rx_one(&mut rx, 1000),
        Ok(()),
        "1000 behind: inside the window"
    );
    assert_eq!(
        rx_one(&mut rx, 976),
        Err(EspError::Replayed),
        "1024 behind: outside"
    );
    assert_eq!(rx_one(&mut rx, 1500), Ok(()));
    assert_eq!(rx_one(&mut rx, 1500), Err(EspError::Replayed));
    assert_eq!(rx.counters().replayed(), 2);
    // A corrupted packet does not move the window: the genuine one is accepted after it.
    let (mut b, s, l) = sealed[1999 - 10].clone();
    b[l + s - 1] ^= 0x80;
    assert_eq!(
        decrypt(&mut rx, &mut b, s, l),
        Err(EspError::IntegrityFailed)
    );
    assert_eq!(rx_one(&mut rx, 1990), Ok(()));
}

#[test]
fn no_room_and_bad_inner() {
    let (mut tx, _) = pair(
        (Encryption::AesCbc128, Integrity::HmacSha1_96),
        modes()[1],
        false,
        true,
    );
    let pkt = udp4(&[0u8; 64], 0);
    // No headroom.
    let mut buf = pkt.clone();
    buf.extend_from_slice(&[0; 64]);
    assert_eq!(
        encrypt(&mut tx, &mut buf, 0, pkt.len()),
        Err(EspError::TooBig)
    );
    // No tailroom.
    let mut buf = framed(&pkt, 10);
    assert_eq!(
        encrypt(&mut tx, &mut buf, HEADROOM, pkt.len()),
        Err(EspError::TooBig)
    );
    assert_eq!(&buf[HEADROOM..HEADROOM + pkt.len()], &pkt[..]);
    // Exactly max_overhead is enough.
    let room = tx.max_overhead();
    let mut buf = vec![0u8; room + pkt.len()];
    let front = 20 + 8 + 8 + 16;
    buf[front..front + pkt.len()].copy_from_slice(&pkt);
    assert!(encrypt(&mut tx, &mut buf, front, pkt.len()).is_ok());
    // Not IP, too short, span outside the buffer.
    let mut buf = framed(&[0x55; 40], 64);
    assert_eq!(
        encrypt(&mut tx, &mut buf, HEADROOM, 40),
        Err(EspError::BadInner)
    );
    assert_eq!(
        encrypt(&mut tx, &mut buf, HEADROOM, 10),
        Err(EspError::BadInner)
    );
    assert_eq!(
        encrypt(&mut tx, &mut buf, HEADROOM, 1000),
        Err(EspError::BadInner)
    );
    // Two too big, three bad inner packets.
    assert_eq!(tx.counters().other(), 5);
}

#[test]
fn ecn_on_decapsulation() {
    // RFC 6040 §4.2 with the outer ECN changed in flight (as a congested router would).
    let cases = [
        // (inner, outer, result)
        (0u8, 3u8, Err(EspError::EcnDrop)),
        (2, 3, Ok(3)),
        (1, 3, Ok(3)),
        (2, 1, Ok(1)),
        (1, 2, Ok(1)),
        (0, 0, Ok(0)),
    ];
    for (inner, outer, want) in cases {
        for mode in &modes()[1..] {
            let (mut tx, mut rx) = pair(
                (Encryption::AesGcm128, Integrity::None),
                *mode,
                false,
                false,
            );
            for pkt in [udp4(b"ecn", 0x20 | inner), udp6(b"ecn", 0x20 | inner)] {
                let mut buf = framed(&pkt, 64);
                let (s, l) = encrypt(&mut tx, &mut buf, HEADROOM, pkt.len()).unwrap();
                if buf[s] >> 4 == 4 {
                    buf[s + 1] = (buf[s + 1] & !3) | outer;
                } else {
                    buf[s + 1] = (buf[s + 1] & !0x30) | outer << 4;
                }
                let r = decrypt(&mut rx, &mut buf, s, l);
                match want {
                    Err(e) => assert_eq!(r, Err(e)),
                    Ok(ecn) => {
                        let i = r.unwrap();
                        let p = &buf[i.start..i.start + i.len];
                        if p[0] >> 4 == 4 {
                            assert_eq!(p[1], 0x20 | ecn);
                            assert_eq!(checksum(&p[..20]), 0, "checksum updated");
                        } else {
                            assert_eq!((p[1] >> 4) & 3, ecn);
                            assert_eq!(p[0] & 0xf, 0x2, "DSCP kept");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn df_policy() {
    for (df, inner_df, want) in [
        (Df::Copy, true, true),
        (Df::Copy, false, false),
        (Df::Set, false, true),
        (Df::Clear, true, false),
    ] {
        let mut c = SaConfig::new(
            0x1000,
            Direction::Outbound,
            Encryption::Null,
            &[],
            Integrity::None,
            &[],
        );
        c.mode = modes()[1];
        c.df = df;
        let mut tx = Sa::new(&c).unwrap();
        let mut pkt = udp4(b"df", 0);
        if !inner_df {
            pkt[6] = 0;
        }
        let mut buf = framed(&pkt, 64);
        let (s, _) = encrypt(&mut tx, &mut buf, HEADROOM, pkt.len()).unwrap();
        assert_eq!(buf[s + 6] & 0x40 != 0, want, "{df:?}");
        // The identification counts up per SA.
        let (s2, _) = {
            let mut b = framed(&pkt, 64);
            let r = encrypt(&mut tx, &mut b, HEADROOM, pkt.len()).unwrap();
            assert_eq!(u16::from_be_bytes([b[r.0 + 4], b[r.0 + 5]]), 1);
            r
        };
        let _ = s2;
    }
}

#[test]
fn natt_keepalive_and_non_esp() {
    assert_eq!(classify_udp(&[0xff]), UdpPayload::Keepalive);
    assert_eq!(classify_udp(&[0, 0, 0, 0, 1, 2]), UdpPayload::NonEsp);
    assert_eq!(classify_udp(&[0, 0, 1, 0, 1, 2, 3, 4]), UdpPayload::Esp);
    let (_, mut rx) = pair(
        (Encryption::AesGcm128, Integrity::None),
        Mode::Transport,
        false,
        true,
    );
    let mut ka = udp4(&[0xff], 0);
    ka[20..24].copy_from_slice(&[0x11, 0x94, 0x11, 0x94]);
    let mut buf = framed(&ka, 0);
    assert_eq!(
        decrypt(&mut rx, &mut buf, HEADROOM, ka.len()),
        Err(EspError::NatKeepalive)
    );
    let mut ike = udp4(&[0, 0, 0, 0, 9, 9, 9, 9], 0);
    ike[20..24].copy_from_slice(&[0x11, 0x94, 0x11, 0x94]);
    let mut buf = framed(&ike, 0);
    assert_eq!(
        decrypt(&mut rx, &mut buf, HEADROOM, ike.len()),
        Err(EspError::NonEsp)
    );
    // Plain ESP on a NAT-T SA, and UDP on a plain one, are not what the SA expects.
    let (mut tx, _) = pair(
        (Encryption::AesGcm128, Integrity::None),
        Mode::Transport,
        false,
        false,
    );
    let pkt = udp4(b"x", 0);
    let mut buf = framed(&pkt, 64);
    let (s, l) = encrypt(&mut tx, &mut buf, HEADROOM, pkt.len()).unwrap();
    assert_eq!(decrypt(&mut rx, &mut buf, s, l), Err(EspError::BadOuter));
}

#[test]
fn wrong_direction_and_spi() {
    let (mut tx, mut rx) = pair(
        (Encryption::AesGcm128, Integrity::None),
        Mode::Transport,
        false,
        false,
    );
    let pkt = udp4(b"x", 0);
    let mut buf = framed(&pkt, 64);
    assert_eq!(
        encrypt(&mut rx, &mut buf, HEADROOM, pkt.len()),
        Err(EspError::WrongDirection)
    );
    let (s, l) = encrypt(&mut tx, &mut buf, HEADROOM, pkt.len()).unwrap();
    assert_eq!(
        decrypt(&mut tx, &mut buf, s, l),
        Err(EspError::WrongDirection)
    );
    buf[s + 20] ^= 1;
    assert_eq!(decrypt(&mut rx, &mut buf, s, l), Err(EspError::SpiMismatch));
}

#[test]
fn ipv6_transport_keeps_hop_by_hop_in_the_clear() {
    let (mut tx, mut rx) = pair(
        (Encryption::AesGcm256, Integrity::None),
        Mode::Transport,
        false,
        false,
    );
    let base = udp6(b"payload", 0);
    // Insert an 8-byte hop-by-hop header (PadN) after the fixed header.
    let mut pkt = base[..40].to_vec();
    pkt[6] = 0;
    pkt.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
    pkt.extend_from_slice(&base[40..]);
    let plen = (pkt.len() - 40) as u16;
    pkt[4..6].copy_from_slice(&plen.to_be_bytes());
    let mut buf = framed(&pkt, 64);
    let (s, l) = encrypt(&mut tx, &mut buf, HEADROOM, pkt.len()).unwrap();
    assert_eq!(buf[s + 6], 0, "still hop-by-hop first");
    assert_eq!(buf[s + 40], 50, "then ESP");
    let i = decrypt(&mut rx, &mut buf, s, l).unwrap();
    assert_eq!(&buf[i.start..i.start + i.len], &pkt[..]);
}

#[test]
fn batches() {
    let (mut tx, mut rx) = pair(
        (Encryption::AesGcm128, Integrity::None),
        modes()[2],
        true,
        false,
    );
    let pkts: Vec<Vec<u8>> = (0..32)
        .map(|i| udp4(&vec![i as u8; 10 + i * 40], 0))
        .collect();
    let mut bufs: Vec<Vec<u8>> = pkts.iter().map(|p| framed(p, 64)).collect();
    // One packet without headroom fails alone.
    bufs[5].drain(..HEADROOM);
    let mut batch: Vec<Packet<'_>> = bufs
        .iter_mut()
        .zip(&pkts)
        .enumerate()
        .map(|(i, (b, p))| Packet::new(b, if i == 5 { 0 } else { HEADROOM }, p.len()))
        .collect();
    assert_eq!(encrypt_batch(&mut tx, &mut batch), 31);
    assert_eq!(batch[5].result, Err(EspError::TooBig));
    assert_eq!(tx.counters().packets, 31);
    let mut batch: Vec<Packet<'_>> = batch.into_iter().filter(|p| p.result.is_ok()).collect();
    assert_eq!(decrypt_batch(&mut rx, &mut batch), 31);
    for p in &batch {
        assert_eq!(p.next_header, 4);
        assert!(pkts
            .iter()
            .any(|q| p.buf[p.start..p.start + p.len] == q[..]));
    }
    assert_eq!(rx.counters().bytes, tx.counters().bytes);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// decrypt(encrypt(p)) == p; any single flipped bit of what ESP protects or reads, and
    /// any truncation, is an error (never a panic).
    #[test]
    fn corruption_is_refused(
        a in 0usize..ALGS.len() - 1, // not NULL/NULL, which protects nothing
        m in 0usize..3, esn: bool, natt: bool, v6: bool,
        payload in prop::collection::vec(any::<u8>(), 0..300),
        at in any::<prop::sample::Index>(), bit in 0u8..8, cut in any::<prop::sample::Index>(),
    ) {
        let (mut tx, _) = pair(ALGS[a], modes()[m], esn, natt);
        let pkt = if v6 { udp6(&payload, 0) } else { udp4(&payload, 0) };
        let mut buf = framed(&pkt, 64);
        let (s, l) = encrypt(&mut tx, &mut buf, HEADROOM, pkt.len()).unwrap();
        let sealed = buf.clone();
        let (_, mut rx) = pair(ALGS[a], modes()[m], esn, natt);
        let i = decrypt(&mut rx, &mut buf, s, l).unwrap();
        prop_assert_eq!(&buf[i.start..i.start + i.len], &pkt[..]);

        // What ESP reads: from the ESP header (or the UDP length) on, and the outer
        // header's version, length, fragment and protocol fields.
        let outer_v6 = sealed[s] >> 4 == 6;
        let hl = if m == 0 { if v6 { 40 } else { 20 } } else if outer_v6 { 40 } else { 20 };
        let udp = if natt { 8 } else { 0 };
        let off = at.index(l);
        let read = off >= hl + udp
            || natt && (off == hl + 4 || off == hl + 5)
            || if outer_v6 {
                matches!(off, 4..=6) || off == 0 && bit >= 4 // version, not traffic class
            } else {
                matches!(off, 0 | 2 | 3 | 7 | 9) || off == 6 && bit < 6 // MF and offset, not DF
            };
        if read {
            let mut b = sealed.clone();
            b[s + off] ^= 1 << bit;
            let (_, mut rx) = pair(ALGS[a], modes()[m], esn, natt);
            let r = decrypt(&mut rx, &mut b, s, l);
            prop_assert!(r.is_err(), "bit {} of byte {} of {} flipped: accepted", bit, off, l);
        }
        let n = cut.index(l);
        let mut b = sealed.clone();
        let (_, mut rx) = pair(ALGS[a], modes()[m], esn, natt);
        prop_assert!(decrypt(&mut rx, &mut b, s, n).is_err());
    }
}
