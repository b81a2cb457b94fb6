// RUN: kvattn-opt %s -split-input-file -kvattn-assign-tile-layouts -verify-diagnostics
// Programs -kvattn-assign-tile-layouts cannot assign: a scratch tile no tile
// op uses, a tile in two roles, a layout the kernel's shape does not allow.

gpu.module @kvattn_kernels {
  gpu.func @unused_tile() kernel attributes {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 64, block_n = 64, num_warps = 4, num_stages = 1>} {
    // expected-error @+1 {{'memref.alloca' op kvattn-assign-tile-layouts: a scratch tile of the program that no tile op uses as its query, scores, accumulator or row statistics}}
    %t = memref.alloca() : memref<64x64xf32>
    gpu.return
  }
}

// -----

gpu.module @kvattn_kernels {
  gpu.func @two_roles(%q: memref<1x1x64x64xf32>, %i: index) kernel attributes {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 64, block_n = 64, num_warps = 4, num_stages = 1>} {
    %m = memref.alloca() : memref<64xf32>
    %l = memref.alloca() : memref<64xf32>
    // expected-error @+1 {{kvattn-assign-tile-layouts: a scratch tile used in 2 roles}}
    %acc = memref.alloca() : memref<64x64xf32>
    kvattn.tile.init %m, %l, %acc : memref<64xf32>, memref<64xf32>, memref<64x64xf32>
    kvattn.tile.load_q %q[%i, %i, %i] rows(%i) into %acc : memref<1x1x64x64xf32>, memref<64x64xf32>
    gpu.return
  }
}

// -----

// wgmma's warps own 16 rows each: a 128-row program of 4 warps has no
// wgmma layout.
gpu.module @kvattn_kernels {
  gpu.func @wgmma_wide() kernel attributes {kvattn.tensor_cores, kvattn.wgmma, kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 128, block_n = 64, num_warps = 4, num_stages = 1>} {
    %m = memref.alloca() : memref<128xf32>
    %l = memref.alloca() : memref<128xf32>
    // expected-error @+1 {{kvattn-assign-tile-layouts: no fragment layout for this tile (block_m = 128, num_warps = 4): wgmma_m64nNk16 gives each warp of a warpgroup 16 rows, 2 per lane: rows_per_lane = 2 and tiles_per_warp = 1, got 4 and 2}}
    %acc = memref.alloca() : memref<128x64xf32>
    kvattn.tile.init %m, %l, %acc : memref<128xf32>, memref<128xf32>, memref<128x64xf32>
    gpu.return
  }
}

// -----

// Tensor cores read the query tile as the mma's 16-bit operand: a rotated
// query kept in f32 (rope f32_query) cannot be that tile.
gpu.module @kvattn_kernels {
  gpu.func @f32_query_on_tensor_cores(%q: memref<1x1x64x64xbf16>, %i: index) kernel attributes {kvattn.tensor_cores, kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 64, block_n = 64, num_warps = 4, num_stages = 1>} {
    %t = memref.alloca() : memref<64x64xf32>
    // expected-error @+1 {{kvattn-assign-tile-layouts: rope with f32_query keeps the rotated query in f32, but tensor cores read it in its 16-bit type: drop f32_query, or compile without tensor cores}}
    kvattn.tile.load_q %q[%i, %i, %i] rows(%i) rope = <rotary_dim = 64, theta = 1.000000e+04, f32_query> pos_row(%i) q_base(%i)
        into %t : memref<1x1x64x64xbf16>, memref<64x64xf32>
    gpu.return
  }
}

// -----

// kvattn.pending_pv (the intra-warpgroup overlap's peeled program) on a
// kernel that cannot defer P.V (mma.sync: no wgmma, no TMA rings).
gpu.module @kvattn_kernels {
  // expected-error @+1 {{kvattn-assign-tile-layouts: a tile.qk issues a pending P.V (kvattn.pending_pv), but this kernel cannot defer P.V (it needs wgmma, a producer warpgroup, two TMA V stages and the registers for the deferred probabilities)}}
  gpu.func @pending_pv_on_mma_sync(%k: memref<1x1x64x64xf16>, %i: index) kernel attributes {kvattn.tensor_cores, kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 64, block_n = 64, num_warps = 4, num_stages = 1>} {
    %q = memref.alloca() : memref<64x64xf16>
    %s = memref.alloca() : memref<64x64xf32>
    kvattn.tile.qk %q, %k[%i, %i, %i] size(%i, %i) into %s scale = 1.250000e-01 {kvattn.pending_pv} : memref<64x64xf16>, memref<1x1x64x64xf16>, memref<64x64xf32>
    gpu.return
  }
}
