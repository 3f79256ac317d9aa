//! IKEv2 interop with strongSwan beyond setting tunnels up (issue 27, item 5 and 6): a
//! peer that dies without a word is noticed by DPD and comes back; iperf3 both ways
//! through a tunnel keyed with charon; an IKE_SA_INIT flood engages cookies while an
//! established tunnel carries a ping stream untouched; NAT traversal through a real
//! Linux NAT (nftables masquerade), with either side behind it and nothing forced;
//! virtual IPs leased to charon from IPv4 pools, then from both families.
//! The lab is `tests/common/ike.rs`'s (gw1 a ferrouter, gw2 a Linux router running
//! charon with kernel-libipsec).

mod common;

use std::time::{Duration, Instant};

use common::ike::*;
use lab::ipsec::IpsecLab;
use serde_json::Value;

const IKE_P: &str = "aes128gcm16-prfsha256-curve25519";
const ESP_P: &str = "aes128gcm16";

fn gw1_log(l: &IpsecLab) -> String {
    lab::swan::tail(
        &std::fs::read_to_string(l.log_file(1)).unwrap_or_default(),
        30,
    )
}

/// gw1's fast-path SAs (`GET /v1/ipsec`).
fn fast_path_sas(l: &IpsecLab) -> Vec<Value> {
    let v = control::api::request_json(&l.socket(1), "ipsec", None)
        .unwrap_or_else(|e| panic!("show ipsec on gw1: {e:#}"));
    v["sas"].as_array().cloned().unwrap_or_default()
}

fn metrics(l: &IpsecLab) -> String {
    let c = control::client::Client::new(control::client::Endpoint::Unix(l.socket(1)));
    String::from_utf8_lossy(&c.call("GET", "/metrics", None).unwrap().body).into_owned()
}

#[test]
fn a_strongswan_that_dies_is_noticed_by_dpd_and_its_tunnel_comes_back_with_it() {
    let (g, mut charon) = swan_lab("ikd");
    let l = &g.0;
    // Liveness checked after 2 s of silence, given up after 2 retransmissions (1 + 2 s,
    // then 4 s): a dead peer is noticed about 9 s after its last word.
    let peer = ferrouter_peer(l, IKE_P, ESP_P, true) + "dpd_s = 2\nretransmit_tries = 2\n";
    let what = "DPD";
    let first = interop_case(
        l,
        &mut charon,
        0,
        what,
        &swanctl_conf(l, IKE_P, ESP_P),
        &peer,
        true,
    );
    assert_eq!(fast_path_sas(l).len(), 2, "the child's two SAs");
    let before = ike(l, 1);
    // SIGKILL: no Delete goes out; ESP and IKE to gw2 meet closed ports from now on.
    charon.kill();
    let t = Instant::now();
    let v = loop {
        let v = ike(l, 1);
        if v["established"] == 0 {
            break v;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{what}: gw1 kept the SA of a dead peer: {v:#}\n{}",
            gw1_log(l)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let noticed = t.elapsed();
    // Not by something else: the liveness check went unanswered, and was counted.
    assert!(
        noticed >= Duration::from_secs(5),
        "{what}: gone after {noticed:?} only: {v:#}"
    );
    assert_eq!(
        count(&v, "dead_peers"),
        count(&before, "dead_peers") + 1,
        "{v:#}"
    );
    assert!(count(&v, "dpd_sent") > count(&before, "dpd_sent"), "{v:#}");
    assert_eq!(
        count(&v, "failed_timeout"),
        count(&before, "failed_timeout") + 1,
        "{v:#}"
    );
    assert_eq!(
        count(&v, "children_removed"),
        count(&before, "children_removed") + 1,
        "{v:#}"
    );
    // The IKE SA and its child are gone: from `show ike` (an SA the initiating peer
    // starts again holds no child), from the fast path, from the metrics.
    for sa in v["sas"].as_array().unwrap() {
        assert_ne!(sa["spi_i"], first["spi_i"], "{what}: {v:#}");
        assert!(sa["children"].as_array().unwrap().is_empty(), "{v:#}");
    }
    assert!(fast_path_sas(l).is_empty(), "{:#?}", fast_path_sas(l));
    let text = cli(l, 1, &["show", "ike", "sa"]);
    assert!(text.contains("0 IKE SAs established"), "{text}");
    let m = metrics(l);
    assert!(
        m.contains("ferrouter_ike_events_total{event=\"dead_peers\"} 1"),
        "{m}"
    );
    assert!(
        gw1_log(l).contains("dead peer"),
        "{what}: the log says why: {}",
        gw1_log(l)
    );
    assert!(!l
        .exec(&l.h1(), &["ping", "-c1", "-W1", "10.2.0.2"])
        .unwrap()
        .status
        .success());
    // charon back: gw1 (start = "initiate") sets the tunnel up again by itself.
    charon.start(None).unwrap();
    charon.load().unwrap();
    let sa = wait_established(l, 1, || format!("charon log:\n{}", charon.log_tail(40)));
    assert_ne!(sa["spi_i"], first["spi_i"], "a new IKE SA: {sa:#}");
    assert_eq!(sa["initiator"], true, "{sa:#}");
    ping_until(l, || format!("charon log:\n{}", charon.log_tail(40)));
    assert_eq!(fast_path_sas(l).len(), 2, "{:#?}", fast_path_sas(l));
    let listing = charon.listing().unwrap();
    assert_eq!((listing.ike, listing.installed), (1, 1), "{listing:?}");
    charon.stop();
    l.stop(1);
}

/// iperf3 (TCP, `secs` seconds) from h1 to h2, `-R` for h2 to h1: its JSON report.
fn iperf3(l: &IpsecLab, extra: &[&str]) -> Value {
    let _server = l
        .spawn(&l.h2(), &["iperf3", "-s", "-1", "-B", lab::ipsec::H2])
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let mut a = vec!["iperf3", "-c", lab::ipsec::H2, "-t", "3", "-J"];
    a.extend_from_slice(extra);
    let o = l.exec(&l.h1(), &a).unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "iperf3 {extra:?}: {out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("iperf3 JSON: {e}: {out}"))
}

/// Bytes and packets of gw1's fast-path SA of `dir`.
fn sa_counts(l: &IpsecLab, dir: &str) -> (u64, u64) {
    fast_path_sas(l)
        .iter()
        .filter(|s| s["direction"] == dir)
        .map(|s| {
            (
                s["bytes"].as_u64().unwrap_or(0),
                s["packets"].as_u64().unwrap_or(0),
            )
        })
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
}

#[test]
fn iperf3_crosses_a_tunnel_keyed_with_strongswan_both_ways() {
    lab::need_tool("iperf3", "iperf3").unwrap_or_else(|e| panic!("{e:#}"));
    let (g, mut charon) = swan_lab("ikp");
    let l = &g.0;
    // strongSwan initiates, ferrouter answers (the other way round is every other test's).
    interop_case(
        l,
        &mut charon,
        0,
        "iperf3",
        &swanctl_conf(l, IKE_P, ESP_P),
        &ferrouter_peer(l, IKE_P, ESP_P, false),
        false,
    );
    for (extra, dir) in [(&[][..], "out"), (&["-R"][..], "in")] {
        let (bytes0, _) = sa_counts(l, dir);
        let v = iperf3(l, extra);
        let got = v["end"]["sum_received"]["bytes"].as_f64().unwrap_or(0.0);
        assert!(got > 1e6, "iperf3 {extra:?} moved {got} bytes: {v:#}");
        // Through gw1's SA of that direction (h1 to h2 leaves by the outbound one).
        let (bytes1, _) = sa_counts(l, dir);
        assert!(
            (bytes1 - bytes0) as f64 >= got,
            "iperf3 {extra:?}: {got} bytes received, {} through gw1's {dir} SA",
            bytes1 - bytes0
        );
    }
    let listing = charon.listing().unwrap();
    assert!(
        listing.packets_in > 1000 && listing.packets_out > 1000,
        "{listing:?}"
    );
    charon.stop();
    l.stop(1);
}

/// Half-open SAs at which ferrouter asks for cookies (`ike::engine`'s default).
const COOKIE_THRESHOLD: u64 = ike::engine::DEFAULT_COOKIE_THRESHOLD as u64;

#[test]
fn an_ike_sa_init_flood_gets_cookies_while_an_established_tunnel_carries_on() {
    use lab::ikeload::{self, Generator, LoadAuth, LoadOptions};
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    let (g, mut charon) = swan_lab("ikc");
    let l = &g.0;
    // gw1: its tunnel to strongSwan, and a second tunnel whose peer answers anyone who
    // proves `load.lab` (road warriors): what a flood from anywhere gets half-open SAs of.
    let extra = format!(
        "{}\n[[ipsec.tunnel]]\nname = \"ipsec1\"\nlocal = \"{}\"\nremote = \"192.0.2.3\"\n\
         \n[[ipsec.peer]]\nname = \"load\"\nlocal = \"{}\"\nremote = \"any\"\nlocal_id = \"gw1.lab\"\n\
         remote_id = \"load.lab\"\npsk = \"ike-psk\"\ntunnel = \"ipsec1\"\nstart = \"respond\"\n",
        ferrouter_peer(l, IKE_P, ESP_P, true),
        l.wan(1),
        l.wan(1)
    );
    let what = "flood";
    let sa = interop_case(
        l,
        &mut charon,
        0,
        what,
        &swanctl_conf(l, IKE_P, ESP_P),
        &extra,
        true,
    );
    // The flood's sources: 32 addresses on the WAN bridge, 8 ports each.
    let sources: Vec<IpAddr> = (100..132)
        .map(|k| IpAddr::V4(Ipv4Addr::new(192, 0, 2, k)))
        .collect();
    for a in &sources {
        l.ip(
            &l.wire(),
            &["addr", "add", &format!("{a}/24"), "dev", "br0"],
        )
        .unwrap();
    }
    let flood = 3 * COOKIE_THRESHOLD as usize;
    let load = LoadOptions {
        responder: SocketAddr::new(l.wan(1).parse().unwrap(), 500),
        sources,
        sockets: 256,
        tunnels: flood,
        rate: None,
        window: flood,
        ike: ikeload::proposal_for(31).unwrap(),
        esp: ikeload::esp_proposal().unwrap(),
        auth: LoadAuth::Psk(lab::ipsec::IKE_PSK.as_bytes().to_vec()),
        local_id: ike::config::parse_id("load.lab").unwrap(),
        remote_id: ike::config::parse_id("gw1.lab").unwrap(),
        retransmit: Duration::from_secs(1),
        tries: 1,
        timeout: Duration::from_secs(10),
        claim_nat: false,
        traffic: 0,
    };
    let before = ike(l, 1);
    // 200 pings at 20 a second (10 s); the flood starts 2 s in.
    let pings = 200;
    let pinger = ping_stream(l, pings);
    std::thread::sleep(Duration::from_secs(2));
    let ns = l.wire();
    let report = std::thread::spawn(move || {
        lab::rfc2544::enter_netns(&ns).unwrap();
        // Key shares made first (the generator's, not what is measured).
        let mut gen = Generator::new(load).unwrap();
        gen.flood(Some(5_000.0), Duration::from_secs(1))
    })
    .join()
    .unwrap();
    let during = ike(l, 1);
    let text = pinger.join().unwrap();
    let v = ike(l, 1);
    let ctx = || {
        format!(
            "{report:?}\n{v:#}\n{text}\ngw1 log:\n{}\ncharon log:\n{}",
            gw1_log(l),
            charon.log_tail(30)
        )
    };
    // Cookies engaged: the half-open SAs stopped at the threshold, every request past it
    // got a cookie (counted by both sides), none got state without one.
    assert_eq!(report.sent, flood as u64, "{}", ctx());
    assert!(
        report.half_open <= COOKIE_THRESHOLD
            && report.half_open + report.cookies >= report.sent * 9 / 10,
        "{}",
        ctx()
    );
    assert!(report.cookies >= COOKIE_THRESHOLD, "{}", ctx());
    assert!(
        count(&v, "cookies_sent") >= count(&before, "cookies_sent") + report.cookies,
        "{}",
        ctx()
    );
    assert!(
        during["half_open"].as_u64().unwrap() <= COOKIE_THRESHOLD,
        "half-open bounded: {}",
        ctx()
    );
    // The established tunnel is untouched: the same IKE SA and child, both ends, and the
    // ping stream through it lost nothing but at most 1 % (a ping is lost when its answer
    // is more than 1 s late: the flood and the tunnel share gw1's WAN queue and this
    // machine's two cores with whatever else runs; the IKE thread, not the fast path,
    // does the flood's key exchanges).
    let received: u32 = text
        .split(", ")
        .find_map(|f| f.strip_suffix(" received"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("ping's summary: {}", ctx()));
    assert!(
        received >= pings - pings / 100,
        "{received} of {pings} pings answered: {}",
        ctx()
    );
    let now = wait_established(l, 1, String::new);
    assert_eq!(
        (&now["spi_i"], &now["spi_r"], &now["children"][0]["spi_in"]),
        (&sa["spi_i"], &sa["spi_r"], &sa["children"][0]["spi_in"]),
        "{}",
        ctx()
    );
    assert_eq!(v["established"], 1, "{}", ctx());
    assert_eq!(count(&v, "failed_timeout"), 0, "{}", ctx());
    let listing = charon.listing().unwrap();
    assert_eq!((listing.ike, listing.installed), (1, 1), "{listing:?}");
    ping_until(l, String::new);
    eprintln!("flood: {report:?}; {received} of {pings} pings answered");
    charon.stop();
    l.stop(1);
}

/// NAT traversal found by IKE through a real NAT (`IpsecLab::nat`: nftables `masquerade
/// random`, so ports are mapped to others) in front of gateway `behind`, nothing forced:
/// the side behind it initiates (the NAT lets nothing in first). IKE moves to port 4500,
/// ESP goes in UDP to the port the NAT mapped, ping crosses both ways, both sides send
/// keepalives, and the wire outside the NAT carries no bare ESP.
fn through_a_nat(tag: &str, behind: u8) {
    lab::need_tool("nft", "nftables").unwrap_or_else(|e| panic!("{e:#}"));
    lab::need_tool("tcpdump", "tcpdump").unwrap_or_else(|e| panic!("{e:#}"));
    let (g, mut charon) = swan_lab_with(tag, |l| {
        l.nat_t = false;
        l.nat = Some(behind);
    });
    let l = &g.0;
    let ferrouter_initiates = behind == 1;
    let what = format!(
        "gw{behind} ({}) behind the NAT",
        if behind == 1 {
            "ferrouter"
        } else {
            "strongSwan"
        }
    );
    // The wire outside the NAT (gw1's link to it, or the NAT's to the wire), from the
    // first IKE message on.
    let (mut dump, file) = common::ipsec::wire_dump(l, "nat.pcap", &["udp or esp"]);
    // charon's keepalives every second (20 s by default) when it is the one behind.
    let sa = interop_case_with(
        l,
        &mut charon,
        0,
        &what,
        "  keep_alive = 1s\n",
        &swanctl_conf(l, IKE_P, ESP_P),
        &ferrouter_peer(l, IKE_P, ESP_P, ferrouter_initiates),
        ferrouter_initiates,
    );
    let v = ike(l, 1);
    assert!(count(&v, "nat_detected") >= 1, "{what}: {v:#}");
    // gw1's IKE SA: from its own address's port 4500 to the other side's public address,
    // at the port the NAT mapped when strongSwan is behind it.
    assert_eq!(sa["local"], format!("{}:4500", l.wan(1)), "{what}: {sa:#}");
    let remote: std::net::SocketAddr = sa["remote"].as_str().unwrap().parse().unwrap();
    assert_eq!(remote.ip().to_string(), l.public(2), "{what}: {sa:#}");
    // h2 to h1 as well (interop_case pinged h1 to h2).
    let o = l
        .exec(&l.h2(), &["ping", "-c3", "-i0.2", "-W1", lab::ipsec::H1])
        .unwrap();
    assert!(
        o.status.success(),
        "{what}: h2 to h1: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        gw1_log(l)
    );
    // The fast path's SAs went in UDP by themselves (the tunnel has no nat_t), to the
    // IKE SA's ports.
    sas_in_udp_to(&fast_path_sas(l), remote.port(), &what);
    let text = cli(l, 1, &["show", "ipsec"]);
    assert!(
        text.contains(&format!("(udp 4500>{})", remote.port())),
        "{text}"
    );
    // Keepalives: a few seconds of them (ferrouter's tunnel keepalive_s = 1, charon's
    // keep_alive = 1s, sent when it has sent nothing else for that long).
    let k0 = count(&v, "keepalives_sent");
    std::thread::sleep(Duration::from_secs(4));
    let v = ike(l, 1);
    assert!(count(&v, "keepalives_sent") >= k0 + 2, "{what}: {v:#}");
    common::ipsec::stop(&mut dump);
    let wire = common::ipsec::read_dump(&file);
    let lines = |pred: &dyn Fn(&str) -> bool| wire.lines().filter(|x| pred(x)).count();
    let ctx = || format!("{what}: the wire:\n{}", lab::swan::tail(&wire, 40));
    assert!(lines(&|x| x.contains("UDP-encap: ESP")) >= 6, "{}", ctx());
    assert_eq!(
        lines(&|x| x.contains(": ESP(") && !x.contains("UDP-encap")),
        0,
        "bare ESP on the wire: {}",
        ctx()
    );
    assert!(
        lines(&|x| x.contains("NONESP-encap: isakmp")) >= 2,
        "IKE on 4500: {}",
        ctx()
    );
    // Keepalives from the side behind the NAT (RFC 3948 §4: it keeps the mapping open;
    // strongSwan sends none when not behind one), out of the NAT's public address; and
    // ferrouter's in any case.
    let keepalive_from = |a: &str| {
        lines(&|x| x.contains("isakmp-nat-keep-alive") && x.contains(&format!("IP {a}.")))
    };
    assert!(keepalive_from(&l.public(behind)) >= 2, "{}", ctx());
    assert!(keepalive_from(&l.public(1)) >= 2, "{}", ctx());
    // strongSwan saw the NAT on the right side.
    let log = std::fs::read_to_string(charon.log()).unwrap_or_default();
    let side = if behind == 2 { "local" } else { "remote" };
    assert!(
        log.contains(&format!("{side} host is behind NAT")),
        "{what}: {}",
        charon.log_tail(40)
    );
    charon.stop();
    l.stop(1);
}

#[test]
fn nat_traversal_with_strongswan_behind_a_linux_nat() {
    through_a_nat("ikn", 2);
}

#[test]
fn nat_traversal_with_ferrouter_behind_a_linux_nat() {
    through_a_nat("ikm", 1);
}

#[test]
fn strongswan_asking_for_a_virtual_ip_gets_one_from_the_pool_and_pings_through_it() {
    virtual_ip_case("ikv", "0.0.0.0", &["10.200.0.0/24"], &["10.200.0.1"]);
}

#[test]
fn strongswan_asking_for_both_families_gets_an_ipv4_and_an_ipv6_virtual_ip() {
    virtual_ip_case(
        "ikw",
        "0.0.0.0,::",
        &["10.200.0.0/24", "fd00:200::/120"],
        &["10.200.0.1", "fd00:200::1"],
    );
}

/// strongSwan on gw2 asks for virtual IPs (`vips`) of gw1, a responder for anyone proving
/// gw2.lab with `pools` (each routed into the tunnel: its SA chosen by destination, the
/// virtual IPs); it must be leased `want` (the pools' first addresses), ping h1 from each
/// through the tunnel, and give them back when it leaves.
fn virtual_ip_case(tag: &str, vips: &str, pools: &[&str], want: &[&str]) {
    let (g, mut charon) = swan_lab(tag);
    let l = &g.0;
    let what = format!("virtual IP (vips = {vips})");
    let v6 = |a: &str| a.contains(':');
    let routes: String = pools
        .iter()
        .map(|p| {
            let via = if v6(p) { "fd00:ff::2" } else { "10.255.0.2" };
            format!("\n[[route]]\nprefix = \"{p}\"\nvia = [\"{via}\"]\n")
        })
        .collect();
    let peer = format!(
        "\n[[ipsec.peer]]\nname = \"rw\"\nlocal = \"{}\"\nremote = \"any\"\nlocal_id = \"gw1.lab\"\n\
         remote_id = \"gw2.lab\"\npsk = \"ike-psk\"\ntunnel = \"ipsec0\"\nstart = \"respond\"\n\
         proposals = [\"{IKE_P}\"]\nesp_proposals = [\"{ESP_P}\"]\npools = {pools:?}\n",
        l.wan(1)
    );
    // strongSwan asks for addresses; its side of the child is then those addresses
    // (local_ts dynamic), and it claims nothing else. h1's IPv6 network too when it asks
    // for an IPv6 address.
    let mut swanctl = swanctl_conf_with(l, IKE_P, ESP_P, &format!("    vips = {vips}\n"))
        .replace("        local_ts = 10.2.0.0/24\n", "");
    if want.iter().any(|a| v6(a)) {
        swanctl = swanctl.replace(
            "remote_ts = 10.1.0.0/24\n",
            &format!(
                "remote_ts = 10.1.0.0/24,{}/64\n",
                lab::ipsec::H1_V6.replace("::2", "::")
            ),
        );
    }
    assert!(!swanctl.contains("local_ts"), "{swanctl}");
    charon
        .write(1, "  install_virtual_ip = yes\n", &swanctl)
        .unwrap();
    charon
        .start(None)
        .unwrap_or_else(|e| panic!("{what}: {e:#}"));
    charon.load().unwrap_or_else(|e| panic!("{what}: {e:#}"));
    // The routes must come before [ipsec] (the peer goes after the tunnel).
    let text = l.config_text(1, &peer);
    let text = text.replacen("\n[ipsec]\n", &format!("{routes}\n\n[ipsec]\n"), 1);
    l.write_config(1, &peer).unwrap();
    std::fs::write(l.config_file(1), &text).unwrap();
    l.start(1, std::path::Path::new(common::bin()))
        .unwrap_or_else(|e| panic!("starting gw1: {e:#}"));
    let also = || {
        format!(
            "{what}\ncharon log:\n{}\ngw1 log:\n{}",
            charon.log_tail(40),
            gw1_log(l)
        )
    };
    charon
        .swanctl(&["--initiate", "--child", "net", "--timeout", "20"])
        .unwrap_or_else(|e| panic!("strongSwan's initiate: {e:#}\n{}", also()));
    let sa = wait_established(l, 1, also);
    // gw1 leased the pools' first addresses and narrowed strongSwan's side to them.
    assert_eq!(sa["virtual_ip"], want.join(", "), "{sa:#}");
    assert_eq!(
        sa["children"][0]["remote_ts"],
        serde_json::json!(want),
        "{sa:#}"
    );
    // strongSwan took them (`[10.200.0.1 fd00:200::1]` beside its address), as its side
    // of the child.
    let listing = charon.swanctl(&["--list-sas"]).unwrap();
    assert!(
        listing.contains(&format!("[{}]", want.join(" "))),
        "strongSwan shows no virtual IPs {want:?}:\n{listing}"
    );
    for a in want {
        let host = format!("{a}/{}", if v6(a) { 128 } else { 32 });
        assert!(listing.contains(&host), "{host}: {listing}");
    }
    let text = cli(l, 1, &["show", "ike", "sa"]);
    assert!(
        text.contains(&format!("virtual IP {}", want.join(", "))),
        "{text}"
    );
    let leased = format!("ferrouter_ike_virtual_ips{{}} {}", want.len());
    assert!(metrics(l).contains(&leased), "{}", metrics(l));
    // A ping from each virtual IP (on gw2, where charon put them) to h1 behind gw1.
    for a in want {
        let (family, to) = if v6(a) {
            ("-6", lab::ipsec::H1_V6)
        } else {
            ("-4", lab::ipsec::H1)
        };
        let mut ok = None;
        for _ in 0..25 {
            let o = l
                .exec(&l.gw(2), &["ping", family, "-c1", "-W1", "-I", a, to])
                .unwrap();
            if o.status.success() {
                ok = Some(o);
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        assert!(
            ok.is_some(),
            "no answer from h1 to the virtual IP {a}:\naddresses on gw2: {}\n{}",
            String::from_utf8_lossy(&l.exec(&l.gw(2), &["ip", "-br", "addr"]).unwrap().stdout),
            also()
        );
    }
    let listing = charon.listing().unwrap();
    assert!(
        listing.packets_in >= want.len() as u64 && listing.packets_out >= want.len() as u64,
        "{listing:?}"
    );
    // strongSwan leaves: the leases go back to the pools.
    charon
        .swanctl(&["--terminate", "--ike", "fr", "--timeout", "10"])
        .unwrap_or_else(|e| panic!("strongSwan's terminate: {e:#}\n{}", also()));
    let t = Instant::now();
    while !metrics(l).contains("ferrouter_ike_virtual_ips{} 0") {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the leases were not released: {:#}\n{}",
            ike(l, 1),
            also()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    charon.stop();
    l.stop(1);
}
