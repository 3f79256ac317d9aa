//! The IKEv2 state machines (RFC 7296), free of I/O: datagrams and time go in, datagrams
//! to send and child SAs to install or remove come out ([`Event`]). The daemon
//! (`daemon.rs`) owns the sockets and the clock; tests drive two engines against each
//! other, or one against strongSwan through the daemon.
//!
//! What it does: IKE_SA_INIT and IKE_AUTH with a PSK or certificates (RFC 7427 digital
//! signatures; CERT, CERTREQ and SIGNATURE_HASH_ALGORITHMS), as initiator and responder;
//! INVALID_KE_PAYLOAD retry; cookies (§2.6) once half-open SAs pass a threshold; child
//! SAs onto a tunnel interface with traffic-selector narrowing; CREATE_CHILD_SA child
//! rekeys (with or without PFS, make-before-break) and IKE SA rekeys, either side, with
//! simultaneous rekeys resolved (`ike_rekey.rs`); IKE fragmentation (RFC 7383,
//! `fragment.rs`); INFORMATIONAL deletes and liveness checks; retransmission with
//! exponential backoff and a message-ID window of one; answers to retransmitted requests
//! from the stored response.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zeroize::Zeroizing;

use crate::config::{id_matches, EspProposal, IkeProposal, Peer, UniqueIds};
use crate::crypto::{self, ChildKeys, IkeKeys, IkeSuite, KeyShare, SkCipher};
use crate::pool::Pool;
use crate::transform::{self as tf, Dh, Encr, Integ, Prf};
use crate::wire::{
    self, exchange, flags, notify, proto, Find, Header, Id, Message, Payload, Proposal, Selector,
    Transform,
};

/// Retransmissions of a request before the SA is given up (1 + 5 sends: 1, 2, 4, 8, 16 s),
/// by default: a peer's `retransmit_tries`.
pub const MAX_RETRANSMITS: u32 = 5;
/// The first retransmission timeout; doubled each time.
pub const RETRANSMIT_BASE: Duration = Duration::from_secs(1);
/// How long a responder keeps a half-open SA (IKE_SA_INIT answered, no IKE_AUTH).
pub const HALF_OPEN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an IKE SA the peer rekeyed waits for the peer's Delete of it.
pub const REKEYED_TIMEOUT: Duration = Duration::from_secs(60);
/// Half-open SAs above which IKE_SA_INIT requests must carry a cookie (§2.6).
pub const DEFAULT_COOKIE_THRESHOLD: usize = 1024;
/// How long an initiating peer waits before trying again after a failure.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);
/// NAT traversal's port (RFC 3948): IKE moves there when a NAT is found.
pub const NATT_PORT: u16 = 4500;
/// Nonce length we send (§2.10: at least half the PRF's key size, and 16).
const NONCE_LEN: usize = 32;
/// How long a certificate chain's verification is remembered.
const CHAIN_CACHE_TTL: Duration = Duration::from_secs(300);
/// Chains remembered at most (the cache is emptied when full).
const CHAIN_CACHE_MAX: usize = 4096;
/// The hash algorithms of RFC 7427 §4 we sign and verify with: SHA2-256, SHA2-384,
/// SHA2-512, Identity (RFC 8420, Ed25519).
const SIGNATURE_HASHES: [u8; 8] = [0, 2, 0, 3, 0, 4, 0, 5];

/// The results of certificate chain verifications, by peer and chain (SHA-256 of the
/// chain's DER): a chain is checked once every [`CHAIN_CACHE_TTL`], not at every AUTH.
type ChainCache = HashMap<(String, [u8; 32]), (Instant, Result<(), String>)>;

/// An instant in 8 bytes where [`Instant`] takes 16 (issue 27: seven of them in each of a
/// million SAs and their children): nanoseconds (plus one, so that `Option<Stamp>` is 8
/// bytes too) since a process-wide epoch a day before its first use. Exact: it converts
/// back to the same [`Instant`] (an earlier one, which the engine never sees, would be
/// taken as the epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Stamp(std::num::NonZeroU64);

impl Stamp {
    fn epoch() -> Instant {
        static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *EPOCH.get_or_init(|| {
            let now = Instant::now();
            now.checked_sub(Duration::from_secs(86_400)).unwrap_or(now)
        })
    }

    fn of(t: Instant) -> Stamp {
        let ns = t.saturating_duration_since(Stamp::epoch()).as_nanos();
        // 584 years after the epoch before it saturates.
        let ns = u64::try_from(ns).unwrap_or(u64::MAX - 1);
        Stamp(std::num::NonZeroU64::MIN.saturating_add(ns))
    }

    fn instant(self) -> Instant {
        Stamp::epoch() + Duration::from_nanos(self.0.get() - 1)
    }
}

/// What the engine asks of the daemon.
#[derive(Debug)]
pub enum Event {
    /// Send a datagram (the IKE message, without any non-ESP marker).
    Send {
        local: SocketAddr,
        remote: SocketAddr,
        data: Vec<u8>,
    },
    /// A NAT keepalive (one 0xFF byte, RFC 3948 §2.3) from port 4500.
    Keepalive {
        local: SocketAddr,
        remote: SocketAddr,
    },
    /// Install a child SA (both directions).
    ChildUp(ChildSpec),
    /// Remove a child SA (both directions).
    ChildDown {
        peer: String,
        tunnel: String,
        spi_in: u32,
        spi_out: u32,
        /// Its outbound SA was chosen by destination ([`ChildSpec::by_destination`]): the
        /// peer's address and, with NAT-T, its UDP port (else 0), which tell it from
        /// another peer's SA of the same SPI.
        chosen: Option<(IpAddr, u16)>,
    },
}

/// A child SA's keys, one direction.
pub struct DirKeys {
    /// Encryption key, with the AEAD salt after it.
    pub encr: Zeroizing<Vec<u8>>,
    pub integ: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for DirKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DirKeys(..)")
    }
}

/// A child SA to install.
#[derive(Debug)]
pub struct ChildSpec {
    pub peer: String,
    pub tunnel: String,
    pub local: IpAddr,
    pub remote: IpAddr,
    pub spi_in: u32,
    pub spi_out: u32,
    pub encr: Encr,
    pub integ: Option<Integ>,
    pub esn: bool,
    pub key_in: DirKeys,
    pub key_out: DirKeys,
    pub local_ts: Vec<Selector>,
    pub remote_ts: Vec<Selector>,
    /// ESP goes in UDP (a NAT between, or encapsulation forced): our port and the peer's.
    pub udp_encap: Option<(u16, u16)>,
    /// Its peer has `remote = "any"` (one of many on its tunnel): its outbound SA is
    /// chosen by the destinations of `remote_ts`, and sends to `remote`, instead of
    /// being the tunnel's one transmit SA.
    pub by_destination: bool,
    /// Policy-based (`tunnel` empty): the interface whose SPD gets its policies, and their
    /// priority.
    pub interface: Option<String>,
    pub policy_priority: u32,
}

/// Counters (`show ike`, metrics).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Counters {
    pub received: u64,
    pub sent: u64,
    pub retransmitted: u64,
    /// Retransmitted requests answered from the stored response.
    pub answered_again: u64,
    pub established: u64,
    pub children_installed: u64,
    pub children_removed: u64,
    pub cookies_sent: u64,
    pub invalid_ke_sent: u64,
    pub invalid_ke_retried: u64,
    pub dpd_sent: u64,
    /// Established IKE SAs whose peer answered none of a request's retransmissions (a
    /// liveness check, most often): removed with their child SAs (also counted in
    /// `failed.timeout`).
    pub dead_peers: u64,
    pub deletes_received: u64,
    /// IKE SAs that found a NAT between the peers (or forced encapsulation) and moved to
    /// port 4500.
    pub nat_detected: u64,
    pub keepalives_sent: u64,
    /// Child SAs rekeyed (CREATE_CHILD_SA with REKEY_SA), as either side.
    pub child_rekeys: u64,
    /// IKE SAs rekeyed (CREATE_CHILD_SA with an IKE proposal, §2.18), as either side.
    pub ike_rekeys: u64,
    /// Simultaneous IKE SA rekeys resolved (§2.8.2), whichever side won.
    pub ike_rekey_collisions: u64,
    /// IKE fragmentation (RFC 7383): messages sent in fragments and the fragments sent,
    /// fragments received (authenticated) and messages put together from them.
    pub messages_fragmented: u64,
    pub fragments_sent: u64,
    pub fragments_received: u64,
    pub messages_reassembled: u64,
    /// Established IKE SAs (with their child SAs) removed for a new one of the same peer
    /// ([`UniqueIds`]: INITIAL_CONTACT, or `unique_ids = "replace"`).
    pub duplicates_removed: u64,
    /// Dropped or refused, by reason.
    pub dropped: DropCounters,
    pub failed: FailCounters,
}

/// Messages dropped, by reason.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DropCounters {
    pub truncated: u64,
    pub malformed: u64,
    pub version: u64,
    pub unsupported_critical: u64,
    pub unknown_spi: u64,
    pub integrity: u64,
    pub bad_message_id: u64,
    pub unexpected: u64,
    pub bad_cookie: u64,
    /// A fragment received twice.
    pub fragment_duplicate: u64,
    /// A fragment numbered 0 or past its total, a total above [`MAX_FRAGMENTS`], or
    /// smaller than the one of fragments already kept.
    pub fragment_out_of_range: u64,
    /// A fragment that would make its message, or all messages being put together,
    /// larger than allowed ([`MAX_REASSEMBLED`], [`MAX_REASSEMBLY_BYTES`]).
    pub fragment_too_big: u64,
    /// Messages whose fragments did not all come within [`REASSEMBLY_TIMEOUT`].
    pub fragment_timeout: u64,
}

/// Negotiations that failed, by reason.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FailCounters {
    pub no_proposal: u64,
    pub authentication: u64,
    pub unknown_peer: u64,
    pub ts_unacceptable: u64,
    /// Virtual IPs asked for and none of them could be given: none free in the peer's
    /// pools of the families asked for, or no pool of those families
    /// (INTERNAL_ADDRESS_FAILURE answered, no child SA).
    pub pool_exhausted: u64,
    /// A CP(CFG_REQUEST) with a known attribute of a wrong length (INVALID_SYNTAX
    /// answered, the IKE SA refused).
    pub cp_malformed: u64,
    pub timeout: u64,
    pub peer_refused: u64,
    pub crypto: u64,
    /// Child SAs negotiated that the data plane could not install ([`Engine::child_failed`]).
    pub install: u64,
    /// A new IKE SA refused (AUTHENTICATION_FAILED) because its peer has one already
    /// (`unique_ids = "keep"`, without INITIAL_CONTACT).
    pub unique_keep: u64,
}

/// An IKE SA's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Initiator: IKE_SA_INIT sent.
    InitSent,
    /// Initiator: IKE_AUTH sent.
    AuthSent,
    /// Responder: IKE_SA_INIT answered, waiting for IKE_AUTH.
    HalfOpen,
    Established,
    /// Rekeyed by the peer: its child SAs moved to the new IKE SA; gone at the peer's
    /// Delete (or after [`REKEYED_TIMEOUT`]).
    Rekeyed,
    /// Delete sent; gone once answered.
    Deleting,
}

/// What a new IKE SA does to its peer's established ones ([`UniqueIds`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Duplicates {
    /// Left as they are.
    Stay,
    /// Removed without a word (INITIAL_CONTACT: the peer forgot them).
    Drop,
    /// Deleted (INFORMATIONAL Delete).
    Delete,
    /// The new one refused if there are any.
    RefuseNew,
}

/// What one of our requests was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Asked {
    Init,
    Auth,
    Dpd,
    Delete,
    /// CREATE_CHILD_SA rekeying the child whose inbound SPI is this.
    Rekey(u32),
    /// INFORMATIONAL deleting our inbound SPI (the old child, once rekeyed).
    DeleteChild(u32),
    /// CREATE_CHILD_SA rekeying the IKE SA (§1.3.2).
    RekeyIke,
}

/// A child rekey we asked for: the new child's SPI and nonce, and the PFS key share.
struct Rekeying {
    new_spi_in: u32,
    ni: Vec<u8>,
    share: Option<KeyShare>,
}

/// Our rekey of an IKE SA (§1.3.2): the new SA's SPI (ours, the initiator's), our nonce
/// and key share.
struct IkeRekey {
    new_spi: u64,
    ni: Vec<u8>,
    share: KeyShare,
}

/// The peer's rekey of an IKE SA that we answered while ours was under way (§2.8.2): the
/// new SA it made (our SPI of it) and the lower nonce of its exchange, which decides
/// which of the two new SAs stays.
struct Collision {
    new_spi: u64,
    lower_nonce: Vec<u8>,
}

/// CREATE_CHILD_SA as responder: the exchange's nonces (the requester's, ours) and, with
/// PFS, the requester's KE.
struct Fresh {
    ni: Vec<u8>,
    nr: Vec<u8>,
    ke: Option<(u16, Vec<u8>)>,
}

impl Pending {
    /// How long after its last send it is sent again: doubled with each try.
    fn wait(&self) -> Duration {
        RETRANSMIT_BASE * (1u32 << self.tries.min(10))
    }
}

struct Pending {
    id: u32,
    asked: Asked,
    /// The request as sent: one datagram, or its fragments.
    datagrams: Vec<Vec<u8>>,
    sent: Instant,
    tries: u32,
}

/// What few IKE SAs hold, and each for seconds: boxed apart (issue 27: a million SAs
/// carry an empty pointer instead).
#[derive(Default)]
struct Rare {
    /// Our child rekey under way.
    rekeying: Option<Rekeying>,
    /// Our rekey of this IKE SA under way.
    ike_rekey: Option<IkeRekey>,
    /// The peer's rekey of this IKE SA, answered while ours was under way (§2.8.2).
    collision: Option<Collision>,
    /// Rekeyed: the IKE SA its child SAs moved to (our SPIs are never 0).
    moved_to: Option<std::num::NonZeroU64>,
    /// Fragmented messages being put together: a request, a response.
    reasm: [Option<Box<fragment::Reassembly>>; 2],
}

impl Rare {
    fn is_empty(&self) -> bool {
        self.rekeying.is_none()
            && self.ike_rekey.is_none()
            && self.collision.is_none()
            && self.moved_to.is_none()
            && self.reasm.iter().all(Option::is_none)
    }
}

/// A child's traffic selectors: one IPv4 selector (the usual tunnel, a subnet or a host
/// each side) in 13 bytes inline, others boxed exact-size (issue 27: no allocation, and
/// 24 bytes where a [`Selector`] takes 40, for each side of a million children).
#[derive(Debug)]
enum Selectors {
    V4 {
        protocol: u8,
        ports: [u16; 2],
        range: [u32; 2],
    },
    Other(Box<[Selector]>),
}

impl Selectors {
    fn new(v: &[Selector]) -> Selectors {
        match v {
            [Selector {
                protocol,
                start_port,
                end_port,
                start: IpAddr::V4(start),
                end: IpAddr::V4(end),
            }] => Selectors::V4 {
                protocol: *protocol,
                ports: [*start_port, *end_port],
                range: [u32::from(*start), u32::from(*end)],
            },
            _ => Selectors::Other(v.into()),
        }
    }

    fn to_vec(&self) -> Vec<Selector> {
        match self {
            Selectors::V4 {
                protocol,
                ports: [start_port, end_port],
                range: [start, end],
            } => vec![Selector {
                protocol: *protocol,
                start_port: *start_port,
                end_port: *end_port,
                start: std::net::Ipv4Addr::from(*start).into(),
                end: std::net::Ipv4Addr::from(*end).into(),
            }],
            Selectors::Other(v) => v.to_vec(),
        }
    }
}

/// The response to the peer's last request `id`, as sent, kept for the SA's life to
/// answer its retransmission with the same bytes (§2.1), exact-size: one SK message (the
/// usual case, with no vector around it) without its 28-byte IKE header, which is
/// rebuilt from the SA's SPIs, `id`, `head` (version, exchange, flags) and the length; or
/// its fragments (or a datagram whose header would not come back the same) whole, boxed.
enum LastResponse {
    One {
        id: u32,
        next: Sk,
        head: [u8; 3],
        body: Box<[u8]>,
    },
    Whole(Box<(u32, Datagrams)>),
}

/// Datagrams kept exact-size.
type Datagrams = Box<[Box<[u8]>]>;

/// The Next Payload of a [`LastResponse::One`]: SK, always. A type of one value, so that
/// its byte gives `Option<LastResponse>` the room to stay 24 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Sk {
    Sk = wire::ptype::SK,
}

impl LastResponse {
    /// `msgs` as sent on the SA of SPIs `spis`.
    fn new(id: u32, msgs: &[Vec<u8>], spis: (u64, u64)) -> LastResponse {
        if let [one] = msgs {
            if let (Some(&wire::ptype::SK), Some(&[v, x, f])) = (one.get(16), one.get(17..20)) {
                let head = [v, x, f];
                let body = &one[wire::HEADER_LEN.min(one.len())..];
                if one.get(..wire::HEADER_LEN)
                    == Some(&Self::header(spis, id, (Sk::Sk, head), body.len())[..])
                {
                    return LastResponse::One {
                        id,
                        next: Sk::Sk,
                        head,
                        body: body.into(),
                    };
                }
            }
        }
        LastResponse::Whole(Box::new((
            id,
            msgs.iter().map(|m| m.as_slice().into()).collect(),
        )))
    }

    /// The IKE header (§3.1) of an SK message of `body_len` bytes after it.
    fn header(
        (spi_i, spi_r): (u64, u64),
        id: u32,
        (next, head): (Sk, [u8; 3]),
        body_len: usize,
    ) -> [u8; wire::HEADER_LEN] {
        let mut h = [0u8; wire::HEADER_LEN];
        h[..8].copy_from_slice(&spi_i.to_be_bytes());
        h[8..16].copy_from_slice(&spi_r.to_be_bytes());
        h[16] = next as u8;
        h[17..20].copy_from_slice(&head);
        h[20..24].copy_from_slice(&id.to_be_bytes());
        let len = u32::try_from(wire::HEADER_LEN + body_len).unwrap_or(u32::MAX);
        h[24..].copy_from_slice(&len.to_be_bytes());
        h
    }

    fn id(&self) -> u32 {
        match self {
            LastResponse::One { id, .. } => *id,
            LastResponse::Whole(w) => w.0,
        }
    }

    /// Its datagrams, to send again, on the SA of SPIs `spis`.
    fn datagrams(&self, spis: (u64, u64)) -> Vec<Vec<u8>> {
        match self {
            LastResponse::One {
                id,
                next,
                head,
                body,
            } => {
                let mut d = Vec::with_capacity(wire::HEADER_LEN + body.len());
                d.extend_from_slice(&Self::header(spis, *id, (*next, *head), body.len()));
                d.extend_from_slice(body);
                vec![d]
            }
            LastResponse::Whole(w) => w.1.iter().map(|d| d.to_vec()).collect(),
        }
    }
}

/// What an IKE SA needs only until it is established (IKE_SA_INIT, IKE_AUTH): boxed
/// apart and dropped by [`IkeSa::settle`], so that an established SA does not carry its
/// room (issue 27: a million SAs at a few KiB each).
#[derive(Default)]
struct Setup {
    /// Initiator: our key share until the response.
    share: Option<KeyShare>,
    ni: Vec<u8>,
    nr: Vec<u8>,
    /// The IKE_SA_INIT request and response, as sent: AUTH signs them.
    init_req: Vec<u8>,
    init_resp: Vec<u8>,
    /// Initiator: the cookie to echo.
    cookie: Option<Vec<u8>>,
    /// The keys derived at IKE_SA_INIT (SK_d is kept apart, in [`IkeSa::sk_d`]).
    keys: Option<IkeKeys>,
}

/// A copy of SK_d, for [`IkeSa::sk_d`].
fn sk_d_of(keys: &IkeKeys) -> Zeroizing<Box<[u8]>> {
    Zeroizing::new(Box::from(&keys.sk_d[..]))
}

struct Child {
    spi_in: u32,
    spi_out: u32,
    esp: EspProposal,
    created: Stamp,
    local_ts: Selectors,
    remote_ts: Selectors,
    /// [`Event::ChildDown::chosen`], as installed (the IKE SA's peer address may move
    /// later, with a NAT's new mapping; the SA keeps the one it was installed with).
    chosen: Option<(IpAddr, u16)>,
}

/// One IKE SA.
struct IkeSa {
    peer: Option<Arc<Peer>>,
    /// We are its original initiator.
    initiator: bool,
    spi_i: u64,
    spi_r: u64,
    local: SocketAddr,
    remote: SocketAddr,
    state: State,
    suite: Option<IkeProposal>,
    /// What only IKE_SA_INIT and IKE_AUTH need; gone once established ([`IkeSa::settle`]).
    setup: Option<Box<Setup>>,
    /// SK_d (§2.14): derives child SA keys and the next IKE SA's SKEYSEED; empty until
    /// the keys are made.
    sk_d: Zeroizing<Box<[u8]>>,
    tx: Option<SkCipher>,
    rx: Option<SkCipher>,
    /// Our next request's message ID.
    next_id: u32,
    /// Boxed: a request is out for seconds in an SA's hours.
    pending: Option<Box<Pending>>,
    /// The peer's next request's message ID.
    peer_next: u32,
    /// The response to the peer's last request (for its retransmissions), as sent.
    last_response: Option<LastResponse>,
    children: Vec<Child>,
    /// Initiator: the SPI our IKE_AUTH offers for the child.
    child_spi: u32,
    created: Stamp,
    last_heard: Stamp,
    /// A NAT between (or encapsulation forced): IKE on port 4500, ESP in UDP.
    nat: bool,
    last_keepalive: Stamp,
    /// Rekeys under way, fragments being put together: [`IkeSa::tidy`] drops it once empty.
    rare: Option<Box<Rare>>,
    /// When we rekey it, and when it ends if not rekeyed (`ike_lifetime_s`).
    rekey_at: Option<Stamp>,
    expire_at: Option<Stamp>,
    /// Both sides announced IKEV2_FRAGMENTATION_SUPPORTED (RFC 7383).
    frag: bool,
    /// When [`Engine::tick`] looks at it next: its live entry in [`Engine::timers`].
    timer_at: Option<Stamp>,
}

impl IkeSa {
    /// An SA with nothing negotiated yet.
    fn new(
        peer: Option<Arc<Peer>>,
        initiator: bool,
        (spi_i, spi_r): (u64, u64),
        (local, remote): (SocketAddr, SocketAddr),
        state: State,
        now: Instant,
    ) -> Box<IkeSa> {
        Box::new(IkeSa {
            peer,
            initiator,
            spi_i,
            spi_r,
            local,
            remote,
            state,
            suite: None,
            setup: None,
            sk_d: Zeroizing::new(Box::default()),
            tx: None,
            rx: None,
            next_id: 0,
            pending: None,
            peer_next: 0,
            last_response: None,
            children: vec![],
            child_spi: 0,
            created: Stamp::of(now),
            last_heard: Stamp::of(now),
            nat: false,
            last_keepalive: Stamp::of(now),
            rare: None,
            rekey_at: None,
            expire_at: None,
            frag: false,
            timer_at: None,
        })
    }

    /// Established: when to rekey it and when it ends, from the peer's `ike_lifetime_s`.
    /// The side that initiated it rekeys at a random moment between 80 and 90 % of the
    /// lifetime, the other between 90 and 95 % (as strongSwan spreads its `rekey_time`
    /// by `rand_time`): both rarely ask at once, and a thousand SAs set up together are
    /// not rekeyed together.
    fn schedule_rekey(&mut self, now: Instant) {
        self.state = State::Established;
        let Some(life) = self.peer.as_ref().and_then(|p| p.ike_lifetime) else {
            return;
        };
        let (from, span) = if self.initiator {
            (800, 100)
        } else {
            (900, 50)
        };
        let permille = from + rand_u64() % span;
        self.rekey_at = Some(Stamp::of(now + life * permille as u32 / 1000));
        self.expire_at = Some(Stamp::of(now + life));
    }

    /// Authenticated and its first child made: what only the setup needed goes — the
    /// IKE_SA_INIT messages (AUTH signed them), the nonces (the first child's keys came
    /// from them), our key share, the cookie and the AUTH keys — so that an idle SA holds
    /// only what it uses (issue 27: a million SAs at a few KiB each).
    fn settle(&mut self) {
        self.setup = None;
    }

    /// Its [`Rare`] part, made empty if it has none yet.
    fn rare_mut(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// Drops its [`Rare`] part if nothing is left in it.
    fn tidy(&mut self) {
        if self.rare.as_deref().is_some_and(Rare::is_empty) {
            self.rare = None;
        }
    }

    /// Our child rekey is under way.
    fn rekeying(&self) -> bool {
        self.rare.as_ref().is_some_and(|r| r.rekeying.is_some())
    }

    /// Our rekey of this IKE SA is under way.
    fn ike_rekeying(&self) -> bool {
        self.rare.as_ref().is_some_and(|r| r.ike_rekey.is_some())
    }

    /// The peer's rekey of this IKE SA crossed ours ([`Rare::collision`]).
    fn collided(&self) -> bool {
        self.rare.as_ref().is_some_and(|r| r.collision.is_some())
    }

    fn take_rekeying(&mut self) -> Option<Rekeying> {
        let rk = self.rare.as_mut()?.rekeying.take();
        self.tidy();
        rk
    }

    fn take_ike_rekey(&mut self) -> Option<IkeRekey> {
        let rk = self.rare.as_mut()?.ike_rekey.take();
        self.tidy();
        rk
    }

    fn take_collision(&mut self) -> Option<Collision> {
        let c = self.rare.as_mut()?.collision.take();
        self.tidy();
        c
    }

    /// Rekeyed: the IKE SA its child SAs moved to.
    fn moved_to(&self) -> Option<u64> {
        self.rare.as_ref()?.moved_to.map(std::num::NonZeroU64::get)
    }

    /// Its [`Setup`], made empty if it has none yet.
    fn setup(&mut self) -> &mut Setup {
        self.setup.get_or_insert_with(Box::default)
    }

    /// When [`Engine::tick`] must look at it next: the earliest of what [`Engine::tick`]
    /// checks — its retransmission (while a request is out, nothing else), its half-open
    /// or rekeyed timeout, its rekey and end, its DPD, its NAT keepalive and its children's
    /// rekeys. `None`: nothing, until something happens to it.
    fn next_due(&self) -> Option<Instant> {
        let mut due: Option<Instant> = None;
        let mut at = |from: Instant, wait: Duration| {
            if let Some(t) = from.checked_add(wait) {
                due = Some(due.map_or(t, |d| d.min(t)));
            }
        };
        let peer = self.peer.as_deref();
        if let Some(p) = &self.pending {
            at(p.sent, p.wait());
        } else {
            match self.state {
                State::HalfOpen => at(self.created.instant(), HALF_OPEN_TIMEOUT),
                State::Rekeyed => {
                    if let Some(t) = self.expire_at {
                        at(t.instant(), Duration::ZERO);
                    }
                }
                State::Established => {
                    for t in [self.expire_at, self.rekey_at].into_iter().flatten() {
                        at(t.instant(), Duration::ZERO);
                    }
                    if let Some(d) = peer.and_then(|p| p.dpd) {
                        at(self.last_heard.instant(), d);
                    }
                }
                _ => {}
            }
        }
        if let Some(every) = peer.map(|p| p.keepalive) {
            if self.nat
                && self.state == State::Established
                && self.local.port() == NATT_PORT
                && !every.is_zero()
            {
                at(self.last_keepalive.instant(), every);
            }
        }
        if let Some(after) = self.child_rekey_age() {
            for c in &self.children {
                at(c.created.instant(), after);
            }
        }
        due
    }

    /// The age at which its children are rekeyed, if they may be now (established, no
    /// exchange or rekey under way): the original initiator at 90 % of the peer's
    /// `child_lifetime_s`, the responder at 95 % (so the two rarely collide).
    fn child_rekey_age(&self) -> Option<Duration> {
        let life = self.peer.as_ref().and_then(|p| p.child_lifetime)?;
        if self.state != State::Established
            || self.pending.is_some()
            || self.rekeying()
            || self.collided()
        {
            return None;
        }
        Some(if self.initiator {
            life * 9 / 10
        } else {
            life * 19 / 20
        })
    }

    fn header(&self, exchange: u8, id: u32, response: bool) -> Header {
        let mut f = 0;
        if self.initiator {
            f |= flags::INITIATOR;
        }
        if response {
            f |= flags::RESPONSE;
        }
        Header {
            spi_i: self.spi_i,
            spi_r: self.spi_r,
            next: 0,
            version: 0x20,
            exchange,
            flags: f,
            message_id: id,
            length: 0,
        }
    }

    fn peer_name(&self) -> &str {
        self.peer.as_ref().map_or("?", |p| p.name.as_str())
    }
}

/// A row of `show ike sa`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SaInfo {
    pub peer: String,
    pub state: State,
    pub initiator: bool,
    pub spi_i: String,
    pub spi_r: String,
    pub local: String,
    pub remote: String,
    pub remote_id: String,
    pub proposal: String,
    pub age_s: u64,
    /// The virtual IPs leased to the peer (CP), if any: `10.200.0.1, fd00:200::1` with both
    /// families.
    pub virtual_ip: Option<String>,
    pub children: Vec<ChildInfo>,
}

/// A row of `show ike child-sa`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ChildInfo {
    pub peer: String,
    pub spi_in: String,
    pub spi_out: String,
    pub proposal: String,
    pub local_ts: Vec<String>,
    pub remote_ts: Vec<String>,
    pub age_s: u64,
}

/// The engine: every IKE SA, by our SPI.
pub struct Engine {
    peers: Vec<Arc<Peer>>,
    /// The peers by identity and by address ([`PeerIndex`]).
    index: PeerIndex,
    /// Boxed: the table's slots stay small (a million SAs, issue 27), and an SA does not
    /// move when the table grows.
    sas: HashMap<u64, Box<IkeSa>>,
    /// Responder: (peer address, initiator's SPI) → our SPI, while half-open.
    by_init: HashMap<(SocketAddr, u64), u64>,
    /// The SAs of each peer (those [`IkeSa::peer`] names), by a hash of the peer's name
    /// ([`PeerSas`]): what INITIAL_CONTACT, `unique_ids`, `initiate`, `terminate`, a config
    /// change and the tick look at, without a pass over every SA of the engine (on a hub
    /// of 10,000 peers each of those was O(SAs), the tick's every 100 ms). Kept by
    /// [`Engine::insert_sa`], [`Engine::remove_sa`] and the responder's IKE_AUTH, the only
    /// places an SA gets or loses its peer.
    by_peer: HashMap<u64, PeerSas>,
    /// Hashes peer names for [`Engine::by_peer`].
    name_hash: std::hash::RandomState,
    half_open: usize,
    cookie_threshold: usize,
    cookie_secret: [u8; 32],
    /// Initiating peers without an SA: when to try next.
    retry_at: HashMap<String, Instant>,
    pub counters: Counters,
    /// Our inbound child SPIs in use.
    child_spis: std::collections::HashSet<u32>,
    /// The UDP port IKE is sent to (500; tests use others).
    port: u16,
    /// Certificate chains verified lately.
    chain_cache: ChainCache,
    /// Bytes held by every [`IkeSa::reasm`].
    reasm_bytes: usize,
    /// When each SA is next due for a look (retransmission, timeouts, rekeys, DPD,
    /// keepalives), earliest first: [`Engine::tick`] looks at the SAs due, not at every
    /// SA (issue 27: at a million SAs a scan every tick took the responder's core). An
    /// entry is live while it matches its SA's [`IkeSa::timer_at`]; others are dropped
    /// when they come up.
    timers: std::collections::BinaryHeap<std::cmp::Reverse<(Stamp, u64)>>,
    /// The SA the message being handled was for: looked at on the next tick.
    touched: Option<u64>,
    /// Virtual IP pools, by peer name (peers with `pools`).
    pools: HashMap<String, Pool>,
    /// The virtual IPs leased (responder, CP), by IKE SA: released with the SA, moved
    /// with its children to the SA that rekeys it. (Here rather than in [`IkeSa`]: SAs
    /// without one pay nothing.)
    vips: HashMap<u64, Vips>,
    /// Tests: as initiator, ask for a virtual IP in IKE_AUTH: a CP(CFG_REQUEST) with
    /// this INTERNAL_IP4_ADDRESS value.
    ask_vip: Option<Vec<u8>>,
    /// Tests: the same with this INTERNAL_IP6_ADDRESS value (beside the IPv4 one, if
    /// any).
    ask_vip6: Option<Vec<u8>>,
}

/// The engine's peers (their places in its list, in order) by what a message is looked
/// up with, so that a hub of many peers finds a message's peer without passing over all of
/// them: by local address and remote address (or `any`), and by the key of their
/// `remote_id` ([`crate::config::id_key`]: IKE_AUTH). Built when the peers are set.
#[derive(Default)]
struct PeerIndex {
    by_remote_id: HashMap<(u8, Vec<u8>), Vec<usize>>,
    by_local: HashMap<IpAddr, LocalPeers>,
}

/// The peers of one local address: `remote = "any"`, and by remote address.
#[derive(Default)]
struct LocalPeers {
    any: Vec<usize>,
    /// What IKE_SA_INIT needs of the `any` peers, gathered once (a hub of thousands of
    /// road-warrior peers passed over all of them several times per request).
    any_init: InitSummary,
    by_remote: HashMap<IpAddr, Vec<usize>>,
}

/// What answering an IKE_SA_INIT needs of the peers it may be for, gathered without
/// passing over each again.
#[derive(Clone, Default)]
struct InitSummary {
    /// Their IKE proposals, each once, in the order a pass over the peers (config order)
    /// and their proposals meets them first, with the place of the peer it was met in.
    ike: Vec<(usize, IkeProposal)>,
    /// Whether any of them forces UDP encapsulation.
    encap: bool,
    /// Whether any of them authenticates with certificates.
    cert: bool,
    /// The hashes of their CAs' keys (20 bytes each, each once): our CERTREQ.
    ca_hashes: Vec<u8>,
}

impl InitSummary {
    /// The summary of `peers[k]` for each `k` of `places` (ascending).
    fn of(peers: &[Arc<Peer>], places: impl Iterator<Item = usize>) -> InitSummary {
        let mut s = InitSummary::default();
        let mut seen: HashSet<IkeProposal> = HashSet::new();
        let mut cas: HashSet<&[u8]> = HashSet::new();
        for i in places {
            let Some(p) = peers.get(i) else { continue };
            for ours in &p.ike {
                if seen.insert(*ours) {
                    s.ike.push((i, *ours));
                }
            }
            s.encap |= p.encap;
            if let Some(c) = &p.cert {
                s.cert = true;
                for h in c.ca_hashes.chunks(20) {
                    if cas.insert(h) {
                        s.ca_hashes.extend_from_slice(h);
                    }
                }
            }
        }
        s
    }

    /// This summary (of the `any` peers) with the peers `theirs` (ascending places) of
    /// one remote address added: proposals in the order of a pass over both merged.
    fn with(&self, peers: &[Arc<Peer>], theirs: &[usize]) -> InitSummary {
        let t = InitSummary::of(peers, theirs.iter().copied());
        let mut s = InitSummary {
            ike: Vec::with_capacity(self.ike.len() + t.ike.len()),
            encap: self.encap || t.encap,
            cert: self.cert || t.cert,
            ca_hashes: self.ca_hashes.clone(),
        };
        let (mut a, mut b) = (self.ike.iter().peekable(), t.ike.iter().peekable());
        let mut seen: HashSet<IkeProposal> = HashSet::new();
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) if x.0 < y.0 => a.next(),
                (_, Some(_)) => b.next(),
                (Some(_), None) => a.next(),
                (None, None) => break,
            };
            if let Some(&(i, ours)) = next {
                if seen.insert(ours) {
                    s.ike.push((i, ours));
                }
            }
        }
        for h in t.ca_hashes.chunks(20) {
            if !s.ca_hashes.chunks(20).any(|x| x == h) {
                s.ca_hashes.extend_from_slice(h);
            }
        }
        s
    }
}

impl PeerIndex {
    fn new(peers: &[Arc<Peer>]) -> PeerIndex {
        let mut x = PeerIndex::default();
        for (i, p) in peers.iter().enumerate() {
            if let Some(k) = crate::config::id_key(&p.remote_id) {
                x.by_remote_id.entry(k).or_default().push(i);
            }
            let at = x.by_local.entry(p.local).or_default();
            match p.remote {
                None => at.any.push(i),
                Some(r) => at.by_remote.entry(r).or_default().push(i),
            }
        }
        for at in x.by_local.values_mut() {
            at.any_init = InitSummary::of(peers, at.any.iter().copied());
        }
        x
    }

    /// What IKE_SA_INIT needs of the peers a message to `local` from `remote` may be for
    /// ([`Engine::candidates`]): borrowed when no peer names that remote address.
    fn init_summary(
        &self,
        peers: &[Arc<Peer>],
        local: &SocketAddr,
        remote: &SocketAddr,
    ) -> std::borrow::Cow<'_, InitSummary> {
        use std::borrow::Cow;
        let Some(at) = self.by_local.get(&local.ip()) else {
            return Cow::Owned(InitSummary::default());
        };
        match at.by_remote.get(&remote.ip()) {
            Some(theirs) if !theirs.is_empty() => Cow::Owned(at.any_init.with(peers, theirs)),
            _ => Cow::Borrowed(&at.any_init),
        }
    }
}

/// Two ascending lists of places merged into one, ascending (config order).
#[derive(Clone)]
struct Merged<'a>(&'a [usize], &'a [usize]);

impl Iterator for Merged<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        let (a, b) = (self.0.split_first(), self.1.split_first());
        match (a, b) {
            (Some((&x, rest)), Some((&y, _))) if x < y => {
                self.0 = rest;
                Some(x)
            }
            (_, Some((&y, rest))) => {
                self.1 = rest;
                Some(y)
            }
            (Some((&x, rest)), None) => {
                self.0 = rest;
                Some(x)
            }
            (None, None) => None,
        }
    }
}

/// The SAs of one peer name (of one hash of it) in [`Engine::by_peer`]: most peers have one
/// (a site-to-site peer), kept inline; a peer of many SAs (a `remote = "any"` peer of
/// road warriors) gets a set. 24 bytes a peer in the table with one SA.
#[derive(Debug, PartialEq, Eq)]
enum PeerSas {
    One(u64),
    // Boxed: the set (48 bytes with its hasher) would make every peer's entry that size;
    // the extra allocation is only for peers of more than one SA.
    #[allow(clippy::box_collection)]
    Many(Box<HashSet<u64>>),
}

impl PeerSas {
    fn insert(&mut self, spi: u64) {
        match self {
            PeerSas::One(k) if *k == spi => {}
            PeerSas::One(k) => *self = PeerSas::Many(Box::new(HashSet::from([*k, spi]))),
            PeerSas::Many(set) => {
                set.insert(spi);
            }
        }
    }

    /// Takes `spi` out; true when none is left.
    fn remove(&mut self, spi: u64) -> bool {
        match self {
            PeerSas::One(k) => *k == spi,
            PeerSas::Many(set) => {
                set.remove(&spi);
                if set.len() > 1 {
                    return false;
                }
                match set.iter().next().copied() {
                    None => true,
                    Some(k) => {
                        *self = PeerSas::One(k);
                        false
                    }
                }
            }
        }
    }

    fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        let (one, many) = match self {
            PeerSas::One(k) => (Some(*k), None),
            PeerSas::Many(set) => (None, Some(set.iter().copied())),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }
}

/// The virtual IPs leased to an IKE SA: one of each family asked for (and in the pools).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Vips {
    v4: Option<std::net::Ipv4Addr>,
    v6: Option<std::net::Ipv6Addr>,
}

impl Vips {
    fn addrs(&self) -> impl Iterator<Item = IpAddr> {
        self.v4
            .map(IpAddr::from)
            .into_iter()
            .chain(self.v6.map(IpAddr::from))
    }

    /// `10.200.0.1`, `fd00:200::1` or `10.200.0.1, fd00:200::1`.
    fn text(&self) -> String {
        self.addrs()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The CP(CFG_REPLY) giving an SA its virtual IPs: INTERNAL_IP4_ADDRESS (4 bytes),
/// INTERNAL_IP6_ADDRESS (16 bytes and the prefix length: 128, one address, §3.15.1).
fn cfg_reply(v: &Vips) -> Payload {
    let v4 = v.v4.map(|a| wire::CfgAttr {
        kind: wire::cfg::INTERNAL_IP4_ADDRESS,
        value: a.octets().to_vec(),
    });
    let v6 = v.v6.map(|a| wire::CfgAttr {
        kind: wire::cfg::INTERNAL_IP6_ADDRESS,
        value: a.octets().into_iter().chain([128]).collect(),
    });
    Payload::Cp {
        kind: wire::cfg::REPLY,
        attrs: v4.into_iter().chain(v6).collect(),
    }
}

/// The pools of the peers that have some.
fn pools_of(peers: &[Arc<Peer>]) -> HashMap<String, Pool> {
    peers
        .iter()
        .filter(|p| !p.pools.is_empty())
        .map(|p| (p.name.clone(), Pool::new(&p.pools)))
        .collect()
}

/// A peer's name for logs.
fn sa_name(sas: &HashMap<u64, Box<IkeSa>>, spi: u64) -> String {
    sas.get(&spi).map_or("?", |s| s.peer_name()).to_string()
}

fn rand_u64() -> u64 {
    let mut b = [0u8; 8];
    let _ = crypto::random_bytes(&mut b);
    u64::from_be_bytes(b)
}

fn rand_vec(n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    let _ = crypto::random_bytes(&mut v);
    v
}

/// A NAT_DETECTION_*_IP value (§2.23): SHA-1 of the SPIs, an address and a port.
fn nat_hash(spi_i: u64, spi_r: u64, addr: &SocketAddr) -> Vec<u8> {
    use aws_lc_rs::digest;
    let mut c = digest::Context::new(&digest::SHA1_FOR_LEGACY_USE_ONLY);
    c.update(&spi_i.to_be_bytes());
    c.update(&spi_r.to_be_bytes());
    match addr.ip() {
        IpAddr::V4(a) => c.update(&a.octets()),
        IpAddr::V6(a) => c.update(&a.octets()),
    }
    c.update(&addr.port().to_be_bytes());
    c.finish().as_ref().to_vec()
}

/// The NAT detection notifications of a message from `local` to `remote`; with `fake`,
/// a source hash that cannot match, so that the peer finds a NAT (forced encapsulation).
fn nat_payloads(
    spi_i: u64,
    spi_r: u64,
    local: &SocketAddr,
    remote: &SocketAddr,
    fake: bool,
) -> [Payload; 2] {
    let src = if fake {
        rand_vec(20)
    } else {
        nat_hash(spi_i, spi_r, local)
    };
    [
        Payload::notify(notify::NAT_DETECTION_SOURCE_IP, src),
        Payload::notify(
            notify::NAT_DETECTION_DESTINATION_IP,
            nat_hash(spi_i, spi_r, remote),
        ),
    ]
}

/// Whether the NAT detection notifications of a message from `from` to `to` say a NAT
/// is between (`None`: it had none).
fn nat_found(
    ps: &[Payload],
    spi_i: u64,
    spi_r: u64,
    from: &SocketAddr,
    to: &SocketAddr,
) -> Option<bool> {
    let dst = wire::find_notify(ps, notify::NAT_DETECTION_DESTINATION_IP)?;
    let src_ok = ps.iter().any(|p| {
        matches!(p, Payload::Notify(n) if n.kind == notify::NAT_DETECTION_SOURCE_IP && n.data == nat_hash(spi_i, spi_r, from))
    });
    Some(!src_ok || dst.data != nat_hash(spi_i, spi_r, to))
}

fn suite_of(p: &IkeProposal) -> IkeSuite {
    IkeSuite {
        encr: p.encr,
        integ: p.integ,
        prf: p.prf,
        dh: p.dh,
    }
}

fn encr_transform(e: Encr) -> Transform {
    let (id, key_bits) = e.id();
    Transform {
        kind: tf::ENCR,
        id,
        key_bits,
        unknown_attribute: false,
    }
}

fn plain(kind: u8, id: u16) -> Transform {
    Transform {
        kind,
        id,
        key_bits: None,
        unknown_attribute: false,
    }
}

/// The SA payload proposal for an IKE proposal.
fn ike_wire(number: u8, p: &IkeProposal, spi: Vec<u8>) -> Proposal {
    let mut t = vec![encr_transform(p.encr), plain(tf::PRF, p.prf.id())];
    if let Some(i) = p.integ {
        t.push(plain(tf::INTEG, i.id()));
    }
    t.push(plain(tf::DH, p.dh.id()));
    Proposal {
        number,
        protocol: proto::IKE,
        spi,
        transforms: t,
    }
}

/// The SA payload proposal for an ESP proposal (`pfs`: with its DH group).
fn esp_wire(number: u8, p: &EspProposal, spi: u32, pfs: bool) -> Proposal {
    let mut t = vec![encr_transform(p.encr)];
    if let Some(i) = p.integ {
        t.push(plain(tf::INTEG, i.id()));
    }
    if let (true, Some(d)) = (pfs, p.dh) {
        t.push(plain(tf::DH, d.id()));
    }
    t.push(plain(tf::ESN, u16::from(p.esn)));
    Proposal {
        number,
        protocol: proto::ESP,
        spi: spi.to_be_bytes().to_vec(),
        transforms: t,
    }
}

fn has(p: &Proposal, kind: u8, id: u16, key_bits: Option<u16>) -> bool {
    p.transforms
        .iter()
        .any(|t| t.kind == kind && t.id == id && t.key_bits == key_bits && !t.unknown_attribute)
}

fn kinds(p: &Proposal, kind: u8) -> bool {
    p.transforms.iter().any(|t| t.kind == kind)
}

/// Does the received IKE proposal allow ours?
fn ike_matches(p: &Proposal, ours: &IkeProposal) -> bool {
    let (eid, ebits) = ours.encr.id();
    p.protocol == proto::IKE
        && has(p, tf::ENCR, eid, ebits)
        && has(p, tf::PRF, ours.prf.id(), None)
        && match ours.integ {
            Some(i) => has(p, tf::INTEG, i.id(), None),
            // An AEAD: no integrity transform, or NONE (0).
            None => !kinds(p, tf::INTEG) || has(p, tf::INTEG, 0, None),
        }
        && has(p, tf::DH, ours.dh.id(), None)
}

/// Does the received ESP proposal allow ours (`pfs`: a DH transform must match too)?
fn esp_matches(p: &Proposal, ours: &EspProposal, pfs: Option<Dh>) -> bool {
    let (eid, ebits) = ours.encr.id();
    p.protocol == proto::ESP
        && p.spi.len() == 4
        && has(p, tf::ENCR, eid, ebits)
        && match ours.integ {
            Some(i) => has(p, tf::INTEG, i.id(), None),
            None => !kinds(p, tf::INTEG) || has(p, tf::INTEG, 0, None),
        }
        && (has(p, tf::ESN, u16::from(ours.esn), None) || (!ours.esn && !kinds(p, tf::ESN)))
        && match pfs {
            Some(d) => has(p, tf::DH, d.id(), None),
            None => !kinds(p, tf::DH) || has(p, tf::DH, 0, None),
        }
}

/// Narrows selectors: each of `theirs` intersected with each of `ours`.
pub fn narrow(theirs: &[Selector], ours: &[Selector]) -> Vec<Selector> {
    let mut out = Vec::new();
    for t in theirs {
        for o in ours {
            if t.start.is_ipv4() != o.start.is_ipv4() {
                continue;
            }
            let protocol = match (t.protocol, o.protocol) {
                (0, p) | (p, 0) => p,
                (a, b) if a == b => a,
                _ => continue,
            };
            let start_port = t.start_port.max(o.start_port);
            let end_port = t.end_port.min(o.end_port);
            let start = t.start.max(o.start);
            let end = t.end.min(o.end);
            if start_port > end_port || start > end {
                continue;
            }
            let s = Selector {
                protocol,
                start_port,
                end_port,
                start,
                end,
            };
            if !out.contains(&s) {
                out.push(s);
            }
        }
    }
    out
}

/// How `show` writes a selector: `10.0.0.0-10.0.255.255` or a prefix-free range, with
/// protocol and ports when narrowed.
pub fn selector_text(s: &Selector) -> String {
    let mut t = if s.start == s.end {
        s.start.to_string()
    } else {
        format!("{}-{}", s.start, s.end)
    };
    if s.protocol != 0 {
        t.push_str(&format!(" proto {}", s.protocol));
    }
    if (s.start_port, s.end_port) != (0, 65535) {
        t.push_str(&format!(" ports {}-{}", s.start_port, s.end_port));
    }
    t
}

fn ike_text(p: &IkeProposal) -> String {
    let mut s = p.encr.esp_name();
    if let Some(i) = p.integ {
        s.push_str(&format!("/{i:?}"));
    }
    format!("{s}/{:?}/{:?}", p.prf, p.dh)
}

fn esp_text(p: &EspProposal) -> String {
    let mut s = p.encr.esp_name();
    if let Some(i) = p.integ.and_then(Integ::esp_name) {
        s.push('/');
        s.push_str(i);
    }
    if p.esn {
        s.push_str("/esn");
    }
    s
}

impl Engine {
    pub fn new(peers: Vec<Peer>) -> Engine {
        let mut secret = [0u8; 32];
        let _ = crypto::random_bytes(&mut secret);
        let peers: Vec<Arc<Peer>> = peers.into_iter().map(Arc::new).collect();
        Engine {
            pools: pools_of(&peers),
            index: PeerIndex::new(&peers),
            vips: HashMap::new(),
            ask_vip: None,
            ask_vip6: None,
            peers,
            sas: HashMap::new(),
            by_init: HashMap::new(),
            by_peer: HashMap::new(),
            name_hash: std::hash::RandomState::new(),
            half_open: 0,
            cookie_threshold: DEFAULT_COOKIE_THRESHOLD,
            cookie_secret: secret,
            retry_at: HashMap::new(),
            counters: Counters::default(),
            child_spis: Default::default(),
            port: 500,
            chain_cache: HashMap::new(),
            reasm_bytes: 0,
            timers: std::collections::BinaryHeap::new(),
            touched: None,
        }
    }

    /// The UDP port requests are sent to and from (500 unless a test says otherwise).
    pub fn set_port(&mut self, port: u16) {
        self.port = port;
    }

    /// Half-open SAs above which cookies are asked for.
    pub fn set_cookie_threshold(&mut self, n: usize) {
        self.cookie_threshold = n;
    }

    /// The local addresses IKE must listen on.
    pub fn local_addrs(&self) -> Vec<IpAddr> {
        let mut v: Vec<IpAddr> = self.peers.iter().map(|p| p.local).collect();
        v.sort();
        v.dedup();
        v
    }

    pub fn half_open(&self) -> usize {
        self.half_open
    }

    pub fn established(&self) -> usize {
        self.sas
            .values()
            .filter(|s| s.state == State::Established)
            .count()
    }

    /// Virtual IPs leased, all pools together.
    pub fn leases(&self) -> usize {
        self.pools.values().map(|p| p.in_use() as usize).sum()
    }

    /// Child SAs of established IKE SAs (one pass over the SAs, no allocation).
    pub fn child_sas(&self) -> usize {
        self.sas
            .values()
            .filter(|s| s.state == State::Established)
            .map(|s| s.children.len())
            .sum()
    }

    /// Makes [`Engine::tick`] look at SA `spi` at `at` (or before, if it is due earlier).
    fn arm(&mut self, spi: u64, at: Instant) {
        if let Some(sa) = self.sas.get_mut(&spi) {
            let at = Stamp::of(at);
            if sa.timer_at.is_none_or(|t| at < t) {
                sa.timer_at = Some(at);
                self.timers.push(std::cmp::Reverse((at, spi)));
            }
        }
    }

    /// A new IKE SA, looked at on the next tick.
    fn insert_sa(&mut self, spi: u64, sa: Box<IkeSa>, now: Instant) {
        if let Some(old) = self.sas.remove(&spi) {
            if let Some(p) = &old.peer {
                self.unindex_peer(spi, &p.name);
            }
        }
        if let Some(p) = &sa.peer {
            self.index_peer(spi, &p.name);
        }
        self.sas.insert(spi, sa);
        self.arm(spi, now);
    }

    /// SA `spi` counts as peer `name`'s.
    fn index_peer(&mut self, spi: u64, name: &str) {
        let h = self.name_hash.hash_one(name);
        match self.by_peer.entry(h) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(PeerSas::One(spi));
            }
            std::collections::hash_map::Entry::Occupied(mut o) => o.get_mut().insert(spi),
        }
    }

    /// SA `spi` no longer counts as peer `name`'s.
    fn unindex_peer(&mut self, spi: u64, name: &str) {
        let h = self.name_hash.hash_one(name);
        if let Some(sas) = self.by_peer.get_mut(&h) {
            if sas.remove(spi) {
                self.by_peer.remove(&h);
            }
        }
    }

    /// The SAs of peer `name` (any state), by our SPI.
    fn sas_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = (u64, &'a IkeSa)> + 'a {
        self.by_peer
            .get(&self.name_hash.hash_one(name))
            .into_iter()
            .flat_map(PeerSas::iter)
            .filter_map(|k| Some((k, &**self.sas.get(&k)?)))
            // Another name of the same hash shares the entry.
            .filter(move |(_, s)| s.peer.as_ref().is_some_and(|p| p.name == name))
    }

    /// Replaces the peers: SAs of peers gone or changed are deleted (their children
    /// removed); new initiating peers start at the next tick.
    pub fn set_peers(&mut self, peers: Vec<Peer>, now: Instant, out: &mut Vec<Event>) {
        let old = std::mem::take(&mut self.peers);
        self.peers = peers.into_iter().map(Arc::new).collect();
        self.index = PeerIndex::new(&self.peers);
        // The CAs and CRLs may have changed: chains are verified afresh.
        self.chain_cache.clear();
        // By name, so that a config of many peers is not compared pair by pair.
        let old: HashMap<&str, &Arc<Peer>> = old.iter().map(|o| (o.name.as_str(), o)).collect();
        let kept: HashSet<String> = self
            .peers
            .iter()
            .filter(|p| {
                old.get(p.name.as_str())
                    .is_some_and(|o| format!("{o:?}") == format!("{p:?}"))
            })
            .map(|p| p.name.clone())
            .collect();
        let gone: Vec<u64> = self
            .by_peer
            .values()
            .flat_map(PeerSas::iter)
            .filter(|k| {
                self.sas
                    .get(k)
                    .and_then(|s| s.peer.as_ref())
                    .is_some_and(|p| !kept.contains(&p.name))
            })
            .collect();
        // Pools of peers kept stay as they are (their leases with them); the others start
        // afresh, and the SAs of those peers, deleted, give nothing back to them.
        let mut pools = pools_of(&self.peers);
        for (name, pool) in pools.iter_mut() {
            if let Some(old) = self.pools.remove(name).filter(|_| kept.contains(name)) {
                *pool = old;
            }
        }
        self.pools = pools;
        for spi in gone {
            self.vips.remove(&spi);
            self.delete_ike(spi, now, out);
        }
        self.retry_at.retain(|n, _| kept.contains(n));
    }

    /// Starts (or restarts) the IKE SA of an initiating peer.
    pub fn initiate(
        &mut self,
        name: &str,
        now: Instant,
        out: &mut Vec<Event>,
    ) -> Result<(), String> {
        let peer = self
            .peers
            .iter()
            .find(|p| p.name == name)
            .cloned()
            .ok_or_else(|| format!("no peer `{name}`"))?;
        let Some(remote) = peer.remote else {
            return Err(format!(
                "peer `{name}` has remote = any: it can only respond"
            ));
        };
        if self.sas_of(name).any(|(_, s)| s.state != State::Deleting) {
            return Ok(());
        }
        let first = peer.ike[0];
        let share = KeyShare::generate(first.dh).map_err(|e| format!("key share: {e}"))?;
        let mut spi = rand_u64();
        while spi == 0 || self.sas.contains_key(&spi) {
            spi = rand_u64();
        }
        let mut sa = IkeSa::new(
            Some(peer.clone()),
            true,
            (spi, 0),
            (
                SocketAddr::new(peer.local, self.port),
                SocketAddr::new(remote, self.port),
            ),
            State::InitSent,
            now,
        );
        let setup = sa.setup();
        setup.share = Some(share);
        setup.ni = rand_vec(NONCE_LEN);
        self.insert_sa(spi, sa, now);
        self.retry_at.remove(name);
        self.send_init(spi, now, out);
        tracing::info!(peer = name, "IKE: initiating");
        Ok(())
    }

    /// Deletes a peer's IKE SAs (and so their children).
    pub fn terminate(
        &mut self,
        name: &str,
        now: Instant,
        out: &mut Vec<Event>,
    ) -> Result<usize, String> {
        if !self.peers.iter().any(|p| p.name == name) {
            return Err(format!("no peer `{name}`"));
        }
        let spis: Vec<u64> = self.sas_of(name).map(|(k, _)| k).collect();
        let n = spis.len();
        for spi in spis {
            self.delete_ike(spi, now, out);
        }
        // Not brought back up by the next tick.
        self.retry_at
            .insert(name.to_string(), now + Duration::from_secs(365 * 86400));
        Ok(n)
    }

    /// The IKE SAs, for `show ike sa`, by peer and SPI.
    pub fn sa_info(&self, now: Instant) -> Vec<SaInfo> {
        self.sa_page(now, None, 0, usize::MAX).0
    }

    /// A page of the IKE SAs of `peer` (all: `None`), in (peer, initiator's SPI) order:
    /// `limit` of them after the first `skip`; and how many there are in all. Only the
    /// page is written out (a million SAs make a gigabyte of text).
    pub fn sa_page(
        &self,
        now: Instant,
        peer: Option<&str>,
        skip: usize,
        limit: usize,
    ) -> (Vec<SaInfo>, usize) {
        let mut keys: Vec<(&str, u64, u64)> = self
            .sas
            .iter()
            .filter(|(_, s)| peer.is_none_or(|p| s.peer_name() == p))
            .map(|(k, s)| (s.peer_name(), s.spi_i, *k))
            .collect();
        let total = keys.len();
        keys.sort_unstable();
        let v = keys
            .into_iter()
            .skip(skip)
            .take(limit)
            .filter_map(|(_, _, k)| Some(self.info_of(k, self.sas.get(&k)?, now)))
            .collect();
        (v, total)
    }

    /// What `show ike sa` says of SA `spi`.
    fn info_of(&self, spi: u64, s: &IkeSa, now: Instant) -> SaInfo {
        SaInfo {
            peer: s.peer_name().to_string(),
            state: s.state,
            initiator: s.initiator,
            spi_i: format!("{:016x}", s.spi_i),
            spi_r: format!("{:016x}", s.spi_r),
            local: s.local.to_string(),
            remote: s.remote.to_string(),
            remote_id: s
                .peer
                .as_ref()
                .map_or(String::new(), |p| p.remote_id.text()),
            proposal: s.suite.as_ref().map_or(String::new(), ike_text),
            age_s: now.saturating_duration_since(s.created.instant()).as_secs(),
            virtual_ip: self.vips.get(&spi).map(Vips::text),
            children: s
                .children
                .iter()
                .map(|c| ChildInfo {
                    peer: s.peer_name().to_string(),
                    spi_in: format!("{:08x}", c.spi_in),
                    spi_out: format!("{:08x}", c.spi_out),
                    proposal: esp_text(&c.esp),
                    local_ts: c.local_ts.to_vec().iter().map(selector_text).collect(),
                    remote_ts: c.remote_ts.to_vec().iter().map(selector_text).collect(),
                    age_s: now.saturating_duration_since(c.created.instant()).as_secs(),
                })
                .collect(),
        }
    }

    // ---- Sending ----

    fn send(&mut self, local: SocketAddr, remote: SocketAddr, data: Vec<u8>, out: &mut Vec<Event>) {
        self.counters.sent += 1;
        out.push(Event::Send {
            local,
            remote,
            data,
        });
    }

    fn send_init(&mut self, spi: u64, now: Instant, out: &mut Vec<Event>) {
        let Some(sa) = self.sas.get_mut(&spi) else {
            return;
        };
        let Some(peer) = sa.peer.clone() else {
            return;
        };
        let Some(setup) = sa.setup.as_deref() else {
            return;
        };
        let Some(share) = setup.share.as_ref() else {
            return;
        };
        let mut ps = Vec::new();
        if let Some(c) = &setup.cookie {
            ps.push(Payload::notify(notify::COOKIE, c.clone()));
        }
        // Proposals whose group is the share's first, so the responder can take the KE.
        let group = share.group();
        let mut props: Vec<&IkeProposal> = peer.ike.iter().filter(|p| p.dh == group).collect();
        props.extend(peer.ike.iter().filter(|p| p.dh != group));
        ps.push(Payload::Sa(
            props
                .iter()
                .enumerate()
                .map(|(k, p)| ike_wire(k as u8 + 1, p, vec![]))
                .collect(),
        ));
        ps.push(Payload::Ke {
            group: group.id(),
            data: share.public().to_vec(),
        });
        ps.push(Payload::Nonce(setup.ni.clone()));
        ps.extend(nat_payloads(sa.spi_i, 0, &sa.local, &sa.remote, peer.encap));
        ps.push(Payload::notify(
            notify::IKEV2_FRAGMENTATION_SUPPORTED,
            vec![],
        ));
        if peer.cert.is_some() {
            ps.push(Payload::notify(
                notify::SIGNATURE_HASH_ALGORITHMS,
                SIGNATURE_HASHES.to_vec(),
            ));
        }
        let h = sa.header(exchange::IKE_SA_INIT, 0, false);
        let data = wire::encode(h, &ps);
        sa.setup().init_req = data.clone();
        sa.pending = Some(Box::new(Pending {
            id: 0,
            asked: Asked::Init,
            datagrams: vec![data.clone()],
            sent: now,
            tries: 0,
        }));
        sa.next_id = 1;
        let (l, r) = (sa.local, sa.remote);
        self.send(l, r, data, out);
        self.arm(spi, now + RETRANSMIT_BASE);
    }

    /// [`Engine::seal_message`], or `None` with the failure logged and counted; `what`:
    /// "request" or "response".
    fn seal_or_count(
        &mut self,
        spi: u64,
        h: Header,
        inner: &[Payload],
        what: &str,
    ) -> Option<Vec<Vec<u8>>> {
        match self.seal_message(spi, h, inner) {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::warn!(
                    peer = sa_name(&self.sas, spi),
                    "IKE: cannot encrypt a {what}: {e}"
                );
                self.counters.failed.crypto += 1;
                None
            }
        }
    }

    /// Sends a request in an SK payload and keeps it for retransmission.
    fn send_request(
        &mut self,
        spi: u64,
        exch: u8,
        asked: Asked,
        inner: &[Payload],
        now: Instant,
        out: &mut Vec<Event>,
    ) {
        let Some(sa) = self.sas.get_mut(&spi) else {
            return;
        };
        let id = sa.next_id;
        let h = sa.header(exch, id, false);
        let Some(msgs) = self.seal_or_count(spi, h, inner, "request") else {
            return;
        };
        let Some(sa) = self.sas.get_mut(&spi) else {
            return;
        };
        sa.next_id += 1;
        sa.pending = Some(Box::new(Pending {
            id,
            asked,
            datagrams: msgs.clone(),
            sent: now,
            tries: 0,
        }));
        let (l, r) = (sa.local, sa.remote);
        for m in msgs {
            self.send(l, r, m, out);
        }
        self.arm(spi, now + RETRANSMIT_BASE);
    }

    /// Answers the peer's request `id` with `inner` in an SK payload, and keeps the answer.
    /// Answer the request `h` on SA `spi` with the error notify `kind` alone, and remove
    /// the SA (a negotiation refused).
    fn refuse(&mut self, spi: u64, h: &Header, kind: u16, out: &mut Vec<Event>) {
        self.respond(
            spi,
            h.exchange,
            h.message_id,
            &[Payload::notify(kind, vec![])],
            out,
        );
        self.remove_sa(spi, out);
    }

    fn respond(&mut self, spi: u64, exch: u8, id: u32, inner: &[Payload], out: &mut Vec<Event>) {
        let Some(sa) = self.sas.get_mut(&spi) else {
            return;
        };
        let h = sa.header(exch, id, true);
        let Some(msgs) = self.seal_or_count(spi, h, inner, "response") else {
            return;
        };
        let Some(sa) = self.sas.get_mut(&spi) else {
            return;
        };
        sa.last_response = Some(LastResponse::new(id, &msgs, (sa.spi_i, sa.spi_r)));
        sa.peer_next = id.wrapping_add(1);
        let (l, r) = (sa.local, sa.remote);
        for m in msgs {
            self.send(l, r, m, out);
        }
    }

    /// An unencrypted IKE_SA_INIT answer carrying one notification (errors, cookies).
    fn init_notify(
        &mut self,
        local: SocketAddr,
        remote: SocketAddr,
        req: &Header,
        kind: u16,
        data: Vec<u8>,
        out: &mut Vec<Event>,
    ) {
        let h = Header {
            spi_i: req.spi_i,
            spi_r: 0,
            next: 0,
            version: 0x20,
            exchange: exchange::IKE_SA_INIT,
            flags: flags::RESPONSE,
            message_id: 0,
            length: 0,
        };
        let d = wire::encode(h, &[Payload::notify(kind, data)]);
        self.send(local, remote, d, out);
    }

    // ---- Receiving ----

    /// One datagram from `remote` to `local` (the non-ESP marker already removed).
    pub fn handle(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        data: &[u8],
        out: &mut Vec<Event>,
    ) {
        self.handle_message(now, local, remote, data, out);
        // What the message changed (its state, a rekey due sooner) is looked at when due:
        // armed at once rather than at `now`, which would leave its later entry in the
        // heap, stale, for each message (issue 27: entries of a million SAs).
        if let Some(spi) = self.touched.take() {
            if let Some(at) = self.sas.get(&spi).and_then(|sa| sa.next_due()) {
                self.arm(spi, at);
            }
        }
    }

    fn handle_message(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        data: &[u8],
        out: &mut Vec<Event>,
    ) {
        self.counters.received += 1;
        let msg = match wire::parse(data) {
            Ok(m) => m,
            Err(e) => {
                self.count_wire(&e);
                // §2.21.1: only an IKE_SA_INIT request gets an unprotected error answer.
                if let Ok(h) = Header::parse(data) {
                    if h.exchange == exchange::IKE_SA_INIT
                        && !h.is_response()
                        && h.spi_r == 0
                        && h.message_id == 0
                    {
                        if let Some((k, d)) = e.notify() {
                            self.init_notify(local, remote, &h, k, d, out);
                        }
                    }
                }
                tracing::debug!(%remote, "IKE: dropped a message: {e}");
                return;
            }
        };
        let h = msg.header;
        if h.exchange == exchange::IKE_SA_INIT && !h.is_response() {
            if h.spi_r != 0 || h.message_id != 0 || !h.is_initiator() {
                self.counters.dropped.malformed += 1;
                return;
            }
            self.on_init_request(now, local, remote, data, msg, out);
            return;
        }
        // Our SPI: the responder's if the sender is the original initiator.
        let ours = if h.is_initiator() { h.spi_r } else { h.spi_i };
        let Some(sa) = self.sas.get(&ours) else {
            self.counters.dropped.unknown_spi += 1;
            return;
        };
        if sa.spi_i != h.spi_i || (sa.initiator == h.is_initiator()) {
            self.counters.dropped.unknown_spi += 1;
            return;
        }
        self.touched = Some(ours);
        if h.exchange == exchange::IKE_SA_INIT {
            // A response to our IKE_SA_INIT.
            if sa.state != State::InitSent || h.message_id != 0 {
                self.counters.dropped.unexpected += 1;
                return;
            }
            self.on_init_response(now, ours, data, msg, out);
            return;
        }
        let Some(enc) = msg.encrypted else {
            // Every other exchange is protected (§3.14).
            self.counters.dropped.malformed += 1;
            return;
        };
        if enc.fragment.is_some() && !sa.frag {
            // RFC 7383 not negotiated on this SA: no fragments expected.
            self.counters.dropped.unexpected += 1;
            return;
        }
        if h.is_response() {
            match &sa.pending {
                Some(p) if p.id == h.message_id => {}
                _ => {
                    self.counters.dropped.unexpected += 1;
                    return;
                }
            }
        } else {
            if sa
                .last_response
                .as_ref()
                .is_some_and(|r| r.id() == h.message_id)
            {
                // A retransmitted request: the same answer (§2.1), after checking it is
                // authentic; a fragmented one is answered at its first fragment only
                // (RFC 7383 §2.6.1), not once per fragment.
                if sa
                    .rx
                    .as_ref()
                    .is_some_and(|rx| rx.open(data, enc.at, enc.header_len).is_ok())
                {
                    if enc.fragment.is_some_and(|(n, _)| n != 1) {
                        self.counters.fragments_received += 1;
                        return;
                    }
                    let ds = sa
                        .last_response
                        .as_ref()
                        .map(|r| r.datagrams((sa.spi_i, sa.spi_r)))
                        .unwrap_or_default();
                    let (l, r) = (sa.local, sa.remote);
                    self.counters.answered_again += 1;
                    for d in ds {
                        self.send(l, r, d, out);
                    }
                } else {
                    self.counters.dropped.integrity += 1;
                }
                return;
            }
            if h.message_id != sa.peer_next {
                self.counters.dropped.bad_message_id += 1;
                return;
            }
        }
        let Some(rx) = sa.rx.as_ref() else {
            self.counters.dropped.unexpected += 1;
            return;
        };
        let plain = match rx.open(data, enc.at, enc.header_len) {
            Ok(p) => p,
            Err(_) => {
                self.counters.dropped.integrity += 1;
                return;
            }
        };
        // A fragment (authenticated): kept until its message is whole.
        let (first_inner, plain) = match enc.fragment {
            None => (enc.first_inner, plain),
            Some((n, total)) => {
                match self.reassemble(ours, &h, (n, total), enc.first_inner, plain, now) {
                    Some(whole) => whole,
                    None => return,
                }
            }
        };
        let inner = match wire::parse_payloads(first_inner, &plain) {
            Ok(p) => p,
            Err(e) => {
                self.count_wire(&e);
                // An authenticated request that does not parse gets its error (§2.21.2).
                if !h.is_response() {
                    if let Some((k, d)) = e.notify() {
                        self.respond(
                            ours,
                            h.exchange,
                            h.message_id,
                            &[Payload::notify(k, d)],
                            out,
                        );
                    }
                }
                return;
            }
        };
        if let Some(sa) = self.sas.get_mut(&ours) {
            sa.last_heard = Stamp::of(now);
            // Behind a NAT, answers and requests go where the last authenticated message
            // came from (§2.23): the initiator's move to port 4500, or a NAT's new mapping.
            if sa.nat && (sa.remote != remote || sa.local != local) {
                sa.remote = remote;
                sa.local = local;
            }
        }
        match (h.exchange, h.is_response()) {
            (exchange::IKE_AUTH, false) => self.on_auth_request(now, ours, &h, inner, out),
            (exchange::IKE_AUTH, true) => self.on_auth_response(now, ours, inner, out),
            (exchange::INFORMATIONAL, false) => self.on_info_request(now, ours, &h, inner, out),
            (exchange::INFORMATIONAL, true) => self.on_info_response(ours, inner, out),
            (exchange::CREATE_CHILD_SA, false) => {
                self.on_create_child_request(now, ours, &h, inner, out)
            }
            (exchange::CREATE_CHILD_SA, true) => {
                self.on_create_child_response(now, ours, inner, out)
            }
            _ => self.counters.dropped.unexpected += 1,
        }
    }

    fn count_wire(&mut self, e: &wire::WireError) {
        let d = &mut self.counters.dropped;
        match e.reason() {
            "truncated" => d.truncated += 1,
            "version" => d.version += 1,
            "unsupported_critical" => d.unsupported_critical += 1,
            "fragment_out_of_range" => d.fragment_out_of_range += 1,
            _ => d.malformed += 1,
        }
    }

    fn cookie_for(&self, ni: &[u8], remote: &SocketAddr, spi_i: u64) -> Vec<u8> {
        let ip = match remote.ip() {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets().to_vec(),
        };
        let mac = crypto::prf(
            Prf::HmacSha256,
            &self.cookie_secret,
            &[ni, &ip, &spi_i.to_be_bytes()],
        );
        let mut c = vec![0u8, 0, 0, 1];
        c.extend_from_slice(&mac[..16]);
        c
    }

    /// The peers a message to `local` from `remote` may be for, in config order: those of
    /// that local address with that remote one or `any`, from [`PeerIndex`] (borrowed, not
    /// copied: a hub of many peers cloned an `Arc` of each per message, and passed over
    /// all of them).
    fn candidates<'a>(
        (peers, index): (&'a [Arc<Peer>], &'a PeerIndex),
        local: &SocketAddr,
        remote: &SocketAddr,
    ) -> impl Iterator<Item = &'a Arc<Peer>> + Clone + 'a {
        let at = index.by_local.get(&local.ip());
        let any = at.map_or(&[][..], |l| l.any.as_slice());
        let theirs = at
            .and_then(|l| l.by_remote.get(&remote.ip()))
            .map_or(&[][..], Vec::as_slice);
        Merged(any, theirs).filter_map(move |i| peers.get(i))
    }

    /// Whether a message to `local` from `remote` may be for `peer`.
    fn is_candidate(peer: &Peer, local: &SocketAddr, remote: &SocketAddr) -> bool {
        peer.local == local.ip() && peer.remote.is_none_or(|r| r == remote.ip())
    }

    fn on_init_request(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        raw: &[u8],
        msg: Message,
        out: &mut Vec<Event>,
    ) {
        let h = msg.header;
        if let Some(spi) = self.by_init.get(&(remote, h.spi_i)).copied() {
            if let Some(setup) = self.sas.get(&spi).and_then(|sa| sa.setup.as_deref()) {
                if setup.init_req == raw {
                    let d = setup.init_resp.clone();
                    self.counters.answered_again += 1;
                    self.send(local, remote, d, out);
                } else {
                    self.counters.dropped.unexpected += 1;
                }
                return;
            }
        }
        let ps = &msg.payloads;
        let sa_p = ps.sa();
        let ke = ps.ke();
        let ni = ps.nonce();
        let (Some(props), Some((group, ke_data)), Some(ni)) = (sa_p, ke, ni) else {
            self.counters.dropped.malformed += 1;
            self.init_notify(local, remote, &h, notify::INVALID_SYNTAX, vec![], out);
            return;
        };
        // Cookies (§2.6): once too many SAs are half-open, only requests that prove
        // their address get state.
        if self.half_open >= self.cookie_threshold {
            let want = self.cookie_for(ni, &remote, h.spi_i);
            let first_is_cookie = matches!(ps.first(), Some(Payload::Notify(n)) if n.kind == notify::COOKIE && n.data == want);
            if !first_is_cookie {
                if wire::find_notify(ps, notify::COOKIE).is_some() {
                    self.counters.dropped.bad_cookie += 1;
                }
                self.counters.cookies_sent += 1;
                self.init_notify(local, remote, &h, notify::COOKIE, want, out);
                return;
            }
        }
        // The initiator's order decides (§2.7), among what any candidate peer accepts.
        let summary = self.index.init_summary(&self.peers, &local, &remote);
        let chosen = props.iter().find_map(|p| {
            summary
                .ike
                .iter()
                .find(|(_, ours)| ike_matches(p, ours) && p.spi.is_empty())
                .map(|(_, ours)| (p.number, *ours))
        });
        let (force_encap, want_certs) = (summary.encap, summary.cert);
        let ca_hashes = want_certs.then(|| summary.ca_hashes.clone());
        drop(summary);
        let Some((number, suite)) = chosen else {
            self.counters.failed.no_proposal += 1;
            if Self::candidates((&self.peers, &self.index), &local, &remote)
                .next()
                .is_none()
            {
                self.counters.failed.unknown_peer += 1;
                tracing::info!(%remote, %local, "IKE: IKE_SA_INIT from an address no peer is configured for");
            } else {
                tracing::info!(%remote, "IKE: no proposal chosen: none of the {} offered matches a configured one", props.len());
            }
            self.init_notify(local, remote, &h, notify::NO_PROPOSAL_CHOSEN, vec![], out);
            return;
        };
        if group != suite.dh.id() {
            self.counters.invalid_ke_sent += 1;
            self.init_notify(
                local,
                remote,
                &h,
                notify::INVALID_KE_PAYLOAD,
                suite.dh.id().to_be_bytes().to_vec(),
                out,
            );
            return;
        }
        if ni.len() < suite.prf.out_len() / 2 {
            self.counters.dropped.malformed += 1;
            self.init_notify(local, remote, &h, notify::INVALID_SYNTAX, vec![], out);
            return;
        }
        let share = match KeyShare::generate(suite.dh) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("IKE: key share: {e}");
                self.counters.failed.crypto += 1;
                return;
            }
        };
        let g_ir = match share.agree(ke_data) {
            Ok(g) => g,
            Err(e) => {
                tracing::info!(%remote, "IKE: bad KE payload: {e}");
                self.counters.dropped.malformed += 1;
                self.init_notify(local, remote, &h, notify::INVALID_SYNTAX, vec![], out);
                return;
            }
        };
        let mut spi_r = rand_u64();
        while spi_r == 0 || self.sas.contains_key(&spi_r) {
            spi_r = rand_u64();
        }
        let nr = rand_vec(NONCE_LEN);
        let keys = match IkeKeys::derive(&suite_of(&suite), &g_ir, ni, &nr, h.spi_i, spi_r) {
            Ok(k) => k,
            Err(e) => {
                tracing::warn!("IKE: key derivation: {e}");
                self.counters.failed.crypto += 1;
                return;
            }
        };
        let (tx, rx) = match (
            SkCipher::new(suite.encr, suite.integ, &keys.sk_er, &keys.sk_ar),
            SkCipher::new(suite.encr, suite.integ, &keys.sk_ei, &keys.sk_ai),
        ) {
            (Ok(t), Ok(r)) => (t, r),
            _ => {
                self.counters.failed.crypto += 1;
                return;
            }
        };
        let mut resp_ps = vec![
            Payload::Sa(vec![ike_wire(number, &suite, vec![])]),
            Payload::Ke {
                group: suite.dh.id(),
                data: share.public().to_vec(),
            },
            Payload::Nonce(nr.clone()),
        ];
        // NAT detection (§2.23), answered only when asked.
        let nat = match nat_found(ps, h.spi_i, 0, &remote, &local) {
            Some(found) => {
                resp_ps.extend(nat_payloads(h.spi_i, spi_r, &local, &remote, force_encap));
                found || force_encap
            }
            None => false,
        };
        // RFC 7383 §2.3: fragmentation, answered only when asked.
        let frag = wire::find_notify(ps, notify::IKEV2_FRAGMENTATION_SUPPORTED).is_some();
        if frag {
            resp_ps.push(Payload::notify(
                notify::IKEV2_FRAGMENTATION_SUPPORTED,
                vec![],
            ));
        }
        // Certificates (§3.7, RFC 7427 §4): which CAs we trust, which hashes we take.
        if let Some(ca_hashes) = ca_hashes {
            resp_ps.push(Payload::CertReq {
                encoding: wire::cert::X509,
                data: ca_hashes,
            });
            resp_ps.push(Payload::notify(
                notify::SIGNATURE_HASH_ALGORITHMS,
                SIGNATURE_HASHES.to_vec(),
            ));
        }
        let mut rh = h;
        rh.spi_r = spi_r;
        rh.flags = flags::RESPONSE;
        let resp = wire::encode(rh, &resp_ps);
        let mut sa = IkeSa::new(
            None,
            false,
            (h.spi_i, spi_r),
            (local, remote),
            State::HalfOpen,
            now,
        );
        sa.suite = Some(suite);
        sa.sk_d = sk_d_of(&keys);
        sa.setup = Some(Box::new(Setup {
            ni: ni.clone(),
            nr,
            init_req: raw.to_vec(),
            init_resp: resp.clone(),
            keys: Some(keys),
            ..Setup::default()
        }));
        sa.tx = Some(tx);
        sa.rx = Some(rx);
        sa.peer_next = 1;
        sa.nat = nat;
        sa.frag = frag;
        if nat {
            self.counters.nat_detected += 1;
            tracing::debug!(%remote, "IKE: a NAT is between us and the initiator (or encapsulation forced): ESP will go in UDP");
        }
        self.insert_sa(spi_r, sa, now);
        self.by_init.insert((remote, h.spi_i), spi_r);
        self.half_open += 1;
        self.send(local, remote, resp, out);
    }

    fn on_init_response(
        &mut self,
        now: Instant,
        spi: u64,
        raw: &[u8],
        msg: Message,
        out: &mut Vec<Event>,
    ) {
        let ps = &msg.payloads;
        let Some(sa) = self.sas.get_mut(&spi) else {
            return;
        };
        let Some(peer) = sa.peer.clone() else {
            return;
        };
        if let Some(n) = wire::find_notify(ps, notify::COOKIE) {
            let setup = sa.setup();
            if setup.cookie.is_some() && setup.cookie.as_deref() == Some(&n.data[..]) {
                // The same cookie twice: the responder does not take it.
                self.counters.dropped.unexpected += 1;
                return;
            }
            setup.cookie = Some(n.data.clone());
            sa.pending = None;
            self.send_init(spi, now, out);
            return;
        }
        if let Some(n) = wire::find_notify(ps, notify::INVALID_KE_PAYLOAD) {
            let want = (n.data.len() == 2)
                .then(|| u16::from_be_bytes([n.data[0], n.data[1]]))
                .and_then(Dh::from_id);
            let current = sa.setup().share.as_ref().map(|s| s.group());
            match want {
                Some(g) if peer.ike.iter().any(|p| p.dh == g) && Some(g) != current => {
                    match KeyShare::generate(g) {
                        Ok(s) => sa.setup().share = Some(s),
                        Err(_) => {
                            self.counters.failed.crypto += 1;
                            return;
                        }
                    }
                    sa.pending = None;
                    self.counters.invalid_ke_retried += 1;
                    tracing::info!(
                        peer = peer.name,
                        "IKE: the responder wants DH group {}",
                        g.id()
                    );
                    self.send_init(spi, now, out);
                }
                _ => {
                    tracing::warn!(
                        peer = peer.name,
                        "IKE: the responder wants a DH group we do not offer ({:?})",
                        n.data
                    );
                    self.counters.failed.no_proposal += 1;
                    self.fail(spi, now, out);
                }
            }
            return;
        }
        if let Some(n) = ps.error_notify() {
            tracing::warn!(
                peer = peer.name,
                "IKE: the responder refused IKE_SA_INIT: {}",
                notify::name(n.kind)
            );
            if n.kind == notify::NO_PROPOSAL_CHOSEN {
                self.counters.failed.no_proposal += 1;
            } else {
                self.counters.failed.peer_refused += 1;
            }
            self.fail(spi, now, out);
            return;
        }
        let chosen = ps.sa().filter(|v| v.len() == 1).map(|v| &v[0]);
        let ke = ps.ke();
        let nr = ps.nonce();
        let (Some(chosen), Some((group, ke_data)), Some(nr)) = (chosen, ke, nr) else {
            self.counters.dropped.malformed += 1;
            return;
        };
        let Some(share) = sa.setup().share.take() else {
            return;
        };
        let suite = peer
            .ike
            .iter()
            .find(|o| {
                o.dh == share.group()
                    && ike_matches(chosen, o)
                    && chosen.transforms.len() == 3 + usize::from(o.integ.is_some())
            })
            .copied();
        let Some(suite) = suite.filter(|s| s.dh.id() == group) else {
            tracing::warn!(
                peer = peer.name,
                "IKE: the responder chose a proposal we did not offer"
            );
            self.counters.failed.no_proposal += 1;
            self.fail(spi, now, out);
            return;
        };
        let g_ir = match share.agree(ke_data) {
            Ok(g) => g,
            Err(e) => {
                tracing::warn!(
                    peer = peer.name,
                    "IKE: bad KE payload from the responder: {e}"
                );
                self.counters.dropped.malformed += 1;
                self.fail(spi, now, out);
                return;
            }
        };
        let spi_r = msg.header.spi_r;
        let spi_i = sa.spi_i;
        let keys = match IkeKeys::derive(&suite_of(&suite), &g_ir, &sa.setup().ni, nr, spi_i, spi_r)
        {
            Ok(k) => k,
            Err(_) => {
                self.counters.failed.crypto += 1;
                self.fail(spi, now, out);
                return;
            }
        };
        let (tx, rx) = match (
            SkCipher::new(suite.encr, suite.integ, &keys.sk_ei, &keys.sk_ai),
            SkCipher::new(suite.encr, suite.integ, &keys.sk_er, &keys.sk_ar),
        ) {
            (Ok(t), Ok(r)) => (t, r),
            _ => {
                self.counters.failed.crypto += 1;
                self.fail(spi, now, out);
                return;
            }
        };
        sa.spi_r = spi_r;
        // NAT detection (§2.23): with a NAT between (or encapsulation forced), IKE_AUTH
        // and everything after go to port 4500.
        if let Some(found) = nat_found(ps, sa.spi_i, spi_r, &sa.remote, &sa.local) {
            if found {
                tracing::info!(peer = peer.name, tunnel = peer.tunnel, remote = %sa.remote, "IKE: a NAT is between the peers: IKE moves to port 4500, ESP goes in UDP");
            }
            if found || peer.encap {
                sa.nat = true;
                if sa.local.port() != NATT_PORT {
                    sa.local.set_port(NATT_PORT);
                    sa.remote.set_port(NATT_PORT);
                }
                self.counters.nat_detected += 1;
            }
        }
        let Some(sa) = self.sas.get_mut(&spi) else {
            return;
        };
        sa.frag = wire::find_notify(ps, notify::IKEV2_FRAGMENTATION_SUPPORTED).is_some();
        let setup = sa.setup();
        setup.nr = nr.clone();
        setup.init_resp = raw.to_vec();
        sa.suite = Some(suite);
        sa.tx = Some(tx);
        sa.rx = Some(rx);
        sa.pending = None;
        sa.state = State::AuthSent;
        sa.last_heard = Stamp::of(now);
        // IKE_AUTH: IDi, AUTH, INITIAL_CONTACT, SA, TSi, TSr (§1.2).
        let id_i = peer.local_id.clone();
        let octets = crypto::signed_octets(
            suite.prf,
            &sa.setup().init_req,
            nr,
            &keys.sk_pi,
            &id_i.body(),
        );
        sa.sk_d = sk_d_of(&keys);
        sa.setup().keys = Some(keys);
        let auth = match Self::our_auth(&peer, suite.prf, &octets) {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(peer = peer.name, "IKE: cannot sign our AUTH: {e}");
                self.counters.failed.crypto += 1;
                self.fail(spi, now, out);
                return;
            }
        };
        let child_spi = self.new_child_spi();
        let Some(sa) = self.sas.get_mut(&spi) else {
            return;
        };
        sa.child_spi = child_spi;
        let mut inner = vec![Payload::IdI(id_i)];
        inner.extend(Self::cert_payloads(&peer, true));
        inner.extend([Payload::IdR(peer.remote_id.clone()), auth]);
        // As strongSwan: a peer whose SAs are never replaced does not ask for it either.
        if peer.unique_ids != UniqueIds::Never {
            inner.push(Payload::notify(notify::INITIAL_CONTACT, vec![]));
        }
        let ask: Vec<wire::CfgAttr> = [
            (wire::cfg::INTERNAL_IP4_ADDRESS, &self.ask_vip),
            (wire::cfg::INTERNAL_IP6_ADDRESS, &self.ask_vip6),
        ]
        .into_iter()
        .filter_map(|(kind, v)| v.clone().map(|value| wire::CfgAttr { kind, value }))
        .collect();
        if !ask.is_empty() {
            inner.push(Payload::Cp {
                kind: wire::cfg::REQUEST,
                attrs: ask,
            });
        }
        inner.extend([
            Payload::Sa(
                peer.esp
                    .iter()
                    .enumerate()
                    .map(|(k, p)| esp_wire(k as u8 + 1, p, child_spi, false))
                    .collect(),
            ),
            Payload::TsI(peer.local_ts.clone()),
            Payload::TsR(peer.remote_ts.clone()),
        ]);
        self.send_request(spi, exchange::IKE_AUTH, Asked::Auth, &inner, now, out);
    }

    fn new_child_spi(&mut self) -> u32 {
        loop {
            let s = rand_u64() as u32;
            if s >= 256 && self.child_spis.insert(s) {
                return s;
            }
        }
    }

    /// Our AUTH payload over `octets`: the PSK's MAC, or a digital signature (method 14,
    /// RFC 7427) with the certificate's key.
    fn our_auth(peer: &Peer, prf: Prf, octets: &[u8]) -> Result<Payload, crypto::CryptoError> {
        Ok(match &peer.cert {
            None => Payload::Auth {
                method: wire::auth::PSK,
                data: crypto::psk_auth(prf, &peer.psk, octets).to_vec(),
            },
            Some(c) => Payload::Auth {
                method: wire::auth::DIGITAL_SIGNATURE,
                data: crypto::digital_signature_auth(&c.key, octets)?,
            },
        })
    }

    /// With certificates: our CERT payloads (our certificate, then its intermediates),
    /// and, `certreq`, a CERTREQ naming the CAs we trust (§3.6, §3.7).
    fn cert_payloads(peer: &Peer, certreq: bool) -> Vec<Payload> {
        let Some(c) = &peer.cert else {
            return Vec::new();
        };
        let mut v: Vec<Payload> = c
            .chain
            .iter()
            .map(|d| Payload::Cert {
                encoding: wire::cert::X509,
                data: d.clone(),
            })
            .collect();
        if certreq {
            v.push(Payload::CertReq {
                encoding: wire::cert::X509,
                data: c.ca_hashes.clone(),
            });
        }
        v
    }

    /// Checks the peer's AUTH over its signed octets: with its PSK, or with its
    /// certificate (the CERT payloads, chained to our CAs, for the identity it claims).
    /// The error says which check failed.
    fn check_auth(
        sa: &IkeSa,
        peer: &Peer,
        id: &Id,
        payloads: &[Payload],
        cache: &mut ChainCache,
        now: Instant,
    ) -> Result<(), String> {
        let Some((method, data)) = payloads.auth() else {
            return Err("no AUTH payload".into());
        };
        let setup = sa.setup.as_deref();
        let (Some(suite), Some(setup), Some(keys)) = (
            sa.suite.as_ref(),
            setup,
            setup.and_then(|s| s.keys.as_ref()),
        ) else {
            return Err("no keys".into());
        };
        // The peer signs its first message, our nonce, and its ID under its SK_p.
        let (first, nonce, sk_p) = if sa.initiator {
            (&setup.init_resp, &setup.ni, &keys.sk_pr)
        } else {
            (&setup.init_req, &setup.nr, &keys.sk_pi)
        };
        let octets = crypto::signed_octets(suite.prf, first, nonce, sk_p, &id.body());
        let Some(c) = &peer.cert else {
            if method != wire::auth::PSK {
                return Err(format!(
                    "AUTH method {method}, peer `{}` uses a PSK",
                    peer.name
                ));
            }
            let want = crypto::psk_auth(suite.prf, &peer.psk, &octets);
            if aws_lc_rs::constant_time::verify_slices_are_equal(&want, data).is_err() {
                return Err(format!(
                    "AUTH does not verify with peer `{}`'s PSK",
                    peer.name
                ));
            }
            return Ok(());
        };
        if method == wire::auth::PSK {
            return Err(format!(
                "AUTH method {method} (PSK), peer `{}` uses certificates",
                peer.name
            ));
        }
        let chain: Vec<Vec<u8>> = payloads
            .iter()
            .filter_map(|p| match p {
                Payload::Cert {
                    encoding: wire::cert::X509,
                    data,
                } => Some(data.clone()),
                _ => None,
            })
            .collect();
        if chain.is_empty() {
            return Err(crypto::CryptoError::NoCertificate.to_string());
        }
        // The chain: from the cache, or verified (and remembered).
        let mut h = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
        for d in &chain {
            h.update(&(d.len() as u64).to_be_bytes());
            h.update(d);
        }
        let mut digest = [0u8; 32];
        digest.copy_from_slice(h.finish().as_ref());
        let key = (peer.name.clone(), digest);
        let chain_ok = match cache.get(&key) {
            Some((at, r)) if now.saturating_duration_since(*at) < CHAIN_CACHE_TTL => r.clone(),
            _ => {
                let r = crypto::verify_chain(&chain, &c.cas, &c.crls, std::time::SystemTime::now())
                    .map_err(|e| e.to_string());
                if cache.len() >= CHAIN_CACHE_MAX {
                    cache.clear();
                }
                cache.insert(key, (now, r.clone()));
                r
            }
        };
        chain_ok.map_err(|e| format!("certificate: {e}"))?;
        // The identity: the certificate's subject for a DN, its subjectAltNames else.
        let id_ok = if id.kind == wire::id::DER_ASN1_DN {
            crypto::certificate_subject(&chain[0])
                .map_err(|e| e.to_string())
                .and_then(|s| {
                    if crate::dn::same(&s, &id.data) {
                        Ok(())
                    } else {
                        Err(format!(
                            "the certificate is not for identity {}: its subject is dn:{}",
                            id.text(),
                            crate::dn::to_text(&s).unwrap_or_default()
                        ))
                    }
                })
        } else {
            crypto::certificate_matches_id(&chain[0], id.kind, &id.data).map_err(|e| match e {
                crypto::CryptoError::IdMismatch { .. } => {
                    format!("the certificate is not for identity {}", id.text())
                }
                e => e.to_string(),
            })
        };
        id_ok.map_err(|e| format!("identity mismatch: {e}"))?;
        crypto::verify_auth(&chain[0], method, data, &octets).map_err(|e| format!("signature: {e}"))
    }

    fn on_auth_request(
        &mut self,
        now: Instant,
        spi: u64,
        h: &Header,
        inner: Vec<Payload>,
        out: &mut Vec<Event>,
    ) {
        let Some(sa) = self.sas.get(&spi) else {
            return;
        };
        if sa.state != State::HalfOpen {
            self.counters.dropped.unexpected += 1;
            return;
        }
        let id_i = inner.id_i().cloned();
        let Some(id_i) = id_i else {
            self.counters.dropped.malformed += 1;
            self.refuse(spi, h, notify::INVALID_SYNTAX, out);
            return;
        };
        let peer = crate::config::id_key(&id_i)
            .and_then(|k| self.index.by_remote_id.get(&k))
            .into_iter()
            .flatten()
            .filter_map(|&i| self.peers.get(i))
            .find(|p| {
                Self::is_candidate(p, &sa.local, &sa.remote) && id_matches(&p.remote_id, &id_i)
            })
            .cloned();
        let result = match &peer {
            None => {
                self.counters.failed.unknown_peer += 1;
                Err(format!(
                    "no peer has remote_id `{}` (from {})",
                    id_i.text(),
                    sa.remote
                ))
            }
            Some(p) => Self::check_auth(sa, p, &id_i, &inner, &mut self.chain_cache, now),
        };
        let peer = match (result, peer) {
            (Ok(()), Some(p)) => p,
            (Err(why), _) => {
                self.counters.failed.authentication += 1;
                tracing::warn!(remote = %sa.remote, id = id_i.text(), "IKE: authentication failed: {why}");
                self.refuse(spi, h, notify::AUTHENTICATION_FAILED, out);
                return;
            }
            (Ok(()), None) => return,
        };
        if let Some(Payload::IdR(want)) = inner.iter().find(|p| matches!(p, Payload::IdR(_))) {
            if *want != peer.local_id {
                tracing::info!(
                    peer = peer.name,
                    "IKE: the initiator asks for identity `{}`, we are `{}`: answering as ours",
                    want.text(),
                    peer.local_id.text()
                );
            }
        }
        let initial_contact = wire::find_notify(&inner, notify::INITIAL_CONTACT).is_some();
        // The peer's other established SAs (its identities'): what becomes of them.
        let duplicates = match (peer.unique_ids, initial_contact) {
            (UniqueIds::Never, _) | (UniqueIds::No, false) => Duplicates::Stay,
            // §2.4: the initiator has no other SA with us any more: nothing to tell it.
            (_, true) => Duplicates::Drop,
            (UniqueIds::Replace, false) => Duplicates::Delete,
            (UniqueIds::Keep, false) => Duplicates::RefuseNew,
        };
        if duplicates == Duplicates::RefuseNew && !self.established_of(&peer.name, spi).is_empty() {
            self.counters.failed.unique_keep += 1;
            tracing::warn!(
                peer = peer.name,
                remote = %sa.remote,
                "IKE: refused: the peer has an IKE SA already (unique_ids = keep)"
            );
            self.refuse(spi, h, notify::AUTHENTICATION_FAILED, out);
            return;
        }
        // Virtual IPs asked for, of a peer with pools (others' CP is ignored, §3.15).
        let ask = match inner.iter().find_map(|p| match p {
            Payload::Cp { kind, attrs } if *kind == wire::cfg::REQUEST => Some(attrs),
            _ => None,
        }) {
            Some(attrs) if !peer.pools.is_empty() => match wire::cfg_request(attrs) {
                Ok(a) => a,
                Err(e) => {
                    self.counters.failed.cp_malformed += 1;
                    tracing::warn!(peer = peer.name, "IKE: refused: {e}");
                    self.refuse(spi, h, notify::INVALID_SYNTAX, out);
                    return;
                }
            },
            _ => wire::CfgAsk::default(),
        };
        // Our AUTH.
        let Some(sa) = self.sas.get_mut(&spi) else {
            return;
        };
        let (Some(suite), Some(setup)) = (sa.suite, sa.setup.as_deref()) else {
            return;
        };
        let Some(keys) = setup.keys.as_ref() else {
            return;
        };
        let octets = crypto::signed_octets(
            suite.prf,
            &setup.init_resp,
            &setup.ni,
            &keys.sk_pr,
            &peer.local_id.body(),
        );
        let auth = match Self::our_auth(&peer, suite.prf, &octets) {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(peer = peer.name, "IKE: cannot sign our AUTH: {e}");
                self.counters.failed.crypto += 1;
                self.refuse(spi, h, notify::AUTHENTICATION_FAILED, out);
                return;
            }
        };
        let Some(sa) = self.sas.get_mut(&spi) else {
            return;
        };
        let before = sa.peer.replace(peer.clone());
        sa.schedule_rekey(now);
        if let Some(b) = before {
            self.unindex_peer(spi, &b.name);
        }
        self.index_peer(spi, &peer.name);
        let Some(sa) = self.sas.get_mut(&spi) else {
            return;
        };
        let (remote, spi_i) = (sa.remote, sa.spi_i);
        self.by_init.remove(&(remote, spi_i));
        self.half_open = self.half_open.saturating_sub(1);
        self.counters.established += 1;
        tracing::info!(peer = peer.name, %remote, "IKE: SA established (responder)");
        if matches!(duplicates, Duplicates::Drop | Duplicates::Delete) {
            let stale = self.established_of(&peer.name, spi);
            if !stale.is_empty() {
                tracing::info!(
                    peer = peer.name,
                    n = stale.len(),
                    initial_contact,
                    "IKE: the peer's older IKE SAs replaced by the new one"
                );
            }
            self.counters.duplicates_removed += stale.len() as u64;
            for k in stale {
                match duplicates {
                    Duplicates::Drop => self.remove_sa(k, out),
                    _ => self.delete_ike(k, now, out),
                }
            }
        }
        let mut resp = vec![Payload::IdR(peer.local_id.clone())];
        resp.extend(Self::cert_payloads(&peer, false));
        resp.push(auth);
        // The virtual IPs, leased after INITIAL_CONTACT gave back the peer's old ones.
        let leased = match ask.ip4 || ask.ip6 {
            false => Ok(()),
            true => self.lease_vips(spi, &peer, ask),
        };
        match leased {
            Ok(()) => {
                if let Some(v) = self.vips.get(&spi) {
                    resp.push(cfg_reply(v));
                }
                resp.extend(self.child_for_request(now, spi, &peer, &inner, None, out));
            }
            // §3.10.1: the IKE SA stands, without a child SA.
            Err(()) => resp.push(Payload::notify(notify::INTERNAL_ADDRESS_FAILURE, vec![])),
        }
        self.respond(spi, h.exchange, h.message_id, &resp, out);
        if let Some(sa) = self.sas.get_mut(&spi) {
            sa.settle();
        }
    }

    /// The established IKE SAs of peer `name` but `spi` (the peer's own, through
    /// [`Engine::by_peer`]).
    fn established_of(&self, name: &str, spi: u64) -> Vec<u64> {
        self.sas_of(name)
            .filter(|(k, s)| *k != spi && s.state == State::Established)
            .map(|(k, _)| k)
            .collect()
    }

    /// Leases SA `spi` a virtual IP of each family `ask` names from its peer's pools
    /// (a family without pools, or none free, is left out: §3.15.1 lets the responder
    /// answer what it can); `Err` (counted) when nothing asked for is free.
    fn lease_vips(&mut self, spi: u64, peer: &Peer, ask: wire::CfgAsk) -> Result<(), ()> {
        let mut got = Vips::default();
        if let Some(pool) = self.pools.get_mut(&peer.name) {
            if ask.ip4 {
                got.v4 = pool.lease4();
            }
            if ask.ip6 {
                got.v6 = pool.lease6();
            }
            for (asked, v6, given) in [
                (ask.ip4, false, got.v4.is_some()),
                (ask.ip6, true, got.v6.is_some()),
            ] {
                if asked && !given {
                    let why = match pool.size(v6) {
                        0 => "no pool of that family",
                        _ => "none left",
                    };
                    tracing::warn!(
                        peer = peer.name,
                        family = if v6 { "IPv6" } else { "IPv4" },
                        "IKE: virtual IP not given: {why}"
                    );
                }
            }
        }
        if got == Vips::default() {
            self.counters.failed.pool_exhausted += 1;
            tracing::warn!(
                peer = peer.name,
                "IKE: no virtual IP asked for left in the pools: INTERNAL_ADDRESS_FAILURE"
            );
            return Err(());
        }
        tracing::info!(
            peer = peer.name,
            addr = got.text(),
            "IKE: virtual IP leased"
        );
        self.vips.insert(spi, got);
        Ok(())
    }

    /// Gives SA `spi`'s virtual IPs (if it has some) back to its peer's pools.
    fn release_vip(&mut self, spi: u64, sa: &IkeSa) {
        if let (Some(v), Some(p)) = (self.vips.remove(&spi), &sa.peer) {
            if let Some(pool) = self.pools.get_mut(&p.name) {
                v.addrs().for_each(|a| pool.release(a));
            }
        }
    }

    /// Responder: the child SA of an IKE_AUTH (or CREATE_CHILD_SA) request: the payloads
    /// to answer with, and the child installed.
    fn child_for_request(
        &mut self,
        now: Instant,
        spi: u64,
        peer: &Arc<Peer>,
        inner: &[Payload],
        fresh: Option<Fresh>,
        out: &mut Vec<Event>,
    ) -> Vec<Payload> {
        let pfs = fresh
            .as_ref()
            .and_then(|f| f.ke.as_ref())
            .map(|(g, _)| Dh::from_id(*g));
        if let Some(None) = pfs {
            self.counters.failed.no_proposal += 1;
            return vec![Payload::notify(notify::NO_PROPOSAL_CHOSEN, vec![])];
        }
        let pfs = pfs.flatten();
        let props = inner.sa();
        let tsi = inner.ts_i();
        let tsr = inner.ts_r();
        let (Some(props), Some(tsi), Some(tsr)) = (props, tsi, tsr) else {
            // An IKE SA without a child (RFC 6023 style) is fine.
            return vec![];
        };
        if wire::find_notify(inner, notify::USE_TRANSPORT_MODE).is_some() {
            // Tunnel interfaces carry tunnel mode: answering without the notification
            // tells the initiator so (§1.3.1).
            tracing::info!(peer = peer.name, "IKE: the initiator asks for transport mode; a tunnel interface's child SA is tunnel mode");
        }
        let mut chosen = None;
        'o: for p in props {
            for ours in &peer.esp {
                if esp_matches(p, ours, pfs) && (pfs.is_none() || ours.dh == pfs) {
                    chosen = Some((
                        p.number,
                        *ours,
                        u32::from_be_bytes([p.spi[0], p.spi[1], p.spi[2], p.spi[3]]),
                    ));
                    break 'o;
                }
            }
        }
        let Some((number, esp, spi_out)) = chosen else {
            self.counters.failed.no_proposal += 1;
            tracing::warn!(
                peer = peer.name,
                "IKE: no ESP proposal chosen: none of the {} offered matches",
                props.len()
            );
            return vec![Payload::notify(notify::NO_PROPOSAL_CHOSEN, vec![])];
        };
        // TSi is the initiator's side: the peer's (remote) side for us; with virtual
        // IPs, those addresses alone (§2.19), whatever the peer proposed.
        let n_i = match self.vips.get(&spi) {
            Some(v) => {
                let hosts: Vec<Selector> = v.addrs().map(Selector::host).collect();
                narrow(tsi, &hosts)
            }
            None => narrow(tsi, &peer.remote_ts),
        };
        let n_r = narrow(tsr, &peer.local_ts);
        if n_i.is_empty() || n_r.is_empty() {
            self.counters.failed.ts_unacceptable += 1;
            tracing::warn!(peer = peer.name, "IKE: traffic selectors unacceptable");
            return vec![Payload::notify(notify::TS_UNACCEPTABLE, vec![])];
        }
        let spi_in = self.new_child_spi();
        let Some(sa) = self.sas.get_mut(&spi) else {
            return vec![];
        };
        // Keyed: SK_d derives the child's keys.
        let Some(suite) = sa.suite.filter(|_| !sa.sk_d.is_empty()) else {
            return vec![];
        };
        // PFS: our key share for the requester's.
        let mut ke_out = None;
        let mut g_ir = None;
        if let (Some(group), Some((_, data))) = (pfs, fresh.as_ref().and_then(|f| f.ke.as_ref())) {
            let share = KeyShare::generate(group).ok();
            match share.as_ref().map(|k| k.agree(data)) {
                Some(Ok(g)) => {
                    g_ir = Some(g);
                    ke_out = share.map(|k| Payload::Ke {
                        group: group.id(),
                        data: k.public().to_vec(),
                    });
                }
                _ => {
                    self.counters.dropped.malformed += 1;
                    return vec![Payload::notify(notify::INVALID_SYNTAX, vec![])];
                }
            }
        }
        let (ni, nr) = match (&fresh, sa.setup.as_deref()) {
            (Some(f), _) => (&f.ni, &f.nr),
            (None, Some(s)) => (&s.ni, &s.nr),
            (None, None) => return vec![],
        };
        let ck = match crypto::child_keys(
            suite.prf,
            &sa.sk_d,
            g_ir.as_deref().map(|g| &g[..]),
            ni,
            nr,
            esp.encr,
            esp.integ,
        ) {
            Ok(k) => k,
            Err(_) => {
                self.counters.failed.crypto += 1;
                return vec![Payload::notify(notify::NO_PROPOSAL_CHOSEN, vec![])];
            }
        };
        self.install_child(
            spi,
            spi_in,
            spi_out,
            esp,
            ck,
            false,
            (n_r.clone(), n_i.clone()),
            now,
            out,
        );
        let mut resp = vec![Payload::Sa(vec![esp_wire(
            number,
            &esp,
            spi_in,
            pfs.is_some(),
        )])];
        if let Some(f) = fresh {
            resp.push(Payload::Nonce(f.nr));
        }
        resp.extend(ke_out);
        resp.push(Payload::TsI(n_i));
        resp.push(Payload::TsR(n_r));
        resp
    }

    /// CREATE_CHILD_SA from the peer (§1.3): a child rekey (REKEY_SA) or a new child SA,
    /// with or without PFS. The new child is installed at once (inbound first); the old
    /// one stays until the peer deletes it (make-before-break, §2.8). An IKE proposal
    /// rekeys the IKE SA (`ike_rekey.rs`).
    fn on_create_child_request(
        &mut self,
        now: Instant,
        spi: u64,
        h: &Header,
        inner: Vec<Payload>,
        out: &mut Vec<Event>,
    ) {
        let Some(sa) = self.sas.get(&spi) else {
            return;
        };
        let Some(peer) = sa.peer.clone() else {
            return;
        };
        let refuse = |kind: u16| vec![Payload::notify(kind, vec![])];
        if sa.state != State::Established {
            self.respond(
                spi,
                h.exchange,
                h.message_id,
                &refuse(notify::TEMPORARY_FAILURE),
                out,
            );
            return;
        }
        if inner
            .sa()
            .is_some_and(|v| v.iter().any(|p| p.protocol == proto::IKE))
        {
            self.on_ike_rekey_request(now, spi, h, &inner, out);
            return;
        }
        let old = wire::find_notify(&inner, notify::REKEY_SA)
            .and_then(|n| <[u8; 4]>::try_from(&n.spi[..]).ok())
            .map(u32::from_be_bytes);
        if let Some(o) = old {
            if !sa.children.iter().any(|c| c.spi_out == o) {
                tracing::info!(
                    peer = peer.name,
                    "IKE: the peer rekeys child SA {o:08x}, which we do not have"
                );
                self.respond(
                    spi,
                    h.exchange,
                    h.message_id,
                    &refuse(notify::CHILD_SA_NOT_FOUND),
                    out,
                );
                return;
            }
        }
        let Some(ni) = inner.nonce().cloned() else {
            self.counters.dropped.malformed += 1;
            self.respond(
                spi,
                h.exchange,
                h.message_id,
                &refuse(notify::INVALID_SYNTAX),
                out,
            );
            return;
        };
        let fresh = Fresh {
            ni,
            nr: rand_vec(NONCE_LEN),
            ke: inner.ke().map(|(g, d)| (g, d.clone())),
        };
        let before = self.counters.children_installed;
        let resp = self.child_for_request(now, spi, &peer, &inner, Some(fresh), out);
        if old.is_some() && self.counters.children_installed > before {
            self.counters.child_rekeys += 1;
            tracing::info!(peer = peer.name, "IKE: child SA rekeyed by the peer");
        }
        self.respond(spi, h.exchange, h.message_id, &resp, out);
    }

    /// Starts rekeying the child whose inbound SPI is `old_in` (§2.8): a new child with
    /// fresh nonces (and a fresh key exchange when the ESP proposal asks for PFS).
    pub fn rekey_child(&mut self, spi: u64, old_in: u32, now: Instant, out: &mut Vec<Event>) {
        let new_spi_in = self.new_child_spi();
        let Some(sa) = self.sas.get_mut(&spi) else {
            return;
        };
        let Some(peer) = sa.peer.clone() else {
            return;
        };
        let Some(child) = sa.children.iter().find(|c| c.spi_in == old_in) else {
            return;
        };
        if sa.state != State::Established || sa.pending.is_some() || sa.rekeying() {
            self.child_spis.remove(&new_spi_in);
            return;
        }
        let (lts, rts) = (child.local_ts.to_vec(), child.remote_ts.to_vec());
        let pfs = peer.esp.first().and_then(|e| e.dh);
        let share = match pfs.map(KeyShare::generate) {
            Some(Ok(k)) => Some(k),
            Some(Err(_)) => {
                self.counters.failed.crypto += 1;
                self.child_spis.remove(&new_spi_in);
                return;
            }
            None => None,
        };
        let ni = rand_vec(NONCE_LEN);
        let mut inner = vec![
            Payload::Notify(wire::Notify {
                protocol: proto::ESP,
                spi: old_in.to_be_bytes().to_vec(),
                kind: notify::REKEY_SA,
                data: vec![],
            }),
            Payload::Sa(
                peer.esp
                    .iter()
                    .filter(|e| e.dh == pfs)
                    .enumerate()
                    .map(|(k, e)| esp_wire(k as u8 + 1, e, new_spi_in, true))
                    .collect(),
            ),
            Payload::Nonce(ni.clone()),
        ];
        if let Some(k) = &share {
            inner.push(Payload::Ke {
                group: k.group().id(),
                data: k.public().to_vec(),
            });
        }
        inner.push(Payload::TsI(lts));
        inner.push(Payload::TsR(rts));
        sa.rare_mut().rekeying = Some(Rekeying {
            new_spi_in,
            ni,
            share,
        });
        tracing::info!(peer = peer.name, "IKE: rekeying child SA {old_in:08x}");
        self.send_request(
            spi,
            exchange::CREATE_CHILD_SA,
            Asked::Rekey(old_in),
            &inner,
            now,
            out,
        );
    }

    /// The answer to our child rekey: the new child in, then a Delete of the old one
    /// (removed once the peer confirms).
    fn on_create_child_response(
        &mut self,
        now: Instant,
        spi: u64,
        inner: Vec<Payload>,
        out: &mut Vec<Event>,
    ) {
        let Some(sa) = self.sas.get_mut(&spi) else {
            return;
        };
        let asked = sa.pending.take().map(|p| p.asked);
        if asked == Some(Asked::RekeyIke) {
            self.on_ike_rekey_response(now, spi, &inner, out);
            return;
        }
        let Some(Asked::Rekey(old_in)) = asked else {
            self.counters.dropped.unexpected += 1;
            return;
        };
        let Some(rk) = sa.take_rekeying() else {
            return;
        };
        let Some(peer) = sa.peer.clone() else {
            return;
        };
        let give_up = |e: &mut Engine, why: String| {
            tracing::warn!(
                peer = peer.name,
                "IKE: child rekey failed: {why}; the old child SA stays"
            );
            e.child_spis.remove(&rk.new_spi_in);
        };
        if let Some(n) = inner.error_notify() {
            self.counters.failed.peer_refused += 1;
            give_up(self, format!("the peer answered {}", notify::name(n.kind)));
            return;
        }
        let chosen = inner.sa().filter(|v| v.len() == 1).map(|v| v[0].clone());
        let (Some(chosen), Some(nr), Some(tsi), Some(tsr)) = (
            chosen,
            inner.nonce().cloned(),
            inner.ts_i().cloned(),
            inner.ts_r().cloned(),
        ) else {
            self.counters.dropped.malformed += 1;
            give_up(self, "the answer lacks SA, Nonce or TS".into());
            return;
        };
        let pfs = rk.share.as_ref().map(KeyShare::group);
        let Some(esp) = peer
            .esp
            .iter()
            .find(|o| o.dh == pfs && esp_matches(&chosen, o, pfs))
            .copied()
        else {
            self.counters.failed.no_proposal += 1;
            give_up(
                self,
                "the peer chose an ESP proposal we did not offer".into(),
            );
            return;
        };
        let g_ir = match (&rk.share, inner.ke()) {
            (None, _) => None,
            (Some(k), Some((g, data))) if g == k.group().id() => match k.agree(data) {
                Ok(g) => Some(g),
                Err(e) => {
                    self.counters.dropped.malformed += 1;
                    give_up(self, format!("bad KE: {e}"));
                    return;
                }
            },
            (Some(_), _) => {
                self.counters.dropped.malformed += 1;
                give_up(self, "no KE for PFS".into());
                return;
            }
        };
        let Some(sa) = self.sas.get_mut(&spi) else {
            return;
        };
        // Keyed: SK_d derives the child's keys.
        let Some(suite) = sa.suite.filter(|_| !sa.sk_d.is_empty()) else {
            return;
        };
        let ck = match crypto::child_keys(
            suite.prf,
            &sa.sk_d,
            g_ir.as_deref().map(|g| &g[..]),
            &rk.ni,
            &nr,
            esp.encr,
            esp.integ,
        ) {
            Ok(k) => k,
            Err(_) => {
                self.counters.failed.crypto += 1;
                return;
            }
        };
        let spi_out =
            u32::from_be_bytes([chosen.spi[0], chosen.spi[1], chosen.spi[2], chosen.spi[3]]);
        self.counters.child_rekeys += 1;
        self.install_child(
            spi,
            rk.new_spi_in,
            spi_out,
            esp,
            ck,
            true,
            (tsi, tsr),
            now,
            out,
        );
        tracing::info!(
            peer = peer.name,
            "IKE: child SA {old_in:08x} rekeyed as {:08x}",
            rk.new_spi_in
        );
        self.ask_delete_child(spi, old_in, now, out);
    }

    /// Asks the peer of IKE SA `spi` to delete our child SA `spi_in` (INFORMATIONAL
    /// Delete, §1.4.1); ours goes once it answers.
    fn ask_delete_child(&mut self, spi: u64, spi_in: u32, now: Instant, out: &mut Vec<Event>) {
        self.send_request(
            spi,
            exchange::INFORMATIONAL,
            Asked::DeleteChild(spi_in),
            &[Payload::Delete {
                protocol: proto::ESP,
                spis: vec![spi_in.to_be_bytes().to_vec()],
            }],
            now,
            out,
        );
    }

    fn on_auth_response(
        &mut self,
        now: Instant,
        spi: u64,
        inner: Vec<Payload>,
        out: &mut Vec<Event>,
    ) {
        let Some(sa) = self.sas.get_mut(&spi) else {
            return;
        };
        if sa.state != State::AuthSent {
            self.counters.dropped.unexpected += 1;
            return;
        }
        sa.pending = None;
        let Some(peer) = sa.peer.clone() else {
            return;
        };
        if let Some(n) = wire::find_notify(&inner, notify::AUTHENTICATION_FAILED) {
            let _ = n;
            tracing::warn!(peer = peer.name, "IKE: the responder says AUTHENTICATION_FAILED (check the PSK or certificates and the identities: we are `{}`, asking for `{}`)", peer.local_id.text(), peer.remote_id.text());
            self.counters.failed.peer_refused += 1;
            self.fail(spi, now, out);
            return;
        }
        let id_r = inner.id_r().cloned();
        let checked = match &id_r {
            None => Err("no IDr payload".to_string()),
            Some(id) if !id_matches(&peer.remote_id, id) => Err(format!(
                "the responder is `{}`, peer `{}` expects `{}`",
                id.text(),
                peer.name,
                peer.remote_id.text()
            )),
            Some(id) => Self::check_auth(sa, &peer, id, &inner, &mut self.chain_cache, now),
        };
        if let Err(why) = checked {
            tracing::warn!(
                peer = peer.name,
                "IKE: authentication of the responder failed: {why}"
            );
            self.counters.failed.authentication += 1;
            // §2.21.2: tell it in an INFORMATIONAL... the SA is simply deleted here.
            self.fail(spi, now, out);
            return;
        }
        sa.schedule_rekey(now);
        // The first child's keys come from the IKE_SA_INIT nonces; nothing else will.
        let (ni, nr) = (
            std::mem::take(&mut sa.setup().ni),
            std::mem::take(&mut sa.setup().nr),
        );
        sa.settle();
        self.counters.established += 1;
        tracing::info!(peer = peer.name, "IKE: SA established (initiator)");
        // The child.
        let Some(sa) = self.sas.get_mut(&spi) else {
            return;
        };
        if let Some(n) = inner.error_notify() {
            tracing::warn!(
                peer = peer.name,
                "IKE: the responder refused the child SA: {}",
                notify::name(n.kind)
            );
            if n.kind == notify::TS_UNACCEPTABLE {
                self.counters.failed.ts_unacceptable += 1;
            } else {
                self.counters.failed.no_proposal += 1;
            }
            return;
        }
        let chosen = inner.sa().filter(|v| v.len() == 1).map(|v| v[0].clone());
        let tsi = inner.ts_i().cloned();
        let tsr = inner.ts_r().cloned();
        let (Some(chosen), Some(tsi), Some(tsr)) = (chosen, tsi, tsr) else {
            tracing::warn!(
                peer = peer.name,
                "IKE: IKE_AUTH response without a child SA"
            );
            return;
        };
        let Some(esp) = peer
            .esp
            .iter()
            .find(|o| esp_matches(&chosen, o, None))
            .copied()
        else {
            tracing::warn!(
                peer = peer.name,
                "IKE: the responder chose an ESP proposal we did not offer"
            );
            self.counters.failed.no_proposal += 1;
            return;
        };
        // The responder may only narrow what we proposed.
        if narrow(&tsi, &peer.local_ts) != tsi || narrow(&tsr, &peer.remote_ts) != tsr {
            tracing::warn!(
                peer = peer.name,
                "IKE: the responder's traffic selectors are wider than ours"
            );
            self.counters.failed.ts_unacceptable += 1;
            return;
        }
        let spi_out =
            u32::from_be_bytes([chosen.spi[0], chosen.spi[1], chosen.spi[2], chosen.spi[3]]);
        // Keyed: SK_d derives the child's keys.
        let Some(suite) = sa.suite.filter(|_| !sa.sk_d.is_empty()) else {
            return;
        };
        let ck = match crypto::child_keys(suite.prf, &sa.sk_d, None, &ni, &nr, esp.encr, esp.integ)
        {
            Ok(k) => k,
            Err(_) => {
                self.counters.failed.crypto += 1;
                return;
            }
        };
        let spi_in = sa.child_spi;
        self.install_child(spi, spi_in, spi_out, esp, ck, true, (tsi, tsr), now, out);
    }

    /// Records a new child of IKE SA `spi` and asks the daemon to install it (both
    /// directions). `initiated`: we began the exchange that made it, so we send with its
    /// initiator-to-responder keys; `(local_ts, remote_ts)`: its selectors, ours first.
    #[allow(clippy::too_many_arguments)]
    fn install_child(
        &mut self,
        spi: u64,
        spi_in: u32,
        spi_out: u32,
        esp: EspProposal,
        ck: ChildKeys,
        initiated: bool,
        (local_ts, remote_ts): (Vec<Selector>, Vec<Selector>),
        now: Instant,
        out: &mut Vec<Event>,
    ) {
        let Some(sa) = self.sas.get_mut(&spi) else {
            return;
        };
        let Some(peer) = sa.peer.clone() else {
            return;
        };
        let ChildKeys {
            encr_i,
            integ_i,
            encr_r,
            integ_r,
        } = ck;
        let i_to_r = DirKeys {
            encr: encr_i,
            integ: integ_i,
        };
        let r_to_i = DirKeys {
            encr: encr_r,
            integ: integ_r,
        };
        let (key_in, key_out) = if initiated {
            (r_to_i, i_to_r)
        } else {
            (i_to_r, r_to_i)
        };
        // Room for this one child, not the four a first push makes (a rekey's second
        // child grows it once): most IKE SAs have one (issue 27: memory per tunnel).
        sa.children.reserve_exact(1);
        let udp_encap = sa.nat.then(|| (sa.local.port(), sa.remote.port()));
        let by_destination = peer.remote.is_none();
        let chosen = by_destination.then(|| (sa.remote.ip(), udp_encap.map_or(0, |(_, p)| p)));
        sa.children.push(Child {
            spi_in,
            spi_out,
            esp,
            created: Stamp::of(now),
            local_ts: Selectors::new(&local_ts),
            remote_ts: Selectors::new(&remote_ts),
            chosen,
        });
        let spec = ChildSpec {
            peer: peer.name.clone(),
            tunnel: peer.tunnel.clone(),
            local: sa.local.ip(),
            remote: sa.remote.ip(),
            spi_in,
            spi_out,
            encr: esp.encr,
            integ: esp.integ,
            esn: esp.esn,
            key_in,
            key_out,
            local_ts,
            remote_ts,
            udp_encap,
            by_destination,
            interface: peer.interface.clone(),
            policy_priority: peer.policy_priority,
        };
        self.counters.children_installed += 1;
        out.push(Event::ChildUp(spec));
    }

    fn on_info_request(
        &mut self,
        _now: Instant,
        spi: u64,
        h: &Header,
        inner: Vec<Payload>,
        out: &mut Vec<Event>,
    ) {
        let mut answer = Vec::new();
        let mut delete_ike = false;
        for p in &inner {
            if let Payload::Delete { protocol, spis } = p {
                self.counters.deletes_received += 1;
                match *protocol {
                    proto::IKE => delete_ike = true,
                    proto::ESP => {
                        let mut ours = Vec::new();
                        for s in spis {
                            let Ok(b) = <[u8; 4]>::try_from(&s[..]) else {
                                continue;
                            };
                            let out_spi = u32::from_be_bytes(b);
                            // A child moved to the SA that rekeyed this one, if the
                            // peer's Delete crossed the rekey.
                            let moved = self.sas.get(&spi).and_then(|s| s.moved_to());
                            if let Some(spi_in) = self
                                .remove_child(spi, out_spi, out)
                                .or_else(|| moved.and_then(|m| self.remove_child(m, out_spi, out)))
                            {
                                ours.push(spi_in.to_be_bytes().to_vec());
                            }
                        }
                        if !ours.is_empty() {
                            answer.push(Payload::Delete {
                                protocol: proto::ESP,
                                spis: ours,
                            });
                        }
                    }
                    _ => {}
                }
            }
        }
        if delete_ike {
            self.respond(spi, h.exchange, h.message_id, &[], out);
            self.adopt_on_delete(spi);
            if let Some(sa) = self.sas.get(&spi) {
                if sa.children.is_empty() && sa.state == State::Rekeyed {
                    tracing::debug!(
                        peer = sa.peer_name(),
                        "IKE: the peer deleted the rekeyed IKE SA"
                    );
                } else {
                    tracing::info!(peer = sa.peer_name(), "IKE: the peer deleted the IKE SA");
                }
            }
            self.remove_sa(spi, out);
            return;
        }
        self.respond(spi, h.exchange, h.message_id, &answer, out);
    }

    fn on_info_response(&mut self, spi: u64, _inner: Vec<Payload>, out: &mut Vec<Event>) {
        let Some(sa) = self.sas.get_mut(&spi) else {
            return;
        };
        let asked = sa.pending.take().map(|p| p.asked);
        if asked == Some(Asked::Delete) || sa.state == State::Deleting {
            self.remove_sa(spi, out);
            return;
        }
        if let Some(Asked::DeleteChild(old_in)) = asked {
            // The peer has dropped the old child: so do we.
            let old_out = sa
                .children
                .iter()
                .find(|c| c.spi_in == old_in)
                .map(|c| c.spi_out);
            if let Some(o) = old_out {
                self.remove_child(spi, o, out);
            }
        }
    }

    /// The data plane could not install the child SA whose inbound SPI is `spi_in` (its
    /// [`Event::ChildUp`]; it installed none of it): forgotten here, and the peer asked to
    /// delete it too (INFORMATIONAL Delete, §1.4.1), so that neither side holds a child
    /// without SAs. An IKE SA this side set up for an initiating peer, left without
    /// children, is deleted instead: the peer is set up again, with new SPIs. Counted in
    /// `failed.install`. (Found by a scan: failures are rare.)
    pub fn child_failed(&mut self, spi_in: u32, now: Instant, out: &mut Vec<Event>) {
        let found = self.sas.iter_mut().find_map(|(&spi, sa)| {
            let k = sa.children.iter().position(|c| c.spi_in == spi_in)?;
            sa.children.remove(k);
            sa.children.shrink_to_fit();
            let again = sa.children.is_empty()
                && sa.initiator
                && sa.peer.as_ref().is_some_and(|p| p.initiate);
            Some((
                spi,
                again,
                sa.state == State::Established && sa.pending.is_none(),
            ))
        });
        let Some((spi, again, can_ask)) = found else {
            return;
        };
        self.child_spis.remove(&spi_in);
        self.counters.failed.install += 1;
        if again {
            self.delete_ike(spi, now, out);
        } else if can_ask {
            self.ask_delete_child(spi, spi_in, now, out);
        } else {
            tracing::warn!(
                "IKE: child SA {spi_in:08x} not installed: the peer keeps its side until it rekeys or deletes it (a request is outstanding)"
            );
        }
    }

    /// Removes the child whose outbound SPI is `out_spi`; returns its inbound SPI.
    fn remove_child(&mut self, spi: u64, out_spi: u32, out: &mut Vec<Event>) -> Option<u32> {
        let sa = self.sas.get_mut(&spi)?;
        let k = sa.children.iter().position(|c| c.spi_out == out_spi)?;
        let c = sa.children.remove(k);
        // A rekey's pair of children is one again: no room kept for the other.
        sa.children.shrink_to_fit();
        let peer = sa.peer.clone()?;
        let chosen = c.chosen;
        self.child_spis.remove(&c.spi_in);
        self.counters.children_removed += 1;
        out.push(Event::ChildDown {
            peer: peer.name.clone(),
            tunnel: peer.tunnel.clone(),
            spi_in: c.spi_in,
            spi_out: c.spi_out,
            chosen,
        });
        Some(c.spi_in)
    }

    /// Forgets an SA now, removing its children.
    fn remove_sa(&mut self, spi: u64, out: &mut Vec<Event>) {
        let Some(sa) = self.sas.remove(&spi) else {
            return;
        };
        if let Some(p) = &sa.peer {
            self.unindex_peer(spi, &p.name);
        }
        self.forget_reassembly(&sa);
        self.release_vip(spi, &sa);
        if sa.state == State::HalfOpen {
            self.half_open = self.half_open.saturating_sub(1);
            self.by_init.remove(&(sa.remote, sa.spi_i));
        }
        if sa.child_spi != 0 {
            self.child_spis.remove(&sa.child_spi);
        }
        if let Some(peer) = &sa.peer {
            for c in &sa.children {
                self.child_spis.remove(&c.spi_in);
                self.counters.children_removed += 1;
                out.push(Event::ChildDown {
                    peer: peer.name.clone(),
                    tunnel: peer.tunnel.clone(),
                    spi_in: c.spi_in,
                    spi_out: c.spi_out,
                    chosen: c.chosen,
                });
            }
            // An initiating peer left without an SA (not one whose SA was replaced by
            // its rekey) tries again. (Looked up only for initiating peers: a responder
            // holding many SAs does not scan them at each removal.)
            let replaced = || {
                self.sas.values().any(|s| {
                    s.state == State::Established
                        && s.peer.as_ref().is_some_and(|p| p.name == peer.name)
                })
            };
            if peer.initiate && sa.initiator && !replaced() {
                self.retry_at
                    .entry(peer.name.clone())
                    .or_insert_with(|| Instant::now() + RETRY_AFTER);
            }
        }
    }

    /// A negotiation we started failed: forget it; an initiating peer retries later.
    fn fail(&mut self, spi: u64, now: Instant, out: &mut Vec<Event>) {
        let name = self
            .sas
            .get(&spi)
            .and_then(|s| s.peer.as_ref().map(|p| p.name.clone()));
        self.remove_sa(spi, out);
        if let Some(n) = name {
            self.retry_at.insert(n, now + RETRY_AFTER);
        }
    }

    /// Sends a Delete of the IKE SA; it goes once answered (or given up).
    fn delete_ike(&mut self, spi: u64, now: Instant, out: &mut Vec<Event>) {
        let Some(sa) = self.sas.get_mut(&spi) else {
            return;
        };
        if sa.state != State::Established {
            self.remove_sa(spi, out);
            return;
        }
        sa.state = State::Deleting;
        if sa.pending.is_some() {
            // Window of one: the delete cannot go before the answer; just forget it.
            self.remove_sa(spi, out);
            return;
        }
        // Remove the children at once: the peer drops them with the IKE SA (§1.4.1).
        let children: Vec<u32> = sa.children.iter().map(|c| c.spi_out).collect();
        for c in children {
            self.remove_child(spi, c, out);
        }
        self.send_request(
            spi,
            exchange::INFORMATIONAL,
            Asked::Delete,
            &[Payload::Delete {
                protocol: proto::IKE,
                spis: vec![],
            }],
            now,
            out,
        );
    }

    /// Timers: retransmissions, liveness checks, half-open expiry, initiating peers.
    pub fn tick(&mut self, now: Instant, out: &mut Vec<Event>) {
        // Entries made stale by an SA armed sooner wait for their time; when they are as
        // many as the live ones, they go at once (the heap's room is per SA, issue 27).
        if self.timers.len() > 2 * self.sas.len() + 1024 {
            let sas = &self.sas;
            self.timers.retain(|std::cmp::Reverse((at, spi))| {
                sas.get(spi).is_some_and(|sa| sa.timer_at == Some(*at))
            });
        }
        // The SAs due now, each once; the others are not looked at.
        let mut due = Vec::new();
        let stamp = Stamp::of(now);
        while let Some(&std::cmp::Reverse((at, spi))) = self.timers.peek() {
            if at > stamp {
                break;
            }
            self.timers.pop();
            if let Some(sa) = self.sas.get_mut(&spi) {
                if sa.timer_at == Some(at) {
                    sa.timer_at = None;
                    due.push(spi);
                }
            }
        }
        let mut resend = Vec::new();
        let mut dead = Vec::new();
        let mut dpd = Vec::new();
        let mut rekey_ike = Vec::new();
        let mut expired = Vec::new();
        let mut gone = Vec::new();
        for &spi in &due {
            let Some(sa) = self.sas.get_mut(&spi) else {
                continue;
            };
            let tries = sa
                .peer
                .as_ref()
                .map_or(MAX_RETRANSMITS, |p| p.retransmit_tries);
            if let Some(p) = &mut sa.pending {
                if now.saturating_duration_since(p.sent) >= p.wait() {
                    if p.tries >= tries {
                        dead.push(spi);
                    } else {
                        p.tries += 1;
                        p.sent = now;
                        resend.push((sa.local, sa.remote, p.datagrams.clone()));
                    }
                }
                continue;
            }
            match sa.state {
                State::HalfOpen
                    if now.saturating_duration_since(sa.created.instant()) >= HALF_OPEN_TIMEOUT =>
                {
                    dead.push(spi)
                }
                State::Rekeyed if sa.expire_at.is_some_and(|t| stamp >= t) => gone.push(spi),
                State::Established if sa.expire_at.is_some_and(|t| stamp >= t) => expired.push(spi),
                State::Established => {
                    if sa.rekey_at.is_some_and(|t| stamp >= t) && !sa.rekeying() && !sa.collided() {
                        rekey_ike.push(spi);
                    } else if let Some(d) = sa.peer.as_ref().and_then(|p| p.dpd) {
                        if now.saturating_duration_since(sa.last_heard.instant()) >= d {
                            dpd.push(spi);
                        }
                    }
                }
                _ => {}
            }
        }
        for spi in gone {
            self.remove_sa(spi, out);
        }
        for spi in expired {
            if let Some(sa) = self.sas.get(&spi) {
                tracing::warn!(
                    peer = sa.peer_name(),
                    "IKE: the IKE SA reached ike_lifetime_s without being rekeyed: deleted"
                );
            }
            self.delete_ike(spi, now, out);
        }
        for spi in rekey_ike {
            self.rekey_ike(spi, None, now, out);
        }
        for (l, r, ds) in resend {
            self.counters.retransmitted += 1;
            for d in ds {
                self.send(l, r, d, out);
            }
        }
        self.expire_reassembly(now);
        for spi in dead {
            if let Some(sa) = self.sas.get(&spi) {
                if matches!(sa.state, State::Deleting | State::Rekeyed) {
                    // Going anyway (terminated, or replaced by its rekey).
                    tracing::debug!(
                        peer = sa.peer_name(),
                        "IKE: no answer to the Delete of an IKE SA"
                    );
                    self.remove_sa(spi, out);
                    continue;
                }
                if sa.state == State::Established {
                    // Its liveness check (or any request) unanswered: a dead peer.
                    tracing::warn!(peer = sa.peer_name(), remote = %sa.remote, children = sa.children.len(), "IKE: dead peer: no answer after {} retransmissions; the IKE SA and its child SAs are removed", sa.pending.as_ref().map_or(0, |p| p.tries));
                    self.counters.dead_peers += 1;
                    self.counters.failed.timeout += 1;
                } else if sa.state != State::HalfOpen {
                    tracing::warn!(peer = sa.peer_name(), remote = %sa.remote, "IKE: no answer from the peer after {} retransmissions: SA gone", sa.pending.as_ref().map_or(0, |p| p.tries));
                    self.counters.failed.timeout += 1;
                }
            }
            self.fail(spi, now, out);
        }
        // NAT keepalives (RFC 3948 §4) on SAs that moved to port 4500.
        let mut keep = Vec::new();
        for spi in &due {
            let Some(sa) = self.sas.get_mut(spi) else {
                continue;
            };
            let Some(every) = sa.peer.as_ref().map(|p| p.keepalive) else {
                continue;
            };
            if sa.nat
                && sa.state == State::Established
                && sa.local.port() == NATT_PORT
                && !every.is_zero()
                && now.saturating_duration_since(sa.last_keepalive.instant()) >= every
            {
                sa.last_keepalive = stamp;
                keep.push((sa.local, sa.remote));
            }
        }
        for (local, remote) in keep {
            self.counters.keepalives_sent += 1;
            out.push(Event::Keepalive { local, remote });
        }
        // Child SAs near the end of their lifetime ([`IkeSa::child_rekey_age`]).
        let mut rekey = Vec::new();
        for (&spi, sa) in due.iter().filter_map(|spi| Some((spi, self.sas.get(spi)?))) {
            let Some(at) = sa.child_rekey_age() else {
                continue;
            };
            // The newest child of a pair rekeyed is the one to rekey again.
            if let Some(c) = sa
                .children
                .iter()
                .filter(|c| now.saturating_duration_since(c.created.instant()) >= at)
                .min_by_key(|c| now.saturating_duration_since(c.created.instant()))
            {
                if !sa.children.iter().any(|n| n.created > c.created) {
                    rekey.push((spi, c.spi_in));
                }
            }
        }
        for (spi, old_in) in rekey {
            self.rekey_child(spi, old_in, now, out);
        }
        for spi in dpd {
            self.counters.dpd_sent += 1;
            self.send_request(spi, exchange::INFORMATIONAL, Asked::Dpd, &[], now, out);
        }
        // Each SA looked at: when next (what it did may have armed it sooner already).
        for spi in due {
            if let Some(at) = self.sas.get(&spi).and_then(|sa| sa.next_due()) {
                self.arm(spi, at);
            }
        }
        // Initiating peers without an SA (the SAs looked at once, not once per peer).
        if !self.peers.iter().any(|p| p.initiate) {
            return;
        }
        let want: Vec<String> = self
            .peers
            .iter()
            .filter(|p| {
                p.initiate
                    && !self
                        .sas_of(&p.name)
                        .any(|(_, s)| s.state != State::Deleting)
            })
            .filter(|p| self.retry_at.get(&p.name).is_none_or(|t| now >= *t))
            .map(|p| p.name.clone())
            .collect();
        for n in want {
            if let Err(e) = self.initiate(&n, now, out) {
                tracing::warn!(peer = n, "IKE: cannot initiate: {e}");
                self.retry_at.insert(n, now + RETRY_AFTER);
            }
        }
    }
}

mod fragment;
mod ike_rekey;

pub use fragment::{MAX_FRAGMENTS, MAX_REASSEMBLED, MAX_REASSEMBLY_BYTES, REASSEMBLY_TIMEOUT};

#[cfg(test)]
mod tests;
