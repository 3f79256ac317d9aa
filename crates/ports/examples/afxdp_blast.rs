//! Blast 64-byte UDP frames over a veth pair between two fresh namespaces and print the
//! rates: an AF_PACKET port on `p1` transmits to a non-local address behind `p0`, whose
//! AF_XDP port receives (`rx`, the default); or the AF_XDP port transmits and the
//! AF_PACKET port receives (`tx`). Needs root.
//!
//! `cargo run --release -p ports --example afxdp_blast [rx|tx] [seconds] [generic]`

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Lab, A_IF, B_IF};
use dataplane::worker::Port;
use dataplane::{Arena, PacketMemory, Pkt, Vector, VECTOR_SIZE};
use ports::{AfPacket, AfXdp, AfXdpOptions, AttachMode};

/// A minimum-size Ethernet + IPv4 + UDP frame to 198.51.100.1 (not local).
fn udp64(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
    let mut f = Vec::with_capacity(64);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 46, 0, 0, 0, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&[10, 88, 0, 2, 198, 51, 100, 1]);
    f.extend_from_slice(&[0x30, 0x39, 0, 9, 0, 26, 0, 0]);
    f.resize(64, 0);
    f
}

/// Transmit `template` from `port` in full vectors until `run` has passed.
fn blast<P: Port<Arena>>(port: &mut P, template: &[u8], run: Duration) -> (u64, Duration) {
    let mut mem = Arena::new(4096);
    let mut pkts = [Pkt::default(); VECTOR_SIZE];
    let mut n = 0u64;
    let t = Instant::now();
    while t.elapsed() < run {
        for p in pkts.iter_mut() {
            *p = mem.load(template, 0).expect("tx buffer");
        }
        n += port.tx_burst(&mut mem, &pkts) as u64;
    }
    (n, t.elapsed())
}

/// Receive from `port` until `stop`; returns frames and the time until the last one.
fn sink<P: Port<Arena>>(port: &mut P, stop: &AtomicBool) -> (u64, Duration) {
    let mut mem = Arena::new(4096);
    let mut v = Vector::default();
    let mut n = 0u64;
    let t = Instant::now();
    let mut last = t;
    while !stop.load(Ordering::Relaxed) {
        v.len = 0;
        let got = port.rx_burst(&mut mem, &mut v);
        if got > 0 {
            last = Instant::now();
        }
        n += got as u64;
        for p in v.as_slice() {
            mem.free(p.buf);
        }
    }
    (n, last.duration_since(t))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args.next().unwrap_or_else(|| "rx".into());
    let secs: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let attach = match args.next().as_deref() {
        Some("generic") => AttachMode::Generic,
        _ => AttachMode::Auto,
    };
    let lab = Lab::new("xblast", 1500);
    let stop = AtomicBool::new(false);
    let (mut x, mut p) = lab.run(|| {
        Lab::enter(&lab.a);
        let opts = AfXdpOptions {
            attach,
            ..Default::default()
        };
        let x = AfXdp::open(A_IF, 0, 0, opts).expect("open AF_XDP on p0");
        Lab::enter(&lab.b);
        let p = AfPacket::open(B_IF, 1, Default::default()).expect("open AF_PACKET on p1");
        (x, p)
    });
    println!("AF_XDP port: {} ({:?})", x.mode(), x);
    let run = Duration::from_secs_f64(secs);
    let mpps = |n: u64, d: Duration| n as f64 / d.as_secs_f64().max(1e-9) / 1e6;
    let (xm, pm) = (x.mac(), p.mac());
    let (xr, pr, stop) = (&mut x, &mut p, &stop);
    std::thread::scope(|s| {
        let ((sent, tx_time), (received, rx_time)) = if dir == "tx" {
            let template = udp64(pm, xm);
            let rx = s.spawn(move || sink(pr, stop));
            let tx = s.spawn(move || blast(xr, &template, run));
            let t = tx.join().unwrap();
            std::thread::sleep(Duration::from_millis(50));
            stop.store(true, Ordering::Relaxed);
            (t, rx.join().unwrap())
        } else {
            let template = udp64(xm, pm);
            let rx = s.spawn(move || sink(xr, stop));
            let tx = s.spawn(move || blast(pr, &template, run));
            let t = tx.join().unwrap();
            std::thread::sleep(Duration::from_millis(50));
            stop.store(true, Ordering::Relaxed);
            (t, rx.join().unwrap())
        };
        let (txer, rxer) = if dir == "tx" {
            ("AF_XDP", "AF_PACKET")
        } else {
            ("AF_PACKET", "AF_XDP")
        };
        println!(
            "tx ({txer}) {sent} frames in {:.2} s: {:.3} Mpps",
            tx_time.as_secs_f64(),
            mpps(sent, tx_time)
        );
        println!(
            "rx ({rxer}) {received} frames in {:.2} s: {:.3} Mpps",
            rx_time.as_secs_f64(),
            mpps(received, rx_time)
        );
    });
    println!("AF_XDP port: {:?}", x.stats());
    println!("AF_PACKET port: {:?}", p.stats());
}
