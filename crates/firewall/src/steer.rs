//! Flow steering between workers: `ip4-handoff` and `ip6-handoff`, the first features of
//! the unicast arcs when several workers keep flow state (connection tracking, NAT). Each
//! worker's tables hold the flows it owns; a packet received by another worker is handed
//! to the owner ([`dataplane::handoff`]), which pushes it through its graph as received.
//!
//! **Who owns a flow.** A function of the packet alone (and the published NAT rules), the
//! same for both directions of a flow, so that every worker computes the same owner:
//!
//! 1. An ICMP or ICMPv6 error belongs to the flow it quotes, seen the other way.
//! 2. A port forward (a NAT destination rule matching the packet) belongs to the flow as
//!    translated: rule 4 applied to the client and the inside address.
//! 3. A packet to one of NAT's external addresses (the router's own addresses, which
//!    masquerade uses, and the source rules' pools) whose destination port or echo
//!    identifier lies in the range the workers share out (1024-65535) is a reply to a
//!    translated flow: it belongs to the worker whose port slice holds that port, the one
//!    that gave the port out ([`crate::nat::table`]).
//! 4. Otherwise a hash of the two addresses, symmetric. With NAT's source rules naming
//!    inside prefixes, an address pair with exactly one inside address hashes that address
//!    alone: every flow of an inside host then has one owner, and so one external
//!    mapping (RFC 4787's endpoint-independent mapping holds across workers), and paired
//!    pooling one external address.
//!
//! Ports are not hashed (the addresses are), so later fragments, which carry none, go
//! where their flow goes. Where rules 2 and 3 used the first fragment's ports, it leaves a
//! hint (source, destination, protocol, IP id) for its later fragments in a small table
//! all workers share (direct mapped: a collision forgets the older hint, and a later
//! fragment without its hint goes by rule 4, counted as `frag_unhinted`).
//!
//! A packet that came from another worker ([`F_HANDED_OFF`]) is never handed on, so a
//! config change between two workers' decisions cannot bounce it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dataplane::buffer::{F_CSUM_UNKNOWN, F_HANDED_OFF};
use dataplane::feature::{ArcId, Batch, Feature, FeatureCx, FeatureNode, FeatureSpec};
use dataplane::handoff::{HandoffTx, SendError};
use dataplane::interfaces::OwnAddrs;

use crate::nat::rewrite::{self, Frag};
use crate::nat::table::{mix, proto, Key4, PORT_MIN};
use crate::nat::{NatRules, NatShared};

/// The features' names.
pub const NAMES: [&str; 2] = ["ip4-handoff", "ip6-handoff"];

/// Drop reasons of the handoff features.
pub mod drop {
    /// The lane to the owner was full.
    pub const QUEUE_FULL: u8 = 0;
    /// The frame does not fit a lane slot.
    pub const TOO_BIG: u8 = 1;
}

const DROPS: &[(&str, &str)] = &[
    (
        "handoff_queue_full",
        "the lane to the worker that owns the packet's flow was full (that worker is behind)",
    ),
    (
        "handoff_too_big",
        "a frame bigger than a handoff lane's slots",
    ),
];

/// Fragment hints: entries of the shared table (a power of two).
const HINTS: usize = 4096;

/// One worker's steering counters (single writer: that worker).
#[derive(Debug, Default)]
pub struct WorkerCounters {
    /// Packets it handed to other workers.
    pub handed_off: AtomicU64,
    /// Packets other workers handed to it, taken into its graph.
    pub received: AtomicU64,
    /// Packets handed to it that found no free frame in its packet memory.
    pub no_buffer: AtomicU64,
    /// Later fragments with no hint from their first fragment (steered by addresses).
    pub frag_unhinted: AtomicU64,
    /// Packets it kept because its sending side was not available (a bug if ever seen).
    pub unsteered: AtomicU64,
}

/// The workers' steering counters, summed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SteerStats {
    /// Packets handed from one worker to another.
    pub handed_off: u64,
    /// Handed-off packets taken by their owner.
    pub received: u64,
    /// Handed-off packets the owner had no frame for.
    pub no_buffer: u64,
    /// Later fragments steered without their first fragment's hint.
    pub frag_unhinted: u64,
    /// Packets kept by a worker whose sending side was missing.
    pub unsteered: u64,
}

/// Steering's state, shared by the workers' nodes and the control thread.
pub struct Steering {
    workers: usize,
    nat: Arc<NatShared>,
    /// Each worker's sending sides, one for its ip4 node and one for its ip6 node, taken
    /// by the nodes as the workers start.
    senders: std::sync::Mutex<Vec<[Option<HandoffTx>; 2]>>,
    /// Fragment hints: `tag << 8 | owner + 1`, 0 empty.
    hints: Box<[AtomicU64]>,
    counters: Vec<WorkerCounters>,
}

impl Default for Steering {
    /// One worker: nothing to steer.
    fn default() -> Steering {
        Steering::new(Vec::new(), Arc::new(NatShared::default()))
    }
}

impl Steering {
    /// Steering between the workers of `senders` (two sending sides per worker, as
    /// [`dataplane::handoff::mesh_with`] makes them: for its ip4 and its ip6 node), with
    /// NAT's rules from `nat`.
    pub fn new(senders: Vec<Vec<HandoffTx>>, nat: Arc<NatShared>) -> Steering {
        let workers = senders.len().max(1);
        Steering {
            workers,
            nat,
            senders: std::sync::Mutex::new(
                senders
                    .into_iter()
                    .map(|v| {
                        let mut it = v.into_iter();
                        [it.next(), it.next()]
                    })
                    .collect(),
            ),
            hints: (0..HINTS).map(|_| AtomicU64::new(0)).collect(),
            counters: (0..workers).map(|_| WorkerCounters::default()).collect(),
        }
    }

    /// Workers steered between.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Worker `w`'s counters (the daemon counts what its worker receives there).
    pub fn counters(&self, w: usize) -> Option<&WorkerCounters> {
        self.counters.get(w)
    }

    /// The counters, summed over the workers.
    pub fn stats(&self) -> SteerStats {
        let mut s = SteerStats::default();
        for c in &self.counters {
            s.handed_off += c.handed_off.load(Ordering::Relaxed);
            s.received += c.received.load(Ordering::Relaxed);
            s.no_buffer += c.no_buffer.load(Ordering::Relaxed);
            s.frag_unhinted += c.frag_unhinted.load(Ordering::Relaxed);
            s.unsteered += c.unsteered.load(Ordering::Relaxed);
        }
        s
    }

    /// The two features over `shared`, to register.
    pub fn features(shared: &Arc<Steering>) -> Vec<Arc<dyn Feature>> {
        [false, true]
            .into_iter()
            .map(|v6| {
                Arc::new(HandoffFeature {
                    v6,
                    shared: shared.clone(),
                }) as Arc<dyn Feature>
            })
            .collect()
    }

    fn hint_slot(src: u32, dst: u32, proto: u8, id: u16) -> (usize, u64) {
        let h = mix(
            u64::from(src) << 32 | u64::from(dst),
            (u64::from(id) << 8 | u64::from(proto)) ^ K_HINT,
        );
        ((h as usize) & (HINTS - 1), h >> 16)
    }

    fn hint_put(&self, src: u32, dst: u32, proto: u8, id: u16, owner: usize) {
        let (i, tag) = Self::hint_slot(src, dst, proto, id);
        if let Some(e) = self.hints.get(i) {
            e.store(tag << 8 | (owner as u64 + 1), Ordering::Relaxed);
        }
    }

    fn hint_get(&self, src: u32, dst: u32, proto: u8, id: u16) -> Option<usize> {
        let (i, tag) = Self::hint_slot(src, dst, proto, id);
        let v = self.hints.get(i)?.load(Ordering::Relaxed);
        (v != 0 && v >> 8 == tag).then(|| (v & 0xff) as usize - 1)
    }
}

/// Odd multipliers of the steering hashes (NAT's multiply-fold `mix`), distinct from the
/// tables' seeds so that an owner's table does not see only part of its buckets.
const K_PAIR: u64 = 0x9e37_79b9_7f4a_7c15;
const K_ONE: u64 = 0xc2b2_ae3d_27d4_eb4f;
const K_HINT: u64 = 0x1656_67b1_9e37_79f9;

/// A worker out of `workers` for hash `h` (multiply-shift: no division).
#[inline]
fn pick(h: u64, workers: usize) -> usize {
    (((h >> 32) * workers as u64) >> 32) as usize
}

/// The worker whose NAT port slice holds `port` ([`crate::nat::table`]'s split).
#[inline]
pub fn slice_owner(port: u16, workers: usize) -> usize {
    let w = workers.clamp(1, 64) as u32;
    let span = (65536 - u32::from(PORT_MIN)) / w;
    ((u32::from(port).saturating_sub(u32::from(PORT_MIN)) / span).min(w - 1)) as usize
}

/// What the IPv4 owner function reads of the published state.
pub struct Policy4<'a> {
    /// Workers.
    pub workers: usize,
    /// NAT's rules, when NAT is active.
    pub nat: Option<&'a NatRules>,
    /// The router's addresses.
    pub own: &'a OwnAddrs,
}

impl Policy4<'_> {
    /// Rule 4: the owner of a flow between `a` and `b`.
    #[inline]
    pub fn pair(&self, a: u32, b: u32) -> usize {
        if let Some(r) = self.nat {
            let (ia, ib) = (r.is_inside(a), r.is_inside(b));
            if ia != ib {
                let one = if ia { a } else { b };
                return pick(mix(u64::from(one), K_ONE), self.workers);
            }
        }
        let (lo, hi) = if a < b { (a, b) } else { (b, a) };
        pick(
            mix(u64::from(lo) << 32 | u64::from(hi), K_PAIR),
            self.workers,
        )
    }

    /// The owner of a flow of tuple `k` arriving on `iface` (rules 2-4), and whether the
    /// ports decided it (rules 2 and 3: later fragments need a hint).
    #[inline]
    pub fn flow(&self, iface: u16, k: &Key4, ported: bool) -> (usize, bool) {
        if let Some(r) = self.nat {
            if let Some((_, (to, _))) = r.dnat_for(iface, k) {
                return (self.pair(k.src, to), true);
            }
            if ported && k.dport >= PORT_MIN && (self.own.contains4(k.dst) || r.is_external(k.dst))
            {
                return (slice_owner(k.dport, self.workers), true);
            }
        }
        (self.pair(k.src, k.dst), false)
    }
}

/// What the owner function decided for one IPv4 packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner4 {
    /// This worker.
    Is(usize),
    /// A later fragment: the hint of its first fragment, if any (else rule 4 on its
    /// addresses).
    Later {
        /// Rule 4 on its addresses.
        fallback: usize,
        /// Its datagram.
        datagram: Datagram,
    },
    /// A first fragment steered by its ports: its later fragments need this hint.
    FirstHinted(usize, Datagram),
}

/// What the fragments of one datagram share: source, destination, protocol, IP id.
pub type Datagram = (u32, u32, u8, u16);

fn datagram(p: &rewrite::Packet4) -> Datagram {
    (p.key.src, p.key.dst, p.key.proto, p.id)
}

/// ICMP error types (they quote the packet they are about).
fn icmp4_error(t: u8) -> bool {
    matches!(t, 3 | 4 | 5 | 11 | 12)
}

/// The owner of the IPv4 packet `ip` (from its header) arriving on `iface`; `None` for a
/// packet too short to read (its worker keeps it and drops it later).
pub fn owner4(pol: &Policy4<'_>, iface: u16, ip: &[u8]) -> Option<Owner4> {
    let p = rewrite::parse(ip).ok()?;
    if p.frag == Frag::Later {
        return Some(Owner4::Later {
            fallback: pol.pair(p.key.src, p.key.dst),
            datagram: datagram(&p),
        });
    }
    if p.key.proto == proto::ICMP && icmp4_error(p.icmp_type) {
        return Some(match p.error {
            // The quoted packet went out from one end of the flow; the error comes back
            // to that end as a reply would.
            Some(q) => Owner4::Is(pol.flow(iface, &q.key.reversed(), true).0),
            // Too short to name its ports (or itself fragmented): its addresses.
            None => {
                let at = p.ihl + 8;
                let a = ip.get(at + 12..at + 16).and_then(|b| b.try_into().ok());
                let b = ip.get(at + 16..at + 20).and_then(|b| b.try_into().ok());
                match (a, b) {
                    (Some(a), Some(b)) => {
                        Owner4::Is(pol.pair(u32::from_be_bytes(a), u32::from_be_bytes(b)))
                    }
                    _ => Owner4::Is(pol.pair(p.key.src, p.key.dst)),
                }
            }
        });
    }
    let ported = matches!(p.key.proto, proto::TCP | proto::UDP) || p.is_echo();
    let (w, by_ports) = pol.flow(iface, &p.key, ported);
    Some(if by_ports && p.frag == Frag::First {
        Owner4::FirstHinted(w, datagram(&p))
    } else {
        Owner4::Is(w)
    })
}

/// An IPv6 address folded to 64 bits.
#[inline]
fn fold6(a: &[u8]) -> Option<u64> {
    let hi = u64::from_be_bytes(a.get(..8)?.try_into().ok()?);
    let lo = u64::from_be_bytes(a.get(8..16)?.try_into().ok()?);
    Some(hi ^ lo.rotate_left(32))
}

#[inline]
fn pair6(a: u64, b: u64, workers: usize) -> usize {
    let (lo, hi) = if a < b { (a, b) } else { (b, a) };
    pick(mix(lo ^ hi.rotate_left(32), K_PAIR ^ hi), workers)
}

/// The owner of the IPv6 packet `ip` (from its header): a hash of its two addresses,
/// symmetric; an ICMPv6 error (directly after the fixed header) by the addresses of the
/// packet it quotes. `None` for a packet too short to read.
pub fn owner6(ip: &[u8], workers: usize) -> Option<usize> {
    let src = fold6(ip.get(8..24)?)?;
    let dst = fold6(ip.get(24..40)?)?;
    // ICMPv6 errors are types 1-127 (RFC 4443); the quoted header follows 8 bytes in.
    if ip.get(6) == Some(&58) && ip.get(40).is_some_and(|&t| t < 128) {
        if let (Some(a), Some(b)) = (
            ip.get(48 + 8..48 + 24).and_then(fold6),
            ip.get(48 + 24..48 + 40).and_then(fold6),
        ) {
            return Some(pair6(a, b, workers));
        }
    }
    Some(pair6(src, dst, workers))
}

/// `ip4-handoff` or `ip6-handoff`.
struct HandoffFeature {
    v6: bool,
    shared: Arc<Steering>,
}

impl Feature for HandoffFeature {
    fn spec(&self) -> FeatureSpec {
        let (name, arc, before): (&'static str, ArcId, &'static [&'static str]) = if self.v6 {
            (
                NAMES[1],
                ArcId::Ip6Unicast,
                &["ip6-urpf-strict", "ip6-urpf-loose", "ip6-filter-ingress"],
            )
        } else {
            (
                NAMES[0],
                ArcId::Ip4Unicast,
                &[
                    "ip4-urpf-strict",
                    "ip4-urpf-loose",
                    "ip4-nat-reply",
                    "ip4-filter-ingress",
                    "ip4-nat-in",
                ],
            )
        };
        FeatureSpec {
            name,
            arc,
            before,
            after: &[],
            drops: DROPS,
        }
    }

    fn node(&self, worker: usize) -> Box<dyn FeatureNode> {
        Box::new(HandoffNode {
            v6: self.v6,
            worker,
            shared: self.shared.clone(),
            tx: self
                .shared
                .senders
                .lock()
                .ok()
                .and_then(|mut s| s.get_mut(worker)?[usize::from(self.v6)].take()),
        })
    }
}

struct HandoffNode {
    v6: bool,
    worker: usize,
    shared: Arc<Steering>,
    tx: Option<HandoffTx>,
}

impl FeatureNode for HandoffNode {
    fn process(&mut self, cx: &mut FeatureCx<'_>, b: &mut Batch<'_>) {
        let sh = &*self.shared;
        let workers = sh.workers;
        let Some(counters) = sh.counters.get(self.worker) else {
            return;
        };
        if workers < 2 {
            return;
        }
        let Some(tx) = self.tx.as_mut() else {
            counters
                .unsteered
                .fetch_add(b.len() as u64, Ordering::Relaxed);
            return;
        };
        let rules = sh.nat.active().then(|| sh.nat.rules.load());
        let pol = Policy4 {
            workers,
            nat: rules.as_deref().map(|r| &**r),
            own: &cx.ifaces.own,
        };
        let mut sent = 0u64;
        let mut unhinted = 0u64;
        for k in 0..b.len() {
            let Some(p) = b.pkt(k).copied() else { continue };
            if p.flags & F_HANDED_OFF != 0 {
                continue;
            }
            let at = usize::from(p.off);
            let Some(bytes) = cx.mem.frame(p.buf).get(at..at + usize::from(p.len)) else {
                continue;
            };
            let Some(ip) = bytes.get(usize::from(p.l3)..) else {
                continue;
            };
            let owner = if self.v6 {
                owner6(ip, workers)
            } else {
                match owner4(&pol, b.iface(k), ip) {
                    None => None,
                    Some(Owner4::Is(w)) => Some(w),
                    Some(Owner4::FirstHinted(w, (src, dst, proto, id))) => {
                        sh.hint_put(src, dst, proto, id, w);
                        Some(w)
                    }
                    Some(Owner4::Later {
                        fallback,
                        datagram: (src, dst, proto, id),
                    }) => Some(sh.hint_get(src, dst, proto, id).unwrap_or_else(|| {
                        unhinted += 1;
                        fallback
                    })),
                }
            };
            let Some(owner) = owner.filter(|&w| w != self.worker) else {
                continue;
            };
            match tx.send(owner, p.rx_port, p.flags & F_CSUM_UNKNOWN, bytes) {
                Ok(()) => {
                    sent += 1;
                    b.take(k);
                }
                Err(SendError::Full) | Err(SendError::NoLane) => b.drop(k, drop::QUEUE_FULL),
                Err(SendError::TooBig) => b.drop(k, drop::TOO_BIG),
            }
        }
        if sent != 0 {
            counters.handed_off.fetch_add(sent, Ordering::Relaxed);
            // Owners asleep in poll(2) wake now, not at their timeout.
            tx.ring();
        }
        if unhinted != 0 {
            counters
                .frag_unhinted
                .fetch_add(unhinted, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nat::config::NatConfig;
    use crate::nat::table::{NatTable, Pool, Timeouts};
    use crate::nat::tests::{a, key, packet};
    use proptest::prelude::*;

    const LAN: u16 = 0;
    const WAN: u16 = 1;
    const WAN_ADDR: &str = "203.0.113.1";

    fn rules(text: &str) -> NatRules {
        let cfg: NatConfig = toml::from_str(text).unwrap();
        NatRules::compile(&cfg, &["lan".into(), "wan".into()]).unwrap()
    }

    /// Masquerade of 10/8 out of wan, a port forward of wan:8080 to 10.0.0.2:80.
    fn home() -> NatRules {
        rules(
            r#"
            [[source]]
            outbound_interface = "wan"
            source = ["10.0.0.0/8"]
            translation = "masquerade"

            [[destination]]
            destination = ["203.0.113.1"]
            protocol = "tcp"
            destination_port = 8080
            translation_address = "10.0.0.2"
            translation_port = 80
            "#,
        )
    }

    fn own() -> OwnAddrs {
        OwnAddrs::new([WAN_ADDR.parse().unwrap(), "10.0.0.1".parse().unwrap()])
    }

    fn owner(pol: &Policy4<'_>, iface: u16, pkt: &[u8]) -> usize {
        match owner4(pol, iface, pkt).unwrap() {
            Owner4::Is(w) | Owner4::FirstHinted(w, _) => w,
            Owner4::Later { fallback, .. } => fallback,
        }
    }

    /// An ICMP port unreachable from `from` to `to`, quoting `sent`.
    fn unreachable(from: u32, to: u32, sent: &[u8]) -> Vec<u8> {
        let mut e = vec![0u8; 28 + sent.len()];
        e[0] = 0x45;
        let total = e.len() as u16;
        e[2..4].copy_from_slice(&total.to_be_bytes());
        e[9] = proto::ICMP;
        e[12..16].copy_from_slice(&from.to_be_bytes());
        e[16..20].copy_from_slice(&to.to_be_bytes());
        e[20] = 3;
        e[21] = 3;
        e[28..].copy_from_slice(sent);
        e
    }

    #[test]
    fn port_slices_match_the_nat_tables() {
        for workers in 1..=9usize {
            for w in 0..workers {
                let t = NatTable::new(1024, w, workers, &Timeouts::default());
                let (lo, hi) = t.port_range();
                for p in [lo, lo + 1, (lo / 2 + hi / 2), hi - 1, hi] {
                    assert_eq!(slice_owner(p, workers), w, "{workers} workers, port {p}");
                }
            }
        }
        // Ports below the shared range, and above a remainder, stay in range.
        assert_eq!(slice_owner(80, 2), 0);
        assert_eq!(slice_owner(65535, 64), 63);
    }

    #[test]
    fn without_nat_both_directions_and_errors_have_one_owner_and_workers_share() {
        let o = own();
        let pol = Policy4 {
            workers: 2,
            nat: None,
            own: &o,
        };
        let mut seen = [0usize; 2];
        for i in 0..200u32 {
            let f = key("192.0.2.1", 1000, "198.51.100.1", 80, proto::TCP);
            let f = Key4 {
                src: f.src + i,
                sport: 1000 + i as u16,
                ..f
            };
            let w = owner(&pol, LAN, &packet(&f, b"x", 0));
            assert_eq!(owner(&pol, WAN, &packet(&f.reversed(), b"y", 0)), w);
            // An error about the forward packet, from a router on the way, to its source.
            let e = unreachable(a("192.0.2.254"), f.src, &packet(&f, b"x", 0));
            assert_eq!(owner(&pol, LAN, &e), w, "error {i}");
            // Fragments go by addresses, as the whole flow does.
            assert_eq!(owner(&pol, LAN, &packet(&f, b"x", 0x2000)), w);
            assert_eq!(owner(&pol, LAN, &packet(&f, b"x", 0x0010)), w);
            seen[w] += 1;
        }
        assert!(seen[0] > 50 && seen[1] > 50, "spread: {seen:?}");
    }

    #[test]
    fn a_masqueraded_flow_and_its_replies_meet_at_the_worker_that_gave_out_the_port() {
        let r = home();
        let o = own();
        for workers in [2usize, 3, 4] {
            let pol = Policy4 {
                workers,
                nat: Some(&r),
                own: &o,
            };
            let mut tables: Vec<NatTable> = (0..workers)
                .map(|w| NatTable::new(4096, w, workers, &Timeouts::default()))
                .collect();
            let pool = [(a(WAN_ADDR), a(WAN_ADDR))];
            for i in 0..300u32 {
                let f = Key4 {
                    src: a("10.0.1.0") + i % 50,
                    sport: 40000 + i as u16,
                    dst: a("198.51.100.0") + i % 7,
                    dport: 443,
                    proto: if i % 3 == 0 { proto::UDP } else { proto::TCP },
                };
                let w = owner(&pol, LAN, &packet(&f, b"x", 0));
                // Every flow of an inside host has one owner: one mapping per endpoint.
                let again = Key4 {
                    dst: f.dst + 100,
                    dport: 53,
                    ..f
                };
                assert_eq!(owner(&pol, LAN, &packet(&again, b"x", 0)), w);
                let id = tables[w]
                    .create_snat(f, Pool { ranges: &pool }, 0, 1_000_000_000)
                    .unwrap();
                let t = tables[w].get(id).unwrap().t;
                let reply = packet(&t.reversed(), b"y", 0);
                assert_eq!(owner(&pol, WAN, &reply), w, "{workers} workers, flow {i}");
                // An error about what left, from a router outside, comes back to it too.
                let e = unreachable(a("198.18.0.1"), t.src, &packet(&t, b"x", 0));
                assert_eq!(owner(&pol, WAN, &e), w);
            }
        }
    }

    #[test]
    fn echo_replies_follow_their_translated_identifier() {
        let r = home();
        let o = own();
        let pol = Policy4 {
            workers: 4,
            nat: Some(&r),
            own: &o,
        };
        let mut req = key("10.0.0.9", 7, "198.51.100.1", 7, proto::ICMP);
        let w = owner(&pol, LAN, &packet(&req, b"ping", 0));
        let mut t = NatTable::new(1024, w, 4, &Timeouts::default());
        let pool = [(a(WAN_ADDR), a(WAN_ADDR))];
        let id = t.create_snat(req, Pool { ranges: &pool }, 0, 1).unwrap();
        let out = t.get(id).unwrap().t;
        // The reply: type 0 from the remote, the translated identifier in both ports.
        req = out.reversed();
        let mut reply = packet(&req, b"ping", 0);
        reply[20] = 0;
        assert_eq!(owner(&pol, WAN, &reply), w);
    }

    #[test]
    fn a_port_forward_and_its_replies_meet_at_one_worker_even_hairpinned() {
        let r = home();
        let o = own();
        for workers in [2usize, 3, 5] {
            let pol = Policy4 {
                workers,
                nat: Some(&r),
                own: &o,
            };
            for i in 0..200u32 {
                let client = a("198.51.100.0") + i;
                let fwd = Key4 {
                    src: client,
                    sport: 30000 + i as u16,
                    dst: a(WAN_ADDR),
                    dport: 8080,
                    proto: proto::TCP,
                };
                let w = owner(&pol, WAN, &packet(&fwd, b"GET", 0));
                let back = Key4 {
                    src: a("10.0.0.2"),
                    sport: 80,
                    dst: client,
                    dport: fwd.sport,
                    proto: proto::TCP,
                };
                assert_eq!(owner(&pol, LAN, &packet(&back, b"200", 0)), w);
                // A later fragment of the forward direction finds its first's hint.
                let first = packet(&fwd, b"GET", 0x2000);
                assert!(matches!(
                    owner4(&pol, WAN, &first),
                    Some(Owner4::FirstHinted(x, _)) if x == w
                ));
            }
            // Hairpinned: an inside client to the public address.
            let inside = Key4 {
                src: a("10.0.0.77"),
                sport: 5555,
                dst: a(WAN_ADDR),
                dport: 8080,
                proto: proto::TCP,
            };
            let w = owner(&pol, LAN, &packet(&inside, b"GET", 0));
            assert_eq!(w, pol.pair(a("10.0.0.77"), a("10.0.0.2")));
        }
    }

    #[test]
    fn fragment_hints_are_found_by_their_datagram_only() {
        let nat = Arc::new(NatShared::default());
        let s = Steering::new(Vec::new(), nat);
        s.hint_put(1, 2, 6, 77, 3);
        assert_eq!(s.hint_get(1, 2, 6, 77), Some(3));
        assert_eq!(s.hint_get(1, 2, 6, 78), None);
        assert_eq!(s.hint_get(2, 1, 6, 77), None);
        s.hint_put(1, 2, 6, 77, 0);
        assert_eq!(s.hint_get(1, 2, 6, 77), Some(0));
    }

    fn ip6(src: [u8; 16], dst: [u8; 16], next: u8, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
        p[6] = next;
        p[8..24].copy_from_slice(&src);
        p[24..40].copy_from_slice(&dst);
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn ipv6_flows_and_their_errors_have_one_owner() {
        let mut seen = [0usize; 3];
        for i in 0..120u8 {
            let mut x = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
            let y = [0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, i];
            x[14] = i;
            let fwd = ip6(x, y, 6, &[0; 20]);
            let w = owner6(&fwd, 3).unwrap();
            assert_eq!(owner6(&ip6(y, x, 6, &[0; 20]), 3), Some(w));
            // Packet too big from a router on the way, quoting the forward packet.
            let mut icmp = vec![2u8, 0, 0, 0, 0, 0, 5, 0];
            icmp.extend_from_slice(&fwd);
            let r = [0x20, 0x01, 0x0d, 0xb8, 9, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
            assert_eq!(owner6(&ip6(r, x, 58, &icmp), 3), Some(w));
            seen[w] += 1;
        }
        assert!(seen.iter().all(|&n| n > 15), "spread: {seen:?}");
        assert_eq!(owner6(&[0x60; 39], 2), None);
    }

    proptest! {
        /// Any bytes: an owner in range or `None`, never a panic.
        #[test]
        fn owners_of_any_bytes_are_in_range(bytes in prop::collection::vec(any::<u8>(), 0..120), workers in 1usize..9) {
            let r = home();
            let o = own();
            let pol = Policy4 { workers, nat: Some(&r), own: &o };
            let mut b = bytes.clone();
            if let Some(x) = b.first_mut() {
                *x = 0x45;
            }
            if let Some(w) = owner4(&pol, WAN, &b) {
                let w = match w {
                    Owner4::Is(w) | Owner4::FirstHinted(w, _) => w,
                    Owner4::Later { fallback, .. } => fallback,
                };
                prop_assert!(w < workers);
            }
            if let Some(w) = owner6(&bytes, workers) {
                prop_assert!(w < workers);
            }
        }

        /// Without NAT, a flow's two directions have one owner.
        #[test]
        fn symmetric_without_nat(src in any::<u32>(), dst in any::<u32>(), sp in any::<u16>(), dp in any::<u16>(), udp in any::<bool>(), workers in 1usize..9) {
            let o = own();
            let pol = Policy4 { workers, nat: None, own: &o };
            let f = Key4 { src, dst, sport: sp, dport: dp, proto: if udp { proto::UDP } else { proto::TCP } };
            prop_assert_eq!(
                owner(&pol, LAN, &packet(&f, b"a", 0)),
                owner(&pol, WAN, &packet(&f.reversed(), b"b", 0))
            );
        }
    }
}
