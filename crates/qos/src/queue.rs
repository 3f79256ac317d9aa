//! A bounded FIFO of packets, preallocated: pushing into a full one is a tail drop, never
//! an allocation.

use std::collections::VecDeque;

/// A queued packet: what the caller queued (a buffer), its length and when it came.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<T> {
    /// The caller's packet.
    pub item: T,
    /// Its length in bytes (what the shapers charge).
    pub len: u32,
    /// When it was queued, in ns.
    pub enq_ns: u64,
}

/// A FIFO of at most `limit` packets.
#[derive(Debug)]
pub struct Fifo<T> {
    q: VecDeque<Entry<T>>,
    limit: usize,
    bytes: u64,
}

impl<T> Fifo<T> {
    /// An empty FIFO with room for `limit` packets, allocated now.
    pub fn new(limit: usize) -> Fifo<T> {
        Fifo {
            q: VecDeque::with_capacity(limit),
            limit,
            bytes: 0,
        }
    }

    /// Queue `e`, or hand it back when the FIFO is full.
    #[inline]
    pub fn push(&mut self, e: Entry<T>) -> Result<(), Entry<T>> {
        if self.q.len() >= self.limit {
            return Err(e);
        }
        self.bytes += u64::from(e.len);
        self.q.push_back(e);
        Ok(())
    }

    /// The oldest packet.
    #[inline]
    pub fn pop(&mut self) -> Option<Entry<T>> {
        let e = self.q.pop_front()?;
        self.bytes -= u64::from(e.len);
        Some(e)
    }

    /// The length of the oldest packet.
    #[inline]
    pub fn head_len(&self) -> Option<u32> {
        self.q.front().map(|e| e.len)
    }

    /// Packets queued.
    #[inline]
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// Whether none is queued.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Bytes queued.
    #[inline]
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Its limit in packets.
    pub fn limit(&self) -> usize {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_fifo_hands_packets_back_and_never_grows() {
        let mut f = Fifo::new(2);
        let cap = f.q.capacity();
        let e = |i| Entry {
            item: i,
            len: 100,
            enq_ns: 0,
        };
        assert!(f.push(e(1)).is_ok());
        assert!(f.push(e(2)).is_ok());
        assert_eq!(f.push(e(3)), Err(e(3)));
        assert_eq!((f.len(), f.bytes()), (2, 200));
        assert_eq!(f.pop().map(|e| e.item), Some(1));
        assert!(f.push(e(4)).is_ok());
        assert_eq!(f.q.capacity(), cap);
        assert_eq!(f.pop().map(|e| e.item), Some(2));
        assert_eq!(f.pop().map(|e| e.item), Some(4));
        assert_eq!((f.pop(), f.bytes()), (None, 0));
    }
}
