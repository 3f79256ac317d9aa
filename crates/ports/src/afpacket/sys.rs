//! The kernel interface of the AF_PACKET port: socket options, interface ioctls, the
//! mmap'ed TPACKET_V3 receive ring and the `sendmmsg` batch. Every `unsafe` block of the
//! crate lives here; the rest of the port is safe code over these wrappers.

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

use libc::{c_int, c_void};

use crate::sys::{getsockopt, raw_socket, setsockopt};
pub(crate) use crate::sys::{hwaddr, ifindex, mtu};

/// `ETH_P_ALL` in network byte order, as `socket`/`bind` want it.
const ETH_P_ALL_BE: u16 = (libc::ETH_P_ALL as u16).to_be();

/// A non-blocking `AF_PACKET`/`SOCK_RAW` socket that receives nothing until bound.
pub(crate) fn packet_socket() -> io::Result<OwnedFd> {
    // Protocol 0: no frames are queued before the ring exists and the socket is bound to
    // one interface (a socket opened with ETH_P_ALL would start collecting from all of them).
    raw_socket(libc::AF_PACKET)
}

/// `setsockopt(SOL_PACKET, opt, val)` for an integer option.
pub(crate) fn set_int(fd: RawFd, opt: c_int, val: c_int) -> io::Result<()> {
    setsockopt(fd, libc::SOL_PACKET, opt, &val)
}

/// Geometry of the receive ring.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RingGeometry {
    pub block_size: u32,
    pub block_count: u32,
    pub frame_size: u32,
    pub retire_timeout_ms: u32,
}

/// `setsockopt(PACKET_RX_RING)` with a TPACKET_V3 request.
pub(crate) fn set_rx_ring(fd: RawFd, g: RingGeometry) -> io::Result<()> {
    let frames_per_block = g.block_size.checked_div(g.frame_size).unwrap_or(0);
    let req = libc::tpacket_req3 {
        tp_block_size: g.block_size,
        tp_block_nr: g.block_count,
        tp_frame_size: g.frame_size,
        tp_frame_nr: frames_per_block.saturating_mul(g.block_count),
        tp_retire_blk_tov: g.retire_timeout_ms,
        tp_sizeof_priv: 0,
        tp_feature_req_word: 0,
    };
    setsockopt(fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)
}

/// Size of `struct virtio_net_hdr`, which the kernel writes in front of every received
/// frame and expects in front of every transmitted one once `PACKET_VNET_HDR` is set.
pub(crate) const VNET_HDR_LEN: usize = 10;

/// Ask for a virtio-net header with every frame (`PACKET_VNET_HDR`): it says whether the
/// L4 checksum is still to be completed and whether the frame is a TCP/UDP super-frame
/// (GSO), with the offsets and segment size. Must be set before the ring.
pub(crate) fn enable_vnet_hdr(fd: RawFd) -> io::Result<()> {
    set_int(fd, libc::PACKET_VNET_HDR, 1)
}

/// Drops counted by the kernel since the previous call (`PACKET_STATISTICS` resets on read).
pub(crate) fn take_drops(fd: RawFd) -> io::Result<u64> {
    let (st, _) =
        getsockopt::<libc::tpacket_stats_v3>(fd, libc::SOL_PACKET, libc::PACKET_STATISTICS)?;
    Ok(u64::from(st.tp_drops))
}

/// Bind the socket to `ifindex`, receiving every protocol.
pub(crate) fn bind(fd: RawFd, ifindex: u32) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain integers; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = ETH_P_ALL_BE;
    sll.sll_ifindex = ifindex as c_int;
    crate::sys::bind(fd, &sll)
}

/// Size of the per-packet header the kernel writes in front of each frame, before the
/// `sockaddr_ll` (TPACKET_ALIGN(sizeof(tpacket3_hdr))).
const HDR3_LEN: usize = (size_of::<libc::tpacket3_hdr>() + libc::TPACKET_ALIGNMENT - 1)
    & !(libc::TPACKET_ALIGNMENT - 1);
/// Header plus the `sockaddr_ll` that follows it: what must fit for a packet to be read.
const HDR3_FULL: usize = HDR3_LEN + size_of::<libc::sockaddr_ll>();

/// A ready block: how many packets it holds and where the first one is.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Block {
    pub num_pkts: u32,
    pub first: u32,
}

/// One received frame as it sits in a user-owned block.
pub(crate) struct RxFrame<'a> {
    /// Captured bytes, starting at the Ethernet header (the VLAN tag, if any, removed).
    pub data: &'a [u8],
    /// Length on the wire (before any truncation), VLAN tag excluded.
    pub wire_len: u32,
    /// `TP_STATUS_*` bits.
    pub status: u32,
    /// VLAN TCI, meaningful with `TP_STATUS_VLAN_VALID`.
    pub vlan_tci: u16,
    /// VLAN TPID, meaningful with `TP_STATUS_VLAN_TPID_VALID`.
    pub vlan_tpid: u16,
    /// `PACKET_*` packet type (host, broadcast, outgoing...).
    pub pkttype: u8,
    /// Offset of the next packet from this one (0 for the last).
    pub next_offset: u32,
    /// The virtio-net header in front of the frame, when the ring has them.
    pub vnet: Option<[u8; VNET_HDR_LEN]>,
}

/// The mmap'ed TPACKET_V3 receive ring: `count` blocks of `size` bytes, each owned either
/// by the kernel (status `TP_STATUS_KERNEL`) or by us (`TP_STATUS_USER`).
pub(crate) struct Ring {
    base: *mut u8,
    block_size: usize,
    block_count: usize,
    /// Frames carry a virtio-net header in front of the MAC header.
    vnet: bool,
}

// SAFETY: the mapping is owned by this value alone; the kernel side of the protocol does
// not care which thread reads the blocks.
unsafe impl Send for Ring {}

impl Ring {
    /// Map the ring configured on `fd` with `g`; `vnet` says whether `PACKET_VNET_HDR` was
    /// set on the socket before the ring.
    pub(crate) fn map(fd: RawFd, g: RingGeometry, vnet: bool) -> io::Result<Ring> {
        let len = g.block_size as usize * g.block_count as usize;
        // SAFETY: mapping the ring the kernel allocated for `fd`; no address hint, result
        // checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Ring {
            base: p as *mut u8,
            block_size: g.block_size as usize,
            block_count: g.block_count as usize,
            vnet,
        })
    }

    /// Number of blocks.
    pub(crate) fn blocks(&self) -> usize {
        self.block_count
    }

    fn status_word(&self, block: usize) -> &AtomicU32 {
        debug_assert!(block < self.block_count);
        let block = block % self.block_count;
        // SAFETY: `block` is in range, so the block descriptor lies inside the mapping; the
        // descriptor starts at a page boundary, so `block_status` is 4-byte aligned. The
        // kernel writes this word concurrently, hence the atomic view.
        unsafe {
            let bd = self.base.add(block * self.block_size) as *mut libc::tpacket_block_desc;
            AtomicU32::from_ptr(std::ptr::addr_of_mut!((*bd).hdr.bh1.block_status))
        }
    }

    /// The block, if the kernel has handed it to us.
    pub(crate) fn ready(&self, block: usize) -> Option<Block> {
        // Acquire: the packet bytes the kernel wrote before setting TP_STATUS_USER are
        // visible after this load.
        if self.status_word(block).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
            return None;
        }
        let block = block % self.block_count;
        // SAFETY: the block is ours (status checked above) and its descriptor lies inside the
        // mapping; these fields are not written by the kernel while we own it.
        let (num_pkts, first) = unsafe {
            let bd = self.base.add(block * self.block_size) as *const libc::tpacket_block_desc;
            let h = std::ptr::addr_of!((*bd).hdr.bh1);
            ((*h).num_pkts, (*h).offset_to_first_pkt)
        };
        Some(Block { num_pkts, first })
    }

    /// The packet at byte offset `off` of user-owned `block`, or `None` if its header or
    /// bytes would lie outside the block (a corrupt ring: never read out of bounds).
    pub(crate) fn frame(&self, block: usize, off: u32) -> Option<RxFrame<'_>> {
        let off = off as usize;
        if block >= self.block_count
            || !off.is_multiple_of(std::mem::align_of::<libc::tpacket3_hdr>())
            || off.checked_add(HDR3_FULL)? > self.block_size
        {
            return None;
        }
        // SAFETY: header and sockaddr_ll lie inside the block (checked above), suitably
        // aligned (the block is page-aligned, the offset checked, the sockaddr_ll 16 bytes
        // further); the block is user-owned (the caller got it
        // from `ready` and has not released it: `release` takes `&mut self`, so no frame
        // borrowed from `&self` outlives ownership), so the kernel does not write it now.
        let (h, sll) = unsafe {
            let p = self.base.add(block * self.block_size + off);
            (
                &*(p as *const libc::tpacket3_hdr),
                &*(p.add(HDR3_LEN) as *const libc::sockaddr_ll),
            )
        };
        let start = off + h.tp_mac as usize;
        let end = start.checked_add(h.tp_snaplen as usize)?;
        if end > self.block_size {
            return None;
        }
        // SAFETY: [start, end) lies inside the user-owned block (checked above); the borrow
        // of `self` keeps the mapping alive and, as above, the block ours.
        let data = unsafe {
            std::slice::from_raw_parts(self.base.add(block * self.block_size + start), end - start)
        };
        // The kernel writes the virtio-net header right in front of the MAC header, after the
        // frame's own headers.
        let vnet = if self.vnet {
            let v = start.checked_sub(VNET_HDR_LEN)?;
            if v < off + HDR3_FULL {
                return None;
            }
            let mut h = [0u8; VNET_HDR_LEN];
            // SAFETY: [v, start) lies inside the user-owned block (v ≥ off + HDR3_FULL, and
            // start ≤ end ≤ block_size were checked above); a byte copy has no alignment
            // requirement.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.base.add(block * self.block_size + v),
                    h.as_mut_ptr(),
                    VNET_HDR_LEN,
                )
            };
            Some(h)
        } else {
            None
        };
        Some(RxFrame {
            data,
            wire_len: h.tp_len,
            status: h.tp_status,
            vlan_tci: h.hv1.tp_vlan_tci as u16,
            vlan_tpid: h.hv1.tp_vlan_tpid,
            pkttype: sll.sll_pkttype,
            next_offset: h.tp_next_offset,
            vnet,
        })
    }

    /// Give `block` back to the kernel. Every frame borrowed from it must be gone, which
    /// `&mut self` enforces.
    pub(crate) fn release(&mut self, block: usize) {
        // Release: our reads of the block happen before the kernel may overwrite it.
        self.status_word(block)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping this value owns, once; no frame borrows it
        // any more (they borrow `self`).
        unsafe { libc::munmap(self.base as *mut c_void, self.block_size * self.block_count) };
    }
}

/// Preallocated `sendmmsg` arguments: one message header per packet, with one iovec (the
/// frame) or two (an all-zero virtio-net header, then the frame).
pub(crate) struct TxBatch {
    iov: Box<[libc::iovec]>,
    msgs: Box<[libc::mmsghdr]>,
    /// Prepend a virtio-net header (the socket has `PACKET_VNET_HDR`).
    vnet: bool,
}

/// The virtio-net header sent with every frame: no offload asked of the kernel.
static VNET_NONE: [u8; VNET_HDR_LEN] = [0; VNET_HDR_LEN];

// SAFETY: the raw pointers inside are scratch space, written immediately before each
// sendmmsg call and never dereferenced by us; stale values left behind are never used.
unsafe impl Send for TxBatch {}

/// What one `TxBatch::send` achieved.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TxResult {
    /// Frames the kernel accepted.
    pub sent: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Frames offered but not sent (queue full or rejected).
    pub failed: usize,
}

impl TxBatch {
    /// Room for `cap` packets per call; `vnet`: the socket has `PACKET_VNET_HDR`.
    pub(crate) fn new(cap: usize, vnet: bool) -> TxBatch {
        let iov = vec![
            libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            };
            cap * 2
        ];
        // SAFETY: mmsghdr is integers and raw pointers; all-zero (null pointers) is valid.
        let msgs = (0..cap)
            .map(|_| unsafe { zeroed::<libc::mmsghdr>() })
            .collect();
        TxBatch {
            iov: iov.into_boxed_slice(),
            msgs,
            vnet,
        }
    }

    /// Maximum frames per call.
    pub(crate) fn capacity(&self) -> usize {
        self.msgs.len()
    }

    /// Send up to `capacity()` frames on the bound socket `fd`. One `sendmmsg` call in the
    /// normal case; a frame the kernel rejects as malformed (e.g. larger than the MTU) is
    /// skipped and the rest sent, while a full queue ends the burst after at most one more
    /// call (no spinning): the frames left are counted as failed.
    pub(crate) fn send<'a>(
        &mut self,
        fd: RawFd,
        frames: impl Iterator<Item = &'a [u8]>,
    ) -> TxResult {
        let mut n = 0;
        let vnet = self.vnet;
        for (f, (iov, msg)) in frames.zip(self.iov.chunks_exact_mut(2).zip(self.msgs.iter_mut())) {
            let frame = libc::iovec {
                iov_base: f.as_ptr() as *mut c_void,
                iov_len: f.len(),
            };
            if vnet {
                iov[0] = libc::iovec {
                    // The kernel only reads it.
                    iov_base: VNET_NONE.as_ptr() as *mut c_void,
                    iov_len: VNET_HDR_LEN,
                };
                iov[1] = frame;
            } else {
                iov[0] = frame;
            }
            msg.msg_hdr.msg_iov = iov.as_mut_ptr();
            msg.msg_hdr.msg_iovlen = if vnet { 2 } else { 1 };
            n += 1;
        }
        let mut res = TxResult::default();
        let mut start = 0;
        // sendmmsg reports a short count but not why it stopped; one more call tells (a
        // rejected frame to skip, or a full queue). Two short counts in a row mean the
        // queue is full: stop there rather than spin.
        let mut after_short = false;
        while start < n {
            let msgs = &mut self.msgs[start..n];
            // SAFETY: every header in `msgs` points at one or two iovecs of `self.iov` (stable
            // boxed storage): the static all-zero vnet header, and a frame whose base and
            // length were taken from a slice borrowed for `'a`, live for this whole call; msg_name/msg_control are null (send to the bound
            // interface, no ancillary data). The kernel only reads the buffers and writes
            // `msg_len`.
            let r = unsafe {
                libc::sendmmsg(
                    fd,
                    msgs.as_mut_ptr(),
                    msgs.len() as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if r > 0 {
                let k = r as usize;
                res.sent += k;
                // The frame is the last iovec of each message (after the vnet header).
                let last = usize::from(vnet);
                res.bytes += self.iov[2 * start..2 * (start + k)]
                    .chunks_exact(2)
                    .map(|v| v[last].iov_len as u64)
                    .sum::<u64>();
                start += k;
                if start < n {
                    if after_short {
                        res.failed += n - start;
                        break;
                    }
                    after_short = true;
                }
            } else {
                match io::Error::last_os_error().raw_os_error() {
                    Some(libc::EINTR) => {}
                    Some(libc::EMSGSIZE) | Some(libc::EINVAL) => {
                        // This one frame is unacceptable (larger than the MTU, shorter
                        // than a header): skip it, send the others.
                        res.failed += 1;
                        start += 1;
                        after_short = false;
                    }
                    _ => {
                        // Queue full (EAGAIN/ENOBUFS), link down, ...: the rest would fail
                        // the same way. Count them as dropped rather than spin.
                        res.failed += n - start;
                        break;
                    }
                }
            }
        }
        res
    }
}
