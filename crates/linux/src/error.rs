//! What can go wrong talking to the kernel.

use std::io;
use std::time::Duration;

/// A failure of the netlink mirror; each names the operation and carries the OS error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `socket(AF_NETLINK, NETLINK_ROUTE)` or `bind` failed.
    #[error("cannot open a NETLINK_ROUTE socket: {0}")]
    Open(#[source] io::Error),
    /// Joining a multicast group failed.
    #[error("cannot subscribe to rtnetlink group {group}: {source}")]
    Subscribe {
        /// The `RTNLGRP_*` name.
        group: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// Neither `SO_RCVBUFFORCE` nor `SO_RCVBUF` took the requested size.
    #[error("cannot set the netlink receive buffer to {bytes} bytes (raise net.core.rmem_max or run with CAP_NET_ADMIN): {source}")]
    RcvBuf {
        /// The requested size.
        bytes: usize,
        /// The OS error from `SO_RCVBUF`.
        source: io::Error,
    },
    /// Another socket option failed.
    #[error("cannot set socket option {option}: {source}")]
    SockOpt {
        /// The option's name.
        option: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// Sending a request failed.
    #[error("cannot send the {what} request to the kernel: {source}")]
    Send {
        /// The request, e.g. "RTM_GETROUTE dump".
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// Receiving from a netlink socket failed.
    #[error("cannot receive {what} from the kernel: {source}")]
    Recv {
        /// What was being read.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The kernel answered a request with an error.
    #[error("the kernel rejected the {what} request: {source}")]
    Kernel {
        /// The request.
        what: &'static str,
        /// The errno the kernel returned.
        source: io::Error,
    },
    /// The kernel did not answer a request in time.
    #[error("no answer from the kernel to the {what} request within {timeout:?}")]
    Timeout {
        /// The request.
        what: &'static str,
        /// How long we waited.
        timeout: Duration,
    },
    /// A dump kept being interrupted by concurrent changes (`NLM_F_DUMP_INTR`).
    #[error("the {what} dump was interrupted by concurrent changes {attempts} times in a row; try again when the routing churn calms down")]
    DumpInterrupted {
        /// The dump.
        what: &'static str,
        /// How many attempts were made.
        attempts: u32,
    },
    /// `poll(2)` on the notification socket failed.
    #[error("poll on the netlink notification socket failed: {0}")]
    Poll(#[source] io::Error),
}

impl Error {
    /// The OS error behind this failure (for a rejected request, the kernel's errno).
    pub fn os_error(&self) -> Option<&io::Error> {
        match self {
            Error::Open(e) | Error::Poll(e) => Some(e),
            Error::Subscribe { source, .. }
            | Error::RcvBuf { source, .. }
            | Error::SockOpt { source, .. }
            | Error::Send { source, .. }
            | Error::Recv { source, .. }
            | Error::Kernel { source, .. } => Some(source),
            Error::Timeout { .. } | Error::DumpInterrupted { .. } => None,
        }
    }
}
