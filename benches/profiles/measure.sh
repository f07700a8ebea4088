#!/usr/bin/env bash
# Instructions per request of one rush worker, counted exactly by callgrind.
#
# Why callgrind: this machine's VM exposes no hardware counters (`perf stat
# -e instructions` says "not supported"), and timings on a shared machine
# move by tens of percent. Callgrind counts every instruction the worker
# executes, so a change's effect shows to a fraction of a percent.
#
# How it works: starts `rush APP ARGS...` (one worker) under valgrind with
# instrumentation off, so start-up is quick; checks the answer with curl;
# turns instrumentation on; warms up with 2,000 requests; zeroes the
# counters; sends REQUESTS requests with h2load over CONNECTIONS
# keep-alive connections; dumps. It prints instructions per request, and
# keeps the dump (callgrind.out.*, for callgrind_annotate or the flamegraph
# script beside this one) in OUT if set.
#
#   benches/profiles/measure.sh PATH APP [rush args...]
#   e.g. benches/profiles/measure.sh / benches.apps.asgi_app:app --interface asgi
# Env: REQUESTS (default 20000), CONNECTIONS (20), PORT (18765),
#      RUSH (.venv/bin/rush), OUT (a file to keep the callgrind dump in),
#      TLS (set to 1: serve https with the bench's certificate,
#      benches/tls.py, and load over TLS 1.3 with TLS_CIPHER, by default
#      TLS_AES_256_GCM_SHA384: what wrk and curl (OpenSSL's default order)
#      negotiate in the benchmark, where h2load would pick AES-128. Each
#      load opens its connections afresh, so the count includes
#      CONNECTIONS handshakes: raise REQUESTS to make them negligible),
#      H2 (set to 1: load over h2c with prior knowledge, 10 streams per
#      connection; give rush `--http auto`),
#      CALLGRIND_ARGS (more valgrind options, e.g. "--dump-line=yes" with
#      a build that has line tables, CARGO_PROFILE_RELEASE_DEBUG=line-tables-only).
set -euo pipefail
path=$1; shift
app=$1; shift
requests=${REQUESTS:-20000}
connections=${CONNECTIONS:-20}
port=${PORT:-18765}
rush=${RUSH:-.venv/bin/rush}
scheme=http
tls_args=()
load_args=()
if [ -n "${TLS:-}" ]; then
  scheme=https
  read -r certfile keyfile < <(.venv/bin/python -c \
    'from benches.tls import ensure_certificate; print(*ensure_certificate())')
  tls_args=(--ssl-certfile "$certfile" --ssl-keyfile "$keyfile")
  load_args=(--tls13-ciphers "${TLS_CIPHER:-TLS_AES_256_GCM_SHA384}")
fi
url="${scheme}://127.0.0.1:${port}${path}"
work=$(mktemp -d)

valgrind --tool=callgrind ${CALLGRIND_ARGS:-} --trace-children=yes --instr-atstart=no \
  --callgrind-out-file="$work/callgrind.out.%p" -q \
  "$rush" "$app" --host 127.0.0.1 --port "$port" --workers 1 --log-level warning "${tls_args[@]}" "$@" &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1200); do
  curl -kfsS -o /dev/null "$url" 2>/dev/null && break
  sleep 0.1
done
curl -ksS -i "$url" | head -12 >&2
echo >&2
worker=$(pgrep -P "$server" | head -1)
protocol_args=(--h1)
[ -z "${H2:-}" ] || protocol_args=(-m 10)
load() {
  h2load "${protocol_args[@]}" -n "$1" -c "$connections" "${load_args[@]}" "$url" > "$work/h2load" 2>&1
  grep -E "^requests:" "$work/h2load" >&2
  grep -q " $1 succeeded" "$work/h2load" || { echo "not every request succeeded" >&2; exit 1; }
}
callgrind_control -i on "$worker" > /dev/null
load 2000
callgrind_control -z "$worker" > /dev/null
load "$requests"
callgrind_control -d "$worker" > /dev/null
dump=$(ls -S "$work"/callgrind.out."$worker".* | head -1)
total=$(awk '/^summary:|^totals:/ { print $2; exit }' "$dump")
echo "instructions/request: $((total / requests))"
[ -z "${OUT:-}" ] || cp "$dump" "$OUT"
