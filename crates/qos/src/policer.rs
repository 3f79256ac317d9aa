//! Three-colour markers: srTCM (RFC 2697), trTCM (RFC 2698) and the trTCM of RFC 4115,
//! colour-blind or colour-aware, with an action per colour.
//!
//! Each is written as its RFC states it, on the buckets of [`crate::bucket`]: a packet of
//! `B` bytes is compared with the buckets' tokens (`Tc(t) - B >= 0`) and, where the RFC says
//! so, takes them. A [`Policer`] is shared by every worker (and by every interface, class
//! or rule it is attached to): its buckets are atomics, so nothing is locked and the
//! decision is the same however the packets are spread over the workers.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::bucket::{cost, Bucket, Clock, MAX_BURST_BYTES, MAX_RATE_BPS};

/// A packet's colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Colour {
    /// Within the committed rate.
    Green = 0,
    /// Beyond it, within the excess or peak rate and burst.
    Yellow = 1,
    /// Beyond both.
    Red = 2,
}

impl Colour {
    /// Every colour, in index order.
    pub const ALL: [Colour; 3] = [Colour::Green, Colour::Yellow, Colour::Red];
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Colour::Green => "green",
            Colour::Yellow => "yellow",
            Colour::Red => "red",
        }
    }
}

/// Which marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Single rate three colour marker (RFC 2697): a committed rate (CIR) filling the
    /// committed bucket (CBS), whose overflow fills the excess bucket (EBS).
    SrTcm,
    /// Two rate three colour marker (RFC 2698): a peak rate (PIR, PBS) and a committed
    /// rate (CIR, CBS); a packet beyond the peak is red and takes nothing.
    TrTcm,
    /// The two rate marker of RFC 4115: a committed rate (CIR, CBS) and an independent
    /// excess rate (EIR, EBS); a packet is yellow when it fits the excess bucket alone.
    Rfc4115,
}

impl Kind {
    /// Its name, as the config writes it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::SrTcm => "srtcm",
            Kind::TrTcm => "trtcm",
            Kind::Rfc4115 => "rfc4115",
        }
    }
}

/// What becomes of a packet of a colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// It goes on unchanged.
    Transmit,
    /// It is dropped.
    Drop,
    /// It goes on with this DSCP.
    Remark(u8),
}

/// A policer's parameters: rates in bit/s, bursts in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicerSpec {
    /// The marker.
    pub kind: Kind,
    /// Committed information rate.
    pub cir_bps: u64,
    /// Committed burst size.
    pub cbs_bytes: u64,
    /// The second rate: unused by srTCM, PIR for trTCM, EIR for RFC 4115.
    pub pir_bps: u64,
    /// The second burst: EBS for srTCM and RFC 4115, PBS for trTCM.
    pub ebs_bytes: u64,
    /// Whether the packets' own colour (from their DSCP) counts.
    pub colour_aware: bool,
    /// The action per colour, by [`Colour`] index.
    pub actions: [Action; 3],
}

/// Why a [`PolicerSpec`] is refused (the config names where it is).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpecError {
    /// A rate of 0 or above the limit.
    Rate(&'static str, u64),
    /// A burst of 0 or above the limit.
    Burst(&'static str, u64),
    /// trTCM with a peak rate below its committed rate.
    PeakBelowCommitted,
    /// A re-mark to a DSCP above 63.
    Dscp(u8),
}

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpecError::Rate(k, v) => {
                write!(f, "{k} = {v} bit/s: must be 1 to {MAX_RATE_BPS} bit/s")
            }
            SpecError::Burst(k, v) => {
                write!(f, "{k} = {v} bytes: must be 1 to {MAX_BURST_BYTES} bytes")
            }
            SpecError::PeakBelowCommitted => write!(f, "pir must be at least cir (RFC 2698)"),
            SpecError::Dscp(d) => write!(f, "re-mark to DSCP {d}: DSCPs are 0 to 63"),
        }
    }
}

impl std::error::Error for SpecError {}

impl PolicerSpec {
    /// Check rates, bursts and re-marks. A burst should hold at least the largest packet
    /// (RFC 2697 §2), which the config checks against the MTU.
    pub fn validate(&self) -> Result<(), SpecError> {
        let rate = |k, v: u64| {
            if v == 0 || v > MAX_RATE_BPS {
                Err(SpecError::Rate(k, v))
            } else {
                Ok(())
            }
        };
        let burst = |k, v: u64| {
            if v == 0 || v > MAX_BURST_BYTES {
                Err(SpecError::Burst(k, v))
            } else {
                Ok(())
            }
        };
        rate("cir", self.cir_bps)?;
        burst("cbs", self.cbs_bytes)?;
        match self.kind {
            Kind::SrTcm => burst("ebs", self.ebs_bytes)?,
            Kind::TrTcm => {
                rate("pir", self.pir_bps)?;
                burst("pbs", self.ebs_bytes)?;
                if self.pir_bps < self.cir_bps {
                    return Err(SpecError::PeakBelowCommitted);
                }
            }
            Kind::Rfc4115 => {
                // An EIR of 0 is allowed by RFC 4115: nothing is ever yellow.
                if self.pir_bps > MAX_RATE_BPS {
                    return Err(SpecError::Rate("eir", self.pir_bps));
                }
                burst("ebs", self.ebs_bytes)?
            }
        }
        for a in self.actions {
            if let Action::Remark(d) = a {
                if d > 63 {
                    return Err(SpecError::Dscp(d));
                }
            }
        }
        Ok(())
    }
}

/// Packets and bytes of one colour.
#[derive(Debug, Default)]
pub struct ColourCount {
    /// Packets.
    pub packets: AtomicU64,
    /// Bytes.
    pub bytes: AtomicU64,
}

/// A policer: its parameters, its buckets and its counters, shared by the workers.
#[derive(Debug)]
pub struct Policer {
    spec: PolicerSpec,
    /// Committed bucket (Tc).
    c: Bucket,
    /// Excess (srTCM, RFC 4115) or peak (trTCM) bucket: Te or Tp.
    e: Bucket,
    clock: Clock,
    counts: [ColourCount; 3],
}

impl Policer {
    /// A policer with full buckets at `now_ns` (the RFCs start them full). The spec should
    /// have passed [`PolicerSpec::validate`]; out-of-range values are clamped.
    pub fn new(spec: PolicerSpec, now_ns: u64) -> Policer {
        Policer {
            spec,
            c: Bucket::full(spec.cbs_bytes),
            e: Bucket::full(spec.ebs_bytes),
            clock: Clock::new(now_ns),
            counts: Default::default(),
        }
    }

    /// Its parameters.
    pub fn spec(&self) -> &PolicerSpec {
        &self.spec
    }

    /// Packets and bytes marked each colour so far, by [`Colour`] index.
    pub fn counts(&self) -> [(u64, u64); 3] {
        self.counts
            .each_ref()
            .map(|c| (c.packets.load(Relaxed), c.bytes.load(Relaxed)))
    }

    /// The tokens of the committed and the second bucket, in bytes (for `show`).
    pub fn tokens_bytes(&self) -> (u64, u64) {
        (self.c.tokens() / cost(1), self.e.tokens() / cost(1))
    }

    fn refill(&self, now_ns: u64) {
        let dt = self.clock.advance(now_ns);
        if dt == 0 {
            return;
        }
        let s = &self.spec;
        let c = dt.saturating_mul(s.cir_bps.min(MAX_RATE_BPS));
        match s.kind {
            // RFC 2697: Tc is incremented while below CBS, else Te while below EBS: the
            // committed bucket's overflow goes to the excess bucket.
            Kind::SrTcm => {
                let over = self.c.fill(c);
                self.e.fill(over);
            }
            // RFC 2698 and 4115: two independent rates.
            Kind::TrTcm | Kind::Rfc4115 => {
                self.c.fill(c);
                self.e.fill(dt.saturating_mul(s.pir_bps.min(MAX_RATE_BPS)));
            }
        }
    }

    /// The colour of a packet of `len` bytes arriving at `now_ns` with colour `pre` (its
    /// own, read from its DSCP; ignored when colour-blind), taking its tokens as the RFC
    /// says. Counted.
    #[inline]
    pub fn colour(&self, now_ns: u64, len: u32, pre: Colour) -> Colour {
        self.refill(now_ns);
        let b = cost(u64::from(len));
        let pre = if self.spec.colour_aware {
            pre
        } else {
            Colour::Green
        };
        let colour = match self.spec.kind {
            // RFC 2697 §3: blind is aware with every packet green.
            Kind::SrTcm => {
                if pre == Colour::Green && self.c.take(b) {
                    Colour::Green
                } else if pre != Colour::Red && self.e.take(b) {
                    Colour::Yellow
                } else {
                    Colour::Red
                }
            }
            // RFC 2698 §3: red when beyond the peak (nothing taken); yellow when beyond
            // the committed rate (Tp taken); green takes both.
            Kind::TrTcm => {
                if pre == Colour::Red || self.e.tokens() < b {
                    Colour::Red
                } else if pre == Colour::Yellow || self.c.tokens() < b {
                    if self.e.take(b) {
                        Colour::Yellow
                    } else {
                        Colour::Red
                    }
                } else if self.e.take(b) {
                    if self.c.take(b) {
                        Colour::Green
                    } else {
                        // Another worker took Tc in between: the packet is yellow, as
                        // it would have been had it come a moment later.
                        Colour::Yellow
                    }
                } else {
                    Colour::Red
                }
            }
            // RFC 4115 §3: green from Tc, else yellow from Te, else red.
            Kind::Rfc4115 => {
                if pre == Colour::Green && self.c.take(b) {
                    Colour::Green
                } else if pre != Colour::Red && self.e.take(b) {
                    Colour::Yellow
                } else {
                    Colour::Red
                }
            }
        };
        let n = &self.counts[colour as usize];
        n.packets.fetch_add(1, Relaxed);
        n.bytes.fetch_add(u64::from(len), Relaxed);
        colour
    }

    /// The colour and what to do with the packet ([`Policer::colour`], then the colour's
    /// action).
    #[inline]
    pub fn police(&self, now_ns: u64, len: u32, pre: Colour) -> (Colour, Action) {
        let c = self.colour(now_ns, len, pre);
        (c, self.spec.actions[c as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use Colour::*;

    const MS: u64 = 1_000_000;

    fn spec(kind: Kind, cir: u64, cbs: u64, pir: u64, ebs: u64, aware: bool) -> PolicerSpec {
        PolicerSpec {
            kind,
            cir_bps: cir,
            cbs_bytes: cbs,
            pir_bps: pir,
            ebs_bytes: ebs,
            colour_aware: aware,
            actions: [Action::Transmit, Action::Remark(0), Action::Drop],
        }
    }

    /// Colours of packets `(time in ms, bytes, own colour)`.
    fn run(p: &Policer, pkts: &[(u64, u32, Colour)]) -> Vec<Colour> {
        pkts.iter()
            .map(|&(t, b, c)| p.colour(t * MS, b, c))
            .collect()
    }

    // RFC 2697 worked through: CIR 8 kbit/s (1 byte per ms), CBS 1000, EBS 500. Both start
    // full. Blind: 1000 green, 500 yellow, then red until tokens come back; refill goes to
    // Tc first and to Te only once Tc is full.
    #[test]
    fn srtcm_colour_blind_follows_rfc_2697() {
        let p = Policer::new(spec(Kind::SrTcm, 8_000, 1_000, 0, 500, false), 0);
        let got = run(
            &p,
            &[
                (0, 600, Green),  // Tc 1000 -> 400
                (0, 600, Green),  // Tc 400 < 600; Te 500 < 600: red
                (0, 400, Red),    // Tc 400 -> 0 (blind: own colour ignored)
                (0, 300, Green),  // Te 500 -> 200: yellow
                (0, 300, Green),  // red
                (200, 200, Red),  // Tc 200 -> 0: green
                (200, 200, Red),  // Te 200 -> 0: yellow
                (200, 1, Green),  // red
                (1500, 1, Green), // 1300 ms: Tc to 1000, Te gets the 300 over: green
            ],
        );
        assert_eq!(
            got,
            [Green, Red, Green, Yellow, Red, Green, Yellow, Red, Green]
        );
        assert_eq!(p.tokens_bytes(), (999, 300));
        assert_eq!(p.counts()[0], (4, 1_201));
    }

    // RFC 2697 §3, colour-aware: a green packet may be green or yellow or red; a yellow one
    // yellow (from Te) or red; a red one is red whatever the buckets hold.
    #[test]
    fn srtcm_colour_aware_never_improves_a_colour() {
        let p = Policer::new(spec(Kind::SrTcm, 8_000, 1_000, 0, 500, true), 0);
        let got = run(
            &p,
            &[
                (0, 100, Red),    // red, nothing taken
                (0, 100, Yellow), // Te 500 -> 400 (Tc untouched)
                (0, 900, Green),  // Tc 1000 -> 100
                (0, 200, Green),  // Te 400 -> 200: yellow
                (0, 100, Green),  // Tc 100 -> 0
                (0, 300, Yellow), // Te 200 < 300: red
            ],
        );
        assert_eq!(got, [Red, Yellow, Green, Yellow, Green, Red]);
        assert_eq!(p.tokens_bytes(), (0, 200));
    }

    // RFC 2698 worked through: CIR 8 kbit/s (1 byte/ms), CBS 1000, PIR 16 kbit/s
    // (2 bytes/ms), PBS 2000.
    #[test]
    fn trtcm_colour_blind_follows_rfc_2698() {
        let p = Policer::new(spec(Kind::TrTcm, 8_000, 1_000, 16_000, 2_000, false), 0);
        let got = run(
            &p,
            &[
                (0, 800, Green),   // Tp 2000 -> 1200, Tc 1000 -> 200
                (0, 800, Green),   // Tc 200 < 800: yellow, Tp 1200 -> 400
                (0, 500, Green),   // Tp 400 < 500: red, nothing taken
                (0, 400, Green),   // Tc 200 < 400: yellow, Tp -> 0
                (0, 100, Green),   // Tp 0: red (Tc still 200)
                (100, 300, Green), // 100 ms later Tp 200, Tc 300: Tp 200 < 300: red
                (100, 200, Green), // Tp 200 -> 0, Tc 300 -> 100: green
            ],
        );
        assert_eq!(got, [Green, Yellow, Red, Yellow, Red, Red, Green]);
        assert_eq!(p.tokens_bytes(), (100, 0));
    }

    #[test]
    fn trtcm_colour_aware_keeps_yellow_and_red() {
        let p = Policer::new(spec(Kind::TrTcm, 8_000, 1_000, 16_000, 2_000, true), 0);
        let got = run(
            &p,
            &[
                (0, 500, Red),    // red, nothing taken
                (0, 500, Yellow), // Tp 2000 -> 1500, Tc untouched
                (0, 1000, Green), // Tp -> 500, Tc -> 0
                (0, 600, Yellow), // Tp 500 < 600: red
                (0, 500, Green),  // Tc 0: yellow, Tp -> 0
            ],
        );
        assert_eq!(got, [Red, Yellow, Green, Red, Yellow]);
        assert_eq!(p.tokens_bytes(), (0, 0));
    }

    // RFC 4115 §3: CIR 8 kbit/s, CBS 1000, EIR 8 kbit/s, EBS 500; the buckets fill
    // independently (unlike srTCM, Te fills while Tc is not full).
    #[test]
    fn rfc4115_colour_blind_and_aware() {
        let p = Policer::new(spec(Kind::Rfc4115, 8_000, 1_000, 8_000, 500, false), 0);
        let got = run(
            &p,
            &[
                (0, 1000, Green),  // Tc -> 0
                (0, 400, Green),   // Te 500 -> 100: yellow
                (0, 200, Green),   // red
                (100, 200, Green), // Tc 100, Te 200: yellow from Te alone
                (100, 100, Green), // Tc 100 -> 0: green
            ],
        );
        assert_eq!(got, [Green, Yellow, Red, Yellow, Green]);
        assert_eq!(p.tokens_bytes(), (0, 0));

        let p = Policer::new(spec(Kind::Rfc4115, 8_000, 1_000, 8_000, 500, true), 0);
        let got = run(
            &p,
            &[
                (0, 100, Red),    // red
                (0, 100, Yellow), // Te 500 -> 400
                (0, 600, Green),  // Tc 1000 -> 400
                (0, 600, Green),  // Tc 400 < 600: Te 400 < 600: red
                (0, 400, Yellow), // Te -> 0
            ],
        );
        assert_eq!(got, [Red, Yellow, Green, Red, Yellow]);
    }

    #[test]
    fn actions_follow_the_colour() {
        let p = Policer::new(spec(Kind::SrTcm, 8_000, 1_000, 0, 500, false), 0);
        assert_eq!(p.police(0, 1000, Green), (Green, Action::Transmit));
        assert_eq!(p.police(0, 500, Green), (Yellow, Action::Remark(0)));
        assert_eq!(p.police(0, 1, Green), (Red, Action::Drop));
    }

    #[test]
    fn hostile_specs_are_refused() {
        let ok = spec(Kind::TrTcm, 8_000, 1_000, 16_000, 2_000, false);
        assert_eq!(ok.validate(), Ok(()));
        let bad = |f: fn(&mut PolicerSpec)| {
            let mut s = ok;
            f(&mut s);
            s.validate().unwrap_err().to_string()
        };
        assert_eq!(
            bad(|s| s.cir_bps = 0),
            "cir = 0 bit/s: must be 1 to 1000000000000 bit/s"
        );
        assert!(bad(|s| s.ebs_bytes = 0).starts_with("pbs = 0 bytes"));
        assert_eq!(
            bad(|s| s.pir_bps = 1_000),
            "pir must be at least cir (RFC 2698)"
        );
        assert!(bad(|s| s.actions[1] = Action::Remark(64)).contains("DSCP 64"));
        assert!(bad(|s| s.cbs_bytes = u64::MAX).starts_with("cbs = "));
    }

    proptest! {
        /// Over any arrivals, what a marker passes as green never exceeds CBS plus CIR
        /// times the time elapsed, and green plus yellow never exceed the sum of both
        /// rates' tokens (RFC 2697: CIR + EBS; 2698: PIR, PBS; 4115: CIR + EIR).
        #[test]
        fn markers_pass_no_more_than_their_rates(
            kind in prop_oneof![Just(Kind::SrTcm), Just(Kind::TrTcm), Just(Kind::Rfc4115)],
            aware in any::<bool>(),
            arrivals in proptest::collection::vec((0u64..2_000_000, 64u32..1500, 0u8..3), 1..300),
        ) {
            let (cir, cbs, pir, ebs) = (1_000_000u64, 3_000u64, 2_000_000u64, 6_000u64);
            let p = Policer::new(spec(kind, cir, cbs, pir, ebs, aware), 0);
            let mut t = 0;
            let (mut green, mut passed) = (0u64, 0u64);
            for (dt, len, pre) in arrivals {
                t += dt;
                let pre = Colour::ALL[pre as usize];
                let c = p.colour(t, len, pre);
                if aware {
                    prop_assert!(c as u8 >= pre as u8, "{c:?} better than {pre:?}");
                }
                if c == Green { green += u64::from(len) * 8; }
                if c != Red { passed += u64::from(len) * 8; }
            }
            let secs = |rate: u64| rate as u128 * t as u128 / 1_000_000_000;
            prop_assert!(green as u128 <= secs(cir) + cbs as u128 * 8);
            let limit = match kind {
                Kind::SrTcm => secs(cir) + (cbs + ebs) as u128 * 8,
                Kind::TrTcm => secs(pir) + ebs as u128 * 8,
                Kind::Rfc4115 => secs(cir + pir) + (cbs + ebs) as u128 * 8,
            };
            prop_assert!(passed as u128 <= limit);
            let counted: u64 = p.counts().iter().map(|c| c.1).sum::<u64>() * 8;
            prop_assert!(counted >= passed);
        }
    }
}
