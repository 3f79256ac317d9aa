//! What the graph test binaries share.

use dataplane::{Arena, Graph, Output, PacketMemory, Pkt, Vector};

/// Run `frames`, received on port `rx`, through `graph` as one vector; returns (port, frame
/// bytes) of everything sent. Checks conservation: every buffer is either transmitted or
/// released, exactly once, and none leaks.
pub fn run_frames(
    graph: &mut Graph,
    arena: &mut Arena,
    out: &mut Output,
    rx: u16,
    frames: &[Vec<u8>],
) -> Vec<(u16, Vec<u8>)> {
    let mut v = Vector::default();
    for f in frames {
        assert!(v.push(arena.load(f, rx).expect("arena")));
    }
    let n = v.len;
    // Small and big buffers (jumbo frames) together.
    let free = |a: &Arena| a.free_count() + a.big_free_count();
    let free_before = free(arena);
    graph.process(&mut v, arena, out, 1_000_000_000);
    let mut sent = Vec::new();
    for (port, list) in out.tx.iter().enumerate() {
        for p in list {
            sent.push((port as u16, arena.data(p).to_vec()));
        }
    }
    let bufs: Vec<u32> = out
        .tx
        .iter()
        .flatten()
        .map(|p: &Pkt| p.buf)
        .chain(out.free.iter().copied())
        .collect();
    let mut uniq = bufs.clone();
    uniq.sort();
    uniq.dedup();
    assert_eq!(
        uniq.len(),
        bufs.len(),
        "a buffer was released or sent twice"
    );
    for p in out.tx.iter().flatten() {
        arena.free(p.buf);
    }
    for &b in &out.free {
        arena.free(b);
    }
    out.clear();
    assert_eq!(free(arena), free_before + n, "buffers leaked");
    sent
}
