#!/usr/bin/env python3
"""k8s_pods.py MANIFEST HOSTS LOGDIR TAG - run the pods of `dtrain k8s`
output as processes on this machine, each with exactly the environment its
pod would get:

- the container's env from the manifest: plain values, status.podIP (each
  pod its own loopback address, 127.0.0.2 for the scheduler, 127.0.0.3 on
  for the others), the Secret's value;
- what Kubernetes adds: JOB_COMPLETION_INDEX in an Indexed Job's pods;
- for an MXJob, what Kubeflow's training operator adds: DMLC_ROLE,
  DMLC_PS_ROOT_URI (NAME-scheduler-0), DMLC_PS_ROOT_PORT (the mxjob-port),
  DMLC_NUM_SERVER/WORKER, DMLC_USE_KUBERNETES=1, MX_CONFIG, and
  DMLC_WORKER_ID for workers.

Runs inside a private mount namespace whose /etc/hosts is HOSTS (k8s.sh
binds it there): the scheduler Service's name is written into it only
when the scheduler's pod starts, as a headless Service's record appears
with its pod. Pods start in a shuffled order with delays. Prints each
pod's exit status; exit 0 when every pod ended with 0 within the time.

K8S_TEST_GROW=K (an elastic job): once the scheduler says every node is
ready, K more worker pods start, with the next indexes, as after
`kubectl patch job NAME-worker` raised parallelism and completions; once
the scheduler has them all ready to join, the file K8S_TEST_GROW_GO is
made (the job may hold at a step until then: examples/elastic --hold-file).
"""
import json
import os
import random
import re
import subprocess
import sys
import time

import yaml

manifest, hosts, logdir, tag = sys.argv[1:5]
docs = [d for d in yaml.safe_load_all(open(manifest)) if d]
secrets = {d["metadata"]["name"]: d["stringData"] for d in docs if d["kind"] == "Secret"}
pods = []  # (role, index, container, extra env, kind)
late = []  # the worker pods of K8S_TEST_GROW
grow = int(os.environ.get("K8S_TEST_GROW", "0"))

for d in docs:
    if d["kind"] == "Job":
        spec = d["spec"]
        role = d["metadata"]["labels"]["dtrain.io/role"]
        c = spec["template"]["spec"]["containers"][0]
        for i in range(spec["completions"] + (grow if role == "worker" else 0)):
            extra = {}
            if spec.get("completionMode") == "Indexed":
                extra["JOB_COMPLETION_INDEX"] = str(i)
            (pods if i < spec["completions"] else late).append((role, i, c, extra))
    elif d["kind"] == "MXJob":
        name = d["metadata"]["name"]
        specs = d["spec"]["mxReplicaSpecs"]
        port = [p["containerPort"] for p in specs["Scheduler"]["template"]["spec"]["containers"][0]["ports"]
                if p["name"] == "mxjob-port"][0]
        cluster = {
            t.lower(): [{"url": "%s-%s-%d" % (name, t.lower(), i), "port": port} for i in range(s["replicas"])]
            for t, s in specs.items()
        }
        for t, s in specs.items():
            c = s["template"]["spec"]["containers"][0]
            for i in range(s["replicas"]):
                extra = {
                    "MX_CONFIG": json.dumps({"cluster": cluster, "labels": {}, "task": {"type": t.lower(), "index": i}}),
                    "DMLC_PS_ROOT_PORT": str(port),
                    "DMLC_PS_ROOT_URI": "%s-scheduler-0" % name,
                    "DMLC_NUM_SERVER": str(len(cluster.get("server", []))),
                    "DMLC_NUM_WORKER": str(len(cluster.get("worker", []))),
                    "DMLC_ROLE": t.lower(),
                    "DMLC_USE_KUBERNETES": "1",
                }
                if t == "Worker":
                    extra["DMLC_WORKER_ID"] = str(i)
                pods.append((t.lower(), i, c, extra))

ips = {}
n = 3
for role, i, _, _ in pods + late:
    if role == "scheduler":
        ips[(role, i)] = "127.0.0.2"
    else:
        ips[(role, i)] = "127.0.0.%d" % n
        n += 1


def pod_env(role, i, c, extra):
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/"), "DT_K8S_TEST": tag}
    # The image's ENV: the same BLAS kernel choice as this machine's (the
    # reference run's), as every pod of one image has the same
    # (docs/launcher.md, "Placement and exact results").
    env.update({k: v for k, v in os.environ.items() if k.startswith(("OPENBLAS_", "OMP_"))})
    # The test suite's data cache (in the build tree, not this host's
    # /dev/shm), as a volume shared by the pods of one node would be.
    if "DTRAIN_DATA_CACHE" in os.environ:
        env["DTRAIN_DATA_CACHE"] = os.environ["DTRAIN_DATA_CACHE"]
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "fieldRef" in e["valueFrom"]:
            assert e["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
            env[e["name"]] = ips[(role, i)]
        else:
            ref = e["valueFrom"]["secretKeyRef"]
            env[e["name"]] = secrets.get(ref["name"], {}).get(ref["key"], os.environ.get("K8S_TEST_SECRET", ""))
    env.update(extra)  # (the operator's and Kubernetes' own come last)
    return env


random.seed(int(os.environ.get("K8S_TEST_SEED", "0")) or None)
random.shuffle(pods)
order = " ".join("%s-%d" % (r, i) for r, i, _, _ in pods)
print("pods start in the order: %s" % order, flush=True)
# The Service's record: none until the scheduler's pod runs.
with open(hosts, "w") as f:
    f.write("127.0.0.1 localhost\n")
procs = []


def start(role, i, c, extra):
    if role == "scheduler":
        with open(hosts, "a") as f:
            f.write("127.0.0.2 %s\n" % pod_env(role, i, c, extra)["DMLC_PS_ROOT_URI"])
    log = open(os.path.join(logdir, "%s-%d.log" % (role, i)), "w")
    env = pod_env(role, i, c, extra)
    procs.append((role, i, subprocess.Popen(c["command"] + c.get("args", []), env=env, stdout=log,
                                            stderr=subprocess.STDOUT, cwd=logdir)))


def sched_says(pattern, count, until):
    """Wait until the scheduler's log has count lines matching pattern."""
    path = os.path.join(logdir, "scheduler-0.log")
    while time.time() < until:
        try:
            with open(path, errors="replace") as f:
                if len(re.findall(pattern, f.read())) >= count:
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


for pod in pods:
    time.sleep(random.uniform(0.1, 0.8))
    start(*pod)

deadline = time.time() + float(os.environ.get("K8S_TEST_TIMEOUT", "200"))
if late:
    if not sched_says(r"all \d+ nodes are ready", 1, deadline):
        print("the job never started: no worker pod added", flush=True)
    else:
        print("adding worker pods: %s" % " ".join("worker-%d" % i for _, i, _, _ in late), flush=True)
        for pod in late:
            start(*pod)
        if sched_says(r"worker \d+ is ready to join", len(late), deadline):
            open(os.environ["K8S_TEST_GROW_GO"], "w").close()
        else:
            print("the added workers were not ready to join", flush=True)
ok = True
for role, i, p in procs:
    try:
        rc = p.wait(timeout=max(1, deadline - time.time()))
    except subprocess.TimeoutExpired:
        rc = "still running after the deadline"
        ok = False
    print("%s-%d: exit %s" % (role, i, rc), flush=True)
    ok = ok and rc == 0
for _, _, p in procs:
    if p.poll() is None:
        p.kill()
        p.wait()
sys.exit(0 if ok else 1)
