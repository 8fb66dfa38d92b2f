#!/bin/bash
# help.sh - every `dtrain` command and every example answers --help with a
# synopsis on stdout and exit status 0 (`rank-exec --help` included, which
# once ran `--help` as a command); the scheduler's and the server's help
# name the secret; the examples share the spelling --batch-size and
# sparse_linear still takes its old --batch with a note; a misspelt
# variable is named with the one meant.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/cluster_lib.bash"

commands=(launch scheduler server params checkpoint plot k8s env rank-exec version)
examples=(allreduce hello_cluster linreg mnist sparse_linear)

# help_case NAME CMD...: CMD prints "usage: NAME" first on stdout, exit 0.
help_case() {
	local name=$1 rc
	shift
	timeout $((20 * T_SCALE)) "$@" >"$T_DIR/out" 2>"$T_DIR/err"
	rc=$?
	[ "$rc" = 0 ] || fail "$*: exit $rc, stderr: $(cat "$T_DIR/err")"
	head -1 "$T_DIR/out" | grep -q "^usage: $name" ||
		fail "$*: stdout does not start with 'usage: $name': $(head -3 "$T_DIR/out")"
}

help_case "dtrain <command>" "$DTRAIN" --help
help_case "dtrain <command>" "$DTRAIN" -h
for c in "${commands[@]}"; do
	help_case "dtrain $c" "$DTRAIN" "$c" --help
done
for e in "${examples[@]}"; do
	help_case "$e" "$DTRAIN_BUILD/examples/$e" --help
	grep -q -- '--batch\b[^-]' "$T_DIR/out" &&
		fail "$e --help still names --batch"
done
log "help: dtrain, ${#commands[@]} commands, ${#examples[@]} examples: exit 0 with a synopsis"

for role in scheduler server; do
	"$DTRAIN" "$role" --help | grep -q DTRAIN_SECRET ||
		fail "dtrain $role --help does not name DTRAIN_SECRET"
done
log "scheduler and server help name DTRAIN_SECRET"

# After `--`, --help is the command's: rank-exec runs it.
out=$("$DTRAIN" rank-exec -- sh -c 'echo "$0"' --help) || fail "rank-exec -- sh -c ... --help failed"
[ "$out" = "--help" ] || fail "rank-exec -- sh -c ... --help printed '$out'"
"$DTRAIN" rank-exec >/dev/null 2>&1
[ $? = 2 ] || fail "rank-exec with no command: not exit 2"
log "rank-exec: --help is help, after -- it is the command's"

# The old spelling, with a note.
"$DTRAIN_BUILD/examples/sparse_linear" --batch 8 --help >"$T_DIR/out" 2>"$T_DIR/err" ||
	fail "sparse_linear --batch 8 --help failed"
grep -q -- "--batch is now --batch-size" "$T_DIR/err" ||
	fail "sparse_linear --batch: no note on stderr: $(cat "$T_DIR/err")"
"$DTRAIN_BUILD/examples/sparse_linear" --bogus >/dev/null 2>&1
[ $? = 2 ] || fail "sparse_linear --bogus: not exit 2"
log "sparse_linear: --batch taken with a note, --batch-size documented"

DMLC_NUM_WORKERS=2 DTRAIN_SECRT=abc "$DTRAIN" launch --dry-run -n 1 -s 0 -- true \
	>/dev/null 2>"$T_DIR/err" || fail "launch --dry-run failed: $(cat "$T_DIR/err")"
grep -q "DMLC_NUM_WORKERS is set but dtrain does not read it; did you mean DMLC_NUM_WORKER?" "$T_DIR/err" ||
	fail "no 'did you mean DMLC_NUM_WORKER?': $(cat "$T_DIR/err")"
grep -q "did you mean DTRAIN_SECRET?" "$T_DIR/err" ||
	fail "no 'did you mean DTRAIN_SECRET?': $(cat "$T_DIR/err")"
PS_VERBOSE=1 "$DTRAIN" launch --dry-run -n 1 -s 0 -- true >/dev/null 2>"$T_DIR/err"
grep -q "does not read" "$T_DIR/err" && fail "a known variable was reported: $(cat "$T_DIR/err")"
log "unknown variables named, with the one meant"
