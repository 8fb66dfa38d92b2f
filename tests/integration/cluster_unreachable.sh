#!/usr/bin/env bash
# cluster_unreachable.sh - a node whose scheduler is not there fails with a
# clear error after DT_CONNECT_TIMEOUT, never a silent hang: a worker
# (hello_cluster) and a `dtrain server`, pointed at a closed port with
# DT_CONNECT_TIMEOUT=2, exit non-zero within ~5 s naming the address.
. "$(dirname "$0")/cluster_lib.bash"

port=$(free_port) # nobody listens there
job_env "$port" 1 1
export DT_CONNECT_TIMEOUT=2

check_unreachable() {
	local name=$1
	shift
	local t0 t1 ms
	t0=$(date +%s%N)
	spawn "$name" "$@"
	expect_exit "$SPAWNED" 10 nonzero "$name"
	t1=$(date +%s%N)
	ms=$(((t1 - t0) / 1000000))
	log "$name: exit $EXIT_STATUS after $ms ms"
	[ "$ms" -ge 1500 ] || fail "$name gave up after $ms ms, before the 2 s timeout"
	# Far below the 60 s default, with room for a loaded machine.
	[ "$ms" -le $((20000 * DT_TEST_TIME_SCALE)) ] || fail "$name took $ms ms to give up (DT_CONNECT_TIMEOUT=2)"
	assert_grep "$T_DIR/$name.log" "127\.0\.0\.1:$port" "$name names the address"
	assert_grep "$T_DIR/$name.log" "scheduler" "$name says what it tried to reach"
	assert_grep "$T_DIR/$name.log" "DT_CONNECT_TIMEOUT" "$name says how to wait longer"
}

DMLC_ROLE=worker check_unreachable worker "$HELLO"
DMLC_ROLE=server check_unreachable server "$DTRAIN" server
# The same from flags instead of variables.
unset DMLC_PS_ROOT_PORT
check_unreachable server_flags "$DTRAIN" server --port "$port"
assert_groups_gone
log "ok"
