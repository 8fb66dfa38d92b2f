#!/bin/bash
# feedback.sh - what a newcomer is told: dtrain plot draws two logs whose
# runs share a label as two runs (the second suffixed, with a warning);
# mnist's default run label names its compression; its start-up banner
# states the kvstore, compression, pull precision and transport; a horovod
# job started with servers is warned about; a scheduler whose port is
# taken says so and how to avoid it.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/cluster_lib.bash"
MNIST=$DTRAIN_BUILD/examples/mnist
DATA=${DTRAIN_DATA:-/usr/share/datasets/fashion-mnist}

# Two logs, one label: two runs.
for f in a b; do
	for e in 0 1; do
		printf '{"run":"dist_sync 2w","epoch":%d,"batch":-1,"samples_per_sec":1,"metric":"accuracy","train":0.%d,"val":null,"loss":null,"val_loss":null,"comm_s":0,"wall_s":%d}\n' \
			"$e" "$((e + 5))" "$e"
	done >"$T_DIR/$f.jsonl"
done
"$DTRAIN" plot "$T_DIR/a.jsonl" "$T_DIR/b.jsonl" -o "$T_DIR/c.svg" 2>"$T_DIR/err" ||
	fail "dtrain plot failed: $(cat "$T_DIR/err")"
grep -q "both have a run labelled 'dist_sync 2w'; the one in $T_DIR/b.jsonl is drawn as 'dist_sync 2w (2)'" "$T_DIR/err" ||
	fail "no collision warning: $(cat "$T_DIR/err")"
[ "$(grep -c 'warning' "$T_DIR/err")" = 1 ] || fail "the warning is not said once: $(cat "$T_DIR/err")"
grep -q 'dist_sync 2w (2)' "$T_DIR/c.svg" || fail "the SVG has no run 'dist_sync 2w (2)'"
log "plot: a shared label becomes two runs, with one warning"

# A taken port.
port=$(free_port)
spawn holder python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()
print("ready", flush=True); time.sleep(60)' "$port"
holder=$SPAWNED
wait_for_line "$T_DIR/holder.log" ready 20 || fail "the port holder did not start"
timeout $((30 * T_SCALE)) "$DTRAIN" scheduler --uri 127.0.0.1 --port "$port" --num-servers 0 \
	--num-workers 1 >/dev/null 2>"$T_DIR/err" && fail "the scheduler started on a taken port"
grep -q "port $port is in use (use port 0 to let the scheduler choose)" "$T_DIR/err" ||
	fail "no 'port $port is in use': $(cat "$T_DIR/err")"
kill -- "-$holder" 2>/dev/null
log "a taken port is named, with the remedy"

if [ ! -d "$DATA" ]; then
	log "mnist cases skipped: Fashion-MNIST not installed at $DATA"
	exit 0
fi
timeout $((120 * T_SCALE)) "$DTRAIN" launch -n 1 -s 1 -- "$MNIST" --kvstore horovod --epochs 1 \
	--limit 128 >"$T_DIR/h.log" 2>&1 || fail "the horovod job failed: $(tail "$T_DIR/h.log")"
grep -q 'warning: --kvstore horovod uses no servers, but the job has 1' "$T_DIR/h.log" ||
	fail "no warning about servers in a horovod job: $(head "$T_DIR/h.log")"
timeout $((120 * T_SCALE)) "$DTRAIN" launch -n 1 -s 1 -- "$MNIST" --kvstore dist_sync --epochs 1 \
	--limit 128 --gradient-compression 2bit --pull-precision fp16 \
	--metrics "$T_DIR/m.jsonl" >"$T_DIR/d.log" 2>&1 || fail "the dist_sync job failed: $(tail "$T_DIR/d.log")"
grep -q 'mnist: kvstore dist_sync, gradient compression 2bit, pull precision fp16, transport auto' "$T_DIR/d.log" ||
	fail "no banner with the communication settings: $(head "$T_DIR/d.log")"
grep -q 'warning: --kvstore horovod' "$T_DIR/d.log" && fail "a dist_sync job was warned about horovod"
grep -q '"run":"dist_sync 2bit pull-fp16 1w"' "$T_DIR/m.jsonl" ||
	fail "the default label does not name the compression: $(head -1 "$T_DIR/m.jsonl")"
log "mnist: banner, default label and the horovod warning"
