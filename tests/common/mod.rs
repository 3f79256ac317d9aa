//! Helpers shared by the end-to-end test binaries.
#![allow(dead_code)]

use lab::{Guard, Lab};
use serde_json::Value;

/// The binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ferrouter")
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
    control::api::request(&lab.socket(), what, arg).unwrap_or_else(|e| panic!("show {what}: {e:#}"))
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
