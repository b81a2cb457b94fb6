// RUN: kvattn-opt %s -split-input-file -kvattn-gpu-to-nvvm | FileCheck %s
// RUN: kvattn-opt %s -split-input-file -kvattn-gpu-to-nvvm="index-bitwidth=64" | FileCheck %s --check-prefix=I64

// The index arithmetic of a kernel is i32 by default; its `index` scalar
// stays an i64 parameter (the kernel ABI's .param .u64), truncated once at
// the entry, and the host's launch passes an i64. Pointers stay 64-bit
// addresses: the GEP takes the i32 element offset (LLVM sign-extends it).
// CHECK-LABEL: func.func @host
// CHECK:         %[[N64:.*]] = arith.index_cast %{{.*}} : index to i64
// CHECK:         gpu.launch_func @kernels::@rows {{.*}} args(%{{.*}} : memref<1xf32>, %{{.*}} : memref<1xf32>, %[[N64]] : i64)
// CHECK-LABEL: llvm.func @rows(
// CHECK-SAME:      %[[IN:.*]]: !llvm.ptr, %[[OUT:.*]]: !llvm.ptr, %[[N:.*]]: i64)
// CHECK-NOT:     unrealized_conversion_cast
// CHECK:         %[[N32:.*]] = llvm.trunc %[[N]] : i64 to i32
// CHECK:         %[[TID:.*]] = nvvm.read.ptx.sreg.tid.x : i32
// CHECK:         %[[COL:.*]] = llvm.urem %[[N32]], %{{.*}} : i32
// CHECK:         llvm.icmp "slt" %[[TID]], %[[N32]] : i32
// The element offset tid * 64 + col, in i32, is the GEP's index.
// CHECK:         %[[ROW:.*]] = llvm.mul %[[TID]], %{{.*}} : i32
// CHECK:         %[[OFF:.*]] = llvm.add %[[ROW]], %[[COL]] {{.*}}: i32
// CHECK:         llvm.getelementptr {{.*}}[%[[OFF]]] : (!llvm.ptr, i32) -> !llvm.ptr, f32
// CHECK-NOT:     unrealized_conversion_cast
// CHECK:         llvm.return

// With index-bitwidth=64 the same kernel computes in i64 (the thread id
// sign-extended) and keeps the same parameters.
// I64-LABEL: llvm.func @rows(
// I64-SAME:      %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %[[N:.*]]: i64)
// I64-NOT:     llvm.trunc
// I64:         %[[TID:.*]] = nvvm.read.ptx.sreg.tid.x : i32
// I64:         %[[TID64:.*]] = llvm.sext %[[TID]] : i32 to i64
// I64:         llvm.icmp "slt" %[[TID64]], %[[N]] : i64
// I64:         llvm.getelementptr {{.*}} : (!llvm.ptr, i64) -> !llvm.ptr, f32
module attributes {gpu.container_module} {
  func.func @host(%in: memref<1xf32>, %out: memref<1xf32>, %n: index) {
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    gpu.launch_func @kernels::@rows blocks in (%c1, %c1, %c1) threads in (%c64, %c1, %c1)
        args(%in : memref<1xf32>, %out : memref<1xf32>, %n : index)
    return
  }
  gpu.module @kernels {
    gpu.func @rows(%in: memref<1xf32>, %out: memref<1xf32>, %n: index) kernel {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c64 = arith.constant 64 : index
      %tid = gpu.thread_id x
      %a = memref.reinterpret_cast %in to offset: [0], sizes: [%n, 64], strides: [64, 1]
          : memref<1xf32> to memref<?x64xf32, strided<[64, 1]>>
      %b = memref.reinterpret_cast %out to offset: [0], sizes: [%n, 64], strides: [64, 1]
          : memref<1xf32> to memref<?x64xf32, strided<[64, 1]>>
      %row = arith.muli %tid, %c64 : index
      %col = arith.remui %n, %c64 : index
      %inside = arith.cmpi slt, %tid, %n : index
      cf.cond_br %inside, ^body, ^done
    ^body:
      %v = memref.load %a[%tid, %col] : memref<?x64xf32, strided<[64, 1]>>
      memref.store %v, %b[%tid, %col] : memref<?x64xf32, strided<[64, 1]>>
      cf.br ^done
    ^done:
      gpu.return
    }
  }
}

// -----

// NVGPU and GPU ops in one conversion: the cp.async copy's zero-fill count
// and the ldmatrix address are i32 arithmetic on the same converted values,
// with no cast between index widths left (the separate
// convert-nvgpu-to-nvvm pass left unrealized casts between i64 and i32).
// CHECK-LABEL: llvm.func @stage(
// CHECK-SAME:      %{{.*}}: !llvm.ptr<1>, %[[N:.*]]: i64)
// CHECK-NOT:     unrealized_conversion_cast
// CHECK:         %[[N32:.*]] = llvm.trunc %[[N]] : i64 to i32
// CHECK:         %[[TID:.*]] = nvvm.read.ptx.sreg.tid.x : i32
// CHECK:         %[[OFF:.*]] = llvm.mul %[[TID]], %{{.*}} : i32
// CHECK:         %[[LEFT:.*]] = llvm.sub %[[N32]], %[[OFF]] : i32
// CHECK:         %[[DST:.*]] = llvm.getelementptr {{.*}} : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, bf16
// CHECK:         %[[SRC:.*]] = llvm.getelementptr {{.*}}[%[[OFF]]] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, bf16
// The zero-fill byte count: elements left * 16 bits / 8, on the i32 value
// itself (no i32-to-i32 truncation left behind).
// CHECK-NOT:     llvm.trunc
// CHECK:         %[[BITS:.*]] = llvm.mul %{{.*}}, %[[LEFT]] : i32
// CHECK:         %[[BYTES:.*]] = llvm.lshr %[[BITS]], %{{.*}} : i32
// CHECK:         nvvm.cp.async.shared.global %[[DST]], %{{.*}}, 16, cache = ca, %[[BYTES]] : !llvm.ptr<3>, !llvm.ptr<1>, i32
// CHECK:         nvvm.ldmatrix %{{.*}} : (!llvm.ptr<3>) -> !llvm.struct<(i32, i32, i32, i32)>
// CHECK-NOT:     unrealized_conversion_cast
// CHECK:         llvm.return
// I64-LABEL: llvm.func @stage(
// I64:         llvm.getelementptr {{.*}} : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, bf16
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @stage(%src: memref<4096xbf16, #gpu.address_space<global>>, %n: index)
        workgroup(%tile: memref<64x64xbf16, #gpu.address_space<workgroup>>) kernel {
      %c0 = arith.constant 0 : index
      %c8 = arith.constant 8 : index
      %tid = gpu.thread_id x
      %off = arith.muli %tid, %c8 : index
      %row = arith.divui %tid, %c8 : index
      %col = arith.muli %row, %c8 : index
      %left = arith.subi %n, %off : index
      %t = nvgpu.device_async_copy %src[%off], %tile[%row, %col], 8, %left
          : memref<4096xbf16, #gpu.address_space<global>> to memref<64x64xbf16, #gpu.address_space<workgroup>>
      nvgpu.device_async_create_group %t
      nvgpu.device_async_wait %t {numGroups = 0 : i32}
      gpu.barrier
      %frag = nvgpu.ldmatrix %tile[%row, %c0] {numTiles = 4 : i32, transpose = false}
          : memref<64x64xbf16, #gpu.address_space<workgroup>> -> vector<4x2xbf16>
      %e = vector.extract %frag[0, 0] : bf16 from vector<4x2xbf16>
      memref.store %e, %src[%off] : memref<4096xbf16, #gpu.address_space<global>>
      gpu.return
    }
  }
}

// -----

// A loop's #llvm.loop_annotation (an scf.for's `llvm.loop_annotation`, which
// -convert-scf-to-cf carries to the latch's cf.br) becomes the llvm.br's own
// `loop_annotation`, which the translation to LLVM IR emits as !llvm.loop
// (the TMA producer's loop over a block's pages keeps its unroll-disable).
// CHECK-LABEL: llvm.func @pages(
// CHECK:         llvm.br ^{{.*}} {loop_annotation = #[[ANNOTATION:.*]]}
// CHECK-NOT:     llvm.loop_annotation
// I64-LABEL: llvm.func @pages(
#pages_unroll = #llvm.loop_unroll<disable = true>
#pages_loop = #llvm.loop_annotation<unroll = #pages_unroll>
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @pages(%out: memref<8xi32, #gpu.address_space<global>>, %n: index) kernel {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      cf.br ^header(%c0 : index)
    ^header(%i: index):
      %more = arith.cmpi slt, %i, %n : index
      cf.cond_br %more, ^body, ^done
    ^body:
      %v = arith.index_cast %i : index to i32
      memref.store %v, %out[%i] : memref<8xi32, #gpu.address_space<global>>
      %next = arith.addi %i, %c1 : index
      cf.br ^header(%next : index) {llvm.loop_annotation = #pages_loop}
    ^done:
      gpu.return
    }
  }
}
