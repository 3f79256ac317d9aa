//! IKE SA rekeying (RFC 7296 §1.3.2, §2.8, §2.18), either side: CREATE_CHILD_SA with an
//! IKE proposal carrying the new SPI, fresh nonces and a fresh key exchange. The new IKE
//! SA's keys come from the old one's SK_d:
//!
//! ```text
//! SKEYSEED = prf(SK_d (old), g^ir (new) | Ni | Nr)
//! ```
//!
//! and prf+ over the new nonces and SPIs (`crypto::IkeKeys::rekey`). Its message IDs
//! start at 0, the side that asked for the rekey is its initiator (the header's I flag),
//! the child SAs move to it without touching the data plane, and the side that asked
//! deletes the old SA.
//!
//! Both sides asking at once (§2.8.2): each answers the other's request, so two new SAs
//! exist; the one whose exchange holds the lowest of the four nonces is deleted by the
//! side that asked for it, the other inherits the children. A side that had finished its
//! rekey before the other's request came answers it TEMPORARY_FAILURE; the other learns
//! from that (or from the Delete of the old SA) that its own attempt is void.

use super::*;

/// The lower of an exchange's two nonces (compared as strongSwan does: over the shorter
/// length).
fn lower_nonce(a: &[u8], b: &[u8]) -> Vec<u8> {
    let n = a.len().min(b.len());
    if a[..n] <= b[..n] {
        a.to_vec()
    } else {
        b.to_vec()
    }
}

/// Whether exchange `a`'s lower nonce is below exchange `b`'s: `a` lost.
fn loses(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().min(b.len());
    a[..n] < b[..n]
}

/// A retry after a refused rekey: soon after TEMPORARY_FAILURE (a collision, or the peer
/// busy with a child SA), later else.
fn retry_after(kind: u16) -> Duration {
    if kind == notify::TEMPORARY_FAILURE {
        Duration::from_millis(1000 + rand_u64() % 2000)
    } else {
        Duration::from_secs(60)
    }
}

impl Engine {
    /// A fresh SPI of ours for an IKE SA.
    fn new_ike_spi(&self) -> u64 {
        loop {
            let s = rand_u64();
            if s != 0 && !self.sas.contains_key(&s) {
                return s;
            }
        }
    }

    /// The IKE SA that rekeys `old`, keyed (§2.18) and established; `initiator`: we asked
    /// for the rekey. `None` (counted) if the keys cannot be made.
    #[allow(clippy::too_many_arguments)]
    fn rekeyed_sa(
        &mut self,
        old: u64,
        initiator: bool,
        (spi_i, spi_r): (u64, u64),
        suite: IkeProposal,
        g_ir: &[u8],
        (ni, nr): (&[u8], &[u8]),
        now: Instant,
    ) -> Option<Box<IkeSa>> {
        let sa = self.sas.get(&old)?;
        let old_suite = sa.suite.filter(|_| !sa.sk_d.is_empty())?;
        let made = IkeKeys::rekey(
            &suite_of(&suite),
            old_suite.prf,
            &sa.sk_d,
            g_ir,
            ni,
            nr,
            spi_i,
            spi_r,
        )
        .and_then(|k| {
            let i = SkCipher::new(suite.encr, suite.integ, &k.sk_ei, &k.sk_ai)?;
            let r = SkCipher::new(suite.encr, suite.integ, &k.sk_er, &k.sk_ar)?;
            Ok((k, i, r))
        });
        let (keys, i_to_r, r_to_i) = match made {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(
                    peer = sa.peer_name(),
                    "IKE: keys of the rekeyed IKE SA: {e}"
                );
                self.counters.failed.crypto += 1;
                return None;
            }
        };
        let mut new = IkeSa::new(
            sa.peer.clone(),
            initiator,
            (spi_i, spi_r),
            (sa.local, sa.remote),
            State::Established,
            now,
        );
        new.nat = sa.nat;
        new.frag = sa.frag;
        new.last_keepalive = sa.last_keepalive;
        new.suite = Some(suite);
        // Only SK_d is used again: the other keys are wiped as `keys` drops.
        new.sk_d = sk_d_of(&keys);
        (new.tx, new.rx) = if initiator {
            (Some(i_to_r), Some(r_to_i))
        } else {
            (Some(r_to_i), Some(i_to_r))
        };
        new.schedule_rekey(now);
        Some(new)
    }

    /// Moves the child SAs of IKE SA `from` to `to` (nothing changes in the data plane),
    /// and counts the rekey. They stay if `to` is gone.
    fn move_children(&mut self, from: u64, to: u64) {
        if !self.sas.contains_key(&to) {
            return;
        }
        let Some(old) = self.sas.get_mut(&from) else {
            return;
        };
        let kids = std::mem::take(&mut old.children);
        old.rare_mut().moved_to = std::num::NonZeroU64::new(to);
        // The SPI IKE_AUTH offered is a child's, or was never used: not the old SA's to
        // free any more in the first case.
        if old.child_spi != 0 {
            if !kids.iter().any(|c| c.spi_in == old.child_spi) {
                self.child_spis.remove(&old.child_spi);
            }
            old.child_spi = 0;
        }
        let name = old.peer_name().to_string();
        if let Some(new) = self.sas.get_mut(&to) {
            tracing::info!(
                peer = name,
                "IKE: IKE SA {from:016x} rekeyed as {to:016x}: {} child SA(s) move to it",
                kids.len()
            );
            new.children.extend(kids);
            // The virtual IP goes with the children.
            if let Some(v) = self.vips.remove(&from) {
                self.vips.entry(to).or_insert(v);
            }
            // Not the vector's room for four (issue 27).
            new.children.shrink_to_fit();
        }
        self.counters.ike_rekeys += 1;
    }

    /// Starts rekeying IKE SA `spi` (ours: `ike_lifetime_s`, or a test). `group`: the DH
    /// group to use (INVALID_KE_PAYLOAD's), else the SA's.
    pub fn rekey_ike(&mut self, spi: u64, group: Option<Dh>, now: Instant, out: &mut Vec<Event>) {
        let new_spi = self.new_ike_spi();
        let Some(sa) = self.sas.get_mut(&spi) else {
            return;
        };
        let (Some(peer), Some(current)) = (sa.peer.clone(), sa.suite) else {
            return;
        };
        if sa.state != State::Established
            || sa.pending.is_some()
            || sa.ike_rekeying()
            || sa.collided()
        {
            return;
        }
        // The group the SA has (the responder most likely keeps it), unless told.
        let group = group.unwrap_or(if peer.ike.iter().any(|p| p.dh == current.dh) {
            current.dh
        } else {
            peer.ike[0].dh
        });
        let share = match KeyShare::generate(group) {
            Ok(k) => k,
            Err(e) => {
                tracing::warn!(peer = peer.name, "IKE: key share for the IKE rekey: {e}");
                self.counters.failed.crypto += 1;
                return;
            }
        };
        // Proposals of that group (the KE's) first, the current suite first of all.
        let mut props: Vec<&IkeProposal> = peer.ike.iter().filter(|p| **p == current).collect();
        props.extend(peer.ike.iter().filter(|p| p.dh == group && **p != current));
        props.extend(peer.ike.iter().filter(|p| p.dh != group && **p != current));
        let ni = rand_vec(NONCE_LEN);
        let inner = [
            Payload::Sa(
                props
                    .iter()
                    .enumerate()
                    .map(|(k, p)| ike_wire(k as u8 + 1, p, new_spi.to_be_bytes().to_vec()))
                    .collect(),
            ),
            Payload::Nonce(ni.clone()),
            Payload::Ke {
                group: group.id(),
                data: share.public().to_vec(),
            },
        ];
        sa.rare_mut().ike_rekey = Some(IkeRekey { new_spi, ni, share });
        tracing::info!(peer = peer.name, "IKE: rekeying IKE SA {spi:016x}");
        self.send_request(
            spi,
            exchange::CREATE_CHILD_SA,
            Asked::RekeyIke,
            &inner,
            now,
            out,
        );
    }

    /// The peer asks to rekey IKE SA `spi` (CREATE_CHILD_SA with an IKE proposal): the
    /// answer, the new SA, and the children moved to it (or, if we are rekeying it too,
    /// the collision noted until our answer comes).
    pub(super) fn on_ike_rekey_request(
        &mut self,
        now: Instant,
        spi: u64,
        h: &Header,
        inner: &[Payload],
        out: &mut Vec<Event>,
    ) {
        let Some(sa) = self.sas.get(&spi) else {
            return;
        };
        let Some(peer) = sa.peer.clone() else {
            return;
        };
        let mut refuse = |e: &mut Engine, kind: u16, data: Vec<u8>| {
            e.respond(
                spi,
                h.exchange,
                h.message_id,
                &[Payload::notify(kind, data)],
                out,
            );
        };
        // §2.25.2: not while we rekey or delete one of its children, nor twice at once.
        let busy = matches!(
            sa.pending.as_ref().map(|p| p.asked),
            Some(Asked::Rekey(_) | Asked::DeleteChild(_))
        ) || sa.collided();
        if busy {
            tracing::info!(
                peer = peer.name,
                "IKE: the peer asks to rekey the IKE SA while a child SA exchange is under way: TEMPORARY_FAILURE"
            );
            refuse(self, notify::TEMPORARY_FAILURE, vec![]);
            return;
        }
        let ours_under_way = sa.ike_rekeying();
        // The initiator's order decides (§2.7), among our proposals.
        let mut chosen = None;
        'o: for p in inner.sa().map(Vec::as_slice).unwrap_or_default() {
            let Ok(b) = <[u8; 8]>::try_from(&p.spi[..]) else {
                continue;
            };
            for o in &peer.ike {
                if ike_matches(p, o) && u64::from_be_bytes(b) != 0 {
                    chosen = Some((p.number, *o, u64::from_be_bytes(b)));
                    break 'o;
                }
            }
        }
        let Some((number, suite, spi_i)) = chosen else {
            self.counters.failed.no_proposal += 1;
            tracing::warn!(
                peer = peer.name,
                "IKE: no proposal chosen for the peer's IKE SA rekey: none of its IKE proposals matches ours"
            );
            refuse(self, notify::NO_PROPOSAL_CHOSEN, vec![]);
            return;
        };
        let (Some(ni), Some((group, ke))) = (inner.nonce().cloned(), inner.ke()) else {
            self.counters.dropped.malformed += 1;
            refuse(self, notify::INVALID_SYNTAX, vec![]);
            return;
        };
        if group != suite.dh.id() {
            self.counters.invalid_ke_sent += 1;
            refuse(
                self,
                notify::INVALID_KE_PAYLOAD,
                suite.dh.id().to_be_bytes().to_vec(),
            );
            return;
        }
        if ni.len() < suite.prf.out_len() / 2 {
            self.counters.dropped.malformed += 1;
            refuse(self, notify::INVALID_SYNTAX, vec![]);
            return;
        }
        let share = match KeyShare::generate(suite.dh) {
            Ok(s) => s,
            Err(_) => {
                self.counters.failed.crypto += 1;
                refuse(self, notify::TEMPORARY_FAILURE, vec![]);
                return;
            }
        };
        let g_ir = match share.agree(ke) {
            Ok(g) => g,
            Err(e) => {
                tracing::info!(peer = peer.name, "IKE: bad KE in the peer's IKE rekey: {e}");
                self.counters.dropped.malformed += 1;
                refuse(self, notify::INVALID_SYNTAX, vec![]);
                return;
            }
        };
        let spi_r = self.new_ike_spi();
        let nr = rand_vec(NONCE_LEN);
        let Some(new) = self.rekeyed_sa(spi, false, (spi_i, spi_r), suite, &g_ir, (&ni, &nr), now)
        else {
            refuse(self, notify::NO_PROPOSAL_CHOSEN, vec![]);
            return;
        };
        self.insert_sa(spi_r, new, now);
        let answer = [
            Payload::Sa(vec![ike_wire(number, &suite, spi_r.to_be_bytes().to_vec())]),
            Payload::Nonce(nr.clone()),
            Payload::Ke {
                group: suite.dh.id(),
                data: share.public().to_vec(),
            },
        ];
        self.respond(spi, h.exchange, h.message_id, &answer, out);
        if ours_under_way {
            // Which new SA stays is known once our own answer comes (§2.8.2).
            tracing::info!(peer = peer.name, "IKE: both sides rekey the IKE SA at once");
            if let Some(sa) = self.sas.get_mut(&spi) {
                sa.rare_mut().collision = Some(Collision {
                    new_spi: spi_r,
                    lower_nonce: lower_nonce(&ni, &nr),
                });
            }
            return;
        }
        self.move_children(spi, spi_r);
        self.rekeyed(spi, now);
    }

    /// Simultaneous rekeys of IKE SA `spi` where ours did not make it (it failed, or lost
    /// on nonces): the peer's new SA `peers` takes the children; the old SA waits for the
    /// peer's Delete.
    fn peers_rekey_stays(&mut self, spi: u64, peers: u64, now: Instant) {
        self.counters.ike_rekey_collisions += 1;
        self.move_children(spi, peers);
        self.rekeyed(spi, now);
    }

    /// The old SA, its children moved: the peer deletes it (we forget it after
    /// [`REKEYED_TIMEOUT`] if it does not).
    fn rekeyed(&mut self, spi: u64, now: Instant) {
        if let Some(sa) = self.sas.get_mut(&spi) {
            sa.state = State::Rekeyed;
            sa.rekey_at = None;
            sa.expire_at = Some(Stamp::of(now + REKEYED_TIMEOUT));
        }
    }

    /// The answer to our IKE SA rekey: the new SA in, the children moved to it and the
    /// old SA deleted; or, after a collision, whichever new SA has the higher nonces.
    pub(super) fn on_ike_rekey_response(
        &mut self,
        now: Instant,
        spi: u64,
        inner: &[Payload],
        out: &mut Vec<Event>,
    ) {
        let Some(sa) = self.sas.get_mut(&spi) else {
            return;
        };
        let (Some(rk), Some(peer)) = (sa.take_ike_rekey(), sa.peer.clone()) else {
            return;
        };
        let collision = sa.take_collision();
        // Our attempt failed: with a collision, the peer's new SA takes over; else retry.
        let fail = |e: &mut Engine, why: String, kind: u16| {
            if let Some(c) = &collision {
                tracing::info!(
                    peer = peer.name,
                    "IKE: our IKE SA rekey failed ({why}); the peer's, made at the same time, stays"
                );
                e.peers_rekey_stays(spi, c.new_spi, now);
                return;
            }
            let again = retry_after(kind);
            tracing::warn!(
                peer = peer.name,
                "IKE: IKE SA rekey failed: {why}; trying again in {} s",
                again.as_secs_f32()
            );
            if let Some(sa) = e.sas.get_mut(&spi) {
                sa.rekey_at = Some(Stamp::of(now + again));
            }
        };
        if let Some(n) = inner.error_notify() {
            let want = (n.kind == notify::INVALID_KE_PAYLOAD && n.data.len() == 2)
                .then(|| Dh::from_id(u16::from_be_bytes([n.data[0], n.data[1]])))
                .flatten()
                .filter(|g| *g != rk.share.group() && peer.ike.iter().any(|p| p.dh == *g));
            if let (Some(g), None) = (want, &collision) {
                self.counters.invalid_ke_retried += 1;
                tracing::info!(
                    peer = peer.name,
                    "IKE: the peer wants DH group {} for the IKE rekey",
                    g.id()
                );
                self.rekey_ike(spi, Some(g), now, out);
                return;
            }
            if n.kind != notify::TEMPORARY_FAILURE {
                self.counters.failed.peer_refused += 1;
            }
            fail(
                self,
                format!("the peer answered {}", notify::name(n.kind)),
                n.kind,
            );
            return;
        }
        let chosen = inner.sa().filter(|v| v.len() == 1).map(|v| &v[0]);
        let (Some(chosen), Some(nr), Some((group, ke))) = (chosen, inner.nonce(), inner.ke())
        else {
            self.counters.dropped.malformed += 1;
            fail(self, "the answer lacks SA, Nonce or KE".into(), 0);
            return;
        };
        let spi_r = <[u8; 8]>::try_from(&chosen.spi[..]).map(u64::from_be_bytes);
        let suite = peer
            .ike
            .iter()
            .find(|o| {
                o.dh == rk.share.group()
                    && ike_matches(chosen, o)
                    && chosen.transforms.len() == 3 + usize::from(o.integ.is_some())
            })
            .copied();
        let (Some(suite), Ok(spi_r)) = (suite, spi_r) else {
            self.counters.failed.no_proposal += 1;
            fail(
                self,
                "the peer chose an IKE proposal we did not offer".into(),
                0,
            );
            return;
        };
        if group != suite.dh.id() || spi_r == 0 || self.sas.contains_key(&rk.new_spi) {
            self.counters.dropped.malformed += 1;
            fail(self, "bad KE group or SPI in the answer".into(), 0);
            return;
        }
        let g_ir = match rk.share.agree(ke) {
            Ok(g) => g,
            Err(e) => {
                self.counters.dropped.malformed += 1;
                fail(self, format!("bad KE: {e}"), 0);
                return;
            }
        };
        let Some(new) = self.rekeyed_sa(
            spi,
            true,
            (rk.new_spi, spi_r),
            suite,
            &g_ir,
            (&rk.ni, nr),
            now,
        ) else {
            fail(self, "the new keys cannot be made".into(), 0);
            return;
        };
        self.insert_sa(rk.new_spi, new, now);
        match collision {
            Some(c) if loses(&lower_nonce(&rk.ni, nr), &c.lower_nonce) => {
                // Ours has the lowest nonce: it goes, the peer's takes the children, and
                // the peer deletes the old SA.
                tracing::info!(
                    peer = peer.name,
                    "IKE: simultaneous IKE SA rekey: the peer's wins (lower nonce on ours)"
                );
                self.peers_rekey_stays(spi, c.new_spi, now);
                self.delete_ike(rk.new_spi, now, out);
            }
            c => {
                if c.is_some() {
                    tracing::info!(
                        peer = peer.name,
                        "IKE: simultaneous IKE SA rekey: ours wins; the peer deletes its new SA"
                    );
                    self.counters.ike_rekey_collisions += 1;
                }
                self.move_children(spi, rk.new_spi);
                self.delete_ike(spi, now, out);
            }
        }
    }

    /// The peer deletes IKE SA `spi`: if it was rekeying it while we answered its rekey
    /// and ours was pending (§2.8.2, the peer saw no collision), the peer's new SA has the
    /// children.
    pub(super) fn adopt_on_delete(&mut self, spi: u64) {
        let Some(sa) = self.sas.get_mut(&spi) else {
            return;
        };
        if let Some(c) = sa.take_collision() {
            sa.take_ike_rekey();
            self.counters.ike_rekey_collisions += 1;
            self.move_children(spi, c.new_spi);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonces_compare_over_the_shorter() {
        assert_eq!(lower_nonce(&[1, 2, 3], &[1, 3]), vec![1, 2, 3]);
        assert_eq!(lower_nonce(&[2, 0], &[1, 9, 9]), vec![1, 9, 9]);
        assert!(loses(&[0, 1], &[0, 2, 0]));
        assert!(
            !loses(&[0, 2], &[0, 2, 0]),
            "equal over the shorter: no loser"
        );
    }
}
