//! Raw table memory: anonymous mappings of atomic words, committed lazily by the kernel.
//!
//! Every table a lookup reads lives in one of these regions. Pages are zero until first
//! written, and zero is a valid value for every element type used here (an invalid route
//! entry, a null next-hop pointer), so reads of untouched memory are meaningful.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicU32};

/// Huge page size used to align tables that are read at random (tbl24).
const HUGE_PAGE: usize = 2 << 20;

/// Marker for element types whose all-zero bit pattern is a valid value.
///
/// # Safety
/// Implementors must be valid when zero-initialised and be plain atomics (no drop glue).
pub(crate) unsafe trait ZeroValid: Sized {}
// SAFETY: AtomicU32 has the layout of u32; zero is a valid u32.
unsafe impl ZeroValid for AtomicU32 {}
// SAFETY: AtomicPtr<T> has the layout of *mut T; zero is the null pointer.
unsafe impl<T> ZeroValid for AtomicPtr<T> {}

/// A fixed-size array of `T` in its own anonymous mapping.
pub(crate) struct Region<T: ZeroValid> {
    /// First element (2 MiB aligned when requested).
    ptr: NonNull<T>,
    /// Number of elements.
    len: usize,
    /// Start and length of the whole mapping (may be larger because of alignment).
    map: NonNull<libc::c_void>,
    map_len: usize,
}

// SAFETY: the region is only accessed through shared references to atomics, which are
// `Sync`; the mapping itself is owned by this value and unmapped once in `Drop`.
unsafe impl<T: ZeroValid> Send for Region<T> {}
// SAFETY: see `Send`; all element access goes through `&T` where `T` is an atomic type.
unsafe impl<T: ZeroValid> Sync for Region<T> {}

impl<T: ZeroValid> Region<T> {
    /// Reserve `len` zeroed elements. `huge` aligns the region to 2 MiB and asks the kernel
    /// for transparent huge pages (fewer TLB misses on random access).
    pub(crate) fn new(len: usize, huge: bool) -> std::io::Result<Self> {
        let bytes = len
            .max(1)
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "table too large")
            })?;
        let map_len = if huge { bytes + HUGE_PAGE } else { bytes };
        // MAP_NORESERVE: pages are committed on first touch only. (Miri, which checks the
        // unsafe code here in CI, knows only plain private anonymous mappings.)
        let flags = if cfg!(miri) {
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS
        } else {
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE
        };
        // SAFETY: anonymous private mapping with no address hint; the kernel picks the
        // address.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = map as usize;
        let start = if huge {
            (base + HUGE_PAGE - 1) & !(HUGE_PAGE - 1)
        } else {
            base
        };
        if huge && !cfg!(miri) {
            // THP is best effort: a failure only costs TLB misses, so the result is ignored.
            // SAFETY: [start, start + bytes) lies inside the mapping created above.
            unsafe {
                libc::madvise(start as *mut libc::c_void, bytes, libc::MADV_HUGEPAGE);
            }
        }
        Ok(Region {
            // Offset from the mapping's own pointer, keeping its provenance.
            ptr: NonNull::new((map as *mut u8).wrapping_add(start - base) as *mut T)
                .expect("mmap returned a non-null address"),
            len,
            map: NonNull::new(map).expect("mmap returned a non-null address"),
            map_len,
        })
    }

    /// All elements.
    #[inline(always)]
    pub(crate) fn as_slice(&self) -> &[T] {
        // SAFETY: `ptr` points to `len` elements inside a live mapping owned by `self`;
        // the memory is zero-initialised and zero is valid for `T` (`ZeroValid`); all
        // mutation goes through atomics, so shared references never alias a `&mut`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// Pointer to element `i` for prefetching (never dereferenced by the caller).
    #[inline(always)]
    pub(crate) fn addr(&self, i: usize) -> *const T {
        self.ptr.as_ptr().wrapping_add(i)
    }
}

impl<T: ZeroValid> Drop for Region<T> {
    fn drop(&mut self) {
        // SAFETY: `map`/`map_len` describe exactly the mapping created in `new`, and no
        // reference into it outlives `self`.
        unsafe {
            libc::munmap(self.map.as_ptr(), self.map_len);
        }
    }
}

/// Hint the CPU to bring the cache line holding `p` into L1.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: prefetch never faults, whatever the address; SSE is baseline on x86_64.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p as *const i8);
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = p;
}
