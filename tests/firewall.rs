//! The firewall end to end: `[firewall]` filters in the config of `ferrouter run` in a
//! namespace lab, with real TCP (curl against a Python HTTP server, iperf3) and UDP (nc,
//! and Python sockets for what nc cannot show: the DSCP received, the error a rejected
//! datagram returns), in both families; the rules' counters in `show firewall`, their drops
//! in `show counters`, their log in the daemon's log; `config check` warnings; changes
//! applied live under traffic without losing what stays allowed.

use std::process::Command;
use std::time::Duration;

use lab::{Lab, H1_V4, H1_V6, H2_V4, H2_V6};
use serde_json::Value;

mod common;
use common::*;

const FW: &str = r#"
[[firewall.set]]
name = "h1"
addresses = ["192.0.2.2", "2001:db8:1::2"]

[[firewall.filter]]
name = "from-h1"
hook = "ingress"
interfaces = ["r1"]
policy = "drop"

[[firewall.filter.rule]]
action = "accept"
protocol = "tcp"
source = ["@h1"]
destination_port = [8080, 5201]
comment = "web and iperf3"

[[firewall.filter.rule]]
action = "reject"
protocol = "tcp"
destination_port = 8081

[[firewall.filter.rule]]
action = "reject"
protocol = "udp"
destination_port = 9999

[[firewall.filter.rule]]
action = "accept"
protocol = "udp"
destination_port = 7777
set_dscp = 10
log = true

[[firewall.filter.rule]]
action = "accept"
protocol = "icmp"

[[firewall.filter.rule]]
action = "accept"
protocol = "icmpv6"

[[firewall.filter]]
name = "to-h1"
hook = "egress"
interfaces = ["r1"]

[[firewall.filter.rule]]
action = "drop"
protocol = "udp"
source_port = 6666
"#;

/// curl from h1: its exit code (0 ok, 7 refused, 28 timed out) and output.
fn curl(lab: &Lab, url: &str, max_s: u32) -> (i32, String) {
    curl_in(lab, &lab.h1(), url, max_s)
}

/// `ferrouter trace ARGS`: its output.
fn trace(lab: &Lab, args: &[&str]) -> String {
    let mut a = vec!["trace"];
    a.extend_from_slice(args);
    cli(lab, &a).1
}

/// The filter `name` in `show firewall`.
fn filter(lab: &Lab, name: &str) -> Value {
    let v = api(lab, "firewall", None);
    v["filters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in {v}"))
        .clone()
}

fn rule_packets(f: &Value, index: usize) -> u64 {
    f["rules"][index - 1]["packets"].as_u64().unwrap()
}

#[test]
fn firewall_filters_real_traffic_and_changes_live() {
    let g = start("fw", FW);
    let lab = &g.0;
    let base = std::fs::read_to_string(lab.config_file())
        .unwrap()
        .replace(FW, "");
    let h2 = lab.h2();
    // HTTP servers on h2 for every port the rules name: what does not get through is the
    // firewall's doing, not a closed port.
    let _servers: Vec<Bg> = [8080, 8081, 8082]
        .iter()
        .map(|p| {
            spawn(
                &h2,
                &[
                    "python3",
                    "-m",
                    "http.server",
                    &p.to_string(),
                    "--bind",
                    "::",
                ],
            )
        })
        .collect();
    for p in [8080, 8081, 8082] {
        wait_listening(lab, &h2, p);
    }
    ping_until_ok(lab, &lab.h1(), H2_V4);
    ping_until_ok(lab, &lab.h1(), H2_V6);

    // Accepted, both families.
    let (code, out) = curl(lab, &format!("http://{H2_V4}:8080/"), 10);
    assert_eq!(code, 0, "curl 8080 over IPv4: {out}");
    assert!(out.starts_with("200"), "{out}");
    let (code, out) = curl(lab, &format!("http://[{H2_V6}]:8080/"), 10);
    assert_eq!(code, 0, "curl 8080 over IPv6: {out}");
    // Rejected: the router answers the SYN with a RST, so curl is refused at once.
    trace(lab, &["add", "20", "--match", "ip4 and port 8081"]);
    let (code, out) = curl(lab, &format!("http://{H2_V4}:8081/"), 10);
    assert_eq!(
        code,
        7,
        "curl 8081 must be refused by a RST: {out}\n{}",
        trace(lab, &["show"])
    );
    let (code, out) = curl(lab, &format!("http://[{H2_V6}]:8081/"), 10);
    assert_eq!(code, 7, "curl 8081 over IPv6 must be refused: {out}");
    // Dropped by the policy: curl times out.
    let (code, out) = curl(lab, &format!("http://{H2_V4}:8082/"), 2);
    assert_eq!(code, 28, "curl 8082 must time out (policy drop): {out}");

    // A rejected datagram: the sender's socket gets the ICMP unreachable
    // (administratively prohibited) as an error.
    let (ok, out) = python(
        lab,
        &lab.h1(),
        &format!(
            "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.settimeout(3)\ns.connect(('{H2_V4}',9999))\ns.send(b'x')\n\
             try:\n  s.recv(10)\n  print('answered')\nexcept socket.timeout:\n  print('timeout')\nexcept OSError as e:\n  print('error', e.errno)\n"
        ),
    );
    assert!(
        ok && out.contains("error 113"),
        "rejected UDP must get EHOSTUNREACH: {out}"
    );

    // Accepted with its DSCP rewritten to 10 (TOS 40), and logged.
    let tos = udp_receiver(lab, &h2, 7777, "0.0.0.0");
    let (ok, out) = sh(
        lab,
        &lab.h1(),
        &["sh", "-c", &format!("echo hello | nc -u -w1 {H2_V4} 7777")],
    );
    assert!(ok, "nc: {out}");
    let got = tos.join().unwrap();
    assert!(
        got.contains("hello tos 40"),
        "the datagram must arrive with DSCP 10 (TOS 40): {got}"
    );
    let log = wait_for(|| {
        let l = std::fs::read_to_string(lab.log_file()).unwrap_or_default();
        l.contains("firewall accept from-h1").then_some(l)
    });
    assert!(
        log.is_some(),
        "no firewall log line in {}",
        lab.log_file().display()
    );

    // Egress: h2's datagrams from port 6666 are dropped on their way out to h1, others
    // arrive.
    let rx = udp_receiver(lab, &lab.h1(), 6000, "0.0.0.0");
    for sport in ["6666", "6667"] {
        let (ok, out) = sh(
            lab,
            &h2,
            &[
                "sh",
                "-c",
                &format!("echo from{sport} | nc -u -w1 -p {sport} {H1_V4} 6000"),
            ],
        );
        assert!(ok, "nc: {out}");
    }
    let got = rx.join().unwrap();
    assert!(
        got.contains("from6667") && !got.contains("from6666"),
        "{got}"
    );

    // The counters: per rule in `show firewall`, per reason in `show counters`.
    let f = filter(lab, "from-h1");
    assert!(rule_packets(&f, 1) >= 6, "{f}");
    assert!(rule_packets(&f, 2) >= 2, "{f}");
    assert!(rule_packets(&f, 3) >= 1, "{f}");
    assert!(rule_packets(&f, 4) >= 1, "{f}");
    assert!(f["policy_packets"].as_u64().unwrap() >= 1, "{f}");
    assert_eq!(f["rules"][0]["comment"], "web and iperf3");
    assert!(rule_packets(&filter(lab, "to-h1"), 1) >= 1);
    assert!(feature_drops(lab, "ip4-filter-ingress", "reject") >= 2);
    assert!(feature_drops(lab, "ip6-filter-ingress", "reject") >= 1);
    assert!(feature_drops(lab, "ip4-filter-ingress", "rule_drop") >= 1);
    assert!(feature_drops(lab, "ip4-filter-egress", "rule_drop") >= 1);
    let text = cli(lab, &["show", "firewall"]).1;
    assert!(
        text.contains("filter from-h1 (ingress on r1), policy drop") && text.contains("(policy)"),
        "{text}"
    );

    // `config check` warns about a rule an earlier one hides, with its line.
    let shadow = format!("{FW}\n[[firewall.filter.rule]]\naction = \"accept\"\nprotocol = \"udp\"\nsource_port = 6666\ndestination_port = 53\n");
    let file = lab.config_file().with_file_name("shadow.toml");
    std::fs::write(&file, format!("{base}\n{shadow}")).unwrap();
    let (ok, out) = sh(
        lab,
        &lab.rtr(),
        &[bin(), "config", "check", file.to_str().unwrap()],
    );
    assert!(ok, "{out}");
    assert!(
        out.contains(
            "warning: firewall.filter[1].rule[1]: rule 2 of filter \"to-h1\" can never match"
        ),
        "{out}"
    );

    // A bad candidate is refused, naming what and where; the running rules stay.
    let (ok, out) = apply(lab, &base, &FW.replace("[\"@h1\"]", "[\"@nope\"]"), "bad");
    assert!(
        !ok && out.contains("unknown set \"nope\"")
            && out.contains("firewall.filter[0].rule[0].source[0]"),
        "{out}"
    );
    assert_eq!(
        filter(lab, "from-h1")["rules"][0]["matches"],
        f["rules"][0]["matches"]
    );

    // Live: 8081 accepted now.
    let (ok, out) = apply(
        lab,
        &base,
        &FW.replace(
            "action = \"reject\"\nprotocol = \"tcp\"",
            "action = \"accept\"\nprotocol = \"tcp\"",
        ),
        "open",
    );
    assert!(ok, "{out}");
    assert!(
        out.contains("~ firewall: 2 filters, 7 rules, 1 set"),
        "{out}"
    );
    let (code, out) = curl(lab, &format!("http://{H2_V4}:8081/"), 10);
    assert_eq!(code, 0, "8081 accepted after the change: {out}");

    // Under traffic: a TCP transfer and pings that every version allows lose nothing while
    // the rules change again and again.
    let iperf = lab.iperf3_server(H2_V4).unwrap();
    let client = iperf3_client(lab, 4);
    let pinger = {
        let h1 = lab.h1();
        std::thread::spawn(move || {
            let out = Command::new("ip")
                .args([
                    "netns", "exec", &h1, "ping", "-c", "300", "-i", "0.01", "-W", "2", H2_V4,
                ])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        })
    };
    for k in 0..6 {
        let extra = if k % 2 == 0 {
            FW.to_string()
        } else {
            FW.replace("destination_port = 9999", "destination_port = 9998")
        };
        let (ok, out) = apply(lab, &base, &extra, &format!("live{k}"));
        assert!(ok, "{out}");
        std::thread::sleep(Duration::from_millis(300));
    }
    let pings = pinger.join().unwrap();
    assert!(pings.contains("300 received"), "{pings}");
    transferred(client, "iperf3 through rule changes");
    drop(iperf);

    // Off: everything passes again.
    let (ok, out) = apply(lab, &base, "", "off");
    assert!(ok, "{out}");
    let (code, out) = curl(lab, &format!("http://{H2_V4}:8082/"), 10);
    assert_eq!(code, 0, "8082 passes with no filter: {out}");
    assert_eq!(api(lab, "firewall", None)["filters"], serde_json::json!([]));
}

/// A UDP receiver in `ns` on `port`: the thread returns what it got within 5 s, one line
/// per datagram, "PAYLOAD tos TOS".
fn udp_receiver(lab: &Lab, ns: &str, port: u16, bind: &str) -> std::thread::JoinHandle<String> {
    let code = format!(
        "import socket,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
         s.setsockopt(socket.IPPROTO_IP,socket.IP_RECVTOS,1)\ns.bind(('{bind}',{port}))\n\
         end=time.time()+5\n\
         while time.time()<end:\n\
         \x20 s.settimeout(max(0.01,end-time.time()))\n\
         \x20 try:\n\
         \x20   d,anc,_,_=s.recvmsg(100,64)\n\
         \x20 except socket.timeout:\n\
         \x20   break\n\
         \x20 t=[x[2][0] for x in anc if x[1]==socket.IP_TOS]\n\
         \x20 print(d.decode().strip(),'tos',t[0] if t else '?',flush=True)\n"
    );
    let ns2 = ns.to_string();
    let h = std::thread::spawn(move || {
        let out = Command::new("ip")
            .args(["netns", "exec", &ns2, "python3", "-c", &code])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    });
    bound(lab, ns, port, "-lunH");
    h
}

const STATEFUL: &str = r#"
[firewall]
conntrack = true
conntrack_max = 4096

[[firewall.filter]]
name = "from-h2"
hook = "ingress"
interfaces = ["r2"]
policy = "drop"

[[firewall.filter.rule]]
action = "accept"
state = ["established", "related"]

[[firewall.filter.rule]]
action = "drop"
state = ["invalid"]

[[firewall.filter.rule]]
action = "accept"
protocol = "icmpv6"
comment = "neighbour discovery"
"#;

/// Stateful filtering: h2's side only lets in what belongs to flows h1 opened (and ICMP
/// errors about them), with real TCP, UDP and ICMP both ways.
#[test]
fn stateful_filter_lets_in_replies_and_related_errors_only() {
    let g = start("fwst", STATEFUL);
    let lab = &g.0;
    let (h1, h2) = (lab.h1(), lab.h2());
    ping_until_ok(lab, &h1, H2_V4);
    // Echo: out and back from h1; never in from h2.
    assert!(ping(lab, &h1, H2_V4, &["-W", "1"]).0, "h1 pings h2");
    assert!(
        !ping(lab, &h2, H1_V4, &["-W", "1"]).0,
        "h2 must not ping h1"
    );
    // TCP: h1 reaches h2's server; h2 does not reach h1's.
    let _s2 = spawn(
        &h2,
        &["python3", "-m", "http.server", "8080", "--bind", "::"],
    );
    let _s1 = spawn(
        &h1,
        &["python3", "-m", "http.server", "8080", "--bind", "::"],
    );
    wait_listening(lab, &h2, 8080);
    wait_listening(lab, &h1, 8080);
    let (code, out) = curl(lab, &format!("http://{H2_V4}:8080/"), 10);
    assert_eq!(code, 0, "h1 -> h2 TCP with the replies let in: {out}");
    ping_until_ok(lab, &h1, H2_V6);
    let (code, out) = curl(lab, &format!("http://[{H2_V6}]:8080/"), 10);
    assert_eq!(code, 0, "the same over IPv6: {out}");
    let (code, out) = curl_in(lab, &h2, &format!("http://[{H1_V6}]:8080/"), 2);
    assert_eq!(code, 28, "h2 -> h1 TCP over IPv6 must time out: {out}");
    let (code, out) = curl_in(lab, &h2, &format!("http://{H1_V4}:8080/"), 2);
    assert_eq!(code, 28, "h2 -> h1 TCP must time out: {out}");
    // UDP: a request from h1 gets its answer; the same from h2 does not get in.
    let echo = {
        let h2 = h2.clone();
        std::thread::spawn(move || {
            Command::new("ip")
                .args(["netns", "exec", &h2, "python3", "-c",
                    "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.bind(('0.0.0.0',5353))\ns.settimeout(10)\nd,a=s.recvfrom(100)\ns.sendto(d.upper(),a)\n"])
                .output()
                .unwrap()
        })
    };
    assert!(
        bound(lab, &h2, 5353, "-lunH"),
        "the UDP echo server did not start"
    );
    let (ok, out) = python(
        lab,
        &h1,
        &format!("import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.settimeout(5)\ns.connect(('{H2_V4}',5353))\ns.send(b'ping')\nprint(s.recv(100))\n"),
    );
    assert!(ok && out.contains("PING"), "the UDP answer gets in: {out}");
    echo.join().unwrap();
    let rx = udp_receiver(lab, &h1, 6000, "0.0.0.0");
    let (ok, out) = sh(
        lab,
        &h2,
        &[
            "sh",
            "-c",
            &format!("echo unsolicited | nc -u -w1 {H1_V4} 6000"),
        ],
    );
    assert!(ok, "{out}");
    assert!(
        !rx.join().unwrap().contains("unsolicited"),
        "h2's unsolicited datagram must not get in"
    );
    // Related: h2's port unreachable about h1's datagram to a closed port gets in, so h1's
    // socket learns the port is closed.
    let (ok, out) = python(
        lab,
        &h1,
        &format!("import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.settimeout(3)\ns.connect(('{H2_V4}',9))\ns.send(b'x')\n\
                  try:\n  s.recv(10)\n  print('answered')\nexcept socket.timeout:\n  print('timeout')\nexcept OSError as e:\n  print('error', e.errno)\n"),
    );
    assert!(
        ok && out.contains("error 111"),
        "the related ICMP error must get in: {out}"
    );
    // The tables' figures.
    let v = api(lab, "firewall", None);
    let ct = &v["conntrack"];
    assert!(ct["created"].as_u64().unwrap() >= 4, "{v}");
    assert_eq!(ct["max"].as_u64().unwrap(), 4096, "{v}");
    assert_eq!(ct["refused"].as_u64().unwrap(), 0, "{v}");
    assert!(
        filter(lab, "from-h2")["policy_packets"].as_u64().unwrap() >= 2,
        "{v}"
    );
    assert!(feature_drops(lab, "ip4-filter-ingress", "rule_drop") >= 2);
    let text = cli(lab, &["show", "firewall"]).1;
    assert!(text.contains("conntrack: "), "{text}");
    // The same in /metrics.
    let c = control::client::Client::new(control::client::Endpoint::Unix(lab.socket()));
    let r = c.call("GET", "/metrics", None).unwrap();
    let m = String::from_utf8_lossy(&r.body).into_owned();
    assert!(m.contains("ferrouter_conntrack_max_flows{} 4096"), "{m}");
    assert!(
        m.contains("ferrouter_conntrack_events_total{event=\"created\"}"),
        "{m}"
    );
    assert!(
        m.contains("ferrouter_firewall_rule_packets_total{filter=\"from-h2\",rule=\"policy\"}"),
        "{m}"
    );
    // The flows themselves, listed and flushed by filter.
    let list = api(lab, "conntrack", None);
    let flows = list["flows"].as_array().unwrap();
    let has = |proto: &str, dport: u64| {
        flows.iter().any(|f| {
            f["protocol"] == proto && f["src"] == H1_V4 && f["dst"] == H2_V4 && f["dport"] == dport
        })
    };
    assert!(has("tcp", 8080), "the HTTP connection's flow: {list}");
    assert!(has("udp", 5353), "the UDP request's flow: {list}");
    assert!(
        flows.iter().all(|f| f["expires_s"].as_f64().unwrap() > 0.0),
        "{list}"
    );
    let only = api(lab, "conntrack", Some("198.51.100.0/24"));
    assert!(!only["flows"].as_array().unwrap().is_empty(), "{only}");
    let none = api(lab, "conntrack", Some("203.0.113.0/24"));
    assert_eq!(none["flows"], serde_json::json!([]), "{none}");
    let text = cli(lab, &["show", "conntrack"]).1;
    assert!(
        text.contains(&format!("{H2_V4}:8080")) && text.contains("flow(s)"),
        "{text}"
    );
    let flush = |args: &[&str]| {
        let mut a = vec!["conntrack", "flush"];
        a.extend_from_slice(args);
        let (ok, text) = cli(lab, &a);
        assert!(ok, "{text}");
        text
    };
    let out = flush(&["--protocol", "udp"]);
    assert!(!out.starts_with("0 flow"), "{out}");
    let after = api(lab, "conntrack", None);
    assert!(
        after["flows"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["protocol"] != "udp"),
        "{after}"
    );
    assert!(
        !after["flows"].as_array().unwrap().is_empty(),
        "the rest stay: {after}"
    );
    flush(&[]);
    assert_eq!(api(lab, "conntrack", None)["flows"], serde_json::json!([]));
    // The table's size is fixed at start.
    let base = std::fs::read_to_string(lab.config_file())
        .unwrap()
        .replace(STATEFUL, "");
    let (ok, out) = apply(lab, &base, &STATEFUL.replace("4096", "8192"), "resize");
    assert!(
        !ok && out.contains("restart") && out.contains("conntrack"),
        "{out}"
    );
}

/// A SYN flood fills the flow table: new flows take the place of half-open ones (early
/// drop), a TCP transfer established before the flood keeps flowing, and a new connection
/// made during it still works. Everything is counted.
#[test]
fn a_syn_flood_fills_the_table_and_established_flows_keep_flowing() {
    syn_flood(1);
}

/// The same with two workers: the flood's flows are steered to their owner's table, and
/// the policy holds there while the established transfer (wherever it is owned) goes on.
#[test]
fn a_syn_flood_on_two_workers_fills_its_owners_table_and_established_flows_keep_flowing() {
    syn_flood(2);
}

fn syn_flood(workers: usize) {
    let cfg = STATEFUL.replace("conntrack_max = 4096", "conntrack_max = 1024");
    let g = start_workers(&format!("fwsyn{workers}"), &cfg, workers);
    let lab = &g.0;
    let (h1, h2) = (lab.h1(), lab.h2());
    ping_until_ok(lab, &h1, H2_V4);
    let _s2 = spawn(
        &h2,
        &["python3", "-m", "http.server", "8080", "--bind", "::"],
    );
    wait_listening(lab, &h2, 8080);
    let iperf = lab.iperf3_server(H2_V4).unwrap();
    let client = iperf3_client(lab, 5);
    std::thread::sleep(Duration::from_millis(800));
    // 20,000 SYNs from h1 to an address of h2's subnet nobody holds (no answer ever comes,
    // so every flow stays half-open), from ever-changing source ports: 20 times the table.
    let flood = format!(
        "import socket,struct,random\n\
         def csum(b):\n\
         \x20 if len(b)%2: b+=b'\\0'\n\
         \x20 s=sum(struct.unpack('!%dH'%(len(b)//2),b))\n\
         \x20 s=(s>>16)+(s&0xffff); s+=s>>16\n\
         \x20 return (~s)&0xffff\n\
         src=socket.inet_aton('{H1_V4}'); dst=socket.inet_aton('198.51.100.99')\n\
         s=socket.socket(socket.AF_INET,socket.SOCK_RAW,socket.IPPROTO_TCP)\n\
         n=0\n\
         for i in range(20000):\n\
         \x20 sp=1024+i%60000\n\
         \x20 tcp=struct.pack('!HHIIBBHHH',sp,80,random.getrandbits(32),0,5<<4,2,65535,0,0)\n\
         \x20 c=csum(src+dst+struct.pack('!BBH',0,6,len(tcp))+tcp)\n\
         \x20 tcp=tcp[:16]+struct.pack('!H',c)+tcp[18:]\n\
         \x20 try:\n\
         \x20   s.sendto(tcp,('198.51.100.99',0)); n+=1\n\
         \x20 except OSError:\n\
         \x20   pass\n\
         print('sent',n)\n"
    );
    let (ok, out) = python(lab, &h1, &flood);
    assert!(ok && out.contains("sent"), "the flood: {out}");
    // A new connection during the flood's aftermath: its flow takes a half-open one's place.
    let (code, out) = curl(lab, &format!("http://{H2_V4}:8080/"), 10);
    assert_eq!(
        code, 0,
        "a new connection with the table full of half-open flows: {out}"
    );
    transferred(client, "the transfer established before the flood");
    drop(iperf);
    let v = api(lab, "firewall", None);
    let ct = &v["conntrack"];
    let max = 1024 * workers as u64;
    assert_eq!(ct["max"].as_u64().unwrap(), max, "{v}");
    assert!(ct["flows"].as_u64().unwrap() <= max, "{v}");
    assert!(
        ct["early_dropped"].as_u64().unwrap() >= 5000,
        "half-open flows made room: {v}"
    );
}
