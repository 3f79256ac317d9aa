//! Policy-based IPsec on the fast path's feature arcs: the interfaces' SPDs
//! ([`crate::spd`]) applied to what they send and receive.
//!
//! - `ipsec4-policy-out` / `ipsec6-policy-out` on `ip4-output` / `ip6-output` of every
//!   interface with an outbound SPD (after the egress filter and NAT): each packet is
//!   classified by its 5-tuple; PROTECT encrypts it in place with the policy's SA (tunnel
//!   or transport mode) and routes it again by its outer header
//!   ([`dataplane::feature::Batch::reroute`]), BYPASS lets it go on, DISCARD drops it
//!   (counted). The router's own ESP and IKE (UDP 500 and 4500) always bypass, so ESP a
//!   policy produced is never protected again. A packet with DF (every IPv6 one) that
//!   would no longer fit the interface's MTU once encrypted is answered with
//!   fragmentation-needed / packet-too-big carrying the MTU left for it.
//! - `ipsec4-policy-in` / `ipsec6-policy-in` on `ip4-unicast` / `ip6-unicast`, first on
//!   the arc, of every port (a policy SA's packet is received on the port its ESP came in
//!   on) and of every VLAN sub-interface with an inbound SPD: a packet `esp-decrypt`
//!   decrypted with a policy SA (it left the SPI in `Pkt::aux`) must match an inbound
//!   PROTECT policy naming that SA, else it is dropped (`policy_mismatch`); a clear packet
//!   matching PROTECT is dropped (`not_protected`), one matching DISCARD too, one matching
//!   BYPASS goes on; nothing matching: the interface's default.
//!
//! Nothing allocates, locks or logs per packet. The SPD is taken up between vectors (the
//! outbound nodes of each worker once its SA table has applied every queued change); a
//! packet a PROTECT policy takes whose SA another worker holds is handed to that worker's
//! output arc of the interface (once: a packet handed over for output stays there);
//! an outbound policy's SA is checked by SPI at use, so a policy whose SA is gone drops
//! (`no_sa`) rather than encrypting with another.

use std::sync::Arc;

use atomic_refcell::AtomicRefCell;
use dataplane::buffer::{F_HANDED_OFF, F_LOCAL_ORIGIN, F_TO_OUTPUT};
use dataplane::feature::{ArcId, Batch, Feature, FeatureCx, FeatureNode, FeatureSpec, Reply};
use dataplane::handoff::HandoffTx;
use dataplane::VECTOR_SIZE;
use firewall::classify::{key_v4, key_v6};
use firewall::node::{parse4, parse6, Parsed};

use crate::config::PolicyAction;
use crate::node::{encrypt_one, IpsecShared};
use crate::sa::Direction;
use crate::sad::{self, Sad};
use crate::spd::{Spd, Verdict};

/// The outbound policy features.
pub const OUT4: &str = "ipsec4-policy-out";
/// IPv6.
pub const OUT6: &str = "ipsec6-policy-out";
/// The inbound policy features.
pub const IN4: &str = "ipsec4-policy-in";
/// IPv6.
pub const IN6: &str = "ipsec6-policy-in";

crate::esp_drops! {
    /// Drop reasons of the outbound policy features: the codec's (as `esp4-encrypt`'s),
    /// then their own.
    pub const OUT_DROPS;
    O_NO_SA = ("no_sa", "a protect policy whose SA is not installed");
    O_DISCARD = ("discard", "a discard policy matched");
    O_DEFAULT = (
        "default_discard",
        "no policy matched and the SPD's default is discard"
    );
    O_TOO_BIG = (
        "too_big_df",
        "would not fit the MTU once encrypted, DF set: answered"
    );
    O_MALFORMED = ("malformed", "IP or transport header unreadable");
    O_BUSY = (
        "busy",
        "the worker's SA table was borrowed (never expected)"
    );
    O_HANDOFF_FULL = ("handoff_full", "the lane to the SA's worker was full");
}

/// Drop reasons of the inbound policy features.
pub const IN_DROPS: &[(&str, &str)] = &[
    (
        "policy_mismatch",
        "decrypted by a policy SA, but no inbound protect policy naming that SA matches it",
    ),
    (
        "not_protected",
        "arrived in the clear, but an inbound protect policy matches it",
    ),
    ("discard", "a discard policy matched"),
    (
        "default_discard",
        "no policy matched and the SPD's default is discard",
    ),
    ("malformed", "IP or transport header unreadable"),
];
const I_MISMATCH: u8 = 0;
const I_NOT_PROTECTED: u8 = 1;
const I_DISCARD: u8 = 2;
const I_DEFAULT: u8 = 3;
const I_MALFORMED: u8 = 4;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Out4,
    Out6,
    In4,
    In6,
}

impl Kind {
    fn v6(self) -> bool {
        matches!(self, Kind::Out6 | Kind::In6)
    }
    fn out(self) -> bool {
        matches!(self, Kind::Out4 | Kind::Out6)
    }
}

/// The policy features, to register.
pub(crate) fn features(shared: &Arc<IpsecShared>) -> Vec<Arc<dyn Feature>> {
    [Kind::Out4, Kind::Out6, Kind::In4, Kind::In6]
        .into_iter()
        .map(|kind| {
            Arc::new(PolicyFeature {
                kind,
                shared: shared.clone(),
            }) as Arc<dyn Feature>
        })
        .collect()
}

impl IpsecShared {
    /// Install `spd` (compiled by [`Spd::compile`] from the config whose SAs were just
    /// published): each outbound protect policy finds its SA's slot, and the nodes take it
    /// up between vectors.
    pub fn publish_spd(&self, mut spd: Spd) {
        let slots = self.policy_slots();
        spd.resolve(|spi| slots.get(&spi).copied().unwrap_or((crate::sad::NONE, 0)));
        self.spd.store(Arc::new(spd));
    }

    /// The SPD the nodes use (to compile the next one from, and for `show ipsec`).
    pub fn spd(&self) -> Arc<Spd> {
        self.spd.load_full()
    }
}

struct PolicyFeature {
    kind: Kind,
    shared: Arc<IpsecShared>,
}

impl Feature for PolicyFeature {
    fn spec(&self) -> FeatureSpec {
        match self.kind {
            Kind::Out4 | Kind::Out6 => FeatureSpec {
                name: if self.kind == Kind::Out4 { OUT4 } else { OUT6 },
                arc: if self.kind == Kind::Out4 {
                    ArcId::Ip4Output
                } else {
                    ArcId::Ip6Output
                },
                before: &[],
                // The egress filter and source NAT see the clear packet, as Linux's
                // POSTROUTING does before xfrm.
                after: &["ip4-filter-egress", "ip6-filter-egress", "ip4-nat-out"],
                drops: OUT_DROPS,
            },
            Kind::In4 | Kind::In6 => FeatureSpec {
                name: if self.kind == Kind::In4 { IN4 } else { IN6 },
                arc: if self.kind == Kind::In4 {
                    ArcId::Ip4Unicast
                } else {
                    ArcId::Ip6Unicast
                },
                // First: it takes the SPI `esp-decrypt` left in `aux` before anything that
                // uses `aux` (NAT) or hands the packet to another worker (flow steering).
                before: &[
                    "ip4-handoff",
                    "ip6-handoff",
                    "ip4-urpf-strict",
                    "ip4-urpf-loose",
                    "ip6-urpf-strict",
                    "ip6-urpf-loose",
                    "ip4-nat-reply",
                    "ip4-nat-in",
                    "ip4-filter-ingress",
                    "ip6-filter-ingress",
                ],
                after: &[],
                drops: IN_DROPS,
            },
        }
    }

    fn describe_note(&self, a: u32, b: u64) -> String {
        let what = match b {
            0 => "no policy matched: the default".to_string(),
            n => format!("policy ipsec.policy[{}]", n - 1),
        };
        match (self.kind.out(), a) {
            (true, 0) => what,
            // Noted by the encryption: the SA and the sequence number.
            (true, spi) => {
                format!("protect: SA spi {spi:#x} seq {b}: encrypted, routed by the outer header")
            }
            (false, 0) => what,
            (false, spi) => format!("{what}: decrypted by SA spi {spi:#x}"),
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
            Kind::Out4 => 3,
            _ => 4,
        };
        // Every worker of several: a policy's SA may be any worker's.
        let tx = if !self.kind.out() {
            None
        } else {
            self.shared
                .senders
                .lock()
                .ok()
                .and_then(|mut s| s.get_mut(worker)?.get_mut(side)?.take())
        };
        Box::new(PolicyNode {
            kind: self.kind,
            worker,
            shared: self.shared.clone(),
            spd: self.shared.spd.load_full(),
            table,
            tx,
            touched: Vec::with_capacity(VECTOR_SIZE),
        })
    }
}

struct PolicyNode {
    kind: Kind,
    worker: usize,
    shared: Arc<IpsecShared>,
    /// The SPD in use.
    spd: Arc<Spd>,
    /// The worker's SA table.
    table: Arc<AtomicRefCell<Sad>>,
    /// Outbound, with several workers: the lanes to the others, for packets whose SA
    /// another worker holds.
    tx: Option<HandoffTx>,
    /// The SA slots a vector used (capacity for a whole vector).
    touched: Vec<u32>,
}

/// The router's own IKE or ESP, which policies never protect (as Linux's IKE daemons'
/// socket policies and xfrm's own output do).
fn own_ike_or_esp(p: &Parsed, flags: u16) -> bool {
    flags & F_LOCAL_ORIGIN != 0
        && (p.proto == 50
            || p.proto == 17 && p.l4 && [p.sport, p.dport].iter().any(|x| *x == 500 || *x == 4500))
}

fn verdict(t: &crate::spd::Table, p: &Parsed, v6: bool) -> Verdict {
    if v6 {
        let key = key_v6(p.src.into(), p.dst.into(), p.sport, p.dport, p.proto);
        t.classify6(&key, p.l4)
    } else {
        let a = |b: &[u8; 16]| std::net::Ipv4Addr::new(b[12], b[13], b[14], b[15]);
        let key = key_v4(a(&p.src), a(&p.dst), p.sport, p.dport, p.proto);
        t.classify4(&key, p.l4)
    }
}

impl FeatureNode for PolicyNode {
    fn process(&mut self, cx: &mut FeatureCx<'_>, batch: &mut Batch<'_>) {
        if self.kind.out() {
            self.outbound(cx, batch);
        } else {
            let latest = self.shared.spd.load();
            if !Arc::ptr_eq(&latest, &self.spd) {
                self.spd = latest.clone();
            }
            self.inbound(cx, batch);
        }
    }
}

impl PolicyNode {
    fn inbound(&mut self, cx: &mut FeatureCx<'_>, batch: &mut Batch<'_>) {
        let v6 = self.kind.v6();
        let spd = &*self.spd;
        for k in 0..batch.len() {
            let Some(p) = batch.pkt(k).copied() else {
                continue;
            };
            // The SA that decrypted it (0: it came in the clear).
            let spi = p.aux;
            if spi != 0 {
                if let Some(d) = batch.pkt_mut(k) {
                    d.aux = 0;
                }
            } else if p.flags & F_HANDED_OFF != 0 {
                // Handed over by flow steering, which runs after this node, or held while
                // its next hop resolved (glean) and pushed through again: checked when it
                // was received.
                continue;
            }
            let table = spd.inbound(batch.iface(k));
            let Some(t) = table else {
                if spi != 0 {
                    // A policy SA's packet on an interface with no inbound SPD.
                    batch.drop(k, I_MISMATCH);
                }
                continue;
            };
            let frame = cx.mem.frame(p.buf);
            let at = p.off as usize + p.l3 as usize;
            let parsed = if v6 {
                parse6(frame, at)
            } else {
                parse4(frame, at)
            };
            let Ok(parsed) = parsed else {
                batch.drop(k, I_MALFORMED);
                continue;
            };
            let v = verdict(t, &parsed, v6);
            if let Verdict::Policy(i) = v {
                if let Some(pol) = spd.policies.get(i) {
                    pol.count(self.worker);
                }
            }
            if batch.traced(k) {
                let n = match v {
                    Verdict::Policy(i) => i as u64 + 1,
                    Verdict::Default(_) => 0,
                };
                batch.note(k, spi, n);
            }
            let action = match v {
                Verdict::Policy(i) => spd.policies.get(i).map(|p| (p.action, &p.spis[..])),
                Verdict::Default(_) => None,
            };
            match (spi, action) {
                (0, Some((PolicyAction::Protect, _))) => batch.drop(k, I_NOT_PROTECTED),
                (0, Some((PolicyAction::Discard, _))) => batch.drop(k, I_DISCARD),
                (0, Some((PolicyAction::Bypass, _))) => {}
                (0, None) => {
                    if t.default == PolicyAction::Discard {
                        batch.drop(k, I_DEFAULT);
                    }
                }
                (spi, Some((PolicyAction::Protect, spis))) if spis.contains(&spi) => {}
                _ => batch.drop(k, I_MISMATCH),
            }
        }
    }

    fn outbound(&mut self, cx: &mut FeatureCx<'_>, batch: &mut Batch<'_>) {
        let v6 = self.kind.v6();
        // The worker applies its table's queued changes first, and takes up a new SPD only
        // once they are all in.
        let mut sad = None;
        match self.table.try_borrow_mut() {
            Ok(mut s) => {
                s.apply_ops(sad::OPS_PER_VECTOR);
                if !s.ops_pending() {
                    let latest = self.shared.spd.load();
                    if !Arc::ptr_eq(&latest, &self.spd) {
                        self.spd = latest.clone();
                    }
                }
                sad = Some(s);
            }
            Err(_) => {
                self.shared
                    .busy
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        self.touched.clear();
        let spd = &*self.spd;
        let mut handed = 0;
        for k in 0..batch.len() {
            let Some(p) = batch.pkt(k).copied() else {
                continue;
            };
            let iface = batch.iface(k);
            let Some(t) = spd.out(iface) else {
                continue;
            };
            let frame = cx.mem.frame(p.buf);
            let at = p.off as usize + p.l3 as usize;
            let parsed = if v6 {
                parse6(frame, at)
            } else {
                parse4(frame, at)
            };
            let Ok(parsed) = parsed else {
                batch.drop(k, O_MALFORMED);
                continue;
            };
            if own_ike_or_esp(&parsed, p.flags) {
                continue;
            }
            let v = verdict(t, &parsed, v6);
            let (action, pol) = match v {
                Verdict::Policy(i) => match spd.policies.get(i) {
                    Some(pol) => {
                        // Counted once: on the worker that handed it to the SA's worker,
                        // not again there.
                        if p.flags & F_TO_OUTPUT == 0 {
                            pol.count(self.worker);
                        }
                        (pol.action, Some((i, pol)))
                    }
                    None => continue,
                },
                Verdict::Default(a) => (a, None),
            };
            match (action, pol) {
                (PolicyAction::Bypass, _) | (PolicyAction::Protect, None) => {
                    if batch.traced(k) {
                        batch.note(k, 0, pol.map_or(0, |x| x.0 as u64 + 1));
                    }
                }
                (PolicyAction::Discard, Some(_)) => batch.drop(k, O_DISCARD),
                (PolicyAction::Discard, None) => batch.drop(k, O_DEFAULT),
                (PolicyAction::Protect, Some((_, pol))) => {
                    let owner = usize::from(pol.owner);
                    // A packet handed here for output stays (an SPD this worker has not
                    // taken up yet may name another owner: no packet goes round).
                    let away = owner != self.worker && p.flags & F_TO_OUTPUT == 0;
                    if let Some(tx) = self.tx.as_mut().filter(|_| away) {
                        // The SA lives on its owner: the packet goes to this interface's
                        // output arc there, from 14 bytes before its IP header.
                        let end = p.off as usize + p.len as usize;
                        let bytes = frame.get(at.saturating_sub(14)..end).unwrap_or(&[]);
                        match tx.send(owner, iface, F_TO_OUTPUT, bytes) {
                            Ok(()) => {
                                batch.take(k);
                                handed += 1;
                            }
                            Err(_) => batch.drop(k, O_HANDOFF_FULL),
                        }
                        continue;
                    }
                    let Some(sad) = sad.as_mut() else {
                        batch.drop(k, O_BUSY);
                        continue;
                    };
                    let spi = pol.spis.first().copied().unwrap_or(0);
                    let Some(inst) = sad.get_mut(pol.slot) else {
                        batch.drop(k, O_NO_SA);
                        continue;
                    };
                    if inst.sa.spi() != spi || inst.sa.direction() != Direction::Outbound {
                        batch.drop(k, O_NO_SA);
                        continue;
                    }
                    // DF set (or IPv6) and no longer fitting once encrypted: tell the
                    // sender the MTU left (as a tunnel interface's MTU does).
                    let ip_len = (p.len as usize).saturating_sub(p.l3 as usize);
                    let mtu = cx.ifaces.port(iface).map_or(1500, |x| usize::from(x.mtu));
                    let df = v6 || frame.get(at + 6).is_some_and(|b| b & 0x40 != 0);
                    let over = inst.sa.max_overhead();
                    if df && ip_len + over > mtu {
                        let left = mtu.saturating_sub(over).max(if v6 { 1280 } else { 68 }) as u16;
                        let (ty, code) = if v6 { (2, 0) } else { (3, 4) };
                        batch.reject(
                            k,
                            O_TOO_BIG,
                            Reply::IcmpErrorMtu {
                                ty,
                                code,
                                mtu: left,
                            },
                        );
                        continue;
                    }
                    if self.touched.last() != Some(&pol.slot)
                        && self.touched.len() < self.touched.capacity()
                    {
                        self.touched.push(pol.slot);
                    }
                    encrypt_one(cx, batch, k, &p, &mut inst.sa);
                }
            }
        }
        if let Some(tx) = self.tx.as_mut() {
            if handed > 0 {
                tx.ring();
                self.shared
                    .handed_off
                    .fetch_add(handed, std::sync::atomic::Ordering::Relaxed);
            }
        }
        if let Some(sad) = sad.as_ref() {
            for &s in &self.touched {
                sad.publish(s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 packet (header at 0) of `proto`, with these ports (TCP or UDP).
    fn ip4(proto: u8, sport: u16, dport: u16, frag: u16) -> Vec<u8> {
        // Room for a TCP header too.
        let mut f = vec![0u8; 40];
        f[0] = 0x45;
        f[2..4].copy_from_slice(&40u16.to_be_bytes());
        f[6..8].copy_from_slice(&frag.to_be_bytes());
        f[8] = 64;
        f[9] = proto;
        f[12..16].copy_from_slice(&[10, 1, 0, 2]);
        f[16..20].copy_from_slice(&[10, 2, 0, 2]);
        f[20..22].copy_from_slice(&sport.to_be_bytes());
        f[22..24].copy_from_slice(&dport.to_be_bytes());
        f
    }

    #[test]
    fn only_the_routers_own_ike_and_esp_skip_the_spd() {
        let p = |proto, s, d| parse4(&ip4(proto, s, d, 0), 0).unwrap();
        assert!(own_ike_or_esp(&p(50, 0, 0), F_LOCAL_ORIGIN));
        assert!(own_ike_or_esp(&p(17, 4500, 4500), F_LOCAL_ORIGIN));
        assert!(own_ike_or_esp(&p(17, 500, 500), F_LOCAL_ORIGIN));
        assert!(!own_ike_or_esp(&p(17, 5000, 5001), F_LOCAL_ORIGIN));
        // Transit ESP and IKE are classified like anything else.
        assert!(!own_ike_or_esp(&p(50, 0, 0), 0));
        assert!(!own_ike_or_esp(&p(17, 500, 500), 0));
    }

    #[test]
    fn packets_meet_their_policies_and_later_fragments_skip_port_selectors() {
        let cfg: crate::config::IpsecConfig = toml::from_str(
            "[[policy]]\ninterface = \"wan\"\ndirection = \"out\"\nprotocol = \"udp\"\ndst_ports = 9\naction = \"discard\"\n\
             [[policy]]\ninterface = \"wan\"\ndirection = \"out\"\npriority = 5\ndst = \"10.2.0.0/24\"\naction = \"bypass\"\n\
             [[policy]]\ninterface = \"wan\"\ndirection = \"out\"\npriority = 1\ndst = \"10.2.0.0/24\"\nprotocol = \"udp\"\naction = \"protect\"\nsa = 0x1001\n",
        )
        .unwrap();
        let spd = Spd::compile(&cfg, &[], &["wan".to_string()], 1, &Spd::default()).unwrap();
        let t = spd.out(0).unwrap();
        let v = |f: Vec<u8>| verdict(t, &parse4(&f, 0).unwrap(), false);
        // Priority 0 (the discard of UDP 9) first, then 1, then 5.
        assert_eq!(v(ip4(17, 1, 9, 0)), Verdict::Policy(0));
        assert_eq!(v(ip4(17, 1, 10, 0)), Verdict::Policy(2));
        assert_eq!(v(ip4(6, 1, 9, 0)), Verdict::Policy(1));
        // A later fragment of UDP to port 9: no ports, so not the discard.
        assert_eq!(v(ip4(17, 1, 9, 100)), Verdict::Policy(2));
    }
}
