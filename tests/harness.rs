//! The test harness end to end: `ferrouter-lab bench rfc2544` against real DUTs (ferrouter in
//! a namespace over veth/AF_XDP and over memif, Linux, dpdk-testpmd over memif), and a
//! ferrouter memif port's kernel face (ARP and ping answered by Linux through the TAP).
//!
//! Short runs at low rates: these check that the harness measures real traffic through
//! real DUTs and reports it in the promised shape, not how fast anything is.

mod common;

use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use dataplane::worker::Port;
use dataplane::{Arena, PacketMemory, Vector};
use serde_json::Value;

static SERIAL: Mutex<()> = Mutex::new(());

fn bench(name: &str, args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("chart.svg");
    let out = Command::new(common::lab_bin())
        .args(["bench", "rfc2544", "--name", name, "--json", "--chart"])
        .arg(&chart)
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed: {stderr}");
    assert!(
        stderr.contains("ETA"),
        "progress with an ETA expected: {stderr}"
    );
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("Mpps"),
        "chart: {svg:.200}"
    );
    // The topology is gone afterwards.
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&ns.stdout).contains(&format!("{name}-")),
        "namespaces left behind"
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("JSON: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// Every run has the documented fields, the tester's frames crossed the DUT, and at a low
/// load nothing was lost.
fn check_runs(v: &Value, expect: &[(&str, &str)]) {
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), expect.len(), "{v:#}");
    for (r, (dut, transport)) in runs.iter().zip(expect) {
        assert_eq!(r["dut"], *dut, "{r:#}");
        assert_eq!(r["transport"], *transport);
        assert_eq!(r["profile"], "ipv4-64");
        for k in ["throughput_mpps", "throughput_gbps_l1"] {
            assert!(r[k].as_f64().is_some_and(|x| x >= 0.0), "{k}: {r:#}");
        }
        let low = r["loss_at_load"]["5"].as_f64().expect("loss at 5 %");
        assert!(
            low < 1.0,
            "{dut}/{transport} lost {low}% at 5% of a 0.1 Gbit/s line: {r:#}"
        );
        // NDR (= throughput) and PDR, with the trials behind them.
        assert_eq!(r["ndr_mpps"], r["throughput_mpps"], "{r:#}");
        assert!(r["pdr_mpps"].as_f64().is_some_and(|x| x >= 0.0), "{r:#}");
        assert!(r["underruns"].as_u64().is_some(), "{r:#}");
        let trials = r["trials"].as_array().expect("trials");
        assert_eq!(Some(trials.len() as u64), r["trial_count"].as_u64());
        assert!(
            trials
                .iter()
                .any(|t| t["phase"] == "search" && t["goal"] == "ndr"),
            "{r:#}"
        );
        let loads = r["loads"].as_array().unwrap();
        assert!(
            loads.iter().all(|l| l["rx_mpps"].as_f64().unwrap() > 0.0),
            "no traffic crossed {dut}: {r:#}"
        );
        if r["throughput_mpps"].as_f64().unwrap() > 0.0 {
            let lat = &r["latency_us"];
            let (min, avg, max, p99) = (
                lat["min"].as_f64().unwrap(),
                lat["avg"].as_f64().unwrap(),
                lat["max"].as_f64().unwrap(),
                lat["p99"].as_f64().unwrap(),
            );
            assert!(
                min > 0.0 && min <= avg && avg <= max && p99 <= max,
                "latency {lat}"
            );
        }
    }
}

const SHORT: &[&str] = &[
    "--routes4",
    "2000",
    "--routes6",
    "200",
    "--flows",
    "64",
    "--duration",
    "0.5",
    "--drain",
    "0.3",
    "--line-rate",
    "0.1",
    "--resolution",
    "5",
    "--max-trials",
    "3",
    "--loads",
    "5,50",
];

#[test]
fn rfc2544_short_run_against_ferrouter_and_linux_over_veth() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let name = format!("hv{}", std::process::id() % 10000);
    let v = bench(
        &name,
        &[&["--dut", "ferrouter,linux", "--transport", "veth"], SHORT].concat(),
    );
    check_runs(&v, &[("linux", "veth"), ("ferrouter", "veth")]);
    assert_eq!(v["runs"][1]["routes4"], 2000);
}

#[test]
fn rfc2544_short_bidirectional_run_against_testpmd_and_ferrouter_over_memif() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let name = format!("hm{}", std::process::id() % 10000);
    let v = bench(
        &name,
        &[
            // Both directions at once: the routes are split between the two sides.
            &[
                "--dut",
                "testpmd,ferrouter",
                "--transport",
                "memif",
                "--bidirectional",
            ],
            SHORT,
        ]
        .concat(),
    );
    check_runs(&v, &[("testpmd", "memif"), ("ferrouter", "memif")]);
    for r in v["runs"].as_array().unwrap() {
        assert_eq!(r["pattern"], "1pp - bi");
        // Both DUTs' own CPU cost at the fixed load: testpmd's busy cycles, ferrouter's
        // busy worker time, each over the packets it received.
        let ns = r["cost"]["ns_per_packet"].as_f64();
        assert!(ns.is_some_and(|n| n > 0.0 && n < 1e6), "cost: {r:#}");
    }
}

#[test]
fn bad_bench_arguments_are_refused_clearly() {
    for (args, want) in [
        (&["--dut", "cisco"][..], "unknown DUT"),
        (&["--transport", "carrier-pigeon"][..], "unknown transport"),
        (
            &["--dut", "testpmd", "--transport", "veth"][..],
            "does not run on",
        ),
        (&["--profile", "ipv4-12"][..], "ipv4-12"),
        (&["--duration", "0"][..], "--duration"),
        (&["--loads", "150"][..], "--loads"),
    ] {
        let out = Command::new(common::lab_bin())
            .args(["bench", "rfc2544", "--name", "hbad"])
            .args(args)
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && e.contains(want), "{args:?}: {e}");
    }
}

// ---- a memif port's kernel face ----

struct Proc(std::process::Child, String);

impl Drop for Proc {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.0.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = Command::new("ip").args(["netns", "del", &self.1]).status();
    }
}

const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x99];
const ROUTER_MAC: [u8; 6] = [2, 0xfe, 0, 0, 0, 1];

fn arp_request() -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&PEER_MAC);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&PEER_MAC);
    f.extend_from_slice(&[192, 0, 2, 2]);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&[192, 0, 2, 1]);
    f.resize(60, 0);
    f
}

fn echo_request(id: u16) -> Vec<u8> {
    let mut f = ROUTER_MAC.to_vec();
    f.extend_from_slice(&PEER_MAC);
    f.extend_from_slice(&[0x08, 0x00]);
    let mut ip = vec![
        0x45,
        0,
        0,
        28 + 8,
        0,
        1,
        0x40,
        0,
        64,
        1,
        0,
        0,
        192,
        0,
        2,
        2,
        192,
        0,
        2,
        1,
    ];
    ip[2..4].copy_from_slice(&(20u16 + 8 + 8).to_be_bytes());
    let c = wire::checksum::checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut icmp = vec![8, 0, 0, 0];
    icmp.extend_from_slice(&id.to_be_bytes());
    icmp.extend_from_slice(&[0, 1]);
    icmp.extend_from_slice(b"ferroutr");
    let c = wire::checksum::checksum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&icmp);
    f
}

/// Send `frame` until a received frame satisfies `want` (bounded by a deadline).
fn exchange(
    m: &mut ports::memif::Memif,
    mem: &mut Arena,
    frame: &[u8],
    want: impl Fn(&[u8]) -> bool,
) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut v = Vector::default();
    while Instant::now() < deadline {
        let p = mem.load(frame, 0).unwrap();
        m.tx_burst(mem, &[p]);
        let until = Instant::now() + Duration::from_millis(200);
        while Instant::now() < until {
            v.len = 0;
            m.rx_burst(mem, &mut v);
            let mut found = None;
            for p in v.as_slice() {
                let d = mem.data(p).to_vec();
                mem.free(p.buf);
                if found.is_none() && want(&d) {
                    found = Some(d);
                }
            }
            if let Some(d) = found {
                return d;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    panic!("no answer to {frame:02x?}");
}

#[test]
fn memif_port_answers_arp_and_ping_through_its_tap() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tag = std::process::id() % 10000;
    let ns = format!("hk{tag}");
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("m.sock");
    let ctl = dir.path().join("ctl.sock");
    let cfg = dir.path().join("f.toml");
    std::fs::write(
        &cfg,
        format!(
            "control_socket = \"{}\"\nstate_dir = \"{}\"\n[[port]]\nname = \"mif0\"\nbackend = \"memif\"\nmemif_socket = \"{}\"\nmac = \"02:fe:00:00:00:01\"\n",
            ctl.display(),
            dir.path().join("state").display(),
            sock.display()
        ),
    )
    .unwrap();
    let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    assert!(Command::new("ip")
        .args(["netns", "add", &ns])
        .status()
        .unwrap()
        .success());
    let child = Command::new("ip")
        .args(["netns", "exec", &ns, common::bin(), "run", "--config"])
        .arg(&cfg)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _p = Proc(child, ns.clone());
    let t = Instant::now();
    while control::api::request_json(&ctl, "interfaces", None).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "ferrouter did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The TAP is the port's face in Linux: configure it like any interface.
    let ok = |a: &[&str]| {
        assert!(
            Command::new("ip")
                .args(["-n", &ns])
                .args(a)
                .status()
                .unwrap()
                .success(),
            "{a:?}"
        )
    };
    ok(&["addr", "add", "192.0.2.1/24", "dev", "mif0"]);
    let ifs = control::api::request_json(&ctl, "interfaces", None).unwrap();
    assert_eq!(ifs[0]["name"], "mif0");
    assert!(
        ifs[0]["backend"]
            .as_str()
            .unwrap()
            .starts_with("memif (server"),
        "{ifs}"
    );
    assert_eq!(ifs[0]["mac"], "02:fe:00:00:00:01");

    let mut m = ports::memif::Memif::open(
        0,
        ports::memif::MemifOptions {
            socket: sock.clone(),
            role: ports::memif::MemifRole::Client,
            name: "test".into(),
            ..Default::default()
        },
    )
    .unwrap();
    m.wait_connected(Duration::from_secs(10)).unwrap();
    let mut mem = Arena::new(1024);
    // ARP: Linux answers for its address on the TAP; the reply comes back over memif.
    let reply = exchange(&mut m, &mut mem, &arp_request(), |d| {
        d.len() >= 42 && d[12..14] == [8, 6] && d[20..22] == [0, 2]
    });
    assert_eq!(&reply[0..6], &PEER_MAC);
    assert_eq!(&reply[22..28], &ROUTER_MAC, "sender MAC is the port's");
    assert_eq!(&reply[28..32], &[192, 0, 2, 1]);
    // Ping the router's address: punted to Linux, echo reply sent back through the port.
    let reply = exchange(&mut m, &mut mem, &echo_request(0x4242), |d| {
        d.len() >= 42
            && d[12..14] == [8, 0]
            && d[23] == 1
            && d[34] == 0
            && d[38..40] == [0x42, 0x42]
    });
    assert_eq!(&reply[26..30], &[192, 0, 2, 1]);
    assert_eq!(&reply[30..34], &[192, 0, 2, 2]);
    // The fast path counted both as punts to the Linux stack.
    let c = control::api::request_json(&ctl, "counters", None).unwrap();
    let reasons = c["reasons"].as_array().unwrap();
    for r in ["PuntArp", "PuntLocal"] {
        assert!(reasons.iter().any(|x| x["reason"] == r), "{r} missing: {c}");
    }
}

// ---- the generator alone on a real loopback pair ----

#[test]
fn tester_accounting_is_exact_on_a_veth_loopback_pair_with_af_packet_and_af_xdp() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ns = format!("hl{}", std::process::id() % 10000);
    let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    assert!(Command::new("ip")
        .args(["netns", "add", &ns])
        .status()
        .unwrap()
        .success());
    struct Ns(String);
    impl Drop for Ns {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }
    let _ns = Ns(ns.clone());
    let ok = |a: &[&str]| {
        assert!(
            Command::new("ip")
                .args(["-n", &ns])
                .args(a)
                .status()
                .unwrap()
                .success(),
            "{a:?}"
        )
    };
    ok(&["link", "add", "va", "type", "veth", "peer", "name", "vb"]);
    ok(&["link", "set", "va", "up"]);
    ok(&["link", "set", "vb", "up"]);
    for dev in ["va", "vb"] {
        let _ = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns,
                "sysctl",
                "-qw",
                &format!("net.ipv6.conf.{dev}.disable_ipv6=1"),
            ])
            .status();
    }
    for backend in ["af_packet", "af_xdp"] {
        for profile in ["ipv4-64", "imix2"] {
            let out = Command::new(common::lab_bin())
                .args([
                    "tester",
                    "--netns",
                    &ns,
                    "--json",
                    "--rate",
                    "20000",
                    "--duration",
                    "1",
                    "--flows",
                    "100",
                ])
                .args(["--profile", profile, "--dst-mac0", "02:00:00:00:00:02"])
                .arg(format!("--port0={backend}:va"))
                .arg(format!("--port1={backend}:vb"))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{backend} {profile}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let r: Value = serde_json::from_slice(&out.stdout).unwrap();
            // 20,000 frames/s for 1 s: every slot is sent (or counted as skipped when the
            // machine preempted the tester), and every frame sent arrives once, in order.
            let (tx, skipped) = (r["tx"].as_u64().unwrap(), r["tx_skipped"].as_u64().unwrap());
            assert_eq!(tx + skipped, 20_000, "{backend} {profile}: {r}");
            assert!(tx >= 19_000, "{backend} {profile}: {r}");
            assert_eq!(r["rx"], r["tx"], "{backend} {profile}: {r}");
            assert_eq!(r["lost"], 0);
            assert_eq!(r["duplicates"], 0);
            assert_eq!(r["reordered"], 0);
            assert_eq!(r["latency"]["samples"].as_u64().unwrap(), tx, "{r}");
        }
    }
    let out = Command::new(common::lab_bin())
        .args([
            "tester",
            "--netns",
            &ns,
            "--port0",
            "dpdk:0",
            "--port1",
            "af_packet:vb",
            "--dst-mac0",
            "02:00:00:00:00:02",
        ])
        .output()
        .unwrap();
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("unknown backend")
    );
}
