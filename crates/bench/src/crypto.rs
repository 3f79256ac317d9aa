//! `ferrouter-lab bench crypto`: the ESP ciphers of issue 26 from memory, one pinned core,
//! in three Rust crates (aws-lc-rs, ring, RustCrypto), next to `openssl speed` on the same
//! core in the same run.
//!
//! Per crate, algorithm and payload size, on one core:
//! * **seal**: the payload encrypted in place and its ICV (tag) written after it, with an
//!   8-byte AAD like ESP's (SPI and sequence number) and a fresh nonce per packet (a 4-byte
//!   salt and the 64-bit packet counter, as RFC 4106 and RFC 7634 build it);
//! * **open**: a sealed packet decrypted in place and its ICV checked. Opening destroys the
//!   ciphertext, so each open first copies one of [`POOL`] sealed packets into the work
//!   buffer (a receive path reads the packet from a buffer too); the copy is in the timing.
//!
//! AES-CBC with HMAC is encrypt-then-MAC as ESP does it: the ICV is the truncated HMAC of
//! the ESP header (the 8-byte AAD), the IV and the ciphertext. CBC needs whole blocks, so a
//! payload that is not a multiple of 16 bytes is encrypted rounded up (as ESP's padding
//! would: 1400 bytes become 1408); rates count the payload bytes only. ring has no AES-CBC
//! (only HMAC), so CBC rows come from aws-lc-rs and RustCrypto.
//!
//! Keys are fixed and expanded once, outside the timings; the timed loop allocates nothing.
//! Rates are per CPU second of the thread (`CLOCK_THREAD_CPUTIME_ID`): the per-core rate,
//! which the time other processes held the core does not dilute.

use std::fmt::Write as _;
use std::hint::black_box;
use std::process::Command;

use anyhow::{bail, Context};

use crate::conntrack::{cpu_model, thread_cpu};

/// Sealed packets the open loop cycles through.
pub const POOL: usize = 64;
/// Packets between two reads of the CPU clock.
const BATCH: u64 = 256;
/// ESP's AAD: SPI and sequence number.
const SPI: u32 = 0x0000_1001;
const SALT: [u8; 4] = [0xca, 0xfe, 0xba, 0xbe];
const KEY: [u8; 64] = {
    let mut k = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        k[i] = (i as u8).wrapping_mul(37).wrapping_add(11);
        i += 1;
    }
    k
};
const AUTH_KEY: [u8; 64] = {
    let mut k = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        k[i] = (i as u8).wrapping_mul(91).wrapping_add(5);
        i += 1;
    }
    k
};

/// The ciphers measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Alg {
    /// AES-128-GCM, 16-byte ICV (RFC 4106).
    #[serde(rename = "aes-128-gcm")]
    Aes128Gcm,
    /// AES-256-GCM, 16-byte ICV.
    #[serde(rename = "aes-256-gcm")]
    Aes256Gcm,
    /// ChaCha20-Poly1305 (RFC 7634).
    #[serde(rename = "chacha20-poly1305")]
    Chacha20Poly1305,
    /// AES-128-CBC with HMAC-SHA1-96.
    #[serde(rename = "aes-128-cbc+hmac-sha1-96")]
    Aes128CbcHmacSha1,
    /// AES-128-CBC with HMAC-SHA2-256-128.
    #[serde(rename = "aes-128-cbc+hmac-sha256-128")]
    Aes128CbcHmacSha256,
    /// AES-256-CBC with HMAC-SHA2-512-256.
    #[serde(rename = "aes-256-cbc+hmac-sha512-256")]
    Aes256CbcHmacSha512,
}

impl Alg {
    /// All of them, in report order.
    pub const ALL: [Alg; 6] = [
        Alg::Aes128Gcm,
        Alg::Aes256Gcm,
        Alg::Chacha20Poly1305,
        Alg::Aes128CbcHmacSha1,
        Alg::Aes128CbcHmacSha256,
        Alg::Aes256CbcHmacSha512,
    ];

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Alg::Aes128Gcm => "aes-128-gcm",
            Alg::Aes256Gcm => "aes-256-gcm",
            Alg::Chacha20Poly1305 => "chacha20-poly1305",
            Alg::Aes128CbcHmacSha1 => "aes-128-cbc+hmac-sha1-96",
            Alg::Aes128CbcHmacSha256 => "aes-128-cbc+hmac-sha256-128",
            Alg::Aes256CbcHmacSha512 => "aes-256-cbc+hmac-sha512-256",
        }
    }

    /// By [`Alg::name`].
    pub fn parse(s: &str) -> anyhow::Result<Alg> {
        Alg::ALL.into_iter().find(|a| a.name() == s).ok_or_else(|| {
            let names: Vec<_> = Alg::ALL.iter().map(|a| a.name()).collect();
            anyhow::anyhow!("unknown algorithm {s:?}; known: {}", names.join(", "))
        })
    }

    /// ICV bytes.
    pub fn icv_len(self) -> usize {
        match self {
            Alg::Aes128CbcHmacSha1 => 12,
            Alg::Aes256CbcHmacSha512 => 32,
            _ => 16,
        }
    }

    fn cbc(self) -> bool {
        matches!(
            self,
            Alg::Aes128CbcHmacSha1 | Alg::Aes128CbcHmacSha256 | Alg::Aes256CbcHmacSha512
        )
    }

    /// Bytes encrypted for a payload of `size`: CBC rounds up to whole blocks.
    pub fn data_len(self, size: usize) -> usize {
        if self.cbc() {
            size.div_ceil(16) * 16
        } else {
            size
        }
    }

    fn key_len(self) -> usize {
        match self {
            Alg::Aes128Gcm | Alg::Aes128CbcHmacSha1 | Alg::Aes128CbcHmacSha256 => 16,
            _ => 32,
        }
    }

    /// `openssl speed -evp` names of the reference: the cipher, and for CBC the HMAC
    /// digest measured on its own (`openssl speed -hmac`).
    fn openssl(self) -> (&'static str, Option<&'static str>) {
        match self {
            Alg::Aes128Gcm => ("aes-128-gcm", None),
            Alg::Aes256Gcm => ("aes-256-gcm", None),
            Alg::Chacha20Poly1305 => ("chacha20-poly1305", None),
            Alg::Aes128CbcHmacSha1 => ("aes-128-cbc", Some("sha1")),
            Alg::Aes128CbcHmacSha256 => ("aes-128-cbc", Some("sha256")),
            Alg::Aes256CbcHmacSha512 => ("aes-256-cbc", Some("sha512")),
        }
    }
}

/// The crates measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Lib {
    /// aws-lc-rs (AWS-LC, BoringSSL's descendant, assembly from OpenSSL/CRYPTOGAMS).
    AwsLcRs,
    /// ring (BoringSSL assembly).
    Ring,
    /// RustCrypto (aes-gcm, chacha20poly1305, aes + cbc + hmac + sha1/sha2).
    #[serde(rename = "rustcrypto")]
    RustCrypto,
}

impl Lib {
    /// All of them, in report order.
    pub const ALL: [Lib; 3] = [Lib::AwsLcRs, Lib::Ring, Lib::RustCrypto];

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Lib::AwsLcRs => "aws-lc-rs",
            Lib::Ring => "ring",
            Lib::RustCrypto => "rustcrypto",
        }
    }
}

/// One cipher suite of one crate, keyed once.
pub trait Suite {
    /// Encrypts `buf[..len]` in place and writes the ICV to `buf[len..len + icv]`.
    fn seal(&self, seq: u64, aad: &[u8; 8], buf: &mut [u8], len: usize);
    /// Checks the ICV at `buf[len..]` and decrypts `buf[..len]` in place; false if forged.
    fn open(&self, seq: u64, aad: &[u8; 8], buf: &mut [u8], len: usize) -> bool;
}

fn nonce12(seq: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[..4].copy_from_slice(&SALT);
    n[4..].copy_from_slice(&seq.to_be_bytes());
    n
}

/// CBC's IV for packet `seq` (ESP sends it in the clear; a real sender makes it
/// unpredictable).
fn iv16(seq: u64) -> [u8; 16] {
    let mut iv = [0u8; 16];
    iv[..8].copy_from_slice(&seq.to_be_bytes());
    iv[8..].copy_from_slice(&(!seq).to_le_bytes());
    iv
}

/// The ESP header of packet `seq`: the AAD.
pub fn aad(seq: u64) -> [u8; 8] {
    let mut a = [0u8; 8];
    a[..4].copy_from_slice(&SPI.to_be_bytes());
    a[4..].copy_from_slice(&(seq as u32).to_be_bytes());
    a
}

/// The AEAD suite of a crate with ring's `aead` API (ring itself, and aws-lc-rs, which
/// keeps that API): one wrapper for both, `aead` being the crate's module in scope.
macro_rules! ring_api_aead {
    () => {
        pub struct Aead(aead::LessSafeKey);

        impl Aead {
            pub fn new(alg: Alg) -> Aead {
                let a = match alg {
                    Alg::Aes128Gcm => &aead::AES_128_GCM,
                    Alg::Aes256Gcm => &aead::AES_256_GCM,
                    _ => &aead::CHACHA20_POLY1305,
                };
                let k = aead::UnboundKey::new(a, &KEY[..alg.key_len()]).expect("AEAD key");
                Aead(aead::LessSafeKey::new(k))
            }
        }

        impl Suite for Aead {
            fn seal(&self, seq: u64, aad: &[u8; 8], buf: &mut [u8], len: usize) {
                let n = aead::Nonce::assume_unique_for_key(nonce12(seq));
                let (data, icv) = buf.split_at_mut(len);
                let tag = self
                    .0
                    .seal_in_place_separate_tag(n, aead::Aad::from(aad), data)
                    .expect("seal");
                icv[..16].copy_from_slice(tag.as_ref());
            }
            fn open(&self, seq: u64, aad: &[u8; 8], buf: &mut [u8], len: usize) -> bool {
                let n = aead::Nonce::assume_unique_for_key(nonce12(seq));
                self.0
                    .open_in_place(n, aead::Aad::from(aad), &mut buf[..len + 16])
                    .is_ok()
            }
        }
    };
}

mod awslc {
    use super::*;
    use aws_lc_rs::{aead, cipher, hmac};

    ring_api_aead!();

    pub struct Cbc {
        enc: cipher::EncryptingKey,
        dec: cipher::DecryptingKey,
        mac: hmac::Key,
        icv: usize,
    }

    impl Cbc {
        pub fn new(alg: Alg) -> Cbc {
            let (c, h, hk) = match alg {
                Alg::Aes128CbcHmacSha1 => {
                    (&cipher::AES_128, hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, 20)
                }
                Alg::Aes128CbcHmacSha256 => (&cipher::AES_128, hmac::HMAC_SHA256, 32),
                _ => (&cipher::AES_256, hmac::HMAC_SHA512, 64),
            };
            let key = || cipher::UnboundCipherKey::new(c, &KEY[..alg.key_len()]).expect("key");
            Cbc {
                enc: cipher::EncryptingKey::cbc(key()).expect("CBC key"),
                dec: cipher::DecryptingKey::cbc(key()).expect("CBC key"),
                mac: hmac::Key::new(h, &AUTH_KEY[..hk]),
                icv: alg.icv_len(),
            }
        }

        fn mac(&self, aad: &[u8; 8], iv: &[u8; 16], ct: &[u8]) -> hmac::Tag {
            let mut m = hmac::Context::with_key(&self.mac);
            m.update(aad);
            m.update(iv);
            m.update(ct);
            m.sign()
        }
    }

    impl Suite for Cbc {
        fn seal(&self, seq: u64, aad: &[u8; 8], buf: &mut [u8], len: usize) {
            let iv = iv16(seq);
            let (data, icv) = buf.split_at_mut(len);
            self.enc
                .less_safe_encrypt(data, cipher::EncryptionContext::Iv128(iv.into()))
                .expect("CBC encrypt");
            let t = self.mac(aad, &iv, data);
            icv[..self.icv].copy_from_slice(&t.as_ref()[..self.icv]);
        }
        fn open(&self, seq: u64, aad: &[u8; 8], buf: &mut [u8], len: usize) -> bool {
            let iv = iv16(seq);
            let (data, icv) = buf.split_at_mut(len);
            let t = self.mac(aad, &iv, data);
            if aws_lc_rs::constant_time::verify_slices_are_equal(
                &t.as_ref()[..self.icv],
                &icv[..self.icv],
            )
            .is_err()
            {
                return false;
            }
            self.dec
                .decrypt(data, cipher::DecryptionContext::Iv128(iv.into()))
                .is_ok()
        }
    }
}

mod ring_ {
    use super::*;
    use ring::aead;

    ring_api_aead!();
}

mod rc {
    use super::*;
    use aes_gcm::aead::{AeadInOut, KeyInit};
    use cbc::cipher::{Array, BlockModeDecrypt, BlockModeEncrypt, InnerIvInit};
    use hmac::Mac;

    pub struct Aead<A>(A);

    pub fn aead(alg: Alg) -> Box<dyn Suite> {
        let k = &KEY[..alg.key_len()];
        match alg {
            Alg::Aes128Gcm => Box::new(Aead(aes_gcm::Aes128Gcm::new_from_slice(k).expect("key"))),
            Alg::Aes256Gcm => Box::new(Aead(aes_gcm::Aes256Gcm::new_from_slice(k).expect("key"))),
            _ => Box::new(Aead(
                chacha20poly1305::ChaCha20Poly1305::new_from_slice(k).expect("key"),
            )),
        }
    }

    impl<A: AeadInOut> Suite for Aead<A> {
        fn seal(&self, seq: u64, aad: &[u8; 8], buf: &mut [u8], len: usize) {
            let n = aes_gcm::aead::Nonce::<A>::try_from(&nonce12(seq)[..]).expect("nonce");
            let (data, icv) = buf.split_at_mut(len);
            let tag = self
                .0
                .encrypt_inout_detached(&n, aad, data.into())
                .expect("seal");
            icv[..16].copy_from_slice(&tag);
        }
        fn open(&self, seq: u64, aad: &[u8; 8], buf: &mut [u8], len: usize) -> bool {
            let n = aes_gcm::aead::Nonce::<A>::try_from(&nonce12(seq)[..]).expect("nonce");
            let (data, icv) = buf.split_at_mut(len);
            let Ok(tag) = aes_gcm::aead::Tag::<A>::try_from(&icv[..16]) else {
                return false;
            };
            self.0
                .decrypt_inout_detached(&n, aad, data.into(), &tag)
                .is_ok()
        }
    }

    /// AES-CBC with `C` (expanded once; each packet copies the round keys) and the HMAC
    /// of `M` (its keyed state, cloned per packet).
    pub struct Cbc<E, D, M> {
        enc: E,
        dec: D,
        mac: M,
        icv: usize,
    }

    pub fn cbc(alg: Alg) -> Box<dyn Suite> {
        use aes::{Aes128Dec, Aes128Enc, Aes256Dec, Aes256Enc};
        let k = &KEY[..alg.key_len()];
        let icv = alg.icv_len();
        match alg {
            Alg::Aes128CbcHmacSha1 => Box::new(Cbc {
                enc: Aes128Enc::new_from_slice(k).expect("key"),
                dec: Aes128Dec::new_from_slice(k).expect("key"),
                mac: hmac::Hmac::<sha1::Sha1>::new_from_slice(&AUTH_KEY[..20]).expect("key"),
                icv,
            }),
            Alg::Aes128CbcHmacSha256 => Box::new(Cbc {
                enc: Aes128Enc::new_from_slice(k).expect("key"),
                dec: Aes128Dec::new_from_slice(k).expect("key"),
                mac: hmac::Hmac::<sha2::Sha256>::new_from_slice(&AUTH_KEY[..32]).expect("key"),
                icv,
            }),
            _ => Box::new(Cbc {
                enc: Aes256Enc::new_from_slice(k).expect("key"),
                dec: Aes256Dec::new_from_slice(k).expect("key"),
                mac: hmac::Hmac::<sha2::Sha512>::new_from_slice(&AUTH_KEY[..64]).expect("key"),
                icv,
            }),
        }
    }

    impl<E, D, M> Cbc<E, D, M>
    where
        M: Mac + Clone,
    {
        fn mac(&self, aad: &[u8; 8], iv: &[u8; 16], ct: &[u8]) -> M {
            let mut m = self.mac.clone();
            m.update(aad);
            m.update(iv);
            m.update(ct);
            m
        }
    }

    impl<E, D, M> Suite for Cbc<E, D, M>
    where
        E: cbc::cipher::BlockCipherEncrypt<BlockSize = cbc::cipher::consts::U16> + Clone,
        D: cbc::cipher::BlockCipherDecrypt<BlockSize = cbc::cipher::consts::U16> + Clone,
        M: Mac + Clone,
    {
        fn seal(&self, seq: u64, aad: &[u8; 8], buf: &mut [u8], len: usize) {
            let iv = iv16(seq);
            let (data, icv) = buf.split_at_mut(len);
            let (blocks, rest) = Array::slice_as_chunks_mut(data);
            assert!(rest.is_empty(), "CBC takes whole blocks");
            cbc::Encryptor::<E>::inner_iv_init(self.enc.clone(), &iv.into()).encrypt_blocks(blocks);
            let t = self.mac(aad, &iv, data).finalize().into_bytes();
            icv[..self.icv].copy_from_slice(&t[..self.icv]);
        }
        fn open(&self, seq: u64, aad: &[u8; 8], buf: &mut [u8], len: usize) -> bool {
            let iv = iv16(seq);
            let (data, icv) = buf.split_at_mut(len);
            if self
                .mac(aad, &iv, data)
                .verify_truncated_left(&icv[..self.icv])
                .is_err()
            {
                return false;
            }
            let (blocks, rest) = Array::slice_as_chunks_mut(data);
            if !rest.is_empty() {
                return false;
            }
            cbc::Decryptor::<D>::inner_iv_init(self.dec.clone(), &iv.into()).decrypt_blocks(blocks);
            true
        }
    }
}

/// The suite of `lib` for `alg`, keyed; None where the crate lacks the algorithm (ring has
/// no AES-CBC).
pub fn suite(lib: Lib, alg: Alg) -> Option<Box<dyn Suite>> {
    Some(match (lib, alg.cbc()) {
        (Lib::AwsLcRs, false) => Box::new(awslc::Aead::new(alg)),
        (Lib::AwsLcRs, true) => Box::new(awslc::Cbc::new(alg)),
        (Lib::Ring, false) => Box::new(ring_::Aead::new(alg)),
        (Lib::Ring, true) => return None,
        (Lib::RustCrypto, false) => rc::aead(alg),
        (Lib::RustCrypto, true) => rc::cbc(alg),
    })
}

/// Settings.
#[derive(Clone, Debug)]
pub struct CryptoOptions {
    /// Payload sizes (bytes).
    pub sizes: Vec<usize>,
    /// CPU seconds per measurement (one crate, algorithm, size and direction).
    pub secs: f64,
    /// Algorithms.
    pub algs: Vec<Alg>,
    /// Run `openssl speed` as the reference.
    pub openssl: bool,
}

impl Default for CryptoOptions {
    fn default() -> Self {
        CryptoOptions {
            sizes: vec![64, 512, 1400],
            secs: 0.3,
            algs: Alg::ALL.to_vec(),
            openssl: true,
        }
    }
}

/// One direction of one measurement.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Rate {
    /// Packets.
    pub packets: u64,
    /// CPU seconds of the thread.
    pub cpu_secs: f64,
    /// Wall-clock seconds.
    pub wall_secs: f64,
    /// Payload Gbit per CPU second: the per-core rate.
    pub gbps: f64,
    /// CPU nanoseconds per packet.
    pub ns_per_packet: f64,
}

impl Rate {
    fn new(packets: u64, size: usize, cpu_secs: f64, wall_secs: f64) -> Rate {
        Rate {
            packets,
            cpu_secs,
            wall_secs,
            gbps: packets as f64 * size as f64 * 8.0 / cpu_secs / 1e9,
            ns_per_packet: cpu_secs * 1e9 / packets as f64,
        }
    }
}

/// One crate, algorithm and size.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CryptoRow {
    /// Crate.
    pub lib: Lib,
    /// Algorithm.
    pub alg: Alg,
    /// Payload bytes.
    pub size: usize,
    /// Encrypt and ICV.
    pub seal: Rate,
    /// ICV check and decrypt (with the copy of the packet into the work buffer).
    pub open: Rate,
    /// Seal GB/s (payload bytes, 1e9) over openssl's in the same run (for CBC+HMAC,
    /// openssl's cipher and HMAC measured apart and combined as 1/(1/a + 1/b)).
    pub vs_openssl: Option<f64>,
}

/// `openssl speed` on the same core, encrypt only.
#[derive(Clone, Debug, serde::Serialize)]
pub struct OpensslRow {
    /// Algorithm.
    pub alg: Alg,
    /// Payload bytes.
    pub size: usize,
    /// The cipher (`openssl speed -evp`) in GB/s (1e9 bytes per second).
    pub cipher_gb_per_s: f64,
    /// The HMAC (`openssl speed -hmac`) in GB/s, for CBC suites.
    pub hmac_gb_per_s: Option<f64>,
    /// Both, as one pass after the other would run: 1/(1/cipher + 1/hmac).
    pub gb_per_s: f64,
    /// In Gbit/s.
    pub gbps: f64,
}

/// The report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CryptoReport {
    /// CPU model.
    pub cpu: String,
    /// CPUs.
    pub nproc: usize,
    /// The core everything ran on.
    pub core: usize,
    /// 1-minute load average at the start.
    pub loadavg: f64,
    /// CPU seconds per measurement.
    pub secs: f64,
    /// `openssl version`, when it ran.
    pub openssl_version: Option<String>,
    /// The crates' rows.
    pub rows: Vec<CryptoRow>,
    /// The reference.
    pub openssl: Vec<OpensslRow>,
}

fn time_seal(s: &dyn Suite, size: usize, len: usize, icv: usize, secs: f64) -> Rate {
    let mut buf = vec![0x5au8; len + icv];
    let mut seq = 1u64;
    let (c0, w0) = (thread_cpu(), std::time::Instant::now());
    loop {
        for _ in 0..BATCH {
            let a = aad(seq);
            s.seal(seq, &a, black_box(&mut buf), len);
            seq += 1;
        }
        let c = thread_cpu() - c0;
        if c >= secs {
            return Rate::new(seq - 1, size, c, w0.elapsed().as_secs_f64());
        }
    }
}

fn time_open(
    s: &dyn Suite,
    size: usize,
    len: usize,
    icv: usize,
    secs: f64,
) -> anyhow::Result<Rate> {
    let stride = len + icv;
    let mut pool = vec![0u8; POOL * stride];
    for (i, p) in pool.chunks_mut(stride).enumerate() {
        p[..len]
            .iter_mut()
            .enumerate()
            .for_each(|(j, b)| *b = (i + j) as u8);
        let seq = i as u64 + 1;
        s.seal(seq, &aad(seq), p, len);
    }
    let mut buf = vec![0u8; stride];
    let mut n = 0u64;
    let mut bad = 0u64;
    let (c0, w0) = (thread_cpu(), std::time::Instant::now());
    loop {
        for _ in 0..BATCH {
            let i = (n % POOL as u64) as usize;
            let seq = i as u64 + 1;
            buf.copy_from_slice(&pool[i * stride..(i + 1) * stride]);
            let a = aad(seq);
            bad += u64::from(!s.open(seq, &a, black_box(&mut buf), len));
            n += 1;
        }
        let c = thread_cpu() - c0;
        if c >= secs {
            if bad > 0 {
                bail!("{bad} of {n} packets failed to open");
            }
            return Ok(Rate::new(n, size, c, w0.elapsed().as_secs_f64()));
        }
    }
}

/// Parses the last "type ... bytes" table of `openssl speed`: the figure (1000s of bytes
/// per second) of the row whose name starts with `row`, in GB/s.
pub fn parse_openssl_speed(out: &str, row: &str) -> Option<f64> {
    let line = out.lines().rev().find(|l| {
        l.to_ascii_lowercase()
            .starts_with(&row.to_ascii_lowercase())
    })?;
    let v = line.split_whitespace().last()?;
    let k: f64 = v.trim_end_matches('k').parse().ok()?;
    Some(k * 1e3 / 1e9)
}

fn openssl_speed(core: usize, args: &[&str], size: usize) -> anyhow::Result<String> {
    let out = Command::new("taskset")
        .arg("-c")
        .arg(core.to_string())
        .arg("openssl")
        .arg("speed")
        .args(args)
        .args(["-bytes", &size.to_string(), "-seconds", "1"])
        .output()
        .context("taskset openssl speed (Debian packages util-linux and openssl)")?;
    if !out.status.success() {
        bail!(
            "openssl speed {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn openssl_rows(
    core: usize,
    algs: &[Alg],
    sizes: &[usize],
    progress: &mut impl FnMut(&str),
) -> anyhow::Result<(String, Vec<OpensslRow>)> {
    let v = Command::new("openssl")
        .arg("version")
        .output()
        .context("openssl is not installed (Debian package openssl)")?;
    let version = String::from_utf8_lossy(&v.stdout).trim().to_string();
    let mut rows = Vec::new();
    for &alg in algs {
        let (c, h) = alg.openssl();
        for &size in sizes {
            progress(&format!("openssl speed {} {} bytes", alg.name(), size));
            // CBC at the size the crates encrypt (whole blocks).
            let csize = alg.data_len(size);
            let out = openssl_speed(core, &["-evp", c], csize)?;
            let cipher = parse_openssl_speed(&out, c)
                .with_context(|| format!("no {c} row in openssl speed's output:\n{out}"))?
                * size as f64
                / csize as f64;
            let hmac = match h {
                Some(d) => {
                    let out = openssl_speed(core, &["-hmac", d], size)?;
                    Some(
                        parse_openssl_speed(&out, "hmac(")
                            .with_context(|| format!("no hmac row in:\n{out}"))?,
                    )
                }
                None => None,
            };
            let gb = match hmac {
                Some(m) => 1.0 / (1.0 / cipher + 1.0 / m),
                None => cipher,
            };
            rows.push(OpensslRow {
                alg,
                size,
                cipher_gb_per_s: cipher,
                hmac_gb_per_s: hmac,
                gb_per_s: gb,
                gbps: gb * 8.0,
            });
        }
    }
    Ok((version, rows))
}

fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// Runs the benchmark; `progress` hears what is going on.
pub fn run(opts: &CryptoOptions, mut progress: impl FnMut(&str)) -> anyhow::Result<CryptoReport> {
    if opts.sizes.is_empty() || opts.sizes.iter().any(|&s| s == 0 || s > 65_000) {
        bail!("--sizes takes payload sizes from 1 to 65000 bytes, e.g. --sizes 64,512,1400");
    }
    if opts.algs.is_empty() {
        bail!("no algorithms to measure");
    }
    if !(opts.secs.is_finite() && opts.secs > 0.0 && opts.secs <= 60.0) {
        bail!("--secs must be between 0 and 60, got {}", opts.secs);
    }
    let core = crate::dpdk::bench_core();
    let load = loadavg();
    // Before pinning, which narrows what available_parallelism sees.
    let nproc = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (openssl_version, openssl) = if opts.openssl {
        let (v, r) = openssl_rows(core, &opts.algs, &opts.sizes, &mut progress)?;
        (Some(v), r)
    } else {
        (None, Vec::new())
    };
    let _pin = crate::lpm::Pin::to(core)?;
    let mut rows = Vec::new();
    for &alg in &opts.algs {
        for lib in Lib::ALL {
            let Some(s) = suite(lib, alg) else { continue };
            for &size in &opts.sizes {
                progress(&format!("{} {} {} bytes", lib.name(), alg.name(), size));
                let len = alg.data_len(size);
                let seal = time_seal(&*s, size, len, alg.icv_len(), opts.secs);
                let open = time_open(&*s, size, len, alg.icv_len(), opts.secs)
                    .with_context(|| format!("{} {}", lib.name(), alg.name()))?;
                let vs_openssl = openssl
                    .iter()
                    .find(|o| o.alg == alg && o.size == size)
                    .map(|o| seal.gbps / o.gbps);
                rows.push(CryptoRow {
                    lib,
                    alg,
                    size,
                    seal,
                    open,
                    vs_openssl,
                });
            }
        }
    }
    Ok(CryptoReport {
        cpu: cpu_model(),
        nproc,
        core,
        loadavg: load,
        secs: opts.secs,
        openssl_version,
        rows,
        openssl,
    })
}

/// Human-readable table.
pub fn format_table(r: &CryptoReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "ESP ciphers from memory: {}, {} CPUs, core {}, load {:.2}, {} CPU s per figure",
        r.cpu, r.nproc, r.core, r.loadavg, r.secs
    );
    let _ = writeln!(
        o,
        "  payload Gbit/s per CPU second of the thread (per core), CPU ns per packet; 8-byte AAD; open includes copying the packet in"
    );
    let _ = writeln!(
        o,
        "{:<28} {:<11} {:>6} {:>18} {:>18} {:>9}",
        "algorithm", "crate", "bytes", "seal", "open", "/openssl"
    );
    for alg in Alg::ALL {
        let mut any = false;
        for x in r.rows.iter().filter(|x| x.alg == alg) {
            any = true;
            let _ = writeln!(
                o,
                "{:<28} {:<11} {:>6} {:>18} {:>18} {:>9}",
                alg.name(),
                x.lib.name(),
                x.size,
                format!("{:.2}G {:.0}ns", x.seal.gbps, x.seal.ns_per_packet),
                format!("{:.2}G {:.0}ns", x.open.gbps, x.open.ns_per_packet),
                x.vs_openssl.map_or("-".into(), |v| format!("{v:.2}x")),
            );
        }
        for x in r.openssl.iter().filter(|x| x.alg == alg) {
            any = true;
            let _ = writeln!(
                o,
                "{:<28} {:<11} {:>6} {:>18} {:>18} {:>9}",
                alg.name(),
                "openssl",
                x.size,
                format!("{:.2}G {:.2}GB/s", x.gbps, x.gb_per_s),
                "-",
                "1.00x"
            );
        }
        if any && alg.cbc() && !r.rows.iter().any(|x| x.alg == alg && x.lib == Lib::Ring) {
            let _ = writeln!(o, "{:<28} ring: no AES-CBC (HMAC only)", alg.name());
        }
    }
    if let Some(v) = &r.openssl_version {
        let _ = writeln!(
            o,
            "openssl: {v}, `openssl speed -evp` encrypt on the same core; CBC rows combine -evp aes-*-cbc and -hmac"
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// Counts this thread's allocations, to show the timed loop makes none.
    struct Counting;
    thread_local!(static ALLOCS: Cell<u64> = const { Cell::new(0) });
    // SAFETY: forwards to the system allocator; only counts.
    unsafe impl std::alloc::GlobalAlloc for Counting {
        unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
            let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
            // SAFETY: same contract as ours.
            unsafe { std::alloc::System.alloc(l) }
        }
        unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
            // SAFETY: same contract as ours.
            unsafe { std::alloc::System.dealloc(p, l) }
        }
    }
    #[global_allocator]
    static A: Counting = Counting;

    fn sealed(lib: Lib, alg: Alg, size: usize, seq: u64) -> Option<Vec<u8>> {
        let s = suite(lib, alg)?;
        let len = alg.data_len(size);
        let mut buf: Vec<u8> = (0..len + alg.icv_len()).map(|i| i as u8).collect();
        s.seal(seq, &aad(seq), &mut buf, len);
        Some(buf)
    }

    #[test]
    fn crates_round_trip_and_agree() {
        for alg in Alg::ALL {
            for size in [16, 64, 1400] {
                let seq = 0x1_0000_0007;
                let mut outs = Vec::new();
                for lib in Lib::ALL {
                    let Some(mut buf) = sealed(lib, alg, size, seq) else {
                        assert!(lib == Lib::Ring && alg.cbc());
                        continue;
                    };
                    let len = alg.data_len(size);
                    let plain: Vec<u8> = (0..len).map(|i| i as u8).collect();
                    assert_ne!(&buf[..len], &plain[..], "{lib:?} {alg:?} encrypts");
                    outs.push((lib, buf.clone()));
                    let s = suite(lib, alg).unwrap();
                    // A wrong sequence number (AAD and nonce) or a flipped bit fails.
                    let mut bad = buf.clone();
                    assert!(!s.open(seq + 1, &aad(seq + 1), &mut bad, len));
                    let mut bad = buf.clone();
                    bad[len / 2] ^= 1;
                    assert!(!s.open(seq, &aad(seq), &mut bad, len));
                    let mut bad = buf.clone();
                    bad[len] ^= 0x80;
                    assert!(!s.open(seq, &aad(seq), &mut bad, len));
                    assert!(s.open(seq, &aad(seq), &mut buf, len), "{lib:?} {alg:?}");
                    assert_eq!(&buf[..len], &plain[..], "{lib:?} {alg:?} round-trips");
                }
                assert!(outs.len() >= 2);
                for (lib, o) in &outs[1..] {
                    assert_eq!(
                        o, &outs[0].1,
                        "{lib:?} and {:?} differ on {alg:?}",
                        outs[0].0
                    );
                }
                // And each opens the others' packets.
                for (_, o) in &outs {
                    for lib in Lib::ALL {
                        if let Some(s) = suite(lib, alg) {
                            let mut b = o.clone();
                            assert!(s.open(seq, &aad(seq), &mut b, alg.data_len(size)));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn gcm_matches_a_known_answer() {
        // AES-128-GCM with the zero key/nonce over 16 zero bytes and no AAD (McGrew-Viega
        // test case 2) through aws-lc-rs, which the other crates agree with above.
        use aws_lc_rs::aead;
        let k =
            aead::LessSafeKey::new(aead::UnboundKey::new(&aead::AES_128_GCM, &[0; 16]).unwrap());
        let mut b = [0u8; 16];
        let t = k
            .seal_in_place_separate_tag(
                aead::Nonce::assume_unique_for_key([0; 12]),
                aead::Aad::empty(),
                &mut b,
            )
            .unwrap();
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        assert_eq!(hex(&b), "0388dace60b6a392f328c2b971b2fe78");
        assert_eq!(hex(t.as_ref()), "ab6e47d42cec13bdf53a67b21257bddf");
    }

    #[test]
    fn timed_loops_do_not_allocate() {
        for alg in Alg::ALL {
            for lib in Lib::ALL {
                let Some(s) = suite(lib, alg) else { continue };
                let len = alg.data_len(1400);
                let mut buf = vec![0u8; len + alg.icv_len()];
                let before = ALLOCS.with(|c| c.get());
                for seq in 1..100 {
                    s.seal(seq, &aad(seq), &mut buf, len);
                    assert!(s.open(seq, &aad(seq), &mut buf, len));
                }
                let n = ALLOCS.with(|c| c.get()) - before;
                assert_eq!(n, 0, "{lib:?} {alg:?} allocated {n} times");
            }
        }
    }

    #[test]
    fn parses_openssl_speed() {
        let out = "The 'numbers' are in 1000s of bytes per second processed.\n\
                   type           1400 bytes\n\
                   AES-128-GCM    2395420.26k\n";
        let g = parse_openssl_speed(out, "aes-128-gcm").unwrap();
        assert!((g - 2.39542026).abs() < 1e-6);
        let out = "type         64 bytes\nhmac(sha256)  812345.67k\n";
        assert!(parse_openssl_speed(out, "hmac(").is_some());
    }

    #[test]
    fn small_run_has_every_row() {
        let r = run(
            &CryptoOptions {
                sizes: vec![64, 1400],
                secs: 0.002,
                algs: Alg::ALL.to_vec(),
                openssl: false,
            },
            |_| {},
        )
        .unwrap();
        // 3 AEADs x 3 crates + 3 CBC suites x 2 crates, at 2 sizes.
        assert_eq!(r.rows.len(), (9 + 6) * 2);
        for x in &r.rows {
            assert!(x.seal.gbps > 0.0 && x.open.gbps > 0.0, "{x:?}");
            assert!(x.seal.ns_per_packet > 0.0 && x.open.ns_per_packet > 0.0);
        }
        let j = serde_json::to_string(&r).unwrap();
        assert!(j.contains(r#""alg":"aes-128-gcm""#) && j.contains(r#""lib":"rustcrypto""#));
        let t = format_table(&r);
        assert!(t.contains("ring: no AES-CBC"));
        assert!(t.contains("aws-lc-rs") && t.contains("rustcrypto"));
    }
}
