//! `ferrouter-lab bench nat`: NAT44 ([`firewall::nat`]) from memory, no I/O, one core: how
//! fast source-NAT sessions are made (a lookup that misses, a mapping with a port, two
//! index entries) and how fast packets are translated (parse, lookup, rewrite with
//! incremental checksums, deadline refresh), in a table of 1M sessions by default; and the
//! bytes each session costs.
//!
//! Per table size N, on one pinned core, each phase timed as a whole:
//! * **create**: N UDP flows from distinct inside endpoints (N / 16 inside addresses, 16
//!   ports each), each looked up (a miss) and given a session and a mapping in a pool of
//!   as many external addresses as the port space needs (paired pooling);
//! * **translate**: `--packets` 64-byte UDP packets of random sessions in random
//!   directions (a trace of tuples made beforehand, read in order), in bursts of
//!   [`BURST`] as the nodes get them: each written into a buffer, hashed and its index
//!   slot prefetched, then its session prefetched, then parsed, looked up, rewritten
//!   (addresses, ports, IP and UDP checksums) and its session refreshed. Writing the
//!   packet is inside the timing.
//!
//! Rates are per CPU second of the thread (the per-core rate) and per wall-clock second.

use std::fmt::Write as _;

use anyhow::bail;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::conntrack::{cpu_model, Clocks, Phase};
use firewall::nat::rewrite;
use firewall::nat::table::{proto, Key4, NatTable, Pool, Side, Timeouts};

/// Settings.
#[derive(Clone, Debug)]
pub struct NatOptions {
    /// Table sizes (sessions), one run each.
    pub sessions: Vec<usize>,
    /// Packets translated per run.
    pub packets: usize,
    /// Seed of the random packets.
    pub seed: u64,
}

impl Default for NatOptions {
    fn default() -> Self {
        NatOptions {
            sessions: vec![1_000_000],
            packets: 10_000_000,
            seed: 1,
        }
    }
}

/// One table size.
#[derive(Clone, Debug, serde::Serialize)]
pub struct NatRun {
    /// Sessions the table holds at most.
    pub sessions: usize,
    /// External addresses in the pool.
    pub pool_addresses: u32,
    /// Bytes the table takes.
    pub memory_bytes: usize,
    /// Bytes per session (memory / sessions).
    pub bytes_per_session: f64,
    /// Lookups (misses) and source-NAT sessions made.
    pub create: Phase,
    /// Sessions made (the rest refused).
    pub created: usize,
    /// Packets parsed, looked up, rewritten.
    pub translate: Phase,
    /// Packets whose session was found.
    pub translated: u64,
}

/// The report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct NatReport {
    /// CPU model.
    pub cpu: String,
    /// CPUs.
    pub nproc: usize,
    /// Core the runs were pinned to.
    pub core: usize,
    /// One per table size.
    pub runs: Vec<NatRun>,
}

const T0: u64 = 1_000_000_000_000;
/// Inside ports per inside address.
const PORTS_PER_HOST: u32 = 16;
/// Mappings given to one external address at most (of the 64,512 ports of one worker).
const PER_ADDRESS: u32 = 30_000;

fn inside(i: u32) -> Key4 {
    Key4 {
        src: 0x0a00_0000 | (i / PORTS_PER_HOST),
        dst: 0xc612_0000 | (i.wrapping_mul(0x9e37_79b9) >> 16),
        sport: 20_000 + (i % PORTS_PER_HOST) as u16,
        dport: 53,
        proto: proto::UDP,
    }
}

/// Packets per burst (as the nodes see a vector: prefetches run ahead by a burst).
pub const BURST: usize = 32;

/// A 64-byte frame's IPv4/UDP packet (checksums valid) of tuple `k`, written into `buf`.
fn write_packet(buf: &mut [u8; 46], k: &Key4) {
    buf.fill(0);
    buf[0] = 0x45;
    buf[2..4].copy_from_slice(&46u16.to_be_bytes());
    buf[8] = 64;
    buf[9] = proto::UDP;
    buf[12..16].copy_from_slice(&k.src.to_be_bytes());
    buf[16..20].copy_from_slice(&k.dst.to_be_bytes());
    let c = wire::checksum::checksum(&buf[..20]);
    buf[10..12].copy_from_slice(&c.to_be_bytes());
    buf[20..22].copy_from_slice(&k.sport.to_be_bytes());
    buf[22..24].copy_from_slice(&k.dport.to_be_bytes());
    buf[24..26].copy_from_slice(&26u16.to_be_bytes());
    let s =
        wire::checksum::pseudo_v4(k.src, k.dst, proto::UDP, 26) + wire::checksum::sum(&buf[20..]);
    let c = !wire::checksum::fold(s);
    buf[26..28].copy_from_slice(&c.to_be_bytes());
}

/// Runs the benchmark; `progress` hears what is going on.
pub fn run(opts: &NatOptions, mut progress: impl FnMut(&str)) -> anyhow::Result<NatReport> {
    if opts.sessions.is_empty() || opts.sessions.iter().any(|&n| n == 0 || n > 50_000_000) {
        bail!("--sessions takes table sizes from 1 to 50M, e.g. --sessions 1000000");
    }
    if opts.packets == 0 {
        bail!("--packets must be positive");
    }
    let core = crate::dpdk::bench_core();
    let mut runs = Vec::new();
    for &n in &opts.sessions {
        progress(&format!("{n} sessions: allocating the table"));
        let mut t = NatTable::new(n, 0, 1, &Timeouts::default());
        let _pin = crate::lpm::Pin::to(core)?;
        let addrs = (n as u32).div_ceil(PER_ADDRESS).max(1);
        let pool = [(0xcb00_7100, 0xcb00_7100 + addrs - 1)];

        progress(&format!("{n} sessions: create (lookup + source NAT)"));
        let c = Clocks::start();
        let mut ids = Vec::with_capacity(n);
        for i in 0..n as u32 {
            let o = inside(i);
            if t.lookup(&o, T0).is_none() {
                if let Ok(id) = t.create_snat(o, Pool { ranges: &pool }, 0, T0) {
                    ids.push(id);
                }
            }
        }
        let create = c.phase(n as u64);
        let created = ids.len();
        if created == 0 {
            bail!("no session could be made");
        }

        progress(&format!("{n} sessions: translate {} packets", opts.packets));
        // The trace, untimed: random sessions, random directions, read in order below.
        let mut rng = SmallRng::seed_from_u64(opts.seed);
        let trace: Vec<Key4> = (0..opts.packets)
            .filter_map(|_| {
                let r: u64 = rng.gen();
                let id = ids[((r as u32 as u64 * created as u64) >> 32) as usize];
                let s = t.get(id)?;
                Some(if r >> 63 != 0 { s.t.reversed() } else { s.o })
            })
            .collect();
        drop(ids);
        let mut bufs = [[0u8; 46]; BURST];
        let mut hashes = [0u64; BURST];
        let mut translated = 0u64;
        let now = T0 + 1_000_000_000;
        let c = Clocks::start();
        for burst in trace.chunks(BURST) {
            let m = burst.len();
            // As the nodes do: the batch's tuples hashed and their index slots prefetched,
            // then their sessions, then each packet handled.
            for ((buf, h), k) in bufs.iter_mut().zip(hashes.iter_mut()).zip(burst) {
                write_packet(buf, k);
                *h = t.hash(k);
                t.prefetch_slot(*h);
            }
            for h in &hashes[..m] {
                t.prefetch_session(*h);
            }
            for (buf, h) in bufs.iter_mut().zip(&hashes).take(m) {
                let Ok(p) = rewrite::parse(buf) else { continue };
                if let Some((id, side)) = t.lookup_hashed(&p.key, *h, now) {
                    if let Some(s) = t.get(id).copied() {
                        let to = match side {
                            Side::Orig => s.t,
                            Side::Reply => s.o.reversed(),
                        };
                        rewrite::rewrite(buf, &p, &to);
                        t.refresh(id, side, 0, now);
                        translated += 1;
                    }
                }
            }
        }
        let translate = c.phase(opts.packets as u64);
        std::hint::black_box(&bufs);
        runs.push(NatRun {
            sessions: n,
            pool_addresses: addrs,
            memory_bytes: t.memory_bytes(),
            bytes_per_session: t.memory_bytes() as f64 / n as f64,
            create,
            created,
            translate,
            translated,
        });
    }
    Ok(NatReport {
        cpu: cpu_model(),
        nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
        core,
        runs,
    })
}

/// Human-readable table.
pub fn format_table(r: &NatReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "NAT44 from memory: {}, {} CPUs, core {}",
        r.cpu, r.nproc, r.core
    );
    let _ = writeln!(
        o,
        "{:>10} {:>6} {:>10} {:>16} {:>10} {:>16} {:>10}",
        "sessions", "pool", "B/session", "create /s/core", "ns", "translate /s/core", "ns"
    );
    for x in &r.runs {
        let _ = writeln!(
            o,
            "{:>10} {:>6} {:>10.1} {:>16.0} {:>10.1} {:>16.0} {:>10.1}",
            x.sessions,
            x.pool_addresses,
            x.bytes_per_session,
            x.create.per_cpu_sec,
            x.create.cpu_ns_per_op,
            x.translate.per_cpu_sec,
            x.translate.cpu_ns_per_op
        );
        if x.created < x.sessions || x.translated < x.translate.ops {
            let _ = writeln!(
                o,
                "  {} of {} sessions made, {} of {} packets translated",
                x.created, x.sessions, x.translated, x.translate.ops
            );
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_run_makes_every_session_and_translates_every_packet() {
        let r = run(
            &NatOptions {
                sessions: vec![50_000],
                packets: 100_000,
                seed: 3,
            },
            |_| {},
        )
        .unwrap();
        let x = &r.runs[0];
        assert_eq!(x.created, 50_000);
        assert_eq!(x.translated, 100_000);
        assert_eq!(x.pool_addresses, 2);
        assert!(format_table(&r).contains("50000"));
    }
}
