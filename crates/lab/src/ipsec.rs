//! Two Ferrouter gateways with an IPsec tunnel between them, in network namespaces:
//!
//! ```text
//! h1 ──── lan [gw1] wan ═══ ESP ═══ [wire] ═══ ESP ═══ wan [gw2] lan ──── h2
//! 10.1.0.2      10.1.0.1   192.0.2.1   192.0.2.2   10.2.0.1      10.2.0.2
//! 2001:db8:a1::2           2001:db8:ff::1/::2 (outer over IPv6)  2001:db8:a2::2
//! ```
//!
//! Each gateway runs `ferrouter run` with its two ports (AF_XDP by default), a tunnel
//! interface `ipsec0` (10.255.0.1/30 and 10.255.0.2/30 on it, `fd00:ff::1`/`::2`) and
//! routes to the other side's hosts through it, one manually keyed SA each way, with the
//! keys in a file only root can read. Traffic between h1 and h2 crosses the WAN link
//! encrypted only. The WAN link is a Linux bridge in its own namespace (`{p}-wire`, port
//! `to-gw1` and `to-gw2`): a place to watch the wire with tcpdump, which the gateways'
//! AF_XDP ports bypass.
//!
//! With [`IpsecLab::nat`] one gateway is behind a Linux NAT (`{p}-nat`, nftables
//! `masquerade random`: ports are mapped to others), which takes its public address on
//! the wire; the gateway has a private one:
//!
//! ```text
//! [gwN] wan ──── in [nat] out ═══ [wire] ═══ ... the other gateway
//! 172.16.0.N   172.16.0.254  192.0.2.N
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::{existing_namespaces, run};

/// h1's address.
pub const H1: &str = "10.1.0.2";
/// h2's address.
pub const H2: &str = "10.2.0.2";
/// h1's IPv6 address.
pub const H1_V6: &str = "2001:db8:a1::2";
/// h2's IPv6 address.
pub const H2_V6: &str = "2001:db8:a2::2";
/// gw1's tunnel-interface address.
pub const GW1_TUNNEL: &str = "10.255.0.1";
/// gw2's tunnel-interface address.
pub const GW2_TUNNEL: &str = "10.255.0.2";

/// The two gateways' lab.
#[derive(Clone, Debug)]
pub struct IpsecLab {
    /// Namespace and file prefix.
    pub prefix: String,
    /// Working directory (configs, keys, logs, sockets).
    pub dir: PathBuf,
    /// The SAs' encryption algorithm (`aes-128-gcm`, ...).
    pub encryption: String,
    /// Their integrity algorithm (`none` with an AEAD).
    pub integrity: String,
    /// The tunnel's outer header: IPv6 (the WAN's IPv6 addresses) instead of IPv4.
    pub outer_v6: bool,
    /// Port backend of both gateways.
    pub backend: String,
    /// Extended sequence numbers on the SAs.
    pub esn: bool,
    /// Workers of each gateway (the links get as many queues).
    pub workers: usize,
    /// NAT traversal on the tunnel (ESP in UDP, keepalives every second).
    pub nat_t: bool,
    /// The tunnel's SAs in the config (else it has none until some come through the API).
    pub config_sas: bool,
    /// Policy-based instead of route-based: no tunnel interface; the hosts' prefixes are
    /// routed over the WAN and `wan`'s SPD protects them ([`IpsecLab::policy_config_text`]).
    pub policy: bool,
    /// The tunnel keyed by IKE (`[[ipsec.peer]]`, a PSK) instead of `[[ipsec.sa]]`: gw1
    /// initiates, gw2 responds; identities `gw1.lab` and `gw2.lab`.
    pub ike: bool,
    /// Gateway 1 or 2 behind a NAT (IPv4 outer only): [`IpsecLab::wan`] is then its
    /// private address, [`IpsecLab::public`] the NAT's. For tunnels keyed by IKE (which
    /// finds the NAT), or with `nat_t`; ferrouter's tunnel gets `keepalive_s = 1`.
    pub nat: Option<u8>,
    /// The gateways' WAN addresses on a VLAN sub-interface, `wan.100` (802.1Q tag 100 on
    /// `wan`), instead of on the port: their ESP crosses the wire tagged (the wire's
    /// bridge is not VLAN-aware: it carries the tags through, as a trunk does). Not with
    /// `nat`.
    pub vlan: bool,
}

/// The private prefix behind the NAT (`172.16.0.N` for gateway N, `.254` the NAT).
pub const NAT_INSIDE: &str = "172.16.0";

/// The IKE lab's pre-shared key (both gateways', and strongSwan's in the interop tests).
pub const IKE_PSK: &str = "ferrouter-lab ike psk, 32 bytes!";

/// Key material of `len` bytes, different for each `seed`.
fn key_hex(seed: u8, len: usize) -> String {
    (0..len)
        .map(|i| format!("{:02x}", (i as u8).wrapping_mul(31).wrapping_add(seed)))
        .collect()
}

impl IpsecLab {
    /// A lab named `prefix`, AES-128-GCM over IPv4, AF_XDP ports (`auto`).
    pub fn new(prefix: &str) -> IpsecLab {
        IpsecLab {
            prefix: prefix.to_string(),
            dir: PathBuf::from(format!("/run/ferrouter-lab/{prefix}")),
            encryption: "aes-128-gcm".into(),
            integrity: "none".into(),
            outer_v6: false,
            backend: "auto".into(),
            esn: true,
            workers: 1,
            nat_t: false,
            config_sas: true,
            policy: false,
            ike: false,
            nat: None,
            vlan: false,
        }
    }

    /// The interface the gateways' WAN addresses are on: `wan`, or `wan.100` ([`IpsecLab::vlan`]).
    pub fn wan_iface(&self) -> &'static str {
        if self.vlan {
            "wan.100"
        } else {
            "wan"
        }
    }

    /// Gateway `n`'s VLAN sub-interface and its WAN addresses, with [`IpsecLab::vlan`].
    fn vlan_text(&self, n: u8) -> String {
        if !self.vlan {
            return String::new();
        }
        format!(
            "\n[[vlan]]\nname = \"wan.100\"\nparent = \"wan\"\nid = 100\n\
             \n[[interface]]\nname = \"wan.100\"\naddresses = [\"192.0.2.{n}/24\", \"2001:db8:ff::{n}/64\"]\n"
        )
    }
    /// Namespace of h1.
    pub fn h1(&self) -> String {
        format!("{}-h1", self.prefix)
    }
    /// Namespace of h2.
    pub fn h2(&self) -> String {
        format!("{}-h2", self.prefix)
    }
    /// Namespace of the WAN link's bridge.
    pub fn wire(&self) -> String {
        format!("{}-wire", self.prefix)
    }
    /// Namespace of gateway `n` (1 or 2).
    pub fn gw(&self, n: u8) -> String {
        format!("{}-gw{n}", self.prefix)
    }
    /// Gateway `n`'s control socket.
    pub fn socket(&self, n: u8) -> PathBuf {
        self.dir.join(format!("gw{n}.sock"))
    }
    /// Gateway `n`'s config file.
    pub fn config_file(&self, n: u8) -> PathBuf {
        self.dir.join(format!("gw{n}.toml"))
    }
    /// Gateway `n`'s key file.
    pub fn key_file(&self, n: u8) -> PathBuf {
        self.dir.join(format!("gw{n}.keys"))
    }
    /// Gateway `n`'s log.
    pub fn log_file(&self, n: u8) -> PathBuf {
        self.dir.join(format!("gw{n}.log"))
    }
    /// Gateway `n`'s pid file (while it runs).
    pub fn pid_file(&self, n: u8) -> PathBuf {
        self.dir.join(format!("gw{n}.pid"))
    }
    /// Namespace of the NAT in front of a gateway ([`IpsecLab::nat`]).
    pub fn nat_ns(&self) -> String {
        format!("{}-nat", self.prefix)
    }
    /// Gateway `n`'s WAN address (its end of the tunnel): behind the NAT, its private
    /// one.
    pub fn wan(&self, n: u8) -> String {
        if self.nat == Some(n) {
            return format!("{NAT_INSIDE}.{n}");
        }
        self.public(n)
    }
    /// The address the other gateway reaches gateway `n` at (the tunnel's remote end):
    /// its WAN address, or the NAT's in front of it.
    pub fn public(&self, n: u8) -> String {
        if self.outer_v6 {
            format!("2001:db8:ff::{n}")
        } else {
            format!("192.0.2.{n}")
        }
    }

    /// Which of the lab's namespaces exist.
    pub fn existing(&self) -> Vec<String> {
        existing_namespaces(&[
            self.h1(),
            self.h2(),
            self.gw(1),
            self.gw(2),
            self.wire(),
            self.nat_ns(),
        ])
    }

    /// Run a command in namespace `ns`, whatever its exit status.
    pub fn exec(&self, ns: &str, args: &[&str]) -> Result<Output> {
        Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .output()
            .with_context(|| format!("cannot run {args:?} in {ns}"))
    }

    /// Start a command in namespace `ns` in the background (output discarded), killed when
    /// the handle drops.
    pub fn spawn(&self, ns: &str, args: &[&str]) -> Result<crate::Background> {
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {args:?} in {ns}"))?;
        Ok(crate::Background(child))
    }

    /// `ip -n NS args...`.
    pub fn ip(&self, ns: &str, args: &[&str]) -> Result<()> {
        let mut a = vec!["-n", ns];
        a.extend_from_slice(args);
        run(Command::new("ip").args(&a)).map(|_| ())
    }

    /// The bytes of key material the SAs' algorithms take: (encryption, integrity).
    fn key_lens(&self) -> Result<(usize, usize)> {
        let e = ipsec::config::encryption(&self.encryption)
            .with_context(|| format!("unknown encryption {:?}", self.encryption))?;
        let i = ipsec::config::integrity(&self.integrity)
            .with_context(|| format!("unknown integrity {:?}", self.integrity))?;
        Ok((e.key_len(), i.key_len()))
    }

    /// Gateway `n`'s key file: the key of each direction.
    pub fn keys_text(&self) -> Result<String> {
        let (el, il) = self.key_lens()?;
        let mut s = String::new();
        for (name, seed) in [("gw1-to-gw2", 1u8), ("gw2-to-gw1", 2u8)] {
            s.push_str(&format!(
                "[{name}]\nencryption = \"{}\"\n",
                key_hex(seed, el)
            ));
            if il > 0 {
                s.push_str(&format!("integrity = \"{}\"\n", key_hex(seed + 100, il)));
            }
        }
        s.push_str(&format!("[ike-psk]\npsk = \"{IKE_PSK}\"\n"));
        Ok(s)
    }

    /// Gateway `n`'s config, with `extra` appended.
    pub fn config_text(&self, n: u8, extra: &str) -> String {
        if self.policy {
            return self.policy_config_text(n, extra);
        }
        let other = 3 - n;
        let (out_key, in_key) = if n == 1 {
            ("gw1-to-gw2", "gw2-to-gw1")
        } else {
            ("gw2-to-gw1", "gw1-to-gw2")
        };
        // gw1 sends with 0x1001, gw2 with 0x2001.
        let (out_spi, in_spi) = if n == 1 {
            (0x1001, 0x2001)
        } else {
            (0x2001, 0x1001)
        };
        let sa = |dir: &str, spi: u32, key: &str| {
            format!(
                "\n[[ipsec.sa]]\ntunnel = \"ipsec0\"\ndirection = \"{dir}\"\nspi = {spi:#x}\nencryption = \"{}\"\nintegrity = \"{}\"\nkey = \"{key}\"\nesn = {}\n",
                self.encryption, self.integrity, self.esn
            )
        };
        format!(
            "# written by ferrouter-lab's IPsec lab\ncontrol_socket = \"{sock}\"\nstate_dir = \"{state}\"\nworkers = {w}\n\
             \n[[port]]\nname = \"lan\"\nbackend = \"{b}\"\n\n[[port]]\nname = \"wan\"\nbackend = \"{b}\"\n{vlan}\
             \n[[interface]]\nname = \"ipsec0\"\naddresses = [\"10.255.0.{n}/30\", \"fd00:ff::{n}/64\"]\n\
             \n[[route]]\nprefix = \"10.{other}.0.0/24\"\nvia = [\"10.255.0.{other}\"]\n\
             \n[[route]]\nprefix = \"2001:db8:a{other}::/64\"\nvia = [\"fd00:ff::{other}\"]\n\
             {nat_route}\n[ipsec]\nkey_file = \"{keys}\"\n\n[[ipsec.tunnel]]\nname = \"ipsec0\"\nlocal = \"{local}\"\nremote = \"{remote}\"\n{natt}{out}{inb}{extra}",
            sock = self.socket(n).display(),
            state = self.dir.join(format!("state{n}")).display(),
            b = self.backend,
            w = self.workers.max(1),
            vlan = self.vlan_text(n),
            keys = self.key_file(n).display(),
            local = self.wan(n),
            remote = self.public(other),
            nat_route = if self.nat == Some(n) {
                format!("\n[[route]]\nprefix = \"192.0.2.0/24\"\nvia = [\"{NAT_INSIDE}.254\"]\n")
            } else {
                String::new()
            },
            natt = if self.nat_t {
                "nat_t = true\nkeepalive_s = 1\n"
            } else if self.nat.is_some() {
                "keepalive_s = 1\n"
            } else {
                ""
            },
            out = if self.ike {
                self.peer_text(n)
            } else if self.config_sas {
                sa("out", out_spi, out_key)
            } else {
                String::new()
            },
            inb = if self.config_sas && !self.ike {
                sa("in", in_spi, in_key)
            } else {
                String::new()
            },
        )
    }

    /// Gateway `n`'s IKE peer (the other gateway): gw1 initiates.
    pub fn peer_text(&self, n: u8) -> String {
        let other = 3 - n;
        format!(
            "\n[[ipsec.peer]]\nname = \"gw{other}\"\nlocal = \"{}\"\nremote = \"{}\"\nlocal_id = \"gw{n}.lab\"\nremote_id = \"gw{other}.lab\"\npsk = \"ike-psk\"\ntunnel = \"ipsec0\"\nstart = \"{}\"\ndpd_s = 2\n",
            self.wan(n),
            self.public(other),
            if n == 1 { "initiate" } else { "respond" }
        )
    }

    /// Gateway `n`'s config for policy-based IPsec, with `extra` appended: the other
    /// host's prefixes routed via the other gateway's WAN address, two policy SAs in
    /// tunnel mode between the WAN addresses (gw1 sends with 0x1001, gw2 with 0x2001), and
    /// `wan`'s SPD: between the hosts' prefixes (both families) protect, in and out, but
    /// UDP to port 5201 (bypass, both ways) and UDP to port 9 (discard, outbound). With
    /// `ike`, no SAs and no protect policies: a policy-based peer
    /// ([`IpsecLab::policy_peer_text`], `extra` right after it, so that settings there
    /// amend it) whose child SAs bring theirs, and a discard policy each way behind them.
    pub fn policy_config_text(&self, n: u8, extra: &str) -> String {
        let other = 3 - n;
        let (out_key, in_key, out_spi, in_spi) = if n == 1 {
            ("gw1-to-gw2", "gw2-to-gw1", 0x1001, 0x2001)
        } else {
            ("gw2-to-gw1", "gw1-to-gw2", 0x2001, 0x1001)
        };
        let sa = |dir: &str, spi: u32, key: &str| {
            format!(
                "\n[[ipsec.sa]]\ndirection = \"{dir}\"\nspi = {spi:#x}\nencryption = \"{}\"\nintegrity = \"{}\"\nkey = \"{key}\"\nesn = {}\nlocal = \"{}\"\nremote = \"{}\"\n",
                self.encryption,
                self.integrity,
                self.esn,
                self.wan(n),
                self.wan(other)
            )
        };
        let policy = |dir: &str, prio: u32, src: &str, dst: &str, rest: &str| {
            format!(
                "\n[[ipsec.policy]]\ninterface = \"{}\"\ndirection = \"{dir}\"\npriority = {prio}\nsrc = \"{src}\"\ndst = \"{dst}\"\n{rest}",
                self.wan_iface()
            )
        };
        let mut pol = String::new();
        for (mine, theirs) in [
            (format!("10.{n}.0.0/24"), format!("10.{other}.0.0/24")),
            (
                format!("2001:db8:a{n}::/64"),
                format!("2001:db8:a{other}::/64"),
            ),
        ] {
            pol += &policy(
                "out",
                10,
                &mine,
                &theirs,
                "protocol = \"udp\"\ndst_ports = 5201\naction = \"bypass\"\n",
            );
            pol += &policy(
                "out",
                10,
                &mine,
                &theirs,
                "protocol = \"udp\"\ndst_ports = 9\naction = \"discard\"\n",
            );
            if self.ike {
                // IKE's policies come at 100; should its SAs be gone, nothing between
                // the prefixes leaves or enters in the clear.
                pol += &policy("out", 1000, &mine, &theirs, "action = \"discard\"\n");
                pol += &policy("in", 1000, &theirs, &mine, "action = \"discard\"\n");
                continue;
            }
            pol += &policy(
                "out",
                100,
                &mine,
                &theirs,
                &format!("action = \"protect\"\nsa = {out_spi:#x}\n"),
            );
            pol += &policy(
                "in",
                10,
                &theirs,
                &mine,
                "protocol = \"udp\"\ndst_ports = 5201\naction = \"bypass\"\n",
            );
            pol += &policy(
                "in",
                100,
                &theirs,
                &mine,
                &format!("action = \"protect\"\nsa = {in_spi:#x}\n"),
            );
        }
        format!(
            "# written by ferrouter-lab's IPsec lab (policy-based)\ncontrol_socket = \"{sock}\"\nstate_dir = \"{state}\"\nworkers = {w}\n\
             \n[[port]]\nname = \"lan\"\nbackend = \"{b}\"\n\n[[port]]\nname = \"wan\"\nbackend = \"{b}\"\n{vlan}\
             {routes}\n[ipsec]\nkey_file = \"{keys}\"\n{out}{peer_extra}{inb}{pol}{tail_extra}",
            sock = self.socket(n).display(),
            state = self.dir.join(format!("state{n}")).display(),
            b = self.backend,
            w = self.workers.max(1),
            vlan = self.vlan_text(n),
            keys = self.key_file(n).display(),
            out = if self.ike {
                self.policy_peer_text(n)
            } else {
                sa("out", out_spi, out_key)
            },
            inb = if self.ike {
                String::new()
            } else {
                sa("in", in_spi, in_key)
            },
            // Behind the NAT (IPv4 only): everything via the NAT; the other host's
            // traffic is encrypted on `wan` anyway, and its ESP goes where the outer
            // address routes.
            routes = if self.nat == Some(n) {
                format!(
                    "\n[[route]]\nprefix = \"10.{other}.0.0/24\"\nvia = [\"{NAT_INSIDE}.254\"]\n\
                     \n[[route]]\nprefix = \"192.0.2.0/24\"\nvia = [\"{NAT_INSIDE}.254\"]\n"
                )
            } else {
                format!(
                    "\n[[route]]\nprefix = \"10.{other}.0.0/24\"\nvia = [\"192.0.2.{other}\"]\n\
                     \n[[route]]\nprefix = \"2001:db8:a{other}::/64\"\nvia = [\"2001:db8:ff::{other}\"]\n"
                )
            },
            // With IKE, `extra` follows the peer (its settings may amend it).
            peer_extra = if self.ike { extra } else { "" },
            tail_extra = if self.ike { "" } else { extra },
        )
    }

    /// Gateway `n`'s IKE peer, policy-based: its child SAs' policies in `wan`'s SPD,
    /// between the hosts' prefixes (both families).
    pub fn policy_peer_text(&self, n: u8) -> String {
        let other = 3 - n;
        format!(
            "\n[[ipsec.peer]]\nname = \"gw{other}\"\nlocal = \"{}\"\nremote = \"{}\"\nlocal_id = \"gw{n}.lab\"\nremote_id = \"gw{other}.lab\"\npsk = \"ike-psk\"\ninterface = \"{}\"\nlocal_ts = [\"10.{n}.0.0/24\", \"2001:db8:a{n}::/64\"]\nremote_ts = [\"10.{other}.0.0/24\", \"2001:db8:a{other}::/64\"]\nstart = \"{}\"\ndpd_s = 2\n",
            self.wan(n),
            self.public(other),
            self.wan_iface(),
            if n == 1 { "initiate" } else { "respond" }
        )
    }

    /// Build the namespaces, links and addresses.
    pub fn build(&self) -> Result<()> {
        self.check_free()?;
        let (h1, h2) = (self.h1(), self.h2());
        for ns in [&h1, &h2] {
            self.add_namespace(ns)?;
        }
        self.build_wan([(&h1, "eth0"), (&h2, "eth0")])?;
        for (ns, v4, v6) in [
            (&h1, "10.1.0.2/24", "2001:db8:a1::2/64"),
            (&h2, "10.2.0.2/24", "2001:db8:a2::2/64"),
        ] {
            self.ip(ns, &["addr", "add", v4, "dev", "eth0"])?;
            self.ip(ns, &["-6", "addr", "add", v6, "dev", "eth0", "nodad"])?;
            self.ip(ns, &["link", "set", "eth0", "up"])?;
        }
        self.ip(&h1, &["route", "add", "default", "via", "10.1.0.1"])?;
        self.ip(
            &h1,
            &["-6", "route", "add", "default", "via", "2001:db8:a1::1"],
        )?;
        self.ip(&h2, &["route", "add", "default", "via", "10.2.0.1"])?;
        self.ip(
            &h2,
            &["-6", "route", "add", "default", "via", "2001:db8:a2::1"],
        )?;
        Ok(())
    }

    /// Fail when any of the lab's namespaces exists; create its working directory.
    pub fn check_free(&self) -> Result<()> {
        if !self.existing().is_empty() {
            bail!(
                "lab {} already exists (namespaces {:?}); take it down first",
                self.prefix,
                self.existing()
            );
        }
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))
    }

    /// `ip netns add` with DAD off and the loopback up.
    pub fn add_namespace(&self, ns: &str) -> Result<()> {
        run(Command::new("ip").args(["netns", "add", ns]))?;
        let _ = self.exec(
            ns,
            &[
                "sysctl",
                "-qw",
                "net.ipv6.conf.default.accept_dad=0",
                "net.ipv6.conf.all.accept_dad=0",
            ],
        );
        self.ip(ns, &["link", "set", "lo", "up"])
    }

    /// The gateways' and the wire's namespaces, the WAN bridge, the gateways' addresses,
    /// and their LAN links to `lans` (gw1's side, gw2's side): each an interface to be
    /// created in a namespace that already exists (h1's and h2's `eth0`, or a tester's
    /// ports), left down and without addresses.
    pub fn build_wan(&self, lans: [(&str, &str); 2]) -> Result<()> {
        let (g1, g2, w, nat) = (self.gw(1), self.gw(2), self.wire(), self.nat_ns());
        if self.vlan && self.nat.is_some() {
            bail!(
                "lab {}: the WAN on a VLAN and a NAT in front of a gateway do not go together",
                self.prefix
            );
        }
        if let Some(n) = self.nat {
            if !(1..=2).contains(&n) || self.outer_v6 || (self.policy && !self.ike) {
                bail!("lab {}: a NAT goes in front of gateway 1 or 2, with an IPv4 outer header and a tunnel interface or IKE (nat = {n}, outer_v6 = {}, policy = {}, ike = {})", self.prefix, self.outer_v6, self.policy, self.ike);
            }
        }
        for ns in [&g1, &g2, &w] {
            self.add_namespace(ns)?;
        }
        if self.nat.is_some() {
            self.add_namespace(&nat)?;
        }
        #[rustfmt::skip]
        let mut links = vec![
            (lans[0].0, lans[0].1, g1.as_str(), "lan"),
            (g1.as_str(), "wan", w.as_str(), "to-gw1"),
            (g2.as_str(), "wan", w.as_str(), "to-gw2"),
            (g2.as_str(), "lan", lans[1].0, lans[1].1),
        ];
        // Behind the NAT: the gateway's WAN to the NAT's inside, the NAT's outside to the
        // wire in its place.
        let behind = self.nat.map(|n| (self.gw(n), format!("to-gw{n}")));
        if let Some((gw, port)) = &behind {
            links.retain(|l| !(l.0 == gw.as_str() && l.1 == "wan"));
            links.push((gw.as_str(), "wan", nat.as_str(), "in"));
            links.push((nat.as_str(), "out", w.as_str(), port.as_str()));
        }
        let q = self.workers.max(1).to_string();
        for (a, an, b, bn) in links {
            #[rustfmt::skip]
            run(Command::new("ip").args([
                "link", "add", an, "netns", a, "numtxqueues", &q, "numrxqueues", &q, "type", "veth",
                "peer", "name", bn, "netns", b, "numtxqueues", &q, "numrxqueues", &q,
            ]))?;
        }
        self.ip(&w, &["link", "add", "br0", "type", "bridge"])?;
        for port in ["to-gw1", "to-gw2", "br0"] {
            if port != "br0" {
                self.ip(&w, &["link", "set", port, "master", "br0"])?;
            }
            self.ip(&w, &["link", "set", port, "up"])?;
        }
        // Offloads and MTUs stay at veth's defaults, as users have them.
        let addrs = [
            (&g1, "lan", "10.1.0.1/24", "2001:db8:a1::1/64"),
            (&g1, "wan", "192.0.2.1/24", "2001:db8:ff::1/64"),
            (&g2, "wan", "192.0.2.2/24", "2001:db8:ff::2/64"),
            (&g2, "lan", "10.2.0.1/24", "2001:db8:a2::1/64"),
        ];
        for (ns, dev, v4, v6) in addrs {
            if let Some(n) = self.nat.filter(|&n| *ns == self.gw(n) && dev == "wan") {
                // Behind the NAT: its private address (IPv4 only).
                self.ip(
                    ns,
                    &["addr", "add", &format!("{NAT_INSIDE}.{n}/24"), "dev", dev],
                )?;
                self.ip(ns, &["link", "set", dev, "up"])?;
                continue;
            }
            if self.vlan && dev == "wan" {
                // The addresses are on Ferrouter's `wan.100` (a TAP it makes), not the port.
                self.ip(ns, &["link", "set", dev, "up"])?;
                continue;
            }
            self.ip(ns, &["addr", "add", v4, "dev", dev])?;
            self.ip(ns, &["-6", "addr", "add", v6, "dev", dev, "nodad"])?;
            self.ip(ns, &["link", "set", dev, "up"])?;
        }
        if let Some(n) = self.nat {
            self.build_nat(n)?;
        }
        Ok(())
    }

    /// The NAT in front of gateway `n`: its inside and outside addresses, forwarding,
    /// nftables masquerading what leaves by `out` (to random ports), and the gateway's
    /// (kernel's) route to the WAN through it.
    fn build_nat(&self, n: u8) -> Result<()> {
        let nat = self.nat_ns();
        self.ip(
            &nat,
            &["addr", "add", &format!("{NAT_INSIDE}.254/24"), "dev", "in"],
        )?;
        self.ip(
            &nat,
            &["addr", "add", &format!("192.0.2.{n}/24"), "dev", "out"],
        )?;
        for dev in ["in", "out"] {
            self.ip(&nat, &["link", "set", dev, "up"])?;
        }
        let o = self.exec(&nat, &["sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
        if !o.status.success() {
            bail!(
                "{nat}: sysctl net.ipv4.ip_forward=1: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let rules = self.dir.join("nat.nft");
        std::fs::write(
            &rules,
            "table ip nat {
  chain post {
    type nat hook postrouting priority srcnat; policy accept;
    oifname \"out\" masquerade random
  }
}
",
        )
        .with_context(|| format!("writing {}", rules.display()))?;
        let o = self.exec(&nat, &["nft", "-f", &rules.display().to_string()])?;
        if !o.status.success() {
            bail!(
                "{nat}: nft -f {} (Debian nftables): {}",
                rules.display(),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        self.ip(
            &self.gw(n),
            &[
                "route",
                "add",
                "192.0.2.0/24",
                "via",
                &format!("{NAT_INSIDE}.254"),
            ],
        )
    }

    /// Write gateway `n`'s key file (mode 0600) and config (with `extra`).
    pub fn write_config(&self, n: u8, extra: &str) -> Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let k = self.key_file(n);
        let _ = std::fs::remove_file(&k);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&k)
            .with_context(|| format!("creating {}", k.display()))?;
        f.write_all(self.keys_text()?.as_bytes())?;
        let c = self.config_file(n);
        std::fs::write(&c, self.config_text(n, extra))
            .with_context(|| format!("writing {}", c.display()))?;
        Ok(())
    }

    /// Start gateway `n` with its config file as it is, and wait until it answers.
    pub fn start(&self, n: u8, ferrouter: &Path) -> Result<()> {
        self.start_within(n, ferrouter, Duration::from_secs(15))
    }

    /// [`IpsecLab::start`], waiting at most `timeout` for it to answer (a config with
    /// thousands of tunnels creates as many TUN devices first).
    pub fn start_within(&self, n: u8, ferrouter: &Path, timeout: Duration) -> Result<()> {
        crate::spawn_router(
            &crate::Daemon {
                ns: &self.gw(n),
                config: &self.config_file(n),
                log: &self.log_file(n),
                pid_file: &self.pid_file(n),
                socket: &self.socket(n),
            },
            ferrouter,
            timeout,
        )
    }

    /// Stop gateway `n` (SIGTERM, then SIGKILL after 5 s).
    pub fn stop(&self, n: u8) {
        crate::stop_daemon(&self.pid_file(n));
    }

    /// Build everything and start both gateways.
    pub fn up(&self, ferrouter: &Path) -> Result<()> {
        self.build()?;
        let started = (|| {
            for n in [1, 2] {
                self.write_config(n, "")?;
                self.start(n, ferrouter)?;
            }
            Ok(())
        })();
        if started.is_err() {
            self.down();
        }
        started
    }

    /// Stop both gateways and delete the namespaces (idempotent, never fails).
    pub fn down(&self) {
        self.stop(1);
        self.stop(2);
        for ns in self.existing() {
            let _ = Command::new("ip").args(["netns", "del", &ns]).status();
        }
    }
}

/// Takes the lab down when dropped (tests hold one, so nothing is left on a panic).
pub struct IpsecGuard(pub IpsecLab);

impl Drop for IpsecGuard {
    fn drop(&mut self) {
        self.0.down();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0.dir);
        }
    }
}
