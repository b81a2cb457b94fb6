"""One throughput model for every kernel (docs/benchmarks.md, "Peers at the
SASS level").  Each limit is the time one SM resource alone would need for
the kernel's main-loop work at its peak rate (issue slots, tensor pipe,
shared-memory bandwidth, MUFU, FP32 and integer pipes, the longest CTA, HBM).
Two estimates: the *bound* (the largest limit: perfect overlap) and the
*serial* one, the headline (per loop trip the tensor time plus the busiest
other limit; HBM and the longest CTA as floors).  No latency, no
prologue/epilogue, masked blocks costed as full ones; the same model for
every kernel, so that ratios between kernels are what it is for.

Device figures (per SM per cycle unless said):
- A100 SXM4 80 GB (sm_80): 108 SMs, 1.41 GHz boost; dense BF16 mma.sync
  312 TFLOP/s = 108 x 2048 FLOP/cycle x 1.41 GHz; HBM2e 2,039 GB/s
  (NVIDIA A100 datasheet and Ampere GA100 whitepaper).  64 FP32 lanes.
- H100 SXM5 (sm_90a): 132 SMs; dense BF16 wgmma 989.4 TFLOP/s = 132 x 4096
  FLOP/cycle x 1.83 GHz (the clock the datasheet peak implies); HBM3
  3,350 GB/s (H100 datasheet, Hopper whitepaper).  128 FP32 lanes.
  Dense FP8 (e4m3/e5m2) wgmma (QGMMA) 1,979 TFLOP/s, twice the BF16 rate
  (H100 datasheet): an FP8 FLOP costs half a BF16 one of the tensor pipe.
- H200 SXM (sm_90a): the same GH100 and clocks, HBM3e 4,800 GB/s (H200
  datasheet).
- A10 (sm_86, GA102): 72 SMs, 1.695 GHz boost; dense BF16 mma.sync with
  FP32 accumulation 125 TFLOP/s = 72 x 1024 FLOP/cycle x 1.695 GHz (A10
  datasheet: 125 dense, 250 with sparsity); GDDR6 600 GB/s.  128 FP32 lanes;
  100 KB of shared memory per SM, 48 warps and 16 CTAs per SM (CUDA C++
  Programming Guide, compute capability 8.6).
- L40S (sm_89, AD102): 142 SMs, 2.52 GHz boost; dense BF16 with FP32
  accumulation 366 TFLOP/s = 142 x 1024 FLOP/cycle x 2.52 GHz (the L40S
  datasheet's 733 TFLOP/s with sparsity, halved); GDDR6 864 GB/s.  128 FP32
  lanes; 100 KB of shared memory per SM, 48 warps and 24 CTAs per SM
  (cc 8.9).  GeForce AD102 (RTX 4090) accumulates FP32 at half that rate:
  the L40S is the sm_89 reference here.
- All: 4 schedulers per SM, one warp instruction per cycle each; shared
  memory 128 B/cycle (32 banks x 4 B), which the operands a wgmma reads
  from it take too (B, and A unless it is in registers; B once for the
  warpgroup's four tensor cores): a wgmma takes the longer of its math and
  those reads; MUFU 16 results/cycle (CUDA C++
  Programming Guide, arithmetic instruction throughput table, cc 8.0/9.0:
  exp2/rcp 16 per SM per cycle); 64 lanes/cycle for integer and FP32
  compare/min/max/logic (the same table).
  The same table gives 16 exp2 and 64 integer lanes per cycle for cc 8.6
  and 8.9.
- ASSUMPTION: mma.sync on sm_90 reaches 62 % of the wgmma peak (reported by
  microbenchmarks of Hopper, e.g. Luo et al., "Benchmarking and Dissecting
  the Nvidia Hopper GPU Architecture", 2024; bench/roofline.py uses the same
  fraction).
"""

import heapq

CHIPS = {
    "sm_80": dict(gpu="A100", sms=108, clock=1.41e9, mma=2048.0, wgmma=None,
                  hbm=2.039e12, fma_lanes=64, smem_per_sm=167936,
                  smem_reserved=1024, regs=65536, max_warps=64,
                  max_blocks=32),
    "sm_86": dict(gpu="A10", sms=72, clock=1.695e9, mma=1024.0, wgmma=None,
                  hbm=0.6e12, fma_lanes=128, smem_per_sm=102400,
                  smem_reserved=1024, regs=65536, max_warps=48,
                  max_blocks=16),
    "sm_89": dict(gpu="L40S", sms=142, clock=2.52e9, mma=1024.0, wgmma=None,
                  hbm=0.864e12, fma_lanes=128, smem_per_sm=102400,
                  smem_reserved=1024, regs=65536, max_warps=48,
                  max_blocks=24),
    "sm_90a": dict(gpu="H100", sms=132, clock=1.83e9, mma=4096.0 * 0.62,
                   wgmma=4096.0, hbm=3.35e12, fma_lanes=128,
                   smem_per_sm=233472, smem_reserved=1024, regs=65536,
                   max_warps=64, max_blocks=32),
}
H200_HBM = 4.8e12
ISSUE = 4.0          # warp instructions per cycle per SM
SMEM_BW = 128.0      # bytes per cycle per SM
MUFU_LANES = 16.0
ALU_LANES = 64.0
UNIT_FLOPS = 2 * 2 * 16 * 64 * 128


def occupancy(chip, regs, smem, warps):
    """Resident CTAs per SM (registers allocated per warp in units of 256,
    per-thread counts rounded up to 8)."""
    c = CHIPS[chip]
    per_warp = -(-max(regs, 1) * 32 // 256) * 256
    by_regs = c["regs"] // (per_warp * warps) if regs else c["max_blocks"]
    by_smem = c["smem_per_sm"] // (smem + c["smem_reserved"])
    return max(0, min(c["max_blocks"], c["max_warps"] // warps, by_regs,
                      by_smem))


def per_iter_demands(chip, counts, warps):
    """Cycles one CTA-iteration needs of each SM resource (SM-wide rates)."""
    c = CHIPS[chip]
    n = warps
    tensor = 0.0
    if counts["hgmma"] and counts.get("wgmma_ops"):
        # Each wgmma takes the longer of its math (FP8 at twice the BF16
        # rate: the FLOPs are BF16 equivalents) and its operand reads from
        # shared memory, which overlap it (an m64n32k16 with both operands
        # there reads 192 B per cycle of math, above 128).
        tensor = sum(
            k * max(f / c["wgmma"], b / SMEM_BW)
            for key, k in counts["wgmma_ops"].items()
            for f, b in [map(int, key.split(":"))]) * n
    elif counts["hgmma"]:
        # FP8 wgmma (QGMMA) runs at twice the BF16 rate.
        fp8 = counts.get("mma_flops_fp8", 0)
        tensor = (counts["mma_flops"] - fp8 / 2) * n / c["wgmma"]
    elif counts["hmma"]:
        tensor = counts["mma_flops"] * n / c["mma"]
    fma = counts["ffma"] + counts["fmul"] + counts["fadd"]
    alu = counts["int"] + counts["fp_other"]
    return {
        "issue": counts["insts"] * n / ISSUE,
        "tensor": tensor,
        "smem": (counts["smem_bytes"] + counts["ldgsts_bytes"]) * n / SMEM_BW,
        "mufu": counts["mufu"] * 32 * n / MUFU_LANES,
        "fma": fma * 32 * n / c["fma_lanes"],
        "alu": alu * 32 * n / ALU_LANES,
    }


def estimate(chip, phases, warps, ctas_per_sm, cta_iters, useful, hbm_bytes,
             hbm=None):
    """phases: [(counts, iterations per CTA list)], all CTAs alike in warps.

    Returns dict(time=, limits={name: seconds}, binding=, rate=useful/time).
    """
    c = CHIPS[chip]
    n_ctas = len(cta_iters[0]) if cta_iters else 0
    active = min(c["sms"], n_ctas) or 1
    resident = max(1, min(ctas_per_sm, -(-n_ctas // active)))
    issue_rate = min(ISSUE, resident * warps) / ISSUE
    totals, longest, serial, longest_serial = {}, 0.0, 0.0, 0.0
    cta_serial = [0.0] * n_ctas  # each CTA's own serial time, alone
    for (counts, iters) in zip(phases, cta_iters):
        d = per_iter_demands(chip, counts, warps)
        d["issue"] /= issue_rate
        total_iters = sum(iters)
        for k, v in d.items():
            totals[k] = totals.get(k, 0.0) + v * total_iters
        rest = max(v for k, v in d.items() if k != "tensor")
        serial += (d["tensor"] + rest) * total_iters
        # One CTA alone on an SM: its own warps issue at most min(4, warps)
        # per cycle.
        alone = dict(d)
        alone["issue"] = counts["insts"] * warps / min(ISSUE, warps)
        longest += max(alone.values()) * max(iters)
        per_iter = alone["tensor"] + max(
            v for k, v in alone.items() if k != "tensor")
        longest_serial += per_iter * max(iters)
        for i, n in enumerate(iters):
            cta_serial[i] += per_iter * n
    # Discrete CTAs: each holds one of the active x resident slots from its
    # start to its end, started in launch order as slots free (list
    # scheduling). With one CTA per SM this is the wave quantization the
    # fluid limits cannot see: 160 equal CTAs on 132 SMs take two CTA
    # times, 128 take one.
    slots = [0.0] * max(1, min(active * resident, n_ctas))
    heapq.heapify(slots)
    for t in cta_serial:
        heapq.heappush(slots, heapq.heappop(slots) + t)
    makespan = max(slots)
    limits = {k: v / active / c["clock"] for k, v in totals.items()}
    limits["tail"] = longest / c["clock"]
    bw = (hbm or c["hbm"]) * active / c["sms"]
    limits["hbm"] = hbm_bytes / bw
    binding = max(limits, key=limits.get)
    t = limits[binding]
    # The serial variant (the headline): the tensor pipe's work does not
    # overlap the rest: per trip, the tensor time plus that of the busiest
    # other limit.  It matches the published figures far better than the
    # bound (docs/benchmarks.md, calibration).
    serial_limits = {"sm": serial / active / c["clock"],
                     "tail": max(longest_serial, makespan) / c["clock"],
                     "hbm": limits["hbm"]}
    s_bind = max(serial_limits, key=serial_limits.get)
    t_serial = serial_limits[s_bind]
    if s_bind != "hbm":
        rest = {k: v for k, v in limits.items()
                if k not in ("tensor", "tail", "hbm")}
        other = max(rest, key=rest.get)
        s_bind = ("tensor+" + other) if limits["tensor"] > 0 else other
        if serial_limits["tail"] > serial_limits["sm"]:
            s_bind = "tail:" + s_bind
    return dict(time=t_serial, rate=useful / t_serial, binding=s_bind,
                time_bound=t, rate_bound=useful / t, binding_bound=binding,
                limits=limits, active_sms=active, resident=resident)
