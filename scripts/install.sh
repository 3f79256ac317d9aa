#!/usr/bin/env bash
# Install Ferrouter as a systemd service: the release binary in /usr/local/bin, the unit in
# /etc/systemd/system, an example config in /etc/ferrouter (kept if one is there).
# Then edit /etc/ferrouter/ferrouter.toml and: systemctl enable --now ferrouter
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
cargo build --release --locked
install -D -m 0755 "${CARGO_TARGET_DIR:-target}/release/ferrouter" /usr/local/bin/ferrouter
install -D -m 0644 dist/ferrouter.service /etc/systemd/system/ferrouter.service
install -d -m 0750 /etc/ferrouter
[ -e /etc/ferrouter/ferrouter.toml ] || install -m 0640 dist/ferrouter.toml /etc/ferrouter/ferrouter.toml
install -D -m 0644 README.md /usr/local/share/doc/ferrouter/README.md
if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
echo "installed; edit /etc/ferrouter/ferrouter.toml, then: systemctl enable --now ferrouter"
