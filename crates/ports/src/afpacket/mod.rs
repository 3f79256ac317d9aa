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

use dataplane::buffer::{PacketMemory, Pkt, Vector, FRAME_SIZE, HEADROOM, MAX_FRAME, VECTOR_SIZE};
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
    /// Ask for a virtio-net header with every frame (`PACKET_VNET_HDR`), so that checksums
    /// a sender left to offload are completed with its offsets and super-frames (TSO/GSO
    /// from a local sender, GRO) are cut into segments. Ignored if the kernel refuses.
    pub vnet_hdr: bool,
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
            vnet_hdr: true,
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
    /// Frames come with a virtio-net header (`PACKET_VNET_HDR`), which says what the
    /// sender left to finish (checksum, segmentation).
    vnet: bool,
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
        // Before the ring: the kernel then writes the header with every frame. Without it
        // (a kernel that refuses), partial checksums are still flagged by
        // TP_STATUS_CSUMNOTREADY, but super-frames cannot be cut and are dropped, counted.
        let vnet = opts.vnet_hdr && sys::enable_vnet_hdr(raw).is_ok();
        sys::set_rx_ring(raw, geometry).map_err(err("setsockopt(PACKET_RX_RING)"))?;
        let ring = sys::Ring::map(raw, geometry, vnet).map_err(err("mmap(PACKET_RX_RING)"))?;
        // Bind last: frames start flowing only once the ring is in place.
        sys::bind(raw, ifindex).map_err(err("bind(AF_PACKET)"))?;
        Ok(AfPacket {
            ring,
            tx: sys::TxBatch::new(VECTOR_SIZE, vnet),
            fd,
            ifname: ifname.to_string(),
            ifindex,
            port_id,
            mac,
            mtu: mtu.min(u32::from(u16::MAX)) as u16,
            cursor: RxCursor::default(),
            skip_outgoing,
            vnet,
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

    /// Whether frames come with a virtio-net header (offloads completed with the sender's
    /// offsets, super-frames cut), or only with `TP_STATUS_CSUMNOTREADY`.
    pub fn has_vnet_hdr(&self) -> bool {
        self.vnet
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

/// What the virtio-net header in front of a frame says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct VnetHdr {
    /// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the L4 checksum is partial.
    needs_csum: bool,
    /// `VIRTIO_NET_HDR_GSO_*` without the ECN bit.
    gso_type: u8,
    /// Payload bytes per segment.
    gso_size: u16,
    /// Where the checksummed bytes start, from the MAC header (VLAN tag not counted).
    csum_start: u16,
    /// Where the checksum goes, from `csum_start`.
    csum_offset: u16,
}

const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;
const VIRTIO_NET_HDR_GSO_NONE: u8 = 0;
const VIRTIO_NET_HDR_GSO_TCPV4: u8 = 1;
const VIRTIO_NET_HDR_GSO_TCPV6: u8 = 4;
const VIRTIO_NET_HDR_GSO_UDP_L4: u8 = 5;
const VIRTIO_NET_HDR_GSO_ECN: u8 = 0x80;

impl VnetHdr {
    /// Parse the header as the kernel writes it for a packet socket (little-endian fields,
    /// as `vio_le()` on the little-endian hosts Ferrouter runs on).
    fn parse(b: &[u8; sys::VNET_HDR_LEN]) -> VnetHdr {
        let le = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        VnetHdr {
            needs_csum: b[0] & VIRTIO_NET_HDR_F_NEEDS_CSUM != 0,
            gso_type: b[1] & !VIRTIO_NET_HDR_GSO_ECN,
            gso_size: le(4),
            csum_start: le(6),
            csum_offset: le(8),
        }
    }
}

/// Whether a frame could be taken: `NoRoom` leaves it in the ring for the next burst (a
/// super-frame's segments must all fit the vector).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Delivery {
    Taken,
    NoRoom,
}

/// Write the frame's L2 header to `dst` (the VLAN tag the kernel moved into metadata put
/// back, as TPID + TCI after the MACs); returns its length, or `None` if `dst` is too small.
fn write_l2(data: &[u8], l3: usize, tag: Option<[u8; 4]>, dst: &mut [u8]) -> Option<usize> {
    let src = data.get(..l3)?;
    match tag {
        Some(t) => {
            let d = dst.get_mut(..l3 + 4)?;
            d[..12].copy_from_slice(src.get(..12)?);
            d[12..16].copy_from_slice(&t);
            d[16..].copy_from_slice(src.get(12..)?);
            Some(l3 + 4)
        }
        None => {
            dst.get_mut(..l3)?.copy_from_slice(src);
            Some(l3)
        }
    }
}

/// Copy one frame from the ring into fresh buffers and append them to `v` (one, or one per
/// segment of a super-frame), or count why not.
#[inline]
fn deliver<M: PacketMemory>(
    f: &sys::RxFrame<'_>,
    mem: &mut M,
    v: &mut Vector,
    stats: &mut PortStats,
    port_id: u16,
    skip_outgoing: bool,
) -> Delivery {
    if skip_outgoing && f.pkttype == libc::PACKET_OUTGOING {
        return Delivery::Taken;
    }
    // The kernel moves an 802.1Q/802.1ad tag out of the frame into metadata; put it back so
    // the dataplane sees what was on the wire.
    let vlan = f.status & libc::TP_STATUS_VLAN_VALID != 0 && f.data.len() >= 12;
    let tag = vlan.then(|| {
        let tpid = if f.status & libc::TP_STATUS_VLAN_TPID_VALID != 0 && f.vlan_tpid != 0 {
            f.vlan_tpid
        } else {
            ETH_P_8021Q
        };
        let [a, b] = tpid.to_be_bytes();
        let [c, d] = f.vlan_tci.to_be_bytes();
        [a, b, c, d]
    });
    let shift = if vlan { 4 } else { 0 };
    if (f.data.len() as u64) < u64::from(f.wire_len) {
        stats.rx_dropped_too_big += 1;
        return Delivery::Taken;
    }
    let hdr = f.vnet.map(|b| VnetHdr::parse(&b)).unwrap_or_default();
    if hdr.gso_type != VIRTIO_NET_HDR_GSO_NONE {
        return deliver_segments(f, &hdr, tag, mem, v, stats, port_id);
    }
    let len = f.data.len() + shift;
    if len > MAX_FRAME {
        stats.rx_dropped_too_big += 1;
        return Delivery::Taken;
    }
    // A jumbo frame goes into a big buffer.
    let Some(buf) = mem.alloc_for(len) else {
        stats.rx_dropped_no_buffer += 1;
        return Delivery::Taken;
    };
    let Some(dst) = mem.frame_mut(buf).get_mut(HEADROOM..HEADROOM + len) else {
        mem.free(buf);
        stats.rx_dropped_too_big += 1;
        return Delivery::Taken;
    };
    match tag {
        // Only the 12 MAC bytes form the "L2 header" here: the rest is copied after the tag.
        Some(_) => {
            let _ = write_l2(f.data, 12, tag, dst);
            dst[16..].copy_from_slice(f.data.get(12..).unwrap_or(&[]));
        }
        None => dst.copy_from_slice(f.data),
    }
    // A checksum the sender left to the hardware (checksum offload on veth, TAP, virtio) is
    // completed here, as the NIC would have; the frame is otherwise unusable to its
    // receiver.
    if f.vnet.is_some() {
        if hdr.needs_csum {
            let start = usize::from(hdr.csum_start) + shift;
            if wire::offload::complete_at(dst, start, usize::from(hdr.csum_offset)).is_ok() {
                stats.rx_csum_completed += 1;
            }
        }
    } else if f.status & libc::TP_STATUS_CSUMNOTREADY != 0 {
        let l3 = wire::parse_l2(dst)
            .map(|l| l.l3_offset)
            .unwrap_or(usize::MAX);
        if dst
            .get_mut(l3..)
            .is_some_and(wire::offload::complete_if_partial)
        {
            stats.rx_csum_completed += 1;
        }
    }
    // The caller stops before the vector is full, so this push cannot fail.
    v.push(Pkt::new(buf, HEADROOM as u16, len as u16, port_id));
    stats.rx_packets += 1;
    stats.rx_bytes += len as u64;
    Delivery::Taken
}

/// Cut a TCP/UDP super-frame into segments of `hdr.gso_size` payload bytes, each in its own
/// buffer with its headers and checksums finished, as Linux does before it forwards one
/// (`skb_segment`). All of them go into `v` or, if they do not fit, none yet.
#[cold]
fn deliver_segments<M: PacketMemory>(
    f: &sys::RxFrame<'_>,
    hdr: &VnetHdr,
    tag: Option<[u8; 4]>,
    mem: &mut M,
    v: &mut Vector,
    stats: &mut PortStats,
    port_id: u16,
) -> Delivery {
    let kind = match hdr.gso_type {
        VIRTIO_NET_HDR_GSO_TCPV4 | VIRTIO_NET_HDR_GSO_TCPV6 => wire::offload::GsoKind::Tcp,
        VIRTIO_NET_HDR_GSO_UDP_L4 => wire::offload::GsoKind::Udp,
        // UFO (IP fragmentation of one datagram) and anything newer.
        _ => {
            stats.rx_dropped_offload += 1;
            return Delivery::Taken;
        }
    };
    let Ok(l2) = wire::parse_l2(f.data) else {
        stats.rx_dropped_offload += 1;
        return Delivery::Taken;
    };
    let ip = f.data.get(l2.l3_offset..).unwrap_or(&[]);
    let Ok(seg) = wire::offload::Segmenter::new(ip, kind, hdr.gso_size) else {
        stats.rx_dropped_offload += 1;
        return Delivery::Taken;
    };
    let l2_len = l2.l3_offset + if tag.is_some() { 4 } else { 0 };
    let room = VECTOR_SIZE - v.len.min(VECTOR_SIZE);
    if seg.count() > room {
        if v.len > 0 {
            return Delivery::NoRoom;
        }
        // Cannot happen (MAX_SEGMENTS ≤ VECTOR_SIZE), but never loop on it.
        stats.rx_dropped_offload += 1;
        return Delivery::Taken;
    }
    if l2_len + seg.len(0) > MAX_FRAME {
        stats.rx_dropped_too_big += 1;
        return Delivery::Taken;
    }
    for k in 0..seg.count() {
        // Segments of a jumbo MSS go into big buffers.
        let Some(buf) = mem.alloc_for(l2_len + seg.len(k)) else {
            stats.rx_dropped_no_buffer += (seg.count() - k) as u64;
            break;
        };
        let dst = mem.frame_mut(buf).get_mut(HEADROOM..).unwrap_or(&mut []);
        let len = write_l2(f.data, l2.l3_offset, tag, dst).and_then(|n| {
            let m = seg.write(ip, k, dst.get_mut(n..)?).ok()?;
            Some(n + m)
        });
        let Some(len) = len else {
            mem.free(buf);
            stats.rx_dropped_offload += 1;
            break;
        };
        v.push(Pkt::new(buf, HEADROOM as u16, len as u16, port_id));
        stats.rx_packets += 1;
        stats.rx_bytes += len as u64;
    }
    stats.rx_gso_split += 1;
    Delivery::Taken
}

impl<M: PacketMemory> Port<M> for AfPacket {
    /// The socket: TPACKET_V3 signals a block when the kernel retires it (up to its 1 ms
    /// timeout after the first frame), so it does not wake the worker per frame.
    fn wait_fd(&self) -> RawFd {
        self.fd()
    }
    fn rx_burst(&mut self, mem: &mut M, v: &mut Vector) -> usize {
        let before = v.len;
        // Each block is looked at most once per call, so a stream of empty blocks cannot
        // keep us here.
        let mut blocks_seen = 0;
        let mut full = false;
        while v.len < VECTOR_SIZE && !full {
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
                let d = deliver(
                    &f,
                    mem,
                    v,
                    &mut self.stats,
                    self.port_id,
                    self.skip_outgoing,
                );
                if d == Delivery::NoRoom {
                    // Resume at this frame in the next burst.
                    full = true;
                    break;
                }
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
