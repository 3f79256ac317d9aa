//! A decoder for the one hot message kind: `RTM_NEWROUTE` / `RTM_DELROUTE`, read straight
//! from the bytes into a [`Route`].
//!
//! Why hand-written: in `ferrouter-lab bench route-sync` (1M IPv4 + 500K IPv6 routes) the
//! netlink-packet-route decoder took 22 % of the timed path (`perf`, cpu-clock: 17.7 % of
//! all samples against 81 % for parse + sync), mostly building and dropping a
//! `Vec<RouteAttribute>` per message only for [`crate::parse`] to pick five of them. This
//! decoder allocates nothing but the route's next hops.
//!
//! It gives exactly what the generic path (netlink-packet-route, then `parse::route`) gives
//! for the same bytes, or says it cannot: [`Fast::Generic`] hands the message to the generic
//! path. It defers for attributes whose decoding it does not replicate (`RTA_METRICS`,
//! `RTA_ENCAP`, and any nested attribute of those kinds or `RTA_MULTIPATH` inside a next
//! hop). For everything else it applies the crate's own acceptance rules — the same
//! attribute walk (`NlasIterator`), the same exact-length checks per attribute kind — so a
//! message the crate would reject is [`Fast::Skip`]ped here too. The unit tests below
//! check both properties against the crate on random valid and random mutated messages.
//!
//! Nothing here indexes without a bounds check: any byte string is a normal input.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::types::{Event, NextHops, Route, RouteKind, RouteNextHop};

/// What the fast decoder made of one netlink message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fast {
    /// The route event the generic path would report.
    Event(Event),
    /// The generic path would skip this message (malformed, not IPv4/IPv6, a cached clone).
    Skip,
    /// Not decided here: decode with the generic path.
    Generic,
}

const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
const NLMSG_HDRLEN: usize = 16;
const RTMSG_LEN: usize = 12;
const RTNH_LEN: usize = 8;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const RTM_F_CLONED: u32 = 0x200;
const RTN_MULTICAST: u8 = 5;
/// Attribute type bits (without `NLA_F_NESTED` and `NLA_F_NET_BYTEORDER`).
const NLA_TYPE_MASK: u16 = 0x3fff;

const RTA_DST: u16 = 1;
const RTA_SRC: u16 = 2;
const RTA_IIF: u16 = 3;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_PRIORITY: u16 = 6;
const RTA_PREFSRC: u16 = 7;
const RTA_METRICS: u16 = 8;
const RTA_MULTIPATH: u16 = 9;
const RTA_FLOW: u16 = 11;
const RTA_CACHEINFO: u16 = 12;
const RTA_TABLE: u16 = 15;
const RTA_MARK: u16 = 16;
const RTA_MFC_STATS: u16 = 17;
const RTA_VIA: u16 = 18;
const RTA_NEWDST: u16 = 19;
const RTA_PREF: u16 = 20;
const RTA_ENCAP_TYPE: u16 = 21;
const RTA_ENCAP: u16 = 22;
const RTA_EXPIRES: u16 = 23;
const RTA_UID: u16 = 25;
const RTA_TTL_PROPAGATE: u16 = 26;
const RTA_IP_PROTO: u16 = 27;
const RTA_SPORT: u16 = 28;
const RTA_DPORT: u16 = 29;
const RTA_NH_ID: u16 = 30;
const RTA_FLOWLABEL: u16 = 31;

/// Why an attribute walk stopped.
enum Stop {
    /// The generic decoder rejects the message.
    Malformed,
    /// An attribute this decoder does not replicate.
    Defer,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_of(v: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(v.try_into().ok()?))
}

/// Calls `f(kind, value)` for each attribute in `buf`, walking it as netlink-packet-core's
/// `NlasIterator` does: an attribute shorter than its 4-byte header, longer than what is
/// left, or 1-3 stray bytes at the end make the whole buffer malformed; the walk ends
/// when the next (aligned) offset reaches the end.
fn attrs(buf: &[u8], mut f: impl FnMut(u16, &[u8]) -> Result<(), Stop>) -> Result<(), Stop> {
    let mut pos = 0usize;
    while pos < buf.len() {
        let rest = buf.get(pos..).ok_or(Stop::Malformed)?;
        let len = usize::from(u16_at(rest, 0).ok_or(Stop::Malformed)?);
        let kind = u16_at(rest, 2).ok_or(Stop::Malformed)? & NLA_TYPE_MASK;
        if len < 4 || len > rest.len() {
            return Err(Stop::Malformed);
        }
        f(kind, rest.get(4..len).ok_or(Stop::Malformed)?)?;
        pos += len.next_multiple_of(4);
    }
    Ok(())
}

/// An address of the route's family (`RTA_DST`, `RTA_GATEWAY`, ...): exactly 4 or 16 bytes.
fn addr(v4: bool, v: &[u8]) -> Option<IpAddr> {
    if v4 {
        let a: [u8; 4] = v.try_into().ok()?;
        Some(IpAddr::V4(Ipv4Addr::from(a)))
    } else {
        let a: [u8; 16] = v.try_into().ok()?;
        Some(IpAddr::V6(Ipv6Addr::from(a)))
    }
}

/// `RTA_VIA` (`struct rtvia`: a 16-bit family, of which the crate reads the low byte, then
/// the address). `Ok(None)` for a valid non-IP via (AF_PACKET, ...), which names no gateway.
fn via(v: &[u8]) -> Result<Option<IpAddr>, Stop> {
    let family = u16_at(v, 0).ok_or(Stop::Malformed)? as u8;
    let a = v.get(2..).ok_or(Stop::Malformed)?;
    match family {
        AF_INET => addr(true, a).map(Some).ok_or(Stop::Malformed),
        AF_INET6 => addr(false, a).map(Some).ok_or(Stop::Malformed),
        _ => Ok(None),
    }
}

/// Checks an attribute the route does not use the way the crate's decoder does (it would
/// reject the whole message if the value does not fit its kind).
fn check_other(kind: u16, v: &[u8], v4: bool, route_type: u8) -> Result<(), Stop> {
    let ok = match kind {
        RTA_SRC | RTA_PREFSRC | RTA_NEWDST => v.len() == if v4 { 4 } else { 16 },
        RTA_IIF | RTA_MARK | RTA_UID | RTA_NH_ID | RTA_FLOWLABEL | RTA_FLOW => v.len() == 4,
        RTA_EXPIRES => v.len() == if route_type == RTN_MULTICAST { 8 } else { 4 },
        RTA_PREF | RTA_TTL_PROPAGATE | RTA_IP_PROTO => v.len() == 1,
        RTA_ENCAP_TYPE | RTA_SPORT | RTA_DPORT => v.len() == 2,
        RTA_CACHEINFO => v.len() >= 32,
        RTA_MFC_STATS => v.len() >= 24,
        RTA_METRICS | RTA_ENCAP | RTA_MULTIPATH => return Err(Stop::Defer),
        // Kinds the crate does not know become `Other`, which never fails.
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(Stop::Malformed)
    }
}

/// The first gateway (`RTA_GATEWAY`, or an IP `RTA_VIA`) among a next hop's attributes,
/// after checking all of them.
fn next_hop_attrs(buf: &[u8], v4: bool, route_type: u8) -> Result<Option<IpAddr>, Stop> {
    let mut gw = None;
    attrs(buf, |kind, v| {
        let g = match kind {
            RTA_GATEWAY => Some(addr(v4, v).ok_or(Stop::Malformed)?),
            RTA_VIA => via(v)?,
            RTA_DST => {
                addr(v4, v).ok_or(Stop::Malformed)?;
                None
            }
            RTA_OIF | RTA_PRIORITY | RTA_TABLE => {
                u32_of(v).ok_or(Stop::Malformed)?;
                None
            }
            _ => {
                check_other(kind, v, v4, route_type)?;
                None
            }
        };
        if gw.is_none() {
            gw = g;
        }
        Ok(())
    })?;
    Ok(gw)
}

/// `RTA_MULTIPATH`: `rtnexthop` entries back to back (no alignment between them, as the
/// crate reads them), each with its own length and attributes.
fn multipath(mut buf: &[u8], v4: bool, route_type: u8) -> Result<NextHops, Stop> {
    let mut hops = NextHops::new();
    while !buf.is_empty() {
        let len = usize::from(u16_at(buf, 0).ok_or(Stop::Malformed)?);
        if buf.len() < RTNH_LEN || len < RTNH_LEN || len > buf.len() {
            return Err(Stop::Malformed);
        }
        let hops_field = *buf.get(3).ok_or(Stop::Malformed)?;
        let ifindex = buf.get(4..8).and_then(u32_of).ok_or(Stop::Malformed)?;
        let nested = buf.get(RTNH_LEN..len).ok_or(Stop::Malformed)?;
        let gateway = next_hop_attrs(nested, v4, route_type)?;
        hops.push(RouteNextHop {
            gateway,
            ifindex: (ifindex != 0).then_some(ifindex),
            weight: u16::from(hops_field) + 1,
        });
        buf = buf.get(len..).ok_or(Stop::Malformed)?;
    }
    Ok(hops)
}

fn kind(t: u8) -> RouteKind {
    match t {
        1 => RouteKind::Unicast,
        2 => RouteKind::Local,
        3 => RouteKind::Broadcast,
        6 => RouteKind::Blackhole,
        7 => RouteKind::Unreachable,
        8 => RouteKind::Prohibit,
        other => RouteKind::Other(other),
    }
}

/// Decodes `msg` (one whole netlink message, header included) if it is a route message.
pub(crate) fn route_message(msg: &[u8]) -> Fast {
    let add = match u16_at(msg, 4) {
        Some(RTM_NEWROUTE) => true,
        Some(RTM_DELROUTE) => false,
        _ => return Fast::Generic,
    };
    match route(msg.get(NLMSG_HDRLEN..).unwrap_or_default()) {
        Ok(Some(r)) if add => Fast::Event(Event::NewRoute(r)),
        Ok(Some(r)) => Fast::Event(Event::DelRoute(r)),
        Ok(None) | Err(Stop::Malformed) => Fast::Skip,
        Err(Stop::Defer) => Fast::Generic,
    }
}

/// The route in an `rtmsg` and its attributes; `Ok(None)` when the generic path would
/// decode it but not report it.
fn route(payload: &[u8]) -> Result<Option<Route>, Stop> {
    let Some(h) = payload.get(..RTMSG_LEN) else {
        return Err(Stop::Malformed);
    };
    let (family, dst_len, table, protocol, route_type) = (h[0], h[1], h[4], h[5], h[7]);
    let flags = u32_of(&h[8..12]).ok_or(Stop::Malformed)?;
    let v4 = match family {
        AF_INET => true,
        AF_INET6 => false,
        // Other families (MPLS, bridge, ...) are skipped, decodable or not.
        _ => return Ok(None),
    };
    let mut r = Route {
        table: u32::from(table),
        dst: if v4 {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        } else {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        },
        dst_len,
        kind: kind(route_type),
        protocol,
        priority: 0,
        nexthops: NextHops::new(),
    };
    let mut oif = None;
    let mut gw = None;
    let mut multi: Option<NextHops> = None;
    attrs(payload.get(RTMSG_LEN..).unwrap_or_default(), |k, v| {
        match k {
            RTA_DST => r.dst = addr(v4, v).ok_or(Stop::Malformed)?,
            RTA_GATEWAY => {
                let g = addr(v4, v).ok_or(Stop::Malformed)?;
                gw = gw.or(Some(g));
            }
            RTA_VIA => {
                let g = via(v)?;
                gw = gw.or(g);
            }
            RTA_OIF => oif = Some(u32_of(v).ok_or(Stop::Malformed)?),
            RTA_PRIORITY => r.priority = u32_of(v).ok_or(Stop::Malformed)?,
            RTA_TABLE => r.table = u32_of(v).ok_or(Stop::Malformed)?,
            RTA_MULTIPATH => multi = Some(multipath(v, v4, route_type)?),
            _ => check_other(k, v, v4, route_type)?,
        }
        Ok(())
    })?;
    if flags & RTM_F_CLONED != 0 || r.dst_len > if v4 { 32 } else { 128 } {
        return Ok(None);
    }
    match multi {
        Some(hops) => r.nexthops = hops,
        None => {
            if gw.is_some() || oif.is_some() {
                r.nexthops.push(RouteNextHop {
                    gateway: gw,
                    ifindex: oif.filter(|&i| i != 0),
                    weight: 1,
                });
            }
        }
    }
    Ok(Some(r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode_route;
    use crate::parse::{generic_messages, parse_messages};
    use proptest::prelude::*;

    /// Both decoders over the same bytes: (events, skipped).
    fn both(buf: &[u8]) -> ((Vec<Event>, usize), (Vec<Event>, usize)) {
        let mut fast = Vec::new();
        let fs = parse_messages(buf, &mut fast);
        let mut generic = Vec::new();
        let gs = generic_messages(buf, &mut generic);
        ((fast, fs), (generic, gs))
    }

    fn ip4(x: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(x))
    }

    fn ip6(x: u128) -> IpAddr {
        IpAddr::V6(Ipv6Addr::from(x))
    }

    fn arb_hop(v4: bool) -> impl Strategy<Value = RouteNextHop> {
        (
            proptest::option::of(any::<u128>()),
            proptest::option::of(0u32..100),
            1u16..=256,
        )
            .prop_map(move |(g, ifindex, weight)| RouteNextHop {
                gateway: g.map(|g| if v4 { ip4(g as u32) } else { ip6(g) }),
                ifindex,
                weight,
            })
    }

    fn arb_route() -> impl Strategy<Value = Route> {
        any::<bool>().prop_flat_map(|v4| {
            (
                prop_oneof![Just(254u32), Just(255), Just(0), any::<u32>()],
                any::<u128>(),
                0u8..=if v4 { 32 } else { 128 },
                prop_oneof![
                    Just(RouteKind::Unicast),
                    Just(RouteKind::Blackhole),
                    Just(RouteKind::Unreachable),
                    Just(RouteKind::Prohibit),
                    Just(RouteKind::Local),
                    Just(RouteKind::Broadcast),
                    Just(RouteKind::Other(RTN_MULTICAST)),
                    any::<u8>().prop_map(RouteKind::Other),
                ],
                any::<u8>(),
                prop_oneof![Just(0u32), any::<u32>()],
                proptest::collection::vec(arb_hop(v4), 0..5),
            )
                .prop_map(
                    move |(table, dst, dst_len, kind, protocol, priority, nexthops)| Route {
                        table,
                        dst: if v4 { ip4(dst as u32) } else { ip6(dst) },
                        dst_len,
                        kind,
                        protocol,
                        priority,
                        nexthops: nexthops.into(),
                    },
                )
        })
    }

    /// Attribute values of the sizes the kinds call for, and of others.
    fn arb_value() -> impl Strategy<Value = Vec<u8>> {
        use proptest::collection::vec;
        prop_oneof![
            vec(any::<u8>(), 0..3),
            vec(any::<u8>(), 4..5),
            Just(vec![0; 4]),
            vec(any::<u8>(), 8..9),
            vec(any::<u8>(), 16..17),
            vec(any::<u8>(), 24..25),
            vec(any::<u8>(), 32..33),
            vec(any::<u8>(), 0..40),
            // struct rtvia: family (AF_INET, AF_INET6, AF_PACKET, one that truncates to
            // AF_INET, any) and an address of either size.
            (
                prop_oneof![Just(2u16), Just(10), Just(17), Just(0x0102), any::<u16>()],
                prop_oneof![vec(any::<u8>(), 4..5), vec(any::<u8>(), 16..17)],
            )
                .prop_map(|(f, a)| [f.to_ne_bytes().to_vec(), a].concat()),
        ]
    }

    /// Attribute types, with the nested and byte-order flag bits now and then.
    fn arb_kind() -> impl Strategy<Value = u16> {
        prop_oneof![
            0u16..=33,
            Just(RTA_GATEWAY),
            Just(RTA_VIA),
            Just(RTA_OIF),
            (0u16..=33).prop_map(|k| k | 0x8000),
            (0u16..=33).prop_map(|k| k | 0x4000),
        ]
    }

    /// Extra attributes a kernel or FRR may add, well-formed or not: (type, value).
    fn arb_extra() -> impl Strategy<Value = (u16, Vec<u8>)> {
        (arb_kind(), arb_value())
    }

    /// An RTA_MULTIPATH value: `rtnexthop`s with any attributes, and now and then a wrong
    /// length in one of them.
    fn arb_multipath() -> impl Strategy<Value = Vec<u8>> {
        let hop = (
            any::<u8>(),
            any::<u8>(),
            prop_oneof![Just(0u32), 1u32..5, any::<u32>()],
            proptest::collection::vec(
                prop_oneof![
                    arb_extra(),
                    // Gateways of either family's size, so some hops have two.
                    (
                        Just(RTA_GATEWAY),
                        prop_oneof![
                            proptest::collection::vec(any::<u8>(), 4..5),
                            proptest::collection::vec(any::<u8>(), 16..17)
                        ]
                    ),
                ],
                0..4,
            ),
            prop_oneof![8 => Just(0i32), 1 => -9i32..9],
        );
        proptest::collection::vec(hop, 0..4).prop_map(|hops| {
            let mut out = Vec::new();
            for (flags, weight, ifindex, attrs, skew) in hops {
                let start = out.len();
                out.extend_from_slice(&[0, 0, flags, weight]);
                out.extend_from_slice(&ifindex.to_ne_bytes());
                for (k, v) in attrs {
                    out.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
                    out.extend_from_slice(&k.to_ne_bytes());
                    out.extend_from_slice(&v);
                    out.resize(out.len().next_multiple_of(4), 0);
                }
                let len = ((out.len() - start) as i32 + skew).max(0) as u16;
                out[start..start + 2].copy_from_slice(&len.to_ne_bytes());
            }
            out
        })
    }

    /// Appends an attribute to the last message in `buf` and fixes its length.
    fn append_attr(buf: &mut Vec<u8>, start: usize, kind: u16, value: &[u8]) {
        let len = 4 + value.len();
        buf.extend_from_slice(&(len as u16).to_ne_bytes());
        buf.extend_from_slice(&kind.to_ne_bytes());
        buf.extend_from_slice(value);
        buf.resize(buf.len().next_multiple_of(4), 0);
        let total = (buf.len() - start) as u32;
        buf[start..start + 4].copy_from_slice(&total.to_ne_bytes());
    }

    /// `r` as it reads back after `encode_route`: interface 0 is none, a single next hop is
    /// sent as RTA_GATEWAY/RTA_OIF (weight 1, nothing at all without either), and a type
    /// that has a name is reported by that name.
    fn as_decoded(r: &Route) -> Route {
        let mut r = r.clone();
        if let [h] = r.nexthops.as_mut_slice() {
            h.weight = 1;
            if h.gateway.is_none() && h.ifindex.is_none() {
                r.nexthops.clear();
            }
        }
        for h in &mut r.nexthops {
            h.ifindex = h.ifindex.filter(|&i| i != 0);
        }
        if let RouteKind::Other(t) = r.kind {
            r.kind = kind(t);
        }
        r
    }

    #[test]
    fn sample_messages_agree() {
        let mut buf = Vec::new();
        let r = Route {
            table: 254,
            dst: "2001:db8::".parse().unwrap(),
            dst_len: 32,
            kind: RouteKind::Unicast,
            protocol: 186,
            priority: 1024,
            nexthops: vec![RouteNextHop {
                gateway: Some("fe80::1".parse().unwrap()),
                ifindex: Some(3),
                weight: 1,
            }]
            .into(),
        };
        encode_route(&r, true, &mut buf);
        // As the kernel sends IPv6 routes: with RTA_PREF and RTA_CACHEINFO.
        append_attr(&mut buf, 0, RTA_PREF, &[0]);
        append_attr(&mut buf, 0, RTA_CACHEINFO, &[0; 32]);
        assert_eq!(route_message(&buf), Fast::Event(Event::NewRoute(r.clone())));
        let (f, g) = both(&buf);
        assert_eq!(f, g);
        // RTA_METRICS: the generic decoder's business.
        append_attr(&mut buf, 0, RTA_METRICS, &[8, 0, 2, 0, 0xdc, 5, 0, 0]);
        assert_eq!(route_message(&buf), Fast::Generic);
        let (f, g) = both(&buf);
        assert_eq!(f, g);
        assert_eq!(f.0, vec![Event::NewRoute(r)]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Whatever the bytes, the fast decoder returns (no panic: this runs without the
        /// generic path's catch_unwind).
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400), ty in 24u16..=25) {
            let _ = route_message(&bytes);
            // And with a plausible header, so the attribute walk is reached.
            let mut m = bytes.clone();
            if m.len() >= 16 {
                m[4..6].copy_from_slice(&ty.to_ne_bytes());
                if m.len() >= 17 {
                    m[16] = if bytes[0] & 1 == 0 { AF_INET } else { AF_INET6 };
                }
                let _ = route_message(&m);
            }
        }

        /// Valid routes (v4/v6, ECMP, any table, metric, type and protocol): the fast
        /// decoder decides every one, and gives what the generic path gives.
        #[test]
        fn valid_routes_match_the_generic_decoder(
            routes in proptest::collection::vec((arb_route(), any::<bool>()), 1..8),
        ) {
            let mut buf = Vec::new();
            for (r, add) in &routes {
                let start = buf.len();
                encode_route(r, *add, &mut buf);
                prop_assert!(route_message(&buf[start..]) != Fast::Generic);
            }
            let (f, g) = both(&buf);
            prop_assert_eq!(&f, &g);
            prop_assert_eq!(f.1, 0);
            let want: Vec<Event> = routes
                .iter()
                .map(|(r, add)| {
                    let r = as_decoded(r);
                    if *add {
                        Event::NewRoute(r)
                    } else {
                        Event::DelRoute(r)
                    }
                })
                .collect();
            prop_assert_eq!(f.0, want);
        }

        /// Valid routes with RTA_MULTIPATH attributes of any content and extra attributes of
        /// any kind, well-formed or not: same result.
        #[test]
        fn multipath_and_extra_attributes_match(
            r in arb_route(),
            mps in proptest::collection::vec(arb_multipath(), 0..3),
            extras in proptest::collection::vec(arb_extra(), 0..4),
        ) {
            let mut buf = Vec::new();
            encode_route(&r, true, &mut buf);
            for mp in &mps {
                append_attr(&mut buf, 0, RTA_MULTIPATH, mp);
            }
            for (k, v) in &extras {
                append_attr(&mut buf, 0, *k, v);
            }
            let (f, g) = both(&buf);
            prop_assert_eq!(f, g);
        }

        /// Valid routes with bytes overwritten, cut or appended (lengths, types, families,
        /// next-hop headers): same result, message by message.
        #[test]
        fn mutated_routes_match(
            routes in proptest::collection::vec(arb_route(), 1..4),
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
            cut in any::<usize>(),
            tail in proptest::collection::vec(any::<u8>(), 0..8),
        ) {
            let mut buf = Vec::new();
            for r in &routes {
                encode_route(r, true, &mut buf);
            }
            for (at, b) in &edits {
                let i = at % buf.len();
                buf[i] = *b;
            }
            buf.truncate(buf.len() - cut % 8);
            buf.extend_from_slice(&tail);
            let (f, g) = both(&buf);
            prop_assert_eq!(f, g);
        }
    }
}
