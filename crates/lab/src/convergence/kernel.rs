//! Watches the router namespace's kernel routing table over netlink and says, for the
//! benchmark's prefixes, how many point at each egress and when the last one changed: the
//! "FRR and kernel install" part of the convergence time.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use rustc_hash::FxHashMap;

/// Where a prefix's kernel route points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    Absent,
    Egress(u8),
    Other,
}

/// Counts for the tracked prefixes.
#[derive(Clone, Debug, Default)]
pub struct KernelState {
    /// Routes per egress (index into the gateways given to [`KernelWatch::start`]).
    pub on: Vec<usize>,
    /// Routes via anything else, and prefixes with no route.
    pub other: usize,
    /// Tracked prefixes without a route.
    pub absent: usize,
    /// Monotonic time (ns, CLOCK_MONOTONIC) of the latest change to a tracked prefix.
    pub last_change_ns: u64,
    /// Route notifications seen for tracked prefixes.
    pub changes: u64,
    /// Full dumps after a notification overflow.
    pub resyncs: u64,
}

struct Inner {
    via: FxHashMap<(IpAddr, u8), Via>,
    state: KernelState,
    gateways: Vec<IpAddr>,
    /// First change at or after `mark_ns`.
    mark_ns: u64,
    first_after_mark: Option<u64>,
}

impl Inner {
    fn set(&mut self, key: (IpAddr, u8), via: Via, now: u64) {
        let Some(old) = self.via.get_mut(&key) else {
            return;
        };
        if *old == via {
            return;
        }
        let o = *old;
        *old = via;
        let s = &mut self.state;
        match o {
            Via::Absent => s.absent -= 1,
            Via::Egress(i) => s.on[i as usize] -= 1,
            Via::Other => s.other -= 1,
        }
        match via {
            Via::Absent => s.absent += 1,
            Via::Egress(i) => s.on[i as usize] += 1,
            Via::Other => s.other += 1,
        }
        s.last_change_ns = now;
        s.changes += 1;
        if now >= self.mark_ns && self.first_after_mark.is_none() {
            self.first_after_mark = Some(now);
        }
    }

    fn classify(&self, r: &linux::Route) -> Via {
        match r.nexthops.as_slice() {
            [nh] => nh
                .gateway
                .and_then(|g| self.gateways.iter().position(|x| *x == g))
                .map_or(Via::Other, |i| Via::Egress(i as u8)),
            _ => Via::Other,
        }
    }
}

/// A thread in the router's namespace reading route notifications.
pub struct KernelWatch {
    inner: Arc<Mutex<Inner>>,
    stop: Arc<AtomicBool>,
    join: Option<JoinHandle<Result<()>>>,
}

/// CLOCK_MONOTONIC in ns (the clock the traffic tracker and every process share).
pub fn monotonic_ns() -> u64 {
    tester::clock::monotonic_ns()
}

impl KernelWatch {
    /// Track `prefixes` (main table) in namespace `ns`, classifying next hops by `gateways`.
    pub fn start(ns: &str, prefixes: Vec<(IpAddr, u8)>, gateways: Vec<IpAddr>) -> Result<Self> {
        let n = prefixes.len();
        let mut via = FxHashMap::default();
        via.reserve(n);
        for p in prefixes {
            via.insert(p, Via::Absent);
        }
        let inner = Arc::new(Mutex::new(Inner {
            state: KernelState {
                on: vec![0; gateways.len()],
                absent: via.len(),
                ..Default::default()
            },
            via,
            gateways,
            mark_ns: u64::MAX,
            first_after_mark: None,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (i2, s2, ns) = (inner.clone(), stop.clone(), ns.to_string());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let join = std::thread::Builder::new()
            .name("kernel-watch".into())
            .spawn(move || -> Result<()> {
                let r = (|| {
                    crate::rfc2544::enter_netns(&ns)?;
                    // A whole table's worth of notifications may arrive in one burst.
                    linux::Mirror::open(1 << 30).context("netlink socket")
                })();
                let mut m = match r {
                    Ok(m) => {
                        let _ = ready_tx.send(Ok(()));
                        m
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("{e:#}")));
                        return Err(e);
                    }
                };
                let mut ev = Vec::with_capacity(4096);
                let resync = |m: &mut linux::Mirror, inner: &Mutex<Inner>| -> Result<()> {
                    let snap = m.dump().context("route dump")?;
                    let now = monotonic_ns();
                    let mut g = inner.lock().unwrap_or_else(|e| e.into_inner());
                    let keys: Vec<(IpAddr, u8)> = g.via.keys().copied().collect();
                    let mut seen: FxHashMap<(IpAddr, u8), Via> = FxHashMap::default();
                    for r in &snap.routes {
                        if r.table == linux::RT_TABLE_MAIN
                            && g.via.contains_key(&(r.dst, r.dst_len))
                        {
                            seen.insert((r.dst, r.dst_len), g.classify(r));
                        }
                    }
                    for k in keys {
                        let v = seen.get(&k).copied().unwrap_or(Via::Absent);
                        g.set(k, v, now);
                    }
                    g.state.resyncs += 1;
                    Ok(())
                };
                resync(&mut m, &i2)?;
                while !s2.load(Ordering::Relaxed) {
                    ev.clear();
                    m.poll_events(&mut ev, Duration::from_millis(50))
                        .context("reading route notifications")?;
                    if ev.is_empty() {
                        continue;
                    }
                    if ev.contains(&linux::Event::Overflow) {
                        resync(&mut m, &i2)?;
                        continue;
                    }
                    let now = monotonic_ns();
                    let mut g = i2.lock().unwrap_or_else(|e| e.into_inner());
                    for e in &ev {
                        match e {
                            linux::Event::NewRoute(r) if r.table == linux::RT_TABLE_MAIN => {
                                let v = g.classify(r);
                                g.set((r.dst, r.dst_len), v, now);
                            }
                            linux::Event::DelRoute(r) if r.table == linux::RT_TABLE_MAIN => {
                                g.set((r.dst, r.dst_len), Via::Absent, now);
                            }
                            _ => {}
                        }
                    }
                }
                Ok(())
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => anyhow::bail!("kernel route watch: {e}"),
            Err(_) => anyhow::bail!("kernel route watch thread died"),
        }
        Ok(KernelWatch {
            inner,
            stop,
            join: Some(join),
        })
    }

    /// Current counts.
    pub fn state(&self) -> KernelState {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .state
            .clone()
    }

    /// Start timing: [`KernelWatch::first_change`] reports the first change from now on.
    pub fn mark(&self, now_ns: u64) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.mark_ns = now_ns;
        g.first_after_mark = None;
    }

    /// The first change to a tracked prefix since the last [`KernelWatch::mark`].
    pub fn first_change(&self) -> Option<u64> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .first_after_mark
    }

    /// An error if the thread has died.
    pub fn check(&mut self) -> Result<()> {
        if self.join.as_ref().is_some_and(|j| j.is_finished()) {
            if let Some(j) = self.join.take() {
                return match j.join() {
                    Ok(Ok(())) => anyhow::bail!("kernel route watch stopped"),
                    Ok(Err(e)) => Err(e.context("kernel route watch")),
                    Err(_) => anyhow::bail!("kernel route watch panicked"),
                };
            }
        }
        Ok(())
    }
}

impl Drop for KernelWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}
