#!/usr/bin/env bash
# The runtime's thread stress test (test/unit/ThreadTest.cpp) under
# ThreadSanitizer: configures build-tsan/ with -DKVATTN_TSAN=ON, builds only
# KVAttnThreadTests (the runtime, its support library, the fake driver:
# about 15 files) and runs it; any race report fails it.
#
#   bash scripts/tsan.sh                      # 12 threads x 2000 iterations, seed 1
#   KVATTN_THREAD_TEST_THREADS=16 KVATTN_THREAD_TEST_ITERATIONS=2000 \
#   KVATTN_THREAD_TEST_SEED=7 bash scripts/tsan.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${KVATTN_TSAN_BUILD_DIR:-$root/build-tsan}
if [[ ! -f $build/build.ninja ]]; then
  cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit -DKVATTN_TSAN=ON > /dev/null
fi
cmake --build "$build" --target KVAttnThreadTests
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
exec "$build/test/unit/KVAttnThreadTests" "$@"
