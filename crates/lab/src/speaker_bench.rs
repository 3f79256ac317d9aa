//! `ferrouter-lab bench bgp-speaker`: how fast ferrouter's own BGP speaker turns UPDATEs into
//! FIB changes — the speaker's part of convergence alone, without the peers' or the traffic's
//! CPU — and what a route costs it in memory.
//!
//! Two peers on loopback TCP (the tester's emulated routers, [`bgp::peer`], threads of this
//! process) send UPDATEs packed as BIRD packs them (one attribute set, ~1,000 /24s per message) to a
//! real [`bgp::speaker::Speaker`] whose sink is a real [`Sync`] with a real FIB, set up as
//! the daemon's after its first dump (two ports, resolved next hops). Phases, as in
//! `bench convergence`: both peers announce every route (learn), the preferred one
//! withdraws them (failover: every prefix moves to the other), and announces them again
//! (failback). Each phase is timed from the first byte sent to the speaker reporting every
//! change applied, and the speaker's threads' CPU is read from /proc.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use bgp::config::{BgpConfig, NeighborConfig};
use bgp::peer::{Config as PeerConfig, Peer};
use bgp::speaker::Speaker;
use bgp::wire;
use control::sync::Sync;
use serde::Serialize;

/// What to measure.
#[derive(Clone, Debug)]
pub struct Options {
    /// IPv4 routes (the same prefixes from both peers).
    pub routes: usize,
    /// Route generator seed.
    pub seed: u64,
}

/// One phase.
#[derive(Clone, Debug, Serialize)]
pub struct Phase {
    /// Prefixes announced or withdrawn by the peer(s).
    pub prefixes: u64,
    /// FIB changes the speaker made.
    pub fib_changes: u64,
    /// From the first UPDATE sent to the last change in the FIB.
    pub seconds: f64,
    /// Prefixes per second (wall).
    pub per_second: f64,
    /// CPU seconds of the speaker's threads (sessions and RIB, FIB writes included).
    pub cpu_seconds: f64,
}

/// The result.
#[derive(Clone, Debug, Serialize)]
pub struct SpeakerBench {
    /// IPv4 routes per peer.
    pub routes: usize,
    /// UPDATE bytes per announced prefix.
    pub update_bytes_per_route: f64,
    /// UPDATE messages per peer for the whole table.
    pub updates_per_table: usize,
    /// Both peers announce (2 × routes prefixes; routes FIB changes).
    pub learn: Phase,
    /// The preferred peer withdraws (every prefix moves to the other).
    pub failover: Phase,
    /// The preferred peer announces again (every prefix moves back).
    pub failback: Phase,
    /// Prefixes in the FIB from the speaker after the learn.
    pub fib_bgp_routes: usize,
    /// Prefixes checked to forward via the expected peer after each phase.
    pub checked: usize,
    /// Resident memory the process gained per route (RIB with two paths per prefix, and
    /// the FIB), bytes.
    pub rss_bytes_per_route: f64,
}

/// Next hops the peers put in their UPDATEs: on the two connected subnets of the sync's
/// ports (as [`crate::route_sync`] sets them up).
const NH: [Ipv4Addr; 2] = [Ipv4Addr::new(192, 0, 2, 9), Ipv4Addr::new(198, 51, 100, 9)];

/// CPU seconds of this process's threads named `bgp-*` (the speaker's).
fn speaker_cpu() -> f64 {
    let tick = 100.0; // USER_HZ
    let mut total = 0u64;
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    for t in dir.flatten() {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ... utime stime: fields 14 and 15, counted after the comm.
        let Some((comm, rest)) = stat.split_once(") ") else {
            continue;
        };
        if !comm.contains("(bgp-") {
            continue;
        }
        let f: Vec<&str> = rest.split_whitespace().collect();
        let get = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
        total += get(11) + get(12);
    }
    total as f64 / tick
}

/// Wait until `done` holds on the speaker's view (at most `limit`), then return the time
/// the last FIB change was made (the sink's clock).
fn wait_done(
    speaker: &Speaker,
    last_change: &Mutex<Instant>,
    limit: Duration,
    done: impl Fn(&bgp::speaker::View) -> bool,
) -> Result<Instant> {
    let t = Instant::now();
    loop {
        let v = speaker.status().view();
        if done(&v) {
            return Ok(*last_change
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?);
        }
        if t.elapsed() > limit {
            bail!("the speaker did not finish within {limit:?}: {v:?}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Run the benchmark; progress lines go to `log`.
pub fn run(opts: &Options, log: &dyn Fn(&str)) -> Result<SpeakerBench> {
    if opts.routes == 0 {
        bail!("--routes must be at least 1");
    }
    let prefixes: Vec<(IpAddr, u8)> = bench::routes::gen_v4(opts.routes, opts.seed)
        .into_iter()
        .map(|(a, l)| (IpAddr::V4(Ipv4Addr::from(a)), l))
        .collect();
    let n = prefixes.len();
    let attrs = |nh: Ipv4Addr, asn: u32| wire::Attrs {
        as_path: wire::AsPath::sequence(&[asn, 64512]),
        next_hop: Some(IpAddr::V4(nh)),
        ..Default::default()
    };
    log(&format!("encoding {n} prefixes per peer"));
    // Each peer's table and its withdrawal, as the tester's emulated routers send them.
    let mut peers = Vec::new();
    let (mut updates, mut table_bytes) = (0usize, 0usize);
    for (i, nh) in NH.into_iter().enumerate() {
        let (mut table, mut withdrawal) = (Vec::new(), Vec::new());
        let a = attrs(nh, 65002 + i as u32);
        wire::encode_updates(&mut table, &a, None, &prefixes, &[], true);
        wire::encode_updates(&mut withdrawal, &a, None, &[], &prefixes, true);
        if i == 0 {
            table_bytes = table.len();
            let mut at = 0;
            while let Ok(Some((_, len))) = wire::frame(&table[at..]) {
                updates += 1;
                at += len;
            }
        }
        let (table, withdrawal) = (Arc::new(table), Arc::new(withdrawal));
        // Two peers on 127.0.0.1 would be one neighbour address twice; the second falls
        // back to it only where 127.0.0.2 cannot be bound, with another port.
        let start = |listen: &str| {
            Peer::start(
                PeerConfig {
                    listen: listen.parse().map_err(std::io::Error::other)?,
                    asn: 65002 + i as u32,
                    router_id: nh,
                    hold_time: 90,
                    families: vec![(wire::AFI_IPV4, wire::SAFI_UNICAST)],
                    table: table.clone(),
                    withdrawal: withdrawal.clone(),
                },
                Box::new(|| Ok(())),
            )
        };
        let p = match i {
            0 => start("127.0.0.1:0")?,
            _ => start("127.0.0.2:0").or_else(|_| start("127.0.0.1:0"))?,
        };
        peers.push(p);
    }

    let neighbor = |i: usize, lp: u32| -> Result<NeighborConfig> {
        let a = peers[i].local_addr();
        Ok(NeighborConfig {
            address: a.ip(),
            remote_as: 65002 + i as u32,
            port: a.port(),
            local_pref: lp,
            max_prefixes: None,
            families: vec![],
            description: None,
        })
    };
    let cfg = BgpConfig {
        asn: 65001,
        router_id: Ipv4Addr::new(192, 0, 2, 1),
        hold_time: 90,
        connect_retry: 1,
        always_compare_med: false,
        neighbors: vec![neighbor(0, 200)?, neighbor(1, 100)?],
    };
    let (writer, _reader) = fib::new(control::daemon::FIB_CONFIG);
    let sync = Arc::new(Mutex::new(Sync::new(
        writer,
        vec!["p0".into(), "p1".into()],
    )));
    sync.lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .resync(crate::route_sync::base());
    let last_change = Arc::new(Mutex::new(Instant::now()));
    let (s2, l2) = (sync.clone(), last_change.clone());
    let rss0 = crate::route_sync::rss_bytes();
    let addrs = crate::route_sync::base().addrs;
    let resolvable: bgp::speaker::Resolvable =
        Arc::new(move |ip| control::sync::connected_in(&addrs, ip).is_some());
    let speaker = Speaker::start(cfg, resolvable, move |changes: &[bgp::rib::Change]| {
        if let Ok(mut s) = s2.lock() {
            s.apply_bgp(changes);
        }
        if let Ok(mut t) = l2.lock() {
            *t = Instant::now();
        }
    })?;
    let limit = Duration::from_secs(600);
    let established = |v: &bgp::speaker::View| {
        v.neighbors
            .iter()
            .all(|x| x.state == bgp::speaker::State::Established)
    };
    wait_done(&speaker, &last_change, Duration::from_secs(10), established)?;
    let held = |v: &bgp::speaker::View, i: usize| v.neighbors[i].prefixes as usize;

    let phase = |what: &str,
                 peers: &[&Peer],
                 advertise: bool,
                 prefixes: u64,
                 done: &dyn Fn(&bgp::speaker::View) -> bool|
     -> Result<Phase> {
        log(what);
        let changes0 = speaker.status().view().fib_changes;
        let cpu0 = speaker_cpu();
        let t0 = Instant::now();
        // Each peer sends from its own thread: both at once, as in the lab.
        for p in peers {
            if advertise {
                p.advertise();
            } else {
                p.withdraw();
            }
        }
        let end = wait_done(&speaker, &last_change, limit, done)?;
        let seconds = end.saturating_duration_since(t0).as_secs_f64();
        Ok(Phase {
            prefixes,
            fib_changes: speaker.status().view().fib_changes - changes0,
            seconds,
            per_second: prefixes as f64 / seconds.max(1e-9),
            cpu_seconds: speaker_cpu() - cpu0,
        })
    };
    let check = |via: Ipv4Addr| -> Result<usize> {
        let s = sync.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        let step = (n / 1000).max(1);
        let mut checked = 0;
        for p in prefixes.iter().step_by(step) {
            let r = s
                .routes(Some(&format!("{}/{}", p.0, p.1)))
                .map_err(|e| anyhow::anyhow!(e))?;
            let ok = r.first().is_some_and(|r| {
                r.source == control::sync::Source::Bgp
                    && r.next_hop.starts_with(&format!("via {via} "))
            });
            if !ok {
                bail!("{}/{} is not via {via}: {r:?}", p.0, p.1);
            }
            checked += 1;
        }
        Ok(checked)
    };

    let learn = phase(
        "learn: both peers announce every route",
        &[&peers[0], &peers[1]],
        true,
        2 * n as u64,
        &|v| held(v, 0) == n && held(v, 1) == n,
    )?;
    let mut checked = check(NH[0])?;
    let fib_bgp_routes = sync
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .source_counts()
        .3;
    let rss1 = crate::route_sync::rss_bytes();
    let failover = phase(
        "failover: the preferred peer withdraws every route",
        &[&peers[0]],
        false,
        n as u64,
        &|v| held(v, 0) == 0,
    )?;
    checked += check(NH[1])?;
    let failback = phase(
        "failback: the preferred peer announces every route again",
        &[&peers[0]],
        true,
        n as u64,
        &|v| held(v, 0) == n,
    )?;
    checked += check(NH[0])?;
    drop(speaker);
    drop(peers);
    Ok(SpeakerBench {
        routes: n,
        update_bytes_per_route: table_bytes as f64 / n as f64,
        updates_per_table: updates,
        learn,
        failover,
        failback,
        fib_bgp_routes,
        checked,
        rss_bytes_per_route: rss1.saturating_sub(rss0) as f64 / n as f64,
    })
}

/// The result as a table.
pub fn table(r: &SpeakerBench) -> String {
    let mut s = format!(
        "bgp-speaker: {} IPv4 routes from each of 2 peers, {} UPDATEs per table ({:.1} bytes per prefix)\n",
        r.routes, r.updates_per_table, r.update_bytes_per_route
    );
    for (name, p) in [
        ("learn", &r.learn),
        ("failover", &r.failover),
        ("failback", &r.failback),
    ] {
        s += &format!(
            "  {name:<9} {:>9} prefixes, {:>8} FIB changes in {:>7.3} s = {:>6.2} M prefixes/s ({:.3} s of speaker CPU = {:.2} M/s)\n",
            p.prefixes,
            p.fib_changes,
            p.seconds,
            p.per_second / 1e6,
            p.cpu_seconds,
            p.prefixes as f64 / p.cpu_seconds.max(1e-9) / 1e6
        );
    }
    s += &format!(
        "  FIB: {} routes from the speaker; {} sampled prefixes checked after each phase\n  memory per route (RIB with two paths + FIB): {:.0} bytes\n",
        r.fib_bgp_routes, r.checked, r.rss_bytes_per_route
    );
    s
}
