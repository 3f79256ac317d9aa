//! Plain data the mirror reports: what the fast path needs of each kernel object, nothing more.

use std::net::IpAddr;

/// `NUD_INCOMPLETE`: resolution in progress, no link-layer address yet.
pub const NUD_INCOMPLETE: u16 = 0x01;
/// `NUD_REACHABLE`: confirmed recently.
pub const NUD_REACHABLE: u16 = 0x02;
/// `NUD_STALE`: usable, to be re-confirmed on next use.
pub const NUD_STALE: u16 = 0x04;
/// `NUD_DELAY`: usable, confirmation pending.
pub const NUD_DELAY: u16 = 0x08;
/// `NUD_PROBE`: usable, being probed.
pub const NUD_PROBE: u16 = 0x10;
/// `NUD_FAILED`: resolution failed.
pub const NUD_FAILED: u16 = 0x20;
/// `NUD_NOARP`: no resolution needed (point-to-point, multicast).
pub const NUD_NOARP: u16 = 0x40;
/// `NUD_PERMANENT`: statically configured.
pub const NUD_PERMANENT: u16 = 0x80;

/// `RT_TABLE_MAIN`, the table the fast path forwards from.
pub const RT_TABLE_MAIN: u32 = 254;
/// `RT_TABLE_LOCAL`, the kernel's table of local and broadcast addresses.
pub const RT_TABLE_LOCAL: u32 = 255;

/// A network interface (`RTM_NEWLINK`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    /// Kernel interface index.
    pub ifindex: u32,
    /// Interface name (`IFLA_IFNAME`).
    pub name: String,
    /// Ethernet address; `None` for links without a 6-byte hardware address (tun, gre, ...).
    pub mac: Option<[u8; 6]>,
    /// MTU in bytes (`IFLA_MTU`); 0 if the kernel did not say.
    pub mtu: u32,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// Operationally up: `IFF_RUNNING` or `IFLA_OPERSTATE` up.
    pub oper_up: bool,
    /// Carrier (`IFF_LOWER_UP`): set as the driver sees it, while `oper_up` follows a
    /// moment later (the kernel's link watch updates the operational state in batches).
    pub carrier: bool,
    /// A point-to-point link (`IFF_POINTOPOINT`: a TUN device, such as an IPsec tunnel
    /// interface): no link-layer addresses and no neighbours to resolve; whatever is
    /// routed to it goes to the other end.
    pub point_to_point: bool,
}

/// An interface address (`RTM_NEWADDR`).
///
/// For IPv4 point-to-point addresses this is the local end (`IFA_LOCAL`), not the peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Addr {
    /// Interface the address is on.
    pub ifindex: u32,
    /// The address itself.
    pub addr: IpAddr,
    /// Prefix length of the connected subnet.
    pub prefix_len: u8,
}

/// A neighbour (ARP or NDP) entry (`RTM_NEWNEIGH`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Neigh {
    /// Interface the neighbour is on.
    pub ifindex: u32,
    /// Protocol address.
    pub ip: IpAddr,
    /// Link-layer address, when the kernel knows one.
    pub mac: Option<[u8; 6]>,
    /// `NUD_*` state bits.
    pub state: u16,
}

impl Neigh {
    /// Whether the fast path may send to this neighbour: it has a MAC and a state in which the
    /// kernel itself would use it (REACHABLE, STALE, DELAY, PROBE, PERMANENT or NOARP).
    pub fn usable(&self) -> bool {
        const USABLE: u16 =
            NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT | NUD_NOARP;
        self.mac.is_some() && self.state & USABLE != 0
    }
}

/// What a route does with matching packets (`rtm_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteKind {
    /// Forward via the next hops (`RTN_UNICAST`).
    Unicast,
    /// Silently drop (`RTN_BLACKHOLE`).
    Blackhole,
    /// Drop with ICMP unreachable (`RTN_UNREACHABLE`).
    Unreachable,
    /// Drop with ICMP administratively prohibited (`RTN_PROHIBIT`).
    Prohibit,
    /// Deliver locally (`RTN_LOCAL`).
    Local,
    /// Deliver locally as broadcast (`RTN_BROADCAST`).
    Broadcast,
    /// Any other `RTN_*` value (anycast, multicast, throw, ...), raw.
    Other(u8),
}

/// A route's next hops, stored inline when there is one (nearly every route): decoding a
/// route message then allocates nothing (a `Vec` here was a malloc and a free per route,
/// 5-8 % of `ferrouter-lab bench route-sync`).
pub type NextHops = smallvec::SmallVec<[RouteNextHop; 1]>;

/// One next hop of a route.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RouteNextHop {
    /// Gateway (`RTA_GATEWAY` or `RTA_VIA`); `None` for a directly connected next hop.
    pub gateway: Option<IpAddr>,
    /// Output interface; `None` when the kernel gave none.
    pub ifindex: Option<u32>,
    /// ECMP weight, `rtnh_hops + 1` (1 for a single-path route).
    pub weight: u16,
}

/// A route (`RTM_NEWROUTE`), in any table.
///
/// Each netlink message is reported as it came:
/// - IPv4 and IPv6 multipath routes carry every next hop in `nexthops` (`RTA_MULTIPATH`).
/// - IPv6 keeps routes with the same table, destination and metric as *one* multipath route.
///   Adding a next hop to it (`ip -6 route append`, or a daemon doing the same) produces a
///   `NewRoute` that carries the whole resulting set; deleting one next hop of it produces a
///   `DelRoute` carrying only the removed next hop, after which the others remain. A
///   consumer keyed on (table, dst, dst_len, priority) should therefore replace on `NewRoute`
///   and, for IPv6, remove only the listed next hops on `DelRoute` (removing the route when
///   none remain).
/// - Routes that use kernel nexthop objects (`RTA_NH_ID`, FRR's default on recent kernels)
///   are expanded by the kernel as long as `net.ipv4.nexthop_compat_mode` is 1 (the
///   default); with it at 0 such routes arrive with empty `nexthops`.
/// - Routes without any next hop (blackhole, unreachable, prohibit) have empty `nexthops`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// Routing table id (`RTA_TABLE`, falling back to `rtm_table`); main is 254.
    pub table: u32,
    /// Destination prefix address (`0.0.0.0` or `::` for a default route).
    pub dst: IpAddr,
    /// Destination prefix length.
    pub dst_len: u8,
    /// Route type.
    pub kind: RouteKind,
    /// Originating protocol (`RTPROT_*`: 2 kernel, 3 boot, 4 static, 12 bird, 186 bgp, ...).
    pub protocol: u8,
    /// Metric (`RTA_PRIORITY`); 0 when absent.
    pub priority: u32,
    /// Next hops; see the type's documentation for what each message carries.
    pub nexthops: NextHops,
}

/// A change in the kernel's state, in the order the kernel reported it.
///
/// `New*` events are upserts (the kernel also sends them for changes to existing objects);
/// `Del*` events remove.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A link appeared or changed.
    NewLink(Link),
    /// The link with this ifindex is gone.
    DelLink(u32),
    /// An address was added or changed.
    NewAddr(Addr),
    /// An address was removed.
    DelAddr(Addr),
    /// A neighbour entry appeared or changed state.
    NewNeigh(Neigh),
    /// A neighbour entry was removed.
    DelNeigh(Neigh),
    /// A route was added or replaced.
    NewRoute(Route),
    /// A route (or, for IPv6 multipath, some of its next hops) was removed.
    DelRoute(Route),
    /// The kernel dropped notifications (ENOBUFS): state is unknown, do a full dump.
    Overflow,
}

/// The kernel's whole state at one point in time, as [`crate::Mirror::dump`] read it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Every link.
    pub links: Vec<Link>,
    /// Every IPv4 and IPv6 address.
    pub addrs: Vec<Addr>,
    /// Every IPv4 and IPv6 neighbour entry, in any state.
    pub neighs: Vec<Neigh>,
    /// Every IPv4 and IPv6 route of every table.
    pub routes: Vec<Route>,
}
