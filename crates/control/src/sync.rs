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

const MAIN_TABLE: u32 = 254;
const LOCAL_TABLE: u32 = 255;

/// Where a route the sync holds came from. Kernel routes of tables other than main and
/// local are not mirrored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The kernel's local table: the router's own and broadcast addresses.
    KernelLocal,
    /// The kernel's main table: connected and static routes, and those routing daemons
    /// (FRR's zebra, BIRD) install, each already the daemon's own choice.
    KernelMain,
    /// A best path of ferrouter's own BGP speaker.
    Bgp,
}

impl Origin {
    /// The origin of a kernel route of `table`, if the sync mirrors that table.
    pub fn of_kernel_table(table: u32) -> Option<Origin> {
        match table {
            MAIN_TABLE => Some(Origin::KernelMain),
            LOCAL_TABLE => Some(Origin::KernelLocal),
            _ => None,
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
            Origin::Bgp => d.bgp,
        }
    }
}

/// The administrative distances of the route origins that rank against each other
/// (`[distance]` in the config).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Distances {
    /// Routes of the kernel's main table (connected, static, FRR, BIRD): 1 by default.
    #[serde(default = "kernel_distance")]
    pub kernel: u8,
    /// Best paths of ferrouter's own BGP speaker: 20 by default (eBGP's in FRR), so the
    /// kernel's routes win; below `kernel`, the speaker's paths win instead.
    #[serde(default = "bgp_distance")]
    pub bgp: u8,
}

fn kernel_distance() -> u8 {
    1
}

fn bgp_distance() -> u8 {
    20
}

impl Default for Distances {
    fn default() -> Self {
        Distances {
            kernel: kernel_distance(),
            bgp: bgp_distance(),
        }
    }
}
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The router's own address (local table).
    Local,
    /// A main-table route.
    Route,
    /// A resolved neighbour's host route.
    Neighbor,
    /// A best path of ferrouter's own BGP speaker.
    Bgp,
}

#[derive(Clone, Copy, Debug)]
struct Installed {
    nh: NextHopId,
    source: Source,
}

/// A route as `show routes` prints it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RouteView {
    /// `addr/len`.
    pub prefix: String,
    /// Origin.
    pub source: Source,
    /// Next-hop description (`via 192.0.2.1 dev eth1 02:..`, `glean dev eth1`, `local`, `drop`, `ecmp [...]`).
    pub next_hop: String,
}

/// A neighbour as `show neighbors` prints it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct NeighborView {
    /// Address.
    pub ip: String,
    /// Interface.
    pub dev: String,
    /// MAC, if known.
    pub mac: Option<String>,
    /// Usable for forwarding.
    pub usable: bool,
}

/// Counters of the sync itself.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
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
    pub oper: &'static str,
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
                oper: "down",
                reason: Some("no such port".into()),
            };
        };
        let Some(l) = self.links.values().find(|l| &l.name == name) else {
            return PortLink {
                admin_up: false,
                oper: "down",
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
                oper: "down",
                reason: Some(why.into()),
            };
        }
        if !carries(l) {
            return PortLink {
                admin_up: true,
                oper: "no-carrier",
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
                oper: "down",
                reason: Some(format!("parent port {parent} is down")),
            };
        }
        PortLink {
            admin_up: true,
            oper: "up",
            reason: None,
        }
    }

    // ---- next-hop pool -------------------------------------------------------------

    fn nh_object(&self, key: &NhKey) -> NextHop {
        match key {
            NhKey::Drop => NextHop::Drop,
            NhKey::Local => NextHop::Local,
            NhKey::Glean(ifx) => match self.port_of(*ifx) {
                Some(port) => NextHop::Glean { port },
                None => NextHop::Local,
            },
            NhKey::Adj(ifx, ip) => {
                let Some(port) = self.port_of(*ifx) else {
                    return NextHop::Local;
                };
                let link = self.links.get(ifx);
                let mtu = self.port_mtu(port, link);
                match (
                    self.neighs
                        .get(&(*ifx, *ip))
                        .filter(|n| n.usable())
                        .and_then(|n| n.mac),
                    link.and_then(|l| l.mac),
                ) {
                    (Some(dst_mac), Some(src_mac)) => NextHop::Forward(Adjacency {
                        port,
                        dst_mac,
                        src_mac,
                        mtu,
                    }),
                    _ => NextHop::Glean { port },
                }
            }
            NhKey::Group(members) => NextHop::Ecmp(members.clone().into_boxed_slice()),
        }
    }

    /// Take a reference on the next hop for `key`, creating it if needed.
    fn acquire(&mut self, key: NhKey) -> Result<NextHopId, fib::FibError> {
        if let Some(&id) = self.nh_by_key.get(&key) {
            if let Some(e) = self.nh.get_mut(&id) {
                e.refs += 1;
            }
            return Ok(id);
        }
        let obj = self.nh_object(&key);
        let id = self.writer.add_next_hop(obj)?;
        self.nh.insert(
            id,
            NhEntry {
                key: key.clone(),
                refs: 1,
            },
        );
        self.nh_by_key.insert(key, id);
        Ok(id)
    }

    /// Drop a reference; the next hop (and, for groups, the members' references) goes away
    /// with the last one.
    fn release(&mut self, id: NextHopId) {
        let Some(e) = self.nh.get_mut(&id) else {
            return;
        };
        e.refs -= 1;
        if e.refs > 0 {
            return;
        }
        let key = e.key.clone();
        self.nh.remove(&id);
        self.nh_by_key.remove(&key);
        if self.writer.remove_next_hop(id).is_err() {
            self.stats.fib_errors += 1;
        }
        if let NhKey::Group(members) = key {
            for m in members {
                self.release(m);
            }
        }
    }

    /// Re-publish every next hop whose object depends on `ifindex` (or all with `None`).
    fn refresh_next_hops(&mut self, ifindex: Option<u32>) {
        let ids: Vec<(NextHopId, NhKey)> = self
            .nh
            .iter()
            .filter(|(_, e)| match (&e.key, ifindex) {
                (_, None) => true,
                (NhKey::Adj(i, _) | NhKey::Glean(i), Some(x)) => *i == x,
                _ => false,
            })
            .map(|(id, e)| (*id, e.key.clone()))
            .collect();
        for (id, key) in ids {
            let obj = self.nh_object(&key);
            if self.writer.set_next_hop(id, obj).is_err() {
                self.stats.fib_errors += 1;
            }
        }
    }

    // ---- desired state ---------------------------------------------------------------

    fn route_nh(
        &mut self,
        kind: RouteKind,
        hops: HopsId,
    ) -> Result<Option<NextHopId>, fib::FibError> {
        match kind {
            RouteKind::Blackhole | RouteKind::Unreachable | RouteKind::Prohibit => {
                return self.acquire(NhKey::Drop).map(Some)
            }
            RouteKind::Unicast => {}
            _ => return Ok(None),
        }
        let keys: SmallVec<[NhKey; 4]> = self
            .hop_lists
            .get(hops)
            .iter()
            .filter(|h| hop_alive(h, &self.down))
            .map(hop_key)
            .collect();
        let mut members = Vec::with_capacity(keys.len());
        for key in keys {
            match self.acquire(key) {
                Ok(id) => members.push(id),
                Err(e) => {
                    for m in members {
                        self.release(m);
                    }
                    return Err(e);
                }
            }
        }
        match members.len() {
            0 => Ok(None),
            1 => Ok(Some(members[0])),
            _ => {
                members.sort_unstable();
                // The group holds the members' references.
                let key = NhKey::Group(members.clone());
                if self.nh_by_key.contains_key(&key) {
                    for m in &members {
                        self.release(*m);
                    }
                }
                self.acquire(key).map(Some)
            }
        }
    }

    /// The next hop `prefix` should have now (with a reference taken), and its source,
    /// given what its routes ask for.
    ///
    /// Called for every route change: the single-next-hop case allocates nothing.
    fn desired(
        &mut self,
        p: Prefix,
        want: Want,
    ) -> Result<Option<(NextHopId, Source)>, fib::FibError> {
        let id = match want {
            Want::Local => return Ok(Some((self.acquire(NhKey::Local)?, Source::Local))),
            Want::One(key, src) => Some((self.acquire(key)?, src)),
            Want::Other(kind, hops) => self.route_nh(kind, hops)?.map(|id| (id, Source::Route)),
            Want::Nothing => None,
        };
        if id.is_some() {
            return Ok(id);
        }
        if p.1 == host_len(&p.0) {
            let on_port: Option<u32> = self
                .neighs
                .values()
                .find(|n| {
                    n.ip == p.0
                        && !n.ip.is_multicast()
                        && n.usable()
                        && !self.down.contains(&n.ifindex)
                        && self.port_of(n.ifindex).is_some()
                })
                .map(|n| n.ifindex);
            if let Some(ifx) = on_port {
                return Ok(Some((
                    self.acquire(NhKey::Adj(ifx, p.0))?,
                    Source::Neighbor,
                )));
            }
        }
        Ok(None)
    }

    /// Record what `p` has installed (an entry is created or dropped as needed).
    fn set_installed(&mut self, p: Prefix, installed: Option<Installed>) {
        match installed {
            Some(i) => self.prefixes.entry(p).or_default().installed = Some(i),
            None => {
                if let Entry::Occupied(mut e) = self.prefixes.entry(p) {
                    e.get_mut().installed = None;
                    if e.get().routes.is_empty() {
                        e.remove();
                    }
                }
            }
        }
    }

    /// Bring one prefix of the FIB in line with the mirrored state.
    fn refresh_prefix(&mut self, p: Prefix) {
        let (want, old) = match self.prefixes.get(&p) {
            Some(st) => (
                want(&st.routes, &self.hop_lists, &self.down, self.distances),
                st.installed,
            ),
            None => (Want::Nothing, None),
        };
        self.update_prefix(p, want, old);
    }

    /// Bring `p` in line with `want` (what its routes ask for); `old` is what it has
    /// installed. The callers read both off the prefix's entry, which they have just
    /// looked up anyway.
    fn update_prefix(&mut self, p: Prefix, want: Want, old: Option<Installed>) {
        let want = match self.desired(p, want) {
            Ok(w) => w,
            Err(_) => {
                self.stats.fib_errors += 1;
                return;
            }
        };
        match (want, old) {
            (Some((id, src)), Some(o)) if o.nh == id => {
                self.release(id);
                if o.source != src {
                    self.set_installed(
                        p,
                        Some(Installed {
                            nh: id,
                            source: src,
                        }),
                    );
                }
            }
            (Some((id, src)), _) => {
                let r = match p.0 {
                    IpAddr::V4(a) => self.writer.add4(a.into(), p.1, id),
                    IpAddr::V6(a) => self.writer.add6(&a.octets(), p.1, id),
                };
                if r.is_err() {
                    self.stats.fib_errors += 1;
                    self.release(id);
                    return;
                }
                self.set_installed(
                    p,
                    Some(Installed {
                        nh: id,
                        source: src,
                    }),
                );
                if let Some(o) = old {
                    self.release(o.nh);
                }
            }
            (None, Some(o)) => {
                let _ = match p.0 {
                    IpAddr::V4(a) => self.writer.del4(a.into(), p.1),
                    IpAddr::V6(a) => self.writer.del6(&a.octets(), p.1),
                };
                self.set_installed(p, None);
                self.release(o.nh);
            }
            (None, None) => {}
        }
    }

    // ---- inputs ---------------------------------------------------------------------

    /// Replace the whole mirrored state with a dump (start-up and after an overflow).
    pub fn resync(&mut self, s: Snapshot) {
        self.stats.resyncs += 1;
        self.links = s.links.into_iter().map(|l| (l.ifindex, l)).collect();
        self.update_down();
        self.addrs = s.addrs;
        self.addrs.dedup();
        self.neighs = s
            .neighs
            .into_iter()
            .map(|n| ((n.ifindex, n.ip), n))
            .collect();
        // The BGP speaker's routes are not the kernel's: they survive the resync (their
        // next-hop lists are interned again in the new lists).
        let mut bgp: Vec<(Prefix, NextHops)> = Vec::new();
        for (p, st) in self.prefixes.iter_mut() {
            for r in st.routes.iter().filter(|r| r.origin == Origin::Bgp) {
                bgp.push((*p, self.hop_lists.get(r.hops).iter().cloned().collect()));
            }
            st.routes.clear();
        }
        self.hop_lists = HopLists::default();
        for (p, hops) in bgp {
            let _ = self.put_route(Origin::Bgp, &bgp_route(p, hops));
        }
        for r in s.routes {
            if let Some(o) = Origin::of_kernel_table(r.table) {
                self.put_route(o, &r);
            }
        }
        self.refresh_next_hops(None);
        let mut prefixes: FxHashSet<Prefix> = self.prefixes.keys().copied().collect();
        prefixes.extend(self.neighs.values().map(|n| (n.ip, host_len(&n.ip))));
        for p in prefixes {
            self.refresh_prefix(p);
        }
        self.prefixes
            .retain(|_, st| !st.routes.is_empty() || st.installed.is_some());
        self.writer.reclaim();
        self.iface_version += 1;
    }

    /// Insert or replace a route of `origin` (keyed by prefix, origin and metric). Returns
    /// what the prefix's routes now ask for and what it has installed.
    fn put_route(&mut self, origin: Origin, r: &Route) -> (Want, Option<Installed>) {
        let new = Stored {
            origin,
            metric: r.priority,
            hops: self.hop_lists.intern(&r.nexthops),
            kind: r.kind,
        };
        let st = match self.prefixes.entry((r.dst, r.dst_len)) {
            Entry::Vacant(v) => {
                // A new prefix: what it wants without reading back the slot just written
                // (that read waited for the slot's cache line).
                let want = want(
                    std::slice::from_ref(&new),
                    &self.hop_lists,
                    &self.down,
                    self.distances,
                );
                v.insert(PrefixState {
                    routes: smallvec::smallvec![new],
                    installed: None,
                });
                return (want, None);
            }
            Entry::Occupied(o) => o.into_mut(),
        };
        match st
            .routes
            .iter_mut()
            .find(|s| s.origin == new.origin && s.metric == new.metric)
        {
            Some(slot) => {
                let old = std::mem::replace(slot, new);
                self.hop_lists.release(old.hops);
            }
            None => st.routes.push(new),
        }
        (
            want(&st.routes, &self.hop_lists, &self.down, self.distances),
            st.installed,
        )
    }

    /// Apply a batch of notifications in order, as [`Sync::apply`] would one by one, and
    /// empty `events`. Returns false if one of them was `Overflow` (the caller must dump and
    /// [`Sync::resync`]).
    ///
    /// Faster than one by one for route changes: each touches random places of tables far
    /// larger than the CPU caches (its prefix's entry here, its entry in the FIB's RIB and
    /// in the FIB's tables), and applying them one after the other waits for those misses
    /// one at a time. Looking a chunk's prefixes up first, in a loop of independent reads,
    /// lets the CPU fetch many at once; applying the chunk then finds them in cache.
    pub fn apply_all(&mut self, events: &mut Vec<Event>) -> bool {
        /// Events looked ahead at once (32 to 128 were best; without looking ahead the
        /// route-sync benchmark ran 15-25 % slower).
        const CHUNK: usize = 64;
        let mut ok = true;
        for chunk in events.chunks(CHUNK) {
            self.look_ahead(chunk);
            for ev in chunk {
                ok &= self.apply_ref(ev);
            }
        }
        events.clear();
        ok
    }

    /// Reads (and discards) what applying `events` will read first: see [`Sync::apply_all`].
    fn look_ahead(&self, events: &[Event]) {
        self.touch(events.iter().filter_map(|ev| match ev {
            Event::NewRoute(r) | Event::DelRoute(r) => Some((r.dst, r.dst_len)),
            _ => None,
        }));
    }

    /// Read (and discard) the places a change to each of `prefixes` reads first: its entry
    /// here, in the FIB's route store and in its table.
    fn touch(&self, prefixes: impl Iterator<Item = Prefix>) {
        let mut seen = 0usize;
        for (dst, len) in prefixes {
            seen += usize::from(self.prefixes.contains_key(&(dst, len)));
            let (in_rib, in_table) = match dst {
                IpAddr::V4(a) => (
                    self.writer.get4(a.into(), len),
                    self.writer.lookup4(a.into()),
                ),
                IpAddr::V6(a) => (
                    self.writer.get6(&a.octets(), len),
                    self.writer.lookup6(&a.octets()),
                ),
            };
            seen += usize::from(in_rib.is_some()) + in_table as usize;
        }
        std::hint::black_box(seen);
    }

    /// Apply one notification. Returns false for `Overflow` (the caller must dump and
    /// [`Sync::resync`]).
    pub fn apply(&mut self, ev: Event) -> bool {
        self.apply_ref(&ev)
    }

    /// [`Sync::apply`] on a borrowed event (route changes need nothing of it but to read
    /// it; the few other kinds are copied).
    fn apply_ref(&mut self, ev: &Event) -> bool {
        self.stats.events += 1;
        match ev {
            Event::Overflow => return false,
            Event::NewLink(l) => {
                let ifx = l.ifindex;
                let was_up = self.links.insert(ifx, l.clone()).is_some_and(|o| o.up);
                if was_up && !l.up {
                    self.flush_down_v4();
                }
                let changed = self.update_down();
                self.refresh_through(&changed);
                // A parent's MTU bounds its sub-interfaces' next hops too.
                let parent = self
                    .port_of(ifx)
                    .is_some_and(|p| self.vlans.iter().flatten().any(|t| t.parent == p));
                self.refresh_next_hops(if parent { None } else { Some(ifx) });
                self.iface_version += 1;
            }
            Event::DelLink(ifx) => {
                let ifx = *ifx;
                self.links.remove(&ifx);
                let changed = self.update_down();
                self.refresh_through(&changed);
                self.refresh_next_hops(Some(ifx));
                self.iface_version += 1;
            }
            Event::NewAddr(a) => {
                if !self.addrs.contains(a) {
                    self.addrs.push(a.clone());
                }
                self.iface_version += 1;
            }
            Event::DelAddr(a) => {
                self.addrs.retain(|x| x != a);
                self.iface_version += 1;
            }
            Event::NewNeigh(n) => {
                let (ifx, ip) = (n.ifindex, n.ip);
                self.neighs.insert((ifx, ip), n.clone());
                self.neighbor_changed(ifx, ip);
            }
            Event::DelNeigh(n) => {
                let (ifx, ip) = (n.ifindex, n.ip);
                self.neighs.remove(&(ifx, ip));
                self.neighbor_changed(ifx, ip);
            }
            Event::NewRoute(r) => {
                if let Some(o) = Origin::of_kernel_table(r.table) {
                    let p = (r.dst, r.dst_len);
                    let (want, old) = self.put_route(o, r);
                    self.update_prefix(p, want, old);
                }
            }
            Event::DelRoute(r) => self.del_route(r),
        }
        true
    }

    /// Remove a route (for IPv6 multipath, the next hops it lists) and bring its prefix in
    /// line.
    fn del_route(&mut self, r: &Route) {
        if let Some(origin) = Origin::of_kernel_table(r.table) {
            let p = (r.dst, r.dst_len);
            let metric = r.priority;
            let (want_now, installed) = match self.prefixes.entry(p) {
                Entry::Occupied(mut e) => {
                    let list = &mut e.get_mut().routes;
                    if let Some(i) = list
                        .iter()
                        .position(|s| s.origin == origin && s.metric == metric)
                    {
                        // IPv6 deletes one next hop of a multipath route at a time:
                        // the message lists only the removed ones, the rest stays.
                        let hops = self.hop_lists.get(list[i].hops);
                        let partial = r.dst.is_ipv6()
                            && !r.nexthops.is_empty()
                            && hops.iter().any(|h| !r.nexthops.contains(h));
                        if partial {
                            let rest: Vec<RouteNextHop> = hops
                                .iter()
                                .filter(|h| !r.nexthops.contains(h))
                                .cloned()
                                .collect();
                            let rest = self.hop_lists.intern(&rest);
                            let gone = std::mem::replace(&mut list[i].hops, rest);
                            self.hop_lists.release(gone);
                        } else {
                            let gone = list.swap_remove(i);
                            self.hop_lists.release(gone.hops);
                        }
                    }
                    let st = e.get();
                    let now = (
                        want(&st.routes, &self.hop_lists, &self.down, self.distances),
                        st.installed,
                    );
                    if st.routes.is_empty() && st.installed.is_none() {
                        e.remove();
                    }
                    now
                }
                Entry::Vacant(_) => (Want::Nothing, None),
            };
            self.update_prefix(p, want_now, installed);
        }
    }

    /// Links that cannot carry traffic now; returns those whose state changed.
    fn update_down(&mut self) -> Vec<u32> {
        let now: FxHashSet<u32> = self
            .links
            .keys()
            .copied()
            .filter(|&i| !self.link_usable(i))
            .collect();
        let changed: Vec<u32> = now.symmetric_difference(&self.down).copied().collect();
        self.down = now;
        changed
    }

    /// Whether link `ifx` can carry traffic: admin up with carrier, and for a VLAN
    /// sub-interface its parent too. An unknown link is the kernel's business.
    fn link_usable(&self, ifx: u32) -> bool {
        let Some(l) = self.links.get(&ifx) else {
            return true;
        };
        if !carries(l) {
            return false;
        }
        let parent = self
            .port_of(ifx)
            .and_then(|p| self.vlans.get(p as usize).copied().flatten())
            .and_then(|t| self.port_names.get(t.parent as usize))
            .and_then(|n| self.links.values().find(|l| &l.name == n));
        parent.is_none_or(carries)
    }

    /// Re-decide every prefix with a route or a neighbour through one of `links` (their
    /// state changed): next hops through a down link leave their ECMP groups, routes with
    /// none left give way, and all come back with the link.
    fn refresh_through(&mut self, links: &[u32]) {
        if links.is_empty() {
            return;
        }
        let ids: FxHashSet<HopsId> = self
            .hop_lists
            .lists
            .iter()
            .enumerate()
            .filter(|(_, l)| {
                l.refs > 0
                    && l.hops
                        .iter()
                        .any(|h| h.ifindex.is_some_and(|i| links.contains(&i)))
            })
            .map(|(id, _)| id as HopsId)
            .collect();
        let mut ps: Vec<Prefix> = if ids.is_empty() {
            Vec::new()
        } else {
            self.prefixes
                .iter()
                .filter(|(_, st)| st.routes.iter().any(|r| ids.contains(&r.hops)))
                .map(|(p, _)| *p)
                .collect()
        };
        ps.extend(
            self.neighs
                .values()
                .filter(|n| links.contains(&n.ifindex))
                .map(|n| (n.ip, host_len(&n.ip))),
        );
        for p in ps {
            self.refresh_prefix(p);
        }
    }

    /// A link went administratively down: the kernel deletes, without telling anyone, every
    /// IPv4 route whose next hops are all through down links (its connected, broadcast and
    /// static routes; a multipath route with a live next hop stays, the dead one unused).
    /// The mirror forgets them too, or they would come back with the link while the kernel
    /// no longer has them. Local routes (the addresses) stay, as in the kernel.
    fn flush_down_v4(&mut self) {
        let admin_down = |l: &FxHashMap<u32, Link>, i: Option<u32>| {
            i.is_some_and(|i| l.get(&i).is_some_and(|l| !l.up))
        };
        let mut gone: Vec<Route> = Vec::new();
        for (p, st) in self.prefixes.iter() {
            if !p.0.is_ipv4() {
                continue;
            }
            for r in &st.routes {
                let hops = self.hop_lists.get(r.hops);
                let table = match r.origin {
                    Origin::KernelMain => MAIN_TABLE,
                    Origin::KernelLocal => LOCAL_TABLE,
                    Origin::Bgp => continue,
                };
                let dead = r.kind != RouteKind::Local
                    && !hops.is_empty()
                    && hops.iter().all(|h| admin_down(&self.links, h.ifindex));
                if dead {
                    gone.push(Route {
                        table,
                        dst: p.0,
                        dst_len: p.1,
                        kind: r.kind,
                        protocol: 0,
                        priority: r.metric,
                        nexthops: NextHops::new(),
                    });
                }
            }
        }
        for r in &gone {
            self.del_route(r);
        }
    }

    fn neighbor_changed(&mut self, ifx: u32, ip: IpAddr) {
        if let Some(&id) = self.nh_by_key.get(&NhKey::Adj(ifx, ip)) {
            let obj = self.nh_object(&NhKey::Adj(ifx, ip));
            if self.writer.set_next_hop(id, obj).is_err() {
                self.stats.fib_errors += 1;
            }
        }
        self.refresh_prefix((ip, host_len(&ip)));
    }

    /// Apply the native BGP speaker's decisions (see [`Origin::distance`] for how they rank
    /// against the kernel's routes). A next hop is resolved to the interface whose
    /// connected subnet holds it; one that is on none, or is the router's own address,
    /// leaves its prefix without a BGP route (counted in `bgp_unresolved`).
    pub fn apply_bgp(&mut self, changes: &[bgp::rib::Change]) {
        // Nearly every change of a batch has the same next hop as the one before.
        let mut last: Option<(IpAddr, Option<u32>)> = None;
        // Looked ahead by chunks, as `apply_all` does for netlink.
        for chunk in changes.chunks(64) {
            self.touch(chunk.iter().map(|c| match *c {
                bgp::rib::Change::Set { prefix, .. } | bgp::rib::Change::Remove { prefix } => {
                    prefix
                }
            }));
            for c in chunk {
                self.apply_bgp_one(c, &mut last);
            }
        }
    }

    /// One change of [`Sync::apply_bgp`]; `last` caches the last next hop's interface.
    fn apply_bgp_one(&mut self, c: &bgp::rib::Change, last: &mut Option<(IpAddr, Option<u32>)>) {
        self.stats.bgp_changes += 1;
        let (p, next_hop) = match *c {
            bgp::rib::Change::Set { prefix, next_hop } => (prefix, Some(next_hop)),
            bgp::rib::Change::Remove { prefix } => (prefix, None),
        };
        let ifindex = next_hop.and_then(|nh| match *last {
            Some((ip, ifx)) if ip == nh => ifx,
            _ => {
                let ifx = self.connected_ifindex(nh);
                *last = Some((nh, ifx));
                ifx
            }
        });
        match (next_hop, ifindex) {
            (Some(nh), Some(ifx)) => {
                let hop = RouteNextHop {
                    gateway: Some(nh),
                    ifindex: Some(ifx),
                    weight: 1,
                };
                let (want, old) =
                    self.put_route(Origin::Bgp, &bgp_route(p, smallvec::smallvec![hop]));
                self.update_prefix(p, want, old);
            }
            (nh, _) => {
                if nh.is_some() {
                    self.stats.bgp_unresolved += 1;
                }
                self.remove_bgp_route(p);
            }
        }
    }

    /// Drop `p`'s BGP route, if it has one.
    fn remove_bgp_route(&mut self, p: Prefix) {
        let Entry::Occupied(mut e) = self.prefixes.entry(p) else {
            return;
        };
        let list = &mut e.get_mut().routes;
        let Some(i) = list.iter().position(|s| s.origin == Origin::Bgp) else {
            return;
        };
        let gone = list.swap_remove(i);
        self.hop_lists.release(gone.hops);
        let st = e.get();
        let (want_now, installed) = (
            want(&st.routes, &self.hop_lists, &self.down, self.distances),
            st.installed,
        );
        if st.routes.is_empty() && st.installed.is_none() {
            e.remove();
        }
        self.update_prefix(p, want_now, installed);
    }

    /// The interface whose connected subnet holds `ip` ([`connected_in`]).
    pub fn connected_ifindex(&self, ip: IpAddr) -> Option<u32> {
        connected_in(&self.addrs, ip)
    }

    /// The router's addresses with their subnets (for [`connected_in`] outside the lock).
    pub fn addresses(&self) -> Vec<Addr> {
        self.addrs.clone()
    }

    // ---- views ----------------------------------------------------------------------

    fn describe(&self, id: NextHopId) -> String {
        let Some(e) = self.nh.get(&id) else {
            return format!("nh{id}?");
        };
        match &e.key {
            NhKey::Drop => "drop".into(),
            NhKey::Local => "local (kernel)".into(),
            NhKey::Glean(ifx) => format!("glean dev {}", self.dev_name(*ifx)),
            NhKey::Adj(ifx, ip) => match self.nh_object(&e.key) {
                NextHop::Forward(a) => format!(
                    "via {ip} dev {} lladdr {}",
                    self.dev_name(*ifx),
                    mac_str(&a.dst_mac)
                ),
                NextHop::Local => format!(
                    "via {ip} dev {} (not a fast-path port: kernel)",
                    self.dev_name(*ifx)
                ),
                _ => format!("via {ip} dev {} (unresolved: glean)", self.dev_name(*ifx)),
            },
            NhKey::Group(m) => format!(
                "ecmp [{}]",
                m.iter()
                    .map(|x| self.describe(*x))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        }
    }

    /// Installed routes, sorted, optionally only those matching `filter` (exact `a/len`, or
    /// the longest match for an address).
    pub fn routes(&self, filter: Option<&str>) -> Result<Vec<RouteView>, String> {
        let view = |(p, i): (&Prefix, &Installed)| RouteView {
            prefix: format!("{}/{}", p.0, p.1),
            source: i.source,
            next_hop: self.describe(i.nh),
        };
        let Some(f) = filter else {
            let mut v: Vec<(&Prefix, &Installed)> = self.installed().collect();
            v.sort_by(|a, b| {
                (a.0 .0.is_ipv6(), a.0 .0, a.0 .1).cmp(&(b.0 .0.is_ipv6(), b.0 .0, b.0 .1))
            });
            return Ok(v.into_iter().map(view).collect());
        };
        let (addr, len) = match f.split_once('/') {
            Some((a, l)) => {
                let a: IpAddr = a
                    .parse()
                    .map_err(|_| format!("{a:?} is not an IP address"))?;
                let l: u8 = l
                    .parse()
                    .ok()
                    .filter(|l| *l <= host_len(&a))
                    .ok_or_else(|| format!("bad prefix length in {f:?}"))?;
                (a, Some(l))
            }
            None => (
                f.parse()
                    .map_err(|_| format!("{f:?} is neither an address nor a prefix"))?,
                None,
            ),
        };
        if let Some(l) = len {
            let p = (masked(addr, l), l);
            return Ok(self.installed_at(&p).map(view).into_iter().collect());
        }
        for l in (0..=host_len(&addr)).rev() {
            let p = (masked(addr, l), l);
            if let Some(kv) = self.installed_at(&p) {
                return Ok(vec![view(kv)]);
            }
        }
        Ok(vec![])
    }

    /// What `p` has installed, with the map's copy of the key.
    fn installed_at(&self, p: &Prefix) -> Option<(&Prefix, &Installed)> {
        let (k, s) = self.prefixes.get_key_value(p)?;
        Some((k, s.installed.as_ref()?))
    }

    /// Every installed prefix.
    fn installed(&self) -> impl Iterator<Item = (&Prefix, &Installed)> {
        self.prefixes
            .iter()
            .filter_map(|(p, s)| Some((p, s.installed.as_ref()?)))
    }

    /// The longest installed prefix covering `dst`.
    fn longest(&self, dst: IpAddr) -> Option<Installed> {
        (0..=host_len(&dst))
            .rev()
            .find_map(|l| self.installed_at(&(masked(dst, l), l)).map(|(_, i)| *i))
    }

    /// For a packet punted as unresolved: the interface and address the kernel must
    /// resolve (the destination itself on a connected subnet, else the route's gateway).
    pub fn glean_target(&self, dst: IpAddr) -> Option<(u32, IpAddr)> {
        let i = self.longest(dst)?;
        let mut key = &self.nh.get(&i.nh)?.key;
        if let NhKey::Group(m) = key {
            // Any unresolved member will do; the others resolve on their own traffic.
            key = m
                .iter()
                .filter_map(|id| self.nh.get(id))
                .map(|e| &e.key)
                .find(|k| matches!(self.nh_object(k), NextHop::Glean { .. }))?;
        }
        match key {
            NhKey::Glean(ifx) => Some((*ifx, dst)),
            NhKey::Adj(ifx, gw) => Some((*ifx, *gw)),
            _ => None,
        }
    }

    /// Whether the kernel's neighbour `ip` on interface `ifx` is usable (has a MAC in a
    /// usable state): its adjacency is then in the FIB.
    pub fn neighbor_usable(&self, ifx: u32, ip: IpAddr) -> bool {
        self.neighs.get(&(ifx, ip)).is_some_and(|n| n.usable())
    }

    /// How many neighbours [`Sync::neighbors`] lists.
    pub fn neighbor_count(&self) -> usize {
        self.neighs
            .values()
            .filter(|n| self.port_of(n.ifindex).is_some())
            .count()
    }

    /// Neighbours on fast-path ports.
    pub fn neighbors(&self) -> Vec<NeighborView> {
        let mut v: Vec<NeighborView> = self
            .neighs
            .values()
            .filter(|n| self.port_of(n.ifindex).is_some())
            .map(|n| NeighborView {
                ip: n.ip.to_string(),
                dev: self.dev_name(n.ifindex),
                mac: n.mac.as_ref().map(mac_str),
                usable: n.usable(),
            })
            .collect();
        v.sort_by(|a, b| (&a.dev, &a.ip).cmp(&(&b.dev, &b.ip)));
        v
    }

    /// Installed prefixes by family: (IPv4, IPv6).
    pub fn route_counts(&self) -> (usize, usize) {
        let mut c = (0, 0);
        for (p, _) in self.installed() {
            if p.0.is_ipv4() {
                c.0 += 1;
            } else {
                c.1 += 1;
            }
        }
        c
    }

    /// Installed prefixes by origin: (kernel routes, neighbours' host routes, the router's
    /// own, the BGP speaker's).
    pub fn source_counts(&self) -> (usize, usize, usize, usize) {
        let mut c = (0, 0, 0, 0);
        for (_, i) in self.installed() {
            match i.source {
                Source::Route => c.0 += 1,
                Source::Neighbor => c.1 += 1,
                Source::Local => c.2 += 1,
                Source::Bgp => c.3 += 1,
            }
        }
        c
    }

    /// Kernel routes mirrored (main and local tables), whether installed or not.
    pub fn mirrored_routes(&self) -> usize {
        self.prefixes.values().map(|s| s.routes.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linux::{RouteNextHop, NUD_FAILED, NUD_REACHABLE};

    const MAC_P0: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const MAC_P1: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn link(ifindex: u32, name: &str, mac: [u8; 6]) -> Link {
        Link {
            ifindex,
            name: name.into(),
            mac: Some(mac),
            mtu: 1500,
            up: true,
            oper_up: true,
            carrier: true,
        }
    }

    fn route(
        table: u32,
        dst: &str,
        len: u8,
        kind: RouteKind,
        hops: &[(Option<&str>, u32)],
    ) -> Route {
        Route {
            table,
            dst: ip(dst),
            dst_len: len,
            kind,
            protocol: 4,
            priority: 0,
            nexthops: hops
                .iter()
                .map(|(g, i)| RouteNextHop {
                    gateway: g.map(ip),
                    ifindex: Some(*i),
                    weight: 1,
                })
                .collect(),
        }
    }

    fn neigh(ifindex: u32, addr: &str, mac: [u8; 6], state: u16) -> Neigh {
        Neigh {
            ifindex,
            ip: ip(addr),
            mac: Some(mac),
            state,
        }
    }

    /// A sync over ports p0 (ifindex 10) and p1 (ifindex 11), with lo (1) not a port.
    fn setup() -> (Sync, fib::FibReaders) {
        setup_with(Distances::default())
    }

    fn setup_with(d: Distances) -> (Sync, fib::FibReaders) {
        let (w, r) = fib::new(fib::FibConfig {
            max_tbl8_v4: 64,
            max_tbl8_v6: 1024,
            max_readers: 4,
        });
        let mut s = Sync::new(w, vec!["p0".into(), "p1".into()]);
        s.set_distances(d);
        s.resync(Snapshot {
            links: vec![
                link(1, "lo", [0; 6]),
                link(10, "p0", MAC_P0),
                link(11, "p1", MAC_P1),
            ],
            addrs: vec![Addr {
                ifindex: 10,
                addr: ip("192.0.2.1"),
                prefix_len: 24,
            }],
            neighs: vec![neigh(10, "192.0.2.9", [2, 9, 9, 9, 9, 9], NUD_REACHABLE)],
            routes: vec![
                route(
                    MAIN_TABLE,
                    "192.0.2.0",
                    24,
                    RouteKind::Unicast,
                    &[(None, 10)],
                ),
                route(
                    LOCAL_TABLE,
                    "192.0.2.1",
                    32,
                    RouteKind::Local,
                    &[(None, 10)],
                ),
                route(
                    MAIN_TABLE,
                    "198.51.100.0",
                    24,
                    RouteKind::Unicast,
                    &[(Some("192.0.2.9"), 10)],
                ),
                route(MAIN_TABLE, "203.0.113.0", 24, RouteKind::Blackhole, &[]),
                route(
                    MAIN_TABLE,
                    "10.0.0.0",
                    8,
                    RouteKind::Unicast,
                    &[(Some("192.0.2.9"), 10), (Some("192.0.2.10"), 10)],
                ),
                route(
                    MAIN_TABLE,
                    "172.16.0.0",
                    12,
                    RouteKind::Unicast,
                    &[(Some("127.0.0.2"), 1)],
                ),
            ],
        });
        (s, r)
    }

    /// What the fast path would find for `a` (read through the writer, which this thread
    /// owns: a registered reader here would hold back the writer's grace periods).
    fn lookup(s: &Sync, a: &str) -> Option<NextHop> {
        let IpAddr::V4(v) = ip(a) else { unreachable!() };
        let w = s.writer();
        w.next_hop(w.lookup4(v.into())).cloned()
    }

    fn nh(s: &Sync, p: &str) -> String {
        s.routes(Some(p))
            .unwrap()
            .first()
            .map(|r| r.next_hop.clone())
            .unwrap_or_default()
    }

    /// A prefix with a kernel route and a BGP path: the lower administrative distance
    /// wins (the kernel's by default; the speaker's when configured lower), and the other
    /// takes over when the winner goes.
    #[test]
    fn administrative_distance_ranks_kernel_and_bgp_routes() {
        let p = (ip("198.51.100.0"), 24);
        let set = bgp::rib::Change::Set {
            prefix: p,
            next_hop: ip("192.0.2.10"),
        };
        let source = |s: &Sync| s.routes(Some("198.51.100.0/24")).unwrap()[0].source;
        let (mut s, _r) = setup();
        s.apply_bgp(std::slice::from_ref(&set));
        assert_eq!(
            source(&s),
            Source::Route,
            "the kernel's route wins by default"
        );
        s.apply_bgp(&[bgp::rib::Change::Remove { prefix: p }]);
        assert_eq!(source(&s), Source::Route);
        let (mut s, _r) = setup_with(Distances {
            kernel: 30,
            bgp: 20,
        });
        s.apply_bgp(std::slice::from_ref(&set));
        assert_eq!(source(&s), Source::Bgp, "bgp 20 < kernel 30");
        s.apply_bgp(&[bgp::rib::Change::Remove { prefix: p }]);
        assert_eq!(source(&s), Source::Route, "the kernel's route takes over");
    }

    #[test]
    fn kernel_state_becomes_fib_entries() {
        let (s, _r) = setup();
        assert!(
            matches!(lookup(&s, "192.0.2.1"), Some(NextHop::Local)),
            "own address punts"
        );
        assert!(
            matches!(lookup(&s, "192.0.2.77"), Some(NextHop::Glean { port: 0 })),
            "connected, unresolved"
        );
        match lookup(&s, "192.0.2.9") {
            Some(NextHop::Forward(a)) => assert_eq!(
                (a.port, a.dst_mac, a.src_mac),
                (0, [2, 9, 9, 9, 9, 9], MAC_P0)
            ),
            other => panic!("neighbour host route: {other:?}"),
        }
        assert!(
            matches!(lookup(&s, "198.51.100.5"), Some(NextHop::Forward(_))),
            "via a resolved gateway"
        );
        assert!(matches!(lookup(&s, "203.0.113.5"), Some(NextHop::Drop)));
        assert!(matches!(lookup(&s, "10.1.2.3"), Some(NextHop::Ecmp(m)) if m.len() == 2));
        assert!(
            matches!(lookup(&s, "172.16.0.1"), Some(NextHop::Local)),
            "via a non-port interface: kernel"
        );
        assert!(
            nh(&s, "10.0.0.0/8").starts_with("ecmp ["),
            "{}",
            nh(&s, "10.0.0.0/8")
        );
        assert_eq!(
            s.local_addresses(),
            vec![ip("192.0.2.1"), ip("192.0.2.255")],
            "the address and its subnet's directed broadcast"
        );
        assert_eq!(
            s.glean_target(ip("192.0.2.77")),
            Some((10, ip("192.0.2.77")))
        );
    }

    #[test]
    fn neighbour_changes_switch_every_route_through_it() {
        let (mut s, _r) = setup();
        s.apply(Event::NewNeigh(neigh(
            10,
            "192.0.2.9",
            [2, 8, 8, 8, 8, 8],
            NUD_REACHABLE,
        )));
        let Some(NextHop::Forward(a)) = lookup(&s, "198.51.100.5") else {
            panic!()
        };
        assert_eq!(
            a.dst_mac,
            [2, 8, 8, 8, 8, 8],
            "gateway MAC change reaches the route"
        );
        s.apply(Event::NewNeigh(neigh(
            10,
            "192.0.2.9",
            [2, 8, 8, 8, 8, 8],
            NUD_FAILED,
        )));
        assert!(
            matches!(lookup(&s, "198.51.100.5"), Some(NextHop::Glean { port: 0 })),
            "failed neighbour: glean"
        );
        assert!(
            matches!(lookup(&s, "192.0.2.9"), Some(NextHop::Glean { .. })),
            "host route gone, connected glean"
        );
        assert_eq!(
            s.glean_target(ip("198.51.100.5")),
            Some((10, ip("192.0.2.9"))),
            "resolve the gateway"
        );
        // A port MAC change re-publishes its adjacencies.
        s.apply(Event::NewNeigh(neigh(
            10,
            "192.0.2.9",
            [2, 8, 8, 8, 8, 8],
            NUD_REACHABLE,
        )));
        s.apply(Event::NewLink(link(10, "p0", [2, 7, 7, 7, 7, 7])));
        let Some(NextHop::Forward(a)) = lookup(&s, "198.51.100.5") else {
            panic!()
        };
        assert_eq!(a.src_mac, [2, 7, 7, 7, 7, 7]);
    }

    #[test]
    fn route_events_metric_preference_and_cleanup() {
        let (mut s, _r) = setup();
        let mut better = route(MAIN_TABLE, "198.51.100.0", 24, RouteKind::Blackhole, &[]);
        better.priority = 0;
        let mut worse = route(
            MAIN_TABLE,
            "198.51.100.0",
            24,
            RouteKind::Unicast,
            &[(Some("192.0.2.9"), 10)],
        );
        worse.priority = 100;
        s.apply(Event::NewRoute(worse.clone()));
        s.apply(Event::DelRoute(route(
            MAIN_TABLE,
            "198.51.100.0",
            24,
            RouteKind::Unicast,
            &[(Some("192.0.2.9"), 10)],
        )));
        assert!(
            matches!(lookup(&s, "198.51.100.5"), Some(NextHop::Forward(_))),
            "metric 100 route remains"
        );
        s.apply(Event::NewRoute(better.clone()));
        assert!(
            matches!(lookup(&s, "198.51.100.5"), Some(NextHop::Drop)),
            "lower metric wins"
        );
        s.apply(Event::DelRoute(better));
        s.apply(Event::DelRoute(worse));
        assert_eq!(lookup(&s, "198.51.100.5"), None, "all gone: no route");
        s.apply(Event::DelRoute(route(
            MAIN_TABLE,
            "10.0.0.0",
            8,
            RouteKind::Unicast,
            &[],
        )));
        assert_eq!(lookup(&s, "10.1.1.1"), None);
        // Every next hop that no route uses any more was released.
        let used: usize = s.nh.values().map(|e| e.refs).sum();
        assert!(
            s.nh.len() <= 6 && used >= s.nh.len(),
            "{} next hops left",
            s.nh.len()
        );
    }

    #[test]
    fn ipv6_multipath_partial_delete_keeps_the_rest() {
        let (mut s, _r) = setup();
        let full = route(
            MAIN_TABLE,
            "2001:db8:9::",
            48,
            RouteKind::Unicast,
            &[(Some("fe80::1"), 10), (Some("fe80::2"), 11)],
        );
        s.apply(Event::NewRoute(full));
        let key: [u8; 16] = "2001:db8:9::1"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets();
        assert!(
            matches!(s.writer().next_hop(s.writer().lookup6(&key)), Some(NextHop::Ecmp(m)) if m.len() == 2)
        );
        s.apply(Event::DelRoute(route(
            MAIN_TABLE,
            "2001:db8:9::",
            48,
            RouteKind::Unicast,
            &[(Some("fe80::1"), 10)],
        )));
        assert!(
            matches!(
                s.writer().next_hop(s.writer().lookup6(&key)),
                Some(NextHop::Glean { port: 1 })
            ),
            "one hop left, on p1"
        );
        s.apply(Event::DelRoute(route(
            MAIN_TABLE,
            "2001:db8:9::",
            48,
            RouteKind::Unicast,
            &[(Some("fe80::2"), 11)],
        )));
        assert_eq!(s.writer().lookup6(&key), fib::MISS);
    }

    fn link_state(ifindex: u32, name: &str, mac: [u8; 6], up: bool, oper_up: bool) -> Link {
        Link {
            up,
            oper_up,
            carrier: oper_up,
            ..link(ifindex, name, mac)
        }
    }

    /// Carrier loss on a port: ECMP groups lose their members through it, routes with no
    /// next hop left give way to others (a higher metric, a covering prefix), neighbours'
    /// host routes through it go; all of it comes back with the carrier.
    #[test]
    fn next_hops_through_a_down_link_are_not_used() {
        let (mut s, _r) = setup();
        s.apply(Event::NewNeigh(neigh(
            11,
            "198.51.100.9",
            MAC_P1,
            NUD_REACHABLE,
        )));
        s.apply(Event::NewRoute(route(
            MAIN_TABLE,
            "198.51.100.0",
            24,
            RouteKind::Unicast,
            &[(None, 11)],
        )));
        let ecmp = route(
            MAIN_TABLE,
            "10.0.0.0",
            8,
            RouteKind::Unicast,
            &[(Some("192.0.2.9"), 10), (Some("198.51.100.9"), 11)],
        );
        s.apply(Event::NewRoute(ecmp));
        // A floating route: 172.20/16 via p0 (metric 0), or via p1 (metric 100).
        s.apply(Event::NewRoute(route(
            MAIN_TABLE,
            "172.20.0.0",
            16,
            RouteKind::Unicast,
            &[(Some("192.0.2.9"), 10)],
        )));
        let mut backup = route(
            MAIN_TABLE,
            "172.20.0.0",
            16,
            RouteKind::Unicast,
            &[(Some("198.51.100.9"), 11)],
        );
        backup.priority = 100;
        s.apply(Event::NewRoute(backup));
        s.apply(Event::NewRoute(route(
            MAIN_TABLE,
            "0.0.0.0",
            0,
            RouteKind::Unicast,
            &[(Some("198.51.100.9"), 11)],
        )));
        assert!(matches!(lookup(&s, "10.1.1.1"), Some(NextHop::Ecmp(m)) if m.len() == 2));
        assert!(matches!(lookup(&s, "172.20.0.1"), Some(NextHop::Forward(a)) if a.port == 0));
        assert!(!s.interfaces().ports[0].down);

        let v = s.interfaces_version();
        s.apply(Event::NewLink(link_state(10, "p0", MAC_P0, true, false)));
        assert!(s.interfaces_version() > v);
        assert!(s.interfaces().ports[0].down && !s.interfaces().ports[1].down);
        for dst in ["10.1.1.1", "172.20.0.1", "192.0.2.77", "192.0.2.9"] {
            assert!(
                matches!(lookup(&s, dst), Some(NextHop::Forward(a)) if a.port == 1),
                "{dst}: {:?}",
                lookup(&s, dst)
            );
        }
        assert!(
            nh(&s, "10.0.0.0/8").starts_with("via 198.51.100.9 dev p1"),
            "{}",
            nh(&s, "10.0.0.0/8")
        );
        assert_eq!(
            s.routes(Some("192.0.2.0/24")).unwrap().len(),
            0,
            "connected route withdrawn"
        );
        assert!(
            matches!(lookup(&s, "192.0.2.1"), Some(NextHop::Local)),
            "own address stays"
        );
        let l = s.port_link(0, &[]);
        assert_eq!(
            (l.admin_up, l.oper, l.reason.as_deref()),
            (true, "no-carrier", Some("no carrier"))
        );

        s.apply(Event::NewLink(link(10, "p0", MAC_P0)));
        assert!(!s.interfaces().ports[0].down);
        assert!(matches!(lookup(&s, "10.1.1.1"), Some(NextHop::Ecmp(m)) if m.len() == 2));
        assert!(matches!(lookup(&s, "172.20.0.1"), Some(NextHop::Forward(a)) if a.port == 0));
        assert!(matches!(
            lookup(&s, "192.0.2.77"),
            Some(NextHop::Glean { port: 0 })
        ));
        assert!(matches!(lookup(&s, "192.0.2.9"), Some(NextHop::Forward(a)) if a.port == 0));
        assert_eq!(s.port_link(0, &[]).reason, None);
    }

    /// Admin down: the kernel silently deletes the IPv4 routes whose next hops are all
    /// through down links (connected, static), keeps multipath routes with a live next hop
    /// and the addresses' local routes; the mirror does the same, so what the kernel does
    /// not restore on up does not come back in the FIB either.
    #[test]
    fn admin_down_forgets_what_the_kernel_flushes() {
        let (mut s, _r) = setup();
        s.apply(Event::NewRoute(route(
            MAIN_TABLE,
            "10.0.0.0",
            8,
            RouteKind::Unicast,
            &[(Some("192.0.2.9"), 10), (Some("198.51.100.9"), 11)],
        )));
        s.apply(Event::NewRoute(route(
            MAIN_TABLE,
            "2001:db8:9::",
            48,
            RouteKind::Unicast,
            &[(Some("fe80::1"), 10)],
        )));
        let held = vec!["p0".to_string()];
        s.apply(Event::NewLink(link_state(10, "p0", MAC_P0, false, false)));
        let l = s.port_link(0, &held);
        assert_eq!((l.admin_up, l.oper), (false, "down"));
        assert_eq!(
            l.reason.as_deref(),
            Some("admin down by config (enabled = false)")
        );
        assert!(s
            .port_link(0, &[])
            .reason
            .unwrap()
            .contains("outside ferrouter"));
        assert_eq!(lookup(&s, "198.51.100.5"), None, "static via p0 gone");
        assert!(matches!(
            lookup(&s, "10.1.1.1"),
            Some(NextHop::Glean { port: 1 })
        ));
        assert!(matches!(lookup(&s, "192.0.2.1"), Some(NextHop::Local)));
        s.apply(Event::NewLink(link(10, "p0", MAC_P0)));
        // The kernel adds the connected route again (and says so); the static one stays
        // gone until re-added, as in the kernel. The IPv6 route (the kernel reports its
        // deletion itself) and the multipath route are back whole.
        assert_eq!(lookup(&s, "198.51.100.5"), None);
        assert_eq!(lookup(&s, "192.0.2.77"), None);
        assert!(matches!(lookup(&s, "10.1.1.1"), Some(NextHop::Ecmp(m)) if m.len() == 2));
        let key = "2001:db8:9::1"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets();
        assert!(matches!(
            s.writer().next_hop(s.writer().lookup6(&key)),
            Some(NextHop::Glean { port: 0 })
        ));
    }

    /// A VLAN sub-interface is down with its parent.
    #[test]
    fn a_sub_interface_is_down_with_its_parent() {
        let (w, _r) = fib::new(fib::FibConfig {
            max_tbl8_v4: 64,
            max_tbl8_v6: 64,
            max_readers: 2,
        });
        let mut s = Sync::new(w, vec!["p0".into(), "p0.7".into()]);
        s.set_vlans(vec![
            None,
            Some(dataplane::interfaces::VlanTags {
                parent: 0,
                tpid: 0x8100,
                outer: 7,
                inner: 0,
            }),
        ]);
        s.resync(Snapshot {
            links: vec![link(10, "p0", MAC_P0), link(12, "p0.7", MAC_P0)],
            routes: vec![route(
                MAIN_TABLE,
                "10.7.0.0",
                24,
                RouteKind::Unicast,
                &[(None, 12)],
            )],
            ..Snapshot::default()
        });
        assert!(matches!(
            lookup(&s, "10.7.0.1"),
            Some(NextHop::Glean { port: 1 })
        ));
        s.apply(Event::NewLink(link_state(10, "p0", MAC_P0, true, false)));
        assert!(s.interfaces().ports[1].down);
        assert_eq!(lookup(&s, "10.7.0.1"), None);
        let l = s.port_link(1, &[]);
        assert_eq!(
            (l.oper, l.reason.as_deref()),
            ("down", Some("parent port p0 is down"))
        );
        s.apply(Event::NewLink(link(10, "p0", MAC_P0)));
        assert!(matches!(
            lookup(&s, "10.7.0.1"),
            Some(NextHop::Glean { port: 1 })
        ));
    }

    #[test]
    fn overflow_asks_for_resync_and_resync_converges() {
        let (mut s, _r) = setup();
        assert!(!s.apply(Event::Overflow));
        // The dump after an overflow lost the blackhole and gained a route.
        s.resync(Snapshot {
            links: vec![link(10, "p0", MAC_P0), link(11, "p1", MAC_P1)],
            addrs: vec![],
            neighs: vec![],
            routes: vec![route(
                MAIN_TABLE,
                "100.64.0.0",
                10,
                RouteKind::Unicast,
                &[(None, 11)],
            )],
        });
        assert_eq!(lookup(&s, "203.0.113.5"), None);
        assert_eq!(lookup(&s, "192.0.2.1"), None);
        assert!(matches!(
            lookup(&s, "100.64.1.1"),
            Some(NextHop::Glean { port: 1 })
        ));
        assert_eq!(s.route_counts(), (1, 0));
        assert_eq!(s.stats().resyncs, 2);
    }

    /// Random route, neighbour, link and resync sequences over a few overlapping prefixes,
    /// next hops and tables.
    mod random {
        use super::*;
        use proptest::prelude::*;

        const P4: [(&str, u8); 7] = [
            ("10.0.0.0", 8),
            ("10.1.0.0", 16),
            ("10.1.2.0", 24),
            ("10.1.2.3", 32),
            ("192.0.2.9", 32),
            ("192.0.2.0", 24),
            ("0.0.0.0", 0),
        ];
        const P6: [(&str, u8); 4] = [
            ("2001:db8:9::", 48),
            ("2001:db8:9::1", 128),
            ("fe80::1", 128),
            ("::", 0),
        ];
        const H4: [(Option<&str>, Option<u32>); 6] = [
            (Some("192.0.2.9"), Some(10)),
            (Some("192.0.2.10"), Some(11)),
            (None, Some(10)),
            (Some("127.0.0.2"), Some(1)),
            (Some("192.0.2.9"), None),
            (Some("192.0.2.9"), Some(11)),
        ];
        const H6: [(Option<&str>, Option<u32>); 4] = [
            (Some("fe80::1"), Some(10)),
            (Some("fe80::2"), Some(11)),
            (None, Some(11)),
            (Some("fe80::1"), Some(11)),
        ];

        fn arb_route() -> impl Strategy<Value = Route> {
            (
                any::<bool>(),
                0usize..7,
                prop_oneof![Just(254u32), Just(255), Just(100)],
                prop_oneof![
                    4 => Just(RouteKind::Unicast),
                    1 => Just(RouteKind::Blackhole),
                    1 => Just(RouteKind::Unreachable),
                    1 => Just(RouteKind::Local),
                    1 => Just(RouteKind::Broadcast),
                    1 => Just(RouteKind::Other(9)),
                ],
                prop_oneof![Just(0u32), Just(10), Just(20)],
                proptest::collection::vec((0usize..6, 1u16..3), 0..4),
            )
                .prop_map(|(is4, pi, table, kind, priority, hops)| {
                    let (dst, dst_len) = if is4 { P4[pi] } else { P6[pi % 4] };
                    let nexthops = hops
                        .into_iter()
                        .map(|(h, weight)| {
                            let (g, i) = if is4 { H4[h] } else { H6[h % 4] };
                            RouteNextHop {
                                gateway: g.map(ip),
                                ifindex: i,
                                weight,
                            }
                        })
                        .collect();
                    Route {
                        table,
                        dst: ip(dst),
                        dst_len,
                        kind,
                        protocol: 4,
                        priority,
                        nexthops,
                    }
                })
        }

        #[derive(Clone, Debug)]
        enum Op {
            Ev(Event),
            Resync(Vec<Route>),
        }

        fn arb_op() -> impl Strategy<Value = Op> {
            prop_oneof![
                8 => arb_route().prop_map(|r| Op::Ev(Event::NewRoute(r))),
                6 => arb_route().prop_map(|r| Op::Ev(Event::DelRoute(r))),
                2 => (0usize..3, prop_oneof![Just(NUD_REACHABLE), Just(NUD_FAILED)], any::<bool>())
                    .prop_map(|(i, st, add)| {
                        let (ifx, a) = [(10, "192.0.2.9"), (11, "192.0.2.10"), (10, "10.1.2.3")][i];
                        let n = neigh(ifx, a, [2, 9, 9, 9, 9, i as u8], st);
                        Op::Ev(if add { Event::NewNeigh(n) } else { Event::DelNeigh(n) })
                    }),
                1 => any::<u8>().prop_map(|m| Op::Ev(Event::NewLink(link(10, "p0", [2, 0, 0, 0, 0, m])))),
                2 => (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(p1, up, oper)| {
                    let (ifx, name, mac) = if p1 { (11, "p1", MAC_P1) } else { (10, "p0", MAC_P0) };
                    Op::Ev(Event::NewLink(Link { up, oper_up: oper, carrier: oper, ..link(ifx, name, mac) }))
                }),
                1 => Just(Op::Ev(Event::DelLink(11))),
                1 => Just(Op::Ev(Event::NewLink(link(11, "p1", MAC_P1)))),
                1 => proptest::collection::vec(arb_route(), 0..6).prop_map(Op::Resync),
            ]
        }

        fn snapshot(routes: Vec<Route>) -> Snapshot {
            Snapshot {
                links: vec![
                    link(1, "lo", [0; 6]),
                    link(10, "p0", MAC_P0),
                    link(11, "p1", MAC_P1),
                ],
                addrs: vec![],
                neighs: vec![neigh(10, "192.0.2.9", [2, 9, 9, 9, 9, 9], NUD_REACHABLE)],
                routes,
            }
        }

        /// The sync's books balance: no empty prefix entries, interned next-hop lists
        /// counted once per stored route, next-hop references = installed prefixes + group
        /// memberships, and the FIB holds exactly the installed prefixes.
        fn check_books(s: &Sync) -> Result<(), TestCaseError> {
            let mut routes = 0;
            let mut hop_refs: FxHashMap<HopsId, u32> = FxHashMap::default();
            let mut nh_refs: FxHashMap<NextHopId, usize> = FxHashMap::default();
            for (p, st) in &s.prefixes {
                prop_assert!(
                    !st.routes.is_empty() || st.installed.is_some(),
                    "empty entry {p:?}"
                );
                routes += st.routes.len();
                for r in &st.routes {
                    *hop_refs.entry(r.hops).or_default() += 1;
                }
                if let Some(i) = st.installed {
                    *nh_refs.entry(i.nh).or_default() += 1;
                    let in_fib = match p.0 {
                        IpAddr::V4(a) => s.writer.get4(a.into(), p.1),
                        IpAddr::V6(a) => s.writer.get6(&a.octets(), p.1),
                    };
                    prop_assert_eq!(in_fib, Some(i.nh), "{:?}", p);
                }
            }
            prop_assert_eq!(s.mirrored_routes(), routes);
            for (id, l) in s.hop_lists.lists.iter().enumerate() {
                let id = id as HopsId;
                prop_assert_eq!(l.refs, hop_refs.get(&id).copied().unwrap_or(0));
                if l.refs > 0 {
                    prop_assert_eq!(s.hop_lists.ids.get(&l.hops), Some(&id));
                }
            }
            prop_assert_eq!(s.hop_lists.ids.len(), hop_refs.len());
            for e in s.nh.values() {
                if let NhKey::Group(m) = &e.key {
                    for x in m {
                        *nh_refs.entry(*x).or_default() += 1;
                    }
                }
            }
            for (id, e) in &s.nh {
                prop_assert_eq!(e.refs, nh_refs.get(id).copied().unwrap_or(0), "{:?}", e.key);
                prop_assert!(e.refs > 0);
            }
            let m = s.writer.memory();
            let (v4, v6) = s.route_counts();
            prop_assert_eq!((m.routes_v4, m.routes_v6), (v4, v6));
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]
            #[test]
            fn books_balance_through_random_changes(ops in proptest::collection::vec(arb_op(), 1..60)) {
                let (mut s, _r) = setup();
                for op in ops {
                    match op {
                        Op::Ev(e) => {
                            s.apply(e);
                        }
                        Op::Resync(rs) => s.resync(snapshot(rs)),
                    }
                    check_books(&s)?;
                }
                // A dump with nothing in it: every prefix, list and next hop goes.
                s.resync(Snapshot::default());
                check_books(&s)?;
                prop_assert!(s.prefixes.is_empty() && s.nh.is_empty());
                prop_assert!(s.hop_lists.ids.is_empty());
            }

            /// A batch through `apply_all` (which looks ahead) does what the same events do
            /// one by one through `apply`.
            #[test]
            fn apply_all_is_apply_in_order(ops in proptest::collection::vec(arb_op(), 1..60)) {
                let (mut one, _r1) = setup();
                let (mut all, _r2) = setup();
                let mut batch = Vec::new();
                let mut ok = (true, true);
                let view = |s: &Sync| {
                    let mut nh: Vec<_> = s.nh.iter().map(|(id, e)| (*id, e.key.clone(), e.refs)).collect();
                    nh.sort_by_key(|x| x.0);
                    (s.routes(None).unwrap().into_iter().map(|r| (r.prefix, r.source, r.next_hop)).collect::<Vec<_>>(), nh)
                };
                for op in ops.into_iter().chain([Op::Resync(vec![])]) {
                    match op {
                        Op::Ev(e) => {
                            ok.0 &= one.apply(e.clone());
                            batch.push(e);
                        }
                        Op::Resync(rs) => {
                            ok.1 &= all.apply_all(&mut batch);
                            prop_assert!(batch.is_empty());
                            prop_assert_eq!(ok.0, ok.1);
                            prop_assert_eq!(view(&one), view(&all));
                            for a in ["10.1.2.3", "10.9.9.9", "192.0.2.9", "192.0.2.44"] {
                                let IpAddr::V4(x) = ip(a) else { unreachable!() };
                                prop_assert_eq!(one.writer().lookup4(x.into()), all.writer().lookup4(x.into()));
                            }
                            one.resync(snapshot(rs.clone()));
                            all.resync(snapshot(rs));
                        }
                    }
                }
            }
        }
    }
}
