// REQUIRES: libdevice
// RUN: kvattn-compile %s -o %t/sm90 --chip=sm_90 --features=+ptx80 --block-m=64 --block-n=64 --split-kv=1 | FileCheck %s --check-prefix=TOOL
// RUN: FileCheck %s --input-file=%t/sm90.ptx
// RUN: FileCheck %s --input-file=%t/sm90.json --check-prefix=JSON
// RUN: kvattn-compile %s -o %t/sm90-i64 --chip=sm_90 --index-bitwidth=64
// RUN: FileCheck %s --input-file=%t/sm90-i64.json --check-prefix=JSON64
// RUN: not kvattn-compile %s -o %t/bad --chip=sm_90 --index-bitwidth=16 2>&1 | FileCheck %s --check-prefix=BADWIDTH
// JSON64: "index_bits": 64,
// BADWIDTH: kvattn-compile: error: --index-bitwidth=16 is not 32 or 64
//
// The PTX of an append (lower-right through q_offset, kv_len) in bf16:
// the chip, one .entry per attention with the bare-pointer ABI, the program
// tiles in dynamic shared memory, K and V blocks staged with cp.async,
// Q.K^T and P.V on tensor cores (mma.sync m16n8k16 with ldmatrix operands),
// the loop over KV blocks with barriers and the quad shuffles of the row
// reductions, libdevice linked in (no external math calls) and no
// local-memory stack frame. --split-kv=1: one kernel (kvattn-compile's
// default, split-kv = 0, gives these dynamic shapes a run-time split:
// runtime-split-manifest.mlir).

// TOOL: wrote {{.*}}sm90.ptx (1 kernel, sm_90) and {{.*}}sm90.json
// TOOL: append_kvattn_0: 12 params, block 128 threads, dynamic shared memory {{[0-9]+}} bytes

// CHECK: .version 8.0
// CHECK: .target sm_90
// CHECK: .extern .shared .align {{[0-9]+}} .b8 __dynamic_shmem__0[];
// CHECK: .visible .entry append_kvattn_0(
// CHECK-COUNT-7: .param .u64 .ptr .align 1 append_kvattn_0_param_{{[0-9]+}},
// CHECK-COUNT-5: .param .u64 append_kvattn_0_param_{{[0-9]+}}
// CHECK: .maxntid 128, 1, 1
// The program ids.
// CHECK-DAG: %ctaid.x;
// CHECK-DAG: %ctaid.y;
// CHECK-DAG: %tid.x;
// Tiles and the K/V blocks in shared memory, barriers between phases, xor
// shuffles across the four lanes of a row.
// CHECK-DAG: st.shared
// CHECK-DAG: cp.async.{{ca|cg}}.shared.global [{{.*}}], [{{.*}}], 16, {{.*}};
// CHECK-DAG: cp.async.commit_group;
// CHECK-DAG: cp.async.wait_group {{.*}}0;
// CHECK-DAG: bar.sync 0;
// CHECK-DAG: shfl.sync.bfly.b32 {{.*}}, 1, 31, -1;
// CHECK-DAG: shfl.sync.bfly.b32 {{.*}}, 2, 31, -1;
// bf16 operands through ldmatrix (x4: Q once, K and V two slices at a
// time), f32 accumulation on tensor cores, probabilities rounded to bf16
// pairs, bf16 out; Q loaded and O stored in 16-byte accesses (O staged per
// warp through its own Q rows).
// CHECK-DAG: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// CHECK-DAG: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// CHECK-DAG: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// CHECK-DAG: cvt.rn.bf16x2.f32
// CHECK-DAG: ld.global.v4.b32
// CHECK-DAG: bar.warp.sync -1;
// CHECK-DAG: ld.shared.v4.b32
// CHECK-DAG: st.global.v4.b32
// The exponential as one ex2.approx.ftz (no libdevice call).
// CHECK-DAG: ex2.approx.ftz.f32
// CHECK-NOT: __nv_
// CHECK-NOT: .local

// JSON: "format": "kvattn-launch-manifest",
// JSON: "version": 1,
// JSON: "chip": "sm_90",
// The kernels' index arithmetic is 32-bit by default (docs/kernel-abi.md).
// JSON: "index_bits": 32,
// JSON: "ptx_file": "sm90.ptx",
// JSON: "name": "append_kvattn_0",
// JSON: {"index": 0, "name": "query", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["B", 8, 4, 128], "access": "read"},
// JSON: {"index": 1, "name": "key", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["B", 2, "S", 128], "access": "read"},
// JSON: {"index": 2, "name": "value", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["B", 2, "S", 128], "access": "read"},
// JSON: {"index": 3, "name": "q_offset", "kind": "pointer", "type": "u64", "element_type": "i32", "shape": ["B"], "access": "read"},
// JSON: {"index": 4, "name": "kv_len", "kind": "pointer", "type": "u64", "element_type": "i32", "shape": ["B"], "access": "read"},
// JSON: {"index": 5, "name": "out", "kind": "pointer", "type": "u64", "element_type": "bf16", "shape": ["B", 8, 4, 128], "access": "write"},
// JSON: {"index": 6, "name": "lse", "kind": "pointer", "type": "u64", "element_type": "f32", "shape": ["B", 8, 4], "access": "write"},
// JSON: {"index": 7, "name": "B", "kind": "scalar", "type": "i64", "element_type": "i64"},
// JSON: {"index": 11, "name": "S", "kind": "scalar", "type": "i64", "element_type": "i64"}
// GQA packing needs only the head counts static (B and S are dynamic here):
// one program per (batch, kv head) over the 4 x 4 packed rows of its group.
// JSON: "grid": {"x": "B * Hq / 4", "y": "ceil(4 * L / 64)", "z": 1},
// JSON: "block": {"x": 128, "y": 1, "z": 1},
// JSON: "dynamic_shared_memory_bytes": 49152,
// JSON: "tile": {"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 2, "group": 4, "split_kv": 1},
// JSON: "kind": "attention"

func.func @append(%q: tensor<?x8x4x128xbf16>, %k: tensor<?x2x?x128xbf16>, %v: tensor<?x2x?x128xbf16>,
                  %pos: tensor<?xi32>, %len: tensor<?xi32>) -> (tensor<?x8x4x128xbf16>, tensor<?x8x4xf32>) {
  %o, %lse = kvattn.attention %q, %k, %v q_offset(%pos : tensor<?xi32>) kv_len(%len : tensor<?xi32>) causal
      : tensor<?x8x4x128xbf16>, tensor<?x2x?x128xbf16>, tensor<?x2x?x128xbf16> -> tensor<?x8x4x128xbf16>, tensor<?x8x4xf32>
  return %o, %lse : tensor<?x8x4x128xbf16>, tensor<?x8x4xf32>
}
