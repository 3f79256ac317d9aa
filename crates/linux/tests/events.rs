//! Events: changes made with `ip` after the mirror is open come back from `poll_events`.

mod common;

use std::net::IpAddr;
use std::time::Duration;

use common::{wait_for, Netns};
use linux::{Addr, Event, Mirror, RouteKind, RT_TABLE_MAIN};

const WAIT: Duration = Duration::from_secs(2);

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn changes_arrive_as_events() {
    let mut ns = Netns::new("events");
    ns.enter();
    ns.add_link("e0");
    ns.ip(&["link", "set", "e0", "up"]);
    let mut mirror = Mirror::open(1 << 20).expect("open");
    let snap = mirror.dump().expect("dump");
    let e0 = snap.links.iter().find(|l| l.name == "e0").unwrap().ifindex;
    let mut seen = Vec::new();

    ns.ip(&["link", "set", "e0", "mtu", "1280"]);
    assert!(
        wait_for(&mut mirror, &mut seen, WAIT, |e| matches!(e,
            Event::NewLink(l) if l.ifindex == e0 && l.mtu == 1280)),
        "no MTU change in {seen:#?}"
    );

    ns.ip(&["addr", "add", "192.0.2.1/24", "dev", "e0"]);
    let a = Addr {
        ifindex: e0,
        addr: ip("192.0.2.1"),
        prefix_len: 24,
    };
    assert!(
        wait_for(&mut mirror, &mut seen, WAIT, |e| *e
            == Event::NewAddr(a.clone())),
        "{seen:#?}"
    );
    // The kernel adds the connected route with it.
    assert!(wait_for(&mut mirror, &mut seen, WAIT, |e| matches!(e,
        Event::NewRoute(r) if r.table == RT_TABLE_MAIN && r.dst == ip("192.0.2.0") && r.dst_len == 24)));

    ns.ip(&[
        "neigh",
        "add",
        "192.0.2.9",
        "lladdr",
        "02:00:00:00:00:09",
        "dev",
        "e0",
        "nud",
        "reachable",
    ]);
    assert!(wait_for(&mut mirror, &mut seen, WAIT, |e| matches!(e,
        Event::NewNeigh(n) if n.ip == ip("192.0.2.9") && n.mac == Some([2, 0, 0, 0, 0, 9]) && n.usable())));

    ns.ip(&[
        "route",
        "add",
        "198.51.100.0/24",
        "via",
        "192.0.2.9",
        "proto",
        "bird",
        "metric",
        "10",
    ]);
    assert!(wait_for(&mut mirror, &mut seen, WAIT, |e| matches!(e,
        Event::NewRoute(r) if r.dst == ip("198.51.100.0") && r.protocol == 12 && r.priority == 10
            && r.kind == RouteKind::Unicast
            && r.nexthops.len() == 1 && r.nexthops[0].gateway == Some(ip("192.0.2.9")))));

    ns.ip(&["route", "del", "198.51.100.0/24"]);
    assert!(wait_for(&mut mirror, &mut seen, WAIT, |e| matches!(e,
        Event::DelRoute(r) if r.dst == ip("198.51.100.0") && r.dst_len == 24)));

    ns.ip(&["neigh", "del", "192.0.2.9", "dev", "e0"]);
    assert!(wait_for(&mut mirror, &mut seen, WAIT, |e| matches!(e,
        Event::DelNeigh(n) if n.ip == ip("192.0.2.9") && n.ifindex == e0)));

    ns.ip(&["addr", "del", "192.0.2.1/24", "dev", "e0"]);
    assert!(wait_for(&mut mirror, &mut seen, WAIT, |e| *e
        == Event::DelAddr(a.clone())));

    ns.ip(&["link", "set", "e0", "down"]);
    assert!(wait_for(&mut mirror, &mut seen, WAIT, |e| matches!(e,
        Event::NewLink(l) if l.ifindex == e0 && !l.up && !l.oper_up && !l.carrier)));
    ns.ip(&["link", "set", "e0", "up"]);
    assert!(wait_for(&mut mirror, &mut seen, WAIT, |e| matches!(e,
        Event::NewLink(l) if l.ifindex == e0 && l.up)));

    ns.ip(&["link", "del", "e0"]);
    assert!(wait_for(&mut mirror, &mut seen, WAIT, |e| *e == Event::DelLink(e0)));
    assert!(!seen.contains(&Event::Overflow));
}

/// IPv6 keeps same-metric routes to one prefix as one multipath route: appending reports the
/// whole set, deleting one next hop reports just that one.
#[test]
fn ipv6_multipath_append_and_partial_delete() {
    let mut ns = Netns::new("ev6");
    ns.enter();
    for l in ["f1", "f2"] {
        ns.add_link(l);
        ns.ip(&["link", "set", l, "up"]);
    }
    ns.ip(&["addr", "add", "2001:db8:a::1/64", "dev", "f1", "nodad"]);
    ns.ip(&["addr", "add", "2001:db8:b::1/64", "dev", "f2", "nodad"]);
    let mut mirror = Mirror::open(1 << 20).expect("open");
    let mut seen = Vec::new();
    let dst = ip("2001:db8:2::");
    let routes = |seen: &Vec<Event>| -> Vec<Event> {
        seen.iter()
            .filter(|e| matches!(e, Event::NewRoute(r) | Event::DelRoute(r) if r.dst == dst))
            .cloned()
            .collect()
    };

    ns.ip(&[
        "-6",
        "route",
        "add",
        "2001:db8:2::/48",
        "via",
        "2001:db8:a::9",
        "dev",
        "f1",
    ]);
    assert!(wait_for(&mut mirror, &mut seen, WAIT, |e| matches!(e,
        Event::NewRoute(r) if r.dst == dst && r.nexthops.len() == 1)));
    seen.clear();

    ns.ip(&[
        "-6",
        "route",
        "append",
        "2001:db8:2::/48",
        "via",
        "2001:db8:b::9",
        "dev",
        "f2",
    ]);
    assert!(
        wait_for(&mut mirror, &mut seen, WAIT, |e| matches!(e,
            Event::NewRoute(r) if r.dst == dst && r.nexthops.len() == 2)),
        "append: {:#?}",
        routes(&seen)
    );
    mirror
        .poll_events(&mut seen, Duration::from_millis(50))
        .unwrap();
    let got = routes(&seen);
    assert!(
        got.iter()
            .all(|e| matches!(e, Event::NewRoute(r) if r.nexthops.len() == 2)),
        "append must report the whole set: {got:#?}"
    );
    seen.clear();

    ns.ip(&[
        "-6",
        "route",
        "del",
        "2001:db8:2::/48",
        "via",
        "2001:db8:a::9",
        "dev",
        "f1",
    ]);
    assert!(wait_for(
        &mut mirror,
        &mut seen,
        WAIT,
        |e| matches!(e, Event::DelRoute(r) if r.dst == dst)
    ));
    mirror
        .poll_events(&mut seen, Duration::from_millis(50))
        .unwrap();
    let got = routes(&seen);
    assert!(
        matches!(got.as_slice(), [Event::DelRoute(r)]
            if r.nexthops.len() == 1 && r.nexthops[0].gateway == Some(ip("2001:db8:a::9"))),
        "partial delete: {got:#?}"
    );
}
