//! The security policy databases of policy-based IPsec (RFC 4301 §4.4.1): per interface
//! and direction, the `[[ipsec.policy]]`s in priority order, compiled into the firewall's
//! multi-field classifier ([`firewall::classify`]), one for IPv4 and one for IPv6.
//!
//! A policy's selectors (source and destination prefixes, protocol, source and
//! destination ports) become one classifier rule, or one per pair of its port ranges; the
//! first rule that holds the packet's 5-tuple names its policy. Rules with ports are built
//! as *partial*: a packet without a transport header (an IPv4 or IPv6 fragment after the
//! first) skips them, so such fragments match only policies without port selectors.
//!
//! An [`Spd`] is immutable: the control thread compiles a new one ([`Spd::compile`], every
//! fallible step) and the nodes take it up between vectors. Per-policy match counters live
//! in an `Arc` per policy, one atomic per worker (one writer each), and pass from an [`Spd`]
//! to the next for a policy that did not change.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use firewall::classify::{self, Classifier, Match, Options, Rule};
use serde::Serialize;

use crate::config::{IpsecConfig, PolicyAction, PolicyEntry, SaDirection, SpiList};
use crate::sad::NONE;

/// What an SPD says of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Policy `usize` matched.
    Policy(usize),
    /// No policy matched: the interface's default for this direction.
    Default(PolicyAction),
}

/// One direction of one interface's SPD.
pub struct Table {
    v4: Classifier<u32>,
    v6: Classifier<u128>,
    /// By classifier rule: the policy (index in [`Spd::policies`]).
    rules4: Vec<u32>,
    rules6: Vec<u32>,
    /// When nothing matches.
    pub default: PolicyAction,
}

impl Table {
    /// The verdict for an IPv4 packet (`l4`: its ports are there, not a later fragment).
    #[inline]
    pub fn classify4(&self, key: &[u32; classify::DIMS], l4: bool) -> Verdict {
        match self.v4.classify_where(key, |_| l4) {
            Some(r) => Verdict::Policy(self.rules4.get(r as usize).copied().unwrap_or(0) as usize),
            None => Verdict::Default(self.default),
        }
    }

    /// The verdict for an IPv6 packet.
    #[inline]
    pub fn classify6(&self, key: &[u128; classify::DIMS], l4: bool) -> Verdict {
        match self.v6.classify_where(key, |_| l4) {
            Some(r) => Verdict::Policy(self.rules6.get(r as usize).copied().unwrap_or(0) as usize),
            None => Verdict::Default(self.default),
        }
    }
}

/// A compiled policy, as the nodes use it.
pub struct Policy {
    /// What it does.
    pub action: PolicyAction,
    /// With protect, out: the SPI of the SA it encrypts with; in: the SPIs that may have
    /// carried it.
    pub spis: Vec<u32>,
    /// Out, protect: the SA's slot in the owner's table ([`NONE`] until resolved). Checked
    /// against the SA's SPI at use.
    pub slot: u32,
    /// Out, protect: the worker whose table holds the SA (the others hand it the packets
    /// the policy protects).
    pub owner: u16,
    /// Its match counters, one per worker.
    counts: Arc<Vec<AtomicU64>>,
}

impl Policy {
    /// Count a match on `worker` (its only writer: no atomic read-modify-write).
    #[inline]
    pub fn count(&self, worker: usize) {
        if let Some(c) = self.counts.get(worker) {
            c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
    }

    /// Its matches on every worker.
    pub fn matches(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}

/// A policy as `show ipsec` lists it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct PolicyView {
    /// Its index in `[[ipsec.policy]]`.
    pub index: usize,
    /// Its interface.
    pub interface: String,
    /// `in` or `out`.
    pub direction: &'static str,
    /// Its priority.
    pub priority: u32,
    /// Source prefix (`any`).
    pub src: String,
    /// Destination prefix (`any`).
    pub dst: String,
    /// Protocol (`any`).
    pub protocol: String,
    /// Source ports (`any`).
    pub src_ports: String,
    /// Destination ports (`any`).
    pub dst_ports: String,
    /// `protect`, `bypass` or `discard`.
    pub action: &'static str,
    /// Its SAs' SPIs.
    pub sa: Vec<u32>,
    /// Packets that matched it.
    pub matches: u64,
    /// Made by IKE for a child SA of this peer (policy-based), not in the config.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
}

/// A policy IKE made for a child SA of a policy-based peer (one with `interface`): it
/// follows the config's at its priority.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IkePolicy {
    /// The peer (`[[ipsec.peer]]`) whose child SAs it is for.
    pub peer: String,
    /// The policy, as a config entry would say it.
    pub entry: PolicyEntry,
}

/// A child SA of a policy-based IKE peer, as its policies need it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IkeChild {
    /// Its peer's name.
    pub peer: String,
    /// The port or VLAN sub-interface whose SPD gets its policies.
    pub interface: String,
    /// Their priority.
    pub priority: u32,
    /// The selectors negotiated: ours (source of what it sends) and the peer's.
    pub local_ts: Vec<ike::wire::Selector>,
    /// The peer's.
    pub remote_ts: Vec<ike::wire::Selector>,
    /// Its inbound SA's SPI (ours).
    pub spi_in: u32,
    /// Its outbound SA's SPI (the peer's).
    pub spi_out: u32,
}

/// The most policies one child SA's selectors make (a range that is no prefix makes
/// several prefixes, and each pair of ours and the peer's a policy per direction).
pub const MAX_CHILD_POLICIES: usize = 256;

/// The policies of policy-based IKE children, `children` in the order they were
/// installed. Children of one peer with the same interface, priority and selectors (a
/// child SA and the one rekeying it, or several children alike) share their policies: out,
/// PROTECT with the newest child's outbound SA (so a rekey switches once its new SA is
/// in); in, PROTECT naming every such child's inbound SA. An error names the child whose
/// selectors the SPD cannot hold (ICMP types, more than [`MAX_CHILD_POLICIES`]).
pub fn ike_policies(children: &[IkeChild]) -> Result<Vec<IkePolicy>, String> {
    // The groups in the order of their first child: (first, newest outbound SPI, inbound SPIs).
    type Key<'a> = (
        &'a str,
        &'a str,
        u32,
        &'a [ike::wire::Selector],
        &'a [ike::wire::Selector],
    );
    let mut at: std::collections::HashMap<Key<'_>, usize> = std::collections::HashMap::new();
    let mut groups: Vec<(&IkeChild, u32, Vec<u32>)> = Vec::new();
    for c in children {
        let key = (
            c.peer.as_str(),
            c.interface.as_str(),
            c.priority,
            &c.local_ts[..],
            &c.remote_ts[..],
        );
        match at.get(&key) {
            Some(&g) => {
                groups[g].1 = c.spi_out;
                groups[g].2.push(c.spi_in);
            }
            None => {
                at.insert(key, groups.len());
                groups.push((c, c.spi_out, vec![c.spi_in]));
            }
        }
    }
    let mut out = Vec::new();
    for (c, spi_out, spis_in) in groups {
        let made = child_policies(c, spi_out, &spis_in)
            .map_err(|e| format!("child SA {:08x} of IKE peer {:?}: {e}", c.spi_in, c.peer))?;
        out.extend(made.into_iter().map(|entry| IkePolicy {
            peer: c.peer.clone(),
            entry,
        }));
    }
    Ok(out)
}

/// One child's selectors as policies: for each pair of our and the peer's selectors of
/// one family and compatible protocols, and each pair of their prefixes, an outbound and
/// an inbound PROTECT policy.
fn child_policies(c: &IkeChild, spi_out: u32, spis_in: &[u32]) -> Result<Vec<PolicyEntry>, String> {
    use firewall::config::{PortList, Protocol};
    use ike::wire::Selector;
    let ports = |s: &Selector, proto: u8| -> Result<PortList, String> {
        if s.start_port == 0 && s.end_port == u16::MAX {
            return Ok(PortList::default());
        }
        if !matches!(proto, 6 | 17 | 132) {
            return Err(format!(
                "ports {}-{} with protocol {proto}: an SPD selects ports of TCP, UDP and SCTP only",
                s.start_port, s.end_port
            ));
        }
        Ok(PortList(vec![s.start_port..=s.end_port]))
    };
    let prefixes = |s: &Selector| -> Result<Vec<String>, String> {
        crate::dests::range_prefixes(s.start, s.end)
            .map(|v| v.into_iter().map(|(a, l)| format!("{a}/{l}")).collect())
            .ok_or_else(|| format!("{}-{}: not a range of one family", s.start, s.end))
    };
    let mut out = Vec::new();
    for l in &c.local_ts {
        for r in &c.remote_ts {
            if l.start.is_ipv4() != r.start.is_ipv4() {
                continue;
            }
            let proto = match (l.protocol, r.protocol) {
                (0, p) | (p, 0) => p,
                (a, b) if a == b => a,
                _ => continue,
            };
            let (lports, rports) = (ports(l, proto)?, ports(r, proto)?);
            let protocol = (proto != 0).then_some(Protocol(proto));
            let (lp, rp) = (prefixes(l)?, prefixes(r)?);
            if out.len() + 2 * lp.len() * rp.len() > MAX_CHILD_POLICIES {
                return Err(format!(
                    "its selectors make more than {MAX_CHILD_POLICIES} policies"
                ));
            }
            for a in &lp {
                for b in &rp {
                    let entry =
                        |direction, src: &str, dst: &str, sp: &PortList, dp: &PortList, sa| {
                            PolicyEntry {
                                interface: c.interface.clone(),
                                direction,
                                priority: c.priority,
                                src: Some(src.to_string()),
                                dst: Some(dst.to_string()),
                                protocol,
                                src_ports: sp.clone(),
                                dst_ports: dp.clone(),
                                action: PolicyAction::Protect,
                                sa: Some(sa),
                            }
                        };
                    out.push(entry(
                        SaDirection::Out,
                        a,
                        b,
                        &lports,
                        &rports,
                        SpiList::One(spi_out),
                    ));
                    out.push(entry(
                        SaDirection::In,
                        b,
                        a,
                        &rports,
                        &lports,
                        SpiList::Many(spis_in.to_vec()),
                    ));
                }
            }
        }
    }
    Ok(out)
}

/// A policy by where it comes from: `ipsec.policy[3]`, or IKE's for a peer.
fn label(i: usize, peer: Option<&str>) -> String {
    match peer {
        None => format!("ipsec.policy[{i}]"),
        Some(p) => format!("IKE peer {p:?}'s policy"),
    }
}

/// Every interface's SPD.
#[derive(Default)]
pub struct Spd {
    /// By interface index: its outbound table.
    out: Vec<Option<Table>>,
    /// By interface index: its inbound table.
    inb: Vec<Option<Table>>,
    /// The policies, by index in `[[ipsec.policy]]`.
    pub policies: Vec<Policy>,
    /// What `show ipsec` lists (without counters).
    views: Vec<PolicyView>,
    /// The config entries, to carry counters over to the next SPD.
    entries: Vec<(u16, PolicyEntry)>,
}

fn dir_name(d: SaDirection) -> &'static str {
    match d {
        SaDirection::Out => "out",
        SaDirection::In => "in",
    }
}

fn range_text(l: &firewall::config::PortList) -> String {
    if l.is_empty() {
        "any".into()
    } else {
        l.to_string()
    }
}

impl Spd {
    /// The outbound table of interface `iface`.
    #[inline]
    pub fn out(&self, iface: u16) -> Option<&Table> {
        self.out.get(iface as usize)?.as_ref()
    }

    /// The inbound table of interface `iface`.
    #[inline]
    pub fn inbound(&self, iface: u16) -> Option<&Table> {
        self.inb.get(iface as usize)?.as_ref()
    }

    /// Whether no interface has an SPD.
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// Compile `cfg`'s policies, then IKE's (`ike`), over the fast path's interfaces
    /// `names` (by index), for `workers` workers; counters of policies unchanged since
    /// `prev` go on. Errors name the policy.
    pub fn compile(
        cfg: &IpsecConfig,
        ike: &[IkePolicy],
        names: &[String],
        workers: usize,
        prev: &Spd,
    ) -> Result<Spd, String> {
        let n = names.len();
        let mut spd = Spd {
            out: (0..n).map(|_| None).collect(),
            inb: (0..n).map(|_| None).collect(),
            ..Spd::default()
        };
        let all: Vec<(&PolicyEntry, Option<&str>)> = cfg
            .policies
            .iter()
            .map(|p| (p, None))
            .chain(ike.iter().map(|x| (&x.entry, Some(x.peer.as_str()))))
            .collect();
        for (i, &(p, peer)) in all.iter().enumerate() {
            let at = label(i, peer);
            let iface = names
                .iter()
                .position(|x| *x == p.interface)
                .ok_or_else(|| format!("{at}.interface: no interface named {:?}", p.interface))?
                as u16;
            let counts = prev
                .entries
                .iter()
                .position(|e| e.0 == iface && e.1 == *p)
                .and_then(|k| prev.policies.get(k))
                .map(|q| q.counts.clone())
                .unwrap_or_else(|| {
                    Arc::new((0..workers.max(1)).map(|_| AtomicU64::new(0)).collect())
                });
            let spis = p.sa.as_ref().map(|s| s.spis()).unwrap_or_default();
            spd.views.push(PolicyView {
                index: i,
                interface: p.interface.clone(),
                direction: dir_name(p.direction),
                priority: p.priority,
                src: p.src.clone().unwrap_or_else(|| "any".into()),
                dst: p.dst.clone().unwrap_or_else(|| "any".into()),
                protocol: p.protocol.map_or_else(|| "any".into(), |x| x.name()),
                src_ports: range_text(&p.src_ports),
                dst_ports: range_text(&p.dst_ports),
                action: p.action.name(),
                sa: spis.clone(),
                matches: 0,
                peer: peer.map(str::to_string),
            });
            spd.policies.push(Policy {
                action: p.action,
                spis,
                slot: NONE,
                owner: 0,
                counts,
            });
            spd.entries.push((iface, p.clone()));
        }
        // Per interface and direction, the policies by priority (ties: config order).
        for (iface, name) in names.iter().enumerate() {
            for dir in [SaDirection::Out, SaDirection::In] {
                let mut mine: Vec<usize> = (0..all.len())
                    .filter(|&i| all[i].0.interface == *name && all[i].0.direction == dir)
                    .collect();
                let default = cfg
                    .spds
                    .iter()
                    .find(|d| d.interface == *name && d.direction == dir)
                    .map(|d| d.default);
                if mine.is_empty() && default.is_none() {
                    continue;
                }
                mine.sort_by_key(|&i| (all[i].0.priority, i));
                let t = table(&all, &mine, default.unwrap_or(PolicyAction::Bypass))?;
                match dir {
                    SaDirection::Out => spd.out[iface] = Some(t),
                    SaDirection::In => spd.inb[iface] = Some(t),
                }
            }
        }
        Ok(spd)
    }

    /// Set each outbound protect policy's SA slot and the worker holding it: `slot(spi)`
    /// ([`NONE`] if not installed).
    pub fn resolve(&mut self, slot: impl Fn(u32) -> (u32, u16)) {
        for (p, (_, e)) in self.policies.iter_mut().zip(&self.entries) {
            if p.action == PolicyAction::Protect && e.direction == SaDirection::Out {
                (p.slot, p.owner) = p.spis.first().map_or((NONE, 0), |&s| slot(s));
            }
        }
    }

    /// The policies with their counters, by interface, direction and priority.
    pub fn report(&self) -> Vec<PolicyView> {
        let mut v: Vec<PolicyView> = self
            .views
            .iter()
            .zip(&self.policies)
            .map(|(v, p)| PolicyView {
                matches: p.matches(),
                ..v.clone()
            })
            .collect();
        v.sort_by(|a, b| {
            (&a.interface, a.direction, a.priority, a.index).cmp(&(
                &b.interface,
                b.direction,
                b.priority,
                b.index,
            ))
        });
        v
    }

    /// The interfaces (by index) with an outbound SPD.
    pub fn out_ifaces(&self) -> impl Iterator<Item = usize> + '_ {
        self.out
            .iter()
            .enumerate()
            .filter(|x| x.1.is_some())
            .map(|x| x.0)
    }

    /// The interfaces (by index) with an inbound SPD.
    pub fn in_ifaces(&self) -> impl Iterator<Item = usize> + '_ {
        self.inb
            .iter()
            .enumerate()
            .filter(|x| x.1.is_some())
            .map(|x| x.0)
    }
}

fn net(s: &Option<String>) -> Result<Option<(IpAddr, u8)>, String> {
    s.as_deref()
        .map(|s| firewall::config::parse_net(s).map(|n| (n.addr, n.len)))
        .transpose()
}

/// One direction of one interface: `order` are the policies' indices in `all` (with the
/// peer of IKE's), first match first.
fn table(
    all: &[(&PolicyEntry, Option<&str>)],
    order: &[usize],
    default: PolicyAction,
) -> Result<Table, String> {
    let (mut r4, mut p4, mut m4) = (Vec::new(), Vec::new(), Vec::new());
    let (mut r6, mut p6, mut m6) = (Vec::new(), Vec::new(), Vec::new());
    for &i in order {
        let (p, peer) = all[i];
        let at = |f: &str| format!("{}.{f}", label(i, peer));
        let src = net(&p.src).map_err(|e| format!("{}: {e}", at("src")))?;
        let dst = net(&p.dst).map_err(|e| format!("{}: {e}", at("dst")))?;
        let fam = src.or(dst).map(|a| a.0.is_ipv4());
        let all = 0..=u16::MAX;
        let sports = if p.src_ports.is_empty() {
            vec![all.clone()]
        } else {
            p.src_ports.0.clone()
        };
        let dports = if p.dst_ports.is_empty() {
            vec![all.clone()]
        } else {
            p.dst_ports.0.clone()
        };
        let partial = !(p.src_ports.is_empty() && p.dst_ports.is_empty());
        for sp in &sports {
            for dp in &dports {
                if fam != Some(false) {
                    let v4 = |a: Option<(IpAddr, u8)>| match a {
                        Some((IpAddr::V4(x), l)) => Some((x, l)),
                        _ => None,
                    };
                    let m: Match<Ipv4Addr> = Match {
                        src: v4(src),
                        dst: v4(dst),
                        sport: sp.clone(),
                        dport: dp.clone(),
                        proto: p.protocol.map(|x| x.0),
                    };
                    r4.push(m.rule().map_err(|e| format!("{}: {e}", label(i, peer)))?);
                    p4.push(partial);
                    m4.push(i as u32);
                }
                if fam != Some(true) {
                    let v6 = |a: Option<(IpAddr, u8)>| match a {
                        Some((IpAddr::V6(x), l)) => Some((x, l)),
                        _ => None,
                    };
                    let m: Match<Ipv6Addr> = Match {
                        src: v6(src),
                        dst: v6(dst),
                        sport: sp.clone(),
                        dport: dp.clone(),
                        proto: p.protocol.map(|x| x.0),
                    };
                    r6.push(m.rule().map_err(|e| format!("{}: {e}", label(i, peer)))?);
                    p6.push(partial);
                    m6.push(i as u32);
                }
            }
        }
    }
    let build4 = |r: Vec<Rule<u32>>, p| Classifier::build_partial(r, p, Options::default());
    let build6 = |r: Vec<Rule<u128>>, p| Classifier::build_partial(r, p, Options::default());
    let v4 = build4(r4, p4).map_err(|e| format!("ipsec.policy: {e}"))?;
    let v6 = build6(r6, p6).map_err(|e| format!("ipsec.policy: {e}"))?;
    Ok(Table {
        v4,
        v6,
        rules4: m4,
        rules6: m6,
        default,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> IpsecConfig {
        toml::from_str(text).unwrap()
    }

    const POLICIES: &str = r#"
[[policy]]
interface = "eth1"
direction = "out"
priority = 200
dst = "10.2.0.0/16"
action = "protect"
sa = 0x1001
[[policy]]
interface = "eth1"
direction = "out"
priority = 100
dst = "10.2.0.0/24"
protocol = "udp"
dst_ports = ["5001", "6000-6010"]
action = "bypass"
[[policy]]
interface = "eth1"
direction = "out"
priority = 100
dst = "10.2.9.0/24"
action = "discard"
[[policy]]
interface = "eth1"
direction = "in"
src = "2001:db8:2::/48"
action = "protect"
sa = [0x2001, 0x2002]
[[spd]]
interface = "eth0"
direction = "out"
default = "discard"
"#;

    fn k4(dst: &str, proto: u8, dport: u16) -> [u32; 5] {
        classify::key_v4(
            "10.1.0.2".parse().unwrap(),
            dst.parse().unwrap(),
            1234,
            dport,
            proto,
        )
    }

    #[test]
    fn policies_match_by_priority_then_order_and_fragments_skip_port_selectors() {
        let c = cfg(POLICIES);
        let names: Vec<String> = vec!["eth0".into(), "eth1".into()];
        let spd = Spd::compile(&c, &[], &names, 2, &Spd::default()).unwrap();
        let t = spd.out(1).unwrap();
        // Priority 100 first: the bypass of UDP 5001 and 6000-6010 to 10.2.0/24.
        assert_eq!(
            t.classify4(&k4("10.2.0.5", 17, 5001), true),
            Verdict::Policy(1)
        );
        assert_eq!(
            t.classify4(&k4("10.2.0.5", 17, 6005), true),
            Verdict::Policy(1)
        );
        assert_eq!(
            t.classify4(&k4("10.2.0.5", 17, 6011), true),
            Verdict::Policy(0)
        );
        assert_eq!(
            t.classify4(&k4("10.2.0.5", 6, 5001), true),
            Verdict::Policy(0)
        );
        // A later fragment has no ports: only policies without port selectors.
        assert_eq!(
            t.classify4(&k4("10.2.0.5", 17, 0), false),
            Verdict::Policy(0)
        );
        assert_eq!(t.classify4(&k4("10.2.9.1", 1, 0), true), Verdict::Policy(2));
        // Nothing matches: bypass, the default.
        assert_eq!(
            t.classify4(&k4("10.3.0.1", 1, 0), true),
            Verdict::Default(PolicyAction::Bypass)
        );
        // IPv4-only selectors stay out of the IPv6 table; the inbound IPv6 policy is there.
        let key6 = |src: &str| {
            classify::key_v6(
                src.parse().unwrap(),
                "2001:db8:1::2".parse().unwrap(),
                0,
                0,
                58,
            )
        };
        assert_eq!(
            t.classify6(&key6("2001:db8:2::2"), true),
            Verdict::Default(PolicyAction::Bypass)
        );
        let i = spd.inbound(1).unwrap();
        assert_eq!(
            i.classify6(&key6("2001:db8:2::2"), true),
            Verdict::Policy(3)
        );
        assert_eq!(spd.policies[3].spis, vec![0x2001, 0x2002]);
        // An SPD of defaults only.
        let e = spd.out(0).unwrap();
        assert_eq!(
            e.classify4(&k4("10.2.0.5", 17, 5001), true),
            Verdict::Default(PolicyAction::Discard)
        );
        assert!(spd.inbound(0).is_none());
        assert_eq!(spd.out_ifaces().collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(spd.in_ifaces().collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn counters_go_on_for_unchanged_policies_and_slots_resolve_by_spi() {
        let c = cfg(POLICIES);
        let names: Vec<String> = vec!["eth0".into(), "eth1".into()];
        let mut a = Spd::compile(&c, &[], &names, 2, &Spd::default()).unwrap();
        a.resolve(|spi| if spi == 0x1001 { (7, 1) } else { (NONE, 0) });
        assert_eq!((a.policies[0].slot, a.policies[0].owner), (7, 1));
        assert_eq!(a.policies[3].slot, NONE, "inbound policies have no slot");
        a.policies[0].count(0);
        a.policies[0].count(1);
        a.policies[2].count(1);
        let mut c2 = c.clone();
        c2.policies[2].dst = Some("10.2.8.0/24".into());
        let b = Spd::compile(&c2, &[], &names, 2, &a).unwrap();
        let r = b.report();
        let m = |i: usize| r.iter().find(|v| v.index == i).unwrap().matches;
        assert_eq!(m(0), 2);
        assert_eq!(m(2), 0, "a changed policy starts again");
        assert_eq!(r[0].interface, "eth1");
        assert_eq!(r[0].direction, "in");
        let e = Spd::compile(&c, &[], &["eth0".to_string()], 1, &a)
            .err()
            .unwrap();
        assert!(
            e.starts_with("ipsec.policy[0].interface: no interface named \"eth1\""),
            "{e}"
        );
    }

    fn ts(text: &str) -> ike::wire::Selector {
        ike::config::parse_ts(text).unwrap()
    }

    fn child(spi_in: u32, spi_out: u32, lts: &[&str], rts: &[&str]) -> IkeChild {
        IkeChild {
            peer: "b".into(),
            interface: "eth1".into(),
            priority: 100,
            local_ts: lts.iter().map(|t| ts(t)).collect(),
            remote_ts: rts.iter().map(|t| ts(t)).collect(),
            spi_in,
            spi_out,
        }
    }

    #[test]
    fn ike_children_make_a_protect_policy_each_way_and_a_rekey_shares_them() {
        let a = child(0xa1, 0xb1, &["10.1.0.0/24"], &["10.2.0.0/24"]);
        let p = ike_policies(std::slice::from_ref(&a)).unwrap();
        assert_eq!(p.len(), 2);
        let (out, inb) = (&p[0].entry, &p[1].entry);
        assert_eq!(
            (out.direction, out.src.as_deref(), out.dst.as_deref()),
            (SaDirection::Out, Some("10.1.0.0/24"), Some("10.2.0.0/24"))
        );
        assert_eq!(out.sa, Some(SpiList::One(0xb1)));
        assert_eq!(
            (inb.direction, inb.src.as_deref(), inb.dst.as_deref()),
            (SaDirection::In, Some("10.2.0.0/24"), Some("10.1.0.0/24"))
        );
        assert_eq!(p[0].peer, "b");
        // Its rekey: one pair of policies still, out with the new SA, in with both.
        let b = child(0xa2, 0xb2, &["10.1.0.0/24"], &["10.2.0.0/24"]);
        let p = ike_policies(&[a.clone(), b.clone()]).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].entry.sa, Some(SpiList::One(0xb2)));
        assert_eq!(p[1].entry.sa, Some(SpiList::Many(vec![0xa1, 0xa2])));
        // The old one gone: the new one's alone.
        let p = ike_policies(std::slice::from_ref(&b)).unwrap();
        assert_eq!(p[1].entry.sa, Some(SpiList::Many(vec![0xa2])));
        // Compiled after the config's, on the interface they name.
        let c = cfg(POLICIES);
        let names: Vec<String> = vec!["eth0".into(), "eth1".into()];
        let ike = ike_policies(&[a, b]).unwrap();
        let spd = Spd::compile(&c, &ike, &names, 2, &Spd::default()).unwrap();
        let t = spd.out(1).unwrap();
        let key = |src: &str, dst: &str| {
            classify::key_v4(src.parse().unwrap(), dst.parse().unwrap(), 1000, 5001, 17)
        };
        // The config's UDP bypass (priority 100, before at the same priority) still wins.
        assert_eq!(
            t.classify4(&key("10.1.0.1", "10.2.0.5"), true),
            Verdict::Policy(1)
        );
        let k = c.policies.len();
        let k_in = k + 1;
        let tcp = classify::key_v4(
            "10.1.0.1".parse().unwrap(),
            "10.2.0.5".parse().unwrap(),
            1000,
            80,
            6,
        );
        assert_eq!(t.classify4(&tcp, true), Verdict::Policy(k));
        assert_eq!(spd.policies[k].spis, vec![0xb2]);
        let i = spd.inbound(1).unwrap();
        let back = classify::key_v4(
            "10.2.0.5".parse().unwrap(),
            "10.1.0.1".parse().unwrap(),
            80,
            1000,
            6,
        );
        assert_eq!(i.classify4(&back, true), Verdict::Policy(k_in));
        let v = spd.report();
        assert!(v
            .iter()
            .any(|x| x.index == k && x.peer.as_deref() == Some("b")));
        assert!(v.iter().filter(|x| x.index < k).all(|x| x.peer.is_none()));
    }

    #[test]
    fn ike_selectors_become_prefixes_ports_and_protocols() {
        // A range that is no prefix, ports, both families (only pairs of one family).
        let c = child(
            1,
            2,
            &["10.1.0.1-10.1.0.2[tcp/80]", "2001:db8:1::/64"],
            &["10.2.0.0/24[tcp]", "2001:db8:2::/64"],
        );
        let p = ike_policies(&[c]).unwrap();
        let outs: Vec<_> = p
            .iter()
            .filter(|x| x.entry.direction == SaDirection::Out)
            .map(|x| {
                (
                    x.entry.src.clone().unwrap(),
                    x.entry.dst.clone().unwrap(),
                    x.entry.protocol.map(|p| p.0),
                    x.entry.src_ports.to_string(),
                    x.entry.dst_ports.is_empty(),
                )
            })
            .collect();
        assert_eq!(
            outs,
            [
                (
                    "10.1.0.1/32".into(),
                    "10.2.0.0/24".into(),
                    Some(6),
                    "80".into(),
                    true
                ),
                (
                    "10.1.0.2/32".into(),
                    "10.2.0.0/24".into(),
                    Some(6),
                    "80".into(),
                    true
                ),
                (
                    "2001:db8:1::/64".into(),
                    "2001:db8:2::/64".into(),
                    None,
                    "".into(),
                    true
                ),
            ]
        );
        // Inbound: the ports on the other side.
        let inb = p
            .iter()
            .find(|x| x.entry.direction == SaDirection::In)
            .unwrap();
        assert_eq!(inb.entry.dst_ports.to_string(), "80");
        // What an SPD cannot select, and too many policies, name the child.
        let mut icmp = child(3, 4, &["10.1.0.0/24"], &["10.2.0.0/24"]);
        icmp.remote_ts[0].protocol = 1;
        icmp.remote_ts[0].start_port = 0x0800;
        icmp.remote_ts[0].end_port = 0x0800;
        let e = ike_policies(&[icmp]).unwrap_err();
        assert!(
            e.contains("child SA 00000003") && e.contains("TCP, UDP and SCTP"),
            "{e}"
        );
        let wide = child(
            5,
            6,
            &["10.0.0.1-10.255.255.254"],
            &["10.0.0.1-10.255.255.254"],
        );
        assert!(ike_policies(&[wide]).unwrap_err().contains("more than 256"));
    }
}
