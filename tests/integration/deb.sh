#!/bin/bash
# deb.sh - the Debian package (tools/mkdeb.sh, what `make deb` runs):
# lintian finds no error in it; `apt-get install ./dtrain_*.deb` installs
# it (apt resolves the dependencies); the installed dtrain launches the
# installed linreg example, from the installed files only (a clean
# environment, run outside the source and build trees); then the package is
# purged, also when the test fails, leaving the machine as it was.
# Skipped, saying why, when not root, when dtrain is already installed as
# a package (it is not this test's to remove), or for a sanitizer build.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/cluster_lib.bash"
: "${DTRAIN_SOURCE:?DTRAIN_SOURCE must name the source directory}"

skip() {
	log "skipped: $*"
	exit 0
}
[ "$(id -u)" = 0 ] || skip "not root (apt-get install needs it)"
command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null ||
	skip "no apt-get or dpkg-deb (not Debian)"
grep -q '^DT_SANITIZE:STRING=.\+' "$DTRAIN_BUILD/CMakeCache.txt" 2>/dev/null &&
	skip "a sanitizer build (its programs are not for installing)"
# The package is installed machine-wide: a second checkout running this
# test at the same time (two suites on one machine) would find ours
# installed, or purge it under our job. One at a time per machine; the
# wait is bounded (a run takes minutes on a busy machine). The lock is a
# flock on the directory /var/lib/dpkg, which exists wherever dpkg does,
# so no lock file is left behind (dpkg's own locks are fcntl locks on
# files inside it, which a flock on the directory does not touch).
command -v flock >/dev/null || skip "no flock (util-linux)"
exec 9</var/lib/dpkg
flock -w $((600 * DT_TEST_TIME_SCALE)) 9 ||
	fail "another run of this test held /var/lib/dpkg for $((600 * DT_TEST_TIME_SCALE)) s"
# apt and dpkg wait for each other's lock (another apt-get on the machine)
# rather than fail at once.
APT_WAIT=(-o DPkg::Lock::Timeout=300)
dpkg -s dtrain >/dev/null 2>&1 && skip "a dtrain package is installed already"
[ -e /usr/bin/dtrain ] && skip "/usr/bin/dtrain exists (not from a package)"

bash "$DTRAIN_SOURCE/tools/mkdeb.sh" "$DTRAIN_BUILD" "$T_DIR" >"$T_DIR/mkdeb.log" 2>&1 ||
	fail "tools/mkdeb.sh: $(tail -20 "$T_DIR/mkdeb.log")"
deb=$(ls "$T_DIR"/dtrain_*_*.deb)
[ -f "$deb" ] || fail "no dtrain_<version>_<arch>.deb made"
log "made $(basename "$deb")"

if command -v lintian >/dev/null; then
	lintian --fail-on error "$deb" >"$T_DIR/lintian.log" 2>&1 ||
		fail "lintian found errors: $(grep '^E:' "$T_DIR/lintian.log")"
	log "lintian: no error ($(grep -c '^W:' "$T_DIR/lintian.log") warnings)"
else
	log "lintian not installed: not run"
fi

# From here the machine is changed: purge whatever happens.
purge() {
	DEBIAN_FRONTEND=noninteractive apt-get "${APT_WAIT[@]}" purge -y -q dtrain >"$T_DIR/purge.log" 2>&1
}
trap 'purge; cleanup' EXIT
DEBIAN_FRONTEND=noninteractive apt-get "${APT_WAIT[@]}" install -y -q --no-install-recommends "$deb" \
	>"$T_DIR/apt.log" 2>&1 || fail "apt-get install: $(tail -20 "$T_DIR/apt.log")"
dpkg -s dtrain | grep -q '^Status: install ok installed' || fail "dtrain is not installed"
log "installed with apt-get"

# Only the installed files: a minimal environment, in an empty directory.
mkdir "$T_DIR/run"
(cd "$T_DIR/run" && env -i PATH=/usr/bin:/bin HOME="$T_DIR/run" \
	timeout $((120 * T_SCALE)) dtrain launch -n 2 -s 1 -- dtrain-example-linreg \
	--kvstore dist_sync --epochs 2) >"$T_DIR/job.log" 2>&1 ||
	fail "the installed job failed: $(tail -20 "$T_DIR/job.log")"
# linreg ends with each worker's model, the same on both (dist_sync),
# near the true w=5.
n=$(grep -E '^\[worker [01]\] w=5\.0' "$T_DIR/job.log" | sed 's/^\[worker [01]\] //' | sort -u | wc -l)
[ "$(grep -c '^\[worker [01]\] w=' "$T_DIR/job.log")" = 2 ] && [ "$n" = 1 ] ||
	fail "not one model w=5.0... on both workers: $(tail -20 "$T_DIR/job.log")"
man -w dtrain-launch >/dev/null 2>&1 || fail "man dtrain-launch is not found"
# With the Python binding in the package: the system's python3 imports it
# from the distribution's directory, outside any build tree.
if dpkg -L dtrain | grep -q '/dist-packages/dtrain/__init__.py$'; then
	got=$(cd "$T_DIR/run" && env -i PATH=/usr/bin:/bin /usr/bin/python3 -c \
		'import dtrain; print(dtrain.__file__)' 2>&1) ||
		fail "python3 -c 'import dtrain' after the install: $got"
	case $got in
	/usr/lib/python3/dist-packages/dtrain/*) ;;
	*) fail "import dtrain found $got, not the package's copy" ;;
	esac
	log "python3 imports the packaged dtrain from /usr/lib/python3/dist-packages"
fi
pkg-config --exists dtrain || fail "pkg-config does not find dtrain"
log "dtrain launch -n 2 -s 1 -- dtrain-example-linreg: $(grep -m1 '^\[worker 0\] w=' "$T_DIR/job.log") on both workers"

purge || fail "apt-get purge: $(tail -20 "$T_DIR/purge.log")"
dpkg -s dtrain >/dev/null 2>&1 && fail "dtrain is still installed after the purge"
[ -e /usr/bin/dtrain ] && fail "/usr/bin/dtrain is left after the purge"
# (the bytecode the import above made included: a directory left there
# would be imported as an empty namespace package called dtrain)
[ -e /usr/lib/python3/dist-packages/dtrain ] &&
	fail "/usr/lib/python3/dist-packages/dtrain is left after the purge: $(find /usr/lib/python3/dist-packages/dtrain | head -n 5)"
log "purged: nothing left"
