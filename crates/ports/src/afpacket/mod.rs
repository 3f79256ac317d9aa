//! A copying port on a Linux `AF_PACKET` socket.
//!
//! Receive walks a TPACKET_V3 ring mmap'ed from the kernel: the kernel fills blocks of
//! packets and hands each block over by setting `TP_STATUS_USER`; we copy every frame into
//! a buffer of the worker's packet memory and give the block back once all its frames are
//! consumed. Transmit copies nothing itself: one `sendmmsg` per burst points the kernel at
//! the frames in packet memory, after which the buffers are free again.
//!
//! Works on any interface (veth included) at the price of one copy each way; AF_XDP is the
//! fast option where the driver supports it.

pub(crate) mod sys;

use std::cell::Cell;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use dataplane::buffer::{PacketMemory, Pkt, Vector, FRAME_SIZE, HEADROOM, VECTOR_SIZE};
use dataplane::worker::Port;

use crate::{PortError, PortStats};

/// The 802.1Q TPID, used when the kernel strips a tag without saying which TPID it had.
const ETH_P_8021Q: u16 = 0x8100;

/// How to size and tune the socket of an [`AfPacket`] port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfPacketOptions {
    /// Bytes per receive-ring block; a multiple of the page size.
    pub block_size: u32,
    /// Blocks in the receive ring.
    pub block_count: u32,
    /// Nominal frame slot size (TPACKET_V3 packs frames tightly; this only sizes the
    /// request). A multiple of 16.
    pub frame_size: u32,
    /// Milliseconds after which the kernel hands over a block that is not full, bounding
    /// the latency added at low rates.
    pub retire_timeout_ms: u32,
    /// Transmit straight to the driver, skipping the qdisc layer (ignored if unsupported).
    pub qdisc_bypass: bool,
    /// Ask the kernel not to loop our own transmitted frames back to us
    /// (`PACKET_IGNORE_OUTGOING`). When false, or when the kernel refuses, the port skips
    /// frames marked `PACKET_OUTGOING` itself.
    pub kernel_ignore_outgoing: bool,
}

impl Default for AfPacketOptions {
    fn default() -> Self {
        AfPacketOptions {
            block_size: 1 << 20,
            block_count: 8,
            frame_size: FRAME_SIZE as u32,
            retire_timeout_ms: 1,
            qdisc_bypass: true,
            kernel_ignore_outgoing: true,
        }
    }
}

/// Where receive resumes: a block of the ring and, if it is being consumed, the packets
/// left in it and the offset of the next one.
#[derive(Clone, Copy, Debug, Default)]
struct RxCursor {
    block: usize,
    left: u32,
    off: u32,
}

/// An `AF_PACKET` port bound to one interface.
pub struct AfPacket {
    ring: sys::Ring,
    tx: sys::TxBatch,
    fd: OwnedFd,
    ifname: String,
    ifindex: u32,
    port_id: u16,
    mac: [u8; 6],
    mtu: u16,
    cursor: RxCursor,
    skip_outgoing: bool,
    stats: PortStats,
    /// `PACKET_STATISTICS` resets on every read, so the sum is kept here; a `Cell` lets
    /// `stats()` take `&self`.
    kernel_drops: Cell<u64>,
}

impl std::fmt::Debug for AfPacket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfPacket")
            .field("ifname", &self.ifname)
            .field("ifindex", &self.ifindex)
            .field("port_id", &self.port_id)
            .field("fd", &self.fd.as_raw_fd())
            .finish_non_exhaustive()
    }
}

impl AfPacket {
    /// Open a packet socket on `ifname` in the calling thread's network namespace, with a
    /// receive ring shaped by `opts`. Received packets carry `port_id` as their `rx_port`.
    /// The interface is not made promiscuous: the port sees frames addressed to the
    /// interface's MAC, broadcast and multicast.
    pub fn open(ifname: &str, port_id: u16, opts: AfPacketOptions) -> Result<AfPacket, PortError> {
        let err = |op: &'static str| move |e| PortError::from_io(ifname, op, e);
        let fd = sys::packet_socket().map_err(err("socket(AF_PACKET, SOCK_RAW)"))?;
        let raw = fd.as_raw_fd();
        let ifindex = sys::ifindex(raw, ifname).map_err(err("ioctl(SIOCGIFINDEX)"))?;
        let mac = sys::hwaddr(raw, ifname).map_err(err("ioctl(SIOCGIFHWADDR)"))?;
        let mtu = sys::mtu(raw, ifname).map_err(err("ioctl(SIOCGIFMTU)"))?;
        sys::set_int(
            raw,
            libc::PACKET_VERSION,
            libc::tpacket_versions::TPACKET_V3 as libc::c_int,
        )
        .map_err(err("setsockopt(PACKET_VERSION=TPACKET_V3)"))?;
        let skip_outgoing = !opts.kernel_ignore_outgoing
            || sys::set_int(raw, libc::PACKET_IGNORE_OUTGOING, 1).is_err();
        if opts.qdisc_bypass {
            // An optimisation only: kernels without it still transmit through the qdisc.
            let _ = sys::set_int(raw, libc::PACKET_QDISC_BYPASS, 1);
        }
        let geometry = sys::RingGeometry {
            block_size: opts.block_size,
            block_count: opts.block_count,
            frame_size: opts.frame_size,
            retire_timeout_ms: opts.retire_timeout_ms,
        };
        sys::set_rx_ring(raw, geometry).map_err(err("setsockopt(PACKET_RX_RING)"))?;
        let ring = sys::Ring::map(raw, geometry).map_err(err("mmap(PACKET_RX_RING)"))?;
        // Bind last: frames start flowing only once the ring is in place.
        sys::bind(raw, ifindex).map_err(err("bind(AF_PACKET)"))?;
        Ok(AfPacket {
            ring,
            tx: sys::TxBatch::new(VECTOR_SIZE),
            fd,
            ifname: ifname.to_string(),
            ifindex,
            port_id,
            mac,
            mtu: mtu.min(u32::from(u16::MAX)) as u16,
            cursor: RxCursor::default(),
            skip_outgoing,
            stats: PortStats::default(),
            kernel_drops: Cell::new(0),
        })
    }

    /// Kernel index of the interface.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Name of the interface.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Port id stamped on received packets.
    pub fn port_id(&self) -> u16 {
        self.port_id
    }

    /// MAC address of the interface (read at open or at the last [`AfPacket::refresh`]).
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// MTU of the interface (read at open or at the last [`AfPacket::refresh`]).
    pub fn mtu(&self) -> u16 {
        self.mtu
    }

    /// Re-read MAC address and MTU from the kernel, after the operator changed them.
    pub fn refresh(&mut self) -> Result<(), PortError> {
        let raw = self.fd.as_raw_fd();
        let name = self.ifname.as_str();
        self.mac = sys::hwaddr(raw, name)
            .map_err(|e| PortError::from_io(name, "ioctl(SIOCGIFHWADDR)", e))?;
        let mtu =
            sys::mtu(raw, name).map_err(|e| PortError::from_io(name, "ioctl(SIOCGIFMTU)", e))?;
        self.mtu = mtu.min(u32::from(u16::MAX)) as u16;
        Ok(())
    }

    /// The socket, to `poll()` for `POLLIN` when idle (readable once a block is ready).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Whether the port filters out its own transmitted frames itself, because the kernel
    /// could not be asked to (or was told not to be).
    pub fn filters_outgoing(&self) -> bool {
        self.skip_outgoing
    }

    /// The port's counters, with kernel drops collected up to now.
    pub fn stats(&self) -> PortStats {
        if let Ok(d) = sys::take_drops(self.fd.as_raw_fd()) {
            self.kernel_drops.set(self.kernel_drops.get() + d);
        }
        PortStats {
            kernel_drops: self.kernel_drops.get(),
            ..self.stats
        }
    }
}

/// Copy one frame from the ring into a fresh buffer and append it to `v`, or count why not.
#[inline]
fn deliver<M: PacketMemory>(
    f: &sys::RxFrame<'_>,
    mem: &mut M,
    v: &mut Vector,
    stats: &mut PortStats,
    port_id: u16,
    skip_outgoing: bool,
) {
    if skip_outgoing && f.pkttype == libc::PACKET_OUTGOING {
        return;
    }
    // The kernel moves an 802.1Q/802.1ad tag out of the frame into metadata; put it back so
    // the dataplane sees what was on the wire.
    let vlan = f.status & libc::TP_STATUS_VLAN_VALID != 0 && f.data.len() >= 12;
    let len = f.data.len() + if vlan { 4 } else { 0 };
    if (f.data.len() as u64) < u64::from(f.wire_len) || len > FRAME_SIZE - HEADROOM {
        stats.rx_dropped_too_big += 1;
        return;
    }
    let Some(buf) = mem.alloc() else {
        stats.rx_dropped_no_buffer += 1;
        return;
    };
    let Some(dst) = mem.frame_mut(buf).get_mut(HEADROOM..HEADROOM + len) else {
        mem.free(buf);
        stats.rx_dropped_too_big += 1;
        return;
    };
    if vlan {
        let tpid = if f.status & libc::TP_STATUS_VLAN_TPID_VALID != 0 && f.vlan_tpid != 0 {
            f.vlan_tpid
        } else {
            ETH_P_8021Q
        };
        let (macs, rest) = f.data.split_at(12);
        dst[..12].copy_from_slice(macs);
        dst[12..14].copy_from_slice(&tpid.to_be_bytes());
        dst[14..16].copy_from_slice(&f.vlan_tci.to_be_bytes());
        dst[16..].copy_from_slice(rest);
    } else {
        dst.copy_from_slice(f.data);
    }
    // The caller stops before the vector is full, so this push cannot fail.
    v.push(Pkt::new(buf, HEADROOM as u16, len as u16, port_id));
    stats.rx_packets += 1;
    stats.rx_bytes += len as u64;
}

impl<M: PacketMemory> Port<M> for AfPacket {
    fn rx_burst(&mut self, mem: &mut M, v: &mut Vector) -> usize {
        let before = v.len;
        // Each block is looked at most once per call, so a stream of empty blocks cannot
        // keep us here.
        let mut blocks_seen = 0;
        while v.len < VECTOR_SIZE {
            let c = &mut self.cursor;
            if c.left == 0 {
                if blocks_seen == self.ring.blocks() {
                    break;
                }
                let Some(b) = self.ring.ready(c.block) else {
                    break;
                };
                blocks_seen += 1;
                c.left = b.num_pkts;
                c.off = b.first;
            }
            while c.left > 0 && v.len < VECTOR_SIZE {
                let Some(f) = self.ring.frame(c.block, c.off) else {
                    // Corrupt header: abandon the rest of the block rather than read junk.
                    c.left = 0;
                    break;
                };
                deliver(
                    &f,
                    mem,
                    v,
                    &mut self.stats,
                    self.port_id,
                    self.skip_outgoing,
                );
                c.left -= 1;
                if f.next_offset == 0 {
                    c.left = 0;
                }
                c.off = c.off.wrapping_add(f.next_offset);
            }
            if c.left == 0 {
                let done = c.block;
                c.block = (done + 1) % self.ring.blocks();
                self.ring.release(done);
            }
        }
        v.len - before
    }

    fn tx_burst(&mut self, mem: &mut M, pkts: &[Pkt]) -> usize {
        let fd = self.fd.as_raw_fd();
        let mut sent = 0;
        for chunk in pkts.chunks(self.tx.capacity()) {
            let mut bad = 0u64;
            let m: &M = mem;
            let r = self.tx.send(
                fd,
                chunk.iter().filter_map(|p| {
                    let (off, len) = (p.off as usize, p.len as usize);
                    let bytes = m.frame(p.buf).get(off..off + len);
                    bad += u64::from(bytes.is_none());
                    bytes
                }),
            );
            for p in chunk {
                mem.free(p.buf);
            }
            self.stats.tx_packets += r.sent as u64;
            self.stats.tx_bytes += r.bytes;
            self.stats.tx_errors += r.failed as u64 + bad;
            sent += r.sent;
        }
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>() {}

    #[test]
    fn port_is_send() {
        assert_send::<AfPacket>();
    }

    #[test]
    fn defaults_describe_a_valid_ring() {
        let o = AfPacketOptions::default();
        assert_eq!(o.block_size % 4096, 0);
        assert_eq!(o.frame_size % 16, 0);
        assert_eq!(o.block_size % o.frame_size, 0);
        assert!(o.block_count > 1);
    }
}
