// RUN: kvattn-opt %s -split-input-file --pass-pipeline='builtin.module(kvattn-append-to-gpu,kvattn-tile{split-kv=1},kvattn-outline-tile-programs,kvattn-device-validation)' | FileCheck %s --enable-var-scope
// RUN: kvattn-opt %s -split-input-file --pass-pipeline='builtin.module(kvattn-append-to-gpu,kvattn-tile{split-kv=1},kvattn-outline-tile-programs,kvattn-device-validation)' | FileCheck %s --check-prefix=I64
// RUN: kvattn-opt %s -split-input-file --pass-pipeline='builtin.module(kvattn-append-to-gpu,kvattn-tile{split-kv=1},kvattn-outline-tile-programs,kvattn-device-validation{index-bitwidth=32})' | FileCheck %s --enable-var-scope --check-prefixes=CHECK,I32
// RUN: kvattn-opt %s -split-input-file --pass-pipeline='builtin.module(kvattn-append-to-gpu,kvattn-tile{split-kv=2},kvattn-outline-tile-programs,kvattn-device-validation)' | FileCheck %s --enable-var-scope --check-prefix=SPLIT
// As the GPU pipeline runs it, after the lowering of the tile programs:
// RUN: kvattn-opt %s -split-input-file --pass-pipeline='builtin.module(kvattn-append-to-gpu,kvattn-tile{split-kv=1},kvattn-outline-tile-programs,gpu.module(kvattn-assign-tile-layouts,kvattn-lower-tile-to-gpu),kvattn-device-validation)' | FileCheck %s --check-prefix=LOWERED

// -kvattn-device-validation (docs/kernel-abi.md, "The status word"): the
// host allocates one status word (i64[16]); a validation kernel, one block of
// 128 threads per batch entry, is launched before the attention kernel it
// checks; both take the status word; each kernel's body runs only while
// status[0] == 0. The rule codes are kvattn/Support/StatusWord.h's: 1
// kv_len outside [0, S], 3 negative offset, 4 offset above 2^62, and with
// 32-bit kernels 19, a position of 2^31 - 1 or more (the kernels form
// position + 1 in i32).
// CHECK-LABEL: func.func @decode
// The kernel's private arrays (the lane's accumulator, scores, row
// statistics: registers once LLVM promotes them, which it does only for
// allocas of the entry block) stay before the guard; inside it they were
// local memory (a 680-byte stack frame on the sm_90a hd128 prefill kernel
// of a plan) and a wgmma's results were stored there before the wait that
// retires them.
// LOWERED-LABEL: gpu.func @decode_kvattn_0(
// LOWERED-NEXT: memref.alloca() : memref<
// LOWERED-NEXT: memref.alloca() : memref<
// LOWERED-NEXT: memref.alloca() : memref<
// LOWERED-NEXT: memref.alloca() : memref<
// LOWERED-NEXT: arith.constant 0 : index
// LOWERED-NEXT: memref.load %{{.*}}[%{{.*}}] : memref<16xi64>
// LOWERED-NEXT: arith.constant 0 : i64
// LOWERED-NEXT: arith.cmpi eq
// LOWERED-NEXT: scf.if
// LOWERED-NOT: memref.alloca()
// LOWERED: gpu.return
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
// The rules in the host check's order (parameters by name: kv_len, then
// q_offset), each built in the order it is written (the kernel is built with
// an OpBuilder, one op per statement).
// kv_len[b] outside [0, S]: rule 1, recorded with atomic minima so the
// first violation in (kernel, batch, index) order wins; phase 1's thread
// with the least key writes the word, the rule last.
// CHECK: scf.for %{{.*}} = %[[TID:.*]] to %c1 step %c128 {
// CHECK: %[[LEN:.*]] = arith.extsi %{{.*}} : i32 to i64
// CHECK-NEXT: arith.index_cast %{{.*}} : index to i64
// CHECK-NEXT: %[[S:.*]] = arith.index_cast %{{.*}} : index to i64
// CHECK-NEXT: %[[NEG:.*]] = arith.cmpi slt, %[[LEN]], %[[ZERO:.*]] : i64
// CHECK-NEXT: %[[PAST:.*]] = arith.cmpi sgt, %[[LEN]], %[[S]] : i64
// CHECK: %[[OUTSIDE:.*]] = arith.ori %[[NEG]], %[[PAST]] : i1
// CHECK: %[[R1:.*]] = arith.constant 1 : i64
// CHECK: %[[RULE:.*]] = arith.select %[[OUTSIDE]], %[[R1]], %[[ZERO]] : i64
// CHECK: %[[KEY:.*]] = arith.addi %{{.*}}, %{{.*}} : i64
// CHECK: %[[BAD:.*]] = arith.cmpi ne, %[[RULE]], %[[ZERO]] : i64
// CHECK: scf.if %[[BAD]] {
// CHECK: memref.atomic_rmw mins %[[KEY]], %[[VST]][%c1] : (i64, memref<16xi64>) -> i64
// CHECK: } else {
// CHECK: %[[LEAST:.*]] = memref.load %[[VST]][%c1] : memref<16xi64>
// CHECK: %[[MINE:.*]] = arith.cmpi eq, %[[LEAST]], %[[KEY]] : i64
// CHECK: scf.if %[[MINE]] {
// CHECK: memref.store %[[LEN]], %[[VST]][%c4] : memref<16xi64>
// CHECK: memref.store %[[RULE]], %[[VST]][%c0{{.*}}] : memref<16xi64>
// q_offset[b]: negative (3), above 2^62 (4), for 32-bit kernels a last
// position (q_offset + L - 1) of 2^31 - 1 or more (19; 64-bit kernels test
// `false` there and have no such limit), positions not increasing (5: not a
// position tensor, `false`); the first rule in that order is the code.
// CHECK: scf.for %{{.*}} = %[[TID]] to %c1 step %c128 {
// CHECK: %[[QO:.*]] = arith.extsi %{{.*}} : i32 to i64
// CHECK: %[[QNEG:.*]] = arith.cmpi slt, %[[QO]], %[[ZERO]] : i64
// CHECK: %[[BIG:.*]] = arith.constant 4611686018427387904 : i64
// CHECK: %[[QLARGE:.*]] = arith.cmpi sgt, %[[QO]], %[[BIG]] : i64
// I32: %[[L:.*]] = arith.index_cast %{{.*}} : index to i64
// I32: %[[EXTENT:.*]] = arith.maxsi %[[L]], %{{.*}} : i64
// I32: %[[END:.*]] = arith.addi %[[QO]], %[[EXTENT]] : i64
// I32: %[[LAST:.*]] = arith.subi %[[END]], %{{.*}} : i64
// I32: %[[LIMIT:.*]] = arith.constant 2147483647 : i64
// I32: %[[WIDE:.*]] = arith.cmpi sge, %[[LAST]], %[[LIMIT]] : i64
// CHECK: %[[R5:.*]] = arith.constant 5 : i64
// CHECK: %[[RULE5:.*]] = arith.select %false{{.*}}, %[[R5]], %[[ZERO]] : i64
// CHECK: %[[R19:.*]] = arith.constant 19 : i64
// I32-NEXT: %[[RULE19:.*]] = arith.select %[[WIDE]], %[[R19]], %[[RULE5]] : i64
// CHECK: %[[R4:.*]] = arith.constant 4 : i64
// CHECK: %[[RULE4:.*]] = arith.select %[[QLARGE]], %[[R4]], %{{.*}} : i64
// CHECK: %[[R3:.*]] = arith.constant 3 : i64
// CHECK: %[[QRULE:.*]] = arith.select %[[QNEG]], %[[R3]], %[[RULE4]] : i64
// CHECK: %[[QBAD:.*]] = arith.cmpi ne, %[[QRULE]], %[[ZERO]] : i64
// CHECK: scf.if %[[QBAD]] {
// CHECK: memref.atomic_rmw mins
// CHECK: gpu.return
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

// -----

// Draft-token trees (tree_parents): the validation kernel takes
// tree_parents [T] beside q_start and checks, after the q_start rules, each
// packed row's parent (rule 32: -1 or an earlier local row; one thread per
// row of the block's sequence, the rows read clamped into [0, T)), then
// thread 0 the sequence's draft tokens against kv_len (33) and q_offset
// against k_offset + kv_len - L_b (34): kvattn/Support/TreeParents.h's rules.
// CHECK-LABEL: func.func @tree
// CHECK: gpu.launch_func @kvattn_kernels::@tree_kvattn_0_validate
// CHECK: gpu.func @tree_kvattn_0({{.*}}kvattn.param<name = "tree_parents", kind = pointer, element_type = i32, shape = [9]>
// CHECK: gpu.func @tree_kvattn_0_validate(
// CHECK-SAME: memref<1xi32>, %{{.*}}: memref<1xi32>, %{{.*}}: memref<1xi32>, %{{.*}}: memref<1xi32>, %{{.*}}: memref<16xi64>
// The q_start rules first (18: the rows are tokens of the cache).
// CHECK: arith.constant 18 : i64
// The sequence's rows clamped into [0, T), one thread per row.
// CHECK: %[[LO:.*]] = arith.maxsi %{{.*}}, %{{.*}} : i64
// CHECK-NEXT: arith.minsi %[[LO]], %{{.*}} : i64
// CHECK: scf.for
// CHECK: %[[P:.*]] = arith.extsi %{{.*}} : i32 to i64
// CHECK: %[[ROOT:.*]] = arith.cmpi eq, %[[P]], %{{.*}} : i64
// CHECK-NEXT: %[[NONNEG:.*]] = arith.cmpi sge, %[[P]], %{{.*}} : i64
// CHECK-NEXT: %[[BEFORE:.*]] = arith.cmpi slt, %[[P]], %{{.*}} : i64
// CHECK: arith.constant 32 : i64
// CHECK: arith.constant 33 : i64
// CHECK: arith.constant 34 : i64
// CHECK: gpu.return
func.func @tree(%q: tensor<1x4x9x16xf16>, %k: tensor<2x2x32x16xf16>, %v: tensor<2x2x32x16xf16>, %qs: tensor<3xi32>, %qo: tensor<2xi32>, %n: tensor<2xi32>, %p: tensor<9xi32>) -> tensor<1x4x9x16xf16> {
  %o = kvattn.attention %q, %k, %v q_start(%qs : tensor<3xi32>) q_offset(%qo : tensor<2xi32>) kv_len(%n : tensor<2xi32>) tree_parents(%p : tensor<9xi32>) causal : tensor<1x4x9x16xf16>, tensor<2x2x32x16xf16>, tensor<2x2x32x16xf16> -> tensor<1x4x9x16xf16>
  return %o : tensor<1x4x9x16xf16>
}

// -----

// RoPE's record (k_rope_pos [B, S]): the attention kernel takes it as a
// parameter it never reads (tile.key_record kept it among the program's
// operands), and its validation kernel checks it after the values, as the
// reference does: block b over its keys j < min(max(kv_len[b], 0), S) (a bad
// kv_len, reported first, must not make it read past the row), one thread
// per key, the record against the key's position k_offset[b] + j, keys with
// key_valid 0 skipped; rule 28 records the slot, the recorded position and
// the key's position. The program itself has no tile.key_record left.
// CHECK-LABEL: func.func @rope_record
// CHECK: gpu.launch_func @kvattn_kernels::@rope_record_kvattn_0_validate
// CHECK: gpu.func @rope_record_kvattn_0(
// CHECK-SAME: kvattn.param<name = "k_rope_pos", kind = pointer, element_type = i64, shape = [2, 40]>
// CHECK-NOT: kvattn.tile.key_record
// CHECK: gpu.func @rope_record_kvattn_0_validate(%{{[^:]*}}: memref<1xi32>, %{{[^:]*}}: memref<1xi32>, %{{[^:]*}}: memref<1xi32>, %{{[^:]*}}: !llvm.ptr, %[[REC:[^:]*]]: memref<1xi64>, %[[VST:[^:]*]]: memref<16xi64>
// CHECK: %[[RECV:.*]] = memref.reinterpret_cast %[[REC]]
// The values first (by name: k_offset, key_valid 2, kv_len, q_offset 3).
// CHECK: arith.constant 2 : i64
// CHECK: arith.constant 3 : i64
// The keys of batch b: [0, min(max(kv_len[b], 0), S)).
// CHECK: %[[KEYS:.*]] = arith.minsi %{{.*}}, %{{.*}} : i64
// CHECK-NEXT: %[[END:.*]] = arith.index_cast %[[KEYS]] : i64 to index
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[END]] step %c128
// CHECK: %[[AT:.*]] = memref.load %[[RECV]]
// CHECK: %[[POS:.*]] = arith.addi %{{.*}}, %{{.*}} : i64
// CHECK-NEXT: %[[DIFF:.*]] = arith.cmpi ne, %[[AT]], %[[POS]] : i64
// CHECK: %[[VALID:.*]] = arith.extui %{{.*}} : i8 to i64
// CHECK-NEXT: %[[ISKEY:.*]] = arith.cmpi ne, %[[VALID]], %{{.*}} : i64
// CHECK-NEXT: %[[BAD:.*]] = arith.andi %[[ISKEY]], %[[DIFF]] : i1
// CHECK-NEXT: %[[R28:.*]] = arith.constant 28 : i64
// CHECK-NEXT: %{{.*}} = arith.select %[[BAD]], %[[R28]], %{{.*}} : i64
// CHECK: memref.store %[[AT]], %[[VST]][%c4{{.*}}] : memref<16xi64>
// CHECK: memref.store %[[POS]], %[[VST]][%c5{{.*}}] : memref<16xi64>
// The parameter: 13 (kParamKRopePos).
// CHECK: arith.constant 13 : i64
// CHECK: gpu.return
func.func @rope_record(%q: tensor<2x2x3x16xf32>, %k: tensor<2x2x40x16xf32>, %v: tensor<2x2x40x16xf32>, %qo: tensor<2xi32>, %ko: tensor<2xi32>, %n: tensor<2xi32>, %valid: tensor<2x40xi1>, %rec: tensor<2x40xi64>) -> tensor<2x2x3x16xf32> {
  %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<2xi32>) k_offset(%ko : tensor<2xi32>) kv_len(%n : tensor<2xi32>) key_valid(%valid : tensor<2x40xi1>) k_rope_pos(%rec : tensor<2x40xi64>) causal rope = <rotary_dim = 16, theta = 10000.0> : tensor<2x2x3x16xf32>, tensor<2x2x40x16xf32>, tensor<2x2x40x16xf32> -> tensor<2x2x3x16xf32>
  return %o : tensor<2x2x3x16xf32>
}

// -----

// An append that writes RoPE's record (rope_pos) keeps it a plain buffer:
// its validation kernel checks pos only (the record is its output). The
// attention's validation kernel, which runs before the append (validation
// kernels run first), takes the append's pos after its own metadata and
// checks the slots [pos[b], pos[b] + L) as the append will write them
// (slot j rotated at position j), the others as the record holds them.
// CHECK-LABEL: func.func @append_then_check
// CHECK: gpu.launch_func @kvattn_kernels::@append_then_check_kvattn_append_0_validate {{.*}}args(%[[POS:[^ ]*]] : memref<1xi32>, %{{[^ ]*}} : memref<16xi64>
// CHECK: gpu.launch_func @kvattn_kernels::@append_then_check_kvattn_append_0 {{.*}}args({{.*}} : memref<1xi64>, %{{[^ ]*}} : memref<16xi64>
// CHECK: gpu.launch_func @kvattn_kernels::@append_then_check_kvattn_0_validate {{.*}}args(%{{[^ ]*}} : memref<1xi32>, %{{[^ ]*}} : memref<1xi32>, %{{[^ ]*}} : memref<1xi64>, %[[POS]] : memref<1xi32>, %{{[^ ]*}} : memref<16xi64>
// CHECK: gpu.func @append_then_check_kvattn_append_0_validate(%{{[^:]*}}: memref<1xi32>, %{{[^:]*}}: memref<16xi64>,
// CHECK: gpu.func @append_then_check_kvattn_0_validate(%{{[^:]*}}: memref<1xi32>, %{{[^:]*}}: memref<1xi32>, %{{[^:]*}}: memref<1xi64>, %{{[^:]*}}: memref<1xi32>, %{{[^:]*}}: memref<16xi64>,
// CHECK-SAME: #kvattn.param<name = "pos", kind = pointer, element_type = i32, shape = [2]>
// CHECK: %[[AT:.*]] = memref.load %{{.*}} : memref<?xi64>
// CHECK: %[[FROM:.*]] = arith.extsi %{{.*}} : i32 to i64
// CHECK: %[[TO:.*]] = arith.addi %[[FROM]], %{{.*}} : i64
// CHECK-NEXT: %[[AFTER:.*]] = arith.cmpi sge, %[[J:.*]], %[[FROM]] : i64
// CHECK-NEXT: %[[BEFORE:.*]] = arith.cmpi slt, %[[J]], %[[TO]] : i64
// CHECK-NEXT: %[[WRITTEN:.*]] = arith.andi %[[AFTER]], %[[BEFORE]] : i1
// CHECK-NEXT: %[[REC:.*]] = arith.select %[[WRITTEN]], %[[J]], %[[AT]] : i64
// CHECK: arith.cmpi ne, %[[REC]], %{{.*}} : i64
// CHECK: arith.constant 28 : i64
func.func @append_then_check(%q: tensor<2x2x1x16xf32>, %kn: tensor<2x2x1x16xf32>, %kc: tensor<2x2x32x16xf32>,
                             %v: tensor<2x2x32x16xf32>, %pos: tensor<2xi32>, %n: tensor<2xi32>,
                             %rec: tensor<2x32xi64>) -> tensor<2x2x1x16xf32> {
  %k, %r = kvattn.append %kn into %kc at %pos rope = <rotary_dim = 16, theta = 10000.0>
      rope_pos(%rec : tensor<2x32xi64>) : tensor<2x2x1x16xf32> into tensor<2x2x32x16xf32>, tensor<2xi32>
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<2xi32>) kv_len(%n : tensor<2xi32>)
      k_rope_pos(%r : tensor<2x32xi64>) causal rope = <rotary_dim = 16, theta = 10000.0>
      : tensor<2x2x1x16xf32>, tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32> -> tensor<2x2x1x16xf32>
  return %o : tensor<2x2x1x16xf32>
}

// -----

// Split two ways, ALiBi over explicit positions: the merge reads q_pos,
// k_pos and kv_len too (each batch's ALiBi reference), all of which the
// attention's validation kernel has checked by then; the merge gets no
// validation kernel of its own, only the status guard. (Building one
// crashed the compiler: with static sizes the merge has no S among its
// scalars, which the k_pos checks need. Found by kvattn-fuzz-diff
// --target=gpu-emu through plans.)
// SPLIT-LABEL: func.func @alibi_merge
// SPLIT: %[[STATUS:.*]] = memref.alloc() {kvattn.role = #kvattn.role<status>} : memref<16xi64>
// SPLIT: gpu.launch_func @kvattn_kernels::@alibi_merge_kvattn_0_validate {{.*}}%[[STATUS]] : memref<16xi64>
// SPLIT-NEXT: gpu.launch_func @kvattn_kernels::@alibi_merge_kvattn_0 {{.*}}%[[STATUS]] : memref<16xi64>
// SPLIT-NOT: gpu.launch_func
// SPLIT: gpu.launch_func @kvattn_kernels::@alibi_merge_kvattn_1 {{.*}}%[[STATUS]] : memref<16xi64>
// SPLIT: gpu.module @kvattn_kernels
// SPLIT: gpu.func @alibi_merge_kvattn_1(%{{.*}}: memref<1xi64>, %{{.*}}: memref<1xi64>, %{{.*}}: memref<1xi32>
// SPLIT-SAME: name = "status"
// SPLIT-NOT: @alibi_merge_kvattn_1_validate
// SPLIT: gpu.func @alibi_merge_kvattn_0_validate
// SPLIT-NOT: @alibi_merge_kvattn_1_validate
func.func @alibi_merge(%q: tensor<1x2x2x16xf16>, %k: tensor<1x2x16x16xf16>, %v: tensor<1x2x16x16xf16>, %qp: tensor<1x2xi64>, %kp: tensor<1x16xi64>, %n: tensor<1xi32>, %slopes: tensor<2xf32>) -> tensor<1x2x2x16xf16> {
  %o = kvattn.attention %q, %k, %v q_pos(%qp : tensor<1x2xi64>) k_pos(%kp : tensor<1x16xi64>) kv_len(%n : tensor<1xi32>) alibi_slopes(%slopes : tensor<2xf32>) causal : tensor<1x2x2x16xf16>, tensor<1x2x16x16xf16>, tensor<1x2x16x16xf16> -> tensor<1x2x2x16xf16>
  return %o : tensor<1x2x2x16xf16>
}
