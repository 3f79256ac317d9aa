//! Ferrouter's built-in traffic generator and RFC 2544 engine.
//!
//! The generator runs on one core over any pair of [`dataplane::worker::Port`]s (AF_XDP,
//! AF_PACKET, memif, or the in-memory [`testing::loop_pair`]) and one packet memory:
//!
//! - [`profile`]: frame-size/family mixes (`ipv4-64`, `imix2`, `eantc1`, ...), L1 rate
//!   arithmetic ([`gbps_l1`], [`line_rate_pps`]);
//! - [`flows`]: the distinct 5-tuples each direction and family cycles through;
//! - [`frame`]: frame templates with incremental checksums and the 12-byte signature
//!   (magic, stream, sequence, timestamp) every frame carries;
//! - [`generator`]: paced transmission and exact receive accounting of a trial
//!   ([`Generator::run_trial`] → [`TrialResult`]), per traffic class (DSCP) when the
//!   traffic has classes ([`TrafficClass`]);
//! - [`rfc2544`]: throughput search, loss at load and latency over any trial closure;
//! - [`mlrsearch`]: the noise-tolerant throughput search (NDR and PDR from repeated
//!   trials, short exploratory trials first, underruns retried) [`rfc2544`] can use;
//! - [`sweep`]: traffic to every route of a large table, per-route arrival port and
//!   convergence time (which link each destination's traffic leaves the DUT on, and since
//!   when), and loss per destination;
//! - [`compare`]: repetition and comparison for every bench that measures DUTs against
//!   each other: interleaved runs, each DUT's spread and CV, ratios pair by pair;
//! - [`stateful`]: emulated TCP clients and servers (and UDP request/response pairs)
//!   opening connections through the DUT at a set rate, with exact counts of completed,
//!   failed and reset connections and transaction latency;
//! - [`latency`], [`clock`]: the histogram and the time sources;
//! - [`testing`]: fixtures for tests (in-memory port pair, rate-limited virtual DUT).
//!
//! Rates given to a trial are **per direction**; rates in results are aggregates.
//!
//! ```
//! use std::time::Duration;
//! use dataplane::Arena;
//! use tester::clock::VirtualClock;
//! use tester::flows::{AddrRange, Endpoints};
//! use tester::testing::loop_pair;
//! use tester::{DirectionConfig, Generator, Profile, TrafficConfig, TrialConfig};
//!
//! let dir = DirectionConfig {
//!     src_mac: [2, 0, 0, 0, 0, 1],
//!     dst_mac: [2, 0, 0, 0, 0, 2],
//!     v4: Some(Endpoints::new(
//!         AddrRange::single("198.18.0.2".parse().unwrap()),
//!         vec!["198.19.0.0/24".parse().unwrap()],
//!     )),
//!     v6: None,
//! };
//! let mut traffic = TrafficConfig::new(Profile::parse("imix1").unwrap(), dir, None);
//! traffic.flows = 100;
//! let mut gen = Generator::new(&traffic).unwrap();
//! let (mut p0, mut p1) = loop_pair(4096);
//! let mut mem = Arena::new(8192);
//! let trial = TrialConfig::new(1_000_000.0, Duration::from_millis(10));
//! let r = gen
//!     .run_trial_with_clock(&mut mem, &mut p0, &mut p1, &trial, &mut VirtualClock::new(0, 100))
//!     .unwrap();
//! assert_eq!((r.tx, r.rx, r.lost), (10_000, 10_000, 0));
//! ```

#![deny(missing_docs)]

pub mod clock;
pub mod compare;
pub mod flows;
pub mod frame;
pub mod generator;
pub mod latency;
pub mod mlrsearch;
pub mod profile;
pub mod rfc2544;
pub mod stateful;
pub mod sweep;
pub mod testing;

pub use clock::{Clock, MonotonicClock, VirtualClock};
pub use flows::{AddrRange, Endpoints, FiveTuple, FlowSet, PortRange, Prefix};
pub use frame::{Signature, MAGIC, SIGNATURE_LEN};
pub use generator::{
    class_cycle, ClassResult, DirectionConfig, Generator, StreamResult, TrafficClass,
    TrafficConfig, TrialConfig, TrialResult,
};
pub use latency::{LatencyHistogram, LatencyStats};
pub use mlrsearch::{LossGoal, MlrConfig};
pub use profile::{gbps_l1, line_rate_pps, Family, FrameKind, MixEntry, Profile};
pub use rfc2544::{Rfc2544Config, Rfc2544Report};
pub use stateful::{Proto, Stateful, StatefulConfig, StatefulResult};
pub use sweep::{
    run_receiver, run_sender, verify, SendLimit, SenderStats, SweepConfig, SweepCounts, Tracker,
    VerifyPlan, VerifyReport,
};
