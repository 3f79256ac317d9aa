//! Reading an IPv4 packet's tuple for NAT, and rewriting it in place with incremental
//! checksum updates (RFC 1624): the IP header checksum, the TCP or UDP checksum (its
//! pseudo header holds the addresses), the ICMP checksum for an echo identifier. An ICMP
//! error's quoted header is translated too (addresses, ports or identifier, its own
//! checksums where the quote holds them), and the ICMP checksum of the error is then
//! computed afresh (errors are small: at most 576 bytes from a conforming sender).
//!
//! Nothing here panics on any input: every access is checked, and a packet too short for
//! what it claims is reported as [`Malformed`].

use wire::checksum::{checksum, update16, update32};

use super::table::{proto, Key4};

/// A packet NAT cannot read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Malformed;

/// Where a packet lies among the fragments of its datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frag {
    /// Not fragmented.
    Whole,
    /// The first fragment (offset 0, more to come): it has the transport header.
    First,
    /// A later fragment: no transport header; it follows its first fragment's translation.
    Later,
}

/// An ICMP error's quoted packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quoted {
    /// Offset of the quoted IP header from the outer IP header.
    pub at: usize,
    /// Its tuple, as it was sent.
    pub key: Key4,
}

/// What NAT reads of an IPv4 packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet4 {
    /// Its tuple (ports zero for a later fragment and for protocols without them; an ICMP
    /// echo's identifier in both ports; an ICMP error: zero ports, see [`Packet4::error`]).
    pub key: Key4,
    /// IP header length.
    pub ihl: usize,
    /// IP total length.
    pub total: usize,
    /// Fragment position.
    pub frag: Frag,
    /// IP identification (the fragments' key).
    pub id: u16,
    /// TCP flags (0 otherwise).
    pub tcp_flags: u8,
    /// ICMP type (ICMP only).
    pub icmp_type: u8,
    /// The quoted packet of an ICMP error.
    pub error: Option<Quoted>,
}

/// ICMP echo request and reply.
const ECHO_REPLY: u8 = 0;
const ECHO_REQUEST: u8 = 8;

/// Whether an ICMP type is an error that quotes a packet.
fn is_error(t: u8) -> bool {
    matches!(t, 3 | 4 | 5 | 11 | 12)
}

fn be16(b: &[u8], at: usize) -> Result<u16, Malformed> {
    Ok(u16::from_be_bytes([
        *b.get(at).ok_or(Malformed)?,
        *b.get(at + 1).ok_or(Malformed)?,
    ]))
}

fn be32(b: &[u8], at: usize) -> Result<u32, Malformed> {
    Ok(u32::from(be16(b, at)?) << 16 | u32::from(be16(b, at + 2)?))
}

impl Packet4 {
    /// Whether it is an ICMP echo request or reply.
    pub fn is_echo(&self) -> bool {
        self.key.proto == proto::ICMP
            && self.frag != Frag::Later
            && matches!(self.icmp_type, ECHO_REQUEST | ECHO_REPLY)
    }

    /// Whether it is an ICMP echo request.
    pub fn is_echo_request(&self) -> bool {
        self.is_echo() && self.icmp_type == ECHO_REQUEST
    }

    /// Whether NAT can open a session for it: TCP (not a RST), UDP, or an ICMP echo
    /// request, with its transport header.
    pub fn can_open(&self) -> bool {
        self.frag != Frag::Later
            && match self.key.proto {
                proto::TCP => self.tcp_flags & 0x04 == 0,
                proto::UDP => true,
                proto::ICMP => self.is_echo_request(),
                _ => false,
            }
    }
}

/// Read the IPv4 packet `ip` (from its header to the end of the frame).
pub fn parse(ip: &[u8]) -> Result<Packet4, Malformed> {
    let h = ip.get(..20).ok_or(Malformed)?;
    let ihl = usize::from(h[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
    if h[0] >> 4 != 4 || ihl < 20 || total < ihl || total > ip.len() {
        return Err(Malformed);
    }
    let fl = u16::from_be_bytes([h[6], h[7]]);
    let (offset, more) = (fl & 0x1fff, fl & 0x2000 != 0);
    let frag = match (offset, more) {
        (0, false) => Frag::Whole,
        (0, true) => Frag::First,
        _ => Frag::Later,
    };
    let mut p = Packet4 {
        key: Key4 {
            src: be32(h, 12)?,
            dst: be32(h, 16)?,
            proto: h[9],
            ..Key4::default()
        },
        ihl,
        total,
        frag,
        id: u16::from_be_bytes([h[4], h[5]]),
        tcp_flags: 0,
        icmp_type: 0,
        error: None,
    };
    if frag == Frag::Later {
        return Ok(p);
    }
    let l4 = ip.get(ihl..total).ok_or(Malformed)?;
    match p.key.proto {
        proto::TCP => {
            if l4.len() < 20 {
                return Err(Malformed);
            }
            p.key.sport = be16(l4, 0)?;
            p.key.dport = be16(l4, 2)?;
            p.tcp_flags = l4[13];
        }
        proto::UDP => {
            if l4.len() < 8 {
                return Err(Malformed);
            }
            p.key.sport = be16(l4, 0)?;
            p.key.dport = be16(l4, 2)?;
        }
        proto::ICMP => {
            if l4.len() < 8 {
                return Err(Malformed);
            }
            p.icmp_type = l4[0];
            if matches!(p.icmp_type, ECHO_REQUEST | ECHO_REPLY) {
                let id = be16(l4, 4)?;
                p.key.sport = id;
                p.key.dport = id;
            } else if is_error(p.icmp_type) && frag == Frag::Whole {
                p.error = quoted(l4, ihl + 8);
            }
        }
        _ => {}
    }
    Ok(p)
}

/// The packet an ICMP error message `icmp` quotes (its IP header at `at` from the outer
/// IP header): `None` when the quote is too short to name its flow (the IP header and 8
/// bytes of transport, RFC 792).
fn quoted(icmp: &[u8], at: usize) -> Option<Quoted> {
    let q = icmp.get(8..)?;
    let h = q.get(..20)?;
    let ihl = usize::from(h[0] & 0x0f) * 4;
    if h[0] >> 4 != 4 || ihl < 20 {
        return None;
    }
    // A quoted fragment other than the first names no ports.
    if u16::from_be_bytes([h[6], h[7]]) & 0x1fff != 0 {
        return None;
    }
    let l4 = q.get(ihl..ihl + 8)?;
    let mut key = Key4 {
        src: be32(h, 12).ok()?,
        dst: be32(h, 16).ok()?,
        proto: h[9],
        ..Key4::default()
    };
    match key.proto {
        proto::TCP | proto::UDP => {
            key.sport = be16(l4, 0).ok()?;
            key.dport = be16(l4, 2).ok()?;
        }
        proto::ICMP if matches!(l4[0], ECHO_REQUEST | ECHO_REPLY) => {
            let id = be16(l4, 4).ok()?;
            key.sport = id;
            key.dport = id;
        }
        _ => return None,
    }
    Some(Quoted { at, key })
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    if let Some(x) = b.get_mut(at..at + 2) {
        x.copy_from_slice(&v.to_be_bytes());
    }
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    if let Some(x) = b.get_mut(at..at + 4) {
        x.copy_from_slice(&v.to_be_bytes());
    }
}

/// Rewrite the addresses of the IPv4 header at `ip[at..]` from `old` to `new`, its
/// checksum updated.
fn rewrite_ip(ip: &mut [u8], at: usize, old: &Key4, new: &Key4) {
    let Ok(mut c) = be16(ip, at + 10) else { return };
    if old.src != new.src {
        c = update32(c, old.src, new.src);
        put32(ip, at + 12, new.src);
    }
    if old.dst != new.dst {
        c = update32(c, old.dst, new.dst);
        put32(ip, at + 16, new.dst);
    }
    put16(ip, at + 10, c);
}

/// Rewrite the transport header at `ip[at..end]` (protocol `old.proto`) from `old`'s
/// addresses and ports to `new`'s: TCP and UDP ports and checksum (UDP's 0, "none", stays),
/// an ICMP echo's identifier and checksum. Checksums outside `..end` are left alone.
fn rewrite_l4(ip: &mut [u8], at: usize, end: usize, old: &Key4, new: &Key4) {
    let csum_at = match old.proto {
        proto::TCP => at + 16,
        proto::UDP => at + 6,
        proto::ICMP => at + 2,
        _ => return,
    };
    let len = ip.len();
    let have = |n: usize| n <= end && n <= len;
    if old.proto == proto::ICMP {
        if !have(at + 6) || old.sport == new.sport {
            return;
        }
        put16(ip, at + 4, new.sport);
        if have(at + 4) {
            if let Ok(c) = be16(ip, csum_at) {
                put16(ip, csum_at, update16(c, old.sport, new.sport));
            }
        }
        return;
    }
    if !have(at + 4) {
        return;
    }
    put16(ip, at, new.sport);
    put16(ip, at + 2, new.dport);
    if !have(csum_at + 2) {
        return;
    }
    let Ok(mut c) = be16(ip, csum_at) else { return };
    if old.proto == proto::UDP && c == 0 {
        return;
    }
    c = update32(c, old.src, new.src);
    c = update32(c, old.dst, new.dst);
    c = update16(c, old.sport, new.sport);
    c = update16(c, old.dport, new.dport);
    if old.proto == proto::UDP && c == 0 {
        c = 0xffff;
    }
    put16(ip, csum_at, c);
}

/// Rewrite packet `p` (`ip`: from its IPv4 header on) to carry tuple `new`: addresses
/// always, ports or echo identifier when it has its transport header.
pub fn rewrite(ip: &mut [u8], p: &Packet4, new: &Key4) {
    rewrite_ip(ip, 0, &p.key, new);
    if p.frag != Frag::Later {
        rewrite_l4(ip, p.ihl, p.total, &p.key, new);
    }
}

/// Rewrite the ICMP error `p` (`ip`: from its outer IPv4 header on): the outer header to
/// `src` and `dst`, the quoted packet to tuple `inner`; the ICMP checksum recomputed.
pub fn rewrite_error(ip: &mut [u8], p: &Packet4, src: u32, dst: u32, inner: &Key4) {
    let Some(q) = p.error else { return };
    let outer = Key4 { src, dst, ..p.key };
    rewrite_ip(ip, 0, &p.key, &outer);
    let end = p.total;
    if let Some(qh) = ip.get(q.at..) {
        let qihl = usize::from(qh.first().copied().unwrap_or(0) & 0x0f) * 4;
        rewrite_ip(ip, q.at, &q.key, inner);
        rewrite_l4(ip, q.at + qihl, end, &q.key, inner);
    }
    // The ICMP checksum covers the quote: computed afresh.
    if let Some(icmp) = ip.get_mut(p.ihl..end) {
        if icmp.len() >= 4 {
            icmp[2] = 0;
            icmp[3] = 0;
            let c = checksum(icmp);
            icmp[2..4].copy_from_slice(&c.to_be_bytes());
        }
    }
}

/// Rewrite the addresses of a later fragment `p` to `new`'s.
pub fn rewrite_addresses(ip: &mut [u8], p: &Packet4, new: &Key4) {
    rewrite_ip(ip, 0, &p.key, new);
}
