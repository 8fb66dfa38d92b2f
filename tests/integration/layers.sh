#!/bin/bash
# layers.sh - the layer map holds at the level of includes: no file under
# src/ includes a header of a module it may not use. The map is the one the
# build links by (DT_USES_<module> in CMakeLists.txt, checked there at link
# time); cli, the top, may use every module. Also: the core and the
# transport name no app (the issue's grep), and only public entry points
# end the process.
set -u
SRC=${DTRAIN_SOURCE:?DTRAIN_SOURCE must name the source tree}
FAILED=0
CHECKS=0
fail() {
	echo "[layers] FAIL: $*"
	FAILED=1
}

declare -A USES
while read -r mod rest; do
	USES[$mod]="$mod $rest"
done < <(sed -n 's/^set(DT_USES_\([a-z]*\) *"\{0,1\}\([a-z ]*\)"\{0,1\})$/\1 \2/p' \
	"$SRC/CMakeLists.txt")
[ "${#USES[@]}" -ge 7 ] || fail "could not read DT_USES_* from CMakeLists.txt (${#USES[@]} modules)"
USES[cli]="cli ${!USES[*]}"

for dir in "$SRC"/src/*/; do
	mod=$(basename "$dir")
	[ -n "${USES[$mod]:-}" ] || {
		fail "src/$mod is in no DT_USES_ line of CMakeLists.txt"
		continue
	}
	for f in "$dir"*.[ch]; do
		while IFS= read -r inc; do
			CHECKS=$((CHECKS + 1))
			target=${inc%%/*}
			[ "$target" = dtrain ] && continue # the public API
			case " ${USES[$mod]} " in
			*" $target "*) ;;
			*) fail "src/$mod/$(basename "$f") includes $inc: $mod may use only ${USES[$mod]}" ;;
			esac
		done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f")
	done
done

hits=$(grep -rn 'kv_server\|DT_APP_KV\|DT_APP_COLL' "$SRC/src/core" "$SRC/src/net")
[ -z "$hits" ] || fail "the core or the transport names an app: $hits"
# exit() only where a public entry point ends a process that served its
# role (dt__exit_served); the command-line tool is a program, not library.
hits=$(grep -rnE '(^|[^_a-z])(_exit|exit|abort)\(' "$SRC/src" --include=*.c |
	grep -v '^'"$SRC"'/src/cli/' | grep -v 'dt__exit_served')
home=$(grep -rl '^dt__exit_served(' "$SRC/src" --include=*.c)
nexit=$(printf '%s\n' "$hits" | grep -c .)
nhome=$(printf '%s\n' "$hits" | grep -c "^$home:")
[ -n "$home" ] && [ "$nexit" = 2 ] && [ "$nhome" = 2 ] ||
	fail "exit/abort in the library outside dt__exit_served: $hits"

echo "[layers] $CHECKS includes checked against the layer map"
[ "$FAILED" = 0 ] && echo "[layers] PASS" || exit 1
