//! Virtual IP pools (a peer's `pools`, RFC 7296 §2.19): the addresses a responder hands
//! out in CP(CFG_REPLY), one of each family asked for to each IKE SA that asks.
//!
//! A lease costs O(1) whatever the pool's size (issue 27: a million road warriors): the
//! addresses never leased yet are taken first, in order behind a cursor; then the
//! released ones, first in, first out (an address just released is the last to be
//! handed out again); a bitmap says which are leased (a release of an address not leased
//! is ignored, never counted twice). The bitmap covers the addresses handed out so far
//! and grows with the cursor: a pool costs nothing per address until it is leased (an
//! IPv6 /104 as an IPv4 /8).

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The most addresses a peer's pools of one family hold together (an IPv4 /8, an IPv6
/// /104).
pub const MAX_POOL_ADDRESSES: u64 = 1 << 24;
/// The shortest IPv4 pool prefix.
pub const MIN_POOL_PREFIX: u8 = 8;
/// The shortest IPv6 pool prefix.
pub const MIN_POOL_PREFIX6: u8 = 104;

/// An IPv4 prefix of a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prefix4 {
    pub addr: Ipv4Addr,
    pub len: u8,
}

impl Prefix4 {
    /// Parses `10.200.0.0/24`; the error says what is wrong.
    pub fn parse(s: &str) -> Result<Prefix4, String> {
        let (a, l) = s
            .split_once('/')
            .ok_or_else(|| format!("`{s}` is not a prefix (10.200.0.0/24)"))?;
        let addr: Ipv4Addr = a
            .parse()
            .map_err(|_| format!("`{s}`: `{a}` is not an IPv4 address"))?;
        let len: u8 = l
            .parse()
            .ok()
            .filter(|l| *l <= 32)
            .ok_or_else(|| format!("`{s}`: `{l}` is not a prefix length (0 to 32)"))?;
        if len < MIN_POOL_PREFIX {
            return Err(format!(
                "`{s}`: a pool is at most a /{MIN_POOL_PREFIX} (2^24 addresses)"
            ));
        }
        let p = Prefix4 { addr, len };
        if u32::from(addr) & !p.mask() != 0 {
            return Err(format!(
                "`{s}`: host bits set (the prefix is {}/{len})",
                Ipv4Addr::from(u32::from(addr) & p.mask())
            ));
        }
        if addr.octets()[0] == 0 || addr.is_loopback() || addr.is_multicast() || addr.is_broadcast()
        {
            return Err(format!("`{s}`: not unicast addresses a host can be given"));
        }
        Ok(p)
    }

    fn mask(&self) -> u32 {
        if self.len == 0 {
            0
        } else {
            u32::MAX << (32 - self.len)
        }
    }

    /// Its first and last address.
    pub fn range(&self) -> (u32, u32) {
        let a = u32::from(self.addr);
        (a, a | !self.mask())
    }

    /// Whether the two share an address.
    pub fn overlaps(&self, o: &Prefix4) -> bool {
        let (a, b) = (self.range(), o.range());
        a.0 <= b.1 && b.0 <= a.1
    }

    /// The addresses handed out: all but the network and broadcast addresses of a
    /// prefix shorter than /31 (strongSwan's pools do the same).
    fn usable(&self) -> (u32, u32) {
        let (a, b) = self.range();
        if self.len < 31 {
            (a + 1, b - 1)
        } else {
            (a, b)
        }
    }
}

impl std::fmt::Display for Prefix4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// An IPv6 prefix of a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prefix6 {
    pub addr: Ipv6Addr,
    pub len: u8,
}

impl Prefix6 {
    /// Parses `fd00:200::/120`; the error says what is wrong.
    pub fn parse(s: &str) -> Result<Prefix6, String> {
        let (a, l) = s
            .split_once('/')
            .ok_or_else(|| format!("`{s}` is not a prefix (fd00:200::/120)"))?;
        let addr: Ipv6Addr = a
            .parse()
            .map_err(|_| format!("`{s}`: `{a}` is not an IPv6 address"))?;
        let len: u8 = l
            .parse()
            .ok()
            .filter(|l| *l <= 128)
            .ok_or_else(|| format!("`{s}`: `{l}` is not a prefix length (0 to 128)"))?;
        if len < MIN_POOL_PREFIX6 {
            return Err(format!(
                "`{s}`: an IPv6 pool is at most a /{MIN_POOL_PREFIX6} (2^24 addresses)"
            ));
        }
        let p = Prefix6 { addr, len };
        if u128::from(addr) & !p.mask() != 0 {
            return Err(format!(
                "`{s}`: host bits set (the prefix is {}/{len})",
                Ipv6Addr::from(u128::from(addr) & p.mask())
            ));
        }
        // ::/16 holds the unspecified, loopback and IPv4-mapped addresses.
        if addr.segments()[0] == 0 || addr.is_multicast() {
            return Err(format!("`{s}`: not unicast addresses a host can be given"));
        }
        Ok(p)
    }

    fn mask(&self) -> u128 {
        if self.len == 0 {
            0
        } else {
            u128::MAX << (128 - self.len)
        }
    }

    /// Its first and last address.
    pub fn range(&self) -> (u128, u128) {
        let a = u128::from(self.addr);
        (a, a | !self.mask())
    }

    /// Whether the two share an address.
    pub fn overlaps(&self, o: &Prefix6) -> bool {
        let (a, b) = (self.range(), o.range());
        a.0 <= b.1 && b.0 <= a.1
    }

    /// The addresses handed out: all but the first (the subnet-router anycast address,
    /// RFC 4291 §2.6.1) and the last of a prefix shorter than /127, as for IPv4 (and
    /// strongSwan's pools).
    fn usable(&self) -> (u128, u128) {
        let (a, b) = self.range();
        if self.len < 127 {
            (a + 1, b - 1)
        } else {
            (a, b)
        }
    }
}

impl std::fmt::Display for Prefix6 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// A prefix of a pool, of either family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Prefix {
    V4(Prefix4),
    V6(Prefix6),
}

impl Prefix {
    /// Parses `10.200.0.0/24` or `fd00:200::/120`; the error says what is wrong.
    pub fn parse(s: &str) -> Result<Prefix, String> {
        if s.split('/').next().is_some_and(|a| a.contains(':')) {
            Prefix6::parse(s).map(Prefix::V6)
        } else {
            Prefix4::parse(s).map(Prefix::V4)
        }
    }

    /// An IPv6 prefix.
    pub fn is_v6(&self) -> bool {
        matches!(self, Prefix::V6(_))
    }

    /// Addresses it holds (at most 2^32).
    pub fn size(&self) -> u64 {
        let (a, b) = match self {
            Prefix::V4(p) => {
                let (a, b) = p.range();
                (u128::from(a), u128::from(b))
            }
            Prefix::V6(p) => p.range(),
        };
        u64::try_from(b - a).map_or(u64::MAX, |n| n.saturating_add(1))
    }

    /// Whether the two share an address (never when of two families).
    pub fn overlaps(&self, o: &Prefix) -> bool {
        match (self, o) {
            (Prefix::V4(a), Prefix::V4(b)) => a.overlaps(b),
            (Prefix::V6(a), Prefix::V6(b)) => a.overlaps(b),
            _ => false,
        }
    }

    /// Its first and last usable address, as numbers.
    fn usable(&self) -> (u128, u128) {
        match self {
            Prefix::V4(p) => {
                let (a, b) = p.usable();
                (u128::from(a), u128::from(b))
            }
            Prefix::V6(p) => p.usable(),
        }
    }
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Prefix::V4(p) => p.fmt(f),
            Prefix::V6(p) => p.fmt(f),
        }
    }
}

/// The usable addresses of a peer's pools of one family, numbered 0.. across them.
#[derive(Debug, Default)]
struct Family {
    /// Each prefix's first and last usable address and the index of the first.
    ranges: Vec<(u128, u128, u32)>,
    size: u32,
    /// Addresses `next..size` were never leased.
    next: u32,
    /// Released addresses (indices), oldest first.
    free: VecDeque<u32>,
    /// A bit per address `0..next`: leased (grown as `next` moves).
    leased: Vec<u64>,
    in_use: u32,
}

impl Family {
    fn new<'a>(prefixes: impl Iterator<Item = &'a Prefix>) -> Family {
        let mut f = Family::default();
        for p in prefixes {
            let (a, b) = p.usable();
            f.ranges.push((a, b, f.size));
            let n = u32::try_from(b - a).map_or(u32::MAX, |n| n.saturating_add(1));
            f.size = f.size.saturating_add(n);
        }
        f
    }

    fn addr(&self, i: u32) -> Option<u128> {
        self.ranges
            .iter()
            .find(|(a, b, at)| i >= *at && u128::from(i - at) <= b - a)
            .map(|(a, _, at)| a + u128::from(i - at))
    }

    fn index(&self, v: u128) -> Option<u32> {
        self.ranges
            .iter()
            .find(|(a, b, _)| (*a..=*b).contains(&v))
            .and_then(|(a, _, at)| u32::try_from(v - a).ok().map(|d| at + d))
    }

    fn bit(&self, i: u32) -> bool {
        self.leased
            .get(i as usize / 64)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    fn set(&mut self, i: u32, on: bool) {
        if let Some(w) = self.leased.get_mut(i as usize / 64) {
            if on {
                *w |= 1 << (i % 64);
            } else {
                *w &= !(1 << (i % 64));
            }
        }
    }

    fn lease(&mut self) -> Option<u128> {
        let i = if self.next < self.size {
            if self.next.is_multiple_of(64) {
                self.leased.push(0);
            }
            self.next += 1;
            self.next - 1
        } else {
            self.free.pop_front()?
        };
        self.set(i, true);
        self.in_use += 1;
        self.addr(i)
    }

    fn release(&mut self, v: u128) {
        if let Some(i) = self.index(v).filter(|i| self.bit(*i)) {
            self.set(i, false);
            self.in_use -= 1;
            self.free.push_back(i);
        }
    }
}

/// A peer's pools: its IPv4 and its IPv6 addresses, leased apart.
#[derive(Debug)]
pub struct Pool {
    v4: Family,
    v6: Family,
}

impl Pool {
    /// A pool of the prefixes (checked by [`Prefix::parse`], not overlapping, at most
    /// [`MAX_POOL_ADDRESSES`] of each family).
    pub fn new(prefixes: &[Prefix]) -> Pool {
        Pool {
            v4: Family::new(prefixes.iter().filter(|p| !p.is_v6())),
            v6: Family::new(prefixes.iter().filter(|p| p.is_v6())),
        }
    }

    /// Addresses it holds, of IPv6 or IPv4.
    pub fn size(&self, v6: bool) -> u32 {
        self.family(v6).size
    }

    /// Addresses leased, both families.
    pub fn in_use(&self) -> u32 {
        self.v4.in_use + self.v6.in_use
    }

    fn family(&self, v6: bool) -> &Family {
        if v6 {
            &self.v6
        } else {
            &self.v4
        }
    }

    /// A free IPv4 address, leased; `None` when all are leased (or there are none).
    pub fn lease4(&mut self) -> Option<Ipv4Addr> {
        self.v4
            .lease()
            .and_then(|v| u32::try_from(v).ok())
            .map(Ipv4Addr::from)
    }

    /// A free IPv6 address, leased; `None` when all are leased (or there are none).
    pub fn lease6(&mut self) -> Option<Ipv6Addr> {
        self.v6.lease().map(Ipv6Addr::from)
    }

    /// Gives a leased address back (an address not leased from it is ignored).
    pub fn release(&mut self, addr: IpAddr) {
        match addr {
            IpAddr::V4(a) => self.v4.release(u128::from(u32::from(a))),
            IpAddr::V6(a) => self.v6.release(u128::from(a)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Prefix {
        Prefix::parse(s).unwrap()
    }

    #[test]
    fn prefixes_are_checked() {
        assert_eq!(
            Prefix4::parse("10.200.0.0/24").unwrap().range().1,
            u32::from(Ipv4Addr::new(10, 200, 0, 255))
        );
        for (s, why) in [
            ("10.200.0.0", "not a prefix"),
            ("10.200.0.1/24", "host bits"),
            ("10.200.0.0/33", "prefix length"),
            ("10.0.0.0/7", "at most a /8"),
            ("10.x.0.0/24", "not an IPv4"),
            ("127.0.0.0/24", "unicast"),
            ("fd00::/64", "IPv6 pool is at most a /104"),
            ("fd00::1/120", "host bits set (the prefix is fd00::/120)"),
            ("fd00::/129", "prefix length (0 to 128)"),
            ("fd00:x::/120", "not an IPv6"),
            ("::ffff:10.0.0.0/120", "unicast"),
            ("ff02::/120", "unicast"),
            ("fd00::", "not a prefix"),
        ] {
            let e = Prefix::parse(s).unwrap_err();
            assert!(e.contains(why), "{s}: {e}");
        }
        assert!(p("10.0.0.0/16").overlaps(&p("10.0.5.0/24")));
        assert!(!p("10.0.0.0/24").overlaps(&p("10.0.1.0/24")));
        assert!(p("fd00::/104").overlaps(&p("fd00::42:0/112")));
        assert!(!p("fd00::/120").overlaps(&p("fd00::100/120")));
        assert!(!p("10.0.0.0/8").overlaps(&p("fd00::/104")));
        assert_eq!(
            (p("fd00::/104").size(), p("10.0.0.0/8").size()),
            (1 << 24, 1 << 24)
        );
        assert_eq!(p("fd00:200::/120").to_string(), "fd00:200::/120");
    }

    #[test]
    fn leases_every_usable_address_once_then_reuses_the_oldest_released() {
        let mut pool = Pool::new(&[p("10.200.0.0/30"), p("10.9.0.7/32")]);
        assert_eq!((pool.size(false), pool.size(true)), (3, 0));
        let got: Vec<_> = (0..3).map(|_| pool.lease4().unwrap()).collect();
        assert_eq!(
            got,
            [
                Ipv4Addr::new(10, 200, 0, 1),
                Ipv4Addr::new(10, 200, 0, 2),
                Ipv4Addr::new(10, 9, 0, 7)
            ]
        );
        assert_eq!(
            (pool.lease4(), pool.lease6(), pool.in_use()),
            (None, None, 3)
        );
        pool.release(got[1].into());
        pool.release(got[1].into());
        pool.release(Ipv4Addr::new(192, 0, 2, 1).into());
        pool.release(got[0].into());
        assert_eq!(pool.in_use(), 1);
        assert_eq!(pool.lease4(), Some(got[1]));
        assert_eq!(pool.lease4(), Some(got[0]));
        assert_eq!(pool.lease4(), None);
    }

    #[test]
    fn the_families_are_leased_apart() {
        let mut pool = Pool::new(&[
            p("fd00:200::/126"),
            p("10.200.0.0/30"),
            p("fd00:201::7/128"),
        ]);
        assert_eq!((pool.size(false), pool.size(true)), (2, 3));
        let six = |s: &str| s.parse::<Ipv6Addr>().unwrap();
        assert_eq!(pool.lease6(), Some(six("fd00:200::1")));
        assert_eq!(pool.lease4(), Some(Ipv4Addr::new(10, 200, 0, 1)));
        assert_eq!(pool.lease6(), Some(six("fd00:200::2")));
        assert_eq!(pool.lease6(), Some(six("fd00:201::7")));
        assert_eq!((pool.lease6(), pool.in_use()), (None, 4));
        // An IPv4 address given back goes to the IPv4 addresses only.
        pool.release(Ipv4Addr::new(10, 200, 0, 1).into());
        pool.release(six("fd00:200::3").into());
        pool.release(six("fd00:202::1").into());
        assert_eq!((pool.lease6(), pool.in_use()), (None, 3));
        pool.release(six("fd00:200::2").into());
        assert_eq!(pool.lease6(), Some(six("fd00:200::2")));
        // The fresh IPv4 address first, then the one given back.
        assert_eq!(pool.lease4(), Some(Ipv4Addr::new(10, 200, 0, 2)));
        assert_eq!(pool.lease4(), Some(Ipv4Addr::new(10, 200, 0, 1)));
        // A /127 and a /128 are handed out whole.
        let mut pool = Pool::new(&[p("fd00:200::/127")]);
        assert_eq!(pool.lease6(), Some(six("fd00:200::")));
        assert_eq!(pool.lease6(), Some(six("fd00:200::1")));
    }

    #[test]
    fn a_large_pool_costs_memory_as_it_is_leased() {
        // The largest pool of each family: no bitmap until addresses are handed out.
        let mut pool = Pool::new(&[p("fd00::/104"), p("10.0.0.0/8")]);
        assert_eq!(
            (pool.size(false), pool.size(true)),
            ((1 << 24) - 2, (1 << 24) - 2)
        );
        assert!(pool.v6.leased.is_empty() && pool.v4.leased.is_empty());
        for _ in 0..1000 {
            pool.lease6().unwrap();
        }
        assert_eq!(pool.v6.leased.len(), 1000usize.div_ceil(64));
        assert_eq!(
            pool.lease6(),
            Some("fd00::3e9".parse::<Ipv6Addr>().unwrap())
        );
    }

    #[test]
    fn a_million_leases() {
        let mut pool = Pool::new(&[p("10.0.0.0/12")]);
        for _ in 0..1_000_000 {
            pool.lease4().unwrap();
        }
        pool.release(Ipv4Addr::new(10, 0, 0, 9).into());
        // Fresh addresses first, then the one given back.
        while pool.in_use() < pool.size(false) - 1 {
            assert_ne!(pool.lease4(), Some(Ipv4Addr::new(10, 0, 0, 9)));
        }
        assert_eq!(pool.lease4(), Some(Ipv4Addr::new(10, 0, 0, 9)));
        assert_eq!(pool.lease4(), None);
    }
}
