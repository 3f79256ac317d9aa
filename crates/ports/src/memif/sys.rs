//! The kernel interface of the memif port: the `SOCK_SEQPACKET` control socket (listen,
//! connect, accept, fixed-size messages with one passed file descriptor), memfd regions
//! and their shared mappings, and eventfds. Every system call of the memif port lives
//! here; the shared-memory accessors are in `shm`.

use std::ffi::OsStr;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::NonNull;

use libc::{c_int, c_void, socklen_t};

use crate::sys::cvt;

use super::proto::MSG_SIZE;

/// Most descriptors accepted with one control message; further ones are closed at once.
const MAX_FDS: usize = 4;

/// A socket address on the unix domain, filesystem or abstract namespace.
#[derive(Clone, Copy)]
pub(crate) struct UnixAddr {
    sun: libc::sockaddr_un,
    len: socklen_t,
}

impl UnixAddr {
    /// The address of `path`: a file, or with `abstract_ns` the same bytes in the abstract
    /// namespace (a leading NUL, no file). `EINVAL` if it does not fit `sun_path` or
    /// contains a NUL byte.
    pub(crate) fn new(path: &Path, abstract_ns: bool) -> io::Result<UnixAddr> {
        let b = OsStr::as_bytes(path.as_os_str());
        // SAFETY: sockaddr_un is plain integers; all-zero is a valid value.
        let mut sun: libc::sockaddr_un = unsafe { zeroed() };
        sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let skip = usize::from(abstract_ns);
        // Filesystem paths keep a terminating NUL inside sun_path.
        if b.is_empty() || b.contains(&0) || b.len() + skip >= sun.sun_path.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "memif socket path is empty, contains NUL or is longer than 107 bytes",
            ));
        }
        for (d, s) in sun.sun_path[skip..].iter_mut().zip(b) {
            *d = *s as libc::c_char;
        }
        let base = size_of::<libc::sa_family_t>();
        let len = if abstract_ns {
            base + 1 + b.len()
        } else {
            size_of::<libc::sockaddr_un>()
        };
        Ok(UnixAddr {
            sun,
            len: len as socklen_t,
        })
    }

    fn as_ptr(&self) -> *const libc::sockaddr {
        &self.sun as *const libc::sockaddr_un as *const libc::sockaddr
    }
}

/// A non-blocking, close-on-exec `AF_UNIX`/`SOCK_SEQPACKET` socket.
pub(crate) fn seqpacket_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain system call with constant arguments; the result is checked.
    let fd = cvt(unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Bind `fd` to `addr` and listen.
pub(crate) fn bind_listen(fd: RawFd, addr: &UnixAddr, backlog: c_int) -> io::Result<()> {
    // SAFETY: `addr` is a live sockaddr_un and `len` does not exceed its size.
    cvt(unsafe { libc::bind(fd, addr.as_ptr(), addr.len) })?;
    // SAFETY: plain system call on a socket we own.
    cvt(unsafe { libc::listen(fd, backlog) }).map(drop)
}

/// `connect(2)` a fresh socket to `addr`. Unix sockets complete at once or fail
/// (`ENOENT`, `ECONNREFUSED`, `EAGAIN` when the listener's backlog is full).
pub(crate) fn connect(fd: RawFd, addr: &UnixAddr) -> io::Result<()> {
    // SAFETY: `addr` is a live sockaddr_un and `len` does not exceed its size.
    cvt(unsafe { libc::connect(fd, addr.as_ptr(), addr.len) }).map(drop)
}

/// Accept one pending connection as a non-blocking, close-on-exec socket; `None` when
/// nobody is waiting.
pub(crate) fn accept(fd: RawFd) -> io::Result<Option<OwnedFd>> {
    // SAFETY: no peer address is requested (NULL pointers are allowed); result checked.
    let r = unsafe {
        libc::accept4(
            fd,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    match cvt(r) {
        // SAFETY: `c` was just returned by accept4() and is owned by nobody else.
        Ok(c) => Ok(Some(unsafe { OwnedFd::from_raw_fd(c) })),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        // The peer gave up before we accepted it: nothing to do.
        Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Send one control message, with `fd` attached as `SCM_RIGHTS` if given. Never blocks
/// and never raises `SIGPIPE`.
pub(crate) fn send_msg(sock: RawFd, msg: &[u8; MSG_SIZE], fd: Option<RawFd>) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut c_void,
        iov_len: MSG_SIZE,
    };
    // u64 keeps the control buffer aligned for cmsghdr.
    let mut ctl = [0u64; 4];
    // SAFETY: msghdr is plain integers and pointers; all-zero is a valid value.
    let mut mh: libc::msghdr = unsafe { zeroed() };
    mh.msg_iov = &mut iov;
    mh.msg_iovlen = 1;
    if let Some(fd) = fd {
        // SAFETY: CMSG_SPACE is a pure size computation.
        let space = unsafe { libc::CMSG_SPACE(size_of::<c_int>() as u32) } as usize;
        debug_assert!(space <= size_of::<[u64; 4]>());
        mh.msg_control = ctl.as_mut_ptr() as *mut c_void;
        mh.msg_controllen = space as _;
        // SAFETY: the control buffer is `space` bytes, aligned, and holds exactly one
        // cmsghdr with one int, so CMSG_FIRSTHDR is non-null and CMSG_DATA is in bounds.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&mh);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(size_of::<c_int>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut c_int, fd);
        }
    }
    // SAFETY: `mh` points at live buffers of the stated lengths for the whole call.
    let n = unsafe { libc::sendmsg(sock, &mh, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != MSG_SIZE {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "short write of a memif control message",
        ));
    }
    Ok(())
}

/// What one non-blocking receive on a control socket produced.
pub(crate) enum Recv {
    /// Nothing queued.
    WouldBlock,
    /// The peer closed the connection.
    Eof,
    /// A message: its bytes (`len` of them valid; `truncated` if it was longer than a
    /// memif message) and the descriptors that came with it (all owned, so dropping the
    /// message closes them).
    Msg {
        buf: [u8; MSG_SIZE],
        len: usize,
        truncated: bool,
        fds: Vec<OwnedFd>,
        /// Descriptors were lost because the control buffer was too small.
        fds_truncated: bool,
    },
}

/// Receive one control message without blocking.
pub(crate) fn recv_msg(sock: RawFd) -> io::Result<Recv> {
    let mut buf = [0u8; MSG_SIZE];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut c_void,
        iov_len: MSG_SIZE,
    };
    // Room for MAX_FDS descriptors plus credentials, u64-aligned.
    let mut ctl = [0u64; 16];
    // SAFETY: msghdr is plain integers and pointers; all-zero is a valid value.
    let mut mh: libc::msghdr = unsafe { zeroed() };
    mh.msg_iov = &mut iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl.as_mut_ptr() as *mut c_void;
    mh.msg_controllen = size_of::<[u64; 16]>() as _;
    // SAFETY: `mh` points at live, writable buffers of the stated lengths.
    let n = unsafe { libc::recvmsg(sock, &mut mh, libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock => Ok(Recv::WouldBlock),
            io::ErrorKind::Interrupted => Ok(Recv::WouldBlock),
            _ => Err(e),
        };
    }
    let mut fds = Vec::new();
    // SAFETY: walking the control messages the kernel wrote into `ctl`, with the length
    // it reported in `mh`; every SCM_RIGHTS payload is an array of ints, each a new
    // descriptor that we now own (taken over by OwnedFd exactly once).
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&mh);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c) as *const c_int;
                let hdr = libc::CMSG_LEN(0) as usize;
                let count = ((*c).cmsg_len as usize).saturating_sub(hdr) / size_of::<c_int>();
                for i in 0..count {
                    let fd = std::ptr::read_unaligned(data.add(i));
                    if fd >= 0 {
                        let owned = OwnedFd::from_raw_fd(fd);
                        if fds.len() < MAX_FDS {
                            fds.push(owned);
                        }
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&mh, c);
        }
    }
    if n == 0 && fds.is_empty() {
        return Ok(Recv::Eof);
    }
    Ok(Recv::Msg {
        buf,
        len: n as usize,
        truncated: mh.msg_flags & libc::MSG_TRUNC != 0,
        fds,
        fds_truncated: mh.msg_flags & libc::MSG_CTRUNC != 0,
    })
}

/// Identity of a file, to recognise our own socket file later.
pub(crate) fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// A sealed memfd of `size` bytes (cannot be shrunk by anyone, so a peer mapping it can
/// never fault on a truncated file).
pub(crate) fn memfd(name: &str, size: u64) -> io::Result<OwnedFd> {
    let mut cname = [0u8; 32];
    for (d, s) in cname
        .iter_mut()
        .zip(name.bytes().filter(|&b| b != 0).take(31))
    {
        *d = s;
    }
    // SAFETY: `cname` is NUL-terminated; plain system call; the result is checked.
    let fd = cvt(unsafe {
        libc::memfd_create(
            cname.as_ptr() as *const libc::c_char,
            libc::MFD_ALLOW_SEALING | libc::MFD_CLOEXEC,
        )
    })?;
    // SAFETY: `fd` was just returned by memfd_create() and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let len = libc::off_t::try_from(size).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: plain system calls on a descriptor we own.
    cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), len) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) })?;
    Ok(fd)
}

/// Check that the peer's region file `fd` is at least `size` bytes and cannot shrink
/// under our mapping (which would turn accesses into `SIGBUS`): it must carry
/// `F_SEAL_SHRINK` or let us add it. Returns what is wrong otherwise.
pub(crate) fn check_region_fd(fd: RawFd, size: u64) -> Result<(), &'static str> {
    let stat = || {
        // SAFETY: `st` is plain integers; fstat fills it; the result is checked.
        let mut st: libc::stat = unsafe { zeroed() };
        // SAFETY: `st` is a live, writable stat buffer.
        (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st)
    };
    let Some(st) = stat() else {
        return Err("region fd cannot be inspected (fstat failed)");
    };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err("region fd is not a regular (memfd) file");
    }
    // Seal, then measure: the peer still holds the file and could shrink it between a size
    // check and the seal (then our first access would be a SIGBUS).
    // SAFETY: plain fcntl queries/updates on a descriptor we own.
    let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
    let sealed = (seals >= 0 && seals & libc::F_SEAL_SHRINK != 0)
        // SAFETY: as above.
        || unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) } == 0;
    if !sealed {
        return Err("region fd can be shrunk (no F_SEAL_SHRINK and sealing not allowed)");
    }
    let Some(st) = stat() else {
        return Err("region fd cannot be inspected (fstat failed)");
    };
    if (st.st_size as u64) < size {
        return Err("region fd is smaller than the announced region size");
    }
    Ok(())
}

/// A shared read-write mapping of a region file.
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned exclusively by this value; moving it between threads is
// sound.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Map the first `len` bytes of `fd` shared.
    pub(crate) fn shared(fd: RawFd, len: usize) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: shared mapping of a file with no address hint; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr =
            NonNull::new(p as *mut u8).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(Mapping { ptr, len })
    }

    /// Start of the mapping.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping this value owns, once.
        unsafe { libc::munmap(self.ptr.as_ptr() as *mut c_void, self.len) };
    }
}

/// A non-blocking, close-on-exec eventfd (the per-ring "interrupt" of the protocol).
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain system call; the result is checked.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    // SAFETY: `fd` was just returned by eventfd() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
