//! Classification into traffic classes and DSCP marking.
//!
//! A packet's class is the class of the first classifier rule it matches
//! ([`crate::rules`]), whatever the interface's trust; else it is read from its DSCP on a
//! *trusted* interface (the table maps each of the 64 code points to a class), then, for
//! a code point no class names, from the 802.1p priority of a tagged frame (classes may
//! name PCPs); else it is the interface's default class. On an *untrusted* interface
//! (rules aside) it is the default class, and the DSCP is rewritten (the sender's marking
//! is not believed). A class may mark its
//! packets with a DSCP of its own and may have a policer, whose colour decides whether a
//! packet goes on, is dropped or is re-marked.

use std::sync::Arc;

use crate::policer::{Action, Colour, Policer};
use crate::rules::{RuleCounters, RuleTable};

/// Expedited forwarding (RFC 3246).
pub const EF: u8 = 46;
/// Class selector 0, best effort.
pub const BE: u8 = 0;

/// DSCP code points by name: `ef`, `be`/`default`, `csN` (0-7), `afXY` (X 1-4, Y 1-3),
/// `va` (RFC 5865), or a number 0 to 63.
pub fn dscp_by_name(name: &str) -> Option<u8> {
    let n = name.to_ascii_lowercase();
    match n.as_str() {
        "ef" => return Some(EF),
        "be" | "default" => return Some(BE),
        "va" | "voice-admit" => return Some(44),
        _ => {}
    }
    if let Some(x) = n.strip_prefix("cs") {
        let x: u8 = x.parse().ok()?;
        return (x <= 7).then_some(x << 3);
    }
    if let Some(xy) = n.strip_prefix("af") {
        let b = xy.as_bytes();
        if b.len() != 2 {
            return None;
        }
        let (x, y) = (b[0].wrapping_sub(b'0'), b[1].wrapping_sub(b'0'));
        return ((1..=4).contains(&x) && (1..=3).contains(&y)).then_some(x << 3 | y << 1);
    }
    n.parse::<u8>().ok().filter(|&d| d <= 63)
}

/// A packet's own colour, from its DSCP, for colour-aware policers: the drop precedence
/// of an assured forwarding class (RFC 2597: AFx1 green, AFx2 yellow, AFx3 red); every
/// other code point is green.
#[inline]
pub fn dscp_colour(dscp: u8) -> Colour {
    let x = dscp >> 3;
    let y = (dscp >> 1) & 3;
    if (1..=4).contains(&x) && dscp & 1 == 0 {
        match y {
            2 => return Colour::Yellow,
            3 => return Colour::Red,
            _ => {}
        }
    }
    Colour::Green
}

/// The DSCP of an IPv4 header (its first bytes).
#[inline]
pub fn ip4_dscp(hdr: &[u8]) -> Option<u8> {
    hdr.get(1).map(|tos| tos >> 2)
}

/// Set the DSCP of an IPv4 header, keeping ECN, and update its checksum (RFC 1624).
/// Returns whether it could (a header shorter than 12 bytes is left alone).
#[inline]
pub fn set_ip4_dscp(hdr: &mut [u8], dscp: u8) -> bool {
    let (Some(&tos), Some(&ver)) = (hdr.get(1), hdr.first()) else {
        return false;
    };
    if hdr.len() < 12 {
        return false;
    }
    let new = (dscp & 63) << 2 | (tos & 3);
    // No branch on `new == tos`: the update then leaves a valid header's checksum as it
    // is (its ones' complement sum is never zero), and the input node calls this for
    // every packet of its class, where a branch on the packet's DSCP mispredicts.
    let old_word = u16::from_be_bytes([ver, tos]);
    let new_word = u16::from_be_bytes([ver, new]);
    let ck = u16::from_be_bytes([hdr[10], hdr[11]]);
    // HC' = ~(~HC + ~m + m')
    let mut sum = u32::from(!ck) + u32::from(!old_word) + u32::from(new_word);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    let ck = !(sum as u16);
    hdr[1] = new;
    hdr[10..12].copy_from_slice(&ck.to_be_bytes());
    true
}

/// The DSCP of an IPv6 header.
#[inline]
pub fn ip6_dscp(hdr: &[u8]) -> Option<u8> {
    let (a, b) = (hdr.first()?, hdr.get(1)?);
    Some((a & 0x0f) << 2 | b >> 6)
}

/// Set the DSCP of an IPv6 header, keeping ECN (IPv6 has no header checksum).
#[inline]
pub fn set_ip6_dscp(hdr: &mut [u8], dscp: u8) -> bool {
    let (Some(&a), Some(&b)) = (hdr.first(), hdr.get(1)) else {
        return false;
    };
    let d = dscp & 63;
    hdr[0] = (a & 0xf0) | d >> 2;
    hdr[1] = (b & 0x3f) | (d & 3) << 6;
    true
}

/// The 802.1p priority (PCP) of a VLAN tag's TCI, given its first byte.
#[inline]
pub fn pcp_of(tci0: u8) -> u8 {
    tci0 >> 5
}

/// The PCP of the outer tag of a frame whose Ethernet header starts `frame` and whose L3
/// header is at `l3` (`None`: not tagged).
#[inline]
pub fn frame_pcp(frame: &[u8], l3: usize) -> Option<u8> {
    let tpid = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let tagged = l3 >= 18 && (tpid == 0x8100 || tpid == 0x88a8);
    tagged.then(|| frame.get(14).map(|&b| pcp_of(b)))?
}

/// Set the PCP of every tag of a frame whose Ethernet header starts `frame` and whose L3
/// header is at `l3` (the tags are between them). Returns whether it found a tag.
#[inline]
pub fn set_frame_pcp(frame: &mut [u8], l3: usize, pcp: u8) -> bool {
    let mut at = 12;
    let mut any = false;
    while at + 4 <= l3 {
        let Some(t) = frame.get(at..at + 2) else {
            break;
        };
        let tpid = u16::from_be_bytes([t[0], t[1]]);
        if tpid != 0x8100 && tpid != 0x88a8 {
            break;
        }
        any |= frame
            .get_mut(at + 2..at + 4)
            .is_some_and(|tci| set_pcp(tci, pcp));
        at += 4;
    }
    any
}

/// Set the 802.1p priority (PCP) of a VLAN tag's TCI, given its two bytes.
#[inline]
pub fn set_pcp(tci: &mut [u8], pcp: u8) -> bool {
    match tci.first_mut() {
        Some(b) => {
            *b = (*b & 0x1f) | (pcp & 7) << 5;
            true
        }
        None => false,
    }
}

/// A class as the input side sees it: its marking and its policer.
#[derive(Clone, Debug, Default)]
pub struct InputClass {
    /// The DSCP its packets are marked with (`None`: kept as they came on a trusted
    /// interface, 0 on an untrusted one).
    pub mark: Option<u8>,
    /// Its policer, shared with the other interfaces and workers that use it.
    pub policer: Option<Arc<Policer>>,
}

/// No class in [`InputPolicy::by_pcp`].
pub const NO_CLASS: u8 = 0xff;

/// The input policy of an interface, compiled: how its packets are classified, marked
/// and policed.
#[derive(Clone, Debug)]
pub struct InputPolicy {
    /// The policy's name.
    pub policy: String,
    /// Its number (1 to [`crate::config::MAX_POLICY_NUMBER`]; 0: none), which the packets it
    /// classifies carry with their class to the 802.1p marking on output.
    pub number: u16,
    /// Whether the DSCP (and 802.1p) of arriving packets is believed.
    pub trusted: bool,
    /// Classifier rules, first match first, before anything else (trusted or not).
    pub rules: Option<Arc<RuleTable>>,
    /// What each rule matched on this interface (with `rules`; set by
    /// [`crate::node::QosShared::apply`], which knows the workers).
    pub rule_counts: Option<Arc<RuleCounters>>,
    /// Class by DSCP, for trusted interfaces (an index into `classes`).
    pub by_dscp: [u8; 64],
    /// The DSCPs a class names (one bit each): the others may be classified by PCP.
    pub named: u64,
    /// Class by the PCP of a tagged frame ([`NO_CLASS`]: none), for trusted interfaces,
    /// when no class names its DSCP.
    pub by_pcp: [u8; 8],
    /// The class of packets on an untrusted interface, and of unnamed code points.
    pub default_class: u8,
    /// The classes, by index.
    pub classes: Vec<InputClass>,
    /// A policer for every packet of the interface, after the class's.
    pub policer: Option<Arc<Policer>>,
    /// What [`InputPolicy::plain_table`] gives, set once the policy is complete (by
    /// `QosConfig::compile`; `None`: the input node decides packet by packet).
    pub plain: Option<[u16; 64]>,
}

/// What the input side decided for a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It goes on in this class with this DSCP (which may be the one it came with).
    Pass {
        /// Its class.
        class: u8,
        /// Its DSCP from now on.
        dscp: u8,
    },
    /// A policer dropped it.
    Drop {
        /// Its class.
        class: u8,
        /// The colour it was dropped as.
        colour: Colour,
    },
}

impl InputPolicy {
    /// A policy with one class, trusted or not, that changes nothing.
    pub fn single(trusted: bool) -> InputPolicy {
        InputPolicy {
            policy: String::new(),
            number: 0,
            trusted,
            rules: None,
            rule_counts: None,
            by_dscp: [0; 64],
            named: 0,
            by_pcp: [NO_CLASS; 8],
            default_class: 0,
            classes: vec![InputClass::default()],
            policer: None,
            plain: None,
        }
    }

    /// For a policy without rules, 802.1p classification or policers, whose decision
    /// then depends on the DSCP alone: the class and the DSCP the packet leaves with, for
    /// each DSCP (`class << 8 | dscp`), so that the input node looks a packet up in one
    /// load. `None` for any other policy.
    pub fn plain_table(&self) -> Option<[u16; 64]> {
        if self.rules.is_some()
            || self.by_pcp_used()
            || self.policer.is_some()
            || self.classes.iter().any(|c| c.policer.is_some())
        {
            return None;
        }
        let mut t = [0u16; 64];
        for (d, e) in (0u8..).zip(t.iter_mut()) {
            let Verdict::Pass { class, dscp } = self.decide(0, d, 0) else {
                return None;
            };
            *e = u16::from(class) << 8 | u16::from(dscp);
        }
        Some(t)
    }

    /// The class of a packet of DSCP `dscp`.
    #[inline]
    pub fn class_of(&self, dscp: u8) -> u8 {
        self.class_of_tagged(dscp, None)
    }

    /// Whether a class names PCPs (only then is a frame's tag worth reading).
    #[inline]
    pub fn by_pcp_used(&self) -> bool {
        self.trusted && self.by_pcp != [NO_CLASS; 8]
    }

    /// The class of a packet of DSCP `dscp` in a frame tagged with priority `pcp`
    /// (`None`: untagged), rules aside: by DSCP if a class names it, else by PCP if a
    /// class names that, else the default class; on an untrusted interface, the default.
    #[inline]
    pub fn class_of_tagged(&self, dscp: u8, pcp: Option<u8>) -> u8 {
        if !self.trusted {
            return self.default_class;
        }
        let d = dscp & 63;
        if self.named & (1u64 << d) != 0 {
            return self
                .by_dscp
                .get(d as usize)
                .copied()
                .unwrap_or(self.default_class);
        }
        match pcp.and_then(|p| self.by_pcp.get(p as usize)) {
            Some(&c) if c != NO_CLASS => c,
            _ => self.default_class,
        }
    }

    /// Classify, mark and police a packet of `len` bytes and DSCP `dscp` at `now_ns`.
    #[inline]
    pub fn decide(&self, now_ns: u64, dscp: u8, len: u32) -> Verdict {
        self.decide_in(now_ns, self.class_of(dscp), dscp, len)
    }

    /// Mark and police a packet of class `class` (chosen by a rule, or by
    /// [`InputPolicy::class_of_tagged`]), `len` bytes and DSCP `dscp` at `now_ns`.
    #[inline]
    pub fn decide_in(&self, now_ns: u64, class: u8, dscp: u8, len: u32) -> Verdict {
        let c = self.classes.get(class as usize);
        let mut out = match c.and_then(|c| c.mark) {
            Some(m) => m,
            None if self.trusted => dscp,
            None => BE,
        };
        // Colour-aware policers read the colour the packet arrives with, as marked by a
        // trusted neighbour; an untrusted packet is green.
        let mut pre = if self.trusted {
            dscp_colour(dscp)
        } else {
            Colour::Green
        };
        for p in [
            c.and_then(|c| c.policer.as_deref()),
            self.policer.as_deref(),
        ]
        .into_iter()
        .flatten()
        {
            let (colour, action) = p.police(now_ns, len, pre);
            match action {
                Action::Transmit => {}
                Action::Drop => return Verdict::Drop { class, colour },
                Action::Remark(d) => out = d,
            }
            pre = colour;
        }
        Verdict::Pass { class, dscp: out }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policer::{Kind, PolicerSpec};

    #[test]
    fn dscp_names() {
        assert_eq!(dscp_by_name("EF"), Some(46));
        assert_eq!(dscp_by_name("af41"), Some(34));
        assert_eq!(dscp_by_name("af13"), Some(14));
        assert_eq!(dscp_by_name("cs6"), Some(48));
        assert_eq!(dscp_by_name("be"), Some(0));
        assert_eq!(dscp_by_name("63"), Some(63));
        for bad in ["64", "af51", "af14", "cs8", "afx1", "", "ef1"] {
            assert_eq!(dscp_by_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn af_drop_precedence_is_the_colour() {
        assert_eq!(dscp_colour(dscp_by_name("af11").unwrap()), Colour::Green);
        assert_eq!(dscp_colour(dscp_by_name("af32").unwrap()), Colour::Yellow);
        assert_eq!(dscp_colour(dscp_by_name("af43").unwrap()), Colour::Red);
        assert_eq!(dscp_colour(EF), Colour::Green);
        assert_eq!(dscp_colour(dscp_by_name("cs3").unwrap()), Colour::Green);
    }

    fn ip4_checksum(h: &[u8]) -> u16 {
        let mut s: u32 = h
            .chunks(2)
            .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
            .sum();
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    }

    #[test]
    fn marking_ipv4_keeps_ecn_and_the_checksum_valid() {
        let mut h = [
            0x45, 0x02, 0x00, 0x54, 0x12, 0x34, 0x40, 0x00, 0x40, 0x01, 0, 0, 10, 0, 0, 1, 10, 0,
            1, 2,
        ];
        let ck = ip4_checksum(&h);
        h[10..12].copy_from_slice(&ck.to_be_bytes());
        for d in [EF, 0, 34, 63, 1] {
            assert!(set_ip4_dscp(&mut h, d));
            assert_eq!(ip4_dscp(&h), Some(d));
            assert_eq!(h[1] & 3, 2, "ECN kept");
            assert_eq!(ip4_checksum(&h), 0, "checksum valid after marking {d}");
        }
        assert!(!set_ip4_dscp(&mut h[..8], 1));
    }

    /// Marking a header with the DSCP it has leaves it byte for byte as it was, checksum
    /// included, whatever that checksum is (the update has no branch on "unchanged").
    #[test]
    fn marking_ipv4_with_its_own_dscp_changes_nothing() {
        for id in 0..=u16::MAX {
            let [a, b] = id.to_be_bytes();
            let mut h = [
                0x45, 0xb9, 0x00, 0x54, a, b, 0x40, 0x00, 0x3f, 0x11, 0, 0, 10, 0, 0, 1, 10, 0, 1,
                2,
            ];
            let ck = ip4_checksum(&h);
            h[10..12].copy_from_slice(&ck.to_be_bytes());
            let before = h;
            assert!(set_ip4_dscp(&mut h, EF));
            assert_eq!(h, before, "id {id:#x}");
        }
    }

    #[test]
    fn marking_ipv6_keeps_version_flow_label_and_ecn() {
        let mut h = [0x6a, 0xb1, 0x23, 0x45];
        assert_eq!(ip6_dscp(&h), Some(0xab >> 2));
        set_ip6_dscp(&mut h, EF);
        assert_eq!(ip6_dscp(&h), Some(EF));
        assert_eq!(h[0] >> 4, 6);
        assert_eq!(h[1] & 0x3f, 0x31, "ECN and flow label kept");
        assert_eq!(&h[2..], &[0x23, 0x45]);
        let mut tci = [0x0f, 0xff];
        set_pcp(&mut tci, 5);
        assert_eq!(tci, [0xaf, 0xff]);
    }

    fn policy(trusted: bool) -> InputPolicy {
        let mut p = InputPolicy::single(trusted);
        // class 0 best effort, class 1 EF (marked EF), class 2 AF4 policed.
        p.by_dscp[EF as usize] = 1;
        p.named = 1 << EF;
        for d in [34, 36, 38] {
            p.by_dscp[d] = 2;
            p.named |= 1 << d;
        }
        let spec = PolicerSpec {
            kind: Kind::TrTcm,
            cir_bps: 8_000,
            cbs_bytes: 1_000,
            pir_bps: 16_000,
            ebs_bytes: 2_000,
            colour_aware: true,
            actions: [Action::Transmit, Action::Remark(36), Action::Drop],
        };
        p.classes = vec![
            InputClass::default(),
            InputClass {
                mark: Some(EF),
                policer: None,
            },
            InputClass {
                mark: None,
                policer: Some(Arc::new(Policer::new(spec, 0))),
            },
        ];
        p
    }

    #[test]
    fn trusted_interfaces_classify_by_dscp_and_police_by_class() {
        let p = policy(true);
        assert_eq!(p.decide(0, EF, 100), Verdict::Pass { class: 1, dscp: EF });
        assert_eq!(p.decide(0, 10, 100), Verdict::Pass { class: 0, dscp: 10 });
        // AF41 within CIR stays AF41; beyond it, yellow is re-marked AF42; beyond PIR red
        // is dropped; AF43 arrives red and is dropped whatever the buckets hold.
        assert_eq!(p.decide(0, 34, 1_000), Verdict::Pass { class: 2, dscp: 34 });
        assert_eq!(p.decide(0, 34, 500), Verdict::Pass { class: 2, dscp: 36 });
        assert_eq!(
            p.decide(0, 38, 10),
            Verdict::Drop {
                class: 2,
                colour: Colour::Red
            }
        );
        assert_eq!(
            p.decide(0, 34, 1_000),
            Verdict::Drop {
                class: 2,
                colour: Colour::Red
            }
        );
    }

    #[test]
    fn a_tagged_frames_pcp_classifies_when_no_class_names_its_dscp() {
        let mut p = policy(true);
        p.by_pcp[5] = 1;
        assert!(p.by_pcp_used());
        // DSCP 10 is named by no class: PCP 5 makes it EF (marked EF), PCP 3 or none
        // leaves it in the default class.
        assert_eq!(p.class_of_tagged(10, Some(5)), 1);
        assert_eq!(p.class_of_tagged(10, Some(3)), 0);
        assert_eq!(p.class_of_tagged(10, None), 0);
        // A named DSCP wins over the PCP.
        assert_eq!(p.class_of_tagged(34, Some(5)), 2);
        assert_eq!(
            p.decide_in(0, p.class_of_tagged(10, Some(5)), 10, 100),
            Verdict::Pass { class: 1, dscp: EF }
        );
        // Untrusted: the PCP is no more believed than the DSCP.
        p.trusted = false;
        assert!(!p.by_pcp_used());
        assert_eq!(p.class_of_tagged(10, Some(5)), 0);
    }

    #[test]
    fn pcp_is_read_and_written_in_every_tag() {
        // dst, src, 802.1ad 100 (PCP 3), 802.1Q 300 (PCP 0), IPv4.
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x88, 0xa8, 0x60, 100, 0x81, 0x00, 0x01, 0x2c, 0x08, 0x00]);
        f.extend_from_slice(&[0x45, 0]);
        assert_eq!(frame_pcp(&f, 22), Some(3));
        assert!(set_frame_pcp(&mut f, 22, 5));
        assert_eq!(
            &f[12..22],
            &[0x88, 0xa8, 0xa0, 100, 0x81, 0x00, 0xa1, 0x2c, 0x08, 0x00]
        );
        assert_eq!(frame_pcp(&f, 22), Some(5));
        // Untagged, or too short: nothing read, nothing written.
        let mut u = vec![0u8; 12];
        u.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
        assert_eq!(frame_pcp(&u, 14), None);
        assert!(!set_frame_pcp(&mut u, 14, 5));
        assert_eq!(frame_pcp(&f[..13], 22), None);
        assert!(!set_frame_pcp(&mut f[..15], 22, 1));
    }

    #[test]
    fn untrusted_interfaces_put_everything_in_their_class_and_clear_the_dscp() {
        let mut p = policy(false);
        assert_eq!(p.decide(0, EF, 100), Verdict::Pass { class: 0, dscp: 0 });
        p.default_class = 1;
        assert_eq!(p.decide(0, 10, 100), Verdict::Pass { class: 1, dscp: EF });
    }
}
