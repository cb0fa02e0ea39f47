#!/usr/bin/env bash
# Redis's own Tcl test suite through orthrus, file by file.
#
# For every tests/unit/**/*.tcl file of a Redis source tree (7.0.15 is what
# the counts in tests/redis-suite/README.md were measured with), starts a
# fresh cluster (3 masters, no replicas) and orthrus in front of it on free
# loopback ports, runs
#   ./runtest --host 127.0.0.1 --port P --cluster-mode --tags -slow --durable --single unit/X
# with a time bound, and prints per file the tests passed ([ok]), failed
# ([err]) and errors ([exception], or the file timing out), then the totals.
#
# Usage: tests/redis-suite/run.sh REDIS_SRC [options] [unit/X ...]
#   --target orthrus|cluster1   orthrus in front of 3 masters (default), or
#                               a 1-node cluster directly (the baseline)
#   --passthrough on|off        orthrus's [admin] passthrough (default on)
#   --timeout SECONDS           time bound per file (default 300)
#   --out DIR                   keep each file's runtest output here
#   --tags TAGS                 replaces "-slow" (e.g. "-slow -needs:debug")
#   --skiptest NAME             passed on to runtest (a test that cannot end
#                               through orthrus would take the rest of its
#                               file with it); may be repeated
#   --one-deployment            every file against the same cluster and
#                               orthrus, nothing reset between files (as an
#                               operator runs it against a staging
#                               deployment); default: a fresh one per file
# Files given after the options replace the list of every unit file.
#
# Needs tclsh 8.5+ and redis-server/redis-cli on PATH (7.0.x). Only the
# processes this script starts are stopped, by PID.
set -uo pipefail
cd "$(dirname "$0")/../.."
repo="$(pwd)"
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 64; }
die() { echo "redis-suite: $*" >&2; exit 64; }

[ $# -ge 1 ] || usage
case "$1" in -h|--help) usage ;; esac
src="$(cd "$1" && pwd)" || die "no directory $1"
shift
target=orthrus
passthrough=on
per_file=300
out=""
tags="-slow"
skip=()
files=()
one=false
while [ $# -gt 0 ]; do
  case "$1" in
    --target) target="${2:?}"; shift 2 ;;
    --passthrough) passthrough="${2:?}"; shift 2 ;;
    --timeout) per_file="${2:?}"; shift 2 ;;
    --out) out="${2:?}"; shift 2 ;;
    --tags) tags="${2:?}"; shift 2 ;;
    --skiptest) skip+=(--skiptest "${2:?}"); shift 2 ;;
    --one-deployment) one=true; shift ;;
    -h|--help) usage ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) files+=("${1%.tcl}"); shift ;;
  esac
done
case "$target" in orthrus|cluster1) ;; *) die "--target is orthrus or cluster1" ;; esac
case "$passthrough" in on|off) ;; *) die "--passthrough is on or off" ;; esac
[ -x "$src/runtest" ] && [ -f "$src/tests/test_helper.tcl" ] || die "$src is not a Redis source tree (no runtest)"
command -v tclsh >/dev/null || die "tclsh is needed: apt-get install tcl"
command -v redis-server >/dev/null || die "redis-server is needed: apt-get install redis-server"
# External mode starts no server of its own, but a few helpers name src/.
for b in redis-server redis-cli redis-benchmark; do
  [ -e "$src/src/$b" ] || { command -v "$b" >/dev/null && ln -s "$(command -v "$b")" "$src/src/$b"; }
done

cargo build --release --locked -q -p orthrus-proxy -p orthrus-devcluster || die "build failed"
bin="$repo/target/release"

if [ ${#files[@]} -eq 0 ]; then
  while IFS= read -r f; do
    f="${f#"$src"/tests/}"
    files+=("${f%.tcl}")
  done < <(find "$src/tests/unit" -name '*.tcl' -not -path '*/moduleapi/*' -not -path '*/unit/type/list-common*' | sort)
fi

tmp="$(mktemp -d)"
[ -n "$out" ] && mkdir -p "$out"
pids=()
stop_all() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap 'stop_all; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Starts the target and sets $port (not in a subshell: $pids must keep the
# PIDs).
start_target() {
  local masters=3 seeds i
  [ "$target" = cluster1 ] && masters=1
  rm -f "$tmp/seeds"
  "$bin/orthrus-devcluster" up --masters "$masters" --replicas 0 --seeds-file "$tmp/seeds" \
    >/dev/null 2>"$tmp/cluster.log" &
  pids+=($!)
  for i in $(seq 1 600); do [ -s "$tmp/seeds" ] && break; sleep 0.1; done
  [ -s "$tmp/seeds" ] || { echo "cluster did not start: $(tail -5 "$tmp/cluster.log")" >&2; return 1; }
  seeds="$(tr -d ' \n' < "$tmp/seeds")"
  if [ "$target" = cluster1 ]; then
    port="${seeds##*:}"
    return 0
  fi
  port="$(free_port)"
  local pt=false
  [ "$passthrough" = on ] && pt=true
  RUST_LOG=warn ORTHRUS_ADMIN__PASSTHROUGH=$pt "$bin/orthrus" --listen "127.0.0.1:$port" --seeds "$seeds" \
    >/dev/null 2>"$tmp/orthrus.log" &
  pids+=($!)
  for i in $(seq 1 200); do
    [ "$(redis-cli -p "$port" set redis-suite:ready 1 2>/dev/null)" = OK ] && { redis-cli -p "$port" del redis-suite:ready >/dev/null; return 0; }
    sleep 0.1
  done
  echo "orthrus did not become ready: $(tail -5 "$tmp/orthrus.log")" >&2
  return 1
}

total_ok=0 total_err=0 total_exc=0
started=false
if $one; then
  start_target || die "the deployment did not start"
  started=true
fi
printf '%-32s %6s %6s %6s %s\n' file passed failed errors note
for f in "${files[@]}"; do
  note=""
  log="$tmp/run.log"
  if ! $started && ! start_target; then
    note="target did not start"
    ok=0 err=0 exc=1
  else
    (cd "$src" && exec timeout -k 10 "$per_file" ./runtest --host 127.0.0.1 --port "$port" \
      --cluster-mode --tags "$tags" --durable ${skip[@]+"${skip[@]}"} --single "$f" 2>&1) | sed 's/\x1b\[[0-9;]*m//g' >"$log"
    rc=${PIPESTATUS[0]}
    ok=$(grep -c '^\[ok\]:' "$log")
    err=$(grep -c '^\[err\]:' "$log")
    exc=$(grep -c '^\[exception\]:' "$log")
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      note="timed out after ${per_file}s"
      exc=$((exc + 1))
    elif [ "$rc" -ne 0 ] && [ "$err" -eq 0 ] && [ "$exc" -eq 0 ]; then
      note="runtest exit $rc"
      exc=1
    fi
    [ -n "$out" ] && cp "$log" "$out/$(echo "$f" | tr / _).log"
  fi
  $one || stop_all
  printf '%-32s %6d %6d %6d %s\n' "$f" "$ok" "$err" "$exc" "$note"
  total_ok=$((total_ok + ok)) total_err=$((total_err + err)) total_exc=$((total_exc + exc))
done
printf '%-32s %6d %6d %6d\n' TOTAL "$total_ok" "$total_err" "$total_exc"
