//! ESP on the fast path's feature arcs, for route-based tunnel interfaces:
//!
//! - `esp-decrypt` on `port-input` of every port: an untagged frame carrying ESP (IPv4 or
//!   IPv6, not a fragment) to one of the router's addresses is looked up by SPI, decrypted
//!   in place, and goes on as a frame received on the SA's tunnel interface (ethernet-input,
//!   ip4-input / ip6-input, the tunnel's unicast features, the lookup), so what arrives
//!   through a tunnel is validated, filtered and routed like anything received.
//! - `esp4-encrypt` / `esp6-encrypt` on `ip4-output` / `ip6-output` of every tunnel
//!   interface: a packet routed to the tunnel (its TTL decremented, its MTU checked against
//!   the tunnel's) is encrypted in place with the tunnel's transmit SA, and routed again by
//!   its outer destination ([`dataplane::feature::Batch::reroute`]).
//!
//! The SAs are the worker's own ([`crate::sad`]); the nodes of one worker borrow its table
//! in turn, one atomic flag per vector (never contended: a failed borrow is counted, never
//! waited for). Nothing allocates, locks or logs per packet; every failure is a counted
//! drop under its reason, per feature, and per SA in its counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use atomic_refcell::AtomicRefCell;
use dataplane::buffer::F_TO_OUTPUT;
use dataplane::feature::{ArcId, Batch, Feature, FeatureCx, FeatureNode, FeatureSpec};
use dataplane::handoff::HandoffTx;
use dataplane::VECTOR_SIZE;
use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use crate::arena::SharedStats;
use crate::dests::{Dest, DestKey};
use crate::error::EspError;
use crate::sa::{Direction, Mode, Sa};
use crate::sad::{self, Sad, SadWriter, NONE};

crate::esp_drops! {
    /// Drop reasons of `esp-decrypt`: the codec's, in [`EspError::ALL`]'s order, then the
    /// node's own.
    pub const DECRYPT_DROPS;
    D_UNKNOWN_SPI = ("unknown_spi", "ESP to the router with an SPI of no SA");
    D_FRAGMENT = (
        "fragment",
        "a malformed ESP fragment (not a multiple of 8 bytes though more follow, or empty)"
    );
    D_BUSY = (
        "busy",
        "the worker's SA table was borrowed (never expected)"
    );
    D_HANDOFF_FULL = ("handoff_full", "the lane to the SA's worker was full");
    D_FRAGMENT_OVERLAP = (
        "fragment_overlap",
        "an ESP fragment overlapping another of its datagram or disagreeing on its end (the datagram dropped)"
    );
    D_FRAGMENT_TOO_BIG = (
        "fragment_too_big",
        "an ESP datagram longer than 9216 bytes once reassembled"
    );
    D_NO_BUFFER = ("no_buffer", "no free frame for a reassembled ESP packet");
}

crate::esp_drops! {
    /// Drop reasons of `esp4-encrypt` / `esp6-encrypt`: the codec's, then the nodes' own.
    pub const ENCRYPT_DROPS;
    E_NO_SA = ("no_sa", "the tunnel has no transmit SA");
    E_BUSY = (
        "busy",
        "the worker's SA table was borrowed (never expected)"
    );
    E_HANDOFF_FULL = ("handoff_full", "the lane to the SA's worker was full");
}

/// The interface an SA of policy-based IPsec has in the table: none (what it decrypts is
/// received on the port it came in on; it is the policies' SA, not a tunnel's).
pub const POLICY_IFACE: u16 = u16::MAX;

/// The worker that gathers ESP fragments (the others hand theirs to it). SAs live on
/// their owners ([`crate::sad::Owners`]): a tunnel's on the tunnel's, a policy SA on its
/// own.
pub const OWNER: usize = 0;

/// The features' names.
pub const DECRYPT: &str = "esp-decrypt";
/// The IPv4 encrypt feature.
pub const ENCRYPT4: &str = "esp4-encrypt";
/// The IPv6 encrypt feature.
pub const ENCRYPT6: &str = "esp6-encrypt";

/// An installed SA as `show ipsec sa` lists it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct SaView {
    /// Its tunnel interface.
    pub tunnel: String,
    /// `in` or `out`.
    pub direction: &'static str,
    /// SPI.
    pub spi: u32,
    /// Encryption algorithm.
    pub encryption: &'static str,
    /// Integrity algorithm.
    pub integrity: &'static str,
    /// Extended sequence numbers.
    pub esn: bool,
    /// Replay window (inbound).
    pub replay_window: u32,
    /// Outer source.
    pub src: String,
    /// Outer destination.
    pub dst: String,
    /// Whether the tunnel sends with it (outbound) .
    pub active: bool,
    /// ESP in UDP (NAT traversal): its source and destination ports.
    pub udp: Option<(u16, u16)>,
    /// The worker whose table holds it: its sequence number or replay window is that
    /// worker's alone (the others hand it their packets for the SA).
    pub worker: usize,
}

/// An installed SA and its counters.
#[derive(Clone, Debug, Serialize)]
pub struct SaReport {
    /// What it is.
    #[serde(flatten)]
    pub sa: SaView,
    /// Packets (of inner packets).
    pub packets: u64,
    /// Bytes of inner packets.
    pub bytes: u64,
    /// The last sequence number sent (out) or the highest accepted (in).
    pub sequence: u64,
    /// Errors by kind (non-zero only).
    pub errors: Vec<(&'static str, u64)>,
}

struct Installed {
    /// What identifies it: a changed config (keys included) is a new SA.
    ident: Ident,
    stats: SharedStats,
    view: Brief,
    /// Its tunnel interface.
    iface: u16,
    /// Outbound with a configured key: its key's mark ([`key_mark`]). Keys IKE negotiated
    /// have none: they are never used again, so their sequence numbers need no keeping.
    mark: Option<Box<[u8]>>,
    /// UDP-encapsulated (NAT-T).
    natt: bool,
    /// Outbound, chosen by destination: the prefixes it has in the workers' [`Dests`]
    /// (crate::dests::Dests).
    dests: Option<Box<[DestKey]>>,
}

/// The control thread's records by SA slot. The SAD hands slots out from 0 up, so they
/// are dense: a vector indexed by slot keeps a million SAs' records without a hash
/// table's slack, and with room reserved for `max_sas` (address space, not memory, until
/// used) it never moves them (issue 27: memory per tunnel).
struct BySlot<T> {
    v: Vec<Option<T>>,
    len: usize,
}

impl<T> BySlot<T> {
    fn with_capacity(n: usize) -> BySlot<T> {
        BySlot {
            v: Vec::with_capacity(n),
            len: 0,
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn get(&self, slot: &u32) -> Option<&T> {
        self.v.get(*slot as usize).and_then(Option::as_ref)
    }

    fn get_mut(&mut self, slot: &u32) -> Option<&mut T> {
        self.v.get_mut(*slot as usize).and_then(Option::as_mut)
    }

    fn contains_key(&self, slot: &u32) -> bool {
        self.get(slot).is_some()
    }

    fn insert(&mut self, slot: u32, t: T) {
        let at = slot as usize;
        if at >= self.v.len() {
            self.v.resize_with(at + 1, || None);
        }
        if let Some(e) = self.v.get_mut(at) {
            if e.replace(t).is_none() {
                self.len += 1;
            }
        }
    }

    fn remove(&mut self, slot: &u32) -> Option<T> {
        let t = self.v.get_mut(*slot as usize).and_then(Option::take);
        self.len -= usize::from(t.is_some());
        t
    }

    fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.v
            .iter()
            .enumerate()
            .filter_map(|(k, t)| Some((k as u32, t.as_ref()?)))
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut T)> {
        self.v
            .iter_mut()
            .enumerate()
            .filter_map(|(k, t)| Some((k as u32, t.as_mut()?)))
    }

    fn values(&self) -> impl Iterator<Item = &T> {
        self.v.iter().flatten()
    }

    fn keys(&self) -> impl Iterator<Item = u32> + '_ {
        self.iter().map(|(k, _)| k)
    }
}

/// Sequence numbers reserved ahead of the one last seen, in memory and in the state file:
/// the worker may send this many between two looks of the control thread (20 ms at 50
/// Mpps) without reusing a number after a restart.
pub const SEQUENCE_GAP: u64 = 1 << 20;

struct Control {
    writer: SadWriter,
    /// By slot.
    installed: BySlot<Installed>,
    /// Tunnel names, each shared by its tunnel's records.
    names: FxHashSet<Arc<str>>,
    /// How many installed SAs are UDP-encapsulated.
    natt: usize,
    /// How many installed SAs have a key mark (outbound, configured keys).
    marked: usize,
    /// Per tunnel interface index: the slot it sends with.
    tx: Vec<u32>,
    /// The outbound SAs chosen by destination, found by (SPI, peer address, peer UDP port
    /// or 0) ([`chosen_key`] of their records): peers pick their SPIs, so two of a
    /// tunnel's peers may pick one. Slots, 4 bytes a bucket (issue 27: a map keyed by the
    /// triple took 28).
    chosen: hashbrown::HashTable<u32>,
    /// By key mark: the highest sequence number an outbound SA with that key used (or, read
    /// from the state file, may have used).
    sequences: std::collections::HashMap<Vec<u8>, u64>,
    /// What the state file holds.
    saved: std::collections::HashMap<Vec<u8>, u64>,
    state_file: Option<std::path::PathBuf>,
}

impl Control {
    /// Take the outbound SAs' sequence numbers as their counters last showed them.
    fn note_sequences(&mut self) {
        for i in self.installed.values() {
            if let Some(m) = &i.mark {
                let seq = i.stats.sequence();
                let e = self.sequences.entry(m.to_vec()).or_insert(0);
                *e = (*e).max(seq);
            }
        }
    }

    /// Write the state file if some SA came within half a gap of what it reserves (tmp
    /// file, then rename: a crash leaves the old one or the new one). A failure is logged;
    /// forwarding goes on.
    fn save_sequences(&mut self) {
        // Without SAs that keep sequence numbers (IKE's keep none), nothing to look at:
        // this runs on every control loop, whatever the number of SAs.
        if self.state_file.is_none() || self.marked == 0 && self.sequences.len() == self.saved.len()
        {
            return;
        }
        // Cheap while nothing is due (no allocation): called on every control loop.
        let due = self.installed.values().any(|i| {
            i.mark.as_ref().is_some_and(|m| {
                self.saved
                    .get(&**m)
                    .is_none_or(|&r| i.stats.sequence().saturating_add(SEQUENCE_GAP / 2) > r)
            })
        }) || self.sequences.keys().any(|m| !self.saved.contains_key(m));
        if !due {
            return;
        }
        self.note_sequences();
        let Some(path) = &self.state_file else {
            return;
        };
        let reserved: std::collections::HashMap<Vec<u8>, u64> = self
            .sequences
            .iter()
            .map(|(m, &seq)| {
                let r = self.saved.get(m).copied().unwrap_or(0);
                (m.clone(), r.max(seq.saturating_add(SEQUENCE_GAP)))
            })
            .collect();
        let text: String = reserved
            .iter()
            .map(|(m, seq)| {
                let h: String = m.iter().map(|b| format!("{b:02x}")).collect();
                format!("{h} {seq}\n")
            })
            .collect();
        let tmp = path.with_extension("tmp");
        match std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path)) {
            Ok(()) => {
                // A restart finds the reserved numbers: they count as used.
                for (m, seq) in &reserved {
                    let e = self.sequences.entry(m.clone()).or_insert(0);
                    *e = (*e).max(*seq);
                }
                self.saved = reserved;
            }
            Err(e) => tracing::warn!("writing {}: {e}", path.display()),
        }
    }
}

impl Control {
    /// `p` keyed, and where an outbound SA with a configured key starts its sequence
    /// numbers (past any SA that had its key: with the AEADs the sequence number is the
    /// nonce).
    fn build(&self, p: &crate::config::Planned) -> Result<(Sa, u64), String> {
        let mut sa = Sa::new(&p.config).map_err(|e| format!("ipsec.sa[{}]: {e}", p.index))?;
        let mut start = 0;
        if p.config.direction == Direction::Outbound && !p.negotiated {
            if let Some(&last) = self.sequences.get(&key_mark(&p.config)) {
                start = last.saturating_add(SEQUENCE_GAP);
                if !p.config.esn && start >= u64::from(u32::MAX) {
                    return Err(format!(
                        "ipsec.sa[{}]: its key was used up to sequence number {last} already; without ESN no number is left: use a new key",
                        p.index
                    ));
                }
                sa.set_sequence(start);
            }
        }
        Ok((sa, start))
    }

    /// `tunnel`'s name, shared by the SAs of that tunnel (kept for good: names are few).
    fn name(&mut self, tunnel: &str) -> Arc<str> {
        if let Some(n) = self.names.get(tunnel) {
            return n.clone();
        }
        let n: Arc<str> = tunnel.into();
        self.names.insert(n.clone());
        n
    }

    /// Queue `sa`'s insertion: its slot and its record (not yet [`Control::remember`]ed).
    fn insert(
        &mut self,
        p: &crate::config::Planned,
        ident: Ident,
        iface: u16,
        tunnel: &str,
        sa: Sa,
        start: u64,
    ) -> Result<(u32, Installed), crate::sad::SadError> {
        let outbound = p.config.direction == Direction::Outbound;
        let dests: Option<Box<[DestKey]>> = (outbound && !p.selectors.is_empty()).then(|| {
            p.selectors
                .iter()
                .filter_map(|&(a, l)| DestKey::new(iface, a, l))
                .collect()
        });
        let stats = sa.stats().clone();
        let slot = self.writer.insert(sa, iface)?;
        if let Some(keys) = &dests {
            if let Err(e) = self.writer.set_dests(keys, slot) {
                self.writer.remove(slot);
                return Err(e);
            }
        }
        if start > 0 {
            stats.publish(0, 0, start);
        }
        Ok((
            slot,
            Installed {
                ident,
                stats,
                view: view(&p.config, self.name(tunnel)),
                iface,
                mark: (outbound && !p.negotiated).then(|| key_mark(&p.config).into()),
                natt: p.config.natt.is_some(),
                dests,
            },
        ))
    }

    /// The slots of the outbound policy SAs (no tunnel's), by SPI (the first of each),
    /// with the worker holding each: one walk of the SAs for a whole SPD.
    fn policy_slots(&self) -> std::collections::HashMap<u32, (u32, u16)> {
        let mut m = std::collections::HashMap::new();
        for (slot, i) in self.installed.iter() {
            if i.iface == POLICY_IFACE && i.view.direction == Direction::Outbound {
                let owner = self.writer.owner(slot).unwrap_or(0) as u16;
                m.entry(i.view.spi).or_insert((slot, owner));
            }
        }
        m
    }

    /// The slot of the outbound policy SA (no tunnel's) with `spi`.
    fn policy_slot(&self, spi: u32) -> Option<u32> {
        self.installed
            .iter()
            .find(|(_, i)| {
                i.iface == POLICY_IFACE
                    && i.view.direction == Direction::Outbound
                    && i.view.spi == spi
            })
            .map(|(slot, _)| slot)
    }

    /// Record `i`, installed in `slot`.
    fn remember(&mut self, slot: u32, i: Installed) {
        let chosen = i.dests.is_some().then(|| chosen_key(&i));
        self.natt += usize::from(i.natt);
        self.marked += usize::from(i.mark.is_some());
        self.installed.insert(slot, i);
        if let Some(k) = chosen {
            // One slot per key: a newer SA with the key takes the older one's place.
            let h = chosen_hash(&k);
            let installed = &self.installed;
            match self.chosen.find_mut(h, |&s| {
                installed.get(&s).is_some_and(|o| chosen_key(o) == k)
            }) {
                Some(s) => *s = slot,
                None => {
                    self.chosen.insert_unique(h, slot, |&s| {
                        installed.get(&s).map_or(0, |o| chosen_hash(&chosen_key(o)))
                    });
                }
            }
        }
    }

    /// The slot of the outbound SA chosen by destination with key `k` ([`chosen_key`]).
    fn chosen_slot(&self, k: &(u32, std::net::IpAddr, u16)) -> Option<u32> {
        let installed = &self.installed;
        self.chosen
            .find(chosen_hash(k), |&s| {
                installed.get(&s).is_some_and(|o| chosen_key(o) == *k)
            })
            .copied()
    }

    /// Remove the SA in `slot`: a tunnel sending with it stops first; an outbound SA's
    /// sequence number is noted (its key may come back).
    fn forget(&mut self, slot: u32) {
        let Some(i) = self.installed.remove(&slot) else {
            return;
        };
        if let Some(m) = &i.mark {
            let e = self.sequences.entry(m.to_vec()).or_insert(0);
            *e = (*e).max(i.stats.sequence());
        }
        if self.tx.get(i.iface as usize) == Some(&slot) {
            self.writer.set_tx(i.iface, NONE);
            self.tx[i.iface as usize] = NONE;
        }
        if let Some(keys) = &i.dests {
            self.writer.unset_dests(keys, slot);
            // Its record is gone from `installed`: found by slot under its key's hash.
            if let Ok(e) = self
                .chosen
                .find_entry(chosen_hash(&chosen_key(&i)), |&s| s == slot)
            {
                e.remove();
            }
        }
        self.natt -= usize::from(i.natt);
        self.marked -= usize::from(i.mark.is_some());
        self.writer.remove(slot);
    }
}

/// How [`Control::chosen`] finds an outbound SA chosen by destination: its SPI, and its
/// peer's address and UDP port (0 without NAT-T).
fn chosen_key(i: &Installed) -> (u32, std::net::IpAddr, u16) {
    let peer = i
        .view
        .ends
        .map_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), |e| {
            e.1
        });
    // Outbound: its destination port is the peer's.
    (i.view.spi, peer, i.view.udp.map_or(0, |u| u.1))
}

fn chosen_hash(k: &(u32, std::net::IpAddr, u16)) -> u64 {
    std::hash::BuildHasher::hash_one(&rustc_hash::FxBuildHasher, k)
}

/// An outbound SA's key, as the sequence numbers are kept by: a SHA-256 of its keys under
/// a label of its own (no key is kept, nor anything the SA digest `ident` shows).
fn key_mark(c: &crate::sa::SaConfig) -> Vec<u8> {
    let mut d = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    d.update(b"ferrouter ipsec sequence");
    d.update(&c.enc_key);
    d.update(&[0xff]);
    d.update(&c.auth_key);
    d.finish().as_ref().to_vec()
}

fn hex_bytes(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// What the control thread and the ESP nodes share: each worker's SA table, and the
/// control thread's record of what it installed.
pub struct IpsecShared {
    /// Worker `w`'s table (holding the SAs of the tunnels it owns, and the policy SAs it
    /// owns).
    pub(crate) workers: Vec<Arc<AtomicRefCell<Sad>>>,
    /// The interfaces' SPDs (policy-based IPsec), taken up by the policy nodes between
    /// vectors.
    pub(crate) spd: arc_swap::ArcSwap<crate::spd::Spd>,
    control: Mutex<Control>,
    /// Vectors in which a node could not borrow its table.
    pub busy: AtomicU64,
    /// Each worker's sending sides to the others (one per ESP node), taken by the nodes
    /// as the workers start (none with one worker).
    pub(crate) senders: Mutex<Vec<Vec<Option<HandoffTx>>>>,
    /// Packets handed to the worker holding their SA (or, ESP fragments, to worker 0).
    pub handed_off: AtomicU64,
    /// Some SA is UDP-encapsulated (NAT-T): UDP to port 4500 of the router's addresses is
    /// ESP's (what the workers without SAs hand over).
    natt: std::sync::atomic::AtomicBool,
    /// The ESP reassembly table's counters ([`crate::reasm`]).
    pub reasm: Arc<crate::reasm::ReasmStats>,
}

/// Something one SA change needs: the tunnel interfaces by config index, and their names.
pub struct Tunnels<'a> {
    /// Per `[[ipsec.tunnel]]`: its interface index in the fast path.
    pub iface: &'a [u16],
    /// Per `[[ipsec.tunnel]]`: its name.
    pub names: &'a [String],
}

impl IpsecShared {
    /// Tables of `max_sas` SAs for `workers` workers over `ifaces` interfaces.
    pub fn new(workers: usize, max_sas: usize, ifaces: usize) -> IpsecShared {
        let (tables, mut writer) = sad::channels(max_sas, ifaces, workers);
        let reasm = Arc::<crate::reasm::ReasmStats>::default();
        // Worker 0 gathers ESP fragments (the others hand them over), in a table it gets
        // with the first inbound SA.
        writer.reassemble(reasm.clone());
        let tables = tables
            .into_iter()
            .map(|t| Arc::new(AtomicRefCell::new(t)))
            .collect();
        IpsecShared {
            workers: tables,
            control: Mutex::new(Control {
                writer,
                installed: BySlot::with_capacity(max_sas),
                names: FxHashSet::default(),
                natt: 0,
                marked: 0,
                tx: vec![NONE; ifaces],
                chosen: hashbrown::HashTable::new(),
                sequences: std::collections::HashMap::new(),
                saved: std::collections::HashMap::new(),
                state_file: None,
            }),
            spd: arc_swap::ArcSwap::from_pointee(crate::spd::Spd::default()),
            busy: AtomicU64::new(0),
            senders: Mutex::new(Vec::new()),
            handed_off: AtomicU64::new(0),
            natt: std::sync::atomic::AtomicBool::new(false),
            reasm,
        }
    }

    /// On worker `w`, between vectors (once per turn of its loop): apply a vector's worth
    /// of the ops the control thread queued for its SA table. The ESP nodes apply them too,
    /// but only when packets reach them: without this, SAs set up while no ESP flows (a
    /// hundred thousand IKE tunnels coming up) would wait for traffic to pull them in, and
    /// its first packets would find no SA. Returns how many it applied (0: none queued, or
    /// the table busy). No allocation: the ops were built by the control thread.
    pub fn apply_queued(&self, w: usize) -> usize {
        let Some(t) = self.workers.get(w) else {
            return 0;
        };
        let Ok(mut sad) = t.try_borrow_mut() else {
            return 0;
        };
        if !sad.ops_pending() {
            return 0;
        }
        sad.apply_ops(sad::OPS_PER_VECTOR)
    }

    /// Whether some installed SA is UDP-encapsulated (NAT-T): UDP to port 4500 of the
    /// router's addresses is then ESP's (read once per worker loop, not per packet).
    pub fn natt_active(&self) -> bool {
        self.natt.load(Ordering::Relaxed)
    }

    /// The sending sides of the handoff lanes, per worker five (for its `esp-decrypt`,
    /// `esp4-encrypt`, `esp6-encrypt`, `ipsec4-policy-out` and `ipsec6-policy-out` nodes,
    /// in that order), before the workers start: with several workers, a tunnel's SAs
    /// live on its owner, a policy SA on its own, and the other workers hand them the
    /// ESP they receive and what they route to the tunnel (or protect with the policy).
    pub fn set_senders(&self, senders: Vec<Vec<HandoffTx>>) {
        if let Ok(mut s) = self.senders.lock() {
            *s = senders
                .into_iter()
                .map(|v| v.into_iter().map(Some).collect())
                .collect();
        }
    }

    /// Make the installed SAs exactly `planned` (an unchanged SA keeps its sequence number,
    /// replay window and counters). New SAs go in first, then tunnels switch their transmit
    /// SA, then what is gone is removed: no packet meets a half-made change. All or
    /// nothing: on an error nothing changes. Returns a summary ("2 SAs added, 1 removed").
    ///
    /// An outbound SA made again with a key an earlier one had (in this run, or before a
    /// restart when a state file is set: [`IpsecShared::set_state_file`]) starts its
    /// sequence numbers past that one's, so no (key, sequence number) pair is ever used
    /// twice: with the AEADs the sequence number is the nonce.
    pub fn publish(
        &self,
        planned: &[crate::config::Planned],
        tunnels: &Tunnels<'_>,
    ) -> Result<String, String> {
        let mut c = self
            .control
            .lock()
            .map_err(|_| "IPsec state unavailable (a thread panicked holding it)")?;
        let c = &mut *c;
        // What stays, what is new, what an inbound SA of the same SPI replaces (by slot).
        let mut keep: FxHashSet<u32> = FxHashSet::default();
        let mut replaced_first: FxHashSet<u32> = FxHashSet::default();
        let mut pending: Vec<(&crate::config::Planned, Ident, u16)> = Vec::new();
        {
            let by_ident: FxHashMap<&Ident, u32> = c
                .installed
                .iter()
                .map(|(slot, i)| (&i.ident, slot))
                .collect();
            for p in planned {
                let iface = if p.tunnel == crate::config::POLICY_SA {
                    POLICY_IFACE
                } else {
                    match tunnels.iface.get(p.tunnel) {
                        Some(&i) => i,
                        None => return Err(format!("ipsec.sa[{}]: no tunnel interface", p.index)),
                    }
                };
                let ident = ident(p, iface);
                match by_ident.get(&ident) {
                    Some(&slot) => {
                        keep.insert(slot);
                    }
                    None => {
                        if p.config.direction == Direction::Inbound {
                            if let Some(slot) = c.writer.slot_of_spi(p.config.spi) {
                                replaced_first.insert(slot);
                            }
                        }
                        pending.push((p, ident, iface));
                    }
                }
            }
        }
        // Room: the new SAs go in before the old ones leave (but those their SPI replaces).
        let room = c.writer.free_slots() + replaced_first.len();
        if pending.len() > room {
            return Err(format!(
                "{} new SAs do not fit: {room} slots are free (ipsec.max_sas; a change takes a restart)",
                pending.len()
            ));
        }
        // And their destination prefixes (counted as if all new: the old ones leave after).
        let prefixes: usize = pending
            .iter()
            .filter(|(p, ..)| p.config.direction == Direction::Outbound)
            .map(|(p, ..)| p.selectors.len())
            .sum();
        if prefixes > c.writer.dests_room() {
            return Err(format!(
                "the new SAs' {prefixes} destination prefixes do not fit: room for {} (half of ipsec.max_sas; a change takes a restart)",
                c.writer.dests_room()
            ));
        }
        c.note_sequences();
        // Every new SA keyed before anything changes.
        let mut built = Vec::with_capacity(pending.len());
        for (p, ident, iface) in pending {
            let (sa, start) = c.build(p)?;
            built.push((p, ident, iface, sa, start));
        }
        let mut removed = 0;
        for &slot in &replaced_first {
            c.forget(slot);
            removed += 1;
        }
        let mut added = 0;
        let mut fresh: Vec<(u32, Installed)> = Vec::new();
        for (p, ident, iface, sa, start) in built {
            let tunnel = match tunnels.names.get(p.tunnel) {
                Some(n) => n.as_str(),
                None => POLICY_SA_NAME,
            };
            // Cannot fail: room was checked, and an SPI an inbound SA replaces was freed.
            if let Ok(f) = c.insert(p, ident, iface, tunnel, sa, start) {
                fresh.push(f);
                added += 1;
            }
        }
        // Transmit SAs: set where changed, cleared where a tunnel has none any more.
        let mut tx = vec![NONE; c.tx.len()];
        for (slot, i) in c
            .installed
            .iter()
            .filter(|(slot, _)| keep.contains(slot))
            .chain(fresh.iter().map(|(slot, i)| (*slot, i)))
            .filter(|(_, i)| i.view.direction == Direction::Outbound && i.dests.is_none())
        {
            if let Some(t) = tx.get_mut(i.iface as usize) {
                *t = slot;
            }
        }
        for (iface, (&now, &was)) in tx.iter().zip(c.tx.iter()).enumerate() {
            if now != was {
                c.writer.set_tx(iface as u16, now);
            }
        }
        c.tx = tx;
        let gone: Vec<u32> = c
            .installed
            .keys()
            .filter(|slot| !keep.contains(slot))
            .collect();
        for slot in gone {
            c.forget(slot);
            removed += 1;
        }
        for (slot, i) in fresh {
            c.remember(slot, i);
        }
        let tx = &c.tx;
        for (slot, i) in c.installed.iter_mut() {
            i.view.active = i.view.direction == Direction::Outbound
                && (tx.get(i.iface as usize) == Some(&slot)
                    || i.iface == POLICY_IFACE
                    || i.dests.is_some());
        }
        self.natt.store(c.natt > 0, Ordering::Relaxed);
        c.writer.flush();
        c.save_sequences();
        Ok(format!("{added} SA(s) added, {removed} removed"))
    }

    /// Install `p` (on tunnel interface `iface`, named `tunnel`) beside the installed SAs
    /// without looking at them, then remove the SAs in `replaces` (slots an earlier
    /// [`IpsecShared::insert_one`] returned): what a child SA of IKE or an SA given through
    /// the API takes, in time independent of how many SAs there are. An outbound SA of a
    /// tunnel becomes the one it sends with, in one op. An inbound SA whose SPI an
    /// installed one has is refused, unless that one is in `replaces` (it then leaves
    /// first). Returns the new SA's slot.
    pub fn insert_one(
        &self,
        p: &crate::config::Planned,
        iface: u16,
        tunnel: &str,
        replaces: &[u32],
    ) -> Result<u32, String> {
        let mut c = self
            .control
            .lock()
            .map_err(|_| "IPsec state unavailable (a thread panicked holding it)")?;
        let c = &mut *c;
        let inbound = p.config.direction == Direction::Inbound;
        let first = match c.writer.slot_of_spi(p.config.spi) {
            Some(slot) if inbound && replaces.contains(&slot) => Some(slot),
            Some(_) if inbound => {
                return Err(format!(
                    "{:#x} is already the SPI of an installed inbound SA",
                    p.config.spi
                ))
            }
            _ => None,
        };
        if c.writer.free_slots() + usize::from(first.is_some()) == 0 {
            return Err(format!(
                "1 new SA does not fit: the table's {} slots are in use (ipsec.max_sas; a change takes a restart)",
                c.writer.len()
            ));
        }
        if !inbound && !p.negotiated {
            // A configured key may have sent before: start past where it got to.
            c.note_sequences();
        }
        let (sa, start) = c.build(p)?;
        if let Some(slot) = first {
            c.forget(slot);
        }
        let ident = ident(p, iface);
        let (slot, i) = c
            .insert(p, ident, iface, tunnel, sa, start)
            .map_err(|e| e.to_string())?;
        let chosen = i.dests.is_some();
        let sends = !inbound && iface != POLICY_IFACE && !chosen;
        c.remember(slot, i);
        if sends {
            if let Some(&was) = c.tx.get(iface as usize) {
                c.writer.set_tx(iface, slot);
                c.tx[iface as usize] = slot;
                if let Some(old) = c.installed.get_mut(&was) {
                    old.view.active = false;
                }
            }
        }
        if let Some(i) = c.installed.get_mut(&slot) {
            i.view.active = !inbound && (sends || chosen || iface == POLICY_IFACE);
        }
        for &r in replaces {
            if Some(r) != first && r != slot {
                c.forget(r);
            }
        }
        self.natt.store(c.natt > 0, Ordering::Relaxed);
        c.writer.flush();
        Ok(slot)
    }

    /// The slot of the installed SA of `direction` and `spi` on interface `iface`: an
    /// inbound SA by its SPI; an outbound one if its tunnel sends with it (or, `iface`
    /// being [`POLICY_IFACE`], the policy SA of that SPI).
    pub fn slot_of(&self, direction: Direction, spi: u32, iface: u16) -> Option<u32> {
        let c = self.control.lock().ok()?;
        let slot = match direction {
            Direction::Inbound => c.writer.slot_of_spi(spi),
            Direction::Outbound if iface == POLICY_IFACE => c.policy_slot(spi),
            Direction::Outbound => c.tx.get(iface as usize).copied(),
        }?;
        c.installed
            .get(&slot)
            .is_some_and(|i| i.view.spi == spi)
            .then_some(slot)
    }

    /// The slot of the installed outbound SA chosen by destination with `spi`, to peer
    /// `remote` (and its UDP port with NAT-T, else 0).
    pub fn chosen_slot(&self, spi: u32, remote: std::net::IpAddr, port: u16) -> Option<u32> {
        self.control.lock().ok()?.chosen_slot(&(spi, remote, port))
    }

    /// Remove the SA in `slot` (as [`IpsecShared::insert_one`] returned it): a tunnel that
    /// sent with it sends with none. `false` if no SA is there.
    pub fn remove_one(&self, slot: u32) -> Result<bool, String> {
        let mut c = self
            .control
            .lock()
            .map_err(|_| "IPsec state unavailable (a thread panicked holding it)")?;
        if !c.installed.contains_key(&slot) {
            return Ok(false);
        }
        c.forget(slot);
        self.natt.store(c.natt > 0, Ordering::Relaxed);
        c.writer.flush();
        Ok(true)
    }

    /// Keep the outbound SAs' sequence numbers in `path` (the daemon's state directory), so
    /// that after a restart an SA with the same key goes on past them instead of using
    /// its numbers (its nonces) again. Read now; written as they advance, each time with
    /// [`SEQUENCE_GAP`] numbers reserved ahead.
    pub fn set_state_file(&self, path: std::path::PathBuf) -> Result<(), String> {
        let mut c = self.control.lock().map_err(|_| "IPsec state unavailable")?;
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                for (n, line) in text.lines().enumerate() {
                    let mut it = line.split_whitespace();
                    match (it.next().map(hex_bytes), it.next().map(str::parse::<u64>)) {
                        (Some(Some(mark)), Some(Ok(seq))) => {
                            c.sequences.insert(mark, seq);
                        }
                        _ => {
                            return Err(format!(
                                "{} line {}: not a key mark and a sequence number",
                                path.display(),
                                n + 1
                            ))
                        }
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
        // What was read is what a previous run may have used up to: all of it counts.
        c.saved = c.sequences.clone();
        c.state_file = Some(path);
        Ok(())
    }

    /// Send what the queue had no room for, and drop the SAs the worker handed back (the
    /// control thread calls it in its loop).
    pub fn maintain(&self) {
        if let Ok(mut c) = self.control.try_lock() {
            c.writer.flush();
            c.save_sequences();
        }
    }

    /// Every installed SA with its counters, by tunnel then direction then SPI.
    pub fn report(&self) -> Vec<SaReport> {
        let Ok(c) = self.control.lock() else {
            return Vec::new();
        };
        let mut v: Vec<SaReport> = c
            .installed
            .iter()
            .map(|(slot, i)| {
                let k = i.stats.counters();
                SaReport {
                    sa: i.view.view(c.writer.owner(slot).unwrap_or(0)),
                    packets: k.packets,
                    bytes: k.bytes,
                    sequence: i.stats.sequence(),
                    errors: k.errors(),
                }
            })
            .collect();
        v.sort_by(|a, b| {
            (&a.sa.tunnel, a.sa.direction, a.sa.spi).cmp(&(&b.sa.tunnel, b.sa.direction, b.sa.spi))
        });
        v
    }

    /// The slots of the outbound policy SAs (no tunnel's), by SPI, and their workers.
    pub(crate) fn policy_slots(&self) -> std::collections::HashMap<u32, (u32, u16)> {
        self.control
            .lock()
            .map_or_else(|_| Default::default(), |c| c.policy_slots())
    }

    /// SAs installed.
    pub fn installed(&self) -> usize {
        self.control.lock().map_or(0, |c| c.installed.len())
    }

    /// The features, to register.
    pub fn features(self: &Arc<Self>) -> Vec<Arc<dyn Feature>> {
        let mut v: Vec<Arc<dyn Feature>> = [Kind::Decrypt, Kind::Encrypt4, Kind::Encrypt6]
            .into_iter()
            .map(|kind| {
                Arc::new(EspFeature {
                    kind,
                    shared: self.clone(),
                }) as Arc<dyn Feature>
            })
            .collect();
        v.extend(crate::policy_node::features(self));
        v
    }
}

/// What `show ipsec` gives as the tunnel of a policy SA.
pub const POLICY_SA_NAME: &str = "(policy)";

/// What identifies an SA's config: the SHA-256 digest of everything it is built from,
/// its keys included (the control thread keeps no key), its first 128 bits (a chance
/// change going unseen is a 2^-128 collision). Fixed size: the control thread keeps one
/// per SA (issue 27: a million tunnels).
type Ident = [u8; 16];

fn ident(p: &crate::config::Planned, iface: u16) -> Ident {
    let c = &p.config;
    let mut d = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    d.update(&c.enc_key);
    d.update(&[0xff]);
    d.update(&c.auth_key);
    d.update(&[0xff]);
    let text = format!(
        "{iface}|{:?}|{:?}|{}|{}|{}|{}|{}|{:?}|{:?}|",
        c.direction,
        c.mode,
        c.spi,
        c.encryption.name(),
        c.integrity.name(),
        c.esn,
        c.replay_window,
        c.natt,
        c.df
    );
    d.update(text.as_bytes());
    for (a, l) in &p.selectors {
        d.update(format!("{a}/{l}|").as_bytes());
    }
    let mut id = [0u8; 16];
    let digest = d.finish();
    for (i, b) in id.iter_mut().zip(digest.as_ref()) {
        *i = *b;
    }
    id
}

/// What `show ipsec sa` says of an installed SA, as the control thread keeps it: small,
/// one per SA (issue 27: a million tunnels) — its tunnel's name shared by the tunnel's
/// SAs, its endpoints as addresses ([`Brief::view`] spells them out).
struct Brief {
    tunnel: Arc<str>,
    direction: Direction,
    spi: u32,
    encryption: crate::Encryption,
    integrity: crate::Integrity,
    esn: bool,
    replay_window: u32,
    ends: Option<(std::net::IpAddr, std::net::IpAddr)>,
    active: bool,
    udp: Option<(u16, u16)>,
}

impl Brief {
    /// Spelt out, as held by `worker`.
    fn view(&self, worker: usize) -> SaView {
        let (src, dst) = match self.ends {
            Some((s, d)) => (s.to_string(), d.to_string()),
            None => (String::new(), String::new()),
        };
        SaView {
            tunnel: self.tunnel.to_string(),
            direction: match self.direction {
                Direction::Inbound => "in",
                Direction::Outbound => "out",
            },
            spi: self.spi,
            encryption: self.encryption.name(),
            integrity: self.integrity.name(),
            esn: self.esn,
            replay_window: self.replay_window,
            src,
            dst,
            active: self.active,
            udp: self.udp,
            worker,
        }
    }
}

fn view(c: &crate::sa::SaConfig, tunnel: Arc<str>) -> Brief {
    let ends = match c.mode {
        Mode::Tunnel { src, dst } => Some((src, dst)),
        Mode::Transport => None,
    };
    Brief {
        tunnel,
        direction: c.direction,
        spi: c.spi,
        encryption: c.encryption,
        integrity: c.integrity,
        esn: c.esn,
        replay_window: c.replay_window,
        ends,
        active: false,
        udp: c.natt.map(|n| (n.src_port, n.dst_port)),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Decrypt,
    Encrypt4,
    Encrypt6,
}

struct EspFeature {
    kind: Kind,
    shared: Arc<IpsecShared>,
}

impl Feature for EspFeature {
    fn spec(&self) -> FeatureSpec {
        match self.kind {
            Kind::Decrypt => FeatureSpec {
                name: DECRYPT,
                arc: ArcId::PortInput,
                before: &[],
                after: &[],
                drops: DECRYPT_DROPS,
            },
            Kind::Encrypt4 | Kind::Encrypt6 => FeatureSpec {
                name: if self.kind == Kind::Encrypt4 {
                    ENCRYPT4
                } else {
                    ENCRYPT6
                },
                arc: if self.kind == Kind::Encrypt4 {
                    ArcId::Ip4Output
                } else {
                    ArcId::Ip6Output
                },
                // The egress filter sees the clear packet, as Linux's output chain does
                // before xfrm.
                before: &[],
                after: &["ip4-filter-egress", "ip6-filter-egress"],
                drops: ENCRYPT_DROPS,
            },
        }
    }

    fn describe_note(&self, spi: u32, seq: u64) -> String {
        match self.kind {
            Kind::Decrypt => format!("SA spi {spi:#x} seq {seq}: decrypted"),
            Kind::Encrypt4 | Kind::Encrypt6 => {
                format!("SA spi {spi:#x} seq {seq}: encrypted, routed by the outer header")
            }
        }
    }

    fn node(&self, worker: usize) -> Box<dyn FeatureNode> {
        let table = self
            .shared
            .workers
            .get(worker)
            .cloned()
            .unwrap_or_else(|| Arc::new(AtomicRefCell::new(sad::channel(1, 0).0)));
        let side = match self.kind {
            Kind::Decrypt => 0,
            Kind::Encrypt4 => 1,
            Kind::Encrypt6 => 2,
        };
        // Every worker of several: a tunnel's SAs may be any worker's.
        let tx = self
            .shared
            .senders
            .lock()
            .ok()
            .and_then(|mut s| s.get_mut(worker)?.get_mut(side)?.take());
        Box::new(EspNode {
            kind: self.kind,
            me: worker,
            table,
            shared: self.shared.clone(),
            touched: Vec::with_capacity(VECTOR_SIZE),
            tx,
        })
    }
}

struct EspNode {
    kind: Kind,
    /// Its worker.
    me: usize,
    table: Arc<AtomicRefCell<Sad>>,
    shared: Arc<IpsecShared>,
    /// The slots a vector used, for publishing their counters once each (capacity for a
    /// whole vector, allocated with the node).
    touched: Vec<u32>,
    /// With several workers: the lanes to the others, for packets whose SA another
    /// worker holds.
    tx: Option<HandoffTx>,
}

impl FeatureNode for EspNode {
    fn process(&mut self, cx: &mut FeatureCx<'_>, batch: &mut Batch<'_>) {
        let Ok(mut sad) = self.table.try_borrow_mut() else {
            self.shared.busy.fetch_add(1, Ordering::Relaxed);
            let r = if self.kind == Kind::Decrypt {
                D_BUSY
            } else {
                E_BUSY
            };
            for k in 0..batch.len() {
                batch.drop(k, r);
            }
            return;
        };
        sad.apply_ops(sad::OPS_PER_VECTOR);
        self.touched.clear();
        let mut ho = Handoff {
            tx: self.tx.as_mut(),
            n: 0,
        };
        match self.kind {
            Kind::Decrypt => {
                // On [`OWNER`] with an inbound SA: the ESP fragments being gathered.
                let mut reasm = sad.take_reassembly();
                let natt = self.shared.natt.load(Ordering::Relaxed);
                let gathers = self.me == OWNER;
                decrypt_batch(
                    cx,
                    batch,
                    (&mut sad, natt),
                    &mut self.touched,
                    (reasm.as_deref_mut(), gathers),
                    &mut ho,
                );
                sad.put_reassembly(reasm);
            }
            Kind::Encrypt4 | Kind::Encrypt6 => encrypt_batch(
                cx,
                batch,
                &mut sad,
                &mut self.touched,
                self.kind == Kind::Encrypt6,
                &mut ho,
            ),
        }
        if ho.n > 0 {
            if let Some(tx) = ho.tx {
                tx.ring();
            }
            self.shared.handed_off.fetch_add(ho.n, Ordering::Relaxed);
        }
        for &s in &self.touched {
            sad.publish(s);
        }
    }
}

/// The lanes of a node to the other workers (none with one worker), and how many packets
/// it handed over in this vector.
struct Handoff<'a> {
    tx: Option<&'a mut HandoffTx>,
    n: u64,
}

impl Handoff<'_> {
    /// Copy packet `k`'s frame bytes `start..end` to worker `to`, as received on `port`
    /// with `flags`, and take it off the graph; dropped under `full` if the lane is full
    /// (or there is none: with one worker, no SA is another's).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn send(
        &mut self,
        cx: &FeatureCx<'_>,
        batch: &mut Batch<'_>,
        k: usize,
        to: usize,
        (port, flags): (u16, u16),
        (start, end): (usize, usize),
        full: u8,
    ) {
        let Some(p) = batch.pkt(k) else {
            return;
        };
        let bytes = cx.mem.frame(p.buf).get(start..end).unwrap_or(&[]);
        match self.tx.as_mut().map(|tx| tx.send(to, port, flags, bytes)) {
            Some(Ok(())) => {
                batch.take(k);
                self.n += 1;
            }
            _ => batch.drop(k, full),
        }
    }
}

/// The low 32 bits of the sequence number of the ESP packet whose IP header is at `l3`
/// (in UDP: NAT-T).
fn esp_seq(frame: &[u8], l3: usize, udp: bool) -> u32 {
    let hdr = match frame.get(l3).map(|b| b >> 4) {
        Some(4) => frame.get(l3).map_or(20, |b| (b & 0xf) as usize * 4),
        _ => 40,
    } + if udp { 8 } else { 0 };
    frame
        .get(l3 + hdr + 4..l3 + hdr + 8)
        .map_or(0, |s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// Remember `slot` as used by this vector (consecutive repeats once).
#[inline]
fn touch(touched: &mut Vec<u32>, slot: u32) {
    if touched.last() != Some(&slot) && touched.len() < touched.capacity() {
        touched.push(slot);
    }
}

/// What `esp-decrypt` reads of a frame.
enum Seen {
    /// Not ESP for the router: goes on untouched.
    Other,
    /// An ESP fragment for the router: (the length of its Ethernet header and tags).
    Fragment(usize),
    /// A NAT-T keepalive to the router's port 4500 (NAT-T on).
    Keepalive,
    /// ESP for the router: (L3 offset in the frame, IP length, SPI, in UDP, the VLAN
    /// sub-interface it came in on if it was tagged).
    Esp(usize, usize, u32, bool, Option<u16>),
}

/// The ESP (or, with `natt`, UDP-encapsulated ESP to port 4500) for the router in the
/// frame at `frame[at..at + len]`. A tagged frame (802.1Q, or QinQ) is looked at if
/// `subif` finds the VLAN sub-interface of its tags ([`FeatureCx::subif_of`]: one the
/// router has, as ethernet-input requires); ESP to a sub-interface's address is then the
/// router's as on a port.
#[inline]
fn look(
    frame: &[u8],
    at: usize,
    len: usize,
    own: &dataplane::interfaces::OwnAddrs,
    natt: bool,
    subif: impl FnOnce(&[u8]) -> Option<u16>,
) -> Seen {
    let Some(d) = frame.get(at..at + len) else {
        return Seen::Other;
    };
    if d.len() < 14 {
        return Seen::Other;
    }
    let mut ethertype = u16::from_be_bytes([d[12], d[13]]);
    let (mut l2, mut rx) = (14, None);
    if ethertype == wire::ethertype::VLAN || ethertype == wire::ethertype::QINQ {
        match (subif(d), wire::parse_l2(d)) {
            (Some(s), Ok(info)) => {
                (ethertype, l2, rx) = (info.ethertype, info.l3_offset, Some(s));
            }
            _ => return Seen::Other,
        }
    }
    let Some(ip) = d.get(l2..) else {
        return Seen::Other;
    };
    // (header length, protocol, IP length)
    let (hl, proto, total) = match ethertype {
        wire::ethertype::IPV4 => {
            if ip.len() < 20 || ip[0] >> 4 != 4 || !(ip[9] == 50 || natt && ip[9] == 17) {
                return Seen::Other;
            }
            let ihl = (ip[0] & 0xf) as usize * 4;
            let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
            if !own.contains4(u32::from_be_bytes([ip[16], ip[17], ip[18], ip[19]])) {
                return Seen::Other;
            }
            if u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 {
                return if ip[9] == 50 {
                    Seen::Fragment(l2)
                } else {
                    Seen::Other
                };
            }
            if ihl < 20 || total < ihl + 8 || total > ip.len() {
                // Malformed: ip4-input counts it.
                return Seen::Other;
            }
            (ihl, ip[9], total)
        }
        wire::ethertype::IPV6 => {
            // ESP (or UDP) right after the fixed header: extension headers before it are
            // not looked through (such packets go on to the kernel).
            if ip.len() < 48 || ip[0] >> 4 != 6 || !own.contains6(&ip[24..40]) {
                return Seen::Other;
            }
            if ip[6] == 44 {
                return if ip.get(40) == Some(&50) {
                    Seen::Fragment(l2)
                } else {
                    Seen::Other
                };
            }
            if !(ip[6] == 50 || natt && ip[6] == 17) {
                return Seen::Other;
            }
            let total = 40 + u16::from_be_bytes([ip[4], ip[5]]) as usize;
            if total > ip.len() {
                return Seen::Other;
            }
            (40, ip[6], total)
        }
        _ => return Seen::Other,
    };
    let be32 = |o: usize| {
        ip.get(o..o + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    if proto == 50 {
        return match be32(hl) {
            Some(spi) => Seen::Esp(at + l2, total, spi, false, rx),
            None => Seen::Other,
        };
    }
    // UDP to port 4500 (RFC 3948): a keepalive, IKE (non-ESP marker: the kernel's), or ESP.
    let Some(u) = ip.get(hl..total) else {
        return Seen::Other;
    };
    if u.len() < 8 || u16::from_be_bytes([u[2], u[3]]) != crate::esp::NATT_PORT {
        return Seen::Other;
    }
    match crate::esp::classify_udp(&u[8..]) {
        crate::UdpPayload::Keepalive => Seen::Keepalive,
        crate::UdpPayload::NonEsp => Seen::Other,
        crate::UdpPayload::Esp => match be32(hl + 8) {
            Some(spi) => Seen::Esp(at + l2, total, spi, true, rx),
            None => Seen::Other,
        },
    }
}

/// Take the ESP fragment `p` (batch position `k`, its IP header `l2` bytes into the frame)
/// into the reassembly table: `Ok(None)` when it is held (taken off the graph),
/// `Ok(Some(whole))` when it completed its datagram, which packet `k` now is (in its
/// frame, or in a bigger one, behind the same Ethernet header and tags), `Err(reason)` when
/// it is to be dropped.
#[cold]
#[inline(never)]
fn gather(
    cx: &mut FeatureCx<'_>,
    batch: &mut Batch<'_>,
    k: usize,
    (p, l2): (dataplane::Pkt, usize),
    reasm: Option<&mut crate::reasm::Reassembly>,
) -> Result<Option<dataplane::Pkt>, u8> {
    use crate::reasm::{FragError, Fragment, Outcome};
    let Some(r) = reasm else {
        return Err(D_FRAGMENT);
    };
    let (off, end) = (p.off as usize, p.off as usize + p.len as usize);
    let ip = cx.mem.frame(p.buf).get(off + l2..end).unwrap_or(&[]);
    let f = match ip.first().map(|b| b >> 4) {
        Some(4) => Fragment::v4(ip),
        Some(6) => Fragment::v6(ip),
        _ => None,
    }
    .ok_or(D_FRAGMENT)?;
    let (slot, len) = match r.add(ip, &f, cx.now_ns) {
        Outcome::Held => {
            batch.take(k);
            return Ok(None);
        }
        Outcome::Dropped(FragError::Bad) => return Err(D_FRAGMENT),
        Outcome::Dropped(FragError::Overlap) => return Err(D_FRAGMENT_OVERLAP),
        Outcome::Dropped(FragError::TooBig) => return Err(D_FRAGMENT_TOO_BIG),
        Outcome::Complete { slot, len } => (slot, len),
    };
    let mut whole = p;
    if off + l2 + len > cx.mem.frame(p.buf).len() {
        // Bigger than its frame: into a big one, the Ethernet header with it.
        let Some(b) = cx.mem.alloc_for(l2 + len) else {
            r.abandon(slot);
            return Err(D_NO_BUFFER);
        };
        let at = dataplane::HEADROOM;
        let (src, dst) = cx.mem.frame_pair(p.buf, b);
        match (src.get(off..off + l2), dst.get_mut(at..at + l2)) {
            (Some(s), Some(d)) => d.copy_from_slice(s),
            _ => {
                cx.mem.free(b);
                r.abandon(slot);
                return Err(D_NO_BUFFER);
            }
        }
        cx.mem.free(p.buf);
        whole.buf = b;
        whole.off = at as u16;
    }
    let at = whole.off as usize + l2;
    let written = match cx.mem.frame_mut(whole.buf).get_mut(at..at + len) {
        Some(out) => r.write(slot, out),
        None => false,
    };
    whole.len = (l2 + len) as u16;
    whole.l3 = l2 as u16;
    if let Some(d) = batch.pkt_mut(k) {
        *d = whole;
    }
    if !written {
        r.abandon(slot);
        return Err(D_NO_BUFFER);
    }
    Ok(Some(whole))
}

/// With many SAs (issue 26: each packet's SA is then cold in the caches), the SA slot of
/// each ESP packet of the vector for the router, its entry prefetched ([`NONE`]: another
/// packet, or few SAs).
fn prefetch_inbound(
    cx: &FeatureCx<'_>,
    batch: &Batch<'_>,
    sad: &Sad,
    natt: bool,
) -> [u32; VECTOR_SIZE] {
    let mut ahead = [NONE; VECTOR_SIZE];
    if !sad.worth_prefetching() {
        return ahead;
    }
    for (k, a) in ahead.iter_mut().enumerate().take(batch.len()) {
        let Some(p) = batch.pkt(k) else {
            continue;
        };
        let frame = cx.mem.frame(p.buf);
        let (off, len) = (p.off as usize, p.len as usize);
        let subif = |d: &[u8]| cx.subif_of(p.rx_port, d);
        if let Seen::Esp(_, _, spi, _, _) = look(frame, off, len, &cx.ifaces.own, natt, subif) {
            *a = sad.inbound(spi);
            sad.prefetch_slot(*a);
        }
    }
    ahead
}

/// While packet `k` is processed: prefetch the SA of packet `k +` [`crate::PREFETCH_AHEAD`]
/// (its slot's entry was prefetched before the loop) and the published counters (and,
/// inbound, the replay bitmap) of the SA half as far ahead (prefetched by then).
#[inline]
fn prefetch_ahead(sad: &Sad, ahead: &[u32; VECTOR_SIZE], k: usize) {
    if let Some(&s) = ahead.get(k + crate::PREFETCH_AHEAD) {
        sad.prefetch_sa(s);
    }
    if let Some(&s) = ahead.get(k + crate::PREFETCH_AHEAD / 2) {
        sad.prefetch_window(s);
    }
}

/// Decrypt the ESP for the router in `batch` with the SAs of `sad` (`natt`: some SA is
/// in UDP). ESP for another worker's SA goes to it through `ho`; ESP fragments are
/// gathered in `reasm` if this worker `gathers` them (worker 0), else handed to it.
fn decrypt_batch(
    cx: &mut FeatureCx<'_>,
    batch: &mut Batch<'_>,
    (sad, natt): (&mut Sad, bool),
    touched: &mut Vec<u32>,
    (mut reasm, gathers): (Option<&mut crate::reasm::Reassembly>, bool),
    ho: &mut Handoff<'_>,
) {
    let ahead = prefetch_inbound(cx, batch, sad, natt);
    for k in 0..batch.len() {
        prefetch_ahead(sad, &ahead, k);
        let Some(mut p) = batch.pkt(k).copied() else {
            continue;
        };
        let mut seen = look(
            cx.mem.frame(p.buf),
            p.off as usize,
            p.len as usize,
            &cx.ifaces.own,
            natt,
            |d| cx.subif_of(p.rx_port, d),
        );
        if let Seen::Fragment(l2) = seen {
            if !gathers {
                let (start, end) = (p.off as usize, p.off as usize + p.len as usize);
                ho.send(
                    cx,
                    batch,
                    k,
                    OWNER,
                    (p.rx_port, 0),
                    (start, end),
                    D_HANDOFF_FULL,
                );
                continue;
            }
            match gather(cx, batch, k, (p, l2), reasm.as_deref_mut()) {
                Ok(Some(whole)) => {
                    p = whole;
                    seen = look(
                        cx.mem.frame(p.buf),
                        p.off as usize,
                        p.len as usize,
                        &cx.ifaces.own,
                        natt,
                        |d| cx.subif_of(p.rx_port, d),
                    );
                }
                Ok(None) => continue,
                Err(reason) => {
                    batch.drop(k, reason);
                    continue;
                }
            }
        }
        let (l3, total, spi, udp, vlan) = match seen {
            Seen::Other => continue,
            Seen::Fragment(_) => {
                batch.drop(k, D_FRAGMENT);
                continue;
            }
            Seen::Keepalive => {
                batch.drop(k, EspError::NatKeepalive.reason());
                continue;
            }
            Seen::Esp(l3, total, spi, udp, vlan) => (l3, total, spi, udp, vlan),
        };
        let slot = sad.inbound(spi);
        if let Some(w) = sad::remote(slot) {
            // Another worker's SA: the frame as received (or as reassembled) goes there.
            let (start, end) = (p.off as usize, p.off as usize + p.len as usize);
            ho.send(
                cx,
                batch,
                k,
                w,
                (p.rx_port, 0),
                (start, end),
                D_HANDOFF_FULL,
            );
            continue;
        }
        let Some(inst) = sad.get_mut(slot) else {
            batch.drop(k, D_UNKNOWN_SPI);
            continue;
        };
        touch(touched, slot);
        let iface = inst.iface;
        let frame = cx.mem.frame_mut(p.buf);
        // The packet's own sequence number (low 32 bits), for a trace.
        let seq = if batch.traced(k) {
            esp_seq(frame, l3, udp)
        } else {
            0
        };
        let inner = match crate::esp::decrypt(&mut inst.sa, frame, l3, total) {
            Ok(i) => i,
            Err(e) => {
                batch.drop(k, e.reason());
                continue;
            }
        };
        // A policy SA's packet (tunnel or transport mode) is received on its port: its IP
        // version says what it is.
        let policy = iface == POLICY_IFACE;
        let next = if policy {
            match frame.get(inner.start).map(|b| b >> 4) {
                Some(4) => 4,
                Some(6) => 41,
                _ => 0,
            }
        } else {
            inner.next_header
        };
        let ethertype = match next {
            4 => wire::ethertype::IPV4,
            41 => wire::ethertype::IPV6,
            _ => {
                batch.drop(k, EspError::BadInner.reason());
                continue;
            }
        };
        // A policy SA's packet tagged for a VLAN sub-interface is received there (its SPD).
        let iface = if policy {
            vlan.unwrap_or(p.rx_port)
        } else {
            iface
        };
        // A frame received on the tunnel interface (or the port, for a policy SA): an
        // Ethernet header to its own address in front of the inner packet.
        let mac = cx.ifaces.port(iface).map_or([0; 6], |i| i.mac);
        let Some(start) = inner.start.checked_sub(14) else {
            batch.drop(k, EspError::TooBig.reason());
            continue;
        };
        if let Some(eth) = frame.get_mut(start..inner.start) {
            eth[0..6].copy_from_slice(&mac);
            eth[6..12].copy_from_slice(&[0; 6]);
            eth[12..14].copy_from_slice(&ethertype.to_be_bytes());
        }
        if let Some(d) = batch.pkt_mut(k) {
            d.off = start as u16;
            d.len = (inner.len + 14) as u16;
            d.l3 = 14;
            d.rx_port = iface;
            // For the inbound policy check (`ipsec4-policy-in`): the SA that carried it.
            if policy {
                d.aux = spi;
            }
            // What the port said of the outer frame's checksums is not about this packet.
            d.flags &= !dataplane::buffer::F_CSUM_UNKNOWN;
        }
        batch.note(k, spi, u64::from(seq));
    }
}

/// The inner destination of packet `k` (IPv6 if `v6`), for a tunnel that chooses its SA
/// by destination; `None` if the packet is too short to have one.
#[inline]
fn inner_dest(cx: &FeatureCx<'_>, batch: &Batch<'_>, k: usize, v6: bool) -> Option<Dest> {
    let p = batch.pkt(k)?;
    let at = p.off as usize + p.l3 as usize;
    // Within the packet, not only the frame.
    let ip_len = (p.len as usize).saturating_sub(p.l3 as usize);
    if ip_len < if v6 { 40 } else { 20 } {
        return None;
    }
    let f = cx.mem.frame(p.buf);
    if v6 {
        let b: [u8; 16] = f.get(at + 24..at + 40)?.try_into().ok()?;
        Some(Dest::V6(u128::from_be_bytes(b)))
    } else {
        let b: [u8; 4] = f.get(at + 16..at + 20)?.try_into().ok()?;
        Some(Dest::V4(u32::from_be_bytes(b)))
    }
}

/// Packet `k`'s transmit SA: its tunnel's, or by its destination ([`Sad::tx_to`]).
#[inline]
fn tx_slot(cx: &FeatureCx<'_>, batch: &Batch<'_>, sad: &Sad, k: usize, v6: bool) -> u32 {
    let iface = batch.iface(k);
    if sad.chooses(iface) {
        sad.tx_to(iface, inner_dest(cx, batch, k, v6))
    } else {
        sad.tx(iface)
    }
}

/// The worker a packet for tunnel `iface` with `flags` is handed to: the tunnel's owner
/// when that is another worker, unless the packet was handed here for output already
/// ([`F_TO_OUTPUT`]). Such a packet stays, as the policy node's do: a table that has not
/// taken up a new owner yet (the tunnel lost its last SA and got another worker while the
/// packet was in a lane) would send it back, and it could cross again. It is encrypted
/// here if this worker holds the tunnel's SA, else dropped as `no_sa`.
#[inline]
fn hand_to(sad: &Sad, iface: u16, flags: u16) -> Option<usize> {
    if flags & F_TO_OUTPUT != 0 {
        return None;
    }
    sad.elsewhere(iface)
}

/// Encrypt the packets routed to tunnels in `batch` with their SAs; a packet for a
/// tunnel another worker owns goes to that worker's output arc of the tunnel through `ho`.
fn encrypt_batch(
    cx: &mut FeatureCx<'_>,
    batch: &mut Batch<'_>,
    sad: &mut Sad,
    touched: &mut Vec<u32>,
    v6: bool,
    ho: &mut Handoff<'_>,
) {
    let mut ahead = [NONE; VECTOR_SIZE];
    if sad.worth_prefetching() {
        for (k, a) in ahead.iter_mut().enumerate().take(batch.len()) {
            *a = tx_slot(cx, batch, sad, k, v6);
            sad.prefetch_slot(*a);
        }
    }
    for k in 0..batch.len() {
        prefetch_ahead(sad, &ahead, k);
        let Some(p) = batch.pkt(k).copied() else {
            continue;
        };
        let iface = batch.iface(k);
        if let Some(w) = hand_to(sad, iface, p.flags) {
            // From 14 bytes before its IP header, which the owner takes for an Ethernet
            // header (one bound for fragmentation has had none written).
            let start = (p.off as usize + p.l3 as usize).saturating_sub(14);
            let end = p.off as usize + p.len as usize;
            ho.send(
                cx,
                batch,
                k,
                w,
                (iface, F_TO_OUTPUT),
                (start, end),
                E_HANDOFF_FULL,
            );
            continue;
        }
        // Looked up already when prefetching.
        let slot = match ahead.get(k) {
            Some(&s) if s != NONE => s,
            _ => tx_slot(cx, batch, sad, k, v6),
        };
        let Some(inst) = sad.get_mut(slot) else {
            batch.drop(k, E_NO_SA);
            continue;
        };
        touch(touched, slot);
        encrypt_one(cx, batch, k, &p, &mut inst.sa);
    }
}

/// Encrypt packet `k` (`p`) of `batch` in place with `sa` and reroute it by its outer
/// header, or drop it under the codec's reason (the first reasons of [`ENCRYPT_DROPS`],
/// as of every feature that encrypts).
pub(crate) fn encrypt_one(
    cx: &mut FeatureCx<'_>,
    batch: &mut Batch<'_>,
    k: usize,
    p: &dataplane::Pkt,
    sa: &mut Sa,
) {
    let at = p.off as usize + p.l3 as usize;
    let len = (p.len as usize).saturating_sub(p.l3 as usize);
    let frame = cx.mem.frame_mut(p.buf);
    match crate::esp::encrypt(sa, frame, at, len) {
        Ok((start, n)) if n + 14 <= usize::from(u16::MAX) => {
            let (spi, seq) = (sa.spi(), sa.sequence());
            // An Ethernet header of no addresses in front, with the outer packet's
            // EtherType: what the graph holds is a frame (a glean punt copies it).
            let et = if frame.get(start).is_some_and(|b| b >> 4 == 6) {
                wire::ethertype::IPV6
            } else {
                wire::ethertype::IPV4
            };
            let Some(eth) = start.checked_sub(14).and_then(|s| frame.get_mut(s..start)) else {
                batch.drop(k, EspError::TooBig.reason());
                return;
            };
            eth.fill(0);
            eth[12..14].copy_from_slice(&et.to_be_bytes());
            if let Some(d) = batch.pkt_mut(k) {
                d.off = (start - 14) as u16;
                d.l3 = 14;
                d.len = (n + 14) as u16;
                // Encrypted whole: the outer packet is what may need fragmenting.
                d.flags &= !dataplane::buffer::F_TO_FRAG;
            }
            batch.note(k, spi, seq);
            batch.reroute(k);
        }
        // Bigger than a frame can say (no port carries it either).
        Ok(_) => batch.drop(k, EspError::TooBig.reason()),
        Err(e) => batch.drop(k, e.reason()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Planned;
    use crate::sa::{Encryption, Integrity, SaConfig};

    /// What the control thread keeps per SA stays small (issue 27: two SAs a tunnel, a
    /// million tunnels): a guard against a field that makes it grow unseen.
    #[test]
    fn the_control_threads_record_of_an_sa_stays_small() {
        let n = std::mem::size_of::<Option<Installed>>();
        eprintln!("record of an SA: {n} bytes");
        assert!(n <= 136, "{n}");
    }

    fn planned(spi: u32, key: u8, dir: Direction) -> Planned {
        let mut c = SaConfig::new(
            spi,
            dir,
            Encryption::AesGcm128,
            &[key; 20],
            Integrity::None,
            &[],
        );
        c.mode = Mode::Tunnel {
            src: "192.0.2.1".parse().unwrap(),
            dst: "192.0.2.2".parse().unwrap(),
        };
        Planned {
            index: 0,
            tunnel: 0,
            config: c,
            negotiated: false,
            selectors: Vec::new(),
        }
    }

    /// An outbound SA of peer `peer` (its outer destination), chosen for `dst` prefixes.
    fn chosen(spi: u32, key: u8, peer: &str, dst: &[(&str, u8)]) -> Planned {
        let mut p = planned(spi, key, Direction::Outbound);
        p.config.mode = Mode::Tunnel {
            src: "192.0.2.2".parse().unwrap(),
            dst: peer.parse().unwrap(),
        };
        p.negotiated = true;
        p.selectors = dst.iter().map(|(a, l)| (a.parse().unwrap(), *l)).collect();
        p
    }

    fn v4(a: &str) -> Option<Dest> {
        Some(Dest::V4(u32::from(
            a.parse::<std::net::Ipv4Addr>().unwrap(),
        )))
    }

    #[test]
    fn peers_of_one_tunnel_each_get_their_own_traffic() {
        let (iface, names) = tunnels();
        let t = Tunnels {
            iface: &iface,
            names: &names,
        };
        let s = IpsecShared::new(1, 16, 3);
        // The tunnel's own transmit SA, and two peers' SAs by destination beside it.
        let own = s
            .insert_one(&planned(0x4000, 1, Direction::Outbound), 2, "ipsec0", &[])
            .unwrap();
        let a = s
            .insert_one(
                &chosen(0x5001, 2, "198.51.100.1", &[("10.128.0.1", 32)]),
                2,
                "ipsec0",
                &[],
            )
            .unwrap();
        // Peer b picked the same SPI as a: both stay, told apart by their address.
        let b = s
            .insert_one(
                &chosen(
                    0x5001,
                    3,
                    "198.51.100.2",
                    &[("10.128.0.2", 32), ("10.129.0.0", 16)],
                ),
                2,
                "ipsec0",
                &[],
            )
            .unwrap();
        assert_eq!(s.installed(), 3);
        assert_eq!(
            s.chosen_slot(0x5001, "198.51.100.1".parse().unwrap(), 0),
            Some(a)
        );
        assert_eq!(
            s.chosen_slot(0x5001, "198.51.100.2".parse().unwrap(), 0),
            Some(b)
        );
        assert_eq!(s.slot_of(Direction::Outbound, 0x4000, 2), Some(own));
        let sent_with = |dst: &str| {
            let mut w = s.workers[OWNER].borrow_mut();
            while w.apply_ops(usize::MAX) > 0 {}
            assert!(w.chooses(2) && !w.chooses(1));
            w.tx_to(2, v4(dst))
        };
        assert_eq!(sent_with("10.128.0.1"), a);
        assert_eq!(sent_with("10.128.0.2"), b);
        assert_eq!(sent_with("10.129.7.7"), b);
        // Others go with the tunnel's own SA.
        assert_eq!(sent_with("10.130.0.1"), own);
        let r = s.report();
        assert_eq!(r.iter().filter(|r| r.sa.active).count(), 3, "{r:?}");
        // a's rekey: its new SA takes its prefix before the old one leaves.
        let a2 = s
            .insert_one(
                &chosen(0x5002, 4, "198.51.100.1", &[("10.128.0.1", 32)]),
                2,
                "ipsec0",
                &[],
            )
            .unwrap();
        assert_eq!(sent_with("10.128.0.1"), a2);
        assert!(s.remove_one(a).unwrap());
        assert_eq!(sent_with("10.128.0.1"), a2);
        assert_eq!(
            s.chosen_slot(0x5001, "198.51.100.1".parse().unwrap(), 0),
            None
        );
        // c claims b's /16 too, then leaves: b has it back (the newest other claimer).
        let c = s
            .insert_one(
                &chosen(0x5003, 5, "198.51.100.3", &[("10.129.0.0", 16)]),
                2,
                "ipsec0",
                &[],
            )
            .unwrap();
        assert_eq!(sent_with("10.129.7.7"), c);
        assert!(s.remove_one(c).unwrap());
        assert_eq!(sent_with("10.129.7.7"), b);
        // b goes: its prefixes fall back to the tunnel's SA.
        assert!(s.remove_one(b).unwrap());
        assert_eq!(sent_with("10.128.0.2"), own);
        assert_eq!(sent_with("10.129.7.7"), own);
        // A whole publish keeps what it plans (a2, by its ident) and its prefix.
        let mut a2p = chosen(0x5002, 4, "198.51.100.1", &[("10.128.0.1", 32)]);
        a2p.negotiated = true;
        assert_eq!(s.publish(&[a2p], &t).unwrap(), "0 SA(s) added, 1 removed");
        assert_eq!(sent_with("10.128.0.1"), a2);
        assert_eq!(sent_with("10.128.0.2"), NONE);
        // Changed prefixes make it a new SA.
        let moved = chosen(0x5002, 4, "198.51.100.1", &[("10.128.0.9", 32)]);
        assert_eq!(s.publish(&[moved], &t).unwrap(), "1 SA(s) added, 1 removed");
        assert_eq!(sent_with("10.128.0.1"), NONE);
        assert_ne!(sent_with("10.128.0.9"), NONE);
    }

    fn tunnels() -> (Vec<u16>, Vec<String>) {
        (vec![2], vec!["ipsec0".into()])
    }

    fn out_sequence(s: &IpsecShared) -> u64 {
        s.report()
            .iter()
            .find(|r| r.sa.direction == "out")
            .unwrap()
            .sequence
    }

    proptest::proptest! {
        /// What esp-decrypt reads of a frame never panics, whatever the bytes, offsets and
        /// lengths, and finds ESP only inside the frame.
        #[test]
        fn looking_at_any_frame_never_panics(
            frame in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            at in 0usize..220,
            len in 0usize..220,
            natt in proptest::prelude::any::<bool>(),
            ether in proptest::prelude::any::<bool>(),
            tags in 0usize..3,
        ) {
            let mut frame = frame;
            if ether && frame.len() > 14 + 4 * tags {
                for t in 0..tags {
                    let tpid: [u8; 2] = if t + 1 < tags { [0x88, 0xa8] } else { [0x81, 0x00] };
                    frame[12 + 4 * t..14 + 4 * t].copy_from_slice(&tpid);
                }
                let l3 = 14 + 4 * tags;
                frame[l3 - 2..l3].copy_from_slice(&[0x08, 0x00]);
                frame[l3] = 0x45;
            }
            let own = dataplane::interfaces::OwnAddrs::new(["192.0.2.1".parse().unwrap()]);
            if let Seen::Esp(l3, total, _, _, _) = look(&frame, at, len, &own, natt, |_| Some(9)) {
                proptest::prop_assert!(l3 + total <= frame.len());
            }
            let _ = esp_seq(&frame, at, natt);
        }
    }

    /// ESP to the router in a frame with no tag, one (802.1Q) or two (QinQ): found after
    /// the tags, with the sub-interface they name; a tagged frame of no sub-interface is
    /// left alone (ethernet-input drops it), as is ESP to another address.
    #[test]
    fn esp_is_found_behind_vlan_tags_of_a_sub_interface() {
        let own = dataplane::interfaces::OwnAddrs::new(["192.0.2.1".parse().unwrap()]);
        let frame = |tags: &[[u8; 2]], dst: [u8; 4]| -> Vec<u8> {
            let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
            for tpid in tags {
                f.extend_from_slice(tpid);
                f.extend_from_slice(&100u16.to_be_bytes());
            }
            f.extend_from_slice(&[0x08, 0x00]);
            // IPv4, 20-byte header, total 40, protocol ESP, to `dst`; then SPI 0x1001.
            let mut ip = vec![0x45, 0, 0, 40, 0, 0, 0, 0, 64, 50, 0, 0, 192, 0, 2, 2];
            ip.extend_from_slice(&dst);
            ip.extend_from_slice(&[0, 0, 0x10, 0x01]);
            ip.resize(40, 0);
            f.extend_from_slice(&ip);
            f
        };
        let (q, ad) = ([0x81, 0x00], [0x88, 0xa8]);
        let us = [192, 0, 2, 1];
        for (tags, l2, vlan) in [
            (&[][..], 14, None),
            (&[q][..], 18, Some(7)),
            (&[ad, q][..], 22, Some(7)),
        ] {
            let f = frame(tags, us);
            let seen = look(&f, 0, f.len(), &own, false, |_| Some(7));
            assert!(
                matches!(seen, Seen::Esp(at, 40, 0x1001, false, v) if at == l2 && v == vlan),
                "{} tags",
                tags.len()
            );
            if !tags.is_empty() {
                let none = look(&f, 0, f.len(), &own, false, |_| None);
                assert!(matches!(none, Seen::Other), "tags of no sub-interface");
            }
            let other = frame(tags, [192, 0, 2, 9]);
            let seen = look(&other, 0, other.len(), &own, false, |_| Some(7));
            assert!(matches!(seen, Seen::Other), "not to the router");
        }
    }

    #[test]
    fn publish_is_make_before_break_and_never_reuses_a_keys_sequence_numbers() {
        let dir = std::env::temp_dir().join(format!("ipsec-seq-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("ipsec-sequences");
        let _ = std::fs::remove_file(&file);
        let (iface, names) = tunnels();
        let t = Tunnels {
            iface: &iface,
            names: &names,
        };
        let s = IpsecShared::new(1, 4, 3);
        s.set_state_file(file.clone()).unwrap();
        let a = planned(0x1001, 7, Direction::Outbound);
        let b = planned(0x2001, 8, Direction::Inbound);
        assert_eq!(s.publish(&[a, b], &t).unwrap(), "2 SA(s) added, 0 removed");
        assert_eq!(out_sequence(&s), 0, "a key never used starts at 0");
        assert!(std::fs::read_to_string(&file)
            .unwrap()
            .contains(&SEQUENCE_GAP.to_string()));
        // The same SPI and key with ESN on: a new SA, which goes on past what the key may
        // have used.
        let mut a2 = planned(0x1001, 7, Direction::Outbound);
        a2.config.esn = true;
        let b = planned(0x2001, 8, Direction::Inbound);
        assert_eq!(s.publish(&[a2, b], &t).unwrap(), "1 SA(s) added, 1 removed");
        assert!(out_sequence(&s) >= SEQUENCE_GAP);
        // After a restart (a new table, the same state file): the same.
        let s2 = IpsecShared::new(1, 4, 3);
        s2.set_state_file(file.clone()).unwrap();
        s2.publish(&[planned(0x1001, 7, Direction::Outbound)], &t)
            .unwrap();
        assert!(out_sequence(&s2) >= SEQUENCE_GAP);
        // A key new to it starts at 0.
        let s3 = IpsecShared::new(1, 4, 3);
        s3.set_state_file(file.clone()).unwrap();
        s3.publish(&[planned(0x1001, 9, Direction::Outbound)], &t)
            .unwrap();
        assert_eq!(out_sequence(&s3), 0);
        // More SAs than fit: refused whole, nothing changes.
        let many: Vec<Planned> = (0..5)
            .map(|i| planned(0x3000 + i, 1, Direction::Inbound))
            .collect();
        let e = s3.publish(&many, &t).unwrap_err();
        assert!(e.contains("do not fit"), "{e}");
        assert_eq!(s3.installed(), 1);
        // A state file that is not one is an error naming it.
        std::fs::write(&file, "zz 12\n").unwrap();
        let e = IpsecShared::new(1, 4, 3)
            .set_state_file(file.clone())
            .unwrap_err();
        assert!(e.contains("line 1"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn one_sa_at_a_time_replaces_rekeys_and_removes_as_a_whole_publish_would() {
        let (iface, names) = tunnels();
        let t = Tunnels {
            iface: &iface,
            names: &names,
        };
        let s = IpsecShared::new(1, 4, 3);
        // The config's inbound SA, then IKE's pair beside it.
        s.publish(&[planned(0x2001, 8, Direction::Inbound)], &t)
            .unwrap();
        let mut i1 = planned(0x3001, 1, Direction::Inbound);
        i1.negotiated = true;
        let mut o1 = planned(0x4001, 2, Direction::Outbound);
        o1.negotiated = true;
        let si1 = s.insert_one(&i1, 2, "ipsec0", &[]).unwrap();
        let so1 = s.insert_one(&o1, 2, "ipsec0", &[]).unwrap();
        assert_eq!(s.installed(), 3);
        assert_eq!(s.slot_of(Direction::Inbound, 0x3001, 2), Some(si1));
        assert_eq!(s.slot_of(Direction::Outbound, 0x4001, 2), Some(so1));
        assert_eq!(s.slot_of(Direction::Outbound, 0x4002, 2), None);
        {
            let mut w = s.workers[OWNER].borrow_mut();
            while w.apply_ops(usize::MAX) > 0 {}
            assert_eq!(w.inbound(0x3001), si1);
            assert_eq!(w.tx(2), so1);
        }
        // An inbound SPI another SA has is refused unless that one is replaced.
        let e = s
            .insert_one(&planned(0x2001, 5, Direction::Inbound), 2, "ipsec0", &[])
            .unwrap_err();
        assert!(e.contains("0x2001 is already the SPI"), "{e}");
        // A rekey: the new outbound SA sends, the old one leaves; the new inbound SA
        // goes in beside the old one.
        let mut o2 = planned(0x4002, 3, Direction::Outbound);
        o2.negotiated = true;
        let so2 = s.insert_one(&o2, 2, "ipsec0", &[so1]).unwrap();
        assert_ne!(so2, so1);
        assert_eq!(s.installed(), 3);
        let r = s.report();
        let out: Vec<_> = r.iter().filter(|r| r.sa.direction == "out").collect();
        assert_eq!(out.len(), 1);
        assert!(out[0].sa.active && out[0].sa.spi == 0x4002, "{r:?}");
        // No sequence number is kept for negotiated keys.
        assert!(s.control.lock().unwrap().sequences.is_empty());
        {
            let mut w = s.workers[OWNER].borrow_mut();
            while w.apply_ops(usize::MAX) > 0 {}
            assert_eq!(w.tx(2), so2);
        }
        // The table is full: refused, nothing changes.
        s.insert_one(&planned(0x3002, 4, Direction::Inbound), 2, "ipsec0", &[])
            .unwrap();
        let e = s
            .insert_one(&planned(0x3003, 4, Direction::Inbound), 2, "ipsec0", &[])
            .unwrap_err();
        assert!(e.contains("does not fit"), "{e}");
        assert_eq!(s.installed(), 4);
        // Removing the transmit SA leaves the tunnel without one.
        assert!(s.remove_one(so2).unwrap());
        assert!(!s.remove_one(so2).unwrap());
        {
            let mut w = s.workers[OWNER].borrow_mut();
            while w.apply_ops(usize::MAX) > 0 {}
            assert_eq!(w.tx(2), NONE);
        }
        // A whole publish afterwards sees the same table: the config's SA stays, the
        // others go.
        assert_eq!(
            s.publish(&[planned(0x2001, 8, Direction::Inbound)], &t)
                .unwrap(),
            "0 SA(s) added, 2 removed"
        );
        assert_eq!(s.slot_of(Direction::Inbound, 0x3001, 2), None);
    }

    /// Two workers: each tunnel's SAs on one worker, the tunnels spread over both, a
    /// rekey's new SAs (IKE's or the API's, through [`IpsecShared::insert_one`]) on the
    /// tunnel's worker, and `show ipsec sa` saying which.
    #[test]
    fn tunnels_spread_over_the_workers_and_a_rekey_stays_on_its_tunnels_worker() {
        let s = IpsecShared::new(2, 16, 4);
        let mut p = planned(0x1002, 1, Direction::Inbound);
        let in2 = s.insert_one(&p, 2, "ipsec0", &[]).unwrap();
        p = planned(0x2002, 2, Direction::Outbound);
        s.insert_one(&p, 2, "ipsec0", &[]).unwrap();
        p = planned(0x1003, 3, Direction::Inbound);
        s.insert_one(&p, 3, "ipsec1", &[]).unwrap();
        p = planned(0x2003, 4, Direction::Outbound);
        let out3 = s.insert_one(&p, 3, "ipsec1", &[]).unwrap();
        let workers = |s: &IpsecShared| -> Vec<(u32, usize)> {
            s.report().iter().map(|r| (r.sa.spi, r.sa.worker)).collect()
        };
        assert_eq!(
            workers(&s),
            [(0x1002, 0), (0x2002, 0), (0x1003, 1), (0x2003, 1)]
        );
        // Rekey ipsec1: new SAs replace the old ones, on worker 1 still.
        p = planned(0x1013, 5, Direction::Inbound);
        s.insert_one(&p, 3, "ipsec1", &[]).unwrap();
        p = planned(0x2013, 6, Direction::Outbound);
        let out3b = s.insert_one(&p, 3, "ipsec1", &[out3]).unwrap();
        assert_eq!(
            workers(&s),
            [
                (0x1002, 0),
                (0x2002, 0),
                (0x1003, 1),
                (0x1013, 1),
                (0x2013, 1)
            ]
        );
        for w in &s.workers {
            w.borrow_mut().apply_ops(sad::OPS_PER_VECTOR);
        }
        assert_eq!(s.workers[1].borrow().tx(3), out3b);
        assert_eq!(s.workers[0].borrow().elsewhere(3), Some(1));
        // ipsec1's packets go to worker 1, but one handed to worker 0 for output (its
        // table naming another owner than the sender's did) stays and finds no SA there.
        assert_eq!(hand_to(&s.workers[0].borrow(), 3, 0), Some(1));
        assert_eq!(hand_to(&s.workers[0].borrow(), 3, F_TO_OUTPUT), None);
        assert_eq!(s.workers[0].borrow().tx(3), sad::NONE);
        assert_eq!(hand_to(&s.workers[1].borrow(), 3, 0), None);
        assert_eq!(s.workers[0].borrow().inbound(0x1002), in2);
        assert_eq!(sad::remote(s.workers[1].borrow().inbound(0x1002)), Some(0));
    }

    /// Policy SAs (no tunnel) spread too, each on the least loaded worker, and the SPD
    /// names each protect policy's worker.
    #[test]
    fn policy_sas_spread_over_the_workers() {
        let s = IpsecShared::new(2, 16, 4);
        let t = s
            .insert_one(&planned(0x2002, 1, Direction::Outbound), 2, "ipsec0", &[])
            .unwrap();
        let a = s
            .insert_one(
                &planned(0x3001, 2, Direction::Outbound),
                POLICY_IFACE,
                POLICY_SA_NAME,
                &[],
            )
            .unwrap();
        let b = s
            .insert_one(
                &planned(0x3002, 3, Direction::Outbound),
                POLICY_IFACE,
                POLICY_SA_NAME,
                &[],
            )
            .unwrap();
        let slots = s.policy_slots();
        assert_eq!(slots[&0x3001], (a, 1), "ipsec0 took worker 0");
        assert_eq!(slots[&0x3002], (b, 0));
        let w: Vec<(u32, usize)> = s.report().iter().map(|r| (r.sa.spi, r.sa.worker)).collect();
        assert_eq!(w, [(0x3001, 1), (0x3002, 0), (0x2002, 0)]);
        // The policy SA gone, its worker's load goes with it: the next goes there.
        assert!(s.remove_one(a).unwrap());
        let c = s
            .insert_one(
                &planned(0x3003, 4, Direction::Outbound),
                POLICY_IFACE,
                POLICY_SA_NAME,
                &[],
            )
            .unwrap();
        assert_eq!(s.policy_slots()[&0x3003], (c, 1));
        assert_ne!(t, c);
    }
}
