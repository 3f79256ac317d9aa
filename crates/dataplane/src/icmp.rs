//! ICMP and ICMPv6 error generation (RFC 1812 §4.3.2, RFC 4443 §2.4), rate limited.
//!
//! The error is built in place: the new IP and ICMP headers are written into the headroom
//! in front of the offending packet, which becomes the quote without being copied.

use wire::{checksum, Ipv4Packet, Ipv6Packet};

use crate::buffer::{PacketMemory, Pkt, Vector, FRAME_SIZE, F_LOCAL_ORIGIN};
use crate::counters::Reason;
use crate::graph::{Graph, Node, Output};
use crate::ip4::l3;
use crate::trace::{Step, F_TRACED};

/// ICMPv4 destination unreachable.
pub const V4_DST_UNREACH: u8 = 3;
/// Code: network unreachable (no route).
pub const V4_NET_UNREACH: u8 = 0;
/// Code: fragmentation needed and DF set.
pub const V4_FRAG_NEEDED: u8 = 4;
/// ICMPv4 time exceeded.
pub const V4_TIME_EXCEEDED: u8 = 11;
/// ICMPv4 parameter problem (the `mtu` argument of [`kind`] carries the pointer).
pub const V4_PARAM_PROBLEM: u8 = 12;
/// ICMPv6 destination unreachable.
pub const V6_DST_UNREACH: u8 = 1;
/// Code: no route to destination.
pub const V6_NO_ROUTE: u8 = 0;
/// ICMPv6 packet too big.
pub const V6_PACKET_TOO_BIG: u8 = 2;
/// ICMPv6 time exceeded.
pub const V6_TIME_EXCEEDED: u8 = 3;

/// RFC 1812 §4.3.2.3: the error, quote included, fits in 576 bytes.
const V4_MAX_ERROR: usize = 576;
/// RFC 4443 §2.4(c): the error fits in the IPv6 minimum MTU.
const V6_MAX_ERROR: usize = 1280;
const ETH_HLEN: usize = 14;

/// Pack an error kind into `Pkt::aux`.
#[inline]
pub const fn kind(ty: u8, code: u8, mtu: u16) -> u32 {
    (ty as u32) << 24 | (code as u32) << 16 | mtu as u32
}

fn unpack(aux: u32) -> (u8, u8, u16) {
    ((aux >> 24) as u8, (aux >> 16) as u8, aux as u16)
}

/// Token bucket, per worker (no sharing, no locks).
pub struct RateLimiter {
    rate: u64,
    burst_nano_tokens: u64,
    nano_tokens: u64,
    last_ns: u64,
}

impl RateLimiter {
    /// `rate` tokens per second, at most `burst` at once.
    pub fn new(rate: u64, burst: u64) -> RateLimiter {
        let burst_nano_tokens = burst.saturating_mul(1_000_000_000);
        RateLimiter {
            rate,
            burst_nano_tokens,
            nano_tokens: burst_nano_tokens,
            last_ns: 0,
        }
    }
    /// Add the tokens earned since the last call.
    #[inline]
    pub fn refill(&mut self, now_ns: u64) {
        let dt = now_ns.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(now_ns);
        self.nano_tokens = self
            .nano_tokens
            .saturating_add(dt.saturating_mul(self.rate))
            .min(self.burst_nano_tokens);
    }
    /// Whether a token is available (without taking it).
    #[inline]
    pub fn has_token(&self) -> bool {
        self.nano_tokens >= 1_000_000_000
    }
    /// Take one token if available.
    #[inline]
    pub fn take(&mut self) -> bool {
        if self.nano_tokens >= 1_000_000_000 {
            self.nano_tokens -= 1_000_000_000;
            true
        } else {
            false
        }
    }
}

/// Slots of the per-destination table (a power of two).
const PEER_SLOTS: usize = 1024;

/// One destination's bucket: credit in nanoseconds, as Linux's `inet_peer_xrlim_allow`
/// keeps it in jiffies.
#[derive(Clone, Copy, Default)]
struct PeerSlot {
    /// The destination (IPv4 as `::ffff:a.b.c.d`); 0 for an empty slot.
    key: u128,
    credit_ns: u64,
    last_ns: u64,
}

/// ICMP errors per destination, as Linux limits them per peer (`icmp_ratelimit`, 1 s, with
/// a burst of 6): on top of the worker's global bucket, so that one spoofed victim does not
/// get the whole budget. A direct-mapped table per worker, touched only when an error is
/// about to be built; a destination that lands on a taken slot takes it over with a fresh
/// bucket (Linux's peer cache evicts too), so the table never grows.
pub struct PeerLimiter {
    slots: Box<[PeerSlot; PEER_SLOTS]>,
    interval_ns: u64,
    burst: u64,
}

impl PeerLimiter {
    /// One error per `interval_ns` per destination, `burst` at once.
    pub fn new(interval_ns: u64, burst: u64) -> PeerLimiter {
        PeerLimiter {
            slots: Box::new([PeerSlot::default(); PEER_SLOTS]),
            interval_ns: interval_ns.max(1),
            burst: burst.max(1),
        }
    }

    /// Whether an error may go to `dst` at `now_ns` (taking its token if so).
    pub fn allow(&mut self, dst: u128, now_ns: u64) -> bool {
        let h = (dst as u64) ^ ((dst >> 64) as u64);
        let i = (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize % PEER_SLOTS;
        let cap = self.burst.saturating_mul(self.interval_ns);
        let s = &mut self.slots[i];
        if s.key != dst || dst == 0 {
            *s = PeerSlot {
                key: dst,
                credit_ns: cap,
                last_ns: now_ns,
            };
        }
        s.credit_ns = s
            .credit_ns
            .saturating_add(now_ns.saturating_sub(s.last_ns))
            .min(cap);
        s.last_ns = s.last_ns.max(now_ns);
        if s.credit_ns >= self.interval_ns {
            s.credit_ns -= self.interval_ns;
            true
        } else {
            false
        }
    }
}

/// The per-destination key of an IPv4 address.
fn peer4(a: u32) -> u128 {
    0xffff_0000_0000 | u128::from(a)
}

/// icmp4-error: replace each packet by the ICMPv4 error in its `aux`, routed back to its
/// source through ip4-lookup.
pub(crate) fn error4<const T: bool, M: PacketMemory>(
    g: &mut Graph,
    v: &mut Vector,
    mem: &mut M,
    out: &mut Output,
    list: &[u16],
) {
    for &i in list {
        let p = v.pkts[i as usize];
        match build4(g, mem, &p) {
            Ok(mut np) => {
                g.counters.add(Reason::Icmp4Sent, 1);
                if T {
                    // The error keeps the packet's buffer, and its trace record.
                    np.flags |= p.flags & F_TRACED;
                    let (ty, code, _) = unpack(p.aux);
                    g.trace::<T>(
                        &np,
                        Step::IcmpError {
                            v6: false,
                            ty,
                            code,
                        },
                    );
                }
                v.pkts[i as usize] = np;
                g.local_lookup = true;
                g.enqueue(Node::Ip4Lookup, i);
            }
            Err(r) => g.drop_pkt::<T>(out, &p, r),
        }
    }
}

// Slow path, shared by the traced and untraced graph: kept out of line and cold so it
// does not shape register allocation of the hot per-packet loops.
#[cold]
#[inline(never)]
fn build4<M: PacketMemory>(g: &mut Graph, mem: &mut M, p: &Pkt) -> Result<Pkt, Reason> {
    let (ty, code, mtu) = unpack(p.aux);
    let (orig_src, quote_len) = {
        let ip = Ipv4Packet::new_checked(l3(mem, p)).map_err(|_| Reason::IcmpSuppressed)?;
        // No error about an error, nor about a non-initial fragment (RFC 1812 §4.3.2.7).
        if ip.frag_offset() != 0 {
            return Err(Reason::IcmpSuppressed);
        }
        if ip.protocol() == 1
            && ip
                .payload()
                .first()
                .is_some_and(|t| matches!(t, 3 | 4 | 5 | 11 | 12))
        {
            return Err(Reason::IcmpSuppressed);
        }
        if p.flags & F_LOCAL_ORIGIN != 0 {
            return Err(Reason::IcmpSuppressed);
        }
        (
            ip.src_addr(),
            (ip.total_len() as usize).min(V4_MAX_ERROR - 28),
        )
    };
    let src = g
        .ifaces
        .port(p.rx_port)
        .and_then(|x| x.primary_ip4())
        .ok_or(Reason::IcmpNoSource)?;
    // Path MTU discovery is not limited per destination (as Linux): a sender needs every
    // "fragmentation needed" to find the path's MTU.
    let pmtu = ty == V4_DST_UNREACH && code == V4_FRAG_NEEDED;
    // The global bucket is looked at first and charged last, so that an error the
    // destination's own limit refuses costs the others nothing (as Linux since 6.2).
    if !g.icmp_limit.has_token() {
        return Err(Reason::IcmpRateLimited);
    }
    if !pmtu && !g.icmp_peers.allow(peer4(orig_src), g.now_ns) {
        return Err(Reason::IcmpRateLimitedPeer);
    }
    g.icmp_limit.take();
    let orig = p.off as usize + p.l3 as usize;
    let ip_at = orig.checked_sub(28).ok_or(Reason::IcmpSuppressed)?;
    let eth_at = ip_at.checked_sub(ETH_HLEN).ok_or(Reason::IcmpSuppressed)?;
    let end = orig + quote_len;
    if end > FRAME_SIZE {
        return Err(Reason::IcmpSuppressed);
    }
    g.ip_ident = g.ip_ident.wrapping_add(1);
    let ident = g.ip_ident;
    let frame = mem.frame_mut(p.buf);
    let pkt = &mut frame[ip_at..end];
    {
        let mut ip = Ipv4Packet::new_unchecked(&mut pkt[..]);
        ip.set_version(4);
        ip.set_header_len(20);
        ip.set_dscp(0);
        ip.set_ecn(0);
        ip.set_total_len((28 + quote_len) as u16);
        ip.set_ident(ident);
        ip.set_flags_frag(false, false, 0);
        ip.set_ttl(64);
        ip.set_protocol(1);
        ip.set_src_addr(src);
        ip.set_dst_addr(orig_src);
        ip.fill_checksum();
    }
    let icmp = &mut pkt[20..];
    icmp[0] = ty;
    icmp[1] = code;
    icmp[2..4].copy_from_slice(&[0, 0]);
    if ty == V4_PARAM_PROBLEM {
        // RFC 792: the pointer is the first octet after the checksum.
        icmp[4..8].copy_from_slice(&[mtu as u8, 0, 0, 0]);
    } else {
        icmp[4..6].copy_from_slice(&[0, 0]);
        icmp[6..8].copy_from_slice(&mtu.to_be_bytes());
    }
    let c = checksum::checksum(icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    Ok(Pkt {
        buf: p.buf,
        off: eth_at as u16,
        len: (ETH_HLEN + 28 + quote_len) as u16,
        rx_port: p.rx_port,
        tx_port: 0,
        l3: ETH_HLEN as u16,
        flags: F_LOCAL_ORIGIN,
        nh: orig_src,
        aux: 0,
    })
}

/// icmp6-error: replace each packet by the ICMPv6 error in its `aux`, routed back to its
/// source through ip6-lookup.
pub(crate) fn error6<const T: bool, M: PacketMemory>(
    g: &mut Graph,
    v: &mut Vector,
    mem: &mut M,
    out: &mut Output,
    list: &[u16],
) {
    for &i in list {
        let p = v.pkts[i as usize];
        match build6(g, mem, &p) {
            Ok(mut np) => {
                g.counters.add(Reason::Icmp6Sent, 1);
                if T {
                    // The error keeps the packet's buffer, and its trace record.
                    np.flags |= p.flags & F_TRACED;
                    let (ty, code, _) = unpack(p.aux);
                    g.trace::<T>(&np, Step::IcmpError { v6: true, ty, code });
                }
                v.pkts[i as usize] = np;
                g.local_lookup = true;
                g.enqueue(Node::Ip6Lookup, i);
            }
            Err(r) => g.drop_pkt::<T>(out, &p, r),
        }
    }
}

// Slow path, shared by the traced and untraced graph: kept out of line and cold so it
// does not shape register allocation of the hot per-packet loops.
#[cold]
#[inline(never)]
fn build6<M: PacketMemory>(g: &mut Graph, mem: &mut M, p: &Pkt) -> Result<Pkt, Reason> {
    let (ty, code, mtu) = unpack(p.aux);
    let (orig_src, quote_len) = {
        let ip = Ipv6Packet::new_checked(l3(mem, p)).map_err(|_| Reason::IcmpSuppressed)?;
        if p.flags & F_LOCAL_ORIGIN != 0 {
            return Err(Reason::IcmpSuppressed);
        }
        // RFC 4443 §2.4(e): never for an ICMPv6 error message.
        if let Some((58, l4, _)) = crate::ip6::upper(&ip) {
            if l4.first().is_some_and(|t| *t < 128) {
                return Err(Reason::IcmpSuppressed);
            }
        }
        (
            ip.src_addr(),
            (40 + ip.payload_len() as usize).min(V6_MAX_ERROR - 48),
        )
    };
    let src = g
        .ifaces
        .port(p.rx_port)
        .and_then(|x| x.primary_ip6())
        .ok_or(Reason::IcmpNoSource)?;
    if !g.icmp_limit.has_token() {
        return Err(Reason::IcmpRateLimited);
    }
    if ty != V6_PACKET_TOO_BIG && !g.icmp_peers.allow(u128::from_be_bytes(orig_src), g.now_ns) {
        return Err(Reason::IcmpRateLimitedPeer);
    }
    g.icmp_limit.take();
    let orig = p.off as usize + p.l3 as usize;
    let ip_at = orig.checked_sub(48).ok_or(Reason::IcmpSuppressed)?;
    let eth_at = ip_at.checked_sub(ETH_HLEN).ok_or(Reason::IcmpSuppressed)?;
    let end = orig + quote_len;
    if end > FRAME_SIZE {
        return Err(Reason::IcmpSuppressed);
    }
    let frame = mem.frame_mut(p.buf);
    let pkt = &mut frame[ip_at..end];
    let plen = (8 + quote_len) as u16;
    // Version 6, traffic class 0, flow label 0.
    pkt[..4].copy_from_slice(&[0x60, 0, 0, 0]);
    {
        let mut ip = Ipv6Packet::new_unchecked(&mut pkt[..]);
        ip.set_payload_len(plen);
        ip.set_next_header(58);
        ip.set_hop_limit(64);
        ip.set_src_addr(src);
        ip.set_dst_addr(orig_src);
    }
    let icmp = &mut pkt[40..];
    icmp[0] = ty;
    icmp[1] = code;
    icmp[2..4].copy_from_slice(&[0, 0]);
    icmp[4..8].copy_from_slice(&(mtu as u32).to_be_bytes());
    let sum = checksum::pseudo_v6(&src, &orig_src, 58, plen as u32) + checksum::sum(icmp);
    let c = !checksum::fold(sum);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    Ok(Pkt {
        buf: p.buf,
        off: eth_at as u16,
        len: (ETH_HLEN + 48 + quote_len) as u16,
        rx_port: p.rx_port,
        tx_port: 0,
        l3: ETH_HLEN as u16,
        flags: F_LOCAL_ORIGIN,
        nh: 0,
        aux: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limiter_bursts_then_refills() {
        let mut r = RateLimiter::new(10, 3);
        r.refill(0);
        assert!(r.take() && r.take() && r.take());
        assert!(!r.take());
        r.refill(100_000_000); // 0.1 s at 10/s = 1 token
        assert!(r.take());
        assert!(!r.take());
        r.refill(100_000_000_000); // long idle: capped at the burst
        assert_eq!((0..10).filter(|_| r.take()).count(), 3);
    }

    #[test]
    fn peer_limiter_gives_each_destination_its_own_burst_then_one_a_second() {
        let s = 1_000_000_000u64;
        let mut l = PeerLimiter::new(s, 6);
        let victim = peer4(0xc000_0202);
        assert_eq!((0..100).filter(|_| l.allow(victim, 5 * s)).count(), 6);
        // Another destination is not affected.
        assert!(l.allow(peer4(0xc000_0203), 5 * s));
        // One more a second afterwards, and never more than the burst after a pause.
        assert!(!l.allow(victim, 5 * s + s / 2));
        assert!(l.allow(victim, 6 * s));
        assert!(!l.allow(victim, 6 * s));
        assert_eq!((0..100).filter(|_| l.allow(victim, 1000 * s)).count(), 6);
        // A thousand destinations churning the table never make it grow or panic.
        for a in 0..100_000u32 {
            l.allow(peer4(a), 2000 * s);
        }
    }
}
