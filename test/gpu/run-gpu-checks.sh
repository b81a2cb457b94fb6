#!/usr/bin/env bash
# The GPU checks, for a machine with an NVIDIA GPU and driver.
#
#   bash test/gpu/run-gpu-checks.sh            # logs under $OUT or build/gpu-checks
#
# 1. builds kvattn in Release (scripts/setup.sh; reuses an existing build);
# 2. runs the case matrix of DESIGN §4 through kvattn-run --target=gpu --check
#    in f32, f16 and bf16 (each kvattn.attention compiled for the device's
#    default chip, launched through the runtime, compared with the scalar
#    reference); f16/bf16 with 16-aligned head dims run on tensor cores, so
#    bf16 runs a second time with --tensor-cores=false (the scalar lowering);
#    on a compute capability 9.0 GPU (H100/H200), whose default chip is
#    sm_90a (the wgmma kernels where a program fits them,
#    docs/gpu-lowering.md), bf16 and f16 run again with --chip=sm_90 (the
#    mma.sync kernels);
# 3. runs compute-sanitizer memcheck on four cases and racecheck/synccheck on
#    a tensor-core kernel (cp.async, ldmatrix and the barriers between them);
# 4. runs kvattn.torch's CUDA tests (python/torch_gpu_tests);
# 5. prints one summary table and exits non-zero if anything failed.
# Budget: a few minutes (each case compiles one kernel, ~0.1 s, and runs the
# reference on the host).
#
# Environment: KVATTN_BUILD_DIR (default build/); KVATTN_SKIP_SETUP=1 uses
# the tools already in it (a GPU machine that cannot build: one prepared by
# scripts/device-bundle.sh, see scripts/device-run.sh); KVATTN_TORCH_PYTHON,
# the python that has PyTorch (default: build/torch-venv/bin/python);
# KVATTN_GPU_JOBS, cases run at once (default 1).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${KVATTN_BUILD_DIR:-$root/build}
out=${OUT:-$build/gpu-checks}
mkdir -p "$out"
export KVATTN_BUILD_TYPE=Release

start=$(date +%s)
max_jobs=${KVATTN_GPU_JOBS:-1}
torch_python=${KVATTN_TORCH_PYTHON:-$build/torch-venv/bin/python}

echo "== kvattn GPU checks; logs in $out"
if [[ ${KVATTN_SKIP_SETUP:-0} == 1 ]]; then
  [[ -x $build/bin/kvattn-run ]] ||
    { echo "KVATTN_SKIP_SETUP=1 but $build/bin/kvattn-run is missing"; exit 1; }
elif ! bash "$root/scripts/setup.sh" > "$out/setup.log" 2>&1; then
  echo "setup/build failed:"; tail -20 "$out/setup.log"; exit 1
fi
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || echo "warning: nvidia-smi failed" >&2
head -15 "$out/nvidia-smi.txt" 2>/dev/null

run="python3 $root/test/Numerics/Inputs/attention_case.py --kvattn-run $build/bin/kvattn-run"

# name | case flags (see attention_case.py)
cases=(
  "prefill-37|--L 37 --S 37 --q-offset 0 --causal"
  "decode|--L 1 --S 100 --q-offset 99 --causal"
  "append|--L 5 --S 70 --q-offset 65 --causal"
  "gqa-batch-kvlen-lse|--B 2 --Hq 8 --Hkv 2 --L 4 --S 40 --q-offset 16,33 --kv-len 20,37 --causal --lse"
  "mqa|--Hq 4 --Hkv 1 --L 3 --S 20 --q-offset 17 --causal"
  "padding|--L 2 --S 9 --q-offset 7 --key-valid 0,1,0,1,1,1,1,1,1 --causal"
  "unused-slots|--L 3 --S 64 --q-offset 20 --kv-len 23 --causal"
  "window|--L 9 --S 80 --q-offset 71 --causal --window 7"
  "softcap|--L 4 --S 50 --q-offset 46 --causal --softcap 0.5 --scale 4"
  "all-masked|--B 2 --L 3 --S 10 --q-offset 2,0 --k-offset 0,5 --kv-len 0,10 --causal --lse"
  "dv-ne-d|--D 64 --Dv 32 --L 4 --S 33 --q-offset 29 --causal"
  "d128|--D 128 --L 8 --S 100 --q-offset 92 --causal"
  "d40|--D 40 --Dv 24 --L 5 --S 45 --q-offset 40 --causal"
  "p2048-l64|--D 64 --L 64 --S 2112 --q-offset 2048 --causal"
  "prefill-256-d128|--D 128 --Hq 4 --Hkv 2 --L 256 --S 256 --q-offset 0 --causal --lse"
  "explicit|--L 4 --S 12 --q-pos 20,21,25,30 --k-pos 0,2,4,6,8,10,12,14,16,18,20,22 --causal --lse"
  "explicit-window|--L 3 --S 8 --q-pos 9,12,14 --k-pos 0,2,5,7,9,11,12,13 --causal --window 6"
  "bool-mask|--B 2 --Hq 2 --Hkv 1 --L 5 --S 19 --mask bool"
  "float-mask|--L 5 --S 19 --mask float"
  "decode-static|--L 1 --S 100 --kv-len 57"
  "paged-decode-p16|--B 3 --Hq 8 --Hkv 2 --D 64 --L 1 --S 256 --page-size 16 --q-offset 99,0,255 --kv-len 100,1,256 --causal --lse"
  "paged-p1|--B 3 --Hq 8 --Hkv 2 --D 32 --L 4 --S 40 --page-size 1 --q-offset 33,16,0 --kv-len 37,20,4 --causal"
  "split-decode-7|--B 2 --Hq 8 --Hkv 2 --D 128 --L 1 --S 1000 --q-offset 999,500 --kv-len 1000,501 --causal --lse|--split-kv 7"
  "split-paged-3|--B 3 --Hq 8 --Hkv 2 --D 64 --L 4 --S 256 --page-size 16 --q-offset 99,0,252 --kv-len 103,4,256 --causal|--split-kv 3"
  "split-more-than-blocks|--L 2 --S 40 --q-offset 38 --causal --lse|--split-kv 7 --block-n 16"
  "unpacked-gqa-decode|--B 2 --Hq 8 --Hkv 2 --D 64 --L 1 --S 300 --q-offset 299,100 --kv-len 300,101 --causal|--pack-gqa=false"
  "paged-append-p64|--B 3 --Hq 8 --Hkv 2 --D 128 --L 16 --S 320 --page-size 64 --q-offset 200,0,300 --kv-len 216,16,316 --causal --extra-pages 1"
  "rows-150-d64|--D 64 --L 150 --S 150 --q-offset 0 --causal --lse"
  "paged-p64-l100-d128|--B 2 --Hq 8 --Hkv 2 --D 128 --L 100 --S 320 --page-size 64 --q-offset 200,150 --kv-len 300,250 --causal --extra-pages 1"
  # sm_90a: the TMA + mbarrier ring of the wgmma kernels (contiguous caches;
  # short last blocks, kv_len, GQA packing, split, both head dims).
  "tma-d128-kvlen|--D 128 --L 100 --S 241 --q-offset 141 --kv-len 230 --causal --lse"
  "tma-d64-kvlen|--D 64 --L 100 --S 241 --q-offset 141 --kv-len 230 --causal"
  "tma-gqa-packed|--B 2 --Hq 8 --Hkv 2 --D 128 --L 16 --S 300 --q-offset 200,250 --kv-len 240,290 --causal --lse"
  "tma-split-3|--B 2 --Hq 4 --Hkv 2 --D 128 --L 64 --S 700 --q-offset 636,300 --kv-len 700,364 --causal --lse|--split-kv 3"
  # sm_90a: two consumer warpgroups (128 rows, 128-key blocks), GQA packed to
  # 128 rows, paged with one TMA box per page (pages of 16 and 32).
  "wg2-d128-kvlen|--D 128 --L 200 --S 300 --q-offset 100 --kv-len 290 --causal --lse"
  "wg2-gqa-packed-128|--B 2 --Hq 8 --Hkv 2 --D 128 --L 32 --S 300 --q-offset 200,250 --kv-len 240,290 --causal --lse"
  "wg2-paged-p16|--B 2 --Hq 4 --Hkv 2 --D 128 --L 130 --S 400 --page-size 16 --q-offset 260,0 --kv-len 390,130 --causal"
  "wg2-paged-p32|--B 3 --Hq 8 --Hkv 2 --D 128 --L 70 --S 320 --page-size 32 --q-offset 230,100,0 --kv-len 300,170,61 --causal --extra-pages 1"
  # sm_90a: wgmma at head dims 256 and 192 (64- and 96-key blocks), paged
  # with one TMA box per page, Dv != D.
  "wg2-d256-kvlen|--D 256 --L 128 --S 300 --q-offset 172 --kv-len 290 --causal --lse"
  "wg2-d192|--D 192 --L 128 --S 300 --q-offset 172 --causal --lse"
  "wg2-d256-paged-p16|--B 2 --Hq 8 --Hkv 2 --D 256 --L 100 --S 336 --page-size 16 --q-offset 200,150 --kv-len 300,250 --causal"
  "wg2-d256-dv128|--D 256 --Dv 128 --L 128 --S 300 --q-offset 172 --causal"
)

# On a compute capability 9.0 device the default chip is sm_90a (the wgmma
# kernels, runtime/Runtime.h defaultChip): the mma.sync kernels of sm_90 run
# as variants of their own.
variants=(f32 f16 bf16 bf16-scalar)
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1)
[[ $cc == 9.0 ]] && variants+=(bf16-sm90 f16-sm90)

pass=0; fail=0
printf '%-22s %-11s %-6s %s\n' case dtype result "max_abs_err" > "$out/summary.txt"
# One case of a matrix: run_case VARIANT ENTRY CASE-FLAGS... with ENTRY
# "name|case flags[|kvattn-run flags]"; its summary line goes to
# <log>.result, the log beside it. start_case runs it with at most $max_jobs at
# once; the summary keeps the order the cases were started in.
run_case() {
  local variant=$1 entry=$2; shift 2
  local pathflags=""
  [[ $variant == *-scalar ]] && pathflags="--tensor-cores=false"
  [[ $variant == *-sm90a ]] && pathflags="--chip=sm_90a"
  [[ $variant == *-sm90 ]] && pathflags="--chip=sm_90"
  local name=${entry%%|*} rest=${entry#*|}
  local flags=${rest%%|*} runflags=""
  [[ $rest == *"|"* ]] && runflags=${rest#*|}
  local log="$out/$name-$variant.log" result err
  if $run "$@" $flags -- --target=gpu --check $runflags $pathflags > "$log" 2>&1; then
    result=PASS
  else
    result=FAIL
  fi
  err=$(grep -o 'max_abs_err=[^ ]*' "$log" | head -1 | cut -d= -f2)
  printf '%-22s %-11s %-6s %s\n' "$name" "$variant" "$result" "${err:--}" > "$log.result"
}
results=()
start_case() {
  local entry=$2
  results+=("$out/${entry%%|*}-$1.log.result")
  while (( $(jobs -rp | wc -l) >= max_jobs )); do wait -n; done
  run_case "$@" &
}
for variant in "${variants[@]}"; do
  for entry in "${cases[@]}"; do
    start_case "$variant" "$entry" --dtype "${variant%%-*}"
  done
done

# DeepSeek MLA (the latent form: D = 576, V = the cache's first 512
# columns), bf16 and FP8 latent caches, 16 and 128 heads, paged 64, NaN in
# the unowned slots (on a compute capability 9.0 device the 128-head ones on
# the wgmma latent kernel of sm_90a), and there again with --chip=sm_90.
mla_cases=(
  "mla-h16|--B 4 --Hq 16 --L 1 --S 512 --page-size 64 --q-offset 500,63,64,7 --kv-len 501,64,65,8 --causal --lse --poison nan"
  "mla-h128|--B 4 --Hq 128 --L 1 --S 512 --page-size 64 --q-offset 500,63,64,7 --kv-len 501,64,65,8 --causal --lse --poison nan"
  "mla-h128-mtp|--B 2 --Hq 128 --L 2 --S 256 --page-size 64 --q-offset 200,30 --kv-len 202,32 --causal --lse --poison inf"
  "mla-h128-split|--B 1 --Hq 128 --L 1 --S 2048 --page-size 64 --kv-len 2000 --lse --poison nan|--split-kv 4"
  "mla-h128-p16|--B 2 --Hq 128 --L 1 --S 320 --page-size 16 --kv-len 300,33 --lse --poison nan"
  "mla-h128-fp8|--B 2 --Hq 128 --L 1 --S 512 --page-size 64 --kv-len 500,77 --kv-dtype f8E4M3FN --kv-scales token --lse --poison nan"
)
# bf16, and on a compute capability 9.0 device the sm_90 (mma.sync) kernels
# too: start_bf16_cases CASES-ARRAY-NAME CASE-FLAGS... starts every case of
# the array in each.
bf16_variants=(bf16)
[[ $cc == 9.0 ]] && bf16_variants+=(bf16-sm90)
start_bf16_cases() {
  local -n entries=$1
  shift
  local variant entry
  for variant in "${bf16_variants[@]}"; do
    for entry in "${entries[@]}"; do
      start_case "$variant" "$entry" "$@"
    done
  done
}
start_bf16_cases mla_cases --latent --D 576 --Dv 512 --scale 0.0721687836 \
  --dtype bf16

# Scores of 10^9 and more (test/GpuEmu/huge-scores.test on the device: the
# softmax's exact form and its mul.rn offsets as ptxas compiled them): a
# row of 5e8 over two tied key rows of 100 in different blocks, a row of
# -5e10; eager rescaling; an FP8 cache under an f16-staged query.
huge="--fill=0=320:64:5e8 --fill=0=384:64:-5e10 --fill=1=640:64:100 --fill=1=8320:64:100"
huge_cases=(
  "huge-scores|--L 128 --S 256 --D 64 --q-offset 128 --causal --lse|$huge"
  "huge-scores-eager|--L 128 --S 256 --D 64 --q-offset 128 --causal --lse|$huge --lazy-rescale=false"
  "huge-scores-fp8|--L 128 --S 256 --D 128 --q-offset 128 --causal --lse --kv-dtype f8E4M3FN --kv-scales head|--fill=0=640:128:7e9"
)
start_bf16_cases huge_cases --dtype bf16
wait
for r in "${results[@]}"; do
  if [[ -f $r ]]; then cat "$r"; else echo "${r##*/} FAIL (no result)"; fi
done >> "$out/summary.txt"
pass=$(grep -c ' PASS ' "$out/summary.txt")
fail=$(( ${#results[@]} - pass ))

sanitizer=${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer
command -v compute-sanitizer >/dev/null && sanitizer=$(command -v compute-sanitizer)
echo >> "$out/summary.txt"
for entry in "gqa-batch-kvlen-lse|--dtype bf16 --B 2 --Hq 8 --Hkv 2 --L 4 --S 40 --q-offset 16,33 --kv-len 20,37 --causal --lse" \
             "window|--dtype f16 --L 9 --S 80 --q-offset 71 --causal --window 7" \
             "bool-mask|--dtype f32 --B 2 --Hq 2 --Hkv 1 --L 5 --S 19 --mask bool" \
             "paged|--dtype bf16 --B 3 --Hq 8 --Hkv 2 --D 64 --L 1 --S 256 --page-size 16 --q-offset 99,0,255 --kv-len 100,1,256 --causal"; do
  name=${entry%%|*}; flags=${entry#*|}
  log="$out/memcheck-$name.log"
  if [[ ! -x $sanitizer ]]; then
    printf '%-22s memcheck SKIPPED (no compute-sanitizer)\n' "$name" >> "$out/summary.txt"
    continue
  fi
  if "$sanitizer" --tool memcheck --error-exitcode 7 \
       $run $flags -- --target=gpu --check > "$log" 2>&1; then
    result=PASS; pass=$((pass + 1))
  else
    result=FAIL; fail=$((fail + 1))
  fi
  errors=$(grep -o 'ERROR SUMMARY: [0-9]* error' "$log" | tail -1)
  printf '%-22s memcheck %-6s %s\n' "$name" "$result" "${errors:-see log}" >> "$out/summary.txt"
done

chips=("")
[[ $cc == 9.0 ]] && chips+=("--chip=sm_90") # the mma.sync kernel too
for chipflag in "${chips[@]}"; do
for tool in racecheck synccheck; do
  log="$out/$tool${chipflag:+-${chipflag#--chip=}}.log"
  flags="--dtype bf16 --B 2 --Hq 8 --Hkv 2 --D 64 --L 64 --S 200 --q-offset 136,100 --kv-len 200,164 --causal"
  if "$sanitizer" --tool $tool --error-exitcode 7 \
       $run $flags -- --target=gpu --check $chipflag > "$log" 2>&1; then
    result=PASS; pass=$((pass + 1))
  else
    result=FAIL; fail=$((fail + 1))
  fi
  errors=$(grep -o 'ERROR SUMMARY: [0-9]* error\|RACECHECK SUMMARY: [0-9]* hazard' "$log" | tail -1)
  printf '%-22s %-9s %-6s %s\n' "tensor-cores${chipflag:+ ${chipflag#--chip=}}" "$tool" "$result" "${errors:-see log}" >> "$out/summary.txt"
done
done

# kvattn.torch's CUDA kernels (python/torch_gpu_tests: the runtime on torch's
# current stream, DLPack of CUDA tensors, bf16, out= in place,
# torch.compile), with the PyTorch environment of scripts/setup.sh.
log="$out/torch-cuda.log"
if KVATTN_LIBRARY=$build/lib/libkvattn_c.so PYTHONPATH=$root/python \
     "$torch_python" -B -m pytest -q -p no:cacheprovider \
     "$root/python/torch_gpu_tests" > "$log" 2>&1; then
  result=PASS; pass=$((pass + 1))
else
  result=FAIL; fail=$((fail + 1))
fi
printf '%-22s %-9s %-6s %s\n' "kvattn.torch" "cuda" "$result" \
  "$(tail -1 "$log")" >> "$out/summary.txt"

echo
cat "$out/summary.txt"
echo
echo "gpu checks: $pass passed, $fail failed ($(( $(date +%s) - start )) s)"
[[ $fail -eq 0 ]]
