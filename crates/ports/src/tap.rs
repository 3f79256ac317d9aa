//! The kernel face of a port that has no Linux netdev of its own (memif): a TAP interface
//! of the port's name, so that Linux and its tools configure it like any other interface.
//!
//! Addresses, routes and neighbours put on the TAP are mirrored into the FIB as for any
//! port; the fast path punts what the Linux stack must see (ARP/ND, traffic to the router,
//! control multicast) into the TAP, and frames the kernel sends out of the TAP are
//! transmitted on the port. A TAP the daemon creates lives as long as the daemon, and what
//! was configured on it goes with it, as with a hot-unplugged NIC. To keep configuration
//! across restarts, create it beforehand (`ip tuntap add mode tap name mif0`, then
//! addresses and routes): the daemon attaches to an existing TAP of the port's name and
//! changes nothing on it but its MAC (only if it differs) and its up flag.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::sys;

/// `TUNSETIFF` (`_IOW('T', 202, int)`).
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;

/// An open TAP interface (non-blocking).
pub struct Tap {
    fd: OwnedFd,
    name: String,
    /// Frames written into the kernel.
    pub to_kernel: u64,
    /// Frames read from the kernel.
    pub from_kernel: u64,
    /// Frames that could not be written (kernel queue full, too big).
    pub to_kernel_drops: u64,
    /// Frames from the kernel that could not be passed on (too big once a sub-interface's
    /// tags are pushed).
    pub from_kernel_drops: u64,
    /// Frames from the kernel shorter than an Ethernet header (ignored).
    pub runts: u64,
}

fn context(e: io::Error, what: String) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Create (or attach to) the TUN/TAP device `name` of `mode` (`IFF_TAP` or `IFF_TUN`,
/// named `kind` in errors), non-blocking, without packet information.
fn attach(name: &str, mode: libc::c_short, kind: &str) -> io::Result<OwnedFd> {
    // SAFETY: open(2) on a constant NUL-terminated path; the result is checked.
    let fd = sys::cvt(unsafe {
        libc::open(
            c"/dev/net/tun".as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    })
    .map_err(|e| context(e, "opening /dev/net/tun".into()))?;
    // SAFETY: `fd` was just returned by open() and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut r = sys::ifreq(name).map_err(|e| context(e, format!("{kind} name {name:?}")))?;
    r.ifr_ifru.ifru_flags = mode | IFF_NO_PI;
    sys::ioctl_ifreq(fd.as_raw_fd(), TUNSETIFF, &mut r)
        .map_err(|e| context(e, format!("creating {kind} interface {name}")))?;
    Ok(fd)
}

impl Tap {
    /// Create (or attach to) the TAP `name` with hardware address `mac` and bring it up.
    pub fn open(name: &str, mac: [u8; 6]) -> io::Result<Tap> {
        let fd = attach(name, IFF_TAP, "TAP")?;
        // A MAC change flushes the interface's neighbours, static ones included: only set
        // it when it differs (a pre-created TAP keeps its configuration).
        let s = sys::ioctl_socket()?;
        if sys::hwaddr(s.as_raw_fd(), name)? != mac {
            sys::set_hwaddr(s.as_raw_fd(), name, mac)
                .map_err(|e| context(e, format!("setting the MAC of {name}")))?;
        }
        sys::set_up(s.as_raw_fd(), name).map_err(|e| context(e, format!("bringing {name} up")))?;
        Ok(Tap::new(fd, name))
    }

    fn new(fd: OwnedFd, name: &str) -> Tap {
        Tap {
            fd,
            name: name.to_string(),
            to_kernel: 0,
            from_kernel: 0,
            to_kernel_drops: 0,
            from_kernel_drops: 0,
            runts: 0,
        }
    }

    /// Create (or attach to) the TUN interface `name` (layer 3: no link-layer header, no
    /// ARP; the kernel face of a tunnel interface), set its MTU to `mtu` and bring it up.
    /// Frames read and written are bare IP packets.
    pub fn open_tun(name: &str, mtu: u32) -> io::Result<Tap> {
        let tun = Tap::open_tun_down(name, mtu)?;
        tun.set_up()?;
        Ok(tun)
    }

    /// [`Tap::open_tun`] without bringing the interface up (one attached to stays as it
    /// is); [`Tap::set_up`] does. Who creates thousands sets every MTU first and then brings
    /// them up: the kernel walks its whole IPv6 routing table on each MTU change, and that
    /// table holds routes of every interface already up.
    pub fn open_tun_down(name: &str, mtu: u32) -> io::Result<Tap> {
        let fd = attach(name, IFF_TUN, "TUN")?;
        let s = sys::ioctl_socket()?;
        sys::set_mtu(s.as_raw_fd(), name, mtu)
            .map_err(|e| context(e, format!("setting the MTU of {name} to {mtu}")))?;
        Ok(Tap::new(fd, name))
    }

    /// Bring the interface up (administratively).
    pub fn set_up(&self) -> io::Result<()> {
        let s = sys::ioctl_socket()?;
        sys::set_up(s.as_raw_fd(), &self.name)
            .map_err(|e| context(e, format!("bringing {} up", self.name)))
    }

    /// Lower the TAP's MTU to `max` if it is above; returns the MTU it had when lowered.
    pub fn clamp_mtu(&self, max: u32) -> io::Result<Option<u32>> {
        let s = sys::ioctl_socket()?;
        let now = sys::mtu(s.as_raw_fd(), &self.name)
            .map_err(|e| context(e, format!("reading the MTU of {}", self.name)))?;
        if now <= max {
            return Ok(None);
        }
        sys::set_mtu(s.as_raw_fd(), &self.name, max)
            .map_err(|e| context(e, format!("setting the MTU of {} to {max}", self.name)))?;
        Ok(Some(now))
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Linux ifindex (0 if the interface vanished).
    pub fn ifindex(&self) -> u32 {
        sys::ioctl_socket()
            .and_then(|s| sys::ifindex(s.as_raw_fd(), &self.name))
            .unwrap_or(0)
    }

    /// The file descriptor (readable when the kernel has sent a frame).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Hand a frame to the kernel as if it had arrived on the interface. A full kernel
    /// queue is a counted drop.
    pub fn write(&mut self, frame: &[u8]) {
        // SAFETY: `frame` is a live slice of the length passed.
        let n = unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                frame.as_ptr() as *const libc::c_void,
                frame.len(),
            )
        };
        if n == frame.len() as isize {
            self.to_kernel += 1;
        } else {
            self.to_kernel_drops += 1;
        }
    }

    /// A frame the kernel transmitted on the interface, if any (never blocks).
    pub fn read(&mut self, buf: &mut [u8]) -> Option<usize> {
        // SAFETY: `buf` is a live, writable slice of the length passed.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
            )
        };
        if n > 0 {
            self.from_kernel += 1;
            Some(n as usize)
        } else {
            None
        }
    }
}

/// The hardware address of interface `name` (a VLAN sub-interface's TAP takes its
/// parent's, as Linux VLAN devices do).
pub fn interface_mac(name: &str) -> io::Result<[u8; 6]> {
    let s = sys::ioctl_socket()?;
    sys::hwaddr(s.as_raw_fd(), name).map_err(|e| context(e, format!("reading the MAC of {name}")))
}

/// The MTU of interface `name`.
pub fn interface_mtu(name: &str) -> io::Result<u32> {
    let s = sys::ioctl_socket()?;
    sys::mtu(s.as_raw_fd(), name).map_err(|e| context(e, format!("reading the MTU of {name}")))
}

/// A locally administered MAC for port `name` (stable across restarts).
pub fn derived_mac(name: &str) -> [u8; 6] {
    // FNV-1a over the name: stable, no dependency, collisions only matter on one link.
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    let b = h.to_be_bytes();
    [0x02, 0xfe, b[0], b[1], b[2], b[3]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_macs_are_local_unicast_and_stable() {
        let a = derived_mac("mif0");
        assert_eq!(a, derived_mac("mif0"));
        assert_ne!(a, derived_mac("mif1"));
        assert_eq!(a[0] & 1, 0, "unicast");
        assert_eq!(a[0] & 2, 2, "locally administered");
    }

    #[test]
    fn bad_names_are_refused() {
        assert!(Tap::open("", [2, 0, 0, 0, 0, 1]).is_err());
        assert!(Tap::open("a-name-that-is-far-too-long", [2, 0, 0, 0, 0, 1]).is_err());
    }
}
