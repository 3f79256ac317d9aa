//! IPv6 header (RFC 8200) and the extension-header walk.

use crate::util::{addr16, be16, be32};
use crate::{Error, Result};

mod field {
    use core::ops::Range;
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Range<usize> = 8..24;
    pub const DST_ADDR: Range<usize> = 24..40;
}

/// Next-header values the extension-header walk understands.
pub mod next_header {
    /// Hop-by-Hop Options.
    pub const HOP_BY_HOP: u8 = 0;
    /// Routing header.
    pub const ROUTING: u8 = 43;
    /// Fragment header.
    pub const FRAGMENT: u8 = 44;
    /// Encapsulating Security Payload (ends the walk).
    pub const ESP: u8 = 50;
    /// Authentication Header.
    pub const AH: u8 = 51;
    /// No Next Header.
    pub const NO_NEXT: u8 = 59;
    /// Destination Options.
    pub const DST_OPTS: u8 = 60;
}

/// A read/write view of an IPv6 packet.
///
/// The buffer may extend past the payload (link-layer padding); [`payload`]
/// stops at 40 + payload length.
///
/// [`payload`]: Ipv6Packet::payload
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Length of the fixed header.
    pub const HEADER_LEN: usize = field::DST_ADDR.end;

    /// Wraps `buffer` without validation; accessors panic if it is shorter than 40 bytes.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Wraps `buffer` after checking: at least 40 bytes ([`Error::Truncated`]),
    /// version 6 ([`Error::BadVersion`]) and 40 + payload length ≤ buffer length
    /// ([`Error::BadLength`]). Jumbograms (payload length 0 with a Jumbo
    /// option) are not supported: length 0 is simply an empty payload.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        let len = p.buffer.as_ref().len();
        if len < Self::HEADER_LEN {
            return Err(Error::Truncated);
        }
        if p.version() != 6 {
            return Err(Error::BadVersion);
        }
        if Self::HEADER_LEN + usize::from(p.payload_len()) > len {
            return Err(Error::BadLength);
        }
        Ok(p)
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    fn word0(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::VER_TC_FLOW])
    }

    /// Version nibble (6 after validation).
    #[inline]
    pub fn version(&self) -> u8 {
        (self.word0() >> 28) as u8
    }

    /// Traffic class (DSCP << 2 | ECN).
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }

    /// Flow label (20 bits).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0x000f_ffff
    }

    /// Payload length (everything after the fixed header, extension headers included).
    #[inline]
    pub fn payload_len(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::LENGTH])
    }

    /// Next header of the fixed header.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// Hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> [u8; 16] {
        addr16(&self.buffer.as_ref()[field::SRC_ADDR])
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> [u8; 16] {
        addr16(&self.buffer.as_ref()[field::DST_ADDR])
    }

    /// Payload (40..40 + payload length), clamped to the buffer.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        let end = (Self::HEADER_LEN + usize::from(self.payload_len())).min(data.len());
        data.get(Self::HEADER_LEN..end).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    #[inline]
    fn set_word0(&mut self, v: u32) {
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the version nibble.
    #[inline]
    pub fn set_version(&mut self, value: u8) {
        self.set_word0((self.word0() & 0x0fff_ffff) | (u32::from(value & 0x0f) << 28));
    }

    /// Sets the traffic class.
    #[inline]
    pub fn set_traffic_class(&mut self, value: u8) {
        self.set_word0((self.word0() & 0xf00f_ffff) | (u32::from(value) << 20));
    }

    /// Sets the flow label (low 20 bits of `value`).
    #[inline]
    pub fn set_flow_label(&mut self, value: u32) {
        self.set_word0((self.word0() & 0xfff0_0000) | (value & 0x000f_ffff));
    }

    /// Sets the payload length.
    #[inline]
    pub fn set_payload_len(&mut self, value: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the next header.
    #[inline]
    pub fn set_next_header(&mut self, value: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = value;
    }

    /// Sets the hop limit.
    #[inline]
    pub fn set_hop_limit(&mut self, value: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = value;
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, addr: [u8; 16]) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&addr);
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, addr: [u8; 16]) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&addr);
    }

    /// Mutable payload, clamped to the buffer.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = Self::HEADER_LEN + usize::from(self.payload_len());
        let data = self.buffer.as_mut();
        let end = end.min(data.len());
        data.get_mut(Self::HEADER_LEN..end).unwrap_or(&mut [])
    }
}

/// A parsed fixed IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Next header of the fixed header.
    pub next_header: u8,
    /// Payload length in bytes.
    pub payload_len: usize,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
}

impl Ipv6Repr {
    /// Parses a validated packet (never fails; `Result` for symmetry with other reprs).
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv6Packet<T>) -> Result<Self> {
        Ok(Ipv6Repr {
            src: packet.src_addr(),
            dst: packet.dst_addr(),
            next_header: packet.next_header(),
            payload_len: usize::from(packet.payload_len()),
            hop_limit: packet.hop_limit(),
            traffic_class: packet.traffic_class(),
            flow_label: packet.flow_label(),
        })
    }

    /// Bytes of header [`Ipv6Repr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        Ipv6Packet::<&[u8]>::HEADER_LEN
    }

    /// Writes the 40-byte fixed header. [`Error::Truncated`] on a short buffer,
    /// [`Error::BadLength`] if `payload_len` exceeds 65535.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv6Packet<T>) -> Result<()> {
        if packet.buffer.as_ref().len() < self.buffer_len() {
            return Err(Error::Truncated);
        }
        let len = u16::try_from(self.payload_len).map_err(|_| Error::BadLength)?;
        packet.set_word0(
            (6 << 28) | (u32::from(self.traffic_class) << 20) | (self.flow_label & 0x000f_ffff),
        );
        packet.set_payload_len(len);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(self.src);
        packet.set_dst_addr(self.dst);
        Ok(())
    }
}

/// Default bound on the number of extension headers [`walk_ext_headers`] follows.
pub const MAX_EXT_HEADERS: usize = 8;

/// The Fragment header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragInfo {
    /// Fragment offset in bytes.
    pub offset_bytes: u16,
    /// More Fragments flag.
    pub more: bool,
    /// Identification.
    pub ident: u32,
}

/// Result of [`walk_ext_headers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtWalk {
    /// Protocol after the last extension header (e.g. 6, 17, 58, 50 or 59).
    pub upper_protocol: u8,
    /// Offset of the upper-layer header from the start of the IPv6 payload.
    /// For a non-first fragment this points at fragment data, not a header.
    pub upper_offset: usize,
    /// The Fragment header, if one was crossed.
    pub fragment: Option<FragInfo>,
    /// Number of extension headers crossed.
    pub headers: usize,
}

/// Follows the extension-header chain from `first_next_header` through
/// `payload` (the IPv6 payload).
///
/// Understands Hop-by-Hop, Routing, Fragment, Destination Options and AH;
/// anything else (ESP, No Next Header, upper layers, unknown) ends the walk.
/// The walk also stops after a Fragment header with a non-zero offset, since
/// what follows is not a header. Errors: [`Error::TooManyExtHeaders`] past
/// `max_headers`, [`Error::Truncated`] when a header runs past `payload`,
/// [`Error::Malformed`] for a Hop-by-Hop header that is not first.
pub fn walk_ext_headers(
    first_next_header: u8,
    payload: &[u8],
    max_headers: usize,
) -> Result<ExtWalk> {
    let mut nh = first_next_header;
    let mut offset = 0usize;
    let mut fragment = None;
    let mut headers = 0usize;
    loop {
        let len = match nh {
            next_header::HOP_BY_HOP | next_header::ROUTING | next_header::DST_OPTS => {
                if nh == next_header::HOP_BY_HOP && headers != 0 {
                    return Err(Error::Malformed);
                }
                let Some(&l) = payload.get(offset + 1) else {
                    return Err(Error::Truncated);
                };
                (usize::from(l) + 1) * 8
            }
            next_header::AH => {
                let Some(&l) = payload.get(offset + 1) else {
                    return Err(Error::Truncated);
                };
                (usize::from(l) + 2) * 4
            }
            next_header::FRAGMENT => 8,
            _ => break,
        };
        if headers >= max_headers {
            return Err(Error::TooManyExtHeaders);
        }
        let Some(hdr) = payload.get(offset..offset + len) else {
            return Err(Error::Truncated);
        };
        let this = nh;
        nh = hdr[0];
        offset += len;
        headers += 1;
        if this == next_header::FRAGMENT {
            let off_flags = be16(&hdr[2..4]);
            let info = FragInfo {
                offset_bytes: off_flags & 0xfff8,
                more: off_flags & 1 != 0,
                ident: be32(&hdr[4..8]),
            };
            fragment = Some(info);
            if info.offset_bytes != 0 {
                break;
            }
        }
    }
    Ok(ExtWalk {
        upper_protocol: nh,
        upper_offset: offset,
        fragment,
        headers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SRC: [u8; 16] = [
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56,
    ];
    const DST: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

    /// IPv6 header, TC 0xb8 (EF), flow 0x12345, payload 8 bytes of UDP.
    static PKT: [u8; 48] = [
        0x6b, 0x81, 0x23, 0x45, 0x00, 0x08, 0x11, 0x40, // ver/tc/flow, len, nh, hlim
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56, // src
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, // dst
        0x04, 0xd2, 0x00, 0x35, 0x00, 0x08, 0x00, 0x00, // UDP header
    ];

    fn repr() -> Ipv6Repr {
        Ipv6Repr {
            src: SRC,
            dst: DST,
            next_header: 17,
            payload_len: 8,
            hop_limit: 64,
            traffic_class: 0xb8,
            flow_label: 0x12345,
        }
    }

    #[test]
    fn parse_and_emit() {
        let p = Ipv6Packet::new_checked(&PKT[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0xb8);
        assert_eq!(p.flow_label(), 0x12345);
        assert_eq!(p.payload_len(), 8);
        assert_eq!(p.next_header(), 17);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.src_addr(), SRC);
        assert_eq!(p.dst_addr(), DST);
        assert_eq!(p.payload(), &PKT[40..]);
        assert_eq!(Ipv6Repr::parse(&p).unwrap(), repr());

        let mut buf = [0u8; 48];
        buf[40..].copy_from_slice(&PKT[40..]);
        repr()
            .emit(&mut Ipv6Packet::new_unchecked(&mut buf[..]))
            .unwrap();
        assert_eq!(buf, PKT);

        let mut p = Ipv6Packet::new_unchecked(&mut buf[..]);
        p.set_traffic_class(0);
        p.set_flow_label(0xfffff);
        p.set_version(6);
        assert_eq!(
            (p.traffic_class(), p.flow_label(), p.version()),
            (0, 0xfffff, 6)
        );
        p.set_hop_limit(1);
        p.payload_mut()[0] = 0;
        p.set_payload_len(1000);
        assert_eq!(p.payload().len(), 8);
        assert_eq!(p.payload_mut().len(), 8);

        let big = Ipv6Repr {
            payload_len: 70000,
            ..repr()
        };
        assert_eq!(
            big.emit(&mut Ipv6Packet::new_unchecked(&mut buf[..])),
            Err(Error::BadLength)
        );
        assert_eq!(
            repr().emit(&mut Ipv6Packet::new_unchecked(&mut buf[..39])),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn errors() {
        let e = |b: &[u8]| Ipv6Packet::new_checked(b).unwrap_err();
        assert_eq!(e(&PKT[..39]), Error::Truncated);
        let mut v4 = PKT;
        v4[0] = 0x4b;
        assert_eq!(e(&v4), Error::BadVersion);
        assert_eq!(e(&PKT[..47]), Error::BadLength);
        // Payload length 0 is an empty payload, padding ignored.
        let mut zero = PKT;
        zero[5] = 0;
        assert!(Ipv6Packet::new_checked(&zero[..])
            .unwrap()
            .payload()
            .is_empty());
    }

    #[test]
    fn walk_chain() {
        // HBH (8 bytes, Router Alert + PadN) -> Dst Opts (16) -> Fragment -> AH -> TCP.
        let payload = [
            60, 0, 0x05, 0x02, 0x00, 0x00, 0x01, 0x00, // HBH
            44, 1, 0x01, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // Dst opts, len 1
            51, 0, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef, // Fragment: offset 0, M=1, id
            6, 4, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x00, 0x11,
            0x22, 0x33, 0x44, 0x55, // AH, len 4 -> 24 bytes
            0x04, 0xd2, 0x00, 0x50, // TCP ports
        ];
        let w = walk_ext_headers(next_header::HOP_BY_HOP, &payload, MAX_EXT_HEADERS).unwrap();
        assert_eq!(
            w,
            ExtWalk {
                upper_protocol: 6,
                upper_offset: 56,
                fragment: Some(FragInfo {
                    offset_bytes: 0,
                    more: true,
                    ident: 0xdead_beef
                }),
                headers: 4,
            }
        );
        assert_eq!(&payload[w.upper_offset..], &[0x04, 0xd2, 0x00, 0x50]);
        assert_eq!(
            walk_ext_headers(next_header::HOP_BY_HOP, &payload, 3),
            Err(Error::TooManyExtHeaders)
        );
        assert_eq!(
            walk_ext_headers(next_header::HOP_BY_HOP, &payload[..55], 8),
            Err(Error::Truncated)
        );
        assert_eq!(
            walk_ext_headers(next_header::HOP_BY_HOP, &payload[..1], 8),
            Err(Error::Truncated)
        );
        // Upper layer directly.
        let w = walk_ext_headers(17, &[], MAX_EXT_HEADERS).unwrap();
        assert_eq!(
            (w.upper_protocol, w.upper_offset, w.headers, w.fragment),
            (17, 0, 0, None)
        );
    }

    #[test]
    fn walk_special_cases() {
        // Non-first fragment stops the walk even if "next header" is an extension.
        let frag = [60, 0, 0x05, 0xa9, 0, 0, 0, 7, 0xff, 0xff];
        let w = walk_ext_headers(next_header::FRAGMENT, &frag, 8).unwrap();
        assert_eq!(w.upper_protocol, 60);
        assert_eq!(w.upper_offset, 8);
        assert_eq!(
            w.fragment,
            Some(FragInfo {
                offset_bytes: 0x05a8,
                more: true,
                ident: 7
            })
        );
        // No Next Header and ESP end the walk.
        let nn = [59, 0, 0, 0, 0, 0, 0, 0];
        let w = walk_ext_headers(next_header::ROUTING, &nn, 8).unwrap();
        assert_eq!(
            (w.upper_protocol, w.upper_offset),
            (next_header::NO_NEXT, 8)
        );
        let w = walk_ext_headers(next_header::ESP, &nn, 8).unwrap();
        assert_eq!(
            (w.upper_protocol, w.upper_offset, w.headers),
            (next_header::ESP, 0, 0)
        );
        // Hop-by-Hop after another header.
        let late_hbh = [0, 0, 0, 0, 0, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            walk_ext_headers(next_header::DST_OPTS, &late_hbh, 8),
            Err(Error::Malformed)
        );
        // Endless Dst Opts chain.
        let chain = [60u8, 0, 0, 0, 0, 0, 0, 0].repeat(9);
        assert_eq!(
            walk_ext_headers(60, &chain, MAX_EXT_HEADERS),
            Err(Error::TooManyExtHeaders)
        );
        assert_eq!(
            walk_ext_headers(60, &chain[..64], 100),
            Err(Error::Truncated)
        );
    }

    proptest! {
        #[test]
        fn arbitrary_never_panics(mut data in proptest::collection::vec(any::<u8>(), 0..200), fix in any::<bool>()) {
            if fix && data.len() >= 40 {
                data[0] = 0x60 | (data[0] & 0x0f);
                let plen = (data.len() - 40) as u16;
                data[4..6].copy_from_slice(&plen.to_be_bytes());
            }
            if let Ok(mut p) = Ipv6Packet::new_checked(&mut data[..]) {
                let _ = (p.version(), p.traffic_class(), p.flow_label(), p.payload_len());
                let _ = (p.next_header(), p.hop_limit(), p.src_addr(), p.dst_addr());
                prop_assert_eq!(p.payload().len(), usize::from(p.payload_len()));
                let _ = Ipv6Repr::parse(&p);
                if let Ok(w) = walk_ext_headers(p.next_header(), p.payload(), MAX_EXT_HEADERS) {
                    prop_assert!(w.upper_offset <= p.payload().len());
                    prop_assert!(w.headers <= MAX_EXT_HEADERS);
                }
                let _ = p.payload_mut();
            }
        }

        #[test]
        fn walk_never_panics(nh in prop_oneof![Just(0u8), Just(43), Just(44), Just(51), Just(60), any::<u8>()],
                             data in proptest::collection::vec(prop_oneof![Just(0u8), Just(43), Just(44), Just(51), Just(60), any::<u8>()], 0..200),
                             max in 0usize..12) {
            if let Ok(w) = walk_ext_headers(nh, &data, max) {
                prop_assert!(w.upper_offset <= data.len());
                prop_assert!(w.headers <= max);
            }
        }
    }
}
