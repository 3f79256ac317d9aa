//! QoS classifier rules and 802.1p end to end, in the VLAN lab (`lab::vlan`: r2 is a
//! trunk, r2.100 a `[[vlan]]` sub-interface towards hv): h1 sends UDP to hv on two ports,
//! unmarked, into r1 (untrusted). A `[[qos.policy.rule]]` puts port 5060 in class EF
//! (marked EF); r2's scheduler counts it in its EF queue, and r2.100's output policy writes
//! EF's 802.1p priority into the tag of what leaves, as a capture on the switch's port to
//! hv shows. Port 5070 stays best effort, priority 0. The other way, r2.100 is trusted:
//! frames tagged with priority 6 (crafted, sent on the trunk) are EF by their PCP, as r1's
//! scheduler counts. Needs root and tcpdump. In the plain lab, a rule's class without a
//! `mark` is r2's scheduling class too, r2's output policy being r1's input policy.

use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lab::{vlan, Lab};
use serde_json::Value;

mod common;
use common::*;

/// One VLAN lab at a time, as tests/vlan.rs.
static SERIAL: Mutex<()> = Mutex::new(());

fn qos() -> String {
    format!(
        r#"
[[qos.policy]]
name = "edge"
default_class = "be"

[[qos.policy.class]]
name = "ef"
dscp = ["ef"]
mark = "ef"
pcp = 5
pcp_in = [6]

[[qos.policy.class]]
name = "be"

[[qos.policy.rule]]
class = "ef"
src = "{h1}/32"
protocol = "udp"
dport = 5060

[[qos.policy.rule]]
class = "ef"
src = "{h1_6}/128"
protocol = "udp"
dport = 5060

[[qos.policy]]
name = "wan"
default_class = "be"
shaper = "100mbit"

[[qos.policy.class]]
name = "ef"
dscp = ["ef"]
priority = 0

[[qos.policy.class]]
name = "be"

[[qos.interface]]
name = "r1"
input = "edge"
output = "wan"

[[qos.interface]]
name = "r2"
output = "wan"

[[qos.interface]]
name = "r2.100"
trusted = true
input = "edge"
output = "edge"
"#,
        h1 = lab::H1_V4,
        h1_6 = lab::H1_V6,
    )
}

/// tcpdump on a port of the switch (`-e -nn`, tagged UDP), until it has `n` frames or
/// 5 s have passed.
struct Capture {
    tcpdump: Bg,
    err: std::io::BufReader<std::process::ChildStderr>,
    dump: std::path::PathBuf,
}

impl Capture {
    fn start(lab: &Lab, port: &str, flags: &[&str], n: usize) -> Capture {
        let dump = std::env::temp_dir().join(format!("{}-{port}.txt", lab.prefix));
        let file = std::fs::File::create(&dump).unwrap();
        let mut tcpdump = Bg(Command::new("ip")
            .args(["netns", "exec", &lab.switch()])
            .args([
                "tcpdump",
                "-i",
                port,
                "-e",
                "-nn",
                "-l",
                "-c",
                &n.to_string(),
            ])
            .args(flags)
            .arg("vlan 100 and udp")
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap());
        // It is capturing once it says so (the reader is kept: tcpdump reports on it at
        // exit).
        let mut err = std::io::BufReader::new(tcpdump.0.stderr.take().unwrap());
        {
            use std::io::BufRead;
            let mut said = String::new();
            while !said.contains("listening on") {
                let mut line = String::new();
                if err.read_line(&mut line).unwrap_or(0) == 0 {
                    panic!("tcpdump: {said}");
                }
                said += &line;
            }
        }
        Capture { tcpdump, err, dump }
    }

    /// What it captured.
    fn finish(mut self) -> String {
        let t0 = Instant::now();
        while self.tcpdump.0.try_wait().unwrap().is_none() && t0.elapsed() < Duration::from_secs(5)
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(self.tcpdump);
        drop(self.err);
        let text = std::fs::read_to_string(&self.dump).unwrap();
        let _ = std::fs::remove_file(&self.dump);
        text
    }
}

fn class<'a>(q: &'a Value, port: &str, name: &str) -> &'a Value {
    q["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["interface"] == port)
        .and_then(|p| {
            p["classes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == name)
        })
        .unwrap_or_else(|| panic!("{port} class {name}: {q}"))
}

#[test]
fn a_rule_classifies_by_port_and_the_vlan_tag_carries_the_classs_priority() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    lab::preconditions(
        "network namespaces, a capture on the switch",
        &[("tcpdump", "tcpdump"), ("python3", "python3")],
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    let mut l = Lab::new(&format!("t{}qm", std::process::id() % 10000));
    l.vlans = true;
    l.extra_config = qos();
    let g = start_lab(l);
    let lab = &g.0;
    ping_until_ok(lab, &lab.h1(), vlan::HV_V4);
    ping_until_ok(lab, &lab.h1(), vlan::HV_V6);

    // What the switch sends hv: tagged frames, their priority and UDP ports.
    let cap = Capture::start(lab, "to-hv", &[], 60);
    let send = |dst: &str, fam: &str, port: u16, n: usize| {
        let (ok, out) = python(
            lab,
            &lab.h1(),
            &format!(
                "import socket,time\ns=socket.socket(socket.{fam},socket.SOCK_DGRAM)\n\
                 for _ in range({n}):\n  s.sendto(b'x'*100,('{dst}',{port}))\n  time.sleep(0.005)\n"
            ),
        );
        assert!(ok, "{out}");
    };
    send(vlan::HV_V4, "AF_INET", 5060, 20);
    send(vlan::HV_V4, "AF_INET", 5070, 20);
    send(vlan::HV_V6, "AF_INET6", 5060, 10);
    send(vlan::HV_V6, "AF_INET6", 5070, 10);
    let text = cap.finish();
    // tcpdump names 5060 SIP: "> 10.100.0.2.5060: SIP".
    let count = |port: u16, pcp: u8| {
        text.lines()
            .filter(|l| l.contains(&format!(".{port}: ")))
            .filter(|l| l.contains(&format!("vlan 100, p {pcp},")))
            .count()
    };
    assert_eq!(
        count(5060, 5),
        30,
        "5060 leaves with EF's priority:\n{text}"
    );
    assert_eq!(count(5070, 0), 30, "5070 with priority 0:\n{text}");

    // r2's scheduler saw the rule's packets as EF (their DSCP, marked on input).
    let q = api(lab, "qos", None);
    let (ef, be) = (class(&q, "r2", "ef"), class(&q, "r2", "be"));
    let ef_n = ef["enqueued"].as_u64().unwrap();
    assert!((30..60).contains(&ef_n), "EF queued {ef_n}: {q}");
    assert!(be["enqueued"].as_u64().unwrap() >= 30, "{q}");

    // Each rule counted on r1 exactly the datagrams it matched: 20 over IPv4 (128 IP
    // bytes each), 10 over IPv6 (148); in `show qos` and in /metrics too.
    let rules = q["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["interface"] == "r1")
        .map(|i| i["rules"].clone())
        .unwrap_or_else(|| panic!("r1's rules: {q}"));
    let counted = |k: usize| (rules[k]["packets"].as_u64(), rules[k]["bytes"].as_u64());
    assert_eq!(counted(0), (Some(20), Some(20 * 128)), "{q}");
    assert_eq!(counted(1), (Some(10), Some(10 * 148)), "{q}");
    let text = cli(lab, &["show", "qos"]).1;
    assert!(text.contains("input r1 (policy edge)"), "{text}");
    let c = control::client::Client::new(control::client::Endpoint::Unix(lab.socket()));
    let m = String::from_utf8_lossy(&c.call("GET", "/metrics", None).unwrap().body).into_owned();
    assert!(
        m.contains(
            "ferrouter_qos_rule_packets_total{interface=\"r1\",policy=\"edge\",rule=\"1\",class=\"ef\"} 20"
        ),
        "{m}"
    );

    // The router fragments: h1's link (and r1) carry 3000 bytes, r2.100 1500. Datagrams
    // of 2000 bytes, DF clear (IP_PMTUDISC_DONT), leave r2.100 in two fragments each, and
    // both carry EF's priority: the first (offset 0, more fragments) and the second.
    lab.exec(&lab.h1(), &["ip", "link", "set", "eth0", "mtu", "3000"])
        .unwrap();
    lab.exec(&lab.rtr(), &["ip", "link", "set", "r1", "mtu", "3000"])
        .unwrap();
    const M: usize = 5;
    let cap = Capture::start(lab, "to-hv", &["-v"], 2 * M);
    let (ok, out) = python(
        lab,
        &lab.h1(),
        &format!(
            "import socket,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
             s.setsockopt(socket.IPPROTO_IP,10,0)\n\
             for _ in range({M}):\n  s.sendto(b'y'*2000,('{}',5060))\n  time.sleep(0.02)\n",
            vlan::HV_V4
        ),
    );
    assert!(ok, "{out}");
    let text = cap.finish();
    let frames = |pcp: u8, offset: &str| {
        text.lines()
            .filter(|l| l.contains(&format!("vlan 100, p {pcp},")))
            .filter(|l| l.contains(&format!("offset {offset},")))
            .count()
    };
    assert_eq!(
        frames(5, "0"),
        M,
        "first fragments with EF's priority:\n{text}"
    );
    assert_eq!(
        frames(5, "1480"),
        M,
        "second fragments with EF's priority:\n{text}"
    );
}

/// Frames tagged VLAN 100 with priority 6 (and, as many, priority 3), unmarked, from the
/// trunk's untagged station to h1: on trusted r2.100 the first are EF by their PCP (marked
/// EF), the others best effort; r1's scheduler counts them so.
#[test]
fn a_trusted_sub_interface_classifies_tagged_frames_by_their_priority() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    lab::preconditions("network namespaces", &[("python3", "python3")])
        .unwrap_or_else(|e| panic!("{e:#}"));
    let mut l = Lab::new(&format!("t{}qp", std::process::id() % 10000));
    l.vlans = true;
    l.extra_config = qos();
    let g = start_lab(l);
    let lab = &g.0;
    ping_until_ok(lab, &lab.h2(), lab::H1_V4);
    let r2 = mac_of(api(lab, "interfaces", None)[1]["mac"].as_str().unwrap());
    let sock = in_netns(&lab.h1(), || UdpSocket::bind("0.0.0.0:7003").unwrap());
    let q0 = api(lab, "qos", None);
    let ef0 = class(&q0, "r1", "ef")["enqueued"].as_u64().unwrap();
    let frame = |pcp: u16, payload: &[u8]| tagged_udp4(r2, &[(0x8100, pcp << 13 | 100)], payload);
    let frames = [frame(6, b"p6"), frame(3, b"p3")];
    const N: u64 = 10;
    send_frames_from(&lab.h2(), "eth0", frames.to_vec(), N as usize);
    let got = received(&sock, Duration::from_millis(1000));
    let n = |t: &[u8]| got.iter().filter(|g| g.as_slice() == t).count() as u64;
    assert_eq!((n(b"p6"), n(b"p3")), (N, N), "{got:?}");
    let q = api(lab, "qos", None);
    let ef = class(&q, "r1", "ef")["enqueued"].as_u64().unwrap() - ef0;
    assert_eq!(ef, N, "priority 6 is EF, 3 best effort: {q}");
}

/// A policy whose rule puts UDP to port 5060 in a strict-priority class without re-marking
/// it: input on r1, output on r2 (a port). r2's scheduler queues h1's datagrams to 5060 in
/// EF, though their DSCP is 0 (best effort's), as the input policy chose; 5070 in best
/// effort.
fn qos_carry() -> String {
    format!(
        r#"
[[qos.policy]]
name = "carry"
default_class = "be"

[[qos.policy.class]]
name = "ef"
dscp = ["ef"]
priority = 0

[[qos.policy.class]]
name = "be"

[[qos.policy.rule]]
class = "ef"
src = "{h1}/32"
protocol = "udp"
dport = 5060

[[qos.interface]]
name = "r1"
trusted = true
input = "carry"

[[qos.interface]]
name = "r2"
output = "carry"
"#,
        h1 = lab::H1_V4,
    )
}

#[test]
fn a_port_schedules_in_the_class_its_own_policy_chose_on_input_without_a_mark() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    lab::preconditions("network namespaces", &[("python3", "python3")])
        .unwrap_or_else(|e| panic!("{e:#}"));
    let mut l = Lab::new(&format!("t{}qc", std::process::id() % 10000));
    l.extra_config = qos_carry();
    let g = start_lab(l);
    let lab = &g.0;
    ping_until_ok(lab, &lab.h1(), lab::H2_V4);
    let q0 = api(lab, "qos", None);
    let enqueued = |q: &Value, name| class(q, "r2", name)["enqueued"].as_u64().unwrap();
    let (ef0, be0) = (enqueued(&q0, "ef"), enqueued(&q0, "be"));
    const N: u64 = 20;
    let (ok, out) = python(
        lab,
        &lab.h1(),
        &format!(
            "import socket,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
             for p in [5060,5070]*{N}:\n  s.sendto(b'x'*100,('{}',p))\n  time.sleep(0.002)\n",
            lab::H2_V4
        ),
    );
    assert!(ok, "{out}");
    // The worker counts as it queues; the API sums the workers' counts.
    let t0 = Instant::now();
    let mut q = api(lab, "qos", None);
    while enqueued(&q, "be") - be0 < N && t0.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(50));
        q = api(lab, "qos", None);
    }
    assert_eq!(
        enqueued(&q, "ef") - ef0,
        N,
        "5060 is EF, DSCP 0 and all: {q}"
    );
    // Best effort: 5070, and whatever else crossed (ARP is not IP: the default class).
    assert!(enqueued(&q, "be") - be0 >= N, "5070 is best effort: {q}");
}
