//! Ferrouter's firewall (issue 25), built up in steps. This first step is the packet
//! classifier every filtering and NAT rule set goes through: [`classify`], a decision tree
//! over the 5-tuple (HyperSplit style) that finds the first matching rule among thousands
//! without scanning them. The second is [`conntrack`], the per-worker connection tracker:
//! flows keyed in both directions, TCP state and window tracking, per-state timeouts, and a
//! fixed-size table that drops half-open flows first when it fills.

#![deny(missing_docs)]
#![cfg_attr(test, allow(clippy::needless_range_loop))]

pub mod classify;
pub mod conntrack;
#[cfg(any(test, feature = "gen"))]
pub mod gen;
