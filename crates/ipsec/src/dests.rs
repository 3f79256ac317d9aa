//! Transmit SAs chosen by destination: a tunnel interface with several peers (an IKE peer
//! with `remote = "any"`, a road-warrior gateway) sends each packet with the SA of the
//! peer whose traffic selectors hold its destination, not with one SA for the tunnel.
//!
//! A worker's table maps (interface, prefix) to the slot of an outbound SA, one hash map
//! for every prefix length (hash per length, longest first): a lookup probes only the
//! lengths in use, and road warriors' selectors are usually all /32 or /128 — one probe.
//! The table is built by the control thread with room for a bound number of prefixes
//! ([`Dests::with_capacity`]) and sent to the worker once: the worker never allocates.
//! Where two SAs claim one prefix, the one that claimed it last has it (a rekey's new SA
//! takes over from the old one, which then leaves without taking it back); when the one
//! that has it leaves, the control thread gives it to the newest other claimer
//! ([`crate::sad::SadWriter::unset_dests`]).

use std::net::IpAddr;

use rustc_hash::FxHashMap;

use crate::sad::NONE;

/// IPv4 prefix lengths are 0..=32; IPv6 ones are stored past them, 33..=161.
const V6_BASE: u8 = 33;
/// Every (family, length) slot: 33 + 129.
const LENGTHS: usize = 162;

/// One prefix of one interface, its address masked to its length. 20 bytes (32-bit
/// words: a table entry with its slot is 24 bytes, not 32; issue 27, a prefix a tunnel).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DestKey {
    addr: [u32; 4],
    iface: u16,
    /// The length, IPv6 ones past [`V6_BASE`].
    len: u8,
}

impl DestKey {
    /// `addr/len` on interface `iface`; `None` if `len` is beyond the family's bits.
    pub fn new(iface: u16, addr: IpAddr, len: u8) -> Option<DestKey> {
        match addr {
            IpAddr::V4(a) if len <= 32 => Some(Self::v4(iface, u32::from(a), len)),
            IpAddr::V6(a) if len <= 128 => Some(Self::v6(iface, u128::from(a), len)),
            _ => None,
        }
    }

    #[inline]
    fn v4(iface: u16, a: u32, len: u8) -> DestKey {
        let m = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
        DestKey {
            addr: [0, 0, 0, a & m],
            iface,
            len,
        }
    }

    #[inline]
    fn v6(iface: u16, a: u128, len: u8) -> DestKey {
        let m = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
        let a = a & m;
        DestKey {
            addr: [
                (a >> 96) as u32,
                (a >> 64) as u32,
                (a >> 32) as u32,
                a as u32,
            ],
            iface,
            len: V6_BASE + len,
        }
    }
}

/// A packet's destination, as read from its inner header.
#[derive(Clone, Copy, Debug)]
pub enum Dest {
    /// An IPv4 destination.
    V4(u32),
    /// An IPv6 destination.
    V6(u128),
}

/// One worker's transmit SAs by destination.
pub struct Dests {
    map: FxHashMap<DestKey, u32>,
    capacity: usize,
    /// Entries per (family, length).
    per_len: [u32; LENGTHS],
    /// Lengths in use, a bit per (family, length).
    used: [u64; 3],
    /// Entries per interface index (an interface with none is not looked up).
    per_iface: Vec<u32>,
}

impl Dests {
    /// A table with room for `capacity` prefixes over `ifaces` interfaces (allocated now,
    /// by the control thread).
    pub fn with_capacity(capacity: usize, ifaces: usize) -> Dests {
        let mut map = FxHashMap::default();
        // Twice what it holds: then a table worn by removals is rehashed in place, never
        // grown (hashbrown resizes when more than half its room is in use).
        map.reserve(2 * capacity);
        Dests {
            map,
            capacity,
            per_len: [0; LENGTHS],
            used: [0; 3],
            per_iface: vec![0; ifaces],
        }
    }

    /// Send `k`'s traffic with the SA in `slot`. Beyond the capacity (the writer counts,
    /// so never) the change is not made: nothing is allocated.
    pub fn set(&mut self, k: DestKey, slot: u32) {
        if let Some(s) = self.map.get_mut(&k) {
            *s = slot;
            return;
        }
        if self.map.len() >= self.capacity || usize::from(k.len) >= LENGTHS {
            return;
        }
        let Some(n) = self.per_iface.get_mut(usize::from(k.iface)) else {
            return;
        };
        *n += 1;
        self.map.insert(k, slot);
        let l = usize::from(k.len);
        self.per_len[l] += 1;
        self.used[l / 64] |= 1 << (l % 64);
    }

    /// `k` has no SA any more, if the SA in `slot` is the one it has (a newer SA that
    /// took it over keeps it).
    pub fn unset(&mut self, k: DestKey, slot: u32) {
        if self.map.get(&k) != Some(&slot) {
            return;
        }
        self.map.remove(&k);
        if let Some(n) = self.per_iface.get_mut(usize::from(k.iface)) {
            *n = n.saturating_sub(1);
        }
        let l = usize::from(k.len);
        self.per_len[l] = self.per_len[l].saturating_sub(1);
        if self.per_len[l] == 0 {
            self.used[l / 64] &= !(1 << (l % 64));
        }
    }

    /// Whether interface `iface` has SAs by destination.
    #[inline]
    pub fn has(&self, iface: u16) -> bool {
        self.per_iface
            .get(usize::from(iface))
            .is_some_and(|&n| n > 0)
    }

    /// The slot of the SA for `dst` on `iface` (the longest prefix holding it), or
    /// [`NONE`].
    #[inline]
    pub fn find(&self, iface: u16, dst: Dest) -> u32 {
        let (from, to) = match dst {
            Dest::V4(_) => (0u8, V6_BASE),
            Dest::V6(_) => (V6_BASE, LENGTHS as u8),
        };
        // Longest first: from the highest bit in use within the family's range down.
        let mut l = to;
        while l > from {
            l -= 1;
            let word = self.used[usize::from(l) / 64];
            // Bits of this word at or below `l`.
            let below = word & (u64::MAX >> (63 - u32::from(l) % 64));
            if below == 0 {
                // Nothing at or below `l` in this word: on to the previous word.
                l -= l % 64;
                continue;
            }
            let top = (usize::from(l) / 64 * 64) as u8 + 63 - below.leading_zeros() as u8;
            if top < from {
                break;
            }
            l = top;
            let k = match dst {
                Dest::V4(a) => DestKey::v4(iface, a, l),
                Dest::V6(a) => DestKey::v6(iface, a, l - V6_BASE),
            };
            if let Some(&s) = self.map.get(&k) {
                return s;
            }
        }
        NONE
    }

    /// Prefixes held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// The prefixes that make up the range `start..=end` (of one family): at most 2 per bit,
/// fewer for aligned ranges (a /24 as a range is one prefix). `None` if the two ends are
/// of different families or out of order.
pub fn range_prefixes(start: IpAddr, end: IpAddr) -> Option<Vec<(IpAddr, u8)>> {
    let (s, e, bits, v4) = match (start, end) {
        (IpAddr::V4(s), IpAddr::V4(e)) => {
            (u128::from(u32::from(s)), u128::from(u32::from(e)), 32, true)
        }
        (IpAddr::V6(s), IpAddr::V6(e)) => (u128::from(s), u128::from(e), 128, false),
        _ => return None,
    };
    if s > e {
        return None;
    }
    let mut out = Vec::new();
    let mut at = s;
    loop {
        // The largest aligned block starting at `at` that ends within the range.
        let mut size_bits = if at == 0 {
            bits
        } else {
            at.trailing_zeros().min(bits)
        };
        while size_bits > 0 {
            let span = if size_bits == 128 {
                u128::MAX
            } else {
                (1u128 << size_bits) - 1
            };
            let last = at.checked_add(span);
            match last {
                Some(l) if l <= e => break,
                _ => size_bits -= 1,
            }
        }
        let addr = if v4 {
            IpAddr::V4(std::net::Ipv4Addr::from(at as u32))
        } else {
            IpAddr::V6(std::net::Ipv6Addr::from(at))
        };
        out.push((addr, (bits - size_bits) as u8));
        let next = if size_bits == 128 {
            None
        } else {
            at.checked_add(1u128 << size_bits)
        };
        match next {
            Some(n) if n <= e && n != 0 => at = n,
            _ => break,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(iface: u16, p: &str) -> DestKey {
        let (a, l) = p.split_once('/').unwrap();
        DestKey::new(iface, a.parse().unwrap(), l.parse().unwrap()).unwrap()
    }

    #[test]
    fn an_entry_is_24_bytes() {
        // A prefix a tunnel, tables with room for twice a million (issue 27).
        assert_eq!(std::mem::size_of::<(DestKey, u32)>(), 24);
    }

    fn v4(a: &str) -> Dest {
        Dest::V4(u32::from(a.parse::<std::net::Ipv4Addr>().unwrap()))
    }

    fn v6(a: &str) -> Dest {
        Dest::V6(u128::from(a.parse::<std::net::Ipv6Addr>().unwrap()))
    }

    #[test]
    fn longest_prefix_of_the_interface_wins() {
        let mut d = Dests::with_capacity(16, 4);
        assert!(!d.has(2));
        d.set(k(2, "10.128.0.0/9"), 1);
        d.set(k(2, "10.128.0.5/32"), 2);
        d.set(k(2, "10.128.1.0/24"), 3);
        d.set(k(3, "10.128.0.6/32"), 4);
        d.set(k(2, "2001:db8::/32"), 5);
        d.set(k(2, "2001:db8::7/128"), 6);
        d.set(k(2, "0.0.0.0/0"), 7);
        assert!(d.has(2) && d.has(3) && !d.has(1));
        assert_eq!(d.find(2, v4("10.128.0.5")), 2);
        assert_eq!(d.find(2, v4("10.128.1.77")), 3);
        assert_eq!(d.find(2, v4("10.200.0.1")), 1);
        // Another interface's prefix is not this one's.
        assert_eq!(d.find(2, v4("10.128.0.6")), 1);
        assert_eq!(d.find(3, v4("10.128.0.6")), 4);
        assert_eq!(d.find(3, v4("10.128.0.7")), NONE);
        assert_eq!(d.find(2, v4("192.0.2.1")), 7);
        assert_eq!(d.find(2, v6("2001:db8::7")), 6);
        assert_eq!(d.find(2, v6("2001:db8::8")), 5);
        // An IPv4 /0 is not an IPv6 default.
        assert_eq!(d.find(2, v6("2001:db9::1")), NONE);
        assert_eq!(d.len(), 7);
    }

    #[test]
    fn a_newer_sa_keeps_a_prefix_the_older_leaves() {
        let mut d = Dests::with_capacity(4, 4);
        d.set(k(1, "10.0.0.1/32"), 10);
        d.set(k(1, "10.0.0.1/32"), 11);
        d.unset(k(1, "10.0.0.1/32"), 10);
        assert_eq!(d.find(1, v4("10.0.0.1")), 11);
        d.unset(k(1, "10.0.0.1/32"), 11);
        assert_eq!(d.find(1, v4("10.0.0.1")), NONE);
        assert!(!d.has(1) && d.is_empty());
        assert_eq!(d.used, [0; 3]);
    }

    #[test]
    fn full_table_and_unknown_interfaces_change_nothing() {
        let mut d = Dests::with_capacity(1, 2);
        d.set(k(1, "10.0.0.1/32"), 1);
        d.set(k(1, "10.0.0.2/32"), 2);
        d.set(k(7, "10.0.0.3/32"), 3);
        assert_eq!(d.len(), 1);
        assert_eq!(d.find(1, v4("10.0.0.2")), NONE);
        // A held prefix still moves to a new SA when full.
        d.set(k(1, "10.0.0.1/32"), 9);
        assert_eq!(d.find(1, v4("10.0.0.1")), 9);
        assert!(DestKey::new(1, "10.0.0.0".parse().unwrap(), 33).is_none());
        assert!(DestKey::new(1, "::".parse().unwrap(), 129).is_none());
    }

    fn pfx(s: &str, e: &str) -> Vec<String> {
        range_prefixes(s.parse().unwrap(), e.parse().unwrap())
            .unwrap()
            .into_iter()
            .map(|(a, l)| format!("{a}/{l}"))
            .collect()
    }

    #[test]
    fn ranges_become_prefixes() {
        assert_eq!(pfx("10.128.0.5", "10.128.0.5"), ["10.128.0.5/32"]);
        assert_eq!(pfx("10.1.0.0", "10.1.0.255"), ["10.1.0.0/24"]);
        assert_eq!(pfx("0.0.0.0", "255.255.255.255"), ["0.0.0.0/0"]);
        assert_eq!(
            pfx("::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
            ["::/0"]
        );
        assert_eq!(
            pfx("10.0.0.1", "10.0.0.6"),
            ["10.0.0.1/32", "10.0.0.2/31", "10.0.0.4/31", "10.0.0.6/32"]
        );
        assert_eq!(
            pfx("255.255.255.254", "255.255.255.255"),
            ["255.255.255.254/31"]
        );
        assert_eq!(pfx("2001:db8::", "2001:db8::ffff"), ["2001:db8::/112"]);
        assert!(range_prefixes("10.0.0.2".parse().unwrap(), "10.0.0.1".parse().unwrap()).is_none());
        assert!(range_prefixes("10.0.0.2".parse().unwrap(), "::1".parse().unwrap()).is_none());
        // The worst range of a family: two prefixes per bit at most.
        let worst = range_prefixes(
            "0.0.0.1".parse().unwrap(),
            "255.255.255.254".parse().unwrap(),
        )
        .unwrap();
        assert!(worst.len() <= 64, "{}", worst.len());
    }
}
