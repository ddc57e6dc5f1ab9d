#!/usr/bin/env bash
# Builds Debian's own Abseil (the source of the installed libabsl-dev, from the Debian archive, its
# checksums checked against the package's .dsc and Debian's patches applied) with ThreadSanitizer,
# as shared libraries with the installed ones' names, into DIR/lib:
#
#     scripts/sanitize/absl-tsan.sh DIR
#
# Why: ThreadSanitizer sees a lock only where the locking code is instrumented. Debian's
# libabsl_synchronization is not, so every absl::Mutex would look like no lock at all and every
# guarded member like a race. The libraries built here have the same version, options and
# sonames as the installed ones; with LD_LIBRARY_PATH=DIR/lib they replace them in every process
# of a test, gRPC's own use of Abseil included. Does nothing when DIR/lib already holds this
# version. Needs curl and the Debian archive (PSTRAIN_DEBIAN_MIRROR, default deb.debian.org):
# exits 77 when the archive cannot be reached (ctest reports make test's tsan_smoke as skipped).
# Compiles through ccache where there is one, so a fresh build folder rebuilds it in about a minute.
set -euo pipefail

dir=${1:?usage: $0 DIR}
version=$(dpkg-query -W -f='${Version}' libabsl-dev)
version=${version#*:}  # no epoch in the archive's file names
if [ "$(cat "$dir/lib/.version" 2>/dev/null)" = "$version" ]; then
  exit 0
fi
mirror=${PSTRAIN_DEBIAN_MIRROR:-http://deb.debian.org/debian}
pool="$mirror/pool/main/a/abseil"
upstream=${version%-*}
work="$dir/src"
rm -rf "$work" "$dir/lib" "$dir/build"
mkdir -p "$work"
echo "absl-tsan.sh: fetching abseil $version from $pool"
fetch() {  # FILE
  curl -fsS --retry 2 --connect-timeout 20 -o "$work/$1" "$pool/$1" || {
    echo "absl-tsan.sh: SKIP: cannot fetch $pool/$1 (no Debian archive here? PSTRAIN_DEBIAN_MIRROR names another)" >&2
    exit 77
  }
}
fetch "abseil_${version}.dsc"
mv "$work/abseil_${version}.dsc" "$work/abseil.dsc"
for f in "abseil_${upstream}.orig.tar.gz" "abseil_${version}.debian.tar.xz"; do
  fetch "$f"
  want=$(awk -v f="$f" '/^Checksums-Sha256:/ {on=1; next} /^[^ ]/ {on=0} on && $3 == f {print $1}' "$work/abseil.dsc")
  got=$(sha256sum "$work/$f" | cut -d' ' -f1)
  if [ -z "$want" ] || [ "$want" != "$got" ]; then
    echo "absl-tsan.sh: $f: sha256 $got, expected '$want' (from abseil_${version}.dsc)" >&2
    exit 1
  fi
done
tar -xzf "$work/abseil_${upstream}.orig.tar.gz" -C "$work"
src=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'abseil*' | head -1)
tar -xJf "$work/abseil_${version}.debian.tar.xz" -C "$src"
while read -r patch; do
  case "$patch" in ''|'#'*) continue ;; esac
  patch -s -d "$src" -p1 < "$src/debian/patches/$patch"
done < "$src/debian/patches/series"

# As debian/rules configures its shared build, plus the sanitizer.
launcher=()
if command -v ccache > /dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$src" -B "$dir/build" -DCMAKE_CXX_STANDARD=17 -DBUILD_SHARED_LIBS=ON -DBUILD_TESTING=OFF \
  "${launcher[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="-fsanitize=thread -fdebug-prefix-map=$dir=." \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" > "$dir/configure.log"
cmake --build "$dir/build" -j "${SANITIZE_BUILD_JOBS:-2}" > "$dir/build.log"
mkdir -p "$dir/lib"
find "$dir/build" -name 'libabsl_*.so*' -exec cp -P {} "$dir/lib/" \;
count=$(find "$dir/lib" -name 'libabsl_*.so.*' -type f | wc -l)
if [ "$count" = 0 ]; then
  echo "absl-tsan.sh: the build left no libabsl_*.so.* (see $dir/build.log)" >&2
  exit 1
fi
echo "$version" > "$dir/lib/.version"
rm -rf "$work" "$dir/build"
echo "absl-tsan.sh: $count instrumented Abseil libraries in $dir/lib"
