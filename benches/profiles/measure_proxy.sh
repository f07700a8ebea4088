#!/usr/bin/env bash
# Instructions and syscalls per forwarded request of one `rush proxy` worker.
#
# The proxy's counterpart of measure.sh (which see for why callgrind): a
# rush App hello (benches/apps/rush_app.py) runs as the origin, outside
# valgrind; `rush proxy` (one worker) runs under callgrind with
# instrumentation off until warmed up; proxy_load.py (beside this script)
# sends absolute-form `GET http://127.0.0.1:ORIGIN/` requests over
# CONNECTIONS keep-alive connections, every answer checked. Then, with
# SYSCALLS=1, the same load once more on a proxy outside valgrind under
# `strace -c`, for the syscalls per request (strace's own overhead makes
# its times meaningless; the counts are exact).
#
#   benches/profiles/measure_proxy.sh
# Env: REQUESTS (default 20000), CONNECTIONS (100), PORT (18844, the proxy;
#      the origin takes PORT+1), RUSH (.venv/bin/rush), OUT (a file to keep
#      the callgrind dump in), SYSCALLS (1: also count syscalls).
set -euo pipefail
requests=${REQUESTS:-20000}
connections=${CONNECTIONS:-100}
port=${PORT:-18844}
origin_port=$((port + 1))
rush=${RUSH:-.venv/bin/rush}
python=${PYTHON:-.venv/bin/python}
load="$python $(dirname "$0")/proxy_load.py $port $origin_port"
work=$(mktemp -d)
proxy_args=(proxy --host 127.0.0.1 --port "$port" --workers 1 --allow-private
  --allow-port "$origin_port" --no-access-log --log-level warning)

"$rush" benches.apps.rush_app:app --host 127.0.0.1 --port "$origin_port" --workers 1 \
  --no-access-log --log-level warning &
origin=$!
server=
trap 'kill $server $origin 2>/dev/null; wait $server $origin 2>/dev/null || true; rm -rf "$work"' EXIT

wait_for_proxy() {
  for _ in $(seq 1200); do
    curl -fsS -o /dev/null -x "http://127.0.0.1:$port" "http://127.0.0.1:$origin_port/" 2>/dev/null \
      && return 0
    sleep 0.1
  done
  return 1
}

valgrind --tool=callgrind --trace-children=yes --instr-atstart=no \
  --callgrind-out-file="$work/callgrind.out.%p" -q "$rush" "${proxy_args[@]}" &
server=$!
wait_for_proxy
curl -sS -i -x "http://127.0.0.1:$port" "http://127.0.0.1:$origin_port/" >&2
echo >&2
worker=$(pgrep -P "$server" | head -1)
callgrind_control -i on "$worker" > /dev/null
$load 2000 "$connections"
callgrind_control -z "$worker" > /dev/null
$load "$requests" "$connections"
callgrind_control -d "$worker" > /dev/null
dump=$(ls -S "$work"/callgrind.out."$worker".* | head -1)
total=$(awk '/^summary:|^totals:/ { print $2; exit }' "$dump")
echo "instructions/request: $((total / requests))"
[ -z "${OUT:-}" ] || cp "$dump" "$OUT"
kill "$server"
wait "$server" 2>/dev/null || true
server=

[ "${SYSCALLS:-0}" = 1 ] || exit 0
"$rush" "${proxy_args[@]}" &
server=$!
wait_for_proxy
worker=$(pgrep -P "$server" | head -1)
$load 2000 "$connections"
strace -c -f -o "$work/strace" -p "$worker" &
tracer=$!
# strace -p attaches asynchronously: wait until it says so in /proc.
for _ in $(seq 100); do
  grep -q "TracerPid:[[:space:]]*[1-9]" "/proc/$worker/status" && break
  sleep 0.1
done
$load "$requests" "$connections"
kill -INT "$tracer"
wait "$tracer" 2>/dev/null || true
echo "syscalls per request (over $requests requests):"
awk -v n="$requests" '$NF ~ /^[a-z_0-9]+$/ && $4 ~ /^[0-9]+$/ && $NF != "total" {
  errors = ($5 ~ /^[0-9]+$/) ? $5 : 0
  printf "  %-12s %6.3f (%d errors)\n", $NF, $4 / n, errors
}' "$work/strace"
