#!/usr/bin/env bash
# slow_link.sh - a job over a network that is not loopback: two hosts made
# of network namespaces on a bridge, each link limited by a tc token bucket
# (default 1 Gbit/s each way; netem's delay is not in every kernel, so no
# delay is added), each host with its own sshd (the test suite's
# engines_lib.bash). Runs make demo's training (mnist, 2 workers, one on
# each host: dist_sync with 2 servers placed over both hosts, and horovod,
# MODES) with each model given, and reports a worker's samples/s beside
# its bounds: the processors' (the same training with kvstore local, two
# processes at once, no network) and the link's (the rate over the bytes
# per sample on the busiest direction of a host's link, from /proc/net/dev
# of the veths); of_bound is samples/s over the lesser of the two, util
# the busiest direction's bytes over rate x time. A table and JSON lines,
# for each gradient compression and pull precision asked
# (docs/compression.md). Removes everything it made. Needs root.
#
# Usage: [COMPRESSIONS="none fp16 2bit 1bit"] [PULLS="fp32 fp16"] \
#        bench/slow_link.sh [BUILD_DIR] [RATE] [MODEL...]
#        (defaults: none, fp32, build, 1gbit, mlp lenet; MODES="dist_sync
#        horovod", LIMIT=60000 samples in the epoch: a whole one)
#        TIMELINE=PREFIX writes each training job's Chrome trace to
#        PREFIX.MODEL.KVSTORE.json (docs/observability.md).
#        BENCH=coll runs coll_bench's allreduce instead (one rank per host,
#        1-16 MiB of float32) with each compression of the distributed
#        optimizer, and reports its effective bus bandwidth.
#        BENCH=coll PER_HOST=2 runs that many ranks on each host, 1-64 MiB
#        (MIN_BYTES, MAX_BYTES), once per DTRAIN_COLL_HIER value of HIERS
#        (default "off on": one flat ring against the hierarchy), ITERS
#        timed calls per size (default 10), and reports the bus bandwidth,
#        it over the link rate, and the link utilisation: the bytes each
#        direction of a host's link must carry per call (flat ring, a
#        host's ranks consecutive: 2(n-1)/n of the data; hierarchical:
#        2(H-1)/H of it for H hosts) over rate x time.
set -u
B=$(cd "${1:-build}" && pwd)
RATE=${2:-1gbit}
MODELS=("${@:3}")
[ ${#MODELS[@]} -gt 0 ] || MODELS=(mlp lenet)
read -r -a COMPS <<<"${COMPRESSIONS:-none}"
read -r -a PULLS <<<"${PULLS:-fp32}"
export DTRAIN_BUILD=$B
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../tests/integration/launch_lib.bash
. "$here/../tests/integration/launch_lib.bash"
# shellcheck source=../tests/integration/engines_lib.bash
. "$here/../tests/integration/engines_lib.bash"
need_root "a link of network namespaces"
need_cmds tc
DATA=${DTRAIN_DATA:-/usr/share/datasets/fashion-mnist}
[ "${BENCH:-train}" = coll ] || [ -d "$DATA" ] || skip "no Fashion-MNIST in $DATA"
ssh_setup
hosts_setup 2 || skip "the namespace hosts could not be set up"
printf '%s:%s\n%s:%s\n' "${HOSTS[0]}" "$SSH_PORT" "${HOSTS[1]}" "$SSH_PORT" >"$TMP/hosts"
# Both directions of each host's link: the bridge side's veth sends into
# the host, the host's eth0 sends out of it.
TBF=(tbf rate "$RATE" burst 256kb latency 50ms)
for i in 1 2; do
	tc qdisc add dev "dtv$$_$i" root "${TBF[@]}" || skip "tc tbf is not available"
	ip netns exec "dth$$_$i" tc qdisc add dev eth0 root "${TBF[@]}"
done

# The link rate in bytes per second (tc's units: kbit, mbit, gbit).
rate_bytes() {
	awk -v r="$RATE" 'BEGIN {
		n = r + 0; u = tolower(r); sub(/^[0-9.]+/, "", u)
		m = u == "kbit" ? 1e3 : u == "mbit" ? 1e6 : u == "gbit" ? 1e9 : 1
		printf "%.0f", n * m / 8 }'
}

if [ "${BENCH:-train}" = coll ] && [ "${PER_HOST:-1}" -gt 1 ]; then
	L=$PER_HOST
	n=$((2 * L))
	read -r -a HS <<<"${HIERS:-off on}"
	printf '%s:%s slots=%s\n%s:%s slots=%s\n' "${HOSTS[0]}" "$SSH_PORT" "$L" \
		"${HOSTS[1]}" "$SSH_PORT" "$L" >"$TMP/hosts"
	Bps=$(rate_bytes)
	printf '%-5s %-6s %5s %10s %12s %10s %9s %9s\n' hier rate ranks bytes \
		time_us busbw_GB/s busbw/rate link_util
	for hier in "${HS[@]}"; do
		"$DTRAIN" launch -n "$n" -s 0 -H "$TMP/hosts" --env DT_TEST_TAG="$TAG" \
			--env DTRAIN_COLL_HIER="$hier" -- "$B/bench/coll_bench" \
			--min-bytes "${MIN_BYTES:-1048576}" --max-bytes "${MAX_BYTES:-67108864}" \
			--iters "${ITERS:-10}" --json >"$TMP/out" 2>&1 ||
			{ echo "the $hier allreduce failed:"; tail -5 "$TMP/out"; continue; }
		sed -n 's/^\[worker 0\] //p' "$TMP/out" | grep '^{' | while read -r line; do
			bytes=$(echo "$line" | sed 's/.*"bytes":\([0-9]*\).*/\1/')
			us=$(echo "$line" | sed 's/.*"time_us":\([0-9.]*\).*/\1/')
			bus=$(echo "$line" | sed 's/.*"busbw_gbps":\([0-9.]*\).*/\1/')
			# Per call and link direction: the flat ring crosses
			# between hosts once each way (2(n-1)/n of the data);
			# the hierarchy's phase 2 carries 2(H-1)/H of it (H=2).
			read -r frac util < <(awk -v b="$bytes" -v t="$us" -v g="$bus" \
				-v r="$Bps" -v n="$n" -v h="$hier" 'BEGIN {
				w = h == "off" ? 2 * (n - 1) / n * b : b
				printf "%.3f %.3f", g * 1e9 / r, w / (r * t / 1e6) }')
			printf '%-5s %-6s %5s %10s %12s %10s %9s %9s\n' "$hier" "$RATE" \
				"$n" "$bytes" "$us" "$bus" "$frac" "$util"
			echo "$line" | sed "s/^{/{\"bench\":\"slow_link_coll_hier\",\"hier\":\"$hier\",\"rate\":\"$RATE\",\"busbw_over_rate\":$frac,\"link_util\":$util,/"
		done
	done
	exit 0
fi

if [ "${BENCH:-train}" = coll ]; then
	printf '%-11s %-6s %10s %12s %12s\n' compression rate bytes time_us busbw_GB/s
	for comp in "${COMPS[@]}"; do
		"$DTRAIN" launch -n 2 -s 0 -H "$TMP/hosts" --env DT_TEST_TAG="$TAG" -- \
			"$B/bench/coll_bench" --compression "$comp" --min-bytes 1048576 \
			--max-bytes 16777216 --json >"$TMP/out" 2>&1 ||
			{ echo "the $comp allreduce failed:"; tail -5 "$TMP/out"; continue; }
		sed -n 's/^\[worker 0\] //p' "$TMP/out" | grep '^{' | while read -r line; do
			printf '%-11s %-6s %10s %12s %12s\n' "$comp" "$RATE" \
				"$(echo "$line" | sed 's/.*"bytes":\([0-9]*\).*/\1/')" \
				"$(echo "$line" | sed 's/.*"time_us":\([0-9.]*\).*/\1/')" \
				"$(echo "$line" | sed 's/.*"busbw_gbps":\([0-9.]*\).*/\1/')"
			echo "$line" | sed "s/^{/{\"bench\":\"slow_link_coll\",\"rate\":\"$RATE\",/"
		done
	done
	exit 0
fi
# dir_bytes: the bytes each direction of each host's link has carried
# (host 1 in, host 1 out, host 2 in, host 2 out)
dir_bytes() {
	local i
	for i in 1 2; do
		awk -v d="dtv$$_$i:" '$1 == d { printf "%s %s ", $10, $2 }' /proc/net/dev
	done
}
# compute_sps MODEL: samples/s of a worker that trains alone (kvstore
# local, no network), two at once as the job's two workers run: the
# processors' bound
compute_sps() {
	local k
	for k in 1 2; do
		"$B/examples/mnist" --model "$1" --kvstore local --epochs 1 \
			--limit $((LIMIT / 2)) --disp-batches 8 --data "$DATA" >"$TMP/alone$k" 2>&1 &
	done
	wait
	cat "$TMP/alone1" "$TMP/alone2" | grep -o 'Speed: [0-9.]*' |
		awk '{ s += $2; n++ } END { if (n) printf "%.0f", s / n; else print 0 }'
}
LIMIT=${LIMIT:-60000}
read -r -a MODES <<<"${MODES:-dist_sync horovod}"
Bps=$(rate_bytes)
printf '%-6s %-9s %-10s %-5s %6s %9s %9s %9s %6s %12s %6s %8s\n' model kvstore \
	compression pull rate samples/s compute/s link/s of_bound bytes/sample util accuracy
for model in "${MODELS[@]}"; do
alone=$(compute_sps "$model")
for mode in "${MODES[@]}"; do
for comp in "${COMPS[@]}"; do
for pull in "${PULLS[@]}"; do
	s=2
	[ "$mode" = horovod ] && s=0
	[ "$mode" = horovod ] && [ "$pull" != fp32 ] && continue
	read -r -a before <<<"$(dir_bytes)"
	start=$(now_ms)
	tl=()
	[ -n "${TIMELINE:-}" ] && tl=(--timeline "$TIMELINE.$model.$mode.json")
	"$DTRAIN" launch -n 2 -s $s -H "$TMP/hosts" --env DT_TEST_TAG="$TAG" "${tl[@]}" -- \
		"$B/examples/mnist" --model "$model" --kvstore "$mode" \
		--epochs 1 --limit "$LIMIT" --disp-batches 8 --data "$DATA" \
		--gradient-compression "$comp" --pull-precision "$pull" \
		>"$TMP/out" 2>&1 || { echo "the $model $mode $comp job failed:"; tail -5 "$TMP/out"; continue; }
	ms=$(($(now_ms) - start))
	read -r -a after <<<"$(dir_bytes)"
	sps=$(grep '^\[worker 0\]' "$TMP/out" | grep -o 'Speed: [0-9.]*' |
		awk '{ s += $2; n++ } END { if (n) printf "%.0f", s / n; else print 0 }')
	acc=$(grep -m1 -o 'Validation-accuracy=[0-9.]*' "$TMP/out" | cut -d= -f2)
	# The busiest direction of a host's link, in bytes per sample a worker
	# trains (each of the 2 workers trains LIMIT/2 samples, in step); the
	# link's bound on a worker's samples/s is the rate over that, and
	# the job's bound the lesser of it and the processors' (compute/s).
	read -r most per link bound frac util < <(awk -v b="${before[*]}" -v a="${after[*]}" \
		-v n=$((LIMIT / 2)) -v r="$Bps" -v c="$alone" -v x="$sps" 'BEGIN {
		split(b, B); split(a, A); m = 0
		for (i = 1; i <= 4; i++) if (A[i] - B[i] > m) m = A[i] - B[i]
		per = m / n; link = per > 0 ? r / per : 1e12
		bound = link < c ? link : c
		printf "%d %.0f %.0f %.0f %.3f %.3f", m, per, link, bound,
			(bound > 0 ? x / bound : 0), x * per / r }')
	printf '%-6s %-9s %-10s %-5s %6s %9s %9s %9s %6s %12s %6s %8s\n' "$model" "$mode" "$comp" \
		"$pull" "$RATE" "$sps" "$alone" "$link" "$frac" "$per" "$util" "$acc"
	printf '{"bench":"slow_link","model":"%s","kvstore":"%s","compression":"%s","pull":"%s","rate":"%s","samples_per_s_worker0":%s,"compute_only_samples_per_s":%s,"link_bound_samples_per_s":%s,"bound":%s,"of_bound":%s,"busiest_link_bytes":%s,"bytes_per_sample":%s,"link_util":%s,"seconds":%s,"accuracy":%s}\n' \
		"$model" "$mode" "$comp" "$pull" "$RATE" "$sps" "$alone" "$link" "$bound" "$frac" "$most" "$per" "$util" \
		"$(awk -v m="$ms" 'BEGIN { printf "%.2f", m / 1000 }')" "${acc:-null}"
done
done
done
done
