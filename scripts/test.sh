#!/usr/bin/env bash
# Runs every kvattn test: the lit suite (IR, diagnostics, numerics) and the
# GoogleTest unit tests (through lit's GoogleTest format). Sets up and builds
# first (idempotent), so it works from a fresh clone. Ends with one line:
#   kvattn: N passed, N failed, N skipped
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${KVATTN_BUILD_DIR:-$root/build}

bash "$root/scripts/setup.sh"

results=$build/test-results.json
status=0
/usr/lib/llvm-22/bin/lit -sv --output "$results" \
  "$build/test" "$build/test/unit" "$@" || status=$?

python3 - "$results" <<'PY'
import json, sys
tests = json.load(open(sys.argv[1]))["tests"]
count = lambda codes: sum(t["code"] in codes for t in tests)
passed = count({"PASS", "XFAIL"})
failed = count({"FAIL", "XPASS", "UNRESOLVED", "TIMEOUT"})
skipped = count({"UNSUPPORTED", "SKIPPED", "EXCLUDED"})
for t in tests:
    if t["code"] == "UNSUPPORTED":
        print("skipped (missing REQUIRES feature):", t["name"])
print(f"kvattn: {passed} passed, {failed} failed, {skipped} skipped")
PY
exit $status
