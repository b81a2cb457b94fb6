// RUN: kvattn-opt %s -kvattn-to-cpu | FileCheck %s
// RUN: kvattn-opt %s -kvattn-to-cpu="threads=4 vector-width=8" | FileCheck %s --check-prefix=THREADS
// RUN: kvattn-opt %s -kvattn-to-cpu="vectorize=false threads=1" | FileCheck %s --check-prefix=SCALAR
// RUN: kvattn-opt %s -kvattn-to-cpu="block-m=16 block-n=16 stats=true" | FileCheck %s --check-prefix=STATS
// The registered CPU pipeline takes framework IR all the way to the LLVM
// dialect: no kvattn, tensor, memref or scf op is left.

// By default: the vectorised lowering (exp and tanh as polynomials, FMAs
// on vectors) and the grid as an OpenMP work-sharing loop.
// CHECK-NOT:     kvattn.
// CHECK-LABEL:   llvm.func @main
// CHECK:         omp.parallel
// CHECK:         omp.wsloop
// CHECK:         llvm.intr.fma({{.*}}) : (vector<
// CHECK-NOT:     llvm.intr.tanh
// CHECK-NOT:     kvattn.
// CHECK-NOT:     scf.
// CHECK-NOT:     memref.

// THREADS:       llvm.mlir.constant(4 : i32)
// THREADS:       omp.parallel num_threads
// THREADS:       vector<8xf32>

// The scalar loops on one thread: libm's tanh and exp, no OpenMP.
// SCALAR-NOT:    omp.
// SCALAR-LABEL:  llvm.func @main
// SCALAR-DAG:    llvm.intr.tanh
// SCALAR-DAG:    llvm.intr.exp
// SCALAR-NOT:    kvattn.
// SCALAR-NOT:    scf.
// SCALAR-NOT:    memref.
// SCALAR-NOT:    omp.

// STATS:         llvm.mlir.global external @kvattn_tile_stats
// STATS-LABEL:   llvm.func @main
// STATS:         llvm.atomicrmw add
func.func @main(%q: tensor<1x2x4x16xf16>, %kc: tensor<1x1x64x16xf16>, %vc: tensor<1x1x64x16xf16>,
                %kn: tensor<1x1x4x16xf16>, %vn: tensor<1x1x4x16xf16>, %pos: tensor<1xi32>)
    -> (tensor<1x2x4x16xf16>, tensor<1x2x4x16xf16>) {
  %k = kvattn.append %kn into %kc at %pos : tensor<1x1x4x16xf16> into tensor<1x1x64x16xf16>, tensor<1xi32>
  %v = kvattn.append %vn into %vc at %pos : tensor<1x1x4x16xf16> into tensor<1x1x64x16xf16>, tensor<1xi32>
  %qo = arith.constant dense<0> : tensor<1xi32>
  %o = kvattn.sdpa %q, %k, %v causal = lower_right
      : tensor<1x2x4x16xf16>, tensor<1x1x64x16xf16>, tensor<1x1x64x16xf16> -> tensor<1x2x4x16xf16>
  %c = kvattn.attention %q, %k, %v q_offset(%qo : tensor<1xi32>) causal softcap = 10.0
      : tensor<1x2x4x16xf16>, tensor<1x1x64x16xf16>, tensor<1x1x64x16xf16> -> tensor<1x2x4x16xf16>
  return %o, %c : tensor<1x2x4x16xf16>, tensor<1x2x4x16xf16>
}
