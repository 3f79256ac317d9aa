//! The control path of a memif port: accepting or connecting, the lock-step handshake
//! in both roles, validation of everything the peer announces, and teardown.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::proto::{self, c_string, from_c_string, DecodeError, Msg};
use super::shm::{Desc, Region};
use super::sys;
use super::{
    client_layout, ClientPlan, Conn, End, Memif, MemifRole, Phase, RingSpec, Session, APP_NAME,
    MAX_MSGS_PER_POLL, MAX_REGIONS, MAX_REGION_SIZE, RETRY_INTERVAL,
};

impl Memif {
    pub(super) fn try_connect(&mut self, now: Instant) {
        self.next_attempt = now + RETRY_INTERVAL;
        let sock = match sys::seqpacket_socket() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(name = %self.opts.name, "memif socket(): {e}");
                return;
            }
        };
        match sys::connect(sock.as_raw_fd(), &self.addr) {
            Ok(()) => {
                tracing::debug!(name = %self.opts.name, "memif control socket connected");
                self.session = Some(Session::new(sock, Phase::AwaitHello));
            }
            Err(e) => {
                // No server yet (ENOENT, ECONNREFUSED) or its backlog is full (EAGAIN):
                // try again later.
                tracing::trace!(name = %self.opts.name, "memif connect: {e}");
            }
        }
    }

    /// Whether a peer-triggered warning may be logged now (at most one per second; the
    /// counters keep the full count).
    fn may_warn(&mut self) -> bool {
        let now = Instant::now();
        if self
            .warned_at
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            return false;
        }
        self.warned_at = Some(now);
        true
    }

    pub(super) fn accept_pending(&mut self) {
        let Some(l) = &self.listener else { return };
        let lfd = l.as_raw_fd();
        // Bounded: a burst of connecting peers is handled over several polls.
        for _ in 0..8 {
            match sys::accept(lfd) {
                Ok(Some(sock)) => {
                    if self.session.is_some() {
                        self.stats.control_errors += 1;
                        if self.may_warn() {
                            tracing::warn!(
                                name = %self.opts.name,
                                "memif: refusing a second client, interface already in use"
                            );
                        }
                        let m = Msg::disconnect("Interface already connected").encode();
                        let _ = sys::send_msg(sock.as_raw_fd(), &m, None);
                        continue;
                    }
                    let hello = Msg::Hello {
                        name: c_string(APP_NAME),
                        min_version: proto::VERSION,
                        max_version: proto::VERSION,
                        max_region: (MAX_REGIONS - 1) as u16,
                        max_s2c_ring: 0,
                        max_c2s_ring: 0,
                        max_log2_ring_size: self.opts.ring_size_log2,
                    };
                    if let Err(e) = sys::send_msg(sock.as_raw_fd(), &hello.encode(), None) {
                        self.stats.control_errors += 1;
                        tracing::warn!(name = %self.opts.name, "memif: sending HELLO failed: {e}");
                        continue;
                    }
                    self.session = Some(Session::new(sock, Phase::AwaitInit));
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(name = %self.opts.name, "memif accept: {e}");
                    break;
                }
            }
        }
    }

    /// Read and handle whatever the peer sent.
    pub(super) fn service_session(&mut self) {
        for _ in 0..MAX_MSGS_PER_POLL {
            let Some(s) = &self.session else { return };
            let r = sys::recv_msg(s.sock.as_raw_fd());
            let end = match r {
                Ok(sys::Recv::WouldBlock) => return,
                Ok(sys::Recv::Eof) => End {
                    reason: "peer closed the control socket".into(),
                    notify: false,
                    error: s.phase != Phase::Connected,
                },
                Err(e) => End {
                    reason: format!("control socket error: {e}").into(),
                    notify: false,
                    error: true,
                },
                Ok(sys::Recv::Msg {
                    buf,
                    len,
                    truncated,
                    fds,
                    fds_truncated,
                }) => {
                    let len = if truncated { usize::MAX } else { len };
                    if fds_truncated {
                        End::error("too many descriptors with one message")
                    } else {
                        match Msg::decode(&buf, len) {
                            Err(DecodeError::Size) => End::error("Invalid message size"),
                            Err(DecodeError::UnknownType(_)) => End::error("Unknown message type"),
                            Ok(msg) => match self.handle(msg, fds) {
                                Ok(()) => continue,
                                Err(end) => end,
                            },
                        }
                    }
                }
            };
            self.end_session(end);
            return;
        }
    }

    pub(super) fn send(&mut self, msg: &Msg, fd: Option<RawFd>) -> Result<(), End> {
        let Some(s) = &self.session else {
            return Ok(());
        };
        sys::send_msg(s.sock.as_raw_fd(), &msg.encode(), fd).map_err(|e| End {
            reason: format!("sending a control message failed: {e}").into(),
            notify: false,
            error: true,
        })
    }

    pub(super) fn handle(&mut self, msg: Msg, mut fds: Vec<OwnedFd>) -> Result<(), End> {
        if let Msg::Disconnect { reason, .. } = &msg {
            return Err(End {
                reason: format!("peer disconnected: {}", from_c_string(reason)).into(),
                notify: false,
                error: false,
            });
        }
        let phase = match &self.session {
            Some(s) => s.phase,
            None => return Ok(()),
        };
        let fd = if fds.is_empty() {
            None
        } else {
            Some(fds.swap_remove(0))
        };
        match (self.opts.role, phase, msg) {
            (
                MemifRole::Server,
                Phase::AwaitInit,
                Msg::Init {
                    version,
                    id,
                    mode,
                    secret,
                    name,
                },
            ) => self.on_init(version, id, mode, &secret, &name),
            (MemifRole::Server, Phase::Setup, Msg::AddRegion { index, size }) => {
                self.on_add_region(index, size, fd)
            }
            (
                MemifRole::Server,
                Phase::Setup,
                Msg::AddRing {
                    flags,
                    index,
                    region,
                    offset,
                    log2_ring_size,
                    private_hdr_size,
                },
            ) => self.on_add_ring(
                flags,
                index,
                region,
                offset,
                log2_ring_size,
                private_hdr_size,
                fd,
            ),
            (MemifRole::Server, Phase::Setup, Msg::Connect { if_name }) => {
                self.on_connect(&if_name)
            }
            (
                MemifRole::Client,
                Phase::AwaitHello,
                Msg::Hello {
                    name,
                    min_version,
                    max_version,
                    max_log2_ring_size,
                    ..
                },
            ) => self.on_hello(&name, min_version, max_version, max_log2_ring_size),
            (MemifRole::Client, Phase::AwaitAck, Msg::Ack) => self.send_next(),
            (MemifRole::Client, Phase::AwaitConnected, Msg::Connected { if_name }) => {
                self.on_connected(&if_name)
            }
            _ => Err(End::error("Unexpected message")),
        }
    }

    pub(super) fn session_mut(&mut self) -> Result<&mut Session, End> {
        self.session
            .as_mut()
            .ok_or_else(|| End::error("no control session"))
    }

    pub(super) fn on_init(
        &mut self,
        version: u16,
        id: u32,
        mode: u8,
        secret: &[u8; proto::SECRET_SIZE],
        name: &[u8; proto::NAME_SIZE],
    ) -> Result<(), End> {
        if version != proto::VERSION {
            return Err(End::error("Incompatible memif version"));
        }
        if id != self.opts.id {
            return Err(End::error("ID not found"));
        }
        if mode != proto::MODE_ETHERNET {
            return Err(End::error("Only ethernet mode supported"));
        }
        if let Some(ours) = &self.opts.secret {
            let theirs = from_c_string(secret);
            if theirs.is_empty() {
                return Err(End::error("Secret required"));
            }
            if theirs.as_bytes() != ours.as_bytes() {
                return Err(End::error("Incorrect secret"));
            }
        }
        self.peer_name = from_c_string(name);
        self.session_mut()?.phase = Phase::Setup;
        self.send(&Msg::Ack, None)
    }

    pub(super) fn on_add_region(
        &mut self,
        index: u16,
        size: u64,
        fd: Option<OwnedFd>,
    ) -> Result<(), End> {
        let fd = fd.ok_or_else(|| End::error("Missing region fd"))?;
        let s = self.session_mut()?;
        if usize::from(index) != s.regions.len() || usize::from(index) >= MAX_REGIONS {
            return Err(End::error("Invalid region index"));
        }
        if size == 0 || size > MAX_REGION_SIZE {
            return Err(End::error("Invalid region size"));
        }
        sys::check_region_fd(fd.as_raw_fd(), size).map_err(End::error)?;
        let map = sys::Mapping::shared(fd.as_raw_fd(), size as usize)
            .map_err(|e| End::error(format!("Failed to map region: {e}")))?;
        // The mapping keeps the memory; the descriptor is not needed any more.
        s.regions.push(Region::new(map, None));
        self.send(&Msg::Ack, None)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_add_ring(
        &mut self,
        flags: u16,
        index: u16,
        region: u16,
        offset: u32,
        log2: u8,
        private_hdr_size: u16,
        fd: Option<OwnedFd>,
    ) -> Result<(), End> {
        let fd = fd.ok_or_else(|| End::error("Missing interrupt fd"))?;
        let max_log2 = self.opts.ring_size_log2;
        let s = self.session_mut()?;
        if index != 0 {
            return Err(End::error("Invalid ring index"));
        }
        let dir = if flags & proto::ADD_RING_FLAG_C2S != 0 {
            0
        } else {
            1
        };
        if s.rings[dir].is_some() {
            return Err(End::error("Duplicate ring"));
        }
        if log2 > max_log2 {
            return Err(End::error("Ring size too big"));
        }
        if private_hdr_size != 0 {
            return Err(End::error("Private ring headers not supported"));
        }
        let Some(r) = s.regions.get(usize::from(region)) else {
            return Err(End::error("Invalid region index in ring"));
        };
        if r.ring(offset, log2).is_none() {
            return Err(End::error("Ring does not fit its region"));
        }
        s.rings[dir] = Some((
            RingSpec {
                region,
                offset,
                log2,
            },
            fd,
        ));
        self.send(&Msg::Ack, None)
    }

    pub(super) fn on_connect(&mut self, if_name: &[u8; proto::NAME_SIZE]) -> Result<(), End> {
        let s = self.session_mut()?;
        let (Some((c2s, _)), Some((s2c, _))) = (&s.rings[0], &s.rings[1]) else {
            return Err(End::error("Missing rings"));
        };
        let (c2s, s2c) = (*c2s, *s2c);
        let ring = |spec: RingSpec, regions: &[Region]| {
            regions
                .get(usize::from(spec.region))
                .and_then(|r| r.ring(spec.offset, spec.log2))
        };
        let (Some(rx), Some(tx)) = (ring(c2s, &s.regions), ring(s2c, &s.regions)) else {
            return Err(End::error("Wrong ring"));
        };
        if rx.cookie() != proto::COOKIE || tx.cookie() != proto::COOKIE {
            return Err(End::error("Wrong ring cookie"));
        }
        for r in [&rx, &tx] {
            r.head().store(0, Ordering::Relaxed);
            r.tail().store(0, Ordering::Relaxed);
        }
        // We poll the ring we receive on: no interrupts please.
        rx.flags()
            .store(proto::RING_FLAG_MASK_INT, Ordering::Release);
        let regions = std::mem::take(&mut s.regions);
        let (Some((_, e0)), Some((_, e1))) = (s.rings[0].take(), s.rings[1].take()) else {
            return Err(End::error("Missing rings"));
        };
        s.phase = Phase::Connected;
        self.conn = Some(Conn {
            rx,
            tx,
            rx_next: 0,
            rx_head: 0,
            tx_next: 0,
            bsize: 0,
            rx_bufs: 0,
            tx_bufs: 0,
            regions,
            _efds: [e0, e1],
        });
        self.peer_if_name = from_c_string(if_name);
        self.send(
            &Msg::Connected {
                if_name: c_string(&self.opts.name),
            },
            None,
        )?;
        self.on_up();
        Ok(())
    }

    pub(super) fn on_hello(
        &mut self,
        name: &[u8; proto::NAME_SIZE],
        min_version: u16,
        max_version: u16,
        max_log2: u8,
    ) -> Result<(), End> {
        if min_version > proto::VERSION || max_version < proto::VERSION {
            return Err(End::error("Incompatible memif version"));
        }
        self.peer_name = from_c_string(name);
        let log2 = self.opts.ring_size_log2.min(max_log2);
        let bsize = self.opts.buffer_size;
        let plan = prepare_client_memory(log2, bsize)
            .map_err(|e| End::error(format!("Failed to allocate shared memory: {e}")))?;
        let region_fd = plan.region.fd().map(|f| f.as_raw_fd());
        let size = plan.region.len();
        let e = [plan.efds[0].as_raw_fd(), plan.efds[1].as_raw_fd()];
        let mut secret = [0u8; proto::SECRET_SIZE];
        if let Some(sec) = &self.opts.secret {
            secret = c_string(sec);
        }
        let mut out = VecDeque::with_capacity(5);
        out.push_back((
            Msg::Init {
                version: proto::VERSION,
                id: self.opts.id,
                mode: proto::MODE_ETHERNET,
                secret,
                name: c_string(APP_NAME),
            },
            None,
        ));
        out.push_back((Msg::AddRegion { index: 0, size }, region_fd));
        for (flags, spec, efd) in [
            (proto::ADD_RING_FLAG_C2S, plan.c2s, e[0]),
            (0, plan.s2c, e[1]),
        ] {
            out.push_back((
                Msg::AddRing {
                    flags,
                    index: 0,
                    region: spec.region,
                    offset: spec.offset,
                    log2_ring_size: spec.log2,
                    private_hdr_size: 0,
                },
                Some(efd),
            ));
        }
        out.push_back((
            Msg::Connect {
                if_name: c_string(&self.opts.name),
            },
            None,
        ));
        let s = self.session_mut()?;
        s.plan = Some(plan);
        s.outbox = out;
        self.send_next()
    }

    /// Client: send the next setup message (after HELLO or an ACK).
    pub(super) fn send_next(&mut self) -> Result<(), End> {
        let s = self.session_mut()?;
        let Some((msg, fd)) = s.outbox.pop_front() else {
            return Err(End::error("Unexpected ACK"));
        };
        s.phase = if s.outbox.is_empty() {
            Phase::AwaitConnected
        } else {
            Phase::AwaitAck
        };
        self.send(&msg, fd)
    }

    pub(super) fn on_connected(&mut self, if_name: &[u8; proto::NAME_SIZE]) -> Result<(), End> {
        let s = self.session_mut()?;
        let plan = s
            .plan
            .take()
            .ok_or_else(|| End::error("no memory prepared"))?;
        let (Some(tx), Some(rx)) = (
            plan.region.ring(plan.c2s.offset, plan.c2s.log2),
            plan.region.ring(plan.s2c.offset, plan.s2c.log2),
        ) else {
            return Err(End::error("own rings do not fit"));
        };
        for r in [&rx, &tx] {
            r.head().store(0, Ordering::Relaxed);
            r.tail().store(0, Ordering::Relaxed);
        }
        rx.flags()
            .store(proto::RING_FLAG_MASK_INT, Ordering::Release);
        s.phase = Phase::Connected;
        let mut conn = Conn {
            rx,
            tx,
            rx_next: 0,
            rx_head: 0,
            tx_next: 0,
            bsize: plan.bsize,
            rx_bufs: plan.s2c_bufs,
            tx_bufs: plan.c2s_bufs,
            regions: vec![plan.region],
            _efds: plan.efds,
        };
        conn.refill();
        self.conn = Some(conn);
        self.peer_if_name = from_c_string(if_name);
        self.on_up();
        Ok(())
    }

    pub(super) fn on_up(&mut self) {
        self.stats.connects += 1;
        self.last_disconnect = None;
        tracing::info!(
            name = %self.opts.name, role = ?self.opts.role, id = self.opts.id,
            peer = %self.peer_name, peer_if = %self.peer_if_name,
            ring = self.ring_size().unwrap_or(0),
            "memif connected"
        );
    }

    /// Close the control channel (telling the peer why, if asked) and the data path.
    pub(super) fn end_session(&mut self, end: End) {
        if let Some(s) = self.session.take() {
            if end.notify {
                let m = Msg::disconnect(&end.reason).encode();
                let _ = sys::send_msg(s.sock.as_raw_fd(), &m, None);
            }
        }
        if end.error {
            self.stats.control_errors += 1;
        }
        let was_up = self.conn.take().is_some();
        if was_up {
            self.stats.disconnects += 1;
        }
        if end.error {
            if self.may_warn() {
                tracing::warn!(name = %self.opts.name, "memif disconnected: {}", end.reason);
            }
        } else {
            tracing::info!(name = %self.opts.name, "memif disconnected: {}", end.reason);
        }
        self.last_disconnect = Some(end.reason.into_owned());
        self.peer_name.clear();
        self.peer_if_name.clear();
        self.fault = None;
        self.next_attempt = Instant::now() + RETRY_INTERVAL;
    }
}

/// Create the client's region (rings and buffers), initialise the rings and make the
/// two eventfds.
pub(super) fn prepare_client_memory(log2: u8, bsize: u32) -> io::Result<ClientPlan> {
    let (c2s_off, s2c_off, c2s_bufs, s2c_bufs, total) = client_layout(log2, bsize)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "region too large"))?;
    let fd = sys::memfd("memif_region_0", total)?;
    let map = sys::Mapping::shared(fd.as_raw_fd(), total as usize)?;
    let region = Region::new(map, Some(fd));
    let c2s = RingSpec {
        region: 0,
        offset: c2s_off,
        log2,
    };
    let s2c = RingSpec {
        region: 0,
        offset: s2c_off,
        log2,
    };
    for (spec, bufs) in [(c2s, c2s_bufs), (s2c, s2c_bufs)] {
        let ring = region
            .ring(spec.offset, spec.log2)
            .ok_or_else(|| io::Error::other("ring does not fit its region"))?;
        ring.set_cookie(proto::COOKIE);
        ring.flags().store(0, Ordering::Relaxed);
        ring.head().store(0, Ordering::Relaxed);
        ring.tail().store(0, Ordering::Relaxed);
        for i in 0..ring.size() {
            ring.set_desc(
                i,
                Desc {
                    flags: 0,
                    region: 0,
                    length: bsize,
                    offset: bufs + u32::from(i) * bsize,
                },
            );
        }
    }
    let efds = [sys::eventfd()?, sys::eventfd()?];
    Ok(ClientPlan {
        region,
        c2s,
        s2c,
        c2s_bufs,
        s2c_bufs,
        bsize,
        efds,
    })
}

/// Make way for a server socket at `path`: nothing there is fine; a socket nobody listens
/// on is removed; a live socket or any other file is an error.
pub(super) fn clear_stale_socket(path: &Path, addr: &sys::UnixAddr) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket", path.display()),
        ));
    }
    let probe = sys::seqpacket_socket()?;
    match sys::connect(probe.as_raw_fd(), addr) {
        Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => std::fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Ok(()) | Err(_) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("another server is listening on {}", path.display()),
        )),
    }
}
