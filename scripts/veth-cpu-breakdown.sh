#!/usr/bin/env bash
# Where each frame's CPU time goes when ferrouter and Linux forward over veth (issue 22's
# 2x target): for each DUT, `ferrouter-lab bench rfc2544` offers a fixed load (--loads, percent
# of 10 Gbit/s at 64 bytes; 1.5 % = 0.223 Mpps, below both DUTs' limits) for 10 s, and
# `perf record -a` samples both cores (cpu-clock, 999 Hz) for 5 s in its middle. The samples
# are then grouped (tester, DUT worker, kernel IP forwarding, veth/skb, AF_XDP) and divided
# by the frames forwarded in the window. Needs root; installs perf (Debian package
# linux-perf) and builds the release binary if missing. Usage: sudo scripts/veth-cpu-breakdown.sh [LOAD_PERCENT]
set -euo pipefail
cd "$(dirname "$0")/.."
load="${1:-1.5}"
command -v perf >/dev/null || bash scripts/deps.sh linux-perf
command -v perf >/dev/null || { echo "perf is missing (Debian package linux-perf)" >&2; exit 1; }
bin=target/release/ferrouter-lab
[ -x "$bin" ] && [ -x target/release/ferrouter ] || cargo build --release --locked -p ferrouter -p ferrouter-lab
out=$(mktemp -d /tmp/ferrouter-veth-cpu.XXXXXX)
for dut in linux ferrouter; do
  "$bin" bench rfc2544 --dut "$dut" --transport veth --profile ipv4-64 --routes4 100000 \
    --search binary --max-trials 1 --loads "$load" --duration 10 --name vcpu \
    > "$out/$dut.bench" 2>&1 &
  bench=$!
  # The load trial follows the one-trial search: start sampling 2 s after the search ends.
  for _ in $(seq 1 600); do grep -q "1/.*search" "$out/$dut.bench" 2>/dev/null && break; sleep 0.1; done
  sleep 2
  perf record -a -F 999 -o "$out/$dut.data" -- sleep 5 > "$out/$dut.perf.log" 2>&1
  wait "$bench"
  grep "load $load%" "$out/$dut.bench" || { echo "no load trial in $out/$dut.bench" >&2; exit 1; }
done
python3 - "$out" "$load" <<'PY'
import collections, re, subprocess, sys
out, load = sys.argv[1], float(sys.argv[2])
pps = load / 100 * 10e9 / (84 * 8)          # 64-byte frames: 84 bytes on the wire
frames = pps * 5
def rows(path):
    rep = subprocess.run(["perf", "report", "-i", path, "--no-children", "-g", "none",
                          "--sort", "cpu,dso,sym", "--stdio", "-n"],
                         capture_output=True, text=True, check=True).stdout
    for l in rep.splitlines():
        m = re.match(r"\s+[\d.]+%\s+(\d+)\s+(\d+)\s+(\S+)\s+\[(.)\]\s+(.*)", l)
        if m:
            yield int(m[1]), int(m[2]), m[3], m[4], m[5].strip()
def group(cpu, dso, kind, sym):
    if kind == "." or dso in ("ferrouter", "[vdso]", "libc.so.6"):
        who = "DUT worker (user)" if cpu == 1 else "tester (user)"
        return who + (", clock reads" if "clock_gettime" in sym or "Timespec" in sym else "")
    if dso.startswith("bpf_"):
        return "kernel: XDP program"
    if re.search(r"^(ip_|ip6_|fib|neigh|udp_v4_early|__ip_|dst_|rt_|inet_|nf_)", sym):
        return "kernel: IP forwarding (Linux's)"
    if re.search(r"xsk|xp_|xdp|bpf", sym):
        return "kernel: AF_XDP sockets (copy mode)"
    if re.search(r"veth|napi|net_rx|netif|backlog|skb|dev_|page_frag|page_pool|kmem_cache|"
                 r"kfree|alloc|memcpy|eth_type|consume|gro|sock_wfree|qdisc|validate_xmit", sym):
        return "kernel: veth, skbs, softirq, copies"
    return "kernel: syscalls, scheduling, other"
print(f"fixed load {pps/1e6:.3f} Mpps, 5 s window: ns of CPU per forwarded frame")
for dut in ("linux", "ferrouter"):
    acc, kernel = collections.Counter(), 0
    for n, cpu, dso, kind, sym in rows(f"{out}/{dut}.data"):
        g = group(cpu, dso, kind, sym)
        acc[g] += n
        kernel += n if g.startswith("kernel") else 0
    ns = lambda n: n * (1e9 / 999) / frames
    print(f"\n{dut}: {sum(acc.values())} samples; kernel in all: {ns(kernel):.0f} ns/frame")
    for g, n in sorted(acc.items(), key=lambda x: -x[1]):
        print(f"  {g:40s} {ns(n):6.0f}")
PY
echo "(perf data and bench output in $out)"
