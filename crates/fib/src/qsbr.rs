//! Quiescent-state-based reclamation (QSBR).
//!
//! The writer never frees memory a reader might still hold. Readers announce, once per
//! packet vector, that they hold no reference into the FIB ([`ReaderHandle::quiescent`]):
//! they copy the domain's global epoch into their own cache line. An object unpublished by
//! the writer is tagged with `global + 1`; once the global epoch has been advanced past the
//! unpublish and every online reader has reported at least the tag, nobody can reach the
//! object any more and it is freed. Offline readers (idle, blocked) are ignored.
//!
//! Cost on the reader side: one load of the global epoch and one store to a private line.

use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Slot value of a reader that holds no references (offline or unclaimed).
const OFFLINE: u64 = u64::MAX;

/// One reader's state, alone on its cache line(s) so readers never share a line.
#[repr(align(128))]
struct Slot {
    /// Last global epoch this reader reported, or [`OFFLINE`].
    epoch: AtomicU64,
    /// Whether a [`ReaderHandle`] owns this slot.
    claimed: AtomicBool,
}

/// The global epoch, on its own cache line.
#[repr(align(128))]
struct Global(AtomicU64);

/// A QSBR domain: the global epoch and a fixed number of reader slots.
pub struct Domain {
    global: Global,
    slots: Box<[Slot]>,
}

impl Domain {
    /// A domain with room for `max_readers` registered readers.
    pub fn new(max_readers: usize) -> Arc<Self> {
        let slots = (0..max_readers.max(1))
            .map(|_| Slot {
                epoch: AtomicU64::new(OFFLINE),
                claimed: AtomicBool::new(false),
            })
            .collect();
        Arc::new(Domain {
            global: Global(AtomicU64::new(1)),
            slots,
        })
    }

    /// Claim a free slot; the reader starts online. `None` when all slots are taken.
    pub fn try_register(self: &Arc<Self>) -> Option<ReaderHandle> {
        for (i, s) in self.slots.iter().enumerate() {
            if s.claimed
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                let h = ReaderHandle {
                    domain: Arc::clone(self),
                    slot: i,
                };
                h.online();
                return Some(h);
            }
        }
        None
    }

    /// Epoch to tag an object with right after unpublishing it: it may be freed once every
    /// online reader has reported at least this value.
    pub fn retire_epoch(&self) -> u64 {
        self.global.0.load(Ordering::Relaxed) + 1
    }

    /// Advance the global epoch (so that readers can report past everything retired so
    /// far) and return the new value.
    pub fn advance(&self) -> u64 {
        let e = self.global.0.fetch_add(1, Ordering::SeqCst) + 1;
        // Pairs with the fence in `online`: either we see the reader online, or the reader
        // sees everything we unpublished before this point.
        fence(Ordering::SeqCst);
        e
    }

    /// Smallest epoch reported by an online reader (`u64::MAX` if none is online).
    pub fn min_reported(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| s.epoch.load(Ordering::Acquire))
            .min()
            .unwrap_or(OFFLINE)
    }

    /// Wait until every online reader has reported at least `target` (readers that go
    /// offline meanwhile stop being waited for). Spins briefly, then sleeps 50 µs at a time.
    pub fn wait_for(&self, target: u64) {
        let start = Instant::now();
        for s in self.slots.iter() {
            let mut spins = 0u32;
            while s.epoch.load(Ordering::Acquire) < target {
                if spins < 64 {
                    std::hint::spin_loop();
                    spins += 1;
                } else if start.elapsed() < Duration::from_micros(200) {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        }
    }
}

/// A registered reader's slot in the QSBR domain. Releases the slot on drop.
///
/// `Send` (it may be created on one thread and moved to its worker), but it represents a
/// single thread's progress: use it from that thread only.
pub struct ReaderHandle {
    domain: Arc<Domain>,
    slot: usize,
}

impl ReaderHandle {
    #[inline(always)]
    fn slot(&self) -> &Slot {
        &self.domain.slots[self.slot]
    }

    /// Report that this reader holds no reference into the FIB (call once per vector).
    #[inline]
    pub fn quiescent(&self) {
        let e = self.domain.global.0.load(Ordering::Acquire);
        self.slot().epoch.store(e, Ordering::Release);
    }

    /// Reader goes idle (e.g. blocking); writers stop waiting for it.
    pub fn offline(&self) {
        self.slot().epoch.store(OFFLINE, Ordering::Release);
    }

    /// Reader resumes lookups.
    pub fn online(&self) {
        let e = self.domain.global.0.load(Ordering::Acquire);
        self.slot().epoch.store(e, Ordering::Relaxed);
        // Our later table reads must not be ordered before the store that makes us
        // visible to the writer (pairs with the fence in `Domain::advance`).
        fence(Ordering::SeqCst);
    }
}

impl Drop for ReaderHandle {
    fn drop(&mut self) {
        self.offline();
        self.slot().claimed.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_reused_and_offline_does_not_block() {
        let d = Domain::new(2);
        let a = d.try_register().unwrap();
        let b = d.try_register().unwrap();
        assert!(d.try_register().is_none());
        drop(a);
        let a = d.try_register().unwrap();
        let t = d.advance();
        assert!(d.min_reported() < t);
        a.quiescent();
        b.offline();
        d.wait_for(t); // must not block on the offline reader
        assert!(d.min_reported() >= t);
        b.online();
        assert_eq!(d.min_reported(), t);
    }
}
