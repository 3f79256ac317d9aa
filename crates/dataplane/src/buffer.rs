//! Packet memory and packet vectors.
//!
//! Packet bytes live in fixed-size frames of a port's memory (an AF_XDP UMEM, a memif
//! region, or an [`Arena`] for in-memory ports); the graph moves small [`Pkt`] descriptors,
//! never the bytes, except where it must (fragments, punt copies).

/// Size of one packet frame (an AF_XDP UMEM chunk).
pub const FRAME_SIZE: usize = 2048;
/// Size of one big frame, for frames that do not fit a [`FRAME_SIZE`] frame after the
/// headroom (jumbo frames): [`MAX_FRAME`] bytes after the headroom, rounded up.
pub const BIG_FRAME_SIZE: usize = 10240;
/// The largest Ethernet frame (tags included, no FCS) the ports and the graph carry: an
/// IP MTU of 9000 with room for two VLAN tags and more.
pub const MAX_FRAME: usize = 9216;
/// Frame index of the first big frame: big frame `j` is `BIG_BASE + j`. Small frames are
/// numbered from 0, so one comparison tells the pools apart.
pub const BIG_BASE: u32 = 1 << 30;
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
    /// A free big frame ([`BIG_FRAME_SIZE`] bytes, for jumbo frames), or `None` when
    /// exhausted or when this memory has none.
    fn alloc_big(&mut self) -> Option<u32> {
        None
    }
    /// A free frame with room for `len` bytes after [`HEADROOM`]: a small frame when it
    /// fits one, a big frame otherwise; `None` when exhausted or larger than a big frame.
    #[inline]
    fn alloc_for(&mut self, len: usize) -> Option<u32> {
        if len <= FRAME_SIZE - HEADROOM {
            self.alloc()
        } else if len <= BIG_FRAME_SIZE - HEADROOM {
            self.alloc_big()
        } else {
            None
        }
    }
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
    let f = mem.frame(p.buf);
    let e = (p.off as usize + p.len as usize).min(f.len());
    f.get(s..e).unwrap_or(&[])
}

/// Writable L3 bytes of a packet.
#[inline]
pub(crate) fn l3_mut<'a, M: PacketMemory>(mem: &'a mut M, p: &Pkt) -> &'a mut [u8] {
    let s = p.off as usize + p.l3 as usize;
    let f = mem.frame_mut(p.buf);
    let e = (p.off as usize + p.len as usize).min(f.len());
    f.get_mut(s..e).unwrap_or(&mut [])
}

/// The bytes a descriptor covers (clipped to its frame).
#[inline]
pub fn pkt_bytes<'a, M: PacketMemory>(mem: &'a M, p: &Pkt) -> &'a [u8] {
    let f = mem.frame(p.buf);
    let s = p.off as usize;
    let e = (s + p.len as usize).min(f.len());
    f.get(s..e).unwrap_or(&[])
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
    /// Big frames ([`BIG_FRAME_SIZE`] bytes, jumbo frames): never lent, numbered from
    /// [`BIG_BASE`].
    big: BigPool,
    bad_frees: u64,
    /// What a write to a frame the arena cannot hand out lands in.
    scratch: Box<[u8; BIG_FRAME_SIZE]>,
}

/// The arena's big frames: their memory and free list (ownership tracked as for small
/// frames).
struct BigPool {
    mem: HugeMem,
    /// Free big frames, as indices from 0.
    free: Vec<u32>,
    is_free: Vec<u64>,
    frames: u32,
}

impl BigPool {
    fn new(frames: u32) -> BigPool {
        let mut is_free = vec![0u64; (frames as usize).div_ceil(64)];
        for b in 0..frames as usize {
            is_free[b / 64] |= 1 << (b % 64);
        }
        BigPool {
            mem: HugeMem::new(frames as usize * BIG_FRAME_SIZE),
            free: (0..frames).rev().collect(),
            is_free,
            frames,
        }
    }
    /// Start of big frame `buf` (an arena index), if it is one of ours.
    #[inline]
    fn ptr(&self, buf: u32) -> Option<*mut u8> {
        let j = buf.checked_sub(BIG_BASE)?;
        (j < self.frames).then(|| self.mem.ptr.wrapping_add(j as usize * BIG_FRAME_SIZE))
    }
}

/// What a read of a frame the arena cannot hand out sees.
static ZERO_FRAME: [u8; BIG_FRAME_SIZE] = [0; BIG_FRAME_SIZE];

impl Arena {
    /// `frames` frames, all free, and one big frame for every 16 (at most 1024).
    pub fn new(frames: u32) -> Arena {
        Arena::with_big(frames, (frames / 16).min(1024))
    }
    /// `frames` frames and `big` big frames ([`BIG_FRAME_SIZE`] bytes), all free.
    pub fn with_big(frames: u32, big: u32) -> Arena {
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
            big: BigPool::new(big),
            bad_frees: 0,
            scratch: Box::new([0; BIG_FRAME_SIZE]),
        }
    }
    /// A frame's start and length, if the arena may hand it out as a slice: a small frame
    /// in range and not lent, or a big frame in range.
    #[inline(always)]
    fn slot(&self, buf: u32) -> Option<(*mut u8, usize)> {
        if self.accessible(buf) {
            Some((self.frame_ptr(buf), FRAME_SIZE))
        } else {
            self.big.ptr(buf).map(|p| (p, BIG_FRAME_SIZE))
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
    /// Number of big frames.
    pub fn big_frames(&self) -> u32 {
        self.big.frames
    }
    /// Number of free big frames.
    pub fn big_free_count(&self) -> usize {
        self.big.free.len()
    }
    /// Allocate a frame (a big one for a jumbo frame) and copy `data` into it at
    /// `HEADROOM`; returns a descriptor.
    pub fn load(&mut self, data: &[u8], rx_port: u16) -> Option<Pkt> {
        let buf = self.alloc_for(data.len())?;
        match self.frame_mut(buf).get_mut(HEADROOM..HEADROOM + data.len()) {
            Some(d) => d.copy_from_slice(data),
            None => {
                self.free(buf);
                return None;
            }
        }
        Some(Pkt::new(buf, HEADROOM as u16, data.len() as u16, rx_port))
    }
    /// The frame bytes a descriptor covers.
    pub fn data(&self, p: &Pkt) -> &[u8] {
        pkt_bytes(self, p)
    }
    /// Free a big frame (the cold half of `free`).
    #[cold]
    fn free_big(&mut self, buf: u32) {
        let j = buf.wrapping_sub(BIG_BASE);
        let bit = 1u64 << (j % 64);
        match self.big.is_free.get_mut(j as usize / 64) {
            Some(w) if buf >= BIG_BASE && j < self.big.frames && *w & bit == 0 => {
                *w |= bit;
                // Capacity for every big frame was reserved at creation.
                self.big.free.push(j);
            }
            _ => {
                self.bad_frees += 1;
                debug_assert!(false, "frame {buf} freed twice or not of this arena");
            }
        }
    }
}

impl PacketMemory for Arena {
    #[inline]
    fn frame(&self, buf: u32) -> &[u8] {
        if !self.accessible(buf) {
            return match self.big.ptr(buf) {
                // SAFETY: a big frame in range lies inside the big pool's mapping, which
                // lives as long as `self`; big frames are never lent, so nobody else
                // writes them while the shared borrow of `self` lives.
                Some(p) => unsafe { std::slice::from_raw_parts(p, BIG_FRAME_SIZE) },
                None => &ZERO_FRAME,
            };
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
            return match self.big.ptr(buf) {
                // SAFETY: as in `frame`, and `&mut self` makes this the only slice of it.
                Some(p) => unsafe { std::slice::from_raw_parts_mut(p, BIG_FRAME_SIZE) },
                None => &mut self.scratch[..],
            };
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
            _ if buf >= BIG_BASE => self.free_big(buf),
            _ => {
                self.bad_frees += 1;
                debug_assert!(false, "frame {buf} freed twice or not of this arena");
            }
        }
    }
    fn alloc_big(&mut self) -> Option<u32> {
        let j = self.big.free.pop()?;
        if let Some(w) = self.big.is_free.get_mut(j as usize / 64) {
            *w &= !(1 << (j % 64));
        }
        Some(BIG_BASE + j)
    }
    fn frame_pair(&mut self, src: u32, dst: u32) -> (&[u8], &mut [u8]) {
        let s = if src == dst { None } else { self.slot(src) };
        let s: &[u8] = match s {
            // SAFETY: as in `frame` (a small frame not lent, or a big frame, in range);
            // `src != dst`, so it does not overlap the writable frame below, nor the
            // scratch frame (distinct memory).
            Some((p, n)) => unsafe { std::slice::from_raw_parts(p, n) },
            None => &ZERO_FRAME,
        };
        let d: &mut [u8] = match self.slot(dst) {
            // SAFETY: as in `frame_mut`; distinct from `s` (another frame, or a static).
            Some((p, n)) if src != dst => unsafe { std::slice::from_raw_parts_mut(p, n) },
            _ => &mut self.scratch[..],
        };
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
/// The packet came from another worker through a handoff ([`crate::handoff`]): it has
/// reached the worker that owns its flow and is never handed off again (a flow's owner
/// computed anew after a config change cannot bounce it between workers).
pub const F_HANDED_OFF: u16 = 64;
/// With [`F_HANDED_OFF`]: the frame is for the output arc of the interface it carries (an
/// IPsec tunnel whose SA lives on the receiving worker), not a received one: the worker
/// sends it on as its own ([`crate::Graph::send_local`]).
pub const F_TO_OUTPUT: u16 = 128;

/// Bits of `Pkt::flags` that belong to the features: one on an input arc may leave
/// something about the packet there for one on an output arc of the same packet (the
/// firewall: its connection-tracking state in the top four; NAT: what it did in the four
/// below). The engine never sets them and keeps them.
pub const F_FEATURE_META: u16 = 0xff00;
/// Shift of [`F_FEATURE_META`].
pub const FEATURE_META_SHIFT: u32 = 8;

/// The high half of `Pkt::aux`, for the features, from the unicast arc to the output arc
/// and on to ip4-frag / ip6-frag: what a feature on an input arc leaves for one on the
/// output arc when it needs more than [`F_FEATURE_META`] (whose bits are all taken; QoS
/// leaves the class it chose), and what one on the output arc leaves for the
/// fragmentation ([`AUX_FRAG_PCP`]). `aux` is the spare field because on that way the
/// engine writes it only for a packet it replaces by an ICMP error (a new packet, `aux`
/// 0) or sends to be fragmented, and then only the low half ([`AUX_MTU`]); growing
/// [`Pkt`] (24 bytes, no padding) would cost every packet a cache line in three. A
/// feature on the unicast arc that uses all of `aux` for another feature there (NAT's
/// session, IPsec's SPI) must have it consumed before the features that write here run.
pub const AUX_FEATURE_META: u32 = 0xffff_0000;
/// The egress MTU in `aux` of a packet bound for ip4-frag / ip6-frag.
pub const AUX_MTU: u32 = 0xffff;
/// Within [`AUX_FEATURE_META`]: the 802.1p priority the VLAN tags of a packet's fragments
/// carry (bit 19 set, the priority in bits 16-18; clear: priority 0, as the rewrite writes
/// tags). A feature on the output arc sets it with [`with_frag_pcp`]: the fragments'
/// Ethernet headers are written after the arc.
pub const AUX_FRAG_PCP: u32 = 0x000f_0000;
const AUX_FRAG_PCP_SET: u32 = 0x0008_0000;

/// `aux` with [`AUX_FRAG_PCP`] saying priority `pcp` (0-7).
#[inline]
pub fn with_frag_pcp(aux: u32, pcp: u8) -> u32 {
    aux & !AUX_FRAG_PCP | AUX_FRAG_PCP_SET | u32::from(pcp & 7) << 16
}

/// The priority [`AUX_FRAG_PCP`] of `aux` says (0 when not set).
#[inline]
pub fn frag_pcp(aux: u32) -> u8 {
    if aux & AUX_FRAG_PCP_SET != 0 {
        (aux >> 16 & 7) as u8
    } else {
        0
    }
}

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
        assert!(
            src.iter().all(|&b| b == 0),
            "a frame paired with itself reads as zeros"
        );
        dst[0] = 1;
        a.free(p.buf);
        a.free((rx / FRAME_SIZE as u64) as u32);
        assert_eq!(a.free_count(), 70);
    }

    /// Jumbo frames go into big frames, numbered apart from the small ones; copies work
    /// between the pools; big frames are owned like small ones (a double free is refused)
    /// and never lent.
    #[test]
    fn big_frames_hold_jumbo_frames() {
        let mut a = Arena::with_big(8, 2);
        assert_eq!(a.big_frames(), 2);
        let jumbo: Vec<u8> = (0..MAX_FRAME).map(|i| i as u8).collect();
        let p = a.load(&jumbo, 3).unwrap();
        assert!(p.buf >= BIG_BASE);
        assert_eq!(a.data(&p), &jumbo[..]);
        assert_eq!(a.frame(p.buf).len(), BIG_FRAME_SIZE);
        assert_eq!(a.big_free_count(), 1);
        assert!(!a.lend(p.buf), "big frames are never lent to the kernel");
        // Small to big and big to small.
        let s = a.load(&[5; 100], 0).unwrap();
        let (src, dst) = a.frame_pair(p.buf, s.buf);
        dst[HEADROOM..HEADROOM + 100].copy_from_slice(&src[HEADROOM + 1000..HEADROOM + 1100]);
        assert_eq!(a.data(&s), &jumbo[1000..1100]);
        let q = a.alloc_for(5000).unwrap();
        assert!(q >= BIG_BASE && q != p.buf);
        assert_eq!(a.alloc_for(5000), None, "two big frames only");
        assert_eq!(a.alloc_for(BIG_FRAME_SIZE), None, "larger than any frame");
        let (src, dst) = a.frame_pair(s.buf, q);
        dst[..100].copy_from_slice(&src[HEADROOM..HEADROOM + 100]);
        assert_eq!(&a.frame(q)[..100], &jumbo[1000..1100]);
        a.free(q);
        a.free(p.buf);
        a.free(s.buf);
        assert_eq!((a.big_free_count(), a.free_count()), (2, 8));
        assert!(
            a.frame(BIG_BASE + 2).iter().all(|&b| b == 0),
            "out of range"
        );
        assert_eq!(a.bad_frees(), 0);
    }

    /// A big frame freed twice, or past the pool, is refused and counted.
    #[test]
    #[cfg(not(debug_assertions))]
    fn big_frames_refuse_double_frees() {
        let mut a = Arena::with_big(4, 1);
        let b = a.alloc_big().unwrap();
        a.free(b);
        a.free(b);
        a.free(BIG_BASE + 1);
        assert_eq!(a.bad_frees(), 2);
        assert_eq!(a.big_free_count(), 1);
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
