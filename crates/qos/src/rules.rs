//! Classifier rules of an input policy (`[[qos.policy.rule]]`): a packet's class by its
//! 5-tuple (and, optionally, the DSCP it arrived with), first match wins, before DSCP
//! classification.
//!
//! The matching is the firewall's: each rule, checked here (its config paths and
//! messages are QoS's), becomes a firewall rule ([`firewall::config::RuleConfig`]), and
//! the policy's rules a firewall filter compiled by the firewall
//! ([`firewall::ruleset::CompiledFilter`]: boxes per address family in its classifier, a
//! later fragment's protocol at [`firewall::ruleset::NO_L4`] so that it matches no rule
//! with ports, the DSCP list as the rule's extra condition); packets are read with the
//! firewall's parser ([`firewall::node::parse4`], [`firewall::node::parse6`]) and keyed as
//! the firewall keys them. The config types (protocol, port lists, prefixes) are the
//! firewall's too.
//!
//! Lookups allocate nothing, lock nothing and cannot panic.

use std::net::{Ipv4Addr, Ipv6Addr};

use firewall::config::{
    parse_net, Action, Filter, FirewallConfig, Hook, PortList, Protocol, ICMP, ICMPV6,
};
use firewall::node::Parsed;
use firewall::ruleset::{boxes, CompiledFilter, Verdict, WorkerCounters};
use serde::{Deserialize, Serialize};

use crate::config::{parse_dscp, DscpValue};

/// Most rules one policy has (checked by `config check`): the lookup is a cut tree, but
/// a small bound keeps its build and memory small.
pub const MAX_RULES: usize = 256;
/// Most boxes (a rule's sources × destinations × source ports × destination port
/// ranges) one policy's rules make together.
pub const MAX_BOXES: usize = 4_096;

/// A prefix or a list of them (`"10.1.0.0/16"` or `["10.1.0.0/16", "10.2.0.0/16"]`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Prefixes {
    /// One.
    One(String),
    /// Any of these.
    Many(Vec<String>),
}

impl Default for Prefixes {
    fn default() -> Self {
        Prefixes::Many(Vec::new())
    }
}

impl Prefixes {
    /// The prefixes as written.
    pub fn list(&self) -> &[String] {
        match self {
            Prefixes::One(s) => std::slice::from_ref(s),
            Prefixes::Many(v) => v,
        }
    }
    /// Whether it names none (any address).
    pub fn is_empty(&self) -> bool {
        self.list().is_empty()
    }
    /// The config path of item `k` under `key`.
    pub(crate) fn path(&self, base: &str, key: &str, k: usize) -> String {
        match self {
            Prefixes::One(_) => format!("{base}.{key}"),
            Prefixes::Many(_) => format!("{base}.{key}[{k}]"),
        }
    }
}

/// `[[qos.policy.rule]]`: matches (all must hold; one left out matches everything) and
/// the class of the packets that match.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// The class of its packets (a class of the policy).
    pub class: String,
    /// Source prefixes, any of them (IPv4 or IPv6, one family per rule).
    #[serde(default, skip_serializing_if = "Prefixes::is_empty")]
    pub src: Prefixes,
    /// Destination prefixes.
    #[serde(default, skip_serializing_if = "Prefixes::is_empty")]
    pub dst: Prefixes,
    /// `tcp`, `udp`, `sctp`, `icmp`, `icmpv6`, `gre`, `esp`, `ah` or a number 0-255.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
    /// Source ports (`tcp`, `udp`, `sctp`): `5060`, `"5060-5061"` or a list of them.
    #[serde(default, skip_serializing_if = "PortList::is_empty")]
    pub sport: PortList,
    /// Destination ports, as `sport`.
    #[serde(default, skip_serializing_if = "PortList::is_empty")]
    pub dport: PortList,
    /// The DSCPs the packet may arrive with (any of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dscp: Vec<DscpValue>,
}

/// A policy's rules, compiled: a firewall filter of the rules in the firewall's terms
/// ([`firewall::ruleset::CompiledFilter`]: its classifier per family, its keys, later
/// fragments at [`firewall::ruleset::NO_L4`], its DSCP condition) and each rule's class.
#[derive(Debug)]
pub struct RuleTable {
    filter: CompiledFilter,
    /// The class of each rule.
    classes: Vec<u8>,
    /// The boxes of each family (`None`: none, the packet is not even read).
    v4: Option<usize>,
    v6: Option<usize>,
    /// The rules as configured (for `show qos`, and to tell whether they changed).
    pub source: Vec<RuleConfig>,
}

/// The rule a packet matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    /// Its index in the policy.
    pub rule: u16,
    /// Its class.
    pub class: u8,
}

/// What each rule of an interface's input policy matched: packets and bytes (IP length)
/// per rule, per worker (each worker writes its own block, without a lock or a
/// read-modify-write; a read sums them), as the firewall counts its rules.
pub struct RuleCounters {
    workers: Vec<WorkerCounters>,
    rules: usize,
}

impl std::fmt::Debug for RuleCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RuleCounters({:?})", self.counts())
    }
}

impl RuleCounters {
    /// Counters at zero for `rules` rules and `workers` workers.
    pub fn new(workers: usize, rules: usize) -> RuleCounters {
        RuleCounters {
            workers: (0..workers.max(1))
                .map(|_| WorkerCounters::new(rules))
                .collect(),
            rules,
        }
    }

    /// Worker `worker` counts a packet of `bytes` that matched rule `rule`.
    #[inline]
    pub fn add(&self, worker: usize, rule: u16, bytes: u32) {
        if let Some(w) = self.workers.get(worker) {
            w.add(usize::from(rule), u64::from(bytes));
        }
    }

    /// (packets, bytes) per rule, summed over the workers.
    pub fn counts(&self) -> Vec<(u64, u64)> {
        (0..self.rules)
            .map(|r| WorkerCounters::sum(&self.workers, r))
            .collect()
    }
}

/// What a rule's addresses say about its family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fam {
    Any,
    V4,
    V6,
}

/// Check rule `r` of a policy whose classes are `classes`; `base` is its config path.
/// Every problem goes to `out`; `None` if there was one, else the rule in the firewall's
/// terms and its class.
fn check(
    r: &RuleConfig,
    classes: &[&str],
    base: &str,
    out: &mut Vec<(String, String)>,
) -> Option<(firewall::config::RuleConfig, u8)> {
    let before = out.len();
    let class = classes.iter().position(|c| *c == r.class);
    if class.is_none() {
        out.push((
            format!("{base}.class"),
            format!("{:?} is not a class of the policy", r.class),
        ));
    }
    let mut fam = Fam::Any;
    let mut first: Option<String> = None;
    let mut side = |p: &Prefixes, key: &str, out: &mut Vec<(String, String)>| {
        for (k, s) in p.list().iter().enumerate() {
            let path = p.path(base, key, k);
            match parse_net(s) {
                Err(e) => out.push((path, e)),
                Ok(n) => {
                    let f = if n.addr.is_ipv4() { Fam::V4 } else { Fam::V6 };
                    match (&first, fam) {
                        (Some(a), was) if was != f => out.push((
                            path,
                            format!(
                                "{s} and {a} in one rule: a rule is IPv4 or IPv6 (write two rules)"
                            ),
                        )),
                        _ => {
                            fam = f;
                            first.get_or_insert_with(|| s.clone());
                        }
                    }
                }
            }
        }
    };
    side(&r.src, "src", out);
    side(&r.dst, "dst", out);
    let proto = r.protocol.map(|p| p.0);
    match (proto, fam) {
        (Some(ICMP), Fam::V6) => out.push((
            format!("{base}.protocol"),
            "icmp is IPv4's; the rule's prefixes are IPv6 (icmpv6?)".into(),
        )),
        (Some(ICMPV6), Fam::V4) => out.push((
            format!("{base}.protocol"),
            "icmpv6 is IPv6's; the rule's prefixes are IPv4 (icmp?)".into(),
        )),
        _ => {}
    }
    for (key, ports) in [("sport", &r.sport), ("dport", &r.dport)] {
        if ports.is_empty() {
            continue;
        }
        if !r.protocol.is_some_and(|p| p.has_ports()) {
            out.push((
                format!("{base}.{key}"),
                match r.protocol {
                    None => "ports need a protocol: tcp, udp or sctp".to_string(),
                    Some(p) => format!("{} has no ports: ports are for tcp, udp or sctp", p.name()),
                },
            ));
        }
        for (k, p) in ports.0.iter().enumerate() {
            if p.start() > p.end() {
                out.push((
                    format!("{base}.{key}[{k}]"),
                    format!(
                        "port range {}-{} is reversed: write \"{}-{}\"",
                        p.start(),
                        p.end(),
                        p.end(),
                        p.start()
                    ),
                ));
            }
        }
    }
    let mut dscp = Vec::new();
    for (k, d) in r.dscp.iter().enumerate() {
        match parse_dscp(d) {
            Ok(d) => dscp.push(d),
            Err(e) => out.push((format!("{base}.dscp[{k}]"), e)),
        }
    }
    if out.len() > before {
        return None;
    }
    // The family follows from the prefixes and the protocol, as in a firewall rule.
    let rule = firewall::config::RuleConfig {
        action: Some(Action::Accept),
        protocol: r.protocol,
        source: r.src.list().to_vec(),
        destination: r.dst.list().to_vec(),
        source_port: r.sport.clone(),
        destination_port: r.dport.clone(),
        dscp,
        ..Default::default()
    };
    Some((rule, class.unwrap_or(0) as u8))
}

/// Most boxes a rule may make for them to be built (and counted) by `config check`: a
/// bound on its memory there (each box is 160 bytes), far above [`MAX_BOXES`].
const MAX_BUILT: usize = 64 * MAX_BOXES;

/// The boxes rule `r` makes (its prefixes and port ranges crossed, in each family), as
/// the firewall builds them; `None` when its lists make too many to build.
fn box_count(r: &firewall::config::RuleConfig) -> Option<usize> {
    // Two families, and a second protocol box (later fragments) at most.
    let most = [
        r.source.len(),
        r.destination.len(),
        r.source_port.0.len(),
        r.destination_port.0.len(),
    ]
    .iter()
    .fold(4usize, |n, &l| n.saturating_mul(l.max(1)));
    if most > MAX_BUILT {
        return None;
    }
    Some(boxes(r, &FirewallConfig::default()).map_or(0, |b| b.v4.len() + b.v6.len()))
}

/// Check the rules of a policy whose classes are `classes`; `base` is the policy's config
/// path. Problems go to `out`, each with its path.
pub fn validate(
    rules: &[RuleConfig],
    classes: &[&str],
    base: &str,
    out: &mut Vec<(String, String)>,
) {
    if rules.len() > MAX_RULES {
        out.push((
            format!("{base}.rule"),
            format!("{} rules: a policy has at most {MAX_RULES}", rules.len()),
        ));
        return;
    }
    // The total, while it can be counted (`None`: too many).
    let mut total = Some(0usize);
    for (j, r) in rules.iter().enumerate() {
        if let Some((rule, _)) = check(r, classes, &format!("{base}.rule[{j}]"), out) {
            total = total
                .filter(|&t| t <= MAX_BOXES)
                .and_then(|t| Some(t + box_count(&rule)?));
        }
    }
    let many = match total {
        Some(t) if t <= MAX_BOXES => return,
        Some(t) if t <= MAX_BUILT => t.to_string(),
        _ => format!("more than {MAX_BOXES}"),
    };
    out.push((
        format!("{base}.rule"),
        format!(
            "the rules' prefixes and port ranges make {many} combinations; a policy has at most {MAX_BOXES}"
        ),
    ));
}

impl RuleTable {
    /// Compile rules that passed [`validate`] (`None` when there are none).
    pub fn compile(rules: &[RuleConfig], classes: &[&str]) -> Result<Option<RuleTable>, String> {
        if rules.is_empty() {
            return Ok(None);
        }
        let mut problems = Vec::new();
        let mut converted = Vec::new();
        let mut class_of = Vec::new();
        for (j, r) in rules.iter().enumerate() {
            // Indices follow the rules': a rule with a problem stops the build.
            if let Some((rule, class)) = check(r, classes, &format!("rule[{j}]"), &mut problems) {
                converted.push(rule);
                class_of.push(class);
            }
        }
        if let Some((p, e)) = problems.first() {
            return Err(format!("{p}: {e}"));
        }
        let f = Filter {
            name: "qos".into(),
            hook: Hook::Ingress,
            interfaces: Vec::new(),
            policy: Action::Accept,
            rules: converted,
        };
        let filter =
            CompiledFilter::compile(&f, 0, 0, &FirewallConfig::default()).map_err(|e| {
                match e.rule {
                    0 => e.what,
                    n => format!("rule[{}]: {}", n - 1, e.what),
                }
            })?;
        let some = |n: usize| (n > 0).then_some(n);
        Ok(Some(RuleTable {
            v4: some(filter.v4.stats().rules),
            v6: some(filter.v6.stats().rules),
            filter,
            classes: class_of,
            source: rules.to_vec(),
        }))
    }

    /// The rule the firewall's verdict names, and its class.
    #[inline]
    fn hit(&self, v: Verdict) -> Option<Hit> {
        let rule = v.rule?;
        Some(Hit {
            rule: rule as u16,
            class: *self.classes.get(rule as usize)?,
        })
    }

    /// A packet as the firewall's parser reads it (for its keys: a later fragment's
    /// protocol at [`firewall::ruleset::NO_L4`]).
    fn parsed((sport, dport, proto): (u16, u16, u8), dscp: u8, l4: bool) -> Parsed {
        Parsed {
            proto,
            l4,
            sport,
            dport,
            dscp,
            ..Parsed::default()
        }
    }

    /// The class of the first rule an IPv4 packet matches (`l4`: its ports are there, not
    /// a later fragment).
    #[inline]
    pub fn class4(
        &self,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        (sport, dport, proto): (u16, u16, u8),
        dscp: u8,
        l4: bool,
    ) -> Option<u8> {
        self.v4?;
        let mut p = Self::parsed((sport, dport, proto), dscp, l4);
        p.src[12..].copy_from_slice(&src.octets());
        p.dst[12..].copy_from_slice(&dst.octets());
        self.hit(self.filter.judge4(&p.key4(0))).map(|h| h.class)
    }

    /// The class of the first rule an IPv6 packet matches.
    #[inline]
    pub fn class6(
        &self,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        (sport, dport, proto): (u16, u16, u8),
        dscp: u8,
        l4: bool,
    ) -> Option<u8> {
        self.v6?;
        let mut p = Self::parsed((sport, dport, proto), dscp, l4);
        p.src = src.octets();
        p.dst = dst.octets();
        self.hit(self.filter.judge6(&p.key6(0))).map(|h| h.class)
    }

    /// The class of the first rule the packet whose IP header is at `at` in `frame`
    /// matches; `None` if none does, or if the packet cannot be read (the firewall's
    /// parser: a truncated header).
    #[inline]
    pub fn class_of_frame(&self, frame: &[u8], at: usize, v6: bool) -> Option<u8> {
        self.rule_of_frame(frame, at, v6).map(|h| h.class)
    }

    /// The first rule the packet whose IP header is at `at` in `frame` matches, and its
    /// class (as [`RuleTable::class_of_frame`]).
    #[inline]
    pub fn rule_of_frame(&self, frame: &[u8], at: usize, v6: bool) -> Option<Hit> {
        if v6 {
            self.v6?;
            let p = firewall::node::parse6(frame, at).ok()?;
            self.hit(self.filter.judge6(&p.key6(0)))
        } else {
            self.v4?;
            let p = firewall::node::parse4(frame, at).ok()?;
            self.hit(self.filter.judge4(&p.key4(0)))
        }
    }
}

impl RuleConfig {
    /// Its matches as `show qos` lists them (`src 10.1.0.0/16 protocol udp dport 5060`),
    /// or `any`.
    pub fn describe(&self) -> String {
        let mut v: Vec<String> = Vec::new();
        for (key, p) in [("src", &self.src), ("dst", &self.dst)] {
            if !p.is_empty() {
                v.push(format!("{key} {}", p.list().join(",")));
            }
        }
        if let Some(p) = self.protocol {
            v.push(format!("protocol {}", p.name()));
        }
        for (key, p) in [("sport", &self.sport), ("dport", &self.dport)] {
            if !p.is_empty() {
                v.push(format!("{key} {p}"));
            }
        }
        if !self.dscp.is_empty() {
            let d: Vec<String> = self
                .dscp
                .iter()
                .map(|d| match d {
                    DscpValue::Num(n) => n.to_string(),
                    DscpValue::Name(s) => s.clone(),
                })
                .collect();
            v.push(format!("dscp {}", d.join(",")));
        }
        if v.is_empty() {
            "any".into()
        } else {
            v.join(" ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLASSES: &[&str] = &["ef", "af4", "be"];

    fn rules(text: &str) -> Vec<RuleConfig> {
        #[derive(Deserialize)]
        struct R {
            rule: Vec<RuleConfig>,
        }
        toml::from_str::<R>(text).unwrap().rule
    }

    fn problems(text: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        validate(&rules(text), CLASSES, "qos.policy[0]", &mut out);
        out
    }

    const GOOD: &str = r#"
[[rule]]
class = "ef"
src = "10.1.0.0/16"
protocol = "udp"
dport = "5060-5061"

[[rule]]
class = "af4"
dst = ["2001:db8::/32", "2001:db8:1::/48"]
protocol = "tcp"
sport = [443, "8000-8080"]

[[rule]]
class = "af4"
protocol = "udp"
dscp = ["af41", 36]

[[rule]]
class = "be"
src = "10.0.0.0/8"
"#;

    #[test]
    fn first_match_wins_by_prefix_protocol_ports_and_dscp() {
        assert_eq!(problems(GOOD), []);
        let t = RuleTable::compile(&rules(GOOD), CLASSES).unwrap().unwrap();
        let a = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        let b = |s: &str| s.parse::<Ipv6Addr>().unwrap();
        let (x, y) = (a("10.1.2.3"), a("192.0.2.1"));
        // SIP from 10.1/16: ef; the next port: not the first rule, but 10/8: be.
        assert_eq!(t.class4(x, y, (40000, 5060, 17), 0, true), Some(0));
        assert_eq!(t.class4(x, y, (40000, 5061, 17), 0, true), Some(0));
        assert_eq!(t.class4(x, y, (40000, 5062, 17), 0, true), Some(2));
        // A later fragment has no ports: not the port rule.
        assert_eq!(t.class4(x, y, (0, 0, 17), 0, false), Some(2));
        // TCP to 5060: not the UDP rule.
        assert_eq!(t.class4(x, y, (40000, 5060, 6), 0, true), Some(2));
        // UDP from elsewhere: by its DSCP (AF41, AF42), else no rule.
        assert_eq!(t.class4(y, x, (1, 2, 17), 34, true), Some(1));
        assert_eq!(t.class4(y, x, (1, 2, 17), 36, true), Some(1));
        assert_eq!(t.class4(y, x, (1, 2, 17), 38, true), None);
        assert_eq!(t.class4(y, x, (1, 2, 6), 34, true), None);
        // IPv6: the TCP rule by source port, into either destination prefix.
        let (s6, d6) = (b("2001:db8:ffff::1"), b("2001:db8:1::9"));
        assert_eq!(t.class6(s6, d6, (443, 1000, 6), 0, true), Some(1));
        assert_eq!(t.class6(s6, d6, (8080, 1000, 6), 0, true), Some(1));
        assert_eq!(t.class6(s6, d6, (8081, 1000, 6), 0, true), None);
        assert_eq!(t.class6(d6, b("2001:db9::1"), (443, 1, 6), 0, true), None);
        // The IPv4-only rules (by their prefixes) say nothing about IPv6.
        assert_eq!(t.class6(s6, d6, (1, 2, 17), 34, true), Some(1));
        assert_eq!(t.class6(s6, d6, (1, 5060, 17), 0, true), None);
        assert!(t.v4.is_some() && t.v6.is_some());
    }

    #[test]
    fn packets_are_read_with_the_firewalls_parser() {
        let t = RuleTable::compile(&rules(GOOD), CLASSES).unwrap().unwrap();
        // 14 bytes of Ethernet, IPv4 UDP 10.1.0.9 -> 192.0.2.1, 4000 -> 5060.
        let mut f = vec![0u8; 14];
        f.extend_from_slice(&[
            0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 1, 0, 9, 192, 0, 2, 1,
        ]);
        f.extend_from_slice(&[0x0f, 0xa0, 0x13, 0xc4, 0, 8, 0, 0]);
        assert_eq!(t.class_of_frame(&f, 14, false), Some(0));
        // Truncated: no rule (classified by DSCP instead), no panic.
        assert_eq!(t.class_of_frame(&f[..30], 14, false), None);
        assert_eq!(t.class_of_frame(&f, 14, true), None);
        assert_eq!(t.class_of_frame(&[], 14, false), None);
    }

    #[test]
    fn bad_rules_are_refused_with_their_locations() {
        let one = |body: &str| problems(&format!("[[rule]]\n{body}\n"));
        assert_eq!(
            one("class = \"gold\""),
            [(
                "qos.policy[0].rule[0].class".to_string(),
                "\"gold\" is not a class of the policy".to_string()
            )]
        );
        let p = one("class = \"ef\"\nsrc = \"10.1.0.0/33\"");
        assert_eq!(p[0].0, "qos.policy[0].rule[0].src", "{p:?}");
        assert!(p[0].1.contains("prefix length"), "{p:?}");
        let p = one("class = \"ef\"\ndst = [\"10.0.0.0/8\", \"10.1.0.1/16\"]");
        assert_eq!(p[0].0, "qos.policy[0].rule[0].dst[1]", "{p:?}");
        assert!(p[0].1.contains("host bits"), "{p:?}");
        let p = one("class = \"ef\"\nsrc = \"10.0.0.0/8\"\ndst = \"2001:db8::/32\"");
        assert_eq!(
            p,
            [(
                "qos.policy[0].rule[0].dst".to_string(),
                "2001:db8::/32 and 10.0.0.0/8 in one rule: a rule is IPv4 or IPv6 (write two rules)"
                    .to_string()
            )]
        );
        let p = one("class = \"ef\"\ndport = 5060");
        assert_eq!(
            p,
            [(
                "qos.policy[0].rule[0].dport".to_string(),
                "ports need a protocol: tcp, udp or sctp".to_string()
            )]
        );
        let p = one("class = \"ef\"\nprotocol = \"icmp\"\nsport = 1");
        assert_eq!(p[0].0, "qos.policy[0].rule[0].sport", "{p:?}");
        assert!(p[0].1.contains("icmp has no ports"), "{p:?}");
        let p = one("class = \"ef\"\nprotocol = \"icmp\"\nsrc = \"2001:db8::/32\"");
        assert_eq!(p[0].0, "qos.policy[0].rule[0].protocol", "{p:?}");
        let p = one("class = \"ef\"\ndscp = [\"af51\"]");
        assert_eq!(p[0].0, "qos.policy[0].rule[0].dscp[0]", "{p:?}");
        // A reversed range does not even parse (the firewall's port list), and one built
        // by hand is refused.
        #[derive(Deserialize, Debug)]
        struct R {
            #[serde(rename = "rule")]
            _rule: Vec<RuleConfig>,
        }
        let e = toml::from_str::<R>(
            "[[rule]]\nclass = \"ef\"\nprotocol = \"udp\"\ndport = \"5061-5060\"\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("reversed"), "{e}");
        let mut r = rules("[[rule]]\nclass = \"ef\"\nprotocol = \"udp\"\n");
        #[allow(clippy::reversed_empty_ranges)]
        {
            r[0].dport = PortList(vec![5061..=5060]);
        }
        let mut out = Vec::new();
        validate(&r, CLASSES, "qos.policy[0]", &mut out);
        assert_eq!(
            out,
            [(
                "qos.policy[0].rule[0].dport[0]".to_string(),
                "port range 5061-5060 is reversed: write \"5060-5061\"".to_string()
            )]
        );
        // Too many rules, too many combinations.
        let many = "[[rule]]\nclass = \"be\"\n".repeat(MAX_RULES + 1);
        let p = problems(&many);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].0, "qos.policy[0].rule");
        assert!(p[0].1.contains("at most 256"), "{p:?}");
        assert!(problems(&"[[rule]]\nclass = \"be\"\n".repeat(MAX_RULES)).is_empty());
        let nets: Vec<String> = (0..65).map(|k| format!("\"10.{k}.0.0/16\"")).collect();
        let wide = format!(
            "[[rule]]\nclass = \"be\"\nsrc = [{n}]\ndst = [{n}]\n",
            n = nets.join(", ")
        );
        let p = problems(&wide);
        assert_eq!(p[0].0, "qos.policy[0].rule", "{p:?}");
        assert!(p[0].1.contains("4225 combinations"), "{p:?}");
    }
}
