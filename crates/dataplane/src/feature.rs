//! Feature arcs, as VPP's vnet feature arcs: named points of the graph where optional
//! nodes (uRPF, firewall, NAT, IPsec, policers) run for the interfaces that enabled them,
//! without editing the engine.
//!
//! - An [`ArcId`] is a point of the graph: `port-input` (before ethernet-input),
//!   `ip4-unicast` / `ip6-unicast` (after input validation, before lookup), `ip4-output` /
//!   `ip6-output` (after rewrite, before transmit or fragmentation).
//! - A [`Feature`] declares, in its [`FeatureSpec`], the arc it joins, the features it runs
//!   before and after, and its drop reasons; it makes one [`FeatureNode`] per worker.
//! - A [`Registry`] holds every feature the daemon knows, in a fixed execution order (the
//!   order constraints, topologically sorted), and gives each its counter slots.
//! - A [`FeatureState`] says which features each interface has on each arc. The control
//!   thread builds a new one and publishes it (RCU, as the interface table: a worker picks
//!   it up between vectors); no restart.
//!
//! Cost: a graph whose state enables nothing runs its feature-free instantiation, chosen by
//! one branch per vector ([`crate::Graph::process`]); with features enabled somewhere, a
//! packet pays a mask load and a branch per arc it passes.

use std::collections::HashMap;
use std::sync::Arc;

use crate::buffer::{PacketMemory, Pkt, F_LOCAL_ORIGIN, VECTOR_SIZE};
use crate::interfaces::{Interfaces, Subifs};

/// A point of the graph where features run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum ArcId {
    /// Every received frame, before ethernet-input, keyed by the receiving port (IPsec or
    /// NAT-T decapsulation, policers).
    PortInput = 0,
    /// Valid IPv4 packets after ip4-input, before ip4-lookup, keyed by the receiving
    /// interface (a VLAN sub-interface for tagged frames). Locally generated packets (ICMP
    /// errors) do not pass it.
    Ip4Unicast = 1,
    /// Valid IPv6 packets after ip6-input, before ip6-lookup; as [`ArcId::Ip4Unicast`].
    Ip6Unicast = 2,
    /// IPv4 packets after ip4-rewrite (Ethernet header written), before transmit; keyed by
    /// the egress interface. Packets bigger than the egress MTU pass it before ip4-frag,
    /// with their L3 header valid and their L2 header not yet written.
    Ip4Output = 3,
    /// IPv6 packets after ip6-rewrite, before transmit; keyed by the egress interface.
    Ip6Output = 4,
}

/// Number of arcs.
pub const ARC_COUNT: usize = 5;
/// Most features a registry holds (one bit each in an interface's per-arc mask).
pub const MAX_FEATURES: usize = 64;
/// Counter slots for all features together: one for the packets a feature saw, one per
/// drop reason.
pub const MAX_FEATURE_COUNTERS: usize = 512;

impl ArcId {
    /// Every arc, in index order.
    pub const ALL: [ArcId; ARC_COUNT] = [
        ArcId::PortInput,
        ArcId::Ip4Unicast,
        ArcId::Ip6Unicast,
        ArcId::Ip4Output,
        ArcId::Ip6Output,
    ];
    /// The arc's name, as shown in traces and counters.
    pub fn name(self) -> &'static str {
        match self {
            ArcId::PortInput => "port-input",
            ArcId::Ip4Unicast => "ip4-unicast",
            ArcId::Ip6Unicast => "ip6-unicast",
            ArcId::Ip4Output => "ip4-output",
            ArcId::Ip6Output => "ip6-output",
        }
    }
}

/// What a feature is: its name, its arc, its order constraints and its drop reasons.
#[derive(Clone, Copy, Debug)]
pub struct FeatureSpec {
    /// Unique name, as operators enable it: `ip4-urpf-strict`.
    pub name: &'static str,
    /// The arc it joins.
    pub arc: ArcId,
    /// Features of the same arc it must run before (names; unknown names are ignored, so a
    /// feature can order itself against one that is not built in).
    pub before: &'static [&'static str],
    /// Features of the same arc it must run after.
    pub after: &'static [&'static str],
    /// Its drop reasons: (snake-case name, description). At most 255.
    pub drops: &'static [(&'static str, &'static str)],
}

/// What a feature node sees of the worker while it runs: packet memory, the FIB, the
/// interface table, the vector's clock.
pub struct FeatureCx<'a> {
    /// The packets' memory: frames are read and written through it.
    pub mem: &'a mut dyn PacketMemory,
    /// The worker's FIB reader (valid for the whole call).
    pub fib: &'a fib::FibReader,
    /// The interface table.
    pub ifaces: &'a Interfaces,
    /// Its VLAN sub-interfaces by their tags ([`FeatureCx::subif_of`]).
    pub subifs: &'a Subifs,
    /// Monotonic clock of the vector, in ns.
    pub now_ns: u64,
    /// The arc being run.
    pub arc: ArcId,
}

impl FeatureCx<'_> {
    /// The VLAN sub-interface a tagged `frame` (from its Ethernet header) received on
    /// `rx_port` belongs to, as ethernet-input will find it; `None` if it is untagged or of
    /// no sub-interface (ethernet-input drops such a tagged frame). For features on
    /// `port-input`, which see frames before ethernet-input has read their tags.
    #[inline]
    pub fn subif_of(&self, rx_port: u16, frame: &[u8]) -> Option<u16> {
        self.subifs.of(self.ifaces, rx_port, frame)
    }
}

/// The packets of one vector that reach a feature: those on interfaces that enabled it,
/// not dropped by an earlier feature. A feature reads and writes their frames through
/// [`FeatureCx::mem`] and their descriptors here, and drops what it must; everything it
/// does not drop goes on along the arc (the interface's next feature, then the node after
/// the arc). Nothing is copied to build it: it refers to the vector in place.
pub struct Batch<'a> {
    pkts: &'a mut [Pkt],
    idx: &'a [u16],
    ifc: Ifaces<'a>,
    drops: &'a mut Drops,
}

/// What a feature noted about traced packets in one call ([`Batch::note`]).
pub(crate) struct Notes {
    /// (batch position, first number, second number).
    pub(crate) list: [(u16, u32, u64); VECTOR_SIZE],
    pub(crate) len: usize,
}

/// The interface of each packet of a batch.
#[derive(Clone, Copy)]
pub(crate) enum Ifaces<'a> {
    /// All on this one.
    All(u16),
    /// By vector index.
    ByIndex(&'a [u16]),
}

/// Drops a feature asked for in one call: (batch position, reason), each position once
/// (a bit per position), so the list can never fill before every packet is in it.
pub(crate) struct Drops {
    pub(crate) list: [(u16, u8); VECTOR_SIZE],
    /// What becomes of each entry of `list`: [`REPLY_NONE`] (freed), [`REPLY_REWRITTEN`]
    /// (routed back as it is), [`REPLY_TAKEN`] (freed, not a drop), [`REPLY_REROUTE`]
    /// (routed again, not a drop), else an ICMP error kind (`icmp::kind`).
    pub(crate) reply: [u32; VECTOR_SIZE],
    pub(crate) len: usize,
    seen: [u64; VECTOR_SIZE / 64],
    /// Notes about traced packets.
    pub(crate) notes: Notes,
}

impl Batch<'_> {
    /// Number of packets.
    #[inline]
    pub fn len(&self) -> usize {
        self.idx.len()
    }
    /// Whether there are none (never, when a feature is called).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.idx.is_empty()
    }
    /// Packet `k`'s descriptor (`None` for `k >= len()`).
    #[inline]
    pub fn pkt(&self, k: usize) -> Option<&Pkt> {
        self.pkts.get(*self.idx.get(k)? as usize)
    }
    /// Packet `k`'s descriptor, writable: a feature may move its offsets and length
    /// (decapsulation, encapsulation) or change its `rx_port`; the graph carries it on. On
    /// `ip4-unicast`, a feature that changes the IPv4 destination sets `nh` to it (host
    /// order): ip4-lookup takes the destination from there, where ip4-input left it. On
    /// the unicast arcs `aux` is free (the engine sets it after the lookup): a feature may
    /// leave a value there for a later feature of the same arc, which clears it. (IPsec's
    /// `esp-decrypt`, on `port-input`, leaves there the SPI of a policy SA that decrypted
    /// the packet, for `ipsec4-policy-in` / `ipsec6-policy-in`, which run first on the
    /// unicast arcs and clear it.)
    #[inline]
    pub fn pkt_mut(&mut self, k: usize) -> Option<&mut Pkt> {
        self.pkts.get_mut(*self.idx.get(k)? as usize)
    }
    /// The interface packet `k` is on for this arc: the receiving interface on input arcs,
    /// the egress interface (a VLAN sub-interface, not its parent) on output arcs.
    #[inline]
    pub fn iface(&self, k: usize) -> u16 {
        match self.ifc {
            Ifaces::All(i) => i,
            Ifaces::ByIndex(by) => self
                .idx
                .get(k)
                .and_then(|&i| by.get(i as usize))
                .copied()
                .unwrap_or(u16::MAX),
        }
    }
    /// Drop packet `k`, counted under the feature's drop reason `reason` (an index into
    /// [`FeatureSpec::drops`]; one out of range counts under the last). Dropping a packet
    /// twice (the first reason counts), or one beyond `len()`, changes nothing.
    #[inline]
    pub fn drop(&mut self, k: usize, reason: u8) {
        self.drop_with(k, reason, REPLY_NONE);
    }

    /// Whether packet `k` is being traced (`ferrouter trace`): only then is a
    /// [`Batch::note`] about it kept, so a feature asks before it computes one.
    #[inline]
    pub fn traced(&self, k: usize) -> bool {
        self.pkt(k).is_some_and(|p| p.flags & TRACED != 0)
    }

    /// Note two numbers about traced packet `k` for its trace (an SA's SPI and sequence
    /// number, say), shown as the feature's [`Feature::describe_note`] reads them. Ignored
    /// for packets not traced, and beyond one note per packet per call.
    #[inline]
    pub fn note(&mut self, k: usize, a: u32, b: u64) {
        if !self.traced(k) {
            return;
        }
        let n = &mut self.drops.notes;
        if let Some(slot) = n.list.get_mut(n.len) {
            *slot = (k as u16, a, b);
            n.len += 1;
        }
    }

    /// Take packet `k` off the graph without dropping it: the feature has sent a copy
    /// elsewhere (another worker, [`crate::handoff`]). Its buffer is freed and it counts
    /// as no drop; the feature counts what it took. Taking a packet already dropped or
    /// taken, or one beyond `len()`, changes nothing.
    #[inline]
    pub fn take(&mut self, k: usize) {
        self.drop_with(k, 0, REPLY_TAKEN);
    }

    /// Send packet `k` back to the lookup of its IP version, as a packet of the router's
    /// own: the feature has encapsulated it (an IPsec tunnel's ESP packet, with a new outer
    /// header at the same `off + l3`, its length in `len`) and the outer destination decides
    /// where it goes. It passes no unicast arc, is not counted as forwarded again, and its
    /// TTL is left as the feature wrote it. Not a drop. Rerouting a packet already dropped
    /// or taken, or one beyond `len()`, changes nothing.
    #[inline]
    pub fn reroute(&mut self, k: usize) {
        self.drop_with(k, 0, REPLY_REROUTE);
    }

    /// Drop packet `k` as [`Batch::drop`] does, and answer its sender: `reply` says how.
    /// A packet the router generated itself (a reply, an ICMP error) is never answered,
    /// only dropped, so replies cannot loop.
    #[inline]
    pub fn reject(&mut self, k: usize, reason: u8, reply: Reply) {
        let local = self.pkt(k).is_some_and(|p| p.flags & F_LOCAL_ORIGIN != 0);
        let r = match reply {
            _ if local => REPLY_NONE,
            Reply::Rewritten => REPLY_REWRITTEN,
            Reply::IcmpError { ty, code } => icmp_kind(ty, code).max(REPLY_REROUTE + 1),
            Reply::IcmpErrorMtu { ty, code, mtu } => {
                (icmp_kind(ty, code) | u32::from(mtu)).max(REPLY_REROUTE + 1)
            }
        };
        self.drop_with(k, reason, r);
    }

    #[inline]
    fn drop_with(&mut self, k: usize, reason: u8, reply: u32) {
        if k >= self.idx.len() {
            return;
        }
        let (w, bit) = (k / 64, 1u64 << (k % 64));
        let d = &mut *self.drops;
        let len = d.len;
        if let (Some(word), Some(slot), Some(r)) =
            (d.seen.get_mut(w), d.list.get_mut(len), d.reply.get_mut(len))
        {
            if *word & bit == 0 {
                *word |= bit;
                *slot = (k as u16, reason);
                *r = reply;
                d.len += 1;
            }
        }
    }
}

/// How a rejected packet's sender is answered ([`Batch::reject`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The feature rewrote the packet in place into its reply (a TCP RST, say): an IP
    /// packet at the same offsets, addressed back to the sender, checksums valid. The
    /// engine routes it as a packet of the router's own (it passes no unicast arc).
    Rewritten,
    /// The engine replaces the packet by an ICMP (ICMPv6 on the IPv6 arcs) error of this
    /// type and code quoting it, from the router's address, rate limited as its own.
    IcmpError {
        /// ICMP type.
        ty: u8,
        /// ICMP code.
        code: u8,
    },
    /// As [`Reply::IcmpError`], with the next-hop MTU it reports (fragmentation needed,
    /// packet too big): a feature that makes packets bigger (IPsec's policies) answers
    /// those that would no longer fit.
    IcmpErrorMtu {
        /// ICMP type.
        ty: u8,
        /// ICMP code.
        code: u8,
        /// The MTU.
        mtu: u16,
    },
}

/// An ICMP error kind as `Pkt::aux` carries it (the packing of `icmp::kind`, without an
/// MTU; written here so this file does not import the ICMP node's).
pub(crate) const fn icmp_kind(ty: u8, code: u8) -> u32 {
    (ty as u32) << 24 | (code as u32) << 16
}

/// `trace::F_TRACED` (written here so this file does not import the tracer's, which
/// imports the counters, which import this).
pub(crate) const TRACED: u16 = 4;

/// [`Drops::reply`]: freed.
pub(crate) const REPLY_NONE: u32 = 0;
/// [`Drops::reply`]: rewritten by the feature, routed back.
pub(crate) const REPLY_REWRITTEN: u32 = 1;
/// [`Drops::reply`]: taken by the feature ([`Batch::take`]): freed, not a drop.
pub(crate) const REPLY_TAKEN: u32 = 2;

/// [`Drops::reply`]: encapsulated by the feature, to be routed again ([`Batch::reroute`]).
pub(crate) const REPLY_REROUTE: u32 = 3;

/// A feature's per-worker node. Called with the packets of one vector that reach it; it
/// may read and write their frames and descriptors, and drops what it must
/// ([`Batch::drop`]). Runs on the hot path: it must not allocate, lock, block, log or panic
/// (count instead).
pub trait FeatureNode: Send {
    /// Process `batch`.
    fn process(&mut self, cx: &mut FeatureCx<'_>, batch: &mut Batch<'_>);
}

/// A feature the daemon can enable on interfaces.
pub trait Feature: Send + Sync {
    /// What it is.
    fn spec(&self) -> FeatureSpec;
    /// Its node for worker `worker` (called once per worker at start, off the hot path).
    fn node(&self, worker: usize) -> Box<dyn FeatureNode>;
    /// How a trace shows a note of its node ([`Batch::note`]).
    fn describe_note(&self, a: u32, b: u64) -> String {
        format!("{a} {b}")
    }
}

/// Index of a feature in its registry (also its execution rank: a feature with a lower id
/// runs first).
pub type FeatureId = u8;

/// Why a set of features cannot be registered.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RegistryError {
    /// Two features share a name.
    #[error("feature {0:?} is registered twice")]
    Duplicate(&'static str),
    /// More than [`MAX_FEATURES`].
    #[error("{0} features registered; at most {MAX_FEATURES} are supported")]
    TooMany(usize),
    /// Their counters do not fit.
    #[error("features need {0} counter slots; at most {MAX_FEATURE_COUNTERS} are supported")]
    TooManyCounters(usize),
    /// A feature declares more than 255 drop reasons.
    #[error("feature {0:?} declares more than 255 drop reasons")]
    TooManyDrops(&'static str),
    /// The before/after constraints of an arc's features form a cycle.
    #[error("the order constraints of arc {arc} form a cycle through {names:?}")]
    Cycle {
        /// The arc.
        arc: &'static str,
        /// The features left unordered.
        names: Vec<&'static str>,
    },
}

/// A registered feature.
pub struct Entry {
    /// What it declared.
    pub spec: FeatureSpec,
    /// Its first counter slot: `base` counts the packets it saw, `base + 1 + r` its drops
    /// of reason `r`.
    pub counter_base: usize,
    feature: Arc<dyn Feature>,
}

impl Entry {
    /// A note of its node, as the feature reads it.
    pub fn describe_note(&self, a: u32, b: u64) -> String {
        self.feature.describe_note(a, b)
    }
}

/// Every feature a daemon knows, in execution order: by arc, then by the topological order
/// of their constraints (ties kept in registration order).
pub struct Registry {
    entries: Vec<Entry>,
    by_name: HashMap<&'static str, FeatureId>,
    /// Per arc: the range of ids it holds.
    arcs: [(u8, u8); ARC_COUNT],
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            entries: Vec::new(),
            by_name: HashMap::new(),
            arcs: [(0, 0); ARC_COUNT],
        }
    }
}

impl Registry {
    /// Register `features`, checking names, counts and order constraints.
    pub fn new(features: Vec<Arc<dyn Feature>>) -> Result<Registry, RegistryError> {
        if features.len() > MAX_FEATURES {
            return Err(RegistryError::TooMany(features.len()));
        }
        let mut seen = HashMap::new();
        for f in &features {
            let s = f.spec();
            if seen.insert(s.name, ()).is_some() {
                return Err(RegistryError::Duplicate(s.name));
            }
            if s.drops.len() > 255 {
                return Err(RegistryError::TooManyDrops(s.name));
            }
        }
        let mut ordered: Vec<Arc<dyn Feature>> = Vec::with_capacity(features.len());
        let mut arcs = [(0u8, 0u8); ARC_COUNT];
        for arc in ArcId::ALL {
            let start = ordered.len() as u8;
            let mine: Vec<&Arc<dyn Feature>> =
                features.iter().filter(|f| f.spec().arc == arc).collect();
            for k in topo_order(arc, &mine)? {
                ordered.push(mine[k].clone());
            }
            arcs[arc as usize] = (start, ordered.len() as u8);
        }
        let mut entries = Vec::with_capacity(ordered.len());
        let mut by_name = HashMap::new();
        let mut base = 0;
        for (id, feature) in ordered.into_iter().enumerate() {
            let spec = feature.spec();
            by_name.insert(spec.name, id as FeatureId);
            entries.push(Entry {
                spec,
                counter_base: base,
                feature,
            });
            base += 1 + spec.drops.len();
        }
        if base > MAX_FEATURE_COUNTERS {
            return Err(RegistryError::TooManyCounters(base));
        }
        Ok(Registry {
            entries,
            by_name,
            arcs,
        })
    }

    /// The features, by id.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The id of the feature named `name`.
    pub fn id(&self, name: &str) -> Option<FeatureId> {
        self.by_name.get(name).copied()
    }

    /// The feature of id `id`.
    pub fn get(&self, id: FeatureId) -> Option<&Entry> {
        self.entries.get(id as usize)
    }

    /// The ids of `arc`'s features, in execution order.
    pub fn arc(&self, arc: ArcId) -> std::ops::Range<usize> {
        let (s, e) = self.arcs[arc as usize];
        s as usize..e as usize
    }

    /// A worker's nodes, by id.
    pub(crate) fn nodes(&self, worker: usize) -> Vec<Box<dyn FeatureNode>> {
        self.entries
            .iter()
            .map(|e| e.feature.node(worker))
            .collect()
    }

    /// A state in which interface `iface` (of `ifaces`) has the features `enabled(iface)`
    /// names. Unknown names are returned as errors, nothing else changes.
    pub fn state<'n>(
        &self,
        ifaces: usize,
        mut enabled: impl FnMut(usize) -> Vec<&'n str>,
    ) -> Result<FeatureState, String> {
        let mut masks = vec![[0u64; ARC_COUNT]; ifaces];
        for (i, m) in masks.iter_mut().enumerate() {
            for name in enabled(i) {
                let id = self.id(name).ok_or_else(|| {
                    format!(
                        "no feature named {name:?} (known: {})",
                        self.entries
                            .iter()
                            .map(|e| e.spec.name)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })?;
                let arc = self.entries[id as usize].spec.arc;
                m[arc as usize] |= 1 << id;
            }
        }
        Ok(FeatureState::from_masks(masks))
    }
}

/// Kahn's algorithm over one arc's features; ties in registration order.
fn topo_order(arc: ArcId, fs: &[&Arc<dyn Feature>]) -> Result<Vec<usize>, RegistryError> {
    let n = fs.len();
    let specs: Vec<FeatureSpec> = fs.iter().map(|f| f.spec()).collect();
    let index: HashMap<&str, usize> = specs.iter().enumerate().map(|(i, s)| (s.name, i)).collect();
    // edge a -> b: a runs before b.
    let mut succ = vec![Vec::new(); n];
    let mut indeg = vec![0usize; n];
    for (i, s) in specs.iter().enumerate() {
        for b in s.before {
            if let Some(&j) = index.get(b) {
                succ[i].push(j);
                indeg[j] += 1;
            }
        }
        for a in s.after {
            if let Some(&j) = index.get(a) {
                succ[j].push(i);
                indeg[i] += 1;
            }
        }
    }
    let mut done = vec![false; n];
    let mut order = Vec::with_capacity(n);
    while order.len() < n {
        let Some(next) = (0..n).find(|&i| !done[i] && indeg[i] == 0) else {
            return Err(RegistryError::Cycle {
                arc: arc.name(),
                names: (0..n)
                    .filter(|&i| !done[i])
                    .map(|i| specs[i].name)
                    .collect(),
            });
        };
        done[next] = true;
        order.push(next);
        for &j in &succ[next] {
            indeg[j] -= 1;
        }
    }
    Ok(order)
}

/// Which features each interface has, per arc: bit `id` of `mask(iface, arc)`. Immutable;
/// the control thread publishes a new one to change it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FeatureState {
    masks: Vec<[u64; ARC_COUNT]>,
    /// Per interface: bit `arc` set when it has features on `arc`.
    iface_arcs: Vec<u8>,
    /// Bit `arc` set: some interface has features on `arc`.
    arcs: u8,
}

impl FeatureState {
    /// A state of per-interface, per-arc masks.
    pub fn from_masks(masks: Vec<[u64; ARC_COUNT]>) -> FeatureState {
        let iface_arcs: Vec<u8> = masks
            .iter()
            .map(|m| {
                m.iter()
                    .enumerate()
                    .fold(0, |a, (k, &x)| if x != 0 { a | 1 << k } else { a })
            })
            .collect();
        let arcs = iface_arcs.iter().fold(0, |a, b| a | b);
        FeatureState {
            masks,
            iface_arcs,
            arcs,
        }
    }
    /// Whether any interface has any feature.
    #[inline]
    pub fn active(&self) -> bool {
        self.arcs != 0
    }
    /// The arcs some interface has features on: bit `arc as u8`.
    #[inline]
    pub fn arcs(&self) -> u8 {
        self.arcs
    }
    /// The features of interface `iface` on `arc` (0 for an interface it does not know).
    #[inline]
    pub fn mask(&self, iface: u16, arc: ArcId) -> u64 {
        self.masks
            .get(iface as usize)
            .map_or(0, |m| m[arc as usize])
    }
    /// The arcs interface `iface` has features on: bit `arc as u8` (0 for an interface it
    /// does not know).
    #[inline]
    pub fn iface_arcs(&self, iface: u16) -> u8 {
        self.iface_arcs.get(iface as usize).copied().unwrap_or(0)
    }
    /// The ids enabled on `iface`, on every arc, in execution order.
    pub fn enabled(&self, iface: u16) -> Vec<FeatureId> {
        let m = self.masks.get(iface as usize).copied().unwrap_or_default();
        let all = m.iter().fold(0u64, |a, b| a | b);
        (0..MAX_FEATURES as u8)
            .filter(|b| all >> b & 1 == 1)
            .collect()
    }
}

/// A worker's feature nodes and the scratch space an arc runs in (allocated once).
pub(crate) struct Runtime {
    pub(crate) nodes: Vec<Box<dyn FeatureNode>>,
    /// Per arc: its features as (id, counter base, drop reasons), in execution order.
    pub(crate) arcs: [Vec<(u8, usize, usize)>; ARC_COUNT],
    /// The features on the arc of each packet still on it, by position.
    pub(crate) masks: Box<[u64; VECTOR_SIZE]>,
    /// The vector indices handed to one feature (when not all of `alive`).
    pub(crate) idx: Box<[u16; VECTOR_SIZE]>,
    /// For each of them, its position among the packets still on the arc.
    pub(crate) pos: Box<[u16; VECTOR_SIZE]>,
    /// The interface each packet is keyed by on the arc, by vector index.
    pub(crate) ifc: Box<[u16; VECTOR_SIZE]>,
    /// What one feature call dropped.
    pub(crate) drops: Box<Drops>,
}

/// A dropped packet's place among those still on an arc.
pub(crate) const DEAD: u16 = u16::MAX;

impl Runtime {
    pub(crate) fn new(registry: &Registry, worker: usize) -> Runtime {
        let arcs = ArcId::ALL.map(|arc| {
            registry
                .arc(arc)
                .filter_map(|id| {
                    let e = registry.get(id as u8)?;
                    Some((id as u8, e.counter_base, e.spec.drops.len()))
                })
                .collect()
        });
        Runtime {
            nodes: registry.nodes(worker),
            arcs,
            masks: Box::new([0; VECTOR_SIZE]),
            idx: Box::new([0; VECTOR_SIZE]),
            pos: Box::new([0; VECTOR_SIZE]),
            ifc: Box::new([0; VECTOR_SIZE]),
            drops: Box::new(Drops {
                list: [(0, 0); VECTOR_SIZE],
                reply: [REPLY_NONE; VECTOR_SIZE],
                len: 0,
                seen: [0; VECTOR_SIZE / 64],
                notes: Notes {
                    list: [(0, 0, 0); VECTOR_SIZE],
                    len: 0,
                },
            }),
        }
    }
}

/// A batch over `pkts` (a vector's descriptors) of the packets `idx`, keyed by `ifc` (by
/// vector index), recording drops into `drops` (emptied).
pub(crate) fn batch<'a>(
    pkts: &'a mut [Pkt],
    idx: &'a [u16],
    ifc: Ifaces<'a>,
    drops: &'a mut Drops,
) -> Batch<'a> {
    drops.len = 0;
    drops.seen = [0; VECTOR_SIZE / 64];
    drops.notes.len = 0;
    Batch {
        pkts,
        idx,
        ifc,
        drops,
    }
}

/// A feature that does nothing (every packet goes on): the benchmark's measure of what the
/// arc machinery costs, and a test double for the engine's tests.
pub struct Noop {
    /// The arc it joins.
    pub arc: ArcId,
}

impl Noop {
    /// Its name on `arc`: `noop-ip4-unicast`, ...
    pub fn name_on(arc: ArcId) -> &'static str {
        match arc {
            ArcId::PortInput => "noop-port-input",
            ArcId::Ip4Unicast => "noop-ip4-unicast",
            ArcId::Ip6Unicast => "noop-ip6-unicast",
            ArcId::Ip4Output => "noop-ip4-output",
            ArcId::Ip6Output => "noop-ip6-output",
        }
    }
}

struct NoopNode;

impl FeatureNode for NoopNode {
    fn process(&mut self, _cx: &mut FeatureCx<'_>, _batch: &mut Batch<'_>) {}
}

impl Feature for Noop {
    fn spec(&self) -> FeatureSpec {
        FeatureSpec {
            name: Noop::name_on(self.arc),
            arc: self.arc,
            before: &[],
            after: &[],
            drops: &[],
        }
    }
    fn node(&self, _worker: usize) -> Box<dyn FeatureNode> {
        Box::new(NoopNode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Named(FeatureSpec);
    impl Feature for Named {
        fn spec(&self) -> FeatureSpec {
            self.0
        }
        fn node(&self, _: usize) -> Box<dyn FeatureNode> {
            Box::new(NoopNode)
        }
    }
    fn f(
        name: &'static str,
        arc: ArcId,
        before: &'static [&'static str],
        after: &'static [&'static str],
    ) -> Arc<dyn Feature> {
        Arc::new(Named(FeatureSpec {
            name,
            arc,
            before,
            after,
            drops: &[("x", "x")],
        }))
    }

    #[test]
    fn the_traced_flag_is_the_tracers() {
        assert_eq!(TRACED, crate::trace::F_TRACED);
    }

    #[test]
    fn registry_orders_by_arc_then_constraints() {
        let r = Registry::new(vec![
            f("nat", ArcId::Ip4Unicast, &[], &["fw"]),
            f("out", ArcId::Ip4Output, &[], &[]),
            f("fw", ArcId::Ip4Unicast, &[], &["urpf"]),
            f("urpf", ArcId::Ip4Unicast, &["acl-that-is-not-here"], &[]),
            f("decap", ArcId::PortInput, &[], &[]),
        ])
        .unwrap();
        let names: Vec<_> = r.entries().iter().map(|e| e.spec.name).collect();
        assert_eq!(names, ["decap", "urpf", "fw", "nat", "out"]);
        assert_eq!(r.arc(ArcId::Ip4Unicast), 1..4);
        assert_eq!(r.arc(ArcId::Ip6Unicast), 4..4);
        assert_eq!(r.get(r.id("fw").unwrap()).unwrap().counter_base, 4);
    }

    #[test]
    fn registry_refuses_cycles_and_duplicates() {
        let e = Registry::new(vec![
            f("a", ArcId::Ip6Output, &["b"], &[]),
            f("b", ArcId::Ip6Output, &["a"], &[]),
            f("c", ArcId::Ip6Output, &[], &[]),
        ])
        .err()
        .unwrap();
        assert_eq!(
            e,
            RegistryError::Cycle {
                arc: "ip6-output",
                names: vec!["a", "b"]
            }
        );
        assert_eq!(
            e.to_string(),
            "the order constraints of arc ip6-output form a cycle through [\"a\", \"b\"]"
        );
        let d = Registry::new(vec![
            f("a", ArcId::Ip6Output, &[], &[]),
            f("a", ArcId::Ip4Output, &[], &[]),
        ])
        .err()
        .unwrap();
        assert_eq!(d, RegistryError::Duplicate("a"));
    }

    #[test]
    fn state_masks_by_interface_and_arc() {
        let r = Registry::new(vec![
            f("u4", ArcId::Ip4Unicast, &[], &[]),
            f("u6", ArcId::Ip6Unicast, &[], &[]),
        ])
        .unwrap();
        let s = r
            .state(3, |i| if i == 1 { vec!["u6", "u4"] } else { vec![] })
            .unwrap();
        assert!(s.active());
        assert_eq!(s.mask(1, ArcId::Ip4Unicast), 1);
        assert_eq!(s.mask(1, ArcId::Ip6Unicast), 2);
        assert_eq!(s.mask(0, ArcId::Ip4Unicast), 0);
        assert_eq!(s.mask(9, ArcId::Ip4Unicast), 0);
        assert_eq!(s.enabled(1), vec![0, 1]);
        let e = r.state(1, |_| vec!["nope"]).unwrap_err();
        assert_eq!(e, "no feature named \"nope\" (known: u4, u6)");
        assert!(!r.state(2, |_| vec![]).unwrap().active());
    }
}
