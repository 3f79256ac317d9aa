//! Overflow: a notification burst larger than the receive buffer is reported as
//! `Event::Overflow`, the socket keeps working, and a dump then shows everything.

mod common;

use std::io::Write;
use std::time::Duration;

use common::Netns;
use linux::{Event, Mirror, RT_TABLE_MAIN};

const ROUTES: usize = 5000;

#[test]
fn burst_overflows_then_dump_recovers() {
    let mut ns = Netns::new("overflow");
    ns.enter();
    ns.add_link("o0");
    ns.ip(&["link", "set", "o0", "up"]);
    ns.ip(&["addr", "add", "192.0.2.1/24", "dev", "o0"]);
    // The kernel raises this to its minimum (a few KiB), far below 5000 notifications.
    let mut mirror = Mirror::open(4096).expect("open");

    let mut batch = tempfile();
    for i in 0..ROUTES {
        writeln!(
            batch.1,
            "route add 10.{}.{}.0/24 via 192.0.2.9",
            i / 256,
            i % 256
        )
        .unwrap();
    }
    batch.1.flush().unwrap();
    ns.ip(&["-batch", batch.0.to_str().unwrap()]);

    let mut seen = Vec::new();
    mirror
        .poll_events(&mut seen, Duration::from_millis(200))
        .expect("poll");
    assert!(
        seen.contains(&Event::Overflow),
        "no overflow among {} events",
        seen.len()
    );
    assert!(mirror.overflows() >= 1);

    // Still usable: a later change is reported.
    seen.clear();
    ns.ip(&["route", "add", "198.51.100.0/24", "via", "192.0.2.9"]);
    assert!(common::wait_for(
        &mut mirror,
        &mut seen,
        Duration::from_secs(2),
        |e| matches!(e,
        Event::NewRoute(r) if r.dst == "198.51.100.0".parse::<std::net::IpAddr>().unwrap())
    ));

    let snap = mirror.dump().expect("dump");
    let ours = snap
        .routes
        .iter()
        .filter(|r| {
            r.table == RT_TABLE_MAIN
                && r.dst_len == 24
                && matches!(r.dst, std::net::IpAddr::V4(a) if a.octets()[0] == 10)
        })
        .count();
    assert_eq!(ours, ROUTES);
    std::fs::remove_file(&batch.0).ok();
}

fn tempfile() -> (std::path::PathBuf, std::fs::File) {
    let path = std::env::temp_dir().join(format!("ferrouter-linux-batch-{}", std::process::id()));
    let f = std::fs::File::create(&path).unwrap();
    (path, f)
}
