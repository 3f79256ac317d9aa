//! The firewall as the config file writes it: `[firewall]` with named address sets and
//! filters, nftables-style (a filter is a chain of ordered rules bound to interfaces at a
//! hook, with a default policy; the first matching rule decides).
//!
//! ```toml
//! [[firewall.set]]
//! name = "admins"
//! addresses = ["192.0.2.0/28", "2001:db8:a::/48"]
//!
//! [[firewall.filter]]
//! name = "wan-in"
//! hook = "ingress"          # what the interfaces receive; "egress": what leaves by them
//! interfaces = ["eth0"]
//! policy = "drop"           # when no rule matches; default "accept"
//!
//! [[firewall.filter.rule]]
//! action = "accept"
//! protocol = "tcp"
//! source = ["@admins"]
//! destination_port = [22, "8000-8080"]
//! log = true
//! ```
//!
//! [`FirewallConfig::validate`] finds everything wrong, each problem with the dotted path of
//! the value (`firewall.filter[0].rule[3].source[1]`) so the config checker can give its
//! line; [`FirewallConfig::warnings`] finds rules that can never match.

use std::fmt;
use std::net::IpAddr;
use std::ops::RangeInclusive;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// `[firewall]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FirewallConfig {
    /// Named address sets (`[[firewall.set]]`), used in rules as `"@name"`.
    #[serde(rename = "set", default, skip_serializing_if = "Vec::is_empty")]
    pub sets: Vec<AddressSet>,
    /// Filters (`[[firewall.filter]]`).
    #[serde(rename = "filter", default, skip_serializing_if = "Vec::is_empty")]
    pub filters: Vec<Filter>,
    /// Log records each worker may send per second (rules with `log = true`); beyond it
    /// they are counted as suppressed. Default 10.
    #[serde(default = "default_log_rate")]
    pub log_rate: u32,
    /// Connection tracking: every IP packet the fast path receives is tracked, and rules
    /// can match `state`. Off by default; a change needs a restart.
    #[serde(default, skip_serializing_if = "is_false")]
    pub conntrack: bool,
    /// Flows each worker's table holds (allocated at start, about 97 bytes each). Default
    /// 262,144; a change needs a restart.
    #[serde(default = "default_conntrack_max")]
    pub conntrack_max: usize,
}

fn default_conntrack_max() -> usize {
    262_144
}

/// Fewest and most flows a worker's table may be given.
pub const CONNTRACK_MAX_RANGE: std::ops::RangeInclusive<usize> = 1024..=100_000_000;

fn default_log_rate() -> u32 {
    10
}

impl Default for FirewallConfig {
    fn default() -> Self {
        FirewallConfig {
            sets: Vec::new(),
            filters: Vec::new(),
            log_rate: default_log_rate(),
            conntrack: false,
            conntrack_max: default_conntrack_max(),
        }
    }
}

/// `[[firewall.set]]`: a named list of prefixes.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AddressSet {
    /// Name, used in rules as `"@name"`.
    pub name: String,
    /// Addresses and prefixes, IPv4 and IPv6 mixed: `192.0.2.1`, `10.0.0.0/8`.
    pub addresses: Vec<String>,
}

/// Where a filter runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Hook {
    /// Packets received on the filter's interfaces, forwarded or for the router itself,
    /// before the route lookup (feature arcs `ip4-unicast`, `ip6-unicast`).
    Ingress,
    /// Packets the router forwards out of the filter's interfaces (feature arcs
    /// `ip4-output`, `ip6-output`).
    Egress,
}

impl Hook {
    /// `ingress` or `egress`.
    pub fn name(self) -> &'static str {
        match self {
            Hook::Ingress => "ingress",
            Hook::Egress => "egress",
        }
    }
}

/// What a rule (or a filter's policy) does with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Let it through.
    Accept,
    /// Drop it, silently.
    Drop,
    /// Drop it and tell the sender: a TCP RST for TCP, else an ICMP (ICMPv6) destination
    /// unreachable, administratively prohibited; rate limited.
    Reject,
}

impl Action {
    /// `accept`, `drop` or `reject`.
    pub fn name(self) -> &'static str {
        match self {
            Action::Accept => "accept",
            Action::Drop => "drop",
            Action::Reject => "reject",
        }
    }
}

fn default_accept() -> Action {
    Action::Accept
}

/// `[[firewall.filter]]`: ordered rules bound to interfaces at a hook.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Filter {
    /// Name, as `show firewall` lists it.
    pub name: String,
    /// `ingress` or `egress`.
    pub hook: Hook,
    /// The interfaces (`[[port]]` or `[[vlan]]` names) it filters; an interface has at most
    /// one filter per hook.
    pub interfaces: Vec<String>,
    /// What happens to a packet no rule matches. Default `accept`.
    #[serde(default = "default_accept")]
    pub policy: Action,
    /// The rules, first match wins.
    #[serde(rename = "rule", default)]
    pub rules: Vec<RuleConfig>,
}

/// `[[firewall.filter.rule]]`: matches (all must hold; an absent one matches everything)
/// and what to do.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// `accept`, `drop` or `reject`.
    pub action: Option<Action>,
    /// Free text, shown with the rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// `ipv4` or `ipv6`: only that family (else implied by the addresses and protocol).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<Family>,
    /// `tcp`, `udp`, `icmp`, `icmpv6`, `sctp`, `gre`, `esp`, `ah` or a number 0-255.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
    /// Source addresses, prefixes or `@set`s; any of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source: Vec<String>,
    /// Destination addresses, prefixes or `@set`s; any of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destination: Vec<String>,
    /// Source ports (`tcp`, `udp`, `sctp`): `80`, `"1024-65535"` or a list of them.
    #[serde(default, skip_serializing_if = "PortList::is_empty")]
    pub source_port: PortList,
    /// Destination ports, as `source_port`.
    #[serde(default, skip_serializing_if = "PortList::is_empty")]
    pub destination_port: PortList,
    /// ICMP or ICMPv6 type (with `protocol = "icmp"` or `"icmpv6"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp_type: Option<u8>,
    /// ICMP or ICMPv6 code (with `icmp_type`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp_code: Option<u8>,
    /// TCP flags that must be set (`"syn"`) or clear (`"!ack"`): `fin`, `syn`, `rst`,
    /// `psh`, `ack`, `urg`, `ece`, `cwr` (with `protocol = "tcp"`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tcp_flags: Vec<String>,
    /// DSCP values (0-63); any of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dscp: Vec<u8>,
    /// Connection-tracking states: `new`, `established`, `related`, `invalid`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub state: Vec<String>,
    /// Send a record of each matching packet to the daemon's log (sampled: at most
    /// `[firewall] log_rate` per second per worker).
    #[serde(default, skip_serializing_if = "is_false")]
    pub log: bool,
    /// Rewrite the DSCP of accepted packets (0-63).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_dscp: Option<u8>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// `family` of a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// IPv4 only.
    Ipv4,
    /// IPv6 only.
    Ipv6,
}

/// An IP protocol, by name or number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Protocol(pub u8);

const PROTOCOLS: [(&str, u8); 8] = [
    ("icmp", 1),
    ("tcp", 6),
    ("udp", 17),
    ("gre", 47),
    ("esp", 50),
    ("ah", 51),
    ("icmpv6", 58),
    ("sctp", 132),
];

/// TCP.
pub const TCP: u8 = 6;
/// UDP.
pub const UDP: u8 = 17;
/// SCTP.
pub const SCTP: u8 = 132;
/// ICMP.
pub const ICMP: u8 = 1;
/// ICMPv6.
pub const ICMPV6: u8 = 58;

impl Protocol {
    /// A protocol by name (`tcp`, ...) or number.
    pub fn parse(v: &str) -> Result<Protocol, String> {
        if let Ok(n) = v.parse::<u8>() {
            return Ok(Protocol(n));
        }
        PROTOCOLS
            .iter()
            .find(|p| p.0.eq_ignore_ascii_case(v))
            .map(|p| Protocol(p.1))
            .ok_or_else(|| format!("unknown protocol {v:?}: expected tcp, udp, icmp, icmpv6, sctp, gre, esp, ah or a number 0-255"))
    }

    /// Its name when it has one, else its number.
    pub fn name(self) -> String {
        PROTOCOLS
            .iter()
            .find(|p| p.1 == self.0)
            .map_or_else(|| self.0.to_string(), |p| p.0.to_string())
    }
    /// Whether it has ports.
    pub fn has_ports(self) -> bool {
        matches!(self.0, TCP | UDP | SCTP)
    }
}

impl Serialize for Protocol {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match PROTOCOLS.iter().find(|p| p.1 == self.0) {
            Some(p) => s.serialize_str(p.0),
            None => s.serialize_u8(self.0),
        }
    }
}

impl<'de> Deserialize<'de> for Protocol {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Protocol;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a protocol name (tcp, udp, icmp, icmpv6, sctp, gre, esp, ah) or a number 0-255")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Protocol, E> {
                u8::try_from(v)
                    .map(Protocol)
                    .map_err(|_| E::custom(format!("protocol {v} is not in 0-255")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Protocol, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(i64::MAX))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Protocol, E> {
                Protocol::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// Ports: a list of single ports and inclusive ranges (`80`, `"8000-8080"`); empty: any.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PortList(pub Vec<RangeInclusive<u16>>);

impl PortList {
    /// Whether it names no port (matches any).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn port_item<E: de::Error>(v: &str) -> Result<RangeInclusive<u16>, E> {
    let bad = || {
        E::custom(format!(
            "{v:?} is not a port (0-65535) or a range \"LOW-HIGH\""
        ))
    };
    let (a, b) = match v.split_once('-') {
        Some((a, b)) => (a.trim(), b.trim()),
        None => (v.trim(), v.trim()),
    };
    let (a, b) = (
        a.parse::<u16>().map_err(|_| bad())?,
        b.parse::<u16>().map_err(|_| bad())?,
    );
    if a > b {
        return Err(E::custom(format!(
            "port range {v:?} is reversed: write \"{b}-{a}\""
        )));
    }
    Ok(a..=b)
}

fn port_num<E: de::Error>(v: i64) -> Result<RangeInclusive<u16>, E> {
    u16::try_from(v)
        .map(|p| p..=p)
        .map_err(|_| E::custom(format!("port {v} is not in 0-65535")))
}

impl<'de> Deserialize<'de> for PortList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = PortList;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a port (80), a range (\"8000-8080\") or a list of them")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<PortList, E> {
                Ok(PortList(vec![port_num(v)?]))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<PortList, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(i64::MAX))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PortList, E> {
                Ok(PortList(vec![port_item(v)?]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PortList, A::Error> {
                #[derive(Deserialize)]
                #[serde(untagged)]
                enum Item {
                    N(i64),
                    S(String),
                }
                let mut out = Vec::new();
                while let Some(item) = seq.next_element::<Item>()? {
                    out.push(match item {
                        Item::N(n) => port_num(n)?,
                        Item::S(s) => port_item(&s)?,
                    });
                }
                Ok(PortList(out))
            }
        }
        d.deserialize_any(V)
    }
}

impl fmt::Display for PortList {
    /// `22,8000-8080`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if r.start() == r.end() {
                write!(f, "{}", r.start())?;
            } else {
                write!(f, "{}-{}", r.start(), r.end())?;
            }
        }
        Ok(())
    }
}

impl Serialize for PortList {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let items: Vec<String> = self
            .0
            .iter()
            .map(|r| PortList(vec![r.clone()]).to_string())
            .collect();
        items.serialize(s)
    }
}

/// A prefix: address and length, host bits zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Net {
    /// Network address.
    pub addr: IpAddr,
    /// Prefix length.
    pub len: u8,
}

impl fmt::Display for Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// Parse `192.0.2.1`, `10.0.0.0/8`, `2001:db8::/32`: a bare address is a host route; host
/// bits must be zero.
pub fn parse_net(s: &str) -> Result<Net, String> {
    let (a, l) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: IpAddr = a
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not an address or prefix (192.0.2.0/24, 2001:db8::/32)"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match l {
        None => max,
        Some(l) => match l.trim().parse::<u8>() {
            Ok(n) if n <= max => n,
            _ => return Err(format!("{s:?}: prefix length must be 0-{max}")),
        },
    };
    let host = match addr {
        IpAddr::V4(a) => u128::from(u32::from(a)) & (u128::from(u32::MAX) >> len.min(32)),
        IpAddr::V6(a) => u128::from(a) & (u128::MAX.checked_shr(u32::from(len)).unwrap_or(0)),
    };
    if host != 0 {
        return Err(format!(
            "{s:?} has host bits set: write the network address"
        ));
    }
    Ok(Net { addr, len })
}

/// TCP flag bits by name.
pub const TCP_FLAGS: [(&str, u8); 8] = {
    use wire::tcp::flags::*;
    [
        ("fin", FIN),
        ("syn", SYN),
        ("rst", RST),
        ("psh", PSH),
        ("ack", ACK),
        ("urg", URG),
        ("ece", ECE),
        ("cwr", CWR),
    ]
};

/// Parse `["syn", "!ack"]` into (mask, value): the flags in `mask` must equal `value`.
pub fn parse_tcp_flags(list: &[String]) -> Result<(u8, u8), (usize, String)> {
    let (mut mask, mut value) = (0u8, 0u8);
    for (i, f) in list.iter().enumerate() {
        let (neg, name) = match f.strip_prefix('!') {
            Some(n) => (true, n),
            None => (false, f.as_str()),
        };
        let Some(&(_, bit)) = TCP_FLAGS.iter().find(|x| x.0.eq_ignore_ascii_case(name)) else {
            return Err((i, format!("unknown TCP flag {f:?}: expected fin, syn, rst, psh, ack, urg, ece or cwr, with '!' for a flag that must be clear")));
        };
        if mask & bit != 0 {
            return Err((i, format!("TCP flag {name:?} is named twice")));
        }
        mask |= bit;
        if !neg {
            value |= bit;
        }
    }
    Ok((mask, value))
}

/// Connection-tracking states a rule can match, as bits.
pub mod state {
    /// A packet that starts a connection.
    pub const NEW: u8 = 1;
    /// A packet of a connection seen in both directions.
    pub const ESTABLISHED: u8 = 2;
    /// An ICMP error about a tracked connection.
    pub const RELATED: u8 = 4;
    /// A packet that fits no connection (out of window, bad flags).
    pub const INVALID: u8 = 8;
    /// Names and bits.
    pub const NAMES: [(&str, u8); 4] = [
        ("new", NEW),
        ("established", ESTABLISHED),
        ("related", RELATED),
        ("invalid", INVALID),
    ];
}

/// Parse `["established", "related"]` into state bits.
pub fn parse_states(list: &[String]) -> Result<u8, (usize, String)> {
    let mut bits = 0;
    for (i, s) in list.iter().enumerate() {
        match state::NAMES.iter().find(|x| x.0.eq_ignore_ascii_case(s)) {
            Some(&(_, b)) => bits |= b,
            None => {
                return Err((
                    i,
                    format!("unknown state {s:?}: expected new, established, related or invalid"),
                ))
            }
        }
    }
    Ok(bits)
}

/// Most classifier entries (rules times the cross product of their address and port
/// lists) one filter may compile to.
pub const MAX_BOXES_PER_FILTER: usize = 1 << 20;

impl FirewallConfig {
    /// Whether it is the default (nothing configured).
    pub fn is_default(&self) -> bool {
        *self == FirewallConfig::default()
    }

    /// Everything wrong with it, as (dotted path under `firewall`, message). `interfaces`
    /// are the names a filter may bind (ports and VLAN sub-interfaces).
    pub fn validate(&self, interfaces: &[&str]) -> Vec<(String, String)> {
        let conntrack = self.conntrack;
        let mut out = Vec::new();
        let mut add = |p: String, m: String| out.push((p, m));
        if self.log_rate == 0 || self.log_rate > 100_000 {
            add(
                "firewall.log_rate".into(),
                format!(
                    "{} is out of range: 1-100000 records per second per worker",
                    self.log_rate
                ),
            );
        }
        if !CONNTRACK_MAX_RANGE.contains(&self.conntrack_max) {
            add(
                "firewall.conntrack_max".into(),
                format!(
                    "{} is out of range: {}-{} flows per worker",
                    self.conntrack_max,
                    CONNTRACK_MAX_RANGE.start(),
                    CONNTRACK_MAX_RANGE.end()
                ),
            );
        }
        for (i, s) in self.sets.iter().enumerate() {
            let p = format!("firewall.set[{i}]");
            if !valid_name(&s.name) {
                add(
                    format!("{p}.name"),
                    format!(
                        "{:?} is not a valid set name (letters, digits, '-', '_', 1-64 characters)",
                        s.name
                    ),
                );
            }
            if self.sets[..i].iter().any(|o| o.name == s.name) {
                add(
                    format!("{p}.name"),
                    format!("set {:?} is defined twice", s.name),
                );
            }
            if s.addresses.is_empty() {
                add(
                    format!("{p}.addresses"),
                    format!(
                        "set {:?} is empty: a rule naming it could never match",
                        s.name
                    ),
                );
            }
            for (k, a) in s.addresses.iter().enumerate() {
                if let Err(e) = parse_net(a) {
                    add(format!("{p}.addresses[{k}]"), e);
                }
            }
        }
        for (i, f) in self.filters.iter().enumerate() {
            let p = format!("firewall.filter[{i}]");
            if !valid_name(&f.name) {
                add(format!("{p}.name"), format!("{:?} is not a valid filter name (letters, digits, '-', '_', 1-64 characters)", f.name));
            }
            if self.filters[..i].iter().any(|o| o.name == f.name) {
                add(
                    format!("{p}.name"),
                    format!("filter {:?} is defined twice", f.name),
                );
            }
            if f.interfaces.is_empty() {
                add(
                    format!("{p}.interfaces"),
                    format!("filter {:?} is bound to no interface", f.name),
                );
            }
            for (k, n) in f.interfaces.iter().enumerate() {
                if !interfaces.contains(&n.as_str()) {
                    add(
                        format!("{p}.interfaces[{k}]"),
                        format!("{n:?} is not a [[port]] or [[vlan]] of this config"),
                    );
                }
                if let Some(o) = self.filters[..i]
                    .iter()
                    .find(|o| o.hook == f.hook && o.interfaces.contains(n))
                {
                    add(format!("{p}.interfaces[{k}]"), format!("{n} already has filter {:?} at {}: an interface has one filter per hook", o.name, f.hook.name()));
                }
            }
            if f.rules.len() > 1_000_000 {
                add(
                    format!("{p}.rule"),
                    format!("{} rules: at most 1,000,000 per filter", f.rules.len()),
                );
            }
            let mut boxes = 0usize;
            for (r, rule) in f.rules.iter().enumerate() {
                let rp = format!("{p}.rule[{r}]");
                for (pp, m) in self.rule_problems(rule, conntrack) {
                    add(
                        if pp.is_empty() {
                            rp.clone()
                        } else {
                            format!("{rp}.{pp}")
                        },
                        m,
                    );
                }
                boxes = boxes.saturating_add(expansion(rule, &self.sets));
            }
            if boxes > MAX_BOXES_PER_FILTER {
                add(format!("{p}.rule"), format!("filter {:?} expands to {boxes} classifier entries (rules times their address and port lists); at most {MAX_BOXES_PER_FILTER}: use fewer, wider prefixes or port ranges", f.name));
            }
        }
        out
    }

    fn rule_problems(&self, r: &RuleConfig, conntrack: bool) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        if r.action.is_none() {
            out.push((
                String::new(),
                "the rule has no action: accept, drop or reject".into(),
            ));
        }
        let mut fams = [false, false]; // (v4, v6) seen per side
        let side = |list: &[String], what: &str, out: &mut Vec<(String, String)>| -> [bool; 2] {
            let mut seen = [false, false];
            for (k, a) in list.iter().enumerate() {
                if let Some(name) = a.strip_prefix('@') {
                    match self.sets.iter().find(|s| s.name == name) {
                        None => out.push((
                            format!("{what}[{k}]"),
                            format!("unknown set {name:?}: define it in [[firewall.set]]"),
                        )),
                        Some(s) => {
                            for n in s.addresses.iter().filter_map(|x| parse_net(x).ok()) {
                                seen[usize::from(n.addr.is_ipv6())] = true;
                            }
                        }
                    }
                } else {
                    match parse_net(a) {
                        Ok(n) => seen[usize::from(n.addr.is_ipv6())] = true,
                        Err(e) => out.push((format!("{what}[{k}]"), e)),
                    }
                }
            }
            seen
        };
        let src = side(&r.source, "source", &mut out);
        let dst = side(&r.destination, "destination", &mut out);
        for f in 0..2 {
            let ok = |s: [bool; 2], list: &[String]| list.is_empty() || s[f];
            fams[f] = ok(src, &r.source) && ok(dst, &r.destination);
        }
        match r.protocol.map(|p| p.0) {
            Some(ICMP) => fams[1] = false,
            Some(ICMPV6) => fams[0] = false,
            _ => {}
        }
        match r.family {
            Some(Family::Ipv4) => fams[1] = false,
            Some(Family::Ipv6) => fams[0] = false,
            None => {}
        }
        let addr_errors = out
            .iter()
            .any(|(p, _)| p.starts_with("source") || p.starts_with("destination"));
        if fams == [false, false] && !addr_errors {
            out.push((String::new(), "the rule can never match: its source, destination, protocol and family name no address family in common (an IPv4-only side with an IPv6-only side, or icmp with IPv6)".into()));
        }
        let proto = r.protocol.map(|p| p.0);
        for (list, what) in [
            (&r.source_port, "source_port"),
            (&r.destination_port, "destination_port"),
        ] {
            if !list.is_empty() && !proto.is_some_and(|p| Protocol(p).has_ports()) {
                out.push((
                    what.into(),
                    "ports need protocol = \"tcp\", \"udp\" or \"sctp\"".into(),
                ));
            }
        }
        if (r.icmp_type.is_some() || r.icmp_code.is_some()) && !matches!(proto, Some(ICMP | ICMPV6))
        {
            out.push((
                "icmp_type".into(),
                "icmp_type and icmp_code need protocol = \"icmp\" or \"icmpv6\"".into(),
            ));
        }
        if r.icmp_code.is_some() && r.icmp_type.is_none() {
            out.push(("icmp_code".into(), "icmp_code needs icmp_type".into()));
        }
        if !r.tcp_flags.is_empty() {
            if proto != Some(TCP) {
                out.push((
                    "tcp_flags".into(),
                    "tcp_flags need protocol = \"tcp\"".into(),
                ));
            }
            if let Err((i, e)) = parse_tcp_flags(&r.tcp_flags) {
                out.push((format!("tcp_flags[{i}]"), e));
            }
        }
        for (i, d) in r.dscp.iter().enumerate() {
            if *d > 63 {
                out.push((format!("dscp[{i}]"), format!("DSCP {d} is not in 0-63")));
            }
        }
        if let Some(d) = r.set_dscp {
            if d > 63 {
                out.push(("set_dscp".into(), format!("DSCP {d} is not in 0-63")));
            }
            if r.action != Some(Action::Accept) {
                out.push((
                    "set_dscp".into(),
                    "set_dscp applies to accepted packets: it needs action = \"accept\"".into(),
                ));
            }
        }
        if !r.state.is_empty() {
            if let Err((i, e)) = parse_states(&r.state) {
                out.push((format!("state[{i}]"), e));
            } else if !conntrack {
                out.push((
                    "state".into(),
                    "state matches need connection tracking: set conntrack = true in [firewall]"
                        .into(),
                ));
            }
        }
        out
    }
}

/// How many classifier entries `r` compiles to (per family, both counted).
fn expansion(r: &RuleConfig, sets: &[AddressSet]) -> usize {
    let side = |l: &[String]| -> usize {
        if l.is_empty() {
            return 1;
        }
        l.iter()
            .map(|a| match a.strip_prefix('@') {
                Some(n) => sets
                    .iter()
                    .find(|s| s.name == n)
                    .map_or(0, |s| s.addresses.len()),
                None => 1,
            })
            .fold(0usize, usize::saturating_add)
    };
    let ports = |l: &PortList| l.0.len().max(1);
    side(&r.source)
        .saturating_mul(side(&r.destination))
        .saturating_mul(ports(&r.source_port))
        .saturating_mul(ports(&r.destination_port))
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}
