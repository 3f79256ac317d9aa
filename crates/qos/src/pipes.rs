//! The pipe of a packet leaving a port (`[[qos.policy.pipe]]`): the pipe with the longest
//! `dst` prefix that holds its destination address.
//!
//! The lookup is the firewall's classifier: every (pipe, prefix) pair becomes a firewall
//! rule matching that destination, the rules ordered longest prefix first, so that the
//! classifier's first match is the longest prefix (two prefixes of the same length never
//! overlap). It is built when the config is applied; a lookup allocates nothing, locks
//! nothing and cannot panic.

use std::net::IpAddr;

use firewall::config::{parse_net, Action, Filter, FirewallConfig, Hook, RuleConfig};
use firewall::node::Parsed;
use firewall::ruleset::CompiledFilter;

/// The destinations of a port's pipes.
pub struct PipeTable {
    filter: CompiledFilter,
    /// By firewall rule: the pipe's lane (1 for the first pipe; 0 is "no pipe").
    lane: Vec<u16>,
    v4: bool,
    v6: bool,
}

impl std::fmt::Debug for PipeTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipeTable")
            .field("prefixes", &self.lane.len())
            .finish()
    }
}

impl PipeTable {
    /// The table of pipes whose prefixes are `dst[k]` (pipe `k`'s, as written; checked by
    /// the config first). A prefix that does not parse, or one in two pipes, is an error.
    pub fn build(dst: &[Vec<String>]) -> Result<PipeTable, String> {
        let mut all: Vec<(u8, u16, String)> = Vec::new();
        for (k, list) in dst.iter().enumerate() {
            for s in list {
                let n = parse_net(s).map_err(|e| format!("pipe[{k}]: {e}"))?;
                all.push((n.len, k as u16 + 1, s.clone()));
            }
        }
        // Longest first; the sort is stable, so equal lengths keep the file's order.
        all.sort_by_key(|a| std::cmp::Reverse(a.0));
        let (mut v4, mut v6) = (false, false);
        let mut rules = Vec::with_capacity(all.len());
        let mut lane = Vec::with_capacity(all.len());
        for (_, l, s) in all {
            if s.contains(':') {
                v6 = true;
            } else {
                v4 = true;
            }
            rules.push(RuleConfig {
                action: Some(Action::Accept),
                destination: vec![s],
                ..RuleConfig::default()
            });
            lane.push(l);
        }
        let f = Filter {
            name: "qos-pipes".into(),
            hook: Hook::Egress,
            interfaces: Vec::new(),
            policy: Action::Accept,
            rules,
        };
        let filter = CompiledFilter::compile(&f, 0, 0, &FirewallConfig::default())
            .map_err(|e| format!("pipe destinations: {}", e.what))?;
        Ok(PipeTable {
            filter,
            lane,
            v4,
            v6,
        })
    }

    /// The lane of a packet to `dst` (0: no pipe).
    #[inline]
    pub fn lane_of(&self, dst: IpAddr) -> u16 {
        let mut p = Parsed::default();
        let v = match dst {
            IpAddr::V4(a) => {
                if !self.v4 {
                    return 0;
                }
                p.dst[12..].copy_from_slice(&a.octets());
                self.filter.judge4(&p.key4(0))
            }
            IpAddr::V6(a) => {
                if !self.v6 {
                    return 0;
                }
                p.dst = a.octets();
                self.filter.judge6(&p.key6(0))
            }
        };
        v.rule
            .and_then(|r| self.lane.get(r as usize).copied())
            .unwrap_or(0)
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
                Some(a) => self.lane_of(IpAddr::from(a)),
                None => 0,
            }
        } else {
            match frame
                .get(at + 16..at + 20)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
            {
                Some(a) => self.lane_of(IpAddr::from(a)),
                None => 0,
            }
        }
    }

    /// Whether it has any prefix.
    pub fn is_empty(&self) -> bool {
        self.lane.is_empty()
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
    }
}
