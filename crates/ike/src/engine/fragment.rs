//! IKE fragmentation (RFC 7383): an encrypted message larger than the peer's
//! `fragment_size` (an IP datagram's size) goes in SKF payloads, each encrypted and
//! authenticated on its own; received fragments are checked before they are kept, and put
//! back together once all have come.
//!
//! Both sides announce IKEV2_FRAGMENTATION_SUPPORTED in IKE_SA_INIT (§2.3); a rekeyed
//! IKE SA keeps what its predecessor negotiated. A fragmented request is retransmitted
//! whole; a retransmitted fragmented request is answered at its first fragment only
//! (§2.6.1). What a peer can make us hold is bounded: [`MAX_FRAGMENTS`] per message,
//! [`MAX_REASSEMBLED`] bytes per message, [`MAX_REASSEMBLY_BYTES`] over all SAs, one
//! request and one response per SA (the window is one), for [`REASSEMBLY_TIMEOUT`].

use super::*;

/// Fragments one message may have.
pub const MAX_FRAGMENTS: u16 = 128;
/// The largest message put together (its inner payloads).
pub const MAX_REASSEMBLED: usize = wire::MAX_MESSAGE;
/// Bytes held by every message being put together, all SAs together.
pub const MAX_REASSEMBLY_BYTES: usize = 8 << 20;
/// How long the fragments of a message wait for the others (the sender retransmits
/// every fragment after 1, 2, 4, 8 and 16 s).
pub const REASSEMBLY_TIMEOUT: Duration = Duration::from_secs(30);

/// IPv4 and IPv6 headers, UDP's, the non-ESP marker on port 4500.
const IPV4_HEADER: usize = 20;
const IPV6_HEADER: usize = 40;
const UDP_HEADER: usize = 8;
const NON_ESP_MARKER: usize = 4;
/// The SKF payload's header: the generic header and the two fragment numbers.
const SKF_HEADER: usize = 8;
/// What keeping a fragment costs beyond its content (its allocation), counted against
/// [`MAX_REASSEMBLY_BYTES`]: empty fragments are not free.
const FRAGMENT_COST: usize = 64;

/// One fragmented message being put together: the fragments' decrypted content by
/// number.
pub(super) struct Reassembly {
    id: u32,
    /// The Next Payload of fragment 1: the first inner payload's type.
    first_inner: u8,
    parts: Vec<Option<Zeroizing<Vec<u8>>>>,
    /// The content kept, and what it costs (with [`FRAGMENT_COST`] per fragment).
    bytes: usize,
    held: usize,
    started: Instant,
}

impl Reassembly {
    fn new(id: u32, total: u16, now: Instant) -> Reassembly {
        Reassembly {
            id,
            first_inner: 0,
            parts: (0..total).map(|_| None).collect(),
            bytes: 0,
            held: 0,
            started: now,
        }
    }
}

/// The largest share of the plaintext that fits in one fragment of `avail` bytes after
/// the IKE and SKF headers, with `tx`'s IV, padding and ICV.
fn chunk_len(tx: &SkCipher, avail: usize) -> usize {
    let mut c = avail.saturating_sub(tx.overhead(0));
    while c + 1 + tx.overhead(c + 1) <= avail {
        c += 1;
    }
    c
}

impl Engine {
    /// Encrypts a message of IKE SA `spi` with header `h`: one datagram, or, when the SA
    /// negotiated fragmentation and the datagram would be larger than the peer's
    /// `fragment_size`, its fragments (§2.5).
    pub(super) fn seal_message(
        &mut self,
        spi: u64,
        h: Header,
        inner: &[Payload],
    ) -> Result<Vec<Vec<u8>>, crypto::CryptoError> {
        let Some(sa) = self.sas.get_mut(&spi) else {
            return Ok(vec![]);
        };
        let Some(tx) = sa.tx.as_mut() else {
            return Ok(vec![]);
        };
        let limit = sa
            .peer
            .as_ref()
            .map_or(crate::config::DEFAULT_FRAGMENT_SIZE, |p| p.fragment_size);
        let below_ike = if sa.remote.is_ipv4() {
            IPV4_HEADER
        } else {
            IPV6_HEADER
        } + UDP_HEADER
            + if sa.local.port() == NATT_PORT {
                NON_ESP_MARKER
            } else {
                0
            };
        let (mut msg, at) = wire::encode_sk(h, inner);
        let plain_len = msg.len() - at - 4;
        if !sa.frag || below_ike + msg.len() + tx.overhead(plain_len) <= limit {
            tx.seal(&mut msg, at, 4)?;
            return Ok(vec![msg]);
        }
        let avail = limit.saturating_sub(below_ike + wire::HEADER_LEN + SKF_HEADER);
        let chunk = chunk_len(tx, avail).max(1);
        let plain = &msg[at + 4..];
        let total = plain_len.div_ceil(chunk);
        let total16 =
            u16::try_from(total).map_err(|_| crypto::CryptoError::SkTooLong { len: plain_len })?;
        let first_inner = msg[at];
        let mut out = Vec::with_capacity(total);
        for (k, part) in plain.chunks(chunk).enumerate() {
            let (mut f, fat) = wire::encode_skf(h, first_inner, k as u16 + 1, total16, part);
            tx.seal(&mut f, fat, SKF_HEADER)?;
            out.push(f);
        }
        self.counters.messages_fragmented += 1;
        self.counters.fragments_sent += out.len() as u64;
        Ok(out)
    }

    /// Keeps fragment `n` of `total` (already authenticated: `plain` is its content) of
    /// message `h` on IKE SA `spi`; the whole message's first payload type and content
    /// once every fragment has come.
    pub(super) fn reassemble(
        &mut self,
        spi: u64,
        h: &Header,
        (n, total): (u16, u16),
        first_inner: u8,
        plain: Zeroizing<Vec<u8>>,
        now: Instant,
    ) -> Option<(u8, Zeroizing<Vec<u8>>)> {
        let whole = self.reassemble_in(spi, h, (n, total), first_inner, plain, now);
        // A message put together (or given up) leaves nothing in its SA.
        if let Some(sa) = self.sas.get_mut(&spi) {
            sa.tidy();
        }
        whole
    }

    fn reassemble_in(
        &mut self,
        spi: u64,
        h: &Header,
        (n, total): (u16, u16),
        first_inner: u8,
        plain: Zeroizing<Vec<u8>>,
        now: Instant,
    ) -> Option<(u8, Zeroizing<Vec<u8>>)> {
        self.counters.fragments_received += 1;
        let drops = &mut self.counters.dropped;
        // The parser refuses 0 and numbers past the total; checked again all the same.
        if total > MAX_FRAGMENTS || n == 0 || n > total {
            drops.fragment_out_of_range += 1;
            return None;
        }
        let sa = self.sas.get_mut(&spi)?;
        let slot = &mut sa.rare_mut().reasm[usize::from(h.is_response())];
        // §2.6.2: a message of another ID replaces the one being put together (the
        // window is one: that one is over), and so does a larger Total Fragments (the
        // sender made its fragments smaller); a smaller one is stale.
        match slot {
            Some(r) if r.id == h.message_id && usize::from(total) < r.parts.len() => {
                drops.fragment_out_of_range += 1;
                return None;
            }
            Some(r) if r.id == h.message_id && usize::from(total) == r.parts.len() => {}
            _ => {
                if let Some(old) = slot.take() {
                    self.reasm_bytes = self.reasm_bytes.saturating_sub(old.held);
                }
                *slot = Some(Box::new(Reassembly::new(h.message_id, total, now)));
            }
        }
        let r = slot.as_mut()?;
        let k = usize::from(n - 1);
        if r.parts.get(k).is_none_or(Option::is_some) {
            drops.fragment_duplicate += 1;
            return None;
        }
        if r.bytes + plain.len() > MAX_REASSEMBLED {
            // It can never be whole: give it up.
            drops.fragment_too_big += 1;
            self.reasm_bytes = self.reasm_bytes.saturating_sub(r.held);
            *slot = None;
            return None;
        }
        let cost = plain.len() + FRAGMENT_COST;
        if self.reasm_bytes + cost > MAX_REASSEMBLY_BYTES {
            drops.fragment_too_big += 1;
            return None;
        }
        if n == 1 {
            r.first_inner = first_inner;
        }
        r.bytes += plain.len();
        r.held += cost;
        self.reasm_bytes += cost;
        r.parts[k] = Some(plain);
        if r.parts.iter().any(Option::is_none) {
            return None;
        }
        let r = slot.take()?;
        self.reasm_bytes = self.reasm_bytes.saturating_sub(r.held);
        let mut whole = Zeroizing::new(Vec::with_capacity(r.bytes));
        for p in r.parts.into_iter().flatten() {
            whole.extend_from_slice(&p);
        }
        self.counters.messages_reassembled += 1;
        Some((r.first_inner, whole))
    }

    /// Drops messages whose fragments did not all come in time.
    pub(super) fn expire_reassembly(&mut self, now: Instant) {
        if self.reasm_bytes == 0 {
            return;
        }
        for sa in self.sas.values_mut() {
            let Some(rare) = &mut sa.rare else {
                continue;
            };
            for slot in &mut rare.reasm {
                if slot
                    .as_ref()
                    .is_some_and(|r| now.saturating_duration_since(r.started) >= REASSEMBLY_TIMEOUT)
                {
                    if let Some(r) = slot.take() {
                        self.reasm_bytes = self.reasm_bytes.saturating_sub(r.held);
                        self.counters.dropped.fragment_timeout += 1;
                    }
                }
            }
            sa.tidy();
        }
    }

    /// Forgets what SA `sa` was putting together (it is removed).
    pub(super) fn forget_reassembly(&mut self, sa: &IkeSa) {
        for r in sa.rare.iter().flat_map(|r| r.reasm.iter().flatten()) {
            self.reasm_bytes = self.reasm_bytes.saturating_sub(r.held);
        }
    }
}
