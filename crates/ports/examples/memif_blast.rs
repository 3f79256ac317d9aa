//! How many frames per second one core pushes through a memif link: a ferrouter memif
//! server and a ferrouter memif client in one process, each on its own thread (pinned to
//! CPU 0 and 1 when there are two), the sender blasting bursts of 32 frames and the
//! receiver counting them.
//!
//! ```text
//! cargo run --release -p ports --example memif_blast -- [seconds] [frame bytes] [ring log2]
//! ```
//!
//! Prints, for each direction (client → server on the C2S ring, server → client on the
//! S2C ring), the frames received per second and what the sender had to drop because the
//! ring was full. Both sides copy: the sender from its packet memory into the shared
//! buffers, the receiver from the shared buffers into fresh frames of its own memory.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dataplane::worker::Port;
use dataplane::{Arena, PacketMemory, Pkt, Vector};
use ports::{Memif, MemifOptions, MemifRole, MemifStats};

fn pin(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; sched_setaffinity reads it. Failure only means the
    // thread is not pinned.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn open(path: &Path, role: MemifRole, log2: u8) -> Memif {
    let opts = MemifOptions {
        socket: path.to_path_buf(),
        role,
        ring_size_log2: log2,
        name: format!("blast-{role:?}"),
        ..Default::default()
    };
    Memif::open(0, opts).expect("open memif")
}

/// Send bursts of `frame` until `stop`; returns the sender's stats.
fn blast(mut port: Memif, frame: Vec<u8>, stop: Arc<AtomicBool>, cpu: usize) -> MemifStats {
    pin(cpu);
    let mut mem = Arena::new(4096);
    port.wait_connected(Duration::from_secs(5))
        .expect("peer connects");
    let mut pkts = [Pkt::default(); 32];
    while !stop.load(Ordering::Relaxed) {
        for p in pkts.iter_mut() {
            *p = mem.load(&frame, 0).expect("frames");
        }
        port.tx_burst(&mut mem, &pkts);
    }
    port.stats()
}

/// Receive until `stop`; returns the receiver's stats and the time it measured over (from
/// the first frame).
fn sink(mut port: Memif, stop: Arc<AtomicBool>, cpu: usize) -> (MemifStats, u64, Duration) {
    pin(cpu);
    let mut mem = Arena::new(4096);
    port.wait_connected(Duration::from_secs(5))
        .expect("peer connects");
    let mut v = Vector::default();
    let mut start = None;
    let mut base = 0;
    while !stop.load(Ordering::Relaxed) {
        v.len = 0;
        let n = port.rx_burst(&mut mem, &mut v);
        for p in &v.pkts[..n] {
            mem.free(p.buf);
        }
        if n > 0 && start.is_none() {
            start = Some(Instant::now());
            base = port.stats().rx_packets;
        }
    }
    let t = start.map(|s| s.elapsed()).unwrap_or_default();
    let st = port.stats();
    (st, st.rx_packets - base, t)
}

fn run(name: &str, server_sends: bool, secs: f64, len: usize, log2: u8) {
    let path = std::env::temp_dir().join(format!("memif-blast-{}.sock", std::process::id()));
    let server = open(&path, MemifRole::Server, log2);
    let client = open(&path, MemifRole::Client, log2);
    let (tx_port, rx_port) = if server_sends {
        (server, client)
    } else {
        (client, server)
    };
    let mut frame = vec![0u8; len];
    frame[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    frame[12..14].copy_from_slice(&[0x88, 0xb5]);
    let stop = Arc::new(AtomicBool::new(false));
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (s1, s2) = (stop.clone(), stop.clone());
    let rx = std::thread::spawn(move || sink(rx_port, s1, 0));
    let tx = std::thread::spawn(move || blast(tx_port, frame, s2, 1 % cpus));
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    let (rst, got, t) = rx.join().expect("receiver");
    let tst = tx.join().expect("sender");
    let _ = std::fs::remove_file(&path);
    let mpps = got as f64 / t.as_secs_f64().max(1e-9) / 1e6;
    println!(
        "{name}: {mpps:.2} Mpps ({:.2} Gbit/s of {len}-byte frames) received; sender: {} sent, \
         {} dropped ring full; receiver: {} no-buffer stalls, {} bad descriptors",
        mpps * len as f64 * 8.0 / 1e3,
        tst.tx_packets,
        tst.tx_dropped_ring_full,
        rst.rx_no_buffer,
        rst.bad_descriptors,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let secs: f64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let len: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(64);
    let log2: u8 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10);
    assert!((14..=1900).contains(&len), "frame bytes must be 14..=1900");
    run("client -> server (C2S)", false, secs, len, log2);
    run("server -> client (S2C)", true, secs, len, log2);
}
