#!/usr/bin/env bash
# Install everything the tests need (Debian packages), then run the whole suite.
# Works as root on a fresh machine that has only the Rust toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh dpdk-dev librte-net-memif23 curl netcat-openbsd python3-prometheus-client tshark tcpdump systemd nftables conntrack openssl python3-scapy python3-cryptography \
    charon-systemd strongswan-swanctl libcharon-extra-plugins libstrongswan-standard-plugins
# The API fuzzer that tests/api.rs runs against the daemon's own OpenAPI document (PyPI).
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore 'schemathesis==4.32.5'
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Every package declares the workspace's rust-version (cargo then refuses an older rustc, and
# clippy's incompatible_msrv lint above checks std APIs against it).
cargo metadata --format-version 1 --no-deps --locked | python3 -c '
import json, sys
missing = [p["name"] for p in json.load(sys.stdin)["packages"] if not p.get("rust_version")]
if missing:
    sys.exit("packages without rust-version (add rust-version.workspace = true): " + ", ".join(missing))
'
# The FIB's reclamation protocol under every interleaving loom explores (crates/fib/src/qsbr.rs);
# its own target directory, as --cfg loom rebuilds the crate.
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p fib --release --lib --locked loom
# Miri on the unsafe code it can run: the QSBR domain, the packet arena and the handoff lanes. (The FIB's tables
# are 64 MiB mappings, more than Miri's interpreter holds in memory; loom covers their
# reclamation.) It needs the nightly toolchain, which the machine may not have: then say so.
if rustup toolchain list 2>/dev/null | grep -q '^nightly' \
    && rustup component add --toolchain nightly miri rust-src >/dev/null 2>&1; then
    CARGO_TARGET_DIR=target/miri cargo +nightly miri test -p fib --lib --locked qsbr
    CARGO_TARGET_DIR=target/miri cargo +nightly miri test -p dataplane --lib --locked buffer
    CARGO_TARGET_DIR=target/miri cargo +nightly miri test -p dataplane --lib --locked handoff
else
    echo "NOT RUN: Miri (needs the nightly toolchain with the miri and rust-src components, which this machine lacks)"
fi
# Unit, property, concurrency, real-kernel (veth, netlink, network-namespace lab) tests and
# the benchmark commands at small scale. The test profile is optimised (Cargo.toml).
cargo test --workspace --locked
