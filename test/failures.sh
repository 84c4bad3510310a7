#!/bin/bash
# test/failures.sh LOG [LOG ...]      (test/suites.sh, at the end of make test)
#
# A digest of the failed Go tests in `go test -v` logs: for each test with a "--- FAIL" line,
# its name and the last lines it logged at a source line ("    file.go:N: message"; each
# message's first line, cut at 300 characters; at most 8, the failure is among the last ones,
# before a helper's cleanup dumps a log). Parallel tests interleave their output; a line
# belongs to the test of the "=== RUN", "=== CONT" or "=== NAME" line before it, as go test
# -v marks every switch. The whole output stays above: this is what a reader (or CI's excerpt,
# which shows the end) sees first. Prints nothing for a log without a failed test.
set -uo pipefail
[ $# -ge 1 ] || { sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//p}' "$0" >&2; exit 2; }
for log in "$@"; do
	[ -f "$log" ] || continue
	awk -v name="$(basename "$log" .log)" '
		/^=== (RUN|CONT|NAME) / { cur = $3; next }
		/^ *--- FAIL: / {
			t = $3
			if (!(t in failed)) { failed[t] = 1; order[++nf] = t }
			next
		}
		/^    +[A-Za-z0-9_.-]+\.go:[0-9]+: / && cur != "" {
			line = $0; sub(/^ +/, "", line)
			if (length(line) > 300) line = substr(line, 1, 300) "…"
			n = ++count[cur]; msg[cur, n] = line
		}
		END {
			for (i = 1; i <= nf; i++) {
				t = order[i]
				printf "  %s: %s\n", name, t
				first = count[t] > 8 ? count[t] - 7 : 1
				for (j = first; j <= count[t]; j++) printf "      %s\n", msg[t, j]
			}
		}' "$log"
done
