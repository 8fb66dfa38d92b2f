#!/bin/bash
# install.sh - `cmake --install` (what `make install` runs) into a
# temporary DESTDIR: the tree holds the command, the examples, headers, the
# static and the shared library (with its soname), dtrain.pc, man pages and
# docs; a small program built against it with pkg-config, once shared and
# once static, runs as the workers of a job started by the installed
# `dtrain launch`; then the files are removed again (`make uninstall`'s
# manifest) and nothing is left.
T_SCALE=${DT_TEST_TIME_SCALE:-1} # the time limits below, scaled under a sanitizer
. "$(dirname "$0")/cluster_lib.bash"

PREFIX=/usr/local
DEST="$T_DIR/root"
ROOT="$DEST$PREFIX"
MANIFEST="$DTRAIN_BUILD/install_manifest.txt"

DESTDIR="$DEST" cmake --install "$DTRAIN_BUILD" --prefix "$PREFIX" \
	>"$T_DIR/install.log" 2>&1 || fail "cmake --install: $(tail -5 "$T_DIR/install.log")"
log "installed into DESTDIR $DEST"

# (the library directory is the platform's: lib, lib64, lib/<triplet>)
pcfile=$(find "$ROOT" -name dtrain.pc | head -1)
[ -n "$pcfile" ] || fail "no dtrain.pc under $ROOT"
libdir=$(sed -n 's/^libdir=\${prefix}\///p' "$pcfile")
[ -n "$libdir" ] || fail "dtrain.pc names no libdir under the prefix"
for f in bin/dtrain bin/dtrain-example-linreg bin/dtrain-example-mnist \
	bin/dtrain-example-allreduce bin/dtrain-example-hello_cluster \
	bin/dtrain-example-sparse_linear include/dtrain/dtrain.h \
	include/dtrain/kv.h "$libdir/libdtrain.a" "$libdir/libdtrain.so" \
	"$libdir/libdtrain.so.0" "$libdir/pkgconfig/dtrain.pc" \
	share/man/man1/dtrain.1 share/man/man1/dtrain-launch.1 \
	share/man/man7/dtrain-env.7 share/doc/dtrain/README.md \
	share/doc/dtrain/getting-started.md; do
	[ -e "$ROOT/$f" ] || fail "missing from the install tree: $PREFIX/$f"
done
soname=$(objdump -p "$ROOT/$libdir/libdtrain.so" | awk '/SONAME/ {print $2}')
[ "$soname" = libdtrain.so.0 ] || fail "soname is '$soname', not libdtrain.so.0"
grep -q "^prefix=$PREFIX\$" "$ROOT/$libdir/pkgconfig/dtrain.pc" ||
	fail "dtrain.pc does not name the prefix $PREFIX"
log "tree complete; soname $soname"

# The program: one worker's push and pull through the KVStore, checked.
cat >"$T_DIR/prog.c" <<'C'
#include <dtrain/dtrain.h>
#include <stdio.h>

int
main(void)
{
	float v[4] = {1, 2, 3, 4}, g[4] = {1, 1, 1, 1}, out[4];
	dt_kv *kv;

	if (dt_kv_create("dist_sync", &kv) != DT_OK) {
		fprintf(stderr, "prog: %s\n", dt_errmsg());
		return 1;
	}
	if (dt_kv_init(kv, 3, v, 4) != DT_OK ||
	    dt_kv_push(kv, 3, g, 4) != DT_OK ||
	    dt_kv_pull(kv, 3, out, 4) != DT_OK) {
		fprintf(stderr, "prog: %s\n", dt_errmsg());
		dt_kv_destroy(kv);
		return 1;
	}
	/* No optimizer (MXNet's default): a round's pushes, summed,
	 * replace the value: 2 workers pushing ones leave twos. */
	printf("rank %d pulled %g %g %g %g\n", dt_kv_rank(kv), out[0],
	       out[1], out[2], out[3]);
	return dt_kv_destroy(kv) == DT_OK ? 0 : 1;
}
C
# (the .pc names $PREFIX; the staged tree is $ROOT until it is moved there)
export PKG_CONFIG_PATH="$ROOT/$libdir/pkgconfig"
pc() { pkg-config --define-variable=prefix="$ROOT" "$@" dtrain; }
cflags=$(pc --cflags) || fail "pkg-config --cflags dtrain"
libs=$(pc --libs) || fail "pkg-config --libs dtrain"
slibs=$(pc --static --libs) || fail "pkg-config --static --libs dtrain"
# The static link names the archive (-l:libdtrain.a), as the shared object
# beside it would otherwise be chosen; everything else is the .pc's.
# (a sanitizer build's library needs its runtime in the program too)
san=$(sed -n 's/^DT_SANITIZE:STRING=//p' "$DTRAIN_BUILD/CMakeCache.txt")
cflags="$cflags${san:+ -fsanitize=$san}"
cc -o "$T_DIR/prog_shared" "$T_DIR/prog.c" $cflags $libs \
	>"$T_DIR/cc.log" 2>&1 || fail "shared link ($libs): $(cat "$T_DIR/cc.log")"
cc -o "$T_DIR/prog_static" "$T_DIR/prog.c" $cflags ${slibs//-ldtrain/-l:libdtrain.a} \
	>"$T_DIR/cc.log" 2>&1 || fail "static link ($slibs): $(cat "$T_DIR/cc.log")"
LD_LIBRARY_PATH="$ROOT/$libdir" ldd "$T_DIR/prog_shared" | grep -q 'libdtrain.so.0 => '"$ROOT" ||
	fail "prog_shared does not load the installed libdtrain.so.0"
! ldd "$T_DIR/prog_static" | grep -q libdtrain || fail "prog_static loads libdtrain.so"
log "built with pkg-config: shared ($libs) and static ($slibs)"

for kind in shared static; do
	LD_LIBRARY_PATH="$ROOT/$libdir" timeout $((120 * T_SCALE)) "$ROOT/bin/dtrain" launch \
		-n 2 -s 1 -- "$T_DIR/prog_$kind" >"$T_DIR/job_$kind.log" 2>&1 ||
		fail "the $kind job failed: $(tail -20 "$T_DIR/job_$kind.log")"
	n=$(grep -c 'pulled 2 2 2 2$' "$T_DIR/job_$kind.log")
	[ "$n" = 2 ] || fail "$kind job: $n of 2 workers pulled 2 2 2 2: $(cat "$T_DIR/job_$kind.log")"
	log "$kind program: 2 workers, 1 server through the installed dtrain launch: 2 2 2 2"
done

# Uninstall as `make uninstall` does: every file the manifest names, under
# DESTDIR (the manifest names the files as installed, without it).
grep -q "^$PREFIX/bin/dtrain\$" "$MANIFEST" || fail "the manifest does not name $PREFIX/bin/dtrain"
sed "s|^|$DEST|" "$MANIFEST" | xargs -d '\n' rm -f --
left=$(find "$DEST" -type f | head -5)
[ -z "$left" ] || fail "left after uninstall: $left"
rm -f "$MANIFEST"
log "uninstalled: no file left"
