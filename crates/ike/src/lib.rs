//! IKEv2 (RFC 7296) for ferrouter.
//!
//! - [`transform`]: the IANA numbers of the transforms IKE and ESP negotiate.
//! - [`wire`]: the message codec (header and payloads), parsing bounded, hostile input.
//! - [`crypto`]: key exchange, PRF, key derivation and the encrypted (SK) payload.
//! - [`pool`]: the virtual IP pools a responder leases addresses from (CP payload).

pub mod config;
pub mod crypto;
pub mod daemon;
pub mod dn;
pub mod engine;
pub mod pool;
pub mod transform;
pub mod wire;
