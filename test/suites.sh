#!/bin/bash
# test/suites.sh [--before TARGETS] LANE [LANE ...]      (make test)
#
# Runs the make targets of --before one after another, then the lanes: the targets of one lane (a space-separated list in one argument)
# one after another, the lanes side by side. On a 2-core machine a suite that mostly waits
# (dockerd, DHCP timeouts) or holds one core (a QEMU VM: one emulated CPU is one host thread)
# can run beside one that computes. Each target's output goes to $LOGS/TARGET.log and is
# printed whole, under a header, when the target ends (so lanes never interleave their
# lines); a line when each one starts and ends shows progress. A failed target does not stop
# the others: every target runs, and the run fails at the end. Then, if a target failed, its
# failed Go tests with their last messages (test/failures.sh). Last comes the timing table
# (each target's seconds, its lane and result, and the whole run's wall time), then one line
# "suites: N passed, N failed" counting targets.
#
# Env: MAKE (make), LOGS (bin/test-logs).
set -uo pipefail
cd "$(dirname "$0")/.."
before=
if [ "${1:-}" = --before ]; then before=$2; shift 2; fi
[ $# -ge 1 ] || { sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//p}' "$0" >&2; exit 2; }
MAKE=${MAKE:-make}
LOGS=${LOGS:-bin/test-logs}
rm -rf "$LOGS"; mkdir -p "$LOGS"
start=$(date +%s)
results=$LOGS/.results   # lines: TARGET LANE SECONDS RESULT
: >"$results"
# A target's log is printed whole and at once: the lock keeps two lanes' logs apart.
exec 8>"$LOGS/.print-lock"

lane() {
	local n=$1; shift
	local t s e rc
	for t in $1; do
		s=$(date +%s)
		echo "make test: lane $n: $t started at $(date +%T)"
		$MAKE --no-print-directory "$t" >"$LOGS/$t.log" 2>&1 </dev/null
		rc=$?
		e=$(date +%s)
		local result=ok; [ "$rc" = 0 ] || result="FAIL(rc=$rc)"
		{
			flock 8
			echo "==================== $t (lane $n): $result in $((e - s)) s ===================="
			cat "$LOGS/$t.log"
			echo "==================== end of $t ===================="
			echo "$t $n $((e - s)) $result" >>"$results"
		}
	done
}

trap 'echo "make test: interrupted"; kill 0; exit 130' INT TERM
[ -z "$before" ] || lane 0 "$before"
i=0
for l in "$@"; do
	i=$((i + 1))
	lane "$i" "$l" &
done
wait

end=$(date +%s)
passed=0 failed=0
failedlogs=$(awk -v logs="$LOGS" '$4 != "ok" { print logs "/" $1 ".log" }' "$results")
if [ -n "$failedlogs" ]; then
	echo
	echo "make test: failed tests, with the last lines each logged (test/failures.sh; the whole output is above)"
	# shellcheck disable=SC2086 # one path per word
	test/failures.sh $failedlogs
fi
echo
echo "make test: timing (seconds; lanes run side by side)"
printf '  %-26s %4s %7s  %s\n' target lane seconds result
while read -r t n secs result; do
	printf '  %-26s %4s %7s  %s\n' "$t" "$n" "$secs" "$result"
	if [ "$result" = ok ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done <"$results"
for l in "$before" "$@"; do   # a target that never reported (its lane was killed) counts as failed
	for t in $l; do
		grep -q "^$t " "$results" || { printf '  %-26s %4s %7s  %s\n' "$t" - - "did not finish"; failed=$((failed + 1)); }
	done
done
printf '  %-26s %4s %7s\n' "total (wall)" "" "$((end - start))"
[ "$failed" != 0 ] || echo "make test: all suites passed"
echo "suites: $passed passed, $failed failed"
[ "$failed" = 0 ]
