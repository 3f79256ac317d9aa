//! The IKEv2 message codec (RFC 7296 §3): the header and the payloads, parsed from and
//! written to bytes.
//!
//! Parsing is for hostile input: every length is checked against what contains it, the
//! number of payloads, proposals, transforms and selectors is bounded, and an error says
//! which RFC response it calls for ([`WireError::notify`]). The encrypted payload (SK, or
//! SKF for fragments) is the last one of a message: [`parse`] stops there and says where
//! it is; its plaintext is parsed by [`parse_payloads`] once decrypted (`crate::crypto`).
//!
//! Why not a crate: the Rust IKEv2 parsers published (`ipsec-parser`) parse only, and a
//! daemon must also build every message it parses; this codec does both with one set of
//! types, and is fuzzed (`fuzzing.rs`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Length of the IKE header.
pub const HEADER_LEN: usize = 28;
/// The largest message accepted (a UDP datagram's payload at most; RFC 7296 §2 asks for
/// at least 1280 bytes, 3000 recommended).
pub const MAX_MESSAGE: usize = 65_535 - 8;
/// Bounds on what one message may hold (far above what a real peer sends).
pub const MAX_PAYLOADS: usize = 64;
pub const MAX_PROPOSALS: usize = 32;
pub const MAX_TRANSFORMS: usize = 64;
pub const MAX_SELECTORS: usize = 32;
pub const MAX_ATTRIBUTES: usize = 32;
pub const MAX_DELETE_SPIS: usize = 1024;

/// Exchange types.
pub mod exchange {
    pub const IKE_SA_INIT: u8 = 34;
    pub const IKE_AUTH: u8 = 35;
    pub const CREATE_CHILD_SA: u8 = 36;
    pub const INFORMATIONAL: u8 = 37;
}

/// Header flags.
pub mod flags {
    /// Sent by the original initiator of the IKE SA.
    pub const INITIATOR: u8 = 0x08;
    /// The sender can speak a higher major version.
    pub const VERSION: u8 = 0x10;
    /// A response.
    pub const RESPONSE: u8 = 0x20;
}

/// Payload types.
pub mod ptype {
    pub const NONE: u8 = 0;
    pub const SA: u8 = 33;
    pub const KE: u8 = 34;
    pub const IDI: u8 = 35;
    pub const IDR: u8 = 36;
    pub const CERT: u8 = 37;
    pub const CERTREQ: u8 = 38;
    pub const AUTH: u8 = 39;
    pub const NONCE: u8 = 40;
    pub const NOTIFY: u8 = 41;
    pub const DELETE: u8 = 42;
    pub const VENDOR: u8 = 43;
    pub const TSI: u8 = 44;
    pub const TSR: u8 = 45;
    pub const SK: u8 = 46;
    pub const CP: u8 = 47;
    pub const EAP: u8 = 48;
    /// Encrypted and authenticated fragment (RFC 7383).
    pub const SKF: u8 = 53;
}

/// Notify message types (§3.10.1, RFC 7383, RFC 7427).
pub mod notify {
    pub const UNSUPPORTED_CRITICAL_PAYLOAD: u16 = 1;
    pub const INVALID_IKE_SPI: u16 = 4;
    pub const INVALID_MAJOR_VERSION: u16 = 5;
    pub const INVALID_SYNTAX: u16 = 7;
    pub const INVALID_MESSAGE_ID: u16 = 9;
    pub const INVALID_SPI: u16 = 11;
    pub const NO_PROPOSAL_CHOSEN: u16 = 14;
    pub const INVALID_KE_PAYLOAD: u16 = 17;
    pub const AUTHENTICATION_FAILED: u16 = 24;
    pub const SINGLE_PAIR_REQUIRED: u16 = 34;
    pub const NO_ADDITIONAL_SAS: u16 = 35;
    pub const INTERNAL_ADDRESS_FAILURE: u16 = 36;
    pub const FAILED_CP_REQUIRED: u16 = 37;
    pub const TS_UNACCEPTABLE: u16 = 38;
    pub const INVALID_SELECTORS: u16 = 39;
    pub const TEMPORARY_FAILURE: u16 = 43;
    pub const CHILD_SA_NOT_FOUND: u16 = 44;
    /// Below this: errors; from it on: status.
    pub const FIRST_STATUS: u16 = 16384;
    pub const INITIAL_CONTACT: u16 = 16384;
    pub const SET_WINDOW_SIZE: u16 = 16385;
    pub const ADDITIONAL_TS_POSSIBLE: u16 = 16386;
    pub const IPCOMP_SUPPORTED: u16 = 16387;
    pub const NAT_DETECTION_SOURCE_IP: u16 = 16388;
    pub const NAT_DETECTION_DESTINATION_IP: u16 = 16389;
    pub const COOKIE: u16 = 16390;
    pub const USE_TRANSPORT_MODE: u16 = 16391;
    pub const REKEY_SA: u16 = 16393;
    pub const ESP_TFC_PADDING_NOT_SUPPORTED: u16 = 16394;
    pub const NON_FIRST_FRAGMENTS_ALSO: u16 = 16395;
    pub const MOBIKE_SUPPORTED: u16 = 16396;
    pub const IKEV2_FRAGMENTATION_SUPPORTED: u16 = 16430;
    pub const SIGNATURE_HASH_ALGORITHMS: u16 = 16431;

    /// A name for logs and counters.
    pub fn name(t: u16) -> &'static str {
        match t {
            UNSUPPORTED_CRITICAL_PAYLOAD => "UNSUPPORTED_CRITICAL_PAYLOAD",
            INVALID_IKE_SPI => "INVALID_IKE_SPI",
            INVALID_MAJOR_VERSION => "INVALID_MAJOR_VERSION",
            INVALID_SYNTAX => "INVALID_SYNTAX",
            INVALID_MESSAGE_ID => "INVALID_MESSAGE_ID",
            INVALID_SPI => "INVALID_SPI",
            NO_PROPOSAL_CHOSEN => "NO_PROPOSAL_CHOSEN",
            INVALID_KE_PAYLOAD => "INVALID_KE_PAYLOAD",
            AUTHENTICATION_FAILED => "AUTHENTICATION_FAILED",
            SINGLE_PAIR_REQUIRED => "SINGLE_PAIR_REQUIRED",
            NO_ADDITIONAL_SAS => "NO_ADDITIONAL_SAS",
            INTERNAL_ADDRESS_FAILURE => "INTERNAL_ADDRESS_FAILURE",
            FAILED_CP_REQUIRED => "FAILED_CP_REQUIRED",
            TS_UNACCEPTABLE => "TS_UNACCEPTABLE",
            INVALID_SELECTORS => "INVALID_SELECTORS",
            TEMPORARY_FAILURE => "TEMPORARY_FAILURE",
            CHILD_SA_NOT_FOUND => "CHILD_SA_NOT_FOUND",
            INITIAL_CONTACT => "INITIAL_CONTACT",
            SET_WINDOW_SIZE => "SET_WINDOW_SIZE",
            ADDITIONAL_TS_POSSIBLE => "ADDITIONAL_TS_POSSIBLE",
            IPCOMP_SUPPORTED => "IPCOMP_SUPPORTED",
            NAT_DETECTION_SOURCE_IP => "NAT_DETECTION_SOURCE_IP",
            NAT_DETECTION_DESTINATION_IP => "NAT_DETECTION_DESTINATION_IP",
            COOKIE => "COOKIE",
            USE_TRANSPORT_MODE => "USE_TRANSPORT_MODE",
            REKEY_SA => "REKEY_SA",
            ESP_TFC_PADDING_NOT_SUPPORTED => "ESP_TFC_PADDING_NOT_SUPPORTED",
            NON_FIRST_FRAGMENTS_ALSO => "NON_FIRST_FRAGMENTS_ALSO",
            MOBIKE_SUPPORTED => "MOBIKE_SUPPORTED",
            IKEV2_FRAGMENTATION_SUPPORTED => "IKEV2_FRAGMENTATION_SUPPORTED",
            SIGNATURE_HASH_ALGORITHMS => "SIGNATURE_HASH_ALGORITHMS",
            t if t < FIRST_STATUS => "error",
            _ => "status",
        }
    }
}

/// Protocol IDs in proposals, notifications and deletes.
pub mod proto {
    pub const IKE: u8 = 1;
    pub const AH: u8 = 2;
    pub const ESP: u8 = 3;
}

/// Certificate encodings of CERT and CERTREQ payloads (§3.6).
pub mod cert {
    /// X.509 Certificate - Signature: one DER certificate.
    pub const X509: u8 = 4;
}

/// Authentication methods (§3.8, RFC 7427).
pub mod auth {
    pub const RSA: u8 = 1;
    pub const PSK: u8 = 2;
    pub const ECDSA_P256: u8 = 9;
    pub const ECDSA_P384: u8 = 10;
    pub const ECDSA_P521: u8 = 11;
    pub const DIGITAL_SIGNATURE: u8 = 14;
}

/// Why a message could not be parsed, and so what the RFC says to answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("message is {len} bytes, shorter than the IKE header")]
    Short { len: usize },
    #[error("major version {0} is not 2")]
    Version(u8),
    #[error("header says {said} bytes, the datagram has {got}")]
    Length { said: usize, got: usize },
    #[error("{what}: {why}")]
    Syntax { what: &'static str, why: String },
    #[error("critical payload of unknown type {0}")]
    UnsupportedCritical(u8),
    #[error("more than {max} {what} in one message")]
    TooMany { what: &'static str, max: usize },
    /// An SKF payload numbered 0, or past its Total Fragments (RFC 7383 §2.6).
    #[error("SKF payload: fragment {number} of {total}")]
    FragmentNumber { number: u16, total: u16 },
}

impl WireError {
    fn syntax(what: &'static str, why: impl Into<String>) -> WireError {
        WireError::Syntax {
            what,
            why: why.into(),
        }
    }

    /// The notification a responder answers a request that failed so with (§2.21.1;
    /// INVALID_MAJOR_VERSION §1.5); `None`: drop it silently (§2.21: an unauthenticated
    /// message that cannot be parsed gets no answer beyond these).
    pub fn notify(&self) -> Option<(u16, Vec<u8>)> {
        match self {
            WireError::Version(_) => Some((notify::INVALID_MAJOR_VERSION, vec![])),
            WireError::UnsupportedCritical(t) => {
                Some((notify::UNSUPPORTED_CRITICAL_PAYLOAD, vec![*t]))
            }
            WireError::Syntax { .. } | WireError::TooMany { .. } => {
                Some((notify::INVALID_SYNTAX, vec![]))
            }
            WireError::Short { .. }
            | WireError::Length { .. }
            | WireError::FragmentNumber { .. } => None,
        }
    }

    /// A short label for counters ("malformed", "unsupported_critical", ...).
    pub fn reason(&self) -> &'static str {
        match self {
            WireError::Short { .. } | WireError::Length { .. } => "truncated",
            WireError::Version(_) => "version",
            WireError::Syntax { .. } | WireError::TooMany { .. } => "malformed",
            WireError::UnsupportedCritical(_) => "unsupported_critical",
            WireError::FragmentNumber { .. } => "fragment_out_of_range",
        }
    }
}

/// The IKE header (§3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Header {
    pub spi_i: u64,
    pub spi_r: u64,
    /// The first payload's type.
    pub next: u8,
    /// Major and minor version (0x20).
    pub version: u8,
    pub exchange: u8,
    pub flags: u8,
    pub message_id: u32,
    /// The whole message's length, header included.
    pub length: u32,
}

impl Header {
    /// Reads the header alone (what the daemon routes a datagram by).
    pub fn parse(b: &[u8]) -> Result<Header, WireError> {
        if b.len() < HEADER_LEN {
            return Err(WireError::Short { len: b.len() });
        }
        Ok(Header {
            spi_i: u64::from_be_bytes(b[0..8].try_into().unwrap_or_default()),
            spi_r: u64::from_be_bytes(b[8..16].try_into().unwrap_or_default()),
            next: b[16],
            version: b[17],
            exchange: b[18],
            flags: b[19],
            message_id: u32::from_be_bytes(b[20..24].try_into().unwrap_or_default()),
            length: u32::from_be_bytes(b[24..28].try_into().unwrap_or_default()),
        })
    }

    pub fn is_response(&self) -> bool {
        self.flags & flags::RESPONSE != 0
    }

    pub fn is_initiator(&self) -> bool {
        self.flags & flags::INITIATOR != 0
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.spi_i.to_be_bytes());
        out.extend_from_slice(&self.spi_r.to_be_bytes());
        out.push(self.next);
        out.push(self.version);
        out.push(self.exchange);
        out.push(self.flags);
        out.extend_from_slice(&self.message_id.to_be_bytes());
        out.extend_from_slice(&self.length.to_be_bytes());
    }
}

/// A transform attribute (§3.3.5): only the key length is defined for IKEv2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transform {
    pub kind: u8,
    pub id: u16,
    /// The key-length attribute, bits.
    pub key_bits: Option<u16>,
    /// An attribute other than the key length was present: the transform cannot be
    /// chosen (§3.3.6: unknown attributes make a transform unacceptable).
    pub unknown_attribute: bool,
}

/// A proposal (§3.3.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proposal {
    pub number: u8,
    pub protocol: u8,
    /// Empty for the first IKE_SA_INIT; 8 bytes for an IKE rekey; 4 for ESP.
    pub spi: Vec<u8>,
    pub transforms: Vec<Transform>,
}

/// An identification (§3.5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Id {
    pub kind: u8,
    pub data: Vec<u8>,
}

/// ID types.
pub mod id {
    pub const IPV4_ADDR: u8 = 1;
    pub const FQDN: u8 = 2;
    pub const RFC822_ADDR: u8 = 3;
    pub const IPV6_ADDR: u8 = 5;
    pub const DER_ASN1_DN: u8 = 9;
    pub const KEY_ID: u8 = 11;
}

impl Id {
    /// The ID payload's body (type, 3 reserved bytes, data): what AUTH signs (§2.15).
    pub fn body(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(4 + self.data.len());
        v.extend_from_slice(&[self.kind, 0, 0, 0]);
        v.extend_from_slice(&self.data);
        v
    }

    /// As a person writes it: `gw.example`, `user@example`, `192.0.2.1`, or hex.
    pub fn text(&self) -> String {
        match self.kind {
            id::FQDN | id::RFC822_ADDR => String::from_utf8_lossy(&self.data).into_owned(),
            id::IPV4_ADDR if self.data.len() == 4 => {
                let a: [u8; 4] = self.data[..].try_into().unwrap_or_default();
                Ipv4Addr::from(a).to_string()
            }
            id::IPV6_ADDR if self.data.len() == 16 => {
                let a: [u8; 16] = self.data[..].try_into().unwrap_or_default();
                Ipv6Addr::from(a).to_string()
            }
            id::DER_ASN1_DN => match crate::dn::to_text(&self.data) {
                Some(t) => format!("dn:{t}"),
                None => self.data.iter().map(|b| format!("{b:02x}")).collect(),
            },
            _ => self.data.iter().map(|b| format!("{b:02x}")).collect(),
        }
    }
}

/// A notification (§3.10).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notify {
    pub protocol: u8,
    pub spi: Vec<u8>,
    pub kind: u16,
    pub data: Vec<u8>,
}

/// A traffic selector (§3.13.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Selector {
    /// IP protocol, 0: any.
    pub protocol: u8,
    pub start_port: u16,
    pub end_port: u16,
    pub start: IpAddr,
    pub end: IpAddr,
}

/// Selector types.
const TS_IPV4: u8 = 7;
const TS_IPV6: u8 = 8;

impl Selector {
    /// One address, all protocols and ports.
    pub fn host(a: IpAddr) -> Selector {
        Selector {
            protocol: 0,
            start_port: 0,
            end_port: u16::MAX,
            start: a,
            end: a,
        }
    }

    /// Everything of one family: `0.0.0.0-255.255.255.255`, all protocols and ports.
    pub fn any(v6: bool) -> Selector {
        let (start, end): (IpAddr, IpAddr) = if v6 {
            (
                Ipv6Addr::UNSPECIFIED.into(),
                Ipv6Addr::from(u128::MAX).into(),
            )
        } else {
            (Ipv4Addr::UNSPECIFIED.into(), Ipv4Addr::BROADCAST.into())
        };
        Selector {
            protocol: 0,
            start_port: 0,
            end_port: 65535,
            start,
            end,
        }
    }
}

/// A configuration attribute (§3.15.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CfgAttr {
    pub kind: u16,
    pub value: Vec<u8>,
}

/// Configuration payload types and attributes.
pub mod cfg {
    pub const REQUEST: u8 = 1;
    pub const REPLY: u8 = 2;
    pub const INTERNAL_IP4_ADDRESS: u16 = 1;
    pub const INTERNAL_IP4_NETMASK: u16 = 2;
    pub const INTERNAL_IP4_DNS: u16 = 3;
    pub const INTERNAL_IP6_ADDRESS: u16 = 8;
    pub const INTERNAL_IP6_DNS: u16 = 10;
}

/// What a CP(CFG_REQUEST) asks for (§3.15), as a responder handing out addresses reads
/// it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CfgAsk {
    /// INTERNAL_IP4_ADDRESS (empty, or the address the initiator would like).
    pub ip4: bool,
    /// INTERNAL_IP6_ADDRESS.
    pub ip6: bool,
}

/// Reads a CFG_REQUEST's attributes: the known ones must have one of the lengths §3.15.1
/// gives them (else an error naming the attribute); unknown ones are ignored.
pub fn cfg_request(attrs: &[CfgAttr]) -> Result<CfgAsk, WireError> {
    let mut ask = CfgAsk::default();
    for a in attrs {
        let (name, lens): (&str, &[usize]) = match a.kind {
            cfg::INTERNAL_IP4_ADDRESS => ("INTERNAL_IP4_ADDRESS", &[0, 4]),
            cfg::INTERNAL_IP4_NETMASK => ("INTERNAL_IP4_NETMASK", &[0, 4]),
            cfg::INTERNAL_IP4_DNS => ("INTERNAL_IP4_DNS", &[0, 4]),
            cfg::INTERNAL_IP6_ADDRESS => ("INTERNAL_IP6_ADDRESS", &[0, 17]),
            cfg::INTERNAL_IP6_DNS => ("INTERNAL_IP6_DNS", &[0, 16]),
            _ => continue,
        };
        if !lens.contains(&a.value.len()) {
            return Err(WireError::syntax(
                "CP payload",
                format!("{name} of {} bytes", a.value.len()),
            ));
        }
        match a.kind {
            cfg::INTERNAL_IP4_ADDRESS => ask.ip4 = true,
            cfg::INTERNAL_IP6_ADDRESS => ask.ip6 = true,
            _ => {}
        }
    }
    Ok(ask)
}

/// A payload. Those of unknown types that are not critical are kept as [`Payload::Unknown`]
/// (and ignored, §2.5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    Sa(Vec<Proposal>),
    Ke { group: u16, data: Vec<u8> },
    IdI(Id),
    IdR(Id),
    Cert { encoding: u8, data: Vec<u8> },
    CertReq { encoding: u8, data: Vec<u8> },
    Auth { method: u8, data: Vec<u8> },
    Nonce(Vec<u8>),
    Notify(Notify),
    Delete { protocol: u8, spis: Vec<Vec<u8>> },
    Vendor(Vec<u8>),
    TsI(Vec<Selector>),
    TsR(Vec<Selector>),
    Cp { kind: u8, attrs: Vec<CfgAttr> },
    Eap(Vec<u8>),
    Unknown { kind: u8, body: Vec<u8> },
}

impl Payload {
    /// Its payload type number.
    pub fn kind(&self) -> u8 {
        match self {
            Payload::Sa(_) => ptype::SA,
            Payload::Ke { .. } => ptype::KE,
            Payload::IdI(_) => ptype::IDI,
            Payload::IdR(_) => ptype::IDR,
            Payload::Cert { .. } => ptype::CERT,
            Payload::CertReq { .. } => ptype::CERTREQ,
            Payload::Auth { .. } => ptype::AUTH,
            Payload::Nonce(_) => ptype::NONCE,
            Payload::Notify(_) => ptype::NOTIFY,
            Payload::Delete { .. } => ptype::DELETE,
            Payload::Vendor(_) => ptype::VENDOR,
            Payload::TsI(_) => ptype::TSI,
            Payload::TsR(_) => ptype::TSR,
            Payload::Cp { .. } => ptype::CP,
            Payload::Eap(_) => ptype::EAP,
            Payload::Unknown { kind, .. } => *kind,
        }
    }

    /// A notification without SPI.
    pub fn notify(kind: u16, data: Vec<u8>) -> Payload {
        Payload::Notify(Notify {
            protocol: 0,
            spi: vec![],
            kind,
            data,
        })
    }
}

/// Where the encrypted payload is, when a message has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Encrypted {
    /// Offset of its generic payload header in the message.
    pub at: usize,
    /// [`ptype::SK`] or [`ptype::SKF`].
    pub kind: u8,
    /// The type of the first payload inside.
    pub first_inner: u8,
    /// Its header length: 4 (SK) or 8 (SKF).
    pub header_len: usize,
    /// SKF: fragment number and total fragments (RFC 7383 §2.5).
    pub fragment: Option<(u16, u16)>,
}

/// A parsed message: the header, the payloads before any encrypted one, and where that is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub header: Header,
    pub payloads: Vec<Payload>,
    pub encrypted: Option<Encrypted>,
}

/// Parses a datagram's IKE message (after any non-ESP marker).
pub fn parse(b: &[u8]) -> Result<Message, WireError> {
    let header = Header::parse(b)?;
    if header.version >> 4 != 2 {
        return Err(WireError::Version(header.version >> 4));
    }
    let len = header.length as usize;
    if len != b.len() || len > MAX_MESSAGE {
        return Err(WireError::Length {
            said: len,
            got: b.len(),
        });
    }
    let mut payloads = Vec::new();
    let encrypted = walk(header.next, b, HEADER_LEN, &mut payloads, true)?;
    Ok(Message {
        header,
        payloads,
        encrypted,
    })
}

/// Parses the payloads inside a decrypted SK payload, `first` being the type of the first.
/// A nested SK is refused.
pub fn parse_payloads(first: u8, b: &[u8]) -> Result<Vec<Payload>, WireError> {
    let mut payloads = Vec::new();
    walk(first, b, 0, &mut payloads, false)?;
    Ok(payloads)
}

fn walk(
    mut next: u8,
    b: &[u8],
    mut at: usize,
    out: &mut Vec<Payload>,
    outer: bool,
) -> Result<Option<Encrypted>, WireError> {
    while next != ptype::NONE {
        if out.len() >= MAX_PAYLOADS {
            return Err(WireError::TooMany {
                what: "payloads",
                max: MAX_PAYLOADS,
            });
        }
        let Some(h) = b.get(at..at + 4) else {
            return Err(WireError::syntax(
                "payload header",
                format!("payload type {next} at offset {at} runs past the end"),
            ));
        };
        let this_next = h[0];
        let critical = h[1] & 0x80 != 0;
        let plen = usize::from(u16::from_be_bytes([h[2], h[3]]));
        if plen < 4 || at + plen > b.len() {
            return Err(WireError::syntax(
                "payload length",
                format!(
                    "payload type {next} at offset {at} says {plen} bytes, {} left",
                    b.len() - at
                ),
            ));
        }
        let body = &b[at + 4..at + plen];
        if next == ptype::SK || next == ptype::SKF {
            if !outer {
                return Err(WireError::syntax("SK payload", "inside an SK payload"));
            }
            // The encrypted payload is the last (§3.14; RFC 7383 §2.5).
            if at + plen != b.len() {
                return Err(WireError::syntax(
                    "SK payload",
                    "not the last payload of the message",
                ));
            }
            let (header_len, fragment) = if next == ptype::SKF {
                if body.len() < 4 {
                    return Err(WireError::syntax("SKF payload", "shorter than 8 bytes"));
                }
                let n = u16::from_be_bytes([body[0], body[1]]);
                let total = u16::from_be_bytes([body[2], body[3]]);
                if n == 0 || total == 0 || n > total {
                    return Err(WireError::FragmentNumber { number: n, total });
                }
                (8, Some((n, total)))
            } else {
                (4, None)
            };
            return Ok(Some(Encrypted {
                at,
                kind: next,
                first_inner: this_next,
                header_len,
                fragment,
            }));
        }
        match body_parse(next, body) {
            Ok(Some(p)) => out.push(p),
            Ok(None) => {
                if critical {
                    return Err(WireError::UnsupportedCritical(next));
                }
                out.push(Payload::Unknown {
                    kind: next,
                    body: body.to_vec(),
                });
            }
            Err(e) => return Err(e),
        }
        at += plen;
        next = this_next;
    }
    if at != b.len() {
        return Err(WireError::syntax(
            "payload chain",
            format!("{} bytes after the last payload", b.len() - at),
        ));
    }
    Ok(None)
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// A payload's body; `Ok(None)` for a type this codec does not know.
fn body_parse(kind: u8, b: &[u8]) -> Result<Option<Payload>, WireError> {
    let fixed = |n: usize, what: &'static str| {
        if b.len() < n {
            Err(WireError::syntax(
                what,
                format!("body is {} bytes, at least {n} needed", b.len()),
            ))
        } else {
            Ok(())
        }
    };
    Ok(Some(match kind {
        ptype::SA => Payload::Sa(proposals(b)?),
        ptype::KE => {
            fixed(4, "KE payload")?;
            Payload::Ke {
                group: be16(b, 0),
                data: b[4..].to_vec(),
            }
        }
        ptype::IDI | ptype::IDR => {
            fixed(5, "ID payload")?;
            let id = Id {
                kind: b[0],
                data: b[4..].to_vec(),
            };
            if kind == ptype::IDI {
                Payload::IdI(id)
            } else {
                Payload::IdR(id)
            }
        }
        ptype::CERT | ptype::CERTREQ => {
            fixed(1, "CERT payload")?;
            let (encoding, data) = (b[0], b[1..].to_vec());
            if kind == ptype::CERT {
                Payload::Cert { encoding, data }
            } else {
                Payload::CertReq { encoding, data }
            }
        }
        ptype::AUTH => {
            fixed(5, "AUTH payload")?;
            Payload::Auth {
                method: b[0],
                data: b[4..].to_vec(),
            }
        }
        ptype::NONCE => {
            // §3.9: 16 to 256 bytes.
            if !(16..=256).contains(&b.len()) {
                return Err(WireError::syntax(
                    "Nonce payload",
                    format!("{} bytes, not 16 to 256", b.len()),
                ));
            }
            Payload::Nonce(b.to_vec())
        }
        ptype::NOTIFY => {
            fixed(4, "Notify payload")?;
            let spi_len = usize::from(b[1]);
            if 4 + spi_len > b.len() {
                return Err(WireError::syntax(
                    "Notify payload",
                    format!("SPI of {spi_len} bytes past the end"),
                ));
            }
            Payload::Notify(Notify {
                protocol: b[0],
                kind: be16(b, 2),
                spi: b[4..4 + spi_len].to_vec(),
                data: b[4 + spi_len..].to_vec(),
            })
        }
        ptype::DELETE => {
            fixed(4, "Delete payload")?;
            let (protocol, spi_len, n) = (b[0], usize::from(b[1]), usize::from(be16(b, 2)));
            let expected = match protocol {
                proto::IKE => 0,
                proto::AH | proto::ESP => 4,
                p => return Err(WireError::syntax("Delete payload", format!("protocol {p}"))),
            };
            if spi_len != expected || n > MAX_DELETE_SPIS || 4 + spi_len * n != b.len() {
                return Err(WireError::syntax(
                    "Delete payload",
                    format!(
                        "{n} SPIs of {spi_len} bytes in {} bytes for protocol {protocol}",
                        b.len() - 4
                    ),
                ));
            }
            Payload::Delete {
                protocol,
                spis: b[4..].chunks(spi_len.max(1)).map(<[u8]>::to_vec).collect(),
            }
        }
        ptype::VENDOR => Payload::Vendor(b.to_vec()),
        ptype::TSI | ptype::TSR => {
            let s = selectors(b)?;
            if kind == ptype::TSI {
                Payload::TsI(s)
            } else {
                Payload::TsR(s)
            }
        }
        ptype::CP => {
            fixed(4, "CP payload")?;
            let mut attrs = Vec::new();
            let mut at = 4;
            while at < b.len() {
                if attrs.len() >= MAX_ATTRIBUTES {
                    return Err(WireError::TooMany {
                        what: "configuration attributes",
                        max: MAX_ATTRIBUTES,
                    });
                }
                if at + 4 > b.len() {
                    return Err(WireError::syntax("CP payload", "attribute header cut"));
                }
                let (t, l) = (be16(b, at) & 0x7fff, usize::from(be16(b, at + 2)));
                if at + 4 + l > b.len() {
                    return Err(WireError::syntax(
                        "CP payload",
                        format!("attribute {t} of {l} bytes past the end"),
                    ));
                }
                attrs.push(CfgAttr {
                    kind: t,
                    value: b[at + 4..at + 4 + l].to_vec(),
                });
                at += 4 + l;
            }
            Payload::Cp { kind: b[0], attrs }
        }
        ptype::EAP => Payload::Eap(b.to_vec()),
        _ => return Ok(None),
    }))
}

fn proposals(b: &[u8]) -> Result<Vec<Proposal>, WireError> {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        if out.len() >= MAX_PROPOSALS {
            return Err(WireError::TooMany {
                what: "proposals",
                max: MAX_PROPOSALS,
            });
        }
        if at + 8 > b.len() {
            return Err(WireError::syntax("SA payload", "proposal header cut"));
        }
        let last = b[at];
        let plen = usize::from(be16(b, at + 2));
        if plen < 8 || at + plen > b.len() || (last != 0 && last != 2) {
            return Err(WireError::syntax(
                "SA payload",
                format!("proposal of {plen} bytes (last/more {last}) at {at}"),
            ));
        }
        let p = &b[at..at + plen];
        let (number, protocol, spi_len, n) = (p[4], p[5], usize::from(p[6]), usize::from(p[7]));
        if 8 + spi_len > plen {
            return Err(WireError::syntax("SA payload", "proposal SPI past its end"));
        }
        if n > MAX_TRANSFORMS {
            return Err(WireError::TooMany {
                what: "transforms in a proposal",
                max: MAX_TRANSFORMS,
            });
        }
        let spi = p[8..8 + spi_len].to_vec();
        let mut transforms = Vec::with_capacity(n);
        let mut t = 8 + spi_len;
        for k in 0..n {
            if t + 8 > plen {
                return Err(WireError::syntax(
                    "SA payload",
                    format!("transform {} of {n} in proposal {number} cut", k + 1),
                ));
            }
            let tlast = p[t];
            let tlen = usize::from(be16(p, t + 2));
            let ok_last = if k + 1 == n { tlast == 0 } else { tlast == 3 };
            if tlen < 8 || t + tlen > plen || !ok_last {
                return Err(WireError::syntax(
                    "SA payload",
                    format!("transform {} of {n} in proposal {number}: length {tlen}, last/more {tlast}", k + 1),
                ));
            }
            let (kind, id) = (p[t + 4], be16(p, t + 6));
            let mut key_bits = None;
            let mut unknown_attribute = false;
            let mut a = t + 8;
            let mut count = 0;
            while a < t + tlen {
                count += 1;
                if count > MAX_ATTRIBUTES || a + 4 > t + tlen {
                    return Err(WireError::syntax(
                        "SA payload",
                        format!("attributes of transform {} in proposal {number}", k + 1),
                    ));
                }
                let at_type = be16(p, a);
                if at_type & 0x8000 != 0 {
                    // TV: a 2-byte value.
                    if at_type & 0x7fff == crate::transform::ATTR_KEY_LENGTH {
                        key_bits = Some(be16(p, a + 2));
                    } else {
                        unknown_attribute = true;
                    }
                    a += 4;
                } else {
                    let l = usize::from(be16(p, a + 2));
                    if a + 4 + l > t + tlen {
                        return Err(WireError::syntax(
                            "SA payload",
                            "attribute value past its transform",
                        ));
                    }
                    unknown_attribute = true;
                    a += 4 + l;
                }
            }
            transforms.push(Transform {
                kind,
                id,
                key_bits,
                unknown_attribute,
            });
            t += tlen;
        }
        if t != plen {
            return Err(WireError::syntax(
                "SA payload",
                format!(
                    "{} bytes after the transforms of proposal {number}",
                    plen - t
                ),
            ));
        }
        out.push(Proposal {
            number,
            protocol,
            spi,
            transforms,
        });
        at += plen;
        if last == 0 {
            break;
        }
    }
    if at != b.len() {
        return Err(WireError::syntax(
            "SA payload",
            "bytes after the last proposal",
        ));
    }
    Ok(out)
}

fn selectors(b: &[u8]) -> Result<Vec<Selector>, WireError> {
    if b.len() < 4 {
        return Err(WireError::syntax("TS payload", "shorter than 4 bytes"));
    }
    let n = usize::from(b[0]);
    if n == 0 || n > MAX_SELECTORS {
        return Err(WireError::syntax(
            "TS payload",
            format!("{n} selectors (1 to {MAX_SELECTORS})"),
        ));
    }
    let mut out = Vec::with_capacity(n);
    let mut at = 4;
    for k in 0..n {
        if at + 8 > b.len() {
            return Err(WireError::syntax(
                "TS payload",
                format!("selector {} of {n} cut", k + 1),
            ));
        }
        let (t, protocol, len) = (b[at], b[at + 1], usize::from(be16(b, at + 2)));
        let alen = match t {
            TS_IPV4 => 4,
            TS_IPV6 => 16,
            t => {
                return Err(WireError::syntax(
                    "TS payload",
                    format!("selector type {t}"),
                ))
            }
        };
        if len != 8 + 2 * alen || at + len > b.len() {
            return Err(WireError::syntax(
                "TS payload",
                format!("selector {} of {n}: length {len} for type {t}", k + 1),
            ));
        }
        let addr = |o: usize| -> IpAddr {
            if alen == 4 {
                let a: [u8; 4] = b[o..o + 4].try_into().unwrap_or_default();
                Ipv4Addr::from(a).into()
            } else {
                let a: [u8; 16] = b[o..o + 16].try_into().unwrap_or_default();
                Ipv6Addr::from(a).into()
            }
        };
        out.push(Selector {
            protocol,
            start_port: be16(b, at + 4),
            end_port: be16(b, at + 6),
            start: addr(at + 8),
            end: addr(at + 8 + alen),
        });
        at += len;
    }
    if at != b.len() {
        return Err(WireError::syntax("TS payload", "bytes after the selectors"));
    }
    Ok(out)
}

// ---- Writing ----

fn body_write(p: &Payload, o: &mut Vec<u8>) {
    match p {
        Payload::Sa(props) => {
            for (k, pr) in props.iter().enumerate() {
                let start = o.len();
                o.extend_from_slice(&[if k + 1 == props.len() { 0 } else { 2 }, 0, 0, 0]);
                o.extend_from_slice(&[
                    pr.number,
                    pr.protocol,
                    pr.spi.len() as u8,
                    pr.transforms.len() as u8,
                ]);
                o.extend_from_slice(&pr.spi);
                for (j, t) in pr.transforms.iter().enumerate() {
                    let ts = o.len();
                    o.extend_from_slice(&[
                        if j + 1 == pr.transforms.len() { 0 } else { 3 },
                        0,
                        0,
                        0,
                        t.kind,
                        0,
                    ]);
                    o.extend_from_slice(&t.id.to_be_bytes());
                    if let Some(k) = t.key_bits {
                        o.extend_from_slice(
                            &(0x8000 | crate::transform::ATTR_KEY_LENGTH).to_be_bytes(),
                        );
                        o.extend_from_slice(&k.to_be_bytes());
                    }
                    let tl = (o.len() - ts) as u16;
                    o[ts + 2..ts + 4].copy_from_slice(&tl.to_be_bytes());
                }
                let pl = (o.len() - start) as u16;
                o[start + 2..start + 4].copy_from_slice(&pl.to_be_bytes());
            }
        }
        Payload::Ke { group, data } => {
            o.extend_from_slice(&group.to_be_bytes());
            o.extend_from_slice(&[0, 0]);
            o.extend_from_slice(data);
        }
        Payload::IdI(id) | Payload::IdR(id) => o.extend_from_slice(&id.body()),
        Payload::Cert { encoding, data } | Payload::CertReq { encoding, data } => {
            o.push(*encoding);
            o.extend_from_slice(data);
        }
        Payload::Auth { method, data } => {
            o.extend_from_slice(&[*method, 0, 0, 0]);
            o.extend_from_slice(data);
        }
        Payload::Nonce(n) | Payload::Vendor(n) | Payload::Eap(n) => o.extend_from_slice(n),
        Payload::Notify(n) => {
            o.extend_from_slice(&[n.protocol, n.spi.len() as u8]);
            o.extend_from_slice(&n.kind.to_be_bytes());
            o.extend_from_slice(&n.spi);
            o.extend_from_slice(&n.data);
        }
        Payload::Delete { protocol, spis } => {
            let l = spis.first().map_or(0, Vec::len) as u8;
            o.extend_from_slice(&[*protocol, l]);
            o.extend_from_slice(&(spis.len() as u16).to_be_bytes());
            for s in spis {
                o.extend_from_slice(s);
            }
        }
        Payload::TsI(s) | Payload::TsR(s) => {
            o.extend_from_slice(&[s.len() as u8, 0, 0, 0]);
            for t in s {
                let (ty, len) = match t.start {
                    IpAddr::V4(_) => (TS_IPV4, 16u16),
                    IpAddr::V6(_) => (TS_IPV6, 40u16),
                };
                o.extend_from_slice(&[ty, t.protocol]);
                o.extend_from_slice(&len.to_be_bytes());
                o.extend_from_slice(&t.start_port.to_be_bytes());
                o.extend_from_slice(&t.end_port.to_be_bytes());
                for a in [t.start, t.end] {
                    match a {
                        IpAddr::V4(a) => o.extend_from_slice(&a.octets()),
                        IpAddr::V6(a) => o.extend_from_slice(&a.octets()),
                    }
                }
            }
        }
        Payload::Cp { kind, attrs } => {
            o.extend_from_slice(&[*kind, 0, 0, 0]);
            for a in attrs {
                o.extend_from_slice(&a.kind.to_be_bytes());
                o.extend_from_slice(&(a.value.len() as u16).to_be_bytes());
                o.extend_from_slice(&a.value);
            }
        }
        Payload::Unknown { body, .. } => o.extend_from_slice(body),
    }
}

/// Writes a chain of payloads, the last one's Next Payload being `last_next`.
pub fn write_payloads(ps: &[Payload], last_next: u8, o: &mut Vec<u8>) {
    for (k, p) in ps.iter().enumerate() {
        let next = ps.get(k + 1).map_or(last_next, Payload::kind);
        let start = o.len();
        o.extend_from_slice(&[next, 0, 0, 0]);
        body_write(p, o);
        let l = (o.len() - start) as u16;
        o[start + 2..start + 4].copy_from_slice(&l.to_be_bytes());
    }
}

/// A whole unencrypted message; the header's `next` and `length` are set here.
pub fn encode(mut h: Header, ps: &[Payload]) -> Vec<u8> {
    h.next = ps.first().map_or(ptype::NONE, Payload::kind);
    let mut o = Vec::with_capacity(256);
    h.write(&mut o);
    write_payloads(ps, ptype::NONE, &mut o);
    let l = o.len() as u32;
    o[24..28].copy_from_slice(&l.to_be_bytes());
    o
}

/// A message whose payloads go in an SK payload, before encryption: the header, the SK
/// payload's generic header (at the returned offset), then the inner payloads in
/// plaintext: what `crypto::SkCipher::seal` encrypts in place.
pub fn encode_sk(mut h: Header, inner: &[Payload]) -> (Vec<u8>, usize) {
    h.next = ptype::SK;
    let mut o = Vec::with_capacity(512);
    h.write(&mut o);
    let at = o.len();
    o.extend_from_slice(&[inner.first().map_or(ptype::NONE, Payload::kind), 0, 0, 0]);
    write_payloads(inner, ptype::NONE, &mut o);
    (o, at)
}

/// One fragment (RFC 7383) before encryption: the header, the SKF header (fragment
/// `number` of `total`; the first carries the inner payloads' first type, the others 0),
/// then that fragment's share of the plaintext.
pub fn encode_skf(
    mut h: Header,
    first_inner: u8,
    number: u16,
    total: u16,
    chunk: &[u8],
) -> (Vec<u8>, usize) {
    h.next = ptype::SKF;
    let mut o = Vec::with_capacity(HEADER_LEN + 8 + chunk.len() + 64);
    h.write(&mut o);
    let at = o.len();
    o.extend_from_slice(&[if number == 1 { first_inner } else { 0 }, 0, 0, 0]);
    o.extend_from_slice(&number.to_be_bytes());
    o.extend_from_slice(&total.to_be_bytes());
    o.extend_from_slice(chunk);
    (o, at)
}

/// The payloads a message's handling looks for, the first of each kind.
pub trait Find {
    fn sa(&self) -> Option<&Vec<Proposal>>;
    fn ke(&self) -> Option<(u16, &Vec<u8>)>;
    fn nonce(&self) -> Option<&Vec<u8>>;
    fn id_i(&self) -> Option<&Id>;
    fn id_r(&self) -> Option<&Id>;
    fn auth(&self) -> Option<(u8, &Vec<u8>)>;
    fn ts_i(&self) -> Option<&Vec<Selector>>;
    fn ts_r(&self) -> Option<&Vec<Selector>>;
    /// The first error notification (type below 16384).
    fn error_notify(&self) -> Option<&Notify>;
}

impl Find for [Payload] {
    fn sa(&self) -> Option<&Vec<Proposal>> {
        self.iter().find_map(|p| match p {
            Payload::Sa(v) => Some(v),
            _ => None,
        })
    }
    fn ke(&self) -> Option<(u16, &Vec<u8>)> {
        self.iter().find_map(|p| match p {
            Payload::Ke { group, data } => Some((*group, data)),
            _ => None,
        })
    }
    fn nonce(&self) -> Option<&Vec<u8>> {
        self.iter().find_map(|p| match p {
            Payload::Nonce(n) => Some(n),
            _ => None,
        })
    }
    fn id_i(&self) -> Option<&Id> {
        self.iter().find_map(|p| match p {
            Payload::IdI(i) => Some(i),
            _ => None,
        })
    }
    fn id_r(&self) -> Option<&Id> {
        self.iter().find_map(|p| match p {
            Payload::IdR(i) => Some(i),
            _ => None,
        })
    }
    fn auth(&self) -> Option<(u8, &Vec<u8>)> {
        self.iter().find_map(|p| match p {
            Payload::Auth { method, data } => Some((*method, data)),
            _ => None,
        })
    }
    fn ts_i(&self) -> Option<&Vec<Selector>> {
        self.iter().find_map(|p| match p {
            Payload::TsI(v) => Some(v),
            _ => None,
        })
    }
    fn ts_r(&self) -> Option<&Vec<Selector>> {
        self.iter().find_map(|p| match p {
            Payload::TsR(v) => Some(v),
            _ => None,
        })
    }
    fn error_notify(&self) -> Option<&Notify> {
        self.iter().find_map(|p| match p {
            Payload::Notify(n) if n.kind < notify::FIRST_STATUS => Some(n),
            _ => None,
        })
    }
}

/// Finds the first notification of a kind.
pub fn find_notify(ps: &[Payload], kind: u16) -> Option<&Notify> {
    ps.iter().find_map(|p| match p {
        Payload::Notify(n) if n.kind == kind => Some(n),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Payload> {
        vec![
            Payload::Sa(vec![Proposal {
                number: 1,
                protocol: proto::IKE,
                spi: vec![],
                transforms: vec![
                    Transform {
                        kind: 1,
                        id: 20,
                        key_bits: Some(128),
                        unknown_attribute: false,
                    },
                    Transform {
                        kind: 2,
                        id: 5,
                        key_bits: None,
                        unknown_attribute: false,
                    },
                    Transform {
                        kind: 4,
                        id: 31,
                        key_bits: None,
                        unknown_attribute: false,
                    },
                ],
            }]),
            Payload::Ke {
                group: 31,
                data: vec![7; 32],
            },
            Payload::Nonce(vec![1; 32]),
            Payload::notify(notify::NAT_DETECTION_SOURCE_IP, vec![9; 20]),
            Payload::IdI(Id {
                kind: id::FQDN,
                data: b"gw1".to_vec(),
            }),
            Payload::TsI(vec![Selector::any(false), Selector::any(true)]),
            Payload::Delete {
                protocol: proto::ESP,
                spis: vec![vec![1, 2, 3, 4], vec![5, 6, 7, 8]],
            },
            Payload::Cp {
                kind: cfg::REQUEST,
                attrs: vec![CfgAttr {
                    kind: cfg::INTERNAL_IP4_ADDRESS,
                    value: vec![],
                }],
            },
        ]
    }

    fn header() -> Header {
        Header {
            spi_i: 0x1122334455667788,
            spi_r: 0,
            version: 0x20,
            exchange: exchange::IKE_SA_INIT,
            flags: flags::INITIATOR,
            message_id: 0,
            ..Default::default()
        }
    }

    #[test]
    fn round_trip() {
        let ps = sample();
        let b = encode(header(), &ps);
        let m = parse(&b).unwrap();
        assert_eq!(m.payloads, ps);
        assert_eq!(m.header.spi_i, 0x1122334455667788);
        assert_eq!(m.header.length as usize, b.len());
        assert!(m.encrypted.is_none());
    }

    #[test]
    fn sk_is_found_and_inner_parsed() {
        let ps = sample();
        let (b, at) = encode_sk(header(), &ps);
        let mut b = b;
        let sk_len = (b.len() - at) as u16;
        b[at + 2..at + 4].copy_from_slice(&sk_len.to_be_bytes());
        let l = b.len() as u32;
        b[24..28].copy_from_slice(&l.to_be_bytes());
        let m = parse(&b).unwrap();
        let e = m.encrypted.unwrap();
        assert_eq!(
            (e.at, e.kind, e.first_inner, e.header_len),
            (at, ptype::SK, ptype::SA, 4)
        );
        assert_eq!(parse_payloads(e.first_inner, &b[at + 4..]).unwrap(), ps);
    }

    #[test]
    fn skf_numbers_are_checked() {
        let skf = |n: u16, total: u16| {
            let (mut b, at) = encode_skf(header(), ptype::SA, n, total, &[1, 2, 3]);
            let len = (b.len() - at) as u16;
            b[at + 2..at + 4].copy_from_slice(&len.to_be_bytes());
            let l = b.len() as u32;
            b[24..28].copy_from_slice(&l.to_be_bytes());
            parse(&b)
        };
        let e = skf(2, 3).unwrap().encrypted.unwrap();
        assert_eq!(
            (e.kind, e.header_len, e.fragment),
            (ptype::SKF, 8, Some((2, 3)))
        );
        assert_eq!(
            e.first_inner, 0,
            "only fragment 1 names the first inner payload"
        );
        assert_eq!(skf(1, 3).unwrap().encrypted.unwrap().first_inner, ptype::SA);
        for (n, total) in [(0, 3), (4, 3), (1, 0)] {
            let e = skf(n, total).unwrap_err();
            assert_eq!(e, WireError::FragmentNumber { number: n, total });
            assert_eq!((e.reason(), e.notify()), ("fragment_out_of_range", None));
        }
    }

    #[test]
    fn unknown_critical_and_not() {
        let mut b = encode(
            header(),
            &[Payload::Unknown {
                kind: 200,
                body: vec![1, 2],
            }],
        );
        assert!(matches!(
            parse(&b).unwrap().payloads[0],
            Payload::Unknown { kind: 200, .. }
        ));
        b[HEADER_LEN + 1] = 0x80;
        assert_eq!(parse(&b), Err(WireError::UnsupportedCritical(200)));
        assert_eq!(
            WireError::UnsupportedCritical(200).notify(),
            Some((notify::UNSUPPORTED_CRITICAL_PAYLOAD, vec![200]))
        );
    }

    #[test]
    fn bad_lengths_are_errors() {
        let b = encode(header(), &sample());
        for cut in 0..b.len() {
            assert!(parse(&b[..cut]).is_err());
        }
        let mut c = b.clone();
        c[17] = 0x30;
        assert_eq!(parse(&c), Err(WireError::Version(3)));
        let mut c = b.clone();
        c[HEADER_LEN + 2] = 0xff;
        assert!(matches!(parse(&c), Err(WireError::Syntax { .. })));
    }

    #[test]
    fn cfg_requests_are_read_and_bad_lengths_refused() {
        let cp = |attrs: &[(u16, &[u8])]| {
            let p = Payload::Cp {
                kind: cfg::REQUEST,
                attrs: attrs
                    .iter()
                    .map(|(k, v)| CfgAttr {
                        kind: *k,
                        value: v.to_vec(),
                    })
                    .collect(),
            };
            let b = encode(header(), &[p]);
            match parse(&b).unwrap().payloads.remove(0) {
                Payload::Cp { kind, attrs } => (kind, cfg_request(&attrs)),
                p => panic!("{p:?}"),
            }
        };
        assert_eq!(
            cp(&[(cfg::INTERNAL_IP4_ADDRESS, &[]), (999, &[1, 2, 3])]),
            (
                cfg::REQUEST,
                Ok(CfgAsk {
                    ip4: true,
                    ip6: false
                })
            )
        );
        assert_eq!(
            cp(&[(cfg::INTERNAL_IP4_ADDRESS, &[10, 0, 0, 1])]).1,
            Ok(CfgAsk {
                ip4: true,
                ip6: false
            })
        );
        assert_eq!(cp(&[(cfg::INTERNAL_IP6_DNS, &[])]).1, Ok(CfgAsk::default()));
        let e = cp(&[(cfg::INTERNAL_IP4_ADDRESS, &[10, 0, 0])])
            .1
            .unwrap_err();
        assert!(
            format!("{e}").contains("INTERNAL_IP4_ADDRESS of 3 bytes"),
            "{e}"
        );
        assert!(cp(&[(cfg::INTERNAL_IP6_ADDRESS, &[0; 16])]).1.is_err());
        // An attribute longer than the payload is the parser's error.
        let mut b = encode(
            header(),
            &[Payload::Cp {
                kind: cfg::REQUEST,
                attrs: vec![CfgAttr {
                    kind: cfg::INTERNAL_IP4_ADDRESS,
                    value: vec![1, 2, 3, 4],
                }],
            }],
        );
        let n = b.len();
        b[n - 5] = 9;
        assert!(matches!(parse(&b), Err(WireError::Syntax { .. })));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            let _ = parse(&bytes);
            let _ = parse_payloads(33, &bytes);
        }

        #[test]
        fn cp_payload_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            if let Ok(ps) = parse_payloads(ptype::CP, &bytes) {
                for p in ps {
                    if let Payload::Cp { attrs, .. } = p {
                        let _ = cfg_request(&attrs);
                    }
                }
            }
        }

        #[test]
        fn mutated_never_panics(flips in proptest::collection::vec((0usize..400, proptest::num::u8::ANY), 1..8)) {
            let mut b = encode(header(), &sample());
            for (i, v) in flips {
                let n = b.len();
                b[i % n] = v;
            }
            let _ = parse(&b);
        }
    }
}
