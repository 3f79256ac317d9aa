//! The kernel interface of the AF_XDP port: the UMEM mapping, the four mmap'ed rings, the
//! socket options, the wakeup calls and the netlink request that removes a stale XDP
//! program. Every `unsafe` block of the AF_XDP port lives here.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use libc::{c_int, c_void};

use crate::sys::{cvt, getsockopt, raw_socket, setsockopt};

/// A private anonymous mapping (the UMEM) or a shared mapping of a ring.
pub(crate) struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned exclusively by this value; moving it between threads is
// sound.
unsafe impl Send for Mmap {}

impl Mmap {
    /// `len` bytes of zeroed anonymous memory, populated up front so the kernel can pin it
    /// at `XDP_UMEM_REG` without faulting page by page.
    pub(crate) fn anonymous(len: usize) -> io::Result<Mmap> {
        // SAFETY: anonymous private mapping with no address hint; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        Mmap::checked(p, len)
    }

    /// Map `len` bytes of the socket `fd` at page offset `pgoff` (one of the rings).
    fn ring(fd: RawFd, len: usize, pgoff: u64) -> io::Result<Mmap> {
        // SAFETY: shared mapping of a kernel object with no address hint; the kernel checks
        // `len` against the ring it set up and the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff as libc::off_t,
            )
        };
        Mmap::checked(p, len)
    }

    fn checked(p: *mut c_void, len: usize) -> io::Result<Mmap> {
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        NonNull::new(p as *mut u8)
            .map(|ptr| Mmap { ptr, len })
            .ok_or_else(|| io::Error::other("mmap returned NULL"))
    }

    /// Start of the mapping.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length of the mapping.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Copy `dst.len()` bytes out of the mapping, from `off`; `None` (nothing copied) when
    /// that range is not inside it.
    ///
    /// Never through a reference: the kernel writes other frames of a UMEM meanwhile (those
    /// on the fill ring), so no `&[u8]` may cover the mapping. The caller copies only a frame
    /// the kernel handed back (on the RX ring), which it does not write until that frame is
    /// on the fill ring again.
    pub(crate) fn read_into(&self, off: usize, dst: &mut [u8]) -> Option<()> {
        let end = off.checked_add(dst.len())?;
        if end > self.len {
            return None;
        }
        // SAFETY: [off, end) lies inside the mapping, which lives as long as `self`; a byte
        // copy has no alignment requirement, and `dst` is our own memory, distinct from the
        // mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), dst.as_mut_ptr(), dst.len())
        };
        Some(())
    }

    /// Copy `src` into the mapping at `off`; `None` (nothing written) when that range is not
    /// inside it. As [`Mmap::read_into`]: through raw pointers, into a frame the kernel does
    /// not own (one taken from the free list before it goes on the TX ring).
    pub(crate) fn write_from(&mut self, off: usize, src: &[u8]) -> Option<()> {
        let end = off.checked_add(src.len())?;
        if end > self.len {
            return None;
        }
        // SAFETY: [off, end) lies inside the writable mapping, which lives as long as
        // `self`; `src` is our own memory, distinct from the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(off), src.len())
        };
        Some(())
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping this value owns, once.
        unsafe { libc::munmap(self.ptr.as_ptr() as *mut c_void, self.len) };
    }
}

/// A non-blocking `AF_XDP` socket.
pub(crate) fn xdp_socket() -> io::Result<OwnedFd> {
    raw_socket(libc::AF_XDP)
}

/// Register `umem` as the socket's UMEM, cut into `frame_size` chunks.
pub(crate) fn register_umem(fd: RawFd, umem: &Mmap, frame_size: u32) -> io::Result<()> {
    register_region(fd, umem.as_ptr(), umem.len(), frame_size)
}

/// Register `len` bytes at `addr` (an [`dataplane::Arena`]'s region) as the socket's UMEM,
/// cut into `frame_size` chunks. The kernel pins those pages for as long as a socket uses
/// the UMEM, whatever happens to the mapping: it never writes memory that is not its own.
pub(crate) fn register_region(
    fd: RawFd,
    addr: *mut u8,
    len: usize,
    frame_size: u32,
) -> io::Result<()> {
    let reg = libc::xdp_umem_reg {
        addr: addr as u64,
        len: len as u64,
        chunk_size: frame_size,
        headroom: 0,
        flags: 0,
        tx_metadata_len: 0,
    };
    setsockopt(fd, libc::SOL_XDP, libc::XDP_UMEM_REG, &reg)
}

/// Bind the socket to queue `queue_id` of interface `ifindex`, sharing the UMEM of the
/// bound socket `umem_fd` (`XDP_SHARED_UMEM`: the mode and need_wakeup are that socket's).
pub(crate) fn bind_shared(
    fd: RawFd,
    ifindex: u32,
    queue_id: u32,
    umem_fd: RawFd,
) -> io::Result<()> {
    let addr = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: libc::XDP_SHARED_UMEM,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue_id,
        sxdp_shared_umem_fd: umem_fd as u32,
    };
    crate::sys::bind(fd, &addr)
}

/// Ask for a ring (`XDP_RX_RING`, `XDP_TX_RING`, `XDP_UMEM_FILL_RING`,
/// `XDP_UMEM_COMPLETION_RING`) of `entries` entries (a power of two).
pub(crate) fn set_ring_size(fd: RawFd, ring: c_int, entries: u32) -> io::Result<()> {
    setsockopt(fd, libc::SOL_XDP, ring, &entries)
}

/// Where the producer, consumer, flags and descriptors of each ring sit in its mapping.
pub(crate) fn mmap_offsets(fd: RawFd) -> io::Result<libc::xdp_mmap_offsets> {
    let (off, len) =
        getsockopt::<libc::xdp_mmap_offsets>(fd, libc::SOL_XDP, libc::XDP_MMAP_OFFSETS)?;
    if len != size_of::<libc::xdp_mmap_offsets>() {
        // Pre-5.4 layout without the flags word: need_wakeup is unknown there too.
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "kernel too old: XDP_MMAP_OFFSETS without ring flags (need Linux 5.4+)",
        ));
    }
    Ok(off)
}

/// The kernel's drop counters for the socket.
pub(crate) fn statistics(fd: RawFd) -> io::Result<libc::xdp_statistics> {
    getsockopt::<libc::xdp_statistics>(fd, libc::SOL_XDP, libc::XDP_STATISTICS).map(|(s, _)| s)
}

/// Bind the socket to queue `queue_id` of interface `ifindex` with `XDP_*` `flags`.
pub(crate) fn bind(fd: RawFd, ifindex: u32, queue_id: u32, flags: u16) -> io::Result<()> {
    let addr = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: flags,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue_id,
        sxdp_shared_umem_fd: 0,
    };
    crate::sys::bind(fd, &addr)
}

/// Tell the kernel there is work on the TX ring (in copy mode this call transmits).
/// `EAGAIN`/`EBUSY`/`ENOBUFS` only mean "try again later" and are not errors here.
pub(crate) fn kick_tx(fd: RawFd) -> io::Result<()> {
    // SAFETY: a zero-length send with no buffer and no address is the documented AF_XDP
    // wakeup; nothing is read from user memory.
    let r = unsafe {
        libc::sendto(
            fd,
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        )
    };
    if r >= 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS) | Some(libc::ENETDOWN) => {
            Ok(())
        }
        _ => Err(e),
    }
}

/// Tell the driver that the fill ring has new entries (only needed when it set
/// `XDP_RING_NEED_WAKEUP`).
pub(crate) fn kick_rx(fd: RawFd) {
    // SAFETY: a zero-length receive with no buffer and no address is the documented
    // AF_XDP wakeup; nothing is written to user memory. Failure only delays reception.
    unsafe {
        libc::recvfrom(
            fd,
            std::ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
}

/// One of the four single-producer/single-consumer rings shared with the kernel. `T` is
/// `u64` (fill, completion: UMEM addresses) or `xdp_desc` (RX, TX).
///
/// The producer and consumer indices run freely and wrap at 2^32; `mask` picks the slot.
/// For a ring we produce into, `cached` is our last view of the kernel's consumer index;
/// for a ring we consume from, of the kernel's producer index.
pub(crate) struct Ring<T> {
    map: Mmap,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    descs: *mut T,
    mask: u32,
    size: u32,
    /// Our own index (producer for fill/TX, consumer for RX/completion).
    local: u32,
    cached: u32,
}

// SAFETY: the ring is owned by one port, which a single worker drives; the raw pointers
// point into `map`, which moves with it.
unsafe impl<T: Send> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    /// Map the ring of `entries` entries at page offset `pgoff` of socket `fd`, laid out
    /// as `off` says.
    pub(crate) fn map(
        fd: &OwnedFd,
        off: &libc::xdp_ring_offset,
        entries: u32,
        pgoff: u64,
        producer_side: bool,
    ) -> io::Result<Ring<T>> {
        let len = off.desc as usize + entries as usize * size_of::<T>();
        let map = Mmap::ring(fd.as_raw_fd(), len, pgoff)?;
        let at = |o: u64| map.as_ptr().wrapping_add(o as usize);
        let producer = at(off.producer) as *const AtomicU32;
        let consumer = at(off.consumer) as *const AtomicU32;
        let flags = at(off.flags) as *const AtomicU32;
        let descs = at(off.desc) as *mut T;
        let mut r = Ring {
            map,
            producer,
            consumer,
            flags,
            descs,
            mask: entries - 1,
            size: entries,
            local: 0,
            cached: 0,
        };
        if producer_side {
            r.local = r.prod().load(Ordering::Relaxed);
            r.cached = r.cons().load(Ordering::Acquire).wrapping_add(entries);
        } else {
            r.local = r.cons().load(Ordering::Relaxed);
            r.cached = r.prod().load(Ordering::Acquire);
        }
        Ok(r)
    }

    fn prod(&self) -> &AtomicU32 {
        // SAFETY: the kernel placed an aligned u32 at this offset of the mapping, which
        // lives as long as `self`; it is only ever accessed atomically.
        unsafe { &*self.producer }
    }

    fn cons(&self) -> &AtomicU32 {
        // SAFETY: as for `prod`.
        unsafe { &*self.consumer }
    }

    /// Entries in the ring.
    pub(crate) fn size(&self) -> u32 {
        self.size
    }

    /// Whether the kernel asked to be woken (`XDP_RING_NEED_WAKEUP`).
    pub(crate) fn needs_wakeup(&self) -> bool {
        // SAFETY: as for `prod`.
        let flags = unsafe { &*self.flags };
        flags.load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    // ---- producer side (fill, TX) ----

    /// Free slots we may produce into, up to `want` (`cached` holds consumer + size).
    pub(crate) fn free(&mut self, want: u32) -> u32 {
        let free = self.cached.wrapping_sub(self.local);
        if free >= want {
            return free;
        }
        self.cached = self.cons().load(Ordering::Acquire).wrapping_add(self.size);
        self.cached.wrapping_sub(self.local)
    }

    /// Write `v` into the `i`-th slot after our producer index (not yet visible).
    pub(crate) fn write(&mut self, i: u32, v: T) {
        let slot = self.local.wrapping_add(i) & self.mask;
        // SAFETY: `slot <= mask < size`, inside the descriptor array of the mapping; the
        // caller reserved it with `free`, so the kernel does not read it until `submit`.
        unsafe { self.descs.add(slot as usize).write_volatile(v) };
    }

    /// Published slots the kernel has not consumed yet.
    pub(crate) fn pending(&self) -> u32 {
        self.local.wrapping_sub(self.cons().load(Ordering::Acquire))
    }

    /// Publish `n` written slots to the kernel.
    pub(crate) fn submit(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        self.prod().store(self.local, Ordering::Release);
    }

    // ---- consumer side (RX, completion) ----

    /// Entries ready for us, up to `max`.
    pub(crate) fn ready(&mut self, max: u32) -> u32 {
        let mut n = self.cached.wrapping_sub(self.local);
        if n == 0 {
            self.cached = self.prod().load(Ordering::Acquire);
            n = self.cached.wrapping_sub(self.local);
        }
        n.min(max)
    }

    /// The `i`-th ready entry.
    pub(crate) fn read(&self, i: u32) -> T {
        let slot = self.local.wrapping_add(i) & self.mask;
        // SAFETY: `slot <= mask < size`, inside the descriptor array; the caller saw the
        // entry published by the kernel with `ready` (acquire), so it is initialised.
        unsafe { self.descs.add(slot as usize).read_volatile() }
    }

    /// Hand `n` consumed entries back to the kernel.
    pub(crate) fn release(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        self.cons().store(self.local, Ordering::Release);
    }

    /// Bytes mapped for this ring (for tests and diagnostics).
    #[allow(dead_code)]
    pub(crate) fn mapped_len(&self) -> usize {
        self.map.len()
    }
}

// ---- netlink: remove a stale XDP program ----

const NLMSG_HDRLEN: usize = 16;
const IFINFO_LEN: usize = 16;
const IFLA_XDP: u16 = 43;
const IFLA_XDP_FD: u16 = 1;
const IFLA_XDP_FLAGS: u16 = 3;
const NLA_F_NESTED: u16 = 1 << 15;
/// `XDP_FLAGS_SKB_MODE`.
pub(crate) const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`.
pub(crate) const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

fn attr(buf: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(payload);
    buf.resize(buf.len().next_multiple_of(4), 0);
}

/// The `RTM_SETLINK` request that removes the netlink-attached XDP program of `mode`
/// (`XDP_FLAGS_SKB_MODE` or `XDP_FLAGS_DRV_MODE`) from `ifindex`.
fn xdp_detach_request(ifindex: u32, mode: u32) -> Vec<u8> {
    let mut nested = Vec::new();
    attr(&mut nested, IFLA_XDP_FD, &(-1i32).to_ne_bytes());
    attr(&mut nested, IFLA_XDP_FLAGS, &mode.to_ne_bytes());
    let mut msg = vec![0u8; NLMSG_HDRLEN];
    // struct ifinfomsg: family, pad, type, index, flags, change.
    msg.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]);
    msg.extend_from_slice(&(ifindex as i32).to_ne_bytes());
    msg.extend_from_slice(&[0u8; 8]);
    debug_assert_eq!(msg.len(), NLMSG_HDRLEN + IFINFO_LEN);
    attr(&mut msg, IFLA_XDP | NLA_F_NESTED, &nested);
    let len = msg.len() as u32;
    msg[0..4].copy_from_slice(&len.to_ne_bytes());
    msg[4..6].copy_from_slice(&libc::RTM_SETLINK.to_ne_bytes());
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16;
    msg[6..8].copy_from_slice(&flags.to_ne_bytes());
    msg[8..12].copy_from_slice(&1u32.to_ne_bytes());
    msg
}

/// Remove whatever XDP program of `mode` was attached to `ifindex` through netlink (the
/// way `ip link set dev X xdp ...` and older loaders attach). Succeeds when there was none.
/// Fails with `EBUSY` when the program is held by a live bpf_link (another running
/// process), which must not be taken from it.
pub(crate) fn netlink_xdp_detach(ifindex: u32, mode: u32) -> io::Result<()> {
    // SAFETY: plain system call with constant arguments; the result is checked.
    let fd = cvt(unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    })?;
    // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let msg = xdp_detach_request(ifindex, mode);
    // SAFETY: `msg` is readable for its length; the socket is connected to the kernel by
    // default, so no address is needed.
    let sent = unsafe { libc::send(fd.as_raw_fd(), msg.as_ptr() as *const c_void, msg.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = [0u8; 4096];
    // SAFETY: `buf` is writable for its length.
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            buf.as_mut_ptr() as *mut c_void,
            buf.len(),
            0,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    parse_ack(&buf[..n as usize])
}

/// The result carried by a netlink `NLMSG_ERROR` acknowledgement.
fn parse_ack(reply: &[u8]) -> io::Result<()> {
    let kind = reply
        .get(4..6)
        .map(|b| u16::from_ne_bytes([b[0], b[1]]))
        .ok_or_else(|| io::Error::other("short netlink reply"))?;
    if kind != libc::NLMSG_ERROR as u16 {
        return Err(io::Error::other(format!(
            "unexpected netlink reply type {kind}"
        )));
    }
    let code = reply
        .get(NLMSG_HDRLEN..NLMSG_HDRLEN + 4)
        .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| io::Error::other("short netlink ack"))?;
    if code == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(-code))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detach_request_layout() {
        let m = xdp_detach_request(7, XDP_FLAGS_SKB_MODE);
        // header 16 + ifinfomsg 16 + IFLA_XDP (4 + FD 8 + FLAGS 8).
        assert_eq!(m.len(), 52);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()), 52);
        assert_eq!(i32::from_ne_bytes(m[20..24].try_into().unwrap()), 7);
        assert_eq!(u16::from_ne_bytes(m[32..34].try_into().unwrap()), 20);
        assert_eq!(
            u16::from_ne_bytes(m[34..36].try_into().unwrap()),
            IFLA_XDP | NLA_F_NESTED
        );
        assert_eq!(i32::from_ne_bytes(m[40..44].try_into().unwrap()), -1);
        assert_eq!(
            u32::from_ne_bytes(m[48..52].try_into().unwrap()),
            XDP_FLAGS_SKB_MODE
        );
    }

    #[test]
    fn ack_codes() {
        let mut ok = vec![0u8; 36];
        ok[4..6].copy_from_slice(&(libc::NLMSG_ERROR as u16).to_ne_bytes());
        assert!(parse_ack(&ok).is_ok());
        let mut busy = ok.clone();
        busy[16..20].copy_from_slice(&(-libc::EBUSY).to_ne_bytes());
        assert_eq!(
            parse_ack(&busy).unwrap_err().raw_os_error(),
            Some(libc::EBUSY)
        );
        assert!(parse_ack(&[0u8; 3]).is_err());
    }
}
