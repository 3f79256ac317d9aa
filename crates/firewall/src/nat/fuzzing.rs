//! The body of the NAT fuzz target, shared by `fuzz/` (cargo-fuzz, `nat_rewrite`) and the
//! stable harness every test run drives (`nat::tests`, proptest): an IPv4 packet parsed as
//! the NAT nodes parse it and translated to a tuple taken from the input, with the
//! invariants a translation must keep asserted. Not for the hot path: it allocates, and it
//! panics on a bug by design.

use super::rewrite::{self, Frag};
use super::table::{proto, Key4};

/// `data`: 12 bytes of the tuple to translate to (source, destination, source port,
/// destination port), then an IPv4 packet. Panics when a translation breaks what it
/// must keep: the length, a valid IP header checksum, a valid TCP/UDP checksum, a valid
/// ICMP checksum, the parse of the result.
pub fn exercise(data: &[u8]) {
    let (Some(t), Some(pkt)) = (data.get(..12), data.get(12..)) else {
        return;
    };
    let w32 = |i: usize| u32::from_be_bytes([t[i], t[i + 1], t[i + 2], t[i + 3]]);
    let w16 = |i: usize| u16::from_be_bytes([t[i], t[i + 1]]);
    let mut ip = pkt.to_vec();
    let Ok(p) = rewrite::parse(&ip) else { return };
    let new = Key4 {
        src: w32(0),
        dst: w32(4),
        sport: w16(8),
        dport: if p.key.proto == proto::ICMP {
            w16(8)
        } else {
            w16(10)
        },
        proto: p.key.proto,
    };
    let header_ok = |b: &[u8]| wire::checksum::fold(wire::checksum::sum(&b[..p.ihl])) == 0xffff;
    let ip_ok = header_ok(&ip);
    let l4_ok = wire::offload::transport_checksum_ok(&ip[..p.total]);
    let icmp_ok =
        |b: &[u8]| wire::checksum::fold(wire::checksum::sum(&b[p.ihl..p.total])) == 0xffff;
    let was_icmp_ok = p.key.proto == proto::ICMP && p.frag == Frag::Whole && icmp_ok(&ip);
    let len = ip.len();
    if let Some(q) = p.error {
        let inner = Key4 {
            proto: q.key.proto,
            ..new
        };
        rewrite::rewrite_error(&mut ip, &p, new.src, new.dst, &inner);
        assert_eq!(ip.len(), len);
        assert!(icmp_ok(&ip), "an ICMP error's checksum is computed afresh");
        let again = rewrite::parse(&ip).expect("a translated error parses");
        assert_eq!((again.key.src, again.key.dst), (new.src, new.dst));
    } else {
        rewrite::rewrite(&mut ip, &p, &new);
        assert_eq!(ip.len(), len);
        let again = rewrite::parse(&ip).expect("a translated packet parses");
        assert_eq!((again.key.src, again.key.dst), (new.src, new.dst));
        if p.frag != Frag::Later && matches!(p.key.proto, proto::TCP | proto::UDP) {
            assert_eq!((again.key.sport, again.key.dport), (new.sport, new.dport));
        }
        if l4_ok == Some(true) {
            assert_eq!(
                wire::offload::transport_checksum_ok(&ip[..p.total]),
                Some(true),
                "a valid transport checksum stays valid"
            );
        }
        if was_icmp_ok && p.is_echo() {
            assert!(icmp_ok(&ip), "an echo's checksum stays valid");
        }
    }
    if ip_ok {
        assert!(header_ok(&ip), "a valid IP header checksum stays valid");
    }
}
