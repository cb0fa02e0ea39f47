#!/usr/bin/env bash
# redis-benchmark against a single redis-server, orthrus in front of a
# 3-master cluster, the cluster directly (redis-benchmark --cluster), and any
# other proxies in front of the same cluster, in interleaved rounds (each
# round starting one target later than the one before). Prints,
# per workload (GET and SET with 50 clients, 50 clients pipelining 16, and
# 1 client), the median of the per-round ratios to the single server for
# every target, p50/p99 latency, and the CPU microseconds per request of
# every process: the single redis-server, the cluster's redis-servers
# summed, orthrus, and each other proxy (from /proc/PID/task/*/schedstat,
# read before and after each run); with other proxies, in how many rounds
# orthrus's CPU per request was below each one's.
#
# Usage: bench/redis-benchmark.sh [ROUNDS] [options]      (ROUNDS default 3)
#   --rounds N                  same as ROUNDS
#   --seeds-file F              use the running cluster whose seeds F lists
#                               (host:port,... as `orthrus-devcluster up
#                               --seeds-file F` writes) instead of starting one
#   --orthrus-addr H:P:PID      measure a running orthrus instead of starting
#                               one (in front of the same cluster)
#   --proxy NAME=H:P:PID        also measure another proxy in front of the
#                               same cluster; repeatable
# Env: N (requests per test and run, default 200000; a quarter with 1
# client), THREADS (orthrus --threads when started here, default 1),
# ORTHRUS_BIN (the orthrus binary started here, absolute or relative to
# the checkout, default target/release/orthrus; scripts/build-pgo prints
# the profile-guided one's full path), KEEP_RESULTS (copy the raw CSV there).
#
# Nothing given on the command line is stopped or flushed; what the script
# starts (a redis-server, a cluster, orthrus) is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 64; }
die() { echo "redis-benchmark.sh: $*" >&2; exit 64; }

rounds=3
seeds_file=""
orthrus_addr=""
proxies=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="${2:?}"; shift 2 ;;
    --seeds-file) seeds_file="${2:?}"; shift 2 ;;
    --orthrus-addr) orthrus_addr="${2:?}"; shift 2 ;;
    --proxy) proxies+=("${2:?}"); shift 2 ;;
    -h|--help) usage ;;
    [0-9]*) rounds="$1"; shift ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
n="${N:-200000}"
threads="${THREADS:-1}"
orthrus_bin="${ORTHRUS_BIN:-target/release/orthrus}"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive number"
[[ "$n" =~ ^[1-9][0-9]*$ ]] && [ "$n" -ge 4 ] || die "N must be a number of at least 4"
command -v redis-benchmark >/dev/null || { echo "redis-benchmark is needed: apt-get install redis-tools" >&2; exit 1; }
cargo build --release --locked -q -p orthrus-proxy -p orthrus-devcluster

tmp="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT INT TERM

# `NAME=HOST:PORT:PID` or `HOST:PORT:PID` -> "NAME HOST PORT PID" (NAME - if
# none), checked.
parse_target() {
  local spec=$1 name=- rest
  rest="$spec"
  if [[ "$spec" == *=* ]]; then name="${spec%%=*}"; rest="${spec#*=}"; fi
  [[ "$rest" =~ ^([^:]+):([0-9]+):([0-9]+)$ ]] || die "expected [NAME=]HOST:PORT:PID, got $spec"
  [ -d "/proc/${BASH_REMATCH[3]}" ] || die "no process ${BASH_REMATCH[3]} ($spec)"
  echo "$name ${BASH_REMATCH[1]} ${BASH_REMATCH[2]} ${BASH_REMATCH[3]}"
}
pong() { [ "$(redis-cli -h "$1" -p "$2" ping 2>/dev/null)" = PONG ]; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
redis_pid() { redis-cli -h "$1" -p "$2" info server | tr -d '\r' | awk -F: '/^process_id/ {print $2}'; }

target/release/orthrus-devcluster single --addr-file "$tmp/single" >/dev/null 2>"$tmp/single.log" & pids+=($!)
if [ -z "$seeds_file" ]; then
  target/release/orthrus-devcluster up --masters 3 --replicas 0 --seeds-file "$tmp/seeds" >/dev/null 2>"$tmp/cluster.log" & pids+=($!)
  seeds_file="$tmp/seeds"
fi
for _ in $(seq 1 300); do [ -s "$tmp/single" ] && [ -s "$seeds_file" ] && break; sleep 0.1; done
[ -s "$tmp/single" ] || die "the single redis-server did not start: $(cat "$tmp/single.log")"
[ -s "$seeds_file" ] || die "no seeds in $seeds_file $(cat "$tmp/cluster.log" 2>/dev/null)"
single_host="$(cut -d: -f1 "$tmp/single")"
single_port="$(cut -d: -f2 "$tmp/single")"
single_pid="$(redis_pid "$single_host" "$single_port")"
seeds="$(tr -d ' \n' < "$seeds_file")"
first_seed="${seeds%%,*}"
seed_host="${first_seed%:*}"
seed_port="${first_seed##*:}"
pong "$seed_host" "$seed_port" || die "the cluster seed $first_seed does not answer PING"
# Every node of the cluster, masters and replicas, by process id.
node_pids=()
for addr in $(redis-cli -h "$seed_host" -p "$seed_port" cluster nodes | awk '$3 !~ /fail|noaddr/ {split($2, a, "@"); print a[1]}'); do
  node_pids+=("$(redis_pid "${addr%:*}" "${addr##*:}")")
done
[ "${#node_pids[@]}" -gt 0 ] || die "no nodes in CLUSTER NODES of $first_seed"

# Targets: name host port pid ("-" for the cluster, which has no front).
targets=("single $single_host $single_port $single_pid")
if [ -n "$orthrus_addr" ]; then
  read -r _ host port pid <<< "$(parse_target "$orthrus_addr")"
else
  host=127.0.0.1
  port="$(free_port)"
  [ -x "$orthrus_bin" ] || die "ORTHRUS_BIN: no executable at $orthrus_bin"
  RUST_LOG=warn "$orthrus_bin" --listen "127.0.0.1:$port" --seeds "$seeds" --threads "$threads" & pids+=($!)
  pid=$!
  for _ in $(seq 1 100); do redis-cli -p "$port" get x 2>/dev/null | grep -qv CLUSTERDOWN && break; sleep 0.1; done
fi
pong "$host" "$port" || die "orthrus at $host:$port does not answer PING"
targets+=("orthrus $host $port $pid" "cluster $seed_host $seed_port -")
for spec in "${proxies[@]}"; do
  read -r name host port pid <<< "$(parse_target "$spec")"
  [[ "$name" =~ ^[A-Za-z0-9_.-]+$ ]] || die "--proxy needs NAME=HOST:PORT:PID, got $spec"
  for t in "${targets[@]}"; do [ "${t%% *}" != "$name" ] || die "two targets are named $name"; done
  pong "$host" "$port" || die "proxy $name at $host:$port does not answer PING"
  targets+=("$name $host $port $pid")
done

# CPU nanoseconds of a process, every thread summed; 0 if unreadable.
cpu_ns() {
  local total=0 t f
  for f in /proc/"$1"/task/*/schedstat; do
    read -r t _ 2>/dev/null < "$f" && total=$((total + t))
  done
  echo "$total"
}
nodes_cpu_ns() { local total=0 p; for p in "${node_pids[@]}"; do total=$((total + $(cpu_ns "$p"))); done; echo "$total"; }
run() { # host port count extra-args...
  local host=$1 port=$2 count=$3; shift 3
  redis-benchmark -h "$host" -p "$port" -n "$count" -r 100000 -q --csv "$@" 2>/dev/null \
    | tr -d '"' | awk -F, '$1 == "SET" || $1 == "GET" {print $1 "," $2 "," $5 "," $7}'
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -r), redis $(redis-server --version | cut -d' ' -f3 | sed 's/^v=//')"
echo "redis-benchmark -n $n -r 100000 (-n $((n / 4)) with 1 client); $rounds interleaved rounds; cluster of ${#node_pids[@]} nodes, seeds $seeds"
for t in "${targets[@]}"; do
  read -r name host port pid <<< "$t"
  if [ "$pid" = - ]; then echo "target $name: $host:$port"; else echo "target $name: $host:$port (pid $pid)"; fi
done
results="$tmp/results.csv"
for round in $(seq 1 "$rounds"); do
  # Each round starts one target later than the one before, so that no
  # target always runs right after the same other one (which moves CPU
  # per request by a few per cent on a shared machine).
  shift_by=$(( (round - 1) % ${#targets[@]} ))
  order=("${targets[@]:shift_by}" "${targets[@]:0:shift_by}")
  for mode in "c50:-c 50 -P 1" "c50p16:-c 50 -P 16" "c1:-c 1"; do
    label="${mode%%:*}"; args="${mode#*:}"
    count=$n; [ "$label" = c1 ] && count=$((n / 4))
    for test in set get; do
      for t in "${order[@]}"; do
        read -r name host port pid <<< "$t"
        extra=(); [ "$name" = cluster ] && extra=(--cluster)
        front_before=0; [ "$pid" = - ] || front_before=$(cpu_ns "$pid")
        nodes_before=$(nodes_cpu_ns)
        # shellcheck disable=SC2086
        line="$(run "$host" "$port" "$count" -t "$test" $args "${extra[@]}")"
        nodes_after=$(nodes_cpu_ns)
        front_after=0; [ "$pid" = - ] || front_after=$(cpu_ns "$pid")
        [ -n "$line" ] || die "redis-benchmark printed nothing for $name ($test $label)"
        echo "$round,$label,$name,$line,$count,$((front_after - front_before)),$((nodes_after - nodes_before))" >> "$results"
      done
    done
  done
done
[ -n "${KEEP_RESULTS:-}" ] && cp "$results" "$KEEP_RESULTS"
names="$(for t in "${targets[@]}"; do echo "${t%% *}"; done | paste -sd,)"
python3 - "$results" "$names" <<'PY'
import csv, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
names = sys.argv[2].split(",")
others = [t for t in names if t != "single"]
runs = {}  # (mode, test) -> round -> target -> row
for rnd, mode, target, test, rps, p50, p99, count, front_ns, nodes_ns in rows:
    runs.setdefault((mode, test), {}).setdefault(rnd, {})[target] = dict(
        rps=float(rps), p50=float(p50), p99=float(p99), count=int(count),
        front=int(front_ns), nodes=int(nodes_ns))
order = {"c50": 0, "c50p16": 1, "c1": 2}
keys = sorted(runs, key=lambda k: (order[k[0]], k[1]))
med = lambda xs: statistics.median(xs) if xs else float("nan")
def per(key, target, f):
    return med([f(r[target]) for r in runs[key].values() if target in r])
def ratio(key, target):
    return med([r[target]["rps"] / r["single"]["rps"] for r in runs[key].values() if target in r and "single" in r])
w = max(9, *(len(t) for t in names)) + 1

print("\nmedian of the per-round ratios of requests/s to the single redis-server")
print(f"{'workload':<12}{'single rps':>11}" + "".join(f"{t:>{w}}" for t in others))
for key in keys:
    print(f"{key[1] + ' ' + key[0]:<12}{per(key, 'single', lambda r: r['rps']):>11.0f}"
          + "".join(f"{ratio(key, t):>{w}.2f}" for t in others))

print("\nlatency p50/p99 ms (medians over rounds)")
print(f"{'workload':<12}" + "".join(f"{t:>{w + 4}}" for t in names))
for key in keys:
    cells = [f"{per(key, t, lambda r: r['p50']):.3f}/{per(key, t, lambda r: r['p99']):.3f}" for t in names]
    print(f"{key[1] + ' ' + key[0]:<12}" + "".join(f"{c:>{w + 4}}" for c in cells))

print("\nCPU µs per request (medians over rounds): each process, during its own target's runs;")
print("'nodes' is the cluster's redis-servers summed (during the cluster's and each proxy's runs)")
cols = [("single", "front")]
for t in others:
    if t != "cluster":
        cols.append((t, "front"))
    cols.append((t, "nodes"))
heads = [t if part == "front" else t + " nodes" for t, part in cols]
cw = max(w, *(len(h) + 1 for h in heads))
print(f"{'workload':<12}" + "".join(f"{h:>{cw}}" for h in heads))
us_per_request = lambda r, part="front": r[part] / 1000 / r["count"]
for key in keys:
    cells = [per(key, t, lambda r, p=part: us_per_request(r, p)) for t, part in cols]
    print(f"{key[1] + ' ' + key[0]:<12}" + "".join(f"{c:>{cw}.2f}" for c in cells))

# A median hides how often the order flips: count, round by round, where
# orthrus's CPU per request was below each other proxy's (the two ran one
# right after the other).
peers = [t for t in others if t not in ("orthrus", "cluster")]
if "orthrus" in names and peers:
    print("\nrounds in which orthrus spent less CPU per request than each other proxy")
    print(f"{'workload':<12}" + "".join(f"{t:>{w}}" for t in peers))
    for key in keys:
        cells = []
        for t in peers:
            both = [r for r in runs[key].values() if "orthrus" in r and t in r]
            cells.append(f"{sum(us_per_request(r['orthrus']) < us_per_request(r[t]) for r in both)}/{len(both)}")
        print(f"{key[1] + ' ' + key[0]:<12}" + "".join(f"{c:>{w}}" for c in cells))
PY
