//! Route sweep: traffic to every learned route, and per route the link its traffic
//! leaves the DUT on. For convergence benchmarks (a router learns N routes from a primary
//! and a secondary BGP peer; the primary withdraws, then re-advertises: when did the
//! traffic to each route move, and when was traffic to *every* route back on the
//! primary?) and for verifying forwarding to a set of prefixes with loss per destination.
//!
//! # Pieces
//! - [`SweepConfig`]: addresses, the destination list (one address per route, IPv4 and
//!   IPv6 mixed, up to [`MAX_DESTS`]), rate and frame size.
//! - [`Tracker`]: per-destination state shared (in an [`Arc`]) by the receivers, which
//!   update it without locks, and the controller, which reads it
//!   ([`Tracker::settled_on`], [`Tracker::snapshot`], [`Tracker::counts`]).
//! - [`Sender`] / [`run_sender`]: one port, round robin over the destinations at a fixed
//!   rate; one round over all destinations is a *pass*.
//! - [`Receiver`] / [`run_receiver`]: one receive port (index `k` of the tracker), one
//!   thread; any number of ports, each on its own thread with its own packet memory.
//! - [`verify`] / [`verify_with`]: whole passes, then loss per destination.
//!
//! # Frames
//! Ethernet + IPv4/UDP or IPv6/UDP with valid IPv4 header and UDP checksums (computed
//! incrementally from a per-family template, as [`crate::frame`] does). Source addresses
//! are fixed, the destination is the route's address, the UDP source port varies with
//! the destination index (`1024 + index % 64512`, to spread RSS), the destination port is
//! [`SWEEP_UDP_PORT`]. The receiver reads only the signature at the start of the UDP
//! payload (the DUT rewrites MACs, TTL and the IPv4 checksum), all big-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 0..2 | magic [`SWEEP_MAGIC`] (not the generator's [`crate::frame::MAGIC`]: neither takes the other's frames) |
//! | 2..6 | session (8 bits, random per [`Tracker`]) << 24 \| destination index (24 bits) |
//! | 6..10 | pass number (low 32 bits) |
//! | 10..18 | transmit time: `CLOCK_MONOTONIC` ns, full 64 bits, strictly increasing per sender |
//!
//! Smallest frames (FCS included): [`SWEEP_MIN_FRAME_V4`] = 64 and [`SWEEP_MIN_FRAME_V6`]
//! = 84 bytes.
//!
//! # Per-destination state and concurrent updates
//! Two `AtomicU64` per destination (16 bytes; plus a 4-byte receive counter for
//! verification: 20 bytes, 320 MiB for 16M destinations), allocated zeroed so untouched
//! pages cost nothing:
//!
//! - `newest` = send time of the newest frame received for the destination (52 bits,
//!   ns after the tracker's epoch, + 1) | move generation (8 bits) | port + 1 (4 bits;
//!   0: never seen);
//! - `moved` = the value `newest` had right after the destination's latest move onto its
//!   current port (so its time field is the *change time*).
//!
//! A receiver on port `k` with a frame sent at `t` for destination `d`
//! ([`Tracker::record`]):
//! 1. **ordering**: if `t` ≤ the newest send time already recorded, the frame is *older*
//!    (it was overtaken by a later frame on any port: reordering across links, or a
//!    duplicate) and changes nothing; so frames still in flight on the old path when the
//!    DUT switched can never flip a destination back;
//! 2. otherwise one compare-and-swap makes it the newest: same port → only the time
//!    advances; another port → a *move*: the generation is incremented;
//! 3. after a move, `moved.fetch_max(new newest)`.
//!
//! The CAS of step 2 is the linearization point: whatever the threads and interleaving,
//! `newest` ends as the frame with the largest send time, and moves are totally ordered
//! by send time, so `fetch_max` leaves `moved` at the latest move even when two publishes
//! race. Between steps 2 and 3 a reader can see a new port with the previous move's time:
//! readers compare the generations of both words and retry (briefly) until they agree;
//! they always agree once receivers are between frames. A receiver thread has at most one
//! unpublished move, so with fewer than 256 receiver threads per tracker the 8-bit
//! generation cannot alias. If a receiver is preempted in that window for longer than a
//! reader retries, the reader reports the destination as [`DestState::in_flux`] (and
//! [`Tracker::settled_on`] as not settled yet).
//!
//! The change time is the send time of the first frame that arrived on the current port
//! *and was the newest when it arrived*: if frames of one destination are reordered on the
//! new path (more than a whole sweep period apart), it is the first to arrive of them.
//!
//! Times are send timestamps, on the sender's clock: the DUT's latency and the receivers'
//! polling do not enter the measurement, and sender and receivers must share a clock
//! (same host). A tracker covers 2^52 ns (52 days) after its epoch.
//!
//! ```
//! use std::sync::atomic::AtomicBool;
//! use dataplane::Arena;
//! use tester::clock::{Clock, VirtualClock};
//! use tester::sweep::{Receiver, Sender, SweepConfig, Tracker};
//! use tester::testing::loop_pair;
//!
//! let dests = (0..100u32).map(|i| std::net::Ipv4Addr::from(0x0a00_0001 + (i << 8)).into()).collect();
//! let cfg = SweepConfig::new(
//!     [2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 1, 1],
//!     "198.18.0.2".parse().unwrap(), "2001:2::2".parse().unwrap(), dests, 1e6,
//! );
//! let mut clock = VirtualClock::new(1_000_000, 100);
//! let tracker = Tracker::with_epoch(100, 1, 0, 7).unwrap();
//! let (mut tx, mut rx) = loop_pair(4096);
//! let mut mem = Arena::new(4096);
//! let mut sender = Sender::new(&cfg, &tracker).unwrap();
//! let mut receiver = Receiver::new(&tracker, 0).unwrap();
//! let start = clock.peek();
//! while tracker.settled_on(0, start).is_none() {
//!     let now = clock.now_ns();
//!     sender.poll(&mut mem, &mut tx, now);
//!     receiver.poll(&mut mem, &mut rx, &mut clock);
//! }
//! assert_eq!(tracker.counts().never_seen, 0);
//! ```

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use dataplane::buffer::{prefetch, PacketMemory, Pkt, Vector, HEADROOM, VECTOR_SIZE};
use dataplane::worker::Port;
use serde::{Deserialize, Serialize};
use wire::checksum::fold;

use crate::clock::{monotonic_ns, Clock, MonotonicClock};
use crate::frame::{sum_words, udp_payload_offset, DEFAULT_TTL};
use crate::profile::FCS_LEN;

/// First two bytes of every sweep signature.
pub const SWEEP_MAGIC: u16 = 0xF7E6;
/// Bytes of the sweep signature at the start of the UDP payload.
pub const SWEEP_SIGNATURE_LEN: usize = 18;
/// Smallest IPv4 sweep frame (FCS included): 14 + 20 + 8 + 18 + 4.
pub const SWEEP_MIN_FRAME_V4: u16 = 64;
/// Smallest IPv6 sweep frame (FCS included): 14 + 40 + 8 + 18 + 4.
pub const SWEEP_MIN_FRAME_V6: u16 = 84;
/// Most destinations (the signature carries a 24-bit index).
pub const MAX_DESTS: usize = 1 << 24;
/// Most receive ports per tracker.
pub const MAX_PORTS: usize = 15;
/// UDP destination port of sweep frames (the generator's default too).
pub const SWEEP_UDP_PORT: u16 = 4791;
/// A frame stamped more than this after the receiver's clock is forged or corrupt (same
/// host: a real frame is always stamped before it is received).
pub const FUTURE_SLACK_NS: u64 = 1_000_000;

const ETH_LEN: usize = 14;
const UDP_LEN: usize = 8;
const PROTO_UDP: u8 = 17;

// ---------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------

/// What to send.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepConfig {
    /// Source MAC (the tester port's).
    pub src_mac: [u8; 6],
    /// Destination MAC (the DUT's ingress port).
    pub dst_mac: [u8; 6],
    /// IPv4 source address (needed when `dests` has IPv4 addresses).
    pub src_v4: Ipv4Addr,
    /// IPv6 source address (needed when `dests` has IPv6 addresses).
    pub src_v6: Ipv6Addr,
    /// One destination address per route, in sweep order; index `i` is destination `i`
    /// of the [`Tracker`]. 1..=[`MAX_DESTS`].
    pub dests: Vec<IpAddr>,
    /// Frames per second (all destinations together): a pass takes
    /// `dests.len() / rate_pps` seconds ([`SweepConfig::period`]).
    pub rate_pps: f64,
    /// Frame size with FCS, the same for both families; 0: each family's minimum
    /// ([`SWEEP_MIN_FRAME_V4`], [`SWEEP_MIN_FRAME_V6`]). Must be at least the minimum of
    /// every family in `dests`.
    pub frame_len: u16,
    /// Most frames handed to the port per call (1..=256).
    pub burst: usize,
    /// How far the sender may fall behind schedule before giving up slots (the
    /// destination order is kept: a late pass only takes longer).
    pub max_lag: Duration,
    /// TTL / hop limit.
    pub ttl: u8,
}

impl SweepConfig {
    /// Minimum frame sizes, burst 32, max lag 1 ms, TTL 64.
    pub fn new(
        src_mac: [u8; 6],
        dst_mac: [u8; 6],
        src_v4: Ipv4Addr,
        src_v6: Ipv6Addr,
        dests: Vec<IpAddr>,
        rate_pps: f64,
    ) -> SweepConfig {
        SweepConfig {
            src_mac,
            dst_mac,
            src_v4,
            src_v6,
            dests,
            rate_pps,
            frame_len: 0,
            burst: 32,
            max_lag: Duration::from_millis(1),
            ttl: DEFAULT_TTL,
        }
    }

    /// Frame size (FCS included) of the family's frames.
    pub fn frame_size(&self, v6: bool) -> u16 {
        let min = if v6 {
            SWEEP_MIN_FRAME_V6
        } else {
            SWEEP_MIN_FRAME_V4
        };
        if self.frame_len == 0 {
            min
        } else {
            self.frame_len
        }
    }

    /// Time of one pass over every destination at `rate_pps`.
    pub fn period(&self) -> Duration {
        if self.rate_pps.is_finite() && self.rate_pps > 0.0 {
            Duration::from_secs_f64(self.dests.len() as f64 / self.rate_pps)
        } else {
            Duration::MAX
        }
    }

    /// Check the configuration (scans the destinations once).
    pub fn validate(&self) -> Result<()> {
        let n = self.dests.len();
        if n == 0 || n > MAX_DESTS {
            bail!("a sweep needs 1..={MAX_DESTS} destinations, not {n}");
        }
        if !(self.rate_pps.is_finite() && self.rate_pps > 0.0 && self.rate_pps <= 1e9) {
            bail!(
                "sweep rate must be a positive number of frames/s, not {}",
                self.rate_pps
            );
        }
        if self.burst == 0 || self.burst > VECTOR_SIZE {
            bail!("burst must be 1..={VECTOR_SIZE}, not {}", self.burst);
        }
        let v6 = self.dests.iter().filter(|a| a.is_ipv6()).count();
        for (fam, count, is_v6) in [("IPv4", n - v6, false), ("IPv6", v6, true)] {
            if count == 0 {
                continue;
            }
            let unspecified = if is_v6 {
                self.src_v6.is_unspecified()
            } else {
                self.src_v4.is_unspecified()
            };
            if unspecified {
                bail!("{count} {fam} destinations but no {fam} source address");
            }
            let min = if is_v6 {
                SWEEP_MIN_FRAME_V6
            } else {
                SWEEP_MIN_FRAME_V4
            };
            if self.frame_size(is_v6) < min {
                bail!(
                    "{}-byte frames are too small for {fam} sweep frames (at least {min})",
                    self.frame_len
                );
            }
            if usize::from(self.frame_size(is_v6)) > usize::from(u16::MAX) - FCS_LEN {
                bail!("frame size {} too large", self.frame_len);
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Signature and frames
// ---------------------------------------------------------------------------------------

/// A decoded sweep signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SweepSignature {
    /// Session tag of the [`Tracker`] the frame was sent for.
    pub session: u8,
    /// Destination index (24 bits).
    pub dest: u32,
    /// Pass number, low 32 bits.
    pub pass: u32,
    /// Transmit time, `CLOCK_MONOTONIC` ns.
    pub timestamp_ns: u64,
}

impl SweepSignature {
    /// Find and decode the sweep signature of an Ethernet frame (no FCS): Ethernet (one
    /// optional 802.1Q/802.1ad tag), IPv4 (any header length, first fragment) or IPv6 (UDP
    /// as the first next header), UDP, then [`SWEEP_MAGIC`]. `None` for anything else,
    /// including truncated frames. Never panics, whatever the bytes.
    #[inline]
    pub fn parse(frame: &[u8]) -> Option<SweepSignature> {
        let off = udp_payload_offset(frame)?;
        let s = frame.get(off..off.checked_add(SWEEP_SIGNATURE_LEN)?)?;
        if u16::from_be_bytes([s[0], s[1]]) != SWEEP_MAGIC {
            return None;
        }
        let sd = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&s[10..18]);
        Some(SweepSignature {
            session: (sd >> 24) as u8,
            dest: sd & 0x00ff_ffff,
            pass: u32::from_be_bytes([s[6], s[7], s[8], s[9]]),
            timestamp_ns: u64::from_be_bytes(ts),
        })
    }

    /// The 18 signature bytes.
    pub fn to_bytes(&self) -> [u8; SWEEP_SIGNATURE_LEN] {
        let mut b = [0u8; SWEEP_SIGNATURE_LEN];
        b[0..2].copy_from_slice(&SWEEP_MAGIC.to_be_bytes());
        b[2..6].copy_from_slice(&self.session_dest().to_be_bytes());
        b[6..10].copy_from_slice(&self.pass.to_be_bytes());
        b[10..18].copy_from_slice(&self.timestamp_ns.to_be_bytes());
        b
    }

    #[inline]
    fn session_dest(&self) -> u32 {
        (u32::from(self.session) << 24) | (self.dest & 0x00ff_ffff)
    }
}

#[inline]
fn words32(x: u32) -> u32 {
    (x >> 16) + (x & 0xffff)
}

/// UDP source port of destination `d`.
#[inline]
pub fn sweep_src_port(d: usize) -> u16 {
    1024 + (d % (65536 - 1024)) as u16
}

/// A prebuilt sweep frame of one family with the partial checksums of its constant bytes.
#[derive(Clone, Debug)]
struct FrameTemplate {
    bytes: Vec<u8>,
    v6: bool,
    l4: usize,
    /// IPv4 header sum with the destination and checksum zero.
    ip_sum: u32,
    /// UDP + pseudo header sum with destination, source port and the variable signature
    /// fields zero.
    udp_sum: u32,
}

impl FrameTemplate {
    fn new(v6: bool, size: u16, cfg: &SweepConfig) -> FrameTemplate {
        let len = usize::from(size) - FCS_LEN;
        let mut b = vec![0u8; len];
        b[0..6].copy_from_slice(&cfg.dst_mac);
        b[6..12].copy_from_slice(&cfg.src_mac);
        let l3 = ETH_LEN;
        let (l4, ip_sum, src_sum) = if v6 {
            b[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
            let ip = &mut b[l3..];
            ip[0] = 0x60;
            ip[4..6].copy_from_slice(&((len - ETH_LEN - 40) as u16).to_be_bytes());
            ip[6] = PROTO_UDP;
            ip[7] = cfg.ttl;
            ip[8..24].copy_from_slice(&cfg.src_v6.octets());
            (l3 + 40, 0, sum_words(u128::from(cfg.src_v6)))
        } else {
            b[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            let ip = &mut b[l3..];
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&((len - ETH_LEN) as u16).to_be_bytes());
            ip[8] = cfg.ttl;
            ip[9] = PROTO_UDP;
            ip[12..16].copy_from_slice(&cfg.src_v4.octets());
            let s = wire::checksum::sum(&ip[..20]);
            (l3 + 20, s, sum_words(u128::from(u32::from(cfg.src_v4))))
        };
        let udp_len = (len - l4) as u16;
        b[l4 + 2..l4 + 4].copy_from_slice(&SWEEP_UDP_PORT.to_be_bytes());
        b[l4 + 4..l4 + 6].copy_from_slice(&udp_len.to_be_bytes());
        let sig = l4 + UDP_LEN;
        b[sig..sig + 2].copy_from_slice(&SWEEP_MAGIC.to_be_bytes());
        for (i, x) in b[sig + SWEEP_SIGNATURE_LEN..].iter_mut().enumerate() {
            *x = i as u8;
        }
        let udp_sum = u32::from(fold(
            wire::checksum::sum(&b[l4..]) + src_sum + u32::from(PROTO_UDP) + u32::from(udp_len),
        ));
        FrameTemplate {
            bytes: b,
            v6,
            l4,
            ip_sum,
            udp_sum,
        }
    }

    /// Write a complete frame into `out[..len]`; returns `len`.
    #[inline]
    fn fill(&self, out: &mut [u8], dst: u128, sport: u16, sig: &SweepSignature) -> usize {
        let len = self.bytes.len();
        let f = &mut out[..len];
        f.copy_from_slice(&self.bytes);
        let l3 = ETH_LEN;
        let dsum = sum_words(dst);
        if self.v6 {
            f[l3 + 24..l3 + 40].copy_from_slice(&dst.to_be_bytes());
        } else {
            f[l3 + 16..l3 + 20].copy_from_slice(&(dst as u32).to_be_bytes());
            let c = !fold(self.ip_sum + dsum);
            f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
        }
        let l4 = self.l4;
        f[l4..l4 + 2].copy_from_slice(&sport.to_be_bytes());
        let s = l4 + UDP_LEN;
        let sd = sig.session_dest();
        f[s + 2..s + 6].copy_from_slice(&sd.to_be_bytes());
        f[s + 6..s + 10].copy_from_slice(&sig.pass.to_be_bytes());
        f[s + 10..s + 18].copy_from_slice(&sig.timestamp_ns.to_be_bytes());
        let ts = sig.timestamp_ns;
        let sum = self.udp_sum
            + dsum
            + u32::from(sport)
            + words32(sd)
            + words32(sig.pass)
            + words32((ts >> 32) as u32)
            + words32(ts as u32);
        let c = !fold(sum);
        let c = if c == 0 { 0xffff } else { c };
        f[l4 + 6..l4 + 8].copy_from_slice(&c.to_be_bytes());
        len
    }
}

/// The frame the sender builds for destination `dest` of `cfg` (for tests and tools).
pub fn build_frame(cfg: &SweepConfig, sig: &SweepSignature) -> Option<Vec<u8>> {
    let d = *cfg.dests.get(sig.dest as usize)?;
    let (v6, dst) = addr_u128(d);
    let t = FrameTemplate::new(v6, cfg.frame_size(v6), cfg);
    let mut out = vec![0u8; t.bytes.len()];
    t.fill(&mut out, dst, sweep_src_port(sig.dest as usize), sig);
    Some(out)
}

#[inline]
fn addr_u128(a: IpAddr) -> (bool, u128) {
    match a {
        IpAddr::V4(a) => (false, u128::from(u32::from(a))),
        IpAddr::V6(a) => (true, u128::from(a)),
    }
}

// ---------------------------------------------------------------------------------------
// Tracker
// ---------------------------------------------------------------------------------------

const PORT_BITS: u32 = 4;
const GEN_BITS: u32 = 8;
const TIME_SHIFT: u32 = PORT_BITS + GEN_BITS;
const PORT_MASK: u64 = (1 << PORT_BITS) - 1;
const GEN_MASK: u64 = (1 << GEN_BITS) - 1;
/// Largest stored time (relative ns + 1).
const TIME_MAX: u64 = (1 << (64 - TIME_SHIFT)) - 1;
/// Reader attempts before reporting a destination in flux.
const READ_RETRIES: u32 = 200;

#[inline]
fn pack(rel: u64, gen: u64, port1: u64) -> u64 {
    (rel << TIME_SHIFT) | ((gen & GEN_MASK) << PORT_BITS) | (port1 & PORT_MASK)
}

/// (time, generation, port + 1).
#[inline]
fn unpack(w: u64) -> (u64, u64, u64) {
    (w >> TIME_SHIFT, (w >> PORT_BITS) & GEN_MASK, w & PORT_MASK)
}

/// The two state words of one destination (see the module documentation).
#[repr(C, align(16))]
#[derive(Default)]
struct Slot {
    newest: AtomicU64,
    moved: AtomicU64,
}

/// Types whose all-zero bit pattern is a valid value.
///
/// # Safety
/// Implement only for such types.
unsafe trait Zeroable {}
// SAFETY: atomics of integers are valid when zero; Slot is two of them.
unsafe impl Zeroable for Slot {}
// SAFETY: as above.
unsafe impl Zeroable for AtomicU32 {}

/// `n` zeroed values, from `alloc_zeroed`: the kernel hands out zero pages lazily, so a
/// large tracker costs address space until destinations are touched. An error, not an
/// abort, when memory is short.
fn zeroed<T: Zeroable>(n: usize) -> Result<Box<[T]>> {
    if n == 0 || std::mem::size_of::<T>() == 0 {
        bail!("zero-sized tracker allocation");
    }
    let layout = std::alloc::Layout::array::<T>(n)?;
    // SAFETY: the layout has a non-zero size; the result is checked for null below.
    let p = unsafe { std::alloc::alloc_zeroed(layout) } as *mut T;
    if p.is_null() {
        bail!("cannot allocate {} MiB of sweep state", layout.size() >> 20);
    }
    // SAFETY: `p` was allocated by the global allocator with the layout of `[T; n]` and
    // zero-initialised, which is a valid `T` (Zeroable); the box takes sole ownership.
    Ok(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n)) })
}

/// Per-port counters, on their own cache line.
#[repr(align(64))]
#[derive(Default)]
struct PortCells {
    rx: AtomicU64,
    foreign: AtomicU64,
    stale: AtomicU64,
    older: AtomicU64,
    moves: AtomicU64,
    counted: AtomicU64,
}

#[repr(align(64))]
#[derive(Default)]
struct Padded(AtomicU64);

/// What [`Tracker::record`] did with a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// The destination moved onto this port (or was seen for the first time).
    Moved,
    /// Newest frame, same port as before.
    Refreshed,
    /// Not newer than a frame already recorded (any port): state unchanged.
    Older,
    /// Destination, port or time out of range: ignored.
    Rejected,
}

/// What the receiver did with one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A valid sweep frame of this tracker, recorded.
    Recorded(Recorded),
    /// A sweep frame of another session, or sent before the tracker's epoch.
    Stale,
    /// Anything else: not IPv4/IPv6 UDP, truncated, wrong magic, destination index out of
    /// range, timestamp in the future, pass not sent yet.
    Foreign,
}

/// One destination as the controller sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestState {
    /// Receive port its newest frame arrived on; `None`: never seen.
    pub port: Option<usize>,
    /// Send time (monotonic ns) of the first frame on `port` after the last move: since
    /// when the destination's traffic has been arriving there. 0 when never seen.
    pub since_ns: u64,
    /// Send time of the newest frame received. 0 when never seen.
    pub last_ns: u64,
    /// A receiver was in the middle of recording a move when read (rare: it was preempted
    /// there): `port` and `last_ns` are right, `since_ns` is only bounded by `last_ns`
    /// (and set to it).
    pub in_flux: bool,
}

/// Counts of one receive port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortCounts {
    /// Valid sweep frames of this tracker received (including `older`).
    pub rx: u64,
    /// Frames that were not valid sweep frames of this tracker.
    pub foreign: u64,
    /// Sweep frames of another session or from before the tracker's epoch.
    pub stale: u64,
    /// Valid frames overtaken by a later frame of the same destination (reordering across
    /// links, duplicates): they changed nothing.
    pub older: u64,
    /// Destinations that moved onto this port (first sightings included).
    pub moves: u64,
}

/// Totals of a tracker.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepCounts {
    /// Frames sent (all senders on the tracker).
    pub tx: u64,
    /// Valid frames received, all ports.
    pub rx: u64,
    /// Foreign frames, all ports.
    pub foreign: u64,
    /// Stale frames, all ports.
    pub stale: u64,
    /// Older frames, all ports.
    pub older: u64,
    /// Per receive port.
    pub ports: Vec<PortCounts>,
    /// Destinations never seen on any port.
    pub never_seen: usize,
}

/// Where the destinations stand relative to one port (see [`Tracker::settle_status`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettleStatus {
    /// Destinations whose newest frame arrived on the port and was sent at or after
    /// `since_ns`.
    pub settled: usize,
    /// Destinations whose newest frame arrived on another port.
    pub elsewhere: usize,
    /// Destinations on the port, but with no frame sent at or after `since_ns` yet.
    pub not_since: usize,
    /// Destinations never seen.
    pub never_seen: usize,
    /// Destinations being updated while read.
    pub in_flux: usize,
    /// Latest change time among the settled destinations.
    pub latest_move_ns: Option<u64>,
    /// Lowest index of a destination not settled.
    pub first_unsettled: Option<usize>,
}

/// Per-destination state shared by receivers (writers) and the controller (reader);
/// lock-free, no allocation after construction. See the module documentation for the
/// update rules.
pub struct Tracker {
    slots: Box<[Slot]>,
    /// Frames received per destination from pass `count_from` on (verification).
    rx_per_dest: Box<[AtomicU32]>,
    ports: Box<[PortCells]>,
    tx: Padded,
    /// Next pass number a sender will start.
    next_pass: Padded,
    /// Frames of this pass and later are counted per destination (`u64::MAX`: none).
    count_from: AtomicU64,
    epoch_ns: u64,
    session: u8,
}

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracker")
            .field("dests", &self.slots.len())
            .field("ports", &self.ports.len())
            .field("epoch_ns", &self.epoch_ns)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

impl Tracker {
    /// A tracker for `dests` destinations (1..=[`MAX_DESTS`]) received on `ports` ports
    /// (1..=[`MAX_PORTS`]), epoch now, random session tag. Panics on out-of-range
    /// arguments or when memory is short; [`Tracker::try_new`] returns an error instead.
    pub fn new(dests: usize, ports: usize) -> Arc<Tracker> {
        Tracker::try_new(dests, ports).unwrap_or_else(|e| panic!("sweep tracker: {e:#}"))
    }

    /// [`Tracker::new`] returning errors.
    pub fn try_new(dests: usize, ports: usize) -> Result<Arc<Tracker>> {
        let mut h = RandomState::new().build_hasher();
        h.write_usize(dests);
        let session = h.finish() as u8;
        Tracker::with_epoch(dests, ports, monotonic_ns(), session)
    }

    /// A tracker with an explicit epoch (no frame sent before it counts) and session tag
    /// (deterministic tests; trackers used at the same time should differ).
    pub fn with_epoch(
        dests: usize,
        ports: usize,
        epoch_ns: u64,
        session: u8,
    ) -> Result<Arc<Tracker>> {
        if dests == 0 || dests > MAX_DESTS {
            bail!("a sweep tracker holds 1..={MAX_DESTS} destinations, not {dests}");
        }
        if ports == 0 || ports > MAX_PORTS {
            bail!("a sweep tracker has 1..={MAX_PORTS} receive ports, not {ports}");
        }
        Ok(Arc::new(Tracker {
            slots: zeroed(dests)?,
            rx_per_dest: zeroed(dests)?,
            ports: (0..ports).map(|_| PortCells::default()).collect(),
            tx: Padded::default(),
            next_pass: Padded::default(),
            count_from: AtomicU64::new(u64::MAX),
            epoch_ns,
            session,
        }))
    }

    /// Number of destinations.
    pub fn dests(&self) -> usize {
        self.slots.len()
    }

    /// Number of receive ports.
    pub fn ports(&self) -> usize {
        self.ports.len()
    }

    /// Frames sent before this time (monotonic ns) are stale.
    pub fn epoch_ns(&self) -> u64 {
        self.epoch_ns
    }

    /// Session tag carried by this tracker's frames.
    pub fn session(&self) -> u8 {
        self.session
    }

    /// Bytes of per-destination state (20 per destination).
    pub fn memory_bytes(&self) -> usize {
        self.slots.len() * (std::mem::size_of::<Slot>() + std::mem::size_of::<AtomicU32>())
    }

    #[inline]
    fn rel(&self, t: u64) -> Option<u64> {
        let r = t.checked_sub(self.epoch_ns)?.checked_add(1)?;
        (r <= TIME_MAX).then_some(r)
    }

    #[inline]
    fn abs(&self, rel: u64) -> u64 {
        self.epoch_ns + rel - 1
    }

    /// Start a new pass: its number (passes of a tracker are numbered from 0 across every
    /// sender run on it).
    pub fn begin_pass(&self) -> u64 {
        self.next_pass.0.fetch_add(1, Ordering::AcqRel)
    }

    /// Passes started so far.
    pub fn passes_started(&self) -> u64 {
        self.next_pass.0.load(Ordering::Acquire)
    }

    /// The full pass number of a frame's 32-bit pass field: the one at or below the
    /// latest pass started. `None` for a pass not started yet.
    #[inline]
    fn expand_pass(&self, p: u32) -> Option<u64> {
        let next = self.next_pass.0.load(Ordering::Acquire);
        let behind = u64::from((next as u32).wrapping_sub(p));
        // behind == 0: the pass being started right now (its counter store raced us).
        if behind >= 1 << 31 || behind > next {
            return None;
        }
        Some(next - behind)
    }

    /// Record a frame for destination `dest`, sent at `sent_ns`, received on `port`: the
    /// one state update receivers make (exposed for tests and simulations). Lock-free;
    /// safe to call from any number of threads (< 256) at once.
    #[inline]
    pub fn record(&self, dest: usize, port: usize, sent_ns: u64) -> Recorded {
        let (Some(slot), Some(rel)) = (self.slots.get(dest), self.rel(sent_ns)) else {
            return Recorded::Rejected;
        };
        if port >= self.ports.len() {
            return Recorded::Rejected;
        }
        let p1 = port as u64 + 1;
        let mut cur = slot.newest.load(Ordering::Acquire);
        loop {
            let (last, gen, cport) = unpack(cur);
            if cport != 0 && rel <= last {
                return Recorded::Older;
            }
            let moved = cport != p1;
            let gen = if moved { gen.wrapping_add(1) } else { gen };
            let new = pack(rel, gen, p1);
            match slot
                .newest
                .compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    if moved {
                        // Moves are ordered by send time: the latest wins whatever order
                        // the publishes land in.
                        slot.moved.fetch_max(new, Ordering::Release);
                        return Recorded::Moved;
                    }
                    return Recorded::Refreshed;
                }
                Err(x) => cur = x,
            }
        }
    }

    /// Consistent read of one slot: (newest, moved) words with matching generations, or
    /// `None` in flux.
    #[inline]
    fn read(&self, slot: &Slot) -> (u64, Option<u64>) {
        let mut s = 0;
        for attempt in 0..READ_RETRIES {
            s = slot.newest.load(Ordering::Acquire);
            let c = slot.moved.load(Ordering::Acquire);
            if s & PORT_MASK == 0 {
                return (s, Some(0));
            }
            // Same generation and port: `moved` is the latest move.
            if (s ^ c) & ((GEN_MASK << PORT_BITS) | PORT_MASK) == 0 {
                return (s, Some(c));
            }
            if attempt < 32 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        (s, None)
    }

    /// The state of destination `i` (`None` out of range).
    pub fn dest(&self, i: usize) -> Option<DestState> {
        let slot = self.slots.get(i)?;
        Some(self.state_of(slot))
    }

    #[inline]
    fn state_of(&self, slot: &Slot) -> DestState {
        let (s, c) = self.read(slot);
        let (last, _, p1) = unpack(s);
        if p1 == 0 {
            return DestState {
                port: None,
                since_ns: 0,
                last_ns: 0,
                in_flux: false,
            };
        }
        let last_ns = self.abs(last);
        let (since_ns, in_flux) = match c {
            Some(c) => (self.abs(c >> TIME_SHIFT), false),
            None => (last_ns, true),
        };
        DestState {
            port: Some((p1 - 1) as usize),
            since_ns,
            last_ns,
            in_flux,
        }
    }

    /// Every destination's state, by index (allocates `24 × dests` bytes).
    pub fn snapshot(&self) -> Vec<DestState> {
        self.slots.iter().map(|s| self.state_of(s)).collect()
    }

    /// `Some(t)` when the newest frame of every destination arrived on `port` and was sent
    /// at or after `since_ns` (so state left by frames sent earlier, e.g. before a route
    /// change at `since_ns`, never counts): `t` is the latest change time, the moment from
    /// which traffic to every destination has been arriving on `port`. `t < since_ns`
    /// means no destination moved onto `port` after `since_ns`: the traffic was there
    /// already. `None` otherwise (some destination last seen elsewhere, never seen, not
    /// seen since `since_ns`, or being updated). Scans the destinations, stopping at the
    /// first unsettled one (scans resume from the start at each call).
    pub fn settled_on(&self, port: usize, since_ns: u64) -> Option<u64> {
        if port >= self.ports.len() {
            return None;
        }
        let p1 = port as u64 + 1;
        // Destinations last seen before the epoch do not exist: any since before it is
        // the same as the epoch.
        let since_rel = self.rel(since_ns.max(self.epoch_ns))?;
        let mut latest = 0u64;
        for slot in self.slots.iter() {
            let (s, c) = self.read(slot);
            let (last, _, sp) = unpack(s);
            let c = c?;
            if sp != p1 || last < since_rel {
                return None;
            }
            latest = latest.max(c >> TIME_SHIFT);
        }
        Some(self.abs(latest))
    }

    /// Poll [`Tracker::settled_on`] every millisecond until it returns a time or
    /// `timeout` passes.
    pub fn wait_settled_on(&self, port: usize, since_ns: u64, timeout: Duration) -> Option<u64> {
        let end = std::time::Instant::now() + timeout;
        loop {
            if let Some(t) = self.settled_on(port, since_ns) {
                return Some(t);
            }
            if std::time::Instant::now() >= end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Full scan: how many destinations are settled on `port` (as
    /// [`Tracker::settled_on`] defines it), elsewhere, not seen since `since_ns`, never
    /// seen. For progress reports while converging.
    pub fn settle_status(&self, port: usize, since_ns: u64) -> SettleStatus {
        let mut st = SettleStatus::default();
        let p1 = port as u64 + 1;
        let since_rel = self.rel(since_ns.max(self.epoch_ns)).unwrap_or(u64::MAX);
        let mut latest = None;
        for (i, slot) in self.slots.iter().enumerate() {
            let (s, c) = self.read(slot);
            let (last, _, sp) = unpack(s);
            let settled = match (sp, c) {
                (0, _) => {
                    st.never_seen += 1;
                    false
                }
                (_, None) => {
                    st.in_flux += 1;
                    false
                }
                (sp, Some(_)) if sp != p1 => {
                    st.elsewhere += 1;
                    false
                }
                (_, Some(_)) if last < since_rel => {
                    st.not_since += 1;
                    false
                }
                (_, Some(c)) => {
                    st.settled += 1;
                    latest = latest.max(Some(c >> TIME_SHIFT));
                    true
                }
            };
            if !settled && st.first_unsettled.is_none() {
                st.first_unsettled = Some(i);
            }
        }
        st.latest_move_ns = latest.map(|r| self.abs(r));
        st
    }

    /// Indices of up to `limit` destinations never seen, and how many there are.
    pub fn never_seen(&self, limit: usize) -> (usize, Vec<usize>) {
        let mut n = 0;
        let mut v = Vec::new();
        for (i, slot) in self.slots.iter().enumerate() {
            if slot.newest.load(Ordering::Acquire) & PORT_MASK == 0 {
                n += 1;
                if v.len() < limit {
                    v.push(i);
                }
            }
        }
        (n, v)
    }

    /// Counters, and the number of destinations never seen (a scan).
    pub fn counts(&self) -> SweepCounts {
        let ports: Vec<PortCounts> = self
            .ports
            .iter()
            .map(|p| PortCounts {
                rx: p.rx.load(Ordering::Relaxed),
                foreign: p.foreign.load(Ordering::Relaxed),
                stale: p.stale.load(Ordering::Relaxed),
                older: p.older.load(Ordering::Relaxed),
                moves: p.moves.load(Ordering::Relaxed),
            })
            .collect();
        SweepCounts {
            tx: self.tx.0.load(Ordering::Relaxed),
            rx: ports.iter().map(|p| p.rx).sum(),
            foreign: ports.iter().map(|p| p.foreign).sum(),
            stale: ports.iter().map(|p| p.stale).sum(),
            older: ports.iter().map(|p| p.older).sum(),
            ports,
            never_seen: self.never_seen(0).0,
        }
    }

    /// Start counting frames per destination from the next pass on (for [`verify`]):
    /// clears the per-destination counters and returns the first pass counted. Frames of
    /// earlier passes, still arriving, are not counted. Call with no sender running.
    pub fn begin_counting(&self) -> u64 {
        self.count_from.store(u64::MAX, Ordering::SeqCst);
        for c in self.rx_per_dest.iter() {
            c.store(0, Ordering::Relaxed);
        }
        let from = self.passes_started();
        self.count_from.store(from, Ordering::SeqCst);
        from
    }

    /// Frames of destination `i` received since [`Tracker::begin_counting`].
    pub fn dest_rx(&self, i: usize) -> u32 {
        self.rx_per_dest
            .get(i)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Frames counted per destination since [`Tracker::begin_counting`], all ports.
    pub fn counted(&self) -> u64 {
        self.ports
            .iter()
            .map(|p| p.counted.load(Ordering::Relaxed))
            .sum()
    }

    fn add_tx(&self, n: u64) {
        if n > 0 {
            self.tx.0.fetch_add(n, Ordering::Relaxed);
        }
    }

    fn add_port(&self, k: usize, c: &LocalCounts) {
        let p = &self.ports[k];
        for (cell, v) in [
            (&p.rx, c.rx),
            (&p.foreign, c.foreign),
            (&p.stale, c.stale),
            (&p.older, c.older),
            (&p.moves, c.moves),
            (&p.counted, c.counted),
        ] {
            if v > 0 {
                cell.fetch_add(v, Ordering::Relaxed);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Sender
// ---------------------------------------------------------------------------------------

/// When a sender run ends (besides its stop flag).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendLimit {
    /// Stop at this monotonic time (ns).
    pub deadline_ns: Option<u64>,
    /// Stop after this many complete passes.
    pub passes: Option<u64>,
}

/// What a sender did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SenderStats {
    /// Frames sent (accepted by the port).
    pub tx: u64,
    /// Schedule slots given up because the sender or port fell more than `max_lag` behind.
    pub tx_skipped: u64,
    /// Bursts cut short by the port (the rest was retried).
    pub port_full: u64,
    /// Bursts cut short because the packet memory had no free frame.
    pub no_buffer: u64,
    /// Passes completed.
    pub passes: u64,
    /// Number of the first pass this sender started (`None`: it sent nothing).
    pub first_pass: Option<u64>,
    /// Next destination of the unfinished pass (0 when the last pass is complete).
    pub position: usize,
    /// Time of the first and of the latest poll, monotonic ns.
    pub start_ns: u64,
    /// See `start_ns`.
    pub end_ns: u64,
    /// `tx / (end − start)`, frames/s.
    pub tx_pps: f64,
}

/// The sending side, driven by [`Sender::poll`] (any clock) or [`run_sender`].
pub struct Sender<'a> {
    cfg: &'a SweepConfig,
    tracker: &'a Tracker,
    tpl: [FrameTemplate; 2],
    rate_m: u128,
    lag: u64,
    max_passes: Option<u64>,
    start: Option<u64>,
    slots: u64,
    next: usize,
    pass: Option<u64>,
    last_ts: u64,
    pkts: Vec<Pkt>,
    stats: SenderStats,
}

impl std::fmt::Debug for Sender<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("dests", &self.cfg.dests.len())
            .field("rate_pps", &self.cfg.rate_pps)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<'a> Sender<'a> {
    /// A sender for `cfg` recording into `tracker` (which must have as many destinations).
    /// Builds the frame templates; the schedule starts at the first poll.
    pub fn new(cfg: &'a SweepConfig, tracker: &'a Tracker) -> Result<Sender<'a>> {
        cfg.validate()?;
        if cfg.dests.len() != tracker.dests() {
            bail!(
                "{} destinations configured but the tracker has {}",
                cfg.dests.len(),
                tracker.dests()
            );
        }
        let rate_m = (cfg.rate_pps * 1000.0).round().max(1.0) as u128;
        let lag =
            ((cfg.max_lag.as_nanos() * rate_m / 1_000_000_000_000) as u64).max(cfg.burst as u64);
        Ok(Sender {
            cfg,
            tracker,
            tpl: [
                FrameTemplate::new(false, cfg.frame_size(false), cfg),
                FrameTemplate::new(true, cfg.frame_size(true), cfg),
            ],
            rate_m,
            lag,
            max_passes: None,
            start: None,
            slots: 0,
            next: 0,
            pass: None,
            last_ts: 0,
            pkts: vec![Pkt::default(); VECTOR_SIZE],
            stats: SenderStats::default(),
        })
    }

    /// Stop after `passes` complete passes ([`Sender::done`] turns true).
    pub fn limit_passes(&mut self, passes: Option<u64>) {
        self.max_passes = passes;
    }

    /// Whether the pass limit is reached.
    pub fn done(&self) -> bool {
        self.max_passes.is_some_and(|m| self.stats.passes >= m)
    }

    /// Fail when the largest frame does not fit a frame of `mem` after the headroom.
    pub fn check_memory<M: PacketMemory>(&self, mem: &mut M) -> Result<()> {
        let need = self.tpl.iter().map(|t| t.bytes.len()).max().unwrap_or(0);
        let Some(probe) = mem.alloc_for(need) else {
            bail!("packet memory has no free frame for {need}-byte frames");
        };
        let cap = mem.frame(probe).len().saturating_sub(HEADROOM);
        mem.free(probe);
        if need > cap {
            bail!(
                "{}-byte sweep frames do not fit the packet memory's frames ({} bytes after headroom)",
                need + FCS_LEN,
                cap
            );
        }
        Ok(())
    }

    /// Counters so far.
    pub fn stats(&self) -> SenderStats {
        let mut s = self.stats;
        s.position = self.next;
        let el = s.end_ns.saturating_sub(s.start_ns);
        s.tx_pps = if el > 0 {
            s.tx as f64 * 1e9 / el as f64
        } else {
            0.0
        };
        s
    }

    /// Send the frames due at `now_ns` (the schedule starts at the first call): at most
    /// `burst` per call, in destination order, each stamped with its own strictly
    /// increasing time ≥ `now_ns`. Returns how many the port accepted.
    pub fn poll<M: PacketMemory, P: Port<M>>(
        &mut self,
        mem: &mut M,
        port: &mut P,
        now_ns: u64,
    ) -> usize {
        let start = match self.start {
            Some(s) => s,
            None => {
                self.start = Some(now_ns);
                self.stats.start_ns = now_ns;
                now_ns
            }
        };
        self.stats.end_ns = now_ns;
        if self.done() {
            return 0;
        }
        let el = u128::from(now_ns.saturating_sub(start));
        let due = (el * self.rate_m / 1_000_000_000_000) as u64 + 1;
        if due.saturating_sub(self.slots) > self.lag {
            let give_up = due - self.slots - self.lag;
            self.stats.tx_skipped += give_up;
            self.slots += give_up;
        }
        let n_dests = self.cfg.dests.len();
        let mut budget = (due.saturating_sub(self.slots) as usize).min(self.cfg.burst);
        if let Some(m) = self.max_passes {
            let sent = u128::from(self.stats.passes) * n_dests as u128 + self.next as u128;
            let left = (u128::from(m) * n_dests as u128).saturating_sub(sent);
            budget = budget.min(left.min(usize::MAX as u128) as usize);
        }
        let mut total = 0;
        while budget > 0 {
            let pass = match self.pass {
                Some(p) => p,
                None => {
                    let p = self.tracker.begin_pass();
                    self.pass = Some(p);
                    self.stats.first_pass.get_or_insert(p);
                    p
                }
            };
            let chunk = budget.min(n_dests - self.next);
            let mut k = 0;
            while k < chunk {
                let d = self.next + k;
                let (v6, dst) = addr_u128(self.cfg.dests[d]);
                let Some(buf) = mem.alloc_for(self.tpl[usize::from(v6)].bytes.len()) else {
                    self.stats.no_buffer += 1;
                    break;
                };
                let ts = now_ns.max(self.last_ts + 1);
                self.last_ts = ts;
                let sig = SweepSignature {
                    session: self.tracker.session,
                    dest: d as u32,
                    pass: pass as u32,
                    timestamp_ns: ts,
                };
                let t = &self.tpl[usize::from(v6)];
                let frame = mem.frame_mut(buf);
                let len = t.fill(&mut frame[HEADROOM..], dst, sweep_src_port(d), &sig);
                self.pkts[k] = Pkt::new(buf, HEADROOM as u16, len as u16, 0);
                k += 1;
            }
            if k == 0 {
                break;
            }
            let sent = port.tx_burst(mem, &self.pkts[..k]).min(k);
            total += sent;
            budget -= sent;
            self.next += sent;
            self.slots += sent as u64;
            self.stats.tx += sent as u64;
            if self.next == n_dests {
                self.next = 0;
                self.pass = None;
                self.stats.passes += 1;
            }
            if sent < k {
                self.stats.port_full += 1;
                break;
            }
            if k < chunk {
                break;
            }
        }
        self.tracker.add_tx(total as u64);
        total
    }

    /// Nanoseconds from `now_ns` until the next slot is due (0: due now).
    fn until_due(&self, now_ns: u64) -> u64 {
        let Some(start) = self.start else { return 0 };
        let at = start as u128 + u128::from(self.slots) * 1_000_000_000_000 / self.rate_m;
        (at.saturating_sub(u128::from(now_ns))).min(u128::from(u64::MAX)) as u64
    }
}

/// Send round robin over `cfg.dests` at `cfg.rate_pps` on `port` until `stop` is set or
/// `limit` is reached, on the monotonic clock. Each frame's signature carries the
/// destination index, the pass and the send time; frames are counted in `tracker`. When
/// the next frame is due more than 200 µs ahead the thread sleeps a little (low rates
/// leave the core to others); otherwise it spins.
pub fn run_sender<M: PacketMemory, P: Port<M>>(
    cfg: &SweepConfig,
    mem: &mut M,
    port: &mut P,
    tracker: &Tracker,
    stop: &AtomicBool,
    limit: SendLimit,
) -> Result<SenderStats> {
    sender_loop(
        cfg,
        mem,
        port,
        tracker,
        stop,
        limit,
        &mut MonotonicClock,
        true,
        &mut |_, _| 0,
    )
}

/// [`run_sender`] on any clock (never sleeps).
pub fn run_sender_with_clock<M: PacketMemory, P: Port<M>, C: Clock>(
    cfg: &SweepConfig,
    mem: &mut M,
    port: &mut P,
    tracker: &Tracker,
    stop: &AtomicBool,
    limit: SendLimit,
    clock: &mut C,
) -> Result<SenderStats> {
    sender_loop(
        cfg,
        mem,
        port,
        tracker,
        stop,
        limit,
        clock,
        false,
        &mut |_, _| 0,
    )
}

/// Extra work done on the sender's thread at each loop iteration (e.g. polling receive
/// ports that share its packet memory); returns how much it did (0: idle).
pub type Hook<'h, M, C> = &'h mut dyn FnMut(&mut M, &mut C) -> usize;

#[allow(clippy::too_many_arguments)]
fn sender_loop<M: PacketMemory, P: Port<M>, C: Clock>(
    cfg: &SweepConfig,
    mem: &mut M,
    port: &mut P,
    tracker: &Tracker,
    stop: &AtomicBool,
    limit: SendLimit,
    clock: &mut C,
    may_sleep: bool,
    hook: Hook<'_, M, C>,
) -> Result<SenderStats> {
    let mut s = Sender::new(cfg, tracker)?;
    s.check_memory(mem)?;
    s.limit_passes(limit.passes);
    loop {
        if stop.load(Ordering::Relaxed) || s.done() {
            break;
        }
        let now = clock.now_ns();
        if limit.deadline_ns.is_some_and(|d| now >= d) {
            break;
        }
        let work = s.poll(mem, port, now) + hook(mem, clock);
        if work == 0 {
            let wait = s.until_due(now);
            if may_sleep && wait > 200_000 {
                std::thread::sleep(Duration::from_nanos((wait / 2).min(1_000_000)));
            } else {
                std::hint::spin_loop();
            }
        }
    }
    s.stats.end_ns = clock.now_ns();
    Ok(s.stats())
}

// ---------------------------------------------------------------------------------------
// Receiver
// ---------------------------------------------------------------------------------------

#[derive(Default)]
struct LocalCounts {
    rx: u64,
    foreign: u64,
    stale: u64,
    older: u64,
    moves: u64,
    counted: u64,
}

/// A validated frame of the current burst.
#[derive(Clone, Copy, Default)]
struct Parsed {
    dest: u32,
    ts: u64,
    pass: u64,
}

/// The receiving side of port `k`, driven by [`Receiver::poll`] or [`run_receiver`].
pub struct Receiver<'a> {
    tracker: &'a Tracker,
    k: usize,
    v: Box<Vector>,
    parsed: Vec<Parsed>,
}

impl std::fmt::Debug for Receiver<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("port", &self.k)
            .finish_non_exhaustive()
    }
}

impl<'a> Receiver<'a> {
    /// Receiver for port index `k` of `tracker`.
    pub fn new(tracker: &'a Tracker, k: usize) -> Result<Receiver<'a>> {
        if k >= tracker.ports() {
            bail!(
                "receive port {k} out of range: the tracker has {} ports",
                tracker.ports()
            );
        }
        Ok(Receiver {
            tracker,
            k,
            v: Box::default(),
            parsed: Vec::with_capacity(VECTOR_SIZE),
        })
    }

    /// Validate one frame (its bytes from the Ethernet header); `Ok` with the destination,
    /// send time and full pass for a valid frame of this tracker.
    #[inline]
    fn check(&self, frame: &[u8], now_ns: u64) -> Result<Parsed, Outcome> {
        let t = self.tracker;
        let Some(sig) = SweepSignature::parse(frame) else {
            return Err(Outcome::Foreign);
        };
        if sig.session != t.session || sig.timestamp_ns < t.epoch_ns {
            return Err(Outcome::Stale);
        }
        if sig.dest as usize >= t.dests()
            || sig.timestamp_ns > now_ns.saturating_add(FUTURE_SLACK_NS)
        {
            return Err(Outcome::Foreign);
        }
        let Some(pass) = t.expand_pass(sig.pass) else {
            return Err(Outcome::Foreign);
        };
        if t.rel(sig.timestamp_ns).is_none() {
            return Err(Outcome::Foreign);
        }
        Ok(Parsed {
            dest: sig.dest,
            ts: sig.timestamp_ns,
            pass,
        })
    }

    #[inline]
    fn apply(&self, p: Parsed, c: &mut LocalCounts) -> Recorded {
        let t = self.tracker;
        let r = t.record(p.dest as usize, self.k, p.ts);
        match r {
            Recorded::Moved => c.moves += 1,
            Recorded::Older => c.older += 1,
            Recorded::Refreshed | Recorded::Rejected => {}
        }
        c.rx += 1;
        if p.pass >= t.count_from.load(Ordering::Relaxed) {
            t.rx_per_dest[p.dest as usize].fetch_add(1, Ordering::Relaxed);
            c.counted += 1;
        }
        r
    }

    /// Account one frame received at `now_ns` (what [`Receiver::poll`] does per frame).
    /// Never panics, whatever the bytes.
    pub fn account(&self, frame: &[u8], now_ns: u64) -> Outcome {
        let mut c = LocalCounts::default();
        let o = match self.check(frame, now_ns) {
            Ok(p) => Outcome::Recorded(self.apply(p, &mut c)),
            Err(o) => {
                match o {
                    Outcome::Stale => c.stale += 1,
                    _ => c.foreign += 1,
                }
                o
            }
        };
        self.tracker.add_port(self.k, &c);
        o
    }

    /// One receive burst: parse, record and free every frame (the clock is read once,
    /// after the burst arrived). Returns the number of frames received.
    pub fn poll<M: PacketMemory, P: Port<M>, C: Clock>(
        &mut self,
        mem: &mut M,
        port: &mut P,
        clock: &mut C,
    ) -> usize {
        self.v.len = 0;
        let n = port.rx_burst(mem, &mut self.v);
        if n == 0 {
            return 0;
        }
        let now = clock.now_ns();
        let mut c = LocalCounts::default();
        self.parsed.clear();
        for i in 0..self.v.len {
            let p = self.v.pkts[i];
            let off = usize::from(p.off);
            let data = mem
                .frame(p.buf)
                .get(off..off + usize::from(p.len))
                .unwrap_or(&[]);
            match self.check(data, now) {
                Ok(x) => {
                    // The state of a random destination is a cache miss: start loading it
                    // while the rest of the burst is parsed.
                    prefetch(&self.tracker.slots[x.dest as usize] as *const Slot as *const u8);
                    self.parsed.push(x);
                }
                Err(Outcome::Stale) => c.stale += 1,
                Err(_) => c.foreign += 1,
            }
            mem.free(p.buf);
        }
        self.v.len = 0;
        for &x in &self.parsed {
            self.apply(x, &mut c);
        }
        self.tracker.add_port(self.k, &c);
        n
    }
}

/// Receive on `port` as receive port `k` of `tracker` until `stop` is set: every frame is
/// parsed, validated and recorded, then freed. No allocation per packet; after 64 empty
/// polls in a row the thread yields between polls.
pub fn run_receiver<M: PacketMemory, P: Port<M>>(
    mem: &mut M,
    port: &mut P,
    k: usize,
    tracker: &Tracker,
    stop: &AtomicBool,
) -> Result<()> {
    let mut r = Receiver::new(tracker, k)?;
    let mut clock = MonotonicClock;
    let mut idle = 0u32;
    while !stop.load(Ordering::Relaxed) {
        if r.poll(mem, port, &mut clock) == 0 {
            idle = idle.saturating_add(1);
            if idle > 64 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        } else {
            idle = 0;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Verification
// ---------------------------------------------------------------------------------------

/// How to verify.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerifyPlan {
    /// Full passes to send.
    pub passes: u64,
    /// After sending, wait at most this long for frames still in flight (frames arriving
    /// later count as lost: on a loaded host a descheduled receiver can be seconds late).
    pub drain: Duration,
    /// List at most this many lossy destinations in the report.
    pub max_listed: usize,
}

impl VerifyPlan {
    /// `passes` passes, drain 2 s (as RFC 2544; the wait ends as soon as every frame
    /// sent is in), list up to 1000 destinations.
    pub fn new(passes: u64) -> VerifyPlan {
        VerifyPlan {
            passes,
            drain: Duration::from_secs(2),
            max_listed: 1000,
        }
    }
}

/// Loss of one destination.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestLoss {
    /// Destination index.
    pub index: usize,
    /// Its address.
    pub addr: IpAddr,
    /// Frames sent to it.
    pub sent: u64,
    /// Frames received (all ports).
    pub received: u64,
}

/// Result of [`verify`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VerifyReport {
    /// Destinations.
    pub dests: usize,
    /// Complete passes sent.
    pub passes: u64,
    /// Frames sent.
    pub tx: u64,
    /// Frames received (valid, of the verification's passes, all ports).
    pub rx: u64,
    /// Sum over destinations of the frames sent but not received.
    pub lost: u64,
    /// Sum over destinations of the frames received beyond those sent.
    pub duplicates: u64,
    /// Destinations that lost at least one frame.
    pub dests_with_loss: usize,
    /// Destinations sent to that received nothing.
    pub dests_never_received: usize,
    /// Up to `max_listed` destinations with loss, by index.
    pub lossy: Vec<DestLoss>,
    /// Foreign and stale frames received during the verification.
    pub foreign: u64,
    /// See `foreign`.
    pub stale: u64,
    /// The sender's counters.
    pub sender: SenderStats,
}

/// Send `plan.passes` full passes on `port` (monotonic clock, paced as [`run_sender`])
/// while receivers run on other threads ([`run_receiver`] on the same tracker), wait for
/// the stragglers (at most `plan.drain`), and report loss per destination. Uses the
/// tracker's per-destination counters: one verification at a time per tracker, and no
/// other sender meanwhile.
pub fn verify<M: PacketMemory, P: Port<M>>(
    cfg: &SweepConfig,
    mem: &mut M,
    port: &mut P,
    tracker: &Tracker,
    plan: &VerifyPlan,
    stop: &AtomicBool,
) -> Result<VerifyReport> {
    let mut clock = MonotonicClock;
    verify_impl(
        cfg,
        mem,
        port,
        tracker,
        plan,
        stop,
        &mut clock,
        true,
        &mut |_, _| 0,
    )
}

/// [`verify`] on any clock, with `hook` called at every loop iteration on this thread
/// (e.g. to poll receive ports sharing `mem`, for a single-threaded run); never sleeps.
#[allow(clippy::too_many_arguments)]
pub fn verify_with<M: PacketMemory, P: Port<M>, C: Clock>(
    cfg: &SweepConfig,
    mem: &mut M,
    port: &mut P,
    tracker: &Tracker,
    plan: &VerifyPlan,
    stop: &AtomicBool,
    clock: &mut C,
    hook: Hook<'_, M, C>,
) -> Result<VerifyReport> {
    verify_impl(cfg, mem, port, tracker, plan, stop, clock, false, hook)
}

#[allow(clippy::too_many_arguments)]
fn verify_impl<M: PacketMemory, P: Port<M>, C: Clock>(
    cfg: &SweepConfig,
    mem: &mut M,
    port: &mut P,
    tracker: &Tracker,
    plan: &VerifyPlan,
    stop: &AtomicBool,
    clock: &mut C,
    may_sleep: bool,
    hook: Hook<'_, M, C>,
) -> Result<VerifyReport> {
    if plan.passes == 0 {
        bail!("verification needs at least one pass");
    }
    let before = tracker.counts();
    tracker.begin_counting();
    // Counting restarts at a pass no frame was sent for yet: nothing is counted before
    // the sender starts.
    let counted0 = tracker.counted();
    let limit = SendLimit {
        deadline_ns: None,
        passes: Some(plan.passes),
    };
    let sender = sender_loop(
        cfg, mem, port, tracker, stop, limit, clock, may_sleep, &mut *hook,
    )?;
    let drain_end = clock.now_ns().saturating_add(plan.drain.as_nanos() as u64);
    loop {
        let got = tracker.counted().saturating_sub(counted0);
        if got >= sender.tx || stop.load(Ordering::Relaxed) {
            break;
        }
        if hook(mem, clock) == 0 {
            if may_sleep {
                std::thread::sleep(Duration::from_micros(100));
            } else {
                std::hint::spin_loop();
            }
        }
        if clock.now_ns() >= drain_end {
            break;
        }
    }
    let after = tracker.counts();
    let mut r = VerifyReport {
        dests: cfg.dests.len(),
        passes: sender.passes,
        tx: sender.tx,
        foreign: after.foreign - before.foreign,
        stale: after.stale - before.stale,
        sender,
        ..Default::default()
    };
    for (i, addr) in cfg.dests.iter().enumerate() {
        let sent = sender.passes + u64::from(i < sender.position);
        let got = u64::from(tracker.dest_rx(i));
        r.rx += got;
        if got < sent {
            r.lost += sent - got;
            r.dests_with_loss += 1;
            if got == 0 {
                r.dests_never_received += 1;
            }
            if r.lossy.len() < plan.max_listed {
                r.lossy.push(DestLoss {
                    index: i,
                    addr: *addr,
                    sent,
                    received: got,
                });
            }
        } else {
            r.duplicates += got - sent;
        }
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::VirtualClock;
    use crate::testing::loop_pair;
    use dataplane::Arena;
    use wire::checksum::{pseudo_v4, pseudo_v6};
    use wire::{EthernetFrame, Ipv4Packet, Ipv6Packet, UdpPacket};

    fn cfg(dests: Vec<IpAddr>) -> SweepConfig {
        SweepConfig::new(
            [2, 0, 0, 0, 0, 1],
            [2, 0, 0, 0, 1, 1],
            "198.18.0.2".parse().unwrap(),
            "2001:2::2".parse().unwrap(),
            dests,
            1e6,
        )
    }

    fn mixed(n: u32) -> Vec<IpAddr> {
        (0..n)
            .map(|i| {
                if i % 3 == 2 {
                    IpAddr::V6(Ipv6Addr::from(
                        0x2001_0db8_u128 << 96 | u128::from(i) << 64 | 1,
                    ))
                } else {
                    IpAddr::V4(Ipv4Addr::from(0x0a00_0001 + (i << 8)))
                }
            })
            .collect()
    }

    #[test]
    fn frames_have_valid_checksums_and_round_trip() {
        for (frame_len, n) in [(0u16, 6u32), (84, 6), (128, 6), (1518, 6), (64, 2)] {
            let mut c = cfg(mixed(n));
            c.frame_len = frame_len;
            c.validate().unwrap();
            for d in 0..n {
                for (pass, ts) in [
                    (0u32, 1u64),
                    (0xffff_ffff, u64::MAX),
                    (7, 0x0123_4567_89ab_cdef),
                ] {
                    let sig = SweepSignature {
                        session: 0xa5,
                        dest: d,
                        pass,
                        timestamp_ns: ts,
                    };
                    let f = build_frame(&c, &sig).unwrap();
                    let v6 = c.dests[d as usize].is_ipv6();
                    assert_eq!(f.len() + FCS_LEN, usize::from(c.frame_size(v6)));
                    assert_eq!(SweepSignature::parse(&f), Some(sig));
                    let eth = EthernetFrame::new_checked(&f[..]).unwrap();
                    let (u, ps) = if v6 {
                        let ip = Ipv6Packet::new_checked(eth.payload()).unwrap();
                        assert_eq!(
                            IpAddr::V6(Ipv6Addr::from(ip.dst_addr())),
                            c.dests[d as usize]
                        );
                        let u = UdpPacket::new_checked(ip.payload()).unwrap();
                        let ps = pseudo_v6(&ip.src_addr(), &ip.dst_addr(), 17, u32::from(u.len()));
                        (ip.payload().to_vec(), ps)
                    } else {
                        let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
                        assert!(ip.verify_checksum());
                        assert_eq!(
                            IpAddr::V4(Ipv4Addr::from(ip.dst_addr())),
                            c.dests[d as usize]
                        );
                        let u = UdpPacket::new_checked(ip.payload()).unwrap();
                        let ps = pseudo_v4(ip.src_addr(), ip.dst_addr(), 17, u.len());
                        (ip.payload().to_vec(), ps)
                    };
                    let u = UdpPacket::new_checked(&u[..]).unwrap();
                    assert!(u.checksum() != 0 && u.verify_checksum(ps));
                    assert_eq!(u.dst_port(), SWEEP_UDP_PORT);
                    assert_eq!(u.src_port(), sweep_src_port(d as usize));
                }
            }
        }
        let mut c = cfg(mixed(3));
        c.frame_len = 78;
        assert!(c.validate().is_err(), "IPv6 needs 84 bytes");
        c.dests.truncate(2);
        c.validate().unwrap();
        c.src_v4 = Ipv4Addr::UNSPECIFIED;
        assert!(c.validate().is_err());
    }

    #[test]
    fn record_orders_by_send_time_and_tracks_moves() {
        let t = Tracker::with_epoch(4, 2, 1000, 1).unwrap();
        assert_eq!(t.dest(0).unwrap().port, None);
        assert_eq!(t.record(0, 0, 2000), Recorded::Moved);
        assert_eq!(t.record(0, 0, 3000), Recorded::Refreshed);
        assert_eq!(t.record(0, 0, 3000), Recorded::Older, "duplicate");
        assert_eq!(
            t.record(0, 1, 2500),
            Recorded::Older,
            "overtaken on another port"
        );
        let s = t.dest(0).unwrap();
        assert_eq!(
            (s.port, s.since_ns, s.last_ns, s.in_flux),
            (Some(0), 2000, 3000, false)
        );
        assert_eq!(t.record(0, 1, 4000), Recorded::Moved);
        assert_eq!(t.record(0, 1, 5000), Recorded::Refreshed);
        assert_eq!(
            t.record(0, 0, 3500),
            Recorded::Older,
            "stale frame of the old path"
        );
        let s = t.dest(0).unwrap();
        assert_eq!((s.port, s.since_ns, s.last_ns), (Some(1), 4000, 5000));
        // Out of range: destination, port, before the epoch, beyond 2^52 ns.
        assert_eq!(t.record(4, 0, 2000), Recorded::Rejected);
        assert_eq!(t.record(0, 2, 9000), Recorded::Rejected);
        assert_eq!(t.record(1, 0, 999), Recorded::Rejected);
        assert_eq!(t.record(1, 0, 1000 + (1 << 52)), Recorded::Rejected);
        assert_eq!(
            t.record(1, 0, 1000),
            Recorded::Moved,
            "the epoch itself counts"
        );
        assert_eq!(t.dest(1).unwrap().since_ns, 1000);
        // 300 moves wrap the 8-bit generation; state stays consistent.
        for i in 0..300u64 {
            assert_eq!(t.record(2, (i % 2) as usize, 10_000 + i), Recorded::Moved);
        }
        let s = t.dest(2).unwrap();
        assert_eq!(
            (s.port, s.since_ns, s.last_ns, s.in_flux),
            (Some(1), 10_299, 10_299, false)
        );
    }

    #[test]
    fn settled_on_needs_every_destination_seen_since() {
        let t = Tracker::with_epoch(3, 2, 0, 1).unwrap();
        assert_eq!(t.settled_on(0, 0), None, "never seen");
        for d in 0..3 {
            t.record(d, 0, 100 + d as u64);
        }
        assert_eq!(t.settled_on(0, 0), Some(102));
        assert_eq!(t.settled_on(0, 101), None, "dest 0 not seen since 101");
        assert_eq!(t.settled_on(1, 0), None);
        assert_eq!(t.settled_on(7, 0), None);
        for d in 0..3 {
            t.record(d, 0, 200 + d as u64);
        }
        assert_eq!(t.settled_on(0, 101), Some(102));
        assert_eq!(
            t.settled_on(0, 150),
            Some(102),
            "no move after 150: t < since"
        );
        for d in 0..3 {
            t.record(d, 1, 300 + 10 * d as u64);
        }
        assert_eq!(t.settled_on(1, 250), Some(320));
        let st = t.settle_status(0, 250);
        assert_eq!(
            (st.settled, st.elsewhere, st.first_unsettled),
            (0, 3, Some(0))
        );
        let st = t.settle_status(1, 315);
        assert_eq!(
            (st.settled, st.not_since, st.latest_move_ns),
            (1, 2, Some(320))
        );
    }

    #[test]
    fn concurrent_receivers_keep_the_newest_frame() {
        // Two "receivers" on different ports record, at the same time, frames i = 0, 1, ...
        // of destination i % N sent at 10 i + offset, the offset depending on the port and
        // the destination's parity: the ports race on every destination all along, and
        // moves keep happening. A reader checks every snapshot meanwhile. Whatever the
        // interleaving, the newest frame (largest time) decides the final port, and the
        // change time is the time of a frame on that port.
        const N: usize = 64;
        const FRAMES: u64 = 50_000;
        let off = |port: usize, d: usize| -> u64 {
            if (port + d) & 1 == 0 {
                7
            } else {
                2
            }
        };
        let t = Tracker::with_epoch(N, 2, 0, 1).unwrap();
        let stop = AtomicBool::new(false);
        let moves = AtomicU64::new(0);
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                // At least one pass, even if the scheduler runs both writers to the end
                // before this thread starts (two cores, three threads).
                let mut reads = 0u64;
                loop {
                    for st in t.snapshot() {
                        if st.port.is_some() {
                            assert!(st.since_ns <= st.last_ns, "{st:?}");
                        }
                    }
                    reads += 1;
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
                reads
            });
            let writers: Vec<_> = (0..2usize)
                .map(|port| {
                    let (t, moves) = (&t, &moves);
                    s.spawn(move || {
                        for i in 0..FRAMES {
                            let d = i as usize % N;
                            if t.record(d, port, 10 * i + off(port, d)) == Recorded::Moved {
                                moves.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    })
                })
                .collect();
            for w in writers {
                w.join().unwrap();
            }
            stop.store(true, Ordering::Relaxed);
            assert!(reader.join().unwrap() > 0);
        });
        assert!(moves.load(Ordering::Relaxed) >= N as u64);
        for d in 0..N {
            let st = t.dest(d).unwrap();
            let i_max = (0..FRAMES).filter(|i| *i as usize % N == d).max().unwrap();
            let winner = if d % 2 == 0 { 0 } else { 1 };
            assert!(!st.in_flux);
            assert_eq!(st.port, Some(winner), "dest {d}");
            assert_eq!(st.last_ns, 10 * i_max + 7, "dest {d}");
            assert!(st.since_ns <= st.last_ns);
            assert_eq!(
                st.since_ns % 10,
                7,
                "dest {d}: change time of a frame on the winner"
            );
        }
    }

    #[test]
    fn hostile_frames_are_counted_not_recorded() {
        let c = cfg(mixed(10));
        let t = Tracker::with_epoch(10, 1, 1_000, 9).unwrap();
        let r = Receiver::new(&t, 0).unwrap();
        assert!(Receiver::new(&t, 1).is_err());
        t.begin_pass();
        let now = 1_000_000;
        let sig = |dest: u32, session: u8, pass: u32, ts: u64| SweepSignature {
            session,
            dest,
            pass,
            timestamp_ns: ts,
        };
        let good = build_frame(&c, &sig(3, 9, 0, 5_000)).unwrap();
        assert_eq!(r.account(&good, now), Outcome::Recorded(Recorded::Moved));
        assert_eq!(r.account(&good, now), Outcome::Recorded(Recorded::Older));
        let mut cases: Vec<(Vec<u8>, Outcome)> = vec![
            (vec![], Outcome::Foreign),
            (good[..good.len() - 1].to_vec(), Outcome::Foreign),
            (good[..40].to_vec(), Outcome::Foreign),
            (
                build_frame(&c, &sig(3, 8, 0, 5_000)).unwrap(),
                Outcome::Stale,
            ),
            (build_frame(&c, &sig(3, 9, 0, 999)).unwrap(), Outcome::Stale),
            (
                build_frame(&c, &sig(3, 9, 0, now + FUTURE_SLACK_NS + 1)).unwrap(),
                Outcome::Foreign,
            ),
            (
                build_frame(&c, &sig(3, 9, 5, 6_000)).unwrap(),
                Outcome::Foreign,
            ),
        ];
        let mut wrong_magic = good.clone();
        wrong_magic[42] ^= 0x80;
        cases.push((wrong_magic, Outcome::Foreign));
        // Destination index 10 of a 10-destination tracker (frame built for a longer list).
        let long = cfg(mixed(11));
        cases.push((
            build_frame(&long, &sig(10, 9, 0, 6_000)).unwrap(),
            Outcome::Foreign,
        ));
        let mut generator_frame = good.clone();
        generator_frame[42..44].copy_from_slice(&crate::frame::MAGIC.to_be_bytes());
        cases.push((generator_frame, Outcome::Foreign));
        for (f, want) in &cases {
            assert_eq!(r.account(f, now), *want, "{f:?}");
        }
        let counts = t.counts();
        assert_eq!(
            (counts.rx, counts.older, counts.stale, counts.foreign),
            (2, 1, 2, 8)
        );
        assert_eq!(counts.never_seen, 9);
        assert_eq!(t.dest(3).unwrap().last_ns, 5_000);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let t = Tracker::with_epoch(16, 1, 0, 1).unwrap();
            let r = Receiver::new(&t, 0).unwrap();
            let _ = SweepSignature::parse(&bytes);
            let o = r.account(&bytes, u64::MAX);
            proptest::prop_assert!(o != Outcome::Recorded(Recorded::Rejected));
        }

        #[test]
        fn mutated_frames_never_panic(
            d in 0u32..6, cut in 0usize..100, flip in 0usize..100, bit in 0u8..8, v in proptest::num::u8::ANY
        ) {
            let c = cfg(mixed(6));
            let t = Tracker::with_epoch(6, 1, 0, 1).unwrap();
            t.begin_pass();
            let r = Receiver::new(&t, 0).unwrap();
            let mut f = build_frame(&c, &SweepSignature { session: 1, dest: d, pass: 0, timestamp_ns: 10 }).unwrap();
            let n = f.len();
            f[flip % n] ^= 1 << bit;
            f[(flip * 7) % n] = v;
            f.truncate(cut.min(n));
            let _ = r.account(&f, 1_000_000);
            let k = t.counts();
            proptest::prop_assert_eq!(k.rx + k.foreign + k.stale, 1);
        }
    }

    #[test]
    fn sender_paces_round_robin_and_counts_passes() {
        let c = cfg(mixed(50));
        let t = Tracker::with_epoch(50, 1, 0, 3).unwrap();
        let (mut a, mut b) = loop_pair(1 << 16);
        let mut mem = Arena::new(1 << 14);
        let mut clock = VirtualClock::new(1_000, 100);
        let stop = AtomicBool::new(false);
        // 1 Mpps for 1 ms (virtual): 1000 slots = 20 passes.
        let limit = SendLimit {
            deadline_ns: Some(1_000 + 1_000_000),
            passes: None,
        };
        let s = run_sender_with_clock(&c, &mut mem, &mut a, &t, &stop, limit, &mut clock).unwrap();
        assert!((999..=1001).contains(&s.tx), "{s:?}");
        assert_eq!(s.tx_skipped, 0);
        assert_eq!(s.passes, s.tx / 50);
        assert_eq!(t.counts().tx, s.tx);
        let mut v = Vector::default();
        let mut seen = Vec::new();
        loop {
            v.len = 0;
            if Port::<Arena>::rx_burst(&mut b, &mut mem, &mut v) == 0 {
                break;
            }
            for p in v.as_slice() {
                seen.push(SweepSignature::parse(mem.data(p)).unwrap());
                mem.free(p.buf);
            }
        }
        assert_eq!(seen.len() as u64, s.tx);
        for (i, sig) in seen.iter().enumerate() {
            assert_eq!(sig.dest as usize, i % 50);
            assert_eq!(u64::from(sig.pass), i as u64 / 50);
            if i > 0 {
                assert!(sig.timestamp_ns > seen[i - 1].timestamp_ns);
            }
        }
        // Pace: frame i is sent no earlier than its slot (i µs after the start).
        for (i, sig) in seen.iter().enumerate() {
            assert!(sig.timestamp_ns >= 1_000 + i as u64 * 1_000, "frame {i}");
            assert!(
                sig.timestamp_ns <= 1_000 + i as u64 * 1_000 + 2_000,
                "frame {i}"
            );
        }
        // A second run continues the pass numbering.
        let limit = SendLimit {
            deadline_ns: None,
            passes: Some(2),
        };
        let s2 = run_sender_with_clock(&c, &mut mem, &mut a, &t, &stop, limit, &mut clock).unwrap();
        assert_eq!(
            (s2.tx, s2.passes, s2.first_pass),
            (100, 2, Some(t.passes_started() - 2))
        );
    }

    #[test]
    fn a_lagging_sender_skips_slots_not_destinations() {
        let mut c = cfg(mixed(10));
        c.max_lag = Duration::from_micros(10);
        let t = Tracker::with_epoch(10, 1, 0, 3).unwrap();
        let (mut a, mut b) = loop_pair(1 << 16);
        let mut mem = Arena::new(1 << 12);
        let mut s = Sender::new(&c, &t).unwrap();
        assert_eq!(s.poll(&mut mem, &mut a, 1_000), 1);
        // 1 ms later: slot 1000 due, 999 behind, lag 32 frames (the burst): 968 given up,
        // 32 sent, in destination order.
        assert_eq!(s.poll(&mut mem, &mut a, 1_001_000), 32);
        let st = s.stats();
        assert_eq!(
            (st.tx, st.tx_skipped, st.passes, st.position),
            (33, 968, 3, 3)
        );
        let mut v = Vector::default();
        Port::<Arena>::rx_burst(&mut b, &mut mem, &mut v);
        let dests: Vec<u32> = v
            .as_slice()
            .iter()
            .map(|p| SweepSignature::parse(mem.data(p)).unwrap().dest)
            .collect();
        assert_eq!(dests, (0..33).map(|i| i % 10).collect::<Vec<u32>>());
    }
}
