//! Helpers shared by the end-to-end test binaries.
#![allow(dead_code)]

use std::process::Command;
use std::time::{Duration, Instant};

use lab::{Guard, Lab, H2_V4};
use serde_json::Value;

pub mod ike;
pub mod ipsec;

/// The binary under test: the daemon and its CLI.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ferrouter")
}

/// The test bench binary (`ferrouter-lab`: lab, bench, tester, mrt, demo). Cargo builds it
/// beside `ferrouter` (same target directory) when the workspace's tests are built.
#[allow(dead_code)]
pub fn lab_bin() -> String {
    let p = std::path::Path::new(bin()).with_file_name("ferrouter-lab");
    assert!(
        p.is_file(),
        "{} is missing: run the tests with --workspace, or build it first (cargo build -p ferrouter-lab)",
        p.display()
    );
    p.display().to_string()
}

/// A lab with a unique name, started, torn down when the guard drops.
pub fn start(tag: &str, extra_config: &str) -> Guard {
    start_with(tag, extra_config, "auto")
}

/// A lab whose ports use `backend` ("auto" picks AF_XDP on veth).
pub fn start_with(tag: &str, extra_config: &str, backend: &str) -> Guard {
    let mut lab = Lab::new(&format!("t{}{}", std::process::id() % 10000, tag));
    lab.extra_config = extra_config.to_string();
    lab.backend = backend.to_string();
    lab.down();
    lab.up(std::path::Path::new(bin()))
        .unwrap_or_else(|e| panic!("lab up: {e:#}"));
    Guard(lab)
}

/// One control-API request that must succeed.
pub fn api(lab: &Lab, what: &str, arg: Option<&str>) -> Value {
    control::api::request_json(&lab.socket(), what, arg)
        .unwrap_or_else(|e| panic!("show {what}: {e:#}"))
}

/// Run in a namespace: (success, stdout + stderr).
pub fn sh(lab: &Lab, ns: &str, args: &[&str]) -> (bool, String) {
    let out = lab.exec_status(ns, args).unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Packets the kernel forwarded in the router namespace (IPv4, IPv6).
pub fn kernel_forwarded(lab: &Lab) -> (u64, u64) {
    let c = api(lab, "counters", None);
    (
        c["kernel_forwarded"]["ipv4"].as_u64().unwrap(),
        c["kernel_forwarded"]["ipv6"].as_u64().unwrap(),
    )
}

/// Packets the fast path forwarded.
pub fn forwarded(lab: &Lab) -> u64 {
    api(lab, "counters", None)["forwarded"].as_u64().unwrap()
}

/// Start a lab built by the caller (e.g. with h3), torn down when the guard drops.
pub fn start_lab(lab: Lab) -> Guard {
    lab.down();
    lab.up(std::path::Path::new(bin()))
        .unwrap_or_else(|e| panic!("lab up: {e:#}"));
    Guard(lab)
}

/// Run `ferrouter` with `args` (a `bench ... --json` command): its stderr is printed, it
/// must succeed, and its stdout is the JSON returned.
pub fn bench_json(args: &[&str]) -> Value {
    let out = std::process::Command::new(lab_bin())
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    assert!(out.status.success(), "{stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// Runs `ferrouter-lab bench convergence --protocol PROTOCOL --speaker SPEAKER --routes ROUTES
/// --dut ferrouter,linux --json` in namespaces named `NETNS_PREFIX-*` and checks what both
/// of its runs report: the JSON contract, every phase converged with its kernel times in
/// order and the CPU its processes used, no loss after convergence, two verification
/// passes, ferrouter's FIB memory, and no namespace left behind. No timing limits: the
/// machine is shared.
#[allow(dead_code)] // not every test binary uses every helper
pub fn check_bench_convergence(protocol: &str, speaker: &str, routes: u64, netns_prefix: &str) {
    let routes_s = routes.to_string();
    let v = bench_json(&[
        "bench",
        "convergence",
        "--protocol",
        protocol,
        "--speaker",
        speaker,
        "--routes",
        &routes_s,
        "--dut",
        "ferrouter,linux",
        "--rate",
        "50000",
        "--timeout",
        "120",
        "--json",
        "--netns-prefix",
        netns_prefix,
    ]);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{v}");
    for (r, dut) in runs.iter().zip(["ferrouter", "linux"]) {
        assert_eq!(r["dut"], dut, "{r}");
        assert_eq!(r["protocol"], protocol, "{r}");
        assert_eq!(r["speaker"], speaker, "{r}");
        // The tester's OSPF routers tell when the router stopped flooding them: well
        // before the 300 s limit at this scale.
        let quiet = r["quiet_wait_s"].as_f64();
        if (protocol, speaker) == ("ospf", "tester") {
            assert!(quiet.is_some_and(|q| (0.0..300.0).contains(&q)), "{r}");
        } else {
            assert!(quiet.is_none(), "{r}");
        }
        assert_eq!(r["routes"], routes, "{r}");
        assert_eq!(r["traffic_routes"], routes, "traffic to every route: {r}");
        for k in ["learn_s", "converge_s", "failover_s", "sweep_period_s"] {
            let s = r[k].as_f64().unwrap_or(f64::NAN);
            assert!(s.is_finite() && s > 0.0, "{k}: {r}");
        }
        assert_eq!(r["loss_after"], 0, "{r}");
        // Who dropped what during the verification: counted on both sides, the DUT's only
        // where it has counters (ferrouter).
        assert!(r["verify_receiver_drops"].is_u64(), "{r}");
        assert_eq!(r["verify_dut_drops"].is_u64(), dut == "ferrouter", "{r}");
        assert_eq!(r["routes_with_loss"], 0, "{r}");
        assert!(
            r["verify_tx"].as_u64().unwrap() >= 2 * routes,
            "two passes: {r}"
        );
        for (phase, total) in [
            ("learn", "learn_s"),
            ("failover", "failover_s"),
            ("failback", "converge_s"),
        ] {
            let p = &r[phase];
            let (first, done, t) = (
                p["first_kernel_change_s"].as_f64().unwrap(),
                p["kernel_done_s"].as_f64().unwrap(),
                p["total_s"].as_f64().unwrap(),
            );
            assert_eq!(p["total_s"], r[total], "{phase}: {r}");
            assert!(first <= done && done <= t + 0.001, "{phase}: {p}");
            assert!(p["after_kernel_s"].as_f64().unwrap() >= 0.0, "{phase}: {p}");
            // The measured time per traffic pass: none if fewer than two passes started in
            // the phase, otherwise no shorter than the nominal one (the sender keeps to its
            // rate; 20 ms of sampling slack).
            if !p["pass_s"].is_null() {
                let pass = p["pass_s"].as_f64().unwrap();
                let nominal = r["sweep_period_s"].as_f64().unwrap();
                assert!(pass.is_finite() && pass > nominal - 0.05, "{phase}: {p}");
            }
            // Every process of the run is accounted for, with a plausible CPU time.
            let cpu = p["cpu_s"].as_object().unwrap();
            let daemon = if protocol == "ospf" { "ospfd" } else { "bgpd" };
            let mut expected = vec!["zebra", daemon];
            if dut == "ferrouter" {
                expected.push("ferrouter");
            }
            assert_phase_cpu(phase, p, &expected);
            // The tester's routers are threads of the benchmark, not processes.
            let peers = if speaker == "tester" { 0 } else { 2 };
            assert!(
                cpu.keys().filter(|k| k.starts_with(speaker)).count() == peers,
                "{phase}: both peers' CPU: {p}"
            );
        }
    }
    let f = &runs[0];
    assert!(f["fib_memory_bytes"].as_u64().unwrap() > 0, "{f}");
    assert!(f["fib_prefixes"].as_u64().unwrap() >= routes, "{f}");
    assert!(runs[1]["fib_memory_bytes"].is_null());
    let ns = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let ns = String::from_utf8_lossy(&ns.stdout);
    assert!(!ns.contains(&format!("{netns_prefix}-")), "{ns}");
}

/// One ping from h1 to `dst` (IPv4 or IPv6): whether it was answered, and ping's output.
/// A convergence phase `p` (JSON) reports a plausible CPU time for each of `processes`: its
/// CPU was read over a window (`cpu_window_s`) from just before the phase until it was seen
/// settled, so no shorter than the phase (`total_s`), and on two cores no process can use
/// more than twice that window's wall time (plus a tick per core).
pub fn assert_phase_cpu(phase: &str, p: &Value, processes: &[&str]) {
    let t = p["total_s"].as_f64().unwrap_or(f64::NAN);
    let window = p["cpu_window_s"].as_f64().unwrap_or(f64::NAN);
    assert!(window >= t, "{phase}: {p}");
    for k in processes {
        let c = p["cpu_s"][*k].as_f64().unwrap_or(f64::NAN);
        assert!(c >= 0.0 && c <= 2.0 * window + 0.02, "{phase}: {k}: {p}");
    }
}

#[allow(dead_code)] // not every test binary uses every helper
pub fn ping1(lab: &Lab, dst: &str) -> (bool, String) {
    let mut a = vec!["ping", "-c", "1", "-W", "1"];
    if dst.contains(':') {
        a.insert(1, "-6");
    }
    a.push(dst);
    sh(lab, &lab.h1(), &a)
}

/// One reply within a few tries (the first packet may go while a next hop resolves).
#[allow(dead_code)]
pub fn ping_ok(lab: &Lab, dst: &str) -> Result<(), String> {
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

/// The count of one graph reason (by its snake-case name) in `show counters`.
pub fn reason_count(lab: &Lab, reason: &str) -> u64 {
    reason_in(&api(lab, "counters", None), reason)
}

/// The count of one graph reason in the JSON of `show counters` (0 when absent).
pub fn reason_in(counters: &Value, reason: &str) -> u64 {
    counters["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["reason"] == reason)
        .map(|r| r["count"].as_u64().unwrap())
        .sum()
}

/// A value of `/proc/net/snmp` (`Udp:`, `InCsumErrors`) or `/proc/net/snmp6`
/// (`Udp6InCsumErrors`, prefix empty) in namespace `ns`.
pub fn snmp(lab: &Lab, ns: &str, prefix: &str, field: &str) -> u64 {
    let file = if prefix.is_empty() {
        "/proc/net/snmp6"
    } else {
        "/proc/net/snmp"
    };
    let (ok, text) = sh(lab, ns, &["cat", file]);
    assert!(ok, "{text}");
    if prefix.is_empty() {
        return text
            .lines()
            .find_map(|l| {
                let mut w = l.split_whitespace();
                (w.next() == Some(field)).then(|| w.next().unwrap().parse().unwrap())
            })
            .unwrap_or_else(|| panic!("{field} not in {file}"));
    }
    let mut rows = text.lines().filter(|l| l.starts_with(prefix));
    let (names, values) = (rows.next().unwrap(), rows.next().unwrap());
    let i = names
        .split_whitespace()
        .position(|n| n == field)
        .unwrap_or_else(|| panic!("{field} not in {file}"));
    values.split_whitespace().nth(i).unwrap().parse().unwrap()
}

/// Run `f` on a thread that has entered network namespace `ns`.
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        use std::os::fd::AsRawFd;
        // SAFETY: setns on a valid namespace fd; only this (fresh) thread changes namespace.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("netns thread")
}

/// An Ethernet frame to `dst` (from 02:00:00:00:99:01) with `tags` ((TPID, TCI) each,
/// outer first) around an IPv4 UDP datagram 198.51.100.2:8000 → 192.0.2.2:7003 (checksum
/// left 0) carrying `payload`: what the VLAN and 802.1p tests send from h2.
#[allow(dead_code)]
pub fn tagged_udp4(dst: [u8; 6], tags: &[(u16, u16)], payload: &[u8]) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&[0x02, 0, 0, 0, 0x99, 0x01]);
    for (tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 1, 0, 0, 64, 17, 0, 0, 198, 51, 100, 2, 192, 0, 2, 2,
    ];
    let total = (20 + 8 + payload.len()) as u16;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let c = wire::checksum::checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0x1f, 0x40, 0x1b, 0x5b]);
    f.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

/// Send `frames`, `rounds` times over, from interface `dev` of namespace `ns` (a plain
/// AF_PACKET socket: crafted frames, tags and all).
#[allow(dead_code)]
pub fn send_frames_from(ns: &str, dev: &str, frames: Vec<Vec<u8>>, rounds: usize) {
    let dev = std::ffi::CString::new(dev).expect("an interface name without NUL");
    let ifindex = in_netns(ns, move || {
        // SAFETY: a valid NUL-terminated name; the call only reads it.
        unsafe { libc::if_nametoindex(dev.as_ptr()) }
    });
    assert!(ifindex > 0, "no such interface in {ns}");
    in_netns(ns, move || {
        for _ in 0..rounds {
            for f in &frames {
                send_raw(ifindex, f);
            }
        }
    });
}

/// Send one frame with a plain AF_PACKET socket on `ifindex` (any size up to the MTU).
pub fn send_raw(ifindex: u32, frame: &[u8]) {
    // SAFETY: plain socket calls on a socket this function owns and closes; `sll` and
    // `frame` outlive the calls that read them.
    unsafe {
        let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let mut sll: libc::sockaddr_ll = std::mem::zeroed();
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_ifindex = ifindex as i32;
        sll.sll_halen = 6;
        let n = libc::sendto(
            fd,
            frame.as_ptr() as *const libc::c_void,
            frame.len(),
            0,
            &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        );
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        assert_eq!(n, frame.len() as isize, "sendto: {err}");
    }
}

pub fn mac_of(s: &str) -> [u8; 6] {
    let v: Vec<u8> = s
        .split(':')
        .map(|x| u8::from_str_radix(x, 16).unwrap())
        .collect();
    v.try_into().unwrap()
}

/// Ping `dst` from `ns` three times (`extra` options added): (all answered, output).
pub fn ping(lab: &Lab, ns: &str, dst: &str, extra: &[&str]) -> (bool, String) {
    let mut a = vec!["ping", "-c", "3", "-i", "0.2", "-W", "2"];
    if dst.contains(':') {
        a.insert(1, "-6");
    }
    a.extend_from_slice(extra);
    a.push(dst);
    sh(lab, ns, &a)
}

/// Ping until one reply (the first packets may be dropped while the next hop resolves).
pub fn ping_until_ok(lab: &Lab, ns: &str, dst: &str) {
    for _ in 0..5 {
        if ping(lab, ns, dst, &[]).0 {
            return;
        }
    }
    panic!("{dst} unreachable from {ns}: {}", ping(lab, ns, dst, &[]).1);
}

/// Every datagram `sock` receives within `wait`.
pub fn received(sock: &std::net::UdpSocket, wait: std::time::Duration) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let end = std::time::Instant::now() + wait;
    let mut buf = [0u8; 2048];
    while std::time::Instant::now() < end {
        sock.set_read_timeout(Some(std::time::Duration::from_millis(100)))
            .unwrap();
        if let Ok(n) = sock.recv(&mut buf) {
            got.push(buf[..n].to_vec());
        }
    }
    got
}

/// `feature`'s drops under `reason` in `show counters`.
pub fn feature_drops(lab: &Lab, feature: &str, reason: &str) -> u64 {
    feature_drops_at(&lab.socket(), feature, reason)
}

/// A feature's drops under `reason`, from the router whose control socket is `socket`.
pub fn feature_drops_at(socket: &std::path::Path, feature: &str, reason: &str) -> u64 {
    let c = control::api::request_json(socket, "counters", None)
        .unwrap_or_else(|e| panic!("show counters: {e:#}"));
    c["features"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["feature"] == feature)
        .unwrap_or_else(|| panic!("{feature} not in {c}"))["drops"][reason]
        .as_u64()
        .unwrap()
}

/// curl from namespace `ns` (body discarded, `-w %{http_code}`): its exit code (0 ok, 7
/// refused, 28 timed out) and output.
pub fn curl_in(lab: &Lab, ns: &str, url: &str, max_s: u32) -> (i32, String) {
    let max = max_s.to_string();
    let args = [
        "curl",
        "-s",
        "-S",
        "-m",
        &max,
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        url,
    ];
    let out = lab.exec_status(ns, &args).unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

pub fn python(lab: &Lab, ns: &str, code: &str) -> (bool, String) {
    sh(lab, ns, &["python3", "-c", code])
}

/// A background process in `ns`, killed on drop.
pub struct Bg(pub std::process::Child);
impl Drop for Bg {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn spawn(ns: &str, args: &[&str]) -> Bg {
    Bg(Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap())
}

/// `ferrouter ARGS --socket SOCKET`: (success, stdout + stderr).
pub fn cli(lab: &Lab, args: &[&str]) -> (bool, String) {
    let out = Command::new(bin())
        .args(args)
        .arg("--socket")
        .arg(lab.socket())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Wait (bounded) for a TCP listener on `port` in `ns`.
pub fn wait_listening(lab: &Lab, ns: &str, port: u16) {
    assert!(
        bound(lab, ns, port, "-ltnH"),
        "nothing listens on {port} in {ns}"
    );
}

/// Wait (bounded: 10 s) until a socket is bound to `port` in `ns` (`ss` flags: `-ltnH` for
/// TCP listeners, `-lunH` for UDP); whether one is.
pub fn bound(lab: &Lab, ns: &str, port: u16, flags: &str) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        let (_, out) = sh(lab, ns, &["ss", flags, &format!("sport = :{port}")]);
        if !out.trim().is_empty() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Poll `f` (bounded: 5 s) until it gives something.
pub fn wait_for<T>(mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        if let Some(v) = f() {
            return Some(v);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// Apply `base` + `extra` with `ferrouter config apply`: (success, output).
pub fn apply(lab: &Lab, base: &str, extra: &str, tag: &str) -> (bool, String) {
    let f = lab
        .config_file()
        .with_file_name(format!("candidate-{tag}.toml"));
    std::fs::write(&f, format!("{base}\n{extra}")).unwrap();
    let out = Command::new(bin())
        .args(["config", "apply", f.to_str().unwrap(), "--socket"])
        .arg(lab.socket())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// An iperf3 transfer of `secs` seconds from h1 to h2's server (`Lab::iperf3_server`), in
/// the background: (success, its JSON report).
pub fn iperf3_client(lab: &Lab, secs: u32) -> std::thread::JoinHandle<(bool, String)> {
    let h1 = lab.h1();
    std::thread::spawn(move || {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &h1,
                "iperf3",
                "-c",
                H2_V4,
                "-t",
                &secs.to_string(),
                "-J",
            ])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    })
}

/// The transfer `client` ran succeeded and carried data (`what` names it).
pub fn transferred(client: std::thread::JoinHandle<(bool, String)>, what: &str) {
    let (ok, out) = client.join().unwrap();
    assert!(ok, "{what}: {out}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert!(
        j["end"]["sum_received"]["bytes"].as_u64().unwrap() > 0,
        "{what}: {out}"
    );
}

/// A TCP server in `ns` on `port` that sends each client the address it sees, then
/// closes.
pub fn peer_echo_tcp(ns: &str, port: u16) -> Bg {
    let code = format!(
        "import socket\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
         s.bind(('0.0.0.0',{port}))\ns.listen(16)\nwhile True:\n c,a=s.accept()\n c.sendall(a[0].encode())\n c.close()\n"
    );
    spawn(ns, &["python3", "-c", &code])
}

/// A UDP server in `ns` on `port` that answers each datagram with the address it came
/// from.
pub fn peer_echo_udp(ns: &str, port: u16) -> Bg {
    let code = format!(
        "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.bind(('0.0.0.0',{port}))\n\
         while True:\n d,a=s.recvfrom(100)\n s.sendto(a[0].encode(),a)\n"
    );
    spawn(ns, &["python3", "-c", &code])
}

/// From `ns`, connect to `dst:port` over TCP and return what the server sent.
pub fn tcp_peer(lab: &Lab, ns: &str, dst: &str, port: u16) -> (bool, String) {
    tcp_peer_from(lab, ns, "0.0.0.0", dst, port)
}

/// [`tcp_peer`] from source address `src`.
pub fn tcp_peer_from(lab: &Lab, ns: &str, src: &str, dst: &str, port: u16) -> (bool, String) {
    python(
        lab,
        ns,
        &format!(
            "import socket\ns=socket.create_connection(('{dst}',{port}),timeout=5,source_address=('{src}',0))\nprint(s.recv(100).decode())"
        ),
    )
}

/// From `ns`, send a UDP datagram to `dst:port` and return the answer.
pub fn udp_peer(lab: &Lab, ns: &str, dst: &str, port: u16) -> (bool, String) {
    udp_peer_from(lab, ns, "0.0.0.0", dst, port)
}

/// [`udp_peer`] from source address `src`.
pub fn udp_peer_from(lab: &Lab, ns: &str, src: &str, dst: &str, port: u16) -> (bool, String) {
    python(
        lab,
        ns,
        &format!(
            "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.bind(('{src}',0))\ns.settimeout(3)\n\
             for i in range(3):\n s.sendto(b'x',('{dst}',{port}))\n try:\n  print(s.recv(100).decode()); break\n except socket.timeout: pass\n"
        ),
    )
}

/// The value of metric line `name{labels}` (the first line starting so), from `/metrics`.
pub fn metric(lab: &Lab, prefix: &str) -> Option<f64> {
    let c = control::client::Client::new(control::client::Endpoint::Unix(lab.socket()));
    let r = c.call("GET", "/metrics", None).ok()?;
    let text = String::from_utf8_lossy(&r.body).into_owned();
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A lab of `workers` workers with `extra_config`.
pub fn start_workers(tag: &str, extra_config: &str, workers: usize) -> Guard {
    let mut lab = Lab::new(&format!("t{}{}", std::process::id() % 10000, tag));
    lab.extra_config = extra_config.to_string();
    lab.workers = workers;
    start_lab(lab)
}

/// Deletes a bench's namespaces (killing what runs in them) and its directory when
/// dropped: the benches clean up however they end, this removes what a crashed one left.
pub struct NetnsGuard {
    namespaces: Vec<String>,
    dir: std::path::PathBuf,
}

impl NetnsGuard {
    /// Guards `namespaces` and `dir`.
    pub fn new(namespaces: Vec<String>, dir: impl Into<std::path::PathBuf>) -> NetnsGuard {
        NetnsGuard {
            namespaces,
            dir: dir.into(),
        }
    }
}

impl Drop for NetnsGuard {
    fn drop(&mut self) {
        lab::remove_namespaces(&self.dir, &self.namespaces);
    }
}

/// Fails if a namespace named `PREFIX-*` is left.
pub fn assert_no_namespaces_left(prefix: &str) {
    let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(
        !list.lines().any(|l| l.starts_with(&format!("{prefix}-"))),
        "namespaces left behind: {list}"
    );
}
