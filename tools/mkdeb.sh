#!/bin/bash
# mkdeb.sh [BUILD [OUTDIR]] - a Debian package of dtrain, made with
# dpkg-deb from what `cmake --install BUILD --prefix /usr` installs:
# OUTDIR/dtrain_<version>_<arch>.deb. One package holds everything (the
# command, the examples as dtrain-example-*, the shared and static
# libraries, headers, dtrain.pc, man pages, docs); docs/getting-started.md says so.
# Without BUILD, the tree is built first in build-deb/ (tests left out).
#   bash tools/mkdeb.sh              # what `make deb` runs
#   bash tools/mkdeb.sh build /tmp   # package an existing build
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-}
out=${2:-$src}
if [ -z "$build" ]; then
	build=$src/build-deb
	echo "[deb] build in $build (log: $build/deb-build.log)"
	mkdir -p "$build"
	{ cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DDT_BUILD_TESTS=OFF && cmake --build "$build" -j"$(nproc)"; } \
		>"$build/deb-build.log" 2>&1 || { tail -30 "$build/deb-build.log"; exit 1; }
fi
version=$("$build/dtrain" version | awk '{print $2}')
arch=$(dpkg --print-architecture)
stage=$(mktemp -d "${TMPDIR:-/tmp}/dtrain-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT
root=$stage/dtrain_${version}_$arch
mkdir -p "$root"

echo "[deb] stage the install tree"
DESTDIR="$root" cmake --install "$build" --prefix /usr >"$stage/install.log"
# (a manifest of a staged install is no one's to uninstall from)
rm -f "$build/install_manifest.txt"

# Debian's rules for what a package ships: stripped objects (the debug
# information stays in the build), compressed man pages and changelog, a
# copyright file, files owned by root.
find "$root/usr/bin" -type f -exec strip --strip-unneeded \
	--remove-section=.comment --remove-section=.note {} +
find "$root/usr/lib" -name '*.so.*' -type f -exec strip --strip-unneeded \
	--remove-section=.comment --remove-section=.note {} +
find "$root/usr/lib" -name '*.a' -exec strip --strip-debug \
	--enable-deterministic-archives {} +
# The Python binding, when the build has it: Debian's python3 reads the
# distribution's packages from /usr/lib/python3/dist-packages (the build
# was configured for another prefix, which puts it under python3.X), and
# the package then depends on the python3 the extension was built for.
pydeps=
pyrecs=
for d in "$root"/usr/lib/python3.*/dist-packages; do
	[ -d "$d" ] || continue
	mkdir -p "$root/usr/lib/python3/dist-packages"
	mv "$d"/* "$root/usr/lib/python3/dist-packages/"
	rm -rf "$(dirname "$d")"
done
if [ -d "$root/usr/lib/python3/dist-packages/dtrain" ]; then
	find "$root/usr/lib/python3/dist-packages" -name '*.so' -type f \
		-exec strip --strip-unneeded --remove-section=.comment \
		--remove-section=.note {} +
	pyver=$(ls "$root"/usr/lib/python3/dist-packages/dtrain/_dtrain.cpython-3*-*.so |
		sed -n 's/.*cpython-3\([0-9]*\)-.*/\1/p' | head -1)
	[ -n "$pyver" ] && pydeps=", python3 (>= 3.$pyver~), python3 (<< 3.$((pyver + 1)))"
	pyrecs="Recommends: python3-numpy, python3-torch"
fi
find "$root/usr/share/man" -type f -exec gzip -9n {} +
doc=$root/usr/share/doc/dtrain
cat >"$doc/copyright" <<TXT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: dtrain
Comment: The source tree states no license of its own.

Files: *
Copyright: the dtrain authors
License: unstated
 The dtrain source tree carries no license file.
TXT
{
	echo "dtrain ($version) unstable; urgency=medium"
	echo
	echo "  * Package built from the source tree."
	echo
	echo " -- dtrain maintainers <maintainers@dtrain.example.org>  $(date -R -d @"${SOURCE_DATE_EPOCH:-$(git -C "$src" log -1 --format=%ct 2>/dev/null || date +%s)}")"
} | gzip -9n >"$doc/changelog.gz"

mkdir -p "$root/DEBIAN"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<TXT
Package: dtrain
Version: $version
Architecture: $arch
Maintainer: dtrain maintainers <maintainers@dtrain.example.org>
Installed-Size: $size
Depends: libc6 (>= 2.34), libopenblas0 | libopenblas0-pthread, libsodium23, zlib1g, libgfortran5$pydeps
${pyrecs:+$pyrecs
}Suggests: libopenblas-dev, libsodium-dev, zlib1g-dev, pkg-config, openmpi-bin, slurm-client, rsync, openssh-client
Section: science
Priority: optional
Description: distributed deep-learning training in C
 A parameter server (MXNet's KVStore: dist_sync, dist_async, gradient
 compression, recovery) and Horovod-style collectives, the dtrain
 launcher (local, ssh, mpirun, Slurm, Kubernetes), a small trainer and
 examples (dtrain-example-*). The package also holds the library's
 headers, static and shared libraries and pkg-config file; linking
 statically needs the -dev packages it suggests.
TXT
# The shared library: its soname for dpkg-shlibdeps of other packages, and
# the ldconfig trigger that updates the linker cache.
echo "libdtrain 0 dtrain (>= $version)" >"$root/DEBIAN/shlibs"
echo "activate-noawait ldconfig" >"$root/DEBIAN/triggers"
# Python writes the bytecode of the package's modules beside them when it
# first imports them (as root); it is no file of the package, so dpkg
# would leave it, and the empty package's directory with it, which Python
# then takes for a namespace package called dtrain. Removed before the
# package's files go, as py3clean does for Debian's Python packages.
cat >"$root/DEBIAN/prerm" <<'TXT'
#!/bin/sh
set -e
rm -rf /usr/lib/python3/dist-packages/dtrain/__pycache__
TXT
chmod 0644 "$root/DEBIAN/"*
chmod 0755 "$root/DEBIAN/prerm"

echo "[deb] dpkg-deb --build"
mkdir -p "$out"
dpkg-deb --root-owner-group -Zxz --build "$root" "$out/dtrain_${version}_$arch.deb" >/dev/null
echo "[deb] $out/dtrain_${version}_$arch.deb"
