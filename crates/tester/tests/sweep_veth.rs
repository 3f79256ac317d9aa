//! The route sweep on a real link: a veth pair in a private network namespace, AF_PACKET
//! ports from `crates/ports` (what `ferrouter-lab tester --port0 af_packet:IF` opens), the
//! sender on one end and a receiver thread on the other; then AF_XDP on the same pair. Needs root and iproute2 (skipped
//! with a message otherwise). The namespace `swp-<pid>` is deleted however the test ends.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dataplane::worker::Port;
use dataplane::Arena;
use ports::{AfPacket, AfPacketOptions, AfXdp, AfXdpOptions};
use tester::clock::monotonic_ns;
use tester::sweep::{
    run_receiver, run_sender, verify, SendLimit, SweepConfig, Tracker, VerifyPlan,
};

/// Sets its flag when dropped: a failed assertion inside `thread::scope` must stop the
/// threads it waits for, or the test hangs instead of failing.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Deletes the namespace (and with it the veth pair) when dropped.
struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn ip(ns: &str, args: &[&str]) {
    let st = Command::new("ip")
        .args(["-n", ns])
        .args(args)
        .status()
        .unwrap();
    assert!(st.success(), "ip -n {ns} {args:?}");
}

/// Run `f` on a fresh thread that entered network namespace `ns`.
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        use std::os::fd::AsRawFd;
        // SAFETY: setns on a valid namespace fd; only this (fresh) thread changes namespace.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("netns thread")
}

fn dests(n: u32) -> Vec<IpAddr> {
    (0..n)
        .map(|i| {
            if i % 4 == 3 {
                IpAddr::V6(Ipv6Addr::from(
                    (0x2001_0db8_u128 << 96) | (u128::from(i) << 64) | 1,
                ))
            } else {
                IpAddr::V4(Ipv4Addr::from(0x0a00_0001 + (i << 8)))
            }
        })
        .collect()
}

/// What one backend did.
struct Measured {
    verify_pps: f64,
    verify_skipped: u64,
    tx_pps: f64,
    tx: u64,
    rx: u64,
    rx_pps: f64,
    skipped: u64,
    port_full: u64,
    older: u64,
    verify_lost: u64,
    verify_lossy_dests: usize,
}

/// On ports `tx` → `rx` (frames to `dst_mac` reach `rx`): a verification of 2 passes over
/// 10,000 destinations at 50 kpps whose accounting must add up, and with `lossless` must
/// lose nothing and settle every destination on the receive port; then 1 s as fast as the
/// sender can, measured.
fn exercise<P: Port<Arena> + Send>(
    mut tx: P,
    mut rx: P,
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    lossless: bool,
) -> Measured {
    const N: u32 = 10_000;
    let mut cfg = SweepConfig::new(
        src_mac,
        dst_mac,
        "198.18.0.2".parse().unwrap(),
        "2001:2::2".parse().unwrap(),
        dests(N),
        50_000.0,
    );
    let tracker = Tracker::new(N as usize, 1);
    let stop_rx = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let rx_thread = s.spawn(|| {
            let mut mem = Arena::new(4096);
            run_receiver(&mut mem, &mut rx, 0, &tracker, &stop_rx)
        });
        let _stop_rx = StopOnDrop(&stop_rx);
        let mut mem = Arena::new(4096);

        let mut plan = VerifyPlan::new(2);
        plan.drain = Duration::from_secs(5);
        plan.max_listed = 10;
        let r = verify(&cfg, &mut mem, &mut tx, &tracker, &plan, &stop).unwrap();
        let first_lossy: Vec<usize> = r.lossy.iter().map(|l| l.index).collect();
        let summary = format!(
            "tx {} rx {} lost {} in {} destinations (first {:?}), never received {}, sender {:?}",
            r.tx, r.rx, r.lost, r.dests_with_loss, first_lossy, r.dests_never_received, r.sender
        );
        assert_eq!((r.tx, r.passes), (2 * u64::from(N), 2), "{summary}");
        assert_eq!(r.rx + r.lost, r.tx + r.duplicates, "{summary}");
        assert_eq!(r.stale, 0, "{summary}");
        assert_eq!(r.lossy.len(), r.dests_with_loss.min(10));
        assert_eq!(
            tracker.counts().never_seen,
            r.dests_never_received,
            "{summary}"
        );
        if lossless {
            assert_eq!(r.duplicates, 0, "{summary}");
            if r.sender.tx_skipped == 0 {
                assert_eq!((r.lost, r.dests_with_loss), (0, 0), "{summary}");
            } else {
                // The host stalled the sender (it skipped slots to keep its schedule): the
                // burst it then sent may overflow the kernel's queues. A little loss is the
                // host's, not the accounting's; more is a defect.
                assert!(r.lost * 100 <= r.tx, "{summary}");
                eprintln!("host stalled the sender: {summary}");
            }
            assert_eq!(r.dests_never_received, 0, "{summary}");
            let settled = tracker
                .settled_on(0, tracker.epoch_ns())
                .expect("all on port 0");
            assert!(settled >= tracker.epoch_ns() && settled <= monotonic_ns());
        }

        cfg.rate_pps = 20e6;
        cfg.max_lag = Duration::from_micros(100);
        let before = tracker.counts();
        let t0 = Instant::now();
        let limit = SendLimit {
            deadline_ns: Some(monotonic_ns() + 1_000_000_000),
            passes: None,
        };
        let st = run_sender(&cfg, &mut mem, &mut tx, &tracker, &stop, limit).unwrap();
        let window = t0.elapsed().as_secs_f64();
        // What is still in flight (the receiver keeps running).
        let end = Instant::now() + Duration::from_millis(500);
        while tracker.counts().rx - before.rx < st.tx && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        let after = tracker.counts();
        stop_rx.store(true, Ordering::Relaxed);
        rx_thread.join().unwrap().unwrap();
        let rx = after.rx - before.rx;
        assert!(st.tx > 50_000, "{st:?}");
        assert!(rx > 0 && rx <= st.tx, "{rx} of {}", st.tx);
        assert_eq!(after.stale, before.stale);
        Measured {
            verify_pps: r.sender.tx_pps,
            verify_skipped: r.sender.tx_skipped,
            tx_pps: st.tx_pps,
            tx: st.tx,
            rx,
            rx_pps: rx as f64 / window,
            skipped: st.tx_skipped,
            port_full: st.port_full,
            older: after.older - before.older,
            verify_lost: r.lost,
            verify_lossy_dests: r.dests_with_loss,
        }
    })
}

fn report(backend: &str, m: &Measured) {
    eprintln!(
        "{backend}: verify at 50 kpps: {:.0} frames/s achieved ({} slots given up), {} lost in {} \
         destinations; as fast as possible: sender {:.3} Mpps \
         ({} frames, {} bursts cut by the port, {} slots of the 20 Mpps schedule given up), \
         receiver {:.3} Mpps ({} frames, {} lost = {:.2}%, {} older)",
        m.verify_pps,
        m.verify_skipped,
        m.verify_lost,
        m.verify_lossy_dests,
        m.tx_pps / 1e6,
        m.tx,
        m.port_full,
        m.skipped,
        m.rx_pps / 1e6,
        m.rx,
        m.tx - m.rx,
        (m.tx - m.rx) as f64 * 100.0 / m.tx as f64,
        m.older,
    );
}

#[test]
fn sweep_over_a_veth_pair_with_af_packet_and_af_xdp() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    // Never a silent pass: a run that cannot do the test fails, saying why.
    assert!(
        root,
        "this test needs root (network namespaces): run scripts/test.sh as root"
    );
    assert!(
        Command::new("ip").arg("-V").output().is_ok(),
        "`ip` is missing: install the Debian package iproute2"
    );
    let ns = format!("swp-{}", std::process::id());
    // A namespace of this name can only be left over from an earlier run of this test.
    let _ = Command::new("ip")
        .args(["netns", "del", &ns])
        .stderr(Stdio::null())
        .status();
    assert!(Command::new("ip")
        .args(["netns", "add", &ns])
        .status()
        .unwrap()
        .success());
    let _ns = Netns(ns.clone());
    ip(
        &ns,
        &["link", "add", "va", "type", "veth", "peer", "name", "vb"],
    );
    for dev in ["va", "vb"] {
        // No IPv6 on the links: no neighbour discovery or MLD frames in the way.
        let _ = Command::new("ip")
            .args(["netns", "exec", &ns, "sysctl", "-qw"])
            .arg(format!("net.ipv6.conf.{dev}.disable_ipv6=1"))
            .status();
        ip(&ns, &["link", "set", dev, "up"]);
    }

    // AF_PACKET, as `ferrouter-lab tester --port0 af_packet:IF` opens it
    // (lab::rfc2544::standalone::open_port).
    let opts = AfPacketOptions {
        qdisc_bypass: true,
        ..Default::default()
    };
    let (va, vb) = in_netns(&ns, move || {
        (
            AfPacket::open("va", 0, opts.clone()).unwrap(),
            AfPacket::open("vb", 1, opts).unwrap(),
        )
    });
    let (ma, mb) = (va.mac(), vb.mac());
    // Its 8 MiB receive ring rides out the receiver being descheduled: no loss expected.
    let m = exercise(va, vb, ma, mb, true);
    report("AF_PACKET", &m);

    // AF_XDP (`--port0 af_xdp:IF`: queue 0, default options), measured when the kernel
    // lets us attach XDP to the veth pair.
    let xdp = in_netns(&ns, || {
        let a = AfXdp::open("va", 0, 0, AfXdpOptions::default())?;
        let b = AfXdp::open("vb", 0, 1, AfXdpOptions::default())?;
        Ok::<_, ports::PortError>((a, b))
    });
    match xdp {
        Ok((va, vb)) => {
            let (ma, mb) = (va.mac(), vb.mac());
            // Its receive ring holds a few thousand frames: on a loaded 2-vCPU machine a
            // descheduled receiver loses some. Measured and checked for consistency only.
            let m = exercise(va, vb, ma, mb, false);
            report("AF_XDP", &m);
        }
        Err(e) => eprintln!("AF_XDP not measured: {e}"),
    }
}
