//! The filters as feature-arc nodes: `ip4-filter-ingress` and `ip6-filter-ingress` on the
//! unicast arcs (what an interface receives, before the route lookup), `ip4-filter-egress`
//! and `ip6-filter-egress` on the output arcs (what leaves by it).
//!
//! Each batch loads the published [`RuleSet`] once, so every packet of it is judged by one
//! version of the rules. Per packet: read the 5-tuple, TCP flags and DSCP, find the
//! interface's filter, classify, count the rule's packets and bytes (per worker), then:
//! - accept: on (with its DSCP rewritten if the rule says so);
//! - drop: dropped, counted under `rule_drop`;
//! - reject: dropped, counted under `reject`, and answered: TCP (but a RST) with a RST
//!   built in place and routed back, anything else with an ICMP / ICMPv6 destination
//!   unreachable, administratively prohibited, built by the engine. Answers are rate
//!   limited (the engine's ICMP limits; RSTs at [`RST_RATE`] per second per worker);
//!   beyond it the packet is dropped under `reject_limited`.
//!
//! Rules with `log = true` send a [`LogRecord`] to the control thread through a ring per
//! worker, at most `log_rate` per second per worker; the rest are counted as suppressed.
//! Nothing is logged, allocated or locked per packet.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use atomic_refcell::AtomicRefCell;
use dataplane::feature::{ArcId, Batch, Feature, FeatureCx, FeatureNode, FeatureSpec, Reply};
use dataplane::RateLimiter;

use crate::config::{state, Action, Hook, ICMP, ICMPV6, SCTP, TCP, UDP};
use crate::conntrack::{self, Conntrack, CtState, Segment, Tuple, L4};
use crate::ruleset::{PacketKey, RuleSet, Verdict, NO_L4};

/// Drop reason: a rule or the policy said drop.
pub const RULE_DROP: u8 = 0;
/// Drop reason: a rule or the policy said reject (and the sender was answered).
pub const REJECT: u8 = 1;
/// Drop reason: rejected, but the answer was over its rate limit.
pub const REJECT_LIMITED: u8 = 2;
/// Drop reason: headers the filter cannot read.
pub const MALFORMED: u8 = 3;
/// Drop reason: an IPv4 TCP fragment at offset 8 (RFC 1858 §3.2).
pub const TINY_FRAGMENT: u8 = 4;
/// Drop reason: a new flow the connection-tracking table had no room for.
pub const CONNTRACK_FULL: u8 = 5;

const DROPS: &[(&str, &str)] = &[
    ("rule_drop", "dropped by a firewall rule or filter policy"),
    (
        "reject",
        "rejected by a firewall rule or filter policy (the sender was sent a TCP RST or an ICMP unreachable)",
    ),
    (
        "reject_limited",
        "rejected by a firewall rule; the answer was over its rate limit",
    ),
    (
        "malformed",
        "the firewall could not read the transport header (truncated, or bad IPv6 extension headers)",
    ),
    (
        "tiny_fragment",
        "IPv4 TCP fragment at offset 8, which could overwrite the TCP flags (RFC 1858)",
    ),
    (
        "conntrack_full",
        "a new flow the connection-tracking table had no room for (firewall.conntrack_max)",
    ),
];

/// TCP RSTs a worker sends per second, at most (bursts of [`RST_BURST`]).
pub const RST_RATE: u64 = 1000;
/// Burst of RSTs.
pub const RST_BURST: u64 = 100;
/// Log records a worker's ring holds before the control thread drains it.
pub const LOG_RING: usize = 1024;

/// One packet a rule with `log = true` matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogRecord {
    /// Monotonic time, ns.
    pub now_ns: u64,
    /// Worker.
    pub worker: u16,
    /// Interface index.
    pub iface: u16,
    /// Hook.
    pub hook: Hook,
    /// Index of the filter in the rule set that was current.
    pub filter: u16,
    /// Rule index (`None`: the policy).
    pub rule: Option<u32>,
    /// What was done.
    pub action: Action,
    /// IPv6.
    pub v6: bool,
    /// Source address (IPv4 in the last 4 bytes).
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Protocol.
    pub proto: u8,
    /// Source port or ICMP type.
    pub sport: u16,
    /// Destination port or ICMP code.
    pub dport: u16,
    /// IP length.
    pub len: u16,
}

/// What the control thread and the nodes share: the published rules and the log rings.
pub struct Shared {
    /// The rules the workers apply.
    pub rules: ArcSwap<RuleSet>,
    logs: Mutex<Vec<rtrb::Consumer<LogRecord>>>,
    /// Log records not sent: over the rate, or the ring full.
    pub log_suppressed: AtomicU64,
    /// Each worker's connection-tracking table (empty: tracking off).
    pub conntrack: Vec<Arc<CtSlot>>,
    /// The dump or flush the workers are asked for, if any.
    ct_request: arc_swap::ArcSwapOption<CtRequest>,
    /// One request at a time; the next request's number.
    ct_next: Mutex<u64>,
}

/// One worker's flow table and the figures it publishes after each batch.
pub struct CtSlot {
    /// The table and its scan state: borrowed by the worker's filter nodes, one batch at a
    /// time (and, for a step of a scan an idle worker does not make, by the control thread).
    pub table: AtomicRefCell<CtWorker>,
    /// [`CtStats`] as the worker last published them.
    stats: [AtomicU64; 9],
    /// The last [`CtRequest`] this worker's table finished.
    done: AtomicU64,
    /// Flows a flush removed.
    flushed: AtomicU64,
    /// The flows a dump found, on their way to the control thread.
    found: crossbeam_queue::ArrayQueue<FlowRecord>,
}

/// A worker's table with what a scan of it needs.
pub struct CtWorker {
    /// The flows.
    pub table: Conntrack,
    cursor: u32,
    /// The request the cursor belongs to.
    scanning: u64,
    served: u64,
    /// `CLOCK_MONOTONIC` less the worker's clock (both monotonic: a constant, taken at
    /// the worker's first batch): the control thread's scans read the flows' deadlines in
    /// the worker's clock with it.
    clock_offset: Option<u64>,
}

/// One flow a dump found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowRecord {
    /// The worker whose table holds it.
    pub worker: usize,
    /// The flow.
    pub info: conntrack::FlowInfo,
    /// Nanoseconds until it expires, when it was read.
    pub expires_in_ns: u64,
}

/// Which flows a dump or a flush is about: all that match every condition given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtFilter {
    /// An address range (IPv6; IPv4 flag) either end of the flow lies in.
    pub addr: Option<(u128, u128, bool)>,
    /// The protocol.
    pub proto: Option<u8>,
    /// A port either end uses.
    pub port: Option<u16>,
}

impl CtFilter {
    /// Whether the flow of `t` matches.
    pub fn matches(&self, t: &Tuple) -> bool {
        self.addr.is_none_or(|(lo, hi, v6)| {
            t.v6 == v6 && ((lo..=hi).contains(&t.src) || (lo..=hi).contains(&t.dst))
        }) && self.proto.is_none_or(|p| p == t.proto)
            && self.port.is_none_or(|p| t.sport == p || t.dport == p)
    }
}

/// Why a conntrack dump or flush failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScanError {
    /// Tracking is off (the client's mistake).
    #[error("connection tracking is off: set conntrack = true in [firewall]")]
    Off,
    /// No table moved for the whole timeout.
    #[error("the workers' conntrack {what} made no progress for {timeout:?}")]
    Stalled {
        /// `dump` or `flush`.
        what: &'static str,
        /// How long it waited.
        timeout: std::time::Duration,
    },
    /// A thread that held the request state failed.
    #[error("conntrack state unavailable")]
    Unavailable,
}

/// A dump or flush the control thread asks every worker for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtRequest {
    /// Its number (from 1).
    pub id: u64,
    /// Remove the matching flows (else list them).
    pub flush: bool,
    /// Which flows.
    pub filter: CtFilter,
}

/// Entries a worker scans per batch for a dump or flush.
pub const SCAN_STEP: u32 = 256;
/// Entries the control thread scans per step of an idle worker's table (a few
/// microseconds; a worker that wakes meanwhile waits for it, see [`borrow_table`]).
const CONTROL_SCAN_STEP: u32 = 1024;
/// How long a worker may leave a scan untouched before the control thread takes it on.
const IDLE_WORKER: std::time::Duration = std::time::Duration::from_millis(20);
/// Flows a worker's dump queue holds before the control thread drains it.
pub const DUMP_RING: usize = 4096;

impl CtWorker {
    /// Scan up to `step` more entries for `req` at `now_ns`; true when the scan is done.
    fn scan(&mut self, req: &CtRequest, slot: &CtSlot, now_ns: u64, step: u32) -> bool {
        if self.served == req.id {
            return true;
        }
        if self.scanning != req.id {
            // A new request (an earlier one may have been given up half way).
            self.scanning = req.id;
            self.cursor = 0;
        }
        let max = self.table.max_entries() as u32;
        let end = self.cursor.saturating_add(step).min(max);
        while self.cursor < end {
            let i = self.cursor;
            if let Some((id, info)) = self.table.flow_at(i) {
                if req.filter.matches(&info.tuple) {
                    if req.flush {
                        if self.table.remove(id) {
                            slot.flushed.fetch_add(1, Ordering::Relaxed);
                        }
                    } else {
                        let rec = FlowRecord {
                            worker: 0, // set by the control thread as it drains the ring
                            info,
                            expires_in_ns: info.expires_ns.saturating_sub(now_ns),
                        };
                        if slot.found.push(rec).is_err() {
                            // The ring is full: go on from here once it is drained.
                            return false;
                        }
                    }
                }
            }
            self.cursor += 1;
        }
        if self.cursor >= max {
            self.cursor = 0;
            self.served = req.id;
            slot.done.store(req.id, Ordering::Release);
            return true;
        }
        false
    }
}

/// A worker's connection tracking, as published.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtStats {
    /// Flows in the table.
    pub flows: u64,
    /// Its capacity.
    pub max: u64,
    /// Flows created.
    pub created: u64,
    /// New flows refused (table full).
    pub refused: u64,
    /// Unassured flows dropped early to make room.
    pub early_dropped: u64,
    /// Flows expired.
    pub expired: u64,
    /// Packets found invalid (out of window, bad flags, no flow).
    pub invalid: u64,
    /// Bytes the table takes.
    pub memory_bytes: u64,
    /// Batches the worker found its table borrowed (never expected: counted, not waited).
    pub busy: u64,
}

impl CtSlot {
    /// The figures the worker last published.
    pub fn stats(&self) -> CtStats {
        let g = |i: usize| self.stats[i].load(Ordering::Relaxed);
        CtStats {
            flows: g(0),
            max: g(1),
            created: g(2),
            refused: g(3),
            early_dropped: g(4),
            expired: g(5),
            invalid: g(6),
            memory_bytes: g(7),
            busy: g(8),
        }
    }
    fn publish(&self, w: &CtWorker) {
        let t = &w.table;
        let c = t.counters();
        let v = [
            t.len() as u64,
            t.max_entries() as u64,
            c.created,
            c.refused,
            c.early_dropped,
            c.expired,
            c.invalid,
            t.memory_bytes() as u64,
        ];
        for (a, x) in self.stats.iter().zip(v) {
            a.store(x, Ordering::Relaxed);
        }
    }
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            rules: ArcSwap::from_pointee(RuleSet::empty()),
            logs: Mutex::new(Vec::new()),
            log_suppressed: AtomicU64::new(0),
            conntrack: Vec::new(),
            ct_request: arc_swap::ArcSwapOption::empty(),
            ct_next: Mutex::new(1),
        }
    }
}

impl Shared {
    /// Shared state with a flow table of `max` flows for each of `workers` workers
    /// (allocated now), or none when `max` is `None`.
    pub fn new(workers: usize, max: Option<usize>) -> Result<Shared, conntrack::ConfigError> {
        let mut s = Shared::default();
        if let Some(max) = max {
            for _ in 0..workers.max(1) {
                let t = Conntrack::new(&conntrack::Config {
                    max_entries: max,
                    ..Default::default()
                })?;
                let slot = CtSlot {
                    table: AtomicRefCell::new(CtWorker {
                        table: t,
                        cursor: 0,
                        scanning: 0,
                        served: 0,
                        clock_offset: None,
                    }),
                    stats: Default::default(),
                    done: AtomicU64::new(0),
                    flushed: AtomicU64::new(0),
                    found: crossbeam_queue::ArrayQueue::new(DUMP_RING),
                };
                slot.publish(&slot.table.borrow());
                s.conntrack.push(Arc::new(slot));
            }
        }
        Ok(s)
    }

    /// List (or, with `flush`, remove) the flows `filter` matches in every worker's table
    /// (control thread): each worker scans its table a step per batch; a table whose worker
    /// makes no progress (no traffic) is scanned here, a step at a time. Returns the flows
    /// found (at most `max`; the bool says whether there were more) and the number removed.
    /// Fails with connection tracking off, or when no table moved for `timeout`.
    pub fn conntrack_scan(
        &self,
        flush: bool,
        filter: CtFilter,
        max: usize,
        timeout: std::time::Duration,
    ) -> Result<(Vec<FlowRecord>, bool, u64), ScanError> {
        if self.conntrack.is_empty() {
            return Err(ScanError::Off);
        }
        let mut next = self.ct_next.lock().map_err(|_| ScanError::Unavailable)?;
        let id = *next;
        *next += 1;
        let flushed0: Vec<u64> = self
            .conntrack
            .iter()
            .map(|c| c.flushed.load(Ordering::Relaxed))
            .collect();
        let req = CtRequest { id, flush, filter };
        self.ct_request.store(Some(Arc::new(req)));
        let mut out = Vec::new();
        let mut more = false;
        let mut take = |w: usize, c: &CtSlot| {
            while let Some(r) = c.found.pop() {
                if out.len() < max {
                    out.push(FlowRecord { worker: w, ..r });
                } else {
                    more = true;
                }
            }
        };
        // Per table: the cursor as last seen, and since when no worker moved it.
        let now = std::time::Instant::now;
        let mut seen = vec![(u32::MAX, now()); self.conntrack.len()];
        let mut progress = now();
        let result = loop {
            let mut all = true;
            for (w, c) in self.conntrack.iter().enumerate() {
                take(w, c);
                if c.done.load(Ordering::Acquire) >= id {
                    continue;
                }
                all = false;
                let Ok(mut tw) = c.table.try_borrow_mut() else {
                    continue;
                };
                if tw.cursor != seen[w].0 {
                    // The worker scans: leave it to it.
                    seen[w] = (tw.cursor, now());
                    progress = now();
                } else if seen[w].1.elapsed() > IDLE_WORKER {
                    // An idle worker runs no batch: scan a step here, and go on doing so
                    // while the worker stays idle (the cursor only moves by these steps).
                    let clock = tw
                        .clock_offset
                        .map_or(0, |o| dataplane::worker::monotonic_ns().saturating_sub(o));
                    tw.scan(&req, c, clock, CONTROL_SCAN_STEP);
                    seen[w].0 = tw.cursor;
                    progress = now();
                }
            }
            if all {
                break Ok(());
            }
            if progress.elapsed() > timeout {
                break Err(ScanError::Stalled {
                    what: if flush { "flush" } else { "dump" },
                    timeout,
                });
            }
            std::thread::sleep(std::time::Duration::from_micros(500));
        };
        self.ct_request.store(None);
        // What the last steps found.
        for (w, c) in self.conntrack.iter().enumerate() {
            take(w, c);
        }
        result?;
        let removed = self
            .conntrack
            .iter()
            .zip(flushed0)
            .map(|(c, f0)| c.flushed.load(Ordering::Relaxed) - f0)
            .sum();
        Ok((out, more, removed))
    }

    /// Take every log record waiting (control thread), at most `max`.
    pub fn drain_logs(&self, max: usize) -> Vec<LogRecord> {
        let mut out = Vec::new();
        if let Ok(mut logs) = self.logs.lock() {
            for c in logs.iter_mut() {
                while out.len() < max {
                    match c.pop() {
                        Ok(r) => out.push(r),
                        Err(_) => break,
                    }
                }
            }
        }
        out
    }
}

/// One of the four filter features.
pub struct FilterFeature {
    v6: bool,
    hook: Hook,
    shared: Arc<Shared>,
}

impl FilterFeature {
    /// The four features over `shared`, to register.
    pub fn all(shared: &Arc<Shared>) -> Vec<Arc<dyn Feature>> {
        [Hook::Ingress, Hook::Egress]
            .into_iter()
            .flat_map(|hook| {
                [false, true].into_iter().map(move |v6| {
                    Arc::new(FilterFeature {
                        v6,
                        hook,
                        shared: shared.clone(),
                    }) as Arc<dyn Feature>
                })
            })
            .collect()
    }
    /// The feature's name.
    pub fn name(v6: bool, hook: Hook) -> &'static str {
        match (v6, hook) {
            (false, Hook::Ingress) => "ip4-filter-ingress",
            (true, Hook::Ingress) => "ip6-filter-ingress",
            (false, Hook::Egress) => "ip4-filter-egress",
            (true, Hook::Egress) => "ip6-filter-egress",
        }
    }
}

impl Feature for FilterFeature {
    fn spec(&self) -> FeatureSpec {
        FeatureSpec {
            name: FilterFeature::name(self.v6, self.hook),
            arc: match (self.v6, self.hook) {
                (false, Hook::Ingress) => ArcId::Ip4Unicast,
                (true, Hook::Ingress) => ArcId::Ip6Unicast,
                (false, Hook::Egress) => ArcId::Ip4Output,
                (true, Hook::Egress) => ArcId::Ip6Output,
            },
            // Spoofed sources go first (uRPF), then the filter.
            before: &[],
            after: &[
                "ip4-urpf-strict",
                "ip4-urpf-loose",
                "ip6-urpf-strict",
                "ip6-urpf-loose",
            ],
            drops: DROPS,
        }
    }

    fn node(&self, worker: usize) -> Box<dyn FeatureNode> {
        let (tx, rx) = rtrb::RingBuffer::new(LOG_RING);
        let log = match self.shared.logs.lock() {
            Ok(mut l) => {
                l.push(rx);
                Some(tx)
            }
            Err(_) => None,
        };
        Box::new(Node {
            v6: self.v6,
            hook: self.hook,
            worker,
            ct: self.shared.conntrack.get(worker).cloned(),
            seen: Vec::with_capacity(dataplane::VECTOR_SIZE),
            shared: self.shared.clone(),
            log,
            log_rate: 0,
            log_limit: RateLimiter::new(1, 1),
            rst_limit: RateLimiter::new(RST_RATE, RST_BURST),
        })
    }
}

struct Node {
    v6: bool,
    hook: Hook,
    worker: usize,
    /// The worker's flow table (tracking on): looked up at ingress.
    ct: Option<Arc<CtSlot>>,
    /// The packets of a batch as read in the first pass: (batch position, headers, the
    /// tracker's view with its prepared lookup). Capacity for a whole vector, allocated
    /// with the node.
    seen: Vec<Seen>,
    shared: Arc<Shared>,
    log: Option<rtrb::Producer<LogRecord>>,
    log_rate: u32,
    log_limit: RateLimiter,
    rst_limit: RateLimiter,
}

/// A packet of a batch as the filter node's first pass read it: its batch position, its
/// headers, and (tracking on) the tracker's view with its prepared lookup.
type Seen = (
    usize,
    Parsed,
    Option<(conntrack::Packet, conntrack::Prepared)>,
);

/// A packet's headers as the filter reads them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// Source (IPv4 in the last 4 bytes).
    pub src: [u8; 16],
    /// Destination.
    pub dst: [u8; 16],
    /// Protocol.
    pub proto: u8,
    /// Whether the transport header is there (not a later fragment).
    pub l4: bool,
    /// Source port or ICMP type.
    pub sport: u16,
    /// Destination port or ICMP code.
    pub dport: u16,
    /// TCP flags.
    pub flags: u8,
    /// DSCP.
    pub dscp: u8,
    /// Offset of the transport header in the frame.
    pub l4_at: usize,
    /// IP length (header and payload).
    pub ip_len: usize,
    /// Offset of the IP header in the frame.
    pub ip_at: usize,
}

/// Bytes of transport header the filter needs to read, per protocol.
fn l4_need(proto: u8) -> usize {
    match proto {
        TCP => 20,
        UDP => 8,
        SCTP => 12,
        ICMP | ICMPV6 => 4,
        _ => 0,
    }
}

fn read_l4(frame: &[u8], p: &mut Parsed) -> Result<(), u8> {
    let need = l4_need(p.proto);
    if need == 0 {
        return Ok(());
    }
    // `ip_len` holds the bytes the IP packet has from the transport header on.
    if need > p.ip_len {
        return Err(MALFORMED);
    }
    let h = frame.get(p.l4_at..p.l4_at + need).ok_or(MALFORMED)?;
    match p.proto {
        ICMP | ICMPV6 => {
            p.sport = u16::from(h[0]);
            p.dport = u16::from(h[1]);
        }
        _ => {
            p.sport = u16::from_be_bytes([h[0], h[1]]);
            p.dport = u16::from_be_bytes([h[2], h[3]]);
            if p.proto == TCP {
                p.flags = h[13];
            }
        }
    }
    Ok(())
}

/// Read an IPv4 packet whose header starts at `at` (valid: ip4-input checked it).
pub fn parse4(frame: &[u8], at: usize) -> Result<Parsed, u8> {
    let h = frame.get(at..at + 20).ok_or(MALFORMED)?;
    let ihl = usize::from(h[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
    let frag = u16::from_be_bytes([h[6], h[7]]) & 0x1fff;
    let mut p = Parsed {
        proto: h[9],
        dscp: h[1] >> 2,
        l4_at: at + ihl,
        ip_len: total,
        ip_at: at,
        ..Parsed::default()
    };
    p.src[12..].copy_from_slice(&h[12..16]);
    p.dst[12..].copy_from_slice(&h[16..20]);
    if ihl < 20 || total < ihl {
        return Err(MALFORMED);
    }
    if frag != 0 {
        if frag == 1 && p.proto == TCP {
            return Err(TINY_FRAGMENT);
        }
        return Ok(p);
    }
    // The transport header must lie within the IP packet.
    p.ip_len = total - ihl;
    read_l4(frame, &mut p)?;
    p.ip_len = total;
    p.l4 = true;
    Ok(p)
}

/// Read an IPv6 packet whose header starts at `at`.
pub fn parse6(frame: &[u8], at: usize) -> Result<Parsed, u8> {
    let h = frame.get(at..at + 40).ok_or(MALFORMED)?;
    let tc = (h[0] & 0x0f) << 4 | h[1] >> 4;
    let plen = usize::from(u16::from_be_bytes([h[4], h[5]]));
    let payload = frame.get(at + 40..at + 40 + plen).ok_or(MALFORMED)?;
    let walk = wire::ipv6::walk_ext_headers(h[6], payload, wire::ipv6::MAX_EXT_HEADERS)
        .map_err(|_| MALFORMED)?;
    let mut p = Parsed {
        proto: walk.upper_protocol,
        dscp: tc >> 2,
        l4_at: at + 40 + walk.upper_offset,
        ip_len: 40 + plen,
        ip_at: at,
        ..Parsed::default()
    };
    p.src.copy_from_slice(&h[8..24]);
    p.dst.copy_from_slice(&h[24..40]);
    if walk.fragment.is_some_and(|f| f.offset_bytes != 0) {
        return Ok(p);
    }
    p.ip_len = plen - walk.upper_offset.min(plen);
    read_l4(frame, &mut p)?;
    p.ip_len = 40 + plen;
    p.l4 = true;
    Ok(p)
}

impl Parsed {
    /// The packet's key for [`crate::ruleset::CompiledFilter::judge4`], in connection-tracking
    /// state `state` (0: untracked).
    pub fn key4(&self, state: u8) -> PacketKey<u32> {
        PacketKey {
            src: u32::from_be_bytes([self.src[12], self.src[13], self.src[14], self.src[15]]),
            dst: u32::from_be_bytes([self.dst[12], self.dst[13], self.dst[14], self.dst[15]]),
            sport: self.sport,
            dport: self.dport,
            proto: u32::from(self.proto) + if self.l4 { 0 } else { NO_L4 },
            flags: self.flags,
            dscp: self.dscp,
            state,
        }
    }
    /// The packet's key for [`crate::ruleset::CompiledFilter::judge6`].
    pub fn key6(&self, state: u8) -> PacketKey<u128> {
        PacketKey {
            src: u128::from_be_bytes(self.src),
            dst: u128::from_be_bytes(self.dst),
            sport: self.sport,
            dport: self.dport,
            proto: u32::from(self.proto) + if self.l4 { 0 } else { NO_L4 },
            flags: self.flags,
            dscp: self.dscp,
            state,
        }
    }
}

/// Set the DSCP of the IP header at `at` (checksum updated for IPv4).
pub fn set_dscp(frame: &mut [u8], at: usize, v6: bool, dscp: u8) {
    if v6 {
        if let Some(h) = frame.get_mut(at..at + 2) {
            let tc = (h[0] & 0x0f) << 4 | h[1] >> 4;
            let tc = (dscp & 63) << 2 | tc & 3;
            h[0] = 0x60 | tc >> 4;
            h[1] = tc << 4 | h[1] & 0x0f;
        }
    } else if let Some(h) = frame.get_mut(at..at + 12) {
        let old = u16::from_be_bytes([h[0], h[1]]);
        h[1] = (dscp & 63) << 2 | h[1] & 3;
        let new = u16::from_be_bytes([h[0], h[1]]);
        let c = wire::checksum::update16(u16::from_be_bytes([h[10], h[11]]), old, new);
        h[10..12].copy_from_slice(&c.to_be_bytes());
    }
}

/// Rewrite the TCP segment `p` (IP header at `at`) in place into the RST that answers it
/// (RFC 9293 §3.10.7.1: SEQ = the segment's ACK if it had one, else 0 with ACK = its
/// SEQ + length). Returns the new IP length, or `None` for a segment that must not be
/// answered (a RST) or does not fit.
pub fn rst_in_place(frame: &mut [u8], at: usize, v6: bool, p: &Parsed) -> Option<usize> {
    let tcp = frame.get(p.l4_at..p.l4_at + 20)?;
    let flags = tcp[13];
    if flags & 0x04 != 0 {
        return None;
    }
    let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
    let ack = u32::from_be_bytes([tcp[8], tcp[9], tcp[10], tcp[11]]);
    let doff = usize::from(tcp[12] >> 4) * 4;
    let seg_len = p.ip_len.checked_sub(p.l4_at - at + doff)?
        + usize::from(flags & 0x02 != 0)
        + usize::from(flags & 0x01 != 0);
    let (rseq, rack, rflags) = if flags & 0x10 != 0 {
        (ack, 0, 0x04)
    } else {
        (0, seq.wrapping_add(seg_len as u32), 0x14)
    };
    let (sport, dport) = (p.sport, p.dport);
    let ip_hlen = if v6 { 40 } else { 20 };
    let out = frame.get_mut(at..at + ip_hlen + 20)?;
    let (ip, t) = out.split_at_mut(ip_hlen);
    if v6 {
        ip.fill(0);
        ip[0] = 0x60;
        ip[4..6].copy_from_slice(&20u16.to_be_bytes());
        ip[6] = TCP;
        ip[7] = 64;
        ip[8..24].copy_from_slice(&p.dst);
        ip[24..40].copy_from_slice(&p.src);
    } else {
        ip.fill(0);
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&40u16.to_be_bytes());
        ip[6] = 0x40; // DF
        ip[8] = 64;
        ip[9] = TCP;
        ip[12..16].copy_from_slice(&p.dst[12..]);
        ip[16..20].copy_from_slice(&p.src[12..]);
        let c = wire::checksum::checksum(ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
    }
    t.fill(0);
    t[0..2].copy_from_slice(&dport.to_be_bytes());
    t[2..4].copy_from_slice(&sport.to_be_bytes());
    t[4..8].copy_from_slice(&rseq.to_be_bytes());
    t[8..12].copy_from_slice(&rack.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = rflags;
    let pseudo = if v6 {
        wire::checksum::pseudo_v6(&p.dst, &p.src, TCP, 20)
    } else {
        let a = |x: &[u8; 16]| u32::from_be_bytes([x[12], x[13], x[14], x[15]]);
        wire::checksum::pseudo_v4(a(&p.dst), a(&p.src), TCP, 20)
    };
    let c = wire::checksum::fold(pseudo + wire::checksum::sum(t));
    t[16..18].copy_from_slice(&(!c).to_be_bytes());
    Some(ip_hlen + 20)
}

impl FeatureNode for Node {
    fn process(&mut self, cx: &mut FeatureCx<'_>, b: &mut Batch<'_>) {
        let rs = self.shared.rules.load();
        // A worker beyond the counters the rule set was compiled for is still filtered
        // (never fail open); it just goes uncounted.
        let ctr = rs.counters(self.worker);
        if rs.log_rate != self.log_rate {
            self.log_rate = rs.log_rate;
            let r = u64::from(rs.log_rate.max(1));
            self.log_limit = RateLimiter::new(r, r);
        }
        self.log_limit.refill(cx.now_ns);
        self.rst_limit.refill(cx.now_ns);
        // Tracking happens where packets come in; the output arcs read the state the input
        // arcs left in the packet's feature bits.
        let slot = if self.hook == Hook::Ingress {
            self.ct.clone()
        } else {
            None
        };
        let mut table = slot.as_deref().and_then(borrow_table);
        // First pass: read every packet's headers, and with tracking its flow's key, its
        // buckets prefetched; then its entries prefetched. The lookups (in order, each
        // seeing the flows created before it) then find the table in cache.
        let mut seen = std::mem::take(&mut self.seen);
        seen.clear();
        for k in 0..b.len() {
            let Some(pk) = b.pkt(k).copied() else {
                continue;
            };
            if rs.filter(self.hook, b.iface(k)).is_none() && table.is_none() {
                continue;
            }
            let at = pk.off as usize + pk.l3 as usize;
            let frame = cx.mem.frame(pk.buf);
            let parsed = if self.v6 {
                parse6(frame, at)
            } else {
                parse4(frame, at)
            };
            match parsed {
                Ok(p) => {
                    let ct = table.as_deref().and_then(|w| {
                        let cp = ct_packet(frame, &p, self.v6, cx.now_ns)?;
                        Some((cp, w.table.prepare(&cp)))
                    });
                    seen.push((k, p, ct));
                }
                Err(r) => b.drop(k, r),
            }
        }
        if let Some(w) = table.as_deref() {
            for (_, _, ct) in &seen {
                if let Some((_, pre)) = ct {
                    w.table.prefetch_entries(pre);
                }
            }
        }
        for &(k, p, ct) in &seen {
            let Some(pk) = b.pkt(k).copied() else {
                continue;
            };
            let iface = b.iface(k);
            let f = rs.filter(self.hook, iface);
            let at = pk.off as usize + pk.l3 as usize;
            // Connection tracking: the state the rules match, and the flow to create if
            // they accept a new one.
            let (st, pending) = match table.as_deref_mut() {
                Some(w) => match ct {
                    Some((cp, pre)) => {
                        let v = w.table.lookup_prepared(&cp, &pre);
                        let new = v.state == CtState::New && v.flow.is_none();
                        (state_bit(v.state), new.then_some((cp, v)))
                    }
                    None => (0, None),
                },
                None => (meta_state(pk.flags), None),
            };
            if self.hook == Hook::Ingress && self.ct.is_some() {
                if let Some(q) = b.pkt_mut(k) {
                    q.flags = q.flags & !STATE_META | u16::from(st) << STATE_SHIFT;
                }
            }
            let (action, rule) = match f {
                Some(f) => {
                    let v: Verdict = match f.by_state(self.v6, st) {
                        // `established,related accept` first: no classification.
                        Some(v) => v,
                        None if self.v6 => f.judge6(&p.key6(st)),
                        None => f.judge4(&p.key4(st)),
                    };
                    if let Some(c) = ctr {
                        c.add(v.slot, p.ip_len as u64);
                    }
                    let rule = v.rule.and_then(|r| f.rules.get(r as usize));
                    if rule.is_some_and(|r| r.log) {
                        self.log(cx.now_ns, iface, f, &v, &p);
                    }
                    (v.action, rule.copied())
                }
                None => (Action::Accept, None),
            };
            match action {
                Action::Accept => {
                    if let (Some((cp, v)), Some(w)) = (pending, table.as_deref_mut()) {
                        if w.table.create(&cp, &v).is_err() {
                            b.drop(k, CONNTRACK_FULL);
                            continue;
                        }
                    }
                    if let Some(d) = rule.map(|r| r.set_dscp).filter(|&d| d != 0xff) {
                        set_dscp(cx.mem.frame_mut(pk.buf), at, self.v6, d);
                    }
                }
                Action::Drop => b.drop(k, RULE_DROP),
                Action::Reject => self.reject(cx, b, k, at, &p),
            }
        }
        self.seen = seen;
        if let (Some(w), Some(s)) = (table.as_deref_mut(), slot.as_deref()) {
            w.table.sweep(cx.now_ns, SWEEP_PER_BATCH);
            if w.clock_offset.is_none() {
                w.clock_offset = Some(dataplane::worker::monotonic_ns().saturating_sub(cx.now_ns));
            }
            if let Some(req) = self.shared.ct_request.load().as_deref() {
                w.scan(req, s, cx.now_ns, SCAN_STEP);
            }
            s.publish(w);
        }
    }
}

/// The worker's table. Only the control thread's step of a scan (an idle worker's, a few
/// microseconds) can hold it: wait that long at most (bounded spins), then go without
/// tracking for this batch, counted as `busy`.
fn borrow_table(s: &CtSlot) -> Option<atomic_refcell::AtomicRefMut<'_, CtWorker>> {
    for _ in 0..BORROW_SPINS {
        if let Ok(t) = s.table.try_borrow_mut() {
            return Some(t);
        }
        std::hint::spin_loop();
    }
    s.stats[8].fetch_add(1, Ordering::Relaxed);
    None
}

/// Spins [`borrow_table`] waits at most (tens of microseconds).
const BORROW_SPINS: u32 = 20_000;

/// Flow-table entries a worker looks at for expiry per batch.
pub const SWEEP_PER_BATCH: usize = 64;

/// The state bit rules match ([`state`]) for a tracker's state.
fn state_bit(s: CtState) -> u8 {
    match s {
        CtState::New => state::NEW,
        CtState::Established => state::ESTABLISHED,
        CtState::Related => state::RELATED,
        CtState::Invalid => state::INVALID,
    }
}

/// The state an input arc left in the packet's feature bits (0: not tracked).
fn meta_state(flags: u16) -> u8 {
    ((flags & STATE_META) >> STATE_SHIFT) as u8
}

/// The firewall's part of `dataplane::F_FEATURE_META`: the connection-tracking state.
pub const STATE_META: u16 = 0xf000;
const STATE_SHIFT: u32 = 12;
const _: () = assert!(STATE_META & dataplane::F_FEATURE_META == STATE_META);
const _: () = assert!(STATE_META & crate::nat::meta::MASK == 0);

/// The tracker's view of a parsed packet; `None` for what it cannot track (a later
/// fragment, whose transport header is in the first).
pub fn ct_packet(frame: &[u8], p: &Parsed, v6: bool, now_ns: u64) -> Option<conntrack::Packet> {
    if !p.l4 {
        return None;
    }
    let tuple = |sport, dport| Tuple {
        src: u128::from_be_bytes(p.src),
        dst: u128::from_be_bytes(p.dst),
        sport,
        dport,
        proto: p.proto,
        v6,
        zone: 0,
    };
    let l4 = frame.get(p.l4_at..)?;
    Some(match p.proto {
        TCP => {
            let h = l4.get(..20)?;
            let doff = usize::from(h[12] >> 4) * 4;
            let payload = (p.ip_len + p.ip_at).checked_sub(p.l4_at + doff)?;
            let syn = h[13] & 0x02 != 0;
            conntrack::Packet {
                tuple: tuple(p.sport, p.dport),
                l4: L4::Tcp(Segment {
                    flags: h[13],
                    seq: u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
                    ack: u32::from_be_bytes([h[8], h[9], h[10], h[11]]),
                    window: u16::from_be_bytes([h[14], h[15]]),
                    wscale: if syn {
                        wscale(l4.get(20..doff.max(20))?)
                    } else {
                        None
                    },
                    payload_len: payload as u32,
                }),
                now_ns,
            }
        }
        UDP | SCTP => conntrack::Packet {
            tuple: tuple(p.sport, p.dport),
            l4: if p.proto == UDP { L4::Udp } else { L4::Other },
            now_ns,
        },
        ICMP | ICMPV6 => {
            use wire::{icmpv4::msg_type as m4, icmpv6::msg_type as m6};
            let ty = l4.first().copied()?;
            let (echo, reply, error) = if p.proto == ICMPV6 {
                (
                    matches!(ty, m6::ECHO_REQUEST | m6::ECHO_REPLY),
                    ty == m6::ECHO_REPLY,
                    m6::is_error(ty),
                )
            } else {
                (
                    matches!(ty, m4::ECHO_REQUEST | m4::ECHO_REPLY),
                    ty == m4::ECHO_REPLY,
                    m4::is_error(ty),
                )
            };
            if echo {
                let id = u16::from_be_bytes([*l4.get(4)?, *l4.get(5)?]);
                conntrack::Packet {
                    tuple: tuple(id, id),
                    l4: L4::IcmpEcho { reply },
                    now_ns,
                }
            } else if error {
                conntrack::Packet {
                    tuple: tuple(0, 0),
                    l4: L4::IcmpError {
                        inner: quoted(l4.get(8..)?, v6)?,
                    },
                    now_ns,
                }
            } else {
                conntrack::Packet {
                    tuple: tuple(0, 0),
                    l4: L4::Other,
                    now_ns,
                }
            }
        }
        _ => conntrack::Packet {
            tuple: tuple(0, 0),
            l4: L4::Other,
            now_ns,
        },
    })
}

/// The window-scale option's shift among TCP `options` (bounded walk).
fn wscale(options: &[u8]) -> Option<u8> {
    let mut i = 0;
    while i < options.len() {
        match options[i] {
            0 => return None,
            1 => i += 1,
            kind => {
                let len = usize::from(*options.get(i + 1)?);
                if len < 2 {
                    return None;
                }
                if kind == 3 && len == 3 {
                    return options.get(i + 2).copied();
                }
                i += len;
            }
        }
    }
    None
}

/// The tuple of the packet an ICMP error quotes (`q`: from its IP header on), as it was
/// sent: ports, or an echo's identifier in both.
fn quoted(q: &[u8], v6: bool) -> Option<Tuple> {
    let (src, dst, proto, l4) = if v6 {
        let h = q.get(..40)?;
        let walk =
            wire::ipv6::walk_ext_headers(h[6], q.get(40..)?, wire::ipv6::MAX_EXT_HEADERS).ok()?;
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s.copy_from_slice(&h[8..24]);
        d.copy_from_slice(&h[24..40]);
        (
            u128::from_be_bytes(s),
            u128::from_be_bytes(d),
            walk.upper_protocol,
            q.get(40 + walk.upper_offset..)?,
        )
    } else {
        let h = q.get(..20)?;
        let ihl = usize::from(h[0] & 0x0f) * 4;
        let a = |o: usize| u128::from(u32::from_be_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]));
        (a(12), a(16), h[9], q.get(ihl..)?)
    };
    let (sport, dport) = match proto {
        TCP | UDP | SCTP => (
            u16::from_be_bytes([*l4.first()?, *l4.get(1)?]),
            u16::from_be_bytes([*l4.get(2)?, *l4.get(3)?]),
        ),
        ICMP | ICMPV6 => {
            let id = u16::from_be_bytes([*l4.get(4)?, *l4.get(5)?]);
            (id, id)
        }
        _ => (0, 0),
    };
    Some(Tuple {
        src,
        dst,
        sport,
        dport,
        proto,
        v6,
        zone: 0,
    })
}

impl Node {
    fn reject(
        &mut self,
        cx: &mut FeatureCx<'_>,
        b: &mut Batch<'_>,
        k: usize,
        at: usize,
        p: &Parsed,
    ) {
        if p.proto == TCP && p.l4 {
            if !self.rst_limit.take() {
                b.drop(k, REJECT_LIMITED);
                return;
            }
            let Some(pk) = b.pkt(k).copied() else { return };
            match rst_in_place(cx.mem.frame_mut(pk.buf), at, self.v6, p) {
                Some(len) => {
                    if let Some(q) = b.pkt_mut(k) {
                        q.len = q.l3 + len as u16;
                    }
                    b.reject(k, REJECT, Reply::Rewritten);
                }
                None => b.drop(k, REJECT),
            }
        } else {
            let (ty, code) = if self.v6 { (1, 1) } else { (3, 13) };
            b.reject(k, REJECT, Reply::IcmpError { ty, code });
        }
    }

    fn log(
        &mut self,
        now_ns: u64,
        iface: u16,
        f: &crate::ruleset::CompiledFilter,
        v: &Verdict,
        p: &Parsed,
    ) {
        let Some(tx) = self.log.as_mut() else {
            self.shared.log_suppressed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if !self.log_limit.take() {
            self.shared.log_suppressed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let rec = LogRecord {
            now_ns,
            worker: self.worker as u16,
            iface,
            hook: self.hook,
            filter: f.index,
            rule: v.rule,
            action: v.action,
            v6: self.v6,
            src: p.src,
            dst: p.dst,
            proto: p.proto,
            sport: p.sport,
            dport: p.dport,
            len: p.ip_len as u16,
        };
        if tx.push(rec).is_err() {
            self.shared.log_suppressed.fetch_add(1, Ordering::Relaxed);
        }
    }
}
