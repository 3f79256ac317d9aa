//! Unicast reverse-path forwarding (RFC 3704) as feature-arc nodes: a packet whose source
//! address the router would not route back the way it came is dropped, which stops spoofed
//! sources at the edge (BCP 38 / BCP 84).
//!
//! Four features, one per family and mode, on the `ip4-unicast` / `ip6-unicast` arcs:
//!
//! | feature | passes a packet whose source address has |
//! |---|---|
//! | `ip4-urpf-strict`, `ip6-urpf-strict` | a route whose next hop (one of whose ECMP members) leaves by the interface the packet came in on |
//! | `ip4-urpf-loose`, `ip6-urpf-loose` | any route that forwards (not a blackhole, not the router's own address) |
//!
//! A default route is a route: with one, loose mode passes every source, as Linux's
//! `rp_filter = 2` and VPP's loose check do; strict mode then passes sources reached
//! through the default route only on the default route's interface. Connected subnets
//! count as routes via their interface, resolved neighbour or not.
//!
//! Drops are counted per feature under `no_route` (the source has no forwarding route) and
//! `wrong_interface` (strict: the route back leaves by another interface).

use std::sync::Arc;

use dataplane::feature::{ArcId, Batch, Feature, FeatureCx, FeatureNode, FeatureSpec};
use dataplane::VECTOR_SIZE;
use fib::{NextHop, NextHopId, MISS};

/// uRPF mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The route back to the source must leave by the receiving interface.
    Strict,
    /// Some forwarding route to the source must exist.
    Loose,
}

/// Drop reason index: the source has no forwarding route.
pub const NO_ROUTE: u8 = 0;
/// Drop reason index: (strict) the route back to the source leaves by another interface.
pub const WRONG_INTERFACE: u8 = 1;

const DROPS: &[(&str, &str)] = &[
    (
        "no_route",
        "source address has no forwarding route back (RFC 3704)",
    ),
    (
        "wrong_interface",
        "route back to the source leaves by another interface (strict RFC 3704)",
    ),
];

/// One uRPF feature: a family and a mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Urpf {
    /// IPv6 (else IPv4).
    pub v6: bool,
    /// Strict or loose.
    pub mode: Mode,
}

impl Urpf {
    /// The four features, to register.
    pub fn all() -> Vec<Arc<dyn Feature>> {
        [false, true]
            .into_iter()
            .flat_map(|v6| {
                [Mode::Strict, Mode::Loose]
                    .into_iter()
                    .map(move |mode| Arc::new(Urpf { v6, mode }) as Arc<dyn Feature>)
            })
            .collect()
    }
    /// The feature's name: `ip4-urpf-strict`, `ip6-urpf-loose`, ...
    pub fn name(v6: bool, mode: Mode) -> &'static str {
        match (v6, mode) {
            (false, Mode::Strict) => "ip4-urpf-strict",
            (false, Mode::Loose) => "ip4-urpf-loose",
            (true, Mode::Strict) => "ip6-urpf-strict",
            (true, Mode::Loose) => "ip6-urpf-loose",
        }
    }
}

impl Feature for Urpf {
    fn spec(&self) -> FeatureSpec {
        FeatureSpec {
            name: Urpf::name(self.v6, self.mode),
            arc: if self.v6 {
                ArcId::Ip6Unicast
            } else {
                ArcId::Ip4Unicast
            },
            // Spoofed packets go before anything spends work on them.
            before: &[],
            after: &[],
            drops: DROPS,
        }
    }
    fn node(&self, _worker: usize) -> Box<dyn FeatureNode> {
        Box::new(Node {
            v6: self.v6,
            strict: self.mode == Mode::Strict,
            keys4: Box::new([0; VECTOR_SIZE]),
            keys6: Box::new([[0; 16]; VECTOR_SIZE]),
            ids: Box::new([MISS; VECTOR_SIZE]),
        })
    }
}

struct Node {
    v6: bool,
    strict: bool,
    keys4: Box<[u32; VECTOR_SIZE]>,
    keys6: Box<[[u8; 16]; VECTOR_SIZE]>,
    ids: Box<[NextHopId; VECTOR_SIZE]>,
}

impl FeatureNode for Node {
    fn process(&mut self, cx: &mut FeatureCx<'_>, b: &mut Batch<'_>) {
        let n = b.len().min(VECTOR_SIZE);
        // The arc follows ip4-input / ip6-input: the header is there and valid. A frame
        // too short to hold a source (not possible after input, but cheap to refuse) reads
        // as the unspecified address, which has no route.
        for k in 0..n {
            let Some(p) = b.pkt(k) else { continue };
            let at = p.off as usize + p.l3 as usize;
            let frame = cx.mem.frame(p.buf);
            if self.v6 {
                self.keys6[k] = frame
                    .get(at + 8..at + 24)
                    .and_then(|s| <[u8; 16]>::try_from(s).ok())
                    .unwrap_or([0; 16]);
            } else {
                self.keys4[k] = frame
                    .get(at + 12..at + 16)
                    .map_or(0, |s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]));
            }
        }
        if self.v6 {
            cx.fib.lookup6_bulk(&self.keys6[..n], &mut self.ids[..n]);
        } else {
            cx.fib.lookup4_bulk(&self.keys4[..n], &mut self.ids[..n]);
        }
        for k in 0..n {
            if let Err(r) = check(cx.fib, self.ids[k], b.iface(k), self.strict) {
                b.drop(k, r);
            }
        }
    }
}

/// Whether a source whose lookup gave `id` passes on interface `iface`; else the drop
/// reason.
fn check(fib: &fib::FibReader, id: NextHopId, iface: u16, strict: bool) -> Result<(), u8> {
    if id == MISS {
        return Err(NO_ROUTE);
    }
    let via = |nh: Option<&NextHop>| match nh {
        Some(NextHop::Forward(a)) => Some(a.port),
        Some(NextHop::Glean { port }) => Some(*port),
        _ => None,
    };
    match fib.next_hop(id) {
        Some(NextHop::Ecmp(members)) => {
            let mut any = false;
            for &m in members.iter() {
                match via(fib.next_hop(m)) {
                    Some(port) if !strict || port == iface => return Ok(()),
                    Some(_) => any = true,
                    None => {}
                }
            }
            Err(if any { WRONG_INTERFACE } else { NO_ROUTE })
        }
        nh => match via(nh) {
            Some(port) if !strict || port == iface => Ok(()),
            Some(_) => Err(WRONG_INTERFACE),
            None => Err(NO_ROUTE),
        },
    }
}
