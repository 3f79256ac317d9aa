//! strongSwan's charon (Debian `charon-systemd`) run in a network namespace, as the IPsec
//! bench's gateways and the IKE interop tests' peer: its strongswan.conf (ESP in userspace
//! by kernel-libipsec: the test machines' kernels have no xfrm), its vici socket and log
//! in the lab's directory, `swanctl` against it, and its SAs as `swanctl --list-sas`
//! shows them.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// One charon daemon in a namespace. Stopped when dropped.
pub struct Charon {
    /// Its namespace.
    pub ns: String,
    /// Where its files go.
    pub dir: PathBuf,
    /// A short name for its files (`strongswan{name}.conf`, `charon{name}.log`, ...).
    pub name: String,
    child: Option<Child>,
}

/// What `swanctl --list-sas` shows of one gateway.
#[derive(Debug, Default, PartialEq)]
pub struct Listing {
    /// IKE SAs ESTABLISHED.
    pub ike: usize,
    /// CHILD_SAs INSTALLED.
    pub installed: usize,
    /// Packets through the CHILD_SAs' inbound SAs.
    pub packets_in: u64,
    /// And outbound.
    pub packets_out: u64,
}

/// Parse `swanctl --list-sas`.
pub fn parse_listing(text: &str) -> Listing {
    let mut l = Listing::default();
    for line in text.lines() {
        let t = line.trim_start();
        if line.contains(", ESTABLISHED, ") && !line.starts_with(' ') {
            l.ike += 1;
        }
        if t.contains(": #") && t.contains(", INSTALLED, ") {
            l.installed += 1;
        }
        // "in  c1d2e3f4,  10080 bytes,   120 packets,     0s ago"
        let dir = if t.starts_with("in ") {
            Some(true)
        } else if t.starts_with("out ") {
            Some(false)
        } else {
            None
        };
        if let (Some(inbound), Some(n)) = (
            dir,
            t.split(',')
                .find_map(|f| f.trim().strip_suffix(" packets"))
                .and_then(|n| n.trim().parse::<u64>().ok()),
        ) {
            if inbound {
                l.packets_in += n;
            } else {
                l.packets_out += n;
            }
        }
    }
    l
}

/// The last `lines` lines of `s`.
pub fn tail(s: &str, lines: usize) -> String {
    let v: Vec<&str> = s.trim().lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

impl Charon {
    pub fn new(ns: &str, dir: &std::path::Path, name: &str) -> Charon {
        Charon {
            ns: ns.to_string(),
            dir: dir.to_path_buf(),
            name: name.to_string(),
            child: None,
        }
    }

    pub fn conf(&self) -> PathBuf {
        self.dir.join(format!("strongswan{}.conf", self.name))
    }
    pub fn swanctl_conf(&self) -> PathBuf {
        self.dir.join(format!("swanctl{}.conf", self.name))
    }
    pub fn vici(&self) -> PathBuf {
        self.dir.join(format!("charon{}.vici", self.name))
    }
    pub fn log(&self) -> PathBuf {
        self.dir.join(format!("charon{}.log", self.name))
    }
    fn out(&self) -> PathBuf {
        self.dir.join(format!("charon{}.out", self.name))
    }
    fn uri(&self) -> String {
        format!("unix://{}", self.vici().display())
    }

    /// Its process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The end of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(
            &std::fs::read_to_string(self.log()).unwrap_or_default(),
            lines,
        )
    }

    /// strongswan.conf: the plugins for IKEv2 with PSKs and certificates, ESP by
    /// kernel-libipsec, a log file at `level` (1: control, 2: more), vici in the lab's
    /// directory; `extra` goes inside `charon-systemd { }`.
    pub fn strongswan_conf(&self, level: u8, extra: &str) -> String {
        format!(
            "# written by ferrouter-lab\n\
             charon-systemd {{\n  load = random nonce openssl aes sha1 sha2 hmac gcm pem pkcs1 pkcs8 x509 pubkey gmp curve25519 kdf kernel-libipsec kernel-netlink socket-default vici\n\
             \x20 install_virtual_ip = no\n  retransmit_tries = 3\n  max_ikev2_exchanges = 0\n{extra}\n\
             \x20 journal {{\n    default = -1\n  }}\n\
             \x20 filelog {{\n    lab {{\n      path = {log}\n      default = {level}\n      time_format = %T\n      flush_line = yes\n    }}\n  }}\n\
             \x20 plugins {{\n    vici {{\n      socket = unix://{vici}\n    }}\n    kernel-libipsec {{\n      load = yes\n    }}\n  }}\n}}\n\
             swanctl {{\n  load = pem pkcs1 pkcs8 x509 pubkey openssl random\n  socket = unix://{vici}\n}}\n",
            log = self.log().display(),
            vici = self.vici().display(),
        )
    }

    /// Writes strongswan.conf (see [`Charon::strongswan_conf`]) and `swanctl` (the
    /// connections and secrets), clearing an old socket and log.
    pub fn write(&self, level: u8, extra: &str, swanctl: &str) -> Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        std::fs::write(self.conf(), self.strongswan_conf(level, extra))?;
        std::fs::write(self.swanctl_conf(), swanctl)?;
        let _ = std::fs::remove_file(self.vici());
        let _ = std::fs::remove_file(self.log());
        Ok(())
    }

    /// `swanctl ARGS` against this daemon.
    pub fn swanctl(&self, args: &[&str]) -> Result<String> {
        let o = Command::new("swanctl")
            .args(args)
            .args(["--uri", &self.uri()])
            .env("STRONGSWAN_CONF", self.conf())
            .output()
            .context("running swanctl (Debian strongswan-swanctl)")?;
        if !o.status.success() {
            bail!(
                "swanctl {args:?} on {}: {}{}",
                self.ns,
                String::from_utf8_lossy(&o.stdout).trim(),
                String::from_utf8_lossy(&o.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    }

    /// Loads the connections and secrets of its swanctl.conf.
    pub fn load(&self) -> Result<()> {
        let file = self.swanctl_conf().display().to_string();
        self.swanctl(&["--load-all", "--file", &file])
            .with_context(|| format!("loading {file} into charon in {}", self.ns))
            .map(|_| ())
    }

    /// Its SAs.
    pub fn listing(&self) -> Result<Listing> {
        Ok(parse_listing(&self.swanctl(&["--list-sas"])?))
    }

    /// Starts charon (on `core` with taskset, if given) and waits for its vici socket.
    pub fn start(&mut self, core: Option<usize>) -> Result<()> {
        let out = std::fs::File::create(self.out())?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns]);
        if let Some(c) = core {
            cmd.args(["taskset", "-c", &c.to_string()]);
        }
        let child = cmd
            .arg("/usr/sbin/charon-systemd")
            .env("STRONGSWAN_CONF", self.conf())
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("starting charon-systemd (Debian charon-systemd)")?;
        self.child = Some(child);
        let t = Instant::now();
        while self.swanctl(&["--stats"]).is_err() {
            self.check()?;
            if t.elapsed() > Duration::from_secs(20) {
                bail!(
                    "charon in {} did not open its vici socket {} in 20 s: {}",
                    self.ns,
                    self.vici().display(),
                    self.log_tail(20)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// Fails when charon has exited, with the end of its output and log.
    pub fn check(&mut self) -> Result<()> {
        if let Some(c) = &mut self.child {
            if let Ok(Some(status)) = c.try_wait() {
                let out = std::fs::read_to_string(self.out()).unwrap_or_default();
                bail!(
                    "charon in {} exited ({status}): {}\n{}",
                    self.ns,
                    tail(&out, 10),
                    self.log_tail(20)
                );
            }
        }
        Ok(())
    }

    /// SIGTERM, then SIGKILL after 5 s.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(self.vici());
    }

    /// SIGKILL at once: a peer that dies without a word.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Charon {
    fn drop(&mut self) {
        self.stop();
    }
}
