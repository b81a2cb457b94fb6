// kvattn-run --plan refuses, by name, a step a plan cannot run: an append
// whose tokens are not the attention's query rows (a plan runs all its
// kernels with one set of sizes; here 2 new tokens under 1 query row), and
// RoPE's record with host metadata.
//
// REQUIRES: libdevice
// RUN: not kvattn-run %s --entry=two_tokens_one_row --target=gpu-emu --plan=device --input 5=3 --input 6=5 2>&1 | FileCheck %s --check-prefix=SIZES
// SIZES: planning @two_tokens_one_row: an append writes B = 1, L = 2 tokens of Hkv = 1 heads into S = 8 slots, the attention reads B = 1, L = 1, Hkv = 1, S = 8: a plan runs with one set of sizes

// A step with RoPE's record (rope_pos written by the K append, read by the
// attention as k_rope_pos): through a plan with device metadata it runs
// (the record a buffer the plan writes in place and then checks); with
// host metadata the runtime refuses it by name, the record being a device
// buffer whose check needs the key positions beside it.
// DEFINE: %{rope} = --entry=rope_step --input 5=10,20 --input 6=0,1,2,3,4,5,6,7,8,9,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1,-1 --input 7=13,23
// RUN: kvattn-run %s %{rope} --target=gpu-emu --check --plan=device | FileCheck %s --check-prefix=OK
// RUN: not kvattn-run %s %{rope} --target=gpu-emu --plan=host 2>&1 | FileCheck %s --check-prefix=ROPE-HOST
// ROPE-HOST: running the plan of @rope_step: plan run: 'k_rope_pos' (RoPE's record) is a device buffer while the metadata is on the host

// --plan is for the GPU targets:
// RUN: not kvattn-run %s --entry=two_tokens_one_row --target=cpu --plan=device 2>&1 | FileCheck %s --check-prefix=CPU
// CPU: --plan, --plan-slack and --plan-runs run plans on a GPU: use them with --target=gpu or --target=gpu-emu

// The same step launched op by op (no plan) runs:
// RUN: kvattn-run %s --entry=two_tokens_one_row --target=gpu-emu --check --input 5=3 --input 6=5 | FileCheck %s --check-prefix=OK
// OK: {{^PASS$}}

func.func @two_tokens_one_row(%q: tensor<1x1x1x8xf32>, %k: tensor<1x1x8x8xf32>, %v: tensor<1x1x8x8xf32>, %k_new: tensor<1x1x2x8xf32>, %v_new: tensor<1x1x2x8xf32>, %pos: tensor<1xi32>, %kv_len: tensor<1xi32>) -> tensor<1x1x1x8xf32> {
  %k2 = kvattn.append %k_new into %k at %pos : tensor<1x1x2x8xf32> into tensor<1x1x8x8xf32>, tensor<1xi32>
  %v2 = kvattn.append %v_new into %v at %pos : tensor<1x1x2x8xf32> into tensor<1x1x8x8xf32>, tensor<1xi32>
  %o = kvattn.attention %q, %k2, %v2 kv_len(%kv_len : tensor<1xi32>) : tensor<1x1x1x8xf32>, tensor<1x1x8x8xf32>, tensor<1x1x8x8xf32> -> tensor<1x1x1x8xf32>
  return %o : tensor<1x1x1x8xf32>
}

func.func @rope_step(%q: tensor<2x4x3x64xbf16>, %kn: tensor<2x1x3x64xbf16>, %vn: tensor<2x1x3x64xbf16>,
                     %kc: tensor<2x1x64x64xbf16>, %vc: tensor<2x1x64x64xbf16>,
                     %pos: tensor<2xi32>, %rec: tensor<2x64xi64>, %kl: tensor<2xi32>)
    -> (tensor<2x4x3x64xbf16>, tensor<2x1x64x64xbf16>, tensor<2x64xi64>) {
  %k2, %r2 = kvattn.append %kn into %kc at %pos rope = <rotary_dim = 64, theta = 500000.0, interleaved>
      rope_pos(%rec : tensor<2x64xi64>) : tensor<2x1x3x64xbf16> into tensor<2x1x64x64xbf16>, tensor<2xi32>
  %v2 = kvattn.append %vn into %vc at %pos : tensor<2x1x3x64xbf16> into tensor<2x1x64x64xbf16>, tensor<2xi32>
  %o = kvattn.attention %q, %k2, %v2 q_offset(%pos : tensor<2xi32>)
      kv_len(%kl : tensor<2xi32>) k_rope_pos(%r2 : tensor<2x64xi64>)
      causal rope = <rotary_dim = 64, theta = 500000.0, interleaved>
      : tensor<2x4x3x64xbf16>, tensor<2x1x64x64xbf16>, tensor<2x1x64x64xbf16> -> tensor<2x4x3x64xbf16>
  return %o, %k2, %r2 : tensor<2x4x3x64xbf16>, tensor<2x1x64x64xbf16>, tensor<2x64xi64>
}
