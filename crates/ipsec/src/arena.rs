//! Where SAs live: [`SaBox`], a box for an [`Sa`] in 2 MiB chunks advised as transparent
//! huge pages (`madvise(MADV_HUGEPAGE)`), shared by the process; [`Blocks`], an inbound
//! SA's replay bitmap, in chunks of their own; and [`SharedStats`], an SA's [`SaStats`]
//! (which the control thread reads), one line each in chunks of their own.
//!
//! With 100,000 SAs each packet's SA is cold not only in the caches but in the TLB: with
//! 4 KiB pages almost every SA is a page of its own, and a page walk (nested, in a VM)
//! comes before the cache miss, which prefetching does not hide well. In 2 MiB pages, 2,000
//! SAs share one TLB entry (issue 26; `docs/performance.md`, "ESP from memory").
//!
//! SAs are made and dropped by the control thread (the workers get and return them boxed
//! through their op queues), so the free list's lock is never taken on the packet path.
//! Chunks are kept for reuse, never given back. Without transparent huge pages (`never`)
//! the chunks are ordinary memory, SAs still packed together.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::sa::{Sa, SaStats};

/// Bytes of a chunk: one huge page.
const CHUNK: usize = 2 << 20;

/// Free places for an SA, as addresses (a raw pointer is not Send).
static FREE: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Free places for a replay bitmap of [`CHUNK_BLOCKS`] blocks.
static FREE_BLOCKS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Free places for a [`SharedStats`].
static FREE_STATS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// 64-bit blocks of a bitmap that lives in the chunks: windows up to 1,984 packets (the
/// default 1,024 takes 17 blocks, rounded up to 32: 256 bytes, 4 cache lines).
pub const CHUNK_BLOCKS: usize = 32;

/// A free place of `size` bytes (a multiple of 64) from `free`, carving a new huge-page
/// chunk into such places when there is none. Allocation failure aborts, as `Box::new`'s
/// does.
fn take(free: &Mutex<Vec<usize>>, size: usize) -> NonNull<u8> {
    let at = {
        let mut free = free.lock().unwrap_or_else(|e| e.into_inner());
        if free.is_empty() {
            let layout = chunk_layout();
            // SAFETY: the layout's size is not zero.
            let p = unsafe { std::alloc::alloc(layout) };
            if p.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            // SAFETY: `p` is the start of our allocation of `layout.size()` bytes,
            // aligned to it (2 MiB): the advice only changes how it is backed. A
            // failure (no THP in this kernel) leaves ordinary pages, which is fine.
            unsafe { libc::madvise(p.cast(), layout.size(), libc::MADV_HUGEPAGE) };
            let n = layout.size() / size;
            // Popped from the end: places are handed out in address order.
            free.extend((0..n).rev().map(|i| p as usize + i * size));
        }
        free.pop().unwrap_or(0)
    };
    match NonNull::new(at as *mut u8) {
        Some(p) => p,
        None => std::alloc::handle_alloc_error(chunk_layout()),
    }
}

/// An [`Sa`] in huge-page memory: a `Box` that allocates from the SA chunks.
pub struct SaBox(NonNull<Sa>);

// SAFETY: an SaBox owns its Sa exclusively, as a Box does; Sa is Send.
unsafe impl Send for SaBox {}
// SAFETY: shared access gives `&Sa` only; Sa is Sync.
unsafe impl Sync for SaBox {}

fn chunk_layout() -> Layout {
    // CHUNK is a power of two and a multiple of Sa's alignment (64).
    Layout::from_size_align(CHUNK, CHUNK).unwrap_or(Layout::new::<Sa>())
}

impl SaBox {
    /// Moves `sa` into the SA chunks (a new chunk when none has room; allocation failure
    /// aborts, as `Box::new`'s does).
    pub fn new(sa: Sa) -> SaBox {
        let p = take(&FREE, std::mem::size_of::<Sa>()).cast::<Sa>();
        // SAFETY: `p` is a free place in a live chunk (chunks are never freed), sized and
        // aligned for an Sa (the chunk is 2 MiB-aligned and Sa's size a multiple of its
        // alignment), taken off the free list under its lock: no one else uses it.
        unsafe { p.as_ptr().write(sa) };
        SaBox(p)
    }
}

/// A replay bitmap: `len` zeroed 64-bit blocks, in the chunks (beside the SAs, in huge
/// pages, no allocator header in front) when `len` is at most [`CHUNK_BLOCKS`], else on
/// the heap. Dereferences to its `len` blocks.
pub struct Blocks {
    ptr: NonNull<u64>,
    len: usize,
}

// SAFETY: Blocks owns its memory exclusively, as a Box<[u64]> does.
unsafe impl Send for Blocks {}
// SAFETY: shared access gives `&[u64]` only.
unsafe impl Sync for Blocks {}

impl Blocks {
    /// `len` zeroed blocks.
    pub fn zeroed(len: usize) -> Blocks {
        let ptr = if len <= CHUNK_BLOCKS {
            let p = take(&FREE_BLOCKS, CHUNK_BLOCKS * 8).cast::<u64>();
            // SAFETY: a free place of CHUNK_BLOCKS blocks in a live chunk, 64-byte
            // aligned, taken off the free list under its lock: ours alone.
            unsafe { p.as_ptr().write_bytes(0, CHUNK_BLOCKS) };
            p
        } else {
            let b: Box<[u64]> = vec![0u64; len].into_boxed_slice();
            // SAFETY: Box::into_raw never returns null.
            unsafe { NonNull::new_unchecked(Box::into_raw(b).cast::<u64>()) }
        };
        Blocks { ptr, len }
    }

    /// Whether they live in the chunks (not on the heap).
    pub fn in_chunks(&self) -> bool {
        self.len <= CHUNK_BLOCKS
    }
}

impl std::ops::Deref for Blocks {
    type Target = [u64];
    fn deref(&self) -> &[u64] {
        // SAFETY: `ptr` points to at least `len` initialized blocks that this owns.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for Blocks {
    fn deref_mut(&mut self) -> &mut [u64] {
        // SAFETY: as in Deref, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Clone for Blocks {
    fn clone(&self) -> Blocks {
        let mut b = Blocks::zeroed(self.len);
        b.copy_from_slice(self);
        b
    }
}

impl Drop for Blocks {
    fn drop(&mut self) {
        if self.in_chunks() {
            FREE_BLOCKS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(self.ptr.as_ptr() as usize);
        } else {
            let slice = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
            // SAFETY: made by Box::into_raw of a boxed slice of `len` blocks in `zeroed`,
            // and never freed before.
            drop(unsafe { Box::from_raw(slice) });
        }
    }
}

impl std::fmt::Debug for Blocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Blocks({})", self.len)
    }
}

/// A [`SharedStats`]'s line: the count of its handles and the counters.
#[repr(C, align(64))]
struct StatsLine {
    refs: AtomicUsize,
    stats: SaStats,
}

const _: () = assert!(std::mem::size_of::<StatsLine>() == 64);

/// An SA's [`SaStats`], shared by the worker that holds the SA (which publishes into it
/// after each vector, and counts refusals) and the control thread (which reads it, and
/// keeps it after the SA is gone): an `Arc<SaStats>` whose one line (a count of handles
/// and the 56 bytes of counters) lives in huge-page chunks, as the SAs do. With 100,000
/// SAs, heap `Arc`s were 100,000 places in 4 KiB pages, each a TLB miss (a nested page walk
/// on a VM) that the ESP nodes' prefetch of the counters paid (issue 26).
pub struct SharedStats(NonNull<StatsLine>);

// SAFETY: as Arc<SaStats>: the handles only give `&SaStats`, whose fields are atomics
// (Sync), and the count of handles is atomic; the line is freed by the last handle.
unsafe impl Send for SharedStats {}
// SAFETY: as for Send.
unsafe impl Sync for SharedStats {}

impl SharedStats {
    /// Zeroed counters, one handle.
    pub fn new() -> SharedStats {
        let p = take(&FREE_STATS, std::mem::size_of::<StatsLine>()).cast::<StatsLine>();
        // SAFETY: `p` is a free place of 64 bytes in a live chunk (never freed), 64-byte
        // aligned, taken off the free list under its lock: no one else uses it.
        unsafe {
            p.as_ptr().write(StatsLine {
                refs: AtomicUsize::new(1),
                stats: SaStats::default(),
            })
        };
        SharedStats(p)
    }

    /// The address of the counters, for a prefetch.
    #[inline]
    pub fn as_ptr(&self) -> *const SaStats {
        // SAFETY: the line is live while this handle is (see Drop).
        unsafe { &raw const (*self.0.as_ptr()).stats }
    }

    fn line(&self) -> &StatsLine {
        // SAFETY: the line is live while a handle to it is: only the last handle's drop
        // gives its place back.
        unsafe { self.0.as_ref() }
    }
}

impl Default for SharedStats {
    fn default() -> SharedStats {
        SharedStats::new()
    }
}

impl Clone for SharedStats {
    fn clone(&self) -> SharedStats {
        // Relaxed, as Arc's: a new handle comes from an existing one, which keeps the
        // line alive meanwhile.
        let old = self.line().refs.fetch_add(1, Ordering::Relaxed);
        if old > isize::MAX as usize {
            // As Arc: beyond any count of real handles (leaked ones), give up.
            std::process::abort();
        }
        SharedStats(self.0)
    }
}

impl Drop for SharedStats {
    fn drop(&mut self) {
        // Release, then Acquire when last: the other handles' uses happen before the place
        // is reused (Arc's protocol).
        if self.line().refs.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        fence(Ordering::Acquire);
        // SaStats holds atomics only (no Drop); its place goes back to the free list, to
        // be written whole by the next `new`.
        FREE_STATS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(self.0.as_ptr() as usize);
    }
}

impl std::ops::Deref for SharedStats {
    type Target = SaStats;
    fn deref(&self) -> &SaStats {
        &self.line().stats
    }
}

impl std::fmt::Debug for SharedStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

/// Places for an SA in the chunks that no SA holds: what the next SAs reuse (already
/// resident if used before) before a new chunk is taken.
pub fn free_places() -> usize {
    FREE.lock().unwrap_or_else(|e| e.into_inner()).len()
}

impl std::ops::Deref for SaBox {
    type Target = Sa;
    fn deref(&self) -> &Sa {
        // SAFETY: the pointer is to the live Sa this box owns (written in `new`).
        unsafe { self.0.as_ref() }
    }
}

impl std::ops::DerefMut for SaBox {
    fn deref_mut(&mut self) -> &mut Sa {
        // SAFETY: as in Deref, and `&mut self` makes the access exclusive.
        unsafe { self.0.as_mut() }
    }
}

impl Drop for SaBox {
    fn drop(&mut self) {
        // SAFETY: the Sa is live and ours; after this it is never used again (its keys are
        // zeroized by its own Drop) and its place goes back to the free list.
        unsafe { std::ptr::drop_in_place(self.0.as_ptr()) };
        FREE.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(self.0.as_ptr() as usize);
    }
}

impl std::fmt::Debug for SaBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sa::{Direction, Encryption, Integrity, SaConfig};

    #[test]
    fn boxes_hold_their_sa_and_places_are_reused() {
        let sa = |spi| {
            Sa::new(&SaConfig::new(
                spi,
                Direction::Outbound,
                Encryption::AesGcm128,
                &[spi as u8; 20],
                Integrity::None,
                &[],
            ))
            .unwrap()
        };
        let mut v: Vec<SaBox> = (0..5000).map(|i| SaBox::new(sa(0x1000 + i))).collect();
        for (i, b) in v.iter().enumerate() {
            assert_eq!(b.spi(), 0x1000 + i as u32);
            assert_eq!((&**b as *const Sa as usize) % 64, 0);
        }
        v[7].set_sequence(41);
        assert_eq!(v[7].sequence(), 41);
        let at = &*v[3] as *const Sa as usize;
        v.remove(3);
        let again = SaBox::new(sa(0x9999));
        // Other tests allocate too: the place may have gone to one of theirs.
        let reused = &*again as *const Sa as usize == at;
        assert_eq!(again.spi(), 0x9999, "reused: {reused}");
        assert_eq!(v[3].spi(), 0x1004);
    }

    #[test]
    fn shared_stats_live_while_a_handle_does() {
        let a = SharedStats::new();
        assert_eq!(
            a.as_ptr() as usize % 64,
            8,
            "after the count, in a line of its own"
        );
        let b = a.clone();
        a.count(crate::EspError::Replayed);
        drop(a);
        assert_eq!(b.counters().replayed, 1, "the other handle still reads it");
        b.publish(3, 300, 7);
        let t = std::thread::spawn(move || (b.counters().packets, b.sequence()));
        assert_eq!(t.join().unwrap(), (3, 7));
        // A place given back comes back zeroed (whoever gets it).
        let c = SharedStats::new();
        assert_eq!(c.counters(), crate::Counters::default());
    }

    #[test]
    fn bitmaps_up_to_32_blocks_live_in_the_chunks_and_come_back_zeroed() {
        let mut small = Blocks::zeroed(17);
        assert!(small.in_chunks());
        assert_eq!(small.len(), 17);
        assert_eq!(small.as_ptr() as usize % 64, 0);
        small[16] = 7;
        let copy = small.clone();
        assert_eq!(copy[16], 7);
        assert_ne!(copy.as_ptr(), small.as_ptr());
        drop(small);
        // A place given back comes back zeroed (whoever gets it).
        let again = Blocks::zeroed(32);
        assert!(again.iter().all(|&b| b == 0));
        let big = Blocks::zeroed(2048);
        assert!(!big.in_chunks());
        assert_eq!(big.len(), 2048);
        assert!(big.iter().all(|&b| b == 0));
    }
}
