//! Handoff between workers, as VPP's handoff nodes: a feature that keeps per-flow state
//! (connection tracking, NAT) needs both directions of a flow on the worker that owns
//! it, and a port's receive queues spread frames by a hash the router does not choose (a
//! NIC's RSS, a veth peer's transmit queue). A frame that arrived at another worker is
//! copied into a bounded single-producer single-consumer lane towards its owner, which
//! takes it in its next loop iteration and pushes it through its graph as received, marked
//! [`F_HANDED_OFF`].
//!
//! **Memory.** Each worker's frames live in its own packet memory (its AF_XDP sockets'
//! UMEM), which only it may touch, so the frame is copied: into a lane slot by the
//! sender, out of it into the owner's memory by the owner. Slots are preallocated vectors
//! that travel in a ring and come back through a second ring, so a handoff allocates
//! nothing, and a slot is never read while its writer holds it (the rings' ownership
//! transfer, `rtrb`'s acquire/release, orders them). A lane is sized in slots: a full lane
//! is a counted drop at the sender, never a wait.
//!
//! The hand-written part is only this recycling: `rtrb` (a well-kept SPSC ring) carries
//! the slots; carrying the frames themselves in it would copy 9 KB per push or expose
//! uninitialised bytes past a short frame.
//!
//! **Waking an idle owner.** A worker with nothing to do sleeps in `poll(2)`. Each worker's
//! receiving side has a doorbell (an eventfd the worker polls with its ports): a sender
//! that handed frames over in a batch rings the owner's bell if, and only if, the owner
//! is asleep, so the system call happens only under light load. The owner says it is
//! going to sleep, then looks at its lanes once more; the sender pushes, then looks at
//! the owner's flag: with a full fence on both sides, one of them sees the other.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;

use rtrb::{Consumer, Producer, RingBuffer};

use crate::buffer::{PacketMemory, Pkt, Vector, F_HANDED_OFF, HEADROOM, VECTOR_SIZE};

/// Slots of the lanes from one sending side, shared among its lanes to the other workers
/// (16 at least each). Small on purpose: a slot is written by one worker and read by
/// another, so the ring's working set should stay in cache. Measured with `ferrouter-lab
/// bench pipeline --workers 2 --firewall-rules 100 --stateful --handoff` (imix1): 1,024
/// slots per lane cost 133 ns per packet more than none, 256 cost 69 ns.
pub const LANE_SLOTS: usize = 256;

/// Bytes of a lane slot that takes any frame the fast path holds: [`crate::MAX_FRAME`]
/// bytes of IP (a jumbo frame's, or a datagram reassembled to that size) behind an
/// Ethernet header with two VLAN tags (22 bytes).
pub const SLOT_BYTES: usize = crate::MAX_FRAME + 22;

/// Lane depth for `workers` workers: [`LANE_SLOTS`] shared among the lanes of a sending
/// side, 16 at least.
pub fn lane_depth(workers: usize) -> usize {
    (LANE_SLOTS / workers.saturating_sub(1).max(1)).max(16)
}

/// A frame on its way to another worker.
#[derive(Debug)]
struct Slot {
    /// The port it arrived on.
    port: u16,
    /// The flags that travel with it (a property of the port, such as a checksum the
    /// sender may have left partial).
    flags: u16,
    /// Its bytes, from the Ethernet header; the capacity is fixed at creation.
    data: Vec<u8>,
}

/// A worker's doorbell: rung by senders while it sleeps.
#[derive(Debug)]
struct Doorbell {
    /// An eventfd, non-blocking.
    fd: OwnedFd,
    /// The worker is (about to be) asleep in `poll(2)`.
    asleep: AtomicBool,
}

impl Doorbell {
    fn new() -> std::io::Result<Doorbell> {
        // SAFETY: plain system call; the descriptor is checked before it is owned.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Doorbell {
            // SAFETY: `fd` is a new descriptor nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            asleep: AtomicBool::new(false),
        })
    }

    /// Ring if the owner sleeps (after the frames were pushed).
    fn ring_if_asleep(&self) {
        fence(Ordering::SeqCst);
        if self.asleep.load(Ordering::Relaxed) {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a live u64 to an eventfd we own. A full counter
            // (EAGAIN) already wakes the owner; nothing else can fail.
            let _ = unsafe {
                libc::write(
                    self.fd.as_raw_fd(),
                    (&one as *const u64).cast(),
                    std::mem::size_of::<u64>(),
                )
            };
        }
    }
}

/// The sending end of one lane.
struct Lane {
    full: Producer<Slot>,
    empty: Consumer<Slot>,
    bell: Arc<Doorbell>,
}

/// The receiving end of one lane.
struct Inbox {
    full: Consumer<Slot>,
    empty: Producer<Slot>,
}

/// Why a frame was not handed off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// The lane to that worker is full (it is behind): the frame is dropped.
    Full,
    /// The frame is bigger than a lane slot.
    TooBig,
    /// No such worker, or the sender itself.
    NoLane,
}

/// A worker's sending side: one lane to every other worker.
pub struct HandoffTx {
    me: usize,
    lanes: Vec<Option<Lane>>,
    slot_bytes: usize,
    /// Bit `w`: frames went to worker `w` since the last [`HandoffTx::ring`].
    sent_to: u64,
}

/// A worker's receiving side: one lane from every other worker.
pub struct HandoffRx {
    inboxes: Vec<Inbox>,
    /// The inbox served first next time (round robin, so no sender starves another).
    next: usize,
    bell: Arc<Doorbell>,
}

/// What one [`HandoffRx::receive`] took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Received {
    /// Frames put in the vector.
    pub frames: usize,
    /// Frames dropped because the worker's packet memory had no free frame.
    pub no_buffer: usize,
}

/// Sending and receiving sides of a mesh, by worker.
pub type Mesh<T> = std::io::Result<(Vec<T>, Vec<HandoffRx>)>;

/// Lanes between `workers` workers, each of `depth` slots of `slot_bytes` bytes: the
/// sending and receiving sides of each worker, by worker. Allocates every slot now; fails
/// only if the kernel refuses an eventfd.
pub fn mesh(workers: usize, depth: usize, slot_bytes: usize) -> Mesh<HandoffTx> {
    let (txs, rxs) = mesh_with(workers, 1, depth, slot_bytes)?;
    Ok((txs.into_iter().flatten().collect(), rxs))
}

/// [`mesh`] with `senders` sending sides per worker (`[worker][sender]`), each with lanes of
/// its own to every other worker: for senders that run apart (each node owns its side, so
/// none is shared or locked).
pub fn mesh_with(
    workers: usize,
    senders: usize,
    depth: usize,
    slot_bytes: usize,
) -> Mesh<Vec<HandoffTx>> {
    let depth = depth.max(1);
    let workers = workers.min(64);
    let mut txs: Vec<Vec<HandoffTx>> = (0..workers)
        .map(|me| {
            (0..senders)
                .map(|_| HandoffTx {
                    me,
                    lanes: (0..workers).map(|_| None).collect(),
                    slot_bytes,
                    sent_to: 0,
                })
                .collect()
        })
        .collect();
    let mut rxs: Vec<HandoffRx> = (0..workers)
        .map(|_| {
            Ok(HandoffRx {
                inboxes: Vec::with_capacity(workers.saturating_sub(1) * senders),
                next: 0,
                bell: Arc::new(Doorbell::new()?),
            })
        })
        .collect::<std::io::Result<_>>()?;
    for (from, sides) in txs.iter_mut().enumerate() {
        for tx in sides.iter_mut() {
            for (to, rx) in rxs.iter_mut().enumerate() {
                if from == to {
                    continue;
                }
                let (full_tx, full_rx) = RingBuffer::<Slot>::new(depth);
                let (mut empty_tx, empty_rx) = RingBuffer::<Slot>::new(depth);
                for _ in 0..depth {
                    let slot = Slot {
                        port: 0,
                        flags: 0,
                        data: Vec::with_capacity(slot_bytes),
                    };
                    // Cannot fail: the ring has room for `depth` slots.
                    let _ = empty_tx.push(slot);
                }
                if let Some(l) = tx.lanes.get_mut(to) {
                    *l = Some(Lane {
                        full: full_tx,
                        empty: empty_rx,
                        bell: rx.bell.clone(),
                    });
                }
                rx.inboxes.push(Inbox {
                    full: full_rx,
                    empty: empty_tx,
                });
            }
        }
    }
    Ok((txs, rxs))
}

impl HandoffTx {
    /// The worker this side belongs to.
    pub fn worker(&self) -> usize {
        self.me
    }

    /// Workers in the mesh.
    pub fn workers(&self) -> usize {
        self.lanes.len()
    }

    /// Copy `frame` (from its Ethernet header), received on `port`, to worker `to`,
    /// carrying `flags`. Never waits, never allocates.
    #[inline]
    pub fn send(
        &mut self,
        to: usize,
        port: u16,
        flags: u16,
        frame: &[u8],
    ) -> Result<(), SendError> {
        if frame.len() > self.slot_bytes {
            return Err(SendError::TooBig);
        }
        let Some(Some(lane)) = self.lanes.get_mut(to) else {
            return Err(SendError::NoLane);
        };
        // A slot is either in `empty` (ours to fill), in `full`, or with the owner, which
        // pushes it back to `empty` once copied out: `full` has room for every slot.
        let Ok(mut slot) = lane.empty.pop() else {
            return Err(SendError::Full);
        };
        slot.port = port;
        slot.flags = flags;
        slot.data.clear();
        // Within the capacity checked above: no allocation.
        slot.data.extend_from_slice(frame);
        match lane.full.push(slot) {
            Ok(()) => {
                self.sent_to |= 1 << (to % 64);
                Ok(())
            }
            // Not reachable (see above); the slot is then lost to this lane, not leaked.
            Err(_) => Err(SendError::Full),
        }
    }

    /// Wake the workers frames went to since the last call, those of them asleep (once
    /// per batch: a system call only for a sleeping owner).
    pub fn ring(&mut self) {
        let mut m = std::mem::take(&mut self.sent_to);
        while m != 0 {
            let to = m.trailing_zeros() as usize;
            m &= m - 1;
            if let Some(Some(lane)) = self.lanes.get(to) {
                lane.bell.ring_if_asleep();
            }
        }
    }
}

impl HandoffRx {
    /// Frames waiting, over all lanes.
    pub fn pending(&self) -> usize {
        self.inboxes.iter().map(|i| i.full.slots()).sum()
    }

    /// The doorbell the worker polls while it sleeps (readable once rung).
    pub fn wait_fd(&self) -> RawFd {
        self.bell.fd.as_raw_fd()
    }

    /// The worker is about to sleep: true if it may (nothing waits), and then senders ring
    /// its doorbell until [`HandoffRx::woke`].
    pub fn may_sleep(&self) -> bool {
        self.bell.asleep.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.pending() > 0 {
            self.bell.asleep.store(false, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// The worker is awake again: no more rings; the doorbell is emptied.
    pub fn woke(&self) {
        self.bell.asleep.store(false, Ordering::Relaxed);
        let mut n: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64 from our non-blocking eventfd;
        // EAGAIN (not rung) is the usual answer.
        let _ = unsafe {
            libc::read(
                self.bell.fd.as_raw_fd(),
                (&mut n as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }

    /// Take up to `max` waiting frames (at most the vector's room) into `mem`, appended to
    /// `v` as received frames, marked [`F_HANDED_OFF`]; lanes are served round robin.
    pub fn receive<M: PacketMemory + ?Sized>(
        &mut self,
        mem: &mut M,
        v: &mut Vector,
        max: usize,
    ) -> Received {
        let mut got = Received::default();
        let n = self.inboxes.len();
        if n == 0 {
            return got;
        }
        let max = max.min(VECTOR_SIZE.saturating_sub(v.len));
        let start = self.next % n;
        for k in 0..n {
            let inbox = &mut self.inboxes[(start + k) % n];
            while got.frames + got.no_buffer < max {
                let Ok(slot) = inbox.full.pop() else { break };
                match load(mem, &slot.data) {
                    Some(buf) => {
                        let mut p =
                            Pkt::new(buf, HEADROOM as u16, slot.data.len() as u16, slot.port);
                        p.flags = slot.flags | F_HANDED_OFF;
                        if v.push(p) {
                            got.frames += 1;
                        } else {
                            // Not reachable: `max` is within the vector's room.
                            mem.free(buf);
                            got.no_buffer += 1;
                        }
                    }
                    None => got.no_buffer += 1,
                }
                // Cannot fail: `empty` has room for every slot of the lane.
                let _ = inbox.empty.push(slot);
            }
        }
        self.next = (start + 1) % n;
        got
    }
}

/// A frame of `mem` holding `data` after the headroom.
fn load<M: PacketMemory + ?Sized>(mem: &mut M, data: &[u8]) -> Option<u32> {
    let buf = mem.alloc_for(data.len())?;
    match mem.frame_mut(buf).get_mut(HEADROOM..HEADROOM + data.len()) {
        Some(d) => {
            d.copy_from_slice(data);
            Some(buf)
        }
        None => {
            mem.free(buf);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::{pkt_bytes, Arena, F_CSUM_UNKNOWN};

    fn frame(tag: u8, len: usize) -> Vec<u8> {
        (0..len).map(|i| tag.wrapping_add(i as u8)).collect()
    }

    #[test]
    fn frames_reach_their_worker_in_order_with_their_port_and_flags() {
        let (mut tx, mut rx) = mesh(3, 4, 2048).unwrap();
        assert_eq!(tx[1].worker(), 1);
        assert_eq!(tx[1].workers(), 3);
        tx[0].send(2, 7, F_CSUM_UNKNOWN, &frame(1, 60)).unwrap();
        tx[0].send(2, 8, 0, &frame(2, 1514)).unwrap();
        tx[1].send(2, 9, 0, &frame(3, 64)).unwrap();
        assert_eq!(tx[0].send(0, 0, 0, &frame(4, 64)), Err(SendError::NoLane));
        assert_eq!(tx[0].send(5, 0, 0, &frame(4, 64)), Err(SendError::NoLane));
        assert_eq!(rx[2].pending(), 3);
        assert_eq!(rx[0].pending() + rx[1].pending(), 0);
        let mut mem = Arena::new(64);
        let mut v = Vector::default();
        let got = rx[2].receive(&mut mem, &mut v, 256);
        assert_eq!(
            got,
            Received {
                frames: 3,
                no_buffer: 0
            }
        );
        let seen: Vec<(u16, u16, Vec<u8>)> = v
            .as_slice()
            .iter()
            .map(|p| (p.rx_port, p.flags, pkt_bytes(&mem, p).to_vec()))
            .collect();
        // Worker 0's lane first (round robin starts there), in its order.
        assert_eq!(seen[0], (7, F_CSUM_UNKNOWN | F_HANDED_OFF, frame(1, 60)));
        assert_eq!(seen[1], (8, F_HANDED_OFF, frame(2, 1514)));
        assert_eq!(seen[2], (9, F_HANDED_OFF, frame(3, 64)));
        assert_eq!(rx[2].pending(), 0);
    }

    #[test]
    fn each_sending_side_has_lanes_of_its_own() {
        let (mut txs, mut rx) = mesh_with(2, 2, 1, 128).unwrap();
        let [a, b] = &mut txs[0][..] else { panic!() };
        a.send(1, 1, 0, &frame(1, 60)).unwrap();
        assert_eq!(a.send(1, 1, 0, &frame(1, 60)), Err(SendError::Full));
        b.send(1, 2, 0, &frame(2, 60)).unwrap();
        let mut mem = Arena::new(16);
        let mut v = Vector::default();
        assert_eq!(rx[1].receive(&mut mem, &mut v, 256).frames, 2);
        assert_eq!(rx[0].pending(), 0);
    }

    #[test]
    #[cfg_attr(miri, ignore = "poll(2) is not interpreted by Miri")]
    fn a_sleeping_owner_is_rung_once_frames_come_and_only_then() {
        let (mut tx, rx) = mesh(2, 4, 128).unwrap();
        let readable = |rx: &HandoffRx| {
            let mut p = libc::pollfd {
                fd: rx.wait_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one live pollfd, no wait.
            unsafe { libc::poll(&mut p, 1, 0) == 1 }
        };
        // Awake: no ring.
        tx[0].send(1, 0, 0, &frame(0, 60)).unwrap();
        tx[0].ring();
        assert!(!readable(&rx[1]));
        // Frames wait: it may not sleep.
        assert!(!rx[1].may_sleep());
        let mut mem = Arena::new(16);
        let mut v = Vector::default();
        let mut rx = rx;
        assert_eq!(rx[1].receive(&mut mem, &mut v, 256).frames, 1);
        // Nothing waits: it sleeps, and the next batch rings it.
        assert!(rx[1].may_sleep());
        tx[0].ring();
        assert!(!readable(&rx[1]), "no frame sent since: no ring");
        tx[0].send(1, 0, 0, &frame(1, 60)).unwrap();
        tx[0].ring();
        assert!(readable(&rx[1]));
        rx[1].woke();
        assert!(!readable(&rx[1]), "emptied");
        tx[0].send(1, 0, 0, &frame(2, 60)).unwrap();
        tx[0].ring();
        assert!(!readable(&rx[1]), "awake again: no ring");
    }

    #[test]
    fn a_full_lane_refuses_until_the_owner_takes_its_frames_and_slots_come_back() {
        let (mut tx, mut rx) = mesh(2, 2, 128).unwrap();
        assert_eq!(tx[0].send(1, 0, 0, &frame(0, 129)), Err(SendError::TooBig));
        let mut mem = Arena::new(64);
        for round in 0..100u8 {
            tx[0].send(1, 0, 0, &frame(round, 100)).unwrap();
            tx[0].send(1, 0, 0, &frame(round, 128)).unwrap();
            assert_eq!(tx[0].send(1, 0, 0, &frame(round, 60)), Err(SendError::Full));
            let mut v = Vector::default();
            assert_eq!(rx[1].receive(&mut mem, &mut v, 256).frames, 2);
            assert_eq!(pkt_bytes(&mem, &v.pkts[0]), &frame(round, 100)[..]);
            for p in v.as_slice() {
                mem.free(p.buf);
            }
        }
    }

    #[test]
    fn a_reassembled_jumbo_datagram_with_two_vlan_tags_fits_a_slot_and_a_big_frame() {
        let (mut tx, mut rx) = mesh(2, 2, SLOT_BYTES).unwrap();
        let whole = frame(7, crate::MAX_FRAME + 22);
        tx[0].send(1, 3, 0, &whole).unwrap();
        assert_eq!(
            tx[0].send(1, 3, 0, &frame(7, SLOT_BYTES + 1)),
            Err(SendError::TooBig)
        );
        let mut mem = Arena::with_big(4, 1);
        let mut v = Vector::default();
        assert_eq!(rx[1].receive(&mut mem, &mut v, 256).frames, 1);
        assert_eq!(pkt_bytes(&mem, &v.pkts[0]), &whole[..]);
    }

    #[test]
    fn receive_stops_at_max_and_at_the_vectors_room_and_counts_missing_buffers() {
        let (mut tx, mut rx) = mesh(2, 8, 256).unwrap();
        for k in 0..8 {
            tx[1].send(0, 0, 0, &frame(k, 64)).unwrap();
        }
        let mut mem = Arena::new(64);
        let mut v = Vector::default();
        assert_eq!(rx[0].receive(&mut mem, &mut v, 3).frames, 3);
        // A vector with room for two more.
        v.len = VECTOR_SIZE - 2;
        assert_eq!(rx[0].receive(&mut mem, &mut v, 256).frames, 2);
        assert_eq!(rx[0].pending(), 3);
        // No free frame: the frames are dropped and counted, their slots recycled.
        let mut full = Arena::new(1);
        while full.alloc().is_some() {}
        let mut w = Vector::default();
        assert_eq!(
            rx[0].receive(&mut full, &mut w, 256),
            Received {
                frames: 0,
                no_buffer: 3
            }
        );
        assert_eq!(w.len, 0);
        for k in 0..8 {
            tx[1].send(0, 0, 0, &frame(k, 64)).unwrap();
        }
    }

    #[test]
    fn lanes_between_threads_carry_every_frame_intact() {
        let (mut tx, mut rx) = mesh(2, 16, 1600).unwrap();
        let mut t0 = tx.remove(0);
        // Miri interprets: fewer frames, the same interleavings in kind.
        let n: u32 = if cfg!(miri) { 200 } else { 20_000 };
        let sender = std::thread::spawn(move || {
            let mut sent = 0u32;
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while sent < n && std::time::Instant::now() < deadline {
                let len = 60 + (sent as usize % 1500);
                let mut f = frame(sent as u8, len);
                f[..4].copy_from_slice(&sent.to_be_bytes());
                if t0.send(1, 0, 0, &f).is_ok() {
                    sent += 1;
                } else {
                    std::thread::yield_now();
                }
            }
            sent
        });
        let mut mem = Arena::new(256);
        let mut next = 0u32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while next < n && std::time::Instant::now() < deadline {
            let mut v = Vector::default();
            rx[1].receive(&mut mem, &mut v, 256);
            for p in v.as_slice() {
                let b = pkt_bytes(&mem, p);
                let mut want = frame(next as u8, 60 + (next as usize % 1500));
                want[..4].copy_from_slice(&next.to_be_bytes());
                assert_eq!(b, &want[..], "frame {next}");
                next += 1;
                mem.free(p.buf);
            }
            if v.len == 0 {
                std::thread::yield_now();
            }
        }
        assert_eq!(sender.join().unwrap(), n);
        assert_eq!(next, n);
    }
}
