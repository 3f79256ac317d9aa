//! Interop with scapy's ESP (`scapy.layers.ipsec.SecurityAssociation`, Debian
//! `python3-scapy`), an implementation we did not write, for every algorithm it has, in
//! tunnel mode over IPv4 and IPv6 (both inner families) and transport mode, with ESN and
//! with NAT-T:
//! (a) ferrouter encrypts, scapy decrypts, and the inner packet must be the one sent;
//! (b) scapy encrypts, ferrouter decrypts (out of order), same check;
//! (c) scapy's packets replayed, truncated and corrupted are refused, each counted under
//!     its reason.
//!
//! scapy 2.5.0 leaves the high 32 bits of an ESN out of the HMAC of ESP (it appends them
//! for AH only, against RFC 4303 §2.2.1), so ESN is tested with the AEADs (and NULL),
//! whose AAD scapy builds as RFC 4106 says. NAT-T is tested with IPv4 outer headers
//! (RFC 3948; scapy's NAT-T decapsulation of transport-mode IPv6 is broken), and scapy's
//! NAT-T packets have their UDP length repaired (scapy 2.5.0 writes 8) before we read them.
//!
//! Without scapy (or `cryptography`) the test is reported as ignored with the reason
//! (build.rs probes for it); scripts/test.sh installs it.

use std::io::Write;
use std::process::{Command, Stdio};

use ipsec::testing::{udp4, udp6};
use ipsec::{
    decrypt, encrypt, Direction, Encryption, EspError, Integrity, Mode, NatT, Sa, SaConfig,
};

const HEADROOM: usize = 128;
const PYTHON: &str = "/usr/bin/python3";

/// (ours, scapy's names)
const ALGS: [(Encryption, Integrity, &str, Option<&str>); 8] = [
    (Encryption::AesGcm128, Integrity::None, "AES-GCM", None),
    (Encryption::AesGcm256, Integrity::None, "AES-GCM", None),
    (
        Encryption::ChaCha20Poly1305,
        Integrity::None,
        "CHACHA20-POLY1305",
        None,
    ),
    (
        Encryption::AesCbc128,
        Integrity::HmacSha1_96,
        "AES-CBC",
        Some("HMAC-SHA1-96"),
    ),
    (
        Encryption::AesCbc128,
        Integrity::HmacSha256_128,
        "AES-CBC",
        Some("SHA2-256-128"),
    ),
    (
        Encryption::AesCbc256,
        Integrity::HmacSha512_256,
        "AES-CBC",
        Some("SHA2-512-256"),
    ),
    (
        Encryption::Null,
        Integrity::HmacSha256_128,
        "NULL",
        Some("SHA2-256-128"),
    ),
    (Encryption::Null, Integrity::None, "NULL", None),
];

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

struct Case {
    alg: usize,
    mode: &'static str,
    esn: bool,
    natt: bool,
}

impl Case {
    fn name(&self) -> String {
        let a = ALGS[self.alg];
        format!(
            "{}+{} {} esn={} natt={}",
            a.0.name(),
            a.1.name(),
            self.mode,
            self.esn,
            self.natt
        )
    }

    fn keys(&self) -> (Vec<u8>, Vec<u8>) {
        let a = ALGS[self.alg];
        let ek = (0..a.0.key_len())
            .map(|i| (i * 13 + self.alg) as u8)
            .collect();
        let ak = (0..a.1.key_len()).map(|i| (i * 7 + 1) as u8).collect();
        (ek, ak)
    }

    fn mode(&self) -> Mode {
        match self.mode {
            "tunnel4" => Mode::Tunnel {
                src: "192.0.2.1".parse().unwrap(),
                dst: "192.0.2.2".parse().unwrap(),
            },
            "tunnel6" => Mode::Tunnel {
                src: "2001:db8::a".parse().unwrap(),
                dst: "2001:db8::b".parse().unwrap(),
            },
            _ => Mode::Transport,
        }
    }

    fn sa(&self, dir: Direction) -> Sa {
        let a = ALGS[self.alg];
        let (ek, ak) = self.keys();
        let mut c = SaConfig::new(0x0000_beef, dir, a.0, &ek, a.1, &ak);
        c.mode = self.mode();
        c.esn = self.esn;
        c.natt = self.natt.then(NatT::default);
        Sa::new(&c).unwrap()
    }

    /// The `SA` line for scapy, with the high 32 bits of the sequence number it uses.
    fn scapy_sa(&self, esn_hi: u32) -> String {
        let a = ALGS[self.alg];
        let (ek, ak) = self.keys();
        let (src, dst) = match self.mode {
            "tunnel4" => ("192.0.2.1", "192.0.2.2"),
            "tunnel6" => ("2001:db8::a", "2001:db8::b"),
            _ => ("", ""),
        };
        let auth = a.3.map_or("null".to_string(), |s| format!("\"{s}\""));
        format!(
            "SA {{\"spi\": 48879, \"crypt\": \"{}\", \"ekey\": \"{}\", \"auth\": {auth}, \"akey\": \"{}\", \"mode\": \"{}\", \"src\": \"{src}\", \"dst\": \"{dst}\", \"esn\": {}, \"esn_hi\": {esn_hi}, \"natt\": {}}}\n",
            a.2,
            hex(&ek),
            hex(&ak),
            self.mode,
            if self.esn { "true" } else { "false" },
            if self.natt { "true" } else { "false" },
        )
    }

    /// The inner packets: both families in tunnel mode; in transport mode, those of the
    /// outer family (IPv4 only with NAT-T).
    fn packets(&self) -> Vec<Vec<u8>> {
        let sizes = [0usize, 1, 37, 200, 1350];
        let mut v = Vec::new();
        for (i, n) in sizes.iter().enumerate() {
            let payload: Vec<u8> = (0..*n).map(|j| (j * 3 + i) as u8).collect();
            v.push(udp4(&payload, 0x10));
            if !(self.natt && self.mode == "transport") {
                v.push(udp6(&payload, 0));
            }
        }
        v
    }
}

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (alg, a) in ALGS.iter().enumerate() {
        let esn_ok = a.1 == Integrity::None;
        for mode in ["tunnel4", "tunnel6", "transport"] {
            for esn in [false, true] {
                for natt in [false, true] {
                    if esn && !esn_ok || natt && mode == "tunnel6" {
                        continue;
                    }
                    v.push(Case {
                        alg,
                        mode,
                        esn,
                        natt,
                    });
                }
            }
        }
    }
    v
}

fn scapy(input: &str) -> Vec<String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/scapy_esp.py");
    let mut child = Command::new(PYTHON)
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
    assert!(out.status.success(), "scapy_esp.py failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
#[cfg_attr(
    no_scapy,
    ignore = "python3-scapy (with python3-cryptography) is not installed for /usr/bin/python3: apt-get install python3-scapy (scripts/test.sh does)"
)]
fn scapy_interop() {
    let cases = cases();
    // Everything for scapy in one run: per case, ferrouter's packets to decrypt, then the
    // inner packets for scapy to encrypt.
    let mut input = String::new();
    let mut ours = Vec::new();
    for c in &cases {
        let mut tx = c.sa(Direction::Outbound);
        let esn_hi = if c.esn {
            // Across 2^32: scapy is told the high half, as its ESN API wants.
            tx.set_sequence((1 << 32) + 100);
            1
        } else {
            0
        };
        input += &c.scapy_sa(esn_hi);
        for p in c.packets() {
            let mut buf = vec![0u8; HEADROOM + p.len() + 64];
            buf[HEADROOM..HEADROOM + p.len()].copy_from_slice(&p);
            let (s, l) = encrypt(&mut tx, &mut buf, HEADROOM, p.len())
                .unwrap_or_else(|e| panic!("{}: {e}", c.name()));
            input += &format!("DEC {}\n", hex(&buf[s..s + l]));
            ours.push(p);
        }
        input += &c.scapy_sa(0);
        for (i, p) in c.packets().iter().enumerate() {
            input += &format!("ENC {} {}\n", i + 1, hex(p));
        }
    }
    let out = scapy(&input);
    let mut lines = out.iter();
    let mut ours = ours.into_iter();
    let mut checked = (0, 0);
    for c in &cases {
        let name = c.name();
        // (a) scapy decrypted ours.
        for _ in c.packets() {
            let want = ours.next().unwrap();
            let got = lines.next().expect("a line per packet");
            let got = got
                .strip_prefix("OK ")
                .unwrap_or_else(|| panic!("{name}: scapy could not decrypt ours: {got}"));
            assert_eq!(unhex(got), want, "{name}: scapy's decryption of ours");
            checked.0 += 1;
        }
        // (b) we decrypt scapy's, in an order with reordering.
        let pkts = c.packets();
        let sealed: Vec<Vec<u8>> = pkts
            .iter()
            .map(|_| {
                let l = lines.next().expect("a line per packet");
                let l = l
                    .strip_prefix("OK ")
                    .unwrap_or_else(|| panic!("{name}: scapy could not encrypt: {l}"));
                unhex(l)
            })
            .collect();
        let mut rx = c.sa(Direction::Inbound);
        let mut order: Vec<usize> = (0..pkts.len()).collect();
        order.swap(1, 4);
        order.swap(2, 3);
        for &i in &order {
            let mut buf = vec![0u8; HEADROOM + sealed[i].len()];
            buf[HEADROOM..].copy_from_slice(&sealed[i]);
            let r = decrypt(&mut rx, &mut buf, HEADROOM, sealed[i].len())
                .unwrap_or_else(|e| panic!("{name}: scapy's packet {i}: {e}"));
            assert_eq!(
                &buf[r.start..r.start + r.len],
                &pkts[i][..],
                "{name}: packet {i}"
            );
            checked.1 += 1;
        }

        // (c) Replayed, truncated, corrupted: each refused and counted.
        let n = sealed.len() - 1;
        let mut buf = [vec![0u8; HEADROOM], sealed[n].clone()].concat();
        let len = sealed[n].len();
        assert_eq!(
            decrypt(&mut rx, &mut buf, HEADROOM, len),
            Err(EspError::Replayed),
            "{name}"
        );
        assert_eq!(rx.counters().replayed(), 1, "{name}");
        if c.alg == ALGS.len() - 1 {
            continue; // NULL without integrity protects nothing
        }
        let mut rx = c.sa(Direction::Inbound);
        // Cut short of what its IP header says.
        let mut buf = [vec![0u8; HEADROOM], sealed[n].clone()].concat();
        assert_eq!(
            decrypt(&mut rx, &mut buf, HEADROOM, len - 1),
            Err(EspError::Truncated),
            "{name}"
        );
        // Cut by 4 bytes with the IP header and UDP length made to agree: the ICV fails.
        let mut p = sealed[n].clone();
        p.truncate(len - 4);
        fix_lengths(&mut p, c.natt);
        let mut buf = [vec![0u8; HEADROOM], p].concat();
        assert_eq!(
            decrypt(&mut rx, &mut buf, HEADROOM, len - 4),
            Err(EspError::IntegrityFailed),
            "{name}"
        );
        // One bit of the encrypted payload flipped.
        let mut buf = [vec![0u8; HEADROOM], sealed[n].clone()].concat();
        buf[HEADROOM + len - 30] ^= 0x10;
        assert_eq!(
            decrypt(&mut rx, &mut buf, HEADROOM, len),
            Err(EspError::IntegrityFailed),
            "{name}"
        );
        let k = rx.counters();
        assert_eq!(
            (k.other(), k.integrity_failed(), k.packets),
            (1, 2, 0),
            "{name}"
        );
        // The genuine packet is still accepted after all that.
        let mut buf = [vec![0u8; HEADROOM], sealed[n].clone()].concat();
        assert!(decrypt(&mut rx, &mut buf, HEADROOM, len).is_ok(), "{name}");
    }
    assert!(lines.next().is_none());
    eprintln!(
        "scapy interop: {} cases, {} of our packets decrypted by scapy, {} of scapy's by us",
        cases.len(),
        checked.0,
        checked.1
    );
}

/// Makes the IP (and NAT-T UDP) lengths agree with a shortened packet.
fn fix_lengths(p: &mut [u8], natt: bool) {
    let len = p.len();
    let hl = if p[0] >> 4 == 6 {
        p[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
        40
    } else {
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p[10..12].copy_from_slice(&[0, 0]);
        let c = wire::checksum::checksum(&p[..20]).to_be_bytes();
        p[10..12].copy_from_slice(&c);
        20
    };
    if natt {
        p[hl + 4..hl + 6].copy_from_slice(&((len - hl) as u16).to_be_bytes());
    }
}
