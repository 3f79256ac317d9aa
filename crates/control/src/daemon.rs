//! `ferrouter run`: open the ports, mirror the kernel, forward, answer the control socket,
//! stop cleanly on SIGTERM/SIGINT.
//!
//! Threads: one worker (owns the ports, its packet memory and graph; never blocks on the
//! control side), the control loop (netlink mirror → FIB, punted glean packets → neighbour
//! resolution, interface updates, worker supervision) and the API listener.

use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use arc_swap::ArcSwap;
use dataplane::feature::{FeatureState, Registry};
use dataplane::punt::PuntConsumer;
use dataplane::worker::{self, WorkerExit, WorkerHandle};
use dataplane::{Arena, Graph, GraphConfig, Interfaces, Output, Reason, Vector};
use ports::{AfPacket, AfPacketOptions, AfXdp, AfXdpOptions, AnyPort};
use rustc_hash::FxHashMap;

use crate::capture::CaptureService;
use crate::config::{parse_mac, Backend, Config, MemifRole};
use crate::http;
use crate::state::{PortCounters, PortFacts, Shared};
use crate::sync::Sync;
use crate::trace::TraceService;
use dataplane::punt::{PuntPacket, PuntProducer};
use ports::memif::{Memif, MemifOptions};
use ports::tap::{derived_mac, Tap};

/// A port as the worker drives it: the backend, and for memif the TAP that is its face in
/// Linux (fed by the control loop).
pub struct LivePort {
    port: AnyPort,
    /// memif only: the port's name (the TAP's), the TAP's ifindex, and the role and socket
    /// for `show interfaces`.
    memif_face: Option<(String, u32, String)>,
}

impl LivePort {
    fn new(port: AnyPort) -> LivePort {
        LivePort {
            port,
            memif_face: None,
        }
    }
    /// How what the fast path punts from this port reaches the kernel.
    fn punt_path(&self) -> dataplane::interfaces::PuntPath {
        use dataplane::interfaces::PuntPath;
        match self.port {
            AnyPort::Packet(_) => PuntPath::KernelSawIt,
            AnyPort::Xdp(_) => PuntPath::Unreachable,
            AnyPort::Memif(_) => PuntPath::Queue,
        }
    }
    fn facts(&self, port: u16) -> PortFacts {
        let (name, ifindex, backend) = match (&self.memif_face, self.port.interface()) {
            (Some((name, ifindex, describe)), _) => (name.clone(), *ifindex, describe.clone()),
            (None, Some((name, ifindex))) => (name.to_string(), ifindex, self.port.backend()),
            (None, None) => (format!("port{port}"), 0, self.port.backend()),
        };
        PortFacts {
            port,
            name,
            ifindex,
            backend,
        }
    }
    /// Tell the XDP program which destinations are the router's own, and what of their
    /// traffic the fast path takes (NAT's ports, ESP).
    fn set_local_addrs(&mut self, addrs: &[IpAddr], share: ports::Share) {
        if let Err(e) = self.port.set_local_addrs_shared(addrs, share) {
            let name = self.port.interface().map_or("?", |(n, _)| n);
            tracing::warn!("updating local addresses of {name}: {e}");
        }
    }
}

impl dataplane::worker::Port<Arena> for LivePort {
    fn rx_burst(&mut self, mem: &mut Arena, v: &mut Vector) -> usize {
        self.port.rx_burst(mem, v)
    }
    fn tx_burst(&mut self, mem: &mut Arena, pkts: &[dataplane::Pkt]) -> usize {
        self.port.tx_burst(mem, pkts)
    }
    fn wait_fd(&self) -> std::os::fd::RawFd {
        dataplane::worker::Port::<Arena>::wait_fd(&self.port)
    }
    fn wakes_per_frame(&self) -> bool {
        dataplane::worker::Port::<Arena>::wakes_per_frame(&self.port)
    }
}

/// The daemon's FIB: tbl8 groups for IPv4 prefixes longer than /24 and for IPv6 (the
/// route-sync benchmark uses the same). Groups are committed lazily, so the maxima cost
/// address space, not memory: 2^17 IPv4 groups hold an Internet table of 6M routes with
/// 1 % longer than /24.
pub const FIB_CONFIG: fib::FibConfig = fib::FibConfig {
    max_tbl8_v4: 1 << 17,
    max_tbl8_v6: 1 << 18,
    max_readers: 8,
};

const PUNT_QUEUE: usize = 1024;
/// Finished trace records in flight per worker.
const TRACE_QUEUE: usize = 256;
/// Captured frames in flight per worker (2 KiB each); the control loop drains every few ms.
const CAPTURE_QUEUE: usize = 1024;
/// Frames from the kernel (TAPs) waiting for a worker to transmit them.
const INJECT_QUEUE: usize = 256;
fn write_sysctl(path: &str, value: &str) -> Result<()> {
    std::fs::write(path, value).with_context(|| format!("cannot set {path} = {value}"))
}

/// Kernel IP forwarding in this namespace must be off: every forwarded packet is the fast
/// path's, and the kernel only answers for the router itself.
fn kernel_forwarding_off() -> Result<()> {
    write_sysctl("/proc/sys/net/ipv4/ip_forward", "0")?;
    write_sysctl("/proc/sys/net/ipv6/conf/all/forwarding", "0")?;
    Ok(())
}

fn open_af_packet(name: &str, port: u16) -> Result<LivePort> {
    // No qdisc bypass: frames we send stay visible to tcpdump, as operators expect.
    let opts = AfPacketOptions {
        qdisc_bypass: false,
        ..AfPacketOptions::default()
    };
    Ok(LivePort::new(AnyPort::Packet(Box::new(
        AfPacket::open(name, port, opts).with_context(|| format!("cannot open port {name}"))?,
    ))))
}

/// Vectors of handed-off frames a worker takes per loop iteration, at most.
const HANDOFF_VECTORS: usize = 4;

/// Packet memory of a worker for the graph, the copying ports and the TAPs' frames; each
/// AF_XDP socket sharing it as its UMEM adds [`AfXdp::shared_frames`].
const WORKER_FRAMES: u32 = 8192;

/// Open every configured port for `workers` workers — AF_XDP first where `auto` allows
/// it, one socket per receive queue and worker — and return them as `[worker][port]`, with
/// each worker's packet memory. A worker's AF_XDP sockets all use its memory as their
/// UMEM (forwarding between them moves descriptors, not bytes); should the kernel refuse
/// that, a port falls back to a UMEM of its own, which copies. Any failure drops what was
/// opened so far (sockets closed, XDP programs detached): nothing stays half-started.
fn open_ports(
    cfg: &Config,
    locals: &[IpAddr],
    taps: &[Option<Tap>],
) -> Result<(Vec<Vec<LivePort>>, Vec<Arena>)> {
    let workers = cfg.workers;
    let mut per_worker: Vec<Vec<LivePort>> = (0..workers).map(|_| Vec::new()).collect();
    let maybe_xdp = cfg
        .ports
        .iter()
        .filter(|p| matches!(p.backend, Backend::AfXdp | Backend::Auto))
        .count() as u32;
    let frames = WORKER_FRAMES + maybe_xdp * AfXdp::shared_frames();
    let mut arenas: Vec<Arena> = (0..workers).map(|_| Arena::new(frames)).collect();
    let mut owners: Vec<Option<ports::afxdp::UmemOwner>> = vec![None; workers];
    for (i, p) in cfg.ports.iter().enumerate() {
        let port = i as u16;
        let queues = workers as u32;
        let mut xdp = |name: &str| -> std::result::Result<Vec<AfXdp>, ports::PortError> {
            let opts = AfXdpOptions::default();
            match AfXdp::open_queues_shared(name, port, opts.clone(), &mut arenas, &owners) {
                Ok(v) => {
                    for (o, x) in owners.iter_mut().zip(&v) {
                        if o.is_none() {
                            *o = x.umem_owner();
                        }
                    }
                    Ok(v)
                }
                Err(e) => {
                    tracing::warn!(
                        "port {name}: AF_XDP on the workers' packet memory refused ({e}); using a UMEM of its own, which copies"
                    );
                    AfXdp::open_queues(name, queues, port, opts)
                }
            }
        };
        let opened: Vec<LivePort> = match p.backend {
            Backend::AfXdp => xdp(&p.name)
                .with_context(|| format!("cannot open port {} with AF_XDP on {queues} queue(s)", p.name))?
                .into_iter()
                .map(|x| LivePort::new(AnyPort::Xdp(Box::new(x))))
                .collect(),
            Backend::AfPacket if workers > 1 => bail!(
                "port {}: backend af_packet is served by a single worker; set workers = 1 or use af_xdp",
                p.name
            ),
            Backend::AfPacket => vec![open_af_packet(&p.name, port)?],
            Backend::Memif if workers > 1 => bail!(
                "port {}: memif ports have one queue pair and are served by a single worker; set workers = 1",
                p.name
            ),
            Backend::Memif => {
                let socket = p.memif_socket.clone().context("memif port without memif_socket")?;
                let describe = format!(
                    "memif ({}, id {}, {})",
                    match p.memif_role {
                        MemifRole::Server => "server",
                        MemifRole::Client => "client",
                    },
                    p.memif_id,
                    socket.display()
                );
                let opts = MemifOptions {
                    socket,
                    role: match p.memif_role {
                        MemifRole::Server => ports::memif::MemifRole::Server,
                        MemifRole::Client => ports::memif::MemifRole::Client,
                    },
                    id: p.memif_id,
                    name: p.name.clone(),
                    ..MemifOptions::default()
                };
                let m = Memif::open(port, opts)
                    .with_context(|| format!("cannot open memif port {}", p.name))?;
                let ifindex = taps
                    .get(i)
                    .and_then(|t| t.as_ref())
                    .map(|t| t.ifindex())
                    .unwrap_or(0);
                vec![LivePort {
                    port: AnyPort::Memif(Box::new(m)),
                    memif_face: Some((p.name.clone(), ifindex, describe)),
                }]
            }
            // AF_XDP cannot see tags kept in packet metadata (a NIC's VLAN stripping, a
            // veth peer's offload): a port carrying sub-interfaces runs AF_PACKET.
            Backend::Auto if cfg.vlans.iter().any(|v| v.parent == p.name) => {
                if workers > 1 {
                    bail!(
                        "port {}: it carries VLAN sub-interfaces, which need AF_PACKET (AF_XDP cannot see tags kept in packet metadata), served by a single worker; set workers = 1",
                        p.name
                    );
                }
                tracing::info!("port {}: AF_PACKET, as it carries VLAN sub-interfaces", p.name);
                vec![open_af_packet(&p.name, port)?]
            }
            Backend::Auto => match xdp(&p.name) {
                Ok(v) => v
                    .into_iter()
                    .map(|x| LivePort::new(AnyPort::Xdp(Box::new(x))))
                    .collect(),
                Err(e) if workers > 1 => {
                    return Err(anyhow::Error::new(e)
                        .context(format!("port {}: workers = {workers} needs AF_XDP on {workers} receive queues", p.name)))
                }
                Err(e) => {
                    tracing::warn!("port {}: AF_XDP unavailable ({e}); using AF_PACKET", p.name);
                    vec![open_af_packet(&p.name, port)?]
                }
            },
        };
        for (w, mut live) in opened.into_iter().enumerate() {
            live.set_local_addrs(locals, ports::Share::default());
            per_worker[w].push(live);
        }
    }
    Ok((per_worker, arenas))
}

/// What decides which of the router's own traffic the fast path takes: its addresses,
/// NAT's share of them, and IPsec's (ESP; UDP 4500 with NAT-T, configured or found by
/// IKE).
type LocalShares = (
    Arc<ArcSwap<Vec<IpAddr>>>,
    Arc<firewall::nat::NatShared>,
    (ports::Share, Arc<ipsec::node::IpsecShared>),
);

#[allow(clippy::too_many_arguments)]
fn spawn_worker(
    id: usize,
    (mut ports, mut mem): (Vec<LivePort>, Arena),
    fib: fib::FibReaders,
    (registry, features): (Arc<Registry>, Arc<ArcSwap<FeatureState>>),
    ifaces: Arc<ArcSwap<Interfaces>>,
    (locals, nat, (esp, ipsec)): LocalShares,
    (iface_version, handoff, steering): (
        Arc<AtomicU64>,
        Option<dataplane::handoff::HandoffRx>,
        Arc<firewall::steer::Steering>,
    ),
    punt: dataplane::punt::PuntProducer,
    inject: PuntConsumer,
    counters_out: Arc<Vec<PortCounters>>,
    (tracer, capturer): (dataplane::trace::Tracer, dataplane::capture::Capturer),
    nice: i32,
    egress: Option<Box<dyn dataplane::egress::Egress>>,
) -> Result<WorkerHandle> {
    let cores = worker::cores();
    // One worker: the last core (the control thread keeps the first); several: one each.
    let core = if cores.is_empty() {
        None
    } else {
        Some(cores[(cores.len() - 1 + id) % cores.len()])
    };
    let at = worker::Placement {
        core,
        nice: Some(nice),
    };
    Ok(worker::spawn(id, at, move |shared| {
        if let Some(e) = shared.nice_error.get() {
            tracing::warn!("worker {id}: {e}; it runs at the inherited priority");
        }
        let mut graph = Graph::new(
            fib.register(),
            ifaces.load_full(),
            shared.counters.clone(),
            Some(punt),
            GraphConfig::default(),
        );
        graph.set_tracer(tracer);
        graph.set_capturer(capturer);
        graph.set_features(registry, id);
        if let Some(e) = egress {
            graph.set_egress(e);
        }
        // The first poll takes the current state in full, the ports' local addresses with
        // NAT's share of them included (the ports opened before the config was applied).
        let seen_version = iface_version.load(Ordering::Acquire).wrapping_sub(1);
        graph.set_feature_state(features.load_full());
        let mut hooks = DaemonHooks {
            ifaces,
            features,
            locals,
            nat,
            esp,
            ipsec,
            natt_seen: false,
            iface_version,
            seen_version,
            inject,
            counters_out,
            handoff,
            steering,
            to_output: Box::default(),
            id,
        };
        worker::run_loop(shared, &mut graph, &mut mem, &mut ports, &mut hooks);
        // The FIB reader goes offline and frees its slot as `graph` drops; ports (sockets,
        // rings) close when `ports` drops at the end of this closure.
        drop(graph);
    })?)
}

/// What the daemon's workers do around their ports ([`worker::run_loop`]): follow the
/// control thread's interface table, send what it hands over, publish port counters.
struct DaemonHooks {
    ifaces: Arc<ArcSwap<Interfaces>>,
    features: Arc<ArcSwap<FeatureState>>,
    locals: Arc<ArcSwap<Vec<IpAddr>>>,
    /// Whether NAT shares the router's addresses (its claimed ports come to the fast path).
    nat: Arc<firewall::nat::NatShared>,
    /// IPsec tunnels end on the router's addresses: ESP to them is the fast path's (and,
    /// with NAT-T, UDP to their port 4500). Its `nat` is not read (NAT's, from `nat`).
    esp: ports::Share,
    /// Whether some installed SA is UDP-encapsulated (IKE found a NAT on a tunnel not
    /// configured for NAT-T): then UDP to port 4500 is the fast path's too.
    ipsec: Arc<ipsec::node::IpsecShared>,
    natt_seen: bool,
    iface_version: Arc<AtomicU64>,
    seen_version: u64,
    inject: PuntConsumer,
    counters_out: Arc<Vec<PortCounters>>,
    /// Frames other workers handed to this one (flows it owns), with several workers.
    handoff: Option<dataplane::handoff::HandoffRx>,
    /// Where the handed-off frames are counted.
    steering: Arc<firewall::steer::Steering>,
    /// Handed-off packets for a tunnel's output arc, split from the others.
    to_output: Box<Vector>,
    /// The worker.
    id: usize,
}

impl worker::LoopHooks<Arena, LivePort> for DaemonHooks {
    fn before_poll(
        &mut self,
        graph: &mut Graph,
        mem: &mut Arena,
        ports: &mut [LivePort],
        (v, out): (&mut Vector, &mut Output),
        now_ns: u64,
    ) -> usize {
        let ver = self.iface_version.load(Ordering::Acquire);
        let natt = self.esp.natt || self.ipsec.natt_active();
        if ver != self.seen_version || natt != self.natt_seen {
            self.natt_seen = natt;
            if ver != self.seen_version {
                graph.set_interfaces(self.ifaces.load_full());
                graph.set_feature_state(self.features.load_full());
            }
            self.seen_version = ver;
            let l = self.locals.load();
            let share = ports::Share {
                nat: self.nat.active(),
                esp: self.esp.esp,
                natt,
            };
            for p in ports.iter_mut() {
                p.set_local_addrs(&l, share);
            }
        }
        // SAs the control thread queued go in now, traffic or not (counted as work: the
        // worker stays awake while a backlog drains).
        let ops = self.ipsec.apply_queued(self.id);
        // Frames handed back first: packets held while their next hop resolved go out
        // before the ones that arrived after it (the FIB has the neighbour a moment before
        // the held packets come back, so a few may still be overtaken).
        let own = self.ifaces.load();
        let mut n = ops
            + inject_from_kernel(
                &mut self.inject,
                mem,
                ports,
                (graph, v, out),
                (&own.own, now_ns),
            );
        // Then the frames of flows this worker owns that other workers received, as if
        // received here (a vector's worth per iteration, so the ports are polled too).
        if let Some(rx) = self.handoff.as_mut() {
            // Up to a few vectors: another worker can fill a lane with one burst of its
            // own, and the lanes, not the ports, are where a slow owner loses frames.
            for _ in 0..HANDOFF_VECTORS {
                v.len = 0;
                let got = rx.receive(mem, v, dataplane::VECTOR_SIZE);
                if let Some(c) = self.steering.counters(self.id) {
                    c.received.fetch_add(got.frames as u64, Ordering::Relaxed);
                    c.no_buffer
                        .fetch_add(got.no_buffer as u64, Ordering::Relaxed);
                }
                if got.frames > 0 {
                    // Packets for a tunnel whose SA is this worker's go to its output arc;
                    // the rest as received.
                    let to_output = &mut *self.to_output;
                    to_output.len = 0;
                    if v.pkts[..v.len]
                        .iter()
                        .any(|p| p.flags & dataplane::buffer::F_TO_OUTPUT != 0)
                    {
                        let mut keep = 0;
                        for k in 0..v.len {
                            let mut p = v.pkts[k];
                            if p.flags & dataplane::buffer::F_TO_OUTPUT != 0 {
                                p.l3 = 14;
                                p.tx_port = p.rx_port;
                                to_output.push(p);
                            } else {
                                v.pkts[keep] = p;
                                keep += 1;
                            }
                        }
                        v.len = keep;
                    }
                    if v.len > 0 {
                        graph.process(v, mem, out, now_ns);
                    }
                    if to_output.len > 0 {
                        graph.send_local(to_output, mem, out, now_ns);
                    }
                    worker::flush(graph, mem, ports, out, false);
                }
                n += got.frames + got.no_buffer;
                if got.frames + got.no_buffer < dataplane::VECTOR_SIZE {
                    break;
                }
            }
        }
        n
    }
    fn publish(&mut self, ports: &[LivePort]) {
        publish(ports, &self.counters_out);
    }
    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        self.handoff.as_ref().map(|rx| rx.wait_fd())
    }
    fn may_sleep(&mut self) -> bool {
        self.handoff.as_ref().is_none_or(|rx| rx.may_sleep())
    }
    fn woke(&mut self) {
        if let Some(rx) = &self.handoff {
            rx.woke();
        }
    }
}

/// Frames from the control thread, at most one burst per loop iteration so forwarding
/// never waits on it: those the kernel sent out of a TAP (memif ports' kernel face),
/// transmitted on their port, and packets held while their next hop resolved (reason
/// `PuntUnresolved`, see `crate::glean`), pushed through the graph again as received.
fn inject_from_kernel(
    q: &mut PuntConsumer,
    mem: &mut Arena,
    ports: &mut [LivePort],
    (graph, v, out): (&mut Graph, &mut Vector, &mut Output),
    (own, now_ns): (&dataplane::interfaces::OwnAddrs, u64),
) -> usize {
    use dataplane::worker::Port;
    let mut n = 0;
    v.len = 0;
    // The router's own packets, sent after the others (at most one burst): held ones from
    // the lookup on, and those the kernel routed into a tunnel to its output.
    let mut local = [dataplane::Pkt::default(); 32];
    let mut nlocal = 0;
    let mut tunnel = [dataplane::Pkt::default(); 32];
    let mut ntunnel = 0;
    while n < 32 {
        let Ok(p) = q.pop() else { break };
        n += 1;
        if p.reason == Reason::PuntUnresolved {
            let own_src = own_source(p.frame(), own);
            match mem.load(p.frame(), p.port) {
                // The router's own (an ESP packet of a tunnel, an ICMP error): routed as
                // such again, not received (its source is the router's).
                Some(mut pkt) if own_src.is_some() => {
                    pkt.l3 = own_src.unwrap_or(14);
                    if let Some(slot) = local.get_mut(nlocal) {
                        *slot = pkt;
                        nlocal += 1;
                    }
                }
                // Its checksum may still be the sender's partial one (an AF_XDP port):
                // the rewrite nodes finish it, as for any frame of such a port. It is on
                // the worker that owns its flow and passed its input checks already
                // (`F_HANDED_OFF`: never steered again, and IPsec's inbound policy check
                // does not take a packet a policy SA decrypted for a clear one).
                Some(mut pkt) => {
                    pkt.flags |=
                        dataplane::buffer::F_CSUM_UNKNOWN | dataplane::buffer::F_HANDED_OFF;
                    v.push(pkt);
                }
                None => graph.counters().add(Reason::InjectNoBuffer, 1),
            }
            continue;
        }
        if p.port as usize >= ports.len() {
            // What the kernel routed into a tunnel interface: the router's own packets.
            match mem.load(p.frame(), p.port) {
                Some(mut pkt) => {
                    pkt.l3 = 14;
                    pkt.tx_port = p.port;
                    if let Some(slot) = tunnel.get_mut(ntunnel) {
                        *slot = pkt;
                        ntunnel += 1;
                    }
                }
                None => graph.counters().add(Reason::InjectNoBuffer, 1),
            }
            continue;
        }
        let counters = graph.counters();
        let loaded = ports
            .get_mut(p.port as usize)
            .and_then(|port| mem.load(p.frame(), p.port).map(|pkt| (port, pkt)));
        match loaded {
            Some((port, pkt)) => {
                port.tx_burst(mem, &[pkt]);
            }
            None => counters.add(Reason::InjectNoBuffer, 1),
        }
    }
    if v.len > 0 {
        graph.process(v, mem, out, now_ns);
        worker::flush(graph, mem, ports, out, false);
    }
    for (list, count, output) in [(&local, nlocal, false), (&tunnel, ntunnel, true)] {
        if count == 0 {
            continue;
        }
        v.len = 0;
        for p in &list[..count] {
            v.push(*p);
        }
        if output {
            graph.send_local(v, mem, out, now_ns);
        } else {
            graph.process_local(v, mem, out, now_ns);
        }
        worker::flush(graph, mem, ports, out, false);
    }
    n
}

/// The L3 offset of an Ethernet frame whose IP source is one of the router's addresses
/// (`None` for anything else).
fn own_source(frame: &[u8], own: &dataplane::interfaces::OwnAddrs) -> Option<u16> {
    let l2 = wire::parse_l2(frame).ok()?;
    let ip = frame.get(l2.l3_offset..)?;
    let mine = match l2.ethertype {
        wire::ethertype::IPV4 => {
            own.contains4(u32::from_be_bytes(ip.get(12..16)?.try_into().ok()?))
        }
        wire::ethertype::IPV6 => own.contains6(ip.get(8..24)?),
        _ => false,
    };
    mine.then_some(l2.l3_offset as u16)
}

fn publish(ports: &[LivePort], out: &[PortCounters]) {
    for (p, c) in ports.iter().zip(out) {
        let s = p.port.stats();
        c.rx_packets.store(s.rx_packets, Ordering::Relaxed);
        c.rx_bytes.store(s.rx_bytes, Ordering::Relaxed);
        c.tx_packets.store(s.tx_packets, Ordering::Relaxed);
        c.tx_bytes.store(s.tx_bytes, Ordering::Relaxed);
        c.rx_drops.store(
            s.rx_dropped_no_buffer + s.rx_dropped_too_big + s.rx_dropped_offload + s.kernel_drops,
            Ordering::Relaxed,
        );
        c.tx_errors.store(s.tx_errors, Ordering::Relaxed);
        c.rx_csum_completed
            .store(s.rx_csum_completed, Ordering::Relaxed);
        c.rx_gso_split.store(s.rx_gso_split, Ordering::Relaxed);
    }
}

/// Log each interface that went down, once, with why (admin down by the config or outside
/// Ferrouter, no carrier), and each that came back; `logged` holds the last reason logged.
fn log_link_changes(sync: &Sync, held_down: &[String], logged: &mut Vec<Option<String>>) {
    let names = sync.port_names();
    logged.resize(names.len(), None);
    for (i, name) in names.iter().enumerate() {
        let now = sync.port_link(i, held_down).reason;
        if now == logged[i] {
            continue;
        }
        match (&logged[i], &now) {
            (_, Some(why)) => tracing::warn!(
                interface = %name,
                reason = %why,
                "{name} is down ({why}): the fast path does not use routes through it"
            ),
            (Some(was), None) => tracing::info!(
                interface = %name,
                "{name} is up again (was down: {was}): routes through it are used again"
            ),
            (None, None) => {}
        }
        logged[i] = now;
    }
}

/// Ask the kernel to resolve the next hop of punted "glean" packets, at most once per
/// target per second (a flood of packets to an unresolved host makes one request).
struct Resolver {
    last: FxHashMap<(u32, IpAddr), Instant>,
}

impl Resolver {
    /// Ask for the next hop of a glean frame to be resolved (at most once a second per next
    /// hop) and return it: where the frame waits meanwhile.
    fn handle(
        &mut self,
        mirror: &mut linux::Mirror,
        sync: &Sync,
        frame: &[u8],
    ) -> Option<(u32, IpAddr)> {
        let dst = dst_of(frame)?;
        let (ifx, target) = sync.glean_target(dst)?;
        let now = Instant::now();
        if self
            .last
            .get(&(ifx, target))
            .is_some_and(|t| now.duration_since(*t) < Duration::from_secs(1))
        {
            return Some((ifx, target));
        }
        if self.last.len() > 4096 {
            self.last
                .retain(|_, t| now.duration_since(*t) < Duration::from_secs(1));
        }
        self.last.insert((ifx, target), now);
        if let Err(e) = mirror.resolve(ifx, target) {
            tracing::debug!("neighbour resolution of {target} on ifindex {ifx} failed: {e}");
        }
        Some((ifx, target))
    }
}

/// Destination address of a punted Ethernet frame.
fn dst_of(frame: &[u8]) -> Option<IpAddr> {
    let l2 = wire::parse_l2(frame).ok()?;
    let l3 = frame.get(l2.l3_offset..)?;
    match l2.ethertype {
        wire::ethertype::IPV4 => Some(IpAddr::V4(
            wire::Ipv4Packet::new_checked(l3).ok()?.dst_addr().into(),
        )),
        wire::ethertype::IPV6 => Some(IpAddr::V6(
            wire::Ipv6Packet::new_checked(l3).ok()?.dst_addr().into(),
        )),
        _ => None,
    }
}

/// Raise the file descriptor limit as far as allowed (logged) and fit the API's connection
/// caps under it: however many clients connect over TCP, the unix socket and the rest of
/// the daemon keep descriptors of their own.
fn http_limits(cfg: &Config) -> Result<crate::listener::Limits> {
    let nofile = match crate::listener::raise_fd_limit() {
        Ok((before, after)) if after > before => {
            tracing::info!("file descriptor limit (RLIMIT_NOFILE): {after}, raised from {before}");
            after
        }
        Ok((_, after)) => {
            tracing::info!("file descriptor limit (RLIMIT_NOFILE): {after} (the hard limit)");
            after
        }
        Err(e) => {
            let now = crate::listener::fd_limit().with_context(|| {
                format!("reading the file descriptor limit (RLIMIT_NOFILE) after failing to raise it: {e}")
            })?;
            tracing::warn!(
                "cannot raise the file descriptor limit (RLIMIT_NOFILE) from {now}: {e}"
            );
            now
        }
    };
    crate::listener::Limits::new(&cfg.api, nofile).context("the API's connection limits")
}

/// Run the daemon until SIGTERM/SIGINT. `ready` is called once forwarding has started.
pub fn run(config_path: &Path, version: &str, ready: impl FnOnce(&Path)) -> Result<()> {
    let cfg = Config::load(config_path)?;
    // The API token is read before anything changes: a bad one stops the start.
    let token = cfg.api.read_token()?;
    let api_limits = http_limits(&cfg)?;
    let term = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, term.clone()).context("installing signal handlers")?;
    }
    // Ports first, then VLAN sub-interfaces, then IPsec tunnel interfaces: the fast path's
    // interface table in that order.
    let names: Vec<String> = cfg.fast_path_names();
    let vlan_tags = vlan_tags(&cfg);
    let (writer, readers) = fib::new(FIB_CONFIG);
    // memif ports' kernel faces first, so the mirror's dump already knows them.
    let mut taps: Vec<Option<Tap>> = Vec::with_capacity(cfg.ports.len());
    for p in &cfg.ports {
        taps.push(if p.backend == Backend::Memif {
            let mac = p
                .mac
                .as_deref()
                .and_then(parse_mac)
                .unwrap_or_else(|| derived_mac(&p.name));
            Some(Tap::open(&p.name, mac).with_context(|| format!("port {}", p.name))?)
        } else {
            None
        });
    }
    // VLAN sub-interfaces' faces: TAPs with their parent's MAC, as Linux VLAN devices have.
    for (v, t) in cfg.vlans.iter().zip(&vlan_tags[cfg.ports.len()..]) {
        let t = t.context("a [[vlan]] parent that is no [[port]]")?;
        let mac = ports::tap::interface_mac(&v.parent)
            .with_context(|| format!("vlan {}: parent port {}", v.name, v.parent))?;
        let tap = Tap::open(&v.name, mac)
            .with_context(|| format!("vlan {} ({} on {})", v.name, t.describe(), v.parent))?;
        // Frames the kernel sends on it must fit its parent with the tags (the fast path
        // clamps forwarded packets the same way); an MTU in [[interface]] applies after this.
        let parent_mtu = ports::tap::interface_mtu(&v.parent)
            .with_context(|| format!("vlan {}: parent port {}", v.name, v.parent))?;
        let max = t.max_mtu(parent_mtu);
        if let Some(was) = tap
            .clamp_mtu(max)
            .with_context(|| format!("vlan {}", v.name))?
        {
            tracing::info!(
                "vlan {}: MTU {max} (was {was}): {} on {} (MTU {parent_mtu})",
                v.name,
                t.describe(),
                v.parent
            );
        }
        taps.push(Some(tap));
    }
    // IPsec tunnel interfaces' faces: TUNs (no link layer), with the tunnel's MTU. All
    // MTUs are set before any comes up: the kernel walks its IPv6 routes (a few per
    // interface up) on each MTU change, which with thousands of tunnels is quadratic.
    let planned = cfg.ipsec.plan(&[]).unwrap_or_default();
    let tunnel = |t: &ipsec::config::TunnelConfig| {
        format!("ipsec tunnel {} ({} to {})", t.name, t.local, t.remote)
    };
    for (i, t) in cfg.ipsec.tunnels.iter().enumerate() {
        let mtu = cfg.ipsec.tunnel_mtu(i, &planned);
        let tun = Tap::open_tun_down(&t.name, mtu).with_context(|| tunnel(t))?;
        tracing::info!(
            "ipsec tunnel {}: {} to {}, MTU {mtu}",
            t.name,
            t.local,
            t.remote
        );
        taps.push(Some(tun));
    }
    drop(planned);
    let first_tunnel = taps.len() - cfg.ipsec.tunnels.len();
    for (tun, t) in taps[first_tunnel..].iter().zip(&cfg.ipsec.tunnels) {
        if let Some(tun) = tun {
            tun.set_up().with_context(|| tunnel(t))?;
        }
    }
    if !cfg.ipsec.tunnels.is_empty() {
        tracing::info!("{} ipsec tunnel interface(s) up", cfg.ipsec.tunnels.len());
    }
    // The config's addresses, MTUs, routes and neighbours into the kernel (what is already
    // there changes nothing), before the mirror's dump so the FIB starts with them.
    let (config_svc, started) = crate::configsvc::ConfigService::start(config_path)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("applying {}", config_path.display()))?;
    if config_svc.running().ports != cfg.ports {
        bail!(
            "{} changed while the daemon was starting; start again",
            config_path.display()
        );
    }
    tracing::info!(
        changed = started.report.changed.len(),
        unchanged = started.report.unchanged.len(),
        history_id = ?started.id,
        "config applied"
    );
    let mut sync = Sync::new(writer, names.clone());
    sync.set_distances(cfg.distance);
    sync.set_vlans(vlan_tags.clone());
    let mut mirror =
        linux::Mirror::open(cfg.netlink_rcvbuf).context("opening the netlink mirror")?;
    sync.resync(mirror.dump().context("dumping kernel state")?);
    // Ports before any other system change: a start that fails on an interface changes
    // nothing (the TAPs created above vanish with their file descriptors).
    let (per_worker, arenas) = open_ports(&cfg, &sync.local_addresses(), &taps)?;
    kernel_forwarding_off()?;
    let facts: Vec<PortFacts> = per_worker[0]
        .iter()
        .enumerate()
        .map(|(i, p)| p.facts(i as u16))
        .collect();
    for f in &facts {
        tracing::info!(
            "port {} {}: {} ({} worker(s))",
            f.port,
            f.name,
            f.backend,
            per_worker.len()
        );
    }
    // A sub-interface's punts go to its TAP, whatever its parent's backend.
    sync.set_punt_paths(
        per_worker[0]
            .iter()
            .map(LivePort::punt_path)
            .chain(
                cfg.vlans
                    .iter()
                    .map(|_| dataplane::interfaces::PuntPath::Queue),
            )
            .chain(
                cfg.ipsec
                    .tunnels
                    .iter()
                    .map(|_| dataplane::interfaces::PuntPath::Queue),
            )
            .collect(),
    );
    let ifaces = Arc::new(ArcSwap::from_pointee(sync.interfaces()));
    let locals = Arc::new(ArcSwap::from_pointee(sync.local_addresses()));
    // The router's addresses and subnets, for the BGP speaker's next-hop checks.
    let connected = Arc::new(ArcSwap::from_pointee(sync.addresses()));
    let iface_version = Arc::new(AtomicU64::new(0));
    // Features before the workers: they start with what the config enables.
    // The workers' flow tables, allocated now (a change of their size needs a restart).
    let fw = Arc::new(
        firewall::node::Shared::new(
            per_worker.len(),
            cfg.firewall.conntrack.then_some(cfg.firewall.conntrack_max),
        )
        .context("allocating the connection-tracking tables ([firewall] conntrack_max)")?,
    );
    let nat = Arc::new(firewall::nat::NatShared::default());
    // NAT claims the ports of its flows from the kernel in each AF_XDP port's XDP program
    // (one per interface, shared by its queues).
    let mut claims: Vec<Arc<dyn dataplane::claims::PortClaims>> = Vec::new();
    for live in per_worker.iter().flatten() {
        if let Some(c) = live.port.nat_ports() {
            if !claims.iter().any(|x| Arc::ptr_eq(x, &c)) {
                claims.push(c);
            }
        }
    }
    nat.set_claims(claims);
    // Several workers: lanes between them, for the packets of flows another worker owns.
    let workers = per_worker.len();
    // Two sending sides per worker for flow steering (its ip4 and ip6 nodes), five more
    // for IPsec's nodes when tunnels or policies are configured (their SAs live on worker
    // 0): esp-decrypt, esp4/6-encrypt, ipsec4/6-policy-out.
    let ipsec_senders = if cfg.ipsec.active() { 5 } else { 0 };
    let (mut senders, mut receivers) = if workers > 1 {
        // Slots take any frame (SLOT_BYTES: an ESP datagram reassembled to MAX_FRAME bytes
        // of IP with its Ethernet header too); only the bytes of the frames that pass are
        // touched.
        let depth = dataplane::handoff::lane_depth(workers);
        let (s, r) = dataplane::handoff::mesh_with(
            workers,
            2 + ipsec_senders,
            depth,
            dataplane::handoff::SLOT_BYTES,
        )
        .context("creating the handoff lanes between workers (an eventfd each)")?;
        (s, r.into_iter().map(Some).collect())
    } else {
        (Vec::new(), vec![None])
    };
    let ipsec_tx: Vec<Vec<dataplane::handoff::HandoffTx>> =
        senders.iter_mut().map(|s| s.split_off(2)).collect();
    let steering = Arc::new(firewall::steer::Steering::new(senders, nat.clone()));
    // IPsec's SA tables, sized now (a change of max_sas needs a restart).
    let ipsec = Arc::new(ipsec::node::IpsecShared::new(
        workers,
        cfg.ipsec.max_sas,
        names.len(),
    ));
    ipsec.set_senders(ipsec_tx);
    if cfg.ipsec.active() {
        // Outbound SAs' sequence numbers survive a restart: a manually keyed SA goes on
        // past them rather than reusing its nonces.
        std::fs::create_dir_all(&cfg.state_dir)
            .with_context(|| format!("creating {}", cfg.state_dir.display()))?;
        ipsec
            .set_state_file(cfg.state_dir.join("ipsec-sequences"))
            .map_err(|e| anyhow::anyhow!("{e}"))
            .context("reading the IPsec sequence numbers of the last run")?;
    }
    let qos = qos::node::QosShared::new(workers);
    let registry = Arc::new(
        crate::features::registry(&fw, &nat, &steering, &ipsec, &qos)
            .context("registering features")?,
    );
    let features = crate::features::Features::new(
        registry.clone(),
        (fw, nat, steering.clone(), ipsec, qos),
        names.clone(),
        per_worker.len(),
        iface_version.clone(),
    );
    features
        .publish(config_svc.running())
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("enabling the config's features")?;
    let nports = facts.len();
    let mut punts: Vec<PuntConsumer> = Vec::new();
    let mut counters: Vec<Arc<Vec<PortCounters>>> = Vec::new();
    let mut handles: Vec<WorkerHandle> = Vec::new();
    let mut injects: Vec<PuntProducer> = Vec::new();
    let (mut traces, mut captures) = (Vec::new(), Vec::new());
    for (w, (ports, arena)) in per_worker.into_iter().zip(arenas).enumerate() {
        let (punt_tx, punt_rx) = dataplane::punt::queue(PUNT_QUEUE);
        let (trace_h, tracer) = dataplane::trace::channel(TRACE_QUEUE);
        let (capture_h, capturer) = dataplane::capture::channel(CAPTURE_QUEUE);
        traces.push(trace_h);
        captures.push(capture_h);
        let (inject_tx, inject_rx) = dataplane::punt::queue(INJECT_QUEUE);
        injects.push(inject_tx);
        let c: Arc<Vec<PortCounters>> =
            Arc::new((0..nports).map(|_| PortCounters::default()).collect());
        let spawned = spawn_worker(
            w,
            (ports, arena),
            readers.clone(),
            (registry.clone(), features.state()),
            ifaces.clone(),
            (
                locals.clone(),
                features.nat.clone(),
                (
                    ports::Share {
                        nat: false,
                        esp: cfg.ipsec.active(),
                        natt: cfg.ipsec.tunnels.iter().any(|t| t.nat_t),
                    },
                    features.ipsec.clone(),
                ),
            ),
            (
                iface_version.clone(),
                receivers.get_mut(w).and_then(Option::take),
                steering.clone(),
            ),
            punt_tx,
            inject_rx,
            c.clone(),
            (tracer, capturer),
            cfg.worker_nice,
            features.qos.egress(w),
        );
        match spawned {
            Ok(h) => handles.push(h),
            Err(e) => {
                stop_all(&mut handles);
                return Err(e);
            }
        }
        punts.push(punt_rx);
        counters.push(c);
    }

    let held_down = config_svc.held_down();
    let shared = Arc::new(Shared {
        trace: TraceService::new(traces, names.clone(), registry.clone()),
        capture: CaptureService::new(
            captures,
            names.clone(),
            (cfg.ports.len()..cfg.ports.len() + cfg.vlans.len()).collect(),
        ),
        sync: Mutex::new(sync),
        ports: facts,
        subifs: cfg.vlans.iter().map(|v| v.name.clone()).collect(),
        port_counters: counters,
        workers: handles.iter().map(|h| h.shared.clone()).collect(),
        started: Instant::now(),
        version: version.to_string(),
        config: Mutex::new(config_svc),
        sync_lag: Default::default(),
        bgp: std::sync::OnceLock::new(),
        bgp_fib_done_ns: AtomicU64::new(0),
        glean: Default::default(),
        features,
        ike: Default::default(),
        api_conns: Default::default(),
        held_down,
    });
    // IKE once the fast path can take its child SAs.
    if let Err(e) = shared.ike.apply(&shared, &cfg.ipsec) {
        tracing::error!("IKE: {e}");
    }
    let socket = cfg.control_socket.clone();
    let tcp = cfg.api.listen.zip(token);
    let server = match http::serve(&socket, tcp, api_limits, shared.clone()) {
        Ok(s) => s,
        Err(e) => {
            stop_all(&mut handles);
            return Err(e.context(format!("control socket {}", socket.display())));
        }
    };
    tracing::info!(
        ports = shared.ports.len(),
        workers = handles.len(),
        socket = %socket.display(),
        tcp = ?server.tcp,
        "forwarding"
    );
    // The BGP speaker last: its routes go straight into the sync.
    let mut speaker = match cfg.bgp.clone() {
        Some(b) => {
            let sh = shared.clone();
            let addrs = connected.clone();
            let resolvable: bgp::speaker::Resolvable =
                Arc::new(move |ip| crate::sync::connected_in(&addrs.load(), ip).is_some());
            let sink = move |changes: &[bgp::rib::Change]| {
                if let Ok(mut sync) = sh.sync.lock() {
                    sync.apply_bgp(changes);
                }
                sh.bgp_fib_done_ns
                    .store(worker::monotonic_ns(), Ordering::Release);
            };
            match bgp::speaker::Speaker::start(b, resolvable, sink) {
                Ok(sp) => {
                    let _ = shared.bgp.set(sp.status());
                    tracing::info!(
                        neighbors = shared.bgp.get().map_or(0, |s| s.view().neighbors.len()),
                        "BGP speaker started"
                    );
                    Some(sp)
                }
                Err(e) => {
                    server.stop();
                    stop_all(&mut handles);
                    return Err(anyhow::anyhow!("starting the BGP speaker: {e}"));
                }
            }
        }
        None => None,
    };
    ready(&socket);

    let mut kernel_faces = KernelFaces {
        taps,
        vlans: vlan_tags,
        first_tunnel: cfg.ports.len() + cfg.vlans.len(),
        injects,
        keepalives: nat_keepalives(&cfg),
    };
    let result = control_loop(
        &shared,
        &mut mirror,
        &mut punts,
        &mut kernel_faces,
        (&ifaces, &locals, &connected),
        &iface_version,
        &mut handles,
        &term,
    );
    if let Some(sp) = speaker.as_mut() {
        // Cease to every neighbour before the fast path stops.
        sp.shutdown();
    }
    let died = stop_all(&mut handles);
    server.stop();
    let _ = std::fs::remove_file(&socket);
    result?;
    if let Some(m) = died {
        bail!("{m}");
    }
    Ok(())
}

/// Stop and join every worker; the first death, if any, as a message.
fn stop_all(handles: &mut [WorkerHandle]) -> Option<String> {
    for h in handles.iter() {
        h.stop();
    }
    let mut died = None;
    for (i, h) in handles.iter_mut().enumerate() {
        if let WorkerExit::Panicked(m) = h.join() {
            died.get_or_insert(format!("worker {i} died: {m}"));
        }
    }
    died
}

/// The tags of each entry of the interface table: none for ports, then the sub-interfaces'.
fn vlan_tags(cfg: &Config) -> Vec<Option<dataplane::interfaces::VlanTags>> {
    let parent = |name: &str| cfg.ports.iter().position(|p| p.name == name);
    cfg.ports
        .iter()
        .map(|_| None)
        .chain(
            cfg.vlans
                .iter()
                .map(|v| Some(v.tags(parent(&v.parent)? as u16))),
        )
        .chain(cfg.ipsec.tunnels.iter().map(|_| None))
        .collect()
}

/// The TAPs of memif ports and VLAN sub-interfaces, and the queues into the worker that
/// transmits what the kernel sends on them.
struct KernelFaces {
    /// Per port, then per sub-interface: its TAP, for memif ports and sub-interfaces.
    taps: Vec<Option<Tap>>,
    /// Per entry of `taps`: the sub-interface's tags, if it is one.
    vlans: Vec<Option<dataplane::interfaces::VlanTags>>,
    /// The entries from this one on are IPsec tunnel interfaces, whose faces are TUNs:
    /// bare IP packets, no Ethernet header.
    first_tunnel: usize,
    /// Per worker: frames to transmit (memif ports are served by worker 0).
    injects: Vec<PuntProducer>,
    /// NAT keepalives of the IPsec tunnels with NAT-T.
    keepalives: Vec<NatKeepalive>,
}

/// The NAT keepalive (RFC 3948 §2.3: one 0xFF byte in UDP from port 4500) of one IPsec
/// tunnel, sent by the kernel from a socket bound to the tunnel's local address and port
/// 4500: it keeps the mapping of a NAT in front of the router open.
struct NatKeepalive {
    socket: std::net::UdpSocket,
    to: std::net::SocketAddr,
    every: Duration,
    next: Instant,
}

/// The keepalives of `cfg`'s NAT-T tunnels (a tunnel whose socket cannot be bound is
/// logged and sends none).
fn nat_keepalives(cfg: &Config) -> Vec<NatKeepalive> {
    cfg.ipsec
        .tunnels
        .iter()
        .filter(|t| t.nat_t && t.keepalive_s() > 0)
        // A tunnel keyed by IKE: the IKE daemon owns port 4500 and sends its keepalives.
        .filter(|t| !cfg.ipsec.peers.iter().any(|p| p.tunnel == t.name))
        .filter_map(|t| {
            let from = std::net::SocketAddr::new(t.local, ipsec::NATT_PORT);
            match std::net::UdpSocket::bind(from).and_then(|s| {
                s.set_nonblocking(true)?;
                Ok(s)
            }) {
                Ok(socket) => Some(NatKeepalive {
                    socket,
                    to: std::net::SocketAddr::new(t.remote, t.remote_port()),
                    every: Duration::from_secs(u64::from(t.keepalive_s())),
                    next: Instant::now(),
                }),
                Err(e) => {
                    tracing::warn!(
                        "ipsec tunnel {}: no NAT keepalives: binding {from} failed: {e}",
                        t.name
                    );
                    None
                }
            }
        })
        .collect()
}

impl KernelFaces {
    /// Send the NAT keepalives that are due.
    fn keepalives(&mut self, now: Instant) {
        for k in &mut self.keepalives {
            if now >= k.next {
                k.next = now + k.every;
                if let Err(e) = k.socket.send_to(&[0xff], k.to) {
                    tracing::debug!("NAT keepalive to {} failed: {e}", k.to);
                }
            }
        }
    }

    /// A punted frame that arrived on a memif port goes to the kernel through its TAP
    /// (unresolved transit packets never come here: they wait in the glean queue).
    fn punt_to_kernel(&mut self, p: &PuntPacket) {
        let Some(Some(tap)) = self.taps.get_mut(p.port as usize) else {
            return;
        };
        if p.port as usize >= self.first_tunnel {
            // A TUN takes the IP packet alone.
            if let Some(ip) = p.frame().get(14..) {
                tap.write(ip);
            }
            return;
        }
        match self.vlans.get(p.port as usize).copied().flatten() {
            // The kernel sees a sub-interface's frames untagged, as a VLAN device's.
            Some(t) => {
                let f = p.frame();
                let tl = t.len();
                if f.len() < 14 + tl {
                    return;
                }
                let mut untagged = [0u8; dataplane::MAX_FRAME];
                untagged[..12].copy_from_slice(&f[..12]);
                let rest = &f[12 + tl..];
                untagged[12..12 + rest.len()].copy_from_slice(rest);
                tap.write(&untagged[..12 + rest.len()]);
            }
            None => tap.write(p.frame()),
        }
    }

    /// Frames the kernel sent out of the TAPs, queued for transmission (bounded per call).
    fn poll_kernel(&mut self, scratch: &mut PuntPacket) {
        let Some(q) = self.injects.first_mut() else {
            return;
        };
        for (port, tap) in self.taps.iter_mut().enumerate() {
            let Some(tap) = tap else { continue };
            let vlan = self.vlans.get(port).copied().flatten();
            if port >= self.first_tunnel {
                // The router's own packets routed into a tunnel: to the worker's lookup,
                // behind an Ethernet header of no meaning (the graph starts at L3).
                for _ in 0..INJECT_QUEUE {
                    let Some(n) = tap.read(&mut scratch.data[14..]) else {
                        break;
                    };
                    if n == 0 || q.slots() == 0 {
                        tap.from_kernel_drops += u64::from(n > 0);
                        continue;
                    }
                    // No addresses, but the EtherType of the packet (what a capture on
                    // the tunnel shows).
                    scratch.data[..14].fill(0);
                    let et = match scratch.data[14] >> 4 {
                        6 => wire::ethertype::IPV6,
                        _ => wire::ethertype::IPV4,
                    };
                    scratch.data[12..14].copy_from_slice(&et.to_be_bytes());
                    let _ = q.push(PuntPacket {
                        port: port as u16,
                        reason: Reason::PuntLocal,
                        len: (n + 14) as u16,
                        data: scratch.data,
                    });
                }
                continue;
            }
            for _ in 0..INJECT_QUEUE {
                let Some(mut n) = tap.read(&mut scratch.data) else {
                    break;
                };
                if n < 14 || q.slots() == 0 {
                    continue;
                }
                // A sub-interface's frames leave by its parent, tagged.
                let mut out_port = port as u16;
                if let Some(t) = vlan {
                    let tl = t.len();
                    if n + tl > scratch.data.len() {
                        tap.from_kernel_drops += 1;
                        continue;
                    }
                    scratch.data.copy_within(12..n, 12 + tl);
                    t.write(&mut scratch.data[12..12 + tl], 0);
                    n += tl;
                    out_port = t.parent;
                }
                let _ = q.push(PuntPacket {
                    port: out_port,
                    reason: Reason::PuntLocal,
                    len: n as u16,
                    data: scratch.data,
                });
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn control_loop(
    shared: &Shared,
    mirror: &mut linux::Mirror,
    punts: &mut [PuntConsumer],
    faces: &mut KernelFaces,
    (ifaces, locals, connected): (
        &ArcSwap<Interfaces>,
        &ArcSwap<Vec<IpAddr>>,
        &ArcSwap<Vec<linux::Addr>>,
    ),
    iface_version: &AtomicU64,
    handles: &mut [WorkerHandle],
    term: &AtomicBool,
) -> Result<()> {
    let mut events = Vec::with_capacity(1024);
    let mut resolver = Resolver {
        last: FxHashMap::default(),
    };
    let mut held = crate::glean::GleanQueue::default();
    let mut published = u64::MAX;
    // Per interface, why it was last logged as down (None: up, the state at start).
    let mut logged_down: Vec<Option<String>> = Vec::new();
    let mut scratch = Box::new(PuntPacket {
        port: 0,
        reason: Reason::PuntLocal,
        len: 0,
        data: [0; dataplane::MAX_FRAME],
    });
    // With TAPs to serve, wake often: the kernel's ARP and ping replies wait for this loop.
    let poll_timeout = if faces.taps.iter().any(Option::is_some) {
        Duration::from_millis(1)
    } else {
        Duration::from_millis(5)
    };
    while !term.load(Ordering::Relaxed) {
        events.clear();
        mirror
            .poll_events(&mut events, poll_timeout)
            .context("reading netlink notifications")?;
        let batch_read = (!events.is_empty()).then(Instant::now);
        let mut sync = shared
            .sync
            .lock()
            .map_err(|_| anyhow::anyhow!("sync state poisoned"))?;
        let mut overflow = false;
        for ev in events.drain(..) {
            if !sync.apply(ev) {
                overflow = true;
            }
        }
        if overflow {
            tracing::warn!("netlink overflow (ENOBUFS): full resync");
            // Dump without holding the state: the API keeps answering meanwhile.
            drop(sync);
            let snapshot = mirror.dump().context("resync dump")?;
            sync = shared
                .sync
                .lock()
                .map_err(|_| anyhow::anyhow!("sync state poisoned"))?;
            sync.resync(snapshot);
        }
        if let Some(t) = batch_read {
            shared.sync_lag.record(t.elapsed().as_nanos() as u64);
        }
        if sync.interfaces_version() != published {
            published = sync.interfaces_version();
            ifaces.store(Arc::new(sync.interfaces()));
            locals.store(Arc::new(sync.local_addresses()));
            connected.store(Arc::new(sync.addresses()));
            iface_version.fetch_add(1, Ordering::Release);
            log_link_changes(&sync, &shared.held_down.load(), &mut logged_down);
        }
        // Bounded: at most each queue's capacity per round.
        let now = Instant::now();
        for (w, q) in punts.iter_mut().enumerate() {
            for _ in 0..PUNT_QUEUE {
                let Ok(p) = q.pop() else { break };
                if p.reason == Reason::PuntUnresolved {
                    match resolver.handle(mirror, &sync, p.frame()) {
                        Some(target) => {
                            held.hold(&shared.glean, w, target, Box::new(p), now);
                        }
                        // The route changed since the worker looked: nothing to wait for.
                        None => shared.glean.not_held(),
                    }
                    continue;
                }
                faces.punt_to_kernel(&p);
            }
        }
        held.release(
            &shared.glean,
            |ifx, ip| sync.neighbor_usable(ifx, ip),
            &mut faces.injects,
            now,
        );
        faces.poll_kernel(&mut scratch);
        drop(sync);
        shared.trace.drain();
        shared.capture.drain();
        crate::fwview::drain_logs(&shared.features, shared.features.names(), 256);
        // SA changes the queue to the worker had no room for; SAs it handed back.
        shared.features.ipsec.maintain();
        faces.keepalives(now);
        for (i, h) in handles.iter_mut().enumerate() {
            if h.is_finished() {
                match h.join() {
                    WorkerExit::Panicked(m) => bail!("worker {i} died: {m}"),
                    WorkerExit::Stopped => bail!("worker {i} stopped unexpectedly"),
                }
            }
        }
    }
    tracing::info!("signal received: stopping");
    Ok(())
}
