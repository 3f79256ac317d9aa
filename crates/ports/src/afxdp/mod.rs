//! A port on a Linux `AF_XDP` socket, with an XDP program that keeps the kernel's traffic
//! for the kernel.
//!
//! The XDP program (bpf/xdp_redirect.c) passes ARP, non-IP, multicast/broadcast,
//! link-layer broadcast, link-local and the router's own addresses (see [`AfXdp::set_local_addrs`])
//! to the Linux stack and redirects everything else into the socket bound to the receive
//! queue. The port owns its UMEM: a region of `frames` × 2048-byte frames split into a
//! receive half (cycling through the fill and RX rings) and a transmit half (cycling
//! through the TX and completion rings).
//!
//! Two ways to hold packet memory:
//! - **Shared** ([`AfXdp::open_queues_shared`]): the worker's [`Arena`] *is* the UMEM, shared
//!   by all the worker's AF_XDP sockets (`XDP_SHARED_UMEM`, across interfaces and queues,
//!   each socket with its own fill and completion rings). A received frame is handed to the
//!   graph as it lies (at offset 256, the kernel's `XDP_PACKET_HEADROOM`: room for any
//!   encapsulation), and forwarding it to another AF_XDP port puts the same frame on that
//!   port's TX ring: descriptors move, bytes do not. Frames on the kernel's rings are
//!   *lent* ([`Arena::lend`]); nothing references them until a descriptor brings them back.
//!   Other ports (AF_PACKET, memif) copy into and out of the arena as always.
//! - **Own** ([`AfXdp::open`]): a UMEM of its own, copied from and into whatever memory the
//!   worker uses (the tester's, the benchmarks').

mod program;
mod sys;

use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};

use dataplane::buffer::{
    Arena, PacketMemory, Pkt, Vector, BIG_BASE, BIG_FRAME_SIZE, FRAME_SIZE, F_CSUM_UNKNOWN,
    HEADROOM, MAX_FRAME, VECTOR_SIZE,
};
use dataplane::worker::Port;

use crate::sys as ifsys;
use crate::{PortError, PortStats};

pub use program::{Share, XDP_OBJECT};

/// Bytes per UMEM frame (chunk); the same as the dataplane's frames.
const UMEM_FRAME: u64 = FRAME_SIZE as u64;

/// `XDP_USE_SG` (bind flag, Linux 6.6): a frame larger than a chunk arrives and leaves as
/// several descriptors (multi-buffer AF_XDP).
const XDP_USE_SG: u16 = 1 << 4;
/// `XDP_PKT_CONTD` (descriptor option): more descriptors of the same frame follow.
const XDP_PKT_CONTD: u32 = 1;
/// Bytes of a big buffer a transmitted piece carries: a chunk less the headroom it is
/// written at (a descriptor must stay inside its chunk).
const TX_PIECE: usize = FRAME_SIZE - HEADROOM;
/// Pieces of the largest big buffer.
const MAX_PIECES: usize = (BIG_FRAME_SIZE - HEADROOM).div_ceil(TX_PIECE);

/// A frame received as several descriptors (multi-buffer), gathered into one big buffer
/// of the worker's memory as its pieces arrive (possibly over several bursts).
#[derive(Clone, Copy, Debug)]
struct Gather {
    /// The big buffer; `None` when none was free (the frame is dropped whole).
    buf: Option<u32>,
    /// Bytes gathered so far (from `HEADROOM`).
    len: usize,
    /// A piece did not fit or came from nowhere: the frame is dropped at its last piece.
    bad: bool,
}

impl Gather {
    fn start<M: PacketMemory>(mem: &mut M) -> Gather {
        Gather {
            buf: mem.alloc_big(),
            len: 0,
            bad: false,
        }
    }
    /// Where the next piece of `len` bytes goes in the big buffer: its frame and range,
    /// unless the frame is already lost or would exceed `MAX_FRAME`.
    fn next(&self, len: usize) -> Option<(u32, std::ops::Range<usize>)> {
        let b = self
            .buf
            .filter(|_| !self.bad && self.len + len <= MAX_FRAME)?;
        Some((b, HEADROOM + self.len..HEADROOM + self.len + len))
    }
}

/// How the socket shares packet memory with the driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BindMode {
    /// Zero-copy if the driver supports it, copy otherwise.
    #[default]
    Auto,
    /// Zero-copy or fail (`XDP_ZEROCOPY`).
    ZeroCopy,
    /// Copy mode (`XDP_COPY`); works on every driver, veth included.
    Copy,
}

/// Where the XDP program is attached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttachMode {
    /// Native (in the driver) if supported, generic otherwise.
    #[default]
    Auto,
    /// Native XDP only (`XDP_FLAGS_DRV_MODE`).
    Native,
    /// Generic XDP only (`XDP_FLAGS_SKB_MODE`): slower, works on any interface.
    Generic,
}

/// How to set up an [`AfXdp`] port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfXdpOptions {
    /// UMEM frames of 2048 bytes. Half receive, half transmit; a power of two, at least 64.
    pub frames: u32,
    /// Copy or zero-copy.
    pub bind: BindMode,
    /// Native or generic XDP.
    pub attach: AttachMode,
    /// Ask for `XDP_USE_NEED_WAKEUP` (fewer syscalls); retried without it if refused.
    pub need_wakeup: bool,
}

impl Default for AfXdpOptions {
    fn default() -> Self {
        AfXdpOptions {
            frames: 4096,
            bind: BindMode::Auto,
            attach: AttachMode::Auto,
            need_wakeup: true,
        }
    }
}

/// Interface index, MAC and MTU.
type IfFacts = (u32, [u8; 6], u32);
/// One attached XDP program shared by the sockets of an interface's queues.
type SharedProgram = Arc<Mutex<program::XdpProgram>>;

/// The shared program, whatever a panicking holder left behind (its state is a kernel
/// object; a poisoned lock carries no broken invariant of ours). Taken only at control
/// rate (open, local-address updates), never per packet.
fn lock(p: &Mutex<program::XdpProgram>) -> MutexGuard<'_, program::XdpProgram> {
    p.lock().unwrap_or_else(|e| e.into_inner())
}

/// A UMEM frame address cut down to its chunk's start (RX descriptors point past the
/// kernel's headroom).
#[inline]
fn chunk(addr: u64) -> u64 {
    addr & !(UMEM_FRAME - 1)
}

/// Ring entries of a socket on a shared UMEM (4096: a worker descheduled for a few ms at
/// 1 Mpps loses nothing; 2048 overflowed on veth). The arena must hold, beyond what the graph
/// uses, a full fill ring and a full TX ring per socket ([`AfXdp::shared_frames`]).
const SHARED_RING: u32 = 4096;

/// The packet memory of a port.
enum Umem {
    /// Its own UMEM, copied from and into the worker's memory.
    Own {
        umem: sys::Mmap,
        /// Receive-side frames waiting to go back on the fill ring.
        fill_pending: Vec<u64>,
        /// Transmit-side frames free for new TX descriptors.
        tx_free: Vec<u64>,
    },
    /// The worker's arena of this identity ([`Arena::id`]).
    Shared { id: usize },
}

/// The socket that registered a worker's arena as a UMEM: the worker's other AF_XDP
/// sockets share it ([`AfXdp::umem_owner`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UmemOwner {
    fd: RawFd,
    id: usize,
    zero_copy: bool,
    need_wakeup: bool,
    sg: bool,
}

/// An `AF_XDP` port bound to one queue of one interface.
pub struct AfXdp {
    // Rings before the socket and UMEM: they are unmapped first, then the socket closes,
    // then the UMEM it registered goes.
    rx: sys::Ring<libc::xdp_desc>,
    tx: sys::Ring<libc::xdp_desc>,
    fill: sys::Ring<u64>,
    comp: sys::Ring<u64>,
    /// Detaches on drop; dropped before the socket so no frame is redirected to a closed
    /// socket (they would be dropped, not passed).
    program: Arc<Mutex<program::XdpProgram>>,
    fd: OwnedFd,
    umem: Umem,
    ifname: String,
    ifindex: u32,
    queue_id: u32,
    port_id: u16,
    mac: [u8; 6],
    mtu: u16,
    zero_copy: bool,
    need_wakeup: bool,
    /// Bound with `XDP_USE_SG`: jumbo frames come and go as several descriptors.
    sg: bool,
    /// A multi-buffer frame whose last piece has not arrived yet.
    gather: Option<Gather>,
    stats: PortStats,
}

impl std::fmt::Debug for AfXdp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfXdp")
            .field("ifname", &self.ifname)
            .field("ifindex", &self.ifindex)
            .field("queue_id", &self.queue_id)
            .field("port_id", &self.port_id)
            .field("mode", &self.mode())
            .field("fd", &self.fd.as_raw_fd())
            .finish_non_exhaustive()
    }
}

impl AfXdp {
    /// Attach the XDP program to `ifname` (in the calling thread's network namespace) and
    /// open an AF_XDP socket on its receive queue `queue_id`, with a UMEM shaped by `opts`.
    /// Received packets carry `port_id` as their `rx_port`. An XDP program left attached
    /// by a crashed run is removed first. Until [`AfXdp::set_local_addrs`] is called, only
    /// the protocol rules send traffic to the kernel.
    pub fn open(
        ifname: &str,
        queue_id: u32,
        port_id: u16,
        opts: AfXdpOptions,
    ) -> Result<AfXdp, PortError> {
        let (facts, program) = Self::attach(ifname, &opts)?;
        Self::open_socket(ifname, queue_id, port_id, &opts, facts, program)
    }

    /// One socket on each of the receive queues `0..queues`, sharing one XDP program (one
    /// worker per queue). Fails, closing everything, if any queue cannot be bound — e.g. the
    /// interface has fewer queues.
    pub fn open_queues(
        ifname: &str,
        queues: u32,
        port_id: u16,
        opts: AfXdpOptions,
    ) -> Result<Vec<AfXdp>, PortError> {
        let (facts, program) = Self::attach(ifname, &opts)?;
        (0..queues.max(1))
            .map(|q| Self::open_socket(ifname, q, port_id, &opts, facts, program.clone()))
            .collect()
    }

    /// Interface facts and the attached program.
    fn attach(ifname: &str, opts: &AfXdpOptions) -> Result<(IfFacts, SharedProgram), PortError> {
        let err = |op: &'static str| move |e| PortError::from_io(ifname, op, e);
        let xdp = |reason: String| PortError::Xdp {
            ifname: ifname.to_string(),
            reason,
        };
        if !opts.frames.is_power_of_two() || opts.frames < 64 {
            return Err(xdp(format!(
                "UMEM frames must be a power of two of at least 64, not {}",
                opts.frames
            )));
        }
        // Interface facts through a packet socket: AF_XDP sockets answer no ioctls.
        let probe = ifsys::raw_socket(libc::AF_PACKET).map_err(err("socket(AF_PACKET)"))?;
        let ifindex =
            ifsys::ifindex(probe.as_raw_fd(), ifname).map_err(err("ioctl(SIOCGIFINDEX)"))?;
        let mac = ifsys::hwaddr(probe.as_raw_fd(), ifname).map_err(err("ioctl(SIOCGIFHWADDR)"))?;
        let mtu = ifsys::mtu(probe.as_raw_fd(), ifname).map_err(err("ioctl(SIOCGIFMTU)"))?;
        drop(probe);
        let (native, generic) = match opts.attach {
            AttachMode::Auto => (true, true),
            AttachMode::Native => (true, false),
            AttachMode::Generic => (false, true),
        };
        let program = program::XdpProgram::attach(ifname, ifindex, native, generic).map_err(xdp)?;
        Ok(((ifindex, mac, mtu), Arc::new(Mutex::new(program))))
    }

    /// A socket on `queue_id` using an attached `program`.
    fn open_socket(
        ifname: &str,
        queue_id: u32,
        port_id: u16,
        opts: &AfXdpOptions,
        (ifindex, mac, mtu): IfFacts,
        program: SharedProgram,
    ) -> Result<AfXdp, PortError> {
        let err = |op: &'static str| move |e| PortError::from_io(ifname, op, e);
        let xdp = |reason: String| PortError::Xdp {
            ifname: ifname.to_string(),
            reason,
        };
        let ring = opts.frames / 2;
        let fd = sys::xdp_socket().map_err(err("socket(AF_XDP)"))?;
        let raw = fd.as_raw_fd();
        let umem =
            sys::Mmap::anonymous(opts.frames as usize * FRAME_SIZE).map_err(err("mmap(UMEM)"))?;
        sys::register_umem(raw, &umem, UMEM_FRAME as u32)
            .map_err(err("setsockopt(XDP_UMEM_REG)"))?;
        let (rx, tx, mut fill, comp) = map_rings(ifname, &fd, ring)?;

        // The receive half goes on the fill ring before bind, so frames can land at once.
        let n = fill.free(ring).min(ring);
        for i in 0..n {
            fill.write(i, u64::from(i) * UMEM_FRAME);
        }
        fill.submit(n);
        let tx_free: Vec<u64> = (ring..opts.frames)
            .rev()
            .map(|i| u64::from(i) * UMEM_FRAME)
            .collect();

        let attached = lock(&program).attached();
        let (zero_copy, need_wakeup, sg) =
            bind(raw, ifindex, queue_id, opts, attached).map_err(xdp)?;
        warn_single_buffer(ifname, mtu, sg);
        lock(&program).set_socket(queue_id, &fd).map_err(xdp)?;
        tracing::info!(
            ifname,
            queue_id,
            attach = ?attached,
            zero_copy,
            need_wakeup,
            multi_buffer = sg,
            "AF_XDP port open"
        );
        Ok(AfXdp {
            rx,
            tx,
            fill,
            comp,
            program,
            fd,
            umem: Umem::Own {
                umem,
                fill_pending: Vec::with_capacity(ring as usize),
                tx_free,
            },
            ifname: ifname.to_string(),
            ifindex,
            queue_id,
            port_id,
            mac,
            mtu: mtu.min(u32::from(u16::MAX)) as u16,
            zero_copy,
            need_wakeup,
            sg,
            gather: None,
            stats: PortStats::default(),
        })
    }

    /// Frames an arena needs, beyond what the graph uses, for each socket that shares it
    /// ([`AfXdp::open_queues_shared`]): a full fill ring and a full TX ring.
    pub fn shared_frames() -> u32 {
        2 * SHARED_RING
    }

    /// One socket on each receive queue `0..arenas.len()` of `ifname` (queue `q` for
    /// worker `q`), each using worker `q`'s arena `arenas[q]` as its UMEM: registering it
    /// when `owners[q]` is `None` (the worker's first AF_XDP socket), sharing the UMEM of
    /// that socket otherwise. The arenas must outlive nothing (the kernel pins their pages),
    /// but each worker must run its sockets on its own arena ([`Port`] checks, and drops
    /// what arrives with another memory).
    pub fn open_queues_shared(
        ifname: &str,
        port_id: u16,
        opts: AfXdpOptions,
        arenas: &mut [Arena],
        owners: &[Option<UmemOwner>],
    ) -> Result<Vec<AfXdp>, PortError> {
        let (facts, program) = Self::attach(ifname, &opts)?;
        let mut out = Vec::with_capacity(arenas.len());
        for (q, arena) in arenas.iter_mut().enumerate() {
            let owner = owners.get(q).copied().flatten();
            out.push(Self::open_shared_socket(
                ifname,
                q as u32,
                port_id,
                &opts,
                facts,
                program.clone(),
                arena,
                owner,
            )?);
        }
        Ok(out)
    }

    /// What the worker's other sockets need to share this one's UMEM; `None` for a port
    /// with a UMEM of its own.
    pub fn umem_owner(&self) -> Option<UmemOwner> {
        match self.umem {
            Umem::Shared { id } => Some(UmemOwner {
                fd: self.fd.as_raw_fd(),
                id,
                zero_copy: self.zero_copy,
                need_wakeup: self.need_wakeup,
                sg: self.sg,
            }),
            Umem::Own { .. } => None,
        }
    }

    /// A socket on `queue_id` whose UMEM is `arena` (registered here, or `owner`'s).
    #[allow(clippy::too_many_arguments)]
    fn open_shared_socket(
        ifname: &str,
        queue_id: u32,
        port_id: u16,
        opts: &AfXdpOptions,
        (ifindex, mac, mtu): IfFacts,
        program: SharedProgram,
        arena: &mut Arena,
        owner: Option<UmemOwner>,
    ) -> Result<AfXdp, PortError> {
        let err = |op: &'static str| move |e| PortError::from_io(ifname, op, e);
        let xdp = |reason: String| PortError::Xdp {
            ifname: ifname.to_string(),
            reason,
        };
        if owner.is_some_and(|o| o.id != arena.id()) {
            return Err(xdp(
                "the UMEM to share is another worker's packet memory".to_string()
            ));
        }
        let ring = SHARED_RING;
        let fd = sys::xdp_socket().map_err(err("socket(AF_XDP)"))?;
        let raw = fd.as_raw_fd();
        if owner.is_none() {
            let (addr, len) = arena.region();
            sys::register_region(raw, addr, len, UMEM_FRAME as u32)
                .map_err(err("setsockopt(XDP_UMEM_REG)"))?;
        }
        let (rx, tx, mut fill, comp) = map_rings(ifname, &fd, ring)?;
        let attached = lock(&program).attached();
        let (zero_copy, need_wakeup, sg) = match owner {
            None => bind(raw, ifindex, queue_id, opts, attached).map_err(xdp)?,
            Some(o) => {
                sys::bind_shared(raw, ifindex, queue_id, o.fd).map_err(|e| {
                    xdp(format!(
                        "AF_XDP bind sharing a UMEM failed (queue {queue_id}): {e}"
                    ))
                })?;
                // A socket sharing a UMEM inherits its scatter-gather mode.
                (o.zero_copy, o.need_wakeup, o.sg)
            }
        };
        warn_single_buffer(ifname, mtu, sg);
        // Frames to receive into, after bind (a failed bind lends nothing).
        let n = fill.free(ring).min(ring);
        let mut k = 0;
        while k < n {
            let Some(addr) = arena.lend_new() else { break };
            fill.write(k, addr);
            k += 1;
        }
        fill.submit(k);
        lock(&program).set_socket(queue_id, &fd).map_err(xdp)?;
        tracing::info!(
            ifname,
            queue_id,
            attach = ?attached,
            zero_copy,
            need_wakeup,
            multi_buffer = sg,
            shared_umem = owner.is_some(),
            "AF_XDP port open on the worker's packet memory"
        );
        Ok(AfXdp {
            rx,
            tx,
            fill,
            comp,
            program,
            fd,
            umem: Umem::Shared { id: arena.id() },
            ifname: ifname.to_string(),
            ifindex,
            queue_id,
            port_id,
            mac,
            mtu: mtu.min(u32::from(u16::MAX)) as u16,
            zero_copy,
            need_wakeup,
            sg,
            gather: None,
            stats: PortStats::default(),
        })
    }

    /// Kernel index of the interface.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Name of the interface.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Receive queue the socket is bound to.
    pub fn queue_id(&self) -> u32 {
        self.queue_id
    }

    /// Port id stamped on received packets.
    pub fn port_id(&self) -> u16 {
        self.port_id
    }

    /// MAC address of the interface (read at open).
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// MTU of the interface (read at open).
    pub fn mtu(&self) -> u16 {
        self.mtu
    }

    /// The socket, to `poll()` for `POLLIN` when idle.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// How the port runs: `"xdp-drv/zero-copy"`, `"xdp-drv/copy"` or `"xdp-skb/copy"`.
    pub fn mode(&self) -> &'static str {
        match (lock(&self.program).attached(), self.zero_copy) {
            (program::Attached::Driver, true) => "xdp-drv/zero-copy",
            (program::Attached::Driver, false) => "xdp-drv/copy",
            (program::Attached::Generic, _) => "xdp-skb/copy",
        }
    }

    /// Whether the socket uses `XDP_USE_NEED_WAKEUP`.
    pub fn uses_need_wakeup(&self) -> bool {
        self.need_wakeup
    }

    /// Make `addrs` the router's own addresses on this interface: traffic to them is passed
    /// to the kernel instead of the fast path. Replaces the previous set.
    pub fn set_local_addrs(&mut self, addrs: &[IpAddr]) -> Result<(), PortError> {
        self.set_local_addrs_shared(addrs, Share::default())
    }

    /// [`AfXdp::set_local_addrs`], with the fast path taking some of their traffic
    /// (`share`): with NAT, the ports it claims ([`AfXdp::nat_ports`]); with IPsec, ESP.
    pub fn set_local_addrs_shared(
        &mut self,
        addrs: &[IpAddr],
        share: Share,
    ) -> Result<(), PortError> {
        lock(&self.program)
            .set_local_addrs(addrs, share)
            .map_err(|reason| PortError::Xdp {
                ifname: self.ifname.clone(),
                reason,
            })
    }

    /// Where NAT claims ports of the addresses it shares with the kernel (shared by the
    /// interface's queues); `None` if the kernel could not map it.
    pub fn nat_ports(&self) -> Option<Arc<dyn dataplane::claims::PortClaims>> {
        lock(&self.program)
            .nat_ports()
            .map(|n| n as Arc<dyn dataplane::claims::PortClaims>)
    }

    /// The addresses the XDP program currently treats as local, sorted.
    pub fn local_addrs(&self) -> Vec<IpAddr> {
        lock(&self.program).local_addrs()
    }

    /// The port's counters, with the kernel's socket drop counters (`XDP_STATISTICS`:
    /// dropped for lack of a fill buffer, RX ring full, invalid descriptors) in
    /// `kernel_drops` and invalid TX descriptors in `tx_errors`.
    pub fn stats(&self) -> PortStats {
        let mut s = self.stats;
        if let Ok(k) = sys::statistics(self.fd.as_raw_fd()) {
            s.kernel_drops = k.rx_dropped + k.rx_ring_full + k.rx_invalid_descs;
            s.tx_errors += k.tx_invalid_descs;
        }
        s
    }

    /// Give received frames back to the kernel through the fill ring (own UMEM).
    fn refill(&mut self) {
        let Umem::Own { fill_pending, .. } = &mut self.umem else {
            return;
        };
        let want = fill_pending.len() as u32;
        if want == 0 {
            return;
        }
        let n = self.fill.free(want).min(want);
        let start = fill_pending.len() - n as usize;
        for (i, &addr) in fill_pending[start..].iter().enumerate() {
            self.fill.write(i as u32, addr);
        }
        self.fill.submit(n);
        fill_pending.truncate(start);
        if self.need_wakeup && self.fill.needs_wakeup() {
            sys::kick_rx(self.fd.as_raw_fd());
        }
    }

    /// Collect transmitted frames from the completion ring (own UMEM).
    fn reap_completions(&mut self) {
        let Umem::Own { tx_free, .. } = &mut self.umem else {
            return;
        };
        let n = self.comp.ready(self.comp.size());
        for i in 0..n {
            tx_free.push(chunk(self.comp.read(i)));
        }
        self.comp.release(n);
    }

    /// The worker's arena, when it is this port's UMEM; `None` for a port with its own
    /// UMEM. `Err` when the port shares a UMEM but `mem` is another memory (a caller bug:
    /// nothing can be received or sent).
    #[inline]
    fn shared_arena<'m, M: PacketMemory>(
        &self,
        mem: &'m mut M,
    ) -> Result<Option<&'m mut Arena>, ()> {
        match self.umem {
            Umem::Own { .. } => Ok(None),
            Umem::Shared { id } => match mem.arena() {
                Some(a) if a.id() == id => Ok(Some(a)),
                _ => Err(()),
            },
        }
    }

    /// Hand a received frame (`len` bytes at `off` of frame `buf`) to the graph, counted.
    /// The caller reads at most the room left in the vector: the push cannot fail. AF_XDP
    /// says nothing of the sender's checksum offload: a local sender (veth, TAP) hands over
    /// partial checksums, which the rewrite nodes recognise and complete.
    #[inline]
    fn deliver(
        (stats, port_id): (&mut PortStats, u16),
        v: &mut Vector,
        buf: u32,
        off: usize,
        len: usize,
    ) {
        let mut p = Pkt::new(buf, off as u16, len as u16, port_id);
        p.flags |= F_CSUM_UNKNOWN;
        v.push(p);
        stats.rx_packets += 1;
        stats.rx_bytes += len as u64;
    }

    /// Zero-copy receive: the frames on the RX ring go to the graph as they lie; as many
    /// fresh frames go on the fill ring.
    fn rx_shared(&mut self, arena: &mut Arena, v: &mut Vector, n: u32) {
        for i in 0..n {
            let d = self.rx.read(i);
            if self.gather.is_some() || d.options & XDP_PKT_CONTD != 0 {
                self.rx_piece_shared(arena, v, d);
                continue;
            }
            let Some(buf) = arena.reclaim(d.addr) else {
                // Not a frame we lent: the kernel's error, nothing to give back.
                self.stats.rx_dropped_too_big += 1;
                continue;
            };
            let off = (d.addr - u64::from(buf) * UMEM_FRAME) as usize;
            let len = d.len as usize;
            if off < HEADROOM || off + len > FRAME_SIZE {
                arena.free(buf);
                self.stats.rx_dropped_too_big += 1;
                continue;
            }
            Self::deliver((&mut self.stats, self.port_id), v, buf, off, len);
        }
        self.rx.release(n);
        let room = self.fill.free(self.fill.size());
        let mut k = 0;
        while k < room {
            let Some(addr) = arena.lend_new() else {
                // The arena is short: the ring takes more on the next burst.
                break;
            };
            self.fill.write(k, addr);
            k += 1;
        }
        self.fill.submit(k);
        if self.need_wakeup && self.fill.needs_wakeup() {
            sys::kick_rx(self.fd.as_raw_fd());
        }
    }

    /// One descriptor of a multi-buffer frame (shared UMEM): its bytes are copied into the
    /// gather's big buffer and its frame goes back to the arena; the last piece delivers
    /// the frame (or counts why not).
    #[cold]
    fn rx_piece_shared(&mut self, arena: &mut Arena, v: &mut Vector, d: libc::xdp_desc) {
        let mut g = self.gather.take().unwrap_or_else(|| Gather::start(arena));
        let len = d.len as usize;
        match arena.reclaim(d.addr) {
            None => g.bad = true,
            Some(small) => {
                let off = (d.addr - u64::from(small) * UMEM_FRAME) as usize;
                match g.next(len) {
                    Some((big, at)) if off + len <= FRAME_SIZE => {
                        let (src, dst) = arena.frame_pair(small, big);
                        match (src.get(off..off + len), dst.get_mut(at)) {
                            (Some(s), Some(d)) => {
                                d.copy_from_slice(s);
                                g.len += len;
                            }
                            _ => g.bad = true,
                        }
                    }
                    _ => g.bad = true,
                }
                arena.free(small);
            }
        }
        if d.options & XDP_PKT_CONTD != 0 {
            self.gather = Some(g);
        } else {
            Self::finish_gather((&mut self.stats, self.port_id), arena, v, g);
        }
    }

    /// The last piece of a gathered frame arrived: hand it to the graph, or count why not.
    fn finish_gather<M: PacketMemory>(
        (stats, port_id): (&mut PortStats, u16),
        mem: &mut M,
        v: &mut Vector,
        g: Gather,
    ) {
        match g.buf {
            Some(b) if !g.bad && g.len > 0 => {
                Self::deliver((stats, port_id), v, b, HEADROOM, g.len)
            }
            Some(b) => {
                mem.free(b);
                stats.rx_dropped_too_big += 1;
            }
            None => stats.rx_dropped_no_buffer += 1,
        }
    }

    /// Zero-copy transmit: the packets' own frames go on the TX ring; completed ones go
    /// back to the arena. A jumbo frame (in a big buffer, which the kernel cannot see) is
    /// copied into as many UMEM frames as it needs and sent as one multi-buffer frame.
    fn tx_shared(&mut self, arena: &mut Arena, pkts: &[Pkt]) -> usize {
        let done = self.comp.ready(self.comp.size());
        for i in 0..done {
            match arena.reclaim(self.comp.read(i)) {
                Some(b) => arena.free(b),
                None => self.stats.tx_errors += 1,
            }
        }
        self.comp.release(done);
        let mut room = self.tx.free(self.tx.size());
        let mut queued = 0u32;
        let mut sent = 0u64;
        let mut k = 0;
        while let Some(p) = pkts.get(k) {
            let (off, len) = (p.off as usize, p.len as usize);
            if p.buf >= BIG_BASE {
                let pieces = len.div_ceil(TX_PIECE).max(1) as u32;
                if pieces > room {
                    break;
                }
                let n = self.scatter_shared(arena, p, queued);
                arena.free(p.buf);
                if n == 0 {
                    self.stats.tx_errors += 1;
                } else {
                    queued += n;
                    room -= n;
                    sent += 1;
                    self.stats.tx_bytes += len as u64;
                }
                k += 1;
                continue;
            }
            if room == 0 {
                break;
            }
            k += 1;
            if off + len > FRAME_SIZE || !arena.lend(p.buf) {
                // A descriptor outside its frame, or a frame not held: never lent.
                if off + len > FRAME_SIZE {
                    arena.free(p.buf);
                }
                self.stats.tx_errors += 1;
                continue;
            }
            self.tx.write(
                queued,
                libc::xdp_desc {
                    addr: u64::from(p.buf) * UMEM_FRAME + off as u64,
                    len: len as u32,
                    options: 0,
                },
            );
            queued += 1;
            room -= 1;
            sent += 1;
            self.stats.tx_bytes += len as u64;
        }
        // Ring full: the rest is dropped, as a NIC queue would.
        for p in &pkts[k..] {
            arena.free(p.buf);
        }
        self.stats.tx_errors += (pkts.len() - k) as u64;
        self.stats.tx_packets += sent;
        if queued > 0 {
            self.tx.submit(queued);
        }
        self.flush_tx();
        sent as usize
    }

    /// Copy the jumbo frame `p` (a big buffer) into fresh UMEM frames and write their
    /// descriptors from TX ring position `at`, all but the last marked `XDP_PKT_CONTD`.
    /// Returns the descriptors written: 0 (nothing lent) when the socket is not
    /// multi-buffer or the arena is short of frames. The caller checked the ring's room.
    #[cold]
    fn scatter_shared(&mut self, arena: &mut Arena, p: &Pkt, at: u32) -> u32 {
        let (off, len) = (p.off as usize, p.len as usize);
        let pieces = len.div_ceil(TX_PIECE);
        if !self.sg || pieces > MAX_PIECES || pieces == 0 {
            return 0;
        }
        let mut frames = [0u32; MAX_PIECES];
        for j in 0..pieces {
            match arena.alloc() {
                Some(b) => frames[j] = b,
                None => {
                    for &b in &frames[..j] {
                        arena.free(b);
                    }
                    return 0;
                }
            }
        }
        let mut copied = true;
        for (j, &b) in frames[..pieces].iter().enumerate() {
            let s = off + j * TX_PIECE;
            let n = (len - j * TX_PIECE).min(TX_PIECE);
            let (src, dst) = arena.frame_pair(p.buf, b);
            match (src.get(s..s + n), dst.get_mut(HEADROOM..HEADROOM + n)) {
                (Some(s), Some(d)) => d.copy_from_slice(s),
                _ => copied = false,
            }
        }
        if !copied {
            for &b in &frames[..pieces] {
                arena.free(b);
            }
            return 0;
        }
        for (j, &b) in frames[..pieces].iter().enumerate() {
            // Just allocated, so held: lending cannot fail.
            arena.lend(b);
            let n = (len - j * TX_PIECE).min(TX_PIECE);
            self.tx.write(
                at + j as u32,
                libc::xdp_desc {
                    addr: u64::from(b) * UMEM_FRAME + HEADROOM as u64,
                    len: n as u32,
                    options: if j + 1 < pieces { XDP_PKT_CONTD } else { 0 },
                },
            );
        }
        pieces as u32
    }

    /// Make the kernel transmit what is on the TX ring. Copy mode sends at most a small
    /// batch per call (32 by default), so keep kicking while each call makes progress.
    fn flush_tx(&mut self) {
        if self.need_wakeup && !self.tx.needs_wakeup() {
            return;
        }
        let fd = self.fd.as_raw_fd();
        let mut left = self.tx.pending();
        while left > 0 {
            if sys::kick_tx(fd).is_err() {
                // Down link or a bad descriptor: the kernel counts it; nothing to retry.
                break;
            }
            let now = self.tx.pending();
            if now >= left {
                break;
            }
            left = now;
        }
    }
}

/// Say so when the kernel refused multi-buffer AF_XDP on a link whose MTU needs it: frames
/// above a chunk will be dropped at receive (`rx_drops`).
fn warn_single_buffer(ifname: &str, mtu: u32, sg: bool) {
    const CHUNK_MTU: u32 = FRAME_SIZE as u32 - 256 - 14;
    if !sg && mtu > CHUNK_MTU {
        tracing::warn!(
            ifname,
            mtu,
            "the kernel refused multi-buffer AF_XDP (XDP_USE_SG, Linux 6.6+): frames above \
             {CHUNK_MTU} bytes of IP MTU are dropped at receive; lower the MTU or use \
             backend = \"af_packet\""
        );
    }
}

/// The four rings of socket `fd`, `ring` entries each: RX, TX, fill, completion.
type Rings = (
    sys::Ring<libc::xdp_desc>,
    sys::Ring<libc::xdp_desc>,
    sys::Ring<u64>,
    sys::Ring<u64>,
);

/// Size and map the four rings of socket `fd` (one sharing a UMEM on another interface or
/// queue has fill and completion rings of its own too).
fn map_rings(ifname: &str, fd: &OwnedFd, ring: u32) -> Result<Rings, PortError> {
    let err = |op: &'static str| move |e| PortError::from_io(ifname, op, e);
    let raw = fd.as_raw_fd();
    for (opt, name) in [
        (libc::XDP_UMEM_FILL_RING, "setsockopt(XDP_UMEM_FILL_RING)"),
        (
            libc::XDP_UMEM_COMPLETION_RING,
            "setsockopt(XDP_UMEM_COMPLETION_RING)",
        ),
        (libc::XDP_RX_RING, "setsockopt(XDP_RX_RING)"),
        (libc::XDP_TX_RING, "setsockopt(XDP_TX_RING)"),
    ] {
        sys::set_ring_size(raw, opt, ring).map_err(err(name))?;
    }
    let off = sys::mmap_offsets(raw).map_err(err("getsockopt(XDP_MMAP_OFFSETS)"))?;
    let map_err = err("mmap(AF_XDP ring)");
    let rx = sys::Ring::map(fd, &off.rx, ring, libc::XDP_PGOFF_RX_RING as u64, false)
        .map_err(map_err)?;
    let tx =
        sys::Ring::map(fd, &off.tx, ring, libc::XDP_PGOFF_TX_RING as u64, true).map_err(map_err)?;
    let fill =
        sys::Ring::map(fd, &off.fr, ring, libc::XDP_UMEM_PGOFF_FILL_RING, true).map_err(map_err)?;
    let comp = sys::Ring::map(
        fd,
        &off.cr,
        ring,
        libc::XDP_UMEM_PGOFF_COMPLETION_RING,
        false,
    )
    .map_err(map_err)?;
    Ok((rx, tx, fill, comp))
}

/// Bind the socket as `opts` asks, falling back from zero-copy to copy, from need_wakeup
/// to plain where allowed, and from multi-buffer to single-buffer (a kernel before 6.6 or
/// a driver without it: frames then stop at a chunk). Returns (zero-copy, need_wakeup,
/// multi-buffer).
fn bind(
    fd: RawFd,
    ifindex: u32,
    queue_id: u32,
    opts: &AfXdpOptions,
    attached: program::Attached,
) -> Result<(bool, bool, bool), String> {
    let zc_choices: &[bool] = match (opts.bind, attached) {
        (BindMode::Copy, _) => &[false],
        (BindMode::ZeroCopy, _) => &[true],
        // Generic XDP hands the socket skbs: zero-copy is impossible.
        (BindMode::Auto, program::Attached::Generic) => &[false],
        (BindMode::Auto, program::Attached::Driver) => &[true, false],
    };
    let wake_choices: &[bool] = if opts.need_wakeup {
        &[true, false]
    } else {
        &[false]
    };
    let mut last = None;
    for &zc in zc_choices {
        for &wake in wake_choices {
            for sg in [true, false] {
                let mut flags = if zc {
                    libc::XDP_ZEROCOPY
                } else {
                    libc::XDP_COPY
                };
                if wake {
                    flags |= libc::XDP_USE_NEED_WAKEUP;
                }
                if sg {
                    flags |= XDP_USE_SG;
                }
                match sys::bind(fd, ifindex, queue_id, flags) {
                    Ok(()) => return Ok((zc, wake, sg)),
                    Err(e) => last = Some((zc, wake, e)),
                }
            }
        }
    }
    let (zc, wake, e) = last.expect("at least one bind attempt");
    let what = if zc { "zero-copy" } else { "copy" };
    let hint = match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) if zc => {
            ": the driver has no zero-copy support (use BindMode::Copy)"
        }
        Some(libc::EINVAL) => ": no such queue on this interface?",
        Some(libc::EBUSY) => ": another AF_XDP socket holds this queue",
        _ => "",
    };
    Err(format!(
        "AF_XDP bind failed (queue {queue_id}, {what}{}): {e}{hint}",
        if wake { ", need_wakeup" } else { "" }
    ))
}

impl<M: PacketMemory> Port<M> for AfXdp {
    /// The socket: readable as soon as one frame is on the RX ring.
    fn wait_fd(&self) -> RawFd {
        self.fd()
    }
    fn wakes_per_frame(&self) -> bool {
        true
    }
    fn rx_burst(&mut self, mem: &mut M, v: &mut Vector) -> usize {
        let before = v.len;
        let room = (VECTOR_SIZE - v.len.min(VECTOR_SIZE)) as u32;
        let n = self.rx.ready(room);
        if n == 0 {
            if self.need_wakeup && self.fill.needs_wakeup() {
                sys::kick_rx(self.fd.as_raw_fd());
            }
            return 0;
        }
        match self.shared_arena(mem) {
            Ok(Some(arena)) => {
                self.rx_shared(arena, v, n);
                return v.len - before;
            }
            Ok(None) => {}
            Err(()) => {
                // The frames are in an arena this call cannot reach: lost until restart.
                self.stats.rx_dropped_no_buffer += u64::from(n);
                self.rx.release(n);
                return 0;
            }
        }
        let Umem::Own {
            umem, fill_pending, ..
        } = &mut self.umem
        else {
            return 0;
        };
        for i in 0..n {
            let d = self.rx.read(i);
            fill_pending.push(chunk(d.addr));
            let len = d.len as usize;
            let start = d.addr as usize;
            if self.gather.is_some() || d.options & XDP_PKT_CONTD != 0 {
                // A piece of a multi-buffer frame, gathered into a big buffer.
                let mut g = self.gather.take().unwrap_or_else(|| Gather::start(mem));
                let copied = g
                    .next(len)
                    .and_then(|(big, at)| umem.read_into(start, mem.frame_mut(big).get_mut(at)?));
                match copied {
                    Some(()) => g.len += len,
                    None => g.bad = true,
                }
                if d.options & XDP_PKT_CONTD != 0 {
                    self.gather = Some(g);
                } else {
                    Self::finish_gather((&mut self.stats, self.port_id), mem, v, g);
                }
                continue;
            }
            if len > FRAME_SIZE - HEADROOM {
                self.stats.rx_dropped_too_big += 1;
                continue;
            }
            let Some(buf) = mem.alloc() else {
                self.stats.rx_dropped_no_buffer += 1;
                continue;
            };
            // The frame is ours until it goes back on the fill ring (`refill`, below).
            let copied = mem
                .frame_mut(buf)
                .get_mut(HEADROOM..HEADROOM + len)
                .and_then(|dst| umem.read_into(start, dst));
            if copied.is_none() {
                mem.free(buf);
                self.stats.rx_dropped_too_big += 1;
                continue;
            }
            Self::deliver((&mut self.stats, self.port_id), v, buf, HEADROOM, len);
        }
        self.rx.release(n);
        self.refill();
        v.len - before
    }

    fn tx_burst(&mut self, mem: &mut M, pkts: &[Pkt]) -> usize {
        match self.shared_arena(mem) {
            Ok(Some(arena)) => return self.tx_shared(arena, pkts),
            Ok(None) => {}
            Err(()) => {
                self.stats.tx_errors += pkts.len() as u64;
                for p in pkts {
                    mem.free(p.buf);
                }
                return 0;
            }
        }
        self.reap_completions();
        let Umem::Own { umem, tx_free, .. } = &mut self.umem else {
            return 0;
        };
        let mut room = self.tx.free(self.tx.size()).min(tx_free.len() as u32);
        let mut queued = 0u32;
        let mut sent = 0u64;
        let mut k = 0;
        while let Some(p) = pkts.get(k) {
            let (off, len) = (p.off as usize, p.len as usize);
            // A frame up to a chunk goes as one descriptor; a jumbo frame as pieces.
            let (piece, pieces) = if len <= FRAME_SIZE {
                (FRAME_SIZE, 1)
            } else {
                (TX_PIECE, len.div_ceil(TX_PIECE))
            };
            if pieces as u32 > room {
                break;
            }
            k += 1;
            let src = mem.frame(p.buf).get(off..off + len);
            let Some(src) = src.filter(|_| pieces == 1 || self.sg) else {
                self.stats.tx_errors += 1;
                continue;
            };
            for (j, bytes) in src.chunks(piece).enumerate() {
                // Free chunks (room counted them): the kernel has none of them until they
                // are on the TX ring.
                let Some(addr) = tx_free.pop() else { break };
                let at = if pieces == 1 { 0 } else { HEADROOM };
                // In range by construction (a chunk holds a piece after `at`).
                let _ = umem.write_from(addr as usize + at, bytes);
                self.tx.write(
                    queued,
                    libc::xdp_desc {
                        addr: addr + at as u64,
                        len: bytes.len() as u32,
                        options: if j + 1 < pieces { XDP_PKT_CONTD } else { 0 },
                    },
                );
                queued += 1;
                room -= 1;
            }
            sent += 1;
            self.stats.tx_bytes += len as u64;
        }
        // Ring (or UMEM) full: the rest is dropped, as a NIC queue would.
        self.stats.tx_errors += (pkts.len() - k) as u64;
        self.stats.tx_packets += sent;
        if queued > 0 {
            self.tx.submit(queued);
        }
        self.flush_tx();
        for p in pkts {
            mem.free(p.buf);
        }
        sent as usize
    }
}
