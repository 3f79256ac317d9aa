//! Two engines against each other: the exchanges end to end, with their keys agreeing.

use super::*;
use crate::config::PeerConfig;

const PSK: &[u8] = b"a strong enough shared secret!";

fn peer(name: &str, local: &str, remote: &str, start: &str) -> Peer {
    PeerConfig {
        start: start.into(),
        ike_lifetime_s: 0,
        child_lifetime_s: 0,
        ..PeerConfig::new(name, local.parse().unwrap(), remote, &format!("t-{name}"))
    }
    .resolve(Some(PSK))
    .unwrap()
}

struct Pair {
    a: Engine,
    b: Engine,
    a_addr: SocketAddr,
    b_addr: SocketAddr,
    now: Instant,
    a_children: Vec<ChildSpec>,
    b_children: Vec<ChildSpec>,
    a_down: usize,
    b_down: usize,
    /// Every datagram sent, a's then b's.
    wire_a: Vec<Vec<u8>>,
    wire_b: Vec<Vec<u8>>,
}

/// `Engine::by_peer` holds exactly the SAs that name a peer, under its name (every test
/// of a pair checks it after each round of messages).
fn check_peer_index(e: &Engine) {
    let mut scan: HashMap<u64, HashSet<u64>> = HashMap::new();
    for (k, s) in &e.sas {
        if let Some(p) = &s.peer {
            let h = e.name_hash.hash_one(p.name.as_str());
            scan.entry(h).or_default().insert(*k);
        }
    }
    let index: HashMap<u64, HashSet<u64>> = e
        .by_peer
        .iter()
        .map(|(h, sas)| (*h, sas.iter().collect()))
        .collect();
    assert_eq!(index, scan, "the SAs by peer");
    // One SA is kept inline, never as a set of one.
    assert!(e.by_peer.values().all(|s| match s {
        PeerSas::One(_) => true,
        PeerSas::Many(set) => set.len() > 1,
    }));
}

impl Pair {
    fn new(a: Peer, b: Peer) -> Pair {
        let a_addr = SocketAddr::new(a.local, 500);
        let b_addr = SocketAddr::new(b.local, 500);
        Pair {
            a: Engine::new(vec![a]),
            b: Engine::new(vec![b]),
            a_addr,
            b_addr,
            now: Instant::now(),
            a_children: vec![],
            b_children: vec![],
            a_down: 0,
            b_down: 0,
            wire_a: vec![],
            wire_b: vec![],
        }
    }

    /// Delivers events until both are quiet (bounded); `drop_a` loses a's datagrams.
    fn run(&mut self, mut from_a: Vec<Event>, mut from_b: Vec<Event>, drop_a: bool) {
        for _ in 0..50 {
            check_peer_index(&self.a);
            check_peer_index(&self.b);
            if from_a.is_empty() && from_b.is_empty() {
                return;
            }
            let mut next_a = vec![];
            let mut next_b = vec![];
            for e in from_a.drain(..) {
                match e {
                    Event::Send { data, .. } => {
                        self.wire_a.push(data.clone());
                        if !drop_a {
                            self.b
                                .handle(self.now, self.b_addr, self.a_addr, &data, &mut next_b);
                        }
                    }
                    Event::ChildUp(c) => self.a_children.push(c),
                    Event::Keepalive { .. } => {}
                    Event::ChildDown { .. } => self.a_down += 1,
                }
            }
            for e in from_b.drain(..) {
                match e {
                    Event::Send { data, .. } => {
                        self.wire_b.push(data.clone());
                        self.a
                            .handle(self.now, self.a_addr, self.b_addr, &data, &mut next_a);
                    }
                    Event::ChildUp(c) => self.b_children.push(c),
                    Event::Keepalive { .. } => {}
                    Event::ChildDown { .. } => self.b_down += 1,
                }
            }
            from_a = next_a;
            from_b = next_b;
        }
        panic!("the engines did not settle in 50 rounds");
    }

    fn tick(&mut self, d: Duration) {
        self.now += d;
        let (mut ea, mut eb) = (vec![], vec![]);
        self.a.tick(self.now, &mut ea);
        self.b.tick(self.now, &mut eb);
        self.run(ea, eb, false);
    }
}

fn check_child_keys(p: &Pair) {
    let (ca, cb) = (&p.a_children[0], &p.b_children[0]);
    assert_eq!(ca.spi_out, cb.spi_in);
    assert_eq!(ca.spi_in, cb.spi_out);
    assert_eq!(*ca.key_out.encr, *cb.key_in.encr);
    assert_eq!(*ca.key_in.encr, *cb.key_out.encr);
    assert_ne!(*ca.key_in.encr, *ca.key_out.encr);
    assert_eq!(ca.encr, cb.encr);
}

fn establish(proposals_a: &[&str], proposals_b: &[&str]) -> Pair {
    let mut a = peer("b", "192.0.2.1", "192.0.2.2", "initiate");
    let mut b = peer("a", "192.0.2.2", "192.0.2.1", "respond");
    if !proposals_a.is_empty() {
        a.ike = proposals_a
            .iter()
            .map(|s| crate::config::parse_ike_proposal(s).unwrap())
            .collect();
    }
    if !proposals_b.is_empty() {
        b.ike = proposals_b
            .iter()
            .map(|s| crate::config::parse_ike_proposal(s).unwrap())
            .collect();
    }
    let mut p = Pair::new(a, b);
    let mut ev = vec![];
    p.a.initiate("b", p.now, &mut ev).unwrap();
    p.run(ev, vec![], false);
    p
}

#[test]
fn psk_every_ike_proposal() {
    for prop in [
        "aes128gcm16-prfsha256-curve25519",
        "aes256gcm16-prfsha384-ecp384",
        "chacha20poly1305-prfsha256-ecp256",
        "aes256-sha256-prfsha256-modp2048",
        "aes128-sha512-prfsha512-curve25519",
        "aes192-sha384-prfsha384-ecp256",
    ] {
        let p = establish(&[prop], &[prop]);
        assert_eq!(p.a.established(), 1, "{prop}");
        assert_eq!(p.b.established(), 1, "{prop}");
        assert_eq!(p.a_children.len(), 1, "{prop}");
        check_child_keys(&p);
        assert_eq!(p.b.half_open(), 0);
    }
}

#[test]
fn invalid_ke_then_retry() {
    // a guesses curve25519 first; b only takes ECP-256.
    let p = establish(
        &[
            "aes128gcm16-prfsha256-curve25519",
            "aes128gcm16-prfsha256-ecp256",
        ],
        &["aes128gcm16-prfsha256-ecp256"],
    );
    assert_eq!(p.b.counters.invalid_ke_sent, 1);
    assert_eq!(p.a.counters.invalid_ke_retried, 1);
    assert_eq!(p.a.established(), 1);
    check_child_keys(&p);
}

#[test]
fn no_proposal_chosen() {
    let p = establish(
        &["aes128gcm16-prfsha256-curve25519"],
        &["aes256-sha256-prfsha256-modp2048"],
    );
    assert_eq!(p.a.established(), 0);
    assert_eq!(p.b.counters.failed.no_proposal, 1);
    assert_eq!(p.a.counters.failed.no_proposal, 1);
}

#[test]
fn wrong_psk_fails_both_ways() {
    let a = peer("b", "192.0.2.1", "192.0.2.2", "initiate");
    let mut b = peer("a", "192.0.2.2", "192.0.2.1", "respond");
    b.psk = Zeroizing::new(b"another secret, just as strong".to_vec());
    let mut p = Pair::new(a, b);
    let mut ev = vec![];
    p.a.initiate("b", p.now, &mut ev).unwrap();
    p.run(ev, vec![], false);
    assert_eq!(p.b.counters.failed.authentication, 1);
    assert_eq!(p.a.counters.failed.peer_refused, 1);
    assert_eq!((p.a.established(), p.b.established()), (0, 0));
    assert!(p.a_children.is_empty() && p.b_children.is_empty());
}

#[test]
fn wrong_identity_is_unknown_peer() {
    let mut a = peer("b", "192.0.2.1", "192.0.2.2", "initiate");
    a.local_id = crate::config::parse_id("someone.else").unwrap();
    let b = peer("a", "192.0.2.2", "192.0.2.1", "respond");
    let mut p = Pair::new(a, b);
    let mut ev = vec![];
    p.a.initiate("b", p.now, &mut ev).unwrap();
    p.run(ev, vec![], false);
    assert_eq!(p.b.counters.failed.unknown_peer, 1);
    assert_eq!(p.b.established(), 0);
}

#[test]
fn retransmitted_requests_get_the_same_answer() {
    let mut p = establish(&[], &[]);
    // a's IKE_SA_INIT and IKE_AUTH again: b answers from what it stored.
    let init = p.wire_a[0].clone();
    let auth = p.wire_a[1].clone();
    let before = p.wire_b.len();
    let mut ev = vec![];
    p.b.handle(p.now, p.b_addr, p.a_addr, &auth, &mut ev);
    assert!(matches!(&ev[..], [Event::Send { data, .. }] if *data == p.wire_b[1]));
    ev.clear();
    p.b.handle(p.now, p.b_addr, p.a_addr, &init, &mut ev);
    // The half-open entry is gone once established: an old INIT opens nothing new
    // that could ever authenticate, and no child is installed twice.
    assert!(ev.iter().all(|e| matches!(e, Event::Send { .. })));
    assert_eq!(p.b.counters.answered_again, 1);
    assert_eq!(before, p.wire_b.len());
}

#[test]
fn lost_requests_are_retransmitted_then_given_up() {
    let a = peer("b", "192.0.2.1", "192.0.2.2", "initiate");
    let b = peer("a", "192.0.2.2", "192.0.2.1", "respond");
    let mut p = Pair::new(a, b);
    let mut ev = vec![];
    p.a.initiate("b", p.now, &mut ev).unwrap();
    p.run(ev, vec![], true);
    let mut sends = 1;
    for _ in 0..100 {
        p.now += Duration::from_secs(1);
        let mut ev = vec![];
        p.a.tick(p.now, &mut ev);
        sends += ev
            .iter()
            .filter(|e| matches!(e, Event::Send { .. }))
            .count();
        if p.a.counters.failed.timeout > 0 {
            break;
        }
    }
    assert_eq!(p.a.counters.retransmitted, u64::from(MAX_RETRANSMITS));
    assert_eq!(p.a.counters.failed.timeout, 1);
    assert_eq!(sends as u32, 1 + MAX_RETRANSMITS);
}

#[test]
fn dpd_and_delete() {
    let mut p = establish(&[], &[]);
    p.tick(Duration::from_secs(31));
    assert!(p.a.counters.dpd_sent >= 1);
    assert_eq!(p.a.established(), 1);
    let mut ev = vec![];
    assert_eq!(p.a.terminate("b", p.now, &mut ev).unwrap(), 1);
    p.run(ev, vec![], false);
    assert_eq!((p.a.established(), p.b.established()), (0, 0));
    assert_eq!((p.a_down, p.b_down), (1, 1));
    assert_eq!(p.b.counters.deletes_received, 1);
}

#[test]
fn dead_peer_is_noticed() {
    let mut p = establish(&[], &[]);
    // b vanishes: a's liveness checks go unanswered.
    p.b = Engine::new(vec![]);
    for _ in 0..120 {
        p.tick(Duration::from_secs(1));
    }
    assert_eq!(p.a.counters.failed.timeout, 1);
    assert_eq!(p.a_down, 1);
}

#[test]
fn dead_peer_is_noticed_after_its_retransmit_tries_and_an_initiator_starts_again() {
    let mut a = peer("b", "192.0.2.1", "192.0.2.2", "initiate");
    let mut b = peer("a", "192.0.2.2", "192.0.2.1", "respond");
    for x in [&mut a, &mut b] {
        x.dpd = Some(Duration::from_secs(2));
        x.retransmit_tries = 2;
    }
    let b_peer = b.clone();
    let mut p = Pair::new(a, b);
    let mut ev = vec![];
    p.a.initiate("b", p.now, &mut ev).unwrap();
    p.run(ev, vec![], false);
    assert_eq!(p.a.established(), 1);
    // b dies without a word: a checks after 2 s of silence, sends again after 1 and 2
    // more seconds, and gives up 4 s after that: 9 s.
    p.b = Engine::new(vec![]);
    let t0 = p.now;
    while p.a_down == 0 {
        p.tick(Duration::from_millis(100));
        assert!(p.now - t0 <= Duration::from_millis(9300), "not noticed");
    }
    assert!(p.now - t0 >= Duration::from_secs(9), "{:?}", p.now - t0);
    assert_eq!(p.a.counters.dpd_sent, 1);
    assert_eq!(p.a.counters.retransmitted, 2);
    assert_eq!(p.a.counters.dead_peers, 1);
    assert_eq!(p.a.counters.failed.timeout, 1);
    assert_eq!((p.a.established(), p.a.child_sas()), (0, 0));
    // b comes back: a (initiating) sets the SA up again, RETRY_AFTER later.
    p.b = Engine::new(vec![b_peer]);
    let t1 = p.now;
    while p.a.established() == 0 {
        p.tick(Duration::from_millis(100));
        assert!(
            p.now - t1 <= RETRY_AFTER + Duration::from_secs(1),
            "not again"
        );
    }
    assert_eq!(p.a.child_sas(), 1);
    assert_eq!(p.a.counters.dead_peers, 1);
}

#[test]
fn cookies_when_many_half_open() {
    let a = peer("b", "192.0.2.1", "192.0.2.2", "initiate");
    let b = peer("a", "192.0.2.2", "192.0.2.1", "respond");
    let mut p = Pair::new(a, b);
    p.b.set_cookie_threshold(0);
    let mut ev = vec![];
    p.a.initiate("b", p.now, &mut ev).unwrap();
    p.run(ev, vec![], false);
    assert_eq!(p.b.counters.cookies_sent, 1);
    assert_eq!(p.a.established(), 1);
    check_child_keys(&p);
}

#[test]
fn hostile_messages_are_counted() {
    let mut p = establish(&[], &[]);
    let auth = p.wire_a[1].clone();
    let mut ev = vec![];
    // A flipped bit in the encrypted part: integrity.
    let mut bad = auth.clone();
    let n = bad.len();
    bad[n - 5] ^= 1;
    // Message ID 1 was answered: change it to 2 so it is not a retransmission.
    bad[23] = 2;
    p.b.handle(p.now, p.b_addr, p.a_addr, &bad, &mut ev);
    assert!(ev.is_empty());
    // A far-off message ID.
    let mut far = auth.clone();
    far[23] = 9;
    p.b.handle(p.now, p.b_addr, p.a_addr, &far, &mut ev);
    assert!(ev.is_empty());
    assert_eq!(p.b.counters.dropped.integrity, 1);
    assert_eq!(p.b.counters.dropped.bad_message_id, 1);
    // Unknown SPI, truncated, bad version, unknown critical payload in IKE_SA_INIT.
    let mut other = auth.clone();
    other[8] ^= 0xff;
    p.b.handle(p.now, p.b_addr, p.a_addr, &other, &mut ev);
    p.b.handle(p.now, p.b_addr, p.a_addr, &auth[..20], &mut ev);
    assert_eq!(p.b.counters.dropped.unknown_spi, 1);
    assert_eq!(p.b.counters.dropped.truncated, 1);
    let h = Header {
        spi_i: 7,
        version: 0x20,
        exchange: exchange::IKE_SA_INIT,
        flags: flags::INITIATOR,
        ..Default::default()
    };
    let mut crit = wire::encode(
        h,
        &[Payload::Unknown {
            kind: 222,
            body: vec![],
        }],
    );
    crit[wire::HEADER_LEN + 1] = 0x80;
    p.b.handle(p.now, p.b_addr, p.a_addr, &crit, &mut ev);
    let reply = match &ev[..] {
        [Event::Send { data, .. }] => wire::parse(data).unwrap(),
        e => panic!("{e:?}"),
    };
    assert_eq!(
        wire::find_notify(&reply.payloads, notify::UNSUPPORTED_CRITICAL_PAYLOAD)
            .unwrap()
            .data,
        vec![222]
    );
    assert_eq!(p.b.counters.dropped.unsupported_critical, 1);
    // The established SA is untouched.
    assert_eq!(p.b.established(), 1);
}

#[test]
fn narrowing() {
    let any4 = Selector::any(false);
    let ten = Selector {
        protocol: 6,
        start_port: 80,
        end_port: 80,
        start: "10.0.0.0".parse().unwrap(),
        end: "10.0.0.255".parse().unwrap(),
    };
    assert_eq!(narrow(&[ten], &[any4, Selector::any(true)]), vec![ten]);
    assert_eq!(narrow(&[any4], &[ten]), vec![ten]);
    assert!(narrow(&[Selector::any(true)], &[ten]).is_empty());
}

#[test]
fn forced_encapsulation_moves_to_port_4500_with_keepalives() {
    let mut a = peer("b", "192.0.2.1", "192.0.2.2", "initiate");
    a.encap = true;
    a.keepalive = Duration::from_secs(5);
    let b = peer("a", "192.0.2.2", "192.0.2.1", "respond");
    let mut p = Pair::new(a, b);
    let mut ev = vec![];
    p.a.initiate("b", p.now, &mut ev).unwrap();
    // Deliver by hand to see the ports: IKE_SA_INIT on 500, then 4500.
    let mut ports = vec![];
    let mut from_a = ev;
    for _ in 0..10 {
        let mut next_b = vec![];
        for e in from_a.drain(..) {
            if let Event::Send {
                local,
                remote,
                data,
            } = e
            {
                ports.push((local.port(), remote.port()));
                p.b.handle(p.now, remote, local, &data, &mut next_b);
            } else if let Event::ChildUp(c) = e {
                p.a_children.push(c);
            }
        }
        let mut next_a = vec![];
        for e in next_b {
            if let Event::Send {
                local,
                remote,
                data,
            } = e
            {
                p.a.handle(p.now, remote, local, &data, &mut next_a);
            } else if let Event::ChildUp(c) = e {
                p.b_children.push(c);
            }
        }
        from_a = next_a;
        if from_a.is_empty() {
            break;
        }
    }
    assert_eq!(ports, vec![(500, 500), (NATT_PORT, NATT_PORT)]);
    assert_eq!(p.a.established(), 1);
    assert_eq!(p.b.established(), 1);
    assert_eq!(p.a.counters.nat_detected, 1);
    assert_eq!(
        p.b.counters.nat_detected, 1,
        "the responder sees the faked source hash"
    );
    assert_eq!(p.a_children[0].udp_encap, Some((NATT_PORT, NATT_PORT)));
    assert_eq!(p.b_children[0].udp_encap, Some((NATT_PORT, NATT_PORT)));
    // Keepalives from the initiator's 4500.
    p.now += Duration::from_secs(6);
    let mut ev = vec![];
    p.a.tick(p.now, &mut ev);
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::Keepalive { local, .. } if local.port() == NATT_PORT)),
        "{ev:?}"
    );
}

#[test]
fn a_nat_found_moves_ike_to_4500_and_esp_in_udp_to_the_port_the_nat_mapped() {
    // a behind a NAT (10.0.0.1, seen as 192.0.2.1 from ports 40500 and 44500), nothing
    // forced on either side.
    let a = peer("b", "10.0.0.1", "192.0.2.2", "initiate");
    let mut b = peer("a", "192.0.2.2", "192.0.2.1", "respond");
    // a's identity is its own (private) address.
    b.remote_id = a.local_id.clone();
    let mut p = Pair::new(a, b);
    let public = |port: u16| SocketAddr::new("192.0.2.1".parse().unwrap(), port + 40_000);
    let private = |port: u16| SocketAddr::new("10.0.0.1".parse().unwrap(), port);
    let mut ev = vec![];
    p.a.initiate("b", p.now, &mut ev).unwrap();
    let mut seen_by_b = vec![];
    let mut from_a = ev;
    for _ in 0..10 {
        let mut next_b = vec![];
        for e in from_a.drain(..) {
            match e {
                Event::Send {
                    local,
                    remote,
                    data,
                } => {
                    assert_eq!(local.ip(), private(0).ip());
                    seen_by_b.push((public(local.port()), remote));
                    p.b.handle(p.now, remote, public(local.port()), &data, &mut next_b);
                }
                Event::ChildUp(c) => p.a_children.push(c),
                _ => {}
            }
        }
        let mut next_a = vec![];
        for e in next_b {
            match e {
                Event::Send {
                    local,
                    remote,
                    data,
                } => {
                    // Back through the NAT's mapping only.
                    assert_eq!(remote.ip(), public(0).ip());
                    let to = private(remote.port() - 40_000);
                    p.a.handle(p.now, to, local, &data, &mut next_a);
                }
                Event::ChildUp(c) => p.b_children.push(c),
                _ => {}
            }
        }
        from_a = next_a;
        if from_a.is_empty() {
            break;
        }
    }
    assert_eq!(
        seen_by_b
            .iter()
            .map(|(f, t)| (f.port(), t.port()))
            .collect::<Vec<_>>(),
        vec![(40_500, 500), (44_500, NATT_PORT)]
    );
    assert_eq!((p.a.established(), p.b.established()), (1, 1));
    assert_eq!(
        (p.a.counters.nat_detected, p.b.counters.nat_detected),
        (1, 1)
    );
    // ESP in UDP: a from 4500 to 4500, b to the port a's 4500 is mapped to.
    assert_eq!(p.a_children[0].udp_encap, Some((NATT_PORT, NATT_PORT)));
    assert_eq!(p.b_children[0].udp_encap, Some((NATT_PORT, 44_500)));
    // Both keep the mapping open from their port 4500.
    p.now += Duration::from_secs(21);
    for e in [&mut p.a, &mut p.b] {
        let mut ev = vec![];
        e.tick(p.now, &mut ev);
        assert!(
            ev.iter()
                .any(|e| matches!(e, Event::Keepalive { local, .. } if local.port() == NATT_PORT)),
            "{ev:?}"
        );
    }
}

#[test]
fn no_nat_stays_on_500() {
    let p = establish(&[], &[]);
    assert_eq!(p.a.counters.nat_detected, 0);
    assert_eq!(p.b.counters.nat_detected, 0);
    assert_eq!(p.a_children[0].udp_encap, None);
}

// ---- Certificates (auth = "pubkey") ----

const CERTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/certs");

/// A directory of its own for a test's files, emptied first.
fn cert_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ike-engine-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The config of a peer authenticating (named `b`: a's peer, 192.0.2.1 initiating to
/// 192.0.2.2; named `a`: b's, responding) with the fixture `name` (`p256`, `rsa2048` with the
/// intermediate CA in its chain; `p384`, `ed25519` issued by the root) and trusting `ca`.
fn cert_config(
    dir: &std::path::Path,
    name: &str,
    cert: &str,
    ca: &str,
    remote_id: &str,
) -> PeerConfig {
    use std::os::unix::fs::PermissionsExt;
    // The certificate file as an operator writes it: with its intermediate, if any.
    let cert_file = if matches!(cert, "p256" | "rsa2048") {
        format!("{CERTS}/{cert}-chain.pem")
    } else {
        format!("{CERTS}/{cert}.pem")
    };
    // Git keeps the fixtures' keys 0644: the copy is the owner's only.
    let key_file = dir.join(format!("{cert}.key.pem"));
    std::fs::copy(format!("{CERTS}/{cert}.key.pem"), &key_file).unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (local, remote, start) = if name == "b" {
        ("192.0.2.1", "192.0.2.2", "initiate")
    } else {
        ("192.0.2.2", "192.0.2.1", "respond")
    };
    PeerConfig {
        remote_id: Some(remote_id.into()),
        auth: "pubkey".into(),
        psk: None,
        cert: Some(cert_file.into()),
        private_key: Some(key_file),
        ca: vec![format!("{CERTS}/{ca}.der").into()],
        start: start.into(),
        ike_lifetime_s: 0,
        child_lifetime_s: 0,
        ..PeerConfig::new(name, local.parse().unwrap(), remote, &format!("t-{name}"))
    }
}

fn dn(cn: &str) -> String {
    format!("dn:C=CH, O=ferrouter test, CN={cn}")
}

/// a (`cert_a`, trusting `ca_a`) initiates to b (`cert_b`, trusting `ca_b`).
fn cert_pair(tag: &str, cert_a: &str, ca_a: &str, cert_b: &str, ca_b: &str) -> (Peer, Peer) {
    let d = cert_dir(tag);
    let a = cert_config(&d, "b", cert_a, ca_a, &dn(&format!("{cert_b}.example")));
    let b = cert_config(&d, "a", cert_b, ca_b, &dn(&format!("{cert_a}.example")));
    let r = (a.resolve(None).unwrap(), b.resolve(None).unwrap());
    std::fs::remove_dir_all(&d).unwrap();
    r
}

fn run_pair(a: Peer, b: Peer) -> Pair {
    let mut p = Pair::new(a, b);
    let mut ev = vec![];
    p.a.initiate("b", p.now, &mut ev).unwrap();
    p.run(ev, vec![], false);
    p
}

#[test]
fn certificates_ecdsa_rsa_ed25519() {
    for (a, b) in [
        ("p256", "p384"),
        ("rsa2048", "ed25519"),
        ("p384", "rsa2048"),
    ] {
        let (pa, pb) = cert_pair(&format!("ok-{a}"), a, "root", b, "root");
        assert_eq!(
            pa.local_id.kind,
            wire::id::DER_ASN1_DN,
            "the subject by default"
        );
        let p = run_pair(pa, pb);
        assert_eq!(
            (p.a.established(), p.b.established()),
            (1, 1),
            "{a} with {b}"
        );
        assert_eq!(p.a_children.len(), 1, "{a} with {b}");
        check_child_keys(&p);
        // IKE_SA_INIT: b asks for certificates of the CA it trusts, both say which
        // hashes they sign with.
        let init_resp = wire::parse(&p.wire_b[0]).unwrap();
        assert!(init_resp
            .payloads
            .iter()
            .any(|x| matches!(x, Payload::CertReq { encoding: 4, data } if data.len() == 20)));
        for m in [&p.wire_a[0], &p.wire_b[0]] {
            let n = wire::find_notify(
                &wire::parse(m).unwrap().payloads,
                notify::SIGNATURE_HASH_ALGORITHMS,
            )
            .cloned()
            .unwrap();
            assert_eq!(n.data, SIGNATURE_HASHES);
        }
        // Each verified the other's chain once.
        assert_eq!((p.a.chain_cache.len(), p.b.chain_cache.len()), (1, 1));
        assert_eq!(
            p.a.counters.failed.authentication + p.b.counters.failed.authentication,
            0
        );
        assert_eq!(p.b.sa_info(p.now)[0].remote_id, dn(&format!("{a}.example")));
    }
}

#[test]
fn certificates_cached_per_chain() {
    let (pa, pb) = cert_pair("cache", "p256", "root", "p384", "root");
    let mut p = run_pair(pa, pb);
    assert_eq!(p.b.established(), 1);
    // Again: the responder takes the chain's verification from its cache.
    let mut ev = vec![];
    p.a.terminate("b", p.now, &mut ev).unwrap();
    p.run(ev, vec![], false);
    let mut ev = vec![];
    p.a.initiate("b", p.now, &mut ev).unwrap();
    p.run(ev, vec![], false);
    assert_eq!((p.a.established(), p.b.established()), (1, 1));
    assert_eq!(p.b.chain_cache.len(), 1);
    assert_eq!(p.b.counters.established, 2);
}

#[test]
fn certificate_of_an_untrusted_ca_fails_both_ways() {
    // The responder does not trust the initiator's CA.
    let (pa, pb) = cert_pair("ca-b", "p256", "root", "p384", "other");
    let p = run_pair(pa, pb);
    assert_eq!((p.a.established(), p.b.established()), (0, 0));
    assert_eq!(p.b.counters.failed.authentication, 1);
    assert_eq!(p.a.counters.failed.peer_refused, 1);
    let cached =
        p.b.chain_cache
            .values()
            .next()
            .unwrap()
            .1
            .clone()
            .unwrap_err();
    assert!(cached.contains("issuer is not trusted"), "{cached}");
    // The initiator does not trust the responder's.
    let (pa, pb) = cert_pair("ca-a", "p256", "other", "p384", "root");
    let p = run_pair(pa, pb);
    assert_eq!(p.a.established(), 0);
    assert_eq!(p.a.counters.failed.authentication, 1);
    assert!(p.a_children.is_empty());
}

#[test]
fn certificate_not_for_the_identity_fails() {
    // The responder claims an FQDN its certificate does not have.
    let (mut pa, mut pb) = cert_pair("id-b", "p256", "root", "p384", "root");
    pb.local_id = crate::config::parse_id("p256.example").unwrap();
    pa.remote_id = pb.local_id.clone();
    let p = run_pair(pa, pb);
    assert_eq!(p.a.established(), 0);
    assert_eq!(p.a.counters.failed.authentication, 1);
    // The initiator claims a DN that is not its certificate's subject.
    let (mut pa, mut pb) = cert_pair("id-a", "p256", "root", "p384", "root");
    pa.local_id = crate::config::parse_id(&dn("p384.example")).unwrap();
    pb.remote_id = pa.local_id.clone();
    let p = run_pair(pa, pb);
    assert_eq!(p.b.established(), 0);
    assert_eq!(p.b.counters.failed.authentication, 1);
    assert_eq!(p.a.counters.failed.peer_refused, 1);
}

#[test]
fn psk_peer_refuses_a_signature() {
    let (pa, _) = cert_pair("mix", "p256", "root", "p384", "root");
    let mut pb = peer("a", "192.0.2.2", "192.0.2.1", "respond");
    pb.remote_id = pa.local_id.clone();
    let p = run_pair(pa, pb);
    assert_eq!(p.b.established(), 0);
    assert_eq!(p.b.counters.failed.authentication, 1);
}

#[test]
fn certificate_config_errors_name_the_field() {
    use std::os::unix::fs::PermissionsExt;
    let d = cert_dir("cfg");
    let c = cert_config(&d, "b", "p256", "root", "192.0.2.2");
    assert!(c.resolve(None).is_ok());
    let err = |c: &PeerConfig| c.resolve(None).unwrap_err();
    let mut x = c.clone();
    std::fs::set_permissions(
        x.private_key.as_ref().unwrap(),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    assert!(
        err(&x).starts_with("private_key: ") && err(&x).contains("mode 0640"),
        "{}",
        err(&x)
    );
    std::fs::set_permissions(
        x.private_key.as_ref().unwrap(),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    x.cert = Some(format!("{CERTS}/p384.der").into());
    assert!(
        err(&x).starts_with("private_key: ") && err(&x).contains("is not the key of"),
        "{}",
        err(&x)
    );
    let mut x = c.clone();
    x.cert = Some(d.join("missing.pem"));
    assert!(err(&x).starts_with("cert: "), "{}", err(&x));
    let mut x = c.clone();
    x.ca = vec![];
    assert!(err(&x).starts_with("ca: "), "{}", err(&x));
    let mut x = c.clone();
    x.local_id = Some("p384.example".into());
    assert!(err(&x).starts_with("local_id: "), "{}", err(&x));
    x.local_id = Some(dn("p384.example"));
    assert!(
        err(&x).contains("is not the certificate's subject"),
        "{}",
        err(&x)
    );
    x.local_id = Some("p256.example".into());
    assert!(x.resolve(None).is_ok());
    let mut x = c.clone();
    x.psk = Some("b".into());
    assert!(err(&x).starts_with("psk: "), "{}", err(&x));
    let mut x = c.clone();
    x.crl = vec![format!("{CERTS}/root.der").into()];
    assert!(err(&x).starts_with("crl[0]: "), "{}", err(&x));
    x.crl = vec![format!("{CERTS}/root.crl").into()];
    assert!(x.resolve(None).is_ok());
    let mut x = c.clone();
    x.auth = "eap".into();
    assert!(err(&x).starts_with("auth: "), "{}", err(&x));
    std::fs::remove_dir_all(&d).unwrap();
}

// ---- CREATE_CHILD_SA ----

fn only_spi(e: &Engine) -> u64 {
    let v: Vec<u64> = e.sas.keys().copied().collect();
    assert_eq!(v.len(), 1, "one IKE SA");
    v[0]
}

fn check_rekeyed(p: &Pair) {
    assert_eq!(p.a.counters.child_rekeys, 1);
    assert_eq!(p.b.counters.child_rekeys, 1);
    assert_eq!((p.a_children.len(), p.b_children.len()), (2, 2));
    let (na, nb) = (&p.a_children[1], &p.b_children[1]);
    assert_eq!(na.spi_out, nb.spi_in);
    assert_eq!(na.spi_in, nb.spi_out);
    assert_eq!(*na.key_out.encr, *nb.key_in.encr);
    assert_eq!(*na.key_in.encr, *nb.key_out.encr);
    assert_ne!(
        *na.key_out.encr, *p.a_children[0].key_out.encr,
        "fresh keys"
    );
    // Make-before-break: the old child went only after the new one was in, on both sides.
    assert_eq!((p.a_down, p.b_down), (1, 1));
    for e in [&p.a, &p.b] {
        let sa = &e.sas[&only_spi(e)];
        assert_eq!(sa.children.len(), 1);
    }
    assert_eq!(p.a.sas[&only_spi(&p.a)].children[0].spi_in, na.spi_in);
}

#[test]
fn child_rekey_by_either_side() {
    // The original initiator rekeys.
    let mut p = establish(&[], &[]);
    let old_in = p.a_children[0].spi_in;
    let mut ev = vec![];
    let spi = only_spi(&p.a);
    p.a.rekey_child(spi, old_in, p.now, &mut ev);
    p.run(ev, vec![], false);
    check_rekeyed(&p);
    // The responder rekeys.
    let mut p = establish(&[], &[]);
    let old_in = p.b_children[0].spi_in;
    let mut ev = vec![];
    let spi = only_spi(&p.b);
    p.b.rekey_child(spi, old_in, p.now, &mut ev);
    assert!(the_sa(&p.b).rekeying());
    p.run(vec![], ev, false);
    assert_eq!(p.b.counters.child_rekeys, 1);
    assert_eq!((p.a_down, p.b_down), (1, 1));
    assert!(the_sa(&p.b).rare.is_none(), "rekey state left");
    assert_eq!(
        the_sa(&p.b).children.capacity(),
        1,
        "room for the old child kept"
    );
    assert_eq!(
        the_sa(&p.a).children.capacity(),
        1,
        "room for the old child kept"
    );
    let (na, nb) = (&p.a_children[1], &p.b_children[1]);
    assert_eq!(na.spi_out, nb.spi_in);
    assert_eq!(*na.key_out.encr, *nb.key_in.encr);
}

#[test]
fn child_rekey_with_pfs() {
    let mut a = peer("b", "192.0.2.1", "192.0.2.2", "initiate");
    let mut b = peer("a", "192.0.2.2", "192.0.2.1", "respond");
    for x in [&mut a, &mut b] {
        x.esp = vec![crate::config::parse_esp_proposal("aes256gcm16-ecp256").unwrap()];
    }
    let mut p = Pair::new(a, b);
    let mut ev = vec![];
    p.a.initiate("b", p.now, &mut ev).unwrap();
    p.run(ev, vec![], false);
    assert_eq!(p.a_children.len(), 1, "IKE_AUTH's child takes no DH");
    let old_in = p.a_children[0].spi_in;
    let mut ev = vec![];
    let spi = only_spi(&p.a);
    p.a.rekey_child(spi, old_in, p.now, &mut ev);
    // The request carries a KE of group 19.
    let sent = match &ev[..] {
        [Event::Send { data, .. }] => data.clone(),
        e => panic!("{e:?}"),
    };
    p.run(ev, vec![], false);
    check_rekeyed(&p);
    assert!(sent.len() > 150, "KE payload in the request");
}

#[test]
fn child_lifetime_rekeys_before_it_ends() {
    let mut a = peer("b", "192.0.2.1", "192.0.2.2", "initiate");
    a.child_lifetime = Some(Duration::from_secs(100));
    a.dpd = None;
    let mut b = peer("a", "192.0.2.2", "192.0.2.1", "respond");
    b.child_lifetime = Some(Duration::from_secs(100));
    b.dpd = None;
    let mut p = Pair::new(a, b);
    let mut ev = vec![];
    p.a.initiate("b", p.now, &mut ev).unwrap();
    p.run(ev, vec![], false);
    p.tick(Duration::from_secs(80));
    assert_eq!(p.a.counters.child_rekeys, 0);
    p.tick(Duration::from_secs(11));
    check_rekeyed(&p);
    // Once: the new child is young.
    p.tick(Duration::from_secs(5));
    assert_eq!(p.a.counters.child_rekeys, 1);
}

#[test]
fn rekey_of_an_unknown_child_is_refused() {
    let mut p = establish(&[], &[]);
    let spi = only_spi(&p.a);
    // Make a believe it has a child b does not know.
    let sa = p.a.sas.get_mut(&spi).unwrap();
    sa.children[0].spi_out ^= 1;
    sa.children[0].spi_in ^= 1;
    let old_in = sa.children[0].spi_in;
    let _ = sa;
    let mut ev = vec![];
    p.a.rekey_child(spi, old_in, p.now, &mut ev);
    // b looks the child up by its own outbound SPI (our inbound): not found.
    p.run(ev, vec![], false);
    assert_eq!(p.a.counters.failed.peer_refused, 1);
    assert_eq!(p.a.counters.child_rekeys, 0);
    assert_eq!(p.a.sas[&spi].children.len(), 1, "the old child stays");
}

// ---- IKE SA rekey ----

/// The one IKE SA an engine has (after a rekey settles), checked established.
fn the_sa(e: &Engine) -> &IkeSa {
    let spi = only_spi(e);
    let sa = &e.sas[&spi];
    assert_eq!(sa.state, State::Established);
    sa
}

/// After an IKE rekey settled: one SA on each side, new SPIs that agree, keys that agree,
/// the child SA moved to it and nothing changed in the data plane.
fn check_ike_rekeyed(p: &Pair, old: (u64, u64), rekeys: u64) {
    let (a, b) = (the_sa(&p.a), the_sa(&p.b));
    assert_eq!((a.spi_i, a.spi_r), (b.spi_i, b.spi_r));
    assert_ne!((a.spi_i, a.spi_r), old, "new SPIs");
    assert_ne!(a.initiator, b.initiator);
    // (SK_e and SK_a are in the SK ciphers only: check_new_sa_works uses them.)
    assert!(!a.sk_d.is_empty());
    assert_eq!(*a.sk_d, *b.sk_d);
    assert_eq!((a.next_id, b.next_id), (0, 0), "message IDs start again");
    assert!(a.rare.is_none() && b.rare.is_none(), "rekey state left");
    assert_eq!(a.children.capacity(), a.children.len());
    assert_eq!(b.children.capacity(), b.children.len());
    assert_eq!(a.children.len(), 1);
    assert_eq!(b.children.len(), 1);
    assert_eq!(a.children[0].spi_in, p.a_children[0].spi_in);
    assert_eq!(b.children[0].spi_in, p.b_children[0].spi_in);
    assert_eq!((p.a_children.len(), p.b_children.len()), (1, 1));
    assert_eq!((p.a_down, p.b_down), (0, 0), "no child SA touched");
    assert_eq!(
        (p.a.counters.ike_rekeys, p.b.counters.ike_rekeys),
        (rekeys, rekeys)
    );
}

fn spis(e: &Engine) -> (u64, u64) {
    let sa = the_sa(e);
    (sa.spi_i, sa.spi_r)
}

/// The new SA works: liveness checks both ways, a child rekey, then a delete.
fn check_new_sa_works(p: &mut Pair) {
    let before = (p.a.counters.dpd_sent, p.b.counters.dpd_sent);
    p.tick(Duration::from_secs(31));
    assert!(p.a.counters.dpd_sent > before.0 && p.b.counters.dpd_sent > before.1);
    assert_eq!(
        (p.a.counters.failed.timeout, p.b.counters.failed.timeout),
        (0, 0)
    );
    assert_eq!(
        (
            p.a.counters.dropped.integrity,
            p.b.counters.dropped.integrity
        ),
        (0, 0)
    );
    let spi = only_spi(&p.a);
    let old_in = p.a_children[0].spi_in;
    let mut ev = vec![];
    p.a.rekey_child(spi, old_in, p.now, &mut ev);
    p.run(ev, vec![], false);
    check_rekeyed(p);
    let mut ev = vec![];
    assert_eq!(p.a.terminate("b", p.now, &mut ev).unwrap(), 1);
    p.run(ev, vec![], false);
    assert_eq!((p.a.sas.len(), p.b.sas.len()), (0, 0));
    assert_eq!((p.a_down, p.b_down), (2, 2));
}

#[test]
fn ike_rekey_by_the_original_initiator() {
    let mut p = establish(&[], &[]);
    let old = spis(&p.a);
    let mut ev = vec![];
    p.a.rekey_ike(old.0, None, p.now, &mut ev);
    p.run(ev, vec![], false);
    check_ike_rekeyed(&p, old, 1);
    assert!(
        the_sa(&p.a).initiator,
        "the rekey's initiator is the new SA's"
    );
    let (sk_d, kold) = (&the_sa(&p.a).sk_d, &p.a_children[0]);
    assert_ne!(sk_d[..], kold.key_out.encr[..]);
    check_new_sa_works(&mut p);
}

#[test]
fn ike_rekey_by_the_original_responder() {
    let mut p = establish(&[], &[]);
    let old = spis(&p.b);
    let mut ev = vec![];
    p.b.rekey_ike(old.1, None, p.now, &mut ev);
    p.run(vec![], ev, false);
    check_ike_rekeyed(&p, old, 1);
    assert!(the_sa(&p.b).initiator && !the_sa(&p.a).initiator);
    // And again, by the other side: SK_d of the second comes from the first's.
    let old = spis(&p.a);
    let sk_d = the_sa(&p.a).sk_d.clone();
    let mut ev = vec![];
    p.a.rekey_ike(old.1, None, p.now, &mut ev);
    p.run(ev, vec![], false);
    check_ike_rekeyed(&p, old, 2);
    assert_ne!(*the_sa(&p.a).sk_d, *sk_d);
    check_new_sa_works(&mut p);
}

#[test]
fn ike_rekey_keys_follow_section_2_18() {
    let mut p = establish(
        &["aes256-sha256-prfsha384-ecp384"],
        &["aes256-sha256-prfsha384-ecp384"],
    );
    let old = spis(&p.a);
    let old_sk_d = the_sa(&p.a).sk_d.clone();
    let mut ev = vec![];
    p.a.rekey_ike(old.0, None, p.now, &mut ev);
    // Our request: an IKE proposal with our new 8-byte SPI, a nonce and a KE of the group.
    let spi_new = p.a.sas[&old.0]
        .rare
        .as_ref()
        .and_then(|r| r.ike_rekey.as_ref())
        .unwrap()
        .new_spi;
    p.run(ev, vec![], false);
    let sa = the_sa(&p.a);
    assert_eq!(sa.spi_i, spi_new);
    // SKEYSEED = prf(SK_d (old), g^ir (new) | Ni | Nr): recomputed from b's side of the
    // exchange would need g^ir; instead both sides' keys agree and differ from a fresh
    // derivation without the old SK_d (a rekeyed SA keeps no nonces).
    let suite = suite_of(sa.suite.as_ref().unwrap());
    let fresh = IkeKeys::derive(
        &suite,
        b"not the shared secret",
        &[],
        &[],
        sa.spi_i,
        sa.spi_r,
    )
    .unwrap();
    assert_ne!(fresh.sk_d[..], sa.sk_d[..]);
    assert_ne!(*old_sk_d, *sa.sk_d);
    check_ike_rekeyed(&p, old, 1);
}

#[test]
fn ike_lifetime_rekeys_before_it_ends() {
    let mut a = peer("b", "192.0.2.1", "192.0.2.2", "initiate");
    let mut b = peer("a", "192.0.2.2", "192.0.2.1", "respond");
    for x in [&mut a, &mut b] {
        x.ike_lifetime = Some(Duration::from_secs(100));
        x.dpd = None;
    }
    let mut p = Pair::new(a, b);
    let mut ev = vec![];
    p.a.initiate("b", p.now, &mut ev).unwrap();
    p.run(ev, vec![], false);
    let old = spis(&p.a);
    // The initiator rekeys between 80 and 90 s, the responder not before 90 s.
    p.tick(Duration::from_secs(79));
    assert_eq!(p.a.counters.ike_rekeys, 0);
    for _ in 0..11 {
        p.tick(Duration::from_secs(1));
    }
    check_ike_rekeyed(&p, old, 1);
    assert!(the_sa(&p.a).initiator);
    // The new SA lives on past the old one's end, and is rekeyed in its turn.
    p.tick(Duration::from_secs(20));
    assert_eq!(p.a.established(), 1);
    let old = spis(&p.a);
    for _ in 0..80 {
        p.tick(Duration::from_secs(1));
    }
    check_ike_rekeyed(&p, old, 2);
    assert_eq!(p.a.counters.failed, FailCounters::default());
}

#[test]
fn ike_sa_not_rekeyed_ends_at_its_lifetime() {
    let mut a = peer("b", "192.0.2.1", "192.0.2.2", "respond");
    let mut b = peer("a", "192.0.2.2", "192.0.2.1", "respond");
    a.ike_lifetime = Some(Duration::from_secs(100));
    a.dpd = None;
    b.dpd = None;
    let mut p = Pair::new(a, b);
    let mut ev = vec![];
    p.a.initiate("b", p.now, &mut ev).unwrap();
    p.run(ev, vec![], false);
    // b refuses every rekey: no IKE proposal of a's is b's any more.
    let spi_b = only_spi(&p.b);
    let mut other = (**p.b.sas[&spi_b].peer.as_ref().unwrap()).clone();
    other.ike =
        vec![crate::config::parse_ike_proposal("aes256-sha512-prfsha512-modp2048").unwrap()];
    p.b.sas.get_mut(&spi_b).unwrap().peer = Some(Arc::new(other));
    p.tick(Duration::from_secs(91));
    assert_eq!(p.b.counters.failed.no_proposal, 1);
    assert_eq!(p.a.counters.failed.peer_refused, 1);
    assert_eq!(p.a.established(), 1, "still up after a refused rekey");
    p.tick(Duration::from_secs(10));
    assert_eq!((p.a.established(), p.b.established()), (0, 0));
    assert_eq!((p.a_down, p.b_down), (1, 1));
}

/// Both sides ask at once: whichever wins, one new SA is left with the child SA, on both.
#[test]
fn simultaneous_ike_rekeys_leave_one_sa() {
    let mut wins = [0, 0];
    for _ in 0..12 {
        let mut p = establish(&[], &[]);
        let old = spis(&p.a);
        let (mut ea, mut eb) = (vec![], vec![]);
        p.a.rekey_ike(old.0, None, p.now, &mut ea);
        p.b.rekey_ike(old.1, None, p.now, &mut eb);
        p.run(ea, eb, false);
        check_ike_rekeyed(&p, old, 1);
        assert_eq!(p.a.counters.ike_rekey_collisions, 1);
        assert_eq!(p.b.counters.ike_rekey_collisions, 1);
        wins[usize::from(the_sa(&p.a).initiator)] += 1;
        assert_eq!(p.a.counters.failed, FailCounters::default());
        assert_eq!(
            p.a.counters.dropped.unknown_spi + p.b.counters.dropped.unknown_spi,
            0
        );
    }
    // Random nonces: each side won some (12 fair draws: all one way has odds 1 in 2048).
    assert!(wins[0] > 0 && wins[1] > 0, "{wins:?}");
}

/// The datagrams of `ev`.
fn sent(ev: &[Event]) -> Vec<Vec<u8>> {
    ev.iter()
        .filter_map(|e| match e {
            Event::Send { data, .. } => Some(data.clone()),
            _ => None,
        })
        .collect()
}

/// a finishes its rekey before b's request comes: a answers it TEMPORARY_FAILURE, b
/// learns from that (or from the Delete of the old SA, whichever comes first) that a's
/// new SA is the one.
#[test]
fn ike_rekey_collision_only_one_side_sees() {
    for delete_first in [false, true] {
        let mut p = establish(&[], &[]);
        let old = spis(&p.a);
        let (mut ea, mut eb) = (vec![], vec![]);
        p.a.rekey_ike(old.0, None, p.now, &mut ea);
        p.b.rekey_ike(old.1, None, p.now, &mut eb);
        let (a_req, b_req) = (sent(&ea).remove(0), sent(&eb).remove(0));
        let (na, nb) = (p.a_addr, p.b_addr);
        let mut ev = vec![];
        p.b.handle(p.now, nb, na, &a_req, &mut ev);
        let b_answer = sent(&ev).remove(0);
        ev.clear();
        p.a.handle(p.now, na, nb, &b_answer, &mut ev);
        let a_delete = sent(&ev).remove(0);
        ev.clear();
        p.a.handle(p.now, na, nb, &b_req, &mut ev);
        let a_tempfail = sent(&ev).remove(0);
        let reply = |p: &mut Pair, d: &[u8]| {
            let mut ev = vec![];
            p.b.handle(p.now, nb, na, d, &mut ev);
            p.run(vec![], ev, false);
        };
        if delete_first {
            reply(&mut p, &a_delete);
            reply(&mut p, &a_tempfail);
        } else {
            reply(&mut p, &a_tempfail);
            reply(&mut p, &a_delete);
        }
        p.tick(Duration::from_secs(1));
        check_ike_rekeyed(&p, old, 1);
        assert!(the_sa(&p.a).initiator, "a's rekey stays");
        assert_eq!(p.b.counters.ike_rekey_collisions, 1);
    }
}

#[test]
fn ike_rekey_waits_for_a_child_rekey() {
    let mut p = establish(&[], &[]);
    let old = spis(&p.a);
    let (mut ea, mut eb) = (vec![], vec![]);
    p.b.rekey_child(old.1, p.b_children[0].spi_in, p.now, &mut eb);
    p.a.rekey_ike(old.0, None, p.now, &mut ea);
    p.run(ea, eb, false);
    // b was rekeying a child: TEMPORARY_FAILURE (§2.25.2); a tries again soon.
    assert_eq!(p.b.counters.child_rekeys, 1);
    assert_eq!(p.a.counters.ike_rekeys, 0);
    assert!(p.a.sas[&old.0].rekey_at.is_some());
    p.tick(Duration::from_secs(4));
    assert_eq!(p.a.counters.ike_rekeys, 1);
    assert_eq!(p.b.counters.ike_rekeys, 1);
    assert_eq!(the_sa(&p.a).children.len(), 1);
    assert_eq!(the_sa(&p.b).children.len(), 1);
    assert_eq!(the_sa(&p.a).children[0].spi_in, p.a_children[1].spi_in);
}

#[test]
fn ike_rekey_takes_the_group_the_peer_wants() {
    let mut p = establish(
        &[
            "aes128gcm16-prfsha256-curve25519",
            "aes128gcm16-prfsha256-ecp256",
        ],
        &["aes128gcm16-prfsha256-ecp256"],
    );
    let old = spis(&p.a);
    let before = p.a.counters.invalid_ke_retried;
    let mut ev = vec![];
    p.a.rekey_ike(old.0, Some(Dh::Curve25519), p.now, &mut ev);
    p.run(ev, vec![], false);
    assert_eq!(p.a.counters.invalid_ke_retried, before + 1);
    check_ike_rekeyed(&p, old, 1);
    assert_eq!(the_sa(&p.a).suite.unwrap().dh, Dh::Ecp256);
}

#[test]
fn retransmitted_ike_rekey_request_gets_the_same_answer() {
    let mut p = establish(&[], &[]);
    let old = spis(&p.a);
    let mut ev = vec![];
    p.a.rekey_ike(old.0, None, p.now, &mut ev);
    let req = sent(&ev).remove(0);
    let mut first = vec![];
    p.b.handle(p.now, p.b_addr, p.a_addr, &req, &mut first);
    let mut again = vec![];
    p.b.handle(p.now, p.b_addr, p.a_addr, &req, &mut again);
    assert_eq!(sent(&first), sent(&again));
    assert_eq!(p.b.counters.answered_again, 1);
    assert_eq!(p.b.sas.len(), 2, "one new SA, not two");
    p.run(vec![], first, false);
    check_ike_rekeyed(&p, old, 1);
    // Once a deleted the old SA, a late copy finds no SA.
    let mut ev = vec![];
    p.b.handle(p.now, p.b_addr, p.a_addr, &req, &mut ev);
    assert!(ev.is_empty());
    assert_eq!(p.b.counters.dropped.unknown_spi, 1);
}

// ---- IKE fragmentation (RFC 7383) ----

/// Both sides' IKE_AUTH in fragments of at most 576-byte IPv4 datagrams: certificates
/// with an intermediate CA (RSA) one way, ECDSA the other.
#[test]
fn large_ike_auth_goes_in_fragments_both_ways() {
    let (mut pa, mut pb) = cert_pair("frag", "rsa2048", "root", "p384", "root");
    pa.fragment_size = 576;
    pb.fragment_size = 576;
    let p = run_pair(pa, pb);
    assert_eq!((p.a.established(), p.b.established()), (1, 1));
    check_child_keys(&p);
    for m in [&p.wire_a[0], &p.wire_b[0]] {
        let ps = wire::parse(m).unwrap().payloads;
        assert!(wire::find_notify(&ps, notify::IKEV2_FRAGMENTATION_SUPPORTED).is_some());
    }
    // Every datagram after IKE_SA_INIT fits 576 bytes of IP (less 20 + 8 of headers).
    for m in p.wire_a[1..].iter().chain(&p.wire_b[1..]) {
        assert!(m.len() <= 576 - 28, "{} bytes", m.len());
    }
    let fragments = |w: &[Vec<u8>]| {
        w.iter()
            .filter(|m| {
                wire::parse(m)
                    .unwrap()
                    .encrypted
                    .is_some_and(|e| e.fragment.is_some())
            })
            .count() as u64
    };
    for (e, w, peer_w) in [(&p.a, &p.wire_a, &p.wire_b), (&p.b, &p.wire_b, &p.wire_a)] {
        assert_eq!(e.counters.messages_fragmented, 1, "{:?}", e.counters);
        assert_eq!(e.counters.fragments_sent, fragments(w));
        assert!(
            e.counters.fragments_sent >= 2,
            "{}",
            e.counters.fragments_sent
        );
        assert_eq!(e.counters.messages_reassembled, 1);
        assert_eq!(e.counters.fragments_received, fragments(peer_w));
        assert_eq!(e.counters.dropped, DropCounters::default());
        assert_eq!(e.reasm_bytes, 0);
    }
}

#[test]
fn small_messages_and_unwilling_peers_are_not_fragmented() {
    // PSK: IKE_AUTH is small at the default 1280.
    let p = establish(&[], &[]);
    assert_eq!(
        p.a.counters.messages_fragmented + p.b.counters.messages_fragmented,
        0
    );
    // A peer that does not announce fragmentation gets whole messages, however large.
    let (mut pa, mut pb) = cert_pair("nofrag", "rsa2048", "root", "p384", "root");
    pa.fragment_size = 576;
    pb.fragment_size = 576;
    let mut p = Pair::new(pa, pb);
    let mut ev = vec![];
    p.a.initiate("b", p.now, &mut ev).unwrap();
    let Event::Send { data, .. } = &ev[0] else {
        panic!("{ev:?}")
    };
    let mut m = wire::parse(data).unwrap();
    m.payloads.retain(
        |x| !matches!(x, Payload::Notify(n) if n.kind == notify::IKEV2_FRAGMENTATION_SUPPORTED),
    );
    let stripped = wire::encode(m.header, &m.payloads);
    let spi = only_spi(&p.a);
    p.a.sas.get_mut(&spi).unwrap().setup().init_req = stripped.clone();
    let mut eb = vec![];
    p.b.handle(p.now, p.b_addr, p.a_addr, &stripped, &mut eb);
    p.run(vec![], eb, false);
    assert_eq!(p.a.established(), 1);
    assert_eq!(
        p.a.counters.messages_fragmented + p.b.counters.messages_fragmented,
        0
    );
    assert!(p.wire_a[0..].iter().any(|m| m.len() > 576));
}

/// An SKF message of a's SA for b, sealed with a's keys: fragment `n` of `total` of
/// request `id` carrying `chunk`.
fn forge_fragment(p: &mut Pair, id: u32, (n, total): (u16, u16), chunk: &[u8]) -> Vec<u8> {
    let spi = only_spi(&p.a);
    let sa = p.a.sas.get_mut(&spi).unwrap();
    let h = sa.header(exchange::INFORMATIONAL, id, false);
    let (mut m, at) = wire::encode_skf(h, wire::ptype::VENDOR, n, total, chunk);
    sa.tx.as_mut().unwrap().seal(&mut m, at, 8).unwrap();
    m
}

/// The plaintext of an INFORMATIONAL request carrying one Vendor ID payload of `len`
/// bytes, and its three thirds.
fn vendor_request(len: usize) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut plain = vec![];
    wire::write_payloads(
        &[Payload::Vendor(vec![0x5a; len])],
        wire::ptype::NONE,
        &mut plain,
    );
    let third = plain.len().div_ceil(3);
    let parts = plain.chunks(third).map(<[u8]>::to_vec).collect();
    (plain, parts)
}

#[test]
fn hostile_fragments_are_counted_and_bounded() {
    let mut p = establish(&[], &[]);
    let (ia, ib) = (p.a_addr, p.b_addr);
    let id = p.b.sas[&only_spi(&p.b)].peer_next;
    let (_, parts) = vendor_request(3000);
    let deliver = |p: &mut Pair, m: &[u8]| {
        let mut ev = vec![];
        p.b.handle(p.now, ib, ia, m, &mut ev);
        sent(&ev).len()
    };
    // More fragments than allowed; numbered past the total; numbered 0.
    let m = forge_fragment(&mut p, id, (1, MAX_FRAGMENTS + 1), &parts[0]);
    assert_eq!(deliver(&mut p, &m), 0);
    let m = forge_fragment(&mut p, id, (4, 3), &parts[0]);
    assert_eq!(deliver(&mut p, &m), 0);
    let m = forge_fragment(&mut p, id, (0, 3), &parts[0]);
    assert_eq!(deliver(&mut p, &m), 0);
    assert_eq!(p.b.counters.dropped.fragment_out_of_range, 3);
    // A forged fragment is not kept.
    let mut m = forge_fragment(&mut p, id, (1, 3), &parts[0]);
    let last = m.len() - 1;
    m[last] ^= 1;
    assert_eq!(deliver(&mut p, &m), 0);
    assert_eq!(p.b.counters.dropped.integrity, 1);
    assert_eq!(p.b.reasm_bytes, 0);
    // A duplicate, a smaller total, then the message whole in any order.
    let m2 = forge_fragment(&mut p, id, (2, 3), &parts[1]);
    assert_eq!(deliver(&mut p, &m2), 0);
    assert_eq!(deliver(&mut p, &m2), 0);
    assert_eq!(p.b.counters.dropped.fragment_duplicate, 1);
    let m = forge_fragment(&mut p, id, (1, 2), &parts[0]);
    assert_eq!(deliver(&mut p, &m), 0);
    assert_eq!(p.b.counters.dropped.fragment_out_of_range, 4);
    let m3 = forge_fragment(&mut p, id, (3, 3), &parts[2]);
    assert_eq!(deliver(&mut p, &m3), 0);
    let m1 = forge_fragment(&mut p, id, (1, 3), &parts[0]);
    assert_eq!(deliver(&mut p, &m1), 1, "answered once whole");
    assert_eq!(p.b.counters.messages_reassembled, 1);
    assert_eq!(p.b.reasm_bytes, 0);
    // Its retransmission: answered again at fragment 1 only.
    assert_eq!(deliver(&mut p, &m3), 0);
    assert_eq!(deliver(&mut p, &m1), 1);
    assert_eq!(p.b.counters.answered_again, 1);
    // The next request: a larger total starts afresh (the sender made smaller pieces).
    let id = id + 1;
    let m = forge_fragment(&mut p, id, (1, 2), &parts[0]);
    assert_eq!(deliver(&mut p, &m), 0);
    for (k, part) in parts.iter().enumerate() {
        let m = forge_fragment(&mut p, id, (k as u16 + 1, 3), part);
        assert_eq!(deliver(&mut p, &m), usize::from(k == 2));
    }
    // Too big to ever be whole: given up.
    let id = id + 1;
    let big = vec![0u8; 40_000];
    let m = forge_fragment(&mut p, id, (1, 3), &big);
    assert_eq!(deliver(&mut p, &m), 0);
    let m = forge_fragment(&mut p, id, (2, 3), &big);
    assert_eq!(deliver(&mut p, &m), 0);
    assert_eq!(p.b.counters.dropped.fragment_too_big, 1);
    assert_eq!(p.b.reasm_bytes, 0);
    // Fragments that never complete are dropped after the timeout.
    let m = forge_fragment(&mut p, id, (1, 3), &parts[0]);
    assert_eq!(deliver(&mut p, &m), 0);
    assert!(p.b.reasm_bytes > 0);
    p.now += REASSEMBLY_TIMEOUT;
    let mut ev = vec![];
    p.b.tick(p.now, &mut ev);
    assert_eq!(p.b.counters.dropped.fragment_timeout, 1);
    assert_eq!(p.b.reasm_bytes, 0);
    // Fragments on an SA that did not negotiate them are not expected.
    let spi_b = only_spi(&p.b);
    p.b.sas.get_mut(&spi_b).unwrap().frag = false;
    let before = p.b.counters.dropped.unexpected;
    let m = forge_fragment(&mut p, id, (1, 3), &parts[0]);
    assert_eq!(deliver(&mut p, &m), 0);
    assert_eq!(p.b.counters.dropped.unexpected, before + 1);
    assert_eq!(p.b.established(), 1, "the SA is untouched");
    assert_eq!(p.b.counters.failed, FailCounters::default());
}

/// A bare established SA (our SPI 2) to feed fragments to.
fn bare_engine() -> Engine {
    let mut e = Engine::new(vec![]);
    let at: SocketAddr = "192.0.2.1:500".parse().unwrap();
    let mut sa = IkeSa::new(
        None,
        false,
        (1, 2),
        (at, at),
        State::Established,
        Instant::now(),
    );
    sa.frag = true;
    e.sas.insert(2, sa);
    e
}

proptest::proptest! {
    /// Fragments in any order, with duplicates and stray ones of another total: the
    /// message comes out whole, byte for byte, exactly when its last missing fragment
    /// comes; each duplicate is counted; nothing stays held.
    #[test]
    fn reassembly_in_any_order(
        len in 1usize..6000,
        chunk in 1usize..1500,
        picks in proptest::collection::vec(0usize..64, 0..120),
        strays in proptest::collection::vec((0usize..120, 1u16..4), 0..4),
    ) {
        let mut e = bare_engine();
        let now = Instant::now();
        let msg: Vec<u8> = (0..len).map(|k| (k * 7 + 3) as u8).collect();
        let parts: Vec<&[u8]> = msg.chunks(chunk).collect();
        let total = parts.len();
        proptest::prop_assume!(total <= usize::from(MAX_FRAGMENTS));
        let h = Header { message_id: 5, exchange: exchange::INFORMATIONAL, ..Default::default() };
        // Every fragment once, then the random picks (duplicates), in an order the picks
        // also scramble.
        let mut order: Vec<usize> = (0..total).collect();
        for (k, p) in picks.iter().enumerate() {
            order.swap(k % total, p % total);
            order.push(p % total);
        }
        let mut seen = vec![false; total];
        let mut done = None;
        let mut dups = 0;
        for (step, k) in order.iter().copied().enumerate() {
            if done.is_some() {
                // After completion the same fragments would open a new message.
                break;
            }
            for (at, t) in &strays {
                if *at == step && usize::from(*t) < total && seen.iter().any(|s| *s) {
                    // A smaller total than the message's: refused, nothing changes.
                    let r = e.reassemble(2, &h, (1, *t), 9, Zeroizing::new(vec![1]), now);
                    proptest::prop_assert!(r.is_none());
                }
            }
            let r = e.reassemble(
                2,
                &h,
                (k as u16 + 1, total as u16),
                wire::ptype::VENDOR,
                Zeroizing::new(parts[k].to_vec()),
                now,
            );
            if seen[k] {
                dups += 1;
            }
            seen[k] = true;
            if let Some((first, whole)) = r {
                proptest::prop_assert!(seen.iter().all(|s| *s), "whole only at the end");
                proptest::prop_assert_eq!(first, wire::ptype::VENDOR);
                proptest::prop_assert_eq!(&whole[..], &msg[..]);
                done = Some(step);
            } else {
                proptest::prop_assert!(seen.iter().any(|s| !*s));
            }
        }
        proptest::prop_assert!(done.is_some());
        proptest::prop_assert_eq!(e.counters.dropped.fragment_duplicate, dups);
        proptest::prop_assert_eq!(e.counters.messages_reassembled, 1);
        // Whatever the stray pieces after completion started is released with the SA.
        let mut ev = vec![];
        e.remove_sa(2, &mut ev);
        proptest::prop_assert_eq!(e.reasm_bytes, 0);
    }
}

/// A child Delete from the peer that crossed the IKE rekey (sent on the old IKE SA) still
/// finds the child, now on the new SA.
#[test]
fn child_delete_crossing_an_ike_rekey_finds_the_child() {
    let mut p = establish(&[], &[]);
    let old = spis(&p.a);
    let (ia, ib) = (p.a_addr, p.b_addr);
    let mut ev = vec![];
    p.a.rekey_ike(old.0, None, p.now, &mut ev);
    let mut eb = vec![];
    p.b.handle(p.now, ib, ia, &sent(&ev)[0], &mut eb);
    let mut ea = vec![];
    p.a.handle(p.now, ia, ib, &sent(&eb)[0], &mut ea);
    assert_eq!(p.a.counters.ike_rekeys, 1);
    // b, on the old SA, deletes its child.
    let b_in = p.b_children[0].spi_in;
    let mut eb = vec![];
    p.b.send_request(
        old.1,
        exchange::INFORMATIONAL,
        Asked::DeleteChild(b_in),
        &[Payload::Delete {
            protocol: proto::ESP,
            spis: vec![b_in.to_be_bytes().to_vec()],
        }],
        p.now,
        &mut eb,
    );
    let mut ea = vec![];
    p.a.handle(p.now, ia, ib, &sent(&eb)[0], &mut ea);
    assert!(
        ea.iter()
            .any(|e| matches!(e, Event::ChildDown { spi_out, .. } if *spi_out == b_in)),
        "{ea:?}"
    );
    let new_a =
        p.a.sas
            .values()
            .find(|s| s.state == State::Established)
            .unwrap();
    assert!(new_a.children.is_empty());
}

/// Issue 27 (a million SAs at a few KiB each): what an established SA holds stays small.
/// The sizes are a regression guard (they may only go down); the heap parts are checked
/// by what is left once established.
#[test]
fn an_established_sa_holds_little() {
    use std::mem::size_of;
    assert!(size_of::<IkeSa>() <= 360, "IkeSa: {}", size_of::<IkeSa>());
    assert!(size_of::<Child>() <= 96, "Child: {}", size_of::<Child>());
    assert_eq!(size_of::<Option<Stamp>>(), 8);
    assert_eq!(size_of::<Option<LastResponse>>(), 24);
    assert!(
        size_of::<SkCipher>() <= 56,
        "SkCipher: {}",
        size_of::<SkCipher>()
    );
    assert!(
        size_of::<Selectors>() <= 24,
        "Selectors: {}",
        size_of::<Selectors>()
    );
    let mut p = establish(&[], &[]);
    p.tick(Duration::from_millis(100));
    // A liveness check each way (dpd_s 30) and its answer, then quiet: one live timer
    // entry per SA all along, none left stale by the exchanges.
    p.tick(Duration::from_secs(31));
    assert_eq!((p.a.timers.len(), p.b.timers.len()), (1, 1));
    for _ in 0..3 {
        p.tick(Duration::from_millis(1500));
    }
    assert!(p.a.counters.dpd_sent + p.b.counters.dpd_sent >= 1);
    for e in [&p.a, &p.b] {
        let sa = the_sa(e);
        assert_eq!(sa.state, State::Established);
        assert!(sa.setup.is_none(), "setup material kept");
        assert!(sa.pending.is_none());
        assert!(sa.rare.is_none(), "rekey or fragment state kept");
        assert!(!sa.sk_d.is_empty());
        let [c] = &sa.children[..] else {
            panic!("{} children", sa.children.len())
        };
        let installed = if std::ptr::eq(e, &p.a) {
            &p.a_children[0]
        } else {
            &p.b_children[0]
        };
        assert_eq!(c.local_ts.to_vec(), installed.local_ts);
        assert_eq!(c.remote_ts.to_vec(), installed.remote_ts);
        assert_eq!(e.timers.len(), 1, "timer entries");
    }
    // A stamp is its instant, to the nanosecond.
    let t = p.now + Duration::from_nanos(123_456_789);
    assert_eq!(Stamp::of(t).instant(), t);
    assert!(Stamp::of(t) < Stamp::of(t + Duration::from_nanos(1)));
    // One selector (the usual tunnel, a subnet each side) is kept inline.
    let one = Selector {
        protocol: 6,
        start_port: 80,
        end_port: 443,
        start: "10.1.2.0".parse().unwrap(),
        end: "10.1.2.255".parse().unwrap(),
    };
    let kept = Selectors::new(&[one]);
    assert!(matches!(kept, Selectors::V4 { .. }), "{kept:?}");
    assert_eq!(kept.to_vec(), [one]);
    // Others as they came.
    for v in [
        vec![],
        vec![Selector::any(true)],
        vec![one, Selector::any(false)],
    ] {
        assert_eq!(Selectors::new(&v).to_vec(), v);
    }
    // The answer to the last request is kept as one datagram, as it was sent.
    let b = the_sa(&p.b);
    let Some(kept @ LastResponse::One { id, body, .. }) = &b.last_response else {
        panic!("no single-datagram response kept");
    };
    assert_eq!(id.wrapping_add(1), b.peer_next);
    let [again] = &kept.datagrams((b.spi_i, b.spi_r))[..] else {
        panic!("not one datagram");
    };
    assert_eq!(again.len(), body.len() + 28);
    assert!(p.wire_b.iter().any(|d| d == again), "not the same bytes");
    // A datagram whose header would not come back the same is kept whole.
    let mut odd = again.clone();
    odd[27] ^= 1;
    let kept = LastResponse::new(*id, std::slice::from_ref(&odd), (b.spi_i, b.spi_r));
    assert!(matches!(kept, LastResponse::Whole(_)));
    assert_eq!(kept.datagrams((b.spi_i, b.spi_r)), [odd]);
}

/// a asks for a virtual IP (CP) of b, a responder for anyone with `pools`.
fn vip_pair(pools: &[&str]) -> Pair {
    let a = peer("b", "192.0.2.1", "192.0.2.2", "initiate");
    let mut b = peer("a", "192.0.2.2", "192.0.2.1", "respond");
    b.remote = None;
    b.pools = pools
        .iter()
        .map(|s| crate::pool::Prefix::parse(s).unwrap())
        .collect();
    let mut p = Pair::new(a, b);
    p.a.ask_vip = Some(vec![]);
    p
}

fn vip_connect(p: &mut Pair) {
    let mut ev = vec![];
    p.a.initiate("b", p.now, &mut ev).unwrap();
    p.run(ev, vec![], false);
}

fn host(a: &str) -> Selector {
    Selector::host(a.parse().unwrap())
}

#[test]
fn a_virtual_ip_is_leased_and_the_peers_selectors_narrowed_to_it() {
    let mut p = vip_pair(&["10.200.0.0/24"]);
    vip_connect(&mut p);
    assert_eq!((p.a.established(), p.b.established()), (1, 1));
    assert_eq!(
        p.b.sa_info(p.now)[0].virtual_ip.as_deref(),
        Some("10.200.0.1")
    );
    assert_eq!(p.b.leases(), 1);
    // The initiator proposed 0.0.0.0/0 and ::/0 as its side: narrowed to its address.
    let (ca, cb) = (&p.a_children[0], &p.b_children[0]);
    assert_eq!(cb.remote_ts, [host("10.200.0.1")]);
    assert_eq!(ca.local_ts, [host("10.200.0.1")]);
    assert!(cb.by_destination);
    check_child_keys(&p);
    // The CP(CFG_REPLY) was in b's IKE_AUTH response (seen through b's SA's keys: the
    // initiator took the narrowed selectors, so it read the reply's message whole).
    assert_eq!(p.b.counters.failed.pool_exhausted, 0);
    // A child rekey keeps the peer's side to its address.
    let old_in = p.a_children[0].spi_in;
    let spi = only_spi(&p.a);
    let mut ev = vec![];
    p.a.rekey_child(spi, old_in, p.now, &mut ev);
    p.run(ev, vec![], false);
    assert_eq!(p.b_children.len(), 2);
    assert_eq!(p.b_children[1].remote_ts, [host("10.200.0.1")]);
}

#[test]
fn a_peer_with_pools_that_asks_nothing_keeps_its_selectors() {
    let mut p = vip_pair(&["10.200.0.0/24"]);
    p.a.ask_vip = None;
    vip_connect(&mut p);
    assert_eq!(p.b.leases(), 0);
    assert_eq!(p.b.sa_info(p.now)[0].virtual_ip, None);
    assert_eq!(p.b_children[0].remote_ts.len(), 2, "{:?}", p.b_children[0]);
}

#[test]
fn an_exhausted_pool_answers_internal_address_failure_without_a_child() {
    let mut p = vip_pair(&["10.200.0.9/32"]);
    p.b.pools.get_mut("a").unwrap().lease4().unwrap();
    vip_connect(&mut p);
    assert_eq!(p.b.counters.failed.pool_exhausted, 1);
    assert!(p.b_children.is_empty() && p.a_children.is_empty());
    assert_eq!(p.b.leases(), 1);
    assert!(p.b.sa_info(p.now).iter().all(|s| s.virtual_ip.is_none()));
}

#[test]
fn a_malformed_cp_is_counted_and_refused() {
    let mut p = vip_pair(&["10.200.0.0/24"]);
    // a's CP carries a 3-byte INTERNAL_IP4_ADDRESS.
    p.a.ask_vip = Some(vec![10, 0, 0]);
    vip_connect(&mut p);
    assert_eq!(p.b.counters.failed.cp_malformed, 1);
    assert_eq!((p.b.established(), p.b.leases(), p.b.sas.len()), (0, 0, 0));
    assert!(p.b_children.is_empty() && p.a_children.is_empty());
    // The address it would like (4 bytes) is fine (and not honoured: the pool's first).
    let mut p = vip_pair(&["10.200.0.0/24"]);
    p.a.ask_vip = Some(vec![10, 200, 0, 77]);
    vip_connect(&mut p);
    assert_eq!(
        p.b.sa_info(p.now)[0].virtual_ip.as_deref(),
        Some("10.200.0.1")
    );
}

#[test]
fn the_lease_goes_back_on_delete_and_is_leased_again() {
    let mut p = vip_pair(&["10.200.0.8/30"]);
    vip_connect(&mut p);
    assert_eq!(
        p.b.sa_info(p.now)[0].virtual_ip.as_deref(),
        Some("10.200.0.9")
    );
    let mut ev = vec![];
    p.a.terminate("b", p.now, &mut ev).unwrap();
    p.run(ev, vec![], false);
    assert_eq!((p.b.established(), p.b.leases()), (0, 0));
    p.a.retry_at.clear();
    vip_connect(&mut p);
    // The pool's next fresh address first, then the one given back.
    assert_eq!(
        p.b.sa_info(p.now)[0].virtual_ip.as_deref(),
        Some("10.200.0.10")
    );
    assert_eq!(p.b.leases(), 1);
}

#[test]
fn a_reconnecting_peer_with_initial_contact_is_leased_again() {
    let mut p = vip_pair(&["10.200.0.9/32"]);
    vip_connect(&mut p);
    assert_eq!(p.b.leases(), 1);
    // a restarts (its SAs forgotten) and connects again, with INITIAL_CONTACT: its old
    // SA on b goes, and with it the only address, leased to the new SA.
    let a = p.a.peers[0].as_ref().clone();
    p.a = Engine::new(vec![a]);
    p.a.ask_vip = Some(vec![]);
    vip_connect(&mut p);
    assert_eq!(p.b.sas.len(), 1);
    assert_eq!(
        p.b.sa_info(p.now)[0].virtual_ip.as_deref(),
        Some("10.200.0.9")
    );
    assert_eq!(p.b.leases(), 1);
    assert_eq!(p.b.counters.failed.pool_exhausted, 0);
}

#[test]
fn the_lease_is_kept_across_an_ike_rekey_and_released_when_the_peer_dies() {
    for by_b in [false, true] {
        let mut p = vip_pair(&["10.200.0.0/24"]);
        vip_connect(&mut p);
        let old = spis(&p.b);
        let mut ev = vec![];
        if by_b {
            p.b.rekey_ike(old.1, None, p.now, &mut ev);
            p.run(vec![], ev, false);
        } else {
            p.a.rekey_ike(old.0, None, p.now, &mut ev);
            p.run(ev, vec![], false);
        }
        assert_ne!(spis(&p.b), old);
        assert_eq!(p.b.sas.len(), 1);
        assert_eq!(
            p.b.sa_info(p.now)[0].virtual_ip.as_deref(),
            Some("10.200.0.1")
        );
        assert_eq!(p.b.leases(), 1);
        // a vanishes: b's liveness checks go unanswered, the SA and its lease go.
        p.a = Engine::new(vec![]);
        for _ in 0..120 {
            p.tick(Duration::from_secs(1));
        }
        assert_eq!(p.b.counters.failed.timeout, 1);
        assert_eq!((p.b.sas.len(), p.b.leases()), (0, 0));
    }
}

#[test]
fn pools_stay_with_their_leases_across_a_reload_of_the_same_peers() {
    let mut p = vip_pair(&["10.200.0.0/24"]);
    vip_connect(&mut p);
    let peers: Vec<Peer> = p.b.peers.iter().map(|x| x.as_ref().clone()).collect();
    let mut ev = vec![];
    p.b.set_peers(peers.clone(), p.now, &mut ev);
    assert_eq!(p.b.leases(), 1);
    // Its pools changed: its SA is deleted, the new pool starts empty.
    let mut changed = peers;
    changed[0].pools = vec![crate::pool::Prefix::parse("10.201.0.0/24").unwrap()];
    p.b.set_peers(changed, p.now, &mut ev);
    p.run(vec![], ev, false);
    assert_eq!((p.b.established(), p.b.leases()), (0, 0));
}

#[test]
fn an_ipv6_virtual_ip_is_leased_and_the_peers_selectors_narrowed_to_it() {
    let mut p = vip_pair(&["10.200.0.0/24", "fd00:200::/120"]);
    p.a.ask_vip = None;
    p.a.ask_vip6 = Some(vec![]);
    vip_connect(&mut p);
    assert_eq!((p.a.established(), p.b.established()), (1, 1));
    assert_eq!(
        p.b.sa_info(p.now)[0].virtual_ip.as_deref(),
        Some("fd00:200::1")
    );
    assert_eq!(p.b.leases(), 1);
    // The initiator proposed 0.0.0.0/0 and ::/0 as its side: narrowed to its /128.
    let (ca, cb) = (&p.a_children[0], &p.b_children[0]);
    assert_eq!(cb.remote_ts, [host("fd00:200::1")]);
    assert_eq!(ca.local_ts, [host("fd00:200::1")]);
    check_child_keys(&p);
    // An address it would like (16 bytes and a prefix length) is fine, and not honoured.
    let mut p = vip_pair(&["fd00:200::/120"]);
    p.a.ask_vip = None;
    p.a.ask_vip6 = Some(
        [0xfd, 0, 2, 0]
            .into_iter()
            .chain([0; 11])
            .chain([7, 64])
            .collect(),
    );
    vip_connect(&mut p);
    assert_eq!(
        p.b.sa_info(p.now)[0].virtual_ip.as_deref(),
        Some("fd00:200::1")
    );
    // The lease goes back with the SA.
    let mut ev = vec![];
    p.a.terminate("b", p.now, &mut ev).unwrap();
    p.run(ev, vec![], false);
    assert_eq!((p.b.established(), p.b.leases()), (0, 0));
}

#[test]
fn both_families_asked_for_get_one_address_each() {
    let mut p = vip_pair(&["fd00:200::/120", "10.200.0.0/24"]);
    p.a.ask_vip6 = Some(vec![]);
    vip_connect(&mut p);
    assert_eq!(
        p.b.sa_info(p.now)[0].virtual_ip.as_deref(),
        Some("10.200.0.1, fd00:200::1")
    );
    assert_eq!(p.b.leases(), 2);
    let both = [host("10.200.0.1"), host("fd00:200::1")];
    assert_eq!(p.b_children[0].remote_ts, both);
    assert_eq!(p.a_children[0].local_ts, both);
    check_child_keys(&p);
    // A child rekey keeps the peer's side to its addresses.
    let old_in = p.a_children[0].spi_in;
    let spi = only_spi(&p.a);
    let mut ev = vec![];
    p.a.rekey_child(spi, old_in, p.now, &mut ev);
    p.run(ev, vec![], false);
    assert_eq!(p.b_children[1].remote_ts, both);
    // Both go back with the SA; the next SA gets the next fresh address of each.
    let mut ev = vec![];
    p.a.terminate("b", p.now, &mut ev).unwrap();
    p.run(ev, vec![], false);
    assert_eq!((p.b.established(), p.b.leases()), (0, 0));
    p.a.retry_at.clear();
    vip_connect(&mut p);
    assert_eq!(
        p.b.sa_info(p.now)[0].virtual_ip.as_deref(),
        Some("10.200.0.2, fd00:200::2")
    );
}

#[test]
fn an_exhausted_ipv6_pool_answers_internal_address_failure_or_leaves_it_out() {
    // IPv6 alone asked for, none left: INTERNAL_ADDRESS_FAILURE, no child.
    let mut p = vip_pair(&["fd00:200::9/128", "10.200.0.0/24"]);
    p.b.pools.get_mut("a").unwrap().lease6().unwrap();
    p.a.ask_vip = None;
    p.a.ask_vip6 = Some(vec![]);
    vip_connect(&mut p);
    assert_eq!(p.b.counters.failed.pool_exhausted, 1);
    assert!(p.b_children.is_empty() && p.a_children.is_empty());
    assert_eq!((p.b.established(), p.b.leases()), (1, 1));
    assert!(p.b.sa_info(p.now).iter().all(|s| s.virtual_ip.is_none()));
    // Both asked for: the IPv4 address alone, the child narrowed to it.
    let mut p = vip_pair(&["fd00:200::9/128", "10.200.0.0/24"]);
    p.b.pools.get_mut("a").unwrap().lease6().unwrap();
    p.a.ask_vip6 = Some(vec![]);
    vip_connect(&mut p);
    assert_eq!(p.b.counters.failed.pool_exhausted, 0);
    assert_eq!(
        p.b.sa_info(p.now)[0].virtual_ip.as_deref(),
        Some("10.200.0.1")
    );
    assert_eq!(p.b_children[0].remote_ts, [host("10.200.0.1")]);
    assert_eq!(p.b.leases(), 2);
}

#[test]
fn a_family_without_a_pool_is_left_unanswered() {
    // IPv4 pools only, both asked for: the IPv4 address, IPv6 left out.
    let mut p = vip_pair(&["10.200.0.0/24"]);
    p.a.ask_vip6 = Some(vec![]);
    vip_connect(&mut p);
    assert_eq!(p.b.counters.failed.pool_exhausted, 0);
    assert_eq!(
        p.b.sa_info(p.now)[0].virtual_ip.as_deref(),
        Some("10.200.0.1")
    );
    assert_eq!(p.b_children[0].remote_ts, [host("10.200.0.1")]);
    assert_eq!(p.a_children[0].local_ts, [host("10.200.0.1")]);
    // IPv6 pools only, both asked for: the IPv6 address.
    let mut p = vip_pair(&["fd00:200::/120"]);
    p.a.ask_vip6 = Some(vec![]);
    vip_connect(&mut p);
    assert_eq!(
        p.b.sa_info(p.now)[0].virtual_ip.as_deref(),
        Some("fd00:200::1")
    );
    assert_eq!(p.b_children[0].remote_ts, [host("fd00:200::1")]);
    // Nothing asked for can be given: INTERNAL_ADDRESS_FAILURE, counted, no child.
    for (pools, v4, v6) in [
        ("10.200.0.0/24", None, Some(vec![])),
        ("fd00:200::/120", Some(vec![]), None),
    ] {
        let mut p = vip_pair(&[pools]);
        (p.a.ask_vip, p.a.ask_vip6) = (v4, v6);
        vip_connect(&mut p);
        assert_eq!(p.b.counters.failed.pool_exhausted, 1, "{pools}");
        assert_eq!((p.b.established(), p.b.leases()), (1, 0), "{pools}");
        assert!(
            p.b_children.is_empty() && p.a_children.is_empty(),
            "{pools}"
        );
    }
}

#[test]
fn the_cfg_reply_carries_each_address_as_section_3_15_1_has_it() {
    let v = Vips {
        v4: Some("10.200.0.1".parse().unwrap()),
        v6: Some("fd00:200::1".parse().unwrap()),
    };
    let Payload::Cp { kind, attrs } = cfg_reply(&v) else {
        panic!("not a CP")
    };
    assert_eq!(kind, wire::cfg::REPLY);
    let mut six = vec![0xfd, 0, 2, 0];
    six.extend([0; 11]);
    six.extend([1, 128]);
    assert_eq!(
        attrs,
        [
            wire::CfgAttr {
                kind: wire::cfg::INTERNAL_IP4_ADDRESS,
                value: vec![10, 200, 0, 1]
            },
            wire::CfgAttr {
                kind: wire::cfg::INTERNAL_IP6_ADDRESS,
                value: six
            }
        ]
    );
    // As a CFG_REQUEST reads it (the lengths §3.15.1 allows).
    assert_eq!(
        wire::cfg_request(&attrs),
        Ok(wire::CfgAsk {
            ip4: true,
            ip6: true
        })
    );
}

/// Policy-based peers (`interface`, selectors of their own): the child SA gets the
/// selectors both allow, and says where its policies go.
#[test]
fn policy_based_peers_narrow_to_the_selectors_both_allow() {
    let policy =
        |name: &str, local: &str, remote: &str, start: &str, lts: &[&str], rts: &[&str]| {
            PeerConfig {
                start: start.into(),
                ike_lifetime_s: 0,
                child_lifetime_s: 0,
                interface: Some("wan".into()),
                local_ts: lts.iter().map(|s| s.to_string()).collect(),
                remote_ts: rts.iter().map(|s| s.to_string()).collect(),
                policy_priority: 50,
                ..PeerConfig::new(name, local.parse().unwrap(), remote, "")
            }
            .resolve(Some(PSK))
            .unwrap()
        };
    // a offers its /24 and asks for b's /16; b allows a's /24 and its own /24 only.
    let a = policy(
        "b",
        "192.0.2.1",
        "192.0.2.2",
        "initiate",
        &["10.1.0.0/24"],
        &["10.2.0.0/16"],
    );
    let b = policy(
        "a",
        "192.0.2.2",
        "192.0.2.1",
        "respond",
        &["10.2.0.0/24", "2001:db8:2::/48"],
        &["10.1.0.0/24"],
    );
    let mut p = Pair::new(a, b);
    let mut ev = vec![];
    p.a.initiate("b", p.now, &mut ev).unwrap();
    p.run(ev, vec![], false);
    check_child_keys(&p);
    let (ca, cb) = (&p.a_children[0], &p.b_children[0]);
    let range = |a: &str, b: &str| Selector {
        start: a.parse().unwrap(),
        end: b.parse().unwrap(),
        ..Selector::any(false)
    };
    assert_eq!(ca.local_ts, [range("10.1.0.0", "10.1.0.255")]);
    assert_eq!(ca.remote_ts, [range("10.2.0.0", "10.2.0.255")]);
    assert_eq!(cb.local_ts, ca.remote_ts);
    assert_eq!(cb.remote_ts, ca.local_ts);
    for c in [ca, cb] {
        assert_eq!(c.tunnel, "");
        assert_eq!(c.interface.as_deref(), Some("wan"));
        assert_eq!(c.policy_priority, 50);
    }
    // With nothing in common, the responder refuses the child (TS_UNACCEPTABLE).
    let a = policy(
        "b",
        "192.0.2.1",
        "192.0.2.2",
        "initiate",
        &["10.1.0.0/24"],
        &["10.9.0.0/16"],
    );
    let b = policy(
        "a",
        "192.0.2.2",
        "192.0.2.1",
        "respond",
        &["10.2.0.0/24"],
        &["10.1.0.0/24"],
    );
    let mut p = Pair::new(a, b);
    let mut ev = vec![];
    p.a.initiate("b", p.now, &mut ev).unwrap();
    p.run(ev, vec![], false);
    assert!(p.a_children.is_empty() && p.b_children.is_empty());
}

/// A child the data plane could not install goes on both sides: the responder's asks the
/// peer to delete it; the initiator of a peer it keeps up sets the IKE SA up again.
#[test]
fn a_child_the_data_plane_refused_is_deleted_on_both_sides() {
    // b (the responder) failed to install: a Delete of the child, the IKE SA stays.
    let mut p = establish(&[], &[]);
    let spi_in = p.b_children[0].spi_in;
    let mut ev = vec![];
    p.b.child_failed(spi_in, p.now, &mut ev);
    p.run(vec![], ev, false);
    assert_eq!(p.b.counters.failed.install, 1);
    assert_eq!((p.a.child_sas(), p.b.child_sas()), (0, 0));
    assert_eq!(p.a_down, 1, "a removed its side");
    assert_eq!(p.b_down, 0, "b had nothing installed");
    assert_eq!((p.a.established(), p.b.established()), (1, 1));
    // Unknown SPIs change nothing.
    let mut ev = vec![];
    p.b.child_failed(spi_in, p.now, &mut ev);
    assert!(ev.is_empty());
    assert_eq!(p.b.counters.failed.install, 1);
    // a (the initiator, `start = "initiate"`) failed: its IKE SA goes, and comes back
    // with a new child.
    let mut p = establish(&[], &[]);
    let spi_in = p.a_children[0].spi_in;
    let mut ev = vec![];
    p.a.child_failed(spi_in, p.now, &mut ev);
    p.run(ev, vec![], false);
    assert_eq!((p.a.established(), p.b.established()), (0, 0));
    p.tick(RETRY_AFTER + Duration::from_secs(1));
    assert_eq!((p.a.established(), p.b.established()), (1, 1));
    assert_eq!(p.a_children.len(), 2);
    assert_ne!(p.a_children[1].spi_in, spi_in);
}

/// A road-warrior gateway (`remote = "any"`, pools) and warriors sharing one identity and
/// PSK, each at its own address, their datagrams delivered by address.
struct Warriors {
    gw: Engine,
    rw: Vec<Engine>,
    now: Instant,
    /// The inbound SPIs of the child SAs installed (`ChildUp`) and removed (`ChildDown`):
    /// the gateway's first, then each warrior's.
    up: Vec<Vec<u32>>,
    down: Vec<Vec<u32>>,
}

const GW: &str = "192.0.2.2";

fn warrior_addr(k: usize) -> IpAddr {
    format!("192.0.2.{}", 10 + k).parse().unwrap()
}

impl Warriors {
    /// The gateway with `unique_ids = gw`, a warrior for each of `rw` (its own
    /// `unique_ids`: `never` sends no INITIAL_CONTACT), each asking for a virtual IP.
    fn new(gw: &str, rw: &[&str]) -> Warriors {
        let g = PeerConfig {
            remote_id: Some("warrior.example".into()),
            pools: vec!["10.200.0.0/24".into()],
            unique_ids: gw.into(),
            ike_lifetime_s: 0,
            child_lifetime_s: 0,
            ..PeerConfig::new("warriors", GW.parse().unwrap(), "any", "t-w")
        };
        let rw: Vec<Engine> = rw
            .iter()
            .enumerate()
            .map(|(k, u)| {
                let c = PeerConfig {
                    local_id: Some("warrior.example".into()),
                    start: "initiate".into(),
                    unique_ids: u.to_string(),
                    ike_lifetime_s: 0,
                    child_lifetime_s: 0,
                    ..PeerConfig::new("gw", warrior_addr(k), GW, "t-gw")
                };
                let mut e = Engine::new(vec![c.resolve(Some(PSK)).unwrap()]);
                e.ask_vip = Some(vec![]);
                e
            })
            .collect();
        let n = rw.len() + 1;
        Warriors {
            gw: Engine::new(vec![g.resolve(Some(PSK)).unwrap()]),
            rw,
            now: Instant::now(),
            up: vec![vec![]; n],
            down: vec![vec![]; n],
        }
    }

    /// 0: the gateway, k + 1: warrior k.
    fn engine(&mut self, k: usize) -> &mut Engine {
        match k {
            0 => &mut self.gw,
            k => &mut self.rw[k - 1],
        }
    }

    /// Delivers the events of engine `from`, and what they bring, until all are quiet.
    fn run(&mut self, from: usize, events: Vec<Event>) {
        let mut queue: std::collections::VecDeque<(usize, Event)> =
            events.into_iter().map(|e| (from, e)).collect();
        let mut n = 0;
        while let Some((src, e)) = queue.pop_front() {
            n += 1;
            assert!(n < 1000, "the engines did not settle");
            check_peer_index(&self.gw);
            match e {
                Event::Send {
                    local,
                    remote,
                    data,
                } => {
                    let dst = if remote.ip() == GW.parse::<IpAddr>().unwrap() {
                        0
                    } else {
                        (0..self.rw.len())
                            .position(|k| warrior_addr(k) == remote.ip())
                            .unwrap()
                            + 1
                    };
                    let (now, mut next) = (self.now, vec![]);
                    self.engine(dst)
                        .handle(now, remote, local, &data, &mut next);
                    queue.extend(next.into_iter().map(|e| (dst, e)));
                }
                Event::ChildUp(c) => self.up[src].push(c.spi_in),
                Event::ChildDown { spi_in, .. } => self.down[src].push(spi_in),
                Event::Keepalive { .. } => {}
            }
        }
    }

    /// Warrior `k` connects.
    fn connect(&mut self, k: usize) {
        let mut ev = vec![];
        self.rw[k].initiate("gw", self.now, &mut ev).unwrap();
        self.run(k + 1, ev);
    }

    /// The gateway's IKE SAs: the warrior's address and virtual IP, by address.
    fn gw_sas(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self
            .gw
            .sa_info(self.now)
            .into_iter()
            .map(|s| (s.remote, s.virtual_ip.unwrap_or_default()))
            .collect();
        v.sort();
        v
    }
}

/// Two warriors of one identity: the first connects, then the second (with
/// INITIAL_CONTACT unless its `unique_ids` is `never`), the gateway's being `gw`.
fn two_warriors(gw: &str, second: &str) -> Warriors {
    let mut w = Warriors::new(gw, &["no", second]);
    w.connect(0);
    assert_eq!(
        (w.gw.established(), w.gw.leases(), w.up[0].len()),
        (1, 1, 1)
    );
    w.connect(1);
    w
}

fn sa_of(k: usize, vip: &str) -> (String, String) {
    (format!("{}:500", warrior_addr(k)), vip.into())
}

/// Both warriors' SAs stand side by side on the gateway, each with its address.
fn check_both_stay(w: &Warriors) {
    assert_eq!(w.gw_sas(), [sa_of(0, "10.200.0.1"), sa_of(1, "10.200.0.2")]);
    assert_eq!((w.gw.leases(), w.gw.child_sas()), (2, 2));
    assert_eq!(w.up[0].len(), 2);
    assert!(w.down.iter().all(|d| d.is_empty()), "{:?}", w.down);
    assert_eq!(w.gw.counters.duplicates_removed, 0);
    assert_eq!((w.rw[0].established(), w.rw[1].established()), (1, 1));
}

/// The second warrior's SA replaced the first's on the gateway, without a word to the
/// first (INITIAL_CONTACT: it is taken to have forgotten its SAs).
fn check_replaced_silently(w: &Warriors) {
    assert_eq!(w.gw_sas(), [sa_of(1, "10.200.0.2")]);
    assert_eq!((w.gw.leases(), w.gw.child_sas()), (1, 1));
    assert_eq!(w.up[0].len(), 2);
    assert_eq!(w.down[0], [w.up[0][0]], "the first's child SA removed");
    assert_eq!(w.gw.counters.duplicates_removed, 1);
    assert!(w.down[1].is_empty() && w.down[2].is_empty());
    assert_eq!((w.rw[0].established(), w.rw[1].established()), (1, 1));
}

#[test]
fn unique_ids_no_replaces_on_initial_contact_only() {
    check_replaced_silently(&two_warriors("no", "no"));
    // Without INITIAL_CONTACT (the second's `never`), both stay.
    check_both_stay(&two_warriors("no", "never"));
}

#[test]
fn unique_ids_never_keeps_warriors_of_one_identity_side_by_side() {
    // INITIAL_CONTACT ignored.
    check_both_stay(&two_warriors("never", "no"));
    check_both_stay(&two_warriors("never", "never"));
    // A third, and the first again after it restarted (INITIAL_CONTACT): nothing goes.
    let mut w = Warriors::new("never", &["no", "no", "no"]);
    for k in 0..3 {
        w.connect(k);
    }
    w.rw[0] = Engine::new(vec![w.rw[0].peers[0].as_ref().clone()]);
    w.rw[0].ask_vip = Some(vec![]);
    w.connect(0);
    assert_eq!((w.gw.established(), w.gw.leases()), (4, 4));
    assert!(w.down[0].is_empty());
}

#[test]
fn unique_ids_replace_deletes_the_older_sa_even_without_initial_contact() {
    // With INITIAL_CONTACT: dropped silently, as with `no`.
    check_replaced_silently(&two_warriors("replace", "no"));
    check_replaced_silently(&two_warriors("yes", "no"));
    // Without: deleted, the first warrior told (INFORMATIONAL Delete) and its child SA
    // removed on both sides; its lease back once the Delete is answered.
    let w = two_warriors("replace", "never");
    assert_eq!(w.gw_sas(), [sa_of(1, "10.200.0.2")]);
    assert_eq!((w.gw.leases(), w.gw.child_sas()), (1, 1));
    assert_eq!(w.down[0], [w.up[0][0]]);
    assert_eq!(
        w.down[1],
        [w.up[1][0]],
        "the first warrior removed its child"
    );
    assert!(w.down[2].is_empty());
    assert_eq!(w.gw.counters.duplicates_removed, 1);
    assert_eq!((w.rw[0].established(), w.rw[1].established()), (0, 1));
    assert_eq!(w.rw[0].counters.deletes_received, 1);
}

#[test]
fn unique_ids_keep_refuses_a_second_sa_without_initial_contact() {
    // With INITIAL_CONTACT the old SA goes, as strongSwan's `keep` does too.
    check_replaced_silently(&two_warriors("keep", "no"));
    // Without: the second is refused, the first kept.
    let w = two_warriors("keep", "never");
    assert_eq!(w.gw_sas(), [sa_of(0, "10.200.0.1")]);
    assert_eq!((w.gw.leases(), w.gw.child_sas()), (1, 1));
    assert_eq!(w.up[0].len(), 1);
    assert!(w.down.iter().all(|d| d.is_empty()), "{:?}", w.down);
    assert!(w.up[2].is_empty(), "no child SA for the second");
    assert_eq!(w.gw.counters.failed.unique_keep, 1);
    assert_eq!(w.rw[1].counters.failed.peer_refused, 1);
    assert_eq!((w.rw[0].established(), w.rw[1].established()), (1, 0));
    assert_eq!(w.gw.sas.len(), 1, "the refused SA is gone");
}

/// `show ike sa` pages: a peer's SAs, in (peer, SPI) order, `limit` after `skip`, with
/// the total matched.
#[test]
fn sas_are_listed_a_page_at_a_time() {
    let mut w = Warriors::new("never", &["no", "no", "no"]);
    for k in 0..3 {
        w.connect(k);
    }
    let now = w.now;
    let all = w.gw.sa_info(now);
    assert_eq!(all.len(), 3);
    let order: Vec<&str> = all.iter().map(|s| s.spi_i.as_str()).collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted);
    let peer = all[0].peer.clone();
    let (page, total) = w.gw.sa_page(now, Some(&peer), 1, 1);
    assert_eq!(total, 3);
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].spi_i, all[1].spi_i);
    let (page, total) = w.gw.sa_page(now, None, 2, 10);
    assert_eq!((page.len(), total), (1, 3));
    assert_eq!(w.gw.sa_page(now, Some("nosuch"), 0, 10).1, 0);
    assert!(w.gw.sa_page(now, None, 0, 0).0.is_empty());
    assert!(w.gw.sa_page(now, None, 5, 10).0.is_empty());
}

/// The candidate peers of a message come from the index in config order, `any` ones and
/// those of the sender's address merged, as a pass over every peer would give them.
#[test]
fn candidates_by_address_keep_the_config_order() {
    assert_eq!(
        Merged(&[0, 3, 5], &[1, 2, 6]).collect::<Vec<_>>(),
        [0, 1, 2, 3, 5, 6]
    );
    assert_eq!(Merged(&[], &[4]).collect::<Vec<_>>(), [4]);
    let peers: Vec<Peer> = [
        ("a", "192.0.2.1", "198.51.100.1"),
        ("b", "192.0.2.1", "any"),
        ("c", "192.0.2.9", "198.51.100.1"),
        ("d", "192.0.2.1", "198.51.100.2"),
        ("e", "192.0.2.1", "198.51.100.1"),
        ("f", "192.0.2.1", "any"),
    ]
    .iter()
    .map(|(n, l, r)| {
        let mut c = PeerConfig::new(n, l.parse().unwrap(), r, "t0");
        c.psk = Some("k".into());
        c.remote_id = Some(format!("{n}.example"));
        c.resolve(Some(PSK)).unwrap()
    })
    .collect();
    let e = Engine::new(peers);
    let names = |local: &str, remote: &str| -> Vec<String> {
        let (l, r) = (
            SocketAddr::new(local.parse().unwrap(), 500),
            SocketAddr::new(remote.parse().unwrap(), 500),
        );
        let by_index: Vec<String> = Engine::candidates((&e.peers, &e.index), &l, &r)
            .map(|p| p.name.clone())
            .collect();
        let by_pass: Vec<String> = e
            .peers
            .iter()
            .filter(|p| Engine::is_candidate(p, &l, &r))
            .map(|p| p.name.clone())
            .collect();
        assert_eq!(by_index, by_pass);
        by_index
    };
    assert_eq!(names("192.0.2.1", "198.51.100.1"), ["a", "b", "e", "f"]);
    assert_eq!(names("192.0.2.1", "198.51.100.7"), ["b", "f"]);
    assert_eq!(names("192.0.2.9", "198.51.100.1"), ["c"]);
    assert!(names("192.0.2.5", "198.51.100.1").is_empty());
}

/// What IKE_SA_INIT takes of the peers it may be for, gathered once for the `any` peers of
/// an address, is what a pass over every candidate peer gives: the same proposals in the
/// same order (each once), encapsulation forced if any peer forces it.
#[test]
fn the_init_summary_is_what_a_pass_over_the_candidates_gives() {
    let props = [
        "aes128gcm16-prfsha256-curve25519",
        "aes256gcm16-prfsha384-ecp384",
        "chacha20poly1305-prfsha256-ecp256",
        "aes256-sha256-prfsha256-modp2048",
    ];
    // `any` peers: made with a remote address, then given none (the config wants a
    // remote_id with `any`, which the summary does not read).
    let any = |name: &str, local: &str| {
        let mut p = peer(name, local, "198.51.100.99", "respond");
        p.remote = None;
        p
    };
    let with = |mut p: Peer, ks: &[usize], encap: bool| {
        p.ike = ks
            .iter()
            .map(|&k| crate::config::parse_ike_proposal(props[k]).unwrap())
            .collect();
        p.encap = encap;
        Arc::new(p)
    };
    let peers = vec![
        with(any("any0", "192.0.2.1"), &[1, 0], false),
        with(
            peer("r1", "192.0.2.1", "198.51.100.1", "respond"),
            &[2, 1],
            true,
        ),
        with(any("any2", "192.0.2.1"), &[0, 3], false),
        with(any("other", "192.0.2.9"), &[2], true),
        with(
            peer("r4", "192.0.2.1", "198.51.100.1", "respond"),
            &[3, 2],
            false,
        ),
    ];
    let index = PeerIndex::new(&peers);
    let local = SocketAddr::new("192.0.2.1".parse().unwrap(), 500);
    for (remote, want) in [
        ("198.51.100.1", vec![(0, 1), (0, 0), (1, 2), (2, 3)]),
        ("198.51.100.7", vec![(0, 1), (0, 0), (2, 3)]),
    ] {
        let remote = SocketAddr::new(remote.parse().unwrap(), 500);
        let s = index.init_summary(&peers, &local, &remote);
        let got: Vec<(usize, IkeProposal)> = s.ike.clone();
        let want: Vec<(usize, IkeProposal)> = want
            .iter()
            .map(|&(i, k)| (i, crate::config::parse_ike_proposal(props[k]).unwrap()))
            .collect();
        assert_eq!(got, want, "from {remote}");
        // The same as a pass over every candidate.
        let mut pass: Vec<IkeProposal> = Vec::new();
        for c in Engine::candidates((&peers, &index), &local, &remote) {
            for p in &c.ike {
                if !pass.contains(p) {
                    pass.push(*p);
                }
            }
        }
        assert_eq!(
            got.iter().map(|x| x.1).collect::<Vec<_>>(),
            pass,
            "from {remote}"
        );
        let encap = Engine::candidates((&peers, &index), &local, &remote).any(|c| c.encap);
        assert_eq!(s.encap, encap, "from {remote}");
        assert!(!s.cert && s.ca_hashes.is_empty());
    }
    // An address no peer has: nothing.
    let nowhere = SocketAddr::new("203.0.113.1".parse().unwrap(), 500);
    assert!(index.init_summary(&peers, &nowhere, &local).ike.is_empty());
}
