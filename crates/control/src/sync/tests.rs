use super::*;
use linux::{RouteNextHop, NUD_FAILED, NUD_REACHABLE};

const MAC_P0: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC_P1: [u8; 6] = [2, 0, 0, 0, 0, 2];

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn link(ifindex: u32, name: &str, mac: [u8; 6]) -> Link {
    Link {
        ifindex,
        name: name.into(),
        mac: Some(mac),
        mtu: 1500,
        up: true,
        oper_up: true,
        carrier: true,
        point_to_point: false,
    }
}

fn route(table: u32, dst: &str, len: u8, kind: RouteKind, hops: &[(Option<&str>, u32)]) -> Route {
    Route {
        table,
        dst: ip(dst),
        dst_len: len,
        kind,
        protocol: 4,
        priority: 0,
        nexthops: hops
            .iter()
            .map(|(g, i)| RouteNextHop {
                gateway: g.map(ip),
                ifindex: Some(*i),
                weight: 1,
            })
            .collect(),
    }
}

fn neigh(ifindex: u32, addr: &str, mac: [u8; 6], state: u16) -> Neigh {
    Neigh {
        ifindex,
        ip: ip(addr),
        mac: Some(mac),
        state,
    }
}

/// A sync over ports p0 (ifindex 10) and p1 (ifindex 11), with lo (1) not a port.
fn setup() -> (Sync, fib::FibReaders) {
    setup_with(Distances::default())
}

fn setup_with(d: Distances) -> (Sync, fib::FibReaders) {
    let (w, r) = fib::new(fib::FibConfig {
        max_tbl8_v4: 64,
        max_tbl8_v6: 1024,
        max_readers: 4,
    });
    let mut s = Sync::new(w, vec!["p0".into(), "p1".into()]);
    s.set_distances(d);
    s.resync(Snapshot {
        links: vec![
            link(1, "lo", [0; 6]),
            link(10, "p0", MAC_P0),
            link(11, "p1", MAC_P1),
        ],
        addrs: vec![Addr {
            ifindex: 10,
            addr: ip("192.0.2.1"),
            prefix_len: 24,
        }],
        neighs: vec![neigh(10, "192.0.2.9", [2, 9, 9, 9, 9, 9], NUD_REACHABLE)],
        routes: vec![
            route(
                MAIN_TABLE,
                "192.0.2.0",
                24,
                RouteKind::Unicast,
                &[(None, 10)],
            ),
            route(
                LOCAL_TABLE,
                "192.0.2.1",
                32,
                RouteKind::Local,
                &[(None, 10)],
            ),
            route(
                MAIN_TABLE,
                "198.51.100.0",
                24,
                RouteKind::Unicast,
                &[(Some("192.0.2.9"), 10)],
            ),
            route(MAIN_TABLE, "203.0.113.0", 24, RouteKind::Blackhole, &[]),
            route(
                MAIN_TABLE,
                "10.0.0.0",
                8,
                RouteKind::Unicast,
                &[(Some("192.0.2.9"), 10), (Some("192.0.2.10"), 10)],
            ),
            route(
                MAIN_TABLE,
                "172.16.0.0",
                12,
                RouteKind::Unicast,
                &[(Some("127.0.0.2"), 1)],
            ),
        ],
    });
    (s, r)
}

/// What the fast path would find for `a` (read through the writer, which this thread
/// owns: a registered reader here would hold back the writer's grace periods).
fn lookup(s: &Sync, a: &str) -> Option<NextHop> {
    let IpAddr::V4(v) = ip(a) else { unreachable!() };
    let w = s.writer();
    w.next_hop(w.lookup4(v.into())).cloned()
}

fn nh(s: &Sync, p: &str) -> String {
    s.routes(Some(p))
        .unwrap()
        .first()
        .map(|r| r.next_hop.clone())
        .unwrap_or_default()
}

/// A prefix with a kernel route and a BGP path: the lower administrative distance
/// wins (the kernel's by default; the speaker's when configured lower), and the other
/// takes over when the winner goes.
#[test]
fn administrative_distance_ranks_kernel_and_bgp_routes() {
    let p = (ip("198.51.100.0"), 24);
    let set = bgp::rib::Change::Set {
        prefix: p,
        next_hop: ip("192.0.2.10"),
    };
    let source = |s: &Sync| s.routes(Some("198.51.100.0/24")).unwrap()[0].source;
    let (mut s, _r) = setup();
    s.apply_bgp(std::slice::from_ref(&set));
    assert_eq!(
        source(&s),
        Source::Route,
        "the kernel's route wins by default"
    );
    s.apply_bgp(&[bgp::rib::Change::Remove { prefix: p }]);
    assert_eq!(source(&s), Source::Route);
    let (mut s, _r) = setup_with(Distances {
        kernel: 30,
        static_routes: 30,
        bgp: 20,
    });
    s.apply_bgp(std::slice::from_ref(&set));
    assert_eq!(source(&s), Source::Bgp, "bgp 20 < kernel 30");
    s.apply_bgp(&[bgp::rib::Change::Remove { prefix: p }]);
    assert_eq!(source(&s), Source::Route, "the kernel's route takes over");
}

/// Static routes (`proto static`) rank by their own distance: by default with the kernel's
/// other routes, by metric; above `kernel`, as a floating static route that a routing
/// daemon's route replaces while it exists. A replace that changes the protocol moves the
/// route between the two origins without leaving a stale copy.
#[test]
fn static_routes_have_their_own_distance() {
    let p = "203.0.114.0";
    let r = |proto: u8, metric: u32, gw: &str| {
        let mut r = route(MAIN_TABLE, p, 24, RouteKind::Unicast, &[(Some(gw), 10)]);
        r.protocol = proto;
        r.priority = metric;
        r
    };
    let via = |s: &Sync| nh(s, "203.0.114.0/24");
    // Static metric 100 against a BIRD route (protocol 12) of metric 200.
    let (mut s, _r) = setup();
    s.apply(Event::NewRoute(r(4, 100, "192.0.2.9")));
    s.apply(Event::NewRoute(r(12, 200, "192.0.2.10")));
    assert!(
        via(&s).contains("192.0.2.9"),
        "lower metric wins: {}",
        via(&s)
    );
    let (mut s, _r) = setup_with(Distances {
        static_routes: 5,
        ..Distances::default()
    });
    s.apply(Event::NewRoute(r(4, 100, "192.0.2.9")));
    s.apply(Event::NewRoute(r(12, 200, "192.0.2.10")));
    assert!(
        via(&s).contains("192.0.2.10"),
        "floating static: {}",
        via(&s)
    );
    s.apply(Event::DelRoute(r(12, 200, "192.0.2.10")));
    assert!(
        via(&s).contains("192.0.2.9"),
        "static takes over: {}",
        via(&s)
    );
    // Replaced in place by a route of another protocol, then deleted: nothing stays.
    s.apply(Event::NewRoute(r(3, 100, "192.0.2.10")));
    assert!(via(&s).contains("192.0.2.10"), "{}", via(&s));
    s.apply(Event::DelRoute(r(3, 100, "192.0.2.10")));
    assert!(
        s.routes(Some("203.0.114.0/24")).unwrap().is_empty(),
        "{}",
        via(&s)
    );
}

#[test]
fn kernel_state_becomes_fib_entries() {
    let (s, _r) = setup();
    assert!(
        matches!(lookup(&s, "192.0.2.1"), Some(NextHop::Local)),
        "own address punts"
    );
    assert!(
        matches!(lookup(&s, "192.0.2.77"), Some(NextHop::Glean { port: 0 })),
        "connected, unresolved"
    );
    match lookup(&s, "192.0.2.9") {
        Some(NextHop::Forward(a)) => assert_eq!(
            (a.port, a.dst_mac, a.src_mac),
            (0, [2, 9, 9, 9, 9, 9], MAC_P0)
        ),
        other => panic!("neighbour host route: {other:?}"),
    }
    assert!(
        matches!(lookup(&s, "198.51.100.5"), Some(NextHop::Forward(_))),
        "via a resolved gateway"
    );
    assert!(matches!(lookup(&s, "203.0.113.5"), Some(NextHop::Drop)));
    assert!(matches!(lookup(&s, "10.1.2.3"), Some(NextHop::Ecmp(m)) if m.len() == 2));
    assert!(
        matches!(lookup(&s, "172.16.0.1"), Some(NextHop::Local)),
        "via a non-port interface: kernel"
    );
    assert!(
        nh(&s, "10.0.0.0/8").starts_with("ecmp ["),
        "{}",
        nh(&s, "10.0.0.0/8")
    );
    assert_eq!(
        s.local_addresses(),
        vec![ip("192.0.2.1"), ip("192.0.2.255")],
        "the address and its subnet's directed broadcast"
    );
    assert_eq!(
        s.glean_target(ip("192.0.2.77")),
        Some((10, ip("192.0.2.77")))
    );
}

#[test]
fn neighbour_changes_switch_every_route_through_it() {
    let (mut s, _r) = setup();
    s.apply(Event::NewNeigh(neigh(
        10,
        "192.0.2.9",
        [2, 8, 8, 8, 8, 8],
        NUD_REACHABLE,
    )));
    let Some(NextHop::Forward(a)) = lookup(&s, "198.51.100.5") else {
        panic!()
    };
    assert_eq!(
        a.dst_mac,
        [2, 8, 8, 8, 8, 8],
        "gateway MAC change reaches the route"
    );
    s.apply(Event::NewNeigh(neigh(
        10,
        "192.0.2.9",
        [2, 8, 8, 8, 8, 8],
        NUD_FAILED,
    )));
    assert!(
        matches!(lookup(&s, "198.51.100.5"), Some(NextHop::Glean { port: 0 })),
        "failed neighbour: glean"
    );
    assert!(
        matches!(lookup(&s, "192.0.2.9"), Some(NextHop::Glean { .. })),
        "host route gone, connected glean"
    );
    assert_eq!(
        s.glean_target(ip("198.51.100.5")),
        Some((10, ip("192.0.2.9"))),
        "resolve the gateway"
    );
    // A port MAC change re-publishes its adjacencies.
    s.apply(Event::NewNeigh(neigh(
        10,
        "192.0.2.9",
        [2, 8, 8, 8, 8, 8],
        NUD_REACHABLE,
    )));
    s.apply(Event::NewLink(link(10, "p0", [2, 7, 7, 7, 7, 7])));
    let Some(NextHop::Forward(a)) = lookup(&s, "198.51.100.5") else {
        panic!()
    };
    assert_eq!(a.src_mac, [2, 7, 7, 7, 7, 7]);
}

#[test]
fn route_events_metric_preference_and_cleanup() {
    let (mut s, _r) = setup();
    let mut better = route(MAIN_TABLE, "198.51.100.0", 24, RouteKind::Blackhole, &[]);
    better.priority = 0;
    let mut worse = route(
        MAIN_TABLE,
        "198.51.100.0",
        24,
        RouteKind::Unicast,
        &[(Some("192.0.2.9"), 10)],
    );
    worse.priority = 100;
    s.apply(Event::NewRoute(worse.clone()));
    s.apply(Event::DelRoute(route(
        MAIN_TABLE,
        "198.51.100.0",
        24,
        RouteKind::Unicast,
        &[(Some("192.0.2.9"), 10)],
    )));
    assert!(
        matches!(lookup(&s, "198.51.100.5"), Some(NextHop::Forward(_))),
        "metric 100 route remains"
    );
    s.apply(Event::NewRoute(better.clone()));
    assert!(
        matches!(lookup(&s, "198.51.100.5"), Some(NextHop::Drop)),
        "lower metric wins"
    );
    s.apply(Event::DelRoute(better));
    s.apply(Event::DelRoute(worse));
    assert_eq!(lookup(&s, "198.51.100.5"), None, "all gone: no route");
    s.apply(Event::DelRoute(route(
        MAIN_TABLE,
        "10.0.0.0",
        8,
        RouteKind::Unicast,
        &[],
    )));
    assert_eq!(lookup(&s, "10.1.1.1"), None);
    // Every next hop that no route uses any more was released.
    let used: usize = s.nh.values().map(|e| e.refs).sum();
    assert!(
        s.nh.len() <= 6 && used >= s.nh.len(),
        "{} next hops left",
        s.nh.len()
    );
}

#[test]
fn ipv6_multipath_partial_delete_keeps_the_rest() {
    let (mut s, _r) = setup();
    let full = route(
        MAIN_TABLE,
        "2001:db8:9::",
        48,
        RouteKind::Unicast,
        &[(Some("fe80::1"), 10), (Some("fe80::2"), 11)],
    );
    s.apply(Event::NewRoute(full));
    let key: [u8; 16] = "2001:db8:9::1"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    assert!(
        matches!(s.writer().next_hop(s.writer().lookup6(&key)), Some(NextHop::Ecmp(m)) if m.len() == 2)
    );
    s.apply(Event::DelRoute(route(
        MAIN_TABLE,
        "2001:db8:9::",
        48,
        RouteKind::Unicast,
        &[(Some("fe80::1"), 10)],
    )));
    assert!(
        matches!(
            s.writer().next_hop(s.writer().lookup6(&key)),
            Some(NextHop::Glean { port: 1 })
        ),
        "one hop left, on p1"
    );
    s.apply(Event::DelRoute(route(
        MAIN_TABLE,
        "2001:db8:9::",
        48,
        RouteKind::Unicast,
        &[(Some("fe80::2"), 11)],
    )));
    assert_eq!(s.writer().lookup6(&key), fib::MISS);
}

fn link_state(ifindex: u32, name: &str, mac: [u8; 6], up: bool, oper_up: bool) -> Link {
    Link {
        up,
        oper_up,
        carrier: oper_up,
        ..link(ifindex, name, mac)
    }
}

/// Carrier loss on a port: ECMP groups lose their members through it, routes with no
/// next hop left give way to others (a higher metric, a covering prefix), neighbours'
/// host routes through it go; all of it comes back with the carrier.
#[test]
fn next_hops_through_a_down_link_are_not_used() {
    let (mut s, _r) = setup();
    s.apply(Event::NewNeigh(neigh(
        11,
        "198.51.100.9",
        MAC_P1,
        NUD_REACHABLE,
    )));
    s.apply(Event::NewRoute(route(
        MAIN_TABLE,
        "198.51.100.0",
        24,
        RouteKind::Unicast,
        &[(None, 11)],
    )));
    let ecmp = route(
        MAIN_TABLE,
        "10.0.0.0",
        8,
        RouteKind::Unicast,
        &[(Some("192.0.2.9"), 10), (Some("198.51.100.9"), 11)],
    );
    s.apply(Event::NewRoute(ecmp));
    // A floating route: 172.20/16 via p0 (metric 0), or via p1 (metric 100).
    s.apply(Event::NewRoute(route(
        MAIN_TABLE,
        "172.20.0.0",
        16,
        RouteKind::Unicast,
        &[(Some("192.0.2.9"), 10)],
    )));
    let mut backup = route(
        MAIN_TABLE,
        "172.20.0.0",
        16,
        RouteKind::Unicast,
        &[(Some("198.51.100.9"), 11)],
    );
    backup.priority = 100;
    s.apply(Event::NewRoute(backup));
    s.apply(Event::NewRoute(route(
        MAIN_TABLE,
        "0.0.0.0",
        0,
        RouteKind::Unicast,
        &[(Some("198.51.100.9"), 11)],
    )));
    assert!(matches!(lookup(&s, "10.1.1.1"), Some(NextHop::Ecmp(m)) if m.len() == 2));
    assert!(matches!(lookup(&s, "172.20.0.1"), Some(NextHop::Forward(a)) if a.port == 0));
    assert!(!s.interfaces().ports[0].down);

    let v = s.interfaces_version();
    s.apply(Event::NewLink(link_state(10, "p0", MAC_P0, true, false)));
    assert!(s.interfaces_version() > v);
    assert!(s.interfaces().ports[0].down && !s.interfaces().ports[1].down);
    for dst in ["10.1.1.1", "172.20.0.1", "192.0.2.77", "192.0.2.9"] {
        assert!(
            matches!(lookup(&s, dst), Some(NextHop::Forward(a)) if a.port == 1),
            "{dst}: {:?}",
            lookup(&s, dst)
        );
    }
    assert!(
        nh(&s, "10.0.0.0/8").starts_with("via 198.51.100.9 dev p1"),
        "{}",
        nh(&s, "10.0.0.0/8")
    );
    assert_eq!(
        s.routes(Some("192.0.2.0/24")).unwrap().len(),
        0,
        "connected route withdrawn"
    );
    assert!(
        matches!(lookup(&s, "192.0.2.1"), Some(NextHop::Local)),
        "own address stays"
    );
    let l = s.port_link(0, &[]);
    assert_eq!(
        (l.admin_up, l.oper.as_str(), l.reason.as_deref()),
        (true, "no-carrier", Some("no carrier"))
    );

    s.apply(Event::NewLink(link(10, "p0", MAC_P0)));
    assert!(!s.interfaces().ports[0].down);
    assert!(matches!(lookup(&s, "10.1.1.1"), Some(NextHop::Ecmp(m)) if m.len() == 2));
    assert!(matches!(lookup(&s, "172.20.0.1"), Some(NextHop::Forward(a)) if a.port == 0));
    assert!(matches!(
        lookup(&s, "192.0.2.77"),
        Some(NextHop::Glean { port: 0 })
    ));
    assert!(matches!(lookup(&s, "192.0.2.9"), Some(NextHop::Forward(a)) if a.port == 0));
    assert_eq!(s.port_link(0, &[]).reason, None);
}

/// Admin down: the kernel silently deletes the IPv4 routes whose next hops are all
/// through down links (connected, static), keeps multipath routes with a live next hop
/// and the addresses' local routes; the mirror does the same, so what the kernel does
/// not restore on up does not come back in the FIB either.
#[test]
fn admin_down_forgets_what_the_kernel_flushes() {
    let (mut s, _r) = setup();
    s.apply(Event::NewRoute(route(
        MAIN_TABLE,
        "10.0.0.0",
        8,
        RouteKind::Unicast,
        &[(Some("192.0.2.9"), 10), (Some("198.51.100.9"), 11)],
    )));
    s.apply(Event::NewRoute(route(
        MAIN_TABLE,
        "2001:db8:9::",
        48,
        RouteKind::Unicast,
        &[(Some("fe80::1"), 10)],
    )));
    let held = vec!["p0".to_string()];
    s.apply(Event::NewLink(link_state(10, "p0", MAC_P0, false, false)));
    let l = s.port_link(0, &held);
    assert_eq!((l.admin_up, l.oper.as_str()), (false, "down"));
    assert_eq!(
        l.reason.as_deref(),
        Some("admin down by config (enabled = false)")
    );
    assert!(s
        .port_link(0, &[])
        .reason
        .unwrap()
        .contains("outside ferrouter"));
    assert_eq!(lookup(&s, "198.51.100.5"), None, "static via p0 gone");
    assert!(matches!(
        lookup(&s, "10.1.1.1"),
        Some(NextHop::Glean { port: 1 })
    ));
    assert!(matches!(lookup(&s, "192.0.2.1"), Some(NextHop::Local)));
    s.apply(Event::NewLink(link(10, "p0", MAC_P0)));
    // The kernel adds the connected route again (and says so); the static one stays
    // gone until re-added, as in the kernel. The IPv6 route (the kernel reports its
    // deletion itself) and the multipath route are back whole.
    assert_eq!(lookup(&s, "198.51.100.5"), None);
    assert_eq!(lookup(&s, "192.0.2.77"), None);
    assert!(matches!(lookup(&s, "10.1.1.1"), Some(NextHop::Ecmp(m)) if m.len() == 2));
    let key = "2001:db8:9::1"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    assert!(matches!(
        s.writer().next_hop(s.writer().lookup6(&key)),
        Some(NextHop::Glean { port: 0 })
    ));
}

/// A VLAN sub-interface is down with its parent.
#[test]
fn a_sub_interface_is_down_with_its_parent() {
    let (w, _r) = fib::new(fib::FibConfig {
        max_tbl8_v4: 64,
        max_tbl8_v6: 64,
        max_readers: 2,
    });
    let mut s = Sync::new(w, vec!["p0".into(), "p0.7".into()]);
    s.set_vlans(vec![
        None,
        Some(dataplane::interfaces::VlanTags {
            parent: 0,
            tpid: 0x8100,
            outer: 7,
            inner: 0,
        }),
    ]);
    s.resync(Snapshot {
        links: vec![link(10, "p0", MAC_P0), link(12, "p0.7", MAC_P0)],
        routes: vec![route(
            MAIN_TABLE,
            "10.7.0.0",
            24,
            RouteKind::Unicast,
            &[(None, 12)],
        )],
        ..Snapshot::default()
    });
    assert!(matches!(
        lookup(&s, "10.7.0.1"),
        Some(NextHop::Glean { port: 1 })
    ));
    s.apply(Event::NewLink(link_state(10, "p0", MAC_P0, true, false)));
    assert!(s.interfaces().ports[1].down);
    assert_eq!(lookup(&s, "10.7.0.1"), None);
    let l = s.port_link(1, &[]);
    assert_eq!(
        (l.oper.as_str(), l.reason.as_deref()),
        ("down", Some("parent port p0 is down"))
    );
    s.apply(Event::NewLink(link(10, "p0", MAC_P0)));
    assert!(matches!(
        lookup(&s, "10.7.0.1"),
        Some(NextHop::Glean { port: 1 })
    ));
}

#[test]
fn overflow_asks_for_resync_and_resync_converges() {
    let (mut s, _r) = setup();
    assert!(!s.apply(Event::Overflow));
    // The dump after an overflow lost the blackhole and gained a route.
    s.resync(Snapshot {
        links: vec![link(10, "p0", MAC_P0), link(11, "p1", MAC_P1)],
        addrs: vec![],
        neighs: vec![],
        routes: vec![route(
            MAIN_TABLE,
            "100.64.0.0",
            10,
            RouteKind::Unicast,
            &[(None, 11)],
        )],
    });
    assert_eq!(lookup(&s, "203.0.113.5"), None);
    assert_eq!(lookup(&s, "192.0.2.1"), None);
    assert!(matches!(
        lookup(&s, "100.64.1.1"),
        Some(NextHop::Glean { port: 1 })
    ));
    assert_eq!(s.route_counts(), (1, 0));
    assert_eq!(s.stats().resyncs, 2);
}

/// Random route, neighbour, link and resync sequences over a few overlapping prefixes,
/// next hops and tables.
mod random {
    use super::*;
    use proptest::prelude::*;

    const P4: [(&str, u8); 7] = [
        ("10.0.0.0", 8),
        ("10.1.0.0", 16),
        ("10.1.2.0", 24),
        ("10.1.2.3", 32),
        ("192.0.2.9", 32),
        ("192.0.2.0", 24),
        ("0.0.0.0", 0),
    ];
    const P6: [(&str, u8); 4] = [
        ("2001:db8:9::", 48),
        ("2001:db8:9::1", 128),
        ("fe80::1", 128),
        ("::", 0),
    ];
    const H4: [(Option<&str>, Option<u32>); 6] = [
        (Some("192.0.2.9"), Some(10)),
        (Some("192.0.2.10"), Some(11)),
        (None, Some(10)),
        (Some("127.0.0.2"), Some(1)),
        (Some("192.0.2.9"), None),
        (Some("192.0.2.9"), Some(11)),
    ];
    const H6: [(Option<&str>, Option<u32>); 4] = [
        (Some("fe80::1"), Some(10)),
        (Some("fe80::2"), Some(11)),
        (None, Some(11)),
        (Some("fe80::1"), Some(11)),
    ];

    fn arb_route() -> impl Strategy<Value = Route> {
        (
            any::<bool>(),
            0usize..7,
            prop_oneof![Just(254u32), Just(255), Just(100)],
            prop_oneof![
                4 => Just(RouteKind::Unicast),
                1 => Just(RouteKind::Blackhole),
                1 => Just(RouteKind::Unreachable),
                1 => Just(RouteKind::Local),
                1 => Just(RouteKind::Broadcast),
                1 => Just(RouteKind::Other(9)),
            ],
            prop_oneof![Just(0u32), Just(10), Just(20)],
            proptest::collection::vec((0usize..6, 1u16..3), 0..4),
        )
            .prop_map(|(is4, pi, table, kind, priority, hops)| {
                let (dst, dst_len) = if is4 { P4[pi] } else { P6[pi % 4] };
                let nexthops = hops
                    .into_iter()
                    .map(|(h, weight)| {
                        let (g, i) = if is4 { H4[h] } else { H6[h % 4] };
                        RouteNextHop {
                            gateway: g.map(ip),
                            ifindex: i,
                            weight,
                        }
                    })
                    .collect();
                Route {
                    table,
                    dst: ip(dst),
                    dst_len,
                    kind,
                    protocol: 4,
                    priority,
                    nexthops,
                }
            })
    }

    #[derive(Clone, Debug)]
    enum Op {
        Ev(Event),
        Resync(Vec<Route>),
    }

    fn arb_op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => arb_route().prop_map(|r| Op::Ev(Event::NewRoute(r))),
            6 => arb_route().prop_map(|r| Op::Ev(Event::DelRoute(r))),
            2 => (0usize..3, prop_oneof![Just(NUD_REACHABLE), Just(NUD_FAILED)], any::<bool>())
                .prop_map(|(i, st, add)| {
                    let (ifx, a) = [(10, "192.0.2.9"), (11, "192.0.2.10"), (10, "10.1.2.3")][i];
                    let n = neigh(ifx, a, [2, 9, 9, 9, 9, i as u8], st);
                    Op::Ev(if add { Event::NewNeigh(n) } else { Event::DelNeigh(n) })
                }),
            1 => any::<u8>().prop_map(|m| Op::Ev(Event::NewLink(link(10, "p0", [2, 0, 0, 0, 0, m])))),
            2 => (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(p1, up, oper)| {
                let (ifx, name, mac) = if p1 { (11, "p1", MAC_P1) } else { (10, "p0", MAC_P0) };
                Op::Ev(Event::NewLink(Link { up, oper_up: oper, carrier: oper, ..link(ifx, name, mac) }))
            }),
            1 => Just(Op::Ev(Event::DelLink(11))),
            1 => Just(Op::Ev(Event::NewLink(link(11, "p1", MAC_P1)))),
            1 => proptest::collection::vec(arb_route(), 0..6).prop_map(Op::Resync),
        ]
    }

    fn snapshot(routes: Vec<Route>) -> Snapshot {
        Snapshot {
            links: vec![
                link(1, "lo", [0; 6]),
                link(10, "p0", MAC_P0),
                link(11, "p1", MAC_P1),
            ],
            addrs: vec![],
            neighs: vec![neigh(10, "192.0.2.9", [2, 9, 9, 9, 9, 9], NUD_REACHABLE)],
            routes,
        }
    }

    /// The sync's books balance: no empty prefix entries, interned next-hop lists
    /// counted once per stored route, next-hop references = installed prefixes + group
    /// memberships, and the FIB holds exactly the installed prefixes.
    fn check_books(s: &Sync) -> Result<(), TestCaseError> {
        let mut routes = 0;
        let mut hop_refs: FxHashMap<HopsId, u32> = FxHashMap::default();
        let mut nh_refs: FxHashMap<NextHopId, usize> = FxHashMap::default();
        for (p, st) in &s.prefixes {
            prop_assert!(
                !st.routes.is_empty() || st.installed.is_some(),
                "empty entry {p:?}"
            );
            routes += st.routes.len();
            for r in &st.routes {
                *hop_refs.entry(r.hops).or_default() += 1;
            }
            if let Some(i) = st.installed {
                *nh_refs.entry(i.nh).or_default() += 1;
                let in_fib = match p.0 {
                    IpAddr::V4(a) => s.writer.get4(a.into(), p.1),
                    IpAddr::V6(a) => s.writer.get6(&a.octets(), p.1),
                };
                prop_assert_eq!(in_fib, Some(i.nh), "{:?}", p);
            }
        }
        prop_assert_eq!(s.mirrored_routes(), routes);
        for (id, l) in s.hop_lists.lists.iter().enumerate() {
            let id = id as HopsId;
            prop_assert_eq!(l.refs, hop_refs.get(&id).copied().unwrap_or(0));
            if l.refs > 0 {
                prop_assert_eq!(s.hop_lists.ids.get(&l.hops), Some(&id));
            }
        }
        prop_assert_eq!(s.hop_lists.ids.len(), hop_refs.len());
        for e in s.nh.values() {
            if let NhKey::Group(m) = &e.key {
                for x in m {
                    *nh_refs.entry(*x).or_default() += 1;
                }
            }
        }
        for (id, e) in &s.nh {
            prop_assert_eq!(e.refs, nh_refs.get(id).copied().unwrap_or(0), "{:?}", e.key);
            prop_assert!(e.refs > 0);
        }
        let m = s.writer.memory();
        let (v4, v6) = s.route_counts();
        prop_assert_eq!((m.routes_v4, m.routes_v6), (v4, v6));
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn books_balance_through_random_changes(ops in proptest::collection::vec(arb_op(), 1..60)) {
            let (mut s, _r) = setup();
            for op in ops {
                match op {
                    Op::Ev(e) => {
                        s.apply(e);
                    }
                    Op::Resync(rs) => s.resync(snapshot(rs)),
                }
                check_books(&s)?;
            }
            // A dump with nothing in it: every prefix, list and next hop goes.
            s.resync(Snapshot::default());
            check_books(&s)?;
            prop_assert!(s.prefixes.is_empty() && s.nh.is_empty());
            prop_assert!(s.hop_lists.ids.is_empty());
        }

        /// A batch through `apply_all` (which looks ahead) does what the same events do
        /// one by one through `apply`.
        #[test]
        fn apply_all_is_apply_in_order(ops in proptest::collection::vec(arb_op(), 1..60)) {
            let (mut one, _r1) = setup();
            let (mut all, _r2) = setup();
            let mut batch = Vec::new();
            let mut ok = (true, true);
            let view = |s: &Sync| {
                let mut nh: Vec<_> = s.nh.iter().map(|(id, e)| (*id, e.key.clone(), e.refs)).collect();
                nh.sort_by_key(|x| x.0);
                (s.routes(None).unwrap().into_iter().map(|r| (r.prefix, r.source, r.next_hop)).collect::<Vec<_>>(), nh)
            };
            for op in ops.into_iter().chain([Op::Resync(vec![])]) {
                match op {
                    Op::Ev(e) => {
                        ok.0 &= one.apply(e.clone());
                        batch.push(e);
                    }
                    Op::Resync(rs) => {
                        ok.1 &= all.apply_all(&mut batch);
                        prop_assert!(batch.is_empty());
                        prop_assert_eq!(ok.0, ok.1);
                        prop_assert_eq!(view(&one), view(&all));
                        for a in ["10.1.2.3", "10.9.9.9", "192.0.2.9", "192.0.2.44"] {
                            let IpAddr::V4(x) = ip(a) else { unreachable!() };
                            prop_assert_eq!(one.writer().lookup4(x.into()), all.writer().lookup4(x.into()));
                        }
                        one.resync(snapshot(rs.clone()));
                        all.resync(snapshot(rs));
                    }
                }
            }
        }
    }
}

/// A point-to-point link (an IPsec tunnel interface, a TUN device): routes through it,
/// with a gateway or without, go to one adjacency with no link-layer addresses and its
/// MTU; nothing waits for a neighbour. The same port as a broadcast link gleans.
#[test]
fn routes_through_a_point_to_point_link_need_no_neighbour() {
    let (mut s, _r) = setup();
    let tun = Link {
        mac: None,
        mtu: 1400,
        point_to_point: true,
        ..link(11, "p1", MAC_P1)
    };
    s.apply(Event::NewLink(tun.clone()));
    s.apply(Event::NewRoute(route(
        MAIN_TABLE,
        "10.2.0.0",
        16,
        RouteKind::Unicast,
        &[(None, 11)],
    )));
    s.apply(Event::NewRoute(route(
        MAIN_TABLE,
        "10.3.0.0",
        16,
        RouteKind::Unicast,
        &[(Some("10.255.0.2"), 11)],
    )));
    for dst in ["10.2.0.5", "10.3.0.5"] {
        assert_eq!(
            lookup(&s, dst),
            Some(NextHop::Forward(fib::Adjacency {
                port: 1,
                dst_mac: [0; 6],
                src_mac: [0; 6],
                mtu: 1400,
            })),
            "{dst}"
        );
    }
    // No longer point-to-point: the route without a gateway gleans.
    s.apply(Event::NewLink(Link {
        point_to_point: false,
        ..tun
    }));
    assert_eq!(lookup(&s, "10.2.0.5"), Some(NextHop::Glean { port: 1 }));
}
