//! What the fast path knows about its ports: MAC, MTU and the router's own addresses
//! (source addresses of ICMP errors).

/// How what the fast path punts on a port reaches the Linux stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PuntPath {
    /// Through the punt queue: the control thread writes it into the port's kernel face
    /// (the TAP of a memif port), or in-memory ports with no kernel.
    #[default]
    Queue,
    /// The kernel received the frame itself (AF_PACKET sees a copy of what the kernel
    /// gets): a punt is only a signal, and the kernel answers for itself (ARP, ICMP about
    /// malformed options).
    KernelSawIt,
    /// None: a frame redirected into an AF_XDP socket cannot be handed back to the kernel's
    /// receive path. The XDP program passes what is the kernel's; anything else the fast path
    /// would punt is dropped and counted (`PuntNoKernelPath`).
    Unreachable,
}

/// The tags of a VLAN sub-interface: frames on `parent` carrying exactly these belong to
/// it, and what it sends leaves by `parent` with them pushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VlanTags {
    /// The port the sub-interface rides on.
    pub parent: u16,
    /// TPID of the outer tag: 0x8100 (802.1Q) or 0x88a8 (802.1ad, QinQ's S-tag).
    pub tpid: u16,
    /// Outer VLAN id, 1..=4094.
    pub outer: u16,
    /// Inner (802.1Q C-tag) VLAN id for QinQ, 1..=4094; 0 for a single tag.
    pub inner: u16,
}

impl VlanTags {
    /// Bytes the tags take in a frame (4 or 8).
    #[inline]
    pub fn len(&self) -> usize {
        if self.inner == 0 {
            4
        } else {
            8
        }
    }
    /// Always false: a sub-interface has at least one tag (for clippy's `len` rule).
    pub fn is_empty(&self) -> bool {
        false
    }
    /// The lookup key of these tags on their parent.
    #[inline]
    pub fn key(&self) -> u64 {
        vlan_key(self.parent, self.tpid, self.outer, self.inner)
    }
    /// How the tags read: `802.1q 100`, `802.1ad 100`, `802.1ad 200 / 802.1q 300`.
    pub fn describe(&self) -> String {
        let outer = if self.tpid == wire::ethertype::QINQ {
            "802.1ad"
        } else {
            "802.1q"
        };
        match self.inner {
            0 => format!("{outer} {}", self.outer),
            inner => format!("{outer} {} / 802.1q {inner}", self.outer),
        }
    }
    /// The largest IP MTU the sub-interface carries on a parent of MTU `parent_mtu`: the
    /// parent sends frames of its MTU plus the Ethernet header, plus four bytes only when
    /// the outer tag is 802.1Q (the limit of AF_PACKET sockets, veth and most NICs); the
    /// tags take the rest.
    pub fn max_mtu(&self, parent_mtu: u32) -> u32 {
        let allowance = if self.tpid == wire::ethertype::VLAN {
            4
        } else {
            0
        };
        (parent_mtu + allowance).saturating_sub(self.len() as u32)
    }
    /// Write the tags (TPID and TCI each, 802.1p priority `pcp` in both) into `dst`, which
    /// holds [`Self::len`] bytes; the frame's EtherType follows them.
    pub fn write(&self, dst: &mut [u8], pcp: u8) {
        let prio = u16::from(pcp & 7) << 13;
        let mut w = [0u8; 8];
        w[0..2].copy_from_slice(&self.tpid.to_be_bytes());
        w[2..4].copy_from_slice(&(prio | self.outer).to_be_bytes());
        w[4..6].copy_from_slice(&wire::ethertype::VLAN.to_be_bytes());
        w[6..8].copy_from_slice(&(prio | self.inner).to_be_bytes());
        let n = self.len().min(dst.len());
        dst[..n].copy_from_slice(&w[..n]);
    }
}

/// The key of a tag stack on a port: the port, the outer TPID and VLAN id, the inner id
/// (0 for none).
#[inline]
pub fn vlan_key(port: u16, tpid: u16, outer: u16, inner: u16) -> u64 {
    u64::from(port) << 48 | u64::from(tpid) << 32 | u64::from(outer) << 16 | u64::from(inner)
}

/// One port as the fast path sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortInfo {
    /// Linux interface name (or a label for in-memory ports).
    pub name: String,
    /// The port's MAC address.
    pub mac: [u8; 6],
    /// IP MTU.
    pub mtu: u16,
    /// IPv4 addresses of the router on this port (host order).
    pub ip4: Vec<u32>,
    /// IPv6 addresses of the router on this port.
    pub ip6: Vec<[u8; 16]>,
    /// How punted frames reach the kernel.
    pub punt_path: PuntPath,
    /// A VLAN sub-interface (its kernel face is a TAP; punts go through the queue): the
    /// port it rides on and its tags. Sub-interfaces come after every port in the table.
    pub vlan: Option<VlanTags>,
    /// The link cannot carry traffic (admin down, no carrier; for a sub-interface, its
    /// parent's too). The control plane withdraws routes through it; a packet that still
    /// meets it on transmit is dropped and counted (`TxPortDown`).
    pub down: bool,
}

impl PortInfo {
    /// First IPv4 address, the source of ICMP errors sent for packets received here.
    pub fn primary_ip4(&self) -> Option<u32> {
        self.ip4.first().copied()
    }
    /// Preferred IPv6 source: a global address, else a link-local one.
    pub fn primary_ip6(&self) -> Option<[u8; 16]> {
        let is_ll = |a: &[u8; 16]| a[0] == 0xfe && a[1] & 0xc0 == 0x80;
        self.ip6
            .iter()
            .find(|a| !is_ll(a))
            .or_else(|| self.ip6.first())
            .copied()
    }
}

/// All ports, indexed by port number.
#[derive(Clone, Debug, Default)]
pub struct Interfaces {
    /// Port table.
    pub ports: Vec<PortInfo>,
    /// Every address of the router (all interfaces, loopback included): a packet from
    /// outside with one of them as its source is spoofed.
    pub own: OwnAddrs,
}

/// A set of the router's own addresses, built by the control thread and read per packet:
/// a 1,024-bit filter answers most sources with one load, the sorted lists the rest.
#[derive(Clone, Debug, Default)]
pub struct OwnAddrs {
    v4: Vec<u32>,
    v6: Vec<[u8; 16]>,
    filter: Box<[u64; 16]>,
}

#[inline]
fn filter_bit(h: u32) -> (usize, u64) {
    let h = h.wrapping_mul(0x9e37_79b1) >> 22;
    ((h >> 6) as usize & 15, 1u64 << (h & 63))
}

/// The filter's hash input for an IPv6 address given as 16 bytes (`None` otherwise), read
/// as two words in place: a copied array would be stored byte-wise and reloaded whole, a
/// store-forwarding stall on the per-packet path (measured with perf).
#[inline]
fn fold6(a: &[u8]) -> Option<u32> {
    let word = |b: Option<&[u8]>| Some(u64::from_be_bytes(b?.try_into().ok()?));
    let w = u128::from(word(a.get(..8))?) << 64 | u128::from(word(a.get(8..16))?);
    Some((w as u32) ^ ((w >> 32) as u32) ^ ((w >> 64) as u32) ^ ((w >> 96) as u32))
}

impl OwnAddrs {
    /// The set of `addrs`.
    pub fn new(addrs: impl IntoIterator<Item = std::net::IpAddr>) -> OwnAddrs {
        let mut o = OwnAddrs::default();
        for a in addrs {
            let h = match a {
                std::net::IpAddr::V4(v) => {
                    o.v4.push(v.into());
                    u32::from(v)
                }
                std::net::IpAddr::V6(v) => {
                    o.v6.push(v.octets());
                    fold6(&v.octets()).unwrap_or(0)
                }
            };
            let (w, b) = filter_bit(h);
            o.filter[w] |= b;
        }
        o.v4.sort_unstable();
        o.v4.dedup();
        o.v6.sort_unstable();
        o.v6.dedup();
        o
    }
    /// Whether `a` (host order) is one of the router's IPv4 addresses.
    #[inline]
    pub fn contains4(&self, a: u32) -> bool {
        let (w, b) = filter_bit(a);
        self.filter[w] & b != 0 && self.contains4_exact(a)
    }
    /// The exact check behind the filter, out of line: the filter answers nearly every
    /// packet.
    #[cold]
    #[inline(never)]
    fn contains4_exact(&self, a: u32) -> bool {
        self.v4.binary_search(&a).is_ok()
    }
    /// Whether `a` (16 bytes, as in a packet) is one of the router's IPv6 addresses;
    /// `false` unless `a` holds 16 bytes.
    #[inline]
    pub fn contains6(&self, a: &[u8]) -> bool {
        let Some(h) = fold6(a) else {
            return false;
        };
        let (i, b) = filter_bit(h);
        self.filter[i] & b != 0 && self.contains6_exact(a)
    }
    #[cold]
    #[inline(never)]
    fn contains6_exact(&self, a: &[u8]) -> bool {
        <[u8; 16]>::try_from(a).is_ok_and(|k| self.v6.binary_search(&k).is_ok())
    }
}

/// The VLAN sub-interfaces of an [`Interfaces`] table by their tags on their parent, for
/// finding the one a tagged frame was received on: ethernet-input's table, which features
/// on `port-input` (before ethernet-input has looked at the tags) reach through
/// [`crate::feature::FeatureCx::subif_of`].
#[derive(Clone, Debug, Default)]
pub struct Subifs {
    /// Index of the first sub-interface in the port table (its length if none).
    first: usize,
    /// Sub-interfaces by the key of their tags on their parent ([`vlan_key`]), sorted.
    by_key: Vec<(u64, u16)>,
}

impl Subifs {
    /// The sub-interfaces of `ifaces`.
    pub fn new(ifaces: &Interfaces) -> Subifs {
        let first = ifaces
            .ports
            .iter()
            .position(|p| p.vlan.is_some())
            .unwrap_or(ifaces.ports.len());
        let mut by_key: Vec<(u64, u16)> = ifaces
            .ports
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((p.vlan?.key(), i as u16)))
            .collect();
        by_key.sort_unstable();
        Subifs { first, by_key }
    }

    /// Index of the first sub-interface in the port table (its length if none): a port
    /// below it is a port, not a sub-interface.
    #[inline]
    pub fn first(&self) -> usize {
        self.first
    }

    /// The sub-interface a tagged `frame` (from its Ethernet header) received on `rx_port`
    /// belongs to, by its tags (VLAN ids only: priority and DEI bits do not matter); `None`
    /// if it is untagged, malformed, or of no sub-interface. `rx_port` may already be a
    /// sub-interface (a packet held for its next hop and sent through again): its parent's
    /// table is searched.
    pub fn of(&self, ifaces: &Interfaces, rx_port: u16, frame: &[u8]) -> Option<u16> {
        let port = if (rx_port as usize) < self.first {
            rx_port
        } else {
            ifaces.port(rx_port)?.vlan?.parent
        };
        let l2 = wire::parse_l2(frame).ok()?;
        l2.vlan?;
        let [(tpid, outer), (inner_tpid, inner)] = l2.tags;
        let inner = match inner_tpid {
            0 => 0,
            wire::ethertype::VLAN => inner,
            // An S-tag inside is no stack a sub-interface is declared with.
            _ => return None,
        };
        let key = vlan_key(port, tpid, outer, inner);
        let i = self.by_key.binary_search_by_key(&key, |e| e.0).ok()?;
        self.by_key.get(i).map(|e| e.1)
    }
}

impl Interfaces {
    /// A table of `ports` whose addresses are all the router's own addresses.
    pub fn from_ports(ports: Vec<PortInfo>) -> Interfaces {
        let own = OwnAddrs::new(ports.iter().flat_map(|p| {
            p.ip4
                .iter()
                .map(|a| std::net::IpAddr::from(std::net::Ipv4Addr::from(*a)))
                .chain(p.ip6.iter().map(|a| std::net::IpAddr::from(*a)))
                .collect::<Vec<_>>()
        }));
        Interfaces { ports, own }
    }

    /// Port `i`, if it exists.
    #[inline]
    pub fn port(&self, i: u16) -> Option<&PortInfo> {
        self.ports.get(i as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_addresses_are_found_and_others_are_not() {
        let addrs: Vec<std::net::IpAddr> = (0..300u32)
            .map(|i| std::net::Ipv4Addr::from(0x0a00_0000 + i * 7).into())
            .chain(["2001:db8::1".parse().unwrap(), "fe80::1".parse().unwrap()])
            .collect();
        let o = OwnAddrs::new(addrs.clone());
        for a in &addrs {
            match a {
                std::net::IpAddr::V4(v) => assert!(o.contains4((*v).into())),
                std::net::IpAddr::V6(v) => {
                    assert!(o.contains6(&v.octets()));
                }
            }
        }
        let others = (0..100_000u32)
            .filter(|i| o.contains4(0xc000_0200 + i))
            .count();
        assert_eq!(others, 0);
        assert!(!o.contains6(
            &"2001:db8::2"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets()
        ));
        assert!(!OwnAddrs::default().contains4(0));
    }
}
