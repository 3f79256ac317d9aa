//! Forwarding information base: IPv4 and IPv6 longest-prefix match at Internet scale,
//! a next-hop (adjacency) table with ECMP groups, and safe concurrent update.
//!
//! Concurrency model: exactly one writer ([`FibWriter`], owned by the control thread) and
//! any number of lock-free readers ([`FibReader`], one per worker thread, each registered
//! when [`FibReaders::register`] creates it). Every table entry a lookup reads is a single
//! aligned atomic word, so a reader sees either the old or the new result of an update,
//! never a mix. Memory that readers may still hold (tbl8 groups, replaced next-hop objects)
//! is reclaimed only after every registered reader has passed a quiescent point (`qsbr`).
//!
//! The types enforce the reader's side of that contract: a reference a reader hands out
//! borrows the reader, and [`FibReader::quiescent`] and [`FibReader::offline_while`] take it
//! mutably, so no reference can outlive the point after which the writer may free what it
//! points to. A reader is neither `Clone` nor `Sync`: its slot stands for one thread's
//! progress. The writer reads with `&self` and frees only with `&mut self`.
//!
//! IPv4 and IPv6 use the same DIR-24-8 multibit trie (`trie`): a 2^24-entry first level
//! and 256-entry groups below it, with the writing prefix's length kept in every entry so
//! updates touch only the entries they change.

#![warn(missing_docs)]

mod mem;
mod qsbr;
mod rib;
mod trie;

use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use mem::Region;
use rib::{mask4, mask6, Rib4, Rib6};
use trie::{Table, TableWriter};

/// Index of a next hop in the FIB's next-hop table. Route entries store these.
pub type NextHopId = u32;

/// Lookup result when no route matches.
pub const MISS: NextHopId = u32::MAX;

/// Largest next-hop id + 1 (ids are packed in 22 bits inside table entries).
pub const MAX_NEXT_HOPS: usize = 1 << 22;

/// What a matched route does with a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NextHop {
    /// Silently discard (blackhole route).
    Drop,
    /// Destination is the router itself: punt to the local stack.
    Local,
    /// Connected route, or gateway whose link-layer address is not known yet: punt so the
    /// kernel resolves it. `port` is the egress port.
    Glean {
        /// Egress port index.
        port: u16,
    },
    /// Fully resolved adjacency: rewrite and transmit.
    Forward(Adjacency),
    /// Equal-cost multipath: one member (each a `Forward`/`Glean`/... next-hop id) chosen by
    /// flow hash; the same hash always picks the same member while the group is unchanged.
    Ecmp(Box<[NextHopId]>),
}

/// A resolved L2 rewrite toward a neighbour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Adjacency {
    /// Egress port index.
    pub port: u16,
    /// Neighbour's MAC (destination of the rewritten frame).
    pub dst_mac: [u8; 6],
    /// Egress port's MAC (source of the rewritten frame).
    pub src_mac: [u8; 6],
    /// Egress IP MTU in bytes (L3, without the Ethernet header).
    pub mtu: u16,
}

/// Errors the writer reports; the FIB is unchanged when one is returned.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FibError {
    /// The prefix length exceeds the address size.
    #[error("prefix length {len} is longer than {max} bits")]
    BadPrefixLength {
        /// Length given.
        len: u8,
        /// Largest valid length (32 or 128).
        max: u8,
    },
    /// A route or ECMP group names a next hop that was never defined (or was removed).
    #[error("next hop {0} is not defined")]
    UnknownNextHop(NextHopId),
    /// No free next-hop id, or the id is beyond the table (`MAX_NEXT_HOPS`).
    #[error("next-hop table is full ({0} entries)")]
    NextHopTableFull(usize),
    /// The route needs more tbl8 groups than `FibConfig::max_tbl8_v4/v6` allows.
    #[error("route table is full: no free tbl8 group (limit {0})")]
    Tbl8Exhausted(usize),
    /// An ECMP group is empty, too large, or names another group (or itself).
    #[error("ECMP group must have 1..=64 members that are not themselves groups")]
    BadEcmpGroup,
    /// The next hop is still referenced by a route or an ECMP group.
    #[error("next hop {0} is still used by routes or groups")]
    NextHopInUse(NextHopId),
}

/// Sizing of a FIB at creation.
#[derive(Debug, Clone, Copy)]
pub struct FibConfig {
    /// Upper bound of IPv4 tbl8 groups (256 entries each) — reserved, committed lazily.
    pub max_tbl8_v4: usize,
    /// Upper bound of IPv6 tbl8 groups (256 entries each) — reserved, committed lazily.
    pub max_tbl8_v6: usize,
    /// Number of reader slots in the QSBR domain.
    pub max_readers: usize,
}

impl Default for FibConfig {
    fn default() -> Self {
        FibConfig {
            max_tbl8_v4: 1 << 16,
            max_tbl8_v6: 1 << 21,
            max_readers: 64,
        }
    }
}

/// Memory use, for reporting bytes/route.
#[derive(Debug, Clone, Copy, Default)]
pub struct FibMemory {
    /// IPv4 lookup tables: tbl24 (64 MiB) plus committed tbl8 groups (1 KiB each).
    pub v4_table_bytes: usize,
    /// IPv6 lookup tables: tbl24 (64 MiB) plus committed tbl8 groups (1 KiB each).
    pub v6_table_bytes: usize,
    /// Control-plane route store (hash maps, capacity based).
    pub rib_bytes: usize,
    /// Next-hop slot table (touched pages) and next-hop objects.
    pub nexthop_bytes: usize,
    /// IPv4 routes installed.
    pub routes_v4: usize,
    /// IPv6 routes installed.
    pub routes_v6: usize,
}

/// Create a FIB: the writer and a first reader handle (clone it per worker).
///
/// Panics if the kernel refuses to reserve the table memory; see [`try_new`].
pub fn new(cfg: FibConfig) -> (FibWriter, FibReaders) {
    try_new(cfg).expect("cannot reserve FIB table memory (mmap failed)")
}

/// Like [`new`], but reports a failure to reserve the table memory.
pub fn try_new(cfg: FibConfig) -> std::io::Result<(FibWriter, FibReaders)> {
    let max4 = cfg.max_tbl8_v4.min(trie::MAX_GROUPS);
    let max6 = cfg.max_tbl8_v6.min(trie::MAX_GROUPS);
    let shared = Arc::new(Shared {
        v4: Table::new(max4)?,
        v6: Table::new(max6)?,
        nh: NextHopTable {
            slots: Region::new(MAX_NEXT_HOPS, false)?,
            hwm: AtomicUsize::new(0),
        },
        qsbr: qsbr::Domain::new(cfg.max_readers),
        orphans: Mutex::new(Vec::new()),
    });
    let writer = FibWriter {
        s: Arc::clone(&shared),
        w4: TableWriter::new(max4),
        w6: TableWriter::new(max6),
        rib4: Rib4::new(),
        rib6: Rib6::new(),
        route_refs: Vec::new(),
        member_refs: Vec::new(),
        next_id: 0,
        free_ids: Vec::new(),
        deferred: VecDeque::new(),
        updates: 0,
        nh_bytes: 0,
        nh_freed: 0,
    };
    Ok((writer, FibReaders { s: shared }))
}

/// The next-hop (adjacency) table: `MAX_NEXT_HOPS` slots, each an atomic pointer to an
/// immutable [`NextHop`]. Reading a slot is one atomic load and a dereference. The slot
/// array is reserved up front and committed by the kernel as ids are used.
struct NextHopTable {
    slots: Region<AtomicPtr<NextHop>>,
    /// One past the highest id ever defined.
    hwm: AtomicUsize,
}

impl NextHopTable {
    /// The next hop behind `id`, `None` if undefined. Private: only a [`FibReader`] (whose
    /// borrow bounds the reference) and the writer (which frees only through `&mut self`)
    /// hand these out.
    #[inline]
    fn get(&self, id: NextHopId) -> Option<&NextHop> {
        let p = self
            .slots
            .as_slice()
            .get(id as usize)?
            .load(Ordering::Acquire);
        // SAFETY: non-null slots hold pointers from `Box::into_raw`. The writer frees an
        // object only after unpublishing it and waiting for a QSBR grace period, so it is
        // live for any reader until that reader's next quiescent point (and always for the
        // writer, which is the only one freeing).
        unsafe { p.as_ref() }
    }
}

/// A next-hop object unpublished by the writer, waiting for its grace period.
struct NhPtr(NonNull<NextHop>);

// SAFETY: the pointee is an immutable `NextHop` (itself `Send + Sync`) owned exclusively
// by whoever holds this value once the grace period is over.
unsafe impl Send for NhPtr {}

impl NhPtr {
    fn free(self) {
        // SAFETY: the pointer came from `Box::into_raw`, is no longer published, and no
        // reader can still hold it (grace period over, or no readers left).
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

/// State shared by the writer and every reader.
struct Shared {
    v4: Table,
    v6: Table,
    nh: NextHopTable,
    qsbr: Arc<qsbr::Domain>,
    /// Retired next hops handed over by a dropped writer, freed with the last reader.
    orphans: Mutex<Vec<NhPtr>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        let hwm = self.nh.hwm.load(Ordering::Relaxed);
        for s in &self.nh.slots.as_slice()[..hwm] {
            if let Some(p) = NonNull::new(s.swap(std::ptr::null_mut(), Ordering::Relaxed)) {
                NhPtr(p).free();
            }
        }
        let orphans = std::mem::take(self.orphans.get_mut().unwrap_or_else(|e| e.into_inner()));
        orphans.into_iter().for_each(NhPtr::free);
    }
}

/// Where readers come from: `Clone + Send + Sync`, so a spawner can hand one to each worker
/// thread, which registers its own [`FibReader`]. It reads nothing itself.
#[derive(Clone)]
pub struct FibReaders {
    s: Arc<Shared>,
}

impl FibReaders {
    /// A new registered reader, online.
    ///
    /// Panics when `FibConfig::max_readers` readers are already registered; see
    /// [`FibReaders::try_register`].
    pub fn register(&self) -> FibReader {
        self.try_register()
            .expect("all FibConfig::max_readers FIB reader slots are taken")
    }
    /// A new registered reader, online; `None` when all reader slots are taken.
    pub fn try_register(&self) -> Option<FibReader> {
        Some(FibReader {
            h: self.s.qsbr.try_register()?,
            s: Arc::clone(&self.s),
            _one_thread: std::marker::PhantomData,
        })
    }
}

/// A registered lock-free reader: one per worker thread. `Send` (created by a spawner,
/// moved to its thread) but not `Sync` or `Clone`.
///
/// While it is online the writer frees nothing the reader could still hold. Every
/// reference it hands out borrows it, and only [`FibReader::quiescent`] and
/// [`FibReader::offline_while`] (both `&mut self`) let the writer go further: so the borrow
/// checker proves that no reference is used past the point where its object may be freed.
/// An online reader that never reports holds the writer's [`FibWriter::synchronize`] back:
/// report once per packet vector, and go offline to sleep. Dropping it releases its slot.
///
/// A reference cannot be kept across a quiescent point:
/// ```compile_fail
/// let (mut w, readers) = fib::new(fib::FibConfig::default());
/// let id = w.add_next_hop(fib::NextHop::Drop).unwrap();
/// let mut r = readers.register();
/// let nh = r.next_hop(id);
/// r.quiescent(); // error: `r` is still borrowed by `nh`
/// assert!(nh.is_some());
/// ```
/// nor used while the reader is offline:
/// ```compile_fail
/// let (mut w, readers) = fib::new(fib::FibConfig::default());
/// let id = w.add_next_hop(fib::NextHop::Drop).unwrap();
/// let mut r = readers.register();
/// r.offline_while(|| r.next_hop(id).is_some()); // error: `r` is borrowed mutably
/// ```
/// and a reader is not `Clone` (nor `Sync`):
/// ```compile_fail
/// let (_w, readers) = fib::new(fib::FibConfig::default());
/// let r = readers.register();
/// let r2 = r.clone();
/// ```
/// Used as intended, it compiles:
/// ```
/// let (mut w, readers) = fib::new(fib::FibConfig::default());
/// let id = w.add_next_hop(fib::NextHop::Drop).unwrap();
/// let mut r = readers.register();
/// assert_eq!(r.next_hop(id), Some(&fib::NextHop::Drop));
/// r.quiescent();
/// r.offline_while(|| w.synchronize());
/// ```
pub struct FibReader {
    s: Arc<Shared>,
    h: qsbr::ReaderHandle,
    /// Not `Sync`: the slot stands for one thread's progress.
    _one_thread: std::marker::PhantomData<std::cell::Cell<()>>,
}

impl FibReader {
    /// Longest-prefix match of one IPv4 destination (host byte order). [`MISS`] if none.
    #[inline]
    pub fn lookup4(&self, dst: u32) -> NextHopId {
        self.s.v4.lookup4(dst)
    }
    /// Batched lookup with prefetch: `out[i] = lookup4(dst[i])`. `out.len() >= dst.len()`.
    #[inline]
    pub fn lookup4_bulk(&self, dst: &[u32], out: &mut [NextHopId]) {
        self.s.v4.lookup4_bulk(dst, out)
    }
    /// Longest-prefix match of one IPv6 destination (big-endian bytes as on the wire).
    #[inline]
    pub fn lookup6(&self, dst: &[u8; 16]) -> NextHopId {
        self.s.v6.lookup6(dst)
    }
    /// Batched IPv6 lookup with prefetch.
    #[inline]
    pub fn lookup6_bulk(&self, dst: &[[u8; 16]], out: &mut [NextHopId]) {
        self.s.v6.lookup6_bulk(dst, out)
    }
    /// The next hop behind `id`, `None` for an undefined id. The reference borrows this
    /// reader, so it ends before the reader's next quiescent point.
    #[inline]
    pub fn next_hop(&self, id: NextHopId) -> Option<&NextHop> {
        self.s.nh.get(id)
    }
    /// Resolve ECMP: for a group pick `members[hash % len]` (then its next hop); for
    /// anything else return it unchanged. Returns the chosen id.
    #[inline]
    pub fn resolve(&self, id: NextHopId, flow_hash: u32) -> NextHopId {
        resolve_in(&self.s.nh, id, flow_hash)
    }
    /// Report that this reader holds no reference into the FIB (once per packet vector):
    /// the writer may then free what it retired before now.
    #[inline]
    pub fn quiescent(&mut self) {
        self.h.quiescent();
    }
    /// Run `f` with the reader offline (idle, about to block): the writer does not wait
    /// for it meanwhile. The reader cannot be used inside `f`, and comes back online after.
    pub fn offline_while<R>(&mut self, f: impl FnOnce() -> R) -> R {
        self.h.offline();
        let r = f();
        self.h.online();
        r
    }
}

/// ECMP resolution over `nh` (readers' and the writer's).
#[inline]
fn resolve_in(nh: &NextHopTable, id: NextHopId, flow_hash: u32) -> NextHopId {
    match nh.get(id) {
        Some(NextHop::Ecmp(m)) if !m.is_empty() => {
            m.get(flow_hash as usize % m.len()).copied().unwrap_or(id)
        }
        _ => id,
    }
}

/// Something the writer unpublished and frees after a grace period.
enum Garbage {
    NextHop(NhPtr),
    Group4(u32),
    Group6(u32),
    /// A removed next-hop id, reusable once no reader can still resolve it.
    Id(NextHopId),
}

/// Updates between two opportunistic [`FibWriter::reclaim`] calls.
const RECLAIM_EVERY: u32 = 4096; // a power of two

/// The single writer (control thread). Not `Clone`.
pub struct FibWriter {
    s: Arc<Shared>,
    w4: TableWriter,
    w6: TableWriter,
    rib4: Rib4,
    rib6: Rib6,
    /// Routes (v4 + v6) per next-hop id.
    route_refs: Vec<u32>,
    /// ECMP group memberships per next-hop id.
    member_refs: Vec<u32>,
    /// Lowest id never handed out by `add_next_hop`.
    next_id: NextHopId,
    /// Ids whose grace period ended after removal.
    free_ids: Vec<NextHopId>,
    /// Retired objects, tagged with the epoch every reader must reach; epochs ascend.
    deferred: VecDeque<(u64, Garbage)>,
    updates: u32,
    /// Heap bytes of live next-hop objects.
    nh_bytes: usize,
    /// Next-hop objects freed so far (tests observe reclamation through it).
    nh_freed: usize,
}

fn nh_heap_bytes(nh: &NextHop) -> usize {
    std::mem::size_of::<NextHop>()
        + match nh {
            NextHop::Ecmp(m) => std::mem::size_of_val(&**m),
            _ => 0,
        }
}

fn bump(v: &mut Vec<u32>, id: NextHopId) {
    let i = id as usize;
    if v.len() <= i {
        v.resize(i + 1, 0);
    }
    v[i] += 1;
}

fn count(v: &[u32], id: NextHopId) -> u32 {
    v.get(id as usize).copied().unwrap_or(0)
}

#[derive(Clone, Copy)]
enum Family {
    V4,
    V6,
}

impl FibWriter {
    fn defined(&self, id: NextHopId) -> bool {
        self.s.nh.get(id).is_some()
    }

    fn retire(&mut self, g: Garbage) {
        let e = self.s.qsbr.retire_epoch();
        self.deferred.push_back((e, g));
    }

    /// Retire the groups the last table operation unlinked.
    fn retire_groups(&mut self, f: Family) {
        let w = match f {
            Family::V4 => &mut self.w4,
            Family::V6 => &mut self.w6,
        };
        if w.unlinked.is_empty() {
            return;
        }
        let e = self.s.qsbr.retire_epoch();
        for g in w.unlinked.drain(..) {
            let g = match f {
                Family::V4 => Garbage::Group4(g),
                Family::V6 => Garbage::Group6(g),
            };
            self.deferred.push_back((e, g));
        }
    }

    /// Free everything retired at or before epoch `upto`.
    fn free_until(&mut self, upto: u64) {
        while let Some(&(e, _)) = self.deferred.front() {
            if e > upto {
                break;
            }
            let Some((_, g)) = self.deferred.pop_front() else {
                break;
            };
            match g {
                Garbage::NextHop(p) => {
                    p.free();
                    self.nh_freed += 1;
                }
                Garbage::Group4(g) => self.w4.release(g),
                Garbage::Group6(g) => self.w6.release(g),
                Garbage::Id(id) => self.free_ids.push(id),
            }
        }
    }

    fn tick(&mut self) {
        self.updates = self.updates.wrapping_add(1);
        if self.updates & (RECLAIM_EVERY - 1) == 0 {
            self.reclaim();
        }
    }

    /// Make sure `need` groups can be allocated, waiting for a grace period if that frees
    /// enough of them.
    fn ensure_groups(&mut self, f: Family, need: usize) -> Result<(), FibError> {
        let avail = |w: &Self| match f {
            Family::V4 => w.w4.available(),
            Family::V6 => w.w6.available(),
        };
        if need <= avail(self) {
            return Ok(());
        }
        self.reclaim();
        if need > avail(self) && !self.deferred.is_empty() {
            self.synchronize();
        }
        if need <= avail(self) {
            return Ok(());
        }
        Err(FibError::Tbl8Exhausted(match f {
            Family::V4 => self.w4.limit(),
            Family::V6 => self.w6.limit(),
        }))
    }

    fn check_route_nh(&self, nh: NextHopId) -> Result<(), FibError> {
        if self.defined(nh) {
            Ok(())
        } else {
            Err(FibError::UnknownNextHop(nh))
        }
    }

    fn set_route_nh(&mut self, old: Option<NextHopId>, new: Option<NextHopId>) {
        if let Some(o) = old {
            self.route_refs[o as usize] -= 1;
        }
        if let Some(n) = new {
            bump(&mut self.route_refs, n);
        }
    }

    /// Define or replace next hop `id` (readers switch atomically; the old object is freed
    /// after a grace period).
    ///
    /// An ECMP group must have 1..=64 defined members that are not groups; a next hop that
    /// is a member of some group cannot become a group.
    pub fn set_next_hop(&mut self, id: NextHopId, nh: NextHop) -> Result<(), FibError> {
        if id as usize >= MAX_NEXT_HOPS {
            return Err(FibError::NextHopTableFull(MAX_NEXT_HOPS));
        }
        if let NextHop::Ecmp(m) = &nh {
            let member_ok = |&x: &NextHopId| {
                x != id && !matches!(self.s.nh.get(x), None | Some(NextHop::Ecmp(_)))
            };
            if m.is_empty()
                || m.len() > 64
                || count(&self.member_refs, id) > 0
                || !m.iter().all(member_ok)
            {
                return Err(FibError::BadEcmpGroup);
            }
            for &x in m.iter() {
                bump(&mut self.member_refs, x);
            }
        }
        self.nh_bytes += nh_heap_bytes(&nh);
        let p = Box::into_raw(Box::new(nh));
        let slot = &self.s.nh.slots.as_slice()[id as usize];
        let old = NonNull::new(slot.swap(p, Ordering::AcqRel));
        self.s.nh.hwm.fetch_max(id as usize + 1, Ordering::Relaxed);
        if let Some(old) = old {
            // SAFETY: `old` was published by this writer and only this writer frees it.
            let o = unsafe { old.as_ref() };
            self.nh_bytes -= nh_heap_bytes(o);
            if let NextHop::Ecmp(m) = o {
                for &x in m.iter() {
                    self.member_refs[x as usize] -= 1;
                }
            }
            self.retire(Garbage::NextHop(NhPtr(old)));
        }
        Ok(())
    }

    /// Allocate a fresh id and define it.
    pub fn add_next_hop(&mut self, nh: NextHop) -> Result<NextHopId, FibError> {
        while let Some(id) = self.free_ids.pop() {
            if self.defined(id) {
                continue;
            }
            return match self.set_next_hop(id, nh) {
                Ok(()) => Ok(id),
                Err(e) => {
                    self.free_ids.push(id);
                    Err(e)
                }
            };
        }
        while (self.next_id as usize) < MAX_NEXT_HOPS && self.defined(self.next_id) {
            self.next_id += 1;
        }
        if self.next_id as usize >= MAX_NEXT_HOPS {
            return Err(FibError::NextHopTableFull(MAX_NEXT_HOPS));
        }
        let id = self.next_id;
        self.set_next_hop(id, nh)?;
        self.next_id += 1;
        Ok(id)
    }

    /// Remove a next hop that no route or group references.
    pub fn remove_next_hop(&mut self, id: NextHopId) -> Result<(), FibError> {
        if !self.defined(id) {
            return Err(FibError::UnknownNextHop(id));
        }
        if count(&self.route_refs, id) + count(&self.member_refs, id) > 0 {
            return Err(FibError::NextHopInUse(id));
        }
        let slot = &self.s.nh.slots.as_slice()[id as usize];
        if let Some(old) = NonNull::new(slot.swap(std::ptr::null_mut(), Ordering::AcqRel)) {
            // SAFETY: `old` was published by this writer and only this writer frees it.
            let o = unsafe { old.as_ref() };
            self.nh_bytes -= nh_heap_bytes(o);
            if let NextHop::Ecmp(m) = o {
                for &x in m.iter() {
                    self.member_refs[x as usize] -= 1;
                }
            }
            self.retire(Garbage::NextHop(NhPtr(old)));
            self.retire(Garbage::Id(id));
        }
        Ok(())
    }

    /// Add or replace `prefix/len` (host byte order, host bits ignored).
    pub fn add4(&mut self, prefix: u32, len: u8, nh: NextHopId) -> Result<(), FibError> {
        if len > 32 {
            return Err(FibError::BadPrefixLength { len, max: 32 });
        }
        self.check_route_nh(nh)?;
        let p = prefix & mask4(len);
        if self.rib4.get(p, len) == Some(nh) {
            return Ok(());
        }
        let key = u128::from(p) << 96;
        let need = self.w4.groups_needed(&self.s.v4, key, len);
        self.ensure_groups(Family::V4, need)?;
        let old = self.rib4.insert(p, len, nh);
        self.set_route_nh(old, Some(nh));
        self.w4.add(&self.s.v4, key, len, nh);
        self.tick();
        Ok(())
    }

    /// Delete `prefix/len`; returns whether it existed.
    pub fn del4(&mut self, prefix: u32, len: u8) -> Result<bool, FibError> {
        if len > 32 {
            return Err(FibError::BadPrefixLength { len, max: 32 });
        }
        let p = prefix & mask4(len);
        let Some(old) = self.rib4.remove(p, len) else {
            return Ok(false);
        };
        self.set_route_nh(Some(old), None);
        let key = u128::from(p) << 96;
        let repl = match self.w4.covering_hint(&self.s.v4, key, len) {
            Some(r) => r,
            None => self.rib4.covering(p, len),
        };
        debug_assert_eq!(repl, self.rib4.covering(p, len));
        self.w4.del(&self.s.v4, key, len, repl);
        self.retire_groups(Family::V4);
        self.tick();
        Ok(true)
    }

    /// Add or replace an IPv6 prefix.
    pub fn add6(&mut self, prefix: &[u8; 16], len: u8, nh: NextHopId) -> Result<(), FibError> {
        if len > 128 {
            return Err(FibError::BadPrefixLength { len, max: 128 });
        }
        self.check_route_nh(nh)?;
        let key = u128::from_be_bytes(*prefix) & mask6(len);
        if self.rib6.get(key, len) == Some(nh) {
            return Ok(());
        }
        let need = self.w6.groups_needed(&self.s.v6, key, len);
        self.ensure_groups(Family::V6, need)?;
        let old = self.rib6.insert(key, len, nh);
        self.set_route_nh(old, Some(nh));
        self.w6.add(&self.s.v6, key, len, nh);
        self.tick();
        Ok(())
    }

    /// Delete an IPv6 prefix; returns whether it existed.
    pub fn del6(&mut self, prefix: &[u8; 16], len: u8) -> Result<bool, FibError> {
        if len > 128 {
            return Err(FibError::BadPrefixLength { len, max: 128 });
        }
        let key = u128::from_be_bytes(*prefix) & mask6(len);
        let Some(old) = self.rib6.remove(key, len) else {
            return Ok(false);
        };
        self.set_route_nh(Some(old), None);
        let repl = match self.w6.covering_hint(&self.s.v6, key, len) {
            Some(r) => r,
            None => self.rib6.covering(key, len),
        };
        debug_assert_eq!(repl, self.rib6.covering(key, len));
        self.w6.del(&self.s.v6, key, len, repl);
        self.retire_groups(Family::V6);
        self.tick();
        Ok(true)
    }

    /// Exact-match read of the RIB (control plane view).
    pub fn get4(&self, prefix: u32, len: u8) -> Option<NextHopId> {
        if len > 32 {
            return None;
        }
        self.rib4.get(prefix & mask4(len), len)
    }
    /// Exact-match read of the IPv6 RIB (control plane view).
    pub fn get6(&self, prefix: &[u8; 16], len: u8) -> Option<NextHopId> {
        if len > 128 {
            return None;
        }
        self.rib6
            .get(u128::from_be_bytes(*prefix) & mask6(len), len)
    }
    /// Free memory whose grace period has ended (non-blocking).
    pub fn reclaim(&mut self) {
        if self.deferred.is_empty() {
            return;
        }
        self.s.qsbr.advance();
        let min = self.s.qsbr.min_reported();
        self.free_until(min);
    }
    /// Block until every online reader passed a quiescent point, then reclaim.
    ///
    /// The writer's own thread must not hold an online [`FibReader`] (it would wait for
    /// itself). Route adds call this when tbl8 groups run out while retired
    /// groups are still waiting for their grace period.
    pub fn synchronize(&mut self) {
        let target = self.s.qsbr.advance();
        self.s.qsbr.wait_for(target);
        self.free_until(target);
    }
    /// Memory in use (committed), for bytes/route reporting.
    pub fn memory(&self) -> FibMemory {
        let slot_pages = (self.s.nh.hwm.load(Ordering::Relaxed) * std::mem::size_of::<usize>())
            .next_multiple_of(4096);
        FibMemory {
            v4_table_bytes: trie::TBL24_BYTES + self.w4.usage().1 * trie::GROUP_BYTES,
            v6_table_bytes: trie::TBL24_BYTES + self.w6.usage().1 * trie::GROUP_BYTES,
            rib_bytes: self.rib4.bytes() + self.rib6.bytes(),
            nexthop_bytes: slot_pages
                + self.nh_bytes
                + (self.route_refs.capacity() + self.member_refs.capacity()) * 4,
            routes_v4: self.rib4.len(),
            routes_v6: self.rib6.len(),
        }
    }
    /// Where readers of this FIB come from.
    pub fn readers(&self) -> FibReaders {
        FibReaders {
            s: Arc::clone(&self.s),
        }
    }
    /// Longest-prefix match of one IPv4 destination, as the fast path sees the table now
    /// (the writer's own reads need no registration: it frees only through `&mut self`).
    pub fn lookup4(&self, dst: u32) -> NextHopId {
        self.s.v4.lookup4(dst)
    }
    /// Longest-prefix match of one IPv6 destination, as the fast path sees the table now.
    pub fn lookup6(&self, dst: &[u8; 16]) -> NextHopId {
        self.s.v6.lookup6(dst)
    }
    /// The next hop behind `id` as published, `None` if undefined.
    pub fn next_hop(&self, id: NextHopId) -> Option<&NextHop> {
        self.s.nh.get(id)
    }
    /// ECMP resolution as a reader does it.
    pub fn resolve(&self, id: NextHopId, flow_hash: u32) -> NextHopId {
        resolve_in(&self.s.nh, id, flow_hash)
    }
    /// tbl8 groups reachable from the IPv4 and IPv6 tables (retired groups not counted).
    pub fn tbl8_in_use(&self) -> (usize, usize) {
        (self.w4.usage().0, self.w6.usage().0)
    }
    /// Objects retired but not yet freed (waiting for readers' quiescent points).
    pub fn pending_reclaim(&self) -> usize {
        self.deferred.len()
    }
    #[cfg(test)]
    fn next_hops_freed(&self) -> usize {
        self.nh_freed
    }
}

impl Drop for FibWriter {
    fn drop(&mut self) {
        // Readers may outlive the writer: hand retired next hops to the shared state, which
        // frees them when the last reader is gone.
        let mut orphans = self.s.orphans.lock().unwrap_or_else(|e| e.into_inner());
        for (_, g) in self.deferred.drain(..) {
            if let Garbage::NextHop(p) = g {
                orphans.push(p);
            }
        }
    }
}

#[cfg(test)]
mod tests;
