#!/bin/bash
# docs_check.sh - tools/check_docs.py: every code fence of the user docs is
# closed with nothing after it, the launcher's synopsis and options table
# and mnist's option table name exactly the options their --help has, and
# no user doc speaks of issue numbers, "the SPEC" or seeds. Then the checker
# itself is shown to catch each kind on a broken copy.
. "$(dirname "$0")/cluster_lib.bash"
: "${DTRAIN_SOURCE:?DTRAIN_SOURCE must name the source directory}"

python3 "$DTRAIN_SOURCE/tools/check_docs.py" "$DTRAIN_BUILD" >"$T_DIR/out" 2>&1 ||
	fail "the docs disagree with the program: $(cat "$T_DIR/out")"
log "docs: fences closed, option tables = --help, no bookkeeping words"

# A broken copy of the tree's docs must be caught, each way.
mkdir -p "$T_DIR/tree/tools"
cp -r "$DTRAIN_SOURCE/docs" "$DTRAIN_SOURCE/README.md" "$T_DIR/tree/"
cp "$DTRAIN_SOURCE/tools/check_docs.py" "$T_DIR/tree/tools/"
printf '\n```sh\nls\n``` trailing text\n' >>"$T_DIR/tree/docs/cluster.md"
sed -i 's/\[--stats\] //' "$T_DIR/tree/docs/launcher.md"
printf '\nAs Issue 12 says.\n' >>"$T_DIR/tree/docs/kvstore.md"
python3 "$T_DIR/tree/tools/check_docs.py" "$DTRAIN_BUILD" >"$T_DIR/out" 2>&1 &&
	fail "the checker passed broken docs"
for want in "docs/cluster.md:.*text after a closing fence" \
	"docs/launcher.md:.*launcher synopsis: --stats (in --help) is missing" \
	"docs/kvstore.md:.*'Issue 12'"; do
	grep -q "$want" "$T_DIR/out" || fail "the checker missed: $want ($(cat "$T_DIR/out"))"
done
log "the checker catches a bad fence, a missing option and an issue number"
