//! Ferrouter's firewall (issue 25), built up in steps. This first step is the packet
//! classifier every filtering and NAT rule set goes through: [`classify`], a decision tree
//! over the 5-tuple (HyperSplit style) that finds the first matching rule among thousands
//! without scanning them.

#![deny(missing_docs)]
#![cfg_attr(test, allow(clippy::needless_range_loop))]

pub mod classify;
#[cfg(any(test, feature = "gen"))]
pub mod gen;
