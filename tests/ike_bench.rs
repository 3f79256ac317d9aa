//! `ferrouter-lab bench ike --dut ferrouter,strongswan --tunnels 50 --auth psk|ecdsa --json`
//! (issue 27, item 8): the IKE load generator's 50 emulated initiators against ferrouter's IKE daemon and
//! against strongSwan's charon, each the responder in turn. Checks the JSON contract
//! (every field of every run), that both responders established all 50 tunnels and hold
//! them (their own count: `show ike`, `swanctl --stats`), that ten of ferrouter's tunnels
//! carry pings both ways (`--traffic 10`), and that no namespace is left behind. No timing assertions: the machine is shared. Needs root, iproute2, taskset and
//! strongSwan (Debian charon-systemd, strongswan-swanctl, libcharon-extra-plugins); fails
//! naming what is missing, never passes silently.

mod common;
use common::*;

/// The fields of every run, as the issue specifies them.
const RUN_FIELDS: [&str; 9] = [
    "dut",
    "auth",
    "dh",
    "tunnels",
    "setup_per_s",
    "failed",
    "held",
    "bytes_per_tunnel",
    "cpu_us_per_tunnel",
];

#[test]
fn bench_ike_ferrouter_and_strongswan_establish_every_tunnel() {
    lab::ipsecbench::preconditions(&[
        lab::ipsecbench::Dut::Ferrouter,
        lab::ipsecbench::Dut::Strongswan,
    ])
    .unwrap_or_else(|e| panic!("{e:#}"));
    // With PSKs, then with ECDSA P-256 certificates (`--auth ecdsa`).
    for (tag, auth) in [("fk", "psk"), ("fc", "ecdsa")] {
        bench_both(&format!("{tag}{}", std::process::id() % 10000), auth);
    }
}

fn bench_both(prefix: &str, auth: &str) {
    let prefix = prefix.to_string();
    let (dir, names) = lab::ikebench::namespaces(&prefix);
    let _guard = NetnsGuard::new(names, dir);
    let v = bench_json(&[
        "bench",
        "ike",
        "--dut",
        "ferrouter,strongswan",
        "--tunnels",
        "50",
        "--auth",
        auth,
        "--netns-prefix",
        &prefix,
        "--timeout",
        "40",
        "--traffic",
        "10",
        "--json",
    ]);
    assert_no_namespaces_left(&prefix);
    assert!(
        v["machine"]["cpu_model"]
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "{v}"
    );
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2, "one run per DUT: {v}");
    for (r, dut) in runs.iter().zip(["ferrouter", "strongswan"]) {
        for f in RUN_FIELDS {
            assert!(!r[f].is_null(), "{dut}: field {f} missing: {r}");
        }
        assert_eq!(r["dut"], dut, "{r}");
        assert_eq!(r["auth"], auth, "{r}");
        assert_eq!(r["dh"], 31, "{r}");
        assert_eq!(r["tunnels"], 50, "{r}");
        // Every emulated initiator got its IKE SA and child SA, and the responder holds
        // them all by its own count.
        assert_eq!(r["failed"], 0, "{dut}: {r}");
        assert_eq!(r["generator"]["established"], 50, "{dut}: {r}");
        assert_eq!(r["held"], 50, "{dut}: {r}");
        assert!(r["setup_per_s"].as_f64().unwrap() > 0.0, "{dut}: {r}");
        assert!(r["time_to_n_s"].as_f64().is_some(), "{dut}: {r}");
        assert!(r["bytes_per_tunnel"].as_f64().is_some(), "{r}");
        assert!(r["cpu_us_per_tunnel"].as_f64().unwrap() >= 0.0, "{r}");
        // The responder did the work: its resident memory was read before and after.
        assert!(r["responder_rss_before"].as_u64().unwrap() > 0, "{r}");
        assert!(r["responder_rss_after"].as_u64().unwrap() > 0, "{r}");
    }
    // ferrouter's children, from `show ike`: one per IKE SA.
    assert_eq!(runs[0]["children_after_setup"], 50, "{}", runs[0]);
    // Ten of the 50 peers (all on one tunnel, `remote = "any"`, each behind its claimed
    // NAT) pinged h2 through their own child SA: every one got answers back through its
    // own SA, the responder choosing each peer's outbound SA by destination, ESP in UDP
    // to the port IKE found. Three pings each: the first may meet h2's ARP.
    let t = &runs[0]["generator"]["traffic"];
    assert_eq!(t["sampled"], 10, "{t}");
    assert_eq!(t["keyed"], 10, "{t}");
    assert_eq!(t["sent"], 30, "{t}");
    assert_eq!(t["tunnels_answered"], 10, "{t}");
    assert_eq!(t["bad_esp"], 0, "{t}");
    assert!(runs[1]["generator"]["traffic"].is_null(), "{}", runs[1]);
}
