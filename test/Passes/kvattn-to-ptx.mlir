// REQUIRES: libdevice
// RUN: kvattn-opt %s -kvattn-to-ptx="chip=sm_90 features=+ptx80" | FileCheck %s
// RUN: kvattn-opt %s -kvattn-to-ptx="chip=sm_90 device-ir=true" | FileCheck %s --check-prefix=IR
// Chips are checked before nvvm-attach-target, whose verifier crashed on an
// empty name (found by kvattn-fuzz-ir's drawn chips).
// RUN: not kvattn-opt %s -kvattn-to-ptx="chip= device-ir=true" 2>&1 | FileCheck %s --check-prefix=NOCHIP
// RUN: not kvattn-opt %s -kvattn-to-ptx="chip=sm_ device-ir=true" 2>&1 | FileCheck %s --check-prefix=NODIGITS
// NOCHIP: error: cannot generate code for chip '': '' is not a chip name like sm_80 or sm_90a
// NODIGITS: error: cannot generate code for chip 'sm_': 'sm_' is not a chip name like sm_80 or sm_90a
// The registered pipeline: framework SDPA to a gpu.binary holding PTX, or
// with device-ir the device LLVM IR (bitcode, "BC\xC0\xDE") that NVPTX would
// compile: the emulated GPU's input.

// IR: gpu.binary @kvattn_kernels [#gpu.object<#nvvm.target<O = 3, chip = "sm_90"
// IR-SAME: offload = "BC\C0\DE

// CHECK: gpu.launch_func @kvattn_kernels::@f_kvattn_0
// CHECK: gpu.binary @kvattn_kernels [#gpu.object<#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80"
// CHECK-SAME: assembly = "{{.*}}.target sm_90{{.*}}.entry f_kvattn_0(
func.func @f(%q: tensor<1x4x16x64xbf16>, %k: tensor<1x4x80x64xbf16>, %v: tensor<1x4x80x64xbf16>)
    -> tensor<1x4x16x64xbf16> {
  %o = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<1x4x16x64xbf16>, tensor<1x4x80x64xbf16>, tensor<1x4x80x64xbf16> -> tensor<1x4x16x64xbf16>
  return %o : tensor<1x4x16x64xbf16>
}
