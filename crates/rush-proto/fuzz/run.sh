#!/usr/bin/env bash
# Fuzzes rush-proto with AFL++ (cargo-afl, stable Rust), one target at a time.
#
#   FUZZ_SECONDS=600 bash crates/rush-proto/fuzz/run.sh [TARGET...]
#
# FUZZ_OUT (default: out, under this directory) is where the runs are written;
# `make fuzz-smoke` points it at a temporary directory it removes afterwards.
#
# Installs cargo-afl (which builds AFL++) if it is missing, builds the
# targets instrumented, runs each for FUZZ_SECONDS from the seed corpus
# in corpus/TARGET, then prints executions and findings and replays every
# finding through `reproduce` to show which invariant broke. Everything runs
# at nice 19 on one core. Exits 1 if any target saved a crash or a hang.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
seconds="${FUZZ_SECONDS:-600}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(request_head chunked encode_roundtrip ws_frames h2_frames h3_guard)
fi
# The version of the afl crate in Cargo.lock: cargo-afl keeps the AFL++
# runtime under its own version, so the two must match.
afl_version=0.18.2

export CARGO_BUILD_JOBS=1
if ! cargo afl --version 2>/dev/null | grep -q "$afl_version"; then
    echo "== installing cargo-afl $afl_version (builds AFL++ from its bundled source)"
    nice -n 19 cargo install cargo-afl --version "$afl_version" --locked --force
fi
# cargo-afl builds AFL++ when it is installed; build it here only if that
# did not happen (for instance after a toolchain update).
if ! config_output="$(nice -n 19 cargo afl config --build 2>&1)"; then
    if ! grep -q "already built" <<<"$config_output"; then
        echo "$config_output" >&2
        exit 1
    fi
fi

cd "$here"
echo "== building ${targets[*]}"
bins=()
for target in "${targets[@]}"; do
    bins+=(--bin "$target")
done
nice -n 19 cargo afl build --release --features afl --target-dir target/afl "${bins[@]}"
nice -n 19 cargo build --release --bin reproduce

# Shared machines: no CPU pinning, no frequency check; plain log lines.
export AFL_NO_AFFINITY=1 AFL_SKIP_CPUFREQ=1 AFL_NO_UI=1
export AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1

findings=0
summary=()
for target in "${targets[@]}"; do
    out="${FUZZ_OUT:-out}/$target-$(date -u +%Y%m%d-%H%M%S)"
    mkdir -p "$out"
    echo "== fuzzing $target for ${seconds}s into fuzz/$out (log: $out/afl.log)"
    dict=http.dict
    if [ "$target" = ws_frames ]; then
        dict=ws.dict
    elif [ "$target" = h2_frames ]; then
        dict=h2.dict
    elif [ "$target" = h3_guard ]; then
        dict=h3.dict
    fi
    status=0
    timeout $((seconds + 300)) nice -n 19 cargo afl fuzz \
        -i "corpus/$target" -o "$out" -x "$dict" -V "$seconds" \
        "target/afl/release/$target" >"$out/afl.log" 2>&1 || status=$?
    stats="$out/default/fuzzer_stats"
    if [ ! -f "$stats" ]; then
        tail -20 "$out/afl.log" >&2
        echo "afl-fuzz did not start for $target (exit $status)" >&2
        exit 1
    fi
    stat() { awk -v key="$1" '$1 == key { print $3 }' "$stats"; }
    run_time="$(stat run_time)"
    execs="$(stat execs_done)"
    rate=$((execs / (run_time > 0 ? run_time : 1)))
    crashes="$(stat saved_crashes)"
    hangs="$(stat saved_hangs)"
    line="$(printf '%-17s %6ss  %11s execs  %6s/s  corpus %6s  crashes %s  hangs %s' \
        "$target" "$run_time" "$execs" "$rate" "$(stat corpus_count)" "$crashes" "$hangs")"
    summary+=("$line")
    echo "$line"
    for kind in crashes hangs; do
        for file in "$out/default/$kind"/id:*; do
            [ -e "$file" ] || continue
            findings=$((findings + 1))
            echo "-- $kind: fuzz/$file"
            ./target/release/reproduce "$target" "$file" 2>&1 | tail -5 || true
        done
    done
done

echo "== summary (engine: AFL++ via cargo-afl $afl_version)"
printf '%s\n' "${summary[@]}"
if [ "$findings" -gt 0 ]; then
    echo "$findings finding(s); reproduce with: cd crates/rush-proto/fuzz && cargo run --release --bin reproduce -- TARGET FILE"
    exit 1
fi
echo "no findings"
