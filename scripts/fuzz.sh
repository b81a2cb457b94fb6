#!/usr/bin/env bash
# Runs the three fuzzers (the differential one twice):
#   kvattn-fuzz-ir    libFuzzer over mutated kvattn IR through the compiler
#                     pipelines with drawn options and chips (ASan + UBSan),
#                     seeded from test/fuzz/corpus;
#   kvattn-fuzz-capi  libFuzzer over the C API's calls and arguments, plans
#                     (create/run/capture with random bounds, sizes and
#                     metadata) included, against the fake driver (ASan +
#                     UBSan);
#   kvattn-fuzz-diff  random valid attention configurations through the CPU
#                     path, compared with the reference, failures shrunk;
#                     then (--target=gpu-emu, from the normal build: the
#                     emulator is not built with sanitizers) through the
#                     GPU kernels of a drawn chip on the emulated GPU.
#
#   bash scripts/fuzz.sh [SECONDS]     # each run takes SECONDS (default 600)
# KVATTN_FUZZ_SEED fixes the fuzzers' seeds (CI uses 1); by default each
# run draws new ones.
# Needs the sanitizer build (scripts/sanitize.sh builds it). Crashes are
# written to build-sanitize/fuzz/crashes, failing configurations to
# build-sanitize/fuzz/diff; both become regression tests.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${KVATTN_SANITIZE_BUILD_DIR:-$root/build-sanitize}
seconds=${1:-600}
work=$build/fuzz
mkdir -p "$work/corpus" "$work/crashes" "$work/diff"
cp -n "$root"/test/fuzz/corpus/*.mlir "$work/corpus/" 2>/dev/null || true
# allow_user_poisoning=0: see scripts/sanitize.sh (LLVM's inline allocator
# poisoning against the uninstrumented libMLIR.so).
export ASAN_OPTIONS=detect_leaks=0:allow_user_poisoning=0
# Fuzzed inputs are compiled, not looked up, and leave no cache entries.
export KVATTN_CACHE_DIR=off
status=0

echo "== kvattn-fuzz-ir for ${seconds}s"
"$build/bin/kvattn-fuzz-ir" "$work/corpus" -max_total_time="$seconds" \
  -seed="${KVATTN_FUZZ_SEED:-0}" \
  -max_len=8192 -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
  -artifact_prefix="$work/crashes/" > "$work/ir.log" 2>&1 || status=1
grep -E "stat::number_of_executed_units|stat::new_units_added|ERROR|SUMMARY" \
  "$work/ir.log" || true

echo "== kvattn-fuzz-capi for ${seconds}s"
mkdir -p "$work/capi-corpus"
# Plans with large bounds ask the fake driver for large workspaces: it
# answers CUDA_ERROR_OUT_OF_MEMORY above its 80 GiB or when the host's
# calloc fails (allocator_may_return_null), as a driver does, instead of
# the sanitizer or libFuzzer's malloc limit ending the run.
ASAN_OPTIONS=$ASAN_OPTIONS:allocator_may_return_null=1 \
"$build/bin/kvattn-fuzz-capi" "$work/capi-corpus" -max_total_time="$seconds" \
  -seed="${KVATTN_FUZZ_SEED:-0}" -malloc_limit_mb=100000 \
  -max_len=4096 -timeout=60 -rss_limit_mb=4096 -print_final_stats=1 \
  -artifact_prefix="$work/crashes/capi-" > "$work/capi.log" 2>&1 || status=1
grep -E "stat::number_of_executed_units|stat::new_units_added|ERROR|SUMMARY|failed without" \
  "$work/capi.log" || true

echo "== kvattn-fuzz-diff for ${seconds}s"
"$build/bin/kvattn-fuzz-diff" --seed "${KVATTN_FUZZ_SEED:-$RANDOM$RANDOM}" \
  --iterations 100000000 --seconds "$seconds" --save "$work/diff" \
  > "$work/diff.log" 2>&1 || status=1
tail -6 "$work/diff.log"

echo "== kvattn-fuzz-diff --target=gpu-emu for ${seconds}s"
gpu_build=${KVATTN_BUILD_DIR:-$root/build}
if [[ -x $gpu_build/bin/kvattn-fuzz-diff ]]; then
  "$gpu_build/bin/kvattn-fuzz-diff" --target=gpu-emu \
    --seed "${KVATTN_FUZZ_SEED:-$RANDOM$RANDOM}" --iterations 100000000 \
    --seconds "$seconds" --save "$work/diff" > "$work/diff-gpu.log" 2>&1 ||
    status=1
  tail -12 "$work/diff-gpu.log"
else
  echo "kvattn-fuzz-diff --target=gpu-emu: $gpu_build/bin/kvattn-fuzz-diff" \
    "is not built (scripts/setup.sh builds it)"
  status=1
fi

if [[ $status -eq 0 ]]; then echo "fuzz: 4 passed, 0 failed"; else echo "fuzz: failures above (logs in $work)"; fi
exit $status
