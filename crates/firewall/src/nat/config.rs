//! NAT44 as the config file writes it: `[nat]` with ordered source rules (SNAT,
//! masquerade, exclusions) and destination rules (DNAT, port forwards), in the shape of
//! VyOS's `nat source rule` / `nat destination rule`. The first matching rule of each list
//! decides, for the first packet of a flow; the flow keeps that translation until it ends.
//!
//! ```toml
//! [[nat.source]]
//! outbound_interface = "eth1"
//! source = ["10.0.0.0/8"]
//! translation = "masquerade"        # or "exclude", or addresses: ["203.0.113.8-203.0.113.15"]
//!
//! [[nat.destination]]
//! inbound_interface = "eth1"
//! destination = ["203.0.113.1"]
//! protocol = "tcp"
//! destination_port = 8080
//! translation_address = "10.0.0.2"
//! translation_port = 80
//! ```

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use super::table::Timeouts;
use crate::config::{parse_net, PortList, Protocol, ICMP, TCP, UDP};

/// `[nat]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NatConfig {
    /// Source rules (`[[nat.source]]`), first match wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source: Vec<SourceRule>,
    /// Destination rules (`[[nat.destination]]`), first match wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destination: Vec<DestinationRule>,
    /// Sessions each worker's table holds (allocated at start, about 140 bytes each).
    /// Default 262,144; a change needs a restart.
    #[serde(default = "default_max_sessions")]
    pub max_sessions: usize,
    /// Idle timeouts, seconds (`[nat.timeouts]`: `tcp_established`, `tcp_transitory`,
    /// `udp`, `icmp`).
    #[serde(default)]
    pub timeouts: Timeouts,
}

fn default_max_sessions() -> usize {
    262_144
}

/// Fewest and most sessions a worker's table may be given.
pub const MAX_SESSIONS_RANGE: std::ops::RangeInclusive<usize> = 1024..=50_000_000;

impl Default for NatConfig {
    fn default() -> Self {
        NatConfig {
            source: Vec::new(),
            destination: Vec::new(),
            max_sessions: default_max_sessions(),
            timeouts: Timeouts::default(),
        }
    }
}

/// What a source rule does.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum SourceTranslation {
    /// `"masquerade"` (the egress interface's first IPv4 address) or `"exclude"` (no
    /// translation: later rules are not consulted).
    Keyword(String),
    /// A pool: addresses, `A-B` ranges and prefixes.
    Pool(Vec<String>),
}

/// `[[nat.source]]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SourceRule {
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// The interface (`[[port]]` or `[[vlan]]`) the flow leaves by; absent: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outbound_interface: Option<String>,
    /// `tcp`, `udp` or `icmp`; absent: any (what NAT cannot translate is then dropped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
    /// Source prefixes (any of them); empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source: Vec<String>,
    /// Destination prefixes; empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destination: Vec<String>,
    /// Source ports (with `protocol` tcp or udp).
    #[serde(default, skip_serializing_if = "PortList::is_empty")]
    pub source_port: PortList,
    /// Destination ports (with `protocol` tcp or udp).
    #[serde(default, skip_serializing_if = "PortList::is_empty")]
    pub destination_port: PortList,
    /// `"masquerade"`, `"exclude"`, or the pool's addresses.
    pub translation: SourceTranslation,
}

/// `[[nat.destination]]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DestinationRule {
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// The interface the flow arrives on; absent: any (hairpinning from the inside too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbound_interface: Option<String>,
    /// `tcp`, `udp` or `icmp`; absent: all three.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
    /// Source prefixes; empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source: Vec<String>,
    /// Destination prefixes (the public address); empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destination: Vec<String>,
    /// Destination ports (with `protocol` tcp or udp).
    #[serde(default, skip_serializing_if = "PortList::is_empty")]
    pub destination_port: PortList,
    /// The inside address the flow goes to.
    pub translation_address: String,
    /// The inside port (with `protocol` tcp or udp); absent: the port is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub translation_port: Option<u16>,
}

/// An IPv4 prefix or range as an inclusive range of addresses.
pub fn parse_v4_range(s: &str) -> Result<(u32, u32), String> {
    if let Some((a, b)) = s.split_once('-') {
        let p = |x: &str| {
            x.trim()
                .parse::<Ipv4Addr>()
                .map(u32::from)
                .map_err(|_| format!("{s:?}: {x:?} is not an IPv4 address"))
        };
        let (a, b) = (p(a)?, p(b)?);
        if a > b {
            return Err(format!("address range {s:?} is reversed"));
        }
        return Ok((a, b));
    }
    let n = parse_net(s)?;
    match n.addr {
        std::net::IpAddr::V4(a) => {
            let lo = u32::from(a);
            let span = u32::MAX.checked_shr(u32::from(n.len)).unwrap_or(0);
            Ok((lo, lo | span))
        }
        std::net::IpAddr::V6(_) => Err(format!("{s:?} is IPv6: NAT translates IPv4 (NAT44) only")),
    }
}

fn is_false_proto(p: &Option<Protocol>) -> bool {
    p.is_some_and(|p| !matches!(p.0, TCP | UDP | ICMP))
}

fn check_match(
    p: &str,
    protocol: &Option<Protocol>,
    lists: [(&str, &Vec<String>); 2],
    ports: [(&str, &PortList); 2],
    add: &mut impl FnMut(String, String),
) {
    if is_false_proto(protocol) {
        add(
            format!("{p}.protocol"),
            format!(
                "NAT translates tcp, udp and icmp only, not {}",
                protocol.map(|x| x.name()).unwrap_or_default()
            ),
        );
    }
    for (name, list) in lists {
        for (k, a) in list.iter().enumerate() {
            if let Err(e) = parse_v4_range(a) {
                add(format!("{p}.{name}[{k}]"), e);
            }
        }
    }
    for (name, ports) in ports {
        if !ports.is_empty() && !protocol.is_some_and(|x| matches!(x.0, TCP | UDP)) {
            add(
                format!("{p}.{name}"),
                "ports need protocol = \"tcp\" or \"udp\"".into(),
            );
        }
    }
}

impl NatConfig {
    /// Whether it is the default (nothing configured).
    pub fn is_default(&self) -> bool {
        *self == NatConfig::default()
    }

    /// Whether it has any rule.
    pub fn has_rules(&self) -> bool {
        !self.source.is_empty() || !self.destination.is_empty()
    }

    /// Everything wrong with it, as (dotted path under `nat`, message); `interfaces` are
    /// the names rules may bind.
    pub fn validate(&self, interfaces: &[&str]) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut add = |p: String, m: String| out.push((p, m));
        if !MAX_SESSIONS_RANGE.contains(&self.max_sessions) {
            add(
                "nat.max_sessions".into(),
                format!(
                    "{} is out of range: {}-{} sessions per worker",
                    self.max_sessions,
                    MAX_SESSIONS_RANGE.start(),
                    MAX_SESSIONS_RANGE.end()
                ),
            );
        }
        let t = &self.timeouts;
        for (name, v) in [
            ("tcp_established", t.tcp_established),
            ("tcp_transitory", t.tcp_transitory),
            ("udp", t.udp),
            ("icmp", t.icmp),
        ] {
            if v == 0 || v > 604_800 {
                add(
                    format!("nat.timeouts.{name}"),
                    format!("{v} is out of range: 1-604800 seconds"),
                );
            }
        }
        let known = |n: &str| interfaces.contains(&n);
        for (i, r) in self.source.iter().enumerate() {
            let p = format!("nat.source[{i}]");
            if let Some(n) = &r.outbound_interface {
                if !known(n) {
                    add(
                        format!("{p}.outbound_interface"),
                        format!("{n:?} is not a [[port]] or [[vlan]]"),
                    );
                }
            }
            check_match(
                &p,
                &r.protocol,
                [("source", &r.source), ("destination", &r.destination)],
                [
                    ("source_port", &r.source_port),
                    ("destination_port", &r.destination_port),
                ],
                &mut add,
            );
            match &r.translation {
                SourceTranslation::Keyword(k) if k == "masquerade" || k == "exclude" => {}
                SourceTranslation::Keyword(k) => add(
                    format!("{p}.translation"),
                    format!(
                        "{k:?} is not a translation: \"masquerade\", \"exclude\", or a list of addresses"
                    ),
                ),
                SourceTranslation::Pool(list) if list.is_empty() => add(
                    format!("{p}.translation"),
                    "the pool is empty: give addresses, ranges or prefixes".into(),
                ),
                SourceTranslation::Pool(list) => {
                    for (k, a) in list.iter().enumerate() {
                        match parse_v4_range(a) {
                            Err(e) => add(format!("{p}.translation[{k}]"), e),
                            Ok((0, _)) => add(
                                format!("{p}.translation[{k}]"),
                                format!("{a:?}: 0.0.0.0 cannot be a source"),
                            ),
                            Ok(_) => {}
                        }
                    }
                }
            }
        }
        for (i, r) in self.destination.iter().enumerate() {
            let p = format!("nat.destination[{i}]");
            if let Some(n) = &r.inbound_interface {
                if !known(n) {
                    add(
                        format!("{p}.inbound_interface"),
                        format!("{n:?} is not a [[port]] or [[vlan]]"),
                    );
                }
            }
            check_match(
                &p,
                &r.protocol,
                [("source", &r.source), ("destination", &r.destination)],
                [
                    ("destination_port", &r.destination_port),
                    ("destination_port", &PortList::default()),
                ],
                &mut add,
            );
            match r.translation_address.parse::<Ipv4Addr>() {
                Ok(a) if a.is_unspecified() || a.is_broadcast() || a.is_multicast() => add(
                    format!("{p}.translation_address"),
                    format!("{a} cannot be a destination"),
                ),
                Ok(_) => {}
                Err(_) => add(
                    format!("{p}.translation_address"),
                    format!("{:?} is not an IPv4 address", r.translation_address),
                ),
            }
            if let Some(port) = r.translation_port {
                if !r.protocol.is_some_and(|x| matches!(x.0, TCP | UDP)) {
                    add(
                        format!("{p}.translation_port"),
                        "a port needs protocol = \"tcp\" or \"udp\"".into(),
                    );
                }
                if port == 0 {
                    add(
                        format!("{p}.translation_port"),
                        "0 is not a port: 1-65535".into(),
                    );
                }
            }
        }
        out
    }
}
