//! The API's request and response bodies, typed: the daemon ([`crate::http`],
//! [`crate::api`]) serializes them, the CLI and the lab ([`crate::api::request_with`],
//! [`crate::render`]) deserialize the same structs, and `/openapi.json` gives each its
//! schema (they derive `utoipa::ToSchema`). A field's name is its JSON key.
//!
//! This module imports nothing of the crate: everything else may use it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

// ---- errors ---------------------------------------------------------------------------

/// Every error answer (4xx and 5xx): what was wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// What was wrong, for a person.
    pub error: String,
}

// ---- show interfaces ------------------------------------------------------------------

/// Administrative state of an interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Admin {
    /// `IFF_UP`.
    Up,
    /// Not `IFF_UP`.
    Down,
}

impl Admin {
    /// `up` or `down`.
    pub fn as_str(self) -> &'static str {
        match self {
            Admin::Up => "up",
            Admin::Down => "down",
        }
    }
}

/// Operational state of an interface: whether it carries traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Oper {
    /// Admin up with carrier (and, for a sub-interface, its parent up).
    Up,
    /// Admin up, no carrier.
    NoCarrier,
    /// Anything else.
    Down,
}

impl Oper {
    /// `up`, `no-carrier` or `down`.
    pub fn as_str(self) -> &'static str {
        match self {
            Oper::Up => "up",
            Oper::NoCarrier => "no-carrier",
            Oper::Down => "down",
        }
    }
}

/// A VLAN sub-interface's tags.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Vlan {
    /// TPID of the outer tag, `0x8100` (802.1Q) or `0x88a8` (802.1ad).
    pub tpid: String,
    /// Outer VLAN id.
    pub id: u16,
    /// Inner VLAN id (QinQ), null for a single tag.
    #[schema(required = true)]
    pub inner_id: Option<u16>,
}

/// One interface of `GET /v1/interfaces`: a port, or a VLAN sub-interface (then `parent`
/// and `vlan` are present, and the port-only counters are absent).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Interface {
    /// Port id (sub-interfaces follow the ports).
    pub port: u16,
    /// Interface name.
    pub name: String,
    /// Linux ifindex (null if the kernel has no such link).
    #[schema(required = true)]
    pub ifindex: Option<u32>,
    /// Backend in use (with the XDP mode for AF_XDP), or `vlan ID on PARENT`.
    pub backend: String,
    /// Administrative state.
    pub admin: Admin,
    /// Operational state.
    pub oper: Oper,
    /// Why it does not forward; null when it does.
    #[schema(required = true)]
    pub down_reason: Option<String>,
    /// Sub-interfaces only: the port it rides on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Sub-interfaces only: its tags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<Vlan>,
    /// MAC address (null until the interface table has the port).
    #[schema(required = true)]
    pub mac: Option<String>,
    /// IP MTU (null until the interface table has the port).
    #[schema(required = true)]
    pub mtu: Option<u16>,
    /// The router's IPv4 addresses on it (null until the interface table has the port).
    #[schema(required = true)]
    pub ipv4: Option<Vec<String>>,
    /// The router's IPv6 addresses on it (null until the interface table has the port).
    #[schema(required = true)]
    pub ipv6: Option<Vec<String>>,
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames transmitted.
    pub tx_packets: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Ports only: receive drops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_drops: Option<u64>,
    /// Ports only: transmit errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_errors: Option<u64>,
    /// Ports only: partial checksums completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_csum_completed: Option<u64>,
    /// Ports only: super-frames cut into segments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_gso_split: Option<u64>,
    /// Fast-path features enabled on it.
    pub features: Vec<String>,
}

// ---- show routes ----------------------------------------------------------------------

/// Where an installed prefix came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RouteSource {
    /// The router's own address (local table).
    Local,
    /// A main-table route.
    Route,
    /// A resolved neighbour's host route.
    Neighbor,
    /// A best path of ferrouter's own BGP speaker.
    Bgp,
}

impl RouteSource {
    /// Its JSON name.
    pub fn as_str(self) -> &'static str {
        match self {
            RouteSource::Local => "local",
            RouteSource::Route => "route",
            RouteSource::Neighbor => "neighbor",
            RouteSource::Bgp => "bgp",
        }
    }
}

/// An installed route.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Route {
    /// `addr/len`.
    pub prefix: String,
    /// Origin.
    pub source: RouteSource,
    /// Next-hop description (`via 192.0.2.1 dev eth1 lladdr 02:..`, `glean dev eth1`,
    /// `local (kernel)`, `drop`, `ecmp [...]`).
    pub next_hop: String,
}

/// `GET /v1/routes`: the FIB's size and the routes asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Routes {
    /// IPv4 prefixes in the FIB.
    pub ipv4: u64,
    /// IPv6 prefixes in the FIB.
    pub ipv6: u64,
    /// The routes (all, or those matching `prefix`), sorted.
    pub routes: Vec<Route>,
}

/// Installed prefixes by where they came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BySource {
    /// Main-table routes.
    pub route: u64,
    /// Neighbours' host routes.
    pub neighbor: u64,
    /// The router's own addresses.
    pub local: u64,
    /// The BGP speaker's best paths.
    pub bgp: u64,
}

/// The FIB's memory, in bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FibMemory {
    /// IPv4 lookup tables.
    pub ipv4_tables: u64,
    /// IPv6 lookup tables.
    pub ipv6_tables: u64,
    /// Control-plane route store.
    pub route_store: u64,
    /// Next-hop table and objects.
    pub next_hops: u64,
    /// All of it.
    pub total: u64,
}

/// `GET /v1/routes/summary`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RoutesSummary {
    /// IPv4 prefixes in the FIB.
    pub ipv4: u64,
    /// IPv6 prefixes in the FIB.
    pub ipv6: u64,
    /// Prefixes by origin.
    pub by_source: BySource,
    /// Kernel routes mirrored.
    pub kernel_routes_mirrored: u64,
    /// FIB memory.
    pub fib_memory_bytes: FibMemory,
    /// Netlink events applied.
    pub netlink_events: u64,
    /// Full resyncs.
    pub resyncs: u64,
    /// FIB writes that failed.
    pub fib_errors: u64,
    /// BGP route changes applied.
    pub bgp_changes: u64,
    /// BGP best paths not installed (next hop unresolved).
    pub bgp_unresolved: u64,
}

// ---- show neighbors -------------------------------------------------------------------

/// A neighbour (ARP/NDP) the fast path uses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Neighbor {
    /// Address.
    pub ip: String,
    /// Interface.
    pub dev: String,
    /// MAC, if known.
    #[schema(required = true)]
    pub mac: Option<String>,
    /// Usable for forwarding.
    pub usable: bool,
}

// ---- show counters --------------------------------------------------------------------

/// What a counter reason counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReasonKind {
    /// Packets dropped.
    Drop,
    /// Packets handed to the kernel.
    Punt,
    /// Neither: for information.
    Info,
}

/// A non-zero drop, punt or information counter, by graph node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ReasonCount {
    /// Graph node (or feature).
    pub node: String,
    /// Reason.
    pub reason: String,
    /// Drop, punt or info.
    pub kind: ReasonKind,
    /// Packets.
    pub count: u64,
    /// What it means.
    pub description: String,
}

/// A fast-path feature's counters, summed over the workers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FeatureCounters {
    /// Feature name.
    pub feature: String,
    /// Its arc.
    pub arc: String,
    /// Packets it saw.
    pub packets: u64,
    /// Its drops, by reason.
    pub drops: BTreeMap<String, u64>,
}

/// One worker's counters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WorkerCounters {
    /// Worker id.
    pub id: u64,
    /// The core it is pinned to (null: not pinned).
    #[schema(required = true)]
    pub core: Option<u64>,
    /// Its nice value (null: unknown).
    #[schema(required = true)]
    pub nice: Option<i32>,
    /// Why its priority could not be set (null: it was).
    #[schema(required = true)]
    pub nice_error: Option<String>,
    /// Frames received.
    pub rx: u64,
    /// Frames transmitted.
    pub tx: u64,
    /// Packets forwarded (IPv4 and IPv6).
    pub forwarded: u64,
    /// Vectors (bursts) processed.
    pub vectors: u64,
    /// Polls that found nothing.
    pub idle_polls: u64,
    /// Times it slept.
    pub sleeps: u64,
    /// Time spent on packets, ns.
    pub busy_ns: u64,
    /// `busy_ns` per received packet (null before the first).
    #[schema(required = true)]
    pub busy_ns_per_packet: Option<f64>,
}

/// Counters of the netlink-to-FIB sync.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SyncStats {
    /// Netlink events applied.
    pub events: u64,
    /// Full resyncs (start, and every overflow).
    pub resyncs: u64,
    /// FIB writes that failed (logged; the prefix keeps its previous state).
    pub fib_errors: u64,
    /// Route changes from the native BGP speaker applied.
    pub bgp_changes: u64,
    /// BGP best paths not installed: their next hop is on no connected subnet (or is one
    /// of the router's own addresses).
    pub bgp_unresolved: u64,
}

/// Packets held while their next hop resolved (glean).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GleanCounters {
    /// Held.
    pub held: u64,
    /// Sent on once the next hop resolved.
    pub sent: u64,
    /// Dropped: the next hop did not resolve in time.
    pub expired: u64,
    /// Not held (bounds reached, nothing to wait for, queue full).
    pub dropped: u64,
}

/// Packets the kernel itself forwarded (must stay 0); null where /proc could not be read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct KernelForwarded {
    /// `Ip: ForwDatagrams` of /proc/net/snmp.
    #[schema(required = true)]
    pub ipv4: Option<u64>,
    /// `Ip6OutForwDatagrams` of /proc/net/snmp6.
    #[schema(required = true)]
    pub ipv6: Option<u64>,
}

/// `GET /v1/counters`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Counters {
    /// Frames received.
    pub rx: u64,
    /// Frames transmitted.
    pub tx: u64,
    /// Vectors processed.
    pub vectors: u64,
    /// Packets dropped.
    pub drops: u64,
    /// Packets punted to the kernel.
    pub punts: u64,
    /// Packets forwarded (IPv4 and IPv6).
    pub forwarded: u64,
    /// Every non-zero reason: the engine's, then the features'.
    pub reasons: Vec<ReasonCount>,
    /// Every feature's counters.
    pub features: Vec<FeatureCounters>,
    /// Per worker.
    pub workers: Vec<WorkerCounters>,
    /// The route sync's counters.
    pub sync: SyncStats,
    /// Glean (packets held for a next hop).
    pub glean: GleanCounters,
    /// What the kernel forwarded.
    pub kernel_forwarded: KernelForwarded,
    /// Seconds since the daemon started.
    pub uptime_s: f64,
}

// ---- show bgp -------------------------------------------------------------------------

/// RFC 4271 §8 session state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum BgpState {
    /// Not connected (waiting to retry).
    Idle,
    /// Connecting.
    Connect,
    /// OPEN sent, waiting for the neighbour's.
    OpenSent,
    /// OPENs exchanged, waiting for its KEEPALIVE.
    OpenConfirm,
    /// Up: routes flow.
    Established,
}

impl BgpState {
    /// Its JSON name.
    pub fn as_str(self) -> &'static str {
        match self {
            BgpState::Idle => "idle",
            BgpState::Connect => "connect",
            BgpState::OpenSent => "opensent",
            BgpState::OpenConfirm => "openconfirm",
            BgpState::Established => "established",
        }
    }
}

/// An address family (unicast).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum BgpFamily {
    /// IPv4 unicast.
    Ipv4,
    /// IPv6 unicast.
    Ipv6,
}

/// A BGP neighbour: its session and counters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BgpNeighbor {
    /// Its address.
    pub address: String,
    /// Its AS.
    pub remote_as: u32,
    /// From the config.
    #[schema(required = true)]
    pub description: Option<String>,
    /// Session state.
    pub state: BgpState,
    /// Seconds in this state.
    pub state_s: u64,
    /// Its BGP identifier (while a session is up).
    #[schema(required = true)]
    pub remote_router_id: Option<String>,
    /// Negotiated hold time, s.
    #[schema(required = true)]
    pub hold_time: Option<u16>,
    /// Negotiated families.
    pub families: Vec<BgpFamily>,
    /// Prefixes it has a path for now.
    pub prefixes: u64,
    /// UPDATE messages received.
    pub updates_received: u64,
    /// Prefixes announced to us.
    pub prefixes_announced: u64,
    /// Prefixes withdrawn.
    pub prefixes_withdrawn: u64,
    /// UPDATEs whose announcements were treated as withdrawals (RFC 7606).
    pub treat_as_withdraw: u64,
    /// Malformed optional attributes dropped (RFC 7606).
    pub attributes_discarded: u64,
    /// UPDATEs refused because our AS was in their AS_PATH.
    pub as_loops: u64,
    /// Announcements left out of the decision: next hop unresolved, or ours.
    pub unresolved: u64,
    /// ROUTE-REFRESH requests sent (RFC 2918).
    pub route_refresh_sent: u64,
    /// NOTIFICATIONs sent.
    pub notifications_sent: u64,
    /// NOTIFICATIONs received.
    pub notifications_received: u64,
    /// Times the session reached Established.
    pub established_transitions: u64,
    /// Why the last session ended.
    #[schema(required = true)]
    pub last_error: Option<String>,
}

/// The native BGP speaker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BgpSpeaker {
    /// Our AS.
    pub asn: u32,
    /// Our BGP identifier.
    pub router_id: String,
    /// IPv4 prefixes with a best path.
    pub prefixes_v4: u64,
    /// IPv6 prefixes with a best path.
    pub prefixes_v6: u64,
    /// Distinct paths held.
    pub paths: u64,
    /// FIB changes handed to the fast path.
    pub fib_changes: u64,
    /// The neighbours, in config order.
    pub neighbors: Vec<BgpNeighbor>,
}

/// `GET /v1/bgp`: `{"enabled": false}` without `[bgp]`; else the speaker too.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BgpStatus {
    /// Whether `[bgp]` is configured.
    pub enabled: bool,
    /// The speaker (present when enabled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speaker: Option<BgpSpeaker>,
    /// When the speaker's last changes were in the FIB (CLOCK_MONOTONIC, ns; 0: never;
    /// present when enabled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fib_change_monotonic_ns: Option<u64>,
}

// ---- version --------------------------------------------------------------------------

/// `GET /v1/version`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Version {
    /// Version and build commit.
    pub version: String,
    /// Seconds since the daemon started.
    pub uptime_s: f64,
}

// ---- config ---------------------------------------------------------------------------

/// A config candidate (`POST /v1/config/check`, `/v1/config/apply`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigBody {
    /// The whole config file (TOML).
    pub text: String,
    /// Its name, for the locations in error messages (e.g. `ferrouter.toml`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Why it is applied (kept in the history).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// `POST /v1/config/diff`: a candidate, or none for previous vs running.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DiffBody {
    /// The candidate config text; without it, the diff is from the previous config in the
    /// history to the running one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// `POST /v1/config/rollback`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RollbackBody {
    /// How many configs back (1 = the one before the running one).
    #[serde(default = "one")]
    #[schema(minimum = 1)]
    pub steps: usize,
}

impl Default for RollbackBody {
    fn default() -> RollbackBody {
        RollbackBody { steps: 1 }
    }
}

fn one() -> usize {
    1
}

/// A config's text: `GET /v1/config` (the running one).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ConfigText {
    /// The TOML text.
    pub text: String,
}

/// `POST /v1/config/check`, valid: what applying it would do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CheckResult {
    /// Always true (an invalid candidate is a 422 [`CheckFailure`]).
    pub valid: bool,
    /// The steps apply would take, in order.
    pub plan: Vec<String>,
}

/// One problem in a config file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ConfigProblem {
    /// Line, from 1.
    pub line: u64,
    /// Column (in characters), from 1.
    pub column: u64,
    /// The value's path, `route[2].prefix`; empty for syntax errors.
    pub path: String,
    /// What is wrong and what is expected.
    pub message: String,
}

/// `POST /v1/config/check`, invalid (422): every problem.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CheckFailure {
    /// All problems as text, one per line (`FILE:LINE:COL: PATH: MESSAGE`).
    pub error: String,
    /// The problems, in file order (empty when the plan, not the file, failed).
    pub problems: Vec<ConfigProblem>,
}

/// `POST /v1/config/apply` and `/v1/config/rollback`: what was done.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Applied {
    /// The history entry recorded (null: nothing changed, nothing recorded).
    #[schema(required = true)]
    pub history_id: Option<u64>,
    /// The steps planned.
    pub plan: Vec<String>,
    /// Steps that changed the kernel (or a fast-path setting).
    pub changed: Vec<String>,
    /// Steps whose result was already in place.
    pub unchanged: Vec<String>,
}

/// `POST /v1/config/diff`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ConfigDiff {
    /// Unified diff (empty: no difference).
    pub diff: String,
}

/// One applied config of `GET /v1/config/history`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HistoryEntry {
    /// Its number (increasing).
    pub id: u64,
    /// When it was applied, in seconds since the Unix epoch.
    pub time: u64,
    /// Size of its text.
    pub bytes: u64,
    /// Who applied it or why, if given.
    #[schema(required = true)]
    pub comment: Option<String>,
}

/// `GET /v1/config/history/{id}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HistoryText {
    /// The entry.
    pub id: u64,
    /// Its config text.
    pub text: String,
}

// ---- trace ----------------------------------------------------------------------------

/// `POST /v1/trace`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TraceBody {
    /// Trace the next COUNT matching packets (per worker, as VPP does).
    #[schema(minimum = 1, maximum = 10000)]
    pub count: u32,
    /// Only packets received on this port (number or name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<String>,
    /// Match expression: `ip4`, `ip6`, `arp`, `src|dst|host ADDR[/LEN]`, `proto
    /// tcp|udp|icmp|icmp6|N`, `port N`, each optionally preceded by `not`, joined by `and`.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub expr: Option<String>,
}

/// `POST /v1/trace`: armed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TraceArmed {
    /// Packets to trace (per worker).
    pub armed: u32,
}

/// One step of a traced packet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TraceStep {
    /// Graph node that decided.
    pub node: String,
    /// What it decided.
    pub text: String,
}

/// One traced packet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TracedPacket {
    /// Sequence number since the daemon started.
    pub seq: u64,
    /// Worker that handled it.
    pub worker: u64,
    /// Ingress port.
    pub port: u16,
    /// Ingress port's name.
    pub port_name: String,
    /// Frame length at entry.
    pub len: u16,
    /// Worker clock at entry, ns.
    pub ts_ns: u64,
    /// Headers at entry (L2, L3, L4).
    pub summary: String,
    /// The nodes it went through, in order.
    pub steps: Vec<TraceStep>,
    /// Steps not recorded (record full).
    pub truncated: u8,
}

/// `GET /v1/trace`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TraceShow {
    /// The traced packets, oldest first.
    pub traces: Vec<TracedPacket>,
    /// The same as VPP-style text.
    pub text: String,
    /// Trace records lost (queue full).
    pub lost: u64,
}

/// `DELETE /v1/trace`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TraceCleared {
    /// Always true.
    pub cleared: bool,
}

// ---- capture --------------------------------------------------------------------------

/// `POST /v1/capture` (the answer is a pcap file, not JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CaptureBody {
    /// Port (number or name).
    pub port: String,
    /// rx, tx or both (default both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<String>,
    /// Stop after this many frames (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1000000)]
    pub count: Option<u32>,
    /// Bytes kept of each frame (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snaplen: Option<u16>,
    /// Stop after this many seconds even if fewer frames came (default 10, at most 3600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(exclusive_minimum = 0.0, maximum = 3600.0)]
    pub timeout_s: Option<f64>,
}

/// `GET /v1/firewall`: every filter with its rules and their counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FirewallView {
    /// The filters, in config order.
    pub filters: Vec<FilterView>,
    /// Log records not written: over `[firewall] log_rate`, or a worker's ring full.
    pub log_suppressed: u64,
    /// Microseconds the running rules took to compile.
    pub compile_us: u64,
    /// Connection tracking, summed over the workers (absent: off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conntrack: Option<ConntrackView>,
}

/// Connection tracking's figures, summed over the workers' tables.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ConntrackView {
    /// Flows tracked now.
    pub flows: u64,
    /// The tables' capacity.
    pub max: u64,
    /// Flows created since start.
    pub created: u64,
    /// New flows refused: the table was full (their packets dropped, `conntrack_full`).
    pub refused: u64,
    /// Flows not yet assured dropped to make room for new ones.
    pub early_dropped: u64,
    /// Flows that timed out.
    pub expired: u64,
    /// Packets found invalid: out of the TCP window, flags the state does not allow.
    pub invalid: u64,
    /// Bytes the tables take.
    pub memory_bytes: u64,
}

/// One filter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FilterView {
    /// Name.
    pub name: String,
    /// `ingress` or `egress`.
    pub hook: String,
    /// The interfaces it is bound to.
    pub interfaces: Vec<String>,
    /// `accept`, `drop` or `reject`: for packets no rule matches.
    pub policy: String,
    /// Packets the policy decided.
    pub policy_packets: u64,
    /// Their bytes (IP length).
    pub policy_bytes: u64,
    /// The rules, in order.
    pub rules: Vec<RuleView>,
    /// Size of the IPv4 and IPv6 classifiers, bytes.
    pub classifier_bytes: u64,
}

/// One rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RuleView {
    /// Position, from 1.
    pub index: u32,
    /// `accept`, `drop` or `reject`.
    pub action: String,
    /// The matches, as the config writes them: `protocol tcp destination_port 22`.
    pub matches: String,
    /// The comment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// Packets it decided.
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// `GET /v1/conntrack`: the flows a filter matches, across the workers' tables.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ConntrackList {
    /// The flows, in no particular order.
    pub flows: Vec<ConntrackFlow>,
    /// More flows matched than `limit`: the list is cut.
    pub truncated: bool,
}

/// One tracked flow, as its first packet went.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ConntrackFlow {
    /// `tcp`, `udp`, `icmp`, ... or a number.
    pub protocol: String,
    /// Source address.
    pub src: String,
    /// Destination address.
    pub dst: String,
    /// Source port (ICMP echo: the identifier).
    pub sport: u16,
    /// Destination port (ICMP echo: the identifier).
    pub dport: u16,
    /// Its state: `syn_sent`, `established`, `udp_replied`, ...
    pub state: String,
    /// A packet was seen in the reply direction.
    pub seen_reply: bool,
    /// Assured: never dropped early to make room.
    pub assured: bool,
    /// Seconds until it expires (when read).
    pub expires_s: f64,
    /// The worker whose table holds it (with several workers, the one its packets are
    /// steered to).
    #[serde(default)]
    pub worker: usize,
}

/// `DELETE /v1/conntrack`: how many flows were removed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ConntrackFlushed {
    /// Flows removed.
    pub removed: u64,
}

/// `GET /v1/ipsec`: the tunnel interfaces and the SAs installed, with their counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct IpsecView {
    /// The tunnels, in config order.
    pub tunnels: Vec<IpsecTunnelView>,
    /// The SAs, by tunnel, direction and SPI (policy SAs under the tunnel `(policy)`).
    pub sas: Vec<IpsecSaView>,
    /// The security policies (policy-based IPsec), by interface, direction and priority.
    #[serde(default)]
    pub policies: Vec<IpsecPolicyView>,
    /// Vectors an ESP node dropped because its worker's SA table was borrowed (never
    /// expected).
    pub busy: u64,
    /// Fragmented ESP gathered before decryption.
    #[serde(default)]
    pub reassembly: IpsecReassemblyView,
}

/// `POST /v1/ipsec/sa`: a manually keyed SA of a tunnel, given through the API (as an
/// `[[ipsec.sa]]` entry, with its keys here instead of in the key file).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IpsecSaBody {
    /// Its tunnel (an `[[ipsec.tunnel]]`).
    pub tunnel: String,
    /// `out` or `in`.
    pub direction: String,
    /// SPI, 256 and above.
    pub spi: u32,
    /// `aes-128-gcm`, `aes-256-gcm`, `chacha20-poly1305`, `aes-128-cbc`, `aes-256-cbc`,
    /// `null`.
    pub encryption: String,
    /// `none` (the default, with the AEADs), `hmac-sha1-96`, `hmac-sha2-256-128`,
    /// `hmac-sha2-512-256`.
    #[serde(default)]
    pub integrity: Option<String>,
    /// The encryption key in hex (with the 4-byte salt for the AEADs).
    pub encryption_key: String,
    /// The integrity key in hex (CBC only).
    #[serde(default)]
    pub integrity_key: String,
    /// Extended sequence numbers.
    #[serde(default)]
    pub esn: bool,
    /// Anti-replay window (inbound), a multiple of 64 from 64 to 65536 (default 1024).
    #[serde(default)]
    pub replay_window: Option<u32>,
}

/// What an IPsec SA change through the API did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct IpsecSaChanged {
    /// `added` or `removed`.
    pub result: String,
    /// `out` or `in`.
    pub direction: String,
    /// SPI.
    pub spi: u32,
}

/// The ESP reassembly table's counters (docs/ipsec.md, "Fragmented ESP").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct IpsecReassemblyView {
    /// Fragments taken into the table.
    pub fragments: u64,
    /// Datagrams made whole and decrypted on.
    pub reassembled: u64,
    /// Datagrams whose time ran out before their last fragment came.
    pub timed_out: u64,
    /// Datagrams given up for a newer one, their set of the table full.
    pub evicted: u64,
    /// Datagrams dropped for a bad fragment (overlap, disagreement on the end, too big).
    pub discarded: u64,
}

/// One security policy of an interface's SPD.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct IpsecPolicyView {
    /// Its index in `[[ipsec.policy]]`.
    pub index: u32,
    /// Its interface (a port or VLAN sub-interface).
    pub interface: String,
    /// `in` or `out`.
    pub direction: String,
    /// Lower first.
    pub priority: u32,
    /// Source prefix (`any`).
    pub src: String,
    /// Destination prefix (`any`).
    pub dst: String,
    /// Protocol (`any`).
    pub protocol: String,
    /// Source ports (`any`).
    pub src_ports: String,
    /// Destination ports (`any`).
    pub dst_ports: String,
    /// `protect`, `bypass` or `discard`.
    pub action: String,
    /// With protect: its SAs' SPIs.
    pub sa: Vec<u32>,
    /// Packets that matched it (since it was last changed).
    pub matches: u64,
    /// Made by IKE for a child SA of this `[[ipsec.peer]]` (policy-based), not in the
    /// config (its `index` then follows the config's policies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
}

/// One tunnel interface.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct IpsecTunnelView {
    /// Interface name.
    pub name: String,
    /// Our end.
    pub local: String,
    /// The peer's end.
    pub remote: String,
    /// The interface's IP MTU, as Linux has it (0: not found).
    pub mtu: u32,
    /// SPI of the SA it sends with (none: it drops what is routed to it).
    pub tx_spi: Option<u32>,
    /// SPIs it receives with.
    pub rx_spis: Vec<u32>,
}

/// One SA.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct IpsecSaView {
    /// Its tunnel interface.
    pub tunnel: String,
    /// `in` or `out`.
    pub direction: String,
    /// SPI.
    pub spi: u32,
    /// Encryption algorithm.
    pub encryption: String,
    /// Integrity algorithm (`none` with an AEAD).
    pub integrity: String,
    /// Extended sequence numbers.
    pub esn: bool,
    /// Anti-replay window (inbound).
    pub replay_window: u32,
    /// Outer source.
    pub src: String,
    /// Outer destination.
    pub dst: String,
    /// Outbound: whether its tunnel sends with it.
    pub active: bool,
    /// Where it came from: `config` (`[[ipsec.sa]]`) or `api` (`POST /v1/ipsec/sa`).
    #[serde(default)]
    pub source: String,
    /// Inner packets encrypted or decrypted.
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Outbound: the last sequence number sent; inbound: the highest accepted.
    pub sequence: u64,
    /// The worker holding it (its tunnel's owner; a policy SA's own): its sequence
    /// number or replay window is that worker's alone, and the other workers hand it
    /// their packets for the SA.
    #[serde(default)]
    pub worker: usize,
    /// Packets refused, by reason (only the non-zero ones): replayed, integrity_failed,
    /// sequence_overflow, other.
    pub errors: std::collections::BTreeMap<String, u64>,
    /// ESP in UDP (NAT traversal: the tunnel's `nat_t`, or a NAT IKE found): the outer
    /// UDP source port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_src_port: Option<u16>,
    /// And destination port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_dst_port: Option<u16>,
}

/// `GET /v1/nat`: NAT's rules with the sessions each opened, and each worker's table.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NatView {
    /// The rules, source rules first, each list in config order.
    pub rules: Vec<NatRuleView>,
    /// Each worker's table (empty: NAT has not run since start).
    pub workers: Vec<NatWorkerView>,
    /// Batches dropped because a session listing held a worker's table too long.
    pub busy: u64,
}

/// One NAT rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NatRuleView {
    /// `source` or `destination`.
    pub kind: String,
    /// Position in its list, from 1.
    pub index: u32,
    /// What it matches, as the config writes it.
    pub matches: String,
    /// What it translates to: `masquerade`, `exclude`, a pool, or `ADDRESS[:PORT]`.
    pub translation: String,
    /// The comment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// Sessions it opened since the rules were last changed.
    pub sessions: u64,
}

/// One worker's NAT table.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NatWorkerView {
    /// Worker.
    pub worker: u32,
    /// Sessions now.
    pub sessions: u64,
    /// Sessions it can hold.
    pub max_sessions: u64,
    /// Endpoint mappings in use.
    pub mappings: u64,
    /// Sessions created since start.
    pub created: u64,
    /// Sessions that timed out.
    pub expired: u64,
    /// New sessions refused: the table was full.
    pub refused_full: u64,
    /// New mappings refused: no free port.
    pub refused_no_port: u64,
    /// New sessions refused: their reply tuple was taken.
    pub collisions: u64,
    /// The external ports (and ICMP identifiers) this worker hands out: first and last.
    pub ports: [u16; 2],
    /// Bytes the table takes.
    pub memory_bytes: u64,
}

/// `GET /v1/nat/sessions`: the sessions a filter matches.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct NatSessionList {
    /// The sessions, worker by worker.
    pub sessions: Vec<NatSession>,
    /// More sessions matched than `limit`: the list is cut.
    pub truncated: bool,
}

/// One NAT session: its first packet as it arrived and as it left.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct NatSession {
    /// The worker that owns it.
    pub worker: u32,
    /// `tcp`, `udp` or `icmp`.
    pub protocol: String,
    /// `snat`, `dnat` or `snat+dnat`.
    pub kind: String,
    /// Source as it arrived: `ADDRESS:PORT` (ICMP: the echo identifier).
    pub inside_src: String,
    /// Destination as it arrived.
    pub inside_dst: String,
    /// Source as it left.
    pub outside_src: String,
    /// Destination as it left.
    pub outside_dst: String,
    /// TCP: what the session has seen (`syn`, `syn-ack`, `fin`, `rst`), else empty.
    pub tcp: String,
    /// Seconds until it expires without traffic.
    pub expires_s: f64,
}

/// `GET /v1/ike`: the IKE daemon's SAs and counters (`show ike sa`, `show ike child-sa`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct IkeView {
    /// Whether the daemon runs (it does once `[[ipsec.peer]]`s are configured).
    pub running: bool,
    /// IKE SAs established.
    pub established: usize,
    /// Responder SAs half-open (IKE_SA_INIT answered, no IKE_AUTH yet).
    pub half_open: usize,
    /// The IKE SAs, by peer and SPI: a page of them (`GET /v1/ike?peer=&offset=&limit=`,
    /// 10,000 by default).
    pub sas: Vec<IkeSaView>,
    /// The IKE SAs the query matches, listed or not (all of them, or the peer's).
    #[serde(default)]
    pub total: usize,
    /// Events, failures by reason and dropped messages by reason (`name` → count).
    pub counters: std::collections::BTreeMap<String, u64>,
}

/// `GET /v1/ike/summary`: what `GET /v1/ike` says without the list of SAs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct IkeSummary {
    /// Whether the daemon runs (it does once `[[ipsec.peer]]`s are configured).
    pub running: bool,
    /// IKE SAs established.
    pub established: usize,
    /// Responder SAs half-open (IKE_SA_INIT answered, no IKE_AUTH yet).
    pub half_open: usize,
    /// Child SAs of the established IKE SAs.
    pub child_sas: usize,
    /// Events, failures by reason and dropped messages by reason (`name` → count).
    pub counters: std::collections::BTreeMap<String, u64>,
}

/// One IKE SA.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct IkeSaView {
    /// The `[[ipsec.peer]]` it belongs to (`?` before a responder knows).
    pub peer: String,
    /// init_sent, auth_sent, half_open, established, rekeyed (replaced by its rekey, until
    /// the peer deletes it) or deleting.
    pub state: String,
    /// We initiated it.
    pub initiator: bool,
    /// SPIs, hex.
    pub spi_i: String,
    pub spi_r: String,
    /// Our address and port, and the peer's.
    pub local: String,
    pub remote: String,
    /// The peer's identity.
    pub remote_id: String,
    /// Its algorithms (encryption/[integrity/]PRF/DH group).
    pub proposal: String,
    /// Seconds since it was created.
    pub age_s: u64,
    /// The virtual IPs leased to the peer from its `pools` (CP), if it asked for some:
    /// `10.200.0.1`, `fd00:200::1`, or both families as `10.200.0.1, fd00:200::1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_ip: Option<String>,
    /// Its child SAs.
    pub children: Vec<IkeChildView>,
}

/// One child SA (the two ESP SAs IKE installed on a tunnel).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct IkeChildView {
    pub peer: String,
    /// Our inbound SPI and the peer's (our outbound), hex.
    pub spi_in: String,
    pub spi_out: String,
    /// ESP algorithms, as `show ipsec` names them.
    pub proposal: String,
    /// Traffic selectors.
    pub local_ts: Vec<String>,
    pub remote_ts: Vec<String>,
    pub age_s: u64,
}

/// What `ipsec initiate|terminate` did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct IkeChanged {
    pub peer: String,
    /// `initiating` or `terminated`.
    pub result: String,
    /// IKE SAs deleted (terminate).
    pub sas: usize,
}

/// `GET /v1/qos`: the policers with their colour counts, and every scheduled port's class
/// queues with their counters (summed over the workers).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QosView {
    /// The policers (`[[qos.policer]]`).
    pub policers: Vec<QosPolicerView>,
    /// The ports with an output policy.
    pub ports: Vec<QosPortView>,
    /// The interfaces whose input policy has classifier rules, with what each rule
    /// matched there.
    #[serde(default)]
    pub inputs: Vec<QosInputView>,
}

/// An interface's input policy and its rules' counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QosInputView {
    /// The interface.
    pub interface: String,
    /// Its input policy.
    pub policy: String,
    /// The policy's `[[qos.policy.rule]]`s, in order.
    pub rules: Vec<QosRuleView>,
}

/// One classifier rule on one interface.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QosRuleView {
    /// Its position in the policy, from 1.
    pub index: u32,
    /// The class it puts packets in.
    pub class: String,
    /// Its matches (`src 10.1.0.0/16 protocol udp dport 5060`, or `any`).
    pub matches: String,
    /// Packets it matched (summed over the workers).
    pub packets: u64,
    /// Their bytes (IP length).
    pub bytes: u64,
}

/// One policer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QosPolicerView {
    /// Its name.
    pub name: String,
    /// `srtcm`, `trtcm` or `rfc4115`.
    pub kind: String,
    /// Committed rate, bit/s.
    pub cir_bps: u64,
    /// trTCM's peak or RFC 4115's excess rate, bit/s (0 for srTCM).
    pub pir_bps: u64,
    /// Packets marked green.
    pub green_packets: u64,
    /// Bytes (IP length) marked green.
    pub green_bytes: u64,
    /// Packets marked yellow.
    pub yellow_packets: u64,
    /// Bytes marked yellow.
    pub yellow_bytes: u64,
    /// Packets marked red.
    pub red_packets: u64,
    /// Bytes marked red.
    pub red_bytes: u64,
}

/// One port's scheduler.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QosPortView {
    /// The port.
    pub interface: String,
    /// Its output policy.
    pub policy: String,
    /// The shaper's rate, bit/s (0: none).
    pub shaper_bps: u64,
    /// Its classes, in the policy's order (their counters include the pipes' packets).
    pub classes: Vec<QosClassView>,
    /// Its pipes (`[[qos.policy.pipe]]`), in the policy's order.
    #[serde(default)]
    pub pipes: Vec<QosPipeView>,
    /// Its subports (`[[qos.policy.subport]]`), in the policy's order, with their pipes'
    /// counters summed.
    #[serde(default)]
    pub subports: Vec<QosSubportView>,
}

/// One subport of a port: a rate shared by the pipes under it. It has no queue of its
/// own: its counters are its pipes', summed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QosSubportView {
    /// Its name.
    pub name: String,
    /// Its shaper's rate, bit/s.
    pub rate_bps: u64,
    /// Its shaper's burst, bytes.
    pub burst_bytes: u64,
    /// The most packets its pipes hold together in each worker (none: no limit but
    /// theirs).
    #[serde(default)]
    pub limit: Option<u64>,
    /// The pipes under it.
    pub pipes: u64,
    /// Packets its pipes queued.
    pub enqueued: u64,
    /// Packets its pipes sent.
    pub sent: u64,
    /// Bytes its pipes sent.
    pub sent_bytes: u64,
    /// Packets its pipes dropped, for any reason.
    pub dropped: u64,
    /// Packets in its pipes' queues now.
    pub depth: u64,
}

/// One pipe of a port: a shaper and class queues for the packets to its destinations.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QosPipeView {
    /// Its name.
    pub name: String,
    /// The pipe profile (`[[qos.policy.pipe_profile]]`) it takes its parameters from, if
    /// any.
    #[serde(default)]
    pub profile: Option<String>,
    /// The subport (`[[qos.policy.subport]]`) it is under, if any.
    #[serde(default)]
    pub subport: Option<String>,
    /// Its shaper's rate, bit/s.
    pub rate_bps: u64,
    /// The limit of each of its class queues, packets per worker.
    pub limit: u64,
    /// Its classes' maximum rates within it, bit/s, by class name (`max_rates`: those that
    /// have one).
    #[serde(default)]
    pub max_rates_bps: BTreeMap<String, u64>,
    /// Its classes' minimum rates within it, bit/s, by class name (`min_rates`: those that
    /// have one).
    #[serde(default)]
    pub min_rates_bps: BTreeMap<String, u64>,
    /// Its destination prefixes (a packet is the pipe's with the longest one that matches).
    pub dst: Vec<String>,
    /// Packets queued.
    pub enqueued: u64,
    /// Bytes queued.
    pub enqueued_bytes: u64,
    /// Packets sent.
    pub sent: u64,
    /// Bytes sent.
    pub sent_bytes: u64,
    /// Packets dropped because its queue (or all the port's queues together) was full.
    pub dropped_tail: u64,
    /// Packets CoDel dropped.
    pub dropped_codel: u64,
    /// Packets dropped when the port's scheduler was replaced or removed.
    pub dropped_flush: u64,
    /// Packets WRED dropped on arrival.
    pub dropped_wred: u64,
    /// Packets in its queues now.
    pub depth: u64,
    /// Bytes in its queues now.
    pub depth_bytes: u64,
    /// Longest time a packet waited, ns.
    pub sojourn_max_ns: u64,
    /// Mean time the packets sent waited, ns.
    pub sojourn_mean_ns: u64,
}

/// One class queue of a port.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QosClassView {
    /// Its name.
    pub name: String,
    /// Strict priority (lower first), if strict.
    pub priority: Option<u8>,
    /// DRR weight, if weighted.
    pub weight: Option<u32>,
    /// Minimum rate, bit/s (0: none).
    pub min_bps: u64,
    /// Maximum rate, bit/s (0: none).
    pub max_bps: u64,
    /// Queue limit, packets per worker.
    pub limit: u64,
    /// Whether CoDel runs on its queue.
    pub codel: bool,
    /// Whether WRED runs on its queue.
    pub wred: bool,
    /// Packets queued.
    pub enqueued: u64,
    /// Bytes queued.
    pub enqueued_bytes: u64,
    /// Packets sent.
    pub sent: u64,
    /// Bytes sent.
    pub sent_bytes: u64,
    /// Packets dropped because the queue was full.
    pub dropped_tail: u64,
    /// Packets CoDel dropped.
    pub dropped_codel: u64,
    /// Packets dropped when the port's scheduler was replaced or removed.
    pub dropped_flush: u64,
    /// Packets WRED dropped on arrival (early, or with the average at its maximum).
    pub dropped_wred: u64,
    /// Packets in the queue now.
    pub depth: u64,
    /// Bytes in the queue now.
    pub depth_bytes: u64,
    /// Longest time a packet waited, ns.
    pub sojourn_max_ns: u64,
    /// Mean time the packets sent waited, ns.
    pub sojourn_mean_ns: u64,
}
