//! The IKE daemon (`crates/ike`) as the router runs it: started with the first
//! `[[ipsec.peer]]`, given new peers on every config apply, and installing its child SAs
//! in the fast path beside the config's (as `POST /v1/ipsec/sa` does).

use std::sync::{Arc, Mutex, Weak};

use ike::daemon::{Daemon, Dataplane};
use ike::engine::{ChildSpec, SaInfo};
use ipsec::config::{ExtraSa, SaDirection};

use crate::features::Features;

/// What holds the fast path's features (the daemon's shared state): where child SAs go.
pub trait HasFeatures: Send + Sync + 'static {
    fn features(&self) -> &Features;
}

/// The daemon, once peers are configured.
#[derive(Default)]
pub struct IkeService {
    daemon: Mutex<Option<Daemon>>,
}

/// Child SAs into the fast path's SA tables.
struct Sink<S: HasFeatures> {
    shared: Weak<S>,
}

impl<S: HasFeatures> Dataplane for Sink<S> {
    fn child_up(&mut self, c: &ChildSpec) -> Result<(), String> {
        let s = self.shared.upgrade().ok_or("the router is stopping")?;
        let encr = c.encr.esp_name();
        let integ = match c.integ {
            None => "none",
            Some(i) => i
                .esp_name()
                .ok_or_else(|| format!("ESP has no {i:?} integrity"))?,
        };
        // The peer's destinations, when its outbound SA is chosen by them.
        let mut selectors = Vec::new();
        if c.by_destination {
            for ts in &c.remote_ts {
                let prefixes = ipsec::dests::range_prefixes(ts.start, ts.end)
                    .ok_or_else(|| format!("traffic selector {:?}: not a range", ts))?;
                selectors.extend(prefixes.into_iter().map(|(a, l)| format!("{a}/{l}")));
            }
        }
        let sa = |dir, spi, k: &ike::engine::DirKeys| {
            let mut x = ExtraSa::for_tunnel(
                &c.tunnel,
                dir,
                spi,
                encr.clone(),
                integ,
                c.esn,
                &k.encr,
                &k.integ,
            );
            // Behind a NAT: ESP in UDP to the port the NAT gave the peer.
            x.entry.remote_port = c.udp_encap.map(|(_, peer)| peer);
            if c.by_destination {
                // One peer of many: its own outer ends, and (outbound) its destinations.
                x.entry.local = Some(c.local);
                x.entry.remote = Some(c.remote);
                if dir == SaDirection::Out {
                    x.entry.selectors = selectors.clone();
                }
            }
            x
        };
        if let Some(interface) = &c.interface {
            // Policy-based: two policy SAs in tunnel mode between the IKE endpoints, and
            // the policies of its selectors, in one publish.
            let policy_sa = |dir, spi, k| {
                let mut x = sa(dir, spi, k);
                x.entry.local = Some(c.local);
                x.entry.remote = Some(c.remote);
                x.entry.selectors.clear();
                x
            };
            let child = ipsec::spd::IkeChild {
                peer: c.peer.clone(),
                interface: interface.clone(),
                priority: c.policy_priority,
                local_ts: c.local_ts.clone(),
                remote_ts: c.remote_ts.clone(),
                spi_in: c.spi_in,
                spi_out: c.spi_out,
            };
            return s.features().add_ike_policy_child(
                policy_sa(SaDirection::In, c.spi_in, &c.key_in),
                policy_sa(SaDirection::Out, c.spi_out, &c.key_out),
                child,
            );
        }
        // Inbound first: the peer may send with the new SA as soon as it has our answer.
        s.features()
            .add_ipsec_sa(sa(SaDirection::In, c.spi_in, &c.key_in))
            .map_err(|e| format!("inbound SA: {e}"))?;
        if let Err(e) = s
            .features()
            .add_ipsec_sa(sa(SaDirection::Out, c.spi_out, &c.key_out))
        {
            let _ = s
                .features()
                .remove_ipsec_sa((SaDirection::In, c.spi_in, None));
            return Err(format!("outbound SA: {e}"));
        }
        Ok(())
    }

    fn child_down(
        &mut self,
        peer: &str,
        tunnel: &str,
        spi_in: u32,
        spi_out: u32,
        chosen: Option<(std::net::IpAddr, u16)>,
    ) {
        let Some(s) = self.shared.upgrade() else {
            return;
        };
        if tunnel.is_empty() {
            // Policy-based: its SAs and policies.
            match s.features().remove_ike_policy_child(spi_in, spi_out) {
                Ok(true) => tracing::info!(
                    peer,
                    "IKE: child SA in {spi_in:08x} out {spi_out:08x} and its policies removed"
                ),
                Ok(false) => tracing::warn!(
                    peer,
                    "IKE: removing child SA in {spi_in:08x} out {spi_out:08x}: not installed"
                ),
                Err(e) => tracing::warn!(
                    peer,
                    "IKE: removing child SA in {spi_in:08x} out {spi_out:08x}: {e}"
                ),
            }
            return;
        }
        for key in [
            (SaDirection::Out, spi_out, chosen),
            (SaDirection::In, spi_in, None),
        ] {
            let spi = key.1;
            match s.features().remove_ipsec_sa(key) {
                Ok(true) => {}
                // Not there: its install failed (logged then), or it was found by another key.
                Ok(false) => {
                    tracing::warn!(
                        peer,
                        tunnel,
                        "IKE: removing SA {spi:08x}: no such SA installed"
                    )
                }
                Err(e) => tracing::warn!(peer, tunnel, "IKE: removing SA {spi:08x}: {e}"),
            }
        }
        tracing::info!(
            peer,
            tunnel,
            "IKE: child SA in {spi_in:08x} out {spi_out:08x} removed"
        );
    }
}

impl IkeService {
    /// Follows `cfg`: starts the daemon with its first peers, gives a running one the new
    /// list (peers gone or changed have their SAs deleted). Errors are the config's
    /// (already checked by validation) or the thread's start.
    pub fn apply<S: HasFeatures>(
        &self,
        shared: &Arc<S>,
        cfg: &ipsec::config::IpsecConfig,
    ) -> Result<(), String> {
        let peers = cfg.ike_peers().map_err(|p| {
            p.into_iter()
                .map(|(path, m)| format!("{path}: {m}"))
                .collect::<Vec<_>>()
                .join("; ")
        })?;
        let mut d = self.daemon.lock().map_err(|_| "IKE state unavailable")?;
        match d.as_ref() {
            Some(daemon) => daemon.set_peers(peers),
            None if peers.is_empty() => {}
            None => {
                let n = peers.len();
                let sink = Sink {
                    shared: Arc::downgrade(shared),
                };
                *d = Some(
                    Daemon::start(peers, Box::new(sink))
                        .map_err(|e| format!("starting the IKE thread: {e}"))?,
                );
                tracing::info!(peers = n, "IKE daemon started");
            }
        }
        Ok(())
    }

    fn with<T>(&self, f: impl FnOnce(&Daemon) -> T) -> Option<T> {
        self.daemon.lock().ok()?.as_ref().map(f)
    }

    /// The IKE SAs and their children (`show ike sa`); empty without peers.
    pub fn sas(&self) -> Vec<SaInfo> {
        self.with(Daemon::sas).unwrap_or_default()
    }

    /// [`Daemon::sa_page`].
    pub fn sa_page(&self, peer: Option<&str>, skip: usize, limit: usize) -> (Vec<SaInfo>, usize) {
        self.with(|d| d.sa_page(peer, skip, limit))
            .unwrap_or_default()
    }

    /// Counters, established, half-open and child SAs.
    pub fn summary(&self) -> Option<(ike::engine::Counters, usize, usize, usize)> {
        self.with(Daemon::summary)
    }

    /// Virtual IPs leased from the peers' pools (`None` without peers).
    pub fn leases(&self) -> Option<usize> {
        self.with(Daemon::leases)
    }

    /// Counters, established and half-open SAs.
    pub fn counters(&self) -> Option<(ike::engine::Counters, usize, usize)> {
        self.with(Daemon::counters)
    }

    pub fn initiate(&self, peer: &str) -> Result<(), String> {
        self.with(|d| d.initiate(peer))
            .unwrap_or_else(|| Err(format!("no peer `{peer}`: no [[ipsec.peer]] is configured")))
    }

    pub fn terminate(&self, peer: &str) -> Result<usize, String> {
        self.with(|d| d.terminate(peer))
            .unwrap_or_else(|| Err(format!("no peer `{peer}`: no [[ipsec.peer]] is configured")))
    }
}

/// Flattens the counters into `name` → count (`failed_authentication`, `dropped_integrity`, ...).
pub fn counter_map(c: &ike::engine::Counters) -> std::collections::BTreeMap<String, u64> {
    let mut m = std::collections::BTreeMap::new();
    if let Ok(serde_json::Value::Object(o)) = serde_json::to_value(c) {
        for (k, v) in o {
            match v {
                serde_json::Value::Number(n) => {
                    m.insert(k, n.as_u64().unwrap_or(0));
                }
                serde_json::Value::Object(inner) => {
                    for (k2, v2) in inner {
                        m.insert(format!("{k}_{k2}"), v2.as_u64().unwrap_or(0));
                    }
                }
                _ => {}
            }
        }
    }
    m
}

/// `GET /v1/ike/summary`: the counts without the SAs (a million SAs are a large list).
pub fn summary(ike: &IkeService) -> crate::model::IkeSummary {
    let Some((c, established, half_open, child_sas)) = ike.summary() else {
        return crate::model::IkeSummary::default();
    };
    crate::model::IkeSummary {
        running: true,
        established,
        half_open,
        child_sas,
        counters: counter_map(&c),
    }
}

/// `GET /v1/ike`.
pub fn view(ike: &IkeService) -> crate::model::IkeView {
    view_page(ike, &IkeQuery::default())
}

/// Most IKE SAs `GET /v1/ike` lists by default, and at most.
pub const DEFAULT_LIST: usize = 10_000;
pub const MAX_LIST: usize = 1_000_000;

/// Which IKE SAs `GET /v1/ike` lists: a peer's, a page of them.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct IkeQuery {
    /// Only this `[[ipsec.peer]]`'s SAs.
    #[serde(default)]
    pub peer: Option<String>,
    /// SAs to skip first, in (peer, initiator's SPI) order (default 0).
    #[serde(default)]
    pub offset: Option<usize>,
    /// Most SAs to list (default 10,000; at most 1,000,000); `total` says how many match.
    #[serde(default)]
    pub limit: Option<usize>,
}

/// `GET /v1/ike` with `q`'s filter and page.
pub fn view_page(ike: &IkeService, q: &IkeQuery) -> crate::model::IkeView {
    use crate::model::{IkeChildView, IkeSaView, IkeView};
    let Some((c, established, half_open)) = ike.counters() else {
        return IkeView::default();
    };
    let limit = q.limit.unwrap_or(DEFAULT_LIST).min(MAX_LIST);
    let (page, total) = ike.sa_page(q.peer.as_deref(), q.offset.unwrap_or(0), limit);
    let sas = page
        .into_iter()
        .map(|s| IkeSaView {
            state: serde_json::to_value(s.state)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            peer: s.peer,
            initiator: s.initiator,
            spi_i: s.spi_i,
            spi_r: s.spi_r,
            local: s.local,
            remote: s.remote,
            remote_id: s.remote_id,
            virtual_ip: s.virtual_ip,
            proposal: s.proposal,
            age_s: s.age_s,
            children: s
                .children
                .into_iter()
                .map(|c| IkeChildView {
                    peer: c.peer,
                    spi_in: c.spi_in,
                    spi_out: c.spi_out,
                    proposal: c.proposal,
                    local_ts: c.local_ts,
                    remote_ts: c.remote_ts,
                    age_s: c.age_s,
                })
                .collect(),
        })
        .collect();
    IkeView {
        running: true,
        established,
        half_open,
        sas,
        total,
        counters: counter_map(&c),
    }
}
