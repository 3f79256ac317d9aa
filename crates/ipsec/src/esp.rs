//! ESP encapsulation and decapsulation in place (RFC 4303), in tunnel and transport mode,
//! with UDP encapsulation for NAT traversal (RFC 3948).
//!
//! The packet lies in a frame buffer with headroom before it and tailroom after it (the
//! data plane leaves `HEADROOM` = 128 bytes in front). [`encrypt`] writes the outer IP
//! header (tunnel) or moves the packet's own (transport), the UDP header (NAT-T), the ESP
//! header and IV in front of the payload, and the padding, pad length, next header and ICV
//! after it; the payload is encrypted where it lies. [`decrypt`] reverses it and returns
//! where the inner packet now lies. Nothing is allocated, and no input makes either panic.
//!
//! Tunnel mode: the outer header is built from the SA's endpoints: TTL / hop limit 64,
//! DSCP and ECN copied from the inner packet (RFC 6040 normal mode), the outer IPv4 DF bit
//! per the SA's [`Df`] policy, the identification from a per-SA counter. On decapsulation
//! the outer ECN is combined into the inner header as RFC 6040 §4.2 says (CE over Not-ECT
//! is dropped). Extra bytes after the inner packet (TFC padding, RFC 4303 §2.7) are
//! dropped. The outer addresses are not checked against the SA: finding the SA (by SPI,
//! and destination) is the caller's.
//!
//! Transport mode: the packet must be whole (not a fragment). For IPv6, ESP goes after
//! the hop-by-hop and routing headers, which stay in the clear; any other extension header
//! (destination options included) is encrypted with the payload. With NAT-T, the TCP/UDP
//! checksums of the inner packet are not fixed up for the NAT (RFC 3948 §3.1.2): the
//! caller must, or use tunnel mode.
//!
//! The outer header of a received packet has been checked by IP input (checksum, length,
//! addresses); here only what ESP needs is read, each access checked.

use wire::checksum::{checksum, fold, pseudo_v6, sum, update16};

use crate::error::EspError;
use crate::sa::{Df, Endpoints, Sa, State};
use crate::suite::ESP_HDR;

/// The UDP port of NAT-T (RFC 3948).
pub const NATT_PORT: u16 = 4500;

const PROTO_IPIP: u8 = 4;
const PROTO_UDP: u8 = 17;
const PROTO_IPV6: u8 = 41;
const PROTO_ESP: u8 = 50;
const PROTO_NONE: u8 = 59;
const TTL: u8 = 64;
const UDP_HDR: usize = 8;

/// Where a decapsulated packet lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inner {
    /// Offset of its IP header in the buffer.
    pub start: usize,
    /// Its length.
    pub len: usize,
    /// ESP's next header: 4 (IPv4) or 41 (IPv6) in tunnel mode, the transport protocol in
    /// transport mode (also written into the IP header).
    pub next_header: u8,
}

/// What a UDP datagram to the NAT-T port holds (RFC 3948 §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UdpPayload {
    /// A NAT keepalive: one 0xFF byte. Drop.
    Keepalive,
    /// IKE: the non-ESP marker (four zero bytes). For the IKE daemon.
    NonEsp,
    /// ESP.
    Esp,
}

/// Classifies the payload of a UDP datagram to port 4500.
pub fn classify_udp(payload: &[u8]) -> UdpPayload {
    match payload {
        [0xff] => UdpPayload::Keepalive,
        [0, 0, 0, 0, ..] => UdpPayload::NonEsp,
        _ => UdpPayload::Esp,
    }
}

fn be16(b: &[u8], at: usize) -> Result<u16, EspError> {
    match b.get(at..at + 2) {
        Some(&[x, y]) => Ok(u16::from_be_bytes([x, y])),
        _ => Err(EspError::Truncated),
    }
}

fn be32(b: &[u8], at: usize) -> Result<u32, EspError> {
    Ok(u32::from(be16(b, at)?) << 16 | u32::from(be16(b, at + 2)?))
}

fn byte(b: &[u8], at: usize) -> Result<u8, EspError> {
    b.get(at).copied().ok_or(EspError::Truncated)
}

/// Writes `v` at `at`; the caller has checked the room.
fn put(b: &mut [u8], at: usize, v: &[u8]) -> Result<(), EspError> {
    b.get_mut(at..at + v.len())
        .ok_or(EspError::TooBig)?
        .copy_from_slice(v);
    Ok(())
}

fn set(b: &mut [u8], at: usize, v: u8) -> Result<(), EspError> {
    *b.get_mut(at).ok_or(EspError::TooBig)? = v;
    Ok(())
}

/// The IP header of a packet, as ESP needs it.
#[derive(Clone, Copy, Debug)]
struct Ip {
    v6: bool,
    /// Bytes of header before where ESP goes (IPv6: with hop-by-hop and routing headers).
    hdr_len: usize,
    /// Offset of the next-header byte that names what follows `hdr_len`.
    nh_at: usize,
    /// That next header.
    proto: u8,
    /// The packet's length by its header (at most the bytes given).
    total: usize,
    /// DSCP and ECN (IPv4 TOS, IPv6 traffic class).
    tos: u8,
    /// IPv4 DF (true for IPv6).
    df: bool,
    /// A fragment.
    frag: bool,
}

/// Reads an IP header; `walk` lists the IPv6 extension headers to step over.
fn parse_ip(p: &[u8], walk: &[u8]) -> Option<Ip> {
    let first = *p.first()?;
    match first >> 4 {
        4 => {
            let ihl = usize::from(first & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([*p.get(2)?, *p.get(3)?]));
            if ihl < 20 || total < ihl || total > p.len() {
                return None;
            }
            let frag = u16::from_be_bytes([*p.get(6)?, *p.get(7)?]);
            Some(Ip {
                v6: false,
                hdr_len: ihl,
                nh_at: 9,
                proto: *p.get(9)?,
                total,
                tos: *p.get(1)?,
                df: frag & 0x4000 != 0,
                frag: frag & 0x3fff != 0,
            })
        }
        6 => {
            let plen = usize::from(u16::from_be_bytes([*p.get(4)?, *p.get(5)?]));
            let total = 40 + plen;
            if total > p.len() {
                return None;
            }
            let tos = (first << 4) | (*p.get(1)? >> 4);
            let (mut nh_at, mut at) = (6, 40);
            let mut proto = *p.get(6)?;
            while walk.contains(&proto) {
                nh_at = at;
                proto = *p.get(at)?;
                at += (usize::from(*p.get(at + 1)?) + 1) * 8;
                if at > total {
                    return None;
                }
            }
            Some(Ip {
                v6: true,
                hdr_len: at,
                nh_at,
                proto,
                total,
                tos,
                df: true,
                frag: proto == 44,
            })
        }
        _ => None,
    }
}

/// Encapsulates the IP packet at `buf[start..start + len]` for `sa` (outbound), in place.
/// Returns where the ESP packet (from its outer IP header) now lies: `(start, len)`.
///
/// Needs headroom for the outer IP header (tunnel), UDP header (NAT-T), ESP header and
/// IV, and tailroom for up to a block of padding, 2 trailer bytes and the ICV
/// ([`Sa::max_overhead`] in all); otherwise [`EspError::TooBig`], with the packet
/// untouched. Trailing bytes beyond the length in the packet's IP header are dropped.
pub fn encrypt(
    sa: &mut Sa,
    buf: &mut [u8],
    start: usize,
    len: usize,
) -> Result<(usize, usize), EspError> {
    let r = encap(sa, buf, start, len);
    match r {
        Ok(_) => {
            sa.packets += 1;
            sa.bytes += len as u64;
        }
        Err(e) => sa.count(e),
    }
    r
}

fn encap(
    sa: &mut Sa,
    buf: &mut [u8],
    start: usize,
    len: usize,
) -> Result<(usize, usize), EspError> {
    let State::Out { seq, ip_id } = &mut sa.state else {
        return Err(EspError::WrongDirection);
    };
    let pkt = start
        .checked_add(len)
        .and_then(|end| buf.get(start..end))
        .ok_or(EspError::BadInner)?;
    let tunnel = sa.tunnel;
    let l3 = parse_ip(pkt, &[0, 43]).ok_or(EspError::BadInner)?;
    let end = start + l3.total;
    let (payload_off, nh) = match tunnel {
        Some(_) => (0, if l3.v6 { PROTO_IPV6 } else { PROTO_IPIP }),
        None if l3.frag => return Err(EspError::BadInner),
        None => (l3.hdr_len, l3.proto),
    };
    let t = &sa.transform;
    let align = t.align();
    let payload_len = l3.total - payload_off;
    let pad = (align - (payload_len + 2) % align) % align;
    let esp_front = ESP_HDR + t.iv_len();
    let udp = if sa.natt.is_some() { UDP_HDR } else { 0 };
    let (outer_len, outer_v6) = match tunnel {
        Some(Endpoints::V4 { .. }) => (20, false),
        Some(Endpoints::V6 { .. }) => (40, true),
        None => (l3.hdr_len, l3.v6),
    };
    // Transport mode moves the packet's header forward by what goes between it and the
    // payload; tunnel mode writes a new one in front.
    let front = match tunnel {
        Some(_) => outer_len + udp + esp_front,
        None => udp + esp_front,
    };
    let new_start = start.checked_sub(front).ok_or(EspError::TooBig)?;
    let new_end = end + pad + 2 + t.icv_len();
    if new_end > buf.len() {
        return Err(EspError::TooBig);
    }
    let new_len = new_end - new_start;
    let ip_len = if outer_v6 { new_len - 40 } else { new_len };
    let ip_len = u16::try_from(ip_len).map_err(|_| EspError::TooBig)?;
    let next = if sa.esn {
        seq.checked_add(1)
    } else {
        Some(*seq + 1).filter(|&n| n <= u64::from(u32::MAX))
    }
    .ok_or(EspError::SequenceOverflow)?;

    // Trailer: padding 1, 2, 3, ..., its length, the next header.
    let trailer = buf.get_mut(end..end + pad + 2).ok_or(EspError::TooBig)?;
    for (i, b) in trailer.iter_mut().enumerate() {
        *b = i as u8 + 1;
    }
    set(buf, end + pad, pad as u8)?;
    set(buf, end + pad + 1, nh)?;

    if tunnel.is_none() {
        // In range: new_start + hdr_len < start + hdr_len <= end <= buf.len().
        buf.copy_within(start..start + l3.hdr_len, new_start);
    }
    let udp_at = new_start + outer_len;
    let esp_at = udp_at + udp;
    put(buf, esp_at, &sa.spi.to_be_bytes())?;
    put(buf, esp_at + 4, &(next as u32).to_be_bytes())?;
    let esp = buf.get_mut(esp_at..new_end).ok_or(EspError::TooBig)?;
    t.seal(next, sa.esn, esp)?;

    let proto = if udp > 0 { PROTO_UDP } else { PROTO_ESP };
    match tunnel {
        Some(Endpoints::V4 { src, dst }) => {
            let df = match sa.df {
                Df::Copy => l3.df,
                Df::Set => true,
                Df::Clear => false,
            };
            let [l0, l1] = ip_len.to_be_bytes();
            let [i0, i1] = ip_id.to_be_bytes();
            let f0 = if df { 0x40 } else { 0 };
            let mut h = [
                0x45, l3.tos, l0, l1, i0, i1, f0, 0, TTL, proto, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            ];
            h[12..16].copy_from_slice(&src);
            h[16..20].copy_from_slice(&dst);
            let c = checksum(&h).to_be_bytes();
            h[10..12].copy_from_slice(&c);
            put(buf, new_start, &h)?;
            *ip_id = ip_id.wrapping_add(1);
        }
        Some(Endpoints::V6 { src, dst }) => {
            let [l0, l1] = ip_len.to_be_bytes();
            let mut h = [0u8; 40];
            h[..8].copy_from_slice(&[0x60 | l3.tos >> 4, l3.tos << 4, 0, 0, l0, l1, proto, TTL]);
            h[8..24].copy_from_slice(&src);
            h[24..40].copy_from_slice(&dst);
            put(buf, new_start, &h)?;
        }
        None if outer_v6 => {
            put(buf, new_start + 4, &ip_len.to_be_bytes())?;
            set(buf, new_start + l3.nh_at, proto)?;
        }
        None => {
            put(buf, new_start + 2, &ip_len.to_be_bytes())?;
            set(buf, new_start + 9, proto)?;
            put(buf, new_start + 10, &[0, 0])?;
            let h = buf
                .get(new_start..new_start + outer_len)
                .ok_or(EspError::TooBig)?;
            let c = checksum(h).to_be_bytes();
            put(buf, new_start + 10, &c)?;
        }
    }
    if let Some(n) = sa.natt {
        let ulen = u16::try_from(new_len - outer_len).map_err(|_| EspError::TooBig)?;
        put(buf, udp_at, &n.src_port.to_be_bytes())?;
        put(buf, udp_at + 2, &n.dst_port.to_be_bytes())?;
        put(buf, udp_at + 4, &ulen.to_be_bytes())?;
        put(buf, udp_at + 6, &[0, 0])?;
        if outer_v6 {
            // IPv6 forbids a zero UDP checksum outside tunnels that negotiated it
            // (RFC 6935): compute it.
            let ip = buf.get(new_start..new_end).ok_or(EspError::TooBig)?;
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s.copy_from_slice(ip.get(8..24).ok_or(EspError::TooBig)?);
            d.copy_from_slice(ip.get(24..40).ok_or(EspError::TooBig)?);
            let seg = ip.get(outer_len..).ok_or(EspError::TooBig)?;
            let c = !fold(pseudo_v6(&s, &d, PROTO_UDP, u32::from(ulen)) + sum(seg));
            let c = if c == 0 { 0xffff } else { c };
            put(buf, udp_at + 6, &c.to_be_bytes())?;
        }
    }
    *seq = next;
    Ok((new_start, new_len))
}

/// Decapsulates the ESP packet at `buf[start..start + len]` (from its outer IP header)
/// for `sa` (inbound), in place, and returns where the inner packet lies.
///
/// The order is RFC 4303 §3.4: length checks, SPI, replay check, ICV, then the replay
/// window moves, then padding and the inner packet are checked. A dummy packet is
/// [`EspError::Dummy`] and a NAT-T keepalive [`EspError::NatKeepalive`]: drop those
/// silently. On an error, the bytes of the packet may have been changed.
pub fn decrypt(sa: &mut Sa, buf: &mut [u8], start: usize, len: usize) -> Result<Inner, EspError> {
    let r = decap(sa, buf, start, len);
    match r {
        Ok(i) => {
            sa.packets += 1;
            sa.bytes += i.len as u64;
        }
        Err(e) => sa.count(e),
    }
    r
}

/// RFC 6040 §4.2: the inner ECN field after decapsulation, or a drop.
fn ecn_decap(inner: u8, outer: u8) -> Result<u8, EspError> {
    match (inner, outer) {
        (0, 3) => Err(EspError::EcnDrop),
        (_, 3) => Ok(3),
        (2, 1) => Ok(1),
        (i, _) => Ok(i),
    }
}

fn decap(sa: &mut Sa, buf: &mut [u8], start: usize, len: usize) -> Result<Inner, EspError> {
    let State::In { replay } = &mut sa.state else {
        return Err(EspError::WrongDirection);
    };
    let pkt = start
        .checked_add(len)
        .and_then(|end| buf.get(start..end))
        .ok_or(EspError::Truncated)?;
    let outer = parse_ip(pkt, &[0, 43, 60]).ok_or(EspError::Truncated)?;
    if outer.frag {
        return Err(EspError::BadOuter);
    }
    let (esp_off, esp_end) = match (outer.proto, sa.natt) {
        (PROTO_ESP, None) => (outer.hdr_len, outer.total),
        (PROTO_UDP, Some(_)) => {
            let u = outer.hdr_len;
            let ulen = usize::from(be16(pkt, u + 4)?);
            if ulen < UDP_HDR || u + ulen > outer.total {
                return Err(EspError::Truncated);
            }
            let payload = pkt.get(u + UDP_HDR..u + ulen).ok_or(EspError::Truncated)?;
            match classify_udp(payload) {
                UdpPayload::Keepalive => return Err(EspError::NatKeepalive),
                UdpPayload::NonEsp => return Err(EspError::NonEsp),
                UdpPayload::Esp => (u + UDP_HDR, u + ulen),
            }
        }
        _ => return Err(EspError::BadOuter),
    };
    let t = &sa.transform;
    let (iv, icv) = (t.iv_len(), t.icv_len());
    if esp_end - esp_off < ESP_HDR + iv + 2 + icv {
        return Err(EspError::Truncated);
    }
    if be32(pkt, esp_off)? != sa.spi {
        return Err(EspError::SpiMismatch);
    }
    let low = be32(pkt, esp_off + 4)?;
    let seq = if sa.esn {
        replay.infer(low).ok_or(EspError::Replayed)?
    } else {
        u64::from(low)
    };
    if !replay.check(seq) {
        return Err(EspError::Replayed);
    }
    let esp = buf
        .get_mut(start + esp_off..start + esp_end)
        .ok_or(EspError::Truncated)?;
    t.open(seq, sa.esn, esp)?;
    if !replay.update(seq) {
        return Err(EspError::Replayed);
    }

    let pt_start = start + esp_off + ESP_HDR + iv;
    let pt = buf
        .get(pt_start..start + esp_end - icv)
        .ok_or(EspError::Truncated)?;
    let (data_len, pad, nh) = match pt {
        [.., pad, nh] => {
            let data_len = pt
                .len()
                .checked_sub(2 + usize::from(*pad))
                .ok_or(EspError::BadPadding)?;
            (data_len, *pad, *nh)
        }
        _ => return Err(EspError::Truncated),
    };
    let padding = pt
        .get(data_len..data_len + usize::from(pad))
        .ok_or(EspError::BadPadding)?;
    if padding.iter().enumerate().any(|(i, &b)| b != i as u8 + 1) {
        return Err(EspError::BadPadding);
    }
    if nh == PROTO_NONE {
        return Err(EspError::Dummy);
    }

    if sa.tunnel.is_some() {
        let data = pt.get(..data_len).ok_or(EspError::BadInner)?;
        let inner = parse_ip(data, &[]).ok_or(EspError::BadInner)?;
        if (nh, inner.v6) != (PROTO_IPIP, false) && (nh, inner.v6) != (PROTO_IPV6, true) {
            return Err(EspError::BadInner);
        }
        let ecn = ecn_decap(inner.tos & 3, outer.tos & 3)?;
        if ecn != inner.tos & 3 {
            if inner.v6 {
                let b1 = byte(buf, pt_start + 1)?;
                set(buf, pt_start + 1, (b1 & !0x30) | ecn << 4)?;
            } else {
                let b0 = byte(buf, pt_start)?;
                let tos = (inner.tos & !3) | ecn;
                let old = be16(buf, pt_start + 10)?;
                let c = update16(
                    old,
                    u16::from_be_bytes([b0, inner.tos]),
                    u16::from_be_bytes([b0, tos]),
                );
                set(buf, pt_start + 1, tos)?;
                put(buf, pt_start + 10, &c.to_be_bytes())?;
            }
        }
        return Ok(Inner {
            start: pt_start,
            len: inner.total,
            next_header: nh,
        });
    }

    // Transport: the IP header moves back against the payload.
    let hdr = outer.hdr_len;
    let new_start = pt_start - hdr;
    // In range: start + hdr <= pt_start - hdr + hdr = pt_start <= buf.len().
    buf.copy_within(start..start + hdr, new_start);
    let new_len = hdr + data_len;
    let l = u16::try_from(new_len).map_err(|_| EspError::BadInner)?;
    if outer.v6 {
        put(buf, new_start + 4, &(l - 40).to_be_bytes())?;
        set(buf, new_start + outer.nh_at, nh)?;
    } else {
        put(buf, new_start + 2, &l.to_be_bytes())?;
        set(buf, new_start + 9, nh)?;
        put(buf, new_start + 10, &[0, 0])?;
        let h = buf
            .get(new_start..new_start + hdr)
            .ok_or(EspError::Truncated)?;
        let c = checksum(h).to_be_bytes();
        put(buf, new_start + 10, &c)?;
    }
    Ok(Inner {
        start: new_start,
        len: new_len,
        next_header: nh,
    })
}

/// One packet of a batch: its buffer, where its IP packet lies, and what became of it.
#[derive(Debug)]
pub struct Packet<'a> {
    /// The frame buffer, with headroom and tailroom around the packet.
    pub buf: &'a mut [u8],
    /// Offset of the IP header (updated on success).
    pub start: usize,
    /// Length of the IP packet (updated on success).
    pub len: usize,
    /// After decryption: ESP's next header.
    pub next_header: u8,
    /// The outcome.
    pub result: Result<(), EspError>,
}

impl<'a> Packet<'a> {
    /// The packet at `buf[start..start + len]`, not yet processed.
    pub fn new(buf: &'a mut [u8], start: usize, len: usize) -> Packet<'a> {
        Packet {
            buf,
            start,
            len,
            next_header: 0,
            result: Ok(()),
        }
    }
}

/// [`encrypt`] for each packet of a batch for one SA (the data plane groups its vector
/// by SA); counters are added once per batch. Returns how many were encrypted.
pub fn encrypt_batch(sa: &mut Sa, pkts: &mut [Packet<'_>]) -> usize {
    let (mut ok, mut bytes) = (0u64, 0u64);
    for p in pkts.iter_mut() {
        match encap(sa, p.buf, p.start, p.len) {
            Ok((s, l)) => {
                ok += 1;
                bytes += p.len as u64;
                (p.start, p.len, p.result) = (s, l, Ok(()));
            }
            Err(e) => {
                sa.count(e);
                p.result = Err(e);
            }
        }
    }
    sa.packets += ok;
    sa.bytes += bytes;
    ok as usize
}

/// [`decrypt`] for each packet of a batch for one SA; counters are added once per batch.
/// Returns how many were decrypted.
pub fn decrypt_batch(sa: &mut Sa, pkts: &mut [Packet<'_>]) -> usize {
    let (mut ok, mut bytes) = (0u64, 0u64);
    for p in pkts.iter_mut() {
        match decap(sa, p.buf, p.start, p.len) {
            Ok(i) => {
                ok += 1;
                bytes += i.len as u64;
                (p.start, p.len, p.next_header, p.result) = (i.start, i.len, i.next_header, Ok(()));
            }
            Err(e) => {
                sa.count(e);
                p.result = Err(e);
            }
        }
    }
    sa.packets += ok;
    sa.bytes += bytes;
    ok as usize
}

#[cfg(test)]
mod tests;
