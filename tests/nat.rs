//! NAT44 end to end: `[nat]` in the config of `ferrouter run` in a namespace lab (h1 on
//! the inside, 192.0.2.0/24 behind r1; h2 outside on r2's 198.51.100.0/24), with real TCP
//! (Python sockets that answer with the peer address they see, curl against a Python
//! HTTP server, iperf3 both ways), UDP, ping, and an ICMP error that must reach the
//! inside socket that caused it; masquerade, a port forward, hairpinning; `show nat`,
//! `show nat sessions`, the metrics; and NAT under a stateful filter.

use lab::{vlan, Lab, H1_V4, H2_V4, R1_V4, R2_V4};
use serde_json::Value;

mod common;
use common::*;

const NAT: &str = r#"
[[nat.source]]
outbound_interface = "r2"
source = ["192.0.2.0/24"]
translation = "masquerade"
comment = "the inside, out to h2's side"

[[nat.destination]]
destination = ["198.51.100.1"]
protocol = "tcp"
destination_port = 8080
translation_address = "192.0.2.2"
translation_port = 8000
comment = "port forward to h1"
"#;

/// Masquerade and a port forward on a VLAN sub-interface (the VLAN lab's r2.100).
const NAT_VLAN: &str = r#"
[[nat.source]]
outbound_interface = "r2.100"
source = ["192.0.2.0/24"]
translation = "masquerade"

[[nat.destination]]
inbound_interface = "r2.100"
destination = ["10.100.0.1"]
protocol = "tcp"
destination_port = 8080
translation_address = "192.0.2.2"
translation_port = 8000
"#;

fn nat_sessions(lab: &Lab) -> Vec<Value> {
    api(lab, "nat", Some("sessions"))["sessions"]
        .as_array()
        .unwrap()
        .clone()
}

fn iperf3(lab: &Lab, ns: &str, dst: &str, extra: &[&str]) -> (bool, String) {
    let mut a = vec!["iperf3", "-c", dst, "-t", "2", "-J"];
    a.extend_from_slice(extra);
    sh(lab, ns, &a)
}

fn iperf3_bytes(out: &str) -> u64 {
    let v: Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("iperf3 JSON: {e}: {out}"));
    v["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0)
}

#[test]
fn masquerade_port_forward_and_hairpin_with_real_stacks() {
    let g = start("nat", NAT);
    let lab = &g.0;
    let (h1, h2) = (lab.h1(), lab.h2());
    ping_until_ok(lab, &h1, H2_V4);

    // Masquerade: h2 sees the router's address, TCP and UDP, and answers reach h1.
    let _t = peer_echo_tcp(&h2, 7000);
    let _u = peer_echo_udp(&h2, 7001);
    wait_listening(lab, &h2, 7000);
    assert!(bound(lab, &h2, 7001, "-lunH"));
    let (ok, out) = tcp_peer(lab, &h1, H2_V4, 7000);
    assert!(ok, "h1 -> h2 TCP through masquerade: {out}");
    assert_eq!(out.trim(), R2_V4, "h2 must see the router's address");
    let (ok, out) = udp_peer(lab, &h1, H2_V4, 7001);
    assert!(ok, "UDP: {out}");
    assert_eq!(
        out.trim(),
        R2_V4,
        "h2 must see the router's address over UDP"
    );
    // Echo: the identifier is translated and the replies find their way back.
    let (ok, out) = ping(lab, &h1, H2_V4, &["-c", "3", "-i", "0.2"]);
    assert!(ok, "ping through masquerade: {out}");

    // Real transfers both ways, and curl against an HTTP server.
    let _web = spawn(
        &h2,
        &["python3", "-m", "http.server", "8080", "--bind", "0.0.0.0"],
    );
    wait_listening(lab, &h2, 8080);
    let (code, out) = curl_in(lab, &h1, &format!("http://{H2_V4}:8080/"), 10);
    assert_eq!(code, 0, "curl through masquerade: {out}");
    assert!(out.starts_with("200"), "{out}");
    let _iperf = spawn(&h2, &["iperf3", "-s", "-B", "0.0.0.0"]);
    assert!(bound(lab, &h2, 5201, "-ltnH"));
    let (ok, out) = iperf3(lab, &h1, H2_V4, &[]);
    assert!(
        ok && iperf3_bytes(&out) > 1_000_000,
        "iperf3 h1 -> h2: {out}"
    );
    let (ok, out) = iperf3(lab, &h1, H2_V4, &["-R"]);
    assert!(
        ok && iperf3_bytes(&out) > 1_000_000,
        "iperf3 h2 -> h1: {out}"
    );

    // An ICMP error about a translated flow reaches the inside socket: h2 has nothing on
    // UDP 9, answers port unreachable to the router's address, quoting the translated
    // datagram; h1's connected socket must see the refusal.
    let (ok, out) = python(
        lab,
        &h1,
        &format!(
            "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.connect(('{H2_V4}',9))\n\
             s.settimeout(3)\nr='timeout'\nfor i in range(3):\n s.send(b'x')\n try:\n  s.recv(10)\n except ConnectionRefusedError:\n  r='refused'; break\n except socket.timeout:\n  pass\nprint(r)"
        ),
    );
    assert!(ok, "{out}");
    assert_eq!(
        out.trim(),
        "refused",
        "the port unreachable must be translated back to h1"
    );

    // The port forward: h2 reaches h1's server through the router's address, and h1 sees
    // h2's own address (destination NAT only).
    let _fwd = peer_echo_tcp(&h1, 8000);
    wait_listening(lab, &h1, 8000);
    let (ok, out) = tcp_peer(lab, &h2, R2_V4, 8080);
    assert!(ok, "h2 -> router:8080 -> h1:8000: {out}");
    assert_eq!(out.trim(), H2_V4, "h1 must see h2's address");
    // Hairpinning: h1 reaches its own forward through the public address; the router
    // answers for both ends, so h1's server sees the router's inside address.
    let (ok, out) = tcp_peer(lab, &h1, R2_V4, 8080);
    assert!(ok, "hairpin: {out}");
    assert_eq!(out.trim(), R1_V4, "a hairpinned flow comes from the router");

    // What the router shows.
    let sessions = nat_sessions(lab);
    let has = |f: &dyn Fn(&Value) -> bool| sessions.iter().any(f);
    assert!(
        has(&|s| s["protocol"] == "icmp" && s["outside_src"].as_str().unwrap().starts_with(R2_V4)),
        "an echo session: {sessions:?}"
    );
    assert!(
        has(&|s| s["protocol"] == "udp"
            && s["inside_src"].as_str().unwrap().starts_with(H1_V4)
            && s["outside_dst"] == format!("{H2_V4}:7001")),
        "a UDP session: {sessions:?}"
    );
    assert!(
        has(&|s| s["kind"] == "dnat"
            && s["inside_dst"] == format!("{R2_V4}:8080")
            && s["outside_dst"] == format!("{H1_V4}:8000")),
        "the port forward's session: {sessions:?}"
    );
    assert!(
        has(&|s| s["kind"] == "snat+dnat" && s["outside_src"].as_str().unwrap().starts_with(R1_V4)),
        "the hairpinned session: {sessions:?}"
    );
    let v = api(lab, "nat", None);
    let rule = |kind: &str| {
        v["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["kind"] == kind)
            .unwrap()["sessions"]
            .as_u64()
            .unwrap()
    };
    assert!(rule("source") >= 5, "{v}");
    assert!(rule("destination") >= 2, "{v}");
    assert!(v["workers"][0]["sessions"].as_u64().unwrap() >= 5, "{v}");
    // The CLI's tables and its filter.
    let (ok, out) = cli(lab, &["show", "nat"]);
    assert!(
        ok && out.contains("masquerade") && out.contains("192.0.2.2:8000"),
        "{out}"
    );
    let (ok, out) = cli(lab, &["show", "nat", "sessions", "198.51.100.2"]);
    assert!(ok && out.contains("198.51.100.2:7000"), "{out}");
    let (ok, out) = cli(lab, &["show", "nat", "sessions", "203.0.113.0/24"]);
    assert!(ok && out.contains("0 session(s)"), "{out}");
    let c = control::client::Client::new(control::client::Endpoint::Unix(lab.socket()));
    let r = c.call("GET", "/metrics", None).unwrap();
    let metrics = String::from_utf8_lossy(&r.body).into_owned();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("ferrouter_nat_sessions") && !l.ends_with(" 0")),
        "{metrics}"
    );
    // Nothing NAT refused or dropped on the way.
    for reason in ["table_full", "no_port", "collision", "no_address", "busy"] {
        for f in ["ip4-nat-reply", "ip4-nat-in", "ip4-nat-out"] {
            assert_eq!(feature_drops(lab, f, reason), 0, "{f} {reason}");
        }
    }
}

const STATEFUL_NAT: &str = r#"
[firewall]
conntrack = true
conntrack_max = 4096

[[firewall.filter]]
name = "from-outside"
hook = "ingress"
interfaces = ["r2"]
policy = "drop"

[[firewall.filter.rule]]
action = "accept"
state = ["established", "related"]

[[firewall.filter.rule]]
action = "accept"
protocol = "tcp"
destination = ["198.51.100.1"]
destination_port = 8080
comment = "the port forward, by the address clients use"

[[firewall.filter.rule]]
action = "accept"
protocol = "icmpv6"

[[nat.source]]
outbound_interface = "r2"
translation = ["198.51.100.1"]

[[nat.destination]]
inbound_interface = "r2"
destination = ["198.51.100.1"]
protocol = "tcp"
destination_port = 8080
translation_address = "192.0.2.2"
translation_port = 8000
"#;

/// NAT under a stateful filter: the filter sees a translated flow's replies as its
/// own (established), and new flows from outside get in only through the forward.
/// The outside on a VLAN sub-interface (an ISP's VLAN: the VLAN lab's r2.100, hv behind
/// it). The port carrying it runs AF_PACKET, which NAT may share when every rule names a
/// sub-interface (the replies come tagged, and the kernel drops its copy): h1 masquerades
/// out r2.100 to hv, which sees the router's address there over TCP and UDP, and hv
/// reaches h1 through a port forward on that address.
#[test]
fn masquerade_and_a_port_forward_on_a_vlan_sub_interface() {
    let mut lab = Lab::new(&format!("t{}natv", std::process::id() % 10000));
    lab.vlans = true;
    lab.extra_config = NAT_VLAN.into();
    let g = start_lab(lab);
    let lab = &g.0;
    let (h1, hv) = (lab.h1(), lab.hv());
    ping_until_ok(lab, &h1, vlan::HV_V4);
    let _t = peer_echo_tcp(&hv, 7000);
    let _u = peer_echo_udp(&hv, 7001);
    wait_listening(lab, &hv, 7000);
    assert!(bound(lab, &hv, 7001, "-lunH"));
    let (ok, out) = tcp_peer(lab, &h1, vlan::HV_V4, 7000);
    assert!(ok, "h1 -> hv TCP through masquerade on r2.100: {out}");
    assert_eq!(out.trim(), vlan::RV_V4, "hv must see r2.100's address");
    let (ok, out) = udp_peer(lab, &h1, vlan::HV_V4, 7001);
    assert!(ok, "UDP: {out}");
    assert_eq!(
        out.trim(),
        vlan::RV_V4,
        "hv must see r2.100's address over UDP"
    );
    // The port forward: hv to r2.100's address, port 8080, reaches h1's port 8000, which
    // sees hv's own address.
    let _f = peer_echo_tcp(&h1, 8000);
    wait_listening(lab, &h1, 8000);
    let (ok, out) = tcp_peer(lab, &hv, vlan::RV_V4, 8080);
    assert!(ok, "hv -> r2.100:8080 forwarded to h1: {out}");
    assert_eq!(out.trim(), vlan::HV_V4);
    let sessions = nat_sessions(lab);
    assert!(sessions.len() >= 3, "{sessions:#?}");
}

#[test]
fn nat_under_a_stateful_filter() {
    let g = start("natst", STATEFUL_NAT);
    let lab = &g.0;
    let (h1, h2) = (lab.h1(), lab.h2());
    ping_until_ok(lab, &h1, H2_V4);
    let _t = peer_echo_tcp(&h2, 7000);
    let _fwd = peer_echo_tcp(&h1, 8000);
    let _direct = peer_echo_tcp(&h1, 7000);
    wait_listening(lab, &h2, 7000);
    wait_listening(lab, &h1, 8000);
    wait_listening(lab, &h1, 7000);
    let (ok, out) = tcp_peer(lab, &h1, H2_V4, 7000);
    assert!(ok, "h1 -> h2 through the pool, replies let in: {out}");
    assert_eq!(out.trim(), R2_V4);
    let (ok, out) = tcp_peer(lab, &h2, R2_V4, 8080);
    assert!(ok, "the forward, allowed by its rule: {out}");
    assert_eq!(out.trim(), H2_V4);
    // h2 straight to h1: dropped by the policy.
    let (ok, out) = python(
        lab,
        &h2,
        &format!("import socket\nsocket.create_connection(('{H1_V4}',7000),timeout=2)"),
    );
    assert!(
        !ok && out.contains("timed out"),
        "h2 -> h1 direct must be dropped: {out}"
    );
    let (ok, out) = ping(lab, &h1, H2_V4, &["-c", "2", "-i", "0.2"]);
    assert!(ok, "echo out and its replies in: {out}");
    // Connection tracking holds the flows with the inside addresses both ways.
    let flows = api(lab, "conntrack", None)["flows"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        flows
            .iter()
            .any(|f| f["src"] == H1_V4 && f["dst"] == H2_V4 && f["dport"] == 7000),
        "{flows:?}"
    );
    assert!(
        flows
            .iter()
            .any(|f| f["src"] == H2_V4 && f["dst"] == R2_V4 && f["dport"] == 8080),
        "the forward's flow, as its client addressed it: {flows:?}"
    );
}

const SMALL_NAT: &str = r#"
[nat]
max_sessions = 1024

[[nat.source]]
outbound_interface = "r2"
translation = "masquerade"
"#;

/// Hostile and changing conditions, with an established transfer flowing throughout: a
/// flood of new flows that fills the table (refused and counted, the transfer untouched),
/// forged ICMP errors that quote no session (never translated), and a rule change applied
/// live (sessions keep their translation).
#[test]
fn a_full_table_forged_errors_and_live_changes_leave_established_flows_alone() {
    let g = start("natfl", SMALL_NAT);
    let lab = &g.0;
    let (h1, h2) = (lab.h1(), lab.h2());
    ping_until_ok(lab, &h1, H2_V4);
    let _iperf = lab.iperf3_server("0.0.0.0").unwrap();
    assert!(bound(lab, &h2, 5201, "-ltnH"));
    let transfer = iperf3_client(lab, 6);
    std::thread::sleep(std::time::Duration::from_secs(1));

    // 3,000 UDP flows from distinct ports: the 1,024-session table fills.
    let (ok, out) = python(
        lab,
        &h1,
        &format!(
            "import socket\nfor p in range(3000):\n s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n s.bind(('0.0.0.0',20000+p))\n s.sendto(b'x',('{H2_V4}',9999))\n s.close()\n"
        ),
    );
    assert!(ok, "{out}");
    let full = wait_for(|| {
        let n = feature_drops(lab, "ip4-nat-out", "table_full");
        (n > 0).then_some(n)
    });
    assert!(
        full.is_some(),
        "new flows beyond the table must be refused and counted"
    );
    let v = api(lab, "nat", None);
    assert_eq!(v["workers"][0]["max_sessions"], 1024, "{v}");
    assert!(v["workers"][0]["refused_full"].as_u64().unwrap() > 0, "{v}");

    // Forged port unreachables to the router's address, quoting UDP datagrams from ports
    // NAT holds (so they reach the fast path) to a destination no session sent to: h1
    // must not get any ICMP error.
    let listen = {
        let h1 = h1.clone();
        std::thread::spawn(move || {
            std::process::Command::new("ip")
                .args(["netns", "exec", &h1, "python3", "-c",
                    "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_RAW,socket.IPPROTO_ICMP)\ns.settimeout(3)\n\
                     n=0\ntry:\n while True:\n  d=s.recv(2000)\n  if d[20]==3: n+=1\nexcept socket.timeout: pass\nprint(n)"])
                .output()
                .unwrap()
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    let forge = format!(
        "import socket,struct\n\
         def cs(b):\n if len(b)%2: b+=b'\\0'\n s=sum(struct.unpack('!%dH'%(len(b)//2),b))\n s=(s>>16)+(s&0xffff); s+=s>>16\n return (~s)&0xffff\n\
         def ip(src,dst,proto,payload):\n h=struct.pack('!BBHHHBBH4s4s',0x45,0,20+len(payload),1,0,64,proto,0,socket.inet_aton(src),socket.inet_aton(dst))\n return h[:10]+struct.pack('!H',cs(h))+h[12:]+payload\n\
         s=socket.socket(socket.AF_INET,socket.SOCK_RAW,socket.IPPROTO_ICMP)\n\
         for sport in (20000,20001,20002):\n inner=ip('{R2_V4}','{H2_V4}',17,struct.pack('!HHHH',sport,53,8,0))\n m=struct.pack('!BBHI',3,3,0,0)+inner\n m=m[:2]+struct.pack('!H',cs(m))+m[4:]\n s.sendto(m,('{R2_V4}',0))\n"
    );
    let punted = reason_count(lab, "PuntNoKernelPath");
    let (ok, out) = python(lab, &h2, &forge);
    assert!(ok, "{out}");
    let out = listen.join().unwrap();
    // They reached the fast path (NAT's ports), found no session, and were the router's.
    assert!(
        reason_count(lab, "PuntNoKernelPath") >= punted + 3,
        "the forged errors must reach the fast path"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "0",
        "a forged error must not be translated to the inside: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A rule change while the transfer runs: sessions keep their translation.
    let base = std::fs::read_to_string(lab.config_file())
        .unwrap()
        .replace(SMALL_NAT, "");
    let (ok, out) = apply(
        lab,
        &base,
        &format!(
            "{SMALL_NAT}\n[[nat.destination]]\ndestination = [\"{R2_V4}\"]\nprotocol = \"tcp\"\ndestination_port = 2222\ntranslation_address = \"{H1_V4}\"\ntranslation_port = 22\n"
        ),
        "more",
    );
    assert!(ok, "{out}");
    transferred(
        transfer,
        "the transfer through a full table, forged errors and a rule change",
    );
    let v = api(lab, "nat", None);
    assert_eq!(v["rules"].as_array().unwrap().len(), 2, "{v}");
}
