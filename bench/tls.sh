#!/usr/bin/env bash
# redis-benchmark over TLS: a single redis-server's own TLS port (and its
# plain port, for reference) against orthrus (--threads 1) in front of a
# TLS-only 3-master cluster, reached over its TLS listener and over its
# plain one (TLS to the nodes either way), in interleaved rounds. Prints requests/s, p50/p99 latency and the
# CPU microseconds per request of the front process (the single server or
# orthrus) and of the cluster's nodes summed, from /proc/PID/task/*/schedstat
# read before and after each run. Certificates are made here with openssl,
# as in the README's TLS section.
#
# Usage: bench/tls.sh [ROUNDS]      (ROUNDS default 3)
# Env: N (requests per test and run, default 100000), CLIENTS (default 50).
#
# Everything it starts is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "tls.sh: $*" >&2; exit 64; }
rounds="${1:-3}"
n="${N:-100000}"
clients="${CLIENTS:-50}"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive number"
for tool in redis-server redis-cli redis-benchmark openssl python3; do
  command -v "$tool" >/dev/null || die "$tool is needed"
done
cargo build --release --locked -q -p orthrus-proxy

tmp="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT INT TERM
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The CA and one certificate for every server (the README's commands).
(
  cd "$tmp"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -days 2 -subj "/CN=bench CA" -keyout ca.key -out ca.crt 2>/dev/null
  printf 'subjectAltName = IP:127.0.0.1, DNS:localhost\nbasicConstraints = CA:FALSE\nkeyUsage = digitalSignature\nextendedKeyUsage = serverAuth, clientAuth\n' > server.ext
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -subj "/CN=bench" -keyout server.key -out server.csr 2>/dev/null
  openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
    -days 2 -extfile server.ext -out server.crt 2>/dev/null
)
tls_conf() { # dir port [cluster-bus-port]
  mkdir -p "$1"
  {
    echo "bind 127.0.0.1"; echo "port 0"; echo "tls-port $2"; echo "dir $1"
    echo "tls-cert-file $tmp/server.crt"; echo "tls-key-file $tmp/server.key"
    echo "tls-ca-cert-file $tmp/ca.crt"; echo "tls-auth-clients no"
    echo "save \"\""; echo "appendonly no"; echo "logfile $1/redis.log"
    if [ -n "${3:-}" ]; then
      echo "cluster-enabled yes"; echo "cluster-port $3"; echo "tls-cluster yes"
      echo "tls-replication yes"; echo "cluster-config-file $1/nodes.conf"
    fi
  } > "$1/redis.conf"
}
cli() { redis-cli --tls --cacert "$tmp/ca.crt" -h 127.0.0.1 "$@"; }
pid_of() { cli -p "$1" info server | tr -d '\r' | awk -F: '/^process_id/ {print $2}'; }
wait_pong() { for _ in $(seq 1 100); do [ "$(cli -p "$1" ping 2>/dev/null)" = PONG ] && return; sleep 0.1; done; die "no PONG on $1"; }

single_port="$(free_port)"; single_plain="$(free_port)"
tls_conf "$tmp/single" "$single_port"
echo "port $single_plain" >> "$tmp/single/redis.conf"
redis-server "$tmp/single/redis.conf" & pids+=($!)
single_pid=$!
node_ports=(); node_pids=()
for i in 1 2 3; do
  port="$(free_port)"; bus="$(free_port)"
  tls_conf "$tmp/node$i" "$port" "$bus"
  redis-server "$tmp/node$i/redis.conf" & pids+=($!)
  node_ports+=("$port"); node_pids+=($!)
done
wait_pong "$single_port"
for p in "${node_ports[@]}"; do wait_pong "$p"; done
cli --cluster create $(for p in "${node_ports[@]}"; do echo "127.0.0.1:$p"; done) --cluster-yes >/dev/null
for _ in $(seq 1 100); do
  cli -p "${node_ports[0]}" cluster info | grep -q 'cluster_state:ok' && break; sleep 0.1
done

plain_port="$(free_port)"; tls_port="$(free_port)"
RUST_LOG=warn target/release/orthrus --threads 1 --listen "127.0.0.1:$plain_port" \
  --tls-listen "127.0.0.1:$tls_port" --tls-cert-file "$tmp/server.crt" --tls-key-file "$tmp/server.key" \
  --seeds "127.0.0.1:${node_ports[0]}" --backend-tls --backend-tls-ca-cert-file "$tmp/ca.crt" & pids+=($!)
orthrus_pid=$!
for _ in $(seq 1 100); do redis-cli -p "$plain_port" get x 2>/dev/null | grep -qv CLUSTERDOWN && break; sleep 0.1; done

cpu_ns() { local total=0 t f; for f in /proc/"$1"/task/*/schedstat; do read -r t _ < "$f" && total=$((total + t)); done; echo "$total"; }
nodes_ns() { local total=0 p; for p in "${node_pids[@]}"; do total=$((total + $(cpu_ns "$p"))); done; echo "$total"; }
# name port pid tls?
targets=("single $single_port $single_pid tls" "single-plain $single_plain $single_pid plain" "orthrus-tls $tls_port $orthrus_pid tls" "orthrus-plain $plain_port $orthrus_pid plain")
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg); redis $(redis-server --version | cut -d' ' -f3 | sed 's/^v=//')"
echo "redis-benchmark -c $clients -n $n -r 100000; $rounds interleaved rounds; orthrus --threads 1, TLS to the 3 masters"
results="$tmp/results.csv"
for round in $(seq 1 "$rounds"); do
  for test in set get; do
    for t in "${targets[@]}"; do
      read -r name port pid kind <<< "$t"
      tls=(); [ "$kind" = tls ] && tls=(--tls --cacert "$tmp/ca.crt")
      front_before=$(cpu_ns "$pid"); nodes_before=$(nodes_ns)
      line="$(redis-benchmark -h 127.0.0.1 -p "$port" "${tls[@]}" -c "$clients" -n "$n" -r 100000 -t "$test" -q --csv 2>/dev/null \
        | tr -d '"' | awk -F, '$1 == "SET" || $1 == "GET" {print $1 "," $2 "," $5 "," $7}')"
      front_after=$(cpu_ns "$pid"); nodes_after=$(nodes_ns)
      [ -n "$line" ] || die "redis-benchmark printed nothing for $name $test"
      echo "$round,$name,$line,$((front_after - front_before)),$((nodes_after - nodes_before))" >> "$results"
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$results" "$n" <<'PY'
import csv, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
n = int(sys.argv[2])
by = {}
for rnd, name, test, rps, p50, p99, front, nodes in rows:
    by.setdefault((test, name), []).append((float(rps), float(p50), float(p99), int(front) / 1000 / n, int(nodes) / 1000 / n))
print(f"\n{'test':<5}{'target':<15}{'rps per round':>26}{'p50/p99 ms':>14}{'front µs/req':>22}{'nodes µs/req':>14}")
for (test, name), runs in sorted(by.items(), key=lambda kv: (kv[0][0] != "SET", not kv[0][1].startswith("single"), kv[0][1])):
    rps = "/".join(f"{r[0]:.0f}" for r in runs)
    med = lambda i: statistics.median(r[i] for r in runs)
    fronts = "/".join(f"{r[3]:.2f}" for r in runs)
    nodes = f"{med(4):.2f}" if not name.startswith("single") else "-"
    print(f"{test:<5}{name:<15}{rps:>26}{med(1):>7.3f}/{med(2):.3f}{fronts:>22}{nodes:>14}")
PY
