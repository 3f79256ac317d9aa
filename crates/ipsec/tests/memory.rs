//! What an SA costs in memory (issue 26: a million SAs must fit; issue 27: two per IKE
//! tunnel). Its own test binary: it reads the process's resident memory, which tests
//! running beside it in one process would disturb.

use std::mem::size_of;

use ipsec::{Direction, Encryption, Integrity, Sa, SaConfig};

fn resident() -> usize {
    let s = std::fs::read_to_string("/proc/self/statm").expect("reading /proc/self/statm");
    s.split_whitespace()
        .nth(1)
        .and_then(|p| p.parse::<usize>().ok())
        .expect("resident pages in /proc/self/statm")
        * 4096
}

#[test]
fn memory_per_sa() {
    println!(
        "size_of: Sa {} with the AEAD context inline, {} bytes used per packet",
        size_of::<Sa>(),
        Sa::hot_bytes(),
    );
    // The AEAD context (584 bytes) is in the SA: 12 cache lines, all of them per packet
    // (issue 27: two SAs a tunnel, a million tunnels; the refusals are counted elsewhere).
    assert!(size_of::<Sa>() <= 12 * 64, "{}", size_of::<Sa>());
    assert!(Sa::hot_bytes() <= 12 * 64, "{}", Sa::hot_bytes());
    assert_eq!(std::mem::align_of::<Sa>(), 64);
    for alg in [
        (Encryption::AesGcm128, Integrity::None),
        (Encryption::AesCbc128, Integrity::HmacSha1_96),
        (Encryption::AesCbc256, Integrity::HmacSha512_256),
    ] {
        const N: usize = 20_000;
        let ek: Vec<u8> = vec![1; alg.0.key_len()];
        let ak: Vec<u8> = vec![2; alg.1.key_len()];
        let before = resident();
        let sas: Vec<Sa> = (0..N)
            .map(|i| {
                let d = if i % 2 == 0 {
                    Direction::Inbound
                } else {
                    Direction::Outbound
                };
                Sa::new(&SaConfig::new(0x1000 + i as u32, d, alg.0, &ek, alg.1, &ak)).unwrap()
            })
            .collect();
        let per = resident().saturating_sub(before) / N;
        println!(
            "{} + {}: {per} bytes per SA (resident, half inbound with a 1024 window), size_of {}",
            alg.0.name(),
            alg.1.name(),
            size_of::<Sa>()
        );
        assert!(per < 4096, "{per}");
        drop(sas);
    }
}
