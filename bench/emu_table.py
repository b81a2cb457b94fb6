#!/usr/bin/env python3
"""The tensor-core kernels' counters for the standard shapes, as one table.

For each shape (bf16, GQA 32/8, lower-right causal): the emulated GPU's
counters per warp per KV block (kvattn-run --target=gpu-emu --stats) and,
when ptxas is installed, registers, spills and local memory of every kernel
for sm_80 and sm_90 (ptxas -v on kvattn-compile's PTX). Counts, not speeds:
no GPU is involved (docs/benchmarks.md).

    python3 bench/emu_table.py [--build build] [--quick]
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(ROOT, "test", "Numerics", "Inputs", "attention_case.py")

# (label, attention_case.py flags, kvattn-run flags)
SHAPES = [
    ("prefill L=512, D=64", "--L 512 --S 512 --D 64 --q-offset 0", ""),
    ("prefill L=512, D=128", "--L 512 --S 512 --D 128 --q-offset 0", ""),
    ("append P=1024 L=64, D=64", "--L 64 --S 1088 --D 64 --q-offset 1024", ""),
    ("append P=1024 L=64, D=128", "--L 64 --S 1088 --D 128 --q-offset 1024",
     ""),
    ("decode S=4096, D=128", "--L 1 --S 4096 --D 128 --q-offset 4095", ""),
    ("decode S=32768, D=128", "--L 1 --S 32768 --D 128 --q-offset 32767", ""),
    ("decode S=32768, D=128, no split (split-kv=1, block-n=64)",
     "--L 1 --S 32768 --D 128 --q-offset 32767", "--split-kv=1 --block-n=64"),
    ("paged decode S=4096/2048, page 16, D=128, B=2",
     "--B 2 --L 1 --S 4096 --D 128 --q-offset 4095,2047 --kv-len 4096,2048 "
     "--page-size 16", ""),
    ("paged append P=1024 L=64, page 64, D=128",
     "--L 64 --S 1088 --D 128 --q-offset 1024 --kv-len 1088 --page-size 64",
     ""),
]
QUICK = {0, 2, 4}

# The cache write (kvattn.append kernels, bf16, Hkv = 8, D = 128), in a
# decode step of its own: (label, B, L, capacity or (pages, page size),
# positions, block table).
APPEND_SHAPES = [
    ("decode B=2", 2, 1, 4096, "4095,2047", None),
    ("append L=64 B=1", 1, 64, 1088, "1024", None),
    ("paged decode B=2, page 16", 2, 1, (512, 16), "4095,2047",
     list(range(256)) + list(range(256, 384)) + [-1] * 128),
    ("paged append L=64, page 16", 1, 64, (80, 16), "1024",
     list(reversed(range(68))) + [-1] * 12),
]

FIELDS = ["warp_insts_per_kv_block", "mma_per_kv_block",
          "ldmatrix_per_kv_block", "shared_requests_per_kv_block",
          "bank_conflicts_per_kv_block", "barriers_per_kv_block",
          "global_sector_efficiency"]


def case_cmd(flags):
    return [sys.executable, CASE, "--dtype", "bf16", "--Hq", "32", "--Hkv",
            "8", "--causal"] + flags.split()


def emu_counters(build, flags, run_flags):
    env = dict(os.environ,
               PATH=os.path.join(build, "bin") + os.pathsep +
               os.environ["PATH"],
               KVATTN_EMU_DRIVER=os.path.join(build, "lib",
                                              "libkvattn_cuda_emu.so"))
    cmd = case_cmd(flags) + ["--", "--target=gpu-emu", "--stats"] + \
        run_flags.split()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [l for l in (out.stdout + out.stderr).splitlines()
             if "emu: kernel=" in l]
    if out.returncode != 0 or not lines:
        sys.exit(f"emu_table.py: {' '.join(cmd)} failed:\n{out.stderr}")
    kernels = []
    for line in lines:
        kv = dict(re.findall(r"(\w+)=(\S+)", line))
        kernels.append(kv)
    return kernels


def append_ir(b, length, capacity, table):
    """One kvattn.append (the K cache write) as its own function."""
    h, d = 8, 128
    upd = f"tensor<{b}x{h}x{length}x{d}xbf16>"
    if table is None:
        cache = f"tensor<{b}x{h}x{capacity}x{d}xbf16>"
        extra, bt = "", ""
    else:
        pages, size = capacity
        cache = f"tensor<{pages}x{size}x{h}x{d}xbf16>"
        tt = f"tensor<{b}x{len(table) // b}xi32>"
        extra, bt = f", %bt: {tt}", f" block_table(%bt : {tt})"
    return (f"func.func @write(%kn: {upd}, %kc: {cache}, %pos: tensor<{b}xi32>"
            f"{extra}) -> {cache} {{\n"
            f"  %k = kvattn.append %kn into %kc at %pos{bt} : {upd} into "
            f"{cache}, tensor<{b}xi32>\n  return %k : {cache}\n}}\n")


def append_counters(build, b, length, capacity, pos, table):
    env = dict(os.environ,
               KVATTN_EMU_DRIVER=os.path.join(build, "lib",
                                              "libkvattn_cuda_emu.so"))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "append.mlir")
        with open(path, "w") as f:
            f.write(append_ir(b, length, capacity, table))
        cmd = [os.path.join(build, "bin", "kvattn-run"), path,
               "--target=gpu-emu", "--stats", "--input", "2=" + pos]
        if table is not None:
            cmd += ["--input", "3=" + ",".join(map(str, table))]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [l for l in (out.stdout + out.stderr).splitlines()
             if "emu: kernel=" in l]
    if out.returncode != 0 or not lines:
        sys.exit(f"emu_table.py: {' '.join(cmd)} failed:\n{out.stderr}")
    return dict(re.findall(r"(\w+)=(\S+)", lines[0]))


def ptxas_info(build, flags, chip):
    ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
    if not os.path.exists(ptxas):
        return None
    ir = subprocess.run(case_cmd(flags) + ["--ir-only"], capture_output=True,
                        text=True, check=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "case.mlir")
        with open(path, "w") as f:
            f.write(ir)
        subprocess.run([os.path.join(build, "bin", "kvattn-compile"), path,
                        "-o", os.path.join(tmp, "k"), f"--chip={chip}"],
                       capture_output=True, text=True, check=True)
        out = subprocess.run([ptxas, "-v", f"-arch={chip}",
                              os.path.join(tmp, "k.ptx"), "-o",
                              os.path.join(tmp, "k.cubin")],
                             capture_output=True, text=True, check=True)
    # Per entry, in the manifest's order (attention kernel first, then the
    # merge of a split); ptxas reports them in its own order.
    entries = re.findall(r"entry function '\w*?(\d+)'.*?Used (\d+) registers",
                         out.stderr, re.S)
    regs = [r for _, r in sorted(entries, key=lambda e: int(e[0]))]
    spills = re.findall(r"(\d+) bytes spill stores", out.stderr)
    stack = re.findall(r"(\d+) bytes stack frame", out.stderr)
    return "/".join(regs), max(map(int, spills or [0])), \
        max(map(int, stack or [0]))


# sm_90 (H100/H200) per multiprocessor: shared memory (the 227 KB a block
# may opt into plus 1 KB the driver reserves per block), registers, blocks
# and warps; registers are allocated per warp in units of 256.
SM90 = dict(smem=233472, reserved=1024, regs=65536, blocks=32, warps=64)


def occupancy(smem, regs, warps):
    """Theoretical resident warps per sm_90 multiprocessor of one kernel."""
    per_warp = -(-regs * 32 // 256) * 256
    blocks = min(SM90["blocks"], SM90["warps"] // warps,
                 SM90["regs"] // (per_warp * warps),
                 SM90["smem"] // (smem + SM90["reserved"]))
    return blocks * warps


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--quick", action="store_true")
    a = p.parse_args()
    a.build = os.path.abspath(a.build)
    print("| shape | tile | smem | kv_blocks | warp insts | mma | ldmatrix | "
          "shared req. | bank replays | barriers | sector eff. | "
          "regs sm_80 / sm_90 (spills, stack) | warps/SM sm_90 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i, (label, flags, run_flags) in enumerate(SHAPES):
        if a.quick and i not in QUICK:
            continue
        kernels = emu_counters(a.build, flags, run_flags)
        k = kernels[0]
        grid = k["grid"]
        tile = f"{k['warps_per_cta']} warps, grid {grid}"
        eff = k["global_sector_efficiency"]
        if len(kernels) > 1:
            eff += f" (merge: {kernels[1]['global_sector_efficiency']})"
        regs = []
        occ = "n/a"
        for chip in ("sm_80", "sm_90"):
            info = ptxas_info(a.build, flags, chip) if not run_flags else None
            if info:
                regs.append(f"{info[0]} ({info[1]}, {info[2]})")
            if info and chip == "sm_90":
                # The attention kernel: the first one of the manifest.
                occ = str(occupancy(int(k["smem"]),
                                    int(info[0].split("/")[0]),
                                    int(k["warps_per_cta"])))
        print(f"| {label} | {tile} | {k['smem']} | {k['kv_blocks']} | "
              f"{float(k['warp_insts_per_kv_block']):.0f} | "
              f"{float(k['mma_per_kv_block']):.0f} | "
              f"{float(k['ldmatrix_per_kv_block']):.0f} | "
              f"{float(k['shared_requests_per_kv_block']):.0f} | "
              f"{float(k['bank_conflicts_per_kv_block']):.0f} | "
              f"{float(k['barriers_per_kv_block']):.0f} | {eff} | "
              f"{' / '.join(regs) if regs else 'n/a'} | {occ} |")
        sys.stdout.flush()

    print()
    print("Cache writes (kvattn.append kernels, bf16, Hkv = 8, D = 128):")
    print()
    print("| shape | grid | warp insts | global requests | sectors | "
          "sector eff. |")
    print("|---|---|---|---|---|---|")
    for i, (label, b, length, capacity, pos, table) in \
            enumerate(APPEND_SHAPES):
        if a.quick and i > 0:
            continue
        k = append_counters(a.build, b, length, capacity, pos, table)
        print(f"| {label} | {k['grid']} | {k['warp_insts']} | "
              f"{k['global_requests']} | {k['global_sectors']} | "
              f"{k['global_sector_efficiency']} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
