//! Frames: Ethernet + IPv4/IPv6 + UDP templates, the per-frame signature, and the
//! per-frame fill that writes addresses, ports and signature with incrementally computed
//! checksums.
//!
//! A [`Template`] is built once per (direction, frame kind) with every variable field
//! zero, together with the ones'-complement partial sums of the IPv4 header and of the
//! UDP datagram plus pseudo header over its constant bytes. Filling a frame copies the
//! template and adds the partial sums of the variable 16-bit words (addresses, ports,
//! signature): no checksum is ever computed over the payload per frame.
//!
//! # Signature
//! The first [`SIGNATURE_LEN`] bytes of the UDP payload, all big-endian (it fits the
//! smallest frame: a 78-byte IPv6 frame leaves exactly 12 payload bytes):
//!
//! | bytes | field |
//! |---|---|
//! | 0..2 | magic [`MAGIC`] |
//! | 2..4 | stream: trial tag (13 bits) << 3 \| direction (1 bit) << 1 \| family (1 bit: 0 IPv4, 1 IPv6) |
//! | 4..8 | sequence number, per direction (shared by both families), from 0 in each trial (low 32 bits: it wraps in trials of more than 2^32 frames) |
//! | 8..12 | transmit timestamp: low 32 bits of the tester's clock in ns (CLOCK_MONOTONIC) |
//!
//! Latency is `rx_time − timestamp` in wrapping 32-bit arithmetic (valid below 4.29 s).

use wire::checksum::fold;

use crate::profile::{Family, FrameKind, FCS_LEN};

/// First two bytes of every signature.
pub const MAGIC: u16 = 0xF7E5;
/// Bytes of the signature at the start of the UDP payload.
pub const SIGNATURE_LEN: usize = 12;
/// Trial tags are this many bits (they wrap).
pub const TAG_BITS: u32 = 13;
/// TTL / hop limit of generated frames.
pub const DEFAULT_TTL: u8 = 64;

const ETH_LEN: usize = 14;
const UDP_LEN: usize = 8;
const PROTO_UDP: u8 = 17;

/// A decoded signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signature {
    /// Tag of the trial that sent the frame (13 bits).
    pub tag: u16,
    /// 0: sent on port 0 toward port 1; 1: the reverse.
    pub direction: u8,
    /// Family of the frame.
    pub family: Family,
    /// Sequence number within the direction.
    pub seq: u32,
    /// Low 32 bits of the transmit time, ns.
    pub timestamp: u32,
}

impl Signature {
    /// The 16-bit stream field.
    #[inline]
    pub fn stream(&self) -> u16 {
        stream_field(self.tag, self.direction, self.family)
    }

    /// Find and decode the signature of an Ethernet frame (no FCS): Ethernet (one optional
    /// 802.1Q/802.1ad tag), IPv4 (any header length, first fragment only) or IPv6 (UDP as
    /// the first next header), UDP, then the magic. `None` for anything else.
    #[inline]
    pub fn parse(frame: &[u8]) -> Option<Signature> {
        let off = udp_payload_offset(frame)?;
        let s = frame.get(off..off + SIGNATURE_LEN)?;
        if u16::from_be_bytes([s[0], s[1]]) != MAGIC {
            return None;
        }
        let stream = u16::from_be_bytes([s[2], s[3]]);
        Some(Signature {
            tag: stream >> 3,
            direction: ((stream >> 1) & 1) as u8,
            family: Family::from_index(usize::from(stream & 1)),
            seq: u32::from_be_bytes([s[4], s[5], s[6], s[7]]),
            timestamp: u32::from_be_bytes([s[8], s[9], s[10], s[11]]),
        })
    }
}

/// The stream field for a trial tag, direction and family.
#[inline]
pub fn stream_field(tag: u16, direction: u8, family: Family) -> u16 {
    ((tag & ((1 << TAG_BITS) - 1)) << 3) | (u16::from(direction & 1) << 1) | family.index() as u16
}

/// Offset of the UDP payload in an Ethernet frame, if it is IPv4/IPv6 + UDP (first
/// fragment only), where both the trial and the sweep signatures start.
#[inline]
pub(crate) fn udp_payload_offset(f: &[u8]) -> Option<usize> {
    let be16 = |i: usize| -> Option<u16> { Some(u16::from_be_bytes([*f.get(i)?, *f.get(i + 1)?])) };
    let mut et = be16(12)?;
    let mut l3 = ETH_LEN;
    if et == 0x8100 || et == 0x88a8 {
        et = be16(16)?;
        l3 += 4;
    }
    match et {
        0x0800 => {
            let vihl = *f.get(l3)?;
            let ihl = usize::from(vihl & 0xf) * 4;
            if vihl >> 4 != 4 || ihl < 20 || *f.get(l3 + 9)? != PROTO_UDP {
                return None;
            }
            if be16(l3 + 6)? & 0x1fff != 0 {
                return None;
            }
            Some(l3 + ihl + UDP_LEN)
        }
        0x86dd => {
            if *f.get(l3)? >> 4 != 6 || *f.get(l3 + 6)? != PROTO_UDP {
                return None;
            }
            Some(l3 + 40 + UDP_LEN)
        }
        _ => None,
    }
}

/// Sum of the eight 16-bit words of an IPv6 address (or the two of an IPv4 one, which has
/// the upper 96 bits zero).
#[inline]
pub(crate) fn sum_words(v: u128) -> u32 {
    let mut s = 0u32;
    let mut x = v;
    while x != 0 {
        s += (x & 0xffff) as u32;
        x >>= 16;
    }
    s
}

/// A prebuilt frame of one kind for one direction, with the partial checksums of its
/// constant bytes.
#[derive(Clone, Debug)]
pub struct Template {
    kind: FrameKind,
    bytes: Vec<u8>,
    l4: usize,
    sig: usize,
    /// IPv4 header sum with addresses and checksum zero (0 for IPv6).
    ip_sum: u32,
    /// UDP datagram + pseudo header (protocol and length) sum with addresses, ports,
    /// checksum and the variable signature fields zero.
    udp_sum: u32,
    /// Fill the UDP checksum of IPv4 frames (IPv6 always has one).
    udp_csum_v4: bool,
}

impl Template {
    /// A template of `kind` from `src_mac` to `dst_mac` with the given TTL / hop limit.
    /// `kind.size` must be at least the family's minimum (checked by the profile parser).
    pub fn new(
        kind: FrameKind,
        src_mac: [u8; 6],
        dst_mac: [u8; 6],
        ttl: u8,
        udp_csum_v4: bool,
    ) -> Template {
        let len = usize::from(kind.size) - FCS_LEN;
        let mut b = vec![0u8; len];
        b[0..6].copy_from_slice(&dst_mac);
        b[6..12].copy_from_slice(&src_mac);
        let l3 = ETH_LEN;
        let (l4, ip_sum) = match kind.family {
            Family::Ipv4 => {
                b[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
                let ip = &mut b[l3..];
                ip[0] = 0x45;
                ip[2..4].copy_from_slice(&((len - ETH_LEN) as u16).to_be_bytes());
                ip[8] = ttl;
                ip[9] = PROTO_UDP;
                (l3 + 20, wire::checksum::sum(&ip[..20]))
            }
            Family::Ipv6 => {
                b[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
                let ip = &mut b[l3..];
                ip[0] = 0x60;
                ip[4..6].copy_from_slice(&((len - ETH_LEN - 40) as u16).to_be_bytes());
                ip[6] = PROTO_UDP;
                ip[7] = ttl;
                (l3 + 40, 0)
            }
        };
        let udp_len = (len - l4) as u16;
        b[l4 + 4..l4 + 6].copy_from_slice(&udp_len.to_be_bytes());
        let sig = l4 + UDP_LEN;
        b[sig..sig + 2].copy_from_slice(&MAGIC.to_be_bytes());
        // A recognisable, non-zero padding pattern after the signature.
        for (i, x) in b[sig + SIGNATURE_LEN..].iter_mut().enumerate() {
            *x = i as u8;
        }
        let udp_sum = u32::from(fold(
            wire::checksum::sum(&b[l4..]) + u32::from(PROTO_UDP) + u32::from(udp_len),
        ));
        Template {
            kind,
            bytes: b,
            l4,
            sig,
            ip_sum,
            udp_sum,
            udp_csum_v4,
        }
    }

    /// The same template with its DSCP set to `dscp` (0-63; higher bits ignored): the
    /// IPv4 TOS byte's upper six bits or the IPv6 traffic class's, ECN left 0.
    pub fn with_dscp(mut self, dscp: u8) -> Template {
        let tc = (dscp & 0x3f) << 2;
        let ip = &mut self.bytes[ETH_LEN..];
        match self.kind.family {
            Family::Ipv4 => {
                ip[1] = tc;
                // Addresses and checksum are still zero in the template.
                self.ip_sum = wire::checksum::sum(&ip[..20]);
            }
            Family::Ipv6 => {
                ip[0] = 0x60 | (tc >> 4);
                ip[1] = (ip[1] & 0x0f) | (tc << 4);
            }
        }
        self
    }

    /// The frame kind.
    pub fn kind(&self) -> FrameKind {
        self.kind
    }

    /// Buffer length (frame size minus FCS).
    #[inline]
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Write a complete frame into `out[..len()]`: the template, then addresses (IPv4 in
    /// the low 32 bits of `src`/`dst`), ports and signature, and the IPv4 header and UDP
    /// checksums, updated incrementally from the template's partial sums.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn fill(
        &self,
        out: &mut [u8],
        src: u128,
        dst: u128,
        sport: u16,
        dport: u16,
        stream: u16,
        seq: u32,
        ts: u32,
    ) {
        let f = &mut out[..self.bytes.len()];
        f.copy_from_slice(&self.bytes);
        let l3 = ETH_LEN;
        let addr_sum = sum_words(src) + sum_words(dst);
        match self.kind.family {
            Family::Ipv4 => {
                f[l3 + 12..l3 + 16].copy_from_slice(&(src as u32).to_be_bytes());
                f[l3 + 16..l3 + 20].copy_from_slice(&(dst as u32).to_be_bytes());
                let c = !fold(self.ip_sum + addr_sum);
                f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
            }
            Family::Ipv6 => {
                f[l3 + 8..l3 + 24].copy_from_slice(&src.to_be_bytes());
                f[l3 + 24..l3 + 40].copy_from_slice(&dst.to_be_bytes());
            }
        }
        let l4 = self.l4;
        f[l4..l4 + 2].copy_from_slice(&sport.to_be_bytes());
        f[l4 + 2..l4 + 4].copy_from_slice(&dport.to_be_bytes());
        let s = self.sig;
        f[s + 2..s + 4].copy_from_slice(&stream.to_be_bytes());
        f[s + 4..s + 8].copy_from_slice(&seq.to_be_bytes());
        f[s + 8..s + 12].copy_from_slice(&ts.to_be_bytes());
        if self.kind.family == Family::Ipv6 || self.udp_csum_v4 {
            let sum = self.udp_sum
                + addr_sum
                + u32::from(sport)
                + u32::from(dport)
                + u32::from(stream)
                + (seq >> 16)
                + (seq & 0xffff)
                + (ts >> 16)
                + (ts & 0xffff);
            let c = !fold(sum);
            let c = if c == 0 { 0xffff } else { c };
            f[l4 + 6..l4 + 8].copy_from_slice(&c.to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::checksum::{pseudo_v4, pseudo_v6};
    use wire::{EthernetFrame, Ipv4Packet, Ipv6Packet, UdpPacket};

    #[test]
    fn fill_gives_valid_checksums_and_signature() {
        for (fam, size) in [
            (Family::Ipv4, 64u16),
            (Family::Ipv4, 1518),
            (Family::Ipv6, 78),
            (Family::Ipv6, 9000),
        ] {
            let t = Template::new(
                FrameKind { family: fam, size },
                [2, 0, 0, 0, 0, 1],
                [2, 0, 0, 0, 0, 2],
                64,
                true,
            );
            let mut buf = vec![0u8; 9000];
            let (src, dst) = match fam {
                Family::Ipv4 => (0xc612_0002u128, 0x1000_ffffu128),
                Family::Ipv6 => (0x2001_0002_0000_000a_0000_0000_0000_0002u128, u128::MAX - 7),
            };
            for seq in [0u32, 1, 0xffff, 0xffff_ffff] {
                t.fill(
                    &mut buf,
                    src,
                    dst,
                    0xffff,
                    4791,
                    stream_field(5, 1, fam),
                    seq,
                    0xdead_beef,
                );
                let f = &buf[..t.len()];
                assert_eq!(f.len() + 4, usize::from(size));
                let eth = EthernetFrame::new_checked(f).unwrap();
                let udp_bytes = match fam {
                    Family::Ipv4 => {
                        let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
                        assert!(ip.verify_checksum());
                        let u = UdpPacket::new_checked(ip.payload()).unwrap();
                        assert!(u.verify_checksum(pseudo_v4(
                            ip.src_addr(),
                            ip.dst_addr(),
                            17,
                            u.len()
                        )));
                        ip.payload().to_vec()
                    }
                    Family::Ipv6 => {
                        let ip = Ipv6Packet::new_checked(eth.payload()).unwrap();
                        let u = UdpPacket::new_checked(ip.payload()).unwrap();
                        let ps = pseudo_v6(&ip.src_addr(), &ip.dst_addr(), 17, u32::from(u.len()));
                        assert!(u.verify_checksum(ps));
                        ip.payload().to_vec()
                    }
                };
                assert_eq!(
                    udp_bytes.len(),
                    f.len() - if fam == Family::Ipv4 { 34 } else { 54 }
                );
                let sig = Signature::parse(f).unwrap();
                assert_eq!(
                    sig,
                    Signature {
                        tag: 5,
                        direction: 1,
                        family: fam,
                        seq,
                        timestamp: 0xdead_beef
                    }
                );
            }
        }
    }

    proptest::proptest! {
        /// Incremental checksums equal full recomputation for any field values.
        #[test]
        fn incremental_checksums_always_verify(
            v6 in proptest::bool::ANY,
            size in 78u16..1600,
            src in proptest::num::u128::ANY,
            dst in proptest::num::u128::ANY,
            sport in proptest::num::u16::ANY,
            dport in proptest::num::u16::ANY,
            stream in proptest::num::u16::ANY,
            seq in proptest::num::u32::ANY,
            ts in proptest::num::u32::ANY,
            ttl in proptest::num::u8::ANY,
            dscp in 0u8..64,
        ) {
            let family = if v6 { Family::Ipv6 } else { Family::Ipv4 };
            let (src, dst) = if v6 { (src, dst) } else { (src & 0xffff_ffff, dst & 0xffff_ffff) };
            let t = Template::new(FrameKind { family, size }, [1; 6], [2; 6], ttl, true)
                .with_dscp(dscp);
            let mut b = vec![0u8; 2048];
            t.fill(&mut b, src, dst, sport, dport, stream, seq, ts);
            let f = &b[..t.len()];
            let eth = EthernetFrame::new_checked(f).unwrap();
            if v6 {
                let ip = Ipv6Packet::new_checked(eth.payload()).unwrap();
                let u = UdpPacket::new_checked(ip.payload()).unwrap();
                let ps = pseudo_v6(&ip.src_addr(), &ip.dst_addr(), 17, u32::from(u.len()));
                proptest::prop_assert!(u.checksum() != 0 && u.verify_checksum(ps));
                proptest::prop_assert_eq!(ip.traffic_class(), dscp << 2);
                proptest::prop_assert_eq!(ip.version(), 6);
            } else {
                let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
                proptest::prop_assert!(ip.verify_checksum());
                proptest::prop_assert_eq!(ip.dscp(), dscp);
                let u = UdpPacket::new_checked(ip.payload()).unwrap();
                proptest::prop_assert!(u.checksum() != 0);
                proptest::prop_assert!(u.verify_checksum(pseudo_v4(ip.src_addr(), ip.dst_addr(), 17, u.len())));
            }
        }
    }

    #[test]
    fn parse_rejects_non_signature_frames() {
        assert_eq!(Signature::parse(&[]), None);
        assert_eq!(Signature::parse(&[0u8; 60]), None);
        let t = Template::new(
            FrameKind {
                family: Family::Ipv4,
                size: 64,
            },
            [0; 6],
            [0; 6],
            64,
            false,
        );
        let mut b = vec![0u8; 64];
        t.fill(&mut b, 1, 2, 3, 4, 0, 0, 0);
        assert!(Signature::parse(&b[..60]).is_some());
        assert_eq!(
            &b[40..42],
            &[0, 0],
            "UDP checksum left at 0 when disabled for IPv4"
        );
        b[42] ^= 1; // magic
        assert_eq!(Signature::parse(&b[..60]), None);
        b[42] ^= 1;
        assert_eq!(Signature::parse(&b[..50]), None, "truncated");
        b[14 + 9] = 6; // TCP
        assert_eq!(Signature::parse(&b[..60]), None);
    }
}
