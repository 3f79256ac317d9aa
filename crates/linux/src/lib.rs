//! Linux integration: a mirror of the kernel's links, addresses, neighbours and routes.
//!
//! The fast path forwards with the kernel's view of the world, the way VPP's linux-cp and
//! 6WIND do: whatever configures the kernel — iproute2, FRR's zebra, BIRD — configures the
//! router. [`Mirror`] reads that view over rtnetlink: [`Mirror::dump`] for a full
//! [`Snapshot`], [`Mirror::poll_events`] for the changes since, and [`Mirror::resolve`] to
//! have the kernel resolve a next hop the fast path has no MAC for yet.
//!
//! [`Netlink`] changes that view (addresses, MTUs, static routes, permanent neighbours) for
//! the declarative config.
//!
//! Everything is synchronous and meant for one control thread; the mirror works in the
//! network namespace of the thread that opened it.

#![warn(missing_docs)]

mod encode;
mod error;
mod fastroute;
mod mirror;
mod netlink;
mod parse;
mod types;

pub use encode::encode_route;
pub use error::Error;
pub use mirror::Mirror;
pub use netlink::{Netlink, RouteTarget, StaticRoute};
pub use parse::parse_messages;
pub use types::{
    Addr, Event, Link, Neigh, NextHops, Route, RouteKind, RouteNextHop, Snapshot, NUD_DELAY,
    NUD_FAILED, NUD_INCOMPLETE, NUD_NOARP, NUD_PERMANENT, NUD_PROBE, NUD_REACHABLE, NUD_STALE,
    RT_TABLE_LOCAL, RT_TABLE_MAIN,
};
