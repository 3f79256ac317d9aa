//! Human tables for the API's JSON answers: `ferrouter show`, and the test bench's lab
//! (`ferrouter-lab lab status|demo`), which renders the same answers.

use std::fmt::Write as _;

use serde_json::Value;

fn s(v: &Value) -> String {
    match v {
        Value::String(x) => x.clone(),
        Value::Null => "-".into(),
        Value::Array(a) => a.iter().map(s).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// Human tables for `ferrouter show`.
pub fn render(what: &str, v: &Value) -> String {
    let mut o = String::new();
    match what {
        "firewall" => match serde_json::from_value::<crate::fwview::FirewallView>(v.clone()) {
            Ok(f) => o.push_str(&crate::fwview::render(&f)),
            Err(e) => {
                let _ = writeln!(o, "unexpected firewall data from the daemon: {e}");
            }
        },
        "interfaces" => {
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
            for p in v.as_array().into_iter().flatten() {
                let addrs = [s(&p["ipv4"]), s(&p["ipv6"])]
                    .into_iter()
                    .filter(|x| !x.is_empty())
                    .collect::<Vec<_>>()
                    .join(",");
                let _ = writeln!(
                    o,
                    "{:<4} {:<10} {:<5} {:<10} {:<21} {:<17} {:>5} {:>12} {:>12} {:>9} {:>9}  {}",
                    s(&p["port"]),
                    s(&p["name"]),
                    s(&p["admin"]),
                    s(&p["oper"]),
                    s(&p["backend"]),
                    s(&p["mac"]),
                    s(&p["mtu"]),
                    s(&p["rx_packets"]),
                    s(&p["tx_packets"]),
                    s(&p["rx_drops"]),
                    s(&p["tx_errors"]),
                    addrs
                );
                if let Some(why) = p["down_reason"].as_str() {
                    let _ = writeln!(o, "     down: {why}; routes through it are not used");
                }
                if p["features"].as_array().is_some_and(|a| !a.is_empty()) {
                    let _ = writeln!(o, "     features: {}", s(&p["features"]).replace(',', ", "));
                }
            }
        }
        "routes" if v.get("by_source").is_some() => {
            let by = &v["by_source"];
            let mem = &v["fib_memory_bytes"];
            let _ = writeln!(
                o,
                "{} IPv4 and {} IPv6 prefixes in the fast-path FIB: {} routes, {} neighbour host routes, {} local\n{} kernel routes mirrored; {} netlink events, {} resyncs, {} FIB errors\nFIB memory: {:.1} MiB (IPv4 tables {:.1}, IPv6 tables {:.1}, route store {:.1}, next hops {:.1})",
                s(&v["ipv4"]), s(&v["ipv6"]), s(&by["route"]), s(&by["neighbor"]), s(&by["local"]),
                s(&v["kernel_routes_mirrored"]), s(&v["netlink_events"]), s(&v["resyncs"]), s(&v["fib_errors"]),
                mib(&mem["total"]), mib(&mem["ipv4_tables"]), mib(&mem["ipv6_tables"]), mib(&mem["route_store"]), mib(&mem["next_hops"]),
            );
        }
        "routes" => {
            let _ = writeln!(
                o,
                "{} IPv4 and {} IPv6 prefixes in the fast-path FIB",
                s(&v["ipv4"]),
                s(&v["ipv6"])
            );
            for r in v["routes"].as_array().into_iter().flatten() {
                let _ = writeln!(
                    o,
                    "{:<44} {:<9} {}",
                    s(&r["prefix"]),
                    s(&r["source"]),
                    s(&r["next_hop"])
                );
            }
        }
        "neighbors" => {
            let _ = writeln!(o, "{:<40} {:<10} {:<18} usable", "address", "dev", "lladdr");
            for n in v.as_array().into_iter().flatten() {
                let _ = writeln!(
                    o,
                    "{:<40} {:<10} {:<18} {}",
                    s(&n["ip"]),
                    s(&n["dev"]),
                    s(&n["mac"]),
                    s(&n["usable"])
                );
            }
        }
        "bgp" => {
            let Some(sp) = v.get("speaker") else {
                let _ = writeln!(o, "BGP speaker: not configured (no [bgp] in the config)");
                return o;
            };
            let _ = writeln!(
                o,
                "BGP AS {}, router id {}: {} IPv4 and {} IPv6 prefixes with a best path, {} paths, {} FIB changes",
                s(&sp["asn"]),
                s(&sp["router_id"]),
                s(&sp["prefixes_v4"]),
                s(&sp["prefixes_v6"]),
                s(&sp["paths"]),
                s(&sp["fib_changes"])
            );
            let _ = writeln!(
                o,
                "{:<26} {:>10} {:<12} {:>9} {:>10} {:>10} {:>11}  last error",
                "neighbor", "AS", "state", "for s", "prefixes", "updates", "withdrawn"
            );
            for n in sp["neighbors"].as_array().into_iter().flatten() {
                let _ = writeln!(
                    o,
                    "{:<26} {:>10} {:<12} {:>9} {:>10} {:>10} {:>11}  {}",
                    s(&n["address"]),
                    s(&n["remote_as"]),
                    s(&n["state"]),
                    s(&n["state_s"]),
                    s(&n["prefixes"]),
                    s(&n["updates_received"]),
                    s(&n["prefixes_withdrawn"]),
                    s(&n["last_error"])
                );
            }
        }
        "counters" => {
            let _ = writeln!(
                o,
                "received {}  transmitted {}  forwarded {}  dropped {}  punted {}",
                s(&v["rx"]),
                s(&v["tx"]),
                s(&v["forwarded"]),
                s(&v["drops"]),
                s(&v["punts"])
            );
            let _ = writeln!(
                o,
                "kernel forwarded: ipv4 {} ipv6 {} (must stay 0)",
                s(&v["kernel_forwarded"]["ipv4"]),
                s(&v["kernel_forwarded"]["ipv6"])
            );
            for w in v["workers"].as_array().into_iter().flatten() {
                let _ = writeln!(
                    o,
                    "worker {} (core {}, nice {}): rx {}  tx {}  forwarded {}",
                    s(&w["id"]),
                    s(&w["core"]),
                    s(&w["nice"]),
                    s(&w["rx"]),
                    s(&w["tx"]),
                    s(&w["forwarded"])
                );
                if let Some(e) = w["nice_error"].as_str() {
                    let _ = writeln!(o, "  worker {}: {e}", s(&w["id"]));
                }
            }
            let _ = writeln!(
                o,
                "{:<16} {:<20} {:<5} {:>12}  description",
                "node", "reason", "kind", "count"
            );
            for r in v["reasons"].as_array().into_iter().flatten() {
                let _ = writeln!(
                    o,
                    "{:<16} {:<20} {:<5} {:>12}  {}",
                    s(&r["node"]),
                    s(&r["reason"]),
                    s(&r["kind"]),
                    s(&r["count"]),
                    s(&r["description"])
                );
            }
        }
        _ => {
            let _ = writeln!(o, "{v:#}");
        }
    }
    o
}

fn mib(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0) / (1u64 << 20) as f64
}
