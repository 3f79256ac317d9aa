//! `ferrouter-lab`'s own command line: its commands, and how it finds the daemon binary it
//! starts. (The benches and labs themselves are tested end to end from the workspace's
//! tests/, which run this binary.)

use std::process::Command;

fn lab(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ferrouter-lab"))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run ferrouter-lab")
}

#[test]
fn lists_the_test_bench_commands() {
    let out = lab(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for cmd in ["demo", "bench", "tester", "lab", "mrt"] {
        assert!(help.contains(&format!("  {cmd} ")), "{help}");
    }
    assert!(help.contains("--ferrouter <PATH>"), "{help}");
    let out = lab(&["bench", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for b in ["rfc2544", "pipeline", "lpm", "convergence", "bgp-scale"] {
        assert!(help.contains(b), "{help}");
    }
}

#[test]
fn a_wrong_daemon_path_is_named_before_anything_is_built() {
    let out = lab(&[
        "lab",
        "up",
        "--name",
        "nx",
        "--ferrouter",
        "/nonexistent/ferrouter",
    ]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("--ferrouter /nonexistent/ferrouter: no such file"),
        "{e}"
    );
    let ns = Command::new("ip").args(["netns", "list"]).output();
    if let Ok(ns) = ns {
        assert!(
            !String::from_utf8_lossy(&ns.stdout).contains("nx-"),
            "namespaces built"
        );
    }
}

#[test]
fn bench_crypto_reports_every_crate_and_the_openssl_reference() {
    let out = lab(&[
        "bench",
        "crypto",
        "--sizes",
        "64,1400",
        "--secs",
        "0.002",
        "--algs",
        "aes-128-gcm,aes-128-cbc+hmac-sha1-96",
        "--json",
    ]);
    let e = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && e.contains("Debian package openssl") {
        eprintln!("NOT RUN: openssl is not installed");
        return;
    }
    assert!(out.status.success(), "{e}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = r["rows"].as_array().unwrap();
    // AES-128-GCM in three crates, CBC+HMAC in two (ring has no CBC), at two sizes.
    assert_eq!(rows.len(), 10, "{r}");
    for x in rows {
        assert!(x["seal"]["gbps"].as_f64().unwrap() > 0.0, "{x}");
        assert!(x["open"]["gbps"].as_f64().unwrap() > 0.0, "{x}");
        assert!(x["vs_openssl"].as_f64().unwrap() > 0.0, "{x}");
    }
    assert_eq!(r["openssl"].as_array().unwrap().len(), 4, "{r}");
    let out = lab(&["bench", "crypto", "--algs", "aes-128-ccm"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown algorithm"));
}

#[test]
fn bench_ipsec_json_has_every_cell_of_the_contract() {
    let out = lab(&[
        "bench",
        "ipsec",
        "--sas",
        "1,10",
        "--seconds",
        "0.05",
        "--json",
    ]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{e}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r["machine"]["cpu"].is_string(), "{r}");
    assert!(r["machine"]["nproc"].as_u64().unwrap() >= 1, "{r}");
    assert!(r["runs"].is_array(), "{r}");
    let algs = [
        "aes-128-gcm",
        "aes-256-gcm",
        "chacha20-poly1305",
        "aes-128-cbc+hmac-sha1-96",
    ];
    let profiles = ["ipv4-64", "ipv4-1400", "imix1"];
    let rows = r["inmemory"].as_array().unwrap();
    assert_eq!(rows.len(), algs.len() * 2 * profiles.len() * 2, "{r}");
    for x in rows {
        let o = x.as_object().unwrap();
        let mut keys: Vec<&str> = o.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            ["alg", "dir", "gbps", "mpps", "profile", "ratio", "raw_gbps", "sas"],
            "{x}"
        );
        assert!(x["alg"].is_string() && x["dir"].is_string() && x["profile"].is_string());
        assert!(x["sas"].is_u64(), "{x}");
        let f = |k: &str| x[k].as_f64().unwrap_or_else(|| panic!("{k} in {x}"));
        assert!(
            f("mpps") > 0.0 && f("gbps") > 0.0 && f("raw_gbps") > 0.0,
            "{x}"
        );
        let want = f("gbps") / f("raw_gbps");
        assert!((f("ratio") - want).abs() <= 1e-9 * want, "{x}");
    }
    for alg in algs {
        for dir in ["encrypt", "decrypt"] {
            for profile in profiles {
                for sas in [1, 10] {
                    let n = rows
                        .iter()
                        .filter(|x| {
                            x["alg"] == alg
                                && x["dir"] == dir
                                && x["profile"] == profile
                                && x["sas"] == sas
                        })
                        .count();
                    assert_eq!(n, 1, "{alg} {dir} {profile} {sas}: {r}");
                }
            }
        }
        let m = &r["memory_per_sa_bytes"][alg];
        assert!(m["outbound"].as_f64().unwrap() >= 0.0, "{r}");
        assert!(m["inbound"].as_f64().unwrap() >= 0.0, "{r}");
    }
    assert_eq!(r["memory_sas"], 10, "{r}");
}

#[test]
fn bench_ipsec_names_a_bad_value() {
    for (args, want) in [
        (["--sas", "1,abc"], r#"--sas: "abc" is not a number"#),
        (
            ["--seconds", "soon"],
            r#"--seconds: "soon" is not a number"#,
        ),
        (
            ["--algs", "aes-128-ccm"],
            r#"--algs: "aes-128-ccm" is not an algorithm"#,
        ),
        (
            ["--profiles", "ipv4-12"],
            r#"--profiles: profile "ipv4-12""#,
        ),
    ] {
        let out = lab(&["bench", "ipsec", args[0], args[1]]);
        assert!(!out.status.success());
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(e.contains(want), "{e}");
    }
}
