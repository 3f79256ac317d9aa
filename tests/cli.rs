//! The commands a user runs, end to end at small scale: the test bench's demo and each
//! benchmark's JSON contract (`ferrouter-lab`), including the real `dpdk-test-fib`
//! comparison when DPDK is installed (scripts/test.sh installs it); the daemon binary's
//! version, its shipped config, and the split between the two binaries.

mod common;

use std::process::Command;

use serde_json::Value;

fn ferrouter(args: &[&str]) -> (String, String) {
    run(env!("CARGO_BIN_EXE_ferrouter"), args)
}

/// The test bench binary.
fn lab(args: &[&str]) -> (String, String) {
    run(&common::lab_bin(), args)
}

fn run(bin: &str, args: &[&str]) -> (String, String) {
    let out = Command::new(bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {bin}: {e}"));
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "ferrouter {args:?} failed: {se}\n{so}"
    );
    (so, se)
}

fn json(args: &[&str]) -> Value {
    let (so, _) = lab(args);
    serde_json::from_str(so.trim())
        .unwrap_or_else(|e| panic!("stdout of {args:?} is not one JSON object ({e}): {so}"))
}

#[test]
fn pipeline_json_has_every_profile_and_loses_nothing() {
    let v = json(&[
        "bench",
        "pipeline",
        "--routes4",
        "20000",
        "--routes6",
        "10000",
        "--workers",
        "1,2",
        "--duration",
        "0.2",
        "--json",
    ]);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 10, "5 profiles x 2 worker counts");
    for p in ["ipv4-64", "ipv6-78", "imix1", "imix2", "imix3"] {
        for w in [1, 2] {
            let r = results
                .iter()
                .find(|r| r["profile"] == p && r["workers"] == w)
                .unwrap_or_else(|| panic!("{p}/{w} missing"));
            assert!(r["mpps_per_core"].as_f64().unwrap() > 0.0);
            assert!(r["ns_per_packet"].as_f64().unwrap() > 0.0);
            assert_eq!(r["not_forwarded"], 0, "{p}/{w}");
        }
    }
    assert!(
        v["fib_bytes"].as_u64().unwrap() > 64 << 20,
        "the tbl24 alone is 64 MiB"
    );
}

/// The pipeline with the firewall's ingress filter (generated rules, connection tracking)
/// and with NAT44: every variant measured, nothing lost to the filter or to NAT (whose
/// cell fails if its sessions were not all made in the warm-up and kept).
#[test]
fn pipeline_measures_the_firewall_and_loses_nothing() {
    let v = json(&[
        "bench",
        "pipeline",
        "--routes4",
        "20000",
        "--routes6",
        "10000",
        "--profile",
        "imix1",
        "--duration",
        "0.2",
        "--firewall-rules",
        "500",
        "--stateful",
        "--nat",
        "--json",
    ]);
    let results = v["results"].as_array().unwrap();
    let features: Vec<&str> = results
        .iter()
        .map(|r| r["features"].as_str().unwrap())
        .collect();
    assert_eq!(features, ["none", "firewall-500-stateful", "nat44"], "{v}");
    for r in results {
        assert!(r["mpps_per_core"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["not_forwarded"], 0, "{r}");
    }
}

#[test]
fn pipeline_rejects_unknown_profile_with_the_valid_names() {
    let out = Command::new(common::lab_bin())
        .args(["bench", "pipeline", "--profile", "imix9"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("imix9") && e.contains("imix2"), "{e}");
}

#[test]
fn bgp_scale_refuses_ipv6_routes_it_cannot_source_and_says_why() {
    for (args, want) in [
        (
            &["--routes6", "1000", "--speaker", "bird"][..],
            "--speaker tester",
        ),
        (
            &["--routes6", "3000000", "--speaker", "tester"][..],
            "--routes6 must be",
        ),
    ] {
        let out = Command::new(common::lab_bin())
            .args([
                "bench",
                "bgp-scale",
                "--routes",
                "1000",
                "--netns-prefix",
                "clir6",
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(e.contains(want), "{args:?}: {e}");
    }
}

#[test]
fn fib_update_keeps_forwarding_without_loss() {
    let v = json(&[
        "bench",
        "fib-update",
        "--routes",
        "50000",
        "--base-routes",
        "5000",
        "--json",
    ]);
    assert_eq!(v["routes"], 50000);
    assert!(v["add_routes_per_s"].as_f64().unwrap() > 0.0);
    assert!(v["del_routes_per_s"].as_f64().unwrap() > 0.0);
    assert!(v["forwarded"].as_u64().unwrap() > 0);
    assert_eq!(v["not_forwarded"], 0);
}

#[test]
fn lpm_compare_dpdk_runs_the_real_dpdk_test_fib() {
    if !bench::dpdk::available() {
        // scripts/test.sh installs dpdk-dev; a bare `cargo test` without it still checks ours.
        eprintln!("dpdk-test-fib not installed: checking ferrouter's side only");
        let v = json(&[
            "bench",
            "lpm",
            "--routes4",
            "20000",
            "--routes6",
            "10000",
            "--lookups",
            "65536",
            "--json",
        ]);
        assert!(v["ipv4"]["ferrouter_cycles"].as_f64().unwrap() > 0.0);
        return;
    }
    let v = json(&[
        "bench",
        "lpm",
        "--compare-dpdk",
        "--routes4",
        "20000",
        "--routes6",
        "10000",
        "--lookups",
        "65536",
        "--json",
    ]);
    for fam in ["ipv4", "ipv6"] {
        let f = &v[fam];
        let (ours, dpdk, ratio) = (
            f["ferrouter_cycles"].as_f64().unwrap(),
            f["dpdk_cycles"].as_f64().unwrap(),
            f["ratio"].as_f64().unwrap(),
        );
        assert!(ours > 0.0 && dpdk > 0.0, "{fam}: {f}");
        assert!(
            (ratio - ours / dpdk).abs() < 1e-9,
            "{fam}: ratio is ferrouter/dpdk"
        );
    }
}

#[test]
fn demo_forwards_everything() {
    let (so, _) = lab(&[
        "demo",
        "--routes4",
        "20000",
        "--routes6",
        "10000",
        "--duration",
        "0.2",
    ]);
    assert!(so.contains("packets not forwarded: 0"), "{so}");
    assert!(so.contains("ipv4-64") && so.contains("imix3"), "{so}");
}

#[test]
fn route_sync_streams_every_route_into_the_fib_and_back_out() {
    let v = json(&[
        "bench",
        "route-sync",
        "--routes4",
        "50000",
        "--routes6",
        "20000",
        "--json",
    ]);
    // Every announcement installed (plus the two ports' connected prefixes per family),
    // every withdrawal removed, nothing skipped or failed.
    assert_eq!(v["fib_routes"][0].as_u64().unwrap(), 50_000 + 2, "{v}");
    assert_eq!(v["fib_routes"][1].as_u64().unwrap(), 20_000 + 2, "{v}");
    assert_eq!(
        v["fib_routes_after_delete"],
        serde_json::json!([2, 2]),
        "{v}"
    );
    for phase in ["add", "replace", "delete"] {
        assert_eq!(v[phase]["messages"], 70_000, "{phase}: {v}");
        assert!(v[phase]["per_second"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(v["fib_errors"], 0);
    assert_eq!(v["skipped"], 0);
    assert!(v["fib_bytes_per_route"].as_f64().unwrap() > 0.0);
}

/// `ferrouter-lab bench bgp-speaker` at a small scale: two loopback peers, the real speaker and
/// sync; every prefix learned, moved on failover and back on failback (sampled prefixes
/// checked each time inside the benchmark), with the FIB changes each phase implies.
#[test]
fn bgp_speaker_bench_learns_fails_over_and_back() {
    let v = json(&["bench", "bgp-speaker", "--routes", "30000", "--json"]);
    assert_eq!(v["routes"], 30_000, "{v}");
    assert_eq!(v["fib_bgp_routes"], 30_000, "{v}");
    assert!(v["checked"].as_u64().unwrap() >= 3 * 1000, "{v}");
    assert!(
        v["updates_per_table"].as_u64().unwrap() >= 30,
        "packed: {v}"
    );
    assert_eq!(v["learn"]["prefixes"], 60_000, "{v}");
    // Learning installs each prefix once, and at most once more if the backup's path came
    // first; failover and failback move every prefix exactly once.
    let learn = v["learn"]["fib_changes"].as_u64().unwrap();
    assert!((30_000..=60_000).contains(&learn), "{v}");
    for phase in ["failover", "failback"] {
        assert_eq!(v[phase]["prefixes"], 30_000, "{phase}: {v}");
        assert_eq!(v[phase]["fib_changes"], 30_000, "{phase}: {v}");
        assert!(v[phase]["seconds"].as_f64().unwrap() > 0.0, "{phase}: {v}");
    }
}

/// `ferrouter --version` names the package version and the commit the binary was built
/// from (the checkout's HEAD, as git reports it).
#[test]
fn version_names_the_commit() {
    let (so, _) = ferrouter(&["--version"]);
    assert!(
        so.starts_with(&format!("ferrouter {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{so}"
    );
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match head {
        Some(h) => assert!(so.contains(&format!("(commit {h}")), "HEAD {h}: {so}"),
        // Built outside a git checkout: the commit is unknown, and says so.
        None => assert!(so.contains("(commit unknown)"), "{so}"),
    }
}

/// The example config shipped for /etc/ferrouter is valid, and `config check` reports every
/// problem of a broken one with its location.
#[test]
fn shipped_example_config_checks() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/dist/ferrouter.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_ferrouter"))
        .args(["config", "check", example])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("valid"));
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    let text = std::fs::read_to_string(example)
        .unwrap()
        .replace("prefix = \"10.0.0.0/8\"", "prefix = \"10.0.0.1/8\"")
        .replace("mtu = 1500", "mtu = 20");
    std::fs::write(&bad, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ferrouter"))
        .args(["config", "check"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    let f = bad.display().to_string();
    assert!(
        e.contains(&format!("{f}:"))
            && e.contains("interface[0].mtu")
            && e.contains("out of range"),
        "{e}"
    );
    assert!(
        e.contains("route[0].prefix") && e.contains("did you mean 10.0.0.0/8"),
        "{e}"
    );
}

/// The daemon and the test bench are two binaries: `ferrouter` links none of the lab,
/// tester or bench crates, and each old spelling of a moved command says where it went.
#[test]
fn the_daemon_links_no_test_bench_and_old_spellings_say_where_commands_went() {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "-p",
            "ferrouter",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree");
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(tree.lines().any(|l| l.starts_with("control ")), "{tree}");
    for krate in ["lab", "tester", "bench", "ferrouter-lab"] {
        assert!(
            !tree.lines().any(|l| l.starts_with(&format!("{krate} "))),
            "ferrouter links {krate}:\n{tree}"
        );
    }
    let (help, _) = ferrouter(&["--help"]);
    for cmd in ["run", "show", "config", "trace", "capture"] {
        assert!(help.contains(&format!("  {cmd} ")), "{help}");
    }
    for (args, want) in [
        (
            &["bench", "rfc2544", "--dut", "linux"][..],
            "ferrouter-lab bench rfc2544 --dut linux",
        ),
        (&["lab", "up", "--help"][..], "ferrouter-lab lab up --help"),
        (&["demo"][..], "ferrouter-lab demo"),
        (&["tester"][..], "ferrouter-lab tester"),
        (&["mrt", "generate"][..], "ferrouter-lab mrt generate"),
    ] {
        assert!(!help.contains(&format!("  {} ", args[0])), "{help}");
        let out = Command::new(env!("CARGO_BIN_EXE_ferrouter"))
            .args(args)
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(e.contains(want) && e.contains("has moved"), "{args:?}: {e}");
    }
    let (help, _) = lab(&["--help"]);
    for cmd in ["demo", "bench", "tester", "lab", "mrt"] {
        assert!(help.contains(&format!("  {cmd} ")), "{help}");
    }
}

/// The shell lines of README.md's code blocks that run `ferrouter` or `ferrouter-lab`.
fn readme_command_lines() -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let mut out = Vec::new();
    let mut in_block = false;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            continue;
        }
        let t = line.trim();
        if in_block && (t.starts_with("ferrouter ") || t.starts_with("ferrouter-lab ")) {
            out.push(t.to_string());
        }
    }
    out
}

/// Split a shell line into words: double and single quotes group, `#` after a blank starts
/// a comment.
fn shell_words(line: &str) -> Vec<String> {
    let (mut words, mut cur, mut quote, mut prev_blank) = (Vec::new(), String::new(), None, true);
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => quote = Some(c),
            (None, '#') if prev_blank => break,
            (None, c) if c.is_whitespace() => {
                if !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
            }
            (None, c) => cur.push(c),
        }
        prev_blank = c.is_whitespace();
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

/// The subcommands a `--help` lists.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Every `ferrouter`/`ferrouter-lab` line in README.md names commands and flags the
/// binaries have (checked against each subcommand's `--help`), so the README cannot rot.
/// Notation the README uses: `a|b` (each is checked), `[X]` (optional: a flag inside is
/// checked), upper-case placeholders.
#[test]
fn every_command_in_the_readme_exists() {
    let lines = readme_command_lines();
    assert!(lines.len() >= 10, "{lines:?}");
    let lab = common::lab_bin();
    for line in &lines {
        let words = shell_words(line);
        let bin = if words[0] == "ferrouter" {
            env!("CARGO_BIN_EXE_ferrouter").to_string()
        } else {
            lab.clone()
        };
        let help = |path: &[String]| -> String {
            let out = Command::new(&bin)
                .args(path)
                .arg("--help")
                .output()
                .unwrap();
            assert!(out.status.success(), "{line}: {path:?} --help failed");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let mut path: Vec<String> = Vec::new();
        let mut descending = true;
        for w in &words[1..] {
            let w = w.trim_start_matches('[').trim_end_matches(']');
            if w.is_empty() {
                continue;
            }
            if w.starts_with('-') {
                let flag = w.split('=').next().unwrap();
                let h = help(&path);
                let shown = if flag.starts_with("--") {
                    h.contains(&format!("{flag} ")) || h.contains(&format!("{flag}\n"))
                } else {
                    h.contains(&format!("{flag}, "))
                };
                assert!(
                    shown,
                    "README: `{line}`: {flag} is not an option of {path:?}:\n{h}"
                );
                continue;
            }
            if !descending {
                continue;
            }
            let h = help(&path);
            let subs = subcommands(&h);
            let alts: Vec<&str> = w.split('|').collect();
            let required = h
                .lines()
                .find(|l| l.starts_with("Usage:"))
                .is_some_and(|u| u.contains("<COMMAND>"));
            if subs.is_empty() || (!required && !alts.iter().any(|a| subs.iter().any(|s| s == a))) {
                // A positional argument: no more subcommands after it.
                descending = false;
                continue;
            }
            for a in &alts {
                assert!(
                    subs.iter().any(|s| s == a),
                    "README: `{line}`: {a} is not a subcommand of {path:?} ({subs:?})"
                );
            }
            path.push(alts[0].to_string());
        }
        assert!(!path.is_empty(), "README: `{line}` names no subcommand");
    }
}

/// Takes the README's lab down however the tour test ends.
struct TourLab(String);

impl Drop for TourLab {
    fn drop(&mut self) {
        let _ = Command::new(&self.0).args(["lab", "down"]).output();
    }
}

/// README.md's lab tour, run as written (the block that starts with `ferrouter-lab lab up`),
/// with `ferrouter` and `ferrouter-lab` taken from this build: every line must succeed, and
/// the route added in the kernel must reach ferrouter's FIB.
#[test]
fn the_readme_lab_tour_runs_as_written() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let start = readme
        .find("```sh\nferrouter-lab lab up\n")
        .expect("README's tour block (```sh, then `ferrouter-lab lab up`)");
    let block = &readme[start + 6..];
    let block = &block[..block.find("```").expect("end of the tour block")];
    let lab = common::lab_bin();
    let _down = TourLab(lab.clone());
    let _ = Command::new(&lab).args(["lab", "down"]).output();
    let mut outputs = Vec::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let mut words = shell_words(line);
        match words[0].as_str() {
            "ferrouter" => words[0] = env!("CARGO_BIN_EXE_ferrouter").into(),
            "ferrouter-lab" => words[0] = lab.clone(),
            _ => {}
        }
        let out = Command::new(&words[0])
            .args(&words[1..])
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap_or_else(|e| panic!("README tour: `{line}`: {e}"));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "README tour: `{line}` failed:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        outputs.push((line.to_string(), text));
        if line.contains("ip route add 203.0.113.0/24") {
            // "in the FIB within ms": seen by the fast path soon after (5 s at most here).
            let t = std::time::Instant::now();
            loop {
                let out = Command::new(env!("CARGO_BIN_EXE_ferrouter"))
                    .args(["show", "routes", "203.0.113.9", "--socket"])
                    .arg("/run/ferrouter-lab/fr/ferrouter.sock")
                    .output()
                    .unwrap();
                let r = String::from_utf8_lossy(&out.stdout);
                if r.contains("203.0.113.0/24") {
                    break;
                }
                assert!(
                    t.elapsed() < std::time::Duration::from_secs(5),
                    "the kernel route never reached the FIB: {r}"
                );
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
    let find = |what: &str| {
        outputs
            .iter()
            .find(|(l, _)| l.contains(what))
            .unwrap_or_else(|| panic!("the tour has no `{what}` line"))
            .1
            .clone()
    };
    let trace = find("traceroute");
    assert!(
        trace.contains("192.0.2.1") && trace.contains("198.51.100.2"),
        "hop 1 is the router, then h2: {trace}"
    );
    let ifs = find("show interfaces");
    assert!(ifs.contains("198.51.100.1"), "{ifs}");
    // Longest match: the connected /24, or h2's host entry once traceroute resolved it.
    let route = find("show routes 198.51.100.2");
    assert!(
        route.contains("198.51.100.") && route.contains("r2"),
        "{route}"
    );
    let counters: Value =
        serde_json::from_str(find("show counters --json").trim()).expect("counters JSON");
    assert_eq!(counters["kernel_forwarded"]["ipv4"], 0, "{counters}");
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&ns.stdout).contains("fr-h1"),
        "`lab down` left the namespaces"
    );
}

/// `bench acl --compare-dpdk` at a small scale: the firewall's classifier and DPDK's rte_acl
/// (dpdk-test-acl, installed by scripts/test.sh) classify the same traces the same way,
/// and both report cycles per classification.
#[test]
fn acl_bench_agrees_with_dpdk_test_acl() {
    let v = json(&[
        "bench",
        "acl",
        "--rules",
        "500",
        "--traces",
        "3000",
        "--iters",
        "2",
        "--compare-dpdk",
        "--json",
    ]);
    assert_eq!(v["rules"], 500);
    assert_eq!(v["verified_dpdk"], 3000, "{v}");
    assert!(v["verified_linear"].as_u64().unwrap() >= 3000, "{v}");
    for k in ["ferrouter_cycles", "dpdk_cycles", "ratio"] {
        assert!(v[k].as_f64().is_some_and(|x| x > 0.0), "{k}: {v}");
    }
    assert!(v["tree"]["leaves"].as_u64().unwrap() > 0, "{v}");
}
