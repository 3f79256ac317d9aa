//! Internet checksum (RFC 1071) and incremental updates (RFC 1624).
//!
//! [`sum`] returns a ones'-complement *partial* sum already folded to at most
//! `0xffff`, so partial sums of different pieces (pseudo header, header,
//! payload) can be added as plain `u32`s and folded once with [`fold`].

/// Adds a 64-bit word into a ones'-complement accumulator with end-around carry.
#[inline(always)]
fn add64(acc: u64, v: u64) -> u64 {
    let (s, carry) = acc.overflowing_add(v);
    s + u64::from(carry)
}

/// Reads eight bytes as a big-endian u64 (`b` holds at least eight).
#[inline(always)]
fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

/// Ones'-complement partial sum of `data` as big-endian 16-bit words.
///
/// An odd trailing byte is padded with a zero low byte. The result is folded
/// to at most `0xffff` and is never zero unless every byte of `data` is zero,
/// so partial sums can be added together safely.
#[inline]
pub fn sum(data: &[u8]) -> u32 {
    // Ones'-complement addition of 64-bit words with end-around carry is
    // congruent modulo 0xffff to the 16-bit sum, because 2^16 ≡ 1.
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(16);
    for c in &mut chunks {
        acc = add64(add64(acc, be64(&c[..8])), be64(&c[8..]));
    }
    let mut rest = chunks.remainder();
    if rest.len() >= 8 {
        acc = add64(acc, be64(rest));
        rest = &rest[8..];
    }
    if let [a, b, c, d, ..] = *rest {
        acc = add64(acc, u64::from(u32::from_be_bytes([a, b, c, d])));
        rest = &rest[4..];
    }
    if let [a, b, ..] = *rest {
        acc = add64(acc, u64::from(u16::from_be_bytes([a, b])));
        rest = &rest[2..];
    }
    if let [a] = *rest {
        acc = add64(acc, u64::from(a) << 8);
    }
    // 64 -> 32 -> 16 with end-around carry; 2^16 - 1 divides 2^32 - 1, so
    // every step preserves the value modulo 0xffff, and a non-zero sum stays
    // non-zero.
    let s = (acc >> 32) + (acc & 0xffff_ffff);
    let s = (s >> 32) + (s & 0xffff_ffff);
    u32::from(fold(s as u32))
}

/// Whether a 20-byte IPv4 header (no options) carries a valid checksum. The per-packet
/// case of every router, so it is specialised: five native-order 32-bit loads summed in 64
/// bits. Ones'-complement sums are byte-order independent (RFC 1071 §2(B)) and the all-ones
/// result is the same in either order, so no byte swap is needed.
#[inline]
pub fn verify20(h: &[u8; 20]) -> bool {
    let w = |i: usize| u64::from(u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]));
    let acc = w(0) + w(4) + w(8) + w(12) + w(16);
    let s = (acc >> 32) + (acc & 0xffff_ffff);
    let s = (s >> 32) + (s & 0xffff_ffff);
    fold(s as u32) == 0xffff
}

/// Folds a 32-bit partial sum to 16 bits with end-around carry (no complement).
#[inline]
pub fn fold(sum: u32) -> u16 {
    let s = (sum & 0xffff) + (sum >> 16);
    let s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// The Internet checksum of `data`: the complement of its folded sum.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum(data))
}

/// Partial sum of the IPv4 pseudo header (RFC 768 / RFC 793).
///
/// `src` and `dst` are host-order addresses, `len` the upper-layer length.
#[inline]
pub fn pseudo_v4(src: u32, dst: u32, proto: u8, len: u16) -> u32 {
    (src >> 16) + (src & 0xffff) + (dst >> 16) + (dst & 0xffff) + u32::from(proto) + u32::from(len)
}

/// Partial sum of the IPv6 pseudo header (RFC 8200 section 8.1).
#[inline]
pub fn pseudo_v6(src: &[u8; 16], dst: &[u8; 16], proto: u8, len: u32) -> u32 {
    sum(src) + sum(dst) + (len >> 16) + (len & 0xffff) + u32::from(proto)
}

/// Incrementally updates `old_checksum` after one 16-bit word of the covered
/// data changed from `old_word` to `new_word` (RFC 1624 eqn. 3:
/// `HC' = ~(~HC + ~m + m')`), which never produces the `-0` of eqn. 2.
#[inline]
pub fn update16(old_checksum: u16, old_word: u16, new_word: u16) -> u16 {
    let s = u32::from(!old_checksum) + u32::from(!old_word) + u32::from(new_word);
    !fold(s)
}

/// Incrementally updates `old_checksum` after an aligned 32-bit field (e.g. an
/// IPv4 address) changed from `old` to `new`; RFC 1624 eqn. 3 on both halves.
#[inline]
pub fn update32(old_checksum: u16, old: u32, new: u32) -> u16 {
    let s = u32::from(!old_checksum)
        + u32::from(!(old >> 16) as u16)
        + u32::from(!(old as u16))
        + (new >> 16)
        + (new & 0xffff);
    !fold(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Straightforward RFC 1071 reference: 16 bits at a time in a u64.
    fn naive_sum(data: &[u8]) -> u16 {
        let mut acc: u64 = 0;
        for c in data.chunks(2) {
            let w = if c.len() == 2 {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                u16::from(c[0]) << 8
            };
            acc += u64::from(w);
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    #[test]
    fn rfc1071_example() {
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(sum(&data), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
        // Odd length: trailing byte is the high byte of a zero-padded word.
        assert_eq!(sum(&[0x01]), 0x0100);
        assert_eq!(sum(&[]), 0);
    }

    #[test]
    fn ipv4_header_vector() {
        // Classic example header, checksum 0xb861.
        let hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&hdr), 0xb861);
        let mut full = hdr;
        full[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        assert_eq!(checksum(&full), 0);
    }

    #[test]
    fn rfc1624_section4_edge_case() {
        // m = 0x5555 -> m' = 0x3285, other octets sum to 0xcd7a:
        // HC = 0xdd2f, recomputation gives 0x0000 and so must eqn. 3.
        assert_eq!(!fold(0xcd7a + 0x5555), 0xdd2f);
        assert_eq!(!fold(0xcd7a + 0x3285), 0x0000);
        assert_eq!(update16(0xdd2f, 0x5555, 0x3285), 0x0000);
        // And back again.
        assert_eq!(update16(0x0000, 0x3285, 0x5555), 0xdd2f);
    }

    #[test]
    fn pseudo_headers() {
        let v4 = pseudo_v4(0xc0a8_0001, 0x0a00_0002, 17, 30);
        let bytes = [
            0xc0, 0xa8, 0x00, 0x01, 0x0a, 0x00, 0x00, 0x02, 0x00, 17, 0x00, 30,
        ];
        assert_eq!(fold(v4), naive_sum(&bytes));
        let src = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let dst = [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let mut ph = [0u8; 40];
        ph[..16].copy_from_slice(&src);
        ph[16..32].copy_from_slice(&dst);
        ph[32..36].copy_from_slice(&0x0001_0010u32.to_be_bytes());
        ph[39] = 58;
        assert_eq!(fold(pseudo_v6(&src, &dst, 58, 0x0001_0010)), naive_sum(&ph));
    }

    proptest! {
        #[test]
        fn verify20_agrees_with_the_general_sum(h in proptest::array::uniform20(any::<u8>()), fix in any::<bool>()) {
            let mut h = h;
            if fix {
                h[10] = 0;
                h[11] = 0;
                let c = checksum(&h);
                h[10..12].copy_from_slice(&c.to_be_bytes());
            }
            prop_assert_eq!(verify20(&h), fold(sum(&h)) == 0xffff);
            if fix {
                prop_assert!(verify20(&h));
            }
        }

        #[test]
        fn sum_matches_reference(data in proptest::collection::vec(any::<u8>(), 0..600)) {
            let s = sum(&data);
            prop_assert!(s <= 0xffff);
            // Same value modulo 0xffff (0 and 0xffff are both zero).
            prop_assert_eq!(s % 0xffff, u32::from(naive_sum(&data)) % 0xffff);
            if data.iter().any(|&b| b != 0) {
                prop_assert!(s != 0);
            }
        }

        #[test]
        fn incremental16_equals_full(
            mut hdr in proptest::array::uniform20(any::<u8>()),
            word in prop_oneof![0usize..5, 6usize..10],
            new in any::<u16>(),
        ) {
            hdr[0] = 0x45; // a real header is never all zero
            hdr[10] = 0;
            hdr[11] = 0;
            let c = checksum(&hdr);
            hdr[10..12].copy_from_slice(&c.to_be_bytes());
            let old = u16::from_be_bytes([hdr[2 * word], hdr[2 * word + 1]]);
            hdr[2 * word..2 * word + 2].copy_from_slice(&new.to_be_bytes());
            let inc = update16(c, old, new);
            hdr[10] = 0;
            hdr[11] = 0;
            prop_assert_eq!(inc, checksum(&hdr));
        }

        #[test]
        fn incremental32_equals_full(
            mut hdr in proptest::array::uniform20(any::<u8>()),
            src in any::<bool>(),
            new in any::<u32>(),
        ) {
            hdr[0] = 0x45;
            hdr[10] = 0;
            hdr[11] = 0;
            let c = checksum(&hdr);
            let at = if src { 12 } else { 16 };
            let old = u32::from_be_bytes([hdr[at], hdr[at + 1], hdr[at + 2], hdr[at + 3]]);
            hdr[at..at + 4].copy_from_slice(&new.to_be_bytes());
            prop_assert_eq!(update32(c, old, new), checksum(&hdr));
        }

        #[test]
        fn edge_values_0000_ffff(
            rest in proptest::collection::vec(any::<u16>(), 1..10),
            old in prop_oneof![Just(0u16), Just(0xffffu16), any::<u16>()],
            new in prop_oneof![Just(0u16), Just(0xffffu16), any::<u16>()],
        ) {
            // Data = rest ++ [field] with a leading non-zero word.
            let mut data = vec![0x45u8, 0x00];
            for w in &rest { data.extend_from_slice(&w.to_be_bytes()); }
            data.extend_from_slice(&old.to_be_bytes());
            let c = checksum(&data);
            let n = data.len();
            data[n - 2..].copy_from_slice(&new.to_be_bytes());
            prop_assert_eq!(update16(c, old, new), checksum(&data));
        }
    }
}
