//! The work a sender leaves to "the hardware" and a router must finish: L4 checksums left
//! unfinished (Linux's `CHECKSUM_PARTIAL`) and TCP/UDP super-frames to be cut into
//! segments (GSO). A sender behind a veth, a TAP or a virtio device hands over both by
//! default; Linux finishes them when it forwards (`skb_checksum_help`, `skb_segment`), and
//! so must a fast path.
//!
//! A partial checksum holds the folded sum of the pseudo header instead of the checksum;
//! completing it is the Internet checksum from the start of the transport header to the
//! end of the packet, with that field in place. Where the receiver is told (AF_PACKET's
//! virtio-net header) [`complete_at`] uses the sender's offsets. Where it is not (AF_XDP
//! has no such metadata), [`complete_if_partial`] recognises the mark: a checksum field
//! equal to the pseudo-header sum. A finished checksum equal to it by chance is recomputed
//! to the same value (the sum of the rest is then zero), so a correct packet is never
//! changed; a corrupt one keeps its bad checksum (routers do not repair L4 checksums) unless
//! its field happens to equal the mark, one chance in 65,536.

use crate::checksum::{fold, pseudo_v4, pseudo_v6, sum};
use crate::ipv6::{next_header, walk_ext_headers};
use crate::{Error, Result};

/// IP protocol numbers of the transports handled here.
const TCP: u8 = 6;
const UDP: u8 = 17;
/// Extension headers walked to find the transport header of an IPv6 packet.
const MAX_EXT: usize = 8;

/// The transport header of an unfragmented IP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Transport {
    /// IP protocol (TCP or UDP).
    proto: u8,
    /// Offset of the transport header from the start of the IP header.
    off: usize,
    /// End of the IP packet (total length), from the start of the IP header.
    end: usize,
    /// Partial sum of the pseudo header.
    pseudo: u32,
}

/// Offset of the checksum field within a transport header.
fn csum_field(proto: u8) -> Option<usize> {
    match proto {
        TCP => Some(16),
        UDP => Some(6),
        _ => None,
    }
}

/// Where the TCP or UDP header of `ip` (an IPv4 or IPv6 packet, possibly followed by
/// Ethernet padding) is; `None` for fragments, other protocols and malformed packets.
fn transport(ip: &[u8]) -> Option<Transport> {
    match ip.first()? >> 4 {
        4 => {
            let ihl = usize::from(ip.first()? & 0x0f) * 4;
            let end = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]));
            let frag = u16::from_be_bytes([*ip.get(6)?, *ip.get(7)?]);
            let proto = *ip.get(9)?;
            if ihl < 20 || end < ihl || end > ip.len() || frag & 0x3fff != 0 {
                return None;
            }
            csum_field(proto)?;
            let a = |i: usize| -> Option<u32> {
                Some(u32::from_be_bytes(ip.get(i..i + 4)?.try_into().ok()?))
            };
            let len = u16::try_from(end - ihl).ok()?;
            Some(Transport {
                proto,
                off: ihl,
                end,
                pseudo: pseudo_v4(a(12)?, a(16)?, proto, len),
            })
        }
        6 => {
            let end = 40 + usize::from(u16::from_be_bytes([*ip.get(4)?, *ip.get(5)?]));
            if end > ip.len() {
                return None;
            }
            let first = *ip.get(6)?;
            let (proto, off) = if csum_field(first).is_some() {
                (first, 40)
            } else {
                let w = walk_ext_headers(first, ip.get(40..end)?, MAX_EXT).ok()?;
                // A fragment header means the transport header is not whole here.
                if w.fragment.is_some() || w.upper_protocol == next_header::NO_NEXT {
                    return None;
                }
                (w.upper_protocol, 40 + w.upper_offset)
            };
            csum_field(proto)?;
            let src: [u8; 16] = ip.get(8..24)?.try_into().ok()?;
            let dst: [u8; 16] = ip.get(24..40)?.try_into().ok()?;
            Some(Transport {
                proto,
                off,
                end,
                pseudo: pseudo_v6(&src, &dst, proto, u32::try_from(end - off).ok()?),
            })
        }
        _ => None,
    }
}

/// The checksum to store for a transport segment whose sum (pseudo header included) is
/// `s`: its complement, with 0 sent as 0xffff (the same in ones'-complement arithmetic, and
/// for UDP 0 would mean "no checksum"), as Linux's `skb_checksum_help` does.
fn finish(s: u32) -> u16 {
    match !fold(s) {
        0 => 0xffff,
        c => c,
    }
}

/// Complete a checksum left partial by the sender: the Internet checksum of
/// `pkt[start..]`, written at `start + offset`, where the field already holds the
/// pseudo-header sum. Offsets are the sender's (a virtio-net header's `csum_start` and
/// `csum_offset`), relative to the start of `pkt`.
pub fn complete_at(pkt: &mut [u8], start: usize, offset: usize) -> Result<()> {
    let at = start.checked_add(offset).ok_or(Error::Malformed)?;
    if at.checked_add(2).is_none_or(|e| e > pkt.len()) {
        return Err(Error::Truncated);
    }
    let c = finish(sum(&pkt[start..]));
    pkt[at..at + 2].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

/// If the TCP or UDP checksum of the IP packet `ip` carries the mark of a partial checksum
/// (the folded pseudo-header sum), complete it and return true. Anything else (another
/// protocol, a fragment, a finished or a wrong checksum, a malformed packet) is left as it
/// is: false. Costs a pseudo-header sum per TCP/UDP packet, and a checksum of the segment
/// only for the partial ones.
pub fn complete_if_partial(ip: &mut [u8]) -> bool {
    let Some(t) = transport(ip) else {
        return false;
    };
    let Some(f) = csum_field(t.proto) else {
        return false;
    };
    let at = t.off + f;
    // The field must lie inside the transport segment, not in Ethernet padding after it.
    let Some(field) = ip.get(at..at + 2).filter(|_| at + 2 <= t.end) else {
        return false;
    };
    if u16::from_be_bytes([field[0], field[1]]) != fold(t.pseudo) {
        return false;
    }
    let c = finish(sum(&ip[t.off..t.end]));
    ip[at..at + 2].copy_from_slice(&c.to_be_bytes());
    true
}

/// Whether the TCP or UDP checksum of `ip` verifies (`None` when `ip` is not an unfragmented
/// TCP/UDP packet, or a UDP/IPv4 datagram sent without checksum). For tests and tools.
pub fn transport_checksum_ok(ip: &[u8]) -> Option<bool> {
    let t = transport(ip)?;
    let at = t.off + csum_field(t.proto)?;
    if at + 2 > t.end {
        return None;
    }
    if t.proto == UDP && ip.first()? >> 4 == 4 && ip.get(at..at + 2)? == [0, 0] {
        return None;
    }
    Some(fold(t.pseudo + sum(ip.get(t.off..t.end)?)) == 0xffff)
}

/// The transport of a super-frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GsoKind {
    /// TCP segmentation (TSO): segments of `mss` payload bytes with consecutive sequence
    /// numbers; FIN and PSH only on the last, CWR only on the first.
    Tcp,
    /// UDP segmentation (USO, `UDP_SEGMENT`): one datagram per `mss` bytes of payload.
    Udp,
}

/// At most this many segments from one super-frame (a 64 KiB frame at the IPv6 minimum
/// MSS is under 64K/1220 ≈ 54; a tiny MSS from a hostile or broken sender is refused).
pub const MAX_SEGMENTS: usize = 256;

/// How one super-frame is cut: the plan is checked once by [`Segmenter::new`], then
/// [`Segmenter::write`] builds each segment into a buffer of the caller's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segmenter {
    kind: GsoKind,
    /// True for IPv6.
    v6: bool,
    /// Offset of the transport header from the IP header.
    l4: usize,
    /// Bytes of IP + transport headers copied into every segment.
    hdr: usize,
    /// Payload bytes after the headers.
    payload: usize,
    /// Payload bytes per segment.
    mss: usize,
}

impl Segmenter {
    /// Plan the segmentation of `ip` (an IPv4 or IPv6 packet carrying `kind`) into segments
    /// of `mss` payload bytes. Errors name what does not fit: not TCP/UDP as announced
    /// ([`Error::Unsupported`]), headers or lengths that do not add up
    /// ([`Error::Truncated`], [`Error::BadLength`]), an MSS of 0 or one that would make
    /// more than [`MAX_SEGMENTS`] segments ([`Error::Malformed`]).
    pub fn new(ip: &[u8], kind: GsoKind, mss: u16) -> Result<Segmenter> {
        let t = transport(ip).ok_or(Error::Unsupported)?;
        let want = if kind == GsoKind::Tcp { TCP } else { UDP };
        if t.proto != want {
            return Err(Error::Unsupported);
        }
        let hlen = match kind {
            GsoKind::Tcp => {
                let doff = usize::from(*ip.get(t.off + 12).ok_or(Error::Truncated)? >> 4) * 4;
                if doff < 20 {
                    return Err(Error::BadHeaderLen);
                }
                doff
            }
            GsoKind::Udp => 8,
        };
        let hdr = t.off + hlen;
        if hdr > t.end {
            return Err(Error::Truncated);
        }
        let mss = usize::from(mss);
        let payload = t.end - hdr;
        if mss == 0 || payload.div_ceil(mss) > MAX_SEGMENTS {
            return Err(Error::Malformed);
        }
        Ok(Segmenter {
            kind,
            v6: ip[0] >> 4 == 6,
            l4: t.off,
            hdr,
            payload,
            mss,
        })
    }

    /// Number of segments (at least one).
    pub fn count(&self) -> usize {
        self.payload.div_ceil(self.mss).max(1)
    }

    /// Bytes of IP packet in segment `k`.
    pub fn len(&self, k: usize) -> usize {
        let start = (k * self.mss).min(self.payload);
        self.hdr + (self.payload - start).min(self.mss)
    }

    /// Whether the plan has no payload to cut (a super-frame of headers alone).
    pub fn is_empty(&self) -> bool {
        self.payload == 0
    }

    /// Build segment `k` of `ip` (the packet the plan was made from) at the start of `dst`:
    /// headers copied and fixed (IPv4 total length, identification + k and header
    /// checksum; IPv6 payload length; TCP sequence number and flags, or UDP length) and the
    /// transport checksum computed. Returns the segment's length. Errors when `k` is out of
    /// range or `dst` too small ([`Error::Truncated`]).
    pub fn write(&self, ip: &[u8], k: usize, dst: &mut [u8]) -> Result<usize> {
        if k >= self.count() {
            return Err(Error::Malformed);
        }
        let len = self.len(k);
        let start = self.hdr + k * self.mss;
        let chunk = len - self.hdr;
        let (Some(d), Some(h), Some(body)) = (
            dst.get_mut(..len),
            ip.get(..self.hdr),
            ip.get(start..start + chunk),
        ) else {
            return Err(Error::Truncated);
        };
        d[..self.hdr].copy_from_slice(h);
        d[self.hdr..].copy_from_slice(body);
        let l4len = len - self.l4;
        let pseudo = if self.v6 {
            d[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
            let src: [u8; 16] = d[8..24].try_into().map_err(|_| Error::Truncated)?;
            let dstaddr: [u8; 16] = d[24..40].try_into().map_err(|_| Error::Truncated)?;
            let proto = if self.kind == GsoKind::Tcp { TCP } else { UDP };
            pseudo_v6(&src, &dstaddr, proto, l4len as u32)
        } else {
            d[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            let id = u16::from_be_bytes([d[4], d[5]]).wrapping_add(k as u16);
            d[4..6].copy_from_slice(&id.to_be_bytes());
            d[10..12].copy_from_slice(&[0, 0]);
            let c = !fold(sum(&d[..self.l4]));
            d[10..12].copy_from_slice(&c.to_be_bytes());
            let a = |i: usize| u32::from_be_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]]);
            pseudo_v4(a(12), a(16), d[9], l4len as u16)
        };
        let l4 = self.l4;
        let field = match self.kind {
            GsoKind::Tcp => {
                let seq = u32::from_be_bytes([d[l4 + 4], d[l4 + 5], d[l4 + 6], d[l4 + 7]])
                    .wrapping_add((k * self.mss) as u32);
                d[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
                // FIN (0x01) and PSH (0x08) belong to the last segment, CWR (0x80) to the
                // first (RFC 3168 §6.1.2: set on one packet only).
                if k + 1 != self.count() {
                    d[l4 + 13] &= !0x09;
                }
                if k != 0 {
                    d[l4 + 13] &= !0x80;
                }
                l4 + 16
            }
            GsoKind::Udp => {
                d[l4 + 4..l4 + 6].copy_from_slice(&(l4len as u16).to_be_bytes());
                l4 + 6
            }
        };
        d[field..field + 2].copy_from_slice(&[0, 0]);
        let c = finish(pseudo + sum(&d[l4..]));
        d[field..field + 2].copy_from_slice(&c.to_be_bytes());
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::checksum;

    /// An IPv4 packet: 20-byte header (valid checksum), then `l4`.
    fn ip4(proto: u8, l4: &[u8]) -> Vec<u8> {
        let total = 20 + l4.len();
        let mut p = vec![
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0x12,
            0x34,
            0x40,
            0,
            64,
            proto,
            0,
            0,
            192,
            0,
            2,
            2,
            198,
            51,
            100,
            2,
        ];
        let c = checksum(&p);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p.extend_from_slice(l4);
        p
    }

    fn ip6(proto: u8, l4: &[u8]) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0, 0, 0, proto, 64];
        p[4..6].copy_from_slice(&(l4.len() as u16).to_be_bytes());
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        p.extend_from_slice(l4);
        p
    }

    fn udp(payload: &[u8]) -> Vec<u8> {
        let len = 8 + payload.len();
        let mut u = vec![0x30, 0x39, 0x00, 0x35, (len >> 8) as u8, len as u8, 0, 0];
        u.extend_from_slice(payload);
        u
    }

    fn tcp(seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut t = vec![0x9c, 0x40, 0x00, 0x50];
        t.extend_from_slice(&seq.to_be_bytes());
        t.extend_from_slice(&[0, 0, 0, 1, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        t.extend_from_slice(payload);
        t
    }

    /// Put the pseudo-header sum in the checksum field, as a sender with checksum offload
    /// does.
    fn make_partial(ip: &mut [u8]) {
        let t = transport(ip).unwrap();
        let at = t.off + csum_field(t.proto).unwrap();
        ip[at..at + 2].copy_from_slice(&fold(t.pseudo).to_be_bytes());
    }

    fn finish_properly(ip: &mut [u8]) {
        let t = transport(ip).unwrap();
        let at = t.off + csum_field(t.proto).unwrap();
        ip[at..at + 2].copy_from_slice(&[0, 0]);
        let c = finish(t.pseudo + sum(&ip[t.off..t.end]));
        ip[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }

    #[test]
    fn partial_udp_and_tcp_are_completed_v4_and_v6() {
        let payloads: [&[u8]; 3] = [b"", b"x", b"hello, partial checksum"];
        for pl in payloads {
            for mut p in [
                ip4(UDP, &udp(pl)),
                ip6(UDP, &udp(pl)),
                ip4(TCP, &tcp(7, 0x18, pl)),
                ip6(TCP, &tcp(7, 0x18, pl)),
            ] {
                make_partial(&mut p);
                assert_eq!(transport_checksum_ok(&p), Some(false));
                let mut want = p.clone();
                finish_properly(&mut want);
                assert!(complete_if_partial(&mut p));
                assert_eq!(transport_checksum_ok(&p), Some(true));
                assert_eq!(p, want);
            }
        }
    }

    #[test]
    fn finished_wrong_and_other_packets_are_left_alone() {
        let mut good = ip4(UDP, &udp(b"abc"));
        finish_properly(&mut good);
        let before = good.clone();
        assert!(!complete_if_partial(&mut good));
        assert_eq!(good, before);
        // A corrupt checksum stays corrupt: a router does not repair it.
        let mut bad = before.clone();
        bad[26] ^= 0x55;
        let b2 = bad.clone();
        assert!(!complete_if_partial(&mut bad));
        assert_eq!(bad, b2);
        // Fragments, ICMP, junk.
        let mut frag = ip4(UDP, &udp(b"abc"));
        frag[6] = 0x20;
        make_partial_unchecked(&mut frag);
        let f2 = frag.clone();
        assert!(!complete_if_partial(&mut frag));
        assert_eq!(frag, f2);
        assert!(!complete_if_partial(&mut ip4(1, &[8, 0, 0, 0, 0, 0, 0, 0])));
        // A TCP segment too short to hold its checksum field, padded to look long enough:
        // the padding is not touched.
        let mut short = ip4(TCP, &[0u8; 10]);
        short.extend_from_slice(&[0u8; 20]);
        let s2 = short.clone();
        assert!(!complete_if_partial(&mut short));
        assert_eq!(short, s2);
        assert_eq!(transport_checksum_ok(&short), None);
        for n in 0..60 {
            let mut junk = vec![0x45u8; n];
            let _ = complete_if_partial(&mut junk);
            let mut junk = vec![0x60u8; n];
            let _ = complete_if_partial(&mut junk);
        }
    }

    /// The mark written by hand (the fragment is refused by `transport`).
    fn make_partial_unchecked(ip: &mut [u8]) {
        let a = |i: usize| u32::from_be_bytes([ip[i], ip[i + 1], ip[i + 2], ip[i + 3]]);
        let len = (ip.len() - 20) as u16;
        let p = pseudo_v4(a(12), a(16), UDP, len);
        ip[26..28].copy_from_slice(&fold(p).to_be_bytes());
    }

    #[test]
    fn a_finished_checksum_equal_to_the_mark_is_recomputed_to_itself() {
        // Search for a payload whose correct checksum equals the pseudo sum.
        for i in 0u32..200_000 {
            let mut p = ip4(UDP, &udp(&i.to_be_bytes()));
            finish_properly(&mut p);
            let t = transport(&p).unwrap();
            if u16::from_be_bytes([p[26], p[27]]) == fold(t.pseudo) {
                let before = p.clone();
                assert!(complete_if_partial(&mut p));
                assert_eq!(p, before);
                return;
            }
        }
        panic!("no collision found in the search range");
    }

    #[test]
    fn complete_at_uses_the_senders_offsets_and_refuses_outside_ones() {
        let mut p = ip4(TCP, &tcp(1, 0x10, b"data"));
        make_partial(&mut p);
        let mut frame = vec![0u8; 14];
        frame.extend_from_slice(&p);
        complete_at(&mut frame, 14 + 20, 16).unwrap();
        assert_eq!(transport_checksum_ok(&frame[14..]), Some(true));
        assert_eq!(complete_at(&mut frame, 10_000, 16), Err(Error::Truncated));
        assert_eq!(
            complete_at(&mut frame, 14, usize::MAX),
            Err(Error::Malformed)
        );
    }

    #[test]
    fn tcp_super_frame_is_cut_like_the_kernel_cuts_it() {
        let payload: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        for v6 in [false, true] {
            let mut p = if v6 {
                ip6(TCP, &tcp(1000, 0x80 | 0x18 | 0x01, &payload))
            } else {
                ip4(TCP, &tcp(1000, 0x80 | 0x18 | 0x01, &payload))
            };
            make_partial(&mut p);
            let s = Segmenter::new(&p, GsoKind::Tcp, 1448).unwrap();
            assert_eq!(s.count(), 4);
            let mut got = Vec::new();
            for k in 0..s.count() {
                let mut buf = [0u8; 2048];
                let n = s.write(&p, k, &mut buf).unwrap();
                let seg = &buf[..n];
                assert_eq!(
                    transport_checksum_ok(seg),
                    Some(true),
                    "v6 {v6} segment {k}"
                );
                let t = transport(seg).unwrap();
                let tcp = &seg[t.off..];
                let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
                assert_eq!(seq, 1000 + (k * 1448) as u32);
                let flags = tcp[13];
                assert_eq!(flags & 0x80 != 0, k == 0, "CWR on the first only");
                assert_eq!(flags & 0x09 != 0, k == 3, "FIN/PSH on the last only");
                assert_eq!(flags & 0x10, 0x10, "ACK everywhere");
                if v6 {
                    assert_eq!(usize::from(u16::from_be_bytes([seg[4], seg[5]])), n - 40);
                } else {
                    assert_eq!(usize::from(u16::from_be_bytes([seg[2], seg[3]])), n);
                    assert_eq!(u16::from_be_bytes([seg[4], seg[5]]), 0x1234 + k as u16);
                    assert_eq!(checksum(&seg[..20]), 0);
                }
                got.extend_from_slice(&tcp[20..]);
            }
            assert_eq!(got, payload);
        }
    }

    #[test]
    fn udp_super_frame_becomes_datagrams() {
        let payload = vec![0xabu8; 3000];
        let p = ip4(UDP, &udp(&payload));
        let s = Segmenter::new(&p, GsoKind::Udp, 1400).unwrap();
        assert_eq!(s.count(), 3);
        let mut total = 0;
        for k in 0..3 {
            let mut buf = [0u8; 2048];
            let n = s.write(&p, k, &mut buf).unwrap();
            let seg = &buf[..n];
            assert_eq!(transport_checksum_ok(seg), Some(true));
            let ulen = usize::from(u16::from_be_bytes([seg[24], seg[25]]));
            assert_eq!(ulen, n - 20);
            total += ulen - 8;
        }
        assert_eq!(total, 3000);
    }

    #[test]
    fn bad_plans_are_refused_with_a_reason() {
        let p = ip4(UDP, &udp(&[0u8; 3000]));
        assert_eq!(
            Segmenter::new(&p, GsoKind::Tcp, 1400),
            Err(Error::Unsupported)
        );
        assert_eq!(Segmenter::new(&p, GsoKind::Udp, 0), Err(Error::Malformed));
        assert_eq!(Segmenter::new(&p, GsoKind::Udp, 8), Err(Error::Malformed));
        assert_eq!(
            Segmenter::new(&ip4(1, &[0; 8]), GsoKind::Udp, 100),
            Err(Error::Unsupported)
        );
        let s = Segmenter::new(&p, GsoKind::Udp, 1400).unwrap();
        assert_eq!(s.write(&p, 3, &mut [0u8; 2048]), Err(Error::Malformed));
        assert_eq!(s.write(&p, 0, &mut [0u8; 100]), Err(Error::Truncated));
        // Random bytes never panic.
        let mut x = 0x1234_5678u32;
        for _ in 0..2000 {
            let n = (x % 200) as usize;
            let mut b = vec![0u8; n];
            for v in b.iter_mut() {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *v = x as u8;
            }
            if let Some(f) = b.first_mut() {
                *f = if x & 1 == 0 { 0x45 } else { 0x60 };
            }
            for kind in [GsoKind::Tcp, GsoKind::Udp] {
                if let Ok(s) = Segmenter::new(&b, kind, (x % 64) as u16 + 1) {
                    for k in 0..s.count() {
                        let _ = s.write(&b, k, &mut [0u8; 256]);
                    }
                }
            }
            let _ = complete_if_partial(&mut b);
            let _ = transport_checksum_ok(&b);
        }
    }
}
