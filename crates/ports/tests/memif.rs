//! memif ports end to end: ferrouter server ↔ ferrouter client, interoperation with DPDK's
//! `dpdk-testpmd` (`net_memif`) in both roles, and a hostile raw peer against our server.
//!
//! Every test cleans up its socket files and child processes through guards, also when it
//! fails. The testpmd tests need `/usr/bin/dpdk-testpmd` (Debian `dpdk-dev` +
//! `librte-net-memif23`) and root (DPDK's runtime directory is /var/run/dpdk); without the
//! binary they are skipped with a message.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use dataplane::worker::Port;
use dataplane::{Arena, PacketMemory, Pkt, Vector, HEADROOM};
use ports::{Memif, MemifOptions, MemifRole};

// ---------------------------------------------------------------------------------------
// Helpers

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A unique path under /tmp, removed (if present) when dropped.
struct TmpPath(PathBuf);

impl TmpPath {
    fn new(tag: &str) -> TmpPath {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("fr-memif-{}-{tag}{n}.sock", std::process::id()));
        let _ = std::fs::remove_file(&p);
        TmpPath(p)
    }
}

impl Drop for TmpPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn opts(path: &Path, role: MemifRole, log2: u8, name: &str) -> MemifOptions {
    MemifOptions {
        socket: path.to_path_buf(),
        role,
        id: 0,
        ring_size_log2: log2,
        buffer_size: 2048,
        secret: None,
        name: name.to_string(),
        ..Default::default()
    }
}

/// A test frame: Ethernet header, then a 32-bit sequence number and a payload pattern
/// derived from it; length varies with the sequence (60..=1060 bytes).
fn frame(tag: u8, seq: u32) -> Vec<u8> {
    let len = 60 + (seq as usize * 7) % 1001;
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f[12..14].copy_from_slice(&[0x88, 0xb5]); // local experimental ethertype
    f[14] = tag;
    f[15..19].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in f[19..].iter_mut().enumerate() {
        *b = (seq as usize + i) as u8 ^ tag;
    }
    f
}

/// The sequence number of a frame made by `frame(tag, _)`, checking every byte.
fn check(tag: u8, f: &[u8]) -> Result<u32, String> {
    if f.len() < 19 || f[14] != tag {
        return Err(format!("not a test frame of tag {tag}: {} bytes", f.len()));
    }
    let seq = u32::from_be_bytes([f[15], f[16], f[17], f[18]]);
    if f != frame(tag, seq).as_slice() {
        return Err(format!("frame {seq} corrupted"));
    }
    Ok(seq)
}

/// Receive one burst, copying frames out and freeing their buffers.
fn rx<P: Port<Arena>>(p: &mut P, mem: &mut Arena, out: &mut Vec<Vec<u8>>) -> usize {
    let mut v = Vector::default();
    let n = p.rx_burst(mem, &mut v);
    assert_eq!(n, v.len);
    for pkt in v.as_slice() {
        assert_eq!(pkt.off as usize, HEADROOM);
        out.push(mem.data(pkt).to_vec());
        mem.free(pkt.buf);
    }
    n
}

/// Send frames `seq..seq+n` of `tag`; returns how many the port accepted (a prefix).
fn tx<P: Port<Arena>>(p: &mut P, mem: &mut Arena, tag: u8, seq: u32, n: u32) -> u32 {
    let pkts: Vec<Pkt> = (seq..seq + n)
        .map(|s| mem.load(&frame(tag, s), 0).expect("arena has room"))
        .collect();
    p.tx_burst(mem, &pkts) as u32
}

/// Connect a server and a client driven alternately from this thread.
fn connect_pair(server: &mut Memif, client: &mut Memif) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !(server.is_connected() && client.is_connected()) {
        assert!(
            Instant::now() < deadline,
            "no connection: server {:?} / client {:?}",
            server.last_disconnect_reason(),
            client.last_disconnect_reason()
        );
        server.poll_control();
        client.poll_control();
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Move `n` frames each way between two connected ports driven from this thread, never
/// more than `window` in flight per direction, and check they arrive complete and in
/// order.
fn exchange(a: &mut Memif, b: &mut Memif, mem: &mut Arena, n: u32, window: u32) {
    let (mut a_sent, mut b_sent) = (0u32, 0u32);
    let (mut a_got, mut b_got) = (0u32, 0u32); // frames received by a (from b) and by b
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buf = Vec::new();
    while a_got < n || b_got < n {
        assert!(
            Instant::now() < deadline,
            "stuck: a sent {a_sent} got {a_got}, b sent {b_sent} got {b_got}; {:?} {:?}",
            a.stats(),
            b.stats()
        );
        let room = window - (a_sent - b_got);
        let k = room.min(n - a_sent).min(64);
        if k > 0 {
            a_sent += tx(a, mem, 0xa, a_sent, k);
        }
        let room = window - (b_sent - a_got);
        let k = room.min(n - b_sent).min(64);
        if k > 0 {
            b_sent += tx(b, mem, 0xb, b_sent, k);
        }
        buf.clear();
        rx(b, mem, &mut buf);
        for f in &buf {
            assert_eq!(check(0xa, f), Ok(b_got), "b received out of order");
            b_got += 1;
        }
        buf.clear();
        rx(a, mem, &mut buf);
        for f in &buf {
            assert_eq!(check(0xb, f), Ok(a_got), "a received out of order");
            a_got += 1;
        }
    }
    assert_eq!(mem.free_count(), mem.frames() as usize, "buffers leaked");
}

// ---------------------------------------------------------------------------------------
// 1. ferrouter server ↔ ferrouter client

#[test]
fn server_and_client_exchange_frames_and_reconnect() {
    let path = TmpPath::new("pair");
    let mut mem = Arena::new(1024);
    // 256-slot rings: 10,000 frames wrap them ~40 times.
    let mut server = Memif::open(1, opts(&path.0, MemifRole::Server, 8, "srv")).unwrap();
    assert!(path.0.exists(), "server socket file created");
    let mut client = Memif::open(2, opts(&path.0, MemifRole::Client, 8, "cli")).unwrap();
    connect_pair(&mut server, &mut client);
    assert_eq!(server.ring_size(), Some(256));
    assert_eq!(client.peer().1, "srv");
    assert_eq!(server.peer().1, "cli");

    exchange(&mut client, &mut server, &mut mem, 10_000, 200);
    let (s, c) = (server.stats(), client.stats());
    assert_eq!((s.rx_packets, s.tx_packets), (10_000, 10_000));
    assert_eq!((c.rx_packets, c.tx_packets), (10_000, 10_000));
    assert_eq!(s.tx_dropped_ring_full + c.tx_dropped_ring_full, 0);
    assert_eq!(s.bad_descriptors + c.bad_descriptors, 0);
    assert_eq!(s.control_errors + c.control_errors, 0);
    let bytes: u64 = (0..10_000).map(|i| frame(0xa, i).len() as u64).sum();
    assert_eq!(s.rx_bytes, bytes);

    // The client goes away: the server notices and listens again.
    drop(client);
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.is_connected() {
        assert!(
            Instant::now() < deadline,
            "server did not notice the client left"
        );
        server.poll_control();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(server.stats().disconnects, 1);
    assert!(server.last_disconnect_reason().is_some());
    // Sending now drops and counts.
    assert_eq!(tx(&mut server, &mut mem, 0xb, 0, 3), 0);
    assert_eq!(server.stats().tx_dropped_disconnected, 3);

    // A new client is accepted and works.
    let mut client = Memif::open(3, opts(&path.0, MemifRole::Client, 8, "cli2")).unwrap();
    connect_pair(&mut server, &mut client);
    exchange(&mut client, &mut server, &mut mem, 2_000, 200);
    assert_eq!(server.stats().connects, 2);
    assert_eq!(server.stats().control_errors, 0);

    // The server goes away: the client notices and retries on its own.
    drop(server);
    assert!(!path.0.exists(), "server removes its socket file");
    let deadline = Instant::now() + Duration::from_secs(5);
    while client.is_connected() {
        assert!(
            Instant::now() < deadline,
            "client did not notice the server left"
        );
        client.poll_control();
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut server = Memif::open(1, opts(&path.0, MemifRole::Server, 8, "srv")).unwrap();
    connect_pair(&mut server, &mut client);
    exchange(&mut client, &mut server, &mut mem, 1_000, 100);
}

#[test]
fn abstract_socket_namespace_works() {
    let path = TmpPath::new("abstract");
    let mut so = opts(&path.0, MemifRole::Server, 6, "srv");
    so.abstract_socket = true;
    let mut co = opts(&path.0, MemifRole::Client, 6, "cli");
    co.abstract_socket = true;
    let mut server = Memif::open(0, so).unwrap();
    let mut client = Memif::open(0, co).unwrap();
    connect_pair(&mut server, &mut client);
    assert!(!path.0.exists(), "no file in the abstract namespace");
    let mut mem = Arena::new(256);
    exchange(&mut client, &mut server, &mut mem, 1_000, 50);
}

#[test]
fn worker_loops_alone_keep_the_link_alive() {
    // Only rx_burst/tx_burst are called, from two threads, as worker loops would.
    let path = TmpPath::new("threads");
    let server = Memif::open(1, opts(&path.0, MemifRole::Server, 10, "srv")).unwrap();
    let client = Memif::open(2, opts(&path.0, MemifRole::Client, 10, "cli")).unwrap();
    const N: u32 = 50_000;
    let echo = std::thread::spawn(move || {
        // Server: send every frame back.
        let mut server = server;
        let mut mem = Arena::new(512);
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut echoed = 0u32;
        while echoed < N && Instant::now() < deadline {
            let mut v = Vector::default();
            let n = server.rx_burst(&mut mem, &mut v);
            for p in &v.pkts[..n] {
                // Retry until the ring has room: lossless echo.
                let bytes = mem.data(p).to_vec();
                mem.free(p.buf);
                while Instant::now() < deadline {
                    let copy = mem.load(&bytes, 0).unwrap();
                    if server.tx_burst(&mut mem, &[copy]) == 1 {
                        echoed += 1;
                        break;
                    }
                }
            }
        }
        (echoed, server.stats())
    });
    let mut client = client;
    let mut mem = Arena::new(1024);
    let (mut sent, mut got) = (0u32, 0u32);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buf = Vec::new();
    while got < N && Instant::now() < deadline {
        let k = (512 - (sent - got)).min(N - sent).min(64);
        if k > 0 {
            sent += tx(&mut client, &mut mem, 0xc, sent, k);
        }
        buf.clear();
        rx(&mut client, &mut mem, &mut buf);
        for f in &buf {
            assert_eq!(check(0xc, f), Ok(got));
            got += 1;
        }
    }
    let (echoed, sstats) = echo.join().unwrap();
    assert_eq!(
        got,
        N,
        "client stats {:?}, server {sstats:?}",
        client.stats()
    );
    assert_eq!(echoed, N);
    assert_eq!(sstats.connects, 1);
    // Frames sent before the connection came up were dropped and counted, not lost
    // silently: `sent` only counts accepted ones.
    assert_eq!(client.stats().tx_packets, u64::from(N));
}

#[test]
fn wrong_id_and_secret_are_refused_with_a_reason() {
    let path = TmpPath::new("auth");
    let mut so = opts(&path.0, MemifRole::Server, 8, "srv");
    so.id = 7;
    so.secret = Some("open sesame".into());
    let mut server = Memif::open(0, so).unwrap();

    let mut cases = vec![
        (7, None, "Secret required"),
        (7, Some("wrong"), "Incorrect secret"),
        (8, Some("open sesame"), "ID not found"),
    ];
    for (i, (id, secret, why)) in cases.drain(..).enumerate() {
        let mut co = opts(&path.0, MemifRole::Client, 8, "cli");
        co.id = id;
        co.secret = secret.map(String::from);
        let mut client = Memif::open(0, co).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while client.last_disconnect_reason().is_none() {
            assert!(Instant::now() < deadline, "case {why}: no refusal");
            server.poll_control();
            client.poll_control();
            std::thread::sleep(Duration::from_micros(200));
        }
        let reason = client.last_disconnect_reason().unwrap().to_string();
        assert!(reason.contains(why), "expected {why:?}, got {reason:?}");
        assert!(!client.is_connected() && !server.is_connected());
        assert_eq!(server.stats().control_errors, i as u64 + 1);
    }
    let mut co = opts(&path.0, MemifRole::Client, 8, "cli");
    co.id = 7;
    co.secret = Some("open sesame".into());
    let mut client = Memif::open(0, co).unwrap();
    connect_pair(&mut server, &mut client);
    let mut mem = Arena::new(256);
    exchange(&mut client, &mut server, &mut mem, 500, 100);
}

#[test]
fn stale_socket_file_is_replaced_but_a_live_server_is_not() {
    let path = TmpPath::new("stale");
    {
        // A socket file nobody listens on.
        let l = std::os::unix::net::UnixListener::bind(&path.0).unwrap();
        drop(l);
    }
    assert!(path.0.exists());
    let server = Memif::open(0, opts(&path.0, MemifRole::Server, 8, "srv")).unwrap();
    // A second server on the same path must not steal it.
    let err = Memif::open(0, opts(&path.0, MemifRole::Server, 8, "srv2")).unwrap_err();
    assert!(err.to_string().contains("stale") || format!("{err:?}").contains("AddrInUse"));
    drop(server);
    assert!(!path.0.exists());
    // A regular file is never removed.
    std::fs::write(&path.0, b"not a socket").unwrap();
    assert!(Memif::open(0, opts(&path.0, MemifRole::Server, 8, "srv")).is_err());
    assert!(path.0.exists());
}

// ---------------------------------------------------------------------------------------
// 2. dpdk-testpmd interop

const TESTPMD: &str = "/usr/bin/dpdk-testpmd";

/// One testpmd at a time: each busy-polls a core of this 2-core machine.
static TESTPMD_LOCK: Mutex<()> = Mutex::new(());

/// A running testpmd: stopped with SIGINT (then SIGKILL) and its runtime directory and
/// log removed when dropped. The log is printed if the test is failing.
struct TestPmd {
    child: Child,
    prefix: String,
    log: PathBuf,
}

impl TestPmd {
    fn start(role: &str, sock: &Path) -> TestPmd {
        Self::start_with(role, sock, false)
    }

    fn start_with(role: &str, sock: &Path, abstract_ns: bool) -> TestPmd {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("frmemif{}x{n}", std::process::id());
        let log = std::env::temp_dir().join(format!("{prefix}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        let vdev = format!(
            "net_memif0,role={role},id=0,socket={},socket-abstract={},rsize=10,bsize=2048",
            sock.display(),
            if abstract_ns { "yes" } else { "no" }
        );
        let args = testpmd_args(&prefix, &vdev);
        let child = Command::new(TESTPMD)
            .args(&args)
            // testpmd without -i waits for Enter on stdin: keep a pipe open.
            .stdin(Stdio::piped())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn dpdk-testpmd");
        eprintln!("started: {TESTPMD} {}", args.join(" "));
        TestPmd { child, prefix, log }
    }

    fn log(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    /// Stop with SIGINT and wait (bounded); returns the log.
    fn stop(&mut self) -> String {
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break;
                }
            }
        }
        self.log()
    }

    fn assert_alive(&mut self) {
        if let Ok(Some(st)) = self.child.try_wait() {
            panic!("testpmd exited early ({st}):\n{}", self.log());
        }
    }
}

impl Drop for TestPmd {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.stop();
        }
        if std::thread::panicking() {
            eprintln!("---- testpmd log ----\n{}", self.log());
        }
        let _ = std::fs::remove_file(&self.log);
        let _ = std::fs::remove_dir_all(Path::new("/var/run/dpdk").join(&self.prefix));
    }
}

fn testpmd_args(prefix: &str, vdev: &str) -> Vec<String> {
    [
        "--no-huge",
        "-m",
        "256",
        "--no-pci",
        "--file-prefix",
        prefix,
        "-l",
        "0,1",
        "--log-level",
        "pmd.net.memif:info",
        "--vdev",
        vdev,
        "--",
        "--forward-mode=io",
        "--port-topology=loop",
        "--auto-start",
        "--total-num-mbufs=8192",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// testpmd is there, or the test fails naming what to install: a test that cannot run
/// never passes (scripts/test.sh installs it; mark a test `#[ignore]` to leave it out).
fn have_testpmd() -> bool {
    assert!(
        Path::new(TESTPMD).exists(),
        "{TESTPMD} is not installed: install the Debian packages dpdk-dev and librte-net-memif23 (scripts/test.sh does)"
    );
    true
}

/// Wait until testpmd forwards: send a probe frame (tag 0xf) every few milliseconds until
/// one comes back. testpmd drains ("flushes") its receive queues when forwarding starts,
/// and the memif link may come up before that, so frames sent too early are discarded by
/// design. Returns how many probes came back.
fn warm_up(port: &mut Memif, pmd: &mut TestPmd, mem: &mut Arena) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut buf = Vec::new();
    let mut seq = 0;
    loop {
        assert!(Instant::now() < deadline, "testpmd never forwarded a probe");
        pmd.assert_alive();
        seq += tx(port, mem, 0xf, seq, 1);
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(5) {
            buf.clear();
            rx(port, mem, &mut buf);
            if !buf.is_empty() {
                // Forwarding runs. Collect the probes still in flight, then stop.
                let t = Instant::now();
                while t.elapsed() < Duration::from_millis(100) {
                    rx(port, mem, &mut buf);
                }
                for f in &buf {
                    check(0xf, f).expect("only probes during warm-up");
                }
                return buf.len() as u32;
            }
        }
    }
}

/// Send `n` frames through testpmd's io-forwarding loop and check every one comes back
/// unchanged and in order. At most `window` frames are in flight, well below the ring
/// size, so neither ring can overflow: once forwarding runs (see [`warm_up`]) and a frame
/// is accepted by our port, the exchange must be lossless. Returns the probes that came
/// back during warm-up.
fn loop_through_testpmd(port: &mut Memif, pmd: &mut TestPmd, n: u32, window: u32) -> u32 {
    let mut mem = Arena::new(2048);
    let probes = warm_up(port, pmd, &mut mem);
    let before = port.stats();
    let (mut sent, mut got) = (0u32, 0u32);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut buf = Vec::new();
    let mut last_progress = Instant::now();
    while got < n {
        if Instant::now() > deadline || last_progress.elapsed() > Duration::from_secs(5) {
            pmd.assert_alive();
            panic!(
                "testpmd loop stuck: sent {sent} got {got}, stats {:?}",
                port.stats()
            );
        }
        let k = (window - (sent - got)).min(n - sent).min(32);
        if k > 0 {
            let acc = tx(port, &mut mem, 0xd, sent, k);
            assert_eq!(acc, k, "ring full below the window: {:?}", port.stats());
            sent += acc;
        }
        buf.clear();
        if rx(port, &mut mem, &mut buf) > 0 {
            last_progress = Instant::now();
        }
        for f in &buf {
            assert_eq!(check(0xd, f), Ok(got), "frame lost, reordered or corrupted");
            got += 1;
        }
    }
    assert_eq!(mem.free_count(), mem.frames() as usize);
    let st = port.stats();
    assert_eq!(st.tx_packets - before.tx_packets, u64::from(n));
    assert_eq!(st.rx_packets - before.rx_packets, u64::from(n));
    assert_eq!(st.tx_dropped_ring_full, before.tx_dropped_ring_full);
    assert_eq!(
        st.bad_descriptors + st.ring_errors + st.rx_dropped_chained,
        0
    );
    probes
}

/// testpmd's final "Forward statistics" RX/TX packet counts for port 0.
fn testpmd_counts(log: &str) -> Option<(u64, u64)> {
    let sec = log.rsplit("Forward statistics for port 0").next()?;
    let num = |key: &str| -> Option<u64> {
        let i = sec.find(key)? + key.len();
        sec[i..].split_whitespace().next()?.parse().ok()
    };
    Some((num("RX-packets:")?, num("TX-packets:")?))
}

#[test]
fn testpmd_server_with_our_client() {
    if !have_testpmd() {
        return;
    }
    let _one = TESTPMD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let path = TmpPath::new("pmdsrv");
    let mut pmd = TestPmd::start("server", &path.0);
    let mut client = Memif::open(0, opts(&path.0, MemifRole::Client, 10, "fr-client")).unwrap();
    if let Err(e) = client.wait_connected(Duration::from_secs(20)) {
        pmd.assert_alive();
        panic!("no connection to testpmd: {e}");
    }
    assert_eq!(client.ring_size(), Some(1024));
    assert!(
        client.peer().0.starts_with("DPDK"),
        "peer app {:?}",
        client.peer()
    );
    const N: u32 = 20_000;
    let probes = loop_through_testpmd(&mut client, &mut pmd, N, 256);
    let log = pmd.stop();
    let (rxp, txp) = testpmd_counts(&log).expect("testpmd statistics in its log");
    let want = u64::from(N + probes);
    assert_eq!((rxp, txp), (want, want), "testpmd counters");
}

#[test]
fn our_server_with_testpmd_client() {
    if !have_testpmd() {
        return;
    }
    let _one = TESTPMD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let path = TmpPath::new("pmdcli");
    // testpmd's client connects once, at port start: listen first.
    let mut server = Memif::open(0, opts(&path.0, MemifRole::Server, 10, "fr-server")).unwrap();
    let mut pmd = TestPmd::start("client", &path.0);
    if let Err(e) = server.wait_connected(Duration::from_secs(20)) {
        pmd.assert_alive();
        panic!("testpmd did not connect: {e}");
    }
    assert_eq!(server.ring_size(), Some(1024));
    const N: u32 = 20_000;
    let probes = loop_through_testpmd(&mut server, &mut pmd, N, 256);
    let log = pmd.stop();
    let (rxp, txp) = testpmd_counts(&log).expect("testpmd statistics in its log");
    let want = u64::from(N + probes);
    assert_eq!((rxp, txp), (want, want), "testpmd counters");
    // testpmd closing its port disconnects; the server notices and listens again.
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.is_connected() {
        assert!(
            Instant::now() < deadline,
            "server did not notice testpmd left"
        );
        server.poll_control();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(server.stats().disconnects, 1);
    assert_eq!(server.stats().control_errors, 0);
}

#[test]
fn testpmd_client_in_the_abstract_namespace() {
    if !have_testpmd() {
        return;
    }
    let _one = TESTPMD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let path = TmpPath::new("pmdabs");
    let mut so = opts(&path.0, MemifRole::Server, 10, "fr-server");
    so.abstract_socket = true;
    let mut server = Memif::open(0, so).unwrap();
    let mut pmd = TestPmd::start_with("client", &path.0, true);
    if let Err(e) = server.wait_connected(Duration::from_secs(20)) {
        pmd.assert_alive();
        panic!("testpmd did not connect: {e}");
    }
    assert!(!path.0.exists());
    loop_through_testpmd(&mut server, &mut pmd, 2_000, 256);
}

// ---------------------------------------------------------------------------------------
// 3. Hostile peer

const MSG: usize = 128;
const T_HELLO: u16 = 2;
const T_INIT: u16 = 3;
const T_ADD_REGION: u16 = 4;
const T_ADD_RING: u16 = 5;
const T_CONNECT: u16 = 6;
const T_CONNECTED: u16 = 7;
const T_DISCONNECT: u16 = 8;

/// A raw SEQPACKET client speaking the memif wire format by hand.
struct RawPeer {
    fd: OwnedFd,
}

fn cvt(r: i32) -> i32 {
    assert!(
        r >= 0,
        "syscall failed: {}",
        std::io::Error::last_os_error()
    );
    r
}

impl RawPeer {
    fn connect(path: &Path) -> RawPeer {
        // SAFETY: plain socket(2); the result is checked.
        let fd = cvt(unsafe {
            libc::socket(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        });
        // SAFETY: `fd` is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_un is plain data; all-zero is valid.
        let mut sun: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        sun.sun_family = libc::AF_UNIX as u16;
        let b = path.as_os_str().as_encoded_bytes();
        for (d, s) in sun.sun_path.iter_mut().zip(b) {
            *d = *s as libc::c_char;
        }
        // SAFETY: `sun` is a live sockaddr_un of the size passed.
        cvt(unsafe {
            libc::connect(
                fd.as_raw_fd(),
                &sun as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_un>() as u32,
            )
        });
        RawPeer { fd }
    }

    fn send(&self, bytes: &[u8], pass: Option<RawFd>) {
        let mut iov = libc::iovec {
            iov_base: bytes.as_ptr() as *mut libc::c_void,
            iov_len: bytes.len(),
        };
        let mut ctl = [0u64; 4];
        // SAFETY: msghdr is plain data; all-zero is valid.
        let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
        mh.msg_iov = &mut iov;
        mh.msg_iovlen = 1;
        if let Some(f) = pass {
            mh.msg_control = ctl.as_mut_ptr() as *mut libc::c_void;
            // SAFETY: size computations and writes inside `ctl` (32 bytes, aligned).
            unsafe {
                mh.msg_controllen = libc::CMSG_SPACE(4) as usize;
                let c = libc::CMSG_FIRSTHDR(&mh);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = libc::CMSG_LEN(4) as usize;
                std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut i32, f);
            }
        }
        // SAFETY: `mh` points at live buffers for the duration of the call.
        let n = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &mh, libc::MSG_NOSIGNAL) };
        assert_eq!(n, bytes.len() as isize, "raw send");
    }

    /// One message, `Err(())` at end of file, `Ok(None)` if nothing is queued.
    fn try_recv(&self) -> Result<Option<Vec<u8>>, ()> {
        let mut b = vec![0u8; 512];
        // SAFETY: `b` is writable for its length.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                b.as_mut_ptr() as *mut libc::c_void,
                b.len(),
                libc::MSG_DONTWAIT,
            )
        };
        match n {
            0 => Err(()),
            n if n > 0 => {
                b.truncate(n as usize);
                Ok(Some(b))
            }
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::WouldBlock {
                    Ok(None)
                } else {
                    Err(())
                }
            }
        }
    }
}

fn msg_type(m: &[u8]) -> u16 {
    u16::from_ne_bytes([m[0], m[1]])
}

fn msg(ty: u16, fields: &[(usize, &[u8])]) -> Vec<u8> {
    let mut b = vec![0u8; MSG];
    b[..2].copy_from_slice(&ty.to_ne_bytes());
    for (off, v) in fields {
        b[2 + off..2 + off + v.len()].copy_from_slice(v);
    }
    b
}

fn init_msg(version: u16, id: u32) -> Vec<u8> {
    msg(
        T_INIT,
        &[
            (0, &version.to_ne_bytes()),
            (2, &id.to_ne_bytes()),
            (31, b"raw"),
        ],
    )
}

fn add_region_msg(index: u16, size: u64) -> Vec<u8> {
    msg(
        T_ADD_REGION,
        &[(0, &index.to_ne_bytes()), (2, &size.to_ne_bytes())],
    )
}

fn add_ring_msg(c2s: bool, region: u16, offset: u32, log2: u8) -> Vec<u8> {
    msg(
        T_ADD_RING,
        &[
            (0, &u16::from(c2s).to_ne_bytes()),
            (2, &0u16.to_ne_bytes()),
            (4, &region.to_ne_bytes()),
            (6, &offset.to_ne_bytes()),
            (10, &[log2]),
        ],
    )
}

/// A sealed memfd of `size` bytes mapped shared (returned with its mapping).
struct Shm {
    fd: OwnedFd,
    ptr: *mut u8,
    len: usize,
}

impl Shm {
    fn new(len: usize, seal: bool) -> Shm {
        // SAFETY: plain system calls with checked results.
        unsafe {
            let fd = cvt(libc::memfd_create(
                c"raw-peer".as_ptr(),
                libc::MFD_ALLOW_SEALING | libc::MFD_CLOEXEC,
            ));
            let fd = OwnedFd::from_raw_fd(fd);
            cvt(libc::ftruncate(fd.as_raw_fd(), len as i64));
            if seal {
                cvt(libc::fcntl(
                    fd.as_raw_fd(),
                    libc::F_ADD_SEALS,
                    libc::F_SEAL_SHRINK,
                ));
            } else {
                // Forbid further sealing, so the server cannot add the seal itself.
                cvt(libc::fcntl(
                    fd.as_raw_fd(),
                    libc::F_ADD_SEALS,
                    libc::F_SEAL_SEAL,
                ));
            }
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            Shm {
                fd,
                ptr: p as *mut u8,
                len,
            }
        }
    }

    fn write<T: Copy>(&self, off: usize, v: T) {
        assert!(off + std::mem::size_of::<T>() <= self.len);
        // SAFETY: in bounds (checked); the server only reads this memory concurrently.
        unsafe { std::ptr::write_volatile(self.ptr.add(off) as *mut T, v) }
    }

    fn read_u16(&self, off: usize) -> u16 {
        assert!(off + 2 <= self.len);
        // SAFETY: in bounds (checked).
        unsafe { std::ptr::read_volatile(self.ptr.add(off) as *const u16) }
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly our mapping.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// Poll the server until the raw peer's connection is closed; returns what the peer
/// received (HELLO first, then ACKs, then the DISCONNECT).
fn drain_until_closed(server: &mut Memif, peer: &RawPeer) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    loop {
        assert!(
            Instant::now() < deadline,
            "server did not close the hostile peer"
        );
        server.poll_control();
        match peer.try_recv() {
            Ok(Some(m)) => got.push(m),
            Ok(None) => std::thread::sleep(Duration::from_micros(200)),
            Err(()) => return got,
        }
    }
}

/// Poll the server until the peer has `n` messages.
fn recv_n(server: &mut Memif, peer: &RawPeer, n: usize) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    while got.len() < n {
        assert!(Instant::now() < deadline, "peer got only {got:?}");
        server.poll_control();
        match peer.try_recv() {
            Ok(Some(m)) => got.push(m),
            Ok(None) => std::thread::sleep(Duration::from_micros(200)),
            Err(()) => panic!("server closed early after {got:?}"),
        }
    }
    got
}

fn disconnect_reason(msgs: &[Vec<u8>]) -> String {
    let last = msgs.last().expect("some message");
    assert_eq!(msg_type(last), T_DISCONNECT, "last message {msgs:?}");
    let s = &last[6..102];
    let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
    String::from_utf8_lossy(&s[..end]).into_owned()
}

/// A good ferrouter client still connects and passes traffic.
fn good_client_works(server: &mut Memif, path: &Path) {
    let mut client = Memif::open(9, opts(path, MemifRole::Client, 8, "good")).unwrap();
    connect_pair(server, &mut client);
    let mut mem = Arena::new(256);
    exchange(&mut client, server, &mut mem, 300, 100);
    drop(client);
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.is_connected() {
        assert!(Instant::now() < deadline);
        server.poll_control();
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// xorshift64*: deterministic garbage.
fn garbage(state: &mut u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|_| {
            *state ^= *state >> 12;
            *state ^= *state << 25;
            *state ^= *state >> 27;
            (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

#[test]
fn hostile_control_messages_are_refused_and_the_server_keeps_serving() {
    let path = TmpPath::new("hostile");
    let mut server = Memif::open(0, opts(&path.0, MemifRole::Server, 8, "srv")).unwrap();
    let mut errors = 0;
    let mut rng = 0x1234_5678_9abc_def0u64;

    // Each case: what to send after HELLO, and the reason the server must give.
    type Case = (&'static str, Box<dyn Fn(&RawPeer)>, &'static str);
    let good_init = || init_msg(0x0200, 0);
    let cases: Vec<Case> = vec![
        (
            "short garbage",
            Box::new(move |p: &RawPeer| {
                let mut s = 1u64;
                p.send(&garbage(&mut s, 57), None)
            }),
            "Invalid message size",
        ),
        (
            "oversized",
            Box::new(|p: &RawPeer| p.send(&[3u8; 300], None)),
            "Invalid message size",
        ),
        (
            "unknown type",
            Box::new(|p: &RawPeer| p.send(&msg(0x7777, &[]), None)),
            "Unknown message type",
        ),
        (
            "type 0",
            Box::new(|p: &RawPeer| p.send(&msg(0, &[]), None)),
            "Unknown message type",
        ),
        (
            "bad version",
            Box::new(|p: &RawPeer| p.send(&init_msg(0x0100, 0), None)),
            "Incompatible memif version",
        ),
        (
            "wrong id",
            Box::new(|p: &RawPeer| p.send(&init_msg(0x0200, 42), None)),
            "ID not found",
        ),
        (
            "ip mode",
            Box::new(|p: &RawPeer| {
                let mut m = init_msg(0x0200, 0);
                m[8] = 1;
                p.send(&m, None)
            }),
            "Only ethernet mode supported",
        ),
        (
            "region before init",
            Box::new(|p: &RawPeer| p.send(&add_region_msg(0, 4096), None)),
            "Unexpected message",
        ),
        (
            "HELLO to a server",
            Box::new(|p: &RawPeer| p.send(&msg(T_HELLO, &[]), None)),
            "Unexpected message",
        ),
        (
            "region without fd",
            Box::new(move |p: &RawPeer| {
                p.send(&good_init(), None);
                p.send(&add_region_msg(0, 4096), None)
            }),
            "Missing region fd",
        ),
        (
            "region bigger than its file",
            Box::new(move |p: &RawPeer| {
                let shm = Shm::new(4096, true);
                p.send(&good_init(), None);
                p.send(&add_region_msg(0, 1 << 20), Some(shm.fd.as_raw_fd()))
            }),
            "smaller than the announced",
        ),
        (
            "region not sealed",
            Box::new(move |p: &RawPeer| {
                let shm = Shm::new(4096, false);
                p.send(&good_init(), None);
                p.send(&add_region_msg(0, 4096), Some(shm.fd.as_raw_fd()))
            }),
            "shrunk",
        ),
        (
            "region fd is a socket",
            Box::new(move |p: &RawPeer| {
                p.send(&good_init(), None);
                p.send(&add_region_msg(0, 4096), Some(p.fd.as_raw_fd()))
            }),
            "not a regular",
        ),
        (
            "region index gap",
            Box::new(move |p: &RawPeer| {
                let shm = Shm::new(4096, true);
                p.send(&good_init(), None);
                p.send(&add_region_msg(3, 4096), Some(shm.fd.as_raw_fd()))
            }),
            "Invalid region index",
        ),
        (
            "region size zero",
            Box::new(move |p: &RawPeer| {
                let shm = Shm::new(4096, true);
                p.send(&good_init(), None);
                p.send(&add_region_msg(0, 0), Some(shm.fd.as_raw_fd()))
            }),
            "Invalid region size",
        ),
        (
            "ring outside region",
            Box::new(move |p: &RawPeer| {
                let shm = Shm::new(8192, true);
                let efd = Shm::new(4096, true);
                p.send(&good_init(), None);
                p.send(&add_region_msg(0, 8192), Some(shm.fd.as_raw_fd()));
                p.send(
                    &add_ring_msg(true, 0, 8192 - 256, 4),
                    Some(efd.fd.as_raw_fd()),
                )
            }),
            "Ring does not fit",
        ),
        (
            "ring in missing region",
            Box::new(move |p: &RawPeer| {
                let shm = Shm::new(8192, true);
                let efd = Shm::new(4096, true);
                p.send(&good_init(), None);
                p.send(&add_region_msg(0, 8192), Some(shm.fd.as_raw_fd()));
                p.send(&add_ring_msg(true, 1, 0, 4), Some(efd.fd.as_raw_fd()))
            }),
            "Invalid region index",
        ),
        (
            "ring too big",
            Box::new(move |p: &RawPeer| {
                let shm = Shm::new(8192, true);
                let efd = Shm::new(4096, true);
                p.send(&good_init(), None);
                p.send(&add_region_msg(0, 8192), Some(shm.fd.as_raw_fd()));
                p.send(&add_ring_msg(true, 0, 0, 20), Some(efd.fd.as_raw_fd()))
            }),
            "Ring size too big",
        ),
        (
            "ring without fd",
            Box::new(move |p: &RawPeer| {
                let shm = Shm::new(8192, true);
                p.send(&good_init(), None);
                p.send(&add_region_msg(0, 8192), Some(shm.fd.as_raw_fd()));
                p.send(&add_ring_msg(true, 0, 0, 4), None)
            }),
            "Missing interrupt fd",
        ),
        (
            "connect without rings",
            Box::new(move |p: &RawPeer| {
                p.send(&good_init(), None);
                p.send(&msg(T_CONNECT, &[]), None)
            }),
            "Missing rings",
        ),
        (
            "rings without cookie",
            Box::new(move |p: &RawPeer| {
                let shm = Shm::new(8192, true);
                let efd = Shm::new(4096, true);
                p.send(&good_init(), None);
                p.send(&add_region_msg(0, 8192), Some(shm.fd.as_raw_fd()));
                p.send(&add_ring_msg(true, 0, 0, 4), Some(efd.fd.as_raw_fd()));
                p.send(&add_ring_msg(false, 0, 1024, 4), Some(efd.fd.as_raw_fd()));
                p.send(&msg(T_CONNECT, &[]), None)
            }),
            "Wrong ring cookie",
        ),
    ];
    for (name, send, why) in cases {
        let peer = RawPeer::connect(&path.0);
        let hello = recv_n(&mut server, &peer, 1);
        assert_eq!(msg_type(&hello[0]), T_HELLO, "{name}");
        send(&peer);
        let got = drain_until_closed(&mut server, &peer);
        let reason = disconnect_reason(&got);
        assert!(
            reason.contains(why),
            "{name}: expected {why:?}, got {reason:?}"
        );
        errors += 1;
        assert_eq!(server.stats().control_errors, errors, "{name}");
        assert!(!server.is_connected(), "{name}");
    }
    // Random 128-byte messages (unknown types or nonsense in the wrong state).
    for i in 0..20 {
        let peer = RawPeer::connect(&path.0);
        recv_n(&mut server, &peer, 1);
        let mut m = garbage(&mut rng, MSG);
        if i % 2 == 0 {
            m[0] = T_INIT as u8; // plausible type, garbage fields
            m[1] = 0;
        }
        peer.send(&m, None);
        let got = drain_until_closed(&mut server, &peer);
        assert_eq!(msg_type(got.last().unwrap()), T_DISCONNECT);
        errors += 1;
        assert_eq!(server.stats().control_errors, errors);
    }
    // A peer that connects and says nothing is dropped after the handshake timeout.
    let peer = RawPeer::connect(&path.0);
    let got = drain_until_closed(&mut server, &peer);
    assert!(disconnect_reason(&got).contains("timeout"));
    errors += 1;
    assert_eq!(server.stats().control_errors, errors);
    assert_eq!(server.stats().connects, 0);

    good_client_works(&mut server, &path.0);
    assert_eq!(server.stats().connects, 1);
    assert_eq!(server.stats().control_errors, errors);
}

/// A raw client completes the handshake with rings of its own making, then misbehaves
/// on the rings: bad descriptors are counted and skipped, an impossible index disconnects.
#[test]
fn hostile_ring_contents_are_contained() {
    let path = TmpPath::new("hostring");
    let mut server = Memif::open(0, opts(&path.0, MemifRole::Server, 8, "srv")).unwrap();
    let mut mem = Arena::new(256);

    // Region: C2S ring (16 slots) at 0, S2C ring at 1024, buffers from 4096.
    let log2 = 4u8;
    let shm = Shm::new(4096 + 32 * 2048, true);
    let efd0 = Shm::new(4096, true);
    let efd1 = Shm::new(4096, true);
    for base in [0usize, 1024] {
        shm.write::<u32>(base, 0x3E31F20);
    }
    let peer = RawPeer::connect(&path.0);
    recv_n(&mut server, &peer, 1);
    peer.send(&init_msg(0x0200, 0), None);
    peer.send(&add_region_msg(0, shm.len as u64), Some(shm.fd.as_raw_fd()));
    peer.send(&add_ring_msg(true, 0, 0, log2), Some(efd0.fd.as_raw_fd()));
    peer.send(
        &add_ring_msg(false, 0, 1024, log2),
        Some(efd1.fd.as_raw_fd()),
    );
    peer.send(&msg(T_CONNECT, &[(0, b"raw")]), None);
    let got = recv_n(&mut server, &peer, 5);
    assert_eq!(msg_type(&got[4]), T_CONNECTED, "{got:?}");
    assert!(server.is_connected());
    // The server asks us not to interrupt it on the ring it polls.
    assert_eq!(shm.read_u16(4), 1);

    // C2S descriptors: good, outside the region, good.
    let desc = |slot: usize, region: u16, len: u32, off: u32| {
        let d = 128 + 16 * slot;
        shm.write::<u16>(d, 0);
        shm.write::<u16>(d + 2, region);
        shm.write::<u32>(d + 4, len);
        shm.write::<u32>(d + 8, off);
    };
    let f0 = frame(0xe, 0);
    for (i, b) in f0.iter().enumerate() {
        shm.write::<u8>(4096 + i, *b);
    }
    desc(0, 0, f0.len() as u32, 4096);
    desc(1, 0, 100, shm.len as u32 - 50);
    desc(2, 7, 100, 0);
    desc(3, 0, f0.len() as u32, 4096);
    shm.write::<u16>(6, 4); // head
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while out.len() < 2 {
        assert!(Instant::now() < deadline);
        rx(&mut server, &mut mem, &mut out);
    }
    assert_eq!(check(0xe, &out[0]), Ok(0));
    assert_eq!(check(0xe, &out[1]), Ok(0));
    assert_eq!(server.stats().bad_descriptors, 2);
    assert_eq!(shm.read_u16(64), 4, "server consumed every slot (tail)");
    assert!(server.is_connected());

    // S2C: offer one buffer pointing outside the region; the server must not write it.
    let d = 1024 + 128;
    shm.write::<u16>(d, 0);
    shm.write::<u16>(d + 2, 0);
    shm.write::<u32>(d + 4, 2048);
    shm.write::<u32>(d + 8, shm.len as u32 - 8);
    shm.write::<u16>(1024 + 6, 1); // S2C head: one buffer offered
    assert_eq!(tx(&mut server, &mut mem, 0xe, 1, 2), 0);
    assert_eq!(server.stats().bad_descriptors, 3);
    assert_eq!(shm.read_u16(1024 + 64), 0, "nothing produced");
    // That was a fault: the server disconnects with a reason and listens again.
    let got = drain_until_closed(&mut server, &peer);
    assert!(disconnect_reason(&got).contains("outside"), "{got:?}");
    assert_eq!(server.stats().ring_errors, 0);
    assert_eq!(server.stats().disconnects, 1);
    assert_eq!(mem.free_count(), 256);

    // A second raw peer moves the C2S head beyond the ring: fault, disconnect.
    let shm2 = Shm::new(4096 + 32 * 2048, true);
    for base in [0usize, 1024] {
        shm2.write::<u32>(base, 0x3E31F20);
    }
    let peer = RawPeer::connect(&path.0);
    recv_n(&mut server, &peer, 1);
    peer.send(&init_msg(0x0200, 0), None);
    peer.send(
        &add_region_msg(0, shm2.len as u64),
        Some(shm2.fd.as_raw_fd()),
    );
    peer.send(&add_ring_msg(true, 0, 0, log2), Some(efd0.fd.as_raw_fd()));
    peer.send(
        &add_ring_msg(false, 0, 1024, log2),
        Some(efd1.fd.as_raw_fd()),
    );
    peer.send(&msg(T_CONNECT, &[]), None);
    recv_n(&mut server, &peer, 5);
    assert!(server.is_connected());
    shm2.write::<u16>(6, 1000);
    let mut v = Vector::default();
    assert_eq!(server.rx_burst(&mut mem, &mut v), 0);
    assert_eq!(server.stats().ring_errors, 1);
    let got = drain_until_closed(&mut server, &peer);
    assert!(disconnect_reason(&got).contains("head"), "{got:?}");
    assert_eq!(server.stats().disconnects, 2);

    good_client_works(&mut server, &path.0);
}
