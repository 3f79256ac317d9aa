//! Capture end to end inside one process: worker-side capturers fed with frames, the
//! control-side service drains them, and the pcap it writes is read back by `tshark`.

use std::process::Command;
use std::time::Duration;

use control::capture::{parse_direction, CaptureService};
use dataplane::capture;
use dataplane::Arena;

fn tshark_lengths(pcap: &[u8]) -> Vec<usize> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cap.pcap");
    std::fs::write(&path, pcap).unwrap();
    let out = Command::new("tshark")
        .args(["-r"])
        .arg(&path)
        .args(["-T", "fields", "-e", "frame.len", "-e", "frame.cap_len"])
        .output()
        .expect("tshark not found: apt-get install tshark (scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let mut f = l.split_whitespace().map(|x| x.parse::<usize>().unwrap());
            let (len, cap) = (f.next().unwrap(), f.next().unwrap());
            assert!(cap <= len);
            len
        })
        .collect()
}

#[test]
fn pcap_of_two_workers_is_read_back_by_tshark_with_exactly_count_frames() {
    let (h0, mut c0) = capture::channel(64);
    let (h1, mut c1) = capture::channel(64);
    let svc = CaptureService::new(vec![h0, h1], vec!["p0".into(), "p1".into()], Vec::new());
    svc.start("p1", parse_direction("both").unwrap(), 7, None)
        .unwrap();
    let mut mem = Arena::new(64);
    let frames: Vec<_> = (0..6usize)
        .map(|k| {
            let mut f = vec![0u8; 60 + 10 * k];
            f[12] = 0x08; // IPv4 ethertype; the rest does not matter to pcap
            mem.load(&f, 1).unwrap()
        })
        .collect();
    // Each worker sees 6 frames on the port (rx on one, tx on the other) and
    // 6 on another port that must not show up.
    assert!(c0.armed() && c1.armed());
    c0.rx(0, &mem, &frames);
    c0.rx(1, &mem, &frames);
    c1.tx(1, &mem, &frames);
    svc.drain();
    let st = svc.status().unwrap();
    assert!(st.done && st.captured == 7, "{st:?}");
    let pcap = svc.finish(Duration::from_secs(1)).unwrap();
    let lens = tshark_lengths(&pcap);
    assert_eq!(lens.len(), 7, "exactly the count, though 12 were offered");
    for l in &lens {
        assert!((60..=110).contains(l) && l % 10 == 0, "{lens:?}");
    }

    // Snap length: tshark reports the wire length, the file holds the prefix.
    svc.start("p0", parse_direction("rx").unwrap(), 3, Some(32))
        .unwrap();
    assert!(c0.armed());
    c0.rx(0, &mem, &frames[..3]);
    let pcap = svc.finish(Duration::from_secs(1)).unwrap();
    assert_eq!(tshark_lengths(&pcap), vec![60, 70, 80]);
    assert_eq!(pcap.len(), 24 + 3 * (16 + 32));
}
