//! Ports of the router's own addresses that a feature claims from the kernel.
//!
//! A port whose XDP program passes the router's own traffic to the kernel (AF_XDP) must be
//! told which of it belongs to the fast path instead: NAT shares the router's addresses
//! with the kernel (masquerade, port forwards), and the replies of its flows arrive
//! addressed to them. NAT claims each external port (or ICMP echo identifier) while a
//! mapping holds it, and each port a port forward listens on; the port sends traffic to a
//! claimed port of an address marked as shared to the fast path, and the rest to the
//! kernel. Claims are written without a syscall (shared memory with the XDP program), so
//! a worker makes them as it maps.

/// Where a port takes NAT's claims.
pub trait PortClaims: Send + Sync {
    /// Claim (`on`) or release port `port` of IP protocol `proto` (TCP, UDP, or ICMP for
    /// an echo identifier): a mapping's (`forward` false) or a port forward's.
    fn set(&self, proto: u8, port: u16, forward: bool, on: bool);
    /// Release every port forward's claim (before the current forwards claim theirs).
    fn clear_forwards(&self);
}
