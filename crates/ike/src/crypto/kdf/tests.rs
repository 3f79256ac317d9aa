use super::*;
use crate::crypto::testing::hex;
use crate::crypto::{psk_auth, signed_octets};

// NIST's IKEv2 KDF sample (SP 800-135 component test, SHA-256), as NSS's gtests carry it
// (ike-sha256-vectors.h, "these vectors are from this NIST samples").
const NI: &str = "3f302be1abcb28e1";
const NR: &str = "8c332ee006064c9b";
const SPI_I: u64 = 0x40dac39e1e1a8640;
const SPI_R: u64 = 0x8619a1cf9a6e4c07;
const G_IR: &str = "0f4d257d7a58fc4545c7d7a88119eee5d5c9690c5b4c989171d3abbfd99d1d29";
const SKEYSEED: &str = "5f00d1bd2c58ec224b1e6b71fa0f19a1faa7a193952c444411b47c1a9d8ba6fe";
/// prf+(SKEYSEED, Ni | Nr | SPIi | SPIr), 132 bytes.
const DKM: &str = "0b137d669b0947d7d026d593f0305ad401ff0c471357d695778a9c7f4b4869ece98aca531\
                   188d16041b3bb936d2dbb3b4993a6e768a809160de45d0283f273a6cdf6854379e31be72b\
                   8d3d1fa990cf9c5b015ca9f918a7df6253c958114a09d4e1c19bdcd4db14b29d98db1a74a\
                   d405c588662c14a04d0d36aa4ab55e90f8986d12d4aad";
const G_IR_NEW: &str = "25f3b12d6f282739256e39bf54eda53b60ffcf379bb7bcc90c27b4c4c578616c";
/// prf(SK_d, g^ir (new) | Ni | Nr), SK_d being DKM's first 32 bytes.
const SKEYSEED_REKEY: &str = "2d63f6debc92048b4fef3889c4c99ca67d6496e0fac14a2bca9a2d6566ff2398";

const P: Prf = Prf::HmacSha256;

fn gcm128() -> IkeSuite {
    IkeSuite {
        encr: Encr::AesGcm16 { key_bits: 128 },
        integ: None,
        prf: P,
        dh: Dh::Curve25519,
    }
}

#[test]
fn skeyseed_and_prf_plus_match_nist() {
    let (ni, nr) = (hex(NI), hex(NR));
    assert_eq!(
        *prf(P, &[&ni[..], &nr].concat(), &[&hex(G_IR)]),
        hex(SKEYSEED)
    );
    let (si, sr) = (SPI_I.to_be_bytes(), SPI_R.to_be_bytes());
    let seed: [&[u8]; 4] = [&ni, &nr, &si, &sr];
    let dkm = hex(DKM);
    for len in [132, 32, 15, 0] {
        assert_eq!(
            *prf_plus(P, &hex(SKEYSEED), &seed, len).unwrap(),
            dkm[..len]
        );
    }
    // The seed in other parts gives the same.
    let whole = [&ni[..], &nr, &si, &sr].concat();
    assert_eq!(*prf_plus(P, &hex(SKEYSEED), &[&whole], 132).unwrap(), dkm);
}

#[test]
fn ike_keys_match_nist() {
    let k = IkeKeys::derive(&gcm128(), &hex(G_IR), &hex(NI), &hex(NR), SPI_I, SPI_R).unwrap();
    let dkm = hex(DKM);
    assert_eq!(*k.sk_d, dkm[..32]);
    assert!(k.sk_ai.is_empty() && k.sk_ar.is_empty());
    // AES-GCM-128: 16-byte key and 4-byte salt.
    assert_eq!(*k.sk_ei, dkm[32..52]);
    assert_eq!(*k.sk_er, dkm[52..72]);
    assert_eq!(*k.sk_pi, dkm[72..104]);
    assert_eq!(k.sk_pr[..28], dkm[104..132]);
    assert_eq!(k.sk_pr.len(), 32);
}

#[test]
fn rekey_matches_nist() {
    let old_sk_d = &hex(DKM)[..32];
    let (ni, nr) = (hex(NI), hex(NR));
    assert_eq!(
        *prf(P, old_sk_d, &[&hex(G_IR_NEW), &ni, &nr]),
        hex(SKEYSEED_REKEY)
    );
    // The new SA's keys are prf+ of that SKEYSEED with the new SPIs.
    let s = IkeSuite {
        encr: Encr::AesCbc { key_bits: 256 },
        integ: Some(Integ::HmacSha256_128),
        prf: Prf::HmacSha384,
        dh: Dh::Ecp256,
    };
    let k = IkeKeys::rekey(&s, P, old_sk_d, &hex(G_IR_NEW), &ni, &nr, 7, 9).unwrap();
    let km = prf_plus(
        Prf::HmacSha384,
        &hex(SKEYSEED_REKEY),
        &[&ni, &nr, &7u64.to_be_bytes(), &9u64.to_be_bytes()],
        3 * 48 + 2 * 32 + 2 * 32,
    )
    .unwrap();
    let parts = [
        &k.sk_d, &k.sk_ai, &k.sk_ar, &k.sk_ei, &k.sk_er, &k.sk_pi, &k.sk_pr,
    ];
    let lens: Vec<usize> = parts.iter().map(|p| p.len()).collect();
    assert_eq!(lens, [48, 32, 32, 32, 32, 48, 48]);
    assert_eq!(
        parts
            .iter()
            .flat_map(|p| p.iter().copied())
            .collect::<Vec<u8>>(),
        *km
    );
}

#[test]
fn prf_plus_stops_at_255_blocks() {
    for p in [Prf::HmacSha256, Prf::HmacSha384, Prf::HmacSha512] {
        let max = 255 * p.out_len();
        assert_eq!(prf_plus(p, b"k", &[b"s"], max).unwrap().len(), max);
        let e = prf_plus(p, b"k", &[b"s"], max + 1).unwrap_err();
        assert_eq!(
            e,
            CryptoError::PrfPlusTooLong {
                prf: p,
                len: max + 1,
                max
            }
        );
    }
}

#[test]
fn suites_that_cannot_be_are_refused() {
    let g = [1u8; 32];
    let mut s = gcm128();
    s.integ = Some(Integ::HmacSha256_128);
    let e = IkeKeys::derive(&s, &g, b"ni", b"nr", 1, 2).unwrap_err();
    assert!(matches!(e, CryptoError::IntegMismatch { .. }), "{e}");
    s.encr = Encr::AesCbc { key_bits: 128 };
    s.integ = None;
    assert!(IkeKeys::derive(&s, &g, b"ni", b"nr", 1, 2).is_err());
    s.encr = Encr::AesGcm16 { key_bits: 192 };
    let e = IkeKeys::derive(&s, &g, b"ni", b"nr", 1, 2).unwrap_err();
    assert_eq!(e, CryptoError::UnsupportedEncr(s.encr));
}

#[test]
fn child_keymat_is_split_initiator_first() {
    let sk_d = [9u8; 32];
    let (ni, nr, g) = (b"nonce-i".as_slice(), b"nonce-r".as_slice(), [5u8; 32]);
    let (e, a) = (Encr::AesCbc { key_bits: 128 }, Some(Integ::HmacSha256_128));
    let k = child_keys(P, &sk_d, None, ni, nr, e, a).unwrap();
    let km = prf_plus(P, &sk_d, &[ni, nr], 2 * (16 + 32)).unwrap();
    assert_eq!(*k.encr_i, km[..16]);
    assert_eq!(*k.integ_i, km[16..48]);
    assert_eq!(*k.encr_r, km[48..64]);
    assert_eq!(*k.integ_r, km[64..96]);
    // With PFS, g^ir comes first in the seed.
    let e = Encr::AesGcm16 { key_bits: 256 };
    let k = child_keys(P, &sk_d, Some(&g), ni, nr, e, None).unwrap();
    let km = prf_plus(P, &sk_d, &[&g, ni, nr], 2 * 36).unwrap();
    assert_eq!(*k.encr_i, km[..36]);
    assert_eq!(*k.encr_r, km[36..]);
    assert!(k.integ_i.is_empty() && k.integ_r.is_empty());
}

// Computed with Python's hmac and hashlib: prf(prf(psk, "Key Pad for IKEv2"), octets),
// octets = "first message" | "peer nonce" | HMAC-SHA256("sk_p" * 8, 02 000000 "ike.example").
#[test]
fn psk_auth_and_signed_octets() {
    let so = signed_octets(
        P,
        b"first message",
        b"peer nonce",
        &b"sk_p".repeat(8),
        b"\x02\0\0\0ike.example",
    );
    assert_eq!(
        so,
        hex(
            "6669727374206d65737361676570656572206e6f6e6365fb85d3c4e5c70d493cc490653eaba826e1\
             60a9ad149ff3dcd86196bc592d24b9"
        )
    );
    assert_eq!(
        *psk_auth(P, b"ferrouter test psk", &so),
        hex("fc57cd8c5ef260d2c2d450d2ec58ba2af63634232f31bb869753091808d72dff")
    );
    assert_eq!(
        *psk_auth(Prf::HmacSha384, b"ferrouter test psk", &so),
        hex(
            "08f1871a5c02d81fde7c18088d2d8a7cc3dad9e9d6c73f60c110db19017e7b72fa6aa3f8aa135f54\
             2c790c129b0dbc5a"
        )
    );
}
