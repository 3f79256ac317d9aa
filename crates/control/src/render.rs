//! Human tables for the API's answers ([`crate::model`]'s types, as [`Shown`]): `ferrouter
//! show`, and the test bench's lab (`ferrouter-lab lab status|demo`), which renders the
//! same answers.

use std::fmt::Write as _;

use crate::api::Shown;
use crate::model;

/// An optional value, `-` when absent.
fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "-".into(), T::to_string)
}

/// Human tables for `ferrouter show`.
pub fn render(v: &Shown) -> String {
    match v {
        Shown::Interfaces(i) => interfaces(i),
        Shown::Routes(r) => routes(r),
        Shown::RoutesSummary(s) => routes_summary(s),
        Shown::Neighbors(n) => neighbors(n),
        Shown::Counters(c) => counters(c),
        Shown::Bgp(b) => bgp(b),
        Shown::Firewall(f) => firewall(f),
        Shown::Conntrack(c) => conntrack(c),
        Shown::Nat(n) => nat(n),
        Shown::NatSessions(n) => nat_sessions(n),
        Shown::Ipsec(i) => ipsec(i),
        Shown::Ike(i) => ike(i),
        Shown::IkeSummary(i) => ike_summary(i),
        Shown::IkeChildSas(c) => ike_children(c),
        Shown::Qos(q) => qos(q),
    }
}

/// A rate in bit/s as people read it.
fn rate(bps: u64) -> String {
    match bps {
        0 => "-".into(),
        b if b % 1_000_000_000 == 0 => format!("{}Gbit", b / 1_000_000_000),
        b if b >= 1_000_000 => format!("{:.3}Mbit", b as f64 / 1e6).replace(".000Mbit", "Mbit"),
        b => format!("{:.1}kbit", b as f64 / 1e3).replace(".0kbit", "kbit"),
    }
}

/// `ferrouter show qos`: the policers, then each scheduled port's classes.
pub fn qos(v: &model::QosView) -> String {
    let mut s = String::new();
    if v.policers.is_empty() && v.ports.is_empty() && v.inputs.is_empty() {
        let _ = writeln!(s, "no QoS policers, scheduled ports or rules ([qos])");
        return s;
    }
    if !v.policers.is_empty() {
        let _ = writeln!(
            s,
            "{:<16} {:<8} {:>12} {:>12} {:>12} {:>12} {:>12}",
            "POLICER", "KIND", "CIR", "PIR/EIR", "GREEN", "YELLOW", "RED"
        );
        for p in &v.policers {
            let _ = writeln!(
                s,
                "{:<16} {:<8} {:>12} {:>12} {:>12} {:>12} {:>12}",
                p.name,
                p.kind,
                rate(p.cir_bps),
                rate(p.pir_bps),
                p.green_packets,
                p.yellow_packets,
                p.red_packets
            );
        }
    }
    for p in &v.ports {
        let _ = writeln!(
            s,
            "\nport {} (policy {}, shaper {})",
            p.interface,
            p.policy,
            rate(p.shaper_bps)
        );
        let _ = writeln!(
            s,
            "  {:<12} {:>6} {:>10} {:>10} {:>12} {:>12} {:>9} {:>9} {:>9} {:>7} {:>11} {:>11}",
            "CLASS",
            "PRIO/W",
            "MIN",
            "MAX",
            "ENQUEUED",
            "SENT",
            "TAIL",
            "CODEL",
            "WRED",
            "DEPTH",
            "SOJ-MAX-us",
            "SOJ-AVG-us"
        );
        for c in &p.classes {
            let pw = match (c.priority, c.weight) {
                (Some(p), _) => format!("p{p}"),
                (None, Some(w)) => format!("w{w}"),
                _ => "-".into(),
            };
            let _ = writeln!(
                s,
                "  {:<12} {:>6} {:>10} {:>10} {:>12} {:>12} {:>9} {:>9} {:>9} {:>7} {:>11.1} {:>11.1}",
                c.name,
                pw,
                rate(c.min_bps),
                rate(c.max_bps),
                c.enqueued,
                c.sent,
                c.dropped_tail,
                c.dropped_codel,
                c.dropped_wred,
                c.depth,
                c.sojourn_max_ns as f64 / 1e3,
                c.sojourn_mean_ns as f64 / 1e3
            );
        }
        // One line a pipe, after the classes (which count every pipe's packets too).
        if !p.pipes.is_empty() {
            let _ = writeln!(
                s,
                "  {:<12} {:<12} {:<12} {:>10} {:>12} {:>12} {:>9} {:>9} {:>9} {:>7} {:>11} {:>11}",
                "PIPE",
                "PROFILE",
                "SUBPORT",
                "RATE",
                "ENQUEUED",
                "SENT",
                "TAIL",
                "CODEL",
                "WRED",
                "DEPTH",
                "SOJ-MAX-us",
                "SOJ-AVG-us"
            );
            for q in &p.pipes {
                let _ = writeln!(
                s,
                "  {:<12} {:<12} {:<12} {:>10} {:>12} {:>12} {:>9} {:>9} {:>9} {:>7} {:>11.1} {:>11.1}",
                q.name,
                q.profile.as_deref().unwrap_or("-"),
                q.subport.as_deref().unwrap_or("-"),
                rate(q.rate_bps),
                q.enqueued,
                q.sent,
                q.dropped_tail,
                q.dropped_codel,
                q.dropped_wred,
                q.depth,
                q.sojourn_max_ns as f64 / 1e3,
                q.sojourn_mean_ns as f64 / 1e3
            );
            }
        }
        if p.subports.is_empty() {
            continue;
        }
        // One line a subport: its rate and its pipes' counters summed.
        let _ = writeln!(
            s,
            "  {:<12} {:>10} {:>6} {:>6} {:>12} {:>12} {:>14} {:>9} {:>7}",
            "SUBPORT",
            "RATE",
            "LIMIT",
            "PIPES",
            "ENQUEUED",
            "SENT",
            "SENT-BYTES",
            "DROPPED",
            "DEPTH"
        );
        for u in &p.subports {
            let _ = writeln!(
                s,
                "  {:<12} {:>10} {:>6} {:>6} {:>12} {:>12} {:>14} {:>9} {:>7}",
                u.name,
                rate(u.rate_bps),
                opt(&u.limit),
                u.pipes,
                u.enqueued,
                u.sent,
                u.sent_bytes,
                u.dropped,
                u.depth
            );
        }
    }
    for i in &v.inputs {
        let _ = writeln!(s, "\ninput {} (policy {})", i.interface, i.policy);
        let _ = writeln!(
            s,
            "  {:>4}  {:<12} {:>12} {:>14}  matches",
            "RULE", "CLASS", "PACKETS", "BYTES"
        );
        for r in &i.rules {
            let _ = writeln!(
                s,
                "  {:>4}  {:<12} {:>12} {:>14}  {}",
                r.index, r.class, r.packets, r.bytes, r.matches
            );
        }
    }
    s
}

/// `ferrouter show ipsec`: the tunnels, then the SAs with their counters.
/// `show ike sa`.
pub fn ike(v: &model::IkeView) -> String {
    let mut s = String::new();
    if !v.running {
        let _ = writeln!(s, "IKE is not running: no [[ipsec.peer]] is configured");
        return s;
    }
    let _ = writeln!(
        s,
        "{} IKE SAs established, {} half-open",
        v.established, v.half_open
    );
    if !v.sas.is_empty() {
        let _ = writeln!(
            s,
            "\n{:<12} {:<12} {:<4} {:<22} {:<22} {:<33} {:>6}  children",
            "peer", "state", "role", "local", "remote", "SPIs (i/r)", "age s"
        );
    }
    for a in &v.sas {
        let _ = writeln!(
            s,
            "{:<12} {:<12} {:<4} {:<22} {:<22} {}/{} {:>6}  {}",
            a.peer,
            a.state,
            if a.initiator { "init" } else { "resp" },
            a.local,
            a.remote,
            a.spi_i,
            a.spi_r,
            a.age_s,
            a.children.len()
        );
        if !a.proposal.is_empty() {
            let _ = writeln!(s, "    {} (peer id {})", a.proposal, a.remote_id);
        }
        if let Some(v) = &a.virtual_ip {
            let _ = writeln!(s, "    virtual IP {v}");
        }
    }
    if v.total > v.sas.len() {
        let _ = writeln!(
            s,
            "\n({} of {} IKE SAs listed: GET /v1/ike?peer=&offset=&limit= for others)",
            v.sas.len(),
            v.total
        );
    }
    ike_counters(&mut s, &v.counters);
    s
}

/// The counters that are not zero, on one line.
fn ike_counters(s: &mut String, counters: &std::collections::BTreeMap<String, u64>) {
    let nonzero: Vec<String> = counters
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    if !nonzero.is_empty() {
        let _ = writeln!(s, "\ncounters: {}", nonzero.join(", "));
    }
}

/// `show ike summary`.
pub fn ike_summary(v: &model::IkeSummary) -> String {
    let mut s = String::new();
    if !v.running {
        let _ = writeln!(s, "IKE is not running: no [[ipsec.peer]] is configured");
        return s;
    }
    let _ = writeln!(
        s,
        "{} IKE SAs established, {} half-open; {} child SAs",
        v.established, v.half_open, v.child_sas
    );
    ike_counters(&mut s, &v.counters);
    s
}

/// `show ike child-sa`.
pub fn ike_children(v: &[model::IkeChildView]) -> String {
    let mut s = String::new();
    if v.is_empty() {
        let _ = writeln!(s, "no child SAs");
        return s;
    }
    let _ = writeln!(
        s,
        "{:<12} {:<9} {:<9} {:<26} {:>6}  selectors (local | remote)",
        "peer", "SPI in", "SPI out", "proposal", "age s"
    );
    for c in v {
        let _ = writeln!(
            s,
            "{:<12} {:<9} {:<9} {:<26} {:>6}  {} | {}",
            c.peer,
            c.spi_in,
            c.spi_out,
            c.proposal,
            c.age_s,
            c.local_ts.join(", "),
            c.remote_ts.join(", ")
        );
    }
    s
}

pub fn ipsec(v: &model::IpsecView) -> String {
    let mut s = String::new();
    if v.tunnels.is_empty() && v.policies.is_empty() {
        let _ = writeln!(
            s,
            "no IPsec tunnels ([[ipsec.tunnel]]) or policies ([[ipsec.policy]])"
        );
        return s;
    }
    if !v.policies.is_empty() {
        policies(&mut s, &v.policies);
    }
    if v.tunnels.is_empty() {
        sas(&mut s, v);
        return s;
    }
    let _ = writeln!(
        s,
        "{:<12} {:<26} {:<26} {:>5}  {:<10}  rx SPIs",
        "tunnel", "local", "remote", "mtu", "tx SPI"
    );
    for t in &v.tunnels {
        let rx: Vec<String> = t.rx_spis.iter().map(|x| format!("{x:#x}")).collect();
        let _ = writeln!(
            s,
            "{:<12} {:<26} {:<26} {:>5}  {:<10}  {}",
            t.name,
            t.local,
            t.remote,
            t.mtu,
            t.tx_spi
                .map_or_else(|| "none".into(), |x| format!("{x:#x}")),
            if rx.is_empty() {
                "none".into()
            } else {
                rx.join(" ")
            }
        );
    }
    let _ = writeln!(s);
    sas(&mut s, v);
    s
}

/// The policies of `show ipsec`, in SPD order.
fn policies(s: &mut String, v: &[model::IpsecPolicyView]) {
    let _ = writeln!(
        s,
        "{:<10} {:<3} {:>5} {:>3}  {:<20} {:<20} {:<6} {:<11} {:<11} {:<8} {:<14} {:>12}",
        "interface",
        "dir",
        "prio",
        "#",
        "src",
        "dst",
        "proto",
        "sports",
        "dports",
        "action",
        "sa",
        "matches"
    );
    for p in v {
        let sa: Vec<String> = p.sa.iter().map(|x| format!("{x:#x}")).collect();
        let _ = writeln!(
            s,
            "{:<10} {:<3} {:>5} {:>3}  {:<20} {:<20} {:<6} {:<11} {:<11} {:<8} {:<14} {:>12}{}",
            p.interface,
            p.direction,
            p.priority,
            p.index,
            p.src,
            p.dst,
            p.protocol,
            p.src_ports,
            p.dst_ports,
            p.action,
            if sa.is_empty() {
                "-".into()
            } else {
                sa.join(",")
            },
            p.matches,
            p.peer
                .as_deref()
                .map_or_else(String::new, |x| format!("  (IKE peer {x})"))
        );
    }
    let _ = writeln!(s);
}

/// The SAs of `show ipsec`, with their counters.
fn sas(s: &mut String, v: &model::IpsecView) {
    let _ = writeln!(
        s,
        "{:<12} {:<3} {:<10} {:<28} {:>12} {:>14} {:>12} {:>6}  errors",
        "tunnel", "dir", "spi", "algorithm", "packets", "bytes", "sequence", "worker"
    );
    for a in &v.sas {
        let alg = if a.integrity == "none" {
            a.encryption.clone()
        } else {
            format!("{}/{}", a.encryption, a.integrity)
        };
        let errors: Vec<String> = a.errors.iter().map(|(k, n)| format!("{k}={n}")).collect();
        let dir = if a.direction == "out" && !a.active {
            "out-".to_string()
        } else {
            a.direction.clone()
        };
        let _ = writeln!(
            s,
            "{:<12} {:<3} {:<10} {:<28} {:>12} {:>14} {:>12} {:>6}  {}{}{}",
            a.tunnel,
            dir,
            format!("{:#x}", a.spi),
            alg,
            a.packets,
            a.bytes,
            a.sequence,
            a.worker,
            if errors.is_empty() {
                "-".into()
            } else {
                errors.join(" ")
            },
            if a.esn { "  (esn)" } else { "" },
            match (a.udp_src_port, a.udp_dst_port) {
                (Some(f), Some(t)) => format!("  (udp {f}>{t})"),
                _ => String::new(),
            }
        );
    }
    let r = &v.reassembly;
    if r.fragments > 0 {
        let _ = writeln!(
            s,
            "\nESP fragments: {} taken, {} datagrams reassembled; {} timed out, {} evicted, {} discarded",
            r.fragments, r.reassembled, r.timed_out, r.evicted, r.discarded
        );
    }
    if v.busy > 0 {
        let _ = writeln!(s, "\n{} vectors dropped: an SA table was busy", v.busy);
    }
}

/// `ferrouter show nat`: the rules, then a line per worker.
pub fn nat(v: &model::NatView) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<12} {:>4} {:>10}  {:<28} match",
        "rule", "#", "sessions", "translation"
    );
    for r in &v.rules {
        let _ = writeln!(
            s,
            "{:<12} {:>4} {:>10}  {:<28} {}{}",
            r.kind,
            r.index,
            r.sessions,
            r.translation,
            r.matches,
            r.comment
                .as_ref()
                .map(|c| format!("  # {c}"))
                .unwrap_or_default()
        );
    }
    if v.workers.is_empty() {
        let _ = writeln!(s, "no NAT tables (no [nat] rules since start)");
    }
    for w in &v.workers {
        let _ = writeln!(
            s,
            "worker {}: {} sessions of {} ({} bytes), {} mappings, ports {}-{}; {} created, {} expired; refused: {} table full, {} no port, {} collisions",
            w.worker,
            w.sessions,
            w.max_sessions,
            w.memory_bytes,
            w.mappings,
            w.ports[0],
            w.ports[1],
            w.created,
            w.expired,
            w.refused_full,
            w.refused_no_port,
            w.collisions
        );
    }
    if v.busy > 0 {
        let _ = writeln!(
            s,
            "batches dropped while a listing held a table: {}",
            v.busy
        );
    }
    s
}

/// `ferrouter show nat sessions`: a line per session.
pub fn nat_sessions(v: &model::NatSessionList) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<5} {:<9} {:<21} {:<21} {:<21} {:<21} {:<14} {:>10}",
        "proto",
        "kind",
        "inside src",
        "inside dst",
        "outside src",
        "outside dst",
        "tcp",
        "expires s"
    );
    for x in &v.sessions {
        let _ = writeln!(
            s,
            "{:<5} {:<9} {:<21} {:<21} {:<21} {:<21} {:<14} {:>10.1}",
            x.protocol,
            x.kind,
            x.inside_src,
            x.inside_dst,
            x.outside_src,
            x.outside_dst,
            x.tcp,
            x.expires_s
        );
    }
    let _ = writeln!(
        s,
        "{} session(s){}",
        v.sessions.len(),
        if v.truncated { ", more not shown" } else { "" }
    );
    s
}

/// `show interfaces`.
pub fn interfaces(v: &[model::Interface]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<4} {:<10} {:<5} {:<10} {:<21} {:<17} {:>5} {:>12} {:>12} {:>9} {:>9}  addresses",
        "port",
        "name",
        "admin",
        "oper",
        "backend",
        "mac",
        "mtu",
        "rx packets",
        "tx packets",
        "rx drops",
        "tx errs"
    );
    for p in v {
        let addrs = [&p.ipv4, &p.ipv6]
            .into_iter()
            .map(|a| a.as_deref().unwrap_or_default().join(","))
            .filter(|x| !x.is_empty())
            .collect::<Vec<_>>()
            .join(",");
        let _ = writeln!(
            o,
            "{:<4} {:<10} {:<5} {:<10} {:<21} {:<17} {:>5} {:>12} {:>12} {:>9} {:>9}  {}",
            p.port,
            p.name,
            p.admin.as_str(),
            p.oper.as_str(),
            p.backend,
            opt(&p.mac),
            opt(&p.mtu),
            p.rx_packets,
            p.tx_packets,
            opt(&p.rx_drops),
            opt(&p.tx_errors),
            addrs
        );
        if let Some(why) = &p.down_reason {
            let _ = writeln!(o, "     down: {why}; routes through it are not used");
        }
        if !p.features.is_empty() {
            let _ = writeln!(o, "     features: {}", p.features.join(", "));
        }
    }
    o
}

/// `show routes summary`.
pub fn routes_summary(v: &model::RoutesSummary) -> String {
    let by = &v.by_source;
    let mem = &v.fib_memory_bytes;
    format!(
        "{} IPv4 and {} IPv6 prefixes in the fast-path FIB: {} routes, {} neighbour host routes, {} local\n{} kernel routes mirrored; {} netlink events, {} resyncs, {} FIB errors\nFIB memory: {:.1} MiB (IPv4 tables {:.1}, IPv6 tables {:.1}, route store {:.1}, next hops {:.1})\n",
        v.ipv4, v.ipv6, by.route, by.neighbor, by.local,
        v.kernel_routes_mirrored, v.netlink_events, v.resyncs, v.fib_errors,
        mib(mem.total), mib(mem.ipv4_tables), mib(mem.ipv6_tables), mib(mem.route_store), mib(mem.next_hops),
    )
}

/// `show routes [PREFIX]`.
pub fn routes(v: &model::Routes) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} IPv4 and {} IPv6 prefixes in the fast-path FIB",
        v.ipv4, v.ipv6
    );
    for r in &v.routes {
        let _ = writeln!(
            o,
            "{:<44} {:<9} {}",
            r.prefix,
            r.source.as_str(),
            r.next_hop
        );
    }
    o
}

/// `show neighbors`.
pub fn neighbors(v: &[model::Neighbor]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{:<40} {:<10} {:<18} usable", "address", "dev", "lladdr");
    for n in v {
        let _ = writeln!(
            o,
            "{:<40} {:<10} {:<18} {}",
            n.ip,
            n.dev,
            opt(&n.mac),
            n.usable
        );
    }
    o
}

/// `show bgp`.
pub fn bgp(v: &model::BgpStatus) -> String {
    let mut o = String::new();
    let Some(sp) = &v.speaker else {
        let _ = writeln!(o, "BGP speaker: not configured (no [bgp] in the config)");
        return o;
    };
    let _ = writeln!(
        o,
        "BGP AS {}, router id {}: {} IPv4 and {} IPv6 prefixes with a best path, {} paths, {} FIB changes",
        sp.asn, sp.router_id, sp.prefixes_v4, sp.prefixes_v6, sp.paths, sp.fib_changes
    );
    let _ = writeln!(
        o,
        "{:<26} {:>10} {:<12} {:>9} {:>10} {:>10} {:>11}  last error",
        "neighbor", "AS", "state", "for s", "prefixes", "updates", "withdrawn"
    );
    for n in &sp.neighbors {
        let _ = writeln!(
            o,
            "{:<26} {:>10} {:<12} {:>9} {:>10} {:>10} {:>11}  {}",
            n.address,
            n.remote_as,
            n.state.as_str(),
            n.state_s,
            n.prefixes,
            n.updates_received,
            n.prefixes_withdrawn,
            opt(&n.last_error)
        );
    }
    o
}

/// `show counters`.
pub fn counters(v: &model::Counters) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "received {}  transmitted {}  forwarded {}  dropped {}  punted {}",
        v.rx, v.tx, v.forwarded, v.drops, v.punts
    );
    let _ = writeln!(
        o,
        "kernel forwarded: ipv4 {} ipv6 {} (must stay 0)",
        opt(&v.kernel_forwarded.ipv4),
        opt(&v.kernel_forwarded.ipv6)
    );
    for w in &v.workers {
        let _ = writeln!(
            o,
            "worker {} (core {}, nice {}): rx {}  tx {}  forwarded {}",
            w.id,
            opt(&w.core),
            opt(&w.nice),
            w.rx,
            w.tx,
            w.forwarded
        );
        if let Some(e) = &w.nice_error {
            let _ = writeln!(o, "  worker {}: {e}", w.id);
        }
    }
    let _ = writeln!(
        o,
        "{:<16} {:<20} {:<5} {:>12}  description",
        "node", "reason", "kind", "count"
    );
    for r in &v.reasons {
        let kind = match r.kind {
            model::ReasonKind::Drop => "drop",
            model::ReasonKind::Punt => "punt",
            model::ReasonKind::Info => "info",
        };
        let _ = writeln!(
            o,
            "{:<16} {:<20} {:<5} {:>12}  {}",
            r.node, r.reason, kind, r.count, r.description
        );
    }
    o
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// `ferrouter show firewall`: one block per filter, a line per rule.
pub fn firewall(v: &model::FirewallView) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    if v.filters.is_empty() {
        s.push_str("no filters configured ([firewall] in the config; see docs/firewall.md)\n");
    }
    for f in &v.filters {
        let _ = writeln!(
            s,
            "filter {} ({} on {}), policy {}",
            f.name,
            f.hook,
            f.interfaces.join(", "),
            f.policy
        );
        let _ = writeln!(
            s,
            "  {:>4}  {:<7} {:>12} {:>14}  matches",
            "#", "action", "packets", "bytes"
        );
        for r in &f.rules {
            let comment = r
                .comment
                .as_deref()
                .map(|c| format!("  # {c}"))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "  {:>4}  {:<7} {:>12} {:>14}  {}{}",
                r.index, r.action, r.packets, r.bytes, r.matches, comment
            );
        }
        let _ = writeln!(
            s,
            "  {:>4}  {:<7} {:>12} {:>14}  (policy)",
            "-", f.policy, f.policy_packets, f.policy_bytes
        );
    }
    if let Some(c) = &v.conntrack {
        let _ = writeln!(
            s,
            "conntrack: {} flows of {} ({} bytes), {} created, {} expired, {} refused (table full), {} dropped early, {} invalid packets",
            c.flows, c.max, c.memory_bytes, c.created, c.expired, c.refused, c.early_dropped, c.invalid
        );
    }
    if v.log_suppressed > 0 {
        let _ = writeln!(
            s,
            "log records suppressed (over log_rate): {}",
            v.log_suppressed
        );
    }
    s
}

/// `ferrouter show conntrack`: a line per flow.
pub fn conntrack(v: &model::ConntrackList) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<7} {:<40} {:<40} {:<12} {:<8} {:>10}",
        "proto", "source", "destination", "state", "flags", "expires s"
    );
    for f in &v.flows {
        let end = |a: &str, p: u16| {
            if a.contains(':') {
                format!("[{a}]:{p}")
            } else {
                format!("{a}:{p}")
            }
        };
        let flags = match (f.seen_reply, f.assured) {
            (_, true) => "assured",
            (true, false) => "replied",
            _ => "",
        };
        let _ = writeln!(
            s,
            "{:<7} {:<40} {:<40} {:<12} {:<8} {:>10.1}",
            f.protocol,
            end(&f.src, f.sport),
            end(&f.dst, f.dport),
            f.state,
            flags,
            f.expires_s
        );
    }
    let _ = writeln!(
        s,
        "{} flow(s){}",
        v.flows.len(),
        if v.truncated { ", more not shown" } else { "" }
    );
    s
}
