//! Interop of certificate authentication with python3-cryptography (OpenSSL), with the
//! keys and certificates strongSwan's `pki` made (tests/certs/make.sh):
//! (a) Python signs the signed octets, `ike::crypto::verify` verifies the AUTH data made
//!     of them, for RFC 7427 (ECDSA DER, Ed25519, RSA PKCS#1 v1.5 and PSS) and for the
//!     older methods 1 (RSA with SHA-1), 9 and 10 (ECDSA r | s);
//! (b) `ike::crypto::sign` signs, Python verifies with the certificate's key.
//!
//! Without python3-cryptography the test is reported as ignored with the reason (build.rs
//! probes for it); scripts/test.sh installs it.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use ike::crypto::{
    sign, verify, PrivateKey, AUTH_DIGITAL_SIGNATURE, AUTH_ECDSA_256, AUTH_ECDSA_384, AUTH_RSA,
};

fn path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/certs")
        .join(name)
}

fn der(name: &str) -> Vec<u8> {
    std::fs::read(path(&format!("{name}.der"))).unwrap()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn python(input: &str) -> Vec<String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sig_python.py");
    let mut child = Command::new("/usr/bin/python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run /usr/bin/python3");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()).unwrap());
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(out.status.success(), "sig_python.py failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// RFC 7427 Appendix A's AlgorithmIdentifiers, RFC 8420's for Ed25519.
fn alg_id(scheme: &str) -> Vec<u8> {
    unhex(match scheme {
        "ecdsa-sha256" => "300a06082a8648ce3d040302",
        "ecdsa-sha384" => "300a06082a8648ce3d040303",
        "ed25519" => "300506032b6570",
        "rsa-pkcs1-sha256" => "300d06092a864886f70d01010b0500",
        "rsa-pss-sha256" => {
            "304106092a864886f70d01010a3034a00f300d06096086480165030402010500a11c301a06092a864886\
             f70d010108300d06096086480165030402010500a203020120"
        }
        _ => unreachable!(),
    })
}

#[test]
#[cfg_attr(
    no_py_cryptography,
    ignore = "python3-cryptography is not installed for /usr/bin/python3: apt-get install python3-cryptography (scripts/test.sh does)"
)]
fn python_interop() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_893_456_000);
    let root = vec![der("root")];
    let msg = b"IKE_SA_INIT request | Nr | prf(SK_pi, IDi')".to_vec();
    // (key, chain, scheme, auth method)
    let cases: [(&str, &[&str], &str, u8); 10] = [
        (
            "p256",
            &["p256", "sub"],
            "ecdsa-sha256",
            AUTH_DIGITAL_SIGNATURE,
        ),
        ("p384", &["p384"], "ecdsa-sha384", AUTH_DIGITAL_SIGNATURE),
        ("ed25519", &["ed25519"], "ed25519", AUTH_DIGITAL_SIGNATURE),
        (
            "rsa2048",
            &["rsa2048", "sub"],
            "rsa-pkcs1-sha256",
            AUTH_DIGITAL_SIGNATURE,
        ),
        (
            "rsa2048",
            &["rsa2048", "sub"],
            "rsa-pss-sha256",
            AUTH_DIGITAL_SIGNATURE,
        ),
        ("rsa2048", &["rsa2048", "sub"], "rsa-pkcs1-sha1", AUTH_RSA),
        (
            "p256",
            &["p256", "sub"],
            "ecdsa-fixed-sha256",
            AUTH_ECDSA_256,
        ),
        ("p384", &["p384"], "ecdsa-fixed-sha384", AUTH_ECDSA_384),
        // Our signatures, for Python to verify.
        ("p256", &["p256", "sub"], "ecdsa-sha256", 0),
        ("rsa2048", &["rsa2048", "sub"], "rsa-pss-sha256", 0),
    ];
    let mut input = String::new();
    for (key, chain, scheme, method) in cases {
        let key_file = path(&format!("{key}.key.pem"));
        if method != 0 {
            input += &format!("SIGN {} {scheme} {}\n", key_file.display(), hex(&msg));
        } else {
            let k = PrivateKey::from_file(&key_file)
                .unwrap()
                .with_rsa_pss(scheme.starts_with("rsa-pss"));
            let (alg, s) = sign(&k, &msg).unwrap();
            assert_eq!(alg, alg_id(scheme), "{key} {scheme}");
            let cert = path(&format!("{}.der", chain[0]));
            input += &format!(
                "VERIFY {} {scheme} {} {}\n",
                cert.display(),
                hex(&msg),
                hex(&s)
            );
        }
    }
    let out = python(&input);
    assert_eq!(out.len(), cases.len());
    for ((key, chain, scheme, method), line) in cases.iter().zip(&out) {
        let what = format!("{key} {scheme} method {method}");
        if *method == 0 {
            assert_eq!(line, "OK", "{what}: Python verifying ours");
            continue;
        }
        let s = unhex(
            line.strip_prefix("OK ")
                .unwrap_or_else(|| panic!("{what}: {line}")),
        );
        let auth = if *method == AUTH_DIGITAL_SIGNATURE {
            let alg = alg_id(scheme);
            let mut a = vec![alg.len() as u8];
            a.extend_from_slice(&alg);
            a.extend_from_slice(&s);
            a
        } else {
            s
        };
        let chain: Vec<Vec<u8>> = chain.iter().map(|c| der(c)).collect();
        verify(&chain, &root, now, *method, &auth, &msg)
            .unwrap_or_else(|e| panic!("{what}: verifying Python's: {e}"));
        let mut other = msg.clone();
        other[0] ^= 1;
        assert!(
            verify(&chain, &root, now, *method, &auth, &other).is_err(),
            "{what}: another message verified"
        );
    }
}
