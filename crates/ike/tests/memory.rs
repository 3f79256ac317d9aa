//! Issue 27 (a million tunnels at a few KiB each): the heap an IKE responder holds per
//! established tunnel (its IKE SA, child SA, kept response, keys and its share of the
//! engine's tables), counted by a global allocator while initiators come and go.
//!
//! One responder with `remote = "any"` (PSK, the default proposals: AES-GCM-16,
//! PRF-HMAC-SHA-256, curve25519), each initiator a /32 behind its own address, as
//! `ferrouter-lab bench ike` sets them up. Each initiator engine is dropped once its
//! tunnel is up, so what stays allocated is the responder's. Our initiators send
//! INITIAL_CONTACT, which would end the other SAs of their peer: each has its own peer
//! (its identity), made before counting starts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use ike::config::PeerConfig;
use ike::engine::{Engine, Event};
use ike::wire::Selector;

/// Bytes allocated and not yet freed, by every thread.
static LIVE: AtomicIsize = AtomicIsize::new(0);

struct Counting;

// SAFETY: every call goes to `System` unchanged; only the byte count is kept aside.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: `p` came from `System` with layout `l`.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        // SAFETY: `p` came from `System` with layout `l`; `new` is the caller's.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const PSK: &[u8] = b"a strong enough shared secret!";
const RESPONDER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

fn config(name: &str, local: IpAddr, remote: &str, start: &str) -> PeerConfig {
    PeerConfig {
        psk: Some("k".into()),
        start: start.into(),
        ..PeerConfig::new(name, local, remote, "t0")
    }
}

fn host(a: Ipv4Addr) -> Selector {
    Selector {
        protocol: 0,
        start_port: 0,
        end_port: 65535,
        start: a.into(),
        end: a.into(),
    }
}

/// Sets up tunnel `k` against `resp`; the initiator is dropped once it is up.
fn tunnel(resp: &mut Engine, k: u32, now: Instant) {
    let addr = Ipv4Addr::from(0xc612_0000 + k); // 198.18.0.0/15
    let mut c = config("initiator", addr.into(), &RESPONDER.to_string(), "initiate");
    c.name = format!("i{k}");
    c.local_id = Some(format!("i{k}.example"));
    c.remote_id = Some("responder.example".into());
    let mut p = c.resolve(Some(PSK)).unwrap();
    p.local_ts = vec![host(Ipv4Addr::from(0x0a00_0000 + k))];
    p.remote_ts = vec![Selector::any(false)];
    let mut ini = Engine::new(vec![p]);
    let (ia, ra) = (
        SocketAddr::new(addr.into(), 500),
        SocketAddr::new(RESPONDER.into(), 500),
    );
    let mut from_i = vec![];
    ini.initiate(&format!("i{k}"), now, &mut from_i).unwrap();
    let mut from_r = vec![];
    for _ in 0..10 {
        for e in from_i.drain(..) {
            if let Event::Send { data, .. } = e {
                resp.handle(now, ra, ia, &data, &mut from_r);
            }
        }
        for e in std::mem::take(&mut from_r) {
            if let Event::Send { data, .. } = e {
                ini.handle(now, ia, ra, &data, &mut from_i);
            }
        }
        if from_i.is_empty() {
            break;
        }
    }
    assert_eq!(ini.established(), 1, "tunnel {k}");
}

#[test]
fn responder_bytes_per_tunnel() {
    // More with IKE_MEMORY_TUNNELS (each responder peer is looked at per IKE_SA_INIT,
    // so the setup is quadratic here: 20,000 take a minute).
    let tunnels: u32 = std::env::var("IKE_MEMORY_TUNNELS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let peers = (0..tunnels)
        .map(|k| {
            let mut c = config(&format!("r{k}"), RESPONDER.into(), "any", "respond");
            c.local_id = Some("responder.example".into());
            c.remote_id = Some(format!("i{k}.example"));
            let mut p = c.resolve(Some(PSK)).unwrap();
            p.local_ts = vec![Selector::any(false)];
            p.remote_ts = vec![Selector::any(false)];
            p
        })
        .collect();
    let mut resp = Engine::new(peers);
    let mut now = Instant::now();
    let mut out = vec![];
    resp.tick(now, &mut out);
    let before = LIVE.load(Ordering::Relaxed);
    for k in 0..tunnels {
        tunnel(&mut resp, k, now);
        if k % 100 == 99 {
            now += Duration::from_millis(100);
            resp.tick(now, &mut out);
            out.clear();
        }
    }
    now += Duration::from_millis(100);
    resp.tick(now, &mut out);
    drop(out);
    let held = LIVE.load(Ordering::Relaxed) - before;
    assert_eq!(resp.established(), tunnels as usize);
    assert_eq!(resp.child_sas(), tunnels as usize);
    let per = held as f64 / f64::from(tunnels);
    println!(
        "IKE responder: {per:.0} bytes per established tunnel ({tunnels} tunnels, {held} bytes)"
    );
    // A regression guard on the heap held (the tables' room grows in powers of two, so
    // the figure moves with the count): not a timing.
    assert!(per < 900.0, "{per:.0} bytes per tunnel");
}
