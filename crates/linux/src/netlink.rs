//! Requests that change the kernel's configuration: addresses, MTUs, static routes and
//! permanent neighbours. Each is one ACKed rtnetlink request built from
//! netlink-packet-route's message types; the caller names the object in its messages.

use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL,
    NLM_F_REPLACE, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteNextHop as NlNextHop,
    RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use crate::error::Error;
use crate::mirror::{recv, set_rcvtimeo, REQUEST_TIMEOUT};
use crate::parse::{decode, split};
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
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl Netlink {
    /// Opens the socket.
    pub fn open() -> Result<Netlink, Error> {
        let mut sock = Socket::new(NETLINK_ROUTE).map_err(Error::Open)?;
        sock.bind_auto().map_err(Error::Open)?;
        sock.connect(&SocketAddr::new(0, 0)).map_err(Error::Open)?;
        set_rcvtimeo(sock.as_raw_fd(), REQUEST_TIMEOUT)?;
        Ok(Netlink {
            sock,
            seq: 0,
            buf: vec![0; 16 * 1024],
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
        // Drop whatever an abandoned request left behind.
        while recv(&self.sock, &mut self.buf, libc::MSG_DONTWAIT).is_ok() {}
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut header = NetlinkHeader::default();
        header.flags = flags | NLM_F_REQUEST | NLM_F_ACK;
        header.sequence_number = seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        packet.finalize();
        let mut bytes = vec![0; packet.buffer_len()];
        packet.serialize(&mut bytes);
        loop {
            match self.sock.send(&bytes, 0) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => return Err(Error::Send { what, source }),
            }
        }
        loop {
            let n = match recv(&self.sock, &mut self.buf, 0) {
                Ok(n) if n > self.buf.len() => {
                    // An ACK carrying our (large) request back; grow and wait for the next.
                    self.buf.resize(n.next_power_of_two(), 0);
                    continue;
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Err(Error::Timeout {
                        what,
                        timeout: REQUEST_TIMEOUT,
                    })
                }
                Err(source) => return Err(Error::Recv { what, source }),
            };
            let mut answer = None;
            split(&self.buf[..n], |h, m| {
                if h.seq == seq {
                    if let Ok(NetlinkPayload::Error(e)) = decode(m) {
                        answer = Some(e.raw_code());
                    }
                }
            });
            match answer {
                Some(0) => return Ok(()),
                Some(code) => {
                    return Err(Error::Kernel {
                        what,
                        source: io::Error::from_raw_os_error(-code),
                    })
                }
                None => continue,
            }
        }
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
