//! FIB programming: the shared next-hop objects (adjacencies, glean, ECMP groups, drop,
//! punt) and the installed entry of each prefix, brought in line with what its routes want.

use super::*;

impl Sync {
    // ---- next-hop pool -------------------------------------------------------------

    pub(super) fn nh_object(&self, key: &NhKey) -> NextHop {
        match key {
            NhKey::Drop => NextHop::Drop,
            NhKey::Local => NextHop::Local,
            NhKey::Glean(ifx) => match self.port_of(*ifx) {
                Some(port) if self.point_to_point(*ifx) => self.p2p_adjacency(*ifx, port),
                Some(port) => NextHop::Glean { port },
                None => NextHop::Local,
            },
            NhKey::Adj(ifx, ip) => {
                let Some(port) = self.port_of(*ifx) else {
                    return NextHop::Local;
                };
                if self.point_to_point(*ifx) {
                    return self.p2p_adjacency(*ifx, port);
                }
                let link = self.links.get(ifx);
                let mtu = self.port_mtu(port, link);
                match (
                    self.neighs
                        .get(&(*ifx, *ip))
                        .filter(|n| n.usable())
                        .and_then(|n| n.mac),
                    link.and_then(|l| l.mac),
                ) {
                    (Some(dst_mac), Some(src_mac)) => NextHop::Forward(Adjacency {
                        port,
                        dst_mac,
                        src_mac,
                        mtu,
                    }),
                    _ => NextHop::Glean { port },
                }
            }
            NhKey::Group(members) => NextHop::Ecmp(members.clone().into_boxed_slice()),
        }
    }

    /// Whether link `ifx` is point-to-point (an IPsec tunnel interface, any TUN device):
    /// what is routed to it needs no neighbour.
    fn point_to_point(&self, ifx: u32) -> bool {
        self.links.get(&ifx).is_some_and(|l| l.point_to_point)
    }

    /// The adjacency of point-to-point port `port` (ifindex `ifx`): no link-layer
    /// addresses, the link's MTU.
    fn p2p_adjacency(&self, ifx: u32, port: u16) -> NextHop {
        NextHop::Forward(Adjacency {
            port,
            dst_mac: [0; 6],
            src_mac: [0; 6],
            mtu: self.port_mtu(port, self.links.get(&ifx)),
        })
    }

    /// Take a reference on the next hop for `key`, creating it if needed.
    pub(super) fn acquire(&mut self, key: NhKey) -> Result<NextHopId, fib::FibError> {
        if let Some(&id) = self.nh_by_key.get(&key) {
            if let Some(e) = self.nh.get_mut(&id) {
                e.refs += 1;
            }
            return Ok(id);
        }
        let obj = self.nh_object(&key);
        let id = self.writer.add_next_hop(obj)?;
        self.nh.insert(
            id,
            NhEntry {
                key: key.clone(),
                refs: 1,
            },
        );
        self.nh_by_key.insert(key, id);
        Ok(id)
    }

    /// Drop a reference; the next hop (and, for groups, the members' references) goes away
    /// with the last one.
    pub(super) fn release(&mut self, id: NextHopId) {
        let Some(e) = self.nh.get_mut(&id) else {
            return;
        };
        e.refs -= 1;
        if e.refs > 0 {
            return;
        }
        let key = e.key.clone();
        self.nh.remove(&id);
        self.nh_by_key.remove(&key);
        if self.writer.remove_next_hop(id).is_err() {
            self.stats.fib_errors += 1;
        }
        if let NhKey::Group(members) = key {
            for m in members {
                self.release(m);
            }
        }
    }

    /// Re-publish every next hop whose object depends on `ifindex` (or all with `None`).
    pub(super) fn refresh_next_hops(&mut self, ifindex: Option<u32>) {
        let ids: Vec<(NextHopId, NhKey)> = self
            .nh
            .iter()
            .filter(|(_, e)| match (&e.key, ifindex) {
                (_, None) => true,
                (NhKey::Adj(i, _) | NhKey::Glean(i), Some(x)) => *i == x,
                _ => false,
            })
            .map(|(id, e)| (*id, e.key.clone()))
            .collect();
        for (id, key) in ids {
            let obj = self.nh_object(&key);
            if self.writer.set_next_hop(id, obj).is_err() {
                self.stats.fib_errors += 1;
            }
        }
    }

    // ---- desired state ---------------------------------------------------------------

    pub(super) fn route_nh(
        &mut self,
        kind: RouteKind,
        hops: HopsId,
    ) -> Result<Option<NextHopId>, fib::FibError> {
        match kind {
            RouteKind::Blackhole | RouteKind::Unreachable | RouteKind::Prohibit => {
                return self.acquire(NhKey::Drop).map(Some)
            }
            RouteKind::Unicast => {}
            _ => return Ok(None),
        }
        let keys: SmallVec<[NhKey; 4]> = self
            .hop_lists
            .get(hops)
            .iter()
            .filter(|h| hop_alive(h, &self.down))
            .map(hop_key)
            .collect();
        let mut members = Vec::with_capacity(keys.len());
        for key in keys {
            match self.acquire(key) {
                Ok(id) => members.push(id),
                Err(e) => {
                    for m in members {
                        self.release(m);
                    }
                    return Err(e);
                }
            }
        }
        match members.len() {
            0 => Ok(None),
            1 => Ok(Some(members[0])),
            _ => {
                members.sort_unstable();
                // The group holds the members' references.
                let key = NhKey::Group(members.clone());
                if self.nh_by_key.contains_key(&key) {
                    for m in &members {
                        self.release(*m);
                    }
                }
                self.acquire(key).map(Some)
            }
        }
    }

    /// The next hop `prefix` should have now (with a reference taken), and its source,
    /// given what its routes ask for.
    ///
    /// Called for every route change: the single-next-hop case allocates nothing.
    pub(super) fn desired(
        &mut self,
        p: Prefix,
        want: Want,
    ) -> Result<Option<(NextHopId, Source)>, fib::FibError> {
        let id = match want {
            Want::Local => return Ok(Some((self.acquire(NhKey::Local)?, Source::Local))),
            Want::One(key, src) => Some((self.acquire(key)?, src)),
            Want::Other(kind, hops) => self.route_nh(kind, hops)?.map(|id| (id, Source::Route)),
            Want::Nothing => None,
        };
        if id.is_some() {
            return Ok(id);
        }
        if p.1 == host_len(&p.0) {
            let on_port: Option<u32> = self
                .neighs
                .values()
                .find(|n| {
                    n.ip == p.0
                        && !n.ip.is_multicast()
                        && n.usable()
                        && !self.down.contains(&n.ifindex)
                        && self.port_of(n.ifindex).is_some()
                })
                .map(|n| n.ifindex);
            if let Some(ifx) = on_port {
                return Ok(Some((
                    self.acquire(NhKey::Adj(ifx, p.0))?,
                    Source::Neighbor,
                )));
            }
        }
        Ok(None)
    }

    /// Record what `p` has installed (an entry is created or dropped as needed).
    pub(super) fn set_installed(&mut self, p: Prefix, installed: Option<Installed>) {
        match installed {
            Some(i) => self.prefixes.entry(p).or_default().installed = Some(i),
            None => {
                if let Entry::Occupied(mut e) = self.prefixes.entry(p) {
                    e.get_mut().installed = None;
                    if e.get().routes.is_empty() {
                        e.remove();
                    }
                }
            }
        }
    }

    /// Bring one prefix of the FIB in line with the mirrored state.
    pub(super) fn refresh_prefix(&mut self, p: Prefix) {
        let (want, old) = match self.prefixes.get(&p) {
            Some(st) => (
                want(&st.routes, &self.hop_lists, &self.down, self.distances),
                st.installed,
            ),
            None => (Want::Nothing, None),
        };
        self.update_prefix(p, want, old);
    }

    /// Bring `p` in line with `want` (what its routes ask for); `old` is what it has
    /// installed. The callers read both off the prefix's entry, which they have just
    /// looked up anyway.
    pub(super) fn update_prefix(&mut self, p: Prefix, want: Want, old: Option<Installed>) {
        let want = match self.desired(p, want) {
            Ok(w) => w,
            Err(_) => {
                self.stats.fib_errors += 1;
                return;
            }
        };
        match (want, old) {
            (Some((id, src)), Some(o)) if o.nh == id => {
                self.release(id);
                if o.source != src {
                    self.set_installed(
                        p,
                        Some(Installed {
                            nh: id,
                            source: src,
                        }),
                    );
                }
            }
            (Some((id, src)), _) => {
                let r = match p.0 {
                    IpAddr::V4(a) => self.writer.add4(a.into(), p.1, id),
                    IpAddr::V6(a) => self.writer.add6(&a.octets(), p.1, id),
                };
                if r.is_err() {
                    self.stats.fib_errors += 1;
                    self.release(id);
                    return;
                }
                self.set_installed(
                    p,
                    Some(Installed {
                        nh: id,
                        source: src,
                    }),
                );
                if let Some(o) = old {
                    self.release(o.nh);
                }
            }
            (None, Some(o)) => {
                let _ = match p.0 {
                    IpAddr::V4(a) => self.writer.del4(a.into(), p.1),
                    IpAddr::V6(a) => self.writer.del6(&a.octets(), p.1),
                };
                self.set_installed(p, None);
                self.release(o.nh);
            }
            (None, None) => {}
        }
    }
}
