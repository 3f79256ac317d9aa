#!/usr/bin/env bash
# Build Ferrouter (release) and run its lab demo: three network namespaces, ferrouter
# forwarding between them, ping/ping6/TCP/UDP through it, counters printed, torn down.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
cargo build --release --locked -p ferrouter
exec ./target/release/ferrouter lab demo "$@"
