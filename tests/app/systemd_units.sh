#!/usr/bin/env bash
# The systemd units in deploy/systemd are hardened: `systemd-analyze security` (offline, on the
# unit files) rates each below 4.0 ("OK"); the hardening before this check rated 8.5 ("EXPOSED").
# Skipped (exit 77) with the reason where systemd-analyze is missing or lacks --offline.
set -euo pipefail
src=$1
if ! command -v systemd-analyze >/dev/null; then
  echo "SKIP: no systemd-analyze (Debian's systemd package)"; exit 77
fi
if ! systemd-analyze security --help 2>&1 | grep -q -- "--offline"; then
  echo "SKIP: this systemd-analyze has no --offline (systemd >= 250 needed)"; exit 77
fi
status=0
for unit in "$src"/deploy/systemd/updraft-*.service; do
  line=$(systemd-analyze security --offline=true "$unit" 2>&1 | grep "Overall exposure" || true)
  if systemd-analyze security --offline=true --threshold=39 "$unit" >/dev/null 2>&1; then
    echo "ok   $(basename "$unit"): ${line#*: }"
  else
    echo "FAIL $(basename "$unit") is not below 4.0: ${line:-no rating}"; status=1
  fi
done
exit $status
