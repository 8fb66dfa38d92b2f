#!/bin/bash
# run_coll.sh - dtrain's collectives beside OpenMPI's on this machine.
#
# For 2 and 4 ranks, runs build/bench/coll_bench under
# `dtrain launch -n N -s 0` and build/bench/coll_bench_mpi under mpirun
# twice - over TCP on the loopback (--mca btl self,tcp --mca
# btl_tcp_if_include lo) and with OpenMPI's default transports (shared
# memory) - on the same sizes (4 KiB to 64 MiB), then prints, per size,
# the bus bandwidths and time and the ratio of dtrain to each. Each
# measurement is repeated REPEAT times (default 2), interleaved, and the
# best is kept (STAT=median: the median, which a run of load spikes moves
# less), which damps other load on a small shared machine. BASE=DIR runs
# a second dtrain build (another branch's, say) in turn with the others
# and adds its column and the ratio of dtrain to it.
#
#   bench/run_coll.sh [BUILD_DIR]       (default: $DTRAIN_BUILD or build)
#   OP=allgather RANKS="2" REPEAT=3 bench/run_coll.sh
#   DTRAIN_ENV="DT_COLL_CMA=0" bench/run_coll.sh   (dtrain over TCP only)
#   MIN_BYTES=4096 MAX_BYTES=4194304 MPI_TCP=0 bench/run_coll.sh
#                      (fewer sizes; no OpenMPI over TCP: a shorter run)
#   STAT=median REPEAT=5 BASE=../main/build bench/run_coll.sh
#                      (medians of 5, beside another build of dtrain)
#
# Each table's heading gives the load average (/proc/loadavg) before and
# after its runs: on a shared machine the figures mean little without it.
#
# The JSON lines of every run are kept in $OUT (default a temporary
# directory, printed at the end). Exits 0 unless a run fails; without
# mpirun or coll_bench_mpi it prints dtrain's numbers alone.
set -u
BUILD=${1:-${DTRAIN_BUILD:-build}}
OP=${OP:-allreduce}
RANKS=${RANKS:-"2 4"}
REPEAT=${REPEAT:-2}
DTRAIN_ENV=${DTRAIN_ENV:-}
MIN_BYTES=${MIN_BYTES:-4096}
MAX_BYTES=${MAX_BYTES:-67108864}
MPI_TCP=${MPI_TCP:-1}
STAT=${STAT:-best}
BASE=${BASE:-}
sizes=(--min-bytes "$MIN_BYTES" --max-bytes "$MAX_BYTES")
envs=()
for kv in $DTRAIN_ENV; do envs+=(--env "$kv"); done
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/dtrain_coll_bench.XXXXXX")}
DTRAIN=$BUILD/dtrain
BENCH=$BUILD/bench/coll_bench
MPIBENCH=$BUILD/bench/coll_bench_mpi
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
have_mpi=1
if ! command -v mpirun >/dev/null || [ ! -x "$MPIBENCH" ]; then
	echo "run_coll.sh: no mpirun or $MPIBENCH: dtrain alone" >&2
	have_mpi=0
fi
[ -x "$BENCH" ] || { echo "run_coll.sh: no $BENCH (build first)" >&2; exit 1; }
mkdir -p "$OUT"

fail=0
for n in $RANKS; do
	cut -d' ' -f1-3 /proc/loadavg >"$OUT/load_before_$n"
	for ((rep = 1; rep <= REPEAT; rep++)); do
		timeout 900 "$DTRAIN" launch -n "$n" -s 0 --launcher local \
			${envs[@]+"${envs[@]}"} -- \
			"$BENCH" --json --op "$OP" "${sizes[@]}" 2>"$OUT/err" |
			sed 's/^\[worker 0\] //' | grep '^{' \
			>>"$OUT/dtrain_$n.json" || { cat "$OUT/err" >&2; fail=1; }
		[ -z "$BASE" ] ||
			timeout 900 "$BASE/dtrain" launch -n "$n" -s 0 \
				--launcher local ${envs[@]+"${envs[@]}"} -- \
				"$BASE/bench/coll_bench" --json --op "$OP" \
				"${sizes[@]}" 2>"$OUT/err" |
			sed 's/^\[worker 0\] //' | grep '^{' \
				>>"$OUT/base_$n.json" || { cat "$OUT/err" >&2; fail=1; }
		[ "$have_mpi" = 1 ] || continue
		[ "$MPI_TCP" = 0 ] ||
			timeout 900 $MPIRUN --mca btl self,tcp \
				--mca btl_tcp_if_include lo -np "$n" "$MPIBENCH" \
				--json --op "$OP" "${sizes[@]}" --tag mpi-tcp \
				2>"$OUT/err" | grep '^{' >>"$OUT/mpitcp_$n.json" ||
			{ cat "$OUT/err" >&2; fail=1; }
		timeout 900 $MPIRUN -np "$n" "$MPIBENCH" --json --op "$OP" \
			"${sizes[@]}" --tag mpi-shm 2>"$OUT/err" |
			grep '^{' >>"$OUT/mpishm_$n.json" || { cat "$OUT/err" >&2; fail=1; }
	done
	cut -d' ' -f1-3 /proc/loadavg >"$OUT/load_after_$n"
done

# best FILE: "bytes busbw time_us" per size, the best of the repeats
# (STAT=median: the run with the median bandwidth, the lower middle one
# of an even number).
best() {
	[ -s "$1" ] || return 0
	awk -F'[:,}]' '{
		for (i = 1; i < NF; i++) {
			if ($i ~ /"bytes"/) b = $(i + 1)
			if ($i ~ /"busbw_gbps"/) w = $(i + 1)
			if ($i ~ /"time_us"/) t = $(i + 1)
		}
		print b, w, t
	}' "$1" | sort -k1,1n -k2,2g | awk -v stat="$STAT" '
	{ n[$1]++; w[$1, n[$1]] = $2; t[$1, n[$1]] = $3 }
	END {
		for (b in n) {
			k = stat == "median" ? int((n[b] + 1) / 2) : n[b]
			print b, w[b, k], t[b, k]
		}
	}' | sort -n
}

human() {
	awk -v b="$1" 'BEGIN {
		if (b >= 1048576) printf "%d MiB", b / 1048576
		else printf "%d KiB", b / 1024 }'
}

for n in $RANKS; do
	best "$OUT/dtrain_$n.json" >"$OUT/d"
	best "$OUT/mpitcp_$n.json" >"$OUT/t"
	best "$OUT/mpishm_$n.json" >"$OUT/s"
	best "$OUT/base_$n.json" >"$OUT/base"
	echo
	echo "$OP, $n ranks: bus bandwidth in GB/s (time in us), $STAT of $REPEAT${DTRAIN_ENV:+, dtrain with $DTRAIN_ENV}${BASE:+, base: $BASE}"
	echo "load average $(cat "$OUT/load_before_$n") before, $(cat "$OUT/load_after_$n") after"
	printf "%-8s | %-18s | %-18s %7s | %-18s %7s" size dtrain \
		"OpenMPI tcp" ratio "OpenMPI shm" ratio
	[ -z "$BASE" ] && echo || printf " | %-18s %7s\n" base ratio
	while read -r b dw dt; do
		tw=$(awk -v b="$b" '$1 == b { print $2 }' "$OUT/t")
		tt=$(awk -v b="$b" '$1 == b { print $3 }' "$OUT/t")
		sw=$(awk -v b="$b" '$1 == b { print $2 }' "$OUT/s")
		st=$(awk -v b="$b" '$1 == b { print $3 }' "$OUT/s")
		bw=$(awk -v b="$b" '$1 == b { print $2 }' "$OUT/base")
		bt=$(awk -v b="$b" '$1 == b { print $3 }' "$OUT/base")
		awk -v s="$(human "$b")" -v dw="$dw" -v dt="$dt" -v tw="${tw:-0}" \
			-v tt="${tt:-0}" -v sw="${sw:-0}" -v st="${st:-0}" \
			-v bw="${bw:-0}" -v bt="${bt:-0}" -v base="$BASE" '
		function col(w, t) {
			# (a column that was not measured: a dash)
			if (w <= 0)
				return sprintf("%-18s %7s", "     -", "-")
			return sprintf("%6.2f (%8.1f) %6.2fx", w, t, dw / w)
		}
		BEGIN {
			printf "%-8s | %6.2f (%8.1f) | %s | %s", s, dw, dt,
				col(tw, tt), col(sw, st)
			if (base != "")
				printf " | %s", col(bw, bt)
			printf "\n" }'
	done <"$OUT/d"
done
echo
echo "raw JSON lines: $OUT"
exit $fail
