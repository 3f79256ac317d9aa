//! What the API shows: the data behind `GET /v1/interfaces`, `/v1/routes`,
//! `/v1/routes/summary`, `/v1/neighbors` and `/v1/counters` (served by [`crate::http`]),
//! and [`request`], the client call the CLI, the lab and the tests use. The bodies are
//! [`crate::model`]'s types.

use std::path::Path;

use anyhow::Result;
use dataplane::Reason;

use crate::client::{Client, Endpoint};
use crate::model;
use crate::state::Shared;

/// Why a `show` request failed: the client's mistake (HTTP 400) or the router's (500).
/// The HTTP layer maps each variant to its status; nothing reads the message to decide.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShowError {
    /// The request is wrong: an unknown item, a malformed prefix.
    #[error("{0}")]
    BadRequest(String),
    /// The router's state cannot be read (a thread holding it failed).
    #[error("{0}")]
    Unavailable(String),
}

fn unavailable<T>(_: T) -> ShowError {
    ShowError::Unavailable("internal state unavailable".into())
}

/// The answer to one `show` item, typed: what [`show`] returns and [`request_with`]
/// decodes. Serialized, it is the endpoint's JSON (no tag of its own).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum Shown {
    /// `GET /v1/interfaces`.
    Interfaces(Vec<model::Interface>),
    /// `GET /v1/routes`.
    Routes(model::Routes),
    /// `GET /v1/routes/summary`.
    RoutesSummary(model::RoutesSummary),
    /// `GET /v1/neighbors`.
    Neighbors(Vec<model::Neighbor>),
    /// `GET /v1/counters`.
    Counters(Box<model::Counters>),
    /// `GET /v1/bgp`.
    Bgp(model::BgpStatus),
    /// `GET /v1/firewall`.
    Firewall(model::FirewallView),
    /// `GET /v1/conntrack`.
    Conntrack(model::ConntrackList),
    /// `GET /v1/nat`.
    Nat(model::NatView),
    /// `GET /v1/nat/sessions`.
    NatSessions(model::NatSessionList),
    /// `GET /v1/ipsec`.
    Ipsec(model::IpsecView),
    /// `GET /v1/ike`: the IKE SAs (`show ike` / `show ike sa`).
    Ike(model::IkeView),
    /// `GET /v1/ike`'s child SAs (`show ike child-sa`).
    IkeChildSas(Vec<model::IkeChildView>),
    /// `GET /v1/ike/summary` (`show ike summary`).
    IkeSummary(model::IkeSummary),
    /// `GET /v1/qos`.
    Qos(model::QosView),
}

/// The items `show` knows, for error messages.
const ITEMS: &str =
    "interfaces, routes, routes summary, neighbors, counters, bgp, firewall, conntrack, nat, nat sessions, ipsec, ike sa, ike child-sa, ike summary or qos";

/// The data of one `show` item: `interfaces`, `routes` (with `arg` a prefix or an
/// address, or `summary`), `neighbors`, `counters`, `bgp` or `firewall`.
pub fn show(shared: &Shared, what: &str, arg: Option<&str>) -> Result<Shown, ShowError> {
    Ok(match what {
        "interfaces" => Shown::Interfaces(interfaces(shared)?),
        "routes" if arg == Some("summary") => Shown::RoutesSummary(routes_summary(shared)?),
        "routes" => Shown::Routes(routes(shared, arg)?),
        "neighbors" => Shown::Neighbors(neighbors(shared)?),
        "counters" => Shown::Counters(Box::new(counters(shared)?)),
        "bgp" => Shown::Bgp(bgp(shared)),
        "firewall" => Shown::Firewall(crate::fwview::view(&shared.features)),
        "conntrack" => {
            let f = crate::fwview::ct_filter(arg, None, None).map_err(ShowError::BadRequest)?;
            Shown::Conntrack(
                crate::fwview::conntrack_list(&shared.features, f, 1000).map_err(|e| match e {
                    firewall::node::ScanError::Off => ShowError::BadRequest(e.to_string()),
                    _ => ShowError::Unavailable(e.to_string()),
                })?,
            )
        }
        "nat" if arg == Some("sessions") => Shown::NatSessions(
            crate::natview::sessions(&shared.features, Default::default(), 1000).map_err(|e| {
                match e {
                    firewall::nat::DumpError::Off => ShowError::BadRequest(e.to_string()),
                    _ => ShowError::Unavailable(e.to_string()),
                }
            })?,
        ),
        "nat" => Shown::Nat(crate::natview::view(&shared.features)),
        "ipsec" => Shown::Ipsec(ipsec_view(shared)),
        "ike" if arg == Some("summary") => Shown::IkeSummary(crate::ikesvc::summary(&shared.ike)),
        "ike" if arg == Some("child-sa") => {
            Shown::IkeChildSas(children(crate::ikesvc::view(&shared.ike)))
        }
        "ike" => Shown::Ike(crate::ikesvc::view(&shared.ike)),
        "qos" => Shown::Qos(crate::qosview::view(&shared.features)),
        other => {
            return Err(ShowError::BadRequest(format!(
                "unknown item {other:?}: expected {ITEMS}"
            )))
        }
    })
}

/// `GET /v1/ipsec`: the tunnels as the config names them, with their Linux MTU, and the
/// installed SAs with their counters.
pub fn ipsec_view(shared: &Shared) -> model::IpsecView {
    let from_api = shared.features.ipsec_api_sas();
    let sas: Vec<model::IpsecSaView> = shared
        .features
        .ipsec
        .report()
        .into_iter()
        .map(|r| model::IpsecSaView {
            tunnel: r.sa.tunnel,
            direction: r.sa.direction.into(),
            spi: r.sa.spi,
            encryption: r.sa.encryption.into(),
            integrity: r.sa.integrity.into(),
            esn: r.sa.esn,
            replay_window: r.sa.replay_window,
            src: r.sa.src,
            dst: r.sa.dst,
            active: r.sa.active,
            source: if from_api.contains(&(
                if r.sa.direction == "out" {
                    ipsec::config::SaDirection::Out
                } else {
                    ipsec::config::SaDirection::In
                },
                r.sa.spi,
            )) {
                "api".into()
            } else {
                "config".into()
            },
            udp_src_port: r.sa.udp.map(|u| u.0),
            udp_dst_port: r.sa.udp.map(|u| u.1),
            packets: r.packets,
            bytes: r.bytes,
            sequence: r.sequence,
            worker: r.sa.worker,
            errors: r
                .errors
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        })
        .collect();
    let cfg = shared
        .config
        .lock()
        .map(|c| c.running().ipsec.clone())
        .unwrap_or_default();
    let mtu_of = |name: &str| {
        shared
            .sync
            .lock()
            .ok()
            .and_then(|s| s.link_mtu(name))
            .unwrap_or(0)
    };
    let tunnels = cfg
        .tunnels
        .iter()
        .map(|t| model::IpsecTunnelView {
            name: t.name.clone(),
            local: t.local.to_string(),
            remote: t.remote.to_string(),
            mtu: mtu_of(&t.name),
            tx_spi: sas
                .iter()
                .find(|s| s.tunnel == t.name && s.active)
                .map(|s| s.spi),
            rx_spis: sas
                .iter()
                .filter(|s| s.tunnel == t.name && s.direction == "in")
                .map(|s| s.spi)
                .collect(),
        })
        .collect();
    let policies = shared
        .features
        .ipsec
        .spd()
        .report()
        .into_iter()
        .map(|p| model::IpsecPolicyView {
            index: p.index as u32,
            interface: p.interface,
            direction: p.direction.into(),
            priority: p.priority,
            src: p.src,
            dst: p.dst,
            protocol: p.protocol,
            src_ports: p.src_ports,
            dst_ports: p.dst_ports,
            action: p.action.into(),
            sa: p.sa,
            matches: p.matches,
            peer: p.peer,
        })
        .collect();
    let r = &shared.features.ipsec.reasm;
    let n = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    model::IpsecView {
        tunnels,
        sas,
        policies,
        busy: n(&shared.features.ipsec.busy),
        reassembly: model::IpsecReassemblyView {
            fragments: n(&r.fragments),
            reassembled: n(&r.reassembled),
            timed_out: n(&r.timed_out),
            evicted: n(&r.evicted),
            discarded: n(&r.discarded),
        },
    }
}

fn mac_string(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn v4_strings(a: &[u32]) -> Vec<String> {
    a.iter()
        .map(|a| std::net::Ipv4Addr::from(*a).to_string())
        .collect()
}

fn v6_strings(a: &[[u8; 16]]) -> Vec<String> {
    a.iter()
        .map(|a| std::net::Ipv6Addr::from(*a).to_string())
        .collect()
}

fn names(features: Vec<&'static str>) -> Vec<String> {
    features.into_iter().map(str::to_string).collect()
}

/// `GET /v1/interfaces`: the ports, then the VLAN sub-interfaces.
pub fn interfaces(shared: &Shared) -> Result<Vec<model::Interface>, ShowError> {
    let sync = shared.sync.lock().map_err(unavailable)?;
    let ifaces = sync.interfaces();
    let held_down = shared.held_down.load();
    let link = |port: usize| {
        let l = sync.port_link(port, &held_down);
        let admin = if l.admin_up {
            model::Admin::Up
        } else {
            model::Admin::Down
        };
        (admin, l.oper, l.reason)
    };
    let mut out: Vec<model::Interface> = shared
        .ports
        .iter()
        .map(|f| {
            let info = ifaces.ports.get(f.port as usize);
            let g = |field| shared.port_total(f.port, field);
            let (admin, oper, down_reason) = link(f.port as usize);
            model::Interface {
                port: f.port,
                name: f.name.clone(),
                ifindex: Some(f.ifindex),
                backend: f.backend.clone(),
                admin,
                oper,
                down_reason,
                parent: None,
                vlan: None,
                mac: info.map(|i| mac_string(&i.mac)),
                mtu: info.map(|i| i.mtu),
                ipv4: info.map(|i| v4_strings(&i.ip4)),
                ipv6: info.map(|i| v6_strings(&i.ip6)),
                rx_packets: g(|c| &c.rx_packets),
                rx_bytes: g(|c| &c.rx_bytes),
                tx_packets: g(|c| &c.tx_packets),
                tx_bytes: g(|c| &c.tx_bytes),
                rx_drops: Some(g(|c| &c.rx_drops)),
                tx_errors: Some(g(|c| &c.tx_errors)),
                rx_csum_completed: Some(g(|c| &c.rx_csum_completed)),
                rx_gso_split: Some(g(|c| &c.rx_gso_split)),
                features: names(shared.features.enabled(f.port)),
            }
        })
        .collect();
    // Then the VLAN sub-interfaces, with what the fast path received and sent on them.
    let first = shared.ports.len();
    for (i, info) in ifaces.ports.iter().enumerate().skip(first) {
        let Some(t) = info.vlan else { continue };
        let c = shared.subif_total(i - first);
        let parent = ifaces.ports.get(t.parent as usize).map(|p| p.name.clone());
        let (admin, oper, down_reason) = link(i);
        out.push(model::Interface {
            port: i as u16,
            name: info.name.clone(),
            ifindex: sync.ifindex_of(&info.name),
            backend: format!(
                "vlan {} on {}",
                t.describe(),
                parent.as_deref().unwrap_or("?")
            ),
            admin,
            oper,
            down_reason,
            parent,
            vlan: Some(model::Vlan {
                tpid: format!("{:#06x}", t.tpid),
                id: t.outer,
                inner_id: (t.inner != 0).then_some(t.inner),
            }),
            mac: Some(mac_string(&info.mac)),
            mtu: Some(info.mtu),
            ipv4: Some(v4_strings(&info.ip4)),
            ipv6: Some(v6_strings(&info.ip6)),
            rx_packets: c.rx_packets,
            rx_bytes: c.rx_bytes,
            tx_packets: c.tx_packets,
            tx_bytes: c.tx_bytes,
            rx_drops: None,
            tx_errors: None,
            rx_csum_completed: None,
            rx_gso_split: None,
            features: names(shared.features.enabled(i as u16)),
        });
    }
    Ok(out)
}

/// `GET /v1/routes/summary`: route counts, FIB memory, sync statistics.
pub fn routes_summary(shared: &Shared) -> Result<model::RoutesSummary, ShowError> {
    let sync = shared.sync.lock().map_err(unavailable)?;
    let (v4, v6) = sync.route_counts();
    let (route, neighbor, local, bgp) = sync.source_counts();
    let m = sync.writer().memory();
    let st = sync.stats();
    let n = |x: usize| x as u64;
    Ok(model::RoutesSummary {
        ipv4: n(v4),
        ipv6: n(v6),
        by_source: model::BySource {
            route: n(route),
            neighbor: n(neighbor),
            local: n(local),
            bgp: n(bgp),
        },
        kernel_routes_mirrored: n(sync.mirrored_routes()),
        fib_memory_bytes: model::FibMemory {
            ipv4_tables: n(m.v4_table_bytes),
            ipv6_tables: n(m.v6_table_bytes),
            route_store: n(m.rib_bytes),
            next_hops: n(m.nexthop_bytes),
            total: n(m.v4_table_bytes + m.v6_table_bytes + m.rib_bytes + m.nexthop_bytes),
        },
        netlink_events: st.events,
        resyncs: st.resyncs,
        fib_errors: st.fib_errors,
        bgp_changes: st.bgp_changes,
        bgp_unresolved: st.bgp_unresolved,
    })
}

/// `GET /v1/routes`: the routes matching `prefix` (a prefix, exact, or an address, longest
/// match), or all.
pub fn routes(shared: &Shared, prefix: Option<&str>) -> Result<model::Routes, ShowError> {
    let sync = shared.sync.lock().map_err(unavailable)?;
    let routes = sync.routes(prefix).map_err(ShowError::BadRequest)?;
    let (v4, v6) = sync.route_counts();
    Ok(model::Routes {
        ipv4: v4 as u64,
        ipv6: v6 as u64,
        routes,
    })
}

/// `GET /v1/neighbors`.
pub fn neighbors(shared: &Shared) -> Result<Vec<model::Neighbor>, ShowError> {
    Ok(shared.sync.lock().map_err(unavailable)?.neighbors())
}

/// `GET /v1/bgp`: the speaker's own status (no sync lock needed).
pub fn bgp(shared: &Shared) -> model::BgpStatus {
    let Some(st) = shared.bgp.get() else {
        return model::BgpStatus {
            enabled: false,
            speaker: None,
            last_fib_change_monotonic_ns: None,
        };
    };
    model::BgpStatus {
        enabled: true,
        speaker: Some(bgp_speaker(st.view())),
        last_fib_change_monotonic_ns: Some(
            shared
                .bgp_fib_done_ns
                .load(std::sync::atomic::Ordering::Acquire),
        ),
    }
}

fn bgp_speaker(v: bgp::speaker::View) -> model::BgpSpeaker {
    use bgp::speaker::State;
    model::BgpSpeaker {
        asn: v.asn,
        router_id: v.router_id.to_string(),
        prefixes_v4: v.prefixes_v4,
        prefixes_v6: v.prefixes_v6,
        paths: v.paths,
        fib_changes: v.fib_changes,
        neighbors: v
            .neighbors
            .into_iter()
            .map(|n| model::BgpNeighbor {
                address: n.address.to_string(),
                remote_as: n.remote_as,
                description: n.description,
                state: match n.state {
                    State::Idle => model::BgpState::Idle,
                    State::Connect => model::BgpState::Connect,
                    State::OpenSent => model::BgpState::OpenSent,
                    State::OpenConfirm => model::BgpState::OpenConfirm,
                    State::Established => model::BgpState::Established,
                },
                state_s: n.state_s,
                remote_router_id: n.remote_router_id.map(|r| r.to_string()),
                hold_time: n.hold_time,
                families: n
                    .families
                    .into_iter()
                    .map(|f| match f {
                        bgp::config::Family::Ipv4 => model::BgpFamily::Ipv4,
                        bgp::config::Family::Ipv6 => model::BgpFamily::Ipv6,
                    })
                    .collect(),
                prefixes: n.prefixes,
                updates_received: n.updates_received,
                prefixes_announced: n.prefixes_announced,
                prefixes_withdrawn: n.prefixes_withdrawn,
                treat_as_withdraw: n.treat_as_withdraw,
                attributes_discarded: n.attributes_discarded,
                as_loops: n.as_loops,
                unresolved: n.unresolved,
                route_refresh_sent: n.route_refresh_sent,
                notifications_sent: n.notifications_sent,
                notifications_received: n.notifications_received,
                established_transitions: n.established_transitions,
                last_error: n.last_error,
            })
            .collect(),
    }
}

fn reason_kind(k: dataplane::counters::Kind) -> model::ReasonKind {
    use dataplane::counters::Kind;
    match k {
        Kind::Drop => model::ReasonKind::Drop,
        Kind::Punt => model::ReasonKind::Punt,
        Kind::Info => model::ReasonKind::Info,
    }
}

/// `GET /v1/counters`: totals, every non-zero reason, features, workers, the sync's and
/// glean's counters, what the kernel forwarded.
pub fn counters(shared: &Shared) -> Result<model::Counters, ShowError> {
    let s = dataplane::worker::aggregate(shared.workers.iter());
    let features = shared.features.counters(&shared.workers);
    // Feature nodes' drops by their own reasons, after the engine's.
    let reasons = s
        .nonzero()
        .into_iter()
        .map(|(r, n)| model::ReasonCount {
            node: r.node().to_string(),
            reason: r.name().to_string(),
            kind: reason_kind(r.kind()),
            count: n,
            description: r.desc().to_string(),
        })
        .chain(features.iter().flat_map(|f| {
            f.drops
                .iter()
                .filter(|d| d.2 > 0)
                .map(|(r, desc, n)| model::ReasonCount {
                    node: f.feature.to_string(),
                    reason: r.to_string(),
                    kind: model::ReasonKind::Drop,
                    count: *n,
                    description: desc.to_string(),
                })
        }))
        .collect();
    let workers = shared
        .workers
        .iter()
        .map(|w| {
            let c = w.counters.snapshot();
            let nice = w.nice.load(std::sync::atomic::Ordering::Relaxed);
            model::WorkerCounters {
                id: w.id as u64,
                core: w.core.map(|c| c as u64),
                nice: (nice != dataplane::worker::NICE_UNKNOWN).then_some(nice),
                nice_error: w.nice_error.get().cloned(),
                rx: c.rx,
                tx: c.tx,
                forwarded: c.get(Reason::Ip4Forwarded) + c.get(Reason::Ip6Forwarded),
                vectors: c.vectors,
                idle_polls: c.idle_polls,
                sleeps: c.sleeps,
                busy_ns: c.busy_ns,
                busy_ns_per_packet: (c.rx > 0).then(|| c.busy_ns as f64 / c.rx as f64),
            }
        })
        .collect();
    let sync = shared.sync.lock().map_err(unavailable)?.stats();
    Ok(model::Counters {
        rx: s.rx,
        tx: s.tx,
        vectors: s.vectors,
        drops: s.drops(),
        punts: s.punts(),
        forwarded: s.get(Reason::Ip4Forwarded) + s.get(Reason::Ip6Forwarded),
        reasons,
        features: features
            .iter()
            .map(|f| model::FeatureCounters {
                feature: f.feature.to_string(),
                arc: f.arc.to_string(),
                packets: f.packets,
                drops: f
                    .drops
                    .iter()
                    .map(|(r, _, n)| (r.to_string(), *n))
                    .collect(),
            })
            .collect(),
        workers,
        sync,
        glean: shared.glean.snapshot(),
        kernel_forwarded: kernel_forwarded(),
        uptime_s: shared.started.elapsed().as_secs_f64(),
    })
}

/// Packets the kernel itself forwarded in this namespace (must stay 0: forwarding is the
/// fast path's job), from /proc/net/snmp and /proc/net/snmp6.
pub fn kernel_forwarded() -> model::KernelForwarded {
    model::KernelForwarded {
        ipv4: snmp_value("/proc/net/snmp", "Ip:", "ForwDatagrams"),
        ipv6: snmp6_value("Ip6OutForwDatagrams"),
    }
}

fn snmp_value(path: &str, prefix: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines = text.lines().filter(|l| l.starts_with(prefix));
    let header = lines.next()?;
    let values = lines.next()?;
    let i = header.split_whitespace().position(|h| h == field)?;
    values.split_whitespace().nth(i)?.parse().ok()
}

fn snmp6_value(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/snmp6").ok()?;
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next()? == field).then(|| it.next()?.parse().ok())?
    })
}

/// A `show` item the client asks for, and its path.
#[derive(Clone, Copy)]
enum Item {
    Interfaces,
    Routes,
    RoutesSummary,
    Neighbors,
    Counters,
    Bgp,
    Firewall,
    Conntrack,
    Nat,
    NatSessions,
    Ipsec,
    Ike,
    IkeChildSas,
    IkeSummary,
    Qos,
}

fn children(v: model::IkeView) -> Vec<model::IkeChildView> {
    v.sas.into_iter().flat_map(|s| s.children).collect()
}

fn item(show: &str, arg: Option<&str>) -> Result<(Item, String)> {
    Ok(match (show, arg) {
        ("routes", Some("summary")) => (Item::RoutesSummary, "/v1/routes/summary".into()),
        ("routes", Some(p)) => (
            Item::Routes,
            format!(
                "/v1/routes?{}",
                serde_urlencoded::to_string([("prefix", p)])?
            ),
        ),
        ("routes", None) => (Item::Routes, "/v1/routes".into()),
        ("interfaces", _) => (Item::Interfaces, "/v1/interfaces".into()),
        ("neighbors", _) => (Item::Neighbors, "/v1/neighbors".into()),
        ("counters", _) => (Item::Counters, "/v1/counters".into()),
        ("bgp", _) => (Item::Bgp, "/v1/bgp".into()),
        ("firewall", _) => (Item::Firewall, "/v1/firewall".into()),
        ("conntrack", None) => (Item::Conntrack, "/v1/conntrack".into()),
        ("conntrack", Some(a)) => (
            Item::Conntrack,
            format!(
                "/v1/conntrack?{}",
                serde_urlencoded::to_string([("address", a)])?
            ),
        ),
        ("nat", Some("sessions")) => (Item::NatSessions, "/v1/nat/sessions".into()),
        ("nat", None) => (Item::Nat, "/v1/nat".into()),
        ("nat", Some(a)) => anyhow::bail!("unknown item \"nat {a}\": expected nat or nat sessions"),
        ("ipsec", None | Some("sa") | Some("tunnels")) => (Item::Ipsec, "/v1/ipsec".into()),
        ("ike", None | Some("sa")) => (Item::Ike, "/v1/ike".into()),
        ("ike", Some("child-sa")) => (Item::IkeChildSas, "/v1/ike".into()),
        ("ike", Some("summary")) => (Item::IkeSummary, "/v1/ike/summary".into()),
        ("ike", Some(a)) => {
            anyhow::bail!("unknown item \"ike {a}\": expected ike sa, ike child-sa or ike summary")
        }
        ("ipsec", Some(a)) => {
            anyhow::bail!("unknown item \"ipsec {a}\": expected ipsec, ipsec sa or ipsec tunnels")
        }
        ("qos", _) => (Item::Qos, "/v1/qos".into()),
        (other, _) => anyhow::bail!("unknown item {other:?}: expected {ITEMS}"),
    })
}

/// Client side: ask the daemon at `socket` for a `show` item (see [`show`]) over the
/// HTTP API and return its data, typed.
pub fn request(socket: &Path, show: &str, arg: Option<&str>) -> Result<Shown> {
    request_with(&Client::new(Endpoint::Unix(socket.into())), show, arg)
}

/// [`request`] through any client (TCP with a token, say).
pub fn request_with(client: &Client, show: &str, arg: Option<&str>) -> Result<Shown> {
    let (item, path) = item(show, arg)?;
    Ok(match item {
        Item::Interfaces => Shown::Interfaces(client.get_as(&path)?),
        Item::Routes => Shown::Routes(client.get_as(&path)?),
        Item::RoutesSummary => Shown::RoutesSummary(client.get_as(&path)?),
        Item::Neighbors => Shown::Neighbors(client.get_as(&path)?),
        Item::Counters => Shown::Counters(Box::new(client.get_as(&path)?)),
        Item::Bgp => Shown::Bgp(client.get_as(&path)?),
        Item::Firewall => Shown::Firewall(client.get_as(&path)?),
        Item::Conntrack => Shown::Conntrack(client.get_as(&path)?),
        Item::Nat => Shown::Nat(client.get_as(&path)?),
        Item::NatSessions => Shown::NatSessions(client.get_as(&path)?),
        Item::Ipsec => Shown::Ipsec(client.get_as(&path)?),
        Item::Ike => Shown::Ike(client.get_as(&path)?),
        Item::IkeChildSas => Shown::IkeChildSas(children(client.get_as(&path)?)),
        Item::IkeSummary => Shown::IkeSummary(client.get_as(&path)?),
        Item::Qos => Shown::Qos(client.get_as(&path)?),
    })
}

/// [`request`], as the JSON the daemon sent: the wire format, for the tests and the lab's
/// scripts that read it by key.
pub fn request_json(socket: &Path, show: &str, arg: Option<&str>) -> Result<serde_json::Value> {
    let (_, path) = item(show, arg)?;
    Client::new(Endpoint::Unix(socket.into())).get(&path)
}

/// Client side: the NAT sessions that match (`GET /v1/nat/sessions`): an IPv4 address,
/// prefix or range any of their addresses lies in, at most `limit`.
pub fn nat_sessions_with(
    client: &Client,
    address: Option<&str>,
    limit: Option<usize>,
) -> Result<model::NatSessionList> {
    let limit = limit.map(|l| l.to_string());
    let q: Vec<(&str, &str)> = [("address", address), ("limit", limit.as_deref())]
        .into_iter()
        .filter_map(|(k, v)| Some((k, v?)))
        .collect();
    client.get_as(&format!(
        "/v1/nat/sessions?{}",
        serde_urlencoded::to_string(&q)?
    ))
}

/// Client side: `show ike sa|child-sa PEER`: one peer's IKE SAs (`GET /v1/ike?peer=`).
pub fn ike_peer_with(client: &Client, arg: Option<&str>, peer: &str) -> Result<Shown> {
    let path = format!("/v1/ike?{}", serde_urlencoded::to_string([("peer", peer)])?);
    Ok(match arg {
        None | Some("sa") => Shown::Ike(client.get_as(&path)?),
        Some("child-sa") => Shown::IkeChildSas(children(client.get_as(&path)?)),
        Some(a) => anyhow::bail!("unexpected {peer:?} after \"ike {a}\": only `show ike sa PEER` and `show ike child-sa PEER` take a peer"),
    })
}

/// Client side: remove the flows that match (`DELETE /v1/conntrack`); each condition is
/// optional.
pub fn conntrack_flush_with(
    client: &Client,
    address: Option<&str>,
    protocol: Option<&str>,
    port: Option<u16>,
) -> Result<model::ConntrackFlushed> {
    let port = port.map(|p| p.to_string());
    let q: Vec<(&str, &str)> = [
        ("address", address),
        ("protocol", protocol),
        ("port", port.as_deref()),
    ]
    .into_iter()
    .filter_map(|(k, v)| Some((k, v?)))
    .collect();
    let path = format!("/v1/conntrack?{}", serde_urlencoded::to_string(&q)?);
    client.call("DELETE", &path, None)?.ok_as()
}
