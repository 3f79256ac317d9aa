//! Flows: which addresses and UDP ports the frames of one direction and family carry.
//!
//! A [`FlowSet`] enumerates `flows` distinct 5-tuples (protocol is always UDP) in a fixed
//! mixed-radix order, fastest digit first:
//!
//! 1. destination prefix (index into [`Endpoints::dst`]), so consecutive frames spread over
//!    every route first;
//! 2. host within the prefix (the first `H` host addresses of each prefix, `H` the
//!    smallest host count among the prefixes);
//! 3. source address (`src.first + i`, `i < src.count`);
//! 4. UDP source port;
//! 5. UDP destination port.
//!
//! Flow `f` is digit-decomposed in that order, so flows `0..flows` are pairwise distinct
//! as long as the prefixes do not overlap; construction fails when `flows` exceeds the
//! product of the radices. The generator walks the set with an incrementing cursor (no
//! division per frame) and wraps to flow 0 after `flows` frames.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use anyhow::{bail, Context, Result};

use crate::profile::Family;

/// Most flows a [`FlowSet`] may hold (per direction and family).
pub const MAX_FLOWS: u32 = 1 << 24;

/// An IP prefix, e.g. `198.18.0.0/15` or `2001:2::/48`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prefix {
    /// Network address (host bits are ignored).
    pub addr: IpAddr,
    /// Prefix length (≤ 32 for IPv4, ≤ 128 for IPv6).
    pub len: u8,
}

impl Prefix {
    /// A prefix; fails when `len` is too long for the family.
    pub fn new(addr: IpAddr, len: u8) -> Result<Prefix> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if len > max {
            bail!("prefix length /{len} is longer than {max} bits for {addr}");
        }
        Ok(Prefix { addr, len })
    }

    fn family(&self) -> Family {
        if self.addr.is_ipv4() {
            Family::Ipv4
        } else {
            Family::Ipv6
        }
    }

    /// Host bits of the prefix.
    fn host_bits(&self) -> u32 {
        let bits = if self.addr.is_ipv4() { 32 } else { 128 };
        bits - u32::from(self.len)
    }

    /// The network address as an integer (host bits cleared).
    fn base(&self) -> u128 {
        let a = addr_u128(self.addr);
        let hb = self.host_bits();
        if hb >= 128 {
            0
        } else {
            a >> hb << hb
        }
    }

    /// Offset of the first host used, and how many hosts are usable (capped at `u32::MAX`):
    /// the network (all-zeros) address is skipped, and for IPv4 the broadcast too, except
    /// on /31 and /32 (RFC 3021) and IPv6 /127 and /128.
    fn hosts(&self) -> (u128, u32) {
        let hb = self.host_bits();
        let span: u128 = if hb >= 128 { u128::MAX } else { 1u128 << hb };
        let (skip, count) = match (self.addr.is_ipv4(), hb) {
            (_, 0) => (0, 1),
            (_, 1) => (0, 2),
            (true, _) => (1, span - 2),
            (false, _) => (1, span - 1),
        };
        (skip, count.min(u128::from(u32::MAX)) as u32)
    }
}

impl FromStr for Prefix {
    type Err = anyhow::Error;
    /// `addr/len`; a bare address is a host prefix (/32 or /128).
    fn from_str(s: &str) -> Result<Prefix> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .trim()
            .parse()
            .with_context(|| format!("bad address in prefix {s:?}"))?;
        let len = match l {
            Some(l) => l
                .trim()
                .parse()
                .with_context(|| format!("bad length in prefix {s:?}"))?,
            None => {
                if addr.is_ipv4() {
                    32
                } else {
                    128
                }
            }
        };
        Prefix::new(addr, len)
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// `count` consecutive addresses from `first` (source addresses of a flow set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddrRange {
    /// First address.
    pub first: IpAddr,
    /// How many (≥ 1).
    pub count: u32,
}

impl AddrRange {
    /// `count` addresses from `first`.
    pub fn new(first: IpAddr, count: u32) -> AddrRange {
        AddrRange { first, count }
    }
    /// A single address.
    pub fn single(addr: IpAddr) -> AddrRange {
        AddrRange {
            first: addr,
            count: 1,
        }
    }
}

/// `count` consecutive UDP ports from `first`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    /// First port.
    pub first: u16,
    /// How many (1..=65536 - first).
    pub count: u32,
}

impl PortRange {
    /// `count` ports from `first`.
    pub fn new(first: u16, count: u32) -> PortRange {
        PortRange { first, count }
    }
    /// A single port.
    pub fn single(port: u16) -> PortRange {
        PortRange {
            first: port,
            count: 1,
        }
    }
}

/// Default UDP source ports: 1024..=65535.
pub const DEFAULT_SRC_PORTS: PortRange = PortRange {
    first: 1024,
    count: 65536 - 1024,
};
/// Default UDP destination port: 4791 (a single port, as testers use by default).
pub const DEFAULT_DST_PORTS: PortRange = PortRange {
    first: 4791,
    count: 1,
};

/// Addresses and ports of one direction and family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoints {
    /// Source addresses (the tester's "hosts" behind the sending port).
    pub src: AddrRange,
    /// Destination prefixes: addresses inside routes the DUT has toward the receiving
    /// port. Must not overlap, or flows may repeat.
    pub dst: Vec<Prefix>,
    /// UDP source ports.
    pub src_ports: PortRange,
    /// UDP destination ports.
    pub dst_ports: PortRange,
}

impl Endpoints {
    /// Endpoints with the default ports ([`DEFAULT_SRC_PORTS`], [`DEFAULT_DST_PORTS`]).
    pub fn new(src: AddrRange, dst: Vec<Prefix>) -> Endpoints {
        Endpoints {
            src,
            dst,
            src_ports: DEFAULT_SRC_PORTS,
            dst_ports: DEFAULT_DST_PORTS,
        }
    }
}

/// One 5-tuple (UDP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FiveTuple {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// UDP source port.
    pub sport: u16,
    /// UDP destination port.
    pub dport: u16,
}

pub(crate) fn addr_u128(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

fn u128_addr(family: Family, v: u128) -> IpAddr {
    match family {
        Family::Ipv4 => IpAddr::V4(Ipv4Addr::from(v as u32)),
        Family::Ipv6 => IpAddr::V6(Ipv6Addr::from(v)),
    }
}

/// The `flows` distinct 5-tuples of one direction and family (see the module docs for
/// the order).
#[derive(Clone, Debug)]
pub struct FlowSet {
    family: Family,
    flows: u32,
    /// First usable host of each destination prefix.
    dst_base: Vec<u128>,
    /// Radices: [prefixes, hosts, sources, sports, dports].
    radix: [u32; 5],
    src_first: u128,
    sport_first: u16,
    dport_first: u16,
}

/// Position in a [`FlowSet`]: the flow index and its digits (advanced without division).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowCursor {
    flow: u32,
    digits: [u32; 5],
}

impl FlowCursor {
    /// Index of the current flow (0..flows).
    pub fn flow(&self) -> u32 {
        self.flow
    }
}

impl FlowSet {
    /// The flow set of `family` with `flows` 5-tuples (1..=[`MAX_FLOWS`]) over `ep`.
    /// Fails when an address is of the wrong family, a range runs past the end of the
    /// address or port space, or there are fewer distinct tuples than `flows`.
    pub fn new(family: Family, ep: &Endpoints, flows: u32) -> Result<FlowSet> {
        if flows == 0 || flows > MAX_FLOWS {
            bail!("flows must be 1..={MAX_FLOWS}, not {flows}");
        }
        if ep.dst.is_empty() {
            bail!("no {family} destination prefixes");
        }
        if ep.src.count == 0 {
            bail!("{family} source range is empty");
        }
        let fam_of = |a: IpAddr| {
            if a.is_ipv4() {
                Family::Ipv4
            } else {
                Family::Ipv6
            }
        };
        if fam_of(ep.src.first) != family {
            bail!(
                "{family} source address {} is of the other family",
                ep.src.first
            );
        }
        let space: u128 = match family {
            Family::Ipv4 => 1 << 32,
            Family::Ipv6 => u128::MAX,
        };
        let src_first = addr_u128(ep.src.first);
        if space - src_first < u128::from(ep.src.count) {
            bail!(
                "{family} source range {} + {} runs past the end of the address space",
                ep.src.first,
                ep.src.count
            );
        }
        for pr in [ep.src_ports, ep.dst_ports] {
            if pr.count == 0 || u32::from(pr.first) + pr.count > 65536 {
                bail!(
                    "UDP port range {} + {} is empty or runs past 65535",
                    pr.first,
                    pr.count
                );
            }
        }
        let mut dst_base = Vec::with_capacity(ep.dst.len());
        let mut hosts = u32::MAX;
        for p in &ep.dst {
            if p.family() != family {
                bail!("{family} destination prefix {p} is of the other family");
            }
            let (skip, n) = p.hosts();
            dst_base.push(p.base() + skip);
            hosts = hosts.min(n);
        }
        // Only as many host digits as can ever be reached.
        let prefixes = dst_base.len() as u64;
        let hosts = hosts.min(u64::from(flows).div_ceil(prefixes) as u32).max(1);
        let radix = [
            dst_base.len().min(u32::MAX as usize) as u32,
            hosts,
            ep.src.count,
            ep.src_ports.count,
            ep.dst_ports.count,
        ];
        let capacity: u128 = radix.iter().map(|&r| u128::from(r)).product();
        if capacity < u128::from(flows) {
            bail!(
                "{family}: {flows} flows requested but the destinations ({} prefixes × {} \
                 hosts), {} sources and {} × {} UDP ports give only {capacity} distinct tuples",
                radix[0],
                radix[1],
                radix[2],
                radix[3],
                radix[4]
            );
        }
        Ok(FlowSet {
            family,
            flows,
            dst_base,
            radix,
            src_first,
            sport_first: ep.src_ports.first,
            dport_first: ep.dst_ports.first,
        })
    }

    /// Number of flows.
    pub fn len(&self) -> u32 {
        self.flows
    }

    /// Always false (a set holds at least one flow).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Address family.
    pub fn family(&self) -> Family {
        self.family
    }

    /// Advance `c` to the next flow (wrapping to flow 0 after the last).
    #[inline]
    pub fn advance(&self, c: &mut FlowCursor) {
        c.flow += 1;
        if c.flow >= self.flows {
            *c = FlowCursor::default();
            return;
        }
        for i in 0..5 {
            c.digits[i] += 1;
            if c.digits[i] < self.radix[i] {
                return;
            }
            c.digits[i] = 0;
        }
    }

    /// Addresses (as integers; IPv4 in the low 32 bits) and ports at `c`.
    #[inline]
    pub(crate) fn at(&self, c: &FlowCursor) -> (u128, u128, u16, u16) {
        let d = &c.digits;
        let dst = self.dst_base[d[0] as usize] + u128::from(d[1]);
        let src = self.src_first + u128::from(d[2]);
        let sport = self.sport_first.wrapping_add(d[3] as u16);
        let dport = self.dport_first.wrapping_add(d[4] as u16);
        (src, dst, sport, dport)
    }

    /// The 5-tuple at `c`.
    pub fn tuple(&self, c: &FlowCursor) -> FiveTuple {
        let (s, d, sp, dp) = self.at(c);
        FiveTuple {
            src: u128_addr(self.family, s),
            dst: u128_addr(self.family, d),
            sport: sp,
            dport: dp,
        }
    }

    /// The 5-tuple of flow `f` (`f < len()`), computed by division (for tests and reports;
    /// equal to what [`FlowSet::advance`] reaches after `f` steps).
    pub fn nth(&self, f: u32) -> FiveTuple {
        let mut c = FlowCursor {
            flow: f % self.flows,
            digits: [0; 5],
        };
        let mut rest = u64::from(c.flow);
        for i in 0..5 {
            c.digits[i] = (rest % u64::from(self.radix[i])) as u32;
            rest /= u64::from(self.radix[i]);
        }
        self.tuple(&c)
    }

    /// Iterate over the `flows` tuples in order (the generator's order).
    pub fn iter(&self) -> impl Iterator<Item = FiveTuple> + '_ {
        let mut c = FlowCursor::default();
        (0..self.flows).map(move |_| {
            let t = self.tuple(&c);
            self.advance(&mut c);
            t
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep4(dst: &[&str]) -> Endpoints {
        Endpoints::new(
            AddrRange::new("198.18.0.2".parse().unwrap(), 4),
            dst.iter().map(|s| s.parse().unwrap()).collect(),
        )
    }

    #[test]
    fn prefix_parse_and_hosts() {
        let p: Prefix = "10.1.2.3/24".parse().unwrap();
        assert_eq!(p.base(), u128::from(0x0a01_0200u32));
        assert_eq!(p.hosts(), (1, 254));
        let p: Prefix = "10.0.0.7".parse().unwrap();
        assert_eq!((p.len, p.hosts()), (32, (0, 1)));
        let p: Prefix = "2001:2::/48".parse().unwrap();
        assert_eq!(p.hosts(), (1, u32::MAX));
        assert!("10.0.0.0/33".parse::<Prefix>().is_err());
        assert!("nonsense/8".parse::<Prefix>().is_err());
        let p: Prefix = "0.0.0.0/0".parse().unwrap();
        assert_eq!(p.base(), 0);
    }

    #[test]
    fn order_is_dst_prefix_then_host_then_source() {
        let fs = FlowSet::new(Family::Ipv4, &ep4(&["16.0.0.0/24", "16.0.1.0/24"]), 6).unwrap();
        let t: Vec<String> = fs.iter().map(|t| format!("{}>{}", t.src, t.dst)).collect();
        assert_eq!(
            t,
            [
                "198.18.0.2>16.0.0.1",
                "198.18.0.2>16.0.1.1",
                "198.18.0.2>16.0.0.2",
                "198.18.0.2>16.0.1.2",
                "198.18.0.2>16.0.0.3",
                "198.18.0.2>16.0.1.3"
            ]
        );
        for (i, t) in fs.iter().enumerate() {
            assert_eq!(fs.nth(i as u32), t);
        }
    }

    #[test]
    fn too_many_flows_or_wrong_family_fail() {
        let mut ep = ep4(&["16.0.0.5/32"]);
        ep.src_ports = PortRange::single(1);
        ep.src.count = 3;
        assert!(FlowSet::new(Family::Ipv4, &ep, 3).is_ok());
        assert!(FlowSet::new(Family::Ipv4, &ep, 4).is_err());
        assert!(FlowSet::new(Family::Ipv6, &ep, 1).is_err());
        ep.dst_ports = PortRange::new(65535, 2);
        assert!(FlowSet::new(Family::Ipv4, &ep, 1).is_err());
    }
}
