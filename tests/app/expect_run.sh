#!/usr/bin/env bash
# expect_run.sh EXIT PATTERN... -- COMMAND...: runs COMMAND, then requires its exit status to be
# EXIT and its output (stdout and stderr) to contain every PATTERN (extended regex).
set -uo pipefail
want=$1; shift
patterns=()
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do patterns+=("$1"); shift; done
shift
out=$("$@" 2>&1); rc=$?
echo "$out"
[ "$rc" -eq "$want" ] || { echo "expect_run: exit status $rc, expected $want"; exit 1; }
for p in "${patterns[@]}"; do
  grep -Eq -- "$p" <<<"$out" || { echo "expect_run: no line matches: $p"; exit 1; }
done
echo "expect_run: ok"
