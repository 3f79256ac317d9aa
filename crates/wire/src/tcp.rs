//! TCP header (RFC 9293).

use crate::checksum;
use crate::util::{be16, be32};
use crate::{Error, Result};

mod field {
    use core::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const SEQ_NUM: Range<usize> = 4..8;
    pub const ACK_NUM: Range<usize> = 8..12;
    pub const DATA_OFF: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WIN_SIZE: Range<usize> = 14..16;
    pub const CHECKSUM: Range<usize> = 16..18;
    pub const URGENT: Range<usize> = 18..20;
}

/// TCP flag bits as found in byte 13 of the header.
pub mod flags {
    /// No more data from sender.
    pub const FIN: u8 = 0x01;
    /// Synchronize sequence numbers.
    pub const SYN: u8 = 0x02;
    /// Reset the connection.
    pub const RST: u8 = 0x04;
    /// Push function.
    pub const PSH: u8 = 0x08;
    /// Acknowledgment field is significant.
    pub const ACK: u8 = 0x10;
    /// Urgent pointer field is significant.
    pub const URG: u8 = 0x20;
    /// ECN-Echo.
    pub const ECE: u8 = 0x40;
    /// Congestion Window Reduced.
    pub const CWR: u8 = 0x80;
}

const OPT_END: u8 = 0;
const OPT_NOP: u8 = 1;
const OPT_MSS: u8 = 2;

/// A read/write view of a TCP segment. The buffer is the whole segment (the
/// IP payload): TCP has no length field of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Length of a header without options.
    pub const HEADER_LEN: usize = field::URGENT.end;

    /// Wraps `buffer` without validation; accessors panic if it is shorter than 20 bytes.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        TcpPacket { buffer }
    }

    /// Wraps `buffer` after checking: at least 20 bytes ([`Error::Truncated`]),
    /// data offset ≥ 5 ([`Error::BadHeaderLen`]) and the buffer holds the
    /// whole header ([`Error::Truncated`]).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        let len = p.buffer.as_ref().len();
        if len < Self::HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hlen = p.header_len();
        if hlen < Self::HEADER_LEN {
            return Err(Error::BadHeaderLen);
        }
        if hlen > len {
            return Err(Error::Truncated);
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

    /// Sequence number.
    #[inline]
    pub fn seq_number(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::SEQ_NUM])
    }

    /// Acknowledgment number.
    #[inline]
    pub fn ack_number(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::ACK_NUM])
    }

    /// Header length in bytes (data offset × 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::DATA_OFF] >> 4) * 4
    }

    /// All eight flag bits (see [`flags`]).
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// FIN flag.
    #[inline]
    pub fn fin(&self) -> bool {
        self.flags() & flags::FIN != 0
    }

    /// SYN flag.
    #[inline]
    pub fn syn(&self) -> bool {
        self.flags() & flags::SYN != 0
    }

    /// RST flag.
    #[inline]
    pub fn rst(&self) -> bool {
        self.flags() & flags::RST != 0
    }

    /// PSH flag.
    #[inline]
    pub fn psh(&self) -> bool {
        self.flags() & flags::PSH != 0
    }

    /// ACK flag.
    #[inline]
    pub fn ack(&self) -> bool {
        self.flags() & flags::ACK != 0
    }

    /// URG flag.
    #[inline]
    pub fn urg(&self) -> bool {
        self.flags() & flags::URG != 0
    }

    /// Window size (unscaled).
    #[inline]
    pub fn window_len(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::WIN_SIZE])
    }

    /// Checksum as stored.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::CHECKSUM])
    }

    /// Urgent pointer.
    #[inline]
    pub fn urgent_at(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::URGENT])
    }

    /// Option bytes (20..header length), clamped to the buffer.
    #[inline]
    pub fn options(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        let end = self.header_len().min(data.len());
        data.get(Self::HEADER_LEN..end).unwrap_or(&[])
    }

    /// Segment data after the header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        self.buffer.as_ref().get(self.header_len()..).unwrap_or(&[])
    }

    /// The MSS option value, if present and well formed (for MSS clamping).
    pub fn mss(&self) -> Option<u16> {
        mss_in(self.options()).map(|(_, v)| v)
    }

    /// True if the checksum over the whole buffer verifies, given the
    /// pseudo-header partial sum (length = buffer length).
    #[inline]
    pub fn verify_checksum(&self, pseudo_sum: u32) -> bool {
        checksum::fold(u32::from(checksum::fold(pseudo_sum)) + checksum::sum(self.buffer.as_ref()))
            == 0xffff
    }
}

/// Finds the MSS option: its offset within `opts` and its value.
fn mss_in(opts: &[u8]) -> Option<(usize, u16)> {
    let mut i = 0;
    while let Some(&kind) = opts.get(i) {
        match kind {
            OPT_END => return None,
            OPT_NOP => i += 1,
            _ => {
                let len = usize::from(*opts.get(i + 1)?);
                if len < 2 {
                    return None;
                }
                let opt = opts.get(i..i + len)?;
                if kind == OPT_MSS && len == 4 {
                    return Some((i, be16(&opt[2..4])));
                }
                i += len;
            }
        }
    }
    None
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
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

    /// Sets the sequence number.
    #[inline]
    pub fn set_seq_number(&mut self, value: u32) {
        self.buffer.as_mut()[field::SEQ_NUM].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the acknowledgment number.
    #[inline]
    pub fn set_ack_number(&mut self, value: u32) {
        self.buffer.as_mut()[field::ACK_NUM].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the header length in bytes (stored as data offset = `len / 4`).
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        let b = &mut self.buffer.as_mut()[field::DATA_OFF];
        *b = (*b & 0x0f) | (((len / 4) as u8) << 4);
    }

    /// Sets all eight flag bits.
    #[inline]
    pub fn set_flags(&mut self, value: u8) {
        self.buffer.as_mut()[field::FLAGS] = value;
    }

    #[inline]
    fn set_flag(&mut self, mask: u8, on: bool) {
        let f = self.flags();
        self.set_flags(if on { f | mask } else { f & !mask });
    }

    /// Sets or clears FIN.
    #[inline]
    pub fn set_fin(&mut self, on: bool) {
        self.set_flag(flags::FIN, on);
    }

    /// Sets or clears SYN.
    #[inline]
    pub fn set_syn(&mut self, on: bool) {
        self.set_flag(flags::SYN, on);
    }

    /// Sets or clears RST.
    #[inline]
    pub fn set_rst(&mut self, on: bool) {
        self.set_flag(flags::RST, on);
    }

    /// Sets or clears PSH.
    #[inline]
    pub fn set_psh(&mut self, on: bool) {
        self.set_flag(flags::PSH, on);
    }

    /// Sets or clears ACK.
    #[inline]
    pub fn set_ack(&mut self, on: bool) {
        self.set_flag(flags::ACK, on);
    }

    /// Sets or clears URG.
    #[inline]
    pub fn set_urg(&mut self, on: bool) {
        self.set_flag(flags::URG, on);
    }

    /// Sets the window size.
    #[inline]
    pub fn set_window_len(&mut self, value: u16) {
        self.buffer.as_mut()[field::WIN_SIZE].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the stored checksum.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the urgent pointer.
    #[inline]
    pub fn set_urgent_at(&mut self, value: u16) {
        self.buffer.as_mut()[field::URGENT].copy_from_slice(&value.to_be_bytes());
    }

    /// Computes and stores the checksum given the pseudo-header partial sum.
    #[inline]
    pub fn fill_checksum(&mut self, pseudo_sum: u32) {
        self.set_checksum(0);
        let c = !checksum::fold(
            u32::from(checksum::fold(pseudo_sum)) + checksum::sum(self.buffer.as_ref()),
        );
        self.set_checksum(c);
    }

    /// Lowers the MSS option to `max` if it is larger, patching the checksum
    /// incrementally. Returns true if the option was rewritten.
    pub fn clamp_mss(&mut self, max: u16) -> bool {
        let Some((at, mss)) = mss_in(self.options()) else {
            return false;
        };
        if mss <= max {
            return false;
        }
        let c = self.checksum();
        let pos = Self::HEADER_LEN + at + 2;
        // Options start at an even offset (20), so an MSS value at an odd
        // offset straddles two checksum words; update the aligned pair(s).
        let b = self.buffer.as_mut();
        let c = if pos % 2 == 0 {
            checksum::update16(c, mss, max)
        } else {
            let w0 = be16(&b[pos - 1..pos + 1]);
            // The word after may be cut short by an odd buffer end: the
            // checksum pads it with zero, and so do we.
            let w1 = u16::from_be_bytes([b[pos + 1], b.get(pos + 2).copied().unwrap_or(0)]);
            let [hi, lo] = max.to_be_bytes();
            let n0 = (w0 & 0xff00) | u16::from(hi);
            let n1 = (u16::from(lo) << 8) | (w1 & 0x00ff);
            checksum::update16(checksum::update16(c, w0, n0), w1, n1)
        };
        b[pos..pos + 2].copy_from_slice(&max.to_be_bytes());
        self.set_checksum(c);
        true
    }

    /// Mutable segment data after the header.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        self.buffer.as_mut().get_mut(start..).unwrap_or(&mut [])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv4::Ipv4Packet;
    use proptest::prelude::*;

    /// SYN 192.168.1.100:54321 -> 93.184.216.34:443, seq 0x12345678,
    /// window 64240, options MSS 1460, SACK-permitted, timestamps, NOP, WS 7.
    static SYN: [u8; 60] = [
        0x45, 0x00, 0x00, 0x3c, 0x00, 0x00, 0x40, 0x00, 0x40, 0x06, 0x42, 0xd5, 0xc0, 0xa8, 0x01,
        0x64, 0x5d, 0xb8, 0xd8, 0x22, // IPv4
        0xd4, 0x31, 0x01, 0xbb, 0x12, 0x34, 0x56, 0x78, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, 0xfa,
        0xf0, 0x3f, 0xf5, 0x00, 0x00, // TCP
        0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a, 0x00, 0x12, 0xd6, 0x87, 0x00, 0x00, 0x00,
        0x00, 0x01, 0x03, 0x03, 0x07, // options
    ];

    fn pseudo(ip: &Ipv4Packet<&[u8]>) -> u32 {
        checksum::pseudo_v4(ip.src_addr(), ip.dst_addr(), 6, ip.payload().len() as u16)
    }

    #[test]
    fn syn_both_ways() {
        let ip = Ipv4Packet::new_checked(&SYN[..]).unwrap();
        assert!(ip.verify_checksum());
        let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
        assert_eq!((tcp.src_port(), tcp.dst_port()), (54321, 443));
        assert_eq!((tcp.seq_number(), tcp.ack_number()), (0x1234_5678, 0));
        assert_eq!(tcp.header_len(), 40);
        assert!(tcp.syn() && !tcp.ack() && !tcp.fin() && !tcp.rst() && !tcp.psh() && !tcp.urg());
        assert_eq!(tcp.flags(), flags::SYN);
        assert_eq!(tcp.window_len(), 64240);
        assert_eq!(tcp.checksum(), 0x3ff5);
        assert_eq!(tcp.urgent_at(), 0);
        assert_eq!(tcp.options(), &SYN[40..]);
        assert!(tcp.payload().is_empty());
        assert_eq!(tcp.mss(), Some(1460));
        assert!(tcp.verify_checksum(pseudo(&ip)));

        let mut buf = [0u8; 40];
        buf[20..].copy_from_slice(&SYN[40..]);
        let mut t = TcpPacket::new_unchecked(&mut buf[..]);
        t.set_src_port(54321);
        t.set_dst_port(443);
        t.set_seq_number(0x1234_5678);
        t.set_ack_number(0);
        t.set_header_len(40);
        t.set_syn(true);
        t.set_window_len(64240);
        t.set_urgent_at(0);
        t.fill_checksum(pseudo(&ip));
        assert_eq!(&buf[..], &SYN[20..]);
    }

    #[test]
    fn flags_and_mss_clamp() {
        let mut buf = SYN;
        let ph = pseudo(&Ipv4Packet::new_checked(&SYN[..]).unwrap());
        let mut t = TcpPacket::new_checked(&mut buf[20..]).unwrap();
        assert!(t.clamp_mss(1400));
        assert_eq!(t.mss(), Some(1400));
        assert!(t.verify_checksum(ph));
        assert!(!t.clamp_mss(1400));
        macro_rules! flag {
            ($set:ident, $mask:expr) => {
                t.$set(true);
                assert_eq!(t.flags() & $mask, $mask);
                t.$set(false);
                assert_eq!(t.flags(), flags::SYN);
            };
        }
        flag!(set_fin, flags::FIN);
        flag!(set_rst, flags::RST);
        flag!(set_psh, flags::PSH);
        flag!(set_ack, flags::ACK);
        flag!(set_urg, flags::URG);
        t.payload_mut();
        // MSS at an odd offset: NOP first.
        let mut seg = [0u8; 28];
        seg[12] = 0x70;
        seg[20..28].copy_from_slice(&[1, 2, 4, 0x23, 0x45, 1, 1, 0]);
        let mut t = TcpPacket::new_checked(&mut seg[..]).unwrap();
        t.fill_checksum(0x55);
        assert_eq!(t.mss(), Some(0x2345));
        assert!(t.clamp_mss(1220));
        assert_eq!(t.mss(), Some(1220));
        assert!(t.verify_checksum(0x55));
    }

    #[test]
    fn errors() {
        let e = |b: &[u8]| TcpPacket::new_checked(b).unwrap_err();
        assert_eq!(e(&SYN[20..39]), Error::Truncated);
        let mut off4 = SYN;
        off4[32] = 0x40;
        assert_eq!(e(&off4[20..]), Error::BadHeaderLen);
        assert_eq!(e(&SYN[20..59]), Error::Truncated);
        let mut off15 = SYN;
        off15[32] = 0xf0;
        assert_eq!(e(&off15[20..]), Error::Truncated);
    }

    proptest! {
        #[test]
        fn arbitrary_never_panics(mut data in proptest::collection::vec(any::<u8>(), 0..200), max in any::<u16>()) {
            if let Ok(mut t) = TcpPacket::new_checked(&mut data[..]) {
                let _ = (t.src_port(), t.dst_port(), t.seq_number(), t.ack_number(), t.header_len());
                let _ = (t.flags(), t.fin(), t.syn(), t.rst(), t.psh(), t.ack(), t.urg());
                let _ = (t.window_len(), t.checksum(), t.urgent_at(), t.mss());
                prop_assert_eq!(t.options().len() + t.payload().len() + 20, t.buffer.len());
                t.fill_checksum(77);
                t.clamp_mss(max);
                prop_assert!(t.verify_checksum(77));
                let _ = t.payload_mut();
            }
        }
    }
}
