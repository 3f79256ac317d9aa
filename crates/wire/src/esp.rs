//! ESP header (RFC 4303): the cleartext SPI and sequence number.

use crate::util::be32;
use crate::{Error, Result};

mod field {
    use core::ops::Range;
    pub const SPI: Range<usize> = 0..4;
    pub const SEQ: Range<usize> = 4..8;
    pub const PAYLOAD: usize = 8;
}

/// A read/write view of an ESP packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EspPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EspPacket<T> {
    /// Length of the cleartext header (SPI and sequence number).
    pub const HEADER_LEN: usize = field::PAYLOAD;

    /// Wraps `buffer` without validation; accessors panic if it is shorter than 8 bytes.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        EspPacket { buffer }
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

    /// Security Parameters Index.
    #[inline]
    pub fn spi(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::SPI])
    }

    /// Sequence number (low 32 bits when ESN is in use).
    #[inline]
    pub fn sequence_number(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::SEQ])
    }

    /// Everything after the header: IV, ciphertext, padding, trailer and ICV.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EspPacket<T> {
    /// Sets the SPI.
    #[inline]
    pub fn set_spi(&mut self, value: u32) {
        self.buffer.as_mut()[field::SPI].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the sequence number.
    #[inline]
    pub fn set_sequence_number(&mut self, value: u32) {
        self.buffer.as_mut()[field::SEQ].copy_from_slice(&value.to_be_bytes());
    }

    /// Mutable access to everything after the header.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    static ESP: [u8; 12] = [
        0x00, 0x00, 0x10, 0x01, 0x00, 0x00, 0x00, 0x2a, 0xde, 0xad, 0xbe, 0xef,
    ];

    #[test]
    fn both_ways() {
        let p = EspPacket::new_checked(&ESP[..]).unwrap();
        assert_eq!((p.spi(), p.sequence_number()), (0x1001, 42));
        assert_eq!(p.payload(), &[0xde, 0xad, 0xbe, 0xef]);
        let mut buf = [0u8; 12];
        let mut q = EspPacket::new_unchecked(&mut buf[..]);
        q.set_spi(0x1001);
        q.set_sequence_number(42);
        q.payload_mut().copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(q.into_inner(), &ESP[..]);
        assert_eq!(
            EspPacket::new_checked(&ESP[..7]).unwrap_err(),
            Error::Truncated
        );
    }

    proptest! {
        #[test]
        fn arbitrary_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(p) = EspPacket::new_checked(&data[..]) {
                let _ = (p.spi(), p.sequence_number(), p.payload().len());
            }
        }
    }
}
