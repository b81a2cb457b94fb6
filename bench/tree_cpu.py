#!/usr/bin/env python3
"""The CPU cost of a tree-mask launch against plain rows of the same shape
(docs/benchmarks.md, "Tree masks"): a ragged batch of S_DECODE decode rows
plus one draft tree (depth 4, branching 3: 121 tokens) per tree sequence,
over caches of P keys, timed as (a) the tree launch (tree_parents), (b) the
same packed rows without the tree (ordinary causal rows: the chain the tree
would be if it were linear), (c) every draft token as its own decode row
(the same keys per row, 121x the launch's rows of cache reads). Median of
REPEAT runs after a warm-up; wall-clock on a shared machine: estimates.

    KVATTN_LIBRARY=build/lib/libkvattn_c.so PYTHONPATH=python \\
        python3 bench/tree_cpu.py [--P 2048] [--repeat 9]
"""
import argparse
import statistics
import time

import numpy as np

import kvattn
from kvattn import tree as kvattn_tree


tree = kvattn_tree.complete_tree


def ir(B, T, S, hq, hkv, d, with_tree):
    q = f"tensor<1x{hq}x{T}x{d}xf16>"
    kv = f"tensor<{B}x{hkv}x{S}x{d}xf16>"
    idx = f"tensor<{B}xi64>"
    tp = f", %tp: tensor<{T}xi64>" if with_tree else ""
    use = f" tree_parents(%tp : tensor<{T}xi64>)" if with_tree else ""
    return (f"func.func @main(%q: {q}, %k: {kv}, %v: {kv}, %qs: "
            f"tensor<{B + 1}xi64>, %qo: {idx}, %kl: {idx}{tp}) -> {q} {{\n"
            f"  %o = kvattn.attention %q, %k, %v q_start(%qs : "
            f"tensor<{B + 1}xi64>) q_offset(%qo : {idx}) kv_len(%kl : {idx})"
            f"{use} causal : {q}, {kv}, {kv} -> {q}\n  return %o : {q}\n}}\n")


def timed(prog, args, repeat):
    prog.run(*args)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        prog.run(*args)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--P", type=int, default=2048, help="cached keys")
    p.add_argument("--trees", type=int, default=2)
    p.add_argument("--decode", type=int, default=2)
    p.add_argument("--repeat", type=int, default=9)
    a = p.parse_args()
    hq, hkv, d = 8, 2, 64
    par = tree(4, 3)
    n = len(par)
    lens = [n] * a.trees + [1] * a.decode
    B, T = len(lens), sum(lens)
    S = a.P + n
    kv_len = np.array([a.P + n] * a.trees + [a.P + 1] * a.decode, np.int64)
    q_start = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    qo = kv_len - np.array(lens)
    parents = np.array(par * a.trees + [-1] * a.decode, np.int64)
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, hq, T, d)).astype(np.float16)
    k = rng.standard_normal((B, hkv, S, d)).astype(np.float16)
    v = rng.standard_normal((B, hkv, S, d)).astype(np.float16)
    with_tree = kvattn.compile(ir(B, T, S, hq, hkv, d, True))
    plain = kvattn.compile(ir(B, T, S, hq, hkv, d, False))
    t_tree = timed(with_tree, (q, k, v, q_start, qo, kv_len, parents),
                   a.repeat)
    t_plain = timed(plain, (q, k, v, q_start, qo, kv_len), a.repeat)
    # Every draft token a decode row of its own (its own cache copy).
    Bd = T
    kd = np.repeat(k, lens, axis=0)
    vd = np.repeat(v, lens, axis=0)
    qs_d = np.arange(Bd + 1, dtype=np.int64)
    kl_d = np.repeat(kv_len, lens)
    qo_d = kl_d - 1
    decode = kvattn.compile(ir(Bd, T, S, hq, hkv, d, False))
    t_decode = timed(decode, (q, kd, vd, qs_d, qo_d, kl_d), a.repeat)
    print(f"rows T = {T} ({a.trees} trees of {n}, {a.decode} decode), "
          f"P = {a.P}, Hq/Hkv = {hq}/{hkv}, D = {d}, f16")
    print(f"tree launch          {t_tree:8.2f} ms")
    print(f"same rows, no tree   {t_plain:8.2f} ms  (tree/plain "
          f"{t_tree / t_plain:.2f}x)")
    print(f"one decode row each  {t_decode:8.2f} ms  (tree/decode "
          f"{t_tree / t_decode:.2f}x)")


if __name__ == "__main__":
    main()
