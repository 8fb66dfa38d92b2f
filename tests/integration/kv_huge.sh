#!/usr/bin/env bash
# One array of more than 1 GiB (2^28 + 3 floats) through dist_sync with 2
# workers and 2 servers: init, exact sums, pushpull and a second push in a
# round, with the array split over both servers and reassembled on pull.
# Needs about 10 GiB of memory; skipped (with a message) on a smaller one.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
set -u
B=${DTRAIN_BUILD:?}
avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
if [ "${avail_kb:-0}" -lt $((12 * 1024 * 1024)) ]; then
  echo "skipped: $((avail_kb / 1024)) MiB available, the test needs 12 GiB"
  exit 0
fi
exec timeout $((280 * T_SCALE)) "$B/dtrain" launch -n 2 -s 2 -- "$B/tests/progs/kv_check" huge
