//! The flow table: fixed capacity, allocated once, buckets of [`WAYS`] slots with a 16-bit
//! tag per slot, two candidate buckets per key.
//!
//! A key's hash picks two buckets (multiply-shift range reduction, so any bucket count
//! works, not only powers of two) and a nonzero tag. A lookup compares the tags of both
//! buckets (16 bytes each) and the full key only where a tag matches (one false match in
//! 65,535 slots). An insert goes to the bucket with more free slots ("power of two
//! choices"), which keeps buckets even enough that a table sized at [`LOAD`] of its slots
//! rarely meets two full buckets. Entries never move: a slot's index is the flow's handle
//! ([`FlowId`]) for as long as the flow lives, which NAT and the fast path can hold on to.
//!
//! No allocation after `Table::new`, no locks (one worker owns the table), no panics: every
//! access is checked (`get`) or masked.

use super::key::FlowKey;
use super::FlowState;

/// Slots per bucket.
pub const WAYS: usize = 8;

/// The share of slots the table is sized to fill at its configured maximum.
pub const LOAD: f64 = 0.9;

/// A flow's handle: its slot. Valid until the flow is removed or expires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowId(pub(crate) u32);

impl FlowId {
    /// The slot index (for NAT bindings and per-flow side tables).
    pub fn index(self) -> u32 {
        self.0
    }
}

/// What a sender has shown in one direction of a TCP flow (netfilter's `ip_ct_tcp_state`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct Peer {
    /// Highest sequence number sent, plus the segment's length.
    pub end: u32,
    /// Highest sequence number the other side allows.
    pub maxend: u32,
    /// Largest window seen (scaled).
    pub maxwin: u32,
    /// Highest acknowledgment sent.
    pub maxack: u32,
}

/// One flow: 88 bytes, IPv6 keys included.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct Entry {
    /// The normalized key.
    pub key: FlowKey,
    /// TCP windows, original direction first.
    pub peer: [Peer; 2],
    /// The tick at which the flow expires.
    pub expires: u32,
    /// The NAT binding, or [`NO_NAT`].
    pub nat: u32,
    /// TCP window shifts per direction.
    pub scale: [u8; 2],
    /// TCP per-direction flags (`tcp::PF_*`).
    pub pflags: [u8; 2],
    /// [`FlowState`] as a byte.
    pub state: u8,
    /// `F_*` flags.
    pub flags: u8,
}

/// The NAT binding of a flow without translation ([`Conntrack::set_nat`](super::Conntrack::set_nat)).
pub const NO_NAT: u32 = u32::MAX;

/// The original direction went from the key's larger endpoint to its smaller.
pub(crate) const F_ORIG_SWAPPED: u8 = 0x01;
/// A packet was seen in the reply direction.
pub(crate) const F_SEEN_REPLY: u8 = 0x02;
/// The flow is assured: never dropped early to make room.
pub(crate) const F_ASSURED: u8 = 0x04;

const _: () = assert!(std::mem::size_of::<Entry>() == 88);

impl Entry {
    /// The flow's state.
    pub fn flow_state(&self) -> FlowState {
        FlowState::from_u8(self.state)
    }

    /// Whether the flow may be dropped early.
    pub fn assured(&self) -> bool {
        self.flags & F_ASSURED != 0
    }
}

/// How an insert went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Placed {
    /// The key was already there.
    Existing(u32),
    /// Into a free slot.
    Free(u32),
    /// Over an expired entry.
    OverExpired(u32),
    /// Over an unassured entry, dropped early.
    OverUnassured(u32),
    /// Nowhere: both buckets hold only assured, live entries, or the table holds its
    /// maximum and neither bucket has anything to give up.
    Full,
}

/// The table.
pub(crate) struct Table {
    tags: Box<[[u16; WAYS]]>,
    slots: Box<[Entry]>,
    seed: u64,
    len: usize,
    max_len: usize,
    cursor: usize,
}

/// Hint the CPU to bring the cache line at `p` into L1.
#[inline(always)]
fn prefetch<T>(p: *const T) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: a prefetch never faults, whatever the address; SSE is baseline on x86_64.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p as *const i8);
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = p;
}

/// Bitmask of the ways whose tag is `tag` (8 compares the compiler turns into one SIMD
/// compare).
#[inline(always)]
fn matches(tags: &[u16; WAYS], tag: u16) -> u32 {
    let mut m = 0u32;
    for (i, t) in tags.iter().enumerate() {
        m |= ((*t == tag) as u32) << i;
    }
    m
}

impl Table {
    /// A table that holds at most `max_len` flows, in enough buckets for them to fill
    /// [`LOAD`] of the slots.
    pub fn new(max_len: usize, seed: u64) -> Table {
        let buckets = Self::buckets_for(max_len);
        Table {
            tags: vec![[0u16; WAYS]; buckets].into_boxed_slice(),
            slots: vec![Entry::default(); buckets * WAYS].into_boxed_slice(),
            seed,
            len: 0,
            max_len,
            cursor: 0,
        }
    }

    /// Buckets for `max_len` flows.
    pub fn buckets_for(max_len: usize) -> usize {
        ((max_len as f64 / LOAD / WAYS as f64).ceil() as usize).max(1)
    }

    /// Bytes allocated: tags and slots.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.tags) + std::mem::size_of_val(&*self.slots)
    }

    /// Slots.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Flows held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The most flows the table holds.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// The key's hash under the table's seed.
    #[inline(always)]
    pub fn hash(&self, key: &FlowKey) -> u64 {
        key.hash(self.seed)
    }

    /// The two candidate buckets and the tag of a hash.
    #[inline(always)]
    fn place(&self, h: u64) -> (usize, usize, u16) {
        let n = self.tags.len() as u64;
        let b1 = ((h as u32 as u64 * n) >> 32) as usize;
        let b2 = (((h >> 32) * n) >> 32) as usize;
        // The tag from bits the bucket choice hardly depends on, remixed.
        let tag = (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 48) as u16;
        (b1, b2, tag.max(1))
    }

    /// Prefetches the tags of both buckets of `h`.
    #[inline(always)]
    pub fn prefetch_buckets(&self, h: u64) {
        let (b1, b2, _) = self.place(h);
        prefetch(self.tags.as_ptr().wrapping_add(b1));
        prefetch(self.tags.as_ptr().wrapping_add(b2));
    }

    /// Prefetches a slot's entry.
    #[inline(always)]
    pub fn prefetch_slot(&self, id: u32) {
        let p = self.slots.as_ptr().wrapping_add(id as usize);
        prefetch(p);
        prefetch((p as *const u8).wrapping_add(64));
    }

    /// The slot holding `key`, if any (expired or not).
    #[inline]
    pub fn find(&self, key: &FlowKey, h: u64) -> Option<u32> {
        let (b1, b2, tag) = self.place(h);
        self.find_in(b1, key, tag)
            .or_else(|| self.find_in(b2, key, tag))
    }

    #[inline(always)]
    fn find_in(&self, b: usize, key: &FlowKey, tag: u16) -> Option<u32> {
        let mut m = matches(self.tags.get(b)?, tag);
        while m != 0 {
            let slot = b * WAYS + m.trailing_zeros() as usize;
            if self.slots.get(slot).is_some_and(|e| e.key == *key) {
                return Some(slot as u32);
            }
            m &= m - 1;
        }
        None
    }

    /// The entry in slot `id`, if the slot is in use.
    #[inline(always)]
    pub fn get(&self, id: u32) -> Option<&Entry> {
        let i = id as usize;
        let used = *self.tags.get(i / WAYS)?.get(i % WAYS)? != 0;
        if used {
            self.slots.get(i)
        } else {
            None
        }
    }

    /// The entry in slot `id`, if the slot is in use.
    #[inline(always)]
    pub fn get_mut(&mut self, id: u32) -> Option<&mut Entry> {
        let i = id as usize;
        let used = *self.tags.get(i / WAYS)?.get(i % WAYS)? != 0;
        if used {
            self.slots.get_mut(i)
        } else {
            None
        }
    }

    /// Frees slot `id`. Whether it was in use.
    pub fn remove(&mut self, id: u32) -> bool {
        let i = id as usize;
        match self
            .tags
            .get_mut(i / WAYS)
            .and_then(|b| b.get_mut(i % WAYS))
        {
            Some(t) if *t != 0 => {
                *t = 0;
                self.len -= 1;
                true
            }
            _ => false,
        }
    }

    /// Inserts `entry` under hash `h`, or finds the key already there. When the table holds
    /// its maximum or both buckets are full, an expired entry of the two buckets gives way,
    /// else the unassured one closest to expiring (dropped early), else nothing
    /// ([`Placed::Full`]).
    pub fn insert(&mut self, h: u64, entry: &Entry, now: u32) -> Placed {
        let (b1, b2, tag) = self.place(h);
        if let Some(id) = self
            .find_in(b1, &entry.key, tag)
            .or_else(|| self.find_in(b2, &entry.key, tag))
        {
            return Placed::Existing(id);
        }
        let free = |t: Option<&[u16; WAYS]>| t.map_or(0, |t| matches(t, 0));
        let (f1, f2) = (free(self.tags.get(b1)), free(self.tags.get(b2)));
        if self.len < self.max_len && (f1 | f2) != 0 {
            let (b, f) = if f1.count_ones() >= f2.count_ones() {
                (b1, f1)
            } else {
                (b2, f2)
            };
            let slot = b * WAYS + f.trailing_zeros() as usize;
            if self.put(slot, tag, entry) {
                self.len += 1;
                return Placed::Free(slot as u32);
            }
            return Placed::Full;
        }
        // Something has to give way: an expired entry, else the unassured one closest to
        // expiring.
        let mut victim: Option<(usize, u32)> = None;
        for b in [b1, b2] {
            let Some(tags) = self.tags.get(b) else {
                continue;
            };
            for (w, t) in tags.iter().enumerate() {
                let slot = b * WAYS + w;
                let Some(e) = self.slots.get(slot) else {
                    continue;
                };
                if *t == 0 {
                    continue;
                }
                if e.expires <= now {
                    if self.put(slot, tag, entry) {
                        return Placed::OverExpired(slot as u32);
                    }
                    return Placed::Full;
                }
                if !e.assured() && victim.is_none_or(|(_, x)| e.expires < x) {
                    victim = Some((slot, e.expires));
                }
            }
        }
        match victim {
            Some((slot, _)) if self.put(slot, tag, entry) => Placed::OverUnassured(slot as u32),
            _ => Placed::Full,
        }
    }

    fn put(&mut self, slot: usize, tag: u16, entry: &Entry) -> bool {
        match (
            self.slots.get_mut(slot),
            self.tags
                .get_mut(slot / WAYS)
                .and_then(|b| b.get_mut(slot % WAYS)),
        ) {
            (Some(e), Some(t)) => {
                *e = *entry;
                *t = tag;
                true
            }
            _ => false,
        }
    }

    /// Removes the expired entries of the next `buckets` buckets (round robin over the
    /// table). The number removed.
    pub fn sweep(&mut self, now: u32, buckets: usize) -> usize {
        let n = self.tags.len();
        let mut removed = 0;
        for _ in 0..buckets.min(n) {
            let b = self.cursor;
            self.cursor = if b + 1 >= n { 0 } else { b + 1 };
            let Some(tags) = self.tags.get_mut(b) else {
                continue;
            };
            for (w, t) in tags.iter_mut().enumerate() {
                if *t != 0
                    && self
                        .slots
                        .get(b * WAYS + w)
                        .is_some_and(|e| e.expires <= now)
                {
                    *t = 0;
                    removed += 1;
                }
            }
        }
        self.len -= removed;
        removed
    }

    /// Empties the table.
    pub fn clear(&mut self) {
        self.tags.fill([0; WAYS]);
        self.len = 0;
        self.cursor = 0;
    }

    /// Every entry in use, with its slot (a control-side scan, O(slots)).
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Entry)> + '_ {
        self.tags
            .iter()
            .flat_map(|b| b.iter())
            .zip(self.slots.iter())
            .enumerate()
            .filter(|(_, (t, _))| **t != 0)
            .map(|(i, (_, e))| (i as u32, e))
    }
}
