//! `ferrouter-lab bench conntrack`: the connection tracker ([`firewall::conntrack`]) from
//! memory, no I/O, one core: how fast flows are created and looked up in a table of 1M or
//! 10M flows, and how many bytes each flow costs.
//!
//! Per table size N, on one pinned core, each phase timed as a whole with the wall clock:
//! * **insert**: N TCP SYNs of distinct flows, each looked up (a miss) and created, in
//!   bursts of [`BURST`] through `lookup_burst` (which prefetches) then `create`;
//! * **handshake**: the table emptied, then N connections opened in full: SYN (lookup,
//!   create), SYN/ACK and ACK (lookups that track state and windows), in bursts; a
//!   "connection" is the three packets and the create;
//! * **lookup**: `--lookups` ACK segments of random established flows, in random
//!   directions, in bursts: each a hit that checks the window and refreshes the timeout.
//!
//! Each phase reports its rate per second of the thread's CPU time (the per-core rate, which
//! time the core spent on other processes does not dilute: this host is shared) and per
//! wall-clock second.
//!
//! Packets are built on the fly from the flow's index (no stored trace: at 10M flows it
//! would be as large as the table), and their building is inside the timings. Memory is
//! what the table allocates (entries and tags), divided by N.

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::time::Instant;

use anyhow::{bail, Context};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use firewall::conntrack::{
    proto, tcp_flags, Config, Conntrack, CtState, Packet, Segment, Tuple, Verdict, L4,
};

/// Packets per burst.
pub const BURST: usize = 32;

/// Settings.
#[derive(Clone, Debug)]
pub struct ConntrackOptions {
    /// Table sizes (flows), one run each.
    pub entries: Vec<usize>,
    /// Lookups per run.
    pub lookups: usize,
    /// Seed of the random lookups.
    pub seed: u64,
}

impl Default for ConntrackOptions {
    fn default() -> Self {
        ConntrackOptions {
            entries: vec![1_000_000, 10_000_000],
            lookups: 10_000_000,
            seed: 1,
        }
    }
}

/// One timed phase.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Phase {
    /// Operations (flows created, connections opened, lookups).
    pub ops: u64,
    /// Wall-clock seconds.
    pub secs: f64,
    /// Operations per wall-clock second.
    pub per_sec: f64,
    /// Wall-clock nanoseconds per operation.
    pub ns_per_op: f64,
    /// CPU seconds of the thread (not counting time other processes had the core).
    pub cpu_secs: f64,
    /// Operations per CPU second: the per-core rate.
    pub per_cpu_sec: f64,
    /// CPU nanoseconds per operation.
    pub cpu_ns_per_op: f64,
}

impl Phase {
    fn new(ops: u64, secs: f64, cpu_secs: f64) -> Phase {
        Phase {
            ops,
            secs,
            per_sec: ops as f64 / secs,
            ns_per_op: secs * 1e9 / ops.max(1) as f64,
            cpu_secs,
            per_cpu_sec: ops as f64 / cpu_secs,
            cpu_ns_per_op: cpu_secs * 1e9 / ops.max(1) as f64,
        }
    }
}

/// The calling thread's CPU time, in seconds.
pub(crate) fn thread_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `ts` is.
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Wall and CPU clocks read together.
pub(crate) struct Clocks(Instant, f64);

impl Clocks {
    pub(crate) fn start() -> Clocks {
        Clocks(Instant::now(), thread_cpu())
    }
    pub(crate) fn phase(&self, ops: u64) -> Phase {
        Phase::new(ops, self.0.elapsed().as_secs_f64(), thread_cpu() - self.1)
    }
}

/// One table size.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ConntrackRun {
    /// The table's maximum (flows).
    pub entries: usize,
    /// Slots allocated.
    pub slots: usize,
    /// Bytes allocated (entries and tags).
    pub memory_bytes: usize,
    /// Bytes per flow at the maximum (memory / entries).
    pub bytes_per_flow: f64,
    /// Bytes per slot (memory / slots).
    pub bytes_per_slot: f64,
    /// Bytes of one entry.
    pub entry_bytes: usize,
    /// SYN lookups and creates.
    pub insert: Phase,
    /// Flows held after the insert phase.
    pub inserted: usize,
    /// Creates refused in the insert phase (two full buckets holding no unassured flow).
    pub insert_refused: u64,
    /// Unassured flows dropped early in the insert phase.
    pub insert_early_dropped: u64,
    /// Full handshakes (SYN + create, SYN/ACK, ACK).
    pub handshake: Phase,
    /// Connections that reached ESTABLISHED.
    pub established: usize,
    /// Lookups of established flows.
    pub lookup: Phase,
    /// Lookups whose verdict was `Established` (all of them, or the bench failed).
    pub lookup_hits: u64,
}

/// The report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ConntrackReport {
    /// The CPU (`model name` of /proc/cpuinfo).
    pub cpu: String,
    /// CPUs online.
    pub nproc: usize,
    /// The core the phases ran on.
    pub core: usize,
    /// Packets per burst.
    pub burst: usize,
    /// One per table size.
    pub runs: Vec<ConntrackRun>,
}

const T0: u64 = 1_000_000_000_000;

fn tuple(i: u32) -> Tuple {
    // (source, source port) is unique per index; destinations spread over a /16.
    let mix = i.wrapping_mul(0x9e37_79b9);
    Tuple::v4(
        Ipv4Addr::from(0x0a00_0000 | (i >> 14)),
        Ipv4Addr::from(0xc612_0000 | (mix >> 16)),
        1024 + (i & 0x3fff) as u16,
        443,
        proto::TCP,
    )
}

fn isn(i: u32) -> (u32, u32) {
    let a = i.wrapping_mul(2_654_435_761);
    (a, a ^ 0x5555_5555)
}

fn packet(i: u32, reply: bool, flags: u8, now_ns: u64) -> Packet {
    let t = tuple(i);
    let (o, r) = isn(i);
    let (tuple, seq, ack) = match (reply, flags) {
        (false, tcp_flags::SYN) => (t, o, 0),
        (true, _) if flags & tcp_flags::SYN != 0 => (t.reversed(), r, o.wrapping_add(1)),
        (false, _) => (t, o.wrapping_add(1), r.wrapping_add(1)),
        (true, _) => (t.reversed(), r.wrapping_add(1), o.wrapping_add(1)),
    };
    Packet {
        tuple,
        l4: L4::Tcp(Segment {
            flags,
            seq,
            ack,
            window: 65535,
            wscale: (flags & tcp_flags::SYN != 0).then_some(7),
            payload_len: 0,
        }),
        now_ns,
    }
}

pub(crate) fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Creates flows `lo..hi` from SYNs, in bursts. Returns the creates that succeeded.
fn insert_syns(ct: &mut Conntrack, lo: u32, hi: u32) -> u64 {
    let mut pkts = [packet(0, false, tcp_flags::SYN, T0); BURST];
    let mut out = [Verdict::default(); BURST];
    let mut made = 0;
    let mut i = lo;
    while i < hi {
        let n = ((hi - i) as usize).min(BURST);
        for (k, p) in pkts.iter_mut().take(n).enumerate() {
            *p = packet(i + k as u32, false, tcp_flags::SYN, T0);
        }
        ct.lookup_burst(&pkts[..n], &mut out[..n]);
        for (p, v) in pkts.iter().zip(&out).take(n) {
            if v.state == CtState::New && ct.create(p, v).is_ok() {
                made += 1;
            }
        }
        i += n as u32;
    }
    made
}

/// Opens connections `0..n` in full, in bursts. Returns how many reached ESTABLISHED.
fn handshakes(ct: &mut Conntrack, n: u32) -> usize {
    let mut pkts = [packet(0, false, tcp_flags::SYN, T0); BURST];
    let mut out = [Verdict::default(); BURST];
    let mut est = 0;
    let mut i = 0;
    while i < n {
        let m = ((n - i) as usize).min(BURST);
        for (k, p) in pkts.iter_mut().take(m).enumerate() {
            *p = packet(i + k as u32, false, tcp_flags::SYN, T0);
        }
        ct.lookup_burst(&pkts[..m], &mut out[..m]);
        for (p, v) in pkts.iter().zip(&out).take(m) {
            if v.state == CtState::New {
                let _ = ct.create(p, v);
            }
        }
        for (k, p) in pkts.iter_mut().take(m).enumerate() {
            *p = packet(i + k as u32, true, tcp_flags::SYN | tcp_flags::ACK, T0);
        }
        ct.lookup_burst(&pkts[..m], &mut out[..m]);
        for (k, p) in pkts.iter_mut().take(m).enumerate() {
            *p = packet(i + k as u32, false, tcp_flags::ACK, T0);
        }
        ct.lookup_burst(&pkts[..m], &mut out[..m]);
        est += out
            .iter()
            .take(m)
            .filter(|v| v.state == CtState::Established)
            .count();
        i += m as u32;
    }
    est
}

/// `count` lookups of random flows among `0..n`, random directions. Returns the hits.
fn lookups(ct: &mut Conntrack, n: u32, count: usize, rng: &mut SmallRng) -> u64 {
    let mut pkts = [packet(0, false, tcp_flags::ACK, T0); BURST];
    let mut out = [Verdict::default(); BURST];
    let mut hits = 0;
    let mut left = count;
    while left > 0 {
        let m = left.min(BURST);
        for p in pkts.iter_mut().take(m) {
            let r: u64 = rng.gen();
            let i = ((r as u32 as u64 * n as u64) >> 32) as u32;
            *p = packet(i, r >> 63 != 0, tcp_flags::ACK, T0 + 1_000_000_000);
        }
        ct.lookup_burst(&pkts[..m], &mut out[..m]);
        hits += out
            .iter()
            .take(m)
            .filter(|v| v.state == CtState::Established)
            .count() as u64;
        left -= m;
    }
    hits
}

/// Runs the benchmark; `progress` hears what is going on.
pub fn run(
    opts: &ConntrackOptions,
    mut progress: impl FnMut(&str),
) -> anyhow::Result<ConntrackReport> {
    if opts.entries.is_empty() || opts.entries.iter().any(|&n| n == 0 || n > 100_000_000) {
        bail!("--entries takes table sizes from 1 to 100M, e.g. --entries 1000000,10000000");
    }
    if opts.lookups == 0 {
        bail!("--lookups must be positive");
    }
    let core = crate::dpdk::bench_core();
    let mut runs = Vec::new();
    for &n in &opts.entries {
        progress(&format!("{n} flows: allocating the table"));
        let mut ct = Conntrack::new(&Config {
            max_entries: n,
            seed: Some(opts.seed),
            ..Config::default()
        })
        .context("conntrack table")?;
        let _pin = crate::lpm::Pin::to(core)?;
        let n32 = n as u32;

        progress(&format!("{n} flows: insert (SYN lookup + create)"));
        let t = Clocks::start();
        let made = insert_syns(&mut ct, 0, n32);
        let insert = t.phase(made);
        let inserted = ct.len();
        let c = *ct.counters();
        ct.clear();

        progress(&format!("{n} flows: handshakes (SYN, SYN/ACK, ACK)"));
        let t = Clocks::start();
        let established = handshakes(&mut ct, n32);
        let handshake = t.phase(n as u64);

        progress(&format!("{n} flows: {} lookups", opts.lookups));
        let mut rng = SmallRng::seed_from_u64(opts.seed);
        let t = Clocks::start();
        let hits = lookups(&mut ct, n32, opts.lookups, &mut rng);
        let lookup = t.phase(opts.lookups as u64);

        runs.push(ConntrackRun {
            entries: n,
            slots: ct.slots(),
            memory_bytes: ct.memory_bytes(),
            bytes_per_flow: ct.memory_bytes() as f64 / n as f64,
            bytes_per_slot: ct.memory_bytes() as f64 / ct.slots() as f64,
            entry_bytes: Conntrack::ENTRY_BYTES,
            insert,
            inserted,
            insert_refused: c.refused,
            insert_early_dropped: c.early_dropped,
            handshake,
            established,
            lookup,
            lookup_hits: hits,
        });
    }
    Ok(ConntrackReport {
        cpu: cpu_model(),
        nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
        core,
        burst: BURST,
        runs,
    })
}

/// Human-readable table.
pub fn format_table(r: &ConntrackReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "connection tracking from memory: {}, {} CPUs, core {}, bursts of {}",
        r.cpu, r.nproc, r.core, r.burst
    );
    let _ = writeln!(
        o,
        "  per CPU second of the thread (the per-core rate), CPU ns per op, [per wall-clock second]"
    );
    let _ = writeln!(
        o,
        "{:>11} {:>7} {:>26} {:>26} {:>26}",
        "flows", "B/flow", "inserts/s", "handshakes/s", "lookups/s",
    );
    let cell = |p: &Phase| {
        format!(
            "{:.2}M {:.0}ns [{:.2}M]",
            p.per_cpu_sec / 1e6,
            p.cpu_ns_per_op,
            p.per_sec / 1e6
        )
    };
    for x in &r.runs {
        let _ = writeln!(
            o,
            "{:>11} {:>7.1} {:>26} {:>26} {:>26}",
            x.entries,
            x.bytes_per_flow,
            cell(&x.insert),
            cell(&x.handshake),
            cell(&x.lookup),
        );
        let _ = writeln!(
            o,
            "  {} slots, {} MiB, entry {} B; insert held {} ({} refused, {} dropped early); {} established; {} of {} lookups hit",
            x.slots,
            x.memory_bytes >> 20,
            x.entry_bytes,
            x.inserted,
            x.insert_refused,
            x.insert_early_dropped,
            x.established,
            x.lookup_hits,
            x.lookup.ops
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_run_establishes_and_hits_everything() {
        let r = run(
            &ConntrackOptions {
                entries: vec![20_000],
                lookups: 50_000,
                seed: 3,
            },
            |_| {},
        )
        .unwrap();
        let x = &r.runs[0];
        assert_eq!(x.established, 20_000);
        assert_eq!(x.lookup_hits, 50_000);
        assert!(x.inserted as u64 == x.insert.ops);
        assert!(format_table(&r).contains("20000"));
    }
}
