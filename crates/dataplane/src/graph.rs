//! The forwarding graph: small nodes, each doing one job on a list of packets and handing
//! each packet to a named next node, VPP-style.
//!
//! ```text
//! [port-input] ─ ethernet-input ─┬─ ip4-input ─ [ip4-unicast] ─ ip4-lookup ─ ip4-rewrite ─ [ip4-output] ─┬─ port-tx
//!                                │                                  ▲                                └─ ip4-frag ─ port-tx
//!                                │                              icmp4-error ◄─ (no route, TTL, frag needed)
//!                                ├─ ip6-input ─ [ip6-unicast] ─ ip6-lookup ─ ip6-rewrite ─ [ip6-output] ─── port-tx
//!                                │                                  ▲
//!                                │                              icmp6-error ◄─ (no route, hop limit, too big)
//!                                └─ punt (ARP, local, unresolved, control multicast)
//! ```
//! The bracketed nodes are feature arcs ([`crate::feature`]): they run the features an
//! interface enabled, and are skipped altogether while no interface has any.
//! Drops and punts are decided, counted under a named [`Reason`] and their buffer released
//! on the spot. ICMP errors are built in place in the headroom in front of the packet they
//! quote and re-enter the lookup, so the graph has a cycle; it is walked in rounds, bounded.

use std::sync::Arc;

use fib::{FibReader, NextHop, NextHopId, MISS};

use crate::buffer::{PacketMemory, Pkt, Vector, F_LOCAL_ORIGIN, F_TO_FRAG, MAX_FRAME, VECTOR_SIZE};
use crate::capture::Capturer;
use crate::counters::{Counters, Reason};
use crate::feature::{self, ArcId, FeatureCx, FeatureState, Registry, DEAD};
use crate::interfaces::{Interfaces, PuntPath, Subifs, VlanTags};
use crate::punt::{PuntPacket, PuntProducer};
use crate::ratelimit::{PeerLimiter, RateLimiter};
use crate::trace::{Step, Tracer, F_TRACED};

/// Graph nodes that hold packet lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Node {
    /// Parse L2, classify by ethertype, and validate IPv4/IPv6 (ip4-input / ip6-input run
    /// inline for each packet: the counters keep their node names, the hop is saved).
    EthernetInput,
    /// IPv4 longest-prefix match and next-hop resolution.
    Ip4Lookup,
    /// IPv6 longest-prefix match and next-hop resolution.
    Ip6Lookup,
    /// TTL, MTU, L2 rewrite.
    Ip4Rewrite,
    /// Hop limit, MTU, L2 rewrite.
    Ip6Rewrite,
    /// IPv4 fragmentation.
    Ip4Frag,
    /// IPv6 fragmentation of the router's own packets (it is their source: RFC 8200 §4.5).
    Ip6Frag,
    /// Build ICMPv4 errors.
    Icmp4Error,
    /// Build ICMPv6 errors.
    Icmp6Error,
    /// The `ip4-output` feature arc (see [`crate::feature`]; the input arcs run at the head
    /// of the node they precede, on its whole list).
    Ip4Output,
    /// The `ip6-output` feature arc.
    Ip6Output,
}

/// Number of list-holding nodes.
pub const NODE_COUNT: usize = 11;
/// Dispatch order within a round (topological for the forward path).
pub(crate) const ORDER: [Node; NODE_COUNT] = [
    Node::EthernetInput,
    Node::Icmp4Error,
    Node::Icmp6Error,
    Node::Ip4Lookup,
    Node::Ip6Lookup,
    Node::Ip4Rewrite,
    Node::Ip6Rewrite,
    Node::Ip4Output,
    Node::Ip6Output,
    Node::Ip4Frag,
    Node::Ip6Frag,
];
/// How far ahead ethernet-input prefetches packet headers.
pub(crate) const PREFETCH_AHEAD: usize = 8;
/// A packet can pass lookup at most three times (itself, then encapsulated by a tunnel,
/// then as an ICMP error): 4 rounds suffice.
pub(crate) const MAX_ROUNDS: usize = 4;

impl Node {
    /// Display name.
    pub fn name(self) -> &'static str {
        match self {
            Node::EthernetInput => "ethernet-input",
            Node::Ip4Lookup => "ip4-lookup",
            Node::Ip6Lookup => "ip6-lookup",
            Node::Ip4Rewrite => "ip4-rewrite",
            Node::Ip6Rewrite => "ip6-rewrite",
            Node::Ip4Frag => "ip4-frag",
            Node::Ip6Frag => "ip6-frag",
            Node::Icmp4Error => "icmp4-error",
            Node::Icmp6Error => "icmp6-error",
            Node::Ip4Output => ArcId::Ip4Output.name(),
            Node::Ip6Output => ArcId::Ip6Output.name(),
        }
    }
    /// The node of an output arc (`ip4-output` / `ip6-output`).
    #[inline]
    pub(crate) fn of_output_arc(arc: ArcId) -> Node {
        if arc == ArcId::Ip6Output {
            Node::Ip6Output
        } else {
            Node::Ip4Output
        }
    }
}

/// Per-node pending packet lists (indices into the vector).
pub(crate) struct Frames {
    pub(crate) lists: [[u16; VECTOR_SIZE]; NODE_COUNT],
    pub(crate) lens: [usize; NODE_COUNT],
}

/// Where processed packets go. Every packet of a vector ends in exactly one place: a port's
/// transmit list, or `free` (dropped, punted, or replaced by its fragments).
pub struct Output {
    /// Per-port transmit lists (capacity fixed at creation).
    pub tx: Vec<Vec<Pkt>>,
    /// Buffers to give back to packet memory.
    pub free: Vec<u32>,
}

/// Transmit-list capacity per port: a whole vector plus room for fragments.
pub const TX_CAPACITY: usize = VECTOR_SIZE * 4;

impl Output {
    /// Lists for `ports` ports.
    pub fn new(ports: usize) -> Output {
        Output {
            tx: (0..ports)
                .map(|_| Vec::with_capacity(TX_CAPACITY))
                .collect(),
            free: Vec::with_capacity(TX_CAPACITY * 2),
        }
    }
    /// Empty every list (keeps capacity).
    pub fn clear(&mut self) {
        for t in &mut self.tx {
            t.clear();
        }
        self.free.clear();
    }
    /// Packets waiting in transmit lists.
    pub fn tx_count(&self) -> usize {
        self.tx.iter().map(Vec::len).sum()
    }
}

/// Settings of one graph instance.
#[derive(Clone, Copy, Debug)]
pub struct GraphConfig {
    /// ICMP errors per second per worker.
    pub icmp_rate: u64,
    /// ICMP error burst.
    pub icmp_burst: u64,
    /// ICMP errors to one destination: one per this many nanoseconds...
    pub icmp_peer_interval_ns: u64,
    /// ...and at most this many at once.
    pub icmp_peer_burst: u64,
}

impl Default for GraphConfig {
    fn default() -> Self {
        GraphConfig {
            icmp_rate: 1000,
            icmp_burst: 200,
            // Linux's defaults (net.ipv4.icmp_ratelimit = 1000 ms, XRLIM_BURST_FACTOR 6).
            icmp_peer_interval_ns: 1_000_000_000,
            icmp_peer_burst: 6,
        }
    }
}

/// One worker's forwarding graph and its state.
pub struct Graph {
    pub(crate) fib: FibReader,
    pub(crate) ifaces: Arc<Interfaces>,
    /// Port MACs as integers, for a one-compare destination check.
    pub(crate) port_macs: Vec<u64>,
    /// Index of the first VLAN sub-interface in the port table (its length if none): an
    /// adjacency on a port below it is sent untagged, on that port.
    pub(crate) first_subif: usize,
    /// Sub-interfaces by their tags (also lent to the features).
    subifs: Subifs,
    /// Bit `p`: port `p` is down ([`crate::interfaces::PortInfo::down`]); ports are at most 64.
    tx_down: u64,
    pub(crate) counters: Arc<Counters>,
    pub(crate) icmp_limit: RateLimiter,
    pub(crate) icmp_peers: PeerLimiter,
    /// The clock of the vector being processed (for the per-destination ICMP limit).
    pub(crate) now_ns: u64,
    pub(crate) punt: Option<PuntProducer>,
    pub(crate) frames: Box<Frames>,
    pub(crate) ip_ident: u16,
    /// Count of the router's fragmented IPv6 packets, from a seed of the clock; ip6-frag
    /// sends it through a bijective mix as the identification (no repeat within 2^32
    /// datagrams, and no plain sequence on the wire: RFC 7739).
    pub(crate) frag_id6: u32,
    pub(crate) keys4: Box<[u32; VECTOR_SIZE]>,
    pub(crate) keys6: Box<[[u8; 16]; VECTOR_SIZE]>,
    pub(crate) results: Box<[NextHopId; VECTOR_SIZE]>,
    pub(crate) tracer: Option<Box<Tracer>>,
    pub(crate) capture: Option<Box<Capturer>>,
    /// Which interfaces have which features (published by the control thread).
    feat_state: Arc<FeatureState>,
    /// `feat_state.active()`, read once per vector.
    pub(crate) feat_active: bool,
    /// `feat_state.arcs()`: the arcs with features somewhere.
    feat_arcs: u8,
    /// The port of the vector being processed (its first packet's).
    pub(crate) vec_port: u16,
    /// Some packet of the vector is on another interface than `vec_port` (a VLAN
    /// sub-interface, a packet a port-input feature moved, a vector of packets handed back
    /// by the control thread).
    pub(crate) vec_mixed: bool,
    /// Some locally generated packet (an ICMP error) was handed to a lookup node in this
    /// vector: the unicast arcs, which it must not pass, look at each packet's flags.
    pub(crate) local_lookup: bool,
    /// The feature nodes and their scratch space; taken out while an arc runs.
    feat: Option<Box<feature::Runtime>>,
    /// What holds packets between the graph and the ports (QoS), if anything.
    pub(crate) egress: Option<Box<dyn crate::egress::Egress>>,
}

impl Graph {
    /// A graph reading `fib` (a registered reader: call [`Graph::quiescent`] between
    /// vectors), counting into `counters`, punting into `punt` (if any).
    pub fn new(
        fib: FibReader,
        ifaces: Arc<Interfaces>,
        counters: Arc<Counters>,
        punt: Option<PuntProducer>,
        cfg: GraphConfig,
    ) -> Graph {
        let subifs = Subifs::new(&ifaces);
        Graph {
            first_subif: subifs.first(),
            fib,
            port_macs: macs_of(&ifaces),
            subifs,
            tx_down: down_of(&ifaces),
            ifaces,
            counters,
            icmp_limit: RateLimiter::new(cfg.icmp_rate, cfg.icmp_burst),
            icmp_peers: PeerLimiter::new(cfg.icmp_peer_interval_ns, cfg.icmp_peer_burst),
            now_ns: 0,
            punt,
            frames: Box::new(Frames {
                lists: [[0; VECTOR_SIZE]; NODE_COUNT],
                lens: [0; NODE_COUNT],
            }),
            ip_ident: 1,
            frag_id6: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.subsec_nanos() ^ d.as_secs() as u32),
            keys4: Box::new([0; VECTOR_SIZE]),
            keys6: Box::new([[0; 16]; VECTOR_SIZE]),
            results: Box::new([0; VECTOR_SIZE]),
            tracer: None,
            capture: None,
            feat_state: Arc::new(FeatureState::default()),
            feat_active: false,
            feat_arcs: 0,
            vec_port: 0,
            vec_mixed: false,
            local_lookup: false,
            feat: None,
            egress: None,
        }
    }

    /// Give this graph (worker `worker`) the nodes of `registry`'s features, none enabled
    /// yet (set up, off the hot path).
    pub fn set_features(&mut self, registry: Arc<Registry>, worker: usize) {
        self.feat = Some(Box::new(feature::Runtime::new(&registry, worker)));
        self.set_feature_state(Arc::new(FeatureState::default()));
    }

    /// Enable the features `state` names on its interfaces, and only those (between
    /// vectors: the next vector runs with it). Without [`Graph::set_features`] first, no
    /// feature runs whatever `state` says.
    pub fn set_feature_state(&mut self, state: Arc<FeatureState>) {
        self.feat_active = state.active() && self.feat.is_some();
        self.feat_arcs = state.arcs();
        self.feat_state = state;
    }

    /// Give this graph an egress hook (see [`crate::egress`]), replacing any before.
    pub fn set_egress(&mut self, e: Box<dyn crate::egress::Egress>) {
        self.egress = Some(e);
    }

    /// The egress hook, if any: for what drives a graph without ports (a benchmark from
    /// memory), which hands it the transmit lists as [`crate::worker::flush`] does.
    pub fn egress_mut(&mut self) -> Option<&mut (dyn crate::egress::Egress + 'static)> {
        self.egress.as_deref_mut()
    }

    /// Packets the egress hook holds.
    #[inline]
    pub fn egress_held(&self) -> usize {
        self.egress.as_ref().map_or(0, |e| e.held())
    }

    /// Attach a packet tracer (see [`crate::trace`]).
    pub fn set_tracer(&mut self, t: Tracer) {
        self.tracer = Some(Box::new(t));
    }

    /// Attach a packet capturer (see [`crate::capture`]); [`crate::worker::poll_once`]
    /// feeds it.
    pub fn set_capturer(&mut self, c: Capturer) {
        self.capture = Some(Box::new(c));
    }

    /// Replace the interface table (control plane update between vectors).
    pub fn set_interfaces(&mut self, ifaces: Arc<Interfaces>) {
        self.port_macs = macs_of(&ifaces);
        self.subifs = Subifs::new(&ifaces);
        self.first_subif = self.subifs.first();
        self.tx_down = down_of(&ifaces);
        self.ifaces = ifaces;
    }

    /// Report that the graph holds nothing of the FIB (between vectors): the FIB's writer
    /// may then free what it retired before now.
    pub fn quiescent(&mut self) {
        self.fib.quiescent();
    }

    /// Run `f` (a sleep) with the graph's FIB reader offline: the writer does not wait for
    /// it meanwhile.
    pub fn offline_while<R>(&mut self, f: impl FnOnce() -> R) -> R {
        self.fib.offline_while(f)
    }

    /// The counters this graph writes.
    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    /// Append a step to a traced packet's record (compiled out when `T` is false).
    #[inline(always)]
    pub(crate) fn trace<const T: bool>(&mut self, p: &Pkt, s: Step) {
        if T && p.flags & F_TRACED != 0 {
            if let Some(t) = self.tracer.as_deref_mut() {
                t.step(p, s);
            }
        }
    }

    /// Hand packet `i` to `node`.
    #[inline]
    pub(crate) fn enqueue(&mut self, node: Node, i: u16) {
        let f = &mut self.frames;
        let len = f.lens[node as usize];
        // A list can never exceed the vector size: each packet sits in one list at a time.
        if len < VECTOR_SIZE {
            f.lists[node as usize][len] = i;
            f.lens[node as usize] = len + 1;
        }
    }

    /// Whether some interface has features on `arc`.
    #[inline(always)]
    pub(crate) fn arc_on(&self, arc: ArcId) -> bool {
        self.feat_arcs & (1 << arc as u8) != 0
    }

    /// Whether egress interface `iface` has features on `arc` (false when `F` is).
    #[inline(always)]
    pub(crate) fn has_features<const F: bool>(&self, arc: ArcId, iface: u16) -> bool {
        F && self.feat_state.iface_arcs(iface) & (1 << arc as u8) != 0
    }

    /// Run `arc`'s features over the packets of `list`: each feature, in execution order,
    /// gets those on interfaces that enabled it and not dropped by an earlier one. Returns
    /// `None` when no feature ran (every packet goes on as it is), else the number of
    /// survivors, whose indices are left in `keep` in their order. When every packet is on
    /// the vector's port (the common case), nothing is looked at per packet: the features
    /// get the list as it is.
    #[inline(never)]
    fn run_features<const T: bool, M: PacketMemory>(
        &mut self,
        arc: ArcId,
        v: &mut Vector,
        mem: &mut M,
        out: &mut Output,
        list: &[u16],
        keep: &mut [u16; VECTOR_SIZE],
    ) -> Option<usize> {
        let n = list.len().min(VECTOR_SIZE);
        let output = matches!(arc, ArcId::Ip4Output | ArcId::Ip6Output);
        let unicast = matches!(arc, ArcId::Ip4Unicast | ArcId::Ip6Unicast);
        // Uniform: every packet has the features of `self.vec_port`.
        let uniform = !(output || self.vec_mixed || unicast && self.local_lookup);
        if uniform && self.feat_state.iface_arcs(self.vec_port) & (1 << arc as u8) == 0 {
            return None;
        }
        let mut rt = self.feat.take()?;
        keep[..n].copy_from_slice(&list[..n]);
        let uniform_mask = if uniform {
            self.feat_state.mask(self.vec_port, arc)
        } else {
            for (a, &i) in list[..n].iter().enumerate() {
                let p = &v.pkts[i as usize];
                let iface = if output {
                    match self.fib.next_hop(p.nh) {
                        Some(NextHop::Forward(adj)) => adj.port,
                        _ => p.tx_port,
                    }
                } else {
                    p.rx_port
                };
                // Locally generated packets (ICMP errors) do not pass the unicast arcs.
                rt.masks[a] = if unicast && p.flags & F_LOCAL_ORIGIN != 0 {
                    0
                } else {
                    self.feat_state.mask(iface, arc)
                };
                if let Some(slot) = rt.ifc.get_mut(i as usize) {
                    *slot = iface;
                }
            }
            0
        };
        let mut alive = n;
        for f in 0..rt.arcs[arc as usize].len() {
            let (id, base, ndrops) = rt.arcs[arc as usize][f];
            let fbit = 1u64 << id;
            let rt = &mut *rt;
            // The packets for this feature: all still alive, or gathered.
            let all = uniform && uniform_mask & fbit != 0;
            let k = if uniform {
                if all {
                    alive
                } else {
                    0
                }
            } else {
                let mut k = 0;
                for (a, (&m, &i)) in rt.masks[..alive].iter().zip(&keep[..alive]).enumerate() {
                    if m & fbit != 0 {
                        rt.idx[k] = i;
                        rt.pos[k] = a as u16;
                        k += 1;
                    }
                }
                k
            };
            if k == 0 {
                continue;
            }
            self.counters.feature_add(base, k as u64);
            let idx: &[u16] = if all { &keep[..k] } else { &rt.idx[..k] };
            let ifc = if uniform {
                feature::Ifaces::All(self.vec_port)
            } else {
                feature::Ifaces::ByIndex(&rt.ifc[..])
            };
            {
                let mut cx = FeatureCx {
                    mem: &mut *mem,
                    fib: &self.fib,
                    ifaces: &self.ifaces,
                    subifs: &self.subifs,
                    now_ns: self.now_ns,
                    arc,
                };
                let mut b = feature::batch(&mut v.pkts[..], idx, ifc, &mut rt.drops);
                if let Some(node) = rt.nodes.get_mut(id as usize) {
                    node.process(&mut cx, &mut b);
                }
            }
            if T {
                // Notes first: they tell what the feature did before it passed or dropped.
                for j in 0..rt.drops.notes.len.min(VECTOR_SIZE) {
                    let (bk, a, b) = rt.drops.notes.list[j];
                    let pos = if all {
                        bk as usize
                    } else {
                        rt.pos.get(bk as usize).map_or(usize::MAX, |&x| x as usize)
                    };
                    if let Some(&i) = keep.get(pos) {
                        let p = v.pkts[i as usize];
                        self.trace::<T>(&p, Step::FeatureNote { id, a, b });
                    }
                }
            }
            let nd = rt.drops.len.min(VECTOR_SIZE);
            for d in 0..nd {
                let (bk, r) = rt.drops.list[d];
                let a = if all {
                    bk as usize
                } else {
                    rt.pos[bk as usize] as usize
                };
                // Each position once (`Batch::drop`), so never one dropped already.
                let i = keep[a];
                keep[a] = DEAD;
                let p = v.pkts[i as usize];
                if rt.drops.reply[d] == feature::REPLY_TAKEN {
                    // Sent elsewhere by the feature (a handoff): gone, not dropped.
                    self.trace::<T>(&p, Step::Feature { id, drop: None });
                    out.free.push(p.buf);
                    continue;
                }
                if rt.drops.reply[d] == feature::REPLY_REROUTE {
                    // Encapsulated by the feature: off this arc, routed again.
                    self.trace::<T>(&p, Step::Feature { id, drop: None });
                    self.reroute::<T, M>(v, &*mem, out, i);
                    continue;
                }
                let r = (r as usize).min(ndrops.saturating_sub(1));
                if ndrops > 0 {
                    self.counters.feature_add(base + 1 + r, 1);
                }
                self.counters.add(Reason::FeatureDrop, 1);
                self.trace::<T>(
                    &p,
                    Step::Feature {
                        id,
                        drop: Some(r as u8),
                    },
                );
                match rt.drops.reply[d] {
                    feature::REPLY_NONE => out.free.push(p.buf),
                    reply => self.answer(arc, v, &*mem, i, reply),
                }
            }
            if T {
                // Those it let go on (a dropped one's step is its drop).
                for j in 0..k {
                    let a = if all { j } else { rt.pos[j] as usize };
                    let Some(&i) = keep.get(a).filter(|&&i| i != DEAD) else {
                        continue;
                    };
                    let p = v.pkts[i as usize];
                    self.trace::<T>(&p, Step::Feature { id, drop: None });
                }
            }
            if nd == 0 {
                continue;
            }
            let mut w = 0;
            for a in 0..alive {
                if keep[a] != DEAD {
                    keep[w] = keep[a];
                    rt.masks[w] = rt.masks[a];
                    w += 1;
                }
            }
            alive = w;
        }
        self.feat = Some(rt);
        Some(alive)
    }

    /// Send the reply a feature asked for to rejected packet `i` (see
    /// [`feature::Reply`]): routed back through the lookup as the router's own packet, or
    /// turned into an ICMP error first.
    fn answer<M: PacketMemory>(&mut self, arc: ArcId, v: &mut Vector, mem: &M, i: u16, reply: u32) {
        let v6 = matches!(arc, ArcId::Ip6Unicast | ArcId::Ip6Output);
        let Some(p) = v.pkts.get_mut(i as usize) else {
            return;
        };
        if reply == feature::REPLY_REWRITTEN {
            // ip4-lookup takes the destination from `nh`, where ip4-input left it (ip6-lookup
            // reads the header).
            if !v6 {
                let at = p.off as usize + p.l3 as usize;
                if let Some(d) = mem.frame(p.buf).get(at + 16..at + 20) {
                    p.nh = u32::from_be_bytes([d[0], d[1], d[2], d[3]]);
                }
            }
            // Whatever the packet was marked for (fragmentation, an unverified checksum,
            // the features' notes in `aux`) was about the packet, not its answer.
            p.flags = (p.flags & F_TRACED) | F_LOCAL_ORIGIN;
            p.aux = 0;
            self.local_lookup = true;
            self.enqueue(if v6 { Node::Ip6Lookup } else { Node::Ip4Lookup }, i);
        } else {
            // The error quotes the packet as it is (the error node refuses to answer the
            // router's own packets).
            p.flags &= !F_TO_FRAG;
            p.aux = reply;
            self.enqueue(
                if v6 {
                    Node::Icmp6Error
                } else {
                    Node::Icmp4Error
                },
                i,
            );
        }
    }

    /// Route packet `i` again, as the router's own, by the IP version at its L3 header (a
    /// feature encapsulated it: [`feature::Batch::reroute`]); anything but IPv4 or IPv6
    /// there is dropped.
    fn reroute<const T: bool, M: PacketMemory>(
        &mut self,
        v: &mut Vector,
        mem: &M,
        out: &mut Output,
        i: u16,
    ) {
        let Some(p) = v.pkts.get_mut(i as usize) else {
            return;
        };
        let at = p.off as usize + p.l3 as usize;
        let frame = mem.frame(p.buf);
        let node = match frame.get(at).map(|b| b >> 4) {
            Some(4) => match frame.get(at + 16..at + 20) {
                Some(d) => {
                    // ip4-lookup takes the destination from `nh`.
                    p.nh = u32::from_be_bytes([d[0], d[1], d[2], d[3]]);
                    Node::Ip4Lookup
                }
                None => {
                    let p = *p;
                    return self.drop_pkt::<T>(out, &p, Reason::FeatureDrop);
                }
            },
            Some(6) => Node::Ip6Lookup,
            _ => {
                let p = *p;
                return self.drop_pkt::<T>(out, &p, Reason::FeatureDrop);
            }
        };
        // What the packet was marked for (fragmentation, an unverified checksum) was about
        // the inner packet.
        p.flags = (p.flags & F_TRACED) | F_LOCAL_ORIGIN;
        self.local_lookup = true;
        self.enqueue(node, i);
    }

    /// The `ip4-output` / `ip6-output` node: the features, then port-tx, or ip4-frag for
    /// the packets rewrite marked too big.
    pub(crate) fn output_arc<const T: bool, M: PacketMemory>(
        &mut self,
        arc: ArcId,
        v: &mut Vector,
        mem: &mut M,
        out: &mut Output,
        list: &[u16],
    ) {
        self.capture_virtual_tx(v, &*mem, out, list);
        let mut keep = [0u16; VECTOR_SIZE];
        let list = match self.run_features::<T, M>(arc, v, mem, out, list, &mut keep) {
            Some(n) => &keep[..n],
            None => list,
        };
        for &i in list {
            let p = &mut v.pkts[i as usize];
            if p.flags & F_TO_FRAG != 0 {
                p.flags &= !F_TO_FRAG;
                self.enqueue(
                    if arc == ArcId::Ip6Output {
                        Node::Ip6Frag
                    } else {
                        Node::Ip4Frag
                    },
                    i,
                );
            } else {
                let p = *p;
                self.transmit::<T>(out, p);
            }
        }
    }

    /// Run the input arc `arc` at the head of the node it precedes, over that node's
    /// `list`; what is left for the node.
    #[inline]
    pub(crate) fn input_arc<'a, const T: bool, M: PacketMemory>(
        &mut self,
        arc: ArcId,
        (v, mem, out): (&mut Vector, &mut M, &mut Output),
        list: &'a [u16],
        keep: &'a mut [u16; VECTOR_SIZE],
    ) -> &'a [u16] {
        if !self.arc_on(arc) {
            return list;
        }
        match self.run_features::<T, M>(arc, v, mem, out, list, keep) {
            Some(n) => &keep[..n],
            None => list,
        }
    }

    /// While a capture is armed: the packets of `list` leaving by an interface that is no
    /// port and no VLAN sub-interface (a tunnel's), as they are before its output features
    /// (the clear packet, behind an Ethernet header of no addresses).
    #[inline]
    fn capture_virtual_tx<M: PacketMemory>(
        &mut self,
        v: &Vector,
        mem: &M,
        out: &Output,
        list: &[u16],
    ) {
        self.capture_virtual(v, mem, out, list, true);
    }

    /// While a capture is armed: the packets of `list` now received on an interface that
    /// is no port and no VLAN sub-interface (a tunnel's, after decryption).
    #[cold]
    pub(crate) fn capture_virtual_rx<M: PacketMemory>(
        &mut self,
        v: &Vector,
        mem: &M,
        out: &Output,
        list: &[u16],
    ) {
        self.capture_virtual(v, mem, out, list, false);
    }

    /// [`Graph::capture_virtual_tx`] (`tx`: by the egress interface) and
    /// [`Graph::capture_virtual_rx`] (by the receiving one).
    fn capture_virtual<M: PacketMemory>(
        &mut self,
        v: &Vector,
        mem: &M,
        out: &Output,
        list: &[u16],
        tx: bool,
    ) {
        if !self.capture.as_deref_mut().is_some_and(|c| c.armed()) {
            return;
        }
        for &i in list {
            let p = v.pkts[i as usize];
            let iface = match self.fib.next_hop(p.nh) {
                Some(NextHop::Forward(adj)) if tx => adj.port,
                _ if tx => p.tx_port,
                _ => p.rx_port,
            };
            if !is_virtual(&self.ifaces, iface, out) {
                continue;
            }
            if let Some(c) = self.capture.as_deref_mut() {
                if tx {
                    c.tx(iface, mem, &[p]);
                } else {
                    c.rx(iface, mem, &[p]);
                }
            }
        }
    }

    /// Drop a packet, counted under `r`.
    #[inline]
    pub(crate) fn drop_pkt<const T: bool>(&mut self, out: &mut Output, p: &Pkt, r: Reason) {
        self.trace::<T>(p, Step::Drop(r));
        self.counters.add(r, 1);
        out.free.push(p.buf);
    }

    /// Copy a packet to the punt queue (or drop if full), counted under `r`.
    pub(crate) fn punt<const T: bool, M: PacketMemory>(
        &mut self,
        mem: &M,
        out: &mut Output,
        p: &Pkt,
        r: Reason,
    ) {
        out.free.push(p.buf);
        // A frame an AF_XDP port took from the kernel cannot be given back to it; only the
        // signal of an unresolved next hop is still worth queueing (the control thread
        // resolves it).
        if r != Reason::PuntUnresolved
            && self.ifaces.port(p.rx_port).map(|x| x.punt_path) == Some(PuntPath::Unreachable)
        {
            self.counters.add(Reason::PuntNoKernelPath, 1);
            self.trace::<T>(p, Step::Drop(Reason::PuntNoKernelPath));
            return;
        }
        let Some(q) = self.punt.as_mut() else {
            self.counters.add(r, 1);
            self.trace::<T>(p, Step::Punt(r));
            return;
        };
        if q.is_full() {
            self.counters.add(Reason::PuntQueueFull, 1);
            self.trace::<T>(p, Step::Drop(Reason::PuntQueueFull));
            return;
        }
        let src = crate::buffer::pkt_bytes(mem, p);
        let mut pp = PuntPacket {
            port: p.rx_port,
            reason: r,
            len: 0,
            data: [0; MAX_FRAME],
        };
        if let Some(d) = pp.data.get_mut(..src.len()) {
            d.copy_from_slice(src);
            pp.len = src.len() as u16;
        }
        if q.push(pp).is_ok() {
            self.counters.add(r, 1);
            self.trace::<T>(p, Step::Punt(r));
        } else {
            self.counters.add(Reason::PuntQueueFull, 1);
            self.trace::<T>(p, Step::Drop(Reason::PuntQueueFull));
        }
    }

    /// Queue a rewritten packet on its port.
    #[inline]
    pub(crate) fn transmit<const T: bool>(&mut self, out: &mut Output, p: Pkt) {
        if self.tx_down != 0 && p.tx_port < 64 && self.tx_down & (1u64 << p.tx_port) != 0 {
            return self.drop_pkt::<T>(out, &p, Reason::TxPortDown);
        }
        match out.tx.get_mut(p.tx_port as usize) {
            Some(q) if q.len() < q.capacity() => {
                q.push(p);
                self.trace::<T>(&p, Step::Tx { port: p.tx_port });
            }
            Some(_) => self.drop_pkt::<T>(out, &p, Reason::TxQueueFull),
            None => self.drop_pkt::<T>(out, &p, Reason::NoSuchPort),
        }
    }

    /// The sub-interface a tagged `frame` received on `rx_port` belongs to, by its tags
    /// (VLAN ids only: priority and DEI bits do not matter). `rx_port` may already be a
    /// sub-interface (a packet held for its next hop and sent through again): its parent's
    /// table is searched. The tags are read by `parse_l2` again here rather than carried
    /// from ethernet-input: carrying them cost every untagged packet 9-12 instructions
    /// (callgrind).
    #[cold]
    #[inline(never)]
    pub(crate) fn subif_of(&self, rx_port: u16, frame: &[u8]) -> Option<u16> {
        self.subifs.of(&self.ifaces, rx_port, frame)
    }

    /// Where a frame for `adj` leaves: its port, untagged; a sub-interface's frames leave by
    /// its parent, with its tags.
    #[inline]
    pub(crate) fn egress(&self, adj: &fib::Adjacency) -> (u16, Option<VlanTags>) {
        if (adj.port as usize) < self.first_subif {
            (adj.port, None)
        } else {
            self.subif_egress(adj.port)
        }
    }

    /// Count a frame of `bytes` sent from sub-interface `port`.
    #[cold]
    #[inline(never)]
    pub(crate) fn subif_sent(&self, port: u16, bytes: usize) {
        if let Some(k) = (port as usize).checked_sub(self.first_subif) {
            self.counters.subif_tx(k, bytes as u64);
        }
    }

    #[cold]
    #[inline(never)]
    fn subif_egress(&self, port: u16) -> (u16, Option<VlanTags>) {
        match self.ifaces.port(port).and_then(|p| p.vlan) {
            Some(t) => (t.parent, Some(t)),
            None => (port, None),
        }
    }

    /// Trace a forwarding lookup result.
    #[cold]
    pub(crate) fn trace_forward<const T: bool>(&mut self, p: &Pkt, v6: bool, nh: NextHopId) {
        let port = match self.fib.next_hop(nh) {
            Some(NextHop::Forward(a)) => a.port,
            _ => u16::MAX,
        };
        self.trace::<T>(p, Step::Lookup { v6, nh, port });
    }

    /// Turn a lookup result into a disposition, resolving ECMP with the flow hash (computed
    /// only for groups). `None` = no route.
    #[inline]
    pub(crate) fn resolve(&self, id: NextHopId, hash: impl FnOnce() -> u32) -> Option<Resolved> {
        if id == MISS {
            return None;
        }
        let mut id = id;
        let mut nh = self.fib.next_hop(id)?;
        if let NextHop::Ecmp(_) = nh {
            id = self.fib.resolve(id, hash());
            nh = self.fib.next_hop(id)?;
        }
        Some(match nh {
            NextHop::Forward(_) => Resolved::Forward(id),
            NextHop::Drop => Resolved::Drop,
            NextHop::Local => Resolved::Local,
            NextHop::Glean { .. } => Resolved::Glean,
            // A group member that is itself a group is rejected by the FIB writer.
            NextHop::Ecmp(_) => Resolved::Drop,
        })
    }
}

/// What a lookup result means for a packet.
pub(crate) enum Resolved {
    Forward(NextHopId),
    Drop,
    Local,
    Glean,
}

/// Write the Ethernet header toward `adj` into `eth` (14 bytes, or 14 plus the tags):
/// destination, source, the tags if any, `ethertype`.
#[inline]
pub(crate) fn write_eth(
    eth: &mut [u8],
    adj: &fib::Adjacency,
    tags: Option<VlanTags>,
    ethertype: u16,
    pcp: u8,
) {
    if eth.len() < 14 {
        return;
    }
    eth[0..6].copy_from_slice(&adj.dst_mac);
    eth[6..12].copy_from_slice(&adj.src_mac);
    let at = match tags {
        Some(t) => {
            t.write(&mut eth[12..], pcp);
            12 + t.len()
        }
        None => 12,
    };
    if let Some(e) = eth.get_mut(at..at + 2) {
        e.copy_from_slice(&ethertype.to_be_bytes());
    }
}

/// Whether `iface` is neither a port (it has a transmit list) nor a VLAN sub-interface:
/// a tunnel interface.
fn is_virtual(ifaces: &Interfaces, iface: u16, out: &Output) -> bool {
    iface as usize >= out.tx.len() && ifaces.port(iface).is_some_and(|p| p.vlan.is_none())
}

/// The ports that are down, as a mask (bit `p` for port `p` below 64).
fn down_of(ifaces: &Interfaces) -> u64 {
    ifaces
        .ports
        .iter()
        .enumerate()
        .filter(|(i, p)| p.down && *i < 64)
        .fold(0, |m, (i, _)| m | 1u64 << i)
}

fn macs_of(ifaces: &Interfaces) -> Vec<u64> {
    ifaces
        .ports
        .iter()
        .map(|p| {
            u64::from_le_bytes([
                p.mac[0], p.mac[1], p.mac[2], p.mac[3], p.mac[4], p.mac[5], 0, 0,
            ])
        })
        .collect()
}

/// Murmur3's 32-bit finaliser: cheap, and every input bit affects every output bit, so
/// ECMP spreads flows evenly whatever the address plan.
#[inline]
pub(crate) fn mix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}
