#!/bin/sh
# Builds h2spec (the HTTP/2 conformance suite, Go module github.com/summerwind/h2spec) into
# $HOME/go/bin/h2spec for tests/test_http2.py, with whatever Go there is: a fresh machine gets
# Debian's golang-go (Go 1.19 on bookworm) from `make test-tools`.
#
# Why not `go install ...@v2.2.1+incompatible`: h2spec has no go.mod, so `go install` takes the
# newest version of each of its dependencies, and today's golang.org/x/sys needs a newer Go than
# Debian ships ("package slices is not in GOROOT"). A throwaway module pins the dependencies at
# releases that build with Go 1.19 and later (h2spec itself is the same v2.2.1 either way).
set -eu
GO=${GO:-go}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$HOME/go/bin"
cd "$work"
"$GO" mod init rush-h2spec-build >/dev/null 2>&1
"$GO" get github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible \
    github.com/fatih/color@v1.13.0 github.com/spf13/cobra@v1.6.1 \
    golang.org/x/net@v0.10.0 golang.org/x/sys@v0.8.0 golang.org/x/text@v0.9.0
"$GO" build -o "$HOME/go/bin/h2spec" github.com/summerwind/h2spec/cmd/h2spec
