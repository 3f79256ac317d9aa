//! The built-in lab: three network namespaces joined by veth links, ferrouter forwarding
//! between them, and the real tools (ping, iperf3) sending real traffic through it.
//!
//! ```text
//!   {p}-h1                       {p}-rtr (ferrouter)                      {p}-h2
//!   eth0 192.0.2.2/24   ──  r1 192.0.2.1/24     r2 198.51.100.1/24  ──  eth0 198.51.100.2/24
//!        2001:db8:1::2/64       2001:db8:1::1/64    2001:db8:2::1/64          2001:db8:2::2/64
//! ```
//! Addresses are documentation ranges, inside namespaces the lab creates and always removes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Address plan.
pub const H1_V4: &str = "192.0.2.2";
/// Router side of h1's link.
pub const R1_V4: &str = "192.0.2.1";
/// h2.
pub const H2_V4: &str = "198.51.100.2";
/// Router side of h2's link.
pub const R2_V4: &str = "198.51.100.1";
/// h1 IPv6.
pub const H1_V6: &str = "2001:db8:1::2";
/// Router side of h1's link, IPv6.
pub const R1_V6: &str = "2001:db8:1::1";
/// h2 IPv6.
pub const H2_V6: &str = "2001:db8:2::2";
/// Router side of h2's link, IPv6.
pub const R2_V6: &str = "2001:db8:2::1";
/// h3 (only in labs with three hosts).
pub const H3_V4: &str = "203.0.113.2";
/// Router side of h3's link.
pub const R3_V4: &str = "203.0.113.1";
/// h3 IPv6.
pub const H3_V6: &str = "2001:db8:3::2";
/// Router side of h3's link, IPv6.
pub const R3_V6: &str = "2001:db8:3::1";

/// One lab instance; names are prefixed so several can coexist.
#[derive(Clone, Debug)]
pub struct Lab {
    /// Namespace/file prefix, e.g. "fr".
    pub prefix: String,
    /// Working directory (config, log, pid).
    pub dir: PathBuf,
    /// Extra top-level config lines (tests use it, e.g. a small netlink buffer).
    pub extra_config: String,
    /// Port backend written into the config: "auto", "af_xdp" or "af_packet".
    pub backend: String,
    /// Router workers; the veth links get as many queues.
    pub workers: usize,
    /// A third host, h3 on the router's r3 (203.0.113.0/24, 2001:db8:3::/64): a second
    /// egress, e.g. for a secondary BGP peer.
    pub h3: bool,
    /// VLANs on h2's link (see [`vlan`]): r2 becomes a trunk through a switch to h2
    /// (untagged), hv (802.1Q 100) and hq (QinQ 802.1ad 200 / 802.1Q 300), and the router
    /// gets the sub-interfaces r2.100 and r2.q.
    pub vlans: bool,
    /// IP MTU of every lab link (both ends); `None` keeps veth's default of 1500. Jumbo
    /// frames: 9000.
    pub mtu: Option<u32>,
}

/// Which of `names` exist as network namespaces.
/// SIGKILL every process in namespace `ns` but this one (a namespace lives on while a
/// process is in it).
pub fn kill_namespace_pids(ns: &str) {
    if let Ok(o) = Command::new("ip").args(["netns", "pids", ns]).output() {
        for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
            if pid != std::process::id().to_string() {
                let _ = Command::new("kill").args(["-KILL", pid]).status();
            }
        }
    }
}

/// Kill the processes started under `dir` (daemons whose command line names it) and every
/// process in `namespaces`, then delete those that exist and `dir`: a bench's or a test's
/// namespaces gone whatever ran in them.
pub fn remove_namespaces(dir: &Path, namespaces: &[String]) {
    let _ = Command::new("pkill")
        .args(["-KILL", "-f"])
        .arg(format!("{}/", dir.display()))
        .status();
    for ns in existing_namespaces(namespaces) {
        kill_namespace_pids(&ns);
        let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    }
    let _ = std::fs::remove_dir_all(dir);
}

pub(crate) fn existing_namespaces(names: &[String]) -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    out.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| names.iter().any(|x| x == n))
        .map(String::from)
        .collect()
}

/// Run a command, failing with its stderr.
pub(crate) fn run(cmd: &mut Command) -> Result<Output> {
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out)
}

fn ip(args: &[&str]) -> Result<()> {
    run(Command::new("ip").args(args)).map(|_| ())
}

impl Lab {
    /// A lab named `prefix` working in /run/ferrouter-lab/PREFIX.
    pub fn new(prefix: &str) -> Lab {
        Lab {
            prefix: prefix.to_string(),
            dir: PathBuf::from(format!("/run/ferrouter-lab/{prefix}")),
            extra_config: String::new(),
            backend: "auto".into(),
            workers: 1,
            h3: false,
            vlans: false,
            mtu: None,
        }
    }
    /// Namespace of h1.
    pub fn h1(&self) -> String {
        format!("{}-h1", self.prefix)
    }
    /// Namespace of h2.
    pub fn h2(&self) -> String {
        format!("{}-h2", self.prefix)
    }
    /// Namespace of h3 (when [`Lab::h3`] is set).
    pub fn h3(&self) -> String {
        format!("{}-h3", self.prefix)
    }
    /// Namespace of the router.
    pub fn rtr(&self) -> String {
        format!("{}-rtr", self.prefix)
    }
    /// The daemon's control socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("ferrouter.sock")
    }
    /// The daemon's pid file.
    pub fn pid_file(&self) -> PathBuf {
        self.dir.join("ferrouter.pid")
    }
    /// The daemon's log.
    pub fn log_file(&self) -> PathBuf {
        self.dir.join("ferrouter.log")
    }

    /// Run a command inside namespace `ns`.
    pub fn exec(&self, ns: &str, args: &[&str]) -> Result<Output> {
        run(Command::new("ip").args(["netns", "exec", ns]).args(args))
    }

    /// Start a command inside namespace `ns` in the background (output discarded).
    pub fn spawn(&self, ns: &str, args: &[&str]) -> Result<Background> {
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {args:?} in {ns}"))?;
        Ok(Background(child))
    }

    /// Start a one-shot iperf3 server on h2 and give it time to listen.
    pub fn iperf3_server(&self, bind: &str) -> Result<Background> {
        let server = self.spawn(&self.h2(), &["iperf3", "-s", "-1", "-B", bind])?;
        std::thread::sleep(Duration::from_millis(300));
        Ok(server)
    }

    /// Run a command inside `ns`, returning its output whatever the exit status.
    pub fn exec_status(&self, ns: &str, args: &[&str]) -> Result<Output> {
        Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .output()
            .with_context(|| format!("cannot run {args:?} in {ns}"))
    }

    fn ns_in(&self, ns: &str, args: &[&str]) -> Result<()> {
        let mut a = vec!["-n", ns];
        a.extend_from_slice(args);
        ip(&a)
    }

    /// Which of the lab's namespaces exist.
    pub fn existing(&self) -> Vec<String> {
        existing_namespaces(&[
            self.h1(),
            self.h2(),
            self.h3(),
            self.rtr(),
            self.switch(),
            self.hv(),
            self.hq(),
        ])
    }

    /// The hosts' namespaces and the router's interface toward each.
    fn hosts(
        &self,
    ) -> Vec<(
        String,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
    )> {
        let mut v = vec![
            (self.h1(), "r1", H1_V4, H1_V6, R1_V4, R1_V6),
            (self.h2(), "r2", H2_V4, H2_V6, R2_V4, R2_V6),
        ];
        if self.h3 {
            v.push((self.h3(), "r3", H3_V4, H3_V6, R3_V4, R3_V6));
        }
        v
    }

    /// Build the topology (namespaces, links, addresses, routes) without starting ferrouter.
    pub fn build(&self) -> Result<()> {
        if !self.existing().is_empty() {
            bail!(
                "lab {} already exists (namespaces {:?}); run `ferrouter-lab lab down` first",
                self.prefix,
                self.existing()
            );
        }
        if let Some(m) = self.mtu {
            if !(1280..=9000).contains(&m) {
                bail!("lab MTU {m}: expected 1280..=9000");
            }
            if self.vlans {
                bail!("a lab MTU other than the default and VLANs together are not supported");
            }
        }
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        let rtr = self.rtr();
        let hosts = self.hosts();
        let mut all: Vec<String> = hosts.iter().map(|h| h.0.clone()).collect();
        all.push(rtr.clone());
        if self.vlans {
            all.extend([self.switch(), self.hv(), self.hq()]);
        }
        for ns in &all {
            ip(&["netns", "add", ns])?;
            // No duplicate address detection in a lab of our own: link-local addresses are
            // usable at once (routing daemons need them for IPv6 next hops).
            let _ = self.exec_status(
                ns,
                &[
                    "sysctl",
                    "-qw",
                    "net.ipv6.conf.default.accept_dad=0",
                    "net.ipv6.conf.all.accept_dad=0",
                ],
            );
            self.ns_in(ns, &["link", "set", "lo", "up"])?;
        }
        let q = self.workers.max(1).to_string();
        for (host, dev, ..) in &hosts {
            if self.vlans && *dev == "r2" {
                // Through the switch: r2 is its trunk port, h2 an untagged station.
                let sw = self.switch();
                #[rustfmt::skip]
                ip(&["link", "add", dev, "netns", &rtr, "numtxqueues", &q, "numrxqueues", &q, "type", "veth",
                     "peer", "name", "trunk", "netns", &sw, "numtxqueues", &q, "numrxqueues", &q])?;
                ip(&[
                    "link", "add", "eth0", "netns", host, "type", "veth", "peer", "name", "to-h2",
                    "netns", &sw,
                ])?;
                continue;
            }
            #[rustfmt::skip]
            ip(&["link", "add", dev, "netns", &rtr, "numtxqueues", &q, "numrxqueues", &q, "type", "veth",
                 "peer", "name", "eth0", "netns", host, "numtxqueues", &q, "numrxqueues", &q])?;
        }
        let mut plan = Vec::new();
        for (host, dev, hv4, hv6, rv4, rv6) in &hosts {
            plan.push((host.as_str(), "eth0", *hv4, *hv6));
            plan.push((rtr.as_str(), *dev, *rv4, *rv6));
        }
        for (ns, dev, v4, v6) in plan {
            // Offloads stay at veth's defaults (checksum offload and TSO on), as users have
            // them: the hosts hand the router partial checksums and, unless an XDP program
            // is attached, TCP super-frames, which the ports finish and cut.
            self.ns_in(ns, &["addr", "add", &format!("{v4}/24"), "dev", dev])?;
            self.ns_in(
                ns,
                &[
                    "-6",
                    "addr",
                    "add",
                    &format!("{v6}/64"),
                    "dev",
                    dev,
                    "nodad",
                ],
            )?;
            if let Some(m) = self.mtu {
                self.ns_in(ns, &["link", "set", dev, "mtu", &m.to_string()])?;
            }
            self.ns_in(ns, &["link", "set", dev, "up"])?;
        }
        for (host, _, _, _, rv4, rv6) in &hosts {
            self.ns_in(host, &["route", "add", "default", "via", rv4])?;
            self.ns_in(host, &["-6", "route", "add", "default", "via", rv6])?;
        }
        if self.vlans {
            vlan::build(self)?;
        }
        Ok(())
    }

    /// Namespace of the switch on h2's link (with [`Lab::vlans`]).
    pub fn switch(&self) -> String {
        format!("{}-sw", self.prefix)
    }
    /// Namespace of the VLAN 100 host (with [`Lab::vlans`]).
    pub fn hv(&self) -> String {
        format!("{}-hv", self.prefix)
    }
    /// Namespace of the QinQ host (with [`Lab::vlans`]).
    pub fn hq(&self) -> String {
        format!("{}-hq", self.prefix)
    }

    /// Write the router's config file and return its path.
    pub fn write_config(&self) -> Result<PathBuf> {
        let path = self.config_file();
        let text = format!(
            "# written by `ferrouter-lab lab up`\ncontrol_socket = \"{}\"\nstate_dir = \"{}\"\nworkers = {w}\n{}\n",
            self.socket().display(),
            self.dir.join("state").display(),
            self.extra_config,
            w = self.workers.max(1)
        );
        let mut text = text;
        for (_, dev, ..) in self.hosts() {
            text.push_str(&format!(
                "\n[[port]]\nname = \"{dev}\"\nbackend = \"{}\"\n",
                self.backend
            ));
        }
        if self.vlans {
            text.push_str(&vlan::router_config());
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }

    /// Start `ferrouter run` in the router namespace and wait until it answers.
    pub fn start_router(&self, ferrouter: &Path) -> Result<()> {
        let cfg = self.write_config()?;
        self.run_router(ferrouter, &cfg)
    }

    /// The router's config file (as `write_config` writes it, or as `config apply` left it).
    pub fn config_file(&self) -> PathBuf {
        self.dir.join("ferrouter.toml")
    }

    /// Start `ferrouter run --config CFG` in the router namespace, as it is (a restart
    /// keeps what `config apply` saved), and wait until it answers.
    pub fn run_router(&self, ferrouter: &Path, cfg: &Path) -> Result<()> {
        spawn_router(
            &Daemon {
                ns: &self.rtr(),
                config: cfg,
                log: &self.log_file(),
                pid_file: &self.pid_file(),
                socket: &self.socket(),
            },
            ferrouter,
            Duration::from_secs(15),
        )
    }

    /// Stop the router (SIGTERM, then SIGKILL after 5 s). Returns whether it exited by itself.
    pub fn stop_router(&self) -> bool {
        stop_daemon(&self.pid_file())
    }

    /// Build and start everything.
    pub fn up(&self, ferrouter: &Path) -> Result<()> {
        self.build()?;
        if let Err(e) = self.start_router(ferrouter) {
            self.down();
            return Err(e);
        }
        Ok(())
    }

    /// Stop the router and delete every namespace of the lab (idempotent, never fails).
    pub fn down(&self) {
        self.stop_router();
        for ns in self.existing() {
            let _ = Command::new("ip").args(["netns", "del", &ns]).status();
        }
        let _ = std::fs::remove_file(self.socket());
    }
}

/// Where one `ferrouter run` of a lab lives.
pub(crate) struct Daemon<'a> {
    /// Its namespace.
    pub(crate) ns: &'a str,
    /// Its config file.
    pub(crate) config: &'a Path,
    /// Its stdout and stderr.
    pub(crate) log: &'a Path,
    /// Where its pid is kept (for [`stop_daemon`]).
    pub(crate) pid_file: &'a Path,
    /// Its control socket.
    pub(crate) socket: &'a Path,
}

/// Start `ferrouter run` as `d` says and wait at most `timeout` for its control socket to
/// answer; an error with its log if it exits or does not answer in time.
pub(crate) fn spawn_router(d: &Daemon<'_>, ferrouter: &Path, timeout: Duration) -> Result<()> {
    let log =
        std::fs::File::create(d.log).with_context(|| format!("creating {}", d.log.display()))?;
    let child = Command::new("ip")
        .args(["netns", "exec", d.ns])
        .arg(ferrouter)
        .args(["run", "--config"])
        .arg(d.config)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting ferrouter run")?;
    std::fs::write(d.pid_file, child.id().to_string())?;
    let deadline = Instant::now() + timeout;
    loop {
        if control::api::request_json(d.socket, "interfaces", None).is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline || !Path::new(&format!("/proc/{}", child.id())).exists() {
            let log = std::fs::read_to_string(d.log).unwrap_or_default();
            bail!("ferrouter did not come up in {}: {}", d.ns, log.trim());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Stop the daemon whose pid `pid_file` holds (SIGTERM, then SIGKILL after 5 s). Returns
/// whether it exited by itself (true also when there was none).
pub(crate) fn stop_daemon(pid_file: &Path) -> bool {
    let Ok(pid) = std::fs::read_to_string(pid_file) else {
        return true;
    };
    let _ = std::fs::remove_file(pid_file);
    let pid = pid.trim().to_string();
    // `ip netns exec` execs the daemon in place, so this pid is the daemon itself.
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if !Path::new(&format!("/proc/{pid}")).exists() || is_zombie(&pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = Command::new("kill").args(["-KILL", &pid]).status();
    false
}

/// `tool` is on PATH, or an error naming the Debian package that provides it.
pub fn need_tool(tool: &str, package: &str) -> Result<()> {
    if bench::dpdk::find_in_path(tool).is_none() {
        bail!("{tool} not found on PATH: install the Debian package {package} (apt-get install {package})");
    }
    Ok(())
}

/// What a lab test or benchmark needs before it starts: root (for `why`), and each
/// (tool, Debian package) of `tools` on PATH.
pub fn preconditions(why: &str, tools: &[(&str, &str)]) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("this needs root ({why}): run it as root (scripts/test.sh does)");
    }
    for (tool, package) in tools {
        need_tool(tool, package)?;
    }
    Ok(())
}

/// Tear the lab `prefix` down if this process is interrupted (SIGINT, SIGTERM, SIGHUP),
/// then exit with 128 + the signal: a benchmark stopped by Ctrl-C, `kill` or `timeout`
/// would otherwise leave its namespaces, its daemons (FRR, BIRD, GoBGP, the router) and
/// gigabytes of routes behind, as its guards never run. Call once, before the lab is
/// built; the watcher thread lives as long as the process.
///
/// The benchmark's own thread fails as its daemons and namespaces vanish; it must call
/// [`wait_if_tearing_down`] before it returns, so that the process exits with the signal's
/// status once the teardown is complete rather than with that failure halfway through it.
pub fn tear_down_on_signal(prefix: &str) -> Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .context("installing the signal handlers")?;
    let lab = Lab::new(prefix);
    std::thread::Builder::new()
        .name("lab-teardown".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                TEARING_DOWN.store(true, std::sync::atomic::Ordering::SeqCst);
                eprintln!("signal {sig}: tearing lab {} down", lab.prefix);
                // Daemons started under the lab's directory (lab::daemons) and anything else
                // still in its namespaces go first: a namespace lives on while a process is
                // in it.
                let _ = Command::new("pkill")
                    .args(["-KILL", "-f"])
                    .arg(format!("{}/", lab.dir.display()))
                    .status();
                for ns in lab.existing() {
                    kill_namespace_pids(&ns);
                }
                lab.down();
                let _ = std::fs::remove_dir_all(&lab.dir);
                std::process::exit(128 + sig);
            }
        })
        .context("starting the teardown thread")?;
    Ok(())
}

/// [`tear_down_on_signal`] for a bench whose namespaces are not a [`Lab`]'s: on SIGINT,
/// SIGTERM or SIGHUP, kill the processes started under `dir` and every process in
/// `namespaces` (daemons started there, whatever their command line), delete those
/// namespaces and `dir`, and exit with 128 + the signal.
pub fn tear_down_namespaces_on_signal(dir: PathBuf, namespaces: Vec<String>) -> Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .context("installing the signal handlers")?;
    std::thread::Builder::new()
        .name("lab-teardown".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                TEARING_DOWN.store(true, std::sync::atomic::Ordering::SeqCst);
                eprintln!("signal {sig}: tearing {namespaces:?} down");
                remove_namespaces(&dir, &namespaces);
                std::process::exit(128 + sig);
            }
        })
        .context("starting the teardown thread")?;
    Ok(())
}

/// Set while [`tear_down_on_signal`]'s thread is tearing the lab down.
static TEARING_DOWN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// If an interrupt is being handled ([`tear_down_on_signal`]), wait for the teardown, which
/// exits the process; returns at once otherwise, or after 120 s if the teardown hangs.
pub fn wait_if_tearing_down() {
    let t = Instant::now();
    while TEARING_DOWN.load(std::sync::atomic::Ordering::SeqCst)
        && t.elapsed() < Duration::from_secs(120)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn is_zombie(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.split_whitespace().nth(2) == Some("Z"))
        .unwrap_or(true)
}

/// A process started in one of the lab's namespaces, killed and reaped when dropped.
pub struct Background(std::process::Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Removes a lab when dropped — tests hold one so namespaces go away even on panic.
pub struct Guard(pub Lab);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.down();
        // Keep the daemon's log when a test failed; otherwise leave nothing behind.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0.dir);
        }
    }
}
pub mod chart;
pub mod convergence;
pub mod daemons;
pub mod fwbench;
pub mod ikebench;
pub mod ikeload;
pub mod ipsec;
pub mod ipsecbench;
pub mod ospf;
pub mod qosbench;
pub mod rfc2544;
pub mod route_sync;
pub mod speaker_bench;
pub mod stateful;
pub mod swan;
pub mod vlan;
