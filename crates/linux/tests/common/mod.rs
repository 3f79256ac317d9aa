//! Network namespaces for the end-to-end tests: each test gets its own, entered by the test
//! thread, and always deleted (and left) when the guard drops, pass or fail.

#![allow(dead_code)]

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use linux::{Event, Mirror};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A named network namespace (`ip netns add`), deleted on drop.
pub struct Netns {
    /// Its name under /var/run/netns.
    pub name: String,
    entered_from: Option<File>,
}

impl Netns {
    /// Creates a namespace named after the process, the test and a counter, with `lo` up.
    pub fn new(test: &str) -> Netns {
        let name = format!(
            "frl-{}-{}-{}",
            std::process::id(),
            test,
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(std::process::Stdio::null())
            .status();
        run("ip", &["netns", "add", &name]);
        let ns = Netns {
            name,
            entered_from: None,
        };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// Moves the calling thread into this namespace (until drop).
    pub fn enter(&mut self) {
        let here = File::open("/proc/thread-self/ns/net").expect("open own netns");
        let there = File::open(format!("/var/run/netns/{}", self.name)).expect("open netns");
        // SAFETY: both are open namespace file descriptors; setns affects only this thread.
        let rc = unsafe { libc::setns(there.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
        self.entered_from = Some(here);
    }

    /// Adds an Ethernet-like link that is up with carrier once set up: a `dummy` where the
    /// kernel has the driver, else a veth whose peer (`NAME` + "p") is set up alongside.
    pub fn add_link(&self, name: &str) {
        if self.try_ip(&["link", "add", "name", name, "type", "dummy"]) {
            return;
        }
        let peer = format!("{name}p");
        self.ip(&[
            "link", "add", "name", name, "type", "veth", "peer", "name", &peer,
        ]);
        self.ip(&["link", "set", &peer, "up"]);
    }

    /// Runs `ip -n NAME ARGS`; returns whether it succeeded.
    pub fn try_ip(&self, args: &[&str]) -> bool {
        let mut full = vec!["-n", self.name.as_str()];
        full.extend_from_slice(args);
        Command::new("ip")
            .args(&full)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    }

    /// Runs `ip -n NAME ARGS`, panicking with its stderr if it fails.
    pub fn ip(&self, args: &[&str]) {
        let mut full = vec!["-n", self.name.as_str()];
        full.extend_from_slice(args);
        run("ip", &full);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Some(home) = self.entered_from.take() {
            // SAFETY: `home` is an open namespace file descriptor.
            unsafe { libc::setns(home.as_raw_fd(), libc::CLONE_NEWNET) };
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Runs a command, panicking with its stderr if it fails.
pub fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Polls until `want` matches one of the collected events or `limit` passes; returns all
/// events seen.
pub fn wait_for(
    mirror: &mut Mirror,
    seen: &mut Vec<Event>,
    limit: Duration,
    want: impl Fn(&Event) -> bool,
) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if seen.iter().any(&want) {
            return true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        mirror
            .poll_events(seen, left.min(Duration::from_millis(100)))
            .expect("poll_events");
    }
}
