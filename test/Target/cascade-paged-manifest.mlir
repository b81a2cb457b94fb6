// REQUIRES: libdevice
// RUN: rm -rf %t && kvattn-compile %s -o %t/serve --chip=sm_80 | FileCheck %s --check-prefix=TOOL
// RUN: FileCheck %s --input-file=%t/serve.json
//
// A paged cascade through kvattn-to-ptx (docs/kernel-abi.md, "Cascade
// kernels"): one page pool [num_pages, 16, 2, 64] holds the shared prefix
// and the suffixes (the same pool bound twice). The prefix kernel (kind
// cascade_prefix, B = 1) reads the pool as prefix_key/prefix_value
// ["prefix_num_pages", 16, 2, 64] through prefix_pages ["prefix_max_pages"]
// (the cascade's operand, one sequence's table) of prefix_len [1] keys and
// takes the sizes prefix_num_pages, prefix_page_size, prefix_max_pages
// after P (= prefix_max_pages * prefix_page_size); the ragged suffix kernel
// reads key/value ["num_pages", 16, 2, 64] through block_table
// ["B", "max_pages"]; the merge kernel is the contiguous cascade's.

// TOOL: serve_kvattn_0: 15 params
// TOOL: serve_kvattn_1: 17 params
// TOOL: serve_kvattn_2: 7 params

// CHECK-LABEL: "name": "serve_kvattn_0",
// CHECK: {"index": 0, "name": "query", {{.*}} "shape": [1, 8, "L", 64], "access": "read"},
// CHECK-NEXT: {"index": 1, "name": "prefix_key", {{.*}} "element_type": "bf16", "shape": ["prefix_num_pages", 16, 2, 64], "access": "read"},
// CHECK-NEXT: {"index": 2, "name": "prefix_value", {{.*}} "shape": ["prefix_num_pages", 16, 2, 64], "access": "read"},
// CHECK-NEXT: {"index": 3, "name": "prefix_len", {{.*}} "element_type": "i32", "shape": [1], "access": "read"},
// CHECK-NEXT: {"index": 4, "name": "prefix_pages", {{.*}} "element_type": "i32", "shape": ["prefix_max_pages"], "access": "read"},
// CHECK-NEXT: {"index": 5, "name": "out_parts", {{.*}} "shape": [2, 1, 8, "L", 64], "access": "write"},
// CHECK-NEXT: {"index": 6, "name": "lse_parts", {{.*}} "shape": [2, 1, 8, "L"], "access": "write"},
// CHECK-NEXT: {"index": 7, "name": "B", "kind": "scalar"
// CHECK: {"index": 11, "name": "P", "kind": "scalar"
// CHECK-NEXT: {"index": 12, "name": "prefix_num_pages", "kind": "scalar"
// CHECK-NEXT: {"index": 13, "name": "prefix_page_size", "kind": "scalar"
// CHECK-NEXT: {"index": 14, "name": "prefix_max_pages", "kind": "scalar"
// CHECK: "grid": {"x": "Hq / 4", "y": "ceil(4 * L / {{[0-9]+}})", "z": 1},
// CHECK: "kind": "cascade_prefix"

// CHECK-LABEL: "name": "serve_kvattn_1",
// CHECK: {"index": 1, "name": "key", {{.*}} "shape": ["num_pages", 16, 2, 64], "access": "read"},
// CHECK: {"index": 5, "name": "block_table", {{.*}} "shape": ["B", "max_pages"], "access": "read"},
// CHECK: {"index": 13, "name": "S", "kind": "scalar"
// CHECK-NEXT: {"index": 14, "name": "num_pages", "kind": "scalar"
// CHECK-NEXT: {"index": 15, "name": "page_size", "kind": "scalar"
// CHECK-NEXT: {"index": 16, "name": "max_pages", "kind": "scalar"
// CHECK: "kind": "attention_varlen"

// CHECK-LABEL: "name": "serve_kvattn_2",
// CHECK: "kind": "cascade_merge"

func.func @serve(%q: tensor<1x8x?x64xbf16>, %k: tensor<?x16x2x64xbf16>, %v: tensor<?x16x2x64xbf16>, %qs: tensor<?xi32>, %qo: tensor<?xi32>, %kl: tensor<?xi32>, %pp: tensor<?xi32>, %pl: tensor<1xi32>, %bt: tensor<?x?xi32>) -> (tensor<1x8x?x64xbf16>, tensor<1x8x?xf32>) {
  %o, %lse = kvattn.cascade %q, %k, %v, %k, %v q_start(%qs : tensor<?xi32>) q_offset(%qo : tensor<?xi32>) kv_len(%kl : tensor<?xi32>) prefix_pages(%pp : tensor<?xi32>) prefix_len(%pl : tensor<1xi32>) block_table(%bt : tensor<?x?xi32>) causal : tensor<1x8x?x64xbf16>, tensor<?x16x2x64xbf16>, tensor<?x16x2x64xbf16>, tensor<?x16x2x64xbf16>, tensor<?x16x2x64xbf16> -> tensor<1x8x?x64xbf16>, tensor<1x8x?xf32>
  return %o, %lse : tensor<1x8x?x64xbf16>, tensor<1x8x?xf32>
}
