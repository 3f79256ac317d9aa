#!/usr/bin/env bash
# Build Ferrouter (release) and run its lab demo: three network namespaces, ferrouter
# forwarding between them, ping/ping6/TCP/UDP through it, counters printed, torn down.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
# The daemon (ferrouter) and the test bench that builds the lab and runs it (ferrouter-lab).
cargo build --release --locked -p ferrouter -p ferrouter-lab
exec ./target/release/ferrouter-lab lab demo "$@"
