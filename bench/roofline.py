#!/usr/bin/env python3
"""An upper-bound speed estimate of the tensor-core kernels on H100 / H200.

Reads the counter table of bench/emu_table.py (the emulated GPU's counts per
warp per KV block) and turns it, with published device figures, into a
roofline: for each shape and device, the time each limit alone would need
(tensor cores, instruction issue, shared memory, HBM), the largest of them
(the estimate) and which limit binds. It is an estimate, not a measurement:
each limit is meant to be optimistic (peak rates, no latency, only the KV
loop's work), but the instruction count is of LLVM IR, a proxy for SASS
(docs/benchmarks.md, "Roofline estimate").

    python3 bench/roofline.py --table FILE        # a saved emu_table.py output
    python3 bench/emu_table.py | python3 bench/roofline.py
    python3 bench/roofline.py --run [--build build] [--quick]
"""

import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no bench/__pycache__ from the import
import emu_table  # noqa: E402  (SHAPES: the case flags behind each label)

# --- Device figures --------------------------------------------------------
# NVIDIA H100 Tensor Core GPU datasheet and architecture whitepaper (H100
# SXM5): 132 SMs, 4 sub-partitions (schedulers) per SM, dense BF16 tensor
# peak 989.4 TFLOP/s (1,979 with sparsity), HBM3 3.35 TB/s. NVIDIA H200
# datasheet: the same GH100 (132 SMs, same clocks, same tensor peak),
# HBM3e 4.8 TB/s, 141 GB. The clock is the one the datasheet peak implies
# (132 SMs x 4096 dense BF16 FLOP/cycle x 1.83 GHz = 989.4 TFLOP/s); issue and
# shared memory use the same clock, so all limits are at boost clock.
CLOCK_HZ = 1.83e9
DEVICES = [
    # name, SMs, dense BF16 tensor peak (wgmma), HBM bytes/s
    ("H100 SXM", 132, 989.4e12, 3.35e12),
    ("H200 SXM", 132, 989.4e12, 4.8e12),
]
SCHEDULERS_PER_SM = 4      # one warp instruction per cycle each
SHARED_BYTES_PER_CYCLE = 128  # per SM: 32 banks x 4 bytes
WAVEFRONT_BYTES = 128      # one shared-memory wavefront per cycle per SM

# The kernels use sm_80-style mma.sync m16n8k16, not Hopper's wgmma. The
# datasheet peak is reachable only through wgmma; mma.sync on Hopper is
# commonly reported to reach about 60-65 % of it. An ASSUMPTION, not a
# datasheet figure: the tensor limit uses this fraction of the peak.
MMA_SYNC_FRACTION = 0.62
MMA_FLOPS = 2 * 16 * 8 * 16  # one mma.sync.m16n8k16: 16x8 outputs, k = 16

# The standard shapes of emu_table.py: bf16, GQA 32/8.
HQ, HKV, ELEM_BYTES = 32, 8, 2


# --- Input -----------------------------------------------------------------
def read_table(lines):
    """The rows of emu_table.py's markdown table, as dicts by header."""
    rows, header = [], None
    for line in lines:
        line = line.strip()
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if header is None:
            header = cells
        elif not set(line) <= set("|-: "):
            rows.append(dict(zip(header, cells)))
    if not rows:
        sys.exit("roofline.py: no table rows in the input")
    return rows


def shape_of(label):
    """B, L, D, Dv and per-sequence q_offset / kv_len of a table row.

    From the attention_case.py flags emu_table.SHAPES gives the label (the
    case that was run), else from the label itself.
    """
    flags = {lab: f for lab, f, _ in emu_table.SHAPES}.get(label)
    if flags is not None:
        p = argparse.ArgumentParser(add_help=False)
        for name in ("--B", "--L", "--S", "--D", "--Dv"):
            p.add_argument(name, type=int)
        ints = lambda t: [int(x) for x in t.split(",")]  # noqa: E731
        p.add_argument("--q-offset", type=ints)
        p.add_argument("--kv-len", type=ints)
        a, _ = p.parse_known_args(flags.split())
        b = a.B or 1
        offsets = a.q_offset or [a.S - a.L]
        kv_lens = a.kv_len or [a.S]
        return dict(B=b, L=a.L, D=a.D, Dv=a.Dv or a.D,
                    offsets=offsets * (b // len(offsets)),
                    kv_lens=kv_lens * (b // len(kv_lens)))
    num = lambda key: re.search(rf"\b{key}=(\d+)", label)  # noqa: E731
    d = int(num("D").group(1))
    b = int(num("B").group(1)) if num("B") else 1
    if "prefill" in label:
        L = int(num("L").group(1))
        offsets, kv_lens = [0] * b, [L] * b
    elif "append" in label:
        L, P = int(num("L").group(1)), int(num("P").group(1))
        offsets, kv_lens = [P] * b, [P + L] * b
    elif "decode" in label:
        L = 1
        kv_lens = [int(s) for s in
                   re.search(r"S=([\d/]+)", label).group(1).split("/")]
        kv_lens = kv_lens * (b // len(kv_lens))
        offsets = [s - 1 for s in kv_lens]
    else:
        sys.exit(f"roofline.py: cannot read the shape of '{label}'")
    return dict(B=b, L=L, D=d, Dv=d, offsets=offsets, kv_lens=kv_lens)


def first_number(text):
    m = re.match(r"\s*([\d.]+)", text)
    return float(m.group(1)) if m else None


# --- The model -------------------------------------------------------------
def estimate(row, device, batch=1, simple=False):
    name, sms, peak, hbm = device
    m = re.match(r"(\d+) warps?, grid (\d+)x(\d+)x(\d+)", row["tile"])
    warps_per_cta = int(m.group(1))
    ctas = int(m.group(2)) * int(m.group(3)) * int(m.group(4)) * batch
    kv_blocks = int(row["kv_blocks"]) * batch
    # Kernel totals. The emulator's `kv_blocks` is the KV-loop iterations
    # summed over CTAs, and each `..._per_kv_block` counter is the count
    # inside the KV loop divided by kv_blocks x kv_warps (per warp per KV
    # block; LaunchCounters::line in lib/GpuEmu/Emulator.cpp, "Counters" in
    # docs/gpu-emulator.md; kv_warps = warps_per_cta in the mma.sync kernels
    # emu_table.py runs, which have no producer warpgroup). Every warp of a
    # CTA runs every iteration of its CTA, so a total is per_warp_per_block
    # x kv_blocks x warps_per_cta.
    # Work outside the KV loop (prologue, epilogue) and the split-KV merge
    # kernel is not counted: the totals are lower bounds, the estimate an
    # upper bound on speed. (--batch N: N times the CTAs and KV blocks, with
    # the table's tiles and split.)
    warp_blocks = kv_blocks * warps_per_cta
    per = {k: float(row[k]) for k in ("warp insts", "mma", "ldmatrix",
                                      "shared req.", "bank replays")}
    insts = per["warp insts"] * warp_blocks
    mma = per["mma"] * warp_blocks
    s = shape_of(row["shape"])
    d, dv, L = s["D"], s["Dv"], s["L"]

    # Shared memory: 128 B per cycle per SM, i.e. one 128-byte wavefront.
    # The counters give warp requests (an ldmatrix is one) and replays
    # beyond each request's first pass. With --simple, one wavefront per
    # request or replay (a lower bound). Otherwise the passes are counted:
    # an ldmatrix.xN reads N 8x8 matrices, one wavefront each; every mma's
    # B operand is one ldmatrix.x2 (K in Q.K^T, V in P.V) and the rest are
    # the ldmatrix.x4 of Q (passes/Conversion/TileToGPU/TensorCoreTiles.cpp); other
    # requests count one wavefront (8- and 16-byte ones take 2-4: still a
    # lower bound). Plus the K and V blocks cp.async writes into shared
    # memory, which the request counters leave out: block_n x (D + Dv) x 2
    # bytes per CTA per KV block, where a 16-row warp's mma count per block
    # is block_n x (D + Dv) / 128.
    if simple:
        per_warp = per["shared req."] + per["bank replays"]
        landed = 0.0
    else:
        x2 = min(per["ldmatrix"], per["mma"])
        x4 = per["ldmatrix"] - x2
        per_warp = (per["shared req."] - per["ldmatrix"]) + 2 * x2 + \
            4 * x4 + per["bank replays"]
        block_n = per["mma"] * 128 / (d + dv)
        landed = kv_blocks * block_n * (d + dv) * ELEM_BYTES / WAVEFRONT_BYTES
    wavefronts = per_warp * warp_blocks + landed

    # Occupancy: with fewer CTAs than SMs only `ctas` SMs have work; shared
    # memory is a per-SM resource, so it scales with the SMs that have work.
    # Issue and tensor cores are per sub-partition: a warp stays on one of
    # the 4 schedulers (and its tensor core), so an SM with w < 4 warps uses
    # at most w of them (--simple: the SM fraction only). No latency is
    # modelled beyond this: a lone warp issuing every cycle and a few CTAs
    # saturating HBM are both optimistic.
    active_sms = min(sms, ctas)
    sm_frac = active_sms / sms
    warps_per_sm = ctas * warps_per_cta / active_sms
    sched_frac = sm_frac if simple else \
        sm_frac * min(SCHEDULERS_PER_SM, warps_per_sm) / SCHEDULERS_PER_SM

    # HBM: the bytes that must cross it at least once: Q and O of every
    # query head, K and V of every key some query sees, once per kv head
    # (the other query heads of a GQA group are assumed to hit L2), divided
    # by the kernel's sector efficiency (bytes used / bytes of the sectors
    # touched). Split-KV partial states and the block table are left out
    # (L2-resident at these sizes).
    hbm_bytes, pairs = 0, 0
    for p, n in zip(s["offsets"], s["kv_lens"]):
        visible = min(n, p + L)
        hbm_bytes += (HKV * visible * (d + dv) + HQ * L * (d + dv)) * \
            ELEM_BYTES
        pairs += sum(min(n, p + i + 1) for i in range(L))
    hbm_bytes *= batch
    useful_flops = 4 * d * pairs * HQ * batch  # docs/benchmarks.md
    eff = first_number(row["sector eff."]) or 1.0

    # Issue: one warp instruction per scheduler per cycle. `warp insts` are
    # LLVM IR instructions / 32 (docs/gpu-emulator.md), not SASS: ptxas may
    # fold some (casts, extractvalue, address arithmetic) and expand others.
    bounds = {
        "tensor": mma * MMA_FLOPS / (peak * MMA_SYNC_FRACTION * sched_frac),
        "issue": insts / (sms * SCHEDULERS_PER_SM * CLOCK_HZ * sched_frac),
        "shared": wavefronts * WAVEFRONT_BYTES /
        (sms * SHARED_BYTES_PER_CYCLE * CLOCK_HZ * sm_frac),
        "HBM": hbm_bytes / eff / hbm,
    }
    binds = max(bounds, key=bounds.get)
    t = bounds[binds]
    return dict(device=name, ctas=ctas, warps=ctas * warps_per_cta,
                bounds=bounds, time=t, binds=binds,
                hbm_frac=bounds["HBM"] / t, tflops=useful_flops / t / 1e12,
                mma_util=useful_flops / (mma * MMA_FLOPS))


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--table", help="emu_table.py output (default: stdin)")
    p.add_argument("--run", action="store_true",
                   help="run bench/emu_table.py --build BUILD first")
    p.add_argument("--build", default=os.path.join(emu_table.ROOT, "build"))
    p.add_argument("--quick", action="store_true", help="with --run")
    p.add_argument("--batch", type=int, default=1,
                   help="N times each shape's batch (same tiles and split)")
    p.add_argument("--simple", action="store_true",
                   help="shared memory: one wavefront per request or "
                        "replay; issue/tensor scaled by SMs with work only")
    a = p.parse_args()
    if a.run:
        cmd = [sys.executable, os.path.join(HERE, "emu_table.py"),
               "--build", a.build] + (["--quick"] if a.quick else [])
        out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        if out.returncode:
            sys.exit(f"roofline.py: {' '.join(cmd)} failed")
        lines = out.stdout.splitlines()
    elif a.table:
        with open(a.table) as f:
            lines = f.read().splitlines()
    else:
        lines = sys.stdin.read().splitlines()

    model = "simple model" if a.simple else "wavefront/sub-partition model"
    print(f"Roofline: estimate (upper bound), not a measurement ({model}"
          f"{f', batch x{a.batch}' if a.batch != 1 else ''}): mma.sync at "
          f"{MMA_SYNC_FRACTION:.0%} of the {DEVICES[0][2] / 1e12:.0f} TFLOP/s "
          f"wgmma peak, {CLOCK_HZ / 1e9:.2f} GHz, {SCHEDULERS_PER_SM} warp "
          f"insts/cycle/SM, {SHARED_BYTES_PER_CYCLE} B/cycle/SM shared; "
          f"times in us.")
    print()
    print("| shape | device | CTAs (warps) | tensor | issue | shared | HBM | "
          "estimate | binds | % HBM BW | useful TFLOP/s | useful / mma FLOPs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in read_table(lines):
        for device in DEVICES:
            e = estimate(row, device, a.batch, a.simple)
            b = {k: f"{v * 1e6:.2f}" for k, v in e["bounds"].items()}
            print(f"| {row['shape']} | {e['device']} | {e['ctas']} "
                  f"({e['warps']}) | {b['tensor']} | {b['issue']} | "
                  f"{b['shared']} | {b['HBM']} | **{e['time'] * 1e6:.2f}** | "
                  f"{e['binds']} | {e['hbm_frac']:.0%} | {e['tflops']:.0f} | "
                  f"{e['mma_util']:.2f} |")


if __name__ == "__main__":
    main()
