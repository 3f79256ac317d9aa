//! The generator's preallocated tables: the client tuple space with its reuse
//! quarantine, and the emulated servers' connection table keyed by the tuple as the
//! server side sees it (a NAT in between may have changed the client's address and port).

/// Tuple state: in use, with the client slot in the low bits.
const IN_USE: u32 = 1 << 31;

/// Every client (address, port) pair, numbered address first: tuple `t` is address
/// `first + t % addrs`, port `port_first + t / addrs`. Each tuple has one `u32` of state:
/// 0 never used; `IN_USE | slot` while a connection holds it; otherwise the millisecond
/// (since the run's start, plus 1) from which it may be reused.
#[derive(Debug)]
pub(crate) struct Tuples {
    addr_first: u32,
    addrs: u32,
    port_first: u16,
    ports: u32,
    state: Vec<u32>,
    cursor: u32,
}

/// Why no tuple could be taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TupleWait {
    /// The next tuple is still held by a connection.
    InUse,
    /// The next tuple is in its reuse quarantine.
    Quarantine,
}

impl Tuples {
    /// `addrs × ports` tuples (the caller checks the product fits 2^31).
    pub fn new(addr_first: u32, addrs: u32, port_first: u16, ports: u32) -> Tuples {
        Tuples {
            addr_first,
            addrs: addrs.max(1),
            port_first,
            ports: ports.max(1),
            state: Vec::new(),
            cursor: 0,
        }
    }

    /// Number of tuples.
    pub fn len(&self) -> u32 {
        self.addrs * self.ports
    }

    /// Forget every use (a new run); the state is allocated zeroed, so pages of tuples
    /// never reached cost no memory.
    pub fn reset(&mut self) {
        self.state = Vec::new();
        self.state = vec![0u32; self.len() as usize];
        self.cursor = 0;
    }

    /// Address and port of tuple `t`.
    #[inline]
    pub fn at(&self, t: u32) -> (u32, u16) {
        (
            self.addr_first.wrapping_add(t % self.addrs),
            self.port_first.wrapping_add((t / self.addrs) as u16),
        )
    }

    /// The tuple of (`addr`, `port`), if it is one of ours.
    #[inline]
    pub fn index(&self, addr: u32, port: u16) -> Option<u32> {
        let a = addr.wrapping_sub(self.addr_first);
        let p = u32::from(port.wrapping_sub(self.port_first));
        (a < self.addrs && p < self.ports).then_some(p * self.addrs + a)
    }

    /// The client slot holding tuple `t`, if one does.
    #[inline]
    pub fn slot(&self, t: u32) -> Option<u32> {
        match self.state.get(t as usize) {
            Some(&s) if s & IN_USE != 0 => Some(s & !IN_USE),
            _ => None,
        }
    }

    /// Take the next tuple in cycle order for `slot` at `now_ms`, or say why not (the
    /// cycle waits for it rather than skipping, so tuples are reused in order).
    #[inline]
    pub fn take(&mut self, slot: u32, now_ms: u32) -> Result<u32, TupleWait> {
        let t = self.cursor;
        let Some(s) = self.state.get_mut(t as usize) else {
            return Err(TupleWait::InUse);
        };
        if *s & IN_USE != 0 {
            return Err(TupleWait::InUse);
        }
        if *s != 0 && *s - 1 > now_ms {
            return Err(TupleWait::Quarantine);
        }
        *s = IN_USE | slot;
        self.cursor = if t + 1 >= self.len() { 0 } else { t + 1 };
        Ok(t)
    }

    /// Give tuple `t` back, reusable from `until_ms` on.
    #[inline]
    pub fn release(&mut self, t: u32, until_ms: u32) {
        if let Some(s) = self.state.get_mut(t as usize) {
            *s = until_ms.min(IN_USE - 2) + 1;
        }
    }
}

/// A connection's addresses as the server side sees them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Key {
    pub src: u32,
    pub dst: u32,
    pub sport: u16,
    pub dport: u16,
}

impl Key {
    #[inline]
    fn hash(&self) -> u64 {
        let a = (u64::from(self.src) << 32) | u64::from(self.dst);
        let b = (u64::from(self.sport) << 16) | u64::from(self.dport);
        let h = (a ^ b.rotate_left(40)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^ (h >> 29)
    }
}

/// Server-side state of a TCP connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum ServerState {
    /// Slot unused.
    #[default]
    Free,
    /// SYN-ACK sent.
    SynRcvd,
    /// Handshake complete, receiving the request.
    Receiving,
    /// Response sent, waiting for the client's FIN.
    Responded,
    /// FIN-ACK sent, waiting for the last ACK.
    LastAck,
}

/// One server-side connection (40 bytes).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ServerConn {
    pub key: Key,
    pub state: ServerState,
    /// Our initial sequence number.
    pub iss: u32,
    /// The client's initial sequence number.
    pub irs: u32,
    /// Request bytes received in order.
    pub rcvd: u32,
    /// MSS for our segments (the client's, capped by ours).
    pub mss: u16,
    /// Time (ns) after which an idle entry is dropped.
    pub deadline: u64,
}

/// Server connections in a slab, found by [`Key`] through an open-addressing index
/// (linear probing, backward-shift deletion, at most half full).
#[derive(Debug)]
pub(crate) struct ServerTable {
    pub conns: Vec<ServerConn>,
    free: Vec<u32>,
    /// Slot + 1, 0 for empty.
    index: Vec<u32>,
    mask: usize,
    /// Slots in use.
    pub used: u32,
    /// Highest slot ever used + 1 (the timer scan covers `0..high`).
    pub high: u32,
}

impl ServerTable {
    /// Room for `cap` connections.
    pub fn new(cap: u32) -> ServerTable {
        let cap = cap.max(1);
        let size = (cap as usize * 2).next_power_of_two();
        ServerTable {
            conns: vec![ServerConn::default(); cap as usize],
            free: (0..cap).rev().collect(),
            index: vec![0; size],
            mask: size - 1,
            used: 0,
            high: 0,
        }
    }

    /// Empty every slot (a new run).
    pub fn clear(&mut self) {
        let cap = self.conns.len() as u32;
        self.conns.fill(ServerConn::default());
        self.free.clear();
        self.free.extend((0..cap).rev());
        self.index.fill(0);
        self.used = 0;
        self.high = 0;
    }

    /// The slot of `key`.
    #[inline]
    pub fn find(&self, key: &Key) -> Option<u32> {
        let mut i = key.hash() as usize & self.mask;
        loop {
            let e = *self.index.get(i)?;
            if e == 0 {
                return None;
            }
            let slot = e - 1;
            if self.conns.get(slot as usize).is_some_and(|c| c.key == *key) {
                return Some(slot);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// A new slot for `key` (not present), or `None` when the table is full.
    #[inline]
    pub fn insert(&mut self, key: Key) -> Option<u32> {
        let slot = self.free.pop()?;
        let mut i = key.hash() as usize & self.mask;
        while self.index[i] != 0 {
            i = (i + 1) & self.mask;
        }
        self.index[i] = slot + 1;
        self.conns[slot as usize] = ServerConn {
            key,
            ..ServerConn::default()
        };
        self.used += 1;
        self.high = self.high.max(slot + 1);
        Some(slot)
    }

    /// Free `slot` and take its key out of the index.
    #[inline]
    pub fn remove(&mut self, slot: u32) {
        let Some(c) = self.conns.get_mut(slot as usize) else {
            return;
        };
        if c.state == ServerState::Free {
            return;
        }
        c.state = ServerState::Free;
        let key = c.key;
        let mut i = key.hash() as usize & self.mask;
        while self.index[i] != slot + 1 {
            if self.index[i] == 0 {
                return; // not indexed: cannot happen
            }
            i = (i + 1) & self.mask;
        }
        // Backward-shift deletion: move later entries of the probe run into the hole
        // when their home position allows.
        let mut j = i;
        loop {
            j = (j + 1) & self.mask;
            let e = self.index[j];
            if e == 0 {
                break;
            }
            let home = self.conns[(e - 1) as usize].key.hash() as usize & self.mask;
            let between = if i <= j {
                i < home && home <= j
            } else {
                i < home || home <= j
            };
            if between {
                continue;
            }
            self.index[i] = e;
            i = j;
        }
        self.index[i] = 0;
        self.free.push(slot);
        self.used -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn tuples_cycle_in_order_and_respect_quarantine() {
        let mut t = Tuples::new(0x0a00_0001, 2, 1000, 2);
        t.reset();
        assert_eq!(t.len(), 4);
        assert_eq!(t.at(3), (0x0a00_0002, 1001));
        assert_eq!(t.index(0x0a00_0002, 1001), Some(3));
        assert_eq!(t.index(0x0a00_0003, 1001), None);
        assert_eq!(t.index(0x0a00_0001, 999), None);
        for s in 0..4 {
            assert_eq!(t.take(s, 0), Ok(s));
            assert_eq!(t.slot(s), Some(s));
        }
        assert_eq!(t.take(9, 0), Err(TupleWait::InUse));
        t.release(0, 50);
        assert_eq!(t.slot(0), None);
        assert_eq!(t.take(9, 49), Err(TupleWait::Quarantine));
        assert_eq!(t.take(9, 50), Ok(0));
        assert_eq!(t.take(9, 50), Err(TupleWait::InUse), "tuple 1 still held");
    }

    proptest::proptest! {
        /// The server table agrees with a HashMap under any sequence of inserts and removes.
        #[test]
        fn server_table_matches_a_map(ops in proptest::collection::vec((0u16..64, proptest::bool::ANY), 1..400)) {
            let mut tab = ServerTable::new(32);
            let mut model: HashMap<u16, u32> = HashMap::new();
            let key = |k: u16| Key { src: u32::from(k % 3), dst: 7, sport: k, dport: 80 };
            for (k, add) in ops {
                if add {
                    if model.contains_key(&k) { continue; }
                    match tab.insert(key(k)) {
                        Some(s) => {
                            tab.conns[s as usize].state = ServerState::SynRcvd;
                            model.insert(k, s);
                        }
                        None => proptest::prop_assert_eq!(model.len(), 32),
                    }
                } else if let Some(s) = model.remove(&k) {
                    tab.remove(s);
                }
                proptest::prop_assert_eq!(tab.used as usize, model.len());
                for k in 0..64u16 {
                    proptest::prop_assert_eq!(tab.find(&key(k)), model.get(&k).copied());
                }
            }
        }
    }
}
