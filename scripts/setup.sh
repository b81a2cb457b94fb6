#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for kvattn and builds it. Idempotent:
# packages already installed are not reinstalled, an existing build tree is
# reused (ccache makes a rebuild of a clean tree take seconds).
#
#   bash scripts/setup.sh            # as root, or with sudo available
#
# Environment: KVATTN_BUILD_DIR (default: build/), KVATTN_BUILD_TYPE
# (default: Release), KVATTN_JOBS (default: ninja's choice).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${KVATTN_BUILD_DIR:-$root/build}
build_type=${KVATTN_BUILD_TYPE:-Release}

# The exact Debian packages kvattn builds and tests with.
packages=(
  # MLIR/LLVM 22: libMLIR.so, libLLVM.so, headers, CMake packages,
  # mlir-tblgen, lit, FileCheck, not, count.
  libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools
  # Toolchain and build.
  g++ cmake ninja-build ccache lld python3
  # Unit tests.
  libgtest-dev googletest
  # The Python package's tests (python/tests, run by lit with /usr/bin/python3);
  # python3-venv for the PyTorch environment below.
  python3-numpy python3-pytest python3-venv
  # The emulated GPU: fibers (lib/GpuEmu).
  libboost-context-dev
  # The CPU target's threads: LLVM's OpenMP runtime, loaded by the JIT.
  libomp-22-dev
  # MLIR/LLVM linked from their archives (KVATTN_STATIC_LLVM, the bundle of
  # scripts/device-bundle.sh): LLVM's CMake exports name libzstd's files.
  libzstd-dev xz-utils
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install packages" >&2; exit 1; }
    sudo=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -q
  "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

# PyTorch and transformers for kvattn.torch and its tests (lit runs them with
# this environment's python): the pinned set of python/requirements-torch.txt
# in a virtual environment of the build tree over Debian's python3 (its NumPy
# and pytest). Installed again only when the pins change. Measured on the
# 2-core machine: about 70 s and 5.5 GB on a fresh machine (pip's cache makes
# a re-install ~40 s). KVATTN_TORCH=0 skips it (the torch tests then fail:
# they are not optional).
venv=${KVATTN_TORCH_VENV:-$build/torch-venv}
requirements=$root/python/requirements-torch.txt
if [[ ${KVATTN_TORCH:-1} != 0 ]] &&
   ! cmp -s "$requirements" "$venv/.kvattn-requirements" 2>/dev/null; then
  echo "setup: installing PyTorch and transformers into $venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install --disable-pip-version-check -q -r "$requirements"
  cp "$requirements" "$venv/.kvattn-requirements"
fi

if [[ ! -f $build/build.ninja ]]; then
  echo "setup: configuring $build ($build_type)"
  cmake -G Ninja -S "$root" -B "$build" \
    -DCMAKE_BUILD_TYPE="$build_type" \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit
fi

echo "setup: building"
jobs=()
[[ -n ${KVATTN_JOBS:-} ]] && jobs=(-j "$KVATTN_JOBS")
cmake --build "$build" "${jobs[@]}"
echo "setup: done; tools are in $build/bin"
