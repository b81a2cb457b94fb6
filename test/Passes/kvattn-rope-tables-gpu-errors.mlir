// RUN: kvattn-opt %s -split-input-file -verify-diagnostics --kvattn-to-ptx="chip=sm_80"
// RoPE's tables on the GPU: the kernels compile the tables' rows P in (a
// model's table has a fixed size; device validation checks positions
// against it), so a dynamic table shape is refused by name, by the
// attention's outlining and by the append kernel's lowering.

func.func @attention_dynamic_rows(%q: tensor<1x2x4x32xf32>, %k: tensor<1x1x64x32xf32>, %v: tensor<1x1x64x32xf32>,
                                  %qo: tensor<1xi32>, %c: tensor<?x16xf32>, %s: tensor<?x16xf32>) -> tensor<1x2x4x32xf32> {
  // expected-error @+1 {{kvattn-outline-tile-programs: rotary_cos needs a static shape [P, rotary_dim / 2] on the GPU (the kernel compiles the table's rows in)}}
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) causal rope = <rotary_dim = 32>
      rotary_cos(%c : tensor<?x16xf32>) rotary_sin(%s : tensor<?x16xf32>)
      : tensor<1x2x4x32xf32>, tensor<1x1x64x32xf32>, tensor<1x1x64x32xf32> -> tensor<1x2x4x32xf32>
  return %o : tensor<1x2x4x32xf32>
}

// -----

func.func @append_dynamic_rows(%kn: tensor<1x1x4x32xf32>, %kc: tensor<1x1x64x32xf32>, %pos: tensor<1xi32>,
                               %c: tensor<?x16xf32>, %s: tensor<?x16xf32>) -> tensor<1x1x64x32xf32> {
  // expected-error @+1 {{kvattn-append-to-gpu: rotary_cos and rotary_sin need a static shape [P, rotary_dim / 2] on the GPU (the kernel compiles the table's rows in)}}
  %k = kvattn.append %kn into %kc at %pos rope = <rotary_dim = 32>
      rotary_cos(%c : tensor<?x16xf32>) rotary_sin(%s : tensor<?x16xf32>)
      : tensor<1x1x4x32xf32> into tensor<1x1x64x32xf32>, tensor<1xi32>
  return %k : tensor<1x1x64x32xf32>
}
