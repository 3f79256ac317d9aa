//! What IPv4 and IPv6 differ in, as a trait: the lookup, rewrite and ICMP-error nodes
//! (`crate::ip`, `crate::icmp`) are written once over it, and each family's module
//! (`crate::ip4`, `crate::ip6`) implements it next to its own nodes (input, fragmentation).
//! Every use is monomorphised: the generic nodes compile to what hand-written per-family
//! nodes would.

use fib::Adjacency;

use crate::buffer::{PacketMemory, Pkt, Vector};
use crate::counters::Reason;
use crate::feature::ArcId;
use crate::graph::{Graph, Node};

/// An address family's constants and the few operations the generic nodes leave to it.
pub(crate) trait Family {
    /// IPv6 (for trace steps).
    const V6: bool;
    /// EtherType of its packets.
    const ETHERTYPE: u16;
    /// Its lookup, rewrite and ICMP-error nodes.
    const LOOKUP: Node;
    const REWRITE: Node;
    const ICMP_ERROR: Node;
    /// Its feature arcs.
    const UNICAST_ARC: ArcId;
    const OUTPUT_ARC: ArcId;
    /// Reasons its nodes count.
    const NO_ROUTE: Reason;
    const BLACKHOLE: Reason;
    const TRUNCATED: Reason;
    const TTL_EXPIRED: Reason;
    const FORWARDED: Reason;
    const ICMP_SENT: Reason;
    /// The drop of a packet with a link-local source that would be forwarded (`None`: the
    /// family drops those at input already, so the lookup does not look).
    const LINK_LOCAL_SRC: Option<Reason>;
    /// The ICMP errors (`icmp::kind`) for no route and for TTL / hop limit expiry.
    const NO_ROUTE_ICMP: u32;
    const TIME_EXCEEDED_ICMP: u32;
    /// Bytes of its fixed header, and the offset of its TTL / hop limit in it.
    const HEADER_LEN: usize;
    const TTL_AT: usize;

    /// Look up the destinations of the packets `list` in `g`'s FIB: the next-hop ids go to
    /// `g.results[..list.len()]`.
    fn lookup_bulk<M: PacketMemory>(g: &mut Graph, v: &Vector, mem: &M, list: &[u16]);
    /// The ECMP flow hash of a packet.
    fn flow_hash<M: PacketMemory>(mem: &M, p: &Pkt) -> u32;
    /// The IP packet's length from its header (`ip` holds at least `HEADER_LEN` bytes).
    fn total_len(ip: &[u8]) -> usize;
    /// Decrement the TTL / hop limit (a valid header, TTL above 1: the IPv4 checksum is
    /// updated).
    fn decrement_ttl(ip: &mut [u8]);
    /// ip-rewrite found packet `i` bigger than `adj`'s MTU (TTL already decremented, from
    /// `ttl`, unless locally generated): answer with an ICMP error, or fragment.
    #[allow(clippy::too_many_arguments)]
    fn too_big<const T: bool, const F: bool>(
        g: &mut Graph,
        v: &mut Vector,
        ip: &mut [u8],
        i: u16,
        p: Pkt,
        adj: &Adjacency,
        ttl: Option<u8>,
    );
    /// Turn packet `p` into the ICMP error in its `aux`, built in place, addressed to its
    /// source; or the reason none is sent.
    fn build_error<M: PacketMemory>(g: &mut Graph, mem: &mut M, p: &Pkt) -> Result<Pkt, Reason>;
}
