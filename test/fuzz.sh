#!/bin/sh
# Runs every fuzz target of the module for a bounded budget each ($1: a
# count such as 100000x, or a duration), starting from its committed seed
# corpus (testdata/fuzz).
set -eu
time=${1:-100000x}
go=${GO:-go}
n=0
for pkg in $($go list ./...); do
	for target in $($go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		echo "fuzz: $pkg $target ($time)"
		$go test -run '^$' -fuzz "^$target\$" -fuzztime "$time" "$pkg"
		n=$((n + 1))
	done
done
echo "fuzz: $n targets ran without a failure"
