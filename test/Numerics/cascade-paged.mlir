// A paged kvattn.cascade against the reference (reference::cascade gathers
// the pages and evaluates the definition: plain attention of each
// sequence's rows over prefix + suffix). The prefix is 70 keys in pages
// 9, 2, 14, 5, 11 of a pool of 16 pages of 16 tokens (the last page partly
// used, a -1 slot after it); the three sequences' suffixes of 1, 37 and 20
// keys live in pages [0], [7, 3, 12] and [4, 15] of the same pool. Every
// slot no key owns — the rest of a partly used page, the five pages nobody
// names — holds NaN in K and V (--fill), so a level that reads the wrong
// page, past prefix_len or kv_len, or the wrong sequence's table fails the
// comparison; dropping the prefix changes every row. Decode rows beside a
// 5-row chunk, causal, GQA 4/2, lse checked.
//
// On the CPU (-kvattn-expand-cascade: the prefix attention through the
// one-sequence table [1, 6] with kv_len = prefix_len, the ragged suffix
// attention through block_table, kvattn.merge), f32 vectorised and scalar,
// bf16, and each level paged alone.
// DEFINE: %{meta} = --input 3=0,1,6,8 --input 4=0,32,18 --input 5=1,37,20 --input 6=9,2,14,5,11,-1 --input 7=70 --input 8=0,-1,-1,7,3,12,4,15,-1
// DEFINE: %{poison} = --fill=1=64:960:nan --fill=1=1024:1024:nan --fill=1=6144:1024:nan --fill=1=8192:1024:nan --fill=1=10240:1024:nan --fill=1=11648:640:nan --fill=1=12608:704:nan --fill=1=13312:1024:nan --fill=1=15616:768:nan --fill=2=64:960:nan --fill=2=1024:1024:nan --fill=2=6144:1024:nan --fill=2=8192:1024:nan --fill=2=10240:1024:nan --fill=2=11648:640:nan --fill=2=12608:704:nan --fill=2=13312:1024:nan --fill=2=15616:768:nan
// RUN: kvattn-run %s --entry=paged --target=cpu --check %{meta} %{poison} | FileCheck %s
// RUN: kvattn-run %s --entry=paged --target=cpu --vectorize=false --num-threads=1 --check %{meta} %{poison} | FileCheck %s
// RUN: kvattn-run %s --entry=paged_bf16 --target=cpu --check %{meta} %{poison} | FileCheck %s
//
// On the emulated GPU (kvattn-to-ptx: the prefix kernel reads the pool
// through prefix_pages with prefix_len keys, B = 1; the ragged suffix kernel
// through block_table; the merge kernel), with memcheck and racecheck: f32
// (the scalar lowering), bf16 (tensor cores), and each level paged alone.
// RUN: kvattn-run %s --entry=paged --target=gpu-emu --check %{meta} %{poison} | FileCheck %s
// RUN: kvattn-run %s --entry=paged_bf16 --target=gpu-emu --check %{meta} %{poison} | FileCheck %s
//
// sm_90a's kernels (wgmma, K/V by TMA per 64-token page through both tables,
// a producer warpgroup): GQA 8/1, D = 128, a 500-key prefix in 8 pages of
// 24 shared by a decode pair and a 128-row chunk over 100 and 200 suffix
// keys, NaN in the ten unused pages and past each sequence's last key.
// DEFINE: %{meta90} = --input 3=0,2,130 --input 4=98,72 --input 5=100,200 --input 6=10,12,14,16,18,0,2,4,-1 --input 7=500 --input 8=20,21,-1,-1,1,3,5,7
// DEFINE: %{poison90} = --fill=1=49152:8192:nan --fill=1=65536:8192:nan --fill=1=73728:8192:nan --fill=1=90112:8192:nan --fill=1=106496:8192:nan --fill=1=122880:8192:nan --fill=1=139264:8192:nan --fill=1=155648:8192:nan --fill=1=180224:8192:nan --fill=1=188416:8192:nan --fill=1=39424:1536:nan --fill=1=176640:3584:nan --fill=1=58368:7168:nan --fill=2=49152:8192:nan --fill=2=65536:8192:nan --fill=2=73728:8192:nan --fill=2=90112:8192:nan --fill=2=106496:8192:nan --fill=2=122880:8192:nan --fill=2=139264:8192:nan --fill=2=155648:8192:nan --fill=2=180224:8192:nan --fill=2=188416:8192:nan --fill=2=39424:1536:nan --fill=2=176640:3584:nan --fill=2=58368:7168:nan
// RUN: kvattn-run %s --entry=paged_sm90 --target=gpu-emu --chip=sm_90a --stats --check %{meta90} %{poison90} | FileCheck %s --check-prefix=SM90
// SM90: emu: kernel=kvattn_gpu_kvattn_0 {{.*}} block=384 {{.*}} wgmma_per_wg=1024/1024/0 tma_load_bytes_per_wg=0/0/4194304
// SM90: emu: kernel=kvattn_gpu_kvattn_1 {{.*}} block=384 {{.*}} tma_load_bytes_per_wg=0/0/{{[1-9][0-9]*}}
// SM90: {{^PASS$}}
//
// Two pools of different page sizes: the prefix's 53 keys in 8-token pages
// of its own pool (its kernel's prefix_page_size), the suffixes in the
// 16-token pages of another (the suffix kernel's page_size), bf16, on the
// CPU and both GPU kernels' chips. Arguments: 0 q, 1 and 2 the prefix pool,
// 3 and 4 the suffix pool, 5 q_start, 6 q_offset, 7 kv_len, 8
// prefix_pages, 9 prefix_len, 10 block_table.
// DEFINE: %{meta2} = --input 5=0,1,6,8 --input 6=0,32,18 --input 7=1,37,20 --input 8=3,7,1,11,0,9,5,-1,-1,-1 --input 9=53 --input 10=0,-1,-1,7,3,12,4,15,-1
// RUN: kvattn-run %s --entry=two_pools --target=cpu --check %{meta2} | FileCheck %s
// RUN: kvattn-run %s --entry=two_pools --target=gpu-emu --check %{meta2} | FileCheck %s
// RUN: kvattn-run %s --entry=two_pools --target=gpu-emu --chip=sm_90a --check %{meta2} | FileCheck %s
// CHECK: {{^PASS$}}
//
// A paged prefix over contiguous suffixes (NaN in the pool's pages other
// than the prefix's and past prefix_len, and past each suffix's kv_len in
// the contiguous caches), and paged suffixes under a contiguous prefix (NaN
// wherever no suffix key lives in the pool).
// RUN: kvattn-run %s --entry=paged_prefix --target=cpu --check --input 5=0,1,6,8 --input 6=0,32,18 --input 7=1,37,20 --input 8=9,2,14,5,11,-1 --input 9=70 --fill=1=0:1024:nan --fill=1=1024:1024:nan --fill=1=3072:1024:nan --fill=1=4096:1024:nan --fill=1=6144:1024:nan --fill=1=7168:1024:nan --fill=1=8192:1024:nan --fill=1=10240:1024:nan --fill=1=11648:640:nan --fill=1=12288:1024:nan --fill=1=13312:1024:nan --fill=1=15360:1024:nan --fill=2=0:1024:nan --fill=2=1024:1024:nan --fill=2=3072:1024:nan --fill=2=4096:1024:nan --fill=2=6144:1024:nan --fill=2=7168:1024:nan --fill=2=8192:1024:nan --fill=2=10240:1024:nan --fill=2=11648:640:nan --fill=2=12288:1024:nan --fill=2=13312:1024:nan --fill=2=15360:1024:nan --fill=3=32:1248:nan --fill=3=1312:1248:nan --fill=3=3744:96:nan --fill=3=5024:96:nan --fill=3=5760:640:nan --fill=3=7040:640:nan --fill=4=32:1248:nan --fill=4=1312:1248:nan --fill=4=3744:96:nan --fill=4=5024:96:nan --fill=4=5760:640:nan --fill=4=7040:640:nan | FileCheck %s
// RUN: kvattn-run %s --entry=paged_suffix --target=cpu --check --input 5=0,1,6,8 --input 6=0,32,18 --input 7=1,37,20 --input 8=0,-1,-1,7,3,12,4,15,-1 --fill=1=64:960:nan --fill=1=1024:1024:nan --fill=1=2048:1024:nan --fill=1=5120:1024:nan --fill=1=6144:1024:nan --fill=1=8192:1024:nan --fill=1=9216:1024:nan --fill=1=10240:1024:nan --fill=1=11264:1024:nan --fill=1=12608:704:nan --fill=1=13312:1024:nan --fill=1=14336:1024:nan --fill=1=15616:768:nan --fill=2=64:960:nan --fill=2=1024:1024:nan --fill=2=2048:1024:nan --fill=2=5120:1024:nan --fill=2=6144:1024:nan --fill=2=8192:1024:nan --fill=2=9216:1024:nan --fill=2=10240:1024:nan --fill=2=11264:1024:nan --fill=2=12608:704:nan --fill=2=13312:1024:nan --fill=2=14336:1024:nan --fill=2=15616:768:nan | FileCheck %s
// RUN: kvattn-run %s --entry=paged_prefix --target=gpu-emu --check --input 5=0,1,6,8 --input 6=0,32,18 --input 7=1,37,20 --input 8=9,2,14,5,11,-1 --input 9=70 --fill=1=0:1024:nan --fill=1=1024:1024:nan --fill=1=3072:1024:nan --fill=1=4096:1024:nan --fill=1=6144:1024:nan --fill=1=7168:1024:nan --fill=1=8192:1024:nan --fill=1=10240:1024:nan --fill=1=11648:640:nan --fill=1=12288:1024:nan --fill=1=13312:1024:nan --fill=1=15360:1024:nan --fill=2=0:1024:nan --fill=2=1024:1024:nan --fill=2=3072:1024:nan --fill=2=4096:1024:nan --fill=2=6144:1024:nan --fill=2=7168:1024:nan --fill=2=8192:1024:nan --fill=2=10240:1024:nan --fill=2=11648:640:nan --fill=2=12288:1024:nan --fill=2=13312:1024:nan --fill=2=15360:1024:nan --fill=3=32:1248:nan --fill=3=1312:1248:nan --fill=3=3744:96:nan --fill=3=5024:96:nan --fill=3=5760:640:nan --fill=3=7040:640:nan --fill=4=32:1248:nan --fill=4=1312:1248:nan --fill=4=3744:96:nan --fill=4=5024:96:nan --fill=4=5760:640:nan --fill=4=7040:640:nan | FileCheck %s
// RUN: kvattn-run %s --entry=paged_suffix --target=gpu-emu --check --input 5=0,1,6,8 --input 6=0,32,18 --input 7=1,37,20 --input 8=0,-1,-1,7,3,12,4,15,-1 --fill=1=64:960:nan --fill=1=1024:1024:nan --fill=1=2048:1024:nan --fill=1=5120:1024:nan --fill=1=6144:1024:nan --fill=1=8192:1024:nan --fill=1=9216:1024:nan --fill=1=10240:1024:nan --fill=1=11264:1024:nan --fill=1=12608:704:nan --fill=1=13312:1024:nan --fill=1=14336:1024:nan --fill=1=15616:768:nan --fill=2=64:960:nan --fill=2=1024:1024:nan --fill=2=2048:1024:nan --fill=2=5120:1024:nan --fill=2=6144:1024:nan --fill=2=8192:1024:nan --fill=2=9216:1024:nan --fill=2=10240:1024:nan --fill=2=11264:1024:nan --fill=2=12608:704:nan --fill=2=13312:1024:nan --fill=2=14336:1024:nan --fill=2=15616:768:nan | FileCheck %s
//
// Tables that break the rules are refused by name before anything runs
// (the reference's checks, on every target): a prefix page out of range,
// a prefix_len past its pages, a suffix table with a page twice.
// RUN: not kvattn-run %s --entry=paged --target=cpu --input 3=0,1,6,8 --input 4=0,32,18 --input 5=1,37,20 --input 6=9,2,16,5,11,-1 --input 7=70 --input 8=0,-1,-1,7,3,12,4,15,-1 2>&1 | FileCheck %s --check-prefix=RANGE
// RANGE: prefix_pages[2] = 16: page id out of range [0, 16)
// RUN: not kvattn-run %s --entry=paged --target=cpu --input 3=0,1,6,8 --input 4=0,32,18 --input 5=1,37,20 --input 6=9,2,14,5,11,-1 --input 7=81 --input 8=0,-1,-1,7,3,12,4,15,-1 2>&1 | FileCheck %s --check-prefix=LEN
// LEN: prefix_len[0] = 81 does not fit the 5 page(s) of prefix_pages (page_size 16, at most 80 tokens)
// RUN: not kvattn-run %s --entry=paged --target=cpu --input 3=0,1,6,8 --input 4=0,32,18 --input 5=1,37,20 --input 6=9,2,14,5,11,-1 --input 7=70 --input 8=0,-1,-1,7,3,7,4,15,-1 2>&1 | FileCheck %s --check-prefix=TWICE
// TWICE: block_table[1][2] = 7: page 7 is already used at slot 0 of the same sequence (batch 1)

func.func @paged(%q: tensor<1x4x8x32xf32>, %k: tensor<16x16x2x32xf32>, %v: tensor<16x16x2x32xf32>, %qs: tensor<4xi32>, %qo: tensor<3xi32>, %kl: tensor<3xi32>, %pp: tensor<6xi32>, %pl: tensor<1xi32>, %bt: tensor<3x3xi32>) -> (tensor<1x4x8x32xf32>, tensor<1x4x8xf32>) {
  %o, %lse = kvattn.cascade %q, %k, %v, %k, %v q_start(%qs : tensor<4xi32>) q_offset(%qo : tensor<3xi32>) kv_len(%kl : tensor<3xi32>) prefix_pages(%pp : tensor<6xi32>) prefix_len(%pl : tensor<1xi32>) block_table(%bt : tensor<3x3xi32>) causal : tensor<1x4x8x32xf32>, tensor<16x16x2x32xf32>, tensor<16x16x2x32xf32>, tensor<16x16x2x32xf32>, tensor<16x16x2x32xf32> -> tensor<1x4x8x32xf32>, tensor<1x4x8xf32>
  return %o, %lse : tensor<1x4x8x32xf32>, tensor<1x4x8xf32>
}

func.func @paged_bf16(%q: tensor<1x4x8x32xbf16>, %k: tensor<16x16x2x32xbf16>, %v: tensor<16x16x2x32xbf16>, %qs: tensor<4xi32>, %qo: tensor<3xi32>, %kl: tensor<3xi32>, %pp: tensor<6xi32>, %pl: tensor<1xi32>, %bt: tensor<3x3xi32>) -> (tensor<1x4x8x32xbf16>, tensor<1x4x8xf32>) {
  %o, %lse = kvattn.cascade %q, %k, %v, %k, %v q_start(%qs : tensor<4xi32>) q_offset(%qo : tensor<3xi32>) kv_len(%kl : tensor<3xi32>) prefix_pages(%pp : tensor<6xi32>) prefix_len(%pl : tensor<1xi32>) block_table(%bt : tensor<3x3xi32>) causal : tensor<1x4x8x32xbf16>, tensor<16x16x2x32xbf16>, tensor<16x16x2x32xbf16>, tensor<16x16x2x32xbf16>, tensor<16x16x2x32xbf16> -> tensor<1x4x8x32xbf16>, tensor<1x4x8xf32>
  return %o, %lse : tensor<1x4x8x32xbf16>, tensor<1x4x8xf32>
}

// Arguments: 0 q, 1 and 2 the prefix pool, 3 and 4 the suffixes [3, 2, 40,
// 32], 5 q_start, 6 q_offset, 7 kv_len, 8 prefix_pages, 9 prefix_len.
func.func @paged_prefix(%q: tensor<1x4x8x32xf32>, %pk: tensor<16x16x2x32xf32>, %pv: tensor<16x16x2x32xf32>, %k: tensor<3x2x40x32xf32>, %v: tensor<3x2x40x32xf32>, %qs: tensor<4xi32>, %qo: tensor<3xi32>, %kl: tensor<3xi32>, %pp: tensor<6xi32>, %pl: tensor<1xi32>) -> (tensor<1x4x8x32xf32>, tensor<1x4x8xf32>) {
  %o, %lse = kvattn.cascade %q, %pk, %pv, %k, %v q_start(%qs : tensor<4xi32>) q_offset(%qo : tensor<3xi32>) kv_len(%kl : tensor<3xi32>) prefix_pages(%pp : tensor<6xi32>) prefix_len(%pl : tensor<1xi32>) causal : tensor<1x4x8x32xf32>, tensor<16x16x2x32xf32>, tensor<16x16x2x32xf32>, tensor<3x2x40x32xf32>, tensor<3x2x40x32xf32> -> tensor<1x4x8x32xf32>, tensor<1x4x8xf32>
  return %o, %lse : tensor<1x4x8x32xf32>, tensor<1x4x8xf32>
}

// Arguments: 0 q, 1 and 2 the suffix pool, 3 and 4 the prefix [1, 2, 70,
// 32], 5 q_start, 6 q_offset, 7 kv_len, 8 block_table.
func.func @paged_suffix(%q: tensor<1x4x8x32xf32>, %k: tensor<16x16x2x32xf32>, %v: tensor<16x16x2x32xf32>, %pk: tensor<1x2x70x32xf32>, %pv: tensor<1x2x70x32xf32>, %qs: tensor<4xi32>, %qo: tensor<3xi32>, %kl: tensor<3xi32>, %bt: tensor<3x3xi32>) -> (tensor<1x4x8x32xf32>, tensor<1x4x8xf32>) {
  %o, %lse = kvattn.cascade %q, %pk, %pv, %k, %v q_start(%qs : tensor<4xi32>) q_offset(%qo : tensor<3xi32>) kv_len(%kl : tensor<3xi32>) block_table(%bt : tensor<3x3xi32>) causal : tensor<1x4x8x32xf32>, tensor<1x2x70x32xf32>, tensor<1x2x70x32xf32>, tensor<16x16x2x32xf32>, tensor<16x16x2x32xf32> -> tensor<1x4x8x32xf32>, tensor<1x4x8xf32>
  return %o, %lse : tensor<1x4x8x32xf32>, tensor<1x4x8xf32>
}

// Arguments as @paged: 0 q, 1 and 2 the pool, 3 q_start, 4 q_offset,
// 5 kv_len, 6 prefix_pages, 7 prefix_len, 8 block_table.
func.func @paged_sm90(%q: tensor<1x8x130x128xbf16>, %k: tensor<24x64x1x128xbf16>, %v: tensor<24x64x1x128xbf16>, %qs: tensor<3xi32>, %qo: tensor<2xi32>, %kl: tensor<2xi32>, %pp: tensor<9xi32>, %pl: tensor<1xi32>, %bt: tensor<2x4xi32>) -> (tensor<1x8x130x128xbf16>, tensor<1x8x130xf32>) {
  %o, %lse = kvattn.cascade %q, %k, %v, %k, %v q_start(%qs : tensor<3xi32>) q_offset(%qo : tensor<2xi32>) kv_len(%kl : tensor<2xi32>) prefix_pages(%pp : tensor<9xi32>) prefix_len(%pl : tensor<1xi32>) block_table(%bt : tensor<2x4xi32>) causal : tensor<1x8x130x128xbf16>, tensor<24x64x1x128xbf16>, tensor<24x64x1x128xbf16>, tensor<24x64x1x128xbf16>, tensor<24x64x1x128xbf16> -> tensor<1x8x130x128xbf16>, tensor<1x8x130xf32>
  return %o, %lse : tensor<1x8x130x128xbf16>, tensor<1x8x130xf32>
}

func.func @two_pools(%q: tensor<1x4x8x32xbf16>, %pk: tensor<12x8x2x32xbf16>, %pv: tensor<12x8x2x32xbf16>, %k: tensor<16x16x2x32xbf16>, %v: tensor<16x16x2x32xbf16>, %qs: tensor<4xi32>, %qo: tensor<3xi32>, %kl: tensor<3xi32>, %pp: tensor<10xi32>, %pl: tensor<1xi32>, %bt: tensor<3x3xi32>) -> (tensor<1x4x8x32xbf16>, tensor<1x4x8xf32>) {
  %o, %lse = kvattn.cascade %q, %pk, %pv, %k, %v q_start(%qs : tensor<4xi32>) q_offset(%qo : tensor<3xi32>) kv_len(%kl : tensor<3xi32>) prefix_pages(%pp : tensor<10xi32>) prefix_len(%pl : tensor<1xi32>) block_table(%bt : tensor<3x3xi32>) causal : tensor<1x4x8x32xbf16>, tensor<12x8x2x32xbf16>, tensor<12x8x2x32xbf16>, tensor<16x16x2x32xbf16>, tensor<16x16x2x32xbf16> -> tensor<1x4x8x32xbf16>, tensor<1x4x8xf32>
  return %o, %lse : tensor<1x4x8x32xbf16>, tensor<1x4x8xf32>
}
