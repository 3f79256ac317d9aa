//! Traffic to every route during a convergence run: a sweep sender in h1 (one frame per
//! route, round robin) and a receiver on each egress host (h2 primary, h3 secondary), all
//! sharing one [`Tracker`] that knows, per route, on which egress its traffic arrives and
//! since when.
//!
//! The receivers use AF_PACKET (which copies frames and leaves the hosts' own stacks, and
//! their BGP sessions, untouched) and sleep in poll(2) when idle, and the sender sleeps
//! between bursts at low rates, so the routing daemons keep most of a core on this
//! two-core machine.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use dataplane::Arena;
use tester::sweep::{self, SendLimit, SenderStats, SweepConfig, Tracker, VerifyPlan, VerifyReport};

use crate::rfc2544::enter_netns;

/// Sender and receivers.
pub struct Traffic {
    cfg: Arc<SweepConfig>,
    tracker: Arc<Tracker>,
    tx_ns: String,
    tx_dev: String,
    stop_tx: Arc<AtomicBool>,
    stop_rx: Arc<AtomicBool>,
    sender: Option<JoinHandle<Result<SenderStats>>>,
    receivers: Vec<JoinHandle<Result<()>>>,
    /// Frames each receiver's socket dropped (its ring was full), as last read.
    rx_drops: Arc<Vec<AtomicU64>>,
}

/// A receiver's ring: 64 blocks. The kernel hands a block over after 1 ms even if it is not
/// full, so at convergence rates (a few hundred frames per ms) a block holds about a
/// millisecond of traffic whatever its size, and the ring's depth in time is its number of
/// blocks: 64 ms for a receiver that loses its core on a busy two-core machine, where the
/// default 8 blocks held 8 ms and lost frames that the router had forwarded.
const RX_BLOCKS: u32 = 64;
/// 256 KiB a block: a whole millisecond at up to ~2M frames/s.
const RX_BLOCK_SIZE: u32 = 256 << 10;

/// An AF_PACKET port on `dev`: a receiver's (`rx`: the deep ring above) or the sender's.
fn open_packet(dev: &str, id: u16, rx: bool) -> Result<ports::AfPacket> {
    let mut opts = ports::AfPacketOptions {
        qdisc_bypass: true,
        ..Default::default()
    };
    if rx {
        opts.block_count = RX_BLOCKS;
        opts.block_size = RX_BLOCK_SIZE;
    }
    ports::AfPacket::open(dev, id, opts).with_context(|| format!("opening AF_PACKET on {dev}"))
}

impl Traffic {
    /// Receivers on `rx` (namespace, device) become tracker ports 0, 1, ...; the sender
    /// sends from `tx` to `dests` at `rate_pps`, frames addressed to `dst_mac` (the router's
    /// ingress), starting now.
    pub fn start(
        tx: (&str, &str),
        rx: &[(String, &str)],
        dst_mac: [u8; 6],
        src: (Ipv4Addr, Ipv6Addr),
        dests: Vec<IpAddr>,
        rate_pps: f64,
    ) -> Result<Traffic> {
        let tracker = Tracker::try_new(dests.len(), rx.len())?;
        let stop_rx = Arc::new(AtomicBool::new(false));
        let rx_drops: Arc<Vec<AtomicU64>> =
            Arc::new(rx.iter().map(|_| AtomicU64::new(0)).collect());
        let mut receivers = Vec::new();
        for (k, (ns, dev)) in rx.iter().enumerate() {
            let (ns, dev, t, stop, drops) = (
                ns.clone(),
                dev.to_string(),
                tracker.clone(),
                stop_rx.clone(),
                rx_drops.clone(),
            );
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            receivers.push(
                std::thread::Builder::new()
                    .name(format!("sweep-rx{k}"))
                    .spawn(move || -> Result<()> {
                        let opened =
                            enter_netns(&ns).and_then(|()| open_packet(&dev, k as u16, true));
                        let mut port = match opened {
                            Ok(p) => {
                                let _ = ready_tx.send(Ok(()));
                                p
                            }
                            Err(e) => {
                                let _ = ready_tx.send(Err(format!("{e:#}")));
                                return Err(e);
                            }
                        };
                        receive(&mut port, k, &t, &stop, &drops[k])
                    })?,
            );
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => anyhow::bail!("receiver {k}: {e}"),
                Err(_) => anyhow::bail!("receiver {k} died"),
            }
        }
        // The sender's MAC: its interface's.
        let src_mac = crate::rfc2544::topo::read_mac(tx.0, tx.1)?;
        let cfg = SweepConfig::new(src_mac, dst_mac, src.0, src.1, dests, rate_pps);
        cfg.validate()?;
        let mut t = Traffic {
            cfg: Arc::new(cfg),
            tracker,
            tx_ns: tx.0.to_string(),
            tx_dev: tx.1.to_string(),
            stop_tx: Arc::new(AtomicBool::new(false)),
            stop_rx,
            sender: None,
            receivers,
            rx_drops,
        };
        t.start_sender()?;
        Ok(t)
    }

    fn start_sender(&mut self) -> Result<()> {
        self.stop_tx.store(false, Ordering::Relaxed);
        let (cfg, t, stop) = (self.cfg.clone(), self.tracker.clone(), self.stop_tx.clone());
        let (ns, dev) = (self.tx_ns.clone(), self.tx_dev.clone());
        self.sender = Some(std::thread::Builder::new().name("sweep-tx".into()).spawn(
            move || -> Result<SenderStats> {
                enter_netns(&ns)?;
                let mut port = open_packet(&dev, 0, false)?;
                let mut mem = Arena::new(4096);
                sweep::run_sender(&cfg, &mut mem, &mut port, &t, &stop, SendLimit::default())
            },
        )?);
        Ok(())
    }

    /// Frames the receivers' own sockets dropped so far (ring full: the receiving side of
    /// the benchmark, not the DUT, lost them), read at most ~100 ms ago.
    pub fn receiver_drops(&self) -> u64 {
        self.rx_drops
            .iter()
            .map(|d| d.load(Ordering::Relaxed))
            .sum()
    }

    /// The shared per-route state.
    pub fn tracker(&self) -> &Tracker {
        &self.tracker
    }

    /// One pass over every route, in seconds: the resolution of the times measured.
    pub fn period(&self) -> Duration {
        self.cfg.period()
    }

    /// An error if a thread has died.
    pub fn check(&self) -> Result<()> {
        if self.sender.as_ref().is_some_and(|s| s.is_finished()) {
            anyhow::bail!("the traffic sender stopped");
        }
        if self.receivers.iter().any(|r| r.is_finished()) {
            anyhow::bail!("a traffic receiver stopped");
        }
        Ok(())
    }

    fn stop_sender(&mut self) -> Result<Option<SenderStats>> {
        self.stop_tx.store(true, Ordering::Relaxed);
        match self.sender.take() {
            Some(j) => {
                Ok(Some(j.join().map_err(|_| {
                    anyhow::anyhow!("the traffic sender panicked")
                })??))
            }
            None => Ok(None),
        }
    }

    /// Stop the continuous sweep, send `passes` exact passes and report loss per route;
    /// then resume the sweep.
    pub fn verify(&mut self, passes: u64) -> Result<VerifyReport> {
        self.stop_sender()?;
        std::thread::sleep(Duration::from_millis(200));
        let (cfg, t) = (self.cfg.clone(), self.tracker.clone());
        let (ns, dev) = (self.tx_ns.clone(), self.tx_dev.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let r = std::thread::Builder::new()
            .name("sweep-verify".into())
            .spawn(move || -> Result<VerifyReport> {
                enter_netns(&ns)?;
                let mut port = open_packet(&dev, 0, false)?;
                let mut mem = Arena::new(4096);
                let mut plan = VerifyPlan::new(passes);
                plan.drain = Duration::from_secs(3);
                plan.max_listed = 20;
                sweep::verify(&cfg, &mut mem, &mut port, &t, &plan, &stop)
            })?
            .join()
            .map_err(|_| anyhow::anyhow!("the verification sender panicked"))?;
        self.start_sender()?;
        r
    }
}

/// Receive until `stop`, sleeping in poll(2) for up to 2 ms when the ring is empty.
fn receive(
    port: &mut ports::AfPacket,
    k: usize,
    t: &Tracker,
    stop: &AtomicBool,
    drops: &AtomicU64,
) -> Result<()> {
    let mut r = sweep::Receiver::new(t, k)?;
    let mut last_stats = std::time::Instant::now();
    let mut mem = Arena::new(4096);
    let mut clock = tester::MonotonicClock;
    let mut pfd = libc::pollfd {
        fd: port.fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    while !stop.load(Ordering::Relaxed) {
        if last_stats.elapsed() > Duration::from_millis(100) {
            last_stats = std::time::Instant::now();
            drops.store(port.stats().kernel_drops, Ordering::Relaxed);
        }
        if r.poll(&mut mem, port, &mut clock) == 0 {
            // SAFETY: one valid pollfd for a socket `port` keeps open.
            unsafe { libc::poll(&mut pfd, 1, 2) };
        }
    }
    Ok(())
}

impl Drop for Traffic {
    fn drop(&mut self) {
        let _ = self.stop_sender();
        self.stop_rx.store(true, Ordering::Relaxed);
        for r in self.receivers.drain(..) {
            let _ = r.join();
        }
    }
}
