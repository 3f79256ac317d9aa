#!/usr/bin/env bash
# Install everything the tests need (Debian packages), then run the whole suite.
# Works as root on a fresh machine that has only the Rust toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=(dpdk-dev)
missing=()
for p in "${need_pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cargo fmt --all -- --check
# Unit, property, concurrency and end-to-end tests (test profile is optimised).
cargo test --workspace --locked
