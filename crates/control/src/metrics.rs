//! `GET /metrics`: the daemon's state in the OpenMetrics text format Prometheus scrapes.
//!
//! Read at scrape time from the same counters `show` uses (the workers' single-writer
//! counters, the ports' statistics they publish, the sync's state), so scraping costs the
//! fast path nothing.
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `ferrouter_port_{rx,tx}_{packets,bytes}_total` | port | frames and bytes per port |
//! | `ferrouter_port_rx_drops_total`, `ferrouter_port_tx_errors_total` | port | |
//! | `ferrouter_port_rx_csum_completed_total`, `ferrouter_port_rx_gso_split_total` | port | offloads a sender left to the port |
//! | `ferrouter_vlan_{rx,tx}_{packets,bytes}_total` | vlan | what the fast path received and sent on each VLAN sub-interface |
//! | `ferrouter_node_packets_total` | node, reason, kind | every drop/punt/info reason by graph node |
//! | `ferrouter_worker_polls_total` | worker, state=busy/idle | polls that found packets vs none |
//! | `ferrouter_worker_{rx,tx}_packets_total` | worker | |
//! | `ferrouter_worker_sleeps_total` | worker | sleeps in poll(2): idle, or light load |
//! | `ferrouter_worker_busy_nanoseconds_total` | worker | time in iterations that found work |
//! | `ferrouter_interface_admin_up`, `ferrouter_interface_oper_up` | interface | 1/0: administratively up; carrying traffic (admin up with carrier) |
//! | `ferrouter_fib_routes` | family | prefixes in the fast path's FIB |
//! | `ferrouter_fib_memory_bytes`, `ferrouter_neighbors` | | |
//! | `ferrouter_route_sync_events_total`, `_resyncs_total`, `_fib_errors_total` | | |
//! | `ferrouter_route_sync_lag_seconds` | | last batch of netlink changes: read to in the FIB |
//! | `ferrouter_route_sync_lag_seconds_max` | | the largest since start |
//! | `ferrouter_kernel_forwarded_packets_total` | family | must stay 0 |
//! | `ferrouter_glean_packets_total` | state=held/sent/expired/dropped | packets held while their next hop resolved (docs/forwarding.md) |
//! | `ferrouter_bgp_session_established` | neighbor | 1 when the session is up (with `[bgp]`) |
//! | `ferrouter_bgp_prefixes` | neighbor | prefixes the neighbour has a path for |
//! | `ferrouter_bgp_updates_received_total`, `_treat_as_withdraw_total`, `_notifications_sent_total`, `_notifications_received_total`, `_established_transitions_total`, `_route_refresh_sent_total` | neighbor | |
//! | `ferrouter_bgp_rib_prefixes` | family | prefixes with a best path |
//! | `ferrouter_bgp_fib_changes_total`, `ferrouter_bgp_unresolved_total` | | FIB changes from the speaker; best paths whose next hop is on no connected subnet |
//! | `ferrouter_api_connections` | listener=tcp/unix | API connections open now |
//! | `ferrouter_api_connections_accepted_total` | listener | |
//! | `ferrouter_api_connections_refused_total` | listener, limit=total/per_address | closed at once over a cap (crate::listener) |
//! | `ferrouter_api_timeouts_total` | listener, phase=header/idle/body | connections closed by a timeout; 408s for slow bodies |
//! | `ferrouter_api_accept_errors_total` | listener | failed accepts (out of file descriptors) |
//! | `ferrouter_firewall_rule_packets_total`, `_bytes_total` | filter, rule (1-based, or `policy`) | what each firewall rule decided |
//! | `ferrouter_conntrack_flows`, `ferrouter_conntrack_max_flows` | | flows tracked, and the tables' capacity (with `[firewall] conntrack`) |
//! | `ferrouter_conntrack_events_total` | event=created/expired/refused/early_dropped/invalid | |
//! | `ferrouter_ipsec_sas` | | IPsec SAs installed |
//! | `ferrouter_ipsec_worker_sas` | worker | IPsec SAs each worker holds (its tunnels' and the policy SAs placed on it) |
//! | `ferrouter_ipsec_handed_off_total` | | packets handed to the worker holding their SA (ESP fragments: to worker 0) |
//! | `ferrouter_ipsec_reassembly_total` | event=fragments/reassembled/timed_out/evicted/discarded | fragmented ESP gathered before decryption |
//! | `ferrouter_ipsec_sa_packets_total`, `_bytes_total` | tunnel, direction, spi | inner packets and bytes per SA |
//! | `ferrouter_ipsec_sa_errors_total` | tunnel, direction, spi, reason | packets an SA refused (replayed, integrity_failed, sequence_overflow, other) |
//! | `ferrouter_ike_sas` | state=established/half_open | IKE SAs |
//! | `ferrouter_ike_virtual_ips` | | virtual IPs leased to peers from their `pools` |
//! | `ferrouter_ike_events_total` | event | IKE messages, SAs established, child SAs installed/removed, cookies, DPD and dead peers (`dead_peers`), NAT keepalives, rekeys (`child_rekeys`, `ike_rekeys`, `ike_rekey_collisions`) |
//! | `ferrouter_ike_failures_total` | reason | IKE negotiations that failed (no_proposal, authentication, timeout, ...) |
//! | `ferrouter_ike_dropped_total` | reason | IKE messages dropped (malformed, integrity, bad_message_id, ...) |
//! | `ferrouter_ipsec_policy_matches_total` | interface, direction, policy (the config's index, or `ike:PEER:SRC:PORTS>DST:PORTS/PROTO` for IKE's), action | packets that matched a security policy |
//! | `ferrouter_qos_policer_packets_total`, `_bytes_total` | policer, colour | what each QoS policer marked |
//! | `ferrouter_qos_queue_enqueued_packets_total`, `_sent_packets_total`, `_sent_bytes_total` | interface, class | a port's class queues |
//! | `ferrouter_qos_queue_dropped_packets_total` | interface, class, reason=tail/codel/wred/flush | |
//! | `ferrouter_qos_queue_depth_packets`, `ferrouter_qos_queue_sojourn_max_seconds` | interface, class | |
//! | `ferrouter_qos_pipe_enqueued_packets_total`, `_sent_packets_total`, `_sent_bytes_total` | interface, pipe | a port's pipes (`[[qos.policy.pipe]]`) |
//! | `ferrouter_qos_pipe_dropped_packets_total` | interface, pipe, reason=tail/codel/wred/flush | |
//! | `ferrouter_qos_pipe_depth_packets` | interface, pipe | |
//! | `ferrouter_qos_subport_sent_packets_total`, `_sent_bytes_total`, `_dropped_packets_total` | interface, subport | a port's subports: their pipes' counters summed |
//! | `ferrouter_qos_rule_packets_total`, `_bytes_total` | interface, policy, rule, class | what each `[[qos.policy.rule]]` matched |
//! | `ferrouter_build_info` | version | 1 |
//! | `ferrouter_uptime_seconds` | | |

use std::sync::atomic::{AtomicU64, Ordering};

use dataplane::Reason;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::state::{PortCounters, Shared};

type Labels = Vec<(&'static str, String)>;
/// A metric family: name, help, and its samples.
type Family<T> = (&'static str, &'static str, Vec<(Labels, T)>);

/// One scrape's values, gathered first so the encoder holds no lock.
#[derive(Debug, Default)]
struct Scrape {
    counters: Vec<Family<u64>>,
    gauges: Vec<Family<f64>>,
}

impl Scrape {
    fn counter(&mut self, name: &'static str, help: &'static str, v: Vec<(Labels, u64)>) {
        self.counters.push((name, help, v));
    }
    fn gauge(&mut self, name: &'static str, help: &'static str, v: Vec<(Labels, f64)>) {
        self.gauges.push((name, help, v));
    }
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (name, help, values) in &self.counters {
            let mut family = encoder.encode_descriptor(
                name,
                help,
                None,
                prometheus_client::metrics::MetricType::Counter,
            )?;
            for (labels, v) in values {
                ConstCounter::new(*v).encode(family.encode_family(labels)?)?;
            }
        }
        for (name, help, values) in &self.gauges {
            let mut family = encoder.encode_descriptor(
                name,
                help,
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            for (labels, v) in values {
                ConstGauge::new(*v).encode(family.encode_family(labels)?)?;
            }
        }
        Ok(())
    }
}

/// QoS: what the policers marked, and the ports' class queues.
fn qos_metrics(s: &mut Scrape, shared: &Shared) {
    let v = crate::qosview::view(&shared.features);
    if v.policers.is_empty() && v.ports.is_empty() && v.inputs.is_empty() {
        return;
    }
    let (mut pk, mut by) = (Vec::new(), Vec::new());
    for p in &v.policers {
        for (colour, n, b) in [
            ("green", p.green_packets, p.green_bytes),
            ("yellow", p.yellow_packets, p.yellow_bytes),
            ("red", p.red_packets, p.red_bytes),
        ] {
            let l = vec![("policer", p.name.clone()), ("colour", colour.to_string())];
            pk.push((l.clone(), n));
            by.push((l, b));
        }
    }
    s.counter(
        "ferrouter_qos_policer_packets",
        "Packets each QoS policer marked, by colour.",
        pk,
    );
    s.counter(
        "ferrouter_qos_policer_bytes",
        "Bytes (IP length) each QoS policer marked, by colour.",
        by,
    );
    let (mut enq, mut sent, mut sent_b, mut drops, mut depth, mut soj) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    for p in &v.ports {
        for c in &p.classes {
            let l = vec![
                ("interface", p.interface.clone()),
                ("class", c.name.clone()),
            ];
            enq.push((l.clone(), c.enqueued));
            sent.push((l.clone(), c.sent));
            sent_b.push((l.clone(), c.sent_bytes));
            for (reason, n) in [
                ("tail", c.dropped_tail),
                ("codel", c.dropped_codel),
                ("wred", c.dropped_wred),
                ("flush", c.dropped_flush),
            ] {
                let mut l = l.clone();
                l.push(("reason", reason.to_string()));
                drops.push((l, n));
            }
            depth.push((l.clone(), c.depth as f64));
            soj.push((l, c.sojourn_max_ns as f64 / 1e9));
        }
    }
    s.counter(
        "ferrouter_qos_queue_enqueued_packets",
        "Packets queued in a port's QoS class.",
        enq,
    );
    s.counter(
        "ferrouter_qos_queue_sent_packets",
        "Packets a port's QoS class sent.",
        sent,
    );
    s.counter(
        "ferrouter_qos_queue_sent_bytes",
        "Bytes a port's QoS class sent.",
        sent_b,
    );
    s.counter("ferrouter_qos_queue_dropped_packets", "Packets a port's QoS class dropped: queue full (tail), CoDel, or its scheduler replaced (flush).", drops);
    s.gauge(
        "ferrouter_qos_queue_depth_packets",
        "Packets in a port's QoS class queue now.",
        depth,
    );
    s.gauge(
        "ferrouter_qos_queue_sojourn_max_seconds",
        "Longest time a packet waited in a port's QoS class queue.",
        soj,
    );
    let (mut enq, mut sent, mut sent_b, mut drops, mut depth) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for p in &v.ports {
        for q in &p.pipes {
            let l = vec![("interface", p.interface.clone()), ("pipe", q.name.clone())];
            enq.push((l.clone(), q.enqueued));
            sent.push((l.clone(), q.sent));
            sent_b.push((l.clone(), q.sent_bytes));
            for (reason, n) in [
                ("tail", q.dropped_tail),
                ("codel", q.dropped_codel),
                ("wred", q.dropped_wred),
                ("flush", q.dropped_flush),
            ] {
                let mut l = l.clone();
                l.push(("reason", reason.to_string()));
                drops.push((l, n));
            }
            depth.push((l, q.depth as f64));
        }
    }
    s.counter(
        "ferrouter_qos_pipe_enqueued_packets",
        "Packets queued in a port's QoS pipe.",
        enq,
    );
    s.counter(
        "ferrouter_qos_pipe_sent_packets",
        "Packets a port's QoS pipe sent.",
        sent,
    );
    s.counter(
        "ferrouter_qos_pipe_sent_bytes",
        "Bytes a port's QoS pipe sent.",
        sent_b,
    );
    s.counter("ferrouter_qos_pipe_dropped_packets", "Packets a port's QoS pipe dropped: its queue or the port's queues full (tail), CoDel, WRED, or its scheduler replaced (flush).", drops);
    s.gauge(
        "ferrouter_qos_pipe_depth_packets",
        "Packets in a port's QoS pipe's queues now.",
        depth,
    );
    let (mut sent, mut sent_b, mut drops) = (Vec::new(), Vec::new(), Vec::new());
    for p in &v.ports {
        for u in &p.subports {
            let l = vec![
                ("interface", p.interface.clone()),
                ("subport", u.name.clone()),
            ];
            sent.push((l.clone(), u.sent));
            sent_b.push((l.clone(), u.sent_bytes));
            drops.push((l, u.dropped));
        }
    }
    s.counter(
        "ferrouter_qos_subport_sent_packets",
        "Packets the QoS pipes under a port's subport sent.",
        sent,
    );
    s.counter(
        "ferrouter_qos_subport_sent_bytes",
        "Bytes the QoS pipes under a port's subport sent.",
        sent_b,
    );
    s.counter(
        "ferrouter_qos_subport_dropped_packets",
        "Packets the QoS pipes under a port's subport dropped, for any reason.",
        drops,
    );
    let (mut pk, mut by) = (Vec::new(), Vec::new());
    for i in &v.inputs {
        for r in &i.rules {
            let l = vec![
                ("interface", i.interface.clone()),
                ("policy", i.policy.clone()),
                ("rule", r.index.to_string()),
                ("class", r.class.clone()),
            ];
            pk.push((l.clone(), r.packets));
            by.push((l, r.bytes));
        }
    }
    s.counter(
        "ferrouter_qos_rule_packets",
        "Packets each QoS classifier rule matched on an interface.",
        pk,
    );
    s.counter(
        "ferrouter_qos_rule_bytes",
        "Bytes (IP length) of the packets each QoS classifier rule matched on an interface.",
        by,
    );
}

/// The API's connections, per listener (`tcp`, `unix`).
/// The firewall's rule counters and connection tracking.
fn firewall_metrics(s: &mut Scrape, shared: &Shared) {
    let rs = shared.features.firewall.rules.load();
    let (mut pk, mut by) = (Vec::new(), Vec::new());
    for f in &rs.filters {
        let c = rs.counts(f);
        let rules = c
            .rules
            .iter()
            .enumerate()
            .map(|(i, n)| ((i + 1).to_string(), *n));
        for (rule, (p, b)) in rules.chain(std::iter::once(("policy".to_string(), c.policy))) {
            let l = vec![("filter", f.name.clone()), ("rule", rule)];
            pk.push((l.clone(), p));
            by.push((l, b));
        }
    }
    s.counter(
        "ferrouter_firewall_rule_packets",
        "Packets each firewall rule (or a filter's policy) decided.",
        pk,
    );
    s.counter(
        "ferrouter_firewall_rule_bytes",
        "Bytes (IP length) of the packets each firewall rule decided.",
        by,
    );
    if let Some(c) = crate::fwview::conntrack_view(&shared.features) {
        s.gauge(
            "ferrouter_conntrack_flows",
            "Flows in the connection-tracking tables.",
            vec![(vec![], c.flows as f64)],
        );
        s.gauge(
            "ferrouter_conntrack_max_flows",
            "Capacity of the connection-tracking tables.",
            vec![(vec![], c.max as f64)],
        );
        s.counter(
            "ferrouter_conntrack_events",
            "Connection-tracking events: flows created, expired, refused (table full), dropped early; invalid packets.",
            vec![
                (vec![("event", "created".into())], c.created),
                (vec![("event", "expired".into())], c.expired),
                (vec![("event", "refused".into())], c.refused),
                (vec![("event", "early_dropped".into())], c.early_dropped),
                (vec![("event", "invalid".into())], c.invalid),
            ],
        );
    }
    let nat = shared.features.nat.stats();
    if !nat.is_empty() {
        let sum = |f: fn(&firewall::nat::NatStats) -> u64| nat.iter().map(f).sum::<u64>();
        s.gauge(
            "ferrouter_nat_sessions",
            "NAT sessions in the workers' tables.",
            vec![(vec![], sum(|x| x.sessions) as f64)],
        );
        s.gauge(
            "ferrouter_nat_max_sessions",
            "Capacity of the workers' NAT tables.",
            vec![(vec![], sum(|x| x.max) as f64)],
        );
        s.gauge(
            "ferrouter_nat_mappings",
            "NAT endpoint mappings (inside address and port to external) in use.",
            vec![(vec![], sum(|x| x.mappings) as f64)],
        );
        s.counter(
            "ferrouter_nat_events",
            "NAT events: sessions created, expired, refused (table full, no free port, reply tuple taken).",
            vec![
                (vec![("event", "created".into())], sum(|x| x.created)),
                (vec![("event", "expired".into())], sum(|x| x.expired)),
                (vec![("event", "refused_full".into())], sum(|x| x.full)),
                (vec![("event", "refused_no_port".into())], sum(|x| x.no_port)),
                (vec![("event", "collision".into())], sum(|x| x.collision)),
            ],
        );
    }
}

/// The IKE daemon: SAs by state, events, failures and drops by reason.
fn ike_metrics(s: &mut Scrape, shared: &Shared) {
    let Some((c, established, half_open)) = shared.ike.counters() else {
        return;
    };
    s.gauge(
        "ferrouter_ike_sas",
        "IKE SAs, established and half-open.",
        vec![
            (vec![("state", "established".into())], established as f64),
            (vec![("state", "half_open".into())], half_open as f64),
        ],
    );
    if let Some(n) = shared.ike.leases() {
        s.gauge(
            "ferrouter_ike_virtual_ips",
            "Virtual IPs leased to peers from their pools.",
            vec![(vec![], n as f64)],
        );
    }
    let m = crate::ikesvc::counter_map(&c);
    let pick = |prefix: &str| -> Vec<(Vec<(&'static str, String)>, u64)> {
        m.iter()
            .filter_map(|(k, v)| k.strip_prefix(prefix).map(|r| (r.to_string(), *v)))
            .map(|(r, v)| (vec![("reason", r)], v))
            .collect()
    };
    s.counter(
        "ferrouter_ike_failures",
        "IKE negotiations that failed, by reason.",
        pick("failed_"),
    );
    s.counter(
        "ferrouter_ike_dropped",
        "IKE messages dropped, by reason.",
        pick("dropped_"),
    );
    s.counter(
        "ferrouter_ike_events",
        "IKE events: messages received/sent/retransmitted, SAs established, child SAs installed/removed, cookies, DPD, child and IKE SA rekeys.",
        m.iter()
            .filter(|(k, _)| !k.starts_with("failed_") && !k.starts_with("dropped_"))
            .map(|(k, v)| (vec![("event", k.clone())], *v))
            .collect(),
    );
}

/// IPsec SAs: packets, bytes and errors per SA.
fn ipsec_metrics(s: &mut Scrape, shared: &Shared) {
    let policies = shared.features.ipsec.spd().report();
    if !policies.is_empty() {
        s.counter(
            "ferrouter_ipsec_policy_matches",
            "Packets that matched a security policy (policy-based IPsec).",
            policies
                .iter()
                .map(|p| {
                    (
                        vec![
                            ("interface", p.interface.clone()),
                            ("direction", p.direction.to_string()),
                            // IKE's policies by what they select (their index moves
                            // as children come and go).
                            (
                                "policy",
                                match &p.peer {
                                    None => p.index.to_string(),
                                    Some(peer) => format!(
                                        "ike:{peer}:{}:{}>{}:{}/{}",
                                        p.src, p.src_ports, p.dst, p.dst_ports, p.protocol
                                    ),
                                },
                            ),
                            ("action", p.action.to_string()),
                        ],
                        p.matches,
                    )
                })
                .collect(),
        );
    }
    let sas = shared.features.ipsec.report();
    if sas.is_empty() {
        return;
    }
    let label = |r: &ipsec::node::SaReport| {
        vec![
            ("tunnel", r.sa.tunnel.clone()),
            ("direction", r.sa.direction.to_string()),
            ("spi", format!("{:#x}", r.sa.spi)),
        ]
    };
    s.gauge(
        "ferrouter_ipsec_sas",
        "IPsec SAs installed in the fast path.",
        vec![(vec![], sas.len() as f64)],
    );
    let mut by_worker: std::collections::BTreeMap<usize, usize> = Default::default();
    for r in &sas {
        *by_worker.entry(r.sa.worker).or_default() += 1;
    }
    s.gauge(
        "ferrouter_ipsec_worker_sas",
        "IPsec SAs each worker holds (the SAs of the tunnels it owns, and the policy SAs placed on it).",
        by_worker
            .into_iter()
            .map(|(w, n)| (vec![("worker", w.to_string())], n as f64))
            .collect(),
    );
    s.counter(
        "ferrouter_ipsec_handed_off",
        "Packets handed to the worker that holds their SA (ESP received, packets routed to a tunnel or protected by a policy; ESP fragments to worker 0, which gathers them).",
        vec![(
            vec![],
            shared
                .features
                .ipsec
                .handed_off
                .load(std::sync::atomic::Ordering::Relaxed),
        )],
    );
    let r = &shared.features.ipsec.reasm;
    let n = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    s.counter(
        "ferrouter_ipsec_reassembly",
        "Fragmented ESP to the router: fragments taken, datagrams reassembled, and datagrams lost (timed out, evicted from a full table, discarded for a bad fragment).",
        vec![
            (vec![("event", "fragments".into())], n(&r.fragments)),
            (vec![("event", "reassembled".into())], n(&r.reassembled)),
            (vec![("event", "timed_out".into())], n(&r.timed_out)),
            (vec![("event", "evicted".into())], n(&r.evicted)),
            (vec![("event", "discarded".into())], n(&r.discarded)),
        ],
    );
    s.counter(
        "ferrouter_ipsec_sa_packets",
        "Inner packets an SA encrypted or decrypted.",
        sas.iter().map(|r| (label(r), r.packets)).collect(),
    );
    s.counter(
        "ferrouter_ipsec_sa_bytes",
        "Bytes of the inner packets an SA encrypted or decrypted.",
        sas.iter().map(|r| (label(r), r.bytes)).collect(),
    );
    s.counter(
        "ferrouter_ipsec_sa_errors",
        "Packets an SA refused, by reason (replayed, integrity_failed, sequence_overflow, other).",
        sas.iter()
            .flat_map(|r| {
                r.errors.iter().map(|(reason, n)| {
                    let mut l = label(r);
                    l.push(("reason", reason.to_string()));
                    (l, *n)
                })
            })
            .collect(),
    );
}

/// Flow steering between workers (several workers with flow state).
fn steering_metrics(s: &mut Scrape, shared: &Shared) {
    let st = &shared.features.steering;
    if st.workers() < 2 {
        return;
    }
    let x = st.stats();
    s.counter(
        "ferrouter_handoff_events",
        "Flow steering between workers: packets handed to the worker that owns their flow, taken by it, dropped there for want of a free frame; later fragments steered without their first fragment's hint; packets kept for want of a sending side.",
        vec![
            (vec![("event", "handed_off".into())], x.handed_off),
            (vec![("event", "received".into())], x.received),
            (vec![("event", "no_buffer".into())], x.no_buffer),
            (vec![("event", "frag_unhinted".into())], x.frag_unhinted),
            (vec![("event", "unsteered".into())], x.unsteered),
        ],
    );
}

fn api_connections(s: &mut Scrape, c: &crate::listener::ConnStats) {
    let each = |f: fn(&crate::listener::ListenerStats) -> &AtomicU64| -> Vec<(Labels, u64)> {
        [("tcp", &c.tcp), ("unix", &c.unix)]
            .into_iter()
            .map(|(name, l)| {
                (
                    vec![("listener", name.to_string())],
                    f(l).load(Ordering::Relaxed),
                )
            })
            .collect()
    };
    s.gauge(
        "ferrouter_api_connections",
        "API connections open now.",
        each(|l| &l.open)
            .into_iter()
            .map(|(k, v)| (k, v as f64))
            .collect(),
    );
    s.counter(
        "ferrouter_api_connections_accepted",
        "API connections accepted and served.",
        each(|l| &l.accepted),
    );
    let mut refused = Vec::new();
    for (limit, f) in [
        (
            "total",
            (|l| &l.refused_total) as fn(&crate::listener::ListenerStats) -> &AtomicU64,
        ),
        ("per_address", |l| &l.refused_per_address),
    ] {
        for (mut k, v) in each(f) {
            k.push(("limit", limit.to_string()));
            refused.push((k, v));
        }
    }
    s.counter(
        "ferrouter_api_connections_refused",
        "API connections closed as soon as accepted: a cap (api.max_connections, api.max_connections_per_address, the unix socket's) was reached.",
        refused,
    );
    let mut timeouts = Vec::new();
    for (phase, f) in [
        (
            "header",
            (|l| &l.header_timeouts) as fn(&crate::listener::ListenerStats) -> &AtomicU64,
        ),
        ("idle", |l| &l.idle_timeouts),
        ("body", |l| &l.body_timeouts),
    ] {
        for (mut k, v) in each(f) {
            k.push(("phase", phase.to_string()));
            timeouts.push((k, v));
        }
    }
    s.counter(
        "ferrouter_api_timeouts",
        "API connections closed as a request head did not arrive in time (header) or after idling (idle); requests answered 408 as their body did not arrive in time (body).",
        timeouts,
    );
    s.counter(
        "ferrouter_api_accept_errors",
        "Failed accepts on an API listener (out of file descriptors, say).",
        each(|l| &l.accept_errors),
    );
}

/// The metrics text.
pub fn render(shared: &Shared) -> Result<String, String> {
    let mut s = Scrape::default();
    let port = |field: fn(&PortCounters) -> &AtomicU64| -> Vec<(Labels, u64)> {
        shared
            .ports
            .iter()
            .map(|f| {
                (
                    vec![("port", f.name.clone())],
                    shared.port_total(f.port, field),
                )
            })
            .collect()
    };
    type PortField = fn(&PortCounters) -> &AtomicU64;
    let port_counters: [(&str, &str, PortField); 8] = [
        (
            "ferrouter_port_rx_packets",
            "Frames received on the port.",
            |c| &c.rx_packets,
        ),
        (
            "ferrouter_port_rx_bytes",
            "Bytes received on the port.",
            |c| &c.rx_bytes,
        ),
        (
            "ferrouter_port_tx_packets",
            "Frames sent on the port.",
            |c| &c.tx_packets,
        ),
        ("ferrouter_port_tx_bytes", "Bytes sent on the port.", |c| {
            &c.tx_bytes
        }),
        (
            "ferrouter_port_rx_drops",
            "Frames the port dropped on receive (no buffer, too big, kernel ring full).",
            |c| &c.rx_drops,
        ),
        (
            "ferrouter_port_tx_errors",
            "Frames the port failed to send.",
            |c| &c.tx_errors,
        ),
        (
            "ferrouter_port_rx_csum_completed",
            "Partial L4 checksums (the sender's checksum offload) the port completed.",
            |c| &c.rx_csum_completed,
        ),
        (
            "ferrouter_port_rx_gso_split",
            "Super-frames (the sender's segmentation offload, GRO) the port cut into segments.",
            |c| &c.rx_gso_split,
        ),
    ];
    for (name, help, field) in port_counters {
        s.counter(name, help, port(field));
    }
    type SubifField = fn(&dataplane::counters::SubifCounts) -> u64;
    let subif_counters: [(&str, &str, SubifField); 4] = [
        (
            "ferrouter_vlan_rx_packets",
            "Packets the fast path received on the VLAN sub-interface.",
            |c| c.rx_packets,
        ),
        (
            "ferrouter_vlan_rx_bytes",
            "Bytes (tags included) the fast path received on the VLAN sub-interface.",
            |c| c.rx_bytes,
        ),
        (
            "ferrouter_vlan_tx_packets",
            "Packets the fast path sent from the VLAN sub-interface.",
            |c| c.tx_packets,
        ),
        (
            "ferrouter_vlan_tx_bytes",
            "Bytes (tags included) the fast path sent from the VLAN sub-interface.",
            |c| c.tx_bytes,
        ),
    ];
    let subifs: Vec<_> = (0..shared.subifs.len())
        .map(|k| shared.subif_total(k))
        .collect();
    for (name, help, field) in subif_counters {
        s.counter(
            name,
            help,
            shared
                .subifs
                .iter()
                .zip(&subifs)
                .map(|(n, c)| (vec![("vlan", n.clone())], field(c)))
                .collect(),
        );
    }

    let total = dataplane::worker::aggregate(shared.workers.iter());
    s.counter(
        "ferrouter_node_packets",
        "Packets each graph node dropped, punted to Linux, or counted, by reason.",
        Reason::ALL
            .iter()
            .map(|r| {
                (
                    vec![
                        ("node", r.node().to_string()),
                        ("reason", r.name().to_string()),
                        ("kind", r.kind().name().to_string()),
                    ],
                    total.get(*r),
                )
            })
            .collect(),
    );
    let features = shared.features.counters(&shared.workers);
    s.counter(
        "ferrouter_feature_packets",
        "Packets each feature node (uRPF, ...) saw, by feature and arc.",
        features
            .iter()
            .map(|f| {
                (
                    vec![
                        ("feature", f.feature.to_string()),
                        ("arc", f.arc.to_string()),
                    ],
                    f.packets,
                )
            })
            .collect(),
    );
    s.counter(
        "ferrouter_feature_drops",
        "Packets each feature node dropped, by feature and reason.",
        features
            .iter()
            .flat_map(|f| {
                f.drops.iter().map(|(r, _, n)| {
                    (
                        vec![
                            ("feature", f.feature.to_string()),
                            ("reason", r.to_string()),
                        ],
                        *n,
                    )
                })
            })
            .collect(),
    );
    firewall_metrics(&mut s, shared);
    steering_metrics(&mut s, shared);
    ipsec_metrics(&mut s, shared);
    ike_metrics(&mut s, shared);
    qos_metrics(&mut s, shared);
    let mut polls = Vec::new();
    let mut wrx = Vec::new();
    let mut wtx = Vec::new();
    let mut sleeps = Vec::new();
    let mut busy = Vec::new();
    for w in &shared.workers {
        let c = w.counters.snapshot();
        let id = w.id.to_string();
        sleeps.push((vec![("worker", id.clone())], c.sleeps));
        busy.push((vec![("worker", id.clone())], c.busy_ns));
        polls.push((
            vec![("worker", id.clone()), ("state", "busy".into())],
            c.vectors,
        ));
        polls.push((
            vec![("worker", id.clone()), ("state", "idle".into())],
            c.idle_polls,
        ));
        wrx.push((vec![("worker", id.clone())], c.rx));
        wtx.push((vec![("worker", id)], c.tx));
    }
    s.counter(
        "ferrouter_worker_polls",
        "Port polls by a worker that found packets (busy) or none (idle); busy/(busy+idle) is its load.",
        polls,
    );
    s.counter(
        "ferrouter_worker_rx_packets",
        "Packets a worker received.",
        wrx,
    );
    s.counter("ferrouter_worker_tx_packets", "Packets a worker sent.", wtx);
    s.counter(
        "ferrouter_worker_busy_nanoseconds",
        "Time a worker spent in loop iterations that found work (polling for nothing excluded); divided by its packets, its CPU cost per packet.",
        busy,
    );
    s.counter(
        "ferrouter_worker_sleeps",
        "Times a worker slept in poll(2) waiting for its ports: idle, or under light load (adaptive polling).",
        sleeps,
    );

    {
        let sync = shared
            .sync
            .lock()
            .map_err(|_| "internal state unavailable".to_string())?;
        let (v4, v6) = sync.route_counts();
        let m = sync.writer().memory();
        let st = sync.stats();
        s.gauge(
            "ferrouter_fib_routes",
            "Prefixes in the fast path's FIB.",
            vec![
                (vec![("family", "ipv4".into())], v4 as f64),
                (vec![("family", "ipv6".into())], v6 as f64),
            ],
        );
        s.gauge(
            "ferrouter_fib_memory_bytes",
            "Memory of the FIB: lookup tables, route store and next hops.",
            vec![(
                vec![],
                (m.v4_table_bytes + m.v6_table_bytes + m.rib_bytes + m.nexthop_bytes) as f64,
            )],
        );
        // Ports then VLAN sub-interfaces, as `show interfaces` lists them.
        let held_down = shared.held_down.load();
        let links: Vec<(String, crate::sync::PortLink)> = sync
            .port_names()
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), sync.port_link(i, &held_down)))
            .collect();
        s.gauge(
            "ferrouter_interface_admin_up",
            "1 if the interface is administratively up, 0 if down (by the config or outside).",
            links
                .iter()
                .map(|(n, l)| {
                    (
                        vec![("interface", n.clone())],
                        f64::from(u8::from(l.admin_up)),
                    )
                })
                .collect(),
        );
        s.gauge(
            "ferrouter_interface_oper_up",
            "1 if the interface carries traffic (admin up with carrier), 0 if routes through it are not used.",
            links
                .iter()
                .map(|(n, l)| (vec![("interface", n.clone())], f64::from(u8::from(l.oper == crate::model::Oper::Up))))
                .collect(),
        );
        s.gauge(
            "ferrouter_neighbors",
            "Neighbours (ARP/NDP entries) the fast path knows.",
            vec![(vec![], sync.neighbor_count() as f64)],
        );
        s.gauge(
            "ferrouter_kernel_routes_mirrored",
            "Kernel routes mirrored from netlink.",
            vec![(vec![], sync.mirrored_routes() as f64)],
        );
        s.counter(
            "ferrouter_route_sync_events",
            "Netlink changes applied to the FIB.",
            vec![(vec![], st.events)],
        );
        s.counter(
            "ferrouter_route_sync_resyncs",
            "Full resyncs from a kernel dump (start, and every netlink overflow).",
            vec![(vec![], st.resyncs)],
        );
        s.counter(
            "ferrouter_route_sync_fib_errors",
            "FIB writes that failed.",
            vec![(vec![], st.fib_errors)],
        );
        if shared.bgp.get().is_some() {
            s.counter(
                "ferrouter_bgp_unresolved",
                "BGP best paths not installed: next hop on no connected subnet.",
                vec![(vec![], st.bgp_unresolved)],
            );
        }
    }
    if let Some(b) = shared.bgp.get() {
        let v = b.view();
        type NeighborField = fn(&bgp::speaker::NeighborView) -> u64;
        let per = |f: NeighborField| -> Vec<(Labels, u64)> {
            v.neighbors
                .iter()
                .map(|n| (vec![("neighbor", n.address.to_string())], f(n)))
                .collect()
        };
        let gauge = |f: NeighborField| -> Vec<(Labels, f64)> {
            per(f).into_iter().map(|(l, x)| (l, x as f64)).collect()
        };
        s.gauge(
            "ferrouter_bgp_session_established",
            "1 while the BGP session with the neighbour is established.",
            gauge(|n| u64::from(n.state == bgp::speaker::State::Established)),
        );
        s.gauge(
            "ferrouter_bgp_prefixes",
            "Prefixes the neighbour has a path for.",
            gauge(|n| n.prefixes),
        );
        let neighbor_counters: [(&str, &str, NeighborField); 6] = [
            (
                "ferrouter_bgp_updates_received",
                "UPDATE messages received.",
                |n| n.updates_received,
            ),
            (
                "ferrouter_bgp_treat_as_withdraw",
                "UPDATEs whose announcements were treated as withdrawals (RFC 7606).",
                |n| n.treat_as_withdraw,
            ),
            (
                "ferrouter_bgp_notifications_sent",
                "NOTIFICATIONs sent.",
                |n| n.notifications_sent,
            ),
            (
                "ferrouter_bgp_notifications_received",
                "NOTIFICATIONs received.",
                |n| n.notifications_received,
            ),
            (
                "ferrouter_bgp_established_transitions",
                "Times the session reached Established.",
                |n| n.established_transitions,
            ),
            (
                "ferrouter_bgp_route_refresh_sent",
                "ROUTE-REFRESH requests sent: an unresolved next hop became usable.",
                |n| n.route_refresh_sent,
            ),
        ];
        for (name, help, field) in neighbor_counters {
            s.counter(name, help, per(field));
        }
        s.gauge(
            "ferrouter_bgp_rib_prefixes",
            "Prefixes with a best path in the BGP speaker's RIB.",
            vec![
                (vec![("family", "ipv4".into())], v.prefixes_v4 as f64),
                (vec![("family", "ipv6".into())], v.prefixes_v6 as f64),
            ],
        );
        s.counter(
            "ferrouter_bgp_fib_changes",
            "FIB changes the BGP speaker handed to the fast path.",
            vec![(vec![], v.fib_changes)],
        );
    }
    let ns = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 / 1e9;
    s.gauge(
        "ferrouter_route_sync_lag_seconds",
        "Time from reading the last batch of netlink changes to having all of them in the FIB.",
        vec![(vec![], ns(&shared.sync_lag.last_ns))],
    );
    s.gauge(
        "ferrouter_route_sync_lag_seconds_max",
        "The largest route-sync lag since start.",
        vec![(vec![], ns(&shared.sync_lag.max_ns))],
    );
    let kf = crate::api::kernel_forwarded();
    s.counter(
        "ferrouter_kernel_forwarded_packets",
        "Packets the kernel forwarded in the router's namespace (the fast path forwards: must stay 0).",
        [("ipv4", kf.ipv4), ("ipv6", kf.ipv6)]
            .into_iter()
            .map(|(f, n)| (vec![("family", f.to_string())], n.unwrap_or(0)))
            .collect(),
    );
    let g = shared.glean.snapshot();
    s.counter(
        "ferrouter_glean_packets",
        "Packets to a next hop not yet resolved: held, sent once it resolved, expired, or not held (bounds).",
        [
            ("held", g.held),
            ("sent", g.sent),
            ("expired", g.expired),
            ("dropped", g.dropped),
        ]
        .into_iter()
        .map(|(k, n)| (vec![("state", k.to_string())], n))
        .collect(),
    );
    api_connections(&mut s, &shared.api_conns);
    s.gauge(
        "ferrouter_build_info",
        "The running build (always 1).",
        vec![(vec![("version", shared.version.clone())], 1.0)],
    );
    s.gauge(
        "ferrouter_uptime_seconds",
        "Seconds since the daemon started.",
        vec![(vec![], shared.started.elapsed().as_secs_f64())],
    );

    let mut reg = Registry::default();
    reg.register_collector(Box::new(s));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &reg)
        .map_err(|e| format!("encoding metrics: {e}"))?;
    Ok(out)
}
