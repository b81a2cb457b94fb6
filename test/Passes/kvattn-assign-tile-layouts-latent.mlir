// RUN: kvattn-opt %s -kvattn-tile="block-m=0 block-n=0 tensor-cores=true" -kvattn-outline-tile-programs -kvattn-assign-tile-layouts | FileCheck %s --check-prefix=LATENT
// (The blocks as kvattn-to-ptx chooses them: block-m 0 with tensor cores,
// schedule::latentBlocks.)

// The latent form (DeepSeek MLA): P.V reads V from the K stage, so no K block
// is prefetched (pipeline_depth = 1: the next one would overwrite the stage
// P.V reads) and no V block is paired with a tile.qk; the score tile stays
// in shared memory (the warps of a row group exchange their keys' scores
// there), 4 warps sharing the 16 rows.
// LATENT-LABEL: gpu.func @latent_kvattn_0
// LATENT-SAME:    kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = mma_sync, pipeline_depth = 1, lazy_rescale = true>
// LATENT-SAME:    kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 16, block_n = 32, num_warps = 4, num_stages = 2, group = 16>
// The stage synchronisation (kvattn.stage_sync): tile.qk's K copies
// overwrite the stage the previous block's P.V read, so a barrier goes
// before them; the softmax reads V from the stage tile.qk waited for and
// published, and needs nothing.
// LATENT-NOT:     kvattn.value_prefetch
// LATENT-NOT:     kvattn.key_prefetch
// LATENT:         kvattn.tile.qk {{.*}}{kvattn.stage_sync = #kvattn.stage_sync<barrier_before_copies = true, wait_copies = 0, barrier = true>}
// LATENT:         kvattn.tile.softmax_update {{.*}} latent {{.*}}{kvattn.stage_sync = #kvattn.stage_sync<>}
// LATENT-NOT:     kvattn.value_prefetch
// LATENT:         gpu.return
func.func @latent(%q: tensor<2x16x1x576xbf16>, %ckv: tensor<8x64x1x576xbf16>,
                  %len: tensor<2xi32>, %bt: tensor<2x4xi32>) -> tensor<2x16x1x512xbf16> {
  %o = kvattn.attention %q, %ckv value_dim = 512 kv_len(%len : tensor<2xi32>) block_table(%bt : tensor<2x4xi32>)
      scale = 0.0416666679
      : tensor<2x16x1x576xbf16>, tensor<8x64x1x576xbf16> -> tensor<2x16x1x512xbf16>
  return %o : tensor<2x16x1x512xbf16>
}
