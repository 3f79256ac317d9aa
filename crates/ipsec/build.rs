//! Whether scapy is installed, for tests/scapy.rs: without it that test is reported as
//! ignored, with the reason (the project's rule: no silent skip).

use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(no_scapy)");
    // Probed again when scapy's package directory changes (a missing path reruns every
    // build, so installing scapy later is noticed).
    println!("cargo::rerun-if-changed=/usr/lib/python3/dist-packages/scapy/layers/ipsec.py");
    println!("cargo::rerun-if-changed=build.rs");
    let ok = Command::new("/usr/bin/python3")
        .args(["-c", "import scapy.layers.ipsec, cryptography"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        println!("cargo::rustc-cfg=no_scapy");
    }
}
