//! The traffic generator and receiver: paced transmission of signed frames on one or two
//! ports and exact accounting of what comes back, on one core.
//!
//! # Rates and pacing
//! [`TrialConfig::rate_pps`] is the rate **per direction**: a bidirectional trial at
//! 1 Mpps sends 1 Mpps on port 0 (toward port 1) *and* 1 Mpps on port 1 (toward port 0),
//! 2 Mpps in aggregate. All rates in a [`TrialResult`] are **aggregates** over the active
//! directions (its [`streams`](TrialResult::streams) break them down).
//!
//! Each direction follows its own schedule: frame slot `k` is due at `start + k / rate`
//! and a trial has `floor(rate × duration)` slots per direction. Every loop iteration reads
//! the clock once, sends the slots that are due (at most [`TrialConfig::burst`] per
//! direction per iteration), then polls both ports once for received frames. The loop
//! never sleeps. When the port refuses frames (its ring is full), the unsent slots stay
//! due and are retried; when the generator falls more than [`TrialConfig::max_lag`] behind
//! schedule, the oldest due slots are given up and counted in
//! [`TrialResult::tx_skipped`], so the frames that were sent were sent at most `max_lag`
//! late. Transmission stops when every slot is consumed or the duration is over
//! (remaining slots are also counted as skipped): `tx_pps` is then what was really
//! offered. After that the generator keeps receiving for up to [`TrialConfig::drain`]
//! (it stops early once every sent frame has come back).
//!
//! # Accounting
//! Only frames carrying this trial's signature (see [`crate::frame`]) count; each is
//! matched against a bitmap of the sequence numbers sent in its direction, so
//! `lost = tx − unique received` exactly, duplicates are counted apart, and a frame whose
//! sequence is below the highest already seen in its stream (direction, family) counts
//! as reordered. Frames without a signature are `foreign`, frames of an earlier trial
//! `stale`, frames of this trial received on the port they were sent from (or on an idle
//! direction) `misdirected`; none of those count as received.
//!
//! Ports must send a prefix of each burst (`tx_burst` returning `n` means the first `n`
//! frames went out), as every backend in this project does: the sequence numbers of
//! refused frames are reused.

use std::time::Duration;

use anyhow::{bail, Result};
use dataplane::buffer::{PacketMemory, Pkt, Vector, HEADROOM, VECTOR_SIZE};
use dataplane::worker::Port;
use serde::{Deserialize, Serialize};

use crate::clock::{Clock, MonotonicClock};
use crate::flows::{Endpoints, FlowCursor, FlowSet};
use crate::frame::{stream_field, Signature, Template, DEFAULT_TTL, TAG_BITS};
use crate::latency::{LatencyHistogram, LatencyStats};
use crate::profile::{gbps_l1, Family, FrameKind, Profile};

/// Addresses of one direction of traffic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirectionConfig {
    /// Source MAC of the frames (the tester port's).
    pub src_mac: [u8; 6],
    /// Destination MAC (the DUT port's the frames enter).
    pub dst_mac: [u8; 6],
    /// IPv4 addresses and ports; required when the profile sends IPv4.
    pub v4: Option<Endpoints>,
    /// IPv6 addresses and ports; required when the profile sends IPv6.
    pub v6: Option<Endpoints>,
}

/// What to send: profile, flows and per-direction addresses. Fixed for a [`Generator`].
#[derive(Clone, Debug)]
pub struct TrafficConfig {
    /// Frame sizes and families.
    pub profile: Profile,
    /// Distinct 5-tuples per direction (1..=2^24). With a dual-stack profile they are split
    /// between the families in proportion to the IPv6 share (rounded, at least one per
    /// family sent); see [`TrafficConfig::flows_per_family`].
    pub flows: u32,
    /// Direction 0: sent on port 0, received on port 1.
    pub forward: DirectionConfig,
    /// Direction 1: sent on port 1, received on port 0 (needed for bidirectional trials).
    pub reverse: Option<DirectionConfig>,
    /// Seed of the size/family shuffle (same seed, same frame sequence).
    pub seed: u64,
    /// TTL / hop limit of the frames.
    pub ttl: u8,
    /// Fill the UDP checksum of IPv4 frames (optional in IPv4; IPv6 frames always have it).
    pub udp_checksum_v4: bool,
    /// Traffic classes (empty: one class, DSCP 0, not reported apart). Each direction's
    /// frame slots go to the classes in proportion to their weights, interleaved (a smooth
    /// weighted round robin, [`class_cycle`]): the frame of sequence number `seq` belongs
    /// to class `cycle[seq % cycle.len()]`, so the receiver knows every frame's class from
    /// its signature alone and nothing more goes on the wire. A class's frames carry its
    /// DSCP; [`TrialResult::classes`] counts each class apart.
    pub classes: Vec<TrafficClass>,
}

/// One traffic class of a trial (see [`TrafficConfig::classes`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrafficClass {
    /// Name, as results report it.
    pub name: String,
    /// DSCP of its frames (0-63).
    pub dscp: u8,
    /// Its share of the frame slots, relative to the other classes' weights (> 0).
    pub weight: u32,
}

/// Most traffic classes of a trial.
pub const MAX_CLASSES: usize = 16;

/// Most frame slots in one round of the class cycle (the weights' sum, divided by their
/// greatest common divisor).
pub const MAX_CLASS_CYCLE: u32 = 1 << 16;

/// The class of each frame slot in one round: a smooth weighted round robin of the
/// classes' weights (divided by their greatest common divisor), so each class's slots are
/// spread evenly over the round. `[0]` when there are no classes. Fails on more than
/// [`MAX_CLASSES`] classes, a DSCP above 63, a weight of 0, or a round longer than
/// [`MAX_CLASS_CYCLE`].
pub fn class_cycle(classes: &[TrafficClass]) -> Result<Vec<u8>> {
    if classes.is_empty() {
        return Ok(vec![0]);
    }
    if classes.len() > MAX_CLASSES {
        bail!("{} traffic classes: at most {MAX_CLASSES}", classes.len());
    }
    for c in classes {
        if c.dscp > 63 {
            bail!("traffic class {:?}: DSCP {} is not 0-63", c.name, c.dscp);
        }
        if c.weight == 0 {
            bail!(
                "traffic class {:?}: weight 0 (it would get no frames)",
                c.name
            );
        }
    }
    let gcd = |mut a: u32, mut b: u32| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let g = classes.iter().fold(0, |g, c| gcd(g, c.weight));
    let w: Vec<u64> = classes.iter().map(|c| u64::from(c.weight / g)).collect();
    let total: u64 = w.iter().sum();
    if total > u64::from(MAX_CLASS_CYCLE) {
        bail!(
            "traffic class weights make a round of {total} frames (at most {MAX_CLASS_CYCLE}): use smaller weights"
        );
    }
    let mut current = vec![0i64; w.len()];
    let mut out = Vec::with_capacity(total as usize);
    for _ in 0..total {
        for (c, x) in current.iter_mut().zip(&w) {
            *c += *x as i64;
        }
        let mut best = 0;
        for i in 1..current.len() {
            if current[i] > current[best] {
                best = i;
            }
        }
        current[best] -= total as i64;
        out.push(best as u8);
    }
    Ok(out)
}

impl TrafficConfig {
    /// One flow, uni- or bidirectional addresses, seed 1, TTL 64, IPv4 UDP checksums on.
    pub fn new(
        profile: Profile,
        forward: DirectionConfig,
        reverse: Option<DirectionConfig>,
    ) -> TrafficConfig {
        TrafficConfig {
            profile,
            flows: 1,
            forward,
            reverse,
            seed: 1,
            ttl: DEFAULT_TTL,
            udp_checksum_v4: true,
            classes: Vec::new(),
        }
    }

    /// The number of flows each family gets per direction: `[IPv4, IPv6]`.
    pub fn flows_per_family(&self) -> [u32; 2] {
        let p = &self.profile;
        let (s4, s6) = (p.sends(Family::Ipv4), p.sends(Family::Ipv6));
        match (s4, s6) {
            (true, false) => [self.flows, 0],
            (false, true) => [0, self.flows],
            (false, false) => [0, 0],
            (true, true) => {
                let f = u64::from(self.flows);
                let v6 = (f * u64::from(p.ipv6_percent()) + 50) / 100;
                let v6 = v6.clamp(1, f.saturating_sub(1).max(1)) as u32;
                let v4 = self.flows.saturating_sub(v6).max(1);
                [v4, v6]
            }
        }
    }
}

/// How to run one trial.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrialConfig {
    /// Offered load **per direction**, frames per second.
    pub rate_pps: f64,
    /// Transmit duration.
    pub duration: Duration,
    /// Both directions (needs [`TrafficConfig::reverse`]) or port 0 → port 1 only.
    pub bidirectional: bool,
    /// Receive for at most this long after transmission stops (RFC 2544 §23 waits 2 s);
    /// ends early when every sent frame has been received.
    pub drain: Duration,
    /// Most frames per direction handed to the port per loop iteration (1..=256).
    pub burst: usize,
    /// How far behind schedule the generator may fall before giving up due slots.
    pub max_lag: Duration,
}

impl TrialConfig {
    /// `rate_pps` per direction for `duration`, unidirectional, drain 2 s, burst 32,
    /// max lag 1 ms.
    pub fn new(rate_pps: f64, duration: Duration) -> TrialConfig {
        TrialConfig {
            rate_pps,
            duration,
            bidirectional: false,
            drain: Duration::from_secs(2),
            burst: 32,
            max_lag: Duration::from_millis(1),
        }
    }
}

/// Counts of one stream: one direction and family.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct StreamResult {
    /// 0: port 0 → port 1; 1: port 1 → port 0.
    pub direction: u8,
    /// Address family.
    pub family: Family,
    /// Frames sent.
    pub tx: u64,
    /// Distinct frames received.
    pub rx: u64,
    /// `tx − rx`.
    pub lost: u64,
    /// Extra copies received.
    pub duplicates: u64,
    /// Frames received after a frame of a higher sequence number of the same stream.
    pub reordered: u64,
}

/// Everything measured in one trial. Rates are aggregates over the active directions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrialResult {
    /// Requested rate per direction, frames/s.
    pub rate_pps: f64,
    /// Active directions (1 or 2).
    pub directions: u32,
    /// Requested transmit duration, s.
    pub duration_s: f64,
    /// Time from the first transmit to the end of transmission, s.
    pub tx_elapsed_s: f64,
    /// Frames sent (accepted by the ports).
    pub tx: u64,
    /// Distinct signature frames of this trial received on the right port.
    pub rx: u64,
    /// `tx − rx`: frames never received.
    pub lost: u64,
    /// Extra copies of frames already received.
    pub duplicates: u64,
    /// Frames that arrived after a later frame of their stream.
    pub reordered: u64,
    /// Received frames without a signature, or with an impossible direction/sequence.
    pub foreign: u64,
    /// Received frames of an earlier trial.
    pub stale: u64,
    /// Frames of this trial received on the port they were sent from.
    pub misdirected: u64,
    /// Schedule slots not sent because the generator or port could not keep up.
    pub tx_skipped: u64,
    /// Bursts cut short because the port accepted only part of them (retried).
    pub tx_port_full: u64,
    /// Bursts cut short because the packet memory had no free frame.
    pub tx_no_buffer: u64,
    /// Bytes sent, frame sizes with FCS.
    pub tx_bytes: u64,
    /// Bytes of distinct frames received, with FCS.
    pub rx_bytes: u64,
    /// Achieved transmit rate: `tx / max(tx_elapsed, duration)`, frames/s.
    pub tx_pps: f64,
    /// Receive rate over the same window, frames/s (distinct frames).
    pub rx_pps: f64,
    /// `tx_pps` at L1 (frame + 20 bytes), Gbit/s.
    pub tx_gbps_l1: f64,
    /// `rx_pps` at L1, Gbit/s.
    pub rx_gbps_l1: f64,
    /// Latency over every signature frame of this trial received on the right port.
    pub latency: LatencyStats,
    /// Per direction and family.
    pub streams: Vec<StreamResult>,
    /// Time from the first to the last receive burst that brought distinct frames of this
    /// trial, s (0 when fewer than two did): the window over which a DUT that queues (a
    /// shaper) delivered what it delivered.
    #[serde(default)]
    pub rx_window_s: f64,
    /// Per traffic class, over both directions, when the traffic has classes
    /// ([`TrafficConfig::classes`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<ClassResult>,
}

/// Counts of one traffic class in a trial (both directions together).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassResult {
    /// The class's name.
    pub name: String,
    /// The DSCP its frames were sent with.
    pub dscp: u8,
    /// Frames sent.
    pub tx: u64,
    /// Distinct frames received.
    pub rx: u64,
    /// `tx − rx`.
    pub lost: u64,
    /// Bytes sent, frame sizes with FCS.
    pub tx_bytes: u64,
    /// Bytes of distinct frames received, with FCS.
    pub rx_bytes: u64,
    /// Latency of its frames received (duplicates included, as [`TrialResult::latency`]).
    pub latency: LatencyStats,
}

impl ClassResult {
    /// `lost / tx` (0 when nothing was sent).
    pub fn loss_ratio(&self) -> f64 {
        if self.tx == 0 {
            0.0
        } else {
            self.lost as f64 / self.tx as f64
        }
    }
}

impl TrialResult {
    /// `lost / tx` (0 when nothing was sent).
    pub fn loss_ratio(&self) -> f64 {
        if self.tx == 0 {
            0.0
        } else {
            self.lost as f64 / self.tx as f64
        }
    }
    /// `lost / tx` in percent.
    pub fn loss_percent(&self) -> f64 {
        self.loss_ratio() * 100.0
    }
    /// Mean sent frame size with FCS (0 when nothing was sent).
    pub fn avg_frame_size(&self) -> f64 {
        if self.tx == 0 {
            0.0
        } else {
            self.tx_bytes as f64 / self.tx as f64
        }
    }
}

/// Per-direction state: templates and flow cursors (fixed), schedule and counters (per
/// trial), and the bitmap of received sequence numbers.
struct DirState {
    /// Template per kind index and class: `templates[kind * classes + class]`.
    templates: Vec<Template>,
    /// Traffic classes (at least 1).
    classes: usize,
    flows: [Option<FlowSet>; 2],
    cursor: [FlowCursor; 2],
    /// Position in the kind cycle, per traffic class: each class goes through the whole
    /// cycle, so every class gets the profile's mix of sizes whatever the weights.
    pat: [usize; MAX_CLASSES],
    /// Per trial:
    active: bool,
    planned: u64,
    /// Frames the receive bitmap can record (sending stops there).
    capacity: u64,
    slots: u64,
    seq: u64,
    skipped: u64,
    tx: [u64; 2],
    tx_bytes: u64,
    rx: [u64; 2],
    rx_bytes: u64,
    dup: [u64; 2],
    reord: [u64; 2],
    /// Highest sequence seen + 1 per family (0: none).
    highest: [u64; 2],
    seen: Vec<u64>,
    /// Per class: frames and bytes sent, distinct frames and bytes received.
    class_tx: Vec<[u64; 4]>,
}

impl DirState {
    /// The frame kind of kind index `ki`.
    #[inline]
    fn kind(&self, ki: u8) -> FrameKind {
        self.templates.get(usize::from(ki) * self.classes).map_or(
            FrameKind {
                family: Family::Ipv4,
                size: 64,
            },
            Template::kind,
        )
    }

    /// Start a trial of `planned` slots whose receive bitmap records `capacity` frames.
    fn reset(&mut self, planned: u64, capacity: u64) -> Result<()> {
        self.cursor = [FlowCursor::default(); 2];
        self.pat = [0; MAX_CLASSES];
        self.active = true;
        self.planned = planned;
        self.capacity = capacity;
        self.slots = 0;
        self.seq = 0;
        self.skipped = 0;
        self.tx = [0; 2];
        self.tx_bytes = 0;
        self.rx = [0; 2];
        self.rx_bytes = 0;
        self.dup = [0; 2];
        self.reord = [0; 2];
        self.highest = [0; 2];
        self.class_tx.fill([0; 4]);
        let words = capacity.div_ceil(64) as usize;
        if words <= SMALL_BITMAP_WORDS && self.seen.len() >= words {
            self.seen[..words].fill(0);
        } else {
            self.seen = Vec::new();
            self.seen = zeroed_words(words)?;
        }
        Ok(())
    }
}

/// Bitmaps up to this many words (8 MiB) are reused and cleared between trials; larger
/// ones are allocated zeroed (lazily, by the kernel) for each trial.
const SMALL_BITMAP_WORDS: usize = 1 << 20;

/// `n` zero words, allocated with `alloc_zeroed` so a large bitmap costs address space,
/// not memory, until the pages are touched; an error (not an abort) when it fails.
fn zeroed_words(n: usize) -> Result<Vec<u64>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u64>(n)?;
    // SAFETY: the layout has a non-zero size; the result is checked for null below.
    let p = unsafe { std::alloc::alloc_zeroed(layout) } as *mut u64;
    if p.is_null() {
        bail!(
            "cannot allocate the {} MiB receive bitmap of this trial; shorten the trial",
            (n * 8) >> 20
        );
    }
    // SAFETY: `p` was allocated by the global allocator with the layout of `n` u64s,
    // which `alloc_zeroed` initialised to zero; the Vec takes sole ownership.
    Ok(unsafe { Vec::from_raw_parts(p, n, n) })
}

/// Trial-wide receive counters.
#[derive(Default)]
struct RxCounters {
    foreign: u64,
    stale: u64,
    misdirected: u64,
    port_full: u64,
    no_buffer: u64,
    /// A distinct frame of this trial came in the current receive burst.
    got: bool,
    /// Clock at the first and the last receive burst with distinct frames (0: none yet).
    first_rx_ns: u64,
    last_rx_ns: u64,
}

/// The receive bitmap of a trial is sized for at most this rate per direction (several
/// times what one core can generate); a generator that somehow got that far would stop
/// and count the remaining slots as skipped.
pub const MAX_RECORDED_RATE_PPS: f64 = 100e6;

/// The generator: precomputed frames, size pattern and flows for a [`TrafficConfig`], and
/// the reusable per-trial state. Run any number of trials with [`Generator::run_trial`].
pub struct Generator {
    profile: Profile,
    kinds: Vec<FrameKind>,
    /// Kind index per frame slot of the cycle.
    cycle: Vec<u8>,
    dirs: Vec<DirState>,
    tag: u16,
    hist: LatencyHistogram,
    /// The traffic classes (empty: none configured) and the class of each slot of a
    /// round ([`class_cycle`]).
    classes: Vec<TrafficClass>,
    class_cycle: Vec<u8>,
    /// Latency per class (empty without classes).
    class_hist: Vec<LatencyHistogram>,
    rxc: RxCounters,
    rxv: Box<Vector>,
    pkts: Vec<Pkt>,
    burst_kinds: Vec<u8>,
}

impl std::fmt::Debug for Generator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator")
            .field("profile", &self.profile.name())
            .field("kinds", &self.kinds)
            .field("cycle_len", &self.cycle.len())
            .field("directions", &self.dirs.len())
            .finish()
    }
}

impl Generator {
    /// Build templates, the kind cycle and the flow sets. Fails when a family the profile
    /// sends has no endpoints in a configured direction, or the flows do not fit them.
    pub fn new(cfg: &TrafficConfig) -> Result<Generator> {
        let cycle_kinds = cfg.profile.cycle(cfg.seed);
        let mut kinds: Vec<FrameKind> = cfg.profile.mix().iter().map(|e| e.kind).collect();
        kinds.sort();
        kinds.dedup();
        if kinds.is_empty() || kinds.len() > 256 {
            bail!("profile {} has no frame kinds", cfg.profile);
        }
        let cycle: Vec<u8> = cycle_kinds
            .iter()
            .map(|k| kinds.iter().position(|x| x == k).unwrap_or(0) as u8)
            .collect();
        let flows = cfg.flows_per_family();
        let class_cycle = class_cycle(&cfg.classes)?;
        let nclasses = cfg.classes.len().max(1);
        let mut dirs = Vec::new();
        for (d, dc) in std::iter::once(&cfg.forward)
            .chain(cfg.reverse.as_ref())
            .enumerate()
        {
            let mut sets: [Option<FlowSet>; 2] = [None, None];
            for fam in [Family::Ipv4, Family::Ipv6] {
                if !cfg.profile.sends(fam) {
                    continue;
                }
                let ep = match fam {
                    Family::Ipv4 => dc.v4.as_ref(),
                    Family::Ipv6 => dc.v6.as_ref(),
                };
                let Some(ep) = ep else {
                    bail!(
                        "profile {} sends {fam} but direction {d} has no {fam} addresses",
                        cfg.profile
                    );
                };
                sets[fam.index()] = Some(FlowSet::new(fam, ep, flows[fam.index()])?);
            }
            let mut templates = Vec::with_capacity(kinds.len() * nclasses);
            for &k in &kinds {
                let t = Template::new(k, dc.src_mac, dc.dst_mac, cfg.ttl, cfg.udp_checksum_v4);
                for c in &cfg.classes {
                    templates.push(t.clone().with_dscp(c.dscp));
                }
                if cfg.classes.is_empty() {
                    templates.push(t);
                }
            }
            dirs.push(DirState {
                templates,
                classes: nclasses,
                flows: sets,
                cursor: [FlowCursor::default(); 2],
                pat: [0; MAX_CLASSES],
                active: false,
                planned: 0,
                capacity: 0,
                slots: 0,
                seq: 0,
                skipped: 0,
                tx: [0; 2],
                tx_bytes: 0,
                rx: [0; 2],
                rx_bytes: 0,
                dup: [0; 2],
                reord: [0; 2],
                highest: [0; 2],
                seen: Vec::new(),
                class_tx: vec![[0; 4]; nclasses],
            });
        }
        Ok(Generator {
            profile: cfg.profile.clone(),
            kinds,
            cycle,
            dirs,
            tag: (cfg.seed as u16) & ((1 << TAG_BITS) - 1),
            hist: LatencyHistogram::new(),
            class_hist: cfg
                .classes
                .iter()
                .map(|_| LatencyHistogram::new())
                .collect(),
            classes: cfg.classes.clone(),
            class_cycle,
            rxc: RxCounters::default(),
            rxv: Box::default(),
            pkts: vec![Pkt::default(); VECTOR_SIZE],
            burst_kinds: vec![0; VECTOR_SIZE],
        })
    }

    /// The profile.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// Tag of the last trial run (the next trial uses the next value, modulo 2^13).
    pub fn tag(&self) -> u16 {
        self.tag
    }

    /// Largest buffer the generator writes (largest frame size minus FCS).
    pub fn max_buffer_len(&self) -> usize {
        self.dirs.first().map_or(0, |d| {
            d.templates.iter().map(|t| t.len()).max().unwrap_or(0)
        })
    }

    /// The flow set of `direction` (0 or 1) and `family`, if that direction is configured
    /// and the profile sends that family.
    pub fn flow_set(&self, direction: usize, family: Family) -> Option<&FlowSet> {
        self.dirs.get(direction)?.flows[family.index()].as_ref()
    }

    /// Run one trial on the real monotonic clock: port 0 and port 1 are the tester's two
    /// ports (they may be of different types); all frames live in `mem`.
    pub fn run_trial<M, A, B>(
        &mut self,
        mem: &mut M,
        port0: &mut A,
        port1: &mut B,
        cfg: &TrialConfig,
    ) -> Result<TrialResult>
    where
        M: PacketMemory,
        A: Port<M>,
        B: Port<M>,
    {
        self.run_trial_with_clock(mem, port0, port1, cfg, &mut MonotonicClock)
    }

    /// [`Generator::run_trial`] on any [`Clock`] (a [`crate::clock::VirtualClock`] makes
    /// the trial deterministic). Errors are only setup errors (bad configuration, frames
    /// larger than the packet memory's frames, memory exhausted before starting).
    pub fn run_trial_with_clock<M, A, B, C>(
        &mut self,
        mem: &mut M,
        port0: &mut A,
        port1: &mut B,
        cfg: &TrialConfig,
        clock: &mut C,
    ) -> Result<TrialResult>
    where
        M: PacketMemory,
        A: Port<M>,
        B: Port<M>,
        C: Clock,
    {
        // ---- setup (may allocate) ----
        if !(cfg.rate_pps.is_finite() && cfg.rate_pps > 0.0) {
            bail!(
                "trial rate must be a positive number of frames/s, not {}",
                cfg.rate_pps
            );
        }
        if cfg.duration.is_zero() {
            bail!("trial duration must be positive");
        }
        if cfg.burst == 0 || cfg.burst > VECTOR_SIZE {
            bail!("burst must be 1..={VECTOR_SIZE}, not {}", cfg.burst);
        }
        if cfg.bidirectional && self.dirs.len() < 2 {
            bail!("bidirectional trial needs addresses for the reverse direction");
        }
        // Jumbo frames go into big frames (where the memory has them).
        let Some(probe) = mem.alloc_for(self.max_buffer_len()) else {
            bail!(
                "packet memory has no free frame for {}-byte frames",
                self.max_buffer_len() + 4
            );
        };
        let cap = mem.frame(probe).len().saturating_sub(HEADROOM);
        mem.free(probe);
        if self.max_buffer_len() > cap {
            bail!(
                "profile {} has {}-byte frames but packet memory frames hold {} bytes after \
                 headroom (at most {}-byte frames); use Profile::without_frames_over",
                self.profile,
                self.max_buffer_len() + 4,
                cap,
                cap + 4
            );
        }
        // Rate in milli-frames/s, so schedules are exact integer arithmetic.
        let rate_m = (cfg.rate_pps * 1000.0).round() as u128;
        let dur_ns = cfg.duration.as_nanos();
        let planned = (dur_ns * rate_m / 1_000_000_000_000) as u64;
        if planned == 0 {
            bail!(
                "rate {} frames/s for {:?} is less than one frame",
                cfg.rate_pps,
                cfg.duration
            );
        }
        if planned > 1 << 48 {
            bail!("{planned} frames per direction: shorten the trial");
        }
        let capacity = planned
            .min((cfg.duration.as_secs_f64() * MAX_RECORDED_RATE_PPS) as u64 + VECTOR_SIZE as u64);
        let lag =
            ((cfg.max_lag.as_nanos() * rate_m / 1_000_000_000_000) as u64).max(cfg.burst as u64);
        let ndirs = if cfg.bidirectional { 2 } else { 1 };
        for (d, st) in self.dirs.iter_mut().enumerate() {
            if d < ndirs {
                st.reset(planned, capacity)?;
            } else {
                st.active = false;
            }
        }
        self.tag = (self.tag + 1) & ((1 << TAG_BITS) - 1);
        self.hist.clear();
        for h in &mut self.class_hist {
            h.clear();
        }
        self.rxc = RxCounters::default();

        let Generator {
            cycle,
            dirs,
            tag,
            hist,
            classes,
            class_cycle,
            class_hist,
            rxc,
            rxv,
            pkts,
            burst_kinds,
            ..
        } = self;
        let tag = *tag;
        let mut rx = Rx {
            dirs,
            hist,
            class_cycle,
            class_hist,
            c: rxc,
            v: rxv,
            tag,
        };

        // Flush what is still in flight from an earlier trial (counted as stale/foreign).
        for _ in 0..64 {
            if rx.poll(mem, port0, 0, clock) + rx.poll(mem, port1, 1, clock) == 0 {
                break;
            }
        }

        // ---- transmit (no allocation, no locks, no logging) ----
        let dur_ns = dur_ns as u64;
        let start = clock.now_ns();
        let mut now = start;
        loop {
            let el = now - start;
            if el >= dur_ns {
                break;
            }
            let due = ((u128::from(el) * rate_m / 1_000_000_000_000) as u64 + 1).min(planned);
            let ts = now as u32;
            let mut pending = false;
            let mut work = 0;
            for d in 0..ndirs {
                let st = &mut rx.dirs[d];
                if st.slots >= planned {
                    continue;
                }
                if due - st.slots > lag {
                    let give_up = due - st.slots - lag;
                    st.skipped += give_up;
                    st.slots += give_up;
                }
                let n = ((due - st.slots).min(st.capacity - st.seq) as usize).min(cfg.burst);
                if n > 0 {
                    let stream = [
                        stream_field(tag, d as u8, Family::Ipv4),
                        stream_field(tag, d as u8, Family::Ipv6),
                    ];
                    let sent = if d == 0 {
                        send(
                            st,
                            (cycle, rx.class_cycle),
                            stream,
                            n,
                            ts,
                            0,
                            mem,
                            port0,
                            pkts,
                            burst_kinds,
                            rx.c,
                        )
                    } else {
                        send(
                            st,
                            (cycle, rx.class_cycle),
                            stream,
                            n,
                            ts,
                            1,
                            mem,
                            port1,
                            pkts,
                            burst_kinds,
                            rx.c,
                        )
                    };
                    work += sent;
                }
                if st.slots < planned && st.seq < st.capacity {
                    pending = true;
                }
            }
            work += rx.poll(mem, port0, 0, clock);
            work += rx.poll(mem, port1, 1, clock);
            if !pending {
                break;
            }
            if work == 0 {
                std::hint::spin_loop();
            }
            now = clock.now_ns();
        }
        let tx_end = clock.now_ns();
        for st in rx.dirs.iter_mut().take(ndirs) {
            st.skipped += planned - st.slots;
            st.slots = planned;
        }

        // ---- drain ----
        let drain_end = tx_end.saturating_add(cfg.drain.as_nanos() as u64);
        loop {
            let got = rx.poll(mem, port0, 0, clock) + rx.poll(mem, port1, 1, clock);
            let all_in = rx
                .dirs
                .iter()
                .take(ndirs)
                .all(|st| st.rx[0] + st.rx[1] >= st.tx[0] + st.tx[1]);
            if all_in {
                break;
            }
            if clock.now_ns() >= drain_end {
                break;
            }
            if got == 0 {
                std::hint::spin_loop();
            }
        }

        // ---- results ----
        let mut r = TrialResult {
            rate_pps: cfg.rate_pps,
            directions: ndirs as u32,
            duration_s: cfg.duration.as_secs_f64(),
            tx_elapsed_s: (tx_end - start) as f64 / 1e9,
            foreign: rx.c.foreign,
            stale: rx.c.stale,
            misdirected: rx.c.misdirected,
            tx_port_full: rx.c.port_full,
            tx_no_buffer: rx.c.no_buffer,
            latency: rx.hist.stats(),
            rx_window_s: rx.c.last_rx_ns.saturating_sub(rx.c.first_rx_ns) as f64 / 1e9,
            ..Default::default()
        };
        for (i, c) in classes.iter().enumerate() {
            let mut cr = ClassResult {
                name: c.name.clone(),
                dscp: c.dscp,
                latency: rx.class_hist.get(i).map(|h| h.stats()).unwrap_or_default(),
                ..Default::default()
            };
            for st in rx.dirs.iter().take(ndirs) {
                if let Some(&[tx, tx_bytes, rx, rx_bytes]) = st.class_tx.get(i) {
                    cr.tx += tx;
                    cr.tx_bytes += tx_bytes;
                    cr.rx += rx;
                    cr.rx_bytes += rx_bytes;
                }
            }
            cr.lost = cr.tx.saturating_sub(cr.rx);
            r.classes.push(cr);
        }
        for (d, st) in rx.dirs.iter().enumerate().take(ndirs) {
            r.tx_skipped += st.skipped;
            r.tx_bytes += st.tx_bytes;
            r.rx_bytes += st.rx_bytes;
            for fam in [Family::Ipv4, Family::Ipv6] {
                let i = fam.index();
                if st.flows[i].is_none() {
                    continue;
                }
                let s = StreamResult {
                    direction: d as u8,
                    family: fam,
                    tx: st.tx[i],
                    rx: st.rx[i],
                    lost: st.tx[i].saturating_sub(st.rx[i]),
                    duplicates: st.dup[i],
                    reordered: st.reord[i],
                };
                r.tx += s.tx;
                r.rx += s.rx;
                r.lost += s.lost;
                r.duplicates += s.duplicates;
                r.reordered += s.reordered;
                r.streams.push(s);
            }
        }
        let window = r.tx_elapsed_s.max(r.duration_s);
        r.tx_pps = r.tx as f64 / window;
        r.rx_pps = r.rx as f64 / window;
        let l1 = |frames: u64, bytes: u64| {
            if frames == 0 {
                0.0
            } else {
                gbps_l1(frames as f64 / window, bytes as f64 / frames as f64)
            }
        };
        r.tx_gbps_l1 = l1(r.tx, r.tx_bytes);
        r.rx_gbps_l1 = l1(r.rx, r.rx_bytes);
        Ok(r)
    }
}

/// Build up to `n` frames of direction state `st` and hand them to `port`; returns how
/// many the port accepted. Refused frames are rolled back (pattern, flows, sequence) so
/// they are sent next time with the same content.
#[allow(clippy::too_many_arguments)]
#[inline]
fn send<M: PacketMemory, P: Port<M>>(
    st: &mut DirState,
    (cycle, class_cycle): (&[u8], &[u8]),
    stream: [u16; 2],
    n: usize,
    ts: u32,
    port_idx: u16,
    mem: &mut M,
    port: &mut P,
    pkts: &mut [Pkt],
    kinds: &mut [u8],
    c: &mut RxCounters,
) -> usize {
    let pat0 = st.pat;
    let cursor0 = st.cursor;
    let mut k = 0;
    let round = class_cycle.len() as u64;
    let class_at = |seq: u64| -> usize {
        if round <= 1 {
            0
        } else {
            usize::from(
                class_cycle
                    .get((seq % round) as usize)
                    .copied()
                    .unwrap_or(0),
            ) % MAX_CLASSES
        }
    };
    let next = |pat: &mut usize| {
        *pat += 1;
        if *pat >= cycle.len() {
            *pat = 0;
        }
    };
    while k < n {
        let class = class_at(st.seq + k as u64);
        let ki = cycle[st.pat[class]];
        let Some(t) = st.templates.get(usize::from(ki) * st.classes + class) else {
            break;
        };
        let fam = t.kind().family.index();
        let Some(fs) = st.flows[fam].as_ref() else {
            break;
        };
        let Some(buf) = mem.alloc_for(t.len()) else {
            c.no_buffer += 1;
            break;
        };
        let (src, dst, sport, dport) = fs.at(&st.cursor[fam]);
        fs.advance(&mut st.cursor[fam]);
        next(&mut st.pat[class]);
        let frame = mem.frame_mut(buf);
        t.fill(
            &mut frame[HEADROOM..],
            src,
            dst,
            sport,
            dport,
            stream[fam],
            (st.seq + k as u64) as u32,
            ts,
        );
        pkts[k] = Pkt {
            buf,
            off: HEADROOM as u16,
            len: t.len() as u16,
            rx_port: port_idx,
            tx_port: port_idx,
            ..Pkt::default()
        };
        kinds[k] = ki;
        k += 1;
    }
    if k == 0 {
        return 0;
    }
    let sent = port.tx_burst(mem, &pkts[..k]).min(k);
    if sent < k {
        c.port_full += 1;
        st.pat = pat0;
        for j in 0..sent {
            next(&mut st.pat[class_at(st.seq + j as u64)]);
        }
        st.cursor = cursor0;
        for &ki in &kinds[..sent] {
            let fam = st.kind(ki).family.index();
            if let Some(fs) = st.flows[fam].as_ref() {
                fs.advance(&mut st.cursor[fam]);
            }
        }
    }
    for (j, &ki) in kinds[..sent].iter().enumerate() {
        let kind = st.kind(ki);
        st.tx[kind.family.index()] += 1;
        st.tx_bytes += u64::from(kind.size);
        if let Some(c) = st.class_tx.get_mut(class_at(st.seq + j as u64)) {
            c[0] += 1;
            c[1] += u64::from(kind.size);
        }
    }
    st.seq += sent as u64;
    st.slots += sent as u64;
    sent
}

/// The receive side of a trial.
struct Rx<'a> {
    dirs: &'a mut Vec<DirState>,
    hist: &'a mut LatencyHistogram,
    /// The class of each slot of a round, and the latency per class (empty: no classes).
    class_cycle: &'a [u8],
    class_hist: &'a mut [LatencyHistogram],
    c: &'a mut RxCounters,
    v: &'a mut Vector,
    tag: u16,
}

impl Rx<'_> {
    /// One receive burst on `port` (index `port_idx`): account and free every frame.
    #[inline]
    fn poll<M: PacketMemory, P: Port<M>, C: Clock>(
        &mut self,
        mem: &mut M,
        port: &mut P,
        port_idx: usize,
        clock: &mut C,
    ) -> usize {
        self.v.len = 0;
        let n = port.rx_burst(mem, self.v);
        if n == 0 {
            return 0;
        }
        let now64 = clock.now_ns();
        let now = now64 as u32;
        self.c.got = false;
        for i in 0..self.v.len {
            let p = self.v.pkts[i];
            let off = usize::from(p.off);
            let data = mem
                .frame(p.buf)
                .get(off..off + usize::from(p.len))
                .unwrap_or(&[]);
            self.account(data, port_idx, now);
            mem.free(p.buf);
        }
        if self.c.got {
            if self.c.first_rx_ns == 0 {
                self.c.first_rx_ns = now64;
            }
            self.c.last_rx_ns = now64;
        }
        self.v.len = 0;
        n
    }

    #[inline]
    fn account(&mut self, data: &[u8], port_idx: usize, now: u32) {
        let Some(sig) = Signature::parse(data) else {
            self.c.foreign += 1;
            return;
        };
        if sig.tag != self.tag {
            self.c.stale += 1;
            return;
        }
        let d = usize::from(sig.direction);
        let Some(st) = self.dirs.get_mut(d) else {
            self.c.foreign += 1;
            return;
        };
        if !st.active || port_idx != 1 - d {
            self.c.misdirected += 1;
            return;
        }
        // Sequence numbers on the wire are 32-bit: take the one at or below the last sent
        // (unambiguous unless a frame is 2^32 frames late).
        let fam = sig.family.index();
        let Some(last) = st.seq.checked_sub(1) else {
            self.c.foreign += 1;
            return;
        };
        let behind = u64::from((last as u32).wrapping_sub(sig.seq));
        if behind > last || st.flows[fam].is_none() {
            self.c.foreign += 1;
            return;
        }
        let seq = last - behind;
        let (w, b) = ((seq >> 6) as usize, 1u64 << (seq & 63));
        let latency = u64::from(now.wrapping_sub(sig.timestamp));
        self.hist.record(latency);
        let round = self.class_cycle.len() as u64;
        let class = if round <= 1 {
            0
        } else {
            usize::from(
                self.class_cycle
                    .get((seq % round) as usize)
                    .copied()
                    .unwrap_or(0),
            )
        };
        if let Some(h) = self.class_hist.get_mut(class) {
            h.record(latency);
        }
        if st.seen[w] & b != 0 {
            st.dup[fam] += 1;
            return;
        }
        st.seen[w] |= b;
        st.rx[fam] += 1;
        st.rx_bytes += data.len() as u64 + 4;
        if let Some(c) = st.class_tx.get_mut(class) {
            c[2] += 1;
            c[3] += data.len() as u64 + 4;
        }
        self.c.got = true;
        if seq + 1 < st.highest[fam] {
            st.reord[fam] += 1;
        } else {
            st.highest[fam] = seq + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::lab_traffic;

    #[test]
    fn sequence_numbers_wrap_unambiguously() {
        let mut g =
            Generator::new(&lab_traffic(Profile::parse("ipv4-64").unwrap(), false)).unwrap();
        let n = (1u64 << 32) + 100;
        g.dirs[0].reset(n, n).unwrap();
        g.dirs[0].seq = (1 << 32) + 10; // 2^32 + 10 frames sent
        let t = Template::new(
            FrameKind {
                family: Family::Ipv4,
                size: 64,
            },
            [0; 6],
            [0; 6],
            64,
            true,
        );
        let tag = g.tag;
        let mut rx = Rx {
            dirs: &mut g.dirs,
            hist: &mut g.hist,
            class_cycle: &g.class_cycle,
            class_hist: &mut g.class_hist,
            c: &mut g.rxc,
            v: &mut g.rxv,
            tag,
        };
        let mut f = [0u8; 60];
        let stream = stream_field(tag, 0, Family::Ipv4);
        for seq in [5u32, 0xffff_fff0, 5, 9] {
            t.fill(&mut f, 1, 2, 3, 4, stream, seq, 0);
            rx.account(&f, 1, 0);
        }
        // 5 → 2^32+5, 0xfffffff0 → 2^32-16 (reordered), 5 again (duplicate), 9 → 2^32+9.
        let st = &rx.dirs[0];
        assert_eq!(
            (st.rx[0], st.dup[0], st.reord[0], rx.c.foreign),
            (3, 1, 1, 0)
        );
        assert_ne!(st.seen[(((1u64 << 32) + 5) >> 6) as usize], 0);
        assert_ne!(st.seen[(((1u64 << 32) - 16) >> 6) as usize], 0);
        // Before any wrap, a sequence number not sent yet is foreign.
        rx.dirs[0].reset(100, 100).unwrap();
        rx.dirs[0].seq = 10;
        t.fill(&mut f, 1, 2, 3, 4, stream, 10, 0);
        rx.account(&f, 1, 0);
        assert_eq!((rx.dirs[0].rx[0], rx.c.foreign), (0, 1));
    }
}
