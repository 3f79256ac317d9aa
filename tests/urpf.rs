//! uRPF end to end: `[[interface]] urpf` in the config of `ferrouter run` in a namespace
//! lab, changed live with `ferrouter config apply`, with real pings from spoofed sources;
//! counted in `show counters` and `show interfaces`, shown by `trace`.

use std::process::Command;

use lab::{Lab, H2_V4, H2_V6};
use serde_json::Value;

mod common;
use common::*;

/// The lab's base config plus `extra`, applied with `ferrouter config apply`.
fn apply(lab: &Lab, base: &str, extra: &str) {
    let f = lab
        .config_file()
        .with_file_name(format!("candidate-{}.toml", extra.len()));
    std::fs::write(&f, format!("{base}\n{extra}")).unwrap();
    let sock = lab.socket();
    let out = Command::new(bin())
        .args(["config", "apply", f.to_str().unwrap(), "--socket"])
        .arg(&sock)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "config apply {extra:?}: {text}");
}

fn urpf_on_r1(mode: &str) -> String {
    format!("[[interface]]\nname = \"r1\"\nurpf = \"{mode}\"\n")
}

/// The features `show interfaces` lists on `name`.
fn features_of(lab: &Lab, name: &str) -> Vec<String> {
    let v = api(lab, "interfaces", None);
    let i = v
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in {v}"));
    i["features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect()
}

/// Three pings from h1 to `dst` with source address `src` (which h1 holds): all answered?
fn ping_from(lab: &Lab, src: &str, dst: &str) -> bool {
    ping(lab, &lab.h1(), dst, &["-I", src, "-W", "1"]).0
}

#[test]
fn urpf_drops_spoofed_sources_strict_and_loose_and_changes_live() {
    let g = start("urpf", &urpf_on_r1("strict"));
    let lab = &g.0;
    let base = std::fs::read_to_string(lab.config_file())
        .unwrap()
        .replace(&urpf_on_r1("strict"), "");
    assert_eq!(
        features_of(lab, "r1"),
        ["ip4-urpf-strict", "ip6-urpf-strict"]
    );
    assert!(features_of(lab, "r2").is_empty());
    // Legitimate sources pass.
    ping_until_ok(lab, &lab.h1(), H2_V4);
    ping_until_ok(lab, &lab.h1(), H2_V6);
    // h1 takes addresses it has no right to: one of h2's subnet (the router's way back is
    // r2) and one the router has no route to at all.
    let h1 = lab.h1();
    for a in [
        &["addr", "add", "198.51.100.77/32", "dev", "eth0"][..],
        &["addr", "add", "10.250.0.1/32", "dev", "eth0"],
        &[
            "-6",
            "addr",
            "add",
            "2001:db8:2::77/128",
            "dev",
            "eth0",
            "nodad",
        ],
    ] {
        let mut args = vec!["ip"];
        args.extend_from_slice(a);
        let (ok, out) = sh(lab, &h1, &args);
        assert!(ok, "{args:?}: {out}");
    }
    assert!(!ping_from(lab, "198.51.100.77", H2_V4));
    assert!(feature_drops(lab, "ip4-urpf-strict", "wrong_interface") >= 3);
    assert!(!ping_from(lab, "10.250.0.1", H2_V4));
    assert!(feature_drops(lab, "ip4-urpf-strict", "no_route") >= 3);
    assert!(!ping_from(lab, "2001:db8:2::77", H2_V6));
    assert!(feature_drops(lab, "ip6-urpf-strict", "wrong_interface") >= 3);
    assert!(reason_count(lab, "FeatureDrop") >= 9);
    // The drops show in `trace` under the feature's node.
    let sock = lab.socket();
    let trace = |args: &[&str]| {
        let out = Command::new(bin())
            .arg("trace")
            .args(args)
            .arg("--socket")
            .arg(&sock)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    trace(&["add", "5", "--match", "src 198.51.100.77"]);
    ping_from(lab, "198.51.100.77", H2_V4);
    let shown = trace(&["show"]);
    assert!(
        shown.contains("ip4-urpf-strict") && shown.contains("wrong_interface"),
        "{shown}"
    );

    // Loose, live: a source the router can route to anywhere passes; none still does not.
    apply(lab, &base, &urpf_on_r1("loose"));
    assert_eq!(features_of(lab, "r1"), ["ip4-urpf-loose", "ip6-urpf-loose"]);
    let fwd = forwarded(lab);
    let wrong = feature_drops(lab, "ip4-urpf-strict", "wrong_interface");
    ping_from(lab, "198.51.100.77", H2_V4); // h2 cannot answer it: the address is not h1's
    assert!(forwarded(lab) >= fwd + 3, "loose forwards the requests");
    assert_eq!(
        feature_drops(lab, "ip4-urpf-strict", "wrong_interface"),
        wrong
    );
    assert!(!ping_from(lab, "10.250.0.1", H2_V4));
    assert!(feature_drops(lab, "ip4-urpf-loose", "no_route") >= 3);
    ping_until_ok(lab, &lab.h1(), H2_V4);

    // Off, live.
    apply(lab, &base, "");
    assert!(features_of(lab, "r1").is_empty());
    let no_route = feature_drops(lab, "ip4-urpf-loose", "no_route");
    ping_from(lab, "10.250.0.1", H2_V4);
    assert_eq!(feature_drops(lab, "ip4-urpf-loose", "no_route"), no_route);

    // Switched under traffic: legitimate pings lose nothing while uRPF goes strict, loose
    // and off again and again.
    let pinger = {
        let h1 = lab.h1();
        std::thread::spawn(move || {
            let out = Command::new("ip")
                .args([
                    "netns", "exec", &h1, "ping", "-c", "300", "-i", "0.01", "-W", "2",
                ])
                .arg(H2_V4)
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        })
    };
    for k in 0..6 {
        let mode = ["strict", "loose", ""][k % 3];
        let extra = if mode.is_empty() {
            String::new()
        } else {
            urpf_on_r1(mode)
        };
        apply(lab, &base, &extra);
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let out = pinger.join().unwrap();
    assert!(out.contains("300 received"), "{out}");
    let v: Value = api(lab, "counters", None);
    assert!(v["features"].as_array().unwrap().len() >= 4);
}
