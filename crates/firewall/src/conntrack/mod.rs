//! Connection tracking (issue 25): which flow a packet belongs to and what state that flow
//! is in, for the stateful firewall to match on (`ct state new,established,related,invalid`)
//! and for NAT to keep its bindings in.
//!
//! **Shape.** One [`Conntrack`] per worker, owned by it (`&mut self`, no locks, no atomics);
//! with several workers, [`crate::steer`] hands both directions of a flow to the worker
//! that owns it before the table is consulted. The table is allocated once, at its full
//! size ([`Config::max_entries`]), and nothing allocates afterwards; no call panics on any
//! input, and nothing logs: [`Counters`] say what happened.
//!
//! **Per packet.** The fast-path node parses the packet into a [`Packet`] (tuple, TCP
//! flags/sequence/ack/window, ICMP kind, time) and calls [`Conntrack::lookup`] (or
//! [`Conntrack::lookup_burst`] for a vector, which prefetches). The [`Verdict`] says
//! [`CtState::New`], [`CtState::Established`], [`CtState::Related`] or [`CtState::Invalid`],
//! the flow's handle ([`FlowId`]) and the packet's direction. A lookup of a known flow also
//! tracks the packet: TCP state and windows advance, the timeout is refreshed. A lookup never
//! creates: the firewall creates a flow only when its rule set accepts a `New` packet, with
//! [`Conntrack::create`] and the verdict (which carries the hash, so nothing is hashed
//! twice). A full table refuses ([`Refused::TableFull`]).
//!
//! **Protocols.** TCP is tracked with netfilter's state table and window tracking ([`tcp`]);
//! only a SYN (without ACK, RST or FIN) opens a flow (netfilter with
//! `nf_conntrack_tcp_loose=0`: a mid-stream segment without a flow is `Invalid`). UDP and
//! other protocols: the first packet opens, a packet in the reply direction makes the flow
//! replied and assured. ICMP and ICMPv6 echo: keyed by identifier (in both ports of the
//! tuple); a request opens, a reply without a request is `Invalid`. ICMP and ICMPv6 errors
//! carry the tuple they quote ([`L4::IcmpError`]): `Related` to that flow if it exists, else
//! `Invalid`.
//!
//! **Timeouts** are per state ([`Timeouts`], netfilter's defaults), kept as a deadline in
//! each entry in ticks of 2^30 ns (1.07 s): no timer per entry. An expired entry is removed
//! when a lookup meets it, when an insert needs its place, or by [`Conntrack::sweep`], which
//! visits a bounded number of entries per call (a worker calls it once per vector or when
//! idle).
//!
//! **Full table.** The table holds at most [`Config::max_entries`] flows: a pool of that
//! many entries, and an index of buckets sized for 90 % occupancy ([`table::LOAD`]) where
//! a full bucket makes room by moving one flow to its other bucket. When the pool is empty
//! (or neither bucket of a new flow can make room), the new flow takes the entry of an
//! expired flow of its two buckets, else of their unassured flow closest to expiring
//! (dropped early, as nf_conntrack's early_drop: unassured means not yet established, or a
//! UDP flow never answered), else it is refused and counted. A SYN flood therefore evicts
//! half-open flows, never established ones.
//!
//! **NAT.** Each entry keeps a 32-bit `nat` field ([`Conntrack::set_nat`]), unused by
//! tracking: NAT will store there the index of its binding (the translated tuple in a side
//! table indexed by binding, so that entries without NAT pay 4 bytes, not 40). A DNAT or SNAT
//! node looks the packet up (one lookup serves both directions), reads the binding, rewrites
//! in the original direction and reverses in the reply direction. The translated
//! (outside) tuple of a flow must also find the entry: NAT's step adds it to the index as a
//! second key pointing at the same entry, compared through the binding.
//!
//! **Memory.** An entry is 88 bytes with an IPv6 key (40-byte key, 32 bytes of TCP windows,
//! deadline, NAT index, state and flags); the index adds a 64-byte bucket per 7.2 flows (8
//! ways at 90 %), 8.9 bytes: 96.9 bytes per configured flow, allocated whole at start
//! ([`Conntrack::memory_bytes`]).

pub mod key;
pub mod table;
pub mod tcp;

#[cfg(test)]
mod tests;

use std::fmt;

pub use key::{proto, FlowKey, Tuple};
pub use table::{FlowId, NO_NAT};
pub use tcp::{flags as tcp_flags, Segment};

use table::{Entry, Placed, Table, F_ASSURED, F_ORIG_SWAPPED, F_SEEN_REPLY};
use tcp::Outcome;

/// Nanoseconds per tick of the timeouts: 2^30 ns, about 1.07 s.
pub const TICK_NS: u64 = 1 << 30;

/// The tick of a time in nanoseconds.
#[inline(always)]
fn tick(now_ns: u64) -> u32 {
    (now_ns >> 30).min(u32::MAX as u64) as u32
}

/// Ticks of at least `secs` seconds.
fn ticks(secs: u32) -> u32 {
    ((secs as u64 * 1_000_000_000).div_ceil(TICK_NS)).min(u32::MAX as u64) as u32
}

/// A flow's state, TCP's as netfilter names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FlowState {
    /// TCP: SYN seen in the original direction.
    SynSent = 0,
    /// TCP: SYN/ACK seen in the reply direction.
    SynRecv,
    /// TCP: the handshake completed.
    Established,
    /// TCP: a FIN seen.
    FinWait,
    /// TCP: the FIN acknowledged.
    CloseWait,
    /// TCP: FINs seen both ways.
    LastAck,
    /// TCP: the last FIN acknowledged.
    TimeWait,
    /// TCP: reset.
    Close,
    /// TCP: SYN seen both ways (simultaneous open).
    SynSent2,
    /// UDP: one direction seen.
    UdpUnreplied,
    /// UDP: both directions seen.
    UdpReplied,
    /// ICMP or ICMPv6 echo.
    Icmp,
    /// Another protocol.
    Other,
}

impl FlowState {
    /// How many states there are.
    pub const COUNT: usize = 13;

    /// Every state, in order.
    pub const ALL: [FlowState; FlowState::COUNT] = [
        FlowState::SynSent,
        FlowState::SynRecv,
        FlowState::Established,
        FlowState::FinWait,
        FlowState::CloseWait,
        FlowState::LastAck,
        FlowState::TimeWait,
        FlowState::Close,
        FlowState::SynSent2,
        FlowState::UdpUnreplied,
        FlowState::UdpReplied,
        FlowState::Icmp,
        FlowState::Other,
    ];

    /// The state of a byte (unknown bytes: [`FlowState::Other`]).
    pub fn from_u8(b: u8) -> FlowState {
        FlowState::ALL
            .get(b as usize)
            .copied()
            .unwrap_or(FlowState::Other)
    }

    /// Whether a TCP state.
    pub fn is_tcp(self) -> bool {
        (self as u8) <= FlowState::SynSent2 as u8
    }

    /// The name netfilter gives it (`conntrack -L`).
    pub fn name(self) -> &'static str {
        match self {
            FlowState::SynSent => "SYN_SENT",
            FlowState::SynRecv => "SYN_RECV",
            FlowState::Established => "ESTABLISHED",
            FlowState::FinWait => "FIN_WAIT",
            FlowState::CloseWait => "CLOSE_WAIT",
            FlowState::LastAck => "LAST_ACK",
            FlowState::TimeWait => "TIME_WAIT",
            FlowState::Close => "CLOSE",
            FlowState::SynSent2 => "SYN_SENT2",
            FlowState::UdpUnreplied => "UDP_UNREPLIED",
            FlowState::UdpReplied => "UDP_REPLIED",
            FlowState::Icmp => "ICMP",
            FlowState::Other => "OTHER",
        }
    }
}

/// Timeouts per state, in seconds. The defaults are netfilter's (Linux 6.1
/// `nf_conntrack_*_timeout_*`): five days for an established TCP flow is long, but it is what
/// operators of Linux firewalls expect, and idle long-lived flows (SSH, databases) survive
/// it; tables with many short flows may want less (pf uses 24 h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP SYN_SENT and SYN_SENT2 (netfilter: 120).
    pub tcp_syn_sent: u32,
    /// TCP SYN_RECV (60).
    pub tcp_syn_recv: u32,
    /// TCP ESTABLISHED (432,000: five days).
    pub tcp_established: u32,
    /// TCP FIN_WAIT (120).
    pub tcp_fin_wait: u32,
    /// TCP CLOSE_WAIT (60).
    pub tcp_close_wait: u32,
    /// TCP LAST_ACK (30).
    pub tcp_last_ack: u32,
    /// TCP TIME_WAIT (120).
    pub tcp_time_wait: u32,
    /// TCP CLOSE (10).
    pub tcp_close: u32,
    /// TCP with data unacknowledged: a plain ACK while either side waits for an
    /// acknowledgment caps the state's timeout to this (300).
    pub tcp_unacknowledged: u32,
    /// UDP, one direction seen (30).
    pub udp_unreplied: u32,
    /// UDP, both directions seen (120: netfilter's `udp_timeout_stream`).
    pub udp_replied: u32,
    /// ICMP and ICMPv6 echo (30).
    pub icmp: u32,
    /// Other protocols (600).
    pub generic: u32,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            tcp_syn_sent: 120,
            tcp_syn_recv: 60,
            tcp_established: 432_000,
            tcp_fin_wait: 120,
            tcp_close_wait: 60,
            tcp_last_ack: 30,
            tcp_time_wait: 120,
            tcp_close: 10,
            tcp_unacknowledged: 300,
            udp_unreplied: 30,
            udp_replied: 120,
            icmp: 30,
            generic: 600,
        }
    }
}

impl Timeouts {
    /// Seconds for a state.
    pub fn of(&self, s: FlowState) -> u32 {
        match s {
            FlowState::SynSent | FlowState::SynSent2 => self.tcp_syn_sent,
            FlowState::SynRecv => self.tcp_syn_recv,
            FlowState::Established => self.tcp_established,
            FlowState::FinWait => self.tcp_fin_wait,
            FlowState::CloseWait => self.tcp_close_wait,
            FlowState::LastAck => self.tcp_last_ack,
            FlowState::TimeWait => self.tcp_time_wait,
            FlowState::Close => self.tcp_close,
            FlowState::UdpUnreplied => self.udp_unreplied,
            FlowState::UdpReplied => self.udp_replied,
            FlowState::Icmp => self.icmp,
            FlowState::Other => self.generic,
        }
    }
}

/// A tracker's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The most flows the table holds (1 to 2^31).
    pub max_entries: usize,
    /// Timeouts per state.
    pub timeouts: Timeouts,
    /// Seed of the table's hash; `None`: a random one (so that an attacker cannot aim
    /// flows at one bucket).
    pub seed: Option<u64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_entries: 1 << 20,
            timeouts: Timeouts::default(),
            seed: None,
        }
    }
}

/// A setting out of range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// What the firewall matches on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum CtState {
    /// The first packet of a flow, or a packet of a flow no reply has been seen for yet.
    New,
    /// A packet of a flow that has seen both directions.
    Established,
    /// An ICMP error about a known flow.
    Related,
    /// Anything else: out of the window, flags the state does not allow, a packet that
    /// cannot open a flow and has none.
    #[default]
    Invalid,
}

/// Which way a packet goes in its flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Dir {
    /// As the flow's first packet.
    #[default]
    Original,
    /// The other way.
    Reply,
}

/// The transport part of a packet, as much as tracking needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4 {
    /// A TCP segment.
    Tcp(Segment),
    /// A UDP datagram.
    Udp,
    /// An ICMP or ICMPv6 echo request or reply (the identifier in both ports of the tuple).
    IcmpEcho {
        /// A reply.
        reply: bool,
    },
    /// An ICMP or ICMPv6 error (destination unreachable, time exceeded, packet too big,
    /// parameter problem) and the tuple of the packet it quotes, as quoted (source and
    /// destination of the original packet, ICMP echo quoted with its identifier in both
    /// ports).
    IcmpError {
        /// The quoted packet's tuple.
        inner: Tuple,
    },
    /// Another protocol (ports zero in the tuple).
    Other,
}

/// One parsed packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet {
    /// Addresses, ports, protocol, zone.
    pub tuple: Tuple,
    /// The transport part.
    pub l4: L4,
    /// Now, in nanoseconds of a monotonic clock.
    pub now_ns: u64,
}

/// The outcome of a lookup.
#[derive(Clone, Copy, Debug, Default)]
pub struct Verdict {
    /// The state for the firewall.
    pub state: CtState,
    /// The packet's direction in its flow (for `Related`: the error's direction, opposite
    /// to the quoted packet's).
    pub dir: Dir,
    /// The flow: `Established`, `Related` and a `New` packet of a flow not yet replied carry
    /// it; a first packet and `Invalid` ones without a flow do not.
    pub flow: Option<FlowId>,
    key: FlowKey,
    hash: u64,
    swapped: bool,
}

/// A packet's flow key and hash, read ahead of its lookup ([`Conntrack::prepare`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Prepared {
    key: FlowKey,
    swapped: bool,
    hash: u64,
}

/// Why [`Conntrack::create`] made no flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// No slot: counted as [`Counters::refused`].
    TableFull,
    /// The verdict was not `New`, or the packet cannot open a flow.
    NotNew,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refused::TableFull => "connection table full: no expired or unassured flow to replace",
            Refused::NotNew => "only a packet with verdict New that may open a flow creates one",
        })
    }
}

impl std::error::Error for Refused {}

/// What the tracker did, since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Flows created.
    pub created: u64,
    /// Flows refused for want of room (the table full and nothing to drop early).
    pub refused: u64,
    /// Unassured flows dropped to make room for new ones.
    pub early_dropped: u64,
    /// Flows removed on expiry (by lookups, inserts and sweeps).
    pub expired: u64,
    /// Flows removed by [`Conntrack::remove`].
    pub removed: u64,
    /// Packets found `Invalid`, all reasons.
    pub invalid: u64,
    /// Of which: TCP segments outside the window (RSTs included).
    pub out_of_window: u64,
    /// Of which: TCP flags the state does not allow, or a protocol unlike the flow's.
    pub bad_state: u64,
    /// Of which: packets that cannot open a flow and have none (TCP without SYN, echo
    /// replies, ICMP errors quoting no flow).
    pub no_flow: u64,
    /// ICMP errors related to a flow.
    pub related: u64,
    /// TCP segments passed without tracking (netfilter's ignored: a SYN on an established
    /// flow, a repeated SYN/ACK).
    pub ignored: u64,
    /// TCP flows in TIME_WAIT or CLOSE ended by a new SYN on the same tuple.
    pub reopened: u64,
}

/// What a fast path or an operator sees of a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowInfo {
    /// The tuple of the original direction.
    pub tuple: Tuple,
    /// Its state.
    pub state: FlowState,
    /// A packet was seen in the reply direction.
    pub seen_reply: bool,
    /// Not to be dropped early.
    pub assured: bool,
    /// The deadline, in nanoseconds (rounded to ticks).
    pub expires_ns: u64,
    /// The NAT binding, if any.
    pub nat: Option<u32>,
}

/// Packets per prefetch group in [`Conntrack::lookup_burst`].
const GROUP: usize = 16;

/// One worker's connection tracker.
pub struct Conntrack {
    table: Table,
    timeouts: [u32; FlowState::COUNT],
    unacked: u32,
    counters: Counters,
}

impl Conntrack {
    /// A tracker with its table allocated at full size.
    pub fn new(cfg: &Config) -> Result<Conntrack, ConfigError> {
        if cfg.max_entries == 0 || cfg.max_entries > 1 << 31 {
            return Err(ConfigError(format!(
                "conntrack max_entries {} out of range: give 1 to 2^31",
                cfg.max_entries
            )));
        }
        let seed = cfg.seed.unwrap_or_else(|| {
            use std::hash::BuildHasher;
            std::collections::hash_map::RandomState::new().hash_one(0x6374_u64)
        });
        let mut timeouts = [0; FlowState::COUNT];
        for (t, s) in timeouts.iter_mut().zip(FlowState::ALL) {
            *t = ticks(cfg.timeouts.of(s));
        }
        let Some(table) = Table::new(cfg.max_entries, seed) else {
            return Err(ConfigError(format!(
                "conntrack table of {} flows needs {} MiB, which cannot be allocated: lower max_entries",
                cfg.max_entries,
                Table::bytes_for(cfg.max_entries) >> 20
            )));
        };
        Ok(Conntrack {
            table,
            timeouts,
            unacked: ticks(cfg.timeouts.tcp_unacknowledged),
            counters: Counters::default(),
        })
    }

    /// Looks a packet up and tracks it in its flow. Never creates a flow (see
    /// [`Conntrack::create`]).
    #[inline]
    pub fn lookup(&mut self, p: &Packet) -> Verdict {
        let t = match &p.l4 {
            L4::IcmpError { inner } => inner,
            _ => &p.tuple,
        };
        let (key, swapped) = FlowKey::from_tuple(t);
        let h = self.table.hash(&key);
        let found = self.table.find(&key, h);
        self.decide(p, key, swapped, h, found)
    }

    /// The first half of a lookup, with no effect on the table: `p`'s flow key and hash,
    /// its two buckets prefetched. A node prepares a whole batch this way, then
    /// [`Conntrack::prefetch_entries`] each, then [`Conntrack::lookup_prepared`] each in
    /// order, so that the table's cache misses overlap, while every lookup still sees the
    /// flows the packets before it created.
    #[inline]
    pub fn prepare(&self, p: &Packet) -> Prepared {
        let t = match &p.l4 {
            L4::IcmpError { inner } => inner,
            _ => &p.tuple,
        };
        let (key, swapped) = FlowKey::from_tuple(t);
        let hash = self.table.hash(&key);
        self.table.prefetch_buckets(hash);
        Prepared { key, swapped, hash }
    }

    /// Prefetch the entries `pre`'s buckets point at (its buckets prefetched a while
    /// before by [`Conntrack::prepare`]).
    #[inline]
    pub fn prefetch_entries(&self, pre: &Prepared) {
        self.table.candidates(pre.hash);
    }

    /// [`Conntrack::lookup`] of a packet [`Conntrack::prepare`]d (the table may have
    /// changed since: the flow is found afresh).
    #[inline]
    pub fn lookup_prepared(&mut self, p: &Packet, pre: &Prepared) -> Verdict {
        let found = self.table.find(&pre.key, pre.hash);
        self.decide(p, pre.key, pre.swapped, pre.hash, found)
    }

    /// [`Conntrack::lookup`] of each packet, `out[i]` for `pkts[i]` (as many as the shorter
    /// of the two), in groups of 16: the buckets of all 16 are prefetched, then the entries
    /// their tags point at, then each packet is decided.
    pub fn lookup_burst(&mut self, pkts: &[Packet], out: &mut [Verdict]) {
        for (ps, os) in pkts.chunks(GROUP).zip(out.chunks_mut(GROUP)) {
            let mut keys = [(FlowKey::default(), false, 0u64); GROUP];
            for (p, k) in ps.iter().zip(keys.iter_mut()) {
                let t = match &p.l4 {
                    L4::IcmpError { inner } => inner,
                    _ => &p.tuple,
                };
                let (key, swapped) = FlowKey::from_tuple(t);
                let h = self.table.hash(&key);
                self.table.prefetch_buckets(h);
                *k = (key, swapped, h);
            }
            let mut cands = [table::Candidates::default(); GROUP];
            for (k, c) in keys.iter().zip(cands.iter_mut()).take(ps.len()) {
                *c = self.table.candidates(k.2);
            }
            for ((p, o), (k, c)) in ps.iter().zip(os.iter_mut()).zip(keys.iter().zip(&cands)) {
                let found = self.table.find_among(&k.0, c);
                *o = self.decide(p, k.0, k.1, k.2, found);
            }
        }
    }

    fn decide(
        &mut self,
        p: &Packet,
        key: FlowKey,
        swapped: bool,
        hash: u64,
        found: Option<u32>,
    ) -> Verdict {
        let now = tick(p.now_ns);
        let mut v = Verdict {
            state: CtState::Invalid,
            dir: Dir::Original,
            flow: None,
            key,
            hash,
            swapped,
        };
        let found = match found.and_then(|id| self.table.get(id).map(|e| (id, e.expires))) {
            Some((id, expires)) if expires <= now => {
                self.table.remove(id);
                self.counters.expired += 1;
                None
            }
            f => f.map(|(id, _)| id),
        };
        let Some((id, e)) = found.and_then(|id| self.table.get_mut(id).map(|e| (id, e))) else {
            return self.first(p, v);
        };
        let orig = swapped == (e.flags & F_ORIG_SWAPPED != 0);
        v.dir = if orig { Dir::Original } else { Dir::Reply };
        v.flow = Some(FlowId(id));
        if let L4::IcmpError { .. } = p.l4 {
            // The error travels against the packet it quotes.
            v.dir = if orig { Dir::Reply } else { Dir::Original };
            v.state = CtState::Related;
            self.counters.related += 1;
            return v;
        }
        let dir = (!orig) as usize;
        let old = e.flow_state();
        let mut cap = u32::MAX;
        let ok = match (&p.l4, old) {
            (L4::Tcp(seg), s) if s.is_tcp() => match tcp::track(e, dir, seg) {
                Outcome::Tracked => {
                    if e.flow_state() == FlowState::Established
                        && matches!(old, FlowState::SynRecv | FlowState::Established)
                    {
                        e.flags |= F_ASSURED;
                    }
                    if tcp::waits_for_ack(e, seg) {
                        cap = self.unacked;
                    }
                    Ok(())
                }
                Outcome::Ignored => {
                    self.counters.ignored += 1;
                    v.state = if e.flags & F_SEEN_REPLY != 0 || dir == 1 {
                        CtState::Established
                    } else {
                        CtState::New
                    };
                    return v;
                }
                Outcome::BadFlags => Err(false),
                Outcome::OutOfWindow => Err(true),
                Outcome::Reopen => {
                    self.table.remove(id);
                    self.counters.reopened += 1;
                    v.flow = None;
                    v.dir = Dir::Original;
                    return self.first(p, v);
                }
            },
            (L4::Udp, FlowState::UdpUnreplied | FlowState::UdpReplied) => {
                if dir == 1 {
                    e.state = FlowState::UdpReplied as u8;
                    e.flags |= F_ASSURED;
                }
                Ok(())
            }
            (L4::IcmpEcho { reply }, FlowState::Icmp) => {
                if *reply && dir == 0 {
                    Err(false)
                } else {
                    Ok(())
                }
            }
            (L4::Other, FlowState::Other) => Ok(()),
            _ => Err(false),
        };
        match ok {
            Ok(()) => {
                if dir == 1 {
                    e.flags |= F_SEEN_REPLY;
                }
                let t = self
                    .timeouts
                    .get(e.state as usize)
                    .copied()
                    .unwrap_or(u32::MAX);
                e.expires = now.saturating_add(t.min(cap));
                v.state = if e.flags & F_SEEN_REPLY != 0 {
                    CtState::Established
                } else {
                    CtState::New
                };
            }
            Err(window) => {
                self.counters.invalid += 1;
                if window {
                    self.counters.out_of_window += 1;
                } else {
                    self.counters.bad_state += 1;
                }
            }
        }
        v
    }

    /// The verdict on a packet without a flow: `New` if it may open one.
    fn first(&mut self, p: &Packet, mut v: Verdict) -> Verdict {
        let opens = match &p.l4 {
            L4::Tcp(seg) => seg.is_syn_only(),
            L4::Udp | L4::Other => true,
            L4::IcmpEcho { reply } => !reply,
            L4::IcmpError { .. } => false,
        };
        if opens {
            v.state = CtState::New;
        } else {
            v.state = CtState::Invalid;
            self.counters.invalid += 1;
            self.counters.no_flow += 1;
        }
        v
    }

    /// Creates the flow of a `New` packet the rule set accepted, from the packet and its
    /// verdict. A flow already there (a repeated first packet) is returned as it is.
    pub fn create(&mut self, p: &Packet, v: &Verdict) -> Result<FlowId, Refused> {
        if v.state != CtState::New {
            return Err(Refused::NotNew);
        }
        if let Some(id) = v.flow.filter(|_| self.holds(v)) {
            return Ok(id);
        }
        let now = tick(p.now_ns);
        let mut e = Entry {
            key: v.key,
            nat: NO_NAT,
            flags: if v.swapped { F_ORIG_SWAPPED } else { 0 },
            ..Entry::default()
        };
        match &p.l4 {
            L4::Tcp(seg) if seg.is_syn_only() => tcp::init(&mut e, seg),
            L4::Udp => e.state = FlowState::UdpUnreplied as u8,
            L4::IcmpEcho { reply: false } => e.state = FlowState::Icmp as u8,
            L4::Other => e.state = FlowState::Other as u8,
            _ => return Err(Refused::NotNew),
        }
        let t = self
            .timeouts
            .get(e.state as usize)
            .copied()
            .unwrap_or(u32::MAX);
        e.expires = now.saturating_add(t);
        let id = match self.table.insert(v.hash, &e, now) {
            Placed::Existing(id) => return Ok(FlowId(id)),
            Placed::Free(id) => id,
            Placed::OverExpired(id) => {
                self.counters.expired += 1;
                id
            }
            Placed::OverUnassured(id) => {
                self.counters.early_dropped += 1;
                id
            }
            Placed::Full => {
                self.counters.refused += 1;
                return Err(Refused::TableFull);
            }
        };
        self.counters.created += 1;
        Ok(FlowId(id))
    }

    /// Whether the verdict's flow is still the one it was looked up for. A handle stays valid
    /// until its flow is removed, expires or is dropped early; a node that creates flows
    /// between a burst's lookups and their use (a create may drop an unassured flow early
    /// and reuse its entry) checks with this before it trusts a handle of that burst.
    #[inline]
    pub fn holds(&self, v: &Verdict) -> bool {
        v.flow
            .and_then(|id| self.table.get(id.0))
            .is_some_and(|e| e.key == v.key)
    }

    /// Removes the expired flows among the next `entries` entries, going round the table;
    /// bounded work for a worker to do once per vector (a table of N entries is swept whole
    /// every N / `entries` calls). The number removed.
    pub fn sweep(&mut self, now_ns: u64, entries: usize) -> usize {
        let n = self.table.sweep(tick(now_ns), entries);
        self.counters.expired += n as u64;
        n
    }

    /// Removes a flow. Whether it was there. (A handle kept after its flow ended may name a
    /// newer flow: see [`Conntrack::holds`].)
    pub fn remove(&mut self, id: FlowId) -> bool {
        let r = self.table.remove(id.0);
        self.counters.removed += r as u64;
        r
    }

    /// Sets a flow's NAT binding ([`NO_NAT`]: none). Whether the flow exists.
    pub fn set_nat(&mut self, id: FlowId, nat: u32) -> bool {
        match self.table.get_mut(id.0) {
            Some(e) => {
                e.nat = nat;
                true
            }
            None => false,
        }
    }

    /// A flow's NAT binding, if it has one.
    #[inline]
    pub fn nat(&self, id: FlowId) -> Option<u32> {
        self.table.get(id.0).map(|e| e.nat).filter(|&n| n != NO_NAT)
    }

    /// The flow in entry `index` (below [`Conntrack::max_entries`]), if one is there: for
    /// scans a step at a time.
    pub fn flow_at(&self, index: u32) -> Option<(FlowId, FlowInfo)> {
        let e = self.table.get(index)?;
        Some((FlowId(index), info(e)))
    }

    /// What there is to see of a flow.
    pub fn flow(&self, id: FlowId) -> Option<FlowInfo> {
        let e = self.table.get(id.0)?;
        Some(info(e))
    }

    /// Every flow (a control-side scan of the whole table).
    pub fn flows(&self) -> impl Iterator<Item = (FlowId, FlowInfo)> + '_ {
        self.table.iter().map(|(i, e)| (FlowId(i), info(e)))
    }

    /// Flows per state, indexed by `FlowState as usize` (a control-side scan).
    pub fn state_counts(&self) -> [usize; FlowState::COUNT] {
        let mut c = [0; FlowState::COUNT];
        for (_, e) in self.table.iter() {
            if let Some(n) = c.get_mut(e.state as usize) {
                *n += 1;
            }
        }
        c
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Flows held.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no flow is held.
    pub fn is_empty(&self) -> bool {
        self.table.len() == 0
    }

    /// The most flows the table holds.
    pub fn max_entries(&self) -> usize {
        self.table.max_len()
    }

    /// Slots of the index (more than `max_entries`: buckets are sized for 90 % occupancy).
    pub fn slots(&self) -> usize {
        self.table.slots()
    }

    /// Bytes allocated for the table (entries and index).
    pub fn memory_bytes(&self) -> usize {
        self.table.memory_bytes()
    }

    /// Bytes of one entry, without the index.
    pub const ENTRY_BYTES: usize = std::mem::size_of::<Entry>();

    /// Removes every flow (counters stay).
    pub fn clear(&mut self) {
        self.table.clear();
    }
}

fn info(e: &Entry) -> FlowInfo {
    FlowInfo {
        tuple: e.key.tuple(e.flags & F_ORIG_SWAPPED != 0),
        state: e.flow_state(),
        seen_reply: e.flags & F_SEEN_REPLY != 0,
        assured: e.assured(),
        expires_ns: (e.expires as u64) << 30,
        nat: Some(e.nat).filter(|&n| n != NO_NAT),
    }
}
