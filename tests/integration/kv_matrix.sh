#!/usr/bin/env bash
# KVStore end to end through the launcher: exact sums, rank-0 init, the
# second push of a round, big-array sharding and every error case, for 1, 2
# and 4 workers x 1, 2 and 3 servers; the server optimizers (sgd, adam)
# against references; dist_async progress and its no-optimizer error.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
set -u
B=${DTRAIN_BUILD:?}
fails=0
run() {
  local desc=$1; shift
  if ! out=$(timeout $((120 * T_SCALE)) "$@" 2>&1); then
    echo "FAIL: $desc"; echo "$out" | tail -20; fails=$((fails + 1))
  else
    echo "ok: $desc"
  fi
}
export MXNET_KVSTORE_BIGARRAY_BOUND=1000
for w in 1 2 4; do
  for s in 1 2 3; do
    run "sum w=$w s=$s" "$B/dtrain" launch -n $w -s $s -- "$B/tests/progs/kv_check" sum
  done
done
for mode in sgd adam async async_noopt; do
  run "$mode w=2 s=2" "$B/dtrain" launch -n 2 -s 2 -- "$B/tests/progs/kv_check" $mode
  run "$mode w=3 s=1" "$B/dtrain" launch -n 3 -s 1 -- "$B/tests/progs/kv_check" $mode
done
unset MXNET_KVSTORE_BIGARRAY_BOUND
# The default bound (1,000,000): 3*bound+1 floats split over 2 servers.
run "sum default bound w=2 s=2" "$B/dtrain" launch -n 2 -s 2 -- "$B/tests/progs/kv_check" sum
run "local store" "$B/tests/progs/kv_check" local
echo "$fails failed"
[ $fails -eq 0 ]
