#!/usr/bin/env bash
# `make bench`: every benchmark, each printing its table beside the
# baseline it measured in the same run. Usage: bench/run_all.sh [BUILD_DIR]
set -u
B=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
section() { printf '\n== %s\n' "$*"; }
section "transport: dtrain van vs a plain TCP socket pair (net_bench)"
[ -x "$B/bench/net_bench" ] && "$B/bench/net_bench"
section "KVStore, 1 server 1 worker, vs plain TCP (kv_bench)"
"$B/dtrain" launch -n 1 -s 1 -- "$B/bench/kv_bench"
section "KVStore, many keys per call, 1 server 1 worker (kv_sparse_bench)"
"$B/dtrain" launch -n 1 -s 1 -- "$B/bench/kv_sparse_bench"
section "trainer: LeNet forward+backward vs OpenBLAS sgemm (train_bench)"
[ -x "$B/bench/train_bench" ] && "$B/bench/train_bench"
if [ -f "$here/run_coll.sh" ]; then
  section "collectives vs OpenMPI MPI_Allreduce (coll_bench)"
  bash "$here/run_coll.sh" "$B"
fi
section "authentication and encryption vs plain, and vs the AEAD on one core (auth_bench)"
bash "$here/auth_bench.sh" "$B"
section "PS_RESEND=1 vs plain, kv_bench (resend_bench)"
bash "$here/resend_bench.sh" "$B"
section "server checkpoints every 100 steps vs none, train_dist_bench (checkpoint_bench)"
bash "$here/checkpoint_bench.sh" "$B"
section "gradient-compression codecs vs memcpy, one core (compress_bench)"
"$B/bench/compress_bench"
section "training over a 1 Gbit/s link between two namespace hosts (slow_link; root only)"
bash "$here/slow_link.sh" "$B" 1gbit
