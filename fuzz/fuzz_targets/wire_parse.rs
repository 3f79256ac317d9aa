//! Feeds arbitrary frames through every parser in `wire`, the way the dataplane does
//! (`wire::fuzzing::exercise`, which the stable harness `crates/wire/tests/fuzz_wire_parse.rs`
//! also drives on every CI run). Any panic is a bug.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| wire::fuzzing::exercise(data));
