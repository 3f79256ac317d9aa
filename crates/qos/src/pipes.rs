//! The pipe of a packet leaving a port (`[[qos.policy.pipe]]`): the pipe with the longest
//! `dst` prefix that holds its destination address.
//!
//! The prefixes are cut, when the config is applied, into the address ranges where the
//! longest match does not change, kept as sorted arrays of range starts (one for IPv4,
//! one for IPv6) beside their pipes; a lookup is a binary search in them (11 steps at
//! 2,048 ranges, in a few KiB). It allocates nothing, locks nothing and cannot panic.
//!
//! Written here rather than taken from a crate: the firewall's classifier did this job
//! first and, measured by `ferrouter-lab bench pipeline --qos-pipes N` (docs/qos.md,
//! "Pipes"), cost 40 ns a packet at 64 pipes and about 350 ns at 1,024, and an LPM trie
//! crate walks a node per level where a flat sorted array stays in a few cache lines.

use std::net::IpAddr;

use firewall::config::parse_net;

/// Address ranges and the pipe of each: `starts[k]..starts[k + 1]` (to the end of the
/// family's space for the last) is in lane `lanes[k]`; `starts[0]` is 0.
#[derive(Debug, Default)]
struct Ranges<T> {
    starts: Vec<T>,
    lanes: Vec<u16>,
}

impl<T: Copy + Ord> Ranges<T> {
    /// The lane of `a` (0: in no prefix).
    #[inline]
    fn lane(&self, a: T) -> u16 {
        let i = self.starts.partition_point(|&s| s <= a);
        i.checked_sub(1)
            .and_then(|i| self.lanes.get(i))
            .copied()
            .unwrap_or(0)
    }
}

/// The ranges of `prefixes` (first address, last address, prefix length, lane) of a
/// family whose last address is `max`: each address in the lane of the longest prefix
/// holding it, 0 where none does. Prefixes either nest or are disjoint; the same prefix
/// twice keeps its first lane (the caller refuses one in two pipes).
fn cut(mut prefixes: Vec<(u128, u128, u8, u16)>, max: u128) -> Ranges<u128> {
    // By first address, the enclosing (shorter) prefix first; stable for duplicates.
    prefixes.sort_by_key(|p| (p.0, p.2));
    prefixes.dedup_by_key(|p| (p.0, p.2));
    let mut r = Ranges {
        starts: vec![0u128],
        lanes: vec![0u16],
    };
    let emit = |r: &mut Ranges<u128>, start: u128, lane: u16| {
        if r.starts.last() == Some(&start) {
            // A more specific prefix starting where the last range did.
            r.lanes.pop();
            r.starts.pop();
        }
        if r.lanes.last() != Some(&lane) {
            r.starts.push(start);
            r.lanes.push(lane);
        }
    };
    // The prefixes holding the current address, innermost last: (last address, lane).
    let mut open: Vec<(u128, u16)> = Vec::new();
    let close = |r: &mut Ranges<u128>, open: &mut Vec<(u128, u16)>, before: Option<u128>| {
        while let Some(&(last, _)) = open.last() {
            if before.is_some_and(|b| last >= b) {
                break;
            }
            open.pop();
            if last < max {
                let resume = open.last().map_or(0, |o| o.1);
                emit(r, last + 1, resume);
            }
        }
    };
    for (first, last, _, lane) in prefixes {
        close(&mut r, &mut open, Some(first));
        emit(&mut r, first, lane);
        open.push((last, lane));
    }
    close(&mut r, &mut open, None);
    r
}

/// The destinations of a port's pipes.
#[derive(Debug, Default)]
pub struct PipeTable {
    v4: Ranges<u32>,
    v6: Ranges<u128>,
    /// Prefixes given, over both families.
    prefixes: usize,
}

impl PipeTable {
    /// The table of pipes whose prefixes are `dst[k]` (pipe `k`'s, as written; checked by
    /// the config first). A prefix that does not parse, or one in two pipes, is an error.
    pub fn build(dst: &[Vec<String>]) -> Result<PipeTable, String> {
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        let mut seen: std::collections::HashMap<(IpAddr, u8), usize> =
            std::collections::HashMap::new();
        for (k, list) in dst.iter().enumerate() {
            let lane = u16::try_from(k + 1)
                .map_err(|_| format!("pipe[{k}]: more pipes than a port can have"))?;
            for s in list {
                let n = parse_net(s).map_err(|e| format!("pipe[{k}]: {e}"))?;
                if let Some(&other) = seen.get(&(n.addr, n.len)) {
                    if other != k {
                        return Err(format!(
                            "pipe[{k}]: {s} is already a destination of pipe[{other}]"
                        ));
                    }
                    continue;
                }
                seen.insert((n.addr, n.len), k);
                match n.addr {
                    IpAddr::V4(a) => {
                        let first = u128::from(u32::from(a));
                        let last = first | (u128::from(u32::MAX) >> n.len.min(32));
                        v4.push((first, last, n.len, lane));
                    }
                    IpAddr::V6(a) => {
                        let first = u128::from(a);
                        let last = first | u128::MAX.checked_shr(u32::from(n.len)).unwrap_or(0);
                        v6.push((first, last, n.len, lane));
                    }
                }
            }
        }
        let prefixes = v4.len() + v6.len();
        let r4 = cut(v4, u128::from(u32::MAX));
        let v4 = Ranges {
            // Within u32: every start is an IPv4 address or one past a prefix's end,
            // which `cut` emits only below the family's last address.
            starts: r4.starts.iter().map(|&s| s as u32).collect(),
            lanes: r4.lanes,
        };
        Ok(PipeTable {
            v4,
            v6: cut(v6, u128::MAX),
            prefixes,
        })
    }

    /// The lane of a packet to `dst` (0: no pipe).
    #[inline]
    pub fn lane_of(&self, dst: IpAddr) -> u16 {
        match dst {
            IpAddr::V4(a) => self.v4.lane(u32::from(a)),
            IpAddr::V6(a) => self.v6.lane(u128::from(a)),
        }
    }

    /// The lane of the IP packet whose header starts at `at` in `frame` (`v6`: IPv6),
    /// 0 when it is too short to hold its destination.
    #[inline]
    pub fn lane_of_frame(&self, frame: &[u8], at: usize, v6: bool) -> u16 {
        if v6 {
            match frame
                .get(at + 24..at + 40)
                .and_then(|b| <[u8; 16]>::try_from(b).ok())
            {
                Some(a) => self.v6.lane(u128::from_be_bytes(a)),
                None => 0,
            }
        } else {
            match frame
                .get(at + 16..at + 20)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
            {
                Some(a) => self.v4.lane(u32::from_be_bytes(a)),
                None => 0,
            }
        }
    }

    /// Whether it has any prefix.
    pub fn is_empty(&self) -> bool {
        self.prefixes == 0
    }

    /// Ranges in its IPv4 and IPv6 tables (what a lookup searches).
    pub fn ranges(&self) -> (usize, usize) {
        (self.v4.starts.len(), self.v6.starts.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_prefix_chooses_the_pipe() {
        let t = PipeTable::build(&[
            vec!["10.0.0.0/8".into(), "2001:db8::/32".into()],
            vec!["10.1.0.0/16".into()],
            vec!["10.1.2.3/32".into(), "2001:db8:1::/48".into()],
        ])
        .unwrap();
        let l = |s: &str| t.lane_of(s.parse().unwrap());
        assert_eq!(l("10.9.9.9"), 1);
        assert_eq!(l("10.1.9.9"), 2);
        assert_eq!(l("10.1.2.3"), 3);
        assert_eq!(l("10.1.2.4"), 2);
        assert_eq!(l("192.0.2.1"), 0);
        assert_eq!(l("2001:db8::1"), 1);
        assert_eq!(l("2001:db8:1::1"), 3);
        assert_eq!(l("2001:db9::1"), 0);
        let none = PipeTable::build(&[]).unwrap();
        assert!(none.is_empty());
        assert_eq!(none.lane_of("10.0.0.1".parse().unwrap()), 0);
        // From a frame: an IPv4 header at 14.
        let mut f = vec![0u8; 34];
        f[14 + 16..14 + 20].copy_from_slice(&[10, 1, 2, 3]);
        assert_eq!(t.lane_of_frame(&f, 14, false), 3);
        assert_eq!(t.lane_of_frame(&f[..30], 14, false), 0);
        assert_eq!(t.lane_of_frame(&f, 14, true), 0);
        // /0 and /32, /128 at the ends of the space.
        let t = PipeTable::build(&[
            vec!["0.0.0.0/0".into(), "::/0".into()],
            vec!["255.255.255.255/32".into(), "0.0.0.0/32".into()],
            vec!["ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128".into()],
        ])
        .unwrap();
        assert_eq!(l2(&t, "0.0.0.0"), 2);
        assert_eq!(l2(&t, "0.0.0.1"), 1);
        assert_eq!(l2(&t, "255.255.255.254"), 1);
        assert_eq!(l2(&t, "255.255.255.255"), 2);
        assert_eq!(l2(&t, "::"), 1);
        assert_eq!(l2(&t, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"), 1);
        assert_eq!(l2(&t, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), 3);
        // A prefix in two pipes is refused; twice in one pipe is the same prefix.
        assert!(
            PipeTable::build(&[vec!["10.0.0.0/8".into()], vec!["10.0.0.0/8".into()]])
                .unwrap_err()
                .contains("already a destination of pipe[0]")
        );
        let t = PipeTable::build(&[vec!["10.0.0.0/8".into(), "10.0.0.0/8".into()]]).unwrap();
        assert_eq!(t.ranges(), (3, 1));
        assert!(PipeTable::build(&[vec!["10.0.0.1/8".into()]])
            .unwrap_err()
            .starts_with("pipe[0]: "));
    }

    fn l2(t: &PipeTable, s: &str) -> u16 {
        t.lane_of(s.parse().unwrap())
    }

    /// The longest of `prefixes` (first, length, lane) holding `a`, by scanning them all.
    fn naive(prefixes: &[(u32, u8, u16)], a: u32) -> u16 {
        prefixes
            .iter()
            .filter(|(f, len, _)| {
                let mask = u32::MAX.checked_shl(32 - u32::from(*len)).unwrap_or(0);
                a & mask == *f
            })
            .max_by_key(|p| p.1)
            .map_or(0, |p| p.2)
    }

    proptest::proptest! {
        /// Over random nested and overlapping prefixes, the ranges give what a scan of
        /// every prefix gives, at the prefixes' edges and at random addresses.
        #[test]
        fn ranges_agree_with_a_scan_of_every_prefix(
            raw in proptest::collection::vec((proptest::prelude::any::<u32>(), 0u8..=32, 1u16..6), 0..40),
            probes in proptest::collection::vec(proptest::prelude::any::<u32>(), 0..64),
        ) {
            // Clustered in 10.0.0.0/8 now and then, so that prefixes nest.
            let mut prefixes: Vec<(u32, u8, u16)> = Vec::new();
            for (k, &(a, len, lane)) in raw.iter().enumerate() {
                let a = if k % 2 == 0 { 0x0a00_0000 | (a & 0x00ff_ffff) } else { a };
                let f = a & u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                if prefixes.iter().all(|p| (p.0, p.1) != (f, len)) {
                    prefixes.push((f, len, lane));
                }
            }
            let mut dst: Vec<Vec<String>> = vec![Vec::new(); 5];
            for &(f, len, lane) in &prefixes {
                dst[usize::from(lane) - 1].push(format!("{}/{len}", std::net::Ipv4Addr::from(f)));
            }
            let t = PipeTable::build(&dst).unwrap();
            let mut at: Vec<u32> = probes;
            for &(f, len, _) in &prefixes {
                let last = f | u32::MAX.checked_shr(u32::from(len)).unwrap_or(0);
                at.extend([f, f.wrapping_sub(1), last, last.wrapping_add(1)]);
            }
            for a in at {
                proptest::prop_assert_eq!(
                    t.lane_of(IpAddr::from(std::net::Ipv4Addr::from(a))),
                    naive(&prefixes, a),
                    "address {}", std::net::Ipv4Addr::from(a)
                );
            }
        }
    }
}
