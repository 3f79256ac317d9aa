//! Feeds arbitrary bytes to ESP decapsulation with fixed SAs (`ipsec::fuzzing::exercise`,
//! which the stable harness crates/ipsec/tests/fuzz_decrypt.rs also drives on every test
//! run): the bytes as a received packet, then as the payload of a packet encrypted and
//! decrypted (must round-trip), corrupted and cut (must be refused). Any panic is a bug.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ipsec::fuzzing::exercise(data));
