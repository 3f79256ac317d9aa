//! Requests that change the kernel's configuration: addresses, MTUs, static routes and
//! permanent neighbours. Each is one ACKed rtnetlink request built from
//! netlink-packet-route's message types; the caller names the object in its messages.

use std::net::IpAddr;

use netlink_packet_core::{NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteNextHop as NlNextHop,
    RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use crate::error::Error;
use crate::mirror::Requests;
use crate::types::RT_TABLE_MAIN;

/// A static route as Ferrouter configures it: main table, `RTPROT_STATIC`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticRoute {
    /// Destination address (host bits zero).
    pub dst: IpAddr,
    /// Destination prefix length.
    pub dst_len: u8,
    /// Metric (`RTA_PRIORITY`); 0 sends none (the kernel's default).
    pub metric: u32,
    /// Where matching packets go.
    pub target: RouteTarget,
}

/// A static route's next hops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteTarget {
    /// Via these gateways (ECMP, `RTA_MULTIPATH`, when several), each optionally pinned to
    /// an output interface.
    Via(Vec<(IpAddr, Option<u32>)>),
    /// Drop silently (`RTN_BLACKHOLE`).
    Blackhole,
}

/// A NETLINK_ROUTE socket for configuration requests, in the network namespace of the
/// thread that opened it.
pub struct Netlink {
    requests: Requests,
}

impl Netlink {
    /// Opens the socket.
    pub fn open() -> Result<Netlink, Error> {
        Ok(Netlink {
            requests: Requests::open()?,
        })
    }

    /// Adds `addr/prefix_len` to interface `ifindex`; fails with EEXIST if it is there.
    pub fn add_address(&mut self, ifindex: u32, addr: IpAddr, prefix_len: u8) -> Result<(), Error> {
        let m = address_message(ifindex, addr, prefix_len);
        self.request(
            "RTM_NEWADDR",
            RouteNetlinkMessage::NewAddress(m),
            NLM_F_CREATE | NLM_F_EXCL,
        )
    }

    /// Removes `addr/prefix_len` from interface `ifindex`.
    pub fn del_address(&mut self, ifindex: u32, addr: IpAddr, prefix_len: u8) -> Result<(), Error> {
        let m = address_message(ifindex, addr, prefix_len);
        self.request("RTM_DELADDR", RouteNetlinkMessage::DelAddress(m), 0)
    }

    /// Sets the MTU of interface `ifindex`.
    pub fn set_mtu(&mut self, ifindex: u32, mtu: u32) -> Result<(), Error> {
        let mut m = LinkMessage::default();
        m.header.index = ifindex;
        m.attributes.push(LinkAttribute::Mtu(mtu));
        self.request("RTM_NEWLINK", RouteNetlinkMessage::NewLink(m), 0)
    }

    /// Sets interface `ifindex` administratively up or down (`IFF_UP`), as `ip link set
    /// dev DEV up|down`; no other flag changes.
    pub fn set_link_up(&mut self, ifindex: u32, up: bool) -> Result<(), Error> {
        let mut m = LinkMessage::default();
        m.header.index = ifindex;
        m.header.flags = if up {
            LinkFlags::Up
        } else {
            LinkFlags::empty()
        };
        m.header.change_mask = LinkFlags::Up;
        self.request("RTM_NEWLINK", RouteNetlinkMessage::NewLink(m), 0)
    }

    /// Adds a route to the main table; fails with EEXIST if one with the same destination
    /// and metric is there.
    pub fn add_route(&mut self, r: &StaticRoute) -> Result<(), Error> {
        let m = route_message(r, true);
        self.request(
            "RTM_NEWROUTE",
            RouteNetlinkMessage::NewRoute(m),
            NLM_F_CREATE | NLM_F_EXCL,
        )
    }

    /// Adds or replaces the route with the same destination and metric.
    pub fn replace_route(&mut self, r: &StaticRoute) -> Result<(), Error> {
        let m = route_message(r, true);
        self.request(
            "RTM_NEWROUTE",
            RouteNetlinkMessage::NewRoute(m),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
    }

    /// Deletes the static route with this destination, metric and type (all its next hops).
    pub fn del_route(&mut self, r: &StaticRoute) -> Result<(), Error> {
        let m = route_message(r, false);
        self.request("RTM_DELROUTE", RouteNetlinkMessage::DelRoute(m), 0)
    }

    /// Adds or replaces a permanent neighbour entry.
    pub fn set_neighbour(&mut self, ifindex: u32, ip: IpAddr, mac: [u8; 6]) -> Result<(), Error> {
        let mut m = neighbour_message(ifindex, ip);
        m.header.state = NeighbourState::Permanent;
        m.attributes
            .push(NeighbourAttribute::LinkLayerAddress(mac.to_vec()));
        self.request(
            "RTM_NEWNEIGH",
            RouteNetlinkMessage::NewNeighbour(m),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
    }

    /// Deletes a neighbour entry.
    pub fn del_neighbour(&mut self, ifindex: u32, ip: IpAddr) -> Result<(), Error> {
        let m = neighbour_message(ifindex, ip);
        self.request("RTM_DELNEIGH", RouteNetlinkMessage::DelNeighbour(m), 0)
    }

    fn request(
        &mut self,
        what: &'static str,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<(), Error> {
        self.requests
            .request_ack(what, msg, flags | NLM_F_REQUEST | NLM_F_ACK)
    }
}

fn family(ip: IpAddr) -> AddressFamily {
    if ip.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    }
}

fn address_message(ifindex: u32, addr: IpAddr, prefix_len: u8) -> AddressMessage {
    let mut m = AddressMessage::default();
    m.header.family = family(addr);
    m.header.prefix_len = prefix_len;
    m.header.index = ifindex;
    m.attributes.push(AddressAttribute::Local(addr));
    if addr.is_ipv4() {
        m.attributes.push(AddressAttribute::Address(addr));
    }
    m
}

fn neighbour_message(ifindex: u32, ip: IpAddr) -> NeighbourMessage {
    let mut m = NeighbourMessage::default();
    m.header.family = family(ip);
    m.header.ifindex = ifindex;
    m.attributes.push(NeighbourAttribute::Destination(match ip {
        IpAddr::V4(v) => NeighbourAddress::Inet(v),
        IpAddr::V6(v) => NeighbourAddress::Inet6(v),
    }));
    m
}

fn route_address(a: IpAddr) -> RouteAddress {
    match a {
        IpAddr::V4(v) => RouteAddress::Inet(v),
        IpAddr::V6(v) => RouteAddress::Inet6(v),
    }
}

fn route_message(r: &StaticRoute, with_hops: bool) -> RouteMessage {
    let mut m = RouteMessage::default();
    m.header = RouteHeader {
        address_family: family(r.dst),
        destination_prefix_length: r.dst_len,
        table: RouteHeader::RT_TABLE_MAIN,
        protocol: RouteProtocol::Static,
        scope: RouteScope::Universe,
        kind: match r.target {
            RouteTarget::Via(_) => RouteType::Unicast,
            RouteTarget::Blackhole => RouteType::BlackHole,
        },
        ..RouteHeader::default()
    };
    m.attributes.push(RouteAttribute::Table(RT_TABLE_MAIN));
    m.attributes
        .push(RouteAttribute::Destination(route_address(r.dst)));
    if r.metric != 0 {
        m.attributes.push(RouteAttribute::Priority(r.metric));
    }
    if !with_hops {
        return m;
    }
    match &r.target {
        RouteTarget::Blackhole => {}
        RouteTarget::Via(hops) if hops.len() == 1 => {
            let (g, oif) = hops[0];
            m.attributes.push(RouteAttribute::Gateway(route_address(g)));
            if let Some(i) = oif {
                m.attributes.push(RouteAttribute::Oif(i));
            }
        }
        RouteTarget::Via(hops) => {
            let nhs = hops
                .iter()
                .map(|&(g, oif)| {
                    let mut n = NlNextHop::default();
                    n.interface_index = oif.unwrap_or(0);
                    n.attributes.push(RouteAttribute::Gateway(route_address(g)));
                    n
                })
                .collect();
            m.attributes.push(RouteAttribute::MultiPath(nhs));
        }
    }
    m
}
