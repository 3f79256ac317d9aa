//! `ferrouter-lab tester`: the traffic generator on its own, on any two ports (AF_XDP,
//! AF_PACKET, memif), against any device: one trial at a fixed rate, or the "as fast as the
//! port allows" rate, with exact loss, reordering and latency accounting.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use dataplane::Arena;
pub use ports::AnyPort;
use tester::flows::{AddrRange, Endpoints, Prefix};
use tester::{DirectionConfig, Generator, Profile, TrafficConfig, TrialConfig, TrialResult};

/// Open a tester port from `spec`: `af_xdp:IFNAME`, `af_packet:IFNAME` or
/// `memif:SOCKET[:client|server[:ID]]` (client by default, as DPDK); with the interface's
/// MAC (none for memif).
pub fn open_port(spec: &str, port_id: u16) -> Result<(AnyPort, Option<[u8; 6]>)> {
    let (kind, rest) = spec
            .split_once(':')
            .with_context(|| format!("port {spec:?}: expected af_xdp:IFNAME, af_packet:IFNAME or memif:SOCKET[:client|server[:ID]]"))?;
    Ok(match kind {
        "af_xdp" => {
            let p = ports::AfXdp::open(rest, 0, port_id, ports::AfXdpOptions::default())
                .with_context(|| format!("opening AF_XDP on {rest}"))?;
            let mac = p.mac();
            (AnyPort::Xdp(Box::new(p)), Some(mac))
        }
        "af_packet" => {
            let opts = ports::AfPacketOptions {
                qdisc_bypass: true,
                ..Default::default()
            };
            let p = ports::AfPacket::open(rest, port_id, opts)
                .with_context(|| format!("opening AF_PACKET on {rest}"))?;
            let mac = p.mac();
            (AnyPort::Packet(Box::new(p)), Some(mac))
        }
        "memif" => {
            let mut parts = rest.split(':');
            let socket = PathBuf::from(parts.next().unwrap_or_default());
            let role = match parts.next() {
                None | Some("client") => ports::memif::MemifRole::Client,
                Some("server") => ports::memif::MemifRole::Server,
                Some(r) => {
                    bail!("port {spec:?}: memif role {r:?} is neither client nor server")
                }
            };
            let id = match parts.next() {
                None => 0,
                Some(n) => n
                    .parse()
                    .with_context(|| format!("port {spec:?}: memif id {n:?}"))?,
            };
            let mut m = ports::memif::Memif::open(
                port_id,
                ports::memif::MemifOptions {
                    socket: socket.clone(),
                    role,
                    id,
                    name: format!("tester{port_id}"),
                    ..Default::default()
                },
            )
            .with_context(|| format!("opening memif {}", socket.display()))?;
            m.wait_connected(Duration::from_secs(30))
                .with_context(|| format!("waiting for the memif peer on {}", socket.display()))?;
            (AnyPort::Memif(Box::new(m)), None)
        }
        _ => bail!("port {spec:?}: unknown backend {kind:?} (af_xdp, af_packet, memif)"),
    })
}

/// One standalone trial.
#[derive(Clone, Debug)]
pub struct Standalone {
    /// Port specs (sent on 0, received on 1; both ways with `bidirectional`).
    pub ports: [String; 2],
    /// Destination MACs of the frames sent on port 0 and port 1 (the DUT's ports).
    pub dst_macs: [[u8; 6]; 2],
    /// Source MACs (default: the interfaces' own; memif: 02:fe:00:00:ff:0a/0b).
    pub src_macs: [Option<[u8; 6]>; 2],
    /// Source address of each direction, per family.
    pub src: [Vec<IpAddr>; 2],
    /// Destination prefixes of each direction (either family).
    pub dst: [Vec<Prefix>; 2],
    /// Profile.
    pub profile: String,
    /// Flows per direction.
    pub flows: u32,
    /// Rate per direction, frames/s (`None`: as fast as the ports allow).
    pub rate_pps: Option<f64>,
    /// Seconds.
    pub duration: f64,
    /// Both directions.
    pub bidirectional: bool,
}

fn endpoints(src: &[IpAddr], dst: &[Prefix], v6: bool) -> Option<Endpoints> {
    let s = src.iter().find(|a| a.is_ipv6() == v6)?;
    let d: Vec<Prefix> = dst
        .iter()
        .filter(|p| p.addr.is_ipv6() == v6)
        .copied()
        .collect();
    (!d.is_empty()).then(|| Endpoints::new(AddrRange::single(*s), d))
}

/// Run the trial; the result has every count and rate.
pub fn run(s: &Standalone) -> Result<TrialResult> {
    let profile = Profile::parse(&s.profile)?;
    let (mut a, mac_a) = open_port(&s.ports[0], 0)?;
    let (mut b, mac_b) = open_port(&s.ports[1], 1)?;
    let macs = [
        s.src_macs[0]
            .or(mac_a)
            .unwrap_or(super::topo::TESTER_MEMIF_MAC[0]),
        s.src_macs[1]
            .or(mac_b)
            .unwrap_or(super::topo::TESTER_MEMIF_MAC[1]),
    ];
    let dir = |i: usize| DirectionConfig {
        src_mac: macs[i],
        dst_mac: s.dst_macs[i],
        v4: endpoints(&s.src[i], &s.dst[i], false),
        v6: endpoints(&s.src[i], &s.dst[i], true),
    };
    let mut traffic = TrafficConfig::new(profile, dir(0), s.bidirectional.then(|| dir(1)));
    traffic.flows = s.flows;
    let mut gen = Generator::new(&traffic)?;
    let mut mem = Arena::new(16384);
    // "As fast as the port allows": ask for far more than any port can take; the
    // generator sends what the port accepts and reports the rate it achieved.
    let rate = s.rate_pps.unwrap_or(100e6);
    let mut t = TrialConfig::new(rate, Duration::from_secs_f64(s.duration));
    t.bidirectional = s.bidirectional;
    t.drain = Duration::from_millis(500);
    t.max_lag = if s.rate_pps.is_none() {
        Duration::from_micros(100)
    } else {
        Duration::from_millis(5)
    };
    gen.run_trial(&mut mem, &mut a, &mut b, &t)
}
