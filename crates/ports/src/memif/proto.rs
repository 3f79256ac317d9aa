//! The memif 2.0 wire format: fixed 128-byte control messages and the layout of rings and
//! descriptors in shared memory. Field offsets follow the packed C structures of the
//! protocol (`memif.h` of libmemif / DPDK `net_memif`), in host byte order (both ends
//! share one machine).

/// Every control message is exactly this long (a 16-bit type, then a packed union).
pub(crate) const MSG_SIZE: usize = 128;
/// Version 2.0 as `major << 8 | minor`.
pub(crate) const VERSION: u16 = 0x0200;
/// Magic at the start of every ring.
pub(crate) const COOKIE: u32 = 0x3E31F20;
/// Length of the name fields.
pub(crate) const NAME_SIZE: usize = 32;
/// Length of the secret field (NUL-terminated, so at most 23 useful bytes).
pub(crate) const SECRET_SIZE: usize = 24;
/// Length of the disconnect reason.
pub(crate) const REASON_SIZE: usize = 96;

/// Ring header: cookie (u32) at 0, flags (u16) at 4, head (u16) at 6; tail (u16) on the
/// next cache line at 64; descriptors from 128.
pub(crate) const RING_COOKIE: usize = 0;
pub(crate) const RING_FLAGS: usize = 4;
pub(crate) const RING_HEAD: usize = 6;
pub(crate) const RING_TAIL: usize = 64;
pub(crate) const RING_DESC: usize = 128;
/// Receiver's ring flag: "I poll, do not signal my eventfd".
pub(crate) const RING_FLAG_MASK_INT: u16 = 1;
/// Descriptor: flags (u16) at 0, region (u16) at 2, length (u32) at 4, offset (u32) at 8,
/// metadata (u32) at 12.
pub(crate) const DESC_SIZE: usize = 16;
/// Descriptor flag: the frame continues in the next descriptor.
pub(crate) const DESC_FLAG_NEXT: u16 = 1;
/// ADD_RING flag: the ring carries client-to-server traffic (C2S, formerly S2M).
pub(crate) const ADD_RING_FLAG_C2S: u16 = 1;
/// Interface mode in INIT: Ethernet frames.
pub(crate) const MODE_ETHERNET: u8 = 0;
/// Largest ring we create or accept (as log2), as DPDK.
pub(crate) const MAX_LOG2_RING_SIZE: u8 = 14;

/// Bytes one ring of `2^log2` descriptors occupies.
pub(crate) fn ring_bytes(log2: u8) -> u64 {
    RING_DESC as u64 + (DESC_SIZE as u64) * (1u64 << log2.min(31))
}

/// Message types.
pub(crate) mod ty {
    pub const ACK: u16 = 1;
    pub const HELLO: u16 = 2;
    pub const INIT: u16 = 3;
    pub const ADD_REGION: u16 = 4;
    pub const ADD_RING: u16 = 5;
    pub const CONNECT: u16 = 6;
    pub const CONNECTED: u16 = 7;
    pub const DISCONNECT: u16 = 8;
}

/// One control message, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Msg {
    Ack,
    /// Server → client, first message: what the server supports. Ring counts are the
    /// highest ring *index* (0 = one ring).
    Hello {
        name: [u8; NAME_SIZE],
        min_version: u16,
        max_version: u16,
        max_region: u16,
        max_s2c_ring: u16,
        max_c2s_ring: u16,
        max_log2_ring_size: u8,
    },
    /// Client → server: which interface, mode and secret.
    Init {
        version: u16,
        id: u32,
        mode: u8,
        secret: [u8; SECRET_SIZE],
        name: [u8; NAME_SIZE],
    },
    /// Client → server, with the region's fd: a shared memory region.
    AddRegion {
        index: u16,
        size: u64,
    },
    /// Client → server, with the ring's eventfd: where a ring lives.
    AddRing {
        flags: u16,
        index: u16,
        region: u16,
        offset: u32,
        log2_ring_size: u8,
        private_hdr_size: u16,
    },
    /// Client → server: setup done.
    Connect {
        if_name: [u8; NAME_SIZE],
    },
    /// Server → client: connected.
    Connected {
        if_name: [u8; NAME_SIZE],
    },
    /// Either way: goodbye, with a reason.
    Disconnect {
        code: u32,
        reason: [u8; REASON_SIZE],
    },
}

/// Why a message could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// Not exactly `MSG_SIZE` bytes.
    Size,
    /// A type number the protocol does not define.
    UnknownType(u16),
}

/// Union payload starts after the 16-bit type.
const P: usize = 2;

fn u16_at(b: &[u8; MSG_SIZE], o: usize) -> u16 {
    u16::from_ne_bytes([b[P + o], b[P + o + 1]])
}
fn u32_at(b: &[u8; MSG_SIZE], o: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[P + o..P + o + 4]);
    u32::from_ne_bytes(a)
}
fn u64_at(b: &[u8; MSG_SIZE], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[P + o..P + o + 8]);
    u64::from_ne_bytes(a)
}
fn bytes_at<const N: usize>(b: &[u8; MSG_SIZE], o: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[P + o..P + o + N]);
    a
}
fn put(b: &mut [u8; MSG_SIZE], o: usize, v: &[u8]) {
    b[P + o..P + o + v.len()].copy_from_slice(v);
}

impl Msg {
    /// Decode a received message of `len` bytes held in `b`.
    pub(crate) fn decode(b: &[u8; MSG_SIZE], len: usize) -> Result<Msg, DecodeError> {
        if len != MSG_SIZE {
            return Err(DecodeError::Size);
        }
        let t = u16::from_ne_bytes([b[0], b[1]]);
        Ok(match t {
            ty::ACK => Msg::Ack,
            ty::HELLO => Msg::Hello {
                name: bytes_at(b, 0),
                min_version: u16_at(b, 32),
                max_version: u16_at(b, 34),
                max_region: u16_at(b, 36),
                max_s2c_ring: u16_at(b, 38),
                max_c2s_ring: u16_at(b, 40),
                max_log2_ring_size: b[P + 42],
            },
            ty::INIT => Msg::Init {
                version: u16_at(b, 0),
                id: u32_at(b, 2),
                mode: b[P + 6],
                secret: bytes_at(b, 7),
                name: bytes_at(b, 31),
            },
            ty::ADD_REGION => Msg::AddRegion {
                index: u16_at(b, 0),
                size: u64_at(b, 2),
            },
            ty::ADD_RING => Msg::AddRing {
                flags: u16_at(b, 0),
                index: u16_at(b, 2),
                region: u16_at(b, 4),
                offset: u32_at(b, 6),
                log2_ring_size: b[P + 10],
                private_hdr_size: u16_at(b, 11),
            },
            ty::CONNECT => Msg::Connect {
                if_name: bytes_at(b, 0),
            },
            ty::CONNECTED => Msg::Connected {
                if_name: bytes_at(b, 0),
            },
            ty::DISCONNECT => Msg::Disconnect {
                code: u32_at(b, 0),
                reason: bytes_at(b, 4),
            },
            other => return Err(DecodeError::UnknownType(other)),
        })
    }

    /// The 128 bytes on the wire.
    pub(crate) fn encode(&self) -> [u8; MSG_SIZE] {
        let mut b = [0u8; MSG_SIZE];
        let t = match self {
            Msg::Ack => ty::ACK,
            Msg::Hello {
                name,
                min_version,
                max_version,
                max_region,
                max_s2c_ring,
                max_c2s_ring,
                max_log2_ring_size,
            } => {
                put(&mut b, 0, name);
                put(&mut b, 32, &min_version.to_ne_bytes());
                put(&mut b, 34, &max_version.to_ne_bytes());
                put(&mut b, 36, &max_region.to_ne_bytes());
                put(&mut b, 38, &max_s2c_ring.to_ne_bytes());
                put(&mut b, 40, &max_c2s_ring.to_ne_bytes());
                put(&mut b, 42, &[*max_log2_ring_size]);
                ty::HELLO
            }
            Msg::Init {
                version,
                id,
                mode,
                secret,
                name,
            } => {
                put(&mut b, 0, &version.to_ne_bytes());
                put(&mut b, 2, &id.to_ne_bytes());
                put(&mut b, 6, &[*mode]);
                put(&mut b, 7, secret);
                put(&mut b, 31, name);
                ty::INIT
            }
            Msg::AddRegion { index, size } => {
                put(&mut b, 0, &index.to_ne_bytes());
                put(&mut b, 2, &size.to_ne_bytes());
                ty::ADD_REGION
            }
            Msg::AddRing {
                flags,
                index,
                region,
                offset,
                log2_ring_size,
                private_hdr_size,
            } => {
                put(&mut b, 0, &flags.to_ne_bytes());
                put(&mut b, 2, &index.to_ne_bytes());
                put(&mut b, 4, &region.to_ne_bytes());
                put(&mut b, 6, &offset.to_ne_bytes());
                put(&mut b, 10, &[*log2_ring_size]);
                put(&mut b, 11, &private_hdr_size.to_ne_bytes());
                ty::ADD_RING
            }
            Msg::Connect { if_name } => {
                put(&mut b, 0, if_name);
                ty::CONNECT
            }
            Msg::Connected { if_name } => {
                put(&mut b, 0, if_name);
                ty::CONNECTED
            }
            Msg::Disconnect { code, reason } => {
                put(&mut b, 0, &code.to_ne_bytes());
                put(&mut b, 4, reason);
                ty::DISCONNECT
            }
        };
        b[..2].copy_from_slice(&t.to_ne_bytes());
        b
    }

    /// A DISCONNECT carrying `reason` (truncated, NUL-terminated).
    pub(crate) fn disconnect(reason: &str) -> Msg {
        Msg::Disconnect {
            code: 0,
            reason: c_string(reason),
        }
    }
}

/// `s` as a fixed-size, NUL-terminated C string field (truncated to `N - 1` bytes).
pub(crate) fn c_string<const N: usize>(s: &str) -> [u8; N] {
    let mut a = [0u8; N];
    for (d, c) in a.iter_mut().zip(s.bytes().filter(|&c| c != 0).take(N - 1)) {
        *d = c;
    }
    a
}

/// A C string field as text (up to the first NUL, invalid UTF-8 replaced).
pub(crate) fn from_c_string(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_round_trips() {
        let msgs = [
            Msg::Ack,
            Msg::Hello {
                name: c_string("srv"),
                min_version: VERSION,
                max_version: VERSION,
                max_region: 255,
                max_s2c_ring: 0,
                max_c2s_ring: 0,
                max_log2_ring_size: 14,
            },
            Msg::Init {
                version: VERSION,
                id: 0xdead_beef,
                mode: MODE_ETHERNET,
                secret: c_string("s3cret"),
                name: c_string("cli"),
            },
            Msg::AddRegion {
                index: 3,
                size: 0x1_2345_6789,
            },
            Msg::AddRing {
                flags: ADD_RING_FLAG_C2S,
                index: 1,
                region: 2,
                offset: 0x1234_5678,
                log2_ring_size: 10,
                private_hdr_size: 0,
            },
            Msg::Connect {
                if_name: c_string("memif0"),
            },
            Msg::Connected {
                if_name: c_string("memif1"),
            },
            Msg::disconnect("bye"),
        ];
        for m in msgs {
            let b = m.encode();
            assert_eq!(Msg::decode(&b, MSG_SIZE), Ok(m));
        }
    }

    /// Offsets of the packed C layout (measured with the C header: init.id at byte 4 of
    /// the message, secret at 9, name at 33; add_ring.offset at 8, log2 at 12).
    #[test]
    fn layout_matches_the_c_structures() {
        let b = Msg::Init {
            version: 0x0200,
            id: 0x0403_0201,
            mode: 0,
            secret: c_string("S"),
            name: c_string("N"),
        }
        .encode();
        assert_eq!(&b[..2], &ty::INIT.to_ne_bytes());
        assert_eq!(&b[2..4], &0x0200u16.to_ne_bytes());
        assert_eq!(&b[4..8], &0x0403_0201u32.to_ne_bytes());
        assert_eq!(b[9], b'S');
        assert_eq!(b[33], b'N');
        let b = Msg::AddRing {
            flags: 1,
            index: 2,
            region: 3,
            offset: 0x0807_0605,
            log2_ring_size: 9,
            private_hdr_size: 0x0b0a,
        }
        .encode();
        assert_eq!(&b[8..12], &0x0807_0605u32.to_ne_bytes());
        assert_eq!(b[12], 9);
        assert_eq!(&b[13..15], &0x0b0au16.to_ne_bytes());
        let b = Msg::AddRegion {
            index: 1,
            size: 0x1122,
        }
        .encode();
        assert_eq!(&b[4..12], &0x1122u64.to_ne_bytes());
        assert_eq!(ring_bytes(10), 128 + 16 * 1024);
    }

    #[test]
    fn bad_sizes_and_types_are_rejected() {
        let mut b = Msg::Ack.encode();
        assert_eq!(Msg::decode(&b, 127), Err(DecodeError::Size));
        assert_eq!(Msg::decode(&b, 0), Err(DecodeError::Size));
        b[0] = 0;
        assert_eq!(Msg::decode(&b, MSG_SIZE), Err(DecodeError::UnknownType(0)));
        b[0] = 9;
        assert_eq!(Msg::decode(&b, MSG_SIZE), Err(DecodeError::UnknownType(9)));
    }

    #[test]
    fn c_strings_are_truncated_and_terminated() {
        let a: [u8; 4] = c_string("abcdef");
        assert_eq!(a, *b"abc\0");
        assert_eq!(from_c_string(&a), "abc");
        assert_eq!(from_c_string(b"xyz"), "xyz");
    }

    proptest::proptest! {
        /// Any 128 bytes (and any received length) decode to a message or a named error,
        /// never a panic; whatever decodes re-encodes to a message that decodes the same.
        #[test]
        fn arbitrary_messages_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, MSG_SIZE), len in 0usize..300, ty in 0u16..12) {
            let mut b = [0u8; MSG_SIZE];
            b.copy_from_slice(&bytes);
            b[..2].copy_from_slice(&ty.to_ne_bytes());
            let _ = Msg::decode(&b, len);
            if let Ok(m) = Msg::decode(&b, MSG_SIZE) {
                let again = Msg::decode(&m.encode(), MSG_SIZE).expect("re-encoded message decodes");
                proptest::prop_assert_eq!(format!("{m:?}"), format!("{again:?}"));
            }
        }
    }
}
