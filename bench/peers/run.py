#!/usr/bin/env python3
"""kvattn's GPU kernels next to the peers' own kernels, at the SASS level.

One command: downloads the peers (pinned registry packages, cached under
BUILD/peers/), compiles what must be compiled (FlashAttention-2 from its
sdist, FlashInfer from its headers, SGLang's Triton kernels with triton's
ahead-of-time compiler; FlashAttention-3 and FlashMLA are taken as compiled
in sgl-kernel),
compiles kvattn's kernels for the same shapes (kvattn-compile -> ptxas),
disassembles everything with the same cuobjdump/nvdisasm, counts each main
KV loop with one analyser (sass.py) and turns the counts into estimates with
one throughput model (model.py).  No GPU is used: every figure is an
estimate; bench/run-gpu-bench.sh is the measurement.

    python3 bench/peers/run.py [--build build] [--chips sm_80,sm_89,sm_90a]
        [--shapes prefill,append,decode,decode-fp8,mla-decode,mla-decode-fp8,
                  prefill-dsv3,paged]
        [--hd 128,64]
        [--peers fa2,...]

Prints a table, then one `ratio SHAPE CHIP PEER X.XX` line per shape, chip
and peer (kvattn estimate / peer estimate; > 1: kvattn faster) and one
`calibration PEER SHAPE CHIP estimate=E published=P` line per peer kernel
with a published figure (TFLOP/s; P = NA where none could be cited;
FlashMLA's lines end with their unit, GB/s or TFLOP/s).
`--sass FILE` analyses one SASS file and prints its counts (the lit test).
"""

import argparse
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True
import catalogue as C  # noqa: E402
import model as M  # noqa: E402
import sass as S  # noqa: E402

HQ, HKV, G = 32, 8, 4
APPEND_P, APPEND_LS = 4096, (64, 128, 256, 512)
PREFILL_L, DECODE_S = 8192, 32768
MLA_B, MLA_S = 64, 4096

# Published figures (TFLOP/s, forward, bf16/fp16, sequence 16k, batch x
# seqlen = 16k tokens, hidden 2048, H100 80 GB SXM5 / A100 80 GB SXM4).
PUBLISHED = {
    # FlashAttention-3 paper (Shah et al. 2024, arXiv:2407.08608), Fig. 5.
    ("fa3", "cal-hd128-causal", "sm_90a"): 616,
    ("fa3", "cal-hd128", "sm_90a"): 648,
    ("fa3", "cal-hd64-causal", "sm_90a"): 473,
    # FlashAttention-2 on H100, the same figure of the FA3 paper.
    ("fa2", "cal-hd128-causal", "sm_90a"): 335,
    ("fa2", "cal-hd128", "sm_90a"): 370,
    # FlashAttention-2 paper (Dao 2023, arXiv:2307.08691): forward "up to
    # 73 % of the theoretical maximum" on A100 = 0.73 x 312.
    ("fa2", "cal-hd128", "sm_80"): 228,
    # FlashInfer's decode bandwidth utilisation: no figure could be cited
    # from a stored source (docs/benchmarks.md).
    ("flashinfer", "decode-hd128", "sm_80"): None,
    ("flashinfer", "decode-hd128", "sm_90a"): None,
}

# FlashMLA's published decode figures (README of deepseek-ai/FlashMLA, first
# release, February 2025: H800 SXM5, CUDA 12.6, bf16, paged 64): "up to
# 3000 GB/s in memory-bound configuration and 580 TFLOPS in
# computation-bound configuration".  Its benchmark's shapes: 1 latent KV
# head, D 576, Dv 512, 4096 keys and more, 16 to 128 query heads; here the
# 16-head decode stands for the memory-bound case (GB/s) and the 128-head
# one for the compute-bound case (TFLOP/s).  The H800 has the H100 SXM's
# SMs, clocks and HBM3 (3.35 TB/s): the model's sm_90a row.
PUBLISHED_MLA = {
    ("flashmla", "mla-decode-h16", "sm_90a"): (3000, "GB/s"),
    ("flashmla", "mla-decode-h128", "sm_90a"): (580, "TFLOP/s"),
}


class Shape:
    def __init__(self, name, kind, d, L, P, causal=True, B=1, hq=HQ,
                 hkv=HKV, kv_dtype=None, latent_dv=None, dv=None,
                 page_size=None):
        self.name, self.kind, self.d = name, kind, d
        self.L, self.P, self.causal, self.B = L, P, causal, B
        self.hq, self.hkv = hq, hkv
        self.S = P + L
        # An FP8 cache (e4m3, per-tensor scales): one byte a K/V element.
        self.kv_dtype = kv_dtype
        self.kv_elt_bytes = 1 if kv_dtype else 2
        # DeepSeek MLA's latent form: one cache of D columns per token whose
        # first dv are V (read once: FlashMLA's accounting), out dv wide.
        self.latent = latent_dv is not None
        self.dv = latent_dv if self.latent else (dv or d)
        # A paged cache: [pages, page_size, Hkv, D] through a block table,
        # with the per-sequence kv_len a serving engine passes (the pages in
        # a random order). The peers' kernels are the same either way
        # (FlashInfer's are paged kernels, FA2's and FA3's take the page
        # table at run time), so their rows stand for paged caches too.
        self.page_size = page_size

    def flops_per_key(self):
        """Q.K^T and P.V of one query row and key."""
        return 2 * (self.d + self.dv)

    def group(self):
        return self.hq // self.hkv

    def useful_flops(self):
        if self.causal:
            keys = self.L * self.P + self.L * (self.L + 1) / 2
            if self.kind.startswith("cal"):  # FA's convention: N^2 / 2
                keys = self.L * self.L / 2
        else:
            keys = self.L * self.S
        return self.flops_per_key() * keys * self.hq * self.B

    def kv_bytes(self):
        per_token = self.d if self.latent else self.d + self.dv
        return self.S * self.hkv * per_token * self.kv_elt_bytes * self.B

    def hbm_bytes(self):
        return self.kv_bytes() + self.L * self.hq * (self.d + self.dv) * 2 * \
            self.B

    def case_flags(self):
        flags = "--B %d --L %d --S %d --D %d --q-offset %s" % (
            self.B, self.L, self.S, self.d, ",".join([str(self.P)] * self.B))
        if self.kv_dtype:
            flags += " --kv-dtype %s --kv-scales tensor" % self.kv_dtype
        if not self.latent and self.dv != self.d:
            flags += " --Dv %d" % self.dv
        if self.page_size:
            flags += " --page-size %d --kv-len %s" % (
                self.page_size, ",".join([str(self.S)] * self.B))
        if self.latent:
            flags += (" --latent --Dv %d --Hq %d --Hkv %d --page-size 64 "
                      "--kv-len %s --scale 0.0721687836" % (
                          self.dv, self.hq, self.hkv,
                          ",".join([str(self.S)] * self.B)))
        return flags


def shapes(kinds, hds):
    out = []
    for d in hds:
        if "prefill" in kinds:
            out.append(Shape("prefill-hd%d-causal" % d, "prefill", d,
                             PREFILL_L, 0))
        if "append" in kinds:
            for L in APPEND_LS:
                out.append(Shape("append-hd%d-L%d" % (d, L), "append", d, L,
                                 APPEND_P))
        if "decode" in kinds:
            out.append(Shape("decode-hd%d" % d, "decode", d, 1,
                             DECODE_S - 1))
        if "decode-fp8" in kinds:
            # kvattn alone (no peer's FP8 decode kernel is built here); its
            # ratio is to kvattn's bf16 decode in tokens per second.
            out.append(Shape("decode-fp8-hd%d" % d, "decode", d, 1,
                             DECODE_S - 1, kv_dtype="f8E4M3FN"))
    if "paged" in kinds:
        # Each kind's shape again over a cache paged by 16 tokens, as
        # serving engines keep it (vLLM's and SGLang's default block size):
        # issue 32's "paged (page 16) within 10 % of contiguous". The report
        # adds one `paged` line per shape: the estimate over the contiguous
        # cache's (docs/benchmarks.md).
        for d in hds:
            out.append(Shape("prefill-hd%d-causal-paged16" % d, "prefill", d,
                             PREFILL_L, 0, page_size=16))
            out.append(Shape("append-hd%d-L512-paged16" % d, "append", d,
                             512, APPEND_P, page_size=16))
            out.append(Shape("decode-hd%d-paged16" % d, "decode", d, 1,
                             DECODE_S - 1, page_size=16))
    if "prefill-dsv3" in kinds:
        # DeepSeek-V3's MHA prefill (its MLA expanded: D = 192 = 128 + 64
        # rotary, Dv = 128, as many KV heads as query heads), against FA3.
        out.append(Shape("prefill-hd192-dv128-causal", "prefill", 192,
                         PREFILL_L, 0, hq=HQ, hkv=HQ, dv=128))
    if "mla-decode" in kinds:
        # DeepSeek MLA decode against FlashMLA (sm_90a) and FlashInfer's
        # MLA kernel: D = 576 = 512 + 64 over one latent KV head, paged 64,
        # 16 and 128 query heads (FlashMLA's benchmark range), B = 64
        # sequences of 4096 keys.
        for hq in (16, 128):
            out.append(Shape("mla-decode-h%d" % hq, "decode", 576, 1,
                             MLA_S - 1, B=MLA_B, hq=hq, hkv=1,
                             latent_dv=512))
    if "mla-decode-fp8" in kinds:
        # The same over an e4m3 latent cache (k_scale per tensor), against
        # FlashMLA's FP8 decode (sm_90a; it also quantises Q to e4m3), and
        # as tokens per second relative to the bf16 latent cache's decode.
        for hq in (16, 128):
            out.append(Shape("mla-decode-fp8-h%d" % hq, "decode", 576, 1,
                             MLA_S - 1, B=MLA_B, hq=hq, hkv=1,
                             kv_dtype="f8E4M3FN", latent_dv=512))
    return out


def cal_shapes():
    """The published benchmarks' shapes: MHA, batch 1, 16k tokens."""
    return [Shape("cal-hd128-causal", "cal", 128, 16384, 0, True, 1, 16, 16),
            Shape("cal-hd128", "cal", 128, 16384, 0, False, 1, 16, 16),
            Shape("cal-hd64-causal", "cal", 64, 16384, 0, True, 1, 32, 32)]


# --- Work decomposition ------------------------------------------------------
def cta_iterations(shape, block_m, block_n, pack, splits=1, phase=None):
    """Loop trips of each CTA.  pack: a CTA's rows are the G query heads of
    one KV head (row = position x G + head); else one query head's rows.
    phase: None (all keys), "prefix" (the P cached keys), "extend" (the L
    new keys, causal)."""
    rows = shape.L * (shape.group() if pack else 1)
    heads = shape.hkv if pack else shape.hq
    per = shape.group() if pack else 1
    iters = []
    nblocks = -(-rows // block_m)
    for i in range(nblocks):
        last = min(rows, (i + 1) * block_m) - 1
        q = last // per  # the last query position of the block
        if phase == "prefix":
            keys = shape.P
        elif phase == "extend":
            keys = q + 1 if shape.causal else shape.L
        else:
            keys = shape.P + q + 1 if shape.causal else shape.S
        blocks = -(-keys // block_n)
        for s in range(splits):
            iters.append(len(range(s, blocks, splits)) if splits > 1 else
                         blocks)
    return iters * (heads * shape.B)


def fa2_num_splits(batch_nheads_mblocks, num_sms, num_n_blocks,
                   max_splits=128, eligibility=True):
    """FlashAttention-2's num_splits_heuristic (csrc/flash_attn/
    flash_api.cpp of the sdist, restated; set_params_splitkv calls it with
    2 x the SMs).  FlashAttention-3's (hopper/heuristics.h) is the same
    without the eligibility test and never splits 4 KV blocks or fewer."""
    if batch_nheads_mblocks >= 0.8 * num_sms:
        return 1
    if not eligibility and num_n_blocks <= 4:
        return 1
    max_splits = min(max_splits, num_sms, num_n_blocks)
    cdiv = lambda a, b: -(-a // b)  # noqa: E731
    eligible = lambda s: s == 1 or not eligibility or cdiv(  # noqa: E731
        num_n_blocks, s) != cdiv(num_n_blocks, s - 1)
    eff = []
    for s in range(1, max_splits + 1):
        if not eligible(s):
            eff.append(0.0)
            continue
        waves = batch_nheads_mblocks * s / num_sms
        eff.append(waves / math.ceil(waves))
    best = max(eff)
    for s in range(1, max_splits + 1):
        if eligible(s) and eff[s - 1] >= 0.85 * best:
            return s
    return 1


def persistent_iterations(shape, block_m, block_n, ctas):
    """Loop trips of each CTA of a persistent decode kernel (FlashMLA's
    tile scheduler, FlashInfer's MLA planner): the packed query rows of a KV
    head (G heads x positions) make ceil(rows / block_m) row blocks; each
    row block's KV blocks of the whole batch are split evenly over
    ctas / row blocks CTAs.  Sequence boundaries inside a CTA's share and
    the fix-up work at them are not costed."""
    mblocks = -(-shape.L * shape.group() // block_m)
    parts = max(1, ctas // (mblocks * shape.hkv))
    trips = shape.B * -(-shape.S // block_n)
    return [-(-trips // parts)] * (parts * mblocks * shape.hkv)


# --- Kernels -----------------------------------------------------------------
class Kernel:
    """One compiled kernel on one shape: its SASS counts and its tiling."""

    def __init__(self, peer, chip, label, counts_phases, phases, block_m,
                 block_n, warps, threads, regs, smem, pack, splits=1,
                 spills=0, schedule=None):
        self.peer, self.chip, self.label = peer, chip, label
        self.counts_phases, self.phases = counts_phases, phases
        self.block_m, self.block_n, self.warps = block_m, block_n, warps
        self.threads, self.regs, self.smem = threads, regs, smem
        self.pack, self.splits, self.spills = pack, splits, spills
        # schedule(shape) -> trips of each CTA, for a persistent kernel whose
        # CTAs share the batch's KV blocks evenly (else cta_iterations).
        self.schedule = schedule

    def evaluate(self, shape, occupancy=None):
        occ = occupancy or M.occupancy(self.chip, self.regs, self.smem,
                                       self.threads // 32)
        self.occ = occ
        if self.schedule:
            iters = [self.schedule(shape) for _ in self.phases]
        else:
            iters = [cta_iterations(shape, self.block_m, self.block_n,
                                    self.pack, self.splits, ph)
                     for ph in self.phases]
        useful = shape.useful_flops()
        hbm_bytes = shape.hbm_bytes()
        r = M.estimate(self.chip, self.counts_phases, self.warps, occ, iters,
                       useful, hbm_bytes)
        if shape.kind == "decode":
            r["gbs"] = shape.kv_bytes() / r["time"] / 1e9
            r["gbs_bound"] = shape.kv_bytes() / r["time_bound"] / 1e9
            r["gbs_h200"] = None
            if self.chip == "sm_90a":
                h = M.estimate(self.chip, self.counts_phases, self.warps, occ,
                               iters, useful, hbm_bytes, hbm=M.H200_HBM)
                r["gbs_h200"] = shape.kv_bytes() / h["time"] / 1e9
        # Per unit of useful work (16 rows x 64 keys x D 128, both GEMMs),
        # steady state: a full block of real rows.
        real_rows = min(self.block_m, shape.L * (shape.group() if self.pack
                                                 else 1))
        c = self.counts_phases[-1] if shape.kind == "prefill" or \
            shape.kind == "cal" else self.counts_phases[0]
        units = real_rows * self.block_n * shape.flops_per_key() / \
            M.UNIT_FLOPS
        per = {k: c[k] * self.warps / units for k in (
            "insts", "int", "mufu", "ffma", "hmma", "hgmma")}
        per["smem"] = (c["smem_bytes"] + c["ldgsts_bytes"]) * self.warps / \
            units
        per["mma_share"] = (c["hmma"] + c["hgmma"]) / max(1, c["insts"])
        # Tensor work issued per useful work of a full block (FA2's decode
        # pads G = 4 rows to a 64-row tile: 16).
        per["mma_per_useful"] = c["mma_flops"] * self.warps / (
            units * M.UNIT_FLOPS)
        r["per_unit"] = per
        r["occ"] = occ
        return r


def load_sass(cache, cubin, function=None):
    text = cache.sass(cubin, function)
    funcs = S.parse(text)
    name = S.pick(funcs, function)
    return funcs[name], name


def counts_of(ins, which=None, expect=None):
    c = S.analyse(ins, which, expect)
    if c is None:
        raise SystemExit("error: no loop found")
    return c


def res_of(cache, cubin, name):
    r = cache.res_usage(cubin)
    return r.get(name) or next(iter(r.values()))


# The chip kvattn compiles for on the sm_90a rows: sm_90a (its wgmma
# kernels, the default) or sm_90 (its mma.sync kernels; --kvattn-sm90).
KVATTN_SM90 = ["sm_90a"]


def kvattn_kernel(cache, build, shape, chip):
    import fetch
    cc = {"sm_90a": KVATTN_SM90[0]}.get(chip, chip)
    # Split-KV for the modelled GPU's multiprocessors (the runtime's plans
    # pass the device's count; kvattn-compile's default is an H100's 132).
    cubin, man = fetch.kvattn_cubin(cache, build, shape.case_flags(), cc,
                                    shape.name, M.CHIPS[chip]["sms"])
    k = next(k for k in man["kernels"] if k.get("kind", "attention") in
             ("attention", "attention_varlen"))
    ins, name = load_sass(cache, cubin, k["name"])
    res = res_of(cache, cubin, name)
    t = k["tile"]
    counts = counts_of(ins, expect=t["block_m"] * t["block_n"] *
                       shape.flops_per_key() // t["num_warps"])
    return Kernel("kvattn", chip, "kvattn %dx%d w%d g%d s%d" % (
        t["block_m"], t["block_n"], t["num_warps"], t["group"],
        t["split_kv"]), [counts], [None], t["block_m"], t["block_n"],
        t["num_warps"], k["block"]["x"], res.get("REG", 0),
        k["dynamic_shared_memory_bytes"] + res.get("SHARED", 0),
        t["group"] > 1, max(1, t["split_kv"]), res.get("STACK", 0))


# FlashAttention-2's wheel carries sm_80 and sm_90 code: sm_86 and sm_89 run
# the sm_80 cubin.
FA2_ARCH = {"sm_80": "sm_80", "sm_86": "sm_80", "sm_89": "sm_80",
            "sm_90a": "sm_90"}


def fa2_kernel(cache, shape, chip, name):
    expr, bm, bn, warps = C.FA2[name]
    arch = FA2_ARCH[chip]
    cubin = cache.fa2_cubin(name, expr, arch)
    ins, fn = load_sass(cache, cubin)
    res = res_of(cache, cubin, fn)
    d = shape.d
    smem = (bm + 2 * bn) * d * 2  # Kernel_traits::kSmemSize (no Q/K share)
    pack, splits = False, 1
    sms = M.CHIPS[chip]["sms"]
    if shape.kind == "decode":
        # seqlenq_ngroups_swapped: the G query heads become G rows of one
        # KV head (flash_api.cpp, mha_fwd_kvcache), split-KV on.
        pack = True
        splits = fa2_num_splits(shape.B * shape.hkv, 2 * sms,
                                -(-shape.S // bn))
    elif shape.kind == "append":
        # flash_attn_with_kvcache: the split-KV kernel, num_splits from the
        # heuristic (the Split=true instance has the same KV loop as the
        # compiled Split=false one; only its epilogue differs).
        splits = fa2_num_splits(shape.B * shape.hq * -(-shape.L // bm),
                                2 * sms, -(-shape.S // bn))
    return Kernel("fa2", chip, "FA2 %s %dx%d w%d%s" % (
        name.split("-")[0], bm, bn, warps, " s%d" % splits if splits > 1
        else ""), [counts_of(ins, expect=bm * bn * 4 * d // warps)], [None],
        bm, bn, warps, warps * 32,
        res.get("REG", 0), smem, pack, splits, res.get("STACK", 0))


def fa3_kernel(cache, shape, name):
    pat, bm, bn, warps = C.FA3[name]
    cubin, fn = cache.fa3_cubin(pat)
    ins, fn = load_sass(cache, cubin, fn)
    res = res_of(cache, cubin, fn)
    # Persistent kernel with ~160-200 KB of shared memory: one CTA per SM
    # (a producer warpgroup + the consumers; BUILD-NOTES).
    pack, splits = False, 1
    if shape.kind == "decode":
        pack = True
        splits = fa2_num_splits(shape.B * shape.hkv, 132, -(-shape.S // bn),
                                128, False)
    if shape.kind == "append":
        # FlashAttention-3's heuristics (hopper/heuristics.h, restated):
        # PackGQA when packing the G heads' rows pads less than 0.9 x the
        # unpacked padding; split-KV as FA2's, over the SMs.  Their KV loop
        # is the one of the compiled non-packed, non-split instance.
        g, L = shape.group(), shape.L
        pad = lambda rows: -(-rows // bm) * bm / rows  # noqa: E731
        pack = pad(L * g) < 0.9 * pad(L)
        mblocks = -(-(L * (g if pack else 1)) // bm) * (
            shape.hkv if pack else shape.hq) * shape.B
        splits = fa2_num_splits(mblocks, 132, -(-shape.S // bn), 128, False)
    k = Kernel("fa3", "sm_90a", "FA3 %dx%d %dwg+1%s%s" % (
        bm, bn, warps // 4, " pack" if pack else "",
        " s%d" % splits if splits > 1 else ""),
        [counts_of(ins, expect=bm * bn * shape.flops_per_key() // warps)],
        [None], bm, bn, warps, warps * 32 + 128,
        res.get("REG", 0), 0, pack, splits, res.get("STACK", 0))
    k.fixed_occ = 1
    return k


def flashinfer_kernel(cache, shape, chip):
    src, meta = C.flashinfer_decode_source(shape.d)
    arch = {"sm_90a": "sm_90"}.get(chip, chip)
    cubin = cache.flashinfer_cubin("decode-hd%d" % shape.d, src, arch)
    ins, fn = load_sass(cache, cubin)
    res = res_of(cache, cubin, fn)
    threads = meta["warps"] * 32
    keys = meta["keys_per_iter"]
    smem = 2 * 2 * keys * shape.d * 2 + max(threads * 8, 2 * keys * 4)
    occ = M.occupancy(chip, res.get("REG", 0), smem, meta["warps"])
    # Partition-KV: chunks so that the grid fills occupancy x SMs
    # (BatchDecodeWithPagedKVCacheWorkEstimationDispatched), >= 256 keys.
    grid = occ * M.CHIPS[chip]["sms"]
    chunks = max(1, min(grid // (shape.B * shape.hkv), -(-shape.S // 256)))
    counts = counts_of(ins)
    # ptxas unrolls the loop (by the 2 shared-memory stages): one trip then
    # covers several of the source's iterations.  Each key costs 2 x D x
    # rows FMA lanes (q.k and p.v): the FFMAs of a trip say how many keys it
    # covers.
    per_iter = 2.0 * keys * meta["rows"] * shape.d / 32 / meta["warps"]
    unroll = max(1, round(counts["ffma"] / per_iter))
    k = Kernel("flashinfer", chip, "FlashInfer decode %dk w%d s%d u%d" % (
        keys, meta["warps"], chunks, unroll), [counts], [None],
        meta["rows"], keys * unroll, meta["warps"], threads,
        res.get("REG", 0), smem, True, chunks, res.get("STACK", 0))
    return k


def flashinfer_prefill_kernel(cache, shape, chip):
    src, meta = C.flashinfer_prefill_source(shape.d)
    arch = {"sm_90a": "sm_90"}.get(chip, chip)
    cubin = cache.flashinfer_cubin("prefill-hd%d" % shape.d, src, arch)
    ins, fn = load_sass(cache, cubin)
    res = res_of(cache, cubin, fn)
    bm, bn, warps = meta["block_m"], meta["block_n"], meta["warps"]
    # SharedStorage: the Q tile and one K and one V block.
    smem = (bm + 2 * bn) * shape.d * 2
    occ = M.occupancy(chip, res.get("REG", 0), smem, warps)
    # The planner packs the G query heads of a KV head into the rows and
    # splits the KV range (chunks of at least 128 keys) while the work items
    # fit CTAs per SM x SMs (PrefillSplitQOKVIndptr).
    items = shape.B * shape.hkv * -(-shape.L * shape.group() // bm)
    grid = occ * M.CHIPS[chip]["sms"]
    chunks = max(1, min(grid // items, -(-shape.S // 128)))
    return Kernel("flashinfer", chip, "FlashInfer prefill %dx%d w%d%s" % (
        bm, bn, warps, " s%d" % chunks if chunks > 1 else ""),
        [counts_of(ins, expect=bm * bn * 4 * shape.d // warps)], [None], bm,
        bn, warps, warps * 32, res.get("REG", 0), smem, True, chunks,
        res.get("STACK", 0))


def triton_kernel(cache, shape, chip, kernel):
    import json
    cc = int(chip[3:5])  # SGLang picks its block sizes by capability
    cubin, meta_path = cache.triton_cubin(kernel, cc, shape.d)
    meta = json.load(open(meta_path))
    ins, fn = load_sass(cache, cubin, meta["name"])
    res = res_of(cache, cubin, fn)
    warps = meta["num_warps"]
    expect = meta["block_m"] * meta["block_n"] * 4 * shape.d // warps
    if kernel == "extend":
        # _fwd_kernel: a loop over the prefix (K_Buffer through kv_indices),
        # then one over the new keys (causal).
        if shape.P:
            counts = [counts_of(ins, 0, expect), counts_of(ins, -1, expect)]
            phases = ["prefix", "extend"]
        else:
            counts, phases = [counts_of(ins, -1, expect)], ["extend"]
        return Kernel("triton", chip, "Triton extend %dx%d w%d" % (
            meta["block_m"], meta["block_n"], warps), counts, phases,
            meta["block_m"], meta["block_n"], warps, warps * 32,
            res.get("REG", 0), meta["shared"], False, 1, res.get("STACK", 0))
    # decode_attention_fwd_grouped stage 1: BLOCK_H = 16 rows hold the G
    # query heads of one KV head; SGLang's default 8 KV splits
    # (--triton-attention-num-kv-splits).
    return Kernel("triton", chip, "Triton decode %dx%d w%d s8" % (
        meta["block_m"], meta["block_n"], warps),
        [counts_of(ins, expect=expect)], [None],
        meta["block_m"], meta["block_n"], warps, warps * 32,
        res.get("REG", 0), meta["shared"], True, 8, res.get("STACK", 0))


# FlashMLA's dense bf16 decode (sm90::flash_fwd_splitkv_mla_kernel, csrc/
# sm90/decode/dense/splitkv_mla.cu, as sgl-kernel 0.3.21 ships it): 64 packed
# query rows, 2 warpgroups, no producer warpgroup (TMA issued from a
# consumer), pages of 64 keys.  Its loop takes two KV blocks per trip: each
# warpgroup computes Q.K^T of one block (36 HGMMA.64x64x16 over D 576) and
# its half of O (256 of the 512 columns) for both (8 HGMMA.64x256x16); the
# two warpgroups' loops are different code of equal tensor work, so the
# counts are their mean.  Persistent: get_mla_metadata gives each row block
# SMs / row blocks CTAs that share the batch's KV blocks.
FLASHMLA_DECODE = (r"sm90::flash_fwd_splitkv_mla_kernel<Traits<"
                   r"cutlass::bfloat16_t>", 64, 128, 8)


def flashmla_kernel(cache, shape):
    pat, bm, bn, warps = FLASHMLA_DECODE
    cubin, fn = cache.flashmla_cubin(pat)
    ins, fn = load_sass(cache, cubin, fn)
    res = res_of(cache, cubin, fn)
    expect = bm * bn * shape.flops_per_key() // warps
    counts = S.mean_of([counts_of(ins, w, expect) for w in (0, 1)])
    sms = M.CHIPS["sm_90a"]["sms"]
    # Shared memory: Q and two 64-key latent blocks, 576 bf16 wide (one CTA
    # per SM whatever the exact figure).
    smem = (bm + bn) * shape.d * 2
    k = Kernel("flashmla", "sm_90a", "FlashMLA %dx%d 2wg" % (bm, bn),
               [counts], [None], bm, bn, warps, warps * 32, res.get("REG", 0),
               smem, True, 1, res.get("STACK", 0),
               schedule=lambda s: persistent_iterations(s, bm, bn, sms))
    k.fixed_occ = 1
    return k


# FlashMLA's dense FP8 decode as sgl-kernel 0.3.21's flashmla_ops ships it
# (flash::flash_fwd_splitkv_mla_kernel<Flash_fwd_kernel_traits_mla<576, 64,
# 64, 8, cutlass::float_e4m3_t, cutlass::bfloat16_t, 512>, Is_causal>, with
# DecodingParams_fp8: FlashMLA's e4m3 KV path with one descale for the
# cache): 64 packed query rows, 8 warps in 2 warpgroups, one 64-key block
# per trip (cp.async), Q and the cache as e4m3 into FP8 wgmma.  Warpgroup 0
# computes Q.K^T (18 QGMMA.64x64x32 over D 576) and half of O (2
# QGMMA.64x256x32), warpgroup 1 the other half of O (2 QGMMA.64x256x32,
# after transposing V in shared memory: FP8 wgmma takes B K-major only).
# The tensor work of the two loops is unequal (1.53x the mean on warpgroup
# 0); the model takes their mean, i.e. the SM's total, as for every
# two-warpgroup peer.  A decode step (one query row per sequence) runs the
# Is_causal = false instance: FlashMLA drops causality when seqlen_q is 1.
FLASHMLA_FP8_DECODE = (r"flash::flash_fwd_splitkv_mla_kernel<"
                       r"Flash_fwd_kernel_traits_mla<576, 64, 64, 8, "
                       r"cutlass::float_e4m3_t, cutlass::bfloat16_t, 512>, "
                       r"false,", 64, 64, 8)


def flashmla_fp8_kernel(cache, shape):
    pat, bm, bn, warps = FLASHMLA_FP8_DECODE
    cubin, fn = cache.flashmla_cubin(pat)
    ins, fn = load_sass(cache, cubin, fn)
    res = res_of(cache, cubin, fn)
    counts = [counts_of(ins, w) for w in (0, 1)]
    expect = bm * bn * shape.flops_per_key() // warps
    if sum(c["mma_flops"] for c in counts) != 2 * expect:
        raise SystemExit("error: FlashMLA's FP8 loops do %s tensor FLOPs per "
                         "warp, the tile %d on average" % (
                             [c["mma_flops"] for c in counts], expect))
    sms = M.CHIPS["sm_90a"]["sms"]
    # Shared memory: Q and two stages of the latent block in e4m3, and the
    # transposed V block (one CTA per SM whatever the exact figure).
    smem = (bm + 2 * bn) * shape.d + bn * shape.dv
    k = Kernel("flashmla", "sm_90a", "FlashMLA fp8 %dx%d 2wg" % (bm, bn),
               [S.mean_of(counts)], [None], bm, bn, warps, warps * 32,
               res.get("REG", 0), smem, True, 1, res.get("STACK", 0),
               schedule=lambda s: persistent_iterations(s, bm, bn, sms))
    k.fixed_occ = 1
    return k


def flashinfer_mla_hopper_kernel(cache, shape):
    """FlashInfer's MLA decode on sm_90a, its fa3 backend (mla_hopper.cuh,
    what backend="auto" picks on Hopper): 2 warpgroups of different roles
    over one 64-key block per trip: warpgroup 0 computes Q.K^T (36
    HGMMA.64x64x16 over D 576) and its half of O (4 HGMMA.64x256x16),
    warpgroup 1 loads the next block (cp.async) and computes the other half
    of O (4 HGMMA.64x256x16); per warp the mean of the two is the tile's
    work.  Warpgroup 0 has three loops of the same tensor work (the
    analyser's rule: the shortest, the second by address), warpgroup 1 one
    (the fourth)."""
    src, meta = C.flashinfer_mla_hopper_source()
    cubin = cache.flashinfer_cubin("mla-decode-hopper", src, "sm_90a",
                                   cutlass=True)
    ins, fn = load_sass(cache, cubin)
    res = res_of(cache, cubin, fn)
    bm, bn, warps = meta["block_m"], meta["block_n"], meta["warps"]
    counts = S.mean_of([counts_of(ins, 1), counts_of(ins, 3)])
    expect = bm * bn * shape.flops_per_key() // warps
    if counts["mma_flops"] != expect:
        raise SystemExit("error: FlashInfer's Hopper MLA loops do %d tensor "
                         "FLOPs per warp, the tile %d" % (
                             counts["mma_flops"], expect))
    sms = M.CHIPS["sm_90a"]["sms"]
    # HopperSharedStorageQKVO: Q, the stages of the latent block (the O
    # tile aliases them) and the m/d/o_scale rows.
    smem = bm * shape.d * 2 + meta["stages"] * bn * shape.d * 2 + \
        bm * bn * 2 + 3 * bm * 4
    k = Kernel("flashinfer", "sm_90a", "FlashInfer MLA (fa3) %dx%d 2wg" % (
        bm, bn), [counts], [None], bm, bn, warps, warps * 32,
        res.get("REG", 0), smem, True, 1, res.get("STACK", 0),
        schedule=lambda s: persistent_iterations(s, bm, bn, sms))
    k.fixed_occ = 1  # a cooperative launch of one CTA per SM
    return k


def flashinfer_mla_kernel(cache, shape, chip):
    """FlashInfer's MLA decode, its fa2 backend (mla.cuh, mma.sync), as its
    dispatch picks the tile from the chip's shared memory per SM (sm_80,
    sm_89; on sm_90a its fa3 backend: flashinfer_mla_hopper_kernel)."""
    arch = {"sm_90a": "sm_90"}.get(chip, chip)
    src, meta = C.flashinfer_mla_source(arch)
    cubin = cache.flashinfer_cubin("mla-decode", src, arch)
    ins, fn = load_sass(cache, cubin)
    res = res_of(cache, cubin, fn)
    bm, bn, warps = meta["block_m"], meta["block_n"], meta["warps"]
    # Three KV loops in source order: the masked tiles, the unmasked ones
    # (the steady state: it prefetches the next tile) and the last
    # NUM_STAGES tiles.  Without QK_SHARD both warpgroups compute the whole
    # Q.K^T of the tile (its tensor work twice).
    qk = shape.d * (1 if meta["shard"] else 2)
    counts = counts_of(ins, 1, bm * bn * 2 * (qk + shape.dv) // warps)
    sms = M.CHIPS[chip]["sms"]
    k = Kernel("flashinfer", chip, "FlashInfer MLA %dx%d w%d st%d%s" % (
        bm, bn, warps, meta["stages"], " shard" if meta["shard"] else ""),
        [counts], [None], bm, bn, warps, warps * 32, res.get("REG", 0),
        meta["smem"], True, 1, res.get("STACK", 0),
        schedule=lambda s: persistent_iterations(s, bm, bn, sms))
    k.fixed_occ = 1  # a cooperative launch of one CTA per SM
    return k


def peer_kernels(cache, shape, chip, peers):
    """The kernel each peer's dispatch selects for the shape on the chip."""
    if shape.latent and not shape.kv_dtype:
        out = []
        if "flashmla" in peers and chip == "sm_90a":
            out.append(flashmla_kernel(cache, shape))
        if "flashinfer" in peers and chip == "sm_90a":
            out.append(flashinfer_mla_hopper_kernel(cache, shape))
        elif "flashinfer" in peers:
            out.append(flashinfer_mla_kernel(cache, shape, chip))
        return out
    if shape.latent:
        # The FP8 latent cache: FlashMLA's FP8 decode (sm_90a); FlashInfer's
        # MLA kernels are not built for an FP8 cache here.
        if "flashmla" in peers and chip == "sm_90a":
            return [flashmla_fp8_kernel(cache, shape)]
        return []
    if shape.kv_dtype:
        return []  # no FP8 peer kernel of a non-latent cache is built here
    d, kind = shape.d, shape.kind
    causal = "-causal" if shape.causal else ""
    if shape.dv != d:
        # Dv != D (DeepSeek's MHA prefill): FA3's kernel alone is built.
        if "fa3" in peers and chip == "sm_90a" and kind == "prefill":
            return [fa3_kernel(cache, shape, "fwd-hd%d-dv%d%s" % (
                d, shape.dv, causal))]
        return []
    out = []
    if "fa2" in peers and (chip in ("sm_80", "sm_86", "sm_89") or
                           (kind == "cal" and d == 128)):
        if kind in ("prefill", "cal"):
            # run_mha_fwd_hdim128's is_sm8x tiles on sm_86 / sm_89.
            sm8x = "-sm8x" if chip in ("sm_86", "sm_89") and d == 128 else ""
            out.append(fa2_kernel(cache, shape, chip,
                                  "fwd-hd%d%s%s" % (d, causal, sm8x)))
        elif kind == "append":
            out.append(fa2_kernel(cache, shape, chip,
                                  "splitkv-hd%d-causal" % d))
        elif kind == "decode":
            out.append(fa2_kernel(cache, shape, chip,
                                  "splitkv-hd%d-split" % d))
    if "fa3" in peers and chip == "sm_90a" and kind in ("prefill", "append",
                                                        "cal"):
        out.append(fa3_kernel(cache, shape, "fwd-hd%d%s" % (d, causal)))
    if "fa3" in peers and chip == "sm_90a" and kind == "decode":
        out.append(fa3_kernel(cache, shape, "decode-hd%d" % d))
    if "flashinfer" in peers and kind == "decode":
        out.append(flashinfer_kernel(cache, shape, chip))
    if "flashinfer" in peers and kind in ("prefill", "append"):
        out.append(flashinfer_prefill_kernel(cache, shape, chip))
    if "triton" in peers and kind in ("prefill", "append"):
        out.append(triton_kernel(cache, shape, chip, "extend"))
    if "triton" in peers and kind == "decode":
        out.append(triton_kernel(cache, shape, chip, "decode"))
    return out


# --- Output ------------------------------------------------------------------
def fmt_bound(shape, r):
    if shape.kind == "decode":
        return "%.0f" % r["gbs_bound"]
    return "%.0f" % (r["rate_bound"] / 1e12)


def fmt_rate(shape, r):
    if shape.kind == "decode":
        s = "%.0f GB/s" % r["gbs"]
        if r.get("gbs_h200"):
            s += " (H200 %.0f)" % r["gbs_h200"]
        return s
    return "%.0f TFLOP/s" % (r["rate"] / 1e12)


def headline(shape, r):
    return r["gbs"] if shape.kind == "decode" else r["rate"] / 1e12


def analyse_sass_file(path):
    """--sass: the analyser alone on one SASS file (used by the lit test)."""
    with open(path) as f:
        funcs = S.parse(f.read())
    if not funcs:
        raise SystemExit("run.py: %s: no SASS functions found" % path)
    counts = {}
    for name in sorted(funcs):
        c = S.analyse(funcs[name])
        if c is None:
            print("function %s: no loop" % name)
            continue
        counts[name] = c
        per = c["mma_flops"] / M.UNIT_FLOPS
        print("function %s loop %s insts %d hmma %d hgmma %d ldsm %d lds %d "
              "sts %d smem_bytes %d wgmma_smem_bytes %d ldgsts %d tma %d "
              "bar %d named_bar %d "
              "mbar %d mufu %d ex2 %d ffma %d fmul %d fadd %d int %d move %d "
              "spill %d units %.2f" % (
                  name, c["loop"], c["insts"], c["hmma"], c["hgmma"],
                  c["ldsm"], c["lds"], c["sts"], c["smem_bytes"],
                  c["wgmma_smem_bytes"],
                  c["ldgsts"], c["tma"], c["bar"], c["named_bar"], c["mbar"],
                  c["mufu"], c["ex2"], c["ffma"], c["fmul"], c["fadd"],
                  c["int"], c["move"], c["spill"], per))
    return counts


def model_sass_file(path, shape_name, chip, tile):
    """--sass FILE --shape S --chip C --tile BMxBNxWARPS: each function of
    the file as a kernel with that tiling on that shape; ratios of the first
    function to each other one, in the report's format."""
    counts = analyse_sass_file(path)
    try:
        bm, bn, warps = (int(x) for x in tile.split("x"))
    except ValueError:
        raise SystemExit("run.py: --tile %r: expected BMxBNxWARPS" % tile)
    if chip not in M.CHIPS:
        raise SystemExit("run.py: unknown chip %s (%s)" % (
            chip, ", ".join(M.CHIPS)))
    shape = next((s for s in shapes(["prefill", "append", "decode"],
                                     [128, 64]) + cal_shapes()
                  if s.name == shape_name), None)
    if shape is None:
        raise SystemExit("run.py: unknown shape %s" % shape_name)
    rows, ratios = [], []
    names = sorted(counts)
    for name in names:
        k = Kernel(name, chip, "%dx%d w%d" % (bm, bn, warps), [counts[name]],
                   [None], bm, bn, warps, warps * 32, 128, 32768, False)
        rows.append((shape, k, k.evaluate(shape)))
    first = headline(shape, rows[0][2])
    for shape_, k, r in rows[1:]:
        ratios.append((shape.name, chip, k.peer, first / headline(shape, r)))
    print_report(rows, ratios, [(names[0], shape.name, chip,
                                 headline(shape, rows[0][2]), None, 0)])


def print_report(rows, ratios, cals):
    """The table, then the ratio and calibration lines (read by tools)."""
    print("| shape | kernel | chip | tile/warps | regs | smem | CTAs/SM | "
          "insts/unit | MMA share | smem B/unit | int/unit | MUFU/unit | "
          "FFMA/unit | MMA/useful | stack B | bound | binding | estimate | "
          "kvattn/this | (bound) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
          "---|---|---|---|")
    for shape, k, r in rows:
        pu = r["per_unit"]
        ratio = next((x for s, ch, pe, x in ratios if s == shape.name and
                      ch == k.chip and pe == k.peer), None)
        kv = next((rr for ss, kk, rr in rows if ss is shape and
                   kk.peer == "kvattn" and kk.chip == k.chip), None)
        bratio = None
        if kv is not None and k.peer != "kvattn":
            bratio = (kv["gbs_bound"] / r["gbs_bound"]) if shape.kind == \
                "decode" else kv["rate_bound"] / r["rate_bound"]
        print("| %s | %s | %s | %s | %s | %s | %d | %.0f | %.0f %% | %.0f | "
              "%.0f | %.1f | %.1f | %.2f | %d | %s | %s | %s | %s | %s |" % (
                  shape.name, k.peer, k.chip, k.label, k.regs,
                  "%.0fK" % (k.smem / 1024), r["occ"], pu["insts"],
                  100 * pu["mma_share"], pu["smem"], pu["int"], pu["mufu"],
                  pu["ffma"], pu["mma_per_useful"], k.spills,
                  fmt_bound(shape, r), r["binding"], fmt_rate(shape, r),
                  "%.2f" % ratio if ratio else "-",
                  "%.2f" % bratio if bratio else "-"))
    # The append shapes, also as one geometric mean over L per hd.
    agg = {}
    for s, ch, pe, x in ratios:
        if s.startswith("append-"):
            # (A paged shape's mean is its own: append-hd128-paged16.)
            paged = [w for w in s.split("-") if w.startswith("paged")]
            key = ("-".join(s.split("-")[:2] + paged), ch, pe)
            agg.setdefault(key, []).append(x)
    if any(c[4] for c in cals):
        print()
        print("| calibration | chip | estimate | bound | published | "
              "estimate error | bound error |")
        print("|---|---|---|---|---|---|---|")
        for peer, sname, chip, est, pub, bound, *unit in cals:
            if pub:
                print("| %s %s | %s | %.0f | %.0f | %d%s | %+.0f %% | %+.0f %% |"
                      % (peer, sname, chip, est, bound, pub,
                         " " + unit[0] if unit else "",
                         100 * (est / pub - 1), 100 * (bound / pub - 1)))
    print()
    for s, ch, pe, x in ratios:
        print("ratio %s %s %s %.2f" % (s, ch, pe, x))
    for (s, ch, pe), xs in sorted(agg.items()):
        print("ratio %s %s %s %.2f" % (s, ch, pe, math.exp(
            sum(map(math.log, xs)) / len(xs))))
    for peer, sname, chip, est, pub, _, *unit in cals:
        print("calibration %s %s %s estimate=%.0f published=%s%s" % (
            peer, sname, chip, est, "NA" if pub is None else "%d" % pub,
            " " + unit[0] if unit else ""))


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"),
                   help="kvattn's build tree (bin/kvattn-compile); the "
                   "peers' cache goes to BUILD/peers")
    p.add_argument("--cache", help="the peers' cache (default BUILD/peers)")
    p.add_argument("--chips", default="sm_80,sm_89,sm_90a",
                   help="of %s" % ", ".join(M.CHIPS))
    p.add_argument("--shapes", default="prefill,append,decode")
    p.add_argument("--hd", default="128,64")
    p.add_argument("--peers", default="fa2,fa3,flashinfer,triton,flashmla",
                   help="'none': kvattn's kernels alone (before/after a "
                   "kernel change; only the disassembler is downloaded)")
    p.add_argument("--kvattn-sm90", default="sm_90a",
                   choices=("sm_90a", "sm_90"),
                   help="kvattn's chip on the sm_90a rows: sm_90a (wgmma "
                   "kernels) or sm_90 (mma.sync kernels, the before of the "
                   "wgmma lowering)")
    p.add_argument("--no-calibration", action="store_true")
    p.add_argument("--sass", help="analyse one SASS file and exit")
    p.add_argument("--shape", help="with --sass: model its functions on "
                   "this shape (e.g. prefill-hd128-causal)")
    p.add_argument("--chip", default="sm_80", help="with --sass --shape")
    p.add_argument("--tile", default="64x64x4", help="with --sass --shape: "
                   "BLOCK_MxBLOCK_NxWARPS")
    a = p.parse_args()
    KVATTN_SM90[0] = a.kvattn_sm90
    if a.sass:
        if a.shape:
            model_sass_file(a.sass, a.shape, a.chip, a.tile)
        else:
            analyse_sass_file(a.sass)
        return
    chips = a.chips.split(",")
    for ch in chips:
        if ch not in M.CHIPS:
            raise SystemExit("run.py: unknown chip %s (%s)" % (
                ch, ", ".join(M.CHIPS)))
    peers = [] if a.peers == "none" else a.peers.split(",")
    for pe in peers:
        if pe not in ("fa2", "fa3", "flashinfer", "triton", "flashmla"):
            raise SystemExit("run.py: unknown peer %s (fa2, fa3, flashinfer, "
                             "triton, flashmla, or none)" % pe)
    import fetch
    build = os.path.abspath(a.build)
    cache = fetch.Cache(a.cache or os.path.join(build, "peers"))
    rows, ratios, cals = [], [], []
    for shape in shapes(a.shapes.split(","), [int(x) for x in
                                              a.hd.split(",")]):
        for chip in chips:
            kv = kvattn_kernel(cache, build, shape, chip)
            rk = kv.evaluate(shape)
            rows.append((shape, kv, rk))
            for pk in peer_kernels(cache, shape, chip, peers):
                rp = pk.evaluate(shape, getattr(pk, "fixed_occ", None))
                rows.append((shape, pk, rp))
                ratios.append((shape.name, chip, pk.peer,
                               headline(shape, rk) / headline(shape, rp)))
    if not a.no_calibration:
        for shape in cal_shapes():
            for chip in chips:
                for pk in peer_kernels(cache, shape, chip, peers):
                    key = (pk.peer, shape.name, chip)
                    if key not in PUBLISHED:
                        continue
                    rp = pk.evaluate(shape, getattr(pk, "fixed_occ", None))
                    rows.append((shape, pk, rp))
                    cals.append((pk.peer, shape.name, chip,
                                 rp["rate"] / 1e12, PUBLISHED[key],
                                 rp["rate_bound"] / 1e12))
        for (peer, sname, chip), pub in PUBLISHED.items():
            if pub is None and chip in chips and peer in peers:
                r = next((r for s, k, r in rows if s.name == sname and
                          k.chip == chip and k.peer == peer), None)
                if r:
                    cals.append((peer, sname, chip, r["gbs"], None,
                                 r["gbs_bound"]))
        # FlashMLA on the MLA decode shapes of this run (GB/s for the
        # memory-bound case, TFLOP/s for the compute-bound one).
        for (peer, sname, chip), (pub, unit) in PUBLISHED_MLA.items():
            r = next((r for s, k, r in rows if s.name == sname and
                      k.chip == chip and k.peer == peer), None)
            if r:
                gbs = unit == "GB/s"
                cals.append((peer, sname, chip,
                             r["gbs"] if gbs else r["rate"] / 1e12, pub,
                             r["gbs_bound"] if gbs else
                             r["rate_bound"] / 1e12, unit))

    print_report(rows, ratios, cals)
    # Copy loops the analyser cannot trip (sass.main_loop): the kernel's
    # per-unit counts are a lower bound.
    for shape, k, r in rows:
        c = k.counts_phases[0]
        if c.get("rolled_loops"):
            print("note %s %s %s: %d loop(s) without tensor work nested in "
                  "the KV loop (%d instructions) counted once per KV block: "
                  "its counts are a lower bound" % (
                      shape.name, k.chip, k.peer, c["rolled_loops"],
                      c["rolled_insts"]))
    # Paged caches: kvattn's estimate over a paged cache as a fraction of
    # the same shape's over a contiguous one (compiled here if the run did
    # not have it).
    for shape, k, r in rows:
        if not shape.page_size or k.peer != "kvattn":
            continue
        base_name = shape.name.replace("-paged%d" % shape.page_size, "")
        base = next((rb for sb, kb, rb in rows if sb.name == base_name and
                     kb.chip == k.chip and kb.peer == "kvattn"), None)
        if base is None:
            bs = next(s for s in shapes([shape.kind], [shape.d])
                      if s.name == base_name)
            base = kvattn_kernel(cache, build, bs, k.chip).evaluate(bs)
        print("paged %s %s %s: %.2f of the contiguous cache's estimate "
              "(%s against %s)" % (shape.name, k.chip, k.label,
                                   base["time"] / r["time"],
                                   fmt_rate(shape, r), fmt_rate(shape, base)))
    # FP8 decode: the same step over a cache of half the bytes, as tokens
    # per second relative to kvattn's bf16 decode (a model estimate).
    for shape, k, r in rows:
        if not shape.kv_dtype or k.peer != "kvattn":
            continue
        base = next((rb for sb, kb, rb in rows if sb.kind == "decode" and
                     not sb.kv_dtype and sb.d == shape.d and
                     sb.hq == shape.hq and sb.latent == shape.latent and
                     kb.chip == k.chip and kb.peer == "kvattn"), None)
        line = "fp8 %s %s: %.0f GB/s of FP8 cache (estimate)" % (
            shape.name, k.chip, r["gbs"])
        if base:
            line += ", %.2fx the tokens/s of the bf16 decode (%.0f GB/s)" % (
                base["time"] / r["time"], base["gbs"])
        print(line)
    # MLA decode: bytes and FLOPs per cached token, and the model's rate as
    # a fraction of the chip's HBM bandwidth (estimates); the peers' lines
    # name the peer.
    for shape, k, r in rows:
        if not shape.latent:
            continue
        hbm = M.CHIPS[k.chip]["hbm"]
        print("mla %s %s%s: %d bytes and %d FLOPs per cached token, %.0f GB/s "
              "(estimate) = %.2f of HBM (%.0f GB/s), %.1f TFLOP/s (estimate), "
              "binding %s" % (
                  shape.name, k.chip, "" if k.peer == "kvattn" else
                  " " + k.peer, shape.d * shape.kv_elt_bytes,
                  shape.flops_per_key() * shape.hq, r["gbs"],
                  r["gbs"] * 1e9 / hbm, hbm / 1e9, r["rate"] / 1e12,
                  r["binding"]))


if __name__ == "__main__":
    import subprocess
    import urllib.error
    try:
        main()
    except subprocess.CalledProcessError as e:
        cmd = " ".join(map(str, e.cmd))
        sys.exit("run.py: error: `%s` failed (exit %d)%s" % (
            cmd[:300], e.returncode,
            (":\n" + e.stderr[-2000:]) if isinstance(e.stderr, str) and
            e.stderr else ""))
    except (urllib.error.URLError, OSError) as e:
        sys.exit("run.py: error: %s (the first run downloads the peers: "
                 "docs/benchmarks.md)" % e)
