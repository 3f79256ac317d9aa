//! The IKE tests' lab (`tests/ike.rs`, `tests/ike_interop.rs`): the IPsec lab keyed by
//! IKE, gw1 a ferrouter and gw2 two ferrouters' peer or strongSwan's charon; `show ike`,
//! the CLI, ping through the tunnel, charon's and ferrouter's configs for each case.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use lab::ipsec::{IpsecGuard, IpsecLab, IKE_PSK};
use lab::swan::Charon;
use serde_json::Value;

pub fn lab(tag: &str) -> IpsecLab {
    lab::preconditions(
        "network namespaces and the gateways' ports",
        &[("ping", "iputils-ping")],
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    let l = IpsecLab::new(&format!("t{}{tag}", std::process::id() % 10000));
    l.down();
    l
}

pub fn ike(l: &IpsecLab, gw: u8) -> Value {
    control::api::request_json(&l.socket(gw), "ike", None)
        .unwrap_or_else(|e| panic!("show ike on gw{gw}: {e:#}"))
}

/// Waits (at most 30 s) for gw's IKE to have an established SA with a child; returns it.
pub fn wait_established(l: &IpsecLab, gw: u8, also: impl Fn() -> String) -> Value {
    let t = Instant::now();
    loop {
        let v = ike(l, gw);
        let up = v["sas"].as_array().and_then(|s| {
            s.iter().find(|a| {
                a["state"] == "established" && !a["children"].as_array().unwrap().is_empty()
            })
        });
        if let Some(sa) = up {
            return sa.clone();
        }
        if t.elapsed() > Duration::from_secs(30) {
            panic!(
                "gw{gw}: no IKE SA with a child after 30 s: {v:#}\ngw{gw} log:\n{}\n{}",
                lab::swan::tail(
                    &std::fs::read_to_string(l.log_file(gw)).unwrap_or_default(),
                    30
                ),
                also()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub fn ping_until(l: &IpsecLab, also: impl Fn() -> String) {
    for _ in 0..25 {
        let o = l
            .exec(&l.h1(), &["ping", "-c1", "-W1", "10.2.0.2"])
            .unwrap();
        if o.status.success() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!(
        "no answer from h2 through the IKE tunnel:\ngw1 log:\n{}\n{}",
        lab::swan::tail(
            &std::fs::read_to_string(l.log_file(1)).unwrap_or_default(),
            30
        ),
        also()
    );
}

pub fn cli(l: &IpsecLab, gw: u8, args: &[&str]) -> String {
    let o = Command::new(super::bin())
        .args(args)
        .arg("--socket")
        .arg(l.socket(gw))
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "ferrouter {args:?}: {out}");
    out
}

/// A peer's config for gw1, talking to strongSwan on gw2.
pub fn ferrouter_peer(l: &IpsecLab, ike: &str, esp: &str, initiate: bool) -> String {
    format!(
        "\n[[ipsec.peer]]\nname = \"swan\"\nlocal = \"{}\"\nremote = \"{}\"\nlocal_id = \"gw1.lab\"\nremote_id = \"gw2.lab\"\npsk = \"ike-psk\"\ntunnel = \"ipsec0\"\nstart = \"{}\"\nproposals = [\"{ike}\"]\nesp_proposals = [\"{esp}\"]\n",
        l.wan(1),
        l.public(2),
        if initiate { "initiate" } else { "respond" }
    )
}

pub fn swanctl_conf(l: &IpsecLab, ike: &str, esp: &str) -> String {
    swanctl_conf_with(l, ike, esp, "")
}

/// The same with `extra` settings in the connection (`rekey_time = 3s`, ...).
pub fn swanctl_conf_with(l: &IpsecLab, ike: &str, esp: &str, extra: &str) -> String {
    format!(
        "connections {{\n  fr {{\n    version = 2\n    local_addrs = {}\n    remote_addrs = {}\n    proposals = {ike}\n{encap}{extra}\
         \x20   local {{\n      auth = psk\n      id = gw2.lab\n    }}\n    remote {{\n      auth = psk\n      id = gw1.lab\n    }}\n\
         \x20   children {{\n      net {{\n        mode = tunnel\n        esp_proposals = {esp}\n        local_ts = 10.2.0.0/24\n        remote_ts = 10.1.0.0/24\n      }}\n    }}\n  }}\n}}\n\
         secrets {{\n  ike-fr {{\n    id-1 = gw1.lab\n    id-2 = gw2.lab\n    secret = \"{IKE_PSK}\"\n  }}\n}}\n",
        l.wan(2),
        l.public(1),
        encap = encap(l),
    )
}

/// charon's `encap = yes` (ESP in UDP forced) when the lab forces it on ferrouter's side.
pub fn encap(l: &IpsecLab) -> &'static str {
    if l.nat_t {
        "    encap = yes\n"
    } else {
        ""
    }
}

/// The interop lab: gw1 a ferrouter (started by the first case), gw2 a Linux router
/// running charon; ESP in UDP on both sides (strongSwan's kernel-libipsec takes nothing
/// else: the tunnel's `nat_t`, charon's `encap`), so IKE moves to port 4500 too.
pub fn swan_lab(tag: &str) -> (IpsecGuard, Charon) {
    swan_lab_with(tag, |_| {})
}

/// The same, the lab changed by `f` before it is built (a NAT in front of a gateway,
/// encapsulation not forced, ...).
pub fn swan_lab_with(tag: &str, f: impl FnOnce(&mut IpsecLab)) -> (IpsecGuard, Charon) {
    lab::ipsecbench::preconditions(&[lab::ipsecbench::Dut::Strongswan])
        .unwrap_or_else(|e| panic!("{e:#}"));
    let mut l = lab(tag);
    l.config_sas = false;
    l.nat_t = true;
    f(&mut l);
    l.build()
        .unwrap_or_else(|e| panic!("building the lab: {e:#}"));
    let g = IpsecGuard(l);
    g.0.exec(&g.0.gw(2), &["sysctl", "-qw", "net.ipv4.ip_forward=1"])
        .unwrap();
    let charon = Charon::new(&g.0.gw(2), &g.0.dir, "2");
    (g, charon)
}

/// One interop case: charon afresh with `swanctl`, gw1 with `peer` (started for case 0,
/// `config apply` after), the chosen side initiating; returns gw1's established SA once
/// ping crosses the tunnel and charon shows its SAs.
pub fn interop_case(
    l: &IpsecLab,
    charon: &mut Charon,
    i: usize,
    what: &str,
    swanctl: &str,
    peer: &str,
    ferrouter_initiates: bool,
) -> Value {
    interop_case_with(l, charon, i, what, "", swanctl, peer, ferrouter_initiates)
}

/// The same with `extra` in charon's strongswan.conf (`fragment_size = 576`, ...).
#[allow(clippy::too_many_arguments)]
pub fn interop_case_with(
    l: &IpsecLab,
    charon: &mut Charon,
    i: usize,
    what: &str,
    extra: &str,
    swanctl: &str,
    peer: &str,
    ferrouter_initiates: bool,
) -> Value {
    charon.stop();
    charon.write(1, extra, swanctl).unwrap();
    charon
        .start(None)
        .unwrap_or_else(|e| panic!("{what}: {e:#}"));
    charon.load().unwrap_or_else(|e| panic!("{what}: {e:#}"));
    if i == 0 {
        l.write_config(1, peer).unwrap();
        l.start(1, Path::new(super::bin()))
            .unwrap_or_else(|e| panic!("starting gw1: {e:#}"));
    } else {
        let f = l.dir.join(format!("gw1-case{i}.toml"));
        std::fs::write(&f, l.config_text(1, peer)).unwrap();
        cli(l, 1, &["config", "apply", f.to_str().unwrap()]);
    }
    if !ferrouter_initiates {
        charon
            .swanctl(&["--initiate", "--child", "net", "--timeout", "20"])
            .unwrap_or_else(|e| {
                panic!(
                    "{what}: strongSwan's initiate: {e:#}\ncharon log:\n{}\ngw1 log:\n{}",
                    charon.log_tail(40),
                    lab::swan::tail(
                        &std::fs::read_to_string(l.log_file(1)).unwrap_or_default(),
                        30
                    )
                )
            });
    }
    let sa = wait_established(l, 1, || {
        format!("{what}\ncharon log:\n{}", charon.log_tail(40))
    });
    assert_eq!(sa["initiator"], ferrouter_initiates, "{what}: {sa:#}");
    assert!(
        sa["local"].as_str().unwrap().ends_with(":4500"),
        "{what}: IKE on 4500: {sa:#}"
    );
    ping_until(l, || {
        format!("{what}\ncharon log:\n{}", charon.log_tail(40))
    });
    let listing = charon.listing().unwrap();
    assert!(
        listing.ike >= 1 && listing.installed >= 1,
        "{what}: {listing:?}"
    );
    assert!(
        listing.packets_in >= 1 && listing.packets_out >= 1,
        "{what}: {listing:?}"
    );
    sa
}

pub fn initiator(ferrouter_initiates: bool) -> &'static str {
    if ferrouter_initiates {
        "ferrouter"
    } else {
        "strongSwan"
    }
}

/// `n` pings from h1 to h2 at 20 a second, in a thread: `ping`'s output once done.
pub fn ping_stream(l: &IpsecLab, n: u32) -> std::thread::JoinHandle<String> {
    let h1 = l.h1();
    std::thread::spawn(move || {
        let o = Command::new("ip")
            .args(["netns", "exec", &h1, "ping", "-c", &n.to_string()])
            .args(["-i", "0.05", "-W", "1", "10.2.0.2"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    })
}

pub fn count(v: &Value, name: &str) -> u64 {
    v["counters"][name].as_u64().unwrap_or(0)
}

/// A gateway's fast-path SAs (`show ipsec`'s `sas`): one each way, in UDP between port
/// 4500 and the peer's `port` (as a NAT mapped it), each having carried at least 3
/// packets. `what` names the case in a failure.
pub fn sas_in_udp_to(sas: &[Value], port: u16, what: &str) {
    let dir = |d: &str| {
        sas.iter()
            .find(|s| s["direction"] == d)
            .cloned()
            .unwrap_or_else(|| panic!("{what}: no {d} SA: {sas:#?}"))
    };
    let (out, inb) = (dir("out"), dir("in"));
    assert_eq!(
        (&out["udp_src_port"], &out["udp_dst_port"]),
        (&Value::from(4500), &Value::from(port)),
        "{what}: {sas:#?}"
    );
    assert_eq!(
        (&inb["udp_src_port"], &inb["udp_dst_port"]),
        (&Value::from(port), &Value::from(4500)),
        "{what}: {sas:#?}"
    );
    assert!(
        out["packets"].as_u64().unwrap() >= 3 && inb["packets"].as_u64().unwrap() >= 3,
        "{what}: {sas:#?}"
    );
}
