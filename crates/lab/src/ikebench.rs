//! `ferrouter-lab bench ike` (issue 27, item 8): IKEv2 tunnel setup against a responder
//! on one core — ferrouter's IKE daemon or strongSwan's charon — driven by the load
//! generator ([`crate::ikeload`]) on the other core.
//!
//! The lab is the IPsec lab's WAN ([`IpsecLab`]): the generator runs in `{p}-gw1` with its
//! source addresses on `wan` (192.0.2.10 and up, added with `ip -batch`), the responder
//! in `{p}-gw2` at 192.0.2.2. For each DUT: the setup rate and time to N from the
//! generator; the SAs the responder holds after the setup (and after a hold, if asked)
//! from the responder itself (`show ike` for ferrouter, `swanctl --stats` for
//! strongSwan); its resident memory and CPU time before and after, per tunnel.
//!
//! ferrouter's responder: one `[[ipsec.peer]]` with `remote = "any"` and the identity every
//! emulated initiator uses, one tunnel interface, `[ipsec] max_sas` above 2 × N. Its CPU
//! time counts every thread but the fast-path workers (`ferrouter-w*`, which poll their
//! ports whether IKE runs or not). strongSwan: [`strongswan_tuning`], every thread.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::ikeload::{self, Generator, LoadAuth, LoadOptions, LoadReport};
use crate::ipsec::{IpsecGuard, IpsecLab, IKE_PSK};
use crate::swan::Charon;

/// What to run.
#[derive(Clone, Debug)]
pub struct IkeBenchOptions {
    /// ferrouter, strongswan (in this order, one run each).
    pub duts: Vec<String>,
    pub tunnels: usize,
    /// `psk`, or `ecdsa`: ECDSA P-256 certificates under one lab root CA ([`LabPki`]).
    pub auth: String,
    /// DH group: 31, 19, 20 or 14.
    pub dh: u16,
    /// Initiations per second (`None`: as fast as the responder answers).
    pub rate: Option<f64>,
    /// Exchanges outstanding at most.
    pub window: usize,
    /// Source addresses (1..=240) and UDP sockets over them.
    pub sources: usize,
    pub sockets: usize,
    /// After the setup, hold the tunnels this long (answering DPD) and count again.
    pub hold: Duration,
    /// The responders' DPD interval (whole seconds): an idle tunnel is checked this often,
    /// so N tunnels cost N ÷ dpd exchanges per second — at a million tunnels, a short
    /// one is more than a core answers, and than the generator answers.
    pub dpd: Duration,
    /// Tunnels that ping h2 through their child SA after the setup (ferrouter only):
    /// [`Generator::traffic`].
    pub traffic: usize,
    /// The setup phase at most.
    pub timeout: Duration,
    /// Namespace prefix.
    pub prefix: String,
    /// The ferrouter binary.
    pub ferrouter: PathBuf,
    /// The responder's core and the generator's.
    pub dut_core: usize,
    pub generator_core: usize,
}

/// One DUT's run (JSON: `runs[]`).
#[derive(Clone, Debug, Serialize)]
pub struct IkeRun {
    pub dut: String,
    pub auth: String,
    pub dh: u16,
    pub tunnels: usize,
    /// Tunnels established per second (generator's view).
    pub setup_per_s: f64,
    /// Not established: refused or timed out.
    pub failed: usize,
    /// IKE SAs the responder holds (after the hold, if any).
    pub held: usize,
    /// Responder RSS growth ÷ tunnels established.
    pub bytes_per_tunnel: f64,
    /// Responder CPU time (user + system) in the setup ÷ tunnels established, µs.
    pub cpu_us_per_tunnel: f64,
    /// Seconds until all N were up (`None` if some failed).
    pub time_to_n_s: Option<f64>,
    /// IKE SAs the responder held right after the setup.
    pub held_after_setup: usize,
    /// Its child SAs then (ferrouter: from `show ike`; strongSwan: `swanctl --stats`
    /// does not count them, `None`).
    pub children_after_setup: Option<usize>,
    pub responder_rss_before: u64,
    pub responder_rss_after: u64,
    pub responder_cpu_s: f64,
    /// The generator's own figures (failures by notification, timeouts, rate per tenth,
    /// the traffic through a sample of the tunnels).
    pub generator: LoadReport,
}

/// strongSwan's settings for scale (inside `charon-systemd { }`), documented in
/// docs/benchmarks.md: a thread pool, a large IKE_SA hash table in segments, no DoS
/// protection or per-peer half-open limit (every emulated initiator shares a few
/// addresses), no routes (kernel-libipsec would install one per child), no IKE_SA reuse
/// lookups. Logging is off entirely (filelog `default = -1`).
pub fn strongswan_tuning(tunnels: usize) -> String {
    let table = tunnels.next_power_of_two().clamp(1024, 1 << 20);
    format!(
        "  threads = 16\n  ikesa_table_size = {table}\n  ikesa_table_segments = 16\n  reuse_ikesa = no\n  dos_protection = no\n  cookie_threshold = 100000000\n  block_threshold = 100000000\n  init_limit_half_open = 0\n  install_routes = no\n"
    )
}

/// strongSwan's connection: every emulated initiator (`load.lab`) with the PSK, one
/// child each, several SAs per identity allowed (`unique = never`).
fn strongswan_conn(dh: &str, dpd: u64) -> String {
    format!(
        "connections {{\n  load {{\n    version = 2\n    local_addrs = 192.0.2.2\n    proposals = aes128gcm16-prfsha256-{dh}\n    unique = never\n    dpd_delay = {dpd}s\n    local {{\n      auth = psk\n      id = gw2.lab\n    }}\n    remote {{\n      auth = psk\n      id = load.lab\n    }}\n    children {{\n      load {{\n        local_ts = 10.2.0.0/24\n        remote_ts = 10.128.0.0/9\n        esp_proposals = aes128gcm16\n        mode = tunnel\n      }}\n    }}\n  }}\n}}\nsecrets {{\n  ike-load {{\n    id-a = gw2.lab\n    id-b = load.lab\n    secret = \"{IKE_PSK}\"\n  }}\n}}\n"
    )
}

/// `--auth ecdsa`: the lab's certificates (the ike crate's test fixtures, made by its
/// `tests/certs/make.sh` with strongSwan's `pki`): an ECDSA P-384 root CA; under it, the
/// responder's certificate (`server.example`) and the one every emulated initiator
/// presents (`gw.example`), both ECDSA P-256 keys. One certificate for every initiator,
/// as strongSwan's load-tester uses by default: a responder verifies its chain once and
/// caches the result (ferrouter and strongSwan both do), so what each tunnel costs is
/// the AUTH signature checked and the responder's own signature made.
pub struct LabPki;

impl LabPki {
    pub const ROOT_PEM: &'static [u8] = include_bytes!("../../ike/tests/certs/root.pem");
    pub const RESPONDER_DER: &'static [u8] = include_bytes!("../../ike/tests/certs/server.der");
    pub const INITIATOR_DER: &'static [u8] = include_bytes!("../../ike/tests/certs/ip.der");
    /// The P-256 key of both.
    pub const KEY_PEM: &'static [u8] = include_bytes!("../../ike/tests/certs/p256.key.pem");
    pub const RESPONDER_DN: &'static str = "C=CH, O=ferrouter test, CN=server.example";
    pub const INITIATOR_DN: &'static str = "C=CH, O=ferrouter test, CN=gw.example";

    /// Write the files a responder needs into `dir` (the key owner-only, in `private/`
    /// where `swanctl --load-all` looks for keys): (root CA, certificate, key) paths.
    fn write(dir: &std::path::Path) -> Result<(PathBuf, PathBuf, PathBuf)> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let root = dir.join("lab-root.pem");
        let cert = dir.join("lab-responder.der");
        let private = dir.join("private");
        std::fs::create_dir_all(&private)
            .with_context(|| format!("creating {}", private.display()))?;
        let key = private.join("lab-responder.key.pem");
        std::fs::write(&root, Self::ROOT_PEM)
            .with_context(|| format!("writing {}", root.display()))?;
        std::fs::write(&cert, Self::RESPONDER_DER)
            .with_context(|| format!("writing {}", cert.display()))?;
        let _ = std::fs::remove_file(&key);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&key)
            .and_then(|mut f| f.write_all(Self::KEY_PEM))
            .with_context(|| format!("writing {}", key.display()))?;
        Ok((root, cert, key))
    }

    /// The generator's side: its certificate and key, the responder's certificate.
    fn load_auth() -> Result<LoadAuth> {
        let key = ike::crypto::PrivateKey::from_bytes(Self::KEY_PEM)
            .map_err(|e| anyhow::anyhow!("the lab's P-256 key: {e}"))?;
        Ok(LoadAuth::Cert {
            cert: Self::INITIATOR_DER.to_vec(),
            key: std::sync::Arc::new(key),
            responder_cert: Self::RESPONDER_DER.to_vec(),
        })
    }
}

/// strongSwan's connection with certificates (`--auth ecdsa`).
fn strongswan_cert_conn(
    dh: &str,
    dpd: u64,
    root: &std::path::Path,
    cert: &std::path::Path,
) -> String {
    format!(
        "connections {{\n  load {{\n    version = 2\n    local_addrs = 192.0.2.2\n    proposals = aes128gcm16-prfsha256-{dh}\n    unique = never\n    dpd_delay = {dpd}s\n    send_certreq = no\n    local {{\n      auth = pubkey\n      certs = {}\n    }}\n    remote {{\n      auth = pubkey\n      id = \"{}\"\n      cacerts = {}\n    }}\n    children {{\n      load {{\n        local_ts = 10.2.0.0/24\n        remote_ts = 10.128.0.0/9\n        esp_proposals = aes128gcm16\n        mode = tunnel\n      }}\n    }}\n  }}\n}}\n",
        cert.display(),
        LabPki::INITIATOR_DN,
        root.display()
    )
}

/// ferrouter's responder peer with certificates (`--auth ecdsa`).
fn ferrouter_cert_peer(
    dh: &str,
    dpd: u64,
    root: &std::path::Path,
    cert: &std::path::Path,
    key: &std::path::Path,
) -> String {
    format!(
        "\n[[ipsec.peer]]\nname = \"load\"\nlocal = \"192.0.2.2\"\nremote = \"any\"\nremote_id = \"dn:{}\"\nauth = \"pubkey\"\ncert = \"{}\"\nprivate_key = \"{}\"\nca = [\"{}\"]\ntunnel = \"ipsec0\"\nstart = \"respond\"\nproposals = [\"aes128gcm16-prfsha256-{dh}\"]\nesp_proposals = [\"aes128gcm16\"]\ndpd_s = {dpd}\n",
        LabPki::INITIATOR_DN,
        cert.display(),
        key.display(),
        root.display()
    )
}

/// ferrouter's responder peer.
fn ferrouter_peer(dh: &str, dpd: u64) -> String {
    format!(
        "\n[[ipsec.peer]]\nname = \"load\"\nlocal = \"192.0.2.2\"\nremote = \"any\"\nlocal_id = \"gw2.lab\"\nremote_id = \"load.lab\"\npsk = \"ike-psk\"\ntunnel = \"ipsec0\"\nstart = \"respond\"\nproposals = [\"aes128gcm16-prfsha256-{dh}\"]\nesp_proposals = [\"aes128gcm16\"]\ndpd_s = {dpd}\n"
    )
}

fn dh_name(dh: u16) -> Result<&'static str> {
    Ok(match dh {
        31 => "curve25519",
        19 => "ecp256",
        20 => "ecp384",
        14 => "modp2048",
        _ => bail!("--dh {dh}: 31, 19, 20 or 14"),
    })
}

/// The generator's source addresses.
fn sources(n: usize) -> Vec<IpAddr> {
    (0..n)
        .map(|k| IpAddr::V4(Ipv4Addr::new(192, 0, 2, 10 + k as u8)))
        .collect()
}

/// (utime + stime) of process `pid`'s threads, s, leaving out those whose name starts
/// with `skip` (ferrouter's polling workers).
fn cpu_s(pid: u32, skip: Option<&str>) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let mut ticks = 0u64;
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    for t in dir.flatten() {
        let p = t.path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        if skip.is_some_and(|s| comm.trim().starts_with(s)) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(p.join("stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        ticks += get(11) + get(12);
    }
    ticks as f64 / hz
}

fn rss(pid: u32) -> u64 {
    crate::convergence::rss_of(&pid.to_string()).unwrap_or(0)
}

/// `taskset` every thread of `pid` onto `core`.
fn pin_process(pid: u32, core: usize) -> Result<()> {
    crate::run(Command::new("taskset").args([
        "-a",
        "-p",
        "-c",
        &core.to_string(),
        &pid.to_string(),
    ]))
    .map(|_| ())
    .with_context(|| format!("taskset of the responder (pid {pid}) to core {core}"))
}

/// The responder under test.
enum Responder {
    Ferrouter { lab: IpsecLab, pid: u32 },
    Strongswan(Box<Charon>),
}

impl Responder {
    fn pid(&self) -> u32 {
        match self {
            Responder::Ferrouter { pid, .. } => *pid,
            Responder::Strongswan(c) => c.pid().unwrap_or(0),
        }
    }
    fn cpu_s(&self) -> f64 {
        match self {
            Responder::Ferrouter { pid, .. } => cpu_s(*pid, Some("ferrouter-w")),
            Responder::Strongswan(c) => cpu_s(c.pid().unwrap_or(0), None),
        }
    }
    /// (IKE SAs established, child SAs when known).
    fn held(&self) -> Result<(usize, Option<usize>)> {
        match self {
            Responder::Ferrouter { lab, .. } => {
                // The counts only: the list of a million SAs is a gigabyte of JSON.
                let v = control::api::request_json(&lab.socket(2), "ike", Some("summary"))
                    .context("show ike summary on the ferrouter responder")?;
                let count = |k: &str| v[k].as_u64().map(|n| n as usize);
                Ok((count("established").unwrap_or(0), count("child_sas")))
            }
            Responder::Strongswan(c) => {
                let s = c.swanctl(&["--stats"])?;
                // "IKE_SAs: 50 total, 0 half-open"
                let total = s
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("IKE_SAs:"))
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(|n| n.parse::<usize>().ok())
                    .with_context(|| format!("no IKE_SAs count in swanctl --stats: {s}"))?;
                let half = s
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("IKE_SAs:"))
                    .and_then(|r| r.split(',').nth(1))
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(|n| n.parse::<usize>().ok())
                    .unwrap_or(0);
                Ok((total.saturating_sub(half), None))
            }
        }
    }
}

fn start_responder(o: &IkeBenchOptions, lab: &IpsecLab, dut: &str) -> Result<Responder> {
    let dh = dh_name(o.dh)?;
    let dpd = o.dpd.as_secs();
    match dut {
        "ferrouter" => {
            let mut l = lab.clone();
            l.ike = false;
            l.config_sas = false;
            let peer = match o.auth.as_str() {
                "ecdsa" => {
                    let (root, cert, key) = LabPki::write(&l.dir)?;
                    ferrouter_cert_peer(dh, dpd, &root, &cert, &key)
                }
                _ => ferrouter_peer(dh, dpd),
            };
            // The initiators' inside addresses (10.128/9, one each) are behind the
            // tunnel: each reached through its own child SA, chosen by destination.
            let route = "\n[[route]]\nprefix = \"10.128.0.0/9\"\nvia = [\"10.255.0.1\"]\n";
            l.write_config(2, &format!("{peer}{route}"))?;
            // max_sas: two SAs per child, with room (within the config's limit: a million
            // tunnels fill it exactly).
            let cfg = l.config_file(2);
            let text = std::fs::read_to_string(&cfg)?;
            let max = (2 * o.tunnels + 1024).clamp(16_384, ipsec::config::MAX_SAS);
            std::fs::write(
                &cfg,
                text.replacen("[ipsec]\n", &format!("[ipsec]\nmax_sas = {max}\n"), 1),
            )?;
            l.start_within(2, &o.ferrouter, Duration::from_secs(30))?;
            let pid: u32 = std::fs::read_to_string(l.pid_file(2))?
                .trim()
                .parse()
                .context("the ferrouter responder's pid file")?;
            pin_process(pid, o.dut_core)?;
            Ok(Responder::Ferrouter { lab: l, pid })
        }
        "strongswan" => {
            crate::need_tool("swanctl", "strongswan-swanctl")?;
            let mut c = Charon::new(&lab.gw(2), &lab.dir, "2");
            let conn = match o.auth.as_str() {
                "ecdsa" => {
                    let (root, cert, _) = LabPki::write(&lab.dir)?;
                    strongswan_cert_conn(dh, dpd, &root, &cert)
                }
                _ => strongswan_conn(dh, dpd),
            };
            c.write(0, &strongswan_tuning(o.tunnels), &conn)?;
            // No log at all: not even the level-0 line per SA.
            let conf = std::fs::read_to_string(c.conf())?;
            std::fs::write(c.conf(), conf.replace("default = 0\n", "default = -1\n"))?;
            c.start(Some(o.dut_core))?;
            c.load()?;
            Ok(Responder::Strongswan(Box::new(c)))
        }
        d => bail!("unknown DUT {d:?} (ferrouter, strongswan)"),
    }
}

/// Adds the generator's source addresses to gw1's `wan` with one `ip -batch`.
fn add_sources(lab: &IpsecLab, addrs: &[IpAddr]) -> Result<()> {
    let batch = lab.dir.join("ike-sources.batch");
    let text: String = addrs
        .iter()
        .map(|a| format!("addr add {a}/24 dev wan\n"))
        .collect();
    std::fs::write(&batch, text)?;
    crate::run(
        Command::new("ip")
            .args(["-n", &lab.gw(1), "-batch"])
            .arg(&batch),
    )
    .map(|_| ())
    .context("adding the generator's addresses (ip -batch)")
}

fn run_one(o: &IkeBenchOptions, dut: &str, progress: &mut dyn FnMut(&str)) -> Result<IkeRun> {
    let lab = IpsecLab::new(&o.prefix);
    lab.down();
    lab.build()?;
    let guard = IpsecGuard(lab.clone());
    let srcs = sources(o.sources);
    add_sources(&lab, &srcs)?;
    let mut responder = start_responder(o, &lab, dut)?;
    let traffic = if dut == "ferrouter" { o.traffic } else { 0 };
    let load = LoadOptions {
        responder: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2)), 500),
        sources: srcs,
        sockets: o.sockets,
        tunnels: o.tunnels,
        rate: o.rate,
        window: o.window,
        ike: ikeload::proposal_for(o.dh)?,
        esp: ikeload::esp_proposal()?,
        auth: match o.auth.as_str() {
            "ecdsa" => LabPki::load_auth()?,
            _ => LoadAuth::Psk(IKE_PSK.as_bytes().to_vec()),
        },
        local_id: ike::config::parse_id(&match o.auth.as_str() {
            "ecdsa" => format!("dn:{}", LabPki::INITIATOR_DN),
            _ => "load.lab".into(),
        })
        .map_err(anyhow::Error::msg)?,
        remote_id: ike::config::parse_id(&match o.auth.as_str() {
            "ecdsa" => format!("dn:{}", LabPki::RESPONDER_DN),
            _ => "gw2.lab".into(),
        })
        .map_err(anyhow::Error::msg)?,
        retransmit: Duration::from_secs(2),
        tries: 4,
        timeout: o.timeout,
        // Traffic goes as ESP in UDP, from the generator's sockets.
        claim_nat: dut == "strongswan" || traffic > 0,
        traffic,
    };
    // The generator: its own thread in gw1's namespace, on its core. It reports after
    // the setup, then holds while this thread counts what the responder keeps.
    let (tx, rx) = std::sync::mpsc::channel::<Result<LoadReport>>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let ns = lab.gw(1);
    let core = o.generator_core;
    let hold = o.hold;
    let h2: Ipv4Addr = crate::ipsec::H2.parse()?;
    let gen = std::thread::spawn(move || -> Result<LoadReport> {
        crate::rfc2544::enter_netns(&ns)?;
        crate::rfc2544::pin(core);
        let mut g = match Generator::new(load) {
            Ok(g) => g,
            Err(e) => {
                let _ = tx.send(Err(anyhow::anyhow!("{e:#}")));
                return Err(e);
            }
        };
        // Ready: the responder's counters are read now, then the clock starts.
        let _ = tx.send(Ok(LoadReport::default()));
        let _ = go_rx.recv();
        let r = g.setup().clone();
        let _ = tx.send(Ok(r));
        if traffic > 0 {
            // Three rounds, a second apart: the first may meet ARP on the far side.
            g.traffic(h2, 3, Duration::from_secs(1));
        }
        if !hold.is_zero() {
            g.hold(hold);
        }
        Ok(g.report.clone())
    });
    let ready = rx.recv().context("the IKE load generator stopped")?;
    ready?;
    // Idle responder: settle, then the baseline.
    std::thread::sleep(Duration::from_millis(500));
    let pid = responder.pid();
    let (rss0, cpu0) = (rss(pid), responder.cpu_s());
    progress(&format!(
        "{dut}: {} tunnels, DH {}, {} sources × {} sockets",
        o.tunnels, o.dh, o.sources, o.sockets
    ));
    let _ = go_tx.send(());
    let setup = rx.recv().context("the IKE load generator stopped")??;
    let (rss1, cpu1) = (rss(pid), responder.cpu_s());
    let t = Instant::now();
    // Its SAs may still be settling (the last installs): a moment, then count.
    let (mut held_setup, mut children) = responder.held()?;
    while held_setup < setup.established && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(200));
        (held_setup, children) = responder.held()?;
    }
    let report = gen
        .join()
        .map_err(|_| anyhow::anyhow!("the IKE load generator panicked"))??;
    let held = if o.hold.is_zero() {
        held_setup
    } else {
        responder.held()?.0
    };
    if let Responder::Strongswan(c) = &mut responder {
        c.check()?;
    }
    let est = setup.established.max(1) as f64;
    let run = IkeRun {
        dut: dut.to_string(),
        auth: o.auth.clone(),
        dh: o.dh,
        tunnels: o.tunnels,
        setup_per_s: setup.setup_per_s,
        failed: o.tunnels - setup.established,
        held,
        bytes_per_tunnel: rss1.saturating_sub(rss0) as f64 / est,
        cpu_us_per_tunnel: (cpu1 - cpu0) * 1e6 / est,
        time_to_n_s: setup.time_to_n_s,
        held_after_setup: held_setup,
        children_after_setup: children,
        responder_rss_before: rss0,
        responder_rss_after: rss1,
        responder_cpu_s: cpu1 - cpu0,
        generator: report,
    };
    drop(responder);
    drop(guard);
    Ok(run)
}

/// The lab's namespaces (for [`crate::tear_down_namespaces_on_signal`]).
pub fn namespaces(prefix: &str) -> (PathBuf, Vec<String>) {
    let l = IpsecLab::new(prefix);
    let names = vec![l.h1(), l.h2(), l.gw(1), l.gw(2), l.wire()];
    (l.dir, names)
}

/// Every DUT in turn.
pub fn run(o: &IkeBenchOptions, progress: &mut dyn FnMut(&str)) -> Result<Vec<IkeRun>> {
    if o.auth != "psk" && o.auth != "ecdsa" {
        bail!("--auth {}: psk or ecdsa", o.auth);
    }
    dh_name(o.dh)?;
    if o.tunnels == 0 || o.tunnels > ipsec::config::MAX_SAS / 2 {
        bail!(
            "--tunnels {}: 1 to {} (two SAs each, within ipsec.max_sas's limit)",
            o.tunnels,
            ipsec::config::MAX_SAS / 2
        );
    }
    if !(1..=240).contains(&o.sources) {
        bail!("--sources must be 1..=240 (192.0.2.10 and up)");
    }
    crate::preconditions("network namespaces", &[("taskset", "util-linux")])?;
    let mut runs = Vec::new();
    for d in &o.duts {
        crate::wait_if_tearing_down();
        let r = run_one(o, d, progress).with_context(|| format!("bench ike, DUT {d}"))?;
        progress(&format!(
            "{d}: {} of {} up, {:.0}/s, held {}, {:.0} B and {:.0} µs per tunnel",
            r.tunnels - r.failed,
            r.tunnels,
            r.setup_per_s,
            r.held,
            r.bytes_per_tunnel,
            r.cpu_us_per_tunnel
        ));
        runs.push(r);
    }
    Ok(runs)
}

/// The readable table.
pub fn format_table(runs: &[IkeRun]) -> String {
    let mut s = format!(
        "{:<11} {:>4} {:>3} {:>8} {:>10} {:>7} {:>8} {:>9} {:>11} {:>11}\n",
        "dut",
        "auth",
        "dh",
        "tunnels",
        "setup/s",
        "failed",
        "held",
        "to N, s",
        "B/tunnel",
        "µs/tunnel"
    );
    for r in runs {
        s += &format!(
            "{:<11} {:>4} {:>3} {:>8} {:>10.0} {:>7} {:>8} {:>9} {:>11.0} {:>11.0}\n",
            r.dut,
            r.auth,
            r.dh,
            r.tunnels,
            r.setup_per_s,
            r.failed,
            r.held,
            r.time_to_n_s.map_or("-".into(), |t| format!("{t:.2}")),
            r.bytes_per_tunnel,
            r.cpu_us_per_tunnel
        );
        let f: BTreeMap<_, _> = r.generator.failed.iter().collect();
        if !f.is_empty() || r.generator.timeouts > 0 {
            s += &format!(
                "            failures {f:?}, timeouts {}\n",
                r.generator.timeouts
            );
        }
        if !r.generator.rate_by_tenth.is_empty() {
            s += &format!(
                "            setup/s per tenth: {:?}\n",
                r.generator
                    .rate_by_tenth
                    .iter()
                    .map(|x| x.round() as u64)
                    .collect::<Vec<_>>()
            );
        }
    }
    s
}
