//! System-call plumbing shared by the port backends: error conversion, socket creation,
//! socket options and the interface ioctls (index, MAC, MTU). Each backend's own `sys`
//! module builds its rings and requests on these.

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use libc::{c_int, c_void, socklen_t};

/// A libc return value as a `Result` (negative → the thread's `errno`).
pub(crate) fn cvt(r: c_int) -> io::Result<c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A non-blocking, close-on-exec `SOCK_RAW` socket of `family` with `protocol` 0.
pub(crate) fn raw_socket(family: c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain system call with constant arguments; the result is checked.
    let fd = cvt(unsafe {
        libc::socket(
            family,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A close-on-exec `AF_INET` datagram socket for the interface ioctls (MTU, flags, MAC,
/// index). Unlike an `AF_PACKET` socket, closing it does not wait for an RCU grace period
/// (milliseconds on a loaded machine): a daemon creating thousands of TUN devices opens
/// one per device.
pub(crate) fn ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain system call with constant arguments; the result is checked.
    let fd = cvt(unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `bind(2)` to a socket address of type `A` (`sockaddr_ll`, `sockaddr_xdp`, ...).
pub(crate) fn bind<A>(fd: RawFd, addr: &A) -> io::Result<()> {
    // SAFETY: `addr` is a live socket address and the length passed is exactly its size.
    cvt(unsafe {
        libc::bind(
            fd,
            addr as *const A as *const libc::sockaddr,
            size_of::<A>() as socklen_t,
        )
    })
    .map(drop)
}

/// `setsockopt(level, opt, val)`.
pub(crate) fn setsockopt<T>(fd: RawFd, level: c_int, opt: c_int, val: &T) -> io::Result<()> {
    // SAFETY: `val` is a live, initialised T and the length passed is exactly its size.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            val as *const T as *const c_void,
            size_of::<T>() as socklen_t,
        )
    })
    .map(drop)
}

/// `getsockopt(level, opt)` into a `T` that is plain integers (all-zero valid); also returns
/// the length the kernel filled.
pub(crate) fn getsockopt<T: Copy>(fd: RawFd, level: c_int, opt: c_int) -> io::Result<(T, usize)> {
    // SAFETY: every T used with this is a plain C struct of integers: all-zero is valid.
    let mut val: T = unsafe { zeroed() };
    let mut len = size_of::<T>() as socklen_t;
    // SAFETY: `val` is writable for `len` bytes and `len` is a valid in/out length.
    cvt(unsafe { libc::getsockopt(fd, level, opt, &mut val as *mut T as *mut c_void, &mut len) })?;
    Ok((val, len as usize))
}

/// An `ifreq` naming `ifname`, or `ENODEV` when the name cannot be an interface name.
pub(crate) fn ifreq(ifname: &str) -> io::Result<libc::ifreq> {
    let b = ifname.as_bytes();
    if b.is_empty() || b.len() >= libc::IFNAMSIZ || b.contains(&0) {
        return Err(io::Error::from_raw_os_error(libc::ENODEV));
    }
    // SAFETY: ifreq is a C struct of integers, arrays and a union of those; all-zero is valid.
    let mut r: libc::ifreq = unsafe { zeroed() };
    for (d, s) in r.ifr_name.iter_mut().zip(b) {
        *d = *s as libc::c_char;
    }
    Ok(r)
}

pub(crate) fn ioctl_ifreq(fd: RawFd, req: libc::c_ulong, r: &mut libc::ifreq) -> io::Result<()> {
    // SAFETY: every request used with this (SIOCGIFINDEX, SIOCG/SIOCSIFHWADDR, SIOCGIFMTU,
    // SIOCG/SIOCSIFFLAGS, TUNSETIFF) reads and writes only within the `ifreq` passed, which
    // is live and exclusively borrowed.
    cvt(unsafe { libc::ioctl(fd, req as _, r as *mut libc::ifreq) }).map(drop)
}

/// Index of `ifname` in the socket's network namespace (`ENODEV` if there is none).
pub(crate) fn ifindex(fd: RawFd, ifname: &str) -> io::Result<u32> {
    let mut r = ifreq(ifname)?;
    ioctl_ifreq(fd, libc::SIOCGIFINDEX, &mut r)?;
    // SAFETY: SIOCGIFINDEX filled the `ifru_ifindex` member of the union.
    Ok(unsafe { r.ifr_ifru.ifru_ifindex } as u32)
}

/// Hardware address of `ifname`.
pub(crate) fn hwaddr(fd: RawFd, ifname: &str) -> io::Result<[u8; 6]> {
    let mut r = ifreq(ifname)?;
    ioctl_ifreq(fd, libc::SIOCGIFHWADDR, &mut r)?;
    // SAFETY: SIOCGIFHWADDR filled the `ifru_hwaddr` member of the union.
    let sa = unsafe { r.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (d, s) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *d = *s as u8;
    }
    Ok(mac)
}

/// Set the hardware address of `ifname`.
pub(crate) fn set_hwaddr(fd: RawFd, ifname: &str, mac: [u8; 6]) -> io::Result<()> {
    let mut r = ifreq(ifname)?;
    // SAFETY: writing the sockaddr member of the union of a zeroed ifreq.
    unsafe {
        r.ifr_ifru.ifru_hwaddr.sa_family = libc::ARPHRD_ETHER;
        for (d, b) in r.ifr_ifru.ifru_hwaddr.sa_data.iter_mut().zip(mac) {
            *d = b as libc::c_char;
        }
    }
    ioctl_ifreq(fd, libc::SIOCSIFHWADDR, &mut r)
}

/// Set `ifname` administratively up.
pub(crate) fn set_up(fd: RawFd, ifname: &str) -> io::Result<()> {
    let mut r = ifreq(ifname)?;
    ioctl_ifreq(fd, libc::SIOCGIFFLAGS, &mut r)?;
    // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
    unsafe { r.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    ioctl_ifreq(fd, libc::SIOCSIFFLAGS, &mut r)
}

/// Set the MTU of `ifname`.
pub(crate) fn set_mtu(fd: RawFd, ifname: &str, mtu: u32) -> io::Result<()> {
    let mut r = ifreq(ifname)?;
    r.ifr_ifru.ifru_mtu = mtu.min(i32::MAX as u32) as i32;
    ioctl_ifreq(fd, libc::SIOCSIFMTU, &mut r)
}

/// MTU of `ifname`.
pub(crate) fn mtu(fd: RawFd, ifname: &str) -> io::Result<u32> {
    let mut r = ifreq(ifname)?;
    ioctl_ifreq(fd, libc::SIOCGIFMTU, &mut r)?;
    // SAFETY: SIOCGIFMTU filled the `ifru_mtu` member of the union.
    Ok(unsafe { r.ifr_ifru.ifru_mtu }.max(0) as u32)
}
