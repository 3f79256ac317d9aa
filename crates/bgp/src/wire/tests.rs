use super::*;
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// Helpers

const M: [u8; 16] = [0xff; 16];

/// A whole message of type `ty` around `body`.
fn msg(ty: u8, body: &[u8]) -> Vec<u8> {
    let mut m = M.to_vec();
    m.extend_from_slice(&((body.len() + HEADER_LEN) as u16).to_be_bytes());
    m.push(ty);
    m.extend_from_slice(body);
    m
}

/// An UPDATE body from its three fields.
fn body(withdrawn: &[u8], attrs: &[u8], nlri: &[u8]) -> Vec<u8> {
    let mut b = (withdrawn.len() as u16).to_be_bytes().to_vec();
    b.extend_from_slice(withdrawn);
    b.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
    b.extend_from_slice(attrs);
    b.extend_from_slice(nlri);
    b
}

fn pfx(s: &str) -> (IpAddr, u8) {
    let (a, l) = s.split_once('/').unwrap();
    (a.parse().unwrap(), l.parse().unwrap())
}

fn pfxs(n: &Nlri) -> Vec<(IpAddr, u8)> {
    n.iter().collect()
}

/// ORIGIN IGP, AS_PATH 65002 (4-octet), NEXT_HOP 192.0.2.2.
const BASE: [u8; 20] = [
    0x40, 1, 1, 0, //
    0x40, 2, 6, 2, 1, 0, 0, 0xfd, 0xea, //
    0x40, 3, 4, 192, 0, 2, 2,
];
/// 10.0.0.0/8
const NLRI1: [u8; 2] = [8, 10];

fn with(extra: &[u8]) -> Vec<u8> {
    let mut a = BASE.to_vec();
    a.extend_from_slice(extra);
    a
}

fn parse(attrs: &[u8], nlri: &[u8]) -> Result<Update<'static>, Notification> {
    let b: &'static [u8] = Box::leak(body(&[], attrs, nlri).into_boxed_slice());
    parse_update(b, true)
}

fn err(attrs: &[u8], nlri: &[u8]) -> (u8, u8, Vec<u8>) {
    let n = parse(attrs, nlri).expect_err("session reset expected");
    (n.code, n.subcode, n.data)
}

fn taw_reason(attrs: &[u8], nlri: &[u8]) -> Option<&'static str> {
    parse(attrs, nlri).expect("Ok expected").treat_as_withdraw
}

// ---------------------------------------------------------------------------------------------
// Byte literals: framing, OPEN, KEEPALIVE, NOTIFICATION

#[test]
fn keepalive_bytes() {
    let lit = [M.as_slice(), &[0, 19, 4]].concat();
    let mut out = Vec::new();
    encode_keepalive(&mut out);
    assert_eq!(out, lit);
    assert_eq!(frame(&lit), Ok(Some((MSG_KEEPALIVE, 19))));
}

/// An OPEN as BIRD 2 sends it: one capabilities parameter with MP IPv4 unicast, route
/// refresh, enhanced route refresh, graceful restart, 4-octet AS, ADD-PATH.
const BIRD_OPEN: [u8; 57] = [
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0, 57, 1, // header
    4, 0xfd, 0xea, 0, 90, 192, 0, 2, 2, // version, AS 65002, hold 90, id 192.0.2.2
    28, 2, 26, // opt params length; capabilities parameter
    1, 4, 0, 1, 0, 1, // MP IPv4 unicast
    2, 0, // route refresh
    70, 0, // enhanced route refresh
    64, 2, 0x00, 120, // graceful restart, 120 s
    65, 4, 0, 0, 0xfd, 0xea, // 4-octet AS 65002
    69, 4, 0, 1, 1, 1, // ADD-PATH IPv4 unicast receive
];

#[test]
fn open_bird_bytes() {
    assert_eq!(frame(&BIRD_OPEN), Ok(Some((MSG_OPEN, 57))));
    let o = parse_open(&BIRD_OPEN[HEADER_LEN..]).unwrap();
    assert_eq!(
        o,
        Open {
            version: 4,
            asn: 65002,
            hold_time: 90,
            router_id: Ipv4Addr::new(192, 0, 2, 2),
            families: vec![(1, 1)],
            four_octet_as: true,
            route_refresh: true,
        }
    );
}

#[test]
fn open_frr_style_one_capability_per_parameter() {
    // FRR / older speakers: each capability in its own parameter; IPv6 too; AS 4200000000.
    let mut b = vec![4, 0x5b, 0xa0, 0, 180, 10, 0, 0, 1, 0];
    let params: &[&[u8]] = &[
        &[1, 4, 0, 1, 0, 1],
        &[1, 4, 0, 2, 0, 1],
        &[128, 0], // old Cisco route refresh
        &[2, 0],
        &[65, 4, 0xfa, 0x56, 0xea, 0x00],
    ];
    for p in params {
        b.push(2);
        b.push(p.len() as u8);
        b.extend_from_slice(p);
    }
    b[9] = (b.len() - 10) as u8;
    let o = parse_open(&b).unwrap();
    assert_eq!(o.asn, 4_200_000_000);
    assert_eq!(o.families, vec![(1, 1), (2, 1)]);
    assert!(o.four_octet_as && o.route_refresh);
    assert_eq!(o.hold_time, 180);
}

#[test]
fn open_encode_bytes() {
    let mut out = Vec::new();
    encode_open(&mut out, 65002, 90, Ipv4Addr::new(192, 0, 2, 1), &[(1, 1)]);
    let lit = [
        M.as_slice(),
        &[0, 45, 1, 4, 0xfd, 0xea, 0, 90, 192, 0, 2, 1, 16, 2, 14],
        &[1, 4, 0, 1, 0, 1, 2, 0, 65, 4, 0, 0, 0xfd, 0xea],
    ]
    .concat();
    assert_eq!(out, lit);

    out.clear();
    let fams = [(1, 1), (2, 1)];
    encode_open(&mut out, 4_200_000_000, 0, Ipv4Addr::new(1, 2, 3, 4), &fams);
    assert_eq!(&out[20..22], &[0x5b, 0xa0], "AS_TRANS in the 2-octet field");
    let (ty, len) = frame(&out).unwrap().unwrap();
    assert_eq!((ty, len), (MSG_OPEN, out.len()));
    let o = parse_open(&out[HEADER_LEN..]).unwrap();
    assert_eq!(o.asn, 4_200_000_000);
    assert_eq!(o.families, fams);
    assert_eq!(o.hold_time, 0);
}

#[test]
fn open_extended_optional_parameters_rfc9072() {
    // Non-Ext OP Len 255, Non-Ext OP Type 255, Extended Opt. Parm. Length, 2-byte param lengths.
    let caps = [1, 4, 0, 1, 0, 1, 65, 4, 0, 0, 0xfd, 0xea];
    let mut b = vec![4, 0xfd, 0xea, 0, 90, 192, 0, 2, 2, 255, 255];
    b.extend_from_slice(&((caps.len() + 3) as u16).to_be_bytes());
    b.push(2);
    b.extend_from_slice(&(caps.len() as u16).to_be_bytes());
    b.extend_from_slice(&caps);
    let o = parse_open(&b).unwrap();
    assert_eq!(
        (o.asn, o.families.clone(), o.four_octet_as),
        (65002, vec![(1, 1)], true)
    );
}

#[test]
fn open_errors() {
    let good = BIRD_OPEN[HEADER_LEN..].to_vec();
    let with = |i: usize, v: &[u8]| {
        let mut b = good.clone();
        b[i..i + v.len()].copy_from_slice(v);
        parse_open(&b).unwrap_err()
    };
    assert_eq!(with(0, &[3]), Notification::new(2, 1, &[0, 4]));
    assert_eq!(with(3, &[0, 1]), Notification::new(2, 6, &[]));
    assert_eq!(with(3, &[0, 2]), Notification::new(2, 6, &[]));
    assert_eq!(with(5, &[0, 0, 0, 0]), Notification::new(2, 3, &[]));
    // 4-octet AS capability says AS 0.
    assert_eq!(with(28, &[0, 0, 0, 0]), Notification::new(2, 2, &[]));
    // Parameter type 1 (authentication, deprecated).
    assert_eq!(with(10, &[1]), Notification::new(2, 4, &[]));
    // A capability overrunning its parameter.
    assert_eq!(with(13, &[9]), Notification::new(2, 0, &[]));
    // MP capability of length 3 (its last byte then reads as the next capability's code).
    assert_eq!(with(12, &[1, 3]).subcode, 0);
    // Optional parameters length beyond the body, or short of it.
    assert_eq!(with(9, &[29]), Notification::new(1, 2, &[0, 57]));
    assert_eq!(with(9, &[27]), Notification::new(1, 2, &[0, 57]));
    // The capabilities parameter one byte short: its last capability overruns it.
    assert_eq!(with(11, &[25]), Notification::new(2, 0, &[]));
    assert_eq!(
        parse_open(&good[..good.len() - 1]).unwrap_err(),
        Notification::new(1, 2, &[0, 56])
    );
    let mut long = good.clone();
    long.push(0);
    assert_eq!(parse_open(&long).unwrap_err().subcode, 2);
    assert_eq!(
        parse_open(&good[..5]).unwrap_err(),
        Notification::new(1, 2, &[0, 24])
    );
}

#[test]
fn notification_bytes() {
    // Cease / Administrative Shutdown with an RFC 8203 message "bye!".
    let lit = [M.as_slice(), &[0, 26, 3, 6, 2, 4, b'b', b'y', b'e', b'!']].concat();
    assert_eq!(frame(&lit), Ok(Some((MSG_NOTIFICATION, 26))));
    let n = parse_notification(&lit[HEADER_LEN..]);
    assert_eq!(n, Notification::new(6, 2, &[4, b'b', b'y', b'e', b'!']));
    assert_eq!(n.shutdown_message(), Some("bye!"));
    assert_eq!(
        n.to_string(),
        "Cease / Administrative Shutdown (6/2), 5 bytes of data: \"bye!\""
    );
    let mut out = Vec::new();
    encode_notification(&mut out, &n);
    assert_eq!(out, lit);
    assert_eq!(parse_notification(&[3]), Notification::new(0, 0, &[]));
    assert_eq!(
        Notification::new(3, 1, &[]).to_string(),
        "UPDATE Message Error / Malformed Attribute List (3/1), 0 bytes of data"
    );
    assert_eq!(
        Notification::new(4, 0, &[]).to_string(),
        "Hold Timer Expired / Unspecific (4/0), 0 bytes of data"
    );
    // Data too long for one message is cut.
    out.clear();
    encode_notification(&mut out, &Notification::new(3, 1, &[7; 5000]));
    assert_eq!(out.len(), MAX_MESSAGE_LEN);
    assert_eq!(
        frame(&out).unwrap(),
        Some((MSG_NOTIFICATION, MAX_MESSAGE_LEN))
    );
}

#[test]
fn route_refresh_bytes() {
    let lit = [M.as_slice(), &[0, 23, 5, 0, 2, 0, 1]].concat();
    let mut out = Vec::new();
    encode_route_refresh(&mut out, AFI_IPV6, SAFI_UNICAST);
    assert_eq!(out, lit);
    assert_eq!(frame(&lit), Ok(Some((MSG_ROUTE_REFRESH, 23))));
    assert_eq!(parse_route_refresh(&lit[HEADER_LEN..]), Ok((2, 1)));
    assert_eq!(
        parse_route_refresh(&[0, 1]),
        Err(Notification::new(7, 1, &[0, 1]))
    );
}

#[test]
fn frame_errors_and_partial() {
    let ka = [M.as_slice(), &[0, 19, 4]].concat();
    for i in 0..ka.len() {
        assert_eq!(frame(&ka[..i]), Ok(None), "prefix of {i} bytes");
    }
    let mut two = ka.clone();
    two.extend_from_slice(&ka[..5]);
    assert_eq!(frame(&two), Ok(Some((4, 19))));

    let mut bad = ka.clone();
    bad[3] = 0;
    assert_eq!(frame(&bad), Err(Notification::new(1, 1, &[])));
    assert_eq!(frame(&bad[..5]), Err(Notification::new(1, 1, &[])), "early");

    let hdr = |len: u16, ty: u8| [M.as_slice(), &len.to_be_bytes(), &[ty]].concat();
    assert_eq!(frame(&hdr(18, 4)), Err(Notification::new(1, 2, &[0, 18])));
    assert_eq!(
        frame(&hdr(4097, 2)),
        Err(Notification::new(1, 2, &[0x10, 0x01]))
    );
    assert_eq!(frame(&hdr(20, 4)), Err(Notification::new(1, 2, &[0, 20])));
    assert_eq!(frame(&hdr(28, 1)), Err(Notification::new(1, 2, &[0, 28])));
    assert_eq!(frame(&hdr(22, 2)), Err(Notification::new(1, 2, &[0, 22])));
    assert_eq!(frame(&hdr(20, 3)), Err(Notification::new(1, 2, &[0, 20])));
    assert_eq!(frame(&hdr(24, 5)), Err(Notification::new(1, 2, &[0, 24])));
    assert_eq!(frame(&hdr(19, 6)), Err(Notification::new(1, 3, &[6])));
    assert_eq!(
        frame(&hdr(4096, 2)),
        Ok(None),
        "valid header, body not here yet"
    );
}

// ---------------------------------------------------------------------------------------------
// Byte literals: UPDATE

/// ORIGIN IGP, AS_PATH 65002 65010, NEXT_HOP 192.0.2.2, MED 100, COMMUNITIES 65002:1;
/// NLRI 10.1.0.0/24, 172.16.0.0/16, 192.168.1.1/32.
const UPDATE3: [u8; 73] = [
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0, 73, 2, // header
    0, 0, // no withdrawn routes
    0, 38, // path attributes
    0x40, 1, 1, 0, // ORIGIN IGP
    0x40, 2, 10, 2, 2, 0, 0, 0xfd, 0xea, 0, 0, 0xfd, 0xf2, // AS_PATH
    0x40, 3, 4, 192, 0, 2, 2, // NEXT_HOP
    0x80, 4, 4, 0, 0, 0, 100, // MED
    0xc0, 8, 4, 0xfd, 0xea, 0, 1, // COMMUNITIES
    24, 10, 1, 0, 16, 172, 16, 32, 192, 168, 1, 1, // NLRI
];

fn update3_attrs() -> Attrs {
    Attrs {
        origin: 0,
        as_path: AsPath::sequence(&[65002, 65010]),
        next_hop: Some("192.0.2.2".parse().unwrap()),
        med: Some(100),
        local_pref: None,
        atomic_aggregate: false,
        communities: vec![(65002 << 16) | 1],
    }
}

#[test]
fn update_three_ipv4_prefixes_bytes() {
    assert_eq!(frame(&UPDATE3), Ok(Some((MSG_UPDATE, 73))));
    let u = parse_update(&UPDATE3[HEADER_LEN..], true).unwrap();
    assert!(u.withdrawn.is_empty() && u.mp_reach.is_none() && u.mp_unreach.is_none());
    assert_eq!(u.treat_as_withdraw, None);
    assert_eq!(u.discarded_attrs, 0);
    assert_eq!(u.attrs, update3_attrs());
    assert_eq!(
        pfxs(&u.nlri),
        vec![
            pfx("10.1.0.0/24"),
            pfx("172.16.0.0/16"),
            pfx("192.168.1.1/32")
        ]
    );
    assert_eq!(u.nlri.count(), 3);
    assert_eq!(u.end_of_rib(), None);
    assert_eq!(u.attrs.as_path.to_string(), "65002 65010");

    let mut out = Vec::new();
    encode_updates(
        &mut out,
        &update3_attrs(),
        None,
        &[
            pfx("10.1.0.0/24"),
            pfx("172.16.0.0/16"),
            pfx("192.168.1.1/32"),
        ],
        &[],
        true,
    );
    assert_eq!(out, UPDATE3);
}

/// ORIGIN IGP, AS_PATH 65002, MP_REACH IPv6 unicast, next hop 2001:db8::2 + fe80::2,
/// 2001:db8:1::/48 and 2001:db8:2::/64.
const UPDATE_V6: [u8; 93] = [
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0, 93, 2, // header
    0, 0, 0, 70, // no withdrawn; attributes
    0x40, 1, 1, 0, // ORIGIN
    0x40, 2, 6, 2, 1, 0, 0, 0xfd, 0xea, // AS_PATH
    0x90, 14, 0, 53, 0, 2, 1, 32, // MP_REACH, AFI 2 SAFI 1, next hop length 32
    0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, // 2001:db8::2
    0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, // fe80::2
    0, // reserved
    48, 0x20, 0x01, 0x0d, 0xb8, 0, 1, // 2001:db8:1::/48
    64, 0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0, // 2001:db8:2::/64
];

#[test]
fn update_mp_reach_ipv6_link_local_bytes() {
    assert_eq!(frame(&UPDATE_V6), Ok(Some((MSG_UPDATE, 93))));
    let u = parse_update(&UPDATE_V6[HEADER_LEN..], true).unwrap();
    assert_eq!(
        u.treat_as_withdraw, None,
        "no NEXT_HOP needed for MP_REACH only"
    );
    assert!(u.nlri.is_empty() && u.withdrawn.is_empty());
    let mp = u.mp_reach.unwrap();
    assert_eq!((mp.afi, mp.safi), (2, 1));
    assert_eq!(mp.next_hop, "2001:db8::2".parse::<IpAddr>().unwrap());
    assert_eq!(mp.link_local, Some("fe80::2".parse().unwrap()));
    assert_eq!(mp.nlri.afi(), AFI_IPV6);
    assert_eq!(
        pfxs(&mp.nlri),
        vec![pfx("2001:db8:1::/48"), pfx("2001:db8:2::/64")]
    );
    assert_eq!(u.attrs.as_path, AsPath::sequence(&[65002]));
    assert_eq!(u.attrs.next_hop, None);
}

#[test]
fn update_mp_reach_ipv6_encode() {
    let attrs = Attrs {
        as_path: AsPath::sequence(&[65002]),
        ..Attrs::default()
    };
    let nh: Ipv6Addr = "2001:db8::2".parse().unwrap();
    let mut out = Vec::new();
    let ann = [pfx("2001:db8:1::/48"), pfx("2001:db8:2::/64")];
    encode_updates(&mut out, &attrs, Some(nh), &ann, &[], true);
    let want = [
        M.as_slice(),
        &[0, 77, 2, 0, 0, 0, 54],
        &[0x40, 1, 1, 0, 0x40, 2, 6, 2, 1, 0, 0, 0xfd, 0xea],
        &[0x90, 14, 0, 37, 0, 2, 1, 16],
        &nh.octets(),
        &[
            0, 48, 0x20, 0x01, 0x0d, 0xb8, 0, 1, 64, 0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0,
        ],
    ]
    .concat();
    assert_eq!(out, want);
}

#[test]
fn end_of_rib_bytes() {
    let v4 = [M.as_slice(), &[0, 23, 2, 0, 0, 0, 0]].concat();
    let v6 = [M.as_slice(), &[0, 29, 2, 0, 0, 0, 6, 0x80, 15, 3, 0, 2, 1]].concat();
    for (lit, afi) in [(&v4, AFI_IPV4), (&v6, AFI_IPV6)] {
        let mut out = Vec::new();
        encode_end_of_rib(&mut out, afi);
        assert_eq!(&out, lit);
        let (ty, len) = frame(lit).unwrap().unwrap();
        assert_eq!((ty, len), (MSG_UPDATE, lit.len()));
        let u = parse_update(&lit[HEADER_LEN..], true).unwrap();
        assert_eq!(u.end_of_rib(), Some(afi));
        assert_eq!(u.treat_as_withdraw, None);
    }
    // MP_UNREACH with AFI 1 / SAFI 1 and no NLRI: IPv4 End-of-RIB too.
    let u = parse(&[0x80, 15, 3, 0, 1, 1], &[]).unwrap();
    assert_eq!(u.end_of_rib(), Some(AFI_IPV4));
    // Not End-of-RIB: an MP_UNREACH of another family (skipped), or a withdrawal.
    assert_eq!(
        parse(&[0x80, 15, 3, 0, 1, 128], &[]).unwrap().end_of_rib(),
        None
    );
    let b = body(&[8, 10], &[], &[]);
    assert_eq!(parse_update(&b, true).unwrap().end_of_rib(), None);
}

#[test]
fn withdrawals_and_mp_unreach() {
    let b = body(
        &[24, 10, 1, 2],
        &[0x90, 15, 0, 8, 0, 2, 1, 32, 0x20, 0x01, 0x0d, 0xb8],
        &[],
    );
    let u = parse_update(&b, true).unwrap();
    assert_eq!(pfxs(&u.withdrawn), vec![pfx("10.1.2.0/24")]);
    assert_eq!(pfxs(&u.mp_unreach.unwrap()), vec![pfx("2001:db8::/32")]);
    assert_eq!(
        u.treat_as_withdraw, None,
        "no attributes needed to withdraw"
    );
}

#[test]
fn host_bits_are_cleared() {
    let u = parse(&BASE, &[20, 10, 1, 0xff, 0, 9, 0xff, 0xff]).unwrap();
    assert_eq!(
        pfxs(&u.nlri),
        vec![pfx("10.1.240.0/20"), pfx("0.0.0.0/0"), pfx("255.128.0.0/9")]
    );
}

#[test]
fn nlri_errors_are_precise() {
    assert_eq!(
        Nlri::new(AFI_IPV4, &[8, 10, 33, 1, 2, 3, 4, 5]).unwrap_err(),
        NlriError::PrefixTooLong {
            offset: 2,
            len: 33,
            max: 32
        }
    );
    assert_eq!(
        Nlri::new(AFI_IPV6, &[64, 1, 2, 3]).unwrap_err(),
        NlriError::Truncated {
            offset: 0,
            len: 64,
            need: 8,
            have: 3
        }
    );
    assert_eq!(Nlri::new(3, &[]).unwrap_err(), NlriError::UnsupportedAfi(3));
    assert!(Nlri::new(AFI_IPV6, &[129]).is_err());
    assert!(Nlri::new(AFI_IPV6, &[128; 17]).is_ok());
}

/// BIRD fills a 4096-byte UPDATE with about 900 prefixes of mixed lengths.
#[test]
fn full_update_of_900_prefixes() {
    let mut ann = Vec::new();
    for i in 0..900u32 {
        let len = [24u8, 22, 20, 16][i as usize % 4];
        ann.push((IpAddr::V4(Ipv4Addr::from((i + 1) << 12)), len));
    }
    let mut out = Vec::new();
    encode_updates(&mut out, &update3_attrs(), None, &ann, &[], true);
    let (ty, len) = frame(&out).unwrap().unwrap();
    assert_eq!((ty, len), (MSG_UPDATE, out.len()), "one message");
    assert!(len > 3000 && len <= MAX_MESSAGE_LEN, "{len}");
    let u = parse_update(&out[HEADER_LEN..], true).unwrap();
    assert_eq!(u.nlri.count(), 900);
    let want: Vec<_> = ann.iter().map(|&(a, l)| mask(a, l)).collect();
    assert_eq!(pfxs(&u.nlri), want);
}

/// The prefix with host bits cleared.
fn mask(a: IpAddr, l: u8) -> (IpAddr, u8) {
    match a {
        IpAddr::V4(a) => {
            let l = l.min(32);
            let m = u32::MAX.checked_shl(32 - u32::from(l)).unwrap_or(0);
            (IpAddr::V4((u32::from(a) & m).into()), l)
        }
        IpAddr::V6(a) => {
            let l = l.min(128);
            let m = u128::MAX.checked_shl(128 - u32::from(l)).unwrap_or(0);
            (IpAddr::V6((u128::from(a) & m).into()), l)
        }
    }
}

/// Split a byte stream into messages, checking each frame.
fn messages(mut s: &[u8]) -> Vec<(u8, &[u8])> {
    let mut v = Vec::new();
    while !s.is_empty() {
        let (ty, len) = frame(s).unwrap().expect("whole message");
        assert!(len <= MAX_MESSAGE_LEN);
        v.push((ty, &s[HEADER_LEN..len]));
        s = &s[len..];
    }
    v
}

/// What a stream of UPDATEs says: announced (with their attrs and IPv6 next hop), withdrawn.
type Announced = Vec<((IpAddr, u8), Attrs, Option<IpAddr>)>;

fn decode_stream(s: &[u8], four: bool) -> (Announced, Vec<(IpAddr, u8)>) {
    let (mut ann, mut wd) = (Vec::new(), Vec::new());
    for (ty, b) in messages(s) {
        assert_eq!(ty, MSG_UPDATE);
        let u = parse_update(b, four).unwrap();
        assert_eq!(u.treat_as_withdraw, None);
        assert_eq!(u.discarded_attrs, 0);
        wd.extend(u.withdrawn.iter());
        wd.extend(u.mp_unreach.iter().flat_map(|n| n.iter()));
        ann.extend(u.nlri.iter().map(|p| (p, u.attrs.clone(), None)));
        if let Some(mp) = u.mp_reach {
            ann.extend(
                mp.nlri
                    .iter()
                    .map(|p| (p, u.attrs.clone(), Some(mp.next_hop))),
            );
        }
    }
    (ann, wd)
}

#[test]
fn hundred_thousand_prefixes_split() {
    let ann: Vec<_> = (0..100_000u32)
        .map(|i| (IpAddr::V4(Ipv4Addr::from(i << 8)), 24))
        .collect();
    let wd: Vec<_> = (0..20_000u128)
        .map(|i| {
            (
                IpAddr::V6(Ipv6Addr::from((0x2001_0db8u128 << 96) | (i << 64))),
                64,
            )
        })
        .collect();
    let mut out = Vec::new();
    encode_updates(&mut out, &update3_attrs(), None, &ann, &wd, true);
    let n = messages(&out).len();
    assert!(
        n >= out.len() / MAX_MESSAGE_LEN && n < out.len() / 3900 + 3,
        "{n}"
    );
    let (a, w) = decode_stream(&out, true);
    assert_eq!(a.len(), ann.len());
    assert!(a.iter().map(|x| x.0).eq(ann.iter().copied()));
    assert_eq!(w, wd);
}

// ---------------------------------------------------------------------------------------------
// RFC 7606: one test per case

#[test]
fn withdrawn_length_overrun_is_malformed_attribute_list() {
    assert_eq!(
        parse_update(&[0, 5, 8, 10], true).unwrap_err(),
        Notification::new(3, 1, &[])
    );
    assert_eq!(
        parse_update(&[0], true).unwrap_err(),
        Notification::new(3, 1, &[])
    );
}

#[test]
fn total_attribute_length_overrun_is_malformed_attribute_list() {
    assert_eq!(
        parse_update(&[0, 0, 0, 9, 0x40, 1, 1, 0], true).unwrap_err(),
        Notification::new(3, 1, &[])
    );
}

#[test]
fn attribute_length_overrunning_the_list_is_malformed_attribute_list() {
    assert_eq!(
        err(&with(&[0xc0, 8, 8, 0, 0, 0, 1]), &NLRI1),
        (3, 1, vec![])
    );
    // A lone flags byte, and an extended length missing its second byte.
    assert_eq!(err(&with(&[0xc0]), &NLRI1), (3, 1, vec![]));
    assert_eq!(err(&with(&[0xd0, 8, 0]), &NLRI1), (3, 1, vec![]));
}

#[test]
fn bad_nlri_is_invalid_network_field() {
    assert_eq!(err(&BASE, &[33, 1, 2, 3, 4, 5]), (3, 10, vec![]));
    assert_eq!(err(&BASE, &[24, 10, 1]), (3, 10, vec![]));
    let b = body(&[25, 1, 2, 3], &[], &[]);
    assert_eq!(
        parse_update(&b, true).unwrap_err(),
        Notification::new(3, 10, &[])
    );
}

#[test]
fn malformed_mp_reach_is_session_reset() {
    // IPv6 next hop of 5 bytes.
    let a = [0x80, 14, 10, 0, 2, 1, 5, 1, 2, 3, 4, 5, 0];
    assert_eq!(err(&a, &[]), (3, 9, a.to_vec()));
    // IPv4 next hop of 16 bytes.
    let mut a = vec![0x80, 14, 21, 0, 1, 1, 16];
    a.extend_from_slice(&[1; 17]);
    assert_eq!(err(&a, &[]).1, 9);
    // Too short for AFI/SAFI; next hop running past the attribute; reserved byte missing.
    assert_eq!(
        err(&[0x80, 14, 2, 0, 2], &[]),
        (3, 9, vec![0x80, 14, 2, 0, 2])
    );
    assert_eq!(err(&[0x80, 14, 5, 0, 2, 1, 16, 0], &[]).1, 9);
    let mut a = vec![0x80, 14, 20, 0, 2, 1, 16];
    a.extend_from_slice(&[0x20; 16]);
    assert_eq!(err(&a, &[]).1, 9, "no reserved byte");
    // A bad prefix inside.
    let mut a = vec![0x80, 14, 23, 0, 2, 1, 16];
    a.extend_from_slice(&[0x20; 16]);
    a.extend_from_slice(&[0, 129, 0]);
    assert_eq!(err(&a, &[]), (3, 10, vec![]));
}

#[test]
fn malformed_mp_unreach_is_session_reset() {
    assert_eq!(err(&[0x80, 15, 1, 0], &[]), (3, 9, vec![0x80, 15, 1, 0]));
    assert_eq!(err(&[0x80, 15, 5, 0, 2, 1, 64, 1], &[]), (3, 10, vec![]));
}

#[test]
fn mp_attribute_flags_wrong_is_attribute_flags_error() {
    let a = [0x40, 15, 3, 0, 2, 1];
    assert_eq!(err(&a, &[]), (3, 4, a.to_vec()));
    let a = [0xc0, 15, 3, 0, 2, 1];
    assert_eq!(err(&a, &[]), (3, 4, a.to_vec()));
}

#[test]
fn mp_reach_or_unreach_twice_is_malformed_attribute_list() {
    let un = [0x80, 15, 3, 0, 2, 1];
    assert_eq!(err(&[un, un].concat(), &[]), (3, 1, vec![]));
    let mut re = vec![0x80, 14, 21, 0, 2, 1, 16];
    re.extend_from_slice(&[0x20; 16]);
    re.push(0);
    re.extend_from_slice(&[8, 0x20]);
    let a = [&BASE[..13], &re, &re].concat();
    assert_eq!(err(&a, &[]), (3, 1, vec![]));
}

#[test]
fn unsupported_mp_family_is_skipped() {
    // VPNv4 (1/128) MP_REACH: skipped, IPv4 NLRI still announced normally.
    let a = with(&[0x80, 14, 6, 0, 1, 128, 0, 0, 0]);
    let u = parse(&a, &NLRI1).unwrap();
    assert!(u.mp_reach.is_none());
    assert_eq!(u.treat_as_withdraw, None);
    assert_eq!(pfxs(&u.nlri), vec![pfx("10.0.0.0/8")]);
}

#[test]
fn malformed_origin_is_treat_as_withdraw() {
    let mut a = BASE.to_vec();
    a[3] = 3;
    assert_eq!(taw_reason(&a, &NLRI1), Some("malformed ORIGIN"));
    let a = [&[0x40, 1, 2, 0, 0], &BASE[4..]].concat();
    assert_eq!(taw_reason(&a, &NLRI1), Some("malformed ORIGIN"));
}

#[test]
fn malformed_as_path_is_treat_as_withdraw() {
    let path = |seg: &[u8]| [&BASE[..4], &[0x40, 2, seg.len() as u8], seg, &BASE[13..]].concat();
    // Undefined segment type 5, zero-length segment, overrun, trailing byte.
    for seg in [
        &[5, 1, 0, 0, 0, 1][..],
        &[2, 0],
        &[2, 2, 0, 0, 0, 1],
        &[2, 1, 0, 0, 0, 1, 2],
    ] {
        assert_eq!(
            taw_reason(&path(seg), &NLRI1),
            Some("malformed AS_PATH"),
            "{seg:?}"
        );
    }
    // An empty AS_PATH (iBGP) is fine; so are sets and confederation segments.
    assert_eq!(taw_reason(&path(&[]), &NLRI1), None);
    let u = parse(
        &path(&[
            3, 1, 0, 0, 0, 1, 2, 1, 0, 0, 0, 2, 1, 2, 0, 0, 0, 3, 0, 0, 0, 4,
        ]),
        &NLRI1,
    )
    .unwrap();
    assert_eq!(u.treat_as_withdraw, None);
    assert_eq!(u.attrs.as_path.to_string(), "(1) 2 {3,4}");
    assert_eq!(u.attrs.as_path.path_len(), 2);
    assert_eq!(u.attrs.as_path.first(), Some(2));
}

#[test]
fn malformed_next_hop_is_treat_as_withdraw() {
    let a = [&BASE[..13], &[0x40, 3, 5, 192, 0, 2, 2, 0]].concat();
    assert_eq!(taw_reason(&a, &NLRI1), Some("malformed NEXT_HOP"));
}

#[test]
fn malformed_med_and_local_pref_are_treat_as_withdraw() {
    assert_eq!(
        taw_reason(&with(&[0x80, 4, 3, 0, 0, 1]), &NLRI1),
        Some("malformed MULTI_EXIT_DISC")
    );
    assert_eq!(
        taw_reason(&with(&[0x40, 5, 5, 0, 0, 0, 0, 1]), &NLRI1),
        Some("malformed LOCAL_PREF")
    );
}

#[test]
fn malformed_communities_is_treat_as_withdraw() {
    // RFC 7606 §7.8: length not a non-zero multiple of 4 -> treat-as-withdraw.
    assert_eq!(
        taw_reason(&with(&[0xc0, 8, 5, 0, 0, 0, 1, 2]), &NLRI1),
        Some("malformed COMMUNITIES")
    );
    assert_eq!(
        taw_reason(&with(&[0xc0, 8, 0]), &NLRI1),
        Some("malformed COMMUNITIES")
    );
}

#[test]
fn well_known_flags_wrong_is_treat_as_withdraw() {
    let mut a = BASE.to_vec();
    a[0] = 0xc0; // ORIGIN marked optional
    assert_eq!(taw_reason(&a, &NLRI1), Some("ORIGIN flags wrong"));
    let mut a = BASE.to_vec();
    a[4] = 0x00; // AS_PATH not transitive
    assert_eq!(taw_reason(&a, &NLRI1), Some("AS_PATH flags wrong"));
    let mut a = BASE.to_vec();
    a[13] = 0x80;
    assert_eq!(taw_reason(&a, &NLRI1), Some("NEXT_HOP flags wrong"));
    assert_eq!(
        taw_reason(&with(&[0xc0, 4, 4, 0, 0, 0, 1]), &NLRI1),
        Some("MULTI_EXIT_DISC flags wrong")
    );
    assert_eq!(
        taw_reason(&with(&[0x80, 5, 4, 0, 0, 0, 1]), &NLRI1),
        Some("LOCAL_PREF flags wrong")
    );
    // The partial and extended-length bits do not matter.
    let a = [&[0x50, 1, 0, 1, 0], &BASE[4..]].concat();
    assert_eq!(taw_reason(&a, &NLRI1), None);
}

#[test]
fn duplicate_attribute_keeps_first_and_counts() {
    let u = parse(
        &with(&[
            0x40, 1, 1, 2, 0x80, 4, 4, 0, 0, 0, 1, 0x80, 4, 4, 0, 0, 0, 2,
        ]),
        &NLRI1,
    )
    .unwrap();
    assert_eq!(u.treat_as_withdraw, None);
    assert_eq!(u.discarded_attrs, 2);
    assert_eq!((u.attrs.origin, u.attrs.med), (0, Some(1)));
}

#[test]
fn missing_mandatory_attributes_are_treat_as_withdraw() {
    assert_eq!(taw_reason(&BASE[4..], &NLRI1), Some("missing ORIGIN"));
    let a = [&BASE[..4], &BASE[13..]].concat();
    assert_eq!(taw_reason(&a, &NLRI1), Some("missing AS_PATH"));
    assert_eq!(taw_reason(&BASE[..13], &NLRI1), Some("missing NEXT_HOP"));
    assert_eq!(taw_reason(&[], &NLRI1), Some("missing ORIGIN"));
    // Nothing announced: nothing is missing.
    assert_eq!(taw_reason(&[0x80, 4, 4, 0, 0, 0, 1], &[]), None);
    // MP_REACH only: NEXT_HOP not needed, ORIGIN and AS_PATH are.
    let mut re = vec![0x80, 14, 23, 0, 2, 1, 16];
    re.extend_from_slice(&[0x20; 16]);
    re.extend_from_slice(&[0, 8, 0x20]);
    assert_eq!(taw_reason(&[&BASE[..13], &re].concat(), &[]), None);
    assert_eq!(
        taw_reason(&[&BASE[4..13], &re].concat(), &[]),
        Some("missing ORIGIN")
    );
}

#[test]
fn treat_as_withdraw_keeps_looking_for_session_resets() {
    let mut a = BASE.to_vec();
    a[3] = 9;
    a.extend_from_slice(&[0x80, 15, 1, 0]);
    assert_eq!(err(&a, &NLRI1).1, 9);
    // And keeps the first reason.
    let mut a = BASE.to_vec();
    a[3] = 9;
    a.extend_from_slice(&[0x80, 4, 1, 0]);
    assert_eq!(taw_reason(&a, &NLRI1), Some("malformed ORIGIN"));
}

#[test]
fn malformed_atomic_aggregate_is_discarded() {
    let u = parse(&with(&[0x40, 6, 1, 0]), &NLRI1).unwrap();
    assert_eq!((u.discarded_attrs, u.treat_as_withdraw), (1, None));
    assert!(!u.attrs.atomic_aggregate);
    let u = parse(&with(&[0x40, 6, 0]), &NLRI1).unwrap();
    assert_eq!((u.discarded_attrs, u.attrs.atomic_aggregate), (0, true));
}

#[test]
fn malformed_aggregator_is_discarded() {
    let agg8 = [0xc0, 7, 8, 0, 0, 0xfd, 0xea, 10, 0, 0, 1];
    let agg6 = [0xc0, 7, 6, 0xfd, 0xea, 10, 0, 0, 1];
    assert_eq!(parse(&with(&agg8), &NLRI1).unwrap().discarded_attrs, 0);
    let u = parse(&with(&agg6), &NLRI1).unwrap();
    assert_eq!((u.discarded_attrs, u.treat_as_withdraw), (1, None));
    assert_eq!(
        parse(&with(&[0xc0, 7, 7, 0, 0, 0, 0, 0, 0, 0]), &NLRI1)
            .unwrap()
            .discarded_attrs,
        1
    );
    // On a 2-octet session the 6-byte form is the right one.
    let a = [
        &BASE[..4],
        &[0x40, 2, 4, 2, 1, 0xfd, 0xea],
        &BASE[13..],
        &agg6,
    ]
    .concat();
    let b = body(&[], &a, &NLRI1);
    let u = parse_update(&b, false).unwrap();
    assert_eq!((u.discarded_attrs, u.treat_as_withdraw), (0, None));
}

#[test]
fn unknown_attributes() {
    // Optional (transitive or not): skipped.
    let u = parse(&with(&[0xc0, 99, 2, 1, 2, 0x80, 9, 4, 1, 2, 3, 4]), &NLRI1).unwrap();
    assert_eq!((u.discarded_attrs, u.treat_as_withdraw), (0, None));
    // Well-known: 3/2 with the attribute as data.
    assert_eq!(
        err(&with(&[0x40, 99, 1, 7]), &NLRI1),
        (3, 2, vec![0x40, 99, 1, 7])
    );
}

#[test]
fn as4_path_is_merged_on_two_octet_sessions() {
    // AS_PATH 65002 23456 23456 65010; AS4_PATH 4200000001 4200000002 65010.
    let a = [
        &BASE[..4],
        &[
            0x40, 2, 10, 2, 4, 0xfd, 0xea, 0x5b, 0xa0, 0x5b, 0xa0, 0xfd, 0xf2,
        ],
        &BASE[13..],
        &[
            0xc0, 17, 14, 2, 3, 0xfa, 0x56, 0xea, 0x01, 0xfa, 0x56, 0xea, 0x02, 0, 0, 0xfd, 0xf2,
        ],
    ]
    .concat();
    let b = body(&[], &a, &NLRI1);
    let u = parse_update(&b, false).unwrap();
    assert_eq!(
        u.attrs.as_path.to_string(),
        "65002 4200000001 4200000002 65010"
    );
    // Malformed AS4_PATH: discarded, AS_PATH as is.
    let bad = [&a[..a.len() - 17], &[0xc0, 17, 3, 2, 1, 0]].concat();
    let b = body(&[], &bad, &NLRI1);
    let u = parse_update(&b, false).unwrap();
    assert_eq!(u.discarded_attrs, 1);
    assert_eq!(u.attrs.as_path.to_string(), "65002 23456 23456 65010");
    // Longer than AS_PATH: ignored.
    let long = [
        &a[..a.len() - 17],
        &[0xc0, 17, 22, 2, 5],
        &[0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 5],
    ]
    .concat();
    let b = body(&[], &long, &NLRI1);
    assert_eq!(parse_update(&b, false).unwrap().attrs.as_path.path_len(), 4);
}

#[test]
fn as_path_helpers() {
    let p = AsPath {
        segments: vec![
            AsSegment {
                kind: SegmentKind::Sequence,
                asns: vec![65002, 65010],
            },
            AsSegment {
                kind: SegmentKind::Set,
                asns: vec![65020, 65021],
            },
        ],
    };
    assert_eq!(p.to_string(), "65002 65010 {65020,65021}");
    assert_eq!(p.path_len(), 3);
    assert_eq!(p.first(), Some(65002));
    assert!(p.contains(65021) && !p.contains(1));
    assert_eq!(AsPath::default().first(), None);
    assert_eq!(AsPath::default().to_string(), "");
}

// ---------------------------------------------------------------------------------------------
// Round trips and cross-check with bgpkit-parser

fn arb_prefix() -> impl Strategy<Value = (IpAddr, u8)> {
    prop_oneof![
        (any::<u32>(), 0u8..=32).prop_map(|(a, l)| (IpAddr::V4(a.into()), l)),
        (any::<u128>(), 0u8..=128).prop_map(|(a, l)| (IpAddr::V6(a.into()), l)),
    ]
}

fn arb_asn() -> impl Strategy<Value = u32> {
    prop_oneof![1u32..65535, 1u32..=u32::MAX]
}

fn arb_attrs() -> impl Strategy<Value = Attrs> {
    let seg = (
        prop_oneof![Just(SegmentKind::Sequence), Just(SegmentKind::Set)],
        proptest::collection::vec(arb_asn(), 1..8),
    )
        .prop_map(|(kind, asns)| AsSegment { kind, asns });
    (
        0u8..=2,
        proptest::collection::vec(seg, 0..4),
        any::<u32>(),
        proptest::option::of(any::<u32>()),
        proptest::option::of(any::<u32>()),
        any::<bool>(),
        proptest::collection::vec(0u32..0xffff_0000, 0..6),
    )
        .prop_map(
            |(origin, segments, nh, med, local_pref, atomic_aggregate, communities)| Attrs {
                origin,
                as_path: AsPath { segments },
                next_hop: Some(IpAddr::V4(nh.into())),
                med,
                local_pref,
                atomic_aggregate,
                communities,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn encode_parse_round_trip(
        attrs in arb_attrs(),
        ann in proptest::collection::vec(arb_prefix(), 0..3000),
        wd in proptest::collection::vec(arb_prefix(), 0..1500),
        nh6 in any::<u128>(),
        four in any::<bool>(),
    ) {
        let nh6 = Ipv6Addr::from(nh6);
        let mut out = Vec::new();
        encode_updates(&mut out, &attrs, Some(nh6), &ann, &wd, four);
        let (got_ann, got_wd) = decode_stream(&out, four);
        let by_family = |v: &[(IpAddr, u8)]| -> Vec<(IpAddr, u8)> {
            let v4 = v.iter().filter(|p| p.0.is_ipv4());
            let v6 = v.iter().filter(|p| p.0.is_ipv6());
            v4.chain(v6).map(|&(a, l)| mask(a, l)).collect()
        };
        prop_assert_eq!(got_wd, by_family(&wd));
        let want = by_family(&ann);
        prop_assert_eq!(got_ann.len(), want.len());
        let attrs6 = Attrs { next_hop: None, ..attrs.clone() };
        for ((p, a, nh), w) in got_ann.iter().zip(&want) {
            prop_assert_eq!(p, w);
            if p.0.is_ipv4() {
                prop_assert_eq!(a, &attrs);
                prop_assert_eq!(*nh, None);
            } else {
                prop_assert_eq!(a, &attrs6);
                prop_assert_eq!(*nh, Some(IpAddr::V6(nh6)));
            }
        }
        // Splitting: every message within 4096 (checked in `messages`), and no more of them
        // than needed by much.
        let n = messages(&out).len();
        prop_assert!(n * 2000 <= out.len() + 4 * 4096, "{} messages for {} bytes", n, out.len());
    }

    #[test]
    fn bgpkit_parses_our_updates_the_same(
        attrs in arb_attrs(),
        ann in proptest::collection::vec(arb_prefix(), 0..600),
        wd in proptest::collection::vec(arb_prefix(), 0..300),
        nh6 in any::<u128>(),
        four in any::<bool>(),
    ) {
        // bgpkit-parser takes a leading 0 byte in NLRI for an ADD-PATH path id (a heuristic),
        // so it misreads /0 prefixes: leave those out of the cross-check.
        let no_default = |v: Vec<(IpAddr, u8)>| -> Vec<_> {
            v.into_iter().map(|(a, l)| (a, l.max(1))).collect()
        };
        let (ann, wd) = (no_default(ann), no_default(wd));
        let mut out = Vec::new();
        encode_updates(&mut out, &attrs, Some(nh6.into()), &ann, &wd, four);
        bgpkit_check(&out, four);
    }
}

/// `segs` with adjacent SEQUENCE segments joined.
fn join_sequences(segs: Vec<AsSegment>) -> Vec<AsSegment> {
    let mut out: Vec<AsSegment> = Vec::new();
    for s in segs {
        match out.last_mut() {
            Some(l) if l.kind == SegmentKind::Sequence && s.kind == SegmentKind::Sequence => {
                l.asns.extend(s.asns)
            }
            _ => out.push(s),
        }
    }
    out
}

/// Parse every message of `s` with bgpkit-parser and with [`parse_update`]; they must agree.
fn bgpkit_check(s: &[u8], four: bool) {
    use bgpkit_parser::models::{AsPathSegment, AsnLength, BgpMessage, MetaCommunity, Origin};
    use bgpkit_parser::parser::bgp::messages::parse_bgp_message;
    let asn_len = if four {
        AsnLength::Bits32
    } else {
        AsnLength::Bits16
    };
    for (_, b) in messages(s) {
        let whole = msg(MSG_UPDATE, b);
        let mut bytes = bytes::Bytes::from(whole);
        let BgpMessage::Update(m) = parse_bgp_message(&mut bytes, false, &asn_len).unwrap() else {
            panic!("not an UPDATE");
        };
        let u = parse_update(b, four).unwrap();
        let net =
            |p: &bgpkit_parser::models::NetworkPrefix| (p.prefix.addr(), p.prefix.prefix_len());
        let theirs_wd: Vec<_> = m
            .withdrawn_prefixes
            .iter()
            .chain(
                m.attributes
                    .get_unreachable_nlri()
                    .into_iter()
                    .flat_map(|n| &n.prefixes),
            )
            .map(net)
            .collect();
        let ours_wd: Vec<_> = u
            .withdrawn
            .iter()
            .chain(u.mp_unreach.iter().flat_map(|n| n.iter()))
            .collect();
        assert_eq!(theirs_wd, ours_wd);
        let reach = m.attributes.get_reachable_nlri();
        let theirs_ann: Vec<_> = m
            .announced_prefixes
            .iter()
            .chain(reach.into_iter().flat_map(|n| &n.prefixes))
            .map(net)
            .collect();
        let ours_ann: Vec<_> = u
            .nlri
            .iter()
            .chain(u.mp_reach.iter().flat_map(|m| m.nlri.iter()))
            .collect();
        assert_eq!(theirs_ann, ours_ann);
        if ours_ann.is_empty() {
            continue;
        }
        let a = &m.attributes;
        let origin = match a.origin() {
            Origin::IGP => 0,
            Origin::EGP => 1,
            Origin::INCOMPLETE => 2,
        };
        assert_eq!(origin, u.attrs.origin);
        assert_eq!(a.multi_exit_discriminator(), u.attrs.med);
        assert_eq!(a.local_preference(), u.attrs.local_pref);
        assert_eq!(a.atomic_aggregate(), u.attrs.atomic_aggregate);
        if let Some(mp) = u.mp_reach {
            let nh = reach.and_then(|n| n.next_hop.map(|h| h.addr()));
            assert_eq!(nh, Some(mp.next_hop));
        } else {
            assert_eq!(a.next_hop(), u.attrs.next_hop);
        }
        let comms: Vec<u32> = a
            .iter_communities()
            .map(|c| match c {
                MetaCommunity::Plain(bgpkit_parser::models::Community::Custom(asn, v)) => {
                    (u32::from(asn) << 16) | u32::from(v)
                }
                other => panic!("unexpected community {other:?}"),
            })
            .collect();
        assert_eq!(comms, u.attrs.communities);
        let path = a.effective_as_path().unwrap_or_default();
        let segs: Vec<AsSegment> = path
            .iter_segments()
            .map(|s| {
                let (kind, asns) = match s {
                    AsPathSegment::AsSequence(v) => (SegmentKind::Sequence, v),
                    AsPathSegment::AsSet(v) => (SegmentKind::Set, v),
                    AsPathSegment::ConfedSequence(v) => (SegmentKind::ConfedSequence, v),
                    AsPathSegment::ConfedSet(v) => (SegmentKind::ConfedSet, v),
                };
                AsSegment {
                    kind,
                    asns: asns.iter().map(|&a| u32::from(a)).collect(),
                }
            })
            .collect();
        // bgpkit's AS4_PATH merge joins adjacent SEQUENCE segments; compare that way.
        assert_eq!(
            join_sequences(segs),
            join_sequences(u.attrs.as_path.segments.clone()),
            "{}",
            u.attrs.as_path
        );
    }
}

#[test]
fn bgpkit_parses_the_literals_and_our_open() {
    bgpkit_check(&UPDATE3, true);
    bgpkit_check(&UPDATE_V6, true);
    use bgpkit_parser::models::{AsnLength, BgpMessage, CapabilityValue, ParamValue};
    use bgpkit_parser::parser::bgp::messages::parse_bgp_message;
    let mut out = Vec::new();
    encode_open(
        &mut out,
        4_200_000_000,
        90,
        Ipv4Addr::new(192, 0, 2, 1),
        &[(1, 1), (2, 1)],
    );
    let mut bytes = bytes::Bytes::from(out);
    let BgpMessage::Open(o) = parse_bgp_message(&mut bytes, false, &AsnLength::Bits32).unwrap()
    else {
        panic!("not an OPEN");
    };
    assert_eq!((o.version, o.hold_time), (4, 90));
    assert_eq!(u32::from(o.asn), AS_TRANS);
    assert_eq!(o.bgp_identifier, Ipv4Addr::new(192, 0, 2, 1));
    let caps: Vec<_> = o
        .opt_params
        .iter()
        .flat_map(|p| match &p.param_value {
            ParamValue::Capacities(c) => c.clone(),
            ParamValue::Raw(_) => panic!("raw parameter"),
        })
        .collect();
    let mut fams = Vec::new();
    let (mut rr, mut as4) = (false, None);
    for c in caps {
        match c.value {
            CapabilityValue::MultiprotocolExtensions(m) => fams.push((m.afi as u16, m.safi as u8)),
            CapabilityValue::RouteRefresh(_) => rr = true,
            CapabilityValue::FourOctetAs(a) => as4 = Some(a.asn),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(fams, vec![(1, 1), (2, 1)]);
    assert!(rr);
    assert_eq!(as4, Some(4_200_000_000));
}

// ---------------------------------------------------------------------------------------------
// Never panic

/// Iterate every NLRI of an Ok update; lengths must be in bounds and the walk must end.
fn walk(u: &Update) {
    let check = |n: &Nlri| {
        let max = if n.afi() == AFI_IPV6 { 128 } else { 32 };
        let mut k = 0;
        for (a, l) in n.iter() {
            assert!(l <= max);
            assert_eq!(a.is_ipv6(), n.afi() == AFI_IPV6);
            assert_eq!(mask(a, l), (a, l), "host bits cleared");
            k += 1;
            assert!(k <= n.as_bytes().len());
        }
        assert_eq!(k, n.count());
    };
    check(&u.withdrawn);
    check(&u.nlri);
    u.mp_unreach.iter().for_each(check);
    u.mp_reach.iter().for_each(|m| check(&m.nlri));
    let _ = u.end_of_rib();
    let _ = u.attrs.as_path.to_string();
}

#[derive(Clone, Debug)]
enum Mutation {
    Flip(usize, u8),
    Set(usize, u8),
    Insert(usize, u8),
    Remove(usize),
    Truncate(usize),
}

fn arb_mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        any::<usize>().prop_map(Mutation::Remove),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..600), four in any::<bool>()) {
        let _ = frame(&b);
        let _ = parse_open(&b);
        let _ = parse_notification(&b).to_string();
        let _ = parse_route_refresh(&b);
        if let Ok(u) = parse_update(&b, four) {
            walk(&u);
        }
        let mut m = M.to_vec();
        m.extend_from_slice(&b);
        let _ = frame(&m);
    }

    #[test]
    fn mutated_valid_updates_never_panic(
        attrs in arb_attrs(),
        ann in proptest::collection::vec(arb_prefix(), 1..40),
        wd in proptest::collection::vec(arb_prefix(), 0..10),
        muts in proptest::collection::vec(arb_mutation(), 1..5),
        four in any::<bool>(),
    ) {
        let mut out = Vec::new();
        encode_updates(&mut out, &attrs, Some(Ipv6Addr::LOCALHOST), &ann, &wd, four);
        // Mutate the body of the first message.
        let (_, len) = frame(&out).unwrap().unwrap();
        let mut b = out[HEADER_LEN..len].to_vec();
        for m in muts {
            let at = |i: usize| if b.is_empty() { 0 } else { i % b.len() };
            match m {
                Mutation::Flip(i, x) => { let i = at(i); if let Some(v) = b.get_mut(i) { *v ^= x } }
                Mutation::Set(i, x) => { let i = at(i); if let Some(v) = b.get_mut(i) { *v = x } }
                Mutation::Insert(i, x) => { let i = at(i); b.insert(i, x) }
                Mutation::Remove(i) => { if !b.is_empty() { let i = at(i); b.remove(i); } }
                Mutation::Truncate(i) => { let i = at(i); b.truncate(i) }
            }
        }
        for four in [four, !four] {
            if let Ok(u) = parse_update(&b, four) {
                walk(&u);
            }
        }
        let _ = frame(&msg(MSG_UPDATE, &b));
    }

    #[test]
    fn mutated_opens_never_panic(i in 0usize..57, x in any::<u8>(), cut in 19usize..=57) {
        let mut o = BIRD_OPEN.to_vec();
        o[i] ^= x;
        let _ = frame(&o);
        let _ = parse_open(&o[HEADER_LEN..cut]);
    }
}
