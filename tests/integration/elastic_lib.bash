# elastic_lib.bash - what the elastic tests that go through dtrain launch
# share (elastic_shrink.sh, elastic_min.sh, elastic_min_two.sh). The
# caller sources coll_lib.bash first and sets ARGS (examples/elastic's
# options for every run).
EX=$BUILD/examples/elastic
S=${DT_TEST_TIME_SCALE:-1}

# run NAME SCHEDULE LAUNCH-OPTS... -- EXAMPLE-OPTS...: output in $TMP/NAME,
# weights in $TMP/NAME.bin; RC is the launcher's status.
run() {
	local name=$1 sched=$2
	shift 2
	local lopts=()
	while [ "$1" != "--" ]; do
		lopts+=("$1")
		shift
	done
	shift
	DTRAIN_ELASTIC_SCHEDULE=$sched DT_TEST_TAG=$TAG timeout $((120 * S)) \
		"$DTRAIN" launch "${lopts[@]}" -- "$EX" "${ARGS[@]}" \
		--save "$TMP/$name.bin" "$@" >"$TMP/$name" 2>&1
	RC=$?
}

# samples_ok NAME: every epoch's check line says "0 more than once".
samples_ok() {
	grep -q "samples: epoch 0:" "$TMP/$1" &&
		! grep "samples: epoch" "$TMP/$1" | grep -vq " 0 more than once"
}

# replay_of NAME: the last schedule the run logged.
replay_of() {
	grep -o 'DTRAIN_ELASTIC_SCHEDULE="[^"]*"' "$TMP/$1" | tail -n 1 |
		sed 's/^DTRAIN_ELASTIC_SCHEDULE="//; s/"$//'
}
