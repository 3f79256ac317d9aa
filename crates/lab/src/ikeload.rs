//! An IKEv2 load generator (issue 27, item 7), as strongSwan's load-tester plugin: many
//! emulated initiators, each setting up an IKE SA (IKE_SA_INIT + IKE_AUTH with a PSK) and
//! its child SA against one responder, then optionally holding their SAs (answering the
//! responder's INFORMATIONAL requests: DPD, deletes) to measure how many it keeps.
//!
//! Sources: the initiators are spread round robin over `sockets` UDP sockets, each bound
//! to one of the source addresses (ephemeral ports): with more initiators than sockets,
//! several initiators share an address and port and are told apart by their SPIs (as
//! the responder must: RFC 7296 §2.1 keys IKE SAs by SPI). One thread, non-blocking
//! sockets and poll(2): run it on one core.
//!
//! Messages are built with `ike::wire` and keyed with `ike::crypto`; the key shares are
//! generated before the clock starts (not what is measured); the DH agreement, the key
//! derivation, the AUTH and the SK payloads are computed per tunnel, as a real initiator
//! does. No INITIAL_CONTACT is sent: every emulated initiator uses the same identity, and
//! INITIAL_CONTACT tells a responder to delete that identity's other SAs (§2.4).
//! Retransmission: after `retransmit`, doubled each time, `tries` sends in all.
//!
//! Traffic ([`Generator::traffic`]): a sample of the tunnels also key their child SA (with
//! Ferrouter's own ESP, `crates/ipsec`) and ping a host behind the responder through it,
//! ESP in UDP (they claim a NAT, so no raw socket is needed): an answer proves both
//! directions of that tunnel, the responder choosing the right one of its many outbound
//! SAs by destination.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use ike::config::{EspProposal, IkeProposal};
use ike::crypto::{self, IkeKeys, IkeSuite, KeyShare, SkCipher};
use ike::transform as tf;
use ike::wire::{self, exchange, flags, notify, proto, Header, Id, Payload, Proposal, Selector};
use serde::Serialize;

/// What to run.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// The responder (address, port 500).
    pub responder: SocketAddr,
    /// Source addresses (present on an interface of the namespace the generator runs in).
    pub sources: Vec<IpAddr>,
    /// UDP sockets in all, spread over the sources (at least one per source).
    pub sockets: usize,
    /// Tunnels (emulated initiators).
    pub tunnels: usize,
    /// New initiations per second (`None`: as fast as the responder answers, within
    /// `window`).
    pub rate: Option<f64>,
    /// Exchanges outstanding at most (initiators between their IKE_SA_INIT and their
    /// IKE_AUTH response).
    pub window: usize,
    /// The IKE proposal (its DH group is the key shares').
    pub ike: IkeProposal,
    /// The child SA's proposal.
    pub esp: EspProposal,
    /// How every initiator authenticates, and checks the responder's AUTH.
    pub auth: LoadAuth,
    /// Our (every initiator's) identity, and the responder's we ask for.
    pub local_id: Id,
    pub remote_id: Id,
    /// The first retransmission timeout (doubled each time), and sends per request.
    pub retransmit: Duration,
    pub tries: u32,
    /// The whole setup phase at most.
    pub timeout: Duration,
    /// Send NAT detection notifications whose source hash matches no address (as from
    /// behind a NAT): strongSwan's kernel-libipsec installs UDP-encapsulated ESP SAs
    /// only, so without a NAT its child SAs fail.
    pub claim_nat: bool,
    /// Tunnels (evenly spread over all) that key their child SA for traffic
    /// ([`Generator::traffic`]); needs `claim_nat` (ESP in UDP).
    pub traffic: usize,
}

/// What an IKE_SA_INIT flood ([`Generator::flood`]) got back.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FloodReport {
    /// IKE_SA_INIT requests sent.
    pub sent: u64,
    /// Answered with a COOKIE (§2.6): the responder kept no state.
    pub cookies: u64,
    /// Answered with the responder's SA, KE and nonce: an SA half-open on its side.
    pub half_open: u64,
    /// Answered with another notification (NO_PROPOSAL_CHOSEN, INVALID_KE_PAYLOAD, ...).
    pub refused: u64,
    /// Datagrams that were none of those.
    pub other: u64,
    /// From the first send to the end of listening.
    pub seconds: f64,
}

/// The emulated initiators' authentication.
#[derive(Clone)]
pub enum LoadAuth {
    /// A pre-shared key, both ways.
    Psk(Vec<u8>),
    /// Our certificate (DER: sent in a CERT payload) and its key (RFC 7427 signatures);
    /// the responder's certificate, whose key its AUTH must be made with (its chain is
    /// the responder's business, not what is measured here).
    Cert {
        cert: Vec<u8>,
        key: std::sync::Arc<crypto::PrivateKey>,
        responder_cert: Vec<u8>,
    },
}

impl std::fmt::Debug for LoadAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LoadAuth::Psk(_) => "psk",
            LoadAuth::Cert { .. } => "certificate",
        })
    }
}

/// What the generator saw.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LoadReport {
    pub tunnels: usize,
    pub sockets: usize,
    pub sources: usize,
    /// IKE SAs with their child SA up.
    pub established: usize,
    /// Refused, by the notification the responder answered with (or `auth_mismatch`,
    /// `malformed`, `no_child`).
    pub failed: BTreeMap<String, u64>,
    /// Gave up after every retransmission, or still pending at the time limit.
    pub timeouts: usize,
    pub retransmits: u64,
    pub cookies: u64,
    /// From the first IKE_SA_INIT to the last establishment, s.
    pub setup_s: f64,
    /// established ÷ setup_s.
    pub setup_per_s: f64,
    /// Time until every tunnel was up (`None` when some failed).
    pub time_to_n_s: Option<f64>,
    /// Setup rate per tenth of the tunnels (in order of establishment), tunnels/s: shows
    /// a responder slowing down as it holds more.
    pub rate_by_tenth: Vec<f64>,
    /// The generator thread's CPU time in the setup phase, s (close to setup_s: the
    /// generator, not the responder, was the limit).
    pub generator_cpu_s: f64,
    /// Hold phase: its length, INFORMATIONAL requests answered, SAs the responder deleted.
    pub hold_s: f64,
    pub informational_answered: u64,
    pub deleted_by_responder: usize,
    /// Traffic through a sample of the tunnels ([`Generator::traffic`]).
    pub traffic: Option<TrafficReport>,
}

/// Pings through a sample of the tunnels.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TrafficReport {
    /// Tunnels sampled, and of those up with their child SA keyed.
    pub sampled: usize,
    pub keyed: usize,
    /// Echo requests sent, replies received (decrypted, and matching a request).
    pub sent: u64,
    pub answered: u64,
    /// Tunnels with at least one reply.
    pub tunnels_answered: usize,
    /// ESP that did not decrypt, or came for no sampled SA.
    pub bad_esp: u64,
}

/// A sampled tunnel: what keys its child SA, then the SAs.
struct Sample {
    ni: Vec<u8>,
    nr: Vec<u8>,
    /// Our inbound SPI (offered in IKE_AUTH).
    spi_in: u32,
    /// Ours to the responder, and back.
    esp: Option<(Box<ipsec::Sa>, Box<ipsec::Sa>)>,
    answered: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    Idle,
    Init,
    Auth,
    Up,
    Done,
}

struct Ini {
    st: St,
    sock: usize,
    spi_i: u64,
    spi_r: u64,
    share: Option<KeyShare>,
    ni: Vec<u8>,
    init_req: Vec<u8>,
    cookie: Option<Vec<u8>>,
    keys: Option<IkeKeys>,
    tx: Option<SkCipher>,
    rx: Option<SkCipher>,
    /// The request in flight, when sent, sends so far.
    datagram: Vec<u8>,
    sent: Instant,
    sends: u32,
    /// The responder's next request's message ID and our last answer.
    peer_next: u32,
    last_answer: Option<(u32, Vec<u8>)>,
    /// Sampled for traffic.
    sample: Option<Box<Sample>>,
}

/// The wire form of an IKE proposal.
fn ike_wire(p: &IkeProposal) -> Proposal {
    let (id, key_bits) = p.encr.id();
    let t = |kind, id| wire::Transform {
        kind,
        id,
        key_bits: None,
        unknown_attribute: false,
    };
    let mut ts = vec![
        wire::Transform {
            kind: tf::ENCR,
            id,
            key_bits,
            unknown_attribute: false,
        },
        t(tf::PRF, p.prf.id()),
    ];
    if let Some(i) = p.integ {
        ts.push(t(tf::INTEG, i.id()));
    }
    ts.push(t(tf::DH, p.dh.id()));
    Proposal {
        number: 1,
        protocol: proto::IKE,
        spi: vec![],
        transforms: ts,
    }
}

/// Initiator `k`'s own inside address, 10.128.0.0/9 + k (one /32 each, TSi): its
/// responder's routes and policies are one per tunnel, none covering IKE's addresses.
pub fn own_selector(k: usize) -> Selector {
    let a = IpAddr::V4(Ipv4Addr::from(0x0a80_0000u32 + k as u32));
    Selector {
        protocol: 0,
        start_port: 0,
        end_port: 65535,
        start: a,
        end: a,
    }
}

/// The wire form of an ESP proposal (no PFS).
fn esp_wire(p: &EspProposal, spi: u32) -> Proposal {
    let (id, key_bits) = p.encr.id();
    let mut ts = vec![wire::Transform {
        kind: tf::ENCR,
        id,
        key_bits,
        unknown_attribute: false,
    }];
    let t = |kind, id| wire::Transform {
        kind,
        id,
        key_bits: None,
        unknown_attribute: false,
    };
    if let Some(i) = p.integ {
        ts.push(t(tf::INTEG, i.id()));
    }
    ts.push(t(tf::ESN, u16::from(p.esn)));
    Proposal {
        number: 1,
        protocol: proto::ESP,
        spi: spi.to_be_bytes().to_vec(),
        transforms: ts,
    }
}

fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    let _ = crypto::random_bytes(&mut b);
    b
}

/// This thread's user + system CPU time, s.
fn thread_cpu_s() -> f64 {
    // SAFETY: getrusage writes into the struct we pass, nothing else.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD is valid on Linux.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The generator: sockets bound, key shares made; [`Generator::setup`] then
/// [`Generator::hold`].
pub struct Generator {
    o: LoadOptions,
    socks: Vec<UdpSocket>,
    inis: Vec<Ini>,
    by_spi: HashMap<u64, usize>,
    pub report: LoadReport,
    buf: Vec<u8>,
}

impl Generator {
    /// Binds the sockets (in the calling thread's network namespace) and makes every
    /// initiator's key share.
    pub fn new(o: LoadOptions) -> Result<Generator> {
        if o.sources.is_empty() || o.tunnels == 0 {
            bail!("IKE load: no source addresses or no tunnels");
        }
        let n_socks = o.sockets.max(o.sources.len());
        let mut socks = Vec::with_capacity(n_socks);
        for k in 0..n_socks {
            let a = o.sources[k % o.sources.len()];
            let s = UdpSocket::bind(SocketAddr::new(a, 0))
                .with_context(|| format!("IKE load: binding a UDP socket to {a}"))?;
            s.set_nonblocking(true)?;
            socks.push(s);
        }
        let mut inis = Vec::with_capacity(o.tunnels);
        let mut by_spi = HashMap::with_capacity(o.tunnels);
        let now = Instant::now();
        for k in 0..o.tunnels {
            let share = KeyShare::generate(o.ike.dh)
                .map_err(|e| anyhow::anyhow!("IKE load: key share: {e}"))?;
            let mut spi = u64::from_be_bytes(random());
            while spi == 0 || by_spi.contains_key(&spi) {
                spi = u64::from_be_bytes(random());
            }
            by_spi.insert(spi, k);
            inis.push(Ini {
                st: St::Idle,
                sock: k % n_socks,
                spi_i: spi,
                spi_r: 0,
                share: Some(share),
                ni: random::<32>().to_vec(),
                init_req: vec![],
                cookie: None,
                keys: None,
                tx: None,
                rx: None,
                datagram: vec![],
                sent: now,
                sends: 0,
                peer_next: 0,
                last_answer: None,
                sample: None,
            });
        }
        if o.traffic > 0 {
            if !o.claim_nat {
                bail!("IKE load: traffic goes as ESP in UDP: it needs claim_nat");
            }
            let every = (o.tunnels / o.traffic.min(o.tunnels)).max(1);
            for i in inis.iter_mut().step_by(every).take(o.traffic) {
                i.sample = Some(Box::new(Sample {
                    ni: Vec::new(),
                    nr: Vec::new(),
                    spi_in: 0,
                    esp: None,
                    answered: 0,
                }));
            }
        }
        let report = LoadReport {
            tunnels: o.tunnels,
            sockets: n_socks,
            sources: o.sources.len(),
            ..LoadReport::default()
        };
        Ok(Generator {
            o,
            socks,
            inis,
            by_spi,
            report,
            buf: vec![0u8; 65_536],
        })
    }

    fn header(i: &Ini, exch: u8, id: u32, response: bool) -> Header {
        Header {
            spi_i: i.spi_i,
            spi_r: i.spi_r,
            next: 0,
            version: 0x20,
            exchange: exch,
            flags: flags::INITIATOR | if response { flags::RESPONSE } else { 0 },
            message_id: id,
            length: 0,
        }
    }

    fn send(&self, k: usize, data: &[u8]) {
        // A full socket buffer is a loss like any other: retransmission covers it.
        let _ = self.socks[self.inis[k].sock].send_to(data, self.o.responder);
    }

    fn fail(&mut self, k: usize, why: &str) {
        *self.report.failed.entry(why.to_string()).or_default() += 1;
        self.inis[k].st = St::Done;
        self.inis[k].keys = None;
        self.inis[k].tx = None;
        self.inis[k].rx = None;
    }

    fn send_init(&mut self, k: usize, now: Instant) {
        let i = &mut self.inis[k];
        let Some(share) = i.share.as_ref() else {
            return;
        };
        let mut ps = Vec::new();
        if let Some(c) = &i.cookie {
            ps.push(Payload::notify(notify::COOKIE, c.clone()));
        }
        ps.push(Payload::Sa(vec![ike_wire(&self.o.ike)]));
        ps.push(Payload::Ke {
            group: share.group().id(),
            data: share.public().to_vec(),
        });
        ps.push(Payload::Nonce(i.ni.clone()));
        if self.o.claim_nat {
            // §2.23: SHA-1 hashes; random ones match nothing, so "behind a NAT".
            ps.push(Payload::notify(
                notify::NAT_DETECTION_SOURCE_IP,
                random::<20>().to_vec(),
            ));
            ps.push(Payload::notify(
                notify::NAT_DETECTION_DESTINATION_IP,
                random::<20>().to_vec(),
            ));
        }
        let data = wire::encode(Self::header(i, exchange::IKE_SA_INIT, 0, false), &ps);
        i.init_req = data.clone();
        i.datagram = data;
        i.sent = now;
        i.sends = 1;
        i.st = St::Init;
        let d = std::mem::take(&mut self.inis[k].datagram);
        self.send(k, &d);
        self.inis[k].datagram = d;
    }

    fn on_init_response(&mut self, k: usize, raw: &[u8], msg: wire::Message, now: Instant) {
        let ps = &msg.payloads;
        if let Some(n) = wire::find_notify(ps, notify::COOKIE) {
            self.report.cookies += 1;
            self.inis[k].cookie = Some(n.data.clone());
            self.send_init(k, now);
            return;
        }
        if let Some(Payload::Notify(n)) = ps
            .iter()
            .find(|p| matches!(p, Payload::Notify(n) if n.kind < notify::FIRST_STATUS))
        {
            let why = notify::name(n.kind);
            self.fail(k, why);
            return;
        }
        let ke = ps.iter().find_map(|p| match p {
            Payload::Ke { data, .. } => Some(data),
            _ => None,
        });
        let nr = ps.iter().find_map(|p| match p {
            Payload::Nonce(n) => Some(n),
            _ => None,
        });
        let (Some(ke), Some(nr)) = (ke, nr) else {
            self.fail(k, "malformed");
            return;
        };
        let o = &self.o;
        let i = &mut self.inis[k];
        let Some(share) = i.share.take() else {
            return;
        };
        let suite = IkeSuite {
            encr: o.ike.encr,
            integ: o.ike.integ,
            prf: o.ike.prf,
            dh: o.ike.dh,
        };
        let spi_r = msg.header.spi_r;
        let keys = share
            .agree(ke)
            .ok()
            .and_then(|g| IkeKeys::derive(&suite, &g, &i.ni, nr, i.spi_i, spi_r).ok());
        let Some(keys) = keys else {
            self.fail(k, "crypto");
            return;
        };
        let (Ok(tx), Ok(rx)) = (
            SkCipher::new(o.ike.encr, o.ike.integ, &keys.sk_ei, &keys.sk_ai),
            SkCipher::new(o.ike.encr, o.ike.integ, &keys.sk_er, &keys.sk_ar),
        ) else {
            self.fail(k, "crypto");
            return;
        };
        i.spi_r = spi_r;
        // AUTH covers the IKE_SA_INIT request as sent, the responder's nonce and our ID.
        let octets =
            crypto::signed_octets(o.ike.prf, &i.init_req, nr, &keys.sk_pi, &o.local_id.body());
        let (method, auth, cert) = match &o.auth {
            LoadAuth::Psk(psk) => (
                wire::auth::PSK,
                crypto::psk_auth(o.ike.prf, psk, &octets).to_vec(),
                None,
            ),
            LoadAuth::Cert { cert, key, .. } => {
                match crypto::digital_signature_auth(key, &octets) {
                    Ok(a) => (wire::auth::DIGITAL_SIGNATURE, a, Some(cert)),
                    Err(_) => {
                        self.fail(k, "crypto");
                        return;
                    }
                }
            }
        };
        let i = &mut self.inis[k];
        // The responder's AUTH covers its response and our nonce: keep them in init_req.
        i.init_req = [raw, &i.ni[..]].concat();
        let child_spi = loop {
            let s = u32::from_be_bytes(random());
            if s >= 256 {
                break s;
            }
        };
        if let Some(sm) = i.sample.as_mut() {
            sm.ni = i.ni.clone();
            sm.nr = nr.clone();
            sm.spi_in = child_spi;
        }
        let mut inner = vec![Payload::IdI(o.local_id.clone())];
        if let Some(c) = cert {
            inner.push(Payload::Cert {
                encoding: wire::cert::X509,
                data: c.clone(),
            });
        }
        inner.extend([
            Payload::IdR(o.remote_id.clone()),
            Payload::Auth { method, data: auth },
            Payload::Sa(vec![esp_wire(&o.esp, child_spi)]),
            Payload::TsI(vec![own_selector(k)]),
            Payload::TsR(vec![Selector::any(false)]),
        ]);
        let (mut m, at) = wire::encode_sk(Self::header(i, exchange::IKE_AUTH, 1, false), &inner);
        let mut tx = tx;
        if tx.seal(&mut m, at, 4).is_err() {
            self.fail(k, "crypto");
            return;
        }
        i.keys = Some(keys);
        i.tx = Some(tx);
        i.rx = Some(rx);
        i.datagram = m;
        i.sent = now;
        i.sends = 1;
        i.st = St::Auth;
        let d = std::mem::take(&mut self.inis[k].datagram);
        self.send(k, &d);
        self.inis[k].datagram = d;
    }

    /// The IKE_AUTH response: the responder's AUTH checked, the child SA's answer read.
    fn on_auth_response(&mut self, k: usize, inner: &[Payload]) -> bool {
        if let Some(Payload::Notify(n)) = inner
            .iter()
            .find(|p| matches!(p, Payload::Notify(n) if n.kind < notify::FIRST_STATUS))
        {
            // An error without AUTH: the IKE SA failed; with AUTH only the child did.
            let child = inner.iter().any(|p| matches!(p, Payload::Auth { .. }));
            let why = format!(
                "{}{}",
                if child { "child_" } else { "" },
                notify::name(n.kind)
            );
            self.fail(k, &why);
            return false;
        }
        let id_r = inner.iter().find_map(|p| match p {
            Payload::IdR(i) => Some(i),
            _ => None,
        });
        let auth = inner.iter().find_map(|p| match p {
            Payload::Auth { data, .. } => Some(data),
            _ => None,
        });
        let (Some(id_r), Some(auth)) = (id_r, auth) else {
            self.fail(k, "malformed");
            return false;
        };
        let i = &self.inis[k];
        let Some(keys) = i.keys.as_ref() else {
            return false;
        };
        let (first, ni) = i.init_req.split_at(i.init_req.len() - i.ni.len());
        let octets = crypto::signed_octets(self.o.ike.prf, first, ni, &keys.sk_pr, &id_r.body());
        let method = inner.iter().find_map(|p| match p {
            Payload::Auth { method, .. } => Some(*method),
            _ => None,
        });
        let good = match &self.o.auth {
            LoadAuth::Psk(psk) => {
                method == Some(wire::auth::PSK)
                    && crypto::psk_auth(self.o.ike.prf, psk, &octets).as_slice() == auth.as_slice()
            }
            LoadAuth::Cert { responder_cert, .. } => method
                .is_some_and(|m| crypto::verify_auth(responder_cert, m, auth, &octets).is_ok()),
        };
        if !good {
            self.fail(k, "auth_mismatch");
            return false;
        }
        if !inner.iter().any(|p| matches!(p, Payload::Sa(_))) {
            self.fail(k, "no_child");
            return false;
        }
        if self.inis[k].sample.is_some() {
            self.key_sample(k, inner);
        }
        let i = &mut self.inis[k];
        i.st = St::Up;
        i.init_req = Vec::new();
        i.datagram = Vec::new();
        i.ni = Vec::new();
        i.peer_next = 0;
        true
    }

    /// Sampled tunnel `k`, established: its child SA's keys (§2.17), and the ESP SAs
    /// both ways (ESP in UDP between its socket and the responder's port 4500). A
    /// failure leaves it unkeyed: counted by [`Generator::traffic`] as not keyed.
    fn key_sample(&mut self, k: usize, inner: &[Payload]) {
        let spi_out = inner.iter().find_map(|p| match p {
            Payload::Sa(props) => props
                .first()
                .and_then(|pr| <[u8; 4]>::try_from(pr.spi.as_slice()).ok())
                .map(u32::from_be_bytes),
            _ => None,
        });
        let local = self.socks[self.inis[k].sock].local_addr().ok();
        let i = &mut self.inis[k];
        let (Some(keys), Some(sm), Some(spi_out), Some(local)) =
            (i.keys.as_ref(), i.sample.as_mut(), spi_out, local)
        else {
            return;
        };
        let Ok(ck) = crypto::child_keys(
            self.o.ike.prf,
            &keys.sk_d,
            None,
            &sm.ni,
            &sm.nr,
            self.o.esp.encr,
            self.o.esp.integ,
        ) else {
            return;
        };
        let enc = ipsec::config::encryption(&self.o.esp.encr.esp_name());
        let integ = ipsec::config::integrity(
            self.o
                .esp
                .integ
                .map_or(Some("none"), |i| i.esp_name())
                .unwrap_or("?"),
        );
        let (Some(enc), Some(integ)) = (enc, integ) else {
            return;
        };
        let responder = self.o.responder.ip();
        let sa = |spi, dir, e: &[u8], a: &[u8], src, dst, natt| {
            let mut c = ipsec::SaConfig::new(spi, dir, enc, e, integ, a);
            c.mode = ipsec::Mode::Tunnel { src, dst };
            c.natt = Some(natt);
            c.esn = self.o.esp.esn;
            ipsec::Sa::new(&c).ok().map(Box::new)
        };
        let out = sa(
            spi_out,
            ipsec::Direction::Outbound,
            &ck.encr_i,
            &ck.integ_i,
            local.ip(),
            responder,
            ipsec::NatT {
                src_port: local.port(),
                dst_port: ipsec::esp::NATT_PORT,
            },
        );
        let back = sa(
            sm.spi_in,
            ipsec::Direction::Inbound,
            &ck.encr_r,
            &ck.integ_r,
            responder,
            local.ip(),
            ipsec::NatT {
                src_port: ipsec::esp::NATT_PORT,
                dst_port: local.port(),
            },
        );
        sm.ni = Vec::new();
        sm.nr = Vec::new();
        if let (Some(out), Some(back)) = (out, back) {
            sm.esp = Some((out, back));
        }
    }

    /// Pings `to` from each keyed sampled tunnel's own inside address (its TSi, 10.128/9)
    /// `rounds` times, `gap` apart, through its child SA, and counts the replies that come
    /// back through it (decrypted with its inbound SA, from `to`, with its echo
    /// identifier). Answers the responder's IKE requests meanwhile.
    pub fn traffic(&mut self, to: Ipv4Addr, rounds: u16, gap: Duration) -> TrafficReport {
        let mut r = TrafficReport::default();
        let mut by_spi: HashMap<u32, usize> = HashMap::new();
        for (k, i) in self.inis.iter().enumerate() {
            if let Some(sm) = &i.sample {
                r.sampled += 1;
                if i.st == St::Up && sm.esp.is_some() {
                    r.keyed += 1;
                    by_spi.insert(sm.spi_in, k);
                }
            }
        }
        let responder = SocketAddr::new(self.o.responder.ip(), ipsec::esp::NATT_PORT);
        let mut frame = vec![0u8; 2048];
        for round in 0..rounds {
            for &k in by_spi.values() {
                let i = &mut self.inis[k];
                let (Some(sm), sock) = (i.sample.as_mut(), i.sock) else {
                    continue;
                };
                let Some((out, _)) = sm.esp.as_mut() else {
                    continue;
                };
                let IpAddr::V4(src) = own_selector(k).start else {
                    continue;
                };
                let ping = echo4(src, to, k as u16, round, true);
                // Headroom for the outer headers, the packet, tailroom for the trailer.
                let at = 128;
                frame[at..at + ping.len()].copy_from_slice(&ping);
                if let Ok((start, len)) = ipsec::esp::encrypt(out, &mut frame, at, ping.len()) {
                    // Outer IPv4 (20) and UDP (8): the socket adds its own.
                    if let Some(esp) = frame.get(start + 28..start + len) {
                        if self.socks[sock].send_to(esp, responder).is_ok() {
                            r.sent += 1;
                        }
                    }
                }
            }
            let until = Instant::now() + gap;
            while Instant::now() < until {
                self.receive_esp(Duration::from_millis(5), to, &by_spi, &mut r);
            }
        }
        r.answered = 0;
        for &k in by_spi.values() {
            if let Some(sm) = &self.inis[k].sample {
                r.answered += sm.answered;
                r.tunnels_answered += usize::from(sm.answered > 0);
            }
        }
        self.report.traffic = Some(r.clone());
        r
    }

    /// [`Generator::receive`] for the traffic phase: ESP from the responder's port 4500
    /// is decrypted and matched to its sampled tunnel; IKE is handled as ever.
    fn receive_esp(
        &mut self,
        wait: Duration,
        from: Ipv4Addr,
        by_spi: &HashMap<u32, usize>,
        r: &mut TrafficReport,
    ) {
        let mut frame = vec![0u8; 2048];
        for s in self.readable(wait) {
            for _ in 0..64 {
                let Ok((len, peer)) = self.socks[s].recv_from(&mut self.buf) else {
                    break;
                };
                let d = &self.buf[..len];
                if peer.port() != ipsec::esp::NATT_PORT {
                    self.on_datagram(len, Instant::now());
                    continue;
                }
                // From 4500: a keepalive (one byte), IKE after four zero bytes, or ESP.
                let Some(spi) = d
                    .get(..4)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                else {
                    continue;
                };
                if spi == 0 {
                    self.buf.copy_within(4..len, 0);
                    self.on_datagram(len - 4, Instant::now());
                    continue;
                }
                let Some(&k) = by_spi.get(&spi) else {
                    r.bad_esp += 1;
                    continue;
                };
                let (IpAddr::V4(src), IpAddr::V4(dst)) = (
                    peer.ip(),
                    self.socks[s].local_addr().map_or(peer.ip(), |a| a.ip()),
                ) else {
                    continue;
                };
                // Outer IPv4 and UDP headers in front, as the SA decrypts from the IP header.
                let total = 28 + len;
                if total > frame.len() {
                    r.bad_esp += 1;
                    continue;
                }
                let ip = ipv4_header(src, dst, 17, total);
                frame[..20].copy_from_slice(&ip);
                let lport = self.socks[s].local_addr().map_or(0, |a| a.port());
                frame[20..28].copy_from_slice(&[
                    (peer.port() >> 8) as u8,
                    peer.port() as u8,
                    (lport >> 8) as u8,
                    lport as u8,
                    ((8 + len) >> 8) as u8,
                    (8 + len) as u8,
                    0,
                    0,
                ]);
                frame[28..total].copy_from_slice(d);
                let Some(sm) = self.inis[k].sample.as_mut() else {
                    continue;
                };
                let Some((_, back)) = sm.esp.as_mut() else {
                    continue;
                };
                match ipsec::esp::decrypt(back, &mut frame, 0, total) {
                    Ok(inner) => {
                        let p = &frame[inner.start..inner.start + inner.len];
                        if is_echo_reply(p, from, k as u16) {
                            sm.answered += 1;
                        } else {
                            r.bad_esp += 1;
                        }
                    }
                    Err(_) => r.bad_esp += 1,
                }
            }
        }
    }

    /// A request of the responder (INFORMATIONAL: DPD, delete): answered empty (a delete
    /// of the IKE SA: the SA is gone).
    fn on_request(&mut self, k: usize, raw: &[u8], msg: &wire::Message) {
        let h = msg.header;
        let i = &self.inis[k];
        if i.st != St::Up || h.exchange != exchange::INFORMATIONAL {
            return;
        }
        if let Some((id, a)) = &i.last_answer {
            if *id == h.message_id {
                let a = a.clone();
                self.send(k, &a);
                return;
            }
        }
        if h.message_id != i.peer_next {
            return;
        }
        let (Some(enc), Some(rx)) = (msg.encrypted.as_ref(), i.rx.as_ref()) else {
            return;
        };
        let Ok(plain) = rx.open(raw, enc.at, enc.header_len) else {
            return;
        };
        let Ok(inner) = wire::parse_payloads(enc.first_inner, &plain) else {
            return;
        };
        let ike_deleted = inner
            .iter()
            .any(|p| matches!(p, Payload::Delete { protocol, .. } if *protocol == proto::IKE));
        let i = &mut self.inis[k];
        let (mut m, at) = wire::encode_sk(
            Self::header(i, exchange::INFORMATIONAL, h.message_id, true),
            &[],
        );
        let Some(tx) = i.tx.as_mut() else {
            return;
        };
        if tx.seal(&mut m, at, 4).is_err() {
            return;
        }
        i.peer_next = h.message_id.wrapping_add(1);
        i.last_answer = Some((h.message_id, m.clone()));
        self.report.informational_answered += 1;
        self.send(k, &m);
        if ike_deleted {
            self.inis[k].st = St::Done;
            self.report.deleted_by_responder += 1;
        }
    }

    /// One datagram from the responder; returns true when it established a tunnel.
    fn on_datagram(&mut self, len: usize, now: Instant) -> bool {
        let raw = self.buf[..len].to_vec();
        let Ok(msg) = wire::parse(&raw) else {
            return false;
        };
        let h = msg.header;
        let Some(&k) = self.by_spi.get(&h.spi_i) else {
            return false;
        };
        if !h.is_response() {
            self.on_request(k, &raw, &msg);
            return false;
        }
        match (self.inis[k].st, h.exchange, h.message_id) {
            (St::Init, exchange::IKE_SA_INIT, 0) => {
                self.on_init_response(k, &raw, msg, now);
                false
            }
            (St::Auth, exchange::IKE_AUTH, 1) if h.spi_r == self.inis[k].spi_r => {
                let Some(enc) = msg.encrypted.as_ref() else {
                    return false;
                };
                let Some(rx) = self.inis[k].rx.as_ref() else {
                    return false;
                };
                let Ok(plain) = rx.open(&raw, enc.at, enc.header_len) else {
                    return false;
                };
                match wire::parse_payloads(enc.first_inner, &plain) {
                    Ok(inner) => self.on_auth_response(k, &inner),
                    Err(_) => {
                        self.fail(k, "malformed");
                        false
                    }
                }
            }
            _ => false,
        }
    }

    /// The sockets with datagrams waiting, after at most `wait` (poll(2)).
    fn readable(&self, wait: Duration) -> Vec<usize> {
        let mut fds: Vec<libc::pollfd> = self
            .socks
            .iter()
            .map(|s| libc::pollfd {
                fd: s.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: fds is a valid array of fds.len() pollfd structs for the call's duration.
        let n = unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                wait.as_millis() as libc::c_int,
            )
        };
        if n <= 0 {
            return Vec::new();
        }
        fds.iter()
            .enumerate()
            .filter(|(_, f)| f.revents != 0)
            .map(|(s, _)| s)
            .collect()
    }

    /// Waits up to `wait` for datagrams and handles them all; returns the indices of
    /// tunnels established.
    fn receive(&mut self, wait: Duration, now: Instant, up: &mut Vec<Instant>) {
        for s in self.readable(wait) {
            // At most a batch per socket per round: the others get their turn.
            for _ in 0..64 {
                let got = self.socks[s].recv(&mut self.buf);
                match got {
                    Ok(len) => {
                        if self.on_datagram(len, now) {
                            up.push(Instant::now());
                        }
                    }
                    Err(_) => break,
                }
            }
        }
    }

    /// Sets every tunnel up: returns when all are established or failed, or at the
    /// time limit.
    pub fn setup(&mut self) -> &LoadReport {
        let cpu0 = thread_cpu_s();
        let t0 = Instant::now();
        let mut next = 0usize;
        let mut inflight: Vec<usize> = Vec::new();
        let mut up: Vec<Instant> = Vec::with_capacity(self.o.tunnels);
        let mut last_scan = t0;
        loop {
            let now = Instant::now();
            // New initiations: within the window, and on schedule with a rate.
            inflight.retain(|&k| matches!(self.inis[k].st, St::Init | St::Auth));
            while next < self.o.tunnels && inflight.len() < self.o.window {
                if let Some(r) = self.o.rate {
                    if now < t0 + Duration::from_secs_f64(next as f64 / r) {
                        break;
                    }
                }
                self.send_init(next, now);
                inflight.push(next);
                next += 1;
            }
            if next >= self.o.tunnels && inflight.is_empty() {
                break;
            }
            if now.duration_since(t0) > self.o.timeout {
                break;
            }
            let mut got = Vec::new();
            self.receive(Duration::from_millis(2), now, &mut got);
            up.extend(got);
            // Retransmissions, every 20 ms.
            let now = Instant::now();
            if now.duration_since(last_scan) >= Duration::from_millis(20) {
                last_scan = now;
                for &k in &inflight {
                    let i = &self.inis[k];
                    if !matches!(i.st, St::Init | St::Auth) {
                        continue;
                    }
                    let rto = self.o.retransmit * (1u32 << (i.sends - 1).min(10));
                    if now.duration_since(i.sent) < rto {
                        continue;
                    }
                    if i.sends >= self.o.tries {
                        self.inis[k].st = St::Done;
                        self.report.timeouts += 1;
                        continue;
                    }
                    let d = std::mem::take(&mut self.inis[k].datagram);
                    self.send(k, &d);
                    let i = &mut self.inis[k];
                    i.datagram = d;
                    i.sends += 1;
                    i.sent = now;
                    self.report.retransmits += 1;
                }
            }
        }
        // Anything still pending (or never started) at the time limit is a timeout.
        let pending = self
            .inis
            .iter()
            .filter(|i| matches!(i.st, St::Idle | St::Init | St::Auth))
            .count();
        self.report.timeouts += pending;
        self.report.established = up.len();
        let last = up.iter().max().copied().unwrap_or(t0);
        let setup = last.duration_since(t0).as_secs_f64();
        self.report.setup_s = setup;
        self.report.setup_per_s = if setup > 0.0 {
            up.len() as f64 / setup
        } else {
            0.0
        };
        self.report.time_to_n_s = (up.len() == self.o.tunnels).then_some(setup);
        up.sort();
        let tenth = up.len() / 10;
        if tenth > 0 {
            let mut prev = t0;
            for c in up.chunks(tenth).take(10) {
                let end = *c.last().unwrap_or(&prev);
                let d = end.duration_since(prev).as_secs_f64();
                self.report
                    .rate_by_tenth
                    .push(if d > 0.0 { c.len() as f64 / d } else { 0.0 });
                prev = end;
            }
        }
        self.report.generator_cpu_s = thread_cpu_s() - cpu0;
        &self.report
    }

    /// An IKE_SA_INIT flood (issue 27, item 6): every initiator sends its IKE_SA_INIT
    /// once, at `rate` per second (`None`: at once), and goes no further, as from a spoofed
    /// address: a COOKIE answer is not echoed, an SA answer is left half-open, nothing is
    /// sent again. Listens `linger` after the last send; what came back is counted.
    pub fn flood(&mut self, rate: Option<f64>, linger: Duration) -> FloodReport {
        let t0 = Instant::now();
        let mut r = FloodReport::default();
        let mut last_send = t0;
        let mut next = 0usize;
        loop {
            let now = Instant::now();
            while next < self.o.tunnels {
                if let Some(rate) = rate {
                    if now < t0 + Duration::from_secs_f64(next as f64 / rate) {
                        break;
                    }
                }
                self.send_init(next, now);
                self.inis[next].st = St::Done;
                r.sent += 1;
                next += 1;
                last_send = Instant::now();
            }
            if next >= self.o.tunnels && last_send.elapsed() >= linger {
                break;
            }
            self.flood_receive(Duration::from_millis(2), &mut r);
        }
        r.seconds = t0.elapsed().as_secs_f64();
        r
    }

    /// [`Generator::flood`]'s answers: counted by kind, nothing sent.
    fn flood_receive(&mut self, wait: Duration, r: &mut FloodReport) {
        for s in self.readable(wait) {
            while let Ok(len) = self.socks[s].recv(&mut self.buf) {
                let Ok(msg) = wire::parse(&self.buf[..len]) else {
                    r.other += 1;
                    continue;
                };
                let h = msg.header;
                if h.exchange != exchange::IKE_SA_INIT
                    || !h.is_response()
                    || !self.by_spi.contains_key(&h.spi_i)
                {
                    r.other += 1;
                } else if wire::find_notify(&msg.payloads, notify::COOKIE).is_some() {
                    r.cookies += 1;
                } else if msg.payloads.iter().any(|p| matches!(p, Payload::Sa(_))) {
                    r.half_open += 1;
                } else {
                    r.refused += 1;
                }
            }
        }
    }

    /// Tunnels up now (not deleted by the responder).
    pub fn up(&self) -> usize {
        self.inis.iter().filter(|i| i.st == St::Up).count()
    }

    /// Holds the tunnels for `d`: answers the responder's requests (DPD, deletes).
    pub fn hold(&mut self, d: Duration) -> &LoadReport {
        let t0 = Instant::now();
        let mut ignored = Vec::new();
        while t0.elapsed() < d {
            self.receive(Duration::from_millis(20), Instant::now(), &mut ignored);
        }
        self.report.hold_s += t0.elapsed().as_secs_f64();
        &self.report
    }
}

/// An IPv4 header (no options, DF, TTL 64) of a `total`-byte packet, checksum made.
fn ipv4_header(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, total: usize) -> [u8; 20] {
    let mut h = [0u8; 20];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    h[6] = 0x40;
    h[8] = 64;
    h[9] = proto;
    h[12..16].copy_from_slice(&src.octets());
    h[16..20].copy_from_slice(&dst.octets());
    let c = ::wire::checksum::checksum(&h).to_be_bytes();
    h[10..12].copy_from_slice(&c);
    h
}

/// An ICMP echo request (or reply) from `src` to `dst`, identifier `id`, sequence `seq`,
/// 32 bytes of data.
fn echo4(src: Ipv4Addr, dst: Ipv4Addr, id: u16, seq: u16, request: bool) -> Vec<u8> {
    let mut icmp = vec![if request { 8 } else { 0 }, 0, 0, 0];
    icmp.extend_from_slice(&id.to_be_bytes());
    icmp.extend_from_slice(&seq.to_be_bytes());
    icmp.extend((0..32u8).map(|b| b.wrapping_mul(7)));
    let c = ::wire::checksum::checksum(&icmp).to_be_bytes();
    icmp[2..4].copy_from_slice(&c);
    let mut p = ipv4_header(src, dst, 1, 20 + icmp.len()).to_vec();
    p.extend_from_slice(&icmp);
    p
}

/// Whether `p` is an IPv4 ICMP echo reply from `from` with identifier `id`.
fn is_echo_reply(p: &[u8], from: Ipv4Addr, id: u16) -> bool {
    let hl = usize::from(p.first().map_or(0, |b| b & 0x0f)) * 4;
    p.len() >= hl + 8
        && hl >= 20
        && p[9] == 1
        && p[12..16] == from.octets()
        && p[hl] == 0
        && p[hl + 4..hl + 6] == id.to_be_bytes()
}

/// `ike::config`'s IKE proposal of DH group `dh` with AES-128-GCM and the SHA-256 PRF.
pub fn proposal_for(dh: u16) -> Result<IkeProposal> {
    let g = match dh {
        31 => "curve25519",
        19 => "ecp256",
        20 => "ecp384",
        14 => "modp2048",
        _ => bail!("DH group {dh}: 31 (curve25519), 19 (ecp256), 20 (ecp384) or 14 (modp2048)"),
    };
    let s = format!("aes128gcm16-prfsha256-{g}");
    ike::config::parse_ike_proposal(&s).map_err(|e| anyhow::anyhow!("{s}: {e}"))
}

/// AES-128-GCM without ESN: the child SAs' proposal.
pub fn esp_proposal() -> Result<EspProposal> {
    ike::config::parse_esp_proposal("aes128gcm16").map_err(|e| anyhow::anyhow!("aes128gcm16: {e}"))
}
