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

const TESTPMD: &str = "dpdk-testpmd";

/// A running DUT process (none for Linux), stopped on drop.
pub struct Running {
    child: Option<Child>,
    log: PathBuf,
    what: String,
    /// The process reads testpmd commands on its stdin ([`Running::testpmd`]).
    console: bool,
}

impl Running {
    /// Nothing to run (kernel forwarding).
    pub fn none(what: &str) -> Running {
        Running {
            child: None,
            log: PathBuf::new(),
            what: what.into(),
            console: false,
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

    /// testpmd's console (its stdin, its log), when this is an interactive testpmd.
    pub fn testpmd(&self) -> Option<TestpmdConsole<'_>> {
        if !self.console {
            return None;
        }
        let stdin = self.child.as_ref()?.stdin.as_ref()?;
        Some(TestpmdConsole {
            stdin,
            log: &self.log,
        })
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

/// Commands to an interactive testpmd, and its forwarding statistics read back from its
/// log.
#[derive(Clone, Copy)]
pub struct TestpmdConsole<'a> {
    stdin: &'a std::process::ChildStdin,
    log: &'a Path,
}

/// testpmd's busy cycles over the packets it received, since its statistics were cleared.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TestpmdCycles {
    /// TSC cycles spent in receive bursts that returned packets (and their transmit).
    pub cycles: u64,
    /// Packets received, all ports.
    pub packets: u64,
    /// TSC frequency, MHz.
    pub mhz: u64,
}

impl TestpmdCycles {
    /// Nanoseconds per packet.
    pub fn ns_per_packet(&self) -> Option<f64> {
        (self.packets > 0 && self.mhz > 0)
            .then(|| self.cycles as f64 * 1e3 / self.mhz as f64 / self.packets as f64)
    }
}

impl TestpmdConsole<'_> {
    fn send(&self, line: &str) -> Result<()> {
        use std::io::Write;
        let mut w = self.stdin;
        w.write_all(line.as_bytes())
            .and_then(|_| w.write_all(b"\n"))
            .and_then(|_| w.flush())
            .with_context(|| format!("sending {line:?} to dpdk-testpmd"))
    }

    /// Zero testpmd's forwarding statistics and cycle counts.
    pub fn clear(&self) -> Result<()> {
        self.send("clear fwd stats all")
    }

    /// Ask for the forwarding statistics and read the cycle line it prints, waiting up to
    /// `timeout`. `Ok(None)` when testpmd received nothing (it then prints no such line).
    pub fn cycles(&self, timeout: Duration) -> Result<Option<TestpmdCycles>> {
        let count = || -> usize {
            std::fs::read_to_string(self.log)
                .map(|s| s.matches("Accumulated forward statistics").count())
                .unwrap_or(0)
        };
        let before = count();
        self.send("show fwd stats all")?;
        let t = Instant::now();
        while t.elapsed() < timeout {
            let log = std::fs::read_to_string(self.log)
                .with_context(|| format!("reading {}", self.log.display()))?;
            if log.matches("Accumulated forward statistics").count() > before {
                // The block ends with its closing rule; the cycle line follows it.
                let block = log
                    .rsplit("Accumulated forward statistics")
                    .next()
                    .unwrap_or("");
                if let Some(rest) = block.split_once("++\n").map(|(_, r)| r) {
                    // Wait for the rest of the block (the cycle line) to be flushed.
                    if rest.contains("CPU cycles/packet") {
                        return Ok(parse_cycles(rest));
                    }
                    if rest.contains("testpmd>") {
                        return Ok(None);
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!(
            "dpdk-testpmd printed no forwarding statistics within {timeout:?} (log {})",
            self.log.display()
        )
    }
}

/// `CPU cycles/packet=45.58 (total cycles=2558034272 / total io packets=56124864) at 2600
/// MHz Clock` (DPDK 22.11; later releases say "busy cycles").
pub fn parse_cycles(text: &str) -> Option<TestpmdCycles> {
    let line = text.lines().find(|l| l.contains("CPU cycles/packet="))?;
    let num_after = |key: &str| -> Option<u64> {
        let rest = &line[line.find(key)? + key.len()..];
        let digits: String = rest
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        digits.parse().ok()
    };
    let cycles = num_after("cycles=")?;
    let packets = num_after("packets=")?;
    let mhz = num_after(") at")?;
    Some(TestpmdCycles {
        cycles,
        packets,
        mhz,
    })
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
        console: false,
    })
}

/// Start ferrouter in the DUT namespace on `ports` (TOML `[[port]]` bodies) with one
/// worker, and wait until its control socket answers (the initial FIB load is done).
pub fn start_ferrouter(topo: &Topo, bin: &Path, ports: &[String]) -> Result<Running> {
    start_ferrouter_with(topo, bin, ports, "")
}

/// [`start_ferrouter`] with `extra` appended to its config (TOML tables: `[firewall]`,
/// `[nat]`, ...).
pub fn start_ferrouter_with(
    topo: &Topo,
    bin: &Path,
    ports: &[String],
    extra: &str,
) -> Result<Running> {
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
    text.push('\n');
    text.push_str(extra);
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
        if control::api::request_json(&socket, "counters", None).is_ok() {
            return Ok(r);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("ferrouter did not open its control socket within 180 s")
}

/// Route counts ferrouter's FIB holds (ipv4, ipv6).
pub fn ferrouter_routes(topo: &Topo) -> Result<(u64, u64)> {
    let v = control::api::request_json(
        &topo.dir.join("ferrouter.sock"),
        "routes",
        Some("192.0.2.255/32"),
    )?;
    Ok((
        v["ipv4"].as_u64().unwrap_or(0),
        v["ipv6"].as_u64().unwrap_or(0),
    ))
}

/// Whether ferrouter's FIB holds a route for `prefix` (mirrored from the kernel).
pub fn ferrouter_has_route(topo: &Topo, prefix: &str) -> bool {
    control::api::request_json(&topo.dir.join("ferrouter.sock"), "routes", Some(prefix))
        .ok()
        .and_then(|v| v["routes"].as_array().map(|a| !a.is_empty()))
        .unwrap_or(false)
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
/// core `core`, without huge pages, interactive on a pipe (see [`Running::testpmd`]) and
/// recording its busy cycles (`--record-core-cycles`: two TSC reads per receive burst
/// that returned packets).
pub fn start_testpmd(topo: &Topo, core: usize) -> Result<Running> {
    let Some(testpmd) = bench::dpdk::find_in_path(TESTPMD) else {
        bail!("{TESTPMD} not found on PATH: install the Debian package dpdk-dev (apt-get install dpdk-dev)");
    };
    // Line-buffered stdout: the statistics it prints on request reach the log at once.
    let mut cmd = Command::new("stdbuf");
    cmd.arg("-oL").arg(testpmd);
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
        "-i",
        "--record-core-cycles",
        "--forward-mode=io",
        "--auto-start",
        "--stats-period=3600",
        "--txq=1",
        "--rxq=1",
        "--total-num-mbufs=16384",
    ]);
    let mut r = spawn_logged(cmd, &topo.dir.join("testpmd.log"), "dpdk-testpmd")?;
    r.console = true;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn testpmd_cycle_line_is_parsed() {
        let text = "  ++++++++\n\n  CPU cycles/packet=45.58 (total cycles=2558034272 / total io packets=56124864) at 2600 MHz Clock\n";
        let c = parse_cycles(text).unwrap();
        assert_eq!(
            c,
            TestpmdCycles {
                cycles: 2_558_034_272,
                packets: 56_124_864,
                mhz: 2600
            }
        );
        let ns = c.ns_per_packet().unwrap();
        assert!((ns - 45.58 / 2.6).abs() < 0.01, "{ns}");
        // Later releases' wording.
        let c = parse_cycles(
            "CPU cycles/packet=10.00 (busy cycles=1000 / total io packets=100) at 1000 MHz Clock",
        )
        .unwrap();
        assert_eq!(c.ns_per_packet(), Some(10.0));
        for bad in [
            "",
            "CPU cycles/packet=nan",
            "CPU cycles/packet=1 (total cycles=x / total io packets=1) at 1 MHz",
        ] {
            assert_eq!(parse_cycles(bad), None, "{bad:?}");
        }
        let zero = TestpmdCycles {
            cycles: 5,
            packets: 0,
            mhz: 1,
        };
        assert_eq!(zero.ns_per_packet(), None);
    }
}
