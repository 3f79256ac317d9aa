//! Transform types and IDs (IANA "Internet Key Exchange Version 2 (IKEv2) Parameters").

/// Transform type 1: encryption (IKE and ESP).
pub const ENCR: u8 = 1;
/// Transform type 2: pseudo-random function (IKE only).
pub const PRF: u8 = 2;
/// Transform type 3: integrity (IKE, and ESP without an AEAD).
pub const INTEG: u8 = 3;
/// Transform type 4: key exchange (Diffie-Hellman group).
pub const DH: u8 = 4;
/// Transform type 5: extended sequence numbers (ESP).
pub const ESN: u8 = 5;

/// The attribute type of a transform's key length (TV format, bits).
pub const ATTR_KEY_LENGTH: u16 = 14;

/// Encryption algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encr {
    /// AES-CBC (RFC 3602) with a key of 128, 192 or 256 bits; needs an integrity transform.
    AesCbc { key_bits: u16 },
    /// AES-GCM with a 16-byte ICV (RFC 4106, RFC 5282), key of 128 or 256 bits.
    AesGcm16 { key_bits: u16 },
    /// ChaCha20-Poly1305 (RFC 7634), 256-bit key.
    ChaCha20Poly1305,
}

impl Encr {
    pub const ID_AES_CBC: u16 = 12;
    pub const ID_AES_GCM_16: u16 = 20;
    pub const ID_CHACHA20_POLY1305: u16 = 28;

    /// From a transform ID and its key-length attribute (`None` when absent).
    pub fn from_id(id: u16, key_bits: Option<u16>) -> Option<Encr> {
        match (id, key_bits) {
            (Self::ID_AES_CBC, Some(k @ (128 | 192 | 256))) => Some(Encr::AesCbc { key_bits: k }),
            (Self::ID_AES_GCM_16, Some(k @ (128 | 256))) => Some(Encr::AesGcm16 { key_bits: k }),
            (Self::ID_CHACHA20_POLY1305, None) => Some(Encr::ChaCha20Poly1305),
            _ => None,
        }
    }

    /// The transform ID and key-length attribute it is sent with.
    pub fn id(self) -> (u16, Option<u16>) {
        match self {
            Encr::AesCbc { key_bits } => (Self::ID_AES_CBC, Some(key_bits)),
            Encr::AesGcm16 { key_bits } => (Self::ID_AES_GCM_16, Some(key_bits)),
            Encr::ChaCha20Poly1305 => (Self::ID_CHACHA20_POLY1305, None),
        }
    }

    /// An AEAD (no integrity transform with it).
    pub fn is_aead(self) -> bool {
        !matches!(self, Encr::AesCbc { .. })
    }

    /// Keying material it takes: the key, plus the 4-byte salt of the AEADs (RFC 5282 §7.1,
    /// RFC 7634 §2).
    pub fn keymat_len(self) -> usize {
        match self {
            Encr::AesCbc { key_bits } => usize::from(key_bits) / 8,
            Encr::AesGcm16 { key_bits } => usize::from(key_bits) / 8 + 4,
            Encr::ChaCha20Poly1305 => 32 + 4,
        }
    }

    /// The name ESP's SA config uses (`crates/ipsec`), e.g. `aes-128-gcm`.
    pub fn esp_name(self) -> String {
        match self {
            Encr::AesCbc { key_bits } => format!("aes-{key_bits}-cbc"),
            Encr::AesGcm16 { key_bits } => format!("aes-{key_bits}-gcm"),
            Encr::ChaCha20Poly1305 => "chacha20-poly1305".into(),
        }
    }
}

/// Pseudo-random functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Prf {
    HmacSha256,
    HmacSha384,
    HmacSha512,
}

impl Prf {
    pub fn from_id(id: u16) -> Option<Prf> {
        match id {
            5 => Some(Prf::HmacSha256),
            6 => Some(Prf::HmacSha384),
            7 => Some(Prf::HmacSha512),
            _ => None,
        }
    }

    pub fn id(self) -> u16 {
        match self {
            Prf::HmacSha256 => 5,
            Prf::HmacSha384 => 6,
            Prf::HmacSha512 => 7,
        }
    }

    /// Output length (and preferred key length), bytes.
    pub fn out_len(self) -> usize {
        match self {
            Prf::HmacSha256 => 32,
            Prf::HmacSha384 => 48,
            Prf::HmacSha512 => 64,
        }
    }
}

/// Integrity algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Integ {
    /// ESP only (RFC 8221 allows it there, RFC 8247 not for IKE).
    HmacSha1_96,
    HmacSha256_128,
    HmacSha384_192,
    HmacSha512_256,
}

impl Integ {
    pub fn from_id(id: u16) -> Option<Integ> {
        match id {
            2 => Some(Integ::HmacSha1_96),
            12 => Some(Integ::HmacSha256_128),
            13 => Some(Integ::HmacSha384_192),
            14 => Some(Integ::HmacSha512_256),
            _ => None,
        }
    }

    pub fn id(self) -> u16 {
        match self {
            Integ::HmacSha1_96 => 2,
            Integ::HmacSha256_128 => 12,
            Integ::HmacSha384_192 => 13,
            Integ::HmacSha512_256 => 14,
        }
    }

    /// Key length, bytes.
    pub fn key_len(self) -> usize {
        match self {
            Integ::HmacSha1_96 => 20,
            Integ::HmacSha256_128 => 32,
            Integ::HmacSha384_192 => 48,
            Integ::HmacSha512_256 => 64,
        }
    }

    /// Truncated ICV length, bytes.
    pub fn icv_len(self) -> usize {
        match self {
            Integ::HmacSha1_96 => 12,
            Integ::HmacSha256_128 => 16,
            Integ::HmacSha384_192 => 24,
            Integ::HmacSha512_256 => 32,
        }
    }

    /// The name ESP's SA config uses (`crates/ipsec`); `None` where ESP has none.
    pub fn esp_name(self) -> Option<&'static str> {
        match self {
            Integ::HmacSha1_96 => Some("hmac-sha1-96"),
            Integ::HmacSha256_128 => Some("hmac-sha2-256-128"),
            Integ::HmacSha384_192 => None,
            Integ::HmacSha512_256 => Some("hmac-sha2-512-256"),
        }
    }
}

/// Key-exchange (Diffie-Hellman) groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dh {
    /// 2048-bit MODP (RFC 3526), group 14.
    Modp2048,
    /// NIST P-256 (RFC 5903), group 19.
    Ecp256,
    /// NIST P-384, group 20.
    Ecp384,
    /// Curve25519 (RFC 8031), group 31.
    Curve25519,
}

impl Dh {
    pub fn from_id(id: u16) -> Option<Dh> {
        match id {
            14 => Some(Dh::Modp2048),
            19 => Some(Dh::Ecp256),
            20 => Some(Dh::Ecp384),
            31 => Some(Dh::Curve25519),
            _ => None,
        }
    }

    pub fn id(self) -> u16 {
        match self {
            Dh::Modp2048 => 14,
            Dh::Ecp256 => 19,
            Dh::Ecp384 => 20,
            Dh::Curve25519 => 31,
        }
    }

    /// The length of a public value in the KE payload, bytes (RFC 5903 §7: x || y
    /// without the 0x04 prefix for the ECP groups).
    pub fn public_len(self) -> usize {
        match self {
            Dh::Modp2048 => 256,
            Dh::Ecp256 => 64,
            Dh::Ecp384 => 96,
            Dh::Curve25519 => 32,
        }
    }
}
