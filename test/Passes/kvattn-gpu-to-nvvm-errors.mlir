// RUN: kvattn-opt %s -kvattn-gpu-to-nvvm="index-bitwidth=16" -verify-diagnostics

// Only 32 and 64 are index widths the kernels support: the error names the
// pass, the option and the value, on each gpu.module.
module attributes {gpu.container_module} {
  // expected-error@+1 {{kvattn-gpu-to-nvvm: index-bitwidth must be 32 or 64, got 16}}
  gpu.module @kernels {
    gpu.func @k(%n: index) kernel {
      gpu.return
    }
  }
}
