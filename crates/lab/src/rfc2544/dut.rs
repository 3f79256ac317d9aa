//! The devices under test, started for real: ferrouter (AF_XDP on veth, or memif), Linux
//! kernel forwarding, and `dpdk-testpmd --forward-mode=io` over memif (the machine's I/O
//! limit: moving packets between two memif ports with no processing at all).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::topo::{mac_str, Topo, DUT_MEMIF_MAC};

/// Which DUT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DutKind {
    /// Ferrouter's fast path.
    Ferrouter,
    /// Linux kernel forwarding (the reports' "Quagga on Ubuntu" column).
    Linux,
    /// dpdk-testpmd io forwarding.
    Testpmd,
}

impl DutKind {
    /// Name as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DutKind::Ferrouter => "ferrouter",
            DutKind::Linux => "linux",
            DutKind::Testpmd => "testpmd",
        }
    }
    /// Parse a command-line name.
    pub fn parse(s: &str) -> Result<DutKind> {
        Ok(match s {
            "ferrouter" => DutKind::Ferrouter,
            "linux" => DutKind::Linux,
            "testpmd" => DutKind::Testpmd,
            _ => bail!("unknown DUT {s:?} (ferrouter, linux, testpmd)"),
        })
    }
}

/// Transport between tester and DUT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Two veth pairs (tester on AF_XDP).
    Veth,
    /// Two memif connections (tester is the memif client).
    Memif,
}

impl Transport {
    /// Name as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Veth => "veth",
            Transport::Memif => "memif",
        }
    }
    /// Parse a command-line name.
    pub fn parse(s: &str) -> Result<Transport> {
        Ok(match s {
            "veth" => Transport::Veth,
            "memif" => Transport::Memif,
            _ => bail!("unknown transport {s:?} (veth, memif)"),
        })
    }
}

/// A running DUT process (none for Linux), stopped on drop.
pub struct Running {
    child: Option<Child>,
    log: PathBuf,
    what: String,
}

impl Running {
    /// Nothing to run (kernel forwarding).
    pub fn none(what: &str) -> Running {
        Running {
            child: None,
            log: PathBuf::new(),
            what: what.into(),
        }
    }

    /// Fail if the process has exited, with the end of its log.
    pub fn check(&mut self) -> Result<()> {
        if let Some(c) = &mut self.child {
            if let Ok(Some(st)) = c.try_wait() {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                bail!(
                    "{} exited ({st}); log {}:\n{}",
                    self.what,
                    self.log.display(),
                    tail.join("\n")
                );
            }
        }
        Ok(())
    }

    /// Stop: SIGTERM, then SIGKILL after 5 s.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

fn spawn_logged(mut cmd: Command, log: &Path, what: &str) -> Result<Running> {
    let f = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let child = cmd
        .stdin(Stdio::piped())
        .stdout(f.try_clone()?)
        .stderr(f)
        .spawn()
        .with_context(|| format!("starting {what}"))?;
    Ok(Running {
        child: Some(child),
        log: log.into(),
        what: what.into(),
    })
}

/// Start ferrouter in the DUT namespace on `ports` (TOML `[[port]]` bodies) with one
/// worker, and wait until its control socket answers (the initial FIB load is done).
pub fn start_ferrouter(topo: &Topo, bin: &Path, ports: &[String]) -> Result<Running> {
    let socket = topo.dir.join("ferrouter.sock");
    let cfg = topo.dir.join("ferrouter.toml");
    let mut text = format!(
        "control_socket = \"{}\"\nstate_dir = \"{}\"\nworkers = 1\n",
        socket.display(),
        topo.dir.join("state").display()
    );
    for p in ports {
        text.push_str("\n[[port]]\n");
        text.push_str(p);
    }
    std::fs::write(&cfg, text)?;
    let _ = std::fs::remove_file(&socket);
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &topo.dns()])
        .arg(bin)
        .arg("run")
        .arg("--config")
        .arg(&cfg)
        .env("RUST_LOG", "info");
    let mut r = spawn_logged(cmd, &topo.dir.join("ferrouter.log"), "ferrouter")?;
    let t = Instant::now();
    // Loading a million routes from the kernel's dump takes seconds, not minutes.
    while t.elapsed() < Duration::from_secs(180) {
        r.check()?;
        if control::api::request(&socket, "counters", None).is_ok() {
            return Ok(r);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("ferrouter did not open its control socket within 180 s")
}

/// Route counts ferrouter's FIB holds (ipv4, ipv6).
pub fn ferrouter_routes(topo: &Topo) -> Result<(u64, u64)> {
    let v = control::api::request(
        &topo.dir.join("ferrouter.sock"),
        "routes",
        Some("192.0.2.255/32"),
    )?;
    Ok((
        v["ipv4"].as_u64().unwrap_or(0),
        v["ipv6"].as_u64().unwrap_or(0),
    ))
}

/// `[[port]]` bodies for ferrouter on the veth topology.
pub fn ferrouter_veth_ports() -> Vec<String> {
    ["da", "db"]
        .iter()
        .map(|n| format!("name = \"{n}\"\nbackend = \"af_xdp\"\n"))
        .collect()
}

/// `[[port]]` bodies for ferrouter's memif ports (servers; the tester connects).
pub fn ferrouter_memif_ports(topo: &Topo) -> Vec<String> {
    (0..2)
        .map(|i| {
            format!(
                "name = \"mif{i}\"\nbackend = \"memif\"\nmemif_socket = \"{}\"\nmemif_role = \"server\"\nmemif_id = 0\nmac = \"{}\"\n",
                topo.memif_socket(i).display(),
                mac_str(DUT_MEMIF_MAC[i])
            )
        })
        .collect()
}

/// Start dpdk-testpmd with two memif server ports forwarding to each other (io mode) on
/// core `core`, without huge pages.
pub fn start_testpmd(topo: &Topo, core: usize) -> Result<Running> {
    let mut cmd = Command::new("dpdk-testpmd");
    cmd.args([
        "--no-huge",
        "-m",
        "512",
        "--no-pci",
        "--log-level",
        "*:notice",
    ])
    .arg(format!("--file-prefix=ferrouter-bench-{}", topo.prefix))
    // The first lcore is testpmd's main thread (mostly asleep); the second forwards.
    .arg(format!("-l{},{core}", if core == 0 { 1 } else { 0 }));
    for i in 0..2 {
        cmd.arg(format!(
            "--vdev=net_memif{i},role=server,id=0,socket={},socket-abstract=no",
            topo.memif_socket(i).display()
        ));
    }
    cmd.args([
        "--",
        "--forward-mode=io",
        "--auto-start",
        "--stats-period=3600",
        "--txq=1",
        "--rxq=1",
        "--total-num-mbufs=16384",
    ]);
    let mut r = spawn_logged(cmd, &topo.dir.join("testpmd.log"), "dpdk-testpmd")?;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(20) {
        r.check()?;
        if topo.memif_socket(0).exists() && topo.memif_socket(1).exists() {
            return Ok(r);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!(
        "dpdk-testpmd did not create its memif sockets within 20 s (log {})",
        topo.dir.join("testpmd.log").display()
    )
}
