//! `ferrouter-lab bench firewall`: ferrouter's firewall and NAT44 against Linux nftables
//! with conntrack, in the RFC 2544 bench's veth topology ([`crate::rfc2544::topo`]), driven
//! by the tester's stateful generator ([`tester::stateful`]) on AF_PACKET ports, in the
//! style of RFC 3511 §5.2-5.3 and RFC 9411:
//!
//! - the highest new-connection rate with at most 0.1 % failed connections, per protocol
//!   (TCP, UDP): an exponential then binary search over the rate with short trials, then a
//!   confirmation trial twice as long ([`search`]);
//! - the concurrent connections held: `conns` TCP connections opened and held open at once,
//!   the DUT's tracked flows sampled meanwhile;
//! - each DUT's CPU time per connection at one fixed, light rate (so both do the same work):
//!   ferrouter's worker busy time, Linux's kernel time in the packet path (the tester's system calls, ksoftirqd);
//! - with `--mode nat44`, the same through masquerade;
//! - with `--throughput` ([`throughput`]), instead: the zero-loss throughput of plain
//!   forwarding and of each mode and rule count, on the RFC 2544 bench
//!   ([`crate::rfc2544::run`], veth and memif) with the rule sets below handed to it
//!   through its [`crate::rfc2544::DutSetup`] hook and the traffic as conversations
//!   ([`Replies`]: every flow carried both ways, so that a stateful DUT holds it as
//!   established).
//!
//! **The rule set, the same for both DUTs** (`rules` rules; the last one is the one that
//! accepts the bench's traffic; the others are generated ACL rules, [`firewall::gen`], that
//! never match it and drop):
//!
//! ```text
//! stateless: inside (da, ingress)   fillers..., accept 198.18.128.0/20 → 198.19.128.0/20; policy drop
//!            outside (db, ingress)  accept 198.19.128.0/20 → 198.18.128.0/20; policy drop
//! stateful:  inside   established,related accept; invalid drop; fillers...; accept clients → servers; policy drop
//!            outside  established,related accept; policy drop
//! nat44:     stateful + masquerade of the clients out of db (198.19.0.1)
//! ```
//! Ferrouter gets it as `[firewall]` filters (and `[[nat.source]]`), Linux as one nftables
//! forward chain (policy drop, `iifname` for the side) and a `nat` postrouting chain.
//!
//! Between trials each DUT forgets its connections (Linux `conntrack -F`, ferrouter
//! `DELETE /v1/conntrack`), since the generator starts every trial on the same tuples.
//! Ferrouter's NAT sessions cannot be flushed: its `[nat.timeouts]` for closing TCP and UDP
//! are 2 s in the bench and it pauses 3 s between NAT trials so that ports come free.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use dataplane::Arena;
use serde::{Deserialize, Serialize};
use tester::flows::{AddrRange, PortRange};
use tester::stateful::{Macs, Proto, Stateful, StatefulConfig, StatefulResult};

use crate::rfc2544::dut::{self, DutKind, Running, Transport};
use crate::rfc2544::topo::{self, ip_n, Topo, TopoGuard, TESTER_A4, TESTER_B4};
use crate::rfc2544::{ferrouter_busy, Replies, SearchOptions};
use crate::stateful::netns_exec;

/// Clients: 198.18.128.0/20 behind `ta`.
pub const CLIENT_NET: &str = "198.18.128.0/20";
/// Servers: 198.19.128.0/20 behind `tb`.
pub const SERVER_NET: &str = "198.19.128.0/20";
/// The nftables tables the bench installs in the DUT namespace.
pub const TABLE: &str = "ferrouter_fw";
const CLIENTS: Ipv4Addr = Ipv4Addr::new(198, 18, 128, 1);
const SERVERS: Ipv4Addr = Ipv4Addr::new(198, 19, 128, 1);

/// What the DUTs do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Filters without connection tracking.
    Stateless,
    /// Filters with connection tracking: the outside accepts only replies.
    Stateful,
    /// Stateful, and the clients masqueraded behind the DUT's outside address.
    Nat44,
}

impl Mode {
    /// Name as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Stateless => "stateless",
            Mode::Stateful => "stateful",
            Mode::Nat44 => "nat44",
        }
    }
    /// Parse a command-line name.
    pub fn parse(s: &str) -> Result<Mode> {
        Ok(match s {
            "stateless" => Mode::Stateless,
            "stateful" => Mode::Stateful,
            "nat44" => Mode::Nat44,
            _ => bail!("unknown mode {s:?} (stateless, stateful, nat44)"),
        })
    }
    fn tracked(self) -> bool {
        self != Mode::Stateless
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct Options {
    /// Namespace prefix (`PREFIX-t`, `PREFIX-d`).
    pub prefix: String,
    /// DUTs, in order (ferrouter, linux).
    pub duts: Vec<DutKind>,
    /// Stateless, stateful or NAT44.
    pub mode: Mode,
    /// Rules in the inside filter (the last accepts the bench's traffic).
    pub rules: usize,
    /// One search per protocol.
    pub protos: Vec<Proto>,
    /// A fixed rate: one trial at it (and its confirmation) instead of the search.
    pub cps: Option<f64>,
    /// The search's first rate.
    pub cps_start: f64,
    /// The search's ceiling.
    pub cps_max: f64,
    /// The search stops when its bounds are within this many percent.
    pub resolution_pct: f64,
    /// Most search trials per protocol.
    pub max_trials: u32,
    /// Seconds of a search trial (shortened so that it opens at most 50,000 connections).
    pub trial_s: f64,
    /// Seconds of the confirmation trial.
    pub confirm_s: f64,
    /// Failed connections a trial may have, percent of those attempted.
    pub max_failed_pct: f64,
    /// TCP connections held open at once in the concurrency test (0: none; not in
    /// stateless mode).
    pub conns: u32,
    /// Rate of the CPU-cost trial (0: none).
    pub cost_cps: f64,
    /// Seconds of the CPU-cost trial.
    pub cost_s: f64,
    /// The ferrouter binary.
    pub ferrouter_bin: PathBuf,
    /// Core of the tester (the DUT gets the other one).
    pub tester_core: usize,
    /// Core of the DUT.
    pub dut_core: usize,
    /// Seed of the generated rules.
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            prefix: "ffw".into(),
            duts: vec![DutKind::Ferrouter, DutKind::Linux],
            mode: Mode::Stateful,
            rules: 1,
            protos: vec![Proto::Tcp, Proto::Udp],
            cps: None,
            cps_start: 2000.0,
            cps_max: 500_000.0,
            resolution_pct: 10.0,
            max_trials: 14,
            trial_s: 1.0,
            confirm_s: 2.0,
            max_failed_pct: 0.1,
            conns: 20_000,
            cost_cps: 2000.0,
            cost_s: 5.0,
            ferrouter_bin: PathBuf::from("ferrouter"),
            tester_core: 0,
            dut_core: 1,
            seed: 1,
        }
    }
}

/// One trial, as the tester counted it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Trial {
    /// `warmup`, `search`, `confirm`, `cost` or `concurrent`.
    pub kind: String,
    /// Rate asked for.
    pub cps_target: f64,
    /// Rate achieved.
    pub cps_achieved: f64,
    /// Connections the schedule planned.
    pub planned: u64,
    /// Started.
    pub attempted: u64,
    /// Completed.
    pub completed: u64,
    /// Failed, reset or unfinished: the DUT's failures.
    pub failed: u64,
    /// The failures by reason (no SYN-ACK, no response, no FIN-ACK).
    pub failures: tester::stateful::Failures,
    /// Reset.
    pub reset: u64,
    /// Given up by the tester (behind its schedule, no tuple, the concurrency limit).
    pub skipped: u64,
    /// Most connections open at once.
    pub concurrent_max: u32,
    /// Frames ferrouter's ports dropped or failed to send during the trial (receive drops,
    /// kernel ring drops, transmit errors; null for Linux).
    #[serde(default)]
    pub dut_drops: Option<u64>,
    /// At most `max_failed_pct` failed, and the tester offered the rate.
    pub passed: bool,
    /// The tester could not offer the rate (more than 1 % skipped or achieved under 95 %).
    pub tester_limited: bool,
}

/// One DUT, one protocol.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    /// `ferrouter` or `linux`.
    pub dut: String,
    /// `veth` (or `memif`, throughput rows).
    pub transport: String,
    /// `stateless`, `stateful` or `nat44` (or `forwarding`: a throughput row's plain
    /// forwarding, no filter and no tracking).
    pub mode: String,
    /// `tcp` or `udp` (throughput rows: `udp`).
    pub proto: String,
    /// Rules in the inside filter.
    pub rules: usize,
    /// Highest new-connection rate with at most 0.1 % failed (the confirmed one).
    pub cps: Option<f64>,
    /// TCP connections held open at once (with every one of them completing).
    pub concurrent: Option<u64>,
    /// Bytes of connection state per connection (ferrouter: its conntrack table, plus its
    /// NAT table in nat44, over their capacity; Linux: the nf_conntrack slab object).
    pub bytes_per_conn: Option<f64>,
    /// Zero-loss throughput, both directions together, Mpps (throughput rows: the NDR of
    /// the RFC 2544 bench's MLR search; null if no load passed, and in connection-rate
    /// rows).
    pub throughput_mpps: Option<f64>,
    /// The traffic profile of a throughput row (`imix1`, `ipv4-64`); null in
    /// connection-rate rows.
    #[serde(default)]
    pub profile: Option<String>,
    /// A throughput row's highest rate the tester really sent (both directions, Mpps) in a
    /// search trial that lost nothing, valid or not: a lower bound of the DUT's zero-loss
    /// rate even when the tester could not offer a search load in full (an underrun trial
    /// is invalid for the search, but what it sent crossed the DUT without loss).
    #[serde(default)]
    pub lossless_mpps: Option<f64>,
    /// The DUT's own CPU time per connection at the cost rate, net of an idle baseline, µs:
    /// ferrouter's worker busy time. None for Linux: over veth it forwards inside the
    /// busy-polling tester's system calls, where CPU accounting cannot separate it.
    pub cpu_us_per_conn: Option<f64>,
    /// Kernel time in the packet path per connection at the cost rate, net of the
    /// baseline, µs, for every DUT: the tester thread's system time and the ksoftirqd
    /// threads' time (Linux's forwarding, conntrack and nftables; for ferrouter, veth, XDP
    /// and the AF_XDP copies; for both, the tester's own socket calls).
    pub kernel_us_per_conn: Option<f64>,
    /// All the CPU of the path per connection, µs: `kernel_us_per_conn`, plus ferrouter's
    /// busy time for ferrouter. The same tester work is in both DUTs' figures.
    pub path_us_per_conn: Option<f64>,
    /// Failed connections of the confirmation trial.
    pub failed_conns: Option<u64>,
    /// The search's ceiling was set by the tester, not the DUT.
    pub tester_limited: bool,
    /// Peak of the DUT's tracked flows during the concurrency test.
    pub dut_flows_peak: Option<u64>,
    /// Sessions the DUT's masquerade rule opened during this protocol's trials (nat44).
    pub nat_sessions: Option<u64>,
    /// Every trial (connection-rate rows).
    pub trials: Vec<Trial>,
    /// A throughput row's RFC 2544 run in full: its search trials, the cores' time split.
    #[serde(default, skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub rfc2544: Option<crate::rfc2544::report::Run>,
    /// Remarks.
    pub notes: Vec<String>,
}

/// Everything.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Report {
    /// One per DUT and protocol.
    pub runs: Vec<Run>,
}

impl Report {
    /// The bars of [`Report::chart`]: zero-loss throughput (Mpps) by mode and rules when
    /// the report has throughput rows, else the connection rate (K/s) by mode and
    /// protocol; one series per DUT and transport. Rows without the figure are left out.
    pub fn bars(&self) -> (&'static str, &'static str, Vec<crate::chart::Bar>) {
        let throughput = self.runs.iter().any(|r| r.profile.is_some());
        let bars = self
            .runs
            .iter()
            .filter_map(|r| {
                let series = format!("{}/{}", r.dut, r.transport);
                if throughput {
                    let group = match r.mode.as_str() {
                        "forwarding" => "forwarding".to_string(),
                        m => format!("{m}, {} rules", r.rules),
                    };
                    let value = r.throughput_mpps?;
                    Some(crate::chart::Bar {
                        series,
                        group,
                        value,
                    })
                } else {
                    let group = format!("{} {}", r.mode, r.proto);
                    let value = r.cps? / 1e3;
                    Some(crate::chart::Bar {
                        series,
                        group,
                        value,
                    })
                }
            })
            .collect();
        if throughput {
            ("Firewall throughput (zero loss), Mpps", "Mpps", bars)
        } else {
            (
                "Firewall new connections per second (≤ 0.1 % failed), K/s",
                "K connections/s",
                bars,
            )
        }
    }

    /// A grouped bar chart of the report, as SVG ([`Report::bars`]).
    pub fn chart(&self, path: &std::path::Path) -> Result<()> {
        let (title, y, bars) = self.bars();
        crate::chart::bars(path, title, y, &bars)
    }
}

// ---------------------------------------------------------------------------------------
// Rule sets.

/// An IPv4 filler rule: a generated ACL rule that never matches the bench's traffic.
#[derive(Clone, Debug)]
struct Filler {
    src: Option<(Ipv4Addr, u8)>,
    dst: Option<(Ipv4Addr, u8)>,
    proto: Option<u8>,
    sport: Option<(u16, u16)>,
    dport: Option<(u16, u16)>,
}

fn overlaps_bench(p: (Ipv4Addr, u8)) -> bool {
    // 198.18.0.0/15 holds every address of the bench.
    let bench = u32::from(Ipv4Addr::new(198, 18, 0, 0));
    let len = p.1.min(15);
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    u32::from(p.0) & mask == bench & mask
}

fn fillers(n: usize, seed: u64) -> Vec<Filler> {
    let mut out = Vec::with_capacity(n);
    let mut round = 0;
    while out.len() < n {
        for m in firewall::gen::acl_rules(n * 2 + 16, seed.wrapping_add(round)) {
            let excludes = |p: Option<(Ipv4Addr, u8)>| p.is_some_and(|p| !overlaps_bench(p));
            if !(excludes(m.src) || excludes(m.dst)) {
                continue;
            }
            let ported = matches!(m.proto, Some(6 | 17));
            let range = |r: &std::ops::RangeInclusive<u16>| {
                (ported && !(*r.start() == 0 && *r.end() == u16::MAX))
                    .then_some((*r.start(), *r.end()))
            };
            out.push(Filler {
                src: m.src,
                dst: m.dst,
                proto: m.proto.filter(|p| matches!(p, 1 | 6 | 17)),
                sport: range(&m.sport),
                dport: range(&m.dport),
            });
            if out.len() == n {
                break;
            }
        }
        round += 1;
    }
    out
}

fn port_text(r: (u16, u16)) -> String {
    if r.0 == r.1 {
        r.0.to_string()
    } else {
        format!("{}-{}", r.0, r.1)
    }
}

/// Ferrouter's config: filters (and NAT) for `mode`, on its ports `[inside, outside]`.
fn ferrouter_config(
    mode: Mode,
    fill: &[Filler],
    conntrack_max: usize,
    [inside, outside]: [&str; 2],
) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    if mode.tracked() {
        let _ = writeln!(
            s,
            "[firewall]\nconntrack = true\nconntrack_max = {conntrack_max}\n"
        );
    }
    let rule = |s: &mut String, body: &str| {
        let _ = writeln!(s, "[[firewall.filter.rule]]\n{body}");
    };
    let _ = writeln!(
        s,
        "[[firewall.filter]]\nname = \"inside\"\nhook = \"ingress\"\ninterfaces = [\"{inside}\"]\npolicy = \"drop\"\n"
    );
    if mode.tracked() {
        rule(
            &mut s,
            "action = \"accept\"\nstate = [\"established\", \"related\"]\n",
        );
        rule(&mut s, "action = \"drop\"\nstate = [\"invalid\"]\n");
    }
    for f in fill {
        let mut b = String::from("action = \"drop\"\n");
        if let Some(p) = f.proto {
            let _ = writeln!(b, "protocol = {p}");
        }
        if let Some((a, l)) = f.src {
            let _ = writeln!(b, "source = [\"{a}/{l}\"]");
        }
        if let Some((a, l)) = f.dst {
            let _ = writeln!(b, "destination = [\"{a}/{l}\"]");
        }
        if let Some(r) = f.sport {
            let _ = writeln!(b, "source_port = [\"{}\"]", port_text(r));
        }
        if let Some(r) = f.dport {
            let _ = writeln!(b, "destination_port = [\"{}\"]", port_text(r));
        }
        rule(&mut s, &b);
    }
    rule(
        &mut s,
        &format!(
            "action = \"accept\"\nsource = [\"{CLIENT_NET}\"]\ndestination = [\"{SERVER_NET}\"]\ncomment = \"the bench's connections\"\n"
        ),
    );
    let _ = writeln!(
        s,
        "[[firewall.filter]]\nname = \"outside\"\nhook = \"ingress\"\ninterfaces = [\"{outside}\"]\npolicy = \"drop\"\n"
    );
    if mode.tracked() {
        rule(
            &mut s,
            "action = \"accept\"\nstate = [\"established\", \"related\"]\n",
        );
    } else {
        rule(
            &mut s,
            &format!(
                "action = \"accept\"\nsource = [\"{SERVER_NET}\"]\ndestination = [\"{CLIENT_NET}\"]\n"
            ),
        );
    }
    if mode == Mode::Nat44 {
        let _ = writeln!(
            s,
            "[nat.timeouts]\ntcp_transitory = 2\nudp = 2\n\n[[nat.source]]\noutbound_interface = \"{outside}\"\nsource = [\"{CLIENT_NET}\"]\ntranslation = \"masquerade\"\ncomment = \"bench clients\"\n"
        );
    }
    s
}

/// Linux's nftables ruleset for `mode`, the same rules.
fn nft_ruleset(mode: Mode, fill: &[Filler]) -> String {
    use std::fmt::Write as _;
    let mut s = format!(
        "table inet {TABLE} {{\n  counter new {{}}\n  chain forward {{\n    type filter hook forward priority filter; policy drop;\n"
    );
    if mode.tracked() {
        s.push_str("    ct state established,related accept\n    ct state invalid drop\n");
    }
    for f in fill {
        let mut r = String::from("    iifname \"da\"");
        if let Some((a, l)) = f.src {
            let _ = write!(r, " ip saddr {a}/{l}");
        }
        if let Some((a, l)) = f.dst {
            let _ = write!(r, " ip daddr {a}/{l}");
        }
        match f.proto {
            Some(p @ (6 | 17)) => {
                let name = if p == 6 { "tcp" } else { "udp" };
                if f.sport.is_none() && f.dport.is_none() {
                    let _ = write!(r, " meta l4proto {name}");
                }
                if let Some(x) = f.sport {
                    let _ = write!(r, " {name} sport {}", port_text(x));
                }
                if let Some(x) = f.dport {
                    let _ = write!(r, " {name} dport {}", port_text(x));
                }
            }
            Some(1) => r.push_str(" meta l4proto icmp"),
            _ => {}
        }
        r.push_str(" drop\n");
        s.push_str(&r);
    }
    let _ = writeln!(
        s,
        "    iifname \"da\" ip saddr {CLIENT_NET} ip daddr {SERVER_NET} counter name \"new\" accept"
    );
    if !mode.tracked() {
        let _ = writeln!(
            s,
            "    iifname \"db\" ip saddr {SERVER_NET} ip daddr {CLIENT_NET} accept"
        );
    }
    s.push_str("  }\n}\n");
    if mode == Mode::Nat44 {
        let _ = write!(
            s,
            "table ip {TABLE}_nat {{\n  counter masq {{}}\n  chain postrouting {{\n    type nat hook postrouting priority srcnat; policy accept;\n    oifname \"db\" ip saddr {CLIENT_NET} counter name \"masq\" masquerade\n  }}\n}}\n"
        );
    }
    s
}

// ---------------------------------------------------------------------------------------
// The DUTs' side.

/// One DUT, running, and how to ask it about its state.
struct Dut {
    kind: DutKind,
    ns: String,
    socket: PathBuf,
    mode: Mode,
    running: Running,
}

impl Dut {
    fn api(&self, what: &str) -> Result<serde_json::Value> {
        control::api::request_json(&self.socket, what, None)
    }

    /// Forget every connection (between trials).
    fn flush(&self) -> Result<()> {
        if !self.mode.tracked() {
            return Ok(());
        }
        match self.kind {
            DutKind::Linux => {
                // `conntrack -F` exits 0 also with an empty table.
                netns_exec(&self.ns, &["conntrack", "-F"]).map(drop)
            }
            _ => {
                let c = control::client::Client::new(control::client::Endpoint::Unix(
                    self.socket.clone(),
                ));
                control::api::conntrack_flush_with(&c, None, None, None).map(drop)
            }
        }
    }

    /// Flows tracked now.
    fn flows(&self) -> Option<u64> {
        match self.kind {
            DutKind::Linux => netns_exec(&self.ns, &["conntrack", "-C"])
                .ok()?
                .trim()
                .parse()
                .ok(),
            _ => self.api("firewall").ok()?["conntrack"]["flows"].as_u64(),
        }
    }

    /// Sessions the masquerade rule opened so far.
    fn nat_sessions(&self) -> Option<u64> {
        if self.mode != Mode::Nat44 {
            return None;
        }
        match self.kind {
            DutKind::Linux => {
                let out = netns_exec(
                    &self.ns,
                    &[
                        "nft",
                        "-j",
                        "list",
                        "counter",
                        "ip",
                        &format!("{TABLE}_nat"),
                        "masq",
                    ],
                )
                .ok()?;
                let v: serde_json::Value = serde_json::from_str(&out).ok()?;
                v["nftables"]
                    .as_array()?
                    .iter()
                    .find_map(|i| i["counter"]["packets"].as_u64())
            }
            _ => {
                let v = self.api("nat").ok()?;
                v["rules"]
                    .as_array()?
                    .iter()
                    .filter(|r| r["kind"] == "source")
                    .filter_map(|r| r["sessions"].as_u64())
                    .max()
            }
        }
    }

    /// NAT refusals so far (ferrouter: no port, table full, collisions).
    fn nat_refused(&self) -> u64 {
        if self.mode != Mode::Nat44 || self.kind == DutKind::Linux {
            return 0;
        }
        let Ok(v) = self.api("nat") else { return 0 };
        v["workers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|w| {
                ["refused_full", "refused_no_port", "collisions"]
                    .iter()
                    .filter_map(|k| w[*k].as_u64())
                    .sum::<u64>()
            })
            .sum()
    }

    /// Bytes of state per connection.
    fn bytes_per_conn(&self) -> Option<f64> {
        if !self.mode.tracked() {
            return None;
        }
        match self.kind {
            DutKind::Linux => {
                let slab = std::fs::read_to_string("/proc/slabinfo").ok()?;
                let line = slab.lines().find(|l| l.starts_with("nf_conntrack "))?;
                line.split_whitespace().nth(3)?.parse().ok()
            }
            _ => {
                let v = self.api("firewall").ok()?;
                let c = &v["conntrack"];
                let mut b = c["memory_bytes"].as_f64()? / c["max"].as_f64()?.max(1.0);
                if self.mode == Mode::Nat44 {
                    let n = self.api("nat").ok()?;
                    for w in n["workers"].as_array().into_iter().flatten() {
                        if let (Some(m), Some(x)) =
                            (w["memory_bytes"].as_f64(), w["max_sessions"].as_f64())
                        {
                            b += m / x.max(1.0);
                        }
                    }
                }
                Some(b)
            }
        }
    }

    /// Frames ferrouter's ports dropped on receive or failed to send, so far.
    fn port_drops(&self) -> Option<u64> {
        if self.kind == DutKind::Linux {
            return None;
        }
        let v = self.api("interfaces").ok()?;
        let list = v.as_array().or_else(|| v["interfaces"].as_array())?;
        Some(
            list.iter()
                .map(|i| i["rx_drops"].as_u64().unwrap_or(0) + i["tx_errors"].as_u64().unwrap_or(0))
                .sum(),
        )
    }

    /// (the DUT's own CPU ns, packets) now: ferrouter's busy time; Linux: nothing of its
    /// own beyond the kernel's.
    fn busy_ns(&self) -> Option<u64> {
        match self.kind {
            DutKind::Linux => None,
            _ => ferrouter_busy(&self.socket).map(|(b, _)| b),
        }
    }
}

fn start_dut(opts: &Options, topo: &Topo, kind: DutKind, fill: &[Filler]) -> Result<Dut> {
    let d = topo.dns();
    let running = match kind {
        DutKind::Linux => {
            topo.kernel_forwarding(true)?;
            let path = topo.dir.join("fw.nft");
            std::fs::write(&path, nft_ruleset(opts.mode, fill))
                .with_context(|| format!("writing {}", path.display()))?;
            netns_exec(&d, &["nft", "-f", &path.display().to_string()])
                .context("loading the DUT's nftables ruleset")?;
            if opts.mode.tracked() {
                // Track TCP only from a SYN, strict windows (as ferrouter does).
                for k in [
                    "net.netfilter.nf_conntrack_tcp_loose=0",
                    "net.netfilter.nf_conntrack_tcp_be_liberal=0",
                ] {
                    netns_exec(&d, &["sysctl", "-qw", k])?;
                }
            }
            Running::none("linux")
        }
        DutKind::Ferrouter => {
            let max = (opts.conns as usize * 2).max(262_144);
            let cfg = ferrouter_config(opts.mode, fill, max, ["da", "db"]);
            dut::start_ferrouter_with(
                topo,
                &opts.ferrouter_bin,
                &dut::ferrouter_veth_ports(),
                &cfg,
            )?
        }
        DutKind::Testpmd => bail!("testpmd has no firewall: --dut ferrouter,linux"),
    };
    Ok(Dut {
        kind,
        ns: d,
        socket: topo.dir.join("ferrouter.sock"),
        mode: opts.mode,
        running,
    })
}

// ---------------------------------------------------------------------------------------
// Trials.

/// Judge one tester result.
fn judge(kind: &str, r: &StatefulResult, max_failed_pct: f64) -> Trial {
    let failed = r.failed + r.reset + r.unfinished;
    let skipped = r.skipped.total();
    let tester_limited = (skipped as f64) > 0.01 * r.planned as f64
        || (r.cps_achieved < 0.95 * r.cps_target && r.planned > 0);
    let passed = r.attempted > 0
        && !tester_limited
        && (failed as f64) <= max_failed_pct / 100.0 * r.attempted as f64;
    Trial {
        kind: kind.into(),
        cps_target: r.cps_target,
        cps_achieved: r.cps_achieved,
        planned: r.planned,
        attempted: r.attempted,
        completed: r.completed,
        failed,
        failures: r.failures,
        reset: r.reset,
        skipped,
        concurrent_max: r.concurrent_max,
        dut_drops: None,
        passed,
        tester_limited,
    }
}

/// The search over the rate. `trial(cps, seconds)` runs one trial. Returns the highest
/// rate a search trial passed at (None: none did) and whether the tester set the ceiling.
pub fn search(
    opts: &Options,
    mut trial: impl FnMut(f64, f64) -> Result<Trial>,
) -> Result<(Option<f64>, bool)> {
    let mut lo: Option<f64> = None;
    let mut hi: Option<(f64, bool)> = None;
    let mut rate = opts.cps_start.min(opts.cps_max);
    for _ in 0..opts.max_trials {
        let t = trial(rate, opts.trial_s)?;
        if t.passed {
            lo = Some(rate);
        } else {
            hi = Some((rate, t.tester_limited));
        }
        let next = match (lo, hi) {
            (Some(l), None) => {
                if l >= opts.cps_max {
                    break;
                }
                (l * 2.0).min(opts.cps_max)
            }
            (None, Some((h, _))) => {
                if h <= 50.0 {
                    break;
                }
                h / 4.0
            }
            (Some(l), Some((h, _))) => {
                if h / l <= 1.0 + opts.resolution_pct / 100.0 {
                    break;
                }
                (l * h).sqrt()
            }
            (None, None) => unreachable!(),
        };
        rate = next.round();
    }
    Ok((lo, hi.is_some_and(|(_, t)| t)))
}

/// CPU spent during one trial.
#[derive(Clone, Copy, Debug)]
struct Window {
    wall_s: f64,
    /// Kernel time in the packet path: the tester thread's system time and the
    /// `ksoftirqd` threads' time, ns.
    kernel_ns: f64,
    busy_ns: Option<f64>,
}

/// The tester thread's id (for its CPU times).
static TESTER_TID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// (utime, stime) in clock ticks from a `/proc/.../stat` file.
fn stat_times(path: &str) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(path).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some((f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?))
}

/// Nanoseconds of kernel time in the packet path so far: the tester thread's system time
/// (over veth the kernel forwards, and copies into AF_XDP sockets, inside the sender's
/// system calls) plus every `ksoftirqd` thread's time (what the kernel deferred). Only
/// these threads: the rest of a shared machine (builds) does not count.
fn path_kernel_ns() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let tid = TESTER_TID.load(std::sync::atomic::Ordering::Relaxed);
    let mut ticks = stat_times(&format!("/proc/self/task/{tid}/stat")).map_or(0, |(_, s)| s);
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let name = e.file_name();
            let Some(pid) = name
                .to_str()
                .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            else {
                continue;
            };
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.starts_with("ksoftirqd/") {
                if let Some((u, s)) = stat_times(&format!("/proc/{pid}/stat")) {
                    ticks += u + s;
                }
            }
        }
    }
    ticks as f64 * 1e9 / hz
}

/// Messages to the tester thread.
type Job = (StatefulConfig, mpsc::Sender<Result<StatefulResult>>);

fn tester_thread(topo: &Topo, core: usize, jobs: mpsc::Receiver<Job>) -> Result<()> {
    crate::rfc2544::pin(core);
    // SAFETY: gettid has no preconditions.
    TESTER_TID.store(
        unsafe { libc::gettid() },
        std::sync::atomic::Ordering::Relaxed,
    );
    crate::rfc2544::enter_netns(&topo.tns())?;
    let (mut a, mut b) = crate::stateful::tester_ports()?;
    let mut mem = Arena::new(16384);
    for (cfg, reply) in jobs {
        let r = Stateful::new(&cfg).and_then(|mut g| g.run(&mut mem, &mut a, &mut b));
        let _ = reply.send(r);
    }
    Ok(())
}

/// Run everything; progress lines go to `log`.
pub fn run(opts: &Options, log: &(dyn Fn(&str) + Sync)) -> Result<Report> {
    if opts.duts.is_empty() || opts.protos.is_empty() {
        bail!("no DUT or no protocol to run");
    }
    if opts.rules == 0 {
        bail!("--rules must be at least 1 (the rule that accepts the bench's traffic)");
    }
    crate::need_tool("ip", "iproute2")?;
    if opts.duts.contains(&DutKind::Linux) {
        crate::need_tool("nft", "nftables")?;
        if opts.mode.tracked() {
            crate::need_tool("conntrack", "conntrack")?;
        }
    }
    let fill = fillers(opts.rules - 1, opts.seed);
    let mut report = Report::default();
    for &kind in &opts.duts {
        log(&format!(
            "DUT {}/veth, {} mode, {} rule(s)",
            kind.name(),
            opts.mode.name(),
            opts.rules
        ));
        let runs =
            one_dut(opts, kind, &fill, log).with_context(|| format!("DUT {}/veth", kind.name()))?;
        report.runs.extend(runs);
    }
    Ok(report)
}

fn one_dut(
    opts: &Options,
    kind: DutKind,
    fill: &[Filler],
    log: &(dyn Fn(&str) + Sync),
) -> Result<Vec<Run>> {
    let topo = Topo::new(&opts.prefix);
    topo.down();
    let _guard = TopoGuard(topo.clone());
    topo.create()?;
    let tester_macs = topo.veth(1500)?;
    let d = topo.dns();
    for (net, via, dev) in [(CLIENT_NET, TESTER_A4, "da"), (SERVER_NET, TESTER_B4, "db")] {
        ip_n(
            &d,
            &["route", "add", net, "via", &via.to_string(), "dev", dev],
        )?;
    }
    let dut_macs = [topo::read_mac(&d, "da")?, topo::read_mac(&d, "db")?];
    let mut dut = start_dut(opts, &topo, kind, fill)?;
    let (job_tx, job_rx) = mpsc::channel::<Job>();
    std::thread::scope(|s| -> Result<Vec<Run>> {
        let tester = s.spawn(|| tester_thread(&topo, opts.tester_core, job_rx));
        let out = measure(opts, &mut dut, tester_macs, dut_macs, &job_tx, log);
        drop(job_tx);
        let t = tester
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the tester thread panicked")));
        let alive = dut.running.check();
        let out = out?;
        t?;
        alive?;
        Ok(out)
    })
}

#[allow(clippy::too_many_arguments)]
fn measure(
    opts: &Options,
    dut: &mut Dut,
    tester_macs: [[u8; 6]; 2],
    dut_macs: [[u8; 6]; 2],
    jobs: &mpsc::Sender<Job>,
    log: &(dyn Fn(&str) + Sync),
) -> Result<Vec<Run>> {
    let config = |proto: Proto, cps: f64, secs: f64| -> StatefulConfig {
        let mut c = StatefulConfig::new(
            proto,
            Macs {
                src: tester_macs[0],
                dst: dut_macs[0],
            },
            Macs {
                src: tester_macs[1],
                dst: dut_macs[1],
            },
            AddrRange::new(IpAddr::V4(CLIENTS), 1024),
            AddrRange::new(IpAddr::V4(SERVERS), 16),
        );
        c.client_ports = PortRange::new(1024, 65536 - 1024);
        c.cps = cps;
        c.duration = Duration::from_secs_f64(secs);
        c.max_concurrent = 200_000;
        c.max_lag = Duration::from_millis(200);
        c
    };
    // Start a job; the result comes on the returned receiver.
    let start = |cfg: StatefulConfig| -> Result<mpsc::Receiver<Result<StatefulResult>>> {
        let (tx, rx) = mpsc::channel();
        jobs.send((cfg, tx))
            .map_err(|_| anyhow::anyhow!("the tester thread has stopped"))?;
        Ok(rx)
    };
    let wait = |rx: mpsc::Receiver<Result<StatefulResult>>| -> Result<StatefulResult> {
        rx.recv()
            .map_err(|_| anyhow::anyhow!("the tester thread has stopped"))?
    };
    let settle = |dut: &Dut| -> Result<()> {
        if dut.mode == Mode::Nat44 && dut.kind == DutKind::Ferrouter {
            // Closed sessions expire after 2 s ([nat.timeouts] of the bench).
            std::thread::sleep(Duration::from_secs(3));
        }
        dut.flush()?;
        std::thread::sleep(Duration::from_millis(100));
        Ok(())
    };
    let label = format!("{}/veth {}", dut.kind.name(), dut.mode.name());
    // Warm up: ARP-free static state, the DUT's polling, caches.
    for proto in &opts.protos {
        let r = wait(start(config(*proto, 500.0, 0.2))?)?;
        let t = judge("warmup", &r, opts.max_failed_pct);
        log(&format!(
            "{label} {proto} warm-up: {} of {} completed",
            t.completed, t.attempted
        ));
        settle(dut)?;
    }
    let bytes = dut.bytes_per_conn();
    let mut runs = Vec::new();
    for &proto in &opts.protos {
        let mut trials = Vec::new();
        let mut notes = Vec::new();
        let nat0 = dut.nat_sessions();
        let refused0 = dut.nat_refused();
        // One trial, and the CPU the machine spent during it (around the tester's run only:
        // the settling after it is not counted).
        let mut run_measured = |kind: &str, cps: f64, secs: f64| -> Result<(Trial, Window)> {
            // At most 50,000 connections a trial (NAT ports, tables).
            let secs = secs.min(50_000.0 / cps).max(0.05);
            let d0 = dut.port_drops();
            let (k0, b0, w0) = (path_kernel_ns(), dut.busy_ns(), std::time::Instant::now());
            let r = wait(start(config(proto, cps, secs))?);
            let (k1, b1, wall) = (path_kernel_ns(), dut.busy_ns(), w0.elapsed());
            let r = r?;
            let win = Window {
                wall_s: wall.as_secs_f64(),
                kernel_ns: k1 - k0,
                busy_ns: match (b0, b1) {
                    (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64),
                    _ => None,
                },
            };
            let mut t = judge(kind, &r, opts.max_failed_pct);
            t.dut_drops = d0.zip(dut.port_drops()).map(|(a, b)| b.saturating_sub(a));
            log(&format!(
                "{label} {proto} {kind} {cps:.0}/s for {secs:.2} s: {} attempted, {} completed, {} failed ({} no SYN-ACK, {} no response, {} no FIN-ACK, {} reset), {} skipped, achieved {:.0}/s{} {}",
                t.attempted,
                t.completed,
                t.failed,
                t.failures.syn_timeout,
                t.failures.response_timeout,
                t.failures.close_timeout,
                t.reset,
                t.skipped,
                t.cps_achieved,
                t.dut_drops
                    .map_or(String::new(), |d| format!(", DUT port drops {d}")),
                if t.passed {
                    "✓"
                } else if t.tester_limited {
                    "✗ (the tester fell behind)"
                } else {
                    "✗"
                }
            ));
            settle(dut)?;
            trials.push(t.clone());
            Ok((t, win))
        };
        let mut run_trial = |kind: &str, cps: f64, secs: f64| -> Result<Trial> {
            Ok(run_measured(kind, cps, secs)?.0)
        };
        let (found, tester_limited) = match opts.cps {
            Some(c) => (Some(c), false),
            None => search(opts, |c, secs| run_trial("search", c, secs))?,
        };
        // Confirmation at the rate found, twice as long; 15 % lower if it fails (up to four
        // times).
        let mut cps = None;
        let mut failed_conns = None;
        if let Some(mut rate) = found {
            for _ in 0..5 {
                let t = run_trial("confirm", rate, opts.confirm_s)?;
                failed_conns = Some(t.failed);
                if t.passed {
                    cps = Some(t.cps_achieved.min(rate));
                    break;
                }
                rate = (rate * 0.85).round();
                if opts.cps.is_some() {
                    break;
                }
            }
        }
        if cps.is_none() {
            notes.push("no rate passed (at most 0.1 % failed)".into());
        }
        if tester_limited {
            notes.push(
                "the search's upper bound was set by the tester (it fell behind its schedule), not the DUT"
                    .into(),
            );
        }
        // CPU per connection at a fixed, light rate, net of a baseline (a trial of one
        // connection a second for as long: the tester's and the DUT's polling).
        let (mut cpu_us, mut kernel_us, mut path_us) = (None, None, None);
        if opts.cost_cps > 0.0 {
            let (_, base) = run_measured("cost-baseline", 1.0, opts.cost_s.max(1.0))?;
            let (t, load) = run_measured("cost", opts.cost_cps, opts.cost_s)?;
            let n = t.completed.max(1) as f64;
            let scale = load.wall_s / base.wall_s.max(1e-3);
            let net = |l: f64, b: f64| (l - b * scale).max(0.0) / n / 1e3;
            kernel_us = Some(net(load.kernel_ns, base.kernel_ns));
            cpu_us = match (dut.kind, load.busy_ns, base.busy_ns) {
                // Linux forwards inside the tester's system calls (veth delivers on the
                // sender's core), and the tester busy-polls: its CPU time is the wall time
                // whatever the load, so the forwarding only displaces polling and no CPU
                // accounting separates it. Not measurable here.
                (DutKind::Linux, ..) => None,
                (_, Some(l), Some(b)) => Some(net(l, b)),
                _ => None,
            };
            notes.push(
                "kernel_us_per_conn is a lower bound: over veth the kernel's packet work runs inside the busy-polling tester's system calls and displaces its polling, which no CPU accounting separates"
                    .into(),
            );
            if dut.kind == DutKind::Linux {
                notes.push(
                    "no CPU time per connection of its own: Linux forwards inside the tester's system calls".into(),
                );
            }
            path_us = match dut.kind {
                DutKind::Linux => kernel_us,
                _ => cpu_us.zip(kernel_us).map(|(a, b)| a + b),
            };
        }
        // Concurrent connections: TCP, held open at once.
        let (mut concurrent, mut peak) = (None, None);
        if proto == Proto::Tcp && opts.conns > 0 && dut.mode.tracked() {
            let rate = cps.map_or(2000.0, |c| (c / 2.0).clamp(500.0, 20_000.0));
            let n = opts.conns;
            let mut cfg = config(proto, rate, n as f64 / rate);
            cfg.max_concurrent = n;
            cfg.hold = Duration::from_secs_f64(n as f64 / rate + 3.0);
            log(&format!(
                "{label} tcp concurrent: {n} connections at {rate:.0}/s, each held {:.1} s",
                cfg.hold.as_secs_f64()
            ));
            let rx = start(cfg)?;
            let mut top = 0u64;
            let r = loop {
                match rx.recv_timeout(Duration::from_millis(250)) {
                    Ok(r) => break r?,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        top = top.max(dut.flows().unwrap_or(0));
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        bail!("the tester thread has stopped")
                    }
                }
            };
            let t = judge("concurrent", &r, opts.max_failed_pct);
            log(&format!(
                "{label} tcp concurrent: {} open at most, {} completed, {} failed, DUT peak {top} flows",
                t.concurrent_max, t.completed, t.failed
            ));
            settle(dut)?;
            concurrent = Some(u64::from(t.concurrent_max).saturating_sub(t.failed));
            peak = Some(top);
            trials.push(t);
        }
        let nat_sessions = match (nat0, dut.nat_sessions()) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        let refused = dut.nat_refused().saturating_sub(refused0);
        if refused > 0 {
            notes.push(format!("the DUT's NAT refused {refused} new session(s)"));
        }
        runs.push(Run {
            dut: dut.kind.name().into(),
            transport: "veth".into(),
            mode: dut.mode.name().into(),
            proto: proto.to_string(),
            rules: opts.rules,
            cps,
            concurrent,
            bytes_per_conn: bytes,
            throughput_mpps: None,
            profile: None,
            lossless_mpps: None,
            cpu_us_per_conn: cpu_us,
            kernel_us_per_conn: kernel_us,
            path_us_per_conn: path_us,
            failed_conns,
            tester_limited,
            dut_flows_peak: peak,
            nat_sessions,
            trials,
            rfc2544: None,
            notes,
        });
    }
    Ok(runs)
}

// ---------------------------------------------------------------------------------------
// Zero-loss throughput, on the RFC 2544 bench.

/// What to measure in the zero-loss throughput part (`bench firewall --throughput`): the
/// RFC 2544 bench's NDR search ([`crate::rfc2544::run`]) with each DUT given the rule set
/// through the bench's [`DutSetup`] hook, and the traffic as conversations
/// ([`Replies`]: one client in [`CLIENT_NET`] to `flows` servers in [`SERVER_NET`], every
/// flow's replies coming back at the same rate).
#[derive(Clone, Debug)]
pub struct ThroughputOptions {
    /// Namespace prefix (`PREFIX-t`, `PREFIX-d`).
    pub prefix: String,
    /// DUTs (ferrouter, linux).
    pub duts: Vec<DutKind>,
    /// Transports (empty: each DUT on every one it runs on: Linux on veth, ferrouter on
    /// veth and memif).
    pub transports: Vec<Transport>,
    /// Stateless and/or stateful (NAT44 is not measured: its replies go to the
    /// masquerade address, not back along the flows).
    pub modes: Vec<Mode>,
    /// Rule counts (each: N-1 fillers and the accepting rule).
    pub rules: Vec<usize>,
    /// Traffic profiles (IPv4: `imix1`, `ipv4-<size>`).
    pub profiles: Vec<String>,
    /// Plain forwarding first (no filter, no connection tracking), per DUT and transport:
    /// what the filtering costs is read against it.
    pub baseline: bool,
    /// The search; its flows are conversations, at most 4,094.
    pub search: SearchOptions,
    /// The ferrouter binary.
    pub ferrouter_bin: PathBuf,
    /// Core of the tester.
    pub tester_core: usize,
    /// Core of the DUT.
    pub dut_core: usize,
    /// Seed of the generated rules.
    pub seed: u64,
}

impl Default for ThroughputOptions {
    fn default() -> ThroughputOptions {
        ThroughputOptions {
            prefix: "ffw".into(),
            duts: vec![DutKind::Ferrouter, DutKind::Linux],
            transports: vec![],
            modes: vec![Mode::Stateless, Mode::Stateful],
            rules: vec![1, 1000, 10_000],
            profiles: vec!["imix1".into()],
            baseline: true,
            search: SearchOptions::default(),
            ferrouter_bin: PathBuf::from("ferrouter"),
            tester_core: 0,
            dut_core: 1,
            seed: 1,
        }
    }
}

/// The mode column of a plain-forwarding row.
pub const FORWARDING: &str = "forwarding";

/// Each DUT's rule set for one throughput case: `mode` None is plain forwarding (no
/// filter, no tracking; kept as a hook so that Linux's conntrack state is reported too).
#[derive(Debug)]
struct FirewallSetup {
    mode: Option<Mode>,
    fill: Vec<Filler>,
    conntrack_max: usize,
}

impl crate::rfc2544::DutSetup for FirewallSetup {
    fn ferrouter_config(&self, ports: [&str; 2]) -> String {
        self.mode.map_or(String::new(), |m| {
            ferrouter_config(m, &self.fill, self.conntrack_max, ports)
        })
    }

    fn linux_up(&self, topo: &Topo) -> Result<()> {
        let Some(mode) = self.mode else {
            return Ok(());
        };
        let path = topo.dir.join("fw.nft");
        std::fs::write(&path, nft_ruleset(mode, &self.fill))
            .with_context(|| format!("writing {}", path.display()))?;
        netns_exec(&topo.dns(), &["nft", "-f", &path.display().to_string()])
            .context("loading the DUT's nftables ruleset")?;
        Ok(())
    }

    fn linux_down(&self, topo: &Topo) -> Vec<String> {
        let d = topo.dns();
        let mut notes = Vec::new();
        // Whether netfilter tracked the traffic in the DUT's namespace: conntrack's hooks
        // are registered in a namespace only once something there needs them (a `ct`
        // expression), so plain forwarding and stateless filtering run without it.
        if bench::dpdk::find_in_path("conntrack").is_some() {
            match netns_exec(&d, &["conntrack", "-C"]).map(|o| o.trim().parse::<u64>()) {
                Ok(Ok(n)) => notes.push(format!(
                    "Linux's conntrack table in the DUT namespace held {n} flow(s) at the end"
                )),
                _ => notes.push("Linux's conntrack table could not be read".into()),
            }
        }
        if self.mode.is_some() {
            if let Err(e) = netns_exec(&d, &["nft", "flush", "ruleset"]) {
                notes.push(format!("removing the nftables ruleset failed: {e:#}"));
            }
        }
        notes
    }
}

/// Measure the zero-loss throughput: plain forwarding (with `baseline`), then each mode
/// with each rule count, every DUT on every transport; progress lines go to `log`.
pub fn throughput(opts: &ThroughputOptions, log: &(dyn Fn(&str) + Sync)) -> Result<Report> {
    if opts.duts.is_empty() || opts.profiles.is_empty() {
        bail!("no DUT or no profile to run");
    }
    if let Some(d) = opts.duts.iter().find(|d| **d == DutKind::Testpmd) {
        bail!("{} has no firewall: --dut ferrouter,linux", d.name());
    }
    if opts.modes.contains(&Mode::Nat44) {
        bail!("--throughput measures stateless and stateful filtering, not nat44 (its replies go to the masquerade address)");
    }
    if opts.rules.contains(&0) {
        bail!("--rules must be at least 1 (the rule that accepts the bench's traffic)");
    }
    crate::need_tool("ip", "iproute2")?;
    if opts.duts.contains(&DutKind::Linux) && !opts.modes.is_empty() {
        crate::need_tool("nft", "nftables")?;
    }
    let net = |s: &str| -> Result<(Ipv4Addr, u8)> {
        let (a, l) = s.split_once('/').context("a network")?;
        Ok((a.parse()?, l.parse()?))
    };
    let replies = Replies {
        clients: net(CLIENT_NET)?,
        servers: net(SERVER_NET)?,
    };
    let mut cases: Vec<(Option<Mode>, usize)> = Vec::new();
    if opts.baseline {
        cases.push((None, 0));
    }
    for &m in &opts.modes {
        for &n in &opts.rules {
            cases.push((Some(m), n));
        }
    }
    if cases.is_empty() {
        bail!("nothing to measure: no mode and no baseline");
    }
    let mut report = Report::default();
    for (mode, rules) in cases {
        let name = mode.map_or(FORWARDING, Mode::name);
        log(&format!(
            "throughput: {name}{}",
            if mode.is_some() {
                format!(", {rules} rule(s)")
            } else {
                " (no filter, no connection tracking)".into()
            }
        ));
        let setup = FirewallSetup {
            mode,
            fill: fillers(rules.saturating_sub(1), opts.seed),
            conntrack_max: 262_144,
        };
        let ro = crate::rfc2544::Options {
            duts: opts.duts.clone(),
            transports: opts.transports.clone(),
            profiles: opts.profiles.clone(),
            routes4: 0,
            routes6: 0,
            flows: opts.search.flows,
            duration: opts.search.duration,
            drain: 0.3,
            line_rate_gbps: opts.search.line_rate_gbps,
            resolution_pct: opts.search.resolution_pct,
            max_search_trials: opts.search.max_trials,
            loss_tolerance_pct: 0.0,
            pdr_loss_pct: 0.0,
            mlr: true,
            loads: vec![],
            bidirectional: true,
            ipv6_percent: None,
            prefix: opts.prefix.clone(),
            ferrouter_bin: opts.ferrouter_bin.clone(),
            tester_core: opts.tester_core,
            dut_core: opts.dut_core,
            seed: opts.seed,
            repeat: 1,
            cost_load_pct: 0.0,
            latency: false,
            // Every flow carried both ways at least twice before the search, so that it
            // is established (seen replied) in both DUTs' tables.
            warmup_s: (3.0 * f64::from(opts.search.flows) / 10_000.0).max(0.2),
            replies: Some(replies),
            setup: Some(std::sync::Arc::new(setup)),
            classes: vec![],
        };
        let rep = crate::rfc2544::run(&ro, log)
            .with_context(|| format!("throughput, {name}, {rules} rule(s)"))?;
        for r in rep.runs {
            report.runs.push(Run {
                dut: r.dut.clone(),
                transport: r.transport.clone(),
                mode: name.into(),
                proto: "udp".into(),
                rules,
                cps: None,
                concurrent: None,
                bytes_per_conn: None,
                throughput_mpps: r.measured(),
                profile: Some(r.profile.clone()),
                lossless_mpps: r
                    .trials
                    .iter()
                    .filter(|t| t.phase == "search" && t.tx > 0 && t.lost == 0)
                    .map(|t| t.sent_mpps)
                    .max_by(f64::total_cmp),
                cpu_us_per_conn: None,
                kernel_us_per_conn: None,
                path_us_per_conn: None,
                failed_conns: None,
                tester_limited: r.notes.iter().any(|n| n.contains("generator-limited")),
                dut_flows_peak: None,
                nat_sessions: None,
                trials: vec![],
                notes: r.notes.clone(),
                rfc2544: Some(r),
            });
        }
    }
    Ok(report)
}

// ---------------------------------------------------------------------------------------
// Output.

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.prec$}"))
}

/// The report as a text table, with ferrouter ÷ linux ratios.
pub fn table(r: &Report) -> String {
    let mut s = String::new();
    let cps: Vec<&Run> = r.runs.iter().filter(|x| x.profile.is_none()).collect();
    if !cps.is_empty() {
        s.push_str(&cps_table(&cps));
    }
    let tput: Vec<&Run> = r.runs.iter().filter(|x| x.profile.is_some()).collect();
    if !tput.is_empty() {
        s.push_str(&throughput_table(&tput));
    }
    s
}

/// Ratio text, `-` when either side is missing.
fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "-".into(),
    }
}

/// The throughput rows: each DUT's NDR, the share it loses against its own plain
/// forwarding, ferrouter ÷ Linux on the same transport, and the issue's two targets.
fn throughput_table(runs: &[&Run]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<15} {:<10} {:>6} {:<8} {:>10} {:>13} {:>14} {:>12}",
        "DUT", "mode", "rules", "profile", "NDR Mpps", "lossless Mpps", "vs forwarding", "÷ linux"
    );
    let find = |dut: &str, transport: &str, mode: &str, rules: usize, profile: &Option<String>| {
        runs.iter().find(|x| {
            x.dut == dut
                && x.transport == transport
                && x.mode == mode
                && (mode == FORWARDING || x.rules == rules)
                && &x.profile == profile
        })
    };
    let cost = |x: &Run| -> Option<f64> {
        let base = find(&x.dut, &x.transport, FORWARDING, 0, &x.profile)?;
        let (t, b) = (x.throughput_mpps?, base.throughput_mpps?);
        (b > 0.0 && x.mode != FORWARDING).then(|| (1.0 - t / b) * 100.0)
    };
    for x in runs {
        let linux =
            find("linux", &x.transport, &x.mode, x.rules, &x.profile).filter(|_| x.dut != "linux");
        let _ = writeln!(
            s,
            "{:<15} {:<10} {:>6} {:<8} {:>10} {:>13} {:>14} {:>12}",
            format!("{}/{}", x.dut, x.transport),
            x.mode,
            if x.mode == FORWARDING {
                "-".into()
            } else {
                x.rules.to_string()
            },
            x.profile.as_deref().unwrap_or("-"),
            // ≥: the tester could not offer more, the DUT's limit is higher.
            x.throughput_mpps.map_or("-".into(), |t| format!(
                "{}{t:.3}",
                if x.tester_limited { "≥" } else { "" }
            )),
            opt(x.lossless_mpps, 3),
            // The change against plain forwarding's NDR.
            cost(x).map_or("-".into(), |c| format!("{:+.1} %", -c)),
            linux.map_or("-".into(), |l| ratio(x.throughput_mpps, l.throughput_mpps)),
        );
    }
    let _ = writeln!(
        s,
        "NDR: the search's zero-loss rate (≥: set by the tester, which could not offer more); lossless: the most the tester really sent in a trial with no loss, valid or not (a lower bound)"
    );
    // The issue's targets, from the rows there are.
    for x in runs.iter().filter(|x| x.dut == "ferrouter") {
        if x.mode != FORWARDING && x.rules >= 10_000 {
            if let Some(l) = find("linux", &x.transport, &x.mode, x.rules, &x.profile) {
                let _ = writeln!(
                    s,
                    "{}/{} {} {} rules, {}: ferrouter ÷ linux {} (target ≥ 2×)",
                    x.dut,
                    x.transport,
                    x.mode,
                    x.rules,
                    x.profile.as_deref().unwrap_or("-"),
                    ratio(x.throughput_mpps, l.throughput_mpps)
                );
            }
        }
    }
    for x in runs.iter().filter(|x| x.mode == Mode::Stateful.name()) {
        if let Some(c) = cost(x) {
            let limited = x.tester_limited
                || find(&x.dut, &x.transport, FORWARDING, 0, &x.profile)
                    .is_some_and(|b| b.tester_limited);
            let _ = writeln!(
                s,
                "{}/{} stateful, {} rule(s), {}: the cost of state {c:.1} % of plain forwarding's NDR (target ≤ 15 % at imix1){}",
                x.dut,
                x.transport,
                x.rules,
                x.profile.as_deref().unwrap_or("-"),
                if limited {
                    "; the tester limited one of the two, so this is not the DUT's"
                } else {
                    ""
                }
            );
        }
    }
    for x in runs {
        for n in &x.notes {
            let _ = writeln!(
                s,
                "{}/{} {} {}: {n}",
                x.dut,
                x.transport,
                x.mode,
                if x.mode == FORWARDING {
                    String::new()
                } else {
                    format!("{} rule(s)", x.rules)
                }
            );
        }
    }
    s
}

/// The connection-rate rows.
fn cps_table(runs: &[&Run]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<15} {:<9} {:<5} {:>6} {:>10} {:>7} {:>10} {:>7} {:>12} {:>12} {:>12} {:>9}",
        "DUT",
        "mode",
        "proto",
        "rules",
        "CPS",
        "failed",
        "concurrent",
        "B/conn",
        "CPU µs/conn",
        "kern µs/conn",
        "path µs/conn",
        "NAT sess"
    );
    for x in runs {
        let _ = writeln!(
            s,
            "{:<15} {:<9} {:<5} {:>6} {:>10} {:>7} {:>10} {:>7} {:>12} {:>12} {:>12} {:>9}",
            format!("{}/{}", x.dut, x.transport),
            x.mode,
            x.proto,
            x.rules,
            opt(x.cps, 0),
            x.failed_conns.map_or("-".into(), |f| f.to_string()),
            x.concurrent.map_or("-".into(), |f| f.to_string()),
            opt(x.bytes_per_conn, 0),
            opt(x.cpu_us_per_conn, 2),
            opt(x.kernel_us_per_conn, 2),
            opt(x.path_us_per_conn, 2),
            x.nat_sessions.map_or("-".into(), |f| f.to_string()),
        );
    }
    let by: HashMap<(&str, &str, &str, usize), &Run> = runs
        .iter()
        .map(|x| {
            (
                (x.dut.as_str(), x.proto.as_str(), x.mode.as_str(), x.rules),
                *x,
            )
        })
        .collect();
    let mut cases: Vec<(&str, usize)> = runs.iter().map(|x| (x.mode.as_str(), x.rules)).collect();
    cases.dedup();
    for (proto, (mode, rules)) in ["tcp", "udp"]
        .into_iter()
        .flat_map(|p| cases.iter().map(move |c| (p, *c)))
    {
        if let (Some(f), Some(l)) = (
            by.get(&("ferrouter", proto, mode, rules)),
            by.get(&("linux", proto, mode, rules)),
        ) {
            let _ = writeln!(
                s,
                "{mode} {rules} rule(s) {proto}: ferrouter ÷ linux: CPS {} (target ≥ 2×), the DUT's CPU per connection {} (target ≤ 0.33×), kernel time in the path per connection {}, all the path's CPU per connection {}",
                ratio(f.cps, l.cps),
                ratio(f.cpu_us_per_conn, l.cpu_us_per_conn),
                ratio(f.kernel_us_per_conn, l.kernel_us_per_conn),
                ratio(f.path_us_per_conn, l.path_us_per_conn)
            );
        }
    }
    for x in runs {
        for n in &x.notes {
            let _ = writeln!(s, "{}/{} {}: {n}", x.dut, x.transport, x.proto);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fillers_never_match_the_bench_and_render_alike() {
        let f = fillers(1000, 1);
        assert_eq!(f.len(), 1000);
        for x in &f {
            assert!(
                x.src.is_some_and(|p| !overlaps_bench(p))
                    || x.dst.is_some_and(|p| !overlaps_bench(p)),
                "{x:?}"
            );
        }
        assert!(overlaps_bench((Ipv4Addr::new(198, 0, 0, 0), 8)));
        assert!(overlaps_bench((Ipv4Addr::new(198, 19, 128, 0), 20)));
        assert!(!overlaps_bench((Ipv4Addr::new(198, 51, 100, 0), 24)));
        let nft = nft_ruleset(Mode::Nat44, &f);
        assert_eq!(
            nft.matches(" drop\n").count(),
            1000 + 1,
            "fillers + invalid"
        );
        assert!(nft.contains("masquerade"));
        let toml = ferrouter_config(Mode::Nat44, &f, 262_144, ["da", "db"]);
        let v: toml::Value = toml::from_str(&toml).unwrap();
        let filters = v["firewall"]["filter"].as_array().unwrap();
        assert_eq!(filters[0]["rule"].as_array().unwrap().len(), 1000 + 3);
        assert_eq!(
            v["nat"]["source"][0]["translation"].as_str(),
            Some("masquerade")
        );
        let fw: firewall::config::FirewallConfig =
            toml::from_str(&toml::to_string(&v["firewall"]).unwrap()).unwrap();
        assert!(fw.conntrack);
        let stateless = ferrouter_config(Mode::Stateless, &f[..3], 1024, ["mif0", "mif1"]);
        assert!(stateless.contains("interfaces = [\"mif0\"]"));
        assert!(!stateless.contains("conntrack") && !stateless.contains("state ="));
    }

    #[test]
    fn charts_group_throughput_by_mode_and_rules_or_rates_by_protocol() {
        let run = |dut: &str, tr: &str, mode: &str, rules: usize, extra: &str| -> Run {
            serde_json::from_str(&format!(
                r#"{{"dut":"{dut}","transport":"{tr}","mode":"{mode}","proto":"udp","rules":{rules},
                   "tester_limited":false,"trials":[],"notes":[]{extra}}}"#
            ))
            .unwrap()
        };
        let tp = Report {
            runs: vec![
                run(
                    "ferrouter",
                    "veth",
                    "forwarding",
                    0,
                    r#","profile":"imix1","throughput_mpps":1.5"#,
                ),
                run(
                    "ferrouter",
                    "veth",
                    "stateful",
                    1000,
                    r#","profile":"imix1","throughput_mpps":1.2"#,
                ),
                run(
                    "linux",
                    "veth",
                    "stateful",
                    1000,
                    r#","profile":"imix1","throughput_mpps":0.2"#,
                ),
                run("linux", "veth", "stateless", 1000, r#","profile":"imix1""#),
            ],
        };
        let (title, _, bars) = tp.bars();
        assert!(title.contains("throughput"));
        let groups: Vec<(&str, &str, f64)> = bars
            .iter()
            .map(|b| (b.series.as_str(), b.group.as_str(), b.value))
            .collect();
        assert_eq!(
            groups,
            [
                ("ferrouter/veth", "forwarding", 1.5),
                ("ferrouter/veth", "stateful, 1000 rules", 1.2),
                ("linux/veth", "stateful, 1000 rules", 0.2),
            ],
            "a row without its figure is left out"
        );
        let cps = Report {
            runs: vec![run("ferrouter", "veth", "nat44", 1, r#","cps":25000.0"#)],
        };
        let (title, _, bars) = cps.bars();
        assert!(title.contains("connections"));
        assert_eq!((bars[0].group.as_str(), bars[0].value), ("nat44 udp", 25.0));
        let path = std::env::temp_dir().join(format!("fwchart-{}.svg", std::process::id()));
        tp.chart(&path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(svg.contains("<svg") && svg.contains("linux/veth"), "{svg}");
    }

    #[test]
    fn the_search_brackets_the_rate() {
        let opts = Options::default();
        let limit = 37_000.0;
        let mut n = 0;
        let (found, tl) = search(&opts, |cps, _| {
            n += 1;
            Ok(Trial {
                kind: "search".into(),
                cps_target: cps,
                cps_achieved: cps,
                planned: 1,
                attempted: 1,
                completed: 1,
                failed: 0,
                failures: Default::default(),
                reset: 0,
                skipped: 0,
                concurrent_max: 1,
                dut_drops: None,
                passed: cps <= limit,
                tester_limited: false,
            })
        })
        .unwrap();
        let found = found.unwrap();
        assert!(found <= limit && found >= limit / 1.1, "{found}");
        assert!(!tl);
        assert!(n <= opts.max_trials);
    }
}
