//! VLANs in the lab ([`Lab::vlans`]): h2's link becomes an 802.1Q trunk.
//!
//! ```text
//!                                        {p}-sw (a Linux bridge)
//!   {p}-rtr  r2 ───────────────── trunk ─┬─ to-h2 ── {p}-h2  eth0 198.51.100.2/24     untagged
//!            r2.100 10.100.0.1/24        ├─ to-hv ── {p}-hv  eth0 10.100.0.2/24       802.1Q 100
//!            r2.q   10.200.0.1/24        └─ to-hq ── {p}-hq  eth0 10.200.0.2/24       802.1ad 200 / 802.1Q 300
//! ```
//! (IPv6: 2001:db8:100::/64 and 2001:db8:200::/64, the router at ::1.) The bridge is not
//! VLAN-aware: it carries the tags through, as a switch's trunk does. The kernels of these
//! machines may lack 802.1Q devices, so hv and hq are stations of their VLAN by a tc program
//! on their interface (`bpf/vlan_host.c`, loaded with `tc`): it pushes their tags on
//! egress, and on ingress pops them from frames of their VLAN and drops everything else, as
//! a switch's access port delivers only its VLAN. The router's side is Ferrouter's
//! `[[vlan]]` sub-interfaces.

use anyhow::{Context, Result};

use crate::Lab;

/// The VLAN 100 host's address, and the router's on r2.100.
pub const HV_V4: &str = "10.100.0.2";
/// The router on r2.100.
pub const RV_V4: &str = "10.100.0.1";
/// The VLAN 100 host, IPv6.
pub const HV_V6: &str = "2001:db8:100::2";
/// The router on r2.100, IPv6.
pub const RV_V6: &str = "2001:db8:100::1";
/// The QinQ host.
pub const HQ_V4: &str = "10.200.0.2";
/// The router on r2.q.
pub const RQ_V4: &str = "10.200.0.1";
/// The QinQ host, IPv6.
pub const HQ_V6: &str = "2001:db8:200::2";
/// The router on r2.q, IPv6.
pub const RQ_V6: &str = "2001:db8:200::1";

/// The tc programs: (egress, ingress) per tag stack.
static DOT1Q100: (&[u8], &[u8]) = (
    include_bytes!(concat!(env!("OUT_DIR"), "/vlan_dot1q100_egress.o")),
    include_bytes!(concat!(env!("OUT_DIR"), "/vlan_dot1q100_ingress.o")),
);
static QINQ200_300: (&[u8], &[u8]) = (
    include_bytes!(concat!(env!("OUT_DIR"), "/vlan_qinq200_300_egress.o")),
    include_bytes!(concat!(env!("OUT_DIR"), "/vlan_qinq200_300_ingress.o")),
);

/// The router's `[[vlan]]` sub-interfaces and their addresses.
pub fn router_config() -> String {
    format!(
        "\n[[vlan]]\nname = \"r2.100\"\nparent = \"r2\"\nid = 100\n\
         \n[[vlan]]\nname = \"r2.q\"\nparent = \"r2\"\nid = 200\ninner_id = 300\n\
         \n[[interface]]\nname = \"r2.100\"\naddresses = [\"{RV_V4}/24\", \"{RV_V6}/64\"]\n\
         \n[[interface]]\nname = \"r2.q\"\naddresses = [\"{RQ_V4}/24\", \"{RQ_V6}/64\"]\n"
    )
}

/// Build the switch and the two VLAN hosts (the namespaces exist; r2's trunk and h2's link
/// to the switch are made).
pub(crate) fn build(lab: &Lab) -> Result<()> {
    let sw = lab.switch();
    lab.ns_in(&sw, &["link", "add", "br0", "type", "bridge"])?;
    for (host, port) in [(lab.hv(), "to-hv"), (lab.hq(), "to-hq")] {
        crate::ip(&[
            "link", "add", "eth0", "netns", &host, "type", "veth", "peer", "name", port, "netns",
            &sw,
        ])?;
    }
    for port in ["trunk", "to-h2", "to-hv", "to-hq"] {
        lab.ns_in(&sw, &["link", "set", port, "master", "br0"])?;
        lab.ns_in(&sw, &["link", "set", port, "up"])?;
    }
    lab.ns_in(&sw, &["link", "set", "br0", "up"])?;
    let hosts = [
        (lab.hv(), "dot1q100", DOT1Q100, HV_V4, HV_V6, RV_V4, RV_V6),
        (
            lab.hq(),
            "qinq200_300",
            QINQ200_300,
            HQ_V4,
            HQ_V6,
            RQ_V4,
            RQ_V6,
        ),
    ];
    for (host, name, (egress, ingress), v4, v6, r4, r6) in hosts {
        let egress_obj = lab.dir.join(format!("vlan_{name}_egress.o"));
        let ingress_obj = lab.dir.join(format!("vlan_{name}_ingress.o"));
        std::fs::write(&egress_obj, egress)
            .with_context(|| format!("writing {}", egress_obj.display()))?;
        std::fs::write(&ingress_obj, ingress)
            .with_context(|| format!("writing {}", ingress_obj.display()))?;
        lab.exec(&host, &["tc", "qdisc", "add", "dev", "eth0", "clsact"])?;
        for (dir, obj) in [("egress", &egress_obj), ("ingress", &ingress_obj)] {
            let obj = obj.to_string_lossy();
            lab.exec(
                &host,
                &[
                    "tc", "filter", "add", "dev", "eth0", dir, "bpf", "da", "obj", &obj, "sec",
                    "tc",
                ],
            )
            .with_context(|| format!("loading the VLAN host program into {host} ({dir})"))?;
        }
        lab.ns_in(&host, &["addr", "add", &format!("{v4}/24"), "dev", "eth0"])?;
        lab.ns_in(
            &host,
            &[
                "-6",
                "addr",
                "add",
                &format!("{v6}/64"),
                "dev",
                "eth0",
                "nodad",
            ],
        )?;
        lab.ns_in(&host, &["link", "set", "eth0", "up"])?;
        lab.ns_in(&host, &["route", "add", "default", "via", r4])?;
        lab.ns_in(&host, &["-6", "route", "add", "default", "via", r6])?;
    }
    Ok(())
}
