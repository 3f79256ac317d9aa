//! Ferrouter's native BGP-4 speaker.
//!
//! FRR's zebra installs every route in the kernel one netlink message at a time, and the
//! fast path mirrors it from there; at millions of routes that is what limits convergence
//! (docs/performance.md). This crate is the other way in: eBGP sessions terminated in
//! ferrouter itself, best paths computed here and handed straight to the FIB's sync.
//!
//! - [`wire`]: the message codec (OPEN, UPDATE with IPv4 and MP-BGP IPv6, NOTIFICATION,
//!   KEEPALIVE), with RFC 7606 error handling: a malformed message ends in a counted
//!   treat-as-withdraw or a NOTIFICATION, never a panic.
//! - [`config`]: the `[bgp]` section of ferrouter's config file.
//! - [`peer`]: an emulated BGP router for the test harness (a tester's route source).

pub mod config;
pub mod peer;
pub mod rib;
pub mod speaker;
pub mod wire;
