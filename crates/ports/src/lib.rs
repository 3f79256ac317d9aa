//! Port backends: the places packets enter and leave the fast path.
//!
//! Each backend implements [`dataplane::worker::Port`] over some packet memory. Today:
//! - [`AfXdp`], a port on an `AF_XDP` socket with its own UMEM and an XDP program that
//!   passes the kernel's traffic (ARP, multicast, link-local, the router's addresses) to
//!   the kernel and redirects the rest to the socket; native or generic XDP, copy or
//!   zero-copy, whatever the driver allows (veth: native XDP, copy mode).
//! - [`AfPacket`], a copying port on a Linux `AF_PACKET` socket (TPACKET_V3 receive ring,
//!   `sendmmsg` transmit) that works on any interface, including veth.
//! - [`Memif`], a shared-memory interface (memif protocol 2.0, server or client role) to
//!   another process: VPP, a libmemif application, DPDK's `net_memif` or another ferrouter.
//! - [`tap::Tap`], the Linux face of a port without a netdev (memif): a TAP interface.

#![warn(missing_docs)]

pub mod afpacket;
pub mod afxdp;
mod any;
pub mod memif;
mod sys;
pub mod tap;

pub use afpacket::{AfPacket, AfPacketOptions};
pub use afxdp::{AfXdp, AfXdpOptions, AttachMode, BindMode, Share};
pub use any::AnyPort;
pub use memif::{Memif, MemifOptions, MemifRole, MemifStats};

/// Why a port could not be opened or configured.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// No interface of that name exists where the socket was opened.
    #[error("interface {ifname} not found in this network namespace")]
    NotFound {
        /// The interface asked for.
        ifname: String,
    },
    /// The process lacks the privilege to open packet sockets.
    #[error(
        "no permission to open a packet socket on {ifname} (run as root / CAP_NET_RAW): {source}"
    )]
    Permission {
        /// The interface asked for.
        ifname: String,
        /// What the kernel said.
        source: std::io::Error,
    },
    /// The XDP side of an AF_XDP port failed: loading or attaching the program, a map
    /// update, or binding the socket. `reason` says which and what to do.
    #[error("AF_XDP port on {ifname}: {reason}")]
    Xdp {
        /// The interface concerned.
        ifname: String,
        /// What failed, e.g. "XDP not supported in native mode: ..." or
        /// "AF_XDP bind failed (queue 3, zero-copy): ...".
        reason: String,
    },
    /// A system call on the port failed.
    #[error("{op} on {ifname} failed: {source}")]
    Io {
        /// The interface concerned.
        ifname: String,
        /// The operation, as the system call and option it used.
        op: &'static str,
        /// What the kernel said.
        source: std::io::Error,
    },
}

impl PortError {
    /// Classify a failed system call `op` on `ifname`: missing device and missing privilege
    /// get their own variants so callers can tell the operator what to fix.
    pub(crate) fn from_io(ifname: &str, op: &'static str, source: std::io::Error) -> PortError {
        match source.raw_os_error() {
            Some(libc::ENODEV) | Some(libc::ENXIO) => PortError::NotFound {
                ifname: ifname.to_string(),
            },
            Some(libc::EPERM) | Some(libc::EACCES) => PortError::Permission {
                ifname: ifname.to_string(),
                source,
            },
            _ => PortError::Io {
                ifname: ifname.to_string(),
                op,
                source,
            },
        }
    }
}

/// The largest IP MTU of any port (jumbo frames): 9000 bytes, in frames of up to
/// [`dataplane::MAX_FRAME`] bytes with the Ethernet header and up to two VLAN tags.
pub const MAX_MTU: u32 = 9000;
/// The largest IP MTU an AF_XDP port carries. A frame larger than a 2,048-byte UMEM chunk
/// (less the kernel's 256 bytes of `XDP_PACKET_HEADROOM`) arrives and leaves as several
/// descriptors (multi-buffer AF_XDP, `XDP_USE_SG`), gathered into one big buffer.
pub const AF_XDP_MAX_MTU: u32 = MAX_MTU;
/// The largest IP MTU an AF_PACKET or memif port carries. (AF_PACKET super-frames from
/// segmentation offload are cut into segments, so they are not limited by it.)
pub const BUFFER_MAX_MTU: u32 = MAX_MTU;

/// Counters a port keeps for itself (single writer: the worker driving the port; the
/// caller publishes them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames handed to the dataplane.
    pub rx_packets: u64,
    /// Bytes of those frames (as delivered, VLAN tag included).
    pub rx_bytes: u64,
    /// Frames dropped because the packet memory had no free buffer.
    pub rx_dropped_no_buffer: u64,
    /// Frames dropped because they do not fit a buffer after the headroom (or were
    /// truncated by the kernel); never delivered cut short.
    pub rx_dropped_too_big: u64,
    /// Frames the kernel accepted for transmission.
    pub tx_packets: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// Frames not sent: queue full (`EAGAIN`/`ENOBUFS`), rejected by the kernel, or with a
    /// descriptor outside its buffer.
    pub tx_errors: u64,
    /// Frames the kernel dropped before they reached the receive ring (ring full),
    /// accumulated from `PACKET_STATISTICS`.
    pub kernel_drops: u64,
    /// Received frames whose L4 checksum the sender had left to be completed (checksum
    /// offload) and the port completed.
    pub rx_csum_completed: u64,
    /// Received TCP/UDP super-frames (segmentation offload, GRO) the port cut into
    /// segments; each segment is counted in `rx_packets`.
    pub rx_gso_split: u64,
    /// Super-frames dropped because they could not be cut: a kind of segmentation this port
    /// does not do, headers that do not add up, or more than 256 segments.
    pub rx_dropped_offload: u64,
}
