//! Control-plane route store: one hash map per prefix length.
//!
//! It answers exact-match reads, counts routes, and on delete finds the longest shorter
//! prefix that covers the deleted one (whose next hop takes over the freed entries).
//! A bitmask of non-empty lengths keeps that search to the lengths actually in use.

use rustc_hash::FxHashMap;

use crate::NextHopId;

/// Keys are stored in the narrowest integer that holds the prefix bits.
trait Key: Copy + Eq + std::hash::Hash {}
impl Key for u32 {}
impl Key for u64 {}
impl Key for u128 {}

fn map_bytes<K: Key>(m: &FxHashMap<K, NextHopId>) -> usize {
    // hashbrown: one (K, V) slot plus one control byte per bucket.
    m.capacity() * (std::mem::size_of::<(K, NextHopId)>() + 1) + std::mem::size_of_val(m)
}

/// IPv4 routes, keyed by masked prefix (host byte order).
pub(crate) struct Rib4 {
    maps: Vec<FxHashMap<u32, NextHopId>>,
    /// Bit `l` set: some route of length `l` exists.
    lengths: u64,
    count: usize,
}

#[inline]
pub(crate) fn mask4(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len))
    }
}

impl Rib4 {
    pub(crate) fn new() -> Self {
        Rib4 {
            maps: (0..=32).map(|_| FxHashMap::default()).collect(),
            lengths: 0,
            count: 0,
        }
    }

    pub(crate) fn get(&self, p: u32, len: u8) -> Option<NextHopId> {
        self.maps[usize::from(len)].get(&p).copied()
    }

    /// Insert; returns the replaced next hop.
    pub(crate) fn insert(&mut self, p: u32, len: u8, nh: NextHopId) -> Option<NextHopId> {
        let old = self.maps[usize::from(len)].insert(p, nh);
        if old.is_none() {
            self.count += 1;
            self.lengths |= 1 << len;
        }
        old
    }

    pub(crate) fn remove(&mut self, p: u32, len: u8) -> Option<NextHopId> {
        let m = &mut self.maps[usize::from(len)];
        let old = m.remove(&p);
        if old.is_some() {
            self.count -= 1;
            if m.is_empty() {
                self.lengths &= !(1 << len);
            }
        }
        old
    }

    /// Longest route strictly shorter than `len` covering `p`.
    pub(crate) fn covering(&self, p: u32, len: u8) -> Option<(u8, NextHopId)> {
        let mut ls = self.lengths & ((1u64 << len) - 1);
        while ls != 0 {
            let l = (63 - ls.leading_zeros()) as u8;
            if let Some(&nh) = self.maps[usize::from(l)].get(&(p & mask4(l))) {
                return Some((l, nh));
            }
            ls &= !(1 << l);
        }
        None
    }

    pub(crate) fn len(&self) -> usize {
        self.count
    }

    pub(crate) fn bytes(&self) -> usize {
        self.maps.iter().map(map_bytes).sum()
    }
}

/// IPv6 routes, keyed by masked prefix left-aligned in a `u128`. Prefixes up to /64 are
/// stored as `u64` to halve their slot size.
pub(crate) struct Rib6 {
    short: Vec<FxHashMap<u64, NextHopId>>,
    long: Vec<FxHashMap<u128, NextHopId>>,
    /// Bit `l` set: some route of length `l` exists (lengths 0..=127; /128 is never a
    /// covering prefix).
    lengths: u128,
    count: usize,
}

#[inline]
pub(crate) fn mask6(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len))
    }
}

impl Rib6 {
    pub(crate) fn new() -> Self {
        Rib6 {
            short: (0..=64).map(|_| FxHashMap::default()).collect(),
            long: (65..=128).map(|_| FxHashMap::default()).collect(),
            lengths: 0,
            count: 0,
        }
    }

    pub(crate) fn get(&self, p: u128, len: u8) -> Option<NextHopId> {
        if len <= 64 {
            self.short[usize::from(len)]
                .get(&((p >> 64) as u64))
                .copied()
        } else {
            self.long[usize::from(len - 65)].get(&p).copied()
        }
    }

    pub(crate) fn insert(&mut self, p: u128, len: u8, nh: NextHopId) -> Option<NextHopId> {
        let old = if len <= 64 {
            self.short[usize::from(len)].insert((p >> 64) as u64, nh)
        } else {
            self.long[usize::from(len - 65)].insert(p, nh)
        };
        if old.is_none() {
            self.count += 1;
            if len < 128 {
                self.lengths |= 1 << len;
            }
        }
        old
    }

    pub(crate) fn remove(&mut self, p: u128, len: u8) -> Option<NextHopId> {
        let (old, empty) = if len <= 64 {
            let m = &mut self.short[usize::from(len)];
            (m.remove(&((p >> 64) as u64)), m.is_empty())
        } else {
            let m = &mut self.long[usize::from(len - 65)];
            (m.remove(&p), m.is_empty())
        };
        if old.is_some() {
            self.count -= 1;
            if empty && len < 128 {
                self.lengths &= !(1 << len);
            }
        }
        old
    }

    pub(crate) fn covering(&self, p: u128, len: u8) -> Option<(u8, NextHopId)> {
        let mut ls = if len >= 128 {
            self.lengths
        } else {
            self.lengths & ((1u128 << len) - 1)
        };
        while ls != 0 {
            let l = (127 - ls.leading_zeros()) as u8;
            if let Some(nh) = self.get(p & mask6(l), l) {
                return Some((l, nh));
            }
            ls &= !(1 << l);
        }
        None
    }

    pub(crate) fn len(&self) -> usize {
        self.count
    }

    pub(crate) fn bytes(&self) -> usize {
        self.short.iter().map(map_bytes).sum::<usize>()
            + self.long.iter().map(map_bytes).sum::<usize>()
    }
}
