//! What the daemon's threads share with the API: the mirror, port facts and counters, the
//! workers' counters, the config service, trace, capture, BGP status and features. The
//! daemon builds it; the API (`http`, `api`, `metrics`) reads it. Nothing here imports
//! them back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use dataplane::worker;

use crate::capture::CaptureService;
use crate::sync::Sync;
use crate::trace::TraceService;

/// Per-port counters the worker publishes (single writer) for `show interfaces`.
#[derive(Default)]
pub struct PortCounters {
    /// Frames received.
    pub rx_packets: AtomicU64,
    /// Bytes received.
    pub rx_bytes: AtomicU64,
    /// Frames transmitted.
    pub tx_packets: AtomicU64,
    /// Bytes transmitted.
    pub tx_bytes: AtomicU64,
    /// Receive drops (no buffer, too big, kernel ring drops).
    pub rx_drops: AtomicU64,
    /// Transmit errors.
    pub tx_errors: AtomicU64,
    /// Partial checksums (the sender's checksum offload) the port completed.
    pub rx_csum_completed: AtomicU64,
    /// Super-frames (the sender's segmentation offload, GRO) the port cut into segments.
    pub rx_gso_split: AtomicU64,
}

/// Static facts about a port, for `show interfaces`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PortFacts {
    /// Port id.
    pub port: u16,
    /// Interface name.
    pub name: String,
    /// Linux ifindex.
    pub ifindex: u32,
    /// Backend in use (with the XDP mode for AF_XDP).
    pub backend: String,
}

/// Everything the API needs to answer.
pub struct Shared {
    /// Mirror state (control plane only; the workers never touch this lock).
    pub sync: Mutex<Sync>,
    /// Port facts.
    pub ports: Vec<PortFacts>,
    /// The VLAN sub-interfaces' names (their port ids follow the ports').
    pub subifs: Vec<String>,
    /// Port counters, per worker (each worker owns one queue of every port).
    pub port_counters: Vec<Arc<Vec<PortCounters>>>,
    /// The worker's shared state (counters).
    pub workers: Vec<Arc<worker::WorkerShared>>,
    /// Daemon start.
    pub started: Instant,
    /// Version and build commit.
    pub version: String,
    /// The running config, its history, and config transactions.
    pub config: Mutex<crate::configsvc::ConfigService>,
    /// How long netlink changes wait before the FIB has them.
    pub sync_lag: SyncLag,
    /// Packet trace (`trace add|show|clear`).
    pub trace: TraceService,
    /// Packet capture to pcap.
    pub capture: CaptureService,
    /// The native BGP speaker's status, when `[bgp]` is configured.
    pub bgp: std::sync::OnceLock<Arc<bgp::speaker::Status>>,
    /// When the speaker's last batch of changes was in the FIB (CLOCK_MONOTONIC, ns; 0:
    /// never). Stored before the speaker's per-neighbour prefix counts move, so a reader
    /// that sees the counts it waits for gets the time its FIB changes completed.
    pub bgp_fib_done_ns: AtomicU64,
    /// Packets held while their next hop resolved.
    pub glean: crate::glean::GleanStats,
    /// The fast path's features (uRPF, ...) and which interfaces have them.
    pub features: crate::features::Features,
    /// The IKE daemon, once `[[ipsec.peer]]`s are configured.
    pub ike: crate::ikesvc::IkeService,
    /// The API's connections: open, refused over a cap, timed out (per listener).
    pub api_conns: crate::listener::ConnStats,
    /// The interfaces the running config holds down (`enabled = false`): why a link is
    /// administratively down ([`crate::configsvc::ConfigService::held_down`]).
    pub held_down: Arc<arc_swap::ArcSwap<Vec<String>>>,
}

impl Shared {
    /// One counter of port `port`, summed over the workers (each serves one queue of every
    /// port).
    pub fn port_total(&self, port: u16, field: fn(&PortCounters) -> &AtomicU64) -> u64 {
        self.port_counters
            .iter()
            .filter_map(|w| w.get(port as usize))
            .map(|c| field(c).load(Ordering::Relaxed))
            .sum()
    }

    /// What the fast path received and sent on sub-interface `k` (its index among them),
    /// summed over the workers.
    pub fn subif_total(&self, k: usize) -> dataplane::counters::SubifCounts {
        let mut c = dataplane::counters::SubifCounts::default();
        for w in &self.workers {
            c.merge(&w.counters.subif(k));
        }
        c
    }
}

/// How long netlink changes wait before the FIB has them, measured by the control loop
/// for each batch it reads.
#[derive(Default, Debug)]
pub struct SyncLag {
    /// The last batch's delay, ns.
    pub last_ns: AtomicU64,
    /// The largest, ns.
    pub max_ns: AtomicU64,
}

impl SyncLag {
    /// Record one batch (the control loop is the only writer).
    pub fn record(&self, ns: u64) {
        self.last_ns.store(ns, Ordering::Relaxed);
        self.max_ns.fetch_max(ns, Ordering::Relaxed);
    }
}

impl crate::ikesvc::HasFeatures for Shared {
    fn features(&self) -> &crate::features::Features {
        &self.features
    }
}
