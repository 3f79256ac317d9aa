//! Compiles the lab's VLAN host program (bpf/vlan_host.c) with clang's BPF target, once
//! per tag stack the lab uses and direction, into OUT_DIR; `crate::vlan` embeds them.

use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE: &str = "bpf/vlan_host.c";
const HINT: &str = "apt-get install clang libbpf-dev (or run scripts/deps.sh)";

/// (object name, outer TPID, outer VID, inner VID); each is built for egress and ingress.
const STACKS: [(&str, u16, u16, u16); 2] = [
    ("dot1q100", 0x8100, 100, 0),
    ("qinq200_300", 0x88a8, 200, 300),
];

fn main() {
    println!("cargo:rerun-if-changed={SOURCE}");
    println!("cargo:rerun-if-env-changed=CLANG");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    for (name, tpid, outer, inner) in STACKS {
        for (dir, ingress) in [("egress", 0), ("ingress", 1)] {
            let object = out.join(format!("vlan_{name}_{dir}.o"));
            let mut cmd = Command::new(&clang);
            cmd.args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"]);
            // <asm/types.h> lives in Debian's multiarch directory, which clang does not
            // search when it targets BPF.
            if Path::new(&multiarch).is_dir() {
                cmd.arg(format!("-I{multiarch}"));
            }
            cmd.arg(format!("-DOUTER_TPID={tpid}"))
                .arg(format!("-DOUTER_VID={outer}"))
                .arg(format!("-DINNER_VID={inner}"))
                .arg(format!("-DINGRESS={ingress}"));
            cmd.arg("-c").arg(SOURCE).arg("-o").arg(&object);
            let status = cmd.status().unwrap_or_else(|e| {
                panic!("cannot run `{clang}` to compile {SOURCE} ({e}): {HINT}")
            });
            if !status.success() {
                panic!("`{clang}` failed to compile {SOURCE} ({status}); if <bpf/bpf_helpers.h> or <linux/bpf.h> is missing: {HINT}");
            }
        }
    }
}
