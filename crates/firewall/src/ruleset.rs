//! A firewall config compiled for the fast path: per filter, one classifier per address
//! family over the rules' boxes, the rules' remaining conditions and actions, and which
//! interface has which filter at each hook. Immutable: a change compiles a new
//! [`RuleSet`], published whole (the workers pick it up at their next batch), so a packet
//! is judged by one filter's old rules or by its new ones, never by a mix.
//!
//! **Keys.** A packet's key is its 5-tuple; ICMP and ICMPv6 carry type and code in the
//! port dimensions. A packet whose transport header is not there (an IPv4 or IPv6
//! fragment after the first) has protocol `256 + p`: rules that match ports, ICMP type or
//! TCP flags are boxes at protocol `p` only, so they never match it, while a rule on the
//! protocol alone has a second box at `256 + p` and does. A rule that names no protocol
//! spans 0-511.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::classify::{dim, Addr, BuildError, Classifier, Field, Options, Rule, DIMS};
use crate::config::{
    parse_net, parse_states, parse_tcp_flags, Action, Filter, FirewallConfig, Hook, Net, PortList,
    RuleConfig, ICMP, ICMPV6,
};

/// Key protocol offset for packets without a transport header.
pub const NO_L4: u32 = 256;

/// A rule as the fast path applies it, after its box matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleRt {
    /// What it does.
    pub action: Action,
    /// TCP flags that must equal `flags_value` (0: no condition).
    pub flags_mask: u8,
    /// Their values.
    pub flags_value: u8,
    /// DSCP values it matches, a bit each (0: any).
    pub dscp: u64,
    /// Conntrack states it matches (0: any).
    pub states: u8,
    /// Send a log record.
    pub log: bool,
    /// New DSCP for accepted packets (0xff: leave).
    pub set_dscp: u8,
}

impl RuleRt {
    /// Whether the rule has conditions beyond its box.
    fn partial(&self) -> bool {
        self.flags_mask != 0 || self.dscp != 0 || self.states != 0
    }
    /// Whether a packet with these TCP flags, DSCP and state passes the rule's remaining
    /// conditions.
    #[inline]
    pub fn extra(&self, flags: u8, dscp: u8, state: u8) -> bool {
        flags & self.flags_mask == self.flags_value
            && (self.dscp == 0 || self.dscp >> (dscp & 63) & 1 != 0)
            && (self.states == 0 || self.states & state != 0)
    }
}

/// One filter, compiled.
#[derive(Clone, Debug)]
pub struct CompiledFilter {
    /// Its name.
    pub name: String,
    /// Its hook.
    pub hook: Hook,
    /// Its interfaces' names.
    pub interfaces: Vec<String>,
    /// What happens when no rule matches.
    pub policy: Action,
    /// IPv4 boxes, and the rule each belongs to.
    pub v4: Classifier<u32>,
    map4: Vec<u32>,
    /// IPv6 boxes, and the rule each belongs to.
    pub v6: Classifier<u128>,
    map6: Vec<u32>,
    /// The rules, in order.
    pub rules: Vec<RuleRt>,
    /// The rules as configured (for `show firewall`).
    pub source: Vec<RuleConfig>,
    /// Counter slot of rule 0; rule `i` at `counter_base + i`, the policy after the last.
    pub counter_base: usize,
    /// Its position in [`RuleSet::filters`].
    pub index: u16,
    /// Per family (IPv4, IPv6) and connection-tracking state bit (by its position): the
    /// rule that decides every packet in that state without a classification, when the
    /// filter's first rules for the family match on state alone (the usual
    /// `established,related accept`, `invalid drop`) and one of them names the state;
    /// `NO_RULE` otherwise.
    by_state: [[u32; 4]; 2],
}

/// [`CompiledFilter::by_state`]: no rule.
const NO_RULE: u32 = u32::MAX;

/// Whether a rule matches on connection-tracking state and nothing else (bar its family).
fn state_only(r: &RuleConfig) -> bool {
    !r.state.is_empty()
        && r.protocol.is_none()
        && r.source.is_empty()
        && r.destination.is_empty()
        && r.source_port.is_empty()
        && r.destination_port.is_empty()
        && r.icmp_type.is_none()
        && r.icmp_code.is_none()
        && r.tcp_flags.is_empty()
        && r.dscp.is_empty()
}

/// [`CompiledFilter::by_state`] of `rules` (compiled as `rt`).
fn leading_state_rules(rules: &[RuleConfig], rt: &[RuleRt]) -> [[u32; 4]; 2] {
    use crate::config::Family;
    let mut out = [[NO_RULE; 4]; 2];
    for (fam, lead) in out.iter_mut().enumerate() {
        for (i, (r, x)) in rules.iter().zip(rt).enumerate() {
            // A rule of the other family never matches this one's packets.
            match (r.family, fam) {
                (Some(Family::Ipv6), 0) | (Some(Family::Ipv4), 1) => continue,
                _ => {}
            }
            if !state_only(r) {
                break;
            }
            for (bit, slot) in lead.iter_mut().enumerate() {
                if *slot == NO_RULE && x.states >> bit & 1 != 0 {
                    *slot = i as u32;
                }
            }
        }
    }
    out
}

/// The result of judging one packet by a filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The action.
    pub action: Action,
    /// The rule that decided (`None`: the policy).
    pub rule: Option<u32>,
    /// Its counter slot.
    pub slot: usize,
}

/// What the filter needs to know of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketKey<A> {
    /// Source address.
    pub src: A,
    /// Destination address.
    pub dst: A,
    /// Source port, or ICMP type.
    pub sport: u16,
    /// Destination port, or ICMP code.
    pub dport: u16,
    /// Protocol; plus [`NO_L4`] when there is no transport header.
    pub proto: u32,
    /// TCP flags (0 otherwise).
    pub flags: u8,
    /// DSCP.
    pub dscp: u8,
    /// Conntrack state bit ([`crate::config::state`]; 0 without conntrack).
    pub state: u8,
}

impl CompiledFilter {
    /// Compile filter `f` of `cfg` (whose sets its rules may name), validated: its place
    /// in [`RuleSet::filters`] is `index`, its rules' counters from slot `counter_base`.
    pub fn compile(
        f: &Filter,
        index: u16,
        counter_base: usize,
        cfg: &FirewallConfig,
    ) -> Result<CompiledFilter, CompileError> {
        let err = |rule: usize, what: String| CompileError {
            filter: f.name.clone(),
            rule,
            what,
        };
        let mut rules = Vec::with_capacity(f.rules.len());
        let (mut b4, mut m4, mut p4) = (Vec::new(), Vec::new(), Vec::new());
        let (mut b6, mut m6, mut p6) = (Vec::new(), Vec::new(), Vec::new());
        for (ri, r) in f.rules.iter().enumerate() {
            let rt = rule_rt(r).map_err(|e| err(ri + 1, e))?;
            let boxes = boxes(r, cfg).map_err(|e| err(ri + 1, e))?;
            for bx in boxes.v4 {
                b4.push(bx);
                m4.push(ri as u32);
                p4.push(rt.partial());
            }
            for bx in boxes.v6 {
                b6.push(bx);
                m6.push(ri as u32);
                p6.push(rt.partial());
            }
            rules.push(rt);
        }
        let build_err = |e: BuildError, map: &[u32]| {
            err(map.get(e.rule).map_or(0, |r| *r as usize + 1), e.what)
        };
        let v4 =
            Classifier::build_partial(b4, p4, Options::default()).map_err(|e| build_err(e, &m4))?;
        let v6 =
            Classifier::build_partial(b6, p6, Options::default()).map_err(|e| build_err(e, &m6))?;
        Ok(CompiledFilter {
            name: f.name.clone(),
            hook: f.hook,
            interfaces: f.interfaces.clone(),
            policy: f.policy,
            v4,
            map4: m4,
            v6,
            map6: m6,
            by_state: leading_state_rules(&f.rules, &rules),
            rules,
            source: f.rules.clone(),
            counter_base,
            index,
        })
    }

    /// The verdict of the filter's leading state-only rules for a packet in state `state`
    /// (a single bit; 0 untracked), if they decide it: exactly what classifying it would
    /// give, without the classification.
    #[inline]
    pub fn by_state(&self, v6: bool, state: u8) -> Option<Verdict> {
        if state == 0 {
            return None;
        }
        let bit = state.trailing_zeros() as usize;
        let rule = *self.by_state.get(usize::from(v6))?.get(bit)?;
        let rt = self.rules.get(rule as usize)?;
        Some(Verdict {
            action: rt.action,
            rule: Some(rule),
            slot: self.counter_base + rule as usize,
        })
    }

    fn verdict(&self, r: Option<u32>, map: &[u32]) -> Verdict {
        match r.and_then(|b| map.get(b as usize)) {
            Some(&rule) => Verdict {
                action: self
                    .rules
                    .get(rule as usize)
                    .map_or(self.policy, |x| x.action),
                rule: Some(rule),
                slot: self.counter_base + rule as usize,
            },
            None => Verdict {
                action: self.policy,
                rule: None,
                slot: self.counter_base + self.rules.len(),
            },
        }
    }

    /// Judge an IPv4 packet.
    #[inline]
    pub fn judge4(&self, k: &PacketKey<u32>) -> Verdict {
        let key = [k.src, k.dst, k.sport.into(), k.dport.into(), k.proto];
        let r = self
            .v4
            .classify_where(&key, |b| self.extra(&self.map4, b, k));
        self.verdict(r, &self.map4)
    }

    /// Judge an IPv6 packet.
    #[inline]
    pub fn judge6(&self, k: &PacketKey<u128>) -> Verdict {
        let key = [k.src, k.dst, k.sport.into(), k.dport.into(), k.proto.into()];
        let r = self
            .v6
            .classify_where(&key, |b| self.extra(&self.map6, b, k));
        self.verdict(r, &self.map6)
    }

    #[inline]
    fn extra<A>(&self, map: &[u32], b: u32, k: &PacketKey<A>) -> bool {
        map.get(b as usize)
            .and_then(|&r| self.rules.get(r as usize))
            .is_some_and(|r| r.extra(k.flags, k.dscp, k.state))
    }
}

/// Counters of one worker: packets and bytes per slot, written by that worker only.
pub struct WorkerCounters {
    cells: Box<[AtomicU64]>,
}

impl WorkerCounters {
    /// Counters for `slots` slots, at zero.
    pub fn new(slots: usize) -> WorkerCounters {
        // Two cells per slot, and a cache line of padding so workers' blocks never share
        // one.
        WorkerCounters {
            cells: (0..slots * 2 + 8).map(|_| AtomicU64::new(0)).collect(),
        }
    }
    /// Count one packet of `bytes` at `slot` (single writer: a load and a store).
    #[inline]
    pub fn add(&self, slot: usize, bytes: u64) {
        if let (Some(p), Some(b)) = (self.cells.get(slot * 2), self.cells.get(slot * 2 + 1)) {
            p.store(p.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            b.store(b.load(Ordering::Relaxed) + bytes, Ordering::Relaxed);
        }
    }
    /// (packets, bytes) counted at `slot` (0 for a slot it does not have).
    pub fn get(&self, slot: usize) -> (u64, u64) {
        let g = |i: usize| self.cells.get(i).map_or(0, |c| c.load(Ordering::Relaxed));
        (g(slot * 2), g(slot * 2 + 1))
    }
    /// (packets, bytes) at `slot`, summed over the workers' counters.
    pub fn sum(workers: &[WorkerCounters], slot: usize) -> (u64, u64) {
        workers.iter().fold((0, 0), |(p, b), w| {
            let (x, y) = w.get(slot);
            (p + x, b + y)
        })
    }
}

/// The whole firewall, compiled.
pub struct RuleSet {
    /// The filters.
    pub filters: Vec<CompiledFilter>,
    /// Per hook (ingress, egress), per interface index: its filter (`u16::MAX`: none).
    bind: [Vec<u16>; 2],
    /// Per worker.
    counters: Vec<WorkerCounters>,
    /// Log records per second per worker.
    pub log_rate: u32,
    /// Nanoseconds the compile took.
    pub compile_ns: u64,
}

/// Why a firewall config did not compile (after validation: only limits of the classifier).
#[derive(Debug, thiserror::Error)]
#[error("firewall filter {filter:?}: rule {rule}: {what}")]
pub struct CompileError {
    /// The filter.
    pub filter: String,
    /// The rule (1-based), or 0.
    pub rule: usize,
    /// What went wrong.
    pub what: String,
}

/// (counter slot, packets, bytes) of every rule and policy of a filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counts {
    /// Per rule: (packets, bytes).
    pub rules: Vec<(u64, u64)>,
    /// The policy's.
    pub policy: (u64, u64),
}

impl RuleSet {
    /// The empty rule set (no filter anywhere).
    pub fn empty() -> RuleSet {
        RuleSet {
            filters: Vec::new(),
            bind: [Vec::new(), Vec::new()],
            counters: Vec::new(),
            log_rate: 10,
            compile_ns: 0,
        }
    }

    /// Compile a validated `cfg` for interfaces `names` (by index) and `workers` workers.
    /// Fails only on what [`FirewallConfig::validate`] reports (an unknown set, a bad
    /// prefix or flag, more classifier entries than a filter may have).
    pub fn compile(
        cfg: &FirewallConfig,
        names: &[String],
        workers: usize,
    ) -> Result<RuleSet, CompileError> {
        let t0 = std::time::Instant::now();
        let mut filters = Vec::new();
        let mut bind = [vec![u16::MAX; names.len()], vec![u16::MAX; names.len()]];
        let mut slots = 0usize;
        for (fi, f) in cfg.filters.iter().enumerate() {
            let hook = usize::from(f.hook == Hook::Egress);
            for n in &f.interfaces {
                if let Some(i) = names.iter().position(|x| x == n) {
                    bind[hook][i] = fi as u16;
                }
            }
            let filter = CompiledFilter::compile(f, fi as u16, slots, cfg)?;
            slots += filter.rules.len() + 1;
            filters.push(filter);
        }
        Ok(RuleSet {
            filters,
            bind,
            counters: (0..workers.max(1))
                .map(|_| WorkerCounters::new(slots))
                .collect(),
            log_rate: cfg.log_rate,
            compile_ns: t0.elapsed().as_nanos() as u64,
        })
    }

    /// The filter interface `iface` has at `hook`.
    #[inline]
    pub fn filter(&self, hook: Hook, iface: u16) -> Option<&CompiledFilter> {
        let i = *self.bind[usize::from(hook == Hook::Egress)].get(iface as usize)?;
        self.filters.get(i as usize)
    }

    /// Worker `w`'s counters.
    #[inline]
    pub fn counters(&self, w: usize) -> Option<&WorkerCounters> {
        self.counters.get(w)
    }

    /// Filter `f`'s counters, summed over the workers.
    pub fn counts(&self, f: &CompiledFilter) -> Counts {
        let sum = |slot: usize| WorkerCounters::sum(&self.counters, slot);
        Counts {
            rules: (0..f.rules.len())
                .map(|i| sum(f.counter_base + i))
                .collect(),
            policy: sum(f.counter_base + f.rules.len()),
        }
    }

    /// The interfaces (by index) with a filter at `hook`.
    pub fn bound(&self, hook: Hook) -> impl Iterator<Item = usize> + '_ {
        self.bind[usize::from(hook == Hook::Egress)]
            .iter()
            .enumerate()
            .filter(|(_, f)| **f != u16::MAX)
            .map(|(i, _)| i)
    }
}

fn rule_rt(r: &RuleConfig) -> Result<RuleRt, String> {
    let (flags_mask, flags_value) = parse_tcp_flags(&r.tcp_flags).map_err(|e| e.1)?;
    let states = parse_states(&r.state).map_err(|e| e.1)?;
    let mut dscp = 0u64;
    for &d in &r.dscp {
        if d > 63 {
            return Err(format!("DSCP {d} is not in 0-63"));
        }
        dscp |= 1 << d;
    }
    Ok(RuleRt {
        action: r.action.ok_or("the rule has no action")?,
        flags_mask,
        flags_value,
        dscp,
        states,
        log: r.log,
        set_dscp: r.set_dscp.unwrap_or(0xff),
    })
}

/// A rule's boxes per family.
pub struct Boxes {
    /// IPv4.
    pub v4: Vec<Rule<u32>>,
    /// IPv6.
    pub v6: Vec<Rule<u128>>,
}

/// The networks of one side of a rule (`None`: any), expanded from sets.
fn side(list: &[String], cfg: &FirewallConfig) -> Result<Option<Vec<Net>>, String> {
    if list.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::new();
    for a in list {
        match a.strip_prefix('@') {
            Some(n) => {
                let s = cfg
                    .sets
                    .iter()
                    .find(|s| s.name == n)
                    .ok_or_else(|| format!("unknown set {n:?}"))?;
                for x in &s.addresses {
                    out.push(parse_net(x)?);
                }
            }
            None => out.push(parse_net(a)?),
        }
    }
    Ok(Some(out))
}

fn range<T: Field + From<u16>>(p: &PortList) -> Vec<(T, T)> {
    if p.is_empty() {
        vec![(T::ZERO, T::from(u16::MAX))]
    } else {
        p.0.iter()
            .map(|r| (T::from(*r.start()), T::from(*r.end())))
            .collect()
    }
}

fn fam_boxes<T: Field + From<u16> + From<u8>>(
    r: &RuleConfig,
    src: Option<Vec<(T, T)>>,
    dst: Option<Vec<(T, T)>>,
) -> Vec<Rule<T>> {
    let any = vec![(T::ZERO, T::MAX)];
    let (src, dst) = (src.unwrap_or_else(|| any.clone()), dst.unwrap_or(any));
    let icmp = matches!(r.protocol.map(|p| p.0), Some(ICMP | ICMPV6));
    let (sp, dp) = if icmp {
        let t = r
            .icmp_type
            .map_or((T::ZERO, T::from(u16::MAX)), |t| (T::from(t), T::from(t)));
        let c = r
            .icmp_code
            .map_or((T::ZERO, T::from(u16::MAX)), |c| (T::from(c), T::from(c)));
        (vec![t], vec![c])
    } else {
        (range::<T>(&r.source_port), range::<T>(&r.destination_port))
    };
    let l4 = !r.source_port.is_empty()
        || !r.destination_port.is_empty()
        || r.icmp_type.is_some()
        || !r.tcp_flags.is_empty();
    let protos: Vec<(T, T)> = match r.protocol {
        None => vec![(T::ZERO, T::from(511u16))],
        Some(p) if l4 => vec![(T::from(p.0), T::from(p.0))],
        Some(p) => {
            let nl = T::from(NO_L4 as u16 + u16::from(p.0));
            vec![(T::from(p.0), T::from(p.0)), (nl, nl)]
        }
    };
    let mut out = Vec::new();
    for s in &src {
        for d in &dst {
            for a in &sp {
                for b in &dp {
                    for p in &protos {
                        let mut bx = Rule::any();
                        (bx.lo[dim::SRC], bx.hi[dim::SRC]) = *s;
                        (bx.lo[dim::DST], bx.hi[dim::DST]) = *d;
                        (bx.lo[dim::SPORT], bx.hi[dim::SPORT]) = *a;
                        (bx.lo[dim::DPORT], bx.hi[dim::DPORT]) = *b;
                        (bx.lo[dim::PROTO], bx.hi[dim::PROTO]) = *p;
                        out.push(bx);
                    }
                }
            }
        }
    }
    out
}

/// The boxes of rule `r` (its source and destination lists crossed with its port lists),
/// per family; empty for a family it cannot match.
pub fn boxes(r: &RuleConfig, cfg: &FirewallConfig) -> Result<Boxes, String> {
    let src = side(&r.source, cfg)?;
    let dst = side(&r.destination, cfg)?;
    let v4 = |l: &Option<Vec<Net>>| -> Option<Vec<(u32, u32)>> {
        l.as_ref().map(|l| {
            l.iter()
                .filter_map(|n| match n.addr {
                    IpAddr::V4(a) => a.prefix_range(n.len).ok(),
                    IpAddr::V6(_) => None,
                })
                .collect()
        })
    };
    let v6 = |l: &Option<Vec<Net>>| -> Option<Vec<(u128, u128)>> {
        l.as_ref().map(|l| {
            l.iter()
                .filter_map(|n| match n.addr {
                    IpAddr::V6(a) => a.prefix_range(n.len).ok(),
                    IpAddr::V4(_) => None,
                })
                .collect()
        })
    };
    let proto = r.protocol.map(|p| p.0);
    let want4 = r.family != Some(crate::config::Family::Ipv6) && proto != Some(ICMPV6);
    let want6 = r.family != Some(crate::config::Family::Ipv4) && proto != Some(ICMP);
    Ok(Boxes {
        v4: if want4 {
            fam_boxes(r, v4(&src), v4(&dst))
        } else {
            Vec::new()
        },
        v6: if want6 {
            fam_boxes(r, v6(&src), v6(&dst))
        } else {
            Vec::new()
        },
    })
}

/// Rules of `cfg` that can never match, as (filter index, rule index, the earlier rule
/// that hides it): every box of the rule, in each family, lies inside one box of a single
/// earlier rule with no conditions beyond its box. Gives up (returns what it found) after
/// `budget` box comparisons.
pub fn shadowed(cfg: &FirewallConfig, budget: u64) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    let mut spent = 0u64;
    for (fi, f) in cfg.filters.iter().enumerate() {
        let compiled: Vec<Option<(Boxes, bool)>> = f
            .rules
            .iter()
            .map(|r| {
                let rt = rule_rt(r).ok()?;
                Some((boxes(r, cfg).ok()?, rt.partial()))
            })
            .collect();
        for j in 1..compiled.len() {
            let Some((bj, _)) = &compiled[j] else {
                continue;
            };
            if bj.v4.is_empty() && bj.v6.is_empty() {
                continue;
            }
            for (i, earlier) in compiled[..j].iter().enumerate() {
                let Some((bi, partial)) = earlier else {
                    continue;
                };
                if *partial {
                    continue;
                }
                spent += ((bj.v4.len() * bi.v4.len()) + (bj.v6.len() * bi.v6.len())) as u64;
                if spent > budget {
                    return out;
                }
                if inside(&bj.v4, &bi.v4) && inside(&bj.v6, &bi.v6) {
                    out.push((fi, j, i));
                    break;
                }
            }
        }
    }
    out
}

fn inside<T: Field>(a: &[Rule<T>], b: &[Rule<T>]) -> bool {
    a.iter().all(|x| {
        b.iter()
            .any(|y| (0..DIMS).all(|d| y.lo[d] <= x.lo[d] && x.hi[d] <= y.hi[d]))
    })
}
