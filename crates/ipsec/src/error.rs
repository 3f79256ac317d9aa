//! What can go wrong: with a packet ([`EspError`], one counter each per SA) and with an
//! SA's configuration ([`SaError`]).

/// Why a packet was not encapsulated or decapsulated. Each SA counts them by kind
/// ([`crate::Counters::errors`]). An unknown SPI is not here: finding the SA is the
/// caller's job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[repr(u8)]
pub enum EspError {
    /// Shorter than its headers, IV, trailer and ICV, or than its IP header says.
    #[error("packet truncated: shorter than its headers, trailer and ICV")]
    Truncated,
    /// The ciphertext is not a whole number of cipher blocks (CBC).
    #[error("ciphertext is not a whole number of cipher blocks")]
    BadLength,
    /// The outer header is not IPv4/IPv6 carrying ESP (or UDP-encapsulated ESP on a NAT-T
    /// SA), or it is a fragment (reassemble first).
    #[error("outer header is not IP carrying ESP as this SA expects (or is a fragment)")]
    BadOuter,
    /// The ESP header's SPI is not this SA's.
    #[error("SPI does not match the SA")]
    SpiMismatch,
    /// The sequence number was seen already or lies left of the replay window.
    #[error("replayed or too old for the replay window")]
    Replayed,
    /// The ICV did not verify: corrupted or forged, or the wrong key.
    #[error("integrity check failed")]
    IntegrityFailed,
    /// The padding is not 1, 2, 3, ... or is longer than the payload (RFC 4303 §2.4).
    #[error("bad ESP padding")]
    BadPadding,
    /// The packet to encapsulate is not a whole IP packet this mode can carry, or the
    /// decrypted payload is not the IP packet its next header names.
    #[error("inner packet is not a valid IP packet for this SA's mode")]
    BadInner,
    /// Outer CE over an inner Not-ECT packet: RFC 6040 says drop.
    #[error("ECN: outer CE with a not-ECN-capable inner packet (RFC 6040: drop)")]
    EcnDrop,
    /// A dummy packet (next header 59, RFC 4303 §2.6): not a failure; drop it silently.
    #[error("dummy packet (next header 59): drop silently")]
    Dummy,
    /// The 32-bit sequence number would wrap (no ESN): the SA must be rekeyed.
    #[error("sequence number would wrap: rekey the SA")]
    SequenceOverflow,
    /// Not enough headroom or tailroom in the buffer, or the result exceeds 65535 bytes.
    #[error("no room in the buffer for the ESP headers and trailer, or result too big")]
    TooBig,
    /// Encrypt on an inbound SA or decrypt on an outbound one.
    #[error("wrong direction for this SA")]
    WrongDirection,
    /// A NAT-T keepalive (one 0xFF byte, RFC 3948 §2.3) on port 4500: drop it silently.
    #[error("NAT-T keepalive: drop silently")]
    NatKeepalive,
    /// UDP on port 4500 with the non-ESP marker (IKE, RFC 3948 §2.2): for the IKE daemon.
    #[error("non-ESP marker: IKE, for the IKE daemon")]
    NonEsp,
}

impl EspError {
    /// Every kind, in counter order.
    pub const ALL: [EspError; 15] = [
        EspError::Truncated,
        EspError::BadLength,
        EspError::BadOuter,
        EspError::SpiMismatch,
        EspError::Replayed,
        EspError::IntegrityFailed,
        EspError::BadPadding,
        EspError::BadInner,
        EspError::EcnDrop,
        EspError::Dummy,
        EspError::SequenceOverflow,
        EspError::TooBig,
        EspError::WrongDirection,
        EspError::NatKeepalive,
        EspError::NonEsp,
    ];

    /// The counter's name (metrics, `show`).
    pub fn name(self) -> &'static str {
        CODEC_DROPS[self as usize].0
    }

    /// Its drop reason's number in a node's list built by [`esp_drops!`](crate::esp_drops):
    /// the codec's reasons come first, in this order.
    pub fn reason(self) -> u8 {
        self as u8
    }

    /// Whether the packet is dropped without it being an error (dummy, keepalive).
    pub fn is_silent(self) -> bool {
        matches!(self, EspError::Dummy | EspError::NatKeepalive)
    }
}

/// Each [`EspError`]'s counter name and description, in [`EspError::ALL`]'s order: the
/// first drop reasons of every node that runs the codec ([`esp_drops!`](crate::esp_drops)).
pub const CODEC_DROPS: [(&str, &str); EspError::ALL.len()] = [
    (
        "truncated",
        "shorter than its headers, trailer and ICV, or than its IP header says",
    ),
    (
        "bad_length",
        "ciphertext not a whole number of cipher blocks",
    ),
    ("bad_outer", "outer header not as the SA expects"),
    ("spi_mismatch", "SPI does not match the SA"),
    ("replayed", "replayed, or too old for the replay window"),
    (
        "integrity_failed",
        "ICV did not verify (corrupted, forged or wrong key)",
    ),
    ("bad_padding", "bad ESP padding"),
    (
        "bad_inner",
        "not a whole IP packet the SA can carry, or the decrypted payload is not the IP packet its next header names",
    ),
    (
        "ecn_drop",
        "outer CE over a not-ECN-capable inner packet (RFC 6040)",
    ),
    ("dummy", "dummy packet (next header 59), dropped silently"),
    (
        "sequence_overflow",
        "the 32-bit sequence number would wrap (no ESN): rekey",
    ),
    (
        "too_big",
        "no room for the ESP headers, or over 65535 bytes",
    ),
    (
        "wrong_direction",
        "the SA is of the other direction (an outbound SA's SPI, or an inbound SA to encrypt with)",
    ),
    ("natt_keepalive", "NAT-T keepalive"),
    ("non_esp", "non-ESP marker (IKE)"),
];

/// A node's drop reasons: the codec's ([`CODEC_DROPS`], numbered as [`EspError::reason`])
/// then the node's own, each given a `u8` constant numbering it:
///
/// ```text
/// esp_drops! {
///     /// Drop reasons of `x`.
///     pub const X_DROPS;
///     X_NO_SA = ("no_sa", "no SA");
/// }
/// ```
///
/// so no node's list can miss a codec reason or number one wrong.
#[macro_export]
macro_rules! esp_drops {
    (
        $(#[$m:meta])* $vis:vis const $list:ident;
        $($c:ident = ($n:literal, $d:literal);)*
    ) => {
        $(#[$m])*
        $vis const $list: &[(&str, &str)] = &{
            const OWN: &[(&str, &str)] = &[$(($n, $d)),*];
            let codec = $crate::error::CODEC_DROPS;
            let mut all = [("", ""); $crate::error::CODEC_DROPS.len() + OWN.len()];
            let mut i = 0;
            while i < all.len() {
                all[i] = if i < codec.len() { codec[i] } else { OWN[i - codec.len()] };
                i += 1;
            }
            all
        };
        $crate::esp_drops!(@consts $crate::error::CODEC_DROPS.len() as u8; $($c)*);
    };
    (@consts $i:expr;) => {};
    (@consts $i:expr; $c:ident $($rest:ident)*) => {
        const $c: u8 = $i;
        $crate::esp_drops!(@consts $c + 1; $($rest)*);
    };
}

/// Why an SA could not be created.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SaError {
    /// A key of the wrong length.
    #[error("{what} key is {got} bytes; {alg} needs {expected}")]
    KeyLength {
        /// Which key (encryption or integrity).
        what: &'static str,
        /// The algorithm.
        alg: &'static str,
        /// Bytes it needs.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// An AEAD (GCM, ChaCha20-Poly1305) given a separate integrity algorithm.
    #[error("{0} is an AEAD: set integrity to none")]
    AeadWithIntegrity(&'static str),
    /// CBC without integrity (RFC 8221 forbids it).
    #[error("{0} needs an integrity algorithm (RFC 8221)")]
    CbcWithoutIntegrity(&'static str),
    /// A replay window out of range.
    #[error("replay window {0}: must be a multiple of 64 from 64 to 65536")]
    ReplayWindow(u32),
    /// SPIs 0 to 255 are reserved (RFC 4303 §2.1).
    #[error("SPI {0} is reserved (0-255): use 256 or above")]
    ReservedSpi(u32),
    /// Tunnel endpoints of different families.
    #[error("tunnel endpoints {0} and {1} are of different address families")]
    MixedFamilies(std::net::IpAddr, std::net::IpAddr),
    /// aws-lc-rs refused the key or could not draw random bytes.
    #[error("crypto library refused the key: {0}")]
    Crypto(&'static str),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::{DECRYPT_DROPS, ENCRYPT_DROPS};
    use crate::policy_node::OUT_DROPS;

    #[test]
    fn every_codec_node_starts_with_the_codec_reasons() {
        for (i, e) in EspError::ALL.iter().enumerate() {
            assert_eq!(e.reason() as usize, i);
            assert_eq!(e.name(), CODEC_DROPS[i].0);
            for list in [DECRYPT_DROPS, ENCRYPT_DROPS, OUT_DROPS] {
                assert_eq!(list[i], CODEC_DROPS[i]);
            }
        }
        for list in [DECRYPT_DROPS, ENCRYPT_DROPS, OUT_DROPS] {
            let mut names: Vec<_> = list.iter().map(|d| d.0).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), list.len(), "a reason named twice");
        }
        assert_eq!(DECRYPT_DROPS[15].0, "unknown_spi");
        assert_eq!(DECRYPT_DROPS.last().map(|d| d.0), Some("no_buffer"));
        assert_eq!(OUT_DROPS[21].0, "handoff_full");
    }
}
