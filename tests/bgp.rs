//! End to end with real routing daemons: FRR (zebra + bgpd) in the router namespace peers
//! over eBGP with BIRD 2 in h2, which originates 10,000 IPv4 and 1,000 IPv6 prefixes. zebra
//! installs them in the router namespace's kernel, ferrouter mirrors them over netlink into
//! its FIB, and h1 pings addresses behind them through the fast path (kernel forwarding is
//! off in the router namespace). Then BIRD withdraws them and they must leave the FIB.
//!
//! Sessions: one IPv4 session 198.51.100.1 <-> 198.51.100.2 for IPv4 unicast and one IPv6
//! session 2001:db8:2::1 <-> 2001:db8:2::2 for IPv6 unicast. BIRD's `next hop self` on a
//! direct IPv6 session sends both h2's global and link-local address as next hop, and zebra
//! installs the link-local one (`via fe80::... dev r2`), so that is what the FIB shows.
//!
//! Needs root and the packages scripts/deps.sh installs (frr, bird2). FRR runs as the `frr`
//! user the package creates (running as root is refused: root is not in `frrvty`), with every
//! path (config, pid, zserv and vty sockets, logs) under the lab's directory, so neither
//! /etc/frr nor a system FRR or BIRD is touched. The daemons are children of the test and
//! are always stopped, and the lab torn down, even when the test fails.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lab::daemons::Daemons;
use lab::Lab;
use serde_json::Value;

mod common;
use common::*;

static SERIAL: Mutex<()> = Mutex::new(());

const V4_PREFIXES: usize = 10_000;
const V6_PREFIXES: usize = 1_000;

/// Installed FIB prefixes by family. The filter keeps the answer small (the counts are
/// global either way).
fn fib_counts(lab: &Lab) -> (u64, u64) {
    let r = api(lab, "routes", Some(lab::H1_V4));
    (r["ipv4"].as_u64().unwrap(), r["ipv6"].as_u64().unwrap())
}

fn fib_route(lab: &Lab, prefix: &str) -> Option<Value> {
    api(lab, "routes", Some(prefix))["routes"]
        .as_array()
        .unwrap()
        .first()
        .cloned()
}

/// Every FIB entry: (prefix, source).
fn fib_all(lab: &Lab) -> Vec<(String, String)> {
    api(lab, "routes", None)["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["prefix"].as_str().unwrap().to_string(),
                r["source"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// How many of the originated prefixes the FIB holds: (IPv4, IPv6).
fn learned(lab: &Lab) -> (usize, usize) {
    let (mut v4, mut v6) = (0, 0);
    for (p, _) in fib_all(lab) {
        let in_v4_range = p.strip_suffix(".0/24").is_some_and(|net| {
            let o: Vec<u32> = net.split('.').filter_map(|x| x.parse().ok()).collect();
            o.len() == 3 && o[0] == 10 && (200..240).contains(&o[1])
        });
        if in_v4_range {
            v4 += 1;
        } else if p.starts_with("2001:db8:100:") && p.ends_with("/64") {
            v6 += 1;
        }
    }
    (v4, v6)
}

/// FIB entries that came from main-table routes (not neighbours' host routes, which the
/// pings add).
fn route_entries(lab: &Lab) -> usize {
    fib_all(lab).iter().filter(|(_, s)| s == "route").count()
}

/// The i-th originated prefix and the address h2 answers on inside it.
fn v4_prefix(i: usize) -> (String, String) {
    let (a, b) = (200 + i / 256, i % 256);
    (format!("10.{a}.{b}.0/24"), format!("10.{a}.{b}.1"))
}

/// In canonical form (2001:db8:100::/64 for 0), as the FIB prints it.
fn v6_prefix(i: usize) -> (String, String) {
    let net = std::net::Ipv6Addr::new(0x2001, 0xdb8, 0x100, i as u16, 0, 0, 0, 0);
    let host = std::net::Ipv6Addr::new(0x2001, 0xdb8, 0x100, i as u16, 0, 0, 0, 1);
    (format!("{net}/64"), host.to_string())
}

/// Spread over the whole range, first and last included.
fn sample(n: usize, total: usize) -> Vec<usize> {
    let step = total / n;
    let mut v: Vec<usize> = (0..n - 1).map(|k| k * step + (k * 37) % step).collect();
    v.push(total - 1);
    v
}

fn frr_config() -> String {
    format!(
        "frr defaults traditional
hostname ferrouter-lab
!
router bgp 65001
 bgp router-id {r2}
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 neighbor {h2} remote-as 65002
 neighbor {h2} timers connect 1
 neighbor {h2v6} remote-as 65002
 neighbor {h2v6} timers connect 1
 !
 address-family ipv4 unicast
  neighbor {h2} activate
 exit-address-family
 !
 address-family ipv6 unicast
  neighbor {h2v6} activate
 exit-address-family
!
",
        r2 = lab::R2_V4,
        h2 = lab::H2_V4,
        h2v6 = lab::H2_V6,
    )
}

/// BIRD 2: the prefixes as static blackholes, exported into BGP only (there is no kernel
/// protocol, so h2's own kernel never gets them).
fn bird_config(dir: &Path) -> String {
    let mut s = format!(
        "router id {h2};\nlog \"{dir}/bird.log\" all;\nprotocol device {{}}\n",
        h2 = lab::H2_V4,
        dir = dir.display()
    );
    s.push_str("protocol static static4 {\n  ipv4;\n");
    for i in 0..V4_PREFIXES {
        s.push_str(&format!("  route {} blackhole;\n", v4_prefix(i).0));
    }
    s.push_str("}\nprotocol static static6 {\n  ipv6;\n");
    for i in 0..V6_PREFIXES {
        s.push_str(&format!("  route {} blackhole;\n", v6_prefix(i).0));
    }
    s.push_str("}\n");
    for (name, af, local, peer, proto) in [
        ("rtr4", "ipv4", lab::H2_V4, lab::R2_V4, "static4"),
        ("rtr6", "ipv6", lab::H2_V6, lab::R2_V6, "static6"),
    ] {
        s.push_str(&format!(
            "protocol bgp {name} {{
  local {local} as 65002;
  neighbor {peer} as 65001;
  connect delay time 1;
  connect retry time 2;
  error wait time 1, 10;
  {af} {{ import none; export where proto = \"{proto}\"; next hop self; }};
}}
"
        ));
    }
    s
}

/// Poll `done` until it holds, for at most `limit` (failing early if a daemon died).
fn wait_for(
    what: &str,
    limit: Duration,
    d: &mut Daemons,
    mut done: impl FnMut() -> (bool, String),
) -> Duration {
    d.wait_for(what, limit, || Ok(done()))
        .unwrap_or_else(|e| panic!("{e:#}"))
}

#[test]
fn frr_ebgp_with_bird_10k_v4_1k_v6_prefixes_cross_the_fast_path_and_withdraw() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t0 = Instant::now();
    let g = start("bgp", "");
    let lab = &g.0;
    // Declared after the lab guard: dropped (daemons stopped) before the lab goes down.
    let mut d = Daemons::new(&lab.dir.join("daemons")).unwrap();
    let (h2, rtr) = (lab.h2(), lab.rtr());
    // Both IPv6 speakers need their link's link-local address, which the kernel only
    // finishes (DAD) a second or two after the lab is up: bgpd resets an IPv6 session
    // started without it ("nexthop_set failed") and BIRD would advertise only the global next
    // hop ("Missing link-local address").
    wait_for(
        "link-local addresses",
        Duration::from_secs(10),
        &mut d,
        || {
            let ready = |ns: &str, dev: &str| {
                let (_, out) = sh(
                    lab,
                    ns,
                    &[
                        "ip", "-6", "-o", "addr", "show", "dev", dev, "scope", "link",
                    ],
                );
                out.contains("fe80") && !out.contains("tentative")
            };
            (ready(&rtr, "r2") && ready(&h2, "eth0"), String::new())
        },
    );
    // Settled (the link-local addresses are local FIB entries too): the baseline.
    std::thread::sleep(Duration::from_millis(200));
    let (base4, base6) = fib_counts(lab);
    let base_routes = route_entries(lab);

    // h2 answers on one address inside each sampled prefix.
    let s4: Vec<(String, String)> = sample(50, V4_PREFIXES).into_iter().map(v4_prefix).collect();
    let s6: Vec<(String, String)> = sample(10, V6_PREFIXES).into_iter().map(v6_prefix).collect();
    for (_, a) in &s4 {
        lab.exec(&h2, &["ip", "addr", "add", &format!("{a}/32"), "dev", "lo"])
            .unwrap();
    }
    for (_, a) in &s6 {
        lab.exec(
            &h2,
            &["ip", "-6", "addr", "add", &format!("{a}/128"), "dev", "lo"],
        )
        .unwrap();
    }

    // FRR in the router namespace, BIRD in h2.
    let frr = d
        .start_frr(&rtr, &[("bgpd", frr_config())], &[])
        .unwrap_or_else(|e| panic!("{e:#}"));
    let t_bird = Instant::now();
    let bird_log = d.dir.join("bird");
    let bird = d
        .start_bird("bird", &h2, &bird_config(&bird_log))
        .unwrap_or_else(|e| panic!("{e:#}"));
    let birdc = |args: &[&str]| -> String { bird.birdc(args).unwrap_or_else(|e| panic!("{e:#}")) };

    // All prefixes reach the FIB.
    let learn = wait_for(
        "learning the prefixes",
        Duration::from_secs(90),
        &mut d,
        || {
            let (v4, v6) = fib_counts(lab);
            (
                v4 >= base4 + V4_PREFIXES as u64 && v6 >= base6 + V6_PREFIXES as u64,
                format!("FIB has {v4} IPv4 (baseline {base4}), {v6} IPv6 (baseline {base6})"),
            )
        },
    );
    let learn_total = t_bird.elapsed();
    eprintln!(
        "all {V4_PREFIXES} + {V6_PREFIXES} prefixes in the FIB {learn_total:?} after starting BIRD \
         (polled {learn:?}); sync {}",
        api(lab, "counters", None)["sync"]
    );
    assert_eq!(
        learned(lab),
        (V4_PREFIXES, V6_PREFIXES),
        "exactly the originated prefixes"
    );
    // `show routes summary` agrees with the full listing and with what was originated.
    // Two requests: a neighbour entry (the kernel refreshing one) may appear between them,
    // so the pair is taken again until it is consistent.
    let (summary, v4, v6) = (0..10)
        .map(|_| {
            let summary = api(lab, "routes", Some("summary"));
            let (v4, v6) = fib_counts(lab);
            (summary, v4, v6)
        })
        .find(|(s, v4, v6)| (s["ipv4"].as_u64(), s["ipv6"].as_u64()) == (Some(*v4), Some(*v6)))
        .expect("routes summary never agreed with the full listing in 10 tries");
    let by = &summary["by_source"];
    assert!(
        by["route"].as_u64().unwrap() >= (V4_PREFIXES + V6_PREFIXES) as u64,
        "{summary}"
    );
    assert_eq!(
        by["route"].as_u64().unwrap()
            + by["neighbor"].as_u64().unwrap()
            + by["local"].as_u64().unwrap(),
        v4 + v6,
        "{summary}"
    );
    assert_eq!(summary["fib_errors"], 0, "{summary}");
    assert!(summary["fib_memory_bytes"]["total"].as_u64().unwrap() > 0);
    let (ok, text) = sh(
        lab,
        &rtr,
        &[
            common::bin(),
            "show",
            "routes",
            "summary",
            "--socket",
            &lab.socket().display().to_string(),
        ],
    );
    assert!(
        ok && text.contains("prefixes in the fast-path FIB") && text.contains("FIB memory"),
        "{text}"
    );

    // The daemons agree: sessions up, every prefix received.
    let vtysh = |cmd: &str| -> Value { frr.json(cmd).unwrap_or_else(|e| panic!("{e:#}")) };
    for (af, peer, n) in [
        ("ipv4", lab::H2_V4, V4_PREFIXES),
        ("ipv6", lab::H2_V6, V6_PREFIXES),
    ] {
        let v = vtysh(&format!("show bgp {af} unicast summary json"));
        let p = &v["peers"][peer];
        assert!(p["state"] == "Established" && p["pfxRcd"] == n, "{v}");
        let up = Duration::from_millis(p["peerUptimeMsec"].as_u64().unwrap_or(0));
        eprintln!(
            "{af} session with {peer} Established {:?} after starting BIRD",
            t_bird.elapsed().saturating_sub(up)
        );
    }
    for (proto, n) in [("rtr4", V4_PREFIXES), ("rtr6", V6_PREFIXES)] {
        let out = birdc(&["show", "protocols", "all", proto]);
        assert!(
            out.contains("Established") && out.contains(&format!("{n} exported")),
            "{out}"
        );
    }
    // BIRD installed nothing in h2's kernel.
    let (_, out) = sh(lab, &h2, &["ip", "route", "show", "proto", "bird"]);
    assert!(out.trim().is_empty(), "{out}");
    let (_, out) = sh(lab, &h2, &["ip", "-6", "route", "show", "proto", "bird"]);
    assert!(out.trim().is_empty(), "{out}");

    // Exact prefixes, with BGP's next hops: h2's address for IPv4, h2's link-local for IPv6.
    let (_, ll) = sh(
        lab,
        &h2,
        &[
            "ip", "-6", "-o", "addr", "show", "dev", "eth0", "scope", "link",
        ],
    );
    let ll = ll
        .split_whitespace()
        .skip_while(|w| *w != "inet6")
        .nth(1)
        .and_then(|a| a.split('/').next())
        .unwrap_or_else(|| panic!("h2 link-local: {ll}"))
        .to_string();
    for (prefix, via) in [
        (v4_prefix(0).0, lab::H2_V4.to_string()),
        (v4_prefix(5_000).0, lab::H2_V4.to_string()),
        (v4_prefix(V4_PREFIXES - 1).0, lab::H2_V4.to_string()),
        (v6_prefix(0).0, ll.clone()),
        (v6_prefix(V6_PREFIXES - 1).0, ll.clone()),
    ] {
        let r = fib_route(lab, &prefix).unwrap_or_else(|| panic!("{prefix} not in the FIB"));
        let nh = r["next_hop"].as_str().unwrap();
        assert!(
            r["prefix"] == prefix.as_str()
                && r["source"] == "route"
                && nh.starts_with(&format!("via {via} dev r2")),
            "{prefix}: {r}"
        );
    }
    eprintln!(
        "e.g. {} -> {}",
        v6_prefix(0).0,
        fib_route(lab, &v6_prefix(0).0).unwrap()["next_hop"]
    );

    // Traffic to every sampled address crosses the fast path.
    let before = forwarded(lab);
    let t = Instant::now();
    for (prefix, a) in s4.iter().chain(&s6) {
        if let Err(out) = ping_ok(lab, a) {
            panic!("{a} ({prefix}) unreachable from h1: {out}");
        }
    }
    eprintln!(
        "pinged {} sampled addresses in {:?}",
        s4.len() + s6.len(),
        t.elapsed()
    );
    let fwd = forwarded(lab) - before;
    assert!(
        fwd >= 2 * (s4.len() + s6.len()) as u64,
        "forwarded only {fwd}"
    );
    assert_eq!(
        kernel_forwarded(lab),
        (0, 0),
        "the kernel must forward nothing"
    );

    // Withdraw: BIRD stops originating, FRR withdraws, zebra deletes, the FIB follows.
    let t_wd = Instant::now();
    birdc(&["disable", "static4"]);
    birdc(&["disable", "static6"]);
    let wd = wait_for(
        "withdrawing the prefixes",
        Duration::from_secs(60),
        &mut d,
        || {
            let (v4, v6) = learned(lab);
            (
                (v4, v6) == (0, 0),
                format!("FIB still has {v4} IPv4 and {v6} IPv6 of the prefixes"),
            )
        },
    );
    eprintln!(
        "all prefixes gone from the FIB {:?} after the withdrawal (polled {wd:?})",
        t_wd.elapsed()
    );
    assert_eq!(
        route_entries(lab),
        base_routes,
        "back to the routes before BGP"
    );
    for (prefix, _) in [&s4[0], &s4[s4.len() - 1], &s6[0]] {
        assert!(
            fib_route(lab, prefix).is_none(),
            "{prefix} still in the FIB"
        );
    }
    for (_, a) in [&s4[0], &s4[s4.len() / 2], &s6[0]] {
        let (ok, out) = ping1(lab, a);
        assert!(!ok, "{a} still reachable after the withdrawal: {out}");
    }
    assert_eq!(kernel_forwarded(lab), (0, 0));
    d.check_alive().unwrap();
    eprintln!("bgp test body took {:?}", t0.elapsed());
}

/// A prefix from the MRT generator, as the FIB prints it.
fn v4_str((a, l): (u32, u8)) -> String {
    format!("{}/{l}", std::net::Ipv4Addr::from(a))
}

fn v6_str((a, l): ([u8; 16], u8)) -> String {
    format!("{}/{l}", std::net::Ipv6Addr::from(a))
}

/// Packets ferrouter sent out of port `name`.
fn port_tx(lab: &Lab, name: &str) -> u64 {
    let i = api(lab, "interfaces", None);
    let p = i
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no port {name}: {i}"));
    p["tx_packets"]
        .as_u64()
        .unwrap_or_else(|| panic!("tx_packets of {name}: {p}"))
}

/// Every generated prefix in the FIB, and the next hop each has: `Some(dev)` when all of
/// them are routes out of that one device (`r2` or `r3`), with the count per device.
fn egress_of(lab: &Lab, want: &std::collections::HashSet<String>) -> (usize, usize, usize) {
    let (mut r2, mut r3, mut other) = (0, 0, 0);
    for r in api(lab, "routes", None)["routes"].as_array().unwrap() {
        let p = r["prefix"].as_str().unwrap();
        if !want.contains(p) {
            continue;
        }
        let nh = r["next_hop"].as_str().unwrap_or("");
        if r["source"] == "route" && nh.contains(" dev r2") {
            r2 += 1;
        } else if r["source"] == "route" && nh.contains(" dev r3") {
            r3 += 1;
        } else {
            other += 1;
        }
    }
    (r2, r3, other)
}

/// Two eBGP peers (GoBGP, loaded from generated MRT tables) advertise the same 10,000 IPv4
/// and 1,000 IPv6 prefixes; FRR prefers h2 (local preference 200) over h3 (100). Every
/// prefix must be in the FIB via h2; when h2 withdraws them all (UPDATE withdrawals on a
/// live session), every prefix must move to h3 without disappearing, and traffic with it;
/// when h2 advertises again, everything comes back.
#[test]
fn two_gobgp_peers_10k_v4_1k_v6_failover_and_failback_in_the_fib_and_the_traffic() {
    use lab::convergence::bgp::{BgpLab, Families};
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t0 = Instant::now();
    let mut l = Lab::new(&format!("t{}fo", std::process::id() % 10000));
    l.h3 = true;
    let g = start_lab(l);
    let lab = &g.0;
    let mut d = Daemons::new(&lab.dir.join("daemons")).unwrap();

    let cfg = bench::mrt::MrtConfig {
        v4: 10_000,
        v6: 1_000,
        peers: 2,
        shared: true,
        seed: 7,
    };
    let table = bench::mrt::peer_table(&cfg, 0);
    assert_eq!(table, bench::mrt::peer_table(&cfg, 1), "shared prefixes");
    let want: std::collections::HashSet<String> = table
        .v4
        .iter()
        .map(|p| v4_str(*p))
        .chain(table.v6.iter().map(|p| v6_str(*p)))
        .collect();
    assert_eq!(want.len(), 11_000);
    let mut files = Vec::new();
    for (i, (nh4, nh6)) in [(lab::H2_V4, lab::H2_V6), (lab::H3_V4, lab::H3_V6)]
        .into_iter()
        .enumerate()
    {
        let path = lab.dir.join(format!("peer{i}.mrt"));
        lab::convergence::bgp::write_mrt(
            &cfg,
            i,
            &table,
            nh4.parse().unwrap(),
            nh6.parse().unwrap(),
            &path,
        )
        .unwrap();
        files.push(path);
    }

    let bgp = BgpLab::start(lab, &mut d, Families { v4: true, v6: true })
        .unwrap_or_else(|e| panic!("{e:#}"));
    wait_for("BGP sessions", Duration::from_secs(30), &mut d, || {
        bgp.established().unwrap_or_else(|e| panic!("{e:#}"))
    });
    // h2 and h3 both answer on one address inside a few of the prefixes, so a ping succeeds
    // whichever way it goes; the router's per-port counters tell which way that was.
    let samples: Vec<String> = [0usize, 4_321, 9_999]
        .iter()
        .map(|&i| {
            let (a, l) = table.v4[i];
            std::net::Ipv4Addr::from(if l < 32 { a + 1 } else { a }).to_string()
        })
        .chain([0usize, 999].iter().map(|&i| {
            let (mut a, l) = table.v6[i];
            if l < 128 {
                a[15] |= 1;
            }
            std::net::Ipv6Addr::from(a).to_string()
        }))
        .collect();
    for host in [lab.h2(), lab.h3()] {
        for a in &samples {
            let plen = if a.contains(':') { "128" } else { "32" };
            lab.exec(
                &host,
                &["ip", "addr", "add", &format!("{a}/{plen}"), "dev", "lo"],
            )
            .unwrap();
        }
    }
    let ping_via = |dev: &str| {
        for a in &samples {
            let before = port_tx(lab, dev);
            if let Err(out) = ping_ok(lab, a) {
                panic!("{a} unreachable from h1: {out}");
            }
            assert!(
                port_tx(lab, dev) > before,
                "ping to {a} did not leave by {dev}"
            );
        }
        assert_eq!(
            kernel_forwarded(lab),
            (0, 0),
            "the kernel must forward nothing"
        );
    };

    // Learn: both peers loaded; every prefix via h2.
    let t_learn = Instant::now();
    bgp.inject(0, &files[0], 10_000, 1_000).unwrap();
    bgp.inject(1, &files[1], 10_000, 1_000).unwrap();
    wait_for("learning via h2", Duration::from_secs(90), &mut d, || {
        let e = egress_of(lab, &want);
        (
            e == (11_000, 0, 0),
            format!("(via r2, via r3, other) = {e:?}"),
        )
    });
    eprintln!(
        "learned 10K + 1K prefixes from two peers in {:?}",
        t_learn.elapsed()
    );
    let summary = api(lab, "routes", Some("summary"));
    assert_eq!(summary["fib_errors"], 0, "{summary}");
    assert!(
        summary["by_source"]["route"].as_u64().unwrap() >= 11_000,
        "{summary}"
    );
    // FRR holds both paths for every prefix, the primary best.
    for (af, n) in [("ipv4", 10_000), ("ipv6", 1_000)] {
        let v = bgp
            .frr
            .json(&format!("show bgp {af} unicast summary json"))
            .unwrap();
        for peer in [
            if af == "ipv4" { lab::H2_V4 } else { lab::H2_V6 },
            if af == "ipv4" { lab::H3_V4 } else { lab::H3_V6 },
        ] {
            assert_eq!(v["peers"][peer]["pfxRcd"], n, "{af} {peer}: {v}");
        }
    }
    let r = fib_route(lab, &v4_str(table.v4[0])).unwrap();
    assert!(
        r["next_hop"]
            .as_str()
            .unwrap()
            .starts_with(&format!("via {} dev r2", lab::H2_V4)),
        "{r}"
    );
    ping_via("r2");

    // Failover: h2 withdraws everything; each prefix must move to h3. The FIB is sampled
    // while it moves: a prefix may be via h2 or h3, but never missing.
    let t_fo = Instant::now();
    bgp.withdraw(0).unwrap();
    let mut polls = 0;
    wait_for("failover to h3", Duration::from_secs(60), &mut d, || {
        let e = egress_of(lab, &want);
        polls += 1;
        assert_eq!(
            e.0 + e.1,
            11_000,
            "a prefix went missing during failover: {e:?}"
        );
        (
            e == (0, 11_000, 0),
            format!("(via r2, via r3, other) = {e:?}"),
        )
    });
    eprintln!(
        "failover of 11K prefixes in {:?} ({polls} FIB samples)",
        t_fo.elapsed()
    );
    let r = fib_route(lab, &v4_str(table.v4[0])).unwrap();
    assert!(
        r["next_hop"]
            .as_str()
            .unwrap()
            .starts_with(&format!("via {} dev r3", lab::H3_V4)),
        "{r}"
    );
    ping_via("r3");

    // Failback: h2 advertises again; everything returns to h2.
    let t_fb = Instant::now();
    bgp.readvertise(0, &files[0], 10_000, 1_000).unwrap();
    wait_for("failback to h2", Duration::from_secs(60), &mut d, || {
        let e = egress_of(lab, &want);
        assert_eq!(
            e.0 + e.1,
            11_000,
            "a prefix went missing during failback: {e:?}"
        );
        (
            e == (11_000, 0, 0),
            format!("(via r2, via r3, other) = {e:?}"),
        )
    });
    eprintln!("failback of 11K prefixes in {:?}", t_fb.elapsed());
    ping_via("r2");
    let summary = api(lab, "routes", Some("summary"));
    assert_eq!(summary["fib_errors"], 0, "{summary}");
    d.check_alive().unwrap();
    eprintln!("failover test body took {:?}", t0.elapsed());
}

/// `ferrouter-lab bench convergence` end to end at a small scale with BIRD peers (the default):
/// both DUTs, the JSON contract, every phase converged, no loss after convergence, the
/// kernel's view consistent with the traffic's (the kernel is done before the traffic has
/// moved), and every process's CPU time accounted.
#[test]
fn bench_convergence_5k_routes_bird_peers_ferrouter_and_linux_json() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    common::check_bench_convergence(
        "bgp",
        "bird",
        5000,
        &format!("c{}", std::process::id() % 100_000),
    );
}

/// The same with GoBGP peers loaded from MRT files (`--speaker gobgp`).
#[test]
fn bench_convergence_5k_routes_gobgp_peers_ferrouter_and_linux_json() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    common::check_bench_convergence(
        "bgp",
        "gobgp",
        5000,
        &format!("g{}", std::process::id() % 100_000),
    );
}

/// The same with the tester's emulated BGP routers (`--speaker tester`): threads of the
/// benchmark that FRR's bgpd connects to in h2 and h3.
#[test]
fn bench_convergence_5k_routes_tester_peers_ferrouter_and_linux_json() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    common::check_bench_convergence(
        "bgp",
        "tester",
        5000,
        &format!("e{}", std::process::id() % 100_000),
    );
}

/// `ferrouter-lab bench bgp-scale` end to end at a small scale with BIRD peers: 8,000 disjoint
/// routes from two peers reach the kernel and ferrouter's FIB, traffic to a sample of them
/// arrives with no loss, for both DUTs; the JSON carries the times, memory and loss cause,
/// and no namespace is left behind.
#[test]
fn bench_bgp_scale_8k_routes_two_bird_peers_json() {
    check_bench_bgp_scale("bird", 'q');
}

/// The same with the tester's emulated BGP routers (bgpd connects to them).
#[test]
fn bench_bgp_scale_8k_routes_two_tester_peers_json() {
    check_bench_bgp_scale("tester", 'y');
}

/// `v6`: the peers carry 2,000 IPv6 routes beside the 8,000 IPv4 ones (the tester's).
fn check_bench_bgp_scale(speaker: &str, tag: char) {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let prefix = format!("{tag}{}", std::process::id() % 100_000);
    let v6 = speaker == "tester";
    let routes6 = if v6 { 2000 } else { 0 };
    let v = common::bench_json(&[
        "bench",
        "bgp-scale",
        "--speaker",
        speaker,
        "--routes6",
        &routes6.to_string(),
        "--routes",
        "8000",
        "--peers",
        "2",
        "--sample",
        "2000",
        "--dut",
        "ferrouter,linux,ferrouter-bgp",
        "--timeout",
        "300",
        "--json",
        "--netns-prefix",
        &prefix,
    ]);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3, "{v}");
    for (r, dut) in runs.iter().zip(["ferrouter", "linux", "ferrouter-bgp"]) {
        assert_eq!(r["dut"], dut, "{r}");
        assert_eq!(r["speaker"], speaker, "{r}");
        assert_eq!(r["peers"], 2, "{r}");
        assert_eq!(r["routes"], 8000, "{r}");
        assert_eq!(r["routes6"], routes6, "{r}");
        assert_eq!(r["sample"], 2000, "{r}");
        // A random sample of 10,000 routes of which 2,000 are IPv6: both families are in it.
        let s6 = r["sample6"].as_u64().unwrap();
        assert!(if v6 { s6 > 100 && s6 < 1000 } else { s6 == 0 }, "{r}");
        assert_eq!(r["loss"], 0, "{r}");
        assert_eq!(r["routes_with_loss"], 0, "{r}");
        assert!(r["verify_tx"].as_u64().unwrap() >= 4000, "two passes: {r}");
        let l = r["learn_s"].as_f64().unwrap();
        if dut == "ferrouter-bgp" {
            // Its own speaker: nothing in the kernel, no FRR.
            assert!(r["kernel_done_s"].is_null(), "{r}");
            assert_eq!(r["frr_rss_bytes"], 0, "{r}");
        } else {
            let k = r["kernel_done_s"].as_f64().unwrap();
            assert!(k > 0.0 && k <= l + 0.001, "{r}");
            assert!(r["frr_rss_bytes"].as_u64().unwrap() > 0, "{r}");
        }
        assert!(r["verify_receiver_drops"].is_u64(), "{r}");
        assert_eq!(r["verify_dut_drops"].is_u64(), dut != "linux", "{r}");
    }
    let b = &runs[2];
    assert!(b["fib_done_s"].as_f64().unwrap() > 0.0, "{b}");
    assert!(b["fib_prefixes"].as_u64().unwrap() >= 8000 + routes6, "{b}");
    let f = &runs[0];
    assert!(f["fib_done_s"].as_f64().unwrap() > 0.0, "{f}");
    assert!(f["fib_prefixes"].as_u64().unwrap() >= 8000 + routes6, "{f}");
    assert!(f["fib_memory_bytes"].as_u64().unwrap() > 0, "{f}");
    assert!(runs[1]["fib_done_s"].is_null(), "{v}");
    let ns = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let ns = String::from_utf8_lossy(&ns.stdout);
    assert!(!ns.contains(&format!("{prefix}-")), "{ns}");
}

/// A benchmark interrupted mid-run (SIGTERM, as `timeout` or `kill` sends) tears its lab
/// down: no namespace, daemon or lab directory is left behind, and it exits with 128 + 15.
#[test]
fn interrupted_benchmark_leaves_nothing_behind() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let prefix = format!("k{}", std::process::id() % 100_000);
    let mut child = std::process::Command::new(common::lab_bin())
        .args([
            "bench",
            "convergence",
            "--routes",
            "2000",
            "--dut",
            "ferrouter",
            "--netns-prefix",
            &prefix,
        ])
        .env("RUST_BACKTRACE", "0")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let namespaces = || {
        let out = std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with(&format!("{prefix}-")))
            .count()
    };
    let daemons = || {
        std::process::Command::new("pgrep")
            .args(["-f", &format!("/run/ferrouter-lab/{prefix}/")])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    // Interrupt once the lab and its daemons are up (bounded wait).
    let t = Instant::now();
    while !(namespaces() >= 3 && daemons()) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the lab never came up"
        );
        assert!(child.try_wait().unwrap().is_none(), "exited early");
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(1));
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("still running 60 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status.code(), Some(128 + 15), "{status:?}");
    assert_eq!(namespaces(), 0, "namespaces left behind");
    assert!(!daemons(), "daemons left behind");
    assert!(!std::path::Path::new(&format!("/run/ferrouter-lab/{prefix}")).exists());
}
