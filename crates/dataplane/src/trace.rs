//! Packet trace, VPP's `trace add`: the next N packets that match a filter carry a flag
//! through the graph, and every node that handles one appends a compact step (node and
//! decision) to its record. Records leave the worker through an SPSC queue; the control
//! side turns them into text.
//!
//! Cost when nothing is armed: one relaxed load and branch per vector ([`Tracer::begin`]);
//! the graph then runs its untraced instantiation, where every trace hook is compiled out.
//! Armed, the filter runs once per received packet and steps are written only for the
//! flagged ones. Nothing here allocates, locks or panics on the worker.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::arm::{ArmReceiver, ArmSender};
use crate::buffer::{Pkt, VECTOR_SIZE};
use crate::counters::Reason;

/// Packet carries a trace record.
pub const F_TRACED: u16 = 4;
/// Steps kept per record; later ones are counted in [`TraceRecord::truncated`].
pub const MAX_STEPS: usize = 16;
/// Traced packets per vector (the rest of the vector is left untraced).
pub const MAX_PER_VECTOR: usize = 32;
/// Frame bytes copied at entry for the header summary.
pub const HEAD_BYTES: usize = 96;
/// Terms of one filter (all must hold).
pub const MAX_TERMS: usize = 16;

/// An address prefix of either family (IPv4 in the low 32 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    /// True for IPv6.
    pub v6: bool,
    /// Address bits, IPv4 as `u32` widened.
    pub addr: u128,
    /// Prefix length.
    pub len: u8,
}

impl Prefix {
    /// Whether `a` (of family `v6`) lies inside.
    #[inline]
    pub fn contains(&self, v6: bool, a: u128) -> bool {
        if v6 != self.v6 {
            return false;
        }
        let bits = if v6 { 128u32 } else { 32 };
        let len = (self.len as u32).min(bits);
        if len == 0 {
            return true;
        }
        let shift = bits - len;
        (a >> shift) == (self.addr >> shift)
    }
}

/// One predicate of a filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pred {
    /// IPv4 packet.
    Ip4,
    /// IPv6 packet.
    Ip6,
    /// ARP frame.
    Arp,
    /// Source address inside.
    Src(Prefix),
    /// Destination address inside.
    Dst(Prefix),
    /// Source or destination inside.
    Host(Prefix),
    /// IP protocol (IPv6: first next header).
    Proto(u8),
    /// TCP/UDP/SCTP source or destination port.
    Port(u16),
}

/// A predicate, possibly negated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Term {
    /// Holds when the predicate does not.
    pub negate: bool,
    /// The predicate.
    pub pred: Pred,
}

/// A compiled filter: an optional ingress port and a conjunction of terms. Plain data, so
/// it crosses to the worker by copy and is evaluated without allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Filter {
    /// Only packets received on this port.
    pub port: Option<u16>,
    terms: [Term; MAX_TERMS],
    n: u8,
}

impl Default for Filter {
    fn default() -> Self {
        Filter {
            port: None,
            terms: [Term {
                negate: false,
                pred: Pred::Ip4,
            }; MAX_TERMS],
            n: 0,
        }
    }
}

impl Filter {
    /// Add a term; false when the filter is full.
    pub fn push(&mut self, t: Term) -> bool {
        match self.terms.get_mut(self.n as usize) {
            Some(slot) => {
                *slot = t;
                self.n += 1;
                true
            }
            None => false,
        }
    }
    /// The terms.
    pub fn terms(&self) -> &[Term] {
        &self.terms[..(self.n as usize).min(MAX_TERMS)]
    }
    /// Whether a frame received on `port` matches.
    pub fn matches(&self, port: u16, frame: &[u8]) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        if self.n == 0 {
            return true;
        }
        let f = Fields::parse(frame);
        self.terms()
            .iter()
            .all(|t| t.negate != f.satisfies(&t.pred))
    }
}

/// Network-layer kind of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L3 {
    /// IPv4.
    Ip4,
    /// IPv6.
    Ip6,
    /// ARP.
    Arp,
    /// Anything else (or truncated).
    Other,
}

/// Header fields of a frame, as far as its bytes allow (for filters and summaries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fields {
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// EtherType after VLAN tags (0 if truncated).
    pub ethertype: u16,
    /// Outer VLAN id.
    pub vlan: Option<u16>,
    /// L3 kind.
    pub l3: L3,
    /// Source address (IPv4 in the low bits; ARP: sender protocol address).
    pub src: u128,
    /// Destination address (ARP: target protocol address).
    pub dst: u128,
    /// IP protocol / IPv6 next header.
    pub proto: Option<u8>,
    /// TTL or hop limit.
    pub ttl: u8,
    /// L4 ports for TCP/UDP/SCTP (first fragment only).
    pub ports: Option<(u16, u16)>,
}

impl Fields {
    /// Parse what the bytes hold; never fails, missing parts stay empty.
    pub fn parse(frame: &[u8]) -> Fields {
        let mut f = Fields {
            dst_mac: [0; 6],
            src_mac: [0; 6],
            ethertype: 0,
            vlan: None,
            l3: L3::Other,
            src: 0,
            dst: 0,
            proto: None,
            ttl: 0,
            ports: None,
        };
        if let (Some(d), Some(s)) = (frame.get(0..6), frame.get(6..12)) {
            f.dst_mac.copy_from_slice(d);
            f.src_mac.copy_from_slice(s);
        }
        let Ok(l2) = wire::parse_l2(frame) else {
            return f;
        };
        f.ethertype = l2.ethertype;
        f.vlan = l2.vlan;
        let l3 = frame.get(l2.l3_offset..).unwrap_or(&[]);
        match l2.ethertype {
            wire::ethertype::IPV4 => {
                let Some(h) = l3.get(..20) else { return f };
                f.l3 = L3::Ip4;
                f.ttl = h[8];
                f.proto = Some(h[9]);
                f.src = u32::from_be_bytes([h[12], h[13], h[14], h[15]]) as u128;
                f.dst = u32::from_be_bytes([h[16], h[17], h[18], h[19]]) as u128;
                let ihl = (h[0] & 0x0f) as usize * 4;
                let first = u16::from_be_bytes([h[6], h[7]]) & 0x1fff == 0;
                if first && ihl >= 20 {
                    f.ports = wire::flow_ports(h[9], l3.get(ihl..).unwrap_or(&[]));
                }
            }
            wire::ethertype::IPV6 => {
                let Some(h) = l3.get(..40) else { return f };
                f.l3 = L3::Ip6;
                f.ttl = h[7];
                f.proto = Some(h[6]);
                let mut a = [0u8; 16];
                a.copy_from_slice(&h[8..24]);
                f.src = u128::from_be_bytes(a);
                a.copy_from_slice(&h[24..40]);
                f.dst = u128::from_be_bytes(a);
                f.ports = wire::flow_ports(h[6], l3.get(40..).unwrap_or(&[]));
            }
            wire::ethertype::ARP => {
                f.l3 = L3::Arp;
                // Ethernet/IPv4 ARP: sender IP at 14, target IP at 24.
                if let (Some(s), Some(t)) = (l3.get(14..18), l3.get(24..28)) {
                    f.src = u32::from_be_bytes([s[0], s[1], s[2], s[3]]) as u128;
                    f.dst = u32::from_be_bytes([t[0], t[1], t[2], t[3]]) as u128;
                }
            }
            _ => {}
        }
        f
    }

    fn satisfies(&self, p: &Pred) -> bool {
        let ip = matches!(self.l3, L3::Ip4 | L3::Ip6);
        let v6 = self.l3 == L3::Ip6;
        match *p {
            Pred::Ip4 => self.l3 == L3::Ip4,
            Pred::Ip6 => v6,
            Pred::Arp => self.l3 == L3::Arp,
            Pred::Src(x) => ip && x.contains(v6, self.src),
            Pred::Dst(x) => ip && x.contains(v6, self.dst),
            Pred::Host(x) => ip && (x.contains(v6, self.src) || x.contains(v6, self.dst)),
            Pred::Proto(n) => self.proto == Some(n),
            Pred::Port(n) => self.ports.is_some_and(|(s, d)| s == n || d == n),
        }
    }
}

/// One node's decision about a traced packet. Compact; text is made on the control side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// ethernet-input classified the frame.
    EthernetInput {
        /// EtherType after VLAN tags.
        ethertype: u16,
        /// Outer VLAN id.
        vlan: Option<u16>,
        /// Link-layer broadcast/multicast destination.
        l2_mcast: bool,
    },
    /// ip4-input / ip6-input accepted the packet for lookup.
    IpInput {
        /// IPv6.
        v6: bool,
    },
    /// ip4-lookup / ip6-lookup found a forwarding route (local, glean and blackhole
    /// routes show as the punt or drop they cause).
    Lookup {
        /// IPv6.
        v6: bool,
        /// Next-hop id (after ECMP resolution).
        nh: u32,
        /// Egress port of the next hop.
        port: u16,
    },
    /// ip4-rewrite / ip6-rewrite rewrote the packet for transmission.
    Rewrite {
        /// IPv6.
        v6: bool,
        /// TTL / hop limit as received.
        ttl: u8,
        /// TTL / hop limit as sent.
        new_ttl: u8,
        /// Egress port.
        port: u16,
        /// New source MAC.
        src_mac: [u8; 6],
        /// New destination MAC.
        dst_mac: [u8; 6],
    },
    /// ip4-rewrite handed the packet to ip4-frag (larger than the egress MTU, DF clear).
    ToFrag {
        /// Egress MTU.
        mtu: u16,
    },
    /// ip4-frag sent the packet as fragments.
    Fragmented {
        /// Number of fragments.
        count: u16,
        /// Egress port.
        port: u16,
    },
    /// What a feature node noted about a traced packet ([`crate::feature::Batch::note`]):
    /// two numbers it alone knows how to read (an IPsec SA's SPI and sequence number, say;
    /// see [`crate::feature::Feature::describe_note`]).
    FeatureNote {
        /// The feature's id in its registry.
        id: u8,
        /// Its first number.
        a: u32,
        /// Its second.
        b: u64,
    },
    /// A feature node (see [`crate::feature`]) let the packet go on, or dropped it.
    Feature {
        /// The feature's id in its registry.
        id: u8,
        /// The index of its drop reason, if it dropped the packet.
        drop: Option<u8>,
    },
    /// A node counted `reason` and handed the packet to icmp4-error / icmp6-error.
    ToIcmp(Reason),
    /// icmp4-error / icmp6-error turned the packet into an ICMP error back to its source.
    IcmpError {
        /// ICMPv6.
        v6: bool,
        /// ICMP type.
        ty: u8,
        /// ICMP code.
        code: u8,
    },
    /// Dropped, counted under the reason (whose node decided).
    Drop(Reason),
    /// Punted to the Linux stack.
    Punt(Reason),
    /// Queued for transmission on a port.
    Tx {
        /// Egress port.
        port: u16,
    },
}

/// The path of one packet.
#[derive(Clone, Copy, Debug)]
pub struct TraceRecord {
    /// Worker clock (ns) when the packet entered the graph.
    pub ts_ns: u64,
    /// Ingress port.
    pub rx_port: u16,
    /// Frame length at entry.
    pub len: u16,
    /// First bytes of the frame at entry.
    pub head: [u8; HEAD_BYTES],
    /// Valid bytes of `head`.
    pub head_len: u8,
    steps: [Step; MAX_STEPS],
    nsteps: u8,
    /// Steps that did not fit.
    pub truncated: u8,
    buf: u32,
}

impl TraceRecord {
    fn empty() -> TraceRecord {
        TraceRecord {
            ts_ns: 0,
            rx_port: 0,
            len: 0,
            head: [0; HEAD_BYTES],
            head_len: 0,
            steps: [Step::Tx { port: 0 }; MAX_STEPS],
            nsteps: 0,
            truncated: 0,
            buf: 0,
        }
    }
    /// The steps in order.
    pub fn steps(&self) -> &[Step] {
        &self.steps[..(self.nsteps as usize).min(MAX_STEPS)]
    }
    /// The frame bytes captured at entry.
    pub fn head(&self) -> &[u8] {
        &self.head[..(self.head_len as usize).min(HEAD_BYTES)]
    }
}

/// A request from the control side.
#[derive(Clone, Copy, Debug)]
pub struct TraceArm {
    /// Packets to trace from now on (replaces what was left); 0 disarms.
    pub count: u32,
    /// Which packets.
    pub filter: Filter,
}

/// What worker and control side share about one worker's tracer.
#[derive(Default)]
pub struct TraceShared {
    /// Records lost because the record queue was full.
    pub lost: AtomicU64,
}

/// Worker side: owned by the graph.
pub struct Tracer {
    shared: Arc<TraceShared>,
    cmds: ArmReceiver<TraceArm>,
    records_out: rtrb::Producer<TraceRecord>,
    remaining: u32,
    filter: Filter,
    records: Box<[TraceRecord; MAX_PER_VECTOR]>,
    used: usize,
}

/// Control side of one worker's tracer.
pub struct TraceHandle {
    /// Shared flags and counters.
    pub shared: Arc<TraceShared>,
    cmds: ArmSender<TraceArm>,
    records_in: rtrb::Consumer<TraceRecord>,
}

/// A tracer and its control handle, with room for `capacity` finished records in flight.
pub fn channel(capacity: usize) -> (TraceHandle, Tracer) {
    let shared = Arc::new(TraceShared::default());
    let (cp, cc) = crate::arm::channel();
    let (rp, rc) = rtrb::RingBuffer::new(capacity.max(1));
    (
        TraceHandle {
            shared: shared.clone(),
            cmds: cp,
            records_in: rc,
        },
        Tracer {
            shared,
            cmds: cc,
            records_out: rp,
            remaining: 0,
            filter: Filter::default(),
            records: Box::new([TraceRecord::empty(); MAX_PER_VECTOR]),
            used: 0,
        },
    )
}

impl TraceHandle {
    /// Arm (or with `count` 0, disarm) the worker. Fails only if requests pile up unread
    /// (a stuck worker).
    pub fn arm(&mut self, req: TraceArm) -> Result<(), &'static str> {
        self.cmds
            .send(req, "worker has not taken its previous trace request")
    }
    /// The next finished record, if any.
    pub fn pop(&mut self) -> Option<TraceRecord> {
        self.records_in.pop().ok()
    }
}

impl Tracer {
    /// Once per vector: take requests and say whether this vector is to be traced.
    #[inline]
    pub fn begin(&mut self) -> bool {
        if !self.cmds.raised() {
            return false;
        }
        self.begin_slow()
    }

    #[cold]
    fn begin_slow(&mut self) -> bool {
        while let Some(req) = self.cmds.next() {
            self.remaining = req.count;
            self.filter = req.filter;
        }
        if !self.cmds.settle(self.remaining != 0) {
            return false;
        }
        self.used = 0;
        true
    }

    /// At graph entry: start a record for `p` if it matches and budget is left.
    pub(crate) fn select(&mut self, p: &mut Pkt, frame: &[u8], now_ns: u64) {
        p.flags &= !F_TRACED;
        if self.remaining == 0 || self.used >= MAX_PER_VECTOR {
            return;
        }
        if !self.filter.matches(p.rx_port, frame) {
            return;
        }
        let Some(r) = self.records.get_mut(self.used) else {
            return;
        };
        self.used += 1;
        self.remaining -= 1;
        p.flags |= F_TRACED;
        let n = frame.len().min(HEAD_BYTES);
        r.head[..n].copy_from_slice(&frame[..n]);
        r.head_len = n as u8;
        r.ts_ns = now_ns;
        r.rx_port = p.rx_port;
        r.len = p.len;
        r.nsteps = 0;
        r.truncated = 0;
        r.buf = p.buf;
    }

    /// Append a step to the record of `p` (a traced packet).
    pub(crate) fn step(&mut self, p: &Pkt, s: Step) {
        if p.flags & F_TRACED == 0 {
            return;
        }
        let used = self.used.min(MAX_PER_VECTOR);
        // A packet keeps its buffer through the graph (ICMP errors are built in place).
        let Some(r) = self.records[..used].iter_mut().find(|r| r.buf == p.buf) else {
            return;
        };
        match r.steps.get_mut(r.nsteps as usize) {
            Some(slot) => {
                *slot = s;
                r.nsteps += 1;
            }
            None => r.truncated = r.truncated.saturating_add(1),
        }
    }

    /// After the vector: hand the finished records to the control side.
    pub(crate) fn finish(&mut self) {
        let used = std::mem::take(&mut self.used).min(MAX_PER_VECTOR);
        for r in &self.records[..used] {
            if self.records_out.push(*r).is_err() {
                self.shared.lost.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Frames per vector are bounded: the record arena never needs more than one per packet.
const _: () = assert!(MAX_PER_VECTOR <= VECTOR_SIZE);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_contains_by_family_and_length() {
        let p = Prefix {
            v6: false,
            addr: 0x0a01_0000,
            len: 16,
        };
        assert!(p.contains(false, 0x0a01_ffff));
        assert!(!p.contains(false, 0x0a02_0000));
        assert!(!p.contains(true, 0x0a01_0000));
        let all = Prefix {
            v6: true,
            addr: 0,
            len: 0,
        };
        assert!(all.contains(true, u128::MAX));
    }

    #[test]
    fn arm_and_disarm_through_the_flag() {
        let (mut h, mut t) = channel(8);
        assert!(!t.begin());
        h.arm(TraceArm {
            count: 2,
            filter: Filter::default(),
        })
        .unwrap();
        assert!(t.begin());
        h.arm(TraceArm {
            count: 0,
            filter: Filter::default(),
        })
        .unwrap();
        assert!(!t.begin());
        assert!(!t.begin());
    }
}
