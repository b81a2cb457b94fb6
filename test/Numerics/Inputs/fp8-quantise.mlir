// kvattn.append of 131072 f32 values into an FP8 cache with per-head
// scales (test/Numerics/fp8-append-codes.test, test/GpuEmu/fp8-append.test).
func.func @e4m3(%u: tensor<1x4x128x256xf32>, %c: tensor<1x4x130x256xf8E4M3FN>,
                %pos: tensor<1xi32>, %s: tensor<4xf32>)
    -> tensor<1x4x130x256xf8E4M3FN> {
  %r = kvattn.append %u into %c at %pos kv_scale(%s : tensor<4xf32>) : tensor<1x4x128x256xf32> into tensor<1x4x130x256xf8E4M3FN>, tensor<1xi32>
  return %r : tensor<1x4x130x256xf8E4M3FN>
}

func.func @e5m2(%u: tensor<1x4x128x256xf32>, %c: tensor<1x4x130x256xf8E5M2>,
                %pos: tensor<1xi32>, %s: tensor<4xf32>)
    -> tensor<1x4x130x256xf8E5M2> {
  %r = kvattn.append %u into %c at %pos kv_scale(%s : tensor<4xf32>) : tensor<1x4x128x256xf32> into tensor<1x4x130x256xf8E5M2>, tensor<1xi32>
  return %r : tensor<1x4x130x256xf8E5M2>
}
