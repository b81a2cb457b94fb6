// The range check (docs/semantics.md, "Range") of an attention over caches
// an append of the same call writes. The reference (--target=reference)
// writes a copy of each cache and checks the copy; a compiled path's
// validation writes nothing (the caches are the caller's memory) and reads
// the written rows beside the cache. Both decide alike, message for
// message: the written rows count, the rows they replace do not, the rows
// before them do, the rows past kv_len do not.
//
// Contiguous: K/V [1, 1, 8, 8], two rows written at pos 4, kv_len 6 (row r
// is elements [8r, 8r + 8)).
// The new keys count:
// RUN: not kvattn-run %s --entry=step --input 0=2e19 --fill 3=0:16:2e19 --input 5=4 --target=reference 2>&1 | FileCheck %s --check-prefix=SCORES
// RUN: not kvattn-run %s --entry=step --input 0=2e19 --fill 3=0:16:2e19 --input 5=4 --target=cpu 2>&1 | FileCheck %s --check-prefix=SCORES
// SCORES: 'kvattn.attention': scores may overflow f32: max|q| = 2e+19, max|k| = 2e+19, D = 8
// The cache rows they replace (4 and 5) do not, nor do the rows past kv_len:
// RUN: kvattn-run %s --entry=step --input 0=2e19 --fill 1=32:16:2e19 --fill 1=48:16:2e19 --input 5=4 --target=cpu --check | FileCheck %s --check-prefix=PASS
// The rows before them do:
// RUN: not kvattn-run %s --entry=step --input 0=2e19 --fill 1=24:8:2e19 --input 5=4 --target=reference 2>&1 | FileCheck %s --check-prefix=SCORES
// RUN: not kvattn-run %s --entry=step --input 0=2e19 --fill 1=24:8:2e19 --input 5=4 --target=cpu 2>&1 | FileCheck %s --check-prefix=SCORES
// Values alike:
// RUN: not kvattn-run %s --entry=step --fill 4=8:8:1e38 --input 5=4 --target=reference 2>&1 | FileCheck %s --check-prefix=VALUES
// RUN: not kvattn-run %s --entry=step --fill 4=8:8:1e38 --input 5=4 --target=cpu 2>&1 | FileCheck %s --check-prefix=VALUES
// VALUES: 'kvattn.attention': the weighted sum of values may overflow f32: max|v| = 1e+38 over 6 keys
// RUN: kvattn-run %s --entry=step --fill 2=32:16:1e38 --input 5=4 --target=cpu --check | FileCheck %s --check-prefix=PASS
// PASS: {{^PASS$}}
//
// Paged: pages of 4 rows, sequence 0 on pages 3 then 1; the write at pos 5
// goes to page 1's slots 1 and 2 (elements [40, 56) of the pool), page 3
// holds rows 0-3 (elements [96, 128)), pages 0 and 2 are no sequence's.
// RUN: not kvattn-run %s --entry=paged_step --input 0=2e19 --fill 3=8:8:2e19 --target=reference 2>&1 | FileCheck %s --check-prefix=SCORES
// RUN: not kvattn-run %s --entry=paged_step --input 0=2e19 --fill 3=8:8:2e19 --target=cpu 2>&1 | FileCheck %s --check-prefix=SCORES
// RUN: kvattn-run %s --entry=paged_step --input 0=2e19 --fill 1=40:16:2e19 --fill 1=0:32:2e19 --fill 1=64:32:2e19 --target=cpu --check | FileCheck %s --check-prefix=PASS
// RUN: not kvattn-run %s --entry=paged_step --input 0=2e19 --fill 1=32:8:2e19 --target=reference 2>&1 | FileCheck %s --check-prefix=SCORES
// RUN: not kvattn-run %s --entry=paged_step --input 0=2e19 --fill 1=32:8:2e19 --target=cpu 2>&1 | FileCheck %s --check-prefix=SCORES
// RUN: not kvattn-run %s --entry=paged_step --input 0=2e19 --fill 1=120:8:2e19 --target=cpu 2>&1 | FileCheck %s --check-prefix=SCORES
//
// An FP8 cache (e4m3, one scale of 1e36): the written rows count as the
// attention reads them, code times scale (300 -> code 288 -> 2.88e38);
// codes of 448 (4.48e38) in the rows they replace do not.
// RUN: not kvattn-run %s --entry=fp8_step --fill 3=8:8:3e38 --input 5=4 --input 6=1e36 --target=reference 2>&1 | FileCheck %s --check-prefix=FP8
// RUN: not kvattn-run %s --entry=fp8_step --fill 3=8:8:3e38 --input 5=4 --input 6=1e36 --target=cpu 2>&1 | FileCheck %s --check-prefix=FP8
// FP8: 'kvattn.attention': scores may overflow f32: max|q| = {{.*}}, max|k| = 2.88e+38, D = 8
// RUN: kvattn-run %s --entry=fp8_step --fill 1=32:16:448 --input 5=4 --input 6=1e36 --target=cpu --check | FileCheck %s --check-prefix=PASS

func.func @step(%q: tensor<1x2x2x8xf32>, %kc: tensor<1x1x8x8xf32>,
                %vc: tensor<1x1x8x8xf32>, %kn: tensor<1x1x2x8xf32>,
                %vn: tensor<1x1x2x8xf32>, %pos: tensor<1xi32>)
    -> tensor<1x2x2x8xf32> {
  %k = kvattn.append %kn into %kc at %pos : tensor<1x1x2x8xf32> into tensor<1x1x8x8xf32>, tensor<1xi32>
  %v = kvattn.append %vn into %vc at %pos : tensor<1x1x2x8xf32> into tensor<1x1x8x8xf32>, tensor<1xi32>
  %c2 = arith.constant dense<2> : tensor<1xi32>
  %len = arith.addi %pos, %c2 : tensor<1xi32>
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) kv_len(%len : tensor<1xi32>) causal : tensor<1x2x2x8xf32>, tensor<1x1x8x8xf32>, tensor<1x1x8x8xf32> -> tensor<1x2x2x8xf32>
  return %o : tensor<1x2x2x8xf32>
}

func.func @paged_step(%q: tensor<1x2x2x8xf32>, %kp: tensor<4x4x1x8xf32>,
                      %vp: tensor<4x4x1x8xf32>, %kn: tensor<1x1x2x8xf32>,
                      %vn: tensor<1x1x2x8xf32>) -> tensor<1x2x2x8xf32> {
  %pos = arith.constant dense<5> : tensor<1xi32>
  %len = arith.constant dense<7> : tensor<1xi32>
  %bt = arith.constant dense<[[3, 1]]> : tensor<1x2xi32>
  %k = kvattn.append %kn into %kp at %pos block_table(%bt : tensor<1x2xi32>) : tensor<1x1x2x8xf32> into tensor<4x4x1x8xf32>, tensor<1xi32>
  %v = kvattn.append %vn into %vp at %pos block_table(%bt : tensor<1x2xi32>) : tensor<1x1x2x8xf32> into tensor<4x4x1x8xf32>, tensor<1xi32>
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) kv_len(%len : tensor<1xi32>) block_table(%bt : tensor<1x2xi32>) causal : tensor<1x2x2x8xf32>, tensor<4x4x1x8xf32>, tensor<4x4x1x8xf32> -> tensor<1x2x2x8xf32>
  return %o : tensor<1x2x2x8xf32>
}

func.func @fp8_step(%q: tensor<1x2x2x8xf32>, %kc: tensor<1x1x8x8xf8E4M3FN>,
                    %vc: tensor<1x1x8x8xf8E4M3FN>, %kn: tensor<1x1x2x8xf32>,
                    %vn: tensor<1x1x2x8xf32>, %pos: tensor<1xi32>,
                    %ks: tensor<1xf32>) -> tensor<1x2x2x8xf32> {
  %vs = arith.constant dense<1.0> : tensor<1xf32>
  %k = kvattn.append %kn into %kc at %pos kv_scale(%ks : tensor<1xf32>) : tensor<1x1x2x8xf32> into tensor<1x1x8x8xf8E4M3FN>, tensor<1xi32>
  %v = kvattn.append %vn into %vc at %pos kv_scale(%vs : tensor<1xf32>) : tensor<1x1x2x8xf32> into tensor<1x1x8x8xf8E4M3FN>, tensor<1xi32>
  %c2 = arith.constant dense<2> : tensor<1xi32>
  %len = arith.addi %pos, %c2 : tensor<1xi32>
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) kv_len(%len : tensor<1xi32>) k_scale(%ks : tensor<1xf32>) v_scale(%vs : tensor<1xf32>) causal : tensor<1x2x2x8xf32>, tensor<1x1x8x8xf8E4M3FN>, tensor<1x1x8x8xf8E4M3FN> -> tensor<1x2x2x8xf32>
  return %o : tensor<1x2x2x8xf32>
}
