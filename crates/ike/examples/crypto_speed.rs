//! What IKE's crypto costs per operation on this machine, single-threaded: the key
//! exchanges, the key derivation, SK sealing and opening, and certificate AUTH. For the
//! responder's budget per tunnel (issue 27 targets); not a test, no limits.
//!
//! `cargo run -p ike --example crypto_speed` (the dev profile is optimised).

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use ike::crypto::{
    child_keys, digital_signature_auth, psk_auth, read_certificates, signed_octets, verify,
    verify_auth, IkeKeys, IkeSuite, KeyShare, PrivateKey, SkCipher, AUTH_DIGITAL_SIGNATURE,
};
use ike::transform::{Dh, Encr, Prf};

/// Runs `f` for about half a second; prints and returns microseconds per call.
fn time(what: &str, mut f: impl FnMut()) -> f64 {
    f();
    let start = Instant::now();
    let mut n = 0u32;
    while start.elapsed() < Duration::from_millis(500) {
        f();
        n += 1;
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / f64::from(n);
    println!("{what:<48} {us:>9.1} us");
    us
}

fn main() {
    for g in [Dh::Curve25519, Dh::Ecp256, Dh::Ecp384, Dh::Modp2048] {
        let peer = KeyShare::generate(g).unwrap();
        time(&format!("group {}: generate + agree", g.id()), || {
            let k = KeyShare::generate(g).unwrap();
            k.agree(peer.public()).unwrap();
        });
    }
    let suite = IkeSuite {
        encr: Encr::AesGcm16 { key_bits: 256 },
        integ: None,
        prf: Prf::HmacSha256,
        dh: Dh::Curve25519,
    };
    let (g, ni, nr) = ([7u8; 32], [1u8; 32], [2u8; 32]);
    time("IKE SA keys + child keys (AES-GCM-256, SHA-256)", || {
        let k = IkeKeys::derive(&suite, &g, &ni, &nr, 1, 2).unwrap();
        child_keys(suite.prf, &k.sk_d, None, &ni, &nr, suite.encr, None).unwrap();
    });
    let k = IkeKeys::derive(&suite, &g, &ni, &nr, 1, 2).unwrap();
    let mut tx = SkCipher::new(suite.encr, None, &k.sk_ei, &k.sk_ai).unwrap();
    let rx = SkCipher::new(suite.encr, None, &k.sk_ei, &k.sk_ai).unwrap();
    let mut template = vec![0u8; 28];
    template.extend_from_slice(&[35, 0, 0, 0]);
    template.extend_from_slice(&[0u8; 300]);
    time("SK seal + open, 300-byte IKE_AUTH content", || {
        let mut m = template.clone();
        tx.seal(&mut m, 28, 4).unwrap();
        rx.open(&m, 28, 4).unwrap();
    });
    let so = signed_octets(
        suite.prf,
        &[0u8; 300],
        &nr,
        &k.sk_pi,
        b"\x02\0\0\0peer.example",
    );
    time("PSK AUTH (signed octets + prf)", || {
        psk_auth(suite.prf, b"a shared secret", &so);
    });
    let certs = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/certs");
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_893_456_000);
    let root = read_certificates(&certs.join("root.der")).unwrap();
    for (key, chain) in [
        ("p256", &["p256", "sub"][..]),
        ("p384", &["p384"][..]),
        ("ed25519", &["ed25519"][..]),
    ] {
        let k = PrivateKey::from_file(&certs.join(format!("{key}.key.pem"))).unwrap();
        let chain: Vec<Vec<u8>> = chain
            .iter()
            .flat_map(|c| read_certificates(&certs.join(format!("{c}.der"))).unwrap())
            .collect();
        time(&format!("{key}: sign AUTH (RFC 7427)"), || {
            digital_signature_auth(&k, &so).unwrap();
        });
        let auth = digital_signature_auth(&k, &so).unwrap();
        time(
            &format!("{key}: verify chain of {} + AUTH", chain.len()),
            || {
                verify(&chain, &root, now, AUTH_DIGITAL_SIGNATURE, &auth, &so).unwrap();
            },
        );
        time(&format!("{key}: verify AUTH only (chain cached)"), || {
            verify_auth(&chain[0], AUTH_DIGITAL_SIGNATURE, &auth, &so).unwrap();
        });
    }
}
