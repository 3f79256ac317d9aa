//! The flow table: a pool of exactly `max_entries` entries, allocated once, and an index of
//! buckets (one cache line each: [`WAYS`] 16-bit tags and [`WAYS`] 32-bit entry numbers),
//! two candidate buckets per key: a bucketized cuckoo hash table over an entry pool.
//!
//! A key's hash picks two buckets (multiply-shift range reduction, so any bucket count
//! works, not only powers of two) and a nonzero tag. A lookup compares the tags of both
//! buckets and the full key only where a tag matches (one false match in 65,535 slots). An
//! insert goes to the bucket with more free slots ("power of two choices"); when both are
//! full, one of their flows moves to its other bucket (one cuckoo step). Only the index
//! moves, never the entry: an entry's number is the flow's handle ([`FlowId`]) for as long
//! as the flow lives, which NAT and the fast path can hold on to.
//!
//! The index has a slot for every [`LOAD`]-th of a flow (1.11 slots per flow) and costs 64
//! bytes per bucket, 8.9 bytes per flow; the pool costs the entry, 88 bytes per flow.
//!
//! No allocation after `Table::new`, no locks (one worker owns the table), no panics: every
//! access is checked (`get`) or masked.

use super::key::FlowKey;
use super::FlowState;

/// Slots per bucket.
pub const WAYS: usize = 8;

/// The share of the index's slots the table fills at its maximum.
pub const LOAD: f64 = 0.9;

/// A flow's handle: its entry's number. Valid until the flow is removed or expires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowId(pub(crate) u32);

impl FlowId {
    /// The entry's number, below the table's maximum (for NAT bindings and per-flow side
    /// tables).
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

/// [`Entry::state`] of an entry in the free pool (its `nat` links the next free one).
pub(crate) const FREE: u8 = 0xff;

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
    /// Into a free entry.
    Free(u32),
    /// Over an expired entry.
    OverExpired(u32),
    /// Over an unassured entry, dropped early.
    OverUnassured(u32),
    /// Nowhere: the pool is empty (or both buckets are full) and neither bucket holds an
    /// expired or unassured flow to give way.
    Full,
}

/// One bucket: a cache line.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(64))]
struct Bucket {
    /// Tag per way, 0 when the way is free.
    tags: [u16; WAYS],
    /// Entry number per way.
    idx: [u32; WAYS],
}

const _: () = assert!(std::mem::size_of::<Bucket>() == 64);
const _: () = assert!(WAYS == 8, "matches() compares 8 tags in two words");

/// The ways of a hash's two buckets whose tags match ([`Table::candidates`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Candidates {
    b: [usize; 2],
    m: [u32; 2],
}

/// No entry.
const NIL: u32 = u32::MAX;

/// The table.
pub(crate) struct Table {
    buckets: Box<[Bucket]>,
    entries: Box<[Entry]>,
    seed: u64,
    len: usize,
    free: u32,
    cursor: usize,
}

/// Hint the CPU to bring the cache line at `p` into L1.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: a prefetch never faults, whatever the address; SSE is baseline on x86_64.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p as *const i8);
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = p;
}

/// Bitmask of the ways whose tag is `tag`, 4 lanes of 16 bits per `u64` at once (SWAR):
/// a dozen instructions against some forty for the loop over 8 tags, which the compiler
/// does not vectorize (it cost a fifth of all instructions in the bench).
#[inline(always)]
fn matches(tags: &[u16; WAYS], tag: u16) -> u32 {
    let [a, b, c, d, e, f, g, h] = tags.map(u64::from);
    let lo = a | b << 16 | c << 32 | d << 48;
    let hi = e | f << 16 | g << 32 | h << 48;
    let t = tag as u64 * 0x0001_0001_0001_0001;
    zero_lanes(lo ^ t) | zero_lanes(hi ^ t) << 4
}

/// Bit k set iff 16-bit lane k of `x` is zero.
#[inline(always)]
fn zero_lanes(x: u64) -> u32 {
    const L: u64 = 0x7fff_7fff_7fff_7fff;
    // A lane's top bit ends up set iff the lane is zero: no carry leaves a lane, since
    // (x & 0x7fff) + 0x7fff < 0x10000.
    let y = !(((x & L) + L) | x | L);
    // Gather bits 15, 31, 47, 63 into bits 48..51: lane k's bit lands at 16k + 48 - 15k;
    // every other product bit lands elsewhere and no two collide, so nothing carries.
    const GATHER: u64 = (1 << 48) | (1 << 33) | (1 << 18) | (1 << 3);
    (((y >> 15).wrapping_mul(GATHER) >> 48) & 0xf) as u32
}

impl Table {
    /// A table of `max_len` entries (at least 1, below 2^32 - 1).
    /// `None` when the memory cannot be had (`Table::bytes_for(max_len)`).
    pub fn new(max_len: usize, seed: u64) -> Option<Table> {
        fn filled<T: Clone>(n: usize, x: T) -> Option<Box<[T]>> {
            let mut v = Vec::new();
            v.try_reserve_exact(n).ok()?;
            v.resize(n, x);
            Some(v.into_boxed_slice())
        }
        let max_len = max_len.clamp(1, NIL as usize - 1);
        let buckets = Self::buckets_for(max_len);
        let mut t = Table {
            buckets: filled(buckets, Bucket::default())?,
            entries: filled(max_len, Entry::default())?,
            seed,
            len: 0,
            free: NIL,
            cursor: 0,
        };
        t.clear();
        Some(t)
    }

    /// Bytes a table of `max_len` flows allocates.
    pub fn bytes_for(max_len: usize) -> usize {
        Self::buckets_for(max_len) * std::mem::size_of::<Bucket>()
            + max_len * std::mem::size_of::<Entry>()
    }

    /// Buckets for `max_len` flows.
    pub fn buckets_for(max_len: usize) -> usize {
        ((max_len as f64 / LOAD / WAYS as f64).ceil() as usize).max(1)
    }

    /// Bytes allocated: index and entries.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.buckets) + std::mem::size_of_val(&*self.entries)
    }

    /// Slots of the index.
    pub fn slots(&self) -> usize {
        self.buckets.len() * WAYS
    }

    /// Flows held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The most flows the table holds.
    pub fn max_len(&self) -> usize {
        self.entries.len()
    }

    /// The key's hash under the table's seed.
    #[inline(always)]
    pub fn hash(&self, key: &FlowKey) -> u64 {
        key.hash(self.seed)
    }

    /// The two candidate buckets and the tag of a hash.
    #[inline(always)]
    fn place(&self, h: u64) -> (usize, usize, u16) {
        let n = self.buckets.len() as u64;
        let b1 = ((h as u32 as u64 * n) >> 32) as usize;
        let b2 = (((h >> 32) * n) >> 32) as usize;
        // The tag from bits the bucket choice hardly depends on, remixed.
        let tag = (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 48) as u16;
        (b1, b2, tag.max(1))
    }

    /// Prefetches both buckets of `h`.
    #[inline(always)]
    pub fn prefetch_buckets(&self, h: u64) {
        let (b1, b2, _) = self.place(h);
        prefetch(self.buckets.as_ptr().wrapping_add(b1));
        prefetch(self.buckets.as_ptr().wrapping_add(b2));
    }

    /// Prefetches an entry (both cache lines it may span).
    #[inline(always)]
    pub fn prefetch_entry(&self, id: u32) {
        let p = self.entries.as_ptr().wrapping_add(id as usize);
        prefetch(p);
        prefetch((p as *const u8).wrapping_add(std::mem::size_of::<Entry>() - 1));
    }

    /// The ways of `h`'s two buckets whose tags match, with the entries they point at
    /// prefetched (the buckets should be in cache already: [`Table::prefetch_buckets`] a
    /// while before). For [`Table::find_among`].
    #[inline(always)]
    pub fn candidates(&self, h: u64) -> Candidates {
        let (b1, b2, tag) = self.place(h);
        let mut c = Candidates {
            b: [b1, b2],
            m: [0, 0],
        };
        for (b, m) in c.b.iter().zip(c.m.iter_mut()) {
            if let Some(bucket) = self.buckets.get(*b) {
                *m = matches(&bucket.tags, tag);
                let mut x = *m;
                while x != 0 {
                    let w = x.trailing_zeros() as usize;
                    self.prefetch_entry(bucket.idx.get(w).copied().unwrap_or(0));
                    x &= x - 1;
                }
            }
        }
        c
    }

    /// The entry holding `key` among the candidates of its hash.
    #[inline(always)]
    pub fn find_among(&self, key: &FlowKey, c: &Candidates) -> Option<u32> {
        for (b, m) in c.b.iter().zip(c.m) {
            let Some(bucket) = self.buckets.get(*b) else {
                continue;
            };
            let mut m = m;
            while m != 0 {
                let w = m.trailing_zeros() as usize;
                let id = bucket.idx.get(w).copied().unwrap_or(NIL);
                if self.entries.get(id as usize).is_some_and(|e| e.key == *key) {
                    return Some(id);
                }
                m &= m - 1;
            }
        }
        None
    }

    /// The entry holding `key`, if any (expired or not).
    #[inline]
    pub fn find(&self, key: &FlowKey, h: u64) -> Option<u32> {
        let (b1, b2, tag) = self.place(h);
        self.find_in(b1, key, tag)
            .or_else(|| self.find_in(b2, key, tag))
            .map(|(_, _, id)| id)
    }

    /// (bucket, way, entry) of `key` in bucket `b`.
    #[inline(always)]
    fn find_in(&self, b: usize, key: &FlowKey, tag: u16) -> Option<(usize, usize, u32)> {
        let bucket = self.buckets.get(b)?;
        let mut m = matches(&bucket.tags, tag);
        while m != 0 {
            let w = m.trailing_zeros() as usize;
            let id = bucket.idx.get(w).copied().unwrap_or(NIL);
            if self.entries.get(id as usize).is_some_and(|e| e.key == *key) {
                return Some((b, w, id));
            }
            m &= m - 1;
        }
        None
    }

    /// Entry `id`, if in use.
    #[inline(always)]
    pub fn get(&self, id: u32) -> Option<&Entry> {
        self.entries.get(id as usize).filter(|e| e.state != FREE)
    }

    /// Entry `id`, if in use.
    #[inline(always)]
    pub fn get_mut(&mut self, id: u32) -> Option<&mut Entry> {
        self.entries
            .get_mut(id as usize)
            .filter(|e| e.state != FREE)
    }

    /// Frees entry `id` and its index slot. Whether it was in use.
    pub fn remove(&mut self, id: u32) -> bool {
        let Some(e) = self.get(id) else {
            return false;
        };
        let (b1, b2, tag) = self.place(self.hash(&e.key));
        for b in [b1, b2] {
            if let Some(bucket) = self.buckets.get_mut(b) {
                for (t, i) in bucket.tags.iter_mut().zip(&bucket.idx) {
                    if *t == tag && *i == id {
                        *t = 0;
                    }
                }
            }
        }
        self.release(id);
        true
    }

    /// Returns entry `id` to the pool.
    fn release(&mut self, id: u32) {
        if let Some(e) = self.entries.get_mut(id as usize) {
            e.state = FREE;
            e.nat = self.free;
            self.free = id;
            self.len -= 1;
        }
    }

    /// Takes an entry from the pool.
    fn take(&mut self) -> Option<u32> {
        let id = self.free;
        let e = self.entries.get_mut(id as usize)?;
        self.free = e.nat;
        self.len += 1;
        Some(id)
    }

    /// Inserts `entry` under hash `h`, or finds the key already there. When both buckets are
    /// full, one of their flows moves to its other bucket if it can. When the pool is empty
    /// or nothing could move, an expired flow of the two buckets gives way, else the
    /// unassured one closest to expiring (dropped early), else nothing ([`Placed::Full`]).
    pub fn insert(&mut self, h: u64, entry: &Entry, now: u32) -> Placed {
        let (b1, b2, tag) = self.place(h);
        if let Some((_, _, id)) = self
            .find_in(b1, &entry.key, tag)
            .or_else(|| self.find_in(b2, &entry.key, tag))
        {
            return Placed::Existing(id);
        }
        if self.free != NIL {
            let free = |t: Option<&Bucket>| t.map_or(0, |t| matches(&t.tags, 0));
            let (f1, f2) = (free(self.buckets.get(b1)), free(self.buckets.get(b2)));
            let way = if (f1 | f2) == 0 {
                self.cuckoo(b1).or_else(|| self.cuckoo(b2))
            } else if f1.count_ones() >= f2.count_ones() {
                Some((b1, f1.trailing_zeros() as usize))
            } else {
                Some((b2, f2.trailing_zeros() as usize))
            };
            if let Some((b, w)) = way {
                if let Some(id) = self.take() {
                    self.put(b, w, tag, id, entry);
                    return Placed::Free(id);
                }
            }
        }
        // Something has to give way: an expired flow, else the unassured one closest to
        // expiring.
        let mut victim: Option<(usize, usize, u32, u32)> = None;
        for b in [b1, b2] {
            let Some(bucket) = self.buckets.get(b) else {
                continue;
            };
            for (w, (t, id)) in bucket.tags.iter().zip(bucket.idx).enumerate() {
                let Some(e) = self.entries.get(id as usize).filter(|_| *t != 0) else {
                    continue;
                };
                if e.expires <= now {
                    self.put(b, w, tag, id, entry);
                    return Placed::OverExpired(id);
                }
                if !e.assured() && victim.is_none_or(|v| e.expires < v.3) {
                    victim = Some((b, w, id, e.expires));
                }
            }
        }
        match victim {
            Some((b, w, id, _)) => {
                self.put(b, w, tag, id, entry);
                Placed::OverUnassured(id)
            }
            None => Placed::Full,
        }
    }

    /// Frees a way of full bucket `b` by moving one of its flows to that flow's other
    /// bucket, if one has room. The freed (bucket, way).
    fn cuckoo(&mut self, b: usize) -> Option<(usize, usize)> {
        let bucket = *self.buckets.get(b)?;
        for (w, (t, id)) in bucket.tags.iter().zip(bucket.idx).enumerate() {
            let e = self.entries.get(id as usize)?;
            let (x1, x2, xt) = self.place(self.hash(&e.key));
            let alt = if x1 == b { x2 } else { x1 };
            if alt == b || xt != *t {
                continue;
            }
            let dst = self.buckets.get_mut(alt)?;
            let f = matches(&dst.tags, 0);
            if f != 0 {
                let aw = f.trailing_zeros() as usize;
                *dst.tags.get_mut(aw)? = xt;
                *dst.idx.get_mut(aw)? = id;
                *self.buckets.get_mut(b)?.tags.get_mut(w)? = 0;
                return Some((b, w));
            }
        }
        None
    }

    fn put(&mut self, b: usize, w: usize, tag: u16, id: u32, entry: &Entry) {
        if let (Some(e), Some(bucket)) =
            (self.entries.get_mut(id as usize), self.buckets.get_mut(b))
        {
            *e = *entry;
            if let (Some(t), Some(i)) = (bucket.tags.get_mut(w), bucket.idx.get_mut(w)) {
                *t = tag;
                *i = id;
            }
        }
    }

    /// Removes the expired flows among the next `n` entries of the pool (round robin). The
    /// number removed.
    pub fn sweep(&mut self, now: u32, n: usize) -> usize {
        let len = self.entries.len();
        let mut removed = 0;
        for _ in 0..n.min(len) {
            let id = self.cursor as u32;
            self.cursor = if self.cursor + 1 >= len {
                0
            } else {
                self.cursor + 1
            };
            if self.get(id).is_some_and(|e| e.expires <= now) && self.remove(id) {
                removed += 1;
            }
        }
        removed
    }

    /// Empties the table.
    pub fn clear(&mut self) {
        self.buckets.fill(Bucket::default());
        let n = self.entries.len();
        for (i, e) in self.entries.iter_mut().enumerate() {
            e.state = FREE;
            e.nat = if i + 1 < n { i as u32 + 1 } else { NIL };
        }
        self.free = 0;
        self.len = 0;
        self.cursor = 0;
    }

    /// Every entry in use, with its number (a control-side scan of the pool).
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Entry)> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.state != FREE)
            .map(|(i, e)| (i as u32, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn tag_matching_agrees_with_a_loop(
            tags in proptest::array::uniform8(proptest::prop_oneof![0u16..4, proptest::num::u16::ANY]),
            tag in proptest::prop_oneof![0u16..4, proptest::num::u16::ANY],
        ) {
            let mut want = 0u32;
            for (i, t) in tags.iter().enumerate() {
                want |= ((*t == tag) as u32) << i;
            }
            proptest::prop_assert_eq!(matches(&tags, tag), want);
        }
    }

    #[test]
    fn tag_matching_edges() {
        assert_eq!(matches(&[0; WAYS], 0), 0xff);
        assert_eq!(matches(&[0xffff; WAYS], 0xffff), 0xff);
        assert_eq!(
            matches(&[0x8000, 0, 0x7fff, 1, 0xffff, 0x8000, 2, 0], 0x8000),
            0b10_0001
        );
        assert_eq!(
            matches(&[0x8000, 0, 0x7fff, 1, 0xffff, 0x8000, 2, 0], 0),
            0b1000_0010
        );
    }
}
