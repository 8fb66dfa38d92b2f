#!/bin/bash
# auth_bench.sh - what authentication and encryption cost, each beside the
# plain figure measured in the same run (docs/security.md).
#
#   1. bootstrap: `dtrain launch -n 2 -s 2 -- hello_cluster` (scheduler, 2
#      servers, 2 workers: every connection of a job, a barrier, the end)
#      with DTRAIN_AUTH=none, with authentication (the default), and
#      encrypted; the runs alternate, REPEAT of each (default 7), median.
#   2. kv_bench (1 worker, 1 server) plain and encrypted: push, pull and
#      pushpull of 1 MiB and 16 MiB, best of REPEAT_IO runs (default 3).
#   3. coll_bench allreduce, 2 ranks over TCP (DT_COLL_CMA=0: the same-host
#      copy path is never encrypted), plain and encrypted, best of
#      REPEAT_IO runs.
#   4. the baseline of the encrypted figures: aead_bench, libsodium's
#      AES-256-GCM sealing and opening 64 KiB records on one core (an
#      encrypted byte is sealed once and opened once).
#
#   bench/auth_bench.sh [BUILD_DIR]      (default: $DTRAIN_BUILD or build)
#
# Prints a table per part, then the JSON lines (also kept in $OUT).
set -u
BUILD=${1:-${DTRAIN_BUILD:-build}}
REPEAT=${REPEAT:-7}
REPEAT_IO=${REPEAT_IO:-3}
DTRAIN=$BUILD/dtrain
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/dtrain_auth_bench.XXXXXX")}
mkdir -p "$OUT"
for f in "$DTRAIN" "$BUILD/examples/hello_cluster" "$BUILD/bench/kv_bench" "$BUILD/bench/coll_bench" "$BUILD/bench/aead_bench"; do
	[ -x "$f" ] || { echo "auth_bench.sh: no $f (build first)" >&2; exit 1; }
done
unset DTRAIN_SECRET DTRAIN_SECRET_FILE DTRAIN_AUTH DTRAIN_ENCRYPT

mode_env() { # MODE: the environment of a mode
	case $1 in
	none) echo "DTRAIN_AUTH=none" ;;
	auth) echo "DTRAIN_AUTH=secret" ;;
	encrypt) echo "DTRAIN_AUTH=secret DTRAIN_ENCRYPT=1" ;;
	esac
}

# 1. Bootstrap.
for i in $(seq "$REPEAT"); do
	for m in none auth encrypt; do
		t0=$(date +%s%N)
		# shellcheck disable=SC2046
		env $(mode_env $m) "$DTRAIN" launch -n 2 -s 2 -- "$BUILD/examples/hello_cluster" >/dev/null 2>&1 ||
			{ echo "auth_bench.sh: bootstrap ($m) failed" >&2; exit 1; }
		t1=$(date +%s%N)
		echo "$m $(((t1 - t0) / 1000))" >>"$OUT/bootstrap.txt"
	done
done

# 2. KVStore and 3. allreduce, plain and encrypted, interleaved.
for i in $(seq "$REPEAT_IO"); do
	for m in auth encrypt; do
		# shellcheck disable=SC2046
		env $(mode_env $m) "$DTRAIN" launch -n 1 -s 1 -- "$BUILD/bench/kv_bench" --json 2>/dev/null |
			sed -n 's/^\[worker 0\] //p' | grep '^{' | sed "s/^{/{\"mode\":\"$m\",/" >>"$OUT/kv.jsonl"
		# shellcheck disable=SC2046
		env $(mode_env $m) DT_COLL_CMA=0 "$DTRAIN" launch -n 2 -s 0 -- "$BUILD/bench/coll_bench" --json \
			--min-bytes 65536 --max-bytes 67108864 2>/dev/null |
			sed -n 's/^\[worker 0\] //p' | grep '^{' | sed "s/^{/{\"mode\":\"$m\",/" >>"$OUT/coll.jsonl"
	done
done

"$BUILD/bench/aead_bench" --json >"$OUT/aead.jsonl"

python3 - "$OUT" <<'PY'
import json, statistics, sys, collections
out = sys.argv[1]
lines = []

boot = collections.defaultdict(list)
for ln in open(f"{out}/bootstrap.txt"):
    m, us = ln.split()
    boot[m].append(int(us) / 1000.0)
base = statistics.median(boot["none"])
print("bootstrap: dtrain launch -n 2 -s 2 -- hello_cluster (median of %d)" % len(boot["none"]))
print("%-10s %10s %8s" % ("mode", "ms", "ratio"))
for m in ("none", "auth", "encrypt"):
    med = statistics.median(boot[m])
    print("%-10s %10.1f %8.2f" % (m, med, med / base))
    lines.append({"bench": "bootstrap", "mode": m, "ms": round(med, 1),
                  "ratio_vs_none": round(med / base, 3)})

def best(path, keyf, valf):
    b = {}
    for ln in open(path):
        o = json.loads(ln)
        k = keyf(o)
        if k is None:
            continue
        b[(o["mode"],) + k] = max(b.get((o["mode"],) + k, 0), valf(o))
    return b

aead = [json.loads(l) for l in open(f"{out}/aead.jsonl")]
base_alg = next((a for a in aead if a["alg"] == "aes256gcm"), aead[0])
# One byte is sealed on one side and opened on the other: the slower of
# the two bounds an encrypted stream on one core.
aead_gbps = min(base_alg["seal_gbps"], base_alg["open_gbps"])
print()
print("baseline: %s on one core, 64 KiB records: seal %.3f GB/s, open %.3f GB/s"
      % (base_alg["alg"], base_alg["seal_gbps"], base_alg["open_gbps"]))
for a in aead:
    lines.append(a)

kv = best(f"{out}/kv.jsonl",
          lambda o: (o["op"], o["keys"], o["bytes"]) if o["bytes"] >= 1 << 20 else None,
          lambda o: o["gbps"])
print()
print("kv_bench, 1 worker and 1 server (best of runs): GB/s")
print("%-9s %5s %9s %9s %9s %7s %8s" % ("op", "keys", "bytes", "plain", "encrypt", "ratio", "vs aead"))
for (m, op, keys, nbytes) in sorted(k for k in kv if k[0] == "auth"):
    p, e = kv[(m, op, keys, nbytes)], kv.get(("encrypt", op, keys, nbytes), 0)
    print("%-9s %5d %9d %9.3f %9.3f %7.2f %8.2f" % (op, keys, nbytes, p, e, e / p if p else 0, e / aead_gbps))
    lines.append({"bench": "kv", "op": op, "keys": keys, "bytes": nbytes,
                  "plain_gbps": p, "encrypt_gbps": e,
                  "ratio": round(e / p, 3) if p else None,
                  "ratio_vs_aead": round(e / aead_gbps, 3)})

def coll_key(o):
    return (o.get("op", "allreduce"), o["bytes"]) if "bytes" in o else None
def coll_val(o):
    for k in ("busbw_gbps", "algbw_gbps", "gbps"):
        if k in o:
            return o[k]
    return 0
coll = best(f"{out}/coll.jsonl", coll_key, coll_val)
print()
print("coll_bench allreduce, 2 ranks over TCP (DT_COLL_CMA=0; best of runs): bus GB/s")
print("%-10s %10s %9s %9s %7s %8s" % ("op", "bytes", "plain", "encrypt", "ratio", "vs aead"))
for (m, op, nbytes) in sorted(k for k in coll if k[0] == "auth"):
    p, e = coll[(m, op, nbytes)], coll.get(("encrypt", op, nbytes), 0)
    print("%-10s %10d %9.3f %9.3f %7.2f %8.2f" % (op, nbytes, p, e, e / p if p else 0, e / aead_gbps))
    lines.append({"bench": "coll", "op": op, "bytes": nbytes, "plain_busbw": p,
                  "encrypt_busbw": e, "ratio": round(e / p, 3) if p else None,
                  "ratio_vs_aead": round(e / aead_gbps, 3)})
print()
with open(f"{out}/auth_bench.jsonl", "w") as f:
    for o in lines:
        s = json.dumps(o)
        print(s)
        f.write(s + "\n")
PY
echo "(runs kept in $OUT)"
