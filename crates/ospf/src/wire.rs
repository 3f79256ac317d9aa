//! OSPFv2 packets and LSAs (RFC 2328 appendix A): what an emulated neighbour sends
//! (Hello, Database Description, Link State Update, Link State Acknowledgment, router- and
//! AS-external-LSAs) and reads. Parsing takes any bytes: a short, inconsistent or
//! mis-summed packet is an [`Error`] naming what was wrong, never a panic.

use std::net::Ipv4Addr;

/// OSPF's IP protocol number.
pub const IPPROTO_OSPF: i32 = 89;
/// AllSPFRouters.
pub const ALL_SPF_ROUTERS: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 5);
/// The OSPF packet header's length.
pub const HEADER_LEN: usize = 24;
/// An LSA header's length.
pub const LSA_HEADER_LEN: usize = 20;
/// An AS-external-LSA's length (one metric, no TOS).
pub const EXTERNAL_LSA_LEN: usize = 36;
/// MaxAge (s): an LSA of this age is being flushed.
pub const MAX_AGE: u16 = 3600;
/// The first sequence number an LSA instance takes.
pub const INITIAL_SEQ: u32 = 0x8000_0001;

/// Packet types.
pub const HELLO: u8 = 1;
/// Database Description.
pub const DB_DESC: u8 = 2;
/// Link State Request.
pub const LS_REQUEST: u8 = 3;
/// Link State Update.
pub const LS_UPDATE: u8 = 4;
/// Link State Acknowledgment.
pub const LS_ACK: u8 = 5;

/// LS types.
pub const ROUTER_LSA: u8 = 1;
/// AS-external-LSA.
pub const EXTERNAL_LSA: u8 = 5;

/// Options: the E-bit (AS-external-LSAs are flooded into the area).
pub const OPT_E: u8 = 0x02;
/// Database Description flags: Init, More, Master.
pub const DD_I: u8 = 0x04;
/// More.
pub const DD_M: u8 = 0x02;
/// Master.
pub const DD_MS: u8 = 0x01;
/// Router-LSA flags: this router is an AS boundary router.
pub const ROUTER_E: u8 = 0x02;
/// Router-LSA link types: point-to-point and stub network.
pub const LINK_P2P: u8 = 1;
/// Stub network.
pub const LINK_STUB: u8 = 3;

/// What was wrong with a packet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Shorter than its header or its fixed part.
    #[error("truncated: {0} bytes")]
    Truncated(usize),
    /// Not OSPF version 2.
    #[error("version {0}, not 2")]
    Version(u8),
    /// The header's length field disagrees with the bytes.
    #[error("length field {field}, {actual} bytes")]
    Length {
        /// The header's.
        field: usize,
        /// What arrived.
        actual: usize,
    },
    /// The packet checksum does not verify.
    #[error("bad packet checksum")]
    Checksum,
    /// Authentication other than none (type 0).
    #[error("authentication type {0}")]
    AuthType(u16),
    /// An LSA whose length field is below 20 or runs past the packet.
    #[error("LSA length {0}")]
    LsaLength(usize),
}

/// The OSPF packet header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Packet type.
    pub kind: u8,
    /// The sender's router ID.
    pub router_id: Ipv4Addr,
    /// Area ID.
    pub area: Ipv4Addr,
}

/// An LSA header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LsaHeader {
    /// LS age (s).
    pub age: u16,
    /// Options.
    pub options: u8,
    /// LS type.
    pub kind: u8,
    /// Link State ID.
    pub id: u32,
    /// Advertising router.
    pub adv: u32,
    /// LS sequence number.
    pub seq: u32,
    /// Fletcher checksum.
    pub checksum: u16,
    /// Length, header included.
    pub length: u16,
}

impl LsaHeader {
    /// Read one from 20 bytes.
    pub fn read(b: &[u8; LSA_HEADER_LEN]) -> LsaHeader {
        let u32at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        LsaHeader {
            age: u16::from_be_bytes([b[0], b[1]]),
            options: b[2],
            kind: b[3],
            id: u32at(4),
            adv: u32at(8),
            seq: u32at(12),
            checksum: u16::from_be_bytes([b[16], b[17]]),
            length: u16::from_be_bytes([b[18], b[19]]),
        }
    }

    /// Append its 20 bytes.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.age.to_be_bytes());
        out.push(self.options);
        out.push(self.kind);
        out.extend_from_slice(&self.id.to_be_bytes());
        out.extend_from_slice(&self.adv.to_be_bytes());
        out.extend_from_slice(&self.seq.to_be_bytes());
        out.extend_from_slice(&self.checksum.to_be_bytes());
        out.extend_from_slice(&self.length.to_be_bytes());
    }
}

/// The Internet checksum (RFC 1071) of `b`.
fn inet_checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = b.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The LSA checksum (RFC 2328 §12.1.7: Fletcher, ISO 8473 annex C) of a whole LSA, its
/// checksum field taken as zero and its age left out.
pub fn lsa_checksum(lsa: &[u8]) -> u16 {
    // Over bytes 2.. (no age); the checksum is at offset 14 of that.
    let data = lsa.get(2..).unwrap_or(&[]);
    let (mut c0, mut c1) = (0u32, 0u32);
    for (i, &b) in data.iter().enumerate() {
        let b = if i == 14 || i == 15 { 0 } else { b };
        c0 = (c0 + u32::from(b)) % 255;
        c1 = (c1 + c0) % 255;
    }
    let len = data.len() as i64;
    let mut x = ((len - 14 - 1) * i64::from(c0) - i64::from(c1)).rem_euclid(255);
    if x == 0 {
        x = 255;
    }
    let mut y = 510 - i64::from(c0) - x;
    if y > 255 {
        y -= 255;
    }
    ((x as u16) << 8) | (y as u16 & 0xff)
}

/// Whether a whole LSA's checksum verifies (the Fletcher sums over it are zero).
pub fn lsa_checksum_ok(lsa: &[u8]) -> bool {
    let Some(data) = lsa.get(2..) else {
        return false;
    };
    let (mut c0, mut c1) = (0u32, 0u32);
    for &b in data {
        c0 = (c0 + u32::from(b)) % 255;
        c1 = (c1 + c0) % 255;
    }
    c0 == 0 && c1 == 0
}

/// Start a packet of `kind` from `router_id` (area 0): the header with length and checksum
/// left for [`finish`].
pub fn begin(out: &mut Vec<u8>, kind: u8, router_id: Ipv4Addr) {
    out.clear();
    out.extend_from_slice(&[2, kind, 0, 0]);
    out.extend_from_slice(&router_id.octets());
    out.extend_from_slice(&[0; 4]); // area 0.0.0.0
    out.extend_from_slice(&[0; 2]); // checksum
    out.extend_from_slice(&[0; 2]); // AuType: none
    out.extend_from_slice(&[0; 8]); // Authentication
}

/// Set the packet's length and checksum.
pub fn finish(out: &mut [u8]) {
    let len = out.len() as u16;
    out[2..4].copy_from_slice(&len.to_be_bytes());
    out[12..14].copy_from_slice(&[0, 0]);
    let c = inet_checksum(out);
    out[12..14].copy_from_slice(&c.to_be_bytes());
}

/// Hello fields (point-to-point: no DR or BDR).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The interface's network mask.
    pub mask: Ipv4Addr,
    /// HelloInterval (s).
    pub hello_interval: u16,
    /// Options.
    pub options: u8,
    /// Router priority.
    pub priority: u8,
    /// RouterDeadInterval (s).
    pub dead_interval: u32,
    /// Neighbours heard from.
    pub neighbors: Vec<Ipv4Addr>,
}

/// A whole Hello packet.
pub fn encode_hello(out: &mut Vec<u8>, router_id: Ipv4Addr, h: &Hello) {
    begin(out, HELLO, router_id);
    out.extend_from_slice(&h.mask.octets());
    out.extend_from_slice(&h.hello_interval.to_be_bytes());
    out.push(h.options);
    out.push(h.priority);
    out.extend_from_slice(&h.dead_interval.to_be_bytes());
    out.extend_from_slice(&[0; 8]); // DR, BDR
    for n in &h.neighbors {
        out.extend_from_slice(&n.octets());
    }
    finish(out);
}

/// A Database Description packet's fixed part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DbDesc {
    /// Interface MTU.
    pub mtu: u16,
    /// Options.
    pub options: u8,
    /// I, M, MS.
    pub flags: u8,
    /// DD sequence number.
    pub seq: u32,
}

/// A whole Database Description packet carrying `headers`.
pub fn encode_db_desc(out: &mut Vec<u8>, router_id: Ipv4Addr, d: DbDesc, headers: &[LsaHeader]) {
    begin(out, DB_DESC, router_id);
    out.extend_from_slice(&d.mtu.to_be_bytes());
    out.push(d.options);
    out.push(d.flags);
    out.extend_from_slice(&d.seq.to_be_bytes());
    for h in headers {
        h.write(out);
    }
    finish(out);
}

/// Start a Link State Update: the header and a zero LSA count ([`lsu_push`] adds LSAs).
pub fn lsu_begin(out: &mut Vec<u8>, router_id: Ipv4Addr) {
    begin(out, LS_UPDATE, router_id);
    out.extend_from_slice(&[0; 4]);
}

/// Add one whole LSA to a Link State Update begun with [`lsu_begin`] (then [`finish`]).
pub fn lsu_push(out: &mut Vec<u8>, lsa: &[u8]) {
    let n = u32::from_be_bytes([out[24], out[25], out[26], out[27]]) + 1;
    out[24..28].copy_from_slice(&n.to_be_bytes());
    out.extend_from_slice(lsa);
}

/// A whole Link State Acknowledgment of `headers`.
pub fn encode_ls_ack(out: &mut Vec<u8>, router_id: Ipv4Addr, headers: &[LsaHeader]) {
    begin(out, LS_ACK, router_id);
    for h in headers {
        h.write(out);
    }
    finish(out);
}

/// Set an LSA's length and checksum (the bytes are the whole LSA).
fn seal_lsa(lsa: &mut [u8]) {
    let len = lsa.len() as u16;
    lsa[18..20].copy_from_slice(&len.to_be_bytes());
    lsa[16..18].copy_from_slice(&[0, 0]);
    let c = lsa_checksum(lsa);
    lsa[16..18].copy_from_slice(&c.to_be_bytes());
}

/// A router-LSA link: (Link ID, Link Data, type, metric).
pub type Link = (u32, u32, u8, u16);

/// A whole router-LSA from `router_id`, with `flags` (e.g. [`ROUTER_E`]) and `links`.
pub fn router_lsa(
    out: &mut Vec<u8>,
    router_id: Ipv4Addr,
    age: u16,
    seq: u32,
    flags: u8,
    links: &[Link],
) {
    out.clear();
    let id = u32::from(router_id);
    LsaHeader {
        age,
        options: OPT_E,
        kind: ROUTER_LSA,
        id,
        adv: id,
        seq,
        checksum: 0,
        length: 0,
    }
    .write(out);
    out.push(flags);
    out.push(0);
    out.extend_from_slice(&(links.len() as u16).to_be_bytes());
    for &(lid, data, kind, metric) in links {
        out.extend_from_slice(&lid.to_be_bytes());
        out.extend_from_slice(&data.to_be_bytes());
        out.push(kind);
        out.push(0);
        out.extend_from_slice(&metric.to_be_bytes());
    }
    seal_lsa(out);
}

/// An AS-external-LSA's fields (type 2 metric, no forwarding address, tag 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct External {
    /// Link State ID: the network, or with host bits set when two prefixes share one
    /// (RFC 2328 appendix E).
    pub id: u32,
    /// The network mask.
    pub mask: u32,
    /// The type 2 metric (24 bits).
    pub metric: u32,
}

/// A whole AS-external-LSA into `out` (36 bytes, overwritten).
pub fn external_lsa(
    out: &mut [u8; EXTERNAL_LSA_LEN],
    adv: Ipv4Addr,
    age: u16,
    seq: u32,
    e: External,
) {
    let mut v = Vec::with_capacity(EXTERNAL_LSA_LEN);
    LsaHeader {
        age,
        options: OPT_E,
        kind: EXTERNAL_LSA,
        id: e.id,
        adv: u32::from(adv),
        seq,
        checksum: 0,
        length: 0,
    }
    .write(&mut v);
    v.extend_from_slice(&e.mask.to_be_bytes());
    let m = e.metric & 0x00ff_ffff;
    v.push(0x80); // E: type 2; TOS 0
    v.extend_from_slice(&m.to_be_bytes()[1..]);
    v.extend_from_slice(&[0; 4]); // forwarding address
    v.extend_from_slice(&[0; 4]); // route tag
    seal_lsa(&mut v);
    out.copy_from_slice(&v);
}

/// A packet as read: its header and what follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<'a> {
    /// The header.
    pub header: Header,
    /// The bytes after the header, as long as the header's length says.
    pub body: &'a [u8],
}

/// Check and split a packet (the bytes after the IP header).
pub fn parse(b: &[u8]) -> Result<Packet<'_>, Error> {
    if b.len() < HEADER_LEN {
        return Err(Error::Truncated(b.len()));
    }
    if b[0] != 2 {
        return Err(Error::Version(b[0]));
    }
    let field = usize::from(u16::from_be_bytes([b[2], b[3]]));
    if field < HEADER_LEN || field > b.len() {
        return Err(Error::Length {
            field,
            actual: b.len(),
        });
    }
    let b = &b[..field];
    let au = u16::from_be_bytes([b[14], b[15]]);
    if au != 0 {
        return Err(Error::AuthType(au));
    }
    // With AuType 0 the (zero or not) authentication field is left out of the sum.
    let mut copy = [0u8; HEADER_LEN];
    copy.copy_from_slice(&b[..HEADER_LEN]);
    copy[16..24].fill(0);
    let mut sum_input = Vec::new();
    let whole = if b[16..24].iter().all(|&x| x == 0) {
        b
    } else {
        sum_input.extend_from_slice(&copy);
        sum_input.extend_from_slice(&b[HEADER_LEN..]);
        &sum_input[..]
    };
    if inet_checksum(whole) != 0 {
        return Err(Error::Checksum);
    }
    let ip = |i: usize| Ipv4Addr::new(b[i], b[i + 1], b[i + 2], b[i + 3]);
    Ok(Packet {
        header: Header {
            kind: b[1],
            router_id: ip(4),
            area: ip(8),
        },
        body: &b[HEADER_LEN..],
    })
}

/// A Hello's body.
pub fn parse_hello(body: &[u8]) -> Result<Hello, Error> {
    if body.len() < 20 {
        return Err(Error::Truncated(body.len()));
    }
    let ip = |i: usize| Ipv4Addr::new(body[i], body[i + 1], body[i + 2], body[i + 3]);
    Ok(Hello {
        mask: ip(0),
        hello_interval: u16::from_be_bytes([body[4], body[5]]),
        options: body[6],
        priority: body[7],
        dead_interval: u32::from_be_bytes([body[8], body[9], body[10], body[11]]),
        neighbors: body[20..].chunks_exact(4).map(ip_of).collect(),
    })
}

fn ip_of(c: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(c[0], c[1], c[2], c[3])
}

/// The LSA headers in `b`, 20 bytes each (a trailing partial one is ignored).
pub fn headers(b: &[u8]) -> impl Iterator<Item = LsaHeader> + '_ {
    b.chunks_exact(LSA_HEADER_LEN).map(|c| {
        let mut h = [0u8; LSA_HEADER_LEN];
        h.copy_from_slice(c);
        LsaHeader::read(&h)
    })
}

/// A Database Description's fixed part and its LSA headers' bytes.
pub fn parse_db_desc(body: &[u8]) -> Result<(DbDesc, &[u8]), Error> {
    if body.len() < 8 {
        return Err(Error::Truncated(body.len()));
    }
    Ok((
        DbDesc {
            mtu: u16::from_be_bytes([body[0], body[1]]),
            options: body[2],
            flags: body[3],
            seq: u32::from_be_bytes([body[4], body[5], body[6], body[7]]),
        },
        &body[8..],
    ))
}

/// A Link State Request's entries: (LS type, Link State ID, advertising router).
pub fn parse_ls_request(body: &[u8]) -> impl Iterator<Item = (u32, u32, u32)> + '_ {
    body.chunks_exact(12).map(|c| {
        let u = |i: usize| u32::from_be_bytes([c[i], c[i + 1], c[i + 2], c[i + 3]]);
        (u(0), u(4), u(8))
    })
}

/// An LSA as read: its header, its whole bytes, and whether its checksum verifies.
pub type Lsa<'a> = (LsaHeader, &'a [u8], bool);

/// A Link State Update's LSAs, each as (header, whole LSA bytes, whether its checksum
/// verifies); an LSA whose length is impossible ends the list with an error.
pub fn parse_ls_update(body: &[u8]) -> Result<Vec<Lsa<'_>>, Error> {
    if body.len() < 4 {
        return Err(Error::Truncated(body.len()));
    }
    let n = u32::from_be_bytes([body[0], body[1], body[2], body[3]]) as usize;
    let mut rest = &body[4..];
    // Each LSA is at least 20 bytes: the count cannot ask for more than that allows.
    let mut out = Vec::with_capacity(n.min(rest.len() / LSA_HEADER_LEN));
    for _ in 0..n {
        if rest.len() < LSA_HEADER_LEN {
            return Err(Error::Truncated(rest.len()));
        }
        let mut h = [0u8; LSA_HEADER_LEN];
        h.copy_from_slice(&rest[..LSA_HEADER_LEN]);
        let hdr = LsaHeader::read(&h);
        let len = usize::from(hdr.length);
        if len < LSA_HEADER_LEN || len > rest.len() {
            return Err(Error::LsaLength(len));
        }
        let lsa = &rest[..len];
        out.push((hdr, lsa, lsa_checksum_ok(lsa)));
        rest = &rest[len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rid() -> Ipv4Addr {
        Ipv4Addr::new(198, 51, 100, 2)
    }

    #[test]
    fn lsa_checksum_verifies_and_leaves_out_age() {
        // ospfd checks the same sums on every LSA it takes (tests/ospf_emulated.rs).
        let mut b = [0u8; EXTERNAL_LSA_LEN];
        external_lsa(
            &mut b,
            Ipv4Addr::new(1, 1, 1, 1),
            1,
            INITIAL_SEQ,
            External {
                id: u32::from(Ipv4Addr::new(10, 1, 0, 0)),
                mask: 0xffff_0000,
                metric: 20,
            },
        );
        assert!(lsa_checksum_ok(&b));
        // Age is outside the sum.
        b[0..2].copy_from_slice(&MAX_AGE.to_be_bytes());
        assert!(lsa_checksum_ok(&b));
        b[30] ^= 1;
        assert!(!lsa_checksum_ok(&b));
    }

    #[test]
    fn packets_round_trip() {
        let mut out = Vec::new();
        let h = Hello {
            mask: Ipv4Addr::new(255, 255, 255, 0),
            hello_interval: 1,
            options: OPT_E,
            priority: 1,
            dead_interval: 4,
            neighbors: vec![Ipv4Addr::new(198, 51, 100, 1)],
        };
        encode_hello(&mut out, rid(), &h);
        let p = parse(&out).unwrap();
        assert_eq!(p.header.kind, HELLO);
        assert_eq!(p.header.router_id, rid());
        assert_eq!(parse_hello(p.body).unwrap(), h);

        let hdr = LsaHeader {
            age: 1,
            options: OPT_E,
            kind: EXTERNAL_LSA,
            id: 7,
            adv: 8,
            seq: INITIAL_SEQ,
            checksum: 0x1234,
            length: 36,
        };
        let d = DbDesc {
            mtu: 1500,
            options: OPT_E,
            flags: DD_M | DD_MS,
            seq: 42,
        };
        encode_db_desc(&mut out, rid(), d, &[hdr, hdr]);
        let p = parse(&out).unwrap();
        let (d2, rest) = parse_db_desc(p.body).unwrap();
        assert_eq!(d2, d);
        assert_eq!(headers(rest).collect::<Vec<_>>(), vec![hdr, hdr]);

        encode_ls_ack(&mut out, rid(), &[hdr]);
        let p = parse(&out).unwrap();
        assert_eq!(p.header.kind, LS_ACK);
        assert_eq!(headers(p.body).collect::<Vec<_>>(), vec![hdr]);

        let mut lsa = [0u8; EXTERNAL_LSA_LEN];
        external_lsa(
            &mut lsa,
            rid(),
            0,
            INITIAL_SEQ + 1,
            External {
                id: 0x0a00_00ff,
                mask: 0xffff_ff00,
                metric: 100,
            },
        );
        let mut r = Vec::new();
        router_lsa(
            &mut r,
            rid(),
            0,
            INITIAL_SEQ,
            ROUTER_E,
            &[(1, 2, LINK_P2P, 10), (3, 4, LINK_STUB, 10)],
        );
        assert!(lsa_checksum_ok(&r));
        lsu_begin(&mut out, rid());
        lsu_push(&mut out, &lsa);
        lsu_push(&mut out, &r);
        finish(&mut out);
        let p = parse(&out).unwrap();
        let l = parse_ls_update(p.body).unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].0.kind, EXTERNAL_LSA);
        assert_eq!(l[0].0.seq, INITIAL_SEQ + 1);
        assert_eq!(l[0].0.length, 36);
        assert_eq!(l[0].1, &lsa[..]);
        assert!(l[0].2 && l[1].2);
        assert_eq!(l[1].0.kind, ROUTER_LSA);
        assert_eq!(l[1].1.len(), 24 + 24);
    }

    #[test]
    fn bad_packets_are_named() {
        let mut out = Vec::new();
        encode_ls_ack(&mut out, rid(), &[]);
        assert_eq!(parse(&out[..10]), Err(Error::Truncated(10)));
        let mut v3 = out.clone();
        v3[0] = 3;
        assert_eq!(parse(&v3), Err(Error::Version(3)));
        let mut sum = out.clone();
        sum[5] ^= 1;
        assert_eq!(parse(&sum), Err(Error::Checksum));
        let mut long = out.clone();
        long[3] = 200;
        assert!(matches!(
            parse(&long),
            Err(Error::Length { field: 200, .. })
        ));
        // An LSU whose LSA claims more than the packet holds.
        let body = [
            0, 0, 0, 1, 0, 1, 2, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 99,
        ];
        assert_eq!(parse_ls_update(&body), Err(Error::LsaLength(99)));
        // A huge count with nothing behind it.
        assert_eq!(
            parse_ls_update(&[0xff, 0xff, 0xff, 0xff]),
            Err(Error::Truncated(0))
        );
    }

    proptest! {
        #[test]
        fn parsers_never_panic(b in proptest::collection::vec(any::<u8>(), 0..600)) {
            if let Ok(p) = parse(&b) {
                let _ = parse_hello(p.body);
                let _ = parse_db_desc(p.body);
                let _ = parse_ls_update(p.body);
                let _ = headers(p.body).count();
                let _ = parse_ls_request(p.body).count();
            }
            let _ = parse_ls_update(&b);
            let _ = parse_hello(&b);
            let _ = lsa_checksum_ok(&b);
            let _ = lsa_checksum(&b);
        }

        #[test]
        fn every_external_lsa_verifies(id in any::<u32>(), len in 0u32..=32, metric in 0u32..0x100_0000, seq in any::<u32>()) {
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            let mut b = [0u8; EXTERNAL_LSA_LEN];
            external_lsa(&mut b, rid(), 0, seq, External { id, mask, metric });
            prop_assert!(lsa_checksum_ok(&b));
        }
    }
}
