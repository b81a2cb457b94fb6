// The seeds' 2x5 example through kvattn.append: a cache of capacity 5 holds
// P = 3 tokens, L = 2 new ones are appended; all logits are zero (q = 0)
// and the values are 10..50. Lower-right gives 25 (mean of 10..40) and 30
// (mean of 10..50); upper-left gives 10 and 15. The reference evaluation of
// the framework IR and of the rewritten IR must agree bit for bit.
//
// DEFINE: %{args} = --input 0=0 --input 1=0 --input 2=10,20,30,0,0 --input 3=0 --input 4=40,50 --input 5=3
// RUN: rm -rf %t && mkdir -p %t
// RUN: kvattn-run %s --entry=lower_right %{args} --print-outputs --dump-outputs %t/lr-before \
// RUN:   | FileCheck %s --check-prefix=RIGHT
// RUN: kvattn-opt %s -kvattn-resolve-cached-append | kvattn-run - --entry=lower_right %{args} \
// RUN:   --print-outputs --dump-outputs %t/lr-after | FileCheck %s --check-prefix=RIGHT
// RUN: cmp %t/lr-before/out0.npy %t/lr-after/out0.npy
//
// Upper-left keeps its (buggy) meaning without the fix ...
// RUN: kvattn-run %s --entry=upper_left %{args} --print-outputs --dump-outputs %t/ul-before \
// RUN:   | FileCheck %s --check-prefix=LEFT
// RUN: kvattn-opt %s -kvattn-resolve-cached-append 2>/dev/null | kvattn-run - --entry=upper_left %{args} \
// RUN:   --print-outputs --dump-outputs %t/ul-after | FileCheck %s --check-prefix=LEFT
// RUN: cmp %t/ul-before/out0.npy %t/ul-after/out0.npy
// ... and becomes the lower-right result with fix-upper-left-appends=true.
// RUN: kvattn-opt %s -kvattn-resolve-cached-append=fix-upper-left-appends=true 2>/dev/null \
// RUN:   | kvattn-run - --entry=upper_left %{args} --print-outputs --dump-outputs %t/ul-fixed \
// RUN:   | FileCheck %s --check-prefix=RIGHT
// RUN: cmp %t/lr-before/out0.npy %t/ul-fixed/out0.npy

// RIGHT: out0: 1x1x2x1xf32{{.*}} = [25, 30]
// LEFT: out0: 1x1x2x1xf32{{.*}} = [10, 15]

func.func @lower_right(%q: tensor<1x1x2x1xf32>, %kc: tensor<1x1x5x1xf32>, %vc: tensor<1x1x5x1xf32>,
                       %kn: tensor<1x1x2x1xf32>, %vn: tensor<1x1x2x1xf32>, %pos: tensor<1xi32>)
    -> tensor<1x1x2x1xf32> {
  %k = kvattn.append %kn into %kc at %pos : tensor<1x1x2x1xf32> into tensor<1x1x5x1xf32>, tensor<1xi32>
  %v = kvattn.append %vn into %vc at %pos : tensor<1x1x2x1xf32> into tensor<1x1x5x1xf32>, tensor<1xi32>
  %o = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<1x1x2x1xf32>, tensor<1x1x5x1xf32>, tensor<1x1x5x1xf32> -> tensor<1x1x2x1xf32>
  return %o : tensor<1x1x2x1xf32>
}

func.func @upper_left(%q: tensor<1x1x2x1xf32>, %kc: tensor<1x1x5x1xf32>, %vc: tensor<1x1x5x1xf32>,
                      %kn: tensor<1x1x2x1xf32>, %vn: tensor<1x1x2x1xf32>, %pos: tensor<1xi32>)
    -> tensor<1x1x2x1xf32> {
  %k = kvattn.append %kn into %kc at %pos : tensor<1x1x2x1xf32> into tensor<1x1x5x1xf32>, tensor<1xi32>
  %v = kvattn.append %vn into %vc at %pos : tensor<1x1x2x1xf32> into tensor<1x1x5x1xf32>, tensor<1xi32>
  %o = kvattn.sdpa %q, %k, %v causal = upper_left
      : tensor<1x1x2x1xf32>, tensor<1x1x5x1xf32>, tensor<1x1x5x1xf32> -> tensor<1x1x2x1xf32>
  return %o : tensor<1x1x2x1xf32>
}
