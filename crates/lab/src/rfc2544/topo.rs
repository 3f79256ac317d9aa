//! Topologies of the RFC 2544 bench: a tester namespace and a DUT namespace joined by two
//! veth pairs (ferrouter over AF_XDP, Linux kernel forwarding), or memif sockets
//! (ferrouter, dpdk-testpmd). Addresses come from the benchmarking ranges 198.18.0.0/15
//! (RFC 2544) and 2001:2::/48 (RFC 5180).
//!
//! ```text
//!  {p}-t (tester)                      {p}-d (DUT)
//!  ta  (198.18.0.2, 2001:2:0:a::2)  ──  da  198.18.0.1/24   2001:2:0:a::1/64
//!  tb  (198.19.0.2, 2001:2:0:b::2)  ──  db  198.19.0.1/24   2001:2:0:b::1/64
//! ```
//! The tester's side has no addresses in Linux (its ports are raw); the DUT knows the
//! tester's two "hosts" by static neighbour entries. Generated routes point at them.

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// DUT address on side A / B.
pub const DUT_A4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// Tester host on side A.
pub const TESTER_A4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// DUT address on side B.
pub const DUT_B4: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);
/// Tester host on side B.
pub const TESTER_B4: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 2);
/// IPv6, side A.
pub const DUT_A6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0xa, 0, 0, 0, 1);
/// IPv6 tester host, side A.
pub const TESTER_A6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0xa, 0, 0, 0, 2);
/// IPv6, side B.
pub const DUT_B6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0xb, 0, 0, 0, 1);
/// IPv6 tester host, side B.
pub const TESTER_B6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0xb, 0, 0, 0, 2);
/// MACs of the tester's memif ports (veth ports use the interfaces' own).
pub const TESTER_MEMIF_MAC: [[u8; 6]; 2] = [[2, 0xfe, 0, 0, 0xff, 0xa], [2, 0xfe, 0, 0, 0xff, 0xb]];
/// MACs of ferrouter's memif ports (and their TAPs).
pub const DUT_MEMIF_MAC: [[u8; 6]; 2] = [[2, 0xfe, 0, 0, 0xd0, 0xa], [2, 0xfe, 0, 0, 0xd0, 0xb]];

/// Whether a route goes toward side A when routes are split between the two sides
/// (bidirectional runs). IPv4: the parity of the first octet, so a prefix and every more
/// specific one inside it (all generated prefixes are /8 or longer) go the same way and no
/// frame is routed to the side it was not meant for. IPv6: the parity of the first 16
/// bits (generated prefixes are /29 or longer).
pub fn toward_a(dst: IpAddr) -> bool {
    match dst {
        IpAddr::V4(a) => a.octets()[0] & 1 == 1,
        IpAddr::V6(a) => a.octets()[1] & 1 == 1,
    }
}

/// The tester's host on side `side` (0 = A, 1 = B), of the family of `v6`.
pub fn tester_host(side: usize, v6: bool) -> IpAddr {
    match (side, v6) {
        (0, false) => TESTER_A4.into(),
        (0, true) => TESTER_A6.into(),
        (_, false) => TESTER_B4.into(),
        (_, true) => TESTER_B6.into(),
    }
}

/// Generated routes of both families as (destination, length).
pub fn prefixes<'a>(
    v4: &'a [(u32, u8)],
    v6: &'a [([u8; 16], u8)],
) -> impl Iterator<Item = (IpAddr, u8)> + 'a {
    let v4 = v4.iter().map(|(a, l)| (IpAddr::V4(Ipv4Addr::from(*a)), *l));
    v4.chain(v6.iter().map(|(a, l)| (IpAddr::V6(Ipv6Addr::from(*a)), *l)))
}

/// `aa:bb:..` text of a MAC.
pub fn mac_str(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Run a command, failing with its stderr.
pub(crate) fn sh(cmd: &mut Command) -> Result<String> {
    crate::run(cmd).map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip -n NS args...`.
pub(crate) fn ip_n(ns: &str, args: &[&str]) -> Result<String> {
    sh(Command::new("ip").arg("-n").arg(ns).args(args))
}

/// The bench's namespaces, files and links.
#[derive(Clone, Debug)]
pub struct Topo {
    /// Name prefix.
    pub prefix: String,
    /// Working directory (configs, logs, memif sockets).
    pub dir: PathBuf,
}

impl Topo {
    /// A topology named `prefix` working in /run/ferrouter-bench/PREFIX.
    pub fn new(prefix: &str) -> Topo {
        Topo {
            prefix: prefix.into(),
            dir: PathBuf::from(format!("/run/ferrouter-bench/{prefix}")),
        }
    }
    /// Tester namespace.
    pub fn tns(&self) -> String {
        format!("{}-t", self.prefix)
    }
    /// DUT namespace.
    pub fn dns(&self) -> String {
        format!("{}-d", self.prefix)
    }
    /// memif socket of side `i` (0 = A, 1 = B).
    pub fn memif_socket(&self, i: usize) -> PathBuf {
        self.dir.join(if i == 0 { "a.sock" } else { "b.sock" })
    }

    fn namespaces(&self) -> Vec<String> {
        crate::existing_namespaces(&[self.tns(), self.dns()])
    }

    /// Create both namespaces (refusing to reuse existing ones) and the work directory.
    pub fn create(&self) -> Result<()> {
        if !self.namespaces().is_empty() {
            bail!(
                "namespaces {} / {} already exist: another bench is running, or an old one was killed (`ip netns del` them)",
                self.tns(),
                self.dns()
            );
        }
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        for ns in [self.tns(), self.dns()] {
            sh(Command::new("ip").args(["netns", "add", &ns]))?;
            ip_n(&ns, &["link", "set", "lo", "up"])?;
        }
        let d = self.dns();
        for (k, v) in [
            ("net.ipv6.conf.all.accept_dad", "0"),
            ("net.ipv6.conf.default.accept_dad", "0"),
            ("net.ipv4.conf.all.rp_filter", "0"),
            ("net.ipv4.conf.default.rp_filter", "0"),
            ("net.ipv6.route.max_size", "4194304"),
        ] {
            sysctl(&d, k, v)?;
        }
        let t = self.tns();
        sysctl(&t, "net.ipv6.conf.default.disable_ipv6", "1")?;
        sysctl(&t, "net.ipv6.conf.all.disable_ipv6", "1")?;
        Ok(())
    }

    /// The veth links with IP MTU `mtu` on both ends (1500, or 9000 for jumbo profiles),
    /// DUT addresses and neighbours. Returns the tester's MACs (ta, tb).
    pub fn veth(&self, mtu: u32) -> Result<[[u8; 6]; 2]> {
        let (t, d) = (self.tns(), self.dns());
        let mut macs = [[0u8; 6]; 2];
        for (i, (tn, dn)) in [("ta", "da"), ("tb", "db")].into_iter().enumerate() {
            sh(Command::new("ip").args([
                "link", "add", tn, "netns", &t, "type", "veth", "peer", "name", dn, "netns", &d,
            ]))?;
            for (ns, dev) in [(&t, tn), (&d, dn)] {
                ip_n(ns, &["link", "set", dev, "mtu", &mtu.to_string(), "up"])?;
                // No offloads: every frame is a frame, as on a NIC without GRO.
                let _ = sh(Command::new("ip").args([
                    "netns", "exec", ns, "ethtool", "-K", dev, "gro", "off", "tso", "off", "gso",
                    "off", "tx", "off", "rx", "off",
                ]));
            }
            macs[i] = read_mac(&t, tn)?;
        }
        self.dut_addresses(["da", "db"], macs)?;
        Ok(macs)
    }

    /// Addresses on the DUT's two interfaces and static neighbours for the tester's hosts.
    pub fn dut_addresses(&self, devs: [&str; 2], tester: [[u8; 6]; 2]) -> Result<()> {
        let d = self.dns();
        let plan = [
            (DUT_A4, TESTER_A4, DUT_A6, TESTER_A6),
            (DUT_B4, TESTER_B4, DUT_B6, TESTER_B6),
        ];
        for (i, (a4, t4, a6, t6)) in plan.into_iter().enumerate() {
            let dev = devs[i];
            let mac = mac_str(tester[i]);
            ip_n(&d, &["addr", "add", &format!("{a4}/24"), "dev", dev])?;
            ip_n(
                &d,
                &["addr", "add", &format!("{a6}/64"), "dev", dev, "nodad"],
            )?;
            ip_n(&d, &["link", "set", dev, "up"])?;
            ip_n(
                &d,
                &[
                    "neigh",
                    "replace",
                    &t4.to_string(),
                    "lladdr",
                    &mac,
                    "dev",
                    dev,
                    "nud",
                    "permanent",
                ],
            )?;
            ip_n(
                &d,
                &[
                    "neigh",
                    "replace",
                    &t6.to_string(),
                    "lladdr",
                    &mac,
                    "dev",
                    dev,
                    "nud",
                    "permanent",
                ],
            )?;
        }
        Ok(())
    }

    /// TAPs for ferrouter's memif ports, created in the DUT namespace before the daemon
    /// starts (persistent: the daemon attaches to them), with addresses and neighbours.
    pub fn memif_taps(&self, mtu: u32) -> Result<()> {
        let d = self.dns();
        for (i, dev) in ["mif0", "mif1"].into_iter().enumerate() {
            ip_n(&d, &["tuntap", "add", "mode", "tap", "name", dev])?;
            ip_n(
                &d,
                &[
                    "link",
                    "set",
                    dev,
                    "address",
                    &mac_str(DUT_MEMIF_MAC[i]),
                    "mtu",
                    &mtu.to_string(),
                ],
            )?;
        }
        self.dut_addresses(["mif0", "mif1"], TESTER_MEMIF_MAC)
    }

    /// Install routes in the DUT's kernel table in one `ip -batch`: IPv4 via the tester's
    /// side-B host (when `split`, those [`toward_a`] picks via side A).
    pub fn routes(
        &self,
        devs: [&str; 2],
        v4: &[(u32, u8)],
        v6: &[([u8; 16], u8)],
        split: bool,
    ) -> Result<()> {
        let path = self.dir.join("routes.batch");
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?,
        );
        for (dst, len) in prefixes(v4, v6) {
            let side = usize::from(!(split && toward_a(dst)));
            let nh = tester_host(side, dst.is_ipv6());
            writeln!(f, "route add {dst}/{len} via {nh} dev {}", devs[side])?;
        }
        f.flush()?;
        drop(f);
        let out = Command::new("ip")
            .args(["-n", &self.dns(), "-batch"])
            .arg(&path)
            .stdout(Stdio::null())
            .output()
            .context("running ip -batch")?;
        let _ = std::fs::remove_file(&path);
        if !out.status.success() {
            bail!(
                "installing routes: {}",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .next()
                    .unwrap_or("")
            );
        }
        Ok(())
    }

    /// Routes for conversations ([`super::Replies`]): `clients` via the tester's host on
    /// side A (`devs[0]`), `servers` via side B.
    pub fn conversation_routes(
        &self,
        devs: [&str; 2],
        clients: (Ipv4Addr, u8),
        servers: (Ipv4Addr, u8),
    ) -> Result<()> {
        for (i, (net, len)) in [clients, servers].into_iter().enumerate() {
            ip_n(
                &self.dns(),
                &[
                    "route",
                    "add",
                    &format!("{net}/{len}"),
                    "via",
                    &tester_host(i, false).to_string(),
                    "dev",
                    devs[i],
                ],
            )
            .with_context(|| format!("routing {net}/{len} via {}", devs[i]))?;
        }
        Ok(())
    }

    /// Kernel forwarding in the DUT namespace on or off.
    pub fn kernel_forwarding(&self, on: bool) -> Result<()> {
        let v = if on { "1" } else { "0" };
        sysctl(&self.dns(), "net.ipv4.ip_forward", v)?;
        sysctl(&self.dns(), "net.ipv6.conf.all.forwarding", v)
    }

    /// Delete both namespaces, memif sockets and the work directory (idempotent).
    pub fn down(&self) {
        for ns in self.namespaces() {
            let _ = Command::new("ip").args(["netns", "del", &ns]).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn sysctl(ns: &str, key: &str, value: &str) -> Result<()> {
    sh(Command::new("ip").args([
        "netns",
        "exec",
        ns,
        "sysctl",
        "-q",
        "-w",
        &format!("{key}={value}"),
    ]))
    .map(drop)
}

/// The MAC of `dev` in namespace `ns`.
pub(crate) fn read_mac(ns: &str, dev: &str) -> Result<[u8; 6]> {
    let out = ip_n(ns, &["-j", "link", "show", dev])?;
    let v: serde_json::Value = serde_json::from_str(&out).context("parsing ip -j link")?;
    let s = v[0]["address"]
        .as_str()
        .context("no address in ip -j link")?;
    control::config::parse_mac(s).with_context(|| format!("bad MAC {s}"))
}

/// Removes the bench topology when dropped, even on panic.
pub struct TopoGuard(pub Topo);

impl Drop for TopoGuard {
    fn drop(&mut self) {
        self.0.down();
    }
}
