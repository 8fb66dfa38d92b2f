#!/usr/bin/env python3
"""k8s_check.py KIND W S PORT RESTART MANIFEST [MIN MAX [TIMEOUT]] - check
`dtrain k8s` output offline: valid YAML; every field it uses has the type
the Kubernetes API (or Kubeflow's MXJob) gives it and no field is unknown
(a schema of the fields used); and the expected objects, env, ports, labels
and policies. With MIN and MAX, an elastic job (--min-workers MIN
--max-workers MAX [--elastic-timeout TIMEOUT]): every pod, scheduler and
servers too, has the elastic variables; the worker Job replaces a failed
pod per index and never fails the job; the scheduler's and the servers'
Jobs fail on a failed pod, as without --restart.
Prints what it checked; exits 1 naming the first problem."""
import sys

import yaml

kind, W, S, PORT, RESTART, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), \
    int(sys.argv[5]), sys.argv[6]
ELASTIC = sys.argv[7:10]  # [MIN, MAX] or [MIN, MAX, TIMEOUT], or []
docs = [d for d in yaml.safe_load_all(open(path)) if d is not None]

# ---- a schema of the fields used: dict = object with these keys (all
# optional unless listed in REQUIRED), [x] = list of x, a type = scalar ----
STR, INT, BOOL = str, int, bool
ENV = {"name": STR, "value": STR,
       "valueFrom": {"fieldRef": {"fieldPath": STR}, "secretKeyRef": {"name": STR, "key": STR, "optional": BOOL}}}
CONTAINER = {"name": STR, "image": STR, "command": [STR], "args": [STR],
             "ports": [{"name": STR, "containerPort": INT}], "env": [ENV],
             "resources": {"requests": {"cpu": STR, "memory": STR}, "limits": {"cpu": STR, "memory": STR}}}
META = {"name": STR, "namespace": STR, "labels": {"*": STR}}
POD_TEMPLATE = {"metadata": {"labels": {"*": STR}},
                "spec": {"restartPolicy": STR, "containers": [CONTAINER]}}
SCHEMA = {
    "Secret": {"apiVersion": STR, "kind": STR, "metadata": META, "type": STR, "stringData": {"*": STR}},
    "Service": {"apiVersion": STR, "kind": STR, "metadata": META,
                "spec": {"clusterIP": STR, "publishNotReadyAddresses": BOOL, "selector": {"*": STR},
                         "ports": [{"name": STR, "port": INT, "targetPort": INT}]}},
    "Job": {"apiVersion": STR, "kind": STR, "metadata": META,
            "spec": {"completions": INT, "parallelism": INT, "completionMode": STR, "backoffLimit": INT,
                     "backoffLimitPerIndex": INT,
                     "ttlSecondsAfterFinished": INT,
                     "podFailurePolicy": {"rules": [{"action": STR,
                                                     "onPodConditions": [{"type": STR}],
                                                     "onExitCodes": {"containerName": STR, "operator": STR,
                                                                     "values": [INT]}}]},
                     "template": POD_TEMPLATE}},
    "MXJob": {"apiVersion": STR, "kind": STR, "metadata": META,
              "spec": {"jobMode": STR,
                       "runPolicy": {"cleanPodPolicy": STR, "backoffLimit": INT, "ttlSecondsAfterFinished": INT},
                       "mxReplicaSpecs": {"*": {"replicas": INT, "restartPolicy": STR, "template": POD_TEMPLATE}}}},
}
REQUIRED = {"apiVersion", "kind", "metadata", "name", "image", "containers", "selector"}
API = {"Secret": "v1", "Service": "v1", "Job": "batch/v1", "MXJob": "kubeflow.org/v1"}


def fail(msg):
    print("FAIL: %s" % msg)
    sys.exit(1)


def check(node, schema, where):
    if isinstance(schema, dict):
        if not isinstance(node, dict):
            fail("%s: an object expected, got %r" % (where, node))
        for k, v in node.items():
            sub = schema.get(k, schema.get("*"))
            if sub is None:
                fail("%s: unknown field '%s'" % (where, k))
            check(v, sub, "%s.%s" % (where, k))
        for k in REQUIRED & set(schema):
            if k not in node:
                fail("%s: '%s' missing" % (where, k))
    elif isinstance(schema, list):
        if not isinstance(node, list) or not node:
            fail("%s: a non-empty list expected" % where)
        for i, x in enumerate(node):
            check(x, schema[0], "%s[%d]" % (where, i))
    elif schema is INT:
        if not isinstance(node, int) or isinstance(node, bool):
            fail("%s: an integer expected, got %r" % (where, node))
    elif not isinstance(node, schema):
        fail("%s: %s expected, got %r" % (where, schema.__name__, node))


for d in docs:
    k = d.get("kind")
    if k not in SCHEMA:
        fail("an object of kind %r" % k)
    check(d, SCHEMA[k], "%s/%s" % (k, d["metadata"]["name"]))
    if d["apiVersion"] != API[k]:
        fail("%s: apiVersion %s" % (k, d["apiVersion"]))
    if d["metadata"]["labels"].get("dtrain.io/job") != "lin":
        fail("%s: no dtrain.io/job label" % k)

kinds = sorted(d["kind"] for d in docs)


def env_of(c):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


def common_env(c, where):
    env = env_of(c)
    if env.get("DMLC_NODE_HOST") != {"fieldRef": {"fieldPath": "status.podIP"}}:
        fail("%s: DMLC_NODE_HOST is not the pod's IP" % where)
    if env.get("DTRAIN_SECRET") != {"secretKeyRef": {"name": "lin-secret", "key": "secret"}}:
        fail("%s: DTRAIN_SECRET is not from the Secret" % where)
    if env.get("DMLC_PORT") != str(PORT):
        fail("%s: DMLC_PORT" % where)
    if (env.get("DTRAIN_RECOVER") == "1") != (RESTART > 0):
        fail("%s: DTRAIN_RECOVER does not follow --restart" % where)
    if env.get("PS_VERBOSE") != "1":
        fail("%s: --env PS_VERBOSE=1 missing" % where)
    names = ["DTRAIN_ELASTIC", "DTRAIN_ELASTIC_MIN", "DTRAIN_ELASTIC_MAX", "DTRAIN_ELASTIC_TIMEOUT"]
    want = dict(zip(names, ["1"] + ELASTIC)) if ELASTIC else {}
    got = {k: env[k] for k in names if k in env}
    if got != want:
        fail("%s: elastic variables %r, expected %r" % (where, got, want))
    return env


def token_env(env, role, where):
    """--restart: a server's or worker's place token from its role's key."""
    want = {"secretKeyRef": {"name": "lin-secret", "key": role + "-token", "optional": True}}
    if role == "scheduler" or not RESTART:
        want = None
    if env.get("DTRAIN_NODE_TOKEN") != want:
        fail("%s: DTRAIN_NODE_TOKEN %r, expected %r" % (where, env.get("DTRAIN_NODE_TOKEN"), want))


secret = [d for d in docs if d["kind"] == "Secret"]
if len(secret) != 1 or len(secret[0]["stringData"]["secret"]) != 64:
    fail("no Secret with a 64-digit secret")
tokens = {k: v for k, v in secret[0]["stringData"].items() if k.endswith("-token")}
if (sorted(tokens) != ["server-token", "worker-token"] if RESTART else tokens) or \
        any(len(v) != 32 for v in tokens.values()) or len(set(tokens.values())) != len(tokens):
    fail("the Secret's place tokens: %r (--restart %d)" % (sorted(tokens), RESTART))
if kind == "job":
    want = sorted(["Secret", "Service"] + ["Job"] * (2 if S == 0 else 3))
    if kinds != want:
        fail("objects %s, expected %s" % (kinds, want))
    svc = [d for d in docs if d["kind"] == "Service"][0]
    if (svc["metadata"]["name"] != "lin-scheduler" or svc["spec"]["clusterIP"] != "None"
            or not svc["spec"]["publishNotReadyAddresses"]
            or svc["spec"]["selector"] != {"dtrain.io/job": "lin", "dtrain.io/role": "scheduler"}
            or svc["spec"]["ports"][0]["port"] != PORT):
        fail("the scheduler's Service: %r" % svc)
    for d in docs:
        if d["kind"] != "Job":
            continue
        role = d["metadata"]["labels"]["dtrain.io/role"]
        spec = d["spec"]
        count = {"scheduler": 1, "server": S, "worker": W}[role]
        if d["metadata"]["name"] != "lin-" + role or spec["completions"] != count or \
                spec["parallelism"] != count or spec["completionMode"] != "Indexed":
            fail("Job %s: completions %r" % (role, spec))
        # An elastic job's workers: one new pod per failed index, which
        # joins; a failed worker never fails the job.
        elastic_workers = bool(ELASTIC) and role == "worker"
        if elastic_workers:
            if spec.get("backoffLimitPerIndex") != 1 or "backoffLimit" in spec:
                fail("Job worker: an elastic job's workers need backoffLimitPerIndex 1, not %r" % spec)
        elif spec.get("backoffLimit") != RESTART or "backoffLimitPerIndex" in spec:
            fail("Job %s: backoffLimit" % role)
        if spec["ttlSecondsAfterFinished"] <= 0:
            fail("Job %s: ttl" % role)
        rules = spec["podFailurePolicy"]["rules"]
        if rules[0] != {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}:
            fail("Job %s: disruptions are not ignored" % role)
        fail_job = [r for r in rules if r["action"] == "FailJob"]
        if (RESTART == 0 and not elastic_workers) != bool(fail_job) or (fail_job and fail_job[0]["onExitCodes"] != {
                "containerName": "dtrain", "operator": "NotIn", "values": [0]}):
            fail("Job %s: a failed pod must fail the job (without --restart)" % role)
        tmpl = spec["template"]
        if tmpl["spec"]["restartPolicy"] != "Never" or \
                tmpl["metadata"]["labels"]["dtrain.io/role"] != role:
            fail("Job %s: pod template" % role)
        c = tmpl["spec"]["containers"][0]
        env = common_env(c, "Job " + role)
        token_env(env, role, "Job " + role)
        if env.get("DMLC_ROLE") != role or env.get("DMLC_PS_ROOT_URI") != "lin-scheduler" or \
                env.get("DMLC_PS_ROOT_PORT") != str(PORT) or env.get("DMLC_NUM_SERVER") != str(S) or \
                env.get("DMLC_NUM_WORKER") != str(W) or env.get("DMLC_USE_KUBERNETES") != "1":
            fail("Job %s: DMLC_* env %r" % (role, env))
        if c["ports"] != [{"name": "dtrain", "containerPort": PORT}]:
            fail("Job %s: ports" % role)
        cmd = c["command"]
        if (role == "worker" and cmd[:1] != ["linreg"]) or (role != "worker" and cmd != ["dtrain", role]):
            fail("Job %s: command %r" % (role, cmd))
        if role == "worker" and c["resources"]["requests"]["memory"] != "2Gi":
            fail("Job worker: --memory worker=2Gi not there")
    print("job: Secret, headless Service lin-scheduler (port %d), Jobs %s; env, ports, labels, "
          "podFailurePolicy and backoffLimit %d checked%s" % (PORT, ", ".join(
              d["metadata"]["name"] for d in docs if d["kind"] == "Job"), RESTART,
              "; elastic %s in every pod" % "/".join(ELASTIC) if ELASTIC else ""))
else:
    if kinds != ["MXJob", "Secret"]:
        fail("objects %s" % kinds)
    mx = [d for d in docs if d["kind"] == "MXJob"][0]
    spec = mx["spec"]
    if spec["jobMode"] != "MXTrain" or spec["runPolicy"]["backoffLimit"] != RESTART:
        fail("MXJob: jobMode/runPolicy")
    want = {"Scheduler": 1, "Worker": W}
    if S:
        want["Server"] = S
    if {t: s["replicas"] for t, s in spec["mxReplicaSpecs"].items()} != want:
        fail("MXJob replicas: %r" % spec["mxReplicaSpecs"].keys())
    for t, s in spec["mxReplicaSpecs"].items():
        if s["restartPolicy"] != ("OnFailure" if RESTART else "Never"):
            fail("MXJob %s: restartPolicy" % t)
        c = s["template"]["spec"]["containers"][0]
        # the operator finds the container and its port by these names
        if c["name"] != "mxnet" or c["ports"] != [{"name": "mxjob-port", "containerPort": PORT}]:
            fail("MXJob %s: container name or port" % t)
        env = common_env(c, "MXJob " + t)
        token_env(env, t.lower(), "MXJob " + t)
        if "DMLC_ROLE" in env or "DMLC_PS_ROOT_URI" in env:
            fail("MXJob %s: sets what the operator sets" % t)
    print("mxjob: Secret and MXJob lin (Scheduler 1, Server %d, Worker %d), container 'mxnet' with port "
          "'mxjob-port' %d; env and restart policy checked" % (S, W, PORT))
