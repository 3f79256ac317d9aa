//! The stateful traffic generator: emulated clients behind port 0 open TCP connections (or
//! UDP request/response pairs) through the device under test to emulated servers behind
//! port 1, as TRex ASTF or an RFC 9411 test tool does, on one core.
//!
//! # A TCP connection
//! ```text
//! client (port 0)                          server (port 1)
//! SYN  (MSS, WS 7, SACK-perm)      ──▶
//!                                  ◀──     SYN-ACK (MSS, WS 7, SACK-perm)
//! ACK                              ──▶
//! request (ceil(request/MSS) segments, PSH on the last) ──▶
//!                                  ◀──     response (likewise; acks the request)
//! [ACK, then hold for `hold`]
//! FIN-ACK                          ──▶
//!                                  ◀──     FIN-ACK
//! ACK                              ──▶
//! ```
//! Sequence and acknowledgement numbers are exact (random initial sequence numbers, every
//! byte counted), windows are 65535 scaled by 2^7, so a stateful firewall tracking TCP
//! windows (netfilter's conntrack, ours) accepts every segment. Data is not retransmitted:
//! a lost data segment makes its connection fail by timeout. Segments that arrive out of
//! order are counted and ignored (the connection then fails the same way).
//!
//! # A UDP transaction
//! One request datagram of `request_bytes`, answered by one datagram of `response_bytes`
//! from the server the request reached; the request is retried `retries` times.
//!
//! # Rate, concurrency and tuples
//! New connections follow a schedule: connection `k` is due at `start + k / cps`, at most
//! `burst` per loop iteration; `floor(cps × duration)` are planned. A due connection waits
//! while `max_concurrent` are open, or while the next client tuple is still in use or in
//! quarantine; once the schedule is more than `max_lag` ahead, the oldest due slots are
//! given up and counted in [`StatefulResult::skipped`] (with the reason that held them).
//! Connections that a stall of the tester itself kept back at the end of `duration` are
//! opened up to `max_lag` after it.
//!
//! Client tuples (address, port) are taken in a fixed cycle over `clients` ×
//! `client_ports` (address first, so consecutive connections come from different
//! addresses), and a tuple is reused only `reuse_delay` after its connection ended
//! (120 s by default, netfilter's TIME_WAIT timeout): the DUT never sees a new SYN on a
//! tuple it may still track. Size the space for `cps × (connection lifetime + reuse_delay)`
//! tuples. Servers are taken round robin over `servers` × `server_ports`.
//!
//! # Tables
//! Clients live in a slab of `max_concurrent` connections found directly from the tuple a
//! reply is addressed to (the reply to a client comes back to the tuple it sent from,
//! whatever NAT the DUT does). Servers key their connections by the tuple *they* see, in
//! a hash table, so a DUT that rewrites the client's address and port (NAT) is served.
//! Timeouts are deadlines in the entries, found by a hand that visits a few entries per
//! loop iteration (no timer per connection). Nothing is allocated per packet after
//! setup; malformed or unexpected frames are counted and dropped, never logged.
//!
//! # Accounting
//! `attempted = completed + failed + reset + unfinished` always: a connection ends
//! exactly once, as completed (TCP: both FINs exchanged and acknowledged; UDP: response
//! received and the hold over), failed (by reason: no SYN-ACK after the retries, no
//! complete response, no FIN-ACK), reset (a valid RST received), or is still open when the
//! run ends (`unfinished`).
//!
//! IPv4 only.
//!
//! ```
//! use std::time::Duration;
//! use dataplane::Arena;
//! use tester::clock::VirtualClock;
//! use tester::flows::AddrRange;
//! use tester::stateful::{Macs, Proto, Stateful, StatefulConfig};
//! use tester::testing::loop_pair;
//!
//! let macs = Macs { src: [2, 0, 0, 0, 0, 1], dst: [2, 0, 0, 0, 1, 1] };
//! let mut cfg = StatefulConfig::new(
//!     Proto::Tcp,
//!     macs,
//!     macs,
//!     AddrRange::new("198.18.1.1".parse().unwrap(), 16),
//!     AddrRange::single("198.19.1.1".parse().unwrap()),
//! );
//! cfg.cps = 10_000.0;
//! cfg.duration = Duration::from_millis(50);
//! // A wire from the clients' port to the servers' port stands in for the DUT.
//! let (mut clients, mut servers) = loop_pair(4096);
//! let mut mem = Arena::new(8192);
//! let r = Stateful::new(&cfg)
//!     .unwrap()
//!     .run_with_clock(&mut mem, &mut clients, &mut servers, &mut VirtualClock::new(0, 1000))
//!     .unwrap();
//! assert_eq!((r.attempted, r.completed, r.failed, r.reset), (500, 500, 0, 0));
//! assert_eq!(r.transaction_latency.samples, 500);
//! ```

mod segment;
mod table;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{bail, Result};
use dataplane::buffer::{PacketMemory, Pkt, Vector, HEADROOM, VECTOR_SIZE};
use dataplane::worker::Port;
use serde::{Deserialize, Serialize};

use crate::clock::{Clock, MonotonicClock};
use crate::flows::{AddrRange, PortRange};
use crate::latency::{LatencyHistogram, LatencyStats};
use segment::{flags, parse, Parsed, Seg, TcpFields, Writer, MAX_PAYLOAD, WINDOW, WSCALE};
use table::{Key, ServerState, ServerTable, TupleWait, Tuples};

/// Transport of the generated connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// TCP connections: handshake, request, response, close.
    Tcp,
    /// UDP request/response pairs.
    Udp,
}

impl FromStr for Proto {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Proto> {
        match s {
            "tcp" => Ok(Proto::Tcp),
            "udp" => Ok(Proto::Udp),
            _ => bail!("protocol {s:?}: expected tcp or udp"),
        }
    }
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        })
    }
}

/// MACs of the frames one side sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Macs {
    /// The tester port's.
    pub src: [u8; 6],
    /// The DUT port's the frames enter.
    pub dst: [u8; 6],
}

/// Largest TCP request or response: every segment of it is sent at once, without flow
/// control, so it must fit the peer's window and the port's ring.
pub const MAX_TCP_BYTES: u32 = 64 * 1024;
/// Largest UDP request or response (one datagram in a 1500-byte MTU).
pub const MAX_UDP_BYTES: u32 = MAX_PAYLOAD as u32;

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct StatefulConfig {
    /// TCP or UDP.
    pub proto: Proto,
    /// MACs of the client side (frames sent on port 0).
    pub client_macs: Macs,
    /// MACs of the server side (frames sent on port 1).
    pub server_macs: Macs,
    /// Client addresses (IPv4).
    pub clients: AddrRange,
    /// Client ports of every client address.
    pub client_ports: PortRange,
    /// Server addresses (IPv4).
    pub servers: AddrRange,
    /// Server ports of every server address.
    pub server_ports: PortRange,
    /// Request bytes (TCP 1..=[`MAX_TCP_BYTES`], UDP 1..=[`MAX_UDP_BYTES`]).
    pub request_bytes: u32,
    /// Response bytes (same limits).
    pub response_bytes: u32,
    /// New connections per second.
    pub cps: f64,
    /// How long new connections are opened.
    pub duration: Duration,
    /// Most connections open at once (1..=2^24).
    pub max_concurrent: u32,
    /// How long a connection stays open after its response, before the client closes it.
    pub hold: Duration,
    /// First SYN retransmission timeout; it doubles on each retry (as Linux does).
    pub syn_timeout: Duration,
    /// Retransmissions of a SYN (TCP) or request (UDP) before the connection fails.
    pub retries: u8,
    /// From the request (its last retransmission for UDP) to the complete response.
    pub response_timeout: Duration,
    /// From the client's FIN to the server's FIN-ACK.
    pub close_timeout: Duration,
    /// How long a client tuple rests after its connection ended before it is reused.
    pub reuse_delay: Duration,
    /// How long to keep running after the last new connection for open ones to finish;
    /// `None`: the longest a connection can take (every timeout plus the hold).
    pub drain: Option<Duration>,
    /// MSS the emulated hosts announce and send with (88..=1460).
    pub mss: u16,
    /// TTL of every frame.
    pub ttl: u8,
    /// Most new connections per loop iteration (1..=256).
    pub burst: usize,
    /// How far behind schedule opening may fall before due connections are given up.
    pub max_lag: Duration,
    /// Seed of the initial sequence numbers.
    pub seed: u64,
}

impl StatefulConfig {
    /// Defaults: client ports 1024..=65535, server port 80 (TCP) or 53 (UDP), 64-byte
    /// request, 1024-byte response, 1000 connections/s for 1 s, at most 10,000 open, no
    /// hold, SYN timeout 1 s with 1 retry, response and close timeouts 1 s, reuse delay
    /// 120 s, MSS 1460, TTL 64, burst 32, max lag 10 ms.
    pub fn new(
        proto: Proto,
        client_macs: Macs,
        server_macs: Macs,
        clients: AddrRange,
        servers: AddrRange,
    ) -> StatefulConfig {
        StatefulConfig {
            proto,
            client_macs,
            server_macs,
            clients,
            client_ports: PortRange::new(1024, 65536 - 1024),
            servers,
            server_ports: PortRange::single(if proto == Proto::Tcp { 80 } else { 53 }),
            request_bytes: 64,
            response_bytes: 1024,
            cps: 1000.0,
            duration: Duration::from_secs(1),
            max_concurrent: 10_000,
            hold: Duration::ZERO,
            syn_timeout: Duration::from_secs(1),
            retries: 1,
            response_timeout: Duration::from_secs(1),
            close_timeout: Duration::from_secs(1),
            reuse_delay: Duration::from_secs(120),
            drain: None,
            mss: 1460,
            ttl: 64,
            burst: 32,
            max_lag: Duration::from_millis(10),
            seed: 1,
        }
    }

    /// The longest a connection can live: every SYN attempt, the response, the hold and
    /// the close.
    pub fn max_lifetime(&self) -> Duration {
        let syn = self.syn_timeout * ((1u32 << (self.retries.min(16) + 1)) - 1);
        let first = match self.proto {
            Proto::Tcp => syn,
            Proto::Udp => self.response_timeout * u32::from(self.retries),
        };
        first + self.response_timeout + self.hold + self.close_timeout
    }

    fn v4(r: &AddrRange, what: &str) -> Result<(u32, u32)> {
        let std::net::IpAddr::V4(a) = r.first else {
            bail!("{what} {}: the stateful generator is IPv4 only", r.first);
        };
        let first = u32::from(a);
        if r.count == 0 || u64::from(first) + u64::from(r.count) > 1 << 32 {
            bail!("{what}: {} addresses from {a} do not fit IPv4", r.count);
        }
        Ok((first, r.count))
    }

    fn ports(r: &PortRange, what: &str) -> Result<()> {
        if r.count == 0 || u32::from(r.first) + r.count > 65536 {
            bail!(
                "{what}: {} ports from {} do not fit 0..=65535",
                r.count,
                r.first
            );
        }
        Ok(())
    }

    /// Check every field; the errors say which and what is allowed.
    pub fn validate(&self) -> Result<()> {
        let (_, ca) = Self::v4(&self.clients, "clients")?;
        Self::v4(&self.servers, "servers")?;
        Self::ports(&self.client_ports, "client ports")?;
        Self::ports(&self.server_ports, "server ports")?;
        if u64::from(ca) * u64::from(self.client_ports.count) >= 1 << 31 {
            bail!("clients × client ports must be below 2^31 tuples");
        }
        let max = match self.proto {
            Proto::Tcp => MAX_TCP_BYTES,
            Proto::Udp => MAX_UDP_BYTES,
        };
        for (what, v) in [
            ("request", self.request_bytes),
            ("response", self.response_bytes),
        ] {
            if v == 0 || v > max {
                bail!("{} {what} size {v} bytes: must be 1..={max}", self.proto);
            }
        }
        if !(self.cps.is_finite() && self.cps > 0.0 && self.cps <= 1e8) {
            bail!("connection rate {} /s: must be in (0, 1e8]", self.cps);
        }
        if self.max_concurrent == 0 || self.max_concurrent > 1 << 24 {
            bail!(
                "max concurrent connections {}: must be 1..=2^24",
                self.max_concurrent
            );
        }
        if !(88..=1460).contains(&self.mss) {
            bail!("MSS {}: must be 88..=1460", self.mss);
        }
        if self.burst == 0 || self.burst > VECTOR_SIZE {
            bail!("burst {}: must be 1..={VECTOR_SIZE}", self.burst);
        }
        if self.retries > 8 {
            bail!("retries {}: at most 8", self.retries);
        }
        if self.reuse_delay > Duration::from_secs(86_400) {
            bail!("reuse delay {:?}: at most a day", self.reuse_delay);
        }
        if self.planned() == 0 {
            bail!(
                "{} connections/s for {:?} is less than one connection",
                self.cps,
                self.duration
            );
        }
        Ok(())
    }

    /// Connections the schedule opens: `floor(cps × duration)`.
    pub fn planned(&self) -> u64 {
        let rate_m = (self.cps * 1000.0).round() as u128;
        (self.duration.as_nanos() * rate_m / 1_000_000_000_000) as u64
    }
}

/// Failed connections by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failures {
    /// No SYN-ACK after every SYN retransmission (TCP).
    pub syn_timeout: u64,
    /// No complete response in time (TCP), or none after every retry (UDP).
    pub response_timeout: u64,
    /// No FIN-ACK after the client's FIN (TCP).
    pub close_timeout: u64,
}

impl Failures {
    /// All reasons together.
    pub fn total(&self) -> u64 {
        self.syn_timeout + self.response_timeout + self.close_timeout
    }
}

/// Schedule slots given up (connections never attempted), by what held them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// `max_concurrent` connections were open.
    pub concurrency: u64,
    /// The next client tuple was still in use or resting (`reuse_delay`).
    pub tuples: u64,
    /// The tester itself fell behind (or the run's duration ended first).
    pub late: u64,
}

impl Skipped {
    /// All reasons together.
    pub fn total(&self) -> u64 {
        self.concurrency + self.tuples + self.late
    }
}

/// What the emulated servers saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerCounts {
    /// Connections accepted (SYN answered), or UDP requests answered.
    pub accepted: u64,
    /// SYN-ACKs sent again for a retransmitted SYN.
    pub syn_ack_retransmits: u64,
    /// Responses sent (TCP).
    pub responses: u64,
    /// Connections closed by the last ACK (TCP).
    pub closed: u64,
    /// Connections ended by a RST from the client side.
    pub reset: u64,
    /// Connections dropped after being idle too long.
    pub expired: u64,
    /// SYNs refused because the server table was full.
    pub table_full: u64,
}

/// Everything measured in one run. Packet counters are per port: `[client, server]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatefulResult {
    /// TCP or UDP.
    pub proto: Option<Proto>,
    /// Requested connection rate, /s.
    pub cps_target: f64,
    /// Achieved rate of new connections: `attempted / open_elapsed_s`.
    pub cps_achieved: f64,
    /// Requested duration of the opening phase, s.
    pub duration_s: f64,
    /// Time from the first connection to the end of the opening phase, s.
    pub open_elapsed_s: f64,
    /// Time of the whole run (opening and drain), s.
    pub elapsed_s: f64,
    /// Request size, bytes.
    pub request_bytes: u32,
    /// Response size, bytes.
    pub response_bytes: u32,
    /// The concurrency limit.
    pub max_concurrent: u32,
    /// Connections the schedule planned: `attempted + skipped.total()`.
    pub planned: u64,
    /// Connections started (first SYN or request sent).
    pub attempted: u64,
    /// TCP: SYN-ACK received. UDP: response received.
    pub established: u64,
    /// Ended normally.
    pub completed: u64,
    /// Ended by a timeout: `failures.total()`.
    pub failed: u64,
    /// Ended by a RST.
    pub reset: u64,
    /// Of `reset`, those reset before the SYN-ACK.
    pub reset_before_established: u64,
    /// Still open when the run ended.
    pub unfinished: u64,
    /// Failures by reason.
    pub failures: Failures,
    /// Slots given up, by reason.
    pub skipped: Skipped,
    /// SYNs sent again.
    pub syn_retransmits: u64,
    /// UDP requests sent again.
    pub request_retransmits: u64,
    /// Most connections open at once.
    pub concurrent_max: u32,
    /// SYN sent → SYN-ACK received (TCP).
    pub connect_latency: LatencyStats,
    /// First packet sent (SYN, or UDP request) → complete response received.
    pub transaction_latency: LatencyStats,
    /// Request sent → complete response received.
    pub response_latency: LatencyStats,
    /// Frames sent (accepted by the port).
    pub tx_packets: [u64; 2],
    /// Frames received.
    pub rx_packets: [u64; 2],
    /// Bytes sent, with FCS.
    pub tx_bytes: [u64; 2],
    /// Bytes received, with FCS.
    pub rx_bytes: [u64; 2],
    /// Received IPv4 TCP/UDP frames that are truncated or fail a checksum.
    pub rx_malformed: u64,
    /// Received frames that are not IPv4 TCP/UDP (ARP, IPv6, ...).
    pub rx_foreign: u64,
    /// Valid segments that fit no connection or no state (late, duplicate, wrong numbers).
    pub rx_unexpected: u64,
    /// Data segments that arrived ahead of a missing one (dropped; no reassembly).
    pub rx_out_of_order: u64,
    /// Frames the ports refused (ring full): lost.
    pub tx_refused: u64,
    /// Frames not built because the packet memory was exhausted.
    pub tx_no_buffer: u64,
    /// The emulated servers' view.
    pub server: ServerCounts,
}

impl StatefulResult {
    /// Whether every attempted connection is accounted for exactly once.
    pub fn balanced(&self) -> bool {
        self.attempted == self.completed + self.failed + self.reset + self.unfinished
    }

    /// `(failed + reset) / attempted` (0 when nothing was attempted).
    pub fn failed_ratio(&self) -> f64 {
        if self.attempted == 0 {
            0.0
        } else {
            (self.failed + self.reset) as f64 / self.attempted as f64
        }
    }
}

/// Client-side state of a connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum ClientState {
    #[default]
    Free,
    /// SYN sent (TCP).
    SynSent,
    /// Request sent, response not complete.
    AwaitResponse,
    /// Response complete, holding the connection open.
    Holding,
    /// FIN sent (TCP).
    FinWait,
}

/// One client connection (48 bytes).
#[derive(Clone, Copy, Debug, Default)]
struct Conn {
    state: ClientState,
    retries: u8,
    /// MSS of our segments (the server's, capped by ours).
    mss: u16,
    server_port: u16,
    tuple: u32,
    server: u32,
    iss: u32,
    irs: u32,
    /// Response bytes received in order.
    rcvd: u32,
    t_open: u64,
    t_req: u64,
    deadline: u64,
}

/// How long the servers keep receiving, once every client connection has ended, while
/// frames still arrive (the last ACKs in flight).
const LINGER_NS: u64 = 1_000_000;

/// Entries the timer hands visit per loop iteration.
const SCAN: u32 = 64;

#[derive(Default)]
struct Counters {
    planned: u64,
    slots: u64,
    attempted: u64,
    established: u64,
    completed: u64,
    reset: u64,
    reset_syn: u64,
    failures: Failures,
    skipped: Skipped,
    syn_rtx: u64,
    req_rtx: u64,
    concurrent_max: u32,
    tx: [u64; 2],
    rx: [u64; 2],
    tx_bytes: [u64; 2],
    rx_bytes: [u64; 2],
    malformed: u64,
    foreign: u64,
    unexpected: u64,
    out_of_order: u64,
    refused: u64,
    no_buffer: u64,
    server: ServerCounts,
}

/// Why the last due connection waited.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Block {
    None,
    Concurrency,
    Tuples,
}

/// The generator: tables, frame writers and histograms for one [`StatefulConfig`]; run it
/// any number of times.
pub struct Stateful {
    cfg: StatefulConfig,
    writers: [Writer; 2],
    tuples: Tuples,
    servers: (u32, u32),
    conns: Vec<Conn>,
    free: Vec<u32>,
    active: u32,
    high: u32,
    hand: u32,
    stab: ServerTable,
    shand: u32,
    /// connect, transaction, response.
    hist: [LatencyHistogram; 3],
    rxv: Box<Vector>,
    txq: [Vec<Pkt>; 2],
    c: Counters,
    block: Block,
    start: u64,
    server_idle: u64,
}

impl fmt::Debug for Stateful {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stateful")
            .field("proto", &self.cfg.proto)
            .field("max_concurrent", &self.cfg.max_concurrent)
            .field("tuples", &self.tuples.len())
            .finish()
    }
}

#[inline]
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[inline]
fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX / 4)) as u64
}

impl Stateful {
    /// Validate `cfg` and allocate the tables (client slab of `max_concurrent`, server
    /// table of twice that for TCP).
    pub fn new(cfg: &StatefulConfig) -> Result<Stateful> {
        cfg.validate()?;
        let (cfirst, caddrs) = StatefulConfig::v4(&cfg.clients, "clients")?;
        let (sfirst, saddrs) = StatefulConfig::v4(&cfg.servers, "servers")?;
        let n = cfg.max_concurrent;
        // Server entries outlive their clients a little (a lost last ACK, a client that
        // gave up): room for twice as many.
        let scap = if cfg.proto == Proto::Tcp { n * 2 } else { 1 };
        Ok(Stateful {
            cfg: cfg.clone(),
            writers: [
                Writer::new(cfg.client_macs.src, cfg.client_macs.dst, cfg.ttl),
                Writer::new(cfg.server_macs.src, cfg.server_macs.dst, cfg.ttl),
            ],
            tuples: Tuples::new(
                cfirst,
                caddrs,
                cfg.client_ports.first,
                cfg.client_ports.count,
            ),
            servers: (sfirst, saddrs),
            conns: vec![Conn::default(); n as usize],
            free: Vec::with_capacity(n as usize),
            active: 0,
            high: 0,
            hand: 0,
            stab: ServerTable::new(scap),
            shand: 0,
            hist: [
                LatencyHistogram::new(),
                LatencyHistogram::new(),
                LatencyHistogram::new(),
            ],
            rxv: Box::default(),
            txq: [
                Vec::with_capacity(VECTOR_SIZE),
                Vec::with_capacity(VECTOR_SIZE),
            ],
            c: Counters::default(),
            block: Block::None,
            start: 0,
            server_idle: ns(cfg.max_lifetime()),
        })
    }

    /// The latency histograms of the last run: SYN → SYN-ACK, first packet → response,
    /// request → response (to merge runs).
    pub fn histograms(&self) -> &[LatencyHistogram; 3] {
        &self.hist
    }

    /// One run on the monotonic clock: clients on `client` (port 0), servers on `server`
    /// (port 1), both ports' frames in `mem`.
    pub fn run<M, C0, C1>(
        &mut self,
        mem: &mut M,
        client: &mut C0,
        server: &mut C1,
    ) -> Result<StatefulResult>
    where
        M: PacketMemory,
        C0: Port<M>,
        C1: Port<M>,
    {
        self.run_with_clock(mem, client, server, &mut MonotonicClock)
    }

    fn reset(&mut self) {
        self.tuples.reset();
        self.conns.fill(Conn::default());
        self.free.clear();
        self.free.extend((0..self.cfg.max_concurrent).rev());
        self.active = 0;
        self.high = 0;
        self.hand = 0;
        self.stab.clear();
        self.shand = 0;
        for h in &mut self.hist {
            h.clear();
        }
        self.c = Counters::default();
        self.block = Block::None;
    }

    /// One run on `clock` (a [`crate::clock::VirtualClock`] makes it deterministic).
    pub fn run_with_clock<M, C0, C1, C>(
        &mut self,
        mem: &mut M,
        client: &mut C0,
        server: &mut C1,
        clock: &mut C,
    ) -> Result<StatefulResult>
    where
        M: PacketMemory,
        C0: Port<M>,
        C1: Port<M>,
        C: Clock,
    {
        let Some(probe) = mem.alloc() else {
            bail!("the packet memory has no free frame");
        };
        mem.free(probe);
        self.reset();
        let cfg = self.cfg.clone();
        let rate_m = (cfg.cps * 1000.0).round() as u128;
        let dur_ns = ns(cfg.duration);
        self.c.planned = cfg.planned();
        let max_lag = ns(cfg.max_lag);
        let lag = ((u128::from(max_lag) * rate_m / 1_000_000_000_000) as u64).max(cfg.burst as u64);
        let drain = ns(cfg.drain.unwrap_or_else(|| cfg.max_lifetime()))
            .saturating_add(ns(cfg.syn_timeout).min(100_000_000));

        // ---- the run (no allocation, no locks, no logging) ----
        let start = clock.now_ns();
        self.start = start;
        let mut now = start;
        let mut open_end = None;
        let mut drain_end = u64::MAX;
        let mut last_rx = start;
        loop {
            let el = now - start;
            if open_end.is_none() {
                // Connections due before the end that a stall of the tester (not the
                // concurrency limit, not the tuples) kept back are still opened after it,
                // for up to `max_lag`; the rest are given up.
                if self.c.slots < self.c.planned {
                    self.open_due(
                        now,
                        el.min(dur_ns.saturating_sub(1)),
                        rate_m,
                        lag,
                        mem,
                        client,
                    );
                }
                let over = el >= dur_ns
                    && (self.block != Block::None || el >= dur_ns.saturating_add(max_lag));
                if over || self.c.slots >= self.c.planned {
                    let rest = self.c.planned - self.c.slots;
                    self.give_up(rest);
                    open_end = Some(now);
                    drain_end = now.saturating_add(drain);
                }
            }
            let mut work = self.poll_client(mem, client, clock);
            work += self.poll_server(mem, server, clock);
            self.client_timers(now, mem, client);
            self.server_timers(now);
            self.flush(0, mem, client);
            self.flush(1, mem, server);
            if work > 0 {
                last_rx = now;
            }
            // Done once every client connection has ended and the servers have had the
            // last frames in flight (the final ACKs), or at the end of the drain.
            let quiet = self.stab.used == 0 || now - last_rx >= LINGER_NS;
            if open_end.is_some() && ((self.active == 0 && quiet) || now >= drain_end) {
                break;
            }
            if work == 0 {
                std::hint::spin_loop();
            }
            now = clock.now_ns();
        }
        let end = clock.now_ns();
        let unfinished = u64::from(self.active);
        // Frames still queued in the ports belong to them; ours are all handed over.
        let open_end = open_end.unwrap_or(end);
        let c = &self.c;
        let open_s = ((open_end - start) as f64 / 1e9).max(cfg.duration.as_secs_f64());
        Ok(StatefulResult {
            proto: Some(cfg.proto),
            cps_target: cfg.cps,
            cps_achieved: c.attempted as f64 / open_s,
            duration_s: cfg.duration.as_secs_f64(),
            open_elapsed_s: (open_end - start) as f64 / 1e9,
            elapsed_s: (end - start) as f64 / 1e9,
            request_bytes: cfg.request_bytes,
            response_bytes: cfg.response_bytes,
            max_concurrent: cfg.max_concurrent,
            planned: c.planned,
            attempted: c.attempted,
            established: c.established,
            completed: c.completed,
            failed: c.failures.total(),
            reset: c.reset,
            reset_before_established: c.reset_syn,
            unfinished,
            failures: c.failures,
            skipped: c.skipped,
            syn_retransmits: c.syn_rtx,
            request_retransmits: c.req_rtx,
            concurrent_max: c.concurrent_max,
            connect_latency: self.hist[0].stats(),
            transaction_latency: self.hist[1].stats(),
            response_latency: self.hist[2].stats(),
            tx_packets: c.tx,
            rx_packets: c.rx,
            tx_bytes: c.tx_bytes,
            rx_bytes: c.rx_bytes,
            rx_malformed: c.malformed,
            rx_foreign: c.foreign,
            rx_unexpected: c.unexpected,
            rx_out_of_order: c.out_of_order,
            tx_refused: c.refused,
            tx_no_buffer: c.no_buffer,
            server: c.server,
        })
    }

    /// Give up `n` due slots, blaming what held the last one.
    fn give_up(&mut self, n: u64) {
        if n == 0 {
            return;
        }
        let s = &mut self.c.skipped;
        match self.block {
            Block::Concurrency => s.concurrency += n,
            Block::Tuples => s.tuples += n,
            Block::None => s.late += n,
        }
        self.c.slots += n;
    }

    /// Open the connections the schedule says are due at `el` ns into the run.
    #[inline]
    fn open_due<M: PacketMemory, P: Port<M>>(
        &mut self,
        now: u64,
        el: u64,
        rate_m: u128,
        lag: u64,
        mem: &mut M,
        port: &mut P,
    ) {
        let due = ((u128::from(el) * rate_m / 1_000_000_000_000) as u64 + 1).min(self.c.planned);
        if due <= self.c.slots {
            return;
        }
        if due - self.c.slots > lag {
            self.give_up(due - self.c.slots - lag);
        }
        let mut n = (due - self.c.slots).min(self.cfg.burst as u64);
        let now_ms = ((now - self.start) / 1_000_000) as u32;
        while n > 0 {
            if self.active >= self.cfg.max_concurrent {
                self.block = Block::Concurrency;
                return;
            }
            let Some(slot) = self.free.pop() else {
                self.block = Block::Concurrency;
                return;
            };
            let t = match self.tuples.take(slot, now_ms) {
                Ok(t) => t,
                Err(TupleWait::InUse | TupleWait::Quarantine) => {
                    self.free.push(slot);
                    self.block = Block::Tuples;
                    return;
                }
            };
            self.block = Block::None;
            let k = self.c.attempted;
            let (sfirst, saddrs) = self.servers;
            let s = k % (u64::from(saddrs) * u64::from(self.cfg.server_ports.count));
            let server = sfirst.wrapping_add((s % u64::from(saddrs)) as u32);
            let server_port = self
                .cfg
                .server_ports
                .first
                .wrapping_add((s / u64::from(saddrs)) as u16);
            let conn = Conn {
                state: ClientState::AwaitResponse,
                retries: 0,
                mss: self.cfg.mss,
                server_port,
                tuple: t,
                server,
                iss: splitmix(self.cfg.seed ^ k.rotate_left(17)) as u32,
                irs: 0,
                rcvd: 0,
                t_open: now,
                t_req: now,
                deadline: now.saturating_add(ns(self.cfg.response_timeout)),
            };
            self.conns[slot as usize] = conn;
            self.high = self.high.max(slot + 1);
            self.active += 1;
            self.c.concurrent_max = self.c.concurrent_max.max(self.active);
            self.c.attempted += 1;
            self.c.slots += 1;
            n -= 1;
            match self.cfg.proto {
                Proto::Tcp => {
                    let c = &mut self.conns[slot as usize];
                    c.state = ClientState::SynSent;
                    c.deadline = now.saturating_add(ns(self.cfg.syn_timeout));
                    self.send_syn(slot, mem, port);
                }
                Proto::Udp => self.send_request_udp(slot, mem, port),
            }
        }
    }

    // ---- transmit ----

    /// Build one frame with the writer of `side` and queue it for `port`.
    #[inline]
    fn emit<M: PacketMemory, P: Port<M>>(
        &mut self,
        side: usize,
        mem: &mut M,
        port: &mut P,
        build: impl FnOnce(&Writer, &mut [u8]) -> usize,
    ) {
        let Some(buf) = mem.alloc() else {
            self.c.no_buffer += 1;
            return;
        };
        let len = match mem.frame_mut(buf).get_mut(HEADROOM..) {
            Some(f) => build(&self.writers[side], f),
            None => 0,
        };
        if len == 0 {
            mem.free(buf);
            self.c.no_buffer += 1;
            return;
        }
        self.txq[side].push(Pkt {
            buf,
            off: HEADROOM as u16,
            len: len as u16,
            rx_port: side as u16,
            tx_port: side as u16,
            ..Pkt::default()
        });
        if self.txq[side].len() >= VECTOR_SIZE {
            self.flush(side, mem, port);
        }
    }

    /// Hand the queued frames of `side` to its port.
    #[inline]
    fn flush<M: PacketMemory, P: Port<M>>(&mut self, side: usize, mem: &mut M, port: &mut P) {
        let q = &mut self.txq[side];
        if q.is_empty() {
            return;
        }
        let sent = port.tx_burst(mem, q).min(q.len());
        self.c.tx[side] += sent as u64;
        self.c.tx_bytes[side] += q[..sent].iter().map(|p| u64::from(p.len) + 4).sum::<u64>();
        self.c.refused += (q.len() - sent) as u64;
        q.clear();
    }

    fn client_tuple(&self, slot: u32) -> (Conn, u32, u16) {
        let c = self.conns[slot as usize];
        let (a, p) = self.tuples.at(c.tuple);
        (c, a, p)
    }

    fn send_syn<M: PacketMemory, P: Port<M>>(&mut self, slot: u32, mem: &mut M, port: &mut P) {
        let (c, addr, cport) = self.client_tuple(slot);
        let f = TcpFields {
            src: addr,
            dst: c.server,
            sport: cport,
            dport: c.server_port,
            seq: c.iss,
            ack: 0,
            flags: flags::SYN,
            mss: self.cfg.mss,
            len: 0,
        };
        self.emit(0, mem, port, |w, b| w.tcp(b, &f));
    }

    /// A client segment of connection `slot` with `flags` and `len` payload bytes at
    /// sequence `seq`, acknowledging everything received.
    fn client_seg<M: PacketMemory, P: Port<M>>(
        &mut self,
        slot: u32,
        seq: u32,
        fl: u8,
        len: usize,
        mem: &mut M,
        port: &mut P,
    ) {
        let (c, addr, cport) = self.client_tuple(slot);
        let ack = c.irs.wrapping_add(1).wrapping_add(c.rcvd);
        let f = TcpFields {
            src: addr,
            dst: c.server,
            sport: cport,
            dport: c.server_port,
            seq,
            ack: if fl & flags::ACK != 0 { ack } else { 0 },
            flags: fl,
            mss: 0,
            len,
        };
        self.emit(0, mem, port, |w, b| w.tcp(b, &f));
    }

    fn send_request_udp<M: PacketMemory, P: Port<M>>(
        &mut self,
        slot: u32,
        mem: &mut M,
        port: &mut P,
    ) {
        let (c, addr, cport) = self.client_tuple(slot);
        let len = self.cfg.request_bytes as usize;
        self.emit(0, mem, port, |w, b| {
            w.udp(b, addr, c.server, cport, c.server_port, len)
        });
    }

    /// End client connection `slot`: its tuple rests for `reuse_delay`.
    fn release(&mut self, slot: u32, now: u64) {
        let Some(c) = self.conns.get_mut(slot as usize) else {
            return;
        };
        if c.state == ClientState::Free {
            return;
        }
        c.state = ClientState::Free;
        let until = (now - self.start + ns(self.cfg.reuse_delay)).div_ceil(1_000_000);
        self.tuples
            .release(c.tuple, until.min(u64::from(u32::MAX)) as u32);
        self.free.push(slot);
        self.active -= 1;
    }

    // ---- receive ----

    /// Parse the frame of `p`, count it, free it.
    #[inline]
    fn take_frame<M: PacketMemory>(&mut self, side: usize, mem: &mut M, p: Pkt) -> Option<Seg> {
        let off = usize::from(p.off);
        let data = mem
            .frame(p.buf)
            .get(off..off + usize::from(p.len))
            .unwrap_or(&[]);
        self.c.rx[side] += 1;
        self.c.rx_bytes[side] += data.len() as u64 + 4;
        let parsed = parse(data);
        mem.free(p.buf);
        match parsed {
            Parsed::Seg(s) => Some(s),
            Parsed::Foreign => {
                self.c.foreign += 1;
                None
            }
            Parsed::Malformed => {
                self.c.malformed += 1;
                None
            }
        }
    }

    fn poll_client<M: PacketMemory, P: Port<M>, C: Clock>(
        &mut self,
        mem: &mut M,
        port: &mut P,
        clock: &mut C,
    ) -> usize {
        self.rxv.len = 0;
        let n = port.rx_burst(mem, &mut self.rxv);
        if n == 0 {
            return 0;
        }
        let now = clock.now_ns();
        for i in 0..self.rxv.len.min(VECTOR_SIZE) {
            let p = self.rxv.pkts[i];
            if let Some(s) = self.take_frame(0, mem, p) {
                self.client_rx(&s, now, mem, port);
            }
        }
        self.rxv.len = 0;
        n
    }

    fn poll_server<M: PacketMemory, P: Port<M>, C: Clock>(
        &mut self,
        mem: &mut M,
        port: &mut P,
        clock: &mut C,
    ) -> usize {
        self.rxv.len = 0;
        let n = port.rx_burst(mem, &mut self.rxv);
        if n == 0 {
            return 0;
        }
        let now = clock.now_ns();
        for i in 0..self.rxv.len.min(VECTOR_SIZE) {
            let p = self.rxv.pkts[i];
            if let Some(s) = self.take_frame(1, mem, p) {
                match self.cfg.proto {
                    Proto::Tcp => self.server_tcp(&s, now, mem, port),
                    Proto::Udp => self.server_udp(&s, mem, port),
                }
            }
        }
        self.rxv.len = 0;
        n
    }

    /// A segment received by the clients: find its connection by the tuple it is
    /// addressed to.
    #[inline]
    fn client_rx<M: PacketMemory, P: Port<M>>(
        &mut self,
        s: &Seg,
        now: u64,
        mem: &mut M,
        port: &mut P,
    ) {
        let proto = match self.cfg.proto {
            Proto::Tcp => segment::PROTO_TCP,
            Proto::Udp => segment::PROTO_UDP,
        };
        let slot = self
            .tuples
            .index(s.dst, s.dport)
            .and_then(|t| self.tuples.slot(t));
        let Some(slot) = slot else {
            self.c.unexpected += 1;
            return;
        };
        let c = self.conns[slot as usize];
        if s.proto != proto || s.src != c.server || s.sport != c.server_port {
            self.c.unexpected += 1;
            return;
        }
        match self.cfg.proto {
            Proto::Tcp => self.client_tcp(slot, c, s, now, mem, port),
            Proto::Udp => self.client_udp(slot, c, s, now),
        }
    }

    fn client_udp(&mut self, slot: u32, c: Conn, s: &Seg, now: u64) {
        if c.state != ClientState::AwaitResponse || s.len != self.cfg.response_bytes {
            self.c.unexpected += 1;
            return;
        }
        self.c.established += 1;
        self.hist[1].record(now - c.t_open);
        self.hist[2].record(now - c.t_req);
        if self.cfg.hold.is_zero() {
            self.c.completed += 1;
            self.release(slot, now);
        } else {
            let cm = &mut self.conns[slot as usize];
            cm.state = ClientState::Holding;
            cm.deadline = now.saturating_add(ns(self.cfg.hold));
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn client_tcp<M: PacketMemory, P: Port<M>>(
        &mut self,
        slot: u32,
        c: Conn,
        s: &Seg,
        now: u64,
        mem: &mut M,
        port: &mut P,
    ) {
        let rcv_nxt = c.irs.wrapping_add(1).wrapping_add(c.rcvd);
        let req = self.cfg.request_bytes;
        let resp = self.cfg.response_bytes;
        if s.flags & flags::RST != 0 {
            // RFC 9293 §3.10.7: in SYN-SENT a RST is valid if it acknowledges the SYN;
            // otherwise if its sequence number is in the window.
            let valid = if c.state == ClientState::SynSent {
                s.flags & flags::ACK != 0 && s.ack == c.iss.wrapping_add(1)
            } else {
                s.seq.wrapping_sub(rcv_nxt) < u32::from(WINDOW) << WSCALE
            };
            if valid {
                self.c.reset += 1;
                if c.state == ClientState::SynSent {
                    self.c.reset_syn += 1;
                }
                self.release(slot, now);
            } else {
                self.c.unexpected += 1;
            }
            return;
        }
        match c.state {
            ClientState::SynSent => {
                if s.flags & (flags::SYN | flags::ACK) != flags::SYN | flags::ACK
                    || s.ack != c.iss.wrapping_add(1)
                {
                    self.c.unexpected += 1;
                    return;
                }
                let mss = if s.mss == 0 { 536 } else { s.mss };
                let cm = &mut self.conns[slot as usize];
                cm.irs = s.seq;
                cm.mss = self.cfg.mss.min(mss).max(1);
                cm.state = ClientState::AwaitResponse;
                cm.t_req = now;
                cm.deadline = now.saturating_add(ns(self.cfg.response_timeout));
                let mss = u32::from(cm.mss);
                self.c.established += 1;
                self.hist[0].record(now - c.t_open);
                let seq0 = c.iss.wrapping_add(1);
                self.client_seg(slot, seq0, flags::ACK, 0, mem, port);
                let mut off = 0;
                while off < req {
                    let len = (req - off).min(mss);
                    let last = off + len == req;
                    let fl = flags::ACK | if last { flags::PSH } else { 0 };
                    self.client_seg(slot, seq0.wrapping_add(off), fl, len as usize, mem, port);
                    off += len;
                }
            }
            ClientState::AwaitResponse => {
                if s.flags & flags::SYN != 0 || s.len == 0 {
                    // A retransmitted SYN-ACK, or a bare ACK: nothing to do.
                    self.c.unexpected += u64::from(s.flags & flags::SYN != 0);
                    return;
                }
                if s.seq != rcv_nxt {
                    self.c.out_of_order += 1;
                    return;
                }
                if c.rcvd + s.len > resp {
                    self.c.unexpected += 1;
                    return;
                }
                let cm = &mut self.conns[slot as usize];
                cm.rcvd += s.len;
                if cm.rcvd < resp {
                    return;
                }
                self.hist[1].record(now - c.t_open);
                self.hist[2].record(now - c.t_req);
                let seq = c.iss.wrapping_add(1).wrapping_add(req);
                if self.cfg.hold.is_zero() {
                    cm.state = ClientState::FinWait;
                    cm.deadline = now.saturating_add(ns(self.cfg.close_timeout));
                    self.client_seg(slot, seq, flags::FIN | flags::ACK, 0, mem, port);
                } else {
                    cm.state = ClientState::Holding;
                    cm.deadline = now.saturating_add(ns(self.cfg.hold));
                    self.client_seg(slot, seq, flags::ACK, 0, mem, port);
                }
            }
            ClientState::FinWait => {
                let fin_ack = flags::FIN | flags::ACK;
                let fin_seq = c.iss.wrapping_add(1).wrapping_add(req);
                if s.flags & fin_ack != fin_ack
                    || s.ack != fin_seq.wrapping_add(1)
                    || s.seq != rcv_nxt
                {
                    self.c.unexpected += 1;
                    return;
                }
                // Acknowledge the server's FIN: rcv_nxt + 1.
                self.conns[slot as usize].rcvd = c.rcvd.wrapping_add(1);
                self.client_seg(slot, fin_seq.wrapping_add(1), flags::ACK, 0, mem, port);
                self.c.completed += 1;
                self.release(slot, now);
            }
            ClientState::Holding | ClientState::Free => self.c.unexpected += 1,
        }
    }

    /// Visit a few client connections and act on those past their deadline.
    fn client_timers<M: PacketMemory, P: Port<M>>(&mut self, now: u64, mem: &mut M, port: &mut P) {
        if self.active == 0 || self.high == 0 {
            return;
        }
        for _ in 0..SCAN.min(self.high) {
            let slot = self.hand;
            self.hand = if slot + 1 >= self.high { 0 } else { slot + 1 };
            let c = self.conns[slot as usize];
            if c.state == ClientState::Free || c.deadline > now {
                continue;
            }
            self.client_expired(slot, c, now, mem, port);
        }
    }

    fn client_expired<M: PacketMemory, P: Port<M>>(
        &mut self,
        slot: u32,
        c: Conn,
        now: u64,
        mem: &mut M,
        port: &mut P,
    ) {
        let req = self.cfg.request_bytes;
        let retry = c.retries < self.cfg.retries;
        let tcp = self.cfg.proto == Proto::Tcp;
        let cm = &mut self.conns[slot as usize];
        match c.state {
            ClientState::SynSent if retry => {
                cm.retries += 1;
                cm.deadline =
                    now.saturating_add(ns(self.cfg.syn_timeout).saturating_mul(1 << cm.retries));
                self.c.syn_rtx += 1;
                self.send_syn(slot, mem, port);
            }
            ClientState::SynSent => {
                self.c.failures.syn_timeout += 1;
                self.release(slot, now);
            }
            ClientState::AwaitResponse if !tcp && retry => {
                cm.retries += 1;
                cm.t_req = now;
                cm.deadline = now.saturating_add(ns(self.cfg.response_timeout));
                self.c.req_rtx += 1;
                self.send_request_udp(slot, mem, port);
            }
            ClientState::AwaitResponse => {
                self.c.failures.response_timeout += 1;
                if tcp {
                    // Abort, so the DUT and the server forget the connection now.
                    let seq = c.iss.wrapping_add(1).wrapping_add(req);
                    self.client_seg(slot, seq, flags::RST | flags::ACK, 0, mem, port);
                }
                self.release(slot, now);
            }
            ClientState::Holding if tcp => {
                cm.state = ClientState::FinWait;
                cm.deadline = now.saturating_add(ns(self.cfg.close_timeout));
                let seq = c.iss.wrapping_add(1).wrapping_add(req);
                self.client_seg(slot, seq, flags::FIN | flags::ACK, 0, mem, port);
            }
            ClientState::Holding => {
                self.c.completed += 1;
                self.release(slot, now);
            }
            ClientState::FinWait => {
                self.c.failures.close_timeout += 1;
                let seq = c.iss.wrapping_add(2).wrapping_add(req);
                self.client_seg(slot, seq, flags::RST | flags::ACK, 0, mem, port);
                self.release(slot, now);
            }
            ClientState::Free => {}
        }
    }

    // ---- the servers ----

    /// Whether (`addr`, `port`) is one of the emulated servers.
    #[inline]
    fn is_server(&self, addr: u32, port: u16) -> bool {
        let (first, n) = self.servers;
        let p = &self.cfg.server_ports;
        addr.wrapping_sub(first) < n && u32::from(port.wrapping_sub(p.first)) < p.count
    }

    fn server_udp<M: PacketMemory, P: Port<M>>(&mut self, s: &Seg, mem: &mut M, port: &mut P) {
        if s.proto != segment::PROTO_UDP || !self.is_server(s.dst, s.dport) {
            self.c.unexpected += 1;
            return;
        }
        self.c.server.accepted += 1;
        let len = self.cfg.response_bytes as usize;
        let s = *s;
        self.emit(1, mem, port, |w, b| {
            w.udp(b, s.dst, s.src, s.dport, s.sport, len)
        });
    }

    /// A server segment of entry `slot` (to the client as the server sees it).
    #[allow(clippy::too_many_arguments)]
    fn server_seg<M: PacketMemory, P: Port<M>>(
        &mut self,
        key: Key,
        seq: u32,
        ack: u32,
        fl: u8,
        len: usize,
        mem: &mut M,
        port: &mut P,
    ) {
        let f = TcpFields {
            src: key.dst,
            dst: key.src,
            sport: key.dport,
            dport: key.sport,
            seq,
            ack,
            flags: fl,
            mss: self.cfg.mss,
            len,
        };
        self.emit(1, mem, port, |w, b| w.tcp(b, &f));
    }

    fn server_tcp<M: PacketMemory, P: Port<M>>(
        &mut self,
        s: &Seg,
        now: u64,
        mem: &mut M,
        port: &mut P,
    ) {
        if s.proto != segment::PROTO_TCP || !self.is_server(s.dst, s.dport) {
            self.c.unexpected += 1;
            return;
        }
        let key = Key {
            src: s.src,
            dst: s.dst,
            sport: s.sport,
            dport: s.dport,
        };
        let found = self.stab.find(&key);
        if s.flags & flags::RST != 0 {
            match found {
                Some(slot) => {
                    self.c.server.reset += 1;
                    self.stab.remove(slot);
                }
                None => self.c.unexpected += 1,
            }
            return;
        }
        let req = self.cfg.request_bytes;
        let resp = self.cfg.response_bytes;
        if s.flags & (flags::SYN | flags::ACK) == flags::SYN {
            if let Some(slot) = found {
                let e = self.stab.conns[slot as usize];
                if e.irs == s.seq {
                    if e.state == ServerState::SynRcvd {
                        // Our SYN-ACK was lost: send it again.
                        self.c.server.syn_ack_retransmits += 1;
                        let ack = e.irs.wrapping_add(1);
                        self.server_seg(key, e.iss, ack, flags::SYN | flags::ACK, 0, mem, port);
                    } else {
                        self.c.unexpected += 1;
                    }
                    return;
                }
                // A new connection on a tuple we still hold: the old one is over.
                self.stab.remove(slot);
            }
            let Some(slot) = self.stab.insert(key) else {
                self.c.server.table_full += 1;
                return;
            };
            let mss = if s.mss == 0 { 536 } else { s.mss };
            let iss =
                splitmix(self.cfg.seed ^ 0x5e5e ^ u64::from(s.seq) ^ u64::from(slot) << 32) as u32;
            let e = &mut self.stab.conns[slot as usize];
            e.state = ServerState::SynRcvd;
            e.irs = s.seq;
            e.iss = iss;
            e.rcvd = 0;
            e.mss = self.cfg.mss.min(mss).max(1);
            e.deadline = now.saturating_add(self.server_idle);
            self.c.server.accepted += 1;
            self.server_seg(
                key,
                iss,
                s.seq.wrapping_add(1),
                flags::SYN | flags::ACK,
                0,
                mem,
                port,
            );
            return;
        }
        let Some(slot) = found else {
            self.c.unexpected += 1;
            return;
        };
        let mut e = self.stab.conns[slot as usize];
        e.deadline = now.saturating_add(self.server_idle);
        if s.flags & flags::ACK == 0 {
            self.c.unexpected += 1;
            return;
        }
        if e.state == ServerState::SynRcvd {
            if s.ack != e.iss.wrapping_add(1) {
                self.c.unexpected += 1;
                return;
            }
            e.state = ServerState::Receiving;
        }
        let rcv_nxt = e.irs.wrapping_add(1).wrapping_add(e.rcvd);
        match e.state {
            ServerState::Receiving if s.len > 0 => {
                if s.seq != rcv_nxt {
                    self.c.out_of_order += 1;
                } else if e.rcvd + s.len > req {
                    self.c.unexpected += 1;
                } else {
                    e.rcvd += s.len;
                    if e.rcvd == req {
                        e.state = ServerState::Responded;
                        self.c.server.responses += 1;
                        let seq0 = e.iss.wrapping_add(1);
                        let ack = e.irs.wrapping_add(1).wrapping_add(req);
                        let mss = u32::from(e.mss);
                        let mut off = 0;
                        while off < resp {
                            let len = (resp - off).min(mss);
                            let fl = flags::ACK | if off + len == resp { flags::PSH } else { 0 };
                            self.server_seg(
                                key,
                                seq0.wrapping_add(off),
                                ack,
                                fl,
                                len as usize,
                                mem,
                                port,
                            );
                            off += len;
                        }
                    }
                }
            }
            ServerState::Responded | ServerState::LastAck if s.flags & flags::FIN != 0 => {
                // The client's FIN (again, if our FIN-ACK was lost): answer with ours.
                let fin_seq = e.irs.wrapping_add(1).wrapping_add(req);
                if s.seq != fin_seq {
                    self.c.unexpected += 1;
                } else {
                    e.state = ServerState::LastAck;
                    let seq = e.iss.wrapping_add(1).wrapping_add(resp);
                    let ack = fin_seq.wrapping_add(1);
                    self.server_seg(key, seq, ack, flags::FIN | flags::ACK, 0, mem, port);
                }
            }
            ServerState::LastAck if s.ack == e.iss.wrapping_add(2).wrapping_add(resp) => {
                self.c.server.closed += 1;
                self.stab.remove(slot);
                return;
            }
            // Bare ACKs (of the SYN-ACK, of the response while the client holds).
            _ => {}
        }
        self.stab.conns[slot as usize] = e;
    }

    /// Visit a few server entries and drop those idle too long.
    fn server_timers(&mut self, now: u64) {
        let high = self.stab.high;
        if self.stab.used == 0 || high == 0 {
            return;
        }
        for _ in 0..SCAN.min(high) {
            let slot = self.shand;
            self.shand = if slot + 1 >= high { 0 } else { slot + 1 };
            let e = &self.stab.conns[slot as usize];
            if e.state != ServerState::Free && e.deadline <= now {
                self.c.server.expired += 1;
                self.stab.remove(slot);
            }
        }
    }
}

/// One run of `cfg` on the monotonic clock (see [`Stateful`]).
pub fn run<M, C0, C1>(
    mem: &mut M,
    client: &mut C0,
    server: &mut C1,
    cfg: &StatefulConfig,
) -> Result<StatefulResult>
where
    M: PacketMemory,
    C0: Port<M>,
    C1: Port<M>,
{
    Stateful::new(cfg)?.run(mem, client, server)
}

#[cfg(test)]
mod tests;
