//! Compiles the XDP program (bpf/xdp_redirect.c) into OUT_DIR with clang's BPF target; the
//! object is embedded in the library with `include_bytes!`.

use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE: &str = "bpf/xdp_redirect.c";
const HINT: &str = "apt-get install clang libbpf-dev (or run scripts/deps.sh)";

fn main() {
    println!("cargo:rerun-if-changed={SOURCE}");
    println!("cargo:rerun-if-env-changed=CLANG");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let object = out.join("xdp_redirect.o");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let mut cmd = Command::new(&clang);
    cmd.args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"]);
    // <linux/types.h> includes <asm/types.h>, which Debian keeps in the multiarch directory
    // that clang does not search when it targets BPF.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    if Path::new(&multiarch).is_dir() {
        cmd.arg(format!("-I{multiarch}"));
    }
    cmd.arg("-c").arg(SOURCE).arg("-o").arg(&object);
    let status = match cmd.status() {
        Ok(s) => s,
        Err(e) => panic!("cannot run `{clang}` to compile the XDP program {SOURCE} ({e}): {HINT}"),
    };
    if !status.success() {
        panic!("`{clang}` failed to compile the XDP program {SOURCE} ({status}); if headers such as <bpf/bpf_helpers.h> or <linux/bpf.h> are missing: {HINT}");
    }
}
