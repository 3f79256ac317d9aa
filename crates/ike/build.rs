//! Whether python3-cryptography is installed, for tests/sk_python.rs: without it that
//! test is reported as ignored, with the reason (the project's rule: no silent skip).

use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(no_py_cryptography)");
    // Probed again when the package directory changes (a missing path reruns every build,
    // so installing it later is noticed).
    println!("cargo::rerun-if-changed=/usr/lib/python3/dist-packages/cryptography/__init__.py");
    println!("cargo::rerun-if-changed=build.rs");
    let ok = Command::new("/usr/bin/python3")
        .args([
            "-c",
            "from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        println!("cargo::rustc-cfg=no_py_cryptography");
    }
}
