// Host metadata of no bytes: a key_valid of [B, 0] (an empty cache). The
// launch packs no metadata and takes no slot of the ring; it used to copy
// zero bytes to a slot never grown (address 0), which the emulated driver
// refuses (CUDA_ERROR_INVALID_VALUE) as a driver may. Found by
// kvattn-fuzz-diff --target=gpu-emu. Every row attends to nothing: zeros.
//
// REQUIRES: libdevice
// RUN: kvattn-run %s --entry=main --target=gpu-emu --check --input 3= | FileCheck %s
// RUN: kvattn-run %s --entry=main --target=gpu-emu --check --input 3= --tensor-cores=false | FileCheck %s
// RUN: env KVATTN_EMU_SM=80 kvattn-run %s --entry=main --target=gpu-emu --check --input 3= | FileCheck %s
// CHECK: check out0: max_abs_err=0
// CHECK: {{^PASS$}}

func.func @main(%q: tensor<1x2x3x16xbf16>, %k: tensor<1x1x0x16xbf16>, %v: tensor<1x1x0x16xbf16>, %key_valid: tensor<1x0xi1>) -> tensor<1x2x3x16xbf16> {
  %o = kvattn.attention %q, %k, %v key_valid(%key_valid : tensor<1x0xi1>) : tensor<1x2x3x16xbf16>, tensor<1x1x0x16xbf16>, tensor<1x1x0x16xbf16> -> tensor<1x2x3x16xbf16>
  return %o : tensor<1x2x3x16xbf16>
}
