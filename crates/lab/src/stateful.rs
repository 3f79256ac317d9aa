//! `ferrouter-lab bench stateful`: the tester's stateful generator ([`tester::stateful`])
//! through Linux as a stateful firewall, in the RFC 2544 bench's topology
//! ([`crate::rfc2544::topo`]): a tester namespace with AF_PACKET ports on `ta` and `tb`,
//! and a DUT namespace with kernel forwarding and an nftables ruleset that accepts only
//! what conntrack tracks:
//!
//! ```text
//! forward (policy drop):
//!   ct state established,related  accept   (counter "established")
//!   ct state invalid              drop     (counter "invalid")
//!   da → db, TCP SYN only, ct new accept   (counter "new_tcp")
//!   da → db, UDP, ct new          accept   (counter "new_udp")
//!   anything else                 drop     (counter "dropped")
//! ```
//! with `nf_conntrack_tcp_loose = 0`, so a TCP connection is tracked only from its SYN and
//! every segment must fit conntrack's window tracking.
//!
//! Clients are 198.18.128.0/20 behind `ta`, servers 198.19.128.0/20 behind `tb`, routed by
//! the DUT to the tester's hosts 198.18.0.2 and 198.19.0.2.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use dataplane::Arena;
use serde::{Deserialize, Serialize};
use tester::flows::{AddrRange, PortRange};
use tester::stateful::{Macs, Proto, Stateful, StatefulConfig, StatefulResult};

use crate::rfc2544::topo::{self, ip_n, Topo, TopoGuard, TESTER_A4, TESTER_B4};

/// First client address.
pub const CLIENTS: Ipv4Addr = Ipv4Addr::new(198, 18, 128, 1);
/// First server address.
pub const SERVERS: Ipv4Addr = Ipv4Addr::new(198, 19, 128, 1);
/// The nftables table the bench installs in the DUT namespace.
pub const TABLE: &str = "ferrouter_bench";

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Namespace prefix (`PREFIX-t`, `PREFIX-d`).
    pub prefix: String,
    /// One run per protocol, in this order.
    pub protos: Vec<Proto>,
    /// Connections per run.
    pub conns: u64,
    /// New connections per second.
    pub cps: f64,
    /// Request bytes.
    pub request_bytes: u32,
    /// Response bytes.
    pub response_bytes: u32,
    /// Most connections open at once.
    pub max_concurrent: u32,
    /// How long each connection stays open after its response.
    pub hold: Duration,
    /// Client addresses (from [`CLIENTS`], at most 4094).
    pub clients: u32,
    /// Server addresses (from [`SERVERS`], at most 4094).
    pub servers: u32,
    /// The nftables stateful filter (off: plain kernel forwarding).
    pub firewall: bool,
    /// How far the tester may fall behind its schedule (descheduled on a shared machine)
    /// before due connections are given up; they are opened late, in bursts, until then.
    pub max_lag: Duration,
}

impl Default for Options {
    /// 2,000 connections of each protocol at 1,000 per second, 64-byte requests,
    /// 1024-byte responses, 16 clients, 4 servers, firewall on, 200 ms of lag allowed.
    fn default() -> Options {
        Options {
            prefix: "fst".into(),
            protos: vec![Proto::Tcp, Proto::Udp],
            conns: 2000,
            cps: 1000.0,
            request_bytes: 64,
            response_bytes: 1024,
            max_concurrent: 10_000,
            hold: Duration::ZERO,
            clients: 16,
            servers: 4,
            firewall: true,
            max_lag: Duration::from_millis(200),
        }
    }
}

/// What the DUT's firewall counted during one run (deltas of its nftables counters) and
/// how many connections its conntrack table held at the end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DutCounts {
    /// Packets accepted as the first of a new TCP connection (SYNs).
    pub new_tcp: u64,
    /// Packets accepted as the first of a new UDP flow.
    pub new_udp: u64,
    /// Packets of tracked connections.
    pub established: u64,
    /// Packets conntrack found invalid (out of window, bad checksum, ...).
    pub invalid: u64,
    /// Packets no rule accepted.
    pub dropped: u64,
    /// Conntrack entries of the run's protocol in the DUT at the end of the run (TCP: in
    /// TIME_WAIT, i.e. closed by both sides).
    pub conntrack_entries: u64,
}

/// One protocol's run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    /// The tester's counts.
    pub tester: StatefulResult,
    /// The DUT's (all zero without the firewall).
    pub dut: DutCounts,
}

/// Every run of the bench.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// Always "linux" (ferrouter's firewall comes with `bench firewall`).
    pub dut: String,
    /// Whether the nftables stateful filter was on.
    pub firewall: bool,
    /// One per protocol.
    pub runs: Vec<Run>,
}

/// `tool` is on PATH, or an error naming its Debian package.
fn need(tool: &str, package: &str) -> Result<()> {
    if bench::dpdk::find_in_path(tool).is_none() {
        bail!("{tool} not found on PATH: install the Debian package {package} (apt-get install {package})");
    }
    Ok(())
}

fn ruleset() -> String {
    format!(
        r#"table inet {TABLE} {{
  counter new_tcp {{}}
  counter new_udp {{}}
  counter established {{}}
  counter invalid {{}}
  counter dropped {{}}
  chain forward {{
    type filter hook forward priority filter; policy drop;
    ct state established,related counter name "established" accept
    ct state invalid counter name "invalid" drop
    iifname "da" oifname "db" tcp flags & (fin|syn|rst|ack) == syn ct state new counter name "new_tcp" accept
    iifname "da" oifname "db" meta l4proto udp ct state new counter name "new_udp" accept
    counter name "dropped" drop
  }}
}}
"#
    )
}

/// Run `args` in namespace `ns`; its stdout, or an error with its stderr.
pub(crate) fn netns_exec(ns: &str, args: &[&str]) -> Result<String> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .output()
        .with_context(|| format!("running {} in namespace {ns}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "{} in namespace {ns} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Packets of each named counter of the bench's table.
fn nft_counters(ns: &str) -> Result<HashMap<String, u64>> {
    let out = netns_exec(
        ns,
        &["nft", "-j", "list", "counters", "table", "inet", TABLE],
    )?;
    let v: serde_json::Value =
        serde_json::from_str(&out).context("parsing nft -j list counters")?;
    let mut m = HashMap::new();
    for item in v["nftables"].as_array().into_iter().flatten() {
        let c = &item["counter"];
        if let (Some(name), Some(p)) = (c["name"].as_str(), c["packets"].as_u64()) {
            m.insert(name.to_string(), p);
        }
    }
    Ok(m)
}

/// Conntrack entries of `proto` (TCP: in TIME_WAIT) in namespace `ns`.
fn conntrack_entries(ns: &str, proto: Proto) -> Result<u64> {
    let mut args = vec![
        "conntrack",
        "-L",
        "-p",
        if proto == Proto::Tcp { "tcp" } else { "udp" },
    ];
    if proto == Proto::Tcp {
        args.extend(["--state", "TIME_WAIT"]);
    }
    let out = netns_exec(ns, &args)?;
    Ok(out.lines().filter(|l| !l.trim().is_empty()).count() as u64)
}

/// Build the topology, run every protocol, tear it all down (also on failure).
pub fn run(opts: &Options, log: &(dyn Fn(&str) + Sync)) -> Result<Report> {
    if opts.protos.is_empty() {
        bail!("no protocol to run");
    }
    if !(1..=4094).contains(&opts.clients) || !(1..=4094).contains(&opts.servers) {
        bail!("clients and servers: 1..=4094 addresses each (a /20 apiece)");
    }
    if opts.conns == 0 || !(opts.cps.is_finite() && opts.cps > 0.0) {
        bail!("connections and rate must be positive");
    }
    need("ip", "iproute2")?;
    if opts.firewall {
        need("nft", "nftables")?;
        need("conntrack", "conntrack")?;
    }
    let topo = Topo::new(&opts.prefix);
    topo.create()?;
    let _guard = TopoGuard(topo.clone());
    let tester_macs = topo.veth(1500)?;
    let (t, d) = (topo.tns(), topo.dns());
    let dut_macs = [topo::read_mac(&d, "da")?, topo::read_mac(&d, "db")?];
    ip_n(
        &d,
        &[
            "route",
            "add",
            "198.18.128.0/20",
            "via",
            &TESTER_A4.to_string(),
            "dev",
            "da",
        ],
    )?;
    ip_n(
        &d,
        &[
            "route",
            "add",
            "198.19.128.0/20",
            "via",
            &TESTER_B4.to_string(),
            "dev",
            "db",
        ],
    )?;
    topo.kernel_forwarding(true)?;
    if opts.firewall {
        let path = topo.dir.join("stateful.nft");
        std::fs::write(&path, ruleset()).with_context(|| format!("writing {}", path.display()))?;
        netns_exec(&d, &["nft", "-f", &path.display().to_string()])
            .context("loading the DUT's nftables ruleset")?;
        // Track TCP only from a SYN: mid-stream segments are invalid.
        netns_exec(
            &d,
            &["sysctl", "-qw", "net.netfilter.nf_conntrack_tcp_loose=0"],
        )?;
        netns_exec(
            &d,
            &[
                "sysctl",
                "-qw",
                "net.netfilter.nf_conntrack_tcp_be_liberal=0",
            ],
        )?;
    }
    log(&format!(
        "Linux DUT in {d}: kernel forwarding{}",
        if opts.firewall {
            ", nftables stateful filter with conntrack"
        } else {
            ""
        }
    ));

    let mut runs = Vec::new();
    for &proto in &opts.protos {
        let mut cfg = StatefulConfig::new(
            proto,
            Macs {
                src: tester_macs[0],
                dst: dut_macs[0],
            },
            Macs {
                src: tester_macs[1],
                dst: dut_macs[1],
            },
            AddrRange::new(IpAddr::V4(CLIENTS), opts.clients),
            AddrRange::new(IpAddr::V4(SERVERS), opts.servers),
        );
        cfg.client_ports = PortRange::new(1024, 65536 - 1024);
        cfg.request_bytes = opts.request_bytes;
        cfg.response_bytes = opts.response_bytes;
        cfg.cps = opts.cps;
        cfg.duration = Duration::from_secs_f64(opts.conns as f64 / opts.cps);
        cfg.max_concurrent = opts.max_concurrent;
        cfg.hold = opts.hold;
        cfg.max_lag = opts.max_lag;
        let mut gen = Stateful::new(&cfg)?;
        let before = if opts.firewall {
            nft_counters(&d)?
        } else {
            HashMap::new()
        };
        log(&format!(
            "{proto}: {} connections at {}/s, {} → {} bytes",
            cfg.planned(),
            cfg.cps,
            cfg.request_bytes,
            cfg.response_bytes
        ));
        let tns = t.clone();
        let tester = std::thread::scope(|s| {
            s.spawn(|| -> Result<StatefulResult> {
                crate::rfc2544::enter_netns(&tns)?;
                let (mut a, mut b) = tester_ports()?;
                let mut mem = Arena::new(16384);
                gen.run(&mut mem, &mut a, &mut b)
            })
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the tester thread panicked")))
        })?;
        let dut = if opts.firewall {
            let after = nft_counters(&d)?;
            let delta = |k: &str| {
                after
                    .get(k)
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(before.get(k).copied().unwrap_or(0))
            };
            DutCounts {
                new_tcp: delta("new_tcp"),
                new_udp: delta("new_udp"),
                established: delta("established"),
                invalid: delta("invalid"),
                dropped: delta("dropped"),
                conntrack_entries: conntrack_entries(&d, proto)?,
            }
        } else {
            DutCounts::default()
        };
        runs.push(Run { tester, dut });
    }
    Ok(Report {
        dut: "linux".into(),
        firewall: opts.firewall,
        runs,
    })
}

/// The report as a text table.
pub fn table(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "DUT: {}{}",
        r.dut,
        if r.firewall {
            " (kernel forwarding, nftables + conntrack)"
        } else {
            " (kernel forwarding)"
        }
    );
    let _ = writeln!(
        s,
        "{:<5} {:>9} {:>9} {:>9} {:>7} {:>6} {:>6} {:>9} {:>7} {:>10} {:>10} {:>10}",
        "proto",
        "attempted",
        "completed",
        "failed",
        "reset",
        "open",
        "skip",
        "CPS",
        "concur",
        "p50 µs",
        "p99 µs",
        "conntrack"
    );
    for run in &r.runs {
        let t = &run.tester;
        let _ = writeln!(
            s,
            "{:<5} {:>9} {:>9} {:>9} {:>7} {:>6} {:>6} {:>9.0} {:>7} {:>10.1} {:>10.1} {:>10}",
            t.proto.map(|p| p.to_string()).unwrap_or_default(),
            t.attempted,
            t.completed,
            t.failed,
            t.reset,
            t.unfinished,
            t.skipped.total(),
            t.cps_achieved,
            t.concurrent_max,
            t.transaction_latency.p50_us,
            t.transaction_latency.p99_us,
            run.dut.conntrack_entries
        );
    }
    for run in &r.runs {
        let t = &run.tester;
        let f = &t.failures;
        if t.failed + t.reset > 0 {
            let _ = writeln!(
                s,
                "{}: failed: {} no SYN-ACK, {} no response, {} no FIN-ACK; {} reset ({} before the SYN-ACK)",
                t.proto.map(|p| p.to_string()).unwrap_or_default(),
                f.syn_timeout,
                f.response_timeout,
                f.close_timeout,
                t.reset,
                t.reset_before_established
            );
        }
        if r.firewall {
            let d = &run.dut;
            let _ = writeln!(
                s,
                "{}: DUT nftables packets: new TCP {} new UDP {} established {} invalid {} dropped {}",
                t.proto.map(|p| p.to_string()).unwrap_or_default(),
                d.new_tcp,
                d.new_udp,
                d.established,
                d.invalid,
                d.dropped
            );
        }
    }
    s
}

/// The stateful generator's two AF_PACKET ports, `ta` (clients) and `tb` (servers), in
/// the calling thread's namespace.
pub fn tester_ports() -> Result<(ports::AfPacket, ports::AfPacket)> {
    let opts = ports::AfPacketOptions {
        qdisc_bypass: true,
        ..Default::default()
    };
    let a = ports::AfPacket::open("ta", 0, opts.clone())
        .context("opening AF_PACKET on ta (tester, client side)")?;
    let b = ports::AfPacket::open("tb", 1, opts)
        .context("opening AF_PACKET on tb (tester, server side)")?;
    Ok((a, b))
}
