//! `ferrouter-lab bench bgp-scale`: a full table learned from several eBGP peers and verified by
//! traffic, as the reports do (6M routes from 1–4 peers for 6WIND).
//!
//! The peers are BIRD 2 or GoBGP instances ([`Speaker`]) in h2, one per address
//! (198.51.100.2, .3, ...), each with its own share of a generated Internet-like table
//! (disjoint prefixes): BIRD's as a static protocol enabled at the start, GoBGP's loaded
//! from MRT. FRR learns them all and installs them in the router's kernel; ferrouter (or
//! Linux) forwards.
//! With `routes6`, the tester's routers also carry IPv6 unicast over the same sessions
//! (MP-BGP, next hop each peer's IPv6 address in h2), as the reports' tables hold IPv6
//! routes beside the IPv4 ones, and the traffic's sample covers both families.
//! Timed: until the kernel holds every route, until ferrouter's FIB does, and until traffic
//! to a random sample of the prefixes arrives at h2. Then exact passes over the sample
//! measure loss, and the memory of the FIB, ferrouter and FRR is reported.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use super::kernel::{monotonic_ns, KernelWatch};
use super::traffic::Traffic;
use super::{bgp, rss_of, Dut, DutMemory, Speaker};
use crate::daemons::{Bird, Daemons, GoBgp};
use crate::{Guard, Lab};

/// What to run.
#[derive(Clone, Debug)]
pub struct ScaleOptions {
    /// IPv4 routes in all (split evenly over the peers).
    pub routes: usize,
    /// IPv6 routes in all, likewise (the tester's routers only).
    pub routes6: usize,
    /// eBGP peers (1..=8).
    pub peers: usize,
    /// What the peers are.
    pub speaker: Speaker,
    /// DUTs.
    pub duts: Vec<Dut>,
    /// Prefixes the traffic goes to (a random sample; all when larger than the table).
    pub sample: usize,
    /// Traffic rate, frames/s.
    pub rate_pps: f64,
    /// Give up learning after this long.
    pub timeout: Duration,
    /// Route generator seed.
    pub seed: u64,
    /// Namespace prefix.
    pub prefix: String,
    /// The ferrouter binary.
    pub ferrouter: PathBuf,
}

/// One run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ScaleRun {
    /// Which router forwarded.
    pub dut: Dut,
    /// Peers.
    pub peers: usize,
    /// What the peers were.
    pub speaker: Speaker,
    /// IPv4 routes in all.
    pub routes: usize,
    /// IPv6 routes in all.
    #[serde(default)]
    pub routes6: usize,
    /// From loading the peers until the kernel held every route (none for ferrouter-bgp:
    /// its routes never enter the kernel).
    pub kernel_done_s: Option<f64>,
    /// Until ferrouter's FIB held every route (ferrouter DUTs only).
    pub fib_done_s: Option<f64>,
    /// Until traffic to every sampled prefix arrived.
    pub learn_s: f64,
    /// Prefixes the traffic went to.
    pub sample: usize,
    /// IPv6 prefixes among them.
    #[serde(default)]
    pub sample6: usize,
    /// Frames sent in the verification (two passes over the sample).
    pub verify_tx: u64,
    /// Frames lost in it.
    pub loss: u64,
    /// Sampled prefixes that lost a frame.
    pub routes_with_loss: usize,
    /// Who dropped the frames lost in the verification.
    #[serde(flatten)]
    pub loss_cause: super::LossCause,
    /// ferrouter's memory once everything is learned.
    #[serde(flatten)]
    pub memory: DutMemory,
    /// FRR's bgpd and zebra resident memory, bytes.
    pub frr_rss_bytes: u64,
}

/// All runs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ScaleReport {
    /// In the order run.
    pub runs: Vec<ScaleRun>,
}

/// The running peers.
enum Peers {
    /// GoBGP instances, loaded from MRT files.
    Gobgp(Vec<GoBgp>),
    /// BIRD instances, each with its share as a disabled static protocol.
    Bird(Vec<Bird>),
    /// The tester's emulated BGP routers, each with its share encoded up front.
    Tester(Vec<::bgp::peer::Peer>),
}

/// Run `f` on every item at once, one thread each; the first error.
fn at_once<T: Send>(
    items: impl Iterator<Item = T>,
    f: impl Fn(T) -> Result<()> + Sync,
) -> Result<()> {
    std::thread::scope(|s| {
        let f = &f;
        let hs: Vec<_> = items.map(|x| s.spawn(move || f(x))).collect();
        for h in hs {
            h.join()
                .map_err(|_| anyhow::anyhow!("a peer-loading thread panicked"))??;
        }
        Ok(())
    })
}

/// The address of peer `i` in h2 (198.51.100.2 + i).
fn peer_addr(i: usize) -> Ipv4Addr {
    let base: Ipv4Addr = crate::H2_V4.parse().expect("constant");
    Ipv4Addr::from(u32::from(base) + i as u32)
}

/// The IPv6 address of peer `i` in h2 (2001:db8:2::2 + i), its routes' next hop.
fn peer_addr6(i: usize) -> Ipv6Addr {
    let base: Ipv6Addr = crate::H2_V6.parse().expect("constant");
    Ipv6Addr::from(u128::from(base) + i as u128)
}

/// FRR with one eBGP neighbour per peer address, advertising nothing back.
/// `passive`: bgpd waits for the peers to connect (BIRD and GoBGP do); the tester's
/// routers only listen, so bgpd connects to them. `v6`: the sessions carry IPv6 unicast too.
fn frr_config(peers: usize, passive: bool, v6: bool) -> String {
    let mut s = format!(
        "frr defaults datacenter\nhostname ferrouter-dut\n!\nrouter bgp {}\n bgp router-id {}\n timers bgp 30 90\n \
         no bgp ebgp-requires-policy\n no bgp default ipv4-unicast\n",
        bgp::AS_DUT,
        crate::R2_V4
    );
    for i in 0..peers {
        s.push_str(&format!(
            " neighbor {a} remote-as {asn}\n neighbor {a} timers connect 1\n",
            a = peer_addr(i),
            asn = 65010 + i
        ));
        if passive {
            s.push_str(&format!(" neighbor {} passive\n", peer_addr(i)));
        }
    }
    let families: &[&str] = if v6 { &["ipv4", "ipv6"] } else { &["ipv4"] };
    for af in families {
        s.push_str(&format!(" !\n address-family {af} unicast\n"));
        for i in 0..peers {
            s.push_str(&format!(
                "  neighbor {a} activate\n  neighbor {a} route-map ADVERTISE-NOTHING out\n",
                a = peer_addr(i)
            ));
        }
        s.push_str(" exit-address-family\n");
    }
    s.push_str("!\nroute-map ADVERTISE-NOTHING deny 10\n!\n");
    s
}

/// The `[bgp]` section for ferrouter's own speaker: one eBGP neighbour per peer address
/// (the peers' ASes as in [`frr_config`]); `v6`: IPv6 unicast on the same sessions.
fn speaker_config(peers: usize, v6: bool) -> String {
    let mut s = format!(
        "\n[bgp]\nasn = {}\nrouter_id = \"{}\"\nconnect_retry = 1\n",
        bgp::AS_DUT,
        crate::R2_V4
    );
    for i in 0..peers {
        s.push_str(&format!(
            "\n[[bgp.neighbor]]\naddress = \"{}\"\nremote_as = {}\n",
            peer_addr(i),
            65010 + i
        ));
        if v6 {
            s.push_str("families = [\"ipv4\", \"ipv6\"]\n");
        }
    }
    s
}

/// One GoBGP peer sharing h2 with the others: it does not listen (FRR is passive toward
/// it and it connects from its own address).
fn gobgp_config(i: usize) -> String {
    let a = peer_addr(i);
    format!(
        "[global.config]\n  as = {asn}\n  router-id = \"{a}\"\n  port = -1\n\n\
         [[neighbors]]\n  [neighbors.config]\n    neighbor-address = \"{dut}\"\n    peer-as = {dut_as}\n  \
         [neighbors.transport.config]\n    local-address = \"{a}\"\n  \
         [neighbors.timers.config]\n    connect-retry = 1\n  \
         [[neighbors.afi-safis]]\n    [neighbors.afi-safis.config]\n      afi-safi-name = \"ipv4-unicast\"\n",
        asn = 65010 + i,
        dut = crate::R2_V4,
        dut_as = bgp::AS_DUT
    )
}

/// Run everything.
pub fn run(opts: &ScaleOptions, log: &dyn Fn(&str)) -> Result<ScaleReport> {
    if !(1..=8).contains(&opts.peers) {
        bail!("--peers must be 1..=8");
    }
    let mut r = ScaleReport::default();
    if opts.routes6 > 0 && opts.speaker != Speaker::Tester {
        bail!("IPv6 routes (--routes6) come from the tester's routers: use --speaker tester");
    }
    for &dut in &opts.duts {
        log(&format!(
            "== {}: {} IPv4 + {} IPv6 routes from {} peers ==",
            dut.name(),
            opts.routes,
            opts.routes6,
            opts.peers
        ));
        let x = run_one(opts, dut, log).with_context(|| dut.name().to_string())?;
        log(&format!(
            "   kernel {}, FIB {}, traffic {:.1} s, loss {} over {} sampled routes",
            x.kernel_done_s.map_or("-".into(), |f| format!("{f:.1} s")),
            x.fib_done_s.map_or("-".into(), |f| format!("{f:.1} s")),
            x.learn_s,
            x.loss,
            x.sample
        ));
        r.runs.push(x);
    }
    Ok(r)
}

fn run_one(opts: &ScaleOptions, dut: Dut, log: &dyn Fn(&str)) -> Result<ScaleRun> {
    let mut lab = Lab::new(&opts.prefix);
    lab.extra_config = "netlink_rcvbuf = 1073741824\n".into();
    lab.down();
    let guard = Guard(lab.clone());
    if dut == Dut::FerrouterBgp {
        if opts.speaker == Speaker::Gobgp {
            bail!("the ferrouter-bgp DUT runs with --speaker bird or tester");
        }
        lab.extra_config
            .push_str(&speaker_config(opts.peers, opts.routes6 > 0));
    }
    match dut {
        Dut::Ferrouter | Dut::FerrouterBgp => lab.up(&opts.ferrouter)?,
        Dut::Linux => {
            lab.build()?;
            lab.exec(&lab.rtr(), &["sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
            lab.exec(
                &lab.rtr(),
                &["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"],
            )?;
        }
    }
    for i in 1..opts.peers {
        let v4 = format!("{}/24", peer_addr(i));
        lab.exec(&lab.h2(), &["ip", "addr", "add", &v4, "dev", "eth0"])?;
        if opts.routes6 > 0 {
            // No duplicate address detection: the next hop answers neighbour solicitations
            // at once.
            let v6 = format!("{}/64", peer_addr6(i));
            lab.exec(
                &lab.h2(),
                &["ip", "-6", "addr", "add", &v6, "dev", "eth0", "nodad"],
            )?;
        }
    }
    let per = opts.routes / opts.peers;
    let per6 = opts.routes6 / opts.peers;
    let cfg = bench::mrt::MrtConfig {
        v4: per,
        v6: per6,
        peers: opts.peers,
        shared: false,
        seed: opts.seed,
    };
    let t_gen = Instant::now();
    let tables = bench::mrt::peer_tables(&cfg);
    let mut files = Vec::new();
    if opts.speaker == Speaker::Gobgp {
        for (i, t) in tables.iter().enumerate() {
            let path = lab.dir.join(format!("peer{i}.mrt"));
            bgp::write_mrt(&cfg, i, t, peer_addr(i), Ipv6Addr::LOCALHOST, &path)?;
            files.push(path);
        }
    }
    log(&format!(
        "   generated {} tables of {per} IPv4 + {per6} IPv6 routes in {:.1} s",
        opts.peers,
        t_gen.elapsed().as_secs_f64()
    ));

    let mut d = Daemons::new(&lab.dir.join("daemons"))?;
    let frr = match dut {
        Dut::FerrouterBgp => None,
        _ => Some(d.start_frr(
            &lab.rtr(),
            &[(
                "bgpd",
                frr_config(
                    opts.peers,
                    opts.speaker != Speaker::Tester,
                    opts.routes6 > 0,
                ),
            )],
            &[],
        )?),
    };
    let peers = match opts.speaker {
        Speaker::Gobgp => Peers::Gobgp(
            (0..opts.peers)
                .map(|i| {
                    d.start_gobgp_on(
                        &format!("gobgp{i}"),
                        &lab.h2(),
                        &gobgp_config(i),
                        50051 + i as u16,
                    )
                })
                .collect::<Result<_>>()?,
        ),
        Speaker::Tester => Peers::Tester(
            tables
                .iter()
                .enumerate()
                .map(|(i, table)| {
                    let v6 = (opts.routes6 > 0).then_some((peer_addr6(i), table.v6.as_slice()));
                    let asn = 65010 + i as u32;
                    Ok(bgp::tester_peer(&lab.h2(), asn, peer_addr(i), &table.v4, v6)?.peer)
                })
                .collect::<Result<_>>()?,
        ),
        Speaker::Bird => Peers::Bird(
            tables
                .iter()
                .enumerate()
                .map(|(i, table)| {
                    let name = format!("bird{i}");
                    let conf = bgp::bird_bgp_config(
                        65010 + i as u32,
                        &peer_addr(i).to_string(),
                        crate::R2_V4,
                        &table.v4,
                        &d.dir.join(&name).join("bird.log"),
                    )?;
                    d.start_bird(&name, &lab.h2(), &conf)
                })
                .collect::<Result<_>>()?,
        ),
    };
    d.wait_for("BGP sessions", Duration::from_secs(60), || {
        if let Peers::Tester(p) = &peers {
            bgp::check_tester_peers(p.iter().enumerate().map(|(i, p)| (p, format!("peer {i}"))))?;
        }
        let Some(frr) = &frr else {
            return bgp::ferrouter_established(&lab.socket());
        };
        let v = frr.json("show bgp ipv4 unicast summary json")?;
        let up = v["peers"].as_object().map_or(0, |p| {
            p.values().filter(|x| x["state"] == "Established").count()
        });
        Ok((
            up == opts.peers,
            format!("{up} of {} sessions up", opts.peers),
        ))
    })?;

    let v4 = tables
        .iter()
        .flat_map(|t| t.v4.iter())
        .map(|&(a, l)| (IpAddr::V4(Ipv4Addr::from(a)), l));
    let v6 = tables
        .iter()
        .flat_map(|t| t.v6.iter())
        .map(|&(a, l)| (IpAddr::V6(Ipv6Addr::from(a)), l));
    let all: Vec<(IpAddr, u8)> = v4.chain(v6).collect();
    let total = all.len();
    let total6 = all.iter().filter(|p| p.0.is_ipv6()).count();
    let gateways = (0..opts.peers)
        .map(|i| IpAddr::V4(peer_addr(i)))
        .chain((0..opts.peers).map(|i| IpAddr::V6(peer_addr6(i))))
        .collect();
    let mut kw = KernelWatch::start(&lab.rtr(), all.clone(), gateways)?;
    let mut sample = all;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(opts.seed ^ 0x5eed);
    sample.shuffle(&mut rng);
    sample.truncate(opts.sample.max(1));
    let dests: Vec<IpAddr> = sample.iter().map(|&(a, l)| super::host_in(a, l)).collect();
    let r1_mac = crate::rfc2544::topo::read_mac(&lab.rtr(), "r1")?;
    let mut t = Traffic::start(
        (&lab.h1(), "eth0"),
        &[(lab.h2(), "eth0")],
        r1_mac,
        (crate::H1_V4.parse()?, crate::H1_V6.parse()?),
        dests,
        opts.rate_pps,
    )?;

    // Load every peer at once, as a full table arrives from all sides after a restart.
    let t0 = monotonic_ns();
    let started = Instant::now();
    match &peers {
        Peers::Gobgp(peers) => at_once(peers.iter().zip(&files), |(p, f)| {
            bgp::inject_into(p, f, per, 0)
        })?,
        // BIRD loads a static protocol's routes within the `enable` command (seconds per
        // million), so all are enabled at once too.
        Peers::Bird(birds) => at_once(birds.iter(), |b| b.set_protocol("enable", "static4"))?,
        Peers::Tester(peers) => peers.iter().for_each(|p| p.advertise()),
    }
    log(&format!(
        "   peers loaded in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    let mut kernel_done = None;
    let mut fib_done = None;
    let mut last_log = Instant::now();
    let mut last_fib_poll = Instant::now();
    loop {
        let ks = kw.state();
        if kernel_done.is_none() && ks.on.iter().sum::<usize>() == total {
            kernel_done = Some(ks.last_change_ns);
        }
        if dut.is_ferrouter()
            && fib_done.is_none()
            && last_fib_poll.elapsed() > Duration::from_millis(500)
        {
            last_fib_poll = Instant::now();
            let s = control::api::request_json(&lab.socket(), "routes", Some("summary"))?;
            let source = if dut == Dut::FerrouterBgp {
                "bgp"
            } else {
                "route"
            };
            if s["by_source"][source].as_u64().unwrap_or(0) >= total as u64 {
                fib_done = Some(monotonic_ns());
            }
        }
        let st = t.tracker().settle_status(0, t0);
        let settled = st.settled == t.tracker().dests();
        let kernel_ok = kernel_done.is_some() || dut == Dut::FerrouterBgp;
        if settled && kernel_ok && (dut == Dut::Linux || fib_done.is_some()) {
            break;
        }
        if started.elapsed() > opts.timeout {
            bail!(
                "not learned after {:?}: kernel {ks:?}, traffic {st:?}",
                opts.timeout
            );
        }
        if last_log.elapsed() > Duration::from_secs(10) {
            last_log = Instant::now();
            log(&format!(
                "   {:.0} s: kernel has {} of {total} routes, traffic reaches {} of {} sampled (ferrouter-bgp: nothing in the kernel)",
                started.elapsed().as_secs_f64(),
                ks.on.iter().sum::<usize>(),
                st.settled,
                t.tracker().dests()
            ));
        }
        t.check()?;
        kw.check()?;
        d.check_alive()?;
        if let Peers::Tester(p) = &peers {
            bgp::check_tester_peers(p.iter().enumerate().map(|(i, p)| (p, format!("peer {i}"))))?;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let learn_at = t
        .tracker()
        .settle_status(0, t0)
        .latest_move_ns
        .unwrap_or(t0)
        .max(kernel_done.unwrap_or(t0));
    let (v, loss_cause) = super::LossCause::around(&lab, dut, &mut t, |t| t.verify(2))?;
    let memory = DutMemory::read(&lab, dut)?;
    let mut frr_rss = 0;
    for daemon in ["bgpd", "zebra"] {
        let Some(frr) = &frr else { break };
        if let Ok(pid) = std::fs::read_to_string(frr.dir.join(format!("{daemon}.pid"))) {
            frr_rss += rss_of(&pid).unwrap_or(0);
        }
    }
    let secs = |x: u64| x.saturating_sub(t0) as f64 / 1e9;
    drop(t);
    drop(kw);
    drop(d);
    drop(guard);
    Ok(ScaleRun {
        dut,
        peers: opts.peers,
        speaker: opts.speaker,
        routes: total - total6,
        routes6: total6,
        kernel_done_s: kernel_done.map(secs),
        fib_done_s: fib_done.map(secs),
        learn_s: secs(learn_at),
        sample: v.dests,
        sample6: sample.iter().filter(|p| p.0.is_ipv6()).count(),
        verify_tx: v.tx,
        loss: v.lost,
        routes_with_loss: v.dests_with_loss,
        loss_cause,
        memory,
        frr_rss_bytes: frr_rss,
    })
}

/// The report as a table.
pub fn table(r: &ScaleReport) -> String {
    let mib =
        |b: Option<u64>| b.map_or("-".to_string(), |b| format!("{:.0}", b as f64 / 1048576.0));
    let mut s = String::from(
        "DUT           peers  IPv4       IPv6     kernel s  FIB s   traffic s  sampled   loss  FIB MiB  B/route  ferrouter MiB  FRR MiB\n",
    );
    for x in &r.runs {
        s.push_str(&format!(
            "{:<13} {:>5}  {:<10} {:<8} {:>8}  {:>6}  {:>9.1}  {:>7}  {:>5}  {:>7}  {:>7}  {:>13}  {:>7.0}\n",
            x.dut.name(),
            x.peers,
            x.routes,
            x.routes6,
            x.kernel_done_s.map_or("-".into(), |f| format!("{f:.1}")),
            x.fib_done_s.map_or("-".into(), |f| format!("{f:.1}")),
            x.learn_s,
            x.sample,
            x.loss,
            mib(x.memory.fib_memory_bytes),
            x.memory
                .fib_memory_bytes
                .map_or("-".into(), |b| format!("{}", b / (x.routes + x.routes6).max(1) as u64)),
            mib(x.memory.process_rss_bytes),
            x.frr_rss_bytes as f64 / 1048576.0
        ));
    }
    s
}
