// RUN: kvattn-opt %s -split-input-file -verify-diagnostics -kvattn-verify-target | FileCheck %s

// A chip kvattn generates code for: unchanged.
// CHECK-LABEL: gpu.module @supported
gpu.module @supported [#nvvm.target<chip = "sm_90a">] {
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
