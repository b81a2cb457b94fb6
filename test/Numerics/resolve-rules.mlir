// Every rewrite of -kvattn-resolve-cached-append preserves the meaning of
// the framework IR: the reference evaluation before and after the pass is
// bit-identical, on seeded inputs with distinct values (a shifted mask, a
// wrong kv_len or a wrong GQA mapping changes the bytes).
//
// DEFINE: %{check} = kvattn-run %s --print-outputs=false
// RUN: rm -rf %t && mkdir -p %t
// RUN: kvattn-opt %s -kvattn-resolve-cached-append -o %t/resolved.mlir 2>/dev/null
//
// GQA 8/2, batch 2 with different positions per batch (3 and 9) in a cache
// of capacity 16: lower-right over the appended rows.
// RUN: %{check} --entry=append_gqa --input 5=3,9 --dump-outputs %t/a0 | FileCheck %s --check-prefix=APPEND
// RUN: kvattn-run %t/resolved.mlir --entry=append_gqa --input 5=3,9 --dump-outputs %t/a1
// RUN: cmp %t/a0/out0.npy %t/a1/out0.npy
// APPEND: out0: 2x8x4x16xf32
//
// Single-token decode without a causal rule, one full cache (pos 15) and
// one with unused slots (pos 6).
// RUN: %{check} --entry=append_decode --input 5=15,6 --dump-outputs %t/b0 | FileCheck %s --check-prefix=DECODE
// RUN: kvattn-run %t/resolved.mlir --entry=append_decode --input 5=15,6 --dump-outputs %t/b1
// RUN: cmp %t/b0/out0.npy %t/b1/out0.npy
// DECODE: out0: 2x4x1x16xbf16
//
// Concat with dynamic shapes: the inputs come from a static helper.
// RUN: kvattn-run %s --entry=make_concat_inputs --dump-outputs %t/in
// DEFINE: %{concat_inputs} = --input 0=%t/in/out0.npy --input 1=%t/in/out1.npy --input 2=%t/in/out2.npy --input 3=%t/in/out3.npy
// RUN: %{check} --entry=concat_dynamic %{concat_inputs} --dump-outputs %t/c0 | FileCheck %s --check-prefix=CONCAT
// RUN: kvattn-run %t/resolved.mlir --entry=concat_dynamic %{concat_inputs} --dump-outputs %t/c1
// RUN: cmp %t/c0/out0.npy %t/c1/out0.npy
// CONCAT: out0: 1x4x3x8xf16
//
// insert_slice that ends the buffer.
// RUN: %{check} --entry=insert_suffix --dump-outputs %t/d0
// RUN: kvattn-run %t/resolved.mlir --entry=insert_suffix --dump-outputs %t/d1
// RUN: cmp %t/d0/out0.npy %t/d1/out0.npy
//
// No relation: lower-right with more queries than keys, and upper-left.
// RUN: %{check} --entry=more_queries --dump-outputs %t/e0 | FileCheck %s --check-prefix=MORE
// RUN: kvattn-run %t/resolved.mlir --entry=more_queries --dump-outputs %t/e1
// RUN: cmp %t/e0/out0.npy %t/e1/out0.npy
// MORE: out0: 1x2x6x8xf32
// RUN: %{check} --entry=upper_left_plain --dump-outputs %t/f0
// RUN: kvattn-run %t/resolved.mlir --entry=upper_left_plain --dump-outputs %t/f1
// RUN: cmp %t/f0/out0.npy %t/f1/out0.npy
//
// Masks: key-only bool (becomes key validity), general bool, float.
// DEFINE: %{keymask} = --input 3=1,0,1,1,1,1,0,1,1,1,1,1,1,1,1,0,0,1,1,1,1,1,1,1,1,1,1,1,0,1,1,1
// RUN: %{check} --entry=key_mask %{keymask} --dump-outputs %t/g0
// RUN: kvattn-run %t/resolved.mlir --entry=key_mask %{keymask} --dump-outputs %t/g1
// RUN: cmp %t/g0/out0.npy %t/g1/out0.npy
// DEFINE: %{rowmask} = --input 3=1,1,0,0,1,0,1,0,0,1,1,1
// RUN: %{check} --entry=row_mask %{rowmask} --dump-outputs %t/h0
// RUN: kvattn-run %t/resolved.mlir --entry=row_mask %{rowmask} --dump-outputs %t/h1
// RUN: cmp %t/h0/out0.npy %t/h1/out0.npy
// RUN: %{check} --entry=float_mask --input 3=0,-inf,0.5,-1,2,-inf --dump-outputs %t/i0
// RUN: kvattn-run %t/resolved.mlir --entry=float_mask --input 3=0,-inf,0.5,-1,2,-inf --dump-outputs %t/i1
// RUN: cmp %t/i0/out0.npy %t/i1/out0.npy
//
// Sliding window, soft cap and LSE (lower-right over an append with
// per-batch positions, and upper-left with more keys than rows): both
// results bit-identical, and the CPU path within tolerance of the reference.
// RUN: %{check} --entry=window_append --input 5=3,9 --dump-outputs %t/j0 | FileCheck %s --check-prefix=WINDOW
// RUN: kvattn-run %t/resolved.mlir --entry=window_append --input 5=3,9 --dump-outputs %t/j1
// RUN: cmp %t/j0/out0.npy %t/j1/out0.npy
// RUN: cmp %t/j0/out1.npy %t/j1/out1.npy
// RUN: kvattn-run %s --entry=window_append --input 5=3,9 --target=cpu --check | FileCheck %s --check-prefix=MATCH
// WINDOW: out0: 2x8x4x16xf32
// WINDOW: out1: 2x8x4xf32
// RUN: %{check} --entry=window_upper_left --dump-outputs %t/k0
// RUN: kvattn-run %t/resolved.mlir --entry=window_upper_left --dump-outputs %t/k1
// RUN: cmp %t/k0/out0.npy %t/k1/out0.npy
// RUN: kvattn-run %s --entry=window_upper_left --target=cpu --check | FileCheck %s --check-prefix=MATCH
// MATCH: {{^PASS$}}

func.func @append_gqa(%q: tensor<2x8x4x16xf32>, %kc: tensor<2x2x16x16xf32>,
    %vc: tensor<2x2x16x16xf32>, %kn: tensor<2x2x4x16xf32>, %vn: tensor<2x2x4x16xf32>,
    %pos: tensor<2xi32>) -> tensor<2x8x4x16xf32> {
  %k = kvattn.append %kn into %kc at %pos : tensor<2x2x4x16xf32> into tensor<2x2x16x16xf32>, tensor<2xi32>
  %v = kvattn.append %vn into %vc at %pos : tensor<2x2x4x16xf32> into tensor<2x2x16x16xf32>, tensor<2xi32>
  %o = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<2x8x4x16xf32>, tensor<2x2x16x16xf32>, tensor<2x2x16x16xf32> -> tensor<2x8x4x16xf32>
  return %o : tensor<2x8x4x16xf32>
}

func.func @append_decode(%q: tensor<2x4x1x16xbf16>, %kc: tensor<2x2x16x16xbf16>,
    %vc: tensor<2x2x16x16xbf16>, %kn: tensor<2x2x1x16xbf16>, %vn: tensor<2x2x1x16xbf16>,
    %pos: tensor<2xi64>) -> tensor<2x4x1x16xbf16> {
  %k = kvattn.append %kn into %kc at %pos : tensor<2x2x1x16xbf16> into tensor<2x2x16x16xbf16>, tensor<2xi64>
  %v = kvattn.append %vn into %vc at %pos : tensor<2x2x1x16xbf16> into tensor<2x2x16x16xbf16>, tensor<2xi64>
  %o = kvattn.sdpa %q, %k, %v
      : tensor<2x4x1x16xbf16>, tensor<2x2x16x16xbf16>, tensor<2x2x16x16xbf16> -> tensor<2x4x1x16xbf16>
  return %o : tensor<2x4x1x16xbf16>
}

func.func @make_concat_inputs(%q: tensor<1x4x3x8xf16>, %kc: tensor<1x2x7x8xf16>,
    %kn: tensor<1x2x3x8xf16>, %v: tensor<1x2x10x8xf16>)
    -> (tensor<1x4x3x8xf16>, tensor<1x2x7x8xf16>, tensor<1x2x3x8xf16>, tensor<1x2x10x8xf16>) {
  return %q, %kc, %kn, %v : tensor<1x4x3x8xf16>, tensor<1x2x7x8xf16>, tensor<1x2x3x8xf16>, tensor<1x2x10x8xf16>
}

func.func @concat_dynamic(%q: tensor<?x4x?x8xf16>, %kc: tensor<?x2x?x8xf16>,
    %kn: tensor<?x2x?x8xf16>, %v: tensor<?x2x?x8xf16>) -> tensor<?x4x?x8xf16> {
  %k = tensor.concat dim(2) %kc, %kn : (tensor<?x2x?x8xf16>, tensor<?x2x?x8xf16>) -> tensor<?x2x?x8xf16>
  %o = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<?x4x?x8xf16>, tensor<?x2x?x8xf16>, tensor<?x2x?x8xf16> -> tensor<?x4x?x8xf16>
  return %o : tensor<?x4x?x8xf16>
}

func.func @insert_suffix(%q: tensor<1x2x4x8xf32>, %buf: tensor<1x2x16x8xf32>,
    %kn: tensor<1x2x4x8xf32>, %v: tensor<1x2x16x8xf32>) -> tensor<1x2x4x8xf32> {
  %k = tensor.insert_slice %kn into %buf[0, 0, 12, 0] [1, 2, 4, 8] [1, 1, 1, 1]
      : tensor<1x2x4x8xf32> into tensor<1x2x16x8xf32>
  %o = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<1x2x4x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32> -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

func.func @more_queries(%q: tensor<1x2x6x8xf32>, %k: tensor<1x1x4x8xf32>,
    %v: tensor<1x1x4x8xf32>) -> tensor<1x2x6x8xf32> {
  %o = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<1x2x6x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32> -> tensor<1x2x6x8xf32>
  return %o : tensor<1x2x6x8xf32>
}

func.func @upper_left_plain(%q: tensor<2x2x4x8xf32>, %k: tensor<2x2x9x8xf32>,
    %v: tensor<2x2x9x8xf32>) -> tensor<2x2x4x8xf32> {
  %o = kvattn.sdpa %q, %k, %v causal = upper_left scale = 0.7
      : tensor<2x2x4x8xf32>, tensor<2x2x9x8xf32>, tensor<2x2x9x8xf32> -> tensor<2x2x4x8xf32>
  return %o : tensor<2x2x4x8xf32>
}

func.func @key_mask(%q: tensor<2x4x3x8xf32>, %k: tensor<2x2x16x8xf32>,
    %v: tensor<2x2x16x8xf32>, %m: tensor<2x1x1x16xi1>) -> tensor<2x4x3x8xf32> {
  %o = kvattn.sdpa %q, %k, %v mask(%m : tensor<2x1x1x16xi1>)
      : tensor<2x4x3x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32> -> tensor<2x4x3x8xf32>
  return %o : tensor<2x4x3x8xf32>
}

func.func @row_mask(%q: tensor<1x2x3x8xf32>, %k: tensor<1x2x4x8xf32>,
    %v: tensor<1x2x4x8xf32>, %m: tensor<3x4xi1>) -> tensor<1x2x3x8xf32> {
  %o = kvattn.sdpa %q, %k, %v mask(%m : tensor<3x4xi1>)
      : tensor<1x2x3x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x3x8xf32>
  return %o : tensor<1x2x3x8xf32>
}

func.func @float_mask(%q: tensor<1x2x3x8xf32>, %k: tensor<1x2x6x8xf32>,
    %v: tensor<1x2x6x8xf32>, %m: tensor<1x1x1x6xf32>) -> tensor<1x2x3x8xf32> {
  %o = kvattn.sdpa %q, %k, %v mask(%m : tensor<1x1x1x6xf32>)
      : tensor<1x2x3x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32> -> tensor<1x2x3x8xf32>
  return %o : tensor<1x2x3x8xf32>
}

func.func @window_append(%q: tensor<2x8x4x16xf32>, %kc: tensor<2x2x16x16xf32>,
    %vc: tensor<2x2x16x16xf32>, %kn: tensor<2x2x4x16xf32>, %vn: tensor<2x2x4x16xf32>,
    %pos: tensor<2xi32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4xf32>) {
  %k = kvattn.append %kn into %kc at %pos : tensor<2x2x4x16xf32> into tensor<2x2x16x16xf32>, tensor<2xi32>
  %v = kvattn.append %vn into %vc at %pos : tensor<2x2x4x16xf32> into tensor<2x2x16x16xf32>, tensor<2xi32>
  %o, %lse = kvattn.sdpa %q, %k, %v causal = lower_right window = 5 softcap = 2.0
      : tensor<2x8x4x16xf32>, tensor<2x2x16x16xf32>, tensor<2x2x16x16xf32>
      -> tensor<2x8x4x16xf32>, tensor<2x8x4xf32>
  return %o, %lse : tensor<2x8x4x16xf32>, tensor<2x8x4xf32>
}

func.func @window_upper_left(%q: tensor<2x2x6x8xf32>, %k: tensor<2x2x9x8xf32>,
    %v: tensor<2x2x9x8xf32>) -> tensor<2x2x6x8xf32> {
  %o = kvattn.sdpa %q, %k, %v causal = upper_left window = 3
      : tensor<2x2x6x8xf32>, tensor<2x2x9x8xf32>, tensor<2x2x9x8xf32> -> tensor<2x2x6x8xf32>
  return %o : tensor<2x2x6x8xf32>
}
