//! Ferrouter's QoS (issue 28): the algorithms, pure and independent of the graph.
//!
//! - [`bucket`]: token buckets with exact integer arithmetic on a nanosecond clock, shared
//!   by every worker through atomics (no lock, no per-worker share to rebalance);
//! - [`policer`]: the three-colour markers srTCM (RFC 2697), trTCM (RFC 2698) and the
//!   RFC 4115 variant, colour-blind or colour-aware, with an action per colour;
//! - [`classify`]: DSCP and 802.1p helpers, traffic classes by DSCP, 802.1p or interface,
//!   trusted and untrusted interfaces, marking and re-marking;
//! - [`rules`]: classifier rules (a class by 5-tuple and DSCP), on the firewall's
//!   classifier;
//! - [`codel`]: CoDel (RFC 8289), the AQM of best-effort queues;
//! - [`wred`]: WRED (RED with a profile per drop precedence), the other one;
//! - [`sched`]: the egress scheduler of a port: a shaper, strict-priority classes, DRR among
//!   the rest, per-class minimum and maximum rates, tail-drop limits, CoDel or WRED, and
//!   per-queue counters, and pipes (a shaper and class queues per subscriber line);
//! - [`pipes`]: the pipe of a packet by its destination (the longest prefix), on the
//!   firewall's classifier.
//!
//! Everything here that runs per packet allocates nothing, locks nothing and cannot panic
//! on packet data: queues are preallocated when a policy is built.

#![deny(missing_docs)]

pub mod bucket;
pub mod classify;
pub mod codel;
pub mod config;
pub mod node;
pub mod pipes;
pub mod policer;
pub mod queue;
pub mod rules;
pub mod sched;
pub mod wred;
