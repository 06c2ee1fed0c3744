#!/bin/sh
# Run the QA suites on this host (the agent's runner), bounded in time.
# - exit 0: every case passed;
# - the runner's exit 1 WITH its report written ("report: ..." on its stdout): failing cases, a result: exit 0
#   here, so the report is fetched and the fleet table fails the run;
# - every other non-zero exit (exit 1 without a report, i.e. a crash; bad suites: 2; no agent: 127; a
#   signal) and a timeout fail the operation.
# usage: qa-run.sh TIMEOUT COMMAND...
set -u
limit=$1
shift
out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT
timeout --kill-after=10 "$limit" "$@" >"$out"
rc=$?
cat "$out"
case $rc in
  0) exit 0 ;;
  1)
    if grep -q '^report: ' "$out"; then
      echo "QA: failing cases on this host (see the report)" >&2
      exit 0
    fi
    echo "ERROR: the QA runner failed (exit 1) without writing its report" >&2
    exit 1 ;;
  124|137) echo "ERROR: the QA run took longer than ${limit}s (qa_timeout), or was killed" >&2; exit 1 ;;
  *) echo "ERROR: the QA runner failed (exit $rc)" >&2; exit "$rc" ;;
esac
