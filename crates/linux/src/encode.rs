//! [`Route`] → rtnetlink bytes (`RTM_NEWROUTE` / `RTM_DELROUTE`), as the kernel or FRR's
//! FPM would send them. The route-sync benchmark replays such a stream through the same
//! parser and sync the daemon runs, and tests use it to build hostile or large inputs.

use std::net::IpAddr;

use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_CREATE};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteNextHop as NlNextHop,
    RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use crate::types::{Route, RouteKind};

fn addr(a: IpAddr) -> RouteAddress {
    match a {
        IpAddr::V4(v) => RouteAddress::Inet(v),
        IpAddr::V6(v) => RouteAddress::Inet6(v),
    }
}

/// Append the netlink message announcing (`add`) or withdrawing `r` to `out`.
pub fn encode_route(r: &Route, add: bool, out: &mut Vec<u8>) {
    let mut m = RouteMessage::default();
    m.header = RouteHeader {
        address_family: if r.dst.is_ipv4() {
            AddressFamily::Inet
        } else {
            AddressFamily::Inet6
        },
        destination_prefix_length: r.dst_len,
        table: u8::try_from(r.table).unwrap_or(RouteHeader::RT_TABLE_UNSPEC),
        protocol: RouteProtocol::from(r.protocol),
        scope: RouteScope::Universe,
        kind: match r.kind {
            RouteKind::Blackhole => RouteType::BlackHole,
            RouteKind::Unreachable => RouteType::Unreachable,
            RouteKind::Prohibit => RouteType::Prohibit,
            RouteKind::Local => RouteType::Local,
            RouteKind::Broadcast => RouteType::Broadcast,
            RouteKind::Other(x) => RouteType::from(x),
            _ => RouteType::Unicast,
        },
        ..RouteHeader::default()
    };
    m.attributes.push(RouteAttribute::Table(r.table));
    m.attributes.push(RouteAttribute::Destination(addr(r.dst)));
    if r.priority != 0 {
        m.attributes.push(RouteAttribute::Priority(r.priority));
    }
    match r.nexthops.as_slice() {
        [] => {}
        [h] => {
            if let Some(g) = h.gateway {
                m.attributes.push(RouteAttribute::Gateway(addr(g)));
            }
            if let Some(i) = h.ifindex {
                m.attributes.push(RouteAttribute::Oif(i));
            }
        }
        hops => {
            let nhs = hops
                .iter()
                .map(|h| {
                    let mut n = NlNextHop::default();
                    n.hops = h.weight.saturating_sub(1).min(255) as u8;
                    n.interface_index = h.ifindex.unwrap_or(0);
                    if let Some(g) = h.gateway {
                        n.attributes.push(RouteAttribute::Gateway(addr(g)));
                    }
                    n
                })
                .collect();
            m.attributes.push(RouteAttribute::MultiPath(nhs));
        }
    }
    let mut h = NetlinkHeader::default();
    if add {
        h.flags = NLM_F_CREATE;
    }
    let payload = if add {
        RouteNetlinkMessage::NewRoute(m)
    } else {
        RouteNetlinkMessage::DelRoute(m)
    };
    let mut nl = NetlinkMessage::new(h, NetlinkPayload::from(payload));
    nl.finalize();
    let start = out.len();
    out.resize(start + nl.buffer_len(), 0);
    nl.serialize(&mut out[start..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Event, RouteNextHop};

    fn r(dst: &str, len: u8, hops: Vec<RouteNextHop>) -> Route {
        Route {
            table: 254,
            dst: dst.parse().unwrap(),
            dst_len: len,
            kind: RouteKind::Unicast,
            protocol: 186,
            priority: 20,
            nexthops: hops.into(),
        }
    }

    #[test]
    fn routes_round_trip_through_the_parser() {
        let hop = |g: &str, i| RouteNextHop {
            gateway: Some(g.parse().unwrap()),
            ifindex: Some(i),
            weight: 1,
        };
        let routes = [
            r("198.51.100.0", 24, vec![hop("192.0.2.9", 2)]),
            r("2001:db8:100::", 48, vec![hop("2001:db8::9", 3)]),
            r(
                "203.0.113.0",
                25,
                vec![hop("192.0.2.9", 2), hop("192.0.2.10", 3)],
            ),
            r("0.0.0.0", 0, vec![]),
        ];
        let mut buf = Vec::new();
        for x in &routes {
            encode_route(x, true, &mut buf);
        }
        encode_route(&routes[0], false, &mut buf);
        let mut out = Vec::new();
        assert_eq!(crate::parse_messages(&buf, &mut out), 0);
        let mut want: Vec<Event> = routes.iter().cloned().map(Event::NewRoute).collect();
        want.push(Event::DelRoute(routes[0].clone()));
        assert_eq!(out, want);
    }
}
