//! Packets for tests, fuzzing and `ferrouter-lab bench ipsec`: a UDP datagram (port 12345 to 53)
//! over IPv4 (10.1.0.1 to 10.2.0.1, DF, TTL 64, checksum valid) or IPv6 (2001:db8::1 to
//! 2001:db8::2, hop limit 64), the UDP checksum left 0. Allocates: not for the packet
//! path.

/// An IPv4 UDP packet carrying `payload`, with TOS `tos`.
pub fn udp4(payload: &[u8], tos: u8) -> Vec<u8> {
    let total = 28 + payload.len();
    let mut p = vec![
        0x45,
        tos,
        (total >> 8) as u8,
        total as u8,
        0x12,
        0x34,
        0x40,
        0,
        64,
        17,
        0,
        0,
        10,
        1,
        0,
        1,
        10,
        2,
        0,
        1,
    ];
    let c = wire::checksum::checksum(&p).to_be_bytes();
    p[10..12].copy_from_slice(&c);
    let ulen = 8 + payload.len();
    p.extend_from_slice(&[0x30, 0x39, 0, 53, (ulen >> 8) as u8, ulen as u8, 0, 0]);
    p.extend_from_slice(payload);
    p
}

/// An IPv6 UDP packet carrying `payload`, with traffic class `tc`.
pub fn udp6(payload: &[u8], tc: u8) -> Vec<u8> {
    let plen = 8 + payload.len();
    let mut p = vec![
        0x60 | tc >> 4,
        tc << 4,
        0,
        0,
        (plen >> 8) as u8,
        plen as u8,
        17,
        64,
    ];
    p.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    p.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    p.extend_from_slice(&[0x30, 0x39, 0, 53, (plen >> 8) as u8, plen as u8, 0, 0]);
    p.extend_from_slice(payload);
    p
}
