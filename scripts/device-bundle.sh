#!/usr/bin/env bash
# Prepares kvattn for a GPU machine that cannot build it: one with an NVIDIA
# driver, CUDA and Python but no MLIR/LLVM 22 and no network (the device
# machines of this project's workplace). Run here, after scripts/setup.sh:
#
#   bash scripts/device-bundle.sh [DEST]        # DEST: build-device/
#
# 1. configures a second build tree with KVATTN_STATIC_LLVM=ON (CMakeLists.txt:
#    MLIR and LLVM from their archives; libkvattn_c.so holds kvattn, MLIR and
#    LLVM once, the tools link it through $ORIGIN/../lib) and builds
#    kvattn-run, kvattn-bench, kvattn-compile and libkvattn_c.so;
# 2. lays DEST out as a build tree the GPU scripts accept (bin/, lib/):
#    the tools and the library stripped, the library xz-compressed (it is
#    ~165 MB stripped, ~30 MB compressed; scripts/device-run.sh unpacks it),
#    LLVM's OpenMP runtime beside it (the CPU target's threads; the JIT looks
#    there when the build's path is missing) and libdevice.10.bc for a
#    machine whose CUDA lacks it.
#
# DEST is ignored by git (build*/); carry it to the machine with the
# checkout, then run scripts/device-run.sh there. It needs only glibc 2.36+,
# libstdc++, libz and libzstd from that machine (and, for the GPU, its
# driver).
#
# Environment: KVATTN_STATIC_BUILD_DIR (default build-static/; the first
# build compiles kvattn once more, ~30 min on 2 cores; later ones relink).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
static=${KVATTN_STATIC_BUILD_DIR:-$root/build-static}
dest=${1:-$root/build-device}
cuda=${CUDA_HOME:-/usr/local/cuda}

for p in libzstd-dev xz-utils libmlir-22-dev llvm-22-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
    { echo "device-bundle: package $p is missing: run scripts/setup.sh first" >&2; exit 1; }
done
libdevice=$cuda/nvvm/libdevice/libdevice.10.bc
[[ -f $libdevice ]] || { echo "device-bundle: $libdevice not found" >&2; exit 1; }

if [[ ! -f $static/build.ninja ]]; then
  cmake -G Ninja -S "$root" -B "$static" -DCMAKE_BUILD_TYPE=Release \
    -DKVATTN_STATIC_LLVM=ON -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit
else
  cmake -DKVATTN_STATIC_LLVM=ON "$static" > /dev/null
fi
cmake --build "$static" --target kvattn-run kvattn-bench kvattn-compile \
  KVAttnCAPIShared

rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib" "$dest/cuda/nvvm/libdevice"
for tool in kvattn-run kvattn-bench kvattn-compile; do
  strip -o "$dest/bin/$tool" "$static/bin/$tool"
done
strip --strip-unneeded -o "$dest/lib/libkvattn_c.so" "$static/lib/libkvattn_c.so"
xz -T0 -6 "$dest/lib/libkvattn_c.so"
cp "$libdevice" "$dest/cuda/nvvm/libdevice/"
libomp=$(sed -n 's/^KVATTN_LIBOMP:FILEPATH=//p' "$static/CMakeCache.txt")
cp -L "$libomp" "$dest/lib/"
# The tools must not need anything the bundle lacks beyond the C/C++
# runtime, libz and libzstd.
needed=$(readelf -d "$static/lib/libkvattn_c.so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u | tr '\n' ' ')
for lib in $needed; do
  case $lib in
    libc.so.6|libm.so.6|libstdc++.so.6|libgcc_s.so.1|ld-linux-x86-64.so.2|libz.so.1|libzstd.so.1) ;;
    *) echo "device-bundle: libkvattn_c.so needs $lib, which the bundle does not carry" >&2; exit 1 ;;
  esac
done
echo "device-bundle: $(du -sh "$dest" | cut -f1) in $dest (libkvattn_c.so needs: $needed)"
