// RUN: kvattn-opt %s -split-input-file -pass-pipeline='builtin.module(gpu.module(kvattn-extern-dynamic-shared-memory))' | FileCheck %s --enable-var-scope

// The symbol gpu.dynamic_shared_memory lowers to: an internal zero-size array
// in the shared address space (3). With internal linkage NVPTX would demote
// it to a 1-byte static .shared variable; external, it is the launch's
// dynamic shared memory (.extern .shared .b8 name[]).
// CHECK-LABEL: gpu.module @dynamic
// CHECK: llvm.mlir.global external @__dynamic_shmem__0() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<0 x i8>
gpu.module @dynamic {
  llvm.mlir.global internal @__dynamic_shmem__0() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<0 x i8>
}

// -----

// Everything else keeps its linkage: a sized shared array (static shared
// memory), a zero-size array in global memory, one that is already private
// (not internal), and one with an initializer.
// CHECK-LABEL: gpu.module @untouched
// CHECK: llvm.mlir.global internal @static_tile() {addr_space = 3 : i32} : !llvm.array<64 x f32>
// CHECK: llvm.mlir.global internal @global_empty() {addr_space = 1 : i32} : !llvm.array<0 x i8>
// CHECK: llvm.mlir.global private @private_empty() {addr_space = 3 : i32} : !llvm.array<0 x i8>
// CHECK: llvm.mlir.global internal @initialized() {addr_space = 3 : i32} : !llvm.array<0 x i8> {
gpu.module @untouched {
  llvm.mlir.global internal @static_tile() {addr_space = 3 : i32} : !llvm.array<64 x f32>
  llvm.mlir.global internal @global_empty() {addr_space = 1 : i32} : !llvm.array<0 x i8>
  llvm.mlir.global private @private_empty() {addr_space = 3 : i32} : !llvm.array<0 x i8>
  llvm.mlir.global internal @initialized() {addr_space = 3 : i32} : !llvm.array<0 x i8> {
    %0 = llvm.mlir.undef : !llvm.array<0 x i8>
    llvm.return %0 : !llvm.array<0 x i8>
  }
}

// -----

// The pass runs on gpu.modules: a host-side global of the same form is not
// a kernel's shared memory and stays internal.
// CHECK-LABEL: module
// CHECK: llvm.mlir.global internal @host_side() {addr_space = 3 : i32} : !llvm.array<0 x i8>
// CHECK-LABEL: gpu.module @device
// CHECK: llvm.mlir.global external @smem()
llvm.mlir.global internal @host_side() {addr_space = 3 : i32} : !llvm.array<0 x i8>
gpu.module @device {
  llvm.mlir.global internal @smem() {addr_space = 3 : i32} : !llvm.array<0 x i8>
}
