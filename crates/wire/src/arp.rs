//! ARP for Ethernet/IPv4 (RFC 826).

use crate::util::{be16, be32, mac};
use crate::{Error, Result};

/// ARP operation codes.
pub mod operation {
    /// Who-has request.
    pub const REQUEST: u16 = 1;
    /// Is-at reply.
    pub const REPLY: u16 = 2;
}

mod field {
    use core::ops::Range;
    pub const HTYPE: Range<usize> = 0..2;
    pub const PTYPE: Range<usize> = 2..4;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: Range<usize> = 6..8;
    pub const SHA: Range<usize> = 8..14;
    pub const SPA: Range<usize> = 14..18;
    pub const THA: Range<usize> = 18..24;
    pub const TPA: Range<usize> = 24..28;
}

const HTYPE_ETHERNET: u16 = 1;
const PTYPE_IPV4: u16 = 0x0800;

/// A read/write view of an Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Length of an Ethernet/IPv4 ARP packet.
    pub const HEADER_LEN: usize = field::TPA.end;

    /// Wraps `buffer` without validation; accessors panic if it is shorter than 28 bytes.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        ArpPacket { buffer }
    }

    /// Wraps `buffer`, checking its length ([`Error::Truncated`]) and that it
    /// is Ethernet/IPv4 with 6/4-byte addresses ([`Error::Unsupported`]).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        if p.buffer.as_ref().len() < Self::HEADER_LEN {
            return Err(Error::Truncated);
        }
        if p.hardware_type() != HTYPE_ETHERNET
            || p.protocol_type() != PTYPE_IPV4
            || p.hardware_len() != 6
            || p.protocol_len() != 4
        {
            return Err(Error::Unsupported);
        }
        Ok(p)
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Hardware type (1 = Ethernet).
    #[inline]
    pub fn hardware_type(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::HTYPE])
    }

    /// Protocol type (0x0800 = IPv4).
    #[inline]
    pub fn protocol_type(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::PTYPE])
    }

    /// Hardware address length.
    #[inline]
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }

    /// Protocol address length.
    #[inline]
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }

    /// Operation (see [`operation`]).
    #[inline]
    pub fn operation(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::OPER])
    }

    /// Sender hardware address.
    #[inline]
    pub fn sender_hw(&self) -> [u8; 6] {
        mac(&self.buffer.as_ref()[field::SHA])
    }

    /// Sender IPv4 address, host order.
    #[inline]
    pub fn sender_ip(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::SPA])
    }

    /// Target hardware address.
    #[inline]
    pub fn target_hw(&self) -> [u8; 6] {
        mac(&self.buffer.as_ref()[field::THA])
    }

    /// Target IPv4 address, host order.
    #[inline]
    pub fn target_ip(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::TPA])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    /// Writes the fixed Ethernet/IPv4 type and length fields.
    #[inline]
    pub fn set_ethernet_ipv4(&mut self) {
        let b = self.buffer.as_mut();
        b[field::HTYPE].copy_from_slice(&HTYPE_ETHERNET.to_be_bytes());
        b[field::PTYPE].copy_from_slice(&PTYPE_IPV4.to_be_bytes());
        b[field::HLEN] = 6;
        b[field::PLEN] = 4;
    }

    /// Sets the operation.
    #[inline]
    pub fn set_operation(&mut self, value: u16) {
        self.buffer.as_mut()[field::OPER].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the sender hardware address.
    #[inline]
    pub fn set_sender_hw(&mut self, addr: [u8; 6]) {
        self.buffer.as_mut()[field::SHA].copy_from_slice(&addr);
    }

    /// Sets the sender IPv4 address (host order).
    #[inline]
    pub fn set_sender_ip(&mut self, addr: u32) {
        self.buffer.as_mut()[field::SPA].copy_from_slice(&addr.to_be_bytes());
    }

    /// Sets the target hardware address.
    #[inline]
    pub fn set_target_hw(&mut self, addr: [u8; 6]) {
        self.buffer.as_mut()[field::THA].copy_from_slice(&addr);
    }

    /// Sets the target IPv4 address (host order).
    #[inline]
    pub fn set_target_ip(&mut self, addr: u32) {
        self.buffer.as_mut()[field::TPA].copy_from_slice(&addr.to_be_bytes());
    }
}

/// A parsed Ethernet/IPv4 ARP request or reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpRepr {
    /// [`operation::REQUEST`] or [`operation::REPLY`].
    pub operation: u16,
    /// Sender hardware address.
    pub sender_hw: [u8; 6],
    /// Sender IPv4 address, host order.
    pub sender_ip: u32,
    /// Target hardware address (zero in requests).
    pub target_hw: [u8; 6],
    /// Target IPv4 address, host order.
    pub target_ip: u32,
}

impl ArpRepr {
    /// Parses a validated packet; operations other than request/reply are
    /// [`Error::Unsupported`].
    pub fn parse<T: AsRef<[u8]>>(packet: &ArpPacket<T>) -> Result<Self> {
        let op = packet.operation();
        if op != operation::REQUEST && op != operation::REPLY {
            return Err(Error::Unsupported);
        }
        Ok(ArpRepr {
            operation: op,
            sender_hw: packet.sender_hw(),
            sender_ip: packet.sender_ip(),
            target_hw: packet.target_hw(),
            target_ip: packet.target_ip(),
        })
    }

    /// Bytes [`ArpRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        ArpPacket::<&[u8]>::HEADER_LEN
    }

    /// Writes the whole packet; [`Error::Truncated`] if the buffer is too short.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut ArpPacket<T>) -> Result<()> {
        if packet.buffer.as_ref().len() < self.buffer_len() {
            return Err(Error::Truncated);
        }
        packet.set_ethernet_ipv4();
        packet.set_operation(self.operation);
        packet.set_sender_hw(self.sender_hw);
        packet.set_sender_ip(self.sender_ip);
        packet.set_target_hw(self.target_hw);
        packet.set_target_ip(self.target_ip);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // Who has 192.168.1.1? Tell 192.168.1.100 (from 52:54:00:12:34:56).
    static REQUEST: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0xc0,
        0xa8, 0x01, 0x64, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc0, 0xa8, 0x01, 0x01,
    ];

    fn repr() -> ArpRepr {
        ArpRepr {
            operation: operation::REQUEST,
            sender_hw: [0x52, 0x54, 0x00, 0x12, 0x34, 0x56],
            sender_ip: 0xc0a8_0164,
            target_hw: [0; 6],
            target_ip: 0xc0a8_0101,
        }
    }

    #[test]
    fn parse_and_emit() {
        let p = ArpPacket::new_checked(&REQUEST[..]).unwrap();
        assert_eq!(p.operation(), operation::REQUEST);
        assert_eq!(p.sender_ip(), 0xc0a8_0164);
        assert_eq!(p.target_ip(), 0xc0a8_0101);
        assert_eq!(ArpRepr::parse(&p).unwrap(), repr());

        let mut buf = [0xaau8; 28];
        repr()
            .emit(&mut ArpPacket::new_unchecked(&mut buf[..]))
            .unwrap();
        assert_eq!(buf, REQUEST);
        let mut short = [0u8; 27];
        assert_eq!(
            repr().emit(&mut ArpPacket::new_unchecked(&mut short[..])),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn errors() {
        assert_eq!(
            ArpPacket::new_checked(&REQUEST[..27]).unwrap_err(),
            Error::Truncated
        );
        let mut ipv6ish = REQUEST;
        ipv6ish[5] = 16;
        assert_eq!(
            ArpPacket::new_checked(&ipv6ish[..]).unwrap_err(),
            Error::Unsupported
        );
        let mut rarp = REQUEST;
        rarp[7] = 3;
        let p = ArpPacket::new_checked(&rarp[..]).unwrap();
        assert_eq!(ArpRepr::parse(&p), Err(Error::Unsupported));
    }

    proptest! {
        #[test]
        fn arbitrary_never_panics(mut data in proptest::collection::vec(any::<u8>(), 0..200), fix in any::<bool>()) {
            if fix && data.len() >= 6 {
                data[..6].copy_from_slice(&REQUEST[..6]);
            }
            if let Ok(p) = ArpPacket::new_checked(&data[..]) {
                let _ = (p.operation(), p.sender_hw(), p.sender_ip(), p.target_hw(), p.target_ip());
                let _ = ArpRepr::parse(&p);
            }
        }
    }
}
