//! UDP (RFC 768).

use crate::checksum;
use crate::util::be16;
use crate::{Error, Result};

mod field {
    use core::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const CHECKSUM: Range<usize> = 6..8;
    pub const PAYLOAD: usize = 8;
}

/// A read/write view of a UDP datagram. The buffer may be longer than the
/// UDP length; [`payload`](UdpPacket::payload) and the checksum stop at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Length of the UDP header.
    pub const HEADER_LEN: usize = field::PAYLOAD;

    /// Wraps `buffer` without validation; accessors panic if it is shorter than 8 bytes.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    /// Wraps `buffer`, checking it holds the header ([`Error::Truncated`]) and
    /// that 8 ≤ length field ≤ buffer length ([`Error::BadLength`]).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        let len = p.buffer.as_ref().len();
        if len < Self::HEADER_LEN {
            return Err(Error::Truncated);
        }
        let l = usize::from(p.len());
        if l < Self::HEADER_LEN || l > len {
            return Err(Error::BadLength);
        }
        Ok(p)
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::SRC_PORT])
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::DST_PORT])
    }

    /// Length field (header plus payload).
    #[inline]
    pub fn len(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::LENGTH])
    }

    /// True if the length field says there is no payload.
    #[inline]
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= Self::HEADER_LEN
    }

    /// Checksum as stored (0 = none, IPv4 only).
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::CHECKSUM])
    }

    /// The datagram (0..length field), clamped to the buffer.
    #[inline]
    fn datagram(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        let end = usize::from(self.len()).min(data.len());
        &data[..end]
    }

    /// Payload (8..length field).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        self.datagram().get(field::PAYLOAD..).unwrap_or(&[])
    }

    /// True if the checksum verifies, given the pseudo-header partial sum
    /// (e.g. `checksum::pseudo_v4(src, dst, 17, udp.len())`). A zero checksum
    /// ("none", legal only over IPv4) does not verify: callers check
    /// `checksum() == 0` first where that is allowed.
    #[inline]
    pub fn verify_checksum(&self, pseudo_sum: u32) -> bool {
        checksum::fold(u32::from(checksum::fold(pseudo_sum)) + checksum::sum(self.datagram()))
            == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets the source port.
    #[inline]
    pub fn set_src_port(&mut self, value: u16) {
        self.buffer.as_mut()[field::SRC_PORT].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, value: u16) {
        self.buffer.as_mut()[field::DST_PORT].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the length field.
    #[inline]
    pub fn set_len(&mut self, value: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the stored checksum.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&value.to_be_bytes());
    }

    /// Computes and stores the checksum given the pseudo-header partial sum;
    /// a computed 0 is sent as 0xffff (RFC 768).
    #[inline]
    pub fn fill_checksum(&mut self, pseudo_sum: u32) {
        self.set_checksum(0);
        let c =
            !checksum::fold(u32::from(checksum::fold(pseudo_sum)) + checksum::sum(self.datagram()));
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    /// Mutable payload (8..length field), clamped to the buffer.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let data = self.buffer.as_mut();
        let end = usize::from(be16(&data[field::LENGTH])).min(data.len());
        data.get_mut(field::PAYLOAD..end).unwrap_or(&mut [])
    }
}

/// A parsed UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload length in bytes.
    pub payload_len: usize,
}

impl UdpRepr {
    /// Parses a validated datagram (checksum is the caller's business: it needs the IP header).
    pub fn parse<T: AsRef<[u8]>>(packet: &UdpPacket<T>) -> Result<Self> {
        Ok(UdpRepr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            payload_len: usize::from(packet.len()).saturating_sub(UdpPacket::<&[u8]>::HEADER_LEN),
        })
    }

    /// Bytes of header [`UdpRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        UdpPacket::<&[u8]>::HEADER_LEN
    }

    /// Writes the header with a zero checksum; fill the payload, then call
    /// [`UdpPacket::fill_checksum`]. [`Error::Truncated`] on a short buffer,
    /// [`Error::BadLength`] if the length does not fit 16 bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut UdpPacket<T>) -> Result<()> {
        if packet.buffer.as_ref().len() < self.buffer_len() {
            return Err(Error::Truncated);
        }
        let len =
            u16::try_from(self.buffer_len() + self.payload_len).map_err(|_| Error::BadLength)?;
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(len);
        packet.set_checksum(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv4::{Ipv4Packet, Ipv4Repr};
    use proptest::prelude::*;

    /// DNS query for example.com A from 192.168.1.100:53211 to 8.8.8.8:53.
    static DNS: [u8; 57] = [
        0x45, 0x00, 0x00, 0x39, 0x1c, 0x46, 0x00, 0x00, 0x40, 0x11, 0x8c, 0x52, 0xc0, 0xa8, 0x01,
        0x64, 0x08, 0x08, 0x08, 0x08, // IPv4
        0xcf, 0xdb, 0x00, 0x35, 0x00, 0x25, 0xe2, 0x3b, // UDP
        0xab, 0xcd, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // DNS header
        0x07, b'e', b'x', b'a', b'm', b'p', b'l', b'e', 0x03, b'c', b'o', b'm', 0x00, 0x00, 0x01,
        0x00, 0x01, // question
    ];

    #[test]
    fn dns_query_both_ways() {
        let ip = Ipv4Packet::new_checked(&DNS[..]).unwrap();
        assert!(ip.verify_checksum());
        let udp = UdpPacket::new_checked(ip.payload()).unwrap();
        assert_eq!((udp.src_port(), udp.dst_port(), udp.len()), (53211, 53, 37));
        assert_eq!(udp.checksum(), 0xe23b);
        assert!(!udp.is_empty());
        assert_eq!(udp.payload(), &DNS[28..]);
        let ph = checksum::pseudo_v4(ip.src_addr(), ip.dst_addr(), 17, udp.len());
        assert!(udp.verify_checksum(ph));
        assert!(!udp.verify_checksum(ph + 1));
        // Any u32 is accepted as a partial sum, even unfolded ones.
        assert!(udp.verify_checksum(u32::from(checksum::fold(ph)) + 0xffff_0000 - 0xffff));
        let _ = udp.verify_checksum(u32::MAX);
        let repr = UdpRepr::parse(&udp).unwrap();
        assert_eq!(
            repr,
            UdpRepr {
                src_port: 53211,
                dst_port: 53,
                payload_len: 29
            }
        );

        let mut buf = [0u8; 57];
        buf[28..].copy_from_slice(&DNS[28..]);
        let ip_repr = Ipv4Repr::parse(&ip).unwrap();
        ip_repr
            .emit(&mut Ipv4Packet::new_unchecked(&mut buf[..]))
            .unwrap();
        let mut out = UdpPacket::new_unchecked(&mut buf[20..]);
        repr.emit(&mut out).unwrap();
        out.fill_checksum(ph);
        assert_eq!(buf, DNS);
    }

    #[test]
    fn zero_checksum_sent_as_ffff() {
        // Choose a payload word that makes the computed checksum 0.
        let mut buf = [0u8; 10];
        let mut p = UdpPacket::new_unchecked(&mut buf[..]);
        p.set_len(10);
        p.fill_checksum(0);
        let c = p.checksum();
        p.payload_mut().copy_from_slice(&c.to_be_bytes());
        p.fill_checksum(0);
        assert_eq!(p.checksum(), 0xffff);
        assert!(p.verify_checksum(0));
    }

    #[test]
    fn errors() {
        let e = |b: &[u8]| UdpPacket::new_checked(b).unwrap_err();
        assert_eq!(e(&DNS[20..27]), Error::Truncated);
        assert_eq!(e(&DNS[20..56]), Error::BadLength);
        let mut short = DNS;
        short[25] = 7;
        assert_eq!(e(&short[20..]), Error::BadLength);
        let r = UdpRepr {
            src_port: 1,
            dst_port: 2,
            payload_len: 65528,
        };
        let mut buf = [0u8; 8];
        assert_eq!(
            r.emit(&mut UdpPacket::new_unchecked(&mut buf[..])),
            Err(Error::BadLength)
        );
        assert_eq!(
            r.emit(&mut UdpPacket::new_unchecked(&mut buf[..7])),
            Err(Error::Truncated)
        );
    }

    proptest! {
        #[test]
        fn arbitrary_never_panics(mut data in proptest::collection::vec(any::<u8>(), 0..200), fix in any::<bool>()) {
            if fix && data.len() >= 8 {
                let l = data.len() as u16 - u16::from(data[5] % 4).min(data.len() as u16 - 8);
                data[4..6].copy_from_slice(&l.to_be_bytes());
            }
            if let Ok(mut p) = UdpPacket::new_checked(&mut data[..]) {
                let _ = (p.src_port(), p.dst_port(), p.len(), p.is_empty(), p.checksum());
                prop_assert_eq!(p.payload().len() + 8, usize::from(p.len()));
                let _ = (UdpRepr::parse(&p), p.verify_checksum(0x1234));
                p.fill_checksum(0x1234);
                prop_assert!(p.verify_checksum(0x1234));
                let _ = p.payload_mut();
            }
        }
    }
}
