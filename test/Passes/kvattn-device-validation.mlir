// RUN: kvattn-opt %s -split-input-file --pass-pipeline='builtin.module(kvattn-tile{split-kv=1},kvattn-outline-tile-programs,kvattn-device-validation)' | FileCheck %s --enable-var-scope
// RUN: kvattn-opt %s -split-input-file --pass-pipeline='builtin.module(kvattn-tile{split-kv=1},kvattn-outline-tile-programs,kvattn-device-validation)' | FileCheck %s --check-prefix=I64
// RUN: kvattn-opt %s -split-input-file --pass-pipeline='builtin.module(kvattn-tile{split-kv=1},kvattn-outline-tile-programs,kvattn-device-validation{index-bitwidth=32})' | FileCheck %s --enable-var-scope --check-prefixes=CHECK,I32

// -kvattn-device-validation (docs/kernel-abi.md, "The status word"): the
// host allocates one status word (i64[16]); a validation kernel, one block of
// 128 threads per batch entry, is launched before the attention kernel it
// checks; both take the status word; each kernel's body runs only while
// status[0] == 0. The rule codes are kvattn/Support/StatusWord.h's: 1
// kv_len outside [0, S], 3 negative offset, 4 offset above 2^62, and with
// 32-bit kernels 19, a position of 2^31 - 1 or more (the kernels form
// position + 1 in i32).
// CHECK-LABEL: func.func @decode
// CHECK: %[[STATUS:.*]] = memref.alloc() {kvattn.role = #kvattn.role<status>} : memref<16xi64>
// (The printer names a constant after its value: %c2_11 is a 2.)
// CHECK: gpu.launch_func @kvattn_kernels::@decode_kvattn_0_validate blocks in (%c2{{(_[0-9]+)?}}, %{{.*}}, %{{.*}}) threads in (%c128{{(_[0-9]+)?}}, %{{.*}}, %{{.*}}) {{.*}}args({{.*}}%[[STATUS]] : memref<16xi64>
// CHECK-NEXT: gpu.launch_func @kvattn_kernels::@decode_kvattn_0 {{.*}}args({{.*}}%[[STATUS]] : memref<16xi64>
// CHECK: gpu.module @kvattn_kernels
// The attention kernel: `status` after the other pointers, before the
// sizes; nothing is computed once a violation is recorded.
// CHECK: gpu.func @decode_kvattn_0({{.*}}: memref<1xf16>, %[[KST:.*]]: memref<16xi64>, %{{.*}}: index
// CHECK-SAME: kvattn.params = [{{.*}}#kvattn.param<name = "status", kind = pointer, element_type = i64, shape = [16]>
// CHECK: %[[W0:.*]] = memref.load %[[KST]][%{{.*}}] : memref<16xi64>
// CHECK: %[[OK:.*]] = arith.cmpi eq, %[[W0]], %{{.*}} : i64
// CHECK: scf.if %[[OK]] {
// CHECK: gpu.func @decode_kvattn_0_validate(%{{.*}}: memref<1xi32>, %{{.*}}: memref<1xi32>, %[[VST:.*]]: memref<16xi64>
// CHECK-SAME: kvattn.tile_config = #kvattn.tile_config<kind = validate, block_m = 1, block_n = 0, num_warps = 4, num_stages = 1, validates = @decode_kvattn_0>
// CHECK: memref.load %[[VST]]
// kv_len[b] outside [0, S]: rule 1, recorded with atomic minima so the
// first violation in (kernel, batch, index) order wins. (The kernel's text
// is assembled in an order that depends on the C++ compiler's argument
// evaluation: the checks within a rule are unordered here.)
// CHECK-DAG: arith.cmpi sgt
// CHECK-DAG: arith.cmpi slt
// CHECK: memref.atomic_rmw mins %{{.*}}, %[[VST]]
// q_offset[b]: negative (3), above 2^62 (4), and for 32-bit kernels a last
// position of 2^31 - 1 or more (19); 64-bit kernels have no such rule.
// CHECK-DAG: arith.constant 4611686018427387904 : i64
// CHECK-DAG: arith.constant 4 : i64
// CHECK-DAG: arith.constant 3 : i64
// I32-DAG: arith.constant 2147483647 : i64
// I32-DAG: arith.constant 19 : i64
// I64-NOT: 2147483647
func.func @decode(%q: tensor<2x4x1x16xf16>, %k: tensor<2x2x32x16xf16>, %v: tensor<2x2x32x16xf16>, %qo: tensor<2xi32>, %n: tensor<2xi32>) -> tensor<2x4x1x16xf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<2xi32>) kv_len(%n : tensor<2xi32>) causal : tensor<2x4x1x16xf16>, tensor<2x2x32x16xf16>, tensor<2x2x32x16xf16> -> tensor<2x4x1x16xf16>
  return %o : tensor<2x4x1x16xf16>
}

// -----

// An attention that reads no metadata needs no check on the device: no
// validation kernel, but the kernel still takes the status word (a plan's
// kernels share one ABI) and still stops once another kernel recorded a
// violation.
// CHECK-LABEL: func.func @static_metadata
// CHECK-NOT: _validate
// CHECK: gpu.launch_func @kvattn_kernels::@static_metadata_kvattn_0 {{.*}}memref<16xi64>
// CHECK-NOT: _validate
// CHECK: gpu.func @static_metadata_kvattn_0({{.*}}%[[ST:.*]]: memref<16xi64>
// CHECK: memref.load %[[ST]]
// CHECK-NOT: _validate
func.func @static_metadata(%q: tensor<1x2x4x16xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x2x8x16xf32>) -> tensor<1x2x4x16xf32> {
  %o = kvattn.attention %q, %k, %v : tensor<1x2x4x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32> -> tensor<1x2x4x16xf32>
  return %o : tensor<1x2x4x16xf32>
}
