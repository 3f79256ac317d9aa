//! Interop of the SK payload with an implementation we did not write on the same library:
//! tests/sk_python.py, written from the RFCs on python3-cryptography (OpenSSL), for every
//! encryption and integrity transform, SK and SKF headers:
//! (a) `SkCipher::seal` seals, Python checks and decrypts, and the inner payloads must be
//!     the ones sealed;
//! (b) Python seals (with padding bytes of 0xAA, and 3 bytes of padding with the AEADs),
//!     `SkCipher::open` opens, same check;
//! (c) a sealed message with a flipped bit is refused by Python too (the check is real).
//!
//! Without python3-cryptography the test is reported as ignored with the reason (build.rs
//! probes for it); scripts/test.sh installs it.

use std::io::Write;
use std::process::{Command, Stdio};

use ike::crypto::{random_bytes, SkCipher};
use ike::transform::{Encr, Integ};

fn suites() -> Vec<(Encr, Option<Integ>)> {
    let mut v = vec![
        (Encr::AesGcm16 { key_bits: 128 }, None),
        (Encr::AesGcm16 { key_bits: 256 }, None),
        (Encr::ChaCha20Poly1305, None),
    ];
    for key_bits in [128, 192, 256] {
        for i in [
            Integ::HmacSha1_96,
            Integ::HmacSha256_128,
            Integ::HmacSha384_192,
            Integ::HmacSha512_256,
        ] {
            v.push((Encr::AesCbc { key_bits }, Some(i)));
        }
    }
    v
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

fn names(encr: Encr, integ: Option<Integ>) -> (&'static str, &'static str) {
    let e = match encr {
        Encr::AesGcm16 { .. } => "aes-gcm-16",
        Encr::ChaCha20Poly1305 => "chacha20-poly1305",
        Encr::AesCbc { .. } => "aes-cbc",
    };
    let i = match integ {
        None => "none",
        Some(Integ::HmacSha1_96) => "sha1",
        Some(Integ::HmacSha256_128) => "sha256",
        Some(Integ::HmacSha384_192) => "sha384",
        Some(Integ::HmacSha512_256) => "sha512",
    };
    (e, i)
}

/// The message before sealing: the IKE header, SK or SKF header, inner payloads.
fn message(plain: &[u8], hdr_len: usize) -> (Vec<u8>, usize) {
    let mut m = vec![0x11; 28];
    m[16..24].copy_from_slice(&[0x2e, 0x20, 0x23, 0x08, 0, 0, 0, 1]);
    let at = m.len();
    m.extend_from_slice(&[0x23, 0, 0, 0]);
    if hdr_len == 8 {
        m.extend_from_slice(&[0, 1, 0, 1]);
    }
    m.extend_from_slice(plain);
    (m, at)
}

fn python(input: &str) -> Vec<String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sk_python.py");
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
    assert!(out.status.success(), "sk_python.py failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
#[cfg_attr(
    no_py_cryptography,
    ignore = "python3-cryptography is not installed for /usr/bin/python3: apt-get install python3-cryptography (scripts/test.sh does)"
)]
fn python_interop() {
    struct Case {
        encr: Encr,
        integ: Option<Integ>,
        sk_e: Vec<u8>,
        sk_a: Vec<u8>,
        hdr_len: usize,
        plain: Vec<u8>,
    }
    let mut cases = Vec::new();
    for (encr, integ) in suites() {
        for hdr_len in [4, 8] {
            for len in [0, 5, 16, 300] {
                let mut sk_e = vec![0; encr.keymat_len()];
                let mut sk_a = vec![0; integ.map_or(0, Integ::key_len)];
                let mut plain = vec![0; len];
                random_bytes(&mut sk_e).unwrap();
                random_bytes(&mut sk_a).unwrap();
                random_bytes(&mut plain).unwrap();
                cases.push(Case {
                    encr,
                    integ,
                    sk_e,
                    sk_a,
                    hdr_len,
                    plain,
                });
            }
        }
    }
    let mut input = String::new();
    for c in &cases {
        let (e, i) = names(c.encr, c.integ);
        let sk_a = if c.sk_a.is_empty() {
            "-".into()
        } else {
            hex(&c.sk_a)
        };
        let args = format!("{e} {i} {} {sk_a} 28 {}", hex(&c.sk_e), c.hdr_len);
        let (mut m, at) = message(&c.plain, c.hdr_len);
        // Python seals a copy of the unsealed message.
        let mut iv = vec![0; if c.integ.is_some() { 16 } else { 8 }];
        random_bytes(&mut iv).unwrap();
        let seal = format!("SEAL {args} {} {}\n", hex(&iv), hex(&m));
        let mut tx = SkCipher::new(c.encr, c.integ, &c.sk_e, &c.sk_a).unwrap();
        tx.seal(&mut m, at, c.hdr_len).unwrap();
        input += &format!("OPEN {args} {}\n", hex(&m));
        input += &seal;
        let last = m.len() - 1;
        m[last] ^= 0x01;
        input += &format!("OPEN {args} {}\n", hex(&m));
    }
    let out = python(&input);
    assert_eq!(out.len(), 3 * cases.len());
    for (c, out) in cases.iter().zip(out.chunks(3)) {
        let what = format!(
            "{:?} {:?} hdr {} len {}",
            c.encr,
            c.integ,
            c.hdr_len,
            c.plain.len()
        );
        // (a)
        assert_eq!(
            out[0],
            format!("OK {}", hex(&c.plain)),
            "{what}: Python opening ours"
        );
        // (b)
        let theirs = unhex(
            out[1]
                .strip_prefix("OK ")
                .unwrap_or_else(|| panic!("{what}: {}", out[1])),
        );
        let rx = SkCipher::new(c.encr, c.integ, &c.sk_e, &c.sk_a).unwrap();
        let opened = rx
            .open(&theirs, 28, c.hdr_len)
            .unwrap_or_else(|e| panic!("{what}: opening Python's: {e}"));
        assert_eq!(*opened, c.plain, "{what}: opening Python's");
        // (c)
        assert!(
            out[2].starts_with("ERR"),
            "{what}: Python took a flipped bit: {}",
            out[2]
        );
    }
}
