//! `ferrouter-lab bench ipsec`: ESP encryption and decryption from memory (issue 26), one
//! pinned core, per algorithm, traffic profile and number of SAs, next to the raw AEAD
//! speed of the same crate (aws-lc-rs) on the same bytes in the same run.
//!
//! What a cell (algorithm, SA count, profile) measures:
//! * **The SAs**: N outbound and N inbound SAs, tunnel mode IPv4 in IPv4 (192.0.2.1 to
//!   192.0.2.2), each keyed with its own keys, the default replay window, no ESN or NAT-T,
//!   each in an `SaBox` (huge-page memory, as in the data plane's SAD), kept in two
//!   `Vec<SaBox>`. They are built once per algorithm and SA count, and the
//!   resident memory they add (`/proc/self/statm`) is reported per SA for the largest
//!   count.
//! * **The packets**: a pool of at least [`POOL_MIN`] packets of the profile, in the order
//!   of the tester's deterministic cycle (`tester::profile`: the profiles' exact shares),
//!   each at [`HEADROOM`] in a frame of its own ([`FRAME_SIZE`] bytes, more for jumbo
//!   sizes; the frames in transparent huge pages, as the data plane's packet memory is on
//!   huge pages). Profile sizes are Ethernet frames with the FCS, as everywhere in the tester and
//!   the benches: the IP packet ESP encrypts is 18 bytes shorter (`ipv4-64` is a 46-byte
//!   IPv4 packet, `ipv4-1400` 1382 bytes, `imix1` 46, 576 and 1500 bytes). Packets are UDP
//!   datagrams (`ipsec::testing`).
//! * **Grouping**: the SAs take their turns round robin, in a shuffled order (a fixed
//!   random permutation of the N SAs): packet j of a pass belongs to SA order[(base + j)
//!   mod N], base moving on by the pool's size every pass, so every SA is used in turn and
//!   with 100,000 SAs each packet's SA is cold in the caches, as on a gateway with that
//!   many tunnels. Shuffled, because in creation order consecutive packets' SAs would be
//!   neighbours in memory, which the hardware prefetchers follow: traffic does not come
//!   in the order the SAs were made. The pool is handed over in vectors of
//!   [`VECTOR_SIZE`]; within a vector, consecutive packets of the same SA form one
//!   `encrypt_batch` / `decrypt_batch` call, as a data plane grouping its vector by SA
//!   would make them. With one SA a vector is one batch of 256; with more, round robin
//!   makes every batch one packet: the worst case. The SA of each packet is worked out
//!   before the timing (the data plane's SAD lookup is not in these figures). As in the
//!   data plane's ESP nodes, the SA of the batch [`PREFETCH_AHEAD`] on is prefetched
//!   ([`Sa::prefetch`]; inbound also its replay bitmap, half as far ahead) while one
//!   batch is processed.
//! * **One pass**: the clear packets are copied into the frames (not timed), the pool is
//!   encrypted (timed: **encrypt**), and the packets it produced are decrypted by the
//!   inbound SAs (timed: **decrypt**). Decryption thus always gets fresh sequence numbers
//!   (the outbound SAs' counters keep going), which the replay windows accept; every pass
//!   checks that every packet came back at its length, and the first pass of a cell that
//!   it came back byte for byte.
//! * **Raw**: the same pass with the bytes of each packet (CBC: rounded up to whole
//!   blocks, as ESP's padding does) sealed, then opened, in place by aws-lc-rs with one key
//!   (`crypto::suite`: `LessSafeKey` for the AEADs, AES-CBC then HMAC for CBC suites) and
//!   an 8-byte AAD: the cipher alone, without ESP's headers, padding, IV, replay window or
//!   counters. The copy is not timed either.
//!
//! A cell alternates ESP and raw passes, after one of each to warm up, until the timed
//! CPU time of all four figures reaches the cell's seconds. Times are CPU time of the
//! thread (`CLOCK_THREAD_CPUTIME_ID`), the per-core rate, as in `bench crypto`. Rates count
//! the inner packets (the IP packet as given to encrypt, as decrypt gives it back):
//! Gbit/s = inner bytes × 8 / time.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};

use ::ipsec::{
    decrypt_batch, encrypt_batch, Direction, Encryption, Integrity, Mode, Packet, Sa, SaBox,
    SaConfig, PREFETCH_AHEAD,
};
use anyhow::{bail, Context, Result};
use dataplane::buffer::prefetch;
use dataplane::{FRAME_SIZE, HEADROOM, VECTOR_SIZE};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::Serialize;
use tester::profile::{Family, Profile};

use crate::conntrack::{cpu_model, thread_cpu};
use crate::crypto;

/// Packets per pool, at least (rounded up to whole cycles of the profile).
pub const POOL_MIN: usize = 4096;
/// Ethernet header (14) and FCS (4): what a profile's frame size counts beyond the IP
/// packet.
pub const L2_BYTES: usize = 18;
/// Most SAs per cell (two million SAs of up to ~1.7 KB each).
pub const MAX_SAS: usize = 1_000_000;
/// Room left after the packet in a frame: the most ESP appends (padding, trailer, ICV) is
/// 49 bytes.
const TAILROOM: usize = 128;

/// An ESP algorithm as the codec names it, and the raw suite of `bench crypto` that is the
/// same cipher alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Alg {
    /// The encryption name, with `+` and the integrity name for non-AEADs (the codec's
    /// [`Encryption::name`] and [`Integrity::name`]).
    pub name: &'static str,
    /// Encryption.
    pub encryption: Encryption,
    /// Integrity ([`Integrity::None`] for AEADs).
    pub integrity: Integrity,
    /// The same cipher in `bench crypto`.
    pub raw: crypto::Alg,
}

/// Every algorithm the bench knows.
pub const ALGS: [Alg; 6] = [
    Alg {
        name: "aes-128-gcm",
        encryption: Encryption::AesGcm128,
        integrity: Integrity::None,
        raw: crypto::Alg::Aes128Gcm,
    },
    Alg {
        name: "aes-256-gcm",
        encryption: Encryption::AesGcm256,
        integrity: Integrity::None,
        raw: crypto::Alg::Aes256Gcm,
    },
    Alg {
        name: "chacha20-poly1305",
        encryption: Encryption::ChaCha20Poly1305,
        integrity: Integrity::None,
        raw: crypto::Alg::Chacha20Poly1305,
    },
    Alg {
        name: "aes-128-cbc+hmac-sha1-96",
        encryption: Encryption::AesCbc128,
        integrity: Integrity::HmacSha1_96,
        raw: crypto::Alg::Aes128CbcHmacSha1,
    },
    Alg {
        name: "aes-128-cbc+hmac-sha2-256-128",
        encryption: Encryption::AesCbc128,
        integrity: Integrity::HmacSha256_128,
        raw: crypto::Alg::Aes128CbcHmacSha256,
    },
    Alg {
        name: "aes-256-cbc+hmac-sha2-512-256",
        encryption: Encryption::AesCbc256,
        integrity: Integrity::HmacSha512_256,
        raw: crypto::Alg::Aes256CbcHmacSha512,
    },
];

/// Defaults of the command line.
pub const DEFAULT_ALGS: &str = "aes-128-gcm,aes-256-gcm,chacha20-poly1305,aes-128-cbc+hmac-sha1-96";
/// SA counts by default.
pub const DEFAULT_SAS: &str = "1,1000,100000";
/// Profiles by default.
pub const DEFAULT_PROFILES: &str = "ipv4-64,ipv4-1400,imix1";
/// Timed CPU seconds per cell by default.
pub const DEFAULT_SECONDS: &str = "1";

/// The comma-separated items of `s`, each once, in order.
fn items(s: &str) -> Vec<&str> {
    let mut v: Vec<&str> = Vec::new();
    for x in s.split(',').map(str::trim) {
        if !v.contains(&x) {
            v.push(x);
        }
    }
    v
}

/// `--algs`: names of [`ALGS`], comma-separated.
pub fn parse_algs(s: &str) -> Result<Vec<Alg>> {
    items(s)
        .into_iter()
        .map(|x| {
            ALGS.iter().copied().find(|a| a.name == x).with_context(|| {
                let names: Vec<_> = ALGS.iter().map(|a| a.name).collect();
                format!(
                    "--algs: {x:?} is not an algorithm; known: {}",
                    names.join(", ")
                )
            })
        })
        .collect()
}

/// `--sas`: SA counts, comma-separated, 1 to [`MAX_SAS`] (`_` allowed between digits).
pub fn parse_sas(s: &str) -> Result<Vec<usize>> {
    items(s)
        .into_iter()
        .map(|x| {
            let n: usize = x
                .replace('_', "")
                .parse()
                .map_err(|_| anyhow::anyhow!("--sas: {x:?} is not a number"))?;
            if !(1..=MAX_SAS).contains(&n) {
                bail!("--sas: {x:?} is out of range (1 to {MAX_SAS})");
            }
            Ok(n)
        })
        .collect()
}

/// `--profiles`: the tester's profile names (`ipv4-<size>`, `ipv6-<size>`, `imix1`, ...),
/// comma-separated.
pub fn parse_profiles(s: &str) -> Result<Vec<Profile>> {
    items(s)
        .into_iter()
        .map(|x| Profile::parse(x).map_err(|e| anyhow::anyhow!("--profiles: {e}")))
        .collect()
}

/// `--seconds`: timed CPU seconds per cell, more than 0 and at most 60.
pub fn parse_seconds(s: &str) -> Result<f64> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("--seconds: {s:?} is not a number"))?;
    if !(v.is_finite() && v > 0.0 && v <= 60.0) {
        bail!("--seconds: {s:?} is out of range (more than 0, at most 60)");
    }
    Ok(v)
}

/// Batches ahead each SA is prefetched by default: as the data plane's ESP nodes do.
pub const DEFAULT_PREFETCH: usize = PREFETCH_AHEAD;

/// Settings.
#[derive(Clone, Debug)]
pub struct IpsecOptions {
    /// Algorithms.
    pub algs: Vec<Alg>,
    /// SA counts.
    pub sas: Vec<usize>,
    /// Traffic profiles.
    pub profiles: Vec<Profile>,
    /// Timed CPU seconds per cell (ESP encrypt and decrypt, raw seal and open together).
    pub secs: f64,
    /// How many batches ahead each batch's SA is prefetched (0: not at all, to see what
    /// prefetching gains).
    pub prefetch: usize,
}

impl Default for IpsecOptions {
    fn default() -> Self {
        IpsecOptions {
            algs: parse_algs(DEFAULT_ALGS).expect("default algorithms"),
            sas: parse_sas(DEFAULT_SAS).expect("default SA counts"),
            profiles: parse_profiles(DEFAULT_PROFILES).expect("default profiles"),
            secs: parse_seconds(DEFAULT_SECONDS).expect("default seconds"),
            prefetch: PREFETCH_AHEAD,
        }
    }
}

/// Encrypt or decrypt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    /// Outbound: `encrypt_batch`, next to the raw seal.
    Encrypt,
    /// Inbound: `decrypt_batch`, next to the raw open.
    Decrypt,
}

impl Dir {
    /// As in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Dir::Encrypt => "encrypt",
            Dir::Decrypt => "decrypt",
        }
    }
}

/// One figure: an algorithm, direction, profile and SA count.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// [`Alg::name`].
    pub alg: &'static str,
    /// Direction.
    pub dir: Dir,
    /// Profile name.
    pub profile: String,
    /// SAs the packets were spread over.
    pub sas: usize,
    /// Million inner packets per CPU second of the thread.
    pub mpps: f64,
    /// Inner Gbit per CPU second of the thread.
    pub gbps: f64,
    /// aws-lc-rs seal (encrypt) or open (decrypt) of the same bytes with one key, in the
    /// same cell, Gbit per CPU second.
    pub raw_gbps: f64,
    /// `gbps / raw_gbps`.
    pub ratio: f64,
}

/// Resident memory the SAs of one algorithm added, per SA.
#[derive(Clone, Debug, Serialize)]
pub struct SaMemory {
    /// Outbound SAs (cipher context, sequence number, counters).
    pub outbound: f64,
    /// Inbound SAs (cipher context, replay window, counters).
    pub inbound: f64,
}

/// The machine.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// `/proc/cpuinfo`'s model name.
    pub cpu: String,
    /// CPUs available to the process.
    pub nproc: usize,
}

/// The report.
#[derive(Clone, Debug, Serialize)]
pub struct IpsecReport {
    /// CPU and CPU count.
    pub machine: Machine,
    /// The core everything ran on.
    pub core: usize,
    /// 1-minute load average at the start.
    pub loadavg: f64,
    /// Timed CPU seconds per cell.
    pub seconds: f64,
    /// Batches ahead each SA was prefetched (0: not at all).
    pub prefetch: usize,
    /// The figures from memory.
    pub inmemory: Vec<Row>,
    /// Resident bytes per SA by algorithm, measured while building the SAs of the largest
    /// count ([`IpsecReport::memory_sas`]).
    pub memory_per_sa_bytes: BTreeMap<&'static str, SaMemory>,
    /// The SA count [`IpsecReport::memory_per_sa_bytes`] was measured at.
    pub memory_sas: usize,
    /// The live half of issue 26's bench (two gateways, real traffic): not measured here.
    pub runs: Vec<serde_json::Value>,
    /// What `runs` is.
    pub runs_note: &'static str,
}

/// Resident bytes of this process.
fn rss() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<usize>().ok())
        .unwrap_or(0)
        * 4096
}

/// Gives the allocator's free memory back to the system, so that what the next
/// allocations touch shows in [`rss`].
fn trim() {
    // SAFETY: malloc_trim only releases free memory of glibc's heap.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn key(len: usize, i: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|b| (b as u8).wrapping_mul(37).wrapping_add(salt) ^ (i >> (8 * (b % 4))) as u8)
        .collect()
}

/// SAs 0..n of `alg` in direction `dir`: SPI 0x1000 + i, keys of their own.
fn build_sas(alg: Alg, n: usize, dir: Direction) -> Result<Vec<SaBox>> {
    let mut v = Vec::with_capacity(n);
    for i in 0..n {
        let mut c = SaConfig::new(
            0x1000 + i as u32,
            dir,
            alg.encryption,
            &key(alg.encryption.key_len(), i, 11),
            alg.integrity,
            &key(alg.integrity.key_len(), i, 5),
        );
        c.mode = Mode::Tunnel {
            src: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
            dst: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2)),
        };
        v.push(SaBox::new(
            Sa::new(&c).with_context(|| format!("{} SA {i}", alg.name))?,
        ));
    }
    Ok(v)
}

/// `n` zeroed bytes whose whole 2 MiB pages are advised as transparent huge pages
/// (before they are touched): the frames, as the data plane's packet memory is on huge
/// pages. Otherwise, with many SAs, the packets' TLB misses would be the bench's.
fn huge_zeroed(n: usize) -> Vec<u8> {
    const HUGE: usize = 2 << 20;
    let v = vec![0u8; n];
    let start = (v.as_ptr() as usize).next_multiple_of(HUGE);
    let end = (v.as_ptr() as usize + n) & !(HUGE - 1);
    if end > start {
        // SAFETY: [start, end) lies within `v`'s allocation, which is ours; the advice
        // changes how the memory is backed, not what it holds. A failure (no THP) is fine.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
    v
}

/// The pool of one profile: clear packets, and the frames the passes work in.
struct Pool {
    /// Bytes per frame.
    stride: usize,
    frames: Vec<u8>,
    /// The clear packets, one after the other.
    clear: Vec<u8>,
    /// (offset in `clear`, length) per packet.
    spans: Vec<(usize, usize)>,
    /// Inner bytes of one pass.
    bytes: u64,
}

impl Pool {
    fn new(profile: &Profile) -> Pool {
        let kinds = profile.cycle(1);
        let n = POOL_MIN.div_ceil(kinds.len()) * kinds.len();
        let mut clear = Vec::new();
        let mut spans = Vec::with_capacity(n);
        for j in 0..n {
            let k = kinds[j % kinds.len()];
            let ip = usize::from(k.size) - L2_BYTES;
            let hdr = match k.family {
                Family::Ipv4 => 28,
                Family::Ipv6 => 48,
            };
            let payload: Vec<u8> = (0..ip - hdr).map(|b| (b + j) as u8).collect();
            let p = match k.family {
                Family::Ipv4 => ::ipsec::testing::udp4(&payload, 0),
                Family::Ipv6 => ::ipsec::testing::udp6(&payload, 0),
            };
            debug_assert_eq!(p.len(), ip);
            spans.push((clear.len(), p.len()));
            clear.extend_from_slice(&p);
        }
        let max = spans.iter().map(|s| s.1).max().unwrap_or(0);
        let stride = FRAME_SIZE.max((HEADROOM + max + TAILROOM).next_multiple_of(64));
        Pool {
            stride,
            frames: huge_zeroed(n * stride),
            bytes: spans.iter().map(|s| s.1 as u64).sum(),
            clear,
            spans,
        }
    }

    fn len(&self) -> usize {
        self.spans.len()
    }

    /// Copies the clear packets into their frames.
    fn reset(&mut self) {
        for (f, &(o, l)) in self.frames.chunks_mut(self.stride).zip(&self.spans) {
            f[HEADROOM..HEADROOM + l].copy_from_slice(&self.clear[o..o + l]);
        }
    }

    fn is_clear(&self, j: usize, start: usize, len: usize) -> bool {
        let (o, l) = self.spans[j];
        let f = &self.frames[j * self.stride..(j + 1) * self.stride];
        len == l && f.get(start..start + len) == Some(&self.clear[o..o + l])
    }
}

/// Runs of consecutive packets of one SA within each vector: (SA, first, end).
fn runs(sa_of: &[u32], out: &mut Vec<(usize, usize, usize)>) {
    out.clear();
    for v in (0..sa_of.len()).step_by(VECTOR_SIZE) {
        let end = (v + VECTOR_SIZE).min(sa_of.len());
        let mut j = v;
        while j < end {
            let s = sa_of[j];
            let mut k = j + 1;
            while k < end && sa_of[k] == s {
                k += 1;
            }
            out.push((s as usize, j, k));
            j = k;
        }
    }
}

/// Timed CPU seconds and packets of the four figures of a cell.
#[derive(Default)]
struct Times {
    enc: f64,
    dec: f64,
    seal: f64,
    open: f64,
    esp_passes: u64,
    raw_passes: u64,
}

impl Times {
    fn total(&self) -> f64 {
        self.enc + self.dec + self.seal + self.open
    }
}

/// The SAs of a cell: both directions, the order they take their turns in, and whose
/// turn is next.
struct Sas {
    out: Vec<SaBox>,
    inb: Vec<SaBox>,
    order: Vec<u32>,
    next: usize,
    /// Batches ahead each SA is prefetched (0: not at all).
    prefetch: usize,
}

impl Sas {
    /// Outbound SA i with inbound SA i, taking their turns in a shuffled order (fixed by
    /// their number).
    fn with(out: Vec<SaBox>, inb: Vec<SaBox>, prefetch: usize) -> Sas {
        let mut order: Vec<u32> = (0..out.len() as u32).collect();
        order.shuffle(&mut SmallRng::seed_from_u64(out.len() as u64));
        Sas {
            out,
            inb,
            order,
            next: 0,
            prefetch,
        }
    }
}

/// One ESP pass over the pool, the SAs taking their turns from `sas.next` on; adds its
/// times to `t` and checks the packets came back (byte for byte when `check_bytes`).
fn esp_pass(
    pool: &mut Pool,
    sas: &mut Sas,
    sa_of: &mut [u32],
    batches: &mut Vec<(usize, usize, usize)>,
    t: &mut Times,
    check_bytes: bool,
) -> Result<()> {
    let n = sas.order.len();
    for (j, s) in sa_of.iter_mut().enumerate() {
        *s = sas.order[(sas.next + j) % n];
    }
    sas.next = (sas.next + sa_of.len()) % n;
    runs(sa_of, batches);
    pool.reset();
    let stride = pool.stride;
    let mut pkts: Vec<Packet<'_>> = pool
        .frames
        .chunks_mut(stride)
        .zip(&pool.spans)
        .map(|(f, &(_, l))| Packet::new(f, HEADROOM, l))
        .collect();
    // As the data plane's nodes do: the SA of the batch `ahead` on is prefetched while
    // this one is worked on (its box's pointer twice as far ahead, as the SAD's slot;
    // inbound, its replay bitmap half as far ahead, once the SA, which points to it, has
    // come in). 0: none.
    let ahead = if sas.prefetch == 0 {
        usize::MAX / 2
    } else {
        sas.prefetch
    };
    let c0 = thread_cpu();
    let mut enc = 0;
    for (i, &(s, a, b)) in batches.iter().enumerate() {
        if let Some(&(n, _, _)) = batches.get(i + 2 * ahead) {
            prefetch(sas.out.as_ptr().wrapping_add(n).cast());
        }
        if let Some(&(n, _, _)) = batches.get(i + ahead) {
            sas.out[n].prefetch();
        }
        enc += encrypt_batch(&mut sas.out[s], &mut pkts[a..b]);
    }
    let c1 = thread_cpu();
    let mut dec = 0;
    for (i, &(s, a, b)) in batches.iter().enumerate() {
        if let Some(&(n, _, _)) = batches.get(i + 2 * ahead) {
            prefetch(sas.inb.as_ptr().wrapping_add(n).cast());
        }
        if let Some(&(n, _, _)) = batches.get(i + ahead) {
            sas.inb[n].prefetch();
        }
        if let Some(&(n, _, _)) = batches.get(i + ahead / 2) {
            sas.inb[n].prefetch_window();
        }
        dec += decrypt_batch(&mut sas.inb[s], &mut pkts[a..b]);
    }
    let c2 = thread_cpu();
    let total = pkts.len();
    if enc != total || dec != total {
        let err = pkts.iter().find_map(|p| p.result.err());
        bail!("{enc} of {total} packets encrypted, {dec} decrypted (first error: {err:?})");
    }
    let back: Vec<(usize, usize)> = pkts.iter().map(|p| (p.start, p.len)).collect();
    drop(pkts);
    for (j, &(start, len)) in back.iter().enumerate() {
        let ok = if check_bytes {
            pool.is_clear(j, start, len)
        } else {
            len == pool.spans[j].1
        };
        if !ok {
            bail!("packet {j} did not come back as it was sent");
        }
    }
    t.enc += c1 - c0;
    t.dec += c2 - c1;
    t.esp_passes += 1;
    Ok(())
}

/// One raw pass: every packet's bytes sealed, then opened, in place with one key.
fn raw_pass(
    pool: &mut Pool,
    suite: &dyn crypto::Suite,
    alg: crypto::Alg,
    seq: &mut u64,
    t: &mut Times,
) -> Result<()> {
    pool.reset();
    let (stride, icv) = (pool.stride, alg.icv_len());
    let first = *seq + 1;
    let c0 = thread_cpu();
    for (f, &(_, l)) in pool.frames.chunks_mut(stride).zip(&pool.spans) {
        *seq += 1;
        let len = alg.data_len(l);
        suite.seal(
            *seq,
            &crypto::aad(*seq),
            &mut f[HEADROOM..HEADROOM + len + icv],
            len,
        );
    }
    let c1 = thread_cpu();
    let mut bad = 0usize;
    for (i, (f, &(_, l))) in pool.frames.chunks_mut(stride).zip(&pool.spans).enumerate() {
        let s = first + i as u64;
        let len = alg.data_len(l);
        bad += usize::from(!suite.open(
            s,
            &crypto::aad(s),
            &mut f[HEADROOM..HEADROOM + len + icv],
            len,
        ));
    }
    let c2 = thread_cpu();
    if bad > 0 {
        bail!("raw {}: {bad} packets failed to open", alg.name());
    }
    t.seal += c1 - c0;
    t.open += c2 - c1;
    t.raw_passes += 1;
    Ok(())
}

/// One cell: the pool of `profile` through the SAs and through the raw suite.
fn cell(alg: Alg, profile: &Profile, sas: &mut Sas, secs: f64) -> Result<[Row; 2]> {
    let mut pool = Pool::new(profile);
    let suite = crypto::suite(crypto::Lib::AwsLcRs, alg.raw).context("aws-lc-rs suite")?;
    let mut sa_of = vec![0u32; pool.len()];
    let mut batches = Vec::with_capacity(pool.len());
    let mut seq = 0u64;
    let n = sas.out.len();
    // Warm-up: one pass of each, not counted (the first ESP pass checks every byte).
    let mut warm = Times::default();
    esp_pass(&mut pool, sas, &mut sa_of, &mut batches, &mut warm, true)?;
    raw_pass(&mut pool, &*suite, alg.raw, &mut seq, &mut warm)?;
    let mut t = Times::default();
    while t.total() < secs {
        esp_pass(&mut pool, sas, &mut sa_of, &mut batches, &mut t, false)?;
        raw_pass(&mut pool, &*suite, alg.raw, &mut seq, &mut t)?;
    }
    let (pkts, bytes) = (pool.len() as f64, pool.bytes as f64);
    let row = |dir, time: f64, raw_time: f64, passes: u64, raw_passes: u64| {
        let gbps = bytes * passes as f64 * 8.0 / time / 1e9;
        let raw_gbps = bytes * raw_passes as f64 * 8.0 / raw_time / 1e9;
        Row {
            alg: alg.name,
            dir,
            profile: profile.name().to_string(),
            sas: n,
            mpps: pkts * passes as f64 / time / 1e6,
            gbps,
            raw_gbps,
            ratio: gbps / raw_gbps,
        }
    };
    Ok([
        row(Dir::Encrypt, t.enc, t.seal, t.esp_passes, t.raw_passes),
        row(Dir::Decrypt, t.dec, t.open, t.esp_passes, t.raw_passes),
    ])
}

fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// Runs the benchmark; `progress` hears what is going on.
pub fn run(opts: &IpsecOptions, mut progress: impl FnMut(&str)) -> Result<IpsecReport> {
    if opts.algs.is_empty() || opts.sas.is_empty() || opts.profiles.is_empty() {
        bail!("nothing to measure: --algs, --sas and --profiles each need one item at least");
    }
    if let Some(&n) = opts.sas.iter().find(|&&n| !(1..=MAX_SAS).contains(&n)) {
        bail!("--sas: {n} is out of range (1 to {MAX_SAS})");
    }
    if !(opts.secs.is_finite() && opts.secs > 0.0 && opts.secs <= 60.0) {
        bail!(
            "--seconds: {} is out of range (more than 0, at most 60)",
            opts.secs
        );
    }
    let core = crate::dpdk::bench_core();
    let load = loadavg();
    // Before pinning, which narrows what available_parallelism sees.
    let nproc = std::thread::available_parallelism().map_or(1, |n| n.get());
    let _pin = crate::lpm::Pin::to(core)?;
    let memory_sas = opts.sas.iter().copied().max().unwrap_or(0);
    let mut inmemory = Vec::new();
    let mut memory = BTreeMap::new();
    for &alg in &opts.algs {
        for &n in &opts.sas {
            progress(&format!(
                "{}: building {n} outbound and {n} inbound SAs",
                alg.name
            ));
            trim();
            // SAs reuse the places earlier ones left in the SA chunks (resident already):
            // those count as the SA's size each.
            let reused = |free: usize| free.min(n) * std::mem::size_of::<Sa>();
            let (r0, f0) = (rss(), ::ipsec::arena::free_places());
            let out = build_sas(alg, n, Direction::Outbound)?;
            let (r1, f1) = (rss(), ::ipsec::arena::free_places());
            let inb = build_sas(alg, n, Direction::Inbound)?;
            let r2 = rss();
            if n == memory_sas {
                memory.insert(
                    alg.name,
                    SaMemory {
                        outbound: (r1.saturating_sub(r0) + reused(f0)) as f64 / n as f64,
                        inbound: (r2.saturating_sub(r1) + reused(f1)) as f64 / n as f64,
                    },
                );
            }
            let mut sas = Sas::with(out, inb, opts.prefetch);
            for p in &opts.profiles {
                progress(&format!("{} {} {n} SAs", alg.name, p.name()));
                let rows = cell(alg, p, &mut sas, opts.secs)
                    .with_context(|| format!("{} {} {n} SAs", alg.name, p.name()))?;
                inmemory.extend(rows);
            }
        }
    }
    Ok(IpsecReport {
        machine: Machine {
            cpu: cpu_model(),
            nproc,
        },
        core,
        loadavg: load,
        seconds: opts.secs,
        prefetch: opts.prefetch,
        inmemory,
        memory_per_sa_bytes: memory,
        memory_sas,
        runs: Vec::new(),
        runs_note: "from memory only: the live runs (two gateways) are measured apart",
    })
}

/// The row of a cell, if measured.
fn find<'a>(r: &'a IpsecReport, alg: &str, dir: Dir, profile: &str, sas: usize) -> Option<&'a Row> {
    r.inmemory
        .iter()
        .find(|x| x.alg == alg && x.dir == dir && x.profile == profile && x.sas == sas)
}

/// Human-readable table, and the issue's targets where their cells were measured.
pub fn format_table(r: &IpsecReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "ESP from memory: {}, {} CPUs, core {}, load {:.2}, {} CPU s per cell, SAs prefetched {}",
        r.machine.cpu,
        r.machine.nproc,
        r.core,
        r.loadavg,
        r.seconds,
        match r.prefetch {
            0 => "never".to_string(),
            n => format!("{n} batches ahead"),
        }
    );
    let _ = writeln!(
        o,
        "  tunnel 4in4, pools of {POOL_MIN}+ packets over the SAs round robin (shuffled), vectors of {VECTOR_SIZE} in batches of one SA;"
    );
    let _ = writeln!(
        o,
        "  inner Gbit/s per CPU second of the thread (per core); raw = aws-lc-rs seal/open of the same bytes, one key;"
    );
    let _ = writeln!(
        o,
        "  ratio = ESP/raw; vs 1 = against the same figure with 1 SA"
    );
    let _ = writeln!(o, "{:<50} | {:<33} | decrypt", "", "encrypt");
    let _ = writeln!(
        o,
        "{:<30} {:<10} {:>8} | {:>6} {:>6} {:>6} {:>5} {:>6} | {:>6} {:>6} {:>6} {:>5} {:>6}",
        "algorithm",
        "profile",
        "SAs",
        "Mpps",
        "Gbit/s",
        "raw",
        "ratio",
        "vs 1",
        "Mpps",
        "Gbit/s",
        "raw",
        "ratio",
        "vs 1"
    );
    // By algorithm and profile in the order measured, then by SA count.
    let mut cells: Vec<(&str, &str, usize)> = Vec::new();
    for x in &r.inmemory {
        let c = (x.alg, x.profile.as_str(), x.sas);
        if !cells.contains(&c) {
            cells.push(c);
        }
    }
    let first = |f: &dyn Fn(&(&str, &str, usize)) -> bool| cells.iter().position(f);
    let mut order: Vec<(usize, usize, usize)> = cells
        .iter()
        .map(|c| {
            (
                first(&|d| d.0 == c.0).unwrap_or(0),
                first(&|d| d.1 == c.1).unwrap_or(0),
                c.2,
            )
        })
        .collect();
    order.sort_unstable();
    let cells: Vec<(&str, &str, usize)> = order
        .into_iter()
        .map(|(a, p, n)| (cells[a].0, cells[p].1, n))
        .collect();
    for (alg, profile, sas) in cells {
        let mut line = format!("{alg:<30} {profile:<10} {sas:>8}");
        for dir in [Dir::Encrypt, Dir::Decrypt] {
            match find(r, alg, dir, profile, sas) {
                Some(x) => {
                    let vs1 = find(r, alg, dir, profile, 1).filter(|_| sas != 1).map_or(
                        "-".to_string(),
                        |one| match ((x.gbps / one.gbps - 1.0) * 100.0).round() {
                            0.0 => "0%".to_string(),
                            d => format!("{d:+}%"),
                        },
                    );
                    let _ = write!(
                        line,
                        " | {:>6.2} {:>6.2} {:>6.2} {:>5.2} {:>6}",
                        x.mpps, x.gbps, x.raw_gbps, x.ratio, vs1
                    );
                }
                None => line.push_str(" | -"),
            }
        }
        let _ = writeln!(o, "{}", line.trim_end());
    }
    for (alg, m) in &r.memory_per_sa_bytes {
        let _ = writeln!(
            o,
            "memory at {} SAs, {alg}: {:.0} bytes per outbound SA, {:.0} per inbound SA (resident)",
            r.memory_sas, m.outbound, m.inbound
        );
    }
    o.push_str(&targets(r));
    o
}

/// Issue 26's three targets, from the AES-128-GCM cells that were measured.
fn targets(r: &IpsecReport) -> String {
    let mut o = String::new();
    let g = "aes-128-gcm";
    let mut sas: Vec<usize> = r.inmemory.iter().map(|x| x.sas).collect();
    sas.sort_unstable();
    sas.dedup();
    let met = |b: bool| if b { "met" } else { "NOT met" };
    let list = |f: &dyn Fn(usize) -> Option<(f64, bool)>| -> Option<String> {
        let v: Vec<String> = sas
            .iter()
            .filter_map(|&n| f(n).map(|(v, ok)| format!("{n} SA: {v:.2} {}", met(ok))))
            .collect();
        (!v.is_empty()).then(|| v.join(", "))
    };
    if let Some(s) =
        list(&|n| find(r, g, Dir::Encrypt, "ipv4-1400", n).map(|x| (x.ratio, x.ratio >= 0.8)))
    {
        let _ = writeln!(o, "target: {g} encrypt ipv4-1400 >= 0.8x raw: {s}");
    }
    for dir in [Dir::Encrypt, Dir::Decrypt] {
        if let Some(s) = list(&|n| find(r, g, dir, "imix1", n).map(|x| (x.gbps, x.gbps >= 10.0))) {
            let _ = writeln!(
                o,
                "target: {g} {} imix1 >= 10 Gbit/s per core: {s}",
                dir.name()
            );
        }
    }
    if let Some(&top) = sas.last().filter(|&&n| n > 1) {
        let mut algs: Vec<&str> = Vec::new();
        for x in &r.inmemory {
            if !algs.contains(&x.alg) {
                algs.push(x.alg);
            }
        }
        let mut lines = Vec::new();
        for alg in algs {
            // The largest drop from 1 SA to `top` SAs of the cells of `alg`, by `f`.
            let worst = |f: &dyn Fn(&Row) -> f64| {
                let mut w: Option<(f64, String)> = None;
                for x in r.inmemory.iter().filter(|x| x.alg == alg && x.sas == top) {
                    if let Some(one) = find(r, alg, x.dir, &x.profile, 1) {
                        let d = 1.0 - f(x) / f(one);
                        if w.as_ref().is_none_or(|w| d > w.0) {
                            w = Some((d, format!("{} {}", x.dir.name(), x.profile)));
                        }
                    }
                }
                w
            };
            if let (Some((d, at)), Some((dr, atr))) = (worst(&|x| x.gbps), worst(&|x| x.ratio)) {
                lines.push(format!(
                    "  {alg}: Gbit/s {:+.0}% ({at}) {}; ratio {:+.0}% ({atr})",
                    -d * 100.0,
                    met(d <= 0.2),
                    -dr * 100.0
                ));
            }
        }
        if !lines.is_empty() {
            let _ = writeln!(
                o,
                "target: {top} SAs at most 20% below 1 SA, largest drop per algorithm (in Gbit/s, and in the ratio to the raw figure, which the cell's own raw passes correct for the host's drift):"
            );
            for l in lines {
                let _ = writeln!(o, "{l}");
            }
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_codecs() {
        for a in ALGS {
            let want = if a.integrity == Integrity::None {
                a.encryption.name().to_string()
            } else {
                format!("{}+{}", a.encryption.name(), a.integrity.name())
            };
            assert_eq!(a.name, want);
            assert_eq!(a.encryption.is_aead(), a.integrity == Integrity::None);
        }
    }

    #[test]
    fn bad_options_name_the_value() {
        let e = parse_sas("1,abc").unwrap_err().to_string();
        assert_eq!(e, r#"--sas: "abc" is not a number"#);
        let e = parse_sas("0").unwrap_err().to_string();
        assert!(e.contains(r#"--sas: "0" is out of range"#), "{e}");
        assert_eq!(parse_sas("1, 1_000,1").unwrap(), vec![1, 1000]);
        let e = parse_algs("aes-128-ccm").unwrap_err().to_string();
        assert!(
            e.starts_with(r#"--algs: "aes-128-ccm" is not an algorithm"#),
            "{e}"
        );
        let e = parse_profiles("ipv4-1400,ipv4-12").unwrap_err().to_string();
        assert!(
            e.starts_with("--profiles: ") && e.contains("ipv4-12"),
            "{e}"
        );
        let e = parse_seconds("fast").unwrap_err().to_string();
        assert_eq!(e, r#"--seconds: "fast" is not a number"#);
        assert!(parse_seconds("0").is_err() && parse_seconds("61").is_err());
    }

    #[test]
    fn batches_are_runs_of_one_sa_within_a_vector() {
        let mut out = Vec::new();
        let sa_of: Vec<u32> = (0..600).map(|j| (j / 100) as u32).collect();
        runs(&sa_of, &mut out);
        // Vectors 0..256, 256..512, 512..600, cut where the SA changes.
        let want = [
            (0, 0, 100),
            (1, 100, 200),
            (2, 200, 256),
            (2, 256, 300),
            (3, 300, 400),
            (4, 400, 500),
            (5, 500, 512),
            (5, 512, 600),
        ];
        assert_eq!(out, want);
    }

    #[test]
    fn sas_take_turns_in_a_shuffled_order() {
        let alg = ALGS[0];
        let n = 1000;
        let sas = Sas::with(
            build_sas(alg, n, Direction::Outbound).unwrap(),
            build_sas(alg, n, Direction::Inbound).unwrap(),
            PREFETCH_AHEAD,
        );
        let mut seen = sas.order.clone();
        seen.sort_unstable();
        assert!(seen.iter().enumerate().all(|(i, &s)| i as u32 == s));
        let neighbours = sas.order.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert!(neighbours < 10, "{neighbours} of {n} in creation order");
        assert_eq!(sas.out[7].spi(), sas.inb[7].spi());
    }

    #[test]
    fn pools_follow_the_profiles() {
        let p = Pool::new(&Profile::parse("imix1").unwrap());
        assert!(p.len() >= POOL_MIN && p.len().is_multiple_of(1000));
        let count = |l: usize| p.spans.iter().filter(|s| s.1 == l).count() * 100 / p.len();
        assert_eq!((count(46), count(576), count(1500)), (55, 25, 20));
        let p = Pool::new(&Profile::parse("ipv6-9000").unwrap());
        assert!(p.spans.iter().all(|s| s.1 == 9000 - 18));
        assert!(p.stride >= HEADROOM + 9000 + 49);
    }

    #[test]
    fn a_small_run_has_every_cell_and_round_trips() {
        let opts = IpsecOptions {
            algs: ALGS.to_vec(),
            sas: vec![1, 3],
            profiles: parse_profiles("ipv4-64,ipv6-1400").unwrap(),
            secs: 0.002,
            prefetch: PREFETCH_AHEAD,
        };
        let r = run(&opts, |_| {}).unwrap();
        assert_eq!(r.inmemory.len(), ALGS.len() * 2 * 2 * 2);
        for x in &r.inmemory {
            assert!(x.mpps > 0.0 && x.gbps > 0.0 && x.raw_gbps > 0.0, "{x:?}");
            assert!((x.ratio - x.gbps / x.raw_gbps).abs() < 1e-12);
        }
        assert_eq!(r.memory_per_sa_bytes.len(), ALGS.len());
        assert_eq!(r.memory_sas, 3);
        let t = format_table(&r);
        assert!(t.contains("aes-256-cbc+hmac-sha2-512-256"), "{t}");
    }
}
