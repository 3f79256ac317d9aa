//! Ferrouter's firewall (issue 25), built up in steps:
//! - [`classify`]: the packet classifier every filtering and NAT rule set goes through, a
//!   pair of multi-way cut trees over the 5-tuple (HiCuts/EffiCuts style, bursts of keys
//!   walked side by side) that finds the first matching rule among thousands without
//!   scanning them;
//! - [`config`]: `[firewall]` as the config file writes it (address sets, filters of
//!   ordered rules bound to interfaces at a hook), and its checks;
//! - [`ruleset`]: a config compiled for the fast path, published whole;
//! - [`node`]: the filters as feature-arc nodes;
//! - [`conntrack`]: the per-worker connection tracker: flows keyed in both directions, TCP
//!   state and window tracking, per-state timeouts, and a fixed-size table that drops
//!   half-open flows first when it fills, which the filter nodes use when `[firewall]
//!   conntrack` is on;
//! - [`nat`]: NAT44 (source NAT and masquerade, destination NAT and port forwards,
//!   hairpinning) as three feature nodes around the filters, with per-worker sessions;
//! - [`steer`]: with several workers, both directions of every flow handed to the one
//!   worker that owns its state.

#![deny(missing_docs)]
#![cfg_attr(test, allow(clippy::needless_range_loop))]

pub mod classify;
pub mod config;
pub mod conntrack;
#[cfg(any(test, feature = "gen"))]
pub mod gen;
pub mod nat;
pub mod node;
pub mod ruleset;
pub mod steer;
#[cfg(test)]
mod tests;
