//! A two-namespace veth lab for port tests and examples: namespace `a` holds `p0`,
//! namespace `b` holds its peer `p1`. Both namespaces are deleted when the lab is dropped,
//! also when a test panics.

#![allow(dead_code)]

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Interface name of the veth end in namespace `a`.
pub const A_IF: &str = "p0";
/// Interface name of the veth end in namespace `b`.
pub const B_IF: &str = "p1";

/// Run `ip args...`, panicking with its stderr on failure.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("run ip (iproute2 must be installed)");
    assert!(
        out.status.success(),
        "ip {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two network namespaces joined by a veth pair, both ends up.
pub struct Lab {
    /// Namespace holding `p0`.
    pub a: String,
    /// Namespace holding `p1`.
    pub b: String,
}

impl Lab {
    /// A fresh lab; `tag` and the pid make the namespace names unique.
    pub fn new(tag: &str, mtu: u32) -> Lab {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // The guard exists before anything is created, so a failing step still cleans up.
        let lab = Lab {
            a: format!("frports-{pid}-{tag}{n}-a"),
            b: format!("frports-{pid}-{tag}{n}-b"),
        };
        ip(&["netns", "add", &lab.a]);
        ip(&["netns", "add", &lab.b]);
        for ns in [&lab.a, &lab.b] {
            // No IPv6 autoconfiguration chatter (MLD, DAD, RS) on the test links.
            let _ = Command::new("ip")
                .args(["netns", "exec", ns, "sysctl", "-qw"])
                .args([
                    "net.ipv6.conf.all.disable_ipv6=1",
                    "net.ipv6.conf.default.disable_ipv6=1",
                ])
                .status();
        }
        ip(&[
            "-n", &lab.a, "link", "add", A_IF, "type", "veth", "peer", "name", B_IF, "netns",
            &lab.b,
        ]);
        let mtu = mtu.to_string();
        ip(&["-n", &lab.a, "link", "set", A_IF, "mtu", &mtu, "up"]);
        ip(&["-n", &lab.b, "link", "set", B_IF, "mtu", &mtu, "up"]);
        lab
    }

    /// Move the calling thread into network namespace `ns` (only this thread).
    pub fn enter(ns: &str) {
        let f = File::open(format!("/var/run/netns/{ns}")).expect("open netns handle");
        // SAFETY: setns on a valid namespace fd; it changes only the calling thread's
        // network namespace.
        let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns {ns}: {}", std::io::Error::last_os_error());
    }

    /// Run `f` on a new thread (so namespace switches never leak into the test harness's
    /// threads); a panic in `f` fails the caller.
    pub fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        std::thread::scope(|s| match s.spawn(f).join() {
            Ok(r) => r,
            Err(e) => std::panic::resume_unwind(e),
        })
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// An Ethernet frame of `len` bytes (at least 18) from `src` to `dst` with EtherType
/// 0x88b5 (local experimental), `seq` in the first four payload bytes and a pattern after.
pub fn frame(dst: [u8; 6], src: [u8; 6], seq: u32, len: usize) -> Vec<u8> {
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&0x88b5u16.to_be_bytes());
    f.extend_from_slice(&seq.to_be_bytes());
    while f.len() < len {
        f.push((f.len() as u32 ^ seq) as u8);
    }
    f.truncate(len.max(18));
    f
}

/// The test EtherType, VLAN tag skipped, if the frame carries one.
pub fn is_test_frame(f: &[u8]) -> bool {
    match f.get(12..14) {
        Some([0x88, 0xb5]) => true,
        Some([0x81, 0x00]) | Some([0x88, 0xa8]) => f.get(16..18) == Some(&[0x88, 0xb5]),
        _ => false,
    }
}
