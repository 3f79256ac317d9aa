//! The error type shared by every packet view in this crate.

use core::fmt;

/// Why a buffer was rejected by a validating constructor, `parse` or `emit`.
///
/// Each variant names one precise defect so that a dataplane can count drops
/// per cause instead of lumping them together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer ends before a fixed header, or before a length the packet
    /// itself announces (IHL, data offset, extension-header or option length).
    Truncated,
    /// The IP version nibble does not match the view (4 for IPv4, 6 for IPv6).
    BadVersion,
    /// A header-length field is below its minimum (IPv4 IHL < 5, TCP data offset < 5).
    BadHeaderLen,
    /// The IPv4 total length is shorter than the header or longer than the buffer.
    BadTotalLen,
    /// A payload-length field (IPv6 payload length, UDP length) disagrees with the buffer.
    BadLength,
    /// More IPv6 extension headers than the configured limit.
    TooManyExtHeaders,
    /// More than two stacked VLAN tags (802.1Q / 802.1ad).
    TooManyVlanTags,
    /// More options (NDP) than the parser is willing to walk.
    TooManyOptions,
    /// An option is malformed: zero or impossible length, or an unexpected size
    /// for its type.
    BadOption,
    /// A checksum did not verify.
    BadChecksum,
    /// The packet is well formed but of a kind this crate does not handle
    /// (e.g. ARP for a non-Ethernet/IPv4 pair, an ICMPv6 type that is not NDP).
    Unsupported,
    /// The packet violates its protocol in a way not covered above
    /// (e.g. Hop-by-Hop header not first, NDP message with a non-zero code).
    Malformed,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let msg = match self {
            Error::Truncated => {
                "packet truncated: buffer shorter than the header or a length it announces"
            }
            Error::BadVersion => "wrong IP version nibble for this header",
            Error::BadHeaderLen => {
                "header length field below its minimum (IPv4 IHL or TCP data offset < 5)"
            }
            Error::BadTotalLen => {
                "IPv4 total length shorter than the header or longer than the frame"
            }
            Error::BadLength => {
                "length field (IPv6 payload length or UDP length) does not fit the buffer"
            }
            Error::TooManyExtHeaders => {
                "too many IPv6 extension headers; raise the limit or drop the packet"
            }
            Error::TooManyVlanTags => "more than two stacked VLAN tags",
            Error::TooManyOptions => "too many options in one message",
            Error::BadOption => "malformed option (zero or impossible length)",
            Error::BadChecksum => "checksum does not verify",
            Error::Unsupported => "well-formed packet of a kind this parser does not handle",
            Error::Malformed => "packet violates its protocol specification",
        };
        f.write_str(msg)
    }
}

impl std::error::Error for Error {}

/// Result alias used throughout the crate.
pub type Result<T> = core::result::Result<T, Error>;
