// kvattn.cascade (shared-prefix attention) against the reference, which
// evaluates it by its definition: plain attention of each sequence's rows
// over the prefix followed by its own suffix (reference::cascade). The
// compiled targets run -kvattn-expand-cascade's form: one attention of all
// rows over the prefix, the ragged attention over the suffixes, and
// kvattn.merge; a dropped prefix, a prefix attended with the wrong rows or
// a wrong merge changes every row (random inputs of kvattn-run).
//
// The issue's case: a 4096-token prefix shared by 16 sequences with
// suffixes of 1 ... 300 keys (decode rows and a few appends, 26 rows in
// all), GQA 4/2, on the CPU (f32, vectorised and scalar) and the emulated
// GPU (f32 scalar lowering, bf16 tensor cores; the merge on the host as the
// reference merges).
// DEFINE: %{meta} = --input 5=0,1,2,5,6,7,12,13,14,16,17,18,19,23,24,25,26 --input 6=0,19,37,59,79,95,119,139,158,179,199,219,236,259,279,299 --input 7=1,20,40,60,80,100,120,140,160,180,200,220,240,260,280,300
// RUN: kvattn-run %s --entry=issue --target=cpu --check %{meta} | FileCheck %s
// RUN: kvattn-run %s --entry=issue --target=cpu --vectorize=false --check %{meta} | FileCheck %s
// RUN: kvattn-run %s --entry=issue --target=gpu-emu --check %{meta} | FileCheck %s
// RUN: kvattn-run %s --entry=issue_bf16 --target=gpu-emu --check %{meta} | FileCheck %s
// CHECK: {{^PASS$}}
//
// Rows that see only part of their suffix (causal, q_offset inside it), a
// row that sees the prefix and one suffix key, Dv != D, softcap and a
// scale; non-causal.
// RUN: kvattn-run %s --entry=small --target=cpu --check --input 5=0,2,3,7 --input 6=3,0,1 --input 7=9,1,6 | FileCheck %s
// RUN: kvattn-run %s --entry=small --target=gpu-emu --check --input 5=0,2,3,7 --input 6=3,0,1 --input 7=9,1,6 | FileCheck %s
// RUN: kvattn-run %s --entry=small_noncausal --target=cpu --check --input 5=0,2,3,7 --input 6=3,0,1 --input 7=9,1,6 | FileCheck %s
//
// No query rows (T = 0: every sequence idle), with and without a prefix:
// empty results. Both lowerings failed to build (the views of the parts
// started at row 0 of a zero-size dimension, which the slice verifiers
// refuse); found by kvattn-fuzz-diff, which draws cascades since then.
// RUN: %attention-case --dtype bf16 --Hq 2 --Hkv 1 --S 4 --D 8 --q-lens 0,0 --prefix 4 --q-offset 0,1 --kv-len 0,2 --causal --lse -- --target=cpu --check | FileCheck %s
// RUN: %attention-case --dtype bf16 --Hq 2 --Hkv 1 --S 4 --D 8 --q-lens 0,0 --prefix 0 --q-offset 0,1 --kv-len 0,2 --lse -- --target=cpu --check | FileCheck %s
// RUN: %attention-case --dtype bf16 --Hq 2 --Hkv 1 --S 4 --D 8 --q-lens 0,0 --prefix 4 --q-offset 0,1 --kv-len 0,2 --causal --lse -- --target=gpu-emu --check | FileCheck %s
// RUN: %attention-case --dtype bf16 --Hq 2 --Hkv 1 --S 4 --D 8 --q-lens 0,0 --prefix 4 --q-offset 0,1 --kv-len 0,2 --causal --lse -- --target=gpu-emu --check --plan=device | FileCheck %s
//
// A negative q_offset would put a query inside the prefix: refused, by
// name, by the reference and by the compiled paths' own checks.
// RUN: not kvattn-run %s --entry=small --target=reference --input 5=0,2,3,7 --input 6=3,-1,1 --input 7=9,1,6 2>&1 | FileCheck %s --check-prefix=NEG
// NEG: q_offset[1] = -1 is negative (batch 1)

func.func @issue(%q: tensor<1x4x26x32xf32>, %pk: tensor<1x2x4096x32xf32>, %pv: tensor<1x2x4096x32xf32>, %k: tensor<16x2x300x32xf32>, %v: tensor<16x2x300x32xf32>, %qs: tensor<17xi32>, %qo: tensor<16xi32>, %kl: tensor<16xi32>) -> (tensor<1x4x26x32xf32>, tensor<1x4x26xf32>) {
  %o, %lse = kvattn.cascade %q, %pk, %pv, %k, %v q_start(%qs : tensor<17xi32>) q_offset(%qo : tensor<16xi32>) kv_len(%kl : tensor<16xi32>) causal : tensor<1x4x26x32xf32>, tensor<1x2x4096x32xf32>, tensor<1x2x4096x32xf32>, tensor<16x2x300x32xf32>, tensor<16x2x300x32xf32> -> tensor<1x4x26x32xf32>, tensor<1x4x26xf32>
  return %o, %lse : tensor<1x4x26x32xf32>, tensor<1x4x26xf32>
}

func.func @issue_bf16(%q: tensor<1x4x26x64xbf16>, %pk: tensor<1x2x4096x64xbf16>, %pv: tensor<1x2x4096x64xbf16>, %k: tensor<16x2x300x64xbf16>, %v: tensor<16x2x300x64xbf16>, %qs: tensor<17xi32>, %qo: tensor<16xi32>, %kl: tensor<16xi32>) -> (tensor<1x4x26x64xbf16>, tensor<1x4x26xf32>) {
  %o, %lse = kvattn.cascade %q, %pk, %pv, %k, %v q_start(%qs : tensor<17xi32>) q_offset(%qo : tensor<16xi32>) kv_len(%kl : tensor<16xi32>) causal : tensor<1x4x26x64xbf16>, tensor<1x2x4096x64xbf16>, tensor<1x2x4096x64xbf16>, tensor<16x2x300x64xbf16>, tensor<16x2x300x64xbf16> -> tensor<1x4x26x64xbf16>, tensor<1x4x26xf32>
  return %o, %lse : tensor<1x4x26x64xbf16>, tensor<1x4x26xf32>
}

func.func @small(%q: tensor<1x2x7x16xf32>, %pk: tensor<1x1x40x16xf32>, %pv: tensor<1x1x40x8xf32>, %k: tensor<3x1x12x16xf32>, %v: tensor<3x1x12x8xf32>, %qs: tensor<4xi64>, %qo: tensor<3xi64>, %kl: tensor<3xi64>) -> (tensor<1x2x7x8xf32>, tensor<1x2x7xf32>) {
  %o, %lse = kvattn.cascade %q, %pk, %pv, %k, %v q_start(%qs : tensor<4xi64>) q_offset(%qo : tensor<3xi64>) kv_len(%kl : tensor<3xi64>) causal softcap = 2.0 scale = 0.5 : tensor<1x2x7x16xf32>, tensor<1x1x40x16xf32>, tensor<1x1x40x8xf32>, tensor<3x1x12x16xf32>, tensor<3x1x12x8xf32> -> tensor<1x2x7x8xf32>, tensor<1x2x7xf32>
  return %o, %lse : tensor<1x2x7x8xf32>, tensor<1x2x7xf32>
}

func.func @small_noncausal(%q: tensor<1x2x7x16xf32>, %pk: tensor<1x1x40x16xf32>, %pv: tensor<1x1x40x8xf32>, %k: tensor<3x1x12x16xf32>, %v: tensor<3x1x12x8xf32>, %qs: tensor<4xi64>, %qo: tensor<3xi64>, %kl: tensor<3xi64>) -> tensor<1x2x7x8xf32> {
  %o = kvattn.cascade %q, %pk, %pv, %k, %v q_start(%qs : tensor<4xi64>) q_offset(%qo : tensor<3xi64>) kv_len(%kl : tensor<3xi64>) : tensor<1x2x7x16xf32>, tensor<1x1x40x16xf32>, tensor<1x1x40x8xf32>, tensor<3x1x12x16xf32>, tensor<3x1x12x8xf32> -> tensor<1x2x7x8xf32>
  return %o : tensor<1x2x7x8xf32>
}
