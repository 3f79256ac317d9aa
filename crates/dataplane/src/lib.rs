//! Ferrouter's fast path: packet vectors pushed through a graph of small nodes by
//! run-to-completion workers (see DESIGN.md, "The fast path").
//!
//! Hot-path rules, enforced by construction: nothing here allocates, locks, logs or panics
//! per packet. Every drop is counted under a named [`Reason`]; packets for the router, ARP,
//! control multicast and unresolved next hops go to the [`punt`] queue.

mod arm;
pub mod buffer;
pub mod capture;
pub mod claims;
pub mod counters;
mod dispatch;
pub mod egress;
mod ethernet;
mod family;
pub mod feature;
pub mod graph;
pub mod handoff;
mod icmp;
pub mod interfaces;
mod ip;
mod ip4;
mod ip6;
pub mod punt;
mod ratelimit;
pub mod trace;
pub mod worker;

pub use buffer::{
    pkt_bytes, Arena, PacketMemory, Pkt, Vector, BIG_BASE, BIG_FRAME_SIZE, FEATURE_META_SHIFT,
    FRAME_SIZE, F_FEATURE_META, HEADROOM, MAX_FRAME, VECTOR_SIZE,
};
pub use counters::{Counters, Kind, Reason, Snapshot};
pub use graph::{Graph, GraphConfig, Output};
pub use interfaces::{Interfaces, PortInfo};
pub use ratelimit::{PeerLimiter, RateLimiter};
