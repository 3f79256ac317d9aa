//! The rule classifier: which rule, first in order, matches a packet's 5-tuple.
//!
//! A rule is a box in five dimensions (source address, destination address, source port,
//! destination port, protocol), each an inclusive range: a prefix is the range of its
//! addresses, "any" the whole dimension. Rules are ordered; the first whose box holds the
//! key wins, as in nftables chains and ACLs.
//!
//! **How.** Multi-way cut trees in the style of HiCuts/HyperCuts (Gupta and McKeown, 1999;
//! Singh et al., 2003) with EffiCuts' separation (Vamanan et al., 2010):
//! * A node covers a region that is, in every dimension, an aligned block of `2^w` values
//!   (at the root: the whole dimension; ports 16 bits, protocol 8). An inner node cuts one
//!   dimension into `2^k` equal parts (`k` up to [`Options::max_cut_bits`], 12) by the next
//!   `k` bits of the value: a key goes to child `(key[dim] >> shift) & (2^k - 1)`, so one
//!   level costs a shift, a mask and **one load**. The child slots hold the children's
//!   descriptors (dimension, shift, `k`, where their own children start: 64 bits), not
//!   pointers to them, so that load is the whole node.
//! * The cut is chosen among those that copy at most [`Options::space_factor`] (8) times
//!   the node's rules into the children: the fewest rules per child on average wins (so the
//!   widest cut that still separates rules), then the fewest in the fullest child.
//! * A leaf holds the few rules (at most [`Options::leaf_rules`], 8) whose boxes overlap
//!   its region, in rule order, their boxes inline (low ends and spans: a dimension matches
//!   when `key - lo <= span`, wrapping), checked in full. A rule covering a node's whole
//!   region hides every later rule there, so those are dropped: broad rules (default
//!   policies, wide blocks) end lists early. Equal leaves are stored once, and siblings
//!   holding the same rules with the same ranges relative to themselves share one subtree
//!   (it looks at lower bits only).
//! * Rules are split into two trees by whether their destination is wide (more than half
//!   the address bits): the wide ones are not copied into every part of the destination
//!   when the narrow ones are cut along it. A key walks both (the second only when the
//!   first's match does not come before the second tree's first rule) and keeps the first
//!   match.
//! * **Bursts** ([`Classifier::classify_burst`], 256 keys at a time) walk a tree level by
//!   level for all their keys, then check the leaves entry by entry for all of them; after
//!   each round the keys still going are compacted without a branch. The loads of
//!   different keys are independent, so they overlap (memory-level parallelism), and no
//!   branch depends on a key. Single keys ([`Classifier::classify_where`], with the
//!   caller's extra conditions) take the same path alone.
//! * Copies are bounded: slots and entries, the lists of nodes not built yet included,
//!   stay within [`Options::max_entries`] (2 KiB per rule by default); a node whose cut would
//!   pass it stays a leaf, however long, so no rule set makes the build or its memory run
//!   away; lookups just get slower (a linear scan in the worst case).
//! * Keys outside the domain (a port above 65535, a protocol above 255: never from a
//!   packet) are classified by a linear scan.
//!
//! At 10,000 ACL-like rules: about 1,100 inner nodes, 24,500 leaf entries, 1.8 MB, built in
//! about 10 ms; a key takes about 6 steps and 4 leaf entries (docs/performance.md has the
//! figures against DPDK's `rte_acl`).
//!
//! **Why not the others.** A linear scan costs one comparison per rule; tuple-space search
//! (Open vSwitch) hashes once per distinct prefix-length combination and handles port
//! ranges poorly; DPDK's `rte_acl` builds multi-bit tries over the key's bytes (one load
//! per byte, no leaf checks) with a far more complex build; HyperSplit (binary cuts at any
//! value, this module's previous design) needs about 20 dependent levels per tree at
//! 10,000 rules; RFC's cross-product tables blow up at this size. Cuts by bits keep a
//! level to one load, and the burst walk hides its latency.
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
    /// The value, widened.
    fn to_u128(self) -> u128;
    /// The low bits of `v`.
    fn from_u128(v: u128) -> Self;
    /// `self >> (shift % bits)`, truncated to a `usize`.
    fn chunk(self, shift: u32) -> usize;
    /// `self - o`, wrapping.
    fn wsub(self, o: Self) -> Self;
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
    fn to_u128(self) -> u128 {
        self.into()
    }
    fn from_u128(v: u128) -> u32 {
        v as u32
    }
    #[inline(always)]
    fn chunk(self, shift: u32) -> usize {
        self.wrapping_shr(shift) as usize
    }
    #[inline(always)]
    fn wsub(self, o: Self) -> Self {
        self.wrapping_sub(o)
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
    fn to_u128(self) -> u128 {
        self
    }
    fn from_u128(v: u128) -> u128 {
        v
    }
    #[inline(always)]
    fn chunk(self, shift: u32) -> usize {
        self.wrapping_shr(shift) as usize
    }
    #[inline(always)]
    fn wsub(self, o: Self) -> Self {
        self.wrapping_sub(o)
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
    /// Most memory of all trees together, in 8-byte slots: child slots of the inner nodes
    /// count one each, rule entries in the leaves (a rule's box inline: 44 bytes for IPv4,
    /// 176 for IPv6) 6 or 22; nodes whose cut would pass it stay leaves. `None`: 256 per
    /// rule (2 KiB), at least 1 << 17 (1 MiB).
    pub max_entries: Option<usize>,
    /// Most children of one node, as a power of two (a node cuts its region into `2^k`
    /// equal parts, `k` at most this, 1 to 15).
    pub max_cut_bits: u32,
    /// Space factor (HiCuts' `spfac`): a node's cut may make at most this many times its
    /// rule count in child slots and rule entries together.
    pub space_factor: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            leaf_rules: 8,
            max_depth: 64,
            max_entries: None,
            max_cut_bits: 12,
            space_factor: 8,
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

/// Shape of a built classifier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Rules.
    pub rules: usize,
    /// Inner nodes (each cuts its region `2^k` ways).
    pub splits: usize,
    /// Leaves (distinct rule lists).
    pub leaves: usize,
    /// Rule entries in all leaves (copies included).
    pub entries: usize,
    /// Longest leaf.
    pub max_leaf: usize,
    /// Deepest leaf (inner nodes on the way).
    pub max_depth: usize,
    /// Whether the slot budget stopped the splitting somewhere.
    pub budget_hit: bool,
    /// Bytes of the trees (slots) and the rules.
    pub bytes: usize,
    /// Trees.
    pub trees: usize,
    /// Rules looked at by the cut choices plus children made (bounded: 128 per rule, at
    /// least 2^18).
    pub work: usize,
}

/// Bits of each dimension's domain: addresses, 16-bit ports, 8-bit protocol. Keys outside
/// it (a port above 65535, a protocol above 255: never from a packet) are classified by a
/// linear scan.
fn dim_bits<T: Field>(d: usize) -> u32 {
    match d {
        dim::SRC | dim::DST => T::ADDR_BITS,
        dim::SPORT | dim::DPORT => 16,
        _ => 8,
    }
}

/// `2^bits - 1` (all ones for 128).
fn ones(bits: u32) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

// A slot is a node's descriptor, 64 bits:
// * inner node: bits 0-31 the first of its `2^k` child slots, 32-35 `k` (1-15), 36-38 the
//   dimension, 39-45 the shift: a key goes to child slot `base + (key[dim] >> shift) & (2^k
//   - 1)`, which holds the child's descriptor (so one load per level);
// * leaf: `k` = 0, bits 0-31 the first of its entries ([`Entry`]), bits 36-63 their count;
//   a step from a leaf stays there.
const K_AT: u32 = 32;
const DIM_AT: u32 = 36;
const SHIFT_AT: u32 = 39;
const LEN_AT: u32 = 36;
/// Longest leaf a descriptor can hold.
const MAX_LEAF: usize = (1 << (64 - LEN_AT)) - 1;

fn inner_desc(base: usize, k: u32, d: usize, shift: u32) -> u64 {
    base as u64 | u64::from(k) << K_AT | (d as u64) << DIM_AT | u64::from(shift) << SHIFT_AT
}

fn leaf_desc(slot: usize, len: usize) -> u64 {
    slot as u64 | (len as u64) << LEN_AT
}

/// One step down from descriptor `d` (a leaf stays put).
#[inline(always)]
fn step<T: Field>(slots: &[u64], d: u64, key: &[T; DIMS]) -> u64 {
    let k = (d >> K_AT) & 15;
    let dm = (((d >> DIM_AT) & 7) as usize).min(DIMS - 1);
    let shift = ((d >> SHIFT_AT) & 127) as u32;
    let idx = key[dm].chunk(shift) & ((1usize << k) - 1);
    let i = (d as u32 as usize).wrapping_add(idx);
    match slots.get(i) {
        Some(&n) if k != 0 => n,
        _ => d,
    }
}

#[inline(always)]
fn is_leaf(d: u64) -> bool {
    (d >> K_AT) & 15 == 0
}

/// A rule in a leaf, its box inline (no second load to reach it) as low ends and spans:
/// a key is in it when `key - lo <= span` in every dimension (wrapping: below `lo` wraps
/// above any span).
#[derive(Clone, Copy, Debug)]
struct Entry<T> {
    lo: [T; DIMS],
    span: [T; DIMS],
    rule: u32,
}

impl<T: Field> Entry<T> {
    #[inline(always)]
    fn matches(&self, key: &[T; DIMS]) -> bool {
        let mut ok = true;
        for ((k, lo), span) in key.iter().zip(&self.lo).zip(&self.span) {
            ok &= k.wsub(*lo) <= *span;
        }
        ok
    }
}

/// Slots (8 bytes) an entry counts for in the budget.
fn entry_slots<T>() -> usize {
    std::mem::size_of::<Entry<T>>().div_ceil(8)
}

/// The entries of leaf descriptor `d`.
#[inline(always)]
fn leaf_entries<T>(entries: &[Entry<T>], d: u64) -> &[Entry<T>] {
    let s = d as u32 as usize;
    let n = (d >> LEN_AT) as usize;
    entries.get(s..s.wrapping_add(n)).unwrap_or(&[])
}

/// A tree of the classifier: its root's descriptor, the first rule it holds, and the most
/// steps from the root to a leaf.
#[derive(Clone, Copy, Debug)]
struct Tree {
    root: u64,
    first_rule: u32,
    depth: u32,
}

/// A built classifier (immutable: a new rule set is a new classifier, published whole).
#[derive(Clone, Debug)]
pub struct Classifier<T> {
    rules: Vec<Rule<T>>,
    /// Rules with conditions outside their box (TCP flags, DSCP, state), checked by the
    /// caller's filter ([`Classifier::classify_where`]): they never hide later rules.
    partial: Vec<bool>,
    /// Every tree's nodes (see the descriptor layout above).
    slots: Vec<u64>,
    /// Every leaf's rules.
    entries: Vec<Entry<T>>,
    /// One tree per group of rules alike in which dimensions they are wide in, in the order
    /// of their first rules.
    trees: Vec<Tree>,
    /// Highest value per dimension of the domain the trees cover.
    dom_hi: [T; DIMS],
    stats: Stats,
}

/// The group of a rule's tree: whether its destination is wide (EffiCuts' separation,
/// Vamanan et al., 2010): rules wide in a dimension are not copied into every part of it
/// when the narrow ones are cut along it. Only the destination: grouping by the source too
/// (4 trees) cost more in lookups than it saved in copies (131-134 against 103-112 cycles
/// at 10,000 rules), and one tree for all had to copy 3 times the entries (`bench acl`,
/// docs/performance.md).
fn wide<T: Field>(r: &Rule<T>) -> u8 {
    u8::from(T::span_bits(r.lo[dim::DST], r.hi[dim::DST]) > T::ADDR_BITS / 2)
}

/// Keys classified side by side in [`Classifier::classify_burst`].
const LANES: usize = 256;

/// The tree builder's state.
struct Builder<'a, T> {
    rules: &'a [Rule<T>],
    partial: &'a [bool],
    slots: Vec<u64>,
    entries: Vec<Entry<T>>,
    /// Leaves by rule list: the same list anywhere is the same leaf.
    leaves: std::collections::HashMap<Vec<u32>, u64>,
    budget: usize,
    /// Entries of the lists of nodes made but not built yet: with the slots and entries
    /// made, never above the budget (a node splits only if its children's lists fit), so
    /// the budget bounds the memory whatever the rules.
    pending: usize,
    /// Rules looked at by cut choices and children made so far, and the most allowed: past
    /// it nodes stay leaves, so the build's time is bounded too (a cut may keep most rules
    /// in one child, and a chain of those would look at the same rules again and again).
    work: usize,
    max_work: usize,
    opts: Options,
    stats: Stats,
    /// Deepest leaf of the tree being built.
    depth: usize,
}

impl<T: Field> Builder<'_, T> {
    fn leaf(&mut self, list: Vec<u32>) -> u64 {
        if let Some(&d) = self.leaves.get(&list) {
            return d;
        }
        let d = leaf_desc(self.entries.len(), list.len());
        for &r in &list {
            let x = &self.rules[r as usize];
            self.entries.push(Entry {
                lo: x.lo,
                span: std::array::from_fn(|i| x.hi[i].wsub(x.lo[i])),
                rule: r,
            });
        }
        self.stats.leaves += 1;
        self.stats.entries += list.len();
        self.stats.max_leaf = self.stats.max_leaf.max(list.len());
        self.leaves.insert(list, d);
        d
    }

    /// The node over region `lo` + `[0, 2^w)` per dimension holding the rules of `list`
    /// (all of which overlap it), in order; its descriptor.
    fn node(&mut self, lo: [u128; DIMS], w: [u32; DIMS], mut list: Vec<u32>, depth: usize) -> u64 {
        // This node's list leaves the pending ones (it becomes a leaf's or its children's).
        self.pending = self.pending.saturating_sub(list.len());
        let hi: [u128; DIMS] = std::array::from_fn(|d| lo[d] + ones(w[d]));
        // A rule covering the whole region hides every later one here.
        if let Some(k) = list.iter().position(|&r| {
            let r = r as usize;
            !self.partial[r]
                && (0..DIMS).all(|d| {
                    self.rules[r].lo[d].to_u128() <= lo[d] && hi[d] <= self.rules[r].hi[d].to_u128()
                })
        }) {
            list.truncate(k + 1);
        }
        let small = list.len() <= self.opts.leaf_rules.max(1) || depth >= self.opts.max_depth;
        let cut = if small {
            None
        } else if self.work > self.max_work {
            self.stats.budget_hit = true;
            None
        } else {
            self.work += list.len();
            let c = self.choose(&list, &lo, &hi, &w);
            if c.is_some_and(|(_, _, cost)| {
                let e = entry_slots::<T>();
                self.slots.len() + (self.entries.len() + self.pending) * e + cost > self.budget
            }) {
                self.stats.budget_hit = true;
                None
            } else {
                c
            }
        };
        let Some((d, k, _)) = cut else {
            self.depth = self.depth.max(depth);
            self.stats.max_depth = self.stats.max_depth.max(depth);
            return self.leaf(list);
        };
        self.stats.splits += 1;
        let shift = w[d] - k;
        let n = 1usize << k;
        self.work += n;
        let base = self.slots.len();
        self.slots.resize(base + n, 0);
        // Each child's rules with their ranges in `d` relative to the child: two children
        // alike in both have the same subtree (it looks at lower bits only), built once.
        let mut kids: Vec<Vec<(u32, u128, u128)>> = vec![Vec::new(); n];
        for &r in &list {
            let rule = &self.rules[r as usize];
            let a = rule.lo[d].to_u128().max(lo[d]) - lo[d];
            let b = rule.hi[d].to_u128().min(hi[d]) - lo[d];
            let (ca, cb) = ((a >> shift) as usize, (b >> shift) as usize);
            let m = ones(shift);
            for (c, kid) in kids.iter_mut().enumerate().take(cb + 1).skip(ca) {
                let rl = if c == ca { a & m } else { 0 };
                let rh = if c == cb { b & m } else { m };
                kid.push((r, rl, rh));
            }
        }
        self.pending += kids.iter().map(Vec::len).sum::<usize>();
        let mut cw = w;
        cw[d] = shift;
        let mut done: std::collections::HashMap<Vec<(u32, u128, u128)>, u64> =
            std::collections::HashMap::new();
        for (c, kid) in kids.into_iter().enumerate() {
            let desc = match done.get(&kid) {
                Some(&x) => {
                    self.pending = self.pending.saturating_sub(kid.len());
                    x
                }
                None => {
                    let mut clo = lo;
                    clo[d] = lo[d] + ((c as u128) << shift);
                    let x = self.node(clo, cw, kid.iter().map(|e| e.0).collect(), depth + 1);
                    done.insert(kid, x);
                    x
                }
            };
            self.slots[base + c] = desc;
        }
        inner_desc(base, k, d, shift)
    }

    /// The best cut of a node: (dimension, bits, slots it costs), among those within the
    /// space factor the fewest rules per child on average winning (so the widest cut that
    /// still separates rules), then the fewest in the fullest child.
    fn choose(
        &self,
        list: &[u32],
        lo: &[u128; DIMS],
        hi: &[u128; DIMS],
        w: &[u32; DIMS],
    ) -> Option<(usize, u32, usize)> {
        let n = list.len();
        let limit = self.opts.space_factor.max(1).saturating_mul(n);
        // (average child, fullest child, entries, dimension, bits)
        let mut best: Option<(usize, usize, usize, usize, u32)> = None;
        let mut rel: Vec<(u128, u128)> = Vec::with_capacity(n);
        let mut diff: Vec<isize> = Vec::new();
        for d in 0..DIMS {
            rel.clear();
            for &r in list {
                let rule = &self.rules[r as usize];
                rel.push((
                    rule.lo[d].to_u128().max(lo[d]) - lo[d],
                    rule.hi[d].to_u128().min(hi[d]) - lo[d],
                ));
            }
            for k in 1..=w[d].min(self.opts.max_cut_bits.clamp(1, 15)) {
                let shift = w[d] - k;
                let nc = 1usize << k;
                diff.clear();
                diff.resize(nc + 1, 0);
                let mut sum = 0usize;
                for &(a, b) in &rel {
                    let (ca, cb) = ((a >> shift) as usize, (b >> shift) as usize);
                    diff[ca] += 1;
                    diff[cb + 1] -= 1;
                    sum += cb - ca + 1;
                }
                if k > 1 && sum + nc > limit {
                    break;
                }
                if sum >= n * nc {
                    // Every rule in every child: no help (yet; a finer cut may be).
                    continue;
                }
                let (mut run, mut full) = (0isize, 0isize);
                for &x in &diff[..nc] {
                    run += x;
                    full = full.max(run);
                }
                let avg = (sum << 8) / nc;
                // Rules per child on average (in 256ths), then in the fullest child.
                let cand = (avg, full as usize, sum, d, k);
                if best.is_none_or(|b| (cand.0, cand.1) < (b.0, b.1)) {
                    best = Some(cand);
                }
            }
        }
        best.map(|(_, _, sum, d, k)| (d, k, sum * entry_slots::<T>() + (1 << k)))
    }
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
        if rules.len() > MAX_LEAF {
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
        let dom_hi: [T; DIMS] = std::array::from_fn(|d| T::from_u128(ones(dim_bits::<T>(d))));
        let budget = opts
            .max_entries
            .unwrap_or_else(|| rules.len().saturating_mul(256).max(1 << 17))
            .min(u32::MAX as usize / 2);
        let mut b = Builder {
            rules: &rules,
            partial: &partial,
            slots: Vec::new(),
            entries: Vec::new(),
            leaves: std::collections::HashMap::new(),
            budget,
            pending: 0,
            work: 0,
            max_work: rules.len().saturating_mul(128).max(1 << 18),
            opts,
            stats: Stats {
                rules: rules.len(),
                ..Default::default()
            },
            depth: 0,
        };
        // Slot 0: the empty leaf.
        b.leaf(Vec::new());
        // Rules grouped by wideness, each group in order; rules outside the domain (in some
        // dimension) can match no key the trees see and are left out of them.
        let mut groups: Vec<(u8, Vec<u32>)> = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            if (0..DIMS).any(|d| r.lo[d] > dom_hi[d]) {
                continue;
            }
            let w = wide(r);
            match groups.iter_mut().find(|g| g.0 == w) {
                Some(g) => g.1.push(i as u32),
                None => groups.push((w, vec![i as u32])),
            }
        }
        let mut trees = Vec::new();
        for (_, g) in groups {
            b.depth = 0;
            let first_rule = g[0];
            b.pending += g.len();
            let root = b.node([0; DIMS], std::array::from_fn(dim_bits::<T>), g, 0);
            trees.push(Tree {
                root,
                first_rule,
                depth: b.depth as u32,
            });
        }
        let mut stats = b.stats;
        stats.work = b.work;
        let (slots, entries) = (b.slots, b.entries);
        stats.trees = trees.len();
        stats.bytes = slots.len() * 8
            + entries.len() * std::mem::size_of::<Entry<T>>()
            + rules.len() * std::mem::size_of::<Rule<T>>();
        Ok(Classifier {
            rules,
            partial,
            slots,
            entries,
            trees,
            dom_hi,
            stats,
        })
    }

    /// Whether every dimension of `key` is within the trees' domain.
    #[inline(always)]
    fn in_domain(&self, key: &[T; DIMS]) -> bool {
        let mut ok = true;
        for (k, h) in key.iter().zip(&self.dom_hi) {
            ok &= k <= h;
        }
        ok
    }

    /// The first rule matching `key` and passed by `extra`, by a scan of every rule.
    fn linear(&self, key: &[T; DIMS], extra: impl Fn(u32) -> bool) -> Option<u32> {
        self.rules
            .iter()
            .zip(&self.partial)
            .enumerate()
            .find(|(i, (r, &p))| r.matches(key) && (!p || extra(*i as u32)))
            .map(|(i, _)| i as u32)
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
        if !self.in_domain(key) {
            return self.linear(key, extra);
        }
        let mut best = u32::MAX;
        // Trees in the order of their first rules: once a match comes before a tree's
        // first rule, neither it nor any later tree can do better.
        for t in &self.trees {
            if best < t.first_rule {
                break;
            }
            let mut d = t.root;
            for _ in 0..t.depth {
                if is_leaf(d) {
                    break;
                }
                d = step(&self.slots, d, key);
            }
            for e in leaf_entries(&self.entries, d) {
                if e.rule >= best {
                    break;
                }
                if e.matches(key)
                    && (!self.partial.get(e.rule as usize).copied().unwrap_or(false)
                        || extra(e.rule))
                {
                    best = e.rule;
                    break;
                }
            }
        }
        (best != u32::MAX).then_some(best)
    }

    /// Classify `keys` into `out` (one result per key; `out` as long as `keys` or longer),
    /// as [`Classifier::classify`] does: keys go down each tree side by side, one level
    /// for all of them at a time, so that their memory accesses overlap.
    pub fn classify_burst(&self, keys: &[[T; DIMS]], out: &mut [Option<u32>]) {
        for (k, o) in keys.chunks(LANES).zip(out.chunks_mut(LANES)) {
            self.lanes(k, o);
        }
    }

    #[inline]
    fn lanes(&self, keys: &[[T; DIMS]], out: &mut [Option<u32>]) {
        let n = keys.len().min(out.len()).min(LANES);
        let keys = &keys[..n];
        let mut best = [u32::MAX; LANES];
        let mut cur = [0u64; LANES];
        let mut live = [0u8; LANES];
        let mut pos = [0usize; LANES];
        let mut end = [0usize; LANES];
        for t in &self.trees {
            if best[..n].iter().all(|&b| b < t.first_rule) {
                break;
            }
            cur[..n].fill(t.root);
            // The lanes not at a leaf yet, compacted after every step (without branches):
            // each step costs the keys still walking, not the deepest one's depth for all.
            let mut nl = 0;
            if !is_leaf(t.root) {
                for (j, l) in live[..n].iter_mut().enumerate() {
                    *l = j as u8;
                }
                nl = n;
            }
            for _ in 0..t.depth {
                if nl == 0 {
                    break;
                }
                let mut m = 0;
                for i in 0..nl {
                    let j = usize::from(live[i]) % LANES;
                    let c = step(&self.slots, cur[j], &keys[j]);
                    cur[j] = c;
                    live[m] = j as u8;
                    m += usize::from(!is_leaf(c));
                }
                nl = m;
            }
            // The leaves' entries, one per lane at a time, compacting the lanes still
            // looking (no match yet, entries left below their best).
            nl = 0;
            for (j, &c) in cur[..n].iter().enumerate() {
                pos[j] = c as u32 as usize;
                end[j] = pos[j].wrapping_add((c >> LEN_AT) as usize);
                live[nl] = j as u8;
                nl += usize::from(pos[j] < end[j]);
            }
            while nl > 0 {
                let mut m = 0;
                for i in 0..nl {
                    let j = usize::from(live[i]) % LANES;
                    let p = pos[j];
                    let (hit, e, below) = match self.entries.get(p) {
                        Some(e) => {
                            let below = e.rule < best[j];
                            (below & e.matches(&keys[j]), e.rule, below)
                        }
                        None => (false, 0, false),
                    };
                    best[j] = if hit { e } else { best[j] };
                    pos[j] = p + 1;
                    live[m] = j as u8;
                    m += usize::from(below & !hit & (p + 1 < end[j]));
                }
                nl = m;
            }
        }
        for ((o, &b), key) in out[..n].iter_mut().zip(&best[..n]).zip(keys) {
            *o = if self.in_domain(key) {
                (b != u32::MAX).then_some(b)
            } else {
                self.linear(key, |_| true)
            };
        }
    }

    /// Work for one key (tuning aid): per tree visited, (steps to its leaf, leaf entries
    /// read).
    #[cfg(feature = "gen")]
    pub fn work(&self, key: &[T; DIMS]) -> Vec<(u32, u32)> {
        let mut best = u32::MAX;
        let mut v = Vec::new();
        for t in &self.trees {
            if best < t.first_rule {
                break;
            }
            let mut d = t.root;
            let mut steps = 0;
            while d >> K_AT & 15 != 0 {
                d = step(&self.slots, d, key);
                steps += 1;
            }
            let mut read = 0;
            for e in leaf_entries(&self.entries, d) {
                read += 1;
                if e.rule >= best {
                    break;
                }
                if e.matches(key) {
                    best = e.rule;
                    break;
                }
            }
            v.push((steps, read));
        }
        v
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[Rule<T>] {
        &self.rules
    }

    /// The trees' shape.
    pub fn stats(&self) -> Stats {
        self.stats
    }
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

    /// Keys inside, at the edges of and just past the rules' boxes, in every dimension
    /// independently, plus some beyond the trees' domain (ports above 65535, protocols
    /// above 255), for any `T`.
    fn keys_near<T: Field>(rules: &[Rule<T>], n: usize, seed: u64) -> Vec<[T; DIMS]> {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        (0..n)
            .map(|_| {
                let mut k = [T::ZERO; DIMS];
                for (d, v) in k.iter_mut().enumerate() {
                    let r = if rules.is_empty() {
                        Rule::any()
                    } else {
                        rules[rng.gen_range(0..rules.len())]
                    };
                    *v = match rng.gen_range(0..6) {
                        0 => r.lo[d],
                        1 => r.hi[d],
                        2 => r.hi[d].succ().unwrap_or(r.hi[d]),
                        3 => r.lo[d].pred().unwrap_or(r.lo[d]),
                        4 if rng.gen_bool(0.05) => T::from_u128(rng.gen::<u128>()),
                        _ => {
                            let (a, b) = (r.lo[d].to_u128(), r.hi[d].to_u128());
                            T::from_u128(a + rng.gen::<u128>() % (b - a).saturating_add(1).max(1))
                        }
                    };
                }
                k
            })
            .collect()
    }

    fn v6_rules(n: usize, seed: u64) -> Vec<Rule<u128>> {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let nets = [
            0x2001_0db8u128 << 96,
            0xfd00u128 << 112,
            0x2a02_1234u128 << 96,
        ];
        let prefix = |rng: &mut rand::rngs::SmallRng| -> Option<(Ipv6Addr, u8)> {
            if rng.gen_bool(0.2) {
                return None;
            }
            let len = [16u8, 32, 48, 56, 64, 64, 96, 128][rng.gen_range(0..8)];
            let a = nets[rng.gen_range(0..nets.len())] | rng.gen::<u128>() >> 32;
            let a = a & (u128::MAX << (128 - u32::from(len)));
            Some((Ipv6Addr::from(a), len))
        };
        (0..n)
            .map(|_| {
                let p = rng.gen_range(0..65000u16);
                Match {
                    src: prefix(&mut rng),
                    dst: prefix(&mut rng),
                    sport: if rng.gen_bool(0.8) {
                        0..=65535
                    } else {
                        p..=p + 500
                    },
                    dport: match rng.gen_range(0..3) {
                        0 => 0..=65535,
                        1 => p..=p,
                        _ => p..=p.saturating_add(rng.gen_range(0..3000)),
                    },
                    proto: [None, Some(6), Some(17), Some(58)][rng.gen_range(0..4)],
                }
                .rule()
                .unwrap()
            })
            .collect()
    }

    fn check_both_paths<T: Field>(
        c: &Classifier<T>,
        rules: &[Rule<T>],
        keys: &[[T; DIMS]],
        burst: usize,
    ) -> Result<(), String> {
        let mut out = vec![Some(u32::MAX); keys.len() + 3];
        for (k, o) in keys.chunks(burst.max(1)).zip(out.chunks_mut(burst.max(1))) {
            c.classify_burst(k, o);
        }
        for (i, k) in keys.iter().enumerate() {
            let want = linear(rules, k);
            if c.classify(k) != want || out[i] != want {
                return Err(format!(
                    "{k:?}: one {:?}, burst {:?}, linear {want:?}",
                    c.classify(k),
                    out[i]
                ));
            }
        }
        // Past the keys, `out` is left alone.
        if out[keys.len()..].iter().any(|&o| o != Some(u32::MAX)) {
            return Err("burst wrote past its keys".into());
        }
        Ok(())
    }

    #[test]
    fn rules_that_overlap_badly_stay_within_budget_and_right() {
        // 10,000 boxes of random ranges in every dimension: every cut copies most of them.
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
        let rules: Vec<Rule<u32>> = (0..10_000)
            .map(|_| {
                let mut r = Rule::any();
                for (d, max) in [
                    (0, u32::MAX),
                    (1, u32::MAX),
                    (2, 65535),
                    (3, 65535),
                    (4, 255),
                ] {
                    let (a, b) = (rng.gen_range(0..=max), rng.gen_range(0..=max));
                    (r.lo[d], r.hi[d]) = (a.min(b), a.max(b));
                }
                r
            })
            .collect();
        let t = std::time::Instant::now();
        let c = Classifier::build(rules.clone(), Options::default()).unwrap();
        let s = c.stats();
        // The budget: 2 KiB per rule, plus the rules (40 bytes each) and the roots' lists.
        assert!(s.budget_hit, "{s:?}");
        assert!(s.bytes < 10_000 * (2048 + 40 + 48), "{s:?}");
        assert!(t.elapsed().as_secs() < 20, "{s:?} in {:?}", t.elapsed());
        check_both_paths(&c, &rules, &keys_near(&rules, 3000, 6), 256).unwrap();
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

        /// Bursts (of any length, keys walking the trees side by side) classify as single
        /// keys and a linear scan do, keys outside the trees' domain included.
        #[test]
        fn bursts_match_the_linear_reference(
            n in 0usize..300,
            seed in proptest::num::u64::ANY,
            leaf in 1usize..10,
            bits in 1u32..13,
            spfac in 1usize..10,
            burst in 1usize..300,
        ) {
            let rules = acl_like(n, seed);
            let opts = Options { leaf_rules: leaf, max_cut_bits: bits, space_factor: spfac, ..Default::default() };
            let c = Classifier::build(rules.clone(), opts).unwrap();
            let mut keys = keys_for(&rules, 300, seed ^ 3);
            keys.extend(keys_near(&rules, 300, seed ^ 4));
            proptest::prop_assert_eq!(check_both_paths(&c, &rules, &keys, burst), Ok(()));
        }

        /// IPv6 rule sets, single keys and bursts.
        #[test]
        fn ipv6_matches_the_linear_reference(
            n in 0usize..200,
            seed in proptest::num::u64::ANY,
            leaf in 1usize..10,
            burst in 1usize..300,
        ) {
            let rules = v6_rules(n, seed);
            let c = Classifier::build(rules.clone(), Options { leaf_rules: leaf, ..Default::default() }).unwrap();
            let keys = keys_near(&rules, 400, seed ^ 5);
            proptest::prop_assert_eq!(check_both_paths(&c, &rules, &keys, burst), Ok(()));
        }

        /// A small budget: longer leaves, the same answers.
        #[test]
        fn tight_budgets_match_the_linear_reference(
            n in 1usize..300,
            seed in proptest::num::u64::ANY,
            budget in 0usize..2000,
        ) {
            let rules = acl_like(n, seed);
            let c = Classifier::build(rules.clone(), Options { max_entries: Some(budget), leaf_rules: 2, ..Default::default() }).unwrap();
            proptest::prop_assert!(c.stats().entries <= budget + n, "{:?}", c.stats());
            let keys = keys_for(&rules, 300, seed ^ 9);
            proptest::prop_assert_eq!(check_both_paths(&c, &rules, &keys, 256), Ok(()));
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
