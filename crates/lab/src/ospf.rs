//! OSPF in the lab: configuration text for FRR (ospfd for OSPFv2, ospf6d for OSPFv3) on the
//! router and for BIRD 2 on a host that originates AS-external routes, plus the external
//! prefix sets (Internet-like, from [`bench::routes`], kept clear of the lab's own ranges).
//! Used by the OSPF end-to-end test and meant for convergence benchmarks.
//!
//! Both sides run their interfaces as point-to-point (no DR election, so no wait timer: an
//! adjacency is Full within a second or two of the first hello) with the same hello/dead
//! intervals — OSPF drops hellos whose intervals differ from its own.
//!
//! BIRD originates every external as type 2 (E2) with one metric: its static routes are
//! blackholes (so no forwarding address is advertised and the router's next hop is BIRD's
//! own interface address: the IPv4 one for OSPFv2, the link-local one for OSPFv3), exported
//! into OSPF only. BIRD has no kernel protocol: the host forwards nothing itself.
//!
//! What bounds convergence (FRR 8.4, BIRD 2.0.12):
//! - BIRD re-originates its router-LSA at most every MinLSInterval (5 s, not configurable),
//!   checked on its 1 s tick. Its first one (without the link to FRR) goes out at startup,
//!   so the one FRR needs to reach BIRD as ASBR comes ~6 s after BIRD starts: externals
//!   become routes no sooner, whatever the hello timers. FRR's own re-origination is not
//!   throttled here (`timers throttle lsa all 0`) nor are received instances
//!   (`timers lsa min-arrival 0`).
//! - FRR, as the DD slave, may send its first LS request while still in Exchange and then
//!   not chain the next one when the answer arrives: loading then stalls for one
//!   retransmit interval.
//! - LSAs flooded (not requested) — a withdrawal, i.e. 100K+ MaxAge LSAs — overflow the raw
//!   sockets (FRR's is capped by net.core.rmem_max, BIRD's is rmem_default) and are
//!   recovered only by retransmission; see [`Tuning::bird_tx_length`].

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;

/// Interface timers (seconds) and packet sizing, shared by both ends of an adjacency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// Hello interval.
    pub hello: u32,
    /// Router dead interval (a neighbour silent this long is dropped).
    pub dead: u32,
    /// Retransmission interval for unacknowledged LSAs and requests (BIRD refuses less
    /// than 2 s).
    pub retransmit: u32,
    /// BIRD's `tx length` (largest OSPF packet it builds; `None`: the interface MTU). BIRD
    /// retransmits at most `2 * tx_length / 24` LSAs per retransmit interval, about 124 at
    /// MTU 1500, which makes recovering from a lost flood of 100K+ LSAs take tens of
    /// minutes; 64 KiB packets (IP-fragmented on the wire) raise that to ~5,000.
    pub bird_tx_length: Option<u32>,
}

impl Tuning {
    /// For tests: hello 1 s, dead 4 s, retransmit 2 s, MTU-sized packets.
    pub const FAST: Tuning = Tuning {
        hello: 1,
        dead: 4,
        retransmit: 2,
        bird_tx_length: None,
    };
    /// For 100K+ LSAs: a daemon busy with a flood, or ospfd computing and sending 2M
    /// routes to zebra (which blocks its hellos for tens of seconds on a busy host), must
    /// not lose the adjacency (dead 120 s); BIRD retransmits in 64 KiB packets.
    pub const BULK: Tuning = Tuning {
        hello: 1,
        dead: 120,
        retransmit: 2,
        bird_tx_length: Some(65_535),
    };
}

/// An FRR OSPF daemon's config: each of `ifaces` in area 0, point-to-point, with the
/// timers of `t` (`kw`: the interface commands' prefix, `ip ospf` or `ipv6 ospf6`), then
/// the `router` block.
fn frr_config(daemon: &str, kw: &str, ifaces: &[&str], t: Tuning, router: &str) -> String {
    let mut s = format!(
        "frr defaults traditional\nhostname ferrouter-lab\n! {daemon}, written by lab::ospf\n!\n"
    );
    for i in ifaces {
        let _ = write!(
            s,
            "interface {i}\n {kw} area 0\n {kw} network point-to-point\n \
             {kw} hello-interval {}\n {kw} dead-interval {}\n \
             {kw} retransmit-interval {}\nexit\n!\n",
            t.hello, t.dead, t.retransmit
        );
    }
    s.push_str(router);
    s
}

/// FRR ospfd config with [`Tuning::FAST`]: see [`frr_ospf_config_with`].
pub fn frr_ospf_config(router_id: &str, ifaces: &[&str]) -> String {
    frr_ospf_config_with(router_id, ifaces, Tuning::FAST)
}

/// FRR ospfd config: OSPFv2 area 0 on each of `ifaces` (point-to-point), router id
/// `router_id`, SPF run at once on a change (`timers throttle spf 0 50 1000`), own LSAs
/// re-originated and received ones accepted without the 5 s / 1 s rate limits.
pub fn frr_ospf_config_with(router_id: &str, ifaces: &[&str], t: Tuning) -> String {
    frr_ospf_config_extra(router_id, ifaces, t, "")
}

/// [`frr_ospf_config_with`] with `extra` (whole lines, each starting with a space) added to
/// the `router ospf` block.
pub fn frr_ospf_config_extra(router_id: &str, ifaces: &[&str], t: Tuning, extra: &str) -> String {
    frr_config(
        "ospfd",
        "ip ospf",
        ifaces,
        t,
        &format!(
            "router ospf\n ospf router-id {router_id}\n timers throttle spf 0 50 1000\n \
             timers throttle lsa all 0\n timers lsa min-arrival 0\n{extra}exit\n!\n"
        ),
    )
}

/// FRR ospf6d config with [`Tuning::FAST`]: see [`frr_ospf6_config_with`].
pub fn frr_ospf6_config(router_id: &str, ifaces: &[&str]) -> String {
    frr_ospf6_config_with(router_id, ifaces, Tuning::FAST)
}

/// FRR ospf6d config: OSPFv3 area 0 on each of `ifaces` (point-to-point), router id
/// `router_id` (a dotted quad, as in OSPFv2). (ospf6d 8.4 has no `timers throttle lsa`.)
pub fn frr_ospf6_config_with(router_id: &str, ifaces: &[&str], t: Tuning) -> String {
    frr_config(
        "ospf6d",
        "ipv6 ospf6",
        ifaces,
        t,
        &format!(
            "router ospf6\n ospf6 router-id {router_id}\n timers throttle spf 0 50 1000\n \
             timers lsa min-arrival 0\nexit\n!\n"
        ),
    )
}

/// BIRD 2 config with [`Tuning::FAST`]: see [`bird_ospf_config_with`].
pub fn bird_ospf_config(
    router_id: &str,
    iface: &str,
    externals_v4: &[(u32, u8)],
    externals_v6: &[([u8; 16], u8)],
    metric: u32,
    log: &Path,
) -> String {
    bird_ospf_config_with(
        router_id,
        iface,
        externals_v4,
        externals_v6,
        metric,
        log,
        Tuning::FAST,
    )
}

/// BIRD 2 config: OSPFv2 (protocol `ospf4`) and OSPFv3 (`ospf6`) in area 0 on `iface`
/// (point-to-point), each exporting one static protocol (`static4`, `static6`: the given
/// prefixes as blackholes) as type-2 external routes with metric `metric`, importing nothing.
/// No kernel protocol. `birdc disable static4` withdraws the IPv4 externals.
///
/// Prefixes are (address, length), host bits zero: IPv4 in host byte order, IPv6 as bytes.
pub fn bird_ospf_config_with(
    router_id: &str,
    iface: &str,
    externals_v4: &[(u32, u8)],
    externals_v6: &[([u8; 16], u8)],
    metric: u32,
    log: &Path,
    t: Tuning,
) -> String {
    let mut s = crate::daemons::bird_statics_config(router_id, log, externals_v4, externals_v6);
    for (name, version, af, stat) in [
        ("ospf4", "v2", "ipv4", "static4"),
        ("ospf6", "v3", "ipv6", "static6"),
    ] {
        let _ = write!(
            s,
            "protocol ospf {version} {name} {{
  {af} {{
    import none;
    export filter {{ if proto = \"{stat}\" then {{ ospf_metric2 = {metric}; accept; }} reject; }};
  }};
  area 0 {{
    interface \"{iface}\" {{
      type ptp;
      hello {hello};
      dead {dead};
      retransmit {rxmt};{tx}
    }};
  }};
}}
",
            hello = t.hello,
            dead = t.dead,
            rxmt = t.retransmit,
            tx = t
                .bird_tx_length
                .map(|l| format!("\n      tx length {l};"))
                .unwrap_or_default(),
        );
    }
    s
}

/// The lab's own ranges and the special ones no external may overlap: the link prefixes
/// 192.0.2/24, 198.51.100/24, 203.0.113/24, loopback, link-local and multicast.
const RESERVED_V4: &[(u32, u8)] = &[
    (0xc000_0200, 24),
    (0xc633_6400, 24),
    (0xcb00_7100, 24),
    (0x7f00_0000, 8),
    (0xa9fe_0000, 16),
    (0xe000_0000, 4),
    (0x0000_0000, 8),
];

fn mask4(l: u8) -> u32 {
    if l == 0 {
        0
    } else {
        u32::MAX << (32 - l as u32)
    }
}

fn mask6(l: u8) -> u128 {
    if l == 0 {
        0
    } else {
        u128::MAX << (128 - l as u32)
    }
}

/// Whether two IPv4 prefixes overlap (one contains the other).
fn overlap4(a: (u32, u8), b: (u32, u8)) -> bool {
    let l = a.1.min(b.1);
    a.0 & mask4(l) == b.0 & mask4(l)
}

/// Whether an IPv6 prefix overlaps 2001:db8::/32 (the lab), fe80::/10, ff00::/8 or ::/8.
fn reserved6(p: ([u8; 16], u8)) -> bool {
    let a = u128::from_be_bytes(p.0);
    [
        (0x2001_0db8u128 << 96, 32u8),
        (0xfe80u128 << 112, 10),
        (0xff00u128 << 112, 8),
        (0, 8),
    ]
    .iter()
    .any(|&(r, rl)| {
        let l = rl.min(p.1);
        a & mask6(l) == r & mask6(l)
    })
}

/// `n` Internet-like IPv4 prefixes ([`bench::routes::gen_v4`], seed `seed`) none of which
/// overlaps the lab's ranges or the special ones.
pub fn externals_v4(n: usize, seed: u64) -> Vec<(u32, u8)> {
    let mut extra = n / 100 + 16;
    loop {
        let v: Vec<(u32, u8)> = bench::routes::gen_v4(n + extra, seed)
            .into_iter()
            .filter(|&p| !RESERVED_V4.iter().any(|&r| overlap4(p, r)))
            .take(n)
            .collect();
        if v.len() == n {
            return v;
        }
        extra *= 4;
    }
}

/// `n` Internet-like IPv6 prefixes ([`bench::routes::gen_v6`]) clear of 2001:db8::/32.
pub fn externals_v6(n: usize, seed: u64) -> Vec<([u8; 16], u8)> {
    let mut extra = n / 100 + 16;
    loop {
        let v: Vec<([u8; 16], u8)> = bench::routes::gen_v6(n + extra, seed)
            .into_iter()
            .filter(|&p| !reserved6(p))
            .take(n)
            .collect();
        if v.len() == n {
            return v;
        }
        extra *= 4;
    }
}

/// `a.b.c.d/len`, as ferrouter's FIB prints it.
pub fn v4_str(p: (u32, u8)) -> String {
    format!("{}/{}", Ipv4Addr::from(p.0), p.1)
}

/// Canonical `addr/len`, as ferrouter's FIB prints it.
pub fn v6_str(p: ([u8; 16], u8)) -> String {
    format!("{}/{}", Ipv6Addr::from(p.0), p.1)
}

/// The first host address inside the prefix (network address + 1).
pub fn v4_host(p: (u32, u8)) -> Ipv4Addr {
    Ipv4Addr::from(p.0 | 1)
}

/// The first host address inside the prefix (network address + 1).
pub fn v6_host(p: ([u8; 16], u8)) -> Ipv6Addr {
    Ipv6Addr::from(u128::from_be_bytes(p.0) | 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ospf_frr_v2_config() {
        let c = frr_ospf_config("198.51.100.1", &["r2", "r3"]);
        for want in [
            "frr defaults traditional",
            "interface r2\n ip ospf area 0\n ip ospf network point-to-point\n",
            "interface r3\n ip ospf area 0\n",
            " ip ospf hello-interval 1\n ip ospf dead-interval 4\n",
            "router ospf\n ospf router-id 198.51.100.1\n",
            " timers throttle lsa all 0\n timers lsa min-arrival 0\n",
        ] {
            assert!(c.contains(want), "{want:?} missing from\n{c}");
        }
        assert_eq!(c.matches("interface ").count(), 2);
        assert!(!c.contains("ospf6"));
        let c = frr_ospf_config_with(
            "10.0.0.1",
            &["eth1"],
            Tuning {
                hello: 10,
                dead: 40,
                retransmit: 5,
                bird_tx_length: None,
            },
        );
        assert!(c.contains(" ip ospf hello-interval 10\n ip ospf dead-interval 40\n"));
        assert!(c.contains(" ip ospf retransmit-interval 5\n"));
    }

    #[test]
    fn ospf_frr_v3_config() {
        let c = frr_ospf6_config("198.51.100.1", &["r2"]);
        for want in [
            "interface r2\n ipv6 ospf6 area 0\n ipv6 ospf6 network point-to-point\n",
            " ipv6 ospf6 hello-interval 1\n ipv6 ospf6 dead-interval 4\n",
            "router ospf6\n ospf6 router-id 198.51.100.1\n",
        ] {
            assert!(c.contains(want), "{want:?} missing from\n{c}");
        }
        assert!(!c.contains("ip ospf "));
        // ospf6d 8.4 has no such command (it logs "No such command" for the line).
        assert!(!c.contains("throttle lsa"));
    }

    #[test]
    fn ospf_bird_config() {
        let v4 = [(0x0a00_0000, 8), (0xc0a8_0100, 24)];
        let v6 = [(Ipv6Addr::new(0x2a00, 0x1450, 0, 0, 0, 0, 0, 0).octets(), 32)];
        let c = bird_ospf_config(
            "198.51.100.2",
            "eth0",
            &v4,
            &v6,
            123,
            Path::new("/tmp/x/bird.log"),
        );
        for want in [
            "router id 198.51.100.2;",
            "log \"/tmp/x/bird.log\"",
            "protocol device {}",
            "protocol static static4 {\n  ipv4;\n  route 10.0.0.0/8 blackhole;\n  route 192.168.1.0/24 blackhole;\n}",
            "protocol static static6 {\n  ipv6;\n  route 2a00:1450::/32 blackhole;\n}",
            "protocol ospf v2 ospf4 {\n  ipv4 {",
            "protocol ospf v3 ospf6 {\n  ipv6 {",
            "if proto = \"static4\" then { ospf_metric2 = 123; accept; } reject;",
            "if proto = \"static6\" then { ospf_metric2 = 123; accept; } reject;",
            "interface \"eth0\" {\n      type ptp;\n      hello 1;\n      dead 4;",
        ] {
            assert!(c.contains(want), "{want:?} missing from\n{c}");
        }
        assert_eq!(c.matches("import none;").count(), 2);
        assert_eq!(c.matches(" blackhole;").count(), 3);
        // Nothing goes to h2's kernel.
        assert!(!c.contains("protocol kernel"));
        // Balanced braces: BIRD would refuse the file otherwise.
        assert_eq!(c.matches('{').count(), c.matches('}').count());
        assert!(!c.contains("tx length"));
        let c = bird_ospf_config_with(
            "198.51.100.2",
            "eth0",
            &v4,
            &[],
            7,
            Path::new("/tmp/x/bird.log"),
            Tuning::BULK,
        );
        assert!(c.contains("      dead 120;\n      retransmit 2;\n      tx length 65535;\n    };"));
        assert_eq!(c.matches("tx length").count(), 2);
        assert!(c.contains("protocol static static6 {\n  ipv6;\n}"));
        let d = crate::daemons::bird_statics_disabled(&c).unwrap();
        assert!(
            d.contains("protocol static static4 {\n  disabled;\n  ipv4;\n"),
            "{d}"
        );
        assert!(
            d.contains("protocol static static6 {\n  disabled;\n  ipv6;\n}"),
            "{d}"
        );
        assert_eq!(d.matches("disabled;").count(), 2);
        assert!(crate::daemons::bird_statics_disabled("router id 1.1.1.1;\n").is_err());
    }

    #[test]
    fn ospf_externals_avoid_the_lab() {
        let v4 = externals_v4(20_000, 7);
        assert_eq!(v4.len(), 20_000);
        assert_eq!(v4, externals_v4(20_000, 7), "deterministic");
        for &p in &v4 {
            assert_eq!(p.0 & !mask4(p.1), 0);
            assert!(
                !RESERVED_V4.iter().any(|&r| overlap4(p, r)),
                "{}",
                v4_str(p)
            );
        }
        assert!(overlap4((0xc000_0000, 16), (0xc000_0200, 24)));
        assert!(!overlap4((0xc000_0300, 24), (0xc000_0200, 24)));
        let v6 = externals_v6(5_000, 7);
        assert_eq!(v6.len(), 5_000);
        assert!(v6.iter().all(|&p| !reserved6(p)));
        assert!(reserved6((
            Ipv6Addr::new(0x2001, 0xdb8, 5, 0, 0, 0, 0, 0).octets(),
            48
        )));
        assert!(reserved6((
            Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0).octets(),
            16
        )));
        assert_eq!(v4_str((0x0a01_0200, 23)), "10.1.2.0/23");
        assert_eq!(v4_host((0x0a01_0200, 23)).to_string(), "10.1.2.1");
        let p = (Ipv6Addr::new(0x2a00, 0x1450, 0, 0, 0, 0, 0, 0).octets(), 32);
        assert_eq!(v6_str(p), "2a00:1450::/32");
        assert_eq!(v6_host(p).to_string(), "2a00:1450::1");
    }
}
