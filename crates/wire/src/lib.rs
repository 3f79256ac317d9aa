//! Zero-copy packet views and checksums for the Ferrouter fast path.
//!
//! Each protocol has a `XPacket<T: AsRef<[u8]>>` view whose `new_checked`
//! validates the buffer once; afterwards every getter and setter is a
//! bounds-safe one-liner that does not panic, so the per-packet path can call
//! them freely. Small `XRepr` structs parse from and emit into views.
//! Multi-byte fields are read big-endian; IPv4 addresses are host-order
//! `u32`, IPv6 addresses `[u8; 16]`, MAC addresses `[u8; 6]`.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod arp;
pub mod checksum;
mod error;
pub mod esp;
pub mod ethernet;
pub mod fuzzing;
pub mod icmpv4;
pub mod icmpv6;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod offload;
pub mod tcp;
pub mod udp;

pub use arp::{ArpPacket, ArpRepr};
pub use error::{Error, Result};
pub use esp::EspPacket;
pub use ethernet::{ethertype, parse_l2, EthernetFrame, L2Info, VlanTag};
pub use icmpv4::Icmpv4Packet;
pub use icmpv6::{Icmpv6Packet, NdpRepr, PrefixInfo, PrefixInfos};
pub use ip::{flow_ports, protocol};
pub use ipv4::{check_options, Ipv4Packet, Ipv4Repr, OptionSummary};
pub use ipv6::{walk_ext_headers, ExtWalk, FragInfo, Ipv6Packet, Ipv6Repr, MAX_EXT_HEADERS};
pub use tcp::TcpPacket;
pub use udp::{UdpPacket, UdpRepr};

/// Fixed-width big-endian reads shared by the views. Callers pass slices
/// taken with constant ranges from validated buffers.
mod util {
    #[inline(always)]
    pub fn be16(b: &[u8]) -> u16 {
        u16::from_be_bytes([b[0], b[1]])
    }

    #[inline(always)]
    pub fn be32(b: &[u8]) -> u32 {
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    #[inline(always)]
    pub fn mac(b: &[u8]) -> [u8; 6] {
        [b[0], b[1], b[2], b[3], b[4], b[5]]
    }

    #[inline(always)]
    pub fn addr16(b: &[u8]) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&b[..16]);
        a
    }
}
