// REQUIRES: libdevice
// RUN: rm -rf %t && kvattn-compile %s -o %t/serve --chip=sm_80 | FileCheck %s --check-prefix=TOOL
// RUN: FileCheck %s --input-file=%t/serve.json
//
// Shared-prefix (cascade) attention through kvattn-to-ptx
// (docs/kernel-abi.md, "Cascade kernels"): a GQA 8/2 cascade with dynamic
// sizes gives three kernels in launch order. The prefix kernel (kind
// cascade_prefix: B = 1, grid without B) reads query, prefix_key and
// prefix_value [1, 2, "P", 64] (the size P, its last scalar) and writes
// part 0; the ragged suffix kernel reads key/value [B, 2, S, 64] and the
// metadata and writes part 1; the merge kernel (kind cascade_merge, B = 1)
// reads both parts and writes out and lse. The parts are f32
// [2, 1, 8, "L", ...].

// TOOL: serve_kvattn_0: 10 params
// TOOL: serve_kvattn_1: 13 params
// TOOL: serve_kvattn_2: 7 params

// CHECK-LABEL: "name": "serve_kvattn_0",
// CHECK: {"index": 0, "name": "query", {{.*}} "shape": [1, 8, "L", 64], "access": "read"},
// CHECK-NEXT: {"index": 1, "name": "prefix_key", {{.*}} "element_type": "bf16", "shape": [1, 2, "P", 64], "access": "read"},
// CHECK-NEXT: {"index": 2, "name": "prefix_value", {{.*}} "shape": [1, 2, "P", 64], "access": "read"},
// CHECK-NEXT: {"index": 3, "name": "out_parts", {{.*}} "element_type": "f32", "shape": [2, 1, 8, "L", 64], "access": "write"},
// CHECK-NEXT: {"index": 4, "name": "lse_parts", {{.*}} "shape": [2, 1, 8, "L"], "access": "write"},
// CHECK-NEXT: {"index": 5, "name": "B", "kind": "scalar"
// CHECK: {"index": 9, "name": "P", "kind": "scalar"
// CHECK: "grid": {"x": "Hq / 4", "y": "ceil(4 * L / {{[0-9]+}})", "z": 1},
// CHECK: "kind": "cascade_prefix"

// CHECK-LABEL: "name": "serve_kvattn_1",
// CHECK: {"index": 1, "name": "key", {{.*}} "shape": ["B", 2, "S", 64], "access": "read"},
// CHECK: {"index": 5, "name": "q_start", {{.*}} "shape": ["B+1"], "access": "read"},
// CHECK-NEXT: {"index": 6, "name": "out_parts", {{.*}} "shape": [2, 1, 8, "L", 64], "access": "write"},
// CHECK-NEXT: {"index": 7, "name": "lse_parts", {{.*}} "shape": [2, 1, 8, "L"], "access": "write"},
// CHECK: {"index": 12, "name": "S", "kind": "scalar"
// CHECK: "kind": "attention_varlen"

// CHECK-LABEL: "name": "serve_kvattn_2",
// CHECK: {"index": 0, "name": "out", {{.*}} "element_type": "bf16", "shape": [1, 8, "L", 64], "access": "write"},
// CHECK-NEXT: {"index": 1, "name": "lse", {{.*}} "shape": [1, 8, "L"], "access": "write"},
// CHECK-NEXT: {"index": 2, "name": "out_parts", {{.*}} "access": "read"},
// CHECK-NEXT: {"index": 3, "name": "lse_parts", {{.*}} "access": "read"},
// CHECK: "grid": {"x": "Hq", "y": "ceil(L / 64)", "z": 1},
// CHECK: "kind": "cascade_merge"

func.func @serve(%q: tensor<1x8x?x64xbf16>, %pk: tensor<1x2x?x64xbf16>, %pv: tensor<1x2x?x64xbf16>, %k: tensor<?x2x?x64xbf16>, %v: tensor<?x2x?x64xbf16>, %qs: tensor<?xi32>, %qo: tensor<?xi32>, %kl: tensor<?xi32>) -> (tensor<1x8x?x64xbf16>, tensor<1x8x?xf32>) {
  %o, %lse = kvattn.cascade %q, %pk, %pv, %k, %v q_start(%qs : tensor<?xi32>) q_offset(%qo : tensor<?xi32>) kv_len(%kl : tensor<?xi32>) causal : tensor<1x8x?x64xbf16>, tensor<1x2x?x64xbf16>, tensor<1x2x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<1x8x?x64xbf16>, tensor<1x8x?xf32>
  return %o, %lse : tensor<1x8x?x64xbf16>, tensor<1x8x?xf32>
}
