#!/usr/bin/env bash
# cluster_bad_env.sh - missing or malformed settings end a node at once
# with a non-zero status and a message naming the variable (or flag), for
# `dtrain server`, `dtrain scheduler` and a program started with a DMLC_ROLE
# (hello_cluster); an unknown flag is a usage error, status 2.
. "$(dirname "$0")/cluster_lib.bash"

port=$(free_port) # never listened on: no case may get that far

# run_bad NAME EXPECT_STATUS PATTERN CMD...: CMD exits with EXPECT_STATUS
# ("nonzero" for any failure) within 10 s and its output names PATTERN.
run_bad() {
	local name=$1 want=$2 pattern=$3
	shift 3
	spawn "$name" "$@"
	expect_exit "$SPAWNED" 10 "$want" "$name"
	assert_grep "$T_DIR/$name.log" "$pattern" "$name"
	log "$name: status $EXIT_STATUS, names $pattern"
}

for prog in server hello; do
	if [ $prog = server ]; then cmd=("$DTRAIN" server); else cmd=("$HELLO"); fi

	job_env "$port" 1 1
	export DMLC_ROLE=server
	unset DMLC_PS_ROOT_URI
	run_bad "$prog.no_uri" nonzero "DMLC_PS_ROOT_URI" "${cmd[@]}"

	job_env "$port" 1 1
	export DMLC_ROLE=server
	unset DMLC_PS_ROOT_PORT
	run_bad "$prog.no_port" nonzero "DMLC_PS_ROOT_PORT" "${cmd[@]}"

	job_env "$port" 1 1
	export DMLC_ROLE=server
	unset DMLC_NUM_SERVER
	run_bad "$prog.no_num_server" nonzero "DMLC_NUM_SERVER" "${cmd[@]}"

	for bad in abc 0 -1 1.5; do
		job_env "$port" 1 "$bad"
		export DMLC_ROLE=server
		run_bad "$prog.num_worker_$bad" nonzero "DMLC_NUM_WORKER.*'?$bad" "${cmd[@]}"
	done

	for bad in abc 70000; do
		job_env "$bad" 1 1
		export DMLC_ROLE=server
		run_bad "$prog.port_$bad" nonzero "DMLC_PS_ROOT_PORT.*$bad" "${cmd[@]}"
	done

	job_env 0 1 1
	export DMLC_ROLE=server
	run_bad "$prog.port_0" nonzero "DMLC_PS_ROOT_PORT=0: a server needs the scheduler's port" "${cmd[@]}"

	# Authentication: no secret, a short one, a file others may read.
	job_env "$port" 1 1
	export DMLC_ROLE=server
	(unset DTRAIN_SECRET; run_bad "$prog.no_secret" nonzero "no secret to authenticate this node: set DTRAIN_SECRET" "${cmd[@]}") || fail "$prog.no_secret"
	DTRAIN_SECRET=short run_bad "$prog.short_secret" nonzero "DTRAIN_SECRET is 5 bytes long; it must have at least 16" "${cmd[@]}"
	printf '%s\n' "$DTRAIN_SECRET" >"$T_DIR/secret"
	chmod 644 "$T_DIR/secret"
	(unset DTRAIN_SECRET; DTRAIN_SECRET_FILE=$T_DIR/secret run_bad "$prog.secret_file_644" nonzero "may be read by others \(mode 0644\); chmod 600" "${cmd[@]}") || fail "$prog.secret_file_644"
	DTRAIN_AUTH=maybe run_bad "$prog.auth_maybe" nonzero "DTRAIN_AUTH=maybe" "${cmd[@]}"
	DTRAIN_ENCRYPT=yes run_bad "$prog.encrypt_yes" nonzero "DTRAIN_ENCRYPT" "${cmd[@]}"

	job_env "$port" 1 1
	export DMLC_ROLE=server PS_VERBOSE=5
	run_bad "$prog.verbose_5" nonzero "PS_VERBOSE.*5" "${cmd[@]}"
	unset PS_VERBOSE
done

# A worker's program with a bad role or missing address.
job_env "$port" 1 1
export DMLC_ROLE=boss
run_bad hello.role_boss nonzero "DMLC_ROLE.*boss" "$HELLO"
job_env "$port" 1 1
export DMLC_ROLE=worker
unset DMLC_PS_ROOT_URI
run_bad hello.worker_no_uri nonzero "DMLC_PS_ROOT_URI" "$HELLO"
job_env "$port" 1 1
export DMLC_ROLE=worker DT_CONNECT_TIMEOUT=soon
run_bad hello.worker_timeout nonzero "DT_CONNECT_TIMEOUT.*soon" "$HELLO"
unset DT_CONNECT_TIMEOUT

# The scheduler too.
job_env "$port" 1 1
unset DMLC_NUM_WORKER
run_bad scheduler.no_num_worker nonzero "DMLC_NUM_WORKER" "$DTRAIN" scheduler
job_env "$port" 1 1
run_bad scheduler.port_flag nonzero "DMLC_PS_ROOT_PORT.*abc" "$DTRAIN" scheduler --port abc

# A scheduler told DMLC_PS_ROOT_PORT=0 listens on a port of the system's
# choosing and says which (it used to wait 300 s in silence).
job_env 0 1 1
spawn scheduler.port_0 "$DTRAIN" scheduler
wait_for_line "$T_DIR/scheduler.port_0.log" "DMLC_PS_ROOT_PORT=0: listening on port [0-9]+; start the other nodes with DMLC_PS_ROOT_PORT=[0-9]+" 20 ||
	fail "scheduler.port_0: the chosen port was not printed"
kill -TERM -- "-$SPAWNED" 2>/dev/null
wait_exit "$SPAWNED" 30 || fail "scheduler.port_0 did not stop"
log "scheduler.port_0: says its port"

# Flags: unknown, missing argument, stray argument -> usage error, 2.
job_env "$port" 1 1
run_bad server.bogus 2 "bogus" "$DTRAIN" server --bogus
run_bad server.port_no_arg 2 "port" "$DTRAIN" server --port
run_bad server.stray 2 "stray" "$DTRAIN" server stray
run_bad scheduler.bogus 2 "bogus" "$DTRAIN" scheduler --bogus
run_bad dtrain.unknown_cmd 2 "frobnicate" "$DTRAIN" frobnicate
assert_groups_gone
log "ok"
