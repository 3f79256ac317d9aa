//! Ferrouter's fast-path benchmarks and the synthetic route sets they use.
pub mod acl;
pub mod conntrack;
pub mod crypto;
pub mod dpdk;
pub mod fib_update;
pub mod ipsec;
pub mod lpm;
pub mod mrt;
pub mod nat;
pub mod pipeline;
pub mod qos;
pub mod routes;
