//! The fast path's features as the daemon runs them: every feature crate's features in one
//! [`Registry`], and which interfaces have which, taken from the running config and
//! published to the workers (RCU: they pick the new state up between vectors).
//!
//! Today: uRPF (`[[interface]] urpf = "strict" | "loose"`, the `urpf` crate), the
//! firewall's filters (`[firewall]`, the `firewall` crate: its rule set is compiled and
//! published before the interfaces' features change, so a filter is never enabled
//! without its rules) and NAT44 (`[nat]`, the same crate: rules and tables published
//! first too). With several workers and flow state, the handoff features (`firewall::steer`)
//! run first on every interface. IPsec (`[ipsec]`, the `ipsec` crate): `esp-decrypt` on
//! every port and the encrypt nodes on every tunnel interface, once a tunnel is configured;
//! with `[[ipsec.policy]]`, the policy nodes (`ipsec::policy_node`) on the interfaces with
//! an SPD (inbound: every port); its SAs and SPDs are installed before the nodes are
//! enabled.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use dataplane::feature::{FeatureState, Registry, RegistryError};
use dataplane::worker::WorkerShared;
use serde::Serialize;

use crate::config::{Config, UrpfMode};

/// Every feature the daemon knows; the filters follow `fw`'s rules.
pub fn registry(
    fw: &Arc<firewall::node::Shared>,
    nat: &Arc<firewall::nat::NatShared>,
    steer: &Arc<firewall::steer::Steering>,
    ipsec: &Arc<ipsec::node::IpsecShared>,
    qos: &Arc<qos::node::QosShared>,
) -> Result<Registry, RegistryError> {
    let mut all = urpf::Urpf::all();
    all.extend(firewall::steer::Steering::features(steer));
    all.extend(firewall::node::FilterFeature::all(fw));
    all.extend(firewall::nat::NatFeature::all(nat));
    all.extend(ipsec.features());
    all.extend(qos.features());
    Registry::new(all)
}

/// The features the config gives interface `name`, by feature name.
pub fn wanted(cfg: &Config, name: &str) -> Vec<&'static str> {
    let mut v = Vec::new();
    let urpf = cfg
        .interfaces
        .iter()
        .find(|f| f.name == name)
        .and_then(|f| f.urpf);
    if let Some(m) = urpf {
        let mode = match m {
            UrpfMode::Strict => urpf::Mode::Strict,
            UrpfMode::Loose => urpf::Mode::Loose,
        };
        v.push(urpf::Urpf::name(false, mode));
        v.push(urpf::Urpf::name(true, mode));
    }
    for f in &cfg.firewall.filters {
        if f.interfaces.iter().any(|n| n == name) {
            v.push(firewall::node::FilterFeature::name(false, f.hook));
            v.push(firewall::node::FilterFeature::name(true, f.hook));
        }
    }
    // With connection tracking, every interface's ingress node tracks what it receives
    // (filtered or not), so that replies find their flows.
    if cfg.firewall.conntrack {
        for v6 in [false, true] {
            let n = firewall::node::FilterFeature::name(v6, firewall::config::Hook::Ingress);
            if !v.contains(&n) {
                v.push(n);
            }
        }
    }
    // NAT runs everywhere once it has a rule: replies come back on any interface, and a
    // rule's interface is matched per packet.
    if cfg.nat.has_rules() {
        v.extend(firewall::nat::NatFeature::NAMES);
    }
    // With several workers, each keeps the state of the flows it owns: every packet first
    // goes to its flow's owner.
    if cfg.workers > 1 && (cfg.firewall.conntrack || cfg.nat.has_rules()) {
        v.splice(0..0, firewall::steer::NAMES);
    }
    // QoS classifies, marks and polices what interfaces with an input policy receive.
    if cfg
        .qos
        .interfaces
        .iter()
        .any(|f| f.name == name && f.input.is_some())
    {
        v.extend(qos::node::NAMES);
    }
    // A VLAN sub-interface with an output policy writes its classes' 802.1p priority.
    if cfg.vlans.iter().any(|v| v.name == name)
        && cfg
            .qos
            .interfaces
            .iter()
            .any(|f| f.name == name && f.output.is_some())
    {
        v.extend(qos::node::PCP_NAMES);
    }
    // ESP to the router arrives on ports; what is routed to a tunnel leaves encrypted.
    if cfg.ipsec.active() {
        let port = cfg.ports.iter().any(|p| p.name == name);
        if port {
            v.push(ipsec::node::DECRYPT);
        }
        if cfg.ipsec.tunnels.iter().any(|t| t.name == name) {
            v.push(ipsec::node::ENCRYPT4);
            v.push(ipsec::node::ENCRYPT6);
        }
        // Policy-based IPsec: the outbound SPD where an interface has one; the inbound
        // check on every port (a policy SA's packet is received on the port its ESP came
        // in on, SPD or not) and on the VLAN sub-interfaces with an inbound SPD.
        let has = |dir: ipsec::config::SaDirection| {
            cfg.ipsec
                .policies
                .iter()
                .any(|p| p.interface == name && p.direction == dir)
                || cfg.ipsec.ike_interfaces().any(|i| i == name)
                || cfg
                    .ipsec
                    .spds
                    .iter()
                    .any(|d| d.interface == name && d.direction == dir)
        };
        if has(ipsec::config::SaDirection::Out) {
            v.push(ipsec::policy_node::OUT4);
            v.push(ipsec::policy_node::OUT6);
        }
        // (`esp-decrypt` leaves a policy SA's SPI in the packet for it, so it runs on
        // every port where such an SA may decrypt, policies or not.)
        let policy_sas = !cfg.ipsec.policies.is_empty()
            || cfg.ipsec.sas.iter().any(|s| s.tunnel.is_empty())
            || cfg.ipsec.ike_interfaces().next().is_some();
        if policy_sas && port || has(ipsec::config::SaDirection::In) {
            v.push(ipsec::policy_node::IN4);
            v.push(ipsec::policy_node::IN6);
        }
    }
    v
}

/// What the feature crates share with their nodes, as [`Features::new`] takes it.
pub type Shares = (
    Arc<firewall::node::Shared>,
    Arc<firewall::nat::NatShared>,
    Arc<firewall::steer::Steering>,
    Arc<ipsec::node::IpsecShared>,
    Arc<qos::node::QosShared>,
);

/// The config's SA keys as read from its key file, or what was wrong with it.
type IpsecKeys = Result<Option<ipsec::config::Keys>, (String, String)>;

/// How the API's SAs are found: direction and SPI, and, for an outbound SA chosen by
/// destination (one of a tunnel's several peers, [`ipsec::config::SaEntry::selectors`]),
/// its peer's address and UDP port (0 without NAT-T): peers pick our outbound SPIs, so
/// two may pick one.
pub type ApiSaKey = (
    ipsec::config::SaDirection,
    u32,
    Option<(std::net::IpAddr, u16)>,
);

/// [`ApiSaKey`] of `x`, as kept.
fn stored_key(x: &ipsec::config::StoredSa) -> ApiSaKey {
    (x.direction(), x.spi(), x.chosen())
}

/// [`ApiSaKey`] of `x`, as given.
fn api_key(x: &ipsec::config::ExtraSa) -> ApiSaKey {
    let e = &x.entry;
    let chosen =
        (e.direction == ipsec::config::SaDirection::Out && !e.selectors.is_empty()).then(|| {
            (
                e.remote
                    .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)),
                e.remote_port.unwrap_or(0),
            )
        });
    (e.direction, e.spi, chosen)
}

/// The SAs given through the API or by IKE, in the order given (a whole plan lists them
/// so), found by [`ApiSaKey`], and the tunnels' transmit SAs by tunnel. Kept compact
/// ([`ipsec::config::StoredSa`]): a gateway holds two per IKE tunnel.
#[derive(Default)]
struct ApiSas {
    list: Vec<ipsec::config::StoredSa>,
    /// Indices into `list`, found by their [`ApiSaKey`]'s hash: 4 bytes a slot, where a
    /// map from key to index took 40 (issue 27: two SAs a tunnel, a million tunnels).
    /// SipHash with a random key: peers pick our outbound SPIs.
    at: hashbrown::HashTable<u32>,
    hasher: std::collections::hash_map::RandomState,
    /// A tunnel's transmit SA, by its SPI.
    out_of: HashMap<String, u32>,
    /// Tunnel names, shared by their SAs.
    names: std::collections::HashSet<Arc<str>>,
    /// IKE's policy-based child SAs (their two SAs are in `list`), in the order installed:
    /// their policies join the config's in the SPD.
    ike_children: Vec<ipsec::spd::IkeChild>,
}

impl ApiSas {
    /// `list` kept (each was planned: an error is an SA no plan accepts).
    fn new(list: &[ipsec::config::ExtraSa]) -> Result<ApiSas, String> {
        let mut a = ApiSas::default();
        for x in list {
            let s = a.keep(x)?;
            a.put(s);
        }
        Ok(a)
    }

    /// `x` as kept here.
    fn keep(&mut self, x: &ipsec::config::ExtraSa) -> Result<ipsec::config::StoredSa, String> {
        ipsec::config::StoredSa::new(x, &mut self.names)
    }

    /// Every SA as given, for a whole plan.
    fn extras(&self) -> Vec<ipsec::config::ExtraSa> {
        self.list
            .iter()
            .map(ipsec::config::StoredSa::extra)
            .collect()
    }

    fn hash(&self, key: &ApiSaKey) -> u64 {
        std::hash::BuildHasher::hash_one(&self.hasher, key)
    }

    /// Where `key`'s SA is in `list`.
    fn index(&self, key: &ApiSaKey) -> Option<usize> {
        let list = &self.list;
        self.at
            .find(self.hash(key), |&i| {
                list.get(i as usize).is_some_and(|x| stored_key(x) == *key)
            })
            .map(|&i| i as usize)
    }

    fn get(&self, key: &ApiSaKey) -> Option<&ipsec::config::StoredSa> {
        self.list.get(self.index(key)?)
    }

    /// Add `x` (none of its key is here; at most `u32::MAX` SAs, which `max_sas` keeps
    /// far below).
    fn put(&mut self, x: ipsec::config::StoredSa) {
        let key = stored_key(&x);
        if key.2.is_none()
            && x.direction() == ipsec::config::SaDirection::Out
            && !x.tunnel().is_empty()
        {
            self.out_of.insert(x.tunnel().to_string(), x.spi());
        }
        let at = self.list.len() as u32;
        self.list.push(x);
        let h = self.hash(&key);
        let (list, hasher) = (&self.list, &self.hasher);
        self.at.insert_unique(h, at, |&i| {
            list.get(i as usize).map_or(0, |x| {
                std::hash::BuildHasher::hash_one(hasher, stored_key(x))
            })
        });
    }

    /// Take out the SA of `key` (the last one takes its place in the list).
    fn take(&mut self, key: &ApiSaKey) -> Option<ipsec::config::StoredSa> {
        let h = self.hash(key);
        let list = &self.list;
        let k = match self.at.find_entry(h, |&i| {
            list.get(i as usize).is_some_and(|x| stored_key(x) == *key)
        }) {
            Ok(e) => e.remove().0 as usize,
            Err(_) => return None,
        };
        let x = self.list.swap_remove(k);
        if let Some(moved) = self.list.get(k) {
            // The last one moved to `k`: its slot in `at` says so now.
            let last = self.list.len() as u32;
            let h = self.hash(&stored_key(moved));
            if let Some(i) = self.at.find_mut(h, |&i| i == last) {
                *i = k as u32;
            }
        }
        let (dir, spi, chosen) = *key;
        if chosen.is_none()
            && self.out_of.get(x.tunnel()) == Some(&spi)
            && dir == ipsec::config::SaDirection::Out
        {
            self.out_of.remove(x.tunnel());
        }
        Some(x)
    }
}

/// The running config's tunnels, as an SA given alone is checked against them.
#[derive(Default)]
struct TunnelIndex {
    /// By name: its index in `[[ipsec.tunnel]]` and its interface in the fast path.
    by_name: HashMap<String, (usize, u16)>,
    /// The tunnels whose transmit SA the config gives: name → its `[[ipsec.sa]]` index.
    config_out: HashMap<String, usize>,
}

/// The daemon's features: the registry, and the state the workers follow.
pub struct Features {
    /// Every feature, with its counter slots.
    pub registry: Arc<Registry>,
    state: Arc<ArcSwap<FeatureState>>,
    /// Bumped on every publish (shared with the interface table: workers reload both).
    version: Arc<AtomicU64>,
    /// The fast path's interfaces by index: ports, then VLAN sub-interfaces.
    names: Vec<String>,
    /// The firewall's rules and logs, shared with its nodes.
    pub firewall: Arc<firewall::node::Shared>,
    /// NAT's rules and tables, shared with its nodes.
    pub nat: Arc<firewall::nat::NatShared>,
    /// Flow steering between workers, shared with its nodes.
    pub steering: Arc<firewall::steer::Steering>,
    /// IPsec's SA tables, shared with its nodes.
    pub ipsec: Arc<ipsec::node::IpsecShared>,
    /// QoS: the input policies and the workers' schedulers.
    pub qos: Arc<qos::node::QosShared>,
    /// The IPsec config the installed SAs came from.
    ipsec_config: std::sync::Mutex<ipsec::config::IpsecConfig>,
    /// The config's SA keys as the last config apply read them from the key file: an SA
    /// the API adds or removes is planned with these (the file is not read again).
    ipsec_keys: std::sync::Mutex<IpsecKeys>,
    /// SAs given through the API (`POST /v1/ipsec/sa`), installed beside the config's; in
    /// memory only (a restart forgets them).
    ipsec_api: std::sync::Mutex<ApiSas>,
    /// The running config's tunnels by name.
    ipsec_tunnels: std::sync::Mutex<TunnelIndex>,
    /// The NAT config the published rules were compiled from.
    nat_config: std::sync::Mutex<firewall::nat::config::NatConfig>,
    /// Workers (for the rule counters).
    workers: usize,
    /// The firewall config the published rules were compiled from (an unchanged one is
    /// not recompiled, so its counters keep counting).
    firewall_config: std::sync::Mutex<firewall::config::FirewallConfig>,
}

/// One feature's counters, summed over the workers.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FeatureCounts {
    /// Feature name.
    pub feature: &'static str,
    /// Its arc.
    pub arc: &'static str,
    /// Packets it saw.
    pub packets: u64,
    /// Its drops, by reason: (reason, description, count).
    pub drops: Vec<(&'static str, &'static str, u64)>,
}

impl Features {
    /// Features over `registry` for the interfaces `names` (by index), none enabled;
    /// `version` is bumped on each publish.
    pub fn new(
        registry: Arc<Registry>,
        (firewall, nat, steering, ipsec, qos): Shares,
        names: Vec<String>,
        workers: usize,
        version: Arc<AtomicU64>,
    ) -> Features {
        Features {
            registry,
            state: Arc::new(ArcSwap::from_pointee(FeatureState::default())),
            version,
            names,
            firewall,
            nat,
            steering,
            ipsec,
            qos,
            ipsec_config: std::sync::Mutex::new(ipsec::config::IpsecConfig::default()),
            ipsec_keys: std::sync::Mutex::new(Ok(None)),
            ipsec_api: std::sync::Mutex::new(ApiSas::default()),
            ipsec_tunnels: std::sync::Mutex::new(TunnelIndex::default()),
            nat_config: std::sync::Mutex::new(firewall::nat::config::NatConfig::default()),
            workers,
            firewall_config: std::sync::Mutex::new(firewall::config::FirewallConfig::default()),
        }
    }

    /// The fast path's interfaces by index.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// What the workers load their state from.
    pub fn state(&self) -> Arc<ArcSwap<FeatureState>> {
        self.state.clone()
    }

    /// Enable what `cfg` says on each interface, and nothing else; the workers follow
    /// before their next vector.
    pub fn publish(&self, cfg: &Config) -> Result<(), String> {
        let s = self
            .registry
            .state(self.names.len(), |i| wanted(cfg, &self.names[i]))?;
        // The rules first: a filter newly enabled on an interface finds them there.
        if cfg.firewall
            != *self
                .firewall_config
                .lock()
                .map_err(|_| "firewall state unavailable")?
        {
            let rs = firewall::ruleset::RuleSet::compile(&cfg.firewall, &self.names, self.workers)
                .map_err(|e| e.to_string())?;
            self.firewall.rules.store(Arc::new(rs));
            *self
                .firewall_config
                .lock()
                .map_err(|_| "firewall state unavailable")? = cfg.firewall.clone();
        }
        self.publish_nat(&cfg.nat)?;
        self.publish_ipsec(&cfg.ipsec)?;
        // Policies and schedulers before the input nodes are enabled; ports whose output
        // policy did not change keep their queues.
        self.qos.apply(&cfg.qos, &self.names, cfg.ports.len(), 0)?;
        self.state.store(Arc::new(s));
        self.version.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// NAT's rules (and, the first time it has any, its tables), before its nodes are
    /// enabled. An unchanged config is not recompiled, so the rules' counters go on.
    fn publish_nat(&self, cfg: &firewall::nat::config::NatConfig) -> Result<(), String> {
        let mut cur = self
            .nat_config
            .lock()
            .map_err(|_| "NAT state unavailable")?;
        if *cfg == *cur {
            return Ok(());
        }
        if cfg.has_rules()
            && !self
                .nat
                .ensure_tables(self.workers, cfg.max_sessions, &cfg.timeouts)
        {
            tracing::warn!(
                "[nat] max_sessions changed to {}: the tables keep their size until a restart",
                cfg.max_sessions
            );
        }
        let rules = firewall::nat::NatRules::compile(cfg, &self.names)?;
        self.nat.publish(cfg, rules);
        *cur = cfg.clone();
        Ok(())
    }

    /// IPsec's SAs, as the config and its key file say (the key file is read once per
    /// publish, that is per config apply, so a key changed there is a changed SA).
    /// Unchanged SAs keep their state.
    fn publish_ipsec(&self, cfg: &ipsec::config::IpsecConfig) -> Result<(), String> {
        let api = self
            .ipsec_api
            .lock()
            .map_err(|_| "IPsec state unavailable")?;
        let keys = cfg.keys();
        let ike = ipsec::spd::ike_policies(&api.ike_children)?;
        self.publish_ipsec_with(cfg, &api.extras(), &ike, &keys)?;
        *self
            .ipsec_keys
            .lock()
            .map_err(|_| "IPsec state unavailable")? = keys;
        Ok(())
    }

    /// [`Features::publish_ipsec`] with `api` as the API's SAs, `ike` as IKE's policies and
    /// the config's `keys`.
    fn publish_ipsec_with(
        &self,
        cfg: &ipsec::config::IpsecConfig,
        api: &[ipsec::config::ExtraSa],
        ike: &[ipsec::spd::IkePolicy],
        keys: &IpsecKeys,
    ) -> Result<(), String> {
        let mut cur = self
            .ipsec_config
            .lock()
            .map_err(|_| "IPsec state unavailable")?;
        if cfg.is_default() && cur.is_default() && api.is_empty() && self.ipsec.installed() == 0 {
            return Ok(());
        }
        let reserved: Vec<&str> = Vec::new();
        let planned = cfg.plan_keyed(&reserved, api, keys).map_err(|p| {
            p.into_iter()
                .map(|(path, m)| format!("{path}: {m}"))
                .collect::<Vec<_>>()
                .join("; ")
        })?;
        // The SPDs, compiled before anything changes (all or nothing); installed once
        // their SAs are.
        // IKE's policies on interfaces the fast path has (a peer's interface gone from the
        // config takes its SAs with it, once the IKE daemon hears of it).
        let ike: Vec<ipsec::spd::IkePolicy> = ike
            .iter()
            .filter(|p| self.names.contains(&p.entry.interface))
            .cloned()
            .collect();
        let spd =
            ipsec::spd::Spd::compile(cfg, &ike, &self.names, self.workers, &self.ipsec.spd())?;
        let names: Vec<String> = cfg.tunnels.iter().map(|t| t.name.clone()).collect();
        let mut iface = Vec::with_capacity(names.len());
        for n in &names {
            match self.names.iter().position(|x| x == n) {
                Some(i) => iface.push(i as u16),
                None => {
                    return Err(format!(
                        "tunnel {n} has no interface: adding a tunnel takes a restart"
                    ))
                }
            }
        }
        let summary = self.ipsec.publish(
            &planned,
            &ipsec::node::Tunnels {
                iface: &iface,
                names: &names,
            },
        )?;
        let policies = cfg.policies.len();
        self.ipsec.publish_spd(spd);
        tracing::info!(
            "[ipsec] {summary}, {policies} policies, {} of IKE",
            ike.len()
        );
        if *cur != *cfg {
            *self
                .ipsec_tunnels
                .lock()
                .map_err(|_| "IPsec state unavailable")? = TunnelIndex {
                by_name: names
                    .into_iter()
                    .zip(iface)
                    .enumerate()
                    .map(|(k, (n, i))| (n, (k, i)))
                    .collect(),
                config_out: cfg
                    .sas
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| {
                        s.direction == ipsec::config::SaDirection::Out && !s.tunnel.is_empty()
                    })
                    .map(|(k, s)| (s.tunnel.clone(), k))
                    .collect(),
            };
            *cur = cfg.clone();
        }
        Ok(())
    }

    /// Install `sa` beside the config's SAs (`POST /v1/ipsec/sa`, a child SA of IKE): it
    /// replaces an API SA of the same direction and SPI, and an outbound one the API gave
    /// its tunnel before (a rekey: the new SA is in place before the tunnel switches to
    /// it). All or nothing: on an error (named by the SA's `sa out 0x1001.field`), nothing
    /// changes. A tunnel's SA goes in alone, in time independent of how many SAs there
    /// are; a policy SA (or one replacing a policy SA) re-plans the whole SPD.
    pub fn add_ipsec_sa(&self, sa: ipsec::config::ExtraSa) -> Result<(), String> {
        use ipsec::config::SaDirection;
        let mut api = self
            .ipsec_api
            .lock()
            .map_err(|_| "IPsec state unavailable")?;
        let key = api_key(&sa);
        let (dir, spi, chosen) = key;
        // Kept compact once installed: made now, so that what cannot be kept is refused
        // before anything changes.
        let stored = api.keep(&sa)?;
        let mut replaced: Vec<ApiSaKey> = Vec::new();
        if api.get(&key).is_some() {
            replaced.push(key);
        }
        if dir == SaDirection::Out && chosen.is_none() {
            if let Some(&s) = api.out_of.get(&sa.entry.tunnel) {
                if s != spi {
                    replaced.push((SaDirection::Out, s, None));
                }
            }
        }
        let policy = sa.entry.tunnel.is_empty()
            || replaced
                .iter()
                .any(|k| api.get(k).is_some_and(|x| x.tunnel().is_empty()));
        if policy {
            return self.republish_api_sas(&mut api, &replaced, vec![sa], None);
        }
        let cfg = self
            .ipsec_config
            .lock()
            .map_err(|_| "IPsec state unavailable")?;
        let tunnels = self
            .ipsec_tunnels
            .lock()
            .map_err(|_| "IPsec state unavailable")?;
        let found = tunnels.by_name.get(&sa.entry.tunnel).copied();
        let problems = |p: Vec<(String, String)>| {
            p.into_iter()
                .map(|(path, m)| format!("{path}: {m}"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let planned = cfg
            .plan_extra(&sa, found.map(|(k, _)| k))
            .map_err(problems)?;
        let Some((_, iface)) = found else {
            return Err(format!(
                "{}.tunnel: no [[ipsec.tunnel]] named {:?}",
                sa.label(),
                sa.entry.tunnel
            ));
        };
        if dir == SaDirection::Out && chosen.is_none() {
            if let Some(k) = tunnels.config_out.get(&sa.entry.tunnel) {
                return Err(format!("{}.direction: tunnel {:?} already has its transmit SA (ipsec.sa[{k}]); a tunnel sends with one SA: change its spi and key to rekey", sa.label(), sa.entry.tunnel));
            }
        }
        let slots: Vec<u32> = replaced
            .iter()
            .filter_map(|k| {
                let x = api.get(k)?;
                let at = tunnels.by_name.get(x.tunnel())?.1;
                self.api_slot(k, at)
            })
            .collect();
        self.ipsec
            .insert_one(&planned, iface, &sa.entry.tunnel, &slots)
            .map_err(|e| match dir {
                SaDirection::In => format!("{}.spi: {e}", sa.label()),
                SaDirection::Out => format!("{}: {e}", sa.label()),
            })?;
        for k in replaced {
            api.take(&k);
        }
        api.put(stored);
        Ok(())
    }

    /// The slot of the API's tunnel SA of `key` on tunnel interface `iface`.
    fn api_slot(&self, key: &ApiSaKey, iface: u16) -> Option<u32> {
        match *key {
            (_, spi, Some((peer, port))) => self.ipsec.chosen_slot(spi, peer, port),
            (d, spi, None) => self.ipsec.slot_of(d.into(), spi, iface),
        }
    }

    /// The whole IPsec config planned again with the API's SAs but the `gone` ones (by
    /// direction and SPI), and `added` after them, and IKE's policy-based children as
    /// `children` says (unchanged if `None`): how a policy SA is added or removed.
    /// All or nothing: on an error the API's SAs are as they were.
    fn republish_api_sas(
        &self,
        api: &mut ApiSas,
        gone: &[ApiSaKey],
        added: Vec<ipsec::config::ExtraSa>,
        children: Option<Vec<ipsec::spd::IkeChild>>,
    ) -> Result<(), String> {
        let cfg = self
            .ipsec_config
            .lock()
            .map_err(|_| "IPsec state unavailable")?
            .clone();
        // The keys the running config was applied with (taken before anything changes).
        let keys = self
            .ipsec_keys
            .lock()
            .map_err(|_| "IPsec state unavailable")?;
        // The API's SAs as given, but the gone ones, then the added one: planned whole.
        // On an error the API's SAs stay as they were (only this copy is dropped).
        let mut next: Vec<ipsec::config::ExtraSa> = api
            .list
            .iter()
            .filter(|x| !gone.contains(&stored_key(x)))
            .map(ipsec::config::StoredSa::extra)
            .collect();
        next.extend(added);
        // Kept form first: what cannot be kept is refused before the data plane changes.
        let mut kept = ApiSas::new(&next)?;
        kept.ike_children = children.unwrap_or_else(|| api.ike_children.clone());
        let ike = ipsec::spd::ike_policies(&kept.ike_children)?;
        self.publish_ipsec_with(&cfg, &next, &ike, &keys)?;
        *api = kept;
        Ok(())
    }

    /// Install a child SA of a policy-based IKE peer: its two SAs (`inbound`, `outbound`,
    /// policy SAs: no tunnel) and its policies (`child`) in the SPD, in one publish (the
    /// whole IPsec config planned again, as for any policy SA). All or nothing. Refused
    /// when another policy SA already has the outbound SPI (peers pick our outbound SPIs,
    /// and policies name their SA by SPI).
    pub fn add_ike_policy_child(
        &self,
        inbound: ipsec::config::ExtraSa,
        outbound: ipsec::config::ExtraSa,
        child: ipsec::spd::IkeChild,
    ) -> Result<(), String> {
        let mut api = self
            .ipsec_api
            .lock()
            .map_err(|_| "IPsec state unavailable")?;
        for sa in [&inbound, &outbound] {
            if api.get(&api_key(sa)).is_some() {
                return Err(format!(
                    "{}: another SA given through the API or by IKE has this SPI and direction",
                    sa.label()
                ));
            }
        }
        // Its own policies alone first, so that an error names this child only.
        ipsec::spd::ike_policies(std::slice::from_ref(&child))?;
        let mut children = api.ike_children.clone();
        children.push(child);
        self.republish_api_sas(&mut api, &[], vec![inbound, outbound], Some(children))
    }

    /// Remove a child SA of a policy-based IKE peer (by its SPIs): its SAs and policies,
    /// in one publish. `Ok(false)` when no such child is installed.
    pub fn remove_ike_policy_child(&self, spi_in: u32, spi_out: u32) -> Result<bool, String> {
        use ipsec::config::SaDirection;
        let mut api = self
            .ipsec_api
            .lock()
            .map_err(|_| "IPsec state unavailable")?;
        let Some(k) = api
            .ike_children
            .iter()
            .position(|c| c.spi_in == spi_in && c.spi_out == spi_out)
        else {
            return Ok(false);
        };
        let mut children = api.ike_children.clone();
        children.remove(k);
        let gone = [
            (SaDirection::In, spi_in, None),
            (SaDirection::Out, spi_out, None),
        ];
        self.republish_api_sas(&mut api, &gone, Vec::new(), Some(children))?;
        Ok(true)
    }

    /// Remove the API's SA of `key` (`DELETE /v1/ipsec/sa/...`, IKE's children); `Ok(false)`
    /// when the API gave none such (the config's SAs are the config's to remove).
    pub fn remove_ipsec_sa(&self, key: ApiSaKey) -> Result<bool, String> {
        let mut api = self
            .ipsec_api
            .lock()
            .map_err(|_| "IPsec state unavailable")?;
        let Some(x) = api.get(&key) else {
            return Ok(false);
        };
        if !x.tunnel().is_empty() {
            let iface = self
                .ipsec_tunnels
                .lock()
                .map_err(|_| "IPsec state unavailable")?
                .by_name
                .get(x.tunnel())
                .map(|t| t.1);
            if let Some(slot) = iface.and_then(|i| self.api_slot(&key, i)) {
                self.ipsec.remove_one(slot)?;
            }
            api.take(&key);
            return Ok(true);
        }
        self.republish_api_sas(&mut api, &[key], Vec::new(), None)?;
        Ok(true)
    }

    /// The (direction, SPI) of the SAs the API installed.
    pub fn ipsec_api_sas(&self) -> std::collections::HashSet<(ipsec::config::SaDirection, u32)> {
        self.ipsec_api
            .lock()
            .map(|a| a.list.iter().map(|x| (x.direction(), x.spi())).collect())
            .unwrap_or_default()
    }

    /// The NAT config the running rules came from.
    pub fn nat_config(&self) -> firewall::nat::config::NatConfig {
        self.nat_config
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default()
    }

    /// The features enabled on interface `iface`, in execution order.
    pub fn enabled(&self, iface: u16) -> Vec<&'static str> {
        self.state
            .load()
            .enabled(iface)
            .into_iter()
            .filter_map(|id| self.registry.get(id).map(|e| e.spec.name))
            .collect()
    }

    /// Every feature's counters, summed over `workers`.
    pub fn counters(&self, workers: &[Arc<WorkerShared>]) -> Vec<FeatureCounts> {
        let sum = |slot: usize| workers.iter().map(|w| w.counters.feature(slot)).sum();
        self.registry
            .entries()
            .iter()
            .map(|e| FeatureCounts {
                feature: e.spec.name,
                arc: e.spec.arc.name(),
                packets: sum(e.counter_base),
                drops: e
                    .spec
                    .drops
                    .iter()
                    .enumerate()
                    .map(|(r, (name, desc))| (*name, *desc, sum(e.counter_base + 1 + r)))
                    .collect(),
            })
            .collect()
    }
}

#[cfg(test)]
mod api_sas_tests {
    use super::*;
    use ipsec::config::{ExtraSa, SaDirection};

    fn sa(dir: SaDirection, spi: u32, peer: Option<&str>) -> ExtraSa {
        let mut x = ExtraSa::for_tunnel(
            "t0",
            dir,
            spi,
            "aes-128-gcm".into(),
            "none",
            false,
            &[7; 20],
            &[],
        );
        if let Some(p) = peer {
            x.entry.remote = Some(p.parse().unwrap());
            x.entry.local = Some("192.0.2.1".parse().unwrap());
            x.entry.selectors = vec![format!("{p}/32")];
        }
        x
    }

    #[test]
    fn sas_are_found_by_key_and_taking_one_keeps_the_others_found() {
        let mut list = vec![];
        for spi in 0x1000..0x1040u32 {
            list.push(sa(SaDirection::In, spi, None));
            // Two peers that picked one outbound SPI.
            list.push(sa(
                SaDirection::Out,
                0x9000,
                Some(&format!("10.0.{}.{}", spi >> 8, spi & 0xff)),
            ));
        }
        let mut a = ApiSas::new(&list).unwrap();
        assert_eq!(a.list.len(), 128);
        for x in &list {
            let k = api_key(x);
            assert_eq!(a.get(&k).map(stored_key), Some(k));
        }
        assert!(a.get(&(SaDirection::In, 0x5555, None)).is_none());
        // Take every third, from the front (each take moves the last SA into its place).
        let mut gone = vec![];
        for x in list.iter().step_by(3) {
            let k = api_key(x);
            assert_eq!(a.take(&k).map(|s| stored_key(&s)), Some(k));
            assert!(a.take(&k).is_none(), "taken twice");
            gone.push(k);
        }
        for x in &list {
            let k = api_key(x);
            let found = a.get(&k).map(stored_key);
            assert_eq!(found, (!gone.contains(&k)).then_some(k), "{k:?}");
        }
        assert_eq!(a.list.len(), 128 - gone.len());
        // What was taken can come back.
        for x in list.iter().step_by(3) {
            let s = a.keep(x).unwrap();
            a.put(s);
        }
        for x in &list {
            assert!(a.get(&api_key(x)).is_some());
        }
    }
}
