//! The daemon's configuration file (TOML). Unknown fields are errors: a typo must never be
//! silently ignored on a router.
//!
//! ```toml
//! # /etc/ferrouter/ferrouter.toml
//! control_socket = "/run/ferrouter/ferrouter.sock"
//! workers = 1
//! worker_nice = -10     # -20..=19: workers' priority over the routing daemons (0: equal)
//!
//! [[port]]
//! name = "eth1"
//! backend = "auto"      # auto (AF_XDP, else AF_PACKET) | af_xdp | af_packet
//!
//! [[port]]
//! name = "eth2"
//!
//! [[port]]
//! name = "mif0"         # a TAP of this name is the port's face in Linux
//! backend = "memif"
//! memif_socket = "/run/ferrouter/memif.sock"
//! memif_role = "server" # server | client
//! memif_id = 0
//! mac = "02:fe:00:00:00:01"
//!
//! # A VLAN sub-interface: a routed interface of its own (addresses in [[interface]]),
//! # receiving the frames of eth1 tagged 100 and tagging what it sends; a TAP of its name
//! # is its face in Linux. A change needs a restart.
//! [[vlan]]
//! name = "eth1.100"
//! parent = "eth1"       # a [[port]] with backend auto or af_packet
//! id = 100              # 1..=4094
//! # inner_id = 200      # QinQ: the inner (C-)tag; the outer one is then 802.1ad
//! # proto = "802.1q"    # the outer tag's TPID: 802.1q (0x8100) or 802.1ad (0x88a8)
//!
//! # What Ferrouter owns in the kernel, applied live by `config apply` (crate::apply)
//! [[interface]]
//! name = "eth1"         # a [[port]] or an existing Linux interface
//! mtu = 1500            # 68..=65535 (>= 1280 with an IPv6 address); on a [[port]], at
//!                       # most what its backend carries (1778 af_xdp/auto, 1906 af_packet/memif)
//! addresses = ["192.0.2.1/24", "2001:db8:1::1/64"]
//! # enabled = false     # hold the link administratively down (default: brought up)
//!
//! [[route]]
//! prefix = "10.0.0.0/8" # host bits zero
//! via = ["192.0.2.2", "192.0.2.3"]   # ECMP; optional interface = "eth1"
//! metric = 20           # optional
//!
//! [[route]]
//! prefix = "2001:db8:dead::/48"
//! blackhole = true
//!
//! [[neighbor]]
//! interface = "eth1"
//! ip = "192.0.2.2"
//! mac = "02:00:00:00:00:02"
//!
//! # The native BGP speaker (bgp::config); a change needs a restart
//! [bgp]
//! asn = 65001           # not 0, not 23456 (AS_TRANS)
//! router_id = "192.0.2.1"
//! hold_time = 90        # 0 or 3..=65535
//! connect_retry = 5     # 1..=3600
//!
//! [[bgp.neighbor]]
//! address = "192.0.2.2" # unique, not one of our own [[interface]] addresses
//! remote_as = 65002
//! families = ["ipv4", "ipv6"]   # optional, no duplicates
//! ```
//!
//! [`Config::parse`] reports every problem, each as `FILE:LINE:COL: PATH: MESSAGE`;
//! [`check_system`] adds those that depend on the machine (unknown interfaces).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Port backend choice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// AF_XDP if the interface takes it, else AF_PACKET (the reason is logged).
    #[default]
    Auto,
    /// AF_PACKET with a TPACKET_V3 ring (works on every interface).
    AfPacket,
    /// AF_XDP with the XDP program (native or generic XDP, zero-copy or copy).
    AfXdp,
    /// A memif shared-memory interface (libmemif / DPDK `net_memif` peers). The daemon
    /// creates a TAP interface of the port's name as its kernel face.
    Memif,
}

/// memif role (DPDK 22.11 names: server = listens, client = connects and allocates the
/// shared memory).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemifRole {
    /// Listen on the socket; the peer connects.
    #[default]
    Server,
    /// Connect to the peer's socket (retried until it appears).
    Client,
}

/// One port.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PortConfig {
    /// Linux interface name in the daemon's network namespace.
    pub name: String,
    /// Backend.
    #[serde(default)]
    pub backend: Backend,
    /// memif only: the control socket path.
    #[serde(default)]
    pub memif_socket: Option<PathBuf>,
    /// memif only: role on that socket.
    #[serde(default)]
    pub memif_role: MemifRole,
    /// memif only: interface id on that socket (both peers must agree).
    #[serde(default)]
    pub memif_id: u32,
    /// memif only: the MAC of the port (and of its TAP), `aa:bb:cc:dd:ee:ff`; derived from
    /// the name if absent.
    #[serde(default)]
    pub mac: Option<String>,
}

/// The TPID of a VLAN sub-interface's outer tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub enum VlanProto {
    /// 0x8100, IEEE 802.1Q.
    #[serde(rename = "802.1q")]
    Dot1q,
    /// 0x88a8, IEEE 802.1ad (QinQ's service tag).
    #[serde(rename = "802.1ad")]
    Dot1ad,
}

/// Most VLAN sub-interfaces in a config: as many as the fast path counts.
pub const MAX_VLANS: usize = dataplane::counters::MAX_SUBIFS;

/// `[[vlan]]`: a VLAN sub-interface of a port.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct VlanConfig {
    /// Its name; the daemon creates a TAP of this name as its face in Linux.
    pub name: String,
    /// The `[[port]]` it rides on.
    pub parent: String,
    /// The (outer) VLAN id, 1..=4094.
    pub id: u16,
    /// QinQ: the inner (802.1Q C-tag) VLAN id, 1..=4094.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inner_id: Option<u16>,
    /// The outer tag's TPID; 802.1q for a single tag, 802.1ad for QinQ when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proto: Option<VlanProto>,
}

impl VlanConfig {
    /// The outer tag's TPID.
    pub fn tpid(&self) -> u16 {
        match self.proto {
            Some(VlanProto::Dot1q) => 0x8100,
            Some(VlanProto::Dot1ad) => 0x88a8,
            None if self.inner_id.is_some() => 0x88a8,
            None => 0x8100,
        }
    }
    /// Its tags, on the port whose index is `parent`.
    pub fn tags(&self, parent: u16) -> dataplane::interfaces::VlanTags {
        dataplane::interfaces::VlanTags {
            parent,
            tpid: self.tpid(),
            outer: self.id,
            inner: self.inner_id.unwrap_or(0),
        }
    }
    /// How the tags read: `802.1q 100`, `802.1ad 100 / 802.1q 200`.
    pub fn describe(&self) -> String {
        self.tags(0).describe()
    }
}

/// Parse `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// The whole file.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Unix socket of the control API (`ferrouter show`).
    #[serde(default = "default_socket")]
    pub control_socket: PathBuf,
    /// Worker threads (AF_PACKET ports are served by one worker).
    #[serde(default = "one")]
    pub workers: usize,
    /// The workers' nice value (-20..=19). Below 0, forwarding takes its core ahead of the
    /// routing daemons and everything else at the default 0, so their bursts of work do not
    /// overflow the ports' receive rings; 0 shares the core equally. A worker sleeps when
    /// its ports are idle, so the priority costs nothing then.
    #[serde(default = "default_worker_nice")]
    pub worker_nice: i32,
    /// Netlink receive buffer in bytes. Notifications have no flow control; when they
    /// overflow this buffer the daemon resyncs from a full dump.
    #[serde(default = "default_rcvbuf")]
    pub netlink_rcvbuf: usize,
    /// The API's TCP listener and its token (`[api]`; the unix socket is always on).
    #[serde(default)]
    pub api: ApiSettings,
    /// Where the history of applied configs lives (`running.toml`, `history/`).
    #[serde(default = "default_state_dir")]
    pub state_dir: PathBuf,
    /// Ports the fast path owns.
    #[serde(rename = "port", default)]
    pub ports: Vec<PortConfig>,
    /// VLAN sub-interfaces of the ports (a change needs a restart).
    #[serde(rename = "vlan", default, skip_serializing_if = "Vec::is_empty")]
    pub vlans: Vec<VlanConfig>,
    /// Addresses and MTUs Ferrouter sets on interfaces (through the kernel).
    #[serde(rename = "interface", default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceConfig>,
    /// Static routes in the kernel's main table.
    #[serde(rename = "route", default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteConfig>,
    /// Permanent neighbour (ARP/NDP) entries.
    #[serde(rename = "neighbor", default, skip_serializing_if = "Vec::is_empty")]
    pub neighbors: Vec<NeighborConfig>,
    /// The native BGP speaker (`[bgp]` with `[[bgp.neighbor]]`); off when absent. A change
    /// needs a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bgp: Option<bgp::config::BgpConfig>,
    /// Administrative distances of the route origins (`[distance]`: `kernel`, `static`,
    /// `bgp`); the
    /// lower wins between a prefix's routes of different origins. A change needs a restart.
    #[serde(default, skip_serializing_if = "is_default_distances")]
    pub distance: crate::sync::Distances,
    /// Packet filters on the fast path's interfaces (`[firewall]`: `[[firewall.set]]`,
    /// `[[firewall.filter]]` with `[[firewall.filter.rule]]`); applied live and atomically.
    /// See docs/firewall.md.
    #[serde(
        default,
        skip_serializing_if = "firewall::config::FirewallConfig::is_default"
    )]
    pub firewall: firewall::config::FirewallConfig,
    /// NAT44 (`[nat]`: `[[nat.source]]` source NAT and masquerade, `[[nat.destination]]`
    /// port forwards); applied live. See docs/firewall.md.
    #[serde(
        default,
        skip_serializing_if = "firewall::nat::config::NatConfig::is_default"
    )]
    pub nat: firewall::nat::config::NatConfig,
    /// IPsec ESP (`[ipsec]`: `[[ipsec.tunnel]]` route-based tunnel interfaces,
    /// `[[ipsec.sa]]` their manually keyed SAs, `key_file`); SAs are applied live, a new
    /// tunnel takes a restart. See docs/ipsec.md.
    #[serde(
        default,
        skip_serializing_if = "ipsec::config::IpsecConfig::is_default"
    )]
    pub ipsec: ipsec::config::IpsecConfig,
    /// QoS (`[qos]`: `[[qos.policer]]`, `[[qos.policy]]` with `[[qos.policy.class]]` and
    /// `[[qos.policy.rule]]`, `[[qos.interface]]`); applied live. See docs/qos.md.
    #[serde(default, skip_serializing_if = "qos::config::QosConfig::is_default")]
    pub qos: qos::config::QosConfig,
}

fn is_default_distances(d: &crate::sync::Distances) -> bool {
    *d == crate::sync::Distances::default()
}

/// Where the API listens, from the config file's `[api]` table, and how it treats its
/// connections (the limits and timeouts; the timeouts apply to the unix socket too).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ApiSettings {
    /// TCP address for remote clients and Prometheus, e.g. `"127.0.0.1:9180"` (off when
    /// absent). Requires `token_file`.
    #[serde(default)]
    pub listen: Option<std::net::SocketAddr>,
    /// File holding the bearer token TCP clients must send (one line; at least 16
    /// characters). It must be mode 0600 (or stricter): the daemon refuses to start when
    /// group or others may read or write it.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// TCP connections open at once, from all clients (1..=65536). More are closed as soon
    /// as they are accepted, and counted. Capped further at start to leave file
    /// descriptors for the rest of the daemon (the unix socket has its own budget).
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// TCP connections open at once from one client address (1..=`max_connections`).
    #[serde(default = "default_max_connections_per_address")]
    pub max_connections_per_address: usize,
    /// Seconds a client has to send a request's head (line and headers) once its first
    /// byte arrived (1..=3600); the connection is closed after that.
    #[serde(default = "default_header_read_timeout_s")]
    pub header_read_timeout_s: u64,
    /// Seconds a connection may stay without a request in progress, from its accept or the
    /// end of its last response, before it is closed (1..=3600); also how long a request's
    /// body may take to arrive (408 after that).
    #[serde(default = "default_idle_timeout_s")]
    pub idle_timeout_s: u64,
}

impl Default for ApiSettings {
    fn default() -> ApiSettings {
        ApiSettings {
            listen: None,
            token_file: None,
            max_connections: default_max_connections(),
            max_connections_per_address: default_max_connections_per_address(),
            header_read_timeout_s: default_header_read_timeout_s(),
            idle_timeout_s: default_idle_timeout_s(),
        }
    }
}

fn default_max_connections() -> usize {
    256
}

fn default_max_connections_per_address() -> usize {
    32
}

fn default_header_read_timeout_s() -> u64 {
    10
}

fn default_idle_timeout_s() -> u64 {
    60
}

impl ApiSettings {
    /// What is wrong with the settings, each with the path of the value (the token file
    /// itself is read at start).
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        match (&self.listen, &self.token_file) {
            (Some(a), None) => out.push((
                "api".into(),
                format!("api.listen = \"{a}\" needs api.token_file: TCP clients must authenticate"),
            )),
            (None, Some(_)) => out.push((
                "api".into(),
                "api.token_file is set but api.listen is not".into(),
            )),
            (_, Some(p)) if !p.is_absolute() => out.push((
                "api".into(),
                format!("api.token_file {} must be an absolute path", p.display()),
            )),
            _ => {}
        }
        if !(1..=65536).contains(&self.max_connections) {
            out.push((
                "api.max_connections".into(),
                format!(
                    "{} is out of range; expected 1..=65536",
                    self.max_connections
                ),
            ));
        }
        if self.max_connections_per_address == 0
            || self.max_connections_per_address > self.max_connections
        {
            out.push((
                "api.max_connections_per_address".into(),
                format!(
                    "{} is out of range; expected 1..=api.max_connections ({})",
                    self.max_connections_per_address, self.max_connections
                ),
            ));
        }
        for (name, v) in [
            ("header_read_timeout_s", self.header_read_timeout_s),
            ("idle_timeout_s", self.idle_timeout_s),
        ] {
            if !(1..=3600).contains(&v) {
                out.push((
                    format!("api.{name}"),
                    format!("{v} is out of range; expected 1..=3600 seconds"),
                ));
            }
        }
        out
    }

    /// Read the token (trimmed). Errors name the file and the rule broken: the file must
    /// be readable and writable by its owner only, and hold one line of at least 16
    /// printable characters.
    pub fn read_token(&self) -> anyhow::Result<Option<String>> {
        use anyhow::Context;
        use std::os::unix::fs::PermissionsExt;
        let Some(p) = &self.token_file else {
            return Ok(None);
        };
        let context = || format!("reading api.token_file {}", p.display());
        let mut f = std::fs::File::open(p).with_context(context)?;
        let mode = f.metadata().with_context(context)?.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            anyhow::bail!(
                "api.token_file {} has mode {mode:04o}: it must not be readable or writable by group or others (chmod 600 {})",
                p.display(),
                p.display()
            );
        }
        let mut t = String::new();
        std::io::Read::read_to_string(&mut f, &mut t).with_context(context)?;
        let t = t.trim().to_string();
        if t.len() < 16 || t.chars().any(|c| c.is_whitespace() || c.is_control()) {
            anyhow::bail!(
                "api.token_file {}: the token must be one line of at least 16 printable characters without spaces",
                p.display()
            );
        }
        Ok(Some(t))
    }
}

/// `[[interface]]`: what Ferrouter owns of one Linux interface.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct InterfaceConfig {
    /// A `[[port]]` name or an existing Linux interface.
    pub name: String,
    /// MTU (68..=65535; at least 1280 with an IPv6 address); left alone when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// Addresses with their prefix length, `192.0.2.1/24`, `2001:db8::1/64`.
    #[serde(default)]
    pub addresses: Vec<String>,
    /// Unicast reverse-path forwarding (RFC 3704) on what the interface receives, both
    /// families: `strict` or `loose`; off when absent. Only on a `[[port]]` or `[[vlan]]`;
    /// applied live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub urpf: Option<UrpfMode>,
    /// Administrative state: `true` (the default) brings the link up (`IFF_UP`) whenever
    /// the config is applied; `false` holds it down, as VyOS's and Junos's `disable`.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub enabled: bool,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

/// `urpf` of an `[[interface]]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UrpfMode {
    /// The route back to the source must leave by the receiving interface.
    Strict,
    /// Some route back to the source must exist (a default route counts).
    Loose,
}

impl UrpfMode {
    /// `strict` or `loose`.
    pub fn name(self) -> &'static str {
        match self {
            UrpfMode::Strict => "strict",
            UrpfMode::Loose => "loose",
        }
    }
}

/// `[[route]]`: a static route, via gateways (ECMP when several) or a blackhole.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Destination prefix, host bits zero: `10.0.0.0/8`, `2001:db8:100::/48`.
    pub prefix: String,
    /// Gateways, of the prefix's family.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub via: Vec<String>,
    /// Output interface of every gateway (optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// Drop matching packets silently instead.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub blackhole: bool,
    /// Metric; the kernel's default when absent (0 for IPv4, 1024 for IPv6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<u32>,
}

/// `[[neighbor]]`: a permanent ARP/NDP entry.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NeighborConfig {
    /// Interface the neighbour is on.
    pub interface: String,
    /// Its IPv4 or IPv6 address.
    pub ip: String,
    /// Its MAC, `aa:bb:cc:dd:ee:ff` (unicast).
    pub mac: String,
}

/// An address with a prefix length: `192.0.2.1/24`. As an interface address the host bits
/// are the address; as a route destination they must be zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Prefix {
    /// The address.
    pub addr: IpAddr,
    /// Prefix length (0..=32 or 0..=128).
    pub len: u8,
}

impl Prefix {
    /// The address with its host bits cleared.
    pub fn network(&self) -> Prefix {
        let addr = match self.addr {
            IpAddr::V4(a) => {
                let m = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
            }
            IpAddr::V6(a) => {
                let m = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
            }
        };
        Prefix {
            addr,
            len: self.len,
        }
    }

    /// Whether `ip` is inside this prefix.
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.addr.is_ipv4()
            && Prefix {
                addr: ip,
                len: self.len,
            }
            .network()
                == self.network()
    }

    /// Whether the two prefixes share any address.
    pub fn overlaps(&self, other: &Prefix) -> bool {
        let shorter = if self.len <= other.len { self } else { other };
        let longer = if self.len <= other.len { other } else { self };
        shorter.contains(longer.addr)
    }
}

impl std::str::FromStr for Prefix {
    type Err = String;

    /// `ADDR/LEN`; the message says what is wrong.
    fn from_str(s: &str) -> Result<Prefix, String> {
        let Some((a, l)) = s.split_once('/') else {
            return Err(format!(
                "{s:?} has no prefix length; expected ADDRESS/LENGTH like 192.0.2.1/24"
            ));
        };
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("{a:?} in {s:?} is not an IPv4 or IPv6 address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        match l.parse::<u8>() {
            Ok(len) if len <= max => Ok(Prefix { addr, len }),
            _ => Err(format!(
                "{s:?} has an invalid prefix length {l:?}; expected 0..={max}"
            )),
        }
    }
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl RouteConfig {
    /// The destination (valid after [`Config::parse`]).
    pub fn dst(&self) -> Option<Prefix> {
        self.prefix.parse().ok()
    }

    /// The gateways (valid after [`Config::parse`]).
    pub fn gateways(&self) -> Vec<IpAddr> {
        self.via.iter().filter_map(|v| v.parse().ok()).collect()
    }

    /// The metric the kernel files the route under: the configured one, else its default
    /// (0 for IPv4, 1024 for IPv6).
    pub fn effective_metric(&self) -> u32 {
        match (self.metric, self.dst()) {
            (Some(m), _) => m,
            (None, Some(p)) if p.addr.is_ipv6() => 1024,
            _ => 0,
        }
    }
}

fn default_rcvbuf() -> usize {
    32 << 20
}

fn default_socket() -> PathBuf {
    PathBuf::from("/run/ferrouter/ferrouter.sock")
}

fn default_state_dir() -> PathBuf {
    PathBuf::from("/var/lib/ferrouter")
}

fn one() -> usize {
    1
}

fn default_worker_nice() -> i32 {
    -10
}

/// One problem in a config file: where (line and column, 1-based; the dotted path of the
/// value) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// Line, from 1.
    pub line: usize,
    /// Column (in characters), from 1.
    pub column: usize,
    /// The value's path, `route[2].prefix`; empty for syntax errors.
    pub path: String,
    /// What is wrong and what is expected.
    pub message: String,
}

/// Every problem found in one file, displayed one per line as
/// `FILE:LINE:COL: PATH: MESSAGE`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
pub struct Problems {
    /// The file's label (its path).
    pub file: String,
    /// The problems, in file order.
    pub problems: Vec<Problem>,
}

impl std::fmt::Display for Problems {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}:{}:{}: ", self.file, p.line, p.column)?;
            if !p.path.is_empty() {
                write!(f, "{}: ", p.path)?;
            }
            write!(f, "{}", p.message)?;
        }
        Ok(())
    }
}

/// Why a config file was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// File could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// Path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// Syntax, schema or semantic errors, each with its location.
    #[error("{0}")]
    Invalid(#[from] Problems),
}

/// Locates dotted paths (`route[2].via[1]`) in the text of a config, for messages.
struct Locator<'a> {
    text: &'a str,
    doc: Option<toml_edit::ImDocument<&'a str>>,
}

impl<'a> Locator<'a> {
    fn new(text: &'a str) -> Locator<'a> {
        Locator {
            text,
            doc: toml_edit::ImDocument::parse(text).ok(),
        }
    }

    /// Line and column of the value at `path`, or of the nearest enclosing item found.
    fn locate(&self, path: &str) -> (usize, usize) {
        let span = self.span(path).unwrap_or(0..0);
        line_col(self.text, span.start)
    }

    fn span(&self, path: &str) -> Option<std::ops::Range<usize>> {
        let doc = self.doc.as_ref()?;
        let mut table: &dyn toml_edit::TableLike = doc.as_table();
        let mut best = None;
        for seg in path.split('.').filter(|s| !s.is_empty()) {
            let (key, index) = match seg.split_once('[') {
                Some((k, rest)) => (k, rest.trim_end_matches(']').parse::<usize>().ok()),
                None => (seg, None),
            };
            let Some((k, item)) = table.get_key_value(key) else {
                break;
            };
            best = item.span().or_else(|| k.span()).or(best);
            match index {
                Some(i) => {
                    if let Some(t) = item.as_array_of_tables().and_then(|a| a.get(i)) {
                        best = t.span().or(best);
                        table = t;
                    } else if let Some(v) = item.as_array().and_then(|a| a.get(i)) {
                        return v.span().or(best);
                    } else {
                        break;
                    }
                }
                None => match item.as_table_like() {
                    Some(t) => table = t,
                    None => break,
                },
            }
        }
        best
    }
}

/// 1-based line and column (in characters) of byte `offset`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or("");
    let line = before.matches('\n').count() + 1;
    let col = before
        .rsplit('\n')
        .next()
        .map(|l| l.chars().count())
        .unwrap_or(0)
        + 1;
    (line, col)
}

/// Collects problems by path, then locates them.
struct Report {
    issues: Vec<(String, String)>,
}

impl Report {
    fn add(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.issues.push((path.into(), message.into()));
    }

    fn finish(self, text: &str, file: &Path) -> Result<(), Problems> {
        if self.issues.is_empty() {
            return Ok(());
        }
        let loc = Locator::new(text);
        let mut problems: Vec<Problem> = self
            .issues
            .into_iter()
            .map(|(path, message)| {
                let (line, column) = loc.locate(&path);
                Problem {
                    line,
                    column,
                    path,
                    message,
                }
            })
            .collect();
        problems.sort_by_key(|p| (p.line, p.column));
        Err(Problems {
            file: file.display().to_string(),
            problems,
        })
    }
}

/// A backend as the config spells it.
fn backend_name(b: Backend) -> &'static str {
    match b {
        Backend::Auto => "auto",
        Backend::AfPacket => "af_packet",
        Backend::AfXdp => "af_xdp",
        Backend::Memif => "memif",
    }
}

/// Whether `name` can be a Linux interface name.
fn valid_ifname(name: &str) -> bool {
    !name.is_empty() && name.len() <= 15 && !name.contains(['/', ' ', '\0', ':'])
}

impl Config {
    /// Read, parse and validate a file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        Ok(Self::parse(&text, path)?)
    }

    /// Parse and validate text (`path` only labels messages): every problem is reported,
    /// each with its line, column and path. Nothing here looks at the system; see
    /// [`check_system`].
    pub fn parse(text: &str, path: &Path) -> Result<Config, Problems> {
        let c: Config = toml::from_str(text).map_err(|e| {
            let (line, column) = line_col(text, e.span().map(|s| s.start).unwrap_or(0));
            Problems {
                file: path.display().to_string(),
                problems: vec![Problem {
                    line,
                    column,
                    path: String::new(),
                    message: e.message().trim_end().to_string(),
                }],
            }
        })?;
        let mut r = Report { issues: Vec::new() };
        c.validate(&mut r);
        r.finish(text, path)?;
        Ok(c)
    }

    fn validate(&self, r: &mut Report) {
        let c = self;
        if c.ports.is_empty() {
            r.add(
                "",
                "no [[port]] configured: the fast path needs at least one interface",
            );
        }
        if c.ports.len() > 64 {
            r.add(
                "port",
                format!(
                    "{} ports configured; at most 64 are supported",
                    c.ports.len()
                ),
            );
        }
        for (i, p) in c.ports.iter().enumerate() {
            if !valid_ifname(&p.name) {
                r.add(format!("port[{i}].name"), format!("{:?} is not a valid Linux interface name (1-15 characters, no '/', ':' or spaces)", p.name));
            }
            let memif_fields = p.memif_socket.is_some()
                || p.memif_role != MemifRole::Server
                || p.memif_id != 0
                || p.mac.is_some();
            if p.backend != Backend::Memif && memif_fields {
                r.add(format!("port[{i}]"), format!("({}): memif_socket, memif_role, memif_id and mac apply only to backend = \"memif\"", p.name));
            }
            if p.backend == Backend::Memif {
                match &p.memif_socket {
                    None => r.add(
                        format!("port[{i}].backend"),
                        format!(
                            "({}): backend = \"memif\" needs memif_socket = \"/path/to/socket\"",
                            p.name
                        ),
                    ),
                    Some(s) if !s.is_absolute() => r.add(
                        format!("port[{i}].memif_socket"),
                        format!("({}): {} must be an absolute path", p.name, s.display()),
                    ),
                    Some(_) => {}
                }
                if let Some(m) = &p.mac {
                    if !parse_mac(m).is_some_and(unicast) {
                        r.add(
                            format!("port[{i}].mac"),
                            format!(
                                "({}): {m:?} is not a unicast MAC like 02:00:00:00:00:01",
                                p.name
                            ),
                        );
                    }
                }
                if c.ports[..i].iter().any(|q| {
                    q.backend == Backend::Memif
                        && q.memif_socket == p.memif_socket
                        && q.memif_id == p.memif_id
                }) {
                    r.add(
                        format!("port[{i}].memif_id"),
                        format!(
                            "({}): another port already uses memif_id {} on {}",
                            p.name,
                            p.memif_id,
                            p.memif_socket
                                .as_ref()
                                .map(|s| s.display().to_string())
                                .unwrap_or_default()
                        ),
                    );
                }
            }
            if c.ports[..i].iter().any(|q| q.name == p.name) {
                r.add(
                    format!("port[{i}].name"),
                    format!("interface {:?} is listed twice", p.name),
                );
            }
        }
        if !(4096..=1 << 30).contains(&c.netlink_rcvbuf) {
            r.add(
                "netlink_rcvbuf",
                format!(
                    "{} is out of range; expected 4096..=1073741824 bytes",
                    c.netlink_rcvbuf
                ),
            );
        }
        for (path, m) in c.api.problems() {
            r.add(path, m);
        }
        if !(-20..=19).contains(&c.worker_nice) {
            r.add(
                "worker_nice",
                format!("{} is out of range; expected -20..=19", c.worker_nice),
            );
        }
        if c.workers == 0 || c.workers > 64 {
            r.add(
                "workers",
                format!("{} is out of range; expected 1..=64", c.workers),
            );
        }
        if !c.state_dir.is_absolute() {
            r.add(
                "state_dir",
                format!("{} must be an absolute path", c.state_dir.display()),
            );
        }
        self.validate_vlans(r);
        self.validate_interfaces(r);
        self.validate_routes(r);
        self.validate_neighbors(r);
        self.validate_bgp(r);
        self.validate_firewall(r);
        self.validate_nat(r);
        self.validate_ipsec(r);
        self.validate_qos(r);
    }

    fn validate_qos(&self, r: &mut Report) {
        let names = self.fast_path_names();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let ports: Vec<&str> = self.ports.iter().map(|p| p.name.as_str()).collect();
        let vlans: Vec<&str> = self.vlans.iter().map(|v| v.name.as_str()).collect();
        for (path, m) in self.qos.validate(&refs, &ports, &vlans) {
            r.add(path, m);
        }
    }

    fn validate_vlans(&self, r: &mut Report) {
        if self.vlans.len() > MAX_VLANS {
            r.add(
                "vlan",
                format!(
                    "{} VLAN sub-interfaces configured; at most {MAX_VLANS} are supported",
                    self.vlans.len()
                ),
            );
        }
        for (i, v) in self.vlans.iter().enumerate() {
            if !valid_ifname(&v.name) {
                r.add(format!("vlan[{i}].name"), format!("{:?} is not a valid Linux interface name (1-15 characters, no '/', ':' or spaces)", v.name));
            }
            if self.ports.iter().any(|p| p.name == v.name)
                || self.vlans[..i].iter().any(|w| w.name == v.name)
            {
                r.add(
                    format!("vlan[{i}].name"),
                    format!(
                        "{:?} is already the name of a [[port]] or another [[vlan]]",
                        v.name
                    ),
                );
            }
            match self.ports.iter().find(|p| p.name == v.parent) {
                None => r.add(
                    format!("vlan[{i}].parent"),
                    format!(
                        "({}): {:?} is not a [[port]]; a VLAN sub-interface rides on a port",
                        v.name, v.parent
                    ),
                ),
                // AF_XDP cannot see a tag that the NIC stripped or that a veth peer left
                // in the packet's metadata (XDP reads only the frame's bytes), so such a
                // port would route tagged frames as untagged ones. AF_PACKET sees every tag.
                Some(p) if matches!(p.backend, Backend::AfXdp | Backend::Memif) => r.add(
                    format!("vlan[{i}].parent"),
                    format!("({}): port {:?} has backend {:?}; VLAN sub-interfaces need a parent with backend \"auto\" or \"af_packet\" (such a port runs AF_PACKET, which sees every tag: AF_XDP cannot see tags a NIC or a veth keeps in packet metadata)", v.name, v.parent, backend_name(p.backend)),
                ),
                Some(_) => {}
            }
            for (field, id) in [("id", Some(v.id)), ("inner_id", v.inner_id)] {
                if let Some(id) = id {
                    if !(1..=4094).contains(&id) {
                        r.add(
                            format!("vlan[{i}].{field}"),
                            format!(
                                "({}): VLAN id {id} is out of range; expected 1..=4094",
                                v.name
                            ),
                        );
                    }
                }
            }
            if let Some(j) = self.vlans[..i].iter().position(|w| {
                w.parent == v.parent
                    && w.id == v.id
                    && w.inner_id == v.inner_id
                    && w.tpid() == v.tpid()
            }) {
                r.add(
                    format!("vlan[{i}].id"),
                    format!(
                        "({}): {} on {} is already vlan[{j}] ({})",
                        v.name,
                        v.describe(),
                        v.parent,
                        self.vlans[j].name
                    ),
                );
            }
        }
    }

    fn validate_interfaces(&self, r: &mut Report) {
        // (path, interface, address) of every valid address so far.
        let mut seen: Vec<(String, &str, Prefix)> = Vec::new();
        for (i, f) in self.interfaces.iter().enumerate() {
            if !valid_ifname(&f.name) {
                r.add(
                    format!("interface[{i}].name"),
                    format!("{:?} is not a valid Linux interface name (1-15 characters, no '/', ':' or spaces)", f.name),
                );
            }
            if let Some(j) = self.interfaces[..i].iter().position(|g| g.name == f.name) {
                r.add(
                    format!("interface[{i}].name"),
                    format!(
                        "interface {:?} already has a section at interface[{j}]; merge the two",
                        f.name
                    ),
                );
            }
            if f.urpf.is_some()
                && !self.ports.iter().any(|p| p.name == f.name)
                && !self.vlans.iter().any(|v| v.name == f.name)
            {
                r.add(
                    format!("interface[{i}].urpf"),
                    format!("({}): uRPF runs in the fast path, so it needs an interface of it: a [[port]] or a [[vlan]] of that name", f.name),
                );
            }
            let mut has_v6 = false;
            for (k, a) in f.addresses.iter().enumerate() {
                let path = format!("interface[{i}].addresses[{k}]");
                let p: Prefix = match a.parse() {
                    Ok(p) => p,
                    Err(e) => {
                        r.add(path, e);
                        continue;
                    }
                };
                has_v6 |= p.addr.is_ipv6();
                if p.addr.is_unspecified() || p.addr.is_multicast() || p.addr.is_loopback() {
                    r.add(
                        &path,
                        format!(
                            "{a:?} is not a unicast host address; expected one like 192.0.2.1/24"
                        ),
                    );
                }
                for (other, name, q) in &seen {
                    if q.addr == p.addr {
                        r.add(
                            &path,
                            format!("address {} is already configured at {other} ({name}); an address can be configured once", p.addr),
                        );
                    } else if *name != f.name && q.overlaps(&p) {
                        r.add(
                            &path,
                            format!("{p} overlaps {q} on {name} ({other}); a subnet can be on one interface only"),
                        );
                    }
                }
                seen.push((path, &f.name, p));
            }
            if let Some(mtu) = f.mtu {
                let min = if has_v6 { 1280 } else { 68 };
                if !(min..=65535).contains(&mtu) {
                    let why = if has_v6 {
                        " (the interface has an IPv6 address, which needs at least 1280)"
                    } else {
                        ""
                    };
                    r.add(
                        format!("interface[{i}].mtu"),
                        format!("{mtu} is out of range; expected {min}..=65535{why}"),
                    );
                } else if let Some(v) = self.vlans.iter().find(|v| v.name == f.name) {
                    let tags = v.tags(0);
                    // As on the parent's largest MTU: an 802.1Q outer tag travels in the
                    // frame's 4-byte allowance, other tags take from the MTU. The parent's own
                    // MTU bounds it again at run time.
                    let max = tags.max_mtu(ports::MAX_MTU);
                    if mtu > max {
                        r.add(
                            format!("interface[{i}].mtu"),
                            format!("{mtu} is larger than the {max} bytes a VLAN sub-interface with {} carries (a parent's {} bytes of jumbo MTU, less {} of tags)", tags.describe(), ports::MAX_MTU, ports::MAX_MTU - max),
                        );
                    }
                } else if let Some(port) = self.ports.iter().find(|p| p.name == f.name) {
                    // A larger MTU would let the kernel accept packets the port then drops
                    // at receive, unseen by anyone: a silent blackhole.
                    let (max, which) = match port.backend {
                        Backend::AfPacket | Backend::Memif => {
                            (ports::BUFFER_MAX_MTU, "af_packet and memif ports carry")
                        }
                        Backend::AfXdp => (ports::AF_XDP_MAX_MTU, "af_xdp ports carry"),
                        Backend::Auto => (
                            ports::AF_XDP_MAX_MTU,
                            "a port with backend \"auto\" (AF_XDP where it can) carries",
                        ),
                    };
                    if mtu > max {
                        r.add(
                            format!("interface[{i}].mtu"),
                            format!("{mtu} is larger than the {max} bytes {which} (jumbo frames of up to {} bytes)", dataplane::MAX_FRAME),
                        );
                    }
                }
            }
        }
    }

    fn validate_routes(&self, r: &mut Report) {
        let mut seen: Vec<(usize, Prefix, u32)> = Vec::new();
        // The subnets of interfaces held down: the kernel installs no route through them.
        let held_down: Vec<(usize, &str, Prefix)> = self
            .interfaces
            .iter()
            .enumerate()
            .filter(|(_, f)| !f.enabled)
            .flat_map(|(j, f)| {
                f.addresses
                    .iter()
                    .filter_map(move |a| Some((j, f.name.as_str(), a.parse::<Prefix>().ok()?)))
            })
            .collect();
        for (i, rt) in self.routes.iter().enumerate() {
            if let Some(name) = &rt.interface {
                if let Some(j) = self
                    .interfaces
                    .iter()
                    .position(|f| &f.name == name && !f.enabled)
                {
                    r.add(
                        format!("route[{i}].interface"),
                        format!("{name} is held down (interface[{j}].enabled = false), and the kernel installs no route through a down interface; enable it or remove the route"),
                    );
                }
            }
            for (k, g) in rt.via.iter().enumerate() {
                let Ok(g) = g.parse::<IpAddr>() else { continue };
                if let Some((j, name, p)) = held_down.iter().find(|(_, _, p)| p.contains(g)) {
                    r.add(
                        format!("route[{i}].via[{k}]"),
                        format!("gateway {g} is on {} of {name}, which is held down (interface[{j}].enabled = false), and the kernel installs no route through a down interface; enable {name} or remove this gateway", p.network()),
                    );
                }
            }
            let path = format!("route[{i}].prefix");
            let dst: Option<Prefix> = match rt.prefix.parse::<Prefix>() {
                Ok(p) if p.network() != p => {
                    r.add(
                        &path,
                        format!(
                            "{:?} has host bits set; did you mean {}?",
                            rt.prefix,
                            p.network()
                        ),
                    );
                    None
                }
                Ok(p) => Some(p),
                Err(e) => {
                    r.add(&path, e);
                    None
                }
            };
            match (rt.via.is_empty(), rt.blackhole) {
                (true, false) => r.add(
                    format!("route[{i}]"),
                    "needs a next hop: via = [\"GATEWAY\", ...] or blackhole = true",
                ),
                (false, true) => r.add(
                    format!("route[{i}].blackhole"),
                    "a route is either via gateways or a blackhole, not both",
                ),
                _ => {}
            }
            if rt.blackhole && rt.interface.is_some() {
                r.add(
                    format!("route[{i}].interface"),
                    "a blackhole route has no interface",
                );
            }
            if let Some(name) = &rt.interface {
                if !valid_ifname(name) {
                    r.add(
                        format!("route[{i}].interface"),
                        format!("{name:?} is not a valid Linux interface name"),
                    );
                }
            }
            for (k, v) in rt.via.iter().enumerate() {
                let vpath = format!("route[{i}].via[{k}]");
                match v.parse::<IpAddr>() {
                    Err(_) => r.add(
                        vpath,
                        format!("{v:?} is not an IPv4 or IPv6 address; expected a gateway like 192.0.2.2"),
                    ),
                    Ok(g) => {
                        if let Some(d) = dst {
                            if g.is_ipv4() != d.addr.is_ipv4() {
                                let fam = if d.addr.is_ipv4() { "IPv4" } else { "IPv6" };
                                r.add(
                                    vpath,
                                    format!("gateway {g} is not {fam} like the route's prefix {d}"),
                                );
                            }
                        }
                        if g.is_unspecified() || g.is_multicast() {
                            r.add(
                                format!("route[{i}].via[{k}]"),
                                format!("{g} cannot be a gateway"),
                            );
                        }
                        if rt.via[..k].iter().any(|w| w.parse::<IpAddr>() == Ok(g)) {
                            r.add(
                                format!("route[{i}].via[{k}]"),
                                format!("gateway {g} is listed twice"),
                            );
                        }
                    }
                }
            }
            if let Some(d) = dst {
                let metric = rt.effective_metric();
                if let Some((j, _, _)) = seen.iter().find(|(_, p, m)| *p == d && *m == metric) {
                    r.add(
                        &path,
                        format!("route {d} (metric {metric}) is already configured at route[{j}]; give one of them another metric, or list all gateways in one via"),
                    );
                }
                seen.push((i, d, metric));
            }
        }
    }

    fn validate_neighbors(&self, r: &mut Report) {
        let mut seen: Vec<(usize, &str, IpAddr)> = Vec::new();
        for (i, n) in self.neighbors.iter().enumerate() {
            if !valid_ifname(&n.interface) {
                r.add(
                    format!("neighbor[{i}].interface"),
                    format!("{:?} is not a valid Linux interface name", n.interface),
                );
            }
            match n.ip.parse::<IpAddr>() {
                Err(_) => r.add(
                    format!("neighbor[{i}].ip"),
                    format!("{:?} is not an IPv4 or IPv6 address", n.ip),
                ),
                Ok(ip) if ip.is_unspecified() || ip.is_multicast() => r.add(
                    format!("neighbor[{i}].ip"),
                    format!("{ip} is not a unicast address"),
                ),
                Ok(ip) => {
                    if let Some((j, _, _)) =
                        seen.iter().find(|(_, f, a)| *f == n.interface && *a == ip)
                    {
                        r.add(
                            format!("neighbor[{i}].ip"),
                            format!(
                                "neighbour {ip} on {} is already configured at neighbor[{j}]",
                                n.interface
                            ),
                        );
                    }
                    seen.push((i, &n.interface, ip));
                }
            }
            match parse_mac(&n.mac) {
                Some(m) if unicast(m) => {}
                Some(_) => r.add(
                    format!("neighbor[{i}].mac"),
                    format!("{:?} is not a unicast MAC (multicast bit set, or all zeros); expected one like 02:00:00:00:00:02", n.mac),
                ),
                None => r.add(
                    format!("neighbor[{i}].mac"),
                    format!("{:?} is not a MAC address; expected six hex bytes like 02:00:00:00:00:02", n.mac),
                ),
            }
        }
    }

    fn validate_bgp(&self, r: &mut Report) {
        let Some(b) = &self.bgp else {
            return;
        };
        if let Some(m) = asn_problem(b.asn) {
            r.add("bgp.asn", m);
        }
        let id = b.router_id;
        if id.is_unspecified() || id.is_multicast() || id.is_broadcast() {
            r.add(
                "bgp.router_id",
                format!("{id} cannot be a BGP identifier; expected a unicast IPv4 address, usually one of the router's own"),
            );
        }
        if matches!(b.hold_time, 1 | 2) {
            r.add(
                "bgp.hold_time",
                format!(
                    "{} is out of range; expected 0 (no keepalives) or 3..=65535 seconds",
                    b.hold_time
                ),
            );
        }
        if !(1..=3600).contains(&b.connect_retry) {
            r.add(
                "bgp.connect_retry",
                format!(
                    "{} is out of range; expected 1..=3600 seconds",
                    b.connect_retry
                ),
            );
        }
        // Our own addresses, with the path that configures each.
        let own: Vec<(String, &str, IpAddr)> = self
            .interfaces
            .iter()
            .enumerate()
            .flat_map(|(i, f)| {
                f.addresses.iter().enumerate().filter_map(move |(k, a)| {
                    let p = a.parse::<Prefix>().ok()?;
                    Some((
                        format!("interface[{i}].addresses[{k}]"),
                        f.name.as_str(),
                        p.addr,
                    ))
                })
            })
            .collect();
        for (i, n) in b.neighbors.iter().enumerate() {
            let path = |field: &str| format!("bgp.neighbor[{i}].{field}");
            let a = n.address;
            if a.is_unspecified() || a.is_multicast() || a.is_loopback() {
                r.add(
                    path("address"),
                    format!("{a} cannot be a neighbour's address; expected the unicast address of another router"),
                );
            }
            if let Some(j) = b.neighbors[..i].iter().position(|m| m.address == a) {
                r.add(
                    path("address"),
                    format!("neighbour {a} is already configured at bgp.neighbor[{j}]; one session per neighbour"),
                );
            }
            if let Some((at, name, _)) = own.iter().find(|(_, _, o)| *o == a) {
                r.add(
                    path("address"),
                    format!("{a} is this router's own address ({at} on {name}); expected the address of another router"),
                );
            }
            if let Some(m) = asn_problem(n.remote_as) {
                r.add(path("remote_as"), m);
            }
            if n.port == 0 {
                r.add(
                    path("port"),
                    "0 is out of range; expected 1..=65535 (179 is BGP's)",
                );
            }
            if n.max_prefixes == Some(0) {
                r.add(
                    path("max_prefixes"),
                    "0 would end every session at its first route; expected at least 1, or leave it out for no limit",
                );
            }
            for (k, f) in n.families.iter().enumerate() {
                if n.families[..k].contains(f) {
                    let name = match f {
                        bgp::config::Family::Ipv4 => "ipv4",
                        bgp::config::Family::Ipv6 => "ipv6",
                    };
                    r.add(
                        format!("bgp.neighbor[{i}].families[{k}]"),
                        format!("family {name:?} is listed twice"),
                    );
                }
            }
            if let Some(d) = &n.description {
                let len = d.chars().count();
                if len > MAX_DESCRIPTION {
                    r.add(
                        path("description"),
                        format!("{len} characters is too long; expected at most {MAX_DESCRIPTION}"),
                    );
                }
            }
        }
    }

    fn validate_firewall(&self, r: &mut Report) {
        let names = self.fast_path_names();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let problems = self.firewall.validate(&refs);
        // A firewall without problems compiles (`RuleSet::compile` fails only on what
        // `validate` reports): nothing is compiled here, the daemon compiles it once.
        for (path, m) in problems {
            r.add(path, m);
        }
    }

    fn validate_nat(&self, r: &mut Report) {
        let names = self.fast_path_names();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        for (path, m) in self.nat.validate(&refs) {
            r.add(path, m);
        }
        if self.nat.has_rules() {
            // On AF_PACKET the kernel gets its own copy of every frame, and would answer the
            // replies of NAT's flows addressed to the router itself (a reset, a port
            // unreachable). Not those tagged for a VLAN sub-interface (it has no VLAN device
            // for them): a port that runs AF_PACKET for its sub-interfaces may stay when
            // every rule names a sub-interface (source rules' `outbound_interface`,
            // destination rules' `inbound_interface`), its outside.
            let vlan = |i: &Option<String>| {
                i.as_deref()
                    .is_some_and(|n| self.vlans.iter().any(|v| v.name == n))
            };
            let on_vlans = self.nat.source.iter().all(|s| vlan(&s.outbound_interface))
                && self
                    .nat
                    .destination
                    .iter()
                    .all(|d| vlan(&d.inbound_interface));
            self.refuse_af_packet(
                r,
                ("NAT", "the replies of NAT's flows itself"),
                ", or have every NAT rule's interface (`outbound_interface`, `inbound_interface`) a VLAN sub-interface",
                on_vlans,
            );
        }
    }

    fn validate_ipsec(&self, r: &mut Report) {
        let reserved: Vec<&str> = self
            .ports
            .iter()
            .map(|p| p.name.as_str())
            .chain(self.vlans.iter().map(|v| v.name.as_str()))
            .collect();
        for (path, m) in self.ipsec.validate(&reserved) {
            r.add(path, m);
        }
        if !self.ipsec.active() {
            return;
        }
        // On AF_PACKET the kernel gets its own copy of every frame: with no ESP of its own,
        // it would answer each ESP packet with a protocol unreachable. Not ESP tagged for a
        // VLAN sub-interface: the kernel has no VLAN device for its tags and drops the
        // frame. So a port that runs AF_PACKET because it carries sub-interfaces may stay
        // when all of IPsec's ends are on sub-interfaces (its ESP then arrives tagged).
        let vlan_parents = self.ipsec_ends_on_vlans();
        self.refuse_af_packet(
            r,
            ("IPsec", "ESP to the router itself"),
            ", or have every IPsec end (tunnels' and SAs' `local`, IKE peers' `local` and `interface`, SPDs) on VLAN sub-interfaces",
            vlan_parents,
        );
    }

    /// Whether every end of IPsec the config names is on a VLAN sub-interface: tunnels'
    /// and SAs' local addresses and IKE peers' among the addresses of `[[vlan]]`s'
    /// `[[interface]]` entries, SPDs (policies, defaults, IKE peers' `interface`) on
    /// `[[vlan]]`s, and no transport-mode SA without its SPD interface known.
    fn ipsec_ends_on_vlans(&self) -> bool {
        let vlan = |name: &str| self.vlans.iter().any(|v| v.name == name);
        let addrs: Vec<IpAddr> = self
            .interfaces
            .iter()
            .filter(|i| vlan(&i.name))
            .flat_map(|i| &i.addresses)
            .filter_map(|a| a.split('/').next()?.parse().ok())
            .collect();
        let on_vlan = |a: &IpAddr| addrs.contains(a);
        let ip = &self.ipsec;
        !self.vlans.is_empty()
            && ip.tunnels.iter().all(|t| on_vlan(&t.local))
            && ip.sas.iter().all(|s| s.local.as_ref().is_none_or(on_vlan))
            && ip.policies.iter().all(|p| vlan(&p.interface))
            && ip.spds.iter().all(|p| vlan(&p.interface))
            && ip
                .peers
                .iter()
                .all(|p| on_vlan(&p.local) && p.interface.as_deref().is_none_or(vlan))
    }

    /// `feature` cannot work on a port that runs AF_PACKET (so does one carrying VLAN
    /// sub-interfaces under `auto`): the kernel gets a copy of every frame and would answer
    /// `what` itself. `hint` follows the advice; ports that carry VLAN sub-interfaces are
    /// let be if `vlan_parents` (the feature's frames come tagged there, and the kernel,
    /// with no VLAN device for the tags, drops its copy).
    fn refuse_af_packet(
        &self,
        r: &mut Report,
        (feature, what): (&str, &str),
        hint: &str,
        vlan_parents: bool,
    ) {
        for (i, p) in self.ports.iter().enumerate() {
            let vlan_parent = self.vlans.iter().any(|v| v.parent == p.name);
            if vlan_parent && vlan_parents {
                continue;
            }
            if p.backend == Backend::AfPacket || (p.backend == Backend::Auto && vlan_parent) {
                r.add(
                    format!("port[{i}].backend"),
                    format!(
                        "port {} runs AF_PACKET{}, where {feature} cannot work: the kernel gets a copy of every frame and would answer {what}; use af_xdp (or auto without VLAN sub-interfaces) or memif{hint}",
                        p.name,
                        if vlan_parent { " (it carries VLAN sub-interfaces)" } else { "" }
                    ),
                );
            }
        }
    }

    /// The fast path's interfaces by index, as the workers number them: the ports, then
    /// the VLAN sub-interfaces, then the IPsec tunnel interfaces.
    pub fn fast_path_names(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| p.name.clone())
            .chain(self.vlans.iter().map(|v| v.name.clone()))
            .chain(self.ipsec.tunnels.iter().map(|t| t.name.clone()))
            .collect()
    }

    /// What is allowed but probably not meant: firewall rules that can never match
    /// (shadowed by an earlier rule), with their locations in `text`.
    pub fn warnings(&self, text: &str) -> Vec<Problem> {
        let loc = Locator::new(text);
        let mut out: Vec<Problem> = firewall::ruleset::shadowed(&self.firewall, SHADOW_BUDGET)
            .into_iter()
            .map(|(f, r, by)| {
                let path = format!("firewall.filter[{f}].rule[{r}]");
                let (line, column) = loc.locate(&path);
                Problem {
                    line,
                    column,
                    message: format!(
                        "rule {} of filter {:?} can never match: rule {} (firewall.filter[{f}].rule[{by}]) matches everything it does first",
                        r + 1,
                        self.firewall.filters[f].name,
                        by + 1
                    ),
                    path,
                }
            })
            .collect();
        out.sort_by_key(|p| (p.line, p.column));
        out
    }

    /// Every interface name the config refers to in `[[interface]]`, `[[route]]` and
    /// `[[neighbor]]`, with the path that names it.
    fn interface_refs(&self) -> Vec<(String, &str)> {
        let mut v = Vec::new();
        for (i, f) in self.interfaces.iter().enumerate() {
            v.push((format!("interface[{i}].name"), f.name.as_str()));
        }
        for (i, rt) in self.routes.iter().enumerate() {
            if let Some(n) = &rt.interface {
                v.push((format!("route[{i}].interface"), n.as_str()));
            }
        }
        for (i, n) in self.neighbors.iter().enumerate() {
            v.push((format!("neighbor[{i}].interface"), n.interface.as_str()));
        }
        v
    }
}

/// Box comparisons the shadowed-rule check may spend (about a second's work); past it the
/// check reports what it found so far.
const SHADOW_BUDGET: u64 = 200_000_000;

/// Longest `bgp.neighbor[].description`, in characters.
const MAX_DESCRIPTION: usize = 200;

/// What is wrong with an AS number, if anything: 0 is reserved (RFC 7607) and 23456 is
/// AS_TRANS, which stands in for a 4-octet AS in 2-octet fields (RFC 6793).
fn asn_problem(asn: u32) -> Option<String> {
    match asn {
        0 => Some("AS 0 is reserved (RFC 7607); expected 1..=4294967295".into()),
        23456 => Some(
            "AS 23456 is AS_TRANS (RFC 6793), not a real AS; expected the 4-octet AS itself".into(),
        ),
        _ => None,
    }
}

/// Whether a MAC is a unicast station address (not multicast/broadcast, not all zeros).
fn unicast(m: [u8; 6]) -> bool {
    m[0] & 1 == 0 && m != [0; 6]
}

/// Checks against the running system (the calling thread's network namespace): every
/// interface named in `[[interface]]`, `[[route]]` or `[[neighbor]]` must be a `[[port]]`
/// or exist. `text` and `file` locate the problems.
pub fn check_system(cfg: &Config, text: &str, file: &Path) -> Result<(), Problems> {
    let mut r = Report { issues: Vec::new() };
    for (path, name) in cfg.interface_refs() {
        if cfg.ports.iter().any(|p| p.name == name)
            || cfg.vlans.iter().any(|v| v.name == name)
            || if_exists(name)
        {
            continue;
        }
        r.add(
            path,
            format!("unknown interface {name:?}: it is neither a [[port]] nor an interface in this network namespace"),
        );
    }
    r.finish(text, file)
}

/// Whether an interface of this name exists in the calling thread's network namespace.
pub fn if_exists(name: &str) -> bool {
    let Ok(c) = std::ffi::CString::new(name) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    unsafe { libc::if_nametoindex(c.as_ptr()) != 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(t: &str) -> Result<Config, Problems> {
        Config::parse(t, Path::new("test.toml"))
    }

    #[test]
    fn minimal_and_full() {
        let c = parse("[[port]]\nname = \"eth1\"\n").unwrap();
        assert_eq!(c.ports[0].backend, Backend::Auto);
        assert_eq!(c.workers, 1);
        assert_eq!(c.worker_nice, -10);
        let c = parse("worker_nice = 0\n[[port]]\nname = \"eth1\"\n").unwrap();
        assert_eq!(c.worker_nice, 0);
        for bad in ["-21", "20"] {
            let e = parse(&format!("worker_nice = {bad}\n[[port]]\nname = \"e\"\n"))
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("test.toml:1:")
                    && e.contains("worker_nice")
                    && e.contains("-20..=19"),
                "{e}"
            );
        }
        let c = parse("workers = 1\ncontrol_socket = \"/tmp/x.sock\"\n[[port]]\nname = \"a\"\nbackend = \"af_packet\"\n[[port]]\nname = \"b\"\n").unwrap();
        assert_eq!(c.ports.len(), 2);
        assert_eq!(c.ports[0].backend, Backend::AfPacket);
    }

    #[test]
    fn rejections_say_what_and_where() {
        let e = parse("[[port]]\nname = \"eth1\"\nspeed = 10\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("speed") && e.starts_with("test.toml:3:1: "),
            "{e}"
        );
        let e = parse("[[port]]\nname = \"eth1\"\n[[port]]\nname = \"eth1\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("listed twice"), "{e}");
        let e = parse("workers = 0\n[[port]]\nname = \"e\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("workers"), "{e}");
        let e = parse("").unwrap_err().to_string();
        assert!(e.contains("no [[port]]"), "{e}");
        let e = parse("[[port]]\nname = \"a/b\"\n").unwrap_err().to_string();
        assert!(e.contains("not a valid Linux interface name"), "{e}");
        let e = parse("[[port]]\nname = \"e\"\nbackend = \"dpdk\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("dpdk"), "{e}");
    }

    #[test]
    fn memif_ports() {
        let c = parse("[[port]]\nname = \"mif0\"\nbackend = \"memif\"\nmemif_socket = \"/run/m.sock\"\nmemif_role = \"client\"\nmemif_id = 3\nmac = \"02:00:00:00:00:01\"\n").unwrap();
        assert_eq!(c.ports[0].backend, Backend::Memif);
        assert_eq!(c.ports[0].memif_role, MemifRole::Client);
        assert_eq!(c.ports[0].memif_id, 3);
        let cases = [
            ("backend = \"memif\"\n", "needs memif_socket"),
            (
                "backend = \"memif\"\nmemif_socket = \"rel.sock\"\n",
                "absolute",
            ),
            ("memif_socket = \"/run/m.sock\"\n", "apply only to backend"),
            (
                "backend = \"memif\"\nmemif_socket = \"/m\"\nmac = \"01:00:00:00:00:01\"\n",
                "not a unicast MAC",
            ),
            (
                "backend = \"memif\"\nmemif_socket = \"/m\"\nmac = \"02:00:00:00:00\"\n",
                "not a unicast MAC",
            ),
            (
                "backend = \"memif\"\nmemif_socket = \"/m\"\nmemif_role = \"master\"\n",
                "master",
            ),
        ];
        for (body, want) in cases {
            let e = parse(&format!("[[port]]\nname = \"mif0\"\n{body}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{body}: {e}");
        }
        let two = "[[port]]\nname = \"a\"\nbackend = \"memif\"\nmemif_socket = \"/m\"\n[[port]]\nname = \"b\"\nbackend = \"memif\"\nmemif_socket = \"/m\"\n";
        assert!(parse(two)
            .unwrap_err()
            .to_string()
            .contains("already uses memif_id 0"));
        assert_eq!(
            parse_mac("02:fe:0a:0B:c:ff"),
            Some([2, 0xfe, 10, 11, 12, 255])
        );
        assert_eq!(parse_mac("02:fe:0a:0b:0c:ff:00"), None);
        assert_eq!(parse_mac("02:fe:0a:0b:0c:fff"), None);
    }

    #[test]
    fn firewall_problems_have_their_lines_and_shadowed_rules_are_warnings() {
        let text = format!(
            "{PORT}[[firewall.filter]]\nname = \"in\"\nhook = \"ingress\"\ninterfaces = [\"eth1\", \"eth9\"]\n\
             [[firewall.filter.rule]]\naction = \"drop\"\nsource = [\"@nope\"]\n"
        );
        let e = parse(&text).unwrap_err().to_string();
        assert!(
            e.contains("test.toml:6:23: firewall.filter[0].interfaces[1]: \"eth9\" is not a [[port]] or [[vlan]]"),
            "{e}"
        );
        assert!(
            e.contains(
                "test.toml:9:11: firewall.filter[0].rule[0].source[0]: unknown set \"nope\""
            ),
            "{e}"
        );
        let text = format!(
            "{PORT}[[firewall.filter]]\nname = \"in\"\nhook = \"ingress\"\ninterfaces = [\"eth1\"]\n\
             [[firewall.filter.rule]]\naction = \"drop\"\nprotocol = \"udp\"\n\
             [[firewall.filter.rule]]\naction = \"accept\"\nprotocol = \"udp\"\ndestination_port = 53\n"
        );
        let c = parse(&text).unwrap();
        let w = c.warnings(&text);
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(
            (w[0].line, w[0].path.as_str()),
            (10, "firewall.filter[0].rule[1]")
        );
        assert!(
            w[0].message
                .contains("rule 2 of filter \"in\" can never match: rule 1"),
            "{w:?}"
        );
    }

    #[test]
    fn stateful_rules_need_conntrack_and_one_worker() {
        let rule =
            "[[firewall.filter]]\nname = \"in\"\nhook = \"ingress\"\ninterfaces = [\"eth1\"]\n\
                    [[firewall.filter.rule]]\naction = \"accept\"\nstate = [\"established\"]\n";
        let e = problems(rule);
        assert!(
            e.contains("state matches need connection tracking: set conntrack = true"),
            "{e}"
        );
        let on = format!("[firewall]\nconntrack = true\n{rule}");
        assert!(parse(&format!("{PORT}{on}")).is_ok());
        // Several workers: flows are steered to the worker that tracks them.
        assert!(parse(&format!("workers = 2\n{PORT}{on}")).is_ok());
        let e = problems("[firewall]\nconntrack = true\nconntrack_max = 10\n");
        assert!(
            e.contains("firewall.conntrack_max: 10 is out of range"),
            "{e}"
        );
    }

    #[test]
    fn nat_problems_have_their_lines() {
        let e = parse(&format!(
            "{PORT}[[nat.source]]\noutbound_interface = \"eth9\"\ntranslation = \"masq\"\n\
             [[nat.destination]]\nprotocol = \"tcp\"\ntranslation_address = \"10.0.0.1\"\ntranslation_port = 0\n"
        ))
        .unwrap_err()
        .to_string();
        for want in [
            ":4:22: nat.source[0].outbound_interface: \"eth9\" is not a [[port]] or [[vlan]]",
            ":5:15: nat.source[0].translation: \"masq\" is not a translation",
            ":9:20: nat.destination[0].translation_port: 0 is not a port",
        ] {
            assert!(e.contains(want), "{want} in {e}");
        }
        let ok = "[[nat.source]]\ntranslation = \"masquerade\"\n";
        assert!(parse(&format!("{PORT}{ok}")).is_ok());
        assert!(parse(&format!("workers = 2\n{PORT}{ok}")).is_ok());
        let e = parse(&format!("{PORT}backend = \"af_packet\"\n{ok}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("port[0].backend: port eth1 runs AF_PACKET, where NAT cannot work"),
            "{e}"
        );
        // A port that runs AF_PACKET for its VLAN sub-interfaces: refused while a rule may
        // take any interface, taken when each names a sub-interface (its outside).
        let vlan = "[[vlan]]\nname = \"eth1.7\"\nparent = \"eth1\"\nid = 7\n";
        let e = parse(&format!("{PORT}{vlan}{ok}")).unwrap_err().to_string();
        assert!(
            e.contains("where NAT cannot work") && e.contains("a VLAN sub-interface"),
            "{e}"
        );
        let out = "[[nat.source]]\noutbound_interface = \"eth1.7\"\ntranslation = \"masquerade\"\n\
                   [[nat.destination]]\ninbound_interface = \"eth1.7\"\ndestination = [\"192.0.2.1\"]\n\
                   protocol = \"tcp\"\ndestination_port = 80\ntranslation_address = \"10.0.0.2\"\n";
        parse(&format!("{PORT}{vlan}{out}")).unwrap();
    }

    const PORT: &str = "[[port]]\nname = \"eth1\"\n";

    /// The one problem `body` (after a port) has, as displayed.
    fn problems(body: &str) -> String {
        parse(&format!("{PORT}{body}")).unwrap_err().to_string()
    }

    #[test]
    fn ipsec_problems_have_their_lines() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        std::fs::write(
            &keys,
            "[k]\nencryption = \"000102030405060708090a0b0c0d0e0f10111213\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o600)).unwrap();
        let ipsec = format!(
            "[ipsec]\nkey_file = \"{}\"\n[[ipsec.tunnel]]\nname = \"ipsec0\"\nlocal = \"192.0.2.1\"\nremote = \"192.0.2.2\"\n\
             [[ipsec.sa]]\ntunnel = \"ipsec0\"\ndirection = \"out\"\nspi = 0x1001\nencryption = \"aes-256-gcm\"\nkey = \"k\"\n",
            keys.display()
        );
        let e = problems(&ipsec);
        assert!(
            e.contains("test.toml:14:7: ipsec.sa[0].key: key \"k\": encryption key is 20 bytes; aes-256-gcm needs 36"),
            "{e}"
        );
        let good = ipsec.replace("aes-256-gcm", "aes-128-gcm");
        assert!(parse(&format!("{PORT}{good}")).is_ok());
        // Several workers: the SAs live on one, the others hand it their packets.
        assert!(parse(&format!("workers = 2\n{PORT}{good}")).is_ok());
        let e = parse(&format!(
            "[[port]]\nname = \"eth1\"\nbackend = \"af_packet\"\n{good}"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("port[0].backend: port eth1 runs AF_PACKET, where IPsec cannot work"),
            "{e}"
        );
        // A port that runs AF_PACKET for its VLAN sub-interfaces: refused while the tunnel
        // ends on the port itself (its ESP would come untagged, and the kernel answer it)...
        let vlan = "[[vlan]]\nname = \"eth1.100\"\nparent = \"eth1\"\nid = 100\n";
        let e = parse(&format!("{PORT}{vlan}{good}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("port eth1 runs AF_PACKET (it carries VLAN sub-interfaces), where IPsec cannot work")
                && e.contains("or have every IPsec end"),
            "{e}"
        );
        // ... and taken when it ends on a sub-interface (its ESP comes tagged).
        let on_vlan = "[[interface]]\nname = \"eth1.100\"\naddresses = [\"192.0.2.1/24\"]\n";
        parse(&format!("{PORT}{vlan}{on_vlan}{good}")).unwrap();
        std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o604)).unwrap();
        let e = problems(&good);
        assert!(
            e.contains("ipsec.key_file: key file") && e.contains("has mode 0604"),
            "{e}"
        );
    }

    #[test]
    fn ipsec_policy_problems_have_their_lines() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        std::fs::write(
            &keys,
            "[k]\nencryption = \"000102030405060708090a0b0c0d0e0f10111213\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o600)).unwrap();
        let ipsec = format!(
            "[ipsec]\nkey_file = \"{}\"\n\
             [[ipsec.sa]]\ndirection = \"out\"\nspi = 0x1001\nencryption = \"aes-128-gcm\"\nkey = \"k\"\nlocal = \"192.0.2.1\"\nremote = \"192.0.2.2\"\n\
             [[ipsec.policy]]\ninterface = \"eth9\"\ndirection = \"out\"\ndst = \"10.2.0.0/24\"\naction = \"protect\"\nsa = 0x1001\n",
            keys.display()
        );
        let e = problems(&ipsec);
        assert!(
            e.contains("ipsec.policy[0].interface: no [[port]] or [[vlan]] named \"eth9\""),
            "{e}"
        );
        let good = format!("{PORT}{}", ipsec.replace("eth9", "eth1"));
        let c = parse(&good).unwrap();
        assert!(c.ipsec.active(), "policies alone make IPsec active");
    }

    #[test]
    fn full_schema() {
        let c = parse(&format!(
            "state_dir = \"/tmp/fr\"\n{PORT}\
             [[interface]]\nname = \"eth1\"\nmtu = 1700\naddresses = [\"192.0.2.1/24\", \"2001:db8:1::1/64\"]\n\
             [[route]]\nprefix = \"10.0.0.0/8\"\nvia = [\"192.0.2.2\", \"192.0.2.3\"]\nmetric = 20\n\
             [[route]]\nprefix = \"2001:db8:100::/48\"\nblackhole = true\n\
             [[neighbor]]\ninterface = \"eth1\"\nip = \"192.0.2.2\"\nmac = \"02:00:00:00:00:02\"\n"
        ))
        .unwrap();
        assert_eq!(c.interfaces[0].mtu, Some(1700));
        assert_eq!(c.routes[0].gateways().len(), 2);
        assert_eq!(c.routes[0].effective_metric(), 20);
        assert_eq!(c.routes[1].effective_metric(), 1024);
        assert_eq!(c.neighbors[0].mac, "02:00:00:00:00:02");
        // What is serialized parses back to the same thing.
        let again = parse(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(again, c);
    }

    #[test]
    fn port_mtus_are_bounded_by_what_the_backend_carries() {
        let ok = |t: &str| parse(t).map(|_| ()).map_err(|e| e.to_string());
        // Not a port (a loopback or dummy interface): only the Linux range applies.
        assert_eq!(
            ok(&format!(
                "{PORT}[[interface]]\nname = \"lo9\"\nmtu = 9000\n"
            )),
            Ok(())
        );
        // Jumbo frames on every backend: 9000 accepted, above refused with the limit named.
        for (backend, which) in [
            ("af_packet", "af_packet and memif ports carry"),
            ("af_xdp", "af_xdp ports carry"),
        ] {
            let port = format!("[[port]]\nname = \"eth1\"\nbackend = \"{backend}\"\n");
            assert_eq!(
                ok(&format!(
                    "{port}[[interface]]\nname = \"eth1\"\nmtu = 9000\n"
                )),
                Ok(())
            );
            let e = ok(&format!(
                "{port}[[interface]]\nname = \"eth1\"\nmtu = 9001\n"
            ))
            .unwrap_err();
            assert!(
                e.contains(&format!("9001 is larger than the 9000 bytes {which}")),
                "{e}"
            );
        }
    }

    #[test]
    fn each_bad_config_is_located_and_explained() {
        let cases: &[(&str, &str)] = &[
            // Unknown field, from serde, at its key.
            (
                "[[route]]\nprefix = \"10.0.0.0/8\"\nblackhole = true\ngateway = \"1.2.3.4\"\n",
                "test.toml:6:1: unknown field `gateway`",
            ),
            // Duplicate key, from the TOML parser.
            (
                "[[interface]]\nname = \"eth1\"\nmtu = 1500\nmtu = 9000\n",
                "test.toml:6:1: duplicate key `mtu`",
            ),
            (
                "[[route]]\nprefix = \"10.0.0.0/33\"\nblackhole = true\n",
                "test.toml:4:10: route[0].prefix: \"10.0.0.0/33\" has an invalid prefix length \"33\"; expected 0..=32",
            ),
            (
                "[[route]]\nprefix = \"10.0.0.1/8\"\nblackhole = true\n",
                "test.toml:4:10: route[0].prefix: \"10.0.0.1/8\" has host bits set; did you mean 10.0.0.0/8?",
            ),
            (
                "[[interface]]\nname = \"eth1\"\naddresses = [\"192.0.2.300/24\"]\n",
                "test.toml:5:14: interface[0].addresses[0]: \"192.0.2.300\" in \"192.0.2.300/24\" is not an IPv4 or IPv6 address",
            ),
            (
                "[[interface]]\nname = \"eth1\"\naddresses = [\"192.0.2.1/24\"]\n[[interface]]\nname = \"eth2\"\naddresses = [\"192.0.2.7/25\"]\n",
                "test.toml:8:14: interface[1].addresses[0]: 192.0.2.7/25 overlaps 192.0.2.1/24 on eth1 (interface[0].addresses[0]); a subnet can be on one interface only",
            ),
            (
                "[[interface]]\nname = \"eth1\"\naddresses = [\"192.0.2.1/24\", \"192.0.2.1/24\"]\n",
                "test.toml:5:30: interface[0].addresses[1]: address 192.0.2.1 is already configured at interface[0].addresses[0] (eth1); an address can be configured once",
            ),
            (
                "[[interface]]\nname = \"eth1\"\nmtu = 70000\n",
                "test.toml:5:7: interface[0].mtu: 70000 is out of range; expected 68..=65535",
            ),
            // More than the port's buffers carry: refused rather than a silent blackhole.
            (
                "[[interface]]\nname = \"eth1\"\nmtu = 9001\n",
                "test.toml:5:7: interface[0].mtu: 9001 is larger than the 9000 bytes a port with backend \"auto\" (AF_XDP where it can) carries (jumbo frames of up to 9216 bytes)",
            ),
            (
                "[[interface]]\nname = \"eth1\"\nmtu = 1000\naddresses = [\"2001:db8::1/64\"]\n",
                "test.toml:5:7: interface[0].mtu: 1000 is out of range; expected 1280..=65535 (the interface has an IPv6 address, which needs at least 1280)",
            ),
            (
                "[[route]]\nprefix = \"10.0.0.0/8\"\nblackhole = true\n[[route]]\nprefix = \"10.0.0.0/8\"\nvia = [\"192.0.2.2\"]\n",
                "test.toml:7:10: route[1].prefix: route 10.0.0.0/8 (metric 0) is already configured at route[0]",
            ),
            (
                "[[interface]]\nname = \"eth1\"\n[[interface]]\nname = \"eth1\"\n",
                "test.toml:6:8: interface[1].name: interface \"eth1\" already has a section at interface[0]; merge the two",
            ),
            (
                "[[neighbor]]\ninterface = \"eth1\"\nip = \"192.0.2.2\"\nmac = \"02:00:00:00:00:02\"\n[[neighbor]]\ninterface = \"eth1\"\nip = \"192.0.2.2\"\nmac = \"02:00:00:00:00:03\"\n",
                "test.toml:9:6: neighbor[1].ip: neighbour 192.0.2.2 on eth1 is already configured at neighbor[0]",
            ),
            (
                "[[route]]\nprefix = \"10.0.0.0/8\"\nvia = [\"2001:db8::1\"]\n",
                "test.toml:5:8: route[0].via[0]: gateway 2001:db8::1 is not IPv4 like the route's prefix 10.0.0.0/8",
            ),
            (
                "[[neighbor]]\ninterface = \"eth1\"\nip = \"192.0.2.2\"\nmac = \"01:00:5e:00:00:01\"\n",
                "test.toml:6:7: neighbor[0].mac: \"01:00:5e:00:00:01\" is not a unicast MAC",
            ),
            (
                "[[route]]\nprefix = \"10.0.0.0/8\"\n",
                "test.toml:3:1: route[0]: needs a next hop",
            ),
        ];
        for (body, want) in cases {
            let got = problems(body);
            assert!(got.starts_with(want), "{body}\n got: {got}\nwant: {want}");
            assert_eq!(
                got.lines().count(),
                1,
                "{body}: one problem expected: {got}"
            );
        }
    }

    const BGP: &str = "[bgp]\nasn = 65001\nrouter_id = \"198.51.100.1\"\n";

    #[test]
    fn bgp_section() {
        use bgp::config::{BgpConfig, Family, NeighborConfig};
        // Absent: no speaker.
        assert_eq!(parse(PORT).unwrap().bgp, None);
        let c = parse(&format!(
            "{PORT}[[interface]]\nname = \"eth1\"\naddresses = [\"198.51.100.1/24\"]\n\
             [bgp]\nasn = 4200000001\nrouter_id = \"198.51.100.1\"\nhold_time = 0\nconnect_retry = 30\n\
             [[bgp.neighbor]]\naddress = \"198.51.100.2\"\nremote_as = 65002\nlocal_pref = 200\n\
             description = \"transit A\"\n\
             [[bgp.neighbor]]\naddress = \"2001:db8:2::2\"\nremote_as = 4200000001\nport = 1179\n\
             families = [\"ipv6\", \"ipv4\"]\n"
        ))
        .unwrap();
        let want = BgpConfig {
            asn: 4_200_000_001,
            router_id: Ipv4Addr::new(198, 51, 100, 1),
            hold_time: 0,
            connect_retry: 30,
            always_compare_med: false,
            neighbors: vec![
                NeighborConfig {
                    address: "198.51.100.2".parse().unwrap(),
                    remote_as: 65002,
                    port: 179,
                    local_pref: 200,
                    max_prefixes: None,
                    families: vec![],
                    description: Some("transit A".into()),
                },
                NeighborConfig {
                    address: "2001:db8:2::2".parse().unwrap(),
                    remote_as: 4_200_000_001,
                    port: 1179,
                    local_pref: 100,
                    max_prefixes: None,
                    families: vec![Family::Ipv6, Family::Ipv4],
                    description: None,
                },
            ],
        };
        assert_eq!(c.bgp.as_ref(), Some(&want));
        assert_eq!(want.neighbors[0].families(), vec![Family::Ipv4]);
        // Defaults.
        let d = parse(&format!("{PORT}{BGP}")).unwrap().bgp.unwrap();
        assert_eq!((d.hold_time, d.connect_retry), (90, 5));
        assert!(d.neighbors.is_empty());
        // What is serialized parses back to the same thing.
        let again = parse(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(again, c);
    }

    #[test]
    fn each_bad_bgp_setting_is_located_and_explained() {
        // BGP is lines 3-5; a neighbour added after it starts at line 6.
        const N: &str = "[[bgp.neighbor]]\naddress = \"192.0.2.2\"\nremote_as = 65002\n";
        let cases: &[(String, &str)] = &[
            (
                BGP.replace("65001", "0"),
                "test.toml:4:7: bgp.asn: AS 0 is reserved (RFC 7607); expected 1..=4294967295",
            ),
            (
                BGP.replace("65001", "23456"),
                "test.toml:4:7: bgp.asn: AS 23456 is AS_TRANS (RFC 6793), not a real AS",
            ),
            (
                BGP.replace("198.51.100.1", "0.0.0.0"),
                "test.toml:5:13: bgp.router_id: 0.0.0.0 cannot be a BGP identifier",
            ),
            (
                BGP.replace("198.51.100.1", "224.0.0.5"),
                "test.toml:5:13: bgp.router_id: 224.0.0.5 cannot be a BGP identifier",
            ),
            (
                BGP.replace("198.51.100.1", "255.255.255.255"),
                "test.toml:5:13: bgp.router_id: 255.255.255.255 cannot be a BGP identifier",
            ),
            (
                format!("{BGP}hold_time = 1\n"),
                "test.toml:6:13: bgp.hold_time: 1 is out of range; expected 0 (no keepalives) or 3..=65535 seconds",
            ),
            (
                format!("{BGP}hold_time = 2\n"),
                "test.toml:6:13: bgp.hold_time: 2 is out of range",
            ),
            (
                format!("{BGP}connect_retry = 0\n"),
                "test.toml:6:17: bgp.connect_retry: 0 is out of range; expected 1..=3600 seconds",
            ),
            (
                format!("{BGP}connect_retry = 3601\n"),
                "test.toml:6:17: bgp.connect_retry: 3601 is out of range; expected 1..=3600 seconds",
            ),
            (
                format!("{BGP}{N}max_prefixes = 0\n"),
                "test.toml:9:16: bgp.neighbor[0].max_prefixes: 0 would end every session at its first route",
            ),
            (
                format!("{BGP}{N}{N}"),
                "test.toml:10:11: bgp.neighbor[1].address: neighbour 192.0.2.2 is already configured at bgp.neighbor[0]",
            ),
            (
                format!("{BGP}{}", N.replace("192.0.2.2", "0.0.0.0")),
                "test.toml:7:11: bgp.neighbor[0].address: 0.0.0.0 cannot be a neighbour's address",
            ),
            (
                format!("{BGP}{}", N.replace("192.0.2.2", "::")),
                "test.toml:7:11: bgp.neighbor[0].address: :: cannot be a neighbour's address",
            ),
            (
                format!("{BGP}{}", N.replace("192.0.2.2", "ff02::5")),
                "test.toml:7:11: bgp.neighbor[0].address: ff02::5 cannot be a neighbour's address",
            ),
            (
                format!("{BGP}{}", N.replace("192.0.2.2", "224.0.0.1")),
                "test.toml:7:11: bgp.neighbor[0].address: 224.0.0.1 cannot be a neighbour's address",
            ),
            (
                format!("{BGP}{}", N.replace("192.0.2.2", "127.0.0.2")),
                "test.toml:7:11: bgp.neighbor[0].address: 127.0.0.2 cannot be a neighbour's address",
            ),
            (
                format!("{BGP}{}", N.replace("192.0.2.2", "::1")),
                "test.toml:7:11: bgp.neighbor[0].address: ::1 cannot be a neighbour's address",
            ),
            (
                format!(
                    "[[interface]]\nname = \"eth1\"\naddresses = [\"192.0.2.1/24\", \"2001:db8::1/64\"]\n{BGP}{}",
                    N.replace("192.0.2.2", "2001:db8::1")
                ),
                "test.toml:10:11: bgp.neighbor[0].address: 2001:db8::1 is this router's own address (interface[0].addresses[1] on eth1)",
            ),
            (
                format!("{BGP}{}", N.replace("65002", "0")),
                "test.toml:8:13: bgp.neighbor[0].remote_as: AS 0 is reserved",
            ),
            (
                format!("{BGP}{}", N.replace("65002", "23456")),
                "test.toml:8:13: bgp.neighbor[0].remote_as: AS 23456 is AS_TRANS",
            ),
            (
                format!("{BGP}{N}port = 0\n"),
                "test.toml:9:8: bgp.neighbor[0].port: 0 is out of range; expected 1..=65535",
            ),
            (
                format!("{BGP}{N}families = [\"ipv4\", \"ipv6\", \"ipv4\"]\n"),
                "test.toml:9:29: bgp.neighbor[0].families[2]: family \"ipv4\" is listed twice",
            ),
            (
                format!("{BGP}{N}description = \"{}\"\n", "x".repeat(201)),
                "test.toml:9:15: bgp.neighbor[0].description: 201 characters is too long; expected at most 200",
            ),
            // From serde, at the value or key.
            (
                format!("{BGP}{N}password = \"x\"\n"),
                "test.toml:9:1: unknown field `password`",
            ),
            (
                format!("{BGP}router = 1\n"),
                "test.toml:6:1: unknown field `router`",
            ),
            (
                format!("{BGP}{}", N.replace("192.0.2.2", "192.0.2")),
                "test.toml:7:11: invalid IP address syntax",
            ),
            (
                BGP.replace("198.51.100.1", "2001:db8::1"),
                "test.toml:5:13: invalid IPv4 address syntax",
            ),
            (
                BGP.replace("65001", "\"65001\""),
                "test.toml:4:7: invalid type: string \"65001\", expected u32",
            ),
            (
                format!("{BGP}hold_time = 65536\n"),
                "test.toml:6:13: invalid value: integer `65536`, expected u16",
            ),
            (
                format!("{BGP}{N}families = [\"ipv4\", \"vpnv4\"]\n"),
                "test.toml:9:",
            ),
            (
                "[bgp]\nrouter_id = \"198.51.100.1\"\n".to_string(),
                "test.toml:3:1: missing field `asn`",
            ),
        ];
        for (body, want) in cases {
            let got = problems(body);
            assert!(got.starts_with(want), "{body}\n got: {got}\nwant: {want}");
            assert_eq!(
                got.lines().count(),
                1,
                "{body}: one problem expected: {got}"
            );
        }
        // Valid edges: hold time 0 and 3, retry 3600, description of 200, the other family
        // over a session (MP-BGP), the same AS as ours (iBGP).
        let c = parse(&format!(
            "{PORT}{BGP}hold_time = 3\nconnect_retry = 3600\n{N}families = [\"ipv6\"]\ndescription = \"{}\"\n\
             [[bgp.neighbor]]\naddress = \"2001:db8::2\"\nremote_as = 65001\nfamilies = [\"ipv4\", \"ipv6\"]\n",
            "é".repeat(200)
        ));
        assert!(c.is_ok(), "{c:?}");
        assert!(parse(&format!("{PORT}{BGP}hold_time = 0\n")).is_ok());
    }

    /// The commented-out `[bgp]` of the shipped example is valid once uncommented.
    #[test]
    fn shipped_bgp_example_is_valid() {
        let text = include_str!("../../../dist/ferrouter.toml");
        let start = text
            .find("# [bgp]")
            .expect("the example has a [bgp] section");
        let bgp: String = text[start..]
            .lines()
            .map(|l| l.strip_prefix('#').unwrap_or(l).trim_start())
            .collect::<Vec<_>>()
            .join("\n");
        let c = parse(&format!("{}\n{bgp}\n", &text[..start])).unwrap();
        let b = c.bgp.unwrap();
        assert_eq!(b.neighbors.len(), 2);
        // Still commented out: the example runs without a speaker.
        assert_eq!(parse(text).unwrap().bgp, None);
    }

    #[test]
    fn every_bgp_problem_is_reported() {
        let got = problems(
            "[[interface]]\nname = \"eth1\"\nmtu = 10\naddresses = [\"192.0.2.1/24\"]\n\
             [bgp]\nasn = 0\nrouter_id = \"0.0.0.0\"\nhold_time = 1\nconnect_retry = 0\n\
             [[bgp.neighbor]]\naddress = \"192.0.2.1\"\nremote_as = 23456\nport = 0\nfamilies = [\"ipv6\", \"ipv6\"]\n\
             [[bgp.neighbor]]\naddress = \"192.0.2.1\"\nremote_as = 65002\n",
        );
        let want = [
            "test.toml:5:7: interface[0].mtu: ",
            "test.toml:8:7: bgp.asn: ",
            "test.toml:9:13: bgp.router_id: ",
            "test.toml:10:13: bgp.hold_time: ",
            "test.toml:11:17: bgp.connect_retry: ",
            "test.toml:13:11: bgp.neighbor[0].address: 192.0.2.1 is this router's own address",
            "test.toml:14:13: bgp.neighbor[0].remote_as: ",
            "test.toml:15:8: bgp.neighbor[0].port: ",
            "test.toml:16:21: bgp.neighbor[0].families[1]: ",
            "test.toml:18:11: bgp.neighbor[1].address: neighbour 192.0.2.1 is already configured",
            "test.toml:18:11: bgp.neighbor[1].address: 192.0.2.1 is this router's own address",
        ];
        let lines: Vec<&str> = got.lines().collect();
        assert_eq!(lines.len(), want.len(), "{got}");
        for (l, w) in lines.iter().zip(want) {
            assert!(l.starts_with(w), "{l}\nwant: {w}\nall:\n{got}");
        }
    }

    #[test]
    fn every_problem_is_reported() {
        let got = problems(
            "[[interface]]\nname = \"eth1\"\nmtu = 10\n\
             [[route]]\nprefix = \"10.0.0.1/8\"\nvia = [\"x\"]\n",
        );
        let lines: Vec<&str> = got.lines().collect();
        assert_eq!(lines.len(), 3, "{got}");
        assert!(lines[0].contains("interface[0].mtu"), "{got}");
        assert!(lines[1].contains("route[0].prefix"), "{got}");
        assert!(lines[2].contains("route[0].via[0]"), "{got}");
    }

    #[test]
    fn prefixes() {
        let p: Prefix = "192.0.2.77/26".parse().unwrap();
        assert_eq!(p.network().to_string(), "192.0.2.64/26");
        assert!(p.contains("192.0.2.127".parse().unwrap()));
        assert!(!p.contains("192.0.2.128".parse().unwrap()));
        let q: Prefix = "192.0.0.0/16".parse().unwrap();
        assert!(p.overlaps(&q) && q.overlaps(&p));
        let d: Prefix = "0.0.0.0/0".parse().unwrap();
        assert_eq!(d.network(), d);
        let v6: Prefix = "2001:db8::1/64".parse().unwrap();
        assert_eq!(v6.network().to_string(), "2001:db8::/64");
        assert!("2001:db8::/129".parse::<Prefix>().is_err());
        assert!("10.0.0.0".parse::<Prefix>().is_err());
    }

    #[test]
    fn enabled_holds_a_link_down_and_routes_through_it_are_refused() {
        let c = parse(&format!("{PORT}[[interface]]\nname = \"eth1\"\n")).unwrap();
        assert!(c.interfaces[0].enabled, "brought up by default");
        let c = parse(&format!(
            "{PORT}[[interface]]\nname = \"eth1\"\nenabled = false\naddresses = [\"192.0.2.1/24\"]\n"
        ))
        .unwrap();
        assert!(!c.interfaces[0].enabled);
        // Serialized (false written, the default left out), it parses back the same.
        let text = toml::to_string(&c).unwrap();
        assert!(text.contains("enabled = false"), "{text}");
        assert_eq!(parse(&text).unwrap(), c);
        // A wrong type is located, from serde.
        let e = problems("[[interface]]\nname = \"eth1\"\nenabled = \"no\"\n");
        assert!(
            e.starts_with("test.toml:5:11: invalid type: string \"no\", expected a boolean"),
            "{e}"
        );
        // Routes through a held-down interface: by gateway or by name, each located.
        let e = problems(
            "[[interface]]\nname = \"eth1\"\nenabled = false\naddresses = [\"192.0.2.1/24\"]\n\
             [[route]]\nprefix = \"10.0.0.0/8\"\nvia = [\"198.51.100.2\", \"192.0.2.2\"]\n\
             [[route]]\nprefix = \"10.1.0.0/16\"\nvia = [\"198.51.100.2\"]\ninterface = \"eth1\"\n",
        );
        let lines: Vec<&str> = e.lines().collect();
        assert_eq!(lines.len(), 2, "{e}");
        assert!(
            lines[0].starts_with("test.toml:9:24: route[0].via[1]: gateway 192.0.2.2 is on 192.0.2.0/24 of eth1, which is held down (interface[0].enabled = false)"),
            "{e}"
        );
        assert!(
            lines[1].starts_with("test.toml:13:13: route[1].interface: eth1 is held down"),
            "{e}"
        );
    }

    #[test]
    fn urpf_on_fast_path_interfaces_only() {
        let c = parse(&format!(
            "{PORT}[[vlan]]\nname = \"eth1.7\"\nparent = \"eth1\"\nid = 7\n\
             [[interface]]\nname = \"eth1\"\nurpf = \"strict\"\n\
             [[interface]]\nname = \"eth1.7\"\nurpf = \"loose\"\n"
        ))
        .unwrap();
        assert_eq!(c.interfaces[0].urpf, Some(UrpfMode::Strict));
        assert_eq!(c.interfaces[1].urpf, Some(UrpfMode::Loose));
        let e = problems("[[interface]]\nname = \"lo\"\nurpf = \"strict\"\n");
        assert!(
            e.contains("interface[0].urpf: (lo): uRPF runs in the fast path"),
            "{e}"
        );
        let e = problems("[[interface]]\nname = \"eth1\"\nurpf = \"on\"\n");
        assert!(
            e.contains("unknown variant `on`, expected `strict` or `loose`"),
            "{e}"
        );
    }

    #[test]
    fn vlan_sub_interfaces() {
        let base =
            "[[port]]\nname = \"eth1\"\n[[port]]\nname = \"eth2\"\nbackend = \"af_packet\"\n";
        let c = parse(&format!("{base}[[vlan]]\nname = \"eth1.100\"\nparent = \"eth1\"\nid = 100\n[[vlan]]\nname = \"eth2.q\"\nparent = \"eth2\"\nid = 200\ninner_id = 300\n[[vlan]]\nname = \"eth2.101\"\nparent = \"eth2\"\nid = 101\nproto = \"802.1ad\"\n[[interface]]\nname = \"eth1.100\"\nmtu = 1500\naddresses = [\"10.100.0.1/24\"]\n")).unwrap();
        assert_eq!(c.vlans.len(), 3);
        assert_eq!(c.vlans[0].tpid(), 0x8100);
        assert_eq!(
            c.vlans[1].tpid(),
            0x88a8,
            "QinQ's outer tag is 802.1ad by default"
        );
        assert_eq!(c.vlans[1].describe(), "802.1ad 200 / 802.1q 300");
        assert_eq!(c.vlans[2].tpid(), 0x88a8);
        // The same tags on another parent, or another TPID, are another sub-interface.
        parse(&format!("{base}[[vlan]]\nname = \"a\"\nparent = \"eth1\"\nid = 5\n[[vlan]]\nname = \"b\"\nparent = \"eth2\"\nid = 5\n[[vlan]]\nname = \"c\"\nparent = \"eth2\"\nid = 5\nproto = \"802.1ad\"\n")).unwrap();
        let bad = [
            (
                "name = \"x\"\nparent = \"eth9\"\nid = 5",
                "vlan[0].parent",
                "is not a [[port]]",
            ),
            (
                "name = \"x\"\nparent = \"eth1\"\nid = 0",
                "vlan[0].id",
                "1..=4094",
            ),
            (
                "name = \"x\"\nparent = \"eth1\"\nid = 4095",
                "vlan[0].id",
                "1..=4094",
            ),
            (
                "name = \"x\"\nparent = \"eth1\"\nid = 5\ninner_id = 0",
                "vlan[0].inner_id",
                "1..=4094",
            ),
            (
                "name = \"eth2\"\nparent = \"eth1\"\nid = 5",
                "vlan[0].name",
                "already the name",
            ),
            (
                "name = \"a/b\"\nparent = \"eth1\"\nid = 5",
                "vlan[0].name",
                "not a valid Linux interface name",
            ),
            (
                "name = \"x\"\nparent = \"eth1\"\nid = 5\nproto = \"qinq\"",
                "",
                "unknown variant",
            ),
            (
                "name = \"x\"\nparent = \"eth1\"\nid = 5\ncolour = 1",
                "",
                "unknown field",
            ),
        ];
        for (body, path, what) in bad {
            let e = parse(&format!("{base}[[vlan]]\n{body}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(path) && e.contains(what), "{body}: {e}");
        }
        let e = parse(&format!("{base}[[vlan]]\nname = \"a\"\nparent = \"eth1\"\nid = 5\n[[vlan]]\nname = \"b\"\nparent = \"eth1\"\nid = 5\nproto = \"802.1q\"\n")).unwrap_err().to_string();
        assert!(
            e.contains("vlan[1].id") && e.contains("already vlan[0] (a)"),
            "{e}"
        );
        // AF_XDP and memif parents are refused, with the reason.
        let e = parse("[[port]]\nname = \"x1\"\nbackend = \"af_xdp\"\n[[vlan]]\nname = \"v\"\nparent = \"x1\"\nid = 7\n").unwrap_err().to_string();
        assert!(
            e.contains("vlan[0].parent") && e.contains("\"af_xdp\"") && e.contains("metadata"),
            "{e}"
        );
        // A sub-interface's MTU leaves room for its tags.
        let e = parse(&format!("{base}[[vlan]]\nname = \"q\"\nparent = \"eth2\"\nid = 2\ninner_id = 3\n[[interface]]\nname = \"q\"\nmtu = 9000\n")).unwrap_err().to_string();
        assert!(e.contains("interface[0].mtu") && e.contains("8992"), "{e}");
        parse(&format!("{base}[[vlan]]\nname = \"q\"\nparent = \"eth2\"\nid = 2\ninner_id = 3\n[[interface]]\nname = \"q\"\nmtu = 8992\n")).unwrap();
        // A change of sub-interfaces needs a restart.
        let old = parse(base).unwrap();
        let new = parse(&format!(
            "{base}[[vlan]]\nname = \"a\"\nparent = \"eth1\"\nid = 5\n"
        ))
        .unwrap();
        let e = crate::apply::plan(&old, &new).unwrap_err().to_string();
        assert!(e.contains("[[vlan]]"), "{e}");
    }

    #[test]
    fn api_limits_have_defaults_and_ranges() {
        let c = parse("[[port]]\nname = \"e\"\n").unwrap();
        assert_eq!(
            (
                c.api.max_connections,
                c.api.max_connections_per_address,
                c.api.header_read_timeout_s,
                c.api.idle_timeout_s
            ),
            (256, 32, 10, 60)
        );
        let c = parse("[api]\nmax_connections = 8\nmax_connections_per_address = 2\nheader_read_timeout_s = 2\nidle_timeout_s = 3\n[[port]]\nname = \"e\"\n").unwrap();
        assert_eq!(
            (c.api.max_connections, c.api.max_connections_per_address),
            (8, 2)
        );
        for (bad, line, needle) in [
            ("max_connections = 0", 2, "api.max_connections: 0 is out of range"),
            (
                "max_connections = 4\nmax_connections_per_address = 5",
                3,
                "api.max_connections_per_address: 5 is out of range; expected 1..=api.max_connections (4)",
            ),
            ("idle_timeout_s = 0", 2, "api.idle_timeout_s: 0 is out of range"),
            (
                "header_read_timeout_s = 4000",
                2,
                "api.header_read_timeout_s: 4000 is out of range",
            ),
        ] {
            let e = parse(&format!("[api]\n{bad}\n[[port]]\nname = \"e\"\n"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(needle) && e.contains(&format!("test.toml:{line}:")),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn a_token_file_others_may_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("api.token");
        std::fs::write(&p, "0123456789abcdef0123\n").unwrap();
        let api = ApiSettings {
            listen: Some("127.0.0.1:9180".parse().unwrap()),
            token_file: Some(p.clone()),
            ..ApiSettings::default()
        };
        for mode in [0o644, 0o640, 0o604, 0o620] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = format!("{:#}", api.read_token().unwrap_err());
            assert!(
                e.contains(&format!(
                    "api.token_file {} has mode {mode:04o}",
                    p.display()
                )) && e.contains("chmod 600"),
                "{e}"
            );
        }
        for mode in [0o600, 0o400] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(
                api.read_token().unwrap().as_deref(),
                Some("0123456789abcdef0123")
            );
        }
        // A missing file is named, with the cause.
        let gone = ApiSettings {
            token_file: Some(dir.path().join("nosuch")),
            ..api
        };
        let e = format!("{:#}", gone.read_token().unwrap_err());
        assert!(
            e.contains("reading api.token_file")
                && e.contains("nosuch")
                && e.contains("No such file"),
            "{e}"
        );
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(text in "\\PC{0,300}") {
            let _ = parse(&text);
        }

        #[test]
        fn parse_never_panics_on_near_configs(
            a in "[0-9a-f:./]{0,24}", b in "[0-9a-z:./ ]{0,24}", m in 0u64..100_000
        ) {
            let t = format!("{PORT}[[interface]]\nname = \"{b}\"\nmtu = {m}\naddresses = [\"{a}\"]\n[[route]]\nprefix = \"{a}\"\nvia = [\"{b}\"]\n[[neighbor]]\ninterface = \"{b}\"\nip = \"{a}\"\nmac = \"{b}\"\n");
            let _ = parse(&t);
        }
    }
    #[test]
    fn qos_problems_have_their_lines() {
        let e = problems(
            "[[qos.policy]]\nname = \"edge\"\ndefault_class = \"gold\"\nshaper = \"10mbit\"\n\
             [[qos.policy.class]]\nname = \"be\"\nmin_rate = \"120%\"\n\
             [[qos.interface]]\nname = \"eth1\"\noutput = \"edge\"\ninput = \"core\"\n",
        );
        for want in [
            "test.toml:5:17: qos.policy[0].default_class: \"gold\" is not a class of policy \"edge\"",
            "test.toml:9:12: qos.policy[0].class[0].min_rate: \"120%\": a share is 1% to 100%",
            "test.toml:13:9: qos.interface[0].input: unknown policy \"core\"",
        ] {
            assert!(e.contains(want), "{want} not in:\n{e}");
        }
        let ok = format!(
            "{PORT}[[qos.policy]]\nname = \"edge\"\ndefault_class = \"be\"\n\
             [[qos.policy.class]]\nname = \"be\"\n[[qos.interface]]\nname = \"eth1\"\noutput = \"edge\"\n"
        );
        assert!(parse(&ok).is_ok());
    }

    #[test]
    fn qos_rule_and_8021p_problems_have_their_lines() {
        let e = problems(
            "[[vlan]]\nname = \"eth1.100\"\nparent = \"eth1\"\nid = 100\n\
             [[qos.policy]]\nname = \"edge\"\ndefault_class = \"be\"\n\
             [[qos.policy.class]]\nname = \"be\"\npcp = 9\n\
             [[qos.policy.rule]]\nclass = \"ef\"\n\
             [[qos.policy.rule]]\nclass = \"be\"\nsrc = \"10.0.0.0/8\"\ndst = [\"2001:db8::/32\"]\ndport = 53\n\
             [[qos.interface]]\nname = \"eth1.100\"\noutput = \"edge\"\n",
        );
        for want in [
            "qos.policy[0].class[0].pcp: 802.1p priority 9 is out of range: 0 to 7",
            "qos.policy[0].rule[0].class: \"ef\" is not a class of the policy",
            "qos.policy[0].rule[1].dst[0]: 2001:db8::/32 and 10.0.0.0/8 in one rule",
            "qos.policy[0].rule[1].dport: ports need a protocol",
        ] {
            assert!(e.contains(want), "{want} not in:\n{e}");
        }
        // A reversed port range is refused as it is read.
        let e = problems(
            "[[qos.policy]]\nname = \"edge\"\ndefault_class = \"be\"\n\
             [[qos.policy.class]]\nname = \"be\"\n\
             [[qos.policy.rule]]\nclass = \"be\"\nprotocol = \"udp\"\ndport = \"5061-5060\"\n",
        );
        assert!(e.contains("reversed"), "{e}");
    }
}
