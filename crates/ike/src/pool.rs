//! Virtual IP pools (a peer's `pools`, RFC 7296 §2.19): the addresses a responder hands
//! out in CP(CFG_REPLY), one to each IKE SA that asks.
//!
//! A lease costs O(1) whatever the pool's size (issue 27: a million road warriors): the
//! addresses never leased yet are taken first, in order behind a cursor; then the
//! released ones, first in, first out (an address just released is the last to be
//! handed out again); a bitmap says which are leased (a release of an address not leased
//! is ignored, never counted twice).

use std::collections::VecDeque;
use std::net::Ipv4Addr;

/// The most addresses a peer's pools hold together (a /8).
pub const MAX_POOL_ADDRESSES: u64 = 1 << 24;
/// The shortest pool prefix.
pub const MIN_POOL_PREFIX: u8 = 8;

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
        let addr: Ipv4Addr = a.parse().map_err(|_| {
            if a.parse::<std::net::Ipv6Addr>().is_ok() {
                format!("`{s}`: IPv6 pools are not supported (IPv4 only)")
            } else {
                format!("`{s}`: `{a}` is not an IPv4 address")
            }
        })?;
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

/// The usable addresses of a peer's pools, numbered 0.. across them.
#[derive(Debug)]
pub struct Pool {
    /// Each prefix's first usable address and the index of that address.
    ranges: Vec<(u32, u32, u32)>,
    size: u32,
    /// Addresses `next..size` were never leased.
    next: u32,
    /// Released addresses (indices), oldest first.
    free: VecDeque<u32>,
    /// A bit per address: leased.
    leased: Vec<u64>,
    in_use: u32,
}

impl Pool {
    /// A pool of the prefixes (checked by [`Prefix4::parse`], not overlapping).
    pub fn new(prefixes: &[Prefix4]) -> Pool {
        let mut ranges = Vec::new();
        let mut size = 0u32;
        for p in prefixes {
            let (a, b) = p.usable();
            ranges.push((a, b, size));
            size = size.saturating_add(b - a + 1);
        }
        Pool {
            ranges,
            size,
            next: 0,
            free: VecDeque::new(),
            leased: vec![0; (size as usize).div_ceil(64)],
            in_use: 0,
        }
    }

    /// Addresses it holds.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Addresses leased.
    pub fn in_use(&self) -> u32 {
        self.in_use
    }

    fn addr(&self, i: u32) -> Option<Ipv4Addr> {
        self.ranges
            .iter()
            .find(|(a, b, at)| i >= *at && i - at <= b - a)
            .map(|(a, _, at)| Ipv4Addr::from(a + (i - at)))
    }

    fn index(&self, addr: Ipv4Addr) -> Option<u32> {
        let v = u32::from(addr);
        self.ranges
            .iter()
            .find(|(a, b, _)| (*a..=*b).contains(&v))
            .map(|(a, _, at)| at + (v - a))
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

    /// A free address, leased; `None` when all are leased.
    pub fn lease(&mut self) -> Option<Ipv4Addr> {
        let i = if self.next < self.size {
            self.next += 1;
            self.next - 1
        } else {
            self.free.pop_front()?
        };
        self.set(i, true);
        self.in_use += 1;
        self.addr(i)
    }

    /// Gives a leased address back (an address not leased from it is ignored).
    pub fn release(&mut self, addr: Ipv4Addr) {
        if let Some(i) = self.index(addr).filter(|i| self.bit(*i)) {
            self.set(i, false);
            self.in_use -= 1;
            self.free.push_back(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Prefix4 {
        Prefix4::parse(s).unwrap()
    }

    #[test]
    fn prefixes_are_checked() {
        assert_eq!(
            p("10.200.0.0/24").range().1,
            u32::from(Ipv4Addr::new(10, 200, 0, 255))
        );
        for (s, why) in [
            ("10.200.0.0", "not a prefix"),
            ("10.200.0.1/24", "host bits"),
            ("10.200.0.0/33", "prefix length"),
            ("10.0.0.0/7", "at most a /8"),
            ("fd00::/64", "IPv6"),
            ("10.x.0.0/24", "not an IPv4"),
            ("127.0.0.0/24", "unicast"),
        ] {
            let e = Prefix4::parse(s).unwrap_err();
            assert!(e.contains(why), "{s}: {e}");
        }
        assert!(p("10.0.0.0/16").overlaps(&p("10.0.5.0/24")));
        assert!(!p("10.0.0.0/24").overlaps(&p("10.0.1.0/24")));
    }

    #[test]
    fn leases_every_usable_address_once_then_reuses_the_oldest_released() {
        let mut pool = Pool::new(&[p("10.200.0.0/30"), p("10.9.0.7/32")]);
        assert_eq!(pool.size(), 3);
        let got: Vec<_> = (0..3).map(|_| pool.lease().unwrap()).collect();
        assert_eq!(
            got,
            [
                Ipv4Addr::new(10, 200, 0, 1),
                Ipv4Addr::new(10, 200, 0, 2),
                Ipv4Addr::new(10, 9, 0, 7)
            ]
        );
        assert_eq!((pool.lease(), pool.in_use()), (None, 3));
        pool.release(got[1]);
        pool.release(got[1]);
        pool.release(Ipv4Addr::new(192, 0, 2, 1));
        pool.release(got[0]);
        assert_eq!(pool.in_use(), 1);
        assert_eq!(pool.lease(), Some(got[1]));
        assert_eq!(pool.lease(), Some(got[0]));
        assert_eq!(pool.lease(), None);
    }

    #[test]
    fn a_million_leases() {
        let mut pool = Pool::new(&[p("10.0.0.0/12")]);
        for _ in 0..1_000_000 {
            pool.lease().unwrap();
        }
        pool.release(Ipv4Addr::new(10, 0, 0, 9));
        // Fresh addresses first, then the one given back.
        while pool.in_use() < pool.size() - 1 {
            assert_ne!(pool.lease(), Some(Ipv4Addr::new(10, 0, 0, 9)));
        }
        assert_eq!(pool.lease(), Some(Ipv4Addr::new(10, 0, 0, 9)));
        assert_eq!(pool.lease(), None);
    }
}
