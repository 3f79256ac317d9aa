//! `ferrouter trace add|show|clear`: the control side of the packet trace. Parses match
//! expressions into the fast path's [`Filter`], arms every worker's tracer, collects the
//! finished records (bounded) and turns their compact steps into VPP-like text.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex, MutexGuard};

use dataplane::feature::Registry;

use dataplane::trace::{Fields, Filter, Pred, Prefix, Step, Term, TraceArm, TraceHandle, L3};
use dataplane::trace::{TraceRecord, MAX_TERMS};
use serde::Serialize;

/// Finished traces kept; older ones are forgotten first.
pub const KEEP: usize = 1000;

/// Why a match expression was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A word that starts no term.
    #[error("unknown term `{0}` (expected ip4, ip6, arp, src, dst, host, proto, port or not)")]
    UnknownTerm(String),
    /// A term's argument is missing.
    #[error("`{0}` needs an argument")]
    MissingArgument(&'static str),
    /// A term's argument does not parse.
    #[error("bad {what} `{token}`")]
    BadArgument {
        /// What was expected.
        what: &'static str,
        /// The offending word.
        token: String,
    },
    /// Two terms without `and` between them.
    #[error("expected `and` before `{0}`")]
    ExpectedAnd(String),
    /// Expression ends after `and` or `not`.
    #[error("expression ends after `{0}`")]
    Dangling(&'static str),
    /// More terms than a filter holds.
    #[error("more than {MAX_TERMS} terms")]
    TooManyTerms,
}

/// Parse a match expression: terms joined by `and`, each optionally preceded by `not`:
/// `ip4`, `ip6`, `arp`, `src PREFIX`, `dst PREFIX`, `host ADDR|PREFIX`,
/// `proto tcp|udp|icmp|icmp6|N`, `port N`. An empty expression matches everything.
pub fn parse_filter(expr: &str) -> Result<Filter, ParseError> {
    let mut f = Filter::default();
    let mut words = expr.split_whitespace().peekable();
    let mut first = true;
    while words.peek().is_some() {
        if !first {
            match words.next() {
                Some("and") => {}
                Some(w) => return Err(ParseError::ExpectedAnd(w.to_string())),
                None => break,
            }
            if words.peek().is_none() {
                return Err(ParseError::Dangling("and"));
            }
        }
        first = false;
        let mut negate = false;
        let mut w = words.next().ok_or(ParseError::Dangling("and"))?;
        while w == "not" {
            negate = !negate;
            w = words.next().ok_or(ParseError::Dangling("not"))?;
        }
        let mut arg = |name: &'static str| words.next().ok_or(ParseError::MissingArgument(name));
        let pred = match w {
            "ip4" | "ip" => Pred::Ip4,
            "ip6" => Pred::Ip6,
            "arp" => Pred::Arp,
            "src" => Pred::Src(parse_prefix(arg("src")?)?),
            "dst" => Pred::Dst(parse_prefix(arg("dst")?)?),
            "host" => Pred::Host(parse_prefix(arg("host")?)?),
            "proto" => Pred::Proto(parse_proto(arg("proto")?)?),
            "port" => {
                let t = arg("port")?;
                Pred::Port(t.parse().map_err(|_| ParseError::BadArgument {
                    what: "port number (0-65535)",
                    token: t.to_string(),
                })?)
            }
            other => return Err(ParseError::UnknownTerm(other.to_string())),
        };
        if !f.push(Term { negate, pred }) {
            return Err(ParseError::TooManyTerms);
        }
    }
    Ok(f)
}

fn parse_prefix(t: &str) -> Result<Prefix, ParseError> {
    let bad = || ParseError::BadArgument {
        what: "address or prefix",
        token: t.to_string(),
    };
    let (a, len) = match t.split_once('/') {
        Some((a, l)) => (a, Some(l.parse::<u8>().map_err(|_| bad())?)),
        None => (t, None),
    };
    match a.parse::<IpAddr>().map_err(|_| bad())? {
        IpAddr::V4(a) => {
            let len = len.unwrap_or(32);
            if len > 32 {
                return Err(bad());
            }
            Ok(Prefix {
                v6: false,
                addr: u32::from(a) as u128,
                len,
            })
        }
        IpAddr::V6(a) => {
            let len = len.unwrap_or(128);
            if len > 128 {
                return Err(bad());
            }
            Ok(Prefix {
                v6: true,
                addr: u128::from(a),
                len,
            })
        }
    }
}

fn parse_proto(t: &str) -> Result<u8, ParseError> {
    Ok(match t {
        "tcp" => 6,
        "udp" => 17,
        "icmp" => 1,
        "icmp6" | "ipv6-icmp" => 58,
        "sctp" => 132,
        "gre" => 47,
        "esp" => 50,
        n => n.parse().map_err(|_| ParseError::BadArgument {
            what: "protocol (tcp, udp, icmp, icmp6 or a number 0-255)",
            token: t.to_string(),
        })?,
    })
}

/// One step of a trace, as text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceStep {
    /// Graph node that decided.
    pub node: &'static str,
    /// What it decided.
    pub text: String,
}

/// One traced packet.
#[derive(Debug, Clone, Serialize)]
pub struct Trace {
    /// Sequence number since the daemon started.
    pub seq: u64,
    /// Worker that handled it.
    pub worker: usize,
    /// Ingress port.
    pub port: u16,
    /// Ingress port's name.
    pub port_name: String,
    /// Frame length at entry.
    pub len: u16,
    /// Worker clock at entry, ns.
    pub ts_ns: u64,
    /// Headers at entry (L2, L3, L4).
    pub summary: String,
    /// The nodes it went through, in order.
    pub steps: Vec<TraceStep>,
    /// Steps not recorded (record full).
    pub truncated: u8,
}

impl Trace {
    /// VPP-style text: a header line, the summary, one line per node.
    pub fn format(&self) -> String {
        let mut s = format!(
            "Packet {} (worker {}, rx port {} {}, {} bytes, t {:.6} s)\n  {}\n",
            self.seq,
            self.worker,
            self.port,
            self.port_name,
            self.len,
            self.ts_ns as f64 / 1e9,
            self.summary
        );
        for st in &self.steps {
            s.push_str(&format!("  {}: {}\n", st.node, st.text));
        }
        if self.truncated > 0 {
            s.push_str(&format!(
                "  ... {} more steps not recorded\n",
                self.truncated
            ));
        }
        s
    }
}

/// Every trace as text, blank line between packets.
pub fn format_all(traces: &[Trace]) -> String {
    if traces.is_empty() {
        return "No packets in trace buffer\n".into();
    }
    traces
        .iter()
        .map(Trace::format)
        .collect::<Vec<_>>()
        .join("\n")
}

fn mac(m: &[u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

fn addr(v6: bool, a: u128) -> String {
    if v6 {
        Ipv6Addr::from(a).to_string()
    } else {
        Ipv4Addr::from(a as u32).to_string()
    }
}

fn proto_name(p: u8) -> String {
    match p {
        1 => "icmp".into(),
        6 => "tcp".into(),
        17 => "udp".into(),
        58 => "icmp6".into(),
        132 => "sctp".into(),
        n => format!("proto {n}"),
    }
}

/// One line of headers from the first bytes of a frame.
pub fn summarize(head: &[u8]) -> String {
    let f = Fields::parse(head);
    let mut s = format!("{} -> {}", mac(&f.src_mac), mac(&f.dst_mac));
    if let Some(v) = f.vlan {
        s.push_str(&format!(" vlan {v}"));
    }
    match f.l3 {
        L3::Ip4 | L3::Ip6 => {
            let v6 = f.l3 == L3::Ip6;
            s.push_str(&format!(
                " {} {} -> {}",
                if v6 { "IP6" } else { "IP4" },
                addr(v6, f.src),
                addr(v6, f.dst)
            ));
            if let Some(p) = f.proto {
                s.push_str(&format!(" {}", proto_name(p)));
            }
            if let Some((a, b)) = f.ports {
                s.push_str(&format!(" {a} -> {b}"));
            }
            s.push_str(&format!(" {} {}", if v6 { "hlim" } else { "ttl" }, f.ttl));
        }
        L3::Arp => s.push_str(&format!(
            " ARP {} -> {}",
            addr(false, f.src),
            addr(false, f.dst)
        )),
        L3::Other => s.push_str(&format!(" ethertype 0x{:04x}", f.ethertype)),
    }
    s
}

fn port_label(ports: &[String], p: u16) -> String {
    match ports.get(p as usize) {
        Some(n) => format!("{p} ({n})"),
        None => p.to_string(),
    }
}

/// A step as (node, text).
pub fn describe(step: &Step, ports: &[String], features: &Registry) -> TraceStep {
    let v = |v6: bool, a: &'static str, b: &'static str| if v6 { b } else { a };
    let (node, text) = match *step {
        Step::EthernetInput {
            ethertype,
            vlan,
            l2_mcast,
        } => {
            let kind = match ethertype {
                0x0800 => "IP4 -> ip4-input".to_string(),
                0x86dd => "IP6 -> ip6-input".to_string(),
                0x0806 => "ARP".to_string(),
                t => format!("ethertype 0x{t:04x}"),
            };
            let mut t = kind;
            if let Some(id) = vlan {
                t.push_str(&format!(", vlan {id}"));
            }
            if l2_mcast {
                t.push_str(", l2 broadcast/multicast");
            }
            ("ethernet-input", t)
        }
        Step::IpInput { v6 } => (
            v(v6, "ip4-input", "ip6-input"),
            format!("valid -> {}", v(v6, "ip4-lookup", "ip6-lookup")),
        ),
        Step::Lookup { v6, nh, port } => (
            v(v6, "ip4-lookup", "ip6-lookup"),
            format!(
                "next hop {nh} via port {} -> {}",
                port_label(ports, port),
                v(v6, "ip4-rewrite", "ip6-rewrite")
            ),
        ),
        Step::Rewrite {
            v6,
            ttl,
            new_ttl,
            port,
            src_mac,
            dst_mac,
        } => (
            v(v6, "ip4-rewrite", "ip6-rewrite"),
            format!(
                "{} {ttl} -> {new_ttl}, mac {} -> {}, port {} -> port-tx",
                v(v6, "ttl", "hop limit"),
                mac(&src_mac),
                mac(&dst_mac),
                port_label(ports, port)
            ),
        ),
        Step::ToFrag { mtu } => ("ip4-rewrite", format!("larger than mtu {mtu} -> ip4-frag")),
        Step::Fragmented { count, port } => (
            "ip4-frag",
            format!(
                "{count} fragments -> port-tx port {}",
                port_label(ports, port)
            ),
        ),
        Step::FeatureNote { id, a, b } => match features.get(id) {
            Some(e) => (e.spec.name, e.describe_note(a, b)),
            None => ("feature", format!("{a} {b}")),
        },
        Step::Feature { id, drop } => {
            let (name, arc, reason) = match features.get(id) {
                Some(e) => (
                    e.spec.name,
                    e.spec.arc.name(),
                    drop.and_then(|r| e.spec.drops.get(r as usize)),
                ),
                None => ("feature", "?", None),
            };
            let text = match (drop, reason) {
                (None, _) => format!("pass ({arc})"),
                (Some(_), Some((r, desc))) => format!("{r} ({desc}) -> error-drop"),
                (Some(r), None) => format!("drop reason {r} -> error-drop"),
            };
            (name, text)
        }
        Step::ToIcmp(r) => (
            r.node(),
            format!(
                "{} ({}) -> {}",
                r.name(),
                r.desc(),
                if r.name().starts_with("Ip6") {
                    "icmp6-error"
                } else {
                    "icmp4-error"
                }
            ),
        ),
        Step::IcmpError { v6, ty, code } => (
            v(v6, "icmp4-error", "icmp6-error"),
            format!(
                "type {ty} code {code} back to the source -> {}",
                v(v6, "ip4-lookup", "ip6-lookup")
            ),
        ),
        Step::Drop(r) => (
            "error-drop",
            format!("{} ({}: {})", r.name(), r.node(), r.desc()),
        ),
        Step::Punt(r) => ("punt", format!("{} ({}: {})", r.name(), r.node(), r.desc())),
        Step::Tx { port } => ("port-tx", format!("port {}", port_label(ports, port))),
    };
    TraceStep { node, text }
}

/// Resolve a port given as a number or a name.
pub fn parse_port(ports: &[String], p: &str) -> Result<u16, String> {
    if let Some(i) = ports.iter().position(|n| n == p) {
        return Ok(i as u16);
    }
    match p.parse::<u16>() {
        Ok(i) if (i as usize) < ports.len() => Ok(i),
        _ => Err(format!(
            "no port `{p}` (ports: {})",
            ports
                .iter()
                .enumerate()
                .map(|(i, n)| format!("{i} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

struct Inner {
    workers: Vec<TraceHandle>,
    traces: VecDeque<Trace>,
    /// Records still wanted from the last `add` (workers are each armed with the full
    /// count; the first ones to arrive win).
    budget: u32,
    next_seq: u64,
}

/// The trace service the API and CLI call.
pub struct TraceService {
    ports: Vec<String>,
    features: Arc<Registry>,
    inner: Mutex<Inner>,
}

impl TraceService {
    /// A service over every worker's tracer handle; `ports` are the port names by number,
    /// `features` the registry the workers' feature nodes come from.
    pub fn new(
        workers: Vec<TraceHandle>,
        ports: Vec<String>,
        features: Arc<Registry>,
    ) -> TraceService {
        TraceService {
            ports,
            features,
            inner: Mutex::new(Inner {
                workers,
                traces: VecDeque::new(),
                budget: 0,
                next_seq: 1,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The state stays consistent whatever panicked while holding it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Trace the next `n` packets received (on `port`, a number or name, if given) that
    /// match `expr` (see [`parse_filter`]). Replaces a previous request; keeps the traces
    /// already collected.
    pub fn add(&self, n: u32, port: Option<&str>, expr: Option<&str>) -> Result<(), String> {
        let mut filter = parse_filter(expr.unwrap_or("")).map_err(|e| e.to_string())?;
        filter.port = port.map(|p| parse_port(&self.ports, p)).transpose()?;
        let mut g = self.lock();
        Self::collect(&mut g, &self.ports, &self.features);
        g.budget = n;
        for (i, w) in g.workers.iter_mut().enumerate() {
            w.arm(TraceArm { count: n, filter })
                .map_err(|e| format!("worker {i}: {e}"))?;
        }
        Ok(())
    }

    /// Collected traces, oldest first.
    pub fn show(&self) -> Vec<Trace> {
        let mut g = self.lock();
        Self::collect(&mut g, &self.ports, &self.features);
        g.traces.iter().cloned().collect()
    }

    /// Forget collected traces and disarm the workers.
    pub fn clear(&self) {
        let mut g = self.lock();
        g.budget = 0;
        for w in g.workers.iter_mut() {
            // A full request queue means a disarm is already pending or the worker is stuck.
            let _ = w.arm(TraceArm {
                count: 0,
                filter: Filter::default(),
            });
        }
        Self::collect(&mut g, &self.ports, &self.features);
        g.traces.clear();
    }

    /// Move finished records from the workers' queues (the control loop calls this).
    pub fn drain(&self) {
        let mut g = self.lock();
        Self::collect(&mut g, &self.ports, &self.features);
    }

    /// Records the workers could not hand over (queue full).
    pub fn lost(&self) -> u64 {
        self.lock()
            .workers
            .iter()
            .map(|w| w.shared.lost.load(std::sync::atomic::Ordering::Relaxed))
            .sum()
    }

    fn collect(g: &mut Inner, ports: &[String], features: &Registry) {
        for wi in 0..g.workers.len() {
            while let Some(r) = g.workers[wi].pop() {
                if g.budget == 0 {
                    continue;
                }
                g.budget -= 1;
                let seq = g.next_seq;
                g.next_seq += 1;
                let t = to_trace(&r, seq, wi, ports, features);
                if g.traces.len() >= KEEP {
                    g.traces.pop_front();
                }
                g.traces.push_back(t);
            }
        }
    }
}

/// A worker's record as a [`Trace`].
pub fn to_trace(
    r: &TraceRecord,
    seq: u64,
    worker: usize,
    ports: &[String],
    features: &Registry,
) -> Trace {
    Trace {
        seq,
        worker,
        port: r.rx_port,
        port_name: ports.get(r.rx_port as usize).cloned().unwrap_or_default(),
        len: r.len,
        ts_ns: r.ts_ns,
        summary: summarize(r.head()),
        steps: r
            .steps()
            .iter()
            .map(|s| describe(s, ports, features))
            .collect(),
        truncated: r.truncated,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_terms_and_names_bad_tokens() {
        let f = parse_filter("ip4 and not dst 10.0.0.0/8 and proto udp and port 53").unwrap();
        assert_eq!(f.terms().len(), 4);
        assert!(f.terms()[1].negate);
        assert_eq!(
            f.terms()[1].pred,
            Pred::Dst(Prefix {
                v6: false,
                addr: 0x0a00_0000,
                len: 8
            })
        );
        assert_eq!(f.terms()[2].pred, Pred::Proto(17));
        assert_eq!(
            parse_filter("host 2001:db8::1").unwrap().terms()[0].pred,
            Pred::Host(Prefix {
                v6: true,
                addr: u128::from("2001:db8::1".parse::<Ipv6Addr>().unwrap()),
                len: 128
            })
        );
        assert!(parse_filter("").unwrap().terms().is_empty());
        let err = |e: &str| parse_filter(e).unwrap_err().to_string();
        assert!(err("ip5").contains("`ip5`"));
        assert!(err("dst 10.0.0.0/33").contains("`10.0.0.0/33`"));
        assert!(err("proto xyz").contains("`xyz`"));
        assert!(err("port 70000").contains("`70000`"));
        assert!(err("ip4 ip6").contains("`ip6`"));
        assert!(err("ip4 and").contains("`and`"));
        assert!(err("not").contains("`not`"));
        assert!(err("src").contains("`src`"));
    }

    #[test]
    fn filter_matches_what_it_should() {
        let ports = vec!["p0".to_string(), "p1".to_string()];
        let frame = |src: [u8; 4], dst: [u8; 4], proto: u8, sport: u16, dport: u16| {
            let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 8, 0];
            f.extend_from_slice(&[0x45, 0, 0, 28, 0, 0, 0, 0, 64, proto, 0, 0]);
            f.extend_from_slice(&src);
            f.extend_from_slice(&dst);
            f.extend_from_slice(&sport.to_be_bytes());
            f.extend_from_slice(&dport.to_be_bytes());
            f.extend_from_slice(&[0, 8, 0, 0]);
            f
        };
        let a = frame([192, 168, 0, 1], [10, 1, 2, 3], 17, 1000, 53);
        let b = frame([10, 9, 9, 9], [172, 16, 0, 1], 6, 80, 2000);
        let m = |e: &str, f: &[u8]| parse_filter(e).unwrap().matches(0, f);
        assert!(m("ip4", &a) && !m("ip6", &a) && !m("arp", &a));
        assert!(m("dst 10.0.0.0/8", &a) && !m("dst 10.0.0.0/8", &b));
        assert!(m("src 10.0.0.0/8", &b) && !m("src 10.0.0.0/8", &a));
        assert!(m("host 10.1.2.3", &a) && !m("host 10.1.2.3", &b));
        assert!(m("host 10.0.0.0/8", &a) && m("host 10.0.0.0/8", &b));
        assert!(m("proto udp and port 53", &a) && !m("proto udp and port 53", &b));
        assert!(m("port 80", &b) && m("port 2000", &b) && !m("port 81", &b));
        assert!(m("not proto tcp", &a) && !m("not proto tcp", &b));
        assert!(!m("dst 2001:db8::/32", &a));
        let mut f = parse_filter("ip4").unwrap();
        f.port = Some(parse_port(&ports, "p1").unwrap());
        assert!(!f.matches(0, &a) && f.matches(1, &a));
        assert!(parse_port(&ports, "p9").unwrap_err().contains("p9"));
        assert_eq!(parse_port(&ports, "0"), Ok(0));
        assert_eq!(
            summarize(&a),
            "02:00:00:00:00:02 -> 02:00:00:00:00:01 IP4 192.168.0.1 -> 10.1.2.3 udp 1000 -> 53 ttl 64"
        );
    }

    #[test]
    fn service_keeps_only_the_requested_count_and_formats() {
        let (h0, _t0) = dataplane::trace::channel(8);
        let (h1, _t1) = dataplane::trace::channel(8);
        let svc = TraceService::new(vec![h0, h1], vec!["p0".into()], Default::default());
        assert!(svc.add(3, Some("nope"), None).is_err());
        assert!(svc
            .add(3, None, Some("bogus"))
            .unwrap_err()
            .contains("bogus"));
        svc.add(3, Some("p0"), Some("ip4")).unwrap();
        assert!(svc.show().is_empty());
        assert_eq!(format_all(&[]), "No packets in trace buffer\n");
        svc.clear();
        assert!(svc.show().is_empty());
        let step = describe(
            &Step::Drop(dataplane::Reason::Ip4NoRoute),
            &[],
            &Registry::default(),
        );
        let features = crate::features::registry(
            &Default::default(),
            &Default::default(),
            &Default::default(),
            &Arc::new(ipsec::node::IpsecShared::new(1, 1, 0)),
            &qos::node::QosShared::new(1),
        )
        .unwrap();
        let id = features.id("ip4-urpf-strict").unwrap();
        let pass = describe(&Step::Feature { id, drop: None }, &[], &features);
        assert_eq!(
            (pass.node, pass.text.as_str()),
            ("ip4-urpf-strict", "pass (ip4-unicast)")
        );
        let drop = describe(&Step::Feature { id, drop: Some(1) }, &[], &features);
        assert_eq!(drop.text, "wrong_interface (route back to the source leaves by another interface (strict RFC 3704)) -> error-drop");
        assert_eq!(step.node, "error-drop");
        assert_eq!(
            step.text,
            "Ip4NoRoute (ip4-lookup: no route to destination)"
        );
    }

    proptest! {
        #[test]
        fn parser_never_panics(s in ".{0,80}") {
            let _ = parse_filter(&s);
        }

        #[test]
        fn parser_never_panics_on_near_misses(words in proptest::collection::vec(
            prop_oneof![
                Just("and".to_string()), Just("not".to_string()), Just("ip4".to_string()),
                Just("src".to_string()), Just("dst".to_string()), Just("host".to_string()),
                Just("proto".to_string()), Just("port".to_string()),
                "[0-9./:a-f]{0,20}",
            ], 0..12)) {
            let _ = parse_filter(&words.join(" "));
        }
    }
}
