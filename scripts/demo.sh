#!/usr/bin/env bash
# Build Ferrouter (release) and run its demo: the fast path forwarding every traffic profile
# over an Internet-like FIB, with rates and counters printed.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p ferrouter
exec ./target/release/ferrouter demo "$@"
