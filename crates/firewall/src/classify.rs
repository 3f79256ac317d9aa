//! The rule classifier: which rule, first in order, matches a packet's 5-tuple.
//!
//! A rule is a box in five dimensions (source address, destination address, source port,
//! destination port, protocol), each an inclusive range: a prefix is the range of its
//! addresses, "any" the whole dimension. Rules are ordered; the first whose box holds the
//! key wins, as in nftables chains and ACLs.
//!
//! **How.** A decision tree in the style of HyperSplit (Qi et al., 2009): each inner node
//! cuts one dimension at one value, so the key descends by one comparison per level; each
//! leaf holds the few rules (at most [`Options::leaf_rules`], 8 by default) whose boxes
//! overlap the leaf's region, in rule order, and checks them in full. A cut is chosen where
//! it best balances the rules on the two sides (the larger side as small as possible, then
//! the fewest rules copied to both sides). A rule that covers a node's whole region hides
//! every later rule there, so those are dropped from the node: broad rules (default
//! policies, wide blocks) end lists early. Copies of rules are bounded
//! ([`Options::max_entries`]): past the budget, nodes stop splitting and leaves get longer,
//! so no rule set can make the build run away.
//!
//! **Why not the others.** A linear scan costs one comparison per rule; tuple-space search
//! (Open vSwitch) hashes once per distinct prefix-length combination and handles port
//! ranges poorly; DPDK's `rte_acl` builds multi-bit tries over the key's bytes, faster for
//! some sets but with a far more complex build. The tree keeps lookups to a few dozen
//! comparisons whatever the rule count, with a build of O(n log n) per level.
//!
//! The same code serves IPv4 ([`Classifier<u32>`]: addresses, ports and protocol all fit a
//! `u32`) and IPv6 ([`Classifier<u128>`]).
//!
//! Lookups allocate nothing, lock nothing and cannot panic.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::ops::RangeInclusive;

/// Dimensions of a key: source address, destination address, source port, destination
/// port, protocol.
pub const DIMS: usize = 5;

/// Index of each dimension in a key.
pub mod dim {
    /// Source address.
    pub const SRC: usize = 0;
    /// Destination address.
    pub const DST: usize = 1;
    /// Source port (ICMP: 0).
    pub const SPORT: usize = 2;
    /// Destination port (ICMP: 0).
    pub const DPORT: usize = 3;
    /// IP protocol (IPv6: the upper-layer protocol).
    pub const PROTO: usize = 4;
}

const DIM_NAMES: [&str; DIMS] = [
    "source address",
    "destination address",
    "source port",
    "destination port",
    "protocol",
];

/// A dimension's value type: `u32` for IPv4 keys, `u128` for IPv6 keys.
pub trait Field: Copy + Ord + fmt::Debug + Send + Sync + 'static {
    /// Zero.
    const ZERO: Self;
    /// The largest value.
    const MAX: Self;
    /// `self + 1`, or `None` at [`Field::MAX`].
    fn succ(self) -> Option<Self>;
    /// `self - 1`, or `None` at zero.
    fn pred(self) -> Option<Self>;
    /// Bits of an address of this family.
    const ADDR_BITS: u32;
    /// Bits needed for `hi - lo` (0 for one value).
    fn span_bits(lo: Self, hi: Self) -> u32;
}

impl Field for u32 {
    const ZERO: u32 = 0;
    const MAX: u32 = u32::MAX;
    fn succ(self) -> Option<u32> {
        self.checked_add(1)
    }
    fn pred(self) -> Option<u32> {
        self.checked_sub(1)
    }
    const ADDR_BITS: u32 = 32;
    fn span_bits(lo: u32, hi: u32) -> u32 {
        32 - hi.saturating_sub(lo).leading_zeros()
    }
}

impl Field for u128 {
    const ZERO: u128 = 0;
    const MAX: u128 = u128::MAX;
    fn succ(self) -> Option<u128> {
        self.checked_add(1)
    }
    fn pred(self) -> Option<u128> {
        self.checked_sub(1)
    }
    const ADDR_BITS: u32 = 128;
    fn span_bits(lo: u128, hi: u128) -> u32 {
        128 - hi.saturating_sub(lo).leading_zeros()
    }
}

/// A rule's box: an inclusive range per dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule<T> {
    /// Lowest value per dimension.
    pub lo: [T; DIMS],
    /// Highest value per dimension.
    pub hi: [T; DIMS],
}

impl<T: Field> Rule<T> {
    /// The rule matching everything.
    pub fn any() -> Rule<T> {
        Rule {
            lo: [T::ZERO; DIMS],
            hi: [T::MAX; DIMS],
        }
    }

    /// Whether `key` lies in the box.
    #[inline]
    pub fn matches(&self, key: &[T; DIMS]) -> bool {
        // Every dimension, without early exits (fewer branches to mispredict).
        let mut ok = true;
        for ((lo, hi), k) in self.lo.iter().zip(&self.hi).zip(key) {
            ok &= lo <= k && k <= hi;
        }
        ok
    }

    /// Whether the box covers the region `[lo, hi]` entirely.
    fn covers(&self, lo: &[T; DIMS], hi: &[T; DIMS]) -> bool {
        (0..DIMS).all(|d| self.lo[d] <= lo[d] && hi[d] <= self.hi[d])
    }

    /// Whether the box overlaps the region `[lo, hi]`.
    fn overlaps(&self, lo: &[T; DIMS], hi: &[T; DIMS]) -> bool {
        (0..DIMS).all(|d| self.lo[d] <= hi[d] && lo[d] <= self.hi[d])
    }
}

fn prefix_range_v4(a: Ipv4Addr, len: u8) -> Result<(u32, u32), String> {
    if len > 32 {
        return Err(format!("{a}/{len}: prefix length above 32"));
    }
    let a = u32::from(a);
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    Ok((a & mask, (a & mask) | !mask))
}

fn prefix_range_v6(a: Ipv6Addr, len: u8) -> Result<(u128, u128), String> {
    if len > 128 {
        return Err(format!("{a}/{len}: prefix length above 128"));
    }
    let a = u128::from(a);
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    };
    Ok((a & mask, (a & mask) | !mask))
}

/// The matches of one rule, in the terms rules are written in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Match<A> {
    /// Source prefix (address, length); `None`: any.
    pub src: Option<(A, u8)>,
    /// Destination prefix; `None`: any.
    pub dst: Option<(A, u8)>,
    /// Source ports.
    pub sport: RangeInclusive<u16>,
    /// Destination ports.
    pub dport: RangeInclusive<u16>,
    /// Protocol; `None`: any.
    pub proto: Option<u8>,
}

impl<A> Default for Match<A> {
    fn default() -> Self {
        Match {
            src: None,
            dst: None,
            sport: 0..=u16::MAX,
            dport: 0..=u16::MAX,
            proto: None,
        }
    }
}

fn ports<T: From<u16>>(r: &RangeInclusive<u16>, what: &str) -> Result<(T, T), String> {
    if r.start() > r.end() {
        return Err(format!(
            "{what} range {}-{} is reversed",
            r.start(),
            r.end()
        ));
    }
    Ok(((*r.start()).into(), (*r.end()).into()))
}

/// An address family's address, as rules name it.
pub trait Addr: Copy + fmt::Display {
    /// The dimension's value type.
    type F: Field + From<u16> + From<u8>;
    /// The range of `self/len`.
    fn prefix_range(self, len: u8) -> Result<(Self::F, Self::F), String>;
}

impl Addr for Ipv4Addr {
    type F = u32;
    fn prefix_range(self, len: u8) -> Result<(u32, u32), String> {
        prefix_range_v4(self, len)
    }
}

impl Addr for Ipv6Addr {
    type F = u128;
    fn prefix_range(self, len: u8) -> Result<(u128, u128), String> {
        prefix_range_v6(self, len)
    }
}

impl<A: Addr> Match<A> {
    /// The rule's box, or what is wrong with the match.
    pub fn rule(&self) -> Result<Rule<A::F>, String> {
        let mut r = Rule::any();
        for (d, p) in [(dim::SRC, self.src), (dim::DST, self.dst)] {
            if let Some((a, len)) = p {
                (r.lo[d], r.hi[d]) = a.prefix_range(len)?;
            }
        }
        (r.lo[dim::SPORT], r.hi[dim::SPORT]) = ports(&self.sport, "source port")?;
        (r.lo[dim::DPORT], r.hi[dim::DPORT]) = ports(&self.dport, "destination port")?;
        (r.lo[dim::PROTO], r.hi[dim::PROTO]) = match self.proto {
            Some(p) => (p.into(), p.into()),
            None => (0u8.into(), 255u8.into()),
        };
        Ok(r)
    }
}

/// An IPv4 key.
pub fn key_v4(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, proto: u8) -> [u32; DIMS] {
    [
        src.into(),
        dst.into(),
        sport.into(),
        dport.into(),
        proto.into(),
    ]
}

/// An IPv6 key.
pub fn key_v6(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, proto: u8) -> [u128; DIMS] {
    [
        src.into(),
        dst.into(),
        sport.into(),
        dport.into(),
        proto.into(),
    ]
}

/// Build settings.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// A node with at most this many rules is a leaf.
    pub leaf_rules: usize,
    /// Deepest the tree goes.
    pub max_depth: usize,
    /// Most rule entries in all leaves together (rules overlapping both sides of a cut are
    /// copied); past it nodes stop splitting. `None`: 64 per rule, at least 1 << 16.
    pub max_entries: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            leaf_rules: 8,
            max_depth: 64,
            max_entries: None,
        }
    }
}

/// A rule set the classifier refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildError {
    /// The rule's position (0-based).
    pub rule: usize,
    /// What is wrong with it.
    pub what: String,
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rule {}: {}", self.rule, self.what)
    }
}

impl std::error::Error for BuildError {}

#[derive(Clone, Copy, Debug)]
enum Node<T> {
    /// Keys with `key[dim] < at` go to `left`, the others to `left + 1` (the two children
    /// are always made side by side).
    Split { dim: u8, at: T, left: u32 },
    /// Rules `entries[start..start + len]`, in rule order.
    Leaf { start: u32, len: u32 },
}

/// Shape of a built tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Rules.
    pub rules: usize,
    /// Inner nodes.
    pub splits: usize,
    /// Leaves.
    pub leaves: usize,
    /// Rule entries in all leaves (copies included).
    pub entries: usize,
    /// Longest leaf.
    pub max_leaf: usize,
    /// Deepest leaf.
    pub max_depth: usize,
    /// Whether the entry budget stopped the splitting somewhere.
    pub budget_hit: bool,
    /// Bytes of the tree, the leaves' lists and the rules.
    pub bytes: usize,
}

/// A built classifier (immutable: a new rule set is a new classifier, published whole).
#[derive(Clone, Debug)]
pub struct Classifier<T> {
    rules: Vec<Rule<T>>,
    /// Rules with conditions outside their box (TCP flags, DSCP, state), checked by the
    /// caller's filter ([`Classifier::classify_where`]): they never hide later rules.
    partial: Vec<bool>,
    nodes: Vec<Node<T>>,
    entries: Vec<u32>,
    /// One tree per group of rules alike in which dimensions they are wide in, by their
    /// first rule.
    trees: Vec<Tree>,
    stats: Stats,
}

/// A tree of the classifier: its root node and the first rule it holds.
#[derive(Clone, Copy, Debug)]
struct Tree {
    root: u32,
    first_rule: u32,
}

/// Which dimensions a rule is wide in (EffiCuts' separation, Vamanan et al., 2010): rules
/// wide in the same dimensions are cut along the others without copying each other, and
/// the wide ones (default policies, "any" matches) do not force copies of the narrow ones.
fn wide<T: Field>(r: &Rule<T>) -> u8 {
    let addr = |d: usize| T::span_bits(r.lo[d], r.hi[d]) > T::ADDR_BITS / 2;
    // Only the addresses: grouping by the destination port too (8 groups) cost more in
    // lookups than it saved in copies (`bench acl`, docs/performance.md).
    u8::from(addr(dim::SRC)) | u8::from(addr(dim::DST)) << 1
}

/// A node waiting to be built: its slot, region, rules and depth.
struct Pending<T> {
    slot: usize,
    lo: [T; DIMS],
    hi: [T; DIMS],
    rules: Vec<u32>,
    depth: usize,
}

impl<T: Field> Classifier<T> {
    /// Build from `rules` in order (the first match wins).
    pub fn build(rules: Vec<Rule<T>>, opts: Options) -> Result<Classifier<T>, BuildError> {
        let partial = vec![false; rules.len()];
        Self::build_partial(rules, partial, opts)
    }

    /// Build from `rules` in order, where `partial[i]` says rule `i` has conditions beyond
    /// its box: such a rule matches only when the filter given to
    /// [`Classifier::classify_where`] passes it, so it never hides the rules after it.
    /// Missing entries of `partial` count as `false`.
    pub fn build_partial(
        rules: Vec<Rule<T>>,
        mut partial: Vec<bool>,
        opts: Options,
    ) -> Result<Classifier<T>, BuildError> {
        partial.resize(rules.len(), false);
        if rules.len() > u32::MAX as usize / 2 {
            return Err(BuildError {
                rule: rules.len(),
                what: "too many rules".into(),
            });
        }
        for (i, r) in rules.iter().enumerate() {
            if let Some(d) = (0..DIMS).find(|&d| r.lo[d] > r.hi[d]) {
                return Err(BuildError {
                    rule: i,
                    what: format!(
                        "{} range is reversed ({:?} > {:?})",
                        DIM_NAMES[d], r.lo[d], r.hi[d]
                    ),
                });
            }
        }
        let leaf_rules = opts.leaf_rules.max(1);
        let budget = opts
            .max_entries
            .unwrap_or_else(|| rules.len().saturating_mul(64).max(1 << 16));
        let mut c = Classifier {
            nodes: Vec::new(),
            entries: Vec::new(),
            trees: Vec::new(),
            stats: Stats {
                rules: rules.len(),
                ..Default::default()
            },
            rules,
            partial,
        };
        // Rule entries in the leaves and in the nodes waiting to be built.
        let mut used = c.rules.len();
        let mut groups: Vec<(u8, Vec<u32>)> = Vec::new();
        for (i, r) in c.rules.iter().enumerate() {
            let w = wide(r);
            match groups.iter_mut().find(|g| g.0 == w) {
                Some(g) => g.1.push(i as u32),
                None => groups.push((w, vec![i as u32])),
            }
        }
        let mut stack = Vec::new();
        for (_, g) in groups {
            let slot = c.nodes.len();
            c.nodes.push(Node::Leaf { start: 0, len: 0 });
            c.trees.push(Tree {
                root: slot as u32,
                first_rule: g[0],
            });
            stack.push(Pending {
                slot,
                lo: [T::ZERO; DIMS],
                hi: [T::MAX; DIMS],
                rules: g,
                depth: 0,
            });
        }
        while let Some(mut p) = stack.pop() {
            // A rule covering the whole region hides every later one here.
            if let Some(k) = p
                .rules
                .iter()
                .position(|&r| !c.partial[r as usize] && c.rules[r as usize].covers(&p.lo, &p.hi))
            {
                used -= p.rules.len() - (k + 1);
                p.rules.truncate(k + 1);
            }
            let small = p.rules.len() <= leaf_rules || p.depth >= opts.max_depth;
            let over = used > budget;
            let cut = if small || over {
                None
            } else {
                best_cut(&c.rules, &p)
            };
            c.stats.budget_hit |= over && !small;
            match cut {
                None => {
                    c.stats.leaves += 1;
                    c.stats.max_leaf = c.stats.max_leaf.max(p.rules.len());
                    c.stats.max_depth = c.stats.max_depth.max(p.depth);
                    c.nodes[p.slot] = Node::Leaf {
                        start: c.entries.len() as u32,
                        len: p.rules.len() as u32,
                    };
                    c.entries.extend_from_slice(&p.rules);
                }
                Some((d, at, below)) => {
                    c.stats.splits += 1;
                    let (left, right) = (c.nodes.len(), c.nodes.len() + 1);
                    c.nodes.push(Node::Leaf { start: 0, len: 0 });
                    c.nodes.push(Node::Leaf { start: 0, len: 0 });
                    c.nodes[p.slot] = Node::Split {
                        dim: d as u8,
                        at,
                        left: left as u32,
                    };
                    // The left part is [lo, at - 1] (`at` is above the region's low end).
                    let mut lhi = p.hi;
                    lhi[d] = below;
                    let mut rlo = p.lo;
                    rlo[d] = at;
                    let side = |lo: &[T; DIMS], hi: &[T; DIMS]| -> Vec<u32> {
                        p.rules
                            .iter()
                            .copied()
                            .filter(|&r| c.rules[r as usize].overlaps(lo, hi))
                            .collect()
                    };
                    let (l, r) = (side(&p.lo, &lhi), side(&rlo, &p.hi));
                    // The children's lists replace this node's.
                    used = (used + l.len() + r.len()).saturating_sub(p.rules.len());
                    stack.push(Pending {
                        slot: right,
                        lo: rlo,
                        hi: p.hi,
                        rules: r,
                        depth: p.depth + 1,
                    });
                    stack.push(Pending {
                        slot: left,
                        lo: p.lo,
                        hi: lhi,
                        rules: l,
                        depth: p.depth + 1,
                    });
                }
            }
        }
        c.stats.entries = c.entries.len();
        c.stats.bytes = c.nodes.len() * std::mem::size_of::<Node<T>>()
            + c.entries.len() * 4
            + c.rules.len() * std::mem::size_of::<Rule<T>>();
        Ok(c)
    }

    /// The first rule (its index in the rule set) whose box holds `key`.
    #[inline]
    pub fn classify(&self, key: &[T; DIMS]) -> Option<u32> {
        self.classify_where(key, |_| true)
    }

    /// The first rule whose box holds `key` and that `extra` passes (rules built as not
    /// partial are passed without asking).
    #[inline]
    pub fn classify_where(&self, key: &[T; DIMS], extra: impl Fn(u32) -> bool) -> Option<u32> {
        let mut best: Option<u32> = None;
        // Trees in the order of their first rules: once a match comes before a tree's
        // first rule, neither it nor any later tree can do better.
        for t in &self.trees {
            if best.is_some_and(|b| b < t.first_rule) {
                break;
            }
            if let Some(r) = self.walk(t.root as usize, key, &extra) {
                best = Some(best.map_or(r, |b| b.min(r)));
            }
        }
        best
    }

    /// The first rule of one tree that holds `key`.
    #[inline]
    fn walk(&self, root: usize, key: &[T; DIMS], extra: &impl Fn(u32) -> bool) -> Option<u32> {
        let mut i = root;
        // Bounded: every split's children come after it, so at most one visit per node.
        for _ in 0..=self.nodes.len() {
            match *self.nodes.get(i)? {
                Node::Split { dim, at, left } => {
                    // The right child follows the left one: no branch on the comparison.
                    let v = *key.get(dim as usize)?;
                    i = left as usize + usize::from(v >= at);
                }
                Node::Leaf { start, len } => {
                    let (s, n) = (start as usize, len as usize);
                    let list = self.entries.get(s..s + n)?;
                    return list.iter().copied().find(|&r| {
                        self.rules.get(r as usize).is_some_and(|x| x.matches(key))
                            && (!self.partial.get(r as usize).copied().unwrap_or(false) || extra(r))
                    });
                }
            }
        }
        None
    }

    /// Classify `keys` into `out` (one result per key; `out` as long as `keys` or longer).
    pub fn classify_burst(&self, keys: &[[T; DIMS]], out: &mut [Option<u32>]) {
        for (k, o) in keys.iter().zip(out.iter_mut()) {
            *o = self.classify(k);
        }
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[Rule<T>] {
        &self.rules
    }

    /// The tree's shape.
    pub fn stats(&self) -> Stats {
        self.stats
    }
}

/// The best cut of node `p`: (dimension, value, value - 1), keys below the value going
/// left. `None` when no cut helps.
fn best_cut<T: Field>(rules: &[Rule<T>], p: &Pending<T>) -> Option<(usize, T, T)> {
    let n = p.rules.len();
    // (larger side, both sides, smaller side, dimension, value): the first two smallest win.
    let mut best: Option<(usize, usize, usize, usize, T)> = None;
    let mut los: Vec<T> = Vec::with_capacity(n);
    let mut his: Vec<T> = Vec::with_capacity(n);
    let mut cands: Vec<T> = Vec::with_capacity(2 * n);
    for d in 0..DIMS {
        los.clear();
        his.clear();
        for &r in &p.rules {
            let r = rules.get(r as usize)?;
            los.push(r.lo[d].max(p.lo[d]));
            his.push(r.hi[d].min(p.hi[d]));
        }
        los.sort_unstable();
        his.sort_unstable();
        // Candidate cuts: where a rule's range starts or ends within the region.
        cands.clear();
        cands.extend(los.iter().copied().filter(|&v| v > p.lo[d]));
        cands.extend(
            his.iter()
                .copied()
                .filter(|&v| v < p.hi[d])
                .filter_map(Field::succ),
        );
        cands.sort_unstable();
        cands.dedup();
        for &at in &cands {
            // Rules reaching below `at` go left; rules reaching `at` or above go right.
            let left = los.partition_point(|&v| v < at);
            let right = n - his.partition_point(|&v| v < at);
            let score = (left.max(right), left + right, left.min(right), d, at);
            if best.is_none_or(|b| (score.0, score.1) < (b.0, b.1)) {
                best = Some(score);
            }
        }
    }
    let (big, _, small, d, at) = best?;
    // A cut that keeps every rule on one side still helps: the other side has fewer (often
    // none), and the region narrows until rules cover it (and hide the ones after them).
    // Only a cut copying every rule to both sides is useless; with the covering rules
    // dropped at every node, some cut always does better.
    (small < n || big < n)
        .then(|| at.pred().map(|below| (d, at, below)))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    fn linear<T: Field>(rules: &[Rule<T>], key: &[T; DIMS]) -> Option<u32> {
        rules.iter().position(|r| r.matches(key)).map(|i| i as u32)
    }

    #[test]
    fn first_match_wins_and_defaults_catch_the_rest() {
        let rules: Vec<Rule<u32>> = [
            Match {
                dst: Some((v4("10.0.0.0"), 8)),
                dport: 22..=22,
                proto: Some(6),
                ..Default::default()
            },
            Match {
                dst: Some((v4("10.1.0.0"), 16)),
                ..Default::default()
            },
            Match {
                src: Some((v4("192.0.2.0"), 24)),
                dport: 1024..=65535,
                proto: Some(17),
                ..Default::default()
            },
            Match::default(),
        ]
        .iter()
        .map(|m| m.rule().unwrap())
        .collect();
        let c = Classifier::build(rules, Options::default()).unwrap();
        let k = |s, d, sp, dp, p| key_v4(v4(s), v4(d), sp, dp, p);
        assert_eq!(c.classify(&k("1.1.1.1", "10.1.2.3", 5, 22, 6)), Some(0));
        assert_eq!(c.classify(&k("1.1.1.1", "10.1.2.3", 5, 23, 6)), Some(1));
        assert_eq!(c.classify(&k("192.0.2.9", "8.8.8.8", 5, 5000, 17)), Some(2));
        assert_eq!(c.classify(&k("192.0.2.9", "8.8.8.8", 5, 80, 17)), Some(3));
    }

    #[test]
    fn bad_rules_are_named() {
        let e = Match::<Ipv4Addr> {
            #[allow(clippy::reversed_empty_ranges)]
            dport: 90..=80,
            ..Default::default()
        }
        .rule()
        .unwrap_err();
        assert!(
            e.contains("destination port range 90-80 is reversed"),
            "{e}"
        );
        let e = Match {
            src: Some((v4("10.0.0.0"), 33)),
            ..Default::default()
        }
        .rule()
        .unwrap_err();
        assert!(e.contains("10.0.0.0/33"), "{e}");
        let mut r = Rule::<u32>::any();
        r.lo[dim::PROTO] = 7;
        r.hi[dim::PROTO] = 6;
        let e = Classifier::build(vec![Rule::any(), r], Options::default()).unwrap_err();
        assert_eq!(e.rule, 1);
        assert!(e.to_string().contains("protocol range is reversed"), "{e}");
    }

    #[test]
    fn empty_and_unmatched() {
        let c = Classifier::<u32>::build(vec![], Options::default()).unwrap();
        assert_eq!(c.classify(&[0; DIMS]), None);
        let r = Match {
            dst: Some((v4("10.0.0.0"), 8)),
            ..Default::default()
        }
        .rule()
        .unwrap();
        let c = Classifier::build(vec![r], Options::default()).unwrap();
        assert_eq!(
            c.classify(&key_v4(v4("1.2.3.4"), v4("11.0.0.0"), 1, 2, 6)),
            None
        );
    }

    pub(crate) fn acl_like(n: usize, seed: u64) -> Vec<Rule<u32>> {
        crate::gen::acl_rules(n, seed)
            .iter()
            .map(|m| m.rule().unwrap())
            .collect()
    }

    pub(crate) fn keys_for(rules: &[Rule<u32>], n: usize, seed: u64) -> Vec<[u32; DIMS]> {
        crate::gen::traces(rules, n, seed)
    }

    #[test]
    fn agrees_with_a_linear_scan_on_10000_acl_like_rules() {
        let rules = acl_like(10_000, 7);
        let c = Classifier::build(rules.clone(), Options::default()).unwrap();
        let s = c.stats();
        assert!(s.max_leaf <= 64 || s.budget_hit, "{s:?}");
        for k in keys_for(&rules, 100_000, 8) {
            assert_eq!(c.classify(&k), linear(&rules, &k), "{k:?}");
        }
    }

    #[test]
    fn ipv6_rules() {
        let v6 = |s: &str| s.parse::<Ipv6Addr>().unwrap();
        let rules: Vec<Rule<u128>> = [
            Match {
                src: Some((v6("2001:db8:1::"), 48)),
                dport: 443..=443,
                proto: Some(6),
                ..Default::default()
            },
            Match {
                dst: Some((v6("2001:db8::"), 32)),
                proto: Some(58),
                ..Default::default()
            },
            Match::default(),
        ]
        .iter()
        .map(|m| m.rule().unwrap())
        .collect();
        let c = Classifier::build(
            rules.clone(),
            Options {
                leaf_rules: 1,
                ..Default::default()
            },
        )
        .unwrap();
        let k = key_v6(v6("2001:db8:1::5"), v6("2001:db8:ffff::1"), 999, 443, 6);
        assert_eq!(c.classify(&k), Some(0));
        let k = key_v6(v6("2001:db9::5"), v6("2001:db8:ffff::1"), 0, 0, 58);
        assert_eq!(c.classify(&k), Some(1));
        let k = key_v6(v6("::1"), v6("::2"), 1, 2, 17);
        assert_eq!(c.classify(&k), Some(2));
        assert!(c.stats().splits > 0);
    }

    #[test]
    fn the_entry_budget_bounds_copies_and_results_stay_right() {
        // Rules that overlap badly: every source port range crosses every destination one.
        let rules: Vec<Rule<u32>> = (0..400u32)
            .map(|i| {
                let mut r = Rule::any();
                r.lo[dim::SPORT] = i * 100;
                r.hi[dim::SPORT] = 65535;
                r.lo[dim::DPORT] = 0;
                r.hi[dim::DPORT] = 65535 - i * 100;
                r
            })
            .collect();
        let c = Classifier::build(
            rules.clone(),
            Options {
                max_entries: Some(2000),
                ..Default::default()
            },
        )
        .unwrap();
        assert!(c.stats().entries <= 2000 + 400, "{:?}", c.stats());
        for k in keys_for(&rules, 20_000, 3) {
            assert_eq!(c.classify(&k), linear(&rules, &k));
        }
    }

    proptest::proptest! {
        /// Any rule set (random boxes, tiny leaves so the tree is deep) classifies every
        /// key as a linear scan does.
        #[test]
        fn matches_the_linear_reference(
            n in 0usize..120,
            seed in proptest::num::u64::ANY,
            leaf in 1usize..6,
        ) {
            let rules = acl_like(n, seed);
            let c = Classifier::build(rules.clone(), Options { leaf_rules: leaf, ..Default::default() }).unwrap();
            for k in keys_for(&rules, 400, seed ^ 1) {
                proptest::prop_assert_eq!(c.classify(&k), linear(&rules, &k));
            }
        }

        /// Rules with conditions beyond their box (here: a key-dependent filter on some
        /// rules) never hide later ones: the first rule whose box holds the key and whose
        /// filter passes wins, as a linear scan finds.
        #[test]
        fn partial_rules_match_the_linear_reference(
            n in 1usize..100,
            seed in proptest::num::u64::ANY,
            leaf in 1usize..6,
            partial_every in 1usize..4,
        ) {
            let mut rules = acl_like(n, seed);
            // Broad rules too, so that covering (and the pruning it allows) happens.
            rules.insert(n / 2, Rule::any());
            let partial: Vec<bool> = (0..rules.len()).map(|i| i % partial_every == 0).collect();
            let c = Classifier::build_partial(rules.clone(), partial.clone(), Options { leaf_rules: leaf, ..Default::default() }).unwrap();
            for k in keys_for(&rules, 300, seed ^ 7) {
                // The extra condition: an arbitrary function of the rule and the key.
                let extra = |r: u32| !(r as u64 ^ k[dim::SRC] as u64 ^ k[dim::DPORT] as u64).is_multiple_of(3);
                let want = rules.iter().enumerate().position(|(i, r)| r.matches(&k) && (!partial[i] || extra(i as u32))).map(|i| i as u32);
                proptest::prop_assert_eq!(c.classify_where(&k, extra), want);
            }
        }

        /// Arbitrary boxes, wildcards and points included.
        #[test]
        fn arbitrary_boxes(
            boxes in proptest::collection::vec(
                proptest::collection::vec((0u32..50, 0u32..50), DIMS), 0..40),
            keys in proptest::collection::vec(proptest::collection::vec(0u32..52, DIMS), 1..60),
        ) {
            let rules: Vec<Rule<u32>> = boxes.iter().map(|b| {
                let mut r = Rule::any();
                for d in 0..DIMS {
                    let (a, z) = (b[d].0.min(b[d].1), b[d].0.max(b[d].1));
                    r.lo[d] = a;
                    r.hi[d] = if z == 49 { u32::MAX } else { z };
                }
                r
            }).collect();
            let c = Classifier::build(rules.clone(), Options { leaf_rules: 1, ..Default::default() }).unwrap();
            for k in &keys {
                let k: [u32; DIMS] = [k[0], k[1], k[2], k[3], k[4]];
                proptest::prop_assert_eq!(c.classify(&k), linear(&rules, &k));
            }
        }
    }
}
