//! `[bgp]` in ferrouter's config file.
//!
//! ```toml
//! [bgp]
//! asn = 65001
//! router_id = "198.51.100.1"
//! hold_time = 90        # seconds; 0 (no keepalives) or 3..=65535
//! connect_retry = 5     # seconds between connection attempts
//! always_compare_med = false  # compare MED across neighbouring ASes too
//!
//! [[bgp.neighbor]]
//! address = "198.51.100.2"
//! remote_as = 65002
//! local_pref = 200      # LOCAL_PREF given to routes learned over this eBGP session
//! max_prefixes = 1000000  # end the session (Cease) past this many prefixes
//! ```

use std::net::{IpAddr, Ipv4Addr};

use serde::{Deserialize, Serialize};

fn default_hold() -> u16 {
    90
}

fn default_retry() -> u32 {
    5
}

fn default_port() -> u16 {
    179
}

fn default_local_pref() -> u32 {
    100
}

/// The speaker.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BgpConfig {
    /// Our AS number (4-octet ASNs are supported, RFC 6793).
    pub asn: u32,
    /// BGP identifier.
    pub router_id: Ipv4Addr,
    /// Hold time we propose, in seconds: 0 or 3..=65535.
    #[serde(default = "default_hold")]
    pub hold_time: u16,
    /// Seconds between attempts to connect to a neighbour that is down (at least 1).
    #[serde(default = "default_retry")]
    pub connect_retry: u32,
    /// Compare MED between paths from different neighbouring ASes too (FRR's and Junos'
    /// `always-compare-med`); by default only within one neighbouring AS (RFC 4271).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub always_compare_med: bool,
    /// The neighbours.
    #[serde(rename = "neighbor", default)]
    pub neighbors: Vec<NeighborConfig>,
}

/// One `[[bgp.neighbor]]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NeighborConfig {
    /// The neighbour's address; we connect to it.
    pub address: IpAddr,
    /// Its AS: a different one from ours is eBGP, the same is iBGP.
    pub remote_as: u32,
    /// TCP port to connect to.
    #[serde(default = "default_port")]
    pub port: u16,
    /// LOCAL_PREF of routes learned from an eBGP neighbour (iBGP routes keep theirs).
    #[serde(default = "default_local_pref")]
    pub local_pref: u32,
    /// Most prefixes this neighbour may have paths for: past it, the session ends with a
    /// Cease / Maximum Number of Prefixes Reached (RFC 4486) and is retried after
    /// `connect_retry`. No limit when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_prefixes: Option<u32>,
    /// Address families carried: `"ipv4"`, `"ipv6"`. Default: the family of `address`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub families: Vec<Family>,
    /// Free text for `show bgp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// An address family (unicast).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// IPv4 unicast (AFI 1, SAFI 1).
    Ipv4,
    /// IPv6 unicast (AFI 2, SAFI 1).
    Ipv6,
}

impl NeighborConfig {
    /// The families this session carries.
    pub fn families(&self) -> Vec<Family> {
        if self.families.is_empty() {
            vec![if self.address.is_ipv4() {
                Family::Ipv4
            } else {
                Family::Ipv6
            }]
        } else {
            self.families.clone()
        }
    }
}
