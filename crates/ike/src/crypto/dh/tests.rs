use super::*;
use crate::crypto::testing::hex;

const GROUPS: [Dh; 4] = [Dh::Modp2048, Dh::Ecp256, Dh::Ecp384, Dh::Curve25519];

/// A known-answer vector: our private key, our public value, the peer's, the secret.
struct Vector {
    group: Dh,
    private: &'static str,
    public: &'static str,
    peer: &'static str,
    secret: &'static str,
}

const VECTORS: [Vector; 4] = [
    // RFC 5903 §8.1 (i, gix | giy, grx | gry, girx).
    Vector {
        group: Dh::Ecp256,
        private: "C88F01F5 10D9AC3F 70A292DA A2316DE5 44E9AAB8 AFE84049 C62A9C57 862D1433",
        public: "DAD0B653 94221CF9 B051E1FE CA5787D0 98DFE637 FC90B9EF 945D0C37 72581180
                 5271A046 1CDB8252 D61F1C45 6FA3E59A B1F45B33 ACCF5F58 389E0577 B8990BB3",
        peer: "D12DFB52 89C8D4F8 1208B702 70398C34 2296970A 0BCCB74C 736FC755 4494BF63
               56FBF3CA 366CC23E 8157854C 13C58D6A AC23F046 ADA30F83 53E74F33 039872AB",
        secret: "D6840F6B 42F6EDAF D13116E0 E1256520 2FEF8E9E CE7DCE03 812464D0 4B9442DE",
    },
    // RFC 5903 §8.2.
    Vector {
        group: Dh::Ecp384,
        private: "099F3C70 34D4A2C6 99884D73 A375A67F 7624EF7C 6B3C0F16 0647B674 14DCE655
                  E35B5380 41E649EE 3FAEF896 783AB194",
        public: "667842D7 D180AC2C DE6F74F3 7551F557 55C7645C 20EF73E3 1634FE72 B4C55EE6
                 DE3AC808 ACB4BDB4 C88732AE E95F41AA
                 9482ED1F C0EEB9CA FC498462 5CCFC23F 65032149 E0E144AD A0241815 35A0F38E
                 EB9FCFF3 C2C947DA E69B4C63 4573A81C",
        peer: "E558DBEF 53EECDE3 D3FCCFC1 AEA08A89 A987475D 12FD950D 83CFA417 32BC509D
               0D1AC43A 0336DEF9 6FDA41D0 774A3571
               DCFBEC7A ACF31964 72169E83 8430367F 66EEBE3C 6E70C416 DD5F0C68 759DD1FF
               F83FA401 42209DFF 5EAAD96D B9E6386C",
        secret: "11187331 C279962D 93D60424 3FD592CB 9D0A926F 422E4718 7521287E 7156C5C4
                 D6031355 69B9E9D0 9CF5D4A2 70F59746",
    },
    // RFC 7748 §6.1 (Alice's private key and public key, Bob's public key, K).
    Vector {
        group: Dh::Curve25519,
        private: "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a",
        public: "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a",
        peer: "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f",
        secret: "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742",
    },
    // No published vector for group 14: computed with Python's pow() and p as RFC 3526
    // defines it (2^2048 - 2^1984 - 1 + 2^64 * ([2^1918 pi] + 124476), pi by Machin's
    // formula), a = SHA-256("ike group14 a").
    Vector {
        group: Dh::Modp2048,
        private: "a93e85287bd86f1dcc1a4b8da42271eb2bd3796fe5e9a537d37ebd669342439f",
        public: "3455c8ca41e61b2b5aed92d281be05f368b23ff2d1beb3153a2ca0bbd74f3ed2ff7d9111ab02a473\
                 b581f873623026663f4ede0a3c7a8bbc041822b6de7c63df444c968817ce73311c98f88f018605\
                 1a95325cd3272a1aaca4d0050f4ece7a2a1847d295b1d57784c6d11affcc0da039f9f9d801035e\
                 e21c0dcf5270b2b551ef77365db7addf62add80c1d30300982c0a023379f45f7768d72ae5ed442\
                 6162ad210bdbdae8b29104a62d7d9fb6ada14c359dd409cffb4a4792e6b41f6f7043a7e89e26a0\
                 119ebe17ba6b093240192abbd738fd5fdc876b598fc162303d28491d5290a2781b10edff538f6d\
                 60d8471fc0ebf80c1ee32a3e5922e04889d0476122",
        peer: "c5aaa93bca8b89439ee82cd87e1571e26e32c8fcc1fa77d746b7284e690998bf69c11507fe0bc88b\
               7f7003a3d7c060168fc5883a52f96e86dfcec9a41f71cab9863958afa2678842f7457e91a61dd6d8\
               66b3424c5f8394017e126e67a443630c9c625085e95784ee90d0ef8c87f340c246fb89543bfca9e7\
               a9fb781eb1bece58130d56a0868193978ac148523ee178790f9d24fab5b61f13540849b0938ddd5e\
               ac209b27397b8689883aafdcc8500d0ccd4a42731a4b276c2964833e0be46567d0473b5e4a542b8c\
               23449ffd2c9aea5f34661d9cda64e2b7a2f1dfc132c59a3f76c159e4d20a7f9793f7d956b9b6aa6f\
               122ef2a04e9674da3eaeaaee220d0273",
        secret: "bca29d98780a431edc8221305ce4cc0999b7bdd1abea08195e3e7989364cc6240920de3b038667c1\
                 f9bde4b3f9041d80cbdc8b7adcc14c21acab0bb0a78aca1a8bbc093fb278162b0b62b9abcaac31bb\
                 882497e0bf4f7a4dc2a7c06879965f0066298cb2d78a303a6162829c93c5957cab23379360740b07\
                 3e99d952dd0cd71b78788cb5b045c8574d256146e8ec98f552e77b3c2ffcc5ec4b926406e2383ad5\
                 af4268e786752a2f7d05dca6d28284185910ea8831bd886056da7634abe374f2343be76bc15cdce4\
                 14ebdcc743e4bcc0a2634f1ac85d1fd94ee42e4f69ebd49e9f4a68c8f59f35ec63f56e4bb8d2baf9\
                 d72b3568fbde8c47abfd156f3c863297",
    },
];

#[test]
fn known_answers() {
    for v in &VECTORS {
        let k = KeyShare::from_private(v.group, &hex(v.private)).unwrap();
        assert_eq!(k.group(), v.group);
        assert_eq!(k.public(), hex(v.public), "{:?} public value", v.group);
        let s = k.agree(&hex(v.peer)).unwrap();
        assert_eq!(*s, hex(v.secret), "{:?} shared secret", v.group);
    }
}

#[test]
fn every_group_agrees() {
    for g in GROUPS {
        let a = KeyShare::generate(g).unwrap();
        let b = KeyShare::generate(g).unwrap();
        assert_eq!(a.public().len(), g.public_len(), "{g:?}");
        assert_ne!(a.public(), b.public(), "{g:?}");
        let sa = a.agree(b.public()).unwrap();
        let sb = b.agree(a.public()).unwrap();
        assert_eq!(*sa, *sb, "{g:?}");
        let expected = match g {
            Dh::Modp2048 => 256,
            Dh::Ecp256 | Dh::Curve25519 => 32,
            Dh::Ecp384 => 48,
        };
        assert_eq!(sa.len(), expected, "{g:?}: the secret's length");
    }
}

#[test]
fn wrong_lengths_are_refused() {
    for g in GROUPS {
        let k = KeyShare::generate(g).unwrap();
        let other = KeyShare::generate(g).unwrap();
        let n = g.public_len();
        let mut tagged = vec![0x04];
        tagged.extend_from_slice(other.public());
        for bad in [vec![], vec![7; n - 1], vec![7; n + 1], tagged] {
            assert_eq!(
                k.agree(&bad).unwrap_err(),
                CryptoError::KeLength {
                    group: g.id(),
                    got: bad.len(),
                    expected: n
                }
            );
        }
    }
    let k = KeyShare::generate(Dh::Ecp256).unwrap();
    assert_eq!(
        k.agree(&[1; 63]).unwrap_err().to_string(),
        "KE data for group 19 is 63 bytes, expected 64"
    );
}

#[test]
fn points_off_the_curve_are_refused() {
    for v in &VECTORS[..2] {
        let k = KeyShare::from_private(v.group, &hex(v.private)).unwrap();
        let mut peer = hex(v.peer);
        *peer.last_mut().unwrap() ^= 1;
        let zeros = vec![0; peer.len()];
        let ones = vec![0xff; peer.len()];
        for bad in [peer, zeros, ones] {
            let e = k.agree(&bad).unwrap_err();
            assert_eq!(
                e,
                CryptoError::KeInvalid {
                    group: v.group.id(),
                    reason: "the point is not on the curve"
                }
            );
        }
    }
}

#[test]
fn x25519_low_order_points_are_refused() {
    let k = KeyShare::generate(Dh::Curve25519).unwrap();
    let mut one = [0u8; 32];
    one[0] = 1;
    // RFC 7748 §6.1 lets the all-zero check catch these: u = 0 (order 2), u = 1 (order 4)
    // and a point of order 8 (from the list of Curve25519's low-order points).
    let order8 = hex("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800");
    for bad in [vec![0; 32], one.to_vec(), order8] {
        let e = k.agree(&bad).unwrap_err();
        assert_eq!(
            e.to_string(),
            "KE data for group 31 is invalid: the shared secret is all zeros (a low-order point)"
        );
    }
}

#[test]
fn modp_values_outside_1_p_minus_1_are_refused() {
    let k = KeyShare::generate(Dh::Modp2048).unwrap();
    let zero = vec![0u8; 256];
    let mut one = vec![0u8; 256];
    one[255] = 1;
    // p from the vector test's p - 1 and p: p ends ...FFFFFFFF FFFFFFFF.
    let p = modp_prime();
    let mut p_minus_1 = p.clone();
    p_minus_1[255] -= 1;
    for (bad, why) in [
        (zero, "it is 0 or 1 (RFC 6989: 1 < y < p-1)"),
        (one, "it is 0 or 1 (RFC 6989: 1 < y < p-1)"),
        (p_minus_1, "it is p-1 or more (RFC 6989: 1 < y < p-1)"),
        (p, "it is p-1 or more (RFC 6989: 1 < y < p-1)"),
        (vec![0xff; 256], "it is p-1 or more (RFC 6989: 1 < y < p-1)"),
    ] {
        assert_eq!(
            k.agree(&bad).unwrap_err(),
            CryptoError::KeInvalid {
                group: 14,
                reason: why
            }
        );
    }
    // 2 (the generator) is a valid value.
    let mut two = vec![0u8; 256];
    two[255] = 2;
    assert_eq!(k.agree(&two).unwrap().len(), 256);
}

/// RFC 3526 §3's prime, as printed there.
fn modp_prime() -> Vec<u8> {
    hex("FFFFFFFF FFFFFFFF C90FDAA2 2168C234 C4C6628B 80DC1CD1
         29024E08 8A67CC74 020BBEA6 3B139B22 514A0879 8E3404DD
         EF9519B3 CD3A431B 302B0A6D F25F1437 4FE1356D 6D51C245
         E485B576 625E7EC6 F44C42E9 A637ED6B 0BFF5CB6 F406B7ED
         EE386BFB 5A899FA5 AE9F2411 7C4B1FE6 49286651 ECE45B3D
         C2007CB8 A163BF05 98DA4836 1C55D39A 69163FA8 FD24CF5F
         83655D23 DCA3AD96 1C62F356 208552BB 9ED52907 7096966D
         670C354E 4ABC9804 F1746C08 CA18217C 32905E46 2E36CE3B
         E39E772C 180E8603 9B2783A2 EC07A28F B5C55DF0 6F4C52C9
         DE2BCBF6 95581718 3995497C EA956AE5 15D22618 98FA0510
         15728E5A 8AACAA68 FFFFFFFF FFFFFFFF")
}

#[test]
fn the_printed_prime_is_awslcs() {
    // The MODP checks above use the RFC's prime: make sure it is the one AWS-LC uses.
    let k = KeyShare::generate(Dh::Modp2048).unwrap();
    let p = modp_prime();
    assert_eq!(p.len(), 256);
    let mut p_minus_2 = p.clone();
    p_minus_2[255] -= 2;
    // p-2 is in range, p-1 is not: the boundary sits where this p says.
    assert!(k.agree(&p_minus_2).is_ok());
}

#[test]
fn key_shares_and_ciphers_can_move_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<KeyShare>();
    send_sync::<crate::crypto::SkCipher>();
    send_sync::<crate::crypto::PrivateKey>();
    // A MODP share made on one thread agrees on another.
    let a = KeyShare::generate(Dh::Modp2048).unwrap();
    let b = KeyShare::generate(Dh::Modp2048).unwrap();
    let (pa, pb) = (a.public().to_vec(), b.public().to_vec());
    let s = std::thread::spawn(move || a.agree(&pb).unwrap())
        .join()
        .unwrap();
    assert_eq!(*s, *b.agree(&pa).unwrap());
}
