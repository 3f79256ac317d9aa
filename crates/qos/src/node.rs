//! QoS in the graph: `ip4-qos-in` / `ip6-qos-in` on the unicast arcs (classification,
//! marking and policing of what an interface receives, after the ingress filter),
//! `ip4-qos-pcp` / `ip6-qos-pcp` on the output arcs of VLAN sub-interfaces with an output
//! policy (the 802.1p priority of the class of what leaves, in its tags) and
//! [`QosEgress`], the engine's egress hook (`dataplane::egress`), which holds each
//! scheduled port's packets in its classes' queues and lets them out as the scheduler
//! says.
//!
//! The control thread compiles `[qos]` ([`QosShared::apply`]): input policies are
//! published whole (RCU: each batch loads them once); a port whose output policy changed
//! gets new schedulers, built on the control thread (their queues allocated there) and
//! sent to each worker through a ring, which the worker swaps in between vectors. The old
//! scheduler's packets are freed by the worker (their buffers are its memory) and the
//! scheduler goes back to the control thread to be deallocated. Ports whose policy did not
//! change keep their schedulers and the packets queued in them.

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use dataplane::buffer::{with_frag_pcp, AUX_FEATURE_META, AUX_FRAG_PCP, F_TO_FRAG};
use dataplane::egress::Egress;
use dataplane::feature::{ArcId, Batch, Feature, FeatureCx, FeatureNode, FeatureSpec};
use dataplane::{PacketMemory, Pkt};

use crate::classify::{
    dscp_colour, frame_pcp, ip4_dscp, ip6_dscp, set_frame_pcp, set_ip4_dscp, set_ip6_dscp,
    InputPolicy, Verdict,
};
use crate::config::{Compiled, PcpOut, QosConfig, NO_PCP};
use crate::policer::{Colour, Policer};
use crate::rules::RuleCounters;
use crate::sched::{QueueStats, Rates, SchedSpec, Scheduler};

/// The IPv4 input node.
pub const IN4: &str = "ip4-qos-in";
/// The IPv6 input node.
pub const IN6: &str = "ip6-qos-in";
/// Both.
pub const NAMES: [&str; 2] = [IN4, IN6];
/// The IPv4 802.1p marking node (output arcs of VLAN sub-interfaces).
pub const PCP4: &str = "ip4-qos-pcp";
/// The IPv6 one.
pub const PCP6: &str = "ip6-qos-pcp";
/// Both.
pub const PCP_NAMES: [&str; 2] = [PCP4, PCP6];
/// Drop reason: a policer's colour said drop.
pub const POLICED: u8 = 0;

const DROPS: &[(&str, &str)] = &[(
    "policed",
    "dropped by a QoS policer (the action of the packet's colour is drop)",
)];

/// QoS's part of `Pkt::aux`'s feature half (`dataplane::buffer::AUX_FEATURE_META`): the
/// class the input policy chose, for the 802.1p marking and the port scheduler on output
/// (the DSCP alone cannot say it: a class chosen by rule or by 802.1p, without a `mark`,
/// keeps the DSCP the packet came with). Bits 23-31: the policy's number (0: no class),
/// 20-22: the class.
const CLASS_META: u32 = 0xfff0_0000;
const _: () = assert!(CLASS_META & AUX_FEATURE_META == CLASS_META);
const _: () = assert!(CLASS_META & AUX_FRAG_PCP == 0);
const _: () = assert!(crate::sched::MAX_CLASSES <= 8);
const _: () = assert!(crate::config::MAX_POLICY_NUMBER < 1 << 9);

/// `aux` carrying class `class` of policy number `policy`.
#[inline]
fn with_class(aux: u32, policy: u16, class: u8) -> u32 {
    aux & !CLASS_META | u32::from(policy) << 23 | u32::from(class & 7) << 20
}

/// The (policy number, class) `aux` carries, if any.
#[inline]
fn class_in(aux: u32) -> Option<(u16, u8)> {
    let policy = (aux >> 23) as u16;
    (policy != 0).then_some((policy, (aux >> 20 & 7) as u8))
}

/// The class `aux` carries if the input policy that chose it is policy number `policy`
/// (an output policy's; 0 matches nothing).
#[inline]
fn class_from(aux: u32, policy: u16) -> Option<u8> {
    match class_in(aux) {
        Some((p, class)) if p == policy => Some(class),
        _ => None,
    }
}

/// Most ports a worker schedules (the engine's port masks are 64 bits).
pub const MAX_PORTS: usize = 64;
/// Scheduler changes a worker's ring holds.
const RING: usize = MAX_PORTS;

/// A change of a port's scheduling, for one worker.
enum Update {
    /// Its new scheduler (or none), and the number of its output policy.
    Replace {
        port: u16,
        sched: Option<Box<Scheduler<Pkt>>>,
        policy: u16,
    },
    /// Its output policy has a new number (a policy before it in the list was added or
    /// removed); the scheduler stays, with what it holds.
    Renumber { port: u16, policy: u16 },
}

/// The control thread's end of one worker.
struct WorkerEnds {
    to: rtrb::Producer<Update>,
    back: rtrb::Consumer<Box<Scheduler<Pkt>>>,
}

/// A worker's end: the changes it takes, the schedulers it gives back.
type WorkerSide = (rtrb::Consumer<Update>, rtrb::Producer<Box<Scheduler<Pkt>>>);

/// One scheduled port as the control thread knows it.
struct PortState {
    spec: SchedSpec,
    /// Its output policy's number (what the workers' schedulers have).
    policy: u16,
    /// Each worker's queue counters, by class.
    stats: Vec<Arc<[QueueStats]>>,
    /// Each worker's scheduler's counters, by pipe.
    pipe_stats: Vec<Arc<[QueueStats]>>,
}

/// What the control thread and the nodes share.
pub struct QosShared {
    input: ArcSwap<Vec<Option<InputPolicy>>>,
    pcp_out: ArcSwap<Vec<Option<PcpOut>>>,
    workers: Mutex<Vec<WorkerEnds>>,
    /// The workers' ends, taken by [`QosShared::egress`].
    worker_ends: Mutex<Vec<Option<WorkerSide>>>,
    state: Mutex<ControlState>,
    workers_n: usize,
}

#[derive(Default)]
struct ControlState {
    compiled: Compiled,
    ports: Vec<Option<PortState>>,
    names: Vec<String>,
    config: QosConfig,
}

impl QosShared {
    /// State for `workers` workers, nothing configured.
    pub fn new(workers: usize) -> Arc<QosShared> {
        let mut ctl = Vec::new();
        let mut wrk = Vec::new();
        for _ in 0..workers {
            let (to, from) = rtrb::RingBuffer::new(RING);
            let (back_tx, back_rx) = rtrb::RingBuffer::new(RING);
            ctl.push(WorkerEnds { to, back: back_rx });
            wrk.push(Some((from, back_tx)));
        }
        Arc::new(QosShared {
            input: ArcSwap::from_pointee(Vec::new()),
            pcp_out: ArcSwap::from_pointee(Vec::new()),
            workers: Mutex::new(ctl),
            worker_ends: Mutex::new(wrk),
            state: Mutex::new(ControlState::default()),
            workers_n: workers,
        })
    }

    /// The input and 802.1p features, for the registry.
    pub fn features(self: &Arc<Self>) -> Vec<Arc<dyn Feature>> {
        let mut v: Vec<Arc<dyn Feature>> = Vec::new();
        for v6 in [false, true] {
            v.push(Arc::new(QosInFeature {
                v6,
                shared: self.clone(),
            }));
            v.push(Arc::new(PcpFeature {
                v6,
                shared: self.clone(),
            }));
        }
        v
    }

    /// Worker `worker`'s egress hook (once per worker, at start; `None` after).
    pub fn egress(&self, worker: usize) -> Option<Box<dyn Egress>> {
        let (rx, back) = self.worker_ends.lock().ok()?.get_mut(worker)?.take()?;
        Some(Box::new(QosEgress {
            scheds: (0..MAX_PORTS).map(|_| None).collect(),
            policies: [0; MAX_PORTS],
            mask: 0,
            rx,
            back,
            held: 0,
        }))
    }

    /// Apply `cfg` (validated) for the fast path's `interfaces` (by index; the first
    /// `ports` are ports): publish the input policies and the 802.1p marking of VLAN
    /// sub-interfaces, and give every port whose output policy changed its new schedulers
    /// (ports whose policy did not change keep theirs, with what they hold). `now_ns` is
    /// the workers' clock (0 will do: buckets start full).
    pub fn apply(
        &self,
        cfg: &QosConfig,
        interfaces: &[String],
        ports: usize,
        now_ns: u64,
    ) -> Result<(), String> {
        let mut st = self
            .state
            .lock()
            .map_err(|_| "QoS state poisoned".to_string())?;
        let mut compiled = cfg.compile(interfaces, ports, &st.compiled, now_ns)?;
        // Rule counters: an interface whose input policy and rules did not change keeps
        // its counts.
        for (idx, p) in compiled.input.iter_mut().enumerate() {
            let (Some(p), Some(name)) = (p, interfaces.get(idx)) else {
                continue;
            };
            let Some(rules) = &p.rules else {
                continue;
            };
            let old = st
                .names
                .iter()
                .position(|n| n == name)
                .and_then(|o| st.compiled.input.get(o)?.as_ref());
            let kept = old
                .filter(|o| o.policy == p.policy)
                .filter(|o| o.rules.as_ref().is_some_and(|r| r.source == rules.source))
                .and_then(|o| o.rule_counts.clone());
            p.rule_counts = Some(kept.unwrap_or_else(|| {
                Arc::new(RuleCounters::new(self.workers_n, rules.source.len()))
            }));
        }
        let mut workers = self
            .workers
            .lock()
            .map_err(|_| "QoS state poisoned".to_string())?;
        // Schedulers the workers gave back.
        for w in workers.iter_mut() {
            while w.back.pop().is_ok() {}
        }
        st.ports
            .resize_with(interfaces.len().min(MAX_PORTS), || None);
        for (port, want) in compiled.output.iter().enumerate().take(MAX_PORTS) {
            let policy = compiled.output_policy.get(port).copied().unwrap_or(0);
            // The policy's number is not the spec's: a renumbered policy keeps its port's
            // schedulers and what they hold.
            // Nor do names and profiles, which only show: a renamed class, pipe or subport
            // keeps them too, and its counters.
            let (same, renumber) = match (&st.ports[port], want) {
                (Some(old), Some(new)) => (old.spec.schedules_as(new), old.policy != policy),
                (None, None) => (true, false),
                _ => (false, false),
            };
            if same {
                if let (Some(old), Some(new)) = (st.ports[port].as_mut(), want) {
                    old.spec.clone_from(new);
                }
            }
            if same && !renumber {
                continue;
            }
            if workers.iter().any(|w| w.to.slots() == 0) {
                return Err("a worker has not taken the previous QoS change yet; try again".into());
            }
            if same {
                for w in workers.iter_mut() {
                    // Checked above: there is a slot.
                    let _ = w.to.push(Update::Renumber {
                        port: port as u16,
                        policy,
                    });
                }
                if let Some(old) = st.ports[port].as_mut() {
                    old.policy = policy;
                }
                continue;
            }
            let mut stats = Vec::new();
            let mut pipe_stats = Vec::new();
            let rates = want.as_ref().map(|s| Arc::new(Rates::new(s, now_ns)));
            for w in workers.iter_mut() {
                let sched = match (want, &rates) {
                    (Some(s), Some(r)) => {
                        let s = Box::new(Scheduler::new(s, r.clone()));
                        stats.push(s.stats());
                        pipe_stats.push(s.pipe_stats());
                        Some(s)
                    }
                    _ => None,
                };
                // Checked above: there is a slot.
                let _ = w.to.push(Update::Replace {
                    port: port as u16,
                    sched,
                    policy,
                });
            }
            st.ports[port] = want.clone().map(|spec| PortState {
                spec,
                policy,
                stats,
                pipe_stats,
            });
        }
        self.input.store(Arc::new(compiled.input.clone()));
        self.pcp_out.store(Arc::new(compiled.pcp_out.clone()));
        st.compiled = compiled;
        st.names = interfaces.to_vec();
        st.config = cfg.clone();
        Ok(())
    }

    /// The policers and every scheduled port's classes with their counters (summed over
    /// the workers).
    pub fn view(&self) -> View {
        let Ok(st) = self.state.lock() else {
            return View::default();
        };
        let policers = st
            .compiled
            .policers
            .iter()
            .map(|(name, p)| PolicerView::of(name, p))
            .collect();
        let ports = st
            .ports
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let p = p.as_ref()?;
                let policy = st
                    .config
                    .interfaces
                    .iter()
                    .find(|f| st.names.get(i) == Some(&f.name))
                    .and_then(|f| f.output.clone())
                    .unwrap_or_default();
                // Rates by class index as (class name, rate) of those that have one.
                let by_class = |v: &[u64]| -> Vec<(String, u64)> {
                    p.spec
                        .classes
                        .iter()
                        .zip(v)
                        .filter(|(_, &m)| m > 0)
                        .map(|(c, &m)| (c.name.clone(), m))
                        .collect()
                };
                let pipes: Vec<PipeView> = p
                    .spec
                    .pipes
                    .iter()
                    .enumerate()
                    .map(|(k, spec)| {
                        let n = summed(&p.pipe_stats, k);
                        PipeView {
                            name: spec.name.clone(),
                            profile: spec.profile.clone(),
                            subport: spec
                                .subport
                                .and_then(|k| p.spec.subports.get(usize::from(k)))
                                .map(|s| s.name.clone()),
                            rate_bps: spec.rate_bps,
                            limit: spec.limit,
                            max_bps: by_class(&spec.max_bps),
                            min_bps: by_class(&spec.min_bps),
                            dst: spec.dst.clone(),
                            enqueued: n.enqueued,
                            enqueued_bytes: n.enqueued_bytes,
                            sent: n.sent,
                            sent_bytes: n.sent_bytes,
                            dropped_tail: n.dropped[0],
                            dropped_codel: n.dropped[1],
                            dropped_flush: n.dropped[2],
                            dropped_wred: n.dropped[3],
                            depth: n.depth,
                            depth_bytes: n.depth_bytes,
                            sojourn_max_ns: n.sojourn_max_ns,
                            sojourn_mean_ns: n.sojourn_sum_ns.checked_div(n.sent).unwrap_or(0),
                        }
                    })
                    .collect();
                Some(PortView {
                    interface: st.names.get(i).cloned().unwrap_or_default(),
                    policy,
                    shaper_bps: p.spec.rate_bps,
                    classes: p
                        .spec
                        .classes
                        .iter()
                        .enumerate()
                        .map(|(c, spec)| {
                            let n = summed(&p.stats, c);
                            ClassView {
                                name: spec.name.clone(),
                                priority: spec.priority,
                                weight: spec.priority.is_none().then_some(spec.weight),
                                min_bps: spec.min_bps,
                                max_bps: spec.max_bps,
                                limit: spec.limit,
                                codel: spec.codel.is_some(),
                                wred: spec.wred.is_some(),
                                enqueued: n.enqueued,
                                enqueued_bytes: n.enqueued_bytes,
                                sent: n.sent,
                                sent_bytes: n.sent_bytes,
                                dropped_tail: n.dropped[0],
                                dropped_codel: n.dropped[1],
                                dropped_flush: n.dropped[2],
                                dropped_wred: n.dropped[3],
                                depth: n.depth,
                                depth_bytes: n.depth_bytes,
                                sojourn_max_ns: n.sojourn_max_ns,
                                sojourn_mean_ns: n.sojourn_sum_ns.checked_div(n.sent).unwrap_or(0),
                            }
                        })
                        .collect(),
                    subports: SubportView::of(&p.spec, &pipes),
                    pipes,
                })
            })
            .collect();
        let inputs = st
            .compiled
            .input
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let p = p.as_ref()?;
                let rules = p.rules.as_ref()?;
                let counts = p
                    .rule_counts
                    .as_ref()
                    .map(|c| c.counts())
                    .unwrap_or_default();
                Some(InputView {
                    interface: st.names.get(i).cloned().unwrap_or_default(),
                    policy: p.policy.clone(),
                    rules: rules
                        .source
                        .iter()
                        .enumerate()
                        .map(|(j, r)| {
                            let (packets, bytes) = counts.get(j).copied().unwrap_or_default();
                            RuleView {
                                class: r.class.clone(),
                                matches: r.describe(),
                                packets,
                                bytes,
                            }
                        })
                        .collect(),
                })
            })
            .collect();
        View {
            policers,
            ports,
            inputs,
        }
    }
}

/// QoS as `show qos` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    /// The policers.
    pub policers: Vec<PolicerView>,
    /// The scheduled ports.
    pub ports: Vec<PortView>,
    /// The interfaces whose input policy has rules.
    pub inputs: Vec<InputView>,
}

/// An interface's input policy and what its rules matched there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputView {
    /// The interface.
    pub interface: String,
    /// Its input policy.
    pub policy: String,
    /// The policy's rules, in order.
    pub rules: Vec<RuleView>,
}

/// A classifier rule and what it matched on one interface, summed over the workers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleView {
    /// Its class.
    pub class: String,
    /// Its matches (`src 10.1.0.0/16 protocol udp dport 5060`).
    pub matches: String,
    /// Packets it matched.
    pub packets: u64,
    /// Their bytes (IP length).
    pub bytes: u64,
}

/// A policer and its colour counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicerView {
    /// Its name.
    pub name: String,
    /// srtcm, trtcm or rfc4115.
    pub kind: &'static str,
    /// Committed rate, bit/s.
    pub cir_bps: u64,
    /// Second rate, bit/s (trTCM's peak, RFC 4115's excess; 0 for srTCM).
    pub pir_bps: u64,
    /// (packets, bytes) marked green, yellow, red.
    pub colours: [(u64, u64); 3],
}

impl PolicerView {
    fn of(name: &str, p: &Policer) -> PolicerView {
        let s = p.spec();
        PolicerView {
            name: name.to_string(),
            kind: s.kind.name(),
            cir_bps: s.cir_bps,
            pir_bps: s.pir_bps,
            colours: p.counts(),
        }
    }
}

/// A scheduled port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortView {
    /// The port.
    pub interface: String,
    /// Its output policy.
    pub policy: String,
    /// Its shaper's rate, bit/s (0: none).
    pub shaper_bps: u64,
    /// Its classes (their counters include their pipes' packets).
    pub classes: Vec<ClassView>,
    /// Its pipes.
    pub pipes: Vec<PipeView>,
    /// Its subports, with their pipes' counters summed.
    pub subports: Vec<SubportView>,
}

/// A subport of a port: its rate, and the counters of its pipes summed (it has no queue
/// of its own).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubportView {
    /// Its name.
    pub name: String,
    /// Its shaper's rate, bit/s.
    pub rate_bps: u64,
    /// Its shaper's burst, bytes.
    pub burst_bytes: u64,
    /// The most packets its pipes hold together in each worker, if limited.
    pub limit: Option<usize>,
    /// The pipes under it.
    pub pipes: usize,
    /// Packets its pipes queued.
    pub enqueued: u64,
    /// Packets its pipes sent.
    pub sent: u64,
    /// Bytes its pipes sent.
    pub sent_bytes: u64,
    /// Packets its pipes dropped, for any reason.
    pub dropped: u64,
    /// Packets in its pipes' queues now.
    pub depth: u64,
}

impl SubportView {
    /// The subports of `spec` with the counters of their pipes (`pipes`, by the index of
    /// `spec.pipes`) summed.
    fn of(spec: &crate::sched::SchedSpec, pipes: &[PipeView]) -> Vec<SubportView> {
        spec.subports
            .iter()
            .enumerate()
            .map(|(k, sp)| {
                let mut v = SubportView {
                    name: sp.name.clone(),
                    rate_bps: sp.rate_bps,
                    burst_bytes: sp.burst_bytes,
                    limit: sp.limit,
                    ..SubportView::default()
                };
                let under = spec.pipes.iter().map(|p| p.subport == Some(k as u16));
                for (q, _) in pipes.iter().zip(under).filter(|(_, u)| *u) {
                    v.pipes += 1;
                    v.enqueued += q.enqueued;
                    v.sent += q.sent;
                    v.sent_bytes += q.sent_bytes;
                    v.dropped +=
                        q.dropped_tail + q.dropped_codel + q.dropped_flush + q.dropped_wred;
                    v.depth += q.depth;
                }
                v
            })
            .collect()
    }
}

/// A pipe of a port, summed over the workers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipeView {
    /// Its name.
    pub name: String,
    /// The profile it takes its parameters from, if any.
    pub profile: Option<String>,
    /// The subport it is under, if any.
    pub subport: Option<String>,
    /// Its shaper's rate, bit/s.
    pub rate_bps: u64,
    /// The limit of each of its class queues, packets (per worker).
    pub limit: usize,
    /// Its classes' maximum rates within it, bit/s, by class name (those that have one).
    pub max_bps: Vec<(String, u64)>,
    /// Its classes' minimum rates within it, bit/s, by class name (those that have one).
    pub min_bps: Vec<(String, u64)>,
    /// Its destination prefixes.
    pub dst: Vec<String>,
    /// Packets queued.
    pub enqueued: u64,
    /// Bytes queued.
    pub enqueued_bytes: u64,
    /// Packets sent.
    pub sent: u64,
    /// Bytes sent.
    pub sent_bytes: u64,
    /// Dropped: a queue full (or the port's queues all full).
    pub dropped_tail: u64,
    /// Dropped by CoDel.
    pub dropped_codel: u64,
    /// Dropped when the scheduler was replaced.
    pub dropped_flush: u64,
    /// Dropped by WRED on arrival.
    pub dropped_wred: u64,
    /// Packets queued now.
    pub depth: u64,
    /// Bytes queued now.
    pub depth_bytes: u64,
    /// Longest sojourn, ns.
    pub sojourn_max_ns: u64,
    /// Mean sojourn, ns.
    pub sojourn_mean_ns: u64,
}

/// A class queue of a port, summed over the workers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassView {
    /// Its name.
    pub name: String,
    /// Strict priority, if strict.
    pub priority: Option<u8>,
    /// DRR weight, if weighted.
    pub weight: Option<u32>,
    /// Minimum rate (0: none).
    pub min_bps: u64,
    /// Maximum rate (0: none).
    pub max_bps: u64,
    /// Queue limit, packets (per worker).
    pub limit: usize,
    /// CoDel on.
    pub codel: bool,
    /// WRED on.
    pub wred: bool,
    /// Packets queued.
    pub enqueued: u64,
    /// Bytes queued.
    pub enqueued_bytes: u64,
    /// Packets sent.
    pub sent: u64,
    /// Bytes sent.
    pub sent_bytes: u64,
    /// Dropped: queue full.
    pub dropped_tail: u64,
    /// Dropped by CoDel.
    pub dropped_codel: u64,
    /// Dropped when the scheduler was replaced.
    pub dropped_flush: u64,
    /// Dropped by WRED on arrival.
    pub dropped_wred: u64,
    /// Packets queued now.
    pub depth: u64,
    /// Bytes queued now.
    pub depth_bytes: u64,
    /// Longest sojourn, ns.
    pub sojourn_max_ns: u64,
    /// Mean sojourn, ns.
    pub sojourn_mean_ns: u64,
}

/// The input feature (one per IP version).
struct QosInFeature {
    v6: bool,
    shared: Arc<QosShared>,
}

impl Feature for QosInFeature {
    fn spec(&self) -> FeatureSpec {
        FeatureSpec {
            name: if self.v6 { IN6 } else { IN4 },
            arc: if self.v6 {
                ArcId::Ip6Unicast
            } else {
                ArcId::Ip4Unicast
            },
            before: &[],
            // What the filters drop spends no tokens, and a filter rule's DSCP rewrite
            // chooses the class (classification by rule). It writes `aux`: after
            // `ip4-nat-in` has taken what `ip4-nat-reply` left there (IPsec's inbound
            // check, which takes its SPI, runs before all of these).
            after: &[
                "ip4-nat-in",
                "ip4-filter-ingress",
                "ip6-filter-ingress",
                "ip4-urpf-strict",
                "ip4-urpf-loose",
                "ip6-urpf-strict",
                "ip6-urpf-loose",
            ],
            drops: DROPS,
        }
    }

    fn node(&self, worker: usize) -> Box<dyn FeatureNode> {
        Box::new(InNode {
            v6: self.v6,
            worker,
            shared: self.shared.clone(),
        })
    }

    fn describe_note(&self, a: u32, b: u64) -> String {
        let colour = Colour::ALL.get(b as usize >> 8).map_or("-", |c| c.name());
        format!("class {a} colour {colour} dscp {}", b & 0xff)
    }
}

struct InNode {
    v6: bool,
    worker: usize,
    shared: Arc<QosShared>,
}

impl FeatureNode for InNode {
    fn process(&mut self, cx: &mut FeatureCx<'_>, batch: &mut Batch<'_>) {
        let now_ns = cx.now_ns;
        // The loop over the concrete arena where the memory is one (every port's is):
        // its frame accesses inline, where through `dyn PacketMemory` each is a call.
        match cx.mem.arena() {
            Some(arena) => self.run(arena, now_ns, batch),
            None => self.run(&mut *cx.mem, now_ns, batch),
        }
    }
}

impl InNode {
    fn run<M: PacketMemory + ?Sized>(&mut self, mem: &mut M, now_ns: u64, batch: &mut Batch<'_>) {
        let table = self.shared.input.load();
        // The policy of the last packet's interface: a vector's packets mostly share one.
        let mut last: Option<(u16, Option<&InputPolicy>)> = None;
        for k in 0..batch.len() {
            let iface = batch.iface(k);
            let policy = match last {
                Some((i, p)) if i == iface => p,
                _ => {
                    let p = table.get(iface as usize).and_then(Option::as_ref);
                    last = Some((iface, p));
                    p
                }
            };
            let Some(policy) = policy else {
                continue;
            };
            // A policy decided by the DSCP alone: one lookup.
            if let Some(t) = &policy.plain {
                self.plain(mem, batch, k, policy.number, t);
                continue;
            }
            let Some(p) = batch.pkt(k).copied() else {
                continue;
            };
            let at = p.off as usize + p.l3 as usize;
            let len = u32::from(p.len).saturating_sub(u32::from(p.l3));
            let frame = mem.frame(p.buf);
            let Some(h) = frame.get(at..) else {
                continue;
            };
            let dscp = if self.v6 { ip6_dscp(h) } else { ip4_dscp(h) };
            let Some(dscp) = dscp else {
                continue;
            };
            // A rule first (the operator's own classification, trusted or not), then the
            // DSCP, then a tagged frame's PCP.
            let by_rule = policy
                .rules
                .as_deref()
                .and_then(|r| r.rule_of_frame(frame, at, self.v6));
            if let (Some(hit), Some(c)) = (by_rule, &policy.rule_counts) {
                c.add(self.worker, hit.rule, len);
            }
            let class = by_rule.map(|h| h.class).unwrap_or_else(|| {
                let pcp = if policy.by_pcp_used() {
                    frame
                        .get(p.off as usize..)
                        .and_then(|f| frame_pcp(f, usize::from(p.l3)))
                } else {
                    None
                };
                policy.class_of_tagged(dscp, pcp)
            });
            match policy.decide_in(now_ns, class, dscp, len) {
                Verdict::Drop { class, colour } => {
                    batch.note(k, u32::from(class), (colour as u64) << 8 | u64::from(dscp));
                    batch.drop(k, POLICED);
                }
                Verdict::Pass { class, dscp: d } => {
                    self.pass(mem, batch, k, at, policy.number, class, dscp, d);
                }
            }
        }
    }

    /// Write DSCP `d` into the IP header `h` (of this node's version), ECN kept.
    #[inline]
    fn remark(&self, h: &mut [u8], d: u8) {
        if self.v6 {
            set_ip6_dscp(h, d);
        } else {
            set_ip4_dscp(h, d);
        }
    }

    /// Packet `k` under a policy decided by its DSCP alone (`t`: DSCP → class << 8 |
    /// DSCP out, [`InputPolicy::plain`]): one access to its frame, read and re-marked in
    /// place, and its descriptor touched once.
    #[inline]
    fn plain<M: PacketMemory + ?Sized>(
        &self,
        mem: &mut M,
        batch: &mut Batch<'_>,
        k: usize,
        number: u16,
        t: &[u16; 64],
    ) {
        let Some(p) = batch.pkt_mut(k) else {
            return;
        };
        let at = p.off as usize + p.l3 as usize;
        let Some(h) = mem.frame_mut(p.buf).get_mut(at..) else {
            return;
        };
        let dscp = if self.v6 { ip6_dscp(h) } else { ip4_dscp(h) };
        let Some(dscp) = dscp else {
            return;
        };
        let e = t[usize::from(dscp & 63)];
        let (class, d) = ((e >> 8) as u8, e as u8);
        // Written whether or not it changes: a branch on the DSCP mispredicts in mixed
        // traffic, and writing the same DSCP back changes nothing (checksum included).
        self.remark(h, d);
        p.aux = with_class(p.aux, number, class);
        let traced = p.flags & dataplane::trace::F_TRACED != 0;
        if traced {
            batch.note(k, u32::from(class), 3 << 8 | u64::from(d));
        }
    }

    /// Packet `k` goes on in class `class` of policy number `number`, re-marked from
    /// `dscp` to `d` if they differ (its IP header at `at` in its frame).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn pass<M: PacketMemory + ?Sized>(
        &self,
        mem: &mut M,
        batch: &mut Batch<'_>,
        k: usize,
        at: usize,
        number: u16,
        class: u8,
        dscp: u8,
        d: u8,
    ) {
        let Some(p) = batch.pkt(k).copied() else {
            return;
        };
        if d != dscp {
            let Some(h) = mem.frame_mut(p.buf).get_mut(at..) else {
                return;
            };
            self.remark(h, d);
        }
        if let Some(q) = batch.pkt_mut(k) {
            q.aux = with_class(q.aux, number, class);
        }
        batch.note(k, u32::from(class), 3 << 8 | u64::from(d));
    }
}

/// The 802.1p feature (one per IP version): on the output arc of a VLAN sub-interface
/// with an output policy, after the rewrite wrote its tags (priority 0), it writes the
/// PCP of the packet's class into every tag: the class the same policy chose on input
/// (carried in `aux`), else the class of its DSCP. A packet bound for fragmentation has
/// no Ethernet header yet: the PCP goes in `aux` for the fragments' tags.
struct PcpFeature {
    v6: bool,
    shared: Arc<QosShared>,
}

impl Feature for PcpFeature {
    fn spec(&self) -> FeatureSpec {
        FeatureSpec {
            name: if self.v6 { PCP6 } else { PCP4 },
            arc: if self.v6 {
                ArcId::Ip6Output
            } else {
                ArcId::Ip4Output
            },
            before: &[],
            // The DSCP as it leaves: after the egress filter's rewrite, NAT and the
            // policy-based IPsec that may encrypt it in place.
            after: &[
                "ip4-filter-egress",
                "ip6-filter-egress",
                "ip4-nat-out",
                "ipsec4-policy-out",
                "ipsec6-policy-out",
            ],
            drops: &[],
        }
    }

    fn node(&self, _worker: usize) -> Box<dyn FeatureNode> {
        Box::new(PcpNode {
            v6: self.v6,
            shared: self.shared.clone(),
        })
    }

    fn describe_note(&self, a: u32, b: u64) -> String {
        format!("pcp {a} dscp {b}")
    }
}

struct PcpNode {
    v6: bool,
    shared: Arc<QosShared>,
}

impl FeatureNode for PcpNode {
    fn process(&mut self, cx: &mut FeatureCx<'_>, batch: &mut Batch<'_>) {
        let table = self.shared.pcp_out.load();
        for k in 0..batch.len() {
            let Some(Some(map)) = table.get(batch.iface(k) as usize) else {
                continue;
            };
            let Some(p) = batch.pkt(k).copied() else {
                continue;
            };
            let Some(f) = cx.mem.frame_mut(p.buf).get_mut(p.off as usize..) else {
                continue;
            };
            let l3 = usize::from(p.l3);
            let h = f.get(l3..).unwrap_or(&[]);
            let dscp = if self.v6 { ip6_dscp(h) } else { ip4_dscp(h) };
            let Some(dscp) = dscp else {
                continue;
            };
            let pcp = match class_in(p.aux) {
                Some((policy, class)) if policy == map.policy => {
                    map.by_class.get(usize::from(class))
                }
                _ => map.by_dscp.get(usize::from(dscp)),
            };
            let pcp = pcp.copied().unwrap_or(NO_PCP);
            if pcp == NO_PCP {
                continue;
            }
            // Bound for ip4-frag (ip6-frag): its L2 header is written with each fragment's.
            if p.flags & F_TO_FRAG != 0 {
                if let Some(q) = batch.pkt_mut(k) {
                    q.aux = with_frag_pcp(q.aux, pcp);
                }
                batch.note(k, u32::from(pcp), u64::from(dscp));
            } else if set_frame_pcp(f, l3, pcp) {
                batch.note(k, u32::from(pcp), u64::from(dscp));
            }
        }
    }
}

/// The DSCP of a packet on a transmit list (`None`: not IPv4 or IPv6).
#[inline]
fn dscp_of(mem: &dyn PacketMemory, p: &Pkt) -> Option<u8> {
    let f = mem.frame(p.buf);
    let at = p.off as usize + p.l3 as usize;
    let ty = f.get(at.checked_sub(2)?..at)?;
    let h = f.get(at..)?;
    match (ty, h.first()? >> 4) {
        ([0x08, 0x00], 4) => ip4_dscp(h),
        ([0x86, 0xdd], 6) => ip6_dscp(h),
        _ => None,
    }
}

/// Queue `k`'s counters (a class's or a pipe's) summed over the workers' `stats`.
fn summed(stats: &[Arc<[QueueStats]>], k: usize) -> crate::sched::QueueCounts {
    let mut n = crate::sched::QueueCounts::default();
    for q in stats.iter().filter_map(|w| w.get(k)) {
        n.add(&q.read());
    }
    n
}

/// The lane of a packet on a transmit list in scheduler `s` (a port with pipes): its pipe's
/// (by its destination address) plus 1, or 0 (no pipe, not IP).
#[inline]
fn lane_of(s: &Scheduler<Pkt>, mem: &dyn PacketMemory, p: &Pkt) -> u16 {
    let f = mem.frame(p.buf);
    let at = p.off as usize + p.l3 as usize;
    let (Some(ty), Some(&v)) = (at.checked_sub(2).and_then(|t| f.get(t..at)), f.get(at)) else {
        return 0;
    };
    match (ty, v >> 4) {
        ([0x08, 0x00], 4) => s.lane_of_frame(f, at, false),
        ([0x86, 0xdd], 6) => s.lane_of_frame(f, at, true),
        _ => 0,
    }
}

/// A worker's schedulers, one per scheduled port: the engine's egress hook.
pub struct QosEgress {
    scheds: Vec<Option<Box<Scheduler<Pkt>>>>,
    /// Each port's output policy number (0: none): what its input classified by that
    /// policy is queued by.
    policies: [u16; MAX_PORTS],
    mask: u64,
    rx: rtrb::Consumer<Update>,
    back: rtrb::Producer<Box<Scheduler<Pkt>>>,
    held: usize,
}

impl QosEgress {
    fn count(&mut self) {
        self.held = self.scheds.iter().flatten().map(|s| s.queued()).sum();
    }
}

impl Egress for QosEgress {
    #[inline]
    fn takes(&self, port: u16) -> bool {
        port < 64 && self.mask & (1 << port) != 0
    }

    fn schedule(
        &mut self,
        port: u16,
        list: &mut Vec<Pkt>,
        mem: &mut dyn PacketMemory,
        now_ns: u64,
    ) {
        let policy = self.policies.get(port as usize).copied().unwrap_or(0);
        let Some(Some(s)) = self.scheds.get_mut(port as usize) else {
            return;
        };
        // Read once: a port without pipes looks at no packet's destination.
        let pipes = s.has_pipes();
        // Nothing queued and the tokens for all of it: the list goes as it is.
        if !list.is_empty()
            && s.pass_through_lanes(list.len(), now_ns, |s, k| {
                let p = &list[k];
                let class = s.class_of_chosen(class_from(p.aux, policy), || dscp_of(mem, p));
                let lane = if pipes { lane_of(s, mem, p) } else { 0 };
                (lane, class, u32::from(p.len))
            })
        {
            return;
        }
        let before = s.queued();
        // Class and lane are found again here rather than kept from the pass-through: with
        // anything queued the pass-through looks at no packet, and keeping them cost every
        // packet it let through 12 instructions in the 64-pipe cell of `ferrouter-lab bench
        // pipeline --qos --qos-pipes 64` (callgrind, 2026-11-28).
        for p in list.drain(..) {
            // The class the port's own policy chose on input (by rule or 802.1p, perhaps
            // without re-marking), else the class of the DSCP.
            let class = s.class_of_chosen(class_from(p.aux, policy), || dscp_of(mem, &p));
            // WRED's drop precedence: the AF drop precedence of the DSCP it leaves with
            // (a policer's re-marking of its colour included); anything else is green.
            let precedence = if s.has_wred(class) {
                dscp_of(mem, &p).map_or(0, |d| dscp_colour(d) as u8)
            } else {
                0
            };
            let lane = if pipes { lane_of(s, mem, &p) } else { 0 };
            if let Err(p) = s.enqueue_in(p, u32::from(p.len), lane, class, precedence, now_ns) {
                mem.free(p.buf);
            }
        }
        // As many as the list holds without growing (it is empty now).
        let room = list.capacity();
        s.dequeue_burst(
            now_ns,
            room,
            &mut |p: Pkt, _| list.push(p),
            &mut |p: Pkt, _| mem.free(p.buf),
        );
        // What this port's queues hold changed; the others' did not.
        self.held = self.held.saturating_sub(before) + s.queued();
    }

    #[inline]
    fn held(&self) -> usize {
        self.held
    }

    fn update(&mut self, mem: &mut dyn PacketMemory) {
        while let Ok(u) = self.rx.pop() {
            let (port, sched, policy) = match u {
                Update::Replace {
                    port,
                    sched,
                    policy,
                } => (port, sched, policy),
                Update::Renumber { port, policy } => {
                    if let Some(p) = self.policies.get_mut(port as usize) {
                        *p = policy;
                    }
                    continue;
                }
            };
            let (Some(slot), Some(number)) = (
                self.scheds.get_mut(port as usize),
                self.policies.get_mut(port as usize),
            ) else {
                continue;
            };
            *number = policy;
            let bit = 1u64 << port;
            if sched.is_some() {
                self.mask |= bit;
            } else {
                self.mask &= !bit;
            }
            if let Some(mut old) = std::mem::replace(slot, sched) {
                old.flush(&mut |p: Pkt, _| mem.free(p.buf));
                // Deallocated by the control thread; here only if its ring is full.
                let _ = self.back.push(old);
            }
            self.count();
        }
    }
}

#[cfg(test)]
mod tests;
