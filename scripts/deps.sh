#!/usr/bin/env bash
# Install the Debian packages Ferrouter's lab, demo and tests use (only those missing).
set -euo pipefail
pkgs=(iproute2 iputils-ping iperf3 ethtool traceroute procps frr bird2 gobgpd clang libbpf-dev linux-libc-dev "$@")
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
