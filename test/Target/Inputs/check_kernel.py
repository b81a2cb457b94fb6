#!/usr/bin/env python3
"""Compiles one attention case to PTX and checks the kernel.

    check_kernel.py --kvattn-compile BIN --ptxas BIN --case SCRIPT
        --chip sm_80 [--chip sm_90] [kvattn-compile options] -- [case flags]

1. builds the case IR with test/Numerics/Inputs/attention_case.py --ir-only;
2. kvattn-compile writes NAME.ptx and NAME.json;
3. the manifest is checked against each kernel's real parameter list in
   the PTX (.entry name, count, .u64 for every parameter, in order);
4. ptxas -v assembles the PTX for every --chip and must report 0 bytes of
   spill stores and loads for every kernel.
The manifest line names the kernel's tile (block-m x block-n, warps) where
the manifest has one. Prints one line per kernel and chip: registers and spills ("sm_80: ..." for
a single kernel, "sm_80 NAME: ..." when a split adds the merge kernel), then
the stack frame (ptxas "bytes stack frame": local memory, spilled or not).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile


def main():
    argv = sys.argv[1:]
    case = []
    if "--" in argv:
        i = argv.index("--")
        argv, case = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser()
    p.add_argument("--kvattn-compile", required=True)
    p.add_argument("--ptxas", required=True)
    p.add_argument("--case", required=True)
    p.add_argument("--chip", action="append", required=True)
    p.add_argument("--block-m")
    p.add_argument("--block-n")
    p.add_argument("--num-warps")
    p.add_argument("--split-kv")
    # The GPU schedule switches, passed on (kvattn-compile --help).
    p.add_argument("--schedule", action="append", default=[],
                   help="a kvattn-compile schedule flag, e.g. "
                   "--schedule=--two-value-stages")
    a = p.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        ir = subprocess.run([sys.executable, a.case, "--ir-only"] + case,
                            check=True, capture_output=True, text=True).stdout
        mlir = os.path.join(tmp, "case.mlir")
        open(mlir, "w").write(ir)
        out = os.path.join(tmp, "kernel")
        cmd = [a.kvattn_compile, mlir, "-o", out, "--chip", a.chip[0]]
        for opt in ("block_m", "block_n", "num_warps", "split_kv"):
            if getattr(a, opt):
                cmd += ["--" + opt.replace("_", "-"), getattr(a, opt)]
        cmd += a.schedule
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        ptx = open(out + ".ptx").read()
        manifest = json.load(open(out + ".json"))

        # The manifest against the PTX entry.
        assert manifest["format"] == "kvattn-launch-manifest", manifest
        # (Version 2: a run-time split, dynamic shapes; docs/kernel-abi.md.)
        assert manifest["version"] in (1, 2), manifest
        kernels = manifest["kernels"]
        entries = list(re.finditer(r"\.entry\s+(\w+)\s*\((.*?)\)", ptx, re.S))
        if len(entries) != len(kernels):
            sys.exit(f"manifest has {len(kernels)} kernels, the PTX "
                     f"{len(entries)} entries")
        for kernel, m in zip(kernels, entries):
            assert m.group(1) == kernel["name"], (m.group(1), kernel["name"])
            # ".param .u64 .ptr .align 1 NAME" for pointers, ".param .u64
            # NAME" for scalars.
            ptx_params = re.findall(
                r"\.param\s+\.(\w+)((?:\s+\.ptr)?)[^,]*?(\w+)\s*(?:,|$)",
                m.group(2).strip())
            if len(ptx_params) != len(kernel["params"]):
                sys.exit(f"{kernel['name']}: manifest has "
                         f"{len(kernel['params'])} params, the PTX entry "
                         f"{len(ptx_params)}")
            for i, ((ty, ptr, name), param) in enumerate(
                    zip(ptx_params, kernel["params"])):
                assert param["index"] == i, param
                assert name.endswith(f"_param_{i}"), (name, i)
                if ty != "u64":
                    sys.exit(f"param {i} ({param['name']}): PTX .{ty}, "
                             f"manifest {param['type']}")
                # (tensor_maps: the address of the encoded maps, a pointer.)
                if bool(ptr.strip()) != (param["kind"] in ("pointer",
                                                            "tensor_maps")):
                    sys.exit(f"param {i} ({param['name']}): the PTX says "
                             f"{'pointer' if ptr.strip() else 'scalar'}, the "
                             f"manifest {param['kind']}")
            tile = kernel.get("tile")
            print(f"manifest: {kernel['name']} {len(ptx_params)} params match "
                  f"the PTX entry; block {kernel['block']['x']}, dynamic smem "
                  f"{kernel['dynamic_shared_memory_bytes']}" +
                  (f"; tile {tile['block_m']}x{tile['block_n']} w"
                   f"{tile['num_warps']}" if tile else ""))

        for chip in a.chip:
            r = subprocess.run([a.ptxas, "-arch=" + chip, "-v",
                                out + ".ptx", "-o", os.devnull],
                               capture_output=True, text=True)
            if r.returncode != 0:
                sys.stderr.write(r.stderr)
                sys.exit(f"ptxas -arch={chip} failed")
            # ptxas -v reports each function: its spills, then its
            # registers.
            info = r.stderr
            # A wgmma pipeline ptxas had to serialize (an accumulator
            # touched in flight, a fence missing, too few registers) is a
            # kernel bug: fail with ptxas's words.
            loss = [line for line in info.splitlines()
                    if "Potential Performance Loss" in line]
            if loss:
                sys.stderr.write("\n".join(loss) + "\n")
                sys.exit(f"ptxas -arch={chip}: wgmma.mma_async serialized")
            spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes "
                                r"spill loads", info)
            regs = re.findall(r"Used (\d+) registers", info)
            stacks = re.findall(r"(\d+) bytes stack frame", info)
            funcs = re.findall(r"Compiling entry function '(\w+)'", info)
            assert len(spills) == len(regs) == len(stacks) == len(funcs) == \
                len(kernels), info
            report = dict(zip(funcs, zip(spills, regs, stacks)))
            for kernel in kernels:  # in manifest order
                func = kernel["name"]
                (stores, loads), reg, stack = report[func]
                label = chip if len(kernels) == 1 else f"{chip} {func}"
                print(f"{label}: {reg} registers, {stores} bytes spill "
                      f"stores, {loads} bytes spill loads, {stack} bytes "
                      f"stack frame")
    return 0


if __name__ == "__main__":
    sys.exit(main())
