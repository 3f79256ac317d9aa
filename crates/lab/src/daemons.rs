//! Real routing daemons started in the lab's namespaces: FRR (zebra, bgpd, ospfd), BIRD 2 and
//! GoBGP. Every path (configuration, pid files, sockets, logs) is under a private directory,
//! so neither /etc/frr nor a system-wide daemon is touched. The daemons are children of the
//! caller (`ip netns exec` execs each in place, so the child *is* the daemon) and are always
//! stopped when the [`Daemons`] value drops, even on panic.
//!
//! FRR runs as the `frr` user the package creates: it refuses to run as root (root is not in
//! `frrvty`), so its directory is handed to that user.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

/// The daemons of one lab run, stopped (newest first) on drop.
pub struct Daemons {
    /// Name, namespace, child, log file.
    children: Vec<(String, String, Child, PathBuf)>,
    /// Private root: one subdirectory per daemon family.
    pub dir: PathBuf,
}

/// Run a command in `ns`: (success, stdout + stderr).
pub fn ns_sh(ns: &str, args: &[&str]) -> Result<(bool, String)> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {args:?} in {ns}"))?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    ))
}

impl Daemons {
    /// A fresh private directory `dir` (removed first if it exists).
    pub fn new(dir: &Path) -> Result<Daemons> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Daemons {
            children: Vec::new(),
            dir: dir.to_path_buf(),
        })
    }

    /// Start `args` in namespace `ns` as daemon `name`, output to `<log_dir>/<name>.out`.
    pub fn spawn(&mut self, name: &str, ns: &str, log_dir: &Path, args: &[&str]) -> Result<()> {
        let log_path = log_dir.join(format!("{name}.out"));
        let log = File::create(&log_path)?;
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        self.children
            .push((name.to_string(), ns.to_string(), child, log_path));
        Ok(())
    }

    /// An error with the daemon's output if any daemon has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        for (name, _, c, log) in &mut self.children {
            if let Ok(Some(st)) = c.try_wait() {
                let out = std::fs::read_to_string(&*log).unwrap_or_default();
                let log2 = std::fs::read_to_string(log.with_extension("log")).unwrap_or_default();
                let tail = |s: &str| s.lines().rev().take(30).collect::<Vec<_>>().join("\n");
                bail!("{name} exited ({st}):\n{}\n{}", tail(&out), tail(&log2));
            }
        }
        Ok(())
    }

    /// Stop one daemon by name (SIGTERM, SIGKILL after 3 s).
    pub fn stop(&mut self, name: &str) {
        if let Some(i) = self.children.iter().position(|c| c.0 == name) {
            let (_, _, mut c, _) = self.children.remove(i);
            terminate(&mut c);
        }
    }

    /// CPU time (user + system, seconds) each running daemon has used so far, by name.
    pub fn cpu_seconds(&self) -> Vec<(String, f64)> {
        self.children
            .iter()
            .filter_map(|(name, _, c, _)| Some((name.clone(), cpu_seconds_of(c.id())?)))
            .collect()
    }

    /// Poll `done` every 50 ms for at most `limit`, failing early if a daemon dies.
    pub fn wait_for(
        &mut self,
        what: &str,
        limit: Duration,
        mut done: impl FnMut() -> Result<(bool, String)>,
    ) -> Result<Duration> {
        let t = Instant::now();
        loop {
            let (ok, state) = done()?;
            if ok {
                return Ok(t.elapsed());
            }
            self.check_alive()?;
            if t.elapsed() > limit {
                bail!("{what}: not done after {limit:?}: {state}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Start FRR in `ns`: zebra first (with a netlink buffer large enough for millions of
    /// routes), then each of `protocols` ("bgpd", "ospfd", "ospf6d") with the config text
    /// given. Waits until each daemon's vty socket exists. Returns a handle for vtysh.
    pub fn start_frr(
        &mut self,
        ns: &str,
        protocols: &[(&str, String)],
        zebra_extra: &[&str],
    ) -> Result<Frr> {
        let dir = self.dir.join("frr");
        std::fs::create_dir_all(&dir)?;
        let st = Command::new("chown").arg("frr:frr").arg(&dir).status()?;
        if !st.success() {
            bail!(
                "chown frr:frr {} failed (is the frr package installed?)",
                dir.display()
            );
        }
        let p = |f: &str| dir.join(f).display().to_string();
        std::fs::write(dir.join("zebra.conf"), "hostname ferrouter-lab\n")?;
        let common = |daemon: &str| -> Vec<String> {
            let mut v: Vec<String> = [
                "-f",
                &p(&format!("{daemon}.conf")),
                "-i",
                &p(&format!("{daemon}.pid")),
                "-z",
                &p("zserv.api"),
                "--vty_socket",
                &dir.display().to_string(),
                "-u",
                "frr",
                "-g",
                "frr",
                "-P",
                "0",
                "--log",
                &format!("file:{}", p(&format!("{daemon}.log"))),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            v.insert(0, format!("/usr/lib/frr/{daemon}"));
            v
        };
        let mut zebra = common("zebra");
        // The kernel socket buffer for zebra's netlink: 90 MB, as FRR's own packaging uses.
        zebra.extend(["-s".to_string(), "90000000".to_string()]);
        zebra.extend(zebra_extra.iter().map(|s| s.to_string()));
        let zebra: Vec<&str> = zebra.iter().map(String::as_str).collect();
        self.spawn("zebra", ns, &dir, &zebra)?;
        let zsock = dir.join("zserv.api");
        self.wait_for("zebra's zserv socket", Duration::from_secs(15), || {
            Ok((zsock.exists(), String::new()))
        })?;
        for (daemon, conf) in protocols {
            std::fs::write(dir.join(format!("{daemon}.conf")), conf)?;
            let args = common(daemon);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            self.spawn(daemon, ns, &dir, &args)?;
            let vty = dir.join(format!("{daemon}.vty"));
            self.wait_for(
                &format!("{daemon}'s vty socket"),
                Duration::from_secs(15),
                || Ok((vty.exists(), String::new())),
            )?;
        }
        Ok(Frr {
            ns: ns.to_string(),
            dir,
        })
    }

    /// Start BIRD 2 in `ns` with config `conf` (its log may go to `<dir>/bird/bird.log`).
    pub fn start_bird(&mut self, name: &str, ns: &str, conf: &str) -> Result<Bird> {
        let dir = self.dir.join(name);
        std::fs::create_dir_all(&dir)?;
        let (c, s, pid) = (
            dir.join("bird.conf"),
            dir.join("bird.ctl"),
            dir.join("bird.pid"),
        );
        std::fs::write(&c, conf)?;
        let (c, s, pid) = (
            c.display().to_string(),
            s.display().to_string(),
            pid.display().to_string(),
        );
        self.spawn(
            name,
            ns,
            &dir,
            &["bird", "-f", "-c", &c, "-s", &s, "-P", &pid],
        )?;
        let sock = dir.join("bird.ctl");
        self.wait_for("BIRD's control socket", Duration::from_secs(10), || {
            Ok((sock.exists(), String::new()))
        })?;
        Ok(Bird {
            ns: ns.to_string(),
            socket: sock,
        })
    }

    /// Start gobgpd in `ns` with TOML config `conf`; its gRPC API listens on 127.0.0.1:50051
    /// inside the namespace (each namespace has its own loopback).
    pub fn start_gobgp(&mut self, name: &str, ns: &str, conf: &str) -> Result<GoBgp> {
        self.start_gobgp_on(name, ns, conf, 50051)
    }

    /// [`Daemons::start_gobgp`] with the API on `api_port` (several gobgpd in one namespace).
    pub fn start_gobgp_on(
        &mut self,
        name: &str,
        ns: &str,
        conf: &str,
        api_port: u16,
    ) -> Result<GoBgp> {
        let dir = self.dir.join(name);
        std::fs::create_dir_all(&dir)?;
        let c = dir.join("gobgpd.toml");
        std::fs::write(&c, conf)?;
        let c = c.display().to_string();
        self.spawn(
            name,
            ns,
            &dir,
            &[
                "gobgpd",
                "-t",
                "toml",
                "-f",
                &c,
                "-p",
                "--api-hosts",
                &format!("127.0.0.1:{api_port}"),
                "--pprof-disable",
            ],
        )?;
        let g = GoBgp {
            ns: ns.to_string(),
            port: api_port,
        };
        self.wait_for("gobgpd's API", Duration::from_secs(15), || {
            Ok((g.run(&["global"]).is_ok(), String::new()))
        })?;
        Ok(g)
    }
}

fn terminate(c: &mut Child) {
    let pid = c.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = c.kill();
    let _ = c.wait();
}

impl Drop for Daemons {
    fn drop(&mut self) {
        for (_, _, c, _) in self.children.iter_mut().rev() {
            terminate(c);
        }
        // Last resort: anything still running from this private directory. Logs stay for a
        // look after a failure.
        let _ = Command::new("pkill")
            .args(["-KILL", "-f"])
            .arg(format!("{}/", self.dir.display()))
            .status();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A running FRR.
pub struct Frr {
    /// Namespace it runs in.
    pub ns: String,
    /// Its private directory (config, sockets, logs).
    pub dir: PathBuf,
}

impl Frr {
    /// `vtysh -c cmd` (several `-c` for configuration sequences); the output, or an error.
    pub fn vtysh(&self, cmds: &[&str]) -> Result<String> {
        let dir = self.dir.display().to_string();
        let mut a = vec!["vtysh", "--vty_socket", &dir];
        for c in cmds {
            a.extend(["-c", c]);
        }
        let (ok, out) = ns_sh(&self.ns, &a)?;
        if !ok {
            bail!("vtysh {cmds:?}: {out}");
        }
        Ok(out)
    }

    /// A `show ... json` command parsed.
    pub fn json(&self, cmd: &str) -> Result<Value> {
        let out = self.vtysh(&[cmd])?;
        serde_json::from_str(&out).with_context(|| format!("vtysh {cmd}: not JSON: {out}"))
    }
}

/// CPU time (user + system, all threads) process `pid` has used, seconds; `None` if it
/// is gone.
pub fn cpu_seconds_of(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may contain anything.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| ticks as f64 / hz as f64)
}

/// The common head of a BIRD 2 config: router id, log file, the device protocol, and two
/// static protocols, `static4` and `static6`, holding the given prefixes as blackholes for
/// the caller's protocols to export. Prefixes are (address, length), host bits zero: IPv4
/// in host byte order, IPv6 as bytes. `birdc disable static4` withdraws the IPv4 ones from
/// every protocol exporting them, `enable` brings them back.
pub fn bird_statics_config(
    router_id: &str,
    log: &Path,
    v4: &[(u32, u8)],
    v6: &[([u8; 16], u8)],
) -> String {
    use std::fmt::Write as _;
    // ~35 bytes a route: 2M routes are a 70 MB file, which BIRD parses in seconds.
    let mut s = String::with_capacity(1024 + 40 * (v4.len() + v6.len()));
    let _ = write!(
        s,
        "router id {router_id};\n\
         log \"{}\" {{ info, remote, warning, error, auth, fatal, bug }};\n\
         protocol device {{}}\n\
         protocol static static4 {{\n  ipv4;\n",
        log.display()
    );
    for &(p, l) in v4 {
        let _ = writeln!(s, "  route {}/{l} blackhole;", std::net::Ipv4Addr::from(p));
    }
    s.push_str("}\nprotocol static static6 {\n  ipv6;\n");
    for &(p, l) in v6 {
        let _ = writeln!(s, "  route {}/{l} blackhole;", std::net::Ipv6Addr::from(p));
    }
    s.push_str("}\n");
    s
}

/// `conf` (from [`bird_statics_config`]) with both static protocols starting disabled:
/// BIRD forms its adjacencies originating no externals until `birdc enable static4` (or
/// `static6`). An error if `conf` has no such protocols.
pub fn bird_statics_disabled(conf: &str) -> anyhow::Result<String> {
    let mut s = conf.to_string();
    for p in ["static4", "static6"] {
        let head = format!("protocol static {p} {{\n");
        let Some(at) = s.find(&head) else {
            anyhow::bail!("no {p} protocol in the BIRD config");
        };
        s.insert_str(at + head.len(), "  disabled;\n");
    }
    Ok(s)
}

/// A running BIRD.
pub struct Bird {
    /// Namespace it runs in.
    pub ns: String,
    /// Its control socket.
    pub socket: PathBuf,
}

impl Bird {
    /// `birdc ARGS`.
    pub fn birdc(&self, args: &[&str]) -> Result<String> {
        let s = self.socket.display().to_string();
        let mut a = vec!["birdc", "-s", &s];
        a.extend_from_slice(args);
        let (ok, out) = ns_sh(&self.ns, &a)?;
        if !ok {
            bail!("birdc {args:?}: {out}");
        }
        Ok(out)
    }

    /// `birdc enable|disable PROTOCOL`, an error unless BIRD did it (birdc exits 0 even when
    /// BIRD refuses a command; it answers "NAME: enabled", "NAME: disabled" or
    /// "NAME: already ...").
    pub fn set_protocol(&self, cmd: &str, protocol: &str) -> Result<()> {
        let out = self.birdc(&[cmd, protocol])?;
        if !out.contains(&format!("{protocol}:")) {
            bail!("birdc {cmd} {protocol} in {}: {out}", self.ns);
        }
        Ok(())
    }
}

/// A running gobgpd (driven with the `gobgp` client inside its namespace).
pub struct GoBgp {
    /// Namespace it runs in.
    pub ns: String,
    /// Its API port on the namespace's loopback.
    pub port: u16,
}

impl GoBgp {
    /// `gobgp ARGS` against this daemon.
    pub fn run(&self, args: &[&str]) -> Result<String> {
        let port = self.port.to_string();
        let mut a = vec!["gobgp", "-u", "127.0.0.1", "-p", &port];
        a.extend_from_slice(args);
        let (ok, out) = ns_sh(&self.ns, &a)?;
        if !ok {
            bail!("gobgp {args:?}: {out}");
        }
        Ok(out)
    }
}
