//! memif ports: packets through memory shared with another process (FD.io VPP, libmemif
//! applications, DPDK's `net_memif`, or another ferrouter), protocol version 2.0.
//!
//! # Protocol overview
//!
//! Two processes meet on a unix `SOCK_SEQPACKET` socket. The **server** (formerly
//! "master") listens on it; the **client** (formerly "slave") connects. Every control
//! message is exactly 128 bytes (a 16-bit type and a packed union); descriptors travel
//! alongside as `SCM_RIGHTS`. The handshake is lock-step, one message answering one
//! message:
//!
//! ```text
//! server                              client
//!   HELLO (versions, limits)  ───────▶
//!                             ◀───────  INIT (version, interface id, mode, secret)
//!   ACK                       ───────▶
//!                             ◀───────  ADD_REGION (index, size) + memfd
//!   ACK                       ───────▶
//!                             ◀───────  ADD_RING (C2S, region, offset, log2 size) + eventfd
//!   ACK                       ───────▶
//!                             ◀───────  ADD_RING (S2C, ...) + eventfd
//!   ACK                       ───────▶
//!                             ◀───────  CONNECT (interface name)
//!   CONNECTED (interface name) ──────▶
//! ```
//!
//! Either side may send DISCONNECT (a reason string) at any time and close; closing the
//! socket alone also ends the connection. The **client allocates all shared memory**: one
//! sealed memfd region holding both rings and their packet buffers
//! (`[C2S ring][S2C ring][C2S buffers][S2C buffers]`, as DPDK lays it out). A ring is a
//! header — cookie `0x3E31F20`, flags, `head` (u16, offset 6), `tail` (u16, offset 64) —
//! followed by `2^n` 16-byte descriptors (flags, region, length, offset into the region).
//! Indices run freely modulo 2^16 and are masked into the ring.
//!
//! Ring ownership (what DPDK's `eth_memif_rx`/`eth_memif_tx` do in copy mode, and what
//! this port does, in both roles):
//!
//! | ring | direction | `head` written by | `tail` written by |
//! |------|-----------|-------------------|-------------------|
//! | C2S (client → server) | client transmits | client: frames produced | server: frames consumed |
//! | S2C (server → client) | server transmits | client: empty buffers offered (refill) | server: frames produced |
//!
//! - C2S: the client writes a frame into one of *its* buffers, fills the descriptor
//!   (region, offset, length, flags 0) and publishes `head`; the server reads descriptors
//!   from its last position up to `head` and publishes `tail` when done with them.
//! - S2C: the client's receive path "refills" — for every slot it has consumed it resets
//!   the descriptor to an empty buffer (length = buffer size) and advances `head`. The
//!   server writes a frame into the buffer the descriptor names (no larger than the
//!   descriptor's length), sets length and flags, and publishes `tail`.
//! - The receiver of a ring sets `MEMIF_RING_FLAG_MASK_INT` in its flags to say "I poll,
//!   do not signal my eventfd". This port only polls: it sets the flag on the rings it
//!   receives on and never signals or waits on eventfds (it creates and passes them as
//!   the protocol requires). Peers must poll too (DPDK always does).
//! - Frames larger than one buffer are chained: consecutive descriptors, each but the last
//!   flagged `MEMIF_DESC_FLAG_NEXT`. A C2S chain uses the client's buffers at consecutive
//!   slots; an S2C chain fills consecutive buffers the client offered, each up to its
//!   offered length. Producers publish a chain's slots together (DPDK and VPP never
//!   publish part of one). This port sends frames larger than a buffer as chains (jumbo
//!   frames, up to [`MAX_FRAME`] bytes, over 2048-byte buffers) and gathers received
//!   chains into one frame of the worker's memory (a big frame when it needs one); a
//!   chain not complete yet stays in the ring for the next call. It clears the flags of a
//!   received chain's descriptors before handing its slots back: DPDK's `net_memif` sets
//!   NEXT on the C2S descriptors it sends but never clears it, so without that a DPDK
//!   client's later single frames in those slots would be glued to the next ones.
//!
//! On connect both sides reset `head`/`tail` to 0 (the server when it receives CONNECT,
//! the client when it receives CONNECTED), then the client offers its whole S2C ring.
//!
//! # This implementation
//!
//! [`Memif`] is one interface (one interface id, one queue pair: ring 0 each way) in
//! either role, in Ethernet mode, copying frames between the shared buffers and the
//! worker's [`PacketMemory`]. Everything is non-blocking: [`Memif::poll_control`] accepts
//! or connects, runs the handshake and notices disconnects; `rx_burst`/`tx_burst` call it
//! themselves at most once a millisecond (checked every 64 calls) or at once after a
//! fault, so a worker loop alone keeps the link alive. A client retries connecting every
//! 100 ms until a server appears and again after every disconnect.
//!
//! Everything the peer controls is validated: message sizes and types, the version, the
//! interface id, mode and secret, region and ring indices and sizes (a region must fit
//! its memfd, which must be sealed against shrinking so our mapping can never fault),
//! rings must lie inside their region, every descriptor must lie inside a mapped region
//! before a byte is copied, and a ring index the peer moves past what the protocol allows
//! is a fault. Control errors and faults disconnect the peer with a DISCONNECT message
//! giving the reason; a server then listens again. Bad descriptors on receive are skipped
//! and counted; an S2C buffer offered outside the client's regions is a fault. The
//! handshake must finish within 3 s. A server serves one client at a time: another one
//! connecting meanwhile gets DISCONNECT "Interface already connected".
//!
//! Interoperation with DPDK 22.11 (`net_memif`), tested with `dpdk-testpmd`: give the
//! vdev `role=server|client,id=<id>,socket=<path>,socket-abstract=no` (DPDK defaults to
//! the abstract namespace; set [`MemifOptions::abstract_socket`] to meet it there
//! instead). A DPDK client connects only once, when its port starts, so start a
//! ferrouter server first.
//!
//! When not connected, `rx_burst` returns 0 and `tx_burst` frees every packet and counts
//! it in `tx_dropped_disconnected`. When connected, `tx_burst` places frames in order until
//! the ring is full (or, on the S2C ring, until the client's offered buffers run out —
//! right after connecting a DPDK client has offered none until its first receive) or a
//! chained frame needs more slots than are left, and frees everything it was given; the
//! rest is counted in `tx_dropped_ring_full`. `rx_burst` stops early, leaving frames in
//! the ring, when the packet memory has no free small frame; a frame needing a big frame
//! when none is free is dropped and counted instead (`rx_dropped_no_big_frame`: a memory
//! without big frames must not block the ring). Received frames longer than [`MAX_FRAME`]
//! are dropped whole and counted.
//!
//! Not supported: more than one queue pair, interrupt mode (peers must poll their
//! receive rings, as DPDK does), IP / punt-inject modes, and region files that cannot be
//! sealed against shrinking (hugetlbfs files of a DPDK `zero-copy=yes` client, for
//! instance; memfds as DPDK, libmemif and ferrouter create them are fine).
//!
//! Layout: `control` (handshake, validation, teardown), `datapath` (rx/tx on the rings),
//! `proto` (wire format), `shm` (the only code touching shared memory), `sys` (system
//! calls).

mod control;
mod datapath;
mod proto;
mod shm;
mod sys;

use std::borrow::Cow;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use dataplane::buffer::{PacketMemory, Pkt, Vector, MAX_FRAME};
use dataplane::worker::Port;

use crate::{PortError, PortStats};
use control::clear_stale_socket;
use proto::Msg;
use shm::{Region, Ring};

/// Largest frame we deliver (over one descriptor or a chain): the dataplane's largest
/// frame; longer ones are dropped and counted.
const MAX_RX_FRAME: usize = MAX_FRAME;
/// Regions a client may add (we advertise `MAX_REGIONS - 1` as the highest index).
const MAX_REGIONS: usize = 64;
/// Largest region accepted from a client.
const MAX_REGION_SIZE: u64 = 16 << 30;
/// The handshake must complete within this after accept/connect.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);
/// A client retries connecting this often.
const RETRY_INTERVAL: Duration = Duration::from_millis(100);
/// rx/tx look at the clock every this many calls (a power of two)...
const CONTROL_EVERY: u32 = 64;
/// ...and run the control path when this much time has passed since the last run.
const CONTROL_PERIOD: Duration = Duration::from_millis(1);
/// Control messages handled per `poll_control` at most (a flooding peer cannot hold us).
const MAX_MSGS_PER_POLL: usize = 32;
/// Application name sent in HELLO / INIT.
const APP_NAME: &str = "ferrouter";

/// Which end of the control socket this port is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MemifRole {
    /// Listens on the socket and maps the memory the client provides ("master" before
    /// memif naming changed; DPDK `role=server`).
    Server,
    /// Connects to the socket and allocates the shared memory ("slave"; DPDK
    /// `role=client`, its default).
    #[default]
    Client,
}

/// How to set up a [`Memif`] port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemifOptions {
    /// Control socket path. A server removes a stale socket file there first (one nobody
    /// listens on) and removes its own file when dropped.
    pub socket: PathBuf,
    /// Use the abstract socket namespace (no file; DPDK's default, `socket-abstract=yes`).
    pub abstract_socket: bool,
    /// Server or client.
    pub role: MemifRole,
    /// Interface id; both ends must use the same.
    pub id: u32,
    /// Ring size as log2 (1..=14). A client asks for this (or less if the server's limit
    /// is lower); a server accepts rings up to this size.
    pub ring_size_log2: u8,
    /// Bytes per packet buffer (64..=65535) of the memory a client allocates; frames
    /// larger than the buffer are sent as chains of buffers. Ignored by a server (the
    /// client decides).
    pub buffer_size: u32,
    /// Shared secret (at most 23 bytes): a server requires clients to present it; a
    /// client presents it.
    pub secret: Option<String>,
    /// Interface name sent to the peer (at most 31 bytes are sent).
    pub name: String,
}

impl Default for MemifOptions {
    fn default() -> Self {
        MemifOptions {
            socket: PathBuf::from("/run/memif.sock"),
            abstract_socket: false,
            role: MemifRole::Client,
            id: 0,
            ring_size_log2: 10,
            buffer_size: 2048,
            secret: None,
            name: "memif0".to_string(),
        }
    }
}

/// A memif port's counters (single writer: the thread driving the port).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemifStats {
    /// Frames delivered to the dataplane.
    pub rx_packets: u64,
    /// Bytes of those frames.
    pub rx_bytes: u64,
    /// Received frames longer than [`MAX_FRAME`] (a chain's length is the sum of its
    /// descriptors); dropped whole.
    pub rx_dropped_too_big: u64,
    /// Received frames spread over several descriptors (`MEMIF_DESC_FLAG_NEXT`) and
    /// gathered into one frame; also counted in `rx_packets`.
    pub rx_chained: u64,
    /// Received chained frames dropped whole because the chain was malformed: one of its
    /// descriptors names memory outside the peer's regions (also counted in
    /// `bad_descriptors`, as is a chain the peer rewrote while it was being copied), or it
    /// fills the whole ring without ending. (Chains themselves are received: see
    /// `rx_chained`.)
    pub rx_dropped_chained: u64,
    /// Receive bursts cut short because the packet memory had no free frame (the frames
    /// stay in the ring for the next call).
    pub rx_no_buffer: u64,
    /// Received frames larger than a small frame of the packet memory dropped because it
    /// had no free big frame (never left in the ring: a memory without big frames would
    /// block it for good).
    pub rx_dropped_no_big_frame: u64,
    /// Frames placed on the ring for the peer.
    pub tx_packets: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// Frames sent over several descriptors (longer than a buffer: chained with
    /// `MEMIF_DESC_FLAG_NEXT`); also counted in `tx_packets`.
    pub tx_chained: u64,
    /// Frames dropped because the ring was full (or had fewer free or offered slots than
    /// a chained frame needs; the rest of the burst is then dropped too).
    pub tx_dropped_ring_full: u64,
    /// Frames dropped because no peer was connected.
    pub tx_dropped_disconnected: u64,
    /// Frames dropped because their packet descriptor does not fit its frame.
    pub tx_dropped_too_big: u64,
    /// Frames dropped because an earlier frame of the same burst was refused (a burst is
    /// sent as a prefix or not at all).
    pub tx_dropped_after_refusal: u64,
    /// Descriptors from the peer naming memory outside its regions; never read or written.
    pub bad_descriptors: u64,
    /// Ring indices moved by the peer past what the protocol allows (each disconnects).
    pub ring_errors: u64,
    /// Control-channel errors: malformed, unexpected or refused messages, missing or bad
    /// descriptors, handshake timeouts, rejected extra connections.
    pub control_errors: u64,
    /// Connections established.
    pub connects: u64,
    /// Established connections that ended.
    pub disconnects: u64,
}

impl MemifStats {
    /// The counters in the shape every port reports ([`PortStats`]).
    pub fn port_stats(&self) -> PortStats {
        PortStats {
            rx_packets: self.rx_packets,
            rx_bytes: self.rx_bytes,
            rx_dropped_no_buffer: self.rx_no_buffer + self.rx_dropped_no_big_frame,
            rx_dropped_too_big: self.rx_dropped_too_big + self.rx_dropped_chained,
            tx_packets: self.tx_packets,
            tx_bytes: self.tx_bytes,
            tx_errors: self.tx_dropped_ring_full
                + self.tx_dropped_disconnected
                + self.tx_dropped_too_big
                + self.tx_dropped_after_refusal,
            ..PortStats::default()
        }
    }
}

/// Where a ring sits, as announced by ADD_RING.
#[derive(Clone, Copy, Debug)]
struct RingSpec {
    region: u16,
    offset: u32,
    log2: u8,
}

/// Memory a client prepared after HELLO, waiting for CONNECTED.
struct ClientPlan {
    region: Region,
    c2s: RingSpec,
    s2c: RingSpec,
    c2s_bufs: u32,
    s2c_bufs: u32,
    bsize: u32,
    efds: [OwnedFd; 2],
}

/// Handshake position of a control channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Server: HELLO sent, waiting for INIT.
    AwaitInit,
    /// Server: INIT accepted, collecting regions and rings until CONNECT.
    Setup,
    /// Client: connected, waiting for HELLO.
    AwaitHello,
    /// Client: a setup message is out, waiting for its ACK.
    AwaitAck,
    /// Client: CONNECT sent.
    AwaitConnected,
    /// Both: the data path is up.
    Connected,
}

/// One control connection and what its handshake has gathered so far.
struct Session {
    sock: OwnedFd,
    since: Instant,
    phase: Phase,
    /// Server: regions mapped so far.
    regions: Vec<Region>,
    /// Server: rings announced, C2S and S2C, with their eventfds.
    rings: [Option<(RingSpec, OwnedFd)>; 2],
    /// Client: setup messages not yet sent (each waits for the previous ACK).
    outbox: VecDeque<(Msg, Option<RawFd>)>,
    /// Client: the memory being offered.
    plan: Option<ClientPlan>,
}

impl Session {
    fn new(sock: OwnedFd, phase: Phase) -> Session {
        Session {
            sock,
            since: Instant::now(),
            phase,
            regions: Vec::new(),
            rings: [None, None],
            outbox: VecDeque::new(),
            plan: None,
        }
    }
}

/// The data path of an established connection. `rx` and `tx` point into `regions`,
/// which this struct keeps mapped for as long as it lives.
struct Conn {
    rx: Ring,
    tx: Ring,
    /// Next receive slot to look at.
    rx_next: u16,
    /// Client: our refill index on the S2C ring (`head`).
    rx_head: u16,
    /// Next transmit slot: our `head` (client, C2S) or `tail` (server, S2C).
    tx_next: u16,
    /// Client: buffer size and where each ring's buffers start (slot `i` of a ring uses
    /// `bufs + i * bsize`, always in region 0).
    bsize: u32,
    rx_bufs: u32,
    tx_bufs: u32,
    regions: Vec<Region>,
    _efds: [OwnedFd; 2],
}

/// Why a control channel is being closed.
struct End {
    reason: Cow<'static, str>,
    /// Tell the peer (DISCONNECT) before closing.
    notify: bool,
    /// Count it as a control error.
    error: bool,
}

impl End {
    fn error(reason: impl Into<Cow<'static, str>>) -> End {
        End {
            reason: reason.into(),
            notify: true,
            error: true,
        }
    }
}

/// A memif interface in either role. Implements [`Port`]: received frames (chains
/// gathered) are copied into fresh frames of the caller's packet memory at
/// [`HEADROOM`](dataplane::buffer::HEADROOM), big frames for jumbo frames; transmitted
/// frames are copied into the shared buffers (over several if they need) and their frames
/// freed at once.
pub struct Memif {
    opts: MemifOptions,
    port_id: u16,
    addr: sys::UnixAddr,
    listener: Option<OwnedFd>,
    /// Identity of the socket file we created, to remove only ours.
    sock_file: Option<(u64, u64)>,
    session: Option<Session>,
    conn: Option<Conn>,
    stats: MemifStats,
    calls: u32,
    last_control: Instant,
    next_attempt: Instant,
    /// Set by the data path when the peer broke the ring protocol; the next control run
    /// disconnects.
    fault: Option<&'static str>,
    last_disconnect: Option<String>,
    /// When the last peer-triggered warning was logged: a peer must not be able to make
    /// the worker (which drives the control channel) log as fast as it reconnects.
    warned_at: Option<Instant>,
    peer_name: String,
    peer_if_name: String,
}

impl std::fmt::Debug for Memif {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memif")
            .field("name", &self.opts.name)
            .field("socket", &self.opts.socket)
            .field("role", &self.opts.role)
            .field("id", &self.opts.id)
            .field("port_id", &self.port_id)
            .field("connected", &self.is_connected())
            .finish_non_exhaustive()
    }
}

fn invalid(name: &str, what: &'static str) -> PortError {
    PortError::Io {
        ifname: name.to_string(),
        op: "memif options",
        source: io::Error::new(io::ErrorKind::InvalidInput, what),
    }
}

/// Region layout a client creates: offsets of both rings and both buffer areas, and the
/// total size; `None` if it does not fit 32-bit offsets.
fn client_layout(log2: u8, bsize: u32) -> Option<(u32, u32, u32, u32, u64)> {
    let ring = proto::ring_bytes(log2);
    let bufs = u64::from(bsize).checked_mul(1u64 << log2)?;
    let c2s = 0u64;
    let s2c = ring;
    let c2s_bufs = 2 * ring;
    let s2c_bufs = c2s_bufs + bufs;
    let total = s2c_bufs + bufs;
    if total > u64::from(u32::MAX) {
        return None;
    }
    Some((
        c2s as u32,
        s2c as u32,
        c2s_bufs as u32,
        s2c_bufs as u32,
        total,
    ))
}

impl Memif {
    /// Create the interface. A server binds and listens at once (removing a stale socket
    /// file first, refusing if a live server owns the path); a client makes its first
    /// connection attempt at once and keeps retrying from [`Memif::poll_control`].
    /// Received packets carry `port_id` as their `rx_port`.
    pub fn open(port_id: u16, opts: MemifOptions) -> Result<Memif, PortError> {
        let name = opts.name.clone();
        if !(1..=proto::MAX_LOG2_RING_SIZE).contains(&opts.ring_size_log2) {
            return Err(invalid(&name, "ring_size_log2 must be 1..=14"));
        }
        if !(64..=65535).contains(&opts.buffer_size) {
            return Err(invalid(&name, "buffer_size must be 64..=65535"));
        }
        if client_layout(opts.ring_size_log2, opts.buffer_size).is_none() {
            return Err(invalid(&name, "rings and buffers exceed 4 GiB"));
        }
        if let Some(s) = &opts.secret {
            if s.len() >= proto::SECRET_SIZE || s.as_bytes().contains(&0) {
                return Err(invalid(
                    &name,
                    "secret must be at most 23 bytes without NUL",
                ));
            }
        }
        let io_err = |op: &'static str| {
            let name = name.clone();
            move |e| PortError::from_io(&name, op, e)
        };
        let addr = sys::UnixAddr::new(&opts.socket, opts.abstract_socket)
            .map_err(io_err("memif socket address"))?;
        let now = Instant::now();
        let mut m = Memif {
            opts,
            port_id,
            addr,
            listener: None,
            sock_file: None,
            session: None,
            conn: None,
            stats: MemifStats::default(),
            calls: 0,
            last_control: now,
            next_attempt: now,
            fault: None,
            last_disconnect: None,
            warned_at: None,
            peer_name: String::new(),
            peer_if_name: String::new(),
        };
        if m.opts.role == MemifRole::Server {
            if !m.opts.abstract_socket {
                clear_stale_socket(&m.opts.socket, &m.addr)
                    .map_err(io_err("remove stale memif socket"))?;
            }
            let fd = sys::seqpacket_socket().map_err(io_err("socket(AF_UNIX, SOCK_SEQPACKET)"))?;
            sys::bind_listen(fd.as_raw_fd(), &m.addr, 8)
                .map_err(io_err("bind/listen(memif socket)"))?;
            if !m.opts.abstract_socket {
                m.sock_file = sys::file_id(&m.opts.socket);
            }
            m.listener = Some(fd);
            tracing::info!(
                name = %m.opts.name, socket = %m.opts.socket.display(), id = m.opts.id,
                "memif server listening"
            );
        }
        m.poll_control();
        Ok(m)
    }

    /// Drive the control path without blocking: accept a client (server) or connect to
    /// the server (client, at most every 100 ms), run the handshake, notice a peer's
    /// DISCONNECT or hang-up and tear down after a data-path fault. Call it from the
    /// control loop, or rely on `rx_burst`/`tx_burst`, which call it themselves.
    pub fn poll_control(&mut self) {
        let now = Instant::now();
        self.last_control = now;
        if let Some(reason) = self.fault.take() {
            self.end_session(End::error(reason));
        }
        if self.opts.role == MemifRole::Client && self.session.is_none() && now >= self.next_attempt
        {
            self.try_connect(now);
        }
        self.service_session();
        if self.opts.role == MemifRole::Server {
            self.accept_pending();
        }
        if let Some(s) = &self.session {
            if s.phase != Phase::Connected && now.duration_since(s.since) > HANDSHAKE_TIMEOUT {
                self.end_session(End::error("handshake timeout"));
            }
        }
    }

    /// Whether a peer is connected and the rings are up.
    pub fn is_connected(&self) -> bool {
        self.conn.is_some() && self.fault.is_none()
    }

    /// Poll the control path until connected or `timeout` passed (then `TimedOut`, with the
    /// last disconnect reason if there is one).
    pub fn wait_connected(&mut self, timeout: Duration) -> Result<(), PortError> {
        let deadline = Instant::now() + timeout;
        loop {
            self.poll_control();
            if self.is_connected() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let why = match &self.last_disconnect {
                    Some(r) => format!("no memif peer connected in time (last: {r})"),
                    None => "no memif peer connected in time".to_string(),
                };
                return Err(PortError::Io {
                    ifname: self.opts.name.clone(),
                    op: "wait for memif peer",
                    source: io::Error::new(io::ErrorKind::TimedOut, why),
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The counters.
    pub fn stats(&self) -> MemifStats {
        self.stats
    }

    /// Port id stamped on received packets.
    pub fn port_id(&self) -> u16 {
        self.port_id
    }

    /// The options the port was opened with.
    pub fn options(&self) -> &MemifOptions {
        &self.opts
    }

    /// Why the last connection (or connection attempt) ended, if one did.
    pub fn last_disconnect_reason(&self) -> Option<&str> {
        self.last_disconnect.as_deref()
    }

    /// Application name the peer sent (HELLO or INIT), and its interface name (CONNECT or
    /// CONNECTED); empty before the handshake got there.
    pub fn peer(&self) -> (&str, &str) {
        (&self.peer_name, &self.peer_if_name)
    }

    /// Ring size (descriptors per ring) of the current connection.
    pub fn ring_size(&self) -> Option<u16> {
        self.conn.as_ref().map(|c| c.tx.size())
    }
}

impl Drop for Memif {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            let m = Msg::disconnect("Interface closed").encode();
            let _ = sys::send_msg(s.sock.as_raw_fd(), &m, None);
        }
        self.conn = None;
        if self.listener.take().is_some() {
            if let Some(id) = self.sock_file {
                if sys::file_id(&self.opts.socket) == Some(id) {
                    let _ = std::fs::remove_file(&self.opts.socket);
                }
            }
        }
    }
}

impl<M: PacketMemory> Port<M> for Memif {
    fn rx_burst(&mut self, mem: &mut M, v: &mut Vector) -> usize {
        self.tick();
        self.rx_ring(mem, v)
    }

    fn tx_burst(&mut self, mem: &mut M, pkts: &[Pkt]) -> usize {
        self.tick();
        self.tx_ring(mem, pkts)
    }
}

#[cfg(test)]
mod tests;
