//! The body of the `esp_decrypt` fuzz target (fuzz/fuzz_targets/esp_decrypt.rs), also run
//! on every test run by a stable proptest harness (tests/fuzz_decrypt.rs).

use crate::sa::{Direction, Encryption, Integrity, Mode, NatT, Sa, SaConfig};
use crate::{decrypt, encrypt};

/// Headroom in front of a packet, as the data plane leaves it.
const HEADROOM: usize = 128;
const SPI: u32 = 0x0000_4242;

/// The fixed SAs: `pick` selects the algorithm, mode, ESN and NAT-T.
fn config(pick: u8, direction: Direction) -> SaConfig {
    let (enc, integ) = match pick % 5 {
        0 => (Encryption::AesGcm128, Integrity::None),
        1 => (Encryption::ChaCha20Poly1305, Integrity::None),
        2 => (Encryption::AesCbc128, Integrity::HmacSha1_96),
        3 => (Encryption::AesCbc256, Integrity::HmacSha512_256),
        _ => (Encryption::Null, Integrity::HmacSha256_128),
    };
    let ek: Vec<u8> = (0..enc.key_len() as u8).collect();
    let ak: Vec<u8> = (0..integ.key_len() as u8).map(|b| b ^ 0x5a).collect();
    let mut c = SaConfig::new(SPI, direction, enc, &ek, integ, &ak);
    if pick & 8 != 0 {
        c.mode = Mode::Tunnel {
            src: [192, 0, 2, 1].into(),
            dst: [192, 0, 2, 2].into(),
        };
    }
    c.esn = pick & 16 != 0;
    if pick & 32 != 0 {
        c.natt = Some(NatT::default());
    }
    c
}

/// `data`: a byte choosing the SA, a byte choosing where to corrupt, then bytes.
///
/// 1. The bytes are decrypted as a packet: any result but a panic is fine, and a success
///    must point inside the buffer.
/// 2. They are made the payload of an IPv4 UDP packet, encrypted and decrypted: the
///    result must be the packet. With one byte of the ESP packet flipped, or the ESP
///    packet cut short, it must be refused.
///
/// Panics when a property does not hold.
pub fn exercise(data: &[u8]) {
    let (Some(&pick), Some(&at), Some(rest)) = (data.first(), data.get(1), data.get(2..)) else {
        return;
    };
    let Ok(mut rx) = Sa::new(&config(pick, Direction::Inbound)) else {
        panic!("fixed SA refused");
    };
    let mut buf = vec![0u8; HEADROOM + rest.len() + 64];
    buf[HEADROOM..HEADROOM + rest.len()].copy_from_slice(rest);
    if let Ok(i) = decrypt(&mut rx, &mut buf, HEADROOM, rest.len()) {
        assert!(i.start + i.len <= buf.len());
    }

    // A valid packet around the bytes.
    let n = rest.len().min(1400);
    let pkt = crate::testing::udp4(&rest[..n], 0);
    let total = pkt.len();
    let Ok(mut tx) = Sa::new(&config(pick, Direction::Outbound)) else {
        panic!("fixed SA refused");
    };
    let mut buf = vec![0u8; HEADROOM + total + 64];
    buf[HEADROOM..HEADROOM + total].copy_from_slice(&pkt);
    let (s, l) = encrypt(&mut tx, &mut buf, HEADROOM, total).expect("encrypt");
    let sealed = buf.clone();
    let i = decrypt(&mut rx, &mut buf, s, l).expect("decrypt what we encrypted");
    assert_eq!(&buf[i.start..i.start + i.len], &pkt[..], "round trip");

    // Corrupted: a fresh receiver, so a refusal is not just a replay. What ESP does not
    // read is not protected by it and not tested: the outer IPv4 header's TOS, identification,
    // TTL, checksum and addresses, and the UDP ports and checksum.
    let mut rx = Sa::new(&config(pick, Direction::Inbound)).expect("SA");
    let off = usize::from(at) % l;
    let natt = pick & 32 != 0;
    let ignored =
        matches!(off, 1 | 4 | 5 | 8 | 10..=19) || natt && matches!(off, 20..=23 | 26 | 27);
    if !ignored {
        let mut b = sealed.clone();
        b[s + off] ^= 0x01;
        assert!(
            decrypt(&mut rx, &mut b, s, l).is_err(),
            "byte {off} of {l} flipped, accepted (pick {pick})"
        );
    }
    let cut = usize::from(at) % l;
    let mut b = sealed;
    let mut rx = Sa::new(&config(pick, Direction::Inbound)).expect("SA");
    let short = decrypt(&mut rx, &mut b, s, cut);
    assert!(short.is_err(), "cut to {cut} of {l}, accepted");
}
