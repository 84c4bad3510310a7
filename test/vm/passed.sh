#!/bin/sh
# test/vm/passed.sh LOG REGEX
#
# Fails unless every test named in REGEX (a -test.run pattern of the form
# ^(TestA|TestB|...)$, as the Makefile gives the VM runs) reports a pass in
# LOG (go test -v output): a name that matches no test, or a test that was
# skipped, must not pass unnoticed. Names with a regular expression in them
# (TestVM.*) are left to go test's own count.
set -eu
[ $# = 2 ] || { echo "usage: test/vm/passed.sh LOG REGEX" >&2; exit 2; }
log=$1
missing=
for t in $(printf '%s\n' "$2" | tr -d '^()$' | tr '|' ' '); do
	case $t in *[!A-Za-z0-9_]*) continue ;; esac
	grep -q "^--- PASS: $t (" "$log" || missing="$missing $t"
done
[ -z "$missing" ] || { echo "test/vm/passed.sh: did not pass (not run, skipped or failed):$missing" >&2; exit 1; }
