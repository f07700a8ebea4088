# rush: `make run` serves the demo app, `make test` runs every check.
# Both set everything up on a fresh machine (Python 3.11 + Rust toolchain).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export VIRTUAL_ENV := $(abspath $(VENV))

.PHONY: run test build lint format cargo-test pytest test-tools bench soak clean

$(BIN)/.installed: requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements-dev.txt
	touch $@

# The release build (fat LTO) is what users run and what benches measure.
build: $(BIN)/.installed
	$(BIN)/maturin develop --release -q

run: build
	$(BIN)/rush examples.hello:app --host 127.0.0.1 --port 8000

lint: $(BIN)/.installed
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(BIN)/.installed
	cargo fmt --all
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

cargo-test:
	cargo test --workspace

# System tools the tests drive (wrk, a real load generator; nginx and openssl, the reverse
# proxy with TLS in front of rush in tests/test_nginx_front.py): installed with apt when missing.
test-tools:
	@command -v wrk >/dev/null || (apt-get update -q && apt-get install -y -q wrk)
	@command -v nginx >/dev/null || (apt-get update -q && apt-get install -y -q nginx)
	@command -v openssl >/dev/null || (apt-get update -q && apt-get install -y -q openssl)

pytest: build test-tools
	$(BIN)/python -m pytest -q

test: lint cargo-test pytest

# Benchmarks (method and results: benches/README.md). bench-tools installs wrk and the peers' Debian
# packages (nginx, libev-dev) with apt, the Python peers into their own .venv-bench, and builds the
# Rust peers of benches/rust (cargo, release, niced); a peer that fails to install is skipped, never
# fatal. Options go through BENCH_ARGS, e.g. make bench BENCH_ARGS="--quick --scenarios hello/json".
.PHONY: bench-tools
bench-tools: $(BIN)/.installed
	$(BIN)/python -m benches.tools

bench: build bench-tools
	$(BIN)/python -m benches $(BENCH_ARGS)

# The soak test (soak/, "Soak test" in README.md): three rush servers under bounded well-formed and
# hostile traffic with a SIGHUP every minute, for SOAK_MINUTES minutes. Niced by default (the machine
# is shared); SOAK_NICE= runs it at normal priority. Exit status 1 when a criterion fails.
SOAK_MINUTES ?= 30
SOAK_NICE ?= nice -n 10

soak: build
	$(SOAK_NICE) $(BIN)/python -m soak --minutes $(SOAK_MINUTES)

# Fuzzing rush-proto with AFL++ through cargo-afl, on stable Rust (crates/rush-proto/fuzz/README.md):
# installs cargo-afl if missing, builds the targets, runs each for FUZZ_SECONDS from its seed corpus,
# one at a time at nice 19, and prints executions and findings. Not part of `make test`: it takes
# FUZZ_SECONDS per target. E.g. make fuzz FUZZ_SECONDS=60 FUZZ_TARGETS=chunked
FUZZ_SECONDS ?= 600
FUZZ_TARGETS ?= request_head chunked encode_roundtrip
.PHONY: fuzz
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) bash crates/rush-proto/fuzz/run.sh $(FUZZ_TARGETS)

clean:
	rm -rf $(VENV) target
