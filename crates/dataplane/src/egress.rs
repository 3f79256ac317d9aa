//! The egress hook: what holds packets between the graph and a port's transmit (a QoS
//! scheduler), as a feature arc holds nodes: the engine calls it and does not know what it
//! is.
//!
//! [`crate::worker::flush`] hands each port's transmit list to the graph's [`Egress`]
//! (if it has one and it takes the port) before sending it. The hook may take packets out
//! of the list and keep them, *owning their buffers* until it puts them back in a later
//! list (sent) or in the free list (dropped): buffers are the worker's packet memory, and
//! the hook belongs to the worker, so ownership never crosses a thread. While it holds
//! packets, the worker's loop calls [`crate::worker::flush`] on every iteration, with
//! empty lists if nothing arrived, so that held packets leave when their time comes.

use crate::buffer::{PacketMemory, Pkt};

/// A worker's egress hook. Runs on the hot path: it must not allocate, lock, block, log
/// or panic.
pub trait Egress: Send {
    /// Whether it takes port `port`'s packets (ports it does not take are sent as they are).
    fn takes(&self, port: u16) -> bool;
    /// `list` holds what the graph sends to `port` now. Take from it what must wait (keep
    /// those buffers), put in it what may leave at `now_ns` (at most its spare capacity:
    /// it never grows), and give the buffers of packets it drops back to `mem`.
    fn schedule(&mut self, port: u16, list: &mut Vec<Pkt>, mem: &mut dyn PacketMemory, now_ns: u64);
    /// Packets it holds now, on every port.
    fn held(&self) -> usize;
    /// Between vectors: follow a new configuration, if the control thread published one,
    /// giving back to `mem` the buffers of packets it no longer holds (a port's scheduler
    /// removed). Called once per loop iteration.
    fn update(&mut self, mem: &mut dyn PacketMemory) {
        let _ = mem;
    }
}
