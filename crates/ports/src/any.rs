//! [`AnyPort`]: one port of any backend, as the daemon's workers, the tester and the
//! benchmarks drive it (one switch over the backends, here).

use std::net::IpAddr;
use std::os::fd::RawFd;
use std::sync::Arc;

use dataplane::worker::Port;
use dataplane::{PacketMemory, Pkt, Vector};

use crate::{AfPacket, AfXdp, Memif, PortError, PortStats};

/// A port of any backend.
pub enum AnyPort {
    /// AF_XDP: the XDP program passes the kernel's traffic up and redirects the rest.
    Xdp(Box<AfXdp>),
    /// AF_PACKET (TPACKET_V3): works everywhere; the kernel sees every frame too.
    Packet(Box<AfPacket>),
    /// memif: shared memory with a userspace peer.
    Memif(Box<Memif>),
}

impl AnyPort {
    /// Counters.
    pub fn stats(&self) -> PortStats {
        match self {
            AnyPort::Xdp(p) => p.stats(),
            AnyPort::Packet(p) => p.stats(),
            AnyPort::Memif(p) => p.stats().port_stats(),
        }
    }
    /// The interface's MAC (memif ports have none of their own).
    pub fn mac(&self) -> Option<[u8; 6]> {
        match self {
            AnyPort::Xdp(p) => Some(p.mac()),
            AnyPort::Packet(p) => Some(p.mac()),
            AnyPort::Memif(_) => None,
        }
    }
    /// The Linux interface and its ifindex (memif ports have none).
    pub fn interface(&self) -> Option<(&str, u32)> {
        match self {
            AnyPort::Xdp(p) => Some((p.ifname(), p.ifindex())),
            AnyPort::Packet(p) => Some((p.ifname(), p.ifindex())),
            AnyPort::Memif(_) => None,
        }
    }
    /// The backend as `show interfaces` names it (with the XDP mode for AF_XDP).
    pub fn backend(&self) -> String {
        match self {
            AnyPort::Xdp(p) => format!("af_xdp ({})", p.mode()),
            AnyPort::Packet(_) => "af_packet".into(),
            AnyPort::Memif(_) => "memif".into(),
        }
    }
    /// Tell the XDP program which destinations are the router's own (the kernel's
    /// traffic); other backends need nothing.
    pub fn set_local_addrs(&mut self, addrs: &[IpAddr]) -> Result<(), PortError> {
        self.set_local_addrs_shared(addrs, crate::Share::default())
    }

    /// [`AnyPort::set_local_addrs`], with the fast path taking some of their traffic
    /// (`share`: NAT's ports, ESP).
    pub fn set_local_addrs_shared(
        &mut self,
        addrs: &[IpAddr],
        share: crate::Share,
    ) -> Result<(), PortError> {
        match self {
            AnyPort::Xdp(p) => p.set_local_addrs_shared(addrs, share),
            _ => Ok(()),
        }
    }

    /// Where NAT claims ports of the addresses it shares with the kernel (AF_XDP only:
    /// other backends give the fast path every packet).
    pub fn nat_ports(&self) -> Option<Arc<dyn dataplane::claims::PortClaims>> {
        match self {
            AnyPort::Xdp(p) => p.nat_ports(),
            _ => None,
        }
    }
}

impl<M: PacketMemory> Port<M> for AnyPort {
    fn rx_burst(&mut self, mem: &mut M, v: &mut Vector) -> usize {
        match self {
            AnyPort::Xdp(p) => p.rx_burst(mem, v),
            AnyPort::Packet(p) => p.rx_burst(mem, v),
            AnyPort::Memif(p) => p.rx_burst(mem, v),
        }
    }
    fn tx_burst(&mut self, mem: &mut M, pkts: &[Pkt]) -> usize {
        match self {
            AnyPort::Xdp(p) => p.tx_burst(mem, pkts),
            AnyPort::Packet(p) => p.tx_burst(mem, pkts),
            AnyPort::Memif(p) => p.tx_burst(mem, pkts),
        }
    }
    fn wait_fd(&self) -> RawFd {
        match self {
            AnyPort::Xdp(p) => Port::<M>::wait_fd(p.as_ref()),
            AnyPort::Packet(p) => Port::<M>::wait_fd(p.as_ref()),
            AnyPort::Memif(p) => Port::<M>::wait_fd(p.as_ref()),
        }
    }
    fn wakes_per_frame(&self) -> bool {
        match self {
            AnyPort::Xdp(p) => Port::<M>::wakes_per_frame(p.as_ref()),
            AnyPort::Packet(p) => Port::<M>::wakes_per_frame(p.as_ref()),
            AnyPort::Memif(p) => Port::<M>::wakes_per_frame(p.as_ref()),
        }
    }
}
