//! The punt queue: packets the fast path hands to the Linux stack (ARP/ND, the router's own
//! traffic, unresolved next hops, control multicast). Bounded single-producer single-consumer
//! ring per worker; a full ring is a counted drop, never a wait.

use crate::buffer::MAX_FRAME;
use crate::counters::Reason;

/// A copy of a punted frame. Punting is the slow path, so copying out of port memory
/// (which must go back to the port quickly) is the right trade.
pub struct PuntPacket {
    /// Ingress port.
    pub port: u16,
    /// Why it was punted.
    pub reason: Reason,
    /// Frame length.
    pub len: u16,
    /// Frame bytes (`..len`).
    pub data: [u8; MAX_FRAME],
}

impl PuntPacket {
    /// The frame bytes.
    pub fn frame(&self) -> &[u8] {
        &self.data[..(self.len as usize).min(MAX_FRAME)]
    }
}

/// Producer side, owned by a worker.
pub type PuntProducer = rtrb::Producer<PuntPacket>;
/// Consumer side, owned by the control thread (or the Linux injector).
pub type PuntConsumer = rtrb::Consumer<PuntPacket>;

/// A punt queue holding up to `capacity` frames.
pub fn queue(capacity: usize) -> (PuntProducer, PuntConsumer) {
    rtrb::RingBuffer::new(capacity)
}
