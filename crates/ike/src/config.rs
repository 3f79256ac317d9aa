//! `[[ipsec.peer]]`: an IKEv2 peer, as the config names it, and its proposals.
//!
//! ```toml
//! [[ipsec.peer]]
//! name = "site-b"
//! local = "192.0.2.1"             # our address (IKE is sent from it)
//! remote = "192.0.2.2"            # the peer's; "any" to answer whoever authenticates
//! local_id = "gw1.example"        # FQDN, email, IP or "dn:CN=..."; default: `local`
//! remote_id = "gw2.example"       # default: `remote`
//! auth = "psk"
//! psk = "site-b"                  # the name of its secret in the key file
//! proposals = ["aes128gcm16-prfsha256-curve25519"]
//! esp_proposals = ["aes128gcm16"]
//! tunnel = "ipsec0"               # child SAs land on this tunnel interface
//! start = "initiate"              # or "respond" (the default)
//! ike_lifetime_s = 14400          # IKE SA rekeyed at 80-95 % of it (0: never)
//! fragment_size = 1280            # IKE messages above it go in fragments (RFC 7383)
//! child_lifetime_s = 3600         # child SAs rekeyed at 90/95 % of it (0: never)
//! pools = ["10.200.0.0/24"]       # virtual IPs leased to peers asking (CP, §2.19; IPv6 too)
//! unique_ids = "no"               # or never, replace, keep: a new IKE SA vs the old ones
//! ```
//!
//! With certificates (`auth = "pubkey"`), instead of `psk`:
//!
//! ```toml
//! auth = "pubkey"
//! cert = "/etc/ferrouter/gw1.pem"         # ours, PEM (with its intermediates) or DER
//! private_key = "/etc/ferrouter/gw1.key"  # PEM or DER; readable by its owner only
//! ca = ["/etc/ferrouter/ca.pem"]          # the CAs the peer's certificate must chain to
//! crl = ["/etc/ferrouter/ca.crl"]         # optional
//! remote_id = "dn:C=CH, O=Example, CN=gw2" # or an FQDN or IP in its subjectAltName
//! ```
//!
//! `local_id` then defaults to the certificate's subject DN.
//!
//! Proposals are written as strongSwan writes them: algorithms joined by `-`, e.g.
//! `aes256gcm16-prfsha384-ecp384` or `aes128-sha256-prfsha256-modp2048` for IKE, and
//! `aes128gcm16`, `chacha20poly1305`, `aes256-sha512-esn` for ESP (`-curve25519` and the
//! other groups there ask for PFS in CREATE_CHILD_SA).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::crypto::{self, PrivateKey};
use crate::pool::{Prefix, MAX_POOL_ADDRESSES};
use crate::transform::{Dh, Encr, Integ, Prf};
use crate::wire::{self, Id, Selector};

/// One `[[ipsec.peer]]` as written.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    /// How commands and logs name it.
    pub name: String,
    /// Our address: IKE is sent from it, and to it.
    pub local: IpAddr,
    /// The peer's address, or `any` (respond only).
    pub remote: String,
    /// Our identity (default: `local`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_id: Option<String>,
    /// The identity the peer must prove (default: `remote`; required with `remote = "any"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_id: Option<String>,
    /// `psk` or `pubkey` (certificates).
    #[serde(default = "default_auth")]
    pub auth: String,
    /// With `auth = "psk"`: the name of its secret in the key file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psk: Option<String>,
    /// With `auth = "pubkey"`: our certificate (PEM, with its intermediates after it, or
    /// one DER certificate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<PathBuf>,
    /// With `auth = "pubkey"`: the certificate's private key (PEM or DER), a file readable
    /// by its owner only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<PathBuf>,
    /// With `auth = "pubkey"`: the trusted CAs (PEM or DER files) the peer's certificate
    /// must chain to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ca: Vec<PathBuf>,
    /// With `auth = "pubkey"`: certificate revocation lists (DER or PEM) of those CAs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub crl: Vec<PathBuf>,
    /// IKE proposals, most preferred first (default: RFC 8247's recommendations).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proposals: Vec<String>,
    /// ESP proposals for the child SAs, most preferred first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub esp_proposals: Vec<String>,
    /// The tunnel interface (`[[ipsec.tunnel]]`) its child SAs land on (route-based); empty
    /// with `interface`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tunnel: String,
    /// Policy-based instead of `tunnel`: the port or VLAN sub-interface whose SPD gets a
    /// PROTECT policy in each direction for every child SA, from the traffic selectors
    /// negotiated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// Our side's traffic selectors: `10.1.0.0/24`, an address, a range `10.1.0.1-10.1.0.9`,
    /// each optionally with `[protocol]` or `[protocol/port]` (`[udp/5201]`,
    /// `[tcp/1000-2000]`). What a child SA may carry from us: the peer may narrow it.
    /// Default: everything with a tunnel, our own address (`local`) with `interface`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub local_ts: Vec<String>,
    /// The peer's side, written as `local_ts`. Default: everything with a tunnel; with
    /// `interface`, the peer's address (`remote`), or everything with `pools` (each child
    /// then narrowed to its lease).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remote_ts: Vec<String>,
    /// With `interface`: the priority of its child SAs' policies among the interface's
    /// `[[ipsec.policy]]`s (lower first; ties: the configured ones first).
    #[serde(default = "default_policy_priority")]
    pub policy_priority: u32,
    /// `initiate` (bring it up at start and keep it up) or `respond`.
    #[serde(default = "default_start")]
    pub start: String,
    /// IKE SA lifetime, seconds (default 4 h, as strongSwan's `rekey_time`): rekeyed at a
    /// random moment between 80 and 90 % of it by the side that set it up, 90 and 95 % by
    /// the other; deleted at its end if not rekeyed by then (0: never rekeyed).
    #[serde(default = "default_ike_lifetime")]
    pub ike_lifetime_s: u32,
    /// Child SA lifetime, seconds: rekeyed before it ends (0: never).
    #[serde(default = "default_child_lifetime")]
    pub child_lifetime_s: u32,
    /// Seconds of silence from the peer before a liveness check (0: none).
    #[serde(default = "default_dpd")]
    pub dpd_s: u32,
    /// IKE fragmentation (RFC 7383): the largest IP datagram an encrypted IKE message is
    /// sent in; a larger one goes in fragments of at most this size, if the peer supports
    /// them (default 1280, as strongSwan's `fragment_size`; 576 to 65535 with IPv4, 1280
    /// to 65535 with IPv6).
    #[serde(default = "default_fragment_size")]
    pub fragment_size: u32,
    /// Retransmissions of a request before the peer is given up (default 5: sent again
    /// after 1, 2, 4, 8 and 16 s, gone 32 s later; 1 to 10). With `dpd_s`, how soon a
    /// dead peer is noticed: 2 retransmissions, 7 s after the first liveness check.
    #[serde(default = "default_retransmit_tries")]
    pub retransmit_tries: u32,
    /// Virtual IP pools (IPv4 and IPv6 prefixes): a peer asking for an address in its
    /// IKE_AUTH (CP(CFG_REQUEST) with INTERNAL_IP4_ADDRESS, INTERNAL_IP6_ADDRESS or both)
    /// is leased one of each family asked for that has pools, and its child SAs'
    /// selectors on its side are those addresses alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<String>,
    /// What a new IKE SA of this peer does to its established ones (the same identities),
    /// as strongSwan's `unique`: `no` (the default: those go when the new one carries
    /// INITIAL_CONTACT), `never` (they stay; INITIAL_CONTACT is ignored, and not sent),
    /// `replace` (also `yes`, as ipsec.conf's `uniqueids`: they are deleted, with or
    /// without INITIAL_CONTACT) or `keep` (without INITIAL_CONTACT the new one is refused).
    #[serde(default = "default_unique_ids")]
    pub unique_ids: String,
}

impl PeerConfig {
    /// A PSK peer with every other field at its default, as a config file that names only
    /// these would have it (`psk` names the secret `name`).
    pub fn new(name: &str, local: IpAddr, remote: &str, tunnel: &str) -> PeerConfig {
        PeerConfig {
            name: name.into(),
            local,
            remote: remote.into(),
            local_id: None,
            remote_id: None,
            auth: default_auth(),
            psk: Some(name.into()),
            cert: None,
            private_key: None,
            ca: vec![],
            crl: vec![],
            proposals: vec![],
            esp_proposals: vec![],
            tunnel: tunnel.into(),
            interface: None,
            local_ts: vec![],
            remote_ts: vec![],
            policy_priority: default_policy_priority(),
            start: default_start(),
            ike_lifetime_s: default_ike_lifetime(),
            child_lifetime_s: default_child_lifetime(),
            dpd_s: default_dpd(),
            fragment_size: default_fragment_size(),
            retransmit_tries: default_retransmit_tries(),
            pools: vec![],
            unique_ids: default_unique_ids(),
        }
    }
}

/// The most prefixes in a peer's `pools`.
pub const MAX_POOLS: usize = 16;

fn default_auth() -> String {
    "psk".into()
}
fn default_policy_priority() -> u32 {
    100
}
fn default_start() -> String {
    "respond".into()
}
fn default_unique_ids() -> String {
    "no".into()
}
fn default_ike_lifetime() -> u32 {
    14_400
}
/// The longest `ike_lifetime_s`.
pub const MAX_IKE_LIFETIME_S: u32 = 30 * 86_400;
fn default_child_lifetime() -> u32 {
    3_600
}
fn default_dpd() -> u32 {
    30
}
fn default_retransmit_tries() -> u32 {
    crate::engine::MAX_RETRANSMITS
}
/// The most `retransmit_tries` (the last wait is then 17 minutes).
pub const MAX_RETRANSMIT_TRIES: u32 = 10;
fn default_fragment_size() -> u32 {
    DEFAULT_FRAGMENT_SIZE as u32
}
/// The default `fragment_size`: IPv6's minimum MTU, strongSwan's default.
pub const DEFAULT_FRAGMENT_SIZE: usize = 1280;

/// An IKE SA's algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IkeProposal {
    pub encr: Encr,
    /// `None` with an AEAD.
    pub integ: Option<Integ>,
    pub prf: Prf,
    pub dh: Dh,
}

/// A child SA's algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EspProposal {
    pub encr: Encr,
    pub integ: Option<Integ>,
    pub esn: bool,
    /// PFS in CREATE_CHILD_SA.
    pub dh: Option<Dh>,
}

/// The defaults (RFC 8247 §3: AES-GCM, HMAC-SHA2, curve25519/ECP/MODP-2048).
pub fn default_ike_proposals() -> Vec<IkeProposal> {
    [
        "aes128gcm16-prfsha256-curve25519",
        "aes256gcm16-prfsha384-ecp384",
        "aes128gcm16-prfsha256-ecp256",
        "aes256-sha256-prfsha256-modp2048",
    ]
    .iter()
    .filter_map(|s| parse_ike_proposal(s).ok())
    .collect()
}

/// The default ESP proposals.
pub fn default_esp_proposals() -> Vec<EspProposal> {
    [
        "aes128gcm16",
        "aes256gcm16",
        "chacha20poly1305",
        "aes128-sha256",
    ]
    .iter()
    .filter_map(|s| parse_esp_proposal(s).ok())
    .collect()
}

fn token_encr(t: &str) -> Option<Encr> {
    Some(match t {
        "aes128gcm16" | "aes128gcm128" => Encr::AesGcm16 { key_bits: 128 },
        "aes256gcm16" | "aes256gcm128" => Encr::AesGcm16 { key_bits: 256 },
        "chacha20poly1305" => Encr::ChaCha20Poly1305,
        "aes128" => Encr::AesCbc { key_bits: 128 },
        "aes192" => Encr::AesCbc { key_bits: 192 },
        "aes256" => Encr::AesCbc { key_bits: 256 },
        _ => return None,
    })
}

fn token_integ(t: &str) -> Option<Integ> {
    Some(match t {
        "sha1" => Integ::HmacSha1_96,
        "sha256" | "sha2_256" => Integ::HmacSha256_128,
        "sha384" | "sha2_384" => Integ::HmacSha384_192,
        "sha512" | "sha2_512" => Integ::HmacSha512_256,
        _ => return None,
    })
}

fn token_prf(t: &str) -> Option<Prf> {
    Some(match t {
        "prfsha256" => Prf::HmacSha256,
        "prfsha384" => Prf::HmacSha384,
        "prfsha512" => Prf::HmacSha512,
        _ => return None,
    })
}

fn token_dh(t: &str) -> Option<Dh> {
    Some(match t {
        "modp2048" => Dh::Modp2048,
        "ecp256" => Dh::Ecp256,
        "ecp384" => Dh::Ecp384,
        "curve25519" | "x25519" => Dh::Curve25519,
        _ => return None,
    })
}

/// An IKE proposal such as `aes128gcm16-prfsha256-curve25519`; the error names the token.
pub fn parse_ike_proposal(s: &str) -> Result<IkeProposal, String> {
    let (mut encr, mut integ, mut prf, mut dh) = (None, None, None, None);
    for t in s.split('-') {
        if let Some(e) = token_encr(t) {
            encr = Some(e);
        } else if let Some(i) = token_integ(t) {
            if i == Integ::HmacSha1_96 {
                return Err(format!(
                    "`{t}`: SHA-1 integrity is not allowed for IKE (RFC 8247)"
                ));
            }
            integ = Some(i);
        } else if let Some(p) = token_prf(t) {
            prf = Some(p);
        } else if let Some(d) = token_dh(t) {
            dh = Some(d);
        } else {
            return Err(format!(
                "unknown algorithm `{t}` (encryption: aes128gcm16 aes256gcm16 chacha20poly1305 aes128 aes192 aes256; integrity: sha256 sha384 sha512; PRF: prfsha256 prfsha384 prfsha512; DH: curve25519 ecp256 ecp384 modp2048)"
            ));
        }
    }
    let encr = encr.ok_or("no encryption algorithm")?;
    if encr.is_aead() && integ.is_some() {
        return Err(format!("`{s}`: an AEAD takes no integrity algorithm"));
    }
    if !encr.is_aead() && integ.is_none() {
        return Err(format!("`{s}`: AES-CBC needs an integrity algorithm"));
    }
    // As strongSwan: without a PRF, the one matching the integrity algorithm.
    let prf = match (prf, integ) {
        (Some(p), _) => p,
        (None, Some(Integ::HmacSha384_192)) => Prf::HmacSha384,
        (None, Some(Integ::HmacSha512_256)) => Prf::HmacSha512,
        (None, Some(_)) => Prf::HmacSha256,
        (None, None) => {
            return Err(format!(
                "`{s}`: an AEAD proposal needs a PRF (prfsha256, ...)"
            ))
        }
    };
    let dh = dh.ok_or_else(|| format!("`{s}`: no DH group (curve25519, ecp256, ...)"))?;
    Ok(IkeProposal {
        encr,
        integ,
        prf,
        dh,
    })
}

/// An ESP proposal such as `aes128gcm16` or `aes256-sha512-esn-ecp256`.
pub fn parse_esp_proposal(s: &str) -> Result<EspProposal, String> {
    let (mut encr, mut integ, mut esn, mut dh) = (None, None, false, None);
    for t in s.split('-') {
        if let Some(e) = token_encr(t) {
            encr = Some(e);
        } else if let Some(i) = token_integ(t) {
            integ = Some(i);
        } else if let Some(d) = token_dh(t) {
            dh = Some(d);
        } else if t == "esn" {
            esn = true;
        } else if t == "noesn" {
            esn = false;
        } else {
            return Err(format!(
                "unknown algorithm `{t}` (encryption: aes128gcm16 aes256gcm16 chacha20poly1305 aes128 aes256; integrity: sha1 sha256 sha512; esn; DH for PFS)"
            ));
        }
    }
    let encr = encr.ok_or_else(|| format!("`{s}`: no encryption algorithm"))?;
    if matches!(encr, Encr::AesCbc { key_bits: 192 }) {
        return Err(format!(
            "`{s}`: ESP has no AES-192-CBC here (aes128, aes256)"
        ));
    }
    if encr.is_aead() && integ.is_some() {
        return Err(format!("`{s}`: an AEAD takes no integrity algorithm"));
    }
    match integ {
        None if !encr.is_aead() => {
            return Err(format!("`{s}`: AES-CBC needs an integrity algorithm"))
        }
        Some(i) if i.esp_name().is_none() => {
            return Err(format!(
                "`{s}`: ESP has no {i:?} here (sha1, sha256, sha512)"
            ))
        }
        _ => {}
    }
    Ok(EspProposal {
        encr,
        integ,
        esn,
        dh,
    })
}

/// The most selectors in a peer's `local_ts` or `remote_ts`.
pub const MAX_TS: usize = 16;

/// Parses a traffic selector as strongSwan writes one: a prefix (`10.1.0.0/24`), an
/// address, or a range (`10.1.0.1-10.1.0.9`), then optionally `[protocol]` or
/// `[protocol/port]` with a name (`tcp`, `udp`, `icmp`, `icmpv6`, `sctp`) or number, and a
/// port or range (`[udp/5201]`, `[tcp/1000-2000]`) with TCP, UDP or SCTP.
pub fn parse_ts(text: &str) -> Result<Selector, String> {
    let (addr, extra) = match text.split_once('[') {
        None => (text, None),
        Some((a, rest)) => (
            a,
            Some(
                rest.strip_suffix(']')
                    .ok_or_else(|| format!("`{text}`: `[` without its `]`"))?,
            ),
        ),
    };
    let bad = |why: &str| format!("`{text}`: {why}");
    let (start, end) = if let Some((a, len)) = addr.split_once('/') {
        let a: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| bad("not an address before the `/`"))?;
        let bits = if a.is_ipv4() { 32 } else { 128 };
        let len: u32 = len
            .trim()
            .parse()
            .ok()
            .filter(|&l| l <= bits)
            .ok_or_else(|| bad(&format!("the prefix length is not 0 to {bits}")))?;
        let v = match a {
            IpAddr::V4(x) => u128::from(u32::from(x)),
            IpAddr::V6(x) => u128::from(x),
        };
        let host = if len == bits {
            0
        } else {
            u128::MAX >> (128 - bits + len)
        };
        if v & host != 0 {
            return Err(bad("host bits set after the prefix length"));
        }
        let back = |v: u128| -> IpAddr {
            match a {
                IpAddr::V4(_) => std::net::Ipv4Addr::from(v as u32).into(),
                IpAddr::V6(_) => std::net::Ipv6Addr::from(v).into(),
            }
        };
        (a, back(v | host))
    } else if let Some((a, b)) = addr.split_once('-') {
        let a: IpAddr = a.trim().parse().map_err(|_| bad("not an address range"))?;
        let b: IpAddr = b.trim().parse().map_err(|_| bad("not an address range"))?;
        if a.is_ipv4() != b.is_ipv4() || a > b {
            return Err(bad(
                "a range goes from a lower to a higher address of one family",
            ));
        }
        (a, b)
    } else {
        let a: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| bad("not a prefix, address or range"))?;
        (a, a)
    };
    let mut s = Selector {
        protocol: 0,
        start_port: 0,
        end_port: u16::MAX,
        start,
        end,
    };
    let Some(extra) = extra else {
        return Ok(s);
    };
    let (proto, ports) = match extra.split_once('/') {
        Some((p, x)) => (p, Some(x)),
        None => (extra, None),
    };
    s.protocol = match proto.trim() {
        "tcp" => 6,
        "udp" => 17,
        "icmp" => 1,
        "icmpv6" | "ipv6-icmp" => 58,
        "sctp" => 132,
        n => n.parse().map_err(|_| {
            bad("the protocol is not tcp, udp, icmp, icmpv6, sctp or a number from 0 to 255")
        })?,
    };
    if let Some(ports) = ports {
        if !matches!(s.protocol, 6 | 17 | 132) {
            return Err(bad("ports need tcp, udp or sctp"));
        }
        let port = |p: &str| -> Result<u16, String> {
            p.trim().parse().map_err(|_| bad("a port is 0 to 65535"))
        };
        let (lo, hi) = match ports.split_once('-') {
            Some((a, b)) => (port(a)?, port(b)?),
            None => (port(ports)?, port(ports)?),
        };
        if lo > hi {
            return Err(bad("the port range goes from high to low"));
        }
        (s.start_port, s.end_port) = (lo, hi);
    }
    Ok(s)
}

/// Parses an identity: `dn:...`, an IP address, `user@host` or an FQDN.
pub fn parse_id(s: &str) -> Result<Id, String> {
    if s.is_empty() {
        return Err("empty identity".into());
    }
    if let Some(dn) = s.strip_prefix("dn:") {
        return Ok(Id {
            kind: wire::id::DER_ASN1_DN,
            data: crate::dn::from_text(dn).map_err(|e| format!("`{s}`: {e}"))?,
        });
    }
    Ok(match s.parse::<IpAddr>() {
        Ok(IpAddr::V4(a)) => Id {
            kind: wire::id::IPV4_ADDR,
            data: a.octets().to_vec(),
        },
        Ok(IpAddr::V6(a)) => Id {
            kind: wire::id::IPV6_ADDR,
            data: a.octets().to_vec(),
        },
        Err(_) if s.contains('@') => Id {
            kind: wire::id::RFC822_ADDR,
            data: s.as_bytes().to_vec(),
        },
        Err(_) => Id {
            kind: wire::id::FQDN,
            data: s.as_bytes().to_vec(),
        },
    })
}

/// A key of an identity: [`id_matches`] holds for two identities exactly when their keys
/// are equal (`None`: it matches nothing, a DN that does not parse). For a table of peers
/// by `remote_id` (an engine of many peers looks the initiator's up rather than comparing
/// it with each).
pub fn id_key(id: &Id) -> Option<(u8, Vec<u8>)> {
    let data = match id.kind {
        wire::id::DER_ASN1_DN => crate::dn::fold(&id.data)?,
        wire::id::FQDN => id.data.to_ascii_lowercase(),
        // The local part as it is, the domain (from the last `@`) in lower case.
        wire::id::RFC822_ADDR => match id.data.iter().rposition(|&b| b == b'@') {
            Some(at) => {
                let (local, domain) = id.data.split_at(at);
                local
                    .iter()
                    .copied()
                    .chain(domain.iter().map(u8::to_ascii_lowercase))
                    .collect()
            }
            None => id.data.clone(),
        },
        _ => id.data.clone(),
    };
    Some((id.kind, data))
}

/// Whether the identity the peer sent is the one configured: DNs as [`crate::dn::same`]
/// says; FQDNs without regard to ASCII case (DNS names are case-insensitive); email
/// addresses with the domain (after the last `@`) without regard to case and the local
/// part exactly, as the certificate check compares them (RFC 5321 §2.4); IP addresses
/// byte for byte.
pub fn id_matches(configured: &Id, got: &Id) -> bool {
    if configured.kind != got.kind {
        return false;
    }
    match configured.kind {
        wire::id::DER_ASN1_DN => crate::dn::same(&configured.data, &got.data),
        wire::id::FQDN => configured.data.eq_ignore_ascii_case(&got.data),
        wire::id::RFC822_ADDR => {
            let at = |d: &[u8]| d.iter().rposition(|&b| b == b'@');
            match (at(&configured.data), at(&got.data)) {
                (Some(a), Some(b)) => {
                    configured.data.get(..a) == got.data.get(..b)
                        && configured
                            .data
                            .get(a..)
                            .zip(got.data.get(b..))
                            .is_some_and(|(x, y)| x.eq_ignore_ascii_case(y))
                }
                _ => configured.data == got.data,
            }
        }
        _ => configured.data == got.data,
    }
}

/// Certificate authentication of a peer (`auth = "pubkey"`): our certificate and key,
/// and what the peer's certificate is checked against.
#[derive(Debug)]
pub struct CertAuth {
    /// Our certificate (DER), then its intermediates: the CERT payloads we send.
    pub chain: Vec<Vec<u8>>,
    /// Its private key: it signs our AUTH.
    pub key: PrivateKey,
    /// The trusted CAs (DER).
    pub cas: Vec<Vec<u8>>,
    /// The CRLs (DER).
    pub crls: Vec<Vec<u8>>,
    /// The SHA-1 hashes of the CAs' public keys, concatenated: our CERTREQ's data.
    pub ca_hashes: Vec<u8>,
}

/// Reads a private key file that must be readable by its owner only (as the key file).
fn read_private_key(path: &Path) -> Result<PrivateKey, String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{}: not a regular file", path.display()));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "{} has mode {mode:04o}: its group or others may read it; make it readable by its owner only (chmod 600 {})",
            path.display(),
            path.display()
        ));
    }
    PrivateKey::from_file(path).map_err(|e| e.to_string())
}

/// Reads CRL files: DER, or PEM ("X509 CRL").
fn read_crl(path: &Path) -> Result<Vec<u8>, String> {
    use rustls_pki_types::pem::PemObject;
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !bytes.trim_ascii_start().starts_with(b"-----") {
        return Ok(bytes);
    }
    rustls_pki_types::CertificateRevocationListDer::from_pem_slice(&bytes)
        .map(|c| c.to_vec())
        .map_err(|e| format!("{}: no X509 CRL in the PEM file ({e})", path.display()))
}

/// A peer ready for the engine: everything parsed and checked.
#[derive(Clone, Debug)]
pub struct Peer {
    pub name: String,
    pub local: IpAddr,
    /// `None`: any address.
    pub remote: Option<IpAddr>,
    pub local_id: Id,
    pub remote_id: Id,
    /// With a PSK: the secret (empty with certificates).
    pub psk: zeroize::Zeroizing<Vec<u8>>,
    /// With certificates: ours and the CAs.
    pub cert: Option<Arc<CertAuth>>,
    pub ike: Vec<IkeProposal>,
    pub esp: Vec<EspProposal>,
    /// Its tunnel interface, or empty with `interface`.
    pub tunnel: String,
    /// Policy-based: the interface whose SPD gets its child SAs' policies, and their
    /// priority.
    pub interface: Option<String>,
    pub policy_priority: u32,
    pub initiate: bool,
    pub ike_lifetime: Option<Duration>,
    pub child_lifetime: Option<Duration>,
    pub dpd: Option<Duration>,
    /// The selectors its child SAs may cover, ours and the peer's (`local_ts`,
    /// `remote_ts`): everything, of both families, unless configured.
    pub local_ts: Vec<Selector>,
    pub remote_ts: Vec<Selector>,
    /// UDP encapsulation forced (the tunnel's `nat_t`): IKE moves to port 4500 after
    /// IKE_SA_INIT as if a NAT were found (RFC 7296 §2.23), and keepalives are sent.
    pub encap: bool,
    /// Seconds between NAT keepalives once on port 4500 (RFC 3948 §4).
    pub keepalive: Duration,
    /// The largest IP datagram of an encrypted IKE message, or of each of its fragments.
    pub fragment_size: usize,
    /// Retransmissions of a request before the SA is given up.
    pub retransmit_tries: u32,
    /// Virtual IP pools, of either family: checked, not overlapping.
    pub pools: Vec<Prefix>,
    /// What a new IKE SA does to the peer's established ones.
    pub unique_ids: UniqueIds,
}

/// What a new IKE SA of a peer does to the peer's established IKE SAs (those of the same
/// peer config, so of the same identities; their child SAs and virtual IPs go with them):
/// strongSwan's uniqueness policy (swanctl.conf `unique`, ipsec.conf `uniqueids`).
/// INITIAL_CONTACT (RFC 7296 §2.4) says the initiator has no other SA with us: the old
/// ones are dropped then (without a Delete: the initiator forgot them) unless `Never`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UniqueIds {
    /// Replaced only when the new one carries INITIAL_CONTACT.
    #[default]
    No,
    /// Never replaced: INITIAL_CONTACT is ignored (and, as initiator, not sent), so
    /// initiators sharing an identity keep their SAs side by side.
    Never,
    /// Replaced in any case: deleted (INFORMATIONAL Delete) without INITIAL_CONTACT.
    Replace,
    /// Without INITIAL_CONTACT the new one is refused (AUTHENTICATION_FAILED) and the
    /// old one kept; with it, the old ones go as with `No`.
    Keep,
}

impl UniqueIds {
    /// `unique_ids` as written: `no`, `never`, `replace` (or `yes`), `keep`.
    pub fn parse(s: &str) -> Result<UniqueIds, String> {
        Ok(match s {
            "no" => UniqueIds::No,
            "never" => UniqueIds::Never,
            "replace" | "yes" => UniqueIds::Replace,
            "keep" => UniqueIds::Keep,
            _ => {
                return Err(format!(
                "unique_ids: `{s}` is not one of no (the default), never, replace (or yes), keep"
            ))
            }
        })
    }
}

impl PeerConfig {
    /// Checks and resolves it; `psk` is the secret its `psk` names (the caller reads the
    /// key file). Errors name the field.
    pub fn resolve(&self, psk: Option<&[u8]>) -> Result<Peer, String> {
        let remote = match self.remote.as_str() {
            "any" | "%any" => None,
            r => Some(
                r.parse::<IpAddr>()
                    .map_err(|_| format!("remote: `{r}` is not an IP address or `any`"))?,
            ),
        };
        if let Some(r) = remote {
            if r.is_ipv4() != self.local.is_ipv4() {
                return Err(format!(
                    "remote: {r} is not of the same family as local {}",
                    self.local
                ));
            }
        }
        let cert = match self.auth.as_str() {
            "psk" => None,
            "pubkey" => Some(Arc::new(self.load_cert_auth()?)),
            a => {
                return Err(format!(
                    "auth: `{a}` is not supported (psk, or pubkey for certificates)"
                ))
            }
        };
        let local_id = match (&self.local_id, &cert) {
            (None, Some(c)) => Id {
                kind: wire::id::DER_ASN1_DN,
                data: crypto::certificate_subject(&c.chain[0]).map_err(|e| format!("cert: {e}"))?,
            },
            (s, _) => parse_id(&s.clone().unwrap_or_else(|| self.local.to_string()))
                .map_err(|e| format!("local_id: {e}"))?,
        };
        // With a certificate, our identity must be the certificate's: the peer checks.
        let local_id = match &cert {
            Some(c) if local_id.kind == wire::id::DER_ASN1_DN => {
                let subject =
                    crypto::certificate_subject(&c.chain[0]).map_err(|e| format!("cert: {e}"))?;
                if !crate::dn::same(&local_id.data, &subject) {
                    return Err(format!(
                        "local_id: `{}` is not the certificate's subject `{}`",
                        local_id.text(),
                        crate::dn::to_text(&subject).unwrap_or_default()
                    ));
                }
                // Sent as the certificate encodes it, for peers matching byte for byte.
                Id {
                    kind: wire::id::DER_ASN1_DN,
                    data: subject,
                }
            }
            Some(c) => {
                crypto::certificate_matches_id(&c.chain[0], local_id.kind, &local_id.data)
                    .map_err(|e| format!("local_id: `{}`: {e}", local_id.text()))?;
                local_id
            }
            None => local_id,
        };
        let remote_id = match (&self.remote_id, remote) {
            (Some(s), _) => parse_id(s).map_err(|e| format!("remote_id: {e}"))?,
            (None, Some(r)) => parse_id(&r.to_string())?,
            (None, None) => return Err("remote_id: needed with remote = \"any\"".into()),
        };
        let psk = match (&self.psk, psk) {
            _ if cert.is_some() => zeroize::Zeroizing::new(Vec::new()),
            (None, _) => return Err("psk: the name of the key file's secret is missing".into()),
            (Some(n), None) => return Err(format!("psk: the key file has no secret `{n}`")),
            (Some(_), Some(s)) if s.len() < 16 => {
                return Err(format!(
                    "psk: the secret is {} bytes; at least 16 are needed (RFC 7296 §2.15 wants it as strong as a key)",
                    s.len()
                ))
            }
            (Some(_), Some(s)) => zeroize::Zeroizing::new(s.to_vec()),
        };
        let ike = if self.proposals.is_empty() {
            default_ike_proposals()
        } else {
            self.proposals
                .iter()
                .enumerate()
                .map(|(k, p)| parse_ike_proposal(p).map_err(|e| format!("proposals[{k}]: {e}")))
                .collect::<Result<_, _>>()?
        };
        let esp = if self.esp_proposals.is_empty() {
            default_esp_proposals()
        } else {
            self.esp_proposals
                .iter()
                .enumerate()
                .map(|(k, p)| parse_esp_proposal(p).map_err(|e| format!("esp_proposals[{k}]: {e}")))
                .collect::<Result<_, _>>()?
        };
        let initiate = match self.start.as_str() {
            "initiate" => true,
            "respond" => false,
            s => return Err(format!("start: `{s}` is neither `initiate` nor `respond`")),
        };
        if initiate && remote.is_none() {
            return Err("start: a peer with remote = \"any\" cannot initiate".into());
        }
        let interface = match (&self.interface, self.tunnel.is_empty()) {
            (None, true) => {
                return Err(
                    "tunnel: empty; a peer needs a tunnel (route-based) or an interface (policy-based)"
                        .into(),
                )
            }
            (Some(_), false) => {
                return Err(format!(
                    "interface: a peer's child SAs go on tunnel {:?} or into an interface's SPD, not both",
                    self.tunnel
                ))
            }
            (Some(i), true) if i.is_empty() => return Err("interface: empty".into()),
            (i, _) => i.clone(),
        };
        let (local_ts, remote_ts) = self.resolve_ts(remote, interface.is_some())?;
        let secs = |s: u32| (s > 0).then(|| Duration::from_secs(u64::from(s)));
        if self.ike_lifetime_s != 0 && !(10..=MAX_IKE_LIFETIME_S).contains(&self.ike_lifetime_s) {
            return Err(format!(
                "ike_lifetime_s: {} is not between 10 and {MAX_IKE_LIFETIME_S} (30 days), or 0 (never rekeyed)",
                self.ike_lifetime_s
            ));
        }
        let least = if self.local.is_ipv4() { 576 } else { 1280 };
        if !(least..=65_535).contains(&self.fragment_size) {
            return Err(format!(
                "fragment_size: {} is not between {least} (the least IPv{} datagram every link carries) and 65535",
                self.fragment_size,
                if self.local.is_ipv4() { 4 } else { 6 }
            ));
        }
        if !(1..=MAX_RETRANSMIT_TRIES).contains(&self.retransmit_tries) {
            return Err(format!(
                "retransmit_tries: {} is not between 1 and {MAX_RETRANSMIT_TRIES}",
                self.retransmit_tries
            ));
        }
        if self.child_lifetime_s != 0 && self.child_lifetime_s < 10 {
            return Err(format!(
                "child_lifetime_s: {} is below 10",
                self.child_lifetime_s
            ));
        }
        let pools = self.resolve_pools()?;
        let unique_ids = UniqueIds::parse(&self.unique_ids)?;
        Ok(Peer {
            name: self.name.clone(),
            local: self.local,
            remote,
            local_id,
            remote_id,
            psk,
            cert,
            ike,
            esp,
            tunnel: self.tunnel.clone(),
            interface,
            policy_priority: self.policy_priority,
            initiate,
            ike_lifetime: secs(self.ike_lifetime_s),
            child_lifetime: secs(self.child_lifetime_s),
            dpd: secs(self.dpd_s),
            local_ts,
            remote_ts,
            encap: false,
            keepalive: Duration::from_secs(20),
            fragment_size: self.fragment_size as usize,
            retransmit_tries: self.retransmit_tries,
            pools,
            unique_ids,
        })
    }

    /// `local_ts` and `remote_ts` as selectors, or their defaults (`remote`: the peer's
    /// address if known; `policy`: the peer has an `interface`).
    fn resolve_ts(
        &self,
        remote: Option<IpAddr>,
        policy: bool,
    ) -> Result<(Vec<Selector>, Vec<Selector>), String> {
        let any = || vec![Selector::any(false), Selector::any(true)];
        let mut sides = Vec::with_capacity(2);
        for (field, list) in [("local_ts", &self.local_ts), ("remote_ts", &self.remote_ts)] {
            if list.len() > MAX_TS {
                return Err(format!(
                    "{field}: {} selectors; at most {MAX_TS}",
                    list.len()
                ));
            }
            let mut out = Vec::with_capacity(list.len());
            for (k, t) in list.iter().enumerate() {
                let s = parse_ts(t).map_err(|e| format!("{field}[{k}]: {e}"))?;
                if !policy && (s.protocol != 0 || s.start_port != 0 || s.end_port != u16::MAX) {
                    return Err(format!(
                        "{field}[{k}]: `{t}`: a tunnel carries whatever is routed to it; a protocol or ports need a policy-based peer (`interface`)"
                    ));
                }
                out.push(s);
            }
            sides.push(out);
        }
        let remote_ts = sides.pop().unwrap_or_default();
        let local_ts = sides.pop().unwrap_or_default();
        let local_ts = match (local_ts.is_empty(), policy) {
            (false, _) => local_ts,
            (true, false) => any(),
            (true, true) => vec![Selector::host(self.local)],
        };
        let remote_ts = match (remote_ts.is_empty(), policy, remote) {
            (false, _, _) => remote_ts,
            (true, false, _) => any(),
            (true, true, Some(r)) => vec![Selector::host(r)],
            (true, true, None) if !self.pools.is_empty() => any(),
            (true, true, None) => return Err(
                "remote_ts: needed with remote = \"any\" and no pools (the peers' networks; else any peer could claim the interface's traffic)".into(),
            ),
        };
        Ok((local_ts, remote_ts))
    }

    /// `pools`: each a prefix, none overlapping another, at most [`MAX_POOLS`] of them
    /// and [`MAX_POOL_ADDRESSES`] addresses of each family together.
    fn resolve_pools(&self) -> Result<Vec<Prefix>, String> {
        if self.pools.len() > MAX_POOLS {
            return Err(format!(
                "pools: {} prefixes; at most {MAX_POOLS}",
                self.pools.len()
            ));
        }
        let mut out: Vec<Prefix> = Vec::new();
        // Addresses of the IPv4 pools, of the IPv6 pools.
        let mut total = [0u64; 2];
        for (k, s) in self.pools.iter().enumerate() {
            let p = Prefix::parse(s).map_err(|e| format!("pools[{k}]: {e}"))?;
            if let Some(j) = out.iter().position(|o| o.overlaps(&p)) {
                return Err(format!("pools[{k}]: {p} overlaps pools[{j}] {}", out[j]));
            }
            let n = &mut total[usize::from(p.is_v6())];
            *n = n.saturating_add(p.size());
            if *n > MAX_POOL_ADDRESSES {
                return Err(format!(
                    "pools[{k}]: the {} pools hold more than {MAX_POOL_ADDRESSES} addresses together",
                    if p.is_v6() { "IPv6" } else { "IPv4" }
                ));
            }
            out.push(p);
        }
        Ok(out)
    }
}

impl PeerConfig {
    /// With `auth = "pubkey"`: reads the certificate, key, CAs and CRLs and checks they go
    /// together. Errors name the field (`cert: ...`).
    fn load_cert_auth(&self) -> Result<CertAuth, String> {
        if self.psk.is_some() {
            return Err("psk: not used with auth = \"pubkey\"".into());
        }
        let cert = self
            .cert
            .as_deref()
            .ok_or("cert: auth = \"pubkey\" needs our certificate (cert = \"/path.pem\")")?;
        let chain = crypto::read_certificates(cert).map_err(|e| format!("cert: {e}"))?;
        let path = self.private_key.as_deref().ok_or(
            "private_key: auth = \"pubkey\" needs the certificate's key (private_key = \"/path.pem\")",
        )?;
        let key = read_private_key(path).map_err(|e| format!("private_key: {e}"))?;
        key.check_certificate(&chain[0]).map_err(|e| {
            format!(
                "private_key: {} is not the key of {}: {e}",
                path.display(),
                cert.display()
            )
        })?;
        if self.ca.is_empty() {
            return Err(
                "ca: auth = \"pubkey\" needs the CAs to trust (ca = [\"/path.pem\"])".into(),
            );
        }
        let mut cas = Vec::new();
        let mut ca_hashes = Vec::new();
        for (i, f) in self.ca.iter().enumerate() {
            for c in crypto::read_certificates(f).map_err(|e| format!("ca[{i}]: {e}"))? {
                let h =
                    crypto::key_sha1(&c).map_err(|e| format!("ca[{i}]: {}: {e}", f.display()))?;
                ca_hashes.extend_from_slice(&h);
                cas.push(c);
            }
        }
        let crls = self
            .crl
            .iter()
            .enumerate()
            .map(|(i, f)| read_crl(f).map_err(|e| format!("crl[{i}]: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        // A CRL that does not parse is found now rather than at the first AUTH.
        if let Err(crypto::CryptoError::CrlParse { index, reason }) =
            crypto::verify_chain(&chain[..1], &cas, &crls, std::time::SystemTime::now())
        {
            return Err(format!("crl[{index}]: cannot be parsed: {reason}"));
        }
        Ok(CertAuth {
            chain,
            key,
            cas,
            crls,
            ca_hashes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposals() {
        let p = parse_ike_proposal("aes128gcm16-prfsha256-curve25519").unwrap();
        assert_eq!(p.encr, Encr::AesGcm16 { key_bits: 128 });
        assert_eq!(
            (p.integ, p.prf, p.dh),
            (None, Prf::HmacSha256, Dh::Curve25519)
        );
        let p = parse_ike_proposal("aes256-sha384-modp2048").unwrap();
        assert_eq!(p.prf, Prf::HmacSha384);
        assert!(parse_ike_proposal("aes128gcm16-sha256-prfsha256-ecp256").is_err());
        assert!(parse_ike_proposal("aes128-prfsha256-ecp256").is_err());
        assert!(parse_ike_proposal("aes128gcm16-prfsha256")
            .unwrap_err()
            .contains("DH"));
        assert!(parse_ike_proposal("des-sha1-modp768")
            .unwrap_err()
            .contains("`des`"));
        let e = parse_esp_proposal("aes256-sha512-esn").unwrap();
        assert!(e.esn && e.integ == Some(Integ::HmacSha512_256));
        assert!(parse_esp_proposal("aes128-sha384").is_err());
        assert_eq!(default_ike_proposals().len(), 4);
        assert_eq!(default_esp_proposals().len(), 4);
    }

    #[test]
    fn ids() {
        assert_eq!(parse_id("192.0.2.1").unwrap().kind, wire::id::IPV4_ADDR);
        assert_eq!(parse_id("2001:db8::1").unwrap().data.len(), 16);
        assert_eq!(parse_id("a@b").unwrap().kind, wire::id::RFC822_ADDR);
        assert_eq!(parse_id("gw.example").unwrap().text(), "gw.example");
    }

    #[test]
    fn ids_match_as_their_kind_compares() {
        let m = |a: &str, b: &str| id_matches(&parse_id(a).unwrap(), &parse_id(b).unwrap());
        assert!(m("gw.example", "GW.Example"));
        assert!(!m("gw.example", "gw.example.org"));
        assert!(m("user@example.org", "user@EXAMPLE.org"));
        assert!(
            !m("user@example.org", "USER@example.org"),
            "the local part is exact"
        );
        assert!(!m("user@example.org", "user@example.org.evil"));
        assert!(m("a@b@example.org", "a@b@Example.ORG"));
        assert!(!m("192.0.2.1", "192.0.2.2"));
        assert!(m("192.0.2.1", "192.0.2.1"));
        // Of different kinds: never, even with the same bytes.
        let mut fqdn = parse_id("user@example.org").unwrap();
        fqdn.kind = wire::id::FQDN;
        assert!(!id_matches(&fqdn, &parse_id("user@example.org").unwrap()));
    }

    /// `id_key` agrees with `id_matches` on the pairs above, on DNs, and on random
    /// identities of every kind with their letters' case changed at random.
    #[test]
    fn id_keys_are_equal_exactly_when_ids_match() {
        let texts = [
            "gw.example",
            "GW.Example",
            "gw.example.org",
            "user@example.org",
            "user@EXAMPLE.org",
            "USER@example.org",
            "a@b@example.org",
            "a@b@Example.ORG",
            "A@b@example.org",
            "192.0.2.1",
            "192.0.2.2",
            "2001:db8::1",
            "dn:C=CH, O=Example, CN=gw1",
            "dn:C=ch, O=EXAMPLE, CN=GW1",
            "dn:O=Example, C=CH, CN=gw1",
            "dn:C=CH, O=Example, CN=gw2",
            "dn:C=CH, O=Example",
        ];
        let ids: Vec<Id> = texts.iter().map(|t| parse_id(t).unwrap()).collect();
        let mut bad_dn = parse_id("dn:C=CH").unwrap();
        bad_dn.data.truncate(3);
        let ids: Vec<Id> = ids.into_iter().chain([bad_dn]).collect();
        for a in &ids {
            for b in &ids {
                let keys = matches!((id_key(a), id_key(b)), (Some(x), Some(y)) if x == y);
                assert_eq!(keys, id_matches(a, b), "{} and {}", a.text(), b.text());
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn id_keys_follow_id_matches_on_random_identities(
            kind in proptest::sample::select(vec![1u8, 2, 3, 5, 9, 11]),
            data in proptest::collection::vec(
                proptest::sample::select(b"aAbB@.zZ9-".to_vec()), 0..12),
            flips in proptest::prelude::any::<u16>(),
        ) {
            let flipped: Vec<u8> = data
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    let flip = (flips >> (i % 16)) & 1 == 1 && b.is_ascii_alphabetic();
                    if flip { b ^ 0x20 } else { *b }
                })
                .collect();
            let (a, b) = (Id { kind, data }, Id { kind, data: flipped });
            let keys = matches!((id_key(&a), id_key(&b)), (Some(x), Some(y)) if x == y);
            proptest::prop_assert_eq!(keys, id_matches(&a, &b));
        }
    }

    #[test]
    fn resolve_checks() {
        let c: PeerConfig = toml_like();
        let p = c.resolve(Some(b"0123456789abcdef0123")).unwrap();
        assert_eq!(p.remote_id.text(), "192.0.2.2");
        assert!(c.resolve(Some(b"short")).unwrap_err().starts_with("psk:"));
        assert!(c.resolve(None).unwrap_err().contains("no secret"));
        let mut d = c.clone();
        d.remote = "any".into();
        assert!(d
            .resolve(Some(b"0123456789abcdef"))
            .unwrap_err()
            .starts_with("remote_id"));
        for (life, ok) in [
            (0, true),
            (9, false),
            (10, true),
            (MAX_IKE_LIFETIME_S + 1, false),
        ] {
            let mut d = c.clone();
            d.ike_lifetime_s = life;
            let r = d.resolve(Some(b"0123456789abcdef"));
            assert_eq!(r.is_ok(), ok, "{life}: {r:?}");
            if let Err(e) = r {
                assert!(e.starts_with("ike_lifetime_s: "), "{e}");
            }
        }
        for (tries, ok) in [
            (0, false),
            (1, true),
            (MAX_RETRANSMIT_TRIES, true),
            (11, false),
        ] {
            let mut d = c.clone();
            d.retransmit_tries = tries;
            let r = d.resolve(Some(b"0123456789abcdef"));
            assert_eq!(r.is_ok(), ok, "{tries}: {r:?}");
            if let Err(e) = r {
                assert!(e.starts_with("retransmit_tries: "), "{e}");
            }
        }
        for (size, ok) in [(575, false), (576, true), (65_535, true), (65_536, false)] {
            let mut d = c.clone();
            d.fragment_size = size;
            let r = d.resolve(Some(b"0123456789abcdef"));
            assert_eq!(r.is_ok(), ok, "{size}: {r:?}");
        }
        let mut d = c.clone();
        (d.local, d.remote, d.fragment_size) =
            ("2001:db8::1".parse().unwrap(), "2001:db8::2".into(), 1279);
        assert!(d
            .resolve(Some(b"0123456789abcdef"))
            .unwrap_err()
            .starts_with("fragment_size: 1279 is not between 1280"));
        let mut d = c.clone();
        d.proposals = vec!["aes128gcm16-prfsha256-curve25519".into(), "bogus".into()];
        assert!(d
            .resolve(Some(b"0123456789abcdef"))
            .unwrap_err()
            .starts_with("proposals[1]"));
    }

    #[test]
    fn unique_ids_are_checked() {
        let mut c = toml_like();
        assert_eq!(c.unique_ids, "no");
        for (s, want) in [
            ("no", UniqueIds::No),
            ("never", UniqueIds::Never),
            ("replace", UniqueIds::Replace),
            ("yes", UniqueIds::Replace),
            ("keep", UniqueIds::Keep),
        ] {
            c.unique_ids = s.into();
            let p = c.resolve(Some(b"0123456789abcdef")).unwrap();
            assert_eq!(p.unique_ids, want, "{s}");
        }
        c.unique_ids = "Yes".into();
        assert_eq!(
            c.resolve(Some(b"0123456789abcdef")).unwrap_err(),
            "unique_ids: `Yes` is not one of no (the default), never, replace (or yes), keep"
        );
    }

    fn toml_like() -> PeerConfig {
        PeerConfig::new("b", "192.0.2.1".parse().unwrap(), "192.0.2.2", "ipsec0")
    }

    #[test]
    fn traffic_selectors_are_parsed_as_strongswan_writes_them() {
        let s = parse_ts("10.1.0.0/24").unwrap();
        assert_eq!(
            (s.start.to_string(), s.end.to_string(), s.protocol),
            ("10.1.0.0".into(), "10.1.0.255".into(), 0)
        );
        assert_eq!((s.start_port, s.end_port), (0, 65535));
        let s = parse_ts("2001:db8::/127[udp/5201]").unwrap();
        assert_eq!(s.end.to_string(), "2001:db8::1");
        assert_eq!((s.protocol, s.start_port, s.end_port), (17, 5201, 5201));
        let s = parse_ts("10.0.0.1-10.0.0.9[tcp/1000-2000]").unwrap();
        assert_eq!((s.protocol, s.start_port, s.end_port), (6, 1000, 2000));
        assert_eq!(parse_ts("192.0.2.7[47]").unwrap().protocol, 47);
        assert_eq!(parse_ts("0.0.0.0/0").unwrap(), Selector::any(false));
        for (bad, why) in [
            ("10.1.0.1/24", "host bits"),
            ("10.1.0.0/33", "prefix length"),
            ("10.1.0.9-10.1.0.1", "lower to a higher"),
            ("10.1.0.1-2001:db8::1", "one family"),
            ("ten", "not a prefix"),
            ("10.1.0.0/24[icmp/8]", "ports need"),
            ("10.1.0.0/24[bogus]", "protocol"),
            ("10.1.0.0/24[tcp/9-1]", "high to low"),
            ("10.1.0.0/24[tcp", "without its"),
        ] {
            let e = parse_ts(bad).unwrap_err();
            assert!(e.contains(why) && e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn a_peer_lands_on_a_tunnel_or_an_interface_with_its_selectors() {
        let psk = Some(&b"0123456789abcdef"[..]);
        // A tunnel peer: everything, unless narrowed by address.
        let t = toml_like().resolve(psk).unwrap();
        assert_eq!(t.local_ts, [Selector::any(false), Selector::any(true)]);
        assert!(t.interface.is_none());
        let mut c = toml_like();
        c.remote_ts = vec!["10.2.0.0/16[tcp]".into()];
        assert!(c.resolve(psk).unwrap_err().starts_with("remote_ts[0]: "));
        c.remote_ts = vec!["10.2.0.0/16".into()];
        assert_eq!(c.resolve(psk).unwrap().remote_ts.len(), 1);
        // Policy-based: the peers' own addresses by default.
        let mut c = toml_like();
        c.tunnel.clear();
        c.interface = Some("wan".into());
        let p = c.resolve(psk).unwrap();
        assert_eq!(p.local_ts, [Selector::host(c.local)]);
        assert_eq!(p.remote_ts, [Selector::host("192.0.2.2".parse().unwrap())]);
        assert_eq!(
            (p.interface.as_deref(), p.policy_priority),
            (Some("wan"), 100)
        );
        // Anyone may answer: its networks are needed, or pools.
        c.remote = "any".into();
        c.remote_id = Some("rw.example".into());
        assert!(c.resolve(psk).unwrap_err().starts_with("remote_ts: needed"));
        c.pools = vec!["10.200.0.0/24".into()];
        assert_eq!(c.resolve(psk).unwrap().remote_ts.len(), 2);
        // Both, or neither.
        let mut c = toml_like();
        c.interface = Some("wan".into());
        assert!(c.resolve(psk).unwrap_err().starts_with("interface: "));
        c.interface = None;
        c.tunnel.clear();
        assert!(c.resolve(psk).unwrap_err().starts_with("tunnel: empty"));
        c.local_ts = (0..17).map(|k| format!("10.0.{k}.0/24")).collect();
        c.interface = Some("wan".into());
        assert!(c.resolve(psk).unwrap_err().contains("at most 16"));
    }

    #[test]
    fn pools_are_checked() {
        let mut c = toml_like();
        c.pools = vec![
            "10.200.0.0/24".into(),
            "10.201.0.0/16".into(),
            "fd00:200::/120".into(),
        ];
        let p = c.resolve(Some(b"0123456789abcdef")).unwrap();
        assert_eq!(p.pools.len(), 3);
        assert!(p.pools[2].is_v6() && !p.pools[0].is_v6());
        // The largest of each family, side by side.
        c.pools = vec!["10.0.0.0/8".into(), "fd00::/104".into()];
        assert_eq!(c.resolve(Some(b"0123456789abcdef")).unwrap().pools.len(), 2);
        for (pools, want) in [
            (
                vec!["10.200.0.0/24", "10.200.0.128/25"],
                "pools[1]: 10.200.0.128/25 overlaps pools[0]",
            ),
            (
                vec!["10.200.0.1/24"],
                "pools[0]: `10.200.0.1/24`: host bits",
            ),
            (
                vec!["10.0.0.0/8", "11.0.0.0/32"],
                "pools[1]: the IPv4 pools hold more than",
            ),
            (
                vec!["fd00:200::/104", "10.0.0.0/8", "fd00:201::/120"],
                "pools[2]: the IPv6 pools hold more than",
            ),
            (
                vec!["10.200.0.0/24", "fd00:200::/64"],
                "pools[1]: `fd00:200::/64`: an IPv6 pool is at most a /104",
            ),
            (
                vec!["fd00:200::/112", "10.200.0.0/24", "fd00:200::100/120"],
                "pools[2]: fd00:200::100/120 overlaps pools[0] fd00:200::/112",
            ),
        ] {
            c.pools = pools.iter().map(|s| s.to_string()).collect();
            let e = c.resolve(Some(b"0123456789abcdef")).unwrap_err();
            assert!(e.starts_with(want), "{pools:?}: {e}");
        }
        c.pools = (0..17).map(|k| format!("10.{k}.0.0/24")).collect();
        assert!(c
            .resolve(Some(b"0123456789abcdef"))
            .unwrap_err()
            .starts_with("pools: 17"));
    }
}
