#!/usr/bin/env python3
"""Global-memory bytes of shared-prefix (cascade) attention on the emulated
GPU (docs/benchmarks.md, "Cascade attention"): SEQS decode sequences share a
prefix of P keys and each has one suffix key of its own (its new token).

  plain    one ragged launch, every sequence's cache holding the prefix
           (kv_len = P + 1): the prefix's K/V is read once per sequence;
  cascade  kvattn.cascade compiled by kvattn-to-ptx: the prefix kernel
           (all SEQS rows over the prefix as one batch: read once per KV
           head and row block), the ragged suffix kernel, and the merge
           kernel of their two f32 parts, on the device (its bytes counted).

Bytes are the emulator's counted global loads and stores (global_bytes,
summed over the kernels; cp.async included), so they are exact for the
emulated kernels; what they cost on a GPU is not measured here.

    python3 bench/cascade_emu.py [--kvattn-run build/bin/kvattn-run]
        [--P 4096] [--seqs 64] [--hq 1] [--hkv 1] [--d 64]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile


def plain_ir(seqs, p, hq, hkv, d):
    q = f"tensor<1x{hq}x{seqs}x{d}xbf16>"
    kv = f"tensor<{seqs}x{hkv}x{p + 1}x{d}xbf16>"
    idx = f"tensor<{seqs}xi32>"
    return (f"func.func @plain(%q: {q}, %k: {kv}, %v: {kv}, "
            f"%qs: tensor<{seqs + 1}xi32>, %qo: {idx}, %kl: {idx}) -> {q} {{\n"
            f"  %o = kvattn.attention %q, %k, %v q_start(%qs : "
            f"tensor<{seqs + 1}xi32>) q_offset(%qo : {idx}) kv_len(%kl : "
            f"{idx}) causal : {q}, {kv}, {kv} -> {q}\n"
            f"  return %o : {q}\n}}\n")


def cascade_ir(seqs, p, hq, hkv, d):
    q = f"tensor<1x{hq}x{seqs}x{d}xbf16>"
    pkv = f"tensor<1x{hkv}x{p}x{d}xbf16>"
    kv = f"tensor<{seqs}x{hkv}x1x{d}xbf16>"
    idx = f"tensor<{seqs}xi32>"
    return (f"func.func @cascade(%q: {q}, %pk: {pkv}, %pv: {pkv}, %k: {kv}, "
            f"%v: {kv}, %qs: tensor<{seqs + 1}xi32>, %qo: {idx}, "
            f"%kl: {idx}) -> {q} {{\n"
            f"  %o = kvattn.cascade %q, %pk, %pv, %k, %v q_start(%qs : "
            f"tensor<{seqs + 1}xi32>) q_offset(%qo : {idx}) kv_len(%kl : "
            f"{idx}) causal : {q}, {pkv}, {pkv}, {kv}, {kv} -> {q}\n"
            f"  return %o : {q}\n}}\n")


def run(tool, text, inputs):
    with tempfile.NamedTemporaryFile("w", suffix=".mlir", delete=False) as f:
        f.write(text)
        path = f.name
    try:
        args = [tool, path, "--target=gpu-emu", "--check", "--stats"]
        for n, values in inputs:
            args += ["--input", f"{n}={','.join(map(str, values))}"]
        out = subprocess.run(args, capture_output=True, text=True)
    finally:
        os.unlink(path)
    if out.returncode != 0 or "\nPASS" not in "\n" + out.stdout:
        sys.exit(f"kvattn-run failed:\n{out.stdout}\n{out.stderr}")
    kernels = re.findall(r"emu: kernel=(\S+) .*?global_bytes=(\d+)",
                         out.stdout)
    return [(k, int(b)) for k, b in kernels]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvattn-run", default=os.path.join(
        os.path.dirname(__file__), "..", "build", "bin", "kvattn-run"))
    ap.add_argument("--P", type=int, default=4096)
    ap.add_argument("--seqs", type=int, default=64)
    ap.add_argument("--hq", type=int, default=1)
    ap.add_argument("--hkv", type=int, default=1)
    ap.add_argument("--d", type=int, default=64)
    a = ap.parse_args()
    starts = list(range(a.seqs + 1))
    prefix_bytes = 2 * a.hkv * a.P * a.d * 2  # K and V, bf16
    plain = run(a.kvattn_run, plain_ir(a.seqs, a.P, a.hq, a.hkv, a.d),
                [(3, starts), (4, [a.P] * a.seqs), (5, [a.P + 1] * a.seqs)])
    cascade = run(a.kvattn_run, cascade_ir(a.seqs, a.P, a.hq, a.hkv, a.d),
                  [(5, starts), (6, [0] * a.seqs), (7, [1] * a.seqs)])
    print(f"{a.seqs} decode sequences over a shared {a.P}-token prefix, "
          f"Hq {a.hq}, Hkv {a.hkv}, D {a.d}, bf16 (prefix K+V: "
          f"{prefix_bytes} bytes)")
    for name, kernels in (("plain", plain), ("cascade", cascade)):
        total = sum(b for _, b in kernels)
        per = ", ".join(f"{k} {b}" for k, b in kernels)
        print(f"{name:8s} global bytes {total:>12d} = "
              f"{total / prefix_bytes:6.2f} x the prefix  ({per})")
    ratio = sum(b for _, b in plain) / sum(b for _, b in cascade)
    print(f"plain / cascade: {ratio:.1f}x")


if __name__ == "__main__":
    main()
