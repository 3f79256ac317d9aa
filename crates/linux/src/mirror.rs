//! The two NETLINK_ROUTE sockets: one subscribed to notifications, one for requests.
//!
//! Dumps and requests go over their own socket so that their replies never interleave with
//! notifications, and a slow dump never makes the notification queue overflow sooner.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP,
    NLM_F_DUMP_INTR, NLM_F_REQUEST,
};
use netlink_packet_route::address::AddressMessage;
use netlink_packet_route::link::LinkMessage;
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::RouteMessage;
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use crate::error::Error;
use crate::fastroute::{route_message, Fast};
use crate::parse::{decode, event, split};
use crate::types::{Event, Snapshot};

/// Groups the fast path mirrors.
const GROUPS: [(u32, &str); 6] = [
    (libc::RTNLGRP_LINK, "RTNLGRP_LINK"),
    (libc::RTNLGRP_IPV4_IFADDR, "RTNLGRP_IPV4_IFADDR"),
    (libc::RTNLGRP_IPV6_IFADDR, "RTNLGRP_IPV6_IFADDR"),
    (libc::RTNLGRP_NEIGH, "RTNLGRP_NEIGH"),
    (libc::RTNLGRP_IPV4_ROUTE, "RTNLGRP_IPV4_ROUTE"),
    (libc::RTNLGRP_IPV6_ROUTE, "RTNLGRP_IPV6_ROUTE"),
];

/// How many times a dump interrupted by concurrent changes is retried before giving up.
const DUMP_ATTEMPTS: u32 = 8;

/// How long a request waits for the kernel's answer. The kernel answers at once; this only
/// guards against a wedged socket blocking the control thread forever.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Most datagrams one `poll_events` call reads, so that a storm of updates cannot keep the
/// control thread from acting on what it already has.
const DRAIN_BUDGET: usize = 8192;

/// Initial receive buffer; grown when the kernel sends a bigger datagram.
const RECV_BUF: usize = 64 * 1024;

/// A live mirror of the kernel's links, addresses, neighbours and routes, in the network
/// namespace of the thread that opened it.
///
/// Typical use: [`Mirror::open`], then [`Mirror::dump`] for the initial state, then
/// [`Mirror::poll_events`] forever; on [`Event::Overflow`], dump again. Because the
/// subscription precedes the dump, events read after a dump may repeat what the dump already
/// showed; `New*` events are upserts and `Del*` removals, so applying them again is harmless.
pub struct Mirror {
    events: Socket,
    requests: Requests,
    /// Receive buffer of the notification socket.
    buf: Vec<u8>,
    skipped: u64,
    overflows: u64,
}

/// A connected NETLINK_ROUTE socket for requests (dumps, and ACKed changes), with its
/// sequence numbers and receive buffer. [`Mirror`] and [`crate::Netlink`] each own one.
pub(crate) struct Requests {
    sock: Socket,
    seq: u32,
    /// Receive buffer; grown when the kernel sends a bigger datagram.
    pub(crate) buf: Vec<u8>,
}

impl Mirror {
    /// Opens the notification socket (subscribed to links, IPv4/IPv6 addresses, neighbours
    /// and IPv4/IPv6 routes) with a receive buffer of `rcvbuf_bytes`, and the request socket.
    ///
    /// The buffer is set with `SO_RCVBUFFORCE` (needs CAP_NET_ADMIN), falling back to
    /// `SO_RCVBUF`, which the kernel caps at `net.core.rmem_max`. Size it for the largest
    /// burst of changes expected between two reads (a full BGP table is hundreds of MiB of
    /// notifications; 32 MiB covers ordinary churn); anything beyond is reported as
    /// [`Event::Overflow`].
    pub fn open(rcvbuf_bytes: usize) -> Result<Mirror, Error> {
        let mut events = Socket::new(NETLINK_ROUTE).map_err(Error::Open)?;
        events.bind_auto().map_err(Error::Open)?;
        set_rcvbuf(events.as_raw_fd(), rcvbuf_bytes)?;
        for (group, name) in GROUPS {
            events
                .add_membership(group)
                .map_err(|source| Error::Subscribe {
                    group: name,
                    source,
                })?;
        }

        Ok(Mirror {
            events,
            requests: Requests::open()?,
            buf: vec![0; RECV_BUF],
            skipped: 0,
            overflows: 0,
        })
    }

    /// Reads the kernel's whole state: links, IPv4 and IPv6 addresses, neighbours, and routes
    /// of every table (filter [`crate::RT_TABLE_MAIN`] yourself).
    ///
    /// Each part is one dump; a dump the kernel marks inconsistent (`NLM_F_DUMP_INTR`,
    /// because the table changed while it was being read) is read to its end and redone, up
    /// to 8 times before [`Error::DumpInterrupted`].
    pub fn dump(&mut self) -> Result<Snapshot, Error> {
        let mut snap = Snapshot::default();
        let mut events = Vec::new();

        self.dump_retrying(
            "RTM_GETLINK dump",
            None,
            || RouteNetlinkMessage::GetLink(LinkMessage::default()),
            &mut events,
        )?;
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            self.dump_retrying(
                "RTM_GETADDR dump",
                Some(family == AddressFamily::Inet),
                || {
                    let mut m = AddressMessage::default();
                    m.header.family = family;
                    RouteNetlinkMessage::GetAddress(m)
                },
                &mut events,
            )?;
            self.dump_retrying(
                "RTM_GETNEIGH dump",
                Some(family == AddressFamily::Inet),
                || {
                    let mut m = NeighbourMessage::default();
                    m.header.family = family;
                    RouteNetlinkMessage::GetNeighbour(m)
                },
                &mut events,
            )?;
            self.dump_retrying(
                "RTM_GETROUTE dump",
                Some(family == AddressFamily::Inet),
                || {
                    let mut m = RouteMessage::default();
                    m.header.address_family = family;
                    RouteNetlinkMessage::GetRoute(m)
                },
                &mut events,
            )?;
        }

        for e in events {
            match e {
                Event::NewLink(l) => snap.links.push(l),
                Event::NewAddr(a) => snap.addrs.push(a),
                Event::NewNeigh(n) => snap.neighs.push(n),
                Event::NewRoute(r) => snap.routes.push(r),
                _ => self.skipped += 1,
            }
        }
        Ok(snap)
    }

    /// Waits up to `timeout` for notifications, then reads every pending one without
    /// blocking and appends its events to `out`. Returns how many events were appended.
    ///
    /// A zero `timeout` only drains. When the kernel had to drop notifications because the
    /// receive buffer was full (ENOBUFS), [`Event::Overflow`] is appended at that point and
    /// reading continues: the mirror is stale and the caller should [`Mirror::dump`]. One
    /// call reads at most 8192 datagrams; if more are pending, [`Mirror::raw_fd`] stays
    /// readable and the next call continues. Messages the mirror does not report are counted
    /// in [`Mirror::skipped`].
    pub fn poll_events(&mut self, out: &mut Vec<Event>, timeout: Duration) -> Result<usize, Error> {
        let before = out.len();
        if !timeout.is_zero() {
            wait_readable(self.events.as_raw_fd(), timeout)?;
        }
        for _ in 0..DRAIN_BUDGET {
            let n = match recv(&self.events, &mut self.buf, libc::MSG_DONTWAIT) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    self.overflows += 1;
                    if out.last() != Some(&Event::Overflow) {
                        out.push(Event::Overflow);
                    }
                    continue;
                }
                Err(source) => {
                    return Err(Error::Recv {
                        what: "notifications",
                        source,
                    })
                }
            };
            let Some(datagram) = self.buf.get(..n) else {
                // Truncated: the rest of that datagram is lost, like an overflow.
                self.skipped += 1;
                self.buf.resize(n.next_power_of_two(), 0);
                self.overflows += 1;
                out.push(Event::Overflow);
                continue;
            };
            self.skipped += crate::parse::parse_messages(datagram, out) as u64;
        }
        Ok(out.len() - before)
    }

    /// Asks the kernel to resolve `ip` on interface `ifindex` (ARP or neighbour
    /// solicitation), for packets whose next hop has no MAC yet.
    ///
    /// Sends what `ip neigh replace IP dev DEV use` sends: RTM_NEWNEIGH with `NTF_USE`, which
    /// the kernel handles by creating the entry if needed and calling `neigh_event_send` on
    /// it, exactly as if a packet were waiting. The answer arrives as an
    /// [`Event::NewNeigh`] (usable once the peer replied). Calling it again while the entry
    /// is INCOMPLETE does not multiply probes; on a FAILED entry it restarts resolution.
    ///
    /// IPv6 solicitations are sent from the interface's link-local address; while that is
    /// still tentative (duplicate address detection, a second or two after the link comes
    /// up) the kernel holds the first probe back and retries after `retrans_time`.
    pub fn resolve(&mut self, ifindex: u32, ip: IpAddr) -> Result<(), Error> {
        let mut m = NeighbourMessage::default();
        m.header.ifindex = ifindex;
        m.header.state = NeighbourState::None;
        m.header.flags = NeighbourFlags::Use;
        let (family, dst) = match ip {
            IpAddr::V4(v4) => (AddressFamily::Inet, NeighbourAddress::Inet(v4)),
            IpAddr::V6(v6) => (AddressFamily::Inet6, NeighbourAddress::Inet6(v6)),
        };
        m.header.family = family;
        m.attributes.push(NeighbourAttribute::Destination(dst));
        self.requests.request_ack(
            "RTM_NEWNEIGH NTF_USE",
            RouteNetlinkMessage::NewNeighbour(m),
            NLM_F_REQUEST | NLM_F_CREATE | NLM_F_ACK,
        )
    }

    /// The notification socket, for the caller's own poll loop: readable means
    /// [`Mirror::poll_events`] has something to read.
    pub fn raw_fd(&self) -> RawFd {
        self.events.as_raw_fd()
    }

    /// Messages read but not reported: unsupported types or families, and malformed ones.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Times the kernel reported dropped notifications (each reported as [`Event::Overflow`]).
    pub fn overflows(&self) -> u64 {
        self.overflows
    }

    fn dump_retrying(
        &mut self,
        what: &'static str,
        // Some(true): keep only IPv4 objects; Some(false): only IPv6.
        family: Option<bool>,
        request: impl Fn() -> RouteNetlinkMessage,
        out: &mut Vec<Event>,
    ) -> Result<(), Error> {
        for _ in 0..DUMP_ATTEMPTS {
            let mark = out.len();
            if self.dump_once(what, request(), out)? {
                // A kernel without IPv6 answers an AF_INET6 dump with its catch-all
                // handler, i.e. with every family's objects again: keep only our family.
                if let Some(v4) = family {
                    let mut part = out.split_off(mark);
                    let got = part.len();
                    part.retain(|e| is_ipv4(e) != Some(!v4));
                    self.skipped += (got - part.len()) as u64;
                    out.append(&mut part);
                }
                return Ok(());
            }
            out.truncate(mark);
        }
        Err(Error::DumpInterrupted {
            what,
            attempts: DUMP_ATTEMPTS,
        })
    }

    /// One dump, read to its `NLMSG_DONE`. Returns whether it is consistent; an inconsistent
    /// one (interrupted, or with a datagram too big for our buffer) must be redone.
    fn dump_once(
        &mut self,
        what: &'static str,
        msg: RouteNetlinkMessage,
        out: &mut Vec<Event>,
    ) -> Result<bool, Error> {
        let seq = self.requests.send(what, msg, NLM_F_REQUEST | NLM_F_DUMP)?;
        let mut consistent = true;
        loop {
            let Some(n) = self.requests.recv_reply(what)? else {
                consistent = false;
                continue;
            };
            let mut done = None;
            let mut error = 0;
            let mut skipped = 0;
            split(&self.requests.buf[..n], |h, m| {
                if h.seq != seq {
                    return;
                }
                if h.flags & NLM_F_DUMP_INTR != 0 {
                    consistent = false;
                }
                match route_message(m) {
                    Fast::Event(e) => {
                        out.push(e);
                        return;
                    }
                    Fast::Skip => {
                        skipped += 1;
                        return;
                    }
                    Fast::Generic => {}
                }
                match decode(m) {
                    Ok(NetlinkPayload::InnerMessage(m)) => match event(m) {
                        Some(e) => out.push(e),
                        None => skipped += 1,
                    },
                    Ok(NetlinkPayload::Done(d)) => done = Some(d.code),
                    Ok(NetlinkPayload::Error(e)) => error = e.raw_code(),
                    Ok(_) => {}
                    Err(()) => skipped += 1,
                }
            });
            self.skipped += skipped;
            if error != 0 {
                return Err(Error::Kernel {
                    what,
                    source: io::Error::from_raw_os_error(-error),
                });
            }
            match done {
                None => continue,
                Some(0) => return Ok(consistent),
                Some(code) if code == -libc::EINTR => return Ok(false),
                Some(code) => {
                    return Err(Error::Kernel {
                        what,
                        source: io::Error::from_raw_os_error(-code),
                    })
                }
            }
        }
    }
}

/// Whether an event is about IPv4 (`Some(true)`) or IPv6 (`Some(false)`) state.
impl Requests {
    /// Opens and connects the socket, with [`REQUEST_TIMEOUT`] on its replies.
    pub(crate) fn open() -> Result<Requests, Error> {
        let mut sock = Socket::new(NETLINK_ROUTE).map_err(Error::Open)?;
        sock.bind_auto().map_err(Error::Open)?;
        sock.connect(&SocketAddr::new(0, 0)).map_err(Error::Open)?;
        set_rcvtimeo(sock.as_raw_fd(), REQUEST_TIMEOUT)?;
        Ok(Requests {
            sock,
            seq: 0,
            buf: vec![0; RECV_BUF],
        })
    }

    pub(crate) fn send(
        &mut self,
        what: &'static str,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<u32, Error> {
        self.discard_stale_replies(what)?;
        self.seq = self.seq.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = flags;
        header.sequence_number = self.seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        packet.finalize();
        let mut bytes = vec![0; packet.buffer_len()];
        packet.serialize(&mut bytes);
        loop {
            match self.sock.send(&bytes, 0) {
                Ok(_) => return Ok(self.seq),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => return Err(Error::Send { what, source }),
            }
        }
    }

    /// Reads and drops whatever an earlier, abandoned request left on the request socket
    /// (reading also lets an unfinished kernel dump run to its end, which a new dump on the
    /// same socket would otherwise find busy).
    fn discard_stale_replies(&mut self, what: &'static str) -> Result<(), Error> {
        loop {
            match recv(&self.sock, &mut self.buf, libc::MSG_DONTWAIT) {
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => return Err(Error::Recv { what, source }),
            }
        }
    }

    /// Blocking read of one reply datagram to the current request. Returns its length, or
    /// `None` if it did not fit the buffer (which has been grown for the next time).
    pub(crate) fn recv_reply(&mut self, what: &'static str) -> Result<Option<usize>, Error> {
        loop {
            match recv(&self.sock, &mut self.buf, 0) {
                Ok(n) if n > self.buf.len() => {
                    self.buf.resize(n.next_power_of_two(), 0);
                    return Ok(None);
                }
                Ok(n) => return Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Err(Error::Timeout {
                        what,
                        timeout: REQUEST_TIMEOUT,
                    })
                }
                Err(source) => return Err(Error::Recv { what, source }),
            }
        }
    }

    pub(crate) fn request_ack(
        &mut self,
        what: &'static str,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<(), Error> {
        let seq = self.send(what, msg, flags)?;
        loop {
            let Some(n) = self.recv_reply(what)? else {
                continue;
            };
            let mut answer = None;
            split(&self.buf[..n], |h, m| {
                if h.seq != seq {
                    return;
                }
                if let Ok(NetlinkPayload::Error(e)) = decode(m) {
                    answer = Some(e.raw_code());
                }
            });
            match answer {
                Some(0) => return Ok(()),
                Some(code) => {
                    return Err(Error::Kernel {
                        what,
                        source: io::Error::from_raw_os_error(-code),
                    })
                }
                None => continue,
            }
        }
    }
}

fn is_ipv4(e: &Event) -> Option<bool> {
    match e {
        Event::NewAddr(a) | Event::DelAddr(a) => Some(a.addr.is_ipv4()),
        Event::NewNeigh(n) | Event::DelNeigh(n) => Some(n.ip.is_ipv4()),
        Event::NewRoute(r) | Event::DelRoute(r) => Some(r.dst.is_ipv4()),
        _ => None,
    }
}

/// `recv` with `MSG_TRUNC`: the returned length is the datagram's, even when larger than
/// `buf` (whose excess is then lost).
fn recv(sock: &Socket, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    sock.recv(&mut &mut buf[..], flags | libc::MSG_TRUNC)
}

fn setsockopt<T>(fd: RawFd, level: libc::c_int, option: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to a live, initialised `T` for the duration of the call and we
    // pass its exact size; the kernel only reads from it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            option,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn set_rcvbuf(fd: RawFd, bytes: usize) -> Result<(), Error> {
    let size = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    if setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &size).is_ok() {
        return Ok(());
    }
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &size)
        .map_err(|source| Error::RcvBuf { bytes, source })
}

fn set_rcvtimeo(fd: RawFd, timeout: Duration) -> Result<(), Error> {
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: libc::suseconds_t::from(timeout.subsec_micros() as i32),
    };
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv).map_err(|source| Error::SockOpt {
        option: "SO_RCVTIMEO",
        source,
    })
}

/// Waits until `fd` is readable or `timeout` passes. A signal ends the wait early, which is
/// harmless: the caller drains non-blockingly either way.
fn wait_readable(fd: RawFd, timeout: Duration) -> Result<(), Error> {
    // Round up so that a sub-millisecond timeout still waits rather than spins.
    let ms = timeout.as_nanos().div_ceil(1_000_000);
    let ms = libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX);
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `pfd` is one valid pollfd and we pass a count of 1.
    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(Error::Poll(e));
        }
    }
    Ok(())
}
