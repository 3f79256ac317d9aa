//! Frames of the stateful generator: Ethernet + IPv4 + TCP or UDP segments written in
//! place with checksums summed from precomputed parts (no pass over the payload per
//! frame), and a bounds-checked parser of what comes back.
//!
//! Every frame is IPv4 with DF set and IP ID 0 (RFC 6864: atomic datagrams), TTL from
//! the config. TCP options:
//! - SYN and SYN-ACK: MSS, NOP, window scale, NOP, NOP, SACK permitted (12 bytes, the
//!   layout Windows uses). No timestamps: they would have to ride on every segment
//!   (RFC 7323) for nothing a stateful firewall checks.
//! - every other segment: none.
//!
//! The payload is a fixed byte pattern, always from its start, so its partial checksum
//! for any length is one lookup in a prefix-sum table.

use wire::checksum::fold;

/// Ethernet + IPv4 header bytes.
pub(crate) const L3_OFF: usize = 14;
/// Offset of the L4 header.
pub(crate) const L4_OFF: usize = L3_OFF + 20;
/// TCP header without options.
pub(crate) const TCP_HDR: usize = 20;
/// UDP header.
pub(crate) const UDP_HDR: usize = 8;
/// The longest payload a frame carries: a 1500-byte IP MTU minus IPv4 and UDP headers.
pub(crate) const MAX_PAYLOAD: usize = 1500 - 20 - UDP_HDR;

pub(crate) const PROTO_TCP: u8 = 6;
pub(crate) const PROTO_UDP: u8 = 17;

/// TCP flags.
pub(crate) mod flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
}

/// Window scale both ends announce: windows in non-SYN segments are `field << 7`.
pub(crate) const WSCALE: u8 = 7;
/// Window field of every segment (65535 << 7 ≈ 8 MiB once scaled; unscaled on SYNs).
pub(crate) const WINDOW: u16 = 65535;

/// SYN / SYN-ACK options with the MSS left zero: MSS, NOP, WS, NOP, NOP, SACK-permitted.
const SYN_OPTS: [u8; 12] = [2, 4, 0, 0, 1, 3, 3, WSCALE, 1, 1, 4, 2];

/// The addresses of one side's frames and the precomputed sums.
#[derive(Clone, Debug)]
pub(crate) struct Writer {
    /// Destination MAC then source MAC.
    macs: [u8; 12],
    ttl: u8,
    /// The payload pattern.
    pattern: Box<[u8]>,
    /// `prefix[l]`: partial sum of `pattern[..l]`.
    prefix: Box<[u32]>,
}

/// The variable fields of one TCP segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TcpFields {
    pub src: u32,
    pub dst: u32,
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    /// MSS option value (SYN and SYN-ACK only: options are written when `flags` has SYN).
    pub mss: u16,
    /// Payload bytes (from the pattern's start).
    pub len: usize,
}

#[inline]
fn w32(x: u32) -> u32 {
    (x >> 16) + (x & 0xffff)
}

impl Writer {
    /// Frames from `src_mac` to `dst_mac` with TTL `ttl`.
    pub fn new(src_mac: [u8; 6], dst_mac: [u8; 6], ttl: u8) -> Writer {
        let mut macs = [0u8; 12];
        macs[..6].copy_from_slice(&dst_mac);
        macs[6..].copy_from_slice(&src_mac);
        // A recognisable pattern: "FERROUTER" then ascending bytes.
        let mut pattern = vec![0u8; MAX_PAYLOAD].into_boxed_slice();
        for (i, b) in pattern.iter_mut().enumerate() {
            *b = b"FERROUTER"
                .get(i)
                .copied()
                .unwrap_or((i as u8).wrapping_mul(7));
        }
        let mut prefix = vec![0u32; MAX_PAYLOAD + 1].into_boxed_slice();
        for l in 1..=MAX_PAYLOAD {
            prefix[l] = u32::from(fold(wire::checksum::sum(&pattern[..l])));
        }
        Writer {
            macs,
            ttl,
            pattern,
            prefix,
        }
    }

    /// Ethernet and IPv4 headers for an L4 datagram of `l4_len` bytes; returns the sum of
    /// the pseudo header (addresses, protocol, length) for the L4 checksum.
    #[inline]
    fn ip(&self, f: &mut [u8], proto: u8, src: u32, dst: u32, l4_len: usize) -> u32 {
        f[..12].copy_from_slice(&self.macs);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let total = (20 + l4_len) as u16;
        let ip = &mut f[L3_OFF..L4_OFF];
        ip[0] = 0x45;
        ip[1] = 0;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[4..6].copy_from_slice(&[0, 0]);
        ip[6..8].copy_from_slice(&0x4000u16.to_be_bytes());
        ip[8] = self.ttl;
        ip[9] = proto;
        ip[12..16].copy_from_slice(&src.to_be_bytes());
        ip[16..20].copy_from_slice(&dst.to_be_bytes());
        let addrs = w32(src) + w32(dst);
        let sum =
            0x4500 + u32::from(total) + 0x4000 + (u32::from(self.ttl) << 8 | u32::from(proto));
        let c = !fold(sum + addrs);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        addrs + u32::from(proto) + l4_len as u32
    }

    /// Write a TCP segment into `f` (at least [`Writer::tcp_len`] bytes); returns its length.
    #[inline]
    pub fn tcp(&self, f: &mut [u8], s: &TcpFields) -> usize {
        let len = s.len.min(MAX_PAYLOAD);
        let opts = if s.flags & flags::SYN != 0 { 12 } else { 0 };
        let l4_len = TCP_HDR + opts + len;
        let total = L4_OFF + l4_len;
        let Some(f) = f.get_mut(..total) else {
            return 0;
        };
        let pseudo = self.ip(f, PROTO_TCP, s.src, s.dst, l4_len);
        let t = &mut f[L4_OFF..];
        t[0..2].copy_from_slice(&s.sport.to_be_bytes());
        t[2..4].copy_from_slice(&s.dport.to_be_bytes());
        t[4..8].copy_from_slice(&s.seq.to_be_bytes());
        t[8..12].copy_from_slice(&s.ack.to_be_bytes());
        let off_flags = (((TCP_HDR + opts) as u16 / 4) << 12) | u16::from(s.flags);
        t[12..14].copy_from_slice(&off_flags.to_be_bytes());
        t[14..16].copy_from_slice(&WINDOW.to_be_bytes());
        t[16..20].copy_from_slice(&[0, 0, 0, 0]);
        let mut sum = pseudo
            + u32::from(s.sport)
            + u32::from(s.dport)
            + w32(s.seq)
            + w32(s.ack)
            + u32::from(off_flags)
            + u32::from(WINDOW);
        if opts != 0 {
            let o = &mut t[TCP_HDR..TCP_HDR + 12];
            o.copy_from_slice(&SYN_OPTS);
            o[2..4].copy_from_slice(&s.mss.to_be_bytes());
            // Constant words of SYN_OPTS: 0x0204, 0x0103, 0x0307, 0x0101, 0x0402.
            sum += 0x0204 + 0x0103 + (0x0300 | u32::from(WSCALE)) + 0x0101 + 0x0402;
            sum += u32::from(s.mss);
        }
        let p = TCP_HDR + opts;
        t[p..p + len].copy_from_slice(&self.pattern[..len]);
        sum += self.prefix[len];
        let c = !fold(sum);
        t[16..18].copy_from_slice(&c.to_be_bytes());
        total
    }

    /// Write a UDP datagram of `len` payload bytes; returns the frame length (0 when `f`
    /// is too short).
    #[inline]
    pub fn udp(
        &self,
        f: &mut [u8],
        src: u32,
        dst: u32,
        sport: u16,
        dport: u16,
        len: usize,
    ) -> usize {
        let len = len.min(MAX_PAYLOAD);
        let l4_len = UDP_HDR + len;
        let total = L4_OFF + l4_len;
        let Some(f) = f.get_mut(..total) else {
            return 0;
        };
        let pseudo = self.ip(f, PROTO_UDP, src, dst, l4_len);
        let u = &mut f[L4_OFF..];
        u[0..2].copy_from_slice(&sport.to_be_bytes());
        u[2..4].copy_from_slice(&dport.to_be_bytes());
        u[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
        u[6..8].copy_from_slice(&[0, 0]);
        u[UDP_HDR..UDP_HDR + len].copy_from_slice(&self.pattern[..len]);
        let sum = pseudo + u32::from(sport) + u32::from(dport) + l4_len as u32 + self.prefix[len];
        let c = !fold(sum);
        let c = if c == 0 { 0xffff } else { c };
        u[6..8].copy_from_slice(&c.to_be_bytes());
        total
    }
}

/// What the parser found in a received frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Parsed {
    /// A TCP or UDP segment with valid checksums.
    Seg(Seg),
    /// Not IPv4 TCP/UDP (ARP, IPv6, other protocols, fragments): not ours.
    Foreign,
    /// IPv4 TCP/UDP that is truncated, inconsistent or fails a checksum.
    Malformed,
}

/// The fields of a received segment the state machines read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Seg {
    pub proto: u8,
    pub src: u32,
    pub dst: u32,
    pub sport: u16,
    pub dport: u16,
    /// TCP only.
    pub seq: u32,
    /// TCP only.
    pub ack: u32,
    /// TCP only.
    pub flags: u8,
    /// MSS option (TCP SYNs), 0 if absent.
    pub mss: u16,
    /// Payload bytes.
    pub len: u32,
}

#[inline]
fn be16(f: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*f.get(i)?, *f.get(i + 1)?]))
}

#[inline]
fn be32(f: &[u8], i: usize) -> Option<u32> {
    Some(u32::from_be_bytes([
        *f.get(i)?,
        *f.get(i + 1)?,
        *f.get(i + 2)?,
        *f.get(i + 3)?,
    ]))
}

/// Parse an Ethernet frame (no FCS, no VLAN tag). Never panics.
#[inline]
pub(crate) fn parse(f: &[u8]) -> Parsed {
    match parse_inner(f) {
        Ok(s) => Parsed::Seg(s),
        Err(p) => p,
    }
}

fn parse_inner(f: &[u8]) -> Result<Seg, Parsed> {
    use Parsed::{Foreign, Malformed};
    if be16(f, 12).ok_or(Foreign)? != 0x0800 {
        return Err(Foreign);
    }
    let vihl = *f.get(L3_OFF).ok_or(Malformed)?;
    let ihl = usize::from(vihl & 0xf) * 4;
    if vihl >> 4 != 4 {
        return Err(Foreign);
    }
    let proto = *f.get(L3_OFF + 9).ok_or(Malformed)?;
    if proto != PROTO_TCP && proto != PROTO_UDP {
        return Err(Foreign);
    }
    // Fragments (MF or an offset) are not ours: we never send any.
    if be16(f, L3_OFF + 6).ok_or(Malformed)? & 0x3fff != 0 {
        return Err(Foreign);
    }
    let total = usize::from(be16(f, L3_OFF + 2).ok_or(Malformed)?);
    if ihl < 20 || total < ihl || L3_OFF + total > f.len() {
        return Err(Malformed);
    }
    let ip = &f[L3_OFF..L3_OFF + total];
    if fold(wire::checksum::sum(&ip[..ihl])) != 0xffff {
        return Err(Malformed);
    }
    let src = be32(ip, 12).ok_or(Malformed)?;
    let dst = be32(ip, 16).ok_or(Malformed)?;
    let l4 = &ip[ihl..];
    let pseudo = w32(src) + w32(dst) + u32::from(proto) + l4.len() as u32;
    let ok = |l4: &[u8]| fold(pseudo + wire::checksum::sum(l4)) == 0xffff;
    let mut s = Seg {
        proto,
        src,
        dst,
        sport: be16(l4, 0).ok_or(Malformed)?,
        dport: be16(l4, 2).ok_or(Malformed)?,
        ..Seg::default()
    };
    if proto == PROTO_UDP {
        let ulen = usize::from(be16(l4, 4).ok_or(Malformed)?);
        if ulen < UDP_HDR || ulen != l4.len() {
            return Err(Malformed);
        }
        // A zero checksum means "none" in IPv4.
        if be16(l4, 6).ok_or(Malformed)? != 0 && !ok(l4) {
            return Err(Malformed);
        }
        s.len = (ulen - UDP_HDR) as u32;
        return Ok(s);
    }
    let doff = usize::from(*l4.get(12).ok_or(Malformed)? >> 4) * 4;
    if doff < TCP_HDR || doff > l4.len() || !ok(l4) {
        return Err(Malformed);
    }
    s.seq = be32(l4, 4).ok_or(Malformed)?;
    s.ack = be32(l4, 8).ok_or(Malformed)?;
    s.flags = *l4.get(13).ok_or(Malformed)?;
    s.len = (l4.len() - doff) as u32;
    if s.flags & flags::SYN != 0 {
        s.mss = mss_option(&l4[TCP_HDR..doff]);
    }
    Ok(s)
}

/// The MSS option's value in TCP options, 0 when absent or malformed.
fn mss_option(mut o: &[u8]) -> u16 {
    while let Some((&kind, rest)) = o.split_first() {
        match kind {
            0 => return 0,
            1 => o = rest,
            _ => {
                let Some(&len) = rest.first() else { return 0 };
                let len = usize::from(len);
                if len < 2 || len > o.len() {
                    return 0;
                }
                if kind == 2 && len == 4 {
                    return u16::from_be_bytes([o[2], o[3]]);
                }
                o = &o[len..];
            }
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::checksum::pseudo_v4;
    use wire::{EthernetFrame, Ipv4Packet, TcpPacket, UdpPacket};

    fn check_tcp(f: &[u8]) -> (u8, usize, Option<u16>) {
        let eth = EthernetFrame::new_checked(f).unwrap();
        let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
        assert!(ip.verify_checksum());
        assert!(ip.dont_frag());
        let t = TcpPacket::new_checked(ip.payload()).unwrap();
        let ps = pseudo_v4(ip.src_addr(), ip.dst_addr(), 6, ip.payload().len() as u16);
        assert!(t.verify_checksum(ps), "TCP checksum");
        (t.flags(), t.payload().len(), t.mss())
    }

    #[test]
    fn tcp_and_udp_frames_verify_and_parse_back() {
        let w = Writer::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 1, 1], 64);
        let mut buf = vec![0u8; 2048];
        for (fl, len, mss) in [
            (flags::SYN, 0, 1460u16),
            (flags::SYN | flags::ACK, 0, 536),
            (flags::ACK, 0, 0),
            (flags::ACK | flags::PSH, 1, 0),
            (flags::ACK, 1460, 0),
            (flags::FIN | flags::ACK, 0, 0),
            (flags::ACK, 777, 0),
        ] {
            let s = TcpFields {
                src: 0xc612_8001,
                dst: 0xc613_80ff,
                sport: 65535,
                dport: 80,
                seq: 0xffff_fff0,
                ack: 0x1234_5678,
                flags: fl,
                mss,
                len,
            };
            let n = w.tcp(&mut buf, &s);
            let (gf, gl, gm) = check_tcp(&buf[..n]);
            assert_eq!((gf, gl), (fl, len));
            assert_eq!(gm, (mss != 0).then_some(mss));
            let Parsed::Seg(p) = parse(&buf[..n]) else {
                panic!("not parsed")
            };
            assert_eq!(
                (p.src, p.dst, p.sport, p.dport, p.seq, p.ack, p.flags, p.mss, p.len),
                (s.src, s.dst, 65535, 80, s.seq, s.ack, fl, mss, len as u32)
            );
            // Any flipped bit is caught by a checksum (or makes the frame not ours).
            for i in [L3_OFF + 12, L4_OFF + 5, n - 1] {
                buf[i] ^= 0x10;
                assert_ne!(parse(&buf[..n]), Parsed::Seg(p), "byte {i}");
                buf[i] ^= 0x10;
            }
            assert_eq!(parse(&buf[..n - 1]), Parsed::Malformed, "truncated");
        }
        for len in [1usize, 100, MAX_PAYLOAD] {
            let n = w.udp(&mut buf, 1, 2, 3, 4, len);
            let eth = EthernetFrame::new_checked(&buf[..n]).unwrap();
            let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
            let u = UdpPacket::new_checked(ip.payload()).unwrap();
            assert!(u.verify_checksum(pseudo_v4(1, 2, 17, u.len())));
            assert_eq!(u.payload().len(), len);
            let Parsed::Seg(p) = parse(&buf[..n]) else {
                panic!("not parsed")
            };
            assert_eq!((p.proto, p.len, p.sport, p.dport), (17, len as u32, 3, 4));
        }
        assert_eq!(parse(&[]), Parsed::Foreign);
        assert_eq!(parse(&[0u8; 60]), Parsed::Foreign);
    }

    proptest::proptest! {
        /// The parser never panics and never reads out of bounds, whatever the bytes.
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..120), ipv4 in proptest::bool::ANY) {
            let mut b = bytes;
            if ipv4 && b.len() > 24 {
                b[12] = 8;
                b[13] = 0;
                b[14] = 0x45;
                b[23] = if b[0] & 1 == 0 { 6 } else { 17 };
            }
            let _ = parse(&b);
        }
    }
}
