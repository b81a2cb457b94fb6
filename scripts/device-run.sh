#!/usr/bin/env bash
# kvattn's GPU checks and benchmarks on a GPU machine that cannot build
# kvattn, from the bundle scripts/device-bundle.sh made (build-device/ in
# the checkout). Run from anywhere on that machine:
#
#   bash scripts/device-run.sh [checks] [torch] [bench] [compare]
#                              [compare-sm90] [bench-full] [profile-mla] [ab]
#
# (default: checks bench compare). checks: test/gpu/run-gpu-checks.sh with
# KVATTN_GPU_JOBS cases at once (default: the machine's cores, up to 16);
# bench: bench/run-gpu-bench.sh --quick (kvattn-bench's shapes, MLA, and
# compare_torch.py's two quick shapes); torch: kvattn.torch's CUDA tests
# alone (python/torch_gpu_tests, also part of checks); compare:
# bench/compare_torch.py on all its shapes, compare-sm90 the same with
# kvattn's mma.sync kernels on an H100/H200 (whose default is sm_90a);
# bench-full: bench/run-gpu-bench.sh without --quick; profile-mla: Nsight
# Compute (ncu, clocks left alone) on the MLA decode kernels, B = 64,
# 4,096 keys, 16 and 128 heads, sm_90a and sm_90 (a text report); ab:
# bench/schedule_ab.py, each schedule switch no GPU has timed (heaviest-
# first, ping-pong, the intra-warpgroup overlap, lazy rescaling, the
# producer warpgroup, two V stages, the split rule) against the default,
# with its speedup per shape.
# Each stage is cut at KVATTN_STAGE_TIMEOUT seconds (default: 240 for
# checks, 180 for bench, 120 for compare and torch, 600 for bench-full,
# 240 for profile-mla and ab). The
# summaries are printed; each stage's logs come back as one tarball in $OUT
# (default: build-device/out), so a caller that returns few files gets all.
# Exits non-zero if a stage failed.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bundle=${KVATTN_DEVICE_BUNDLE:-$root/build-device}
out=${OUT:-$bundle/out}
work=$(mktemp -d /tmp/kvattn-device.XXXXXX)
mkdir -p "$out"
stages=("$@")
((${#stages[@]})) || stages=(checks bench compare)

lib=$bundle/lib/libkvattn_c.so
if [[ ! -f $lib ]]; then
  [[ -f $lib.xz ]] || { echo "device-run: no $lib(.xz): run scripts/device-bundle.sh first"; exit 1; }
  python3 -c 'import lzma, shutil, sys
with lzma.open(sys.argv[1]) as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 24)' "$lib.xz" "$lib.part" && mv "$lib.part" "$lib"
fi
if ldd "$lib" | grep -q 'not found'; then
  echo "device-run: libkvattn_c.so cannot load here:"; ldd "$lib" | grep 'not found'; exit 1
fi
# libdevice from the bundle where this machine's CUDA has none (CUDA_PATH is
# the second place kvattn looks, after CUDA_HOME).
if [[ ! -f ${CUDA_HOME:-/usr/local/cuda}/nvvm/libdevice/libdevice.10.bc ]]; then
  export CUDA_PATH=$bundle/cuda
  echo "device-run: libdevice from the bundle"
fi
cores=$(nproc); ((cores > 16)) && cores=16
export KVATTN_BUILD_DIR=$bundle KVATTN_SKIP_SETUP=1 KVATTN_TORCH_PYTHON=python3
export KVATTN_GPU_JOBS=${KVATTN_GPU_JOBS:-$cores}
export KVATTN_CACHE_DIR=$work/kernel-cache KVATTN_BENCH_TIMEOUT=${KVATTN_BENCH_TIMEOUT:-60}
export PYTHONUNBUFFERED=1

nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,clocks.max.sm \
  --format=csv,noheader 2>&1 | tee "$out/device.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' \
  2>&1 | tee -a "$out/device.txt"

status=0
stage() { # stage NAME SECONDS COMMAND...
  local name=$1 limit=${KVATTN_STAGE_TIMEOUT:-$2}; shift 2
  local start=$(date +%s)
  echo; echo "==== $name"
  OUT=$work/$name timeout -k 10 "$limit" "$@" > "$work/$name.log" 2>&1
  local rc=$?
  [[ $rc == 124 ]] && echo "$name: cut after $limit s" >> "$work/$name.log"
  ((rc)) && status=1
  tar -C "$work" -czf "$out/$name-logs.tar.gz" "$name" "$name.log" 2>/dev/null
  echo "$name: exit $rc after $(( $(date +%s) - start )) s"
}
for s in "${stages[@]}"; do
  case $s in
    checks)
      stage gpu-checks 240 bash "$root/test/gpu/run-gpu-checks.sh"
      # What did not pass (the whole table is in the tarball).
      grep -v ' PASS ' "$work/gpu-checks/summary.txt" 2>/dev/null | head -60
      tail -3 "$work/gpu-checks.log" ;;
    bench)
      stage gpu-bench 180 bash "$root/bench/run-gpu-bench.sh" --quick
      grep -v '^\[' "$work/gpu-bench.log" | tail -150 ;;
    torch)
      stage torch-cuda 120 env KVATTN_LIBRARY="$lib" PYTHONPATH="$root/python" \
        python3 -B -m pytest -q -p no:cacheprovider "$root/python/torch_gpu_tests"
      tail -25 "$work/torch-cuda.log" ;;
    compare)
      stage compare-torch 120 python3 "$root/bench/compare_torch.py" \
        --build-dir "$bundle"
      tail -40 "$work/compare-torch.log" ;;
    compare-sm90)
      stage compare-torch-sm90 120 python3 "$root/bench/compare_torch.py" \
        --build-dir "$bundle" --chip sm_90
      tail -40 "$work/compare-torch-sm90.log" ;;
    profile-mla)
      ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
      [[ -x $ncu ]] || { echo "profile-mla: no ncu"; status=1; continue; }
      stage profile-mla 240 bash -c '
        for chip in sm_90a sm_90; do
          "$0" --clock-control none -k regex:kvattn -c 8 \
            --section SpeedOfLight --section MemoryWorkloadAnalysis \
            --section LaunchStats --section Occupancy \
            --section WarpStateStats --section SchedulerStats \
            "$1/bin/kvattn-bench" --target=gpu --mla --chip=$chip --batch=64 \
            --prefixes=4096 --warmup=0 --repeats=1 --flush-mib=1 --copy-mib=1
        done' "$ncu" "$bundle"
      grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|Block Size|Grid Size|Shared Memory Config|Warp Cycles Per Issued|Issued Warp|No Eligible|Mem Busy|Max Bandwidth|Mem Pipes Busy|L1/TEX Cache Throughput" \
        "$work/profile-mla.log" | head -160 ;;
    ab)
      stage schedule-ab 240 python3 "$root/bench/schedule_ab.py" \
        --build "$bundle"
      grep -E '^(ratio|==)' "$work/schedule-ab.log" | head -120 ;;
    bench-full)
      stage gpu-bench-full 600 bash "$root/bench/run-gpu-bench.sh"
      grep -v '^\[' "$work/gpu-bench-full.log" | tail -160 ;;
    *) echo "device-run: unknown stage $s"; status=1 ;;
  esac
done
exit $status
