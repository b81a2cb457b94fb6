#!/usr/bin/env bash
# The PTX of every attention case the GPU lit tests compile, for showing that
# a change leaves the kernels byte-identical (scripts/ptx_corpus.py):
#
#   bash scripts/ptx-corpus.sh /tmp/before          # before the change
#   ... change, rebuild ...
#   bash scripts/ptx-corpus.sh /tmp/after
#   diff -r /tmp/before /tmp/after && echo identical
#
# KVATTN_BUILD_DIR (default build/) selects the tools, KVATTN_JOBS the
# parallel compiles (default 2).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:?usage: ptx-corpus.sh OUT_DIR}
exec python3 "$root/scripts/ptx_corpus.py" "$out" \
  --build "${KVATTN_BUILD_DIR:-$root/build}" --jobs "${KVATTN_JOBS:-2}"
