//! Feeds arbitrary input through NAT's IPv4 parsing and in-place translation
//! (`firewall::nat::fuzzing::exercise`, which the stable harness in
//! `crates/firewall/src/nat/tests.rs` also drives on every test run): 12 bytes of the tuple
//! to translate to, then the packet. Any panic is a bug: a broken checksum, a packet that
//! no longer parses, an access out of bounds.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| firewall::nat::fuzzing::exercise(data));
