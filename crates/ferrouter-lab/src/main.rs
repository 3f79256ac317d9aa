//! `ferrouter-lab`: Ferrouter's test bench, apart from the router. The built-in lab
//! (`lab up|down|status|demo`), the benchmarks (`bench ...`: RFC 2544, pipeline, LPM,
//! convergence, BGP scale, route sync), the traffic generator (`tester`), synthetic MRT
//! tables (`mrt generate`) and the fast-path `demo`. It starts the `ferrouter` daemon
//! binary (found next to this one, on PATH, or given with `--ferrouter`) inside the
//! namespaces it builds; the daemon itself links none of this.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};

mod lab_demo;

#[derive(Parser)]
#[command(
    name = "ferrouter-lab",
    version,
    about = "Ferrouter's test bench: lab, benchmarks, traffic generator (the router itself is `ferrouter`)"
)]
struct Cli {
    /// The ferrouter daemon binary the lab and the benchmarks start (default: the one next
    /// to this binary, else `ferrouter` on PATH).
    #[arg(long, global = true, value_name = "PATH")]
    ferrouter: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

/// `--ferrouter`, set once from the command line.
static DAEMON: OnceLock<Option<PathBuf>> = OnceLock::new();

/// The ferrouter daemon binary: `--ferrouter`, else `ferrouter` next to this binary (a
/// cargo build puts both in target/<profile>/), else `ferrouter` on PATH.
fn ferrouter_bin() -> Result<PathBuf> {
    if let Some(Some(p)) = DAEMON.get() {
        if !p.is_file() {
            bail!("--ferrouter {}: no such file", p.display());
        }
        return Ok(p.clone());
    }
    let me = std::env::current_exe().context("locating this binary")?;
    let sibling = me.with_file_name("ferrouter");
    if sibling.is_file() {
        return Ok(sibling);
    }
    if let Some(p) = bench::dpdk::find_in_path("ferrouter") {
        return Ok(p);
    }
    bail!(
        "the ferrouter daemon binary is neither next to {} nor on PATH: build it (cargo build --release -p ferrouter) or pass --ferrouter PATH",
        me.display()
    )
}

#[derive(Subcommand)]
enum Cmd {
    /// Show the fast path at work: load an Internet-like FIB and forward every traffic
    /// profile through the full pipeline, printing rates and per-node counters.
    Demo {
        /// IPv4 routes.
        #[arg(long, default_value_t = 200_000)]
        routes4: usize,
        /// IPv6 routes.
        #[arg(long, default_value_t = 100_000)]
        routes6: usize,
        /// Seconds per profile.
        #[arg(long, default_value_t = 0.5)]
        duration: f64,
    },
    /// Benchmarks (release build; readable table, or one JSON object with --json).
    #[command(subcommand)]
    Bench(Bench),
    /// The built-in traffic generator on two ports: one trial (fixed rate, or as fast as the
    /// ports allow), with exact loss, reordering and latency accounting.
    Tester(TesterArgs),
    /// Network-namespace lab: hosts h1 and h2 routed through ferrouter.
    Lab {
        #[command(subcommand)]
        cmd: LabCmd,
        /// Name prefix of the lab's namespaces.
        #[arg(long, default_value = "fr", global = true)]
        name: String,
        /// Router workers (the lab's links get as many queues; more than 1 needs AF_XDP).
        #[arg(long, default_value_t = 1, global = true)]
        workers: usize,
        /// Port backend: auto, af_xdp or af_packet.
        #[arg(long, default_value = "auto", global = true)]
        backend: String,
        /// Make h2's link an 802.1Q trunk: a switch, and hosts on VLAN 100 (hv) and on
        /// QinQ 200/300 (hq) behind the router's sub-interfaces r2.100 and r2.q.
        #[arg(long, global = true)]
        vlans: bool,
        /// IP MTU of the lab's links (9000 for jumbo frames); default 1500.
        #[arg(long, global = true)]
        mtu: Option<u32>,
        /// Two ferrouter gateways with an IPsec tunnel between them instead (h1 - gw1 ═
        /// gw2 - h2, AES-128-GCM, keys in a root-only file): `lab up --ipsec`, `lab down
        /// --ipsec`.
        #[arg(long, global = true)]
        ipsec: bool,
    },
    /// Synthetic MRT files (TABLE_DUMP_V2) for BGP speakers to load (`gobgp mrt inject`).
    #[command(subcommand)]
    Mrt(MrtCmd),
}

#[derive(Subcommand)]
enum MrtCmd {
    /// Write DIR/peer1.mrt .. peerK.mrt: Internet-like IPv4/IPv6 tables, one per eBGP peer.
    Generate(MrtGenerateArgs),
}

#[derive(Args)]
struct MrtGenerateArgs {
    /// IPv4 prefixes per peer.
    #[arg(long, default_value_t = 1_000_000)]
    v4: usize,
    /// IPv6 prefixes per peer.
    #[arg(long, default_value_t = 200_000)]
    v6: usize,
    /// Peer files.
    #[arg(long, default_value_t = 1)]
    peers: usize,
    /// Every peer advertises the same prefixes (with different AS paths); default: disjoint sets.
    #[arg(long)]
    shared: bool,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// NEXT_HOP of the IPv4 routes (0.0.0.0: GoBGP puts its own address when it advertises).
    #[arg(long, default_value = "0.0.0.0")]
    next_hop4: std::net::Ipv4Addr,
    /// MP_REACH_NLRI next hop of the IPv6 routes (:: likewise).
    #[arg(long, default_value = "::")]
    next_hop6: std::net::Ipv6Addr,
    /// IPv6 next hops in RFC 6396's abbreviated MP_REACH_NLRI (GoBGP >= 3.17); the default
    /// full form is what GoBGP < 3.17 (Debian 12's 3.10) reads.
    #[arg(long)]
    abbreviated_mp_reach: bool,
    /// Output directory (created if missing).
    #[arg(long)]
    out: std::path::PathBuf,
}

#[derive(Args)]
struct TesterArgs {
    /// Port sending (and receiving the reverse direction): af_xdp:IFNAME, af_packet:IFNAME
    /// or memif:SOCKET[:client|server[:ID]].
    #[arg(long)]
    port0: String,
    /// Port receiving (and sending the reverse direction).
    #[arg(long)]
    port1: String,
    /// Destination MAC of frames sent on port0 (the DUT's port facing it).
    #[arg(long)]
    dst_mac0: String,
    /// Destination MAC of frames sent on port1.
    #[arg(long, default_value = "02:fe:00:00:d0:0b")]
    dst_mac1: String,
    /// Source addresses of direction 0 (one per family).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "198.18.0.2,2001:2:0:a::2"
    )]
    src0: Vec<String>,
    /// Destination prefixes of direction 0 (addresses inside routes toward port1).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "198.19.0.2/32,2001:2:0:b::2/128"
    )]
    dst0: Vec<String>,
    /// Source addresses of direction 1.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "198.19.0.2,2001:2:0:b::2"
    )]
    src1: Vec<String>,
    /// Destination prefixes of direction 1.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "198.18.0.2/32,2001:2:0:a::2/128"
    )]
    dst1: Vec<String>,
    /// Profile: ipv4-SIZE, ipv6-SIZE, imix1, imix2, imix3, eantc1, eantc2, simple.
    #[arg(long, default_value = "ipv4-64")]
    profile: String,
    /// Flows per direction.
    #[arg(long, default_value_t = 2)]
    flows: u32,
    /// Frames/s per direction (default: as fast as the ports allow).
    #[arg(long)]
    rate: Option<f64>,
    /// Seconds.
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    /// Both directions at once.
    #[arg(long)]
    bidirectional: bool,
    /// Enter this network namespace before opening the ports.
    #[arg(long)]
    netns: Option<String>,
    /// One JSON object on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum LabCmd {
    /// Build the namespaces and start ferrouter in the router namespace.
    Up,
    /// Stop ferrouter and delete the namespaces.
    Down,
    /// Show what exists.
    Status,
    /// Everything end to end: up, ping/ping6, TCP and UDP through the router, counters, down.
    Demo {
        /// Seconds of each traffic run.
        #[arg(long, default_value_t = 3)]
        seconds: u32,
    },
}

#[derive(Subcommand)]
enum Bench {
    /// Full pipeline from memory (pre-built frames, no I/O) over a large FIB.
    Pipeline(PipelineArgs),
    /// Cycles per LPM lookup, optionally next to DPDK's dpdk-test-fib on the same routes/keys.
    Lpm(LpmArgs),
    /// Cycles per classification of the firewall's rule classifier, optionally next to
    /// DPDK's rte_acl (dpdk-test-acl) on the same rules and packets.
    Acl(AclArgs),
    /// Connection tracking from memory, one core, no I/O: flows created and looked up per
    /// second, and bytes per flow, in tables of 1M and 10M flows.
    Conntrack(ConntrackArgs),
    /// NAT44 from memory, one core: source-NAT sessions made and packets translated per
    /// second in a table of 1M sessions, and bytes per session.
    Nat(NatArgs),
    /// The ESP ciphers (issue 26) from memory, one core: AES-GCM, ChaCha20-Poly1305 and
    /// AES-CBC with HMAC, seal and open per payload size, in aws-lc-rs, ring and RustCrypto,
    /// next to `openssl speed` on the same core.
    Crypto(CryptoArgs),
    /// IPsec (issue 26). From memory (the default): ESP encrypt and decrypt through the
    /// codec per algorithm, traffic profile and number of SAs (the packets spread over them
    /// round robin), in Mpps and Gbit/s, next to the raw aws-lc-rs AEAD on the same bytes
    /// in the same run; memory per SA (JSON field "inmemory"). Live (`--dut
    /// ferrouter,strongswan`, or `--live`): two gateways of each DUT with ESP between
    /// them, the RFC 2544 tester on their clear sides, the zero-loss throughput per profile
    /// and tunnel count and the ratio ferrouter ÷ strongSwan (JSON field "runs"); needs
    /// root, and for strongSwan the Debian packages charon-systemd, strongswan-swanctl,
    /// libcharon-extra-plugins and libstrongswan-standard-plugins.
    Ipsec(IpsecArgs),
    /// IKEv2 tunnel setup (issue 27): the IKE load generator's emulated initiators
    /// (IKE_SA_INIT + IKE_AUTH with a PSK and a child SA each, on one core) against each
    /// DUT as the responder on the other core — ferrouter's IKE daemon, strongSwan's
    /// charon (tuned for scale) — in network namespaces: setup rate, failures, time to N,
    /// SAs held, the responder's memory and CPU time per tunnel. Needs root; strongSwan
    /// needs charon-systemd and strongswan-swanctl.
    Ike(IkeArgs),
    /// Bulk add/delete of routes while a worker forwards.
    FibUpdate(FibUpdateArgs),
    /// RFC 2544 throughput, frame loss and latency against ferrouter, Linux kernel
    /// forwarding and dpdk-testpmd, each started for real in its own topology (veth
    /// namespaces, memif), with the built-in tester on one core and the DUT on the other.
    Rfc2544(Rfc2544Args),
    /// Stateful connections through Linux: the tester's emulated clients and servers open
    /// TCP connections (handshake, request, response, close) or UDP request/response
    /// pairs at a set rate through kernel forwarding with an nftables + conntrack stateful
    /// filter; counts of completed, failed and reset connections, rate, concurrency,
    /// latency, and what the firewall counted. Needs root, nftables and conntrack.
    Stateful(StatefulArgs),
    /// Ferrouter's firewall and NAT44 against Linux nftables + conntrack, in the RFC 2544
    /// veth topology, with the tester's stateful generator: the highest new-connection rate
    /// with at most 0.1 % failed (TCP, UDP), concurrent connections held, CPU time per
    /// connection, the same rules on both DUTs. Needs root, nftables and conntrack.
    Firewall(FirewallArgs),
    /// Ferrouter's QoS against Linux tc (issue 28), the same policy on both (DSCP
    /// classification and marking, EF strict priority, AF41 and best effort 40:60, a
    /// shaper; Linux: nftables marking, HTB with fq_codel leaves, or pfifo where the kernel
    /// has no fq_codel, and u32 filters), in the RFC 2544 veth topology. cost: zero-loss
    /// throughput per profile with QoS off and on (the shaper at the line rate).
    /// congestion: a shaper at --rate offered twice that in three classes: EF's loss and
    /// p99 latency, each class's delivered rate against its share, the shaper's accuracy.
    /// Needs root, iproute2 (tc) and nftables.
    Qos(QosArgs),
    /// Routing convergence by traffic, as the EANTC/6WIND reports measure it: two peers
    /// advertise the same routes to FRR, the primary preferred (bgp: BIRD, GoBGP or the
    /// tester's emulated BGP routers over eBGP, by local preference; ospf: BIRD or the tester's emulated OSPF routers
    /// originating OSPFv2 type-2 externals, by metric, IPv4 only); traffic goes to every route; the primary withdraws and re-advertises; time
    /// until traffic to every route has moved, split by what the kernel saw. Needs root, frr
    /// and bird2 (or gobgpd for --speaker gobgp).
    Convergence {
        /// Routes per peer, comma-separated (one run per count and DUT).
        #[arg(long, value_delimiter = ',', default_value = "100000")]
        routes: Vec<usize>,
        /// Routing protocol: bgp or ospf.
        #[arg(long, default_value = "bgp")]
        protocol: String,
        /// The BGP peers: bird (packed UPDATEs, as a tester's emulated routers send them),
        /// gobgp (MRT-loaded, per-prefix AS paths, one UPDATE per prefix: slow above
        /// ~10K routes) or tester (ferrouter's emulated BGP routers: the table encoded once,
        /// sent as a copy from memory, next to no CPU). OSPF peers: bird, or tester
        /// (ferrouter's emulated OSPF routers: no link-state database of their own, every
        /// LSA acknowledged at once, flooding paced by the router's acknowledgments; for 1M+
        /// externals).
        #[arg(long, default_value = "bird")]
        speaker: String,
        /// DUTs, comma-separated: ferrouter (FRR routes mirrored from the kernel),
        /// ferrouter-bgp (ferrouter's own BGP speaker, no FRR; bgp with bird or tester
        /// peers), linux.
        #[arg(long, value_delimiter = ',', default_value = "ferrouter,linux")]
        dut: Vec<String>,
        /// Traffic rate, frames/s; one pass over every route takes routes/rate seconds,
        /// the resolution of the times measured.
        #[arg(long, default_value_t = 200_000.0)]
        rate: f64,
        /// Send the traffic to a random sample of this many routes (the same for every
        /// DUT) instead of to all: one pass takes sample/rate seconds. The traffic times
        /// and the verification then cover the sample; the kernel's and the speaker's FIB
        /// times still cover every route.
        #[arg(long)]
        sample: Option<usize>,
        /// Give up a phase after this many seconds.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        /// Prefix of the lab's namespace names (several runs can coexist).
        #[arg(long, default_value = "fcv")]
        netns_prefix: String,
        /// Seed of the route generator.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// A full table learned from several eBGP peers (BIRD or GoBGP instances, or the
    /// tester's emulated BGP routers, each with its share of a generated table) through FRR, verified by traffic to a random sample of the
    /// prefixes; times, loss and memory. Needs root, frr and bird2 (or gobgpd).
    BgpScale {
        /// IPv4 routes in all, split evenly over the peers (disjoint prefixes).
        #[arg(long, default_value_t = 1_000_000)]
        routes: usize,
        /// IPv6 routes in all, likewise, on the same sessions (MP-BGP; --speaker tester).
        #[arg(long, default_value_t = 0)]
        routes6: usize,
        /// eBGP peers (1..=8).
        #[arg(long, default_value_t = 4)]
        peers: usize,
        /// The peers: bird (a static protocol exported over the session, packed UPDATEs),
        /// gobgp (loaded from MRT files, one UPDATE per prefix) or tester (ferrouter's
        /// emulated BGP routers: the share encoded once, sent as a copy from memory).
        #[arg(long, default_value = "bird")]
        speaker: String,
        /// DUTs, comma-separated: ferrouter (FRR routes mirrored from the kernel),
        /// ferrouter-bgp (ferrouter's own BGP speaker, no FRR; bird or tester peers), linux.
        #[arg(long, value_delimiter = ',', default_value = "ferrouter")]
        dut: Vec<String>,
        /// Prefixes the verification traffic goes to (a random sample).
        #[arg(long, default_value_t = 100_000)]
        sample: usize,
        /// Traffic rate, frames/s.
        #[arg(long, default_value_t = 200_000.0)]
        rate: f64,
        /// Give up learning after this many seconds.
        #[arg(long, default_value_t = 1800)]
        timeout: u64,
        /// Seed of the route generator.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Prefix of the lab's namespace names.
        #[arg(long, default_value = "fsc")]
        netns_prefix: String,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Prefixes per second through ferrouter's own BGP speaker into the FIB: two peers on
    /// loopback TCP send packed UPDATEs (learn, failover, failback); the speaker's CPU and
    /// memory per route.
    BgpSpeaker {
        /// IPv4 routes from each peer (the same prefixes).
        #[arg(long, default_value_t = 1_000_000)]
        routes: usize,
        /// Seed of the route generator.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Route changes per second from a netlink stream into the FIB through the daemon's
    /// parser and sync (add, replace, delete), and memory per route.
    RouteSync {
        /// IPv4 routes.
        #[arg(long, default_value_t = 1_000_000)]
        routes4: usize,
        /// IPv6 routes.
        #[arg(long, default_value_t = 500_000)]
        routes6: usize,
        /// Seed of the route generator.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
struct Rfc2544Args {
    /// DUTs, comma-separated: ferrouter, linux, testpmd.
    #[arg(long, value_delimiter = ',', default_value = "ferrouter,linux,testpmd")]
    dut: Vec<String>,
    /// Transports, comma-separated: veth (ferrouter on AF_XDP, linux), memif (ferrouter,
    /// testpmd). Default: every transport a chosen DUT supports.
    #[arg(long, value_delimiter = ',')]
    transport: Vec<String>,
    /// Profiles, comma-separated: ipv4-SIZE, ipv6-SIZE (64..9216; jumbo sizes put the links at MTU 9000), imix1, imix2, imix3,
    /// eantc1, eantc2, simple.
    #[arg(long, value_delimiter = ',', default_value = "ipv4-64")]
    profile: Vec<String>,
    /// IPv4 routes in the DUT's table (Internet-like prefix mix; traffic spreads over them).
    #[arg(long, default_value_t = 1_000_000)]
    routes4: usize,
    /// IPv6 routes in the DUT's table.
    #[arg(long, default_value_t = 10_000)]
    routes6: usize,
    /// Flows (distinct 5-tuples) per direction, 1..=16777216.
    #[arg(long, default_value_t = 1000)]
    flows: u32,
    /// Seconds per trial.
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    /// Seconds to wait for late frames after each trial.
    #[arg(long, default_value_t = 0.5)]
    drain: f64,
    /// Line rate per direction the offered loads refer to, Gbit/s (the reports: 10).
    #[arg(long, default_value_t = 10.0)]
    line_rate: f64,
    /// Throughput search resolution, percent: with --search mlr, the width of the final
    /// bounds relative to the upper one; with --search binary, of the line rate.
    #[arg(long, default_value_t = 0.1)]
    resolution: f64,
    /// Most trials of one throughput search (mlr: NDR and PDR together, underrun retries
    /// included).
    #[arg(long, default_value_t = 60)]
    max_trials: u32,
    /// Loss a passing search trial may have, percent of frames sent (0 = RFC 2544 zero
    /// loss, "NDR").
    #[arg(long, default_value_t = 0.0)]
    loss_tolerance: f64,
    /// Loss goal of the partial drop rate (PDR) the MLR search reports next to the NDR,
    /// percent of frames sent (0: no PDR).
    #[arg(long, default_value_t = 0.5)]
    pdr_loss: f64,
    /// Throughput search: mlr (NDR and PDR from repeated trials, short exploratory trials
    /// first, underruns retried; tolerates noise) or binary (RFC 2544, one trial per rate).
    #[arg(long, default_value = "mlr", value_parser = ["mlr", "binary"])]
    search: String,
    /// Offered loads of the frame-loss test, percent of the line rate.
    #[arg(long, value_delimiter = ',', default_value = "25,50,75,100")]
    loads: Vec<f64>,
    /// Traffic in both directions at once (routes split between the two sides).
    #[arg(long)]
    bidirectional: bool,
    /// IPv6 share of dual-stack profiles, percent (imix2 default 50).
    #[arg(long)]
    ipv6_ratio: Option<u8>,
    /// Namespace/file prefix of the bench topology.
    #[arg(long, default_value = "frb")]
    name: String,
    /// Print one JSON object on stdout instead of the tables.
    #[arg(long)]
    json: bool,
    /// Repetitions: each transport's DUTs run in turn this many times (A B A B ...); the
    /// report gives each DUT's median, spread and CV (a warning above 10 %) and the
    /// pairwise ratios' median.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=100))]
    repeat: u16,
    /// CPU cost per packet: after the search, one trial at this load (percent of the line
    /// rate; it must lie below every DUT's limit) measuring ferrouter's busy worker time and
    /// the kernel's time per packet. 0 skips it.
    #[arg(long, default_value_t = 1.5)]
    cost_load: f64,
    /// Write an SVG chart comparing the DUTs' throughput.
    #[arg(long)]
    chart: Option<std::path::PathBuf>,
}

#[derive(Args)]
struct PipelineArgs {
    /// IPv4 routes (Internet-like prefix-length mix).
    #[arg(long, default_value_t = 1_000_000)]
    routes4: usize,
    /// IPv6 routes.
    #[arg(long, default_value_t = 500_000)]
    routes6: usize,
    /// Worker counts to measure, comma-separated (e.g. 1,2).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    workers: Vec<usize>,
    /// Profiles, comma-separated: ipv4-64, ipv6-78, imix1, imix2, imix3 (default all).
    #[arg(long, value_delimiter = ',')]
    profile: Vec<String>,
    /// Seconds per profile and worker count.
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    /// Seed of the route and traffic generators.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Fixed work instead of --duration: passes over each worker's 4096-frame pool
    /// (repeatable instruction counts under valgrind --tool=callgrind).
    #[arg(long)]
    passes: Option<u64>,
    /// Also measure each cell with a no-op feature on the ip4-unicast and ip6-unicast arcs
    /// of every interface (the cost of the feature-arc machinery), interleaved with runs
    /// without it.
    #[arg(long)]
    noop_feature: bool,
    /// Also measure each cell with the firewall's ingress filter on both interfaces: N
    /// generated ACL-like rules, all accepting (the cost of classifying), interleaved with
    /// runs without it.
    #[arg(long, value_name = "N")]
    firewall_rules: Option<usize>,
    /// With --firewall-rules: connection tracking on, every packet looked up in its
    /// worker's flow table.
    #[arg(long, requires = "firewall_rules")]
    stateful: bool,
    /// With --stateful and several workers: two-way traffic (each second frame the reply
    /// of the one before), measured with the flows steered to the worker that owns them
    /// (`ip4-handoff`) and without.
    #[arg(long, requires = "stateful")]
    handoff: bool,
    /// Also measure each cell with NAT44 on (every IPv4 packet looked up and translated,
    /// its checksums updated), interleaved with runs without it.
    #[arg(long)]
    nat: bool,
    /// Also measure each cell with `bench qos`'s policy on both interfaces (DSCP
    /// classification and re-marking, three class queues, a port shaper that never binds),
    /// interleaved with runs without it; the frames carry the bench's DSCPs in every cell.
    #[arg(long)]
    qos: bool,
    /// Also measure each cell with that policy and N pipes (1 to 1,024) on its output,
    /// every packet looked up and queued in a pipe whose rate never binds: what the pipes
    /// add to the `qos` cell.
    #[arg(long, value_name = "N")]
    qos_pipes: Option<usize>,
    /// Print one JSON object on stdout instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct AclArgs {
    /// Run dpdk-test-acl (Debian dpdk-dev) on the same rules and traces.
    #[arg(long)]
    compare_dpdk: bool,
    /// Rules (ACL-like, first match wins).
    #[arg(long, default_value_t = 10_000)]
    rules: usize,
    /// Traces (packets) per pass.
    #[arg(long, default_value_t = 100_000)]
    traces: usize,
    /// Passes per run.
    #[arg(long, default_value_t = 10)]
    iters: usize,
    /// dpdk-test-acl's --alg (scalar, sse, avx2, avx512x16); its own default if unset.
    #[arg(long)]
    dpdk_alg: Option<String>,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct NatArgs {
    /// Table sizes (sessions), comma-separated: one run each.
    #[arg(long, value_delimiter = ',', default_value = "1000000")]
    sessions: Vec<usize>,
    /// Packets translated per run.
    #[arg(long, default_value_t = 10_000_000)]
    packets: usize,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct CryptoArgs {
    /// Payload sizes in bytes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "64,512,1400")]
    sizes: Vec<usize>,
    /// CPU seconds per figure (one crate, algorithm, size and direction).
    #[arg(long, default_value_t = 0.3)]
    secs: f64,
    /// Algorithms, comma-separated (default: all): aes-128-gcm, aes-256-gcm,
    /// chacha20-poly1305, aes-128-cbc+hmac-sha1-96, aes-128-cbc+hmac-sha256-128,
    /// aes-256-cbc+hmac-sha512-256.
    #[arg(long, value_delimiter = ',')]
    algs: Vec<String>,
    /// Leave out the `openssl speed` reference.
    #[arg(long)]
    no_openssl: bool,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ConntrackArgs {
    /// Table sizes (flows), comma-separated: one run each.
    #[arg(long, value_delimiter = ',', default_value = "1000000,10000000")]
    entries: Vec<usize>,
    /// Lookups of established flows per run.
    #[arg(long, default_value_t = 10_000_000)]
    lookups: usize,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct StatefulArgs {
    /// Protocols, comma-separated: one run each (tcp, udp).
    #[arg(long, value_delimiter = ',', default_value = "tcp,udp")]
    proto: Vec<String>,
    /// Connections per run.
    #[arg(long, default_value_t = 2000)]
    conns: u64,
    /// New connections per second.
    #[arg(long, default_value_t = 1000.0)]
    cps: f64,
    /// Request bytes (TCP up to 65536, UDP up to 1472).
    #[arg(long, default_value_t = 64)]
    request: u32,
    /// Response bytes (same limits).
    #[arg(long, default_value_t = 1024)]
    response: u32,
    /// Most connections open at once.
    #[arg(long, default_value_t = 10_000)]
    concurrent: u32,
    /// Milliseconds each connection stays open after its response.
    #[arg(long, default_value_t = 0)]
    hold_ms: u64,
    /// Client addresses (from 198.18.128.1).
    #[arg(long, default_value_t = 16)]
    clients: u32,
    /// Server addresses (from 198.19.128.1).
    #[arg(long, default_value_t = 4)]
    servers: u32,
    /// Plain kernel forwarding, without the nftables stateful filter.
    #[arg(long)]
    no_firewall: bool,
    /// Name prefix of the namespaces (PREFIX-t, PREFIX-d).
    #[arg(long, default_value = "fst")]
    netns_prefix: String,
    /// One JSON object on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct FirewallArgs {
    /// DUTs, comma-separated: ferrouter, linux.
    #[arg(long, value_delimiter = ',', default_value = "ferrouter,linux")]
    dut: Vec<String>,
    /// Modes, comma-separated: stateless (filters only), stateful (conntrack; the outside
    /// accepts only replies), nat44 (stateful, and the clients masqueraded out of the server
    /// side; not with --throughput). Default: stateful, with --throughput stateless,stateful.
    #[arg(long, value_delimiter = ',')]
    mode: Vec<String>,
    /// Rule counts, comma-separated, each a separate run: N-1 generated ACL rules that never
    /// match the bench's traffic, then the one that accepts it. Default: 1, with
    /// --throughput 1,1000,10000.
    #[arg(long, value_delimiter = ',')]
    rules: Vec<usize>,
    /// Measure zero-loss throughput (the RFC 2544 bench's NDR search, both directions,
    /// conversations the DUT sees replied) instead of connection rates: plain forwarding
    /// first, then each mode and rule count, each DUT on each transport.
    #[arg(long)]
    throughput: bool,
    /// --throughput: traffic profiles, comma-separated (IPv4: imix1, ipv4-<size>).
    #[arg(long, value_delimiter = ',', default_value = "imix1")]
    profile: Vec<String>,
    /// --throughput: transports, comma-separated (veth, memif; Linux runs on veth only).
    /// Default: both. The connection-rate part runs on veth only.
    #[arg(long, value_delimiter = ',')]
    transport: Vec<String>,
    /// --throughput: no plain-forwarding baseline rows.
    #[arg(long)]
    no_baseline: bool,
    /// --throughput: flows (conversations: one client, this many servers), 1..=4094.
    #[arg(long, default_value_t = 1000)]
    flows: u32,
    /// --throughput: seconds of the search's final trials (the first ones are shorter).
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    /// --throughput: line rate per direction the search starts from, Gbit/s.
    #[arg(long, default_value_t = 10.0)]
    line_rate: f64,
    /// --throughput: the search stops when its bounds are this close, percent.
    #[arg(long, default_value_t = 1.0)]
    resolution: f64,
    /// Protocols, comma-separated: one search each (tcp, udp).
    #[arg(long, value_delimiter = ',', default_value = "tcp,udp")]
    proto: Vec<String>,
    /// TCP connections held open at once in the concurrency test (0: skip it).
    #[arg(long, default_value_t = 20_000)]
    conns: u32,
    /// A fixed connection rate: one trial at it (and a confirmation) instead of the search.
    #[arg(long)]
    cps: Option<f64>,
    /// The search's first rate (it doubles from there until a trial fails).
    #[arg(long, default_value_t = 2000.0)]
    cps_start: f64,
    /// The search's ceiling.
    #[arg(long, default_value_t = 500_000.0)]
    cps_max: f64,
    /// Seconds of a search trial.
    #[arg(long, default_value_t = 1.0)]
    trial: f64,
    /// Seconds of the confirmation trial.
    #[arg(long, default_value_t = 2.0)]
    confirm: f64,
    /// Most search trials per protocol (default 14), with --throughput per run (default
    /// 40).
    #[arg(long)]
    max_trials: Option<u32>,
    /// Rate of the CPU-cost trial, connections/s (0: skip it): the CPU per connection is
    /// measured there, net of a baseline trial at one connection a second.
    #[arg(long, default_value_t = 2000.0)]
    cost_cps: f64,
    /// Seconds of the CPU-cost trial.
    #[arg(long, default_value_t = 5.0)]
    cost_duration: f64,
    /// Name prefix of the namespaces (PREFIX-t, PREFIX-d).
    #[arg(long, default_value = "ffw")]
    netns_prefix: String,
    /// Seed of the generated rules.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// One JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// Write an SVG chart of the results: throughput by mode and rules with --throughput,
    /// else the connection rate by mode and protocol; one colour per DUT and transport.
    #[arg(long, value_name = "FILE")]
    chart: Option<std::path::PathBuf>,
}

#[derive(Args)]
struct QosArgs {
    /// DUTs, comma-separated: ferrouter, linux.
    #[arg(long, value_delimiter = ',', default_value = "ferrouter,linux")]
    dut: Vec<String>,
    /// Tests, comma-separated: cost (NDR with QoS off and on), congestion (the shaper at
    /// --rate offered --oversubscription times that).
    #[arg(long, value_delimiter = ',', default_value = "cost,congestion")]
    test: Vec<String>,
    /// cost: traffic profiles, comma-separated (IPv4: ipv4-<size>, imix1).
    #[arg(long, value_delimiter = ',', default_value = "ipv4-64,imix1")]
    profile: Vec<String>,
    /// cost: transports, comma-separated (veth; ferrouter also memif). Default: veth.
    #[arg(long, value_delimiter = ',')]
    transport: Vec<String>,
    /// Flows (UDP source ports), 1..=60000.
    #[arg(long, default_value_t = 1000)]
    flows: u32,
    /// cost: seconds of the search's final trials (the first ones are shorter).
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    /// cost: line rate per direction, Gbit/s: where the search starts, and the shaper's
    /// rate with QoS on.
    #[arg(long, default_value_t = 10.0)]
    line_rate: f64,
    /// cost: the search stops when its bounds are this close, percent.
    #[arg(long, default_value_t = 1.0)]
    resolution: f64,
    /// cost: most trials of one search.
    #[arg(long, default_value_t = 40)]
    max_trials: u32,
    /// Repetitions: qos-off and qos-on alternate, and so do the DUTs; the cost and the
    /// ratios are medians of the paired ratios.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// congestion: the shaper's rate R, Mbit/s (Ethernet frames without FCS).
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// congestion: the offered load, times R.
    #[arg(long, default_value_t = 2.0)]
    oversubscription: f64,
    /// congestion: the traffic profile (IPv4).
    #[arg(long, default_value = "imix1")]
    congestion_profile: String,
    /// congestion: seconds of the trial.
    #[arg(long, default_value_t = 5.0)]
    congestion_duration: f64,
    /// Ferrouter's shaper burst, milliseconds of the shaper's rate (its policy's `burst`,
    /// rate × MS / 8000 bytes, 9,216 bytes to 100 MB): of --rate in the congestion test, of
    /// --line-rate in the cost test's qos-on runs. Left out: no `burst` in the policy,
    /// ferrouter's default (2 ms of the rate, at least 15,000 bytes). Linux's HTB keeps
    /// tc's default burst.
    #[arg(long, value_name = "MS")]
    shaper_burst_ms: Option<f64>,
    /// cost: after each search, a trial at this percent of the line rate measures each
    /// DUT's CPU time per packet (ferrouter: its worker's busy time; Linux: the kernel's);
    /// where the tester bounds the NDRs, the cost target is judged on it. 0: no such trial.
    /// The default loads the DUT near the tester's ceiling (on veth above it: the tester
    /// then sends what it can), where vectors fill as near the NDR.
    #[arg(long, value_name = "PCT", default_value_t = 25.0)]
    cost_load: f64,
    /// Name prefix of the namespaces (PREFIX-t, PREFIX-d).
    #[arg(long, default_value = "fqs")]
    netns_prefix: String,
    /// Seed of the frame-size shuffle.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// One JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// Write an SVG chart: the NDR with QoS off and on per profile (without the cost
    /// test: the delivered rate per class under congestion); one colour per DUT.
    #[arg(long, value_name = "FILE")]
    chart: Option<std::path::PathBuf>,
}

/// `bench ipsec`: from memory (ESP through the codec per algorithm and SA count, JSON field
/// "inmemory"), or live (two gateways per DUT under the RFC 2544 tester, JSON field
/// "runs"), selected by `--dut` or `--live`. Each half has its own flags.
#[derive(Args)]
struct IpsecArgs {
    /// From memory: algorithms, comma-separated: aes-128-gcm, aes-256-gcm, chacha20-poly1305,
    /// aes-128-cbc+hmac-sha1-96, aes-128-cbc+hmac-sha2-256-128, aes-256-cbc+hmac-sha2-512-256.
    #[arg(long, default_value = bench::ipsec::DEFAULT_ALGS)]
    algs: String,
    /// From memory: numbers of SAs, comma-separated (1 to 1000000): one cell each.
    #[arg(long, default_value = bench::ipsec::DEFAULT_SAS)]
    sas: String,
    /// From memory: traffic profiles, comma-separated (the tester's: ipv4-SIZE, ipv6-SIZE, imix1, ...;
    /// sizes are Ethernet frames with FCS, the IP packet 18 bytes shorter).
    #[arg(long, default_value = bench::ipsec::DEFAULT_PROFILES)]
    profiles: String,
    /// From memory: timed CPU seconds per cell (algorithm, SA count, profile), ESP and raw together.
    #[arg(long, default_value = bench::ipsec::DEFAULT_SECONDS)]
    seconds: String,
    /// From memory: prefetch each packet's SA this many batches ahead (0: never, to see what
    /// prefetching gains; the data plane's ESP nodes use the default).
    #[arg(long, default_value_t = bench::ipsec::DEFAULT_PREFETCH)]
    prefetch: usize,
    /// The live benchmark with the default DUTs (ferrouter,strongswan).
    #[arg(long)]
    live: bool,
    /// Live: DUTs, comma-separated (ferrouter, strongswan), alternated within each
    /// repetition.
    #[arg(long, value_delimiter = ',')]
    dut: Vec<String>,
    /// Live: transport between the tester and the gateways (veth).
    #[arg(long, default_value = "veth")]
    transport: String,
    /// Live: traffic profiles, comma-separated (IPv4: ipv4-<size>, imix1).
    #[arg(long, value_delimiter = ',', default_value = "ipv4-64,ipv4-1400,imix1")]
    profile: Vec<String>,
    /// Live: tunnel counts, comma-separated (1..=10000), each a separate set of runs: N
    /// tunnels (ferrouter: tunnel interfaces, strongSwan: CHILD_SAs) with an SA pair each,
    /// the tester's destinations split over them.
    #[arg(long, value_delimiter = ',', default_value = "1,100,1000")]
    tunnels: Vec<usize>,
    /// Live: the ESP algorithm (aes-128-gcm, aes-256-gcm, chacha20-poly1305).
    #[arg(long, default_value = "aes-128-gcm")]
    alg: String,
    /// Live: repetitions; the DUTs alternate within each (A B A B ...).
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Live: seconds of the search's final trials (the first ones are shorter).
    #[arg(long, default_value_t = 1.0)]
    duration: f64,
    /// Live: line rate per direction the search starts from, Gbit/s.
    #[arg(long, default_value_t = 10.0)]
    line_rate: f64,
    /// Live: the search stops when its bounds are this close, percent.
    #[arg(long, default_value_t = 1.0)]
    resolution: f64,
    /// Live: most trials of one search (NDR and PDR together).
    #[arg(long, default_value_t = 40)]
    max_trials: u32,
    /// Live: the PDR's loss goal, percent (0: NDR only).
    #[arg(long, default_value_t = 0.5)]
    pdr_loss: f64,
    /// Live: flows per direction (default: 4 per tunnel, at least 64).
    #[arg(long)]
    flows: Option<u32>,
    /// Live: traffic both ways (each gateway encrypts and decrypts).
    #[arg(long)]
    bidirectional: bool,
    /// Live: load of the CPU-cost trial, percent of the line rate (0: none).
    #[arg(long, default_value_t = 0.1)]
    cost_load: f64,
    /// Live: name prefix of the namespaces (PREFIX-t, PREFIX-gw1, PREFIX-gw2, PREFIX-wire).
    #[arg(long, default_value = "fib")]
    netns_prefix: String,
    /// One JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// Live: write an SVG bar chart of the NDRs by profile and tunnel count.
    #[arg(long, value_name = "FILE")]
    chart: Option<std::path::PathBuf>,
}

#[derive(Args)]
struct LpmArgs {
    /// Run dpdk-test-fib (Debian dpdk-dev) on the same routes and keys.
    #[arg(long)]
    compare_dpdk: bool,
    /// IPv4 routes.
    #[arg(long, default_value_t = 1_000_000)]
    routes4: usize,
    /// IPv6 routes.
    #[arg(long, default_value_t = 500_000)]
    routes6: usize,
    /// Lookup keys per pass.
    #[arg(long, default_value_t = 1 << 20)]
    lookups: usize,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct FibUpdateArgs {
    /// Routes added then deleted.
    #[arg(long, default_value_t = 1_000_000)]
    routes: usize,
    /// Routes present throughout (the forwarded traffic's destinations).
    #[arg(long, default_value_t = 100_000)]
    base_routes: usize,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

/// `bench ike`.
#[derive(Args)]
struct IkeArgs {
    /// DUTs as the responder, comma-separated: ferrouter, strongswan (one run each).
    #[arg(long, value_delimiter = ',', default_value = "ferrouter,strongswan")]
    dut: Vec<String>,
    /// Tunnels (emulated initiators), each an IKE SA and a child SA.
    #[arg(long, default_value_t = 1000)]
    tunnels: usize,
    /// Authentication: psk, or ecdsa (ECDSA P-256 certificates under the lab's root CA).
    #[arg(long, default_value = "psk")]
    auth: String,
    /// DH group: 31 (curve25519), 19 (ecp256), 20 (ecp384), 14 (modp2048).
    #[arg(long, default_value_t = 31)]
    dh: u16,
    /// New initiations per second (default: as fast as the responder answers, within
    /// --window).
    #[arg(long)]
    rate: Option<f64>,
    /// Exchanges outstanding at most (below the responders' cookie thresholds).
    #[arg(long, default_value_t = 256)]
    window: usize,
    /// Source addresses of the generator (192.0.2.10 and up, 1..=240).
    #[arg(long, default_value_t = 64)]
    sources: usize,
    /// UDP sockets over them (initiators are spread round robin; several share a socket
    /// when there are more tunnels than sockets).
    #[arg(long, default_value_t = 256)]
    sockets: usize,
    /// After the setup, hold the tunnels this many seconds (answering DPD) and count
    /// the responder's SAs again.
    #[arg(long, default_value_t = 0.0)]
    hold: f64,
    /// The responders' DPD interval, seconds (1-3600): N tunnels cost N ÷ dpd DPD
    /// exchanges per second, so a million tunnels want a long one.
    #[arg(long, default_value_t = 10)]
    dpd: u64,
    /// After the setup, this many tunnels (spread over all) ping a host behind the
    /// ferrouter responder through their child SAs, ESP in UDP (0: none; not with
    /// strongSwan, whose responder is not set up to route).
    #[arg(long, default_value_t = 0)]
    traffic: usize,
    /// The setup phase at most, seconds.
    #[arg(long, default_value_t = 300.0)]
    timeout: f64,
    /// Prefix of the lab's namespace names.
    #[arg(long, default_value = "fik")]
    netns_prefix: String,
    /// JSON output: {"runs":[...]}.
    #[arg(long)]
    json: bool,
}

fn ike_bench(a: IkeArgs) -> Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let opts = lab::ikebench::IkeBenchOptions {
        duts: a.dut.clone(),
        tunnels: a.tunnels,
        auth: a.auth.clone(),
        dh: a.dh,
        rate: a.rate,
        window: a.window.max(1),
        sources: a.sources,
        sockets: a.sockets.max(1),
        hold: if a.hold.is_finite() && (0.0..=3600.0).contains(&a.hold) {
            Duration::from_secs_f64(a.hold)
        } else {
            bail!("--hold must be between 0 and 3600 seconds, got {}", a.hold)
        },
        dpd: if (1..=3600).contains(&a.dpd) {
            Duration::from_secs(a.dpd)
        } else {
            bail!("--dpd must be between 1 and 3600 seconds, got {}", a.dpd)
        },
        traffic: a.traffic.min(a.tunnels),
        timeout: if a.timeout.is_finite() && a.timeout > 0.0 && a.timeout <= 3600.0 {
            Duration::from_secs_f64(a.timeout)
        } else {
            bail!(
                "--timeout must be between 0 and 3600 seconds, got {}",
                a.timeout
            )
        },
        prefix: a.netns_prefix.clone(),
        ferrouter: if a.dut.iter().any(|d| d == "ferrouter") {
            ferrouter_bin()?
        } else {
            PathBuf::new()
        },
        dut_core: if cores > 1 { 1 } else { 0 },
        generator_core: 0,
    };
    let (dir, names) = lab::ikebench::namespaces(&opts.prefix);
    lab::tear_down_namespaces_on_signal(dir, names)?;
    let mut p = progress(a.json);
    let mut machine = lab::ipsecbench::Machine::probe();
    if a.dut.iter().any(|d| d == "strongswan") {
        machine.strongswan = std::process::Command::new("swanctl")
            .arg("--version")
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    }
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let runs = lab::ikebench::run(&opts, &mut p)?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({ "machine": machine, "loadavg": loadavg.trim(), "runs": runs })
        );
    } else {
        println!(
            "{} (nproc {}), load average {}",
            machine.cpu_model,
            machine.nproc,
            loadavg.trim()
        );
        print!("{}", lab::ikebench::format_table(&runs));
    }
    Ok(())
}

fn progress(json: bool) -> impl FnMut(&str) {
    move |m: &str| {
        if !json || std::env::var_os("FERROUTER_PROGRESS").is_some() {
            eprintln!("... {m}");
        }
    }
}

fn seconds(s: f64) -> Result<Duration> {
    if !(s.is_finite() && s > 0.0 && s <= 3600.0) {
        bail!("--duration must be between 0 and 3600 seconds, got {s}");
    }
    Ok(Duration::from_secs_f64(s))
}

fn pipeline_options(a: &PipelineArgs) -> Result<bench::pipeline::Options> {
    let profiles = if a.profile.is_empty() {
        bench::pipeline::PROFILES.iter().collect()
    } else {
        a.profile
            .iter()
            .map(|p| bench::pipeline::profile(p))
            .collect::<Result<Vec<_>>>()?
    };
    if a.workers.is_empty() || a.workers.contains(&0) {
        bail!("--workers takes positive counts, e.g. --workers 1,2");
    }
    Ok(bench::pipeline::Options {
        routes4: a.routes4,
        routes6: a.routes6,
        workers: a.workers.clone(),
        profiles,
        duration: seconds(a.duration)?,
        seed: a.seed,
        passes: a.passes,
        noop_feature: a.noop_feature,
        firewall_rules: a.firewall_rules,
        stateful: a.stateful,
        handoff: a.handoff,
        nat: a.nat,
        qos: a.qos,
        qos_pipes: a.qos_pipes,
        ..Default::default()
    })
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let _ = DAEMON.set(cli.ferrouter);
    match cli.cmd {
        Cmd::Demo {
            routes4,
            routes6,
            duration,
        } => demo(routes4, routes6, duration),
        Cmd::Lab {
            cmd,
            name,
            backend,
            ipsec: true,
            ..
        } => ipsec_lab_cmd(cmd, &name, &backend),
        Cmd::Lab {
            cmd,
            name,
            workers,
            backend,
            vlans,
            mtu,
            ..
        } => lab_cmd(cmd, &name, workers, &backend, (vlans, mtu)),
        Cmd::Bench(Bench::Pipeline(a)) => {
            let opts = pipeline_options(&a)?;
            let r = bench::pipeline::run(&opts, progress(a.json))?;
            if a.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                bench::pipeline::print_table(&r);
            }
            Ok(())
        }
        Cmd::Bench(Bench::Lpm(a)) => {
            let opts = bench::lpm::LpmOptions {
                routes4: a.routes4,
                routes6: a.routes6,
                lookups: a.lookups,
                compare_dpdk: a.compare_dpdk,
                seed: a.seed,
                ..Default::default()
            };
            let r = bench::lpm::run(&opts).context("LPM benchmark")?;
            if a.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                bench::lpm::print_table(&r);
            }
            Ok(())
        }
        Cmd::Bench(Bench::Acl(a)) => {
            let opts = bench::acl::AclOptions {
                rules: a.rules,
                traces: a.traces,
                iters: a.iters,
                seed: a.seed,
                compare_dpdk: a.compare_dpdk,
                dpdk_alg: a.dpdk_alg,
            };
            let r = bench::acl::run(&opts, progress(a.json)).context("ACL benchmark")?;
            if a.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                print!("{}", bench::acl::format_table(&r));
            }
            Ok(())
        }
        Cmd::Bench(Bench::Conntrack(a)) => {
            let opts = bench::conntrack::ConntrackOptions {
                entries: a.entries,
                lookups: a.lookups,
                seed: a.seed,
            };
            let r = bench::conntrack::run(&opts, progress(a.json))
                .context("connection tracking benchmark")?;
            if a.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                print!("{}", bench::conntrack::format_table(&r));
            }
            Ok(())
        }
        Cmd::Bench(Bench::Crypto(a)) => {
            let opts = bench::crypto::CryptoOptions {
                sizes: a.sizes,
                secs: a.secs,
                openssl: !a.no_openssl,
                algs: if a.algs.is_empty() {
                    bench::crypto::Alg::ALL.to_vec()
                } else {
                    a.algs
                        .iter()
                        .map(|s| bench::crypto::Alg::parse(s))
                        .collect::<Result<_>>()?
                },
            };
            let r = bench::crypto::run(&opts, progress(a.json)).context("crypto benchmark")?;
            if a.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                print!("{}", bench::crypto::format_table(&r));
            }
            Ok(())
        }
        Cmd::Bench(Bench::Nat(a)) => {
            let opts = bench::nat::NatOptions {
                sessions: a.sessions,
                packets: a.packets,
                seed: a.seed,
            };
            let r = bench::nat::run(&opts, progress(a.json)).context("NAT benchmark")?;
            if a.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                print!("{}", bench::nat::format_table(&r));
            }
            Ok(())
        }
        Cmd::Bench(Bench::Rfc2544(a)) => rfc2544(a),
        Cmd::Bench(Bench::Ipsec(a)) => ipsec_bench(a),
        Cmd::Bench(Bench::Ike(a)) => ike_bench(a),
        Cmd::Bench(Bench::Stateful(a)) => stateful(a),
        Cmd::Bench(Bench::Firewall(a)) => firewall_bench(a),
        Cmd::Bench(Bench::Qos(a)) => qos_bench(a),
        Cmd::Bench(Bench::BgpSpeaker { routes, seed, json }) => {
            if routes > 10_000_000 {
                bail!("--routes is limited to 10M");
            }
            let opts = lab::speaker_bench::Options { routes, seed };
            let r = lab::speaker_bench::run(&opts, &|m| eprintln!("... {m}"))?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                print!("{}", lab::speaker_bench::table(&r));
            }
            Ok(())
        }
        Cmd::Bench(Bench::RouteSync {
            routes4,
            routes6,
            seed,
            json,
        }) => {
            if routes4 > 10_000_000 || routes6 > 4_000_000 {
                bail!("--routes4 is limited to 10M and --routes6 to 4M");
            }
            let opts = lab::route_sync::Options {
                routes4,
                routes6,
                seed,
            };
            let r = lab::route_sync::run(&opts, &|m| eprintln!("... {m}"))?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                print!("{}", lab::route_sync::table(&r));
            }
            if r.fib_errors != 0 || r.skipped != 0 {
                bail!(
                    "{} FIB errors and {} skipped messages",
                    r.fib_errors,
                    r.skipped
                );
            }
            Ok(())
        }
        Cmd::Bench(Bench::Convergence {
            routes,
            protocol,
            speaker,
            dut,
            rate,
            sample,
            timeout,
            netns_prefix,
            seed,
            json,
        }) => {
            if netns_prefix.is_empty()
                || netns_prefix.len() > 8
                || !netns_prefix.chars().all(|c| c.is_ascii_alphanumeric())
            {
                bail!("--netns-prefix: 1 to 8 letters or digits");
            }
            if routes.iter().any(|&n| n == 0 || n > 10_000_000) {
                bail!("--routes: each count must be 1..=10000000");
            }
            if !(rate.is_finite() && rate > 0.0 && rate <= 10e6) {
                bail!("--rate must be in (0, 10M] frames/s");
            }
            if sample == Some(0) {
                bail!("--sample must be at least 1");
            }
            let opts = lab::convergence::Options {
                routes,
                protocol: protocol.parse()?,
                speaker: speaker.parse()?,
                duts: dut.iter().map(|d| d.parse()).collect::<Result<_>>()?,
                rate_pps: rate,
                sample,
                phase_timeout: std::time::Duration::from_secs(timeout),
                seed,
                prefix: netns_prefix,
                ferrouter: ferrouter_bin()?,
            };
            lab::tear_down_on_signal(&opts.prefix)?;
            let r = lab::convergence::run(&opts, &|m| eprintln!("... {m}"));
            lab::wait_if_tearing_down();
            let r = r?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                print!("{}", lab::convergence::table(&r));
            }
            Ok(())
        }
        Cmd::Bench(Bench::BgpScale {
            routes,
            routes6,
            peers,
            speaker,
            dut,
            sample,
            rate,
            timeout,
            seed,
            netns_prefix,
            json,
        }) => {
            if routes == 0 || routes > 10_000_000 || sample == 0 || sample > 16_000_000 {
                bail!("--routes must be 1..=10000000 and --sample 1..=16000000");
            }
            if routes6 > 2_000_000 {
                bail!("--routes6 must be 0..=2000000");
            }
            if !(rate.is_finite() && rate > 0.0 && rate <= 10e6) {
                bail!("--rate must be in (0, 10M] frames/s");
            }
            if netns_prefix.is_empty()
                || netns_prefix.len() > 8
                || !netns_prefix.chars().all(|c| c.is_ascii_alphanumeric())
            {
                bail!("--netns-prefix: 1 to 8 letters or digits");
            }
            let opts = lab::convergence::scale::ScaleOptions {
                routes,
                routes6,
                peers,
                speaker: speaker.parse()?,
                duts: dut.iter().map(|d| d.parse()).collect::<Result<_>>()?,
                sample,
                rate_pps: rate,
                timeout: std::time::Duration::from_secs(timeout),
                seed,
                prefix: netns_prefix,
                ferrouter: ferrouter_bin()?,
            };
            lab::tear_down_on_signal(&opts.prefix)?;
            let r = lab::convergence::scale::run(&opts, &|m| eprintln!("... {m}"));
            lab::wait_if_tearing_down();
            let r = r?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                print!("{}", lab::convergence::scale::table(&r));
            }
            if r.runs.iter().any(|x| x.loss > 0) {
                bail!("traffic to the sampled prefixes was lost");
            }
            Ok(())
        }
        Cmd::Tester(a) => tester_cmd(a),
        Cmd::Mrt(MrtCmd::Generate(a)) => mrt_generate(a),
        Cmd::Bench(Bench::FibUpdate(a)) => {
            let opts = bench::fib_update::Options {
                routes: a.routes,
                base_routes: a.base_routes,
                seed: a.seed,
            };
            let r = bench::fib_update::run(&opts, progress(a.json))?;
            if a.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                bench::fib_update::print_table(&r);
            }
            Ok(())
        }
    }
}

fn tester_cmd(a: TesterArgs) -> Result<()> {
    use lab::rfc2544::standalone::{run, Standalone};
    let mac =
        |s: &str| control::config::parse_mac(s).with_context(|| format!("{s:?} is not a MAC"));
    let addrs = |v: &[String]| -> Result<Vec<std::net::IpAddr>> {
        v.iter()
            .map(|s| {
                s.parse()
                    .with_context(|| format!("{s:?} is not an address"))
            })
            .collect()
    };
    let prefixes = |v: &[String]| -> Result<Vec<tester::Prefix>> {
        v.iter()
            .map(|s| s.parse().with_context(|| format!("{s:?} is not a prefix")))
            .collect()
    };
    if !(a.duration.is_finite() && a.duration > 0.0 && a.duration <= 3600.0) {
        bail!(
            "--duration must be between 0 and 3600 seconds, got {}",
            a.duration
        );
    }
    if a.rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
        bail!("--rate must be a positive number of frames/s");
    }
    let s = Standalone {
        ports: [a.port0.clone(), a.port1.clone()],
        dst_macs: [mac(&a.dst_mac0)?, mac(&a.dst_mac1)?],
        src_macs: [None, None],
        src: [addrs(&a.src0)?, addrs(&a.src1)?],
        dst: [prefixes(&a.dst0)?, prefixes(&a.dst1)?],
        profile: a.profile.clone(),
        flows: a.flows,
        rate_pps: a.rate,
        duration: a.duration,
        bidirectional: a.bidirectional,
    };
    if let Some(ns) = &a.netns {
        lab::rfc2544::enter_netns(ns)?;
    }
    let r = run(&s)?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!(
            "sent {} ({:.3} Mpps, {:.3} Gbit/s L1)  received {} ({:.3} Mpps)  lost {} ({:.4}%)  reordered {}  duplicates {}  foreign {}",
            r.tx, r.tx_pps / 1e6, r.tx_gbps_l1, r.rx, r.rx_pps / 1e6, r.lost, r.loss_percent(), r.reordered, r.duplicates, r.foreign
        );
        let l = &r.latency;
        println!(
            "latency µs: min {:.1} avg {:.1} max {:.1} p99 {:.1} ({} samples)",
            l.min_us, l.avg_us, l.max_us, l.p99_us, l.samples
        );
    }
    Ok(())
}

fn stateful(a: StatefulArgs) -> Result<()> {
    let protos = a
        .proto
        .iter()
        .map(|p| p.parse())
        .collect::<Result<Vec<tester::Proto>>>()?;
    if !(a.cps.is_finite() && a.cps > 0.0 && a.cps <= 10_000_000.0) {
        bail!("--cps must be in (0, 10000000], got {}", a.cps);
    }
    if a.conns == 0 || a.conns as f64 / a.cps > 3600.0 {
        bail!("--conns must be positive and take at most an hour at --cps");
    }
    let opts = lab::stateful::Options {
        prefix: a.netns_prefix,
        protos,
        conns: a.conns,
        cps: a.cps,
        request_bytes: a.request,
        response_bytes: a.response,
        max_concurrent: a.concurrent,
        hold: Duration::from_millis(a.hold_ms),
        clients: a.clients,
        servers: a.servers,
        firewall: !a.no_firewall,
        ..lab::stateful::Options::default()
    };
    let r = lab::stateful::run(&opts, &|m| eprintln!("... {m}"))?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        print!("{}", lab::stateful::table(&r));
    }
    if r.runs.iter().any(|x| x.tester.failed + x.tester.reset > 0) {
        bail!("some connections failed or were reset");
    }
    Ok(())
}

fn firewall_bench(a: FirewallArgs) -> Result<()> {
    use lab::rfc2544::dut::DutKind;
    let protos = a
        .proto
        .iter()
        .map(|p| p.parse())
        .collect::<Result<Vec<tester::Proto>>>()?;
    for (name, v) in [
        ("--cps-start", a.cps_start),
        ("--cps-max", a.cps_max),
        ("--cps", a.cps.unwrap_or(1.0)),
    ] {
        if !(v.is_finite() && v > 0.0 && v <= 10_000_000.0) {
            bail!("{name} must be in (0, 10000000], got {v}");
        }
    }
    for (name, v) in [
        ("--trial", a.trial),
        ("--confirm", a.confirm),
        ("--cost-duration", a.cost_duration),
    ] {
        if !(v.is_finite() && v > 0.0 && v <= 600.0) {
            bail!("{name} must be between 0 and 600 seconds, got {v}");
        }
    }
    if !(a.cost_cps.is_finite() && (0.0..=1_000_000.0).contains(&a.cost_cps)) {
        bail!("--cost-cps must be in [0, 1000000], got {}", a.cost_cps);
    }
    let rules = match (a.rules.is_empty(), a.throughput) {
        (false, _) => a.rules.clone(),
        (true, false) => vec![1],
        (true, true) => vec![1, 1000, 10_000],
    };
    if rules.iter().any(|&n| n == 0 || n > 100_000) {
        bail!("--rules must be 1..=100000 each, got {rules:?}");
    }
    let modes = match (a.mode.is_empty(), a.throughput) {
        (false, _) => a
            .mode
            .iter()
            .map(|m| lab::fwbench::Mode::parse(m))
            .collect::<Result<Vec<_>>>()?,
        (true, false) => vec![lab::fwbench::Mode::Stateful],
        (true, true) => vec![lab::fwbench::Mode::Stateless, lab::fwbench::Mode::Stateful],
    };
    let duts = a
        .dut
        .iter()
        .map(|d| DutKind::parse(d))
        .collect::<Result<Vec<_>>>()?;
    let transports = a
        .transport
        .iter()
        .map(|t| lab::rfc2544::dut::Transport::parse(t))
        .collect::<Result<Vec<_>>>()?;
    let log = |m: &str| eprintln!("... {m}");
    let run = || -> Result<lab::fwbench::Report> {
        Ok(if a.throughput {
            check_search_args(a.duration, a.line_rate, a.resolution)?;
            if a.flows == 0 || a.flows > 4094 {
                bail!(
                    "--flows must be 1..=4094 with --throughput (the servers' /20), got {}",
                    a.flows
                );
            }
            let max_trials = a.max_trials.unwrap_or(40);
            if max_trials == 0 || max_trials > 500 {
                bail!("--max-trials must be 1..=500");
            }
            if dataplane::worker::cores().len() < 2 {
                bail!("the throughput search needs 2 cores: one for the tester, one for the DUT");
            }
            let opts = lab::fwbench::ThroughputOptions {
                prefix: a.netns_prefix.clone(),
                duts,
                transports,
                modes,
                rules,
                profiles: a.profile.clone(),
                baseline: !a.no_baseline,
                search: lab::rfc2544::SearchOptions {
                    flows: a.flows,
                    duration: a.duration,
                    line_rate_gbps: a.line_rate,
                    resolution_pct: a.resolution,
                    max_trials,
                },
                ferrouter_bin: ferrouter_bin()?,
                seed: a.seed,
                ..lab::fwbench::ThroughputOptions::default()
            };
            lab::fwbench::throughput(&opts, &log)?
        } else {
            if transports
                .iter()
                .any(|t| *t != lab::rfc2544::dut::Transport::Veth)
            {
                bail!("the connection-rate part runs on veth only (the stateful generator's AF_PACKET ports); memif is for --throughput");
            }
            let mut report = lab::fwbench::Report::default();
            for &mode in &modes {
                for &n in &rules {
                    let opts = lab::fwbench::Options {
                        prefix: a.netns_prefix.clone(),
                        duts: duts.clone(),
                        mode,
                        rules: n,
                        protos: protos.clone(),
                        cps: a.cps,
                        cps_start: a.cps_start,
                        cps_max: a.cps_max,
                        max_trials: a.max_trials.unwrap_or(14),
                        trial_s: a.trial,
                        confirm_s: a.confirm,
                        conns: a.conns,
                        cost_cps: a.cost_cps,
                        cost_s: a.cost_duration,
                        ferrouter_bin: ferrouter_bin()?,
                        seed: a.seed,
                        ..lab::fwbench::Options::default()
                    };
                    report.runs.extend(lab::fwbench::run(&opts, &log)?.runs);
                }
            }
            report
        })
    };
    // No teardown on a signal (not built for this bench): its guards remove its
    // namespaces when it returns.
    run_bench(|| Ok(()), run, a.json, a.chart.as_deref())
}

fn qos_bench(a: QosArgs) -> Result<()> {
    use lab::rfc2544::dut::{DutKind, Transport};
    check_search_args(a.duration, a.line_rate, a.resolution)?;
    if a.max_trials == 0 || a.max_trials > 500 {
        bail!("--max-trials must be 1..=500");
    }
    if !(a.rate.is_finite() && (1.0..=10_000.0).contains(&a.rate)) {
        bail!("--rate is Mbit/s, 1 to 10000, got {}", a.rate);
    }
    let rate_bps = (a.rate * 1e6).round() as u64;
    if !(a.cost_load.is_finite() && (0.0..=100.0).contains(&a.cost_load)) {
        bail!(
            "--cost-load is a percent of the line rate in [0, 100] (0: no cost trial), got {}",
            a.cost_load
        );
    }
    if let Some(ms) = a.shaper_burst_ms {
        lab::qosbench::shaper_burst_bytes(rate_bps, ms)?;
        if a.test.iter().any(|t| t == "cost") {
            lab::qosbench::shaper_burst_bytes((a.line_rate * 1e9).round() as u64, ms)
                .context("--shaper-burst-ms of --line-rate (the cost test's shaper)")?;
        }
    }
    if dataplane::worker::cores().len() < 2 {
        bail!("the QoS bench needs 2 cores: one for the tester, one for the DUT");
    }
    let opts = lab::qosbench::Options {
        prefix: a.netns_prefix.clone(),
        duts: a
            .dut
            .iter()
            .map(|d| DutKind::parse(d))
            .collect::<Result<_>>()?,
        tests: a
            .test
            .iter()
            .map(|t| lab::qosbench::Test::parse(t))
            .collect::<Result<_>>()?,
        transports: a
            .transport
            .iter()
            .map(|t| Transport::parse(t))
            .collect::<Result<_>>()?,
        profiles: a.profile.clone(),
        search: lab::rfc2544::SearchOptions {
            flows: a.flows,
            duration: a.duration,
            line_rate_gbps: a.line_rate,
            resolution_pct: a.resolution,
            max_trials: a.max_trials,
        },
        repeat: a.repeat,
        rate_bps,
        oversubscription: a.oversubscription,
        congestion_profile: a.congestion_profile.clone(),
        congestion_s: a.congestion_duration,
        shaper_burst_ms: a.shaper_burst_ms,
        ferrouter_bin: ferrouter_bin()?,
        seed: a.seed,
        cost_load_pct: a.cost_load,
        ..lab::qosbench::Options::default()
    };
    lab::qosbench::check(&opts)?;
    run_bench(
        || lab::qosbench::tear_down_on_signal(&opts.prefix),
        || lab::qosbench::run(&opts, &|m| eprintln!("... {m}")),
        a.json,
        a.chart.as_deref(),
    )
}

/// `bench ipsec`: which half runs.
enum IpsecMode {
    /// ESP through the codec from memory, one core (the default).
    InMemory,
    /// Two gateways per DUT, live, under the RFC 2544 tester (`--dut`, `--live`).
    Live,
}

fn ipsec_bench(a: IpsecArgs) -> Result<()> {
    let mode = if a.live || !a.dut.is_empty() {
        IpsecMode::Live
    } else {
        IpsecMode::InMemory
    };
    match mode {
        IpsecMode::InMemory => ipsec_inmemory(a),
        IpsecMode::Live => ipsec_live(a),
    }
}

fn ipsec_inmemory(a: IpsecArgs) -> Result<()> {
    let opts = bench::ipsec::IpsecOptions {
        algs: bench::ipsec::parse_algs(&a.algs)?,
        sas: bench::ipsec::parse_sas(&a.sas)?,
        profiles: bench::ipsec::parse_profiles(&a.profiles)?,
        secs: bench::ipsec::parse_seconds(&a.seconds)?,
        prefetch: a.prefetch,
    };
    let r = bench::ipsec::run(&opts, progress(a.json)).context("ESP benchmark")?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        print!("{}", bench::ipsec::format_table(&r));
    }
    Ok(())
}

fn ipsec_live(a: IpsecArgs) -> Result<()> {
    use lab::ipsecbench::{Dut, Options};
    match a.transport.as_str() {
        "veth" => {}
        "memif" => bail!("--transport memif: not yet (the strongSwan pair runs on kernel interfaces only, and ferrouter's memif gateways need a memif WAN link); veth"),
        t => bail!("unknown transport {t:?} (veth)"),
    }
    check_search_args(a.duration, a.line_rate, a.resolution)?;
    if a.repeat == 0 || a.repeat > 100 {
        bail!("--repeat must be 1..=100");
    }
    if a.max_trials == 0 || a.max_trials > 500 {
        bail!("--max-trials must be 1..=500");
    }
    if !(a.pdr_loss.is_finite() && (0.0..=50.0).contains(&a.pdr_loss)) {
        bail!("--pdr-loss must be 0..=50 percent");
    }
    if !(a.cost_load.is_finite() && (0.0..=100.0).contains(&a.cost_load)) {
        bail!("--cost-load must be 0..=100 percent");
    }
    let duts = if a.dut.is_empty() {
        vec![Dut::Ferrouter, Dut::Strongswan]
    } else {
        a.dut
            .iter()
            .map(|d| Dut::parse(d))
            .collect::<Result<Vec<_>>>()?
    };
    if dataplane::worker::cores().len() < 2 {
        bail!("the IPsec bench needs 2 cores: one for the tester, one for the gateways");
    }
    let opts = Options {
        duts,
        profiles: a.profile.clone(),
        tunnels: a.tunnels.clone(),
        alg: a.alg.clone(),
        repeat: a.repeat,
        duration: a.duration,
        line_rate_gbps: a.line_rate,
        resolution_pct: a.resolution,
        max_trials: a.max_trials,
        pdr_loss_pct: a.pdr_loss,
        flows: a.flows,
        bidirectional: a.bidirectional,
        cost_load_pct: a.cost_load,
        prefix: a.netns_prefix.clone(),
        ferrouter_bin: ferrouter_bin()?,
        ..Options::default()
    };
    lab::ipsecbench::check(&opts)?;
    lab::ipsecbench::preconditions(&opts.duts)?;
    run_bench(
        || lab::ipsecbench::tear_down_on_signal(&opts.prefix),
        || lab::ipsecbench::run(&opts, &|m| eprintln!("... {m}")),
        a.json,
        a.chart.as_deref(),
    )
}

/// What a live bench gives back: JSON, a table, an SVG chart.
trait BenchReport: serde::Serialize {
    fn table(&self) -> String;
    fn chart(&self, path: &Path) -> Result<()>;
}

impl BenchReport for lab::qosbench::Report {
    fn table(&self) -> String {
        lab::qosbench::Report::table(self)
    }
    fn chart(&self, path: &Path) -> Result<()> {
        lab::qosbench::Report::chart(self, path)
    }
}

impl BenchReport for lab::ipsecbench::Report {
    fn table(&self) -> String {
        lab::ipsecbench::Report::table(self)
    }
    fn chart(&self, path: &Path) -> Result<()> {
        lab::ipsecbench::Report::chart(self, path)
    }
}

impl BenchReport for lab::fwbench::Report {
    fn table(&self) -> String {
        lab::fwbench::table(self)
    }
    fn chart(&self, path: &Path) -> Result<()> {
        lab::fwbench::Report::chart(self, path)
    }
}

/// How a live bench ends (`bench qos`, `bench ipsec --live`, `bench firewall`): torn down
/// if the process is interrupted while `run` runs (`tear_down` installs that), its report
/// on stdout (JSON with `--json`, else a table) and its chart where `--chart` says.
fn run_bench<R: BenchReport>(
    tear_down: impl FnOnce() -> Result<()>,
    run: impl FnOnce() -> Result<R>,
    json: bool,
    chart: Option<&Path>,
) -> Result<()> {
    tear_down()?;
    let r = run();
    lab::wait_if_tearing_down();
    let r = r?;
    if json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        print!("{}", r.table());
    }
    if let Some(path) = chart {
        r.chart(path)?;
        eprintln!("... chart written to {}", path.display());
    }
    Ok(())
}

/// The RFC 2544 search's settings, as `bench rfc2544` and `bench firewall --throughput`
/// take them: `--duration` (s), `--line-rate` (Gbit/s), `--resolution` (%).
fn check_search_args(duration: f64, line_rate: f64, resolution: f64) -> Result<()> {
    for (name, v, max, unit) in [
        ("--duration", duration, 600.0, "seconds"),
        ("--line-rate", line_rate, 1000.0, "Gbit/s"),
        ("--resolution", resolution, 50.0, "percent"),
    ] {
        if !(v.is_finite() && v > 0.0 && v <= max) {
            bail!("{name} must be between 0 and {max} {unit}, got {v}");
        }
    }
    Ok(())
}

fn rfc2544(a: Rfc2544Args) -> Result<()> {
    use lab::rfc2544::dut::{DutKind, Transport};
    check_search_args(a.duration, a.line_rate, a.resolution)?;
    if !(a.drain.is_finite() && (0.0..=10.0).contains(&a.drain)) {
        bail!("--drain must be between 0 and 10 seconds, got {}", a.drain);
    }
    if a.loads
        .iter()
        .any(|l| !(l.is_finite() && *l > 0.0 && *l <= 100.0))
    {
        bail!("--loads are percents in (0, 100], got {:?}", a.loads);
    }
    if !(0.0..=100.0).contains(&a.cost_load) {
        bail!(
            "--cost-load is a percent of the line rate in [0, 100] (0: no cost trial), got {}",
            a.cost_load
        );
    }
    if a.flows == 0 || a.flows > 1 << 24 {
        bail!("--flows must be 1..=16777216, got {}", a.flows);
    }
    if a.ipv6_ratio.is_some_and(|r| r > 100) {
        bail!("--ipv6-ratio is a percent (0..=100)");
    }
    if a.routes4 > 10_000_000 || a.routes6 > 2_000_000 {
        bail!("--routes4 is limited to 10M and --routes6 to 2M");
    }
    if !(a.loss_tolerance.is_finite() && (0.0..=50.0).contains(&a.loss_tolerance)) {
        bail!(
            "--loss-tolerance is a percent in [0, 50], got {}",
            a.loss_tolerance
        );
    }
    if !(a.pdr_loss.is_finite() && (0.0..=50.0).contains(&a.pdr_loss)) {
        bail!("--pdr-loss is a percent in [0, 50], got {}", a.pdr_loss);
    }
    if a.max_trials == 0 || a.max_trials > 500 {
        bail!("--max-trials must be 1..=500");
    }
    if dataplane::worker::cores().len() < 2 {
        bail!("the RFC 2544 bench needs 2 cores: one for the tester, one for the DUT");
    }
    let opts = lab::rfc2544::Options {
        duts: a
            .dut
            .iter()
            .map(|d| DutKind::parse(d))
            .collect::<Result<_>>()?,
        transports: a
            .transport
            .iter()
            .map(|t| Transport::parse(t))
            .collect::<Result<_>>()?,
        profiles: a.profile.clone(),
        routes4: a.routes4,
        routes6: a.routes6,
        flows: a.flows,
        duration: a.duration,
        drain: a.drain,
        line_rate_gbps: a.line_rate,
        resolution_pct: a.resolution,
        max_search_trials: a.max_trials,
        loss_tolerance_pct: a.loss_tolerance,
        pdr_loss_pct: a.pdr_loss,
        mlr: a.search == "mlr",
        loads: a.loads.clone(),
        bidirectional: a.bidirectional,
        ipv6_percent: a.ipv6_ratio,
        prefix: a.name.clone(),
        ferrouter_bin: ferrouter_bin()?,
        repeat: usize::from(a.repeat),
        cost_load_pct: a.cost_load,
        ..Default::default()
    };
    let log = |m: &str| eprintln!("... {m}");
    let r = lab::rfc2544::run(&opts, &log)?;
    if let Some(path) = &a.chart {
        r.chart(path)?;
        eprintln!("... chart written to {}", path.display());
    }
    if a.json {
        println!("{}", r.json());
    } else {
        print!("{}", r.table());
    }
    Ok(())
}

/// `lab up|down|status --ipsec`: two gateways with a tunnel between them.
fn ipsec_lab_cmd(cmd: LabCmd, name: &str, backend: &str) -> Result<()> {
    let mut l = lab::ipsec::IpsecLab::new(name);
    l.backend = backend.to_string();
    match cmd {
        LabCmd::Up => {
            l.up(&ferrouter_bin()?)?;
            println!(
                "IPsec lab {name} is up: {} - {} = ESP = {} - {}",
                l.h1(),
                l.gw(1),
                l.gw(2),
                l.h2()
            );
            println!("try: ip netns exec {} ping {}", l.h1(), lab::ipsec::H2);
            println!(
                "     ferrouter show ipsec --socket {}",
                l.socket(1).display()
            );
            Ok(())
        }
        LabCmd::Down => {
            l.down();
            println!("IPsec lab {name} is down");
            Ok(())
        }
        LabCmd::Status => {
            print_namespaces(&l.existing());
            for n in [1, 2] {
                match control::api::request(&l.socket(n), "ipsec", None) {
                    Ok(v) => print!("gw{n}:\n{}", control::render::render(&v)),
                    Err(_) => println!("gw{n}: not running"),
                }
            }
            Ok(())
        }
        LabCmd::Demo { .. } => bail!("lab demo --ipsec: not available; use lab up --ipsec"),
    }
}

/// `lab status`'s first line: the lab's namespaces that exist.
fn print_namespaces(ns: &[String]) {
    println!(
        "namespaces: {}",
        if ns.is_empty() {
            "none".into()
        } else {
            ns.join(" ")
        }
    );
}

fn lab_cmd(
    cmd: LabCmd,
    name: &str,
    workers: usize,
    backend: &str,
    (vlans, mtu): (bool, Option<u32>),
) -> Result<()> {
    if !["auto", "af_xdp", "af_packet"].contains(&backend) {
        bail!("--backend {backend:?}: expected auto, af_xdp or af_packet");
    }
    if workers == 0 || workers > 16 {
        bail!("--workers {workers}: expected 1..=16");
    }
    let mut lab = lab::Lab::new(name);
    lab.workers = workers;
    lab.backend = backend.to_string();
    lab.vlans = vlans;
    lab.mtu = mtu;
    if vlans && backend == "af_xdp" {
        bail!("--vlans with --backend af_xdp: VLAN sub-interfaces need AF_PACKET on their parent (AF_XDP cannot see tags kept in packet metadata); use auto or af_packet");
    }
    let me = ferrouter_bin()?;
    match cmd {
        LabCmd::Up => {
            lab.up(&me)?;
            println!(
                "lab {name} is up: namespaces {:?}; control socket {}",
                lab.existing(),
                lab.socket().display()
            );
            println!("try: ip netns exec {} ping {}", lab.h1(), lab::H2_V4);
            if vlans {
                println!(
                    "     ip netns exec {} ping {}   (VLAN 100; {} is on QinQ 200/300)",
                    lab.h1(),
                    lab::vlan::HV_V4,
                    lab::vlan::HQ_V4
                );
            }
            println!(
                "     ferrouter show counters --socket {}",
                lab.socket().display()
            );
            Ok(())
        }
        LabCmd::Down => {
            lab.down();
            println!("lab {name} is down");
            Ok(())
        }
        LabCmd::Status => {
            print_namespaces(&lab.existing());
            match control::api::request(&lab.socket(), "interfaces", None) {
                Ok(v) => print!("{}", control::render::render(&v)),
                Err(_) => println!("ferrouter: not running"),
            }
            Ok(())
        }
        LabCmd::Demo { seconds } => lab_demo::lab_demo(&lab, &me, seconds),
    }
}

fn demo(routes4: usize, routes6: usize, duration: f64) -> Result<()> {
    println!("Ferrouter demo: the fast path forwarding from memory (no ports yet).");
    println!("Every profile runs through ethernet-input -> ip4/ip6-input -> lookup -> rewrite -> port-tx");
    println!("over a FIB of {routes4} IPv4 + {routes6} IPv6 generated Internet-like routes.\n");
    let workers = if dataplane::worker::cores().len() >= 2 {
        vec![1, 2]
    } else {
        vec![1]
    };
    let opts = bench::pipeline::Options {
        routes4,
        routes6,
        workers,
        duration: seconds(duration)?,
        pool: 8 * 1024,
        ..Default::default()
    };
    let r = bench::pipeline::run(&opts, progress(false))?;
    bench::pipeline::print_table(&r);
    let lost: u64 = r.results.iter().map(|c| c.not_forwarded).sum();
    println!("\npackets not forwarded: {lost}");
    if lost != 0 {
        bail!("{lost} packets were not forwarded although every destination has a route");
    }
    println!(
        "For the full-scale figures: ferrouter-lab bench pipeline --workers 1,2 (see README)."
    );
    Ok(())
}

fn mrt_generate(a: MrtGenerateArgs) -> Result<()> {
    use bench::mrt::{peer_tables, write_table_with, MpReach, MrtConfig, MAX_PEERS};
    if a.peers == 0 || a.peers > MAX_PEERS {
        bail!("--peers must be 1..={MAX_PEERS}");
    }
    let cfg = MrtConfig {
        v4: a.v4,
        v6: a.v6,
        peers: a.peers,
        shared: a.shared,
        seed: a.seed,
    };
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    for (i, t) in peer_tables(&cfg).iter().enumerate() {
        let path = a.out.join(format!("peer{}.mrt", i + 1));
        let f =
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let mp = if a.abbreviated_mp_reach {
            MpReach::Abbreviated
        } else {
            MpReach::Full
        };
        let (n4, n6) = write_table_with(&cfg, i, t, a.next_hop4, a.next_hop6, mp, f)
            .with_context(|| format!("writing {}", path.display()))?;
        let bytes = std::fs::metadata(&path)?.len();
        println!("{} v4 {n4} v6 {n6} bytes {bytes}", path.display());
    }
    Ok(())
}
