//! Traffic profiles: which Ethernet frame sizes and address families a trial sends, in
//! which proportions, and the L1 rate arithmetic that goes with them.
//!
//! Frame sizes are Ethernet frames **including the 4-byte FCS**, as hardware testers and
//! the reference reports count them: a "64-byte frame" is a 60-byte buffer handed to the
//! port (the NIC appends the FCS). On the wire each frame also costs 20 bytes of preamble,
//! start delimiter and inter-frame gap, which the L1 helpers ([`gbps_l1`],
//! [`line_rate_pps`]) include.
//!
//! | name | mix |
//! |---|---|
//! | `ipv4-<size>`, `ipv6-<size>` | one size, one family (IPv4 ≥ 64, IPv6 ≥ 78, ≤ 9216) |
//! | `imix1` | IPv4 64:55%, 594:25%, 1518:20% (6WIND report) |
//! | `imix3` | IPv6 78:58%, 496:3%, 594:24%, 1518:15% |
//! | `imix2` | 50% IMIX1 (IPv4) + 50% IMIX3 (IPv6) |
//! | `eantc1` | dual stack 50/50: 64 (IPv4) or 78 (IPv6) 3/60, 100 20/60, 373 6/60, 570 7/60, 1256 6/60, 1518 16/60, 9000 2/60 |
//! | `eantc2` | dual stack 50/50: 64/78 3/58, 100 20/58, 373 6/58, 570 7/58, 1256 6/58, 1400 16/58 |
//! | `simple` | dual stack 50/50: 64 (IPv6: 78), 594, 1518 at 7:4:1 |
//!
//! Dual-stack profiles (`imix2`, `eantc1`, `eantc2`, `simple`) accept an IPv6 share
//! override ([`Profile::with_ipv6_percent`]); the per-family size mix stays as listed.

use std::fmt;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// Smallest IPv4 frame (FCS included): Ethernet 14 + IPv4 20 + UDP 8 + 18 bytes payload + FCS 4.
pub const MIN_FRAME_V4: u16 = 64;
/// Smallest IPv6 frame (FCS included): Ethernet 14 + IPv6 40 + UDP 8 + 12 bytes payload
/// (exactly the [`crate::frame::SIGNATURE_LEN`]-byte signature) + FCS 4.
pub const MIN_FRAME_V6: u16 = 78;
/// Largest frame accepted in a profile (common jumbo limit).
pub const MAX_FRAME: u16 = 9216;
/// Bytes of the FCS, counted in frame sizes but never in the buffers handed to ports.
pub const FCS_LEN: usize = 4;
/// Preamble (7), start delimiter (1) and minimum inter-frame gap (12): per-frame L1 overhead.
pub const L1_OVERHEAD: f64 = 20.0;

/// Number of entries a pattern cycle is stretched to (at least) so the shuffle mixes sizes
/// well; the exact cycle is a multiple of the smallest cycle that matches the weights.
const MIN_CYCLE: usize = 1000;
/// Largest cycle we build; above it the weights are rounded (never reached by the
/// built-in profiles with an integer IPv6 percent).
const MAX_CYCLE: usize = 1 << 20;

/// IP version of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// IPv4.
    Ipv4,
    /// IPv6.
    Ipv6,
}

impl Family {
    /// 0 for IPv4, 1 for IPv6 (index into per-family arrays).
    #[inline]
    pub fn index(self) -> usize {
        match self {
            Family::Ipv4 => 0,
            Family::Ipv6 => 1,
        }
    }
    /// Inverse of [`Family::index`] (any non-zero is IPv6).
    #[inline]
    pub fn from_index(i: usize) -> Family {
        if i == 0 {
            Family::Ipv4
        } else {
            Family::Ipv6
        }
    }
    /// Smallest frame (FCS included) that holds headers and signature.
    pub fn min_frame(self) -> u16 {
        match self {
            Family::Ipv4 => MIN_FRAME_V4,
            Family::Ipv6 => MIN_FRAME_V6,
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::Ipv4 => "ipv4",
            Family::Ipv6 => "ipv6",
        })
    }
}

/// One kind of frame a profile sends: its family and size (FCS included).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FrameKind {
    /// Address family.
    pub family: Family,
    /// Ethernet frame size in bytes, FCS included (the buffer is 4 bytes shorter).
    pub size: u16,
}

/// One line of a profile's mix: a frame kind and its exact share of all frames.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MixEntry {
    /// The frame kind.
    pub kind: FrameKind,
    /// Fraction of all frames (the shares of a profile sum to 1).
    pub share: f64,
}

/// A traffic profile: per-family size mixes and the IPv6 share of frames.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    name: String,
    /// (size, weight) for IPv4 frames; empty when the profile sends no IPv4.
    v4: Vec<(u16, u32)>,
    /// (size, weight) for IPv6 frames; empty when the profile sends no IPv6.
    v6: Vec<(u16, u32)>,
    /// Percent of frames that are IPv6 (0..=100).
    ipv6_percent: u8,
    /// Whether the IPv6 share may be overridden (dual-stack profiles).
    dual: bool,
}

const IMIX1: &[(u16, u32)] = &[(64, 55), (594, 25), (1518, 20)];
const IMIX3: &[(u16, u32)] = &[(78, 58), (496, 3), (594, 24), (1518, 15)];
const EANTC1: &[(u16, u32)] = &[
    (64, 3),
    (100, 20),
    (373, 6),
    (570, 7),
    (1256, 6),
    (1518, 16),
    (9000, 2),
];
const EANTC2: &[(u16, u32)] = &[
    (64, 3),
    (100, 20),
    (373, 6),
    (570, 7),
    (1256, 6),
    (1400, 16),
];
const SIMPLE: &[(u16, u32)] = &[(64, 7), (594, 4), (1518, 1)];

/// The same mix for IPv6, with sizes below the IPv6 minimum raised to it (64 → 78).
fn v6_of(mix: &[(u16, u32)]) -> Vec<(u16, u32)> {
    let mut out: Vec<(u16, u32)> = Vec::new();
    for &(s, w) in mix {
        let s = s.max(MIN_FRAME_V6);
        match out.iter_mut().find(|e| e.0 == s) {
            Some(e) => e.1 += w,
            None => out.push((s, w)),
        }
    }
    out
}

/// Names [`Profile::parse`] accepts besides `ipv4-<size>` / `ipv6-<size>`.
pub const NAMED_PROFILES: &[&str] = &["imix1", "imix2", "imix3", "eantc1", "eantc2", "simple"];

impl Profile {
    /// Parse a profile name: `ipv4-<size>`, `ipv6-<size>`, `imix1`, `imix2`, `imix3`,
    /// `eantc1`, `eantc2`, `simple` (case-insensitive). Sizes are Ethernet frame sizes with
    /// FCS, IPv4 64..=9216, IPv6 78..=9216.
    pub fn parse(name: &str) -> Result<Profile> {
        let lname = name.trim().to_ascii_lowercase();
        let dual = |v4: &[(u16, u32)]| Profile {
            name: lname.clone(),
            v4: v4.to_vec(),
            v6: v6_of(v4),
            ipv6_percent: 50,
            dual: true,
        };
        let p = match lname.as_str() {
            "imix1" => Profile {
                name: lname.clone(),
                v4: IMIX1.to_vec(),
                v6: vec![],
                ipv6_percent: 0,
                dual: false,
            },
            "imix3" => Profile {
                name: lname.clone(),
                v4: vec![],
                v6: IMIX3.to_vec(),
                ipv6_percent: 100,
                dual: false,
            },
            "imix2" => Profile {
                name: lname.clone(),
                v4: IMIX1.to_vec(),
                v6: IMIX3.to_vec(),
                ipv6_percent: 50,
                dual: true,
            },
            "eantc1" => dual(EANTC1),
            "eantc2" => dual(EANTC2),
            "simple" => dual(SIMPLE),
            _ => {
                let (fam, size) = match lname.split_once('-') {
                    Some(("ipv4", s)) => (Family::Ipv4, s),
                    Some(("ipv6", s)) => (Family::Ipv6, s),
                    _ => bail!(
                        "unknown profile {name:?}; expected ipv4-<size>, ipv6-<size> or one of {}",
                        NAMED_PROFILES.join(", ")
                    ),
                };
                let size: u16 = match size.parse() {
                    Ok(s) => s,
                    Err(_) => bail!("profile {name:?}: frame size {size:?} is not a number"),
                };
                if size < fam.min_frame() || size > MAX_FRAME {
                    bail!(
                        "profile {name:?}: {fam} frame size must be {}..={MAX_FRAME} bytes \
                         (Ethernet frame including the 4-byte FCS)",
                        fam.min_frame()
                    );
                }
                let one = vec![(size, 1)];
                match fam {
                    Family::Ipv4 => Profile {
                        name: lname.clone(),
                        v4: one,
                        v6: vec![],
                        ipv6_percent: 0,
                        dual: false,
                    },
                    Family::Ipv6 => Profile {
                        name: lname.clone(),
                        v4: vec![],
                        v6: one,
                        ipv6_percent: 100,
                        dual: false,
                    },
                }
            }
        };
        Ok(p)
    }

    /// The same profile with `percent` of its frames IPv6 (0..=100). Only dual-stack
    /// profiles (`imix2`, `eantc1`, `eantc2`, `simple`) accept an override; a single-family
    /// profile accepts only its own share (0 for IPv4, 100 for IPv6).
    pub fn with_ipv6_percent(mut self, percent: u8) -> Result<Profile> {
        if percent > 100 {
            bail!("IPv6 share must be 0..=100 percent, not {percent}");
        }
        if !self.dual && percent != self.ipv6_percent {
            bail!(
                "profile {} sends {} only; an IPv4/IPv6 ratio applies to dual-stack profiles \
                 (imix2, eantc1, eantc2, simple)",
                self.name,
                if self.ipv6_percent == 0 {
                    "IPv4"
                } else {
                    "IPv6"
                }
            );
        }
        self.ipv6_percent = percent;
        Ok(self)
    }

    /// The same profile without frame sizes above `max` (FCS included), the remaining
    /// weights unchanged (so their proportions hold). For running e.g. `eantc1`, whose
    /// 9000-byte frames exceed a 1500-byte MTU or a 2 KiB packet-memory frame. The name
    /// gets a `-max<max>` suffix so reports show the change. Fails when nothing is left of
    /// a family the profile sends.
    pub fn without_frames_over(&self, max: u16) -> Result<Profile> {
        let keep = |m: &[(u16, u32)]| -> Vec<(u16, u32)> {
            m.iter().copied().filter(|&(s, _)| s <= max).collect()
        };
        let p = Profile {
            name: format!("{}-max{max}", self.name),
            v4: keep(&self.v4),
            v6: keep(&self.v6),
            ipv6_percent: self.ipv6_percent,
            dual: self.dual,
        };
        if (self.ipv6_percent < 100 && p.v4.is_empty())
            || (self.ipv6_percent > 0 && p.v6.is_empty())
        {
            bail!("profile {}: no frame sizes ≤ {max} bytes left", self.name);
        }
        Ok(p)
    }

    /// The name (lower case, as parsed; with a `-max<N>` suffix after
    /// [`Profile::without_frames_over`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Percent of frames that are IPv6.
    pub fn ipv6_percent(&self) -> u8 {
        self.ipv6_percent
    }

    /// Whether the IPv6 share can be overridden.
    pub fn is_dual_stack(&self) -> bool {
        self.dual
    }

    /// Whether the profile sends frames of `family` (at its current IPv6 share).
    pub fn sends(&self, family: Family) -> bool {
        match family {
            Family::Ipv4 => self.ipv6_percent < 100 && !self.v4.is_empty(),
            Family::Ipv6 => self.ipv6_percent > 0 && !self.v6.is_empty(),
        }
    }

    /// Share of frames of `family` (0..=1).
    pub fn family_share(&self, family: Family) -> f64 {
        if !self.sends(family) {
            return 0.0;
        }
        match family {
            Family::Ipv4 => f64::from(100 - self.ipv6_percent) / 100.0,
            Family::Ipv6 => f64::from(self.ipv6_percent) / 100.0,
        }
    }

    fn family_mix(&self, family: Family) -> &[(u16, u32)] {
        match family {
            Family::Ipv4 => &self.v4,
            Family::Ipv6 => &self.v6,
        }
    }

    /// Every frame kind the profile sends with its exact share (shares sum to 1), IPv4
    /// first, in the listed size order.
    pub fn mix(&self) -> Vec<MixEntry> {
        let mut out = Vec::new();
        for family in [Family::Ipv4, Family::Ipv6] {
            let fs = self.family_share(family);
            if fs == 0.0 {
                continue;
            }
            let mix = self.family_mix(family);
            let total: u32 = mix.iter().map(|e| e.1).sum();
            for &(size, w) in mix {
                out.push(MixEntry {
                    kind: FrameKind { family, size },
                    share: fs * f64::from(w) / f64::from(total),
                });
            }
        }
        out
    }

    /// Mean frame size in bytes, FCS included (what L1 rates are computed with).
    pub fn avg_frame_size(&self) -> f64 {
        self.mix()
            .iter()
            .map(|e| e.share * f64::from(e.kind.size))
            .sum()
    }

    /// Largest frame the profile sends, FCS included (compare with the link MTU + 18, and
    /// with the packet memory's frame size).
    pub fn max_frame_size(&self) -> u16 {
        self.mix().iter().map(|e| e.kind.size).max().unwrap_or(0)
    }

    /// Smallest frame the profile sends, FCS included.
    pub fn min_frame_size(&self) -> u16 {
        self.mix().iter().map(|e| e.kind.size).min().unwrap_or(0)
    }

    /// Exact integer counts of each kind over the smallest cycle that matches the weights,
    /// or rounded counts over `MAX_CYCLE` when that cycle would be larger.
    fn cycle_counts(&self) -> Vec<(FrameKind, u64)> {
        // Frames of kind (f, i) per cycle: N * pct_f * w_i / (100 * W_f). The smallest N
        // making every count an integer is the lcm of the reduced denominators.
        let mut terms: Vec<(FrameKind, u64, u64)> = Vec::new(); // (kind, num, den)
        for family in [Family::Ipv4, Family::Ipv6] {
            if !self.sends(family) {
                continue;
            }
            let pct = u64::from(match family {
                Family::Ipv4 => 100 - self.ipv6_percent,
                Family::Ipv6 => self.ipv6_percent,
            });
            let mix = self.family_mix(family);
            let total: u64 = mix.iter().map(|e| u64::from(e.1)).sum();
            for &(size, w) in mix {
                let (num, den) = (pct * u64::from(w), 100 * total);
                let g = gcd(num, den);
                terms.push((FrameKind { family, size }, num / g, den / g));
            }
        }
        let mut n: u64 = 1;
        for t in &terms {
            n = lcm(n, t.2);
            if n > MAX_CYCLE as u64 {
                break;
            }
        }
        if n <= MAX_CYCLE as u64 {
            let reps = (MIN_CYCLE as u64).div_ceil(n);
            let n = n * reps;
            return terms.iter().map(|t| (t.0, n * t.1 / t.2)).collect();
        }
        // Largest-remainder rounding over MAX_CYCLE entries.
        let n = MAX_CYCLE as u64;
        let mut counts: Vec<(FrameKind, u64, f64)> = terms
            .iter()
            .map(|t| {
                let exact = n as f64 * t.1 as f64 / t.2 as f64;
                (t.0, exact.floor() as u64, exact - exact.floor())
            })
            .collect();
        let mut left = n - counts.iter().map(|c| c.1).sum::<u64>();
        let mut order: Vec<usize> = (0..counts.len()).collect();
        order.sort_by(|&a, &b| counts[b].2.total_cmp(&counts[a].2));
        for i in order.into_iter().cycle() {
            if left == 0 {
                break;
            }
            counts[i].1 += 1;
            left -= 1;
        }
        counts.into_iter().map(|c| (c.0, c.1)).collect()
    }

    /// The deterministic per-frame sequence of kinds a trial cycles through: the exact
    /// weights (every kind appears exactly `share × len` times) shuffled by `seed`
    /// (Fisher–Yates with SplitMix64). Its length is the smallest multiple of the exact
    /// cycle that is at least 1000 (e.g. 1000 for `imix1`, 1044 for `eantc2`).
    pub fn cycle(&self, seed: u64) -> Vec<FrameKind> {
        let mut v: Vec<FrameKind> = Vec::new();
        for (k, c) in self.cycle_counts() {
            v.extend(std::iter::repeat_n(k, c as usize));
        }
        let mut rng = SplitMix64(seed);
        for i in (1..v.len()).rev() {
            let j = (rng.next() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
        v
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl std::str::FromStr for Profile {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Profile> {
        Profile::parse(s)
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

fn lcm(a: u64, b: u64) -> u64 {
    a / gcd(a, b) * b
}

/// SplitMix64: a tiny, portable, deterministic generator (the sequence never depends on
/// a crate version or platform).
pub(crate) struct SplitMix64(pub u64);

impl SplitMix64 {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// L1 bit rate in Gbit/s of `pps` frames per second of mean size `avg_frame` bytes (FCS
/// included): `pps × (avg_frame + 20) × 8 / 1e9`, the 20 bytes being preamble, start
/// delimiter and inter-frame gap.
pub fn gbps_l1(pps: f64, avg_frame: f64) -> f64 {
    pps * (avg_frame + L1_OVERHEAD) * 8.0 / 1e9
}

/// Frames per second that fill a `gbps` link with frames of mean size `avg_frame` bytes
/// (FCS included): the inverse of [`gbps_l1`]. 10 Gbit/s of 64-byte frames is 14 880 952.
pub fn line_rate_pps(gbps: f64, avg_frame: f64) -> f64 {
    gbps * 1e9 / ((avg_frame + L1_OVERHEAD) * 8.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_names_and_limits() {
        assert_eq!(Profile::parse("ipv4-64").unwrap().max_frame_size(), 64);
        assert_eq!(Profile::parse("IPv6-1518").unwrap().min_frame_size(), 1518);
        assert!(Profile::parse("ipv6-64").is_err());
        assert!(Profile::parse("ipv4-63").is_err());
        assert!(Profile::parse("ipv4-9000").is_ok());
        assert!(Profile::parse("ipv4-9217").is_err());
        assert!(Profile::parse("ipv4-x").is_err());
        assert!(Profile::parse("imix9").is_err());
        for n in NAMED_PROFILES {
            assert_eq!(Profile::parse(n).unwrap().name(), *n);
        }
    }

    #[test]
    fn averages_match_the_reports() {
        let a = |n: &str| Profile::parse(n).unwrap().avg_frame_size();
        assert!((a("imix1") - 487.3).abs() < 1e-9);
        assert!(
            (a("imix3") - (0.58 * 78.0 + 0.03 * 496.0 + 0.24 * 594.0 + 0.15 * 1518.0)).abs() < 1e-9
        );
        assert!((a("imix2") - (a("imix1") + a("imix3")) / 2.0).abs() < 1e-9);
        let s = (7.0 * 64.0 + 4.0 * 594.0 + 1518.0) / 12.0;
        let s6 = (7.0 * 78.0 + 4.0 * 594.0 + 1518.0) / 12.0;
        assert!((a("simple") - (s + s6) / 2.0).abs() < 1e-9);
        let p = Profile::parse("eantc1").unwrap();
        assert_eq!(p.max_frame_size(), 9000);
        assert_eq!(p.without_frames_over(1518).unwrap().max_frame_size(), 1518);
    }

    #[test]
    fn ratio_override() {
        let p = Profile::parse("imix2")
            .unwrap()
            .with_ipv6_percent(20)
            .unwrap();
        assert!((p.family_share(Family::Ipv6) - 0.2).abs() < 1e-12);
        let p0 = Profile::parse("eantc2")
            .unwrap()
            .with_ipv6_percent(0)
            .unwrap();
        assert!(!p0.sends(Family::Ipv6));
        assert!(Profile::parse("imix1")
            .unwrap()
            .with_ipv6_percent(50)
            .is_err());
        assert!(Profile::parse("imix1")
            .unwrap()
            .with_ipv6_percent(0)
            .is_ok());
        assert!(Profile::parse("imix2")
            .unwrap()
            .with_ipv6_percent(101)
            .is_err());
    }

    #[test]
    fn line_rate() {
        let pps = line_rate_pps(10.0, 64.0);
        assert!((pps - 14_880_952.38).abs() < 0.01);
        assert!((gbps_l1(pps, 64.0) - 10.0).abs() < 1e-9);
    }
}
