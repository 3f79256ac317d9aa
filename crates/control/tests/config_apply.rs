//! The declarative config against a real kernel, in a network namespace of its own: bad
//! configs are refused with located messages and change nothing; apply, a second apply,
//! a failing apply (rolled back), rollback and the history across a restart.

#[path = "../../linux/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::Command;

use common::Netns;
use control::configsvc::{ConfigService, Error};
use control::history::History;
use serde_json::Value;

/// `ip -j ARGS` in `ns`, parsed.
fn ip_json(ns: &Netns, args: &[&str]) -> Vec<Value> {
    let mut full = vec!["-n", ns.name.as_str(), "-j"];
    full.extend_from_slice(args);
    let out = Command::new("ip").args(&full).output().expect("ip");
    assert!(
        out.status.success(),
        "ip {full:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap_or_default()
}

/// Everything a config can change, normalized and sorted: links (name, MTU, addresses),
/// IPv4 and IPv6 routes of the main table, neighbours.
fn kernel(ns: &Netns) -> Vec<String> {
    let mut out = Vec::new();
    for l in ip_json(ns, &["addr"]) {
        let mut addrs: Vec<String> = l["addr_info"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or(""), a["prefixlen"]))
            .collect();
        addrs.sort();
        out.push(format!("link {} mtu {} {:?}", l["ifname"], l["mtu"], addrs));
    }
    for fam in ["-4", "-6"] {
        for mut r in ip_json(ns, &[fam, "route", "show", "table", "main"]) {
            if let Some(o) = r.as_object_mut() {
                o.remove("expires");
            }
            out.push(format!("route {r}"));
        }
    }
    for n in ip_json(ns, &["neigh"]) {
        out.push(format!(
            "neigh {} {} {} {}",
            n["dst"], n["dev"], n["lladdr"], n["state"]
        ));
    }
    out.sort();
    out
}

fn route<'a>(k: &'a [String], dst: &str) -> Option<&'a String> {
    k.iter()
        .find(|l| l.starts_with("route ") && l.contains(&format!("\"dst\":\"{dst}\"")))
}

const A: &str = r#"
[[port]]
name = "eth1"

[[interface]]
name = "eth1"
mtu = 1700
addresses = ["192.0.2.1/24", "2001:db8:1::1/64"]

[[interface]]
name = "eth2"
addresses = ["198.51.100.1/24"]

[[route]]
prefix = "10.0.0.0/8"
via = ["192.0.2.2", "192.0.2.3"]

[[route]]
prefix = "2001:db8:100::/48"
via = ["2001:db8:1::2"]
metric = 20

[[route]]
prefix = "203.0.113.0/24"
blackhole = true

[[route]]
prefix = "2001:db8:dead::/48"
blackhole = true

[[neighbor]]
interface = "eth1"
ip = "192.0.2.2"
mac = "02:00:00:00:00:02"
"#;

const B: &str = r#"
[[port]]
name = "eth1"

[[interface]]
name = "eth1"
mtu = 1500
addresses = ["192.0.2.1/24", "2001:db8:1::1/64"]

[[route]]
prefix = "10.0.0.0/8"
via = ["192.0.2.3"]
interface = "eth1"

[[route]]
prefix = "172.16.0.0/12"
via = ["192.0.2.9"]
metric = 5

[[neighbor]]
interface = "eth1"
ip = "192.0.2.2"
mac = "02:00:00:00:00:22"
"#;

fn with_state(text: &str, state: &Path) -> String {
    format!("state_dir = \"{}\"\n{text}", state.display())
}

#[test]
fn check_apply_fail_rollback_and_history() {
    let mut ns = Netns::new("cfg");
    for l in ["eth1", "eth2"] {
        ns.add_link(l);
        ns.ip(&["link", "set", l, "up"]);
    }
    ns.enter();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let file = dir.path().join("ferrouter.toml");
    let (a, b) = (with_state(A, &state), with_state(B, &state));
    std::fs::write(&file, &a).unwrap();

    // Start: the whole of A reaches the kernel.
    let (mut svc, started) = ConfigService::start(&file).unwrap();
    assert_eq!(started.id, Some(1));
    let ka = kernel(&ns);
    let joined = ka.join("\n");
    assert!(joined.contains("link \"eth1\" mtu 1700"), "{joined}");
    assert!(
        joined.contains("192.0.2.1/24") && joined.contains("2001:db8:1::1/64"),
        "{joined}"
    );
    assert!(joined.contains("198.51.100.1/24"), "{joined}");
    let ecmp = route(&ka, "10.0.0.0/8").expect("ECMP route");
    assert!(
        ecmp.contains("192.0.2.2") && ecmp.contains("192.0.2.3") && ecmp.contains("nexthops"),
        "{ecmp}"
    );
    assert!(ecmp.contains("\"protocol\":\"static\""), "{ecmp}");
    let v6 = route(&ka, "2001:db8:100::/48").expect("IPv6 route");
    assert!(
        v6.contains("2001:db8:1::2") && v6.contains("\"metric\":20"),
        "{v6}"
    );
    assert!(route(&ka, "203.0.113.0/24").unwrap().contains("blackhole"));
    assert!(route(&ka, "2001:db8:dead::/48")
        .unwrap()
        .contains("blackhole"));
    assert!(
        joined.contains("neigh \"192.0.2.2\" \"eth1\" \"02:00:00:00:00:02\" [\"PERMANENT\"]"),
        "{joined}"
    );

    // Starting again (a daemon restart) finds everything in place and changes nothing.
    drop(svc);
    let (again, restarted) = ConfigService::start(&file).unwrap();
    svc = again;
    assert!(
        restarted.report.changed.is_empty(),
        "{:?}",
        restarted.report
    );
    assert_eq!(restarted.id, None);
    assert_eq!(kernel(&ns), ka);

    // Each kind of bad config is refused with its location, and changes nothing.
    let bad: &[(&str, &str)] = &[
        (
            "[[interface]]\nname = \"eth9\"\naddresses = [\"192.0.2.77/24\"]\n",
            "candidate:5:8: interface[0].name: unknown interface \"eth9\"",
        ),
        (
            "[[interface]]\nname = \"eth1\"\naddresses = [\"192.0.2.1/24\"]\n[[interface]]\nname = \"eth2\"\naddresses = [\"192.0.2.200/24\"]\n",
            "candidate:9:14: interface[1].addresses[0]: 192.0.2.200/24 overlaps 192.0.2.1/24 on eth1",
        ),
        (
            "[[route]]\nprefix = \"10.0.0.1/8\"\nblackhole = true\n",
            "candidate:5:10: route[0].prefix: \"10.0.0.1/8\" has host bits set; did you mean 10.0.0.0/8?",
        ),
        (
            "[[route]]\nprefix = \"10.0.0.0/33\"\nblackhole = true\n",
            "candidate:5:10: route[0].prefix: \"10.0.0.0/33\" has an invalid prefix length",
        ),
        (
            "[[interface]]\nname = \"eth1\"\nname = \"eth2\"\n",
            "candidate:6:1: duplicate key `name`",
        ),
        (
            "[[interface]]\nname = \"eth1\"\nmtu = 65536\n",
            "candidate:6:7: interface[0].mtu: 65536 is out of range; expected 68..=65535",
        ),
        (
            "[[interface]]\nname = \"eth1\"\nspeed = 1000\n",
            "candidate:6:1: unknown field `speed`",
        ),
    ];
    for (body, want) in bad {
        let text = with_state(&format!("[[port]]\nname = \"eth1\"\n{body}"), &state);
        let e = svc.apply(&text, None).unwrap_err();
        assert!(matches!(e, Error::Problems(_)), "{e}");
        assert!(
            e.to_string().starts_with(want),
            "{body}\n got: {e}\nwant: {want}"
        );
        assert_eq!(kernel(&ns), ka, "{body} changed the kernel");
    }
    // Restart-only settings.
    let e = svc
        .apply(
            &a.replace(
                "name = \"eth1\"\n\n[[interface]]",
                "name = \"eth2\"\n\n[[interface]]",
            ),
            None,
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("[[port]] changed; this cannot be applied live: restart"),
        "{e}"
    );

    // A second config: the diff names the changes, and the kernel matches it.
    assert!(svc
        .diff(Some(&b))
        .unwrap()
        .contains("-mtu = 1700\n+mtu = 1500\n"));
    let applied = svc.apply(&b, Some("test")).unwrap();
    assert_eq!(applied.id, Some(2));
    let kb = kernel(&ns);
    let joined = kb.join("\n");
    assert!(joined.contains("link \"eth1\" mtu 1500"), "{joined}");
    assert!(!joined.contains("198.51.100.1/24"), "{joined}");
    assert!(route(&kb, "203.0.113.0/24").is_none() && route(&kb, "2001:db8:100::/48").is_none());
    let single = route(&kb, "10.0.0.0/8").unwrap();
    assert!(
        single.contains("192.0.2.3") && !single.contains("192.0.2.2"),
        "{single}"
    );
    assert!(route(&kb, "172.16.0.0/12")
        .unwrap()
        .contains("\"metric\":5"));
    assert!(
        joined.contains("neigh \"192.0.2.2\" \"eth1\" \"02:00:00:00:00:22\" [\"PERMANENT\"]"),
        "{joined}"
    );
    let d = svc.diff(None).unwrap();
    assert!(
        d.starts_with("--- previous\n+++ running\n") && d.contains("-mtu = 1700\n+mtu = 1500"),
        "{d}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), b);

    // A config the kernel refuses midway (the last route's gateway is on no connected
    // subnet): everything before it is undone.
    let c = b.replace("mtu = 1500", "mtu = 1600").replace(
        "addresses = [\"192.0.2.1/24\", \"2001:db8:1::1/64\"]",
        "addresses = [\"192.0.2.1/24\", \"2001:db8:1::1/64\", \"192.0.2.100/24\"]",
    ) + "\n[[route]]\nprefix = \"100.64.0.0/10\"\nvia = [\"203.0.113.77\"]\n";
    let e = svc.apply(&c, None).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("adding route 100.64.0.0/10 via 203.0.113.77 metric 0: Network is unreachable (os error 101); nothing was applied: the 2 change(s) made before it were rolled back"),
        "{msg}"
    );
    assert_eq!(kernel(&ns), kb);
    assert_eq!(svc.running_text(), b);

    // Rollback: back to A, recorded as a new entry.
    let back = svc.rollback(1).unwrap();
    assert_eq!(back.id, Some(3));
    assert_eq!(kernel(&ns), ka);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), a);
    assert!(matches!(svc.rollback(5), Err(Error::NoSuchEntry(5, 2))));

    // The history survives a restart.
    drop(svc);
    let h = History::open(&state).unwrap();
    let ids: Vec<u64> = h.list().unwrap().iter().map(|e| e.id).collect();
    assert_eq!(ids, [1, 2, 3]);
    assert_eq!(h.running().unwrap().as_deref(), Some(a.as_str()));
    assert_eq!(h.get(2).unwrap(), b);
    assert!(h.list().unwrap()[2]
        .comment
        .as_deref()
        .unwrap()
        .starts_with("rollback 1"));
}
