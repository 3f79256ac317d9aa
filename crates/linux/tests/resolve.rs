//! resolve(): asking the kernel to resolve a neighbour makes a usable entry appear.

mod common;

use std::net::IpAddr;
use std::time::Duration;

use common::{wait_for, Netns};
use linux::{Event, Mirror};

fn check(v4: bool) {
    let mut ns = Netns::new(if v4 { "resolve4" } else { "resolve6" });
    let peer = Netns::new(if v4 { "peer4" } else { "peer6" });
    // IPv6 solicitations need a non-tentative link-local source address; without DAD the
    // link-local is usable at once instead of after a second or two.
    for n in [&ns, &peer] {
        common::run(
            "ip",
            &[
                "netns",
                "exec",
                &n.name,
                "sysctl",
                "-qw",
                "net.ipv6.conf.default.accept_dad=0",
            ],
        );
    }
    ns.ip(&[
        "link", "add", "name", "r0", "type", "veth", "peer", "name", "r1", "netns", &peer.name,
    ]);
    ns.ip(&["link", "set", "r0", "up"]);
    peer.ip(&["link", "set", "r1", "up"]);
    let (mine, theirs, target) = if v4 {
        ("192.0.2.1/24", "192.0.2.2/24", "192.0.2.2")
    } else {
        ("2001:db8::1/64", "2001:db8::2/64", "2001:db8::2")
    };
    ns.ip(&["addr", "add", mine, "dev", "r0", "nodad"]);
    peer.ip(&["addr", "add", theirs, "dev", "r1", "nodad"]);
    ns.enter();

    let mut mirror = Mirror::open(1 << 20).expect("open");
    let r0 = mirror
        .dump()
        .unwrap()
        .links
        .iter()
        .find(|l| l.name == "r0")
        .unwrap()
        .ifindex;
    let target: IpAddr = target.parse().unwrap();
    let mut seen = Vec::new();
    mirror.resolve(r0, target).expect("resolve");
    let found = wait_for(
        &mut mirror,
        &mut seen,
        Duration::from_secs(2),
        |e| matches!(e, Event::NewNeigh(n) if n.ip == target && n.ifindex == r0 && n.usable()),
    );
    assert!(found, "no usable neighbour for {target}: {seen:#?}");
    // Asking again for a known neighbour is harmless.
    mirror.resolve(r0, target).expect("resolve again");
    drop(peer);
}

#[test]
fn resolve_ipv4() {
    check(true);
}

#[test]
fn resolve_ipv6() {
    check(false);
}
