//! `ferrouter-lab bench ipsec --dut ferrouter,strongswan`: two IPsec gateways, live, under
//! the RFC 2544 tester (issue 26). The DUT is the pair: two ferrouter gateways with
//! route-based tunnels and manually keyed SAs, or two strongSwan `charon` daemons that
//! negotiate their SAs with IKEv2 (PSK) and do ESP in userspace through a TUN
//! (kernel-libipsec: the machines here have no ESP or xfrm in their kernels).
//!
//! ```text
//!  {p}-t (tester)        {p}-gw1                 {p}-wire          {p}-gw2            {p}-t
//!  ta ─────────── lan 10.1.0.1  wan 192.0.2.1 ══ br0 (ESP) ══ wan 192.0.2.2  lan 10.2.0.1 ─── tb
//!  (10.1.0.2: side A's host)                                          (10.2.0.2: side B's host)
//! ```
//!
//! The gateways, the wire and their addresses are [`crate::ipsec::IpsecLab`]'s; the
//! tester's two AF_XDP ports take the place of its hosts h1 and h2. With `N` tunnels, the
//! tester's destinations are `N` blocks of 198.19.0.0/16 (side B) and, for the reverse
//! direction, of 198.18.0.0/16 (side A): block `i` is carried by tunnel `i` (ferrouter:
//! the tunnel interface `ipsec{i}` with its own SA pair and a route to the block through
//! it; strongSwan: CHILD_SA `t{i}` of one IKE SA, its traffic selectors the block and the
//! other side's LAN). The search, the repetitions, the ratios and the JSON are the RFC
//! 2544 bench's ([`crate::rfc2544::measure`], [`tester::compare`]).

use std::io::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use dataplane::Arena;
use serde::Serialize;
use tester::flows::{AddrRange, Endpoints, Prefix};
use tester::{DirectionConfig, Profile, TrafficConfig};

use crate::ipsec::IpsecLab;
use crate::rfc2544::report::Run;
use crate::rfc2544::{self as r2544, Eta, OwnCost, Subject};
pub use crate::swan::{parse_listing, Listing};
use crate::swan::{tail, Charon};

/// Most tunnels a run may ask for (the blocks are /30s of a /16 at 16,384).
pub const MAX_TUNNELS: usize = 10_000;

/// The longest wait for charon to drain its queues before a trial.
const SETTLE_MAX: Duration = Duration::from_secs(30);

/// The PSK both strongSwan gateways authenticate with (a benchmark's, not a secret).
const PSK: &str = "ferrouter-bench-psk-not-a-secret";

/// Which pair of gateways.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dut {
    /// Two ferrouter gateways (route-based tunnels, manual SAs, ESP in the fast path).
    Ferrouter,
    /// Two strongSwan charon daemons (IKEv2 with a PSK, ESP by kernel-libipsec).
    Strongswan,
}

impl Dut {
    /// Name as on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Dut::Ferrouter => "ferrouter",
            Dut::Strongswan => "strongswan",
        }
    }
    /// Parse a command-line name.
    pub fn parse(s: &str) -> Result<Dut> {
        Ok(match s {
            "ferrouter" => Dut::Ferrouter,
            "strongswan" => Dut::Strongswan,
            _ => bail!("unknown IPsec DUT {s:?} (ferrouter, strongswan)"),
        })
    }
}

/// An ESP algorithm both DUTs run: (ferrouter's name, strongSwan's ESP proposal).
pub fn algorithm(name: &str) -> Result<(&'static str, &'static str)> {
    Ok(match name {
        "aes-128-gcm" => ("aes-128-gcm", "aes128gcm16"),
        "aes-256-gcm" => ("aes-256-gcm", "aes256gcm16"),
        "chacha20-poly1305" => ("chacha20-poly1305", "chacha20poly1305"),
        _ => bail!(
            "unknown or unsupported algorithm {name:?}: aes-128-gcm, aes-256-gcm, chacha20-poly1305"
        ),
    })
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct Options {
    /// DUTs, alternated within each repetition.
    pub duts: Vec<Dut>,
    /// Traffic profiles (IPv4: `ipv4-<size>`, `imix1`).
    pub profiles: Vec<String>,
    /// Tunnel counts, each a separate set of runs (the DUTs restarted).
    pub tunnels: Vec<usize>,
    /// ESP algorithm (see [`algorithm`]).
    pub alg: String,
    /// Repetitions (A B A B ...).
    pub repeat: usize,
    /// Seconds of the search's final trials.
    pub duration: f64,
    /// Line rate per direction the search starts from, Gbit/s.
    pub line_rate_gbps: f64,
    /// The search stops when its bounds are this close, percent.
    pub resolution_pct: f64,
    /// Most trials of one search.
    pub max_trials: u32,
    /// The PDR's loss goal, percent (0: NDR only).
    pub pdr_loss_pct: f64,
    /// Flows per direction (default: 4 per tunnel, at least 64).
    pub flows: Option<u32>,
    /// Traffic both ways (each gateway encrypts and decrypts) rather than A to B.
    pub bidirectional: bool,
    /// Load of the CPU-cost trial, percent of the line rate (0: none).
    pub cost_load_pct: f64,
    /// Namespace and directory prefix.
    pub prefix: String,
    /// The ferrouter binary.
    pub ferrouter_bin: PathBuf,
    /// Core of the tester.
    pub tester_core: usize,
    /// Core of both gateways (ferrouter's workers pin themselves to the last core; the
    /// charon daemons are started under `taskset` on it).
    pub dut_core: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            duts: vec![Dut::Ferrouter, Dut::Strongswan],
            profiles: vec!["ipv4-64".into(), "ipv4-1400".into(), "imix1".into()],
            tunnels: vec![1, 100, 1000],
            alg: "aes-128-gcm".into(),
            repeat: 1,
            duration: 1.0,
            line_rate_gbps: 10.0,
            resolution_pct: 1.0,
            max_trials: 40,
            pdr_loss_pct: 0.5,
            flows: None,
            bidirectional: false,
            cost_load_pct: 0.1,
            prefix: "fib".into(),
            ferrouter_bin: PathBuf::from("ferrouter"),
            tester_core: 0,
            dut_core: 1,
        }
    }
}

/// The Debian packages the strongSwan DUT needs: (tool or file, package).
pub const STRONGSWAN_PACKAGES: [(&str, &str); 4] = [
    ("/usr/sbin/charon-systemd", "charon-systemd"),
    ("swanctl", "strongswan-swanctl"),
    (
        "/usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so",
        "libcharon-extra-plugins",
    ),
    (
        "/usr/lib/ipsec/plugins/libstrongswan-openssl.so",
        "libstrongswan-standard-plugins",
    ),
];

/// Root, and every tool and plugin the chosen DUTs need, each missing one named with its
/// Debian package.
pub fn preconditions(duts: &[Dut]) -> Result<()> {
    let mut tools: Vec<(&str, &str)> = vec![("ethtool", "ethtool"), ("taskset", "util-linux")];
    crate::preconditions("the IPsec bench builds namespaces", &tools)?;
    if duts.contains(&Dut::Strongswan) {
        tools.clear();
        for (what, package) in STRONGSWAN_PACKAGES {
            if what.starts_with('/') {
                if !Path::new(what).exists() {
                    bail!("{what} is missing: install the Debian package {package} (apt-get install {package})");
                }
            } else {
                crate::need_tool(what, package)?;
            }
        }
    }
    Ok(())
}

/// One run: a DUT, a profile, a tunnel count, a repetition.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct IpsecRun {
    /// The ESP algorithm.
    pub alg: String,
    /// Tunnels (SA pairs) the traffic was spread over.
    pub tunnels: usize,
    /// Frames lost in the search's last passing final trial at the NDR, percent of those
    /// sent (the evidence behind the NDR: 0 by its definition); `None` when none passed.
    pub loss: Option<f64>,
    /// SA pairs each gateway had installed before the traffic (gw1, gw2): ferrouter's
    /// `show ipsec` (inbound and outbound SAs, halved), strongSwan's CHILD_SAs in state
    /// INSTALLED (`swanctl --list-sas`).
    pub sas_installed: [usize; 2],
    /// IKE SAs established between the gateways (strongSwan; `None` for ferrouter, which
    /// keys its SAs by hand).
    pub ike_established: Option<usize>,
    /// Packets gw1's outbound SAs encrypted during this profile's trials (warm-up and
    /// CPU-cost trial included), and gw2's inbound SAs decrypted.
    pub esp_packets: [u64; 2],
    /// The RFC 2544 run: dut, transport, profile, throughput_mpps (the NDR),
    /// throughput_gbps_l1, ndr_mpps, pdr_mpps, trials, cpu, cost, notes, repeat, ...
    #[serde(flatten)]
    pub run: Run,
}

/// ferrouter ÷ strongSwan over the repetitions, pair by pair.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct IpsecRatio {
    /// The DUT on top.
    pub a: String,
    /// The reference.
    pub b: String,
    /// Transport.
    pub transport: String,
    /// Profile.
    pub profile: String,
    /// Tunnels.
    pub tunnels: usize,
    /// Median of the per-repetition ratios of the NDRs.
    pub median: Option<f64>,
    /// Smallest per-repetition ratio.
    pub min: Option<f64>,
    /// Largest.
    pub max: Option<f64>,
    /// Complete pairs.
    pub pairs: usize,
    /// Repetitions with a side missing, or the reference at 0.
    pub missing: usize,
    /// The issue's target (5x).
    pub target: f64,
    /// Whether the median meets it.
    pub met: Option<bool>,
}

/// One DUT's NDR over the repetitions.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct IpsecStat {
    /// DUT.
    pub dut: String,
    /// Transport.
    pub transport: String,
    /// Profile.
    pub profile: String,
    /// Tunnels.
    pub tunnels: usize,
    /// Runs measured.
    pub runs: usize,
    /// Median NDR, Mpps.
    pub median_mpps: f64,
    /// Smallest, Mpps.
    pub min_mpps: f64,
    /// Largest, Mpps.
    pub max_mpps: f64,
    /// Coefficient of variation.
    pub cv: Option<f64>,
}

/// The machine the run was measured on.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Machine {
    /// `model name` of /proc/cpuinfo.
    pub cpu_model: String,
    /// Cores this process may run on.
    pub nproc: usize,
    /// `uname -r`.
    pub kernel: String,
    /// strongSwan's version (`swanctl --version`), when it was a DUT.
    pub strongswan: Option<String>,
    /// When the run started (UTC, RFC 3339).
    pub date: String,
}

impl Machine {
    /// This machine, now.
    pub fn probe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map_or("unknown".into(), |(_, m)| m.trim().to_string());
        let out = |cmd: &str, args: &[&str]| {
            Command::new(cmd)
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        };
        Machine {
            cpu_model,
            nproc: dataplane::worker::cores().len(),
            kernel: out("uname", &["-r"]).unwrap_or_default(),
            strongswan: None,
            date: out("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]).unwrap_or_default(),
        }
    }
}

/// The whole report: `{"machine","runs","ratios","stability","notes"}`.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Report {
    /// Where it ran.
    pub machine: Machine,
    /// Every run, in execution order.
    pub runs: Vec<IpsecRun>,
    /// ferrouter ÷ strongswan per transport, profile and tunnel count.
    pub ratios: Vec<IpsecRatio>,
    /// Each DUT's spread over the repetitions.
    pub stability: Vec<IpsecStat>,
    /// What qualifies the whole run.
    pub notes: Vec<String>,
}

/// The issue's target: ferrouter's pair at least 5 times strongSwan's.
pub const TARGET_RATIO: f64 = 5.0;

impl Report {
    fn keys(&self) -> Vec<(String, String, usize)> {
        let mut keys = Vec::new();
        for r in &self.runs {
            let k = (r.run.transport.clone(), r.run.profile.clone(), r.tunnels);
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        keys
    }

    /// Fill the ratios and the stability figures from the runs.
    pub fn finish(&mut self) {
        let reps = self
            .runs
            .iter()
            .map(|r| r.run.repeat + 1)
            .max()
            .unwrap_or(0);
        let of = |dut: &str, (tr, p, n): &(String, String, usize), k: usize| {
            self.runs
                .iter()
                .find(|r| {
                    r.run.dut == dut
                        && &r.run.transport == tr
                        && &r.run.profile == p
                        && r.tunnels == *n
                        && r.run.repeat == k
                })
                .and_then(|r| r.run.measured())
        };
        let mut ratios = Vec::new();
        let mut stability = Vec::new();
        for key in self.keys() {
            let has = |d: &str| self.runs.iter().any(|r| r.run.dut == d);
            if has("ferrouter") && has("strongswan") {
                let q = tester::compare::paired_ratio(
                    (0..reps).map(|k| (of("ferrouter", &key, k), of("strongswan", &key, k))),
                );
                if q.pairs > 0 || q.missing > 0 {
                    ratios.push(IpsecRatio {
                        a: "ferrouter".into(),
                        b: "strongswan".into(),
                        transport: key.0.clone(),
                        profile: key.1.clone(),
                        tunnels: key.2,
                        median: q.median,
                        min: q.min,
                        max: q.max,
                        pairs: q.pairs,
                        missing: q.missing,
                        target: TARGET_RATIO,
                        met: q.median.map(|m| m >= TARGET_RATIO),
                    });
                }
            }
            for dut in ["ferrouter", "strongswan"] {
                let runs: Vec<&IpsecRun> = self
                    .runs
                    .iter()
                    .filter(|r| {
                        r.run.dut == dut
                            && r.run.transport == key.0
                            && r.run.profile == key.1
                            && r.tunnels == key.2
                    })
                    .collect();
                if runs.is_empty() {
                    continue;
                }
                let s = tester::compare::spread(runs.iter().map(|r| r.run.measured()));
                stability.push(IpsecStat {
                    dut: dut.into(),
                    transport: key.0.clone(),
                    profile: key.1.clone(),
                    tunnels: key.2,
                    runs: s.map_or(0, |s| s.n),
                    median_mpps: s.map_or(0.0, |s| s.median),
                    min_mpps: s.map_or(0.0, |s| s.min),
                    max_mpps: s.map_or(0.0, |s| s.max),
                    cv: s.and_then(|s| s.cv),
                });
            }
        }
        self.ratios = ratios;
        self.stability = stability;
    }

    /// The readable table.
    pub fn table(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let m = &self.machine;
        let _ = writeln!(
            s,
            "machine: {} ({} cores), kernel {}, {}{}",
            m.cpu_model,
            m.nproc,
            m.kernel,
            m.date,
            m.strongswan
                .as_ref()
                .map_or(String::new(), |v| format!(", {v}"))
        );
        let _ = writeln!(
            s,
            "{:<11} {:<6} {:<12} {:<10} {:>7} {:>4} {:>9} {:>9} {:>9} {:>11}  SAs gw1/gw2",
            "DUT",
            "trans",
            "alg",
            "profile",
            "tunnels",
            "rep",
            "NDR Mpps",
            "PDR Mpps",
            "Gbps(L1)",
            "ESP pkts"
        );
        for r in &self.runs {
            let pdr = r.run.pdr_mpps.map_or("-".into(), |p| format!("{p:.4}"));
            let _ = writeln!(
                s,
                "{:<11} {:<6} {:<12} {:<10} {:>7} {:>4} {:>9.4} {:>9} {:>9.3} {:>11}  {}/{}",
                r.run.dut,
                r.run.transport,
                r.alg,
                r.run.profile,
                r.tunnels,
                r.run.repeat,
                r.run.throughput_mpps,
                pdr,
                r.run.throughput_gbps_l1,
                r.esp_packets[0],
                r.sas_installed[0],
                r.sas_installed[1]
            );
        }
        if !self.ratios.is_empty() {
            let _ = writeln!(s);
            for q in &self.ratios {
                let what = format!(
                    "{} {} tunnels, {}: ferrouter ÷ strongswan NDR",
                    q.profile, q.tunnels, q.transport
                );
                match (q.median, q.min, q.max) {
                    (Some(med), Some(lo), Some(hi)) if q.pairs > 1 => {
                        let _ = writeln!(
                            s,
                            "{what}: median {med:.1}x (min {lo:.1}, max {hi:.1}, {} pairs), target {:.0}x {}",
                            q.pairs,
                            q.target,
                            if med >= q.target { "met" } else { "NOT met" }
                        );
                    }
                    (Some(med), ..) => {
                        let _ = writeln!(
                            s,
                            "{what}: {med:.1}x, target {:.0}x {}",
                            q.target,
                            if med >= q.target { "met" } else { "NOT met" }
                        );
                    }
                    _ => {
                        // A reference at 0 is no pair (paired_ratio), but says something.
                        let zero = self.stability.iter().any(|d| {
                            d.dut == q.b
                                && d.transport == q.transport
                                && d.profile == q.profile
                                && d.tunnels == q.tunnels
                                && d.runs > 0
                                && d.max_mpps <= 0.0
                        });
                        if zero {
                            let _ = writeln!(
                                s,
                                "{what}: unbounded: {} passed no trial, even at the search's lowest rate",
                                q.b
                            );
                        } else {
                            let _ = writeln!(s, "{what}: no complete pair ({} missing)", q.missing);
                        }
                    }
                }
            }
        }
        if self.stability.iter().any(|d| d.runs > 1) {
            let _ = writeln!(s);
            for d in self.stability.iter().filter(|d| d.runs > 1) {
                let cv = d.cv.map_or("-".into(), |c| format!("{:.1} %", c * 100.0));
                let _ = writeln!(
                    s,
                    "{} {} {} tunnels: median {:.4} Mpps (min {:.4}, max {:.4}) over {} runs, CV {cv}{}",
                    d.dut,
                    d.profile,
                    d.tunnels,
                    d.median_mpps,
                    d.min_mpps,
                    d.max_mpps,
                    d.runs,
                    if d.cv.is_some_and(|c| c > tester::compare::CV_WARN) {
                        " (unstable: more repetitions or longer trials needed)"
                    } else {
                        ""
                    }
                );
            }
        }
        let _ = writeln!(
            s,
            "\nCPU time during each run (% of the core: user / system / softirq / idle / steal)"
        );
        for r in &self.runs {
            let cores: Vec<String> = r
                .run
                .cpu
                .iter()
                .map(|c| {
                    format!(
                        "core {} ({}): {:.0}/{:.0}/{:.0}/{:.0}/{:.0}",
                        c.core, c.role, c.user, c.system, c.softirq, c.idle, c.steal
                    )
                })
                .collect();
            let _ = writeln!(
                s,
                "{:<11} {:<10} {:>5} tunnels  {}",
                r.run.dut,
                r.run.profile,
                r.tunnels,
                cores.join("   ")
            );
        }
        if self.runs.iter().any(|r| r.run.cost.is_some()) {
            let _ = writeln!(s, "\nCPU per packet at a fixed load (both gateways' own CPU time over the packets received: ferrouter's workers' busy time, charon's user + system time)");
            for r in &self.runs {
                let Some(c) = &r.run.cost else { continue };
                let _ = writeln!(
                    s,
                    "{:<11} {:<10} {:>5} tunnels  {:.4} Mpps offered, {} lost: {}",
                    r.run.dut,
                    r.run.profile,
                    r.tunnels,
                    c.offered_mpps,
                    c.lost,
                    c.ns_per_packet
                        .map_or("not measured".into(), |n| format!("{n:.0} ns/packet"))
                );
            }
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        for r in &self.runs {
            for n in &r.run.notes {
                let _ = writeln!(
                    s,
                    "note ({} {} {} tunnels): {n}",
                    r.run.dut, r.run.profile, r.tunnels
                );
            }
        }
        s
    }

    /// A grouped bar chart of the NDRs (Mpps) by profile and tunnel count, one colour per
    /// DUT (the median over the repetitions).
    pub fn chart(&self, path: &Path) -> Result<()> {
        let bars: Vec<crate::chart::Bar> = self
            .stability
            .iter()
            .map(|d| crate::chart::Bar {
                series: format!("{}/{}", d.dut, d.transport),
                group: format!("{} ×{}", d.profile, d.tunnels),
                value: d.median_mpps,
            })
            .collect();
        crate::chart::bars(
            path,
            "IPsec gateway pair, zero-loss throughput (NDR), Mpps",
            "Mpps",
            &bars,
        )
    }
}

/// Tunnel `i`'s blocks for `n` tunnels: the prefix length of a block, and block `i` of
/// side A (198.18.0.0/16) or B (198.19.0.0/16). Blocks are /24 when up to 256 tunnels fit,
/// shorter ones never: a /16 holds 16,384 /30s.
pub fn block_len(n: usize) -> u8 {
    let bits = (n.max(1) as u32).next_power_of_two().trailing_zeros() as u8;
    (16 + bits).max(24)
}

/// Block `i` of side `side` (0: A, 198.18/16; 1: B, 198.19/16) for `n` tunnels.
pub fn block(side: usize, i: usize, n: usize) -> (Ipv4Addr, u8) {
    let len = block_len(n);
    let base = u32::from(Ipv4Addr::new(198, 18 + side as u8, 0, 0));
    (Ipv4Addr::from(base + ((i as u32) << (32 - len))), len)
}

/// The last usable address of a block: strongSwan's gateway holds it (kernel-libipsec
/// routes a CHILD_SA's traffic with a source address inside its local selector), the
/// tester never sends to it (its destinations are in the block's first half).
fn block_gateway_addr((net, len): (Ipv4Addr, u8)) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(net) + (1u32 << (32 - len)) - 2)
}

/// The tester's destinations toward side `to`: the first half of each block.
fn destinations(to: usize, n: usize) -> Vec<Prefix> {
    (0..n)
        .filter_map(|i| {
            let (net, len) = block(to, i, n);
            Prefix::new(net.into(), len + 1).ok()
        })
        .collect()
}

/// Tunnel `i`'s interface subnet (ferrouter): 10.128.0.0/9 in /30s, gw1 `.1`, gw2 `.2`.
fn tunnel_addr(i: usize, gw: u8) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 128, 0, 0)) + 4 * i as u32 + u32::from(gw))
}

/// Key material of `len` bytes for tunnel `i`, direction `dir` (distinct for each).
fn key_hex(i: usize, dir: u8, len: usize) -> String {
    let seed = (i as u32).wrapping_mul(2654435761) ^ u32::from(dir);
    (0..len)
        .map(|k| {
            let b = seed.rotate_left((k % 32) as u32) as u8 ^ (k as u8).wrapping_mul(37);
            format!("{b:02x}")
        })
        .collect()
}

/// The bench's namespaces: the IPsec lab's gateways and wire, and the tester's.
struct Topology {
    lab: IpsecLab,
    tester_ns: String,
    /// MACs of ta, tb.
    tester_macs: [[u8; 6]; 2],
    /// MACs of gw1's and gw2's LAN ports.
    lan_macs: [[u8; 6]; 2],
}

impl Topology {
    fn names(prefix: &str) -> (IpsecLab, String) {
        let mut lab = IpsecLab::new(prefix);
        lab.dir = PathBuf::from(format!("/run/ferrouter-lab/{prefix}"));
        (lab, format!("{prefix}-t"))
    }

    /// Every namespace of the bench (for the teardown on a signal).
    fn namespaces(prefix: &str) -> Vec<String> {
        let (lab, t) = Topology::names(prefix);
        vec![t, lab.gw(1), lab.gw(2), lab.wire()]
    }

    fn build(prefix: &str, alg: &str) -> Result<Topology> {
        let (mut lab, tester_ns) = Topology::names(prefix);
        lab.encryption = alg.into();
        lab.check_free()?;
        lab.add_namespace(&tester_ns)?;
        for k in ["all", "default"] {
            let _ = lab.exec(
                &tester_ns,
                &[
                    "sysctl",
                    "-qw",
                    &format!("net.ipv6.conf.{k}.disable_ipv6=1"),
                ],
            );
        }
        lab.build_wan([(&tester_ns, "ta"), (&tester_ns, "tb")])?;
        // No offloads on the clear side: every frame is a frame, as in the RFC 2544 bench.
        for (ns, dev) in [
            (tester_ns.as_str(), "ta"),
            (tester_ns.as_str(), "tb"),
            (&lab.gw(1), "lan"),
            (&lab.gw(2), "lan"),
        ] {
            lab.ip(ns, &["link", "set", dev, "up"])?;
            let _ = lab.exec(
                ns,
                &[
                    "ethtool", "-K", dev, "gro", "off", "tso", "off", "gso", "off", "tx", "off",
                    "rx", "off",
                ],
            );
        }
        let tester_macs = [
            r2544::topo::read_mac(&tester_ns, "ta")?,
            r2544::topo::read_mac(&tester_ns, "tb")?,
        ];
        let lan_macs = [
            r2544::topo::read_mac(&lab.gw(1), "lan")?,
            r2544::topo::read_mac(&lab.gw(2), "lan")?,
        ];
        // Each gateway knows the tester's host on its LAN, and routes that side's
        // network (198.18/16 behind gw1, 198.19/16 behind gw2) to it.
        for (n, host, net) in [
            (1u8, "10.1.0.2", "198.18.0.0/16"),
            (2u8, "10.2.0.2", "198.19.0.0/16"),
        ] {
            let g = lab.gw(n);
            let mac = r2544::topo::mac_str(tester_macs[usize::from(n) - 1]);
            lab.ip(
                &g,
                &[
                    "neigh",
                    "replace",
                    host,
                    "lladdr",
                    &mac,
                    "dev",
                    "lan",
                    "nud",
                    "permanent",
                ],
            )?;
            lab.ip(&g, &["route", "add", net, "via", host, "dev", "lan"])?;
            for k in ["all", "default", "lan", "wan"] {
                let _ = lab.exec(
                    &g,
                    &["sysctl", "-qw", &format!("net.ipv4.conf.{k}.rp_filter=0")],
                );
            }
        }
        Ok(Topology {
            lab,
            tester_ns,
            tester_macs,
            lan_macs,
        })
    }

    fn down(prefix: &str) {
        let (lab, t) = Topology::names(prefix);
        for ns in crate::existing_namespaces(&Topology::namespaces(prefix)) {
            crate::kill_namespace_pids(&ns);
        }
        lab.down();
        let _ = Command::new("ip").args(["netns", "del", &t]).status();
    }
}

/// Takes the bench's namespaces down when dropped.
struct TopologyGuard(String, PathBuf);

impl Drop for TopologyGuard {
    fn drop(&mut self) {
        Topology::down(&self.0);
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.1);
        }
    }
}

/// A running pair of gateways.
enum Running {
    Ferrouter { lab: IpsecLab },
    Strongswan(Box<Strongswan>),
}

impl Running {
    fn stop(&mut self) {
        match self {
            Running::Ferrouter { lab } => {
                lab.stop(1);
                lab.stop(2);
            }
            Running::Strongswan(s) => s.stop(),
        }
    }

    /// The gateways are still there.
    fn check(&mut self) -> Result<()> {
        match self {
            Running::Ferrouter { lab } => {
                for n in [1, 2] {
                    let alive = std::fs::read_to_string(lab.pid_file(n))
                        .map(|p| Path::new(&format!("/proc/{}", p.trim())).exists())
                        .unwrap_or(false);
                    if !alive {
                        let log = std::fs::read_to_string(lab.log_file(n)).unwrap_or_default();
                        bail!("ferrouter gw{n} exited: {}", tail(&log, 20));
                    }
                }
                Ok(())
            }
            Running::Strongswan(s) => s.check(),
        }
    }

    /// Cumulative CPU time of both gateways, ns: ferrouter's workers' busy time,
    /// charon's user + system time.
    fn cpu_ns(&self) -> Option<u64> {
        match self {
            Running::Ferrouter { lab } => {
                let a = r2544::ferrouter_busy(&lab.socket(1))?.0;
                let b = r2544::ferrouter_busy(&lab.socket(2))?.0;
                Some(a + b)
            }
            Running::Strongswan(s) => {
                let mut sum = 0;
                for c in &s.charons {
                    sum += process_cpu_ns(c.pid()?)?;
                }
                Some(sum)
            }
        }
    }

    /// strongSwan: wait until charon's CPU time stops growing (it has worked off what
    /// earlier trials queued: kernel-libipsec's queues are unbounded), at most
    /// [`SETTLE_MAX`]; add the wait to `waited` (ms), count a cut wait in `timeouts`.
    /// ferrouter: nothing (its rings are bounded and drained within the trial's drain).
    fn settle(&self, waited: &AtomicU64, timeouts: &AtomicU32) {
        if !matches!(self, Running::Strongswan(_)) {
            return;
        }
        let t = Instant::now();
        let mut last = self.cpu_ns();
        loop {
            std::thread::sleep(Duration::from_millis(100));
            let now = self.cpu_ns();
            match (last, now) {
                // Under 20 % of a core over the last 100 ms (two ticks of USER_HZ).
                (Some(a), Some(b)) if b.saturating_sub(a) < 20_000_000 => break,
                (Some(_), Some(_)) => {}
                _ => break,
            }
            if t.elapsed() > SETTLE_MAX {
                timeouts.fetch_add(1, Ordering::Relaxed);
                break;
            }
            last = now;
        }
        waited.fetch_add(t.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// (SA pairs installed on gw1 and gw2, IKE SAs established).
    fn sas(&self) -> Result<([usize; 2], Option<usize>)> {
        match self {
            Running::Ferrouter { lab } => {
                let mut out = [0; 2];
                for n in [1u8, 2] {
                    let v = control::api::request_json(&lab.socket(n), "ipsec", None)
                        .with_context(|| format!("show ipsec on gw{n}"))?;
                    out[usize::from(n) - 1] = v["sas"].as_array().map_or(0, |a| a.len()) / 2;
                }
                Ok((out, None))
            }
            Running::Strongswan(s) => {
                let a = s.listing(1)?;
                let b = s.listing(2)?;
                Ok(([a.installed, b.installed], Some(a.ike.min(b.ike))))
            }
        }
    }

    /// (packets gw1 encrypted, packets gw2 decrypted) so far.
    fn esp_packets(&self) -> [u64; 2] {
        match self {
            Running::Ferrouter { lab } => {
                let count = |n: u8, dir: &str| {
                    control::api::request_json(&lab.socket(n), "ipsec", None)
                        .ok()
                        .and_then(|v| {
                            v["sas"].as_array().map(|a| {
                                a.iter()
                                    .filter(|s| s["direction"] == dir)
                                    .filter_map(|s| s["packets"].as_u64())
                                    .sum()
                            })
                        })
                        .unwrap_or(0)
                };
                [count(1, "out"), count(2, "in")]
            }
            Running::Strongswan(s) => [
                s.listing(1).map_or(0, |l| l.packets_out),
                s.listing(2).map_or(0, |l| l.packets_in),
            ],
        }
    }
}

/// A process's user + system time, ns (USER_HZ 100).
fn process_cpu_ns(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of stat(5): the 12th and 13th after the state.
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks * 10_000_000)
}

// ---------------------------------------------------------------------------------------
// ferrouter

/// Gateway `n`'s config for `tunnels` tunnels: the lab's ports, a tunnel interface per
/// tunnel with its SA pair, and a route per block through it.
fn ferrouter_config(lab: &IpsecLab, n: u8, tunnels: usize, alg: &str) -> String {
    use std::fmt::Write as _;
    let other = 3 - n;
    let mut s = format!(
        "# written by ferrouter-lab bench ipsec\ncontrol_socket = \"{sock}\"\nstate_dir = \"{state}\"\nworkers = 1\n\
         \n[[port]]\nname = \"lan\"\nbackend = \"auto\"\n\n[[port]]\nname = \"wan\"\nbackend = \"auto\"\n\
         \n[ipsec]\nkey_file = \"{keys}\"\nmax_sas = {max_sas}\n",
        sock = lab.socket(n).display(),
        state = lab.dir.join(format!("state{n}")).display(),
        keys = lab.key_file(n).display(),
        max_sas = (2 * tunnels + 64).max(16384),
    );
    for i in 0..tunnels {
        // gw1 sends with 0x10000 + i, gw2 with 0x20000 + i.
        let (out_spi, in_spi) = if n == 1 {
            (0x10000 + i, 0x20000 + i)
        } else {
            (0x20000 + i, 0x10000 + i)
        };
        let _ = write!(
            s,
            "\n[[ipsec.tunnel]]\nname = \"ipsec{i}\"\nlocal = \"{}\"\nremote = \"{}\"\n",
            lab.wan(n),
            lab.wan(other)
        );
        for (dir, spi, key) in [
            ("out", out_spi, format!("t{i}-gw{n}")),
            ("in", in_spi, format!("t{i}-gw{other}")),
        ] {
            let _ = write!(
                s,
                "\n[[ipsec.sa]]\ntunnel = \"ipsec{i}\"\ndirection = \"{dir}\"\nspi = {spi:#x}\nencryption = \"{alg}\"\nkey = \"{key}\"\nesn = true\n"
            );
        }
    }
    // The other side's blocks through the tunnels.
    let far = usize::from(other) - 1;
    for i in 0..tunnels {
        let (net, len) = block(far, i, tunnels);
        let _ = write!(
            s,
            "\n[[interface]]\nname = \"ipsec{i}\"\naddresses = [\"{}/30\"]\n\n[[route]]\nprefix = \"{net}/{len}\"\nvia = [\"{}\"]\n",
            tunnel_addr(i, n),
            tunnel_addr(i, other)
        );
    }
    s
}

/// Both gateways' key file: every tunnel's key each way.
fn ferrouter_keys(tunnels: usize, alg: &str) -> Result<String> {
    use std::fmt::Write as _;
    let len = ipsec::config::encryption(alg)
        .with_context(|| format!("unknown encryption {alg:?}"))?
        .key_len();
    let mut s = String::new();
    for i in 0..tunnels {
        for n in [1u8, 2] {
            let _ = writeln!(s, "[t{i}-gw{n}]\nencryption = \"{}\"", key_hex(i, n, len));
        }
    }
    Ok(s)
}

fn start_ferrouter(
    topo: &Topology,
    opts: &Options,
    tunnels: usize,
    log: &(dyn Fn(&str) + Sync),
) -> Result<Running> {
    let lab = topo.lab.clone();
    let (alg, _) = algorithm(&opts.alg)?;
    let keys = ferrouter_keys(tunnels, alg)?;
    let t = Instant::now();
    let running = Running::Ferrouter { lab: lab.clone() };
    for n in [1u8, 2] {
        use std::os::unix::fs::OpenOptionsExt;
        let k = lab.key_file(n);
        let _ = std::fs::remove_file(&k);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&k)
            .and_then(|mut f| f.write_all(keys.as_bytes()))
            .with_context(|| format!("writing {}", k.display()))?;
        std::fs::write(lab.config_file(n), ferrouter_config(&lab, n, tunnels, alg))?;
        // A TUN device per tunnel comes first: 3,000 start in about 4 s, 10,000 in about
        // 46 s (the kernel's IPv6 work per interface brought up grows with their number;
        // docs/performance.md); this leaves more than twice that.
        lab.start_within(
            n,
            &opts.ferrouter_bin,
            Duration::from_secs(15) + Duration::from_millis(10) * tunnels as u32,
        )
        .with_context(|| format!("starting ferrouter on gw{n} with {tunnels} tunnel(s)"))?;
    }
    // Every block's route in both FIBs (the config's routes go through the kernel).
    let deadline = Instant::now() + Duration::from_secs(60 + tunnels as u64 / 20);
    loop {
        let (sas, _) = running.sas()?;
        let routed = [1u8, 2].iter().all(|&n| {
            let (net, len) = block(usize::from(2 - n), tunnels - 1, tunnels);
            has_route(&lab.socket(n), &format!("{net}/{len}"))
        });
        if sas == [tunnels; 2] && routed {
            break;
        }
        if Instant::now() > deadline {
            bail!("ferrouter gateways: SA pairs {sas:?} of {tunnels}, last block routed: {routed}, after {:.0} s", t.elapsed().as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    log(&format!(
        "ferrouter gateways up with {tunnels} tunnel(s) in {:.1} s",
        t.elapsed().as_secs_f64()
    ));
    Ok(running)
}

fn has_route(socket: &Path, prefix: &str) -> bool {
    control::api::request_json(socket, "routes", Some(prefix))
        .ok()
        .is_some_and(|v| v.to_string().contains(prefix))
}

// ---------------------------------------------------------------------------------------
// strongSwan

/// Two charon daemons, one per gateway namespace.
struct Strongswan {
    lab: IpsecLab,
    charons: [Charon; 2],
}

impl Strongswan {
    fn new(lab: IpsecLab) -> Strongswan {
        let charons = [1u8, 2].map(|n| Charon::new(&lab.gw(n), &lab.dir, &n.to_string()));
        Strongswan { lab, charons }
    }

    fn charon(&self, n: u8) -> &Charon {
        &self.charons[usize::from(n) - 1]
    }

    fn listing(&self, n: u8) -> Result<Listing> {
        self.charon(n).listing()
    }

    fn swanctl_text(&self, n: u8, tunnels: usize, esp: &str) -> String {
        use std::fmt::Write as _;
        let other = 3 - n;
        let (near, far) = (usize::from(n) - 1, usize::from(other) - 1);
        let mut s = format!(
            "connections {{\n  bench {{\n    version = 2\n    local_addrs = {}\n    remote_addrs = {}\n\
             \x20   proposals = aes128gcm16-prfsha256-modp2048\n    rekey_time = 0\n    reauth_time = 0\n\
             \x20   local {{\n      auth = psk\n      id = gw{n}\n    }}\n    remote {{\n      auth = psk\n      id = gw{other}\n    }}\n    children {{\n",
            self.lab.wan(n),
            self.lab.wan(other)
        );
        for i in 0..tunnels {
            let (ln, ll) = block(near, i, tunnels);
            let (rn, rl) = block(far, i, tunnels);
            let _ = write!(
                s,
                "      t{i} {{\n        mode = tunnel\n        esp_proposals = {esp}\n        local_ts = 10.{n}.0.0/24,{ln}/{ll}\n        remote_ts = 10.{other}.0.0/24,{rn}/{rl}\n        rekey_time = 0\n        start_action = {}\n      }}\n",
                if n == 1 { "start" } else { "none" }
            );
        }
        let _ = write!(
            s,
            "    }}\n  }}\n}}\nsecrets {{\n  ike-bench {{\n    id-1 = gw1\n    id-2 = gw2\n    secret = \"{PSK}\"\n  }}\n}}\n"
        );
        s
    }

    fn check(&mut self) -> Result<()> {
        for c in &mut self.charons {
            c.check()?;
        }
        Ok(())
    }

    fn stop(&mut self) {
        for c in &mut self.charons {
            c.stop();
        }
        for n in [1u8, 2] {
            let g = self.lab.gw(n);
            let _ = self
                .lab
                .exec(&g, &["sysctl", "-qw", "net.ipv4.ip_forward=0"]);
            let _ = self
                .lab
                .ip(&g, &["addr", "flush", "dev", "lo", "scope", "global"]);
            let _ = self.lab.ip(&g, &["rule", "del", "table", "220"]);
        }
    }
}

impl Drop for Strongswan {
    fn drop(&mut self) {
        if self.charons.iter().any(|c| c.pid().is_some()) {
            self.stop();
        }
    }
}

fn start_strongswan(
    topo: &Topology,
    opts: &Options,
    tunnels: usize,
    log: &(dyn Fn(&str) + Sync),
) -> Result<Running> {
    let (_, esp) = algorithm(&opts.alg)?;
    let mut s = Strongswan::new(topo.lab.clone());
    let t = Instant::now();
    for n in [1u8, 2] {
        let g = s.lab.gw(n);
        s.lab
            .exec(&g, &["sysctl", "-qw", "net.ipv4.ip_forward=1"])
            .context("kernel forwarding on")?;
        // kernel-libipsec routes a CHILD_SA's outbound traffic from an address inside its
        // local selector: the gateway holds one in each of its side's blocks.
        let batch = s.lab.dir.join(format!("lo{n}.batch"));
        let mut text = String::new();
        for i in 0..tunnels {
            let a = block_gateway_addr(block(usize::from(n) - 1, i, tunnels));
            text.push_str(&format!("addr add {a}/32 dev lo\n"));
        }
        std::fs::write(&batch, text)?;
        let b = batch.display().to_string();
        s.lab.ip(&g, &["-batch", &b])?;
        s.charon(n).write(1, "", &s.swanctl_text(n, tunnels, esp))?;
    }
    // gw2 (the responder) first; gw1 starts every CHILD_SA once its connection loads.
    for n in [2u8, 1] {
        s.charons[usize::from(n) - 1].start(Some(opts.dut_core))?;
        s.charon(n)
            .load()
            .with_context(|| format!("loading gw{n}'s connection"))?;
    }
    let deadline = Instant::now() + Duration::from_secs(30 + tunnels as u64 / 10);
    loop {
        s.check()?;
        let (a, b) = (s.listing(1)?, s.listing(2)?);
        if a.installed >= tunnels && b.installed >= tunnels && a.ike >= 1 {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "strongSwan: {} of {tunnels} CHILD_SAs installed on gw1, {} on gw2 ({} IKE SA) after {:.0} s: {}",
                a.installed,
                b.installed,
                a.ike,
                t.elapsed().as_secs_f64(),
                s.charon(2).log_tail(15)
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    log(&format!(
        "strongSwan gateways up: IKE SA and {tunnels} CHILD_SA(s) established in {:.1} s",
        t.elapsed().as_secs_f64()
    ));
    Ok(Running::Strongswan(Box::new(s)))
}

/// The installed strongSwan's Debian version (`charon-systemd` package).
fn strongswan_version() -> Option<String> {
    let o = Command::new("dpkg-query")
        .args(["-W", "-f", "${Version}", "charon-systemd"])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let v = String::from_utf8_lossy(&o.stdout).trim().to_string();
    (!v.is_empty()).then(|| format!("strongSwan {v} (charon-systemd, kernel-libipsec)"))
}

// ---------------------------------------------------------------------------------------
// the run

/// The RFC 2544 bench's options for one search here.
fn search_options(opts: &Options, flows: u32) -> r2544::Options {
    r2544::Options {
        duts: vec![],
        profiles: opts.profiles.clone(),
        flows,
        duration: opts.duration,
        line_rate_gbps: opts.line_rate_gbps,
        resolution_pct: opts.resolution_pct,
        max_search_trials: opts.max_trials,
        pdr_loss_pct: opts.pdr_loss_pct,
        loads: vec![],
        bidirectional: opts.bidirectional,
        prefix: opts.prefix.clone(),
        ferrouter_bin: opts.ferrouter_bin.clone(),
        tester_core: opts.tester_core,
        dut_core: opts.dut_core,
        repeat: opts.repeat,
        cost_load_pct: opts.cost_load_pct,
        latency: false,
        ..r2544::Options::default()
    }
}

fn flows_for(opts: &Options, tunnels: usize) -> u32 {
    opts.flows
        .unwrap_or_else(|| (4 * tunnels as u32).max(64))
        .max(tunnels as u32)
}

/// Check the options before anything is built.
pub fn check(opts: &Options) -> Result<()> {
    algorithm(&opts.alg)?;
    if opts.duts.is_empty() {
        bail!("no DUT: --dut ferrouter,strongswan");
    }
    if opts.tunnels.is_empty() || opts.tunnels.iter().any(|&n| n == 0 || n > MAX_TUNNELS) {
        bail!(
            "--tunnels must be 1..={MAX_TUNNELS} each, got {:?}",
            opts.tunnels
        );
    }
    for p in &opts.profiles {
        let prof = Profile::parse(p).with_context(|| format!("profile {p}"))?;
        if prof.sends(tester::profile::Family::Ipv6) {
            bail!("profile {p} sends IPv6: the IPsec bench is IPv4 (ipv4-<size>, imix1)");
        }
        if prof.max_frame_size() > 1518 {
            bail!("profile {p}: jumbo frames do not fit the tunnels (MTU 1500 on every link)");
        }
    }
    for &n in &opts.tunnels {
        let f = flows_for(opts, n);
        let per_block = (1u64 << (32 - block_len(n) - 1)) * 64 * 64;
        if u64::from(f) > per_block * n as u64 || f as usize > tester::flows::MAX_FLOWS as usize {
            bail!("{f} flows do not fit {n} tunnels' blocks");
        }
    }
    Ok(())
}

/// Run every tunnel count, each DUT alternated over the repetitions.
pub fn run(opts: &Options, log: &(dyn Fn(&str) + Sync)) -> Result<Report> {
    check(opts)?;
    let mut report = Report {
        machine: Machine::probe(),
        ..Report::default()
    };
    if opts.duts.contains(&Dut::Strongswan) {
        report.machine.strongswan = strongswan_version();
    }
    report.notes.push(format!(
        "both gateways of a DUT share core {} (ferrouter's workers pin themselves there, charon runs under taskset), the tester has core {}; over veth the kernel's part of a frame runs on its sender's core",
        opts.dut_core, opts.tester_core
    ));
    if opts.duts.contains(&Dut::Strongswan) {
        report.notes.push("strongSwan 5.9's kernel-libipsec always encapsulates ESP in UDP (port 4500): its packets carry 8 bytes more than ferrouter's plain ESP".into());
    }
    let profiles: Vec<Profile> = opts
        .profiles
        .iter()
        .map(|p| Profile::parse(p))
        .collect::<Result<_>>()?;
    // 1500 less AES-GCM's ESP overhead over IPv4 (ferrouter's default tunnel MTU), plus
    // the Ethernet header and FCS.
    const FERROUTER_MAX_FRAME: f64 = 1443.0 + 18.0;
    for p in &profiles {
        if opts.duts.contains(&Dut::Ferrouter) && p.max_frame_size() as f64 > FERROUTER_MAX_FRAME {
            report.notes.push(format!(
                "profile {}: its frames above {FERROUTER_MAX_FRAME} bytes carry IP packets bigger than ferrouter's tunnel MTU (1443); without DF, gw1 encrypts them whole and fragments the outer packet (two ESP packets on the WAN), and gw2's esp-decrypt reassembles them before decrypting (docs/ipsec.md, \"Fragmented ESP\")",
                p.name()
            ));
        }
    }
    let per_run = {
        let o = search_options(opts, 64);
        r2544::engine_config(&o, &profiles[0], 1).max_trials()
    };
    let eta = Eta::new(
        per_run
            * (profiles.len() * opts.duts.len() * opts.tunnels.len() * opts.repeat.max(1)) as u32,
    );
    for &tunnels in &opts.tunnels {
        let existing = crate::existing_namespaces(&Topology::namespaces(&opts.prefix));
        if !existing.is_empty() {
            bail!(
                "namespaces {existing:?} already exist: another IPsec bench is running, or an old one was killed (`ip netns del` them)"
            );
        }
        let _guard = TopologyGuard(
            opts.prefix.clone(),
            PathBuf::from(format!("/run/ferrouter-lab/{}", opts.prefix)),
        );
        let topo = Topology::build(&opts.prefix, &opts.alg)?;
        let flows = flows_for(opts, tunnels);
        let ro = search_options(opts, flows);
        for (k, dut) in tester::compare::interleaved(&opts.duts, opts.repeat.max(1)) {
            log(&format!(
                "DUT {} with {tunnels} tunnel(s), {}: starting (repetition {} of {})",
                dut.name(),
                opts.alg,
                k + 1,
                opts.repeat.max(1)
            ));
            let mut running = match dut {
                Dut::Ferrouter => start_ferrouter(&topo, opts, tunnels, log),
                Dut::Strongswan => start_strongswan(&topo, opts, tunnels, log),
            }
            .with_context(|| format!("starting the {} gateways", dut.name()))?;
            let sas = running.sas();
            let result = sas.and_then(|(sas, ike)| {
                let runs = measure_all(
                    opts, &ro, &topo, dut, tunnels, &profiles, &running, &eta, log,
                )?;
                Ok((sas, ike, runs))
            });
            let alive = running.check();
            running.stop();
            let (sas, ike, runs) =
                result.with_context(|| format!("{} with {tunnels} tunnel(s)", dut.name()))?;
            alive?;
            for (mut run, esp) in runs {
                run.repeat = k;
                let loss = run
                    .trials
                    .iter()
                    .filter(|t| t.phase == "search" && t.passed && !t.invalid)
                    .filter(|t| t.offered_mpps <= run.ndr_mpps * (1.0 + 1e-9))
                    .max_by(|a, b| a.offered_mpps.total_cmp(&b.offered_mpps))
                    .map(|t| t.loss_pct);
                report.runs.push(IpsecRun {
                    alg: opts.alg.clone(),
                    tunnels,
                    loss,
                    sas_installed: sas,
                    ike_established: ike,
                    esp_packets: esp,
                    run,
                });
            }
        }
    }
    report.finish();
    Ok(report)
}

/// Every profile against the running pair, from the tester's namespace.
#[allow(clippy::too_many_arguments)]
fn measure_all(
    opts: &Options,
    ro: &r2544::Options,
    topo: &Topology,
    dut: Dut,
    tunnels: usize,
    profiles: &[Profile],
    running: &Running,
    eta: &Eta,
    log: &(dyn Fn(&str) + Sync),
) -> Result<Vec<(Run, [u64; 2])>> {
    let flows = ro.flows;
    let dir = |from: usize| -> DirectionConfig {
        let to = 1 - from;
        let src = if from == 0 { "10.1.0.2" } else { "10.2.0.2" };
        DirectionConfig {
            src_mac: topo.tester_macs[from],
            dst_mac: topo.lan_macs[from],
            v4: Some(Endpoints::new(
                AddrRange::single(src.parse().expect("address")),
                destinations(to, tunnels),
            )),
            v6: None,
        }
    };
    let cpu = || running.cpu_ns();
    std::thread::scope(|s| {
        s.spawn(|| -> Result<Vec<(Run, [u64; 2])>> {
            r2544::pin(opts.tester_core);
            r2544::enter_netns(&topo.tester_ns)?;
            let mut mem = Arena::new(16384);
            let mut a = ports::AfXdp::open("ta", 0, 0, ports::AfXdpOptions::default())
                .context("tester port ta")?;
            let mut b = ports::AfXdp::open("tb", 0, 1, ports::AfXdpOptions::default())
                .context("tester port tb")?;
            let label = format!("tester AF_XDP {}", a.mode());
            let mut out = Vec::new();
            let waited = AtomicU64::new(0);
            let timeouts = AtomicU32::new(0);
            let settle = || running.settle(&waited, &timeouts);
            for profile in profiles {
                waited.store(0, Ordering::Relaxed);
                timeouts.store(0, Ordering::Relaxed);
                let esp_before = running.esp_packets();
                let mut traffic =
                    TrafficConfig::new(profile.clone(), dir(0), opts.bidirectional.then(|| dir(1)));
                traffic.flows = flows;
                let subject = Subject {
                    dut: dut.name(),
                    transport: "veth",
                    tester_label: &label,
                    own_cost: OwnCost::Cpu(&cpu),
                    settle: (dut == Dut::Strongswan).then_some(&settle),
                };
                let mut run = r2544::measure(
                    ro, &subject, None, profile, &traffic, &mut mem, &mut a, &mut b, eta, log,
                )?;
                let esp_after = running.esp_packets();
                run.notes.push(format!(
                    "{tunnels} tunnel(s), {flows} flows per direction spread over them"
                ));
                if dut == Dut::Strongswan {
                    run.notes.push(format!(
                        "before each trial the bench waited for charon to work off what earlier trials left in its queues (its CPU time still growing): {:.1} s in all, {} wait(s) cut at {} s",
                        waited.load(Ordering::Relaxed) as f64 / 1000.0,
                        timeouts.load(Ordering::Relaxed),
                        SETTLE_MAX.as_secs()
                    ));
                }
                out.push((
                    run,
                    [
                        esp_after[0].saturating_sub(esp_before[0]),
                        esp_after[1].saturating_sub(esp_before[1]),
                    ],
                ));
            }
            Ok(out)
        })
        .join()
        .unwrap_or_else(|_| Err(anyhow::anyhow!("tester thread panicked")))
    })
}

/// Tear the bench down if this process is interrupted (see [`crate::tear_down_on_signal`]).
pub fn tear_down_on_signal(prefix: &str) -> Result<()> {
    let dir = PathBuf::from(format!("/run/ferrouter-lab/{prefix}"));
    crate::tear_down_namespaces_on_signal(dir, Topology::namespaces(prefix))
}

/// Shared with the test: the bench's namespaces for `prefix`.
pub fn namespaces(prefix: &str) -> Vec<String> {
    Topology::namespaces(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_split_each_side_over_the_tunnels() {
        assert_eq!(block_len(1), 24);
        assert_eq!(block_len(256), 24);
        assert_eq!(block_len(1000), 26);
        assert_eq!(block_len(10_000), 30);
        assert_eq!(block(1, 0, 1), (Ipv4Addr::new(198, 19, 0, 0), 24));
        assert_eq!(block(0, 3, 1000), (Ipv4Addr::new(198, 18, 0, 192), 26));
        assert_eq!(
            block(1, 9999, 10_000),
            (Ipv4Addr::new(198, 19, 156, 60), 30)
        );
        // The gateway's address lies outside the tester's destinations (the first half).
        let b = block(1, 5, 10_000);
        let d = destinations(1, 10_000)[5];
        assert_eq!(d.len, 31);
        assert_eq!(block_gateway_addr(b), Ipv4Addr::new(198, 19, 0, 22));
        assert_eq!(d.addr, std::net::IpAddr::V4(Ipv4Addr::new(198, 19, 0, 20)));
        assert_eq!(tunnel_addr(2, 1), Ipv4Addr::new(10, 128, 0, 9));
    }

    #[test]
    fn ferrouter_configs_check() {
        let mut lab = IpsecLab::new("fib-test");
        lab.dir = std::env::temp_dir().join(format!("fib-test-{}", std::process::id()));
        std::fs::create_dir_all(&lab.dir).unwrap();
        let keys = ferrouter_keys(3, "aes-128-gcm").unwrap();
        for n in [1u8, 2] {
            use std::os::unix::fs::OpenOptionsExt;
            let _ = std::fs::remove_file(lab.key_file(n));
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(lab.key_file(n))
                .unwrap()
                .write_all(keys.as_bytes())
                .unwrap();
            let text = ferrouter_config(&lab, n, 3, "aes-128-gcm");
            let cfg = control::config::Config::parse(&text, &lab.config_file(n))
                .unwrap_or_else(|e| panic!("gw{n}: {e:?}\n{text}"));
            assert_eq!(cfg.ipsec.tunnels.len(), 3);
        }
        let _ = std::fs::remove_dir_all(&lab.dir);
    }

    #[test]
    fn swanctl_listing_is_counted() {
        let text = "bench: #1, ESTABLISHED, IKEv2, 6a15e5f83fe2ee16_i* ba8b14d67a05d570_r\n  local  'gw1' @ 192.0.2.1[4500]\n  remote 'gw2' @ 192.0.2.2[4500]\n  AES_GCM_16-128/PRF_HMAC_SHA2_256/MODP_2048\n  established 3s ago\n  t0: #1, reqid 1, INSTALLED, TUNNEL-in-UDP, ESP:AES_GCM_16-128\n    installed 3s ago\n    in  c8b3a2d5,  10080 bytes,   120 packets,     0s ago\n    out c2e4a1b0,  20160 bytes,   240 packets,     0s ago\n    local  10.1.0.0/24 198.18.0.0/24\n    remote 10.2.0.0/24 198.19.0.0/24\n  t1: #2, reqid 2, INSTALLED, TUNNEL-in-UDP, ESP:AES_GCM_16-128\n    in  c8b3a2d6,      0 bytes,     0 packets\n    out c2e4a1b1,     84 bytes,     1 packets,     2s ago\n";
        assert_eq!(
            parse_listing(text),
            Listing {
                ike: 1,
                installed: 2,
                packets_in: 120,
                packets_out: 241
            }
        );
    }

    #[test]
    fn strongswan_configs_name_each_child() {
        let s = Strongswan::new(IpsecLab::new("fib-test"));
        let t = s.swanctl_text(1, 2, "aes128gcm16");
        assert!(t.contains("t1 {"));
        assert!(t.contains("local_ts = 10.1.0.0/24,198.18.1.0/24"));
        assert!(t.contains("remote_ts = 10.2.0.0/24,198.19.1.0/24"));
        assert!(t.contains("start_action = start"));
        let c = s.charon(2).strongswan_conf(1, "");
        assert!(c.contains("kernel-libipsec {\n      load = yes"));
        assert!(c.contains("charon2.vici"));
    }
}
