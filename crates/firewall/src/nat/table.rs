//! A worker's NAT state: sessions found by either of two keys, endpoint mappings, and the
//! port allocator. Allocated whole at start ([`NatTable::new`]); nothing allocates, locks
//! or panics afterwards.
//!
//! **Sessions.** A session holds the tuple its first packet arrived with (`o`, the inside
//! key) and the tuple that packet left with (`t`). A packet of the original direction is
//! found by `o`; a reply arrives with `t` reversed (the outside key). Both keys sit in one
//! open-addressing index ([`Index`]) whose slots hold a 32-bit hash tag and the session
//! number with a bit for which key it is, so a probe compares the full key only when the
//! tag matches.
//!
//! **Mappings** (RFC 4787 endpoint-independent mapping): the external address and port
//! given to an inside endpoint (address, port, protocol), kept while any session uses it.
//! Every session of that endpoint, whatever its destination, leaves with the same external
//! endpoint. Mappings are found by inside endpoint and by external endpoint in a second
//! index; the latter is the allocator's "is this port free".
//!
//! **Ports.** Worker `w` of `n` allocates external ports (and ICMP identifiers) only in
//! its own slice of 1024-65535, so no two workers can hand out the same port and none
//! needs a lock. A new mapping first tries to keep the inside port (when it lies in the
//! slice), then probes from a hash of the endpoint, at most [`PORT_PROBES`] ports.
//!
//! **Timeouts** are per session: a deadline in ticks of 2^30 ns, refreshed by each
//! packet, by protocol and TCP state ([`Timeouts`]). Expired sessions are removed when a
//! lookup meets them or by [`NatTable::sweep`], a bounded number per call.

use std::sync::Arc;

use dataplane::claims::PortClaims;

/// Nanoseconds per tick of the deadlines: 2^30 ns, about 1.07 s.
const TICK_SHIFT: u32 = 30;

fn tick(now_ns: u64) -> u32 {
    (now_ns >> TICK_SHIFT).min(u64::from(u32::MAX)) as u32
}

fn ticks(secs: u32) -> u32 {
    ((u64::from(secs) * 1_000_000_000).div_ceil(1 << TICK_SHIFT)).min(u64::from(u32::MAX)) as u32
}

/// Ports a new mapping probes before giving up (counted as exhausted).
pub const PORT_PROBES: u32 = 256;

/// First port of the range workers share out.
pub const PORT_MIN: u16 = 1024;

/// IP protocols.
pub mod proto {
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
}

/// An IPv4 5-tuple as a packet carries it. ICMP echo requests and replies carry their
/// identifier in both ports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Key4 {
    /// Source address.
    pub src: u32,
    /// Destination address.
    pub dst: u32,
    /// Source port (ICMP echo: identifier).
    pub sport: u16,
    /// Destination port (ICMP echo: identifier).
    pub dport: u16,
    /// Protocol.
    pub proto: u8,
}

impl Key4 {
    /// The tuple of a reply.
    pub fn reversed(&self) -> Key4 {
        Key4 {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            proto: self.proto,
        }
    }

    fn hash(&self, seed: u64) -> u64 {
        let a = u64::from(self.src) << 32 | u64::from(self.dst);
        let b = u64::from(self.sport) << 32 | u64::from(self.dport) << 16 | u64::from(self.proto);
        mix(
            mix(a ^ seed, 0x9e37_79b9_7f4a_7c15) ^ b,
            seed ^ 0xc2b2_ae3d_27d4_eb4f,
        )
    }
}

/// A 64-bit multiply-fold of two words (`b` made odd).
#[inline]
pub(crate) fn mix(a: u64, b: u64) -> u64 {
    let m = u128::from(a) * u128::from(b | 1);
    (m as u64) ^ (m >> 64) as u64
}

/// Per-protocol idle timeouts, seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    /// TCP after the handshake (RFC 5382 REQ-5: at least 2 h 4 min). Default 7440.
    pub tcp_established: u32,
    /// TCP while opening or closing, and after a RST (RFC 5382: at least 4 min). Default
    /// 240.
    pub tcp_transitory: u32,
    /// UDP (RFC 4787 REQ-5: at least 2 min, 5 recommended). Default 300.
    pub udp: u32,
    /// ICMP echo. Default 60.
    pub icmp: u32,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            tcp_established: 7440,
            tcp_transitory: 240,
            udp: 300,
            icmp: 60,
        }
    }
}

/// A session's TCP flags seen: SYN original, SYN reply, FIN original, FIN reply, RST.
pub mod tcp_seen {
    /// SYN in the original direction.
    pub const SYN_O: u8 = 1;
    /// SYN in the reply direction.
    pub const SYN_R: u8 = 2;
    /// FIN in the original direction.
    pub const FIN_O: u8 = 4;
    /// FIN in the reply direction.
    pub const FIN_R: u8 = 8;
    /// A RST either way.
    pub const RST: u8 = 16;
}

/// What a session translates.
pub mod kind {
    /// The source (SNAT or masquerade).
    pub const SNAT: u8 = 1;
    /// The destination (DNAT, port forward).
    pub const DNAT: u8 = 2;
}

/// One translated flow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Session {
    /// The tuple the original direction arrives with.
    pub o: Key4,
    /// The tuple it leaves with.
    pub t: Key4,
    /// Deadline (ticks); a free session links the next free one here.
    expires: u32,
    /// Its mapping, or [`NONE`].
    mapping: u32,
    /// [`tcp_seen`] bits.
    pub seen: u8,
    /// [`kind`] bits; 0 for a free session.
    pub kind: u8,
}

/// One endpoint-independent mapping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Mapping {
    inside: (u32, u16),
    ext: (u32, u16),
    proto: u8,
    /// Sessions using it; a free mapping links the next free one here.
    refs: u32,
}

/// No session, mapping or slot.
pub const NONE: u32 = u32::MAX;

/// An open-addressing index (linear probing, deletion by backward shift, at most half
/// full): slots of (32-bit hash tag, value + 1), 0 when empty.
struct Index {
    slots: Box<[u64]>,
    mask: usize,
}

impl Index {
    fn new(entries: usize) -> Index {
        let n = (entries.max(4) * 2).next_power_of_two();
        Index {
            slots: vec![0u64; n].into_boxed_slice(),
            mask: n - 1,
        }
    }
    fn bytes(&self) -> usize {
        self.slots.len() * 8
    }
    /// The value stored for `h` that `eq` accepts.
    #[inline]
    fn find(&self, h: u64, mut eq: impl FnMut(u32) -> bool) -> Option<u32> {
        let tag = h as u32;
        let mut i = tag as usize & self.mask;
        // At most half the slots are full, so an empty one ends every probe; the count
        // bounds it regardless.
        for _ in 0..self.slots.len() {
            let s = *self.slots.get(i)?;
            if s == 0 {
                return None;
            }
            if (s >> 32) as u32 == tag {
                let v = (s as u32).wrapping_sub(1);
                if eq(v) {
                    return Some(v);
                }
            }
            i = (i + 1) & self.mask;
        }
        None
    }
    fn insert(&mut self, h: u64, v: u32) {
        let tag = h as u32;
        let mut i = tag as usize & self.mask;
        for _ in 0..self.slots.len() {
            if let Some(s) = self.slots.get_mut(i) {
                if *s == 0 {
                    *s = u64::from(tag) << 32 | u64::from(v.wrapping_add(1));
                    return;
                }
            }
            i = (i + 1) & self.mask;
        }
    }
    fn remove(&mut self, h: u64, v: u32) {
        let tag = h as u32;
        let want = u64::from(tag) << 32 | u64::from(v.wrapping_add(1));
        let mut i = tag as usize & self.mask;
        let mut found = None;
        for _ in 0..self.slots.len() {
            match self.slots.get(i) {
                Some(0) | None => break,
                Some(&s) if s == want => {
                    found = Some(i);
                    break;
                }
                _ => i = (i + 1) & self.mask,
            }
        }
        let Some(mut hole) = found else { return };
        // Backward shift: pull later entries of the run into the hole when their home
        // slot allows it, so no tombstones build up.
        let mut j = hole;
        for _ in 0..self.slots.len() {
            j = (j + 1) & self.mask;
            let s = self.slots[j];
            if s == 0 {
                break;
            }
            let home = (s >> 32) as usize & self.mask;
            if (j.wrapping_sub(home) & self.mask) >= (j.wrapping_sub(hole) & self.mask) {
                self.slots[hole] = s;
                hole = j;
            }
        }
        self.slots[hole] = 0;
    }
    fn clear(&mut self) {
        self.slots.fill(0);
    }
}

/// Which side of a session a key found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The original direction (the packet's tuple is the session's `o`).
    Orig,
    /// The reply direction (the packet's tuple is the session's `t` reversed).
    Reply,
}

/// Why a session could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The session table is full.
    Full,
    /// No free external port in the worker's slice near the probes.
    NoPort,
    /// Another session already has this reply tuple.
    Collision,
}

/// What a worker's table has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Sessions created.
    pub created: u64,
    /// Sessions expired.
    pub expired: u64,
    /// Mappings created.
    pub mappings: u64,
    /// New sessions refused, table full.
    pub full: u64,
    /// New mappings refused, no port.
    pub no_port: u64,
    /// New sessions refused, reply tuple taken.
    pub collision: u64,
}

/// An external endpoint for a new mapping: where to put it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool<'a> {
    /// Address ranges (inclusive, host order), one of which the inside address is paired
    /// with (RFC 4787 REQ-2: an inside address always gets the same external address).
    pub ranges: &'a [(u32, u32)],
}

/// One worker's sessions and mappings.
pub struct NatTable {
    sessions: Box<[Session]>,
    free: u32,
    len: usize,
    index: Index,
    mappings: Box<[Mapping]>,
    mfree: u32,
    mlen: usize,
    mindex: Index,
    seed: u64,
    ports: (u16, u16),
    timeouts: [u32; 4],
    sweep_at: usize,
    counters: Counters,
    /// Where external ports are claimed from the kernel (AF_XDP ports), and how many
    /// mappings of this worker hold each (protocol, port): a port is claimed while any
    /// does.
    claims: Arc<[Arc<dyn PortClaims>]>,
    claimed: Box<[u16]>,
}

/// Index of a protocol's block in the claim counts.
fn claim_block(proto: u8) -> Option<usize> {
    match proto {
        proto::TCP => Some(0),
        proto::UDP => Some(1),
        proto::ICMP => Some(2),
        _ => None,
    }
}

impl NatTable {
    /// A table of `max` sessions (and as many mappings) for worker `worker` of `workers`.
    pub fn new(max: usize, worker: usize, workers: usize, t: &Timeouts) -> NatTable {
        Self::with_claims(max, worker, workers, t, Arc::from(Vec::new()))
    }

    /// [`NatTable::new`], claiming the external ports of its mappings from the kernel
    /// through `claims`.
    pub fn with_claims(
        max: usize,
        worker: usize,
        workers: usize,
        t: &Timeouts,
        claims: Arc<[Arc<dyn PortClaims>]>,
    ) -> NatTable {
        let max = max.clamp(1, (u32::MAX / 4) as usize);
        let mut sessions = vec![Session::default(); max].into_boxed_slice();
        for (i, s) in sessions.iter_mut().enumerate() {
            s.expires = if i + 1 < max { i as u32 + 1 } else { NONE };
        }
        let mut mappings = vec![Mapping::default(); max].into_boxed_slice();
        for (i, m) in mappings.iter_mut().enumerate() {
            m.refs = if i + 1 < max { i as u32 + 1 } else { NONE };
        }
        let workers = workers.clamp(1, 64) as u32;
        let w = (worker as u32).min(workers - 1);
        let span = (65536 - u32::from(PORT_MIN)) / workers;
        let lo = u32::from(PORT_MIN) + w * span;
        let mut table = NatTable {
            sessions,
            free: 0,
            len: 0,
            index: Index::new(2 * max),
            mappings,
            mfree: 0,
            mlen: 0,
            mindex: Index::new(2 * max),
            seed: 0x5eed_0000_0000_0001 ^ (worker as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            ports: (lo as u16, (lo + span - 1).min(65535) as u16),
            timeouts: [0; 4],
            sweep_at: 0,
            counters: Counters::default(),
            claimed: if claims.is_empty() {
                Box::new([])
            } else {
                vec![0u16; 3 << 16].into_boxed_slice()
            },
            claims,
        };
        table.set_timeouts(t);
        table
    }

    /// Change the timeouts (sessions take them at their next packet).
    pub fn set_timeouts(&mut self, t: &Timeouts) {
        self.timeouts = [
            ticks(t.tcp_established),
            ticks(t.tcp_transitory),
            ticks(t.udp),
            ticks(t.icmp),
        ];
    }

    /// The external ports this worker hands out.
    pub fn port_range(&self) -> (u16, u16) {
        self.ports
    }

    /// Sessions in the table.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sessions it can hold.
    pub fn max(&self) -> usize {
        self.sessions.len()
    }

    /// Mappings in use.
    pub fn mappings(&self) -> usize {
        self.mlen
    }

    /// What it has done.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Bytes it takes.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.sessions)
            + std::mem::size_of_val(&*self.mappings)
            + self.index.bytes()
            + self.mindex.bytes()
    }

    fn session_key(&self, v: u32) -> Option<Key4> {
        let s = self.sessions.get((v >> 1) as usize)?;
        if s.kind == 0 {
            return None;
        }
        Some(if v & 1 == 0 { s.o } else { s.t.reversed() })
    }

    /// The hash [`NatTable::lookup_hashed`] takes for tuple `k`.
    #[inline]
    pub fn hash(&self, k: &Key4) -> u64 {
        k.hash(self.seed)
    }

    /// Prefetch the index slot of hash `h` (a while before [`NatTable::prefetch_session`]).
    #[inline]
    pub fn prefetch_slot(&self, h: u64) {
        let i = h as u32 as usize & self.index.mask;
        crate::conntrack::table::prefetch(self.index.slots.as_ptr().wrapping_add(i));
    }

    /// Prefetch the session the first slot of `h` whose tag matches points to (the slot
    /// should be in cache: [`NatTable::prefetch_slot`] a while before).
    #[inline]
    pub fn prefetch_session(&self, h: u64) {
        let tag = h as u32;
        let mut i = tag as usize & self.index.mask;
        for _ in 0..4 {
            match self.index.slots.get(i) {
                Some(&s) if s != 0 => {
                    if (s >> 32) as u32 == tag {
                        let id = ((s as u32).wrapping_sub(1) >> 1) as usize;
                        crate::conntrack::table::prefetch(self.sessions.as_ptr().wrapping_add(id));
                        return;
                    }
                }
                _ => return,
            }
            i = (i + 1) & self.index.mask;
        }
    }

    /// The session a packet with tuple `k` belongs to, and which way it goes; an expired
    /// one is removed and not found.
    #[inline]
    pub fn lookup(&mut self, k: &Key4, now_ns: u64) -> Option<(u32, Side)> {
        let h = k.hash(self.seed);
        self.lookup_hashed(k, h, now_ns)
    }

    /// [`NatTable::lookup`] with `k`'s hash ([`NatTable::hash`]) computed already.
    #[inline]
    pub fn lookup_hashed(&mut self, k: &Key4, h: u64, now_ns: u64) -> Option<(u32, Side)> {
        let v = self.index.find(h, |v| self.session_key(v) == Some(*k))?;
        let id = v >> 1;
        let s = self.sessions.get(id as usize)?;
        if s.expires < tick(now_ns) {
            self.remove(id);
            self.counters.expired += 1;
            return None;
        }
        Some((id, if v & 1 == 0 { Side::Orig } else { Side::Reply }))
    }

    /// Session `id`.
    pub fn get(&self, id: u32) -> Option<&Session> {
        self.sessions.get(id as usize).filter(|s| s.kind != 0)
    }

    /// Session `id` with the seconds until it expires at `now_ns`.
    pub fn session_at(&self, id: u32, now_ns: u64) -> Option<(Session, u64)> {
        let s = self.get(id)?;
        let left = u64::from(s.expires).saturating_sub(u64::from(tick(now_ns)));
        Some((*s, left << TICK_SHIFT))
    }

    /// Note a packet of session `id` going `side` at `now_ns` with TCP `flags` (0 for
    /// others): its deadline moves on.
    #[inline]
    pub fn refresh(&mut self, id: u32, side: Side, flags: u8, now_ns: u64) {
        let t = self.timeouts;
        let Some(s) = self.sessions.get_mut(id as usize) else {
            return;
        };
        let timeout = match s.o.proto {
            proto::TCP => {
                use tcp_seen::*;
                let (syn, fin) = match side {
                    Side::Orig => (SYN_O, FIN_O),
                    Side::Reply => (SYN_R, FIN_R),
                };
                if flags & 0x02 != 0 {
                    s.seen |= syn;
                }
                if flags & 0x01 != 0 {
                    s.seen |= fin;
                }
                if flags & 0x04 != 0 {
                    s.seen |= RST;
                }
                let open = s.seen & (SYN_O | SYN_R) == SYN_O | SYN_R;
                let closing = s.seen & (FIN_O | FIN_R | RST) != 0;
                if open && !closing {
                    t[0]
                } else {
                    t[1]
                }
            }
            proto::UDP => t[2],
            proto::ICMP => t[3],
            _ => t[2],
        };
        s.expires = tick(now_ns).saturating_add(timeout);
    }

    fn alloc_session(&mut self, now_ns: u64) -> Result<u32, Refused> {
        if self.free == NONE {
            // Make room from expired sessions, if the sweep finds any nearby.
            self.sweep(now_ns, 64);
        }
        let id = self.free;
        let s = self.sessions.get_mut(id as usize).ok_or(Refused::Full)?;
        self.free = s.expires;
        self.len += 1;
        Ok(id)
    }

    /// A session for a flow whose first packet arrived as `o` and leaves as `t`, with
    /// `kind` of translation and `mapping` (or [`NONE`]).
    fn create(
        &mut self,
        o: Key4,
        t: Key4,
        kind: u8,
        mapping: u32,
        flags: u8,
        now_ns: u64,
    ) -> Result<u32, Refused> {
        let ho = o.hash(self.seed);
        let r = t.reversed();
        let hr = r.hash(self.seed);
        if self
            .index
            .find(hr, |v| self.session_key(v) == Some(r))
            .is_some()
            || self
                .index
                .find(ho, |v| self.session_key(v) == Some(o))
                .is_some()
        {
            self.counters.collision += 1;
            return Err(Refused::Collision);
        }
        let id = match self.alloc_session(now_ns) {
            Ok(id) => id,
            Err(e) => {
                self.counters.full += 1;
                return Err(e);
            }
        };
        if let Some(s) = self.sessions.get_mut(id as usize) {
            *s = Session {
                o,
                t,
                expires: 0,
                mapping,
                seen: 0,
                kind,
            };
        }
        self.index.insert(ho, id << 1);
        self.index.insert(hr, id << 1 | 1);
        self.counters.created += 1;
        self.refresh(id, Side::Orig, flags, now_ns);
        Ok(id)
    }

    /// A session translating only the destination: `o` leaves as `o` with `dst`. `flags`:
    /// the first packet's TCP flags.
    pub fn create_dnat(
        &mut self,
        o: Key4,
        dst: (u32, u16),
        flags: u8,
        now_ns: u64,
    ) -> Result<u32, Refused> {
        let t = Key4 {
            dst: dst.0,
            dport: dst.1,
            ..o
        };
        self.create(o, t, kind::DNAT, NONE, flags, now_ns)
    }

    /// A session translating the source of `o` to an endpoint of `pool` (endpoint
    /// independent: the inside endpoint's mapping if it has one there).
    pub fn create_snat(
        &mut self,
        o: Key4,
        pool: Pool<'_>,
        flags: u8,
        now_ns: u64,
    ) -> Result<u32, Refused> {
        let (m, ext) = self.mapping_for(&o, pool)?;
        let t = Key4 {
            src: ext.0,
            sport: ext.1,
            dport: if o.proto == proto::ICMP {
                ext.1
            } else {
                o.dport
            },
            ..o
        };
        let r = self.create(o, t, kind::SNAT, m, flags, now_ns);
        if r.is_err() {
            self.release_mapping(m);
        }
        r
    }

    /// Add source translation to session `id` (made by [`NatTable::create_dnat`]): the
    /// packet leaving as `t` now leaves from an endpoint of `pool`.
    pub fn add_snat(&mut self, id: u32, pool: Pool<'_>) -> Result<(), Refused> {
        let Some(s) = self.get(id).copied() else {
            return Err(Refused::Full);
        };
        if s.kind & kind::SNAT != 0 {
            return Ok(());
        }
        // The mapping is of the endpoint as it leaves the destination translation.
        let (m, ext) = self.mapping_for(&s.t, pool)?;
        let t = Key4 {
            src: ext.0,
            sport: ext.1,
            dport: if s.t.proto == proto::ICMP {
                ext.1
            } else {
                s.t.dport
            },
            ..s.t
        };
        let r_new = t.reversed();
        let h_new = r_new.hash(self.seed);
        if self
            .index
            .find(h_new, |v| self.session_key(v) == Some(r_new))
            .is_some()
        {
            self.release_mapping(m);
            self.counters.collision += 1;
            return Err(Refused::Collision);
        }
        let r_old = s.t.reversed();
        self.index.remove(r_old.hash(self.seed), id << 1 | 1);
        if let Some(x) = self.sessions.get_mut(id as usize) {
            x.t = t;
            x.kind |= kind::SNAT;
            x.mapping = m;
        }
        self.index.insert(h_new, id << 1 | 1);
        Ok(())
    }

    fn mkey_inside(addr: u32, port: u16, proto: u8) -> Key4 {
        Key4 {
            src: addr,
            sport: port,
            proto,
            ..Key4::default()
        }
    }

    fn mkey_ext(addr: u32, port: u16, proto: u8) -> Key4 {
        Key4 {
            dst: addr,
            dport: port,
            proto,
            ..Key4::default()
        }
    }

    fn mapping_key(&self, v: u32) -> Option<Key4> {
        let m = self.mappings.get((v >> 1) as usize)?;
        if m.proto == 0 {
            return None;
        }
        Some(if v & 1 == 0 {
            Self::mkey_inside(m.inside.0, m.inside.1, m.proto)
        } else {
            Self::mkey_ext(m.ext.0, m.ext.1, m.proto)
        })
    }

    /// The mapping (existing, with a reference more, or new) of the source endpoint of
    /// `o` into `pool`.
    fn mapping_for(&mut self, o: &Key4, pool: Pool<'_>) -> Result<(u32, (u32, u16)), Refused> {
        let ki = Self::mkey_inside(o.src, o.sport, o.proto);
        let hi = ki.hash(self.seed);
        if let Some(v) = self.mindex.find(hi, |v| self.mapping_key(v) == Some(ki)) {
            let id = v >> 1;
            if let Some(m) = self.mappings.get_mut(id as usize) {
                if pool
                    .ranges
                    .iter()
                    .any(|&(lo, hi)| (lo..=hi).contains(&m.ext.0))
                {
                    m.refs += 1;
                    return Ok((id, m.ext));
                }
            }
            // The pool changed under the mapping: new sessions get a new one. The old one
            // stays for its sessions.
        }
        let total: u64 = pool
            .ranges
            .iter()
            .map(|&(lo, hi)| u64::from(hi.saturating_sub(lo)) + 1)
            .sum();
        if total == 0 {
            self.counters.no_port += 1;
            return Err(Refused::NoPort);
        }
        // Paired pooling: the inside address picks the external one.
        let mut pick = mix(u64::from(o.src) ^ self.seed, 0x2545_f491_4f6c_dd1d) % total;
        let mut addr = 0;
        for &(lo, hi) in pool.ranges {
            let n = u64::from(hi.saturating_sub(lo)) + 1;
            if pick < n {
                addr = lo + pick as u32;
                break;
            }
            pick -= n;
        }
        let (plo, phi) = self.ports;
        let span = u32::from(phi - plo) + 1;
        // The inside port first (port preservation), then from a hash of the flow: probing
        // on from the inside port would crowd every host that uses the same port.
        let hashed =
            (mix(u64::from(o.sport) ^ self.seed, o.hash(self.seed)) % u64::from(span)) as u32;
        let preferred = (plo..=phi)
            .contains(&o.sport)
            .then(|| u32::from(o.sport - plo));
        let mut port = None;
        let candidates = preferred
            .into_iter()
            .chain((0..PORT_PROBES.min(span)).map(|k| (hashed + k) % span));
        for off in candidates {
            let p = plo + off as u16;
            let ke = Self::mkey_ext(addr, p, o.proto);
            let he = ke.hash(self.seed);
            if self
                .mindex
                .find(he, |v| self.mapping_key(v) == Some(ke))
                .is_none()
            {
                port = Some((p, he));
                break;
            }
        }
        let Some((p, he)) = port else {
            self.counters.no_port += 1;
            return Err(Refused::NoPort);
        };
        let id = self.mfree;
        let Some(m) = self.mappings.get_mut(id as usize) else {
            // As many mappings as sessions: the table is full.
            self.counters.full += 1;
            return Err(Refused::Full);
        };
        self.mfree = m.refs;
        *m = Mapping {
            inside: (o.src, o.sport),
            ext: (addr, p),
            proto: o.proto,
            refs: 1,
        };
        self.mlen += 1;
        // A stale mapping of the same inside endpoint (pool changed) stays findable by
        // its external key only for its sessions: the new one takes the inside key.
        if let Some(v) = self.mindex.find(hi, |v| self.mapping_key(v) == Some(ki)) {
            self.mindex.remove(hi, v);
        }
        self.mindex.insert(hi, id << 1);
        self.mindex.insert(he, id << 1 | 1);
        self.counters.mappings += 1;
        self.claim(o.proto, p, true);
        Ok((id, (addr, p)))
    }

    fn release_mapping(&mut self, id: u32) {
        let Some(m) = self.mappings.get_mut(id as usize) else {
            return;
        };
        if m.proto == 0 {
            return;
        }
        m.refs = m.refs.saturating_sub(1);
        if m.refs > 0 {
            return;
        }
        let m = *m;
        let ki = Self::mkey_inside(m.inside.0, m.inside.1, m.proto);
        let ke = Self::mkey_ext(m.ext.0, m.ext.1, m.proto);
        self.mindex.remove(ki.hash(self.seed), id << 1);
        self.mindex.remove(ke.hash(self.seed), id << 1 | 1);
        self.claim(m.proto, m.ext.1, false);
        if let Some(x) = self.mappings.get_mut(id as usize) {
            *x = Mapping {
                refs: self.mfree,
                ..Mapping::default()
            };
        }
        self.mfree = id;
        self.mlen -= 1;
    }

    /// Count a mapping more (`on`) or less on external port `port`, and claim or release
    /// it where the count leaves or reaches zero.
    fn claim(&mut self, proto: u8, port: u16, on: bool) {
        let Some(b) = claim_block(proto) else { return };
        let Some(c) = self.claimed.get_mut(b << 16 | usize::from(port)) else {
            return;
        };
        let was = *c;
        *c = if on {
            c.saturating_add(1)
        } else {
            c.saturating_sub(1)
        };
        if (was == 0) != (*c == 0) {
            for x in self.claims.iter() {
                x.set(proto, port, false, on);
            }
        }
    }

    /// Remove session `id` (and its mapping's reference); false if it was not there.
    pub fn remove(&mut self, id: u32) -> bool {
        let Some(s) = self.get(id).copied() else {
            return false;
        };
        self.index.remove(s.o.hash(self.seed), id << 1);
        self.index
            .remove(s.t.reversed().hash(self.seed), id << 1 | 1);
        if s.mapping != NONE {
            self.release_mapping(s.mapping);
        }
        if let Some(x) = self.sessions.get_mut(id as usize) {
            *x = Session {
                expires: self.free,
                ..Session::default()
            };
        }
        self.free = id;
        self.len -= 1;
        true
    }

    /// Look at up to `n` sessions for expiry at `now_ns`; returns how many expired.
    pub fn sweep(&mut self, now_ns: u64, n: usize) -> usize {
        let now = tick(now_ns);
        let max = self.sessions.len();
        let mut gone = 0;
        for _ in 0..n.min(max) {
            let i = self.sweep_at;
            self.sweep_at = if i + 1 >= max { 0 } else { i + 1 };
            let expired = self
                .sessions
                .get(i)
                .is_some_and(|s| s.kind != 0 && s.expires < now);
            if expired && self.remove(i as u32) {
                gone += 1;
            }
        }
        self.counters.expired += gone as u64;
        gone
    }

    /// Remove every session.
    pub fn clear(&mut self) {
        let max = self.sessions.len();
        for i in 0..self.mappings.len() {
            let m = self.mappings[i];
            if m.proto != 0 {
                self.claim(m.proto, m.ext.1, false);
            }
        }
        for (i, s) in self.sessions.iter_mut().enumerate() {
            *s = Session {
                expires: if i + 1 < max { i as u32 + 1 } else { NONE },
                ..Session::default()
            };
        }
        for (i, m) in self.mappings.iter_mut().enumerate() {
            *m = Mapping {
                refs: if i + 1 < max { i as u32 + 1 } else { NONE },
                ..Mapping::default()
            };
        }
        self.free = 0;
        self.mfree = 0;
        self.len = 0;
        self.mlen = 0;
        self.index.clear();
        self.mindex.clear();
    }
}
