//! What the fast path knows about its ports: MAC, MTU and the router's own addresses
//! (source addresses of ICMP errors).

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
}

impl Interfaces {
    /// Port `i`, if it exists.
    #[inline]
    pub fn port(&self, i: u16) -> Option<&PortInfo> {
        self.ports.get(i as usize)
    }
}
