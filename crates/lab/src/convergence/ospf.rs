//! The OSPF side of the convergence lab (IPv4 only: OSPFv2): FRR (zebra + ospfd) in the
//! router namespace with point-to-point adjacencies on r2 and r3, and BIRD 2 in h2
//! (primary) and h3 (secondary), each originating the same N prefixes
//! ([`crate::ospf::externals_v4`]) as AS-external type-2 LSAs: the primary with metric
//! [`METRIC_PRIMARY`], the secondary with [`METRIC_SECONDARY`], so ospfd prefers the
//! primary. BIRD's routes are blackhole statics exported into OSPF (no forwarding address):
//! the router's next hop is the originating host's address on the link.
//!
//! Setup starts BIRD with its static protocol (`static4`) disabled, so the adjacencies form
//! with no externals, and waits until both are Full and ospfd has a route to both BIRDs as
//! ASBRs (their router-LSAs with the link back to the router arrived, which BIRD's
//! MinLSInterval delays to ~6 s after its start). The learn phase then starts with
//! `birdc enable static4` on both: it measures the externals' origination, flooding, SPF,
//! and installation, not adjacency formation.
//!
//! Withdrawal is `birdc disable static4` on the primary: BIRD flushes its externals
//! (premature aging, MaxAge LSAs flooded); re-advertisement is `birdc enable static4`,
//! which originates them again. The adjacencies stay up throughout.
//!
//! BIRD originates an instance of an LSA at most every MinLSInterval (5 s, not
//! configurable; the flush counts as an instance) and postpones one that comes sooner to
//! its 1 s tick: re-enabling the externals right after the failover measured a failback of
//! ~6.6 s from the withdrawal, almost all of it BIRD's hold-down (2,000 routes; 0.2 s
//! without it). The pause before the failback ([`PAUSE_BEFORE_FAILBACK`], counted from
//! the failover's end, by which time the flush went out) keeps that hold-down, a property
//! of the peer, out of the failback figure.
//!
//! Timers: [`Tuning::FAST`] (hello 1 s, dead 4 s) up to [`BULK_ABOVE`] routes,
//! [`Tuning::BULK`] above (dead 120 s and 64 KiB BIRD packets: see [`Tuning`] for why
//! 100K+ LSAs need them). At 100,000 routes (ferrouter, 2 cores) each phase took 37-41 s:
//! 96-98% of the routes moved within ~5 s and the rest waited ~30 s for retransmission of
//! LSAs the daemons' raw sockets dropped (see [`crate::ospf`]).

use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::daemons::{Daemons, Frr};
use crate::ospf::{self, Tuning};
use crate::Lab;

/// The primary's (h2) external metric: lower, so preferred.
pub const METRIC_PRIMARY: u32 = 100;
/// The secondary's (h3) external metric.
pub const METRIC_SECONDARY: u32 = 200;
/// Above this many routes, [`Tuning::BULK`]; [`Tuning::FAST`] up to it.
pub const BULK_ABOVE: usize = 50_000;
/// The most routes per peer this lab has converged with on a 2-vCPU machine. At 2M the BIRD
/// peers and ospfd stalled in the learn phase (docs/performance.md, "OSPF at 2M routes"):
/// above this, the run says so before it starts.
pub const LARGEST_MEASURED: usize = 400_000;
/// More than BIRD's MinLSInterval (5 s) since the flush: see the module doc.
pub const PAUSE_BEFORE_FAILBACK: Duration = Duration::from_secs(6);

/// The timers for `n` externals.
pub fn tuning_for(n: usize) -> Tuning {
    if n > BULK_ABOVE {
        Tuning::BULK
    } else {
        Tuning::FAST
    }
}

/// The peers: (BIRD instance name, namespace, router id = its address on the link, metric).
fn peers_of(lab: &Lab) -> [(&'static str, String, &'static str, u32); 2] {
    [
        ("bird-primary", lab.h2(), crate::H2_V4, METRIC_PRIMARY),
        ("bird-secondary", lab.h3(), crate::H3_V4, METRIC_SECONDARY),
    ]
}

/// The router's view of neighbour `id`: its adjacency state (e.g. "Full/-"), empty if
/// ospfd does not list it.
fn neighbour_state(neighbours: &serde_json::Value, id: &str) -> String {
    neighbours["neighbors"][id][0]["state"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// Whether ospfd's routing table (`show ip ospf route json`, which lists routers by id next
/// to networks; ospfd 8.4 has no JSON `border-routers`) has a route to router `id`.
fn router_reachable(routes: &serde_json::Value, id: &str) -> bool {
    routes[id]["routeType"]
        .as_str()
        .is_some_and(|t| t.starts_with('R'))
}

/// Whether both adjacencies are Full and both BIRDs reachable as ASBRs, and a description.
fn ready(frr: &Frr, ids: &[&str]) -> Result<(bool, String)> {
    let nb = frr.json("show ip ospf neighbor json")?;
    // Before the externals are enabled: a small table.
    let routes = frr.json("show ip ospf route json")?;
    let mut all = true;
    let mut desc = String::new();
    for id in ids {
        let st = neighbour_state(&nb, id);
        let asbr = router_reachable(&routes, id);
        all &= st.starts_with("Full") && asbr;
        desc.push_str(&format!("{id}: {st:?}, router route {}; ", routes[id]));
    }
    Ok((all, desc))
}

/// The convergence benchmark's OSPF side (see the module doc): generate `n` externals
/// (seed `seed`), start FRR and both BIRDs (their externals disabled), and wait until the
/// adjacencies are Full and both BIRDs are reachable ASBRs.
pub fn setup(
    lab: &Lab,
    d: &mut Daemons,
    n: usize,
    seed: u64,
    log: &dyn Fn(&str),
) -> Result<super::StaticPeers> {
    let tuning = tuning_for(n);
    if n > LARGEST_MEASURED {
        log(&format!(
            "   note: {n} routes per peer is above the {LARGEST_MEASURED} this lab has converged \
             with on 2 vCPUs; at 2M its BIRD peers and ospfd stalled in the learn phase \
             (docs/performance.md, \"OSPF at 2M routes\"): each phase gives up after --timeout"
        ));
    }
    let prefixes = ospf::externals_v4(n, seed);
    let frr = d.start_frr(
        &lab.rtr(),
        &[(
            "ospfd",
            ospf::frr_ospf_config_with(crate::R2_V4, &["r2", "r3"], tuning),
        )],
        &[],
    )?;
    let t0 = Instant::now();
    let mut birds = Vec::with_capacity(2);
    for (name, ns, id, metric) in peers_of(lab) {
        let conf = ospf::bird_ospf_config_with(
            id,
            "eth0",
            &prefixes,
            &[],
            metric,
            &d.dir.join(name).join("bird.log"),
            tuning,
        );
        let conf = crate::daemons::bird_statics_disabled(&conf)?;
        birds.push(d.start_bird(name, &ns, &conf)?);
    }
    let limit = Duration::from_secs(if n > BULK_ABOVE { 300 } else { 60 });
    d.wait_for("OSPF adjacencies and ASBRs", limit, || {
        ready(&frr, &[crate::H2_V4, crate::H3_V4])
    })?;
    log(&format!(
        "   OSPF ({tuning:?}): adjacencies Full and both ASBRs reachable {:.1} s after \
             starting BIRD",
        t0.elapsed().as_secs_f64()
    ));
    super::StaticPeers::new(birds, prefixes, PAUSE_BEFORE_FAILBACK)
}

/// The tester's emulated routers wait this long for an acknowledgment before sending an
/// LSA again: more than ospfd's delayed acknowledgment (1 s) plus its backlog.
/// (It waits longer when ospfd's acknowledgments come later: see `ospf::peer::Config`.)
pub const TESTER_RETRANSMIT: Duration = Duration::from_secs(5);
/// At most this many of an emulated router's LSAs in flight. ospfd's receive buffer
/// (`rmem_max`, 4 MiB here) holds about a thousand MTU-sized packets of 40 LSAs; ospfd
/// takes 5-10K LSAs/s on two shared cores, so more in flight would only queue.
pub const TESTER_WINDOW: usize = 20_000;
/// With the tester's peers above [`BULK_ABOVE`] routes: ospfd's retransmission interval (s).
/// Every interval it resends each LSA on a neighbour's list sent more than an interval
/// ago; the emulated routers acknowledge at once, so LSAs still on the list were not yet
/// sent out by ospfd's write queue, and 2 s would only queue them again.
pub const TESTER_ROUTER_RETRANSMIT: u32 = 30;
/// With the tester's peers: ospfd's `write-multiplier` (packets written per write event,
/// default 20, at most 100), so that flooding to 2 neighbours and acknowledging keep up.
pub const TESTER_WRITE_MULTIPLIER: u32 = 100;

/// The convergence benchmark's OSPF side with the tester's emulated routers (`--speaker
/// tester`) in h2 (primary) and h3 (secondary) instead of BIRD: FRR as in [`setup`], and
/// two [`::ospf::peer::Peer`]s with the same addresses, router IDs and metrics as the BIRDs
/// would have. Learning, withdrawal and re-advertisement are the peers' commands; there is
/// no MinLSInterval to wait out, so the pause before the failback is 1 s.
pub fn setup_tester(
    lab: &Lab,
    d: &mut Daemons,
    n: usize,
    seed: u64,
    log: &dyn Fn(&str),
) -> Result<TesterPeers> {
    let tuning = match tuning_for(n) {
        t if t == Tuning::BULK => Tuning {
            retransmit: TESTER_ROUTER_RETRANSMIT,
            bird_tx_length: None,
            ..t
        },
        t => t,
    };
    let prefixes = ospf::externals_v4(n, seed);
    let frr = d.start_frr(
        &lab.rtr(),
        &[(
            "ospfd",
            ospf::frr_ospf_config_extra(
                crate::R2_V4,
                &["r2", "r3"],
                tuning,
                &format!(" write-multiplier {TESTER_WRITE_MULTIPLIER}\n"),
            ),
        )],
        &[],
    )?;
    let t0 = Instant::now();
    let mut peers = Vec::with_capacity(2);
    for (_, ns, id, metric) in peers_of(lab) {
        let cfg = ::ospf::peer::Config {
            ifname: "eth0".into(),
            address: id.parse()?,
            prefix_len: 24,
            hello: tuning.hello as u16,
            dead: tuning.dead,
            retransmit: TESTER_RETRANSMIT,
            mtu: 1500,
            window: TESTER_WINDOW,
            externals: prefixes.clone(),
            metric,
        };
        let enter = Box::new(move || {
            crate::rfc2544::enter_netns(&ns).map_err(|e| std::io::Error::other(format!("{e:#}")))
        });
        peers.push(::ospf::peer::Peer::start(cfg, enter)?);
    }
    let Ok(peers) = <[::ospf::peer::Peer; 2]>::try_from(peers) else {
        bail!("two emulated routers expected");
    };
    let limit = Duration::from_secs(if n > BULK_ABOVE { 300 } else { 60 });
    d.wait_for("OSPF adjacencies and ASBRs", limit, || {
        ready(&frr, &[crate::H2_V4, crate::H3_V4])
    })?;
    log(&format!(
        "   OSPF ({tuning:?}), the tester's emulated routers: adjacencies Full and both ASBRs \
         reachable {:.1} s after starting them",
        t0.elapsed().as_secs_f64()
    ));
    Ok(TesterPeers {
        peers,
        prefixes,
        frr,
    })
}

/// No LSA to either tester peer for this long: the router is done flooding.
pub const QUIET_FOR: Duration = Duration::from_secs(5);

/// The tester's two emulated OSPF routers: [0] primary (h2), [1] secondary (h3).
pub struct TesterPeers {
    peers: [::ospf::peer::Peer; 2],
    prefixes: Vec<(u32, u8)>,
    /// The router's FRR (ospfd, zebra), which the tester set up.
    frr: crate::daemons::Frr,
}

impl TesterPeers {
    /// The router's FRR, to ask it what it holds (`vtysh`).
    pub fn frr(&self) -> &crate::daemons::Frr {
        &self.frr
    }

    /// Each peer's counters.
    pub fn stats(&self) -> [::ospf::peer::Stats; 2] {
        [self.peers[0].stats(), self.peers[1].stats()]
    }
}

impl super::Routing for TesterPeers {
    fn prefixes(&self) -> &[(u32, u8)] {
        &self.prefixes
    }

    fn learn(&self) -> Result<()> {
        self.peers[0].advertise()?;
        Ok(self.peers[1].advertise()?)
    }

    fn withdraw(&self) -> Result<()> {
        Ok(self.peers[0].withdraw()?)
    }

    fn pause_before_failback(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn readvertise(&self) -> Result<()> {
        Ok(self.peers[0].advertise()?)
    }

    fn check(&self) -> Result<()> {
        for (p, name) in self.peers.iter().zip(["primary", "secondary"]) {
            if !p.alive() {
                bail!("the tester's {name} OSPF router stopped");
            }
            let s = p.stats();
            if s.unoriginated > 0 {
                bail!(
                    "the {name} could not give {} prefixes a Link State ID",
                    s.unoriginated
                );
            }
        }
        Ok(())
    }

    /// Quiet: neither peer has been sent an LSA for [`QUIET_FOR`] (ospfd has flooded
    /// each peer's externals to the other and emptied its retransmission lists). The time
    /// is until the last LSA; `limit` itself if the router never went quiet.
    fn wait_quiet(&self, limit: Duration) -> Result<Option<Duration>> {
        let t0 = Instant::now();
        let received = || self.stats().map(|s| s.lsas_received);
        let mut last = received();
        let mut since = Instant::now();
        while t0.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(200));
            self.check()?;
            let now = received();
            if now != last {
                last = now;
                since = Instant::now();
            } else if since.elapsed() >= QUIET_FOR {
                return Ok(Some(since.duration_since(t0)));
            }
        }
        // Still flooding: verify anyway; a wait equal to the limit says so.
        Ok(Some(limit))
    }

    fn status(&self) -> Option<String> {
        let [a, b] = self.stats();
        let f = |s: &::ospf::peer::Stats| {
            format!(
                "{:?}, sent {} (rxmt {}), acked {} (latency {} ms), unacked {}, unsent {}, received {}, resets {}, bad {}",
                s.state.unwrap_or(::ospf::peer::State::Down),
                s.lsas_sent,
                s.lsas_retransmitted,
                s.lsas_acked,
                s.ack_latency_ms,
                s.unacked,
                s.unsent,
                s.lsas_received,
                s.adjacency_resets,
                s.bad_packets
            )
        };
        Some(format!("primary {}; secondary {}", f(&a), f(&b)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tuning_switches_to_bulk_above_50k() {
        assert_eq!(tuning_for(2_000), Tuning::FAST);
        assert_eq!(tuning_for(BULK_ABOVE), Tuning::FAST);
        assert_eq!(tuning_for(BULK_ABOVE + 1), Tuning::BULK);
    }

    #[test]
    fn frr_json_readers() {
        let nb = json!({"neighbors": {"198.51.100.2": [{"state": "Full/-"}]}});
        assert_eq!(neighbour_state(&nb, "198.51.100.2"), "Full/-");
        assert_eq!(neighbour_state(&nb, "203.0.113.2"), "");
        assert_eq!(neighbour_state(&json!({}), "203.0.113.2"), "");
        let routes = json!({
            "198.51.100.0/24": {"routeType": "N"},
            "198.51.100.2": {"routeType": "R ", "routerType": "asbr"}
        });
        assert!(router_reachable(&routes, "198.51.100.2"));
        assert!(!router_reachable(&routes, "203.0.113.2"));
        assert!(!router_reachable(&routes, "198.51.100.0/24"));
    }
}
