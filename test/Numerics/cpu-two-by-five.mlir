// The seeds' 2x5 example end to end on the CPU path: framework IR (an append
// into a cache of capacity 5 holding 3 tokens, then SDPA) goes through
// kvattn-to-cpu (resolve, tile, loops, JIT). Lower-right gives 25 and 30,
// upper-left keeps torch's meaning, 10 and 15 (and a lint warning).
//
// DEFINE: %{args} = --input 0=0 --input 1=0 --input 2=10,20,30,0,0 --input 3=0 --input 4=40,50 --input 5=3
// RUN: kvattn-run %s --entry=lower_right --target=cpu --check --print-outputs %{args} | FileCheck %s --check-prefix=RIGHT
// RUN: kvattn-run %s --entry=upper_left --target=cpu --check --print-outputs %{args} 2>/dev/null | FileCheck %s --check-prefix=LEFT
// RUN: kvattn-opt %s -kvattn-resolve-cached-append=fix-upper-left-appends=true 2>/dev/null \
// RUN:   | kvattn-run - --entry=upper_left --target=cpu --check --print-outputs %{args} | FileCheck %s --check-prefix=RIGHT
// Tiny blocks: each key its own block.
// RUN: kvattn-run %s --entry=lower_right --target=cpu --check --print-outputs --block-m=1 --block-n=1 --stats %{args} | FileCheck %s --check-prefixes=RIGHT,TINY

// RIGHT: out0: 1x1x2x1xf32 = [25, 30]
// LEFT: out0: 1x1x2x1xf32 = [10, 15]
// Two programs of one row each: row 0 (position 3) loads keys 0..3, row 1
// keys 0..4, and key 4 is skipped for row 0 (10 - 9 = 1). A 1x1 block is
// either visible or skipped, so none needs a mask.
// TINY: stats: kv blocks loaded=9 masked=0 skipped=1
// RIGHT: {{^PASS$}}
// LEFT: {{^PASS$}}

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
