// RUN: kvattn-opt %s --pass-pipeline='builtin.module(kvattn-append-to-gpu,kvattn-tile{split-kv=1},kvattn-outline-tile-programs,kvattn-device-validation)' -verify-diagnostics -split-input-file

// RoPE's record written by two appends (a prefill chunk, then a new token)
// before the attention reads it: the attention's validation kernel, which
// runs before the appends, accounts for one append's writes, so the module
// is refused by name rather than checked wrongly (docs/kernel-abi.md,
// rule 28).
func.func @two_writers(%q: tensor<2x2x1x16xf32>, %kp: tensor<2x2x8x16xf32>, %kn: tensor<2x2x1x16xf32>,
                       %kc: tensor<2x2x32x16xf32>, %v: tensor<2x2x32x16xf32>, %zero: tensor<2xi32>,
                       %pos: tensor<2xi32>, %n: tensor<2xi32>, %rec: tensor<2x32xi64>) -> tensor<2x2x1x16xf32> {
  %k1, %r1 = kvattn.append %kp into %kc at %zero rope = <rotary_dim = 16, theta = 10000.0>
      rope_pos(%rec : tensor<2x32xi64>) : tensor<2x2x8x16xf32> into tensor<2x2x32x16xf32>, tensor<2xi32>
  // expected-error @+1 {{kvattn-device-validation: RoPE's record is written by two appends before it is read}}
  %k2, %r2 = kvattn.append %kn into %k1 at %pos rope = <rotary_dim = 16, theta = 10000.0>
      rope_pos(%r1 : tensor<2x32xi64>) : tensor<2x2x1x16xf32> into tensor<2x2x32x16xf32>, tensor<2xi32>
  %o = kvattn.attention %q, %k2, %v q_offset(%pos : tensor<2xi32>) kv_len(%n : tensor<2xi32>)
      k_rope_pos(%r2 : tensor<2x32xi64>) causal rope = <rotary_dim = 16, theta = 10000.0>
      : tensor<2x2x1x16xf32>, tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32> -> tensor<2x2x1x16xf32>
  return %o : tensor<2x2x1x16xf32>
}
