//! IPsec end to end: two `ferrouter run` gateways in namespaces with a route-based tunnel
//! (`[[ipsec.tunnel]]`, manually keyed `[[ipsec.sa]]`, keys in a root-only file) between
//! them, and hosts behind each (`lab::ipsec`): ping and iperf3 (TCP, IPv4 and IPv6 inside)
//! cross it; what crosses the WAN link is ESP only (tcpdump); the tunnel's MTU answers
//! big packets with fragmentation-needed; `show ipsec` and the metrics count per SA; an
//! SA change applies live; hostile ESP (unknown SPI, corrupted, replayed) is dropped and
//! counted under its reason without disturbing the tunnel.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::ipsec::{feature_drops, ipsec, ping_until, read_dump, sh, stop, wire_dump};
use lab::ipsec::{IpsecGuard, IpsecLab, GW2_TUNNEL, H1, H1_V6, H2, H2_V6};
use serde_json::Value;

/// An IPsec lab with the tools these tests use.
fn up(tag: &str, f: impl FnOnce(&mut IpsecLab)) -> IpsecGuard {
    common::ipsec::up(
        tag,
        &[
            ("iperf3", "iperf3"),
            ("tcpdump", "tcpdump"),
            ("tshark", "tshark"),
        ],
        f,
    )
}

fn sa<'a>(v: &'a Value, dir: &str) -> &'a Value {
    v["sas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["direction"] == dir && (dir == "in" || s["active"] == true))
        .unwrap_or_else(|| panic!("no {dir} SA in {v:#}"))
}

fn metrics_text(socket: &Path) -> String {
    let c = control::client::Client::new(control::client::Endpoint::Unix(socket.into()));
    let r = c.call("GET", "/metrics", None).unwrap();
    String::from_utf8_lossy(&r.body).into_owned()
}

fn iperf3(l: &IpsecLab, dst: &str, extra: &[&str]) -> Value {
    let _server = l
        .spawn(&l.h2(), &["iperf3", "-s", "-1", "-B", dst])
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let mut a = vec!["iperf3", "-c", dst, "-t", "2", "-J"];
    a.extend_from_slice(extra);
    let (ok, out) = sh(l, &l.h1(), &a);
    assert!(ok, "iperf3 to {dst}: {out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("iperf3 JSON: {e}: {out}"))
}

#[test]
fn two_gateways_carry_ping_and_tcp_through_an_esp_tunnel() {
    let g = up("ipa", |_| {});
    let l = &g.0;
    // What crosses the WAN link, seen on its bridge.
    let (mut tcpdump, dump) = wire_dump(
        l,
        "wan.pcap",
        &["(ip or ip6) and not ip multicast and not ip6 multicast"],
    );
    ping_until(l, &l.h1(), H2);
    let (ok, out) = sh(l, &l.h1(), &["ping", "-c5", "-i0.2", "-W2", H2]);
    assert!(ok && out.contains(" 0% packet loss"), "{out}");
    ping_until(l, &l.h1(), H2_V6);
    // TCP both families: iperf3's bytes arrive, through the tunnel only.
    let v4 = iperf3(l, H2, &[]);
    let bytes = v4["end"]["sum_received"]["bytes"].as_f64().unwrap();
    assert!(bytes > 1e6, "iperf3 IPv4 moved {bytes} bytes");
    let v6 = iperf3(l, H2_V6, &["-R"]);
    let bytes6 = v6["end"]["sum_received"]["bytes"].as_f64().unwrap();
    assert!(bytes6 > 1e6, "iperf3 IPv6 (reverse) moved {bytes6} bytes");
    stop(&mut tcpdump);
    let text = read_dump(&dump);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() > 100, "few packets on the WAN: {text:.2000}");
    let clear: Vec<&&str> = lines.iter().filter(|l| !l.contains("ESP(spi=")).collect();
    assert!(
        clear.is_empty(),
        "{} packets crossed the WAN in the clear, e.g. {:?}",
        clear.len(),
        &clear[..clear.len().min(5)]
    );
    assert!(text.contains("ESP(spi=0x00001001") && text.contains("ESP(spi=0x00002001"));
    // Per-SA counters on both sides: what one encrypted, the other decrypted.
    let (a, b) = (ipsec(l, 1), ipsec(l, 2));
    let (out1, in2) = (sa(&a, "out"), sa(&b, "in"));
    assert_eq!(out1["spi"], 0x1001);
    assert_eq!(in2["spi"], 0x1001);
    let sent = out1["packets"].as_u64().unwrap();
    let got = in2["packets"].as_u64().unwrap();
    assert!(sent > 1000, "{a:#}");
    assert!(
        got <= sent && got + 10 >= sent,
        "gw1 sent {sent}, gw2 decrypted {got}"
    );
    assert_eq!(out1["sequence"].as_u64().unwrap(), sent);
    assert_eq!(a["tunnels"][0]["tx_spi"], 0x1001);
    assert_eq!(a["tunnels"][0]["rx_spis"][0], 0x2001);
    assert_eq!(a["tunnels"][0]["mtu"], 1500 - 57);
    // The kernel forwarded nothing: the fast path carried it all.
    let c = control::api::request_json(&l.socket(1), "counters", None).unwrap();
    assert_eq!(c["kernel_forwarded"]["ipv4"], 0, "{c:#}");
    // The CLI's table and the metrics say the same.
    let o = Command::new(common::bin())
        .args(["show", "ipsec", "sa", "--socket"])
        .arg(l.socket(1))
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{t}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        t.contains("ipsec0") && t.contains("0x1001") && t.contains("aes-128-gcm"),
        "{t}"
    );
    let m = metrics_text(&l.socket(1));
    assert!(
        m.contains(
            "ferrouter_ipsec_sa_packets_total{tunnel=\"ipsec0\",direction=\"out\",spi=\"0x1001\"}"
        ),
        "{m}"
    );
}

/// The gateways' WAN addresses on a VLAN sub-interface (`wan.100`, 802.1Q tag 100 on
/// `wan`): their ESP crosses the wire tagged, and `esp-decrypt` finds it behind the tag
/// (it used to go on to the kernel, which has no ESP here): ping and TCP cross the tunnel,
/// and every IP packet on the wire is tagged ESP.
#[test]
fn esp_tagged_for_a_vlan_sub_interface_is_decrypted_in_the_fast_path() {
    let g = up("ipv", |l| l.vlan = true);
    let l = &g.0;
    // Every frame on the wire, read back with its link-layer header (`-e`: the tag).
    let (mut tcpdump, dump) = wire_dump(l, "wan.pcap", &[]);
    ping_until(l, &l.h1(), H2);
    let (ok, out) = sh(l, &l.h1(), &["ping", "-c5", "-i0.2", "-W2", H2]);
    assert!(ok && out.contains(" 0% packet loss"), "{out}");
    ping_until(l, &l.h1(), H2_V6);
    let v4 = iperf3(l, H2, &[]);
    let bytes = v4["end"]["sum_received"]["bytes"].as_f64().unwrap();
    assert!(bytes > 1e6, "iperf3 IPv4 moved {bytes} bytes");
    stop(&mut tcpdump);
    let read = Command::new("tcpdump")
        .args(["-e", "-n", "-r"])
        .arg(&dump)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&read.stdout);
    // IP between the gateways (not their multicast listener reports and neighbour
    // discovery, which are theirs on wan.100 too, tagged or not by the kernel's choice).
    let ip: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("192.0.2.") || l.contains("2001:db8:ff::"))
        .filter(|l| !l.contains("ICMP6") && !l.contains("ARP"))
        .collect();
    assert!(ip.len() > 100, "few IP packets on the WAN: {text:.2000}");
    let odd: Vec<&&str> = ip
        .iter()
        .filter(|l| !(l.contains("vlan 100") && l.contains("ESP(spi=")))
        .collect();
    assert!(
        odd.is_empty(),
        "{} packets between the gateways were not ESP tagged 100, e.g. {:?}",
        odd.len(),
        &odd[..odd.len().min(5)]
    );
    assert!(text.contains("ESP(spi=0x00001001") && text.contains("ESP(spi=0x00002001"));
    // Each gateway decrypted what the other encrypted: all of it but what an AF_PACKET
    // port's ring dropped under TCP's bursts (it runs AF_PACKET for its sub-interfaces),
    // and nothing refused.
    let (a, b) = (ipsec(l, 1), ipsec(l, 2));
    let sent = sa(&a, "out")["packets"].as_u64().unwrap();
    let got = sa(&b, "in")["packets"].as_u64().unwrap();
    assert!(
        sent > 1000 && got <= sent && got * 100 >= sent * 95,
        "gw1 sent {sent}, gw2 decrypted {got}"
    );
    assert!(
        sa(&b, "in")["errors"]
            .as_object()
            .is_none_or(|e| e.is_empty()),
        "{b:#}"
    );
    assert!(sa(&a, "in")["packets"].as_u64().unwrap() > 100, "{a:#}");
    assert_eq!(feature_drops(l, 2, "esp-decrypt", "unknown_spi"), 0);
    let c = control::api::request_json(&l.socket(2), "counters", None).unwrap();
    assert_eq!(c["kernel_forwarded"]["ipv4"], 0, "{c:#}");
}

#[test]
fn the_tunnel_mtu_answers_big_packets_and_the_router_pings_through_the_tunnel() {
    let g = up("ipm", |_| {});
    let l = &g.0;
    ping_until(l, &l.h1(), H2);
    // Without DF and bigger than the tunnel (before any frag-needed, which h1 would
    // remember): gw1 encrypts the 1500-byte packet whole and
    // fragments the ESP packet on the 1500-byte WAN; gw2 reassembles it before decrypting.
    // 4000 bytes: h1 fragments first, and each fragment goes the same way.
    for size in ["1472", "4000"] {
        let (ok, out) = sh(
            l,
            &l.h1(),
            &["ping", "-c3", "-i0.2", "-W2", "-M", "dont", "-s", size, H2],
        );
        assert!(ok && out.contains(" 0% packet loss"), "{size}: {out}");
    }
    let r = &ipsec(l, 2)["reassembly"];
    assert!(r["reassembled"].as_u64().unwrap() >= 6, "{r}");
    assert_eq!(r["discarded"].as_u64().unwrap(), 0, "{r}");
    assert_eq!(feature_drops(l, 2, "esp-decrypt", "fragment"), 0);
    // DF and bigger than the tunnel's 1443: frag-needed with the tunnel's MTU, from gw1.
    let (ok, out) = sh(
        l,
        &l.h1(),
        &["ping", "-c1", "-W2", "-M", "do", "-s", "1450", H2],
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("mtu = 1443") || out.contains("mtu=1443"),
        "{out}"
    );
    // Just fits: 1443 - 28.
    let (ok, out) = sh(
        l,
        &l.h1(),
        &["ping", "-c2", "-W2", "-M", "do", "-s", "1415", H2],
    );
    assert!(ok, "{out}");
    // The gateways' own traffic into the tunnel: gw1 pings gw2's tunnel address and h2.
    let (ok, out) = sh(l, &l.gw(1), &["ping", "-c3", "-i0.2", "-W2", GW2_TUNNEL]);
    assert!(ok, "{out}");
    let (ok, out) = sh(l, &l.gw(1), &["ping", "-c2", "-W2", "-I", "10.255.0.1", H2]);
    assert!(ok, "{out}");
    // Operating it: a trace shows the SA and sequence number of each step, a capture on
    // the tunnel interface the clear packets both ways.
    let cli = |args: &[&str]| {
        let o = Command::new(common::bin())
            .args(args)
            .arg("--socket")
            .arg(l.socket(1))
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap();
        let text =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{args:?}: {text}");
        text
    };
    cli(&["trace", "add", "4"]);
    let pcap = l.dir.join("tunnel.pcap");
    let capture = {
        let (bin, pcap, sock) = (common::bin(), pcap.clone(), l.socket(1));
        std::thread::spawn(move || {
            Command::new(bin)
                // Four: the ping's two requests and replies, or as many of them as the
                // kernel's own packets (a router solicitation on the TUN) leave room for.
                .args(["capture", "ipsec0", "--count", "4", "--timeout", "10", "-w"])
                .arg(&pcap)
                .arg("--socket")
                .arg(&sock)
                .output()
                .unwrap()
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let (ok, out) = sh(l, &l.h1(), &["ping", "-c2", "-i0.2", "-W2", H2]);
    assert!(ok, "{out}");
    let t = cli(&["trace", "show"]);
    assert!(t.contains("esp4-encrypt: SA spi 0x1001 seq"), "{t}");
    assert!(t.contains("esp-decrypt: SA spi 0x2001 seq"), "{t}");
    let o = capture.join().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = Command::new("tshark")
        .arg("-r")
        .arg(&pcap)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&r.stdout);
    assert!(
        text.contains("10.1.0.2 → 10.2.0.2")
            && text.contains("10.2.0.2 → 10.1.0.2")
            && text.contains("ICMP"),
        "{text}"
    );
    // A restart of gw1: its transmit SA (same key) goes on past the sequence numbers the
    // last run may have used (its state file), so nothing repeats a nonce and gw2's
    // replay window takes the new packets at once.
    let before = sa(&ipsec(l, 1), "out")["sequence"].as_u64().unwrap();
    assert!(before > 0);
    l.stop(1);
    l.start(1, Path::new(common::bin()))
        .unwrap_or_else(|e| panic!("restart: {e:#}"));
    ping_until(l, &l.h1(), H2);
    let after = sa(&ipsec(l, 1), "out")["sequence"].as_u64().unwrap();
    assert!(after > before + (1 << 19), "{before} then {after}");
    assert!(
        sa(&ipsec(l, 2), "in")["errors"]["replayed"].is_null(),
        "{}",
        ipsec(l, 2)
    );
    let _ = (H1, H1_V6);
}

/// Hostile ESP at gw2, sent from gw1's kernel with scapy: a replay of a real packet, one
/// forged (a fresh sequence number its ICV does not cover), one truncated, and an unknown
/// SPI. Each is dropped and counted
/// under its reason (per SA, and per feature), and the tunnel goes on.
#[test]
fn hostile_esp_is_counted_and_harms_nothing() {
    // Debian's Python, which python3-scapy installs into (a python3 earlier on PATH, from
    // pyenv say, may not have it).
    assert!(
        Path::new("/usr/bin/python3").exists(),
        "/usr/bin/python3 not found: install the Debian package python3-scapy"
    );
    let g = up("iph", |_| {});
    let l = &g.0;
    let (mut tcpdump, dump) = wire_dump(l, "esp.pcap", &["esp", "and", "src", "192.0.2.1"]);
    ping_until(l, &l.h1(), H2);
    let (ok, out) = sh(l, &l.h1(), &["ping", "-c3", "-i0.2", "-W2", H2]);
    assert!(ok, "{out}");
    std::thread::sleep(Duration::from_millis(300));
    stop(&mut tcpdump);
    let before = sa(&ipsec(l, 2), "in").clone();
    // From gw1's kernel (it owns 192.0.2.1; its frames leave by wan through the kernel).
    let code = format!(
        r#"
import logging; logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import rdpcap, IP, Raw, send
pkts = [p[IP] for p in rdpcap("{}") if IP in p and p[IP].proto == 50]
assert pkts, "no ESP captured"
real = bytes(pkts[-1])
send(IP(real), count=5, verbose=0)                          # replays
# A forged one: a fresh sequence number (so no replay), the ICV no longer matching.
bad = bytearray(real); seq = int.from_bytes(real[24:28], "big") + 1000
bad[24:28] = seq.to_bytes(4, "big")
send(IP(bytes(bad)), count=3, verbose=0)
cut = IP(real); cut.remove_payload(); del cut.len; del cut.chksum
send(cut / Raw(real[20:20+12]), count=2, verbose=0)          # truncated: ESP header and 4 bytes
spi = bytearray(real); spi[20:24] = bytes.fromhex("0000dead")  # no such SPI
send(IP(bytes(spi)), count=4, verbose=0)
print("sent")
"#,
        dump.display()
    );
    let (ok, out) = sh(l, &l.gw(1), &["/usr/bin/python3", "-c", &code]);
    assert!(ok && out.contains("sent"), "{out}");
    std::thread::sleep(Duration::from_millis(500));
    let after = sa(&ipsec(l, 2), "in").clone();
    let err = |v: &Value, k: &str| v["errors"][k].as_u64().unwrap_or(0);
    assert_eq!(
        err(&after, "replayed") - err(&before, "replayed"),
        5,
        "{after:#}"
    );
    assert_eq!(
        err(&after, "integrity_failed") - err(&before, "integrity_failed"),
        3,
        "{after:#}"
    );
    // The SA counts the refusals RFC 4303 names each, the rest as `other`; the node
    // counts every reason.
    assert_eq!(err(&after, "other") - err(&before, "other"), 2, "{after:#}");
    // Nothing hostile was accepted: gw2 took no more than gw1 sent (read after, so a
    // packet of gw1's own in between, a router solicitation on its TUN, counts on both).
    let sent = sa(&ipsec(l, 1), "out")["packets"].as_u64().unwrap();
    assert!(
        after["packets"].as_u64().unwrap() <= sent,
        "nothing hostile was accepted: {after:#}, gw1 sent {sent}"
    );
    assert_eq!(feature_drops(l, 2, "esp-decrypt", "unknown_spi"), 4);
    assert_eq!(feature_drops(l, 2, "esp-decrypt", "replayed"), 5);
    assert_eq!(feature_drops(l, 2, "esp-decrypt", "truncated"), 2);
    // The tunnel is unharmed.
    let (ok, out) = sh(l, &l.h1(), &["ping", "-c3", "-i0.2", "-W2", H2]);
    assert!(ok && out.contains(" 0% packet loss"), "{out}");
    let m = metrics_text(&l.socket(2));
    assert!(
        m.contains("ferrouter_ipsec_sa_errors_total{tunnel=\"ipsec0\",direction=\"in\",spi=\"0x1001\",reason=\"replayed\"} 5"),
        "{m}"
    );
}

/// A rekey by config, under traffic: gw2 adds an inbound SA, gw1 switches its transmit SA
/// to it, then both drop the old one; a ping running all along loses nothing. A key file
/// others can read is refused by name.
#[test]
fn an_sa_rekey_applies_live_without_loss_and_bad_key_files_are_refused() {
    let g = up("ipr", |_| {});
    let l = &g.0;
    ping_until(l, &l.h1(), H2);
    let apply = |gw: u8, extra: &str, tag: &str| -> (bool, String) {
        let f = l.dir.join(format!("gw{gw}-{tag}.toml"));
        std::fs::write(&f, l.config_text(gw, extra)).unwrap();
        let o = Command::new(common::bin())
            .args(["config", "apply"])
            .arg(&f)
            .arg("--socket")
            .arg(l.socket(gw))
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
        )
    };
    let pinger = {
        let (ns, l2) = (l.h1(), l.clone());
        std::thread::spawn(move || {
            let o = l2
                .exec(&ns, &["ping", "-c", "60", "-i", "0.05", "-W", "2", H2])
                .unwrap();
            String::from_utf8_lossy(&o.stdout).into_owned()
        })
    };
    std::thread::sleep(Duration::from_millis(400));
    // A new key pair for gw1 -> gw2 under SPI 0x1002, the key gw1-to-gw2 reused.
    let new_in = "\n[[ipsec.sa]]\ntunnel = \"ipsec0\"\ndirection = \"in\"\nspi = 0x1002\nencryption = \"aes-128-gcm\"\nkey = \"gw2-to-gw1\"\nesn = true\n";
    let (ok, out) = apply(2, new_in, "a");
    assert!(ok, "{out}");
    // gw1 sends with 0x1002 (its out SA replaced: same key name, new SPI).
    let text1 = l
        .config_text(1, "")
        .replace("spi = 0x1001", "spi = 0x1002")
        .replace("key = \"gw1-to-gw2\"", "key = \"gw2-to-gw1\"");
    let f = l.dir.join("gw1-b.toml");
    std::fs::write(&f, &text1).unwrap();
    let o = Command::new(common::bin())
        .args(["config", "apply"])
        .arg(&f)
        .arg("--socket")
        .arg(l.socket(1))
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::thread::sleep(Duration::from_millis(500));
    let v1 = ipsec(l, 1);
    assert_eq!(v1["tunnels"][0]["tx_spi"], 0x1002, "{v1:#}");
    let out = pinger.join().unwrap();
    assert!(
        out.contains(" 0% packet loss"),
        "the rekey lost packets: {out}"
    );
    let v2 = ipsec(l, 2);
    let new_sa = v2["sas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["spi"] == 0x1002)
        .unwrap();
    assert!(new_sa["packets"].as_u64().unwrap() > 0, "{v2:#}");
    // A key file its group may read: the apply is refused, naming the file and its mode.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(l.key_file(2), std::fs::Permissions::from_mode(0o640)).unwrap();
    let (ok, out) = apply(2, "", "c");
    assert!(!ok, "{out}");
    assert!(
        out.contains("ipsec.key_file")
            && out.contains("has mode 0640")
            && out.contains("chmod 600"),
        "{out}"
    );
    // And what runs is unchanged.
    assert_eq!(ipsec(l, 2)["sas"].as_array().unwrap().len(), 3);
}

/// The tunnel over IPv6 (4in6 and 6in6) with AES-256-CBC and HMAC-SHA2-256-128: the
/// XDP program hands IPv6 ESP to the fast path, and both inner families cross.
#[test]
fn an_ipv6_tunnel_with_cbc_and_hmac_carries_both_families() {
    let g = up("ip6", |l| {
        l.outer_v6 = true;
        l.encryption = "aes-256-cbc".into();
        l.integrity = "hmac-sha2-256-128".into();
        l.esn = false;
    });
    let l = &g.0;
    ping_until(l, &l.h1(), H2);
    ping_until(l, &l.h1(), H2_V6);
    let (ok, out) = sh(
        l,
        &l.h1(),
        &["ping", "-c3", "-i0.2", "-s", "1200", "-W2", H2_V6],
    );
    assert!(ok, "{out}");
    // IPv4 without DF above the tunnel's MTU: the ESP packet leaves gw1 in IPv6
    // fragments, which gw2 reassembles.
    let (ok, out) = sh(
        l,
        &l.h1(),
        &[
            "ping", "-c3", "-i0.2", "-W2", "-M", "dont", "-s", "1472", H2,
        ],
    );
    assert!(ok && out.contains(" 0% packet loss"), "{out}");
    assert!(ipsec(l, 2)["reassembly"]["reassembled"].as_u64().unwrap() >= 3);
    let v = iperf3(l, H2, &["-t", "1"]);
    assert!(v["end"]["sum_received"]["bytes"].as_f64().unwrap() > 1e5);
    let (a, b) = (ipsec(l, 1), ipsec(l, 2));
    let out1 = sa(&a, "out");
    assert_eq!(out1["src"], "2001:db8:ff::1");
    assert_eq!(out1["encryption"], "aes-256-cbc");
    assert_eq!(out1["integrity"], "hmac-sha2-256-128");
    assert!(sa(&b, "in")["packets"].as_u64().unwrap() > 100, "{b}");
    assert!(
        sa(&b, "in")["errors"].as_object().unwrap().is_empty(),
        "{b}"
    );
    let mtu = a["tunnels"][0]["mtu"].as_u64().unwrap();
    assert!(
        (1380..1443).contains(&mtu),
        "IPv6 outer and CBC cost more: {mtu}"
    );
}

/// Two workers on each gateway, one tunnel: its SAs live on one worker (its owner,
/// worker 0); worker 1 hands it the ESP it receives and the packets it routes to the
/// tunnel. TCP streams both ways spread over
/// both workers, and no packet is refused as a replay or a forgery: each SA's sequence
/// numbers stay one sequence.
#[test]
fn two_workers_hand_their_esp_to_the_sas_worker() {
    let g = up("ipw", |l| l.workers = 2);
    let l = &g.0;
    ping_until(l, &l.h1(), H2);
    let v = iperf3(l, H2, &["-P", "4"]);
    assert!(v["end"]["sum_received"]["bytes"].as_f64().unwrap() > 1e6);
    let v = iperf3(l, H2, &["-P", "4", "-R"]);
    assert!(v["end"]["sum_received"]["bytes"].as_f64().unwrap() > 1e6);
    // Fragmented ESP, whichever worker receives it, is gathered by worker 0.
    let (ok, out) = sh(
        l,
        &l.h1(),
        &[
            "ping", "-c3", "-i0.2", "-W2", "-M", "dont", "-s", "3000", H2,
        ],
    );
    assert!(ok && out.contains(" 0% packet loss"), "{out}");
    for gw in [1, 2] {
        let s = ipsec(l, gw);
        for a in s["sas"].as_array().unwrap() {
            assert!(a["packets"].as_u64().unwrap() > 1000, "{s}");
            assert!(a["errors"].as_object().unwrap().is_empty(), "gw{gw}: {s}");
        }
    }
    // Worker 1 had something to hand over on each gateway.
    let m = metrics_text(&l.socket(1));
    let handed = m
        .lines()
        .find(|x| x.starts_with("ferrouter_ipsec_handed_off_total"))
        .and_then(|x| x.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("{m}"));
    assert!(handed > 0.0, "{m}");
}

/// Several tunnels and two workers on each gateway: the tunnels' SAs spread over both
/// workers (`show ipsec --json` names each SA's worker; a tunnel's SAs are all on one),
/// the other worker hands each tunnel's packets to its owner, and TCP through every
/// tunnel at once arrives with no packet refused as a replay or a forgery.
#[test]
fn several_tunnels_spread_their_sas_over_two_workers() {
    lab::preconditions(
        "network namespaces and the gateways' ports",
        &[("iperf3", "iperf3")],
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    let mut l = IpsecLab::new(&format!("t{}ips", std::process::id() % 10000));
    l.workers = 2;
    l.down();
    let g = IpsecGuard(l);
    let l = &g.0;
    l.build().unwrap_or_else(|e| panic!("IPsec lab: {e:#}"));
    // Three tunnels beside ipsec0, each with its own SAs, carrying traffic between
    // addresses of h1 (198.18.i.1) and h2 (198.19.i.1) routed through tunnel i.
    const N: u8 = 3;
    // Keys of their own, in the key file beside the lab's.
    let enc_len = ipsec::config::encryption(&l.encryption).unwrap().key_len();
    let int_len = ipsec::config::integrity(&l.integrity).unwrap().key_len();
    let mut keys = String::new();
    for i in 0..N {
        for (name, seed) in [
            (format!("m{i}-1to2"), 40 + i),
            (format!("m{i}-2to1"), 80 + i),
        ] {
            let hex = |seed: u8, len: usize| -> String {
                (0..len)
                    .map(|b| format!("{:02x}", (b as u8).wrapping_mul(7).wrapping_add(seed)))
                    .collect()
            };
            keys.push_str(&format!(
                "[{name}]\nencryption = \"{}\"\n",
                hex(seed, enc_len)
            ));
            if int_len > 0 {
                keys.push_str(&format!("integrity = \"{}\"\n", hex(seed + 1, int_len)));
            }
        }
    }
    let sa = |n: u8, i: u8, dir: &str| {
        let (spi, key) = match (n, dir) {
            (1, "out") | (2, "in") => (0x1100 + u32::from(i), format!("m{i}-1to2")),
            _ => (0x2100 + u32::from(i), format!("m{i}-2to1")),
        };
        format!(
            "\n[[ipsec.sa]]\ntunnel = \"ipsecm{i}\"\ndirection = \"{dir}\"\nspi = {spi:#x}\n\
             encryption = \"{}\"\nintegrity = \"{}\"\nkey = \"{key}\"\n",
            l.encryption, l.integrity
        )
    };
    for n in [1u8, 2] {
        let other = 3 - n;
        let (mine, theirs, host) = if n == 1 { (18, 19, H1) } else { (19, 18, H2) };
        let mut extra =
            format!("\n[[route]]\nprefix = \"198.{mine}.0.0/16\"\nvia = [\"{host}\"]\n");
        for i in 0..N {
            extra.push_str(&format!(
                "\n[[ipsec.tunnel]]\nname = \"ipsecm{i}\"\nlocal = \"{}\"\nremote = \"{}\"\n{}{}\
                 \n[[interface]]\nname = \"ipsecm{i}\"\naddresses = [\"10.128.{i}.{n}/30\"]\n\
                 \n[[route]]\nprefix = \"198.{theirs}.{i}.0/24\"\nvia = [\"10.128.{i}.{other}\"]\n",
                l.wan(n),
                l.public(other),
                sa(n, i, "out"),
                sa(n, i, "in"),
            ));
        }
        l.write_config(n, &extra).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(l.key_file(n))
            .and_then(|mut f| std::io::Write::write_all(&mut f, keys.as_bytes()))
            .unwrap();
        l.start(n, Path::new(common::bin()))
            .unwrap_or_else(|e| panic!("gw{n} with {N} more tunnels: {e:#}"));
    }
    for i in 0..N {
        let (a, b) = (format!("198.18.{i}.1/32"), format!("198.19.{i}.1/32"));
        l.ip(&l.h1(), &["addr", "add", &a, "dev", "lo"]).unwrap();
        l.ip(&l.h2(), &["addr", "add", &b, "dev", "lo"]).unwrap();
    }
    // Each gateway: four tunnels over two workers, two each; a tunnel's SAs on one.
    for gw in [1, 2] {
        let v = ipsec(l, gw);
        let sas = v["sas"].as_array().unwrap();
        assert_eq!(sas.len(), 2 * (usize::from(N) + 1), "{v:#}");
        let mut by_tunnel = std::collections::BTreeMap::<&str, Vec<u64>>::new();
        for a in sas {
            by_tunnel
                .entry(a["tunnel"].as_str().unwrap())
                .or_default()
                .push(
                    a["worker"]
                        .as_u64()
                        .unwrap_or_else(|| panic!("no worker: {a}")),
                );
        }
        let mut per_worker = [0; 2];
        for (t, w) in &by_tunnel {
            assert!(w.iter().all(|x| *x == w[0]), "gw{gw} {t}: {w:?}");
            per_worker[w[0] as usize] += 1;
        }
        assert_eq!(per_worker, [2, 2], "gw{gw}: {by_tunnel:?}");
    }
    // TCP through every tunnel at once, each way.
    ping_until(l, &l.h1(), H2);
    for i in 0..N {
        let (src, dst) = (format!("198.18.{i}.1"), format!("198.19.{i}.1"));
        let (ok, out) = sh(l, &l.h1(), &["ping", "-c1", "-W2", "-I", &src, &dst]);
        assert!(ok, "through ipsecm{i}: {out}");
    }
    let servers: Vec<_> = (0..N)
        .map(|i| {
            l.spawn(
                &l.h2(),
                &["iperf3", "-s", "-1", "-B", &format!("198.19.{i}.1")],
            )
            .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(400));
    let clients: Vec<_> = (0..N)
        .map(|i| {
            let l = l.clone();
            std::thread::spawn(move || {
                let (src, dst) = (format!("198.18.{i}.1"), format!("198.19.{i}.1"));
                let a = ["iperf3", "-c", &dst, "-B", &src, "-t", "2", "-P", "2", "-J"];
                sh(&l, &l.h1(), &a)
            })
        })
        .collect();
    for (i, c) in clients.into_iter().enumerate() {
        let (ok, out) = c.join().unwrap();
        assert!(ok, "iperf3 through ipsecm{i}: {out}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert!(
            v["end"]["sum_received"]["bytes"].as_f64().unwrap() > 1e5,
            "ipsecm{i}: {out:.2000}"
        );
    }
    drop(servers);
    for gw in [1, 2] {
        let v = ipsec(l, gw);
        for a in v["sas"].as_array().unwrap() {
            if a["tunnel"] == "ipsec0" {
                continue;
            }
            assert!(a["packets"].as_u64().unwrap() > 100, "gw{gw}: {a}");
            assert!(a["errors"].as_object().unwrap().is_empty(), "gw{gw}: {a}");
        }
    }
    // Packets crossed between the workers (whichever received them), and the metrics
    // count each worker's SAs.
    let mut handed = 0.0;
    for gw in [1, 2] {
        let m = metrics_text(&l.socket(gw));
        handed += m
            .lines()
            .find(|x| x.starts_with("ferrouter_ipsec_handed_off_total"))
            .and_then(|x| x.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{m}"));
        for w in ["0", "1"] {
            assert!(
                m.contains(&format!("ferrouter_ipsec_worker_sas{{worker=\"{w}\"}} 4")),
                "gw{gw}: {m}"
            );
        }
    }
    assert!(handed > 0.0);
}

/// NAT traversal: ESP in UDP from port 4500 (RFC 3948) on the wire, NAT keepalives sent
/// by each gateway and dropped silently (counted) by the other.
#[test]
fn nat_traversal_carries_esp_in_udp_with_keepalives() {
    let g = up("ipn", |l| l.nat_t = true);
    let l = &g.0;
    let (mut tcpdump, dump) = wire_dump(l, "natt.pcap", &["ip", "and", "not", "ip", "multicast"]);
    ping_until(l, &l.h1(), H2);
    let (ok, out) = sh(l, &l.h1(), &["ping", "-c5", "-i0.2", "-W2", H2]);
    assert!(ok && out.contains(" 0% packet loss"), "{out}");
    // A keepalive a second.
    std::thread::sleep(Duration::from_millis(1500));
    stop(&mut tcpdump);
    let text = read_dump(&dump);
    assert!(
        text.contains("192.0.2.1.4500 > 192.0.2.2.4500: UDP-encap: ESP(spi=0x00001001"),
        "{text}"
    );
    assert!(
        !text
            .lines()
            .any(|x| x.contains(" ESP(") && !x.contains("UDP-encap")),
        "{text}"
    );
    assert!(text.contains("isakmp-nat-keep-alive"), "{text}");
    assert!(feature_drops(l, 2, "esp-decrypt", "natt_keepalive") > 0);
    assert!(sa(&ipsec(l, 2), "in")["packets"].as_u64().unwrap() >= 5);
}

/// SAs through the API (`POST /v1/ipsec/sa`, `DELETE /v1/ipsec/sa/{direction}/{spi}`) on
/// a tunnel the config gives none: they key it, `show ipsec` says where they came from, a
/// new transmit SA replaces the API's earlier one (a rekey) while traffic goes on, a bad
/// one is refused naming its field, and removing what the API did not install is a 404.
#[test]
fn sas_from_the_api_key_a_tunnel_and_rekey_it() {
    let g = up("ipa", |l| l.config_sas = false);
    let l = &g.0;
    let client =
        |gw: u8| control::client::Client::new(control::client::Endpoint::Unix(l.socket(gw)));
    let add = |gw: u8, dir: &str, spi: u32, key: &str| {
        client(gw).send_json(
            "POST",
            "/v1/ipsec/sa",
            &serde_json::json!({
                "tunnel": "ipsec0", "direction": dir, "spi": spi,
                "encryption": "aes-128-gcm", "encryption_key": key,
            }),
        )
    };
    let (ka, kb, kc) = ("11".repeat(20), "22".repeat(20), "33".repeat(20));
    // Inbound first on each side, then the transmit SAs.
    add(2, "in", 0x3001, &ka).unwrap();
    add(1, "in", 0x4001, &kb).unwrap();
    add(1, "out", 0x3001, &ka).unwrap();
    add(2, "out", 0x4001, &kb).unwrap();
    ping_until(l, &l.h1(), H2);
    let v = ipsec(l, 1);
    assert_eq!(sa(&v, "out")["spi"], 0x3001);
    assert_eq!(sa(&v, "out")["source"], "api", "{v}");
    // A key of the wrong length: refused, naming the SA and the field; nothing changed.
    let e = add(1, "out", 0x3005, &"44".repeat(8)).unwrap_err();
    assert!(format!("{e:#}").contains("sa out 0x3005.key"), "{e:#}");
    assert_eq!(sa(&ipsec(l, 1), "out")["spi"], 0x3001);
    // A rekey of gw1's direction under a running ping: gw2 takes the new SPI first, gw1
    // switches to it (its earlier API transmit SA goes), then gw2 drops the old one; gw1's
    // and the removal through the CLI, its key from a key file.
    let keys = l.dir.join("api-keys.toml");
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::remove_file(&keys);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&keys)
            .unwrap();
        writeln!(f, "[rekey]\nencryption = \"{kc}\"").unwrap();
    }
    let cli = |gw: u8, args: &[&str]| common::ike::cli(l, gw, &[&["ipsec", "sa"], args].concat());
    let (ok, out) = std::thread::scope(|s| {
        let pinger = s.spawn(|| sh(l, &l.h1(), &["ping", "-c20", "-i0.1", "-W2", H2]));
        std::thread::sleep(Duration::from_millis(500));
        add(2, "in", 0x3002, &kc).unwrap();
        let k = keys.to_str().unwrap();
        let t = cli(
            1,
            &[
                "add",
                "--tunnel",
                "ipsec0",
                "--direction",
                "out",
                "--spi",
                "0x3002",
                "--encryption",
                "aes-128-gcm",
                "--key-file",
                k,
                "--key",
                "rekey",
            ],
        );
        assert!(t.contains("SA out 0x3002 added"), "{t}");
        std::thread::sleep(Duration::from_millis(300));
        let t = cli(2, &["delete", "--direction", "in", "--spi", "0x3001"]);
        assert!(t.contains("SA in 0x3001 removed"), "{t}");
        pinger.join().unwrap()
    });
    assert!(ok && out.contains(" 0% packet loss"), "{out}");
    let v = ipsec(l, 1);
    let outs: Vec<&Value> = v["sas"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["direction"] == "out")
        .collect();
    assert_eq!(outs.len(), 1, "the earlier transmit SA went: {v}");
    assert_eq!(outs[0]["spi"], 0x3002);
    let v2 = ipsec(l, 2);
    assert!(
        v2["sas"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["spi"] != 0x3001),
        "{v2}"
    );
    // Removing it again, or an SA the API never installed: 404 with what was wrong.
    let e = client(2)
        .send_json("DELETE", "/v1/ipsec/sa/in/0x3001", &Value::Null)
        .unwrap_err();
    assert!(
        format!("{e:#}").contains("no SA in 0x3001 installed through the API"),
        "{e:#}"
    );
}

#[test]
fn a_gateway_with_hundreds_of_tunnels_starts_with_every_tunnel_its_address_and_route() {
    lab::preconditions("network namespaces and the gateways' ports", &[])
        .unwrap_or_else(|e| panic!("{e:#}"));
    let l = IpsecLab::new(&format!("t{}ipx", std::process::id() % 10000));
    l.down();
    let g = IpsecGuard(l);
    let l = &g.0;
    l.build().unwrap_or_else(|e| panic!("IPsec lab: {e:#}"));
    // 200 tunnels beside the lab's ipsec0, each with a /30 and a route through it (as
    // `bench ipsec --tunnels N` configures them; no SAs: a tunnel without one drops).
    const N: u32 = 200;
    let mut extra = String::new();
    for i in 0..N {
        let base = u32::from(std::net::Ipv4Addr::new(10, 128, 0, 0)) + 4 * i;
        let (me, peer) = (
            std::net::Ipv4Addr::from(base + 1),
            std::net::Ipv4Addr::from(base + 2),
        );
        extra.push_str(&format!(
            "\n[[ipsec.tunnel]]\nname = \"ipsecm{i}\"\nlocal = \"{}\"\nremote = \"{}\"\n\
             \n[[interface]]\nname = \"ipsecm{i}\"\naddresses = [\"{me}/30\"]\n\
             \n[[route]]\nprefix = \"198.19.{i}.0/24\"\nvia = [\"{peer}\"]\n",
            l.wan(1),
            l.wan(2)
        ));
    }
    l.write_config(1, &extra).unwrap();
    l.start_within(1, Path::new(common::bin()), Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("gw1 with {N} more tunnels: {e:#}"));
    let v = ipsec(l, 1);
    let tunnels: Vec<&str> = v["tunnels"]
        .as_array()
        .unwrap_or_else(|| panic!("no tunnels in {v:#}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(tunnels.len(), N as usize + 1, "{tunnels:?}");
    for i in 0..N {
        let name = format!("ipsecm{i}");
        assert!(
            tunnels.contains(&name.as_str()),
            "{name} not in {tunnels:?}"
        );
    }
    // Every TUN is up with its tunnel's MTU and its address, in the kernel.
    let (ok, out) = sh(l, &l.gw(1), &["ip", "-o", "-4", "addr", "show"]);
    assert!(ok, "{out}");
    for i in [0, N / 2, N - 1] {
        let base = u32::from(std::net::Ipv4Addr::new(10, 128, 0, 0)) + 4 * i;
        let me = std::net::Ipv4Addr::from(base + 1);
        assert!(
            out.contains(&format!("ipsecm{i}    inet {me}/30")),
            "ipsecm{i} {me}/30 missing: {out:.3000}"
        );
    }
    let (ok, links) = sh(l, &l.gw(1), &["ip", "-o", "link", "show", "up"]);
    assert!(ok, "{links}");
    let up = links.lines().filter(|x| x.contains(": ipsecm")).count();
    assert_eq!(up, N as usize, "{links:.3000}");
    // Every route through them, mirrored into the FIB.
    for i in 0..N {
        let p = format!("198.19.{i}.0/24");
        let r = control::api::request_json(&l.socket(1), "routes", Some(&p))
            .unwrap_or_else(|e| panic!("show routes {p}: {e:#}"));
        assert!(
            r.to_string().contains(&format!("dev ipsecm{i} ")),
            "{p} not through ipsecm{i}: {r:#}"
        );
    }
}
