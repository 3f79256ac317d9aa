//! The security association database of the fast path: each worker's SAs, owned by that
//! worker (an [`Sa`] carries a sequence number or a replay window, so one thread at a time
//! writes it), changed by the control thread through a bounded queue of [`Op`]s per worker.
//!
//! - **Owners.** With several workers each tunnel interface gets an owner worker when its
//!   first SA is installed ([`Owners`]: the worker owning the fewest tunnels), kept while
//!   the tunnel has SAs: its receive SAs, its transmit SA, its SAs by destination and a
//!   rekey's new SAs all live there, so the switch of its transmit SA is one op on one
//!   thread. A policy SA (no tunnel) is a load of its own, on the least loaded worker for
//!   its life; the SPD names its worker (`crate::spd::Policy::owner`). Every worker's table knows the
//!   owner of each tunnel ([`Sad::elsewhere`]) and of each inbound SPI ([`Sad::inbound`]
//!   gives [`REMOTE`]` | owner` for another worker's SA), published through the same
//!   queues, so a packet for another worker's SA is handed to it without a lock.
//! - The control thread builds each SA (keying its cipher contexts: the only allocations)
//!   and sends it boxed to the worker with the slot it goes into ([`SadWriter`]). The
//!   worker applies queued ops between packets, a bounded number per vector, so adding a
//!   hundred thousand SAs never pauses forwarding. An SA it replaces or removes goes back
//!   to the control thread, which drops it (zeroizing its keys) off the packet path.
//! - Ops apply in order, so the writer makes changes before they are used: an SA is
//!   inserted before its SPI maps to it or a tunnel sends with it, and a mapping is gone
//!   before its SA is removed. A tunnel's transmit SA is switched by one op: the packets
//!   of a vector use the old SA or the new one, never a mix of their state.
//! - The slots, the SPI index and the tunnels' table are sized once (`max_sas`): the worker
//!   never allocates. The control thread refuses an SA beyond it.
//! - Counters: the worker copies each SA's packet and byte counts into its [`SaStats`]
//!   (atomics, one writer) after each vector that used it, and counts errors there as they
//!   happen; `show ipsec sa` and the metrics read them.

use std::collections::VecDeque;
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;
use rustc_hash::FxHashMap;

use crate::arena::SaBox;
use crate::dests::{Dest, DestKey, Dests};
use crate::reasm::{ReasmStats, Reassembly};
use crate::sa::Sa;

/// Ops queued from the control thread to one worker at a time.
pub const OP_QUEUE: usize = 4096;
/// Ops a worker applies per vector, at most.
pub const OPS_PER_VECTOR: usize = 256;
/// No slot.
pub const NONE: u32 = u32::MAX;
/// In a worker's SPI index: the SA is worker `v & !REMOTE`'s ([`remote`]). Slots stay
/// below it (a table holds fewer than 2^31 SAs).
pub const REMOTE: u32 = 1 << 31;
/// A tunnel interface no worker owns yet (it has no SA): its packets stay where they are.
pub const UNOWNED: u16 = u16::MAX;

/// The worker another worker's SA lives on, from what [`Sad::inbound`] gave (`None`: a
/// slot of this worker's, or [`NONE`]).
#[inline]
pub fn remote(v: u32) -> Option<usize> {
    (v != NONE && v & REMOTE != 0).then_some((v & !REMOTE) as usize)
}
/// Inbound SAs above which the ESP nodes prefetch ([`Sad::worth_prefetching`]): a few
/// hundred KB of SA state, about what stays in a core's L2 cache.
pub const PREFETCH_MIN_SAS: usize = 256;

pub use crate::sa::SaStats;

/// An SA in a worker's table.
pub struct Installed {
    /// The SA, in huge-page memory with the other SAs ([`SaBox`]); its counters are
    /// published to its [`SaStats`] ([`Sa::stats`]).
    pub sa: SaBox,
    /// The tunnel interface it belongs to: a packet it decrypts is received there.
    pub iface: u16,
}

/// A change to a worker's table.
pub enum Op {
    /// Put an SA into `slot` (whatever was there goes back to the control thread).
    Insert {
        /// The slot.
        slot: u32,
        /// The SA.
        sa: Installed,
    },
    /// Empty `slot` (its SA goes back to the control thread).
    Remove {
        /// The slot.
        slot: u32,
    },
    /// Tunnel interface `iface`'s SAs live on worker `worker` ([`UNOWNED`]: on none).
    SetOwner {
        /// The interface.
        iface: u16,
        /// The worker.
        worker: u16,
    },
    /// Inbound ESP with `spi` is for the SA in `slot` (or, [`REMOTE`]` | w`, worker w's).
    MapSpi {
        /// The SPI.
        spi: u32,
        /// The slot.
        slot: u32,
    },
    /// Inbound ESP with `spi` is for no SA any more.
    UnmapSpi {
        /// The SPI.
        spi: u32,
    },
    /// Tunnel interface `iface` sends with the SA in `slot` ([`NONE`]: with none, its
    /// packets are dropped).
    SetTx {
        /// The interface.
        iface: u16,
        /// The slot.
        slot: u32,
    },
    /// The ESP reassembly table, sent with the first inbound SA (built by the control
    /// thread: a router without IPsec never allocates it).
    Reassembly(Box<Reassembly>),
    /// The table of transmit SAs by destination, sent with the first such SA (built by
    /// the control thread, with room for all it will hold).
    Dests(Box<Dests>),
    /// Packets to `key`'s prefix on its interface go with the SA in `slot`.
    SetDest {
        /// The interface and prefix.
        key: DestKey,
        /// The slot.
        slot: u32,
    },
    /// `key` has no SA any more, if it is the SA in `slot`'s.
    UnsetDest {
        /// The interface and prefix.
        key: DestKey,
        /// The slot.
        slot: u32,
    },
}

/// One worker's SAs.
pub struct Sad {
    slots: Vec<Option<Installed>>,
    by_spi: FxHashMap<u32, u32>,
    /// Per interface index: the slot of its transmit SA, or [`NONE`].
    tx: Vec<u32>,
    /// Per interface index: the worker owning its SAs, or [`UNOWNED`].
    owner: Vec<u16>,
    /// This table's worker.
    me: u16,
    ops: Arc<ArrayQueue<Op>>,
    retired: Arc<ArrayQueue<Installed>>,
    /// SAs installed with UDP encapsulation (NAT-T): while any is, UDP to port 4500 of the
    /// router's addresses is looked at.
    natt: usize,
    /// The ESP fragments being gathered, once an inbound SA was installed.
    reasm: Option<Box<Reassembly>>,
    /// Transmit SAs by destination (tunnels with several peers), once one was installed.
    dests: Option<Box<Dests>>,
}

impl Sad {
    /// Worker `me`'s table of `max_sas` slots for `ifaces` interfaces, fed by `ops`,
    /// handing replaced SAs to `retired`.
    fn new(
        me: u16,
        max_sas: usize,
        ifaces: usize,
        ops: Arc<ArrayQueue<Op>>,
        retired: Arc<ArrayQueue<Installed>>,
    ) -> Sad {
        let mut by_spi = FxHashMap::default();
        // Twice the most it holds: then a table worn by removals is rehashed in place,
        // never grown (hashbrown resizes when more than half its room is in use).
        by_spi.reserve(2 * max_sas);
        Sad {
            slots: (0..max_sas).map(|_| None).collect(),
            by_spi,
            tx: vec![NONE; ifaces],
            owner: vec![UNOWNED; ifaces],
            me,
            ops,
            retired,
            natt: 0,
            reasm: None,
            dests: None,
        }
    }

    /// Apply up to `max` queued ops; returns how many. Stops early while the queue back to
    /// the control thread is full (nothing is dropped on the packet path, nor lost).
    pub fn apply_ops(&mut self, max: usize) -> usize {
        let mut n = 0;
        // One op hands back at most one SA: it is applied only while there is room for it.
        while n < max && !self.retired.is_full() {
            let Some(op) = self.ops.pop() else { break };
            n += 1;
            match op {
                Op::Insert { slot, sa } => {
                    let natt = sa.sa.natt().is_some();
                    if let Some(s) = self.slots.get_mut(slot as usize) {
                        self.natt += usize::from(natt);
                        if let Some(old) = s.replace(sa) {
                            self.natt = self
                                .natt
                                .saturating_sub(usize::from(old.sa.natt().is_some()));
                            let _ = self.retired.push(old);
                        }
                    } else {
                        // A slot beyond the table (the writer never sends one): back it goes.
                        let _ = self.retired.push(sa);
                    }
                }
                Op::Remove { slot } => {
                    if let Some(old) = self.slots.get_mut(slot as usize).and_then(Option::take) {
                        self.natt = self
                            .natt
                            .saturating_sub(usize::from(old.sa.natt().is_some()));
                        let _ = self.retired.push(old);
                    }
                }
                Op::MapSpi { spi, slot } => {
                    // Within the reserved capacity (the writer counts): no allocation.
                    if self.by_spi.len() < self.slots.len() || self.by_spi.contains_key(&spi) {
                        self.by_spi.insert(spi, slot);
                    }
                }
                Op::UnmapSpi { spi } => {
                    self.by_spi.remove(&spi);
                }
                Op::SetTx { iface, slot } => {
                    if let Some(t) = self.tx.get_mut(iface as usize) {
                        *t = slot;
                    }
                }
                Op::SetOwner { iface, worker } => {
                    if let Some(o) = self.owner.get_mut(iface as usize) {
                        *o = worker;
                    }
                }
                Op::Reassembly(r) => self.reasm = Some(r),
                Op::Dests(d) => self.dests = Some(d),
                Op::SetDest { key, slot } => {
                    if let Some(d) = self.dests.as_mut() {
                        d.set(key, slot);
                    }
                }
                Op::UnsetDest { key, slot } => {
                    if let Some(d) = self.dests.as_mut() {
                        d.unset(key, slot);
                    }
                }
            }
        }
        n
    }

    /// Take the ESP reassembly table (`None` before the first inbound SA), to give it back
    /// with [`Sad::put_reassembly`] (no allocation: the box moves).
    #[inline]
    pub fn take_reassembly(&mut self) -> Option<Box<Reassembly>> {
        self.reasm.take()
    }

    /// Give back what [`Sad::take_reassembly`] took.
    #[inline]
    pub fn put_reassembly(&mut self, r: Option<Box<Reassembly>>) {
        if r.is_some() {
            self.reasm = r;
        }
    }

    /// Whether ops are queued that were not applied yet (the SPD of policy-based IPsec
    /// is taken up only once its SAs' changes are in).
    #[inline]
    pub fn ops_pending(&self) -> bool {
        !self.ops.is_empty()
    }

    /// Whether an SA with UDP encapsulation (NAT-T) is installed.
    #[inline]
    pub fn natt(&self) -> bool {
        self.natt > 0
    }

    /// The slot of the inbound SA for `spi`, [`NONE`], or (another worker's SA)
    /// [`REMOTE`]` | worker` ([`remote`]; [`Sad::get_mut`] finds no SA there).
    #[inline]
    pub fn inbound(&self, spi: u32) -> u32 {
        self.by_spi.get(&spi).copied().unwrap_or(NONE)
    }

    /// The worker owning tunnel interface `iface`'s SAs if it is another one (`None`:
    /// this one, or none yet: then its packets stay here).
    #[inline]
    pub fn elsewhere(&self, iface: u16) -> Option<usize> {
        match self.owner.get(iface as usize) {
            Some(&o) if o != UNOWNED && o != self.me => Some(usize::from(o)),
            _ => None,
        }
    }

    /// The slot of the transmit SA of interface `iface`, or [`NONE`].
    #[inline]
    pub fn tx(&self, iface: u16) -> u32 {
        self.tx.get(iface as usize).copied().unwrap_or(NONE)
    }

    /// Whether interface `iface` chooses some of its packets' SAs by destination
    /// ([`Dests`]): then [`Sad::tx_to`] needs the packet's destination.
    #[inline]
    pub fn chooses(&self, iface: u16) -> bool {
        self.dests.as_deref().is_some_and(|d| d.has(iface))
    }

    /// The slot of the SA interface `iface` sends a packet to `dst` with: the SA of the
    /// longest of its prefixes holding `dst` if it has SAs by destination ([`Dests`]),
    /// else its transmit SA; [`NONE`] if neither.
    #[inline]
    pub fn tx_to(&self, iface: u16, dst: Option<Dest>) -> u32 {
        if let (Some(d), Some(dst)) = (self.dests.as_deref(), dst) {
            let s = d.find(iface, dst);
            if s != NONE {
                return s;
            }
        }
        self.tx(iface)
    }

    /// The SA in `slot`.
    #[inline]
    pub fn get_mut(&mut self, slot: u32) -> Option<&mut Installed> {
        self.slots.get_mut(slot as usize)?.as_mut()
    }

    /// Whether the table holds enough SAs for them to fall out of the caches: then the ESP
    /// nodes prefetch each packet's SA ahead of it (with few, that is only overhead).
    #[inline]
    pub fn worth_prefetching(&self) -> bool {
        self.by_spi.len() > PREFETCH_MIN_SAS
    }

    /// Hint the CPU to bring in `slot`'s entry, which points to its SA: the first of the
    /// steps ahead of a packet ([`Sad::prefetch_sa`], [`Sad::prefetch_window`]).
    #[inline]
    pub fn prefetch_slot(&self, slot: u32) {
        if let Some(s) = self.slots.get(slot as usize) {
            dataplane::buffer::prefetch((s as *const Option<Installed>).cast());
        }
    }

    /// Hint the CPU to bring in the SA in `slot` ([`Sa::prefetch`]). Reads the slot's
    /// entry: some packets after [`Sad::prefetch_slot`].
    #[inline]
    pub fn prefetch_sa(&self, slot: u32) {
        if let Some(Some(i)) = self.slots.get(slot as usize) {
            i.sa.prefetch();
        }
    }

    /// Hint the CPU to bring in the published counters of the SA in `slot` and, inbound,
    /// its replay bitmap block ([`Sa::prefetch_window`]). Reads the SA: some packets after [`Sad::prefetch_sa`].
    #[inline]
    pub fn prefetch_window(&self, slot: u32) {
        if let Some(Some(i)) = self.slots.get(slot as usize) {
            i.sa.prefetch_window();
        }
    }

    /// Publish the counters of the SA in `slot`.
    #[inline]
    pub fn publish(&self, slot: u32) {
        if let Some(Some(i)) = self.slots.get(slot as usize) {
            i.sa.publish();
        }
    }
}

/// Why an SA cannot be installed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SadError {
    /// The table is full.
    #[error("{0} SAs are installed: the table holds no more (raise ipsec.max_sas, which takes a restart)")]
    Full(usize),
    /// Two inbound SAs with one SPI.
    #[error("SPI {0:#x} is already used by another inbound SA")]
    DuplicateSpi(u32),
    /// The table of transmit SAs by destination is full.
    #[error("the {0} destination prefixes of the transmit SAs by destination are in use (half of ipsec.max_sas, which takes a restart)")]
    DestsFull(usize),
}

/// Which worker owns each tunnel interface's SAs (the control thread's, in the
/// [`SadWriter`]): a tunnel gets the least loaded worker (the lowest of them on a tie)
/// when its first SA comes, and keeps it until its last SA goes. An SA of no tunnel (an
/// interface beyond the table: a policy SA) is a load of its own, and gets the least
/// loaded worker for its life. The load of a worker: the tunnels and policy SAs it owns.
#[derive(Debug, Clone)]
pub struct Owners {
    /// Per interface: its owner, or [`UNOWNED`].
    of: Vec<u16>,
    /// Per interface: its SAs installed.
    sas: Vec<u32>,
    /// Per worker: the tunnels and policy SAs it owns.
    load: Vec<u32>,
}

impl Owners {
    /// Nothing owned, among `workers` workers (1 at least), for `ifaces` interfaces.
    pub fn new(workers: usize, ifaces: usize) -> Owners {
        Owners {
            of: vec![UNOWNED; ifaces],
            sas: vec![0; ifaces],
            load: vec![0; workers.clamp(1, usize::from(UNOWNED))],
        }
    }

    /// The owner of tunnel interface `iface`'s SAs, if it has one.
    pub fn of(&self, iface: u16) -> Option<usize> {
        match self.of.get(iface as usize) {
            Some(&o) if o != UNOWNED => Some(usize::from(o)),
            _ => None,
        }
    }

    /// The least loaded worker, taken: its load grows by one.
    fn least_loaded(&mut self) -> usize {
        let w = self
            .load
            .iter()
            .enumerate()
            .min_by_key(|&(w, l)| (*l, w))
            .map_or(0, |(w, _)| w);
        if let Some(l) = self.load.get_mut(w) {
            *l += 1;
        }
        w
    }

    /// One more SA on `iface`: its owner, and whether it was chosen now (the workers are
    /// then to be told). An SA of no tunnel (`iface` beyond the table) gets a worker of
    /// its own ([`Owners::release`] with its worker gives it back).
    pub fn take(&mut self, iface: u16) -> (usize, bool) {
        let i = iface as usize;
        let (Some(o), Some(n)) = (self.of.get_mut(i), self.sas.get_mut(i)) else {
            return (self.least_loaded(), false);
        };
        *n += 1;
        if *o != UNOWNED {
            return (usize::from(*o), false);
        }
        let w = self.least_loaded();
        if let Some(o) = self.of.get_mut(i) {
            *o = w as u16;
        }
        (w, true)
    }

    /// One SA fewer on `iface` (an SA of no tunnel: on `worker`): a tunnel with none left
    /// has no owner any more.
    pub fn release(&mut self, iface: u16, worker: usize) {
        let i = iface as usize;
        let (Some(o), Some(n)) = (self.of.get_mut(i), self.sas.get_mut(i)) else {
            if let Some(l) = self.load.get_mut(worker) {
                *l = l.saturating_sub(1);
            }
            return;
        };
        *n = n.saturating_sub(1);
        if *n == 0 && *o != UNOWNED {
            if let Some(l) = self.load.get_mut(usize::from(*o)) {
                *l = l.saturating_sub(1);
            }
            *o = UNOWNED;
        }
    }

    /// Tunnels each worker owns.
    pub fn load(&self) -> &[u32] {
        &self.load
    }
}

/// The control thread's side of one worker's queue: the ops not yet queued (the queue is
/// bounded; [`SadWriter::flush`] sends what fits) and the SAs it hands back.
struct Lane {
    pending: VecDeque<Op>,
    ops: Arc<ArrayQueue<Op>>,
    retired: Arc<ArrayQueue<Installed>>,
    /// The worker's [`Dests`] table was sent.
    dests_sent: bool,
}

/// The control thread's side of the workers' tables: which slots are in use (slots are
/// one numbering over all workers: a slot is in its owner's table only), which worker
/// owns each tunnel ([`Owners`]), and a [`Lane`] of ops to each worker.
pub struct SadWriter {
    free: Vec<u32>,
    capacity: usize,
    /// Inbound SAs' slots by SPI.
    spis: FxHashMap<u32, u32>,
    /// By slot: its inbound SA's SPI (0: none or outbound; SPIs below 256 are reserved).
    spi_of: Vec<u32>,
    /// By slot: its SA's interface and owner.
    placed: Vec<(u16, u16)>,
    lanes: Vec<Lane>,
    owners: Owners,
    /// Until the first inbound SA: the counters of the reassembly table to send worker 0
    /// with it ([`SadWriter::reassemble`]).
    reasm: Option<Arc<ReasmStats>>,
    /// Per prefix in the worker's [`Dests`]: the slot that has it (as the worker has it),
    /// and the other SAs claiming it, oldest first: when the one that has it leaves, the
    /// newest of the others takes it back (a simultaneous rekey's twin, two spokes with
    /// one network). A prefix is its interface's, so all its claimants have one owner.
    claims: FxHashMap<DestKey, u32>,
    others: FxHashMap<DestKey, Vec<u32>>,
    /// A worker table's room, sent with its first prefix.
    dests_capacity: usize,
    ifaces: usize,
}

impl SadWriter {
    /// Install `sa` for tunnel interface `iface` on the tunnel's owner (chosen now if it
    /// has none): its slot. An inbound SA is reachable by its SPI from now on (once the
    /// workers apply the ops: the owner's table maps the SPI to the slot, the others' to
    /// the owner); an outbound one is used once [`SadWriter::set_tx`] names it.
    pub fn insert(&mut self, sa: Sa, iface: u16) -> Result<u32, SadError> {
        let inbound = sa.direction() == crate::Direction::Inbound;
        let spi = sa.spi();
        if inbound && self.spis.contains_key(&spi) {
            return Err(SadError::DuplicateSpi(spi));
        }
        let slot = self.free.pop().ok_or(SadError::Full(self.capacity))?;
        let (owner, chosen) = self.owners.take(iface);
        // With one worker, every tunnel is its: nothing to tell.
        if chosen && self.lanes.len() > 1 {
            for l in &mut self.lanes {
                l.pending.push_back(Op::SetOwner {
                    iface,
                    worker: owner as u16,
                });
            }
        }
        let at = slot as usize;
        if self.placed.len() <= at {
            self.placed.resize(at + 1, (0, 0));
            self.spi_of.resize(at + 1, 0);
        }
        if let Some(p) = self.placed.get_mut(at) {
            *p = (iface, owner as u16);
        }
        if let Some(l) = self.lanes.get_mut(owner) {
            l.pending.push_back(Op::Insert {
                slot,
                sa: Installed {
                    sa: SaBox::new(sa),
                    iface,
                },
            });
        }
        if inbound {
            // Worker 0 gathers ESP fragments, whoever owns their SA.
            if let Some(stats) = self.reasm.take() {
                if let Some(l) = self.lanes.first_mut() {
                    l.pending
                        .push_back(Op::Reassembly(Box::new(Reassembly::new(stats))));
                }
            }
            self.spis.insert(spi, slot);
            if let Some(s) = self.spi_of.get_mut(at) {
                *s = spi;
            }
            for (w, l) in self.lanes.iter_mut().enumerate() {
                let slot = if w == owner {
                    slot
                } else {
                    REMOTE | owner as u32
                };
                l.pending.push_back(Op::MapSpi { spi, slot });
            }
        }
        Ok(slot)
    }

    /// This table gathers ESP fragments: with the first inbound SA, the writer sends
    /// worker 0 a reassembly table counting into `stats`.
    pub fn reassemble(&mut self, stats: Arc<ReasmStats>) {
        self.reasm = Some(stats);
    }

    /// The slot of the inbound SA with `spi`.
    pub fn slot_of_spi(&self, spi: u32) -> Option<u32> {
        self.spis.get(&spi).copied()
    }

    /// The worker whose table holds the SA in `slot` (installed).
    pub fn owner(&self, slot: u32) -> Option<usize> {
        self.placed.get(slot as usize).map(|&(_, o)| usize::from(o))
    }

    /// Which worker owns which tunnel.
    pub fn owners(&self) -> &Owners {
        &self.owners
    }

    fn lane_of(&mut self, slot: u32) -> Option<&mut Lane> {
        let o = self.placed.get(slot as usize).map(|&(_, o)| o)?;
        self.lanes.get_mut(usize::from(o))
    }

    /// Remove the SA in `slot` (its SPI mapping first, in every table, for an inbound
    /// one). The tunnel's last SA gone, the tunnel has no owner any more.
    pub fn remove(&mut self, slot: u32) {
        if let Some(spi) = self.spi_of.get_mut(slot as usize).map(std::mem::take) {
            if spi != 0 {
                self.spis.remove(&spi);
                for l in &mut self.lanes {
                    l.pending.push_back(Op::UnmapSpi { spi });
                }
            }
        }
        if let Some(l) = self.lane_of(slot) {
            l.pending.push_back(Op::Remove { slot });
        }
        if let Some(&(iface, owner)) = self.placed.get(slot as usize) {
            self.owners.release(iface, usize::from(owner));
        }
        self.free.push(slot);
    }

    /// Make interface `iface` send packets to each of `keys`' prefixes with the SA in
    /// `slot` (installed, outbound). Refused beyond the table's room.
    pub fn set_dests(&mut self, keys: &[DestKey], slot: u32) -> Result<(), SadError> {
        let new = keys.iter().filter(|k| !self.claims.contains_key(k)).count();
        if self.claims.len() + new > self.dests_capacity {
            return Err(SadError::DestsFull(self.dests_capacity));
        }
        let (cap, ifaces) = (self.dests_capacity, self.ifaces);
        let Some(lane) = self.lane_of(slot) else {
            return Ok(());
        };
        if !lane.dests_sent {
            lane.dests_sent = true;
            lane.pending
                .push_back(Op::Dests(Box::new(Dests::with_capacity(cap, ifaces))));
        }
        for &key in keys {
            if let Some(had) = self.claims.insert(key, slot) {
                if had != slot {
                    self.others.entry(key).or_default().push(had);
                }
            }
            if let Some(l) = self.lane_of(slot) {
                l.pending.push_back(Op::SetDest { key, slot });
            }
        }
        Ok(())
    }

    /// The prefixes [`SadWriter::set_dests`] gave the SA in `slot` leave it (before the SA
    /// is removed): a prefix it has goes to the newest other SA claiming it, or to none.
    pub fn unset_dests(&mut self, keys: &[DestKey], slot: u32) {
        for &key in keys {
            if self.claims.get(&key) == Some(&slot) {
                let next = self.others.get_mut(&key).and_then(Vec::pop);
                if self.others.get(&key).is_some_and(Vec::is_empty) {
                    self.others.remove(&key);
                }
                match next {
                    Some(s) => {
                        self.claims.insert(key, s);
                        if let Some(l) = self.lane_of(s) {
                            l.pending.push_back(Op::SetDest { key, slot: s });
                        }
                    }
                    None => {
                        self.claims.remove(&key);
                        if let Some(l) = self.lane_of(slot) {
                            l.pending.push_back(Op::UnsetDest { key, slot });
                        }
                    }
                }
            } else if let Some(v) = self.others.get_mut(&key) {
                v.retain(|&s| s != slot);
                if v.is_empty() {
                    self.others.remove(&key);
                }
            }
        }
    }

    /// Room left in the table of prefixes.
    pub fn dests_room(&self) -> usize {
        self.dests_capacity.saturating_sub(self.claims.len())
    }

    /// Make tunnel interface `iface` send with the SA in `slot` (installed, on `iface`'s
    /// owner), or with none ([`NONE`]: told to every worker, owner or not).
    pub fn set_tx(&mut self, iface: u16, slot: u32) {
        if slot == NONE {
            for l in &mut self.lanes {
                l.pending.push_back(Op::SetTx { iface, slot });
            }
        } else if let Some(l) = self.lane_of(slot) {
            l.pending.push_back(Op::SetTx { iface, slot });
        }
    }

    /// Queue what fits of the pending ops, and drop the SAs the workers handed back (their
    /// keys are zeroized as they go). Returns the ops still pending.
    pub fn flush(&mut self) -> usize {
        let mut left = 0;
        for l in &mut self.lanes {
            while let Some(old) = l.retired.pop() {
                drop(old);
            }
            while let Some(op) = l.pending.pop_front() {
                if let Err(op) = l.ops.push(op) {
                    l.pending.push_front(op);
                    break;
                }
            }
            left += l.pending.len();
        }
        left
    }

    /// Slots free.
    pub fn free_slots(&self) -> usize {
        self.free.len()
    }

    /// SAs installed.
    pub fn len(&self) -> usize {
        self.capacity - self.free.len()
    }

    /// Whether none is installed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One worker's table and the control thread's writer for it, connected.
pub fn channel(max_sas: usize, ifaces: usize) -> (Sad, SadWriter) {
    let max_sas = capped(max_sas);
    let (t, lane) = table(0, max_sas, ifaces);
    (t, writer(vec![lane], max_sas, ifaces))
}

/// The tables of `workers` workers (1 at least), each with room for `max_sas` SAs, and
/// the control thread's writer for them, connected.
pub fn channels(max_sas: usize, ifaces: usize, workers: usize) -> (Vec<Sad>, SadWriter) {
    let workers = workers.clamp(1, usize::from(UNOWNED));
    let max_sas = capped(max_sas);
    let (tables, lanes): (Vec<Sad>, Vec<Lane>) = (0..workers)
        .map(|me| table(me as u16, max_sas, ifaces))
        .unzip();
    (tables, writer(lanes, max_sas, ifaces))
}

/// `max_sas` within what a slot number can say.
fn capped(max_sas: usize) -> usize {
    max_sas.min(REMOTE as usize - 1)
}

/// Worker `me`'s table and the writer's lane to it.
fn table(me: u16, max_sas: usize, ifaces: usize) -> (Sad, Lane) {
    let ops = Arc::new(ArrayQueue::new(OP_QUEUE));
    let retired = Arc::new(ArrayQueue::new(OP_QUEUE));
    (
        Sad::new(me, max_sas, ifaces, ops.clone(), retired.clone()),
        Lane {
            pending: VecDeque::new(),
            ops,
            retired,
            dests_sent: false,
        },
    )
}

/// The control thread's writer for the tables behind `lanes` (by worker).
fn writer(lanes: Vec<Lane>, max_sas: usize, ifaces: usize) -> SadWriter {
    let workers = lanes.len();
    SadWriter {
        free: (0..max_sas as u32).rev().collect(),
        capacity: max_sas,
        spis: FxHashMap::default(),
        spi_of: Vec::new(),
        placed: Vec::new(),
        lanes,
        owners: Owners::new(workers, ifaces),
        reasm: None,
        claims: FxHashMap::default(),
        others: FxHashMap::default(),
        // One prefix per outbound SA, when every SA is a child's pair: a road warrior
        // gateway at its max_sas.
        dests_capacity: max_sas / 2 + 64,
        ifaces,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Direction, Encryption, Integrity, Mode, SaConfig};

    fn sa(spi: u32, dir: Direction) -> Sa {
        let mut c = SaConfig::new(
            spi,
            dir,
            Encryption::AesGcm128,
            &[7; 20],
            Integrity::None,
            &[],
        );
        c.mode = Mode::Tunnel {
            src: "192.0.2.1".parse().unwrap(),
            dst: "192.0.2.2".parse().unwrap(),
        };
        Sa::new(&c).unwrap()
    }

    #[test]
    fn ops_apply_in_order_and_replaced_sas_come_back() {
        let (mut sad, mut w) = channel(4, 3);
        let s1 = w.insert(sa(0x1001, Direction::Inbound), 2).unwrap();
        let t1 = w.insert(sa(0x2001, Direction::Outbound), 2).unwrap();
        w.set_tx(2, t1);
        assert_eq!(w.flush(), 0);
        assert_eq!(sad.inbound(0x1001), NONE, "nothing applied yet");
        assert_eq!(sad.apply_ops(OPS_PER_VECTOR), 4);
        assert_eq!(sad.inbound(0x1001), s1);
        assert_eq!(sad.tx(2), t1);
        assert_eq!(sad.tx(9), NONE);
        assert_eq!(sad.get_mut(s1).unwrap().iface, 2);
        assert_eq!(
            w.insert(sa(0x1001, Direction::Inbound), 2),
            Err(SadError::DuplicateSpi(0x1001))
        );
        // Rekey: a new transmit SA, switched, then the old one removed.
        let t2 = w.insert(sa(0x2002, Direction::Outbound), 2).unwrap();
        w.set_tx(2, t2);
        w.remove(t1);
        w.remove(s1);
        w.flush();
        sad.apply_ops(OPS_PER_VECTOR);
        assert_eq!(sad.tx(2), t2);
        assert_eq!(sad.inbound(0x1001), NONE);
        assert!(sad.get_mut(t1).is_none());
        assert_eq!(w.len(), 1);
        w.flush();
        assert!(
            w.lanes[0].retired.is_empty(),
            "the removed SAs were dropped"
        );
    }

    #[test]
    fn the_reassembly_table_comes_with_the_first_inbound_sa() {
        let (mut sad, mut w) = channel(4, 1);
        w.reassemble(Arc::default());
        w.insert(sa(0x2001, Direction::Outbound), 0).unwrap();
        w.flush();
        sad.apply_ops(OPS_PER_VECTOR);
        assert!(sad.take_reassembly().is_none(), "no inbound SA, no table");
        w.insert(sa(0x1001, Direction::Inbound), 0).unwrap();
        w.insert(sa(0x1002, Direction::Inbound), 0).unwrap();
        w.flush();
        assert_eq!(sad.apply_ops(OPS_PER_VECTOR), 5, "one table, sent once");
        let r = sad.take_reassembly();
        assert!(r.is_some());
        assert!(sad.take_reassembly().is_none(), "taken");
        sad.put_reassembly(r);
        assert!(sad.take_reassembly().is_some(), "given back");
        // A table that does not gather (another worker's) never gets one.
        let (mut other, mut w) = channel(4, 1);
        w.insert(sa(0x1001, Direction::Inbound), 0).unwrap();
        w.flush();
        other.apply_ops(OPS_PER_VECTOR);
        assert!(other.take_reassembly().is_none());
    }

    #[test]
    fn a_full_table_is_refused_and_a_full_queue_waits() {
        let (mut sad, mut w) = channel(2, 1);
        w.insert(sa(0x1001, Direction::Inbound), 0).unwrap();
        w.insert(sa(0x1002, Direction::Inbound), 0).unwrap();
        assert_eq!(
            w.insert(sa(0x1003, Direction::Inbound), 0),
            Err(SadError::Full(2))
        );
        // More ops than the queue holds: the rest wait on the writer's side.
        for _ in 0..OP_QUEUE {
            w.set_tx(0, NONE);
        }
        assert_eq!(w.flush(), 4);
        let mut total = 0;
        while total < OP_QUEUE + 4 {
            let n = sad.apply_ops(OPS_PER_VECTOR);
            assert!(n <= OPS_PER_VECTOR);
            total += n;
            w.flush();
        }
        assert_eq!(sad.inbound(0x1002), 1);
    }

    #[test]
    fn a_tunnel_goes_to_the_least_loaded_worker_and_keeps_it_while_it_has_sas() {
        let mut o = Owners::new(3, 8);
        assert_eq!(o.of(2), None, "no SA, no owner");
        assert_eq!(o.take(2), (0, true));
        assert_eq!(o.take(2), (0, false), "a tunnel's second SA: same owner");
        assert_eq!(o.take(5), (1, true));
        assert_eq!(o.take(6), (2, true));
        assert_eq!(o.take(7), (0, true), "all equal: the lowest");
        assert_eq!(o.load(), &[2, 1, 1]);
        // Tunnel 5 loses its SA: worker 1 is the least loaded again.
        o.release(5, 0);
        assert_eq!(o.of(5), None);
        assert_eq!(o.take(3), (1, true));
        // Tunnel 2 keeps its owner until its last SA goes.
        o.release(2, 0);
        assert_eq!(o.of(2), Some(0));
        o.release(2, 0);
        assert_eq!(o.of(2), None);
        assert_eq!(o.load(), &[1, 1, 1]);
        // SAs of no tunnel (policy SAs): each the least loaded worker, for its life.
        assert_eq!(o.take(u16::MAX), (0, false));
        assert_eq!(o.take(u16::MAX), (1, false));
        assert_eq!(o.of(u16::MAX), None);
        assert_eq!(o.load(), &[2, 2, 1]);
        o.release(u16::MAX, 0);
        assert_eq!(o.load(), &[1, 2, 1]);
        // One worker: everything is its.
        let mut one = Owners::new(1, 4);
        assert_eq!(one.take(1), (0, true));
        assert_eq!(one.take(2), (0, true));
    }

    fn apply(tables: &mut [Sad], w: &mut SadWriter) {
        w.flush();
        for t in tables.iter_mut() {
            t.apply_ops(OPS_PER_VECTOR);
        }
        w.flush();
    }

    #[test]
    fn each_tunnel_has_its_sas_on_its_owner_and_the_others_know_where() {
        let (mut t, mut w) = channels(8, 4, 2);
        // Tunnel 2 on worker 0, tunnel 3 on worker 1.
        let in2 = w.insert(sa(0x1002, Direction::Inbound), 2).unwrap();
        let out2 = w.insert(sa(0x2002, Direction::Outbound), 2).unwrap();
        w.set_tx(2, out2);
        let in3 = w.insert(sa(0x1003, Direction::Inbound), 3).unwrap();
        let out3 = w.insert(sa(0x2003, Direction::Outbound), 3).unwrap();
        w.set_tx(3, out3);
        apply(&mut t, &mut w);
        assert_eq!((w.owner(in2), w.owner(out2)), (Some(0), Some(0)));
        assert_eq!((w.owner(in3), w.owner(out3)), (Some(1), Some(1)));
        // The owner finds the SA by SPI; the other worker finds its owner.
        assert_eq!(t[0].inbound(0x1002), in2);
        assert_eq!(remote(t[1].inbound(0x1002)), Some(0));
        let there = t[1].inbound(0x1002);
        assert!(t[1].get_mut(there).is_none());
        assert_eq!(t[1].inbound(0x1003), in3);
        assert_eq!(remote(t[0].inbound(0x1003)), Some(1));
        assert_eq!(remote(in3), None, "a slot is no worker");
        assert_eq!(remote(NONE), None);
        assert_eq!(t[0].inbound(0x9999), NONE);
        // Transmit: on the owner only; the other hands the tunnel's packets over.
        assert_eq!((t[0].tx(2), t[0].elsewhere(2)), (out2, None));
        assert_eq!((t[1].tx(2), t[1].elsewhere(2)), (NONE, Some(0)));
        assert_eq!((t[1].tx(3), t[1].elsewhere(3)), (out3, None));
        assert_eq!((t[0].tx(3), t[0].elsewhere(3)), (NONE, Some(1)));
        assert_eq!(t[0].elsewhere(1), None, "no SA: stays where it is");
        // A rekey of tunnel 3: the new SAs go to its owner, the switch is one op there.
        let in3b = w.insert(sa(0x1013, Direction::Inbound), 3).unwrap();
        let out3b = w.insert(sa(0x2013, Direction::Outbound), 3).unwrap();
        w.set_tx(3, out3b);
        w.remove(out3);
        w.remove(in3);
        apply(&mut t, &mut w);
        assert_eq!((w.owner(in3b), w.owner(out3b)), (Some(1), Some(1)));
        assert_eq!(t[1].tx(3), out3b);
        assert_eq!(t[1].inbound(0x1003), NONE);
        assert_eq!(t[0].inbound(0x1003), NONE, "unmapped everywhere");
        assert_eq!(remote(t[0].inbound(0x1013)), Some(1));
        assert!(t[1].get_mut(out3).is_none() && t[1].get_mut(out3b).is_some());
        // Tunnel 2's SAs all go: it has no owner, and a new tunnel takes worker 0.
        w.set_tx(2, NONE);
        w.remove(out2);
        w.remove(in2);
        assert_eq!(w.owners().of(2), None);
        let in1 = w.insert(sa(0x1001, Direction::Inbound), 1).unwrap();
        apply(&mut t, &mut w);
        assert_eq!(w.owner(in1), Some(0));
        assert_eq!(t[0].tx(2), NONE);
        assert_eq!(w.len(), 3);
    }

    #[test]
    fn one_worker_holds_everything_and_hands_nothing_over() {
        let (mut t, mut w) = channels(4, 4, 1);
        let a = w.insert(sa(0x1002, Direction::Inbound), 2).unwrap();
        let b = w.insert(sa(0x1003, Direction::Inbound), 3).unwrap();
        apply(&mut t, &mut w);
        assert_eq!((t[0].inbound(0x1002), t[0].inbound(0x1003)), (a, b));
        assert_eq!((t[0].elsewhere(2), t[0].elsewhere(3)), (None, None));
    }
}
