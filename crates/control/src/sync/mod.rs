//! Mirror of the kernel's forwarding state into the fast path's FIB.
//!
//! The kernel stays the source of truth (iproute2, FRR's zebra, BIRD all program it); this
//! module turns its links, addresses, neighbours and routes into FIB entries and next hops,
//! the way VPP's linux-cp does:
//!
//! * local-table (255) `local`/`broadcast` routes → `Local` (punt: the kernel answers);
//! * main-table (254) routes, lowest metric wins: `blackhole`/`unreachable`/`prohibit` →
//!   `Drop`; unicast via a gateway → an adjacency to that neighbour (resolved when the kernel
//!   knows its MAC, `Glean` until then); connected (no gateway) → `Glean` on the port; several
//!   next hops → an ECMP group; next hops through interfaces the fast path does not own →
//!   `Local` (the kernel has the packet and decides);
//! * every usable neighbour on a port → a host route (/32, /128) to its adjacency, unless a
//!   route of exactly that prefix exists — this is how directly connected hosts are reached
//!   without a punt.
//!
//! Adjacencies are shared next-hop objects: when a neighbour's MAC or a port's MAC/MTU
//! changes, one `set_next_hop` switches every route through it atomically.

use std::net::IpAddr;

use std::alloc::Layout;
use std::ptr::NonNull;

use allocator_api2::alloc::{AllocError, Allocator, Global};
use hashbrown::hash_map::Entry;
use rustc_hash::FxBuildHasher;

use dataplane::{Interfaces, PortInfo};
use fib::{Adjacency, FibWriter, NextHop, NextHopId};
use linux::{Addr, Event, Link, Neigh, NextHops, Route, RouteKind, RouteNextHop, Snapshot};

use rustc_hash::{FxHashMap, FxHashSet};
use smallvec::SmallVec;

use crate::model::Oper;

const MAIN_TABLE: u32 = 254;
const LOCAL_TABLE: u32 = 255;

/// Where a route the sync holds came from. Kernel routes of tables other than main and
/// local are not mirrored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The kernel's local table: the router's own and broadcast addresses.
    KernelLocal,
    /// The kernel's main table: connected routes, and those routing daemons (FRR's zebra,
    /// BIRD) or an operator install, each already the daemon's own choice; all but
    /// [`Origin::Static`]'s.
    KernelMain,
    /// Static routes: the config's `[[route]]`s, which Ferrouter installs in the kernel's
    /// main table with `proto static` (an operator's `ip route add ... proto static` counts
    /// as one too).
    Static,
    /// A best path of ferrouter's own BGP speaker.
    Bgp,
}

impl Origin {
    /// The origin of a kernel route of `table` installed by `protocol` (`RTPROT_*`), if the
    /// sync mirrors that table.
    pub fn of_kernel_route(table: u32, protocol: u8) -> Option<Origin> {
        match table {
            MAIN_TABLE if protocol == RTPROT_STATIC => Some(Origin::Static),
            MAIN_TABLE => Some(Origin::KernelMain),
            LOCAL_TABLE => Some(Origin::KernelLocal),
            _ => None,
        }
    }

    /// The kernel table of a kernel route (`None` for the speaker's).
    pub fn kernel_table(self) -> Option<u32> {
        match self {
            Origin::KernelMain | Origin::Static => Some(MAIN_TABLE),
            Origin::KernelLocal => Some(LOCAL_TABLE),
            Origin::Bgp => None,
        }
    }

    /// Administrative distance: between a prefix's routes of different origins, the lower
    /// wins; then the lower metric. By default the kernel's main table comes first (what
    /// an operator or a routing daemon put there is deliberate), then the speaker's BGP
    /// paths, which install only where the kernel has no route. (The local table is not
    /// ranked: a local address always punts to the kernel.)
    pub fn distance(self, d: Distances) -> u8 {
        match self {
            Origin::KernelLocal => 0,
            Origin::KernelMain => d.kernel,
            Origin::Static => d.static_routes,
            Origin::Bgp => d.bgp,
        }
    }
}

/// The administrative distances of the route origins that rank against each other
/// (`[distance]` in the config; a key left out keeps its default).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Distances {
    /// Routes of the kernel's main table (connected, FRR, BIRD, an operator's): 1 by
    /// default.
    pub kernel: u8,
    /// Static routes (`[[route]]`, `proto static` in the kernel): 1 by default, so they
    /// rank with the kernel's other routes by metric; above `kernel`, a routing daemon's
    /// route for the same prefix wins (a floating static route).
    #[serde(rename = "static")]
    pub static_routes: u8,
    /// Best paths of ferrouter's own BGP speaker: 20 by default (eBGP's in FRR), so the
    /// kernel's routes win; below `kernel`, the speaker's paths win instead.
    pub bgp: u8,
}

impl Default for Distances {
    fn default() -> Self {
        Distances {
            kernel: 1,
            static_routes: 1,
            bgp: 20,
        }
    }
}
/// The kernel's protocol number for static routes (`RTPROT_STATIC`), given to `[[route]]`s.
const RTPROT_STATIC: u8 = 4;
/// The kernel's protocol number for BGP routes (`RTPROT_BGP`), given to the speaker's.
const RTPROT_BGP: u8 = 186;

/// A prefix in the FIB.
pub type Prefix = (IpAddr, u8);

/// What a shared next hop stands for (the key that deduplicates it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum NhKey {
    /// Neighbour `ip` on interface `ifindex`.
    Adj(u32, IpAddr),
    /// Unresolved destinations on a connected interface.
    Glean(u32),
    /// ECMP group of these member ids (sorted).
    Group(Vec<NextHopId>),
    /// Discard.
    Drop,
    /// Punt to the kernel.
    Local,
}

struct NhEntry {
    key: NhKey,
    refs: usize,
}

/// Where an installed prefix came from (for `show routes`).
pub use crate::model::RouteSource as Source;

#[derive(Clone, Copy, Debug)]
struct Installed {
    nh: NextHopId,
    source: Source,
}

pub use crate::model::SyncStats;

/// What a prefix's routes ask for, read off its entry: `desired` turns it into a next hop.
enum Want {
    /// A local-table `local`/`broadcast` route: the kernel's.
    Local,
    /// The preferred route, unicast with one next hop: that hop's key (and whether it is
    /// the kernel's or the BGP speaker's).
    One(NhKey, Source),
    /// The preferred main-table route, any other (ECMP, blackhole, ...): its type and hops.
    Other(RouteKind, HopsId),
    /// No route that installs anything (a neighbour's host route may still apply).
    Nothing,
}

/// Whether a route next hop can carry traffic: not through a link in `down`.
#[inline]
fn hop_alive(h: &RouteNextHop, down: &FxHashSet<u32>) -> bool {
    down.is_empty() || h.ifindex.is_none_or(|i| !down.contains(&i))
}

/// What `routes` (one prefix's) ask for. A unicast route whose every next hop is through a
/// link in `down` (admin down or no carrier) is passed over, as the kernel passes over dead
/// next hops: a route of another metric, or a covering prefix, carries the traffic.
fn want(routes: &[Stored], hop_lists: &HopLists, down: &FxHashSet<u32>, dist: Distances) -> Want {
    let local = routes.iter().any(|r| {
        r.origin == Origin::KernelLocal && matches!(r.kind, RouteKind::Local | RouteKind::Broadcast)
    });
    if local {
        return Want::Local;
    }
    let best = routes
        .iter()
        .filter(|r| {
            r.origin != Origin::KernelLocal
                && !matches!(
                    r.kind,
                    RouteKind::Local | RouteKind::Broadcast | RouteKind::Other(_)
                )
                && (down.is_empty() || r.kind != RouteKind::Unicast || {
                    let hops = hop_lists.get(r.hops);
                    hops.is_empty() || hops.iter().any(|h| hop_alive(h, down))
                })
        })
        .min_by_key(|r| (r.origin.distance(dist), r.metric));
    match best {
        Some(r) => match (r.kind, hop_lists.get(r.hops)) {
            (RouteKind::Unicast, [h]) => Want::One(
                hop_key(h),
                if r.origin == Origin::Bgp {
                    Source::Bgp
                } else {
                    Source::Route
                },
            ),
            _ => Want::Other(r.kind, r.hops),
        },
        None => Want::Nothing,
    }
}

/// Id of an interned next-hop list ([`HopLists`]).
type HopsId = u32;

/// A mirrored kernel route of a prefix (the prefix is its key in `Sync::prefixes`; the
/// route's protocol is not needed).
#[derive(Clone, Copy, Debug)]
struct Stored {
    origin: Origin,
    metric: u32,
    hops: HopsId,
    kind: RouteKind,
}

/// All the sync knows about one prefix: the kernel's routes for it (keyed by table and
/// metric; nearly always one, stored inline) and what it installed in the FIB.
///
/// One map for both, and next-hop lists interned, so a route change costs one lookup in a
/// table of millions of prefixes and no allocation: with a map of `Vec<Route>` per
/// prefix beside a map of installed prefixes, each change took several cache misses there
/// (the two maps, the `Vec`, the route's next-hop `Vec`), and those lookups were 25 % of
/// the route-sync benchmark.
#[derive(Default)]
struct PrefixState {
    routes: SmallVec<[Stored; 1]>,
    installed: Option<Installed>,
}

/// Allocations this large or larger get huge pages ([`HugePages`]).
const HUGE_PAGE: usize = 2 << 20;

/// Allocator of the prefix map: tables of 2 MiB and more get their own 2 MiB-aligned
/// anonymous mapping with transparent huge pages requested (`MADV_HUGEPAGE`), as the FIB's
/// own tables do; anything smaller comes from the global allocator.
///
/// Each route change reads one random slot of a table of millions (120 MB at 1.5M
/// prefixes); with 4 KiB pages nearly every such read was also a TLB miss. In
/// `ferrouter-lab bench route-sync` (1M IPv4 + 500K IPv6) huge pages for the process's large
/// allocations (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`) raised the rate per CPU-second by
/// about 20 %; this allocator does it for this table without any setting.
#[derive(Clone, Copy, Debug, Default)]
struct HugePages;

impl HugePages {
    fn huge(layout: &Layout) -> bool {
        layout.size() >= HUGE_PAGE && layout.align() <= HUGE_PAGE
    }
}

// SAFETY: memory handed out stays valid until `deallocate`; large blocks are whole private
// mappings (never shared, unmapped exactly once), small ones are the global allocator's.
unsafe impl Allocator for HugePages {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if !Self::huge(&layout) {
            return Global.allocate(layout);
        }
        let len = layout.size().next_multiple_of(HUGE_PAGE);
        let map_len = len + HUGE_PAGE;
        // SAFETY: a fresh anonymous private mapping; the kernel picks the address.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(AllocError);
        }
        let base = base as usize;
        let start = base.next_multiple_of(HUGE_PAGE);
        // Keep exactly [start, start + len): 2 MiB aligned, so it can be all huge pages.
        // SAFETY: both ranges lie inside the mapping just made and outside the kept part.
        unsafe {
            if start > base {
                libc::munmap(base as *mut libc::c_void, start - base);
            }
            let tail = base + map_len - (start + len);
            if tail > 0 {
                libc::munmap((start + len) as *mut libc::c_void, tail);
            }
            // Best effort: without huge pages the table only costs more TLB misses.
            libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        }
        let ptr = NonNull::new(start as *mut u8).ok_or(AllocError)?;
        Ok(NonNull::slice_from_raw_parts(ptr, len))
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        if !Self::huge(&layout) {
            // SAFETY: a small block, so `Global` allocated it with this layout.
            return unsafe { Global.deallocate(ptr, layout) };
        }
        // SAFETY: a large block is a whole mapping of this rounded length made by
        // `allocate`, and the caller no longer uses it.
        unsafe {
            libc::munmap(
                ptr.as_ptr().cast(),
                layout.size().next_multiple_of(HUGE_PAGE),
            );
        }
    }
}

/// Prefix → its state, in huge pages.
type PrefixMap = hashbrown::HashMap<Prefix, PrefixState, FxBuildHasher, HugePages>;

/// Interned next-hop lists of mirrored routes. Routes share few distinct lists (one per
/// gateway, or per ECMP set), so a stored route holds a 4-byte id instead of a `Vec`.
#[derive(Default)]
struct HopLists {
    lists: Vec<HopList>,
    ids: FxHashMap<Box<[RouteNextHop]>, HopsId>,
    free: Vec<HopsId>,
}

#[derive(Default)]
struct HopList {
    hops: Box<[RouteNextHop]>,
    refs: u32,
}

impl HopLists {
    /// The id of `hops` (in this order), with a reference taken.
    fn intern(&mut self, hops: &[RouteNextHop]) -> HopsId {
        if let Some(&id) = self.ids.get(hops) {
            self.lists[id as usize].refs += 1;
            return id;
        }
        let list = HopList {
            hops: hops.into(),
            refs: 1,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.lists[id as usize] = list;
                id
            }
            None => {
                self.lists.push(list);
                HopsId::try_from(self.lists.len() - 1).expect("fewer than 2^32 next-hop lists")
            }
        };
        self.ids.insert(hops.into(), id);
        id
    }

    fn get(&self, id: HopsId) -> &[RouteNextHop] {
        &self.lists[id as usize].hops
    }

    fn release(&mut self, id: HopsId) {
        let l = &mut self.lists[id as usize];
        l.refs -= 1;
        if l.refs == 0 {
            let hops = std::mem::take(&mut l.hops);
            self.ids.remove(&hops);
            self.free.push(id);
        }
    }
}

/// The interface whose connected subnet (of `addrs`, the router's addresses) holds `ip`,
/// the longest such subnet winning; `None` if `ip` is on none, is one of the router's own
/// addresses, or is IPv6 link-local (fe80::/10 is on every interface: which one a BGP next
/// hop there means is the session's, which this does not know).
pub fn connected_in(addrs: &[Addr], ip: IpAddr) -> Option<u32> {
    if let IpAddr::V6(a) = ip {
        if a.segments()[0] & 0xffc0 == 0xfe80 {
            return None;
        }
    }
    if addrs.iter().any(|a| a.addr == ip) {
        return None;
    }
    addrs
        .iter()
        .filter(|a| {
            a.addr.is_ipv4() == ip.is_ipv4()
                && masked(a.addr, a.prefix_len) == masked(ip, a.prefix_len)
        })
        .max_by_key(|a| a.prefix_len)
        .map(|a| a.ifindex)
}

/// The speaker's route for `p` through `hops`, as the sync stores it.
fn bgp_route(p: Prefix, hops: NextHops) -> Route {
    Route {
        // Not a kernel table: the sync stores it with `Origin::Bgp`.
        table: 0,
        dst: p.0,
        dst_len: p.1,
        kind: RouteKind::Unicast,
        protocol: RTPROT_BGP,
        priority: 0,
        nexthops: hops,
    }
}

/// The next-hop key of one route next hop.
fn hop_key(h: &RouteNextHop) -> NhKey {
    match (h.gateway, h.ifindex) {
        (Some(gw), Some(ifx)) => NhKey::Adj(ifx, gw),
        (None, Some(ifx)) => NhKey::Glean(ifx),
        // A gateway with no interface can't be resolved here: the kernel decides.
        _ => NhKey::Local,
    }
}

/// The mirror state and the FIB writer it programs.
pub struct Sync {
    writer: FibWriter,
    /// Configured port names, index = port id.
    port_names: Vec<String>,
    /// How each port's punts reach the kernel (set once its backend is known).
    punt_paths: Vec<dataplane::interfaces::PuntPath>,
    /// Per port: its tags, for VLAN sub-interfaces.
    vlans: Vec<Option<dataplane::interfaces::VlanTags>>,
    links: FxHashMap<u32, Link>,
    addrs: Vec<Addr>,
    neighs: FxHashMap<(u32, IpAddr), Neigh>,
    /// Per prefix, its routes keyed by (table, metric) and what is installed: a refresh
    /// looks at one prefix's few routes (a single map keyed by (table, prefix, metric) made
    /// each refresh a scan of the whole table — quadratic at 1M — and a B-tree spent 40 %
    /// of the sync comparing keys). An entry exists while the prefix has a route or an
    /// installed FIB entry (a neighbour's host route has only the latter).
    prefixes: PrefixMap,
    /// Next-hop lists of the routes in `prefixes`.
    hop_lists: HopLists,
    nh: FxHashMap<NextHopId, NhEntry>,
    nh_by_key: FxHashMap<NhKey, NextHopId>,
    /// Links that cannot carry traffic (admin down, no carrier, or a VLAN sub-interface
    /// whose parent is either): next hops through them are not used.
    down: FxHashSet<u32>,
    /// How the route origins rank ([`Origin::distance`]).
    distances: Distances,
    stats: SyncStats,
    iface_version: u64,
}

/// Whether a link can carry traffic: admin up, with carrier. The carrier bit
/// (`IFF_LOWER_UP`) counts as well as the operational state (`IFF_RUNNING`), which the
/// kernel sets up to a second later: a link just brought up forwards at once.
fn carries(l: &Link) -> bool {
    l.up && (l.carrier || l.oper_up)
}

/// A port's link as `show interfaces` reports it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PortLink {
    /// Administratively up (`IFF_UP`).
    pub admin_up: bool,
    /// `up`, `no-carrier` (admin up, no carrier) or `down`.
    pub oper: Oper,
    /// Why it does not forward, when it does not.
    pub reason: Option<String>,
}

fn mac_str(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn masked(a: IpAddr, l: u8) -> IpAddr {
    match a {
        IpAddr::V4(v) => IpAddr::V4(
            (u32::from(v)
                & if l == 0 {
                    0
                } else {
                    u32::MAX << (32 - l.min(32))
                })
            .into(),
        ),
        IpAddr::V6(v) => IpAddr::V6(
            (u128::from(v)
                & if l == 0 {
                    0
                } else {
                    u128::MAX << (128 - l.min(128))
                })
            .into(),
        ),
    }
}

fn host_len(ip: &IpAddr) -> u8 {
    if ip.is_ipv4() {
        32
    } else {
        128
    }
}

impl Sync {
    /// A sync programming `writer` for the given ports (index = port id).
    pub fn new(writer: FibWriter, port_names: Vec<String>) -> Sync {
        Sync {
            writer,
            port_names,
            punt_paths: Vec::new(),
            vlans: Vec::new(),
            links: FxHashMap::default(),
            addrs: Vec::new(),
            neighs: FxHashMap::default(),
            prefixes: PrefixMap::with_hasher_in(FxBuildHasher, HugePages),
            hop_lists: HopLists::default(),
            nh: FxHashMap::default(),
            nh_by_key: FxHashMap::default(),
            down: FxHashSet::default(),
            distances: Distances::default(),
            stats: SyncStats::default(),
            iface_version: 0,
        }
    }

    /// Set the administrative distances (before the first resync: routes are ranked as
    /// they arrive).
    pub fn set_distances(&mut self, d: Distances) {
        self.distances = d;
    }

    /// How each port's punts reach the kernel, by port id (the backends decide: see
    /// [`dataplane::interfaces::PuntPath`]).
    pub fn set_punt_paths(&mut self, paths: Vec<dataplane::interfaces::PuntPath>) {
        self.punt_paths = paths;
        self.iface_version += 1;
    }

    /// The tags of each port that is a VLAN sub-interface, by port id.
    pub fn set_vlans(&mut self, vlans: Vec<Option<dataplane::interfaces::VlanTags>>) {
        self.vlans = vlans;
        self.iface_version += 1;
    }

    /// Counters.
    pub fn stats(&self) -> SyncStats {
        self.stats
    }

    /// Bumped whenever the interface table (MACs, MTUs, addresses) may have changed.
    pub fn interfaces_version(&self) -> u64 {
        self.iface_version
    }

    /// The FIB writer (for memory figures).
    pub fn writer(&self) -> &FibWriter {
        &self.writer
    }

    fn port_of(&self, ifindex: u32) -> Option<u16> {
        let link = self.links.get(&ifindex)?;
        self.port_names
            .iter()
            .position(|n| *n == link.name)
            .map(|p| p as u16)
    }

    /// The IP MTU of port `port`, whose link is `link`: the link's; for a VLAN
    /// sub-interface, at most what its parent carries with the tags (`VlanTags::max_mtu`).
    fn port_mtu(&self, port: u16, link: Option<&Link>) -> u16 {
        let own = link.map_or(1500, |l| l.mtu.min(u16::MAX as u32) as u16);
        let Some(t) = self.vlans.get(port as usize).copied().flatten() else {
            return own;
        };
        let parent = self
            .port_names
            .get(t.parent as usize)
            .and_then(|n| self.links.values().find(|l| &l.name == n));
        let Some(p) = parent else {
            return own;
        };
        own.min(t.max_mtu(p.mtu).min(u16::MAX as u32) as u16)
    }

    /// The MTU of Linux interface `name`, if the kernel has it.
    pub fn link_mtu(&self, name: &str) -> Option<u32> {
        self.links.values().find(|l| l.name == name).map(|l| l.mtu)
    }

    /// The ifindex of interface `name`, if the kernel has it.
    pub fn ifindex_of(&self, name: &str) -> Option<u32> {
        self.links
            .values()
            .find(|l| l.name == name)
            .map(|l| l.ifindex)
    }

    fn dev_name(&self, ifindex: u32) -> String {
        self.links
            .get(&ifindex)
            .map_or_else(|| format!("if{ifindex}"), |l| l.name.clone())
    }

    /// Every address of the router, on any interface, and the directed broadcast address
    /// of each of its IPv4 subnets (up to /30): traffic to them belongs to the kernel (the
    /// XDP program passes it up), and none of them is a valid source from outside.
    pub fn local_addresses(&self) -> Vec<IpAddr> {
        let broadcast = self.addrs.iter().filter_map(|a| match a.addr {
            IpAddr::V4(v) if a.prefix_len <= 30 => {
                let host = u32::MAX >> a.prefix_len;
                Some(IpAddr::V4((u32::from(v) | host).into()))
            }
            _ => None,
        });
        let mut v: Vec<IpAddr> = self.addrs.iter().map(|a| a.addr).chain(broadcast).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The fast path's view of its ports.
    pub fn interfaces(&self) -> Interfaces {
        let ports = self
            .port_names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let link = self.links.values().find(|l| &l.name == name);
                let ifindex = link.map(|l| l.ifindex);
                let mut ip4: Vec<u32> = Vec::new();
                let mut ip6: Vec<[u8; 16]> = Vec::new();
                for a in self.addrs.iter().filter(|a| Some(a.ifindex) == ifindex) {
                    match a.addr {
                        IpAddr::V4(v) => ip4.push(v.into()),
                        IpAddr::V6(v) => ip6.push(v.octets()),
                    }
                }
                ip4.sort_unstable();
                ip6.sort_unstable();
                PortInfo {
                    name: name.clone(),
                    mac: link.and_then(|l| l.mac).unwrap_or_default(),
                    mtu: self.port_mtu(i as u16, link),
                    ip4,
                    ip6,
                    punt_path: self.punt_paths.get(i).copied().unwrap_or_default(),
                    vlan: self.vlans.get(i).copied().flatten(),
                    down: link.is_some_and(|l| self.down.contains(&l.ifindex)),
                }
            })
            .collect();
        Interfaces {
            ports,
            own: dataplane::interfaces::OwnAddrs::new(self.local_addresses()),
        }
    }

    /// The names of the fast path's interfaces (ports, then VLAN sub-interfaces), by id.
    pub fn port_names(&self) -> &[String] {
        &self.port_names
    }

    /// The link of interface `port` (an id of [`Sync::port_names`]) for `show interfaces`
    /// and the logs; `held_down` names the interfaces the config holds down
    /// (`enabled = false`), which tells why a link is administratively down.
    pub fn port_link(&self, port: usize, held_down: &[String]) -> PortLink {
        let Some(name) = self.port_names.get(port) else {
            return PortLink {
                admin_up: false,
                oper: Oper::Down,
                reason: Some("no such port".into()),
            };
        };
        let Some(l) = self.links.values().find(|l| &l.name == name) else {
            return PortLink {
                admin_up: false,
                oper: Oper::Down,
                reason: Some(format!("{name} not found in the kernel")),
            };
        };
        if !l.up {
            let why = if held_down.contains(name) {
                "admin down by config (enabled = false)"
            } else {
                "admin down outside ferrouter (ip link set ... down)"
            };
            return PortLink {
                admin_up: false,
                oper: Oper::Down,
                reason: Some(why.into()),
            };
        }
        if !carries(l) {
            return PortLink {
                admin_up: true,
                oper: Oper::NoCarrier,
                reason: Some("no carrier".into()),
            };
        }
        if !self.link_usable(l.ifindex) {
            let parent = self
                .vlans
                .get(port)
                .copied()
                .flatten()
                .and_then(|t| self.port_names.get(t.parent as usize))
                .map_or("?", |n| n.as_str());
            return PortLink {
                admin_up: true,
                oper: Oper::Down,
                reason: Some(format!("parent port {parent} is down")),
            };
        }
        PortLink {
            admin_up: true,
            oper: Oper::Up,
            reason: None,
        }
    }
}

mod mirror;
mod program;
#[cfg(test)]
mod tests;
mod views;
