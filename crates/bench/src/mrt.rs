//! Synthetic MRT TABLE_DUMP_V2 files (RFC 6396) for the routing-scale benchmark: each eBGP
//! peer (a GoBGP instance) loads one with `gobgp mrt inject global FILE` and advertises it.
//!
//! A file is one `PEER_INDEX_TABLE` (one peer: AS 65100+i) followed by one
//! `RIB_IPV4_UNICAST` record per IPv4 prefix, then one `RIB_IPV6_UNICAST` record per IPv6
//! prefix, each with a single RIB entry carrying ORIGIN, AS_PATH (always 4-byte ASNs in
//! TABLE_DUMP_V2, §4.3.4), NEXT_HOP (IPv4) or MP_REACH_NLRI (IPv6; full or RFC 6396 §4.3.4
//! abbreviated form, see [`MpReach`]: GoBGP 3.10 reads only the full one), and
//! MULTI_EXIT_DISC.
//!
//! Prefixes come from [`crate::routes::gen_v4`] / [`crate::routes::gen_v6`]. Attributes are
//! Internet-like in the way that matters to a BGP speaker's work: the path depends on the
//! (peer, origin AS) pair, not on the prefix, so a peer's prefixes share about one attribute
//! set per origin AS (~13 prefixes per origin, as in the public table) and updates pack
//! several prefixes each, as real full-table advertisements do. Path lengths follow the
//! public table's mix (mostly 3–5 hops, 1..=8).
//!
//! The encoder is hand-written: bgpkit-parser 0.23 has an encoder (`MrtRibEncoder`), but it
//! takes one `BgpElem` per route, keeps every prefix in a `HashMap<IpNet, HashMap<..>>` and
//! returns the whole file as one `Bytes` (random prefix order), which for 6M routes means
//! gigabytes of intermediate state; the format needed here is ~100 lines of byte pushing and
//! streams at disk speed. bgpkit-parser is used in the tests to parse our files back.

use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr};

use anyhow::{bail, ensure, Result};

use crate::routes::{gen_v4, gen_v6};

/// What to generate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MrtConfig {
    /// IPv4 prefixes per peer.
    pub v4: usize,
    /// IPv6 prefixes per peer.
    pub v6: usize,
    /// Number of peer files.
    pub peers: usize,
    /// true: every peer advertises the same prefixes (different AS paths); false: disjoint
    /// prefix sets.
    pub shared: bool,
    pub seed: u64,
}

impl Default for MrtConfig {
    fn default() -> Self {
        MrtConfig {
            v4: 1_000_000,
            v6: 200_000,
            peers: 1,
            shared: true,
            seed: 1,
        }
    }
}

/// One peer's prefixes (IPv4 host byte order; host bits zero), sorted as in a real dump.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerTable {
    pub v4: Vec<(u32, u8)>,
    pub v6: Vec<([u8; 16], u8)>,
}

/// The path attributes a peer's route carries (besides the next hop).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RouteAttrs {
    /// ORIGIN: 0 IGP, 2 INCOMPLETE.
    pub origin: u8,
    /// AS_SEQUENCE, first hop = the peer's ASN ([`peer_asn`]), last = the origin AS.
    pub as_path: Vec<u32>,
    pub med: u32,
}

/// The first ASN of peer `i`'s paths (and the AS of its PEER_INDEX_TABLE entry).
pub fn peer_asn(i: usize) -> u32 {
    65100 + i as u32
}

/// How the IPv6 routes' MP_REACH_NLRI attribute is encoded in the RIB entries.
///
/// GoBGP reads only one of the two: before 3.17 (Debian 12's gobgpd 3.10 among them) it
/// decodes the attribute as in an UPDATE and fails on the abbreviated form ("unknown route
/// family. AFI: 4128"); from 3.17 on (osrg/gobgp c801e184) it reads only the abbreviated
/// form. bgpkit-parser reads both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MpReach {
    /// AFI, SAFI, next hop, reserved byte and the route's prefix, as in a BGP UPDATE (what
    /// Quagga writes; what GoBGP < 3.17 needs). [`write_peer`] uses this.
    #[default]
    Full,
    /// RFC 6396 §4.3.4: next-hop length and address only (GoBGP ≥ 3.17).
    Abbreviated,
}

/// The largest usable peer count: peer ASNs stay in the 16-bit private range (≤ 65534).
pub const MAX_PEERS: usize = 435;

/// The MRT header / RIB entry timestamp (fixed, so files are byte-for-byte deterministic).
const TIMESTAMP: u32 = 1_700_000_000;

const MRT_TABLE_DUMP_V2: u16 = 13;
const PEER_INDEX_TABLE: u16 = 1;
const RIB_IPV4_UNICAST: u16 = 2;
const RIB_IPV6_UNICAST: u16 = 4;

/// AS path length mix in percent, lengths 1..=8 (public table: mean ~4 hops).
const PATH_LEN_MIX: [u32; 8] = [3, 12, 27, 27, 16, 8, 4, 3];

/// Large transit networks: the second hop of most paths is one of these.
const TRANSIT: [u32; 16] = [
    174, 701, 1299, 2914, 3257, 3356, 3491, 5511, 6453, 6461, 6762, 6830, 7018, 12956, 1239, 3320,
];

fn mix64(mut z: u64) -> u64 {
    // splitmix64 finalizer
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A public ASN (16-bit public range without AS_TRANS, or 4-byte 131072..=401308).
fn public_asn(h: u64) -> u32 {
    if h & 3 == 0 {
        131_072 + ((h >> 8) % 270_237) as u32
    } else {
        let a = 1 + ((h >> 8) % 64_495) as u32;
        if a == 23_456 {
            23_457
        } else {
            a
        }
    }
}

/// Attribute generator for one config: origin AS per prefix, path per (peer, origin).
struct PathGen {
    seed: u64,
    origins: u64,
}

/// A path in a fixed array: (ASNs, length, ORIGIN, MED). No allocation per route.
struct Path {
    asns: [u32; 8],
    len: usize,
    origin: u8,
    med: u32,
}

impl PathGen {
    fn new(cfg: &MrtConfig) -> Self {
        // ~13 prefixes per origin AS, as in the public table; a function of the per-peer
        // counts only, so a prefix has the same origin AS at every peer in shared mode.
        PathGen {
            seed: cfg.seed,
            origins: ((cfg.v4 + cfg.v6) as u64 / 13).max(1),
        }
    }

    fn path(&self, peer: usize, prefix_hash: u64) -> Path {
        let o = mix64(self.seed ^ 0x0416 ^ prefix_hash) % self.origins;
        let origin_asn = public_asn(mix64(self.seed ^ 0x0a5 ^ o.wrapping_mul(0x1_0000_0001)));
        let h = mix64(self.seed ^ (o << 16) ^ (peer as u64) ^ 0x9a7);
        let mut r = (h % 100) as u32;
        let mut len = 1;
        for (k, w) in PATH_LEN_MIX.iter().enumerate() {
            if r < *w {
                len = k + 1;
                break;
            }
            r -= w;
        }
        let mut asns = [0u32; 8];
        asns[0] = peer_asn(peer);
        if len >= 2 {
            asns[len - 1] = origin_asn;
        }
        for k in 1..len.saturating_sub(1) {
            let mut salt = 0u64;
            loop {
                let hk = mix64(h ^ ((k as u64) << 40) ^ (salt << 48));
                let a = if k == 1 && hk & 7 != 0 {
                    TRANSIT[(hk >> 8) as usize % TRANSIT.len()]
                } else {
                    public_asn(hk)
                };
                // No AS twice in one path (it would read as a loop or a prepend).
                if !asns[..len].contains(&a) {
                    asns[k] = a;
                    break;
                }
                salt += 1;
            }
        }
        let ho = mix64(self.seed ^ o ^ 0x0123_4567);
        Path {
            asns,
            len,
            origin: if ho & 31 == 0 { 2 } else { 0 },
            med: ((h >> 20) % 50) as u32 * 10,
        }
    }
}

fn hash_v4(p: (u32, u8)) -> u64 {
    mix64(((p.0 as u64) << 8) | p.1 as u64)
}

fn hash_v6(p: ([u8; 16], u8)) -> u64 {
    let v = u128::from_be_bytes(p.0);
    mix64((v >> 64) as u64 ^ mix64(v as u64 ^ p.1 as u64))
}

impl Path {
    fn attrs(&self) -> RouteAttrs {
        RouteAttrs {
            origin: self.origin,
            as_path: self.asns[..self.len].to_vec(),
            med: self.med,
        }
    }
}

/// The attributes peer `i` sends with IPv4 `prefix`.
pub fn attrs_v4(cfg: &MrtConfig, i: usize, prefix: (u32, u8)) -> RouteAttrs {
    PathGen::new(cfg).path(i, hash_v4(prefix)).attrs()
}

/// The attributes peer `i` sends with IPv6 `prefix`.
pub fn attrs_v6(cfg: &MrtConfig, i: usize, prefix: ([u8; 16], u8)) -> RouteAttrs {
    PathGen::new(cfg).path(i, hash_v6(prefix)).attrs()
}

/// The prefixes peer `i` (0-based) advertises. Deterministic from the config. Unique sets
/// are consecutive slices of one `gen_v4(peers * v4)` / `gen_v6(peers * v6)` set, so they
/// are disjoint. Use [`peer_tables`] to get every peer's table with one generation.
pub fn peer_table(cfg: &MrtConfig, i: usize) -> PeerTable {
    if cfg.shared {
        shared_table(cfg)
    } else {
        let (v4, v6) = (
            gen_v4(cfg.v4 * cfg.peers, cfg.seed),
            gen_v6(cfg.v6 * cfg.peers, cfg.seed),
        );
        split(cfg, &v4, &v6, i)
    }
}

/// Every peer's table (what [`peer_table`] returns for each `i`), generating once.
pub fn peer_tables(cfg: &MrtConfig) -> Vec<PeerTable> {
    if cfg.shared {
        let t = shared_table(cfg);
        vec![t; cfg.peers]
    } else {
        let (v4, v6) = (
            gen_v4(cfg.v4 * cfg.peers, cfg.seed),
            gen_v6(cfg.v6 * cfg.peers, cfg.seed),
        );
        (0..cfg.peers).map(|i| split(cfg, &v4, &v6, i)).collect()
    }
}

fn shared_table(cfg: &MrtConfig) -> PeerTable {
    let mut t = PeerTable {
        v4: gen_v4(cfg.v4, cfg.seed),
        v6: gen_v6(cfg.v6, cfg.seed),
    };
    t.v4.sort_unstable();
    t.v6.sort_unstable();
    t
}

fn slice<T: Copy + Ord>(all: &[T], per: usize, i: usize) -> Vec<T> {
    let lo = (per * i).min(all.len());
    let hi = (per * (i + 1)).min(all.len());
    let mut v = all[lo..hi].to_vec();
    v.sort_unstable();
    v
}

fn split(cfg: &MrtConfig, v4: &[(u32, u8)], v6: &[([u8; 16], u8)], i: usize) -> PeerTable {
    PeerTable {
        v4: slice(v4, cfg.v4, i),
        v6: slice(v6, cfg.v6, i),
    }
}

/// Write one TABLE_DUMP_V2 file for peer `i`: the prefixes of [`peer_table`] with the
/// attributes of [`attrs_v4`] / [`attrs_v6`] and the given next hops, IPv6 next hops in the
/// [`MpReach::Full`] form that the installed GoBGP (3.10) reads. Streams through a 1 MiB
/// buffer (no need to wrap `out` in a `BufWriter`). Returns (IPv4, IPv6) routes written.
///
/// Next hops: GoBGP advertises an injected route over eBGP with the next hop of the file
/// (injected routes are its own, and it applies next-hop-self only to learned ones), except
/// 0.0.0.0 and `::`, which it replaces with its own session address. Pass those unless a
/// third-party next hop is wanted.
pub fn write_peer<W: Write>(
    cfg: &MrtConfig,
    i: usize,
    next_hop_v4: Ipv4Addr,
    next_hop_v6: Ipv6Addr,
    out: W,
) -> Result<(usize, usize)> {
    ensure!(
        i < cfg.peers,
        "peer {i} out of range (peers = {})",
        cfg.peers
    );
    let t = peer_table(cfg, i);
    write_table(cfg, i, &t, next_hop_v4, next_hop_v6, out)
}

/// [`write_peer`] for a table already generated (see [`peer_tables`]).
pub fn write_table<W: Write>(
    cfg: &MrtConfig,
    i: usize,
    table: &PeerTable,
    next_hop_v4: Ipv4Addr,
    next_hop_v6: Ipv6Addr,
    out: W,
) -> Result<(usize, usize)> {
    write_table_with(cfg, i, table, next_hop_v4, next_hop_v6, MpReach::Full, out)
}

/// [`write_table`] with a choice of MP_REACH_NLRI form.
pub fn write_table_with<W: Write>(
    cfg: &MrtConfig,
    i: usize,
    table: &PeerTable,
    next_hop_v4: Ipv4Addr,
    next_hop_v6: Ipv6Addr,
    mp_reach: MpReach,
    mut out: W,
) -> Result<(usize, usize)> {
    if i >= MAX_PEERS {
        bail!("peer {i}: at most {MAX_PEERS} peers (ASN 65100+i must stay below 65535)");
    }
    let gen = PathGen::new(cfg);
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);

    // PEER_INDEX_TABLE: collector BGP ID, empty view name, one peer (AS4, IPv4 address).
    let body_at = begin_record(&mut buf, PEER_INDEX_TABLE);
    buf.extend_from_slice(&[10, 255, 0, 1]);
    buf.extend_from_slice(&0u16.to_be_bytes()); // view name length
    buf.extend_from_slice(&1u16.to_be_bytes()); // peer count
    buf.push(0x02); // peer type: AS4, IPv4 peer address
    let id = 0x0afe_0000u32 + i as u32 + 1; // peer BGP ID 10.254.x.y
    buf.extend_from_slice(&id.to_be_bytes());
    buf.extend_from_slice(&next_hop_v4.octets());
    buf.extend_from_slice(&peer_asn(i).to_be_bytes());
    end_record(&mut buf, body_at);

    let mut seq = 0u32;
    for &p in &table.v4 {
        let path = gen.path(i, hash_v4(p));
        rib_record(
            &mut buf,
            RIB_IPV4_UNICAST,
            seq,
            &p.0.to_be_bytes(),
            p.1,
            &path,
            |buf| {
                buf.extend_from_slice(&[0x40, 3, 4]); // NEXT_HOP
                buf.extend_from_slice(&next_hop_v4.octets());
            },
        );
        seq = seq.wrapping_add(1);
        flush_full(&mut buf, &mut out)?;
    }
    for &p in &table.v6 {
        let path = gen.path(i, hash_v6(p));
        rib_record(
            &mut buf,
            RIB_IPV6_UNICAST,
            seq,
            &p.0,
            p.1,
            &path,
            |buf| match mp_reach {
                MpReach::Full => {
                    let n = p.1.div_ceil(8) as usize;
                    // AFI 2, SAFI 1, next hop, reserved, NLRI (this record's prefix).
                    buf.extend_from_slice(&[0x80, 14, (2 + 1 + 1 + 16 + 1 + 1 + n) as u8]);
                    buf.extend_from_slice(&[0, 2, 1, 16]);
                    buf.extend_from_slice(&next_hop_v6.octets());
                    buf.push(0);
                    buf.push(p.1);
                    buf.extend_from_slice(&p.0[..n]);
                }
                MpReach::Abbreviated => {
                    // RFC 6396 §4.3.4: next-hop length and address only.
                    buf.extend_from_slice(&[0x80, 14, 17, 16]);
                    buf.extend_from_slice(&next_hop_v6.octets());
                }
            },
        );
        seq = seq.wrapping_add(1);
        flush_full(&mut buf, &mut out)?;
    }
    out.write_all(&buf)?;
    out.flush()?;
    Ok((table.v4.len(), table.v6.len()))
}

/// One RIB_IPV4_UNICAST / RIB_IPV6_UNICAST record: the prefix `addr`/`len` with one entry
/// whose attributes are the common ones, then what `next_hop` writes, then MED.
fn rib_record(
    buf: &mut Vec<u8>,
    subtype: u16,
    seq: u32,
    addr: &[u8],
    len: u8,
    path: &Path,
    next_hop: impl FnOnce(&mut Vec<u8>),
) {
    let at = begin_record(buf, subtype);
    rib_head(buf, seq, addr, len);
    let attrs_at = rib_entry_head(buf);
    common_attrs(buf, path);
    next_hop(buf);
    med(buf, path.med);
    end_attrs(buf, attrs_at);
    end_record(buf, at);
}

/// Write `buf` out once it is nearly 1 MiB (a record is far below 512 bytes).
fn flush_full<W: Write>(buf: &mut Vec<u8>, out: &mut W) -> Result<()> {
    if buf.len() > (1 << 20) - 512 {
        out.write_all(buf)?;
        buf.clear();
    }
    Ok(())
}

/// MRT common header with a length placeholder; returns where the body starts.
fn begin_record(buf: &mut Vec<u8>, subtype: u16) -> usize {
    buf.extend_from_slice(&TIMESTAMP.to_be_bytes());
    buf.extend_from_slice(&MRT_TABLE_DUMP_V2.to_be_bytes());
    buf.extend_from_slice(&subtype.to_be_bytes());
    buf.extend_from_slice(&[0; 4]);
    buf.len()
}

fn end_record(buf: &mut [u8], body_at: usize) {
    let len = (buf.len() - body_at) as u32;
    buf[body_at - 4..body_at].copy_from_slice(&len.to_be_bytes());
}

/// RIB_IPVx_UNICAST: sequence number, prefix, entry count (1).
fn rib_head(buf: &mut Vec<u8>, seq: u32, addr: &[u8], len: u8) {
    buf.extend_from_slice(&seq.to_be_bytes());
    buf.push(len);
    buf.extend_from_slice(&addr[..len.div_ceil(8) as usize]);
    buf.extend_from_slice(&1u16.to_be_bytes());
}

/// RIB entry: peer index 0, originated time, attribute length placeholder.
fn rib_entry_head(buf: &mut Vec<u8>) -> usize {
    buf.extend_from_slice(&0u16.to_be_bytes());
    buf.extend_from_slice(&TIMESTAMP.to_be_bytes());
    buf.extend_from_slice(&[0; 2]);
    buf.len()
}

fn end_attrs(buf: &mut [u8], attrs_at: usize) {
    let len = (buf.len() - attrs_at) as u16;
    buf[attrs_at - 2..attrs_at].copy_from_slice(&len.to_be_bytes());
}

/// ORIGIN and AS_PATH (one AS_SEQUENCE of 4-byte ASNs; at most 8 hops, so a 1-byte length).
fn common_attrs(buf: &mut Vec<u8>, p: &Path) {
    buf.extend_from_slice(&[0x40, 1, 1, p.origin]);
    buf.extend_from_slice(&[0x40, 2, (2 + 4 * p.len) as u8, 2, p.len as u8]);
    for a in &p.asns[..p.len] {
        buf.extend_from_slice(&a.to_be_bytes());
    }
}

fn med(buf: &mut Vec<u8>, med: u32) {
    buf.extend_from_slice(&[0x80, 4, 4]);
    buf.extend_from_slice(&med.to_be_bytes());
}

/// Load an MRT file into a running gobgpd's global RIB with `gobgp mrt inject global`, and
/// return once the RIB holds `want` (IPv4, IPv6) paths, with the time that took.
///
/// `gobgp` is the client command with its global options, e.g.
/// `["ip", "netns", "exec", "ns1", "gobgp", "-p", "50051"]`. `want` counts the whole global
/// RIB (what `gobgp global rib summary` reports), so it must include routes already there,
/// and be reached only by this injection.
///
/// The gobgp 3.x client has two faults this works around (both fixed in gobgp 4):
/// - it exits right after queueing its last gRPC message without closing the stream
///   (`injectMrt` never calls `CloseAndRecv`, fixed by osrg/gobgp d0992be3), so the paths
///   still in flight — about 64 KB, a thousand routes — are lost: a plain
///   `gobgp mrt inject global FILE` of 1M routes leaves ~999,000 in the RIB;
/// - it reads records with bare `Read` calls, so it misparses a pipe that hands it a record
///   in pieces.
///
/// The file goes to the client's standard input (`/dev/stdin`) in writes of whole records of
/// at most PIPE_BUF (4096) bytes, which Linux delivers whole, and the pipe is closed only
/// once the RIB holds `want` paths, so the client has nothing in flight when it exits.
pub fn gobgp_inject(
    gobgp: &[&str],
    file: &std::path::Path,
    want: (usize, usize),
    timeout: std::time::Duration,
) -> Result<std::time::Duration> {
    use std::io::Read;
    use std::process::{Command, Stdio};
    use std::time::Instant;

    ensure!(!gobgp.is_empty(), "no gobgp command");
    let mut f = std::io::BufReader::with_capacity(
        1 << 20,
        std::fs::File::open(file)
            .map_err(|e| anyhow::anyhow!("opening {}: {e}", file.display()))?,
    );
    let t0 = Instant::now();
    let mut child = Command::new(gobgp[0])
        .args(&gobgp[1..])
        .args(["mrt", "inject", "global", "/dev/stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| anyhow::anyhow!("running {gobgp:?}: {e}"))?;
    // The client's output (parse errors) is collected by threads so it never blocks.
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    };
    let out_t = drain(
        child
            .stdout
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let err_t = drain(
        child
            .stderr
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let mut stdin = child.stdin.take().expect("piped stdin");
    // The writer hands the pipe back instead of closing it when the file is done.
    let writer = std::thread::spawn(move || -> Result<std::process::ChildStdin> {
        const PIPE_BUF: usize = 4096;
        let mut chunk: Vec<u8> = Vec::with_capacity(PIPE_BUF);
        let mut rec: Vec<u8> = Vec::with_capacity(PIPE_BUF);
        let mut head = [0u8; 12];
        loop {
            match f.read_exact(&mut head) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(e.into()),
            }
            let len = u32::from_be_bytes(head[8..12].try_into().unwrap()) as usize;
            ensure!(
                12 + len <= PIPE_BUF,
                "a {}-byte MRT record is too large to pass whole through a pipe",
                12 + len
            );
            rec.clear();
            rec.extend_from_slice(&head);
            rec.resize(12 + len, 0);
            f.read_exact(&mut rec[12..])?;
            if chunk.len() + rec.len() > PIPE_BUF {
                stdin.write_all(&chunk)?; // one write(2): atomic up to PIPE_BUF
                chunk.clear();
            }
            chunk.extend_from_slice(&rec);
        }
        stdin.write_all(&chunk)?;
        Ok(stdin)
    });
    let count = |af: &str| -> Result<usize> {
        let out = Command::new(gobgp[0])
            .args(&gobgp[1..])
            .args(["global", "rib", "summary", "-a", af, "-j"])
            .output()?;
        ensure!(
            out.status.success(),
            "gobgp global rib summary: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        Ok(v["num_path"].as_u64().unwrap_or(0) as usize)
    };
    let output = |out_t: std::thread::JoinHandle<String>,
                  err_t: std::thread::JoinHandle<String>| {
        out_t.join().unwrap_or_default() + &err_t.join().unwrap_or_default()
    };

    // Until the whole file is in the pipe.
    let stdin = loop {
        if writer.is_finished() {
            match writer.join().expect("writer thread") {
                Ok(s) => break s,
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    bail!("feeding gobgp: {e:#}: {}", output(out_t, err_t));
                }
            }
        }
        if let Some(st) = child.try_wait()? {
            bail!(
                "gobgp mrt inject exited ({st}) early: {}",
                output(out_t, err_t)
            );
        }
        if t0.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            bail!("gobgp mrt inject: file not consumed after {timeout:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    // Until the RIB holds it all.
    let mut got = (0, 0);
    let done = loop {
        if let Some(st) = child.try_wait()? {
            bail!(
                "gobgp mrt inject exited ({st}) with {got:?} of {want:?} paths: {}",
                output(out_t, err_t)
            );
        }
        let asked = Instant::now();
        got = (
            if want.0 > 0 { count("ipv4")? } else { 0 },
            if want.1 > 0 { count("ipv6")? } else { 0 },
        );
        if got.0 >= want.0 && got.1 >= want.1 {
            break t0.elapsed();
        }
        // A summary walks the whole table (0.4 s of gobgpd's time at 1M routes): ask at
        // most a fifth of the time so the count does not slow down what it measures.
        let cost = asked.elapsed();
        if t0.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            bail!("gobgp mrt inject: {got:?} of {want:?} paths after {timeout:?}");
        }
        std::thread::sleep((cost * 4).max(std::time::Duration::from_millis(100)));
    };
    drop(stdin); // EOF: the client has nothing in flight, and exits
    let st = child.wait()?;
    let out = output(out_t, err_t);
    ensure!(
        st.success() && out.trim().is_empty(),
        "gobgp mrt inject: {st}: {out}"
    );
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bgpkit_parser::models::{
        AsPathSegment, MrtMessage, Origin, TableDumpV2Message, TableDumpV2Type,
    };
    use bgpkit_parser::BgpkitParser;
    use std::collections::HashSet;
    use std::net::IpAddr;

    fn cfg(v4: usize, v6: usize, peers: usize, shared: bool) -> MrtConfig {
        MrtConfig {
            v4,
            v6,
            peers,
            shared,
            seed: 7,
        }
    }

    fn file(c: &MrtConfig, i: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let n = write_peer(
            c,
            i,
            "192.0.2.1".parse().unwrap(),
            "2001:db8::1".parse().unwrap(),
            &mut out,
        )
        .unwrap();
        assert_eq!(n, (c.v4, c.v6));
        out
    }

    /// Parse `bytes` with bgpkit-parser and check every record against the generator.
    fn check_parsed(c: &MrtConfig, i: usize, bytes: &[u8]) {
        let t = peer_table(c, i);
        let mut records = 0;
        let (mut n4, mut n6) = (0, 0);
        for rec in BgpkitParser::from_reader(bytes).into_record_iter() {
            records += 1;
            assert_eq!(rec.common_header.timestamp, TIMESTAMP);
            let MrtMessage::TableDumpV2Message(m) = rec.message else {
                panic!("not TABLE_DUMP_V2: {rec:?}");
            };
            match m {
                TableDumpV2Message::PeerIndexTable(pit) => {
                    assert_eq!(records, 1, "PEER_INDEX_TABLE first");
                    let peer = pit.id_peer_map.get(&0).expect("peer 0");
                    assert_eq!(u32::from(peer.peer_asn), peer_asn(i));
                    assert_eq!(peer.peer_ip, "192.0.2.1".parse::<IpAddr>().unwrap());
                }
                TableDumpV2Message::RibAfi(rib) => {
                    assert_eq!(rib.sequence_number as usize, records - 2);
                    assert_eq!(rib.rib_entries.len(), 1);
                    let e = &rib.rib_entries[0];
                    assert_eq!(e.peer_index, 0);
                    let a = &e.attributes;
                    let (want, nh): (RouteAttrs, IpAddr) = match rib.rib_type {
                        TableDumpV2Type::RibIpv4Unicast => {
                            let (p, l) = t.v4[n4];
                            n4 += 1;
                            assert_eq!(
                                rib.prefix.prefix,
                                format!("{}/{l}", Ipv4Addr::from(p)).parse().unwrap()
                            );
                            assert_eq!(a.next_hop(), Some("192.0.2.1".parse().unwrap()));
                            (attrs_v4(c, i, (p, l)), "192.0.2.1".parse().unwrap())
                        }
                        TableDumpV2Type::RibIpv6Unicast => {
                            assert_eq!(n4, t.v4.len(), "IPv6 after every IPv4 record");
                            let (p, l) = t.v6[n6];
                            n6 += 1;
                            assert_eq!(
                                rib.prefix.prefix,
                                format!("{}/{l}", Ipv6Addr::from(p)).parse().unwrap()
                            );
                            (attrs_v6(c, i, (p, l)), "2001:db8::1".parse().unwrap())
                        }
                        other => panic!("unexpected {other:?}"),
                    };
                    // Next hop: NEXT_HOP for IPv4, MP_REACH_NLRI (abbreviated) for IPv6.
                    let elem_nh = a
                        .get_reachable_nlri()
                        .and_then(|n| n.next_hop.map(|h| h.addr()))
                        .or(a.next_hop());
                    assert_eq!(elem_nh, Some(nh), "{}", rib.prefix);
                    let path = a.as_path().expect("AS_PATH");
                    let segs: Vec<_> = path.iter_segments().collect();
                    assert_eq!(segs.len(), 1);
                    let AsPathSegment::AsSequence(asns) = segs[0] else {
                        panic!("not a sequence");
                    };
                    let got: Vec<u32> = asns.iter().map(|a| u32::from(*a)).collect();
                    assert_eq!(got, want.as_path, "{}", rib.prefix);
                    assert_eq!(a.multi_exit_discriminator(), Some(want.med));
                    let origin = match a.origin() {
                        Origin::IGP => 0,
                        Origin::EGP => 1,
                        Origin::INCOMPLETE => 2,
                    };
                    assert_eq!(origin, want.origin);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!((n4, n6), (t.v4.len(), t.v6.len()));
        assert_eq!(records, 1 + t.v4.len() + t.v6.len());
    }

    #[test]
    fn parses_back_with_bgpkit() {
        let c = cfg(3000, 800, 2, true);
        for i in 0..2 {
            check_parsed(&c, i, &file(&c, i));
        }
        let c = cfg(2000, 500, 3, false);
        check_parsed(&c, 2, &file(&c, 2));
        // The abbreviated MP_REACH_NLRI form parses to the same routes.
        let t = peer_table(&c, 1);
        let mut out = Vec::new();
        let (nh4, nh6) = ("192.0.2.1".parse().unwrap(), "2001:db8::1".parse().unwrap());
        write_table_with(&c, 1, &t, nh4, nh6, MpReach::Abbreviated, &mut out).unwrap();
        check_parsed(&c, 1, &out);
        assert!(out.len() < file(&c, 1).len());
    }

    #[test]
    fn deterministic() {
        let c = cfg(2000, 300, 2, false);
        assert_eq!(file(&c, 1), file(&c, 1));
        assert_eq!(peer_table(&c, 0), peer_table(&c, 0));
        assert_ne!(file(&c, 0), file(&c, 1));
        let mut c2 = c.clone();
        c2.seed = 8;
        assert_ne!(peer_table(&c, 0), peer_table(&c2, 0));
        assert_eq!(peer_tables(&c), vec![peer_table(&c, 0), peer_table(&c, 1)]);
    }

    #[test]
    fn unique_sets_are_disjoint() {
        let c = cfg(5000, 1000, 3, false);
        let ts = peer_tables(&c);
        let mut s4 = HashSet::new();
        let mut s6 = HashSet::new();
        for t in &ts {
            assert_eq!((t.v4.len(), t.v6.len()), (5000, 1000));
            for p in &t.v4 {
                assert!(s4.insert(*p), "{p:?} in two peers");
            }
            for p in &t.v6 {
                assert!(s6.insert(*p), "{p:?} in two peers");
            }
        }
    }

    #[test]
    fn shared_sets_are_equal_with_different_paths() {
        let c = cfg(5000, 1000, 3, true);
        let ts = peer_tables(&c);
        assert!(ts.iter().all(|t| *t == ts[0]));
        assert_eq!(peer_table(&c, 2), ts[0]);
        let mut differ = 0;
        for &p in &ts[0].v4 {
            let (a, b) = (attrs_v4(&c, 0, p), attrs_v4(&c, 1, p));
            assert_eq!(a.as_path[0], 65100);
            assert_eq!(b.as_path[0], 65101);
            // The origin AS is a property of the prefix: the same at every peer.
            if a.as_path.len() > 1 && b.as_path.len() > 1 {
                assert_eq!(a.as_path.last(), b.as_path.last());
            }
            differ += (a.as_path[1..] != b.as_path[1..]) as usize;
        }
        assert!(
            differ > 2500,
            "{differ} of 5000 paths differ beyond the first hop"
        );
    }

    #[test]
    fn path_mix_is_internet_like() {
        let c = cfg(20_000, 0, 1, true);
        let t = peer_table(&c, 0);
        let mut by_len = [0usize; 9];
        let mut distinct = HashSet::new();
        for &p in &t.v4 {
            let a = attrs_v4(&c, 0, p);
            assert!((1..=8).contains(&a.as_path.len()));
            let set: HashSet<_> = a.as_path.iter().collect();
            assert_eq!(set.len(), a.as_path.len(), "loop in {:?}", a.as_path);
            assert!(a.as_path.iter().all(|&x| x != 0 && x != 23456));
            by_len[a.as_path.len()] += 1;
            distinct.insert(a);
        }
        let mean: f64 =
            by_len.iter().enumerate().map(|(l, n)| l * n).sum::<usize>() as f64 / 20_000.0;
        assert!((3.3..4.8).contains(&mean), "mean path length {mean}");
        assert!(by_len[1] > 0 && by_len[8] > 0, "{by_len:?}");
        // Attribute sets are shared by the prefixes of one origin: ~13 per set.
        assert!(
            distinct.len() > 800 && distinct.len() < 2000,
            "{} attribute sets",
            distinct.len()
        );
    }

    #[test]
    fn v4_only_and_v6_only() {
        let c = cfg(1000, 0, 2, false);
        let b = file(&c, 1);
        check_parsed(&c, 1, &b);
        let c = cfg(0, 1000, 2, true);
        let b = file(&c, 0);
        check_parsed(&c, 0, &b);
        let c = cfg(0, 0, 1, true);
        let b = file(&c, 0);
        check_parsed(&c, 0, &b);
        // Header + peer index table only.
        assert_eq!(b.len(), 12 + 4 + 2 + 2 + 1 + 4 + 4 + 4);
    }

    #[test]
    fn record_layout() {
        // One /24 with a 1-hop path: byte-exact against RFC 6396 by hand.
        let c = cfg(1, 0, 1, true);
        let b = file(&c, 0);
        let rib = &b[33..];
        assert_eq!(&rib[4..8], &[0, 13, 0, 2]); // TABLE_DUMP_V2 / RIB_IPV4_UNICAST
        let len = u32::from_be_bytes(rib[8..12].try_into().unwrap()) as usize;
        assert_eq!(rib.len(), 12 + len);
        let body = &rib[12..];
        assert_eq!(&body[0..4], &[0, 0, 0, 0]); // sequence 0
        let plen = body[4];
        let pbytes = plen.div_ceil(8) as usize;
        let e = &body[5 + pbytes..];
        assert_eq!(&e[0..2], &[0, 1]); // one entry
        assert_eq!(&e[2..4], &[0, 0]); // peer index 0
        let alen = u16::from_be_bytes([e[8], e[9]]) as usize;
        assert_eq!(e.len(), 10 + alen);
        assert_eq!(
            &e[10..14],
            &[0x40, 1, 1, attrs_v4(&c, 0, peer_table(&c, 0).v4[0]).origin]
        );
    }

    #[test]
    fn large_write_is_fast_and_streams() {
        // 200K routes in a debug-ish test profile: well under a second per 100K.
        let c = cfg(150_000, 50_000, 1, true);
        let t = std::time::Instant::now();
        let mut sink = std::io::sink();
        let n = write_peer(
            &c,
            0,
            Ipv4Addr::UNSPECIFIED,
            Ipv6Addr::UNSPECIFIED,
            &mut sink,
        )
        .unwrap();
        assert_eq!(n, (150_000, 50_000));
        eprintln!("200K routes generated and encoded in {:?}", t.elapsed());
    }
}
