use super::*;
use proptest::prelude::*;

const INTEGS: [Integ; 4] = [
    Integ::HmacSha1_96,
    Integ::HmacSha256_128,
    Integ::HmacSha384_192,
    Integ::HmacSha512_256,
];

/// Every (encr, integ) pair SK takes.
fn suites() -> Vec<(Encr, Option<Integ>)> {
    let mut v = vec![
        (Encr::AesGcm16 { key_bits: 128 }, None),
        (Encr::AesGcm16 { key_bits: 256 }, None),
        (Encr::ChaCha20Poly1305, None),
    ];
    for key_bits in [128, 192, 256] {
        for i in INTEGS {
            v.push((Encr::AesCbc { key_bits }, Some(i)));
        }
    }
    v
}

/// Keys of the right lengths, different per byte.
fn cipher(encr: Encr, integ: Option<Integ>, seed: u8) -> SkCipher {
    let e: Vec<u8> = (0..encr.keymat_len() as u8).map(|i| i ^ seed).collect();
    let a: Vec<u8> = (0..integ.map_or(0, Integ::key_len) as u8)
        .map(|i| i.wrapping_mul(7) ^ seed)
        .collect();
    SkCipher::new(encr, integ, &e, &a).unwrap()
}

/// An IKE message: the header, a 12-byte payload before SK when `extra`, then the SK
/// (hdr_len 4) or SKF (8) header and `plain`. Returns it and SK's offset.
fn message(plain: &[u8], hdr_len: usize, extra: bool) -> (Vec<u8>, usize) {
    let mut m: Vec<u8> = (0..28u8).collect();
    if extra {
        m.extend_from_slice(&[46, 0, 0, 12, 1, 2, 3, 4, 5, 6, 7, 8]);
    }
    let at = m.len();
    m.extend_from_slice(&[35, 0, 0, 0]);
    if hdr_len == 8 {
        m.extend_from_slice(&[0, 2, 0, 5]);
    }
    m.extend_from_slice(plain);
    (m, at)
}

#[test]
fn round_trips_for_every_suite_sk_and_skf() {
    for (encr, integ) in suites() {
        for hdr_len in [4, 8] {
            for len in [0usize, 1, 15, 16, 17, 31, 100, 1000] {
                let plain: Vec<u8> = (0..len).map(|i| (i * 31) as u8).collect();
                let (mut m, at) = message(&plain, hdr_len, len % 2 == 1);
                let before = m.clone();
                let mut tx = cipher(encr, integ, 0x5a);
                tx.seal(&mut m, at, hdr_len).unwrap();
                let what = format!("{encr:?} {integ:?} hdr {hdr_len} len {len}");
                assert_eq!(m.len(), before.len() + tx.overhead(len), "{what}");
                assert_eq!(m[..24], before[..24], "{what}: untouched before IKE Length");
                assert_eq!(
                    m[28..at + 2],
                    before[28..at + 2],
                    "{what}: untouched before SK"
                );
                assert_eq!(
                    m[at + 4..at + hdr_len],
                    before[at + 4..at + hdr_len],
                    "{what}"
                );
                assert_eq!(
                    u32::from_be_bytes(m[24..28].try_into().unwrap()) as usize,
                    m.len(),
                    "{what}: IKE Length"
                );
                assert_eq!(
                    usize::from(u16::from_be_bytes([m[at + 2], m[at + 3]])),
                    m.len() - at,
                    "{what}: SK Payload Length"
                );
                if let Some(integ) = integ {
                    let ct = m.len() - at - hdr_len - 16 - integ.icv_len();
                    assert_eq!(ct % 16, 0, "{what}: whole blocks");
                    assert!(ct > len, "{what}");
                }
                // A second cipher with the same keys (the receiver) opens it.
                let rx = cipher(encr, integ, 0x5a);
                assert_eq!(*rx.open(&m, at, hdr_len).unwrap(), plain, "{what}");
                // Another key does not.
                let other = cipher(encr, integ, 0x5b);
                assert_eq!(
                    other.open(&m, at, hdr_len).unwrap_err(),
                    CryptoError::Integrity
                );
            }
        }
    }
}

#[test]
fn aead_ivs_count_and_cbc_ivs_differ() {
    for (encr, integ) in suites() {
        let mut tx = cipher(encr, integ, 1);
        let mut ivs = Vec::new();
        for _ in 0..3 {
            let (mut m, at) = message(b"same", 4, false);
            tx.seal(&mut m, at, 4).unwrap();
            let iv_len = if integ.is_some() { 16 } else { 8 };
            ivs.push(m[at + 4..at + 4 + iv_len].to_vec());
        }
        if integ.is_none() {
            let n: Vec<u64> = ivs
                .iter()
                .map(|iv| u64::from_be_bytes(iv[..].try_into().unwrap()))
                .collect();
            assert_eq!(n, [0, 1, 2], "{encr:?}");
        } else {
            assert!(ivs[0] != ivs[1] && ivs[1] != ivs[2], "{encr:?}");
        }
    }
}

#[test]
fn every_flipped_bit_is_caught() {
    for (encr, integ) in suites() {
        for hdr_len in [4, 8] {
            let (mut m, at) = message(b"IDi, AUTH, SA, TSi, TSr", hdr_len, true);
            cipher(encr, integ, 3).seal(&mut m, at, hdr_len).unwrap();
            let rx = cipher(encr, integ, 3);
            for byte in 0..m.len() {
                for bit in 0..8 {
                    let mut bad = m.clone();
                    bad[byte] ^= 1 << bit;
                    let e = rx.open(&bad, at, hdr_len).unwrap_err();
                    if byte == at + 2 || byte == at + 3 {
                        assert!(matches!(e, CryptoError::SkLength { .. }), "{e}");
                    } else {
                        assert_eq!(e, CryptoError::Integrity, "{encr:?} byte {byte} bit {bit}");
                    }
                }
            }
        }
    }
}

#[test]
fn truncated_messages_are_refused() {
    for (encr, integ) in suites() {
        let (mut m, at) = message(b"payloads", 4, false);
        cipher(encr, integ, 4).seal(&mut m, at, 4).unwrap();
        let rx = cipher(encr, integ, 4);
        for len in 0..m.len() {
            let mut t = m[..len].to_vec();
            assert!(rx.open(&t, at, 4).is_err());
            // Also with the SK length fixed up to the truncated length.
            if len >= at + 4 {
                let l = (len - at) as u16;
                t[at + 2..at + 4].copy_from_slice(&l.to_be_bytes());
                let e = rx.open(&t, at, 4).unwrap_err();
                assert!(
                    matches!(e, CryptoError::SkTooShort { .. } | CryptoError::Integrity),
                    "{encr:?} {integ:?} len {len}: {e}"
                );
            }
        }
    }
}

#[test]
fn bad_offsets_and_sizes_are_errors() {
    let mut tx = cipher(Encr::AesGcm16 { key_bits: 128 }, None, 0);
    let (mut m, _) = message(b"x", 4, false);
    assert!(matches!(
        tx.seal(&mut m, 27, 4),
        Err(CryptoError::SkOffset { .. })
    ));
    assert!(matches!(
        tx.seal(&mut m, 28, 60),
        Err(CryptoError::SkOffset { .. })
    ));
    assert!(matches!(
        tx.seal(&mut m, 28, 0),
        Err(CryptoError::SkOffset { .. })
    ));
    assert!(matches!(
        tx.open(&m[..20], 28, 4),
        Err(CryptoError::SkOffset { .. })
    ));
    assert!(matches!(
        tx.open(&m, usize::MAX, 4),
        Err(CryptoError::SkOffset { .. })
    ));
    let (mut big, at) = message(&vec![0; 65535 - 4 - 25 + 1], 4, false);
    assert_eq!(
        tx.seal(&mut big, at, 4).unwrap_err(),
        CryptoError::SkTooLong { len: 65536 }
    );
    let (mut fits, at) = message(&vec![0; 65535 - 4 - 25], 4, false);
    tx.seal(&mut fits, at, 4).unwrap();
    assert_eq!(fits.len() - at, 65535);
}

#[test]
fn keys_of_the_wrong_length_are_refused() {
    let gcm = Encr::AesGcm16 { key_bits: 128 };
    let e = SkCipher::new(gcm, None, &[0; 16], &[]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "SK_e is 16 bytes, 20 expected for AesGcm16 { key_bits: 128 }"
    );
    let cbc = Encr::AesCbc { key_bits: 256 };
    let i = Some(Integ::HmacSha256_128);
    assert!(SkCipher::new(cbc, i, &[0; 32], &[0; 20]).is_err());
    assert!(SkCipher::new(cbc, None, &[0; 32], &[]).is_err());
    assert!(SkCipher::new(gcm, i, &[0; 20], &[0; 32]).is_err());
    assert!(SkCipher::new(Encr::AesCbc { key_bits: 512 }, i, &[0; 64], &[0; 32]).is_err());
}

#[test]
fn authentic_but_badly_padded_content_is_refused() {
    // Sealed by hand with the same key and nonce: content whose Pad Length exceeds it.
    let encr = Encr::AesGcm16 { key_bits: 128 };
    let rx = cipher(encr, None, 9);
    let (mut m, at) = message(&[1, 2, 200], 4, false);
    let start = at + 4;
    m.splice(start..start, [0u8; 8]);
    let len = (m.len() + 16 - at) as u16;
    m[at + 2..at + 4].copy_from_slice(&len.to_be_bytes());
    let total = (m.len() + 16) as u32;
    m[24..28].copy_from_slice(&total.to_be_bytes());
    let (head, data) = m.split_at_mut(start + 8);
    let tag = rx
        .aead_key()
        .unwrap()
        .seal_in_place_separate_tag(rx.nonce(&head[start..]), Aad::from(&head[..start]), data)
        .unwrap();
    m.extend_from_slice(tag.as_ref());
    assert_eq!(
        rx.open(&m, at, 4).unwrap_err(),
        CryptoError::BadPadding {
            pad_len: 200,
            len: 3
        }
    );
}

proptest! {
    /// Arbitrary bytes, offsets and header lengths: an error or inner payloads, never a
    /// panic.
    #[test]
    fn open_never_panics(
        msg in proptest::collection::vec(any::<u8>(), 0..200),
        at in 0usize..80,
        hdr_len in 0usize..10,
        which in 0usize..15,
    ) {
        let (encr, integ) = suites()[which];
        let rx = cipher(encr, integ, 0);
        let _ = rx.open(&msg, at, hdr_len);
    }

    /// A sealed message with random bytes changed is refused.
    #[test]
    fn corrupted_messages_are_refused(
        plain in proptest::collection::vec(any::<u8>(), 0..100),
        edits in proptest::collection::vec((any::<usize>(), 1u8..=255), 1..4),
        which in 0usize..15,
    ) {
        let (encr, integ) = suites()[which];
        let (mut m, at) = message(&plain, 4, false);
        cipher(encr, integ, 1).seal(&mut m, at, 4).unwrap();
        for (i, x) in edits {
            let i = i % m.len();
            m[i] ^= x;
        }
        prop_assert!(cipher(encr, integ, 1).open(&m, at, 4).is_err());
    }
}
