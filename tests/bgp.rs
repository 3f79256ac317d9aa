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

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lab::Lab;
use serde_json::Value;

mod common;
use common::*;

static SERIAL: Mutex<()> = Mutex::new(());

const V4_PREFIXES: usize = 10_000;
const V6_PREFIXES: usize = 1_000;

fn ping1(lab: &Lab, dst: &str) -> (bool, String) {
    let mut a = vec!["ping", "-c", "1", "-W", "1"];
    if dst.contains(':') {
        a.insert(1, "-6");
    }
    a.push(dst);
    sh(lab, &lab.h1(), &a)
}

/// One reply within a few tries (the first packet may go while a next hop resolves).
fn ping_ok(lab: &Lab, dst: &str) -> Result<(), String> {
    let mut last = String::new();
    for _ in 0..4 {
        let (ok, out) = ping1(lab, dst);
        if ok {
            return Ok(());
        }
        last = out;
    }
    Err(last)
}

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

/// The routing daemons of one test, stopped (and their directories removed) on drop.
struct Daemons {
    /// Name, child (`ip netns exec` execs the daemon in place: the child is the daemon).
    children: Vec<(&'static str, Child)>,
    frr: PathBuf,
    bird: PathBuf,
}

impl Daemons {
    fn new(lab: &Lab) -> Daemons {
        let d = Daemons {
            children: Vec::new(),
            frr: lab.dir.join("frr"),
            bird: lab.dir.join("bird"),
        };
        for dir in [&d.frr, &d.bird] {
            let _ = std::fs::remove_dir_all(dir);
            std::fs::create_dir_all(dir).unwrap();
        }
        // FRR drops to the frr user; it must be able to create its sockets and pid files.
        let st = Command::new("chown")
            .args(["frr:frr"])
            .arg(&d.frr)
            .status()
            .unwrap();
        assert!(
            st.success(),
            "chown frr:frr (is the frr package installed?)"
        );
        d
    }

    fn spawn(&mut self, name: &'static str, ns: &str, log_dir: &Path, args: &[&str]) {
        let log = File::create(log_dir.join(format!("{name}.out"))).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        self.children.push((name, child));
    }

    /// Panics with the daemon's output if it has exited.
    fn check_alive(&mut self) {
        for (name, c) in &mut self.children {
            if let Ok(Some(st)) = c.try_wait() {
                let dir = if *name == "bird" {
                    &self.bird
                } else {
                    &self.frr
                };
                let out =
                    std::fs::read_to_string(dir.join(format!("{name}.out"))).unwrap_or_default();
                let log =
                    std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
                panic!("{name} exited ({st}):\n{out}\n{log}");
            }
        }
    }
}

impl Drop for Daemons {
    fn drop(&mut self) {
        // Newest first: BIRD, bgpd, zebra. SIGTERM, then SIGKILL after 3 s.
        for (_, c) in self.children.iter_mut().rev() {
            let pid = c.id().to_string();
            let _ = Command::new("kill").args(["-TERM", &pid]).status();
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        // Last resort: anything still running from this lab's private directories. Their
        // logs stay for a look after a failure.
        for dir in [&self.frr, &self.bird] {
            let _ = Command::new("pkill")
                .args(["-KILL", "-f"])
                .arg(format!("{}/", dir.display()))
                .status();
            if !std::thread::panicking() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
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

/// Poll `done` every 100 ms for at most `limit`; returns how long it took.
fn wait_for(
    what: &str,
    limit: Duration,
    d: &mut Daemons,
    mut done: impl FnMut() -> (bool, String),
) -> Duration {
    let t = Instant::now();
    loop {
        let (ok, state) = done();
        if ok {
            return t.elapsed();
        }
        d.check_alive();
        assert!(
            t.elapsed() < limit,
            "{what}: not done after {limit:?}: {state}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn frr_ebgp_with_bird_10k_v4_1k_v6_prefixes_cross_the_fast_path_and_withdraw() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t0 = Instant::now();
    let g = start("bgp", "");
    let lab = &g.0;
    // Declared after the lab guard: dropped (daemons stopped) before the lab goes down.
    let mut d = Daemons::new(lab);
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

    // FRR in the router namespace.
    let frr = d.frr.clone();
    let p = |f: &str| frr.join(f).display().to_string();
    std::fs::write(frr.join("zebra.conf"), "hostname ferrouter-lab\n").unwrap();
    std::fs::write(frr.join("bgpd.conf"), frr_config()).unwrap();
    let common = |conf: &str, daemon: &str| -> Vec<String> {
        [
            "-f",
            &p(conf),
            "-i",
            &p(&format!("{daemon}.pid")),
            "-z",
            &p("zserv.api"),
            "--vty_socket",
            &frr.display().to_string(),
            "-u",
            "frr",
            "-g",
            "frr",
            "-P",
            "0",
            "--log",
            &format!("file:{}", p(&format!("{daemon}.log"))),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let mut zebra = vec!["/usr/lib/frr/zebra".to_string()];
    zebra.extend(common("zebra.conf", "zebra"));
    zebra.extend(["-s".to_string(), "90000000".to_string()]);
    let zebra: Vec<&str> = zebra.iter().map(String::as_str).collect();
    d.spawn("zebra", &rtr, &frr, &zebra);
    wait_for(
        "zebra's zserv socket",
        Duration::from_secs(10),
        &mut d,
        || (frr.join("zserv.api").exists(), String::new()),
    );
    let mut bgpd = vec!["/usr/lib/frr/bgpd".to_string()];
    bgpd.extend(common("bgpd.conf", "bgpd"));
    let bgpd: Vec<&str> = bgpd.iter().map(String::as_str).collect();
    d.spawn("bgpd", &rtr, &frr, &bgpd);
    wait_for("bgpd's vty socket", Duration::from_secs(10), &mut d, || {
        (frr.join("bgpd.vty").exists(), String::new())
    });

    // BIRD in h2.
    let bird = d.bird.clone();
    let (bconf, bsock, bpid) = (
        bird.join("bird.conf"),
        bird.join("bird.ctl"),
        bird.join("bird.pid"),
    );
    std::fs::write(&bconf, bird_config(&bird)).unwrap();
    let (bconf, bsock, bpid) = (
        bconf.display().to_string(),
        bsock.display().to_string(),
        bpid.display().to_string(),
    );
    let t_bird = Instant::now();
    d.spawn(
        "bird",
        &h2,
        &bird,
        &["bird", "-f", "-c", &bconf, "-s", &bsock, "-P", &bpid],
    );
    let birdc = |args: &[&str]| -> String {
        let mut a = vec!["birdc", "-s", &bsock];
        a.extend_from_slice(args);
        let (ok, out) = sh(lab, &h2, &a);
        assert!(ok, "birdc {args:?}: {out}");
        out
    };

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
    let summary = api(lab, "routes", Some("summary"));
    let (v4, v6) = fib_counts(lab);
    assert_eq!(
        (summary["ipv4"].as_u64(), summary["ipv6"].as_u64()),
        (Some(v4), Some(v6)),
        "{summary}"
    );
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
    let vtysh = |cmd: &str| -> Value {
        let (ok, out) = sh(
            lab,
            &rtr,
            &[
                "vtysh",
                "--vty_socket",
                &frr.display().to_string(),
                "-c",
                cmd,
            ],
        );
        assert!(ok, "vtysh {cmd}: {out}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("vtysh {cmd} json ({e}): {out}"))
    };
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
    d.check_alive();
    eprintln!("bgp test body took {:?}", t0.elapsed());
}
