# recovery_lib.bash - what recovery.sh and recovery_batched.sh share: the
# build, the data, a private directory, the tag that marks this test's
# processes (other tests run beside it from the same build) and the
# launcher options of a recovered job. Sourced; defines fail, ours, left, R.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/job_lib.bash"
B=${DTRAIN_BUILD:?}
DATA=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d)
trap 'for p in $(ours); do kill -9 "$p"; done 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Every process of this test's jobs carries TAG in its environment: other
# tests run beside this one from the same build.
TAG="DT_RECOVERY_TEST=$tmp"
ours() { tagged_pids "$B/" "$TAG"; } # this test's processes
. "$(dirname "${BASH_SOURCE[0]}")/kill_lib.bash"
left() { [ -n "$(ours)" ]; }

R=(--restart 1 --checkpoint-dir "$tmp/ck" --env "$TAG")
