//! The `esp_decrypt` fuzz target's body (`ipsec::fuzzing::exercise`) on random and on
//! plausible input, on every test run without nightly: arbitrary bytes, and real ESP
//! packets of every fixed SA with bytes overwritten and cut.

use proptest::prelude::*;

use ipsec::fuzzing::exercise;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..1600)) {
        exercise(&data);
    }

    /// Bytes that look like an outer IPv4/IPv6 header with ESP or NAT-T UDP behind it, so
    /// the decoder gets past its first checks.
    #[test]
    fn plausible_packets(
        pick in any::<u8>(), at in any::<u8>(), v6: bool, udp: bool,
        body in prop::collection::vec(any::<u8>(), 8..600),
    ) {
        let mut p = vec![pick, at];
        let l4 = if udp { 8 } else { 0 };
        if v6 {
            let plen = (l4 + body.len()) as u16;
            p.extend_from_slice(&[0x60, 0, 0, 0]);
            p.extend_from_slice(&plen.to_be_bytes());
            p.extend_from_slice(&[if udp { 17 } else { 50 }, 64]);
            p.extend_from_slice(&[0u8; 32]);
        } else {
            let total = (20 + l4 + body.len()) as u16;
            p.extend_from_slice(&[0x45, 0]);
            p.extend_from_slice(&total.to_be_bytes());
            p.extend_from_slice(&[0, 0, 0, 0, 64, if udp { 17 } else { 50 }, 0, 0]);
            p.extend_from_slice(&[192, 0, 2, 1, 192, 0, 2, 2]);
        }
        if udp {
            let ulen = (8 + body.len()) as u16;
            p.extend_from_slice(&[0x11, 0x94, 0x11, 0x94]);
            p.extend_from_slice(&ulen.to_be_bytes());
            p.extend_from_slice(&[0, 0]);
        }
        // The fixed SAs' SPI, so the replay and ICV paths run.
        let mut body = body;
        body[..4].copy_from_slice(&0x4242u32.to_be_bytes());
        p.extend_from_slice(&body);
        exercise(&p);
    }
}
