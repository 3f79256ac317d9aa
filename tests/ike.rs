//! IKEv2 end to end (issue 27): the tunnel of the IPsec lab (`lab::ipsec`: h1 - gw1 = WAN =
//! gw2 - h2) keyed by IKE instead of by hand, between two `ferrouter run` gateways and
//! between ferrouter and strongSwan's charon (Debian charon-systemd, ESP by
//! kernel-libipsec) with every IKE proposal of the issue, each side initiating in turn.
//! Ping crosses each tunnel; `show ike`, `show ipsec` and the metrics agree; `ipsec
//! terminate` and `initiate` take it down and up.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::ike::*;
use lab::ipsec::{IpsecGuard, IpsecLab};
use lab::swan::Charon;
use serde_json::Value;

/// Two ferrouter gateways keying their tunnel with IKE (`lab::ipsec`'s `ike` lab, no
/// configured SAs), as `f` amends the lab, up.
fn ike_lab(tag: &str, f: impl FnOnce(&mut IpsecLab)) -> IpsecGuard {
    let mut l = lab(tag);
    l.ike = true;
    l.config_sas = false;
    f(&mut l);
    l.up(Path::new(common::bin()))
        .unwrap_or_else(|e| panic!("IPsec lab up: {e:#}"));
    IpsecGuard(l)
}

#[test]
fn two_ferrouter_gateways_key_their_tunnel_with_ike() {
    let g = ike_lab("ike", |_| {});
    let l = &g.0;
    let sa = &wait_established(l, 1, String::new);
    assert_eq!(sa["peer"], "gw2");
    assert_eq!(sa["initiator"], true);
    assert_eq!(sa["remote_id"], "gw2.lab");
    // The default proposal: AES-128-GCM, SHA-256 PRF, curve25519.
    assert!(
        sa["proposal"].as_str().unwrap().contains("aes-128-gcm"),
        "{sa:#}"
    );
    let child = &sa["children"][0];
    ping_until(l, String::new);
    // The fast path sends with the child's outbound SPI and both SAs came from IKE.
    let ipsec = control::api::request_json(&l.socket(1), "ipsec", None).unwrap();
    let out = ipsec["sas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["direction"] == "out")
        .unwrap_or_else(|| panic!("no out SA: {ipsec:#}"));
    assert_eq!(
        format!("{:08x}", out["spi"].as_u64().unwrap()),
        child["spi_out"].as_str().unwrap(),
        "{ipsec:#}"
    );
    assert!(out["packets"].as_u64().unwrap() >= 1, "{ipsec:#}");
    // The responder sees the same SA.
    let sa2 = wait_established(l, 2, String::new);
    assert_eq!(sa2["children"][0]["spi_in"], child["spi_out"]);
    assert_eq!(sa2["initiator"], false);
    // Text and metrics.
    let text = cli(l, 1, &["show", "ike", "sa"]);
    assert!(
        text.contains("established") && text.contains("gw2"),
        "{text}"
    );
    let text = cli(l, 1, &["show", "ike", "child-sa"]);
    assert!(text.contains(child["spi_in"].as_str().unwrap()), "{text}");
    // One peer's SAs, a page of them.
    let text = cli(l, 1, &["show", "ike", "sa", "gw2"]);
    assert!(
        text.contains("gw2") && text.contains("established"),
        "{text}"
    );
    let text = cli(l, 1, &["show", "ike", "sa", "nosuch"]);
    assert!(!text.contains("established  init"), "{text}");
    let get = |q: &str| -> (u16, Value) {
        let c = control::client::Client::new(control::client::Endpoint::Unix(l.socket(1)));
        let r = c.call("GET", &format!("/v1/ike{q}"), None).unwrap();
        (
            r.status,
            serde_json::from_slice(&r.body).unwrap_or(Value::Null),
        )
    };
    let (st, v) = get("?peer=gw2&limit=0");
    assert_eq!(
        (st, v["total"].as_u64(), v["sas"].as_array().map(Vec::len)),
        (200, Some(1), Some(0)),
        "{v:#}"
    );
    let (st, v) = get("?peer=nosuch");
    assert_eq!((st, v["total"].as_u64()), (200, Some(0)), "{v:#}");
    let (st, v) = get("?offset=1");
    assert_eq!(
        (st, v["total"].as_u64(), v["sas"].as_array().map(Vec::len)),
        (200, Some(1), Some(0)),
        "{v:#}"
    );
    let (st, v) = get("?bogus=1");
    assert_eq!(st, 400, "{v:#}");
    let text = cli(l, 2, &["show", "ike", "summary"]);
    assert!(
        text.contains("1 IKE SAs established, 0 half-open; 1 child SAs"),
        "{text}"
    );
    let summary = control::api::request_json(&l.socket(2), "ike", Some("summary")).unwrap();
    assert_eq!(summary["child_sas"], 1, "{summary:#}");
    assert!(
        summary["counters"]["established"].as_u64() >= Some(1),
        "{summary:#}"
    );
    let c = control::client::Client::new(control::client::Endpoint::Unix(l.socket(1)));
    let m = String::from_utf8_lossy(&c.call("GET", "/metrics", None).unwrap().body).into_owned();
    assert!(
        m.contains("ferrouter_ike_sas{state=\"established\"} 1"),
        "{m}"
    );
    // terminate: both ends lose the SA and its child SAs, the tunnel goes quiet.
    let out = cli(l, 1, &["ipsec", "terminate", "gw2"]);
    assert!(out.contains("1 IKE SA(s) deleted"), "{out}");
    let t = Instant::now();
    while ike(l, 2)["established"] != 0 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "gw2 kept its SA: {:#}",
            ike(l, 2)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(ike(l, 1)["established"], 0);
    assert!(!l
        .exec(&l.h1(), &["ping", "-c1", "-W1", "10.2.0.2"])
        .unwrap()
        .status
        .success());
    let ipsec = control::api::request_json(&l.socket(2), "ipsec", None).unwrap();
    assert!(ipsec["sas"].as_array().unwrap().is_empty(), "{ipsec:#}");
    // initiate: back up.
    let out = cli(l, 1, &["ipsec", "initiate", "gw2"]);
    assert!(out.contains("initiating"), "{out}");
    wait_established(l, 1, String::new);
    ping_until(l, String::new);
}

/// IKE between gateways whose WAN addresses are on a VLAN sub-interface (`wan.100`): the
/// exchanges go through the sub-interface's TAP, and the children's ESP comes tagged and is
/// decrypted in the fast path.
#[test]
fn ike_keys_a_tunnel_between_vlan_sub_interfaces() {
    let g = ike_lab("ikv", |l| l.vlan = true);
    let l = &g.0;
    let sa = &wait_established(l, 1, String::new);
    assert_eq!(sa["peer"], "gw2");
    ping_until(l, String::new);
    let ipsec = control::api::request_json(&l.socket(2), "ipsec", None).unwrap();
    let inbound = ipsec["sas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["direction"] == "in")
        .unwrap_or_else(|| panic!("no in SA: {ipsec:#}"));
    assert!(inbound["packets"].as_u64().unwrap() >= 1, "{ipsec:#}");
}

#[test]
fn ferrouter_and_strongswan_negotiate_every_proposal_each_side_initiating() {
    let (g, mut charon) = swan_lab("iks");
    let l = &g.0;
    let cases = [
        ("aes128gcm16-prfsha256-curve25519", "aes128gcm16"),
        ("aes256gcm16-prfsha384-ecp384", "aes256gcm16"),
        ("chacha20poly1305-prfsha256-ecp256", "chacha20poly1305"),
        ("aes256-sha256-prfsha256-modp2048", "aes256-sha256"),
        ("aes128-sha512-prfsha512-curve25519", "aes128-sha1"),
        ("aes256gcm16-prfsha256-ecp256", "aes256-sha512"),
    ];
    for (i, (ike_p, esp_p)) in cases.iter().enumerate() {
        let ferrouter_initiates = i % 2 == 0;
        let what = format!(
            "case {i}: IKE {ike_p}, ESP {esp_p}, initiator {}",
            initiator(ferrouter_initiates)
        );
        let sa = interop_case(
            l,
            &mut charon,
            i,
            &what,
            &swanctl_conf(l, ike_p, esp_p),
            &ferrouter_peer(l, ike_p, esp_p, ferrouter_initiates),
            ferrouter_initiates,
        );
        assert_eq!(
            sa["children"][0]["local_ts"][0], "10.1.0.0-10.1.0.255",
            "{what}: narrowed by strongSwan: {sa:#}"
        );
        let name = ike::config::parse_ike_proposal(ike_p)
            .unwrap()
            .encr
            .esp_name();
        assert!(
            sa["proposal"].as_str().unwrap().starts_with(&name),
            "{what}: {sa:#}"
        );
    }
    charon.stop();
    l.stop(1);
}

/// The certificate fixtures of the `ike` crate (20-year lifetimes, made by their make.sh).
const CERTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/crates/ike/tests/certs");

/// gw1's peer with certificates: `cert` (with its intermediate) and its key, trusting the
/// fixtures' root CA, expecting strongSwan's certificate `swan_cert` (its subject DN).
fn ferrouter_cert_peer(l: &IpsecLab, cert: &str, swan_cert: &str, initiate: bool) -> String {
    ferrouter_cert_peer_for(l, cert, &swan_dn(swan_cert), initiate)
}

fn swan_dn(cert: &str) -> String {
    format!("C=CH, O=ferrouter test, CN={cert}.example")
}

/// The same, expecting `remote_dn`.
fn ferrouter_cert_peer_for(l: &IpsecLab, cert: &str, remote_dn: &str, initiate: bool) -> String {
    ferrouter_cert_peer_ids(
        l,
        &format!("{cert}-chain.pem"),
        cert,
        "",
        &format!("dn:{remote_dn}"),
        initiate,
    )
}

/// The same with the fixture files `cert_file` and `{key}.key.pem`, `local_id` (none if
/// empty: the certificate's subject) and `remote_id`.
fn ferrouter_cert_peer_ids(
    l: &IpsecLab,
    cert_file: &str,
    key: &str,
    local_id: &str,
    remote_id: &str,
    initiate: bool,
) -> String {
    use std::os::unix::fs::PermissionsExt;
    // The key must be its owner's only; git keeps the fixtures 0644.
    let key_path = l.dir.join(format!("gw1-{key}.key.pem"));
    std::fs::copy(format!("{CERTS}/{key}.key.pem"), &key_path).unwrap();
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let local_id = if local_id.is_empty() {
        String::new()
    } else {
        format!("local_id = \"{local_id}\"\n")
    };
    format!(
        "\n[[ipsec.peer]]\nname = \"swan\"\nlocal = \"{}\"\nremote = \"{}\"\n\
         {local_id}remote_id = \"{remote_id}\"\nauth = \"pubkey\"\n\
         cert = \"{CERTS}/{cert_file}\"\nprivate_key = \"{}\"\nca = [\"{CERTS}/root.pem\"]\n\
         tunnel = \"ipsec0\"\nstart = \"{}\"\nproposals = [\"aes128gcm16-prfsha256-curve25519\"]\n\
         esp_proposals = [\"aes128gcm16\"]\n",
        l.wan(1),
        l.public(2),
        key_path.display(),
        if initiate { "initiate" } else { "respond" }
    )
}

/// charon's side: its certificate `cert` (issued by the root), the root as its CA, gw1's
/// certificate `fr_cert` expected (by its subject DN); its certificate sent when asked
/// (the CERTREQ ferrouter sends).
fn swanctl_cert_conf(l: &IpsecLab, cert: &str, fr_cert: &str) -> String {
    swanctl_cert_conf_with(
        l,
        &format!("{cert}.pem"),
        &format!("{cert}.key.pem"),
        fr_cert,
        "",
    )
}

/// The same with the fixture files `cert_file` and `key_file` (the key copied into
/// `private/` next to the swanctl.conf, where `swanctl --load-all --file` loads keys from).
/// `extra`: more settings of the connection (`fragmentation = force`).
fn swanctl_cert_conf_with(
    l: &IpsecLab,
    cert_file: &str,
    key_file: &str,
    fr_cert: &str,
    extra: &str,
) -> String {
    swanctl_cert_conf_ids(
        l,
        cert_file,
        key_file,
        "",
        &format!("C=CH, O=ferrouter test, CN={fr_cert}.example"),
        extra,
    )
}

/// The same with charon's `local_id` (none if empty: its certificate's subject) and the
/// `remote_id` it expects of gw1.
fn swanctl_cert_conf_ids(
    l: &IpsecLab,
    cert_file: &str,
    key_file: &str,
    local_id: &str,
    remote_id: &str,
    extra: &str,
) -> String {
    let local_id = if local_id.is_empty() {
        String::new()
    } else {
        format!("      id = \"{local_id}\"\n")
    };
    let private = l.dir.join("private");
    let _ = std::fs::remove_dir_all(&private);
    std::fs::create_dir_all(&private).unwrap();
    std::fs::copy(format!("{CERTS}/{key_file}"), private.join(key_file)).unwrap();
    format!(
        "connections {{\n  fr {{\n    version = 2\n    local_addrs = {}\n    remote_addrs = {}\n    proposals = aes128gcm16-prfsha256-curve25519\n{encap}{extra}\
         \x20   local {{\n      auth = pubkey\n      certs = {CERTS}/{cert_file}\n{local_id}    }}\n\
         \x20   remote {{\n      auth = pubkey\n      id = \"{remote_id}\"\n      cacerts = {CERTS}/root.pem\n    }}\n\
         \x20   children {{\n      net {{\n        mode = tunnel\n        esp_proposals = aes128gcm16\n        local_ts = 10.2.0.0/24\n        remote_ts = 10.1.0.0/24\n      }}\n    }}\n  }}\n}}\n\
         authorities {{\n  root {{\n    cacert = {CERTS}/root.pem\n  }}\n}}\n",
        l.wan(2),
        l.public(1),
        encap = encap(l),
    )
}

#[test]
fn ferrouter_and_strongswan_authenticate_with_certificates_each_side_initiating() {
    let (g, mut charon) = swan_lab("ikc");
    let l = &g.0;
    // (ferrouter's certificate, with the intermediate CA; strongSwan's, from the root)
    let cases = [
        ("p256", "p384"),
        ("p256", "p384"),
        ("rsa2048", "ed25519"),
        ("rsa2048", "ed25519"),
    ];
    for (i, (fr_cert, swan_cert)) in cases.iter().enumerate() {
        let ferrouter_initiates = i % 2 == 0;
        let what = format!(
            "case {i}: ferrouter {fr_cert}, strongSwan {swan_cert}, initiator {}",
            initiator(ferrouter_initiates)
        );
        let sa = interop_case(
            l,
            &mut charon,
            i,
            &what,
            &swanctl_cert_conf(l, swan_cert, fr_cert),
            &ferrouter_cert_peer(l, fr_cert, swan_cert, ferrouter_initiates),
            ferrouter_initiates,
        );
        assert_eq!(
            sa["remote_id"],
            format!("dn:C=CH, O=ferrouter test, CN={swan_cert}.example"),
            "{what}: {sa:#}"
        );
        // strongSwan checked ferrouter's chain (through the intermediate) and signature.
        let log = std::fs::read_to_string(charon.log()).unwrap_or_default();
        assert!(
            log.contains(&format!(
                "authentication of 'C=CH, O=ferrouter test, CN={fr_cert}.example' with"
            )) && log.contains("successful"),
            "{what}: {}",
            charon.log_tail(40)
        );
    }
    // A CA gw1 does not trust: strongSwan initiates, ferrouter refuses and counts it.
    charon.stop();
    charon
        .write(
            1,
            "",
            &swanctl_cert_conf_with(l, "untrusted.der", "p384.key.pem", "p256", ""),
        )
        .unwrap();
    charon.start(None).unwrap();
    charon.load().unwrap();
    let extra = ferrouter_cert_peer_for(l, "p256", "C=CH, O=elsewhere, CN=p384.example", false);
    let f = l.dir.join("gw1-cert-untrusted.toml");
    std::fs::write(&f, l.config_text(1, &extra)).unwrap();
    cli(l, 1, &["config", "apply", f.to_str().unwrap()]);
    let before = ike(l, 1)["counters"]["failed_authentication"]
        .as_u64()
        .unwrap();
    assert!(charon
        .swanctl(&["--initiate", "--child", "net", "--timeout", "10"])
        .is_err());
    let v = ike(l, 1);
    assert_eq!(v["established"], 0, "{v:#}");
    assert_eq!(
        v["counters"]["failed_authentication"].as_u64().unwrap(),
        before + 1,
        "{v:#}"
    );
    let log = std::fs::read_to_string(l.log_file(1)).unwrap_or_default();
    assert!(
        log.contains("issuer is not trusted"),
        "gw1 log:\n{}",
        lab::swan::tail(&log, 20)
    );
    assert!(
        charon.log_tail(40).contains("AUTHENTICATION_FAILED"),
        "{}",
        charon.log_tail(40)
    );
    charon.stop();
    l.stop(1);
}

#[test]
fn ferrouter_and_strongswan_authenticate_email_identities_with_certificates() {
    // email.der: subjectAltNames user@example.org and Second.User@Example.ORG (the
    // ike crate's make.sh), with p256's key.
    let (g, mut charon) = swan_lab("ikb");
    let l = &g.0;
    // (strongSwan's certificate, key and ID; ferrouter's certificate file, key and ID;
    // ferrouter initiates)
    let cases = [
        // strongSwan proves an email address; ferrouter expects it.
        (
            "email.der",
            "p256",
            "user@example.org",
            "p256-chain.pem",
            "p256",
            "",
            false,
        ),
        // The domain in another case: the same address (RFC 5280 §7.5).
        (
            "email.der",
            "p256",
            "user@EXAMPLE.org",
            "p256-chain.pem",
            "p256",
            "",
            true,
        ),
        // ferrouter proves one: its config accepts the certificate for it.
        (
            "p384.pem",
            "p384",
            "",
            "email.der",
            "p256",
            "user@example.org",
            true,
        ),
    ];
    for (i, &(swan_cert, swan_key, swan_id, fr_cert, fr_key, fr_id, ferrouter_initiates)) in
        cases.iter().enumerate()
    {
        let what = format!(
            "case {i}: strongSwan {swan_cert} as `{swan_id}`, ferrouter {fr_cert} as \
             `{fr_id}`, initiator {}",
            initiator(ferrouter_initiates)
        );
        let swan_expects = if fr_id.is_empty() {
            swan_dn("p256")
        } else {
            fr_id.to_string()
        };
        let fr_expects = if swan_id.is_empty() {
            format!("dn:{}", swan_dn(swan_key))
        } else {
            swan_id.to_string()
        };
        let sa = interop_case(
            l,
            &mut charon,
            i,
            &what,
            &swanctl_cert_conf_ids(
                l,
                swan_cert,
                &format!("{swan_key}.key.pem"),
                swan_id,
                &swan_expects,
                "",
            ),
            &ferrouter_cert_peer_ids(l, fr_cert, fr_key, fr_id, &fr_expects, ferrouter_initiates),
            ferrouter_initiates,
        );
        assert_eq!(sa["remote_id"], fr_expects, "{what}: {sa:#}");
        if !fr_id.is_empty() {
            // strongSwan checked ferrouter's ID against its certificate.
            let log = std::fs::read_to_string(charon.log()).unwrap_or_default();
            assert!(
                log.contains(&format!("authentication of '{fr_id}' with"))
                    && log.contains("successful"),
                "{what}: {}",
                charon.log_tail(40)
            );
        }
    }
    // strongSwan sends `USER@example.org` for the certificate of user@example.org (it
    // compares addresses without regard to case); ferrouter compares the local part
    // exactly (RFC 5280 §7.5), refuses it and counts it.
    charon.stop();
    charon
        .write(
            1,
            "",
            &swanctl_cert_conf_ids(
                l,
                "email.der",
                "p256.key.pem",
                "USER@example.org",
                &swan_dn("p256"),
                "",
            ),
        )
        .unwrap();
    charon.start(None).unwrap();
    charon.load().unwrap();
    let extra = ferrouter_cert_peer_ids(l, "p256-chain.pem", "p256", "", "USER@example.org", false);
    let f = l.dir.join("gw1-email-mismatch.toml");
    std::fs::write(&f, l.config_text(1, &extra)).unwrap();
    cli(l, 1, &["config", "apply", f.to_str().unwrap()]);
    let before = count(&ike(l, 1), "failed_authentication");
    assert!(charon
        .swanctl(&["--initiate", "--child", "net", "--timeout", "10"])
        .is_err());
    let v = ike(l, 1);
    assert_eq!(v["established"], 0, "{v:#}");
    assert_eq!(count(&v, "failed_authentication"), before + 1, "{v:#}");
    let log = std::fs::read_to_string(l.log_file(1)).unwrap_or_default();
    assert!(
        log.contains("identity mismatch: the certificate is not for identity USER@example.org"),
        "gw1 log:\n{}",
        lab::swan::tail(&log, 20)
    );
    assert!(
        charon.log_tail(40).contains("AUTHENTICATION_FAILED"),
        "{}",
        charon.log_tail(40)
    );
    charon.stop();
    l.stop(1);
}

#[test]
fn child_sas_rekey_under_traffic_without_loss_whichever_side_asks() {
    let (g, mut charon) = swan_lab("ikr");
    let l = &g.0;
    let (ike_p, esp_p) = ("aes128gcm16-prfsha256-curve25519", "aes128gcm16");
    // ferrouter's child lifetime 12 s: it rekeys at 90 % of it, 10.8 s in.
    let peer = ferrouter_peer(l, ike_p, esp_p, true) + "child_lifetime_s = 12\n";
    let sa = interop_case(
        l,
        &mut charon,
        0,
        "rekey",
        &swanctl_conf(l, ike_p, esp_p),
        &peer,
        true,
    );
    let first = sa["children"][0]["spi_in"].as_str().unwrap().to_string();
    // 16 s of ping at 20 per second while strongSwan rekeys (at 3 s) and ferrouter does.
    let h1 = l.h1();
    let pinger = std::thread::spawn(move || {
        Command::new("ip")
            .args([
                "netns", "exec", &h1, "ping", "-c", "320", "-i", "0.05", "-W", "1", "10.2.0.2",
            ])
            .output()
            .unwrap()
    });
    std::thread::sleep(Duration::from_secs(3));
    charon
        .swanctl(&["--rekey", "--child", "net"])
        .unwrap_or_else(|e| panic!("strongSwan's rekey: {e:#}"));
    let o = pinger.join().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let v = ike(l, 1);
    assert!(
        text.contains("320 packets transmitted, 320 received"),
        "{text}\n{v:#}\ncharon log:\n{}",
        charon.log_tail(40)
    );
    assert!(
        v["counters"]["child_rekeys"].as_u64().unwrap() >= 2,
        "one rekey each way: {v:#}\ncharon log:\n{}",
        charon.log_tail(60)
    );
    // One child left on each side, a new one; the fast path holds its two SAs only.
    let sa = wait_established(l, 1, String::new);
    let children = sa["children"].as_array().unwrap();
    assert_eq!(children.len(), 1, "{sa:#}");
    assert_ne!(children[0]["spi_in"], first.as_str());
    let ipsec = control::api::request_json(&l.socket(1), "ipsec", None).unwrap();
    let dirs: Vec<&str> = ipsec["sas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["direction"].as_str().unwrap())
        .collect();
    assert_eq!(dirs.len(), 2, "old SAs removed: {ipsec:#}");
    let listing = charon.listing().unwrap();
    assert_eq!(listing.installed, 1, "{listing:?}\n{}", charon.log_tail(40));
    charon.stop();
    l.stop(1);
}

#[test]
fn ike_sa_rekeys_under_traffic_without_loss_whichever_side_asks() {
    let (g, mut charon) = swan_lab("ikk");
    let l = &g.0;
    let (ike_p, esp_p) = ("aes128gcm16-prfsha256-curve25519", "aes128gcm16");
    // 1. strongSwan rekeys the IKE SA ferrouter set up, every 2 to 3 s: each rekey after
    //    the first is a request on the SA the previous one made.
    let peer = ferrouter_peer(l, ike_p, esp_p, true);
    let conf = swanctl_conf_with(
        l,
        ike_p,
        esp_p,
        "    rekey_time = 3s\n    over_time = 30s\n    rand_time = 1s\n",
    );
    let what = "strongSwan rekeys the IKE SA";
    let sa = interop_case(l, &mut charon, 0, what, &conf, &peer, true);
    let swan_log = |c: &Charon| format!("charon log:\n{}", c.log_tail(40));
    let first = (sa["spi_i"].clone(), sa["spi_r"].clone());
    let child = sa["children"][0]["spi_in"].clone();
    let text = ping_stream(l, 140).join().unwrap();
    let v = ike(l, 1);
    assert!(
        text.contains("140 packets transmitted, 140 received"),
        "{what}: {text}\n{v:#}\n{}",
        swan_log(&charon)
    );
    assert!(
        count(&v, "ike_rekeys") >= 2,
        "{what}: {v:#}\n{}",
        swan_log(&charon)
    );
    assert_eq!(
        count(&v, "failed_timeout") + count(&v, "dropped_integrity"),
        0,
        "{what}: {v:#}"
    );
    let sa = wait_established(l, 1, String::new);
    assert_ne!(
        (sa["spi_i"].clone(), sa["spi_r"].clone()),
        first,
        "{what}: {sa:#}"
    );
    assert_eq!(sa["initiator"], false, "{what}: strongSwan asked: {sa:#}");
    let children = sa["children"].as_array().unwrap();
    assert_eq!(children.len(), 1, "{what}: {sa:#}");
    assert_eq!(
        children[0]["spi_in"], child,
        "{what}: the child SA moved: {sa:#}"
    );
    // A Delete on the SA of the last rekey: charon drops it.
    let out = cli(l, 1, &["ipsec", "terminate", "swan"]);
    assert!(out.contains("IKE SA(s) deleted"), "{what}: {out}");
    let t = Instant::now();
    while charon.listing().unwrap().ike != 0 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{what}: charon kept its SA: {}",
            swan_log(&charon)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // 2. ferrouter rekeys the IKE SA strongSwan set up (ike_lifetime_s 10: at 90 to 95 %
    //    of it as the responder), and checks liveness after 2 s of IKE silence.
    let peer = ferrouter_peer(l, ike_p, esp_p, false) + "ike_lifetime_s = 10\ndpd_s = 2\n";
    let what = "ferrouter rekeys the IKE SA";
    let before = count(&ike(l, 1), "ike_rekeys");
    let sa = interop_case(
        l,
        &mut charon,
        1,
        what,
        &swanctl_conf(l, ike_p, esp_p),
        &peer,
        false,
    );
    let first = (sa["spi_i"].clone(), sa["spi_r"].clone());
    let text = ping_stream(l, 220).join().unwrap();
    let v = ike(l, 1);
    assert!(
        text.contains("220 packets transmitted, 220 received"),
        "{what}: {text}\n{v:#}\n{}",
        swan_log(&charon)
    );
    assert!(
        count(&v, "ike_rekeys") > before,
        "{what}: {v:#}\n{}",
        swan_log(&charon)
    );
    let sa = wait_established(l, 1, String::new);
    assert_ne!(
        (sa["spi_i"].clone(), sa["spi_r"].clone()),
        first,
        "{what}: {sa:#}"
    );
    assert_eq!(sa["initiator"], true, "{what}: ferrouter asked: {sa:#}");
    let listing = charon.swanctl(&["--list-sas"]).unwrap();
    assert!(
        listing.contains(sa["spi_i"].as_str().unwrap()) && charon.listing().unwrap().ike == 1,
        "{what}: {sa:#}\n{listing}\n{}",
        swan_log(&charon)
    );
    // Liveness checks on the new SA: sent, and answered at once (nothing retransmitted).
    let (dpd, again) = (count(&v, "dpd_sent"), count(&v, "retransmitted"));
    std::thread::sleep(Duration::from_millis(2500));
    let v = ike(l, 1);
    assert!(count(&v, "dpd_sent") > dpd, "{what}: {v:#}");
    assert_eq!(
        count(&v, "retransmitted"),
        again,
        "{what}: {v:#}\n{}",
        swan_log(&charon)
    );
    assert_eq!(v["established"], 1, "{what}: {v:#}");
    charon.stop();
    l.stop(1);
}

#[test]
fn large_ike_auth_goes_in_fragments_with_strongswan_each_side_initiating() {
    let (g, mut charon) = swan_lab("ikf");
    let l = &g.0;
    // ferrouter's RSA certificate with its intermediate CA (2 kB of CERTs) in IKE
    // messages of at most 576 bytes of IP; strongSwan's Ed25519 certificate the same way.
    let swan_extra = "  fragment_size = 576\n";
    let conf = swanctl_cert_conf_with(
        l,
        "ed25519.pem",
        "ed25519.key.pem",
        "rsa2048",
        "    fragmentation = force\n",
    );
    for (i, ferrouter_initiates) in [true, false].into_iter().enumerate() {
        let what = format!("fragments, initiator {}", initiator(ferrouter_initiates));
        // gw1 starts with the first case.
        let before = if i == 0 {
            Value::Null
        } else {
            ike(l, 1)["counters"].clone()
        };
        let before = |k: &str| before[k].as_u64().unwrap_or(0);
        let peer = ferrouter_cert_peer(l, "rsa2048", "ed25519", ferrouter_initiates)
            + "fragment_size = 576\n";
        interop_case_with(
            l,
            &mut charon,
            i,
            &what,
            swan_extra,
            &conf,
            &peer,
            ferrouter_initiates,
        );
        let v = ike(l, 1);
        // Our IKE_AUTH message went in fragments, and strongSwan's came in them.
        assert_eq!(
            count(&v, "messages_fragmented"),
            before("messages_fragmented") + 1,
            "{what}: {v:#}"
        );
        assert!(
            count(&v, "fragments_sent") >= before("fragments_sent") + 4,
            "{what}: {v:#}"
        );
        assert_eq!(
            count(&v, "messages_reassembled"),
            before("messages_reassembled") + 1,
            "{what}: {v:#}"
        );
        assert!(
            count(&v, "fragments_received") >= before("fragments_received") + 2,
            "{what}: {v:#}"
        );
        let dropped: u64 = v["counters"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(k, _)| k.starts_with("dropped_"))
            .map(|(_, n)| n.as_u64().unwrap())
            .sum();
        assert_eq!(dropped, 0, "{what}: {v:#}");
        let log = std::fs::read_to_string(charon.log()).unwrap_or_default();
        assert!(
            log.contains("splitting IKE message")
                && log.contains("reassembled fragmented IKE message"),
            "{what}: {}",
            charon.log_tail(40)
        );
    }
    charon.stop();
    l.stop(1);
}
