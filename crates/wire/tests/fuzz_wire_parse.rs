//! The wire fuzz target (`wire::fuzzing::exercise`, also `fuzz/` under cargo-fuzz) driven
//! by proptest on stable, for a bounded number of cases on every CI run: random bytes, and
//! plausible frames (Ethernet, 802.1Q, IPv4 with options, IPv6 with extension headers,
//! TCP/UDP/ICMP/ESP, lengths that add up or not) with bytes overwritten and cut anywhere.

use proptest::prelude::*;

/// A frame whose headers are mostly well formed: what a hostile sender starts from.
fn plausible() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![
            Just(0x0800u16),
            Just(0x86dd),
            Just(0x0806),
            Just(0x8100),
            Just(0x88a8)
        ],
        prop_oneof![
            Just(6u8),
            Just(17),
            Just(1),
            Just(58),
            Just(50),
            Just(0),
            Just(43),
            Just(44),
            Just(60),
            any::<u8>()
        ],
        0usize..12,
        proptest::collection::vec(any::<u8>(), 0..1500),
        any::<bool>(),
    )
        .prop_map(|(ethertype, proto, opt_words, tail, fix_len)| {
            let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
            let mut et = ethertype;
            if matches!(et, 0x8100 | 0x88a8) {
                f.extend_from_slice(&et.to_be_bytes());
                f.extend_from_slice(&[0, 100]);
                et = if proto & 1 == 0 { 0x0800 } else { 0x86dd };
            }
            f.extend_from_slice(&et.to_be_bytes());
            let l3 = f.len();
            match et {
                0x0800 => {
                    let ihl = 5 + opt_words.min(10);
                    f.push(0x40 | ihl as u8);
                    f.extend_from_slice(&[0, 0, 0, 0x12, 0x34, 0, 0, 64, proto, 0, 0]);
                    f.extend_from_slice(&[198, 51, 100, 1, 203, 0, 113, 9]);
                    f.extend(std::iter::repeat_n(1u8, (ihl - 5) * 4));
                    f.extend_from_slice(&tail);
                    if fix_len {
                        let total = (f.len() - l3) as u16;
                        f[l3 + 2..l3 + 4].copy_from_slice(&total.to_be_bytes());
                        let c = wire::checksum::checksum(&f[l3..l3 + ihl * 4]);
                        f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
                    }
                }
                0x86dd => {
                    f.extend_from_slice(&[0x60, 0, 0, 0, 0, 0, proto, 64]);
                    f.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
                    f.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
                    f.extend_from_slice(&tail);
                    if fix_len {
                        let plen = (f.len() - l3 - 40) as u16;
                        f[l3 + 4..l3 + 6].copy_from_slice(&plen.to_be_bytes());
                    }
                }
                _ => f.extend_from_slice(&tail),
            }
            f
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200_000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        wire::fuzzing::exercise(&data);
    }

    #[test]
    fn plausible_frames_overwritten_and_cut(
        base in plausible(),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in any::<usize>(),
    ) {
        let mut f = base;
        for (i, b) in flips {
            if !f.is_empty() {
                let k = i % f.len();
                f[k] = b;
            }
        }
        if cut % 4 == 0 && !f.is_empty() {
            f.truncate(cut % f.len());
        }
        wire::fuzzing::exercise(&f);
    }
}
