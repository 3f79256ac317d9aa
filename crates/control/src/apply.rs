//! Applying a config to the kernel as one transaction.
//!
//! [`plan`] compares what two configs own — interface addresses, MTUs and admin state,
//! static routes, permanent neighbours — and lists the [`Op`]s that take the kernel from
//! one to the other. [`apply`] runs them in a safe order (removals first: routes,
//! neighbours, addresses; then MTUs, admin state, addresses, neighbours, routes) and, on any failure, undoes what it
//! had changed in reverse order, so the kernel is never left half-configured.
//!
//! Only what a step actually changed is undone: before running, [`apply`] reads the
//! kernel's state once and a step whose result is already there (an address present, an
//! MTU already set, the same route already installed — e.g. after a daemon restart) changes
//! nothing and records no undo. A route whose destination and metric the kernel already has
//! with other next hops is not ours to overwrite: that step fails (and the transaction rolls
//! back). Undoing an MTU change restores the value read from the kernel; undoing a new
//! neighbour deletes it, or restores the permanent entry it replaced.
//!
//! The fast path needs nothing of its own here: the daemon's netlink mirror carries every
//! kernel change into the FIB.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::net::IpAddr;

use linux::{Netlink, RouteKind, RouteTarget, StaticRoute, NUD_PERMANENT, RT_TABLE_MAIN};

use crate::config::{parse_mac, Config, InterfaceConfig, Prefix, RouteConfig, UrpfMode};

/// One change to the kernel.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Set an interface's MTU.
    SetMtu {
        /// Interface name.
        interface: String,
        /// New MTU.
        mtu: u32,
    },
    /// Add an address to an interface.
    AddAddress {
        /// Interface name.
        interface: String,
        /// Address and prefix length.
        addr: Prefix,
    },
    /// Remove an address from an interface.
    DelAddress {
        /// Interface name.
        interface: String,
        /// Address and prefix length.
        addr: Prefix,
    },
    /// Add or change a permanent neighbour.
    SetNeighbor {
        /// Interface name.
        interface: String,
        /// Its IP.
        ip: IpAddr,
        /// Its MAC.
        mac: [u8; 6],
    },
    /// Remove a neighbour (the MAC is what it had, for the undo).
    DelNeighbor {
        /// Interface name.
        interface: String,
        /// Its IP.
        ip: IpAddr,
        /// Its MAC.
        mac: [u8; 6],
    },
    /// Add a static route.
    AddRoute(RouteConfig),
    /// Change the next hops of a static route (same destination and metric).
    ReplaceRoute {
        /// As it was.
        old: RouteConfig,
        /// As it will be.
        new: RouteConfig,
    },
    /// Remove a static route.
    DelRoute(RouteConfig),
    /// Bring an interface administratively up or down (`enabled`). Asserted for every
    /// `[[interface]]` on every apply: a link set down outside Ferrouter comes back up.
    SetAdmin {
        /// Interface name.
        interface: String,
        /// Up (`true`) or down.
        up: bool,
    },
    /// Replace the firewall's rules (a fast-path setting, as [`Op::SetUrpf`]): compiled and
    /// published whole once the plan has applied.
    SetFirewall {
        /// What the new rules are: "2 filters, 37 rules, 1 set".
        summary: String,
    },
    /// Replace NAT's rules (a fast-path setting, as [`Op::SetFirewall`]); flows already
    /// translated keep their translation.
    SetNat {
        /// What the new rules are: "1 source rule, 2 destination rules".
        summary: String,
    },
    /// Replace IPsec's SAs (a fast-path setting): unchanged SAs keep their state, new ones
    /// are installed before a tunnel switches to them, gone ones are removed last.
    SetIpsec {
        /// What the new SAs are: "4 SAs on 2 tunnels".
        summary: String,
    },
    /// Replace the QoS policies (a fast-path setting): ports whose output policy did not
    /// change keep their queues and what is in them.
    SetQos {
        /// What the new config is: "2 policies, 1 policer, 3 interfaces".
        summary: String,
    },
    /// Set an interface's uRPF mode (`None`: off). A fast-path setting: the kernel does not
    /// change; the daemon publishes it to its workers once the whole plan has applied.
    SetUrpf {
        /// Interface name.
        interface: String,
        /// New mode.
        mode: Option<UrpfMode>,
    },
}

fn urpf_str(m: Option<UrpfMode>) -> &'static str {
    m.map_or("off", UrpfMode::name)
}

fn mac_str(m: &[u8; 6]) -> String {
    let h: Vec<String> = m.iter().map(|b| format!("{b:02x}")).collect();
    h.join(":")
}

fn route_str(r: &RouteConfig) -> String {
    let mut s = r.prefix.clone();
    if r.blackhole {
        s.push_str(" blackhole");
    } else {
        s.push_str(" via ");
        s.push_str(&r.via.join(", "));
    }
    if let Some(i) = &r.interface {
        s.push_str(&format!(" dev {i}"));
    }
    s.push_str(&format!(" metric {}", r.effective_metric()));
    s
}

impl Op {
    /// What the step does, as a gerund for error messages: "adding address 192.0.2.1/24 to
    /// eth1".
    pub fn doing(&self) -> String {
        match self {
            Op::SetMtu { interface, mtu } => format!("setting the MTU of {interface} to {mtu}"),
            Op::SetAdmin {
                interface,
                up: true,
            } => format!("bringing {interface} up"),
            Op::SetAdmin {
                interface,
                up: false,
            } => {
                format!("setting {interface} administratively down (enabled = false)")
            }
            Op::AddAddress { interface, addr } => format!("adding address {addr} to {interface}"),
            Op::DelAddress { interface, addr } => {
                format!("removing address {addr} from {interface}")
            }
            Op::SetNeighbor { interface, ip, mac } => {
                format!("setting neighbour {ip} on {interface} to {}", mac_str(mac))
            }
            Op::DelNeighbor { interface, ip, .. } => {
                format!("removing neighbour {ip} from {interface}")
            }
            Op::AddRoute(r) => format!("adding route {}", route_str(r)),
            Op::ReplaceRoute { new, .. } => format!("replacing route {}", route_str(new)),
            Op::DelRoute(r) => format!("removing route {}", route_str(r)),
            Op::SetUrpf { interface, mode } => {
                format!("setting uRPF on {interface} to {}", urpf_str(*mode))
            }
            Op::SetFirewall { summary } => format!("replacing the firewall rules ({summary})"),
            Op::SetNat { summary } => format!("replacing the NAT rules ({summary})"),
            Op::SetIpsec { summary } => format!("replacing the IPsec SAs ({summary})"),
            Op::SetQos { summary } => format!("replacing the QoS policies ({summary})"),
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::SetMtu { interface, mtu } => write!(f, "~ interface {interface} mtu {mtu}"),
            Op::SetAdmin { interface, up } => {
                let state = if *up { "up" } else { "down" };
                write!(f, "~ interface {interface} {state}")
            }
            Op::AddAddress { interface, addr } => write!(f, "+ address {addr} on {interface}"),
            Op::DelAddress { interface, addr } => write!(f, "- address {addr} on {interface}"),
            Op::SetNeighbor { interface, ip, mac } => {
                write!(f, "+ neighbor {ip} lladdr {} on {interface}", mac_str(mac))
            }
            Op::DelNeighbor { interface, ip, mac } => {
                write!(f, "- neighbor {ip} lladdr {} on {interface}", mac_str(mac))
            }
            Op::AddRoute(r) => write!(f, "+ route {}", route_str(r)),
            Op::ReplaceRoute { old, new } => {
                write!(f, "~ route {} (was {})", route_str(new), route_str(old))
            }
            Op::DelRoute(r) => write!(f, "- route {}", route_str(r)),
            Op::SetUrpf { interface, mode } => {
                write!(f, "~ interface {interface} urpf {}", urpf_str(*mode))
            }
            Op::SetFirewall { summary } => write!(f, "~ firewall: {summary}"),
            Op::SetNat { summary } => write!(f, "~ nat: {summary}"),
            Op::SetIpsec { summary } => write!(f, "~ ipsec: {summary}"),
            Op::SetQos { summary } => write!(f, "~ qos: {summary}"),
        }
    }
}

/// The MTU an interface returns to when the config stops setting one.
pub const DEFAULT_MTU: u32 = 1500;

/// The steps from one config to another, in the order they run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The steps.
    pub ops: Vec<Op>,
    /// Per interface, what the new config puts on it or through it (addresses, neighbours,
    /// routes). Taking a link down or up makes the kernel flush some of it (IPv6
    /// addresses, neighbours, IPv4 routes) without a word, so [`apply`] runs these again,
    /// after the admin steps, for each link whose state it changed.
    pub relink: Vec<(String, Op)>,
}

const ADMIN_RANK: u8 = 4;

/// Where an op runs in a plan: removals, MTUs, admin state, then what depends on it.
fn rank(op: &Op) -> u8 {
    match op {
        Op::DelRoute(_) => 0,
        Op::DelNeighbor { .. } => 1,
        Op::DelAddress { .. } => 2,
        Op::SetMtu { .. } => 3,
        Op::SetAdmin { .. } => ADMIN_RANK,
        Op::AddAddress { .. } => 5,
        Op::SetNeighbor { .. } => 6,
        Op::AddRoute(_) | Op::ReplaceRoute { .. } => 7,
        Op::SetUrpf { .. }
        | Op::SetFirewall { .. }
        | Op::SetNat { .. }
        | Op::SetIpsec { .. }
        | Op::SetQos { .. } => 8,
    }
}

impl Plan {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ops.is_empty() {
            return writeln!(f, "no changes");
        }
        for op in &self.ops {
            writeln!(f, "{op}")?;
        }
        Ok(())
    }
}

/// Why a plan cannot be made.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// Settings the daemon reads only when it starts changed.
    #[error("{} changed; this cannot be applied live: restart the daemon with the new file (ferrouter run --config FILE)", .0.join(", "))]
    RestartNeeded(Vec<&'static str>),
}

/// Key of a route: destination and metric (the kernel's identity of a route in a table).
fn route_key(r: &RouteConfig) -> (Option<Prefix>, u32) {
    (r.dst(), r.effective_metric())
}

/// Whether two routes with the same key forward the same way.
fn same_route(a: &RouteConfig, b: &RouteConfig) -> bool {
    let gw = |r: &RouteConfig| r.gateways().into_iter().collect::<BTreeSet<_>>();
    a.blackhole == b.blackhole && a.interface == b.interface && gw(a) == gw(b)
}

/// The steps that take the kernel from `old` to `new` (both validated). Fails if a setting
/// only a restart applies (`[[port]]`, `[[vlan]]`, `workers`, `worker_nice`, `control_socket`, `netlink_rcvbuf`,
/// `state_dir`, `[api]`, `[bgp]`, `[distance]`, `[firewall] conntrack, conntrack_max`,
/// `[[ipsec.tunnel]]`, `[ipsec] max_sas`, the first or last `[[ipsec.policy]]`) differs.
pub fn plan(old: &Config, new: &Config) -> Result<Plan, PlanError> {
    let mut restart = Vec::new();
    if old.ports != new.ports {
        restart.push("[[port]]");
    }
    if old.vlans != new.vlans {
        restart.push("[[vlan]]");
    }
    if old.workers != new.workers {
        restart.push("workers");
    }
    if old.worker_nice != new.worker_nice {
        restart.push("worker_nice");
    }
    if old.control_socket != new.control_socket {
        restart.push("control_socket");
    }
    if old.netlink_rcvbuf != new.netlink_rcvbuf {
        restart.push("netlink_rcvbuf");
    }
    if old.state_dir != new.state_dir {
        restart.push("state_dir");
    }
    if old.api != new.api {
        restart.push("[api]");
    }
    // The speaker takes its config at start only (for now); adding or removing the section
    // is a change too.
    if old.bgp != new.bgp {
        restart.push("[bgp]");
    }
    if old.distance != new.distance {
        restart.push("[distance]");
    }
    // The workers' flow tables are allocated at start.
    if (old.firewall.conntrack, old.firewall.conntrack_max)
        != (new.firewall.conntrack, new.firewall.conntrack_max)
    {
        restart.push("[firewall] conntrack, conntrack_max");
    }
    // IPsec's tunnel interfaces (their TUNs) and SA tables are made at start.
    if old.ipsec.tunnels != new.ipsec.tunnels {
        restart.push("[[ipsec.tunnel]]");
    }
    if old.ipsec.max_sas != new.ipsec.max_sas {
        restart.push("[ipsec] max_sas");
    }
    // ESP reaches the fast path (the XDP program's share, the handoff lanes) once IPsec is
    // configured at start: the first policies, or the last gone, take a restart; changes
    // to them do not.
    if old.ipsec.active() != new.ipsec.active() {
        restart.push("[[ipsec.policy]] (the first, or the last)");
    }
    // So are NAT's, once NAT has run.
    if old.nat.has_rules() && old.nat.max_sessions != new.nat.max_sessions {
        restart.push("[nat] max_sessions");
    }
    if !restart.is_empty() {
        return Err(PlanError::RestartNeeded(restart));
    }

    let addrs = |c: &Config| -> Vec<(String, Prefix)> {
        let mut v = Vec::new();
        for f in &c.interfaces {
            for a in &f.addresses {
                if let Ok(p) = a.parse::<Prefix>() {
                    v.push((f.name.clone(), p));
                }
            }
        }
        v
    };
    let neighs = |c: &Config| -> BTreeMap<(String, IpAddr), [u8; 6]> {
        c.neighbors
            .iter()
            .filter_map(|n| {
                Some((
                    (n.interface.clone(), n.ip.parse().ok()?),
                    parse_mac(&n.mac)?,
                ))
            })
            .collect()
    };
    let (old_addrs, new_addrs) = (addrs(old), addrs(new));
    let (old_neighs, new_neighs) = (neighs(old), neighs(new));
    // Lookups by name and key (a config may have thousands of tunnel interfaces).
    let old_addr_set: HashSet<&(String, Prefix)> = old_addrs.iter().collect();
    let new_addr_set: HashSet<&(String, Prefix)> = new_addrs.iter().collect();
    let mut old_ifaces: HashMap<&str, &InterfaceConfig> = HashMap::new();
    for o in &old.interfaces {
        old_ifaces.entry(o.name.as_str()).or_insert(o);
    }
    let mut new_ifaces: HashMap<&str, &InterfaceConfig> = HashMap::new();
    for f in &new.interfaces {
        new_ifaces.entry(f.name.as_str()).or_insert(f);
    }
    let mut old_routes: HashMap<(Option<Prefix>, u32), &RouteConfig> = HashMap::new();
    for r in &old.routes {
        old_routes.entry(route_key(r)).or_insert(r);
    }
    let new_route_keys: HashSet<(Option<Prefix>, u32)> = new.routes.iter().map(route_key).collect();

    let mut ops = Vec::new();
    // Removals, routes first (they may depend on addresses and neighbours).
    for r in &old.routes {
        if !new_route_keys.contains(&route_key(r)) {
            ops.push(Op::DelRoute(r.clone()));
        }
    }
    for ((interface, ip), mac) in &old_neighs {
        if !new_neighs.contains_key(&(interface.clone(), *ip)) {
            ops.push(Op::DelNeighbor {
                interface: interface.clone(),
                ip: *ip,
                mac: *mac,
            });
        }
    }
    for (interface, addr) in &old_addrs {
        if !new_addr_set.contains(&(interface.clone(), *addr)) {
            ops.push(Op::DelAddress {
                interface: interface.clone(),
                addr: *addr,
            });
        }
    }
    // Additions: MTUs, addresses, neighbours, then routes over them. An MTU the config no
    // longer sets goes back to the Ethernet default, as on other routers.
    for o in &old.interfaces {
        let now = new_ifaces.get(o.name.as_str());
        if o.mtu.is_some_and(|m| m != DEFAULT_MTU) && now.and_then(|f| f.mtu).is_none() {
            ops.push(Op::SetMtu {
                interface: o.name.clone(),
                mtu: DEFAULT_MTU,
            });
        }
    }
    for f in &new.interfaces {
        let before = old_ifaces.get(f.name.as_str()).and_then(|o| o.mtu);
        if let Some(mtu) = f.mtu {
            if before != Some(mtu) {
                ops.push(Op::SetMtu {
                    interface: f.name.clone(),
                    mtu,
                });
            }
        }
    }
    // Administrative state, before what depends on it (the kernel refuses a route through
    // a down link): every section's, each time, so a link set down outside Ferrouter
    // comes back up; a section that held its link down and is gone lets it come up.
    for f in &new.interfaces {
        ops.push(Op::SetAdmin {
            interface: f.name.clone(),
            up: f.enabled,
        });
    }
    for o in &old.interfaces {
        if !o.enabled && !new_ifaces.contains_key(o.name.as_str()) {
            ops.push(Op::SetAdmin {
                interface: o.name.clone(),
                up: true,
            });
        }
    }
    for (interface, addr) in &new_addrs {
        if !old_addr_set.contains(&(interface.clone(), *addr)) {
            ops.push(Op::AddAddress {
                interface: interface.clone(),
                addr: *addr,
            });
        }
    }
    for ((interface, ip), mac) in &new_neighs {
        if old_neighs.get(&(interface.clone(), *ip)) != Some(mac) {
            ops.push(Op::SetNeighbor {
                interface: interface.clone(),
                ip: *ip,
                mac: *mac,
            });
        }
    }
    for r in &new.routes {
        match old_routes.get(&route_key(r)).copied() {
            None => ops.push(Op::AddRoute(r.clone())),
            Some(o) if !same_route(o, r) => ops.push(Op::ReplaceRoute {
                old: o.clone(),
                new: r.clone(),
            }),
            Some(_) => {}
        }
    }
    // Fast-path settings last: published once every kernel step has applied.
    for f in &new.interfaces {
        let before = old_ifaces.get(f.name.as_str()).and_then(|o| o.urpf);
        if f.urpf != before {
            ops.push(Op::SetUrpf {
                interface: f.name.clone(),
                mode: f.urpf,
            });
        }
    }
    for o in &old.interfaces {
        let gone = !new_ifaces.contains_key(o.name.as_str());
        if o.urpf.is_some() && gone {
            ops.push(Op::SetUrpf {
                interface: o.name.clone(),
                mode: None,
            });
        }
    }
    if old.firewall != new.firewall {
        let fw = &new.firewall;
        let rules: usize = fw.filters.iter().map(|f| f.rules.len()).sum();
        ops.push(Op::SetFirewall {
            summary: format!(
                "{} filter{}, {rules} rule{}, {} set{}",
                fw.filters.len(),
                if fw.filters.len() == 1 { "" } else { "s" },
                if rules == 1 { "" } else { "s" },
                fw.sets.len(),
                if fw.sets.len() == 1 { "" } else { "s" },
            ),
        });
    }
    if old.nat != new.nat {
        let (s, d) = (new.nat.source.len(), new.nat.destination.len());
        ops.push(Op::SetNat {
            summary: format!(
                "{s} source rule{}, {d} destination rule{}",
                if s == 1 { "" } else { "s" },
                if d == 1 { "" } else { "s" },
            ),
        });
    }
    if old.qos != new.qos {
        let q = &new.qos;
        let n =
            |k: usize, one: &str, many: &str| format!("{k} {}", if k == 1 { one } else { many });
        ops.push(Op::SetQos {
            summary: format!(
                "{}, {}, {}",
                n(q.policies.len(), "policy", "policies"),
                n(q.policers.len(), "policer", "policers"),
                n(q.interfaces.len(), "interface", "interfaces"),
            ),
        });
    }
    if old.ipsec != new.ipsec {
        let n = new.ipsec.sas.len();
        ops.push(Op::SetIpsec {
            summary: format!(
                "{n} SA{} on {} tunnel{}",
                if n == 1 { "" } else { "s" },
                new.ipsec.tunnels.len(),
                if new.ipsec.tunnels.len() == 1 {
                    ""
                } else {
                    "s"
                },
            ),
        });
    }
    // What each section's link carries, to run again if its admin state changes: its
    // addresses, its neighbours, and the routes through it (by name, or with a gateway in
    // one of its subnets), each list in the config's order.
    let subnets: Vec<Vec<Prefix>> = new
        .interfaces
        .iter()
        .map(|f| f.addresses.iter().filter_map(|a| a.parse().ok()).collect())
        .collect();
    // Each interface's subnets by network, to find those holding a gateway.
    let mut by_network: HashMap<Prefix, Vec<usize>> = HashMap::new();
    for (i, nets) in subnets.iter().enumerate() {
        for s in nets {
            by_network.entry(s.network()).or_default().push(i);
        }
    }
    let mut sections: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, f) in new.interfaces.iter().enumerate() {
        sections.entry(f.name.as_str()).or_default().push(i);
    }
    let mut routes_through: Vec<Vec<&RouteConfig>> = vec![Vec::new(); new.interfaces.len()];
    for r in new.routes.iter().filter(|r| !r.blackhole) {
        let mut through: BTreeSet<usize> = BTreeSet::new();
        if let Some(n) = &r.interface {
            through.extend(sections.get(n.as_str()).into_iter().flatten());
        }
        for g in r.gateways() {
            let max = if g.is_ipv4() { 32 } else { 128 };
            for len in 0..=max {
                let net = Prefix { addr: g, len }.network();
                if let Some(v) = by_network.get(&net) {
                    through.extend(v);
                }
            }
        }
        for i in through {
            routes_through[i].push(r);
        }
    }
    let mut neighs_on: HashMap<&str, Vec<(IpAddr, [u8; 6])>> = HashMap::new();
    for ((interface, ip), mac) in &new_neighs {
        neighs_on
            .entry(interface.as_str())
            .or_default()
            .push((*ip, *mac));
    }
    let mut relink = Vec::new();
    for (i, f) in new.interfaces.iter().enumerate() {
        for addr in &subnets[i] {
            relink.push((
                f.name.clone(),
                Op::AddAddress {
                    interface: f.name.clone(),
                    addr: *addr,
                },
            ));
        }
        for (ip, mac) in neighs_on.get(f.name.as_str()).into_iter().flatten() {
            relink.push((
                f.name.clone(),
                Op::SetNeighbor {
                    interface: f.name.clone(),
                    ip: *ip,
                    mac: *mac,
                },
            ));
        }
        for r in &routes_through[i] {
            relink.push((f.name.clone(), Op::AddRoute((*r).clone())));
        }
    }
    Ok(Plan { ops, relink })
}

/// What a successful [`apply`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Steps that changed the kernel (or a fast-path setting).
    pub changed: Vec<String>,
    /// Steps whose result was already in the kernel.
    pub unchanged: Vec<String>,
}

/// Why [`apply`] failed. Whatever it had changed has been undone (see `undo_errors`).
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The kernel's state could not be read; nothing was changed.
    #[error("cannot read the kernel's state before applying (nothing was changed): {0}")]
    Snapshot(#[source] linux::Error),
    /// An address to add overlaps a subnet already on another interface (configured
    /// outside Ferrouter, or by the running config and not removed): nothing was changed.
    #[error("{0} (nothing was changed)")]
    Conflict(String),
    /// A step failed; the ones before it were undone.
    #[error("{doing}: {cause}; {}", rolled_back(*.undone, .undo_errors))]
    Step {
        /// The failed step, "adding route 10.0.0.0/8 via 198.51.100.1 metric 0".
        doing: String,
        /// Why.
        cause: String,
        /// Index of the failed step among those run (the plan's, then what a link's admin
        /// change made the kernel flush, run again).
        index: usize,
        /// How many earlier changes were undone.
        undone: usize,
        /// Undo steps that failed in turn (empty when the rollback was complete).
        undo_errors: Vec<String>,
    },
}

fn rolled_back(undone: usize, errors: &[String]) -> String {
    if errors.is_empty() {
        format!("nothing was applied: the {undone} change(s) made before it were rolled back")
    } else {
        format!(
            "rolled back {undone} earlier change(s), but {} undo step(s) failed: {}",
            errors.len(),
            errors.join("; ")
        )
    }
}

/// A kernel request, with ifindexes resolved.
#[derive(Clone, Debug)]
enum Action {
    Mtu(u32, u32),
    AddAddr(u32, Prefix),
    DelAddr(u32, Prefix),
    SetNeigh(u32, IpAddr, [u8; 6]),
    DelNeigh(u32, IpAddr),
    AddRoute(StaticRoute),
    ReplaceRoute(StaticRoute),
    DelRoute(StaticRoute),
    Admin(u32, bool),
    /// Nothing in the kernel (a fast-path setting, published after the plan applied).
    FastPath,
}

impl Action {
    fn run(&self, nl: &mut Netlink) -> Result<(), linux::Error> {
        match self {
            Action::Mtu(i, m) => nl.set_mtu(*i, *m),
            Action::AddAddr(i, p) => nl.add_address(*i, p.addr, p.len),
            Action::DelAddr(i, p) => nl.del_address(*i, p.addr, p.len),
            Action::SetNeigh(i, ip, mac) => nl.set_neighbour(*i, *ip, *mac),
            Action::DelNeigh(i, ip) => nl.del_neighbour(*i, *ip),
            Action::AddRoute(r) => nl.add_route(r),
            Action::ReplaceRoute(r) => nl.replace_route(r),
            Action::DelRoute(r) => nl.del_route(r),
            Action::Admin(i, up) => nl.set_link_up(*i, *up),
            Action::FastPath => Ok(()),
        }
    }
}

/// The kernel's error without the request's name (the caller names the object).
fn cause(e: &linux::Error) -> String {
    match e.os_error() {
        Some(os) => os.to_string(),
        None => e.to_string(),
    }
}

/// The last address of `p` (its host bits set).
fn last_address(p: &Prefix) -> IpAddr {
    match p.addr {
        IpAddr::V4(a) => {
            let host = u32::MAX.checked_shr(u32::from(p.len)).unwrap_or(0);
            IpAddr::V4((u32::from(a) | host).into())
        }
        IpAddr::V6(a) => {
            let host = u128::MAX.checked_shr(u32::from(p.len)).unwrap_or(0);
            IpAddr::V6((u128::from(a) | host).into())
        }
    }
}

/// The kernel's state as read before the transaction, with its lookups indexed (a config
/// of thousands of tunnel interfaces has as many links, addresses and routes: each step
/// finds what it needs without a scan).
struct Kernel {
    snap: linux::Snapshot,
    /// Each name's first link in `snap.links`.
    links: HashMap<String, usize>,
    /// Each ifindex's first link's name.
    names: HashMap<u32, usize>,
    /// (ifindex, address, prefix length) of every address.
    addrs: HashSet<(u32, IpAddr, u8)>,
    /// The main table's first route of each (destination, length, metric).
    routes: HashMap<(IpAddr, u8, u32), usize>,
    /// (ifindex, IP) of every neighbour.
    neighs: HashSet<(u32, IpAddr)>,
    /// The first permanent neighbour of each (ifindex, IP).
    permanent: HashMap<(u32, IpAddr), usize>,
}

impl Kernel {
    fn new(snap: linux::Snapshot) -> Kernel {
        let mut links = HashMap::with_capacity(snap.links.len());
        let mut names = HashMap::with_capacity(snap.links.len());
        for (i, l) in snap.links.iter().enumerate() {
            links.entry(l.name.clone()).or_insert(i);
            names.entry(l.ifindex).or_insert(i);
        }
        let addrs = snap
            .addrs
            .iter()
            .map(|a| (a.ifindex, a.addr, a.prefix_len))
            .collect();
        let mut routes = HashMap::new();
        for (i, k) in snap.routes.iter().enumerate() {
            if k.table == RT_TABLE_MAIN {
                routes.entry((k.dst, k.dst_len, k.priority)).or_insert(i);
            }
        }
        let neighs = snap.neighs.iter().map(|n| (n.ifindex, n.ip)).collect();
        let mut permanent = HashMap::new();
        for (i, n) in snap.neighs.iter().enumerate() {
            if n.state & NUD_PERMANENT != 0 {
                permanent.entry((n.ifindex, n.ip)).or_insert(i);
            }
        }
        Kernel {
            snap,
            links,
            names,
            addrs,
            routes,
            neighs,
            permanent,
        }
    }

    /// Every address the plan adds against the kernel's addresses on other interfaces
    /// that the plan leaves in place: overlapping subnets on two interfaces are refused.
    fn check_overlaps(&self, plan: &Plan) -> Result<(), ApplyError> {
        let name = |ifindex: u32| {
            self.names
                .get(&ifindex)
                .map(|&i| self.snap.links[i].name.as_str())
                .unwrap_or("?")
        };
        let removed: HashSet<(&str, IpAddr)> = plan
            .ops
            .iter()
            .filter_map(|o| match o {
                Op::DelAddress { interface, addr } => Some((interface.as_str(), addr.addr)),
                _ => None,
            })
            .collect();
        // The kernel's addresses an added one may not overlap (in the order read), each
        // with its interface's name.
        let theirs: Vec<(Prefix, &str)> = self
            .snap
            .addrs
            .iter()
            .filter(|a| {
                let link_local =
                    matches!(a.addr, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80);
                !link_local && !a.addr.is_loopback()
            })
            .map(|a| {
                let p = Prefix {
                    addr: a.addr,
                    len: a.prefix_len,
                };
                (p, name(a.ifindex))
            })
            .filter(|(p, dev)| !removed.contains(&(*dev, p.addr)))
            .collect();
        // Indexed by network: the kernel's subnets that contain an added address are found
        // by its networks at each shorter length, those inside it by a range of networks.
        let mut by_network: BTreeMap<Prefix, Vec<usize>> = BTreeMap::new();
        for (i, (p, _)) in theirs.iter().enumerate() {
            by_network.entry(p.network()).or_default().push(i);
        }
        for op in &plan.ops {
            let Op::AddAddress { interface, addr } = op else {
                continue;
            };
            let net = addr.network();
            let mut hits: Vec<usize> = Vec::new();
            for len in 0..=addr.len {
                let outer = Prefix {
                    addr: addr.addr,
                    len,
                }
                .network();
                if let Some(v) = by_network.get(&outer) {
                    hits.extend(v);
                }
            }
            let last = last_address(&net);
            let inside = by_network
                .range(
                    net..=Prefix {
                        addr: last,
                        len: u8::MAX,
                    },
                )
                .filter(|(k, _)| k.len > addr.len && net.contains(k.addr))
                .flat_map(|(_, v)| v);
            hits.extend(inside);
            let first = hits
                .into_iter()
                .filter(|&i| theirs[i].1 != interface.as_str())
                .min();
            if let Some(i) = first {
                let (p, dev) = theirs[i];
                return Err(ApplyError::Conflict(format!(
                    "address {addr} on {interface} overlaps {}/{} already on {dev}; a subnet can be on one interface only",
                    p.addr, p.len
                )));
            }
        }
        Ok(())
    }

    fn link(&self, name: &str) -> Result<&linux::Link, String> {
        self.links
            .get(name)
            .map(|&i| &self.snap.links[i])
            .ok_or_else(|| format!("interface {name} not found in this network namespace"))
    }

    fn route(&self, r: &StaticRoute) -> Option<&linux::Route> {
        self.routes
            .get(&(r.dst, r.dst_len, r.metric))
            .map(|&i| &self.snap.routes[i])
    }

    fn static_route(&self, r: &RouteConfig) -> Result<StaticRoute, String> {
        let dst = r
            .dst()
            .ok_or_else(|| format!("invalid prefix {:?}", r.prefix))?;
        let oif = match &r.interface {
            Some(n) => Some(self.link(n)?.ifindex),
            None => None,
        };
        let target = if r.blackhole {
            RouteTarget::Blackhole
        } else {
            RouteTarget::Via(r.gateways().into_iter().map(|g| (g, oif)).collect())
        };
        Ok(StaticRoute {
            dst: dst.addr,
            dst_len: dst.len,
            metric: r.effective_metric(),
            target,
        })
    }

    /// Whether the kernel's route forwards as `want` does.
    fn matches(k: &linux::Route, want: &StaticRoute) -> bool {
        match &want.target {
            RouteTarget::Blackhole => k.kind == RouteKind::Blackhole,
            RouteTarget::Via(hops) => {
                let have: BTreeSet<(IpAddr, Option<u32>)> = k
                    .nexthops
                    .iter()
                    .filter_map(|h| Some((h.gateway?, h.ifindex)))
                    .collect();
                k.kind == RouteKind::Unicast
                    && have.len() == hops.len()
                    && hops.iter().all(|(g, oif)| {
                        have.iter()
                            .any(|(hg, hi)| hg == g && (oif.is_none() || oif == hi))
                    })
            }
        }
    }

    /// The action for `op` and its undo; `None` when the kernel already is as `op` wants.
    fn prepare(&self, op: &Op) -> Result<Option<(Action, Action)>, String> {
        Ok(match op {
            Op::SetMtu { interface, mtu } => {
                let l = self.link(interface)?;
                (l.mtu != *mtu)
                    .then_some((Action::Mtu(l.ifindex, *mtu), Action::Mtu(l.ifindex, l.mtu)))
            }
            Op::AddAddress { interface, addr } => {
                let i = self.link(interface)?.ifindex;
                let present = self.has_addr(i, addr);
                (!present).then_some((Action::AddAddr(i, *addr), Action::DelAddr(i, *addr)))
            }
            Op::DelAddress { interface, addr } => {
                let i = self.link(interface)?.ifindex;
                let present = self.has_addr(i, addr);
                present.then_some((Action::DelAddr(i, *addr), Action::AddAddr(i, *addr)))
            }
            Op::SetNeighbor { interface, ip, mac } => {
                let i = self.link(interface)?.ifindex;
                match self.permanent_neigh(i, *ip) {
                    Some(old) if old == *mac => None,
                    Some(old) => Some((
                        Action::SetNeigh(i, *ip, *mac),
                        Action::SetNeigh(i, *ip, old),
                    )),
                    // A learnt (non-permanent) entry is not restored: the kernel learns it again.
                    None => Some((Action::SetNeigh(i, *ip, *mac), Action::DelNeigh(i, *ip))),
                }
            }
            Op::DelNeighbor { interface, ip, mac } => {
                let i = self.link(interface)?.ifindex;
                let present = self.neighs.contains(&(i, *ip));
                present.then_some((Action::DelNeigh(i, *ip), Action::SetNeigh(i, *ip, *mac)))
            }
            Op::AddRoute(r) => {
                let want = self.static_route(r)?;
                match self.route(&want) {
                    Some(k) if Self::matches(k, &want) => None,
                    Some(_) => {
                        return Err(format!(
                            "the kernel already has a route to {} with metric {} and other next hops, which this config does not own; remove it (ip route del) or give this route another metric",
                            r.prefix,
                            want.metric
                        ))
                    }
                    None => Some((Action::AddRoute(want.clone()), Action::DelRoute(want))),
                }
            }
            Op::ReplaceRoute { old, new } => {
                let want = self.static_route(new)?;
                let was = self.static_route(old)?;
                match self.route(&want) {
                    Some(k) if Self::matches(k, &want) => None,
                    Some(_) => Some((Action::ReplaceRoute(want), Action::ReplaceRoute(was))),
                    None => Some((Action::AddRoute(want.clone()), Action::DelRoute(want))),
                }
            }
            Op::DelRoute(r) => {
                let was = self.static_route(r)?;
                self.route(&was)
                    .is_some()
                    .then_some((Action::DelRoute(was.clone()), Action::AddRoute(was)))
            }
            Op::SetAdmin { interface, up } => {
                let l = self.link(interface)?;
                (l.up != *up).then_some((
                    Action::Admin(l.ifindex, *up),
                    Action::Admin(l.ifindex, l.up),
                ))
            }
            Op::SetUrpf { .. }
            | Op::SetFirewall { .. }
            | Op::SetNat { .. }
            | Op::SetIpsec { .. }
            | Op::SetQos { .. } => Some((Action::FastPath, Action::FastPath)),
        })
    }

    fn has_addr(&self, ifindex: u32, p: &Prefix) -> bool {
        self.addrs.contains(&(ifindex, p.addr, p.len))
    }

    fn permanent_neigh(&self, ifindex: u32, ip: IpAddr) -> Option<[u8; 6]> {
        self.permanent
            .get(&(ifindex, ip))
            .and_then(|&i| self.snap.neighs[i].mac)
    }
}

/// Runs `plan` against the kernel of the calling thread's network namespace, all or
/// nothing: on the first failure, every change made so far is undone in reverse order and
/// the error names the failed step.
///
/// A link whose admin state a step changes loses what the kernel flushes with it (IPv6
/// addresses, neighbours, IPv4 routes through it): once the admin steps have run, the
/// kernel is read again and the config's addresses, neighbours and routes of each such link
/// ([`Plan::relink`]) run too (those still there are unchanged).
pub fn apply(plan: &Plan) -> Result<Report, ApplyError> {
    let dump = || {
        linux::Mirror::open(1 << 20)
            .and_then(|mut m| m.dump())
            .map_err(ApplyError::Snapshot)
    };
    let mut kernel = Kernel::new(dump()?);
    kernel.check_overlaps(plan)?;
    let mut nl = Netlink::open().map_err(ApplyError::Snapshot)?;
    let mut report = Report::default();
    let mut undo: Vec<(String, Action)> = Vec::new();
    let mut ops = plan.ops.clone();
    // Links whose admin state changed, until the kernel is read again.
    let mut bounced: BTreeSet<&str> = BTreeSet::new();
    let relinked: HashSet<&str> = plan.relink.iter().map(|(i, _)| i.as_str()).collect();
    let mut index = 0;
    loop {
        // Past the admin steps (or at the end of the plan) with links bounced: read the
        // kernel again and add what it flushed with them.
        let past_admin = ops.get(index).is_none_or(|o| rank(o) > ADMIN_RANK);
        if !bounced.is_empty() && past_admin {
            let planned: HashSet<&Op> = ops.iter().collect();
            let planned_routes: HashSet<(Option<Prefix>, u32)> = ops
                .iter()
                .filter_map(|o| match o {
                    Op::AddRoute(x) | Op::DelRoute(x) | Op::ReplaceRoute { new: x, .. } => {
                        Some(route_key(x))
                    }
                    _ => None,
                })
                .collect();
            let mut extra: Vec<Op> = Vec::new();
            let mut added: HashSet<&Op> = HashSet::new();
            for (i, o) in &plan.relink {
                let skip = !bounced.contains(i.as_str())
                    || planned.contains(o)
                    || added.contains(o)
                    || matches!(o, Op::AddRoute(r) if planned_routes.contains(&route_key(r)));
                if !skip {
                    added.insert(o);
                    extra.push(o.clone());
                }
            }
            bounced.clear();
            match dump() {
                Ok(snap) => kernel = Kernel::new(snap),
                Err(e) => {
                    let (undone, undo_errors) = roll_back(undo, &mut nl);
                    return Err(ApplyError::Step {
                        doing: "reading the kernel's state after changing links' admin state"
                            .into(),
                        cause: e.to_string(),
                        index,
                        undone,
                        undo_errors,
                    });
                }
            }
            let mut rest = ops.split_off(index);
            rest.extend(extra);
            rest.sort_by_key(rank);
            ops.extend(rest);
            continue;
        }
        let Some(op) = ops.get(index).cloned() else {
            break;
        };
        let result = kernel.prepare(&op).and_then(|step| match step {
            None => {
                report.unchanged.push(op.to_string());
                Ok(())
            }
            Some((action, back)) => {
                action.run(&mut nl).map_err(|e| cause(&e))?;
                report.changed.push(op.to_string());
                undo.push((op.doing(), back));
                if let Op::SetAdmin { interface, .. } = &op {
                    if let Some(name) = relinked.get(interface.as_str()) {
                        bounced.insert(name);
                    }
                }
                Ok(())
            }
        });
        index += 1;
        if let Err(cause) = result {
            let index = index - 1;
            let (undone, undo_errors) = roll_back(undo, &mut nl);
            tracing::warn!(step = %op.doing(), %cause, undone, "config apply failed and was rolled back");
            return Err(ApplyError::Step {
                doing: op.doing(),
                cause,
                index,
                undone,
                undo_errors,
            });
        }
    }
    Ok(report)
}

/// Undo `undo` in reverse order: how many steps, and the undo steps that failed.
fn roll_back(undo: Vec<(String, Action)>, nl: &mut Netlink) -> (usize, Vec<String>) {
    let undone = undo.len();
    let mut errors = Vec::new();
    for (doing, back) in undo.into_iter().rev() {
        if let Err(e) = back.run(nl) {
            errors.push(format!("undoing {doing}: {}", cause(&e)));
        }
    }
    (undone, errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn cfg(body: &str) -> Config {
        Config::parse(
            &format!("[[port]]\nname = \"eth1\"\n{body}"),
            Path::new("t.toml"),
        )
        .unwrap()
    }

    #[test]
    fn a_firewall_change_is_one_fast_path_step_and_an_unchanged_one_none() {
        let fw =
            "[[firewall.filter]]\nname = \"in\"\nhook = \"ingress\"\ninterfaces = [\"eth1\"]\n\
                  [[firewall.filter.rule]]\naction = \"drop\"\nprotocol = \"udp\"\n";
        let (a, b) = (cfg(""), cfg(fw));
        let p = plan(&a, &b).unwrap();
        assert_eq!(p.to_string(), "~ firewall: 1 filter, 1 rule, 0 sets\n");
        assert_eq!(
            p.ops[0].doing(),
            "replacing the firewall rules (1 filter, 1 rule, 0 sets)"
        );
        assert!(plan(&b, &b).unwrap().is_empty());
        assert_eq!(
            plan(&b, &a).unwrap().to_string(),
            "~ firewall: 0 filters, 0 rules, 0 sets\n"
        );
    }

    #[test]
    fn urpf_changes_are_planned_last_as_fast_path_steps() {
        let a = cfg("[[interface]]\nname = \"eth1\"\naddresses = [\"192.0.2.1/24\"]\n");
        let b = cfg(
            "[[interface]]\nname = \"eth1\"\naddresses = [\"192.0.2.1/24\"]\nurpf = \"strict\"\n",
        );
        let p = plan(&a, &b).unwrap();
        assert_eq!(
            p.to_string(),
            "~ interface eth1 up\n~ interface eth1 urpf strict\n"
        );
        assert_eq!(p.ops[1].doing(), "setting uRPF on eth1 to strict");
        assert_eq!(
            plan(&b, &a).unwrap().to_string(),
            "~ interface eth1 up\n~ interface eth1 urpf off\n"
        );
        // The section removed altogether: its address goes, and uRPF with it.
        let none = cfg("");
        assert_eq!(
            plan(&b, &none).unwrap().to_string(),
            "- address 192.0.2.1/24 on eth1\n~ interface eth1 urpf off\n"
        );
        // The same config again: only the admin state, asserted.
        assert_eq!(plan(&b, &b).unwrap().to_string(), "~ interface eth1 up\n");
    }

    fn snapshot(links: &[(u32, &str)], addrs: &[(u32, &str)]) -> linux::Snapshot {
        linux::Snapshot {
            links: links
                .iter()
                .map(|&(ifindex, name)| linux::Link {
                    ifindex,
                    name: name.into(),
                    mac: None,
                    mtu: 1500,
                    up: true,
                    oper_up: true,
                    carrier: true,
                    point_to_point: false,
                })
                .collect(),
            addrs: addrs
                .iter()
                .map(|&(ifindex, a)| {
                    let p: Prefix = a.parse().unwrap();
                    linux::Addr {
                        ifindex,
                        addr: p.addr,
                        prefix_len: p.len,
                    }
                })
                .collect(),
            ..Default::default()
        }
    }

    fn adding(ops: &[(&str, &str)]) -> Plan {
        Plan {
            ops: ops
                .iter()
                .map(|&(interface, a)| Op::AddAddress {
                    interface: interface.into(),
                    addr: a.parse().unwrap(),
                })
                .collect(),
            relink: Vec::new(),
        }
    }

    #[test]
    fn overlapping_subnets_on_two_interfaces_are_refused_whichever_is_longer() {
        let k = Kernel::new(snapshot(
            &[(1, "lo"), (2, "eth0"), (3, "tun0"), (4, "eth1")],
            &[
                (1, "127.0.0.1/8"),
                (2, "192.0.2.1/24"),
                (3, "fe80::1/64"),
                (4, "198.51.100.1/24"),
                (4, "2001:db8::1/64"),
            ],
        ));
        let conflict = |ops: &[(&str, &str)]| match k.check_overlaps(&adding(ops)) {
            Err(ApplyError::Conflict(m)) => m,
            other => panic!("{ops:?}: {other:?}"),
        };
        // Inside eth0's subnet, around it, the same address with another length.
        assert_eq!(
            conflict(&[("tun0", "10.0.0.1/30"), ("tun0", "192.0.2.5/30")]),
            "address 192.0.2.5/30 on tun0 overlaps 192.0.2.1/24 already on eth0; a subnet can be on one interface only"
        );
        assert!(conflict(&[("tun0", "192.0.0.1/16")]).contains("192.0.2.1/24 already on eth0"));
        assert!(conflict(&[("tun0", "192.0.2.1/32")]).contains("on eth0"));
        assert!(conflict(&[("tun0", "0.0.0.0/0")]).contains("192.0.2.1/24 already on eth0"));
        assert!(conflict(&[("tun0", "2001:db8::2/48")]).contains("2001:db8::1/64 already on eth1"));
        // The first conflict in the kernel's order is the one named.
        assert!(conflict(&[("tun0", "192.0.0.0/1")]).contains("192.0.2.1/24 already on eth0"));
        // On the same interface, beside another, link-local, loopback: no conflict.
        let ok = [
            ("eth0", "192.0.2.9/24"),
            ("tun0", "10.0.0.1/30"),
            ("tun0", "192.0.3.1/24"),
            ("tun0", "fe80::1/64"),
            ("tun0", "127.0.0.2/8"),
            ("tun0", "2001:db9::1/64"),
        ];
        assert!(k.check_overlaps(&adding(&ok)).is_ok());
        // A subnet the plan removes from its interface may move to another.
        let mut p = adding(&[("tun0", "192.0.2.5/30")]);
        p.ops.insert(
            0,
            Op::DelAddress {
                interface: "eth0".into(),
                addr: "192.0.2.1/24".parse().unwrap(),
            },
        );
        assert!(k.check_overlaps(&p).is_ok());
    }

    #[test]
    fn relink_lists_each_link_s_routes_by_gateway_subnet_and_by_name() {
        let mut body = String::new();
        for i in 0..300 {
            body.push_str(&format!(
                "[[interface]]\nname = \"t{i}\"\naddresses = [\"10.128.{}.{}/30\"]\n\
                 [[route]]\nprefix = \"198.19.{}.{}/32\"\nvia = [\"10.128.{}.{}\"]\n",
                i / 64,
                (i % 64) * 4 + 1,
                i / 256,
                i % 256,
                i / 64,
                (i % 64) * 4 + 2
            ));
        }
        body.push_str(
            "[[route]]\nprefix = \"203.0.113.0/24\"\ninterface = \"t7\"\nvia = [\"10.128.0.30\"]\n",
        );
        body.push_str("[[route]]\nprefix = \"203.0.114.0/24\"\nblackhole = true\n");
        let c = cfg(&body);
        let empty = Config {
            interfaces: Vec::new(),
            routes: Vec::new(),
            neighbors: Vec::new(),
            ..c.clone()
        };
        let p = plan(&empty, &c).unwrap();
        let routes_of = |name: &str| -> Vec<String> {
            p.relink
                .iter()
                .filter(|(i, _)| i == name)
                .filter_map(|(_, o)| match o {
                    Op::AddRoute(r) => Some(r.prefix.clone()),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(routes_of("t0"), ["198.19.0.0/32"]);
        assert_eq!(routes_of("t299"), ["198.19.1.43/32"]);
        // Through t7 by name, and its gateway is in t7's subnet too: listed once.
        assert_eq!(routes_of("t7"), ["198.19.0.7/32", "203.0.113.0/24"]);
        assert_eq!(p.relink.len(), 300 * 2 + 1);
        // Each link's entries together, in the config's order: address, then routes.
        assert!(matches!(&p.relink[0], (i, Op::AddAddress { .. }) if i == "t0"));
        assert!(matches!(&p.relink[1], (i, Op::AddRoute(_)) if i == "t0"));
    }

    #[test]
    fn plan_orders_removals_then_additions() {
        let a = cfg("[[interface]]\nname = \"eth1\"\naddresses = [\"192.0.2.1/24\"]\n[[route]]\nprefix = \"10.0.0.0/8\"\nvia = [\"192.0.2.2\"]\n[[route]]\nprefix = \"10.1.0.0/16\"\nblackhole = true\n");
        let b = cfg("[[interface]]\nname = \"eth1\"\nmtu = 1700\naddresses = [\"192.0.2.1/24\", \"2001:db8::1/64\"]\n[[route]]\nprefix = \"10.0.0.0/8\"\nvia = [\"192.0.2.2\", \"192.0.2.3\"]\n[[neighbor]]\ninterface = \"eth1\"\nip = \"192.0.2.2\"\nmac = \"02:00:00:00:00:02\"\n");
        let p = plan(&a, &b).unwrap();
        assert_eq!(
            p.to_string(),
            "- route 10.1.0.0/16 blackhole metric 0\n\
             ~ interface eth1 mtu 1700\n\
             ~ interface eth1 up\n\
             + address 2001:db8::1/64 on eth1\n\
             + neighbor 192.0.2.2 lladdr 02:00:00:00:00:02 on eth1\n\
             ~ route 10.0.0.0/8 via 192.0.2.2, 192.0.2.3 metric 0 (was 10.0.0.0/8 via 192.0.2.2 metric 0)\n"
        );
        let back = plan(&b, &a).unwrap();
        assert_eq!(
            back.to_string(),
            "- neighbor 192.0.2.2 lladdr 02:00:00:00:00:02 on eth1\n\
             - address 2001:db8::1/64 on eth1\n\
             ~ interface eth1 mtu 1500\n\
             ~ interface eth1 up\n\
             ~ route 10.0.0.0/8 via 192.0.2.2 metric 0 (was 10.0.0.0/8 via 192.0.2.2, 192.0.2.3 metric 0)\n\
             + route 10.1.0.0/16 blackhole metric 0\n"
        );
        assert_eq!(plan(&a, &a).unwrap().to_string(), "~ interface eth1 up\n");
        // Gateway order does not matter.
        let c = cfg("[[route]]\nprefix = \"10.0.0.0/8\"\nvia = [\"192.0.2.3\", \"192.0.2.2\"]\n");
        let d = cfg("[[route]]\nprefix = \"10.0.0.0/8\"\nvia = [\"192.0.2.2\", \"192.0.2.3\"]\n");
        assert!(plan(&c, &d).unwrap().is_empty());
    }

    #[test]
    fn admin_state_is_asserted_before_what_depends_on_it() {
        let up = cfg("[[interface]]\nname = \"eth1\"\naddresses = [\"192.0.2.1/24\"]\n[[interface]]\nname = \"lo9\"\n[[route]]\nprefix = \"10.0.0.0/8\"\nvia = [\"192.0.2.2\"]\n[[neighbor]]\ninterface = \"eth1\"\nip = \"192.0.2.2\"\nmac = \"02:00:00:00:00:02\"\n");
        let empty = cfg("");
        // From nothing (a start): every section's state, after MTUs, before addresses.
        assert_eq!(
            plan(&empty, &up).unwrap().to_string(),
            "~ interface eth1 up\n~ interface lo9 up\n+ address 192.0.2.1/24 on eth1\n\
             + neighbor 192.0.2.2 lladdr 02:00:00:00:00:02 on eth1\n+ route 10.0.0.0/8 via 192.0.2.2 metric 0\n"
        );
        let p = plan(&up, &up).unwrap();
        assert_eq!(p.ops[0].doing(), "bringing eth1 up");
        // What a bounce of eth1 makes the kernel flush, to be put back: its address, its
        // neighbour and the route through its subnet; lo9 carries nothing.
        let relink: Vec<String> = p.relink.iter().map(|(i, o)| format!("{i}: {o}")).collect();
        assert_eq!(
            relink,
            [
                "eth1: + address 192.0.2.1/24 on eth1",
                "eth1: + neighbor 192.0.2.2 lladdr 02:00:00:00:00:02 on eth1",
                "eth1: + route 10.0.0.0/8 via 192.0.2.2 metric 0",
            ]
        );
        // Held down; the section gone, the link comes back up.
        let down = cfg("[[interface]]\nname = \"lo9\"\nenabled = false\n");
        let p = plan(&up, &down).unwrap();
        assert!(p.to_string().contains("~ interface lo9 down\n"), "{p}");
        assert_eq!(
            p.ops
                .iter()
                .find(|o| matches!(o, Op::SetAdmin { up: false, .. }))
                .unwrap()
                .doing(),
            "setting lo9 administratively down (enabled = false)"
        );
        assert_eq!(
            plan(&down, &empty).unwrap().to_string(),
            "~ interface lo9 up\n"
        );
        // Ranks keep the plan's order.
        let ranks: Vec<u8> = plan(&empty, &up).unwrap().ops.iter().map(rank).collect();
        assert!(ranks.windows(2).all(|w| w[0] <= w[1]), "{ranks:?}");
    }

    #[test]
    fn restart_only_settings_are_refused() {
        let a = cfg("");
        let b = Config::parse(
            "workers = 2\nstate_dir = \"/tmp/x\"\n[[port]]\nname = \"eth2\"\n",
            Path::new("t"),
        )
        .unwrap();
        let e = plan(&a, &b).unwrap_err().to_string();
        assert_eq!(e, "[[port]], workers, state_dir changed; this cannot be applied live: restart the daemon with the new file (ferrouter run --config FILE)");
    }

    #[test]
    fn a_bgp_change_needs_a_restart() {
        const BGP: &str = "[bgp]\nasn = 65001\nrouter_id = \"192.0.2.1\"\n[[bgp.neighbor]]\naddress = \"192.0.2.2\"\nremote_as = 65002\n";
        let none = cfg("");
        let one = cfg(BGP);
        // Unchanged: nothing to do, even beside other changes.
        assert!(plan(&one, &cfg(BGP)).unwrap().is_empty());
        let more = cfg(&format!(
            "[[route]]\nprefix = \"10.0.0.0/8\"\nblackhole = true\n{BGP}"
        ));
        assert_eq!(
            plan(&one, &more).unwrap().to_string(),
            "+ route 10.0.0.0/8 blackhole metric 0\n"
        );
        let refused = "[bgp] changed; this cannot be applied live: restart the daemon with the new file (ferrouter run --config FILE)";
        // Added, removed, changed.
        assert_eq!(plan(&none, &one).unwrap_err().to_string(), refused);
        assert_eq!(plan(&one, &none).unwrap_err().to_string(), refused);
        let other = cfg(&BGP.replace("65002", "65003"));
        assert_eq!(plan(&one, &other).unwrap_err().to_string(), refused);
        let hold = cfg(&BGP.replace("asn = 65001\n", "asn = 65001\nhold_time = 30\n"));
        assert_eq!(plan(&one, &hold).unwrap_err().to_string(), refused);
        // Writing a default out is no change.
        let explicit = cfg(&BGP.replace("asn = 65001\n", "asn = 65001\nhold_time = 90\n"));
        assert!(plan(&one, &explicit).unwrap().is_empty());
        // With other restart-only settings, all are named.
        let b = Config::parse(
            &format!("workers = 2\n[[port]]\nname = \"eth1\"\n{BGP}"),
            Path::new("t"),
        )
        .unwrap();
        assert_eq!(
            plan(&none, &b).unwrap_err(),
            PlanError::RestartNeeded(vec!["workers", "[bgp]"])
        );
    }

    /// `[distance]`: parsed with defaults, checked for unknown keys and ranges, and a
    /// change needs a restart.
    #[test]
    fn distances_parse_and_need_a_restart() {
        let none = cfg("");
        assert_eq!(none.distance, crate::sync::Distances::default());
        let d = cfg("[distance]\nbgp = 5\n");
        assert_eq!((d.distance.kernel, d.distance.bgp), (1, 5));
        let s = cfg("[distance]\nstatic = 7\n");
        assert_eq!(s.distance.static_routes, 7);
        assert!(plan(
            &none,
            &cfg("[distance]\nkernel = 1\nstatic = 1\nbgp = 20\n")
        )
        .unwrap()
        .is_empty());
        assert_eq!(
            plan(&none, &d).unwrap_err(),
            PlanError::RestartNeeded(vec!["[distance]"])
        );
        for bad in ["[distance]\nospf = 3\n", "[distance]\nbgp = 300\n"] {
            let e = Config::parse(bad, Path::new("t")).unwrap_err().to_string();
            assert!(e.contains("t:2"), "{bad}: {e}");
        }
    }
}
