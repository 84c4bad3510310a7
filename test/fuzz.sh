#!/bin/sh
# Runs every fuzz target of the module for a bounded time each ($1, e.g.
# 10s), starting from its committed seed corpus (testdata/fuzz).
set -eu
time=${1:-10s}
n=0
for pkg in $(go list ./...); do
	for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		echo "fuzz: $pkg $target ($time)"
		go test -run '^$' -fuzz "^$target\$" -fuzztime "$time" "$pkg"
		n=$((n + 1))
	done
done
echo "fuzz: $n targets ran without a failure"
