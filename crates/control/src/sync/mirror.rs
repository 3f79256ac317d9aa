//! The inputs: the kernel's state (a full dump, then netlink events: links, addresses,
//! neighbours, routes of the main and local tables) and the native BGP speaker's
//! decisions, each stored with its origin and handed on to route selection and
//! programming.

use super::*;

impl Sync {
    // ---- inputs ---------------------------------------------------------------------

    /// Replace the whole mirrored state with a dump (start-up and after an overflow).
    pub fn resync(&mut self, s: Snapshot) {
        self.stats.resyncs += 1;
        self.links = s.links.into_iter().map(|l| (l.ifindex, l)).collect();
        self.update_down();
        self.addrs = s.addrs;
        self.addrs.dedup();
        self.neighs = s
            .neighs
            .into_iter()
            .map(|n| ((n.ifindex, n.ip), n))
            .collect();
        // The BGP speaker's routes are not the kernel's: they survive the resync (their
        // next-hop lists are interned again in the new lists).
        let mut bgp: Vec<(Prefix, NextHops)> = Vec::new();
        for (p, st) in self.prefixes.iter_mut() {
            for r in st.routes.iter().filter(|r| r.origin == Origin::Bgp) {
                bgp.push((*p, self.hop_lists.get(r.hops).iter().cloned().collect()));
            }
            st.routes.clear();
        }
        self.hop_lists = HopLists::default();
        for (p, hops) in bgp {
            let _ = self.put_route(Origin::Bgp, &bgp_route(p, hops));
        }
        for r in s.routes {
            if let Some(o) = Origin::of_kernel_route(r.table, r.protocol) {
                self.put_route(o, &r);
            }
        }
        self.refresh_next_hops(None);
        let mut prefixes: FxHashSet<Prefix> = self.prefixes.keys().copied().collect();
        prefixes.extend(self.neighs.values().map(|n| (n.ip, host_len(&n.ip))));
        for p in prefixes {
            self.refresh_prefix(p);
        }
        self.prefixes
            .retain(|_, st| !st.routes.is_empty() || st.installed.is_some());
        self.writer.reclaim();
        self.iface_version += 1;
    }

    /// Insert or replace a route of `origin` (keyed by prefix, origin and metric). Returns
    /// what the prefix's routes now ask for and what it has installed.
    pub(super) fn put_route(&mut self, origin: Origin, r: &Route) -> (Want, Option<Installed>) {
        let new = Stored {
            origin,
            metric: r.priority,
            hops: self.hop_lists.intern(&r.nexthops),
            kind: r.kind,
        };
        let st = match self.prefixes.entry((r.dst, r.dst_len)) {
            Entry::Vacant(v) => {
                // A new prefix: what it wants without reading back the slot just written
                // (that read waited for the slot's cache line).
                let want = want(
                    std::slice::from_ref(&new),
                    &self.hop_lists,
                    &self.down,
                    self.distances,
                );
                v.insert(PrefixState {
                    routes: smallvec::smallvec![new],
                    installed: None,
                });
                return (want, None);
            }
            Entry::Occupied(o) => o.into_mut(),
        };
        match st
            .routes
            .iter_mut()
            // Keyed as the kernel keys them: by table and metric (a replace may change a
            // route's protocol, and with it main-table routes' origin).
            .find(|s| {
                s.origin.kernel_table() == new.origin.kernel_table() && s.metric == new.metric
            }) {
            Some(slot) => {
                let old = std::mem::replace(slot, new);
                self.hop_lists.release(old.hops);
            }
            None => st.routes.push(new),
        }
        (
            want(&st.routes, &self.hop_lists, &self.down, self.distances),
            st.installed,
        )
    }

    /// Apply a batch of notifications in order, as [`Sync::apply`] would one by one, and
    /// empty `events`. Returns false if one of them was `Overflow` (the caller must dump and
    /// [`Sync::resync`]).
    ///
    /// Faster than one by one for route changes: each touches random places of tables far
    /// larger than the CPU caches (its prefix's entry here, its entry in the FIB's RIB and
    /// in the FIB's tables), and applying them one after the other waits for those misses
    /// one at a time. Looking a chunk's prefixes up first, in a loop of independent reads,
    /// lets the CPU fetch many at once; applying the chunk then finds them in cache.
    pub fn apply_all(&mut self, events: &mut Vec<Event>) -> bool {
        /// Events looked ahead at once (32 to 128 were best; without looking ahead the
        /// route-sync benchmark ran 15-25 % slower).
        const CHUNK: usize = 64;
        let mut ok = true;
        for chunk in events.chunks(CHUNK) {
            self.look_ahead(chunk);
            for ev in chunk {
                ok &= self.apply_ref(ev);
            }
        }
        events.clear();
        ok
    }

    /// Reads (and discards) what applying `events` will read first: see [`Sync::apply_all`].
    pub(super) fn look_ahead(&self, events: &[Event]) {
        self.touch(events.iter().filter_map(|ev| match ev {
            Event::NewRoute(r) | Event::DelRoute(r) => Some((r.dst, r.dst_len)),
            _ => None,
        }));
    }

    /// Read (and discard) the places a change to each of `prefixes` reads first: its entry
    /// here, in the FIB's route store and in its table.
    pub(super) fn touch(&self, prefixes: impl Iterator<Item = Prefix>) {
        let mut seen = 0usize;
        for (dst, len) in prefixes {
            seen += usize::from(self.prefixes.contains_key(&(dst, len)));
            let (in_rib, in_table) = match dst {
                IpAddr::V4(a) => (
                    self.writer.get4(a.into(), len),
                    self.writer.lookup4(a.into()),
                ),
                IpAddr::V6(a) => (
                    self.writer.get6(&a.octets(), len),
                    self.writer.lookup6(&a.octets()),
                ),
            };
            seen += usize::from(in_rib.is_some()) + in_table as usize;
        }
        std::hint::black_box(seen);
    }

    /// Apply one notification. Returns false for `Overflow` (the caller must dump and
    /// [`Sync::resync`]).
    pub fn apply(&mut self, ev: Event) -> bool {
        self.apply_ref(&ev)
    }

    /// [`Sync::apply`] on a borrowed event (route changes need nothing of it but to read
    /// it; the few other kinds are copied).
    pub(super) fn apply_ref(&mut self, ev: &Event) -> bool {
        self.stats.events += 1;
        match ev {
            Event::Overflow => return false,
            Event::NewLink(l) => {
                let ifx = l.ifindex;
                let was_up = self.links.insert(ifx, l.clone()).is_some_and(|o| o.up);
                if was_up && !l.up {
                    self.flush_down_v4();
                }
                let changed = self.update_down();
                self.refresh_through(&changed);
                // A parent's MTU bounds its sub-interfaces' next hops too.
                let parent = self
                    .port_of(ifx)
                    .is_some_and(|p| self.vlans.iter().flatten().any(|t| t.parent == p));
                self.refresh_next_hops(if parent { None } else { Some(ifx) });
                self.iface_version += 1;
            }
            Event::DelLink(ifx) => {
                let ifx = *ifx;
                self.links.remove(&ifx);
                let changed = self.update_down();
                self.refresh_through(&changed);
                self.refresh_next_hops(Some(ifx));
                self.iface_version += 1;
            }
            Event::NewAddr(a) => {
                if !self.addrs.contains(a) {
                    self.addrs.push(a.clone());
                }
                self.iface_version += 1;
            }
            Event::DelAddr(a) => {
                self.addrs.retain(|x| x != a);
                self.iface_version += 1;
            }
            Event::NewNeigh(n) => {
                let (ifx, ip) = (n.ifindex, n.ip);
                self.neighs.insert((ifx, ip), n.clone());
                self.neighbor_changed(ifx, ip);
            }
            Event::DelNeigh(n) => {
                let (ifx, ip) = (n.ifindex, n.ip);
                self.neighs.remove(&(ifx, ip));
                self.neighbor_changed(ifx, ip);
            }
            Event::NewRoute(r) => {
                if let Some(o) = Origin::of_kernel_route(r.table, r.protocol) {
                    let p = (r.dst, r.dst_len);
                    let (want, old) = self.put_route(o, r);
                    self.update_prefix(p, want, old);
                }
            }
            Event::DelRoute(r) => self.del_route(r),
        }
        true
    }

    /// Remove a route (for IPv6 multipath, the next hops it lists) and bring its prefix in
    /// line.
    pub(super) fn del_route(&mut self, r: &Route) {
        if let Some(origin) = Origin::of_kernel_route(r.table, r.protocol) {
            let p = (r.dst, r.dst_len);
            let metric = r.priority;
            let (want_now, installed) = match self.prefixes.entry(p) {
                Entry::Occupied(mut e) => {
                    let list = &mut e.get_mut().routes;
                    if let Some(i) = list.iter().position(|s| {
                        s.origin.kernel_table() == origin.kernel_table() && s.metric == metric
                    }) {
                        // IPv6 deletes one next hop of a multipath route at a time:
                        // the message lists only the removed ones, the rest stays.
                        let hops = self.hop_lists.get(list[i].hops);
                        let partial = r.dst.is_ipv6()
                            && !r.nexthops.is_empty()
                            && hops.iter().any(|h| !r.nexthops.contains(h));
                        if partial {
                            let rest: Vec<RouteNextHop> = hops
                                .iter()
                                .filter(|h| !r.nexthops.contains(h))
                                .cloned()
                                .collect();
                            let rest = self.hop_lists.intern(&rest);
                            let gone = std::mem::replace(&mut list[i].hops, rest);
                            self.hop_lists.release(gone);
                        } else {
                            let gone = list.swap_remove(i);
                            self.hop_lists.release(gone.hops);
                        }
                    }
                    let st = e.get();
                    let now = (
                        want(&st.routes, &self.hop_lists, &self.down, self.distances),
                        st.installed,
                    );
                    if st.routes.is_empty() && st.installed.is_none() {
                        e.remove();
                    }
                    now
                }
                Entry::Vacant(_) => (Want::Nothing, None),
            };
            self.update_prefix(p, want_now, installed);
        }
    }

    /// Links that cannot carry traffic now; returns those whose state changed.
    pub(super) fn update_down(&mut self) -> Vec<u32> {
        let now: FxHashSet<u32> = self
            .links
            .keys()
            .copied()
            .filter(|&i| !self.link_usable(i))
            .collect();
        let changed: Vec<u32> = now.symmetric_difference(&self.down).copied().collect();
        self.down = now;
        changed
    }

    /// Whether link `ifx` can carry traffic: admin up with carrier, and for a VLAN
    /// sub-interface its parent too. An unknown link is the kernel's business.
    pub(super) fn link_usable(&self, ifx: u32) -> bool {
        let Some(l) = self.links.get(&ifx) else {
            return true;
        };
        if !carries(l) {
            return false;
        }
        let parent = self
            .port_of(ifx)
            .and_then(|p| self.vlans.get(p as usize).copied().flatten())
            .and_then(|t| self.port_names.get(t.parent as usize))
            .and_then(|n| self.links.values().find(|l| &l.name == n));
        parent.is_none_or(carries)
    }

    /// Re-decide every prefix with a route or a neighbour through one of `links` (their
    /// state changed): next hops through a down link leave their ECMP groups, routes with
    /// none left give way, and all come back with the link.
    pub(super) fn refresh_through(&mut self, links: &[u32]) {
        if links.is_empty() {
            return;
        }
        let ids: FxHashSet<HopsId> = self
            .hop_lists
            .lists
            .iter()
            .enumerate()
            .filter(|(_, l)| {
                l.refs > 0
                    && l.hops
                        .iter()
                        .any(|h| h.ifindex.is_some_and(|i| links.contains(&i)))
            })
            .map(|(id, _)| id as HopsId)
            .collect();
        let mut ps: Vec<Prefix> = if ids.is_empty() {
            Vec::new()
        } else {
            self.prefixes
                .iter()
                .filter(|(_, st)| st.routes.iter().any(|r| ids.contains(&r.hops)))
                .map(|(p, _)| *p)
                .collect()
        };
        ps.extend(
            self.neighs
                .values()
                .filter(|n| links.contains(&n.ifindex))
                .map(|n| (n.ip, host_len(&n.ip))),
        );
        for p in ps {
            self.refresh_prefix(p);
        }
    }

    /// A link went administratively down: the kernel deletes, without telling anyone, every
    /// IPv4 route whose next hops are all through down links (its connected, broadcast and
    /// static routes; a multipath route with a live next hop stays, the dead one unused).
    /// The mirror forgets them too, or they would come back with the link while the kernel
    /// no longer has them. Local routes (the addresses) stay, as in the kernel.
    pub(super) fn flush_down_v4(&mut self) {
        let admin_down = |l: &FxHashMap<u32, Link>, i: Option<u32>| {
            i.is_some_and(|i| l.get(&i).is_some_and(|l| !l.up))
        };
        let mut gone: Vec<Route> = Vec::new();
        for (p, st) in self.prefixes.iter() {
            if !p.0.is_ipv4() {
                continue;
            }
            for r in &st.routes {
                let hops = self.hop_lists.get(r.hops);
                let Some(table) = r.origin.kernel_table() else {
                    continue;
                };
                let dead = r.kind != RouteKind::Local
                    && !hops.is_empty()
                    && hops.iter().all(|h| admin_down(&self.links, h.ifindex));
                if dead {
                    gone.push(Route {
                        table,
                        dst: p.0,
                        dst_len: p.1,
                        kind: r.kind,
                        protocol: 0,
                        priority: r.metric,
                        nexthops: NextHops::new(),
                    });
                }
            }
        }
        for r in &gone {
            self.del_route(r);
        }
    }

    pub(super) fn neighbor_changed(&mut self, ifx: u32, ip: IpAddr) {
        if let Some(&id) = self.nh_by_key.get(&NhKey::Adj(ifx, ip)) {
            let obj = self.nh_object(&NhKey::Adj(ifx, ip));
            if self.writer.set_next_hop(id, obj).is_err() {
                self.stats.fib_errors += 1;
            }
        }
        self.refresh_prefix((ip, host_len(&ip)));
    }

    /// Apply the native BGP speaker's decisions (see [`Origin::distance`] for how they rank
    /// against the kernel's routes). A next hop is resolved to the interface whose
    /// connected subnet holds it; one that is on none, or is the router's own address,
    /// leaves its prefix without a BGP route (counted in `bgp_unresolved`).
    pub fn apply_bgp(&mut self, changes: &[bgp::rib::Change]) {
        // Nearly every change of a batch has the same next hop as the one before.
        let mut last: Option<(IpAddr, Option<u32>)> = None;
        // Looked ahead by chunks, as `apply_all` does for netlink.
        for chunk in changes.chunks(64) {
            self.touch(chunk.iter().map(|c| match *c {
                bgp::rib::Change::Set { prefix, .. } | bgp::rib::Change::Remove { prefix } => {
                    prefix
                }
            }));
            for c in chunk {
                self.apply_bgp_one(c, &mut last);
            }
        }
    }

    /// One change of [`Sync::apply_bgp`]; `last` caches the last next hop's interface.
    pub(super) fn apply_bgp_one(
        &mut self,
        c: &bgp::rib::Change,
        last: &mut Option<(IpAddr, Option<u32>)>,
    ) {
        self.stats.bgp_changes += 1;
        let (p, next_hop) = match *c {
            bgp::rib::Change::Set { prefix, next_hop } => (prefix, Some(next_hop)),
            bgp::rib::Change::Remove { prefix } => (prefix, None),
        };
        let ifindex = next_hop.and_then(|nh| match *last {
            Some((ip, ifx)) if ip == nh => ifx,
            _ => {
                let ifx = self.connected_ifindex(nh);
                *last = Some((nh, ifx));
                ifx
            }
        });
        match (next_hop, ifindex) {
            (Some(nh), Some(ifx)) => {
                let hop = RouteNextHop {
                    gateway: Some(nh),
                    ifindex: Some(ifx),
                    weight: 1,
                };
                let (want, old) =
                    self.put_route(Origin::Bgp, &bgp_route(p, smallvec::smallvec![hop]));
                self.update_prefix(p, want, old);
            }
            (nh, _) => {
                if nh.is_some() {
                    self.stats.bgp_unresolved += 1;
                }
                self.remove_bgp_route(p);
            }
        }
    }

    /// Drop `p`'s BGP route, if it has one.
    pub(super) fn remove_bgp_route(&mut self, p: Prefix) {
        let Entry::Occupied(mut e) = self.prefixes.entry(p) else {
            return;
        };
        let list = &mut e.get_mut().routes;
        let Some(i) = list.iter().position(|s| s.origin == Origin::Bgp) else {
            return;
        };
        let gone = list.swap_remove(i);
        self.hop_lists.release(gone.hops);
        let st = e.get();
        let (want_now, installed) = (
            want(&st.routes, &self.hop_lists, &self.down, self.distances),
            st.installed,
        );
        if st.routes.is_empty() && st.installed.is_none() {
            e.remove();
        }
        self.update_prefix(p, want_now, installed);
    }

    /// The interface whose connected subnet holds `ip` ([`connected_in`]).
    pub fn connected_ifindex(&self, ip: IpAddr) -> Option<u32> {
        connected_in(&self.addrs, ip)
    }

    /// The router's addresses with their subnets (for [`connected_in`] outside the lock).
    pub fn addresses(&self) -> Vec<Addr> {
        self.addrs.clone()
    }
}
