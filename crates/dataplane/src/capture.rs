//! Packet capture on a port: the worker copies frames (up to a snap length) received on it
//! right after `rx_burst`, or about to be sent on it right before `tx_burst`, into
//! fixed-size records of an SPSC queue the control side drains into pcap.
//!
//! Forwarding is never disturbed beyond the copy: a full queue is a counted loss
//! ([`CaptureShared::dropped`]), never a wait. Idle, the cost is one relaxed load and
//! branch per burst.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::arm::{ArmReceiver, ArmSender};
use crate::buffer::{PacketMemory, Pkt, FRAME_SIZE};

/// Which way the captured packets go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Received on the port.
    Rx,
    /// Sent on the port.
    Tx,
    /// Both.
    Both,
}

impl Direction {
    fn has_rx(self) -> bool {
        matches!(self, Direction::Rx | Direction::Both)
    }
    fn has_tx(self) -> bool {
        matches!(self, Direction::Tx | Direction::Both)
    }
}

/// A request from the control side.
#[derive(Clone, Copy, Debug)]
pub struct CaptureArm {
    /// Session number, echoed in every record (stale records are recognised).
    pub session: u32,
    /// Port to capture on.
    pub port: u16,
    /// Which direction(s).
    pub dir: Direction,
    /// Packets to capture on this worker; 0 stops.
    pub count: u32,
    /// Bytes kept per frame.
    pub snaplen: u16,
}

/// One captured frame.
pub struct CaptureRecord {
    /// Session it belongs to.
    pub session: u32,
    /// Wall-clock time, ns since the Unix epoch (read once per burst).
    pub ts_ns: u64,
    /// Port.
    pub port: u16,
    /// `Rx` or `Tx`.
    pub dir: Direction,
    /// Frame length on the wire.
    pub orig_len: u16,
    /// Bytes kept in `data`.
    pub cap_len: u16,
    /// Frame bytes (`..cap_len`).
    pub data: [u8; FRAME_SIZE],
}

impl CaptureRecord {
    /// The captured bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.data[..(self.cap_len as usize).min(FRAME_SIZE)]
    }
}

/// What worker and control side share about one worker's capturer.
#[derive(Default)]
pub struct CaptureShared {
    /// Frames not captured because the queue was full.
    pub dropped: AtomicU64,
}

/// Worker side: owned by the graph, fed by [`crate::worker::poll_once`].
pub struct Capturer {
    shared: Arc<CaptureShared>,
    cmds: ArmReceiver<CaptureArm>,
    records_out: rtrb::Producer<CaptureRecord>,
    active: CaptureArm,
}

/// Control side of one worker's capturer.
pub struct CaptureHandle {
    /// Shared flag and loss counter.
    pub shared: Arc<CaptureShared>,
    cmds: ArmSender<CaptureArm>,
    records_in: rtrb::Consumer<CaptureRecord>,
}

/// A capturer and its control handle, with room for `capacity` frames in flight.
pub fn channel(capacity: usize) -> (CaptureHandle, Capturer) {
    let shared = Arc::new(CaptureShared::default());
    let (cp, cc) = crate::arm::channel();
    let (rp, rc) = rtrb::RingBuffer::new(capacity.max(1));
    (
        CaptureHandle {
            shared: shared.clone(),
            cmds: cp,
            records_in: rc,
        },
        Capturer {
            shared,
            cmds: cc,
            records_out: rp,
            active: CaptureArm {
                session: 0,
                port: 0,
                dir: Direction::Both,
                count: 0,
                snaplen: 0,
            },
        },
    )
}

impl CaptureHandle {
    /// Start (or with `count` 0, stop) capturing on the worker.
    pub fn arm(&mut self, req: CaptureArm) -> Result<(), &'static str> {
        self.cmds
            .send(req, "worker has not taken its previous capture request")
    }
    /// The next captured frame, if any.
    pub fn pop(&mut self) -> Option<CaptureRecord> {
        self.records_in.pop().ok()
    }
}

impl Capturer {
    /// Once per burst: take requests; true if capturing.
    #[inline]
    pub fn armed(&mut self) -> bool {
        if !self.cmds.raised() {
            return false;
        }
        self.take_requests()
    }

    #[cold]
    fn take_requests(&mut self) -> bool {
        while let Some(req) = self.cmds.next() {
            self.active = req;
        }
        self.cmds.settle(self.active.count != 0)
    }

    /// Frames just received on `port` (call only when [`Capturer::armed`]).
    #[cold]
    pub fn rx<M: PacketMemory>(&mut self, port: u16, mem: &M, pkts: &[Pkt]) {
        if self.active.port == port && self.active.dir.has_rx() {
            self.copy(Direction::Rx, port, mem, pkts);
        }
    }

    /// Frames about to be sent on `port` (call only when [`Capturer::armed`]).
    #[cold]
    pub fn tx<M: PacketMemory>(&mut self, port: u16, mem: &M, pkts: &[Pkt]) {
        if self.active.port == port && self.active.dir.has_tx() {
            self.copy(Direction::Tx, port, mem, pkts);
        }
    }

    fn copy<M: PacketMemory>(&mut self, dir: Direction, port: u16, mem: &M, pkts: &[Pkt]) {
        let ts_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        for p in pkts {
            if self.active.count == 0 {
                return;
            }
            let bytes = crate::buffer::pkt_bytes(mem, p);
            let keep = bytes.len().min(self.active.snaplen as usize);
            if self.records_out.is_full() {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let mut r = CaptureRecord {
                session: self.active.session,
                ts_ns,
                port,
                dir,
                orig_len: bytes.len() as u16,
                cap_len: keep as u16,
                data: [0; FRAME_SIZE],
            };
            r.data[..keep].copy_from_slice(&bytes[..keep]);
            if self.records_out.push(r).is_ok() {
                self.active.count -= 1;
            } else {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::Arena;

    #[test]
    fn records_what_is_offered_up_to_the_count() {
        let (mut h, mut c) = channel(8);
        let mut mem = Arena::new(8);
        let a = mem.load(&[1, 2, 3, 4], 1).unwrap();
        let b = mem.load(&[5, 6, 7], 1).unwrap();
        assert!(!c.armed());
        h.arm(CaptureArm {
            session: 7,
            port: 1,
            dir: Direction::Rx,
            count: 3,
            snaplen: 2,
        })
        .unwrap();
        assert!(c.armed());
        c.rx(0, &mem, &[a, b]); // other port
        c.tx(1, &mem, &[a, b]); // other direction
        c.rx(1, &mem, &[a, b, a]);
        c.rx(1, &mem, &[b]); // over the count
        let got: Vec<_> = std::iter::from_fn(|| h.pop()).collect();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].bytes(), &[1, 2]);
        assert_eq!(got[0].orig_len, 4);
        assert_eq!(got[1].bytes(), &[5, 6]);
        assert_eq!(got[1].session, 7);
        assert!(!c.armed(), "disarms itself once the count is reached");
    }

    #[test]
    fn full_queue_counts_instead_of_waiting() {
        let (mut h, mut c) = channel(2);
        let mut mem = Arena::new(4);
        let a = mem.load(&[1; 60], 0).unwrap();
        h.arm(CaptureArm {
            session: 1,
            port: 0,
            dir: Direction::Both,
            count: 100,
            snaplen: 2048,
        })
        .unwrap();
        assert!(c.armed());
        c.tx(0, &mem, &[a, a, a, a]);
        assert_eq!(h.shared.dropped.load(Ordering::Relaxed), 2);
        assert_eq!(h.pop().unwrap().bytes().len(), 60);
    }
}
