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
