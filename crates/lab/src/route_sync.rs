//! `ferrouter-lab bench route-sync`: how fast route changes go from a netlink stream into the
//! FIB through the daemon's own code (the rtnetlink parser and the netlink → FIB sync), and
//! what a route costs in memory. The stream is the `RTM_NEWROUTE`/`RTM_DELROUTE` messages a
//! routing daemon's routes produce, encoded as the kernel sends them, in 32 KiB datagrams;
//! only parsing and applying them is timed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use anyhow::{bail, Result};
use control::sync::Sync;
use linux::{Addr, Event, Link, Neigh, Route, RouteKind, RouteNextHop, Snapshot};
use serde::Serialize;

/// What to measure.
#[derive(Clone, Debug)]
pub struct Options {
    /// IPv4 routes.
    pub routes4: usize,
    /// IPv6 routes.
    pub routes6: usize,
    /// Route generator seed.
    pub seed: u64,
}

/// One phase (add, replace or delete every route).
#[derive(Clone, Debug, Serialize)]
pub struct Phase {
    /// Route messages applied.
    pub messages: u64,
    /// Seconds spent parsing and applying them.
    pub seconds: f64,
    /// Messages per second.
    pub per_second: f64,
    /// CPU seconds the benchmark thread spent on them: on a busy machine, `seconds` also
    /// counts the time others had the CPU, this does not.
    pub cpu_seconds: f64,
}

/// The benchmark's result.
#[derive(Clone, Debug, Serialize)]
pub struct RouteSync {
    /// IPv4 routes streamed.
    pub routes4: usize,
    /// IPv6 routes streamed.
    pub routes6: usize,
    /// Bytes of netlink messages per route announcement.
    pub message_bytes_per_route: f64,
    /// Announce every route (new prefixes).
    pub add: Phase,
    /// Announce every route again with another next hop (a failover).
    pub replace: Phase,
    /// Withdraw every route.
    pub delete: Phase,
    /// Prefixes in the FIB after the adds (IPv4, IPv6), connected and host routes included.
    pub fib_routes: (usize, usize),
    /// Prefixes left after the deletes (the connected and host routes).
    pub fib_routes_after_delete: (usize, usize),
    /// FIB memory per route (tables and next hops), bytes.
    pub fib_bytes_per_route: f64,
    /// Resident memory the whole process gained per route (FIB + the mirrored routes).
    pub rss_bytes_per_route: f64,
    /// FIB writes that failed (must be 0).
    pub fib_errors: u64,
    /// Messages the parser skipped (must be 0).
    pub skipped: u64,
}

const P0: u32 = 2;
const P1: u32 = 3;

fn gateways() -> [(IpAddr, u32); 4] {
    [
        (IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9)), P0),
        (IpAddr::V4(Ipv4Addr::new(198, 51, 100, 9)), P1),
        (
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 9)),
            P0,
        ),
        (
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 9)),
            P1,
        ),
    ]
}

/// Two ports with addresses and resolved gateways, as after the daemon's first dump.
pub(crate) fn base() -> Snapshot {
    let link = |ifindex, name: &str| Link {
        ifindex,
        name: name.into(),
        mac: Some([2, 0, 0, 0, 0, ifindex as u8]),
        mtu: 1500,
        up: true,
        oper_up: true,
        carrier: true,
        point_to_point: false,
    };
    let addr = |ifindex, a: &str, len| Addr {
        ifindex,
        addr: a.parse().expect("valid"),
        prefix_len: len,
    };
    Snapshot {
        links: vec![link(P0, "p0"), link(P1, "p1")],
        addrs: vec![
            addr(P0, "192.0.2.1", 24),
            addr(P1, "198.51.100.1", 24),
            addr(P0, "2001:db8::1", 64),
            addr(P1, "2001:db8:1::1", 64),
        ],
        neighs: gateways()
            .iter()
            .map(|(ip, ifx)| Neigh {
                ifindex: *ifx,
                ip: *ip,
                mac: Some([2, 0, 0, 0, 9, *ifx as u8]),
                state: linux::NUD_REACHABLE,
            })
            .collect(),
        routes: vec![],
    }
}

/// Resident memory of this process, bytes.
pub(crate) fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|x| x.parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 4096
}

/// Encode one phase's messages into datagrams of at most 32 KiB.
fn stream(
    prefixes: &[(IpAddr, u8)],
    gw: impl Fn(bool) -> (IpAddr, u32),
    add: bool,
) -> (Vec<Vec<u8>>, u64) {
    let mut out = vec![Vec::with_capacity(32 << 10)];
    let mut bytes = 0u64;
    for (dst, len) in prefixes {
        let (g, ifx) = gw(dst.is_ipv4());
        let r = Route {
            table: linux::RT_TABLE_MAIN,
            dst: *dst,
            dst_len: *len,
            kind: RouteKind::Unicast,
            protocol: 186,
            priority: 20,
            nexthops: [RouteNextHop {
                gateway: Some(g),
                ifindex: Some(ifx),
                weight: 1,
            }]
            .into(),
        };
        let cur = out.last_mut().expect("one buffer");
        let before = cur.len();
        linux::encode_route(&r, add, cur);
        bytes += (cur.len() - before) as u64;
        if cur.len() > (32 << 10) - 256 {
            out.push(Vec::with_capacity(32 << 10));
        }
    }
    (out, bytes)
}

/// CPU time of the calling thread, seconds.
fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn apply(sync: &mut Sync, datagrams: &[Vec<u8>], skipped: &mut u64) -> Phase {
    let mut events: Vec<Event> = Vec::with_capacity(1024);
    let mut messages = 0u64;
    let cpu = thread_cpu_seconds();
    let t = Instant::now();
    for d in datagrams {
        events.clear();
        *skipped += linux::parse_messages(d, &mut events) as u64;
        messages += events.len() as u64;
        sync.apply_all(&mut events);
    }
    let seconds = t.elapsed().as_secs_f64();
    Phase {
        messages,
        seconds,
        per_second: messages as f64 / seconds.max(1e-9),
        cpu_seconds: thread_cpu_seconds() - cpu,
    }
}

/// Run the benchmark; progress lines go to `log`.
pub fn run(opts: &Options, log: &dyn Fn(&str)) -> Result<RouteSync> {
    if opts.routes4 + opts.routes6 == 0 {
        bail!("nothing to stream: --routes4 and --routes6 are both 0");
    }
    let mut prefixes: Vec<(IpAddr, u8)> = bench::routes::gen_v4(opts.routes4, opts.seed)
        .into_iter()
        .map(|(a, l)| (IpAddr::V4(Ipv4Addr::from(a)), l))
        .collect();
    prefixes.extend(
        bench::routes::gen_v6(opts.routes6, opts.seed)
            .into_iter()
            .map(|(a, l)| (IpAddr::V6(Ipv6Addr::from(a)), l)),
    );
    let n = prefixes.len();
    let gw = gateways();
    let primary = |v4: bool| if v4 { gw[0] } else { gw[2] };
    let backup = |v4: bool| if v4 { gw[1] } else { gw[3] };

    let (writer, _reader) = fib::new(control::daemon::FIB_CONFIG);
    let mut sync = Sync::new(writer, vec!["p0".into(), "p1".into()]);
    sync.resync(base());
    let rss0 = rss_bytes();
    let mut skipped = 0u64;

    log(&format!("encoding {n} route announcements"));
    let (d, bytes) = stream(&prefixes, primary, true);
    log("applying: add");
    let add = apply(&mut sync, &d, &mut skipped);
    drop(d);
    let fib_routes = sync.route_counts();
    let rss1 = rss_bytes();
    let m = sync.writer().memory();
    let fib_mem = (m.v4_table_bytes + m.v6_table_bytes + m.rib_bytes + m.nexthop_bytes) as f64;

    let (d, _) = stream(&prefixes, backup, true);
    log("applying: replace (every route to the other next hop)");
    let replace = apply(&mut sync, &d, &mut skipped);
    drop(d);
    let (d, _) = stream(&prefixes, backup, false);
    log("applying: delete");
    let delete = apply(&mut sync, &d, &mut skipped);
    drop(d);
    let after = sync.route_counts();
    Ok(RouteSync {
        routes4: opts.routes4,
        routes6: opts.routes6,
        message_bytes_per_route: bytes as f64 / n as f64,
        add,
        replace,
        delete,
        fib_routes,
        fib_routes_after_delete: after,
        fib_bytes_per_route: fib_mem / n as f64,
        rss_bytes_per_route: rss1.saturating_sub(rss0) as f64 / n as f64,
        fib_errors: sync.stats().fib_errors,
        skipped,
    })
}

/// The result as a table.
pub fn table(r: &RouteSync) -> String {
    let mut s = format!(
        "route-sync: {} IPv4 + {} IPv6 routes, {:.0} bytes of netlink per route\n",
        r.routes4, r.routes6, r.message_bytes_per_route
    );
    for (name, p) in [
        ("add", &r.add),
        ("replace", &r.replace),
        ("delete", &r.delete),
    ] {
        s += &format!(
            "  {name:<8} {:>9} messages in {:>7.3} s = {:>6.2} M routes/s ({:.3} s of CPU = {:.2} M/s)\n",
            p.messages,
            p.seconds,
            p.per_second / 1e6,
            p.cpu_seconds,
            p.messages as f64 / p.cpu_seconds.max(1e-9) / 1e6
        );
    }
    s += &format!(
        "  FIB after add: {} IPv4 + {} IPv6 prefixes; after delete: {} + {}\n  memory per route: FIB {:.0} bytes, whole process {:.0} bytes\n  FIB errors {}, skipped messages {}\n",
        r.fib_routes.0, r.fib_routes.1, r.fib_routes_after_delete.0, r.fib_routes_after_delete.1,
        r.fib_bytes_per_route, r.rss_bytes_per_route, r.fib_errors, r.skipped
    );
    s
}
