//! IKEv2's cryptography, built on aws-lc-rs (and, for finite-field Diffie-Hellman, the
//! AWS-LC it links): no primitive is written here, only IKE's constructions on top.
//!
//! - [`KeyShare`]: the key exchange (RFC 7296 §1.2; RFC 3526 group 14, RFC 5903 groups 19
//!   and 20, RFC 8031 group 31), with the checks of RFC 6989 on the peer's value.
//! - [`prf`], [`prf_plus`], [`IkeKeys`], [`child_keys`]: the PRF, prf+ (§2.13) and the
//!   keys of IKE SAs (§2.14, rekeyed §2.18) and child SAs (§2.17).
//! - [`SkCipher`]: the Encrypted payload (SK, §3.14; RFC 5282 for the AEADs) and the
//!   Encrypted Fragment payload (SKF, RFC 7383).
//! - [`psk_auth`], [`signed_octets`]: the AUTH payload of a shared key (§2.15).
//!
//! Every secret this module hands out is in [`Zeroizing`]: it is wiped when dropped.
//! Nothing here panics on what a peer sends: every length is checked and every failure
//! is a [`CryptoError`] naming what was wrong.

mod auth;
mod dh;
mod kdf;
mod sk;

pub use auth::{psk_auth, signed_octets};
pub use dh::KeyShare;
pub use kdf::{child_keys, prf, prf_plus, ChildKeys, IkeKeys, IkeSuite};
pub use sk::SkCipher;
pub use zeroize::Zeroizing;

/// What went wrong in a cryptographic operation, with the values that were wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    /// The peer's KE data has the wrong length for the group (RFC 7296 §3.4 fixes it).
    #[error("KE data for group {group} is {got} bytes, expected {expected}")]
    KeLength {
        /// The IANA number of the group.
        group: u16,
        /// The length received.
        got: usize,
        /// The group's public value length.
        expected: usize,
    },
    /// The peer's KE data has the right length but is not a valid public value
    /// (RFC 6989), or gives a degenerate shared secret.
    #[error("KE data for group {group} is invalid: {reason}")]
    KeInvalid {
        /// The IANA number of the group.
        group: u16,
        /// Which check failed.
        reason: &'static str,
    },
    /// AWS-LC could not make a key share (out of memory, or a failed random draw).
    #[error("generating a key share for group {group} failed in AWS-LC")]
    KeyGeneration {
        /// The IANA number of the group.
        group: u16,
    },
    /// prf+ was asked for more than its 255 blocks (§2.13).
    #[error("prf+ with {prf:?} gives at most {max} bytes (255 blocks), {len} were asked")]
    PrfPlusTooLong {
        /// The PRF.
        prf: crate::transform::Prf,
        /// The length asked.
        len: usize,
        /// 255 times the PRF's output length.
        max: usize,
    },
    /// A key given to this module has the wrong length for its algorithm.
    #[error("{what} is {got} bytes, {expected} expected for {alg}")]
    KeyLength {
        /// Which key (e.g. "SK_ei").
        what: &'static str,
        /// Its length.
        got: usize,
        /// The length the algorithm takes.
        expected: usize,
        /// The algorithm, e.g. "AesGcm16 { key_bits: 128 }".
        alg: String,
    },
    /// An encryption transform with a key length no implementation of it has.
    #[error("{0:?} is not supported (AES-CBC takes 128, 192 or 256 bits, AES-GCM 128 or 256)")]
    UnsupportedEncr(crate::transform::Encr),
    /// An AEAD with an integrity transform, or AES-CBC without one.
    #[error("{encr:?} with integrity {integ:?}: an AEAD takes none, AES-CBC needs one")]
    IntegMismatch {
        /// The encryption transform.
        encr: crate::transform::Encr,
        /// The integrity transform given with it.
        integ: Option<crate::transform::Integ>,
    },
    /// The SK or SKF payload's offset or header does not fit the message.
    #[error(
        "SK payload at offset {at} with a {hdr_len}-byte header does not fit the {len}-byte \
         message after its 28-byte IKE header"
    )]
    SkOffset {
        /// The payload's offset in the message.
        at: usize,
        /// Its header length (4 for SK, 8 for SKF).
        hdr_len: usize,
        /// The message length.
        len: usize,
    },
    /// Sealing would make a payload longer than its 16-bit length field can say.
    #[error("the SK payload would be {len} bytes, more than a payload's 65535")]
    SkTooLong {
        /// The length it would have.
        len: usize,
    },
    /// The SK payload's Payload Length field disagrees with the message.
    #[error(
        "the SK payload's length field says {field} bytes, but it runs {actual} bytes to the \
         end of the message"
    )]
    SkLength {
        /// What the field says.
        field: usize,
        /// From its offset to the end of the message.
        actual: usize,
    },
    /// The SK payload is too short to hold an IV, a padded block and an ICV.
    #[error("the SK payload is {len} bytes, at least {min} needed (header, IV, pad length, ICV)")]
    SkTooShort {
        /// Its length.
        len: usize,
        /// The least its cipher takes.
        min: usize,
    },
    /// AES-CBC ciphertext that is not whole blocks.
    #[error("the SK payload's ciphertext is {len} bytes, not a multiple of AES's 16-byte block")]
    SkBlock {
        /// The ciphertext's length.
        len: usize,
    },
    /// The ICV (integrity checksum or AEAD tag) does not match: a forged, corrupted or
    /// differently keyed message.
    #[error("SK payload integrity check failed")]
    Integrity,
    /// The decrypted content's Pad Length exceeds it.
    #[error("SK payload padding is bad: pad length {pad_len} in {len} decrypted bytes")]
    BadPadding {
        /// The Pad Length byte.
        pad_len: u8,
        /// The decrypted length, padding and pad length byte included.
        len: usize,
    },
    /// The AEAD IV counter of a [`SkCipher`] is used up (2^64 messages): rekey the IKE SA.
    #[error("the AEAD IV counter is exhausted: the IKE SA must be rekeyed")]
    IvExhausted,
    /// The random generator failed.
    #[error("the random generator failed")]
    Random,
    /// AWS-LC refused an operation whose inputs were checked (should not happen).
    #[error("AWS-LC failed: {0}")]
    Internal(&'static str),
}

/// Fills `out` with random bytes from AWS-LC's generator: nonces, SPIs, CBC IVs.
pub fn random_bytes(out: &mut [u8]) -> Result<(), CryptoError> {
    aws_lc_rs::rand::fill(out).map_err(|_| CryptoError::Random)
}

#[cfg(test)]
pub(crate) mod testing {
    /// Decodes hex, ignoring whitespace (as RFCs print their vectors).
    pub(crate) fn hex(s: &str) -> Vec<u8> {
        let s: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        assert!(s.len().is_multiple_of(2), "odd hex length");
        s.chunks(2)
            .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
            .collect()
    }
}
