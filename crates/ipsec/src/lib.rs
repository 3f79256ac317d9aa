//! IPsec ESP (RFC 4303) for the fast path: the security association with its prepared
//! cipher contexts ([`sa`]), the anti-replay window ([`replay`]) and the in-place packet
//! codec ([`esp`]) that encapsulates and decapsulates in tunnel and transport mode, with
//! or without NAT traversal (RFC 3948).
//!
//! Pure computation: no I/O, no allocation per packet (an SA allocates its key schedules
//! and replay bitmap once, when it is created), and no panic on any packet: every access
//! to packet bytes is checked and a packet that is not what it claims is an [`EspError`]
//! naming what was wrong. On top of it: the per-worker SA database ([`sad`]), the ESP nodes
//! of route-based tunnel interfaces on the fast path's feature arcs ([`node`]) and the
//! `[ipsec]` configuration with its key file ([`config`]); see docs/ipsec.md.
//!
//! Crypto is aws-lc-rs for every algorithm (measured: docs/performance.md, "AEAD and ESP
//! ciphers from memory"), except that the AEADs are called in AWS-LC itself (aws-lc-sys,
//! the library aws-lc-rs links) so that their contexts sit inline in the SA (the `suite`
//! module). That and the huge-page chunks SAs live in ([`arena`]) are the crate's only
//! `unsafe`. AEAD tags are checked by AWS-LC, and truncated HMAC ICVs are compared with
//! `aws_lc_rs::constant_time::verify_slices_are_equal` (`CRYPTO_memcmp`): both in constant
//! time.

#![deny(missing_docs)]
#![deny(unsafe_code)]

// SAs in huge-page memory: the crate's other unsafe code.
#[allow(unsafe_code)]
pub mod arena;
pub mod config;
pub mod dests;
pub mod error;
pub mod esp;
pub mod fuzzing;
pub mod node;
pub mod policy_node;
pub mod reasm;
pub mod replay;
pub mod sa;
pub mod sad;
pub mod spd;
// The AEAD contexts, through AWS-LC's C API: the crate's only unsafe code.
#[allow(unsafe_code)]
mod suite;
pub mod testing;

pub use arena::SaBox;
pub use error::{EspError, SaError};
pub use esp::{
    classify_udp, decrypt, decrypt_batch, encrypt, encrypt_batch, Inner, Packet, UdpPayload,
    NATT_PORT,
};
pub use replay::Replay;
/// How many packets ahead the batch loops (the nodes, the benchmark) prefetch the SA of
/// a packet ([`Sa::prefetch`]): far enough for its lines to arrive while the packets
/// before it are encrypted or decrypted.
pub const PREFETCH_AHEAD: usize = 4;

pub use sa::{Counters, Df, Direction, Encryption, Integrity, Mode, NatT, Sa, SaConfig};
