//! TCP tracking: netfilter's state table (`tcp_conntracks` in nf_conntrack_proto_tcp.c,
//! rewritten here as data) and window tracking after Guido van Rooij's "Real Stateful TCP
//! Packet Filtering in IP Filter" (2000), as netfilter's `tcp_in_window` does it.
//!
//! Per direction the entry keeps what its sender has shown (`Peer`): `end`, the highest
//! sequence number sent plus the segment's length; `maxend`, the highest sequence number the
//! other side's acknowledgments and windows allow it to send; `maxwin`, its largest window
//! (scaled); `maxack`, its highest acknowledgment. A segment is in the window when
//!
//! 1. `seq <= sender.maxend` (it does not start beyond what the receiver allowed),
//! 2. `end >= sender.end - receiver.maxwin` (it is not older than a window back),
//! 3. `ack <= receiver.end` (it does not acknowledge data never sent),
//! 4. `ack >= receiver.end - max(sender.maxwin, 66000)` (nor data acknowledged long ago);
//!
//! and a RST must also start at or after what the other side has acknowledged
//! (`seq >= receiver.maxack`): a blind reset has to guess a sequence number inside one
//! window, as RFC 5961 §3 asks of end hosts. A segment out of the window is `Invalid`: it
//! is counted and changes nothing, neither state nor window nor timeout.

use super::table::{Entry, Peer};
use super::FlowState;

/// TCP header flags (the wire crate's).
pub use wire::tcp::flags;

/// What the tracker needs of a TCP segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segment {
    /// Header flags ([`flags`]).
    pub flags: u8,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number (read only with ACK set).
    pub ack: u32,
    /// Window field, unscaled, as on the wire.
    pub window: u16,
    /// The window-scale option's shift, on SYN segments that carry it.
    pub wscale: Option<u8>,
    /// Payload bytes (the IP payload less the TCP header).
    pub payload_len: u32,
}

impl Segment {
    /// Whether the segment may open a flow: SYN without ACK, RST or FIN.
    pub fn is_syn_only(&self) -> bool {
        self.flags & (flags::SYN | flags::ACK | flags::RST | flags::FIN) == flags::SYN
    }
}

/// How a segment went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The state (maybe unchanged) and window were updated.
    Tracked,
    /// Passed without updating anything (netfilter's `sIG`: a SYN on an established flow,
    /// a retransmitted SYN/ACK).
    Ignored,
    /// The flags are not allowed in this state and direction (netfilter's `sIV`).
    BadFlags,
    /// Outside the window.
    OutOfWindow,
    /// A SYN on a flow in TIME_WAIT or CLOSE: the old flow is over, the SYN opens a new one.
    Reopen,
}

// Columns of the transition table: netfilter's order, sNO first.
const NO: u8 = 0;
const SS: u8 = 1;
const SR: u8 = 2;
const ES: u8 = 3;
const FW: u8 = 4;
const CW: u8 = 5;
const LA: u8 = 6;
const TW: u8 = 7;
const CL: u8 = 8;
const S2: u8 = 9;
const IV: u8 = 10;
const IG: u8 = 11;

/// `TRANSITIONS[dir][flag class][state]`, netfilter's `tcp_conntracks`.
const TRANSITIONS: [[[u8; 10]; 6]; 2] = [
    // Original direction.
    [
        //  sNO sSS sSR sES sFW sCW sLA sTW sCL sS2
        [SS, SS, IG, IG, IG, IG, IG, SS, SS, S2], // syn
        [IV, IV, SR, IV, IV, IV, IV, IV, IV, SR], // syn/ack
        [IV, IV, FW, FW, LA, LA, LA, TW, CL, IV], // fin
        [ES, IV, ES, ES, CW, CW, TW, TW, CL, IV], // ack
        [IV, CL, CL, CL, CL, CL, CL, CL, CL, CL], // rst
        [IV, IV, IV, IV, IV, IV, IV, IV, IV, IV], // none
    ],
    // Reply direction.
    [
        [IV, S2, IV, IV, IV, IV, IV, SS, IV, S2],
        [IV, SR, IG, IG, IG, IG, IG, IG, IG, SR],
        [IV, IV, FW, FW, LA, LA, LA, TW, CL, IV],
        [IV, IG, SR, ES, CW, CW, TW, TW, CL, IG],
        [IV, CL, CL, CL, CL, CL, CL, CL, CL, CL],
        [IV, IV, IV, IV, IV, IV, IV, IV, IV, IV],
    ],
];

fn class(f: u8) -> usize {
    if f & flags::RST != 0 {
        4
    } else if f & flags::SYN != 0 {
        if f & flags::ACK != 0 {
            1
        } else {
            0
        }
    } else if f & flags::FIN != 0 {
        2
    } else if f & flags::ACK != 0 {
        3
    } else {
        5
    }
}

fn column(s: FlowState) -> u8 {
    match s {
        FlowState::SynSent => SS,
        FlowState::SynRecv => SR,
        FlowState::Established => ES,
        FlowState::FinWait => FW,
        FlowState::CloseWait => CW,
        FlowState::LastAck => LA,
        FlowState::TimeWait => TW,
        FlowState::Close => CL,
        FlowState::SynSent2 => S2,
        _ => NO,
    }
}

fn state_of(c: u8) -> Option<FlowState> {
    Some(match c {
        SS => FlowState::SynSent,
        SR => FlowState::SynRecv,
        ES => FlowState::Established,
        FW => FlowState::FinWait,
        CW => FlowState::CloseWait,
        LA => FlowState::LastAck,
        TW => FlowState::TimeWait,
        CL => FlowState::Close,
        S2 => FlowState::SynSent2,
        _ => return None,
    })
}

/// Per-direction flags in [`Entry::pflags`].
pub(crate) const PF_WSCALE: u8 = 0x01;
pub(crate) const PF_MAXACK: u8 = 0x02;
/// The sender has data (or a SYN or FIN) the other side has not acknowledged.
pub(crate) const PF_UNACKED: u8 = 0x04;

/// Largest window shift RFC 7323 allows.
const MAX_WSCALE: u8 = 14;

// Sequence-space comparisons (RFC 793 modular arithmetic).
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}
fn after(a: u32, b: u32) -> bool {
    before(b, a)
}
fn le(a: u32, b: u32) -> bool {
    !after(a, b)
}
fn ge(a: u32, b: u32) -> bool {
    !before(a, b)
}

fn seg_end(s: &Segment) -> u32 {
    s.seq
        .wrapping_add(s.payload_len)
        .wrapping_add((s.flags & flags::SYN != 0) as u32)
        .wrapping_add((s.flags & flags::FIN != 0) as u32)
}

/// Fills a new entry's TCP part from the SYN that opens it (netfilter's `tcp_new`).
pub(crate) fn init(e: &mut Entry, s: &Segment) {
    let end = seg_end(s);
    e.peer = [
        Peer {
            end,
            maxend: end,
            maxwin: (s.window as u32).max(1),
            maxack: 0,
        },
        Peer::default(),
    ];
    e.scale = [0, 0];
    e.pflags = [0, 0];
    if let Some(ws) = s.wscale {
        e.scale[0] = ws.min(MAX_WSCALE);
        e.pflags[0] = PF_WSCALE;
    }
    e.state = FlowState::SynSent as u8;
}

/// Tracks one segment of an existing TCP flow. `dir` is 0 for the original direction, 1
/// for the reply. On [`Outcome::Tracked`] the entry's state and windows are updated (the
/// caller refreshes the timeout); on any other outcome the entry is untouched.
pub(crate) fn track(e: &mut Entry, dir: usize, s: &Segment) -> Outcome {
    let old = column(e.flow_state());
    let new = TRANSITIONS
        .get(dir & 1)
        .and_then(|d| d.get(class(s.flags)))
        .and_then(|c| c.get(old as usize))
        .copied()
        .unwrap_or(IV);
    match new {
        IV => return Outcome::BadFlags,
        IG => return Outcome::Ignored,
        SS if old == TW || old == CL => return Outcome::Reopen,
        _ => {}
    }
    let Some(next) = state_of(new) else {
        return Outcome::BadFlags;
    };
    if !in_window(e, dir & 1, s) {
        return Outcome::OutOfWindow;
    }
    e.state = next as u8;
    Outcome::Tracked
}

/// Whether a tracked segment should shorten the flow's timeout to the unacknowledged-data
/// one (netfilter's `timeout_unacknowledged`): a plain ACK while either side still waits for
/// an acknowledgment, as when a peer has vanished with data in flight.
pub(crate) fn waits_for_ack(e: &Entry, s: &Segment) -> bool {
    class(s.flags) == 3 && (e.pflags[0] | e.pflags[1]) & PF_UNACKED != 0
}

/// netfilter's `tcp_in_window`, without SACK blocks: checks the segment against the
/// windows and, when it is in them, widens them. Leaves the entry as it was when the segment
/// is out of the window.
fn in_window(e: &mut Entry, dir: usize, s: &Segment) -> bool {
    let (si, ri) = (dir & 1, (dir & 1) ^ 1);
    let mut peers = e.peer;
    let mut scale = e.scale;
    let mut pflags = e.pflags;
    let syn = s.flags & flags::SYN != 0;
    let ack_set = s.flags & flags::ACK != 0;
    let rst = s.flags & flags::RST != 0;
    let mut seq = s.seq;
    let mut end = seg_end(s);
    let win = s.window as u32;
    let state = e.flow_state();

    let [mut snd, mut rcv] = [peers[si], peers[ri]];
    if snd.maxwin == 0 {
        // The first segment from this side.
        if syn {
            snd.end = end;
            snd.maxend = end;
            snd.maxwin = win.max(1);
            if let Some(ws) = s.wscale {
                scale[si] = ws.min(MAX_WSCALE);
                pflags[si] |= PF_WSCALE;
            }
            // RFC 7323: windows are scaled only when both sides sent the option.
            if pflags[si] & pflags[ri] & PF_WSCALE == 0 {
                scale = [0, 0];
            }
        } else {
            // A reply without SYN (a RST from a closed port): take it as it comes.
            snd.end = end;
            snd.maxwin = (win << scale[si]).max(1);
            snd.maxend = end.wrapping_add(snd.maxwin);
            if rcv.maxwin == 0 {
                rcv.end = s.ack;
                rcv.maxend = s.ack;
            }
        }
    } else if syn
        && ((state == FlowState::SynSent && si == 0) || (state == FlowState::SynRecv && si == 1))
        && after(end, snd.end)
    {
        // A SYN (or SYN/ACK) sent again with a new initial sequence number.
        snd.end = end;
        snd.maxend = end;
        snd.maxwin = win.max(1);
        if let Some(ws) = s.wscale {
            scale[si] = ws.min(MAX_WSCALE);
            pflags[si] |= PF_WSCALE;
        }
    }

    let mut ack = s.ack;
    if !ack_set || (rst && ack == 0) {
        // No acknowledgment (or a broken stack's RST+ACK with ack 0): acknowledges all.
        ack = rcv.end;
    }
    if seq == end && (!rst || (seq == 0 && state == FlowState::SynSent)) {
        // An empty segment is placed at the sender's end.
        seq = snd.end;
        end = snd.end;
    }
    let maxack_window = snd.maxwin.max(66_000);
    let mut ok = le(seq, snd.maxend)
        && ge(end, snd.end.wrapping_sub(rcv.maxwin))
        && le(ack, rcv.end)
        && ge(ack, rcv.end.wrapping_sub(maxack_window));
    if ok && rst && pflags[ri] & PF_MAXACK != 0 && before(seq, rcv.maxack) {
        ok = false;
    }
    if !ok {
        return false;
    }

    let w = if syn { win } else { win << scale[si] };
    if snd.maxwin < w {
        snd.maxwin = w;
    }
    if after(end, snd.end) {
        snd.end = end;
        pflags[si] |= PF_UNACKED;
    }
    if ack_set && (pflags[si] & PF_MAXACK == 0 || after(ack, snd.maxack)) {
        snd.maxack = ack;
        pflags[si] |= PF_MAXACK;
    }
    if rcv.maxwin != 0 && after(end, snd.maxend) {
        rcv.maxwin = rcv.maxwin.wrapping_add(end.wrapping_sub(snd.maxend));
    }
    if ack == rcv.end {
        pflags[ri] &= !PF_UNACKED;
    }
    let edge = ack.wrapping_add(w);
    if after(edge, rcv.maxend.wrapping_sub(1)) {
        rcv.maxend = if w == 0 { edge.wrapping_add(1) } else { edge };
    }

    peers[si] = snd;
    peers[ri] = rcv;
    e.peer = peers;
    e.scale = scale;
    e.pflags = pflags;
    true
}
