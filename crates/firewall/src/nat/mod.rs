//! NAT44 in the fast path (issue 25): source NAT to a pool or to the egress interface's
//! address (masquerade), destination NAT and port forwarding, hairpinning, ICMP echo
//! identifiers and the quoted headers of ICMP errors, later fragments following their
//! first, all with incremental checksum updates.
//!
//! **Where it runs.** Three feature nodes, on every interface once `[nat]` has a rule:
//! - `ip4-nat-reply` on `ip4-unicast`, before the ingress filter: a reply of a translated
//!   flow (or an ICMP error about one) is translated back at once, so the filter and its
//!   connection tracking see a flow with the same addresses both ways;
//! - `ip4-nat-in` on `ip4-unicast`, after the ingress filter: a packet of a known flow in
//!   its original direction is translated (both ends); a new one is matched against the
//!   destination rules, and a match opens a session and rewrites the destination before
//!   the route lookup, which then routes to the inside host;
//! - `ip4-nat-out` on `ip4-output`, before the egress filter: a new flow leaving by an
//!   interface is matched against the source rules (which know the egress interface only
//!   now), and a match opens a session (or adds the source translation to the one the
//!   destination rule opened) and rewrites the source. A flow whose destination was
//!   translated and that leaves by the interface it came in on is also given the egress
//!   address as its source (hairpinning: the inside server then answers through the
//!   router, which translates the answer back).
//!
//! The three tell each other what they did in the packet's feature bits ([`meta`]), so a
//! packet is looked up at most twice.
//!
//! **Filters see** the addresses the flow's initiator used: ingress filters before any
//! translation (a reply already translated back), egress filters after it. A rule for a
//! port forward therefore names the public address and port; one for masqueraded traffic
//! names the inside hosts.
//!
//! **State** is per worker ([`table::NatTable`]); each worker allocates ports in its own
//! slice, so allocation takes no lock. Both directions of a flow reach the worker that
//! owns it: with several workers, [`crate::steer`] hands packets to their flow's owner
//! first (a reply to a translated source by the slice its port lies in).

pub mod config;
pub mod fuzzing;
pub mod rewrite;
pub mod table;

#[cfg(test)]
pub(crate) mod tests;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::{ArcSwap, ArcSwapOption};
use atomic_refcell::AtomicRefCell;
use dataplane::buffer::{F_CSUM_UNKNOWN, F_LOCAL_ORIGIN};
use dataplane::feature::{ArcId, Batch, Feature, FeatureCx, FeatureNode, FeatureSpec};

use config::{parse_v4_range, NatConfig, SourceTranslation};
use rewrite::{Frag, Packet4};
use table::{Key4, NatTable, Pool, Refused, Session, Side, Timeouts};

use crate::config::PortList;

/// The bits of `Pkt::flags` the NAT nodes leave for each other (within
/// `dataplane::F_FEATURE_META`; the firewall's state uses the bits above).
pub mod meta {
    /// All of NAT's bits.
    pub const MASK: u16 = 0x0f00;
    /// `ip4-nat-reply` translated it back: the others leave it alone.
    pub const REPLY_DONE: u16 = 0x0100;
    /// `ip4-nat-in` translated it (a known flow, original direction).
    pub const FWD_DONE: u16 = 0x0200;
    /// No session, no destination rule: `ip4-nat-out` consults the source rules.
    pub const NEW: u16 = 0x0400;
    /// `ip4-nat-in` opened a session for it with a destination rule: `ip4-nat-out` may add
    /// the source translation.
    pub const DNAT_NEW: u16 = 0x0800;
}

/// Drop reasons of the NAT features.
pub mod drop {
    /// The worker's table was busy (a dump) for too long.
    pub const BUSY: u8 = 0;
    /// No room for a new session.
    pub const TABLE_FULL: u8 = 1;
    /// No free external port.
    pub const NO_PORT: u8 = 2;
    /// The new session's reply tuple is taken.
    pub const COLLISION: u8 = 3;
    /// Masquerade out of an interface without an IPv4 address.
    pub const NO_ADDRESS: u8 = 4;
    /// A packet a source rule matches that cannot open a session (another protocol, an
    /// ICMP error or echo reply of no session, a TCP RST).
    pub const UNSUPPORTED: u8 = 5;
    /// A later fragment whose first fragment was not translated.
    pub const FRAGMENT_UNKNOWN: u8 = 6;
    /// A packet a source rule matches whose headers cannot be read.
    pub const MALFORMED: u8 = 7;
}

const DROPS: &[(&str, &str)] = &[
    (
        "busy",
        "the worker's NAT table was held by a session dump for too long",
    ),
    (
        "table_full",
        "no room for a new NAT session (nat.max_sessions)",
    ),
    (
        "no_port",
        "no free external port or identifier for a new NAT mapping",
    ),
    (
        "collision",
        "a new NAT session's reply tuple belongs to another session",
    ),
    (
        "no_address",
        "masquerade out of an interface that has no IPv4 address",
    ),
    (
        "unsupported",
        "a packet a NAT source rule matches that cannot open a session (a protocol other than tcp, udp and icmp echo; an ICMP error or a TCP RST of no session)",
    ),
    (
        "fragment_unknown",
        "a later fragment whose first fragment was not translated",
    ),
    (
        "malformed",
        "a packet a NAT source rule matches whose headers cannot be read",
    ),
];

/// An IPv4 match: prefixes (ranges), protocol, ports; empty lists match anything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Match4 {
    src: Vec<(u32, u32)>,
    dst: Vec<(u32, u32)>,
    proto: Option<u8>,
    sport: PortList,
    dport: PortList,
}

fn in_ranges(r: &[(u32, u32)], a: u32) -> bool {
    r.is_empty() || r.iter().any(|&(lo, hi)| lo <= a && a <= hi)
}

fn in_ports(p: &PortList, v: u16) -> bool {
    p.is_empty() || p.0.iter().any(|r| r.contains(&v))
}

impl Match4 {
    fn new(
        src: &[String],
        dst: &[String],
        proto: Option<u8>,
        sport: &PortList,
        dport: &PortList,
    ) -> Result<Match4, String> {
        let ranges = |l: &[String]| -> Result<Vec<(u32, u32)>, String> {
            l.iter().map(|s| parse_v4_range(s)).collect()
        };
        Ok(Match4 {
            src: ranges(src)?,
            dst: ranges(dst)?,
            proto,
            sport: sport.clone(),
            dport: dport.clone(),
        })
    }

    /// Whether `k` matches. A rule without a protocol matches every protocol, so that a
    /// packet NAT cannot translate (GRE, ESP) is dropped as `unsupported` rather than let
    /// out with an inside address.
    pub fn matches(&self, k: &Key4) -> bool {
        self.proto.is_none_or(|p| p == k.proto)
            && in_ranges(&self.src, k.src)
            && in_ranges(&self.dst, k.dst)
            && in_ports(&self.sport, k.sport)
            && in_ports(&self.dport, k.dport)
    }
}

/// What a source rule does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnatAction {
    /// No translation.
    Exclude,
    /// The egress interface's first IPv4 address.
    Masquerade,
    /// One of these addresses (inclusive ranges).
    Pool(Vec<(u32, u32)>),
}

/// A compiled source rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnatRule {
    iface: Option<u16>,
    m: Match4,
    /// What it does.
    pub action: SnatAction,
}

/// A compiled destination rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnatRule {
    iface: Option<u16>,
    m: Match4,
    to: u32,
    port: Option<u16>,
}

/// The rules as the nodes apply them, published whole.
#[derive(Debug, Default)]
pub struct NatRules {
    /// Source rules, in order.
    pub snat: Vec<SnatRule>,
    /// Destination rules, in order.
    pub dnat: Vec<DnatRule>,
    /// Sessions each rule opened (source rules, then destination rules).
    pub hits: Vec<AtomicU64>,
    /// The timeouts.
    pub timeouts: Timeouts,
    /// The inside hosts: the sources the translating source rules name (sorted, merged);
    /// with `inside_all`, every address.
    inside: Vec<(u32, u32)>,
    /// A translating source rule names no source: every address is inside.
    inside_all: bool,
    /// The source rules' pools (sorted, merged).
    external: Vec<(u32, u32)>,
}

/// Sort and merge inclusive ranges.
fn merged(mut v: Vec<(u32, u32)>) -> Vec<(u32, u32)> {
    v.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(v.len());
    for (lo, hi) in v {
        match out.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

/// Whether `a` lies in one of the sorted, disjoint ranges `r`.
#[inline]
fn in_sorted(r: &[(u32, u32)], a: u32) -> bool {
    let i = r.partition_point(|&(lo, _)| lo <= a);
    i > 0 && r.get(i - 1).is_some_and(|&(_, hi)| a <= hi)
}

impl NatRules {
    /// Compile `cfg` for interfaces named `names` (by index). Fails on what
    /// [`NatConfig::validate`] reports.
    pub fn compile(cfg: &NatConfig, names: &[String]) -> Result<NatRules, String> {
        let iface = |n: &Option<String>, path: String| -> Result<Option<u16>, String> {
            match n {
                None => Ok(None),
                Some(n) => names
                    .iter()
                    .position(|x| x == n)
                    .map(|i| Some(i as u16))
                    .ok_or_else(|| format!("{path}: {n:?} is not an interface")),
            }
        };
        let mut snat = Vec::new();
        for (i, r) in cfg.source.iter().enumerate() {
            let action = match &r.translation {
                SourceTranslation::Keyword(k) if k == "exclude" => SnatAction::Exclude,
                SourceTranslation::Keyword(k) if k == "masquerade" => SnatAction::Masquerade,
                SourceTranslation::Keyword(k) => {
                    return Err(format!(
                        "nat.source[{i}].translation: {k:?} is not a translation"
                    ))
                }
                SourceTranslation::Pool(l) => SnatAction::Pool(
                    l.iter()
                        .map(|s| parse_v4_range(s))
                        .collect::<Result<_, _>>()
                        .map_err(|e| format!("nat.source[{i}].translation: {e}"))?,
                ),
            };
            snat.push(SnatRule {
                iface: iface(
                    &r.outbound_interface,
                    format!("nat.source[{i}].outbound_interface"),
                )?,
                m: Match4::new(
                    &r.source,
                    &r.destination,
                    r.protocol.map(|p| p.0),
                    &r.source_port,
                    &r.destination_port,
                )
                .map_err(|e| format!("nat.source[{i}]: {e}"))?,
                action,
            });
        }
        let mut dnat = Vec::new();
        for (i, r) in cfg.destination.iter().enumerate() {
            let to: std::net::Ipv4Addr = r.translation_address.parse().map_err(|_| {
                format!(
                    "nat.destination[{i}].translation_address: {:?} is not an IPv4 address",
                    r.translation_address
                )
            })?;
            dnat.push(DnatRule {
                iface: iface(
                    &r.inbound_interface,
                    format!("nat.destination[{i}].inbound_interface"),
                )?,
                m: Match4::new(
                    &r.source,
                    &r.destination,
                    r.protocol.map(|p| p.0),
                    &PortList::default(),
                    &r.destination_port,
                )
                .map_err(|e| format!("nat.destination[{i}]: {e}"))?,
                to: to.into(),
                port: r.translation_port,
            });
        }
        let hits = (0..snat.len() + dnat.len())
            .map(|_| AtomicU64::new(0))
            .collect();
        let translating = || snat.iter().filter(|r| r.action != SnatAction::Exclude);
        let inside_all = translating().any(|r| r.m.src.is_empty());
        let inside = merged(
            translating()
                .flat_map(|r| r.m.src.iter().copied())
                .collect(),
        );
        let external = merged(
            snat.iter()
                .flat_map(|r| match &r.action {
                    SnatAction::Pool(p) => p.clone(),
                    _ => Vec::new(),
                })
                .collect(),
        );
        Ok(NatRules {
            snat,
            dnat,
            hits,
            timeouts: cfg.timeouts,
            inside,
            inside_all,
            external,
        })
    }

    /// Whether `a` is an inside host: a source a translating source rule names (every
    /// address when one names none). Flow steering hashes an inside host's flows by its
    /// address alone ([`crate::steer`]).
    #[inline]
    pub fn is_inside(&self, a: u32) -> bool {
        self.inside_all || in_sorted(&self.inside, a)
    }

    /// Whether `a` is in a source rule's pool.
    #[inline]
    pub fn is_external(&self, a: u32) -> bool {
        in_sorted(&self.external, a)
    }

    /// The first source rule for a flow `k` leaving by `iface`.
    pub fn snat_for(&self, iface: u16, k: &Key4) -> Option<(usize, &SnatRule)> {
        self.snat
            .iter()
            .enumerate()
            .find(|(_, r)| r.iface.is_none_or(|i| i == iface) && r.m.matches(k))
    }

    /// The first destination rule for a flow `k` arriving on `iface`: (its index, the
    /// destination it translates to).
    pub fn dnat_for(&self, iface: u16, k: &Key4) -> Option<(usize, (u32, u16))> {
        self.dnat
            .iter()
            .enumerate()
            .find(|(_, r)| r.iface.is_none_or(|i| i == iface) && r.m.matches(k))
            .map(|(i, r)| (i, (r.to, r.port.unwrap_or(k.dport))))
    }

    fn hit(&self, i: usize) {
        if let Some(h) = self.hits.get(i) {
            h.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Later fragments of a datagram follow its first: (source, destination, IP id,
/// protocol) of the first as it arrived, to the session and way it took.
#[derive(Clone, Copy, Debug, Default)]
struct FragEntry {
    src: u32,
    dst: u32,
    id: u16,
    proto: u8,
    reply: bool,
    session: u32,
    expires_ns: u64,
}

/// Fragment cache entries per worker (direct mapped; a collision forgets the older).
const FRAG_CACHE: usize = 1024;
/// How long a first fragment's translation is kept for its later fragments.
const FRAG_TTL_NS: u64 = 2_000_000_000;

/// A worker's NAT state.
pub struct NatWorker {
    /// Sessions and mappings.
    pub table: NatTable,
    frags: Box<[FragEntry]>,
    /// `CLOCK_MONOTONIC` less the worker's clock, taken at its first batch (for dumps).
    clock_offset: Option<u64>,
    /// The timeouts the table has.
    timeouts: Timeouts,
}

impl NatWorker {
    fn frag_slot(src: u32, dst: u32, id: u16, proto: u8) -> usize {
        let h = (u64::from(src) << 32 | u64::from(dst)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ (u64::from(id) << 8 | u64::from(proto)).wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
        (h >> 40) as usize % FRAG_CACHE
    }

    fn frag_put(&mut self, p: &Packet4, session: u32, reply: bool, now_ns: u64) {
        let k = &p.key;
        let i = Self::frag_slot(k.src, k.dst, p.id, k.proto);
        if let Some(e) = self.frags.get_mut(i) {
            *e = FragEntry {
                src: k.src,
                dst: k.dst,
                id: p.id,
                proto: k.proto,
                reply,
                session,
                expires_ns: now_ns + FRAG_TTL_NS,
            };
        }
    }

    /// The session (and its way) of a later fragment `p`, checked against the session's
    /// addresses (a slot reused since is not trusted).
    fn frag_get(&self, p: &Packet4, now_ns: u64) -> Option<(Session, bool)> {
        let k = &p.key;
        let e = self
            .frags
            .get(Self::frag_slot(k.src, k.dst, p.id, k.proto))?;
        if e.expires_ns < now_ns || (e.src, e.dst, e.id, e.proto) != (k.src, k.dst, p.id, k.proto) {
            return None;
        }
        let s = *self.table.get(e.session)?;
        let ok = if e.reply {
            s.t.dst == k.src && s.t.src == k.dst
        } else {
            s.o.src == k.src && s.o.dst == k.dst
        };
        ok.then_some((s, e.reply))
    }
}

/// Figures a worker publishes after each batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NatStats {
    /// Sessions.
    pub sessions: u64,
    /// Capacity.
    pub max: u64,
    /// Sessions created.
    pub created: u64,
    /// Sessions expired.
    pub expired: u64,
    /// Mappings in use.
    pub mappings: u64,
    /// New sessions refused: table full.
    pub full: u64,
    /// New mappings refused: no port.
    pub no_port: u64,
    /// New sessions refused: reply tuple taken.
    pub collision: u64,
    /// Bytes the table takes.
    pub memory_bytes: u64,
    /// The worker's first external port.
    pub port_lo: u64,
    /// Its last.
    pub port_hi: u64,
}

/// One worker's table and its published figures.
pub struct NatSlot {
    /// The table: borrowed by the worker's three nodes in turn, and by a dump a chunk at a
    /// time.
    pub table: AtomicRefCell<NatWorker>,
    stats: [AtomicU64; 11],
    /// Batches dropped because a dump held the table.
    busy: AtomicU64,
}

impl NatSlot {
    fn publish(&self, w: &NatWorker) {
        let t = &w.table;
        let c = t.counters();
        let (lo, hi) = t.port_range();
        let v = [
            t.len() as u64,
            t.max() as u64,
            c.created,
            c.expired,
            t.mappings() as u64,
            c.full,
            c.no_port,
            c.collision,
            t.memory_bytes() as u64,
            u64::from(lo),
            u64::from(hi),
        ];
        for (a, x) in self.stats.iter().zip(v) {
            a.store(x, Ordering::Relaxed);
        }
    }

    /// The figures the worker last published.
    pub fn stats(&self) -> NatStats {
        let g = |i: usize| self.stats[i].load(Ordering::Relaxed);
        NatStats {
            sessions: g(0),
            max: g(1),
            created: g(2),
            expired: g(3),
            mappings: g(4),
            full: g(5),
            no_port: g(6),
            collision: g(7),
            memory_bytes: g(8),
            port_lo: g(9),
            port_hi: g(10),
        }
    }

    /// Batches dropped because a dump held the table.
    pub fn busy(&self) -> u64 {
        self.busy.load(Ordering::Relaxed)
    }
}

/// What the control thread and the NAT nodes share.
#[derive(Default)]
pub struct NatShared {
    /// The rules.
    pub rules: ArcSwap<NatRules>,
    /// Each worker's table, once NAT is configured.
    pub tables: ArcSwapOption<Vec<NatSlot>>,
    /// Where ports of the router's own addresses are claimed from the kernel (the AF_XDP
    /// ports' XDP programs), set by the daemon before NAT is configured.
    claims: std::sync::Mutex<Vec<Arc<dyn dataplane::claims::PortClaims>>>,
    /// NAT has rules: the ports share the router's IPv4 addresses with it.
    active: std::sync::atomic::AtomicBool,
}

/// One session as a dump finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionRecord {
    /// The worker.
    pub worker: usize,
    /// The session.
    pub session: Session,
    /// Nanoseconds until it expires.
    pub expires_in_ns: u64,
}

/// Which sessions a dump lists: all conditions given must hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionFilter {
    /// An address range any of the session's four addresses lies in.
    pub addr: Option<(u32, u32)>,
    /// The protocol.
    pub proto: Option<u8>,
    /// A port any end uses (before or after translation).
    pub port: Option<u16>,
}

impl SessionFilter {
    /// Whether `s` matches.
    pub fn matches(&self, s: &Session) -> bool {
        let addrs = [s.o.src, s.o.dst, s.t.src, s.t.dst];
        let ports = [s.o.sport, s.o.dport, s.t.sport, s.t.dport];
        self.addr
            .is_none_or(|(lo, hi)| addrs.iter().any(|a| (lo..=hi).contains(a)))
            && self.proto.is_none_or(|p| p == s.o.proto)
            && self.port.is_none_or(|p| ports.contains(&p))
    }
}

/// Why a dump failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DumpError {
    /// NAT is not configured.
    #[error("NAT is off: no [nat] rules have been applied")]
    Off,
    /// A worker held its table for the whole timeout.
    #[error("worker {worker}'s NAT table stayed busy for {timeout:?}")]
    Busy {
        /// The worker.
        worker: usize,
        /// How long it waited.
        timeout: std::time::Duration,
    },
}

/// Sessions a dump copies per borrow of a worker's table (tens of microseconds).
const DUMP_CHUNK: usize = 4096;

impl NatShared {
    /// Claim the ports of NAT's mappings and port forwards through `claims` from now on.
    pub fn set_claims(&self, claims: Vec<Arc<dyn dataplane::claims::PortClaims>>) {
        if let Ok(mut c) = self.claims.lock() {
            *c = claims;
        }
    }

    /// Whether NAT has rules (the ports then share the router's IPv4 addresses with it).
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// Publish `rules` (compiled from `cfg`): the port forwards' ports claimed anew, then
    /// the rules, then whether NAT is active.
    pub fn publish(&self, cfg: &NatConfig, rules: NatRules) {
        if let Ok(claims) = self.claims.lock() {
            for c in claims.iter() {
                c.clear_forwards();
                for r in &cfg.destination {
                    let all = [table::proto::TCP, table::proto::UDP, table::proto::ICMP];
                    let one = r.protocol.map(|p| [p.0]);
                    let protos: &[u8] = match &one {
                        Some(p) => p,
                        None => &all,
                    };
                    for &p in protos {
                        if r.destination_port.is_empty() || p == table::proto::ICMP {
                            for port in 0..=u16::MAX {
                                c.set(p, port, true, true);
                            }
                        } else {
                            for range in &r.destination_port.0 {
                                for port in range.clone() {
                                    c.set(p, port, true, true);
                                }
                            }
                        }
                    }
                }
            }
        }
        self.rules.store(Arc::new(rules));
        self.active.store(cfg.has_rules(), Ordering::Release);
    }

    /// Tables for `workers` workers of `max` sessions each, if there are none yet (control
    /// thread; allocates). Returns false when tables of another size exist already (a
    /// change of `max_sessions` needs a restart).
    pub fn ensure_tables(&self, workers: usize, max: usize, t: &Timeouts) -> bool {
        if let Some(cur) = self.tables.load().as_ref() {
            return cur.first().is_none_or(|s| s.stats().max == max as u64);
        }
        let workers = workers.max(1);
        let claims: Arc<[Arc<dyn dataplane::claims::PortClaims>]> = self
            .claims
            .lock()
            .map(|c| Arc::from(c.clone()))
            .unwrap_or_else(|_| Arc::from(Vec::new()));
        let v: Vec<NatSlot> = (0..workers)
            .map(|w| {
                let slot = NatSlot {
                    table: AtomicRefCell::new(NatWorker {
                        table: NatTable::with_claims(max, w, workers, t, claims.clone()),
                        frags: vec![FragEntry::default(); FRAG_CACHE].into_boxed_slice(),
                        clock_offset: None,
                        timeouts: *t,
                    }),
                    stats: Default::default(),
                    busy: AtomicU64::new(0),
                };
                slot.publish(&slot.table.borrow());
                slot
            })
            .collect();
        self.tables.store(Some(Arc::new(v)));
        true
    }

    /// Every worker's figures (empty: NAT never configured).
    pub fn stats(&self) -> Vec<NatStats> {
        self.tables
            .load()
            .as_ref()
            .map(|t| t.iter().map(|s| s.stats()).collect())
            .unwrap_or_default()
    }

    /// Batches dropped because a dump held a table, summed.
    pub fn busy(&self) -> u64 {
        self.tables
            .load()
            .as_ref()
            .map(|t| t.iter().map(|s| s.busy()).sum())
            .unwrap_or(0)
    }

    /// The sessions `filter` matches, at most `max` (the bool: there were more), read a
    /// chunk at a time from each worker's table (control thread). A worker waits for a
    /// chunk's copy at most a few tens of microseconds.
    pub fn sessions(
        &self,
        filter: SessionFilter,
        max: usize,
        timeout: std::time::Duration,
    ) -> Result<(Vec<SessionRecord>, bool), DumpError> {
        let tables = self.tables.load_full().ok_or(DumpError::Off)?;
        let mut out = Vec::new();
        let mut more = false;
        for (w, slot) in tables.iter().enumerate() {
            let mut at = 0usize;
            loop {
                let start = std::time::Instant::now();
                let t = loop {
                    if let Ok(t) = slot.table.try_borrow() {
                        break t;
                    }
                    if start.elapsed() > timeout {
                        return Err(DumpError::Busy { worker: w, timeout });
                    }
                    std::thread::sleep(std::time::Duration::from_micros(100));
                };
                let now = t
                    .clock_offset
                    .map_or(0, |o| dataplane::worker::monotonic_ns().saturating_sub(o));
                let end = (at + DUMP_CHUNK).min(t.table.max());
                for id in at..end {
                    if let Some((s, left)) = t.table.session_at(id as u32, now) {
                        if filter.matches(&s) {
                            if out.len() < max {
                                out.push(SessionRecord {
                                    worker: w,
                                    session: s,
                                    expires_in_ns: left,
                                });
                            } else {
                                more = true;
                            }
                        }
                    }
                }
                drop(t);
                at = end;
                if at >= slot.stats().max as usize {
                    break;
                }
            }
        }
        Ok((out, more))
    }
}

/// Which of the three nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `ip4-nat-reply`.
    Reply,
    /// `ip4-nat-in`.
    In,
    /// `ip4-nat-out`.
    Out,
}

/// One of the three NAT features.
pub struct NatFeature {
    role: Role,
    shared: Arc<NatShared>,
}

impl NatFeature {
    /// The three features over `shared`, to register.
    pub fn all(shared: &Arc<NatShared>) -> Vec<Arc<dyn Feature>> {
        [Role::Reply, Role::In, Role::Out]
            .into_iter()
            .map(|role| {
                Arc::new(NatFeature {
                    role,
                    shared: shared.clone(),
                }) as Arc<dyn Feature>
            })
            .collect()
    }

    /// A feature's name.
    pub fn name(role: Role) -> &'static str {
        match role {
            Role::Reply => "ip4-nat-reply",
            Role::In => "ip4-nat-in",
            Role::Out => "ip4-nat-out",
        }
    }

    /// All three names.
    pub const NAMES: [&'static str; 3] = ["ip4-nat-reply", "ip4-nat-in", "ip4-nat-out"];
}

impl Feature for NatFeature {
    fn spec(&self) -> FeatureSpec {
        let (arc, before, after): (ArcId, &'static [&'static str], &'static [&'static str]) =
            match self.role {
                Role::Reply => (
                    ArcId::Ip4Unicast,
                    &["ip4-filter-ingress"],
                    &["ip4-urpf-strict", "ip4-urpf-loose"],
                ),
                Role::In => (
                    ArcId::Ip4Unicast,
                    &[],
                    &["ip4-filter-ingress", "ip4-nat-reply"],
                ),
                Role::Out => (ArcId::Ip4Output, &["ip4-filter-egress"], &[]),
            };
        FeatureSpec {
            name: NatFeature::name(self.role),
            arc,
            before,
            after,
            drops: DROPS,
        }
    }

    fn node(&self, worker: usize) -> Box<dyn FeatureNode> {
        Box::new(NatNode {
            role: self.role,
            worker,
            shared: self.shared.clone(),
            parsed: vec![None; dataplane::VECTOR_SIZE].into_boxed_slice(),
        })
    }
}

struct NatNode {
    role: Role,
    worker: usize,
    shared: Arc<NatShared>,
    /// `ip4-nat-reply`: each ordinary packet's headers and tuple hash, read in a first pass
    /// over the batch that prefetches the index slots, then the sessions, before the
    /// packets are handled (the table is far larger than the caches: a lookup is two
    /// misses otherwise).
    parsed: Box<[Option<(u64, Packet4)>]>,
}

/// `Pkt::aux` on `ip4-unicast` (free there: the engine sets it after the lookup): the
/// session `ip4-nat-reply` found a packet's original direction in, for `ip4-nat-in`.
const AUX_SESSION: u32 = 0x8000_0000;

/// Spins a node waits for its table (held only by a dump's chunk) before dropping the
/// batch as `busy`.
const BORROW_SPINS: u32 = 50_000;

/// Sessions a worker looks at for expiry per batch.
pub const SWEEP_PER_BATCH: usize = 64;

fn set_meta(b: &mut Batch<'_>, k: usize, m: u16) {
    if let Some(q) = b.pkt_mut(k) {
        q.flags = q.flags & !meta::MASK | m;
    }
}

/// On `ip4-unicast`, after the destination became `dst`: ip4-lookup takes the destination
/// from the descriptor's `nh`, where ip4-input left it.
fn set_lookup_dst(b: &mut Batch<'_>, k: usize, dst: u32) {
    if let Some(q) = b.pkt_mut(k) {
        q.nh = dst;
    }
}

impl FeatureNode for NatNode {
    fn process(&mut self, cx: &mut FeatureCx<'_>, b: &mut Batch<'_>) {
        let tables = self.shared.tables.load();
        let Some(slot) = tables.as_ref().and_then(|t| t.get(self.worker)) else {
            return;
        };
        let mut guard = None;
        for _ in 0..BORROW_SPINS {
            if let Ok(g) = slot.table.try_borrow_mut() {
                guard = Some(g);
                break;
            }
            std::hint::spin_loop();
        }
        let Some(mut w) = guard else {
            // Untranslated packets must not leave: drop the batch, counted.
            slot.busy.fetch_add(1, Ordering::Relaxed);
            for k in 0..b.len() {
                b.drop(k, drop::BUSY);
            }
            return;
        };
        let rules = self.shared.rules.load();
        if w.timeouts != rules.timeouts {
            w.table.set_timeouts(&rules.timeouts);
            w.timeouts = rules.timeouts;
        }
        let now = cx.now_ns;
        if self.role == Role::Reply {
            let n = b.len().min(self.parsed.len());
            for k in 0..n {
                self.parsed[k] = ordinary(cx, b, k).map(|p| {
                    let h = w.table.hash(&p.key);
                    w.table.prefetch_slot(h);
                    (h, p)
                });
            }
            for (h, _) in self.parsed[..n].iter().flatten() {
                w.table.prefetch_session(*h);
            }
        }
        for k in 0..b.len() {
            match self.role {
                Role::Reply => {
                    let pre = self.parsed.get(k).copied().flatten();
                    reply(cx, b, k, &mut w, pre, now)
                }
                Role::In => inbound(cx, b, k, &mut w, &rules, now),
                Role::Out => outbound(cx, b, k, &mut w, &rules, now),
            }
        }
        if self.role == Role::Out {
            w.table.sweep(now, SWEEP_PER_BATCH);
            if w.clock_offset.is_none() {
                w.clock_offset = Some(dataplane::worker::monotonic_ns().saturating_sub(now));
            }
            slot.publish(&w);
        }
    }
}

/// The IPv4 packet of batch position `k`, writable, with what NAT reads of it.
fn packet<'m>(
    cx: &'m mut FeatureCx<'_>,
    b: &Batch<'_>,
    k: usize,
) -> Option<(&'m mut [u8], Result<Packet4, rewrite::Malformed>, u16)> {
    let pk = *b.pkt(k)?;
    let at = pk.off as usize + pk.l3 as usize;
    let ip = cx.mem.frame_mut(pk.buf).get_mut(at..)?;
    let p = rewrite::parse(ip);
    Some((ip, p, pk.flags))
}

/// Finish a checksum the sender left partial before rewriting around it.
fn complete_partial(ip: &mut [u8], flags: u16, b: &mut Batch<'_>, k: usize) {
    if flags & F_CSUM_UNKNOWN != 0 {
        wire::offload::complete_if_partial(ip);
        if let Some(q) = b.pkt_mut(k) {
            q.flags &= !F_CSUM_UNKNOWN;
        }
    }
}

/// The headers of an ordinary packet (the router's own excepted; not an ICMP error, not a
/// later fragment) at batch position `k`, for the prefetching pass.
fn ordinary(cx: &mut FeatureCx<'_>, b: &Batch<'_>, k: usize) -> Option<Packet4> {
    let pk = b.pkt(k)?;
    if pk.flags & F_LOCAL_ORIGIN != 0 {
        return None;
    }
    let at = pk.off as usize + pk.l3 as usize;
    let p = rewrite::parse(cx.mem.frame(pk.buf).get(at..)?).ok()?;
    (p.error.is_none() && p.frag != Frag::Later).then_some(p)
}

/// `ip4-nat-reply`: replies of translated flows (and ICMP errors about them) back to the
/// addresses the flow's initiator used; for a known flow's original direction, the session
/// left in `aux` for `ip4-nat-in`. `pre`: the tuple hash and headers the first pass read.
fn reply(
    cx: &mut FeatureCx<'_>,
    b: &mut Batch<'_>,
    k: usize,
    w: &mut NatWorker,
    pre: Option<(u64, Packet4)>,
    now: u64,
) {
    let Some(pk) = b.pkt(k).copied() else { return };
    let flags = pk.flags;
    if flags & F_LOCAL_ORIGIN != 0 {
        return;
    }
    let at = pk.off as usize + pk.l3 as usize;
    let Some(ip) = cx.mem.frame_mut(pk.buf).get_mut(at..) else {
        return;
    };
    let (h, p) = match pre {
        Some((h, p)) => (Some(h), p),
        None => match rewrite::parse(ip) {
            Ok(p) => (None, p),
            Err(_) => return,
        },
    };
    if p.frag == Frag::Later {
        if let Some((s, true)) = w.frag_get(&p, now) {
            rewrite::rewrite_addresses(ip, &p, &s.o.reversed());
            set_meta(b, k, meta::REPLY_DONE);
            set_lookup_dst(b, k, s.o.src);
        }
        return;
    }
    if let Some(q) = p.error {
        // The error quotes a packet the flow sent out (`t`); it comes back to `t`'s source.
        if let Some((id, Side::Reply)) = w.table.lookup(&q.key.reversed(), now) {
            if let Some(s) = w.table.get(id).copied() {
                if p.key.dst == s.t.src {
                    let src = if p.key.src == s.t.dst {
                        s.o.dst
                    } else {
                        p.key.src
                    };
                    rewrite::rewrite_error(ip, &p, src, s.o.src, &s.o);
                    set_meta(b, k, meta::REPLY_DONE);
                    set_lookup_dst(b, k, s.o.src);
                }
            }
        }
        return;
    }
    let found = match h {
        Some(h) => w.table.lookup_hashed(&p.key, h, now),
        None => w.table.lookup(&p.key, now),
    };
    if let Some((id, Side::Orig)) = found {
        if let Some(q) = b.pkt_mut(k) {
            q.aux = AUX_SESSION | id;
        }
        return;
    }
    if let Some((id, Side::Reply)) = found {
        if let Some(s) = w.table.get(id).copied() {
            complete_partial(ip, flags, b, k);
            rewrite::rewrite(ip, &p, &s.o.reversed());
            w.table.refresh(id, Side::Reply, p.tcp_flags, now);
            if p.frag == Frag::First {
                w.frag_put(&p, id, true, now);
            }
            set_meta(b, k, meta::REPLY_DONE);
            set_lookup_dst(b, k, s.o.src);
        }
    }
}

/// `ip4-nat-in`: known flows' original direction translated; new flows matched against
/// the destination rules.
fn inbound(
    cx: &mut FeatureCx<'_>,
    b: &mut Batch<'_>,
    k: usize,
    w: &mut NatWorker,
    rules: &NatRules,
    now: u64,
) {
    let iface = b.iface(k);
    let Some((ip, p, flags)) = packet(cx, b, k) else {
        return;
    };
    if flags & (meta::REPLY_DONE | F_LOCAL_ORIGIN) != 0 {
        return;
    }
    let Ok(p) = p else {
        set_meta(b, k, meta::NEW);
        return;
    };
    if p.frag == Frag::Later {
        match w.frag_get(&p, now) {
            Some((s, false)) => {
                rewrite::rewrite_addresses(ip, &p, &s.t);
                set_meta(b, k, meta::FWD_DONE);
                set_lookup_dst(b, k, s.t.dst);
            }
            _ => set_meta(b, k, meta::NEW),
        }
        return;
    }
    if let Some(q) = p.error {
        // An inside host's error about a reply it got (`o` reversed): out as one about
        // the reply the outside sent (`t` reversed).
        if let Some((id, Side::Orig)) = w.table.lookup(&q.key.reversed(), now) {
            if let Some(s) = w.table.get(id).copied() {
                let src = if p.key.src == s.o.src {
                    s.t.src
                } else {
                    p.key.src
                };
                rewrite::rewrite_error(ip, &p, src, s.t.dst, &s.t.reversed());
                set_meta(b, k, meta::FWD_DONE);
                set_lookup_dst(b, k, s.t.dst);
                return;
            }
        }
        set_meta(b, k, meta::NEW);
        return;
    }
    // The session `ip4-nat-reply` found (checked: the table may have changed since).
    let stashed = b.pkt(k).map_or(0, |q| q.aux);
    let found = if stashed & AUX_SESSION != 0 {
        if let Some(q) = b.pkt_mut(k) {
            q.aux = 0;
        }
        let id = stashed & !AUX_SESSION;
        match w.table.get(id) {
            Some(s) if s.o == p.key => Some((id, Side::Orig)),
            _ => w.table.lookup(&p.key, now),
        }
    } else {
        w.table.lookup(&p.key, now)
    };
    match found {
        Some((id, Side::Orig)) => {
            if let Some(s) = w.table.get(id).copied() {
                complete_partial(ip, flags, b, k);
                rewrite::rewrite(ip, &p, &s.t);
                w.table.refresh(id, Side::Orig, p.tcp_flags, now);
                if p.frag == Frag::First {
                    w.frag_put(&p, id, false, now);
                }
                set_lookup_dst(b, k, s.t.dst);
            }
            set_meta(b, k, meta::FWD_DONE);
        }
        // A reply `ip4-nat-reply` did not see (not enabled here): left as it is.
        Some((_, Side::Reply)) => set_meta(b, k, meta::FWD_DONE),
        None => {
            let Some((i, to)) = rules.dnat_for(iface, &p.key).filter(|_| p.can_open()) else {
                set_meta(b, k, meta::NEW);
                return;
            };
            match w.table.create_dnat(p.key, to, p.tcp_flags, now) {
                Ok(id) => {
                    rules.hit(rules.snat.len() + i);
                    complete_partial(ip, flags, b, k);
                    let t = Key4 {
                        dst: to.0,
                        dport: to.1,
                        ..p.key
                    };
                    rewrite::rewrite(ip, &p, &t);
                    if p.frag == Frag::First {
                        w.frag_put(&p, id, false, now);
                    }
                    set_meta(b, k, meta::DNAT_NEW);
                    set_lookup_dst(b, k, t.dst);
                }
                Err(e) => b.drop(k, refused(e)),
            }
        }
    }
}

fn refused(e: Refused) -> u8 {
    match e {
        Refused::Full => drop::TABLE_FULL,
        Refused::NoPort => drop::NO_PORT,
        Refused::Collision => drop::COLLISION,
    }
}

/// `ip4-nat-out`: new flows matched against the source rules of their egress interface.
fn outbound(
    cx: &mut FeatureCx<'_>,
    b: &mut Batch<'_>,
    k: usize,
    w: &mut NatWorker,
    rules: &NatRules,
    now: u64,
) {
    let Some(pk) = b.pkt(k).copied() else { return };
    let m = pk.flags & meta::MASK;
    if m & (meta::NEW | meta::DNAT_NEW) == 0 {
        return;
    }
    let iface = b.iface(k);
    let masq = cx
        .ifaces
        .ports
        .get(iface as usize)
        .and_then(|p| p.primary_ip4());
    let Some((ip, p, flags)) = packet(cx, b, k) else {
        return;
    };
    let p = match p {
        Ok(p) => p,
        Err(_) => {
            // Unreadable: dropped if any source rule of this interface could apply.
            if rules
                .snat
                .iter()
                .any(|r| r.iface.is_none_or(|i| i == iface) && r.action != SnatAction::Exclude)
            {
                b.drop(k, drop::MALFORMED);
            }
            return;
        }
    };
    if m & meta::DNAT_NEW != 0 {
        // The session `ip4-nat-in` opened: found by its reply tuple.
        let Some((id, Side::Reply)) = w.table.lookup(&p.key.reversed(), now) else {
            return;
        };
        let hairpin = pk.rx_port == pk.tx_port;
        let (ranges, hit) = match rules.snat_for(iface, &p.key) {
            Some((_, r)) if r.action == SnatAction::Exclude => return,
            Some((i, r)) => (pool_buf(&r.action, masq), Some(i)),
            None if hairpin => (masq.map(|a| PoolBuf::One([(a, a)])), None),
            None => return,
        };
        let Some(ranges) = ranges else {
            b.drop(k, drop::NO_ADDRESS);
            return;
        };
        match w.table.add_snat(
            id,
            Pool {
                ranges: ranges.get(),
            },
        ) {
            Ok(()) => {
                if let Some(i) = hit {
                    rules.hit(i);
                }
                if let Some(s) = w.table.get(id).copied() {
                    rewrite::rewrite(ip, &p, &s.t);
                }
            }
            Err(e) => b.drop(k, refused(e)),
        }
        return;
    }
    let Some((i, r)) = rules.snat_for(iface, &p.key) else {
        return;
    };
    if r.action == SnatAction::Exclude {
        return;
    }
    if p.frag == Frag::Later {
        b.drop(k, drop::FRAGMENT_UNKNOWN);
        return;
    }
    if !p.can_open() {
        b.drop(k, drop::UNSUPPORTED);
        return;
    }
    let Some(ranges) = pool_buf(&r.action, masq) else {
        b.drop(k, drop::NO_ADDRESS);
        return;
    };
    match w.table.create_snat(
        p.key,
        Pool {
            ranges: ranges.get(),
        },
        p.tcp_flags,
        now,
    ) {
        Ok(id) => {
            rules.hit(i);
            if let Some(s) = w.table.get(id).copied() {
                complete_partial(ip, flags, b, k);
                rewrite::rewrite(ip, &p, &s.t);
                if p.frag == Frag::First {
                    w.frag_put(&p, id, false, now);
                }
            }
        }
        Err(e) => b.drop(k, refused(e)),
    }
}

/// A pool's ranges without allocating: the masquerade address, or the rule's list.
enum PoolBuf<'a> {
    One([(u32, u32); 1]),
    Rule(&'a [(u32, u32)]),
}

/// The pool of a source rule's action: `None` for masquerade out of an interface without
/// an IPv4 address (and for an exclusion, which translates nothing).
fn pool_buf(a: &SnatAction, masq: Option<u32>) -> Option<PoolBuf<'_>> {
    match a {
        SnatAction::Exclude => None,
        SnatAction::Masquerade => masq.map(|a| PoolBuf::One([(a, a)])),
        SnatAction::Pool(v) => Some(PoolBuf::Rule(v)),
    }
}

impl PoolBuf<'_> {
    fn get(&self) -> &[(u32, u32)] {
        match self {
            PoolBuf::One(a) => a,
            PoolBuf::Rule(v) => v,
        }
    }
}
