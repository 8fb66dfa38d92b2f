#!/bin/bash
# docs_man.sh - the manual pages: man/ is what tools/mkman.sh makes from the
# program's own help and variable table (so a page cannot disagree with
# the program), each page renders with `man -l` without a warning, and the
# table of variables (src/common/env_table.h, the source of dtrain-env(7))
# names every variable the code reads and none it does not.
. "$(dirname "$0")/cluster_lib.bash"
: "${DTRAIN_SOURCE:?DTRAIN_SOURCE must name the source directory}"
SRC=$DTRAIN_SOURCE

bash "$SRC/tools/mkman.sh" "$DTRAIN" "$T_DIR/man" || fail "tools/mkman.sh failed"
diff -r "$SRC/man" "$T_DIR/man" >"$T_DIR/diff" ||
	fail "man/ is not what tools/mkman.sh makes now (run bash tools/mkman.sh build/dtrain man): $(head -30 "$T_DIR/diff")"
n=$(ls "$SRC/man" | wc -l)
[ "$n" -ge 16 ] || fail "only $n manual pages"
log "$n manual pages, as made from the program"

if command -v man >/dev/null && command -v groff >/dev/null; then
	for f in "$SRC"/man/*; do
		MANWIDTH=80 man --warnings -l "$f" >"$T_DIR/page" 2>"$T_DIR/warn" ||
			fail "man -l $(basename "$f") failed: $(cat "$T_DIR/warn")"
		[ -s "$T_DIR/warn" ] && fail "man -l $(basename "$f"): $(cat "$T_DIR/warn")"
		[ -s "$T_DIR/page" ] || fail "man -l $(basename "$f"): empty"
	done
	log "every page renders without warnings"
else
	log "rendering skipped: no man or groff"
fi

# The variables the code names (string literals of the prefixes dtrain
# uses), against the table; envvars.c names only the test suite's own.
# DT_ETIMEDOUT is an error code, not a variable.
# The test suite's own variables (envvars.c's list), which the Python
# examples also read to find a build tree, are not the user's.
grep -rhoE '"(DMLC|DTRAIN|PS|DT|MXNET|HOROVOD|OPENBLAS)_[A-Z0-9_]+"' "$SRC/src" "$SRC/examples" \
	"$SRC/python" --exclude=env_table.h --exclude=envvars.c | tr -d '"' |
	grep -vxE 'DT_ETIMEDOUT|DTRAIN_(BUILD|SOURCE|QUICK|DATA|TEST_[A-Z0-9_]*)' | sort -u >"$T_DIR/code"
"$DTRAIN" env | awk '{print $1}' | sort -u >"$T_DIR/table"
missing=$(comm -23 "$T_DIR/code" "$T_DIR/table" | tr '\n' ' ')
[ -z "$missing" ] || fail "read by the code but not in src/common/env_table.h: $missing"
stale=$(comm -13 "$T_DIR/code" "$T_DIR/table" | tr '\n' ' ')
[ -z "$stale" ] || fail "in src/common/env_table.h but not read by the code: $stale"
for v in $(cat "$T_DIR/table"); do
	grep -q "^\.B $(echo "$v" | sed 's/\\/\\\\/g')\$" "$SRC/man/dtrain-env.7" ||
		fail "dtrain-env(7) does not list $v"
done
log "$(wc -l <"$T_DIR/table") variables: the table, the code and dtrain-env(7) agree"
