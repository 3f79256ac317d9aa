//! The XDP program that splits an interface's traffic between the AF_XDP socket and the
//! kernel, and the maps userspace drives: `xsks` (queue → socket), `local_addrs` (the
//! router's own addresses, whose traffic the kernel keeps, but for the ports NAT claims
//! on the addresses it shares) and `nat_ports` (those claims: a bitmap written through
//! mmap, see [`NatPorts`]).
//!
//! Loading and attaching go through `aya`. On kernels with XDP bpf_links (5.9+) the
//! attachment lives exactly as long as the link's file descriptor, so a crashed process
//! leaves nothing behind; a program attached the older netlink way (by `ip link set dev X
//! xdp ...`, another loader, or a kernel without links) stays until someone removes it,
//! which [`XdpProgram::attach`] does before attaching its own.

use std::collections::HashMap as StdHashMap;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use aya::maps::{HashMap, MapData, XskMap};
use aya::programs::{Xdp, XdpFlags};
use aya::Ebpf;

use super::sys;

/// The compiled program (bpf/xdp_redirect.c), built by build.rs with clang's BPF target.
/// Aligned to 32 bytes: the ELF parser reads headers in place and fails on a misaligned
/// buffer, which a plain `include_bytes!` may be.
pub static XDP_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp_redirect.o"));

/// Name of the program's function in the object.
const PROGRAM: &str = "ferrouter_xdp";

/// Where the program was attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attached {
    /// In the driver (native XDP).
    Driver,
    /// In the generic path after the driver built an skb.
    Generic,
}

/// A loaded and attached program; detaching happens when this is dropped (the `Ebpf`
/// drops its links, closing their descriptors).
pub(crate) struct XdpProgram {
    xsks: XskMap<MapData>,
    local: HashMap<MapData, [u8; 16], u8>,
    local_set: StdHashMap<[u8; 16], u8>,
    nat_ports: Option<Arc<NatPorts>>,
    attached: Attached,
    /// Owns the program and its link: dropping it closes the link and so detaches.
    _ebpf: Ebpf,
}

/// What went wrong, as a sentence for `PortError::Xdp`.
pub(crate) type Reason = String;

impl XdpProgram {
    /// Load the program and attach it to `ifindex`: natively if `allow_native`, falling
    /// back to generic XDP if `allow_generic`. A netlink-attached program already there
    /// is removed first.
    pub(crate) fn attach(
        ifname: &str,
        ifindex: u32,
        allow_native: bool,
        allow_generic: bool,
    ) -> Result<XdpProgram, Reason> {
        remove_stale(ifname, ifindex)?;
        let mut ebpf =
            Ebpf::load(XDP_OBJECT).map_err(|e| format!("loading the XDP object failed: {e}"))?;
        let prog: &mut Xdp = ebpf
            .program_mut(PROGRAM)
            .ok_or_else(|| format!("XDP object has no program {PROGRAM}"))?
            .try_into()
            .map_err(|e| format!("{PROGRAM} is not an XDP program: {e}"))?;
        prog.load()
            .map_err(|e| format!("the kernel refused the XDP program (verifier): {e}"))?;
        let mut last_err = String::from("no XDP attach mode allowed by the options");
        let mut attached = None;
        let modes = [
            (allow_native, XdpFlags::DRV_MODE, Attached::Driver, "native"),
            (
                allow_generic,
                XdpFlags::SKB_MODE,
                Attached::Generic,
                "generic",
            ),
        ];
        for (allowed, flags, kind, name) in modes {
            if !allowed {
                continue;
            }
            match prog.attach_to_if_index(ifindex, flags) {
                Ok(_) => {
                    attached = Some(kind);
                    break;
                }
                Err(e) => {
                    tracing::debug!(ifname, mode = name, error = %e, "XDP attach failed");
                    last_err = format!("XDP not supported in {name} mode: {e}");
                }
            }
        }
        let attached = attached.ok_or(last_err)?;
        let xsks = XskMap::try_from(ebpf.take_map("xsks").ok_or("XDP object has no map xsks")?)
            .map_err(|e| format!("map xsks: {e}"))?;
        let local = HashMap::try_from(
            ebpf.take_map("local_addrs")
                .ok_or("XDP object has no map local_addrs")?,
        )
        .map_err(|e| format!("map local_addrs: {e}"))?;
        let nat_ports = match ebpf.take_map("nat_ports") {
            Some(aya::maps::Map::Array(m)) => match NatPorts::map(m) {
                Ok(n) => Some(Arc::new(n)),
                Err(e) => {
                    tracing::warn!(ifname, "NAT cannot share this interface's addresses: {e}");
                    None
                }
            },
            _ => return Err("XDP object has no array map nat_ports".into()),
        };
        Ok(XdpProgram {
            xsks,
            local,
            local_set: StdHashMap::new(),
            nat_ports,
            attached,
            _ebpf: ebpf,
        })
    }

    /// Where the program runs.
    pub(crate) fn attached(&self) -> Attached {
        self.attached
    }

    /// Redirect queue `queue_id`'s traffic to socket `fd`.
    pub(crate) fn set_socket(&mut self, queue_id: u32, fd: &impl AsRawFd) -> Result<(), Reason> {
        self.xsks
            .set(queue_id, fd.as_raw_fd(), 0)
            .map_err(|e| format!("inserting the AF_XDP socket into xsks[{queue_id}] failed: {e}"))
    }

    /// Make `addrs` exactly the set of addresses whose traffic goes to the kernel; with
    /// `share.nat`, NAT shares the IPv4 ones (the ports it claims go to the fast path); with
    /// `share.esp`, ESP to any of them goes to the fast path.
    pub(crate) fn set_local_addrs(&mut self, addrs: &[IpAddr], share: Share) -> Result<(), Reason> {
        let nat = share.nat && self.nat_ports.is_some();
        let want: StdHashMap<[u8; 16], u8> = addrs
            .iter()
            .map(|a| {
                let mut v = LOCAL;
                if nat && a.is_ipv4() {
                    v |= LOCAL_NAT;
                }
                if share.esp {
                    v |= LOCAL_ESP;
                }
                if share.natt {
                    v |= LOCAL_NATT;
                }
                (map_key(*a), v)
            })
            .collect();
        // Add before removing, so an address present in both sets never leaks to the fast
        // path in between.
        for (k, v) in &want {
            if self.local_set.get(k) == Some(v) {
                continue;
            }
            self.local
                .insert(k, *v, 0)
                .map_err(|e| format!("adding {} to local_addrs failed: {e}", key_addr(k)))?;
        }
        for k in self.local_set.keys().filter(|k| !want.contains_key(*k)) {
            match self.local.remove(k) {
                Ok(()) => {}
                // Already gone: the goal is reached.
                Err(aya::maps::MapError::KeyNotFound) => {}
                Err(e) => {
                    return Err(format!(
                        "removing {} from local_addrs failed: {e}",
                        key_addr(k)
                    ))
                }
            }
        }
        self.local_set = want;
        Ok(())
    }

    /// Addresses currently in `local_addrs`, as the kernel holds them.
    pub(crate) fn local_addrs(&self) -> Vec<IpAddr> {
        let mut v: Vec<IpAddr> = self
            .local
            .keys()
            .filter_map(Result::ok)
            .map(|k| key_addr(&k))
            .collect();
        v.sort();
        v
    }

    /// Where NAT claims ports (`None`: the map could not be mapped into memory).
    pub(crate) fn nat_ports(&self) -> Option<Arc<NatPorts>> {
        self.nat_ports.clone()
    }
}

/// `local_addrs` value of a router address: a bit set of these.
const LOCAL: u8 = 1;
/// NAT shares the address.
const LOCAL_NAT: u8 = 2;
/// ESP to the address is the fast path's (IPsec tunnels end there).
const LOCAL_ESP: u8 = 4;
/// UDP to its port 4500 is the fast path's (NAT-T: ESP in UDP).
const LOCAL_NATT: u8 = 8;

/// What the fast path takes of the traffic to the router's own addresses, which is
/// otherwise the kernel's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Share {
    /// NAT's flows on the IPv4 addresses (the ports it claims).
    pub nat: bool,
    /// ESP (IPsec tunnels end on the router's addresses).
    pub esp: bool,
    /// UDP to port 4500 (IPsec tunnels with NAT traversal: ESP in UDP, keepalives; the
    /// fast path passes IKE on that port, behind its non-ESP marker, on to the kernel).
    pub natt: bool,
}

/// 64-bit words per protocol block of `nat_ports` (65,536 bits). 64-bit values: an array
/// map lays its values out 8 bytes apart, and mmap shows that layout.
const BLOCK_WORDS: usize = 1024;
/// Blocks: TCP, UDP, ICMP for mappings, then the same for port forwards.
const BLOCKS: usize = 6;

/// The `nat_ports` bitmap, mapped into this process (`BPF_F_MMAPABLE`): the XDP program
/// reads it per packet, the workers and the control thread set and clear bits with atomic
/// read-modify-writes, no syscall.
pub struct NatPorts {
    /// The mapping's first word.
    base: *mut u64,
    /// Bytes mapped.
    len: usize,
    /// Owns the map's descriptor (the mapping outlives no use of it: unmapped in `drop`).
    _map: MapData,
}

// SAFETY: the mapping is process-wide shared memory reached only through atomic operations
// on `AtomicU64` views of it (`NatPorts::word`), which are safe from any thread; the
// pointer never changes after `map` and stays valid until `drop`.
unsafe impl Send for NatPorts {}
// SAFETY: as for `Send`: every access is atomic.
unsafe impl Sync for NatPorts {}

impl NatPorts {
    fn map(m: MapData) -> Result<NatPorts, String> {
        let len = BLOCKS * BLOCK_WORDS * 8;
        let fd = m.fd().as_fd().as_raw_fd();
        // SAFETY: mapping a BPF array map's memory: a valid descriptor (owned by `m`, kept
        // in the result), a length within the map's size (BLOCKS * BLOCK_WORDS u64 values,
        // as the object declares it), no fixed address. The kernel checks the rest and
        // fails with MAP_FAILED.
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
            return Err(format!(
                "mmap of map nat_ports failed: {} (the kernel needs BPF_F_MMAPABLE array maps, Linux 5.5+)",
                std::io::Error::last_os_error()
            ));
        }
        Ok(NatPorts {
            base: p.cast(),
            len,
            _map: m,
        })
    }

    /// Word `i` of the bitmap, as an atomic (`None` beyond it).
    fn word(&self, i: usize) -> Option<&AtomicU64> {
        if i >= self.len / 8 {
            return None;
        }
        // SAFETY: `i` is within the mapping (checked above), which is 8-aligned (page
        // aligned base) and lives as long as `self`; the XDP program only reads it and
        // every userspace access is atomic, so no non-atomic access races with this one.
        Some(unsafe { AtomicU64::from_ptr(self.base.add(i)) })
    }

    fn block(proto: u8) -> Option<usize> {
        match proto {
            6 => Some(0),
            17 => Some(1),
            1 => Some(2),
            _ => None,
        }
    }
}

impl Drop for NatPorts {
    fn drop(&mut self) {
        // SAFETY: `base` and `len` are the mapping `map` made, unmapped once, here.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}

impl dataplane::claims::PortClaims for NatPorts {
    fn set(&self, proto: u8, port: u16, forward: bool, on: bool) {
        let Some(b) = Self::block(proto) else { return };
        let b = b + if forward { 3 } else { 0 };
        let bit = 1u64 << (port & 63);
        if let Some(w) = self.word(b * BLOCK_WORDS + usize::from(port >> 6)) {
            if on {
                w.fetch_or(bit, Ordering::Relaxed);
            } else {
                w.fetch_and(!bit, Ordering::Relaxed);
            }
        }
    }

    fn clear_forwards(&self) {
        for i in 3 * BLOCK_WORDS..BLOCKS * BLOCK_WORDS {
            if let Some(w) = self.word(i) {
                w.store(0, Ordering::Relaxed);
            }
        }
    }
}

/// Remove any netlink-attached program from `ifindex`, in both modes.
fn remove_stale(ifname: &str, ifindex: u32) -> Result<(), Reason> {
    for (mode, name) in [
        (sys::XDP_FLAGS_DRV_MODE, "native"),
        (sys::XDP_FLAGS_SKB_MODE, "generic"),
    ] {
        match sys::netlink_xdp_detach(ifindex, mode) {
            Ok(()) => {}
            // The device has no native XDP: nothing can be attached there.
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                return Err(format!(
                    "another running process holds an XDP program on {ifname} ({name} mode, \
                     bpf_link); stop it first (`bpftool net` shows it)"
                ))
            }
            Err(e) => {
                return Err(format!(
                    "removing a stale {name} XDP program from {ifname} failed: {e} \
                     (try `ip link set dev {ifname} xdp off`)"
                ))
            }
        }
    }
    Ok(())
}

/// The `local_addrs` key of an address: IPv6 as is, IPv4 as `::ffff:a.b.c.d`.
pub(crate) fn map_key(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The address a `local_addrs` key stands for.
fn key_addr(k: &[u8; 16]) -> IpAddr {
    std::net::Ipv6Addr::from(*k).to_canonical()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_ipv4_into_ipv6() {
        let v4: IpAddr = "192.0.2.1".parse().unwrap();
        let k = map_key(v4);
        assert_eq!(k, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1]);
        assert_eq!(key_addr(&k), v4);
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(key_addr(&map_key(v6)), v6);
    }

    #[test]
    fn object_is_an_elf_for_bpf() {
        assert_eq!(&XDP_OBJECT[..4], b"\x7fELF");
        // e_machine EM_BPF (247), little endian.
        assert_eq!(u16::from_le_bytes([XDP_OBJECT[18], XDP_OBJECT[19]]), 247);
        assert_eq!(XDP_OBJECT.as_ptr() as usize % 8, 0);
    }
}
