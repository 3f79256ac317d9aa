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
//! - [`sign`], [`digital_signature_auth`], [`verify`], [`PrivateKey`]: the AUTH payload
//!   of a certificate's key (RFC 7427, and methods 1, 9, 10 to verify), with the peer's
//!   certificate chain validated up to the trusted CAs.
//!
//! Every secret this module hands out is in [`Zeroizing`]: it is wiped when dropped.
//! Nothing here panics on what a peer sends: every length is checked and every failure
//! is a [`CryptoError`] naming what was wrong.

mod auth;
mod dh;
mod kdf;
mod sig;
mod sk;

pub use auth::{psk_auth, signed_octets};
pub use dh::KeyShare;
pub use kdf::{child_keys, prf, prf_plus, ChildKeys, IkeKeys, IkeSuite};
pub use sig::{
    certificate_matches_id, certificate_subject, digital_signature_auth, key_sha1,
    read_certificates, sign, verify, verify_auth, verify_chain, PrivateKey, AUTH_DIGITAL_SIGNATURE,
    AUTH_ECDSA_256, AUTH_ECDSA_384, AUTH_PSK, AUTH_RSA,
};
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
    /// A private key or certificate file cannot be read.
    #[error("{path}: {reason}")]
    KeyFile {
        /// The file.
        path: String,
        /// What was wrong.
        reason: String,
    },
    /// Private key bytes of an unknown encoding or type.
    #[error("private key: {0}")]
    KeyFormat(String),
    /// An RSA key (ours or a certificate's) below 2048 bits (RFC 8247 §3.2).
    #[error("the RSA key has {bits} bits, at least 2048 are needed")]
    KeyTooSmall {
        /// Its modulus length.
        bits: usize,
    },
    /// AWS-LC failed to sign.
    #[error("signing the AUTH payload failed in AWS-LC")]
    SignFailed,
    /// No certificate to verify a signature with.
    #[error("the peer sent no certificate (a CERT payload is needed to verify its AUTH)")]
    NoCertificate,
    /// A configured CA certificate cannot be parsed.
    #[error("trusted CA certificate {index} cannot be parsed: {reason}")]
    CaParse {
        /// Its position in the list of trusted CAs.
        index: usize,
        /// webpki's error.
        reason: String,
    },
    /// The peer's certificate cannot be parsed.
    #[error("the peer's certificate cannot be parsed: {reason}")]
    CertParse {
        /// Its position in the chain (0: the end-entity certificate).
        index: usize,
        /// webpki's error.
        reason: String,
    },
    /// A configured CRL cannot be parsed.
    #[error("CRL {index} cannot be parsed: {reason}")]
    CrlParse {
        /// Its position in the list of CRLs.
        index: usize,
        /// webpki's error.
        reason: String,
    },
    /// A certificate of the chain is on its issuer's CRL.
    #[error("a certificate of the chain is revoked (on its issuer's CRL)")]
    CertRevoked,
    /// The chain does not lead to a trusted CA.
    #[error("the certificate's issuer is not trusted: no chain to a configured CA")]
    UntrustedIssuer,
    /// A certificate of the chain has expired.
    #[error("a certificate of the chain expired: not after {not_after}, now {now} (Unix seconds)")]
    CertExpired {
        /// The time of the check, Unix seconds.
        now: u64,
        /// The certificate's notAfter.
        not_after: u64,
    },
    /// A certificate of the chain is not valid yet.
    #[error("a certificate of the chain is not valid yet: not before {not_before}, now {now} (Unix seconds)")]
    CertNotYetValid {
        /// The time of the check, Unix seconds.
        now: u64,
        /// The certificate's notBefore.
        not_before: u64,
    },
    /// The certificate's EKU allows no IKE use.
    #[error(
        "the certificate's extended key usage ({present}) allows no IKE use (ipsecIKE, \
         anyExtendedKeyUsage, serverAuth, clientAuth or iKEIntermediate)"
    )]
    Eku {
        /// The OIDs the certificate has.
        present: String,
    },
    /// Another check of the chain failed (webpki's error).
    #[error("the certificate chain is invalid: {0}")]
    CertInvalid(String),
    /// A certificate key of a type not supported.
    #[error("the certificate's key is not RSA, ECDSA P-256/P-384 or Ed25519")]
    UnsupportedKey,
    /// The AUTH method or signature algorithm does not fit the certificate's key.
    #[error("the certificate's key is {key}, which does not go with {auth}")]
    KeyMismatch {
        /// The key's type.
        key: &'static str,
        /// The AUTH method or signature algorithm.
        auth: String,
    },
    /// RFC 7427 AUTH data shorter than its AlgorithmIdentifier.
    #[error("the AUTH data is shorter than the AlgorithmIdentifier it announces")]
    AuthTooShort,
    /// An RFC 7427 signature algorithm not supported.
    #[error("the AUTH signature's AlgorithmIdentifier ({0}) is not supported")]
    UnsupportedSignature(String),
    /// An AUTH method that is no signature method verified here.
    #[error("auth method {method} is not verified with a certificate here (1, 9, 10 and 14 are)")]
    UnsupportedAuth {
        /// The method.
        method: u8,
    },
    /// The AUTH signature does not verify with the certificate's key.
    #[error("the AUTH signature is bad: it does not verify with the certificate's key")]
    BadSignature,
    /// The certificate is not for the identity the peer claims.
    #[error("the certificate is not for identity {id}")]
    IdMismatch {
        /// The identity, as text.
        id: String,
    },
    /// An ID type not matched against certificates.
    #[error(
        "identities of ID type {id_type} are not matched against certificates (IP addresses, \
         FQDNs, email addresses and DNs are)"
    )]
    UnsupportedId {
        /// The ID type.
        id_type: u8,
    },
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
