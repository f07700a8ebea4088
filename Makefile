# rush: `make run` serves the demo app, `make test` runs every check.
# Both set everything up on a fresh machine (Python 3.11 + Rust toolchain).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export VIRTUAL_ENV := $(abspath $(VENV))

.PHONY: run catalog test build build-quick lint format cargo-test pytest test-tools bench soak clean

$(BIN)/.installed: requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements-dev.txt
	touch $@

# The release build (fat LTO) is what users run and what benches measure.
build: $(BIN)/.installed
	$(BIN)/maturin develop --release -q

# What `make test` tests: the quick profile (release optimisation, no fat LTO; Cargo.toml), the one
# pytest-pythons builds the 3.12 and 3.13 wheels with, so the dependencies compile once for all three.
# From cold on 2 cores it is no dearer than the release build (README, "Python versions"); no test
# asserts a timing, so none needs the release build.
build-quick: $(BIN)/.installed
	$(BIN)/maturin develop --profile quick -q

# `make run` needs only what serving needs: its own venv with maturin (to build the release
# extension into it) and rush, none of the 38 development packages. On a fresh machine the first
# run takes about three minutes on 2 cores, nearly all of it the fat-LTO build; later runs rebuild
# only what changed.
RUN_VENV := .venv-run
$(RUN_VENV)/bin/.installed:
	$(PYTHON) -m venv $(RUN_VENV)
	$(RUN_VENV)/bin/python -m pip install -q --upgrade pip "maturin>=1.5,<2"
	touch $@

run: $(RUN_VENV)/bin/.installed
	VIRTUAL_ENV=$(abspath $(RUN_VENV)) $(RUN_VENV)/bin/maturin develop --release -q
	$(RUN_VENV)/bin/rush examples.hello:app --host 127.0.0.1 --port 8000

# The package catalog of seed 004 (examples/catalog/README.md): builds its SQLite database from the
# seeded generator (once), then serves /nas/ with the rush App and its native cache. Try
# http://127.0.0.1:8000/nas/?arch=x86_64&build=42661&language=enu
catalog: build
	$(BIN)/python -m examples.catalog build
	$(BIN)/python -m examples.catalog serve --host 127.0.0.1 --port 8000

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

# System tools the tests drive, as COMMAND:DEBIAN-PACKAGE: wrk (a real load generator), redis-server
# (the response cache's shared level), curl and openssl (the proxy's tests), mariadbd (MariaDB, which
# tests/test_catalog.py starts as a throwaway server), nginx (in front of rush with TLS, tests/test_nginx_front.py),
# systemd-socket-activate (Debian's systemd: socket activation, tests/test_systemd.py), h2load (Debian's
# nghttp2-client: the http2 bench group's load generator, run for real by tests/test_benches.py), haproxy
# (in front of rush with send-proxy/send-proxy-v2, tests/test_proxy_protocol.py). The missing ones are installed with one
# apt-get run. PostgreSQL, which the catalog's tests start too, keeps its programs off PATH
# (/usr/lib/postgresql/N/bin), so it is looked for there.
TEST_TOOLS := wrk:wrk redis-server:redis-server curl:curl openssl:openssl mariadbd:mariadb-server nginx:nginx \
	systemd-socket-activate:systemd h2load:nghttp2-client nghttp:nghttp2-client haproxy:haproxy

test-tools:
	@missing=""; for tool in $(TEST_TOOLS); do \
		command -v $${tool%%:*} >/dev/null || missing="$$missing $${tool#*:}"; \
	done; \
	if [ -n "$$missing" ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; fi
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || (apt-get update -q && apt-get install -y -q postgresql)
	@# h2spec for tests/test_http2.py (rush over h2c and TLS); go from apt when there is none.
	@test -x "$(H2SPEC)" || { \
		GO=$$(command -v go || ls /usr/local/go/bin/go 2>/dev/null) || true; \
		if [ -z "$$GO" ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q golang-go; GO=go; fi; \
		GO=$$GO nice -n 10 sh tests/h2spec/install.sh; }

# The clients' own test suites (README, "Clients' own test suites"; tests/suites/): httpx's and
# requests' tests, from the sdists of the installed versions (downloaded once into
# ~/.cache/rush/suites), run unchanged against rush and against their default servers (uvicorn;
# pytest-httpbin's wsgiref server) and compared test by test with tests/suites/expected.toml.
# About three minutes. `make test` runs a part of them (tests/test_suites.py).
.PHONY: test-suites
test-suites: build
	$(BIN)/python tests/suites/runner.py

# The interface tests under every other CPython the wheels ship for (README, "Python versions"):
# tests/suites/pythons.sh, for each of TEST_PYTHONS one after another, finds the interpreter pyenv
# or PATH has (nothing is downloaded), makes a venv .venv-pyX.Y with tests/suites/requirements-pythons.txt,
# builds and installs rush's wheel for that version (quick profile; no abi3, see "Wheels") and runs
# the tests with RUSH_VENV pointing tests/support.py at that venv. Every version runs whole (no -x);
# the status is 1 if any failed or had no interpreter, which is named in a NOT TESTED line.
# `make test-pythons` runs PYTHON_TESTS, the whole interface set (about two and a half minutes a
# version plus the build); `make test` runs pytest-pythons, PYTHON_QUICK_TESTS: the part that
# reaches into what changes between CPython versions (see the list below).
TEST_PYTHONS ?= 3.12 3.13
PYTHON_TESTS ?= tests/test_wsgi.py tests/test_asgi.py tests/test_app_api.py tests/test_frameworks.py \
	tests/test_websocket.py tests/test_http2.py tests/differential
.PHONY: test-pythons pytest-pythons
test-pythons: $(BIN)/.installed test-tools
	sh tests/suites/pythons.sh "$(TEST_PYTHONS)" $(PYTHON_TESTS)

# Why each is in: test_asgi (the ASGI objects: receive and send, whose send is a raw METH_FASTCALL
# function, and the awaitables whose am_await/am_send slots src/asgi/awaitables.rs patches onto the
# type; coroutines started with PyIter_Send), test_wsgi (the environ built with CPython's unicode and
# dict calls, start_response kept for the next request by its reference count),
# test_app_api (the native App's async handlers through src/coroutine.rs), test_websocket (WebSocket
# under ASGI, Starlette, FastAPI and the App), the HTTP/2 tests that reach each interface through the
# three shared servers (not h2spec, TLS or timeouts: protocol code that is the same Rust on every
# version), and the differential tests against uvicorn, hypercorn and gunicorn: test_diff_isolation
# whole (contextvars per request through the C API, the spare asyncio task and its weak references:
# the 3.13-only fault it found, WSGI thread locals, HTTP/2 and WebSocket starts), and one per
# interface besides: HTTP/2 (what the app saw), WebSocket over HTTP/2, Flask (WSGI), and the ASGI
# message shapes (bytes, bytearray, memoryview and list fields read by src/asgi/send.rs).
PYTHON_QUICK_TESTS ?= tests/test_asgi.py tests/test_wsgi.py tests/test_app_api.py tests/test_websocket.py \
	tests/test_http2.py::test_curl_prior_knowledge_gets_each_interface_over_h2c \
	tests/test_http2.py::test_the_app_is_told_http2_with_host_and_joined_cookies \
	tests/test_http2.py::test_a_request_body_reaches_each_interface \
	tests/test_http2.py::test_a_large_body_streams_into_asgi_receive \
	tests/test_http2.py::test_a_streamed_response_arrives_whole \
	tests/test_http2.py::test_a_client_reset_is_http_disconnect_for_the_app \
	tests/test_http2.py::test_a_streamed_wsgi_body_on_the_loop_and_on_the_pool \
	tests/differential/test_diff_isolation.py \
	tests/differential/test_diff_http2.py::test_requests_and_what_the_app_saw \
	tests/differential/test_diff_websocket_h2.py tests/differential/test_diff_flask.py \
	tests/differential/test_diff_message_shapes.py
pytest-pythons: $(BIN)/.installed test-tools
	@sh tests/suites/pythons.sh "$(TEST_PYTHONS)" $(PYTHON_QUICK_TESTS)

# Opt-in: Debian's chromium (about 300 MB installed) for the browser tests (HTTP/2 in
# tests/test_http2_conformance.py and tests/test_http2_websocket.py, HTTP/3 in
# tests/test_http3_browser.py), which skip without it under `make test`.
.PHONY: test-browser
test-browser: build test-tools
	@command -v chromium >/dev/null || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium)
	$(BIN)/python -m pytest -q tests/test_http2_conformance.py tests/test_http2_websocket.py \
		tests/test_http3_browser.py -k chromium

pytest: build-quick test-tools
	$(BIN)/python -m pytest -q

# make test's integration tests: the .venv's whole pytest run and, beside it, pytest-pythons (the
# versions one after another, in a session of their own, output in target/pythons.log, printed
# after the .venv's run). Beside, not after: the whole run mostly waits on servers and leaves a core
# idle, while after it the other versions would add about 70 s each to CI (venv, packages, wheel,
# tests), more than the time CI has left (README, "Python versions"). Their builds are niced; their
# tests use a basetemp of their own and ports the kernel picks, as every test here does. Either
# failing fails it, once both finished.
# The other versions' run gets a session of its own, so that an interrupted make test can stop it
# as a whole with SIGINT (pytest then stops its servers), and SIGINT back: the shell ignores it in a
# command it starts with &, and the programs it runs would inherit that.
export SESSION := import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.setsid(); \
	os.execvp(sys.argv[1], sys.argv[1:])
.PHONY: pytest-all
pytest-all: build-quick test-tools
	@log=target/pythons.log; \
	echo "== CPython $(TEST_PYTHONS): pytest-pythons runs beside this run; its output ($$log) follows it"; \
	$(BIN)/python -c "$$SESSION" sh tests/suites/pythons.sh "$(TEST_PYTHONS)" $(PYTHON_QUICK_TESTS) >$$log 2>&1 & \
	others=$$!; trap 'kill -INT -$$others 2>/dev/null; exit 1' INT TERM; \
	$(BIN)/python -m pytest -q; status=$$?; \
	wait $$others; others_status=$$?; \
	echo "== CPython $(TEST_PYTHONS) (pytest-pythons, beside the run above):"; cat $$log; \
	test $$status = 0 && test $$others_status = 0

test: lint cargo-test fuzz-smoke pytest-all

# The response cache's oracle test (tests/test_cache_oracle.py) at length: many random request
# sequences, each answer of the cached server compared with the same app served uncached.
CACHE_ORACLE_EXAMPLES ?= 2000
.PHONY: cache-oracle
cache-oracle: build
	RUSH_CACHE_ORACLE_EXAMPLES=$(CACHE_ORACLE_EXAMPLES) $(BIN)/python -m pytest -q tests/test_cache_oracle.py

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
# one at a time at nice 19, and prints executions and findings. `make test` runs only its short
# smoke run (fuzz-smoke, below). E.g. make fuzz FUZZ_SECONDS=60 FUZZ_TARGETS=chunked
FUZZ_SECONDS ?= 600
FUZZ_TARGETS ?= request_head chunked encode_roundtrip h2_frames h3_guard
.PHONY: fuzz
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) bash crates/rush-proto/fuzz/run.sh $(FUZZ_TARGETS)

# h2spec (Go module github.com/summerwind/h2spec, installed with `go install` if missing) against
# rush-h2's example h2c server (crates/rush-h2/examples/h2c_server.rs): the protocol layer alone;
# the default run and --strict. `make test` runs h2spec against the server itself, over h2c and
# TLS (tests/test_http2.py; test-tools installs h2spec).
H2SPEC ?= $(shell command -v h2spec || echo $(HOME)/go/bin/h2spec)
H2SPEC_PORT ?= 18089
.PHONY: h2spec-layer
h2spec-layer:
	@test -x "$(H2SPEC)" || nice -n 10 sh tests/h2spec/install.sh
	nice -n 10 cargo build --release -q -p rush-h2 --example h2c_server
	@./target/release/examples/h2c_server 127.0.0.1:$(H2SPEC_PORT) 2>/dev/null & pid=$$!; sleep 0.3; \
		status=0; \
		out=$$("$(H2SPEC)" -h 127.0.0.1 -p $(H2SPEC_PORT) -o 2) || status=1; echo "$$out" | tail -1; \
		out=$$("$(H2SPEC)" -h 127.0.0.1 -p $(H2SPEC_PORT) -o 2 --strict) || status=1; echo "$$out" | tail -1; \
		kill $$pid; exit $$status

# Release wheels (README, "Wheels"): manylinux2014 (glibc 2.17 and later) for x86_64 and aarch64,
# one per CPython version (rush calls CPython's contextvars API, which is outside the stable ABI,
# so no abi3 wheel), cross-compiled with zig (the ziglang package) so that no manylinux container
# is needed, plus the sdist; then check-wheels. A version whose pythonX.Y is not installed here
# is still built for aarch64 (maturin knows those interpreters), but for x86_64 it needs the
# interpreter: WHEEL_PYTHONS="3.11" builds only that one.
WHEEL_TARGETS ?= x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu
WHEEL_PYTHONS ?= 3.11 3.12 3.13
WHEEL_DIR ?= target/wheels/release
AUDITWHEEL ?= $(BIN)/auditwheel
.PHONY: wheel check-wheels wheel-test

wheel: $(BIN)/.installed
	$(BIN)/python -m pip install -q "ziglang>=0.13" "auditwheel>=6"
	rustup target add $(WHEEL_TARGETS)
	rm -f $(WHEEL_DIR)/*.whl $(WHEEL_DIR)/*.tar.gz
	for target in $(WHEEL_TARGETS); do \
		PATH="$(abspath $(BIN)):$$PATH" $(BIN)/maturin build --release --zig --compatibility manylinux2014 \
			--target $$target $(foreach version,$(WHEEL_PYTHONS),-i python$(version)) -o $(WHEEL_DIR) || exit 1; \
	done
	$(BIN)/maturin sdist -o $(WHEEL_DIR)
	$(MAKE) check-wheels

# auditwheel must find every wheel consistent with a manylinux tag: no shared library outside the
# manylinux policy, no symbol from a newer glibc.
check-wheels:
	@for wheel in $(WHEEL_DIR)/*.whl; do \
		$(AUDITWHEEL) show "$$wheel" | tee $(WHEEL_DIR)/auditwheel.txt; \
		tr -s ' \n' '  ' < $(WHEEL_DIR)/auditwheel.txt | grep -q 'consistent with the following platform tag: "manylinux' \
			|| { echo "$$wheel: not a manylinux wheel"; exit 1; }; \
	done; rm -f $(WHEEL_DIR)/auditwheel.txt

# The x86_64 wheel installed into a fresh venv without cargo or rustc on PATH, and integration
# tests run against it (tests/test_wheel.py; skipped by `make test`).
wheel-test: $(BIN)/.installed
	RUSH_WHEEL_TEST=1 $(BIN)/python -m pytest -q tests/test_wheel.py

# The fuzz smoke run of `make test` (issue 22): (a) every target's seed corpus replayed through
# `reproduce` (the same checks, no AFL++; a second or so), then (b) each of the five targets fuzzed
# for FUZZ_SMOKE_SECONDS with AFL++ through run.sh, into a temporary directory; any crash or hang
# fails. On a fresh machine (b) costs about a minute and a half, most of it installing cargo-afl
# once; FUZZ_SMOKE_AFL=0 skips it. 4 s per target keeps the five about as long as the four were
# at 5 s (h2_frames, issue 24, is the fifth).
FUZZ_SMOKE_SECONDS ?= 4
FUZZ_SMOKE_AFL ?= 1
FUZZ_ALL_TARGETS := request_head chunked encode_roundtrip ws_frames h2_frames
.PHONY: fuzz-smoke
fuzz-smoke:
	cd crates/rush-proto/fuzz && nice -n 19 cargo build --release -q --bin reproduce
	@cd crates/rush-proto/fuzz && for target in $(FUZZ_ALL_TARGETS); do \
		log=$$(./target/release/reproduce $$target corpus/$$target 2>&1) || { echo "$$log" | tail -20; exit 1; }; \
		echo "$$log" | tail -1; \
	done
	@if [ "$(FUZZ_SMOKE_AFL)" = 1 ]; then \
		out=$$(mktemp -d) && FUZZ_OUT=$$out FUZZ_SECONDS=$(FUZZ_SMOKE_SECONDS) bash crates/rush-proto/fuzz/run.sh $(FUZZ_ALL_TARGETS); \
		status=$$?; rm -rf "$$out"; exit $$status; \
	fi

clean:
	rm -rf $(VENV) $(RUN_VENV) target
