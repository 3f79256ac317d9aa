//! The firewall as the API shows it (`GET /v1/firewall`, typed in [`crate::model`],
//! rendered by [`crate::render`]), and its log: records the workers' filter nodes send, drained by the daemon
//! loop into the daemon's log.

use crate::features::Features;
use crate::model::{
    ConntrackFlow, ConntrackList, ConntrackView, FilterView, FirewallView, RuleView,
};

fn describe(r: &firewall::config::RuleConfig) -> String {
    let mut v: Vec<String> = Vec::new();
    if let Some(f) = r.family {
        v.push(format!(
            "family {}",
            if f == firewall::config::Family::Ipv4 {
                "ipv4"
            } else {
                "ipv6"
            }
        ));
    }
    if let Some(p) = r.protocol {
        v.push(format!("protocol {}", p.name()));
    }
    if !r.source.is_empty() {
        v.push(format!("source {}", r.source.join(",")));
    }
    if !r.destination.is_empty() {
        v.push(format!("destination {}", r.destination.join(",")));
    }
    if !r.source_port.is_empty() {
        v.push(format!("source_port {}", r.source_port));
    }
    if !r.destination_port.is_empty() {
        v.push(format!("destination_port {}", r.destination_port));
    }
    if let Some(t) = r.icmp_type {
        v.push(format!("icmp_type {t}"));
    }
    if let Some(c) = r.icmp_code {
        v.push(format!("icmp_code {c}"));
    }
    if !r.tcp_flags.is_empty() {
        v.push(format!("tcp_flags {}", r.tcp_flags.join(",")));
    }
    if !r.dscp.is_empty() {
        let d: Vec<String> = r.dscp.iter().map(|d| d.to_string()).collect();
        v.push(format!("dscp {}", d.join(",")));
    }
    if !r.state.is_empty() {
        v.push(format!("state {}", r.state.join(",")));
    }
    if let Some(d) = r.set_dscp {
        v.push(format!("set_dscp {d}"));
    }
    if r.log {
        v.push("log".into());
    }
    if v.is_empty() {
        "any".into()
    } else {
        v.join(" ")
    }
}

/// What the running rules are, with their counters.
pub fn view(features: &Features) -> FirewallView {
    let rs = features.firewall.rules.load();
    FirewallView {
        filters: rs
            .filters
            .iter()
            .map(|f| {
                let c = rs.counts(f);
                FilterView {
                    name: f.name.clone(),
                    hook: f.hook.name().into(),
                    interfaces: f.interfaces.clone(),
                    policy: f.policy.name().into(),
                    policy_packets: c.policy.0,
                    policy_bytes: c.policy.1,
                    classifier_bytes: (f.v4.stats().bytes + f.v6.stats().bytes) as u64,
                    rules: f
                        .source
                        .iter()
                        .enumerate()
                        .map(|(i, r)| {
                            let (packets, bytes) = c.rules.get(i).copied().unwrap_or_default();
                            RuleView {
                                index: i as u32 + 1,
                                action: r.action.map_or("?", |a| a.name()).into(),
                                matches: describe(r),
                                comment: r.comment.clone(),
                                packets,
                                bytes,
                            }
                        })
                        .collect(),
                }
            })
            .collect(),
        log_suppressed: features
            .firewall
            .log_suppressed
            .load(std::sync::atomic::Ordering::Relaxed),
        compile_us: rs.compile_ns / 1000,
        conntrack: conntrack_view(features),
    }
}

/// Write the log records the workers sent into the daemon's log (target `firewall`), at
/// most `max` per call. `names` are the interfaces by index.
pub fn drain_logs(features: &Features, names: &[String], max: usize) {
    let recs = features.firewall.drain_logs(max);
    if recs.is_empty() {
        return;
    }
    let rs = features.firewall.rules.load();
    for r in recs {
        let addr = |a: [u8; 16]| -> std::net::IpAddr {
            if r.v6 {
                std::net::Ipv6Addr::from(a).into()
            } else {
                std::net::Ipv4Addr::new(a[12], a[13], a[14], a[15]).into()
            }
        };
        let filter = rs
            .filters
            .get(r.filter as usize)
            .map_or("?", |f| f.name.as_str());
        let rule = r.rule.map_or("policy".to_string(), |i| (i + 1).to_string());
        tracing::info!(
            target: "firewall",
            filter,
            rule = %rule,
            action = r.action.name(),
            hook = r.hook.name(),
            interface = names.get(r.iface as usize).map_or("?", |n| n.as_str()),
            src = %addr(r.src),
            dst = %addr(r.dst),
            proto = r.proto,
            sport = r.sport,
            dport = r.dport,
            len = r.len,
            "firewall {} {} {}:{} -> {}:{} proto {}",
            r.action.name(),
            filter,
            addr(r.src),
            r.sport,
            addr(r.dst),
            r.dport,
            r.proto
        );
    }
}

/// Which flows: an address or prefix either end lies in, a protocol, a port either end
/// uses (each optional).
pub fn ct_filter(
    address: Option<&str>,
    protocol: Option<&str>,
    port: Option<u16>,
) -> Result<firewall::node::CtFilter, String> {
    let addr = match address {
        None => None,
        Some(a) => {
            use firewall::classify::Addr;
            let n = firewall::config::parse_net(a)?;
            Some(match n.addr {
                std::net::IpAddr::V4(x) => {
                    let (lo, hi) = x.prefix_range(n.len)?;
                    (u128::from(lo), u128::from(hi), false)
                }
                std::net::IpAddr::V6(x) => {
                    let (lo, hi) = x.prefix_range(n.len)?;
                    (lo, hi, true)
                }
            })
        }
    };
    let proto = protocol
        .map(firewall::config::Protocol::parse)
        .transpose()?
        .map(|p| p.0);
    Ok(firewall::node::CtFilter { addr, proto, port })
}

/// Most flows one listing returns.
pub const MAX_LIST: usize = 100_000;

/// The flows `filter` matches, at most `limit`.
pub fn conntrack_list(
    features: &Features,
    filter: firewall::node::CtFilter,
    limit: usize,
) -> Result<ConntrackList, firewall::node::ScanError> {
    let (recs, truncated, _) = features.firewall.conntrack_scan(
        false,
        filter,
        limit.min(MAX_LIST),
        std::time::Duration::from_secs(10),
    )?;
    Ok(ConntrackList {
        truncated,
        flows: recs
            .iter()
            .map(|r| {
                let t = &r.info.tuple;
                let addr = |a: u128| -> String {
                    if t.v6 {
                        std::net::Ipv6Addr::from(a).to_string()
                    } else {
                        std::net::Ipv4Addr::from(a as u32).to_string()
                    }
                };
                ConntrackFlow {
                    protocol: firewall::config::Protocol(t.proto).name(),
                    src: addr(t.src),
                    dst: addr(t.dst),
                    sport: t.sport,
                    dport: t.dport,
                    state: r.info.state.name().to_string(),
                    seen_reply: r.info.seen_reply,
                    assured: r.info.assured,
                    expires_s: r.expires_in_ns as f64 / 1e9,
                    worker: r.worker,
                }
            })
            .collect(),
    })
}

/// Remove the flows `filter` matches; how many went.
pub fn conntrack_flush(
    features: &Features,
    filter: firewall::node::CtFilter,
) -> Result<u64, firewall::node::ScanError> {
    let (_, _, removed) =
        features
            .firewall
            .conntrack_scan(true, filter, 0, std::time::Duration::from_secs(10))?;
    Ok(removed)
}

/// Connection tracking's figures, summed over the workers' tables (`None`: tracking off).
pub fn conntrack_view(features: &Features) -> Option<ConntrackView> {
    (!features.firewall.conntrack.is_empty()).then(|| {
        features.firewall.conntrack.iter().map(|c| c.stats()).fold(
            ConntrackView::default(),
            |a, s| ConntrackView {
                flows: a.flows + s.flows,
                max: a.max + s.max,
                created: a.created + s.created,
                refused: a.refused + s.refused,
                early_dropped: a.early_dropped + s.early_dropped,
                expired: a.expired + s.expired,
                invalid: a.invalid + s.invalid,
                memory_bytes: a.memory_bytes + s.memory_bytes,
            },
        )
    })
}
