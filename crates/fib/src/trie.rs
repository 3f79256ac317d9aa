//! DIR-24-8 multibit trie shared by IPv4 and IPv6.
//!
//! Keys are left-aligned in a `u128` (an IPv4 address occupies the top 32 bits), so one
//! implementation serves both families. Level 0 (`tbl24`) is indexed by the top 24 bits;
//! every further level is a 256-entry group (`tbl8`) indexed by the next 8 bits. IPv4 uses
//! at most one group level, IPv6 up to 13.
//!
//! An entry is one `u32`: bit 31 valid, bit 30 ext (payload is a group index), bits 22..29
//! the length of the prefix that wrote it, bits 0..21 the next-hop id or group index.
//! Leaf entries carry their prefix length so that updates need no RIB walk: an add
//! overwrites entries written by prefixes no longer than itself, a delete rewrites exactly
//! the entries that carry its own length.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::mem::{prefetch, Region};
use crate::{NextHopId, MISS};

pub(crate) const VALID: u32 = 1 << 31;
pub(crate) const EXT: u32 = 1 << 30;
const DEPTH_SHIFT: u32 = 22;
pub(crate) const PAYLOAD: u32 = (1 << DEPTH_SHIFT) - 1;
/// Entries of the level-0 table.
const TBL24_LEN: usize = 1 << 24;
/// Entries of a group.
const GROUP: usize = 256;
/// Bytes of one group.
pub(crate) const GROUP_BYTES: usize = GROUP * 4;
/// Bytes of the level-0 table.
pub(crate) const TBL24_BYTES: usize = TBL24_LEN * 4;
/// Group indices must fit the payload field.
pub(crate) const MAX_GROUPS: usize = 1 << DEPTH_SHIFT;
/// Keys per prefetch batch in bulk lookups.
const BATCH: usize = 64;

#[inline(always)]
fn leaf(depth: u8, nh: NextHopId) -> u32 {
    VALID | (u32::from(depth) << DEPTH_SHIFT) | (nh & PAYLOAD)
}

#[inline(always)]
fn depth(e: u32) -> u8 {
    ((e >> DEPTH_SHIFT) & 0xff) as u8
}

/// Last bit (exclusive) covered by `level`: 24, 32, 40, ...
#[inline(always)]
fn level_end(level: usize) -> u8 {
    (24 + 8 * level) as u8
}

/// Index of `key` inside the table of `level`.
#[inline(always)]
fn index(key: u128, level: usize) -> usize {
    let end = u32::from(level_end(level));
    let mask: u128 = if level == 0 { (1 << 24) - 1 } else { 0xff };
    ((key >> (128 - end)) & mask) as usize
}

/// The lookup tables of one address family (shared by the writer and all readers).
pub(crate) struct Table {
    tbl24: Region<AtomicU32>,
    tbl8: Region<AtomicU32>,
}

impl Table {
    /// Reserve a level-0 table and room for `max_groups` groups.
    pub(crate) fn new(max_groups: usize) -> std::io::Result<Self> {
        Ok(Table {
            tbl24: Region::new(TBL24_LEN, true)?,
            tbl8: Region::new(max_groups * GROUP, true)?,
        })
    }

    #[inline(always)]
    fn group_entry(&self, e: u32, byte: u8) -> u32 {
        let i = ((e & PAYLOAD) as usize) << 8 | usize::from(byte);
        match self.tbl8.as_slice().get(i) {
            Some(x) => x.load(Ordering::Acquire),
            None => 0,
        }
    }

    #[inline(always)]
    fn top(&self, i: usize) -> u32 {
        match self.tbl24.as_slice().get(i) {
            Some(x) => x.load(Ordering::Acquire),
            None => 0,
        }
    }

    #[inline(always)]
    fn result(e: u32) -> NextHopId {
        if e & (VALID | EXT) == VALID {
            e & PAYLOAD
        } else {
            MISS
        }
    }

    /// IPv4 longest-prefix match (host byte order).
    #[inline(always)]
    pub(crate) fn lookup4(&self, dst: u32) -> NextHopId {
        let mut e = self.top((dst >> 8) as usize);
        if e & EXT != 0 {
            e = self.group_entry(e, dst as u8);
        }
        Self::result(e)
    }

    /// Batched IPv4 lookup: prefetch a batch of tbl24 entries, then resolve them.
    pub(crate) fn lookup4_bulk(&self, dst: &[u32], out: &mut [NextHopId]) {
        for (d, o) in dst.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            for &a in d {
                prefetch(self.tbl24.addr((a >> 8) as usize));
            }
            for (&a, r) in d.iter().zip(o.iter_mut()) {
                *r = self.lookup4(a);
            }
        }
    }

    /// IPv6 longest-prefix match (network byte order).
    #[inline]
    pub(crate) fn lookup6(&self, dst: &[u8; 16]) -> NextHopId {
        let top = usize::from(dst[0]) << 16 | usize::from(dst[1]) << 8 | usize::from(dst[2]);
        let mut e = self.top(top);
        for &b in &dst[3..] {
            if e & EXT == 0 {
                break;
            }
            e = self.group_entry(e, b);
        }
        Self::result(e)
    }

    /// Batched IPv6 lookup: one level at a time across the batch, prefetching the next
    /// level's entries of every key still descending.
    pub(crate) fn lookup6_bulk(&self, dst: &[[u8; 16]], out: &mut [NextHopId]) {
        let mut ent = [0u32; BATCH];
        let mut active = [0u8; BATCH];
        for (d, o) in dst.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            for a in d {
                let top = usize::from(a[0]) << 16 | usize::from(a[1]) << 8 | usize::from(a[2]);
                prefetch(self.tbl24.addr(top));
            }
            let mut n = 0;
            for (i, a) in d.iter().enumerate() {
                let top = usize::from(a[0]) << 16 | usize::from(a[1]) << 8 | usize::from(a[2]);
                let e = self.top(top);
                ent[i] = e;
                if e & EXT != 0 {
                    prefetch(
                        self.tbl8
                            .addr(((e & PAYLOAD) as usize) << 8 | usize::from(a[3])),
                    );
                    active[n] = i as u8;
                    n += 1;
                }
            }
            let mut byte = 3;
            while n > 0 && byte < 16 {
                let mut m = 0;
                for k in 0..n {
                    let i = usize::from(active[k]);
                    let e = self.group_entry(ent[i], d[i][byte]);
                    ent[i] = e;
                    if e & EXT != 0 && byte + 1 < 16 {
                        let next = ((e & PAYLOAD) as usize) << 8 | usize::from(d[i][byte + 1]);
                        prefetch(self.tbl8.addr(next));
                        active[m] = i as u8;
                        m += 1;
                    }
                }
                n = m;
                byte += 1;
            }
            for (r, &e) in o.iter_mut().zip(ent.iter()).take(d.len()) {
                *r = Self::result(e);
            }
        }
    }
}

/// Writer-side state of one family's table: group allocation and the update algorithms.
pub(crate) struct TableWriter {
    /// Group limit from the configuration (clamped to what the payload can address).
    limit: usize,
    /// Groups ever handed out (their memory is committed).
    hwm: usize,
    /// Groups whose grace period has ended.
    free: Vec<u32>,
    /// Groups reachable from the table.
    in_use: usize,
    /// Groups unlinked by the last operation, to be retired through QSBR by the caller.
    pub(crate) unlinked: Vec<u32>,
}

impl TableWriter {
    pub(crate) fn new(limit: usize) -> Self {
        TableWriter {
            limit: limit.min(MAX_GROUPS),
            hwm: 0,
            free: Vec::new(),
            in_use: 0,
            unlinked: Vec::new(),
        }
    }

    /// Configured group limit.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Groups that can be allocated without waiting for a grace period.
    pub(crate) fn available(&self) -> usize {
        self.free.len() + (self.limit - self.hwm)
    }

    /// Groups reachable from the table, and groups ever committed.
    pub(crate) fn usage(&self) -> (usize, usize) {
        (self.in_use, self.hwm)
    }

    /// A group whose grace period has ended becomes allocatable again.
    pub(crate) fn release(&mut self, g: u32) {
        self.free.push(g);
    }

    fn alloc(&mut self) -> usize {
        self.in_use += 1;
        match self.free.pop() {
            Some(g) => g as usize,
            None => {
                self.hwm += 1;
                self.hwm - 1
            }
        }
    }

    fn unlink(&mut self, g: usize) {
        self.in_use -= 1;
        self.unlinked.push(g as u32);
    }

    fn slot(t: &Table, level: usize, g: usize, i: usize) -> &AtomicU32 {
        if level == 0 {
            &t.tbl24.as_slice()[i]
        } else {
            &t.tbl8.as_slice()[g * GROUP + i]
        }
    }

    fn group(t: &Table, g: usize) -> &[AtomicU32] {
        &t.tbl8.as_slice()[g * GROUP..(g + 1) * GROUP]
    }

    /// Number of new groups adding `key/len` requires.
    pub(crate) fn groups_needed(&self, t: &Table, key: u128, len: u8) -> usize {
        if len <= 24 {
            return 0;
        }
        let last = usize::from(len - 24).div_ceil(8);
        let (mut level, mut g) = (0, 0);
        while level < last {
            let e = Self::slot(t, level, g, index(key, level)).load(Ordering::Relaxed);
            if e & EXT == 0 {
                return last - level;
            }
            g = (e & PAYLOAD) as usize;
            level += 1;
        }
        0
    }

    /// Add or replace `key/len` → `nh`. The caller has checked `groups_needed`.
    pub(crate) fn add(&mut self, t: &Table, key: u128, len: u8, nh: NextHopId) {
        let new = leaf(len, nh);
        let (mut level, mut g) = (0, 0);
        loop {
            let end = level_end(level);
            let idx = index(key, level);
            if len <= end {
                for i in idx..idx + (1usize << (end - len)) {
                    Self::set_if(t, Self::slot(t, level, g, i), len, new);
                }
                return;
            }
            let s = Self::slot(t, level, g, idx);
            let cur = s.load(Ordering::Relaxed);
            g = if cur & EXT != 0 {
                (cur & PAYLOAD) as usize
            } else {
                // A new group starts as a copy of the entry it replaces, so readers that
                // follow the new pointer see the same result as before for every address.
                let ng = self.alloc();
                for c in Self::group(t, ng) {
                    c.store(cur, Ordering::Relaxed);
                }
                s.store(VALID | EXT | ng as u32, Ordering::Release);
                ng
            };
            level += 1;
        }
    }

    /// Overwrite `s` (or, if it points to a group, every entry below it) when it was
    /// written by a prefix no longer than `len`.
    ///
    /// Leaves are handled in the loop over a group and only group pointers recurse: an add
    /// or replace of an aggregate walks every group below it (IPv6 allocations with their
    /// more-specifics: thousands of entries), and a call per entry was most of that cost.
    #[inline]
    fn set_if(t: &Table, s: &AtomicU32, len: u8, new: u32) {
        let cur = s.load(Ordering::Relaxed);
        if cur & EXT != 0 {
            Self::set_group_if(t, (cur & PAYLOAD) as usize, len, new);
        } else if (cur & VALID == 0 || depth(cur) <= len) && cur != new {
            s.store(new, Ordering::Release);
        }
    }

    fn set_group_if(t: &Table, g: usize, len: u8, new: u32) {
        for c in Self::group(t, g) {
            let cur = c.load(Ordering::Relaxed);
            if cur & EXT != 0 {
                Self::set_group_if(t, (cur & PAYLOAD) as usize, len, new);
            } else if (cur & VALID == 0 || depth(cur) <= len) && cur != new {
                c.store(new, Ordering::Release);
            }
        }
    }

    /// The replacement for a deleted `key/len` (longest shorter prefix covering it), read
    /// from the table when possible. `None`: unknown, ask the RIB.
    ///
    /// Any prefix shorter than `len` that covers `key/len` also covers its sibling (the
    /// other half of `key/(len-1)`). So if the sibling's first entry is a leaf written by a
    /// prefix shorter than `len`, that prefix is the replacement; if it is invalid, no such
    /// prefix exists. Only when more-specifics cover the sibling is the RIB needed.
    pub(crate) fn covering_hint(
        &self,
        t: &Table,
        key: u128,
        len: u8,
    ) -> Option<Option<(u8, NextHopId)>> {
        if len == 0 {
            return Some(None);
        }
        let sib = key ^ (1u128 << (128 - u32::from(len)));
        let (mut level, mut g) = (0, 0);
        loop {
            let e = Self::slot(t, level, g, index(sib, level)).load(Ordering::Relaxed);
            if len <= level_end(level) {
                return if e & VALID == 0 {
                    Some(None)
                } else if e & EXT == 0 && depth(e) < len {
                    Some(Some((depth(e), e & PAYLOAD)))
                } else {
                    None
                };
            }
            if e & EXT == 0 {
                // A leaf above the sibling's level was written by a prefix shorter than
                // `len` (a longer one would have needed a group here).
                return if e & VALID == 0 {
                    Some(None)
                } else {
                    Some(Some((depth(e), e & PAYLOAD)))
                };
            }
            g = (e & PAYLOAD) as usize;
            level += 1;
        }
    }

    /// Delete `key/len`: its entries become `repl` (the longest shorter covering prefix,
    /// `repl_len/repl_nh`) or invalid. Groups that become uniform are folded into their
    /// parent entry and pushed to `unlinked`.
    pub(crate) fn del(&mut self, t: &Table, key: u128, len: u8, repl: Option<(u8, NextHopId)>) {
        let repl = repl.map_or(0, |(l, nh)| leaf(l, nh));
        // Entries on the way down: (level, group of that level's table, index).
        let mut path = [(0usize, 0usize, 0usize); 16];
        let mut np = 0;
        let (mut level, mut g) = (0, 0);
        loop {
            let end = level_end(level);
            let idx = index(key, level);
            if len <= end {
                for i in idx..idx + (1usize << (end - len)) {
                    self.clear_if(t, Self::slot(t, level, g, i), level, len, repl);
                }
                break;
            }
            let cur = Self::slot(t, level, g, idx).load(Ordering::Relaxed);
            if cur & EXT == 0 {
                break;
            }
            path[np] = (level, g, idx);
            np += 1;
            g = (cur & PAYLOAD) as usize;
            level += 1;
        }
        for &(level, g, idx) in path[..np].iter().rev() {
            if !self.fold(t, Self::slot(t, level, g, idx), level + 1) {
                break;
            }
        }
    }

    /// Leaves are handled in the loop over a group, only group pointers recurse (as in
    /// [`TableWriter::set_if`]).
    fn clear_if(&mut self, t: &Table, s: &AtomicU32, level: usize, len: u8, repl: u32) {
        let cur = s.load(Ordering::Relaxed);
        if cur & EXT != 0 {
            for c in Self::group(t, (cur & PAYLOAD) as usize) {
                let e = c.load(Ordering::Relaxed);
                if e & EXT != 0 {
                    self.clear_if(t, c, level + 1, len, repl);
                } else if e & VALID != 0 && depth(e) == len {
                    c.store(repl, Ordering::Release);
                }
            }
            self.fold(t, s, level + 1);
        } else if cur & VALID != 0 && depth(cur) == len {
            s.store(repl, Ordering::Release);
        }
    }

    /// If the group `s` points to (at `level`) holds one value that its parent entry can
    /// hold too, store that value in the parent and unlink the group.
    fn fold(&mut self, t: &Table, s: &AtomicU32, level: usize) -> bool {
        let g = (s.load(Ordering::Relaxed) & PAYLOAD) as usize;
        let grp = Self::group(t, g);
        let first = grp[0].load(Ordering::Relaxed);
        // A uniform group of entries longer than the parent covers (e.g. sixteen /28s with
        // the same next hop) must stay: each /28 still has to be deletable on its own.
        if first & EXT != 0 || (first & VALID != 0 && depth(first) > level_end(level - 1)) {
            return false;
        }
        if !grp.iter().all(|c| c.load(Ordering::Relaxed) == first) {
            return false;
        }
        s.store(first, Ordering::Release);
        self.unlink(g);
        true
    }
}
