use super::*;
use crate::crypto::signed_octets;
use crate::crypto::testing::hex;
use crate::transform::Prf;

/// Inside the fixtures' 20-year lifetimes (tests/certs/make.sh): 2030-01-01.
fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_893_456_000)
}

fn at_year(y: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs((y - 1970) * 31_557_600)
}

fn path(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/certs")
        .join(name)
}

fn cert(name: &str) -> Vec<u8> {
    std::fs::read(path(&format!("{name}.der"))).unwrap()
}

fn key(name: &str) -> PrivateKey {
    PrivateKey::from_file(&path(&format!("{name}.key.pem"))).unwrap()
}

fn octets() -> Vec<u8> {
    signed_octets(
        Prf::HmacSha256,
        b"IKE_SA_INIT",
        b"Nr",
        &[7; 32],
        b"\x02\0\0\0p256.example",
    )
}

/// (key, chain, the AlgorithmIdentifier it signs with)
fn signers() -> Vec<(PrivateKey, Vec<Vec<u8>>, SigAlg)> {
    vec![
        (
            key("p256"),
            vec![cert("p256"), cert("sub")],
            SigAlg::EcdsaSha256,
        ),
        (key("p384"), vec![cert("p384")], SigAlg::EcdsaSha384),
        (key("ed25519"), vec![cert("ed25519")], SigAlg::Ed25519),
        (
            key("rsa2048"),
            vec![cert("rsa2048"), cert("sub")],
            SigAlg::RsaPkcs1(Hash::Sha256),
        ),
        (
            key("rsa2048").with_rsa_pss(true),
            vec![cert("rsa2048"), cert("sub")],
            SigAlg::RsaPss(Hash::Sha256),
        ),
    ]
}

#[test]
fn every_key_type_signs_and_verifies() {
    let root = vec![cert("root")];
    let so = octets();
    for (k, chain, alg) in signers() {
        let auth = digital_signature_auth(&k, &so).unwrap();
        let alg_der = alg.der();
        assert_eq!(usize::from(auth[0]), alg_der.len(), "{k:?}");
        assert_eq!(auth[1..1 + alg_der.len()], alg_der, "{k:?}");
        verify(&chain, &root, now(), AUTH_DIGITAL_SIGNATURE, &auth, &so)
            .unwrap_or_else(|e| panic!("{k:?}: {e}"));
        // Other octets, or a changed signature: a bad signature.
        let mut other = so.clone();
        other[0] ^= 1;
        assert_eq!(
            verify(&chain, &root, now(), AUTH_DIGITAL_SIGNATURE, &auth, &other),
            Err(CryptoError::BadSignature),
            "{k:?}"
        );
        let mut bad = auth.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert_eq!(
            verify(&chain, &root, now(), AUTH_DIGITAL_SIGNATURE, &bad, &so),
            Err(CryptoError::BadSignature),
            "{k:?}"
        );
        k.check_certificate(&chain[0]).unwrap();
        // The two halves of verify.
        verify_chain(&chain, &root, &[], now()).unwrap();
        verify_auth(&chain[0], AUTH_DIGITAL_SIGNATURE, &auth, &so).unwrap();
        assert_eq!(
            verify_auth(&chain[0], AUTH_DIGITAL_SIGNATURE, &auth, b"other"),
            Err(CryptoError::BadSignature)
        );
    }
}

#[test]
fn algorithm_identifiers_are_rfc7427s() {
    // RFC 7427 Appendix A.
    assert_eq!(
        SigAlg::RsaPkcs1(Hash::Sha256).der(),
        hex("300d06092a864886f70d01010b0500")
    );
    assert_eq!(
        SigAlg::RsaPkcs1(Hash::Sha512).der(),
        hex("300d06092a864886f70d01010d0500")
    );
    assert_eq!(SigAlg::EcdsaSha256.der(), hex("300a06082a8648ce3d040302"));
    assert_eq!(SigAlg::EcdsaSha384.der(), hex("300a06082a8648ce3d040303"));
    assert_eq!(SigAlg::EcdsaSha512.der(), hex("300a06082a8648ce3d040304"));
    // RFC 8420 §2.
    assert_eq!(SigAlg::Ed25519.der(), hex("300506032b6570"));
    // RSASSA-PSS with SHA-256, as strongSwan's pki writes it in rsa2048.der's signature.
    let pss = hex(
        "304106092a864886f70d01010a3034a00f300d06096086480165030402010500a11c301a06092a864886\
         f70d010108300d06096086480165030402010500a203020120",
    );
    assert_eq!(SigAlg::RsaPss(Hash::Sha256).der(), pss);
    let c = cert("rsa2048");
    assert_eq!(c[c.len() - pss.len() - 261..c.len() - 261], pss);
    // Every encoding, with and without NULL parameters, reads back.
    for a in SigAlg::ALL.into_iter().chain([SigAlg::Ed25519]) {
        assert_eq!(SigAlg::from_der(&a.encodings(true)), Some(a));
        assert_eq!(SigAlg::from_der(&a.encodings(false)), Some(a));
    }
}

#[test]
fn keys_are_read_from_pem_and_der() {
    for f in [
        "p256.key.der",
        "ed25519.key.der",
        "p384.key.pem",
        "rsa2048.key.pem",
    ] {
        PrivateKey::from_file(&path(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    }
    let k = PrivateKey::from_file(&path("p256.key.der")).unwrap();
    k.check_certificate(&cert("p256")).unwrap();
    let e = k.check_certificate(&cert("p384")).unwrap_err();
    assert!(matches!(e, CryptoError::KeyMismatch { .. }), "{e}");
    let e = PrivateKey::from_file(&path("nonexistent.pem")).unwrap_err();
    assert!(e.to_string().contains("nonexistent.pem"), "{e}");
    let e = PrivateKey::from_file(&path("root.der")).unwrap_err();
    assert!(matches!(e, CryptoError::KeyFile { .. }), "{e}");
    assert!(PrivateKey::from_bytes(b"-----BEGIN NOTHING-----\n").is_err());
    assert!(PrivateKey::from_bytes(&[0x30, 0x03, 0x02, 0x01]).is_err());
}

#[test]
fn small_rsa_keys_are_refused() {
    let e = PrivateKey::from_file(&path("rsa1024.key.pem")).unwrap_err();
    assert!(
        e.to_string().contains("too small, at least 2048 bits"),
        "{e}"
    );
    // A certificate with one: refused before its signature is looked at.
    let e = verify(
        &[cert("rsa1024")],
        &[cert("root")],
        now(),
        AUTH_DIGITAL_SIGNATURE,
        &[0; 40],
        b"x",
    )
    .unwrap_err();
    assert_eq!(e, CryptoError::KeyTooSmall { bits: 1024 });
}

#[test]
fn chain_checks_name_what_failed() {
    let so = octets();
    let p256 = key("p256");
    let auth = digital_signature_auth(&p256, &so).unwrap();
    let root = vec![cert("root")];
    let check = |chain: &[Vec<u8>], cas: &[Vec<u8>], t| {
        verify(chain, cas, t, AUTH_DIGITAL_SIGNATURE, &auth, &so)
    };
    // Without its intermediate, or against another CA: untrusted.
    assert_eq!(
        check(&[cert("p256")], &root, now()),
        Err(CryptoError::UntrustedIssuer)
    );
    assert_eq!(
        check(&[cert("p256"), cert("sub")], &[cert("other")], now()),
        Err(CryptoError::UntrustedIssuer)
    );
    // The intermediate as trusted CA is enough.
    check(&[cert("p256")], &[cert("sub")], now()).unwrap();
    // Before the certificates were made, and after the expired one's end.
    let e = check(&[cert("p256"), cert("sub")], &root, at_year(2025)).unwrap_err();
    assert!(matches!(e, CryptoError::CertNotYetValid { .. }), "{e}");
    let e = check(&[cert("expired")], &root, now()).unwrap_err();
    assert!(matches!(e, CryptoError::CertExpired { .. }), "{e}");
    assert!(e.to_string().contains("expired"), "{e}");
    // The same key's certificates: serverAuth EKU allows IKE, OCSP signing does not.
    check(&[cert("server")], &root, now()).unwrap();
    let e = check(&[cert("ocsp")], &root, now()).unwrap_err();
    assert_eq!(
        e,
        CryptoError::Eku {
            present: "1.3.6.1.5.5.7.3.9".into()
        }
    );
    // The expired one was valid in 2020.
    check(
        &[cert("expired")],
        &root,
        at_year(2020) + Duration::from_secs(86_400 * 100),
    )
    .unwrap();
    // A certificate signed by an untrusted CA.
    let p384 = key("p384");
    let auth384 = digital_signature_auth(&p384, &so).unwrap();
    let e = verify(
        &[cert("untrusted")],
        &root,
        now(),
        AUTH_DIGITAL_SIGNATURE,
        &auth384,
        &so,
    );
    assert_eq!(e, Err(CryptoError::UntrustedIssuer));
    verify(
        &[cert("untrusted")],
        &[cert("other")],
        now(),
        AUTH_DIGITAL_SIGNATURE,
        &auth384,
        &so,
    )
    .unwrap();
    // No certificate, garbage certificates.
    assert_eq!(check(&[], &root, now()), Err(CryptoError::NoCertificate));
    assert!(matches!(
        check(&[vec![0x30, 0x00]], &root, now()),
        Err(CryptoError::CertParse { .. })
    ));
    assert!(matches!(
        check(&[cert("p256")], &[vec![1, 2, 3]], now()),
        Err(CryptoError::CaParse { index: 0, .. })
    ));
}

#[test]
fn older_methods_verify() {
    let so = octets();
    let root = vec![cert("root")];
    let sec1 = PrivateKeyDer::from_pem_file(path("p256.key.pem")).unwrap();
    let PrivateKeyDer::Sec1(sec1) = sec1 else {
        panic!("SEC 1 expected")
    };
    let fixed = EcdsaKeyPair::from_private_key_der(
        &sig::ECDSA_P256_SHA256_FIXED_SIGNING,
        sec1.secret_sec1_der(),
    )
    .unwrap();
    let s = fixed.sign(&SystemRandom::new(), &so).unwrap();
    assert_eq!(s.as_ref().len(), 64, "r | s");
    let chain = [cert("p256"), cert("sub")];
    verify(&chain, &root, now(), AUTH_ECDSA_256, s.as_ref(), &so).unwrap();
    assert_eq!(
        verify(&chain, &root, now(), AUTH_ECDSA_256, s.as_ref(), b"other"),
        Err(CryptoError::BadSignature)
    );
    // Method 10 is P-384's: the P-256 certificate does not go with it.
    let e = verify(&chain, &root, now(), AUTH_ECDSA_384, s.as_ref(), &so).unwrap_err();
    assert!(
        matches!(
            e,
            CryptoError::KeyMismatch {
                key: "ECDSA P-256",
                ..
            }
        ),
        "{e}"
    );
    let e = verify(&chain, &root, now(), AUTH_RSA, s.as_ref(), &so).unwrap_err();
    assert!(matches!(e, CryptoError::KeyMismatch { .. }), "{e}");
    let e = verify(&chain, &root, now(), AUTH_PSK, s.as_ref(), &so).unwrap_err();
    assert_eq!(e, CryptoError::UnsupportedAuth { method: 2 });
}

#[test]
fn bad_rfc7427_auth_data_is_refused() {
    let so = octets();
    let root = vec![cert("root")];
    let chain = [cert("p256"), cert("sub")];
    let check = |auth: &[u8]| verify(&chain, &root, now(), AUTH_DIGITAL_SIGNATURE, auth, &so);
    assert_eq!(check(&[]), Err(CryptoError::AuthTooShort));
    assert_eq!(check(&[12, 0x30, 0x0a]), Err(CryptoError::AuthTooShort));
    assert_eq!(
        check(&[3, 0x30, 0x01, 0x05, 9, 9]),
        Err(CryptoError::UnsupportedSignature("300105".into()))
    );
    // An RSA signature algorithm with the P-256 certificate.
    let mut auth = vec![15];
    auth.extend_from_slice(&SigAlg::RsaPkcs1(Hash::Sha256).der());
    auth.extend_from_slice(&[0; 256]);
    let e = check(&auth).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the certificate's key is ECDSA P-256, which does not go with RsaPkcs1(Sha256)"
    );
    // The signature of another key (the P-384 one) with the P-256 certificate.
    let other = digital_signature_auth(&key("p384"), &so).unwrap();
    assert_eq!(check(&other), Err(CryptoError::BadSignature));
}

#[test]
fn certificate_files_are_read() {
    assert_eq!(
        read_certificates(&path("root.der")).unwrap(),
        [cert("root")]
    );
    assert_eq!(
        read_certificates(&path("root.pem")).unwrap(),
        [cert("root")]
    );
    assert_eq!(
        read_certificates(&path("chain.pem")).unwrap(),
        [cert("sub"), cert("root")]
    );
    let e = read_certificates(&path("p256.key.pem")).unwrap_err();
    assert!(e.to_string().contains("no CERTIFICATE"), "{e}");
}

#[test]
fn certificates_match_identities() {
    let p256 = cert("p256");
    // The subject, as pki printed it: C=CH, O=ferrouter test, CN=p256.example.
    let dn = certificate_subject(&p256).unwrap();
    assert_eq!(dn[0], 0x30);
    assert!(dn.windows(12).any(|w| w == b"p256.example"));
    certificate_matches_id(&p256, 9, &dn).unwrap();
    certificate_matches_id(&p256, 2, b"p256.example").unwrap();
    let e = certificate_matches_id(&p256, 2, b"p384.example").unwrap_err();
    assert_eq!(
        e.to_string(),
        "the certificate is not for identity p384.example"
    );
    let other_dn = certificate_subject(&cert("p384")).unwrap();
    assert!(certificate_matches_id(&p256, 9, &other_dn).is_err());
    // No IP address in its subjectAltNames.
    let e = certificate_matches_id(&p256, 1, &[192, 0, 2, 1]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the certificate is not for identity 192.0.2.1"
    );
    assert!(certificate_matches_id(&p256, 1, &[192, 0, 2]).is_err());
    assert!(certificate_matches_id(&p256, 2, &[0xff, 0xfe]).is_err());
    // KEY_ID (11) is matched against nothing.
    assert_eq!(
        certificate_matches_id(&p256, 11, b"key"),
        Err(CryptoError::UnsupportedId { id_type: 11 })
    );
    // A certificate with addresses.
    let ip = cert("ip");
    certificate_matches_id(&ip, 1, &[192, 0, 2, 1]).unwrap();
    let mut v6 = [0u8; 16];
    v6[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    v6[15] = 1;
    certificate_matches_id(&ip, 5, &v6).unwrap();
    certificate_matches_id(&ip, 2, b"gw.example").unwrap();
    assert!(certificate_matches_id(&ip, 1, &[192, 0, 2, 2]).is_err());
    // DER lengths, short and long.
    assert_eq!(der_wrap(0x30, &[1; 3]), [0x30, 3, 1, 1, 1]);
    assert_eq!(der_wrap(0x30, &[0; 200])[..3], [0x30, 0x81, 200]);
    assert_eq!(der_wrap(0x30, &[0; 300])[..4], [0x30, 0x82, 1, 44]);
}

#[test]
fn certificates_match_email_identities() {
    // email.der (make.sh): rfc822Names user@example.org and Second.User@Example.ORG.
    let email = cert("email");
    verify_chain(std::slice::from_ref(&email), &[cert("root")], &[], now()).unwrap();
    certificate_matches_id(&email, 3, b"user@example.org").unwrap();
    certificate_matches_id(&email, 3, b"Second.User@Example.ORG").unwrap();
    // The domain without regard to case, the local part exactly.
    certificate_matches_id(&email, 3, b"user@EXAMPLE.org").unwrap();
    certificate_matches_id(&email, 3, b"Second.User@example.org").unwrap();
    let e = certificate_matches_id(&email, 3, b"User@example.org").unwrap_err();
    assert_eq!(
        e.to_string(),
        "the certificate is not for identity User@example.org (its email addresses: \
         user@example.org, Second.User@Example.ORG)"
    );
    for other in [
        &b"user@example.com"[..],
        b"user@sub.example.org",
        b"ser@example.org",
        b"user@example.org ",
        b"user",
        b"example.org",
        b"",
        b"@",
        &[0xff, b'@', 0xfe],
    ] {
        assert!(
            matches!(
                certificate_matches_id(&email, 3, other),
                Err(CryptoError::IdMismatch { .. })
            ),
            "{}",
            String::from_utf8_lossy(other)
        );
    }
    // An email address is not an FQDN, nor the other way round.
    assert!(certificate_matches_id(&email, 2, b"example.org").is_err());
    assert!(certificate_matches_id(&cert("p256"), 3, b"user@p256.example").is_err());
    // No subjectAltName at all (server.der), or none with an email address (ip.der).
    let e = certificate_matches_id(&cert("server"), 3, b"user@example.org").unwrap_err();
    assert_eq!(
        e.to_string(),
        "the certificate is not for identity user@example.org (it has no email address in \
         its subjectAltName)"
    );
    let e = certificate_matches_id(&cert("ip"), 3, b"user@example.org").unwrap_err();
    assert!(matches!(e, CryptoError::IdMismatch { .. }), "{e}");
    // A subjectAltName that does not decode: the first name's length made to run past
    // the extension (the certificate around it still parses).
    let at = 2 + email
        .windows(18)
        .position(|w| w == b"\x81\x10user@example.org")
        .unwrap();
    let mut bad = email.clone();
    bad[at - 1] = 0x7f;
    let e = certificate_matches_id(&bad, 3, b"user@example.org").unwrap_err();
    assert!(
        matches!(&e, CryptoError::CertParse { reason, .. } if reason.contains("subjectAltName")),
        "{e}"
    );
    // A name that is no IA5String (a byte above 0x7f).
    let mut bad = email.clone();
    bad[at] = 0xf5;
    let e = certificate_matches_id(&bad, 3, b"\xf5ser@example.org").unwrap_err();
    assert!(matches!(e, CryptoError::CertParse { .. }), "{e}");
    // Cut short: webpki refuses it first.
    assert!(matches!(
        certificate_matches_id(&email[..email.len() - 1], 3, b"user@example.org"),
        Err(CryptoError::CertParse { .. })
    ));
}

#[test]
fn revoked_certificates_are_refused() {
    // root.crl (make.sh) revokes p384.der; sub.der and the others are not on it.
    let crl = vec![std::fs::read(path("root.crl")).unwrap()];
    let root = vec![cert("root")];
    assert_eq!(
        verify_chain(&[cert("p384")], &root, &crl, now()),
        Err(CryptoError::CertRevoked)
    );
    verify_chain(&[cert("p384")], &root, &[], now()).unwrap();
    verify_chain(&[cert("ed25519")], &root, &crl, now()).unwrap();
    // p256's issuer (sub) has no CRL here: it passes; sub itself is checked on root's.
    verify_chain(&[cert("p256"), cert("sub")], &root, &crl, now()).unwrap();
    assert!(matches!(
        verify_chain(&[cert("p384")], &root, &[vec![0x30, 0]], now()),
        Err(CryptoError::CrlParse { index: 0, .. })
    ));
}

mod hostile {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Arbitrary AUTH data, and certificates with bytes changed: an error or a
        /// verdict, never a panic.
        #[test]
        fn verify_never_panics(
            auth in proptest::collection::vec(any::<u8>(), 0..300),
            method in any::<u8>(),
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
            id in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let mut ee = cert("p256");
            for (i, x) in edits {
                let i = i % ee.len();
                ee[i] ^= x;
            }
            let chain = [ee.clone(), cert("sub")];
            let _ = verify(&chain, &[cert("root")], now(), method, &auth, b"octets");
            let _ = verify_auth(&ee, method, &auth, b"octets");
            let _ = certificate_matches_id(&ee, method, &id);
            let _ = certificate_subject(&ee);
            let _ = PrivateKey::from_bytes(&auth);
        }

        /// The email matcher on a certificate with bytes changed, cut short or grown,
        /// and arbitrary addresses: an error or a verdict, never a panic.
        #[test]
        fn email_matching_never_panics(
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
            cut in any::<usize>(),
            id in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let mut ee = cert("email");
            for (i, x) in edits {
                let i = i % ee.len();
                ee[i] ^= x;
            }
            let _ = certificate_matches_id(&ee, 3, &id);
            let _ = certificate_matches_id(&ee, 3, b"user@example.org");
            let _ = email_matches(&ee, &id);
            let _ = email_matches(&ee[..cut % (ee.len() + 1)], b"user@example.org");
        }
    }
}
