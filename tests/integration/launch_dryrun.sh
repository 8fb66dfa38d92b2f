#!/bin/bash
# launch_dryrun.sh - `dtrain launch --dry-run` prints the plan and starts
# nothing: ssh host cycling as seed 001 describes it, the ssh, mpirun, srun
# and rsync command lines.
. "$(dirname "$0")/launch_lib.bash"
cd "$TMP" || exit 1
# The plan shows variables passed on to other hosts: start from none.
for v in $(compgen -e); do
	case $v in PS_* | MXNET_* | DT_* | DMLC_* | OMP_* | OPENBLAS_*) unset "$v" ;; esac
done
unset DTRAIN_SECRET DTRAIN_SECRET_FILE DTRAIN_AUTH DTRAIN_SSH_CONNECT_TIMEOUT \
	DTRAIN_ENCRYPT DTRAIN_DATA_CACHE
export DTRAIN_JOB_ID=testjob # a fixed job id, to compare the lines
printf 'h1\nh2\n# a comment\n\nh3   # trailing comment\nh4\nh5\n' >hosts5
printf 'h1\nh2\nh3\n' >hosts3
printf 'h1:2222\nh2\n' >hosts2

# plan ARGS...: the plan's lines "<label> on <host>", one per process.
plan() {
	timeout 20 "$DTRAIN" launch --dry-run "$@" >"$TMP/plan" 2>"$TMP/err" ||
		fail "dry run $*: status $?: $(cat "$TMP/err")"
	sed 's/: .*//' "$TMP/plan" | paste -sd, -
}

# Seed 001: 5 hosts, -n 3 (so 3 servers): servers on the first three hosts,
# workers on the fourth, the fifth and the first.
got=$(plan -n 3 -H hosts5 --launcher ssh -- touch ran)
check "5 hosts, -n 3: $got" test "$got" = \
	"scheduler on localhost,server 0 on h1,server 1 on h2,server 2 on h3,worker 0 on h4,worker 1 on h5,worker 2 on h1"
# As many hosts as workers: a server and a worker on each host.
got=$(plan -n 3 -H hosts3 -- touch ran)
check "3 hosts, -n 3 (ssh is the default with -H): $got" test "$got" = \
	"scheduler on localhost,server 0 on h1,server 1 on h2,server 2 on h3,worker 0 on h1,worker 1 on h2,worker 2 on h3"
got=$(plan -n 4 -s 1 -H hosts3 -- touch ran)
check "3 hosts, -n 4 -s 1: $got" test "$got" = \
	"scheduler on localhost,server 0 on h1,worker 0 on h2,worker 1 on h2,worker 2 on h3,worker 3 on h1"
got=$(plan -n 2 -s 0 -H hosts5 -- touch ran)
check "-s 0: no servers: $got" test "$got" = \
	"scheduler on localhost,worker 0 on h1,worker 1 on h2"
check "nothing was started" test ! -e ran

# The ssh command line, with quoting and the ssh port from host:port.
plan -n 2 -s 1 -H hosts2 --env "MSG=it's" -- python train.py --kv "dist sync" >/dev/null
check "ssh: port from host:port" grep -qF \
	"server 0 on h1: ssh -o StrictHostKeyChecking=no -o BatchMode=yes -o ConnectTimeout=10 -o ServerAliveInterval=15 -tt -p 2222 h1 'cd $TMP && exec env DMLC_ROLE=server DMLC_SERVER_ID=0 DMLC_PS_ROOT_URI=h1 DMLC_PS_ROOT_PORT=PORT DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=2 DTRAIN_LAUNCHED=1 '\\''MSG=it'\\''\\'\\'''\\''s'\\'' DTRAIN_JOB_ID=testjob DTRAIN_NODE_TOKEN=... DTRAIN_SECRET_FILE=$TMP/.dtrain-" \
	"$TMP/plan"
check "ssh: worker 1 on h1 with its rank and quoted command" grep -qF \
	"worker 1 on h1: ssh -o StrictHostKeyChecking=no -o BatchMode=yes -o ConnectTimeout=10 -o ServerAliveInterval=15 -tt -p 2222 h1 'cd $TMP && exec env DMLC_ROLE=worker DMLC_WORKER_ID=1 " \
	"$TMP/plan"
check "ssh: command words quoted for the remote shell" grep -qF \
	"python train.py --kv '\\''dist sync'\\'''" "$TMP/plan"

# Variables passed on to other hosts: PS_*, MXNET_*, DT_*, DMLC_INTERFACE,
# but not DMLC_NODE_HOST (the launcher's own address).
PS_VERBOSE=1 MXNET_KVSTORE_BIGARRAY_BOUND=100 DMLC_INTERFACE=eth9 \
	DMLC_NODE_HOST=10.9.9.9 plan -n 1 -s 0 -H hosts3 -- true >/dev/null
check "ssh: forwarded variables" grep -qF \
	"exec env DMLC_ROLE=worker DMLC_WORKER_ID=0 " "$TMP/plan"
for v in PS_VERBOSE=1 MXNET_KVSTORE_BIGARRAY_BOUND=100 DMLC_INTERFACE=eth9; do
	check "ssh: passes $v" grep -qE "^worker 0 on h1: .* $v " "$TMP/plan"
done
check "ssh: scheduler address from DMLC_NODE_HOST" \
	grep -qE "^worker 0 on h1: .* DMLC_PS_ROOT_URI=10.9.9.9 " "$TMP/plan"
check "ssh: DMLC_NODE_HOST itself is not passed on" \
	test -z "$(grep '^worker.*DMLC_NODE_HOST' "$TMP/plan")"

# rsync before the job, once per distinct host.
printf 'h1\nh2\nh1\n' >hosts_dup
got=$(plan -n 2 -s 0 -H hosts_dup --sync-dst-dir /tmp/job -- true)
check "sync: one rsync per host, then the job: $got" test "$got" = \
	"sync h1 on h1,sync h2 on h2,scheduler on localhost,worker 0 on h1,worker 1 on h2"
check "sync: rsync command" grep -qF \
	"sync h2 on h2: rsync -az --exclude=.git/ -e 'ssh -o StrictHostKeyChecking=no -o BatchMode=yes -o ConnectTimeout=10' '--rsync-path=if [ ! -e /tmp/job ]; then mkdir -p /tmp/job && : >/tmp/job/.dtrain-new-testjob; fi && rsync' $TMP/ h2:/tmp/job/" \
	"$TMP/plan"
check "sync: workers run in the synced directory" \
	grep -qF "worker 0 on h1: ssh -o StrictHostKeyChecking=no -o BatchMode=yes -o ConnectTimeout=10 -o ServerAliveInterval=15 -tt h1 'cd /tmp/job && exec env" "$TMP/plan"
plan -n 2 -s 0 -H hosts2 --sync-dst-dir /tmp/job --sync-exclude 'build*/' --sync-exclude data.bin -- ./train >/dev/null
check "sync: --sync-exclude patterns go to rsync, after .git/" grep -qF \
	"rsync -az --exclude=.git/ '--exclude=build*/' --exclude=data.bin -e" "$TMP/plan"

# mpirun: one per role, every variable with -x, no DMLC_*_ID.
got=$(plan -n 3 -s 2 --launcher mpi -H hosts5 -- python train.py)
check "mpi: scheduler, servers, workers: $got" test "$got" = \
	"scheduler on localhost,servers on hosts5,workers on hosts5"
check "mpi: workers command" grep -qF \
	"workers on hosts5: mpirun --allow-run-as-root --oversubscribe --tag-output --bind-to none -np 3 --host h3:1,h4:1,h5:1 --mca plm_rsh_args '-o ConnectTimeout=10' --mca odls_base_sigkill_timeout 0 -x DMLC_ROLE=worker -x DMLC_PS_ROOT_URI=h1 -x DMLC_PS_ROOT_PORT=PORT -x DMLC_NUM_SERVER=2 -x DMLC_NUM_WORKER=3 -x DTRAIN_LAUNCHED=1 -x DTRAIN_JOB_ID=testjob -x DTRAIN_SECRET $DTRAIN rank-exec -- python train.py" \
	"$TMP/plan"
check "mpi: servers command" grep -qF \
	"servers on hosts5: mpirun --allow-run-as-root --oversubscribe --tag-output --bind-to none -np 2 --host h1:1,h2:1 --mca plm_rsh_args '-o ConnectTimeout=10' --mca odls_base_sigkill_timeout 0 -x DMLC_ROLE=server -x DMLC_PS_ROOT_URI=h1 -x DMLC_PS_ROOT_PORT=PORT -x DMLC_NUM_SERVER=2 -x DMLC_NUM_WORKER=3 -x DTRAIN_LAUNCHED=1 -x DTRAIN_JOB_ID=testjob -x DTRAIN_SECRET $DTRAIN rank-exec -- $DTRAIN server" \
	"$TMP/plan"
check "mpi: no rank variables" test -z "$(grep -E 'DMLC_(WORKER|SERVER)_ID' "$TMP/plan")"
got=$(plan -n 2 -s 0 --launcher mpi -- python train.py)
check "mpi -s 0: no servers' mpirun: $got" test "$got" = \
	"scheduler on localhost,workers on localhost"
check "mpi without -H: scheduler on 127.0.0.1, no --host" grep -qF \
	"workers on localhost: mpirun --allow-run-as-root --oversubscribe --tag-output --bind-to none -np 2 --mca odls_base_sigkill_timeout 0 -x DMLC_ROLE=worker -x DMLC_PS_ROOT_URI=127.0.0.1 " \
	"$TMP/plan"

# srun: one per role, variables through the environment.
got=$(plan -n 4 -s 1 --launcher slurm -- python train.py)
check "slurm: scheduler, servers, workers: $got" test "$got" = \
	"scheduler on localhost,servers on slurm,workers on slurm"
check "slurm: workers command" grep -qE \
	"^workers on slurm: env DMLC_ROLE=worker .*DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=4 .* srun --ntasks=4 --kill-on-bad-exit=1 --overlap --label .*/dtrain rank-exec -- python train.py$" \
	"$TMP/plan"

# Local: the scheduler gets the socket, each process its role and rank.
plan -n 2 -s 1 -- ./train >/dev/null
check "local: scheduler command" grep -qE \
	"^scheduler on localhost: env DMLC_ROLE=scheduler DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=PORT DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=2 DTRAIN_LAUNCHED=1 DTRAIN_JOB_ID=testjob DT_LISTEN_FD=FD .*/dtrain scheduler$" \
	"$TMP/plan"
check "local: worker 1 command" grep -qF \
	"worker 1 on localhost: env DMLC_ROLE=worker DMLC_WORKER_ID=1 DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=PORT DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=2 DTRAIN_LAUNCHED=1 DTRAIN_JOB_ID=testjob DTRAIN_NODE_TOKEN=... ./train" \
	"$TMP/plan"
# Each process's place token: in its variables, its value in no plan.
check "local: a place token for each worker and server, shown as ..." test \
	"$(grep -c ' DTRAIN_NODE_TOKEN=\.\.\. ' "$TMP/plan")" = 3
check "local: no place token for the scheduler" test \
	-z "$(grep '^scheduler on .*DTRAIN_NODE_TOKEN' "$TMP/plan")"
# The job's secret: in no plan line (nor so on any command line), but
# by name to mpirun, and as a file of its own to ssh hosts.
check "the secret's value is in no plan" test -z "$(grep -h 'DTRAIN_SECRET=' "$TMP"/plan* 2>/dev/null)"
check "no place token's value is in a plan" test -z "$(grep -h 'DTRAIN_NODE_TOKEN=[0-9a-f]' "$TMP"/plan* 2>/dev/null)"
plan -n 2 -s 1 -H hosts2 -- ./train >/dev/null
# In a directory of a random name (not the job's id), one per host, which
# the remote supervisor removes when the connection drops.
check "ssh: the secret in a file on each host" grep -qE \
	"^server 0 on h1: .* DTRAIN_SECRET_FILE=$TMP/\.dtrain-[0-9a-f]{32}-0/secret sh -c '\\\\''k=$TMP/\.dtrain-[0-9a-f]{32}-0; p=; stop\(\) " "$TMP/plan"
check "ssh: ...named by no job id" test -z "$(grep -F "dtrain-testjob" "$TMP/plan")"
check "ssh: the command under the remote supervisor" grep -qF \
	"dtrain-remote ./train'" "$TMP/plan"
got=$(plan -n 1 -s 0 --no-scheduler -- ./train)
check "--no-scheduler: $got" test "$got" = "worker 0 on localhost"

finish
