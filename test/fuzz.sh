#!/bin/sh
# Runs every fuzz target of the module for a bounded budget each ($1: a
# count such as 100000x, or a duration), starting from its committed seed
# corpus (testdata/fuzz). The targets are found in the sources (func FuzzX
# in a _test.go file), not by `go test -list`, which would build every
# package's tests once more just to list them.
set -eu
cd "$(dirname "$0")/.."
time=${1:-100000x}
go=${GO:-go}
n=0
for f in $(grep -rl --include='*_test.go' '^func Fuzz' . | sort); do
	pkg=./$(dirname "${f#./}")
	for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$f"); do
		echo "fuzz: $pkg $target ($time)"
		$go test -run '^$' -fuzz "^$target\$" -fuzztime "$time" "$pkg"
		n=$((n + 1))
	done
done
[ "$n" -gt 0 ] || { echo "fuzz: no fuzz target found" >&2; exit 1; }
echo "fuzz: $n targets ran without a failure"
