//! The BGP side of the convergence lab: FRR (zebra + bgpd) in the router namespace with two
//! eBGP neighbours, h2 (primary, local preference 200) and h3 (secondary, 100), both
//! advertising the same synthetic Internet-like table ([`bench::mrt`]'s prefix mix). The
//! peers are one of two real BGP speakers ([`super::Speaker`]):
//!
//! - **BIRD 2** ([`setup_bird_peers`]), the default, behaves like the reports' emulated
//!   routers: its table is a static protocol exported over the session, every route with the
//!   same attributes, so announcements and withdrawals are packed, hundreds of prefixes to
//!   an UPDATE. Withdrawal is `birdc disable static4` (the session stays up), re-advertising
//!   `birdc enable static4`. What the failback measures is the router's own work.
//! - **GoBGP** ([`Convergence`]) is loaded from MRT files with a per-prefix AS path and
//!   MED. GoBGP 3.10 withdraws (`global rib del all`) and re-advertises (`mrt inject`) with
//!   one UPDATE per prefix, at about 5,000 routes/s per peer: above ~10K routes that is what
//!   its times measure.
//!
//! The router advertises nothing back (a deny-all export map): the peers' tables share
//! prefixes, and a peer that learned a prefix back through the router would prefer that and
//! stop advertising its own.

use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::daemons::{Daemons, Frr, GoBgp};
use crate::Lab;

/// Our AS, and the two peers'.
pub const AS_DUT: u32 = 65001;
/// The primary peer's AS (h2).
pub const AS_PRIMARY: u32 = 65002;
/// The secondary peer's AS (h3).
pub const AS_SECONDARY: u32 = 65003;

/// Whether the sessions carry IPv6 too (then each peer has a second, IPv6 session).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Families {
    /// IPv4 unicast session.
    pub v4: bool,
    /// IPv6 unicast session.
    pub v6: bool,
}

/// FRR's bgpd configuration: both peers, the primary preferred by local preference.
pub fn frr_config(f: Families) -> String {
    let mut s = format!(
        "frr defaults datacenter
hostname ferrouter-dut
! Route-map changes apply at once: the default 5 s delay has bgpd, once the configuration's
! route maps are loaded, ask every peer for its table again (ROUTE-REFRESH) in the middle of
! the learn phase, which the peers then send twice.
bgp route-map delay-timer 0
!
router bgp {AS_DUT}
 bgp router-id {r2}
 ! datacenter's 3/9 s keepalive/hold expire while bgpd and the peers are busy with millions
 ! of routes on two cores; the session must survive the load it measures.
 timers bgp 30 90
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 no bgp network import-check
",
        r2 = crate::R2_V4
    );
    let peers = [
        (crate::H2_V4, crate::H2_V6, AS_PRIMARY, "PRIMARY"),
        (crate::H3_V4, crate::H3_V6, AS_SECONDARY, "SECONDARY"),
    ];
    for (v4, v6, asn, _) in peers {
        for (on, addr) in [(f.v4, v4), (f.v6, v6)] {
            if on {
                s.push_str(&format!(
                    " neighbor {addr} remote-as {asn}\n neighbor {addr} timers connect 1\n"
                ));
            }
        }
    }
    for (on, af, idx) in [(f.v4, "ipv4", 0), (f.v6, "ipv6", 1)] {
        if !on {
            continue;
        }
        s.push_str(&format!(" !\n address-family {af} unicast\n"));
        for p in peers {
            let addr = if idx == 0 { p.0 } else { p.1 };
            s.push_str(&format!(
                "  neighbor {addr} activate\n  neighbor {addr} route-map {} in\n  neighbor {addr} route-map ADVERTISE-NOTHING out\n",
                p.3
            ));
        }
        s.push_str(" exit-address-family\n");
    }
    s.push_str(
        "!\nroute-map PRIMARY permit 10\n set local-preference 200\n!\n\
         route-map SECONDARY permit 10\n set local-preference 100\n!\n\
         route-map ADVERTISE-NOTHING deny 10\n!\n",
    );
    s
}

/// GoBGP's configuration for one peer: its sessions toward the router.
pub fn gobgp_config(asn: u32, router_id: &str, dut_v4: &str, dut_v6: &str, f: Families) -> String {
    let mut s = format!("[global.config]\n  as = {asn}\n  router-id = \"{router_id}\"\n");
    for (on, addr, afi) in [
        (f.v4, dut_v4, "ipv4-unicast"),
        (f.v6, dut_v6, "ipv6-unicast"),
    ] {
        if on {
            s.push_str(&format!(
                "\n[[neighbors]]\n  [neighbors.config]\n    neighbor-address = \"{addr}\"\n    \
                 peer-as = {AS_DUT}\n  [neighbors.timers.config]\n    connect-retry = 1\n  \
                 [[neighbors.afi-safis]]\n    [neighbors.afi-safis.config]\n      \
                 afi-safi-name = \"{afi}\"\n"
            ));
        }
    }
    s
}

/// Write peer `i`'s MRT file for `gobgp mrt inject`: the table, then its first records
/// again as padding.
///
/// GoBGP 3.10's client streams the records over gRPC and exits without waiting for the
/// server to take the last ones (`injectMrt` never calls `CloseAndRecv`): the tail of
/// every injection, a few hundred records here, is lost. The padding repeats routes the
/// server already has (an identical path again changes nothing), so what is lost is only
/// padding; [`BgpLab::inject`] checks the table is complete.
pub fn write_mrt(
    cfg: &bench::mrt::MrtConfig,
    i: usize,
    table: &bench::mrt::PeerTable,
    next_hop_v4: std::net::Ipv4Addr,
    next_hop_v6: std::net::Ipv6Addr,
    path: &Path,
) -> Result<()> {
    let total = table.v4.len() + table.v6.len();
    let pad = (total / 10).clamp(5_000, 200_000);
    let mut f =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    bench::mrt::write_table(cfg, i, table, next_hop_v4, next_hop_v6, &mut f)?;
    let pv4 = pad.min(table.v4.len());
    let padding = bench::mrt::PeerTable {
        v4: table.v4[..pv4].to_vec(),
        v6: table.v6[..(pad - pv4).min(table.v6.len())].to_vec(),
    };
    // The padding repeats whole records; with fewer routes than `pad` it repeats them all.
    for _ in 0..pad.div_ceil(total.max(1)) {
        bench::mrt::write_table(cfg, i, &padding, next_hop_v4, next_hop_v6, &mut f)?;
    }
    Ok(())
}

/// Routes in a GoBGP's own table, by family (`gobgp global rib summary`).
pub fn peer_rib(p: &GoBgp) -> Result<(usize, usize)> {
    let count = |af: &str| -> Result<usize> {
        let out = p.run(&["global", "rib", "summary", "-a", af])?;
        out.split("Destination:")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .and_then(|n| n.trim().parse().ok())
            .with_context(|| format!("gobgp global rib summary: {out}"))
    };
    Ok((count("ipv4")?, count("ipv6")?))
}

/// Load a GoBGP with the MRT file `mrt` written by [`write_mrt`] for `v4` and `v6` routes
/// (`gobgp mrt inject global`), and check that its table is complete.
pub fn inject_into(p: &GoBgp, mrt: &Path, v4: usize, v6: usize) -> Result<()> {
    let f = mrt.display().to_string();
    let mut last = (0, 0);
    for _round in 0..3 {
        p.run(&["mrt", "inject", "global", &f])
            .with_context(|| format!("injecting {f}"))?;
        // Until the server has applied what it received: two equal readings.
        let mut prev = None;
        loop {
            std::thread::sleep(std::time::Duration::from_millis(200));
            let now = peer_rib(p)?;
            if prev == Some(now) {
                break;
            }
            prev = Some(now);
        }
        last = prev.unwrap_or_default();
        if last == (v4, v6) {
            return Ok(());
        }
    }
    anyhow::bail!(
        "{} (API port {}) holds {} IPv4 and {} IPv6 routes after injecting {f} three times \
         ({v4} and {v6} expected)",
        p.ns,
        p.port,
        last.0,
        last.1
    )
}

/// Whether both peers' sessions are Established in FRR (`f`: which families have
/// sessions), with a description otherwise.
pub fn established(frr: &Frr, f: Families) -> Result<(bool, String)> {
    let mut all = true;
    let mut desc = String::new();
    for (on, af) in [(f.v4, "ipv4"), (f.v6, "ipv6")] {
        if !on {
            continue;
        }
        let v = frr.json(&format!("show bgp {af} unicast summary json"))?;
        let peers = v["peers"].as_object().cloned().unwrap_or_default();
        if peers.len() < 2 {
            all = false;
        }
        for (addr, p) in &peers {
            let st = p["state"].as_str().unwrap_or("?");
            all &= st == "Established";
            desc.push_str(&format!("{af} {addr} {st}; "));
        }
    }
    Ok((all, desc))
}

/// The lab's routing daemons: FRR in the router, GoBGP in h2 (primary) and h3 (secondary).
pub struct BgpLab {
    /// FRR in the router namespace.
    pub frr: Frr,
    /// GoBGP in h2 and h3.
    pub peers: [GoBgp; 2],
    /// Which sessions exist.
    pub families: Families,
}

impl BgpLab {
    /// Start FRR and both GoBGP peers (sessions come up in the background).
    pub fn start(lab: &Lab, d: &mut Daemons, f: Families) -> Result<BgpLab> {
        let frr = d.start_frr(&lab.rtr(), &[("bgpd", frr_config(f))], &[])?;
        let p1 = d.start_gobgp(
            "gobgp-primary",
            &lab.h2(),
            &gobgp_config(AS_PRIMARY, crate::H2_V4, crate::R2_V4, crate::R2_V6, f),
        )?;
        let p2 = d.start_gobgp(
            "gobgp-secondary",
            &lab.h3(),
            &gobgp_config(AS_SECONDARY, crate::H3_V4, crate::R3_V4, crate::R3_V6, f),
        )?;
        Ok(BgpLab {
            frr,
            peers: [p1, p2],
            families: f,
        })
    }

    /// Whether every session is Established (FRR's view), with a description otherwise.
    pub fn established(&self) -> Result<(bool, String)> {
        established(&self.frr, self.families)
    }

    /// Routes in peer `i`'s own table, by family (`gobgp global rib summary`).
    pub fn peer_rib(&self, i: usize) -> Result<(usize, usize)> {
        peer_rib(&self.peers[i])
    }

    /// Load peer `i` with the MRT file `mrt` written by [`write_mrt`] for `v4` and `v6`
    /// routes, and check that its table is complete (see [`inject_into`]).
    pub fn inject(&self, i: usize, mrt: &Path, v4: usize, v6: usize) -> Result<()> {
        inject_into(&self.peers[i], mrt, v4, v6)
    }

    /// Peer `i` withdraws every route it advertised: it deletes its whole table, which
    /// sends UPDATE withdrawals on the live sessions.
    ///
    /// (An export policy rejecting everything plus `softresetout` would keep the table, but
    /// GoBGP 3.10 then only empties its Adj-RIB-Out and sends no withdrawals.)
    pub fn withdraw(&self, i: usize) -> Result<()> {
        for (on, af) in [(self.families.v4, "ipv4"), (self.families.v6, "ipv6")] {
            if on {
                self.peers[i].run(&["global", "rib", "del", "all", "-a", af])?;
            }
        }
        Ok(())
    }

    /// Peer `i` advertises its table again (loads it again from `mrt`, see
    /// [`BgpLab::inject`]).
    pub fn readvertise(&self, i: usize, mrt: &Path, v4: usize, v6: usize) -> Result<()> {
        self.inject(i, mrt, v4, v6)
    }
}

/// The table both peers advertise: `n` IPv4 routes with seed `seed`, shared.
fn table_config(n: usize, seed: u64) -> bench::mrt::MrtConfig {
    bench::mrt::MrtConfig {
        v4: n,
        v6: 0,
        peers: 2,
        shared: true,
        seed,
    }
}

/// BIRD 2's configuration for one emulated peer: `prefixes` in a static protocol
/// (`static4`, starting disabled) exported over an IPv4 eBGP session to the router at
/// `dut` from `local` in AS `asn`. BIRD sets itself as the next hop (eBGP) and packs
/// routes with equal attributes into one UPDATE.
pub fn bird_bgp_config(
    asn: u32,
    local: &str,
    dut: &str,
    prefixes: &[(u32, u8)],
    log: &Path,
) -> Result<String> {
    let mut s = crate::daemons::bird_statics_disabled(&crate::daemons::bird_statics_config(
        local,
        log,
        prefixes,
        &[],
    ))?;
    s.push_str(&format!(
        "protocol bgp dut {{
  local {local} as {asn};
  # Listen on `local` only: several peers may share a namespace.
  strict bind yes;
  neighbor {dut} as {AS_DUT};
  hold time 90;
  keepalive time 30;
  connect retry time 1;
  ipv4 {{
    import none;
    export where proto = \"static4\";
  }};
}}
"
    ));
    Ok(s)
}

/// Who terminates the peers' sessions in the router namespace.
#[derive(Clone, Debug)]
pub enum Router {
    /// FRR's bgpd (started here), installing through zebra into the kernel.
    Frr,
    /// Ferrouter's own speaker (already running with [`ferrouter_bgp_config`]), answering
    /// on this control socket.
    Ferrouter(PathBuf),
}

/// The `[bgp]` section for ferrouter's own speaker in the convergence lab: the same AS,
/// neighbours and preference (local preference 200 for the primary) as [`frr_config`].
pub fn ferrouter_bgp_config() -> String {
    format!(
        "\n[bgp]\nasn = {AS_DUT}\nrouter_id = \"{r2}\"\nconnect_retry = 1\n\n\
         [[bgp.neighbor]]\naddress = \"{h2}\"\nremote_as = {AS_PRIMARY}\nlocal_pref = 200\ndescription = \"primary\"\n\n\
         [[bgp.neighbor]]\naddress = \"{h3}\"\nremote_as = {AS_SECONDARY}\nlocal_pref = 100\ndescription = \"secondary\"\n",
        r2 = crate::R2_V4,
        h2 = crate::H2_V4,
        h3 = crate::H3_V4,
    )
}

/// Whether every neighbour of ferrouter's speaker (control socket `socket`) is
/// established, and its status.
pub fn ferrouter_established(socket: &Path) -> Result<(bool, String)> {
    let v = control::api::request_json(socket, "bgp", None)?;
    let ns = v["speaker"]["neighbors"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let up = !ns.is_empty() && ns.iter().all(|n| n["state"] == "established");
    Ok((up, v.to_string()))
}

/// The router of a convergence run: FRR's bgpd started for [`Router::Frr`] (IPv4 sessions
/// to both peers), nothing for ferrouter's own speaker, which the lab already runs.
struct RouterSide {
    frr: Option<crate::daemons::Frr>,
    router: Router,
}

impl RouterSide {
    const FAMILIES: Families = Families {
        v4: true,
        v6: false,
    };

    fn start(lab: &Lab, d: &mut Daemons, router: Router) -> Result<RouterSide> {
        let frr = match router {
            Router::Frr => {
                Some(d.start_frr(&lab.rtr(), &[("bgpd", frr_config(Self::FAMILIES))], &[])?)
            }
            Router::Ferrouter(_) => None,
        };
        Ok(RouterSide { frr, router })
    }

    /// Whether the router has both sessions established, and its status.
    fn established(&self) -> Result<(bool, String)> {
        match (&self.frr, &self.router) {
            (Some(frr), _) => established(frr, Self::FAMILIES),
            (None, Router::Ferrouter(socket)) => ferrouter_established(socket),
            (None, Router::Frr) => bail!("FRR was not started"),
        }
    }
}

/// The convergence benchmark's BGP side with BIRD peers ([`super::Speaker::Bird`]):
/// generate the table (`n` IPv4 routes, seed `seed`), start FRR (for [`Router::Frr`]) and
/// both BIRDs with it as their disabled `static4`, and wait until the sessions are
/// established (no routes advertised yet).
pub fn setup_bird_peers(
    lab: &Lab,
    d: &mut Daemons,
    router: Router,
    n: usize,
    seed: u64,
    log: &dyn Fn(&str),
) -> Result<super::StaticPeers> {
    let t_gen = Instant::now();
    let prefixes = bench::mrt::peer_table(&table_config(n, seed), 0).v4;
    let side = RouterSide::start(lab, d, router)?;
    let mut birds = Vec::with_capacity(2);
    for (name, ns, asn, local, dut) in [
        (
            "bird-primary",
            lab.h2(),
            AS_PRIMARY,
            crate::H2_V4,
            crate::R2_V4,
        ),
        (
            "bird-secondary",
            lab.h3(),
            AS_SECONDARY,
            crate::H3_V4,
            crate::R3_V4,
        ),
    ] {
        let log = d.dir.join(name).join("bird.log");
        let conf = bird_bgp_config(asn, local, dut, &prefixes, &log)?;
        birds.push(d.start_bird(name, &ns, &conf)?);
    }
    log(&format!(
        "   generated the table and started 2 BIRD peers with {n} routes in {:.1} s",
        t_gen.elapsed().as_secs_f64()
    ));
    d.wait_for("BGP sessions", Duration::from_secs(120), || {
        side.established()
    })?;
    super::StaticPeers::new(birds, prefixes, Duration::from_secs(1))
}

/// The tester's emulated BGP routers ([`super::Speaker::Tester`]): one [`::bgp::peer::Peer`]
/// in h2 (primary) and one in h3 (secondary), each listening on its address's port 179 for
/// the router's session, with the same table as BIRD's (the same generator and seed),
/// encoded once as UPDATEs of one attribute set (AS path: the peer's AS; next hop: its
/// address). Sending it is a copy to the socket: unlike BIRD, which needs 15-18 CPU s for
/// a 6M-prefix table, the peers leave both cores to the router and the traffic.
pub struct TesterPeers {
    peers: [::bgp::peer::Peer; 2],
    prefixes: Vec<(u32, u8)>,
}

/// The hold time the tester's routers propose (as FRR's `timers bgp 30 90`).
const TESTER_HOLD: u16 = 90;

/// One of the tester's emulated BGP routers, and the size of its table.
pub struct TesterPeer {
    /// The running router.
    pub peer: ::bgp::peer::Peer,
    /// Bytes of UPDATEs its table takes.
    pub table_bytes: usize,
}

/// An emulated router's IPv6 side: its address (the routes' next hop) and its prefixes.
pub type V6Side<'a> = (std::net::Ipv6Addr, &'a [([u8; 16], u8)]);

/// Start one of the tester's emulated BGP routers in namespace `ns`: AS `asn`, listening on
/// `local`:179, its table `prefixes` (next hop `local`, AS path `asn`) encoded up front.
/// With `v6` = (address, prefixes), the session also carries IPv6 unicast (MP-BGP) and the
/// table those prefixes, with that address as their next hop.
pub fn tester_peer(
    ns: &str,
    asn: u32,
    local: std::net::Ipv4Addr,
    prefixes: &[(u32, u8)],
    v6: Option<V6Side>,
) -> Result<TesterPeer> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let nets: Vec<(IpAddr, u8)> = prefixes
        .iter()
        .map(|&(a, l)| (IpAddr::V4(Ipv4Addr::from(a)), l))
        .chain(
            v6.iter()
                .flat_map(|(_, p)| p.iter())
                .map(|&(a, l)| (IpAddr::V6(Ipv6Addr::from(a)), l)),
        )
        .collect();
    let attrs = ::bgp::wire::Attrs {
        as_path: ::bgp::wire::AsPath::sequence(&[asn]),
        next_hop: Some(IpAddr::V4(local)),
        ..Default::default()
    };
    let next_hop6 = v6.map(|(a, _)| a);
    let (mut table, mut withdrawal) = (Vec::new(), Vec::new());
    ::bgp::wire::encode_updates(&mut table, &attrs, next_hop6, &nets, &[], true);
    ::bgp::wire::encode_updates(&mut withdrawal, &attrs, next_hop6, &[], &nets, true);
    let mut families = vec![(::bgp::wire::AFI_IPV4, ::bgp::wire::SAFI_UNICAST)];
    if v6.is_some() {
        families.push((::bgp::wire::AFI_IPV6, ::bgp::wire::SAFI_UNICAST));
    }
    let table_bytes = table.len();
    let cfg = ::bgp::peer::Config {
        listen: std::net::SocketAddr::new(local.into(), 179),
        asn,
        router_id: local,
        hold_time: TESTER_HOLD,
        families,
        table: std::sync::Arc::new(table),
        withdrawal: std::sync::Arc::new(withdrawal),
    };
    let ns = ns.to_string();
    let enter = Box::new(move || {
        crate::rfc2544::enter_netns(&ns).map_err(|e| std::io::Error::other(format!("{e:#}")))
    });
    let peer = ::bgp::peer::Peer::start(cfg, enter)
        .with_context(|| format!("starting the tester's BGP router on {local}"))?;
    Ok(TesterPeer { peer, table_bytes })
}

/// An error if one of the tester's routers stopped or lost its session.
pub fn check_tester_peers<'a>(
    peers: impl IntoIterator<Item = (&'a ::bgp::peer::Peer, String)>,
) -> Result<()> {
    for (p, name) in peers {
        if !p.is_running() {
            bail!("the tester's {name} BGP router stopped");
        }
        let s = p.status();
        if s.resets > 0 {
            bail!(
                "the tester's {name} BGP router lost its session: {}",
                s.last_error.unwrap_or_default()
            );
        }
    }
    Ok(())
}

/// Generate the table, start FRR (for [`Router::Frr`]) and the two emulated routers, and
/// wait until the sessions are established (nothing advertised yet).
pub fn setup_tester_peers(
    lab: &Lab,
    d: &mut Daemons,
    router: Router,
    n: usize,
    seed: u64,
    log: &dyn Fn(&str),
) -> Result<TesterPeers> {
    let t_gen = Instant::now();
    let prefixes = bench::mrt::peer_table(&table_config(n, seed), 0).v4;
    let mut peers = Vec::with_capacity(2);
    for (ns, asn, local) in [
        (lab.h2(), AS_PRIMARY, crate::H2_V4),
        (lab.h3(), AS_SECONDARY, crate::H3_V4),
    ] {
        peers.push(tester_peer(&ns, asn, local.parse()?, &prefixes, None)?);
    }
    let table_bytes = peers.first().map_or(0, |p: &TesterPeer| p.table_bytes);
    let peers: Vec<::bgp::peer::Peer> = peers.into_iter().map(|p| p.peer).collect();
    let Ok(peers) = <[::bgp::peer::Peer; 2]>::try_from(peers) else {
        bail!("two emulated routers expected");
    };
    log(&format!(
        "   generated the table and started the tester's 2 BGP routers with {n} routes \
         ({:.1} MB of UPDATEs each) in {:.1} s",
        table_bytes as f64 / 1e6,
        t_gen.elapsed().as_secs_f64()
    ));
    let side = RouterSide::start(lab, d, router)?;
    let peers = TesterPeers { peers, prefixes };
    d.wait_for("BGP sessions", Duration::from_secs(120), || {
        peers.check()?;
        let up = peers.peers.iter().all(|p| p.status().established);
        let router = side.established()?;
        Ok((up && router.0, router.1))
    })?;
    Ok(peers)
}

impl TesterPeers {
    fn check(&self) -> Result<()> {
        check_tester_peers(
            self.peers
                .iter()
                .zip(["primary", "secondary"].map(String::from)),
        )
    }
}

impl super::Routing for TesterPeers {
    fn prefixes(&self) -> &[(u32, u8)] {
        &self.prefixes
    }

    fn learn(&self) -> Result<()> {
        self.peers[0].advertise();
        self.peers[1].advertise();
        Ok(())
    }

    fn withdraw(&self) -> Result<()> {
        self.peers[0].withdraw();
        Ok(())
    }

    fn pause_before_failback(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn readvertise(&self) -> Result<()> {
        self.peers[0].advertise();
        Ok(())
    }

    fn check(&self) -> Result<()> {
        TesterPeers::check(self)
    }

    fn status(&self) -> Option<String> {
        let f = |s: ::bgp::peer::Status| {
            format!(
                "sent {:.1} of {:.1} MB, {} keepalives, {} route refreshes received",
                s.sent_bytes as f64 / 1e6,
                s.queued_bytes as f64 / 1e6,
                s.keepalives_sent,
                s.refreshes_received
            )
        };
        Some(format!(
            "primary {}; secondary {}",
            f(self.peers[0].status()),
            f(self.peers[1].status())
        ))
    }
}

/// The convergence benchmark's BGP side ([`super::Routing`]): both peers get the same
/// generated table (each with its own next hop) from MRT files; learning loads both,
/// withdrawing deletes the primary's table, re-advertising loads it again.
pub struct Convergence {
    bgp: BgpLab,
    /// Each peer's MRT file.
    files: [PathBuf; 2],
    /// The table's IPv4 prefixes.
    prefixes: Vec<(u32, u8)>,
}

impl Convergence {
    /// Generate the table (`n` IPv4 routes, seed `seed`), write both peers' MRT files, start
    /// FRR and the peers, and wait until the sessions are established.
    pub fn setup(
        lab: &Lab,
        d: &mut Daemons,
        n: usize,
        seed: u64,
        log: &dyn Fn(&str),
    ) -> Result<Convergence> {
        // The same table for both peers, with each peer's own next hop.
        let cfg = table_config(n, seed);
        let t_gen = Instant::now();
        let table = bench::mrt::peer_table(&cfg, 0);
        let files = [0, 1].map(|i| lab.dir.join(format!("peer{i}.mrt")));
        for (i, nh) in [crate::H2_V4, crate::H3_V4].into_iter().enumerate() {
            write_mrt(&cfg, i, &table, nh.parse()?, Ipv6Addr::LOCALHOST, &files[i])?;
        }
        log(&format!(
            "   generated 2 MRT tables of {n} routes in {:.1} s",
            t_gen.elapsed().as_secs_f64()
        ));
        let fam = Families {
            v4: true,
            v6: false,
        };
        let bgp = BgpLab::start(lab, d, fam)?;
        d.wait_for("BGP sessions", Duration::from_secs(60), || {
            bgp.established()
        })?;
        Ok(Convergence {
            bgp,
            files,
            prefixes: table.v4,
        })
    }
}

impl super::Routing for Convergence {
    fn prefixes(&self) -> &[(u32, u8)] {
        &self.prefixes
    }

    fn learn(&self) -> Result<()> {
        let n = self.prefixes.len();
        self.bgp.inject(0, &self.files[0], n, 0)?;
        self.bgp.inject(1, &self.files[1], n, 0)
    }

    fn withdraw(&self) -> Result<()> {
        self.bgp.withdraw(0)
    }

    fn pause_before_failback(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn readvertise(&self) -> Result<()> {
        self.bgp
            .readvertise(0, &self.files[0], self.prefixes.len(), 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frr_config_prefers_the_primary_for_each_family() {
        let c = frr_config(Families { v4: true, v6: true });
        for addr in [crate::H2_V4, crate::H2_V6] {
            assert!(
                c.contains(&format!("neighbor {addr} route-map PRIMARY in")),
                "{c}"
            );
        }
        for addr in [crate::H3_V4, crate::H3_V6] {
            assert!(
                c.contains(&format!("neighbor {addr} route-map SECONDARY in")),
                "{c}"
            );
        }
        assert!(c.contains("set local-preference 200"));
        let c4 = frr_config(Families {
            v4: true,
            v6: false,
        });
        assert!(!c4.contains("ipv6") && !c4.contains(crate::H2_V6), "{c4}");
    }

    #[test]
    fn bird_bgp_config_exports_the_disabled_statics_over_one_session() {
        let c = bird_bgp_config(
            65002,
            "198.51.100.2",
            "198.51.100.1",
            &[(0x0a00_0000, 8), (0x0b01_0200, 24)],
            Path::new("/tmp/x.log"),
        )
        .unwrap();
        assert!(c.contains("route 10.0.0.0/8 blackhole;"), "{c}");
        assert!(c.contains("route 11.1.2.0/24 blackhole;"), "{c}");
        assert!(c.contains("protocol static static4 {\n  disabled;"), "{c}");
        assert!(c.contains("local 198.51.100.2 as 65002;"), "{c}");
        assert!(
            c.contains(&format!("neighbor 198.51.100.1 as {AS_DUT};")),
            "{c}"
        );
        assert!(c.contains("export where proto = \"static4\";"), "{c}");
        assert_eq!(c.matches("protocol bgp").count(), 1, "{c}");
    }

    #[test]
    fn gobgp_config_has_a_session_per_family() {
        let c = gobgp_config(
            65002,
            "1.1.1.1",
            "10.0.0.1",
            "fd00::1",
            Families { v4: true, v6: true },
        );
        assert_eq!(c.matches("[[neighbors]]").count(), 2, "{c}");
        assert!(c.contains("afi-safi-name = \"ipv6-unicast\""));
        assert!(c.contains("peer-as = 65001"), "{c}");
        let c4 = gobgp_config(
            65002,
            "1.1.1.1",
            "10.0.0.1",
            "fd00::1",
            Families {
                v4: true,
                v6: false,
            },
        );
        assert_eq!(c4.matches("[[neighbors]]").count(), 1);
    }
}
