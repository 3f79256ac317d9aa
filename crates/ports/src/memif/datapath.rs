//! The data path of a memif port: receive and transmit on the shared rings, with every
//! peer-controlled index and descriptor checked before use. No allocation, locks, system
//! calls or logging here, except through `poll_control` when it is due or after a fault.

use std::sync::atomic::Ordering;

use dataplane::buffer::{PacketMemory, Pkt, Vector, HEADROOM, VECTOR_SIZE};

use super::proto;
use super::shm::Desc;
use super::{Conn, Memif, MemifRole, CONTROL_EVERY, CONTROL_PERIOD, MAX_RX_FRAME};

impl Memif {
    /// Run the control path when due. Cheap: a counter, and a clock read every
    /// `CONTROL_EVERY` calls.
    #[inline]
    pub(super) fn tick(&mut self) {
        self.calls = self.calls.wrapping_add(1);
        let due =
            self.calls & (CONTROL_EVERY - 1) == 0 && self.last_control.elapsed() >= CONTROL_PERIOD;
        if self.fault.is_some() || due {
            self.poll_control();
        }
    }

    #[inline]
    pub(super) fn rx_ring<M: PacketMemory>(&mut self, mem: &mut M, v: &mut Vector) -> usize {
        if self.fault.is_some() {
            return 0;
        }
        let Some(c) = self.conn.as_mut() else {
            return 0;
        };
        let client = self.opts.role == MemifRole::Client;
        let size = c.rx.size();
        // The producer's index: C2S head (client produces) or S2C tail (server produces).
        let avail = if client {
            let tail = c.rx.tail().load(Ordering::Acquire);
            let avail = tail.wrapping_sub(c.rx_next);
            if avail > c.rx_head.wrapping_sub(c.rx_next) {
                self.stats.ring_errors += 1;
                self.fault = Some("peer filled more S2C slots than were offered");
                return 0;
            }
            avail
        } else {
            let head = c.rx.head().load(Ordering::Acquire);
            let avail = head.wrapping_sub(c.rx_next);
            if avail > size {
                self.stats.ring_errors += 1;
                self.fault = Some("peer moved the C2S head past the ring size");
                return 0;
            }
            avail
        };
        let before = v.len;
        let mut slot = c.rx_next;
        let end = slot.wrapping_add(avail);
        while slot != end && v.len < VECTOR_SIZE {
            let d = c.rx.desc(slot);
            let chained = d.flags & proto::DESC_FLAG_NEXT != 0;
            if c.rx_chain || chained {
                // Drop a chained frame whole: its first descriptor counts it, the rest
                // are skipped up to and including the one without NEXT.
                if !c.rx_chain {
                    self.stats.rx_dropped_chained += 1;
                }
                c.rx_chain = chained;
                slot = slot.wrapping_add(1);
                continue;
            }
            let span = c
                .regions
                .get(usize::from(d.region))
                .and_then(|r| r.span(d.offset, d.length));
            let Some(span) = span else {
                self.stats.bad_descriptors += 1;
                slot = slot.wrapping_add(1);
                continue;
            };
            let len = d.length as usize;
            if len > MAX_RX_FRAME {
                self.stats.rx_dropped_too_big += 1;
                slot = slot.wrapping_add(1);
                continue;
            }
            let Some(buf) = mem.alloc() else {
                // Leave the frame in the ring; the peer sees backpressure.
                self.stats.rx_no_buffer += 1;
                break;
            };
            let copied = match mem.frame_mut(buf).get_mut(HEADROOM..HEADROOM + len) {
                Some(dst) => span.read_into(dst),
                None => false,
            };
            if !copied {
                mem.free(buf);
                self.stats.rx_dropped_too_big += 1;
                slot = slot.wrapping_add(1);
                continue;
            }
            v.push(Pkt::new(buf, HEADROOM as u16, len as u16, self.port_id));
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += len as u64;
            slot = slot.wrapping_add(1);
        }
        if slot != c.rx_next {
            c.rx_next = slot;
            if client {
                c.refill();
            } else {
                c.rx.tail().store(slot, Ordering::Release);
            }
        }
        v.len - before
    }

    #[inline]
    pub(super) fn tx_ring<M: PacketMemory>(&mut self, mem: &mut M, pkts: &[Pkt]) -> usize {
        let conn = if self.fault.is_some() {
            None
        } else {
            self.conn.as_mut()
        };
        let Some(c) = conn else {
            self.stats.tx_dropped_disconnected += pkts.len() as u64;
            for p in pkts {
                mem.free(p.buf);
            }
            return 0;
        };
        let client = self.opts.role == MemifRole::Client;
        let size = c.tx.size();
        let mut room = if client {
            // C2S: we produce at head; the server consumes up to tail.
            let tail = c.tx.tail().load(Ordering::Acquire);
            let used = c.tx_next.wrapping_sub(tail);
            if used > size {
                self.stats.ring_errors += 1;
                self.fault = Some("peer moved the C2S tail past our head");
                0
            } else {
                size - used
            }
        } else {
            // S2C: the client offers buffers up to head; we produce at tail.
            let head = c.tx.head().load(Ordering::Acquire);
            let offered = head.wrapping_sub(c.tx_next);
            if offered > size {
                self.stats.ring_errors += 1;
                self.fault = Some("peer moved the S2C head past the ring size");
                0
            } else {
                offered
            }
        };
        let mut slot = c.tx_next;
        let mut sent = 0usize;
        // The frames sent are always a prefix of `pkts` (the `Port::tx_burst` contract: the
        // tester reuses the sequence numbers of the unsent tail): after one frame is
        // refused, the rest of the burst is dropped too.
        let mut refused = false;
        for p in pkts {
            if self.fault.is_some() {
                self.stats.tx_dropped_disconnected += 1;
                continue;
            }
            if refused {
                self.stats.tx_dropped_after_refusal += 1;
                continue;
            }
            if room == 0 {
                self.stats.tx_dropped_ring_full += 1;
                continue;
            }
            let (off, len) = (p.off as usize, p.len as usize);
            let Some(src) = mem.frame(p.buf).get(off..off + len) else {
                self.stats.tx_dropped_too_big += 1;
                refused = true;
                continue;
            };
            let ok = if client {
                if len > c.bsize as usize {
                    self.stats.tx_dropped_too_big += 1;
                    refused = true;
                    continue;
                }
                let boff = c.tx_bufs + u32::from(slot & (size - 1)) * c.bsize;
                let written = c
                    .regions
                    .first()
                    .and_then(|r| r.span(boff, len as u32))
                    .is_some_and(|s| s.write_from(src));
                if written {
                    c.tx.set_desc(
                        slot,
                        Desc {
                            flags: 0,
                            region: 0,
                            length: len as u32,
                            offset: boff,
                        },
                    );
                }
                written
            } else {
                let d = c.tx.desc(slot);
                if len > d.length as usize {
                    // The client's buffer is too small for this frame.
                    self.stats.tx_dropped_too_big += 1;
                    refused = true;
                    continue;
                }
                let written = c
                    .regions
                    .get(usize::from(d.region))
                    .and_then(|r| r.span(d.offset, len as u32))
                    .is_some_and(|s| s.write_from(src));
                if written {
                    c.tx.set_len_flags(slot, d, len as u32, 0);
                } else {
                    // The client offered memory outside its regions: nothing sensible
                    // can be done with that slot.
                    self.stats.bad_descriptors += 1;
                    self.fault = Some("peer offered an S2C buffer outside its regions");
                }
                written
            };
            if !ok {
                self.stats.tx_dropped_disconnected += 1;
                refused = true;
                continue;
            }
            slot = slot.wrapping_add(1);
            room -= 1;
            sent += 1;
            self.stats.tx_bytes += len as u64;
        }
        if sent > 0 {
            c.tx_next = slot;
            if client {
                c.tx.head().store(slot, Ordering::Release);
            } else {
                c.tx.tail().store(slot, Ordering::Release);
            }
        }
        self.stats.tx_packets += sent as u64;
        for p in pkts {
            mem.free(p.buf);
        }
        sent
    }
}

impl Conn {
    /// Client: offer every consumed S2C slot back to the server as an empty buffer and
    /// publish `head`.
    #[inline]
    pub(super) fn refill(&mut self) {
        let size = self.rx.size();
        let outstanding = self.rx_head.wrapping_sub(self.rx_next);
        let want = size.saturating_sub(outstanding);
        if want == 0 {
            return;
        }
        for _ in 0..want {
            let slot = self.rx_head;
            self.rx.set_desc(
                slot,
                Desc {
                    flags: 0,
                    region: 0,
                    length: self.bsize,
                    offset: self.rx_bufs + u32::from(slot & (size - 1)) * self.bsize,
                },
            );
            self.rx_head = slot.wrapping_add(1);
        }
        self.rx.head().store(self.rx_head, Ordering::Release);
    }
}
