#!/usr/bin/env bash
# redis-benchmark against a single redis-server, orthrus in front of a
# 3-master cluster, and the cluster directly (redis-benchmark --cluster),
# in interleaved rounds; prints requests/s per round, the median ratio to the
# single server, and orthrus's CPU time per 100k requests.
#
# Usage: bench/redis-benchmark.sh [ROUNDS]      (default 3)
# Env: N (requests per run, default 200000), THREADS (orthrus --threads, default 1)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
n="${N:-200000}"
threads="${THREADS:-1}"
command -v redis-benchmark >/dev/null || { echo "redis-benchmark is needed: apt-get install redis-tools" >&2; exit 1; }
cargo build --release --locked -q -p orthrus-proxy -p orthrus-devcluster

tmp="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT INT TERM

target/release/orthrus-devcluster single --addr-file "$tmp/single" >/dev/null & pids+=($!)
target/release/orthrus-devcluster up --masters 3 --replicas 0 --seeds-file "$tmp/seeds" >/dev/null & pids+=($!)
for _ in $(seq 1 300); do [ -s "$tmp/single" ] && [ -s "$tmp/seeds" ] && break; sleep 0.1; done
single_port="$(cut -d: -f2 "$tmp/single")"
seeds="$(cat "$tmp/seeds")"
first_seed_port="$(echo "$seeds" | cut -d, -f1 | cut -d: -f2)"
proxy_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
RUST_LOG=warn target/release/orthrus --listen "127.0.0.1:$proxy_port" --seeds "$seeds" --threads "$threads" & pids+=($!)
proxy_pid=$!
for _ in $(seq 1 100); do redis-cli -p "$proxy_port" get x 2>/dev/null | grep -qv CLUSTERDOWN && break; sleep 0.1; done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
run() { # target-name port extra-args...
  local name=$1 port=$2; shift 2
  redis-benchmark -p "$port" -t set,get -n "$n" -r 100000 -q --csv "$@" 2>/dev/null \
    | tr -d '"' | awk -F, -v t="$name" '$1 == "SET" || $1 == "GET" {print t "," $1 "," $2 "," $5 "," $7}'
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -r), $(redis-server --version | cut -d' ' -f3)"
echo "orthrus --threads $threads; redis-benchmark -n $n -r 100000; $rounds interleaved rounds"
results="$tmp/results.csv"
single_pid="$(redis-cli -p "$single_port" info server | tr -d '\r' | awk -F: '/^process_id/ {print $2}')"
ticks=0
redis_ticks=0
requests=0
for round in $(seq 1 "$rounds"); do
  for mode in "c50:-c 50 -P 1" "c50p16:-c 50 -P 16" "c1:-c 1 -n $((n / 4))"; do
    label="${mode%%:*}"; args="${mode#*:}"
    sbefore=$(cpu_ticks "$single_pid")
    # shellcheck disable=SC2086
    run "single" "$single_port" $args | sed "s/^/$round,$label,/" >> "$results"
    safter=$(cpu_ticks "$single_pid")
    if [ "$label" = c50 ]; then redis_ticks=$((redis_ticks + safter - sbefore)); fi
    before=$(cpu_ticks "$proxy_pid")
    # shellcheck disable=SC2086
    run "orthrus" "$proxy_port" $args | sed "s/^/$round,$label,/" >> "$results"
    after=$(cpu_ticks "$proxy_pid")
    if [ "$label" = c50 ]; then ticks=$((ticks + after - before)); requests=$((requests + 2 * n)); fi
    # shellcheck disable=SC2086
    run "cluster" "$first_seed_port" --cluster $args | sed "s/^/$round,$label,/" >> "$results"
  done
done
hz=$(getconf CLK_TCK)
[ -n "${KEEP_RESULTS:-}" ] && cp "$results" "$KEEP_RESULTS"
python3 - "$results" "$ticks" "$requests" "$hz" "$redis_ticks" <<'PY'
import csv, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
ticks, requests, hz = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
data = {}
lat = {}
for rnd, mode, target, test, rps, p50, p99 in rows:
    data.setdefault((mode, test), {}).setdefault(rnd, {})[target] = float(rps)
    lat.setdefault((mode, test, target), []).append((float(p50), float(p99)))
print(f"{'workload':<16}{'single rps':>11}{'orthrus':>10}{'ratio':>7}{'cluster':>10}{'ratio':>7}   p50/p99 ms single | orthrus | cluster")
for (mode, test), rounds in sorted(data.items()):
    med = lambda t: statistics.median(r[t] for r in rounds.values() if t in r)
    ratio = lambda t: statistics.median(r[t] / r["single"] for r in rounds.values() if t in r)
    ms = lambda t: "{:.3f}/{:.3f}".format(*[statistics.median(x[i] for x in lat[(mode, test, t)]) for i in (0, 1)])
    print(f"{test + ' ' + mode:<16}{med('single'):>11.0f}{med('orthrus'):>10.0f}{ratio('orthrus'):>7.2f}{med('cluster'):>10.0f}{ratio('cluster'):>7.2f}   {ms('single')} | {ms('orthrus')} | {ms('cluster')}")
if requests:
    redis_ticks = int(sys.argv[5])
    print(f"CPU per 100k requests (c50, no pipelining): orthrus {ticks / hz / requests * 100000:.3f} s, "
          f"single redis-server {redis_ticks / hz / requests * 100000:.3f} s, ratio {ticks / max(redis_ticks, 1):.2f}")
PY
