# scale_lib.bash - what the simulator's tests share (scale_sim.sh,
# scale_shared_loop.sh): running bench/scale_sim.sh and reading its JSON
# lines. The caller sets SERVERS, PHASE_LIMIT_S and RUN_LIMIT_S.
SIM="$DTRAIN_SOURCE/bench/scale_sim.sh"
[ -x "$DTRAIN_BUILD/bench/scale_sim" ] || fail "no $DTRAIN_BUILD/bench/scale_sim (build it)"

# field JSONL PHASE KEY: the value of KEY in the line of PHASE.
field() {
	/usr/bin/python3 -c 'import json, sys
for ln in open(sys.argv[1]):
    o = json.loads(ln)
    if o.get("phase") == sys.argv[2]:
        v = o.get(sys.argv[3])
        print(json.dumps(v) if isinstance(v, (list, dict)) else v)
        break' "$@"
}

# run_sim NAME N PROCS [VAR=VALUE ...]: the simulator's bench on N nodes
# (SERVERS of them servers) in PROCS processes, its output in
# $T_DIR/NAME/; sets RUN_MS, RUN_STATUS and JSONL.
run_sim() {
	local name=$1 nodes=$2 procs=$3 t0
	shift 3
	mkdir -p "$T_DIR/$name"
	t_now
	t0=$T_NOW
	env "$@" OUT="$T_DIR/$name" PROCS=$procs BARRIERS=2 \
		TIMEOUT=$PHASE_LIMIT_S \
		setsid timeout -k 5 "$RUN_LIMIT_S" \
		"$SIM" "$DTRAIN_BUILD" "$((nodes - SERVERS))+$SERVERS" \
		>"$T_DIR/$name.log" 2>&1 &
	local pid=$!
	T_GROUPS+=("$pid")
	wait_exit "$pid" "$((RUN_LIMIT_S / DT_TEST_TIME_SCALE + 10))" ||
		fail "$name: the simulator did not end"
	t_now
	RUN_MS=$(((T_NOW - t0) / 1000000))
	RUN_STATUS=$EXIT_STATUS
	JSONL="$T_DIR/$name/scale_sim.jsonl"
	[ -s "$JSONL" ] || fail "$name: no $JSONL"
}

# assert_pids_gone JSONL: every process the run started has ended.
assert_pids_gone() {
	local p
	for p in $(field "$1" all pids | tr -d '[],'); do
		[ -d "/proc/$p" ] || continue
		grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null ||
			fail "process $p of the simulation is still running"
	done
}
