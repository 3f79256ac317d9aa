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

// Under `--cfg loom` the same code runs on loom's atomics, whose every interleaving and
// permitted reordering the model at the bottom explores.
#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
#[cfg(not(loom))]
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
                if cfg!(loom) {
                    // The model must let the reader run: a spin would be explored forever.
                    #[cfg(loom)]
                    loom::thread::yield_now();
                } else if spins < 64 {
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

#[cfg(all(test, not(loom)))]
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

/// An exhaustive-interleaving model of the publish / retire / reclaim protocol, run on this
/// module's own code: `RUSTFLAGS="--cfg loom" cargo test -p fib --release --lib loom`.
///
/// A slot publishes one of two objects, as a next-hop slot does. The writer publishes the
/// second and retires the first, then frees it the way `FibWriter` does (tag with
/// `retire_epoch`, then `advance` and free once `min_reported` has passed the tag; or
/// `advance` and `wait_for`). The reader reads whichever object it finds, as a worker reads a
/// next hop, between quiescent points, offline spells and a late start. A free is a write
/// to the object's `UnsafeCell`, a read a read: loom fails the model if any interleaving
/// lets the two race, i.e. if the writer could free what a reader may still be reading.
#[cfg(all(test, loom))]
mod loom_model {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::atomic::AtomicUsize;

    const FREED: u32 = 0xdead;

    struct World {
        domain: Arc<Domain>,
        /// Index of the published object.
        published: AtomicUsize,
        objects: [UnsafeCell<u32>; 2],
    }

    fn world() -> Arc<World> {
        Arc::new(World {
            domain: Domain::new(1),
            published: AtomicUsize::new(0),
            objects: [UnsafeCell::new(10), UnsafeCell::new(11)],
        })
    }

    /// The reader's access to the published object (as `NextHopTable::get` then a read).
    fn read_published(w: &World) -> u32 {
        let i = w.published.load(Ordering::Acquire);
        let v = w.objects[i].with(|p| unsafe { *p });
        assert_ne!(v, FREED, "read an object after it was freed");
        v
    }

    /// The writer's swap and retire; then `reclaim` (non-blocking) or `synchronize`.
    fn replace_and_free(w: &World, blocking: bool) {
        let old = w.published.swap(1, Ordering::AcqRel);
        let tag = w.domain.retire_epoch();
        if blocking {
            let target = w.domain.advance();
            w.domain.wait_for(target);
        } else {
            w.domain.advance();
            if w.domain.min_reported() < tag {
                return; // not yet: a later reclaim frees it
            }
        }
        w.objects[old].with_mut(|p| unsafe { *p = FREED });
    }

    fn run(blocking: bool, reader: impl Fn(&World, &ReaderHandle) + Send + Sync + 'static) {
        let reader = Arc::new(reader);
        loom::model(move || {
            let w = world();
            let h = w.domain.try_register().expect("a slot");
            let (w2, reader) = (Arc::clone(&w), Arc::clone(&reader));
            let t = loom::thread::spawn(move || {
                reader(&w2, &h);
                drop(h);
            });
            replace_and_free(&w, blocking);
            t.join().unwrap();
        });
    }

    #[test]
    fn loom_reclaim_never_frees_what_a_reader_may_read() {
        run(false, |w, h| {
            read_published(w);
            h.quiescent();
            read_published(w);
        });
    }

    #[test]
    fn loom_synchronize_waits_for_the_reader() {
        run(true, |w, h| {
            read_published(w);
            h.quiescent();
        });
    }

    #[test]
    fn loom_a_reader_coming_online_sees_the_new_object_or_is_waited_for() {
        run(false, |w, h| {
            h.offline();
            h.online();
            read_published(w);
            h.quiescent();
        });
    }
}
