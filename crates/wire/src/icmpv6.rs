//! ICMPv6 (RFC 4443) and Neighbor Discovery (RFC 4861).

use crate::checksum;
use crate::util::{addr16, be16, be32, mac};
use crate::{Error, Result};

/// ICMPv6 message types.
pub mod msg_type {
    /// Destination Unreachable (codes in [`super::dst_unreachable`]).
    pub const DST_UNREACHABLE: u8 = 1;
    /// Packet Too Big (carries the MTU).
    pub const PACKET_TOO_BIG: u8 = 2;
    /// Time Exceeded (codes in [`super::time_exceeded`]).
    pub const TIME_EXCEEDED: u8 = 3;
    /// Parameter Problem (carries a pointer).
    pub const PARAM_PROBLEM: u8 = 4;
    /// Echo Request.
    pub const ECHO_REQUEST: u8 = 128;
    /// Echo Reply.
    pub const ECHO_REPLY: u8 = 129;
    /// Router Solicitation.
    pub const RS: u8 = 133;
    /// Router Advertisement.
    pub const RA: u8 = 134;
    /// Neighbor Solicitation.
    pub const NS: u8 = 135;
    /// Neighbor Advertisement.
    pub const NA: u8 = 136;
    /// Redirect.
    pub const REDIRECT: u8 = 137;

    /// Whether `t` is an error message (types below 128, RFC 4443 §2.1).
    pub const fn is_error(t: u8) -> bool {
        t < 128
    }
}

/// Codes for [`msg_type::DST_UNREACHABLE`].
pub mod dst_unreachable {
    /// No route to destination.
    pub const NO_ROUTE: u8 = 0;
    /// Communication administratively prohibited.
    pub const ADMIN: u8 = 1;
    /// Address unreachable.
    pub const ADDR: u8 = 3;
    /// Port unreachable.
    pub const PORT: u8 = 4;
}

/// Codes for [`msg_type::TIME_EXCEEDED`].
pub mod time_exceeded {
    /// Hop limit exceeded in transit.
    pub const HOP_LIMIT: u8 = 0;
    /// Fragment reassembly time exceeded.
    pub const REASSEMBLY: u8 = 1;
}

/// NDP option types.
pub mod ndp_option {
    /// Source Link-Layer Address.
    pub const SOURCE_LL: u8 = 1;
    /// Target Link-Layer Address.
    pub const TARGET_LL: u8 = 2;
    /// Prefix Information.
    pub const PREFIX_INFO: u8 = 3;
    /// Redirected Header.
    pub const REDIRECTED_HEADER: u8 = 4;
    /// MTU.
    pub const MTU: u8 = 5;
}

mod field {
    use core::ops::Range;
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Range<usize> = 2..4;
    pub const REST: Range<usize> = 4..8;
    pub const ECHO_IDENT: Range<usize> = 4..6;
    pub const ECHO_SEQ: Range<usize> = 6..8;
    pub const PAYLOAD: usize = 8;

    // Neighbor Discovery, offsets in the ICMPv6 message.
    pub const RA_HOP_LIMIT: usize = 4;
    pub const RA_FLAGS: usize = 5;
    pub const RA_LIFETIME: Range<usize> = 6..8;
    pub const RA_REACHABLE: Range<usize> = 8..12;
    pub const RA_RETRANS: Range<usize> = 12..16;
    pub const NA_FLAGS: usize = 4;
    pub const TARGET: Range<usize> = 8..24;
    pub const REDIRECT_DEST: Range<usize> = 24..40;

    pub const RS_OPTIONS: usize = 8;
    pub const RA_OPTIONS: usize = 16;
    pub const NS_OPTIONS: usize = 24;
    pub const REDIRECT_OPTIONS: usize = 40;
}

const NA_FLAG_ROUTER: u8 = 0x80;
const NA_FLAG_SOLICITED: u8 = 0x40;
const NA_FLAG_OVERRIDE: u8 = 0x20;

/// A read/write view of an ICMPv6 message; the buffer is the whole message
/// (the upper-layer payload of the IPv6 packet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Icmpv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    /// Length of the ICMPv6 header (type, code, checksum, four message bytes).
    pub const HEADER_LEN: usize = field::PAYLOAD;

    /// Wraps `buffer` without validation; accessors panic if it is shorter than 8 bytes.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Icmpv6Packet { buffer }
    }

    /// Wraps `buffer`, checking it holds the 8-byte header ([`Error::Truncated`]).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < Self::HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Self::new_unchecked(buffer))
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Message type.
    #[inline]
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    /// Message code.
    #[inline]
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// Checksum as stored.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::CHECKSUM])
    }

    /// The four message-specific bytes after the checksum.
    #[inline]
    pub fn rest_of_header(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::REST])
    }

    /// MTU of a Packet Too Big message.
    #[inline]
    pub fn mtu(&self) -> u32 {
        self.rest_of_header()
    }

    /// Pointer of a Parameter Problem message.
    #[inline]
    pub fn pointer(&self) -> u32 {
        self.rest_of_header()
    }

    /// Echo identifier.
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::ECHO_IDENT])
    }

    /// Echo sequence number.
    #[inline]
    pub fn echo_seq_no(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::ECHO_SEQ])
    }

    /// Data after the 8-byte header (echo data, quoted packet, or NDP body).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }

    /// True if the checksum verifies with the pseudo header for `src`/`dst`.
    #[inline]
    pub fn verify_checksum(&self, src: &[u8; 16], dst: &[u8; 16]) -> bool {
        let data = self.buffer.as_ref();
        let ph = checksum::pseudo_v6(src, dst, crate::ip::protocol::ICMPV6, data.len() as u32);
        checksum::fold(ph + checksum::sum(data)) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
    /// Sets the message type.
    #[inline]
    pub fn set_msg_type(&mut self, value: u8) {
        self.buffer.as_mut()[field::TYPE] = value;
    }

    /// Sets the message code.
    #[inline]
    pub fn set_msg_code(&mut self, value: u8) {
        self.buffer.as_mut()[field::CODE] = value;
    }

    /// Sets the stored checksum.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the four message-specific bytes.
    #[inline]
    pub fn set_rest_of_header(&mut self, value: u32) {
        self.buffer.as_mut()[field::REST].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the Packet Too Big MTU.
    #[inline]
    pub fn set_mtu(&mut self, value: u32) {
        self.set_rest_of_header(value);
    }

    /// Sets the Parameter Problem pointer.
    #[inline]
    pub fn set_pointer(&mut self, value: u32) {
        self.set_rest_of_header(value);
    }

    /// Sets the echo identifier.
    #[inline]
    pub fn set_echo_ident(&mut self, value: u16) {
        self.buffer.as_mut()[field::ECHO_IDENT].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the echo sequence number.
    #[inline]
    pub fn set_echo_seq_no(&mut self, value: u16) {
        self.buffer.as_mut()[field::ECHO_SEQ].copy_from_slice(&value.to_be_bytes());
    }

    /// Recomputes the checksum with the pseudo header for `src`/`dst`.
    #[inline]
    pub fn fill_checksum(&mut self, src: &[u8; 16], dst: &[u8; 16]) {
        self.set_checksum(0);
        let data = self.buffer.as_ref();
        let ph = checksum::pseudo_v6(src, dst, crate::ip::protocol::ICMPV6, data.len() as u32);
        let c = !checksum::fold(ph + checksum::sum(data));
        self.set_checksum(c);
    }

    /// Mutable data after the header.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

/// Most options [`NdpRepr::parse`] walks in one message.
pub const MAX_NDP_OPTIONS: usize = 64;

/// Walks NDP options, calling `f(type, whole_option)` for each. Every option
/// needs a non-zero length ([`Error::BadOption`]) that stays inside `opts`
/// ([`Error::Truncated`]); more than [`MAX_NDP_OPTIONS`] is
/// [`Error::TooManyOptions`].
fn walk_options<'a>(opts: &'a [u8], mut f: impl FnMut(u8, &'a [u8]) -> Result<()>) -> Result<()> {
    let mut i = 0;
    let mut count = 0;
    while i < opts.len() {
        let (Some(&kind), Some(&len)) = (opts.get(i), opts.get(i + 1)) else {
            return Err(Error::Truncated);
        };
        if len == 0 {
            return Err(Error::BadOption);
        }
        count += 1;
        if count > MAX_NDP_OPTIONS {
            return Err(Error::TooManyOptions);
        }
        let end = i + usize::from(len) * 8;
        let Some(opt) = opts.get(i..end) else {
            return Err(Error::Truncated);
        };
        f(kind, opt)?;
        i = end;
    }
    Ok(())
}

/// One Prefix Information option (RFC 4861 section 4.6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixInfo {
    /// Prefix length in bits.
    pub prefix_len: u8,
    /// On-link flag (L).
    pub on_link: bool,
    /// Autonomous address-configuration flag (A).
    pub autonomous: bool,
    /// Valid lifetime in seconds.
    pub valid_lifetime: u32,
    /// Preferred lifetime in seconds.
    pub preferred_lifetime: u32,
    /// The prefix.
    pub prefix: [u8; 16],
}

impl PrefixInfo {
    /// Length of the option on the wire.
    pub const LEN: usize = 32;

    fn parse(opt: &[u8]) -> Option<Self> {
        if opt.len() != Self::LEN {
            return None;
        }
        Some(PrefixInfo {
            prefix_len: opt[2],
            on_link: opt[3] & 0x80 != 0,
            autonomous: opt[3] & 0x40 != 0,
            valid_lifetime: be32(&opt[4..8]),
            preferred_lifetime: be32(&opt[8..12]),
            prefix: addr16(&opt[16..32]),
        })
    }

    fn emit(&self, out: &mut [u8]) {
        out[0] = ndp_option::PREFIX_INFO;
        out[1] = 4;
        out[2] = self.prefix_len;
        out[3] = if self.on_link { 0x80 } else { 0 } | if self.autonomous { 0x40 } else { 0 };
        out[4..8].copy_from_slice(&self.valid_lifetime.to_be_bytes());
        out[8..12].copy_from_slice(&self.preferred_lifetime.to_be_bytes());
        out[12..16].fill(0);
        out[16..32].copy_from_slice(&self.prefix);
    }
}

#[derive(Debug, Clone, Copy)]
enum PrefixSource<'a> {
    /// Validated NDP option bytes; only Prefix Information options are yielded.
    Wire(&'a [u8]),
    /// A caller-supplied list, for emitting.
    List(&'a [PrefixInfo]),
}

/// The Prefix Information options of a Router Advertisement, without allocation:
/// either the validated option bytes of a parsed message or a caller's list.
#[derive(Debug, Clone, Copy)]
pub struct PrefixInfos<'a> {
    source: PrefixSource<'a>,
}

impl<'a> PrefixInfos<'a> {
    /// No prefixes.
    pub const EMPTY: PrefixInfos<'static> = PrefixInfos {
        source: PrefixSource::List(&[]),
    };

    /// Prefixes from a caller-supplied list (for [`NdpRepr::emit`]).
    pub const fn from_list(list: &'a [PrefixInfo]) -> Self {
        PrefixInfos {
            source: PrefixSource::List(list),
        }
    }

    /// Iterates over the prefixes.
    pub fn iter(&self) -> PrefixIter<'a> {
        PrefixIter {
            source: self.source,
            pos: 0,
        }
    }

    /// Number of prefixes.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// True if there are no prefixes.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }
}

impl PartialEq for PrefixInfos<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for PrefixInfos<'_> {}

impl<'a> IntoIterator for PrefixInfos<'a> {
    type Item = PrefixInfo;
    type IntoIter = PrefixIter<'a>;
    fn into_iter(self) -> PrefixIter<'a> {
        self.iter()
    }
}

/// Iterator over [`PrefixInfos`].
#[derive(Debug, Clone)]
pub struct PrefixIter<'a> {
    source: PrefixSource<'a>,
    pos: usize,
}

impl Iterator for PrefixIter<'_> {
    type Item = PrefixInfo;

    fn next(&mut self) -> Option<PrefixInfo> {
        match self.source {
            PrefixSource::List(list) => {
                let p = list.get(self.pos).copied();
                self.pos += 1;
                p
            }
            PrefixSource::Wire(opts) => loop {
                let len = usize::from(*opts.get(self.pos + 1)?) * 8;
                if len == 0 {
                    return None;
                }
                let opt = opts.get(self.pos..self.pos + len)?;
                self.pos += len;
                if opt[0] == ndp_option::PREFIX_INFO {
                    return PrefixInfo::parse(opt);
                }
            },
        }
    }
}

/// A parsed Neighbor Discovery message (RFC 4861).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NdpRepr<'a> {
    /// Router Solicitation.
    RouterSolicit {
        /// Source link-layer address option.
        source_ll: Option<[u8; 6]>,
    },
    /// Router Advertisement.
    RouterAdvert {
        /// Current hop limit (0 = unspecified).
        hop_limit: u8,
        /// Flags byte (M = 0x80, O = 0x40, ...).
        flags: u8,
        /// Router lifetime in seconds (0 = not a default router).
        router_lifetime: u16,
        /// Reachable time in milliseconds.
        reachable_time: u32,
        /// Retransmission timer in milliseconds.
        retrans_time: u32,
        /// Source link-layer address option.
        source_ll: Option<[u8; 6]>,
        /// MTU option.
        mtu: Option<u32>,
        /// Prefix Information options.
        prefixes: PrefixInfos<'a>,
    },
    /// Neighbor Solicitation.
    NeighborSolicit {
        /// Target address.
        target: [u8; 16],
        /// Source link-layer address option (absent in DAD probes).
        source_ll: Option<[u8; 6]>,
    },
    /// Neighbor Advertisement.
    NeighborAdvert {
        /// Router flag (R).
        router_flag: bool,
        /// Solicited flag (S).
        solicited_flag: bool,
        /// Override flag (O).
        override_flag: bool,
        /// Target address.
        target: [u8; 16],
        /// Target link-layer address option.
        target_ll: Option<[u8; 6]>,
    },
    /// Redirect.
    Redirect {
        /// Better first hop.
        target: [u8; 16],
        /// Destination being redirected.
        dest: [u8; 16],
        /// Target link-layer address option.
        target_ll: Option<[u8; 6]>,
    },
}

/// Writes an SLL/TLL option at `*at` if `ll` is present.
fn put_ll(b: &mut [u8], kind: u8, ll: Option<[u8; 6]>, at: &mut usize) {
    if let Some(addr) = ll {
        b[*at] = kind;
        b[*at + 1] = 1;
        b[*at + 2..*at + 8].copy_from_slice(&addr);
        *at += 8;
    }
}

/// Link-layer address in an SLL/TLL option (Ethernet: bytes 2..8).
fn ll_addr(opt: &[u8]) -> Option<[u8; 6]> {
    opt.get(2..8).map(mac)
}

impl<'a> NdpRepr<'a> {
    /// Parses an NDP message.
    ///
    /// Errors: [`Error::Unsupported`] for a non-NDP type, [`Error::Malformed`]
    /// for a non-zero code, [`Error::Truncated`] for a short body or an option
    /// running past the end, [`Error::BadOption`] for an option of length 0 or
    /// a Prefix Information / MTU option of the wrong size,
    /// [`Error::TooManyOptions`] past [`MAX_NDP_OPTIONS`]. The hop-limit-255
    /// check needs the IPv6 header and is left to the caller.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Icmpv6Packet<&'a T>) -> Result<Self> {
        let data: &'a [u8] = packet.buffer.as_ref();
        let opts_at = match packet.msg_type() {
            msg_type::RS => field::RS_OPTIONS,
            msg_type::RA => field::RA_OPTIONS,
            msg_type::NS | msg_type::NA => field::NS_OPTIONS,
            msg_type::REDIRECT => field::REDIRECT_OPTIONS,
            _ => return Err(Error::Unsupported),
        };
        if packet.msg_code() != 0 {
            return Err(Error::Malformed);
        }
        let Some(opts) = data.get(opts_at..) else {
            return Err(Error::Truncated);
        };
        let mut source_ll = None;
        let mut target_ll = None;
        let mut mtu = None;
        walk_options(opts, |kind, opt| {
            match kind {
                ndp_option::SOURCE_LL if source_ll.is_none() => source_ll = ll_addr(opt),
                ndp_option::TARGET_LL if target_ll.is_none() => target_ll = ll_addr(opt),
                ndp_option::PREFIX_INFO if opt.len() != PrefixInfo::LEN => {
                    return Err(Error::BadOption)
                }
                ndp_option::MTU => {
                    if opt.len() != 8 {
                        return Err(Error::BadOption);
                    }
                    mtu = mtu.or(Some(be32(&opt[4..8])));
                }
                _ => {}
            }
            Ok(())
        })?;
        Ok(match packet.msg_type() {
            msg_type::RS => NdpRepr::RouterSolicit { source_ll },
            msg_type::RA => NdpRepr::RouterAdvert {
                hop_limit: data[field::RA_HOP_LIMIT],
                flags: data[field::RA_FLAGS],
                router_lifetime: be16(&data[field::RA_LIFETIME]),
                reachable_time: be32(&data[field::RA_REACHABLE]),
                retrans_time: be32(&data[field::RA_RETRANS]),
                source_ll,
                mtu,
                prefixes: PrefixInfos {
                    source: PrefixSource::Wire(opts),
                },
            },
            msg_type::NS => NdpRepr::NeighborSolicit {
                target: addr16(&data[field::TARGET]),
                source_ll,
            },
            msg_type::NA => {
                let f = data[field::NA_FLAGS];
                NdpRepr::NeighborAdvert {
                    router_flag: f & NA_FLAG_ROUTER != 0,
                    solicited_flag: f & NA_FLAG_SOLICITED != 0,
                    override_flag: f & NA_FLAG_OVERRIDE != 0,
                    target: addr16(&data[field::TARGET]),
                    target_ll,
                }
            }
            _ => NdpRepr::Redirect {
                target: addr16(&data[field::TARGET]),
                dest: addr16(&data[field::REDIRECT_DEST]),
                target_ll,
            },
        })
    }

    fn ll_len(ll: Option<[u8; 6]>) -> usize {
        if ll.is_some() {
            8
        } else {
            0
        }
    }

    /// Length of the ICMPv6 message [`NdpRepr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        match self {
            NdpRepr::RouterSolicit { source_ll } => field::RS_OPTIONS + Self::ll_len(*source_ll),
            NdpRepr::RouterAdvert {
                source_ll,
                mtu,
                prefixes,
                ..
            } => {
                field::RA_OPTIONS
                    + Self::ll_len(*source_ll)
                    + if mtu.is_some() { 8 } else { 0 }
                    + prefixes.len() * PrefixInfo::LEN
            }
            NdpRepr::NeighborSolicit { source_ll, .. } => {
                field::NS_OPTIONS + Self::ll_len(*source_ll)
            }
            NdpRepr::NeighborAdvert { target_ll, .. } => {
                field::NS_OPTIONS + Self::ll_len(*target_ll)
            }
            NdpRepr::Redirect { target_ll, .. } => {
                field::REDIRECT_OPTIONS + Self::ll_len(*target_ll)
            }
        }
    }

    /// Writes the message (options in the order SLL/TLL, MTU, prefixes) with a
    /// zero checksum; call [`Icmpv6Packet::fill_checksum`] afterwards.
    /// [`Error::Truncated`] if the buffer is shorter than [`NdpRepr::buffer_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Icmpv6Packet<T>) -> Result<()> {
        let total = self.buffer_len();
        let Some(b) = packet.buffer.as_mut().get_mut(..total) else {
            return Err(Error::Truncated);
        };
        b.fill(0);
        let (kind, opts_at) = match self {
            NdpRepr::RouterSolicit { .. } => (msg_type::RS, field::RS_OPTIONS),
            NdpRepr::RouterAdvert { .. } => (msg_type::RA, field::RA_OPTIONS),
            NdpRepr::NeighborSolicit { .. } => (msg_type::NS, field::NS_OPTIONS),
            NdpRepr::NeighborAdvert { .. } => (msg_type::NA, field::NS_OPTIONS),
            NdpRepr::Redirect { .. } => (msg_type::REDIRECT, field::REDIRECT_OPTIONS),
        };
        b[field::TYPE] = kind;
        let mut at = opts_at;
        match *self {
            NdpRepr::RouterSolicit { source_ll } => {
                put_ll(b, ndp_option::SOURCE_LL, source_ll, &mut at)
            }
            NdpRepr::RouterAdvert {
                hop_limit,
                flags,
                router_lifetime,
                reachable_time,
                retrans_time,
                source_ll,
                mtu,
                prefixes,
            } => {
                b[field::RA_HOP_LIMIT] = hop_limit;
                b[field::RA_FLAGS] = flags;
                b[field::RA_LIFETIME].copy_from_slice(&router_lifetime.to_be_bytes());
                b[field::RA_REACHABLE].copy_from_slice(&reachable_time.to_be_bytes());
                b[field::RA_RETRANS].copy_from_slice(&retrans_time.to_be_bytes());
                put_ll(b, ndp_option::SOURCE_LL, source_ll, &mut at);
                if let Some(mtu) = mtu {
                    b[at] = ndp_option::MTU;
                    b[at + 1] = 1;
                    b[at + 4..at + 8].copy_from_slice(&mtu.to_be_bytes());
                    at += 8;
                }
                for p in prefixes {
                    p.emit(&mut b[at..at + PrefixInfo::LEN]);
                    at += PrefixInfo::LEN;
                }
            }
            NdpRepr::NeighborSolicit { target, source_ll } => {
                b[field::TARGET].copy_from_slice(&target);
                put_ll(b, ndp_option::SOURCE_LL, source_ll, &mut at);
            }
            NdpRepr::NeighborAdvert {
                router_flag,
                solicited_flag,
                override_flag,
                target,
                target_ll,
            } => {
                b[field::NA_FLAGS] = if router_flag { NA_FLAG_ROUTER } else { 0 }
                    | if solicited_flag { NA_FLAG_SOLICITED } else { 0 }
                    | if override_flag { NA_FLAG_OVERRIDE } else { 0 };
                b[field::TARGET].copy_from_slice(&target);
                put_ll(b, ndp_option::TARGET_LL, target_ll, &mut at);
            }
            NdpRepr::Redirect {
                target,
                dest,
                target_ll,
            } => {
                b[field::TARGET].copy_from_slice(&target);
                b[field::REDIRECT_DEST].copy_from_slice(&dest);
                put_ll(b, ndp_option::TARGET_LL, target_ll, &mut at);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv6::{walk_ext_headers, Ipv6Packet, MAX_EXT_HEADERS};
    use proptest::prelude::*;

    const HOST: [u8; 16] = [
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56,
    ];
    const TARGET: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    const ROUTER_LL: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    const ALL_NODES: [u8; 16] = [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    const HOST_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
    const ROUTER_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];

    /// IPv6 + NS: fe80::5054:ff:fe12:3456 -> ff02::1:ff00:1, who has
    /// 2001:db8::1, with a Source LL option.
    static NS: [u8; 72] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x20, 0x3a, 0xff, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0x00, 0x00, 0x01, // IPv6
        0x87, 0x00, 0x42, 0xea, 0x00, 0x00, 0x00, 0x00, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, // NS
        0x01, 0x01, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, // SLL
    ];

    /// Solicited NA 2001:db8::1 -> fe80::5054:ff:fe12:3456, S and O set, TLL.
    static NA: [u8; 32] = [
        0x88, 0x00, 0x35, 0xf1, 0x60, 0x00, 0x00, 0x00, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x01, 0x02, 0x00, 0x00, 0x00,
        0x00, 0x01,
    ];

    /// RA fe80::1 -> ff02::1: hop limit 64, O flag, lifetime 1800 s, SLL,
    /// MTU 1500, prefix 2001:db8:1::/64 (L, A, 30 d / 7 d).
    static RA: [u8; 64] = [
        0x86, 0x00, 0xed, 0xa8, 0x40, 0x40, 0x07, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x01, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x05, 0x01, 0x00, 0x00, 0x00, 0x00,
        0x05, 0xdc, 0x03, 0x04, 0x40, 0xc0, 0x00, 0x27, 0x8d, 0x00, 0x00, 0x09, 0x3a, 0x80, 0x00,
        0x00, 0x00, 0x00, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00,
    ];

    const PREFIX: PrefixInfo = PrefixInfo {
        prefix_len: 64,
        on_link: true,
        autonomous: true,
        valid_lifetime: 2_592_000,
        preferred_lifetime: 604_800,
        prefix: [
            0x20, 0x01, 0x0d, 0xb8, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ],
    };

    #[test]
    fn neighbor_solicit() {
        let ip = Ipv6Packet::new_checked(&NS[..]).unwrap();
        assert_eq!(ip.hop_limit(), 255);
        let w = walk_ext_headers(ip.next_header(), ip.payload(), MAX_EXT_HEADERS).unwrap();
        assert_eq!((w.upper_protocol, w.upper_offset), (58, 0));
        let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
        assert_eq!(icmp.msg_type(), msg_type::NS);
        assert_eq!(icmp.checksum(), 0x42ea);
        assert!(icmp.verify_checksum(&ip.src_addr(), &ip.dst_addr()));
        assert!(!icmp.verify_checksum(&ip.dst_addr(), &TARGET));
        let repr = NdpRepr::parse(&icmp).unwrap();
        assert_eq!(
            repr,
            NdpRepr::NeighborSolicit {
                target: TARGET,
                source_ll: Some(HOST_MAC)
            }
        );

        let mut buf = [0u8; 32];
        assert_eq!(repr.buffer_len(), 32);
        let mut out = Icmpv6Packet::new_unchecked(&mut buf[..]);
        repr.emit(&mut out).unwrap();
        out.fill_checksum(&ip.src_addr(), &ip.dst_addr());
        assert_eq!(&buf[..], &NS[40..]);
    }

    #[test]
    fn neighbor_advert() {
        let icmp = Icmpv6Packet::new_checked(&NA[..]).unwrap();
        assert!(icmp.verify_checksum(&TARGET, &HOST));
        let repr = NdpRepr::parse(&icmp).unwrap();
        let want = NdpRepr::NeighborAdvert {
            router_flag: false,
            solicited_flag: true,
            override_flag: true,
            target: TARGET,
            target_ll: Some(ROUTER_MAC),
        };
        assert_eq!(repr, want);
        let mut buf = [0xffu8; 32];
        let mut out = Icmpv6Packet::new_unchecked(&mut buf[..]);
        want.emit(&mut out).unwrap();
        out.fill_checksum(&TARGET, &HOST);
        assert_eq!(buf, NA);
        let mut short = [0u8; 31];
        assert_eq!(
            want.emit(&mut Icmpv6Packet::new_unchecked(&mut short[..])),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn router_advert() {
        let icmp = Icmpv6Packet::new_checked(&RA[..]).unwrap();
        assert!(icmp.verify_checksum(&ROUTER_LL, &ALL_NODES));
        let repr = NdpRepr::parse(&icmp).unwrap();
        let list = [PREFIX];
        let want = NdpRepr::RouterAdvert {
            hop_limit: 64,
            flags: 0x40,
            router_lifetime: 1800,
            reachable_time: 0,
            retrans_time: 0,
            source_ll: Some(ROUTER_MAC),
            mtu: Some(1500),
            prefixes: PrefixInfos::from_list(&list),
        };
        assert_eq!(repr, want);
        if let NdpRepr::RouterAdvert { prefixes, .. } = repr {
            assert_eq!(prefixes.len(), 1);
            assert_eq!(prefixes.iter().next(), Some(PREFIX));
        }
        assert_eq!(want.buffer_len(), 64);
        let mut buf = [0u8; 64];
        let mut out = Icmpv6Packet::new_unchecked(&mut buf[..]);
        want.emit(&mut out).unwrap();
        out.fill_checksum(&ROUTER_LL, &ALL_NODES);
        assert_eq!(buf, RA);
        // Re-emitting the parsed (wire-backed) repr gives the same bytes.
        let mut again = [0u8; 64];
        let mut out = Icmpv6Packet::new_unchecked(&mut again[..]);
        repr.emit(&mut out).unwrap();
        out.fill_checksum(&ROUTER_LL, &ALL_NODES);
        assert_eq!(again, RA);
    }

    #[test]
    fn solicit_and_redirect_roundtrip() {
        let reprs = [
            NdpRepr::RouterSolicit {
                source_ll: Some(HOST_MAC),
            },
            NdpRepr::RouterSolicit { source_ll: None },
            NdpRepr::NeighborSolicit {
                target: TARGET,
                source_ll: None,
            },
            NdpRepr::Redirect {
                target: ROUTER_LL,
                dest: TARGET,
                target_ll: Some(ROUTER_MAC),
            },
            NdpRepr::RouterAdvert {
                hop_limit: 0,
                flags: 0,
                router_lifetime: 0,
                reachable_time: 1,
                retrans_time: 2,
                source_ll: None,
                mtu: None,
                prefixes: PrefixInfos::EMPTY,
            },
        ];
        for r in reprs {
            let mut buf = [0u8; 64];
            let len = r.buffer_len();
            let mut p = Icmpv6Packet::new_unchecked(&mut buf[..len]);
            r.emit(&mut p).unwrap();
            p.fill_checksum(&HOST, &ALL_NODES);
            let p = Icmpv6Packet::new_checked(&buf[..len]).unwrap();
            assert!(p.verify_checksum(&HOST, &ALL_NODES));
            assert_eq!(NdpRepr::parse(&p).unwrap(), r);
        }
    }

    #[test]
    fn errors() {
        fn parse(b: &[u8]) -> Result<NdpRepr<'_>> {
            NdpRepr::parse(&Icmpv6Packet::new_checked(b).unwrap())
        }
        assert_eq!(
            Icmpv6Packet::new_checked(&NA[..7]).unwrap_err(),
            Error::Truncated
        );
        // Option length 0 (RFC 4861 section 4.6: MUST be discarded).
        let mut zero = NA;
        zero[25] = 0;
        assert_eq!(parse(&zero), Err(Error::BadOption));
        // Option running past the end.
        let mut long = NA;
        long[25] = 2;
        assert_eq!(parse(&long), Err(Error::Truncated));
        assert_eq!(parse(&NA[..25]), Err(Error::Truncated));
        assert_eq!(parse(&NA[..20]), Err(Error::Truncated));
        // Wrong-size prefix / MTU options.
        let mut bad_prefix = RA;
        bad_prefix[33] = 3;
        assert!(matches!(
            parse(&bad_prefix),
            Err(Error::BadOption | Error::Truncated)
        ));
        let mut bad_prefix = RA.to_vec();
        bad_prefix[33] = 5;
        bad_prefix.extend_from_slice(&[0; 8]);
        assert_eq!(parse(&bad_prefix), Err(Error::BadOption));
        let mut bad_mtu = RA;
        bad_mtu[25] = 2;
        assert_eq!(parse(&bad_mtu), Err(Error::BadOption));
        // Code must be 0; other types are not NDP.
        let mut code = NA;
        code[1] = 1;
        assert_eq!(parse(&code), Err(Error::Malformed));
        let echo = [msg_type::ECHO_REQUEST, 0, 0, 0, 0, 1, 0, 1];
        assert_eq!(parse(&echo), Err(Error::Unsupported));
        // Too many options.
        let mut many = vec![msg_type::RS, 0, 0, 0, 0, 0, 0, 0];
        for _ in 0..=MAX_NDP_OPTIONS {
            many.extend_from_slice(&[99, 1, 0, 0, 0, 0, 0, 0]);
        }
        assert_eq!(parse(&many), Err(Error::TooManyOptions));
        assert!(parse(&many[..many.len() - 8]).is_ok());
    }

    #[test]
    fn error_messages() {
        // Packet Too Big: MTU 1280; Param Problem pointer 6.
        let mut buf = [0u8; 48];
        let mut p = Icmpv6Packet::new_checked(&mut buf[..]).unwrap();
        p.set_msg_type(msg_type::PACKET_TOO_BIG);
        p.set_msg_code(0);
        p.set_mtu(1280);
        p.payload_mut().copy_from_slice(&NS[..40]);
        p.fill_checksum(&ROUTER_LL, &HOST);
        assert!(p.verify_checksum(&ROUTER_LL, &HOST));
        assert_eq!(p.mtu(), 1280);
        assert_eq!(p.payload(), &NS[..40]);
        p.set_msg_type(msg_type::PARAM_PROBLEM);
        p.set_pointer(6);
        assert_eq!((p.pointer(), p.rest_of_header()), (6, 6));
        p.set_rest_of_header(0);
        p.set_msg_type(msg_type::ECHO_REQUEST);
        p.set_echo_ident(7);
        p.set_echo_seq_no(9);
        assert_eq!((p.echo_ident(), p.echo_seq_no()), (7, 9));
    }

    proptest! {
        #[test]
        fn arbitrary_never_panics(
            kind in prop_oneof![133u8..=137, any::<u8>()],
            code in prop_oneof![Just(0u8), any::<u8>()],
            mut data in proptest::collection::vec(prop_oneof![0u8..=5, any::<u8>()], 0..200),
        ) {
            if data.len() >= 2 {
                data[0] = kind;
                data[1] = code;
            }
            if let Ok(p) = Icmpv6Packet::new_checked(&data[..]) {
                let _ = (p.msg_type(), p.msg_code(), p.checksum(), p.mtu(), p.pointer());
                let _ = (p.echo_ident(), p.echo_seq_no(), p.payload().len());
                let _ = p.verify_checksum(&HOST, &TARGET);
                if let Ok(r) = NdpRepr::parse(&p) {
                    if let NdpRepr::RouterAdvert { prefixes, .. } = r {
                        prop_assert!(prefixes.iter().count() <= MAX_NDP_OPTIONS);
                    }
                    let mut out = [0u8; 256];
                    let len = r.buffer_len();
                    prop_assert!(len <= p.payload().len() + 8);
                    r.emit(&mut Icmpv6Packet::new_unchecked(&mut out[..])).unwrap();
                    let q = Icmpv6Packet::new_checked(&out[..len]).unwrap();
                    prop_assert_eq!(NdpRepr::parse(&q).unwrap(), r);
                }
            }
            if let Ok(mut p) = Icmpv6Packet::new_checked(&mut data[..]) {
                p.fill_checksum(&HOST, &TARGET);
                prop_assert!(p.verify_checksum(&HOST, &TARGET));
            }
        }
    }
}
