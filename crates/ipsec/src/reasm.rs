//! Reassembly of fragmented ESP for the router (IPv4, and IPv6 with the fragment header
//! right after the fixed header).
//!
//! A peer whose tunnel packet grew past its path MTU sends the ESP packet in fragments:
//! Linux's xfrm does so for an inner packet without DF, and so does ferrouter's
//! `esp4-encrypt` (the outer packet is fragmented after encryption). ESP can only be
//! decrypted whole, so `esp-decrypt` gathers the fragments here first.
//!
//! The table is fixed at start: [`SLOTS`] datagrams of up to [`MAX_DATAGRAM`] bytes in
//! [`WAYS`]-way sets chosen by a hash of (source, destination, identification), each
//! datagram given [`TIMEOUT_NS`] from its first fragment. Nothing allocates, locks or
//! logs per fragment. What does not fit is counted, never waited for:
//!
//! - a datagram whose fragments overlap or disagree on its length is dropped whole
//!   (RFC 5722 for IPv6; the same for IPv4, where overlaps are only ever an attack);
//! - a set with no free or expired way gives the oldest datagram's way to the new one,
//!   whose fragments are then lost (evicted);
//! - a datagram past [`MAX_DATAGRAM`], or a fragment not a multiple of 8 bytes but the
//!   last, is dropped with its reason.

/// Datagrams being reassembled at once, per worker.
pub const SLOTS: usize = 128;
/// Ways per set: a new datagram takes a free or expired way of its set, else the oldest.
pub const WAYS: usize = 4;
/// The largest datagram reassembled (its IP payload): what a jumbo frame carries.
pub const MAX_DATAGRAM: usize = dataplane::MAX_FRAME;
/// How long a datagram waits for its fragments, from the first one (VPP: 100 ms; Linux:
/// 30 s, bounded by memory). ESP peers send a datagram's fragments back to back.
pub const TIMEOUT_NS: u64 = 1_000_000_000;

const SETS: usize = SLOTS / WAYS;
const UNITS: usize = MAX_DATAGRAM.div_ceil(8);
const WORDS: usize = UNITS.div_ceil(64);

/// Counters of the reassembly table (the control thread reads them).
#[derive(Debug, Default)]
pub struct ReasmStats {
    /// Fragments taken into the table.
    pub fragments: std::sync::atomic::AtomicU64,
    /// Datagrams made whole and decrypted on.
    pub reassembled: std::sync::atomic::AtomicU64,
    /// Datagrams whose time ran out before their last fragment came.
    pub timed_out: std::sync::atomic::AtomicU64,
    /// Datagrams given up for a newer one, their set full.
    pub evicted: std::sync::atomic::AtomicU64,
    /// Datagrams dropped for a bad fragment (overlap, length disagreement, too big).
    pub discarded: std::sync::atomic::AtomicU64,
}

/// Why a fragment was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FragError {
    /// It overlaps another of its datagram, or disagrees on where the datagram ends.
    Overlap,
    /// The datagram would be larger than [`MAX_DATAGRAM`].
    TooBig,
    /// Malformed: not a multiple of 8 bytes though more follow, empty, or a bad header.
    Bad,
}

/// What became of a fragment.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Kept: the datagram waits for more.
    Held,
    /// The datagram is whole: its IP packet (header, then payload; the IPv6 fragment
    /// header removed) is `len` bytes, to be written out with [`Reassembly::write`].
    Complete {
        /// Slot to write from.
        slot: usize,
        /// The whole packet's length.
        len: usize,
    },
    /// Dropped, and with it the datagram's other fragments.
    Dropped(FragError),
}

/// One fragment's facts, read from its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fragment {
    /// IPv6.
    pub v6: bool,
    /// Source and destination (IPv4 in the first 4 bytes of each).
    pub src: [u8; 16],
    /// Destination.
    pub dst: [u8; 16],
    /// Identification.
    pub id: u32,
    /// Payload offset in bytes.
    pub offset: usize,
    /// More fragments follow.
    pub more: bool,
    /// Header length: IPv4 header with options; IPv6 fixed header (the fragment header,
    /// which follows it, is not part of the reassembled packet).
    pub hlen: usize,
    /// Where the payload starts in the packet (IPv6: after the fragment header).
    pub payload_at: usize,
    /// Where the packet ends.
    pub end: usize,
}

impl Fragment {
    /// The fragment facts of the IPv4 packet `ip` (its total length checked against the
    /// bytes), if it is a fragment.
    pub fn v4(ip: &[u8]) -> Option<Fragment> {
        if ip.len() < 20 || ip[0] >> 4 != 4 {
            return None;
        }
        let hlen = (ip[0] & 0xf) as usize * 4;
        let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
        let ff = u16::from_be_bytes([ip[6], ip[7]]);
        if hlen < 20 || total < hlen || total > ip.len() || ff & 0x3fff == 0 {
            return None;
        }
        let mut src = [0; 16];
        let mut dst = [0; 16];
        src[..4].copy_from_slice(&ip[12..16]);
        dst[..4].copy_from_slice(&ip[16..20]);
        Some(Fragment {
            v6: false,
            src,
            dst,
            id: u32::from(u16::from_be_bytes([ip[4], ip[5]])) | u32::from(ip[9]) << 16,
            offset: (ff & 0x1fff) as usize * 8,
            more: ff & 0x2000 != 0,
            hlen,
            payload_at: hlen,
            end: total,
        })
    }

    /// The fragment facts of the IPv6 packet `ip` whose fragment header follows the fixed
    /// header, if it is one.
    pub fn v6(ip: &[u8]) -> Option<Fragment> {
        if ip.len() < 48 || ip[0] >> 4 != 6 || ip[6] != 44 {
            return None;
        }
        let end = 40 + u16::from_be_bytes([ip[4], ip[5]]) as usize;
        if end < 48 || end > ip.len() {
            return None;
        }
        let mut src = [0; 16];
        let mut dst = [0; 16];
        src.copy_from_slice(&ip[8..24]);
        dst.copy_from_slice(&ip[24..40]);
        let om = u16::from_be_bytes([ip[42], ip[43]]);
        Some(Fragment {
            v6: true,
            src,
            dst,
            id: u32::from_be_bytes([ip[44], ip[45], ip[46], ip[47]]),
            offset: (om >> 3) as usize * 8,
            more: om & 1 != 0,
            hlen: 40,
            payload_at: 48,
            end,
        })
    }
}

#[derive(Clone, Copy)]
struct Slot {
    used: bool,
    v6: bool,
    src: [u8; 16],
    dst: [u8; 16],
    id: u32,
    started_ns: u64,
    /// Payload bytes received (fragments never overlap, so all are there when this
    /// reaches `total`).
    received: usize,
    /// The payload's length, once the last fragment has said (0: not yet).
    total: usize,
    /// The first fragment's header (IPv4 with options, IPv6 fixed), once it came.
    hdr: [u8; 60],
    hlen: usize,
    /// IPv6: the next header the fragment header names.
    next: u8,
    /// 8-byte units received.
    have: [u64; WORDS],
}

impl Slot {
    const EMPTY: Slot = Slot {
        used: false,
        v6: false,
        src: [0; 16],
        dst: [0; 16],
        id: 0,
        started_ns: 0,
        received: 0,
        total: 0,
        hdr: [0; 60],
        hlen: 0,
        next: 0,
        have: [0; WORDS],
    };

    fn is(&self, f: &Fragment) -> bool {
        self.used && self.v6 == f.v6 && self.id == f.id && self.src == f.src && self.dst == f.dst
    }
}

/// A worker's reassembly table: [`SLOTS`] datagrams, their bytes in one block allocated
/// with it (by the control thread, with the first inbound SA: [`crate::sad::SadWriter::reassemble`]).
pub struct Reassembly {
    slots: Box<[Slot]>,
    data: Box<[u8]>,
    stats: std::sync::Arc<ReasmStats>,
}

impl Reassembly {
    /// An empty table counting into `stats`.
    pub fn new(stats: std::sync::Arc<ReasmStats>) -> Reassembly {
        Reassembly {
            slots: vec![Slot::EMPTY; SLOTS].into_boxed_slice(),
            data: vec![0; SLOTS * MAX_DATAGRAM].into_boxed_slice(),
            stats,
        }
    }

    fn set_of(f: &Fragment) -> usize {
        // FNV-1a over the key: cheap, and an attacker who fills one set only evicts
        // within it.
        let mut h: u32 = 0x811c_9dc5;
        for &b in f
            .src
            .iter()
            .chain(f.dst.iter())
            .chain(f.id.to_le_bytes().iter())
        {
            h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
        }
        h as usize % SETS
    }

    fn count(c: &std::sync::atomic::AtomicU64) {
        c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Take the fragment `f` of the packet `ip` (its IP header first) at `now_ns`.
    pub fn add(&mut self, ip: &[u8], f: &Fragment, now_ns: u64) -> Outcome {
        let Some(payload) = ip.get(f.payload_at..f.end) else {
            return Outcome::Dropped(FragError::Bad);
        };
        let len = payload.len();
        // A fragment followed by more carries whole 8-byte units (RFC 791, RFC 8200).
        if f.more && (len == 0 || len % 8 != 0) {
            return Outcome::Dropped(FragError::Bad);
        }
        let end = f.offset + len;
        let base = Self::set_of(f) * WAYS;
        // Its datagram's way, else a free or expired one, else the oldest.
        let mut way = None;
        let mut free = None;
        let mut oldest = base;
        for s in base..base + WAYS {
            let sl = &self.slots[s];
            if sl.is(f) {
                way = Some(s);
                break;
            }
            if !sl.used || now_ns.saturating_sub(sl.started_ns) > TIMEOUT_NS {
                free = free.or(Some(s));
            } else if sl.started_ns < self.slots[oldest].started_ns || !self.slots[oldest].used {
                oldest = s;
            }
        }
        let s = match way {
            Some(s) if now_ns.saturating_sub(self.slots[s].started_ns) > TIMEOUT_NS => {
                // Its time ran out: what was held is lost, this one starts again.
                Self::count(&self.stats.timed_out);
                self.start(s, f, now_ns)
            }
            Some(s) => s,
            None => {
                let s = match free {
                    Some(s) => {
                        if self.slots[s].used {
                            Self::count(&self.stats.timed_out);
                        }
                        s
                    }
                    None => {
                        Self::count(&self.stats.evicted);
                        oldest
                    }
                };
                self.start(s, f, now_ns)
            }
        };
        if end > MAX_DATAGRAM {
            self.discard(s);
            return Outcome::Dropped(FragError::TooBig);
        }
        let sl = &mut self.slots[s];
        // Where the datagram ends: said by the last fragment, never contradicted.
        if !f.more {
            let beyond = (end.div_ceil(8)..UNITS).any(|u| sl.have[u / 64] & 1 << (u % 64) != 0);
            if sl.total != 0 && sl.total != end || beyond {
                self.discard(s);
                return Outcome::Dropped(FragError::Overlap);
            }
            sl.total = end;
        }
        if sl.total != 0 && end > sl.total {
            self.discard(s);
            return Outcome::Dropped(FragError::Overlap);
        }
        let (u0, u1) = (f.offset / 8, end.div_ceil(8));
        if (u0..u1).any(|u| sl.have[u / 64] & 1 << (u % 64) != 0) {
            self.discard(s);
            return Outcome::Dropped(FragError::Overlap);
        }
        for u in u0..u1 {
            sl.have[u / 64] |= 1 << (u % 64);
        }
        if f.offset == 0 {
            let Some(h) = ip.get(..f.hlen) else {
                self.discard(s);
                return Outcome::Dropped(FragError::Bad);
            };
            sl.hdr[..f.hlen].copy_from_slice(h);
            sl.hlen = f.hlen;
            if f.v6 {
                sl.next = ip.get(40).copied().unwrap_or(0);
            }
        }
        sl.received += len;
        let at = s * MAX_DATAGRAM;
        self.data[at + f.offset..at + end].copy_from_slice(payload);
        Self::count(&self.stats.fragments);
        if sl.total != 0 && sl.received == sl.total && sl.hlen != 0 {
            Outcome::Complete {
                slot: s,
                len: sl.hlen + sl.total,
            }
        } else {
            Outcome::Held
        }
    }

    fn start(&mut self, s: usize, f: &Fragment, now_ns: u64) -> usize {
        self.slots[s] = Slot {
            used: true,
            v6: f.v6,
            src: f.src,
            dst: f.dst,
            id: f.id,
            started_ns: now_ns,
            ..Slot::EMPTY
        };
        s
    }

    /// Give up a [`Outcome::Complete`] datagram that could not be written out.
    pub fn abandon(&mut self, slot: usize) {
        if self.slots.get(slot).is_some_and(|s| s.used) {
            self.discard(slot);
        }
    }

    fn discard(&mut self, s: usize) {
        self.slots[s].used = false;
        Self::count(&self.stats.discarded);
    }

    /// Write the whole packet of a [`Outcome::Complete`] slot into `out` (exactly its
    /// length), its header made that of an unfragmented packet, and free the slot.
    /// Returns false (and writes nothing) when `out` is not that length or the slot is
    /// not complete.
    pub fn write(&mut self, slot: usize, out: &mut [u8]) -> bool {
        let Some(sl) = self.slots.get_mut(slot) else {
            return false;
        };
        let (hlen, total) = (sl.hlen, sl.total);
        if !sl.used || hlen == 0 || out.len() != hlen + total {
            return false;
        }
        sl.used = false;
        let (h, p) = out.split_at_mut(hlen);
        h.copy_from_slice(&sl.hdr[..hlen]);
        let at = slot * MAX_DATAGRAM;
        p.copy_from_slice(&self.data[at..at + total]);
        if sl.v6 {
            h[6] = sl.next;
            h[4..6].copy_from_slice(&(total as u16).to_be_bytes());
        } else {
            h[2..4].copy_from_slice(&((hlen + total) as u16).to_be_bytes());
            h[6..8].fill(0);
            h[10..12].fill(0);
            let c = wire::checksum::checksum(h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
        }
        Self::count(&self.stats.reassembled);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    /// An IPv4 packet of `payload` bytes (byte i = i as u8), cut in fragments of `chunk`.
    fn frags4(id: u16, payload: usize, chunk: usize) -> (Vec<u8>, Vec<Vec<u8>>) {
        let data: Vec<u8> = (0..payload).map(|i| i as u8).collect();
        let mut whole = vec![0x45, 0, 0, 0, (id >> 8) as u8, id as u8, 0, 0, 64, 50, 0, 0];
        whole.extend_from_slice(&[192, 0, 2, 1, 192, 0, 2, 2]);
        let total = 20 + payload;
        whole[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        let c = wire::checksum::checksum(&whole);
        whole[10..12].copy_from_slice(&c.to_be_bytes());
        whole.extend_from_slice(&data);
        let mut out = Vec::new();
        let mut off = 0;
        while off < payload {
            let n = chunk.min(payload - off);
            let mut f = whole[..20].to_vec();
            f[2..4].copy_from_slice(&((20 + n) as u16).to_be_bytes());
            let more = off + n < payload;
            let ff = (off / 8) as u16 | if more { 0x2000 } else { 0 };
            f[6..8].copy_from_slice(&ff.to_be_bytes());
            f.extend_from_slice(&data[off..off + n]);
            out.push(f);
            off += n;
        }
        (whole, out)
    }

    fn table() -> (Reassembly, std::sync::Arc<ReasmStats>) {
        let s = std::sync::Arc::new(ReasmStats::default());
        (Reassembly::new(s.clone()), s)
    }

    fn feed(r: &mut Reassembly, frags: &[Vec<u8>], now: u64) -> Option<Vec<u8>> {
        let mut out = None;
        for f in frags {
            let fr = Fragment::v4(f).unwrap();
            match r.add(f, &fr, now) {
                Outcome::Held => {}
                Outcome::Complete { slot, len } => {
                    let mut b = vec![0; len];
                    assert!(r.write(slot, &mut b));
                    out = Some(b);
                }
                Outcome::Dropped(e) => panic!("dropped: {e:?}"),
            }
        }
        out
    }

    #[test]
    fn in_order_out_of_order_and_interleaved_datagrams_come_back_whole() {
        let (mut r, s) = table();
        let (a, fa) = frags4(1, 1500, 1000);
        let (b, mut fb) = frags4(2, 4000, 1480);
        assert_eq!(feed(&mut r, &fa, 0), Some(a));
        fb.reverse();
        assert_eq!(feed(&mut r, &fb, 0), Some(b.clone()));
        // Interleaved: two datagrams at once.
        let (c, fc) = frags4(3, 3000, 1480);
        let mut mix = Vec::new();
        for i in 0..3 {
            mix.push(fc[i].clone());
            if i < fb.len() {
                mix.push(fb[i].clone());
            }
        }
        let mut got = Vec::new();
        for f in &mix {
            if let Outcome::Complete { slot, len } = r.add(f, &Fragment::v4(f).unwrap(), 5) {
                let mut v = vec![0; len];
                assert!(r.write(slot, &mut v));
                got.push(v);
            }
        }
        got.sort();
        let mut want = vec![b, c];
        want.sort();
        assert_eq!(got, want);
        assert_eq!(s.reassembled.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn overlaps_length_disagreement_and_size_drop_the_datagram() {
        let (mut r, s) = table();
        let (_, f) = frags4(7, 2000, 800);
        let f0 = Fragment::v4(&f[0]).unwrap();
        assert_eq!(r.add(&f[0], &f0, 0), Outcome::Held);
        // The same fragment again overlaps itself.
        assert_eq!(r.add(&f[0], &f0, 0), Outcome::Dropped(FragError::Overlap));
        // The datagram is gone: the rest never completes it.
        assert_eq!(
            r.add(&f[1], &Fragment::v4(&f[1]).unwrap(), 0),
            Outcome::Held
        );
        assert_eq!(
            r.add(&f[2], &Fragment::v4(&f[2]).unwrap(), 0),
            Outcome::Held
        );
        // A last fragment saying another end.
        let (_, g) = frags4(8, 2000, 800);
        let mut last = g[2].clone();
        last.truncate(last.len() - 8);
        let n = last.len() as u16;
        last[2..4].copy_from_slice(&n.to_be_bytes());
        assert_eq!(
            r.add(&g[2], &Fragment::v4(&g[2]).unwrap(), 0),
            Outcome::Held
        );
        assert_eq!(
            r.add(&last, &Fragment::v4(&last).unwrap(), 0),
            Outcome::Dropped(FragError::Overlap)
        );
        // Past the largest datagram.
        let mut big = g[0].clone();
        big[6..8].copy_from_slice(&(0x2000u16 | (MAX_DATAGRAM / 8) as u16).to_be_bytes());
        assert_eq!(
            r.add(&big, &Fragment::v4(&big).unwrap(), 0),
            Outcome::Dropped(FragError::TooBig)
        );
        // Not a multiple of 8 with more to come.
        let mut odd = g[0].clone();
        odd.pop();
        let n = odd.len() as u16;
        odd[2..4].copy_from_slice(&n.to_be_bytes());
        assert_eq!(
            r.add(&odd, &Fragment::v4(&odd).unwrap(), 0),
            Outcome::Dropped(FragError::Bad)
        );
        assert_eq!(s.discarded.load(Ordering::Relaxed), 3);
        assert_eq!(s.reassembled.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn time_runs_out_and_full_sets_evict_the_oldest() {
        let (mut r, s) = table();
        let (a, fa) = frags4(9, 1500, 1000);
        assert_eq!(
            r.add(&fa[0], &Fragment::v4(&fa[0]).unwrap(), 0),
            Outcome::Held
        );
        // The second fragment after the timeout starts the datagram again: held, not whole.
        let late = TIMEOUT_NS + 1;
        assert_eq!(
            r.add(&fa[1], &Fragment::v4(&fa[1]).unwrap(), late),
            Outcome::Held
        );
        assert_eq!(s.timed_out.load(Ordering::Relaxed), 1);
        assert_eq!(feed(&mut r, &fa[..1], late), Some(a));
        // Far more datagrams than slots, each half sent: evictions, never a panic.
        for id in 0..(SLOTS as u16 * 4) {
            let (_, f) = frags4(id.wrapping_add(100), 1500, 1000);
            assert_eq!(
                r.add(&f[0], &Fragment::v4(&f[0]).unwrap(), 10),
                Outcome::Held
            );
        }
        assert!(s.evicted.load(Ordering::Relaxed) >= SLOTS as u64 * 2);
    }

    #[test]
    fn ipv6_fragments_lose_their_fragment_header() {
        let (mut r, _) = table();
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
        let mut fixed = vec![0x60, 0, 0, 0, 0, 0, 44, 64];
        fixed.extend_from_slice(&[0x20, 1, 0xd, 0xb8].repeat(4));
        fixed.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        let mut out = None;
        for (k, off) in [1448usize, 0, 2896].into_iter().enumerate() {
            let n = 1448.min(3000 - off);
            let mut p = fixed.clone();
            p[4..6].copy_from_slice(&((8 + n) as u16).to_be_bytes());
            let om = (off as u16) | u16::from(off + n < 3000);
            p.extend_from_slice(&[50, 0]);
            p.extend_from_slice(&om.to_be_bytes());
            p.extend_from_slice(&0xdead_beefu32.to_be_bytes());
            p.extend_from_slice(&data[off..off + n]);
            match r.add(&p, &Fragment::v6(&p).unwrap(), 0) {
                Outcome::Held => assert!(k < 2),
                Outcome::Complete { slot, len } => {
                    let mut b = vec![0; len];
                    assert!(r.write(slot, &mut b));
                    out = Some(b);
                }
                o => panic!("{o:?}"),
            }
        }
        let b = out.unwrap();
        assert_eq!(b.len(), 40 + 3000);
        assert_eq!(b[6], 50);
        assert_eq!(u16::from_be_bytes([b[4], b[5]]), 3000);
        assert_eq!(&b[40..], &data[..]);
    }

    proptest::proptest! {
        /// Whatever the bytes, taking a fragment never panics, and a completed datagram
        /// writes out at exactly its length.
        #[test]
        fn any_fragments_are_safe(
            packets in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200), 1..40),
            flip in proptest::prelude::any::<bool>(),
        ) {
            let (mut r, _) = table();
            for (n, mut p) in packets.into_iter().enumerate() {
                if p.len() >= 20 {
                    p[0] = if flip { 0x60 } else { 0x45 };
                    if flip && p.len() >= 48 { p[6] = 44; }
                    if !flip { p[6] |= 0x20; }
                }
                let f = if flip { Fragment::v6(&p) } else { Fragment::v4(&p) };
                if let Some(f) = f {
                    if let Outcome::Complete { slot, len } = r.add(&p, &f, n as u64) {
                        let mut b = vec![0; len];
                        proptest::prop_assert!(r.write(slot, &mut b));
                    }
                }
            }
        }
    }
}
