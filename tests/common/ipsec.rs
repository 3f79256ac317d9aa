//! Helpers of the IPsec end-to-end tests (`tests/ipsec.rs`, `tests/ipsec_policy.rs`): two
//! gateways and their hosts (`lab::ipsec`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lab::ipsec::{IpsecGuard, IpsecLab};
use serde_json::Value;

/// An IPsec lab with a unique name, set up by `f`, started, torn down when the guard
/// drops; `tools` (command, Debian package) must be installed besides.
pub fn up(tag: &str, tools: &[(&str, &str)], f: impl FnOnce(&mut IpsecLab)) -> IpsecGuard {
    lab::preconditions("network namespaces and the gateways' ports", tools)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let mut l = IpsecLab::new(&format!("t{}{tag}", std::process::id() % 10000));
    f(&mut l);
    l.down();
    l.up(Path::new(super::bin()))
        .unwrap_or_else(|e| panic!("IPsec lab up: {e:#}"));
    IpsecGuard(l)
}

/// Run in a namespace of the lab: (success, stdout + stderr).
pub fn sh(l: &IpsecLab, ns: &str, args: &[&str]) -> (bool, String) {
    let o = l.exec(ns, args).unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
    )
}

/// `show ipsec` of gateway `gw`, as JSON.
pub fn ipsec(l: &IpsecLab, gw: u8) -> Value {
    control::api::request_json(&l.socket(gw), "ipsec", None)
        .unwrap_or_else(|e| panic!("show ipsec on gw{gw}: {e:#}"))
}

/// Gateway `gw`'s drops of `feature` under `reason`.
pub fn feature_drops(l: &IpsecLab, gw: u8, feature: &str, reason: &str) -> u64 {
    super::feature_drops_at(&l.socket(gw), feature, reason)
}

/// Ping from `ns` until it answers (the first packets may wait for ARP on the LAN sides).
pub fn ping_until(l: &IpsecLab, ns: &str, dst: &str) {
    for _ in 0..20 {
        if sh(l, ns, &["ping", "-c1", "-W1", dst]).0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!(
        "no answer from {dst} in {ns}: gw1 log:\n{}\ngw2 log:\n{}",
        std::fs::read_to_string(l.log_file(1)).unwrap_or_default(),
        std::fs::read_to_string(l.log_file(2)).unwrap_or_default()
    );
}

/// tcpdump on the WAN's bridge (port to-gw1) into `name` in the lab's directory, matching
/// `filter`, once it listens.
pub fn wire_dump(l: &IpsecLab, name: &str, filter: &[&str]) -> (Child, PathBuf) {
    let dump = l.dir.join(name);
    let child = Command::new("ip")
        .args([
            "netns",
            "exec",
            &l.wire(),
            "tcpdump",
            "-i",
            "to-gw1",
            "-n",
            "-U",
            "-w",
        ])
        .arg(&dump)
        .args(filter)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    (child, dump)
}

/// Stop a tcpdump (it writes what it holds first).
pub fn stop(tcpdump: &mut Child) {
    let _ = Command::new("kill")
        .args(["-INT", &tcpdump.id().to_string()])
        .status();
    let _ = tcpdump.wait();
}

/// What tcpdump reads of a capture file, one packet a line.
pub fn read_dump(dump: &Path) -> String {
    let read = Command::new("tcpdump")
        .args(["-n", "-r"])
        .arg(dump)
        .output()
        .unwrap();
    String::from_utf8_lossy(&read.stdout).into_owned()
}
