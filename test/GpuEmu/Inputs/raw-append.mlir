// Two append kernels for test/GpuEmu/append-guards.test: plain (capacity 4)
// and paged (3 pages of 2 rows, 2 slots per sequence), f32.
func.func @plain(%u: tensor<2x2x2x4xf32>, %c: tensor<2x2x4x4xf32>, %pos: tensor<2xi32>) -> tensor<2x2x4x4xf32> {
  %r = kvattn.append %u into %c at %pos : tensor<2x2x2x4xf32> into tensor<2x2x4x4xf32>, tensor<2xi32>
  return %r : tensor<2x2x4x4xf32>
}
func.func @paged(%u: tensor<2x2x2x4xf32>, %c: tensor<3x2x2x4xf32>, %pos: tensor<2xi32>, %bt: tensor<2x2xi32>) -> tensor<3x2x2x4xf32> {
  %r = kvattn.append %u into %c at %pos block_table(%bt : tensor<2x2xi32>) : tensor<2x2x2x4xf32> into tensor<3x2x2x4xf32>, tensor<2xi32>
  return %r : tensor<3x2x2x4xf32>
}
