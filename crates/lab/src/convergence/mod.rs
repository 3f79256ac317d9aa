//! `ferrouter-lab bench convergence`: routing convergence measured as the EANTC and 6WIND
//! reports measure it, by traffic.
//!
//! ```text
//!   h1 (sweep sender) ── r1 [router: FRR + ferrouter, or FRR + Linux] r2 ── h2 primary   (receiver 0)
//!                                                                   r3 ── h3 secondary (receiver 1)
//! ```
//! Both peers advertise the same N routes and the router prefers the primary's. The
//! protocol ([`Protocol`]) decides who the peers are and how they advertise and withdraw:
//! - **bgp** ([`bgp`]): eBGP peers advertising a generated Internet-like table; FRR's bgpd
//!   prefers the primary by local preference; withdrawal and re-advertisement are UPDATEs
//!   on the live sessions. The peers are BIRD 2 (the default: packed UPDATEs, like the
//!   reports' emulated routers) or GoBGP loaded from MRT files (one UPDATE per prefix);
//!   see [`Speaker`].
//! - **ospf** ([`ospf`], IPv4 only): BIRD 2 in each host originates the N prefixes as
//!   AS-external (E2) LSAs, the primary with the lower metric; FRR's ospfd prefers it;
//!   withdrawal flushes the primary's LSAs, re-advertisement originates them again.
//!
//! Traffic goes to one address in every route, round robin, and each frame says which
//! route it was for, so the receivers know per route which egress its traffic takes and
//! since when. Phases:
//! 1. **learn**: both peers advertise the table; done when traffic to every route arrives
//!    at the primary.
//! 2. **failover**: the primary withdraws every route; done when traffic to every route
//!    arrives at the secondary.
//! 3. **failback** (the reports' convergence figure): the primary advertises again; done
//!    when traffic to every route is back on the primary.
//! 4. **verification**: exact passes over every route; loss after convergence.
//!
//! Each phase's time is split by what a netlink watcher in the router's namespace saw:
//! until the first kernel route changed (the peer, the protocol, the routing daemon's
//! decision), until the last one did (the daemon and zebra installing routes in the
//! kernel), and from there until traffic had moved (for ferrouter: its netlink sync and
//! FIB; for Linux nothing but the traffic's own resolution, one pass over all routes).

pub mod bgp;
pub mod kernel;
pub mod ospf;
pub mod scale;
pub mod traffic;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::daemons::Daemons;
use crate::{Guard, Lab};
use kernel::{monotonic_ns, KernelWatch};
use traffic::Traffic;

/// Which router forwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dut {
    /// FRR installs into the kernel; ferrouter mirrors it and forwards (AF_XDP).
    Ferrouter,
    /// FRR installs into the kernel, which forwards.
    Linux,
    /// Ferrouter's own BGP speaker (`[bgp]`) takes the sessions and feeds its FIB
    /// directly; no FRR, nothing in the kernel (bgp with BIRD or the tester's peers).
    #[serde(rename = "ferrouter-bgp")]
    FerrouterBgp,
}

impl Dut {
    /// The name the CLI and the JSON use.
    pub fn name(self) -> &'static str {
        match self {
            Dut::Ferrouter => "ferrouter",
            Dut::Linux => "linux",
            Dut::FerrouterBgp => "ferrouter-bgp",
        }
    }

    /// Ferrouter forwards (with either route source).
    pub fn is_ferrouter(self) -> bool {
        self != Dut::Linux
    }
}

impl std::str::FromStr for Dut {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Dut> {
        match s {
            "ferrouter" => Ok(Dut::Ferrouter),
            "linux" => Ok(Dut::Linux),
            "ferrouter-bgp" => Ok(Dut::FerrouterBgp),
            _ => bail!("unknown DUT {s:?}: ferrouter, ferrouter-bgp or linux"),
        }
    }
}

/// The routing protocol carrying the routes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// eBGP from GoBGP peers.
    Bgp,
    /// OSPFv2 AS-external routes originated by BIRD peers (IPv4 only).
    Ospf,
}

impl Protocol {
    /// The name the CLI and the JSON use.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Bgp => "bgp",
            Protocol::Ospf => "ospf",
        }
    }
}

impl std::str::FromStr for Protocol {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Protocol> {
        match s {
            "bgp" => Ok(Protocol::Bgp),
            "ospf" => Ok(Protocol::Ospf),
            _ => bail!("unknown protocol {s:?}: bgp or ospf"),
        }
    }
}

/// What emulates the peers: BIRD (bgp and ospf), GoBGP (bgp) or ferrouter's tester (bgp
/// and ospf).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Speaker {
    /// BIRD 2: a static protocol exported over the session; routes share attributes, so
    /// UPDATEs carry hundreds of prefixes each, as a tester's emulated router sends them.
    Bird,
    /// GoBGP loaded from MRT files with per-prefix AS paths; one UPDATE per prefix.
    Gobgp,
    /// The tester's emulated routers: BGP ([`::bgp::peer`]: the table pre-encoded, sent
    /// as a copy from memory) or OSPF ([`::ospf::peer`]).
    Tester,
}

impl Speaker {
    /// The name the CLI and the JSON use.
    pub fn name(self) -> &'static str {
        match self {
            Speaker::Bird => "bird",
            Speaker::Gobgp => "gobgp",
            Speaker::Tester => "tester",
        }
    }
}

impl std::str::FromStr for Speaker {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Speaker> {
        match s {
            "bird" => Ok(Speaker::Bird),
            "gobgp" => Ok(Speaker::Gobgp),
            "tester" => Ok(Speaker::Tester),
            _ => bail!("unknown speaker {s:?}: bird, gobgp (bgp) or tester (bgp, ospf)"),
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Route counts, one run per count and DUT.
    pub routes: Vec<usize>,
    /// Protocol.
    pub protocol: Protocol,
    /// The peers' BGP speaker (bgp only).
    pub speaker: Speaker,
    /// DUTs.
    pub duts: Vec<Dut>,
    /// Sweep rate, frames/s (the time resolution is routes / rate).
    pub rate_pps: f64,
    /// Traffic to a random sample of this many routes instead of every route (the
    /// resolution becomes sample / rate); the kernel's and the speaker's FIB's times still
    /// cover every route.
    pub sample: Option<usize>,
    /// Give up a phase after this long.
    pub phase_timeout: Duration,
    /// Route generator seed.
    pub seed: u64,
    /// Namespace prefix.
    pub prefix: String,
    /// The ferrouter binary (for the ferrouter DUTs).
    pub ferrouter: PathBuf,
}

/// One phase's time and where it went (seconds from the event).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PhaseTime {
    /// Until traffic to every route took the new path.
    pub total_s: f64,
    /// Until the kernel's first route change (peer, protocol, the routing daemon's first
    /// decision).
    pub first_kernel_change_s: Option<f64>,
    /// Until the kernel's last route change (bgpd or ospfd + zebra installing every route).
    pub kernel_done_s: Option<f64>,
    /// After the kernel was done, until traffic had moved (ferrouter: its sync and FIB,
    /// plus up to one sweep pass of resolution; Linux: the resolution only).
    pub after_kernel_s: Option<f64>,
    /// ferrouter-bgp only (nothing changes in the kernel there): until ferrouter's own
    /// speaker had every change of the phase in its FIB, by the daemon's clock. The rest of
    /// `total_s` is the traffic's resolution (up to one sweep pass).
    #[serde(default)]
    pub fib_done_s: Option<f64>,
    /// The traffic's actual time per pass over every route while the phase ran: from the
    /// first pass the sender started in the phase to the last one, over the passes between
    /// (seen every 20 ms; `None` if fewer than two started). Above the nominal
    /// `sweep_period_s` when the sender was starved of CPU or the port pushed back, which
    /// coarsens `total_s` by as much.
    #[serde(default)]
    pub pass_s: Option<f64>,
    /// CPU seconds (user + system) each process used during the phase: the routing daemons
    /// by name (zebra, bgpd or ospfd, the peers) and "ferrouter". A daemon near `total_s`
    /// was busy throughout and sets the pace; the machine has two cores for all of them.
    #[serde(default)]
    pub cpu_s: BTreeMap<String, f64>,
    /// The wall time between the two readings of `cpu_s`: from just before the phase began
    /// until it was seen settled, so a little longer than `total_s` (which ends at the last
    /// route's move). No process can use more than this times the number of cores.
    #[serde(default)]
    pub cpu_window_s: Option<f64>,
}

/// CPU seconds used so far by every daemon of the run and by ferrouter (`pid`), and when.
struct CpuReading {
    at: Instant,
    by: BTreeMap<String, f64>,
}

fn cpu_now(d: &Daemons, ferrouter: Option<u32>) -> CpuReading {
    let at = Instant::now();
    let mut by: BTreeMap<String, f64> = d.cpu_seconds().into_iter().collect();
    if let Some(c) = ferrouter.and_then(crate::daemons::cpu_seconds_of) {
        by.insert("ferrouter".into(), c);
    }
    CpuReading { at, by }
}

/// Sets `phase`'s CPU seconds used between two [`cpu_now`] readings, by process (rounded to
/// the tick), and the wall time between them.
fn set_cpu_used(phase: &mut PhaseTime, before: &CpuReading, after: &CpuReading) {
    phase.cpu_s = after
        .by
        .iter()
        .filter_map(|(k, a)| Some((k.clone(), ((a - before.by.get(k)?) * 100.0).round() / 100.0)))
        .collect();
    phase.cpu_window_s = Some(after.at.duration_since(before.at).as_secs_f64());
}

/// One run's results.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    /// Which router forwarded.
    pub dut: Dut,
    /// Protocol.
    pub protocol: Protocol,
    /// The peers: "bird" or "gobgp".
    pub speaker: Speaker,
    /// Routes per peer.
    pub routes: usize,
    /// Learning both tables (from the peers starting to advertise) until traffic to every
    /// route flows.
    pub learn_s: f64,
    /// Failback time: the reports' convergence figure.
    pub converge_s: f64,
    /// Failover time.
    pub failover_s: f64,
    /// Phases in detail.
    pub learn: PhaseTime,
    /// See `learn`.
    pub failover: PhaseTime,
    /// See `learn`.
    pub failback: PhaseTime,
    /// Frames lost in the verification passes after convergence.
    pub loss_after: u64,
    /// How long the verification waited, after the failback, for the peers to report the
    /// router quiet (the tester's OSPF routers: ospfd done flooding); absent for peers
    /// that do not report it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet_wait_s: Option<f64>,
    /// Frames sent in the verification.
    pub verify_tx: u64,
    /// Routes that lost a frame in the verification.
    pub routes_with_loss: usize,
    /// Routes the traffic went to: every route, or the random sample asked for
    /// (`--sample`), which the traffic times and the verification then cover.
    #[serde(default)]
    pub traffic_routes: usize,
    /// Time for one traffic pass over every route (resolution of the times above).
    pub sweep_period_s: f64,
    /// Who dropped the frames lost in the verification.
    #[serde(flatten)]
    pub loss_cause: LossCause,
    /// ferrouter's memory after convergence.
    #[serde(flatten)]
    pub memory: DutMemory,
}

/// Who dropped the frames lost in a verification: the receivers' own sockets (the
/// benchmark's side, starved of CPU) or the DUT (ferrouter's port and graph drop counters;
/// `None` for Linux, whose drops have no per-namespace counter). The JSON of a run carries
/// these fields at its top level.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LossCause {
    /// Frames the receivers' sockets dropped during the verification.
    pub verify_receiver_drops: u64,
    /// Frames ferrouter dropped during the verification (rx drops, tx errors, graph drops).
    pub verify_dut_drops: Option<u64>,
    /// Those by cause: `port rx_drops` (a port's ring full: the worker did not keep up),
    /// `port tx_errors`, and `node/reason` for the graph's drops (e.g. `ip4-lookup/Ip4NoRoute`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub verify_dut_drop_reasons: BTreeMap<String, u64>,
}

impl LossCause {
    /// Run `verify` (the verification) on `t` and count who dropped what meanwhile.
    pub fn around<T>(
        lab: &Lab,
        dut: Dut,
        t: &mut Traffic,
        verify: impl FnOnce(&mut Traffic) -> Result<T>,
    ) -> Result<(T, LossCause)> {
        let d0 = dut_drops(lab, dut)?;
        let r0 = t.receiver_drops();
        let v = verify(t)?;
        // The receivers read their counters every ~100 ms.
        std::thread::sleep(Duration::from_millis(250));
        let d1 = dut_drops(lab, dut)?;
        let reasons: BTreeMap<String, u64> = match (&d0, &d1) {
            (Some(a), Some(b)) => b
                .iter()
                .map(|(k, v)| (k.clone(), v.saturating_sub(a.get(k).copied().unwrap_or(0))))
                .filter(|&(_, v)| v > 0)
                .collect(),
            _ => BTreeMap::new(),
        };
        Ok((
            v,
            LossCause {
                verify_receiver_drops: t.receiver_drops().saturating_sub(r0),
                verify_dut_drops: d1.is_some().then(|| reasons.values().sum()),
                verify_dut_drop_reasons: reasons,
            },
        ))
    }
}

/// Frames ferrouter has dropped so far, by cause (see [`LossCause::verify_dut_drop_reasons`];
/// `None` for other DUTs).
fn dut_drops(lab: &Lab, dut: Dut) -> Result<Option<BTreeMap<String, u64>>> {
    if !dut.is_ferrouter() {
        return Ok(None);
    }
    let ports = control::api::request_json(&lab.socket(), "interfaces", None)?;
    let c = control::api::request_json(&lab.socket(), "counters", None)?;
    let mut m = BTreeMap::new();
    for p in ports.as_array().into_iter().flatten() {
        for k in ["rx_drops", "tx_errors"] {
            *m.entry(format!("port {k}")).or_insert(0) += p[k].as_u64().unwrap_or(0);
        }
    }
    for r in c["reasons"].as_array().into_iter().flatten() {
        if r["kind"] == "drop" {
            let key = format!(
                "{}/{}",
                r["node"].as_str().unwrap_or("?"),
                r["reason"].as_str().unwrap_or("?")
            );
            *m.entry(key).or_insert(0) += r["count"].as_u64().unwrap_or(0);
        }
    }
    Ok(Some(m))
}

/// ferrouter's memory at the end of a run (all `None` for other DUTs); the JSON of a run
/// carries these fields at its top level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DutMemory {
    /// FIB memory (tables, route store, next hops), bytes.
    pub fib_memory_bytes: Option<u64>,
    /// The daemon's resident memory, bytes.
    pub process_rss_bytes: Option<u64>,
    /// Prefixes in the FIB (all sources) per `show routes summary`.
    pub fib_prefixes: Option<u64>,
}

impl DutMemory {
    /// Read off the lab's running router when `dut` is ferrouter.
    pub fn read(lab: &Lab, dut: Dut) -> Result<DutMemory> {
        if !dut.is_ferrouter() {
            return Ok(DutMemory::default());
        }
        let s = control::api::request_json(&lab.socket(), "routes", Some("summary"))?;
        Ok(DutMemory {
            fib_memory_bytes: s["fib_memory_bytes"]["total"].as_u64(),
            fib_prefixes: Some(s["ipv4"].as_u64().unwrap_or(0) + s["ipv6"].as_u64().unwrap_or(0)),
            process_rss_bytes: std::fs::read_to_string(lab.pid_file())
                .ok()
                .and_then(|p| rss_of(&p)),
        })
    }
}

/// Resident memory of process `pid`, bytes.
pub(crate) fn rss_of(pid: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{}/status", pid.trim())).ok()?;
    let kb: u64 = s
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// All runs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Report {
    /// In the order run.
    pub runs: Vec<Run>,
}

/// The protocol side of a run: the routing daemons (started by each protocol's `setup`,
/// which returns once they are ready to advertise), and what the peers do in each phase.
/// The daemons belong to the run's [`Daemons`], which stops them when dropped.
pub trait Routing {
    /// The IPv4 prefixes (address in host byte order, length) both peers advertise.
    fn prefixes(&self) -> &[(u32, u8)];
    /// Both peers start advertising every route (the learn phase's event).
    fn learn(&self) -> Result<()>;
    /// The primary withdraws every route.
    fn withdraw(&self) -> Result<()>;
    /// How long to let the secondary path settle after the failover before the failback.
    fn pause_before_failback(&self) -> Duration;
    /// The primary advertises every route again.
    fn readvertise(&self) -> Result<()>;
    /// An error if a peer not run as a daemon (the tester's) has stopped.
    fn check(&self) -> Result<()> {
        Ok(())
    }
    /// The peers' progress, for the phase's progress lines (the tester's counters).
    fn status(&self) -> Option<String> {
        None
    }
    /// Wait, at most `limit`, until the router has stopped sending the peers routing
    /// updates, and say how long that took; `None` for peers that cannot tell.
    fn wait_quiet(&self, _limit: Duration) -> Result<Option<Duration>> {
        Ok(None)
    }
}

/// At most this long, after the failback, for the router to go quiet before the
/// verification ([`Routing::wait_quiet`]).
pub const QUIET_LIMIT: Duration = Duration::from_secs(300);

/// Two BIRD peers, h2 (primary) and h3 (secondary), whose routes are a static protocol,
/// `static4`, that starts disabled ([`crate::daemons::bird_statics_disabled`]): learning
/// enables it on both, withdrawing disables it on the primary, re-advertising enables it
/// again. The BGP (`--speaker bird`) and OSPF sides differ only in how BIRD exports those
/// routes and in the pause before the failback.
pub struct StaticPeers {
    /// h2's and h3's BIRD.
    birds: [crate::daemons::Bird; 2],
    /// The IPv4 prefixes both advertise.
    prefixes: Vec<(u32, u8)>,
    /// See [`Routing::pause_before_failback`].
    pause: Duration,
}

impl StaticPeers {
    /// The primary's and the secondary's BIRD, in that order.
    pub fn new(
        birds: Vec<crate::daemons::Bird>,
        prefixes: Vec<(u32, u8)>,
        pause: Duration,
    ) -> Result<StaticPeers> {
        let Ok(birds) = <[crate::daemons::Bird; 2]>::try_from(birds) else {
            bail!("two BIRD instances expected");
        };
        Ok(StaticPeers {
            birds,
            prefixes,
            pause,
        })
    }
}

impl Routing for StaticPeers {
    fn prefixes(&self) -> &[(u32, u8)] {
        &self.prefixes
    }

    fn learn(&self) -> Result<()> {
        self.birds[0].set_protocol("enable", "static4")?;
        self.birds[1].set_protocol("enable", "static4")
    }

    fn withdraw(&self) -> Result<()> {
        self.birds[0].set_protocol("disable", "static4")
    }

    fn pause_before_failback(&self) -> Duration {
        self.pause
    }

    fn readvertise(&self) -> Result<()> {
        self.birds[0].set_protocol("enable", "static4")
    }
}

/// The traffic's destinations: one address in every route, or in a random sample of
/// `sample` routes (seeded, so both DUTs of a run get the same sample).
fn traffic_dests(table: &[(u32, u8)], sample: Option<usize>, seed: u64) -> Vec<IpAddr> {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    match sample {
        Some(k) if k < table.len() => {
            let mut v = table.to_vec();
            let mut rng = rand::rngs::SmallRng::seed_from_u64(seed ^ 0x5eed);
            let (chosen, _) = v.partial_shuffle(&mut rng, k.max(1));
            chosen.iter().map(|&(a, l)| dest_of(a, l)).collect()
        }
        _ => table.iter().map(|&(a, l)| dest_of(a, l)).collect(),
    }
}

/// One address inside each prefix (the first host address where there is one).
pub(crate) fn dest_of(a: u32, len: u8) -> IpAddr {
    host_in(IpAddr::V4(Ipv4Addr::from(a)), len)
}

/// [`dest_of`] for a prefix of either family.
pub(crate) fn host_in(a: IpAddr, len: u8) -> IpAddr {
    match a {
        IpAddr::V4(v) if len < 32 => IpAddr::V4(Ipv4Addr::from(u32::from(v) | 1)),
        IpAddr::V6(v) if len < 128 => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v) | 1)),
        other => other,
    }
}

fn secs(from: u64, to: u64) -> f64 {
    to.saturating_sub(from) as f64 / 1e9
}

/// Run everything.
pub fn run(opts: &Options, log: &dyn Fn(&str)) -> Result<Report> {
    let mut report = Report::default();
    for &n in &opts.routes {
        for &dut in &opts.duts {
            log(&format!("== {}, {n} routes per peer ==", dut.name()));
            let r =
                run_one(opts, dut, n, log).with_context(|| format!("{dut:?} with {n} routes"))?;
            log(&format!(
                "   learn {:.2} s, failover {:.2} s, failback {:.2} s, loss after {}; \
                 failback CPU s: {}",
                r.learn_s,
                r.failover_s,
                r.converge_s,
                r.loss_after,
                r.failback
                    .cpu_s
                    .iter()
                    .map(|(k, v)| format!("{k} {v:.2}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            report.runs.push(r);
        }
    }
    Ok(report)
}

/// What a phase is watched through.
struct Watch<'a> {
    t: &'a Traffic,
    kw: &'a mut KernelWatch,
    d: &'a mut Daemons,
    log: &'a dyn Fn(&str),
    timeout: Duration,
    /// ferrouter-bgp: the daemon's control socket, to read its speaker's progress.
    speaker: Option<PathBuf>,
    /// The peers.
    routing: &'a dyn Routing,
}

/// When ferrouter's speaker had every change in its FIB (CLOCK_MONOTONIC ns), once the
/// primary and the secondary hold `want` prefixes each; `None` before that.
fn speaker_fib_done(socket: &std::path::Path, want: [usize; 2]) -> Result<Option<u64>> {
    let v = control::api::request_json(socket, "bgp", None)?;
    let n = &v["speaker"]["neighbors"];
    let held = |i: usize| n[i]["prefixes"].as_u64();
    Ok(
        (held(0) == Some(want[0] as u64) && held(1) == Some(want[1] as u64))
            .then(|| v["last_fib_change_monotonic_ns"].as_u64())
            .flatten(),
    )
}

/// The sender's pass starts as [`settle`] sees them: the first and the latest change of the
/// count, and when.
struct PassClock {
    last: u64,
    first: Option<(u64, Instant)>,
    latest: Option<(u64, Instant)>,
}

impl PassClock {
    fn new(started: u64) -> PassClock {
        PassClock {
            last: started,
            first: None,
            latest: None,
        }
    }

    /// The count of passes started, read now.
    fn see(&mut self, started: u64) {
        if started != self.last {
            self.last = started;
            let now = (started, Instant::now());
            self.first.get_or_insert(now);
            self.latest = Some(now);
        }
    }

    /// Mean seconds per pass between the first and the latest start seen.
    fn mean_s(&self) -> Option<f64> {
        let ((n0, t0), (n1, t1)) = (self.first?, self.latest?);
        (n1 > n0).then(|| t1.duration_since(t0).as_secs_f64() / (n1 - n0) as f64)
    }
}

/// Wait until traffic to every route arrives on receive port `port` (frames sent after
/// `since`), keeping an eye on the kernel and the threads. Returns the phase's times.
fn settle(
    w: &mut Watch<'_>,
    what: &str,
    port: usize,
    since: u64,
    (kernel_done, speaker_want): (impl Fn(&kernel::KernelState) -> bool, [usize; 2]),
) -> Result<PhaseTime> {
    let (t, log, timeout) = (w.t, w.log, w.timeout);
    let start = Instant::now();
    let mut passes = PassClock::new(t.tracker().passes_started());
    let mut kernel_at: Option<u64> = None;
    let mut fib_at: Option<u64> = None;
    let mut last_log = Instant::now();
    loop {
        passes.see(t.tracker().passes_started());
        let st = t.tracker().settle_status(port, since);
        let ks = w.kw.state();
        if kernel_at.is_none() && kernel_done(&ks) {
            kernel_at = Some(ks.last_change_ns.max(since));
        }
        if let (None, Some(sock)) = (fib_at, &w.speaker) {
            fib_at = speaker_fib_done(sock, speaker_want)?.map(|f| f.max(since));
        }
        if st.settled == t.tracker().dests() {
            let done = st.latest_move_ns.unwrap_or(since).max(since);
            let first = w.kw.first_change().map(|f| secs(since, f));
            let kd = kernel_at.map(|k| secs(since, k));
            return Ok(PhaseTime {
                total_s: secs(since, done),
                first_kernel_change_s: first,
                kernel_done_s: kd,
                after_kernel_s: kernel_at.map(|k| secs(k, done)),
                fib_done_s: fib_at.map(|f| secs(since, f)),
                pass_s: passes.mean_s(),
                cpu_s: BTreeMap::new(),
                cpu_window_s: None,
            });
        }
        if start.elapsed() > timeout {
            bail!(
                "{what}: traffic not settled after {timeout:?}: {st:?}; kernel {ks:?}; traffic {:?}",
                t.tracker().counts()
            );
        }
        if last_log.elapsed() > Duration::from_secs(5) {
            last_log = Instant::now();
            log(&format!(
                "   {what}: {} of {} routes moved, kernel {:?} routes per egress ({} other, {} absent)",
                st.settled,
                t.tracker().dests(),
                ks.on,
                ks.other,
                ks.absent
            ));
            if let Some(s) = w.routing.status() {
                log(&format!("   {what}: peers: {s}"));
            }
        }
        t.check()?;
        w.kw.check()?;
        w.d.check_alive()?;
        w.routing.check()?;
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run_one(opts: &Options, dut: Dut, n: usize, log: &dyn Fn(&str)) -> Result<Run> {
    let mut lab = Lab::new(&opts.prefix);
    lab.h3 = true;
    // A whole table of notifications may arrive at once; the buffer is only charged as used.
    lab.extra_config = "netlink_rcvbuf = 1073741824\n".into();
    lab.down();
    let guard = Guard(lab.clone());
    if dut == Dut::FerrouterBgp {
        if opts.protocol != Protocol::Bgp || opts.speaker == Speaker::Gobgp {
            bail!("the ferrouter-bgp DUT runs with --protocol bgp --speaker bird or tester");
        }
        lab.extra_config.push_str(&bgp::ferrouter_bgp_config());
    }
    match dut {
        Dut::Ferrouter | Dut::FerrouterBgp => lab.up(&opts.ferrouter)?,
        Dut::Linux => {
            lab.build()?;
            lab.exec(&lab.rtr(), &["sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
        }
    }
    let mut d = Daemons::new(&lab.dir.join("daemons"))?;
    let router = match dut {
        Dut::FerrouterBgp => bgp::Router::Ferrouter(lab.socket()),
        _ => bgp::Router::Frr,
    };
    let routing: Box<dyn Routing> = match opts.protocol {
        Protocol::Bgp => match opts.speaker {
            Speaker::Bird => Box::new(bgp::setup_bird_peers(
                &lab, &mut d, router, n, opts.seed, log,
            )?),
            Speaker::Gobgp => Box::new(bgp::Convergence::setup(&lab, &mut d, n, opts.seed, log)?),
            Speaker::Tester => Box::new(bgp::setup_tester_peers(
                &lab, &mut d, router, n, opts.seed, log,
            )?),
        },
        Protocol::Ospf => match opts.speaker {
            Speaker::Tester => Box::new(ospf::setup_tester(&lab, &mut d, n, opts.seed, log)?),
            Speaker::Bird => Box::new(ospf::setup(&lab, &mut d, n, opts.seed, log)?),
            Speaker::Gobgp => bail!("--protocol ospf runs with --speaker bird or tester"),
        },
    };
    let table = routing.prefixes();
    let prefixes: Vec<(IpAddr, u8)> = table
        .iter()
        .map(|&(a, l)| (IpAddr::V4(Ipv4Addr::from(a)), l))
        .collect();
    let mut kw = KernelWatch::start(
        &lab.rtr(),
        prefixes,
        vec![crate::H2_V4.parse()?, crate::H3_V4.parse()?],
    )?;
    let dests = traffic_dests(table, opts.sample, opts.seed);
    let traffic_routes = dests.len();
    let r1_mac = crate::rfc2544::topo::read_mac(&lab.rtr(), "r1")?;
    let mut t = Traffic::start(
        (&lab.h1(), "eth0"),
        &[(lab.h2(), "eth0"), (lab.h3(), "eth0")],
        r1_mac,
        (crate::H1_V4.parse()?, crate::H1_V6.parse()?),
        dests,
        opts.rate_pps,
    )?;
    let period = t.period().as_secs_f64();
    log(&format!(
        "   traffic: one pass over {traffic_routes} of {n} routes every {period:.2} s"
    ));

    let mut w = Watch {
        t: &t,
        kw: &mut kw,
        d: &mut d,
        log,
        timeout: opts.phase_timeout,
        speaker: (dut == Dut::FerrouterBgp).then(|| lab.socket()),
        routing: routing.as_ref(),
    };
    let pid = match dut {
        Dut::Ferrouter | Dut::FerrouterBgp => Some(
            std::fs::read_to_string(lab.pid_file())?
                .trim()
                .parse::<u32>()
                .context("ferrouter's pid file")?,
        ),
        Dut::Linux => None,
    };
    // 1. Learn.
    let c0 = cpu_now(w.d, pid);
    let t0 = monotonic_ns();
    w.kw.mark(t0);
    routing.learn()?;
    let mut learn = settle(&mut w, "learn", 0, t0, (|k| k.on[0] == n, [n, n]))?;
    let c1 = cpu_now(w.d, pid);
    set_cpu_used(&mut learn, &c0, &c1);
    // 2. Failover.
    let t1 = monotonic_ns();
    w.kw.mark(t1);
    routing.withdraw()?;
    let mut failover = settle(&mut w, "failover", 1, t1, (|k| k.on[1] == n, [0, n]))?;
    set_cpu_used(&mut failover, &c1, &cpu_now(w.d, pid));
    // Let the secondary path settle fully before the failback (the daemons' own work too).
    std::thread::sleep(routing.pause_before_failback());
    // 3. Failback.
    let c2 = cpu_now(w.d, pid);
    let t2 = monotonic_ns();
    w.kw.mark(t2);
    routing.readvertise()?;
    let mut failback = settle(&mut w, "failback", 0, t2, (|k| k.on[0] == n, [n, n]))?;
    set_cpu_used(&mut failback, &c2, &cpu_now(w.d, pid));
    // 4. Verification, once the router is quiet if the peers can tell: a router still
    // flooding takes CPU the forwarding then lacks, on a 2-vCPU machine.
    let quiet = routing.wait_quiet(QUIET_LIMIT)?;
    if let Some(q) = quiet {
        log(&format!(
            "   the router was quiet {:.1} s after the failback",
            q.as_secs_f64()
        ));
    }
    let (v, loss_cause) = LossCause::around(&lab, dut, &mut t, |t| t.verify(2))?;
    if v.dests_with_loss > 0 {
        log(&format!(
            "   verification: {} lost over {} routes, e.g. {:?}; dropped by the receivers' \
             sockets {}, by the DUT {:?} {:?}",
            v.lost,
            v.dests_with_loss,
            v.lossy.iter().take(5).map(|l| l.addr).collect::<Vec<_>>(),
            loss_cause.verify_receiver_drops,
            loss_cause.verify_dut_drops,
            loss_cause.verify_dut_drop_reasons
        ));
    }
    let memory = DutMemory::read(&lab, dut)?;
    drop(t);
    drop(kw);
    drop(routing);
    drop(d);
    drop(guard);
    Ok(Run {
        dut,
        protocol: opts.protocol,
        speaker: opts.speaker,
        routes: n,
        learn_s: learn.total_s,
        converge_s: failback.total_s,
        failover_s: failover.total_s,
        learn,
        failover,
        failback,
        loss_after: v.lost,
        quiet_wait_s: quiet.map(|q| q.as_secs_f64()),
        verify_tx: v.tx,
        routes_with_loss: v.dests_with_loss,
        traffic_routes,
        sweep_period_s: period,
        loss_cause,
        memory,
    })
}

/// The report as a table.
pub fn table(r: &Report) -> String {
    let f = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.2}"));
    let split = |x: &Run| match x.failback.fib_done_s {
        Some(d) => format!("(speaker's FIB done {d:.2})"),
        None => format!(
            "({} / {} / {})",
            f(x.failback.first_kernel_change_s),
            f(x.failback.kernel_done_s),
            f(x.failback.after_kernel_s)
        ),
    };
    let mut s = String::from(
        "DUT            protocol  routes     traffic to  learn s  failover s  failback s  loss after  pass s (nominal/failback)  failback: first kernel change / kernel done / after kernel\n",
    );
    for x in &r.runs {
        s.push_str(&format!(
            "{:<14} {:<9} {:<10} {:<10}  {:>7.2}  {:>10.2}  {:>10.2}  {:>10}  {:>11.2} / {:<11}  {}\n",
            x.dut.name(),
            format!("{}/{}", x.protocol.name(), x.speaker.name()),
            x.routes,
            x.traffic_routes,
            x.learn_s,
            x.failover_s,
            x.converge_s,
            x.loss_after,
            x.sweep_period_s,
            f(x.failback.pass_s),
            split(x)
        ));
    }
    s
}
