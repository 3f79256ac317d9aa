//! Per-worker counters: written by one worker without locks or read-modify-write atomics,
//! summed by anyone.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A counter owned by one writer thread; readers on other threads see a recent value.
#[derive(Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Add `n`. Only the owning worker calls this: a plain load and store, no lock prefix.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }
    /// Current value.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// What happened to the packets a counter counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Dropped.
    Drop,
    /// Handed to the Linux stack.
    Punt,
    /// Informational (forwarded, generated).
    Info,
}

impl Kind {
    /// `drop`, `punt` or `info`, for JSON and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Drop => "drop",
            Kind::Punt => "punt",
            Kind::Info => "info",
        }
    }
}

macro_rules! reasons {
    ($($id:ident => $kind:ident, $node:literal, $desc:literal;)*) => {
        /// Every named reason a node counts, `show errors`-style.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum Reason { $(#[doc = $desc] $id),* }
        impl Reason {
            /// All reasons in declaration order.
            pub const ALL: &'static [Reason] = &[$(Reason::$id),*];
            /// Number of reasons.
            pub const COUNT: usize = Self::ALL.len();
            /// Graph node that counts it.
            pub fn node(self) -> &'static str { match self { $(Reason::$id => $node),* } }
            /// Human description.
            pub fn desc(self) -> &'static str { match self { $(Reason::$id => $desc),* } }
            /// Drop, punt or informational.
            pub fn kind(self) -> Kind { match self { $(Reason::$id => Kind::$kind),* } }
            /// Stable snake-case name for JSON and metrics.
            pub fn name(self) -> &'static str { match self { $(Reason::$id => stringify!($id)),* } }
        }
    };
}

reasons! {
    EthRunt => Drop, "ethernet-input", "frame shorter than an Ethernet header";
    EthMalformed => Drop, "ethernet-input", "bad VLAN tagging (truncated or more than 2 tags)";
    EthUnknownType => Drop, "ethernet-input", "ethertype not handled";
    EthNotForUs => Drop, "ethernet-input", "unicast destination MAC is not the port's";
    EthVlanNoSubif => Drop, "ethernet-input", "802.1Q/802.1ad-tagged frame: the port has no such VLAN sub-interface";
    Ip4Truncated => Drop, "ip4-input", "IPv4 header truncated";
    Ip4BadVersion => Drop, "ip4-input", "IP version is not 4";
    Ip4BadIhl => Drop, "ip4-input", "IPv4 header length below 20 bytes";
    Ip4BadLength => Drop, "ip4-input", "IPv4 total length inconsistent with header or frame";
    Ip4BadChecksum => Drop, "ip4-input", "IPv4 header checksum error";
    Ip4BadOptions => Drop, "ip4-input", "malformed IPv4 options (answered by a parameter problem)";
    Ip4SourceRoute => Drop, "ip4-input", "loose or strict source route option (RFC 7126)";
    Ip4OwnSrc => Drop, "ip4-input", "source is one of the router's own addresses (spoofed)";
    Ip4LinkLocalSrc => Drop, "ip4-lookup", "link-local source (169.254/16) cannot be forwarded (RFC 3927)";
    Ip4MartianSrc => Drop, "ip4-input", "source is zero-net, loopback, multicast or broadcast";
    Ip4MartianDst => Drop, "ip4-input", "destination is zero-net or loopback";
    Ip4NoRoute => Drop, "ip4-lookup", "no route to destination";
    Ip4Blackhole => Drop, "ip4-lookup", "blackhole route";
    Ip4TtlExpired => Drop, "ip4-rewrite", "TTL expired in transit";
    Ip4FragNeeded => Drop, "ip4-rewrite", "larger than egress MTU with DF set";
    Ip4FragFailed => Drop, "ip4-frag", "fragmentation impossible (no buffers or MTU too small)";
    Ip6Truncated => Drop, "ip6-input", "IPv6 header truncated";
    Ip6BadVersion => Drop, "ip6-input", "IP version is not 6";
    Ip6BadLength => Drop, "ip6-input", "IPv6 payload length exceeds frame";
    Ip6MartianSrc => Drop, "ip6-input", "source is multicast, loopback or unspecified";
    Ip6MartianDst => Drop, "ip6-input", "destination is loopback or unspecified";
    Ip6LinkLocalSrc => Drop, "ip6-input", "link-local source cannot be forwarded";
    Ip6OwnSrc => Drop, "ip6-input", "source is one of the router's own addresses (spoofed)";
    Ip6NoRoute => Drop, "ip6-lookup", "no route to destination";
    Ip6Blackhole => Drop, "ip6-lookup", "blackhole route";
    Ip6HopLimitExpired => Drop, "ip6-rewrite", "hop limit expired in transit";
    Ip6TooBig => Drop, "ip6-rewrite", "larger than egress MTU";
    Ip6FragFailed => Drop, "ip6-frag", "fragmenting the router's own packet impossible (no buffers, extension headers, MTU too small)";
    IcmpRateLimited => Drop, "icmp-error", "ICMP error suppressed by rate limit";
    IcmpRateLimitedPeer => Drop, "icmp-error", "ICMP error suppressed by the per-destination limit (6, then 1 a second)";
    IcmpSuppressed => Drop, "icmp-error", "no ICMP error for errors, fragments, multicast or bad sources";
    IcmpNoSource => Drop, "icmp-error", "ingress port has no address to send an ICMP error from";
    IcmpNoRouteBack => Drop, "icmp-error", "no route back to the source of an errored packet";
    FeatureDrop => Drop, "feature", "dropped by a feature node (its own counters say why)";
    GraphLoop => Drop, "graph", "packet still in the graph after the round limit";
    PuntQueueFull => Drop, "punt", "punt queue full";
    PuntNoKernelPath => Drop, "punt", "for the kernel, but arrived on an AF_XDP port, whose frames cannot be handed back to the kernel's receive path";
    TxQueueFull => Drop, "port-tx", "transmit queue full";
    NoSuchPort => Drop, "port-tx", "next hop names a port that does not exist";
    TxPortDown => Drop, "port-tx", "next hop's port is down (admin down or no carrier): sent while the routes through it were being withdrawn";
    InjectNoBuffer => Drop, "kernel-inject", "frame from the kernel (TAP) with no free buffer, too big, or for no port";
    PuntArp => Punt, "ethernet-input", "ARP to the Linux stack";
    PuntL2Mcast => Punt, "ip4-input", "link-layer broadcast/multicast to the Linux stack";
    PuntLocal => Punt, "ip-lookup", "addressed to the router";
    PuntUnresolved => Punt, "ip-lookup", "next hop not resolved yet (glean)";
    PuntMulticast => Punt, "ip-input", "multicast or broadcast control traffic";
    PuntLinkLocal => Punt, "ip-input", "link-local destination";
    Ip4Forwarded => Info, "ip4-rewrite", "IPv4 packets forwarded";
    Ip6Forwarded => Info, "ip6-rewrite", "IPv6 packets forwarded";
    Ip4Fragments => Info, "ip4-frag", "IPv4 fragments sent";
    Ip6Fragments => Info, "ip6-frag", "IPv6 fragments of the router's own packets sent";
    Icmp4Sent => Info, "icmp-error", "ICMPv4 errors sent";
    Icmp6Sent => Info, "icmp-error", "ICMPv6 errors sent";
    CsumCompleted => Info, "ip-rewrite", "partial TCP/UDP checksums completed (the sender's checksum offload)";
}

/// One worker's counters, indexed by [`Reason`]. Cache-line aligned so workers never share
/// a line.
#[repr(align(64))]
pub struct Counters {
    by_reason: [Counter; Reason::COUNT],
    /// Packets received.
    pub rx: Counter,
    /// Packets transmitted.
    pub tx: Counter,
    /// Vectors processed.
    pub vectors: Counter,
    /// Polls that found no packet.
    pub idle_polls: Counter,
    /// Times the worker slept in poll(2) waiting for its ports (idle, or light load).
    pub sleeps: Counter,
    /// Nanoseconds the worker spent in loop iterations that found work (from the start of
    /// such an iteration to the start of the next): its busy time, polling excluded.
    pub busy_ns: Counter,
    /// Per VLAN sub-interface (by its index after the first one): packets and bytes
    /// received and sent.
    subifs: Box<[SubifCounters]>,
    /// Feature nodes' counters, by the slots their registry gave them
    /// ([`crate::feature::Entry::counter_base`]).
    features: Box<[Counter]>,
}

/// Most VLAN sub-interfaces whose packets are counted.
pub const MAX_SUBIFS: usize = 1024;

/// What one sub-interface received and sent through the fast path.
#[derive(Default)]
struct SubifCounters {
    rx_packets: Counter,
    rx_bytes: Counter,
    tx_packets: Counter,
    tx_bytes: Counter,
}

/// A sub-interface's counts: packets and bytes the fast path received on it (tags
/// included) and sent from it (the kernel's own frames, which its TAP carries, not
/// included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SubifCounts {
    /// Received packets.
    pub rx_packets: u64,
    /// Received bytes.
    pub rx_bytes: u64,
    /// Sent packets.
    pub tx_packets: u64,
    /// Sent bytes.
    pub tx_bytes: u64,
}

impl SubifCounts {
    /// Element-wise sum (another worker's counts of the same sub-interface).
    pub fn merge(&mut self, o: &SubifCounts) {
        self.rx_packets += o.rx_packets;
        self.rx_bytes += o.rx_bytes;
        self.tx_packets += o.tx_packets;
        self.tx_bytes += o.tx_bytes;
    }
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            by_reason: std::array::from_fn(|_| Counter::default()),
            rx: Counter::default(),
            tx: Counter::default(),
            vectors: Counter::default(),
            idle_polls: Counter::default(),
            sleeps: Counter::default(),
            busy_ns: Counter::default(),
            subifs: (0..MAX_SUBIFS).map(|_| SubifCounters::default()).collect(),
            features: (0..crate::feature::MAX_FEATURE_COUNTERS)
                .map(|_| Counter::default())
                .collect(),
        }
    }
}

impl Counters {
    /// Count `n` packets under `r`.
    #[inline]
    pub fn add(&self, r: Reason, n: u64) {
        // Reason discriminants are 0..COUNT by construction; `get` keeps this panic-free.
        if let Some(c) = self.by_reason.get(r as usize) {
            c.add(n);
        }
    }
    /// Value of one reason.
    pub fn get(&self, r: Reason) -> u64 {
        self.by_reason.get(r as usize).map_or(0, Counter::get)
    }
    /// Add `n` to feature counter slot `slot`.
    #[inline]
    pub fn feature_add(&self, slot: usize, n: u64) {
        if let Some(c) = self.features.get(slot) {
            c.add(n);
        }
    }
    /// Feature counter slot `slot`.
    pub fn feature(&self, slot: usize) -> u64 {
        self.features.get(slot).map_or(0, Counter::get)
    }
    /// Count a packet of `bytes` received on sub-interface `k` (its index among them).
    #[inline]
    pub fn subif_rx(&self, k: usize, bytes: u64) {
        if let Some(c) = self.subifs.get(k) {
            c.rx_packets.add(1);
            c.rx_bytes.add(bytes);
        }
    }
    /// Count a packet of `bytes` sent from sub-interface `k`.
    #[inline]
    pub fn subif_tx(&self, k: usize, bytes: u64) {
        if let Some(c) = self.subifs.get(k) {
            c.tx_packets.add(1);
            c.tx_bytes.add(bytes);
        }
    }
    /// The counts of sub-interface `k`.
    pub fn subif(&self, k: usize) -> SubifCounts {
        self.subifs
            .get(k)
            .map_or_else(SubifCounts::default, |c| SubifCounts {
                rx_packets: c.rx_packets.get(),
                rx_bytes: c.rx_bytes.get(),
                tx_packets: c.tx_packets.get(),
                tx_bytes: c.tx_bytes.get(),
            })
    }
    /// Snapshot of every counter.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            by_reason: std::array::from_fn(|i| self.by_reason[i].get()),
            rx: self.rx.get(),
            tx: self.tx.get(),
            vectors: self.vectors.get(),
            idle_polls: self.idle_polls.get(),
            sleeps: self.sleeps.get(),
            busy_ns: self.busy_ns.get(),
        }
    }
}

/// Plain copy of counters, summable across workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// By reason.
    pub by_reason: [u64; Reason::COUNT],
    /// Received.
    pub rx: u64,
    /// Transmitted.
    pub tx: u64,
    /// Vectors.
    pub vectors: u64,
    /// Idle polls.
    pub idle_polls: u64,
    /// Sleeps in poll(2).
    pub sleeps: u64,
    /// Busy nanoseconds.
    pub busy_ns: u64,
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot {
            by_reason: [0; Reason::COUNT],
            rx: 0,
            tx: 0,
            vectors: 0,
            idle_polls: 0,
            sleeps: 0,
            busy_ns: 0,
        }
    }
}

impl Snapshot {
    /// Value of one reason.
    pub fn get(&self, r: Reason) -> u64 {
        self.by_reason.get(r as usize).copied().unwrap_or(0)
    }
    /// Element-wise sum.
    pub fn merge(&mut self, o: &Snapshot) {
        for (a, b) in self.by_reason.iter_mut().zip(o.by_reason.iter()) {
            *a += b;
        }
        self.rx += o.rx;
        self.tx += o.tx;
        self.vectors += o.vectors;
        self.idle_polls += o.idle_polls;
        self.sleeps += o.sleeps;
        self.busy_ns += o.busy_ns;
    }
    /// Sum of all drop reasons.
    pub fn drops(&self) -> u64 {
        Reason::ALL
            .iter()
            .filter(|r| r.kind() == Kind::Drop)
            .map(|r| self.get(*r))
            .sum()
    }
    /// Sum of all punt reasons.
    pub fn punts(&self) -> u64 {
        Reason::ALL
            .iter()
            .filter(|r| r.kind() == Kind::Punt)
            .map(|r| self.get(*r))
            .sum()
    }
    /// Non-zero reasons as (node, name, description, count), for `show errors`.
    pub fn nonzero(&self) -> Vec<(Reason, u64)> {
        Reason::ALL
            .iter()
            .map(|r| (*r, self.get(*r)))
            .filter(|x| x.1 > 0)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_sum_and_classify() {
        let c = Counters::default();
        c.add(Reason::Ip4BadChecksum, 3);
        c.add(Reason::PuntArp, 2);
        c.add(Reason::Ip4Forwarded, 5);
        let mut s = c.snapshot();
        s.merge(&c.snapshot());
        assert_eq!(s.get(Reason::Ip4BadChecksum), 6);
        assert_eq!(s.drops(), 6);
        assert_eq!(s.punts(), 4);
        assert_eq!(s.nonzero().len(), 3);
        assert_eq!(Reason::Ip4BadChecksum.node(), "ip4-input");
        assert_eq!(Reason::Ip4BadChecksum.name(), "Ip4BadChecksum");
    }
}
