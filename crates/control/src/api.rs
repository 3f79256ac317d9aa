//! The control API on a unix socket: one JSON request line, one JSON response. The CLI
//! (`ferrouter show ...`) is a client of it.
//!
//! Request: `{"show":"interfaces"|"routes"|"neighbors"|"counters","arg":"PREFIX"?}`;
//! `{"show":"routes","arg":"summary"}` gives counts and FIB memory instead of the list.
//! Response: `{"ok":true,"data":...}` or `{"ok":false,"error":"what was wrong"}`.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use dataplane::{Kind, Reason};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::daemon::{PortCounters, Shared};

/// Largest request accepted.
const MAX_REQUEST: u64 = 4096;

/// A request.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// What to show.
    pub show: String,
    /// Optional argument (a prefix or address for routes).
    #[serde(default)]
    pub arg: Option<String>,
}

/// The running listener.
pub struct Server {
    stop: Arc<AtomicBool>,
    join: Option<JoinHandle<()>>,
}

impl Server {
    /// Stop accepting and wait for the thread.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// Listen on `path` (replacing a stale socket file) and answer requests.
pub fn serve(path: &Path, shared: Arc<Shared>) -> Result<Server> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            anyhow::bail!(
                "another ferrouter is already listening on {}",
                path.display()
            );
        }
        std::fs::remove_file(path)
            .with_context(|| format!("removing stale socket {}", path.display()))?;
    }
    let listener =
        UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
    listener.set_nonblocking(true)?;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let join = std::thread::Builder::new()
        .name("ferrouter-api".into())
        .spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((s, _)) => {
                        let _ = handle(s, &shared);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        })?;
    Ok(Server {
        stop,
        join: Some(join),
    })
}

fn handle(s: UnixStream, shared: &Shared) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    // Bytes, not a String: a request that is not UTF-8 still gets a JSON error back.
    let mut line = Vec::new();
    BufReader::new((&s).take(MAX_REQUEST)).read_until(b'\n', &mut line)?;
    let resp = match serde_json::from_slice::<Request>(line.trim_ascii()) {
        Ok(r) => match answer(&r, shared) {
            Ok(data) => json!({"ok": true, "data": data}),
            Err(e) => json!({"ok": false, "error": e}),
        },
        Err(e) => json!({"ok": false, "error": format!("malformed request: {e}")}),
    };
    let mut w = &s;
    w.write_all(resp.to_string().as_bytes())?;
    w.write_all(b"\n")
}

fn answer(r: &Request, shared: &Shared) -> Result<Value, String> {
    let sync = shared
        .sync
        .lock()
        .map_err(|_| "internal state unavailable".to_string())?;
    match r.show.as_str() {
        "interfaces" => {
            let ifaces = sync.interfaces();
            let v: Vec<Value> = shared
                .ports
                .iter()
                .map(|f| {
                    let info = ifaces.ports.get(f.port as usize);
                    // Summed over the workers, each of which serves one queue of the port.
                    let g = |field: fn(&PortCounters) -> &std::sync::atomic::AtomicU64| -> u64 {
                        shared
                            .port_counters
                            .iter()
                            .filter_map(|w| w.get(f.port as usize))
                            .map(|c| field(c).load(Ordering::Relaxed))
                            .sum()
                    };
                    json!({
                        "port": f.port, "name": f.name, "ifindex": f.ifindex, "backend": f.backend,
                        "mac": info.map(|i| i.mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")),
                        "mtu": info.map(|i| i.mtu),
                        "ipv4": info.map(|i| i.ip4.iter().map(|a| std::net::Ipv4Addr::from(*a).to_string()).collect::<Vec<_>>()),
                        "ipv6": info.map(|i| i.ip6.iter().map(|a| std::net::Ipv6Addr::from(*a).to_string()).collect::<Vec<_>>()),
                        "rx_packets": g(|c| &c.rx_packets), "rx_bytes": g(|c| &c.rx_bytes), "tx_packets": g(|c| &c.tx_packets),
                        "tx_bytes": g(|c| &c.tx_bytes), "rx_drops": g(|c| &c.rx_drops), "tx_errors": g(|c| &c.tx_errors),
                    })
                })
                .collect();
            Ok(json!(v))
        }
        "routes" if r.arg.as_deref() == Some("summary") => {
            let (v4, v6) = sync.route_counts();
            let (route, neighbor, local) = sync.source_counts();
            let m = sync.writer().memory();
            let st = sync.stats();
            Ok(json!({
                "ipv4": v4, "ipv6": v6,
                "by_source": {"route": route, "neighbor": neighbor, "local": local},
                "kernel_routes_mirrored": sync.mirrored_routes(),
                "fib_memory_bytes": {
                    "ipv4_tables": m.v4_table_bytes, "ipv6_tables": m.v6_table_bytes,
                    "route_store": m.rib_bytes, "next_hops": m.nexthop_bytes,
                    "total": m.v4_table_bytes + m.v6_table_bytes + m.rib_bytes + m.nexthop_bytes,
                },
                "netlink_events": st.events, "resyncs": st.resyncs, "fib_errors": st.fib_errors,
            }))
        }
        "routes" => {
            let routes = sync.routes(r.arg.as_deref())?;
            let (v4, v6) = sync.route_counts();
            Ok(json!({"ipv4": v4, "ipv6": v6, "routes": routes}))
        }
        "neighbors" => Ok(json!(sync.neighbors())),
        "counters" => {
            drop(sync);
            let s = dataplane::worker::aggregate(shared.workers.iter());
            let reasons: Vec<Value> = s
                .nonzero()
                .into_iter()
                .map(|(r, n)| json!({"node": r.node(), "reason": r.name(), "kind": kind(r), "count": n, "description": r.desc()}))
                .collect();
            let sync = shared
                .sync
                .lock()
                .map_err(|_| "internal state unavailable".to_string())?;
            Ok(json!({
                "rx": s.rx, "tx": s.tx, "vectors": s.vectors, "drops": s.drops(), "punts": s.punts(),
                "forwarded": s.get(Reason::Ip4Forwarded) + s.get(Reason::Ip6Forwarded),
                "reasons": reasons,
                "workers": shared.workers.iter().map(|w| {
                    let c = w.counters.snapshot();
                    json!({"id": w.id, "core": w.core, "rx": c.rx, "tx": c.tx,
                           "forwarded": c.get(Reason::Ip4Forwarded) + c.get(Reason::Ip6Forwarded),
                           "vectors": c.vectors, "idle_polls": c.idle_polls})
                }).collect::<Vec<_>>(),
                "sync": sync.stats(),
                "kernel_forwarded": kernel_forwarded(),
                "uptime_s": shared.started.elapsed().as_secs_f64(),
            }))
        }
        other => Err(format!(
            "unknown item {other:?}: expected interfaces, routes, neighbors or counters"
        )),
    }
}

fn kind(r: Reason) -> &'static str {
    match r.kind() {
        Kind::Drop => "drop",
        Kind::Punt => "punt",
        Kind::Info => "info",
    }
}

/// Packets the kernel itself forwarded in this namespace (must stay 0: forwarding is the
/// fast path's job), from /proc/net/snmp and /proc/net/snmp6.
pub fn kernel_forwarded() -> Value {
    json!({"ipv4": snmp_value("/proc/net/snmp", "Ip:", "ForwDatagrams"), "ipv6": snmp6_value("Ip6OutForwDatagrams")})
}

fn snmp_value(path: &str, prefix: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines = text.lines().filter(|l| l.starts_with(prefix));
    let header = lines.next()?;
    let values = lines.next()?;
    let i = header.split_whitespace().position(|h| h == field)?;
    values.split_whitespace().nth(i)?.parse().ok()
}

fn snmp6_value(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/snmp6").ok()?;
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next()? == field).then(|| it.next()?.parse().ok())?
    })
}

/// Client side: send one request to the daemon at `socket` and return its `data`.
pub fn request(socket: &Path, show: &str, arg: Option<&str>) -> Result<Value> {
    let mut s = UnixStream::connect(socket).with_context(|| {
        format!(
            "cannot reach ferrouter at {} (is `ferrouter run` running?)",
            socket.display()
        )
    })?;
    // Generous: a resync of a large table holds the state for a while; the CLI waits.
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let req = serde_json::to_string(&Request {
        show: show.into(),
        arg: arg.map(Into::into),
    })?;
    s.write_all(req.as_bytes())?;
    s.write_all(b"\n")?;
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line)?;
    let v: Value = serde_json::from_str(&line)
        .with_context(|| format!("bad response from daemon: {line:?}"))?;
    if v["ok"] == true {
        Ok(v["data"].clone())
    } else {
        anyhow::bail!("daemon: {}", v["error"].as_str().unwrap_or("unknown error"))
    }
}
