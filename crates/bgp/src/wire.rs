//! The BGP-4 message codec: framing, OPEN, UPDATE (IPv4 and MP-BGP IPv6 unicast),
//! NOTIFICATION, KEEPALIVE and ROUTE-REFRESH (RFC 4271, 4760, 6793, 5492, 2918, 9072),
//! with the error classification of RFC 7606.
//!
//! # Shape
//!
//! smoltcp-like: each message is validated once, at the boundary ([`frame`], [`parse_open`],
//! [`parse_update`]), and what comes out cannot fail afterwards. In particular an [`Nlri`] is a
//! borrowed, already validated run of prefixes in wire encoding: [`Nlri::iter`] walks the
//! message bytes in place (no allocation per prefix, no error path in the loop), which is what
//! matters when a full table of millions of prefixes converges. Path attributes are decoded
//! into an owned, hashable [`Attrs`] once per UPDATE so a speaker can intern identical sets.
//!
//! Malformed input never panics (the tests fuzz every parser). Errors are classified as
//! RFC 7606 asks, because a live session must act differently on each:
//!
//! - **session reset**: `Err(`[`Notification`]`)`, the NOTIFICATION to send before closing;
//! - **treat-as-withdraw**: `Ok` with [`Update::treat_as_withdraw`] set to the reason; the
//!   announced prefixes must be withdrawn instead;
//! - **attribute discard**: `Ok`, the attribute dropped and counted in
//!   [`Update::discarded_attrs`].
//!
//! # Why not bgpkit-parser
//!
//! The workspace already depends on bgpkit-parser (for reading MRT archives in tests), and the
//! tests here cross-check this codec against it. It is not used for live sessions because it
//! is made for reading archives: it allocates a `Vec` of prefixes and a `Vec` of attribute
//! values per message, and it has no RFC 7606 classification (treat-as-withdraw vs session
//! reset vs attribute discard), which a live session must act on. This codec iterates NLRI
//! in place.

#![warn(missing_docs)]

use std::fmt;
use std::iter::FusedIterator;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

#[cfg(test)]
mod tests;

/// Length of the message header (marker, length, type).
pub const HEADER_LEN: usize = 19;
/// Largest message without the RFC 8654 extended message capability (which we do not announce).
pub const MAX_MESSAGE_LEN: usize = 4096;

/// Address family identifier: IPv4.
pub const AFI_IPV4: u16 = 1;
/// Address family identifier: IPv6.
pub const AFI_IPV6: u16 = 2;
/// Subsequent address family identifier: unicast.
pub const SAFI_UNICAST: u8 = 1;

/// Message type OPEN.
pub const MSG_OPEN: u8 = 1;
/// Message type UPDATE.
pub const MSG_UPDATE: u8 = 2;
/// Message type NOTIFICATION.
pub const MSG_NOTIFICATION: u8 = 3;
/// Message type KEEPALIVE.
pub const MSG_KEEPALIVE: u8 = 4;
/// Message type ROUTE-REFRESH (RFC 2918).
pub const MSG_ROUTE_REFRESH: u8 = 5;

/// NOTIFICATION error code: Message Header Error.
pub const ERR_HEADER: u8 = 1;
/// NOTIFICATION error code: OPEN Message Error.
pub const ERR_OPEN: u8 = 2;
/// NOTIFICATION error code: UPDATE Message Error.
pub const ERR_UPDATE: u8 = 3;
/// NOTIFICATION error code: Hold Timer Expired.
pub const ERR_HOLD: u8 = 4;
/// NOTIFICATION error code: Finite State Machine Error.
pub const ERR_FSM: u8 = 5;
/// NOTIFICATION error code: Cease.
pub const ERR_CEASE: u8 = 6;

/// Path attribute type ORIGIN.
pub const ATTR_ORIGIN: u8 = 1;
/// Path attribute type AS_PATH.
pub const ATTR_AS_PATH: u8 = 2;
/// Path attribute type NEXT_HOP.
pub const ATTR_NEXT_HOP: u8 = 3;
/// Path attribute type MULTI_EXIT_DISC.
pub const ATTR_MED: u8 = 4;
/// Path attribute type LOCAL_PREF.
pub const ATTR_LOCAL_PREF: u8 = 5;
/// Path attribute type ATOMIC_AGGREGATE.
pub const ATTR_ATOMIC_AGGREGATE: u8 = 6;
/// Path attribute type AGGREGATOR.
pub const ATTR_AGGREGATOR: u8 = 7;
/// Path attribute type COMMUNITIES (RFC 1997).
pub const ATTR_COMMUNITIES: u8 = 8;
/// Path attribute type MP_REACH_NLRI (RFC 4760).
pub const ATTR_MP_REACH: u8 = 14;
/// Path attribute type MP_UNREACH_NLRI (RFC 4760).
pub const ATTR_MP_UNREACH: u8 = 15;
/// Path attribute type AS4_PATH (RFC 6793).
pub const ATTR_AS4_PATH: u8 = 17;
/// Path attribute type AS4_AGGREGATOR (RFC 6793).
pub const ATTR_AS4_AGGREGATOR: u8 = 18;

/// Attribute flag: optional (else well-known).
pub const FLAG_OPTIONAL: u8 = 0x80;
/// Attribute flag: transitive.
pub const FLAG_TRANSITIVE: u8 = 0x40;
/// Attribute flag: partial.
pub const FLAG_PARTIAL: u8 = 0x20;
/// Attribute flag: the length field is two octets.
pub const FLAG_EXTENDED_LEN: u8 = 0x10;

/// Capability code: Multiprotocol Extensions (RFC 4760).
pub const CAP_MULTIPROTOCOL: u8 = 1;
/// Capability code: Route Refresh (RFC 2918).
pub const CAP_ROUTE_REFRESH: u8 = 2;
/// Capability code: 4-octet AS number (RFC 6793).
pub const CAP_FOUR_OCTET_AS: u8 = 65;

/// The 2-octet AS placeholder for a 4-octet AS number (RFC 6793).
pub const AS_TRANS: u32 = 23456;

// ---------------------------------------------------------------------------------------------
// Reading helpers: every read is checked, so malformed input ends in None, never in a panic.

struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(b: &'a [u8]) -> Self {
        Reader { b }
    }
    fn is_empty(&self) -> bool {
        self.b.is_empty()
    }
    fn rest(&self) -> &'a [u8] {
        self.b
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (a, rest) = self.b.split_at_checked(n)?;
        self.b = rest;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        let (&x, rest) = self.b.split_first()?;
        self.b = rest;
        Some(x)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
}

fn be32(b: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(b.try_into().ok()?))
}

// ---------------------------------------------------------------------------------------------
// NOTIFICATION

/// An error that ends the session: the NOTIFICATION to send (RFC 4271 §6), or one received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notification {
    /// Error code ([`ERR_HEADER`] .. [`ERR_CEASE`], 7 for ROUTE-REFRESH errors).
    pub code: u8,
    /// Error subcode; 0 is "unspecific".
    pub subcode: u8,
    /// Diagnostic data, as defined per code/subcode.
    pub data: Vec<u8>,
}

impl Notification {
    /// A NOTIFICATION with `data` copied.
    pub fn new(code: u8, subcode: u8, data: &[u8]) -> Self {
        Notification {
            code,
            subcode,
            data: data.to_vec(),
        }
    }

    /// The error code's name, e.g. "UPDATE Message Error".
    pub fn code_name(&self) -> &'static str {
        match self.code {
            1 => "Message Header Error",
            2 => "OPEN Message Error",
            3 => "UPDATE Message Error",
            4 => "Hold Timer Expired",
            5 => "Finite State Machine Error",
            6 => "Cease",
            7 => "ROUTE-REFRESH Message Error",
            _ => "Unknown Error Code",
        }
    }

    /// The subcode's name within its code, e.g. "Malformed Attribute List".
    pub fn subcode_name(&self) -> &'static str {
        match (self.code, self.subcode) {
            (_, 0) => "Unspecific",
            (1, 1) => "Connection Not Synchronized",
            (1, 2) => "Bad Message Length",
            (1, 3) => "Bad Message Type",
            (2, 1) => "Unsupported Version Number",
            (2, 2) => "Bad Peer AS",
            (2, 3) => "Bad BGP Identifier",
            (2, 4) => "Unsupported Optional Parameter",
            (2, 5) => "Authentication Failure (deprecated)",
            (2, 6) => "Unacceptable Hold Time",
            (2, 7) => "Unsupported Capability",
            (2, 11) => "Role Mismatch",
            (3, 1) => "Malformed Attribute List",
            (3, 2) => "Unrecognized Well-known Attribute",
            (3, 3) => "Missing Well-known Attribute",
            (3, 4) => "Attribute Flags Error",
            (3, 5) => "Attribute Length Error",
            (3, 6) => "Invalid ORIGIN Attribute",
            (3, 7) => "AS Routing Loop (deprecated)",
            (3, 8) => "Invalid NEXT_HOP Attribute",
            (3, 9) => "Optional Attribute Error",
            (3, 10) => "Invalid Network Field",
            (3, 11) => "Malformed AS_PATH",
            (5, 1) => "Receive Unexpected Message in OpenSent State",
            (5, 2) => "Receive Unexpected Message in OpenConfirm State",
            (5, 3) => "Receive Unexpected Message in Established State",
            (6, 1) => "Maximum Number of Prefixes Reached",
            (6, 2) => "Administrative Shutdown",
            (6, 3) => "Peer De-configured",
            (6, 4) => "Administrative Reset",
            (6, 5) => "Connection Rejected",
            (6, 6) => "Other Configuration Change",
            (6, 7) => "Connection Collision Resolution",
            (6, 8) => "Out of Resources",
            (6, 9) => "Hard Reset",
            (6, 10) => "BFD Down",
            (7, 1) => "Invalid Message Length",
            _ => "Unknown Subcode",
        }
    }

    /// The RFC 8203 / 9003 shutdown communication of a Cease / Administrative Shutdown or
    /// Reset, if the data holds a well-formed one.
    pub fn shutdown_message(&self) -> Option<&str> {
        if self.code != ERR_CEASE || !matches!(self.subcode, 2 | 4) {
            return None;
        }
        let (&len, rest) = self.data.split_first()?;
        let text = rest.get(..usize::from(len))?;
        if text.is_empty() {
            return None;
        }
        std::str::from_utf8(text).ok()
    }
}

impl fmt::Display for Notification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} / {} ({}/{}), {} bytes of data",
            self.code_name(),
            self.subcode_name(),
            self.code,
            self.subcode,
            self.data.len()
        )?;
        if let Some(m) = self.shutdown_message() {
            write!(f, ": {m:?}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Notification {}

/// The 2-octet Length field of a message whose body is `body_len` bytes (the data of a
/// Bad Message Length error).
fn length_field(body_len: usize) -> [u8; 2] {
    u16::try_from(body_len.saturating_add(HEADER_LEN))
        .unwrap_or(u16::MAX)
        .to_be_bytes()
}

// ---------------------------------------------------------------------------------------------
// Framing

/// Frame the next message from the start of `buf`.
///
/// - `Ok(None)`: `buf` holds less than a whole message yet (read more).
/// - `Ok(Some((msg_type, total_len)))`: a whole message of `total_len` bytes (header
///   included) is at `buf[..total_len]`; its body is `buf[HEADER_LEN..total_len]`.
/// - `Err`: a bad marker (1/1), a bad length (1/2, data the Length field): below 19, above
///   4096, or wrong for the type (OPEN >= 29, UPDATE >= 23, KEEPALIVE == 19,
///   NOTIFICATION >= 21, ROUTE-REFRESH == 23); an unknown type (1/3, data the type).
///
/// The marker is checked on whatever part of it has arrived, so garbage is refused early.
pub fn frame(buf: &[u8]) -> Result<Option<(u8, usize)>, Notification> {
    let marker = buf.get(..16).unwrap_or(buf);
    if marker.iter().any(|&b| b != 0xff) {
        return Err(Notification::new(ERR_HEADER, 1, &[]));
    }
    let Some(hdr) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let len_bytes = [hdr[16], hdr[17]];
    let len = usize::from(u16::from_be_bytes(len_bytes));
    let ty = hdr[18];
    let bad_len = || Notification::new(ERR_HEADER, 2, &len_bytes);
    if !(HEADER_LEN..=MAX_MESSAGE_LEN).contains(&len) {
        return Err(bad_len());
    }
    let ok = match ty {
        MSG_OPEN => len >= 29,
        MSG_UPDATE => len >= 23,
        MSG_NOTIFICATION => len >= 21,
        MSG_KEEPALIVE => len == 19,
        MSG_ROUTE_REFRESH => len == 23,
        _ => return Err(Notification::new(ERR_HEADER, 3, &[ty])),
    };
    if !ok {
        return Err(bad_len());
    }
    if buf.len() < len {
        return Ok(None);
    }
    Ok(Some((ty, len)))
}

/// Start a message of type `ty` at the end of `out`; returns its start for [`finish`].
fn begin(out: &mut Vec<u8>, ty: u8) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0xff; 16]);
    out.extend_from_slice(&[0, 0, ty]);
    start
}

/// Write the Length field of the message started at `start`.
fn finish(out: &mut [u8], start: usize) {
    let len = u16::try_from(out.len() - start).unwrap_or(u16::MAX);
    out[start + 16..start + 18].copy_from_slice(&len.to_be_bytes());
}

// ---------------------------------------------------------------------------------------------
// OPEN, KEEPALIVE, NOTIFICATION, ROUTE-REFRESH

/// A parsed OPEN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Open {
    /// BGP version (always 4 once parsed).
    pub version: u8,
    /// The speaker's AS: the 4-octet AS capability's value when present, else the 2-octet field.
    pub asn: u32,
    /// Proposed hold time in seconds (0 or >= 3).
    pub hold_time: u16,
    /// BGP Identifier (never 0.0.0.0 once parsed).
    pub router_id: Ipv4Addr,
    /// AFI/SAFI pairs from Multiprotocol capabilities (code 1), in order, without duplicates.
    /// Empty when the peer sent none, which RFC 4760 reads as IPv4 unicast only.
    pub families: Vec<(u16, u8)>,
    /// 4-octet AS capability (code 65) present.
    pub four_octet_as: bool,
    /// Route refresh capability (code 2) present.
    pub route_refresh: bool,
}

/// Parse an OPEN's body (the bytes after the 19-byte header).
///
/// Errors (RFC 4271 §6.2): version != 4 -> 2/1 with data `[0, 4]` (the largest supported
/// version); the fixed fields or the optional parameters not matching the body's length ->
/// 1/2 (data the Length field); an optional parameter or capability overrunning its
/// enclosure, or a Multiprotocol / 4-octet AS capability of the wrong length -> 2/0; an
/// optional parameter other than capabilities (type 2) -> 2/4; AS 0 -> 2/2 (RFC 7607); hold
/// time 1 or 2 -> 2/6; BGP Identifier 0 -> 2/3. Unknown capabilities are ignored. The RFC 9072
/// extended optional parameters length is supported.
pub fn parse_open(body: &[u8]) -> Result<Open, Notification> {
    let bad_len = || Notification::new(ERR_HEADER, 2, &length_field(body.len()));
    let malformed = || Notification::new(ERR_OPEN, 0, &[]);
    let mut r = Reader::new(body);
    let version = r.u8().ok_or_else(bad_len)?;
    if version != 4 {
        return Err(Notification::new(ERR_OPEN, 1, &[0, 4]));
    }
    let (Some(as2), Some(hold_time), Some(id), Some(opt_len)) = (r.u16(), r.u16(), r.u32(), r.u8())
    else {
        return Err(bad_len());
    };
    // RFC 9072: a non-zero length followed by parameter type 255 announces the extended form.
    let extended = opt_len != 0 && r.rest().first() == Some(&255);
    let params = if extended {
        r.u8();
        let ext_len = r.u16().ok_or_else(bad_len)?;
        r.take(usize::from(ext_len)).ok_or_else(bad_len)?
    } else {
        r.take(usize::from(opt_len)).ok_or_else(bad_len)?
    };
    if !r.is_empty() {
        return Err(bad_len());
    }

    let mut open = Open {
        version,
        asn: u32::from(as2),
        hold_time,
        router_id: Ipv4Addr::from(id),
        families: Vec::new(),
        four_octet_as: false,
        route_refresh: false,
    };
    let mut p = Reader::new(params);
    while !p.is_empty() {
        let ty = p.u8().ok_or_else(malformed)?;
        let len = if extended {
            p.u16()
        } else {
            p.u8().map(u16::from)
        }
        .ok_or_else(malformed)?;
        let value = p.take(usize::from(len)).ok_or_else(malformed)?;
        if ty != 2 {
            return Err(Notification::new(ERR_OPEN, 4, &[]));
        }
        let mut c = Reader::new(value);
        while !c.is_empty() {
            let (Some(code), Some(len)) = (c.u8(), c.u8()) else {
                return Err(malformed());
            };
            let v = c.take(usize::from(len)).ok_or_else(malformed)?;
            match code {
                CAP_MULTIPROTOCOL => {
                    let &[a0, a1, _reserved, safi] = v else {
                        return Err(malformed());
                    };
                    let fam = (u16::from_be_bytes([a0, a1]), safi);
                    if !open.families.contains(&fam) {
                        open.families.push(fam);
                    }
                }
                CAP_ROUTE_REFRESH => open.route_refresh = true,
                CAP_FOUR_OCTET_AS => {
                    open.asn = be32(v).ok_or_else(malformed)?;
                    open.four_octet_as = true;
                }
                _ => {}
            }
        }
    }
    if open.asn == 0 {
        return Err(Notification::new(ERR_OPEN, 2, &[]));
    }
    if matches!(hold_time, 1 | 2) {
        return Err(Notification::new(ERR_OPEN, 6, &[]));
    }
    if id == 0 {
        return Err(Notification::new(ERR_OPEN, 3, &[]));
    }
    Ok(open)
}

/// Append a whole OPEN message (header included) advertising, in one capabilities optional
/// parameter: a Multiprotocol capability per family, route refresh, and 4-octet AS (with
/// AS_TRANS 23456 in the 2-octet field when `asn` > 65535).
pub fn encode_open(
    out: &mut Vec<u8>,
    asn: u32,
    hold_time: u16,
    router_id: Ipv4Addr,
    families: &[(u16, u8)],
) {
    let start = begin(out, MSG_OPEN);
    out.push(4);
    let as2 = u16::try_from(asn).unwrap_or(AS_TRANS as u16);
    out.extend_from_slice(&as2.to_be_bytes());
    out.extend_from_slice(&hold_time.to_be_bytes());
    out.extend_from_slice(&router_id.octets());
    let mut caps = Vec::with_capacity(families.len() * 6 + 8);
    // At most 255 bytes of capabilities fit one parameter: 40 families is plenty.
    for &(afi, safi) in families.iter().take(40) {
        caps.extend_from_slice(&[CAP_MULTIPROTOCOL, 4]);
        caps.extend_from_slice(&afi.to_be_bytes());
        caps.extend_from_slice(&[0, safi]);
    }
    caps.extend_from_slice(&[CAP_ROUTE_REFRESH, 0, CAP_FOUR_OCTET_AS, 4]);
    caps.extend_from_slice(&asn.to_be_bytes());
    out.push(caps.len() as u8 + 2);
    out.extend_from_slice(&[2, caps.len() as u8]);
    out.extend_from_slice(&caps);
    finish(out, start);
}

/// Append a KEEPALIVE message.
pub fn encode_keepalive(out: &mut Vec<u8>) {
    let start = begin(out, MSG_KEEPALIVE);
    finish(out, start);
}

/// Append a NOTIFICATION message; data beyond what fits 4096 bytes is cut.
pub fn encode_notification(out: &mut Vec<u8>, n: &Notification) {
    let start = begin(out, MSG_NOTIFICATION);
    out.extend_from_slice(&[n.code, n.subcode]);
    let room = MAX_MESSAGE_LEN - HEADER_LEN - 2;
    out.extend_from_slice(n.data.get(..room).unwrap_or(&n.data));
    finish(out, start);
}

/// Parse a NOTIFICATION's body (never fails: a body shorter than 2 bytes gives code/subcode 0).
pub fn parse_notification(body: &[u8]) -> Notification {
    match body {
        [code, subcode, data @ ..] => Notification::new(*code, *subcode, data),
        _ => Notification::new(0, 0, &[]),
    }
}

/// Append a ROUTE-REFRESH message (RFC 2918) asking for `afi`/`safi`.
pub fn encode_route_refresh(out: &mut Vec<u8>, afi: u16, safi: u8) {
    let start = begin(out, MSG_ROUTE_REFRESH);
    out.extend_from_slice(&afi.to_be_bytes());
    out.extend_from_slice(&[0, safi]);
    finish(out, start);
}

/// Parse a ROUTE-REFRESH body into (AFI, SAFI). A body other than 4 bytes is 7/1
/// (RFC 7313) with the body as data. The reserved byte (RFC 7313's subtype) is ignored.
pub fn parse_route_refresh(body: &[u8]) -> Result<(u16, u8), Notification> {
    match *body {
        [a0, a1, _, safi] => Ok((u16::from_be_bytes([a0, a1]), safi)),
        _ => Err(Notification::new(7, 1, body)),
    }
}

// ---------------------------------------------------------------------------------------------
// Path attributes

/// Path attributes of an UPDATE, owned and hashable (the speaker interns identical sets; most
/// UPDATEs of a table share one).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Attrs {
    /// ORIGIN: 0 IGP, 1 EGP, 2 INCOMPLETE.
    pub origin: u8,
    /// AS_PATH (merged with AS4_PATH on a 2-octet AS session).
    pub as_path: AsPath,
    /// NEXT_HOP (IPv4). For IPv6 routes the MP_REACH next hop is in [`MpReach`], not here.
    pub next_hop: Option<IpAddr>,
    /// MULTI_EXIT_DISC.
    pub med: Option<u32>,
    /// LOCAL_PREF.
    pub local_pref: Option<u32>,
    /// ATOMIC_AGGREGATE present.
    pub atomic_aggregate: bool,
    /// COMMUNITIES (type 8), kept for show. Other optional attributes are skipped.
    pub communities: Vec<u32>,
}

/// An AS_PATH: a list of segments.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct AsPath {
    /// The segments in wire order.
    pub segments: Vec<AsSegment>,
}

/// One AS_PATH segment.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AsSegment {
    /// Segment type.
    pub kind: SegmentKind,
    /// The ASNs (never empty once parsed).
    pub asns: Vec<u32>,
}

/// AS_PATH segment type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SegmentKind {
    /// AS_SET (1): unordered.
    Set,
    /// AS_SEQUENCE (2): ordered.
    Sequence,
    /// AS_CONFED_SEQUENCE (3, RFC 5065).
    ConfedSequence,
    /// AS_CONFED_SET (4, RFC 5065).
    ConfedSet,
}

impl SegmentKind {
    /// The segment type's wire code.
    pub fn code(self) -> u8 {
        match self {
            SegmentKind::Set => 1,
            SegmentKind::Sequence => 2,
            SegmentKind::ConfedSequence => 3,
            SegmentKind::ConfedSet => 4,
        }
    }

    /// The segment type for a wire code, if defined.
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => SegmentKind::Set,
            2 => SegmentKind::Sequence,
            3 => SegmentKind::ConfedSequence,
            4 => SegmentKind::ConfedSet,
            _ => return None,
        })
    }

    fn is_confed(self) -> bool {
        matches!(self, SegmentKind::ConfedSequence | SegmentKind::ConfedSet)
    }
}

impl AsPath {
    /// Length for best-path selection (RFC 4271 §9.1.2.2: a SET counts 1, confederation
    /// segments 0).
    pub fn path_len(&self) -> u32 {
        self.segments.iter().fold(0u32, |n, s| {
            n.saturating_add(match s.kind {
                SegmentKind::Sequence => u32::try_from(s.asns.len()).unwrap_or(u32::MAX),
                SegmentKind::Set => 1,
                _ => 0,
            })
        })
    }

    /// The first AS of the first SEQUENCE segment (the neighbour AS), if any.
    pub fn first(&self) -> Option<u32> {
        self.segments
            .iter()
            .find(|s| s.kind == SegmentKind::Sequence)
            .and_then(|s| s.asns.first().copied())
    }

    /// Whether `asn` appears anywhere in the path (loop detection).
    pub fn contains(&self, asn: u32) -> bool {
        self.segments.iter().any(|s| s.asns.contains(&asn))
    }

    /// A path of one SEQUENCE segment (empty if `asns` is).
    pub fn sequence(asns: &[u32]) -> Self {
        if asns.is_empty() {
            return AsPath::default();
        }
        AsPath {
            segments: vec![AsSegment {
                kind: SegmentKind::Sequence,
                asns: asns.to_vec(),
            }],
        }
    }
}

impl fmt::Display for AsPath {
    /// `65002 65010 {65020,65021}`; confederation segments as `(65001 65003)` and `[65001,65003]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.segments.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            let (open, sep, close) = match s.kind {
                SegmentKind::Sequence => ("", " ", ""),
                SegmentKind::Set => ("{", ",", "}"),
                SegmentKind::ConfedSequence => ("(", " ", ")"),
                SegmentKind::ConfedSet => ("[", ",", "]"),
            };
            f.write_str(open)?;
            for (j, a) in s.asns.iter().enumerate() {
                if j > 0 {
                    f.write_str(sep)?;
                }
                write!(f, "{a}")?;
            }
            f.write_str(close)?;
        }
        Ok(())
    }
}

/// Decode AS_PATH / AS4_PATH segments with `asn_len`-byte ASNs; None if malformed (RFC 7606
/// §7.2: undefined segment type, zero-length segment, or overrun).
fn parse_as_path(v: &[u8], asn_len: usize) -> Option<AsPath> {
    let mut segments = Vec::new();
    let mut r = Reader::new(v);
    while !r.is_empty() {
        let kind = SegmentKind::from_code(r.u8()?)?;
        let n = usize::from(r.u8()?);
        if n == 0 {
            return None;
        }
        let b = r.take(n * asn_len)?;
        let asns = if asn_len == 4 {
            b.chunks_exact(4)
                .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        } else {
            b.chunks_exact(2)
                .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
                .collect()
        };
        segments.push(AsSegment { kind, asns });
    }
    Some(AsPath { segments })
}

/// RFC 6793 §4.2.3: rebuild the 4-octet path from a 2-octet AS_PATH and an AS4_PATH.
fn merge_as4_path(as_path: &AsPath, as4: &AsPath) -> AsPath {
    let (n2, n4) = (as_path.path_len(), as4.path_len());
    if n2 < n4 {
        return as_path.clone();
    }
    let mut keep = n2 - n4;
    let mut segments = Vec::new();
    for s in &as_path.segments {
        if keep == 0 {
            break;
        }
        match s.kind {
            SegmentKind::Sequence => {
                let take = s.asns.len().min(keep as usize);
                segments.push(AsSegment {
                    kind: s.kind,
                    asns: s.asns[..take].to_vec(),
                });
                keep -= take as u32;
            }
            SegmentKind::Set => {
                segments.push(s.clone());
                keep -= 1;
            }
            _ => segments.push(s.clone()),
        }
    }
    segments.extend(as4.segments.iter().cloned());
    AsPath { segments }
}

// ---------------------------------------------------------------------------------------------
// NLRI

/// Why NLRI bytes were refused by [`Nlri::new`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NlriError {
    /// The AFI is neither [`AFI_IPV4`] nor [`AFI_IPV6`].
    #[error("unsupported AFI {0}")]
    UnsupportedAfi(u16),
    /// A prefix length exceeds the family's address length.
    #[error("prefix length {len} at offset {offset} exceeds {max}")]
    PrefixTooLong {
        /// Offset of the length byte.
        offset: usize,
        /// The length found.
        len: u8,
        /// 32 or 128.
        max: u8,
    },
    /// A prefix's address bytes run past the end of the field.
    #[error("prefix /{len} at offset {offset} needs {need} address bytes, {have} remain")]
    Truncated {
        /// Offset of the length byte.
        offset: usize,
        /// The prefix length.
        len: u8,
        /// Address bytes needed.
        need: usize,
        /// Address bytes present.
        have: usize,
    },
}

/// Prefixes of one family in NLRI encoding, already validated (every length <= 32/128 and
/// every byte present), so iterating cannot fail. Host bits beyond the length are cleared by
/// the iterator.
#[derive(Clone, Copy, Debug)]
pub struct Nlri<'a> {
    afi: u16,
    bytes: &'a [u8],
}

impl<'a> Nlri<'a> {
    /// Validate `bytes` as NLRI of `afi` (one pass).
    pub fn new(afi: u16, bytes: &'a [u8]) -> Result<Self, NlriError> {
        let max: u8 = match afi {
            AFI_IPV4 => 32,
            AFI_IPV6 => 128,
            _ => return Err(NlriError::UnsupportedAfi(afi)),
        };
        let mut i = 0;
        while let Some(&len) = bytes.get(i) {
            if len > max {
                return Err(NlriError::PrefixTooLong {
                    offset: i,
                    len,
                    max,
                });
            }
            let need = usize::from(len).div_ceil(8);
            let have = bytes.len() - i - 1;
            if need > have {
                return Err(NlriError::Truncated {
                    offset: i,
                    len,
                    need,
                    have,
                });
            }
            i += 1 + need;
        }
        Ok(Nlri { afi, bytes })
    }

    /// No prefixes of `afi`.
    pub fn empty(afi: u16) -> Self {
        Nlri { afi, bytes: &[] }
    }

    /// The address family.
    pub fn afi(&self) -> u16 {
        self.afi
    }

    /// Whether there are no prefixes.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The validated wire bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Iterate as (IpAddr, len), host bits cleared.
    pub fn iter(&self) -> NlriIter<'a> {
        NlriIter {
            v6: self.afi == AFI_IPV6,
            bytes: self.bytes,
        }
    }

    /// Number of prefixes (one pass over the length bytes).
    pub fn count(&self) -> usize {
        let mut n = 0;
        let mut i = 0;
        while let Some(&len) = self.bytes.get(i) {
            i += 1 + usize::from(len).div_ceil(8);
            n += 1;
        }
        n
    }
}

impl<'a> IntoIterator for Nlri<'a> {
    type Item = (IpAddr, u8);
    type IntoIter = NlriIter<'a>;
    fn into_iter(self) -> NlriIter<'a> {
        self.iter()
    }
}

impl<'a> IntoIterator for &Nlri<'a> {
    type Item = (IpAddr, u8);
    type IntoIter = NlriIter<'a>;
    fn into_iter(self) -> NlriIter<'a> {
        self.iter()
    }
}

/// Iterator over an [`Nlri`]'s prefixes as (address with host bits cleared, length).
#[derive(Clone, Debug)]
pub struct NlriIter<'a> {
    v6: bool,
    bytes: &'a [u8],
}

impl Iterator for NlriIter<'_> {
    type Item = (IpAddr, u8);

    #[inline]
    fn next(&mut self) -> Option<(IpAddr, u8)> {
        let (&len, rest) = self.bytes.split_first()?;
        let n = usize::from(len).div_ceil(8);
        // Validated by Nlri::new: the checks below never fail, they only keep the loop panic-free.
        let (p, rest) = rest.split_at_checked(n)?;
        self.bytes = rest;
        if self.v6 {
            let mut a = [0u8; 16];
            a.get_mut(..n)?.copy_from_slice(p);
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            let v = u128::from_be_bytes(a) & mask;
            Some((IpAddr::V6(Ipv6Addr::from(v)), len))
        } else {
            let mut a = [0u8; 4];
            a.get_mut(..n)?.copy_from_slice(p);
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            let v = u32::from_be_bytes(a) & mask;
            Some((IpAddr::V4(Ipv4Addr::from(v)), len))
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let max = if self.v6 { 17 } else { 5 };
        (self.bytes.len().div_ceil(max), Some(self.bytes.len()))
    }
}

impl FusedIterator for NlriIter<'_> {}

// ---------------------------------------------------------------------------------------------
// UPDATE

/// A parsed UPDATE. The session applies, in this order: `withdrawn` and `mp_unreach` as
/// withdrawals; then if `treat_as_withdraw` is Some, `nlri` and `mp_reach`'s prefixes are ALSO
/// withdrawals (RFC 7606); else they are announcements with `attrs` (and `mp_reach.next_hop`
/// for IPv6).
#[derive(Clone, Debug)]
pub struct Update<'a> {
    /// Withdrawn Routes (IPv4).
    pub withdrawn: Nlri<'a>,
    /// Network Layer Reachability Information (IPv4).
    pub nlri: Nlri<'a>,
    /// The path attributes (malformed ones left at their defaults).
    pub attrs: Attrs,
    /// MP_REACH_NLRI of a supported family ((1,1) or (2,1)).
    pub mp_reach: Option<MpReach<'a>>,
    /// MP_UNREACH_NLRI of a supported family ((1,1) or (2,1)).
    pub mp_unreach: Option<Nlri<'a>>,
    /// Why the announced prefixes must be treated as withdrawn (RFC 7606), e.g. "malformed
    /// ORIGIN", "missing NEXT_HOP". The first reason found.
    pub treat_as_withdraw: Option<&'static str>,
    /// Attributes discarded under RFC 7606 "attribute discard" (malformed ATOMIC_AGGREGATE,
    /// AGGREGATOR, AS4_PATH; repeated attributes), for a counter.
    pub discarded_attrs: u32,
    /// The Total Path Attribute Length field (0 in the IPv4 End-of-RIB marker).
    pub attrs_len: usize,
}

impl Update<'_> {
    /// The AFI whose End-of-RIB marker (RFC 4724) this UPDATE is: an UPDATE with nothing in
    /// it at all for IPv4, or one with only an empty MP_UNREACH_NLRI (AFI 1 or 2, SAFI 1).
    pub fn end_of_rib(&self) -> Option<u16> {
        if !self.withdrawn.is_empty() || !self.nlri.is_empty() || self.mp_reach.is_some() {
            return None;
        }
        match self.mp_unreach {
            Some(u) => u.is_empty().then_some(u.afi()),
            None => (self.attrs_len == 0).then_some(AFI_IPV4),
        }
    }

    /// Whether any prefix is announced (in `nlri` or `mp_reach`), before treat-as-withdraw.
    pub fn announces(&self) -> bool {
        !self.nlri.is_empty() || self.mp_reach.is_some_and(|m| !m.nlri.is_empty())
    }
}

/// A parsed MP_REACH_NLRI (RFC 4760) of a supported family.
#[derive(Clone, Copy, Debug)]
pub struct MpReach<'a> {
    /// AFI (1 or 2).
    pub afi: u16,
    /// SAFI (1).
    pub safi: u8,
    /// The global next hop (first 16 bytes for a 32-byte IPv6 next hop with link-local;
    /// 4 bytes for IPv4).
    pub next_hop: IpAddr,
    /// Link-local next hop when 32 bytes were given.
    pub link_local: Option<Ipv6Addr>,
    /// The announced prefixes, of `afi`.
    pub nlri: Nlri<'a>,
}

fn supported_family(afi: u16, safi: u8) -> bool {
    safi == SAFI_UNICAST && (afi == AFI_IPV4 || afi == AFI_IPV6)
}

fn invalid_network() -> Notification {
    Notification::new(ERR_UPDATE, 10, &[])
}

/// MP_REACH_NLRI value -> Ok(None) for an unsupported family; Err 3/9 (data the attribute) if
/// the structure or the next hop length is wrong, 3/10 if the NLRI is.
fn parse_mp_reach<'a>(v: &'a [u8], whole: &[u8]) -> Result<Option<MpReach<'a>>, Notification> {
    let err = || Notification::new(ERR_UPDATE, 9, whole);
    let mut r = Reader::new(v);
    let (Some(afi), Some(safi)) = (r.u16(), r.u8()) else {
        return Err(err());
    };
    if !supported_family(afi, safi) {
        return Ok(None);
    }
    let nh_len = r.u8().ok_or_else(err)?;
    let nh = r.take(usize::from(nh_len)).ok_or_else(err)?;
    r.u8().ok_or_else(err)?; // reserved
    let (next_hop, link_local) = match (afi, nh.len()) {
        (AFI_IPV4, 4) => (IpAddr::V4(Ipv4Addr::from(be32(nh).ok_or_else(err)?)), None),
        (AFI_IPV6, 16) => {
            let a: [u8; 16] = nh.try_into().map_err(|_| err())?;
            (IpAddr::V6(a.into()), None)
        }
        (AFI_IPV6, 32) => {
            let (g, l) = nh.split_at(16);
            let g: [u8; 16] = g.try_into().map_err(|_| err())?;
            let l: [u8; 16] = l.try_into().map_err(|_| err())?;
            (IpAddr::V6(g.into()), Some(l.into()))
        }
        _ => return Err(err()),
    };
    let nlri = Nlri::new(afi, r.rest()).map_err(|_| invalid_network())?;
    Ok(Some(MpReach {
        afi,
        safi,
        next_hop,
        link_local,
        nlri,
    }))
}

/// MP_UNREACH_NLRI value -> Ok(None) for an unsupported family; Err as for MP_REACH.
fn parse_mp_unreach<'a>(v: &'a [u8], whole: &[u8]) -> Result<Option<Nlri<'a>>, Notification> {
    let mut r = Reader::new(v);
    let (Some(afi), Some(safi)) = (r.u16(), r.u8()) else {
        return Err(Notification::new(ERR_UPDATE, 9, whole));
    };
    if !supported_family(afi, safi) {
        return Ok(None);
    }
    Nlri::new(afi, r.rest())
        .map(Some)
        .map_err(|_| invalid_network())
}

/// Record the first treat-as-withdraw reason.
fn taw(u: &mut Update<'_>, why: &'static str) {
    u.treat_as_withdraw.get_or_insert(why);
}

/// Whether `flags` has the Optional and Transitive bits an attribute must have.
fn flags_are(flags: u8, optional: bool, transitive: bool) -> bool {
    (flags & FLAG_OPTIONAL != 0) == optional && (flags & FLAG_TRANSITIVE != 0) == transitive
}

/// Parse an UPDATE's body (the bytes after the 19-byte header).
///
/// `four_octet_as`: whether both sides announced the 4-octet AS capability (AS_PATH carries
/// 4-byte ASNs; otherwise 2-byte, and an AS4_PATH is merged in per RFC 6793 §4.2.3).
///
/// Session reset (`Err`):
/// - Withdrawn Routes Length, Total Path Attribute Length, or an attribute's length
///   overrunning its enclosure: 3/1 Malformed Attribute List.
/// - A malformed prefix in Withdrawn Routes, NLRI, MP_REACH or MP_UNREACH: 3/10 Invalid
///   Network Field (RFC 7606 §5.3).
/// - MP_REACH / MP_UNREACH too short, or a next hop length other than 4 (IPv4) or 16/32
///   (IPv6): 3/9 Optional Attribute Error, data the attribute (RFC 7606 §7.11); their flags
///   not optional non-transitive: 3/4 Attribute Flags Error, data the attribute; either
///   repeated: 3/1.
/// - An unrecognised well-known (non-optional) attribute: 3/2, data the attribute.
///
/// Treat-as-withdraw (`Ok`, [`Update::treat_as_withdraw`] set): ORIGIN (length != 1 or value
/// above 2), AS_PATH (undefined segment type, zero-length segment, overrun), NEXT_HOP (length != 4),
/// MULTI_EXIT_DISC or LOCAL_PREF (length != 4), COMMUNITIES (length not a non-zero multiple of
/// 4, RFC 7606 §7.8), any of these with wrong Optional/Transitive flags; ORIGIN or AS_PATH
/// missing while prefixes are announced, NEXT_HOP missing while IPv4 NLRI is announced.
///
/// Attribute discard (`Ok`, counted in [`Update::discarded_attrs`]): ATOMIC_AGGREGATE (length
/// != 0), AGGREGATOR (length != 8 on 4-octet sessions, != 6 otherwise), AS4_PATH (malformed, or
/// with confederation segments), any of them with wrong flags; any repeated attribute other
/// than MP_REACH/MP_UNREACH (the first is kept). An AS4_PATH on a 4-octet session is ignored
/// (RFC 6793 §4.1). Unknown optional attributes are skipped, as are MP_REACH/MP_UNREACH of
/// families other than IPv4/IPv6 unicast.
pub fn parse_update(body: &[u8], four_octet_as: bool) -> Result<Update<'_>, Notification> {
    let malformed = || Notification::new(ERR_UPDATE, 1, &[]);
    let mut r = Reader::new(body);
    let wlen = r.u16().ok_or_else(malformed)?;
    let withdrawn = r.take(usize::from(wlen)).ok_or_else(malformed)?;
    let alen = r.u16().ok_or_else(malformed)?;
    let attr_bytes = r.take(usize::from(alen)).ok_or_else(malformed)?;
    let withdrawn = Nlri::new(AFI_IPV4, withdrawn).map_err(|_| invalid_network())?;
    let nlri = Nlri::new(AFI_IPV4, r.rest()).map_err(|_| invalid_network())?;

    let mut u = Update {
        withdrawn,
        nlri,
        attrs: Attrs::default(),
        mp_reach: None,
        mp_unreach: None,
        treat_as_withdraw: None,
        discarded_attrs: 0,
        attrs_len: usize::from(alen),
    };
    let mut seen = [0u64; 4];
    let mut as4_path = None;
    let asn_len = if four_octet_as { 4 } else { 2 };
    let mut a = Reader::new(attr_bytes);
    while !a.is_empty() {
        let at = a.rest();
        let (Some(flags), Some(ty)) = (a.u8(), a.u8()) else {
            return Err(malformed());
        };
        let len = if flags & FLAG_EXTENDED_LEN != 0 {
            a.u16()
        } else {
            a.u8().map(u16::from)
        }
        .ok_or_else(malformed)?;
        let v = a.take(usize::from(len)).ok_or_else(malformed)?;
        let whole = at.get(..at.len() - a.rest().len()).unwrap_or(at);

        let (word, bit) = (usize::from(ty / 64), 1u64 << (ty % 64));
        if seen[word] & bit != 0 {
            if ty == ATTR_MP_REACH || ty == ATTR_MP_UNREACH {
                return Err(malformed());
            }
            u.discarded_attrs += 1;
            continue;
        }
        seen[word] |= bit;

        match ty {
            ATTR_ORIGIN => match *v {
                _ if !flags_are(flags, false, true) => taw(&mut u, "ORIGIN flags wrong"),
                [o] if o <= 2 => u.attrs.origin = o,
                _ => taw(&mut u, "malformed ORIGIN"),
            },
            ATTR_AS_PATH => {
                if !flags_are(flags, false, true) {
                    taw(&mut u, "AS_PATH flags wrong");
                } else if let Some(p) = parse_as_path(v, asn_len) {
                    u.attrs.as_path = p;
                } else {
                    taw(&mut u, "malformed AS_PATH");
                }
            }
            ATTR_NEXT_HOP => match be32(v) {
                _ if !flags_are(flags, false, true) => taw(&mut u, "NEXT_HOP flags wrong"),
                Some(nh) => u.attrs.next_hop = Some(IpAddr::V4(Ipv4Addr::from(nh))),
                None => taw(&mut u, "malformed NEXT_HOP"),
            },
            ATTR_MED => match be32(v) {
                _ if !flags_are(flags, true, false) => taw(&mut u, "MULTI_EXIT_DISC flags wrong"),
                Some(m) => u.attrs.med = Some(m),
                None => taw(&mut u, "malformed MULTI_EXIT_DISC"),
            },
            ATTR_LOCAL_PREF => match be32(v) {
                _ if !flags_are(flags, false, true) => taw(&mut u, "LOCAL_PREF flags wrong"),
                Some(l) => u.attrs.local_pref = Some(l),
                None => taw(&mut u, "malformed LOCAL_PREF"),
            },
            ATTR_ATOMIC_AGGREGATE => {
                if flags_are(flags, false, true) && v.is_empty() {
                    u.attrs.atomic_aggregate = true;
                } else {
                    u.discarded_attrs += 1;
                }
            }
            // Well-formed AGGREGATORs are not kept; malformed ones are counted.
            ATTR_AGGREGATOR if !flags_are(flags, true, true) || v.len() != 2 + asn_len + 2 => {
                u.discarded_attrs += 1;
            }
            ATTR_AGGREGATOR => {}
            ATTR_COMMUNITIES => {
                if !flags_are(flags, true, true) {
                    taw(&mut u, "COMMUNITIES flags wrong");
                } else if v.is_empty() || v.len() % 4 != 0 {
                    taw(&mut u, "malformed COMMUNITIES");
                } else {
                    u.attrs.communities = v
                        .chunks_exact(4)
                        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
                        .collect();
                }
            }
            ATTR_MP_REACH | ATTR_MP_UNREACH => {
                if !flags_are(flags, true, false) {
                    return Err(Notification::new(ERR_UPDATE, 4, whole));
                }
                if ty == ATTR_MP_REACH {
                    u.mp_reach = parse_mp_reach(v, whole)?;
                } else {
                    u.mp_unreach = parse_mp_unreach(v, whole)?;
                }
            }
            ATTR_AS4_PATH => {
                if four_octet_as {
                    // RFC 6793 §4.1: between NEW speakers AS4_PATH is not used; ignore it.
                } else {
                    match parse_as_path(v, 4) {
                        Some(p)
                            if flags_are(flags, true, true)
                                && !p.segments.iter().any(|s| s.kind.is_confed()) =>
                        {
                            as4_path = Some(p)
                        }
                        _ => u.discarded_attrs += 1,
                    }
                }
            }
            _ if flags & FLAG_OPTIONAL == 0 => {
                return Err(Notification::new(ERR_UPDATE, 2, whole));
            }
            _ => {} // unknown optional: skipped
        }
    }

    let has = |ty: u8| seen[usize::from(ty / 64)] & (1u64 << (ty % 64)) != 0;
    if let Some(as4) = as4_path {
        if has(ATTR_AS_PATH) && u.treat_as_withdraw.is_none() {
            u.attrs.as_path = merge_as4_path(&u.attrs.as_path, &as4);
        }
    }
    if u.announces() {
        if !has(ATTR_ORIGIN) {
            taw(&mut u, "missing ORIGIN");
        }
        if !has(ATTR_AS_PATH) {
            taw(&mut u, "missing AS_PATH");
        }
        if !u.nlri.is_empty() && !has(ATTR_NEXT_HOP) {
            taw(&mut u, "missing NEXT_HOP");
        }
    }
    Ok(u)
}

// ---------------------------------------------------------------------------------------------
// UPDATE encoding

/// Append an attribute, with the extended length flag when the value needs it.
fn put_attr(out: &mut Vec<u8>, flags: u8, ty: u8, value: &[u8]) {
    if value.len() > 255 {
        out.extend_from_slice(&[flags | FLAG_EXTENDED_LEN, ty]);
        let len = u16::try_from(value.len()).unwrap_or(u16::MAX);
        out.extend_from_slice(&len.to_be_bytes());
    } else {
        out.extend_from_slice(&[flags, ty, value.len() as u8]);
    }
    out.extend_from_slice(value);
}

/// AS_PATH value with `asn_len`-byte ASNs (ASNs above 65535 as AS_TRANS when 2), segments of
/// more than 255 ASNs split; `skip_confed` leaves confederation segments out (for AS4_PATH).
fn as_path_value(p: &AsPath, asn_len: usize, skip_confed: bool) -> Vec<u8> {
    let mut v = Vec::new();
    for s in &p.segments {
        if skip_confed && s.kind.is_confed() {
            continue;
        }
        for chunk in s.asns.chunks(255) {
            v.extend_from_slice(&[s.kind.code(), chunk.len() as u8]);
            for &a in chunk {
                if asn_len == 4 {
                    v.extend_from_slice(&a.to_be_bytes());
                } else {
                    let a = u16::try_from(a).unwrap_or(AS_TRANS as u16);
                    v.extend_from_slice(&a.to_be_bytes());
                }
            }
        }
    }
    v
}

/// The path attributes in type order; NEXT_HOP only when `next_hop` is given.
fn encode_attrs(attrs: &Attrs, next_hop: Option<Ipv4Addr>, four_octet_as: bool) -> Vec<u8> {
    let mut out = Vec::new();
    put_attr(&mut out, FLAG_TRANSITIVE, ATTR_ORIGIN, &[attrs.origin]);
    let asn_len = if four_octet_as { 4 } else { 2 };
    put_attr(
        &mut out,
        FLAG_TRANSITIVE,
        ATTR_AS_PATH,
        &as_path_value(&attrs.as_path, asn_len, false),
    );
    if let Some(nh) = next_hop {
        put_attr(&mut out, FLAG_TRANSITIVE, ATTR_NEXT_HOP, &nh.octets());
    }
    if let Some(med) = attrs.med {
        put_attr(&mut out, FLAG_OPTIONAL, ATTR_MED, &med.to_be_bytes());
    }
    if let Some(lp) = attrs.local_pref {
        put_attr(
            &mut out,
            FLAG_TRANSITIVE,
            ATTR_LOCAL_PREF,
            &lp.to_be_bytes(),
        );
    }
    if attrs.atomic_aggregate {
        put_attr(&mut out, FLAG_TRANSITIVE, ATTR_ATOMIC_AGGREGATE, &[]);
    }
    if !attrs.communities.is_empty() {
        let v: Vec<u8> = attrs
            .communities
            .iter()
            .flat_map(|c| c.to_be_bytes())
            .collect();
        put_attr(
            &mut out,
            FLAG_OPTIONAL | FLAG_TRANSITIVE,
            ATTR_COMMUNITIES,
            &v,
        );
    }
    let needs_as4 = !four_octet_as
        && attrs
            .as_path
            .segments
            .iter()
            .any(|s| !s.kind.is_confed() && s.asns.iter().any(|&a| a > 0xffff));
    if needs_as4 {
        put_attr(
            &mut out,
            FLAG_OPTIONAL | FLAG_TRANSITIVE,
            ATTR_AS4_PATH,
            &as_path_value(&attrs.as_path, 4, true),
        );
    }
    out
}

/// Which field a run of messages fills with prefixes.
enum Field<'a> {
    /// Withdrawn Routes (IPv4).
    Withdrawn,
    /// NLRI (IPv4) after these attributes.
    Nlri(&'a [u8]),
    /// MP_UNREACH_NLRI (IPv6).
    MpUnreach,
    /// MP_REACH_NLRI (IPv6) with this next hop, after these attributes.
    MpReach(&'a [u8], Ipv6Addr),
}

impl Field<'_> {
    /// Bytes written after the prefixes.
    fn trailer(&self) -> usize {
        match self {
            Field::Withdrawn => 2,
            _ => 0,
        }
    }

    /// Start a message; returns (message start, prefixes start).
    fn open(&self, out: &mut Vec<u8>) -> (usize, usize) {
        let start = begin(out, MSG_UPDATE);
        match self {
            Field::Withdrawn => out.extend_from_slice(&[0, 0]),
            Field::Nlri(attrs) => {
                out.extend_from_slice(&[0, 0]);
                out.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
                out.extend_from_slice(attrs);
            }
            Field::MpUnreach => {
                out.extend_from_slice(&[0, 0, 0, 0]);
                out.extend_from_slice(&[FLAG_OPTIONAL | FLAG_EXTENDED_LEN, ATTR_MP_UNREACH, 0, 0]);
                out.extend_from_slice(&AFI_IPV6.to_be_bytes());
                out.push(SAFI_UNICAST);
            }
            Field::MpReach(attrs, nh) => {
                out.extend_from_slice(&[0, 0, 0, 0]);
                out.extend_from_slice(attrs);
                out.extend_from_slice(&[FLAG_OPTIONAL | FLAG_EXTENDED_LEN, ATTR_MP_REACH, 0, 0]);
                out.extend_from_slice(&AFI_IPV6.to_be_bytes());
                out.extend_from_slice(&[SAFI_UNICAST, 16]);
                out.extend_from_slice(&nh.octets());
                out.push(0);
            }
        }
        (start, out.len())
    }

    /// Patch the lengths of the message started by [`Field::open`] and finish it.
    fn close(&self, out: &mut Vec<u8>, start: usize, prefixes: usize) {
        let n = out.len() - prefixes;
        let put = |out: &mut Vec<u8>, at: usize, v: usize| {
            out[at..at + 2].copy_from_slice(&(v as u16).to_be_bytes());
        };
        let body = start + HEADER_LEN;
        match self {
            Field::Withdrawn => {
                put(out, body, n);
                out.extend_from_slice(&[0, 0]);
            }
            Field::Nlri(_) => {}
            Field::MpUnreach => {
                put(out, body + 2, 4 + 3 + n);
                put(out, body + 6, 3 + n);
            }
            Field::MpReach(attrs, _) => {
                let mp_len = 5 + 16 + n;
                put(out, body + 2, attrs.len() + 4 + mp_len);
                put(out, body + 4 + attrs.len() + 2, mp_len);
            }
        }
        finish(out, start);
    }
}

/// The wire form of a prefix: length byte (clamped to the family's maximum), then the
/// address bytes it needs with host bits cleared. Returns the buffer and its used length.
fn prefix_bytes(addr: IpAddr, len: u8) -> ([u8; 17], usize) {
    let mut b = [0u8; 17];
    let (len, bits) = match addr {
        IpAddr::V4(a) => {
            let len = len.min(32);
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            b[1..5].copy_from_slice(&(u32::from(a) & mask).to_be_bytes());
            (len, len)
        }
        IpAddr::V6(a) => {
            let len = len.min(128);
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            b[1..17].copy_from_slice(&(u128::from(a) & mask).to_be_bytes());
            (len, len)
        }
    };
    b[0] = len;
    (b, 1 + usize::from(bits).div_ceil(8))
}

/// Fill messages of `field` with `prefixes`, starting a new one whenever the next prefix
/// would take a message past [`MAX_MESSAGE_LEN`] (every message holds at least one prefix).
fn emit<'p>(out: &mut Vec<u8>, field: &Field, prefixes: impl Iterator<Item = &'p (IpAddr, u8)>) {
    let mut cur: Option<(usize, usize)> = None;
    for &(addr, len) in prefixes {
        let (b, n) = prefix_bytes(addr, len);
        if let Some((start, pfx)) = cur {
            if out.len() - start + n + field.trailer() > MAX_MESSAGE_LEN && out.len() > pfx {
                field.close(out, start, pfx);
                cur = None;
            }
        }
        if cur.is_none() {
            cur = Some(field.open(out));
        }
        out.extend_from_slice(&b[..n]);
    }
    if let Some((start, pfx)) = cur {
        field.close(out, start, pfx);
    }
}

/// Append whole UPDATE messages (header included) announcing `announce` with `attrs` and
/// withdrawing `withdraw`, split into as many messages as needed to stay <= 4096 bytes each
/// (attributes are repeated in each). Withdrawals come first, then announcements.
///
/// IPv4 prefixes go in the classic fields, with `attrs.next_hop` as NEXT_HOP (which must be
/// IPv4; any other value leaves NEXT_HOP out). IPv6 ones go in MP_REACH_NLRI with next hop
/// `v6_next_hop` (else `attrs.next_hop` if IPv6, else `::`) and MP_UNREACH_NLRI. With
/// `four_octet_as` false, ASNs above 65535 are sent as AS_TRANS plus an AS4_PATH. Prefix
/// lengths beyond the family's maximum are clamped. Nothing is appended for empty lists.
pub fn encode_updates(
    out: &mut Vec<u8>,
    attrs: &Attrs,
    v6_next_hop: Option<Ipv6Addr>,
    announce: &[(IpAddr, u8)],
    withdraw: &[(IpAddr, u8)],
    four_octet_as: bool,
) {
    let v4 = |p: &&(IpAddr, u8)| p.0.is_ipv4();
    let v6 = |p: &&(IpAddr, u8)| p.0.is_ipv6();
    emit(out, &Field::Withdrawn, withdraw.iter().filter(v4));
    emit(out, &Field::MpUnreach, withdraw.iter().filter(v6));
    if announce.iter().any(|p| p.0.is_ipv4()) {
        let nh = match attrs.next_hop {
            Some(IpAddr::V4(a)) => Some(a),
            _ => None,
        };
        let block = encode_attrs(attrs, nh, four_octet_as);
        emit(out, &Field::Nlri(&block), announce.iter().filter(v4));
    }
    if announce.iter().any(|p| p.0.is_ipv6()) {
        let nh = v6_next_hop.unwrap_or(match attrs.next_hop {
            Some(IpAddr::V6(a)) => a,
            _ => Ipv6Addr::UNSPECIFIED,
        });
        let block = encode_attrs(attrs, None, four_octet_as);
        emit(out, &Field::MpReach(&block, nh), announce.iter().filter(v6));
    }
}

/// Append the End-of-RIB marker (RFC 4724) of `afi`: an empty UPDATE for IPv4, an UPDATE with
/// only an empty MP_UNREACH_NLRI (SAFI unicast) otherwise.
pub fn encode_end_of_rib(out: &mut Vec<u8>, afi: u16) {
    let start = begin(out, MSG_UPDATE);
    if afi == AFI_IPV4 {
        out.extend_from_slice(&[0, 0, 0, 0]);
    } else {
        out.extend_from_slice(&[0, 0, 0, 6, FLAG_OPTIONAL, ATTR_MP_UNREACH, 3]);
        out.extend_from_slice(&afi.to_be_bytes());
        out.push(SAFI_UNICAST);
    }
    finish(out, start);
}
