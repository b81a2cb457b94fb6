// RUN: kvattn-opt %s -split-input-file -verify-diagnostics -kvattn-verify-target | FileCheck %s

// A chip kvattn generates code for: unchanged.
// CHECK-LABEL: gpu.module @supported
gpu.module @supported [#nvvm.target<chip = "sm_90">] {
}

// -----

// sm_90a selects the wgmma lowering (issue 32): accepted.
// CHECK-LABEL: gpu.module @hopper_a
gpu.module @hopper_a [#nvvm.target<chip = "sm_90a">] {
}

// -----

// expected-error @+1 {{cannot generate code for chip 'sm_60': 'sm_60' is older than sm_80: kvattn's kernels need mma.sync m16n8k16, ldmatrix and cp.async (sm_80 or newer)}}
gpu.module @pascal [#nvvm.target<chip = "sm_60">] {
}

// -----

// expected-error @+1 {{cannot generate code for chip 'sm_80a': 'sm_80a' is not a chip LLVM's NVPTX back end knows}}
gpu.module @unknown [#nvvm.target<chip = "sm_80a">] {
}

// -----

// expected-error @+1 {{cannot generate code for chip 'gfx90a': 'gfx90a' is not a chip name like sm_80 or sm_90a}}
gpu.module @amd [#nvvm.target<chip = "gfx90a">] {
}

// -----

// Shared memory per block: 160 KB fits sm_80 (163 KB) but not sm_86 (99 KB).
// CHECK-LABEL: gpu.module @ampere_a100
gpu.module @ampere_a100 [#nvvm.target<chip = "sm_80">] {
  gpu.func @big() kernel attributes {kvattn.dynamic_smem_bytes = 163840 : i64} {
    gpu.return
  }
}

// -----

gpu.module @ampere_consumer [#nvvm.target<chip = "sm_86">] {
  // expected-error @+1 {{kernel 'big' needs 163840 bytes of shared memory per block; sm_86 allows 101376 (use smaller block-m / block-n, or fewer stages)}}
  gpu.func @big() kernel attributes {kvattn.dynamic_smem_bytes = 163840 : i64} {
    gpu.return
  }
}

// -----

gpu.module @hopper [#nvvm.target<chip = "sm_90">] {
  // expected-error @+1 {{kernel 'huge' needs 296000000 bytes of shared memory per block; sm_90 allows 232448 (use smaller block-m / block-n, or fewer stages)}}
  gpu.func @huge() kernel attributes {kvattn.dynamic_smem_bytes = 296000000 : i64} {
    gpu.return
  }
}
