//! What the API shows of the sync: installed routes with their source and next hop,
//! neighbours, counts.

use super::*;

impl Sync {
    // ---- views ----------------------------------------------------------------------

    pub(super) fn describe(&self, id: NextHopId) -> String {
        let Some(e) = self.nh.get(&id) else {
            return format!("nh{id}?");
        };
        match &e.key {
            NhKey::Drop => "drop".into(),
            NhKey::Local => "local (kernel)".into(),
            NhKey::Glean(ifx) => format!("glean dev {}", self.dev_name(*ifx)),
            NhKey::Adj(ifx, ip) => match self.nh_object(&e.key) {
                NextHop::Forward(a) => format!(
                    "via {ip} dev {} lladdr {}",
                    self.dev_name(*ifx),
                    mac_str(&a.dst_mac)
                ),
                NextHop::Local => format!(
                    "via {ip} dev {} (not a fast-path port: kernel)",
                    self.dev_name(*ifx)
                ),
                _ => format!("via {ip} dev {} (unresolved: glean)", self.dev_name(*ifx)),
            },
            NhKey::Group(m) => format!(
                "ecmp [{}]",
                m.iter()
                    .map(|x| self.describe(*x))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        }
    }

    /// Installed routes, sorted, optionally only those matching `filter` (exact `a/len`, or
    /// the longest match for an address).
    pub fn routes(&self, filter: Option<&str>) -> Result<Vec<crate::model::Route>, String> {
        let view = |(p, i): (&Prefix, &Installed)| crate::model::Route {
            prefix: format!("{}/{}", p.0, p.1),
            source: i.source,
            next_hop: self.describe(i.nh),
        };
        let Some(f) = filter else {
            let mut v: Vec<(&Prefix, &Installed)> = self.installed().collect();
            v.sort_by(|a, b| {
                (a.0 .0.is_ipv6(), a.0 .0, a.0 .1).cmp(&(b.0 .0.is_ipv6(), b.0 .0, b.0 .1))
            });
            return Ok(v.into_iter().map(view).collect());
        };
        let (addr, len) = match f.split_once('/') {
            Some((a, l)) => {
                let a: IpAddr = a
                    .parse()
                    .map_err(|_| format!("{a:?} is not an IP address"))?;
                let l: u8 = l
                    .parse()
                    .ok()
                    .filter(|l| *l <= host_len(&a))
                    .ok_or_else(|| format!("bad prefix length in {f:?}"))?;
                (a, Some(l))
            }
            None => (
                f.parse()
                    .map_err(|_| format!("{f:?} is neither an address nor a prefix"))?,
                None,
            ),
        };
        if let Some(l) = len {
            let p = (masked(addr, l), l);
            return Ok(self.installed_at(&p).map(view).into_iter().collect());
        }
        for l in (0..=host_len(&addr)).rev() {
            let p = (masked(addr, l), l);
            if let Some(kv) = self.installed_at(&p) {
                return Ok(vec![view(kv)]);
            }
        }
        Ok(vec![])
    }

    /// What `p` has installed, with the map's copy of the key.
    pub(super) fn installed_at(&self, p: &Prefix) -> Option<(&Prefix, &Installed)> {
        let (k, s) = self.prefixes.get_key_value(p)?;
        Some((k, s.installed.as_ref()?))
    }

    /// Every installed prefix.
    pub(super) fn installed(&self) -> impl Iterator<Item = (&Prefix, &Installed)> {
        self.prefixes
            .iter()
            .filter_map(|(p, s)| Some((p, s.installed.as_ref()?)))
    }

    /// The longest installed prefix covering `dst`.
    pub(super) fn longest(&self, dst: IpAddr) -> Option<Installed> {
        (0..=host_len(&dst))
            .rev()
            .find_map(|l| self.installed_at(&(masked(dst, l), l)).map(|(_, i)| *i))
    }

    /// For a packet punted as unresolved: the interface and address the kernel must
    /// resolve (the destination itself on a connected subnet, else the route's gateway).
    pub fn glean_target(&self, dst: IpAddr) -> Option<(u32, IpAddr)> {
        let i = self.longest(dst)?;
        let mut key = &self.nh.get(&i.nh)?.key;
        if let NhKey::Group(m) = key {
            // Any unresolved member will do; the others resolve on their own traffic.
            key = m
                .iter()
                .filter_map(|id| self.nh.get(id))
                .map(|e| &e.key)
                .find(|k| matches!(self.nh_object(k), NextHop::Glean { .. }))?;
        }
        match key {
            NhKey::Glean(ifx) => Some((*ifx, dst)),
            NhKey::Adj(ifx, gw) => Some((*ifx, *gw)),
            _ => None,
        }
    }

    /// Whether the kernel's neighbour `ip` on interface `ifx` is usable (has a MAC in a
    /// usable state): its adjacency is then in the FIB.
    pub fn neighbor_usable(&self, ifx: u32, ip: IpAddr) -> bool {
        self.neighs.get(&(ifx, ip)).is_some_and(|n| n.usable())
    }

    /// How many neighbours [`Sync::neighbors`] lists.
    pub fn neighbor_count(&self) -> usize {
        self.neighs
            .values()
            .filter(|n| self.port_of(n.ifindex).is_some())
            .count()
    }

    /// Neighbours on fast-path ports.
    pub fn neighbors(&self) -> Vec<crate::model::Neighbor> {
        let mut v: Vec<crate::model::Neighbor> = self
            .neighs
            .values()
            .filter(|n| self.port_of(n.ifindex).is_some())
            .map(|n| crate::model::Neighbor {
                ip: n.ip.to_string(),
                dev: self.dev_name(n.ifindex),
                mac: n.mac.as_ref().map(mac_str),
                usable: n.usable(),
            })
            .collect();
        v.sort_by(|a, b| (&a.dev, &a.ip).cmp(&(&b.dev, &b.ip)));
        v
    }

    /// Installed prefixes by family: (IPv4, IPv6).
    pub fn route_counts(&self) -> (usize, usize) {
        let mut c = (0, 0);
        for (p, _) in self.installed() {
            if p.0.is_ipv4() {
                c.0 += 1;
            } else {
                c.1 += 1;
            }
        }
        c
    }

    /// Installed prefixes by origin: (kernel routes, neighbours' host routes, the router's
    /// own, the BGP speaker's).
    pub fn source_counts(&self) -> (usize, usize, usize, usize) {
        let mut c = (0, 0, 0, 0);
        for (_, i) in self.installed() {
            match i.source {
                Source::Route => c.0 += 1,
                Source::Neighbor => c.1 += 1,
                Source::Local => c.2 += 1,
                Source::Bgp => c.3 += 1,
            }
        }
        c
    }

    /// Kernel routes mirrored (main and local tables), whether installed or not.
    pub fn mirrored_routes(&self) -> usize {
        self.prefixes.values().map(|s| s.routes.len()).sum()
    }
}
