//! Packet memory and packet vectors.
//!
//! Packet bytes live in fixed-size frames of a port's memory (an AF_XDP UMEM, a memif
//! region, or an [`Arena`] for in-memory ports); the graph moves small [`Pkt`] descriptors,
//! never the bytes, except where it must (fragments, punt copies).

/// Size of one packet frame.
pub const FRAME_SIZE: usize = 2048;
/// Bytes kept free in front of received data, so headers can be prepended in place
/// (ICMP errors are built in front of the packet they quote).
pub const HEADROOM: usize = 128;
/// Packets per vector.
pub const VECTOR_SIZE: usize = 256;

/// Frames that hold packet bytes, with an allocator for new ones.
pub trait PacketMemory {
    /// The whole frame `buf` (`FRAME_SIZE` bytes).
    fn frame(&self, buf: u32) -> &[u8];
    /// The whole frame `buf`, writable.
    fn frame_mut(&mut self, buf: u32) -> &mut [u8];
    /// A free frame, or `None` when exhausted.
    fn alloc(&mut self) -> Option<u32>;
    /// Return a frame to the free list.
    fn free(&mut self, buf: u32);
    /// Two distinct frames, the first read-only, the second writable (for copies).
    fn frame_pair(&mut self, src: u32, dst: u32) -> (&[u8], &mut [u8]);
    /// The memory as an [`Arena`], if it is one (a port that shares an arena with the
    /// kernel as its UMEM moves descriptors instead of copying).
    fn arena(&mut self) -> Option<&mut Arena> {
        None
    }
}

/// Anonymous memory on transparent huge pages where the kernel allows (as a UMEM or DPDK
/// mempool would be): one TLB entry covers 1024 frames instead of 2.
struct HugeMem {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: HugeMem owns its mapping exclusively; moving it between threads is sound.
unsafe impl Send for HugeMem {}

impl HugeMem {
    fn new(len: usize) -> HugeMem {
        let len = len.max(1);
        // SAFETY: anonymous private mapping with no address hint; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            // Out of address space is not a per-packet condition: fail loudly at setup.
            panic!(
                "mmap of {len} bytes of packet memory failed: {}",
                std::io::Error::last_os_error()
            );
        }
        // SAFETY: advisory call on the mapping just created; failure only means 4 KiB pages.
        // (Miri, which checks this module, does not know madvise.)
        #[cfg(not(miri))]
        unsafe {
            libc::madvise(ptr, len, libc::MADV_HUGEPAGE)
        };
        HugeMem {
            ptr: ptr as *mut u8,
            len,
        }
    }
}

impl Drop for HugeMem {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping this value owns, once.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// The L3 bytes of a packet (from its IP header to the end of the frame).
#[inline]
pub(crate) fn l3<'a, M: PacketMemory>(mem: &'a M, p: &Pkt) -> &'a [u8] {
    let s = p.off as usize + p.l3 as usize;
    let e = (p.off as usize + p.len as usize).min(FRAME_SIZE);
    mem.frame(p.buf).get(s..e).unwrap_or(&[])
}

/// Writable L3 bytes of a packet.
#[inline]
pub(crate) fn l3_mut<'a, M: PacketMemory>(mem: &'a mut M, p: &Pkt) -> &'a mut [u8] {
    let s = p.off as usize + p.l3 as usize;
    let e = (p.off as usize + p.len as usize).min(FRAME_SIZE);
    mem.frame_mut(p.buf).get_mut(s..e).unwrap_or(&mut [])
}

/// Hint the CPU to bring the cache line at `p` in. Never faults, whatever the address.
#[inline(always)]
pub fn prefetch(p: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: PREFETCHT0 is a hint; it never faults, even on invalid addresses.
    unsafe {
        core::arch::x86_64::_mm_prefetch(p as *const i8, core::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = p;
}

/// Packet memory on huge pages with a LIFO free list (hot frames stay in cache).
///
/// Ownership of each frame is tracked in a bitmap: a frame freed twice, or a foreign index,
/// is refused and counted ([`Arena::bad_frees`]) rather than entering the free list twice
/// (which would hand one frame to two packets). Debug builds, tests included, also stop
/// on it.
///
/// **Lent frames.** An arena can be an AF_XDP UMEM: its frames are then also *lent* to the
/// kernel (on a fill ring, to receive into, or on a TX ring, to send from) and *reclaimed*
/// when a descriptor brings them back ([`Arena::lend_new`], [`Arena::lend`],
/// [`Arena::reclaim`]). The kernel may write a lent frame at any time, so no reference ever
/// covers one: every access builds a slice of exactly one frame, and a lent (or
/// out-of-range) frame reads as zeros and writes to a scratch frame instead, never panics.
pub struct Arena {
    mem: HugeMem,
    free: Vec<u32>,
    /// One bit per frame: set while the frame is on the free list.
    is_free: Vec<u64>,
    /// One bit per frame: set while the frame is lent to the kernel. Bits past the last
    /// frame are set, so one test also refuses an index out of range.
    lent: Vec<u64>,
    frames: u32,
    bad_frees: u64,
    /// What a write to a frame the arena cannot hand out lands in.
    scratch: Box<[u8; FRAME_SIZE]>,
}

/// What a read of a frame the arena cannot hand out sees.
static ZERO_FRAME: [u8; FRAME_SIZE] = [0; FRAME_SIZE];

impl Arena {
    /// `frames` frames, all free.
    pub fn new(frames: u32) -> Arena {
        let mut is_free = vec![0u64; (frames as usize).div_ceil(64)];
        for b in 0..frames as usize {
            is_free[b / 64] |= 1 << (b % 64);
        }
        let words = (frames as usize).div_ceil(64).max(1);
        let mut lent = vec![0u64; words];
        for b in frames as usize..words * 64 {
            lent[b / 64] |= 1 << (b % 64);
        }
        Arena {
            mem: HugeMem::new(frames as usize * FRAME_SIZE),
            free: (0..frames).rev().collect(),
            is_free,
            lent,
            frames,
            bad_frees: 0,
            scratch: Box::new([0; FRAME_SIZE]),
        }
    }
    /// Whether frame `buf` may be handed out as a slice: in range and not lent.
    #[inline(always)]
    fn accessible(&self, buf: u32) -> bool {
        self.lent
            .get(buf as usize / 64)
            .is_some_and(|w| w >> (buf % 64) & 1 == 0)
    }
    /// Start of frame `buf` (in range).
    #[inline(always)]
    fn frame_ptr(&self, buf: u32) -> *mut u8 {
        self.mem.ptr.wrapping_add(buf as usize * FRAME_SIZE)
    }
    /// The whole region, for registering it as a UMEM: start and length. Frames are
    /// `FRAME_SIZE` bytes, frame `b` at `b * FRAME_SIZE`.
    pub fn region(&self) -> (*mut u8, usize) {
        (self.mem.ptr, self.mem.len)
    }
    /// An identity of this arena's memory (its address): a port that registered it knows
    /// it again.
    pub fn id(&self) -> usize {
        self.mem.ptr as usize
    }
    /// Take a free frame and lend it to the kernel (a fill ring); its byte offset in the
    /// region.
    pub fn lend_new(&mut self) -> Option<u64> {
        let b = self.alloc()?;
        self.set_lent(b, true);
        Some(u64::from(b) * FRAME_SIZE as u64)
    }
    /// Lend frame `buf`, which the caller holds, to the kernel (a TX ring); false (nothing
    /// changed) when it is free, already lent or out of range.
    pub fn lend(&mut self, buf: u32) -> bool {
        let held = self.accessible(buf)
            && self
                .is_free
                .get(buf as usize / 64)
                .is_some_and(|w| w >> (buf % 64) & 1 == 0);
        if held {
            self.set_lent(buf, true);
        }
        held
    }
    /// The kernel handed back the frame holding byte `addr` of the region (an RX or
    /// completion descriptor): the caller holds it again. `None` for an address in no lent
    /// frame (a descriptor the kernel should not have written).
    pub fn reclaim(&mut self, addr: u64) -> Option<u32> {
        let b = u32::try_from(addr / FRAME_SIZE as u64).ok()?;
        let w = self.lent.get(b as usize / 64)?;
        if b >= self.frames || w >> (b % 64) & 1 == 0 {
            return None;
        }
        self.set_lent(b, false);
        Some(b)
    }
    /// Frames lent to the kernel now.
    pub fn lent_count(&self) -> usize {
        let total: u32 = self.lent.iter().map(|w| w.count_ones()).sum();
        total as usize - (self.lent.len() * 64 - self.frames as usize)
    }
    fn set_lent(&mut self, b: u32, on: bool) {
        if let Some(w) = self.lent.get_mut(b as usize / 64) {
            if on {
                *w |= 1 << (b % 64);
            } else {
                *w &= !(1 << (b % 64));
            }
        }
    }
    /// Frees refused: a frame already free (a double free) or not of this arena.
    pub fn bad_frees(&self) -> u64 {
        self.bad_frees
    }
    /// Number of frames.
    pub fn frames(&self) -> u32 {
        self.frames
    }
    /// Number of free frames.
    pub fn free_count(&self) -> usize {
        self.free.len()
    }
    /// Allocate a frame and copy `data` into it at `HEADROOM`; returns a descriptor.
    pub fn load(&mut self, data: &[u8], rx_port: u16) -> Option<Pkt> {
        if data.len() > FRAME_SIZE - HEADROOM {
            return None;
        }
        let buf = self.alloc()?;
        self.frame_mut(buf)[HEADROOM..HEADROOM + data.len()].copy_from_slice(data);
        Some(Pkt::new(buf, HEADROOM as u16, data.len() as u16, rx_port))
    }
    /// The frame bytes a descriptor covers.
    pub fn data(&self, p: &Pkt) -> &[u8] {
        let f = self.frame(p.buf);
        &f[p.off as usize..(p.off as usize + p.len as usize).min(FRAME_SIZE)]
    }
}

impl PacketMemory for Arena {
    #[inline]
    fn frame(&self, buf: u32) -> &[u8] {
        if !self.accessible(buf) {
            return &ZERO_FRAME;
        }
        // SAFETY: `buf` is in range (`accessible`), so the frame lies inside the mapping,
        // which lives as long as `self`; it is not lent, so the kernel does not write it
        // while the slice lives (it gets it back only through `lend`/`lend_new`, which
        // take `&mut self`). The slice covers this one frame only, never a lent one.
        unsafe { std::slice::from_raw_parts(self.frame_ptr(buf), FRAME_SIZE) }
    }
    #[inline]
    fn frame_mut(&mut self, buf: u32) -> &mut [u8] {
        if !self.accessible(buf) {
            return &mut self.scratch[..];
        }
        // SAFETY: as in `frame`, and `&mut self` makes this the only slice of the arena.
        unsafe { std::slice::from_raw_parts_mut(self.frame_ptr(buf), FRAME_SIZE) }
    }
    fn arena(&mut self) -> Option<&mut Arena> {
        Some(self)
    }
    #[inline]
    fn alloc(&mut self) -> Option<u32> {
        let b = self.free.pop()?;
        if let Some(w) = self.is_free.get_mut(b as usize / 64) {
            *w &= !(1 << (b % 64));
        }
        Some(b)
    }
    #[inline]
    fn free(&mut self, buf: u32) {
        let bit = 1u64 << (buf % 64);
        match self.is_free.get_mut(buf as usize / 64) {
            Some(w) if buf < self.frames && *w & bit == 0 => {
                *w |= bit;
                // Capacity was reserved for every frame at creation: this never
                // reallocates (a frame is on the list at most once).
                self.free.push(buf);
            }
            _ => {
                self.bad_frees += 1;
                debug_assert!(false, "frame {buf} freed twice or not of this arena");
            }
        }
    }
    fn frame_pair(&mut self, src: u32, dst: u32) -> (&[u8], &mut [u8]) {
        if src == dst || !self.accessible(dst) {
            let s: &[u8] = if self.accessible(src) && src != dst {
                // SAFETY: as in `frame`; the scratch frame is distinct memory.
                unsafe { std::slice::from_raw_parts(self.frame_ptr(src), FRAME_SIZE) }
            } else {
                &ZERO_FRAME
            };
            return (s, &mut self.scratch[..]);
        }
        let s: &[u8] = if self.accessible(src) {
            // SAFETY: as in `frame`; `src != dst`, so this frame and the writable one below
            // do not overlap.
            unsafe { std::slice::from_raw_parts(self.frame_ptr(src), FRAME_SIZE) }
        } else {
            &ZERO_FRAME
        };
        // SAFETY: as in `frame_mut`; distinct from `s` (another frame, or a static).
        let d = unsafe { std::slice::from_raw_parts_mut(self.frame_ptr(dst), FRAME_SIZE) };
        (s, d)
    }
}

/// Packet was generated by the router (ICMP error): no TTL check or decrement.
pub const F_LOCAL_ORIGIN: u16 = 1;
/// Frame arrived as link-layer broadcast or multicast.
pub const F_L2_MCAST: u16 = 2;
/// The port cannot tell whether the sender left the L4 checksum partial (checksum
/// offload: AF_XDP has no such metadata): the rewrite nodes complete a TCP/UDP checksum
/// that carries the mark of a partial one (see `wire::offload::complete_if_partial`).
pub const F_CSUM_UNKNOWN: u16 = 8;
/// The IPv4 source is link-local (169.254/16): delivered to the router, never forwarded
/// (RFC 3927 §7).
pub const F_LINK_LOCAL_SRC: u16 = 16;
/// On an output feature arc, bound for ip4-frag (bigger than the egress MTU) rather than
/// port-tx.
pub const F_TO_FRAG: u16 = 32;

/// Descriptor of one packet in a vector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pkt {
    /// Frame index in the packet memory.
    pub buf: u32,
    /// Offset of the first byte (Ethernet header) within the frame.
    pub off: u16,
    /// Bytes from `off`.
    pub len: u16,
    /// Port it arrived on.
    pub rx_port: u16,
    /// Port chosen for transmit.
    pub tx_port: u16,
    /// Offset of the L3 header relative to `off`.
    pub l3: u16,
    /// `F_*` flags.
    pub flags: u16,
    /// Next-hop id after lookup.
    pub nh: u32,
    /// Node-to-node argument: the ICMP error to send (see `icmp::ErrorKind`), or an MTU.
    pub aux: u32,
}

impl Pkt {
    /// A freshly received frame.
    pub fn new(buf: u32, off: u16, len: u16, rx_port: u16) -> Pkt {
        Pkt {
            buf,
            off,
            len,
            rx_port,
            ..Default::default()
        }
    }
}

/// Up to `VECTOR_SIZE` packets processed together.
pub struct Vector {
    /// Descriptors; only `..len` are meaningful.
    pub pkts: [Pkt; VECTOR_SIZE],
    /// Number of packets.
    pub len: usize,
}

impl Default for Vector {
    fn default() -> Self {
        Vector {
            pkts: [Pkt::default(); VECTOR_SIZE],
            len: 0,
        }
    }
}

impl Vector {
    /// Append a descriptor; false when full.
    #[inline]
    pub fn push(&mut self, p: Pkt) -> bool {
        if self.len < VECTOR_SIZE {
            self.pkts[self.len] = p;
            self.len += 1;
            true
        } else {
            false
        }
    }
    /// The meaningful descriptors.
    pub fn as_slice(&self) -> &[Pkt] {
        &self.pkts[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arena_alloc_free_and_pairs() {
        let mut a = Arena::new(4);
        let p = a.load(&[1, 2, 3], 7).unwrap();
        assert_eq!(a.data(&p), &[1, 2, 3]);
        assert_eq!(p.rx_port, 7);
        assert_eq!(a.free_count(), 3);
        let q = a.alloc().unwrap();
        let (s, d) = a.frame_pair(p.buf, q);
        d[..3].copy_from_slice(&s[HEADROOM..HEADROOM + 3]);
        assert_eq!(&a.frame(q)[..3], &[1, 2, 3]);
        a.free(q);
        a.free(p.buf);
        assert_eq!(a.free_count(), 4);
        assert_eq!(a.bad_frees(), 0);
        assert!(a.load(&[0u8; FRAME_SIZE], 0).is_none());
    }

    /// A double free (even while other frames are out, where the old length check saw
    /// nothing) and a foreign index are refused and counted: the frame is never handed to
    /// two owners. Release builds only: debug builds stop on them.
    #[test]
    #[cfg(not(debug_assertions))]
    fn arena_refuses_double_and_foreign_frees() {
        let mut a = Arena::new(4);
        let x = a.alloc().unwrap();
        let y = a.alloc().unwrap();
        a.free(x);
        a.free(x);
        a.free(99);
        assert_eq!(a.bad_frees(), 2);
        assert_eq!(a.free_count(), 3);
        let mut got = vec![a.alloc().unwrap(), a.alloc().unwrap(), a.alloc().unwrap()];
        got.sort_unstable();
        got.dedup();
        assert_eq!(got.len(), 3, "a frame was handed out twice");
        assert!(!got.contains(&y), "y is still owned");
        assert!(a.alloc().is_none());
    }

    /// Frames lent to the kernel (an AF_XDP UMEM) are never handed out as slices: they
    /// read as zeros and writes land in a scratch frame, until a descriptor gives them back.
    #[test]
    fn lent_frames_are_out_of_reach_until_reclaimed() {
        let mut a = Arena::new(70);
        let p = a.load(&[7; 10], 0).unwrap();
        assert!(a.lend(p.buf), "a held frame can be lent (TX)");
        assert!(!a.lend(p.buf), "not twice");
        assert_eq!(a.lent_count(), 1);
        assert!(a.frame(p.buf).iter().all(|&b| b == 0));
        a.frame_mut(p.buf)[HEADROOM] = 9;
        let rx = a.lend_new().unwrap(); // a fill-ring frame
        assert_eq!(a.lent_count(), 2);
        // Descriptors point anywhere inside a frame (after the kernel's headroom).
        assert_eq!(
            a.reclaim(u64::from(p.buf) * FRAME_SIZE as u64 + 300),
            Some(p.buf)
        );
        assert_eq!(a.data(&p), &[7; 10], "the write while lent went elsewhere");
        assert_eq!(a.reclaim(rx + 256), Some((rx / FRAME_SIZE as u64) as u32));
        // Not lent, out of range, or past the last frame of the bitmap's last word.
        assert_eq!(a.reclaim(rx), None);
        assert_eq!(a.reclaim(70 * FRAME_SIZE as u64), None);
        assert_eq!(a.reclaim(u64::MAX), None);
        assert!(a.frame(127).iter().all(|&b| b == 0));
        assert!(!a.lend(69), "a free frame is not the caller's to lend");
        assert_eq!(a.lent_count(), 0);
        let (src, dst) = a.frame_pair(p.buf, p.buf);
        assert_eq!(src.len(), FRAME_SIZE);
        dst[0] = 1;
        a.free(p.buf);
        a.free((rx / FRAME_SIZE as u64) as u32);
        assert_eq!(a.free_count(), 70);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "freed twice")]
    fn arena_stops_on_a_double_free_in_debug_builds() {
        let mut a = Arena::new(4);
        let x = a.alloc().unwrap();
        let _y = a.alloc().unwrap();
        a.free(x);
        a.free(x);
    }
}
