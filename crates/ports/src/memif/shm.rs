//! Access to memory shared with the peer process: mapped regions, ring headers and
//! descriptors. Every `unsafe` block touching shared memory lives here.
//!
//! The peer writes this memory concurrently, so nothing here hands out `&`/`&mut`
//! references to it: ring indices and descriptor words are atomics (the peer's C code uses
//! `__atomic` builtins on the same words), and packet bytes are copied through raw
//! pointers only after a bounds check against the mapping ([`Region::span`]). Ordering:
//! the consumer loads the producer's index with `Acquire` before reading descriptors and
//! buffers; the producer writes descriptors and buffers, then publishes its index with
//! `Release`.

use std::marker::PhantomData;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};

use super::proto::{
    ring_bytes, DESC_SIZE, RING_COOKIE, RING_DESC, RING_FLAGS, RING_HEAD, RING_TAIL,
};
use super::sys::Mapping;

/// One shared memory region, mapped.
pub(crate) struct Region {
    map: Mapping,
    /// The region's file, kept for the peer (the client sends it at ADD_REGION).
    fd: Option<OwnedFd>,
}

impl Region {
    pub(crate) fn new(map: Mapping, fd: Option<OwnedFd>) -> Region {
        Region { map, fd }
    }

    /// Size in bytes.
    #[inline]
    pub(crate) fn len(&self) -> u64 {
        self.map.len() as u64
    }

    /// The region's file, if we keep it.
    pub(crate) fn fd(&self) -> Option<&OwnedFd> {
        self.fd.as_ref()
    }

    /// `len` bytes at `off`, if they lie entirely inside the region.
    #[inline]
    pub(crate) fn span(&self, off: u32, len: u32) -> Option<Span<'_>> {
        if u64::from(off) + u64::from(len) > self.len() {
            return None;
        }
        Some(Span {
            // SAFETY: off + len <= mapping length, so the pointer stays in the mapping.
            ptr: unsafe { self.map.as_ptr().add(off as usize) },
            len: len as usize,
            _region: PhantomData,
        })
    }

    /// The ring of `2^log2` descriptors at `offset`, if it fits the region and its header
    /// words are naturally aligned.
    pub(crate) fn ring(&self, offset: u32, log2: u8) -> Option<Ring> {
        if log2 > 15 || offset & 3 != 0 {
            return None;
        }
        if u64::from(offset) + ring_bytes(log2) > self.len() {
            return None;
        }
        Some(Ring {
            // SAFETY: the whole ring lies inside the mapping (checked above).
            base: unsafe { self.map.as_ptr().add(offset as usize) },
            size: 1u16 << log2,
        })
    }
}

/// A bounds-checked byte range of a region.
pub(crate) struct Span<'a> {
    ptr: *mut u8,
    len: usize,
    _region: PhantomData<&'a Region>,
}

impl Span<'_> {
    /// Copy the span into the start of `dst` (which must be at least as long; otherwise
    /// nothing is copied and false returned).
    #[inline]
    pub(crate) fn read_into(&self, dst: &mut [u8]) -> bool {
        if dst.len() < self.len {
            return false;
        }
        // SAFETY: the source span is inside a live mapping (checked at creation, the
        // borrow keeps the region alive) and `dst` has room; private memory never overlaps
        // the shared mapping. The peer may write the bytes meanwhile: we then copy
        // garbage, never out of bounds.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr as *const u8, dst.as_mut_ptr(), self.len) };
        true
    }

    /// Copy `src` into the start of the span (false, nothing copied, if it does not fit).
    #[inline]
    pub(crate) fn write_from(&self, src: &[u8]) -> bool {
        if src.len() > self.len {
            return false;
        }
        // SAFETY: as in `read_into`, with the roles swapped.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr, src.len()) };
        true
    }
}

/// A descriptor as read from or written to a ring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Desc {
    pub flags: u16,
    pub region: u16,
    pub length: u32,
    pub offset: u32,
}

/// A ring header plus its descriptors inside a mapped region.
///
/// Holds a raw pointer: the owner (`Conn`) keeps the region it points into mapped for as
/// long as it keeps the ring.
pub(crate) struct Ring {
    base: *mut u8,
    size: u16,
}

// SAFETY: the ring points into a mapping owned by the same connection; moving both to
// another thread is sound.
unsafe impl Send for Ring {}

impl Ring {
    #[inline]
    fn u16_at(&self, off: usize) -> &AtomicU16 {
        // SAFETY: `off` is one of the header offsets, inside the ring (checked at creation)
        // and 2-aligned (the ring base is 4-aligned in a page-aligned mapping).
        unsafe { &*(self.base.add(off) as *const AtomicU16) }
    }

    #[inline]
    fn u32_at(&self, off: usize) -> &AtomicU32 {
        // SAFETY: callers pass header or descriptor word offsets inside the ring (slots are
        // masked), 4-aligned as above.
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }

    /// Number of descriptors.
    #[inline]
    pub(crate) fn size(&self) -> u16 {
        self.size
    }

    /// The producer index of client-to-server rings, the refill index of server-to-client
    /// rings (see the module docs of `memif`).
    #[inline]
    pub(crate) fn head(&self) -> &AtomicU16 {
        self.u16_at(RING_HEAD)
    }

    /// The consumer index of client-to-server rings, the producer index of
    /// server-to-client rings.
    #[inline]
    pub(crate) fn tail(&self) -> &AtomicU16 {
        self.u16_at(RING_TAIL)
    }

    /// Ring flags (`MEMIF_RING_FLAG_MASK_INT`).
    pub(crate) fn flags(&self) -> &AtomicU16 {
        self.u16_at(RING_FLAGS)
    }

    /// The magic cookie.
    pub(crate) fn cookie(&self) -> u32 {
        self.u32_at(RING_COOKIE).load(Ordering::Relaxed)
    }

    pub(crate) fn set_cookie(&self, c: u32) {
        self.u32_at(RING_COOKIE).store(c, Ordering::Relaxed)
    }

    #[inline]
    fn desc_off(&self, slot: u16) -> usize {
        RING_DESC + DESC_SIZE * usize::from(slot & (self.size - 1))
    }

    /// Descriptor of `slot` (masked to the ring). Each word is read once; the caller
    /// validates the copy, never the shared original.
    #[inline]
    pub(crate) fn desc(&self, slot: u16) -> Desc {
        let o = self.desc_off(slot);
        let w0 = self.u32_at(o).load(Ordering::Relaxed);
        let length = self.u32_at(o + 4).load(Ordering::Relaxed);
        let offset = self.u32_at(o + 8).load(Ordering::Relaxed);
        // Word 0 holds flags (first u16) and region (second u16) in memory order.
        let b = w0.to_ne_bytes();
        Desc {
            flags: u16::from_ne_bytes([b[0], b[1]]),
            region: u16::from_ne_bytes([b[2], b[3]]),
            length,
            offset,
        }
    }

    /// Write the whole descriptor of `slot`.
    #[inline]
    pub(crate) fn set_desc(&self, slot: u16, d: Desc) {
        let o = self.desc_off(slot);
        let f = d.flags.to_ne_bytes();
        let r = d.region.to_ne_bytes();
        let w0 = u32::from_ne_bytes([f[0], f[1], r[0], r[1]]);
        self.u32_at(o).store(w0, Ordering::Relaxed);
        self.u32_at(o + 4).store(d.length, Ordering::Relaxed);
        self.u32_at(o + 8).store(d.offset, Ordering::Relaxed);
        self.u32_at(o + 12).store(0, Ordering::Relaxed);
    }

    /// Write flags and length of `slot`, keeping the region and offset the peer put there
    /// (a server filling the client's buffer).
    #[inline]
    pub(crate) fn set_len_flags(&self, slot: u16, d: Desc, length: u32, flags: u16) {
        self.set_desc(slot, Desc { flags, length, ..d });
    }
}

#[cfg(test)]
impl Region {
    /// An anonymous shared region for tests.
    pub(crate) fn anonymous(len: usize) -> Region {
        let fd = super::sys::memfd("memif-test", len as u64).expect("memfd");
        let map = Mapping::shared(std::os::fd::AsRawFd::as_raw_fd(&fd), len).expect("mmap");
        Region::new(map, Some(fd))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_and_rings_are_bounds_checked() {
        let r = Region::anonymous(4096);
        assert!(r.span(0, 4096).is_some());
        assert!(r.span(4095, 1).is_some());
        assert!(r.span(4095, 2).is_none());
        assert!(r.span(u32::MAX, 1).is_none());
        assert!(r.span(1, u32::MAX).is_none());
        // 128 + 16 * 16 = 384 bytes.
        assert!(r.ring(0, 4).is_some());
        assert!(r.ring(4096 - 384, 4).is_some());
        assert!(r.ring(4096 - 380, 4).is_none());
        assert!(r.ring(2, 4).is_none(), "misaligned");
        assert!(r.ring(0, 10).is_none(), "too big for the region");
    }

    #[test]
    fn descriptors_round_trip_in_place() {
        let r = Region::anonymous(4096);
        let ring = r.ring(0, 2).unwrap();
        let d = Desc {
            flags: 1,
            region: 2,
            length: 3,
            offset: 4,
        };
        ring.set_desc(5, d); // slot 5 is slot 1 of a 4-slot ring
        assert_eq!(ring.desc(1), d);
        ring.set_len_flags(1, d, 60, 0);
        assert_eq!(
            ring.desc(1),
            Desc {
                flags: 0,
                length: 60,
                ..d
            }
        );
        ring.head().store(7, Ordering::Release);
        ring.tail().store(9, Ordering::Release);
        let mut raw = [0u8; 2];
        assert!(r.span(6, 2).unwrap().read_into(&mut raw));
        assert_eq!(u16::from_ne_bytes(raw), 7);
        assert!(r.span(64, 2).unwrap().read_into(&mut raw));
        assert_eq!(u16::from_ne_bytes(raw), 9);
        assert!(r.span(128 + 16 + 4, 2).unwrap().read_into(&mut raw));
        assert_eq!(u16::from_ne_bytes(raw), 60);
    }
}
