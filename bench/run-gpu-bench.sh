#!/usr/bin/env bash
# kvattn's GPU benchmarks in one command, for a machine with an NVIDIA GPU and
# driver (docs/benchmarks.md explains every column):
#
#   bash bench/run-gpu-bench.sh [--quick]     # logs under $OUT or build/gpu-bench
#
# 1. builds kvattn in Release (scripts/setup.sh; reuses an existing build);
# 2. kvattn-bench --target=gpu: the copy bandwidth, then the cached-append
#    shapes (L x P x D, bf16, GQA 32/8) timed with CUDA events;
# 3. if PyTorch imports: bench/compare_torch.py, the same shapes through
#    torch SDPA (causal_lower_right) and kvattn on torch's stream, one table
#    with the ratios and the errors; else says it is skipped.
# Everything is printed and kept in $OUT. Budget: a few minutes (each stage
# is cut at $KVATTN_BENCH_TIMEOUT seconds, default 240). Exits non-zero if a
# stage failed. KVATTN_SKIP_SETUP=1 uses the tools already in
# $KVATTN_BUILD_DIR (a GPU machine that cannot build; scripts/device-run.sh).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${KVATTN_BUILD_DIR:-$root/build}
out=${OUT:-$build/gpu-bench}
limit=${KVATTN_BENCH_TIMEOUT:-240}
mkdir -p "$out"
export KVATTN_BUILD_TYPE=Release

quick=()
[[ ${1:-} == --quick ]] && quick=(--quick)

echo "== kvattn GPU benchmarks; logs in $out"
if [[ ${KVATTN_SKIP_SETUP:-0} == 1 ]]; then
  [[ -x $build/bin/kvattn-bench ]] ||
    { echo "KVATTN_SKIP_SETUP=1 but $build/bin/kvattn-bench is missing"; exit 1; }
elif ! bash "$root/scripts/setup.sh" > "$out/setup.log" 2>&1; then
  echo "setup/build failed:"; tail -20 "$out/setup.log"; exit 1
fi
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || echo "warning: nvidia-smi failed" >&2
head -15 "$out/nvidia-smi.txt" 2>/dev/null

status=0
echo
echo "== kvattn-bench --target=gpu ${quick[*]}"
timeout "$limit" "$build/bin/kvattn-bench" --target=gpu "${quick[@]}" \
  2>&1 | tee "$out/kvattn-bench.txt"
rc=${PIPESTATUS[0]}
[[ $rc == 124 ]] && echo "kvattn-bench: cut after $limit s"
[[ $rc != 0 ]] && status=1

# On an H100/H200 (compute capability 9.0) the default chip is sm_90a (the
# wgmma kernels, docs/gpu-lowering.md, "Hopper": on contiguous caches their
# K/V arrive by TMA through the mbarrier ring, paged ones by cp.async); the
# mma.sync kernels of sm_90 run as well, for the A/B.
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1)
if [[ $cc == 9.0 ]]; then
  echo
  echo "== kvattn-bench --target=gpu --chip=sm_90 ${quick[*]}"
  timeout "$limit" "$build/bin/kvattn-bench" --target=gpu --chip=sm_90 \
    "${quick[@]}" 2>&1 | tee "$out/kvattn-bench-sm90.txt"
  rc=${PIPESTATUS[0]}
  [[ $rc == 124 ]] && echo "kvattn-bench --chip=sm_90: cut after $limit s"
  [[ $rc != 0 ]] && status=1
  # The same without the consumers' ping-pong (docs/gpu-lowering.md,
  # "Ping-pong"): the A/B that measures it.
  echo
  echo "== kvattn-bench --target=gpu --chip=sm_90a --ping-pong=false ${quick[*]}"
  timeout "$limit" "$build/bin/kvattn-bench" --target=gpu --chip=sm_90a \
    --ping-pong=false "${quick[@]}" 2>&1 | tee "$out/kvattn-bench-sm90a-nopp.txt"
  rc=${PIPESTATUS[0]}
  [[ $rc == 124 ]] && echo "kvattn-bench --ping-pong=false: cut after $limit s"
  [[ $rc != 0 ]] && status=1
fi

# DeepSeek MLA decode (the latent form, paged 64, 16 and 128 heads) on the
# device's default chip (sm_90a on an H100/H200: the wgmma latent kernel at
# 128 heads), and there again with --chip=sm_90: GB/s and TFLOP/s beside
# FlashMLA's published figures (docs/benchmarks.md, "MLA decode on Hopper").
mla_chips=("")
[[ $cc == 9.0 ]] && mla_chips+=("--chip=sm_90")
for chipflag in "${mla_chips[@]}"; do
  echo
  echo "== kvattn-bench --target=gpu --mla $chipflag ${quick[*]}"
  timeout "$limit" "$build/bin/kvattn-bench" --target=gpu --mla $chipflag \
    "${quick[@]}" 2>&1 | tee "$out/kvattn-bench-mla${chipflag:+-sm90}.txt"
  rc=${PIPESTATUS[0]}
  [[ $rc == 124 ]] && echo "kvattn-bench --mla $chipflag: cut after $limit s"
  [[ $rc != 0 ]] && status=1
done

echo
if python3 -c 'import torch' > /dev/null 2>&1; then
  echo "== bench/compare_torch.py ${quick[*]}"
  timeout "$limit" python3 "$root/bench/compare_torch.py" \
    --build-dir "$build" "${quick[@]}" 2>&1 | tee "$out/compare_torch.txt"
  rc=${PIPESTATUS[0]}
  [[ $rc == 124 ]] && echo "compare_torch.py: cut after $limit s"
  [[ $rc != 0 ]] && status=1
else
  echo "== bench/compare_torch.py skipped: python3 cannot import torch" \
    | tee "$out/compare_torch.txt"
fi
exit $status
