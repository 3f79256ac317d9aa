//! ICMP for IPv4 (RFC 792, RFC 1191).

use crate::checksum;
use crate::util::{be16, be32};
use crate::{Error, Result};

/// ICMPv4 message types.
pub mod msg_type {
    /// Echo Reply.
    pub const ECHO_REPLY: u8 = 0;
    /// Destination Unreachable (codes in [`super::dst_unreachable`]).
    pub const DST_UNREACHABLE: u8 = 3;
    /// Echo Request.
    pub const ECHO_REQUEST: u8 = 8;
    /// Time Exceeded (codes in [`super::time_exceeded`]).
    pub const TIME_EXCEEDED: u8 = 11;
    /// Parameter Problem.
    pub const PARAM_PROBLEM: u8 = 12;
    /// Source Quench (deprecated, RFC 6633; still an error message).
    pub const SOURCE_QUENCH: u8 = 4;
    /// Redirect.
    pub const REDIRECT: u8 = 5;

    /// Whether `t` is an error message (it quotes the packet it is about, RFC 792): never
    /// answered with another error, and matched to the flow it quotes.
    pub const fn is_error(t: u8) -> bool {
        matches!(
            t,
            DST_UNREACHABLE | SOURCE_QUENCH | REDIRECT | TIME_EXCEEDED | PARAM_PROBLEM
        )
    }
}

/// Codes for [`msg_type::DST_UNREACHABLE`].
pub mod dst_unreachable {
    /// Network unreachable.
    pub const NET: u8 = 0;
    /// Host unreachable.
    pub const HOST: u8 = 1;
    /// Protocol unreachable.
    pub const PROTO: u8 = 2;
    /// Port unreachable.
    pub const PORT: u8 = 3;
    /// Fragmentation needed and DF set (carries the next-hop MTU).
    pub const FRAG_NEEDED: u8 = 4;
    /// Communication administratively prohibited.
    pub const ADMIN: u8 = 13;
}

/// Codes for [`msg_type::TIME_EXCEEDED`].
pub mod time_exceeded {
    /// TTL exceeded in transit.
    pub const TTL: u8 = 0;
    /// Fragment reassembly time exceeded.
    pub const REASSEMBLY: u8 = 1;
}

mod field {
    use core::ops::Range;
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Range<usize> = 2..4;
    pub const REST: Range<usize> = 4..8;
    pub const ECHO_IDENT: Range<usize> = 4..6;
    pub const ECHO_SEQ: Range<usize> = 6..8;
    pub const MTU: Range<usize> = 6..8;
    pub const POINTER: usize = 4;
    pub const PAYLOAD: usize = 8;
}

/// A read/write view of an ICMPv4 message; the buffer is the whole message
/// (the IPv4 payload), which the checksum covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Icmpv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    /// Length of the ICMP header (type, code, checksum, rest of header).
    pub const HEADER_LEN: usize = field::PAYLOAD;

    /// Wraps `buffer` without validation; accessors panic if it is shorter than 8 bytes.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Icmpv4Packet { buffer }
    }

    /// Wraps `buffer`, checking it holds the 8-byte header ([`Error::Truncated`]).
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

    /// Message type.
    #[inline]
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    /// Message code.
    #[inline]
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// Checksum as stored.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::CHECKSUM])
    }

    /// The four "rest of header" bytes as one word.
    #[inline]
    pub fn rest_of_header(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::REST])
    }

    /// Echo identifier (echo request/reply).
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::ECHO_IDENT])
    }

    /// Echo sequence number (echo request/reply).
    #[inline]
    pub fn echo_seq_no(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::ECHO_SEQ])
    }

    /// Next-hop MTU (type 3 code 4, RFC 1191).
    #[inline]
    pub fn next_hop_mtu(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::MTU])
    }

    /// Pointer to the offending octet (Parameter Problem).
    #[inline]
    pub fn pointer(&self) -> u8 {
        self.buffer.as_ref()[field::POINTER]
    }

    /// Data after the 8-byte header (echo data, or the quoted datagram of an error).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }

    /// True if the checksum over the whole message verifies.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::fold(checksum::sum(self.buffer.as_ref())) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    /// Sets the message type.
    #[inline]
    pub fn set_msg_type(&mut self, value: u8) {
        self.buffer.as_mut()[field::TYPE] = value;
    }

    /// Sets the message code.
    #[inline]
    pub fn set_msg_code(&mut self, value: u8) {
        self.buffer.as_mut()[field::CODE] = value;
    }

    /// Sets the stored checksum.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the four "rest of header" bytes.
    #[inline]
    pub fn set_rest_of_header(&mut self, value: u32) {
        self.buffer.as_mut()[field::REST].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the echo identifier.
    #[inline]
    pub fn set_echo_ident(&mut self, value: u16) {
        self.buffer.as_mut()[field::ECHO_IDENT].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the echo sequence number.
    #[inline]
    pub fn set_echo_seq_no(&mut self, value: u16) {
        self.buffer.as_mut()[field::ECHO_SEQ].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the next-hop MTU (type 3 code 4); the unused half stays as is.
    #[inline]
    pub fn set_next_hop_mtu(&mut self, value: u16) {
        self.buffer.as_mut()[field::MTU].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the Parameter Problem pointer.
    #[inline]
    pub fn set_pointer(&mut self, value: u8) {
        self.buffer.as_mut()[field::POINTER] = value;
    }

    /// Recomputes the checksum over the whole buffer.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(c);
    }

    /// Mutable data after the header.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Echo request, ident 0x1234, seq 1, data "abcdefgh".
    static ECHO: [u8; 16] = [
        0x08, 0x00, 0x54, 0x35, 0x12, 0x34, 0x00, 0x01, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67,
        0x68,
    ];

    /// Fragmentation needed, MTU 1400, quoting an IPv4 header + 8 bytes.
    static FRAG_NEEDED: [u8; 36] = [
        0x03, 0x04, 0x00, 0x00, 0x00, 0x00, 0x05, 0x78, // ICMP, checksum filled in test
        0x45, 0x00, 0x05, 0xdc, 0x00, 0x01, 0x40, 0x00, 0x3f, 0x06, 0x00, 0x00, 0x0a, 0x00, 0x00,
        0x01, 0xc0, 0xa8, 0x01, 0x64, // quoted IPv4
        0x04, 0xd2, 0x00, 0x50, 0x00, 0x00, 0x00, 0x01, // quoted TCP
    ];

    #[test]
    fn echo_both_ways() {
        let p = Icmpv4Packet::new_checked(&ECHO[..]).unwrap();
        assert_eq!(p.msg_type(), msg_type::ECHO_REQUEST);
        assert_eq!(p.msg_code(), 0);
        assert_eq!(p.checksum(), 0x5435);
        assert_eq!(p.echo_ident(), 0x1234);
        assert_eq!(p.echo_seq_no(), 1);
        assert_eq!(p.rest_of_header(), 0x1234_0001);
        assert_eq!(p.payload(), b"abcdefgh");
        assert!(p.verify_checksum());

        let mut buf = [0u8; 16];
        buf[8..].copy_from_slice(b"abcdefgh");
        let mut q = Icmpv4Packet::new_unchecked(&mut buf[..]);
        q.set_msg_type(msg_type::ECHO_REQUEST);
        q.set_msg_code(0);
        q.set_echo_ident(0x1234);
        q.set_echo_seq_no(1);
        q.fill_checksum();
        assert_eq!(buf, ECHO);

        // Turn it into a reply: type 8 -> 0 is an incremental update of word 0.
        let mut q = Icmpv4Packet::new_checked(&mut buf[..]).unwrap();
        let c = checksum::update16(q.checksum(), 0x0800, 0x0000);
        q.set_msg_type(msg_type::ECHO_REPLY);
        q.set_checksum(c);
        assert!(q.verify_checksum());
    }

    #[test]
    fn frag_needed() {
        let mut buf = FRAG_NEEDED;
        let mut p = Icmpv4Packet::new_checked(&mut buf[..]).unwrap();
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert_eq!(p.msg_type(), msg_type::DST_UNREACHABLE);
        assert_eq!(p.msg_code(), dst_unreachable::FRAG_NEEDED);
        assert_eq!(p.next_hop_mtu(), 1400);
        assert_eq!(p.payload().len(), 28);
        p.set_rest_of_header(0);
        p.set_next_hop_mtu(1280);
        p.set_pointer(0);
        assert_eq!(p.rest_of_header(), 1280);
        p.payload_mut()[0] = 0x46;
        assert!(!p.verify_checksum());
        p.set_msg_type(msg_type::PARAM_PROBLEM);
        p.set_pointer(20);
        assert_eq!(p.pointer(), 20);
    }

    #[test]
    fn errors() {
        assert_eq!(
            Icmpv4Packet::new_checked(&ECHO[..7]).unwrap_err(),
            Error::Truncated
        );
        assert!(Icmpv4Packet::new_checked(&ECHO[..8])
            .unwrap()
            .payload()
            .is_empty());
    }

    proptest! {
        #[test]
        fn arbitrary_never_panics(mut data in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(mut p) = Icmpv4Packet::new_checked(&mut data[..]) {
                let _ = (p.msg_type(), p.msg_code(), p.checksum(), p.rest_of_header());
                let _ = (p.echo_ident(), p.echo_seq_no(), p.next_hop_mtu(), p.pointer());
                let _ = (p.payload().len(), p.verify_checksum());
                p.fill_checksum();
                prop_assert!(p.verify_checksum());
            }
        }
    }
}
