//! IPv4 header (RFC 791).

use crate::checksum;
use crate::util::{be16, be32};
use crate::{Error, Result};

mod field {
    use core::ops::Range;
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: Range<usize> = 2..4;
    pub const IDENT: Range<usize> = 4..6;
    pub const FLG_OFF: Range<usize> = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Range<usize> = 10..12;
    pub const SRC_ADDR: Range<usize> = 12..16;
    pub const DST_ADDR: Range<usize> = 16..20;
}

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// Option kinds (RFC 791, RFC 2113).
mod option {
    pub const END: u8 = 0;
    pub const NOP: u8 = 1;
    pub const RECORD_ROUTE: u8 = 7;
    pub const TIMESTAMP: u8 = 68;
    pub const LSRR: u8 = 131;
    pub const SSRR: u8 = 137;
    pub const ROUTER_ALERT: u8 = 148;
}

/// What a header's options hold, once [`check_options`] found them well formed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OptionSummary {
    /// Loose or strict source route (RFC 791 §3.1): dropped by default (RFC 7126 §4.3, 4.4).
    pub source_route: bool,
    /// Record Route.
    pub record_route: bool,
    /// Internet Timestamp.
    pub timestamp: bool,
    /// Router Alert (RFC 2113).
    pub router_alert: bool,
}

/// Check the option area of a header (the bytes after the fixed 20) as Linux's
/// `ip_options_compile` does: End stops, NOP is one byte, every other option needs a
/// length ≥ 2 inside the area; Record Route and the source routes need length ≥ 3 and
/// pointer ≥ 4, Timestamp length ≥ 4 and pointer ≥ 5; two source routes are an error.
/// `Err(k)` is the offset, within `opts`, of the first bad octet: the pointer of an ICMP
/// Parameter Problem is `20 + k`.
pub fn check_options(opts: &[u8]) -> core::result::Result<OptionSummary, usize> {
    let mut s = OptionSummary::default();
    let mut i = 0;
    // Bounded by the area (≤ 40 bytes); every step advances by ≥ 1.
    while let Some(&kind) = opts.get(i) {
        match kind {
            option::END => break,
            option::NOP => {
                i += 1;
                continue;
            }
            _ => {}
        }
        let len = match opts.get(i + 1) {
            Some(&l) => usize::from(l),
            None => return Err(i),
        };
        if len < 2 || i + len > opts.len() {
            return Err(i);
        }
        let ptr = opts.get(i + 2).copied().unwrap_or(0);
        match kind {
            option::RECORD_ROUTE | option::LSRR | option::SSRR => {
                if len < 3 {
                    return Err(i + 1);
                }
                if ptr < 4 {
                    return Err(i + 2);
                }
                if kind == option::RECORD_ROUTE {
                    s.record_route = true;
                } else if s.source_route {
                    return Err(i);
                } else {
                    s.source_route = true;
                }
            }
            option::TIMESTAMP => {
                if len < 4 {
                    return Err(i + 1);
                }
                if ptr < 5 {
                    return Err(i + 2);
                }
                // Flags 0 (timestamps), 1 (address + timestamp), 3 (prespecified).
                if !matches!(opts.get(i + 3).map(|b| b & 0x0f), Some(0 | 1 | 3)) {
                    return Err(i + 3);
                }
                s.timestamp = true;
            }
            option::ROUTER_ALERT => s.router_alert = true,
            _ => {}
        }
        i += len;
    }
    Ok(s)
}

/// A read/write view of an IPv4 packet.
///
/// The buffer may extend past `total_len` (Ethernet padding); [`payload`]
/// stops at `total_len`.
///
/// [`payload`]: Ipv4Packet::payload
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Length of a header without options.
    pub const HEADER_LEN: usize = field::DST_ADDR.end;
    /// Length of a header with the maximum 40 bytes of options.
    pub const MAX_HEADER_LEN: usize = 60;

    /// Wraps `buffer` without validation; fixed-field accessors panic if it is
    /// shorter than 20 bytes.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Wraps `buffer` after checking, in order: at least 20 bytes
    /// ([`Error::Truncated`]), version 4 ([`Error::BadVersion`]), IHL ≥ 5
    /// ([`Error::BadHeaderLen`]), the buffer holds IHL×4 bytes
    /// ([`Error::Truncated`]), and IHL×4 ≤ total length ≤ buffer length
    /// ([`Error::BadTotalLen`]).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        let len = p.buffer.as_ref().len();
        if len < Self::HEADER_LEN {
            return Err(Error::Truncated);
        }
        if p.version() != 4 {
            return Err(Error::BadVersion);
        }
        let hlen = p.header_len();
        if hlen < Self::HEADER_LEN {
            return Err(Error::BadHeaderLen);
        }
        if len < hlen {
            return Err(Error::Truncated);
        }
        let total = usize::from(p.total_len());
        if total < hlen || total > len {
            return Err(Error::BadTotalLen);
        }
        Ok(p)
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version nibble (4 after validation).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL × 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// Differentiated services code point.
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }

    /// Explicit congestion notification bits.
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 0x03
    }

    /// Total length (header plus payload) in bytes.
    #[inline]
    pub fn total_len(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::LENGTH])
    }

    /// Identification.
    #[inline]
    pub fn ident(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::IDENT])
    }

    /// Don't Fragment flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        be16(&self.buffer.as_ref()[field::FLG_OFF]) & FLAG_DF != 0
    }

    /// More Fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        be16(&self.buffer.as_ref()[field::FLG_OFF]) & FLAG_MF != 0
    }

    /// Fragment offset in bytes (the 13-bit field × 8).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (be16(&self.buffer.as_ref()[field::FLG_OFF]) & OFFSET_MASK) << 3
    }

    /// True if this is a fragment (MF set or non-zero offset).
    #[inline]
    pub fn is_fragment(&self) -> bool {
        be16(&self.buffer.as_ref()[field::FLG_OFF]) & (FLAG_MF | OFFSET_MASK) != 0
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Upper-layer protocol number.
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// Header checksum as stored.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::CHECKSUM])
    }

    /// Source address, host order.
    #[inline]
    pub fn src_addr(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::SRC_ADDR])
    }

    /// Destination address, host order.
    #[inline]
    pub fn dst_addr(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::DST_ADDR])
    }

    /// The header bytes (0..IHL×4), clamped to the buffer.
    #[inline]
    pub fn header(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        let end = self.header_len().min(data.len());
        &data[..end]
    }

    /// Option bytes (20..IHL×4); empty if there are none.
    #[inline]
    pub fn options(&self) -> &[u8] {
        self.header().get(Self::HEADER_LEN..).unwrap_or(&[])
    }

    /// Payload (IHL×4..total length), excluding link-layer padding.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        let end = usize::from(self.total_len()).min(data.len());
        data.get(self.header_len()..end).unwrap_or(&[])
    }

    /// True if the header checksum verifies. Always inlined: it is per packet on the
    /// forwarding path, and with several callers `#[inline]` alone left it a call.
    #[inline(always)]
    pub fn verify_checksum(&self) -> bool {
        match <&[u8; 20]>::try_from(self.header()) {
            Ok(h) => checksum::verify20(h),
            Err(_) => checksum::fold(checksum::sum(self.header())) == 0xffff,
        }
    }

    /// Walks the option TLVs: End (0) stops, NOP (1) is one byte, every other
    /// option needs a length ≥ 2 that stays inside the header, else
    /// [`Error::BadOption`].
    pub fn validate_options(&self) -> Result<()> {
        let opts = self.options();
        let mut i = 0;
        while let Some(&kind) = opts.get(i) {
            match kind {
                option::END => break,
                option::NOP => i += 1,
                _ => {
                    let len = match opts.get(i + 1) {
                        Some(&l) => usize::from(l),
                        None => return Err(Error::BadOption),
                    };
                    if len < 2 || i + len > opts.len() {
                        return Err(Error::BadOption);
                    }
                    i += len;
                }
            }
        }
        Ok(())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets the version nibble.
    #[inline]
    pub fn set_version(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0x0f) | (value << 4);
    }

    /// Sets the header length in bytes (stored as IHL = `len / 4`).
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0xf0) | ((len / 4) as u8 & 0x0f);
    }

    /// Sets the DSCP (6 bits).
    #[inline]
    pub fn set_dscp(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[field::DSCP_ECN];
        *b = (*b & 0x03) | (value << 2);
    }

    /// Sets the ECN bits (2 bits).
    #[inline]
    pub fn set_ecn(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[field::DSCP_ECN];
        *b = (*b & 0xfc) | (value & 0x03);
    }

    /// Sets the total length.
    #[inline]
    pub fn set_total_len(&mut self, value: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the identification.
    #[inline]
    pub fn set_ident(&mut self, value: u16) {
        self.buffer.as_mut()[field::IDENT].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets flags and fragment offset at once; `offset` is in bytes (multiple of 8).
    #[inline]
    pub fn set_flags_frag(&mut self, dont_frag: bool, more_frags: bool, offset: u16) {
        let v = if dont_frag { FLAG_DF } else { 0 }
            | if more_frags { FLAG_MF } else { 0 }
            | ((offset >> 3) & OFFSET_MASK);
        self.buffer.as_mut()[field::FLG_OFF].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets or clears Don't Fragment.
    #[inline]
    pub fn set_dont_frag(&mut self, value: bool) {
        self.set_flags_frag(value, self.more_frags(), self.frag_offset());
    }

    /// Sets or clears More Fragments.
    #[inline]
    pub fn set_more_frags(&mut self, value: bool) {
        self.set_flags_frag(self.dont_frag(), value, self.frag_offset());
    }

    /// Sets the fragment offset in bytes (multiple of 8).
    #[inline]
    pub fn set_frag_offset(&mut self, offset: u16) {
        self.set_flags_frag(self.dont_frag(), self.more_frags(), offset);
    }

    /// Sets the time to live.
    #[inline]
    pub fn set_ttl(&mut self, value: u8) {
        self.buffer.as_mut()[field::TTL] = value;
    }

    /// Sets the protocol number.
    #[inline]
    pub fn set_protocol(&mut self, value: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = value;
    }

    /// Sets the stored checksum.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the source address (host order).
    #[inline]
    pub fn set_src_addr(&mut self, addr: u32) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&addr.to_be_bytes());
    }

    /// Sets the destination address (host order).
    #[inline]
    pub fn set_dst_addr(&mut self, addr: u32) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&addr.to_be_bytes());
    }

    /// Recomputes the header checksum over IHL×4 bytes.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.header());
        self.set_checksum(c);
    }

    /// Decrements the TTL by one and patches the checksum incrementally
    /// (RFC 1624). A TTL of 0 is left alone; forwarders check `ttl() <= 1`
    /// before calling this.
    #[inline]
    pub fn decrement_ttl(&mut self) {
        let b = self.buffer.as_ref();
        let ttl = b[field::TTL];
        if ttl == 0 {
            return;
        }
        // HC' = HC + 0x0100 with end-around carry, as Linux's ip_decrease_ttl. Where a full
        // computation gives 0x0000 (the other words sum to 0xFFFF), this gives 0xFFFF, the
        // other ones'-complement zero (RFC 1624 §3): receivers accept both, and the sum is
        // one add.
        let c = u32::from(self.checksum()) + 0x0100;
        let c = (c + (c >> 16)) as u16;
        self.set_ttl(ttl - 1);
        self.set_checksum(c);
    }

    /// Mutable payload (IHL×4..total length), clamped to the buffer.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        let data = self.buffer.as_mut();
        let end = usize::from(be16(&data[field::LENGTH])).min(data.len());
        data.get_mut(start..end).unwrap_or(&mut [])
    }
}

/// A parsed IPv4 header without options, fragmentation or ECN details.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source address, host order.
    pub src: u32,
    /// Destination address, host order.
    pub dst: u32,
    /// Upper-layer protocol.
    pub protocol: u8,
    /// Payload length in bytes (total length − header length).
    pub payload_len: usize,
    /// Time to live.
    pub ttl: u8,
    /// The whole DSCP/ECN byte.
    pub dscp_ecn: u8,
    /// Identification.
    pub ident: u16,
    /// Don't Fragment flag.
    pub dont_frag: bool,
}

impl Ipv4Repr {
    /// Parses a validated packet; a bad header checksum is [`Error::BadChecksum`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv4Packet<T>) -> Result<Self> {
        if !packet.verify_checksum() {
            return Err(Error::BadChecksum);
        }
        Ok(Ipv4Repr {
            src: packet.src_addr(),
            dst: packet.dst_addr(),
            protocol: packet.protocol(),
            payload_len: usize::from(packet.total_len()).saturating_sub(packet.header_len()),
            ttl: packet.ttl(),
            dscp_ecn: packet.buffer.as_ref()[field::DSCP_ECN],
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
        })
    }

    /// Bytes of header [`Ipv4Repr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        Ipv4Packet::<&[u8]>::HEADER_LEN
    }

    /// Writes a 20-byte header with a valid checksum. Fails with
    /// [`Error::Truncated`] on a buffer shorter than 20 bytes and
    /// [`Error::BadTotalLen`] if the payload does not fit a 16-bit total length.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv4Packet<T>) -> Result<()> {
        if packet.buffer.as_ref().len() < self.buffer_len() {
            return Err(Error::Truncated);
        }
        let total =
            u16::try_from(self.buffer_len() + self.payload_len).map_err(|_| Error::BadTotalLen)?;
        let b = packet.buffer.as_mut();
        b[field::VER_IHL] = 0x45;
        b[field::DSCP_ECN] = self.dscp_ecn;
        packet.set_total_len(total);
        packet.set_ident(self.ident);
        packet.set_flags_frag(self.dont_frag, false, 0);
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src_addr(self.src);
        packet.set_dst_addr(self.dst);
        packet.fill_checksum();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::icmpv4::{self, Icmpv4Packet};
    use proptest::prelude::*;

    /// ICMP echo request 192.168.1.100 -> 8.8.8.8, ident 0x1234 seq 1,
    /// 8 bytes of payload "abcdefgh", DF set, TTL 64.
    pub(crate) static PING: [u8; 36] = [
        0x45, 0x00, 0x00, 0x24, 0xbe, 0xef, 0x40, 0x00, 0x40, 0x01, 0xa9, 0xcd, 0xc0, 0xa8, 0x01,
        0x64, 0x08, 0x08, 0x08, 0x08, // IPv4
        0x08, 0x00, 0x54, 0x35, 0x12, 0x34, 0x00, 0x01, // ICMP echo header
        0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68,
    ];

    fn ping_repr() -> Ipv4Repr {
        Ipv4Repr {
            src: 0xc0a8_0164,
            dst: 0x0808_0808,
            protocol: 1,
            payload_len: 16,
            ttl: 64,
            dscp_ecn: 0,
            ident: 0xbeef,
            dont_frag: true,
        }
    }

    #[test]
    fn parse_ping() {
        let p = Ipv4Packet::new_checked(&PING[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!((p.dscp(), p.ecn()), (0, 0));
        assert_eq!(p.total_len(), 36);
        assert_eq!(p.ident(), 0xbeef);
        assert!(p.dont_frag() && !p.more_frags() && !p.is_fragment());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), 1);
        assert_eq!(p.checksum(), 0xa9cd);
        assert_eq!(p.src_addr(), 0xc0a8_0164);
        assert_eq!(p.dst_addr(), 0x0808_0808);
        assert!(p.options().is_empty());
        assert_eq!(p.payload(), &PING[20..]);
        assert!(p.verify_checksum());
        assert_eq!(p.validate_options(), Ok(()));
        assert_eq!(Ipv4Repr::parse(&p).unwrap(), ping_repr());

        let icmp = Icmpv4Packet::new_checked(p.payload()).unwrap();
        assert_eq!(icmp.msg_type(), icmpv4::msg_type::ECHO_REQUEST);
        assert!(icmp.verify_checksum());
    }

    #[test]
    fn emit_ping() {
        let mut buf = [0u8; 36];
        buf[20..].copy_from_slice(&PING[20..]);
        ping_repr()
            .emit(&mut Ipv4Packet::new_unchecked(&mut buf[..]))
            .unwrap();
        assert_eq!(buf, PING);
        let mut short = [0u8; 19];
        assert_eq!(
            ping_repr().emit(&mut Ipv4Packet::new_unchecked(&mut short[..])),
            Err(Error::Truncated)
        );
        let huge = Ipv4Repr {
            payload_len: 65516,
            ..ping_repr()
        };
        assert_eq!(
            huge.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..])),
            Err(Error::BadTotalLen)
        );
    }

    #[test]
    fn padding_and_mutation() {
        // Minimum Ethernet payload is 46 bytes: padding after total_len.
        let mut buf = [0u8; 46];
        buf[..36].copy_from_slice(&PING);
        let mut p = Ipv4Packet::new_checked(&mut buf[..]).unwrap();
        assert_eq!(p.payload().len(), 16);
        p.decrement_ttl();
        assert_eq!(p.ttl(), 63);
        assert!(p.verify_checksum());
        p.set_flags_frag(false, true, 1480);
        assert!(p.more_frags() && !p.dont_frag() && p.is_fragment());
        assert_eq!(p.frag_offset(), 1480);
        p.set_dont_frag(true);
        p.set_more_frags(false);
        p.set_frag_offset(8);
        assert!(p.dont_frag() && !p.more_frags());
        assert_eq!(p.frag_offset(), 8);
        p.set_dscp(46);
        p.set_ecn(2);
        assert_eq!((p.dscp(), p.ecn()), (46, 2));
        assert!(!p.verify_checksum());
        p.fill_checksum();
        let old = p.src_addr();
        let c = crate::checksum::update32(p.checksum(), old, 0x0a00_0001);
        p.set_src_addr(0x0a00_0001);
        p.set_checksum(c);
        assert!(p.verify_checksum());
        p.payload_mut()[0] = 0;
        // Setters may break invariants; accessors clamp instead of panicking.
        p.set_total_len(9999);
        assert_eq!(p.payload().len(), 26);
        p.set_header_len(60);
        assert!(p.payload().is_empty());
        assert_eq!(p.options().len(), 26);
        let _ = p.validate_options();
        p.payload_mut();
    }

    #[test]
    fn ttl_zero_untouched() {
        let mut buf = PING;
        buf[8] = 0;
        let mut p = Ipv4Packet::new_unchecked(&mut buf[..]);
        p.fill_checksum();
        let c = p.checksum();
        p.decrement_ttl();
        assert_eq!((p.ttl(), p.checksum()), (0, c));
    }

    #[test]
    fn errors() {
        let e = |b: &[u8]| Ipv4Packet::new_checked(b).unwrap_err();
        assert_eq!(e(&PING[..19]), Error::Truncated);
        let mut v6 = PING;
        v6[0] = 0x65;
        assert_eq!(e(&v6), Error::BadVersion);
        let mut ihl4 = PING;
        ihl4[0] = 0x44;
        assert_eq!(e(&ihl4), Error::BadHeaderLen);
        let mut ihl15 = PING;
        ihl15[0] = 0x4f;
        assert_eq!(e(&ihl15), Error::Truncated);
        assert_eq!(e(&PING[..35]), Error::BadTotalLen);
        let mut short_total = PING;
        short_total[3] = 19;
        assert_eq!(e(&short_total), Error::BadTotalLen);
        let mut bad_sum = PING;
        bad_sum[11] ^= 1;
        let p = Ipv4Packet::new_checked(&bad_sum[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p), Err(Error::BadChecksum));
    }

    fn with_options(opts: &[u8]) -> Vec<u8> {
        let hlen = 20 + opts.len();
        let mut v = PING[..20].to_vec();
        v[0] = 0x40 | (hlen / 4) as u8;
        v[3] = hlen as u8;
        v.extend_from_slice(opts);
        v
    }

    #[test]
    fn options_are_checked_like_linux_does() {
        assert_eq!(check_options(&[]), Ok(OptionSummary::default()));
        assert_eq!(
            check_options(&[0x94, 4, 0, 0]).map(|s| s.router_alert),
            Ok(true)
        );
        // LSRR with one hop, then NOPs and End.
        let lsrr = [131, 7, 4, 192, 0, 2, 1, 1, 0];
        assert_eq!(check_options(&lsrr).map(|s| s.source_route), Ok(true));
        assert_eq!(
            check_options(&[137, 3, 4, 0]).map(|s| s.source_route),
            Ok(true)
        );
        // Record Route, Timestamp: fine.
        let s = check_options(&[7, 7, 4, 0, 0, 0, 0, 68, 8, 5, 0, 0, 0, 0, 0]).unwrap();
        assert!(s.record_route && s.timestamp && !s.source_route);
        // Errors point at the bad octet.
        assert_eq!(check_options(&[7]), Err(0), "no length byte");
        assert_eq!(check_options(&[1, 7, 1]), Err(1), "length below 2");
        assert_eq!(check_options(&[7, 9, 4, 0]), Err(0), "length past the area");
        assert_eq!(check_options(&[7, 3, 3, 0]), Err(2), "RR pointer below 4");
        assert_eq!(check_options(&[68, 4, 4, 0]), Err(2), "TS pointer below 5");
        assert_eq!(check_options(&[68, 4, 5, 2]), Err(3), "TS flag 2");
        assert_eq!(
            check_options(&[131, 3, 4, 137, 3, 4]),
            Err(3),
            "two source routes"
        );
        // Nothing panics.
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                let _ = check_options(&[a, b, a, b]);
                let _ = check_options(&[a, b]);
            }
        }
    }

    #[test]
    fn options() {
        // Router Alert (RFC 2113): 94 04 00 00.
        let v = with_options(&[0x94, 0x04, 0x00, 0x00]);
        let p = Ipv4Packet::new_checked(&v[..]).unwrap();
        assert_eq!(p.options(), &[0x94, 0x04, 0x00, 0x00]);
        assert_eq!(p.validate_options(), Ok(()));
        // NOP, NOP, EOL padding, junk after EOL is ignored.
        let v = with_options(&[0x01, 0x01, 0x00, 0xff]);
        assert_eq!(
            Ipv4Packet::new_checked(&v[..]).unwrap().validate_options(),
            Ok(())
        );
        for bad in [
            [0x94, 0x01, 0, 0],
            [0x94, 0x05, 0, 0],
            [0x01, 0x01, 0x01, 0x83],
            [0x94, 0x00, 0, 0],
        ] {
            let v = with_options(&bad);
            assert_eq!(
                Ipv4Packet::new_checked(&v[..]).unwrap().validate_options(),
                Err(Error::BadOption),
                "{bad:x?}"
            );
        }
    }

    proptest! {
        #[test]
        fn ttl_decrement_equals_full_recompute(mut h in proptest::array::uniform20(any::<u8>()), ttl in 1u8..=255) {
            h[0] = 0x45;
            h[2..4].copy_from_slice(&20u16.to_be_bytes());
            h[8] = ttl;
            let mut p = Ipv4Packet::new_checked(&mut h[..]).unwrap();
            p.fill_checksum();
            p.decrement_ttl();
            prop_assert!(p.verify_checksum());
            let incremental = p.checksum();
            p.fill_checksum();
            let full = p.checksum();
            // Equal, or the two encodings of ones'-complement zero.
            prop_assert!(incremental == full || (incremental == 0xffff && full == 0), "{incremental:#x} vs {full:#x}");
        }
    }

    proptest! {
        #[test]
        fn arbitrary_never_panics(mut data in proptest::collection::vec(any::<u8>(), 0..200), fix in any::<bool>()) {
            if fix && data.len() >= 20 {
                // Steer towards valid headers so the accessors get exercised.
                data[0] = 0x40 | (data[0] & 0x0f).max(5);
                let total = (data.len() as u16).min(u16::from(data[3]) + 60);
                data[2..4].copy_from_slice(&total.to_be_bytes());
            }
            if let Ok(mut p) = Ipv4Packet::new_checked(&mut data[..]) {
                let _ = (p.version(), p.header_len(), p.dscp(), p.ecn(), p.total_len(), p.ident());
                let _ = (p.dont_frag(), p.more_frags(), p.frag_offset(), p.is_fragment(), p.ttl());
                let _ = (p.protocol(), p.checksum(), p.src_addr(), p.dst_addr());
                prop_assert!(p.options().len() <= 40);
                prop_assert_eq!(p.payload().len(), usize::from(p.total_len()) - p.header_len());
                let _ = (p.verify_checksum(), p.validate_options(), Ipv4Repr::parse(&p));
                p.decrement_ttl();
                p.fill_checksum();
                prop_assert!(p.verify_checksum());
                let _ = p.payload_mut();
            }
        }
    }
}
