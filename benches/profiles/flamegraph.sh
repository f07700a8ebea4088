#!/usr/bin/env bash
# A flamegraph (SVG) of one rush worker serving one request over and over.
#
# How it works: starts `rush APP ARGS...` with one worker on CPU 0, warms
# it up, then samples the worker's stacks (`perf record`, the cpu-clock
# software event, as this machine's VM has no hardware counters; DWARF
# unwinding, so Rust frames without frame pointers unwind too) while
# h2load on CPU 1 sends REQUESTS requests, and folds the samples into an
# SVG with inferno (`cargo install inferno`).
#
#   benches/profiles/flamegraph.sh OUT.svg PATH APP [rush args...]
#   e.g. benches/profiles/flamegraph.sh asgi.svg / benches.apps.asgi_app:app --interface asgi
# Env: REQUESTS (default 100000), CONNECTIONS (20), PORT (18766), RUSH (.venv/bin/rush).
set -euo pipefail
out=$1; shift
path=$1; shift
app=$1; shift
requests=${REQUESTS:-100000}
connections=${CONNECTIONS:-20}
port=${PORT:-18766}
rush=${RUSH:-.venv/bin/rush}
url="http://127.0.0.1:${port}${path}"
work=$(mktemp -d)

taskset -c 0 "$rush" "$app" --host 127.0.0.1 --port "$port" --workers 1 --log-level warning "$@" &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 300); do
  curl -fsS -o /dev/null "$url" 2>/dev/null && break
  sleep 0.1
done
curl -fsS -o /dev/null "$url"
worker=$(pgrep -P "$server" | head -1)
taskset -c 1 h2load --h1 -n 20000 -c "$connections" "$url" > /dev/null
perf record -e cpu-clock -F 1999 -g --call-graph dwarf,16384 -o "$work/perf.data" -p "$worker" -q &
recorder=$!
sleep 0.5
taskset -c 1 h2load --h1 -n "$requests" -c "$connections" "$url" | grep -E "^requests:" >&2
kill -INT "$recorder"
wait "$recorder" || true
perf script -i "$work/perf.data" 2>/dev/null | inferno-collapse-perf | inferno-flamegraph --title "rush worker: GET $path of $app" > "$out"
echo "wrote $out" >&2
