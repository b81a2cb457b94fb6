// RUN: kvattn-opt %s -kvattn-tile="block-m=128 num-warps=4" -kvattn-outline-tile-programs -kvattn-assign-tile-layouts -kvattn-lower-tile-to-gpu -cse | FileCheck %s --check-prefix=BASES
// RUN: kvattn-opt %s -kvattn-tile="block-m=128 num-warps=4" -kvattn-outline-tile-programs -kvattn-assign-tile-layouts -kvattn-lower-tile-to-gpu="wide-tile-address-bases=false" -cse | FileCheck %s --check-prefix=INDICES

// The 128-row D = 128 program (32-row warps, the query read per block):
// by default its K and V operands are read through the flat f16 view of
// the shared memory at a thread-constant base plus a constant
// (docs/gpu-lowering.md, "Address arithmetic"); with
// wide-tile-address-bases=false (kvattn-to-ptx's choice for sm_90 and newer
// before issue 31's second round; every chip takes the bases now) at 2-D
// indices of the K and V stages, swizzled at each access.
// BASES-LABEL: gpu.func @f_kvattn_0
// BASES:         scf.for
// BASES:           nvgpu.ldmatrix %{{.*}}[%{{[^,]*}}] {numTiles = 4 : i32, transpose = false} : memref<?xf16, #gpu.address_space<workgroup>>
// BASES:           nvgpu.ldmatrix %{{.*}}[%{{[^,]*}}] {numTiles = 4 : i32, transpose = true} : memref<?xf16, #gpu.address_space<workgroup>>
// INDICES-LABEL: gpu.func @f_kvattn_0
// INDICES-NOT:     memref<?xf16, #gpu.address_space<workgroup>>
// INDICES:         scf.for
// INDICES:           nvgpu.ldmatrix %{{.*}}[%{{.*}}, %{{.*}}] {numTiles = 4 : i32, transpose = false} : memref<64x128xf16, #gpu.address_space<workgroup>>
// INDICES:           nvgpu.ldmatrix %{{.*}}[%{{.*}}, %{{.*}}] {numTiles = 4 : i32, transpose = true} : memref<64x128xf16, #gpu.address_space<workgroup>>
func.func @f(%q: tensor<1x8x300x128xf16>, %k: tensor<1x2x300x128xf16>, %v: tensor<1x2x300x128xf16>,
             %pos: tensor<1xi32>) -> tensor<1x8x300x128xf16> {
  %o = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) causal
      : tensor<1x8x300x128xf16>, tensor<1x2x300x128xf16>, tensor<1x2x300x128xf16> -> tensor<1x8x300x128xf16>
  return %o : tensor<1x8x300x128xf16>
}
