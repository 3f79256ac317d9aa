//! Dump: the snapshot carries links, addresses, neighbours and routes as `ip` configured them.

mod common;

use std::net::IpAddr;

use common::Netns;
use linux::{Mirror, Route, RouteKind, Snapshot, NUD_PERMANENT, RT_TABLE_MAIN};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn main_route<'a>(snap: &'a Snapshot, dst: &str, len: u8) -> &'a Route {
    snap.routes
        .iter()
        .find(|r| r.table == RT_TABLE_MAIN && r.dst == ip(dst) && r.dst_len == len)
        .unwrap_or_else(|| panic!("no route {dst}/{len} in {:#?}", snap.routes))
}

fn gateways(r: &Route) -> Vec<(Option<IpAddr>, Option<u32>)> {
    let mut g: Vec<_> = r.nexthops.iter().map(|n| (n.gateway, n.ifindex)).collect();
    g.sort();
    g
}

#[test]
fn dump_shows_what_ip_configured() {
    let mut ns = Netns::new("dump");
    ns.enter();
    for (name, mac) in [
        ("d0", "02:00:00:00:00:01"),
        ("d1", "02:00:00:00:00:02"),
        ("d2", "02:00:00:00:00:03"),
    ] {
        ns.add_link(name);
        ns.ip(&["link", "set", name, "address", mac, "mtu", "1400", "up"]);
    }
    ns.ip(&["addr", "add", "192.0.2.1/24", "dev", "d0"]);
    ns.ip(&["addr", "add", "2001:db8::1/64", "dev", "d0", "nodad"]);
    ns.ip(&["addr", "add", "10.1.0.1/24", "dev", "d1"]);
    ns.ip(&["addr", "add", "10.2.0.1/24", "dev", "d2"]);
    ns.ip(&["addr", "add", "2001:db8:a::1/64", "dev", "d1", "nodad"]);
    ns.ip(&["addr", "add", "2001:db8:b::1/64", "dev", "d2", "nodad"]);
    ns.ip(&[
        "neigh",
        "add",
        "192.0.2.9",
        "lladdr",
        "02:00:00:00:00:09",
        "dev",
        "d0",
        "nud",
        "permanent",
    ]);
    ns.ip(&["route", "add", "198.51.100.0/24", "via", "192.0.2.9"]);
    ns.ip(&["route", "add", "blackhole", "203.0.113.0/24"]);
    ns.ip(&[
        "route",
        "add",
        "100.64.0.0/16",
        "nexthop",
        "via",
        "10.1.0.9",
        "weight",
        "1",
        "nexthop",
        "via",
        "10.2.0.9",
        "weight",
        "3",
    ]);
    ns.ip(&[
        "-6",
        "route",
        "add",
        "2001:db8:1::/48",
        "via",
        "2001:db8::9",
    ]);
    ns.ip(&[
        "-6",
        "route",
        "add",
        "2001:db8:2::/48",
        "metric",
        "77",
        "nexthop",
        "via",
        "2001:db8:a::9",
        "dev",
        "d1",
        "nexthop",
        "via",
        "2001:db8:b::9",
        "dev",
        "d2",
    ]);
    // RFC 5549: an IPv4 route via an IPv6 gateway (RTA_VIA), as BGP unnumbered installs.
    ns.ip(&[
        "route",
        "add",
        "198.18.0.0/24",
        "via",
        "inet6",
        "2001:db8::9",
        "dev",
        "d0",
    ]);
    // A route over a kernel nexthop object (RTA_NH_ID), as FRR's zebra installs.
    ns.ip(&["nexthop", "add", "id", "7", "via", "192.0.2.9", "dev", "d0"]);
    ns.ip(&[
        "route",
        "add",
        "198.18.1.0/24",
        "nhid",
        "7",
        "proto",
        "zebra",
    ]);

    let mut mirror = Mirror::open(1 << 20).expect("open");
    let snap = mirror.dump().expect("dump");

    let link = |name: &str| {
        snap.links
            .iter()
            .find(|l| l.name == name)
            .unwrap_or_else(|| panic!("no link {name} in {:#?}", snap.links))
            .clone()
    };
    let d0 = link("d0");
    let d1 = link("d1").ifindex;
    let d2 = link("d2").ifindex;
    assert_eq!(d0.mac, Some([2, 0, 0, 0, 0, 1]));
    assert_eq!(d0.mtu, 1400);
    assert!(d0.up && d0.oper_up && d0.carrier, "{d0:?}");
    let lo = link("lo");
    assert!(lo.up);
    assert_eq!(lo.ifindex, 1);

    for (a, len, ifx) in [
        ("192.0.2.1", 24, d0.ifindex),
        ("2001:db8::1", 64, d0.ifindex),
        ("127.0.0.1", 8, 1),
    ] {
        assert!(
            snap.addrs
                .iter()
                .any(|x| x.addr == ip(a) && x.prefix_len == len && x.ifindex == ifx),
            "no addr {a}/{len} in {:#?}",
            snap.addrs
        );
    }

    let n = snap
        .neighs
        .iter()
        .find(|n| n.ip == ip("192.0.2.9"))
        .expect("neighbour");
    assert_eq!(n.ifindex, d0.ifindex);
    assert_eq!(n.mac, Some([2, 0, 0, 0, 0, 9]));
    assert_eq!(n.state, NUD_PERMANENT);
    assert!(n.usable());

    let r = main_route(&snap, "198.51.100.0", 24);
    assert_eq!(r.kind, RouteKind::Unicast);
    assert_eq!(r.protocol, 3, "RTPROT_BOOT, iproute2's default");
    assert_eq!(gateways(r), vec![(Some(ip("192.0.2.9")), Some(d0.ifindex))]);
    assert_eq!(r.nexthops[0].weight, 1);

    let r = main_route(&snap, "203.0.113.0", 24);
    assert_eq!(r.kind, RouteKind::Blackhole);
    assert!(r.nexthops.is_empty());

    let r = main_route(&snap, "100.64.0.0", 16);
    assert_eq!(
        gateways(r),
        vec![
            (Some(ip("10.1.0.9")), Some(d1)),
            (Some(ip("10.2.0.9")), Some(d2))
        ]
    );
    let mut weights: Vec<_> = r.nexthops.iter().map(|n| n.weight).collect();
    weights.sort();
    assert_eq!(weights, vec![1, 3]);

    let r = main_route(&snap, "2001:db8:1::", 48);
    assert_eq!(r.kind, RouteKind::Unicast);
    assert_eq!(
        gateways(r),
        vec![(Some(ip("2001:db8::9")), Some(d0.ifindex))]
    );

    let r = main_route(&snap, "2001:db8:2::", 48);
    assert_eq!(r.priority, 77);
    assert_eq!(
        gateways(r),
        vec![
            (Some(ip("2001:db8:a::9")), Some(d1)),
            (Some(ip("2001:db8:b::9")), Some(d2))
        ]
    );

    let r = main_route(&snap, "198.18.0.0", 24);
    assert_eq!(
        gateways(r),
        vec![(Some(ip("2001:db8::9")), Some(d0.ifindex))]
    );
    // Expanded by the kernel while net.ipv4.nexthop_compat_mode is 1 (the default).
    let r = main_route(&snap, "198.18.1.0", 24);
    assert_eq!(r.protocol, 11, "RTPROT_ZEBRA");
    assert_eq!(gateways(r), vec![(Some(ip("192.0.2.9")), Some(d0.ifindex))]);

    // Connected routes the kernel made for the addresses (proto kernel = 2).
    let r = main_route(&snap, "192.0.2.0", 24);
    assert_eq!(r.protocol, 2);
    assert_eq!(gateways(r), vec![(None, Some(d0.ifindex))]);
    let r = main_route(&snap, "2001:db8::", 64);
    assert_eq!(r.protocol, 2);
    assert_eq!(gateways(r), vec![(None, Some(d0.ifindex))]);
    // And the local table has the host route of the address.
    assert!(snap.routes.iter().any(|r| r.table == linux::RT_TABLE_LOCAL
        && r.kind == RouteKind::Local
        && r.dst == ip("192.0.2.1")
        && r.dst_len == 32));
    assert_eq!(
        mirror.skipped(),
        0,
        "nothing in a plain namespace should be unsupported"
    );
}
