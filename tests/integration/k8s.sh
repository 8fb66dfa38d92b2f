#!/usr/bin/env bash
# k8s.sh - `dtrain k8s` and running in Kubernetes pods, without a cluster
# (docs/kubernetes.md):
#   (a) the manifests of both kinds (Jobs + a headless Service, and a
#       Kubeflow MXJob), with and without --restart, parse as YAML and
#       carry the expected objects, env, ports, labels and policies (a
#       schema of the fields used, offline: k8s_check.py); bad usage is
#       refused naming the option;
#   (b) pods on one machine (root: a private mount namespace for
#       /etc/hosts): every pod of each kind a process with exactly the
#       environment its pod gets (k8s_pods.py: the manifest's env, the pod's
#       own loopback IP, JOB_COMPLETION_INDEX or the training operator's
#       DMLC_* and MX_CONFIG), started in a shuffled order with delays, the
#       scheduler Service's name resolvable only once the scheduler's pod
#       runs; linreg and a short mnist end with the results of `dtrain
#       launch`, and every pod (scheduler and servers too) exits 0; an
#       elastic job (--min-workers/--max-workers) takes in a worker pod
#       added while it runs (as after `kubectl patch` of the worker Job's
#       parallelism), every sample trained once an epoch, with the
#       collectives and with 2 servers (dist_sync), whose pods have the
#       elastic variables and exit 0 too.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
set -u
. "$(dirname "$0")/job_lib.bash"
B=${DTRAIN_BUILD:?}
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d)
TAG="k8s-test-$$-$RANDOM"
ours() { tagged_pids "dtrain|linreg|mnist|elastic" "DT_K8S_TEST=$TAG"; } # the pods' processes
trap 'for p in $(ours); do kill -9 "$p"; done 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
python3 -c 'import yaml' 2>/dev/null || fail "python3-yaml is needed (make deps installs it)"

# ---- (a) manifests ----
for kind in job mxjob; do
	for r in 0 2; do
		"$B/dtrain" k8s --kind $kind --name lin --image registry.example/dtrain:1 -n 2 -s 2 --port 9091 \
			--restart $r --cpu 1 --memory worker=2Gi --env PS_VERBOSE=1 \
			-- linreg --kvstore dist_sync >"$tmp/m.yaml" 2>"$tmp/m.err" || fail "dtrain k8s --kind $kind: $(cat "$tmp/m.err")"
		python3 "$HERE/k8s_check.py" $kind 2 2 9091 $r "$tmp/m.yaml" || fail "the $kind manifest"
	done
done
# No servers (horovod): no server Job / Server replica; --secret-from: no Secret.
"$B/dtrain" k8s --name lin --image i -n 3 -s 0 --secret-from team-secret -- mnist --kvstore horovod >"$tmp/h.yaml" ||
	fail "dtrain k8s -s 0"
python3 - "$tmp/h.yaml" <<'EOF' || fail "-s 0 / --secret-from"
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
kinds = sorted((d["kind"], d["metadata"]["name"]) for d in docs)
assert kinds == [("Job", "lin-scheduler"), ("Job", "lin-worker"), ("Service", "lin-scheduler")], kinds
for d in docs:
    if d["kind"] == "Job":
        env = {e["name"]: e.get("value", e.get("valueFrom")) for e in d["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["DTRAIN_SECRET"] == {"secretKeyRef": {"name": "team-secret", "key": "secret"}}, env
        assert env["DMLC_NUM_SERVER"] == "0"
EOF
echo "-s 0: no server Job; --secret-from: the Secret named, none made"
# Two runs make two different secrets.
a=$("$B/dtrain" k8s --name lin --image i -n 1 -- x | grep 'secret: ')
b=$("$B/dtrain" k8s --name lin --image i -n 1 -- x | grep 'secret: ')
[ "$a" != "$b" ] || fail "two manifests share a secret"
# Elastic: the variables in every pod, one new pod per failed worker's
# index (a limit per index: a Job over its backoffLimit would stop the
# survivors), and a failed worker does not fail the job.
"$B/dtrain" k8s --name el --image i -n 2 -s 0 --min-workers 1 --max-workers 4 -- elastic >"$tmp/e.yaml" ||
	fail "dtrain k8s --min-workers"
python3 - "$tmp/e.yaml" <<'EOF' || fail "the elastic manifest"
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
jobs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Job"}
assert sorted(jobs) == ["el-scheduler", "el-worker"], sorted(jobs)
for name, d in jobs.items():
    env = {e["name"]: e.get("value") for e in d["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (env["DTRAIN_ELASTIC"], env["DTRAIN_ELASTIC_MIN"], env["DTRAIN_ELASTIC_MAX"]) == ("1", "1", "4"), env
    rules = d["spec"]["podFailurePolicy"]["rules"]
    if name == "el-worker":
        assert d["spec"]["backoffLimitPerIndex"] == 1 and "backoffLimit" not in d["spec"], d["spec"]
        assert [r["action"] for r in rules] == ["Ignore"], rules
    else:
        assert d["spec"]["backoffLimit"] == 0 and [r["action"] for r in rules] == ["Ignore", "FailJob"], d["spec"]
EOF
echo "elastic: DTRAIN_ELASTIC in every pod, a new pod per lost worker's index, no FailJob for workers"
# Elastic with servers: the servers' and the scheduler's Jobs as without
# --restart, the workers' as above; the variables (the timeout too) in
# every pod.
"$B/dtrain" k8s --name lin --image registry.example/dtrain:1 -n 2 -s 2 --port 9091 --min-workers 2 \
	--max-workers 3 --elastic-timeout 120 --cpu 1 --memory worker=2Gi --env PS_VERBOSE=1 \
	-- linreg --kvstore dist_sync >"$tmp/es.yaml" 2>"$tmp/es.err" || fail "dtrain k8s -s 2 --min-workers: $(cat "$tmp/es.err")"
python3 "$HERE/k8s_check.py" job 2 2 9091 0 "$tmp/es.yaml" 2 3 120 || fail "the elastic manifest with servers"
bad() { # expected-message args...
	local want=$1
	shift
	"$B/dtrain" k8s "$@" >"$tmp/bad.out" 2>"$tmp/bad.err"
	local rc=$?
	[ $rc = 2 ] || fail "dtrain k8s $*: exit $rc, expected 2"
	grep -q -- "$want" "$tmp/bad.err" || fail "dtrain k8s $*: '$(head -1 "$tmp/bad.err")', expected '$want'"
	[ ! -s "$tmp/bad.out" ] || fail "dtrain k8s $*: printed a manifest"
}
bad "--name 'Lin_1': at most 40 lowercase" --name Lin_1 --image i -n 1 -- x
bad "--name, --image and -n are needed" --name lin -n 1 -- x
bad "no worker command" --name lin --image i -n 1
bad "--kind 'tfjob': job or mxjob" --name lin --image i -n 1 --kind tfjob -- x
bad "-n needs a whole number from 1 to 1000000, not '0'" --name lin --image i -n 0 -- x
bad "-n needs a whole number from 1 to 1000000, not '1000001'" --name lin --image i -n 1000001 -s 0 -- x
# (a job of 9,001 nodes, once refused for its node table, is made)
"$B/dtrain" k8s --name lin --image i -n 9000 -s 0 -- x >"$tmp/big.yaml" || fail "dtrain k8s -n 9000"
grep -q "completions: 9000" "$tmp/big.yaml" || grep -q "replicas: 9000" "$tmp/big.yaml" || fail "dtrain k8s -n 9000: no 9000 workers in the manifest"
bad "--cpu: 'two' is not a quantity" --name lin --image i -n 1 --cpu two -- x
bad "--memory: 'ps=1Gi' names no role" --name lin --image i -n 1 --memory ps=1Gi -- x
bad "--env: DMLC_ROLE is set by dtrain k8s" --name lin --image i -n 1 --env DMLC_ROLE=worker -- x
bad "unknown option '--gpus'" --name lin --image i -n 1 --gpus 1 -- x
bad "--elastic-timeout: for an elastic job" --name lin --image i -n 2 --elastic-timeout 5 -- x
bad "--env: DTRAIN_ELASTIC_TIMEOUT is set by dtrain k8s" --name lin --image i -n 1 --env DTRAIN_ELASTIC_TIMEOUT=9 -- x
bad "and --restart" --name lin --image i -n 2 -s 2 --max-workers 3 --restart 1 -- x
bad "need min <= n <= max" --name lin --image i -n 2 -s 0 --min-workers 3 -- x
bad "need min <= n <= max" --name lin --image i -n 2 -s 0 --max-workers 1 -- x
bad "not as an MXJob" --name lin --image i -n 2 -s 0 --kind mxjob --max-workers 3 -- x
bad "and --restart" --name lin --image i -n 2 -s 0 --max-workers 3 --restart 1 -- x
bad "--env: DTRAIN_ELASTIC is set by dtrain k8s" --name lin --image i -n 1 --env DTRAIN_ELASTIC=1 -- x
echo "bad usage: refused with the option named, nothing printed"

# ---- (b) pods on one machine ----
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null; then
	echo "SKIP pods on one machine: needs root and unshare (a private /etc/hosts for the Service's name)"
	exit 0
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("0.0.0.0", 0)); print(s.getsockname()[1])')
# pods KIND NAME ARGS...: run the job's pods; their logs in $tmp/KIND-NAME/
pods() {
	local kind=$1 name=$2
	shift 2
	local dir="$tmp/$kind-$name"
	mkdir -p "$dir"
	"$B/dtrain" k8s --kind "$kind" --name lin --image local "${SIZE[@]}" --port "$port" --ttl 60 \
		--env DT_CONNECT_TIMEOUT=60 --env PS_VERBOSE=1 -- "$@" >"$dir/manifest.yaml" || fail "$kind $name: dtrain k8s"
	: >"$dir/hosts"
	PATH="$B:$B/examples:$PATH" timeout $((250 * T_SCALE)) unshare --mount --propagation private sh -c \
		'mount --bind "$1" /etc/hosts && exec python3 "$2" "$3" /etc/hosts "$4" "$5"' \
		sh "$dir/hosts" "$HERE/k8s_pods.py" "$dir/manifest.yaml" "$dir" "$TAG" >"$dir/pods.out" 2>&1 ||
		{ cat "$dir/pods.out"; tail -n 5 "$dir"/*.log; fail "$kind $name: a pod failed"; }
	sed -n 's/^pods start in the order: /  started: /p' "$dir/pods.out"
}
SIZE=(-n 2 -s 2)
LIN=(linreg --kvstore dist_sync --batch-size 100 --epochs 2)
last() { grep -o 'w=[^ ]* b=[^ ]*' "$1" | tail -1; }
timeout $((120 * T_SCALE)) "$B/dtrain" launch -n 2 -s 2 -- "$B/examples/${LIN[0]}" "${LIN[@]:1}" >"$tmp/lin_ref.log" 2>&1 ||
	fail "linreg under dtrain launch"
for kind in job mxjob; do
	pods $kind lin "${LIN[@]}"
	for w in 0 1; do
		[ "$(last "$tmp/$kind-lin/worker-$w.log")" = "$(last "$tmp/lin_ref.log")" ] ||
			fail "$kind: worker $w ended with '$(last "$tmp/$kind-lin/worker-$w.log")', dtrain launch with '$(last "$tmp/lin_ref.log")'"
	done
	grep -q "scheduler listening on 127.0.0.2:$port (reached as lin-scheduler" "$tmp/$kind-lin/scheduler-0.log" ||
		fail "$kind: the scheduler did not listen on its pod's address"
	echo "$kind, linreg: every pod exited 0; $(last "$tmp/lin_ref.log") as under dtrain launch"
done
grep -h "cannot resolve .* yet" "$tmp"/*-lin/*.log | head -1 | sed 's/^/  a pod that started first: /'
if [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
	M=(--model lenet --epochs 1 --limit 1024 --seed 3 --batch-size 32 --optimizer sgd --lr 0.05 --data "$DATA")
	timeout $((200 * T_SCALE)) "$B/dtrain" launch -n 2 -s 2 -- "$B/examples/mnist" --kvstore dist_sync "${M[@]}" \
		--save "$tmp/ref.params" >"$tmp/m_ref.log" 2>&1 || fail "mnist under dtrain launch"
	for kind in job mxjob; do
		pods $kind mnist mnist --kvstore dist_sync "${M[@]}" --save "$tmp/$kind.params"
		cmp -s "$tmp/ref.params" "$tmp/$kind.params" || fail "$kind: mnist parameters differ from dtrain launch's"
		echo "$kind, mnist: every pod exited 0; parameters bit-identical to dtrain launch's"
	done
else
	echo "mnist skipped: no Fashion-MNIST in $DATA"
fi
# Elastic: 2 worker pods, a third added once the job runs; the job holds
# before step 30's commit until the third is ready to join.
SIZE=(-n 2 -s 0 --min-workers 1 --max-workers 3)
K8S_TEST_GROW=1 K8S_TEST_GROW_GO=$tmp/job-elastic/go \
	pods job elastic elastic --samples 512 --steps 120 --count-samples --hold-at 30 --hold-file "$tmp/job-elastic/go"
grep -q "membership 1 has 3 workers: 1 joined" "$tmp/job-elastic/scheduler-0.log" ||
	fail "elastic: the added worker pod was not taken in"
grep -h "done with 3 workers" "$tmp"/job-elastic/worker-*.log | grep -q . || fail "elastic: the job did not end with 3 workers"
! grep -h "samples: epoch" "$tmp"/job-elastic/worker-*.log | grep -qv " 0 more than once" ||
	fail "elastic: a sample trained twice in an epoch"
echo "job, elastic: a worker pod added while the job ran joined it; every pod exited 0, each sample once an epoch"
# The same with 2 servers (dist_sync): the servers are not elastic, the
# worker Job grows by one pod.
SIZE=(-n 2 -s 2 --min-workers 2 --max-workers 3)
K8S_TEST_GROW=1 K8S_TEST_GROW_GO=$tmp/job-elastic_ps/go \
	pods job elastic_ps elastic --kvstore dist_sync --samples 512 --steps 120 --count-samples --hold-at 30 \
	--hold-file "$tmp/job-elastic_ps/go"
grep -q "membership 1 has 3 workers: 1 joined" "$tmp/job-elastic_ps/scheduler-0.log" ||
	fail "elastic with servers: the added worker pod was not taken in"
grep -h "done with 3 workers" "$tmp"/job-elastic_ps/worker-*.log | grep -q . ||
	fail "elastic with servers: the job did not end with 3 workers"
grep -h "samples: epoch 0:" "$tmp"/job-elastic_ps/worker-*.log | grep -q . ||
	fail "elastic with servers: no sample count"
! grep -h "samples: epoch" "$tmp"/job-elastic_ps/worker-*.log | grep -qv " 0 more than once" ||
	fail "elastic with servers: a sample trained twice in an epoch"
for s in 0 1; do
	grep -q "^server-$s: exit 0$" "$tmp/job-elastic_ps/pods.out" || fail "elastic with servers: server pod $s"
done
echo "job, elastic with 2 servers: a worker pod added while the job ran joined it; every pod exited 0, each sample once an epoch"
[ -z "$(ours)" ] || fail "processes left: $(ours)"
echo ok
