#!/usr/bin/env bash
# The main job on the built-in example (examples/cached-append.mlir): a
# framework-style cached append of 2 tokens to a cache of capacity 5 that
# holds 3, written once with torch's upper-left is_causal (the bug) and once
# with a lower-right mask.
#   1. -kvattn-resolve-cached-append makes the positions explicit and warns
#      about the upper-left append;
#   2. the scalar reference runs the framework IR and the resolved IR on the
#      seeds' 2x5 inputs (zero logits, values 10..50): upper-left gives 10 and
#      15, lower-right (and the fixed upper-left) 25 and 30;
#   3. -kvattn-tile shows the tile program, and kvattn-to-cpu compiles the
#      same IR for the host JIT; kvattn-run --check compares the compiled
#      result with the reference and --stats prints the KV blocks the
#      schedule loaded, masked and skipped.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${KVATTN_BUILD_DIR:-$root/build}/bin
example=$root/examples/cached-append.mlir
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

inputs=(--input 0=0 --input 1=0 --input 2=10,20,30,0,0 --input 3=0
        --input 4=40,50 --input 5=3)

echo "== kvattn-opt $example -kvattn-resolve-cached-append"
"$bin/kvattn-opt" "$example" -kvattn-resolve-cached-append --canonicalize \
  --mlir-print-op-on-diagnostic=false \
  -o "$out/resolved.mlir"
cat "$out/resolved.mlir"

echo
echo "== with fix-upper-left-appends=true"
"$bin/kvattn-opt" "$example" \
  -kvattn-resolve-cached-append=fix-upper-left-appends=true --canonicalize \
  --mlir-print-op-on-diagnostic=false \
  -o "$out/fixed.mlir"

for entry in upper_left lower_right; do
  echo
  echo "== @$entry: reference on the framework IR, the resolved IR, the fixed IR"
  for ir in "$example" "$out/resolved.mlir" "$out/fixed.mlir"; do
    printf '%-20s ' "$(basename "$ir")"
    "$bin/kvattn-run" "$ir" --target=reference --entry=$entry "${inputs[@]}" \
      --print-outputs
  done
done

echo
echo "== the tile program of @lower_right (-kvattn-tile, 64x64 blocks)"
"$bin/kvattn-opt" "$out/resolved.mlir" -kvattn-tile -cse | \
  sed -n '/func.func @lower_right/,/^  }/p'

for entry in upper_left lower_right; do
  echo
  echo "== @$entry compiled for the CPU (kvattn-to-cpu, JIT) and checked"
  "$bin/kvattn-run" "$example" --target=cpu --entry=$entry "${inputs[@]}" \
    --print-outputs --check --stats 2>/dev/null
done
echo
echo "== @lower_right on the fixed upper-left IR, 1x1 blocks"
"$bin/kvattn-run" "$out/fixed.mlir" --target=cpu --entry=upper_left \
  "${inputs[@]}" --print-outputs --check --stats --block-m=1 --block-n=1
