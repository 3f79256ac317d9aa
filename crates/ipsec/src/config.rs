//! `[ipsec]` in the config: route-based tunnels (`[[ipsec.tunnel]]`) and their manually
//! keyed SAs (`[[ipsec.sa]]`), whose keys live in a separate file (`key_file`) that only
//! its owner may read.
//!
//! ```toml
//! [ipsec]
//! key_file = "/etc/ferrouter/ipsec.keys"
//!
//! [[ipsec.tunnel]]
//! name = "ipsec0"
//! local = "192.0.2.1"
//! remote = "192.0.2.2"
//!
//! [[ipsec.sa]]
//! tunnel = "ipsec0"
//! direction = "out"
//! spi = 0x1001
//! encryption = "aes-128-gcm"
//! key = "gw1-to-gw2"
//!
//! [[ipsec.sa]]
//! tunnel = "ipsec0"
//! direction = "in"
//! spi = 0x2001
//! encryption = "aes-128-gcm"
//! key = "gw2-to-gw1"
//! ```
//!
//! The key file (mode 0600 or 0400) names each key's material in hex:
//!
//! ```toml
//! [gw1-to-gw2]
//! encryption = "4a1f...e2"   # the key, then the 4-byte salt for the AEADs
//! [gw2-to-gw1]
//! encryption = "77c0...1b"
//! integrity = "..."          # the HMAC key, for CBC and NULL encryption
//! ```

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use zeroize::{Zeroize, Zeroizing};

use crate::sa::{Df, Direction, Encryption, Integrity, Mode, Sa, SaConfig};

/// `[ipsec]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct IpsecConfig {
    /// The file holding the SAs' keys (readable by its owner only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// SAs the fast path holds at most (sized at start).
    #[serde(default = "default_max_sas")]
    pub max_sas: usize,
    /// Route-based tunnel interfaces.
    #[serde(default, rename = "tunnel", skip_serializing_if = "Vec::is_empty")]
    pub tunnels: Vec<TunnelConfig>,
    /// Manually keyed SAs.
    #[serde(default, rename = "sa", skip_serializing_if = "Vec::is_empty")]
    pub sas: Vec<SaEntry>,
    /// Policy-based IPsec: the security policies of the interfaces' SPDs.
    #[serde(default, rename = "policy", skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<PolicyEntry>,
    /// Per interface and direction: what its SPD does with traffic no policy matches.
    #[serde(default, rename = "spd", skip_serializing_if = "Vec::is_empty")]
    pub spds: Vec<SpdEntry>,
    /// IKEv2 peers (the `ike` crate): their child SAs land on their tunnels.
    #[serde(default, rename = "peer", skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<ike::config::PeerConfig>,
}

impl Default for IpsecConfig {
    fn default() -> Self {
        IpsecConfig {
            key_file: None,
            max_sas: default_max_sas(),
            tunnels: Vec::new(),
            sas: Vec::new(),
            policies: Vec::new(),
            spds: Vec::new(),
            peers: Vec::new(),
        }
    }
}

fn default_max_sas() -> usize {
    16_384
}

/// The most SAs `max_sas` may ask for.
pub const MAX_SAS: usize = 2_000_000;

/// `[[ipsec.tunnel]]`: a route-based tunnel interface. It appears in Linux as a TUN
/// interface of its name: addresses and routes put on it are mirrored into the FIB, and
/// what is routed to it leaves encrypted with its transmit SA.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TunnelConfig {
    /// Interface name (a Linux interface name, not a port's).
    pub name: String,
    /// Our end: the outer source address (one of the router's addresses).
    pub local: IpAddr,
    /// The peer's end: the outer destination.
    pub remote: IpAddr,
    /// The tunnel interface's IP MTU: packets bigger than this are answered with
    /// fragmentation-needed / packet-too-big (or, IPv4 without DF, encrypted whole and the
    /// outer packet fragmented). Default: 1500 less the largest overhead of its SAs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// The outer IPv4 header's DF bit: `copy` (from the inner packet; the default), `set`
    /// or `clear`.
    #[serde(default, skip_serializing_if = "is_default_df")]
    pub df: DfPolicy,
    /// NAT traversal (RFC 3948): ESP in UDP, from port 4500 to `remote_port`, and
    /// keepalives every `keepalive_s` seconds.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nat_t: bool,
    /// With `nat_t`: the peer's UDP port, as its NAT maps it (4500 by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_port: Option<u16>,
    /// With `nat_t`: seconds between NAT keepalives (20 by default, RFC 3948 §4; 0: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keepalive_s: Option<u32>,
}

impl TunnelConfig {
    /// The peer's UDP port with NAT-T.
    pub fn remote_port(&self) -> u16 {
        self.remote_port.unwrap_or(crate::esp::NATT_PORT)
    }
    /// Seconds between keepalives with NAT-T (0: none).
    pub fn keepalive_s(&self) -> u32 {
        self.keepalive_s.unwrap_or(20)
    }
}

/// `df` of a tunnel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DfPolicy {
    /// Copied from an inner IPv4 packet, set for IPv6.
    #[default]
    Copy,
    /// Always set.
    Set,
    /// Always clear.
    Clear,
}

fn is_default_df(d: &DfPolicy) -> bool {
    *d == DfPolicy::Copy
}

impl From<DfPolicy> for Df {
    fn from(d: DfPolicy) -> Df {
        match d {
            DfPolicy::Copy => Df::Copy,
            DfPolicy::Set => Df::Set,
            DfPolicy::Clear => Df::Clear,
        }
    }
}

/// `direction` of an SA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SaDirection {
    /// We encrypt with it.
    Out,
    /// We decrypt with it.
    In,
}

impl From<SaDirection> for Direction {
    fn from(d: SaDirection) -> Direction {
        match d {
            SaDirection::Out => Direction::Outbound,
            SaDirection::In => Direction::Inbound,
        }
    }
}

/// `[[ipsec.sa]]`: one manually keyed SA, of a tunnel (`tunnel`) or, without `tunnel`,
/// of the policies that name it (`[[ipsec.policy]]`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SaEntry {
    /// The tunnel it belongs to; empty (absent): a policy SA.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tunnel: String,
    /// A policy SA's mode: `tunnel` (the default: `local` and `remote` are the outer
    /// addresses) or `transport`. A tunnel's SAs take their mode from the tunnel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<SaMode>,
    /// A policy SA in tunnel mode: our outer address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<IpAddr>,
    /// A policy SA in tunnel mode: the peer's outer address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<IpAddr>,
    /// `out` (a tunnel has at most one: the one it sends with) or `in` (several, so a
    /// rekey loses nothing).
    pub direction: SaDirection,
    /// Security Parameters Index, 256 and above (`0x1001` is fine in TOML).
    pub spi: u32,
    /// `aes-128-gcm`, `aes-256-gcm`, `chacha20-poly1305`, `aes-128-cbc`, `aes-256-cbc`
    /// or `null` (tests only).
    pub encryption: String,
    /// `none` (with the AEADs; the default), `hmac-sha1-96`, `hmac-sha2-256-128` or
    /// `hmac-sha2-512-256`.
    #[serde(default = "none", skip_serializing_if = "is_none")]
    pub integrity: String,
    /// The name of its key in the key file.
    pub key: String,
    /// Extended (64-bit) sequence numbers; both ends must agree.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub esn: bool,
    /// Anti-replay window (inbound), a multiple of 64 from 64 to 65536.
    #[serde(default = "default_window", skip_serializing_if = "is_default_window")]
    pub replay_window: u32,
    /// An outbound SA of a tunnel with several peers (what an IKE peer with `remote =
    /// "any"` lands): the inner destinations it is for, as prefixes (at most
    /// [`MAX_SELECTORS`]). The tunnel sends a packet with the SA whose prefix holds its
    /// destination most narrowly, else with the tunnel's own transmit SA; such SAs are not
    /// the tunnel's one transmit SA. With `local`/`remote`, as the SA's own outer ends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub selectors: Vec<String>,
    /// ESP in UDP (NAT-T, RFC 3948) for this SA, whatever its tunnel says: the peer's
    /// UDP port (ours is 4500), as a NAT maps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_port: Option<u16>,
}

/// Destination prefixes one SA may have (`selectors`): one range of addresses makes at
/// most 62 (IPv4) or 254 (IPv6), and road warriors have one or two.
pub const MAX_SELECTORS: usize = 256;

fn none() -> String {
    "none".into()
}
fn is_none(s: &String) -> bool {
    s == "none"
}
fn default_window() -> u32 {
    SaConfig::DEFAULT_WINDOW
}
fn is_default_window(w: &u32) -> bool {
    *w == SaConfig::DEFAULT_WINDOW
}

/// `mode` of a policy SA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SaMode {
    /// A new outer header between `local` and `remote`.
    Tunnel,
    /// ESP between the packet's own addresses (host to host).
    Transport,
}

/// `action` of a policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyAction {
    /// Out: encrypt with the policy's SA. In: must have been decrypted by one of its SAs.
    Protect,
    /// Goes on in the clear.
    Bypass,
    /// Dropped (counted).
    Discard,
}

impl PolicyAction {
    /// Its config name.
    pub fn name(self) -> &'static str {
        match self {
            PolicyAction::Protect => "protect",
            PolicyAction::Bypass => "bypass",
            PolicyAction::Discard => "discard",
        }
    }
}

/// `sa` of a policy: one SPI or several.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(untagged)]
pub enum SpiList {
    /// One SA.
    One(u32),
    /// Several (inbound: during a rekey, the old and the new).
    Many(Vec<u32>),
}

impl SpiList {
    /// The SPIs.
    pub fn spis(&self) -> Vec<u32> {
        match self {
            SpiList::One(s) => vec![*s],
            SpiList::Many(v) => v.clone(),
        }
    }
}

/// `[[ipsec.policy]]`: one security policy of an interface's SPD (RFC 4301 §4.4.1).
/// Selectors absent match anything; among the policies of one interface and direction the
/// lowest `priority` that matches wins (ties: config order).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyEntry {
    /// The port or VLAN sub-interface whose SPD it is in.
    pub interface: String,
    /// `out`: traffic routed out of the interface; `in`: traffic received on it.
    pub direction: SaDirection,
    /// Lower first (default 0).
    #[serde(default)]
    pub priority: u32,
    /// Source prefix (or address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<String>,
    /// Destination prefix (or address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst: Option<String>,
    /// `tcp`, `udp`, `icmp`, ... or a number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<firewall::config::Protocol>,
    /// Source ports (with tcp, udp or sctp): `80`, `"1000-2000"` or a list.
    #[serde(default, skip_serializing_if = "firewall::config::PortList::is_empty")]
    pub src_ports: firewall::config::PortList,
    /// Destination ports, as `src_ports`.
    #[serde(default, skip_serializing_if = "firewall::config::PortList::is_empty")]
    pub dst_ports: firewall::config::PortList,
    /// `protect`, `bypass` or `discard`.
    pub action: PolicyAction,
    /// With `protect`: out, the SPI of the SA that encrypts; in, the SPI(s) of the SAs
    /// that may have carried it. Policy SAs only (`[[ipsec.sa]]` without `tunnel`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sa: Option<SpiList>,
}

/// `[[ipsec.spd]]`: what one interface's SPD does, in one direction, with the traffic no
/// policy matches (by default: `bypass`, as strongSwan and Linux's xfrm do).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SpdEntry {
    /// The port or VLAN sub-interface.
    pub interface: String,
    /// `in` or `out`.
    pub direction: SaDirection,
    /// `bypass` or `discard`.
    pub default: PolicyAction,
}

/// The tunnel index [`Planned::tunnel`] has for a policy SA.
pub const POLICY_SA: usize = usize::MAX;

/// An algorithm by its config name.
pub fn encryption(name: &str) -> Option<Encryption> {
    [
        Encryption::AesGcm128,
        Encryption::AesGcm256,
        Encryption::ChaCha20Poly1305,
        Encryption::AesCbc128,
        Encryption::AesCbc256,
        Encryption::Null,
    ]
    .into_iter()
    .find(|e| e.name() == name)
}

/// An integrity algorithm by its config name.
pub fn integrity(name: &str) -> Option<Integrity> {
    [
        Integrity::None,
        Integrity::HmacSha1_96,
        Integrity::HmacSha256_128,
        Integrity::HmacSha512_256,
    ]
    .into_iter()
    .find(|e| e.name() == name)
}

/// One key of the key file (or of an SA given through the API).
pub struct Key {
    /// Encryption keying material (with the salt for the AEADs).
    pub encryption: Zeroizing<Vec<u8>>,
    /// Integrity key.
    pub integrity: Zeroizing<Vec<u8>>,
}

/// The key file's keys, by name, and its IKE pre-shared keys (`psk = "..."`).
pub struct Keys(HashMap<String, Key>, HashMap<String, Zeroizing<Vec<u8>>>);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKey {
    #[serde(default)]
    encryption: String,
    #[serde(default)]
    integrity: String,
    /// An IKE peer's pre-shared key, as text.
    #[serde(default)]
    psk: String,
}

impl RawKey {
    fn zeroize_all(&mut self) {
        self.encryption.zeroize();
        self.integrity.zeroize();
        self.psk.zeroize();
    }
}

fn hex(s: &str) -> Result<Vec<u8>, String> {
    let s = s.strip_prefix("0x").unwrap_or(s);
    let digits: Vec<u8> = s
        .bytes()
        .filter(|b| !matches!(b, b':' | b' ' | b'_'))
        .collect();
    if !digits.len().is_multiple_of(2) {
        return Err(format!(
            "{} hex digits: expected an even number",
            digits.len()
        ));
    }
    digits
        .chunks(2)
        .enumerate()
        .map(|(i, d)| {
            let v = |c: u8| (c as char).to_digit(16);
            match (v(d[0]), v(d[1])) {
                (Some(a), Some(b)) => Ok((a * 16 + b) as u8),
                _ => Err(format!("byte {i} is not hex")),
            }
        })
        .collect()
}

impl Keys {
    /// Read `path`: it must be a regular file that neither its group nor others can read or
    /// write. Errors name the file and what was wrong; they never quote key material.
    pub fn read(path: &Path) -> Result<Keys, String> {
        use std::os::unix::fs::PermissionsExt;
        let meta =
            std::fs::metadata(path).map_err(|e| format!("key file {}: {e}", path.display()))?;
        if !meta.is_file() {
            return Err(format!("key file {}: not a regular file", path.display()));
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(format!(
                "key file {} has mode {mode:04o}: its group or others may read it; make it readable by its owner only (chmod 600 {})",
                path.display(),
                path.display()
            ));
        }
        let text = Zeroizing::new(
            std::fs::read_to_string(path)
                .map_err(|e| format!("key file {}: {e}", path.display()))?,
        );
        Keys::parse(&text).map_err(|e| format!("key file {}: {e}", path.display()))
    }

    /// Parse a key file's text (TOML: a table per key with `encryption` and `integrity` in
    /// hex).
    pub fn parse(text: &str) -> Result<Keys, String> {
        let raw: HashMap<String, RawKey> = toml::from_str(text).map_err(|e| {
            // toml's message quotes the offending line, which may hold key material:
            // only its position is given.
            match e.span() {
                Some(s) => {
                    let line = text[..s.start.min(text.len())].lines().count().max(1);
                    format!("line {line}: not a table of keys with encryption and integrity in hex")
                }
                None => "not a table of keys with encryption and integrity in hex".into(),
            }
        })?;
        let mut keys = HashMap::new();
        let mut psks = HashMap::new();
        for (name, mut r) in raw {
            if !r.psk.is_empty() {
                if !r.encryption.is_empty() || !r.integrity.is_empty() {
                    r.zeroize_all();
                    return Err(format!(
                        "key {name:?}: a psk takes neither encryption nor integrity"
                    ));
                }
                psks.insert(
                    name,
                    Zeroizing::new(std::mem::take(&mut r.psk).into_bytes()),
                );
                continue;
            }
            let e = hex(&r.encryption).map_err(|m| format!("key {name:?}: encryption: {m}"));
            let i = hex(&r.integrity).map_err(|m| format!("key {name:?}: integrity: {m}"));
            r.encryption.zeroize();
            r.integrity.zeroize();
            keys.insert(
                name,
                Key {
                    encryption: Zeroizing::new(e?),
                    integrity: Zeroizing::new(i?),
                },
            );
        }
        Ok(Keys(keys, psks))
    }

    /// The key named `name`.
    pub fn get(&self, name: &str) -> Option<&Key> {
        self.0.get(name)
    }

    /// The pre-shared key named `name`.
    pub fn psk(&self, name: &str) -> Option<&[u8]> {
        self.1.get(name).map(|p| p.as_slice())
    }
}

/// An SA from outside the config (`POST /v1/ipsec/sa`, later the IKE daemon): an
/// `[[ipsec.sa]]` entry with its key at hand (its `key` name is not looked up).
pub struct ExtraSa {
    /// What it is, as a config entry would say.
    pub entry: SaEntry,
    /// Its keying material.
    pub key: Key,
    /// Its keys were negotiated (IKE: fresh from a key exchange, never used again), so its
    /// sequence numbers need not be kept across restarts as a configured key's are.
    pub negotiated: bool,
}

impl ExtraSa {
    /// A child SA of a tunnel, keyed by IKE (`crates/ike`): `encryption` and `integrity`
    /// as the SA config names them (`aes-128-gcm`, `none`), the keys as derived.
    #[allow(clippy::too_many_arguments)]
    pub fn for_tunnel(
        tunnel: &str,
        direction: SaDirection,
        spi: u32,
        encryption: String,
        integrity: &str,
        esn: bool,
        encryption_key: &[u8],
        integrity_key: &[u8],
    ) -> ExtraSa {
        ExtraSa {
            entry: SaEntry {
                tunnel: tunnel.to_string(),
                mode: None,
                local: None,
                remote: None,
                direction,
                spi,
                encryption,
                integrity: integrity.to_string(),
                key: String::new(),
                esn,
                replay_window: default_window(),
                selectors: Vec::new(),
                remote_port: None,
            },
            key: Key {
                encryption: Zeroizing::new(encryption_key.to_vec()),
                integrity: Zeroizing::new(integrity_key.to_vec()),
            },
            negotiated: true,
        }
    }

    /// Hex key material (`encryption`, `integrity`: as in the key file) with `entry`; an
    /// error names which key is not hex (never quoting it).
    pub fn new(entry: SaEntry, encryption: &str, integrity: &str) -> Result<ExtraSa, String> {
        let e = hex(encryption).map_err(|m| format!("encryption key: {m}"))?;
        let i = hex(integrity).map_err(|m| format!("integrity key: {m}"))?;
        Ok(ExtraSa {
            entry,
            key: Key {
                encryption: Zeroizing::new(e),
                integrity: Zeroizing::new(i),
            },
            negotiated: false,
        })
    }

    /// How errors name it: `sa out 0x1001`.
    pub fn label(&self) -> String {
        let d = match self.entry.direction {
            SaDirection::Out => "out",
            SaDirection::In => "in",
        };
        format!("sa {d} {:#x}", self.entry.spi)
    }
}

/// An [`ExtraSa`] as it is kept between plans (a gateway keeps two per IKE tunnel, a
/// million tunnels at a time): its algorithms as enums, its tunnel's name shared, its keys
/// in one box, its prefixes parsed — about a third of an [`ExtraSa`]'s memory. Made from
/// an SA that was planned (its names are known ones); [`StoredSa::extra`] gives it back.
pub struct StoredSa {
    tunnel: std::sync::Arc<str>,
    local: Option<IpAddr>,
    remote: Option<IpAddr>,
    selectors: Box<[(IpAddr, u8)]>,
    /// The encryption key, then the integrity key.
    keys: Zeroizing<Box<[u8]>>,
    key_name: Box<str>,
    spi: u32,
    replay_window: u32,
    remote_port: Option<u16>,
    encryption_len: u16,
    direction: SaDirection,
    mode: Option<SaMode>,
    encryption: Encryption,
    integrity: Integrity,
    esn: bool,
    negotiated: bool,
}

impl StoredSa {
    /// `x` kept, its tunnel's name taken from `names` (or added there); an error names
    /// the field that is not what a plan accepts.
    pub fn new(x: &ExtraSa, names: &mut HashSet<std::sync::Arc<str>>) -> Result<StoredSa, String> {
        let e = &x.entry;
        let at = |f: &str| format!("{}.{f}", x.label());
        let encryption = encryption(&e.encryption)
            .ok_or_else(|| format!("{}: unknown algorithm {:?}", at("encryption"), e.encryption))?;
        let integrity = integrity(&e.integrity)
            .ok_or_else(|| format!("{}: unknown algorithm {:?}", at("integrity"), e.integrity))?;
        let mut selectors = Vec::with_capacity(e.selectors.len());
        for (k, t) in e.selectors.iter().enumerate() {
            let n = firewall::config::parse_net(t)
                .map_err(|m| format!("{}: {m}", at(&format!("selectors[{k}]"))))?;
            selectors.push((n.addr, n.len));
        }
        let encryption_len = u16::try_from(x.key.encryption.len())
            .map_err(|_| format!("{}: too long", at("encryption_key")))?;
        let tunnel = match names.get(e.tunnel.as_str()) {
            Some(t) => t.clone(),
            None => {
                let t: std::sync::Arc<str> = e.tunnel.as_str().into();
                names.insert(t.clone());
                t
            }
        };
        Ok(StoredSa {
            tunnel,
            local: e.local,
            remote: e.remote,
            selectors: selectors.into_boxed_slice(),
            keys: Zeroizing::new(
                [&x.key.encryption[..], &x.key.integrity[..]]
                    .concat()
                    .into_boxed_slice(),
            ),
            key_name: e.key.as_str().into(),
            spi: e.spi,
            replay_window: e.replay_window,
            remote_port: e.remote_port,
            encryption_len,
            direction: e.direction,
            mode: e.mode,
            encryption,
            integrity,
            esn: e.esn,
            negotiated: x.negotiated,
        })
    }

    /// The SA as it was given.
    pub fn extra(&self) -> ExtraSa {
        let (enc, integ) = self
            .keys
            .split_at(usize::from(self.encryption_len).min(self.keys.len()));
        ExtraSa {
            entry: SaEntry {
                tunnel: self.tunnel.to_string(),
                mode: self.mode,
                local: self.local,
                remote: self.remote,
                direction: self.direction,
                spi: self.spi,
                encryption: self.encryption.name().into(),
                integrity: self.integrity.name().into(),
                key: self.key_name.to_string(),
                esn: self.esn,
                replay_window: self.replay_window,
                selectors: self
                    .selectors
                    .iter()
                    .map(|(a, l)| format!("{a}/{l}"))
                    .collect(),
                remote_port: self.remote_port,
            },
            key: Key {
                encryption: Zeroizing::new(enc.to_vec()),
                integrity: Zeroizing::new(integ.to_vec()),
            },
            negotiated: self.negotiated,
        }
    }

    /// Its tunnel's name (empty: a policy SA).
    pub fn tunnel(&self) -> &str {
        &self.tunnel
    }

    /// `in` or `out`.
    pub fn direction(&self) -> SaDirection {
        self.direction
    }

    /// Its SPI.
    pub fn spi(&self) -> u32 {
        self.spi
    }

    /// Outbound and chosen by destination (it has `selectors`): its peer's address and
    /// UDP port (0 without one), which tell it from another peer's SA of its SPI.
    pub fn chosen(&self) -> Option<(IpAddr, u16)> {
        (self.direction == SaDirection::Out && !self.selectors.is_empty()).then(|| {
            (
                self.remote
                    .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)),
                self.remote_port.unwrap_or(0),
            )
        })
    }
}

/// An SA of the config, ready to build.
pub struct Planned {
    /// Its index in `[[ipsec.sa]]`.
    pub index: usize,
    /// Its tunnel's index in `[[ipsec.tunnel]]`, or [`POLICY_SA`].
    pub tunnel: usize,
    /// What it is made from.
    pub config: SaConfig,
    /// Keyed by IKE ([`ExtraSa::negotiated`]).
    pub negotiated: bool,
    /// Outbound, of a tunnel with several peers: the destination prefixes it is for
    /// ([`SaEntry::selectors`]).
    pub selectors: Vec<(IpAddr, u8)>,
}

impl IpsecConfig {
    /// Whether nothing is configured.
    pub fn is_default(&self) -> bool {
        *self == IpsecConfig::default()
    }

    /// The IKE peers, checked and resolved (their PSKs read from the key file); problems
    /// as (path, message), e.g. `ipsec.peer[0].tunnel`.
    pub fn ike_peers(&self) -> Result<Vec<ike::config::Peer>, Vec<(String, String)>> {
        let mut p: Vec<(String, String)> = Vec::new();
        if self.peers.is_empty() {
            return Ok(Vec::new());
        }
        // Certificate peers (auth = "pubkey") read their own files; PSKs are in the key file.
        let psk_peers = self.peers.iter().any(|c| c.auth != "pubkey");
        let keys = match &self.key_file {
            None if !psk_peers => None,
            None => {
                p.push((
                    "ipsec".into(),
                    "IKE peers are configured but no key_file: put their pre-shared keys in a file readable by its owner only ([name] psk = \"...\") and name it with key_file = \"/path\"".into(),
                ));
                None
            }
            Some(f) => match Keys::read(f) {
                Ok(k) => Some(k),
                Err(e) => {
                    p.push(("ipsec.key_file".into(), e));
                    None
                }
            },
        };
        let mut names = HashSet::new();
        let mut tunnels = HashMap::new();
        let mut out = Vec::new();
        // Every peer's pools: (peer, pool, prefix).
        let mut pools: Vec<(usize, usize, ike::pool::Prefix)> = Vec::new();
        for (i, c) in self.peers.iter().enumerate() {
            let at = |f: &str| format!("ipsec.peer[{i}].{f}");
            if c.name.is_empty() || !names.insert(c.name.as_str()) {
                p.push((
                    at("name"),
                    format!("{:?}: empty, or a second peer of that name", c.name),
                ));
            }
            match self.tunnels.iter().find(|t| t.name == c.tunnel) {
                // Policy-based (or neither: `resolve` names that).
                None if c.tunnel.is_empty() => {}
                None => p.push((
                    at("tunnel"),
                    format!("no [[ipsec.tunnel]] named {:?}", c.tunnel),
                )),
                Some(t) => {
                    if let Some(j) = tunnels.insert(c.tunnel.as_str(), i) {
                        p.push((
                            at("tunnel"),
                            format!("tunnel {:?} is already ipsec.peer[{j}]'s", c.tunnel),
                        ));
                    }
                    if self.sas.iter().any(|s| s.tunnel == c.tunnel) {
                        p.push((at("tunnel"), format!("tunnel {:?} has [[ipsec.sa]] keyed by hand: a tunnel is keyed either by hand or by IKE", c.tunnel)));
                    }
                    if c.local != t.local {
                        p.push((
                            at("local"),
                            format!(
                                "{} is not tunnel {:?}'s local address {}",
                                c.local, t.name, t.local
                            ),
                        ));
                    }
                    if let Ok(r) = c.remote.parse::<IpAddr>() {
                        if r != t.remote {
                            p.push((
                                at("remote"),
                                format!(
                                    "{r} is not tunnel {:?}'s remote address {}",
                                    t.name, t.remote
                                ),
                            ));
                        }
                    }
                }
            }
            let psk = match (&keys, &c.psk) {
                (Some(k), Some(n)) => k.psk(n),
                _ => None,
            };
            if keys.is_none() && c.psk.is_some() && c.auth != "pubkey" {
                // The key file's problem is reported once, above.
                continue;
            }
            match c.resolve(psk) {
                Ok(mut peer) => {
                    // ESP in UDP on the tunnel: IKE moves to port 4500 as well, and keeps
                    // the NAT's mapping open with the tunnel's keepalives.
                    if let Some(t) = self.tunnels.iter().find(|t| t.name == c.tunnel) {
                        peer.encap = t.nat_t;
                        peer.keepalive = std::time::Duration::from_secs(u64::from(t.keepalive_s()));
                    }
                    // Two peers leasing the same address would route its traffic to both.
                    for (k, pool) in peer.pools.iter().enumerate() {
                        if let Some((j, l, other)) = pools.iter().find(|(_, _, o)| pool.overlaps(o))
                        {
                            p.push((
                                at(&format!("pools[{k}]")),
                                format!("{pool} overlaps ipsec.peer[{j}].pools[{l}] {other}"),
                            ));
                        }
                    }
                    pools.extend(peer.pools.iter().enumerate().map(|(k, x)| (i, k, *x)));
                    out.push(peer)
                }
                Err(e) => {
                    let (f, m) = e.split_once(": ").unwrap_or(("name", e.as_str()));
                    p.push((at(f), m.to_string()));
                }
            }
        }
        if p.is_empty() {
            Ok(out)
        } else {
            Err(p)
        }
    }

    /// Whether any tunnel or policy is configured, or a policy-based IKE peer (ESP is
    /// then decrypted on the ports).
    pub fn active(&self) -> bool {
        !self.tunnels.is_empty()
            || !self.policies.is_empty()
            || self.ike_interfaces().next().is_some()
    }

    /// The interfaces policy-based IKE peers put their child SAs' policies on (both
    /// directions).
    pub fn ike_interfaces(&self) -> impl Iterator<Item = &str> {
        self.peers.iter().filter_map(|p| p.interface.as_deref())
    }

    /// Problems, as (path, message), the path in the config's terms
    /// (`ipsec.sa[2].key`). `reserved` are names the tunnels may not take (ports, VLAN
    /// sub-interfaces): the interfaces policies may name. Reads the key file.
    pub fn validate(&self, reserved: &[&str]) -> Vec<(String, String)> {
        let mut p = match self.plan(reserved) {
            Ok(_) => Vec::new(),
            Err(p) => p,
        };
        // The IKE peers (their PSK, certificate and key files read): here, at config
        // check, not in `plan_with`, which runs again for every SA IKE installs.
        if let Err(e) = self.ike_peers() {
            p.extend(e);
        }
        for (i, peer) in self.peers.iter().enumerate() {
            if let Some(f) = peer.interface.as_deref().filter(|f| !f.is_empty()) {
                if !reserved.contains(&f) {
                    p.push((
                        format!("ipsec.peer[{i}].interface"),
                        format!(
                            "no [[port]] or [[vlan]] named {f:?} (a policy-based peer's policies belong to a port or VLAN sub-interface; for a tunnel, write tunnel = {f:?})"
                        ),
                    ));
                }
            }
        }
        for (i, pol) in self.policies.iter().enumerate() {
            if !reserved.contains(&pol.interface.as_str()) {
                p.push((
                    format!("ipsec.policy[{i}].interface"),
                    format!(
                        "no [[port]] or [[vlan]] named {:?} (a policy belongs to a port or VLAN sub-interface, not a tunnel)",
                        pol.interface
                    ),
                ));
            }
        }
        for (i, d) in self.spds.iter().enumerate() {
            if !reserved.contains(&d.interface.as_str()) {
                p.push((
                    format!("ipsec.spd[{i}].interface"),
                    format!("no [[port]] or [[vlan]] named {:?}", d.interface),
                ));
            }
        }
        p
    }

    /// The SAs to build, with their keys from the key file; or every problem found.
    pub fn plan(&self, reserved: &[&str]) -> Result<Vec<Planned>, Vec<(String, String)>> {
        self.plan_with(reserved, &[])
    }

    /// [`IpsecConfig::plan`] with `extra` SAs after the config's, checked the same way
    /// and against them (one transmit SA per tunnel, one inbound SA per SPI); their
    /// problems' paths are their [`ExtraSa::label`]s, their [`Planned::index`]es follow
    /// the config's.
    pub fn plan_with(
        &self,
        reserved: &[&str],
        extra: &[ExtraSa],
    ) -> Result<Vec<Planned>, Vec<(String, String)>> {
        self.plan_keyed(reserved, extra, &self.keys())
    }

    /// The keys of the config's SAs, from the key file (read now: once per config
    /// apply), or what is wrong with it (as a problem's path and message). `Ok(None)`
    /// without SAs in the config (an [`ExtraSa`] brings its own key).
    pub fn keys(&self) -> Result<Option<Keys>, (String, String)> {
        match &self.key_file {
            _ if self.sas.is_empty() => Ok(None),
            None => Err((
                "ipsec".into(),
                "SAs are configured but no key_file: put their keys in a file readable by its owner only and name it with key_file = \"/path\"".into(),
            )),
            Some(f) if !f.is_absolute() => Err((
                "ipsec.key_file".into(),
                format!("{} must be an absolute path", f.display()),
            )),
            Some(f) => Keys::read(f)
                .map(Some)
                .map_err(|e| ("ipsec.key_file".into(), e)),
        }
    }

    /// [`IpsecConfig::plan_with`] with the config's keys as [`IpsecConfig::keys`] read
    /// them (the key file is not read again).
    pub fn plan_keyed(
        &self,
        reserved: &[&str],
        extra: &[ExtraSa],
        keys: &Result<Option<Keys>, (String, String)>,
    ) -> Result<Vec<Planned>, Vec<(String, String)>> {
        let mut p: Vec<(String, String)> = Vec::new();
        if !(1..=MAX_SAS).contains(&self.max_sas) {
            p.push((
                "ipsec.max_sas".into(),
                format!("{} is out of range; expected 1..={MAX_SAS}", self.max_sas),
            ));
        }
        let mut names = HashSet::new();
        for (i, t) in self.tunnels.iter().enumerate() {
            let at = |f: &str| format!("ipsec.tunnel[{i}].{f}");
            if t.name.is_empty() || t.name.len() > 15 || t.name.contains(['/', ' ', ':', '\0']) {
                p.push((at("name"), format!("{:?} is not a valid Linux interface name (1-15 characters, no '/', ':' or spaces)", t.name)));
            } else if reserved.contains(&t.name.as_str()) {
                p.push((
                    at("name"),
                    format!("{:?} is already a [[port]] or [[vlan]]", t.name),
                ));
            } else if !names.insert(t.name.as_str()) {
                p.push((at("name"), format!("a second tunnel named {:?}", t.name)));
            }
            if t.local.is_ipv4() != t.remote.is_ipv4() {
                p.push((
                    at("remote"),
                    format!(
                        "{} and local {} are of different address families",
                        t.remote, t.local
                    ),
                ));
            }
            for (f, a) in [("local", t.local), ("remote", t.remote)] {
                if a.is_unspecified() || a.is_multicast() || a.is_loopback() {
                    p.push((at(f), format!("{a} cannot be a tunnel endpoint")));
                }
            }
            if let Some(m) = t.mtu {
                if !(576..=9000).contains(&m) {
                    p.push((
                        at("mtu"),
                        format!("{m} is out of range; expected 576..=9000"),
                    ));
                }
            }
            if !t.nat_t {
                // A tunnel keyed by IKE may find a NAT (and then sends keepalives); its
                // peer's port is IKE's to learn.
                let ike = self.peers.iter().any(|c| c.tunnel == t.name);
                for (f, set, why) in [
                    (
                        "remote_port",
                        t.remote_port.is_some(),
                        "applies only with nat_t = true",
                    ),
                    (
                        "keepalive_s",
                        t.keepalive_s.is_some() && !ike,
                        "applies only with nat_t = true, or to a tunnel an [[ipsec.peer]] keys (once IKE finds a NAT)",
                    ),
                ] {
                    if set {
                        p.push((at(f), why.into()));
                    }
                }
            }
            if t.remote_port == Some(0) {
                p.push((at("remote_port"), "0 is no port".into()));
            }
        }
        self.check_policies(&mut p);
        if self.sas.is_empty() && extra.is_empty() {
            return if p.is_empty() { Ok(Vec::new()) } else { Err(p) };
        }
        let keys = match keys {
            Ok(k) => k.as_ref(),
            Err(e) => {
                p.push(e.clone());
                None
            }
        };
        let mut out_of: HashMap<&str, usize> = HashMap::new();
        let mut spis: HashMap<u32, usize> = HashMap::new();
        // Outbound policy SAs by SPI: the first of each.
        let mut policy_out: HashMap<u32, usize> = HashMap::new();
        let mut planned = Vec::new();
        let config_sas = self.sas.len();
        let name_of = |k: usize| match k.checked_sub(config_sas).and_then(|j| extra.get(j)) {
            Some(x) => x.label(),
            None => format!("ipsec.sa[{k}]"),
        };
        for (i, s) in self
            .sas
            .iter()
            .chain(extra.iter().map(|x| &x.entry))
            .enumerate()
        {
            let given = i.checked_sub(config_sas).and_then(|j| extra.get(j));
            let at = |f: &str| match given {
                Some(x) => format!("{}.{f}", x.label()),
                None => format!("ipsec.sa[{i}].{f}"),
            };
            let policy_sa = s.tunnel.is_empty();
            let tunnel = if policy_sa {
                Self::policy_sa_problems(s, &at, &mut p);
                if s.direction == SaDirection::Out {
                    // (Found by SPI: IKE's policy children come and go one at a time.)
                    if let Some(&first) = policy_out.get(&s.spi) {
                        p.push((
                            at("spi"),
                            format!("{:#x} is already the SPI of outbound policy SA {}: policies name their SA by SPI", s.spi, name_of(first)),
                        ));
                    } else {
                        policy_out.insert(s.spi, i);
                    }
                }
                Some(POLICY_SA)
            } else {
                self.tunnels.iter().position(|t| t.name == s.tunnel)
            };
            match s.direction {
                SaDirection::Out if policy_sa || !s.selectors.is_empty() => {}
                SaDirection::Out => {
                    if let Some(first) = out_of.insert(s.tunnel.as_str(), i) {
                        p.push((at("direction"), format!("tunnel {:?} already has its transmit SA ({}); a tunnel sends with one SA: change its spi and key to rekey", s.tunnel, name_of(first))));
                    }
                }
                SaDirection::In => {
                    if let Some(first) = spis.insert(s.spi, i) {
                        p.push((
                            at("spi"),
                            format!(
                                "{:#x} is already the SPI of inbound {}",
                                s.spi,
                                name_of(first)
                            ),
                        ));
                    }
                }
            }
            if let Some(x) = self.plan_entry(i, s, given, keys, tunnel, &mut p) {
                planned.push(x);
            }
        }
        if p.is_empty() {
            Ok(planned)
        } else {
            Err(p)
        }
    }

    /// [`IpsecConfig::plan_extra`]: `x`, a tunnel's SA from outside the config, planned
    /// alone (the config's own checks ran when it was applied): `tunnel` is its tunnel's
    /// index in `[[ipsec.tunnel]]` (looked up by the caller, who keeps them by name), or
    /// `None` when the config has no such tunnel. What it cannot check alone, the caller
    /// does: an inbound SPI no other inbound SA has, a tunnel whose transmit SA is not the
    /// config's.
    pub fn plan_extra(
        &self,
        x: &ExtraSa,
        tunnel: Option<usize>,
    ) -> Result<Planned, Vec<(String, String)>> {
        let mut p = Vec::new();
        let i = self.sas.len();
        if x.entry.tunnel.is_empty() {
            p.push((
                format!("{}.tunnel", x.label()),
                "planned alone, an SA needs its tunnel (a policy SA goes through the whole plan)"
                    .into(),
            ));
            return Err(p);
        }
        match self.plan_entry(i, &x.entry, Some(x), None, tunnel, &mut p) {
            Some(planned) if p.is_empty() => Ok(planned),
            _ => Err(p),
        }
    }

    /// SA `s` (number `i` of the config's, or the `given` extra one), checked alone and
    /// made ready to build; `None` with its problems added to `p`.
    fn plan_entry(
        &self,
        i: usize,
        s: &SaEntry,
        given: Option<&ExtraSa>,
        keys: Option<&Keys>,
        tunnel: Option<usize>,
        p: &mut Vec<(String, String)>,
    ) -> Option<Planned> {
        let at = |f: &str| match given {
            Some(x) => format!("{}.{f}", x.label()),
            None => format!("ipsec.sa[{i}].{f}"),
        };
        if !s.tunnel.is_empty() {
            if s.mode.is_some() {
                p.push((at("mode"), "applies only to a policy SA (one without tunnel): a tunnel's SAs take the tunnel's".into()));
            }
            match (s.local, s.remote) {
                (Some(l), Some(r)) if l.is_ipv4() != r.is_ipv4() => p.push((
                    at("remote"),
                    format!("{r} and local {l} are of different address families"),
                )),
                (None, Some(_)) | (Some(_), None) => p.push((
                    at(if s.local.is_none() { "local" } else { "remote" }),
                    "a tunnel's SA with ends of its own (one of several peers) needs both local and remote".into(),
                )),
                _ => {}
            }
            for (f, a) in [("local", s.local), ("remote", s.remote)] {
                if let Some(a) =
                    a.filter(|a| a.is_unspecified() || a.is_multicast() || a.is_loopback())
                {
                    p.push((at(f), format!("{a} cannot be a tunnel endpoint")));
                }
            }
        } else {
            // (`remote_port` puts a policy SA's ESP in UDP as a tunnel's: NAT-T.)
            if !s.selectors.is_empty() {
                p.push((
                    at("selectors"),
                    "applies only to a tunnel's SA (a policy SA's traffic is the SPD's)".into(),
                ));
            }
        }
        if s.remote_port == Some(0) {
            p.push((at("remote_port"), "0 is no port".into()));
        }
        let mut selectors = Vec::with_capacity(s.selectors.len());
        if !s.selectors.is_empty() && !s.tunnel.is_empty() && s.remote.is_none() {
            p.push((
                at("remote"),
                "an SA with selectors is one peer's of several: it needs its own local and remote"
                    .into(),
            ));
        }
        if !s.selectors.is_empty() && s.direction == SaDirection::In {
            p.push((
                at("selectors"),
                "applies only to an outbound SA (inbound ESP finds its SA by SPI)".into(),
            ));
        } else if s.selectors.len() > MAX_SELECTORS {
            p.push((
                at("selectors"),
                format!("{} prefixes; at most {MAX_SELECTORS}", s.selectors.len()),
            ));
        } else {
            for (k, t) in s.selectors.iter().enumerate() {
                match firewall::config::parse_net(t) {
                    Ok(n) => selectors.push((n.addr, n.len)),
                    Err(e) => p.push((at(&format!("selectors[{k}]")), e)),
                }
            }
        }
        if tunnel.is_none() {
            p.push((
                at("tunnel"),
                format!("no [[ipsec.tunnel]] named {:?}", s.tunnel),
            ));
        }
        let enc = encryption(&s.encryption);
        if enc.is_none() {
            p.push((at("encryption"), format!("unknown algorithm {:?}; expected aes-128-gcm, aes-256-gcm, chacha20-poly1305, aes-128-cbc, aes-256-cbc or null", s.encryption)));
        }
        let integ = integrity(&s.integrity);
        if integ.is_none() {
            p.push((at("integrity"), format!("unknown algorithm {:?}; expected none, hmac-sha1-96, hmac-sha2-256-128 or hmac-sha2-512-256", s.integrity)));
        }
        let key = given.map(|x| &x.key).or_else(|| {
            let got = keys?.get(&s.key);
            if got.is_none() {
                if let Some(f) = &self.key_file {
                    p.push((at("key"), format!("no key {:?} in {}", s.key, f.display())));
                }
            }
            got
        });
        let (Some(t), Some(enc), Some(integ), Some(key)) = (tunnel, enc, integ, key) else {
            return None;
        };
        let tc = self.tunnels.get(t);
        let (local, remote) = match (tc, s.local, s.remote) {
            (Some(_), Some(l), Some(r)) => (Some(l), Some(r)),
            (Some(tc), ..) => (Some(tc.local), Some(tc.remote)),
            (None, ..) => (s.local, s.remote),
        };
        let mut c = SaConfig::new(
            s.spi,
            s.direction.into(),
            enc,
            &key.encryption,
            integ,
            &key.integrity,
        );
        c.mode = match (s.mode, local, remote) {
            (Some(SaMode::Transport), ..) => Mode::Transport,
            (_, Some(local), Some(remote)) => match s.direction {
                SaDirection::Out => Mode::Tunnel {
                    src: local,
                    dst: remote,
                },
                SaDirection::In => Mode::Tunnel {
                    src: remote,
                    dst: local,
                },
            },
            // Reported by policy_sa_problems.
            _ => return None,
        };
        // An SA with ends of its own (one of a tunnel's several peers) has its own
        // encapsulation too: `remote_port` or none, whatever the tunnel's `nat_t`.
        let own_ends = s.remote.is_some();
        let peer_port = s.remote_port.or_else(|| {
            tc.filter(|tc| tc.nat_t && !own_ends)
                .map(TunnelConfig::remote_port)
        });
        if let Some(port) = peer_port {
            c.natt = Some(match s.direction {
                SaDirection::Out => crate::NatT {
                    src_port: crate::esp::NATT_PORT,
                    dst_port: port,
                },
                SaDirection::In => crate::NatT {
                    src_port: port,
                    dst_port: crate::esp::NATT_PORT,
                },
            });
        }
        c.esn = s.esn;
        c.replay_window = s.replay_window;
        c.df = tc.map_or(DfPolicy::Copy, |tc| tc.df).into();
        // Keying checks lengths, combinations and the window: an SA that is built
        // here is one the daemon can build.
        if let Err(e) = Sa::new(&c) {
            let field = match e {
                crate::SaError::ReplayWindow(_) => "replay_window",
                crate::SaError::ReservedSpi(_) => "spi",
                crate::SaError::AeadWithIntegrity(_) | crate::SaError::CbcWithoutIntegrity(_) => {
                    "integrity"
                }
                _ => "key",
            };
            let what = if field == "key" && given.is_none() {
                format!("key {:?}: {e}", s.key)
            } else {
                e.to_string()
            };
            p.push((at(field), what));
            return None;
        }
        Some(Planned {
            index: i,
            tunnel: t,
            config: c,
            negotiated: given.is_some_and(|x| x.negotiated),
            selectors,
        })
    }

    /// What is wrong with policy SA `i` (`[[ipsec.sa]]` without `tunnel`).
    fn policy_sa_problems(s: &SaEntry, at: &dyn Fn(&str) -> String, p: &mut Vec<(String, String)>) {
        match (s.mode.unwrap_or(SaMode::Tunnel), s.local, s.remote) {
            (SaMode::Transport, None, None) => {}
            (SaMode::Transport, ..) => p.push((
                at("mode"),
                "a transport-mode SA has no outer addresses: remove local and remote".into(),
            )),
            (SaMode::Tunnel, Some(l), Some(r)) => {
                if l.is_ipv4() != r.is_ipv4() {
                    p.push((
                        at("remote"),
                        format!("{r} and local {l} are of different address families"),
                    ));
                }
                for (f, a) in [("local", l), ("remote", r)] {
                    if a.is_unspecified() || a.is_multicast() || a.is_loopback() {
                        p.push((at(f), format!("{a} cannot be a tunnel endpoint")));
                    }
                }
            }
            (SaMode::Tunnel, l, _) => p.push((
                at(if l.is_none() { "local" } else { "remote" }),
                "a policy SA in tunnel mode needs local and remote (its outer addresses); or mode = \"transport\"".into(),
            )),
        }
    }

    /// What is wrong with the policies and SPD defaults (but their interfaces' names,
    /// which [`IpsecConfig::validate`] checks).
    fn check_policies(&self, p: &mut Vec<(String, String)>) {
        use firewall::config::parse_net;
        for (i, pol) in self.policies.iter().enumerate() {
            let at = |f: &str| format!("ipsec.policy[{i}].{f}");
            let mut family = None;
            for (f, v) in [("src", &pol.src), ("dst", &pol.dst)] {
                let Some(v) = v else { continue };
                match parse_net(v) {
                    Ok(n) => match family {
                        Some(v4) if v4 != n.addr.is_ipv4() => p.push((
                            at(f),
                            format!(
                                "{v} and src {} are of different address families",
                                pol.src.as_deref().unwrap_or_default()
                            ),
                        )),
                        _ => family = Some(n.addr.is_ipv4()),
                    },
                    Err(e) => p.push((at(f), e)),
                }
            }
            let ports = pol.protocol.is_some_and(|x| x.has_ports());
            for (f, l) in [("src_ports", &pol.src_ports), ("dst_ports", &pol.dst_ports)] {
                if !l.is_empty() && !ports {
                    p.push((
                        at(f),
                        "ports need protocol = \"tcp\", \"udp\" or \"sctp\"".into(),
                    ));
                }
            }
            let spis = pol.sa.as_ref().map(SpiList::spis).unwrap_or_default();
            match (pol.action, spis.len()) {
                (PolicyAction::Protect, 0) => p.push((
                    at("sa"),
                    "protect needs the SA: sa = SPI of an [[ipsec.sa]] without tunnel".into(),
                )),
                (PolicyAction::Protect, n) if n > 1 && pol.direction == SaDirection::Out => {
                    p.push((
                        at("sa"),
                        "an outbound policy encrypts with one SA: name one SPI".into(),
                    ))
                }
                (PolicyAction::Protect, _) => {}
                (a, n) if n > 0 => p.push((
                    at("sa"),
                    format!("{} takes no SA (only protect does)", a.name()),
                )),
                _ => {}
            }
            if pol.action != PolicyAction::Protect {
                continue;
            }
            let dir = match pol.direction {
                SaDirection::Out => "outbound",
                SaDirection::In => "inbound",
            };
            for spi in spis {
                let same = |s: &&SaEntry| s.spi == spi && s.direction == pol.direction;
                if let Some(s) = self.sas.iter().filter(same).find(|s| !s.tunnel.is_empty()) {
                    p.push((
                        at("sa"),
                        format!("{spi:#x} is the SA of tunnel {:?}: an SA serves a tunnel or policies, not both", s.tunnel),
                    ));
                } else if !self.sas.iter().any(|s| same(&s)) {
                    p.push((
                        at("sa"),
                        format!("{spi:#x}: no {dir} [[ipsec.sa]] has this SPI"),
                    ));
                }
            }
        }
        let mut seen = HashSet::new();
        for (i, d) in self.spds.iter().enumerate() {
            let at = |f: &str| format!("ipsec.spd[{i}].{f}");
            if d.default == PolicyAction::Protect {
                p.push((
                    at("default"),
                    "expected bypass or discard: protect needs an SA, so a policy".into(),
                ));
            }
            if !seen.insert((d.interface.as_str(), d.direction)) {
                p.push((
                    at("interface"),
                    format!(
                        "a second [[ipsec.spd]] for {:?} in this direction",
                        d.interface
                    ),
                ));
            }
        }
    }

    /// The IP MTU of tunnel `t`: its `mtu`, or 1500 less the largest overhead its SAs add.
    pub fn tunnel_mtu(&self, t: usize, planned: &[Planned]) -> u32 {
        let Some(tc) = self.tunnels.get(t) else {
            return 1500;
        };
        if let Some(m) = tc.mtu {
            return m;
        }
        let overhead = planned
            .iter()
            .filter(|p| p.tunnel == t && p.config.direction == Direction::Outbound)
            .filter_map(|p| Sa::new(&p.config).ok().map(|s| s.max_overhead()))
            .max()
            // No transmit SA yet: room for the largest (IPv6 outer, CBC with SHA-512).
            .unwrap_or(if tc.local.is_ipv4() { 80 } else { 100 });
        1500u32.saturating_sub(overhead as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn key_file(text: &str, mode: u32) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "ipsec-keys-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join(format!("keys-{mode:o}"));
        std::fs::write(&f, text).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
        f
    }

    const KEYS: &str = "[a]\nencryption = \"000102030405060708090a0b0c0d0e0f10111213\"\n\
                        [cbc]\nencryption = \"00112233445566778899aabbccddeeff\"\nintegrity = \"0x0102030405060708090a0b0c0d0e0f1011121314\"\n";

    fn cfg(keys: &Path, sas: &str) -> IpsecConfig {
        let text = format!(
            "key_file = \"{}\"\n[[tunnel]]\nname = \"ipsec0\"\nlocal = \"192.0.2.1\"\nremote = \"192.0.2.2\"\n{sas}",
            keys.display()
        );
        toml::from_str(&text).unwrap()
    }

    #[test]
    fn a_good_config_plans_its_sas() {
        let f = key_file(KEYS, 0o600);
        let c = cfg(
            &f,
            "[[sa]]\ntunnel = \"ipsec0\"\ndirection = \"out\"\nspi = 0x1001\nencryption = \"aes-128-gcm\"\nkey = \"a\"\n\
             [[sa]]\ntunnel = \"ipsec0\"\ndirection = \"in\"\nspi = 0x2001\nencryption = \"aes-128-cbc\"\nintegrity = \"hmac-sha1-96\"\nkey = \"cbc\"\nesn = true\n",
        );
        let p = c.plan(&["eth0"]).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[1].config.direction, Direction::Inbound);
        assert_eq!(
            p[1].config.mode,
            Mode::Tunnel {
                src: "192.0.2.2".parse().unwrap(),
                dst: "192.0.2.1".parse().unwrap()
            }
        );
        // 1500 less IPv4 20 + ESP 8 + IV 8 + pad 3 + trailer 2 + ICV 16.
        assert_eq!(c.tunnel_mtu(0, &p), 1500 - 57);
    }

    #[test]
    fn problems_are_named_where_they_are() {
        let f = key_file(KEYS, 0o600);
        let c = cfg(
            &f,
            "[[sa]]\ntunnel = \"nope\"\ndirection = \"out\"\nspi = 0x1001\nencryption = \"aes-128-gcm\"\nkey = \"a\"\n\
             [[sa]]\ntunnel = \"ipsec0\"\ndirection = \"in\"\nspi = 0x2001\nencryption = \"aes-256-gcm\"\nkey = \"a\"\n\
             [[sa]]\ntunnel = \"ipsec0\"\ndirection = \"in\"\nspi = 0x2001\nencryption = \"rot13\"\nkey = \"missing\"\n\
             [[sa]]\ntunnel = \"ipsec0\"\ndirection = \"in\"\nspi = 0x3001\nencryption = \"aes-128-cbc\"\nkey = \"cbc\"\n\
             [[sa]]\ntunnel = \"ipsec0\"\ndirection = \"in\"\nspi = 7\nencryption = \"aes-128-gcm\"\nkey = \"a\"\n",
        );
        let p = c.validate(&["ipsec0"]);
        let has = |path: &str, m: &str| {
            assert!(
                p.iter().any(|(a, b)| a == path && b.contains(m)),
                "no {path}: {m} in {p:?}"
            )
        };
        has("ipsec.tunnel[0].name", "already a [[port]]");
        has("ipsec.sa[0].tunnel", "no [[ipsec.tunnel]] named \"nope\"");
        has(
            "ipsec.sa[1].key",
            "key \"a\": encryption key is 20 bytes; aes-256-gcm needs 36",
        );
        has(
            "ipsec.sa[2].spi",
            "0x2001 is already the SPI of inbound ipsec.sa[1]",
        );
        has("ipsec.sa[2].encryption", "unknown algorithm \"rot13\"");
        has("ipsec.sa[2].key", "no key \"missing\"");
        has("ipsec.sa[3].integrity", "needs an integrity algorithm");
        has("ipsec.sa[4].spi", "SPI 7 is reserved");
    }

    #[test]
    fn policies_and_their_sas_are_checked_where_they_are() {
        let f = key_file(KEYS, 0o600);
        let text = format!(
            r#"key_file = "{}"
[[tunnel]]
name = "ipsec0"
local = "192.0.2.1"
remote = "192.0.2.2"
[[sa]]
tunnel = "ipsec0"
direction = "out"
spi = 0x1001
encryption = "aes-128-gcm"
key = "a"
[[sa]]
direction = "out"
spi = 0x3001
encryption = "aes-128-gcm"
key = "a"
local = "192.0.2.1"
remote = "192.0.2.9"
[[sa]]
direction = "in"
spi = 0x4001
encryption = "aes-128-gcm"
key = "a"
mode = "transport"
[[sa]]
direction = "in"
spi = 0x4002
encryption = "aes-128-gcm"
key = "a"
local = "192.0.2.1"
[[policy]]
interface = "eth1"
direction = "out"
dst = "10.2.0.0/24"
action = "protect"
sa = 0x3001
[[policy]]
interface = "eth1"
direction = "in"
src = "10.2.0.0/24"
dst = "2001:db8::/32"
protocol = "icmp"
dst_ports = 80
action = "protect"
sa = [0x4001, 0x1001, 0x5001]
[[policy]]
interface = "ipsec0"
direction = "out"
src = "10.1.0.1/24"
action = "bypass"
sa = 0x3001
[[policy]]
interface = "eth1"
direction = "out"
action = "protect"
[[policy]]
interface = "eth1"
direction = "out"
action = "protect"
sa = 0x1001
[[spd]]
interface = "eth1"
direction = "in"
default = "protect"
"#,
            f.display()
        );
        let c: IpsecConfig = toml::from_str(&text).unwrap();
        assert!(c.active());
        let p = c.validate(&["eth0", "eth1"]);
        let has = |path: &str, m: &str| {
            assert!(
                p.iter().any(|(a, b)| a == path && b.contains(m)),
                "no {path}: {m} in {p:#?}"
            )
        };
        has("ipsec.sa[3].remote", "needs local and remote");
        has("ipsec.policy[1].dst", "different address families");
        has("ipsec.policy[1].dst_ports", "ports need protocol");
        has("ipsec.policy[1].sa", "0x1001: no inbound [[ipsec.sa]]");
        has(
            "ipsec.policy[4].sa",
            "0x1001 is the SA of tunnel \"ipsec0\": an SA serves a tunnel or policies, not both",
        );
        has("ipsec.policy[1].sa", "0x5001: no inbound [[ipsec.sa]]");
        has(
            "ipsec.policy[2].interface",
            "no [[port]] or [[vlan]] named \"ipsec0\"",
        );
        has("ipsec.policy[2].src", "host bits set");
        has("ipsec.policy[2].sa", "bypass takes no SA");
        has("ipsec.policy[3].sa", "protect needs the SA");
        has("ipsec.spd[0].default", "expected bypass or discard");
        assert_eq!(p.len(), 11, "{p:#?}");
        // Fixed, it plans: the policy SAs in their modes, not a tunnel's.
        let mut c = c;
        c.sas[3].remote = Some("192.0.2.7".parse().unwrap());
        c.policies.truncate(1);
        c.spds.clear();
        let planned = c.plan(&["eth1"]).unwrap();
        assert_eq!(planned[1].tunnel, POLICY_SA);
        assert_eq!(
            planned[1].config.mode,
            Mode::Tunnel {
                src: "192.0.2.1".parse().unwrap(),
                dst: "192.0.2.9".parse().unwrap()
            }
        );
        assert_eq!(planned[2].config.mode, Mode::Transport);
        assert_eq!(
            planned[3].config.mode,
            Mode::Tunnel {
                src: "192.0.2.7".parse().unwrap(),
                dst: "192.0.2.1".parse().unwrap()
            }
        );
    }

    #[test]
    fn nat_t_puts_the_sas_in_udp() {
        let f = key_file(KEYS, 0o600);
        let sas = "[[sa]]\ntunnel = \"ipsec0\"\ndirection = \"out\"\nspi = 0x1001\nencryption = \"aes-128-gcm\"\nkey = \"a\"\n\
                   [[sa]]\ntunnel = \"ipsec0\"\ndirection = \"in\"\nspi = 0x2001\nencryption = \"aes-128-gcm\"\nkey = \"a\"\n";
        let mut c = cfg(&f, sas);
        c.tunnels[0].nat_t = true;
        c.tunnels[0].remote_port = Some(31000);
        let p = c.plan(&[]).unwrap();
        assert_eq!(
            p[0].config.natt,
            Some(crate::NatT {
                src_port: 4500,
                dst_port: 31000
            })
        );
        assert_eq!(p[1].config.natt.map(|n| n.dst_port), Some(4500));
        // Without nat_t, its settings are mistakes.
        c.tunnels[0].nat_t = false;
        let e = c.validate(&[]);
        assert!(
            e.iter()
                .any(|(p, m)| p == "ipsec.tunnel[0].remote_port" && m.contains("only with nat_t")),
            "{e:?}"
        );
        // keepalive_s too, unless IKE keys the tunnel (and may find a NAT).
        c.tunnels[0].remote_port = None;
        c.tunnels[0].keepalive_s = Some(1);
        let keepalive =
            |e: &[(String, String)]| e.iter().any(|(p, _)| p == "ipsec.tunnel[0].keepalive_s");
        assert!(keepalive(&c.validate(&[])));
        let mut c = cfg(
            &f,
            "[[peer]]
name = \"gw2\"
local = \"192.0.2.1\"
remote = \"192.0.2.2\"
psk = \"a\"
tunnel = \"ipsec0\"
",
        );
        c.tunnels[0].keepalive_s = Some(1);
        let e = c.validate(&[]);
        assert!(!keepalive(&e), "{e:?}");
    }

    #[test]
    fn an_sa_ike_put_in_udp_goes_in_udp_on_a_tunnel_without_nat_t() {
        let f = key_file(KEYS, 0o600);
        let c = cfg(&f, "");
        assert!(!c.tunnels[0].nat_t);
        for (dir, natt) in [
            (
                SaDirection::Out,
                crate::NatT {
                    src_port: 4500,
                    dst_port: 31000,
                },
            ),
            (
                SaDirection::In,
                crate::NatT {
                    src_port: 31000,
                    dst_port: 4500,
                },
            ),
        ] {
            let x = ExtraSa::for_tunnel(
                "ipsec0",
                dir,
                0x3001,
                "aes-128-gcm".into(),
                "none",
                true,
                &[7; 20],
                &[],
            );
            let plain = c.plan_extra(&x, Some(0)).unwrap();
            assert_eq!(plain.config.natt, None, "{dir:?}");
            let mut x = x;
            x.entry.remote_port = Some(31000);
            let p = c.plan_extra(&x, Some(0)).unwrap();
            assert_eq!(p.config.natt, Some(natt), "{dir:?}");
        }
    }

    #[test]
    fn a_tunnel_with_several_peers_has_an_sa_per_peer_by_destination() {
        let f = key_file(KEYS, 0o600);
        let peer = |spi: u32, remote: &str, extra: &str| {
            format!("[[sa]]\ntunnel = \"ipsec0\"\ndirection = \"out\"\nspi = {spi:#x}\nencryption = \"aes-128-gcm\"\nkey = \"a\"\nlocal = \"192.0.2.1\"\nremote = \"{remote}\"\n{extra}")
        };
        // The tunnel's own transmit SA and two peers' (one behind a NAT), same SPI.
        let sas = format!(
            "[[sa]]\ntunnel = \"ipsec0\"\ndirection = \"out\"\nspi = 0x1001\nencryption = \"aes-128-gcm\"\nkey = \"a\"\n{}{}",
            peer(0x5001, "198.51.100.1", "selectors = [\"10.128.0.1/32\"]\n"),
            peer(0x5001, "198.51.100.2", "selectors = [\"10.128.0.2\", \"2001:db8:1::/48\"]\nremote_port = 31000\n"),
        );
        let c = cfg(&f, &sas);
        let p = c.plan(&[]).unwrap();
        assert_eq!(p.len(), 3);
        assert!(p[0].selectors.is_empty());
        assert_eq!(
            p[1].selectors,
            ["10.128.0.1".parse().map(|a| (a, 32)).unwrap()]
        );
        assert_eq!(
            p[2].config.mode,
            Mode::Tunnel {
                src: "192.0.2.1".parse().unwrap(),
                dst: "198.51.100.2".parse().unwrap()
            }
        );
        assert_eq!(p[2].selectors.len(), 2);
        assert_eq!(
            p[2].config.natt,
            Some(crate::NatT {
                src_port: 4500,
                dst_port: 31000
            })
        );
        // Mistakes, each where it is.
        let bad = format!(
            "{}{}{}{}",
            peer(0x5002, "198.51.100.3", "selectors = [\"10.128.0.0/8\", \"nope\"]\n"),
            "[[sa]]\ntunnel = \"ipsec0\"\ndirection = \"in\"\nspi = 0x2001\nencryption = \"aes-128-gcm\"\nkey = \"a\"\nselectors = [\"10.0.0.0/8\"]\nremote_port = 0\n",
            "[[sa]]\ntunnel = \"ipsec0\"\ndirection = \"out\"\nspi = 0x5003\nencryption = \"aes-128-gcm\"\nkey = \"a\"\nremote = \"198.51.100.4\"\nselectors = [\"10.1.0.0/16\"]\n",
            peer(0x5004, "2001:db8::4", "selectors = [\"10.1.0.0/16\"]\n"),
        );
        let e = cfg(&f, &bad).validate(&[]);
        let has = |path: &str, m: &str| {
            assert!(
                e.iter().any(|(a, b)| a == path && b.contains(m)),
                "no {path}: {m} in {e:?}"
            )
        };
        has("ipsec.sa[0].selectors[0]", "host bits set");
        has("ipsec.sa[0].selectors[1]", "not an address or prefix");
        has("ipsec.sa[1].selectors", "only to an outbound SA");
        has("ipsec.sa[1].remote_port", "0 is no port");
        has("ipsec.sa[1].remote", "its own local and remote");
        has("ipsec.sa[2].local", "needs both local and remote");
        has("ipsec.sa[3].remote", "different address families");
        // Not on a policy SA.
        let pol = "[[sa]]\ndirection = \"out\"\nspi = 0x6001\nencryption = \"aes-128-gcm\"\nkey = \"a\"\nlocal = \"192.0.2.1\"\nremote = \"192.0.2.9\"\nselectors = [\"10.0.0.0/8\"]\n";
        let e = cfg(&f, pol).validate(&[]);
        assert!(
            e.iter()
                .any(|(p, m)| p == "ipsec.sa[0].selectors" && m.contains("only to a tunnel's SA")),
            "{e:?}"
        );
    }

    #[test]
    fn keys_read_once_plan_again_without_the_file() {
        let f = key_file(KEYS, 0o600);
        let sas = "[[sa]]\ntunnel = \"ipsec0\"\ndirection = \"out\"\nspi = 0x1001\nencryption = \"aes-128-gcm\"\nkey = \"a\"\n";
        let c = cfg(&f, sas);
        let keys = c.keys();
        assert!(matches!(keys, Ok(Some(_))));
        std::fs::remove_file(&f).unwrap();
        // An API SA added later: planned with the keys read at the config apply.
        let extra = ExtraSa {
            entry: toml::from_str::<SaEntry>(
                "tunnel = \"ipsec0\"\ndirection = \"in\"\nspi = 0x2001\nencryption = \"aes-128-gcm\"\nkey = \"-\"\n",
            )
            .unwrap(),
            key: Key {
                encryption: Zeroizing::new(vec![9; 20]),
                integrity: Zeroizing::new(Vec::new()),
            },
            negotiated: false,
        };
        let p = c
            .plan_keyed(&[], std::slice::from_ref(&extra), &keys)
            .unwrap();
        assert_eq!(p.len(), 2);
        // Read now, the file is gone: the problem names it.
        let Err(e) = c.plan_with(&[], &[extra]) else {
            panic!("planned without the key file")
        };
        assert_eq!(e[0].0, "ipsec.key_file", "{e:?}");
        // Others may read it: refused, as before.
        let f = key_file(KEYS, 0o640);
        let Err(e) = cfg(&f, sas).keys() else {
            panic!("a key file others can read was accepted")
        };
        assert!(e.1.contains("has mode 0640"), "{e:?}");
    }

    #[test]
    fn key_files_others_can_read_are_refused_and_keys_are_never_quoted() {
        let f = key_file(KEYS, 0o644);
        let e = Keys::read(&f).err().unwrap();
        assert!(
            e.contains("has mode 0644") && e.contains("chmod 600"),
            "{e}"
        );
        let f = key_file("[a]\nencryption = \"00zz\"\n", 0o400);
        let e = Keys::read(&f).err().unwrap();
        assert!(
            e.ends_with("key \"a\": encryption: byte 1 is not hex"),
            "{e}"
        );
        let f = key_file("[a]\nencryption = \"deadbeef\"\nsecret \n", 0o600);
        let e = Keys::read(&f).err().unwrap();
        assert!(e.contains("line 3") && !e.contains("deadbeef"), "{e}");
        let e = Keys::read(Path::new("/nonexistent/keys")).err().unwrap();
        assert!(e.starts_with("key file /nonexistent/keys: "), "{e}");
    }

    #[test]
    fn pools_of_two_peers_must_not_overlap() {
        let f = key_file("[a]\npsk = \"0123456789abcdef0123\"\n", 0o600);
        let text = |pools_b: &str| {
            format!(
                "key_file = \"{}\"\n\
                 [[tunnel]]\nname = \"t0\"\nlocal = \"192.0.2.1\"\nremote = \"192.0.2.2\"\n\
                 [[tunnel]]\nname = \"t1\"\nlocal = \"192.0.2.1\"\nremote = \"192.0.2.3\"\n\
                 [[peer]]\nname = \"a\"\nlocal = \"192.0.2.1\"\nremote = \"any\"\nremote_id = \"a.example\"\n\
                 psk = \"a\"\ntunnel = \"t0\"\npools = [\"10.200.0.0/24\", \"10.201.0.0/16\", \"fd00:200::/112\"]\n\
                 [[peer]]\nname = \"b\"\nlocal = \"192.0.2.1\"\nremote = \"any\"\nremote_id = \"b.example\"\n\
                 psk = \"a\"\ntunnel = \"t1\"\npools = [{pools_b}]\n",
                f.display()
            )
        };
        let c: IpsecConfig =
            toml::from_str(&text("\"10.202.0.0/24\", \"fd00:201::/120\"")).unwrap();
        assert_eq!(c.ike_peers().unwrap()[1].pools.len(), 2);
        let c: IpsecConfig = toml::from_str(&text("\"fd00:200::80/121\"")).unwrap();
        assert_eq!(
            c.ike_peers().unwrap_err(),
            [(
                "ipsec.peer[1].pools[0]".to_string(),
                "fd00:200::80/121 overlaps ipsec.peer[0].pools[2] fd00:200::/112".to_string()
            )]
        );
        let c: IpsecConfig = toml::from_str(&text("\"10.9.0.0/24\", \"10.201.7.0/24\"")).unwrap();
        let e = c.ike_peers().unwrap_err();
        assert_eq!(
            e,
            [(
                "ipsec.peer[1].pools[1]".to_string(),
                "10.201.7.0/24 overlaps ipsec.peer[0].pools[1] 10.201.0.0/16".to_string()
            )]
        );
        let c: IpsecConfig = toml::from_str(&text("\"10.9.0.1/24\"")).unwrap();
        let e = c.ike_peers().unwrap_err();
        assert_eq!(e[0].0, "ipsec.peer[1].pools[0]", "{e:?}");
        assert!(e[0].1.contains("host bits"), "{e:?}");
    }

    #[test]
    fn policy_sas_given_beside_the_config_are_checked_under_their_own_names() {
        // No SA in the config, three policy SAs given (as IKE's policy children give them):
        // the third's outbound SPI is the first's.
        let c = IpsecConfig::default();
        let sa = |dir, spi| {
            let mut x = ExtraSa::for_tunnel(
                "",
                dir,
                spi,
                "aes-128-gcm".into(),
                "none",
                true,
                &[7; 20],
                &[],
            );
            x.entry.local = Some("192.0.2.1".parse().unwrap());
            x.entry.remote = Some("192.0.2.2".parse().unwrap());
            x
        };
        let ok = [sa(SaDirection::In, 0x501), sa(SaDirection::Out, 0x601)];
        assert_eq!(c.plan_keyed(&[], &ok, &Ok(None)).unwrap().len(), 2);
        let mut bad = vec![sa(SaDirection::In, 0x501), sa(SaDirection::Out, 0x601)];
        bad.push(sa(SaDirection::Out, 0x601));
        bad[2].entry.remote = None;
        let Err(e) = c.plan_keyed(&[], &bad, &Ok(None)) else {
            panic!("planned")
        };
        assert_eq!(
            e,
            [
                (
                    "sa out 0x601.remote".to_string(),
                    "a policy SA in tunnel mode needs local and remote (its outer addresses); or mode = \"transport\"".to_string()
                ),
                (
                    "sa out 0x601.spi".to_string(),
                    "0x601 is already the SPI of outbound policy SA sa out 0x601: policies name their SA by SPI".to_string()
                ),
            ]
        );
    }

    #[test]
    fn a_policy_based_peer_names_a_port_and_turns_ipsec_on() {
        let f = key_file("[a]\npsk = \"0123456789abcdef0123\"\n", 0o600);
        let text = |iface: &str| {
            format!(
                "key_file = \"{}\"\n\
                 [[peer]]\nname = \"a\"\nlocal = \"192.0.2.1\"\nremote = \"192.0.2.2\"\n\
                 psk = \"a\"\ninterface = \"{iface}\"\nlocal_ts = [\"10.1.0.0/24\"]\n\
                 remote_ts = [\"10.2.0.0/24\"]\n",
                f.display()
            )
        };
        let c: IpsecConfig = toml::from_str(&text("wan")).unwrap();
        assert!(c.active());
        assert_eq!(c.ike_interfaces().collect::<Vec<_>>(), ["wan"]);
        assert!(
            c.validate(&["wan"]).is_empty(),
            "{:?}",
            c.validate(&["wan"])
        );
        let peers = c.ike_peers().unwrap();
        assert_eq!(peers[0].interface.as_deref(), Some("wan"));
        assert!(peers[0].tunnel.is_empty());
        let c: IpsecConfig = toml::from_str(&text("ipsec0")).unwrap();
        let e = c.validate(&["wan"]);
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].0, "ipsec.peer[0].interface");
        assert!(
            e[0].1.contains("no [[port]] or [[vlan]] named \"ipsec0\""),
            "{e:?}"
        );
    }

    #[test]
    fn unique_ids_is_read_and_an_unknown_value_named() {
        let f = key_file("[w]\npsk = \"0123456789abcdef0123\"\n", 0o600);
        let text = |line: &str| {
            format!(
                "key_file = \"{}\"\n\
                 [[tunnel]]\nname = \"t0\"\nlocal = \"192.0.2.1\"\nremote = \"192.0.2.2\"\n\
                 [[peer]]\nname = \"w\"\nlocal = \"192.0.2.1\"\nremote = \"any\"\n\
                 remote_id = \"warrior.example\"\npsk = \"w\"\ntunnel = \"t0\"\n{line}",
                f.display()
            )
        };
        let c: IpsecConfig = toml::from_str(&text("")).unwrap();
        assert_eq!(
            c.ike_peers().unwrap()[0].unique_ids,
            ike::config::UniqueIds::No
        );
        let c: IpsecConfig = toml::from_str(&text("unique_ids = \"never\"\n")).unwrap();
        assert_eq!(
            c.ike_peers().unwrap()[0].unique_ids,
            ike::config::UniqueIds::Never
        );
        let c: IpsecConfig = toml::from_str(&text("unique_ids = \"always\"\n")).unwrap();
        assert_eq!(
            c.ike_peers().unwrap_err(),
            [(
                "ipsec.peer[0].unique_ids".to_string(),
                "`always` is not one of no (the default), never, replace (or yes), keep"
                    .to_string()
            )]
        );
    }

    #[test]
    fn certificate_peers_need_no_key_file_and_their_errors_name_the_field() {
        let certs = concat!(env!("CARGO_MANIFEST_DIR"), "/../ike/tests/certs");
        let dir = std::env::temp_dir().join(format!("ipsec-cert-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("p384.key.pem");
        std::fs::copy(format!("{certs}/p384.key.pem"), &key).unwrap();
        let text = |key: &Path| {
            format!(
                "[[tunnel]]\nname = \"ipsec0\"\nlocal = \"192.0.2.1\"\nremote = \"192.0.2.2\"\n\
                 [[peer]]\nname = \"b\"\nlocal = \"192.0.2.1\"\nremote = \"192.0.2.2\"\n\
                 remote_id = \"dn:C=CH, O=ferrouter test, CN=p256.example\"\nauth = \"pubkey\"\n\
                 cert = \"{certs}/p384.der\"\nprivate_key = \"{}\"\nca = [\"{certs}/root.pem\"]\ntunnel = \"ipsec0\"\n",
                key.display()
            )
        };
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let c: IpsecConfig = toml::from_str(&text(&key)).unwrap();
        let e = c.ike_peers().unwrap_err();
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].0, "ipsec.peer[0].private_key");
        assert!(e[0].1.contains("chmod 600"), "{e:?}");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        let p = c.ike_peers().unwrap();
        assert_eq!(
            p[0].local_id.text(),
            "dn:C=CH, O=ferrouter test, CN=p384.example"
        );
        assert!(p[0].cert.as_ref().unwrap().cas.len() == 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
