#!/bin/sh
# Runs rush's tests under CPython versions other than the .venv's (README, "Python versions"), for
# `make pytest-pythons` (a subset, part of `make test`) and `make test-pythons` (the whole interface
# set). For each version: an interpreter from pyenv or PATH (python_for.sh; nothing is downloaded), a
# venv .venv-pyX.Y with what the tests need (requirements-pythons.txt, installed again only when that
# file changes), rush's wheel for that version built with the quick profile (no abi3: rush calls the
# contextvars C API, outside the stable ABI) and installed into it, then pytest with RUSH_VENV
# pointing tests/support.py at that venv.
#
# The versions run one after another and each one's tests run whole (no -x), so a run reports every
# failure of every version. A version without an interpreter is not skipped quietly: it is named in a
# NOT TESTED line, and the exit status is 1 as for a failure, because a `make test` that passes is
# read as "every listed version passed" by whoever cannot see its output.
#
# Usage: pythons.sh "3.12 3.13" tests/test_asgi.py tests/test_wsgi.py::test_x ...
# Environment: MATURIN (default .venv/bin/maturin).
set -u
cd "$(dirname "$0")/../.."
versions="$1"
shift
maturin="${MATURIN:-.venv/bin/maturin}"
requirements=tests/suites/requirements-pythons.txt
summary=""
status=0

note() {
	summary="$summary
$1"
}

for version in $versions; do
	started=$(date +%s)
	venv="$PWD/.venv-py$version"
	if ! interpreter=$(sh tests/suites/python_for.sh "$version"); then
		echo "==== NOT TESTED: CPython $version: no interpreter here (pyenv install $version, or a python$version on PATH)" >&2
		note "==== CPython $version: NOT TESTED, no interpreter here (pyenv install $version); this fails the run"
		status=1
		continue
	fi
	if ! { test -x "$venv/bin/python" || "$interpreter" -m venv "$venv"; }; then
		note "CPython $version: NOT TESTED, its venv could not be made"
		status=1
		continue
	fi
	if ! [ "$venv/.installed" -nt "$requirements" ]; then
		if ! "$venv/bin/python" -m pip install -q --no-compile -r "$requirements"; then
			note "CPython $version: NOT TESTED, pip could not install $requirements"
			status=1
			continue
		fi
		touch "$venv/.installed"
	fi
	wheels="target/wheels/py$version"
	rm -rf "$wheels"
	if ! nice -n 10 "$maturin" build --profile quick -q -i "$interpreter" -o "$wheels" \
		|| ! "$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$wheels"/*.whl; then
		note "CPython $version: NOT TESTED, rush's wheel could not be built or installed"
		status=1
		continue
	fi
	ready=$(date +%s)
	echo "== CPython $version ($interpreter), venv and wheel ready in $((ready - started)) s: $*"
	# A basetemp of this run's own: it may go on beside the .venv's pytest (make test), or beside
	# another checkout's run on the same machine. Kept when a test failed.
	basetemp=$(mktemp -d "${TMPDIR:-/tmp}/rush-py$version.XXXXXX")
	if RUSH_VENV="$venv" "$venv/bin/python" -m pytest -q --basetemp="$basetemp" "$@"; then
		note "CPython $version: passed ($(($(date +%s) - ready)) s of tests)"
		rm -rf "$basetemp"
	else
		note "CPython $version: FAILED (its temporary files: $basetemp)"
		status=1
	fi
done
echo "== other CPython versions:$summary"
exit $status
