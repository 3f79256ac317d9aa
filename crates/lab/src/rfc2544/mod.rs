//! `ferrouter-lab bench rfc2544`: the reports' RFC 2544 tables, reproduced on this machine
//! against ferrouter, Linux kernel forwarding and dpdk-testpmd, in one run.
//!
//! For each transport the bench builds its own topology ([`topo`]), starts each DUT for
//! real ([`dut`]), and runs the same profiles against it from the built-in tester (the
//! `tester` crate) on its own core: the throughput search (by default the noise-tolerant
//! MLR search for NDR and PDR, see [`tester::mlrsearch`]), frame loss at 25/50/75/100 % of
//! the line rate, latency at the throughput. Results come back as a [`report::Report`]
//! (table, JSON, SVG chart).

pub mod dut;
pub mod report;
pub mod standalone;
pub mod topo;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use dataplane::worker::Port;
use dataplane::Arena;
use tester::flows::{AddrRange, Endpoints, PortRange, Prefix};
use tester::rfc2544::{self as engine, LossGoal, MlrConfig, Phase, Progress, Rfc2544Config};
use tester::{DirectionConfig, Generator, Profile, TrafficConfig, TrialConfig};

use dut::{DutKind, Running, Transport};
use report::{CoreSplit, Cost, LoadRow, Report, Run, TrialRow};
use topo::{Topo, TopoGuard};

/// What to measure.
#[derive(Clone, Debug)]
pub struct Options {
    /// DUTs, in order.
    pub duts: Vec<DutKind>,
    /// Transports to use (empty: each DUT on every transport it supports).
    pub transports: Vec<Transport>,
    /// Traffic profiles (`ipv4-64`, `imix2`, ...).
    pub profiles: Vec<String>,
    /// IPv4 routes in the DUT's table.
    pub routes4: usize,
    /// IPv6 routes in the DUT's table.
    pub routes6: usize,
    /// Flows per direction.
    pub flows: u32,
    /// Seconds per trial.
    pub duration: f64,
    /// Seconds to wait for stragglers after each trial.
    pub drain: f64,
    /// Line rate per direction the loads refer to, Gbit/s.
    pub line_rate_gbps: f64,
    /// Search resolution: MLR search, the bounds' width relative to the upper bound,
    /// percent; binary search, percent of the line rate.
    pub resolution_pct: f64,
    /// Most trials of a throughput search (MLR search: both goals, underrun retries
    /// included).
    pub max_search_trials: u32,
    /// Loss a passing trial may have, percent of frames sent (0: RFC 2544's zero loss,
    /// "NDR"): the first goal of the MLR search, the criterion of the binary search.
    pub loss_tolerance_pct: f64,
    /// The MLR search's partial drop rate goal, percent of frames sent (0: no PDR goal).
    pub pdr_loss_pct: f64,
    /// Search with MLR search (NDR and PDR from repeated trials, short exploratory trials
    /// first, underruns retried) rather than the RFC 2544 binary search.
    pub mlr: bool,
    /// Offered loads of the frame-loss test, percent of the line rate.
    pub loads: Vec<f64>,
    /// Both directions at once.
    pub bidirectional: bool,
    /// IPv6 share override for dual-stack profiles, percent.
    pub ipv6_percent: Option<u8>,
    /// Namespace/file prefix.
    pub prefix: String,
    /// The ferrouter binary to start as a DUT.
    pub ferrouter_bin: PathBuf,
    /// Core of the tester (the DUT gets the other one).
    pub tester_core: usize,
    /// Core of the DUT.
    pub dut_core: usize,
    /// Seed of the route generator.
    pub seed: u64,
    /// Repetitions: each transport's DUTs run in turn this many times (A B A B ...), so
    /// the report gives medians, spreads and pairwise ratios.
    pub repeat: usize,
    /// Load of the CPU-cost trial, percent of the line rate (0: none): one trial at this
    /// fixed load after the search, the DUT's CPU time per packet measured (it must lie
    /// below every DUT's limit, so that all of them are measured at the same work).
    pub cost_load_pct: f64,
    /// A latency trial at the throughput rate after the search.
    pub latency: bool,
    /// Seconds of the warm-up trial at 10,000 frames/s per direction before the search.
    pub warmup_s: f64,
    /// Conversations instead of traffic to the generated routes (see [`Replies`]).
    pub replies: Option<Replies>,
    /// What a bench built on this one adds to each DUT (see [`DutSetup`]).
    pub setup: Option<Arc<dyn DutSetup>>,
    /// Traffic classes: the frames carry their DSCPs in proportion to their weights, and
    /// every trial counts each class apart ([`tester::TrafficClass`]; empty: DSCP 0).
    pub classes: Vec<tester::TrafficClass>,
}

/// Traffic as conversations: side A sends from one client, the first host of `clients`,
/// to the first `flows` hosts of `servers`; side B sends each flow's reply, the same
/// 5-tuple reversed, at the same rate. A stateful DUT thus sees every flow in both
/// directions (established once the warm-up has carried a packet each way). Both networks
/// are routed in the DUT, `clients` via the tester's host on side A, `servers` via side B.
/// IPv4 only; needs [`Options::bidirectional`].
#[derive(Clone, Copy, Debug)]
pub struct Replies {
    /// The clients' network, behind side A.
    pub clients: (std::net::Ipv4Addr, u8),
    /// The servers' network, behind side B.
    pub servers: (std::net::Ipv4Addr, u8),
}

impl Replies {
    /// First host of a network (the one after its network address).
    fn first_host((a, _): (std::net::Ipv4Addr, u8)) -> std::net::Ipv4Addr {
        std::net::Ipv4Addr::from(u32::from(a) + 1)
    }
    /// Hosts of a network, network and broadcast addresses excluded.
    fn hosts((_, len): (std::net::Ipv4Addr, u8)) -> u64 {
        (1u64 << (32 - u32::from(len.min(30)))) - 2
    }
}

/// A bench built on this one (the firewall bench's throughput) configures each DUT beyond
/// forwarding through these hooks: ferrouter's config gets more TOML, the Linux DUT's
/// namespace more state (an nftables ruleset) once forwarding is on, removed again after
/// its run.
pub trait DutSetup: std::fmt::Debug + Send + Sync {
    /// TOML appended to ferrouter's config (`[firewall]`, `[nat]`); `ports` are its two
    /// ports' names (side A, side B: `da`/`db` on veth, `mif0`/`mif1` on memif).
    fn ferrouter_config(&self, ports: [&str; 2]) -> String;
    /// Configure the Linux DUT's namespace (its interfaces are `da` and `db`).
    fn linux_up(&self, topo: &Topo) -> Result<()>;
    /// Undo [`DutSetup::linux_up`] after the Linux DUT's run; the notes returned go into
    /// each of its runs (what the DUT's state showed at the end).
    fn linux_down(&self, topo: &Topo) -> Vec<String>;
}

impl Default for Options {
    fn default() -> Options {
        Options {
            duts: vec![DutKind::Ferrouter, DutKind::Linux, DutKind::Testpmd],
            transports: vec![],
            profiles: vec!["ipv4-64".into()],
            routes4: 1_000_000,
            routes6: 10_000,
            flows: 1000,
            duration: 2.0,
            drain: 0.5,
            line_rate_gbps: 10.0,
            resolution_pct: 0.1,
            max_search_trials: 60,
            loss_tolerance_pct: 0.0,
            pdr_loss_pct: 0.5,
            mlr: true,
            loads: vec![25.0, 50.0, 75.0, 100.0],
            bidirectional: false,
            ipv6_percent: None,
            prefix: "frb".into(),
            ferrouter_bin: PathBuf::from("ferrouter"),
            tester_core: 0,
            repeat: 1,
            cost_load_pct: 1.5,
            dut_core: 1,
            seed: 1,
            latency: true,
            warmup_s: 0.2,
            replies: None,
            setup: None,
            classes: Vec::new(),
        }
    }
}

/// The throughput search's settings as the benches built on this one take them (`bench
/// qos`'s cost test, `bench firewall --throughput`); each passes them on to its
/// [`Options`].
#[derive(Clone, Debug)]
pub struct SearchOptions {
    /// Flows per direction.
    pub flows: u32,
    /// Seconds of the search's final trials.
    pub duration: f64,
    /// Line rate per direction the search starts from, Gbit/s.
    pub line_rate_gbps: f64,
    /// The search stops when its bounds are this close, percent of the upper bound.
    pub resolution_pct: f64,
    /// Most trials of one search.
    pub max_trials: u32,
}

impl Default for SearchOptions {
    fn default() -> SearchOptions {
        SearchOptions {
            flows: 1000,
            duration: 2.0,
            line_rate_gbps: 10.0,
            resolution_pct: 1.0,
            max_trials: 40,
        }
    }
}

/// The (DUT, transport) pairs a run measures, in order: veth first (Linux, then
/// ferrouter), then memif (testpmd, then ferrouter).
pub fn plan(opts: &Options) -> Result<Vec<(DutKind, Transport)>> {
    let supported = |d: DutKind, t: Transport| {
        matches!(
            (d, t),
            (DutKind::Linux, Transport::Veth)
                | (DutKind::Ferrouter, Transport::Veth)
                | (DutKind::Testpmd, Transport::Memif)
                | (DutKind::Ferrouter, Transport::Memif)
        )
    };
    let mut out = Vec::new();
    for t in [Transport::Veth, Transport::Memif] {
        if !opts.transports.is_empty() && !opts.transports.contains(&t) {
            continue;
        }
        for d in [DutKind::Linux, DutKind::Testpmd, DutKind::Ferrouter] {
            if opts.duts.contains(&d) && supported(d, t) {
                out.push((d, t));
            }
        }
    }
    for d in &opts.duts {
        if !out.iter().any(|(x, _)| x == d) {
            bail!(
                "DUT {} does not run on the chosen transport(s) (linux: veth; testpmd: memif; ferrouter: both)",
                d.name()
            );
        }
    }
    Ok(out)
}

/// Progress across the whole run, for the ETA.
pub(crate) struct Eta {
    start: Instant,
    done: AtomicU32,
    total: u32,
}

impl Eta {
    /// Progress over `total` trials at most, from now.
    pub(crate) fn new(total: u32) -> Eta {
        Eta {
            start: Instant::now(),
            done: AtomicU32::new(0),
            total,
        }
    }
    fn line(&self, what: &str) -> String {
        let done = self.done.load(Ordering::Relaxed);
        let el = self.start.elapsed().as_secs_f64();
        let eta = if done > 0 {
            let left = el / done as f64 * (self.total.saturating_sub(done)) as f64;
            format!("ETA ≤{:.0}s", left)
        } else {
            "ETA …".into()
        };
        format!(
            "[{done:>3}/{} trials ≤, {el:>5.0}s, {eta}] {what}",
            self.total
        )
    }
}

/// Everything a tester thread needs for one DUT.
struct Side {
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
}

/// Run the whole plan; progress lines go to `log`.
pub fn run(opts: &Options, log: &(dyn Fn(&str) + Sync)) -> Result<Report> {
    let plan = plan(opts)?;
    let mut profiles = Vec::new();
    for p in &opts.profiles {
        let mut prof = Profile::parse(p).with_context(|| format!("profile {p}"))?;
        if let Some(v6) = opts.ipv6_percent {
            if prof.is_dual_stack() {
                prof = prof.with_ipv6_percent(v6)?;
            }
        }
        if opts.replies.is_some() && prof.sends(tester::profile::Family::Ipv6) {
            bail!(
                "profile {p} sends IPv6: conversations (replied traffic) are IPv4 only (ipv4-<size>, imix1)"
            );
        }
        profiles.push(prof);
    }
    if let Some(r) = &opts.replies {
        if !opts.bidirectional {
            bail!("conversations (replied traffic) need both directions (bidirectional)");
        }
        if u64::from(opts.flows) > Replies::hosts(r.servers) {
            bail!(
                "{} flows, but the servers' network {}/{} has only {} hosts",
                opts.flows,
                r.servers.0,
                r.servers.1,
                Replies::hosts(r.servers)
            );
        }
    }
    let routes4: Vec<(u32, u8)> =
        bench::routes::gen_v4(opts.routes4 + opts.routes4 / 50 + 16, opts.seed)
            .into_iter()
            .filter(|(a, len)| !(*a >> 17 == (198 << 7 | 18 >> 1) && *len >= 15))
            .take(opts.routes4)
            .collect();
    let routes6: Vec<([u8; 16], u8)> = bench::routes::gen_v6(opts.routes6, opts.seed);
    let per_run_trials = {
        let c = engine_config(opts, &profiles[0], 1);
        c.max_trials()
    };
    let eta = Arc::new(Eta {
        start: Instant::now(),
        done: AtomicU32::new(0),
        total: per_run_trials * (plan.len() * profiles.len() * opts.repeat.max(1)) as u32,
    });
    // Jumbo profiles run on links with a 9000-byte MTU, as an operator sets them for jumbo
    // traffic; the other profiles of the same run use those links too.
    let mtu = if profiles.iter().any(|p| p.max_frame_size() > 1518) {
        log("jumbo frames in the profiles: the lab's links get a 9000-byte MTU");
        ports::MAX_MTU
    } else {
        1500
    };
    let mut report = Report::default();
    for transport in [Transport::Veth, Transport::Memif] {
        let duts: Vec<DutKind> = plan
            .iter()
            .filter(|(_, t)| *t == transport)
            .map(|(d, _)| *d)
            .collect();
        if duts.is_empty() {
            continue;
        }
        let topo = Topo::new(&opts.prefix);
        topo.down();
        let guard = TopoGuard(topo.clone());
        topo.create()?;
        let tester_macs = match transport {
            Transport::Veth => {
                let m = topo.veth(mtu)?;
                log(&format!(
                    "installing {} IPv4 + {} IPv6 routes in the DUT namespace",
                    routes4.len(),
                    routes6.len()
                ));
                let t = Instant::now();
                topo.routes(["da", "db"], &routes4, &routes6, opts.bidirectional)?;
                if let Some(r) = &opts.replies {
                    topo.conversation_routes(["da", "db"], r.clients, r.servers)?;
                }
                log(&format!(
                    "routes installed in {:.1} s",
                    t.elapsed().as_secs_f64()
                ));
                m
            }
            Transport::Memif => {
                if duts.contains(&DutKind::Ferrouter) {
                    topo.memif_taps(mtu)?;
                    let t = Instant::now();
                    topo.routes(["mif0", "mif1"], &routes4, &routes6, opts.bidirectional)?;
                    if let Some(r) = &opts.replies {
                        topo.conversation_routes(["mif0", "mif1"], r.clients, r.servers)?;
                    }
                    log(&format!(
                        "routes installed in {:.1} s",
                        t.elapsed().as_secs_f64()
                    ));
                }
                topo::TESTER_MEMIF_MAC
            }
        };
        let reps = opts.repeat.max(1);
        for (k, dut) in tester::compare::interleaved(&duts, reps) {
            log(&format!(
                "DUT {}/{}: starting{}",
                dut.name(),
                transport.name(),
                if reps > 1 {
                    format!(" (repetition {} of {reps})", k + 1)
                } else {
                    String::new()
                }
            ));
            let mut running = start_dut(
                opts,
                &topo,
                dut,
                transport,
                routes4.len(),
                routes6.len(),
                log,
            )?;
            let dut_macs = match transport {
                Transport::Veth => [
                    topo::read_mac(&topo.dns(), "da")?,
                    topo::read_mac(&topo.dns(), "db")?,
                ],
                Transport::Memif => topo::DUT_MEMIF_MAC,
            };
            let sides = [
                Side {
                    src_mac: tester_macs[0],
                    dst_mac: dut_macs[0],
                },
                Side {
                    src_mac: tester_macs[1],
                    dst_mac: dut_macs[1],
                },
            ];
            let console = running.testpmd();
            let runs = std::thread::scope(|s| {
                s.spawn(|| {
                    tester_thread(
                        opts,
                        (&topo, console),
                        transport,
                        dut,
                        &profiles,
                        &sides,
                        &routes4,
                        &routes6,
                        &eta,
                        log,
                    )
                })
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("tester thread panicked")))
            });
            let alive = running.check();
            running.stop();
            let notes = match (dut, &opts.setup) {
                (DutKind::Linux, Some(s)) => s.linux_down(&topo),
                _ => vec![],
            };
            let mut runs =
                runs.with_context(|| format!("DUT {}/{}", dut.name(), transport.name()))?;
            alive?;
            for r in &mut runs {
                r.notes.extend(notes.iter().cloned());
            }
            for r in &mut runs {
                r.routes4 = if dut == DutKind::Testpmd {
                    0
                } else {
                    routes4.len()
                };
                r.routes6 = if dut == DutKind::Testpmd {
                    0
                } else {
                    routes6.len()
                };
            }
            for r in &mut runs {
                r.repeat = k;
            }
            report.runs.extend(runs);
        }
        drop(guard);
    }
    report.finish();
    Ok(report)
}

/// Start `dut` on `transport` in `topo` with the bench's setup hook
/// ([`Options::setup`]), and wait until ferrouter's FIB holds `n4` IPv4 and `n6` IPv6
/// routes (and the conversations' networks).
#[allow(clippy::too_many_arguments)]
pub(crate) fn start_dut(
    opts: &Options,
    topo: &Topo,
    dut: DutKind,
    transport: Transport,
    n4: usize,
    n6: usize,
    log: &(dyn Fn(&str) + Sync),
) -> Result<Running> {
    Ok(match (dut, transport) {
        (DutKind::Linux, _) => {
            topo.kernel_forwarding(true)?;
            if let Some(s) = &opts.setup {
                s.linux_up(topo)
                    .context("configuring the Linux DUT (the bench's setup hook)")?;
            }
            Running::none("linux")
        }
        (DutKind::Testpmd, _) => {
            if opts.setup.is_some() {
                bail!(
                    "dpdk-testpmd takes no configuration beyond forwarding: --dut ferrouter,linux"
                );
            }
            dut::start_testpmd(topo, opts.dut_core)?
        }
        (DutKind::Ferrouter, t) => {
            let (ports, names) = match t {
                Transport::Veth => (dut::ferrouter_veth_ports(), ["da", "db"]),
                Transport::Memif => (dut::ferrouter_memif_ports(topo), ["mif0", "mif1"]),
            };
            let extra = opts
                .setup
                .as_ref()
                .map_or(String::new(), |s| s.ferrouter_config(names));
            let start = Instant::now();
            let mut r = dut::start_ferrouter_with(topo, &opts.ferrouter_bin, &ports, &extra)?;
            // The FIB must hold every route before traffic starts.
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                r.check()?;
                let (a, b) = dut::ferrouter_routes(topo).unwrap_or((0, 0));
                let conversations = opts.replies.is_none_or(|c| {
                    [c.clients, c.servers]
                        .into_iter()
                        .all(|(net, len)| dut::ferrouter_has_route(topo, &format!("{net}/{len}")))
                });
                if a as usize >= n4 && b as usize >= n6 && conversations {
                    log(&format!(
                        "ferrouter up with {a} IPv4 + {b} IPv6 routes in {:.1} s",
                        start.elapsed().as_secs_f64()
                    ));
                    break;
                }
                if Instant::now() > deadline {
                    bail!("ferrouter holds {a}/{n4} IPv4 and {b}/{n6} IPv6 routes after 120 s");
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            r
        }
    })
}

pub(crate) fn engine_config(opts: &Options, profile: &Profile, directions: u32) -> Rfc2544Config {
    let avg = profile.avg_frame_size();
    let mut c = Rfc2544Config::new(
        tester::line_rate_pps(opts.line_rate_gbps, avg),
        avg,
        directions,
    );
    c.resolution = opts.resolution_pct / 100.0;
    c.max_search_trials = opts.max_search_trials;
    c.loss_tolerance_ratio = opts.loss_tolerance_pct / 100.0;
    c.loads_percent = opts.loads.clone();
    c.trial_duration = Duration::from_secs_f64(opts.duration);
    c.latency_trial = opts.latency;
    if opts.mlr {
        let mut m = MlrConfig::new(c.trial_duration);
        m.goals = vec![LossGoal {
            loss_ratio: c.loss_tolerance_ratio,
            ..LossGoal::ndr()
        }];
        if opts.pdr_loss_pct > 0.0 {
            m.goals.push(LossGoal::pdr(opts.pdr_loss_pct / 100.0));
        }
        m.width = opts.resolution_pct / 100.0;
        m.max_trials = opts.max_search_trials;
        c.mlr = Some(m);
    }
    c
}

/// Enter the network namespace `ns` (this thread only).
pub fn enter_netns(ns: &str) -> Result<()> {
    let f = std::fs::File::open(format!("/run/netns/{ns}"))
        .with_context(|| format!("opening namespace {ns}"))?;
    // SAFETY: setns(2) on a namespace fd we hold open; affects only the calling thread.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        bail!(
            "entering namespace {ns}: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

pub(crate) fn pin(core: usize) {
    if let Some(c) =
        core_affinity::get_core_ids().and_then(|ids| ids.into_iter().find(|c| c.id == core))
    {
        core_affinity::set_for_current(c);
    }
}

#[allow(clippy::too_many_arguments)]
fn tester_thread(
    opts: &Options,
    (topo, console): (&Topo, Option<dut::TestpmdConsole<'_>>),
    transport: Transport,
    dut: DutKind,
    profiles: &[Profile],
    sides: &[Side; 2],
    routes4: &[(u32, u8)],
    routes6: &[([u8; 16], u8)],
    eta: &Eta,
    log: &(dyn Fn(&str) + Sync),
) -> Result<Vec<Run>> {
    pin(opts.tester_core);
    let mut mem = Arena::new(16384);
    match transport {
        Transport::Veth => {
            enter_netns(&topo.tns())?;
            let mut a = ports::AfXdp::open("ta", 0, 0, ports::AfXdpOptions::default())
                .context("tester port ta")?;
            let mut b = ports::AfXdp::open("tb", 0, 1, ports::AfXdpOptions::default())
                .context("tester port tb")?;
            let label = format!("tester AF_XDP {}", a.mode());
            run_profiles(
                opts,
                (dut, topo, console),
                transport,
                &label,
                profiles,
                sides,
                routes4,
                routes6,
                &mut mem,
                &mut a,
                &mut b,
                eta,
                log,
            )
        }
        Transport::Memif => {
            let open = |i: usize| -> Result<ports::memif::Memif> {
                let mut m = ports::memif::Memif::open(
                    i as u16,
                    ports::memif::MemifOptions {
                        socket: topo.memif_socket(i),
                        role: ports::memif::MemifRole::Client,
                        id: 0,
                        name: format!("tester{i}"),
                        ..Default::default()
                    },
                )
                .with_context(|| format!("tester memif {}", topo.memif_socket(i).display()))?;
                m.wait_connected(Duration::from_secs(15))
                    .with_context(|| format!("connecting to {}", topo.memif_socket(i).display()))?;
                Ok(m)
            };
            let mut a = open(0)?;
            let mut b = open(1)?;
            run_profiles(
                opts,
                (dut, topo, console),
                transport,
                "tester memif client",
                profiles,
                sides,
                routes4,
                routes6,
                &mut mem,
                &mut a,
                &mut b,
                eta,
                log,
            )
        }
    }
}

/// Destination prefixes of one direction: routes toward side B (forward) or, when
/// routes are split for bidirectional runs, those [`topo::toward_a`] picks toward side A.
fn dst_prefixes(
    routes: impl Iterator<Item = (IpAddr, u8)>,
    reverse: bool,
    split: bool,
) -> Vec<Prefix> {
    routes
        .filter(|(a, _)| !split || topo::toward_a(*a) == reverse)
        .filter_map(|(a, l)| Prefix::new(a, l).ok())
        .collect()
}

/// One direction of [`Replies`]' conversations: from side A, the client to the first
/// `flows` servers; from side B, each of those flows' replies (the same tuples, reversed).
fn conversation(r: &Replies, from: usize, flows: u32, sides: &[Side; 2]) -> DirectionConfig {
    const CLIENT_PORT: u16 = 1024;
    const SERVER_PORT: u16 = 1024;
    let client = IpAddr::V4(Replies::first_host(r.clients));
    let server = IpAddr::V4(Replies::first_host(r.servers));
    let ep = if from == 0 {
        // The flows differ by destination only: the generator's first digit is the host
        // of the destination prefix, and there are at least `flows` of them.
        let servers = Prefix::new(IpAddr::V4(r.servers.0), r.servers.1).ok();
        Endpoints {
            src: AddrRange::single(client),
            dst: servers.into_iter().collect(),
            src_ports: PortRange::single(CLIENT_PORT),
            dst_ports: PortRange::single(SERVER_PORT),
        }
    } else {
        Endpoints {
            src: AddrRange::new(server, flows),
            dst: Prefix::new(client, 32).ok().into_iter().collect(),
            src_ports: PortRange::single(SERVER_PORT),
            dst_ports: PortRange::single(CLIENT_PORT),
        }
    };
    DirectionConfig {
        src_mac: sides[from].src_mac,
        dst_mac: sides[from].dst_mac,
        v4: Some(ep),
        v6: None,
    }
}

#[allow(clippy::too_many_arguments)]
fn run_profiles<P: Port<Arena>>(
    opts: &Options,
    (dut, topo, console): (DutKind, &Topo, Option<dut::TestpmdConsole<'_>>),
    transport: Transport,
    tester_label: &str,
    profiles: &[Profile],
    sides: &[Side; 2],
    routes4: &[(u32, u8)],
    routes6: &[([u8; 16], u8)],
    mem: &mut Arena,
    a: &mut P,
    b: &mut P,
    eta: &Eta,
    log: &(dyn Fn(&str) + Sync),
) -> Result<Vec<Run>> {
    let split = opts.bidirectional;
    let dir = |from: usize, reverse: bool| -> DirectionConfig {
        let to = 1 - from;
        let dst = |v6: bool| {
            let routes = topo::prefixes(routes4, routes6).filter(|(a, _)| a.is_ipv6() == v6);
            let mut d = dst_prefixes(routes, reverse, split);
            // testpmd has no routes: any destination will do; use the other side's host.
            if d.is_empty() {
                let host = topo::tester_host(to, v6);
                d.extend(Prefix::new(host, if v6 { 128 } else { 32 }));
            }
            d
        };
        if let Some(r) = &opts.replies {
            return conversation(r, from, opts.flows, sides);
        }
        let src = |v6: bool| AddrRange::single(topo::tester_host(from, v6));
        DirectionConfig {
            src_mac: sides[from].src_mac,
            dst_mac: sides[from].dst_mac,
            v4: Some(Endpoints::new(src(false), dst(false))),
            v6: Some(Endpoints::new(src(true), dst(true))),
        }
    };
    let mut runs = Vec::new();
    for profile in profiles {
        let mut traffic = TrafficConfig::new(
            profile.clone(),
            dir(0, false),
            opts.bidirectional.then(|| dir(1, true)),
        );
        traffic.flows = opts.flows;
        traffic.classes = opts.classes.clone();
        let own_cost = match dut {
            DutKind::Ferrouter => OwnCost::Ferrouter(topo.dir.join("ferrouter.sock")),
            DutKind::Linux => OwnCost::Kernel,
            DutKind::Testpmd => OwnCost::Testpmd,
        };
        let subject = Subject {
            dut: dut.name(),
            transport: transport.name(),
            tester_label,
            own_cost,
            settle: None,
        };
        runs.push(measure(
            opts, &subject, console, profile, &traffic, mem, a, b, eta, log,
        )?);
    }
    Ok(runs)
}

/// Whose CPU time the cost trial charges to the DUT (see [`Cost::ns_per_packet`]).
pub(crate) enum OwnCost<'a> {
    /// Ferrouter's workers' busy time over the packets they received (its control socket).
    Ferrouter(PathBuf),
    /// The kernel's time on both cores over the packets forwarded (Linux forwarding).
    Kernel,
    /// testpmd's busy cycles (its console).
    Testpmd,
    /// A cumulative CPU-time reading in ns (a DUT of several processes, such as two IPsec
    /// gateways), over the packets the tester received.
    Cpu(&'a (dyn Fn() -> Option<u64> + Sync)),
}

/// The DUT a [`measure`] runs against, as the report names it.
pub(crate) struct Subject<'a> {
    /// `Run::dut`.
    pub dut: &'a str,
    /// `Run::transport`.
    pub transport: &'a str,
    /// The tester's ports, the run's first note.
    pub tester_label: &'a str,
    /// Its own CPU cost.
    pub own_cost: OwnCost<'a>,
    /// Called before each trial: waits until the DUT has worked off what earlier trials
    /// left queued in it (a DUT with unbounded queues would otherwise lose the next
    /// trial's frames behind them).
    pub settle: Option<&'a (dyn Fn() + Sync)>,
}

/// One profile against one running DUT: the warm-up, the search (`try_run_timed`), the
/// CPU-cost trial and the frame-loss rows, as one [`Run`] (its `repeat` 0).
#[allow(clippy::too_many_arguments)]
pub(crate) fn measure<P: Port<Arena>>(
    opts: &Options,
    subject: &Subject<'_>,
    console: Option<dut::TestpmdConsole<'_>>,
    profile: &Profile,
    traffic: &TrafficConfig,
    mem: &mut Arena,
    a: &mut P,
    b: &mut P,
    eta: &Eta,
    log: &(dyn Fn(&str) + Sync),
) -> Result<Run> {
    let tester_label = subject.tester_label;
    let directions = if opts.bidirectional { 2 } else { 1 };
    let label = format!("{}/{} {}", subject.dut, subject.transport, profile.name());
    let mut gen = match Generator::new(traffic) {
        Ok(g) => g,
        Err(e) => bail!("{label}: {e:#}"),
    };
    let cfg = engine_config(opts, profile, directions);
    let mut tcfg = TrialConfig::new(1.0, Duration::from_secs_f64(opts.duration));
    tcfg.bidirectional = opts.bidirectional;
    tcfg.drain = Duration::from_secs_f64(opts.drain);
    // A shared 2-core machine preempts the tester for milliseconds at a time: let it
    // catch up on that much schedule rather than count the frames as never offered.
    tcfg.max_lag = Duration::from_millis(5);
    // Warm-up: a short trial so ARP-free static state, caches and the DUT's adaptive
    // polling are awake before the first measured trial.
    let mut warm = tcfg;
    warm.rate_pps = 10_000.0;
    warm.duration = Duration::from_secs_f64(opts.warmup_s.max(0.01));
    let _ = gen.run_trial(mem, a, b, &warm);
    let mut progress = |p: Progress<'_>| {
        if let Progress::Finished {
            phase,
            rate_pps,
            result,
            passed,
            record,
            ..
        } = p
        {
            eta.done.fetch_add(1, Ordering::Relaxed);
            let ph = match (phase, &record.goal) {
                (Phase::Throughput, Some(g)) => {
                    format!("search {g} {}s", record.duration_s)
                }
                (Phase::Throughput, None) => "search".to_string(),
                (Phase::FrameLoss { load_percent }, _) => format!("load {load_percent}%"),
                (Phase::Latency, _) => "latency".to_string(),
            };
            log(&eta.line(&format!(
                "{label} {ph}: offered {:.3} Mpps, sent {:.3}, received {:.3}, loss {:.3}% {}",
                rate_pps * directions as f64 / 1e6,
                result.tx_pps / 1e6,
                result.rx_pps / 1e6,
                result.loss_percent(),
                if record.invalid {
                    "✗ underrun: invalid, not the DUT's loss"
                } else if passed {
                    "✓"
                } else {
                    "✗"
                }
            )));
        }
    };
    let cpu_before = cpu_times();
    let rep = engine::try_run_timed(
        &cfg,
        |rate, duration| {
            let mut t = tcfg;
            t.rate_pps = rate;
            t.duration = duration;
            if let Some(settle) = subject.settle {
                settle();
            }
            gen.run_trial(mem, a, b, &t)
        },
        Some(&mut progress),
    )
    .with_context(|| format!("{label}: trial failed"))?;
    let cpu = cpu_split(&cpu_before, &cpu_times(), opts.tester_core, opts.dut_core);
    let cost = if opts.cost_load_pct > 0.0 {
        let mut t = tcfg;
        t.rate_pps = cfg.line_rate_pps * opts.cost_load_pct / 100.0;
        let probe = match &subject.own_cost {
            OwnCost::Ferrouter(sock) => Some(sock.as_path()),
            _ => None,
        };
        let cpu_reading = || match &subject.own_cost {
            OwnCost::Cpu(read) => read(),
            _ => None,
        };
        if let Some(c) = console {
            c.clear()
                .with_context(|| format!("{label}: CPU-cost trial"))?;
        }
        if let Some(settle) = subject.settle {
            settle();
        }
        let before = (cpu_times(), probe.and_then(ferrouter_busy), cpu_reading());
        let r = gen
            .run_trial(mem, a, b, &t)
            .with_context(|| format!("{label}: CPU-cost trial failed"))?;
        let after = (cpu_times(), probe.and_then(ferrouter_busy), cpu_reading());
        let testpmd = match console {
            Some(c) => c
                .cycles(Duration::from_secs(5))
                .with_context(|| format!("{label}: CPU-cost trial"))?,
            None => None,
        };
        let kernel_ns = kernel_ns(&before.0, &after.0, [opts.tester_core, opts.dut_core]);
        let per = |ns: f64, pkts: u64| (pkts > 0).then(|| ns / pkts as f64);
        let own = match (&subject.own_cost, before.1, after.1) {
            (OwnCost::Ferrouter(_), Some((b0, p0)), Some((b1, p1))) => {
                per(b1.saturating_sub(b0) as f64, p1.saturating_sub(p0))
            }
            (OwnCost::Kernel, ..) => per(kernel_ns, r.rx),
            (OwnCost::Testpmd, ..) => testpmd.and_then(|c| c.ns_per_packet()),
            (OwnCost::Cpu(_), ..) => match (before.2, after.2) {
                (Some(c0), Some(c1)) => per(c1.saturating_sub(c0) as f64, r.rx),
                _ => None,
            },
            _ => None,
        };
        let c = Cost {
            load_pct: opts.cost_load_pct,
            offered_mpps: t.rate_pps * directions as f64 / 1e6,
            rx_mpps: r.rx_pps / 1e6,
            lost: r.lost,
            tx: r.tx,
            ns_per_packet: own,
            kernel_ns_per_packet: per(kernel_ns, r.rx).unwrap_or(0.0),
        };
        log(&format!(
            "{label} CPU cost at {}% ({:.3} Mpps): DUT {}, kernel {:.0} ns/packet",
            opts.cost_load_pct,
            c.offered_mpps,
            c.ns_per_packet
                .map_or("not measured".into(), |n| format!("{n:.0} ns/packet")),
            c.kernel_ns_per_packet
        ));
        Some(c)
    } else {
        None
    };
    let mut loads = Vec::new();
    for &pct in &opts.loads {
        // The trial behind loss_at_load: the last valid one at this load (a frame-loss
        // trial, or the search's full-duration trial at the line rate it reused).
        let rate = cfg.line_rate_pps * pct / 100.0;
        let at_load = |t: &&engine::TrialRecord| match t.phase {
            Phase::FrameLoss { load_percent } => load_percent == pct,
            Phase::Throughput => {
                cfg.reuse_line_rate_trial
                    && pct == 100.0
                    && (t.rate_pps - rate).abs() <= 1e-9 * rate
                    && t.duration_s >= opts.duration * (1.0 - 1e-9)
            }
            Phase::Latency => false,
        };
        let rec = rep
            .trials
            .iter()
            .filter(at_load)
            .rfind(|t| !t.invalid)
            .or_else(|| rep.trials.iter().rfind(at_load));
        let Some(rec) = rec else { continue };
        let r = &rec.result;
        loads.push(LoadRow {
            load_pct: pct,
            offered_mpps: rec.rate_pps * directions as f64 / 1e6,
            sent_mpps: r.tx_pps / 1e6,
            rx_mpps: r.rx_pps / 1e6,
            rx_gbps_l1: r.rx_gbps_l1,
            loss_pct: r.loss_percent(),
        });
    }
    loads.sort_by(|x, y| x.load_pct.total_cmp(&y.load_pct));
    let mut notes = vec![tester_label.to_string()];
    if rep.underruns > 0 {
        notes.push(format!(
            "{} trial(s) invalidated: the tester could not offer the load (underrun); {}",
            rep.underruns,
            if cfg.mlr.is_some() {
                "each was retried, and none counted as the DUT's loss"
            } else {
                "the binary search counted them as failed trials (use the MLR search to retry them)"
            }
        ));
    }
    if rep.generator_limited {
        notes.push("the tester could not offer some rates even after retries (generator-limited): a result at the tester's ceiling is a lower bound set by the tester, not the DUT".into());
    }
    if rep.budget_exhausted {
        notes.push(format!(
            "the search's budget ({} trials, or {:.0} s of trial time) ran out before NDR and PDR reached the resolution: their bounds are wider",
            opts.max_search_trials,
            cfg.mlr.as_ref().map_or(0.0, |m| m.max_time.as_secs_f64())
        ));
    }
    let pdr = rep.goal("pdr");
    let trials: Vec<TrialRow> = rep
        .trials
        .iter()
        .map(|t| TrialRow {
            n: t.n,
            phase: match t.phase {
                Phase::Throughput => "search",
                Phase::FrameLoss { .. } => "load",
                Phase::Latency => "latency",
            }
            .into(),
            goal: t.goal.clone(),
            stage: t.stage,
            duration_s: t.duration_s,
            load_pct: t.load_percent,
            offered_mpps: t.rate_pps * directions as f64 / 1e6,
            sent_mpps: t.result.tx_pps / 1e6,
            rx_mpps: t.result.rx_pps / 1e6,
            tx: t.result.tx,
            rx: t.result.rx,
            lost: t.result.lost,
            loss_pct: t.result.loss_percent(),
            passed: t.passed,
            invalid: t.invalid,
            fail_reason: t.fail_reason,
            tx_port_full: t.result.tx_port_full,
            tx_skipped: t.result.tx_skipped,
            classes: t.result.classes.clone(),
        })
        .collect();
    let v6 = profile.ipv6_percent();
    Ok(Run {
        dut: subject.dut.into(),
        transport: subject.transport.into(),
        profile: profile.name().into(),
        flows: opts.flows,
        pattern: format!("1pp - {}", if opts.bidirectional { "bi" } else { "uni" }),
        ratio: format!("{}/{}", 100 - v6 as u32, v6),
        frame_size: frame_size_label(profile),
        avg_frame: profile.avg_frame_size(),
        routes4: 0,
        routes6: 0,
        line_rate_gbps: opts.line_rate_gbps,
        loss_tolerance_pct: opts.loss_tolerance_pct,
        search: if cfg.mlr.is_some() { "mlr" } else { "binary" }.into(),
        throughput_mpps: rep.throughput_mpps,
        ndr_mpps: rep.throughput_mpps,
        pdr_mpps: pdr.map(|g| g.mpps),
        pdr_loss_pct: pdr.map(|g| g.loss_ratio * 100.0),
        underruns: rep.underruns,
        budget_exhausted: rep.budget_exhausted,
        throughput_gbps_l1: rep.throughput_gbps_l1,
        throughput_load_pct: rep.throughput_percent,
        loss_at_load: rep
            .loss_at_load
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect::<BTreeMap<_, _>>(),
        loads,
        latency_us: rep.latency_us,
        trial_count: trials.len(),
        trials,
        cpu,
        cost,
        notes,
        repeat: 0,
    })
}

/// Per-core jiffies from /proc/stat: [user, nice, system, idle, iowait, irq, softirq, steal].
pub(crate) fn cpu_times() -> Vec<[u64; 8]> {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let mut out = Vec::new();
    for l in text.lines() {
        let mut it = l.split_whitespace();
        let Some(name) = it.next() else { continue };
        let Some(n) = name
            .strip_prefix("cpu")
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        let mut v = [0u64; 8];
        for (x, t) in v.iter_mut().zip(&mut it) {
            *x = t.parse().unwrap_or(0);
        }
        if out.len() <= n {
            out.resize(n + 1, [0; 8]);
        }
        out[n] = v;
    }
    out
}

/// Nanoseconds of kernel time (system, irq, softirq) on `cores` between two /proc/stat
/// readings (USER_HZ = 100: 10 ms per tick).
pub(crate) fn kernel_ns(a: &[[u64; 8]], b: &[[u64; 8]], cores: [usize; 2]) -> f64 {
    let mut ticks = 0u64;
    for (i, core) in cores.into_iter().enumerate() {
        if cores[..i].contains(&core) {
            continue;
        }
        if let (Some(x), Some(y)) = (a.get(core), b.get(core)) {
            for k in [2, 5, 6] {
                ticks += y[k].saturating_sub(x[k]);
            }
        }
    }
    ticks as f64 * 1e7
}

/// Ferrouter's workers' busy nanoseconds and packets received, summed (`show counters`).
pub(crate) fn ferrouter_busy(socket: &std::path::Path) -> Option<(u64, u64)> {
    let c = control::api::request_json(socket, "counters", None).ok()?;
    let workers = c["workers"].as_array()?;
    let sum = |k: &str| workers.iter().filter_map(|w| w[k].as_u64()).sum::<u64>();
    Some((sum("busy_ns"), sum("rx")))
}

fn cpu_split(a: &[[u64; 8]], b: &[[u64; 8]], tester: usize, dut: usize) -> Vec<CoreSplit> {
    let mut out = Vec::new();
    for (core, role) in [(tester, "tester"), (dut, "dut")] {
        let (Some(x), Some(y)) = (a.get(core), b.get(core)) else {
            continue;
        };
        let d: Vec<f64> = x
            .iter()
            .zip(y)
            .map(|(p, q)| q.saturating_sub(*p) as f64)
            .collect();
        let total: f64 = d.iter().sum::<f64>().max(1.0);
        let pct = |v: f64| (v / total * 1000.0).round() / 10.0;
        out.push(CoreSplit {
            core,
            role: role.into(),
            user: pct(d[0] + d[1]),
            system: pct(d[2] + d[5]),
            softirq: pct(d[6]),
            idle: pct(d[3] + d[4]),
            steal: pct(d[7]),
        });
    }
    out
}

fn frame_size_label(p: &Profile) -> String {
    let name = p.name();
    match name.split_once('-') {
        Some(("ipv4" | "ipv6", size)) => size.to_string(),
        _ => name.to_uppercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversations_come_back_as_the_same_flows_reversed() {
        use std::net::Ipv4Addr;
        use tester::flows::FlowSet;
        use tester::profile::Family;
        let r = Replies {
            clients: (Ipv4Addr::new(198, 18, 128, 0), 20),
            servers: (Ipv4Addr::new(198, 19, 128, 0), 20),
        };
        let sides = [
            Side {
                src_mac: [2, 0, 0, 0, 0, 1],
                dst_mac: [2, 0, 0, 0, 0, 2],
            },
            Side {
                src_mac: [2, 0, 0, 0, 0, 3],
                dst_mac: [2, 0, 0, 0, 0, 4],
            },
        ];
        let flows = 1000;
        let set = |from: usize| {
            let d = conversation(&r, from, flows, &sides);
            assert_eq!(d.src_mac, sides[from].src_mac);
            assert!(d.v6.is_none());
            FlowSet::new(Family::Ipv4, d.v4.as_ref().unwrap(), flows).unwrap()
        };
        let (fwd, rev) = (set(0), set(1));
        let mut fwd: Vec<_> = fwd.iter().collect();
        let mut back: Vec<_> = rev
            .iter()
            .map(|t| tester::FiveTuple {
                src: t.dst,
                dst: t.src,
                sport: t.dport,
                dport: t.sport,
            })
            .collect();
        assert_eq!(fwd[0].src, "198.18.128.1".parse::<IpAddr>().unwrap());
        assert_eq!(fwd[0].dst, "198.19.128.1".parse::<IpAddr>().unwrap());
        fwd.sort();
        back.sort();
        back.dedup();
        assert_eq!(back.len(), flows as usize);
        assert_eq!(fwd, back);
        assert_eq!(Replies::hosts(r.servers), 4094);
    }

    #[test]
    fn engine_config_maps_the_search_options() {
        let p = Profile::parse("ipv4-64").unwrap();
        let opts = Options::default();
        let c = engine_config(&opts, &p, 1);
        let m = c.mlr.as_ref().expect("MLR search by default");
        assert_eq!(c.trial_duration, Duration::from_secs(2));
        assert_eq!(m.goals.len(), 2);
        assert_eq!(
            (m.goals[0].name.as_str(), m.goals[0].loss_ratio),
            ("ndr", 0.0)
        );
        assert_eq!(
            (m.goals[1].name.as_str(), m.goals[1].loss_ratio),
            ("pdr", 0.005)
        );
        assert_eq!((m.width, m.max_trials), (0.001, 60));
        assert_eq!(m.initial_duration, Duration::from_millis(500));
        // --pdr-loss 0: NDR only; --loss-tolerance is the first goal's loss ratio.
        let o = Options {
            pdr_loss_pct: 0.0,
            loss_tolerance_pct: 0.1,
            ..Options::default()
        };
        let c = engine_config(&o, &p, 2);
        let m = c.mlr.as_ref().unwrap();
        assert_eq!(m.goals.len(), 1);
        assert!((m.goals[0].loss_ratio - 0.001).abs() < 1e-12);
        // --search binary.
        let o = Options {
            mlr: false,
            ..Options::default()
        };
        let c = engine_config(&o, &p, 1);
        assert!(c.mlr.is_none());
        assert_eq!(c.max_search_trials, 60);
    }
}
