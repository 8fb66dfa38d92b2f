#!/bin/bash
# launch_ssh_hup.sh - nothing of an ssh job outlives it, not even a remote
# program that ignores SIGHUP. A stand-in for ssh (DTRAIN_SSH) behaves as
# sshd does with -tt: the remote command leads a new session on a pseudo-
# terminal, out of the launcher's reach, and when the ssh process ends the
# terminal hangs up (SIGHUP, nothing more). The remote supervisor the
# launcher puts in front of every remote command must then end the
# command's whole group: after Ctrl-C, and after another worker fails.
# (It used to leave two processes per worker, reparented to init.)
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/launch_lib.bash"
command -v python3 >/dev/null || { echo "skipped: no python3 for the pty stand-in"; exit 0; }

cat >"$TMP/fake_ssh" <<'EOS'
#!/usr/bin/env python3
# ssh [-o OPT]... [-tt] [-p PORT] HOST COMMAND, run here as sshd would:
# with -tt, COMMAND leads a new session on a pseudo-terminal, and when this
# process ends the terminal closes: the kernel sends SIGHUP, nothing more.
import os, pty, signal, sys
args, tty = sys.argv[1:], False
while args and args[0].startswith('-'):
    if args[0] in ('-o', '-p'):
        args = args[2:]
    else:
        tty = tty or args[0] == '-tt'
        args = args[1:]
host, cmd = args[0], ' '.join(args[1:])
env = {'PATH': os.environ['PATH'], 'FAKE_HOST': host}
if not tty:
    os.execve('/bin/sh', ['sh', '-c', cmd], env)
pid, fd = pty.fork()
if pid == 0:
    os.execve('/bin/sh', ['sh', '-c', cmd], env)
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, lambda *a: os._exit(255))
while True:
    try:
        b = os.read(fd, 65536)
    except OSError:
        break
    if not b:
        break
    os.write(1, b)
_, st = os.waitpid(pid, 0)
sys.exit(os.WEXITSTATUS(st) if os.WIFEXITED(st) else 128 + os.WTERMSIG(st))
EOS
chmod +x "$TMP/fake_ssh"
export DTRAIN_SSH=$TMP/fake_ssh DMLC_NODE_HOST=127.0.0.1
cd "$TMP" || exit 1
printf 'h1\nh2\n' >hosts

# wait_line FILE PATTERN: poll (10 s at most) for a line.
wait_line() {
	local end=$(($(now_ms) + 10000))
	until grep -q "$2" "$1" 2>/dev/null; do
		[ "$(now_ms)" -lt "$end" ] || return 1
		sleep 0.05
	done
}

# 1. Ctrl-C while both workers (which ignore SIGHUP, and started a child
#    that does too) run.
# shellcheck disable=SC2016
"$DTRAIN" launch -n 2 -s 0 -H hosts --env DT_TEST_TAG="$TAG" -- \
	sh -c 'trap "" HUP; sleep 300 & echo "worker $DMLC_WORKER_ID up"; exec sleep 301' \
	>"$TMP/out1" 2>"$TMP/err1" &
lp=$!
check "Ctrl-C: both workers up" wait_line "$TMP/out1" "worker 1 up"
wait_line "$TMP/out1" "worker 0 up"
t0=$(now_ms)
kill -INT "$lp"
wait "$lp"
rc=$?
check "Ctrl-C: launcher exits 130 (got $rc)" test "$rc" = 130
check "Ctrl-C: nothing left, remote processes ignoring SIGHUP included" wait_gone 5
ms=$(($(now_ms) - t0))
# (about 1.2 s here; 10x that for a loaded machine, still far below the
# 300 s the workers would otherwise live)
check "Ctrl-C: all gone within 12 s (${ms} ms)" test "$ms" -lt $((12000 * DT_TEST_TIME_SCALE))

# 2. A worker fails while the other (ignoring SIGHUP) runs.
# shellcheck disable=SC2016
timeout $((60 * T_SCALE)) "$DTRAIN" launch -n 2 -s 0 -H hosts --env DT_TEST_TAG="$TAG" -- \
	sh -c 'trap "" HUP; sleep 300 & [ "$DMLC_WORKER_ID" = 1 ] && { sleep 0.5; exit 4; }; exec sleep 301' \
	>"$TMP/out2" 2>"$TMP/err2"
rc=$?
check "worker fails: launcher exits 1 (got $rc)" test "$rc" = 1
check "worker fails: worker 1 named" grep -q "job failed: worker 1 exited with status 4" "$TMP/err2"
check "worker fails: nothing left" wait_gone 5

# 3. The launcher killed with -9 (no chance to clean up) while the
#    workers run: the hang-up reaches each remote supervisor, which
#    removes the host's secret directory. (The secret file used to stay.)
secrets() { find "$TMP" -maxdepth 1 -name '.dtrain-*' | grep -q .; }
no_secret() {
	local end=$(($(now_ms) + 10000))
	while secrets; do
		[ "$(now_ms)" -lt "$end" ] || return 1
		sleep 0.05
	done
}
# shellcheck disable=SC2016
"$DTRAIN" launch -n 2 -s 0 -H hosts --env DT_TEST_TAG="$TAG" -- \
	sh -c 'echo "worker $DMLC_WORKER_ID up with $(cat "$DTRAIN_SECRET_FILE" | wc -c) bytes"; exec sleep 301' \
	>"$TMP/out3" 2>"$TMP/err3" &
lp=$!
check "kill -9: both workers up" wait_line "$TMP/out3" "worker 1 up with 65 bytes"
wait_line "$TMP/out3" "worker 0 up with 65 bytes"
check "kill -9: the secret is on the hosts while the job runs" secrets
kill -KILL "$lp"
wait "$lp" 2>/dev/null
check "kill -9: no secret file left" no_secret
check "kill -9: nothing left" wait_gone 5
finish
