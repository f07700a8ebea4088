#!/bin/sh
# Prints the path of a CPython X.Y interpreter for `make test-pythons`, without changing the
# machine's default Python: one that pyenv installed (these machines have 3.12 and 3.13 there;
# pyenv's shims refuse versions that are not selected, so the version's own directory is used),
# else a real pythonX.Y on PATH. Nothing is downloaded: `uv python install` would fetch a prebuilt
# interpreter from outside the package registries, which these machines cannot reach.
# Usage: python_for.sh 3.12
set -eu
version="$1"
if command -v pyenv >/dev/null 2>&1; then
	found=$(ls -d "$(pyenv root)"/versions/"$version".*/bin/python"$version" 2>/dev/null | sort -V | tail -1 || true)
	if [ -n "$found" ]; then echo "$found"; exit 0; fi
fi
for candidate in $(which -a python"$version" 2>/dev/null); do
	case "$candidate" in */shims/*) continue ;; esac
	if "$candidate" -c 'import sys' 2>/dev/null; then echo "$candidate"; exit 0; fi
done
echo "no CPython $version here (pyenv install $version, or a python$version on PATH)" >&2
exit 1
