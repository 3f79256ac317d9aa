//! The management API end to end, against `ferrouter run` in a namespace lab: HTTP on the
//! control socket, TCP with a bearer token (curl from a host namespace, and the CLI), JSON
//! errors for every kind of bad request, the OpenAPI document, and Prometheus metrics read
//! by the reference parser (Python prometheus_client, Debian python3-prometheus-client).

use std::process::Command;
use std::sync::Mutex;

use control::client::{Client, Endpoint};
use lab::Lab;
use serde_json::Value;

mod common;
use common::*;

static SERIAL: Mutex<()> = Mutex::new(());

const TOKEN: &str = "test-token-0123456789abcdef";
const PORT: u16 = 9180;

/// The token file, mode 0600 as the daemon requires.
fn write_token(path: &std::path::Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn mode_of(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

fn unix(lab: &Lab) -> Client {
    Client::new(Endpoint::Unix(lab.socket()))
}

/// `curl` from host h1 to the router's TCP API: (status, body).
fn curl(lab: &Lab, args: &[&str]) -> (u16, String) {
    let mut a = vec!["curl", "-s", "-m", "10", "-o", "-", "-w", "\n%{http_code}"];
    a.extend_from_slice(args);
    let (_, out) = sh(lab, &lab.h1(), &a);
    let (body, code) = out.trim_end().rsplit_once('\n').unwrap_or(("", out.trim()));
    (
        code.trim()
            .parse()
            .unwrap_or_else(|_| panic!("curl {args:?}: {out}")),
        body.to_string(),
    )
}

fn error_of(body: &str) -> String {
    let v: Value = serde_json::from_str(body)
        .unwrap_or_else(|e| panic!("error body is not JSON ({e}): {body:?}"));
    v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error message in {v}"))
        .to_string()
}

#[test]
fn unix_socket_answers_and_rejects_bad_requests_with_json_errors() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let g = start("a", "");
    let lab = &g.0;
    let c = unix(lab);
    let ifs = c.get("/v1/interfaces").unwrap();
    assert_eq!(ifs.as_array().unwrap().len(), 2, "{ifs}");
    assert!(
        c.get("/v1/routes/summary").unwrap()["ipv4"]
            .as_u64()
            .unwrap()
            > 0
    );
    let r = c.get("/v1/routes?prefix=198.51.100.7").unwrap();
    assert!(
        r["routes"][0]["prefix"]
            .as_str()
            .unwrap()
            .starts_with("198.51.100."),
        "{r}"
    );
    let v = c.get("/v1/version").unwrap();
    assert!(v["version"].as_str().unwrap().contains("commit"), "{v}");
    for (method, path, status, needle) in [
        ("GET", "/v1/nothing", 404, "no such endpoint"),
        ("DELETE", "/v1/counters", 405, "DELETE is not allowed"),
        (
            "GET",
            "/v1/routes?prefix=300.1.2.3",
            400,
            "neither an address nor a prefix",
        ),
        (
            "GET",
            "/v1/routes?prefix=10.0.0.0/99",
            400,
            "bad prefix length",
        ),
        ("GET", "/v1/routes?bogus=1", 400, "bogus"),
    ] {
        let r = c.call(method, path, None).unwrap();
        assert_eq!(r.status, status, "{method} {path}: {r:?}");
        assert!(
            r.error_message().contains(needle),
            "{method} {path}: {needle:?} in {:?}",
            r.error_message()
        );
    }
    // A request that is not HTTP at all, and an oversized one: the connection is refused
    // or answered with an error, and the daemon stays up and keeps forwarding.
    {
        use std::io::{Read, Write};
        let mut s = std::os::unix::net::UnixStream::connect(lab.socket()).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        s.write_all(b"\xff\xfe not http\r\n\r\n").unwrap();
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        let text = String::from_utf8_lossy(&buf);
        assert!(
            text.is_empty() || text.starts_with("HTTP/1.1 400"),
            "{text}"
        );
        let mut s = std::os::unix::net::UnixStream::connect(lab.socket()).unwrap();
        let _ = s.write_all(
            format!(
                "POST /v1/counters HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
                64 << 20
            )
            .as_bytes(),
        );
        let _ = s.write_all(&vec![b'x'; 1 << 20]);
        drop(s);
    }
    assert_eq!(
        c.get("/v1/interfaces").unwrap().as_array().unwrap().len(),
        2
    );
    ping_ok(lab, lab::H2_V4).unwrap();

    // The OpenAPI document describes every endpoint the tests call.
    let doc = c.get("/openapi.json").unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."), "{doc}");
    for p in [
        "/v1/interfaces",
        "/v1/routes",
        "/v1/routes/summary",
        "/v1/neighbors",
        "/v1/counters",
        "/v1/version",
        "/metrics",
        "/openapi.json",
    ] {
        assert!(doc["paths"][p]["get"].is_object(), "{p} missing from {doc}");
    }
}

#[test]
fn tcp_needs_the_token_and_the_cli_uses_it() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    write_token(&token_file, &format!("{TOKEN}\n"));
    let g = start(
        "t",
        &format!(
            "[api]\nlisten = \"192.0.2.1:{PORT}\"\ntoken_file = \"{}\"\n",
            token_file.display()
        ),
    );
    let lab = &g.0;
    let url = format!("http://192.0.2.1:{PORT}/v1/interfaces");
    let (status, body) = curl(lab, &[&url]);
    assert_eq!(status, 401, "{body}");
    assert!(error_of(&body).contains("Authorization: Bearer"), "{body}");
    let (status, body) = curl(
        lab,
        &["-H", "Authorization: Bearer wrong-token-xxxxxxxxx", &url],
    );
    assert_eq!(status, 401, "{body}");
    assert!(error_of(&body).contains("wrong token"), "{body}");
    let auth = format!("Authorization: Bearer {TOKEN}");
    let (status, body) = curl(lab, &["-H", &auth, &url]);
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2, "{v}");
    // The scheme is case-insensitive (RFC 7235); the token is not.
    for scheme in ["bearer", "BEARER", "BeArEr"] {
        let (status, body) = curl(
            lab,
            &["-H", &format!("Authorization: {scheme} {TOKEN}"), &url],
        );
        assert_eq!(status, 200, "{scheme}: {body}");
        let (status, body) = curl(
            lab,
            &[
                "-H",
                &format!("Authorization: {scheme} {}", TOKEN.to_uppercase()),
                &url,
            ],
        );
        assert_eq!(status, 401, "{scheme}: {body}");
        assert!(error_of(&body).contains("wrong token"), "{body}");
    }
    // Unauthenticated requests to unknown paths are 401 too: nothing leaks without a token.
    let (status, _) = curl(lab, &[&format!("http://192.0.2.1:{PORT}/openapi.json")]);
    assert_eq!(status, 401);
    // The CLI as a remote client, from the host namespace h1.
    let api = format!("192.0.2.1:{PORT}");
    let out = lab
        .exec_status(
            &lab.h1(),
            &[
                bin(),
                "show",
                "counters",
                "--json",
                "--api",
                &api,
                "--token-file",
                token_file.to_str().unwrap(),
            ],
        )
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["uptime_s"].as_f64().is_some(), "{v}");
    let out = lab
        .exec_status(&lab.h1(), &[bin(), "show", "counters", "--api", &api])
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Authorization: Bearer"), "{err}");
}

#[test]
fn a_tcp_listener_without_a_token_is_refused_at_start() {
    let e = control::config::Config::parse(
        "[api]\nlisten = \"127.0.0.1:9180\"\n[[port]]\nname = \"e\"\n",
        std::path::Path::new("t.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("needs api.token_file"), "{e}");
}

/// The metrics text parsed by the reference OpenMetrics parser; returns {name: [(labels,
/// value)]} as JSON.
fn parse_metrics(text: &str) -> Value {
    let script = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = {}
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        out.setdefault(s.name, []).append([s.labels, s.value])
print(json.dumps(out))
"#;
    let mut child = Command::new("/usr/bin/python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 (Debian) with python3-prometheus-client");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the OpenMetrics parser rejected the text: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn sample(m: &Value, name: &str, labels: &[(&str, &str)]) -> f64 {
    m[name]
        .as_array()
        .unwrap_or_else(|| panic!("{name} missing"))
        .iter()
        .find(|s| labels.iter().all(|(k, v)| s[0][k] == *v))
        .unwrap_or_else(|| panic!("{name}{labels:?} missing in {}", m[name]))[1]
        .as_f64()
        .unwrap()
}

#[test]
fn metrics_parse_and_count_traffic() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let g = start("m", "");
    let lab = &g.0;
    ping_ok(lab, lab::H2_V4).unwrap();
    // 20 packets to a prefix nobody routes: counted as ip4-lookup no-route drops.
    let _ = sh(
        lab,
        &lab.h1(),
        &["ping", "-c", "20", "-i", "0.01", "-W", "1", "203.0.113.99"],
    );
    let c = unix(lab);
    // Counters reach the API within a few polls of the worker; wait for the drops.
    let mut m = Value::Null;
    for _ in 0..50 {
        let r = c.call("GET", "/metrics", None).unwrap();
        assert_eq!(r.status, 200);
        assert!(
            r.content_type.starts_with("application/openmetrics-text"),
            "{}",
            r.content_type
        );
        m = parse_metrics(std::str::from_utf8(&r.body).unwrap());
        if sample(
            &m,
            "ferrouter_node_packets_total",
            &[("reason", "Ip4NoRoute")],
        ) >= 20.0
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let ifs = c.get("/v1/interfaces").unwrap();
    let r1 = ifs[0]["name"].as_str().unwrap();
    assert!(sample(&m, "ferrouter_port_rx_packets_total", &[("port", r1)]) >= 21.0);
    assert!(sample(&m, "ferrouter_port_rx_bytes_total", &[("port", r1)]) > 0.0);
    for g in [
        "ferrouter_interface_admin_up",
        "ferrouter_interface_oper_up",
    ] {
        assert_eq!(sample(&m, g, &[("interface", r1)]), 1.0, "{g}");
    }
    assert_eq!(
        sample(
            &m,
            "ferrouter_node_packets_total",
            &[
                ("node", "ip4-lookup"),
                ("reason", "Ip4NoRoute"),
                ("kind", "drop")
            ]
        ),
        20.0
    );
    assert!(
        sample(
            &m,
            "ferrouter_node_packets_total",
            &[("reason", "Ip4Forwarded")]
        ) >= 1.0
    );
    let busy = sample(
        &m,
        "ferrouter_worker_polls_total",
        &[("worker", "0"), ("state", "busy")],
    );
    let idle = sample(
        &m,
        "ferrouter_worker_polls_total",
        &[("worker", "0"), ("state", "idle")],
    );
    assert!(busy >= 1.0 && idle > busy, "busy {busy} idle {idle}");
    // Idle between the test's few frames, the worker slept rather than spun.
    let sleeps = sample(&m, "ferrouter_worker_sleeps_total", &[("worker", "0")]);
    assert!(sleeps >= 1.0, "sleeps {sleeps}");
    // Busy time: some, and far less than the worker has lived (it slept in between).
    let busy_ns = sample(
        &m,
        "ferrouter_worker_busy_nanoseconds_total",
        &[("worker", "0")],
    );
    assert!(busy_ns > 0.0 && busy_ns < 60e9, "busy {busy_ns} ns");
    let summary = c.get("/v1/routes/summary").unwrap();
    assert_eq!(
        sample(&m, "ferrouter_fib_routes", &[("family", "ipv4")]),
        summary["ipv4"].as_f64().unwrap()
    );
    assert!(sample(&m, "ferrouter_fib_memory_bytes", &[]) > 0.0);
    assert!(sample(&m, "ferrouter_neighbors", &[]) >= 1.0);
    assert!(sample(&m, "ferrouter_route_sync_events_total", &[]) >= 1.0);
    assert!(sample(&m, "ferrouter_route_sync_lag_seconds_max", &[]) > 0.0);
    assert_eq!(
        sample(
            &m,
            "ferrouter_kernel_forwarded_packets_total",
            &[("family", "ipv4")]
        ),
        0.0
    );
    assert_eq!(sample(&m, "ferrouter_build_info", &[]), 1.0);
}

/// `ferrouter COMMAND ARGS... --socket SOCKET` against the lab's router: (success,
/// stdout + stderr).
fn cli(lab: &Lab, command: &str, args: &[&str]) -> (bool, String) {
    let sock = lab.socket();
    let mut a: Vec<&str> = vec![command];
    a.extend_from_slice(args);
    a.extend_from_slice(&["--socket", sock.to_str().unwrap()]);
    let out = Command::new(bin()).args(&a).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// `ferrouter config ...` against the lab's router.
fn config_cli(lab: &Lab, args: &[&str]) -> (bool, String) {
    cli(lab, "config", args)
}

/// What the router namespace's kernel holds that a config can change: addresses, MTUs,
/// main-table routes and permanent neighbours (sorted, as JSON text).
fn kernel_state(lab: &Lab) -> String {
    let mut parts = Vec::new();
    for args in [
        &["-j", "addr", "show"][..],
        &["-j", "route", "show", "table", "main"][..],
        &["-j", "-6", "route", "show", "table", "main"][..],
        &["-j", "neigh", "show", "nud", "permanent"][..],
    ] {
        let mut a = vec!["ip"];
        a.extend_from_slice(args);
        let (ok, out) = sh(lab, &lab.rtr(), &a);
        assert!(ok, "{a:?}: {out}");
        let v: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
        // Counters and lifetimes change by themselves; keep what a config decides.
        let mut items: Vec<String> = v
            .as_array()
            .into_iter()
            .flatten()
            .map(|o| {
                let mut o = o.clone();
                if let Some(m) = o.as_object_mut() {
                    for k in ["stats64", "operstate", "linkmode", "flags", "xdp"] {
                        m.remove(k);
                    }
                    if let Some(Value::Array(ai)) = m.get_mut("addr_info") {
                        // Link-local addresses come and go with DAD on their own.
                        ai.retain(|a| a["scope"] != "link");
                        for a in ai {
                            if let Some(am) = a.as_object_mut() {
                                am.remove("valid_life_time");
                                am.remove("preferred_life_time");
                            }
                        }
                    }
                }
                o.to_string()
            })
            .collect();
        items.sort();
        parts.push(items.join("\n"));
    }
    parts.join("\n--\n")
}

#[test]
fn config_check_apply_diff_rollback_and_restart() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let g = start("c", "");
    let lab = &g.0;
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(lab.config_file()).unwrap();
    let extra = "
[[interface]]
name = \"r1\"
mtu = 1400
addresses = [\"10.77.0.1/24\", \"2001:db8:77::1/64\"]

[[route]]
prefix = \"10.99.0.0/16\"
via = [\"198.51.100.2\"]

[[route]]
prefix = \"2001:db8:99::/48\"
via = [\"2001:db8:2::2\"]

[[route]]
prefix = \"10.66.0.0/16\"
blackhole = true

[[neighbor]]
interface = \"r2\"
ip = \"198.51.100.9\"
mac = \"02:00:00:00:00:09\"
";
    let good = dir.path().join("good.toml");
    std::fs::write(&good, format!("{base}{extra}")).unwrap();

    // Every kind of bad config is refused with its location and what is expected, by
    // `config check` (here) and by `config apply` (the daemon), and nothing changes.
    let before = kernel_state(lab);
    let bad = [
        ("[[route]]\nprefix = \"10.1.0.0/16\"\nvia = [\"198.51.100.2\"]\ninterface = \"nosuch0\"\n", "nosuch0"),
        (
            "[[interface]]\nname = \"r1\"\naddresses = [\"10.5.0.1/16\"]\n[[interface]]\nname = \"r2\"\naddresses = [\"10.5.7.1/24\"]\n",
            "overlaps",
        ),
        ("[[route]]\nprefix = \"10.1.0.1/16\"\nblackhole = true\n", "did you mean 10.1.0.0/16"),
        ("[[route]]\nprefix = \"10.1.0.0/33\"\nblackhole = true\n", "10.1.0.0/33"),
        ("[[interface]]\nname = \"r1\"\nmtu = 1400\nmtu = 1500\n", "duplicate key"),
        ("[[interface]]\nname = \"r1\"\nmtu = 70000\n", "out of range"),
        // More than the port carries (jumbo frames: 9000): refused, not a silent blackhole.
        ("[[interface]]\nname = \"r1\"\nmtu = 9001\n", "larger than the 9000 bytes"),
        ("[[interface]]\nname = \"r1\"\nspeed = 10\n", "speed"),
    ];
    for (i, (body, needle)) in bad.iter().enumerate() {
        let f = dir.path().join(format!("bad{i}.toml"));
        std::fs::write(&f, format!("{base}\n{body}")).unwrap();
        let (ok, out) = config_cli(lab, &["check", f.to_str().unwrap()]);
        assert!(!ok, "{body}: {out}");
        assert!(out.contains(needle), "check {body}: {needle:?} in {out}");
        // FILE:LINE:COL of the offending value.
        let fname = f.display().to_string();
        let located = out.lines().any(|l| {
            l.split_once(&format!("{fname}:")).is_some_and(|(_, rest)| {
                let mut it = rest.split(':');
                it.next().is_some_and(|n| n.parse::<u32>().is_ok())
                    && it.next().is_some_and(|n| n.parse::<u32>().is_ok())
            })
        });
        assert!(located, "no FILE:LINE:COL in {out}");
        let (ok, out) = config_cli(lab, &["apply", f.to_str().unwrap()]);
        assert!(!ok, "{body}: {out}");
        assert!(out.contains(needle), "apply {body}: {needle:?} in {out}");
    }
    // A subnet already on another interface in the kernel (the lab put 192.0.2.1/24 on
    // r1): the check passes (the file itself is consistent), apply refuses it.
    let f = dir.path().join("kernel-overlap.toml");
    std::fs::write(
        &f,
        format!("{base}\n[[interface]]\nname = \"r2\"\naddresses = [\"192.0.2.77/24\"]\n"),
    )
    .unwrap();
    let (ok, out) = config_cli(lab, &["apply", f.to_str().unwrap()]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("overlaps 192.0.2.1/24 already on r1") && out.contains("nothing was changed"),
        "{out}"
    );
    // Changing a port needs a restart: refused, nothing changed.
    let f = dir.path().join("port.toml");
    std::fs::write(&f, base.replace("workers = 1", "workers = 2")).unwrap();
    let (ok, out) = config_cli(lab, &["apply", f.to_str().unwrap()]);
    assert!(!ok && out.contains("restart"), "{out}");
    // The HTTP API itself: malformed JSON is a 400 with a message, an invalid config a 422
    // with every problem located.
    let c = unix(lab);
    let r = c
        .call(
            "POST",
            "/v1/config/apply",
            Some(("application/json", b"{\"text\": ".to_vec())),
        )
        .unwrap();
    assert_eq!(r.status, 400, "{r:?}");
    assert!(
        r.error_message().contains("malformed request body"),
        "{r:?}"
    );
    let r = c
        .call(
            "POST",
            "/v1/config/apply",
            Some(("application/json", b"{\"txt\": \"\"}".to_vec())),
        )
        .unwrap();
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.error_message().contains("txt"), "{r:?}");
    let r = c
        .call(
            "POST",
            "/v1/config/check",
            Some((
                "application/json",
                serde_json::json!({"text": format!("{base}\n[[route]]\nprefix = \"10.1.0.1/16\"\nblackhole = true\n[[interface]]\nname = \"r1\"\nmtu = 1\n")})
                    .to_string()
                    .into_bytes(),
            )),
        )
        .unwrap();
    assert_eq!(r.status, 422, "{r:?}");
    let v = r.json().unwrap();
    let problems = v["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 2, "both problems reported: {v}");
    assert!(
        problems.iter().all(|p| p["line"].as_u64().unwrap() > 0),
        "{v}"
    );
    assert_eq!(
        kernel_state(lab),
        before,
        "a refused config changed the kernel"
    );

    // Apply: the kernel and the fast path have it. The operator's mode on the config file
    // (0640 here) survives the rewrite.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(lab.config_file(), std::fs::Permissions::from_mode(0o640))
            .unwrap();
    }
    let (ok, out) = config_cli(lab, &["check", good.to_str().unwrap()]);
    assert!(ok, "{out}");
    let (ok, out) = config_cli(
        lab,
        &[
            "apply",
            good.to_str().unwrap(),
            "--comment",
            "add lab routes",
        ],
    );
    assert!(ok, "{out}");
    assert!(out.contains("history entry"), "{out}");
    let (_, addr) = sh(lab, &lab.rtr(), &["ip", "-j", "addr", "show", "dev", "r1"]);
    assert!(
        addr.contains("10.77.0.1") && addr.contains("2001:db8:77::1"),
        "{addr}"
    );
    assert!(addr.contains("\"mtu\":1400"), "{addr}");
    let (_, nb) = sh(lab, &lab.rtr(), &["ip", "neigh", "show", "198.51.100.9"]);
    assert!(
        nb.contains("02:00:00:00:00:09") && nb.contains("PERMANENT"),
        "{nb}"
    );
    let mut fib = Value::Null;
    for _ in 0..50 {
        fib = api(lab, "routes", Some("10.99.1.1"));
        if fib["routes"][0]["prefix"] == "10.99.0.0/16" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(fib["routes"][0]["prefix"], "10.99.0.0/16", "{fib}");
    assert!(
        fib["routes"][0]["next_hop"]
            .as_str()
            .unwrap()
            .contains("198.51.100.2"),
        "{fib}"
    );
    let fib6 = api(lab, "routes", Some("2001:db8:99::1"));
    assert_eq!(fib6["routes"][0]["prefix"], "2001:db8:99::/48", "{fib6}");
    let bh = api(lab, "routes", Some("10.66.0.1"));
    assert_eq!(bh["routes"][0]["next_hop"], "drop", "{bh}");
    // The saved file is the applied one (a restart comes back with it), with its mode.
    assert_eq!(
        std::fs::read_to_string(lab.config_file()).unwrap(),
        std::fs::read_to_string(&good).unwrap()
    );
    assert_eq!(mode_of(&lab.config_file()), 0o640);
    // The history is the owner's only (the daemon runs here outside systemd, umask 022).
    let state = lab.dir.join("state");
    assert_eq!(mode_of(&state), 0o700);
    assert_eq!(mode_of(&state.join("history")), 0o700);
    assert_eq!(mode_of(&state.join("running.toml")), 0o600);
    let entries: Vec<_> = std::fs::read_dir(state.join("history"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(entries.len() >= 4, "{entries:?}");
    for e in entries {
        assert_eq!(mode_of(&e), 0o600, "{}", e.display());
    }

    // Diff from running to a candidate without the blackhole, and previous → running.
    let next = dir.path().join("next.toml");
    std::fs::write(
        &next,
        format!("{base}{extra}").replace(
            "[[route]]\nprefix = \"10.66.0.0/16\"\nblackhole = true\n",
            "",
        ),
    )
    .unwrap();
    let (ok, d) = config_cli(lab, &["diff", next.to_str().unwrap()]);
    assert!(ok, "{d}");
    assert!(
        d.contains("-prefix = \"10.66.0.0/16\"") && d.contains("-blackhole = true"),
        "{d}"
    );
    assert!(
        !d.lines()
            .any(|l| l.starts_with('+') && !l.starts_with("+++")),
        "{d}"
    );
    let (ok, out) = config_cli(lab, &["apply", next.to_str().unwrap()]);
    assert!(ok, "{out}");
    assert!(
        out.contains("10.66.0.0/16"),
        "the removed route is listed: {out}"
    );
    let (_, routes) = sh(lab, &lab.rtr(), &["ip", "route", "show", "table", "main"]);
    assert!(
        !routes.contains("10.66.0.0") && routes.contains("10.99.0.0/16"),
        "{routes}"
    );
    let (ok, d) = config_cli(lab, &["diff"]);
    assert!(ok && d.contains("-blackhole = true"), "{d}");

    // Rollback 2 goes back to the config the lab started with: the kernel is as before.
    let (ok, h) = config_cli(lab, &["history"]);
    assert!(ok && h.contains("add lab routes"), "{h}");
    let (ok, out) = config_cli(lab, &["rollback", "2"]);
    assert!(ok, "{out}");
    assert_eq!(kernel_state(lab), before, "rollback 2 restores the start");
    let (ok, out) = config_cli(lab, &["rollback", "99"]);
    assert!(!ok && out.contains("cannot roll back 99"), "{out}");

    // Rollback 1 returns to `next`; a restart keeps it (the daemon re-reads its file).
    let (ok, out) = config_cli(lab, &["rollback"]);
    assert!(ok, "{out}");
    let running = kernel_state(lab);
    assert!(running.contains("10.99.0.0/16") && !running.contains("10.66.0.0"));
    lab.stop_router();
    lab.run_router(std::path::Path::new(bin()), &lab.config_file())
        .unwrap();
    assert_eq!(kernel_state(lab), running, "the restart changed the kernel");
    let (ok, shown) = config_cli(lab, &["show"]);
    assert!(
        ok && shown.contains("10.99.0.0/16") && !shown.contains("10.66.0.0"),
        "{shown}"
    );
    let (ok, h) = config_cli(lab, &["history"]);
    let entries = h.lines().skip(1).count();
    assert!(ok && entries >= 4, "{h}");
    // The daemon forwards throughout.
    ping_ok(lab, lab::H2_V4).unwrap();
}

fn trace_nodes(t: &Value) -> Vec<String> {
    t["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["node"].as_str().unwrap().to_string())
        .collect()
}

/// Wait until the trace holds at least `n` packets (the worker hands records over
/// asynchronously).
fn traces(c: &Client, n: usize) -> Value {
    let mut v = Value::Null;
    for _ in 0..100 {
        v = c.get("/v1/trace").unwrap();
        if v["traces"].as_array().unwrap().len() >= n {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    v
}

#[test]
fn trace_shows_routed_dropped_and_punted_packets() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // AF_PACKET: the graph sees the router's own traffic too (AF_XDP passes it to Linux in
    // the XDP program), so a punt is traced.
    let g = start_with("tr", "", "af_packet");
    let lab = &g.0;
    ping_ok(lab, lab::H2_V4).unwrap();
    let c = unix(lab);
    let run = |args: &[&str]| cli(lab, "trace", args);
    // Routed: an echo request from h1 to h2.
    let (ok, out) = run(&[
        "add",
        "1",
        "--port",
        "r1",
        "--match",
        "ip4 and dst 198.51.100.2 and proto icmp",
    ]);
    assert!(ok, "{out}");
    ping_ok(lab, lab::H2_V4).unwrap();
    let v = traces(&c, 1);
    let t = &v["traces"][0];
    assert_eq!(
        trace_nodes(t),
        [
            "ethernet-input",
            "ip4-input",
            "ip4-lookup",
            "ip4-rewrite",
            "port-tx"
        ],
        "{v}"
    );
    assert!(
        t["summary"].as_str().unwrap().contains("198.51.100.2"),
        "{t}"
    );
    assert_eq!(t["port_name"], "r1");
    let (ok, text) = run(&["show"]);
    assert!(
        ok && text.contains("ip4-rewrite") && text.contains("port-tx"),
        "{text}"
    );
    let (ok, _) = run(&["clear"]);
    assert!(ok);
    assert_eq!(
        c.get("/v1/trace").unwrap()["traces"]
            .as_array()
            .unwrap()
            .len(),
        0
    );

    // Dropped: no route to 203.0.113.99 (the drop is counted and an ICMP error goes back).
    run(&["add", "1", "--match", "dst 203.0.113.99"]);
    let _ = common::ping1(lab, "203.0.113.99");
    let v = traces(&c, 1);
    let t = &v["traces"][0];
    let nodes = trace_nodes(t);
    assert_eq!(
        &nodes[..3],
        ["ethernet-input", "ip4-input", "ip4-lookup"],
        "{v}"
    );
    let text = serde_json::to_string(&t["steps"]).unwrap();
    assert!(
        text.contains("Ip4NoRoute") || text.contains("no route"),
        "{v}"
    );
    assert!(nodes.contains(&"icmp4-error".to_string()), "{v}");
    run(&["clear"]);

    // Punted: a ping to the router's own address goes to Linux.
    run(&["add", "1", "--match", "dst 192.0.2.1 and proto icmp"]);
    let _ = common::ping1(lab, "192.0.2.1");
    let v = traces(&c, 1);
    let t = &v["traces"][0];
    assert_eq!(
        trace_nodes(t),
        ["ethernet-input", "ip4-input", "punt"],
        "{v}"
    );
    assert!(
        serde_json::to_string(t).unwrap().contains("PuntLocal"),
        "{t}"
    );

    // Bad requests name what is wrong.
    let (ok, out) = run(&["add", "1", "--match", "dst 10.0.0.0/40"]);
    assert!(!ok && out.contains("10.0.0.0/40"), "{out}");
    let (ok, out) = run(&["add", "1", "--port", "nosuch"]);
    assert!(!ok && out.contains("nosuch"), "{out}");
    let (ok, out) = run(&["add", "1", "--match", "ip4 or ip6"]);
    assert!(!ok && out.contains("or"), "{out}");
}

#[test]
fn capture_writes_pcap_that_tshark_reads() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let g = start("cp", "");
    let lab = &g.0;
    ping_ok(lab, lab::H2_V4).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r1.pcap");
    let sock = lab.socket();
    // Capture 10 frames on r1 in both directions while h1 pings h2 five times: five
    // requests in, five replies out.
    let cap = {
        let file = file.clone();
        let sock = sock.clone();
        std::thread::spawn(move || {
            Command::new(bin())
                .args(["capture", "r1", "--count", "10", "--timeout", "20", "-w"])
                .arg(&file)
                .arg("--socket")
                .arg(&sock)
                .output()
                .unwrap()
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (ok, out) = sh(
        lab,
        &lab.h1(),
        &["ping", "-c", "5", "-i", "0.2", "-W", "2", lab::H2_V4],
    );
    assert!(ok, "{out}");
    let out = cap.join().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("10 frame(s)"),
        "{out:?}"
    );
    let t = Command::new("tshark")
        .args(["-r"])
        .arg(&file)
        .args(["-T", "fields", "-e", "icmp.type", "-e", "ip.dst"])
        .output()
        .expect("tshark (Debian package tshark)");
    assert!(t.status.success(), "{t:?}");
    let text = String::from_utf8_lossy(&t.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 10, "tshark read: {text}");
    let requests = lines
        .iter()
        .filter(|l| l.starts_with("8\t") && l.ends_with(lab::H2_V4))
        .count();
    let replies = lines.iter().filter(|l| l.starts_with("0\t")).count();
    assert_eq!((requests, replies), (5, 5), "{text}");
    // Forwarding was not disturbed, and a second capture with a bad port is refused.
    ping_ok(lab, lab::H2_V4).unwrap();
    let out = Command::new(bin())
        .args(["capture", "nosuch", "-w", "/dev/null", "--socket"])
        .arg(&sock)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nosuch"),
        "{out:?}"
    );
}

#[test]
fn systemd_unit_verifies_and_the_daemon_notifies_ready() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // The unit as shipped, pointing at the binary under test.
    let dir = tempfile::tempdir().unwrap();
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/dist/ferrouter.service"
    ))
    .unwrap()
    .replace("/usr/local/bin/ferrouter", bin());
    let path = dir.path().join("ferrouter.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze (Debian package systemd)");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify: {out:?}"
    );
    // Type=notify: READY=1 arrives on NOTIFY_SOCKET once the daemon forwards.
    let sock_path = dir.path().join("notify");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    // SAFETY: the tests of this binary run one at a time (SERIAL); only the daemon this
    // test starts reads the variable.
    unsafe { std::env::set_var("NOTIFY_SOCKET", &sock_path) };
    let g = start("sd", "");
    unsafe { std::env::remove_var("NOTIFY_SOCKET") };
    let mut buf = [0u8; 256];
    let n = sock.recv(&mut buf).expect("no READY=1 from the daemon");
    assert_eq!(String::from_utf8_lossy(&buf[..n]).trim(), "READY=1");
    g.0.stop_router();
    let n = sock.recv(&mut buf).expect("no STOPPING=1 from the daemon");
    assert_eq!(String::from_utf8_lossy(&buf[..n]).trim(), "STOPPING=1");
}

/// Schemathesis (PyPI) generates requests from the daemon's own OpenAPI document, valid and
/// invalid, over TCP with the token: no answer may be a server error, every status and
/// content type must be documented, every body must validate against its documented schema
/// (`response_schema_conformance`: a field of the wrong type fails the run), and the router
/// keeps forwarding. (Capture is left out: a request blocks until its timeout. Rejecting a
/// schema-valid but semantically invalid config is expected, so that check is off.)
#[test]
fn api_fuzzed_from_its_openapi_document() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    write_token(&token_file, TOKEN);
    let g = start(
        "f",
        &format!(
            "[api]\nlisten = \"192.0.2.1:{PORT}\"\ntoken_file = \"{}\"\n",
            token_file.display()
        ),
    );
    let lab = &g.0;
    let auth = format!("Authorization: Bearer {TOKEN}");
    let url = format!("http://192.0.2.1:{PORT}/openapi.json");
    let (ok, out) = sh(
        lab,
        &lab.h1(),
        &[
            "python3",
            "-m",
            "schemathesis.cli",
            "run",
            &url,
            "-H",
            &auth,
            "--exclude-path",
            "/v1/capture",
            // Every check (schemathesis' default too), among them
            // response_schema_conformance and content_type_conformance.
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance",
            "--max-examples",
            "25",
            "--seed",
            "1",
            "--request-timeout",
            "20",
            "--no-color",
        ],
    );
    assert!(ok, "schemathesis found problems:\n{out}");
    assert!(out.contains("Tested:"), "{out}");
    ping_ok(lab, lab::H2_V4).unwrap();
    assert_eq!(
        unix(lab)
            .get("/v1/interfaces")
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

/// `n` TCP connections from `src` (an address of h1) to the router's API, one after the
/// other.
fn connect_from(lab: &Lab, src: &str, n: usize) -> Vec<std::net::TcpStream> {
    let src: std::net::SocketAddr = format!("{src}:0").parse().unwrap();
    let dst: std::net::SocketAddr = format!("{}:{PORT}", lab::R1_V4).parse().unwrap();
    in_netns(&lab.h1(), move || {
        (0..n)
            .map(|_| {
                let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
                    .unwrap();
                s.bind(&src.into()).unwrap();
                s.connect_timeout(&dst.into(), std::time::Duration::from_secs(5))
                    .unwrap_or_else(|e| panic!("connecting from {src} to {dst}: {e}"));
                s.set_nonblocking(true).unwrap();
                s.into()
            })
            .collect()
    })
}

/// Whether the daemon still holds the connection open (closed: EOF or reset).
fn is_open(s: &std::net::TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(s.peek(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// Which of `conns` are open, once the daemon has closed `closed` of them (or 10 s passed).
fn settle(conns: &[std::net::TcpStream], closed: usize) -> Vec<bool> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let open: Vec<bool> = conns.iter().map(is_open).collect();
        if open.iter().filter(|o| !**o).count() >= closed || std::time::Instant::now() > deadline {
            return open;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The API's connection metrics: {name{labels}: value} for the `ferrouter_api_` samples.
fn api_metrics(c: &Client) -> std::collections::BTreeMap<String, f64> {
    let r = c.call("GET", "/metrics", None).unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    let m = parse_metrics(std::str::from_utf8(&r.body).unwrap());
    let mut out = std::collections::BTreeMap::new();
    for (name, samples) in m.as_object().unwrap() {
        if !name.starts_with("ferrouter_api_") {
            continue;
        }
        for s in samples.as_array().unwrap() {
            let labels = s[0].as_object().unwrap();
            let mut keys: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
                .collect();
            keys.sort();
            out.insert(
                format!("{name}{{{}}}", keys.join(",")),
                s[1].as_f64().unwrap(),
            );
        }
    }
    out
}

fn metric(m: &std::collections::BTreeMap<String, f64>, key: &str) -> f64 {
    *m.get(key)
        .unwrap_or_else(|| panic!("{key} missing from {m:#?}"))
}

/// Hostile clients on TCP (issue 24): connections over the caps (here 6 in all, 4 per
/// address) are closed at once and counted; the unix socket, the CLI and `config apply`
/// answer meanwhile; idle connections are closed after `idle_timeout_s`, and a request head
/// sent a byte at a time after `header_read_timeout_s`.
#[test]
fn connections_over_the_caps_are_closed_and_the_unix_socket_still_answers() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const IDLE_S: u64 = 10;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    write_token(&token_file, TOKEN);
    let g = start(
        "cc",
        &format!(
            "[api]\nlisten = \"{}:{PORT}\"\ntoken_file = \"{}\"\nmax_connections = 6\nmax_connections_per_address = 4\nheader_read_timeout_s = 2\nidle_timeout_s = {IDLE_S}\n",
            lab::R1_V4,
            token_file.display()
        ),
    );
    let lab = &g.0;
    // Three client addresses on h1.
    for a in ["192.0.2.3/24", "192.0.2.4/24"] {
        let (ok, out) = sh(lab, &lab.h1(), &["ip", "addr", "add", a, "dev", "eth0"]);
        assert!(ok, "{out}");
    }
    let c = Client {
        timeout: std::time::Duration::from_secs(10),
        ..unix(lab)
    };
    let url = format!("http://{}:{PORT}/v1/version", lab::R1_V4);
    let auth = format!("Authorization: Bearer {TOKEN}");

    // A: 10 connections; 4 are served, 6 closed at once (per-address cap).
    let t0 = std::time::Instant::now();
    let a = connect_from(lab, lab::H1_V4, 10);
    let open = settle(&a, 6);
    assert_eq!(
        open,
        [&[true; 4][..], &[false; 6]].concat(),
        "from {}",
        lab::H1_V4
    );
    // B is not held back by A's cap.
    let (status, body) = curl(lab, &["--interface", "192.0.2.3", "-H", &auth, &url]);
    assert_eq!(status, 200, "{body}");
    // Once curl's connection is gone, 4 are open; B's 10 get the 2 left of the total.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while metric(&api_metrics(&c), "ferrouter_api_connections{listener=tcp}") != 4.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{:#?}",
            api_metrics(&c)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let b = connect_from(lab, "192.0.2.3", 10);
    let open = settle(&b, 8);
    assert_eq!(
        open,
        [&[true; 2][..], &[false; 8]].concat(),
        "from 192.0.2.3"
    );

    // TCP is full: a third client is turned away at once...
    let other = connect_from(lab, "192.0.2.4", 1);
    assert_eq!(settle(&other, 1), [false]);
    // ...while the unix socket, the CLI and a config apply answer.
    let v = c.get("/v1/interfaces").unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2, "{v}");
    let (ok, out) = cli(lab, "show", &["interfaces"]);
    assert!(ok && out.contains("r1"), "{out}");
    let cand = dir.path().join("cand.toml");
    let base = std::fs::read_to_string(lab.config_file()).unwrap();
    std::fs::write(
        &cand,
        format!("{base}\n[[route]]\nprefix = \"10.88.0.0/16\"\nblackhole = true\n"),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let (ok, out) = config_cli(lab, &["apply", cand.to_str().unwrap()]);
    assert!(ok && out.contains("history entry"), "{out}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "config apply took {:?}",
        started.elapsed()
    );
    let (_, routes) = sh(lab, &lab.rtr(), &["ip", "route", "show", "10.88.0.0/16"]);
    assert!(routes.contains("blackhole"), "{routes}");
    // All along, the 6 served connections were held: the caps were full.
    assert!(
        a[..4].iter().chain(&b[..2]).all(is_open),
        "a held connection closed early ({:?} after it opened)",
        t0.elapsed()
    );
    let m = api_metrics(&c);
    assert_eq!(metric(&m, "ferrouter_api_connections{listener=tcp}"), 6.0);
    assert_eq!(
        metric(
            &m,
            "ferrouter_api_connections_refused_total{limit=per_address,listener=tcp}"
        ),
        6.0
    );
    assert_eq!(
        metric(
            &m,
            "ferrouter_api_connections_refused_total{limit=total,listener=tcp}"
        ),
        9.0
    );
    assert_eq!(
        metric(&m, "ferrouter_api_connections_accepted_total{listener=tcp}"),
        7.0
    );
    // The refusals are reported, and not once per connection.
    let log = std::fs::read_to_string(lab.log_file()).unwrap();
    let reports = log.matches("over the limit since the last report").count();
    assert!((1..=3).contains(&reports), "{reports} reports in:\n{log}");

    // A request head sent a byte at a time on the unix socket: closed 2 s after its first
    // byte (api.header_read_timeout_s), however much it keeps sending.
    {
        use std::io::Write;
        let mut s = std::os::unix::net::UnixStream::connect(lab.socket()).unwrap();
        let head_started = std::time::Instant::now();
        let mut cut = false;
        for b in
            b"GET /v1/version HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".iter()
        {
            if s.write_all(&[*b]).is_err() {
                cut = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        assert!(
            cut,
            "still open {:?} into a slow head",
            head_started.elapsed()
        );
        assert!(
            head_started.elapsed() >= std::time::Duration::from_millis(1500),
            "cut {:?} after its first byte",
            head_started.elapsed()
        );
    }

    // Idle: the held connections are closed after idle_timeout_s, then TCP serves again.
    let held: Vec<&std::net::TcpStream> = a[..4].iter().chain(&b[..2]).collect();
    let deadline = t0 + std::time::Duration::from_secs(IDLE_S + 20);
    while held.iter().any(|s| is_open(s)) {
        assert!(
            std::time::Instant::now() < deadline,
            "idle connections still open {:?} after they were opened",
            t0.elapsed()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        t0.elapsed() >= std::time::Duration::from_secs(IDLE_S - 1),
        "idle connections closed after {:?}, before idle_timeout_s = {IDLE_S}",
        t0.elapsed()
    );
    let m = api_metrics(&c);
    assert_eq!(
        metric(&m, "ferrouter_api_timeouts_total{listener=tcp,phase=idle}"),
        6.0
    );
    assert_eq!(
        metric(
            &m,
            "ferrouter_api_timeouts_total{listener=unix,phase=header}"
        ),
        1.0
    );
    let (status, body) = curl(lab, &["-H", &auth, &url]);
    assert_eq!(status, 200, "{body}");
    ping_ok(lab, lab::H2_V4).unwrap();
}

/// The token file must be its owner's only: with mode 0644 the daemon refuses to start and
/// says why (in a network namespace of its own, which vanishes with it).
#[test]
fn a_token_file_others_may_read_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("api.token");
    std::fs::write(&token_file, TOKEN).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let cfg = dir.path().join("ferrouter.toml");
    std::fs::write(
        &cfg,
        format!(
            "control_socket = \"{}\"\nstate_dir = \"{}\"\n[api]\nlisten = \"127.0.0.1:{PORT}\"\ntoken_file = \"{}\"\n[[port]]\nname = \"nosuch0\"\n",
            dir.path().join("sock").display(),
            dir.path().join("state").display(),
            token_file.display()
        ),
    )
    .unwrap();
    let out = Command::new("unshare")
        .args(["--net", bin(), "run", "--config"])
        .arg(&cfg)
        .output()
        .expect("unshare (Debian package util-linux)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "api.token_file {} has mode 0644",
            token_file.display()
        )) && err.contains("chmod 600"),
        "{err}"
    );
    // It stopped there: nothing was created.
    assert!(!dir.path().join("state").exists() && !dir.path().join("sock").exists());
}
