//! Interfaces' admin and link state end to end (docs/management.md): `[[interface]]` links
//! brought up by `ferrouter run` and `config apply`, `enabled = false` holding one down,
//! `show interfaces` and the log saying why a port is down, and routes through a down link
//! leaving the fast path (ECMP carrying on through the other link) until it comes back.
//! Needs root; the labs run one at a time and are always torn down.

use std::net::UdpSocket;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lab::{Guard, Lab};
use serde_json::Value;

mod common;
use common::*;

static SERIAL: Mutex<()> = Mutex::new(());

/// Poll `f` every 100 ms until it returns `Some`, or panic with `what` after `secs`.
fn eventually<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out after {secs} s: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `show interfaces`' entry for `name`.
fn iface(lab: &Lab, name: &str) -> Value {
    api(lab, "interfaces", None)
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in show interfaces"))
        .clone()
}

/// `ip -j addr show dev DEV` in the router's namespace: (flags, addresses).
fn link_in_rtr(lab: &Lab, dev: &str) -> (Vec<String>, Vec<String>) {
    let (ok, out) = sh(lab, &lab.rtr(), &["ip", "-j", "addr", "show", "dev", dev]);
    assert!(ok, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let l = &v[0];
    let flags = l["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    let addrs = l["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
        .collect();
    (flags, addrs)
}

/// `ferrouter ARGS --socket SOCK`: (success, stdout + stderr).
fn cli(lab: &Lab, args: &[&str]) -> (bool, String) {
    let sock = lab.socket();
    let out = Command::new(bin())
        .args(args)
        .args(["--socket", sock.to_str().unwrap()])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Apply `text` as the router's config; it must succeed.
fn apply(lab: &Lab, text: &str) -> String {
    let f = lab.dir.join("candidate.toml");
    std::fs::write(&f, text).unwrap();
    let (ok, out) = cli(lab, &["config", "apply", f.to_str().unwrap()]);
    assert!(ok, "config apply: {out}");
    out
}

/// How many lines of the daemon's log contain `needle`.
fn log_lines(lab: &Lab, needle: &str) -> usize {
    std::fs::read_to_string(lab.log_file())
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

fn interfaces_config(r2_enabled: bool) -> String {
    format!(
        "
[[interface]]
name = \"r1\"
addresses = [\"{}/24\", \"{}/64\"]

[[interface]]
name = \"r2\"
addresses = [\"{}/24\", \"{}/64\"]
enabled = {r2_enabled}
",
        lab::R1_V4,
        lab::R1_V6,
        lab::R2_V4,
        lab::R2_V6
    )
}

/// The finding of issue 24: the router's links freshly created and DOWN, without
/// addresses, and a config naming them in `[[interface]]` with addresses. `ferrouter run`
/// brings r1 up with its addresses and forwards; r2, `enabled = false`, stays down with
/// its addresses, and `show interfaces` and the log (once) say why. `config apply` then
/// brings it up (and traffic passes) and holds it down again (its IPv6 address, which the
/// kernel flushes with the link, put back).
#[test]
fn config_brings_interfaces_up_and_holds_disabled_ones_down() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut lab = Lab::new(&format!("t{}ia", std::process::id() % 10000));
    lab.extra_config = interfaces_config(false);
    lab.down();
    let g = Guard(lab);
    let lab = &g.0;
    lab.build().unwrap_or_else(|e| panic!("lab build: {e:#}"));
    for dev in ["r1", "r2"] {
        let (ok, out) = sh(lab, &lab.rtr(), &["ip", "addr", "flush", "dev", dev]);
        assert!(ok, "{out}");
        let (ok, out) = sh(lab, &lab.rtr(), &["ip", "link", "set", dev, "down"]);
        assert!(ok, "{out}");
        let (flags, addrs) = link_in_rtr(lab, dev);
        assert!(
            !flags.contains(&"UP".to_string()) && addrs.is_empty(),
            "{flags:?} {addrs:?}"
        );
    }
    lab.start_router(std::path::Path::new(bin()))
        .unwrap_or_else(|e| panic!("start: {e:#}"));

    let (flags, addrs) = link_in_rtr(lab, "r1");
    assert!(
        flags.contains(&"UP".to_string()),
        "r1 brought up: {flags:?}"
    );
    for a in ["192.0.2.1/24", "2001:db8:1::1/64"] {
        assert!(addrs.contains(&a.to_string()), "{a} on r1: {addrs:?}");
    }
    let (flags, addrs) = link_in_rtr(lab, "r2");
    assert!(
        !flags.contains(&"UP".to_string()),
        "r2 held down: {flags:?}"
    );
    for a in ["198.51.100.1/24", "2001:db8:2::1/64"] {
        assert!(addrs.contains(&a.to_string()), "{a} on r2: {addrs:?}");
    }
    let r1 = eventually(10, "r1 up in show interfaces", || {
        let i = iface(lab, "r1");
        (i["oper"] == "up").then_some(i)
    });
    assert_eq!(r1["admin"], "up", "{r1}");
    assert!(r1["down_reason"].is_null(), "{r1}");
    let r2 = iface(lab, "r2");
    assert_eq!(
        (&r2["admin"], &r2["oper"], &r2["down_reason"]),
        (
            &Value::from("down"),
            &Value::from("down"),
            &Value::from("admin down by config (enabled = false)")
        ),
        "{r2}"
    );
    // The router answers on r1 (it is up and has its address), and h2 is unreachable.
    ping_until_ok(lab, &lab.h1(), lab::R1_V4);
    assert!(!ping(lab, &lab.h1(), lab::H2_V4, &[]).0);
    let why = "r2 is down (admin down by config (enabled = false))";
    eventually(10, "the reason in the log", || {
        (log_lines(lab, why) > 0).then_some(())
    });
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(log_lines(lab, why), 1, "logged once");
    // r1 may have been seen without carrier for the moment after it came up (the kernel
    // reports the carrier a little after the up); then it was logged up again.
    assert_eq!(
        log_lines(lab, "r1 is down"),
        log_lines(lab, "r1 is up again"),
        "{}",
        std::fs::read_to_string(lab.log_file()).unwrap_or_default()
    );

    // Enabled: up, and forwarding to h2. The hosts' routes went with the carrier.
    let base = std::fs::read_to_string(lab.config_file()).unwrap();
    let out = apply(lab, &base.replace("enabled = false", "enabled = true"));
    assert!(out.contains("~ interface r2 up"), "{out}");
    assert!(link_in_rtr(lab, "r2").0.contains(&"UP".to_string()));
    eventually(10, "r2 up in show interfaces", || {
        (iface(lab, "r2")["oper"] == "up").then_some(())
    });
    let (ok, out) = sh(
        lab,
        &lab.h2(),
        &["ip", "route", "replace", "default", "via", lab::R2_V4],
    );
    assert!(ok, "{out}");
    ping_until_ok(lab, &lab.h1(), lab::H2_V4);
    // Logged up again (after, maybe, a moment without carrier: the kernel reports the
    // carrier a little after the up).
    eventually(10, "back up in the log", || {
        (log_lines(lab, "r2 is up again (was down: ") == 1).then_some(())
    });

    // Held down again: its IPv6 address, flushed by the kernel with the link, is put back.
    apply(lab, &base);
    eventually(10, "r2 down again", || {
        (iface(lab, "r2")["down_reason"] == "admin down by config (enabled = false)").then_some(())
    });
    let (flags, addrs) = link_in_rtr(lab, "r2");
    assert!(!flags.contains(&"UP".to_string()), "{flags:?}");
    assert!(addrs.contains(&"2001:db8:2::1/64".to_string()), "{addrs:?}");
    assert!(!ping(lab, &lab.h1(), lab::H2_V4, &[]).0);
}

/// Datagrams from h1 to `dst`:7009 on `flows` source ports; how many reached h2 and h3.
fn spread(lab: &Lab, socks: &(UdpSocket, UdpSocket), dst: &str, flows: usize) -> (usize, usize) {
    let dst = format!("{dst}:7009");
    in_netns(&lab.h1(), move || {
        for i in 0..flows {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            s.send_to(format!("flow {i}").as_bytes(), &dst).unwrap();
        }
    });
    let wait = Duration::from_millis(1500);
    (
        received(&socks.0, wait).len(),
        received(&socks.1, wait).len(),
    )
}

/// ECMP over r2 and r3 to 10.9.0.0/16 (h2 and h3 both own 10.9.0.1). Carrier loss on r2
/// (h2's end set down): `show interfaces` says no-carrier, the log says so once, the FIB's
/// route is via r3 alone and every flow reaches h3; with the carrier back, both carry
/// flows again. Then r2 held down by `config apply` (`enabled = false`): the same, and
/// `show interfaces` names the config as the reason.
#[test]
fn a_down_link_leaves_the_fib_and_ecmp_carries_on() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut lab = Lab::new(&format!("t{}ib", std::process::id() % 10000));
    lab.h3 = true;
    lab.extra_config = format!(
        "[[route]]\nprefix = \"10.9.0.0/16\"\nvia = [\"{}\", \"{}\"]\n",
        lab::H2_V4,
        lab::H3_V4
    );
    let g = start_lab(lab);
    let lab = &g.0;
    for host in [lab.h2(), lab.h3()] {
        let (ok, out) = sh(
            lab,
            &host,
            &["ip", "addr", "add", "10.9.0.1/32", "dev", "lo"],
        );
        assert!(ok, "{out}");
    }
    let socks: (UdpSocket, UdpSocket) = (
        in_netns(&lab.h2(), || UdpSocket::bind("0.0.0.0:7009").unwrap()),
        in_netns(&lab.h3(), || UdpSocket::bind("0.0.0.0:7009").unwrap()),
    );
    // Both gateways resolved, then flows spread over both.
    ping_until_ok(lab, &lab.h1(), lab::H2_V4);
    ping_until_ok(lab, &lab.h1(), lab::H3_V4);
    let ecmp = |lab: &Lab| {
        api(lab, "routes", Some("10.9.0.0/16"))["routes"][0]["next_hop"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    assert!(ecmp(lab).starts_with("ecmp ["), "{}", ecmp(lab));
    let both = |lab: &Lab| {
        eventually(20, "flows over both links", || {
            let (a, b) = spread(lab, &socks, "10.9.0.1", 32);
            (a > 0 && b > 0 && a + b == 32).then_some(())
        })
    };
    both(lab);

    // Carrier loss on r2.
    let (ok, out) = sh(lab, &lab.h2(), &["ip", "link", "set", "eth0", "down"]);
    assert!(ok, "{out}");
    let r2 = eventually(10, "r2 no-carrier in show interfaces", || {
        let i = iface(lab, "r2");
        (i["oper"] == "no-carrier").then_some(i)
    });
    assert_eq!(
        (&r2["admin"], &r2["down_reason"]),
        (&Value::from("up"), &Value::from("no carrier")),
        "{r2}"
    );
    let (ok, table) = cli(lab, &["show", "interfaces"]);
    assert!(ok, "{table}");
    let row = table
        .lines()
        .find(|l| l.contains(" r2 "))
        .unwrap_or_default();
    assert!(
        row.contains(" up ") && row.contains("no-carrier"),
        "{table}"
    );
    assert!(
        table.contains("down: no carrier; routes through it are not used"),
        "{table}"
    );
    eventually(10, "the FIB's route via r3 only", || {
        let nh = ecmp(lab);
        (nh.starts_with("via 203.0.113.2 dev r3")).then_some(())
    });
    let (a, b) = spread(lab, &socks, "10.9.0.1", 32);
    assert_eq!((a, b), (0, 32), "every flow through r3");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(log_lines(lab, "r2 is down (no carrier)"), 1, "logged once");

    // The carrier back (h2's default route went with its link: put it back).
    let (ok, out) = sh(lab, &lab.h2(), &["ip", "link", "set", "eth0", "up"]);
    assert!(ok, "{out}");
    let (ok, out) = sh(
        lab,
        &lab.h2(),
        &["ip", "route", "replace", "default", "via", lab::R2_V4],
    );
    assert!(ok, "{out}");
    eventually(10, "r2 up again", || {
        (iface(lab, "r2")["oper"] == "up").then_some(())
    });
    eventually(10, "the ECMP route back", || {
        ecmp(lab).starts_with("ecmp [").then_some(())
    });
    both(lab);
    assert_eq!(log_lines(lab, "r2 is up again (was down: no carrier)"), 1);

    // Held down by the config.
    let base = std::fs::read_to_string(lab.config_file()).unwrap();
    apply(
        lab,
        &format!("{base}\n[[interface]]\nname = \"r2\"\nenabled = false\n"),
    );
    let r2 = eventually(10, "r2 admin down in show interfaces", || {
        let i = iface(lab, "r2");
        (i["admin"] == "down").then_some(i)
    });
    assert_eq!(
        r2["down_reason"], "admin down by config (enabled = false)",
        "{r2}"
    );
    eventually(10, "the FIB's route via r3 only", || {
        ecmp(lab)
            .starts_with("via 203.0.113.2 dev r3")
            .then_some(())
    });
    let (a, b) = spread(lab, &socks, "10.9.0.1", 32);
    assert_eq!((a, b), (0, 32), "every flow through r3");
    // And up again.
    apply(lab, &base);
    eventually(10, "r2 up again", || {
        (iface(lab, "r2")["oper"] == "up").then_some(())
    });
    eventually(10, "the ECMP route back", || {
        ecmp(lab).starts_with("ecmp [").then_some(())
    });
    both(lab);
}
