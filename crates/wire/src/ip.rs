//! Things shared by IPv4 and IPv6: protocol numbers and the L4 port peek.

/// IP protocol / IPv6 next-header numbers used by the router.
pub mod protocol {
    /// ICMP for IPv4.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 encapsulation.
    pub const IPV6: u8 = 41;
    /// Encapsulating Security Payload.
    pub const ESP: u8 = 50;
    /// Authentication Header.
    pub const AH: u8 = 51;
    /// ICMP for IPv6.
    pub const ICMPV6: u8 = 58;
    /// SCTP.
    pub const SCTP: u8 = 132;
}

/// Source and destination ports of a TCP, UDP or SCTP header, read from its
/// first four bytes; `None` for other protocols or fewer than four bytes.
#[inline]
pub fn flow_ports(proto: u8, l4: &[u8]) -> Option<(u16, u16)> {
    match proto {
        protocol::TCP | protocol::UDP | protocol::SCTP => match l4 {
            [a, b, c, d, ..] => Some((u16::from_be_bytes([*a, *b]), u16::from_be_bytes([*c, *d]))),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ports() {
        let l4 = [0xd4, 0x31, 0x01, 0xbb, 0xff];
        assert_eq!(flow_ports(protocol::TCP, &l4), Some((54321, 443)));
        assert_eq!(flow_ports(protocol::UDP, &l4[..4]), Some((54321, 443)));
        assert_eq!(flow_ports(protocol::SCTP, &l4), Some((54321, 443)));
        assert_eq!(flow_ports(protocol::UDP, &l4[..3]), None);
        assert_eq!(flow_ports(protocol::ICMP, &l4), None);
    }

    proptest! {
        #[test]
        fn never_panics(proto in any::<u8>(), data in proptest::collection::vec(any::<u8>(), 0..8)) {
            let r = flow_ports(proto, &data);
            prop_assert_eq!(r.is_some(), data.len() >= 4 && matches!(proto, 6 | 17 | 132));
        }
    }
}
