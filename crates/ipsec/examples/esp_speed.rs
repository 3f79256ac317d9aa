//! ESP encrypt and decrypt speed of the codec on one core, from memory, next to the raw
//! aws-lc-rs AEAD on the same buffers in the same run:
//! `cargo run --release -p ipsec --example esp_speed [seconds per figure]`.
//!
//! AES-128-GCM, tunnel mode IPv4 in IPv4, one SA, batches of 64 packets through
//! `encrypt_batch` / `decrypt_batch`. Sizes are inner IPv4 packet bytes: 64, 1400, and an
//! IMIX-like mix (7 x 64, 4 x 576, 1 x 1400 per 12 packets). Rates are inner bytes per
//! second of wall time: run it pinned (`taskset -c 1`) on a core as idle as can be, and
//! read the ratios, which hold better than the absolute figures on a shared machine.
//! "raw" seals (or opens) the same number of bytes in place with one
//! `LessSafeKey` call per packet: ESP's cipher work without its headers, padding, replay
//! or counters. Decrypt copies each sealed packet into the work buffer first (the raw open
//! does the same copy), as decryption consumes it.

use std::hint::black_box;
use std::time::{Duration, Instant};

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM};
use ipsec::{
    decrypt_batch, encrypt_batch, Direction, Encryption, Integrity, Mode, Packet, Sa, SaConfig,
};

const HEADROOM: usize = 128;
const BATCH: usize = 64;
const FRAME: usize = 2048;
/// Batches of sealed packets decrypt cycles through (the raw open cycles through as many):
/// about 0.7 MB at 1400 bytes, so both read their input from the same cache level.
const POOL: usize = 8;

/// An IPv4 UDP packet of `len` bytes (at least 28).
fn packet(len: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..len.saturating_sub(28)).map(|i| i as u8).collect();
    ipsec::testing::udp4(&payload, 0)
}

fn sa(dir: Direction) -> Sa {
    let key: Vec<u8> = (0..20).collect();
    let mut c = SaConfig::new(
        0x1001,
        dir,
        Encryption::AesGcm128,
        &key,
        Integrity::None,
        &[],
    );
    c.mode = Mode::Tunnel {
        src: "192.0.2.1".parse().unwrap(),
        dst: "192.0.2.2".parse().unwrap(),
    };
    Sa::new(&c).unwrap()
}

/// Runs `f` (one batch, returning its bytes) for about `secs`; Gbit/s.
fn rate(secs: f64, mut f: impl FnMut() -> usize) -> f64 {
    for _ in 0..50 {
        f();
    }
    let t = Instant::now();
    let mut bytes = 0usize;
    let until = Duration::from_secs_f64(secs);
    while t.elapsed() < until {
        for _ in 0..16 {
            bytes += f();
        }
    }
    bytes as f64 * 8.0 / t.elapsed().as_secs_f64() / 1e9
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let profiles: [(&str, Vec<usize>); 3] = [
        ("ipv4-64", vec![64]),
        ("ipv4-1400", vec![1400]),
        ("imix", [vec![64; 7], vec![576; 4], vec![1400]].concat()),
    ];
    let key =
        LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &(0..16).collect::<Vec<u8>>()).unwrap());
    println!(
        "ESP AES-128-GCM tunnel 4in4, 1 SA, batches of {BATCH}, {secs} s per figure, Gbit/s of inner packets"
    );
    println!(
        "{:<10} {:>9} {:>9} {:>6} {:>9} {:>9} {:>6}",
        "profile", "encrypt", "raw seal", "ratio", "decrypt", "raw open", "ratio"
    );
    for (name, sizes) in profiles {
        let lens: Vec<usize> = (0..BATCH).map(|i| sizes[i % sizes.len()]).collect();
        let pkts: Vec<Vec<u8>> = lens.iter().map(|&l| packet(l)).collect();
        let mut frames = vec![vec![0u8; FRAME]; BATCH];
        let total: usize = lens.iter().sum();

        // Encrypt: each batch starts from the clear packets (copied in: the copy is small
        // next to the cipher and is in the raw figure too).
        let mut tx = sa(Direction::Outbound);
        let enc = rate(secs, || {
            for (f, p) in frames.iter_mut().zip(&pkts) {
                f[HEADROOM..HEADROOM + p.len()].copy_from_slice(p);
            }
            let mut batch: Vec<Packet<'_>> = frames
                .iter_mut()
                .zip(&lens)
                .map(|(f, &l)| Packet::new(f, HEADROOM, l))
                .collect();
            assert_eq!(encrypt_batch(&mut tx, &mut batch), BATCH);
            black_box(&batch);
            total
        });
        let mut seq = 0u64;
        let raw_seal = rate(secs, || {
            for (f, p) in frames.iter_mut().zip(&pkts) {
                f[HEADROOM..HEADROOM + p.len()].copy_from_slice(p);
                seq += 1;
                let mut n = [0u8; 12];
                n[4..].copy_from_slice(&seq.to_be_bytes());
                let (data, tag) = f[HEADROOM..].split_at_mut(p.len());
                let t = key
                    .seal_in_place_separate_tag(
                        Nonce::assume_unique_for_key(n),
                        Aad::from(&[0u8; 8]),
                        data,
                    )
                    .unwrap();
                tag[..16].copy_from_slice(t.as_ref());
            }
            total
        });

        // Decrypt: sealed packets (a pool of batches, so the replay window sees new
        // numbers), copied into the work frames.
        let pool = POOL;
        let mut tx = sa(Direction::Outbound);
        let mut sealed = Vec::new();
        for _ in 0..pool {
            for p in &pkts {
                let mut f = vec![0u8; FRAME];
                f[HEADROOM..HEADROOM + p.len()].copy_from_slice(p);
                let mut b = [Packet::new(&mut f, HEADROOM, p.len())];
                encrypt_batch(&mut tx, &mut b);
                let (s, l) = (b[0].start, b[0].len);
                sealed.push((f, s, l));
            }
        }
        let mut rx = sa(Direction::Inbound);
        let mut round = 0usize;
        let mut spans = [(0usize, 0usize); BATCH];
        let dec = rate(secs, || {
            if round == pool {
                // Past the pool: a new receiver, so the same packets are new again.
                rx = sa(Direction::Inbound);
                round = 0;
            }
            for (i, f) in frames.iter_mut().enumerate() {
                let (src, s, l) = &sealed[round * BATCH + i];
                f[*s..s + l].copy_from_slice(&src[*s..s + l]);
                spans[i] = (*s, *l);
            }
            round += 1;
            let mut batch: Vec<Packet<'_>> = frames
                .iter_mut()
                .zip(&spans)
                .map(|(f, &(s, l))| Packet::new(f, s, l))
                .collect();
            assert_eq!(decrypt_batch(&mut rx, &mut batch), BATCH);
            black_box(&batch);
            total
        });
        // Raw open of the same byte counts: seal once per packet, then copy and open.
        let mut rawpool = Vec::new();
        for (i, p) in pkts.iter().cycle().take(POOL * BATCH).enumerate() {
            let mut f = vec![0u8; p.len() + 16];
            f[..p.len()].copy_from_slice(p);
            let mut n = [0u8; 12];
            n[4..].copy_from_slice(&(i as u64).to_be_bytes());
            let (data, tag) = f.split_at_mut(p.len());
            let t = key
                .seal_in_place_separate_tag(
                    Nonce::assume_unique_for_key(n),
                    Aad::from(&[0u8; 8]),
                    data,
                )
                .unwrap();
            tag.copy_from_slice(t.as_ref());
            rawpool.push(f);
        }
        let mut rround = 0usize;
        let raw_open = rate(secs, || {
            let base = rround % POOL * BATCH;
            rround += 1;
            for (j, f) in frames.iter_mut().enumerate() {
                let i = base + j;
                let src = &rawpool[i];
                f[HEADROOM..HEADROOM + src.len()].copy_from_slice(src);
                let mut n = [0u8; 12];
                n[4..].copy_from_slice(&(i as u64).to_be_bytes());
                key.open_in_place(
                    Nonce::assume_unique_for_key(n),
                    Aad::from(&[0u8; 8]),
                    &mut f[HEADROOM..HEADROOM + src.len()],
                )
                .unwrap();
            }
            total
        });
        println!(
            "{name:<10} {enc:>9.2} {raw_seal:>9.2} {:>6.2} {dec:>9.2} {raw_open:>9.2} {:>6.2}",
            enc / raw_seal,
            dec / raw_open
        );
    }
}
