//! `ferrouter capture PORT [--direction rx|tx|both] [--count N] -w FILE.pcap`: the control
//! side of packet capture. Arms every worker's capturer on one port, drains their queues
//! while the capture runs, and writes the first N frames (by time) as pcap.

use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dataplane::capture::{CaptureArm, CaptureHandle, Direction};
use serde::Serialize;

use crate::trace::parse_port;

/// Default bytes kept per frame: the whole frame.
pub const DEFAULT_SNAPLEN: u16 = dataplane::FRAME_SIZE as u16;

/// Parse `rx`, `tx` or `both`.
pub fn parse_direction(s: &str) -> Result<Direction, String> {
    match s {
        "rx" => Ok(Direction::Rx),
        "tx" => Ok(Direction::Tx),
        "both" => Ok(Direction::Both),
        o => Err(format!("bad direction `{o}` (expected rx, tx or both)")),
    }
}

/// One captured frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Unix time, ns.
    pub ts_ns: u64,
    /// Length on the wire.
    pub orig_len: u32,
    /// Bytes kept.
    pub data: Vec<u8>,
}

/// Classic pcap (nanosecond timestamps, Ethernet link type), by the `pcap-file` crate.
pub fn pcap(frames: &[Frame], snaplen: u32) -> Result<Vec<u8>, String> {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let header = PcapHeader {
        snaplen,
        datalink: pcap_file::DataLink::ETHERNET,
        ts_resolution: pcap_file::TsResolution::NanoSecond,
        endianness: pcap_file::Endianness::Little,
        ..PcapHeader::default()
    };
    let bytes = 24 + frames.iter().map(|f| 16 + f.data.len()).sum::<usize>();
    let mut w = PcapWriter::with_header(Vec::with_capacity(bytes), header)
        .map_err(|e| format!("writing pcap: {e}"))?;
    for f in frames {
        let ts = Duration::from_nanos(f.ts_ns);
        w.write_packet(&PcapPacket::new(ts, f.orig_len, &f.data))
            .map_err(|e| format!("writing pcap: {e}"))?;
    }
    Ok(w.into_writer())
}

/// Frames in a pcap file, or why it is not one.
pub fn count_frames(pcap: &[u8]) -> Result<usize, String> {
    let mut r = pcap_file::pcap::PcapReader::new(pcap).map_err(|e| format!("not pcap: {e}"))?;
    let mut n = 0;
    while let Some(p) = r.next_packet() {
        p.map_err(|e| format!("pcap record {n}: {e}"))?;
        n += 1;
    }
    Ok(n)
}

/// Where a capture stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CaptureStatus {
    /// Session id.
    pub id: u32,
    /// Port number.
    pub port: u16,
    /// Frames wanted.
    pub count: u32,
    /// Frames collected so far (may exceed `count` by what workers had in flight; the
    /// pcap is cut to `count`).
    pub captured: usize,
    /// Frames the workers could not queue (queue full) since the capture started.
    pub dropped: u64,
    /// `count` frames are in.
    pub done: bool,
}

struct Session {
    id: u32,
    port: u16,
    count: u32,
    snaplen: u16,
    frames: Vec<Frame>,
    dropped_base: u64,
}

struct Inner {
    workers: Vec<CaptureHandle>,
    session: Option<Session>,
    next_id: u32,
}

/// Why a capture could not start.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    /// Another capture is running (HTTP 409).
    #[error("{0}")]
    Busy(String),
    /// The request cannot be met: an unknown port, a count of 0 (HTTP 422).
    #[error("{0}")]
    Invalid(String),
}

/// The capture service the API and CLI call. One capture at a time.
pub struct CaptureService {
    ports: Vec<String>,
    /// Interfaces (by index into `ports`) a capture cannot run on: VLAN sub-interfaces.
    refused: Vec<usize>,
    inner: Mutex<Inner>,
}

impl CaptureService {
    /// A service over every worker's capturer handle; `ports` are the fast path's interface
    /// names by index (ports, VLAN sub-interfaces, tunnels), `refused` those a capture
    /// cannot run on (VLAN sub-interfaces: capture on their parent).
    pub fn new(
        workers: Vec<CaptureHandle>,
        ports: Vec<String>,
        refused: Vec<usize>,
    ) -> CaptureService {
        CaptureService {
            ports,
            refused,
            inner: Mutex::new(Inner {
                workers,
                session: None,
                next_id: 1,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Start capturing `count` frames on `port` (number or name) in direction `dir`,
    /// keeping `snaplen` bytes of each (default: whole frames).
    pub fn start(
        &self,
        port: &str,
        dir: Direction,
        count: u32,
        snaplen: Option<u16>,
    ) -> Result<u32, StartError> {
        let port = parse_port(&self.ports, port).map_err(StartError::Invalid)?;
        if self.refused.contains(&(port as usize)) {
            return Err(StartError::Invalid(format!(
                "{} is a VLAN sub-interface: capture on its parent port (the frames keep their tags)",
                self.ports[port as usize]
            )));
        }
        if count == 0 {
            return Err(StartError::Invalid(
                "capture count must be at least 1".into(),
            ));
        }
        let snaplen = snaplen.unwrap_or(DEFAULT_SNAPLEN).clamp(1, DEFAULT_SNAPLEN);
        let mut g = self.lock();
        if let Some(s) = &g.session {
            return Err(StartError::Busy(format!(
                "capture {} already running on port {}; stop it first",
                s.id, s.port
            )));
        }
        let id = g.next_id;
        g.next_id = g.next_id.wrapping_add(1).max(1);
        let dropped_base = dropped(&g.workers);
        for (i, w) in g.workers.iter_mut().enumerate() {
            w.arm(CaptureArm {
                session: id,
                port,
                dir,
                count,
                snaplen,
            })
            .map_err(|e| StartError::Invalid(format!("worker {i}: {e}")))?;
        }
        g.session = Some(Session {
            id,
            port,
            count,
            snaplen,
            frames: Vec::new(),
            dropped_base,
        });
        Ok(id)
    }

    /// The running capture, if any.
    pub fn status(&self) -> Option<CaptureStatus> {
        let mut g = self.lock();
        collect(&mut g);
        let d = dropped(&g.workers);
        g.session.as_ref().map(|s| CaptureStatus {
            id: s.id,
            port: s.port,
            count: s.count,
            captured: s.frames.len(),
            dropped: d - s.dropped_base,
            done: s.frames.len() >= s.count as usize,
        })
    }

    /// Move captured frames from the workers' queues (the control loop calls this).
    pub fn drain(&self) {
        collect(&mut self.lock());
    }

    /// Stop the capture now and return its pcap (at most `count` frames, in time order).
    pub fn stop(&self) -> Result<Vec<u8>, String> {
        let mut g = self.lock();
        for w in g.workers.iter_mut() {
            // A full request queue means a stop is already pending or the worker is stuck.
            let _ = w.arm(CaptureArm {
                session: 0,
                port: 0,
                dir: Direction::Both,
                count: 0,
                snaplen: 0,
            });
        }
        collect(&mut g);
        let mut s = g.session.take().ok_or("no capture running")?;
        s.frames.sort_by_key(|f| f.ts_ns);
        s.frames.truncate(s.count as usize);
        pcap(&s.frames, s.snaplen as u32)
    }

    /// Wait until `count` frames are in or `timeout` passes, then [`Self::stop`].
    pub fn finish(&self, timeout: Duration) -> Result<Vec<u8>, String> {
        let t0 = Instant::now();
        loop {
            match self.status() {
                None => return Err("no capture running".into()),
                Some(s) if s.done => break,
                Some(_) if t0.elapsed() >= timeout => break,
                Some(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        self.stop()
    }
}

fn dropped(workers: &[CaptureHandle]) -> u64 {
    workers
        .iter()
        .map(|w| w.shared.dropped.load(Ordering::Relaxed))
        .sum()
}

fn collect(g: &mut Inner) {
    let Inner {
        workers, session, ..
    } = g;
    for w in workers.iter_mut() {
        while let Some(r) = w.pop() {
            if let Some(s) = session.as_mut() {
                // Frames of an earlier session still in flight are dropped here.
                if r.session == s.id && s.frames.len() < s.count as usize {
                    s.frames.push(Frame {
                        ts_ns: r.ts_ns,
                        orig_len: r.orig_len as u32,
                        data: r.bytes().to_vec(),
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcap_layout() {
        let f = Frame {
            ts_ns: 1_500_000_001,
            orig_len: 60,
            data: vec![0xab; 20],
        };
        let b = pcap(&[f], 2048).unwrap();
        assert_eq!(count_frames(&b), Ok(1));
        assert_eq!(b.len(), 24 + 16 + 20);
        assert_eq!(&b[0..4], &[0x4d, 0x3c, 0xb2, 0xa1]);
        assert_eq!(u32::from_le_bytes(b[24..28].try_into().unwrap()), 1);
        assert_eq!(
            u32::from_le_bytes(b[28..32].try_into().unwrap()),
            500_000_001
        );
        assert_eq!(u32::from_le_bytes(b[32..36].try_into().unwrap()), 20);
        assert_eq!(u32::from_le_bytes(b[36..40].try_into().unwrap()), 60);
    }

    #[test]
    fn one_capture_at_a_time_with_clear_errors() {
        let (h, _c) = dataplane::capture::channel(4);
        let svc = CaptureService::new(vec![h], vec!["p0".into()], Vec::new());
        assert!(matches!(
            svc.start("p7", Direction::Rx, 1, None),
            Err(StartError::Invalid(m)) if m.contains("p7")
        ));
        assert!(svc.start("p0", Direction::Rx, 0, None).is_err());
        let id = svc.start("p0", Direction::Rx, 1, None).unwrap();
        assert!(matches!(
            svc.start("0", Direction::Rx, 1, None),
            Err(StartError::Busy(m)) if m.contains("already running")
        ));
        assert_eq!(svc.status().unwrap().id, id);
        let empty = svc.finish(Duration::from_millis(10)).unwrap();
        assert_eq!(empty.len(), 24);
        assert!(svc.stop().is_err());
        assert_eq!(parse_direction("both"), Ok(Direction::Both));
        assert!(parse_direction("up").unwrap_err().contains("`up`"));
    }
}
