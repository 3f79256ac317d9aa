//! Blast 64-byte frames over a veth pair between two fresh namespaces with the AF_PACKET
//! port for a few seconds and print the transmit and receive rates. Needs root.
//!
//! `cargo run --release -p ports --example afpacket_blast [seconds] [burst]`

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{frame, Lab, A_IF, B_IF};
use dataplane::worker::Port;
use dataplane::{Arena, PacketMemory, Pkt, Vector, VECTOR_SIZE};
use ports::AfPacket;

fn main() {
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let burst: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(VECTOR_SIZE)
        .clamp(1, VECTOR_SIZE);
    let lab = Lab::new("blast", 1500);
    let stop = AtomicBool::new(false);
    let (mut a, mut b) = lab.run(|| {
        Lab::enter(&lab.a);
        let a = AfPacket::open(A_IF, 0, Default::default()).expect("open p0");
        Lab::enter(&lab.b);
        let b = AfPacket::open(B_IF, 1, Default::default()).expect("open p1");
        (a, b)
    });
    let template = frame(b.mac(), a.mac(), 0, 64);
    let run = Duration::from_secs_f64(secs);
    std::thread::scope(|s| {
        let rx = s.spawn(|| {
            let mut mem = Arena::new(4096);
            let mut v = Vector::default();
            let mut n = 0u64;
            let t = Instant::now();
            let mut last = t;
            while !stop.load(Ordering::Relaxed) {
                v.len = 0;
                let got = b.rx_burst(&mut mem, &mut v);
                if got > 0 {
                    last = Instant::now();
                }
                n += got as u64;
                for p in v.as_slice() {
                    mem.free(p.buf);
                }
            }
            (n, last.duration_since(t))
        });
        let tx = s.spawn(|| {
            let mut mem = Arena::new(4096);
            let mut pkts = [Pkt::default(); VECTOR_SIZE];
            let mut n = 0u64;
            let t = Instant::now();
            while t.elapsed() < run {
                for p in pkts.iter_mut().take(burst) {
                    *p = mem.load(&template, 0).expect("tx buffer");
                }
                n += a.tx_burst(&mut mem, &pkts[..burst]) as u64;
            }
            (n, t.elapsed())
        });
        let (sent, tx_time) = tx.join().unwrap();
        // Let the receiver drain what is in flight.
        std::thread::sleep(Duration::from_millis(50));
        stop.store(true, Ordering::Relaxed);
        let (received, rx_time) = rx.join().unwrap();
        let mpps = |n: u64, d: Duration| n as f64 / d.as_secs_f64() / 1e6;
        println!(
            "tx {sent} frames in {:.2} s: {:.3} Mpps (burst {burst})",
            tx_time.as_secs_f64(),
            mpps(sent, tx_time)
        );
        println!(
            "rx {received} frames in {:.2} s: {:.3} Mpps",
            rx_time.as_secs_f64(),
            mpps(received, rx_time)
        );
    });
    println!("tx port: {:?}", a.stats());
    println!("rx port: {:?}", b.stats());
}
