//! The speaker's RIB: every neighbour's paths per prefix (Adj-RIB-In after import) and the
//! best one (Loc-RIB), with the FIB changes that selection implies.
//!
//! A path's attributes are interned ([`Paths`]): a full table from one neighbour shares a
//! few hundred thousand attribute sets at most, and a table generated or re-advertised in
//! bulk shares one per UPDATE, so a prefix holds only a 4-byte path id per neighbour.
//! Changes are reported only when the FIB's view changes: the best path's next hop, or the
//! prefix appearing or going away.

use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::wire::Attrs;

/// A neighbour's index in the speaker's configuration.
pub type PeerId = u16;

/// A path as received from a neighbour, with what import decided about it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PathInfo {
    /// Who sent it.
    pub peer: PeerId,
    /// The neighbour's BGP identifier (a tie breaker).
    pub peer_router_id: Ipv4Addr,
    /// The neighbour's address (the last tie breaker).
    pub peer_addr: IpAddr,
    /// Learned over eBGP.
    pub ebgp: bool,
    /// LOCAL_PREF after import (the neighbour's setting for eBGP, the attribute for iBGP).
    pub local_pref: u32,
    /// Where to forward.
    pub next_hop: IpAddr,
    /// The attributes as received.
    pub attrs: Arc<Attrs>,
}

/// Options of the decision process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Decision {
    /// Compare MED between paths from different neighbouring ASes too (FRR's and Junos'
    /// `always-compare-med`); by default, as RFC 4271 says, only within one neighbouring AS.
    pub always_compare_med: bool,
}

/// Candidates still in the running, as a bit set: up to 64 inline (the common case: one
/// path per neighbour), more on the heap.
struct Alive(smallvec::SmallVec<[u64; 1]>);

impl Alive {
    fn all(n: usize) -> Alive {
        let mut w = smallvec::SmallVec::from_elem(0u64, n.div_ceil(64).max(1));
        for i in 0..n {
            w[i / 64] |= 1 << (i % 64);
        }
        Alive(w)
    }
    fn has(&self, i: usize) -> bool {
        self.0.get(i / 64).is_some_and(|w| w >> (i % 64) & 1 == 1)
    }
    fn kill(&mut self, i: usize) {
        if let Some(w) = self.0.get_mut(i / 64) {
            *w &= !(1 << (i % 64));
        }
    }
    /// Keep only the candidates whose `key` is the smallest among those alive.
    fn keep_min<K: Ord>(&mut self, n: usize, key: impl Fn(usize) -> K) {
        let Some(min) = (0..n).filter(|&i| self.has(i)).map(&key).min() else {
            return;
        };
        for i in 0..n {
            if self.has(i) && key(i) != min {
                self.kill(i);
            }
        }
    }
}

/// RFC 4271 §9.1.2.2: the index of the best of `paths` (`None` when there are none). Each
/// step removes candidates, in order: highest LOCAL_PREF; shortest AS_PATH (a set counts
/// one); lowest ORIGIN; within each neighbouring AS (or across all with
/// [`Decision::always_compare_med`]), lowest MED (a missing MED is 0); eBGP over iBGP;
/// lowest BGP identifier; lowest neighbour address. The result depends on the set of
/// paths only, never on their order (MED compared pairwise would not be transitive: A beats
/// B by MED, B beats C by router id, C beats A by router id).
pub fn select_best(paths: &[&PathInfo], d: Decision) -> Option<usize> {
    let n = paths.len();
    if n == 0 {
        return None;
    }
    let mut alive = Alive::all(n);
    alive.keep_min(n, |i| std::cmp::Reverse(paths[i].local_pref));
    alive.keep_min(n, |i| paths[i].attrs.as_path.path_len());
    alive.keep_min(n, |i| paths[i].attrs.origin);
    // MED, per neighbouring AS: a path goes when another of its AS has a lower MED.
    let med = |i: usize| paths[i].attrs.med.unwrap_or(0);
    let group = |i: usize| {
        if d.always_compare_med {
            None
        } else {
            paths[i].attrs.as_path.first()
        }
    };
    let mut beaten = Alive(smallvec::SmallVec::from_elem(0u64, n.div_ceil(64).max(1)));
    for i in 0..n {
        if alive.has(i)
            && (0..n).any(|j| j != i && alive.has(j) && group(j) == group(i) && med(j) < med(i))
        {
            beaten.0[i / 64] |= 1 << (i % 64);
        }
    }
    for i in 0..n {
        if beaten.has(i) {
            alive.kill(i);
        }
    }
    alive.keep_min(n, |i| !paths[i].ebgp);
    alive.keep_min(n, |i| (paths[i].peer_router_id, paths[i].peer_addr));
    (0..n).find(|&i| alive.has(i))
}

/// Id of an interned path.
type PathId = u32;

/// Interned paths with reference counts.
#[derive(Default)]
struct Paths {
    slots: Vec<Option<(Arc<PathInfo>, u32)>>,
    free: Vec<PathId>,
    by_value: FxHashMap<Arc<PathInfo>, PathId>,
}

impl Paths {
    fn intern(&mut self, p: &Arc<PathInfo>) -> PathId {
        if let Some(&id) = self.by_value.get(p) {
            return id;
        }
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = Some((p.clone(), 0));
                id
            }
            None => {
                self.slots.push(Some((p.clone(), 0)));
                (self.slots.len() - 1) as PathId
            }
        };
        self.by_value.insert(p.clone(), id);
        id
    }

    fn get(&self, id: PathId) -> &PathInfo {
        match &self.slots[id as usize] {
            Some((p, _)) => p,
            None => unreachable!("path {id} used after release"),
        }
    }

    fn acquire(&mut self, id: PathId) {
        if let Some((_, refs)) = &mut self.slots[id as usize] {
            *refs += 1;
        }
    }

    fn release(&mut self, id: PathId) {
        let slot = &mut self.slots[id as usize];
        let gone = match slot {
            Some((_, refs)) => {
                *refs -= 1;
                *refs == 0
            }
            None => false,
        };
        if gone {
            if let Some((p, _)) = slot.take() {
                self.by_value.remove(&p);
            }
            self.free.push(id);
        }
    }

    fn live(&self) -> usize {
        self.by_value.len()
    }
}

/// What a prefix has: every neighbour's path (at most one each) and which is best.
#[derive(Clone, Debug, Default)]
struct Candidates {
    paths: smallvec::SmallVec<[PathId; 2]>,
    /// Index into `paths` (one path per neighbour; neighbours are far fewer than 2^16).
    best: u16,
}

/// A change the FIB must make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Forward `prefix` to `next_hop` (new, or a different next hop than before).
    Set {
        /// The prefix (host bits clear).
        prefix: (IpAddr, u8),
        /// The best path's next hop.
        next_hop: IpAddr,
    },
    /// The prefix has no path left.
    Remove {
        /// The prefix.
        prefix: (IpAddr, u8),
    },
}

/// Prefix keys: IPv4 as one word (address << 8 | length), IPv6 as (address, length).
trait Key: Copy + Eq + Hash {
    fn prefix(self) -> (IpAddr, u8);
}

impl Key for u64 {
    fn prefix(self) -> (IpAddr, u8) {
        (IpAddr::V4(Ipv4Addr::from((self >> 8) as u32)), self as u8)
    }
}

impl Key for (u128, u8) {
    fn prefix(self) -> (IpAddr, u8) {
        (IpAddr::V6(Ipv6Addr::from(self.0)), self.1)
    }
}

/// One family's prefixes.
struct Table<K> {
    map: FxHashMap<K, Candidates>,
}

impl<K: Key> Table<K> {
    fn new() -> Self {
        Table {
            map: FxHashMap::default(),
        }
    }

    /// `peer`'s path for `key` is now `path` (`None`: withdrawn). Returns whether `peer`
    /// had a path for it before, and the FIB change.
    fn update(
        &mut self,
        paths: &mut Paths,
        key: K,
        peer: PeerId,
        path: Option<PathId>,
        decision: Decision,
    ) -> (bool, Option<Change>) {
        let prefix = key.prefix();
        let c = match (self.map.get_mut(&key), path) {
            (Some(c), _) => c,
            (None, None) => return (false, None),
            (None, Some(id)) => {
                paths.acquire(id);
                let mut c = Candidates::default();
                c.paths.push(id);
                self.map.insert(key, c);
                let next_hop = paths.get(id).next_hop;
                return (false, Some(Change::Set { prefix, next_hop }));
            }
        };
        let old_nh = paths.get(c.paths[c.best as usize]).next_hop;
        let mine = c.paths.iter().position(|&id| paths.get(id).peer == peer);
        match (mine, path) {
            (Some(i), Some(id)) => {
                if c.paths[i] == id {
                    return (true, None);
                }
                paths.acquire(id);
                paths.release(std::mem::replace(&mut c.paths[i], id));
            }
            (Some(i), None) => {
                paths.release(c.paths.swap_remove(i));
                if c.paths.is_empty() {
                    self.map.remove(&key);
                    return (true, Some(Change::Remove { prefix }));
                }
            }
            (None, Some(id)) => {
                paths.acquire(id);
                c.paths.push(id);
            }
            (None, None) => return (false, None),
        }
        let had = mine.is_some();
        let candidates: smallvec::SmallVec<[&PathInfo; 8]> =
            c.paths.iter().map(|&id| paths.get(id)).collect();
        let best = select_best(&candidates, decision).unwrap_or(0);
        c.best = best as u16;
        let nh = paths.get(c.paths[best]).next_hop;
        let change = (nh != old_nh).then_some(Change::Set {
            prefix,
            next_hop: nh,
        });
        (had, change)
    }

    /// Drop every path of `peer`, appending the FIB changes.
    fn drop_peer(
        &mut self,
        paths: &mut Paths,
        peer: PeerId,
        decision: Decision,
        out: &mut Vec<Change>,
    ) {
        let keys: Vec<K> = self
            .map
            .iter()
            .filter(|(_, c)| c.paths.iter().any(|&id| paths.get(id).peer == peer))
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            out.extend(self.update(paths, k, peer, None, decision).1);
        }
    }

    fn best(&self, paths: &Paths, key: K) -> Option<Arc<PathInfo>> {
        let c = self.map.get(&key)?;
        paths.slots[c.paths[c.best as usize] as usize]
            .as_ref()
            .map(|(p, _)| p.clone())
    }
}

/// The whole RIB.
pub struct Rib {
    paths: Paths,
    v4: Table<u64>,
    v6: Table<(u128, u8)>,
    /// Prefixes each neighbour has a path for.
    per_peer: Vec<usize>,
    /// How the best path is chosen.
    decision: Decision,
}

/// A path handle for [`Rib::announce`] (interned once per UPDATE, used for all its prefixes).
#[derive(Clone, Copy, Debug)]
pub struct PathHandle(PathId);

impl Rib {
    /// An empty RIB for `peers` neighbours.
    pub fn new(peers: usize) -> Rib {
        Rib::with_decision(peers, Decision::default())
    }

    /// A RIB for `peers` neighbours choosing best paths as `decision` says.
    pub fn with_decision(peers: usize, decision: Decision) -> Rib {
        Rib {
            paths: Paths::default(),
            v4: Table::new(),
            v6: Table::new(),
            per_peer: vec![0; peers],
            decision,
        }
    }

    /// Intern `path` for announcing prefixes with it. Call [`Rib::done_with`] when the
    /// UPDATE has been applied (a path no prefix took is freed then).
    pub fn path(&mut self, path: &Arc<PathInfo>) -> PathHandle {
        let id = self.paths.intern(path);
        // Held by the handle until `done_with`.
        self.paths.acquire(id);
        PathHandle(id)
    }

    /// Release a handle from [`Rib::path`].
    pub fn done_with(&mut self, h: PathHandle) {
        self.paths.release(h.0);
    }

    /// Read (and discard) the table entries of `prefixes`, so that changing them next finds
    /// them in cache: a table of millions of prefixes is far larger than the CPU caches,
    /// and looking a chunk up in a loop of independent reads lets the CPU fetch many at
    /// once (see `Sync::apply_all`).
    pub fn look_ahead(&self, prefixes: &[(IpAddr, u8)]) {
        let mut seen = 0usize;
        for p in prefixes {
            seen += usize::from(match p.0 {
                IpAddr::V4(a) => self
                    .v4
                    .map
                    .contains_key(&((u64::from(u32::from(a)) << 8) | u64::from(p.1))),
                IpAddr::V6(a) => self.v6.map.contains_key(&(u128::from(a), p.1)),
            });
        }
        std::hint::black_box(seen);
    }

    /// `peer` announces `prefix` (host bits clear) with path `h`; the FIB change, if any,
    /// is appended to `out`.
    pub fn announce(
        &mut self,
        peer: PeerId,
        prefix: (IpAddr, u8),
        h: PathHandle,
        out: &mut Vec<Change>,
    ) {
        self.change(peer, prefix, Some(h.0), out);
    }

    /// `peer` withdraws `prefix`.
    pub fn withdraw(&mut self, peer: PeerId, prefix: (IpAddr, u8), out: &mut Vec<Change>) {
        self.change(peer, prefix, None, out);
    }

    fn change(
        &mut self,
        peer: PeerId,
        prefix: (IpAddr, u8),
        path: Option<PathId>,
        out: &mut Vec<Change>,
    ) {
        let (had, change) = match prefix.0 {
            IpAddr::V4(a) => {
                let k = (u64::from(u32::from(a)) << 8) | u64::from(prefix.1);
                self.v4
                    .update(&mut self.paths, k, peer, path, self.decision)
            }
            IpAddr::V6(a) => {
                let k = (u128::from(a), prefix.1);
                self.v6
                    .update(&mut self.paths, k, peer, path, self.decision)
            }
        };
        out.extend(change);
        if let Some(n) = self.per_peer.get_mut(peer as usize) {
            match (had, path.is_some()) {
                (false, true) => *n += 1,
                (true, false) => *n -= 1,
                _ => {}
            }
        }
    }

    /// The session with `peer` went down: drop all its paths.
    pub fn peer_down(&mut self, peer: PeerId, out: &mut Vec<Change>) {
        self.v4.drop_peer(&mut self.paths, peer, self.decision, out);
        self.v6.drop_peer(&mut self.paths, peer, self.decision, out);
        if let Some(n) = self.per_peer.get_mut(peer as usize) {
            *n = 0;
        }
    }

    /// Prefixes `peer` has a path for.
    pub fn prefixes_of(&self, peer: PeerId) -> usize {
        self.per_peer.get(peer as usize).copied().unwrap_or(0)
    }

    /// Prefixes with a best path: (IPv4, IPv6).
    pub fn prefixes(&self) -> (usize, usize) {
        (self.v4.map.len(), self.v6.map.len())
    }

    /// Distinct paths held.
    pub fn path_count(&self) -> usize {
        self.paths.live()
    }

    /// The best path of exactly `prefix`.
    pub fn best(&self, prefix: (IpAddr, u8)) -> Option<Arc<PathInfo>> {
        match prefix.0 {
            IpAddr::V4(a) => self.v4.best(
                &self.paths,
                (u64::from(u32::from(a)) << 8) | u64::from(prefix.1),
            ),
            IpAddr::V6(a) => self.v6.best(&self.paths, (u128::from(a), prefix.1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{AsPath, AsSegment, SegmentKind};

    fn path(peer: PeerId, lp: u32, as_path: &[u32], med: Option<u32>, nh: &str) -> Arc<PathInfo> {
        let attrs = Attrs {
            as_path: AsPath {
                segments: vec![AsSegment {
                    kind: SegmentKind::Sequence,
                    asns: as_path.to_vec(),
                }],
            },
            med,
            next_hop: Some(nh.parse().unwrap()),
            ..Default::default()
        };
        Arc::new(PathInfo {
            peer,
            peer_router_id: Ipv4Addr::new(10, 0, 0, peer as u8 + 1),
            peer_addr: nh.parse().unwrap(),
            ebgp: true,
            local_pref: lp,
            next_hop: nh.parse().unwrap(),
            attrs: Arc::new(attrs),
        })
    }

    fn p(s: &str) -> (IpAddr, u8) {
        let (a, l) = s.split_once('/').unwrap();
        (a.parse().unwrap(), l.parse().unwrap())
    }

    fn announce(rib: &mut Rib, path: &Arc<PathInfo>, prefixes: &[&str]) -> Vec<Change> {
        let mut out = Vec::new();
        let h = rib.path(path);
        for x in prefixes {
            rib.announce(path.peer, p(x), h, &mut out);
        }
        rib.done_with(h);
        out
    }

    #[test]
    fn higher_local_pref_wins_and_failover_and_failback_report_only_next_hop_changes() {
        let mut rib = Rib::new(2);
        let primary = path(0, 200, &[65002], None, "198.51.100.2");
        let secondary = path(1, 100, &[65003], None, "203.0.113.2");
        let set = |pfx: &str, nh: &str| Change::Set {
            prefix: p(pfx),
            next_hop: nh.parse().unwrap(),
        };
        // Secondary first: installed; then the primary takes over.
        assert_eq!(
            announce(&mut rib, &secondary, &["10.0.0.0/8", "2001:db8:10::/48"]),
            vec![
                set("10.0.0.0/8", "203.0.113.2"),
                set("2001:db8:10::/48", "203.0.113.2")
            ]
        );
        assert_eq!(
            announce(&mut rib, &primary, &["10.0.0.0/8", "2001:db8:10::/48"]),
            vec![
                set("10.0.0.0/8", "198.51.100.2"),
                set("2001:db8:10::/48", "198.51.100.2")
            ]
        );
        // The same announcement again changes nothing.
        assert!(announce(&mut rib, &primary, &["10.0.0.0/8"]).is_empty());
        // A worse path from the secondary changes nothing either.
        let worse = path(1, 100, &[65003, 65010], None, "203.0.113.2");
        assert!(announce(&mut rib, &worse, &["10.0.0.0/8"]).is_empty());
        assert_eq!(rib.prefixes(), (1, 1));
        assert_eq!((rib.prefixes_of(0), rib.prefixes_of(1)), (2, 2));
        // Failover.
        let mut out = Vec::new();
        rib.withdraw(0, p("10.0.0.0/8"), &mut out);
        assert_eq!(out, vec![set("10.0.0.0/8", "203.0.113.2")]);
        // Withdrawing what was never announced is nothing.
        out.clear();
        rib.withdraw(0, p("10.0.0.0/8"), &mut out);
        rib.withdraw(0, p("172.16.0.0/12"), &mut out);
        assert!(out.is_empty());
        // Failback.
        assert_eq!(
            announce(&mut rib, &primary, &["10.0.0.0/8"]),
            vec![set("10.0.0.0/8", "198.51.100.2")]
        );
        // The secondary goes down: nothing changes for the FIB; then the primary: gone.
        rib.peer_down(1, &mut out);
        assert!(out.is_empty(), "{out:?}");
        rib.peer_down(0, &mut out);
        out.sort_by_key(|c| format!("{c:?}"));
        assert_eq!(
            out,
            vec![
                Change::Remove {
                    prefix: p("10.0.0.0/8")
                },
                Change::Remove {
                    prefix: p("2001:db8:10::/48")
                }
            ]
        );
        assert_eq!(rib.prefixes(), (0, 0));
        assert_eq!(rib.path_count(), 0, "every path released");
    }

    /// The best of `ps` as `select_best` chooses it.
    fn best_of<'a>(ps: &[&'a PathInfo], d: Decision) -> &'a PathInfo {
        ps[select_best(ps, d).unwrap()]
    }

    /// A path by value (see `path`).
    fn pi(peer: PeerId, lp: u32, as_path: &[u32], med: Option<u32>, nh: &str) -> PathInfo {
        (*path(peer, lp, as_path, med, nh)).clone()
    }

    #[test]
    fn decision_order_follows_rfc4271() {
        let d = Decision::default();
        let a = pi(0, 100, &[65002, 1], None, "192.0.2.1");
        let b = pi(1, 100, &[65003], None, "192.0.2.2");
        assert_eq!(best_of(&[&a, &b], d), &b, "shorter AS path");
        let c = pi(0, 150, &[65002, 1, 2, 3], None, "192.0.2.1");
        assert_eq!(
            best_of(&[&a, &b, &c], d),
            &c,
            "local preference before path length"
        );
        // MED compared only within the same neighbouring AS.
        let m1 = pi(0, 100, &[65002], Some(10), "192.0.2.1");
        let m2 = pi(1, 100, &[65002], Some(5), "192.0.2.2");
        assert_eq!(best_of(&[&m1, &m2], d), &m2);
        let m3 = pi(1, 100, &[65009], Some(5), "192.0.2.9");
        // Different AS: MED ignored; router id decides (peer 0 has the lower id).
        assert_eq!(best_of(&[&m1, &m3], d), &m1);
        assert_eq!(
            best_of(
                &[&m1, &m3],
                Decision {
                    always_compare_med: true
                }
            ),
            &m3,
            "always-compare-med"
        );
        assert_eq!(select_best(&[], d), None);
        assert_eq!(select_best(&[&a], d), Some(0));
    }

    /// The example: A (AS1, MED 100, id 1), B (AS2, id 2), C (AS1, MED 50, id 3).
    /// Pairwise, C beats A (MED), A beats B (id), B beats C (id): a cycle, so one pass
    /// picked by arrival order. By elimination, C removes A within AS1, then B beats C on
    /// router id, in every order.
    #[test]
    fn med_is_eliminated_per_neighbour_as_whatever_the_order() {
        let a = path_id(1, &[1], Some(100), "192.0.2.1", [10, 0, 0, 1]);
        let b = path_id(2, &[2], None, "192.0.2.2", [10, 0, 0, 2]);
        let c = path_id(3, &[1], Some(50), "192.0.2.3", [10, 0, 0, 3]);
        for order in [
            [&a, &b, &c],
            [&a, &c, &b],
            [&b, &a, &c],
            [&b, &c, &a],
            [&c, &a, &b],
            [&c, &b, &a],
        ] {
            assert_eq!(best_of(&order, Decision::default()), &b, "{order:?}");
        }
    }

    fn path_id(peer: PeerId, asns: &[u32], med: Option<u32>, nh: &str, id: [u8; 4]) -> PathInfo {
        let mut p = pi(peer, 100, asns, med, nh);
        p.peer_router_id = Ipv4Addr::from(id);
        p
    }

    /// The decision process written the plain way, straight from RFC 4271 §9.1.2.2, to
    /// check `select_best` against.
    fn reference_best(ps: &[PathInfo], d: Decision) -> Option<PathInfo> {
        let mut c: Vec<&PathInfo> = ps.iter().collect();
        let lp = c.iter().map(|p| p.local_pref).max()?;
        c.retain(|p| p.local_pref == lp);
        let len = c.iter().map(|p| p.attrs.as_path.path_len()).min()?;
        c.retain(|p| p.attrs.as_path.path_len() == len);
        let origin = c.iter().map(|p| p.attrs.origin).min()?;
        c.retain(|p| p.attrs.origin == origin);
        let group = |p: &PathInfo| (!d.always_compare_med).then(|| p.attrs.as_path.first());
        let before = c.clone();
        c.retain(|p| {
            let lowest = before
                .iter()
                .filter(|q| group(q) == group(p))
                .map(|q| q.attrs.med.unwrap_or(0))
                .min()
                .unwrap_or(0);
            p.attrs.med.unwrap_or(0) == lowest
        });
        if c.iter().any(|p| p.ebgp) {
            c.retain(|p| p.ebgp);
        }
        c.into_iter()
            .min_by_key(|p| (p.peer_router_id, p.peer_addr))
            .cloned()
    }

    proptest::proptest! {
        /// For random sets of paths, the best is the same in every order and is the
        /// reference's.
        #[test]
        fn best_path_is_independent_of_order_and_matches_the_reference(
            specs in proptest::collection::vec(
                (0u32..3, 1u32..4, 0u32..3, proptest::option::of(0u32..4), proptest::bool::ANY, 0u8..8),
                1..12,
            ),
            shuffle in proptest::collection::vec(0usize..1000, 12),
            always in proptest::bool::ANY,
        ) {
            let d = Decision { always_compare_med: always };
            let ps: Vec<PathInfo> = specs
                .iter()
                .enumerate()
                .map(|(k, &(lp, len, first_as, med, ebgp, id))| {
                    let asns: Vec<u32> = (0..len).map(|j| if j == 0 { 64500 + first_as } else { 65000 + j }).collect();
                    let mut p = pi(k as PeerId, 100 + lp, &asns, med, &format!("192.0.2.{}", k + 1));
                    p.ebgp = ebgp;
                    // Router ids may repeat: the neighbour address breaks the tie.
                    p.peer_router_id = Ipv4Addr::new(10, 0, 0, id);
                    p
                })
                .collect();
            let want = reference_best(&ps, d).unwrap();
            let refs: Vec<&PathInfo> = ps.iter().collect();
            proptest::prop_assert_eq!(best_of(&refs, d), &want);
            let mut shuffled = refs.clone();
            let n = shuffled.len();
            for (i, r) in shuffle.iter().enumerate().take(n) {
                shuffled.swap(i, r % n);
            }
            proptest::prop_assert_eq!(best_of(&shuffled, d), &want);
        }
    }

    #[test]
    fn a_path_no_prefix_took_is_freed() {
        let mut rib = Rib::new(1);
        let h = rib.path(&path(0, 100, &[65002], None, "192.0.2.1"));
        rib.done_with(h);
        assert_eq!(rib.path_count(), 0);
    }
}
