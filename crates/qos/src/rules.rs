//! Classifier rules of an input policy (`[[qos.policy.rule]]`): a packet's class by its
//! 5-tuple (and, optionally, the DSCP it arrived with), first match wins, before DSCP
//! classification.
//!
//! The matching is the firewall's: a rule's prefixes, protocol and port ranges become
//! boxes ([`firewall::classify::Match`] → [`firewall::classify::Rule`]) in a
//! [`firewall::classify::Classifier`] per address family, and packets are read with the
//! firewall's parser ([`firewall::node::parse4`], [`firewall::node::parse6`]); the config
//! types (protocol, port lists, prefixes) are the firewall's too. What a box cannot say
//! (the DSCP list; ports, which a later fragment does not carry) is the classifier's
//! `extra` condition.
//!
//! Lookups allocate nothing, lock nothing and cannot panic.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::RangeInclusive;

use firewall::classify::{key_v4, key_v6, Classifier, Match, Options, Rule, DIMS};
use firewall::config::{parse_net, PortList, Protocol, ICMP, ICMPV6};
use firewall::ruleset::WorkerCounters;
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
    fn path(&self, base: &str, key: &str, k: usize) -> String {
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

/// A rule as the fast path checks it beyond its boxes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RuleRt {
    /// Its class (index in the policy).
    class: u8,
    /// The DSCPs it matches, one bit each (all ones: any).
    dscp: u64,
    /// Whether it names ports (a later fragment, without them, does not match).
    ports: bool,
}

impl RuleRt {
    #[inline]
    fn passes(&self, dscp: u8, l4: bool) -> bool {
        (l4 || !self.ports) && self.dscp & (1u64 << (dscp & 63)) != 0
    }
}

/// One family's classifier and, for each of its boxes, the rule it came from.
#[derive(Clone, Debug)]
struct Family<T> {
    classifier: Classifier<T>,
    rule_of: Vec<u16>,
}

/// A policy's rules, compiled.
#[derive(Clone, Debug)]
pub struct RuleTable {
    rules: Vec<RuleRt>,
    v4: Option<Family<u32>>,
    v6: Option<Family<u128>>,
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

/// A rule checked: its family, prefixes and port ranges.
struct Checked {
    fam: Fam,
    src: Vec<(IpAddr, u8)>,
    dst: Vec<(IpAddr, u8)>,
    rt: RuleRt,
}

fn port_ranges(p: &PortList) -> Vec<RangeInclusive<u16>> {
    if p.is_empty() {
        vec![0..=u16::MAX]
    } else {
        p.0.clone()
    }
}

/// Check rule `r` of a policy whose classes are `classes`; `base` is its config path.
/// Every problem goes to `out`; `None` if there was one.
fn check(
    r: &RuleConfig,
    classes: &[&str],
    base: &str,
    out: &mut Vec<(String, String)>,
) -> Option<Checked> {
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
        let mut v = Vec::new();
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
                    v.push((n.addr, n.len));
                }
            }
        }
        v
    };
    let src = side(&r.src, "src", out);
    let dst = side(&r.dst, "dst", out);
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
    let fam = match (fam, proto) {
        (Fam::Any, Some(ICMP)) => Fam::V4,
        (Fam::Any, Some(ICMPV6)) => Fam::V6,
        (f, _) => f,
    };
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
    let mut dscp = if r.dscp.is_empty() { u64::MAX } else { 0 };
    for (k, d) in r.dscp.iter().enumerate() {
        match parse_dscp(d) {
            Ok(d) => dscp |= 1 << d,
            Err(e) => out.push((format!("{base}.dscp[{k}]"), e)),
        }
    }
    if out.len() > before {
        return None;
    }
    Some(Checked {
        fam,
        src,
        dst,
        rt: RuleRt {
            class: class.unwrap_or(0) as u8,
            dscp,
            ports: !(r.sport.is_empty() && r.dport.is_empty()),
        },
    })
}

/// The boxes of one family for a checked rule.
fn boxes<A: firewall::classify::Addr>(
    c: &Checked,
    r: &RuleConfig,
    pick: impl Fn(IpAddr) -> Option<A>,
) -> Result<Vec<Rule<A::F>>, String> {
    let side = |l: &[(IpAddr, u8)]| -> Vec<Option<(A, u8)>> {
        if l.is_empty() {
            vec![None]
        } else {
            l.iter()
                .filter_map(|(a, n)| pick(*a).map(|a| Some((a, *n))))
                .collect()
        }
    };
    let mut out = Vec::new();
    for s in side(&c.src) {
        for d in side(&c.dst) {
            for sp in port_ranges(&r.sport) {
                for dp in port_ranges(&r.dport) {
                    let m = Match {
                        src: s,
                        dst: d,
                        sport: sp.clone(),
                        dport: dp,
                        proto: r.protocol.map(|p| p.0),
                    };
                    out.push(m.rule()?);
                }
            }
        }
    }
    Ok(out)
}

/// The boxes a rule makes in each family (a bound to check before building them).
fn box_count(c: &Checked, r: &RuleConfig) -> usize {
    let n = |l: usize| l.max(1);
    let fams = if c.fam == Fam::Any { 2 } else { 1 };
    n(c.src.len()) * n(c.dst.len()) * n(r.sport.0.len()) * n(r.dport.0.len()) * fams
}

fn family<T: firewall::classify::Field>(
    boxes: Vec<(Rule<T>, u16, bool)>,
) -> Result<Option<Family<T>>, String> {
    if boxes.is_empty() {
        return Ok(None);
    }
    let rule_of = boxes.iter().map(|b| b.1).collect();
    let partial = boxes.iter().map(|b| b.2).collect();
    let rules = boxes.into_iter().map(|b| b.0).collect();
    let classifier =
        Classifier::build_partial(rules, partial, Options::default()).map_err(|e| e.to_string())?;
    Ok(Some(Family {
        classifier,
        rule_of,
    }))
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
    let mut total = 0;
    for (j, r) in rules.iter().enumerate() {
        if let Some(c) = check(r, classes, &format!("{base}.rule[{j}]"), out) {
            total += box_count(&c, r);
        }
    }
    if total > MAX_BOXES {
        out.push((
            format!("{base}.rule"),
            format!(
                "the rules' prefixes and port ranges make {total} combinations; a policy has at most {MAX_BOXES}"
            ),
        ));
    }
}

impl RuleTable {
    /// Compile rules that passed [`validate`] (`None` when there are none).
    pub fn compile(rules: &[RuleConfig], classes: &[&str]) -> Result<Option<RuleTable>, String> {
        if rules.is_empty() {
            return Ok(None);
        }
        let mut problems = Vec::new();
        let mut rts = Vec::new();
        let mut b4 = Vec::new();
        let mut b6 = Vec::new();
        for (j, r) in rules.iter().enumerate() {
            let Some(c) = check(r, classes, &format!("rule[{j}]"), &mut problems) else {
                continue;
            };
            let partial = c.rt.ports || c.rt.dscp != u64::MAX;
            let j = j as u16;
            if c.fam != Fam::V6 {
                let v4 = |a: IpAddr| match a {
                    IpAddr::V4(a) => Some(a),
                    IpAddr::V6(_) => None,
                };
                for b in boxes::<Ipv4Addr>(&c, r, v4)? {
                    b4.push((b, j, partial));
                }
            }
            if c.fam != Fam::V4 {
                let v6 = |a: IpAddr| match a {
                    IpAddr::V6(a) => Some(a),
                    IpAddr::V4(_) => None,
                };
                for b in boxes::<Ipv6Addr>(&c, r, v6)? {
                    b6.push((b, j, partial));
                }
            }
            rts.push(c.rt);
            // Indices of `rts` follow the rules': a rule with a problem stops the build.
        }
        if let Some((p, e)) = problems.first() {
            return Err(format!("{p}: {e}"));
        }
        Ok(Some(RuleTable {
            rules: rts,
            v4: family(b4)?,
            v6: family(b6)?,
            source: rules.to_vec(),
        }))
    }

    #[inline]
    fn pick<T: firewall::classify::Field>(
        &self,
        f: &Family<T>,
        key: &[T; DIMS],
        dscp: u8,
        l4: bool,
    ) -> Option<Hit> {
        let rule = |b: u32| {
            let r = *f.rule_of.get(b as usize)?;
            Some((r, self.rules.get(r as usize)?))
        };
        let b = f
            .classifier
            .classify_where(key, |b| rule(b).is_some_and(|(_, r)| r.passes(dscp, l4)))?;
        rule(b).map(|(rule, r)| Hit {
            rule,
            class: r.class,
        })
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
        let f = self.v4.as_ref()?;
        self.pick(f, &key_v4(src, dst, sport, dport, proto), dscp, l4)
            .map(|h| h.class)
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
        let f = self.v6.as_ref()?;
        self.pick(f, &key_v6(src, dst, sport, dport, proto), dscp, l4)
            .map(|h| h.class)
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
            let f = self.v6.as_ref()?;
            let p = firewall::node::parse6(frame, at).ok()?;
            let key = key_v6(
                Ipv6Addr::from(p.src),
                Ipv6Addr::from(p.dst),
                p.sport,
                p.dport,
                p.proto,
            );
            self.pick(f, &key, p.dscp, p.l4)
        } else {
            let f = self.v4.as_ref()?;
            let p = firewall::node::parse4(frame, at).ok()?;
            let a = |b: &[u8; 16]| Ipv4Addr::new(b[12], b[13], b[14], b[15]);
            let key = key_v4(a(&p.src), a(&p.dst), p.sport, p.dport, p.proto);
            self.pick(f, &key, p.dscp, p.l4)
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
