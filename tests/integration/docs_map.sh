#!/bin/bash
# docs_map.sh - tools/check_map.py: every file and function docs/HACKING.md
# names exists, and its module table matches the layers the build
# enforces; then the checker is shown to catch each kind of drift on a
# broken copy of the page.
. "$(dirname "$0")/cluster_lib.bash"
: "${DTRAIN_SOURCE:?DTRAIN_SOURCE must name the source directory}"
S=$DTRAIN_SOURCE

python3 "$S/tools/check_map.py" "$S" >"$T_DIR/out" 2>&1 ||
	fail "docs/HACKING.md names what the code does not have: $(cat "$T_DIR/out")"
log "HACKING.md: every file and function it names exists; module table = the build's layers"

cp "$S/docs/HACKING.md" "$T_DIR/h.md"
sed -i 's/`kv\/server.c: payload_dest`/`kv\/server.c: payload_dest_gone`/' "$T_DIR/h.md"
sed -i 's/`codec.c`/`codecs.c`/' "$T_DIR/h.md"
sed -i 's/^| `src\/nn\/` | optim, obs, common |/| `src\/nn\/` | optim, common |/' "$T_DIR/h.md"
sed -i '/^| `src\/obs\/` |/d' "$T_DIR/h.md"
python3 "$S/tools/check_map.py" "$S" "$T_DIR/h.md" >"$T_DIR/out" 2>&1 &&
	fail "the checker passed a broken page"
for want in "payload_dest_gone is not in src/kv/server.c" "codecs.c.: no such file" \
	"src/nn/ may use" "no row for src/obs/"; do
	grep -q "$want" "$T_DIR/out" || fail "the checker missed: $want ($(cat "$T_DIR/out"))"
done
log "the checker catches a renamed function, a missing file, a wrong layer and a missing module"
