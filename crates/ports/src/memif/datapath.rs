//! The data path of a memif port: receive and transmit on the shared rings, with every
//! peer-controlled index and descriptor checked before use. No allocation, locks, system
//! calls or logging here, except through `poll_control` when it is due or after a fault.
//!
//! A frame larger than one buffer travels as a chain: consecutive descriptors, each but
//! the last flagged `MEMIF_DESC_FLAG_NEXT` (as libmemif, VPP and DPDK's `net_memif` do).
//! Single-descriptor frames take the fast paths; chains are handled out of line.

use std::sync::atomic::Ordering;

use dataplane::buffer::{PacketMemory, Pkt, Vector, FRAME_SIZE, HEADROOM, VECTOR_SIZE};

use super::proto;
use super::shm::Desc;
use super::{Conn, Memif, MemifRole, MemifStats, CONTROL_EVERY, CONTROL_PERIOD, MAX_RX_FRAME};

/// Largest frame that fits a small frame of the packet memory after the headroom: a
/// larger one needs a big frame.
const SMALL_FRAME: usize = FRAME_SIZE - HEADROOM;

/// What became of one frame offered to the transmit ring.
enum Placed {
    /// Written to this many slots (more than one: a chain), ready to publish.
    Sent(u16),
    /// The ring has not enough free (client) or offered (server) slots for it.
    NoRoom,
    /// Our own buffer could not be written (never expected).
    Failed,
    /// The client offered an S2C buffer outside its regions: a fault.
    BadBuffer,
}

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
            if d.flags & proto::DESC_FLAG_NEXT != 0 {
                match c.rx_chain(&mut self.stats, mem, v, self.port_id, slot, end) {
                    Some(next) => {
                        slot = next;
                        continue;
                    }
                    // Incomplete, or no free frame: it stays in the ring.
                    None => break,
                }
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
            let Some(buf) = mem.alloc_for(len) else {
                if len <= SMALL_FRAME {
                    // Leave the frame in the ring; the peer sees backpressure.
                    self.stats.rx_no_buffer += 1;
                    break;
                }
                // No big frame free (or none in this memory at all: waiting could block
                // the ring for good). Dropped.
                self.stats.rx_dropped_no_big_frame += 1;
                slot = slot.wrapping_add(1);
                continue;
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
        // refused, the rest of the burst is dropped too; after one frame found no room
        // (a chain may need more slots than are left), the ring counts as full.
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
            let placed = if client {
                if len <= c.bsize as usize {
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
                        Placed::Sent(1)
                    } else {
                        Placed::Failed
                    }
                } else {
                    c.tx_chain_client(src, slot, room)
                }
            } else {
                let d = c.tx.desc(slot);
                if len <= d.length as usize {
                    let written = c
                        .regions
                        .get(usize::from(d.region))
                        .and_then(|r| r.span(d.offset, len as u32))
                        .is_some_and(|s| s.write_from(src));
                    if written {
                        c.tx.set_len_flags(slot, d, len as u32, 0);
                        Placed::Sent(1)
                    } else {
                        Placed::BadBuffer
                    }
                } else {
                    // The client's buffer is smaller than the frame: chain it over the
                    // next offered buffers.
                    c.tx_chain_server(src, slot, room)
                }
            };
            match placed {
                Placed::Sent(n) => {
                    if n > 1 {
                        self.stats.tx_chained += 1;
                    }
                    slot = slot.wrapping_add(n);
                    room -= n;
                    sent += 1;
                    self.stats.tx_bytes += len as u64;
                }
                Placed::NoRoom => {
                    self.stats.tx_dropped_ring_full += 1;
                    room = 0;
                }
                Placed::Failed => {
                    self.stats.tx_dropped_disconnected += 1;
                    refused = true;
                }
                Placed::BadBuffer => {
                    // The client offered memory outside its regions: nothing sensible
                    // can be done with that slot.
                    self.stats.bad_descriptors += 1;
                    self.fault = Some("peer offered an S2C buffer outside its regions");
                    self.stats.tx_dropped_disconnected += 1;
                    refused = true;
                }
            }
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

    /// The chained frame whose first descriptor is at `first` (flagged NEXT), with the
    /// producer's published slots ending at `end`: gathered into one frame of `mem` and
    /// pushed on `v` (which has room), or dropped and counted. Returns the slot after
    /// the chain once it is consumed either way, or `None` to leave it in the ring: its
    /// last descriptor is not published yet, or no small frame is free (backpressure, as
    /// for single descriptors).
    ///
    /// Producers publish a chain's slots together (DPDK and VPP write every descriptor of
    /// a burst, then move the index once, and never publish part of a chain), but nothing
    /// relies on it: an incomplete chain waits for the rest, unless it already fills the
    /// ring, when it never can be completed and is dropped whole. Every descriptor is
    /// checked before a byte is copied, and read again and checked again when copying
    /// (the peer may rewrite them meanwhile): lengths must add up to the frame allocated.
    #[cold]
    #[inline(never)]
    fn rx_chain<M: PacketMemory>(
        &self,
        stats: &mut MemifStats,
        mem: &mut M,
        v: &mut Vector,
        port_id: u16,
        first: u16,
        end: u16,
    ) -> Option<u16> {
        // Walk the chain (at most the published slots, so at most the ring size): its
        // length, its total and whether every descriptor names memory of the peer's.
        let mut next = first;
        let mut total = 0u64;
        let mut bad = 0u64;
        let complete = loop {
            if next == end {
                break false;
            }
            let d = self.rx.desc(next);
            next = next.wrapping_add(1);
            if self.rx_span(d).is_none() {
                bad += 1;
            }
            total += u64::from(d.length);
            if d.flags & proto::DESC_FLAG_NEXT == 0 {
                break true;
            }
        };
        if !complete {
            if end.wrapping_sub(first) < self.rx.size() {
                // Once we hand back the slots before it, the producer has room to finish it.
                return None;
            }
            // The chain fills the whole ring and does not end: it never can.
            stats.bad_descriptors += bad;
            stats.rx_dropped_chained += 1;
            return Some(self.rx_consumed(first, end));
        }
        if bad > 0 {
            stats.bad_descriptors += bad;
            stats.rx_dropped_chained += 1;
            return Some(self.rx_consumed(first, next));
        }
        if total > MAX_RX_FRAME as u64 {
            stats.rx_dropped_too_big += 1;
            return Some(self.rx_consumed(first, next));
        }
        let len = total as usize;
        let Some(buf) = mem.alloc_for(len) else {
            if len <= SMALL_FRAME {
                stats.rx_no_buffer += 1;
                return None;
            }
            stats.rx_dropped_no_big_frame += 1;
            return Some(self.rx_consumed(first, next));
        };
        let gathered = match mem.frame_mut(buf).get_mut(HEADROOM..HEADROOM + len) {
            Some(dst) => self.gather(first, next, dst),
            None => false,
        };
        if !gathered {
            // Rewritten by the peer since the walk.
            mem.free(buf);
            stats.bad_descriptors += 1;
            stats.rx_dropped_chained += 1;
            return Some(self.rx_consumed(first, next));
        }
        v.push(Pkt::new(buf, HEADROOM as u16, len as u16, port_id));
        stats.rx_packets += 1;
        stats.rx_bytes += len as u64;
        stats.rx_chained += 1;
        Some(self.rx_consumed(first, next))
    }

    /// Receive slots `first..end` (a chain) are consumed: clear their flags before they
    /// go back to the producer, and return `end`. DPDK's `net_memif` in copy mode (22.11,
    /// as tested, and its current sources) only ever *sets* NEXT on the C2S descriptors
    /// it transmits on, never clears it: a slot that once carried a part of a chain other
    /// than the last would glue the single frame it carries next to the one after it,
    /// once the ring wraps. Only chains' slots can carry the flag, so the
    /// single-descriptor path pays nothing. (Our own S2C refill rewrites whole
    /// descriptors anyway.)
    fn rx_consumed(&self, first: u16, end: u16) -> u16 {
        let mut s = first;
        while s != end {
            let d = self.rx.desc(s);
            if d.flags != 0 {
                self.rx.set_len_flags(s, d, d.length, 0);
            }
            s = s.wrapping_add(1);
        }
        end
    }

    /// The bytes a receive descriptor names, if they lie inside one of the peer's
    /// regions.
    #[inline]
    fn rx_span(&self, d: Desc) -> Option<super::shm::Span<'_>> {
        self.regions
            .get(usize::from(d.region))
            .and_then(|r| r.span(d.offset, d.length))
    }

    /// Copy the buffers of receive slots `first..end` (a walked chain) one after the other
    /// into `dst`; true when every descriptor was valid and they filled `dst` exactly.
    fn gather(&self, first: u16, end: u16, dst: &mut [u8]) -> bool {
        let mut at = 0usize;
        let mut s = first;
        while s != end {
            let d = self.rx.desc(s);
            s = s.wrapping_add(1);
            let piece = dst
                .get_mut(at..)
                .and_then(|rest| rest.get_mut(..d.length as usize));
            let (Some(piece), Some(span)) = (piece, self.rx_span(d)) else {
                return false;
            };
            if !span.read_into(piece) {
                return false;
            }
            at += d.length as usize;
        }
        at == dst.len()
    }

    /// Client: write the frame `src`, longer than one buffer, into our C2S buffers at
    /// consecutive slots from `first` (`room` are free), all but the last descriptor
    /// flagged NEXT.
    #[cold]
    #[inline(never)]
    fn tx_chain_client(&self, src: &[u8], first: u16, room: u16) -> Placed {
        let bsize = self.bsize as usize;
        let Some(region) = self.regions.first() else {
            return Placed::Failed;
        };
        if bsize == 0 {
            return Placed::Failed;
        }
        let pieces = src.len().div_ceil(bsize);
        if pieces > usize::from(room) {
            return Placed::NoRoom;
        }
        let mask = self.tx.size() - 1;
        for (j, chunk) in src.chunks(bsize).enumerate() {
            let slot = first.wrapping_add(j as u16);
            let boff = self.tx_bufs + u32::from(slot & mask) * self.bsize;
            let written = region
                .span(boff, chunk.len() as u32)
                .is_some_and(|s| s.write_from(chunk));
            if !written {
                return Placed::Failed;
            }
            let flags = if j + 1 < pieces {
                proto::DESC_FLAG_NEXT
            } else {
                0
            };
            self.tx.set_desc(
                slot,
                Desc {
                    flags,
                    region: 0,
                    length: chunk.len() as u32,
                    offset: boff,
                },
            );
        }
        Placed::Sent(pieces as u16)
    }

    /// Server: write the frame `src`, longer than the buffer offered at `first`, into the
    /// buffers the client offered at consecutive slots from `first` (`room` are offered),
    /// each filled up to its offered length, all but the last descriptor flagged NEXT (as
    /// DPDK's `net_memif` does). Nothing is published here: a frame that does not fit the
    /// offered slots leaves them as they were offered (full pieces keep their length).
    #[cold]
    #[inline(never)]
    fn tx_chain_server(&self, src: &[u8], first: u16, room: u16) -> Placed {
        let mut at = 0usize;
        for j in 0..room {
            let slot = first.wrapping_add(j);
            let d = self.tx.desc(slot);
            let n = (d.length as usize).min(src.len() - at);
            let Some(chunk) = src.get(at..at + n) else {
                return Placed::Failed;
            };
            let written = self
                .regions
                .get(usize::from(d.region))
                .and_then(|r| r.span(d.offset, n as u32))
                .is_some_and(|s| s.write_from(chunk));
            if !written {
                return Placed::BadBuffer;
            }
            at += n;
            let last = at == src.len();
            let flags = if last { 0 } else { proto::DESC_FLAG_NEXT };
            self.tx.set_len_flags(slot, d, n as u32, flags);
            if last {
                return Placed::Sent(j + 1);
            }
        }
        Placed::NoRoom
    }
}
