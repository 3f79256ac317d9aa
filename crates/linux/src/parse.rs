//! rtnetlink messages → [`Event`]s.
//!
//! The rust-netlink crates do the decoding (but for route messages, which the `fastroute`
//! module decodes the same way without allocating); this module splits a datagram into
//! messages, keeps what the fast path needs and counts the rest. Nothing here can fail or panic on
//! kernel (or hostile) input: a message that does not decode is skipped and counted.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use netlink_packet_core::{NetlinkBuffer, NetlinkMessage, NetlinkPayload, NLMSG_ALIGNTO};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage, State};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteMessage, RouteType, RouteVia,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use crate::fastroute::{route_message, Fast};
use crate::types::{Addr, Event, Link, Neigh, NextHops, Route, RouteKind, RouteNextHop};

/// Smallest netlink message: the 16-byte `nlmsghdr`.
const HEADER_LEN: usize = 16;

/// Header fields of one message, read before its payload is decoded.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Header {
    pub flags: u16,
    pub seq: u32,
}

/// Calls `f` with the header and bytes of each message in a datagram. Returns the number
/// of bytes at the end that did not form a message (0 for a well-formed datagram).
pub(crate) fn split(buf: &[u8], mut f: impl FnMut(Header, &[u8])) -> usize {
    let mut rest = buf;
    while !rest.is_empty() {
        let Ok(nl) = NetlinkBuffer::new_checked(rest) else {
            return rest.len();
        };
        let len = nl.length() as usize;
        let header = Header {
            flags: nl.flags(),
            seq: nl.sequence_number(),
        };
        // new_checked guarantees HEADER_LEN <= len <= rest.len().
        let (msg, _) = rest.split_at(len);
        f(header, msg);
        let aligned = len.next_multiple_of(usize::from(NLMSG_ALIGNTO));
        rest = rest.get(aligned..).unwrap_or_default();
    }
    0
}

/// Decodes one message. `Err(())` means it could not be decoded at all.
///
/// The decoder is third-party code fed by the kernel; a panic in it must not take the
/// router down, so it runs under `catch_unwind` and a panic counts as a malformed message.
pub(crate) fn decode(msg: &[u8]) -> Result<NetlinkPayload<RouteNetlinkMessage>, ()> {
    if msg.len() < HEADER_LEN {
        return Err(());
    }
    catch_unwind(AssertUnwindSafe(|| {
        NetlinkMessage::<RouteNetlinkMessage>::deserialize(msg)
    }))
    .map_err(|_| ())?
    .map(|m| m.payload)
    .map_err(|_| ())
}

/// Parses every message in `buf` (one or more netlink messages, as read from a
/// NETLINK_ROUTE socket) and appends the events the mirror reports to `out`.
///
/// Returns how many messages were skipped: unsupported types, families other than IPv4/IPv6
/// (bridge FDB, MPLS, ...), and anything malformed, including trailing bytes that do not
/// form a message. `NLMSG_NOOP` is not counted. Never panics.
///
/// Route messages go through the `fastroute` decoder, which gives what the generic decoder
/// gives without its allocations (or hands the message over to it).
pub fn parse_messages(buf: &[u8], out: &mut Vec<Event>) -> usize {
    parse_with(buf, out, true)
}

/// [`parse_messages`] with the generic decoder only: the reference the fast route decoder
/// is tested against.
#[cfg(test)]
pub(crate) fn generic_messages(buf: &[u8], out: &mut Vec<Event>) -> usize {
    parse_with(buf, out, false)
}

fn parse_with(buf: &[u8], out: &mut Vec<Event>, fast: bool) -> usize {
    let mut skipped = 0;
    let trailing = split(buf, |_, msg| {
        if fast {
            match route_message(msg) {
                Fast::Event(e) => return out.push(e),
                Fast::Skip => return skipped += 1,
                Fast::Generic => {}
            }
        }
        match decode(msg) {
            Ok(NetlinkPayload::InnerMessage(m)) => match event(m) {
                Some(e) => out.push(e),
                None => skipped += 1,
            },
            Ok(NetlinkPayload::Noop) => {}
            Ok(_) | Err(()) => skipped += 1,
        }
    });
    skipped + usize::from(trailing != 0)
}

/// The event a decoded message stands for, or `None` if the mirror does not report it.
pub(crate) fn event(msg: RouteNetlinkMessage) -> Option<Event> {
    match msg {
        RouteNetlinkMessage::NewLink(m) => link(&m).map(Event::NewLink),
        RouteNetlinkMessage::DelLink(m) => link_index(&m).map(Event::DelLink),
        RouteNetlinkMessage::NewAddress(m) => addr(&m).map(Event::NewAddr),
        RouteNetlinkMessage::DelAddress(m) => addr(&m).map(Event::DelAddr),
        RouteNetlinkMessage::NewNeighbour(m) => neigh(&m).map(Event::NewNeigh),
        RouteNetlinkMessage::DelNeighbour(m) => neigh(&m).map(Event::DelNeigh),
        RouteNetlinkMessage::NewRoute(m) => route(&m).map(Event::NewRoute),
        RouteNetlinkMessage::DelRoute(m) => route(&m).map(Event::DelRoute),
        _ => None,
    }
}

fn mac(bytes: &[u8]) -> Option<[u8; 6]> {
    <[u8; 6]>::try_from(bytes).ok()
}

/// Interface index of a link message that describes a link itself. Bridge port messages
/// (`AF_BRIDGE`) share RTM_NEWLINK/RTM_DELLINK but a bridge-port DELLINK only means the port
/// left the bridge, so they are not link events.
fn link_index(m: &LinkMessage) -> Option<u32> {
    (m.header.interface_family == AddressFamily::Unspec && m.header.index != 0)
        .then_some(m.header.index)
}

fn link(m: &LinkMessage) -> Option<Link> {
    let ifindex = link_index(m)?;
    let mut name = None;
    let mut l = Link {
        ifindex,
        name: String::new(),
        mac: None,
        mtu: 0,
        up: m.header.flags.contains(LinkFlags::Up),
        oper_up: m.header.flags.contains(LinkFlags::Running),
        carrier: m.header.flags.contains(LinkFlags::LowerUp),
        point_to_point: m.header.flags.contains(LinkFlags::Pointopoint),
    };
    for a in &m.attributes {
        match a {
            LinkAttribute::IfName(n) => name = Some(n.clone()),
            LinkAttribute::Address(a) => l.mac = mac(a),
            LinkAttribute::Mtu(mtu) => l.mtu = *mtu,
            LinkAttribute::OperState(State::Up) => l.oper_up = true,
            _ => {}
        }
    }
    l.name = name?;
    Some(l)
}

fn addr(m: &AddressMessage) -> Option<Addr> {
    let mut address = None;
    let mut local = None;
    for a in &m.attributes {
        match a {
            AddressAttribute::Address(ip) => address = Some(*ip),
            AddressAttribute::Local(ip) => local = Some(*ip),
            _ => {}
        }
    }
    let ip = local.or(address)?;
    let family_ok = matches!(
        (m.header.family, ip),
        (AddressFamily::Inet, IpAddr::V4(_)) | (AddressFamily::Inet6, IpAddr::V6(_))
    );
    (family_ok && m.header.index != 0).then_some(Addr {
        ifindex: m.header.index,
        addr: ip,
        prefix_len: m.header.prefix_len,
    })
}

fn neigh(m: &NeighbourMessage) -> Option<Neigh> {
    // Proxy entries (`ip neigh add proxy`) are answers the kernel gives for others, not
    // hosts the fast path can send to.
    if m.header.flags.contains(NeighbourFlags::Proxy) || m.header.ifindex == 0 {
        return None;
    }
    let mut ip = None;
    let mut lladdr = None;
    for a in &m.attributes {
        match a {
            NeighbourAttribute::Destination(NeighbourAddress::Inet(v4))
                if m.header.family == AddressFamily::Inet =>
            {
                ip = Some(IpAddr::V4(*v4))
            }
            NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6))
                if m.header.family == AddressFamily::Inet6 =>
            {
                ip = Some(IpAddr::V6(*v6))
            }
            NeighbourAttribute::LinkLayerAddress(a) => lladdr = mac(a),
            _ => {}
        }
    }
    Some(Neigh {
        ifindex: m.header.ifindex,
        ip: ip?,
        mac: lladdr,
        state: m.header.state.into(),
    })
}

fn route_addr(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

fn via_addr(v: &RouteVia) -> Option<IpAddr> {
    match v {
        RouteVia::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteVia::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

/// Gateway named by a next hop's attributes: `RTA_GATEWAY`, or `RTA_VIA` (an IPv6 gateway
/// for an IPv4 route, RFC 5549, as BGP unnumbered uses).
fn gateway(attrs: &[RouteAttribute]) -> Option<IpAddr> {
    attrs.iter().find_map(|a| match a {
        RouteAttribute::Gateway(g) => route_addr(g),
        RouteAttribute::Via(v) => via_addr(v),
        _ => None,
    })
}

fn kind(t: RouteType) -> RouteKind {
    match t {
        RouteType::Unicast => RouteKind::Unicast,
        RouteType::BlackHole => RouteKind::Blackhole,
        RouteType::Unreachable => RouteKind::Unreachable,
        RouteType::Prohibit => RouteKind::Prohibit,
        RouteType::Local => RouteKind::Local,
        RouteType::Broadcast => RouteKind::Broadcast,
        other => RouteKind::Other(other.into()),
    }
}

fn route(m: &RouteMessage) -> Option<Route> {
    let any = match m.header.address_family {
        AddressFamily::Inet => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        AddressFamily::Inet6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        _ => return None,
    };
    // Cached clones (PMTU exceptions, redirects) are not routes anyone configured.
    if m.header.flags.contains(RouteFlags::Cloned) {
        return None;
    }
    let mut r = Route {
        table: u32::from(m.header.table),
        dst: any,
        dst_len: m.header.destination_prefix_length,
        kind: kind(m.header.kind),
        protocol: m.header.protocol.into(),
        priority: 0,
        nexthops: NextHops::new(),
    };
    let mut oif = None;
    let mut multipath = None;
    for a in &m.attributes {
        match a {
            RouteAttribute::Table(t) => r.table = *t,
            RouteAttribute::Destination(d) => r.dst = route_addr(d)?,
            RouteAttribute::Priority(p) => r.priority = *p,
            RouteAttribute::Oif(i) => oif = Some(*i),
            RouteAttribute::MultiPath(nhs) => multipath = Some(nhs),
            _ => {}
        }
    }
    if r.dst.is_ipv4() != any.is_ipv4() {
        return None;
    }
    let max_len = if any.is_ipv4() { 32 } else { 128 };
    if r.dst_len > max_len {
        return None;
    }
    match multipath {
        Some(nhs) => {
            r.nexthops = nhs
                .iter()
                .map(|nh| RouteNextHop {
                    gateway: gateway(&nh.attributes),
                    ifindex: (nh.interface_index != 0).then_some(nh.interface_index),
                    weight: u16::from(nh.hops) + 1,
                })
                .collect();
        }
        None => {
            let gw = gateway(&m.attributes);
            if gw.is_some() || oif.is_some() {
                r.nexthops.push(RouteNextHop {
                    gateway: gw,
                    ifindex: oif.filter(|&i| i != 0),
                    weight: 1,
                });
            }
        }
    }
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_short_buffers() {
        let mut out = Vec::new();
        assert_eq!(parse_messages(&[], &mut out), 0);
        assert_eq!(parse_messages(&[1, 2, 3], &mut out), 1);
        assert!(out.is_empty());
    }

    // RTM_NEWROUTE for 198.51.100.0/24 via 192.0.2.9 dev 2 proto static, main table,
    // as `ip monitor` captured it (trimmed of RTA_TABLE).
    const NEWROUTE: [u8; 52] = [
        52, 0, 0, 0, // len
        24, 0, // RTM_NEWROUTE
        0, 6, // flags: NLM_F_CREATE | NLM_F_EXCL
        0, 0, 0, 0, 0, 0, 0, 0, // seq, pid
        2, 24, 0, 0, 254, 4, 0, 1, 0, 0, 0, 0, // rtmsg: inet /24 main static universe unicast
        8, 0, 1, 0, 198, 51, 100, 0, // RTA_DST
        8, 0, 5, 0, 192, 0, 2, 9, // RTA_GATEWAY
        8, 0, 4, 0, 2, 0, 0, 0, // RTA_OIF
    ];

    #[test]
    fn route_message() {
        let mut out = Vec::new();
        assert_eq!(parse_messages(&NEWROUTE, &mut out), 0);
        assert_eq!(
            out,
            vec![Event::NewRoute(Route {
                table: 254,
                dst: "198.51.100.0".parse().unwrap(),
                dst_len: 24,
                kind: RouteKind::Unicast,
                protocol: 4,
                priority: 0,
                nexthops: vec![RouteNextHop {
                    gateway: Some("192.0.2.9".parse().unwrap()),
                    ifindex: Some(2),
                    weight: 1,
                }]
                .into(),
            })]
        );
    }

    #[test]
    fn two_messages_and_trailing_garbage() {
        let mut buf = NEWROUTE.to_vec();
        buf.extend_from_slice(&NEWROUTE);
        buf.extend_from_slice(&[0xff; 7]);
        let mut out = Vec::new();
        assert_eq!(parse_messages(&buf, &mut out), 1);
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn bad_prefix_length_is_skipped() {
        let mut buf = NEWROUTE;
        buf[17] = 33;
        let mut out = Vec::new();
        assert_eq!(parse_messages(&buf, &mut out), 1);
        assert!(out.is_empty());
    }
}
