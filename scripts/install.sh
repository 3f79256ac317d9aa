#!/usr/bin/env bash
# Install Ferrouter as a systemd service: the release daemon binary in /usr/local/bin, the
# unit in /etc/systemd/system, an example config in /etc/ferrouter (kept if one is there).
# The test bench (ferrouter-lab: lab, benchmarks, traffic generator) only with --with-lab.
# Then edit /etc/ferrouter/ferrouter.toml and: systemctl enable --now ferrouter
set -euo pipefail
cd "$(dirname "$0")/.."
with_lab=0
for a in "$@"; do
    case "$a" in
        --with-lab) with_lab=1 ;;
        -h|--help) echo "usage: $0 [--with-lab]"; exit 0 ;;
        *) echo "$0: unknown argument $a (usage: $0 [--with-lab])" >&2; exit 2 ;;
    esac
done
./scripts/deps.sh
target="${CARGO_TARGET_DIR:-target}"
cargo build --release --locked -p ferrouter
install -D -m 0755 "$target/release/ferrouter" /usr/local/bin/ferrouter
if [ "$with_lab" = 1 ]; then
    cargo build --release --locked -p ferrouter-lab
    install -D -m 0755 "$target/release/ferrouter-lab" /usr/local/bin/ferrouter-lab
fi
install -D -m 0644 dist/ferrouter.service /etc/systemd/system/ferrouter.service
install -d -m 0750 /etc/ferrouter
[ -e /etc/ferrouter/ferrouter.toml ] || install -m 0640 dist/ferrouter.toml /etc/ferrouter/ferrouter.toml
install -D -m 0644 README.md /usr/local/share/doc/ferrouter/README.md
if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
echo "installed ferrouter$([ "$with_lab" = 1 ] && echo " and ferrouter-lab"); edit /etc/ferrouter/ferrouter.toml, then: systemctl enable --now ferrouter"
