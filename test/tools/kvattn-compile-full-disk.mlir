// REQUIRES: libdevice
// kvattn-compile on a full disk (/dev/full: every write fails with ENOSPC)
// names the file and the reason; before (issue 30 item 8) it reported
// success, or KVATTN_DUMP_DIR ended the process with "LLVM ERROR: IO
// failure on output stream".
// RUN: rm -rf %t && mkdir -p %t/out %t/dump
// RUN: ln -s /dev/full %t/out/k.ptx
// RUN: not kvattn-compile %s -o %t/out/k --chip=sm_90 --kernel-cache=false 2>&1 | FileCheck %s --check-prefix=PTX
// PTX: kvattn-compile: error: writing '{{.*}}out/k.ptx' failed: No space left on device
// RUN: rm %t/out/k.ptx && ln -s /dev/full %t/out/k.json
// RUN: not kvattn-compile %s -o %t/out/k --chip=sm_90 --kernel-cache=false 2>&1 | FileCheck %s --check-prefix=JSON
// JSON: kvattn-compile: error: writing '{{.*}}out/k.json' failed: No space left on device
// RUN: ln -s /dev/full %t/dump/0-input.mlir
// RUN: env KVATTN_DUMP_DIR=%t/dump not kvattn-compile %s -o %t/out/d --chip=sm_90 2>&1 | FileCheck %s --check-prefix=DUMP
// DUMP: KVATTN_DUMP_DIR: writing '{{.*}}dump/0-input.mlir' failed: No space left on device
// DUMP-NOT: LLVM ERROR

func.func @attention(%q: tensor<1x2x4x16xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x2x8x16xf32>,
    %qo: tensor<1xi32>) -> tensor<1x2x4x16xf32> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) causal
      : tensor<1x2x4x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32> -> tensor<1x2x4x16xf32>
  return %o : tensor<1x2x4x16xf32>
}
