//! What the API shows: the data behind `GET /v1/interfaces`, `/v1/routes`,
//! `/v1/routes/summary`, `/v1/neighbors` and `/v1/counters` (served by [`crate::http`]),
//! and [`request`], the client call the CLI, the lab and the tests use.

use std::path::Path;

use anyhow::Result;
use dataplane::Reason;
use serde_json::{json, Value};

use crate::client::{Client, Endpoint};
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

/// The data of one `show` item: `interfaces`, `routes` (with `arg` a prefix or an
/// address, or `summary`), `neighbors`, `counters` or `bgp`.
pub fn show(shared: &Shared, what: &str, arg: Option<&str>) -> Result<Value, ShowError> {
    if what == "bgp" {
        // The speaker's own status: no sync lock needed.
        return Ok(match shared.bgp.get() {
            Some(st) => json!({
                "enabled": true,
                "speaker": st.view(),
                "last_fib_change_monotonic_ns": shared
                    .bgp_fib_done_ns
                    .load(std::sync::atomic::Ordering::Acquire),
            }),
            None => json!({"enabled": false}),
        });
    }
    if what == "firewall" {
        return serde_json::to_value(crate::fwview::view(&shared.features))
            .map_err(|e| ShowError::Unavailable(format!("firewall view: {e}")));
    }
    let sync = shared.sync.lock().map_err(unavailable)?;
    match what {
        "interfaces" => {
            let ifaces = sync.interfaces();
            let held_down = shared.held_down.load();
            let link = |port: usize| {
                let l = sync.port_link(port, &held_down);
                (if l.admin_up { "up" } else { "down" }, l.oper, l.reason)
            };
            let v: Vec<Value> = shared
                .ports
                .iter()
                .map(|f| {
                    let info = ifaces.ports.get(f.port as usize);
                    let g = |field| shared.port_total(f.port, field);
                    let (admin, oper, why) = link(f.port as usize);
                    json!({
                        "port": f.port, "name": f.name, "ifindex": f.ifindex, "backend": f.backend,
                        "admin": admin, "oper": oper, "down_reason": why,
                        "mac": info.map(|i| i.mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")),
                        "mtu": info.map(|i| i.mtu),
                        "ipv4": info.map(|i| i.ip4.iter().map(|a| std::net::Ipv4Addr::from(*a).to_string()).collect::<Vec<_>>()),
                        "ipv6": info.map(|i| i.ip6.iter().map(|a| std::net::Ipv6Addr::from(*a).to_string()).collect::<Vec<_>>()),
                        "rx_packets": g(|c| &c.rx_packets), "rx_bytes": g(|c| &c.rx_bytes), "tx_packets": g(|c| &c.tx_packets),
                        "tx_bytes": g(|c| &c.tx_bytes), "rx_drops": g(|c| &c.rx_drops), "tx_errors": g(|c| &c.tx_errors),
                        "rx_csum_completed": g(|c| &c.rx_csum_completed), "rx_gso_split": g(|c| &c.rx_gso_split),
                        "features": shared.features.enabled(f.port),
                    })
                })
                .collect();
            // Then the VLAN sub-interfaces, with what the fast path received and sent on them.
            let first = shared.ports.len();
            let subifs = ifaces.ports.iter().enumerate().skip(first).filter_map(|(i, info)| {
                let t = info.vlan?;
                let c = shared.subif_total(i - first);
                let parent = ifaces.ports.get(t.parent as usize).map(|p| p.name.clone());
                let (admin, oper, why) = link(i);
                Some(json!({
                    "port": i, "name": info.name, "ifindex": sync.ifindex_of(&info.name),
                    "admin": admin, "oper": oper, "down_reason": why,
                    "backend": format!("vlan {} on {}", t.describe(), parent.as_deref().unwrap_or("?")),
                    "parent": parent, "vlan": {"tpid": format!("{:#06x}", t.tpid), "id": t.outer, "inner_id": (t.inner != 0).then_some(t.inner)},
                    "mac": info.mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":"),
                    "mtu": info.mtu,
                    "ipv4": info.ip4.iter().map(|a| std::net::Ipv4Addr::from(*a).to_string()).collect::<Vec<_>>(),
                    "ipv6": info.ip6.iter().map(|a| std::net::Ipv6Addr::from(*a).to_string()).collect::<Vec<_>>(),
                    "rx_packets": c.rx_packets, "rx_bytes": c.rx_bytes, "tx_packets": c.tx_packets, "tx_bytes": c.tx_bytes,
                    "features": shared.features.enabled(i as u16),
                }))
            });
            Ok(json!(v.into_iter().chain(subifs).collect::<Vec<_>>()))
        }
        "routes" if arg == Some("summary") => {
            let (v4, v6) = sync.route_counts();
            let (route, neighbor, local, bgp) = sync.source_counts();
            let m = sync.writer().memory();
            let st = sync.stats();
            Ok(json!({
                "ipv4": v4, "ipv6": v6,
                "by_source": {"route": route, "neighbor": neighbor, "local": local, "bgp": bgp},
                "kernel_routes_mirrored": sync.mirrored_routes(),
                "fib_memory_bytes": {
                    "ipv4_tables": m.v4_table_bytes, "ipv6_tables": m.v6_table_bytes,
                    "route_store": m.rib_bytes, "next_hops": m.nexthop_bytes,
                    "total": m.v4_table_bytes + m.v6_table_bytes + m.rib_bytes + m.nexthop_bytes,
                },
                "netlink_events": st.events, "resyncs": st.resyncs, "fib_errors": st.fib_errors,
                "bgp_changes": st.bgp_changes, "bgp_unresolved": st.bgp_unresolved,
            }))
        }
        "routes" => {
            let routes = sync.routes(arg).map_err(ShowError::BadRequest)?;
            let (v4, v6) = sync.route_counts();
            Ok(json!({"ipv4": v4, "ipv6": v6, "routes": routes}))
        }
        "neighbors" => Ok(json!(sync.neighbors())),
        "counters" => {
            drop(sync);
            let s = dataplane::worker::aggregate(shared.workers.iter());
            let features = shared.features.counters(&shared.workers);
            // Feature nodes' drops by their own reasons, after the engine's.
            let reasons: Vec<Value> = s
                .nonzero()
                .into_iter()
                .map(|(r, n)| json!({"node": r.node(), "reason": r.name(), "kind": r.kind().name(), "count": n, "description": r.desc()}))
                .chain(features.iter().flat_map(|f| {
                    f.drops.iter().filter(|d| d.2 > 0).map(|(r, desc, n)| {
                        json!({"node": f.feature, "reason": r, "kind": "drop", "count": n, "description": desc})
                    })
                }))
                .collect();
            let sync = shared.sync.lock().map_err(unavailable)?;
            Ok(json!({
                "rx": s.rx, "tx": s.tx, "vectors": s.vectors, "drops": s.drops(), "punts": s.punts(),
                "forwarded": s.get(Reason::Ip4Forwarded) + s.get(Reason::Ip6Forwarded),
                "reasons": reasons,
                "features": features.iter().map(|f| json!({
                    "feature": f.feature, "arc": f.arc, "packets": f.packets,
                    "drops": f.drops.iter().map(|(r, _, n)| (r.to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
                })).collect::<Vec<_>>(),
                "workers": shared.workers.iter().map(|w| {
                    let c = w.counters.snapshot();
                    let nice = w.nice.load(std::sync::atomic::Ordering::Relaxed);
                    json!({"id": w.id, "core": w.core,
                           "nice": (nice != dataplane::worker::NICE_UNKNOWN).then_some(nice),
                           "nice_error": w.nice_error.get(),
                           "rx": c.rx, "tx": c.tx,
                           "forwarded": c.get(Reason::Ip4Forwarded) + c.get(Reason::Ip6Forwarded),
                           "vectors": c.vectors, "idle_polls": c.idle_polls, "sleeps": c.sleeps,
                           "busy_ns": c.busy_ns,
                           "busy_ns_per_packet": (c.rx > 0).then(|| c.busy_ns as f64 / c.rx as f64)})
                }).collect::<Vec<_>>(),
                "sync": sync.stats(),
                "glean": shared.glean.json(),
                "kernel_forwarded": kernel_forwarded(),
                "uptime_s": shared.started.elapsed().as_secs_f64(),
            }))
        }
        other => Err(ShowError::BadRequest(format!(
            "unknown item {other:?}: expected interfaces, routes, neighbors, counters, bgp or firewall"
        ))),
    }
}

/// Packets the kernel itself forwarded in this namespace (must stay 0: forwarding is the
/// fast path's job), from /proc/net/snmp and /proc/net/snmp6.
pub fn kernel_forwarded() -> Value {
    json!({"ipv4": snmp_value("/proc/net/snmp", "Ip:", "ForwDatagrams"), "ipv6": snmp6_value("Ip6OutForwDatagrams")})
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

/// Client side: ask the daemon at `socket` for a `show` item (see [`show`]) over the
/// HTTP API and return its data.
pub fn request(socket: &Path, show: &str, arg: Option<&str>) -> Result<Value> {
    request_with(&Client::new(Endpoint::Unix(socket.into())), show, arg)
}

/// [`request`] through any client (TCP with a token, say).
pub fn request_with(client: &Client, show: &str, arg: Option<&str>) -> Result<Value> {
    let path = match (show, arg) {
        ("routes", Some("summary")) => "/v1/routes/summary".to_string(),
        ("routes", Some(p)) => format!(
            "/v1/routes?{}",
            serde_urlencoded::to_string([("prefix", p)])?
        ),
        ("interfaces" | "routes" | "neighbors" | "counters" | "bgp" | "firewall", _) => {
            format!("/v1/{show}")
        }
        (other, _) => anyhow::bail!(
            "unknown item {other:?}: expected interfaces, routes, neighbors, counters, bgp or firewall"
        ),
    };
    client.get(&path)
}
