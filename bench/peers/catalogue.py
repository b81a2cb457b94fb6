"""Which kernel each peer would run for each shape, and how to build it.

Every entry follows the peer's own dispatch for bf16, GQA 32/8, causal
(docs/benchmarks.md, "Peers at the SASS level"), cited in comments.
"""

# FlashAttention-2 (csrc/flash_attn/src/flash_fwd_launch_template.h):
# run_mha_fwd_hdim128 -> Flash_fwd_kernel_traits<128, 128, 64, 4> on sm80/sm90;
# on sm86/sm89 (is_sm8x: cc 8.x, minor > 0) causal <128, 64, 64, 4> and
# non-causal <128, 128, 32, 4>, run from the sm_80 cubin (the wheel ships
# sm_80 and sm_90 code only); hdim64 -> <64, 128, 128, 4>; split-KV / kv-cache calls
# (flash_attn_with_kvcache: append and decode) -> run_mha_fwd_splitkv_dispatch
# with kBlockM 64, kBlockN 256 (hd64) / 128 (hd128).  Template flags:
# flash_fwd_kernel<Traits, Is_dropout, Is_causal, Is_local, Has_alibi,
# Is_even_MN, Is_even_K, Is_softcap, Return_softmax>;
# flash_fwd_splitkv_kernel<Traits, Is_causal, Is_local, Has_alibi,
# Is_even_MN, Is_even_K, Is_softcap, Split, Append_KV> (a kv-cache call has
# cache_seqlens, so Is_even_MN is false).
def fa2_traits(d, bm, bn):
    return ("Flash_fwd_kernel_traits<%d, %d, %d, 4, false, false, "
            "cutlass::bfloat16_t>" % (d, bm, bn))


FA2 = {
    # name: (kernel expression, block_m, block_n, warps)
    "fwd-hd128-causal": ("flash_fwd_kernel<%s, false, true, false, false, "
                         "true, true, false, false>"
                         % fa2_traits(128, 128, 64), 128, 64, 4),
    "fwd-hd128": ("flash_fwd_kernel<%s, false, false, false, false, true, "
                  "true, false, false>" % fa2_traits(128, 128, 64), 128, 64,
                  4),
    "fwd-hd128-causal-sm8x": ("flash_fwd_kernel<%s, false, true, false, "
                              "false, true, true, false, false>"
                              % fa2_traits(128, 64, 64), 64, 64, 4),
    "fwd-hd128-sm8x": ("flash_fwd_kernel<%s, false, false, false, false, "
                       "true, true, false, false>" % fa2_traits(128, 128, 32),
                       128, 32, 4),
    "fwd-hd64-causal": ("flash_fwd_kernel<%s, false, true, false, false, "
                        "true, true, false, false>" % fa2_traits(64, 128, 128),
                        128, 128, 4),
    "splitkv-hd128-causal": ("flash_fwd_splitkv_kernel<%s, true, false, "
                             "false, false, true, false, false, false>"
                             % fa2_traits(128, 64, 128), 64, 128, 4),
    "splitkv-hd64-causal": ("flash_fwd_splitkv_kernel<%s, true, false, false,"
                            " false, true, false, false, false>"
                            % fa2_traits(64, 64, 256), 64, 256, 4),
    "splitkv-hd128-split": ("flash_fwd_splitkv_kernel<%s, false, false, "
                            "false, false, true, false, true, false>"
                            % fa2_traits(128, 64, 128), 64, 128, 4),
    "splitkv-hd64-split": ("flash_fwd_splitkv_kernel<%s, false, false, false,"
                           " false, true, false, true, false>"
                           % fa2_traits(64, 64, 256), 64, 256, 4),
}

# FlashAttention-3 as sgl-kernel 0.3.21 ships it (flash_ops.abi3.so,
# sm_90a): CollectiveMainloopFwdSm90<Stages, Cluster, Tile<M, N, D>, Dv,
# Element, Accum, Arch, Is_causal, Is_local, Has_softcap, Varlen,
# PagedKVNonTMA, AppendKV, HasQv, MmaPV_is_RS, IntraWGOverlap, PackGQA,
# Split, V_colmajor>.  tile_size_fwd_sm90: hd128 causal 128 x 128,
# non-causal 128 x 176; hd64 192 x 128; hd256 128 x 80; one producer
# warpgroup and kBlockM / 64 consumer warpgroups.
def fa3_pattern(m, n, d, causal, decode=False, dv=None):
    # After Is_causal: Is_local, Has_softcap, Varlen, PagedKVNonTMA,
    # AppendKV, HasQv, MmaPV_is_RS, IntraWGOverlap, PackGQA, Split,
    # V_colmajor.  Decode as SGLang's FA3 backend calls it (page size 1:
    # varlen, paged without TMA, PackGQA, split-KV; seqlen_q = 1 is not
    # causal).
    flags = ("false, false, true, true, false, false, (true|false), true, "
             "true, true, false" if decode else
             "false, false, false, false, false, false, (true|false), true, "
             "false, false, false")
    return (r"CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>,"
            r" cute::C<1> >, cute::tuple<cute::C<%d>, cute::C<%d>, cute::C<%d>"
            r" >, %d, cutlass::bfloat16_t, float, cutlass::arch::Sm90, %s, %s"
            r"," % (m, n, d, dv or d, "true" if causal else "false", flags))


FA3 = {
    "fwd-hd128-causal": (fa3_pattern(128, 128, 128, True), 128, 128, 8),
    "fwd-hd128": (fa3_pattern(128, 176, 128, False), 128, 176, 8),
    "fwd-hd64-causal": (fa3_pattern(192, 128, 64, True), 192, 128, 12),
    # tile_size_fwd_sm90 at hd256: 128 x 80, two consumer warpgroups.
    "fwd-hd256-causal": (fa3_pattern(128, 80, 256, True), 128, 80, 8),
    "fwd-hd256": (fa3_pattern(128, 80, 256, False), 128, 80, 8),
    # DeepSeek-V3's MHA prefill (D = 192 = 128 + 64 rotary, Dv = 128):
    # tile_size_fwd_sm90 gives 128 x 128 at hd 192 with Dv <= 128.
    "fwd-hd192-dv128-causal": (fa3_pattern(128, 128, 192, True, dv=128), 128,
                               128, 8),
    "decode-hd128": (fa3_pattern(128, 128, 128, False, True), 128, 128, 8),
    "decode-hd64": (fa3_pattern(192, 128, 64, False, True), 192, 128, 12),
}

# FlashInfer's batch decode with paged KV (include/flashinfer/attention/
# decode.cuh, BatchDecodeWithPagedKVCacheDispatched): vec_size =
# max(16 / sizeof(bf16), D / 32), bdx = D / vec_size, bdy = group size,
# num_threads = max(128, bdx * bdy), bdz = num_threads / (bdx * bdy),
# tile_size_per_bdx = 1 for GQA, NUM_STAGES_SMEM = 2 on sm_80+; keys per
# loop trip = tile_size_per_bdx * bdy * bdz.
def flashinfer_decode_source(d, group=4):
    vec = max(8, d // 32)
    bdx = d // vec
    threads = max(128, bdx * group)
    bdz = threads // (bdx * group)
    src = """// Generated by bench/peers: one instantiation of FlashInfer's decode kernel.
#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/variants.cuh>
using namespace flashinfer;
using P = BatchDecodeParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int32_t>;
using V = DefaultAttention<false, false, false, false>;
void *kvattn_peer_kernel() {
  return (void *)&BatchDecodeWithPagedKVCacheKernel<PosEncodingMode::kNone, 2, 1, %d, %d, %d, %d, V, P>;
}
""" % (vec, bdx, group, bdz)
    return src, dict(keys_per_iter=group * bdz, warps=threads // 32,
                     rows=group)


# FlashInfer's batch prefill/append with paged KV (include/flashinfer/
# attention/prefill.cuh, BatchPrefillWithPagedKVCacheDispatched): the
# planner's CTA_TILE_Q is 128 when the packed query rows (L x group) average
# more than 64 (FA2DetermineCtaTileQ), so NUM_MMA_Q = 2, NUM_WARPS_Q = 4,
# NUM_WARPS_KV = 1; NUM_MMA_KV = min(8 / NUM_MMA_Q, what shared memory for
# 2 CTAs per SM leaves) = 4 on sm_80 and sm_90 at D = 64 and 128: 64 keys per
# trip.
def flashinfer_prefill_source(d):
    src = """// Generated by bench/peers: one instantiation of FlashInfer's prefill kernel.
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/variants.cuh>
using namespace flashinfer;
using P = BatchPrefillPagedParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16,
                                  int32_t>;
using V = DefaultAttention<false, false, false, false>;
using KT = KernelTraits<MaskMode::kCausal, 128, 2, 4, %d, %d, 4, 1,
                        PosEncodingMode::kNone, __nv_bfloat16, __nv_bfloat16,
                        __nv_bfloat16, float, int32_t, V>;
void *kvattn_peer_kernel() {
  return (void *)&BatchPrefillWithPagedKVCacheKernel<KT, P>;
}
""" % (d // 16, d // 16)
    return src, dict(block_m=128, block_n=64, warps=4)


# FlashInfer's MLA decode, its "fa2" backend (include/flashinfer/attention/
# mla.cuh, BatchMLAPagedAttention): 256 threads (2 warpgroups), CTA_TILE_Q 64
# packed rows (query heads x positions), the tile's KV length, the stages
# and whether the warpgroups shard Q.K^T over the keys chosen from the
# shared memory per SM (DISPATCH_SMEM_CONFIG): >= 221,696 B (sm_90): 2
# stages of 64 keys, sharded; >= 147,968 B (sm_80): 2 of 32, sharded; else
# (sm_86, sm_89: 100 KB): 1 stage of 16, not sharded.  A persistent cooperative
# launch of one CTA per SM (MLAPlan: clusters of 2 CTAs when the packed rows
# exceed 64, the keys of the batch split evenly over the clusters).
FLASHINFER_MLA_SMEM = {"sm_80": 167936, "sm_86": 102400, "sm_89": 102400,
                       "sm_90": 233472}


def flashinfer_mla_config(arch):
    smem = FLASHINFER_MLA_SMEM[arch]
    if smem >= 221696:
        return dict(stages=2, block_n=64, shard=True)
    if smem >= 147968:
        return dict(stages=2, block_n=32, shard=True)
    return dict(stages=1, block_n=16, shard=False)


def flashinfer_mla_source(arch, ckv=512, kpe=64):
    cfg = flashinfer_mla_config(arch)
    src = """// Generated by bench/peers: one instantiation of FlashInfer's MLA kernel.
#include <flashinfer/attention/mla.cuh>
#include <flashinfer/attention/mla_params.cuh>
using namespace flashinfer;
using P = MLAParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int32_t>;
using KT = mla::KernelTraits<false, %d, %s, %d, %d, 64, %d, __nv_bfloat16,
                             __nv_bfloat16, __nv_bfloat16, int32_t>;
void *kvattn_peer_kernel() {
  return (void *)&mla::BatchMLAPagedAttentionKernel<KT, P>;
}
""" % (cfg["stages"], "true" if cfg["shard"] else "false", ckv, kpe,
       cfg["block_n"])
    # SharedStorageQKVO: Q (nope + rope), the stages of the latent and
    # rope/P tiles, the cross-warpgroup m/d (the O tile aliases them).
    bn, st = cfg["block_n"], cfg["stages"]
    smem = max(64 * (ckv + kpe) * 2 + st * bn * ckv * 2 +
               st * bn * max(kpe, 64) * 2 + 2 * 2 * 64 * 4, 64 * ckv * 2)
    return src, dict(cfg, block_m=64, warps=8, smem=smem)


# FlashInfer's MLA decode on Hopper, its "fa3" backend (what backend="auto"
# picks on sm_90a: include/flashinfer/attention/mla_hopper.cuh,
# BatchMLAPageAttentionHopper): HopperKernelTraits with 2 stages, CTA_TILE_Q
# 64, CTA_TILE_KV 64, 256 threads (2 warpgroups, wgmma), a cooperative
# persistent launch as the fa2 backend's.
def flashinfer_mla_hopper_source(ckv=512, kpe=64):
    src = """// Generated by bench/peers: one instantiation of FlashInfer's Hopper MLA kernel.
#include <flashinfer/attention/mla_hopper.cuh>
#include <flashinfer/attention/mla_params.cuh>
using namespace flashinfer;
using P = MLAParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int32_t>;
using KT = mla::hopper::HopperKernelTraits<false, 2, %d, %d, 64, 64,
    __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int32_t>;
void *kvattn_peer_kernel() {
  return (void *)&mla::hopper::BatchMLAPageAttentionHopperKernel<KT, P>;
}
""" % (ckv, kpe)
    return src, dict(stages=2, block_n=64, block_m=64, warps=8)
