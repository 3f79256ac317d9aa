//! NAT as the API shows it: `GET /v1/nat` (rules and tables) and `GET /v1/nat/sessions`,
//! typed in [`crate::model`], rendered by [`crate::render`].

use std::net::Ipv4Addr;

use firewall::nat::config::{NatConfig, SourceTranslation};
use firewall::nat::table::{kind, proto, tcp_seen, Key4};
use firewall::nat::{DumpError, SessionFilter};

use crate::features::Features;
use crate::model::{NatRuleView, NatSession, NatSessionList, NatView, NatWorkerView};

fn matches(
    iface: (&str, &Option<String>),
    protocol: &Option<firewall::config::Protocol>,
    src: &[String],
    dst: &[String],
    ports: [(&str, &firewall::config::PortList); 2],
) -> String {
    let mut v = Vec::new();
    if let Some(i) = iface.1 {
        v.push(format!("{} {i}", iface.0));
    }
    if let Some(p) = protocol {
        v.push(format!("protocol {}", p.name()));
    }
    if !src.is_empty() {
        v.push(format!("source {}", src.join(",")));
    }
    if !dst.is_empty() {
        v.push(format!("destination {}", dst.join(",")));
    }
    for (n, p) in ports {
        if !p.is_empty() {
            v.push(format!("{n} {p}"));
        }
    }
    if v.is_empty() {
        "any".into()
    } else {
        v.join(" ")
    }
}

/// `GET /v1/nat`.
pub fn view(features: &Features) -> NatView {
    let cfg: NatConfig = features.nat_config();
    let rules = features.nat.rules.load();
    let hits = |i: usize| {
        rules
            .hits
            .get(i)
            .map_or(0, |h| h.load(std::sync::atomic::Ordering::Relaxed))
    };
    let mut out = Vec::new();
    for (i, r) in cfg.source.iter().enumerate() {
        out.push(NatRuleView {
            kind: "source".into(),
            index: i as u32 + 1,
            matches: matches(
                ("outbound_interface", &r.outbound_interface),
                &r.protocol,
                &r.source,
                &r.destination,
                [
                    ("source_port", &r.source_port),
                    ("destination_port", &r.destination_port),
                ],
            ),
            translation: match &r.translation {
                SourceTranslation::Keyword(k) => k.clone(),
                SourceTranslation::Pool(p) => p.join(","),
            },
            comment: r.comment.clone(),
            sessions: hits(i),
        });
    }
    for (i, r) in cfg.destination.iter().enumerate() {
        out.push(NatRuleView {
            kind: "destination".into(),
            index: i as u32 + 1,
            matches: matches(
                ("inbound_interface", &r.inbound_interface),
                &r.protocol,
                &r.source,
                &r.destination,
                [
                    ("destination_port", &r.destination_port),
                    ("", &Default::default()),
                ],
            ),
            translation: match r.translation_port {
                Some(p) => format!("{}:{p}", r.translation_address),
                None => r.translation_address.clone(),
            },
            comment: r.comment.clone(),
            sessions: hits(cfg.source.len() + i),
        });
    }
    NatView {
        rules: out,
        workers: features
            .nat
            .stats()
            .into_iter()
            .enumerate()
            .map(|(w, s)| NatWorkerView {
                worker: w as u32,
                sessions: s.sessions,
                max_sessions: s.max,
                mappings: s.mappings,
                created: s.created,
                expired: s.expired,
                refused_full: s.full,
                refused_no_port: s.no_port,
                collisions: s.collision,
                ports: [s.port_lo as u16, s.port_hi as u16],
                memory_bytes: s.memory_bytes,
            })
            .collect(),
        busy: features.nat.busy(),
    }
}

/// The session filter of `address` (an IPv4 address or prefix), `protocol` and `port`.
pub fn filter(
    address: Option<&str>,
    protocol: Option<&str>,
    port: Option<u16>,
) -> Result<SessionFilter, String> {
    let addr = address
        .map(firewall::nat::config::parse_v4_range)
        .transpose()?;
    let proto = protocol
        .map(firewall::config::Protocol::parse)
        .transpose()?
        .map(|p| p.0);
    Ok(SessionFilter { addr, proto, port })
}

/// Most sessions one listing returns.
pub const MAX_LIST: usize = 100_000;

fn endpoint(k: &Key4, src: bool) -> String {
    let (a, p) = if src {
        (k.src, k.sport)
    } else {
        (k.dst, k.dport)
    };
    format!("{}:{p}", Ipv4Addr::from(a))
}

/// `GET /v1/nat/sessions`.
pub fn sessions(
    features: &Features,
    filter: SessionFilter,
    limit: usize,
) -> Result<NatSessionList, DumpError> {
    let (recs, truncated) = features.nat.sessions(
        filter,
        limit.min(MAX_LIST),
        std::time::Duration::from_secs(5),
    )?;
    Ok(NatSessionList {
        truncated,
        sessions: recs
            .iter()
            .map(|r| {
                let s = &r.session;
                let mut tcp = Vec::new();
                if s.o.proto == proto::TCP {
                    for (bit, name) in [
                        (tcp_seen::SYN_O, "syn"),
                        (tcp_seen::SYN_R, "syn-ack"),
                        (tcp_seen::FIN_O | tcp_seen::FIN_R, "fin"),
                        (tcp_seen::RST, "rst"),
                    ] {
                        if s.seen & bit != 0 {
                            tcp.push(name);
                        }
                    }
                }
                NatSession {
                    worker: r.worker as u32,
                    protocol: firewall::config::Protocol(s.o.proto).name(),
                    kind: match (s.kind & kind::SNAT != 0, s.kind & kind::DNAT != 0) {
                        (true, true) => "snat+dnat",
                        (false, true) => "dnat",
                        _ => "snat",
                    }
                    .into(),
                    inside_src: endpoint(&s.o, true),
                    inside_dst: endpoint(&s.o, false),
                    outside_src: endpoint(&s.t, true),
                    outside_dst: endpoint(&s.t, false),
                    tcp: tcp.join(","),
                    expires_s: r.expires_in_ns as f64 / 1e9,
                }
            })
            .collect(),
    })
}
