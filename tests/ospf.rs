//! End to end with OSPF: FRR (zebra + ospfd + ospf6d) in the router namespace forms OSPFv2
//! and OSPFv3 adjacencies over r2 with BIRD 2 in h2, which originates 300 IPv4 and 100 IPv6
//! AS-external routes (type 2). zebra installs them in the router namespace's kernel,
//! ferrouter mirrors them over netlink into its FIB, and h1 pings addresses behind them
//! through the fast path (kernel forwarding is off in the router namespace). Then BIRD stops
//! originating them (flushes the LSAs) and they must leave the FIB.
//!
//! Configuration comes from `lab::ospf` (point-to-point interfaces, hello 1 s, dead 4 s);
//! the prefixes are Internet-like (`bench::routes`), clear of the lab's own ranges. Next hops:
//! h2's address for IPv4 (BIRD advertises no forwarding address for its blackholes) and h2's
//! link-local address for IPv6 (OSPFv3 next hops always are).
//!
//! `ospf_scale` (ignored; run it alone with `--ignored --nocapture`) measures how long FRR
//! takes to learn N externals from BIRD until all are in ferrouter's FIB, and to lose them
//! again; OSPF_SCALE sets the sizes (default `20000,200000`).
//!
//! `bench_convergence_ospf_2k_routes_ferrouter_and_linux_json` runs `ferrouter-lab bench
//! convergence --protocol ospf` at 2,000 routes (BIRD in h2 and h3 as primary and secondary)
//! against both DUTs and checks the JSON.
//!
//! `tester_ospf_routers_...` puts the tester's emulated OSPF routers (`crates/ospf`) in h2
//! and h3 in place of BIRD, against ospfd; `bench_convergence_ospf_tester_20k_...` runs
//! `bench convergence --protocol ospf --speaker tester` at 20,000 routes.
//!
//! Needs root and the packages scripts/deps.sh installs (frr, bird2). See tests/bgp.rs for
//! how the daemons are run (as the frr user, everything under the lab's directory).

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lab::daemons::{Daemons, Frr};
use lab::ospf::{self, v4_host, v4_str, v6_host, v6_str};
use lab::Lab;
use serde_json::Value;

mod common;
use common::*;

static SERIAL: Mutex<()> = Mutex::new(());

const V4_PREFIXES: usize = 300;
const V6_PREFIXES: usize = 100;
/// External (type 2) metric BIRD gives its routes.
const METRIC: u32 = 150;
const SEED: u64 = 89;

/// FIB entries that came from main-table routes: prefix -> next hop.
fn fib_routes(lab: &Lab) -> Vec<(String, String)> {
    api(lab, "routes", None)["routes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["source"] == "route")
        .map(|r| {
            (
                r["prefix"].as_str().unwrap().to_string(),
                r["next_hop"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Installed FIB prefixes by family (the filter keeps the answer small; counts are global).
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

/// Both ends of r2 have a usable link-local address (OSPFv3 runs on them).
/// ospfd's type-5 LSAs for `prefix` (A.B.C.D/L), one line each: advertising router,
/// sequence number, age, metric (from `show ip ospf database external A.B.C.D`).
fn ospfd_externals(frr: &Frr, prefix: &str) -> String {
    let id = prefix.split('/').next().unwrap_or(prefix);
    match frr.vtysh(&[&format!("show ip ospf database external {id}")]) {
        Ok(out) => {
            let mut lsas = Vec::new();
            for line in out.lines().map(str::trim) {
                let keep = [
                    "Advertising Router:",
                    "LS Seq Number:",
                    "LS age:",
                    "Metric:",
                ];
                if line.starts_with("LS age:") {
                    lsas.push(String::new());
                }
                if keep.iter().any(|k| line.starts_with(k)) {
                    if let Some(l) = lsas.last_mut() {
                        if !l.is_empty() {
                            l.push_str(", ");
                        }
                        l.push_str(line);
                    }
                }
            }
            if lsas.is_empty() {
                "no LSA".into()
            } else {
                format!("[{}]", lsas.join("; "))
            }
        }
        Err(e) => format!("vtysh failed: {e:#}"),
    }
}

fn wait_link_local(lab: &Lab, d: &mut Daemons) {
    let (h2, rtr) = (lab.h2(), lab.rtr());
    wait_for("link-local addresses", Duration::from_secs(10), d, || {
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
    });
}

/// h2's link-local address on eth0.
fn h2_link_local(lab: &Lab) -> String {
    let (_, ll) = sh(
        lab,
        &lab.h2(),
        &[
            "ip", "-6", "-o", "addr", "show", "dev", "eth0", "scope", "link",
        ],
    );
    ll.split_whitespace()
        .skip_while(|w| *w != "inet6")
        .nth(1)
        .and_then(|a| a.split('/').next())
        .unwrap_or_else(|| panic!("h2 link-local: {ll}"))
        .to_string()
}

/// The OSPFv2 neighbour h2's state (e.g. "Full/-"), if FRR lists it.
fn ospf_state(frr: &Frr) -> String {
    let v = frr
        .json("show ip ospf neighbor json")
        .unwrap_or(Value::Null);
    v["neighbors"][lab::H2_V4][0]["state"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// The OSPFv3 neighbour h2's state (e.g. "Full"), if FRR lists it.
fn ospf6_state(frr: &Frr) -> String {
    let v = frr
        .json("show ipv6 ospf6 neighbor json")
        .unwrap_or(Value::Null);
    v["neighbors"]
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|n| n["neighborId"] == lab::H2_V4)
                .map(|n| n["state"].as_str().unwrap_or("").to_string())
        })
        .unwrap_or_default()
}

/// FRR zebra + ospfd + ospf6d on r2 in the router namespace.
fn start_frr(d: &mut Daemons, lab: &Lab) -> Frr {
    d.start_frr(
        &lab.rtr(),
        &[
            ("ospfd", ospf::frr_ospf_config(lab::R2_V4, &["r2"])),
            ("ospf6d", ospf::frr_ospf6_config(lab::R2_V4, &["r2"])),
        ],
        &[],
    )
    .unwrap_or_else(|e| panic!("{e:#}"))
}

#[test]
fn frr_ospf_with_bird_300_v4_100_v6_externals_cross_the_fast_path_and_withdraw() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t0 = Instant::now();
    let g = start("ospf", "");
    let lab = &g.0;
    // Declared after the lab guard: dropped (daemons stopped) before the lab goes down.
    let mut d = Daemons::new(&lab.dir.join("daemons")).unwrap();
    let h2 = lab.h2();
    wait_link_local(lab, &mut d);
    std::thread::sleep(Duration::from_millis(200));
    let base: BTreeSet<String> = fib_routes(lab).into_iter().map(|r| r.0).collect();

    let ext4 = ospf::externals_v4(V4_PREFIXES, SEED);
    let ext6 = ospf::externals_v6(V6_PREFIXES, SEED);
    let want: BTreeSet<String> = ext4
        .iter()
        .map(|&p| v4_str(p))
        .chain(ext6.iter().map(|&p| v6_str(p)))
        .collect();
    assert_eq!(want.len(), V4_PREFIXES + V6_PREFIXES);
    assert!(want.is_disjoint(&base));

    // h2 answers on one address inside each sampled prefix.
    let s4: Vec<(String, String)> = [0, 1, 77, 150, 222, V4_PREFIXES - 1]
        .iter()
        .map(|&i| (v4_str(ext4[i]), v4_host(ext4[i]).to_string()))
        .collect();
    let s6: Vec<(String, String)> = [0, 33, V6_PREFIXES - 1]
        .iter()
        .map(|&i| (v6_str(ext6[i]), v6_host(ext6[i]).to_string()))
        .collect();
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

    let frr = start_frr(&mut d, lab);
    let t_bird = Instant::now();
    let bird_dir = d.dir.join("bird");
    let conf = ospf::bird_ospf_config(
        lab::H2_V4,
        "eth0",
        &ext4,
        &ext6,
        METRIC,
        &bird_dir.join("bird.log"),
    );
    let bird = d
        .start_bird("bird", &h2, &conf)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let birdc = |args: &[&str]| -> String { bird.birdc(args).unwrap_or_else(|e| panic!("{e:#}")) };

    // Adjacencies: Full on both.
    let full = wait_for("OSPF adjacencies", Duration::from_secs(20), &mut d, || {
        let (s4, s6) = (ospf_state(&frr), ospf6_state(&frr));
        (
            s4.starts_with("Full") && s6.starts_with("Full"),
            format!("OSPFv2 neighbour {s4:?}, OSPFv3 neighbour {s6:?}"),
        )
    });
    let t_full = t_bird.elapsed();

    // Every external reaches the FIB.
    let (mut t4, mut t6) = (None, None);
    let learn = wait_for(
        "learning the externals",
        Duration::from_secs(20),
        &mut d,
        || {
            let now: BTreeSet<String> = fib_routes(lab).into_iter().map(|r| r.0).collect();
            let n4 = now.intersection(&want).filter(|p| !p.contains(':')).count();
            let n6 = now.intersection(&want).count() - n4;
            if n4 == V4_PREFIXES {
                t4.get_or_insert(t_bird.elapsed());
            }
            if n6 == V6_PREFIXES {
                t6.get_or_insert(t_bird.elapsed());
            }
            (
                n4 + n6 == want.len(),
                format!("{n4} IPv4 and {n6} IPv6 externals in the FIB"),
            )
        },
    );
    let learn_total = t_bird.elapsed();
    eprintln!(
        "OSPF: adjacencies Full {t_full:?} after starting BIRD (polled {full:?}); all \
         {V4_PREFIXES} IPv4 externals in the FIB after {:?}, all {V6_PREFIXES} IPv6 after {:?}; \
         {learn_total:?} after starting BIRD (polled {learn:?})",
        t4.unwrap(),
        t6.unwrap()
    );

    // Exactly those prefixes were added, each via h2.
    let ll = h2_link_local(lab);
    let (via4, via6) = (
        format!("via {} dev r2", lab::H2_V4),
        format!("via {ll} dev r2"),
    );
    let now = fib_routes(lab);
    let added: BTreeSet<String> = now
        .iter()
        .map(|r| r.0.clone())
        .filter(|p| !base.contains(p))
        .collect();
    assert_eq!(
        added, want,
        "the FIB's new routes are exactly the externals"
    );
    for (p, nh) in now.iter().filter(|r| want.contains(&r.0)) {
        let via = if p.contains(':') { &via6 } else { &via4 };
        assert!(nh.starts_with(via.as_str()), "{p}: {nh}, want {via}");
    }
    for (prefix, _) in s4.iter().chain(&s6) {
        let r = fib_route(lab, prefix).unwrap_or_else(|| panic!("{prefix} not in the FIB"));
        assert!(
            r["prefix"] == prefix.as_str() && r["source"] == "route",
            "{r}"
        );
    }
    eprintln!(
        "e.g. {} -> {}, {} -> {}",
        s4[0].0,
        fib_route(lab, &s4[0].0).unwrap()["next_hop"],
        s6[0].0,
        fib_route(lab, &s6[0].0).unwrap()["next_hop"]
    );
    // `show routes summary` agrees (one snapshot: neighbour entries may come and go).
    let summary = api(lab, "routes", Some("summary"));
    let by = &summary["by_source"];
    assert_eq!(
        ["route", "neighbor", "local"]
            .iter()
            .map(|k| by[k].as_u64().unwrap())
            .sum::<u64>(),
        summary["ipv4"].as_u64().unwrap() + summary["ipv6"].as_u64().unwrap(),
        "{summary}"
    );
    assert_eq!(
        summary["by_source"]["route"].as_u64(),
        Some((base.len() + want.len()) as u64),
        "{summary}"
    );
    assert_eq!(summary["fib_errors"], 0, "{summary}");

    // FRR agrees: type-2 externals with BIRD's metric, via h2.
    let routes = frr
        .json("show ip ospf route json")
        .unwrap_or_else(|e| panic!("{e:#}"));
    let r = &routes[s4[0].0.as_str()];
    assert!(
        r["routeType"] == "N E2" && r["type2cost"] == METRIC,
        "{}: {r}",
        s4[0].0
    );
    let n_e2 = routes
        .as_object()
        .unwrap()
        .values()
        .filter(|r| r["routeType"] == "N E2")
        .count();
    assert_eq!(n_e2, V4_PREFIXES, "FRR's OSPFv2 externals");
    let (_, out) = sh(
        lab,
        &lab.rtr(),
        &["ip", "route", "show", "proto", "ospf", "match", &s4[0].0],
    );
    assert!(out.contains(&format!("via {}", lab::H2_V4)), "{out}");
    let (_, out) = sh(
        lab,
        &lab.rtr(),
        &["ip", "-6", "route", "show", "proto", "ospf"],
    );
    assert_eq!(out.lines().count(), V6_PREFIXES, "{out}");
    // BIRD: exported everything, installed nothing in h2's kernel.
    for (proto, n) in [("ospf4", V4_PREFIXES), ("ospf6", V6_PREFIXES)] {
        let out = birdc(&["show", "protocols", "all", proto]);
        assert!(out.contains(&format!("{n} exported")), "{out}");
    }
    for fam in ["-4", "-6"] {
        let (_, out) = sh(lab, &h2, &["ip", fam, "route", "show", "proto", "bird"]);
        assert!(out.trim().is_empty(), "{out}");
    }

    // Traffic to every sampled address crosses the fast path.
    let before = forwarded(lab);
    for (prefix, a) in s4.iter().chain(&s6) {
        if let Err(out) = ping_ok(lab, a) {
            panic!("{a} ({prefix}) unreachable from h1: {out}");
        }
    }
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

    // Withdraw: BIRD flushes its externals (premature aging), FRR drops the routes, zebra
    // deletes them, the FIB follows.
    let t_wd = Instant::now();
    birdc(&["disable", "static4"]);
    birdc(&["disable", "static6"]);
    let wd = wait_for(
        "withdrawing the externals",
        Duration::from_secs(20),
        &mut d,
        || {
            let now: BTreeSet<String> = fib_routes(lab).into_iter().map(|r| r.0).collect();
            let n = now.intersection(&want).count();
            (n == 0, format!("FIB still has {n} of the externals"))
        },
    );
    eprintln!(
        "all externals gone from the FIB {:?} after disabling BIRD's static protocols (polled \
         {wd:?})",
        t_wd.elapsed()
    );
    let now: BTreeSet<String> = fib_routes(lab).into_iter().map(|r| r.0).collect();
    assert_eq!(now, base, "back to the routes before OSPF");
    for (_, a) in [&s4[0], &s6[0]] {
        let (ok, out) = ping1(lab, a);
        assert!(!ok, "{a} still reachable after the withdrawal: {out}");
    }
    // The adjacencies stay up; only the externals went.
    assert!(ospf_state(&frr).starts_with("Full"));
    assert!(ospf6_state(&frr).starts_with("Full"));
    assert_eq!(kernel_forwarded(lab), (0, 0));
    d.check_alive().unwrap();
    eprintln!("ospf test body took {:?}", t0.elapsed());
}

/// OSPF packets the kernel dropped at the daemons' raw sockets in `ns` (receive buffer full).
fn ospf_socket_drops(lab: &Lab, ns: &str) -> u64 {
    let (_, out) = sh(lab, ns, &["cat", "/proc/net/raw"]);
    out.lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|a| a.ends_with(":0059"))
        })
        .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
        .sum()
}

/// Milestones of one scale run, measured from BIRD's start.
#[derive(Debug, Default)]
struct Scale {
    n: usize,
    config_mb: f64,
    full: Option<Duration>,
    lsdb: Option<Duration>,
    zebra: Option<Duration>,
    fib: Option<Duration>,
    /// From `birdc disable static4` until the FIB is back to its size before OSPF.
    withdraw: Option<Duration>,
}

fn scale_run(n: usize, limit: Duration, withdraw_max: usize, tuning: ospf::Tuning) -> Scale {
    let g = start("ospfs", "");
    let lab = &g.0;
    let mut d = Daemons::new(&lab.dir.join("daemons")).unwrap();
    let h2 = lab.h2();
    let ext4 = ospf::externals_v4(n, SEED);
    std::thread::sleep(Duration::from_millis(500));
    let (base4, _) = fib_counts(lab);
    let frr = d
        .start_frr(
            &lab.rtr(),
            &[(
                "ospfd",
                ospf::frr_ospf_config_with(lab::R2_V4, &["r2"], tuning),
            )],
            &[],
        )
        .unwrap_or_else(|e| panic!("{e:#}"));
    let bird_dir = d.dir.join("bird");
    let conf = ospf::bird_ospf_config_with(
        lab::H2_V4,
        "eth0",
        &ext4,
        &[],
        METRIC,
        &bird_dir.join("bird.log"),
        tuning,
    );
    let mut s = Scale {
        n,
        config_mb: conf.len() as f64 / 1e6,
        ..Scale::default()
    };
    let t = Instant::now();
    let bird = d
        .start_bird("bird", &h2, &conf)
        .unwrap_or_else(|e| panic!("{e:#}"));
    eprintln!("N={n}: BIRD up (control socket) after {:?}", t.elapsed());
    drop(conf);
    let mut last_print = Instant::now();
    let res = d.wait_for("scale run", limit, || {
        let el = t.elapsed();
        if s.full.is_none() && ospf_state(&frr).starts_with("Full") {
            s.full = Some(el);
        }
        let ext = frr
            .json("show ip ospf json")
            .ok()
            .and_then(|v| v["lsaExternalCounter"].as_u64())
            .unwrap_or(0);
        if s.lsdb.is_none() && ext >= n as u64 {
            s.lsdb = Some(el);
        }
        let zebra = frr
            .json("show ip route summary json")
            .ok()
            .and_then(|v| {
                v["routes"].as_array().and_then(|a| {
                    a.iter()
                        .find(|r| r["type"] == "ospf")
                        .and_then(|r| r["fib"].as_u64())
                })
            })
            .unwrap_or(0);
        if s.zebra.is_none() && zebra >= n as u64 {
            s.zebra = Some(el);
        }
        let (v4, _) = fib_counts(lab);
        let fib = v4.saturating_sub(base4);
        if s.fib.is_none() && fib >= n as u64 {
            s.fib = Some(el);
        }
        let state = format!(
            "{el:.1?}: adjacency {:?}, {ext} external LSAs, zebra {zebra} OSPF routes in \
             the kernel, FIB +{fib}; OSPF packets dropped at the sockets: {} by FRR, {} by BIRD",
            ospf_state(&frr),
            ospf_socket_drops(lab, &lab.rtr()),
            ospf_socket_drops(lab, &h2),
        );
        if last_print.elapsed() > Duration::from_secs(5) {
            eprintln!("  {state}");
            last_print = Instant::now();
        }
        // Poll big tables gently: vtysh and the control API cost CPU the daemons need.
        if n > 100_000 {
            std::thread::sleep(Duration::from_millis(450));
        }
        Ok((
            s.fib.is_some() && s.zebra.is_some() && s.lsdb.is_some(),
            state,
        ))
    });
    if let Err(e) = res {
        eprintln!("N={n}: {e:#}");
    } else if n <= withdraw_max {
        let t = Instant::now();
        bird.birdc(&["disable", "static4"])
            .unwrap_or_else(|e| panic!("{e:#}"));
        let mut last_print = Instant::now();
        let res = d.wait_for("scale withdrawal", limit, || {
            let (v4, _) = fib_counts(lab);
            if last_print.elapsed() > Duration::from_secs(5) {
                let ext = frr
                    .json("show ip ospf json")
                    .ok()
                    .and_then(|v| v["lsaExternalCounter"].as_u64())
                    .unwrap_or(0);
                eprintln!(
                    "  withdrawing, {:.1?}: {ext} external LSAs in ospfd, FIB +{}; OSPF packets \
                     dropped at the sockets: {} by FRR, {} by BIRD",
                    t.elapsed(),
                    v4.saturating_sub(base4),
                    ospf_socket_drops(lab, &lab.rtr()),
                    ospf_socket_drops(lab, &h2),
                );
                last_print = Instant::now();
            }
            if n > 100_000 {
                std::thread::sleep(Duration::from_millis(450));
            }
            // The neighbour entry for h2 may stay: at most one above the baseline.
            Ok((
                v4 <= base4 + 1,
                format!("FIB +{}", v4.saturating_sub(base4)),
            ))
        });
        match res {
            Ok(_) => s.withdraw = Some(t.elapsed()),
            Err(e) => eprintln!("N={n}: {e:#}"),
        }
    }
    let sync = api(lab, "counters", None)["sync"].clone();
    eprintln!("N={n}: {s:?}; ferrouter sync {sync}");
    s
}

/// `OSPF_SCALE=20000,200000 cargo test --test ospf ospf_scale -- --ignored --nocapture`:
/// time from BIRD's start until all N IPv4 externals are in ferrouter's FIB, with the
/// milestones (adjacency Full, LSDB complete in ospfd, zebra's routes in the kernel), then
/// from `birdc disable static4` until they are gone again (for N up to
/// OSPF_SCALE_WITHDRAW_MAX, default 200000). OSPF_SCALE_LIMIT_S bounds each phase (600).
/// A fresh lab per size; [`ospf::Tuning::BULK`] on both ends, except that
/// OSPF_SCALE_TX_LENGTH sets BIRD's `tx length` (0: the MTU).
#[test]
#[ignore]
fn ospf_scale() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let sizes: Vec<usize> = std::env::var("OSPF_SCALE")
        .unwrap_or_else(|_| "20000,200000".into())
        .split(',')
        .map(|x| x.trim().parse().expect("OSPF_SCALE: comma-separated sizes"))
        .collect();
    let limit = Duration::from_secs(
        std::env::var("OSPF_SCALE_LIMIT_S")
            .ok()
            .and_then(|x| x.parse().ok())
            .unwrap_or(600),
    );
    // Withdrawing is slow at scale (see `lab::ospf::Tuning::bird_tx_length`): only up to
    // this many externals.
    let withdraw_max = std::env::var("OSPF_SCALE_WITHDRAW_MAX")
        .ok()
        .and_then(|x| x.parse().ok())
        .unwrap_or(200_000);
    let mut tuning = ospf::Tuning::BULK;
    if let Some(l) = std::env::var("OSPF_SCALE_TX_LENGTH")
        .ok()
        .and_then(|x| x.parse::<u32>().ok())
    {
        tuning.bird_tx_length = Some(l).filter(|l| *l > 0);
    }
    eprintln!("{tuning:?}");
    let mut out = Vec::new();
    for n in sizes {
        out.push(scale_run(n, limit, withdraw_max, tuning));
    }
    eprintln!(
        "\n       N  config MB  Full (s)  LSDB (s)  zebra->kernel (s)  FIB (s)  withdrawn (s)"
    );
    let f = |d: Option<Duration>| d.map_or("-".to_string(), |d| format!("{:.2}", d.as_secs_f64()));
    for s in &out {
        eprintln!(
            "{:>8}  {:>9.1}  {:>8}  {:>8}  {:>17}  {:>7}  {:>13}",
            s.n,
            s.config_mb,
            f(s.full),
            f(s.lsdb),
            f(s.zebra),
            f(s.fib),
            f(s.withdraw)
        );
    }
    assert!(
        out.iter()
            .all(|s| s.fib.is_some() && (s.withdraw.is_some() || s.n > withdraw_max)),
        "not all runs finished"
    );
}

/// `bench convergence --protocol ospf` end to end at 2,000 routes against both DUTs: BIRD in
/// h2 (primary) and h3 (secondary) originate the same externals, the primary withdraws and
/// re-advertises; every phase must converge (traffic to every route on the expected host),
/// with no loss after convergence and the JSON contract of the BGP mode.
#[test]
fn bench_convergence_ospf_2k_routes_ferrouter_and_linux_json() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    check_bench_convergence(
        "ospf",
        "bird",
        2000,
        &format!("o{}", std::process::id() % 100_000),
    );
}

/// Send `pkts` as OSPF (IP protocol 89) from the router namespace to h2's address: what a
/// hostile or broken neighbour might send the tester's emulated router.
fn send_ospf_from_router(lab: &Lab, pkts: Vec<Vec<u8>>) {
    let ns = lab.rtr();
    std::thread::spawn(move || {
        lab::rfc2544::enter_netns(&ns).unwrap();
        // SAFETY: plain socket(2); closed below.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, 89) };
        assert!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
        let dst = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from(lab::H2_V4.parse::<std::net::Ipv4Addr>().unwrap()).to_be(),
            },
            sin_zero: [0; 8],
        };
        for p in &pkts {
            // SAFETY: p and dst are valid for the lengths given.
            let rc = unsafe {
                libc::sendto(
                    fd,
                    p.as_ptr().cast(),
                    p.len(),
                    0,
                    (&dst as *const libc::sockaddr_in).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                )
            };
            assert_eq!(rc, p.len() as isize, "{}", std::io::Error::last_os_error());
        }
        // SAFETY: fd is ours.
        unsafe { libc::close(fd) };
    })
    .join()
    .unwrap();
}

/// The tester's emulated OSPF routers (`ospf::peer`, `--speaker tester`) against FRR's
/// ospfd: both form adjacencies, originate 5,000 externals each (primary metric 100,
/// secondary 200), ospfd installs the primary's and ferrouter's FIB follows; every LSA is
/// acknowledged both ways (ospfd floods each router's externals to the other, which
/// acknowledges them). The primary withdraws (MaxAge) and every route moves to the
/// secondary; it advertises again (next sequence number) and they move back. Malformed
/// packets sent to the primary are counted and change nothing.
#[test]
fn tester_ospf_routers_feed_ospfd_withdraw_readvertise_and_shrug_off_bad_packets() {
    use lab::convergence::Routing;
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const N: usize = 5000;
    let mut l = Lab::new(&format!("t{}oe", std::process::id() % 10000));
    l.h3 = true;
    let g = start_lab(l);
    let lab = &g.0;
    let mut d = Daemons::new(&lab.dir.join("daemons")).unwrap();
    let peers = lab::convergence::ospf::setup_tester(lab, &mut d, N, SEED, &|m| eprintln!("{m}"))
        .unwrap_or_else(|e| panic!("{e:#}"));
    let want: BTreeSet<String> = peers.prefixes().iter().map(|&p| v4_str(p)).collect();
    assert_eq!(want.len(), N);
    let on = |nh: &str| {
        fib_routes(lab)
            .into_iter()
            .filter(|(p, h)| h.starts_with(&format!("via {nh} ")) && want.contains(p))
            .count()
    };
    let frr = peers.frr();
    let all_on = |d: &mut Daemons, what: &str, nh: &str| {
        wait_for(what, Duration::from_secs(60), d, || {
            let n = on(nh);
            // A few stragglers: say where the FIB and the kernel have them (a route the
            // kernel has moved and the FIB has not is ours; one the kernel still has on
            // the old next hop is zebra's).
            let mut why = String::new();
            if n != N && n + 5 >= N {
                let fib: std::collections::BTreeMap<String, String> = fib_routes(lab)
                    .into_iter()
                    .filter(|(p, _)| want.contains(p))
                    .collect();
                for p in want
                    .iter()
                    .filter(|p| {
                        fib.get(*p)
                            .is_none_or(|h| !h.starts_with(&format!("via {nh} ")))
                    })
                    .take(3)
                {
                    let (_, kernel) = sh(lab, &lab.rtr(), &["ip", "route", "show", p]);
                    why += &format!("; {p}: FIB {:?}, kernel {:?}", fib.get(p), kernel.trim());
                    // And ospfd's own view: which routers' LSAs for it it holds (one
                    // still from the router that withdrew it, or none from the one that
                    // re-advertised it, tells our emulated router from ospfd).
                    why += &format!(", ospfd LSDB: {}", ospfd_externals(frr, p));
                }
            }
            (n == N, format!("{n} of {N} via {nh}{why}"))
        });
    };
    let settled = |d: &mut Daemons, what: &str| {
        wait_for(what, Duration::from_secs(30), d, || {
            let s = peers.stats();
            (
                s.iter().all(|s| s.unacked == 0 && s.unsent == 0),
                format!("{s:?}"),
            )
        });
    };
    peers.learn().unwrap();
    all_on(&mut d, "the primary's externals in the FIB", lab::H2_V4);
    settled(&mut d, "every LSA acknowledged after the learn");
    let [p, s] = peers.stats();
    for x in [&p, &s] {
        assert_eq!(x.state, Some(ospf_tester::peer::State::Full), "{x:?}");
        assert!(x.lsas_acked >= N as u64, "{x:?}");
        assert_eq!(
            (x.bad_packets, x.adjacency_resets, x.unoriginated),
            (0, 0, 0),
            "{x:?}"
        );
        // ospfd floods each router's externals to the other.
        assert!(x.lsas_received >= N as u64, "{x:?}");
    }

    peers.withdraw().unwrap();
    all_on(&mut d, "failover to the secondary", lab::H3_V4);
    settled(&mut d, "every flush acknowledged");
    peers.readvertise().unwrap();
    all_on(&mut d, "failback to the primary", lab::H2_V4);
    settled(&mut d, "every new instance acknowledged");

    // Bad packets at the primary: short, version 3, bad checksum, an LSU whose LSA runs
    // past the packet (checksum right), and an LSU with a bad LSA checksum.
    let rid: std::net::Ipv4Addr = lab::R2_V4.parse().unwrap();
    let mut ack = Vec::new();
    ospf_tester::wire::encode_ls_ack(&mut ack, rid, &[]);
    let mut v3 = ack.clone();
    v3[0] = 3;
    let mut sum = ack.clone();
    sum[5] ^= 0xff;
    let mut overrun = Vec::new();
    ospf_tester::wire::lsu_begin(&mut overrun, rid);
    ospf_tester::wire::lsu_push(
        &mut overrun,
        &[
            0, 1, 2, 5, 1, 2, 3, 4, 1, 2, 3, 4, 0x80, 0, 0, 1, 0, 0, 1, 0,
        ],
    );
    ospf_tester::wire::finish(&mut overrun);
    let mut bad_lsa = Vec::new();
    let mut lsa = [0u8; ospf_tester::wire::EXTERNAL_LSA_LEN];
    ospf_tester::wire::external_lsa(
        &mut lsa,
        rid,
        1,
        ospf_tester::wire::INITIAL_SEQ,
        ospf_tester::wire::External {
            id: 0x0a00_0000,
            mask: 0xff00_0000,
            metric: 1,
        },
    );
    lsa[30] ^= 1;
    ospf_tester::wire::lsu_begin(&mut bad_lsa, rid);
    ospf_tester::wire::lsu_push(&mut bad_lsa, &lsa);
    ospf_tester::wire::finish(&mut bad_lsa);
    let before = peers.stats()[0].bad_packets;
    send_ospf_from_router(lab, vec![ack[..10].to_vec(), v3, sum, overrun, bad_lsa]);
    wait_for(
        "the bad packets counted",
        Duration::from_secs(10),
        &mut d,
        || {
            let b = peers.stats()[0].bad_packets;
            (b >= before + 5, format!("bad_packets {b}"))
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    let [p, _] = peers.stats();
    assert_eq!(p.state, Some(ospf_tester::peer::State::Full), "{p:?}");
    assert_eq!(p.adjacency_resets, 0, "{p:?}");
    assert_eq!(on(lab::H2_V4), N);
    drop(peers);
}

/// `bench convergence --protocol ospf --speaker tester` at 20,000 routes against both DUTs,
/// with the checks of the BIRD run.
#[test]
fn bench_convergence_ospf_tester_20k_routes_ferrouter_and_linux_json() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    check_bench_convergence(
        "ospf",
        "tester",
        20_000,
        &format!("q{}", std::process::id() % 100_000),
    );
}
