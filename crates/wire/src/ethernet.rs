//! Ethernet II frames, 802.1Q / 802.1ad VLAN tags and the L2 walk.

use crate::util::{be16, mac};
use crate::{Error, Result};

/// Well-known EtherType values.
pub mod ethertype {
    /// Internet Protocol version 4.
    pub const IPV4: u16 = 0x0800;
    /// Address Resolution Protocol.
    pub const ARP: u16 = 0x0806;
    /// 802.1Q customer VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service VLAN tag (Q-in-Q outer tag).
    pub const QINQ: u16 = 0x88a8;
    /// Internet Protocol version 6.
    pub const IPV6: u16 = 0x86dd;
}

mod field {
    use core::ops::Range;
    pub const DESTINATION: Range<usize> = 0..6;
    pub const SOURCE: Range<usize> = 6..12;
    pub const ETHERTYPE: Range<usize> = 12..14;
    pub const PAYLOAD: usize = 14;
}

/// A read/write view of an Ethernet II frame (without FCS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Length of the untagged Ethernet header.
    pub const HEADER_LEN: usize = field::PAYLOAD;

    /// Wraps `buffer` without validation; accessors panic if it is shorter than 14 bytes.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Wraps `buffer`, checking it holds at least the 14-byte header.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < Self::HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Self::new_unchecked(buffer))
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Destination MAC address.
    #[inline]
    pub fn dst_addr(&self) -> [u8; 6] {
        mac(&self.buffer.as_ref()[field::DESTINATION])
    }

    /// Source MAC address.
    #[inline]
    pub fn src_addr(&self) -> [u8; 6] {
        mac(&self.buffer.as_ref()[field::SOURCE])
    }

    /// EtherType (or TPID, when the frame is VLAN-tagged).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::ETHERTYPE])
    }

    /// Everything after the 14-byte header (a VLAN tag, if tagged).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC address.
    #[inline]
    pub fn set_dst_addr(&mut self, addr: [u8; 6]) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&addr);
    }

    /// Sets the source MAC address.
    #[inline]
    pub fn set_src_addr(&mut self, addr: [u8; 6]) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&addr);
    }

    /// Sets the EtherType.
    #[inline]
    pub fn set_ethertype(&mut self, value: u16) {
        self.buffer.as_mut()[field::ETHERTYPE].copy_from_slice(&value.to_be_bytes());
    }

    /// Mutable access to everything after the 14-byte header.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

/// An 802.1Q Tag Control Information word (PCP, DEI, VID).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlanTag(pub u16);

impl VlanTag {
    /// Length of a tag on the wire: TCI plus the inner EtherType.
    pub const LEN: usize = 4;

    /// Builds a TCI from its parts; out-of-range bits are masked off.
    #[inline]
    pub const fn new(pcp: u8, dei: bool, vid: u16) -> Self {
        VlanTag(((pcp as u16 & 0x7) << 13) | ((dei as u16) << 12) | (vid & 0x0fff))
    }

    /// Priority code point (0..=7).
    #[inline]
    pub const fn pcp(self) -> u8 {
        (self.0 >> 13) as u8
    }

    /// Drop eligible indicator.
    #[inline]
    pub const fn dei(self) -> bool {
        self.0 & 0x1000 != 0
    }

    /// VLAN identifier (0..=4095).
    #[inline]
    pub const fn vid(self) -> u16 {
        self.0 & 0x0fff
    }
}

/// What [`parse_l2`] learned about a frame's link layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L2Info {
    /// EtherType of the L3 payload, after any VLAN tags.
    pub ethertype: u16,
    /// VID of the outermost VLAN tag, if the frame is tagged.
    pub vlan: Option<u16>,
    /// (TPID, VID) of each tag walked, outermost first; (0, 0) where there is none.
    pub tags: [(u16, u16); MAX_VLAN_TAGS],
    /// Offset of the L3 header from the start of the frame.
    pub l3_offset: usize,
}

/// Most VLAN tags [`parse_l2`] walks (one 802.1ad outer plus one 802.1Q inner).
pub const MAX_VLAN_TAGS: usize = 2;

/// Walks the Ethernet header and up to two VLAN tags (0x8100 or 0x88a8).
///
/// Returns [`Error::Truncated`] if the frame ends inside a header and
/// [`Error::TooManyVlanTags`] if a third tag follows.
#[inline]
pub fn parse_l2(frame: &[u8]) -> Result<L2Info> {
    let Some(et) = frame.get(field::ETHERTYPE) else {
        return Err(Error::Truncated);
    };
    let mut ethertype = be16(et);
    let mut offset = field::PAYLOAD;
    let mut vlan = None;
    let mut tags = [(0, 0); MAX_VLAN_TAGS];
    for t in &mut tags {
        if ethertype != ethertype::VLAN && ethertype != ethertype::QINQ {
            break;
        }
        let Some(tag) = frame.get(offset..offset + VlanTag::LEN) else {
            return Err(Error::Truncated);
        };
        let vid = VlanTag(be16(tag)).vid();
        vlan.get_or_insert(vid);
        *t = (ethertype, vid);
        ethertype = be16(&tag[2..]);
        offset += VlanTag::LEN;
    }
    if ethertype == ethertype::VLAN || ethertype == ethertype::QINQ {
        return Err(Error::TooManyVlanTags);
    }
    Ok(L2Info {
        ethertype,
        vlan,
        tags,
        l3_offset: offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // ARP request broadcast from 52:54:00:12:34:56, header only.
    static UNTAGGED: [u8; 14] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x08, 0x06,
    ];

    // Q-in-Q: S-tag VID 100 PCP 3, C-tag VID 200, then IPv4 (first byte 0x45).
    static QINQ: [u8; 23] = [
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x00, 0x66, 0x77, 0x88, 0x99, 0xaa, 0x88, 0xa8, 0x60,
        0x64, 0x81, 0x00, 0x00, 0xc8, 0x08, 0x00, 0x45,
    ];

    #[test]
    fn untagged_roundtrip() {
        let f = EthernetFrame::new_checked(&UNTAGGED[..]).unwrap();
        assert_eq!(f.dst_addr(), [0xff; 6]);
        assert_eq!(f.src_addr(), [0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
        assert_eq!(f.ethertype(), ethertype::ARP);
        assert!(f.payload().is_empty());

        let mut buf = [0u8; 14];
        let mut g = EthernetFrame::new_unchecked(&mut buf[..]);
        g.set_dst_addr([0xff; 6]);
        g.set_src_addr([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
        g.set_ethertype(ethertype::ARP);
        assert_eq!(buf, UNTAGGED);

        let l2 = parse_l2(&UNTAGGED).unwrap();
        assert_eq!(
            l2,
            L2Info {
                ethertype: ethertype::ARP,
                vlan: None,
                tags: [(0, 0); 2],
                l3_offset: 14
            }
        );
    }

    #[test]
    fn qinq_walk() {
        let l2 = parse_l2(&QINQ).unwrap();
        assert_eq!(
            l2,
            L2Info {
                ethertype: ethertype::IPV4,
                vlan: Some(100),
                tags: [(ethertype::QINQ, 100), (ethertype::VLAN, 200)],
                l3_offset: 22
            }
        );
        let outer = VlanTag(u16::from_be_bytes([QINQ[14], QINQ[15]]));
        assert_eq!((outer.pcp(), outer.dei(), outer.vid()), (3, false, 100));
        assert_eq!(VlanTag::new(3, false, 100), outer);
        assert_eq!(VlanTag::new(7, true, 4095).0, 0xffff);
    }

    #[test]
    fn single_tag() {
        let mut f = QINQ;
        f[12] = 0x81;
        f[13] = 0x00;
        f[16] = 0x86;
        f[17] = 0xdd;
        let l2 = parse_l2(&f).unwrap();
        assert_eq!(
            l2,
            L2Info {
                ethertype: ethertype::IPV6,
                vlan: Some(100),
                tags: [(ethertype::VLAN, 100), (0, 0)],
                l3_offset: 18
            }
        );
    }

    #[test]
    fn errors() {
        assert_eq!(
            EthernetFrame::new_checked(&UNTAGGED[..13]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(parse_l2(&UNTAGGED[..13]), Err(Error::Truncated));
        assert_eq!(parse_l2(&QINQ[..17]), Err(Error::Truncated));
        assert_eq!(parse_l2(&QINQ[..21]), Err(Error::Truncated));
        let mut three = QINQ;
        three[20] = 0x81;
        three[21] = 0x00;
        assert_eq!(parse_l2(&three), Err(Error::TooManyVlanTags));
    }

    proptest! {
        #[test]
        fn arbitrary_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(f) = EthernetFrame::new_checked(&data[..]) {
                let _ = (f.dst_addr(), f.src_addr(), f.ethertype(), f.payload().len());
            }
            if let Ok(l2) = parse_l2(&data) {
                prop_assert!(l2.l3_offset <= data.len());
                prop_assert!(l2.ethertype != ethertype::VLAN && l2.ethertype != ethertype::QINQ);
            }
        }
    }
}
