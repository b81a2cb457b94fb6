#!/usr/bin/env python3
"""A/B of the GPU schedule's switches on a GPU, in one run.

Each switch of the sm_90a kernels that no GPU has timed yet is run against
the default (off, or on for an opt-in switch) on the shapes it is meant
for, with kvattn-bench
--target=gpu (CUDA events, median after an L2 flush), the two runs of a
shape back to back:

  heaviest-first      causal prefill L = S = 512 / 2048 with few programs
                      per SM (B = 1, 3, 8), where the order of the query
                      blocks decides the tail;
  ping-pong, intra-warpgroup-overlap, lazy-rescale, producer-warpgroup
                      the same prefills and an append over 4,096 keys;
  two-value-stages    on (opt-in): the appends of 64 rows (one consumer
                      warpgroup) and the hd 64 prefills, which then keep
                      two V stages and take the intra-warpgroup overlap;
  split rule          MLA decode (B = 64, 4,096 keys): the automatic split
                      (the wave-counting rule: 2 chunks at 16 heads, 1 at
                      128) against 3 and 2 chunks (the rule before chose 3
                      at 16 heads, 2 at 128).

Prints the two kvattn-bench tables of each pair and one line per shape:

  ratio <switch> <shape> default <ms> other <ms> speedup <other / default>

(the other run: the switch off, or on for two-value-stages; speedup > 1:
the default is faster). Usage:

  python3 bench/schedule_ab.py --build build-device [--chip sm_90a]
"""

import argparse
import os
import subprocess
import sys


def run(bench, args):
    """kvattn-bench's rows: {key columns: time_ms}, and its output."""
    r = subprocess.run([bench, "--target=gpu"] + args, capture_output=True,
                       text=True)
    out = r.stdout + r.stderr
    rows, header = {}, None
    for line in r.stdout.splitlines():
        words = line.split()
        if "time_ms" in words and "tile" in words:
            header = words
            continue
        if not header or len(words) != len(header) or "error:" in line:
            continue
        key = " ".join(words[:header.index("tile")])
        try:
            rows[key] = float(words[header.index("time_ms")])
        except ValueError:
            pass
    return rows, out, r.returncode


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default="build")
    p.add_argument("--chip", default="",
                   help="kvattn-bench --chip (default: the device's own)")
    p.add_argument("--repeats", default="20")
    p.add_argument("--cases", default="",
                   help="comma-separated switches to run (default: all): "
                   "heaviest-first, ping-pong, intra-warpgroup-overlap, "
                   "lazy-rescale, producer-warpgroup, two-value-stages, "
                   "split-rule-s3, split-rule-s2")
    p.add_argument("--bench-args", default="",
                   help="more kvattn-bench flags, space-separated")
    a = p.parse_args()
    bench = os.path.join(a.build, "bin", "kvattn-bench")
    common = (["--repeats=" + a.repeats] +
              (["--chip=" + a.chip] if a.chip else []) + a.bench_args.split())
    prefill = ["--prefixes=0", "--lengths=512,2048", "--head-dims=64,128"]
    append = ["--prefixes=4096", "--lengths=512", "--head-dims=64,128"]
    cases = []
    for b in ("1", "3", "8"):
        cases.append(("heaviest-first", prefill + ["--batch=" + b],
                      ["--heaviest-first=false"]))
    for switch in ("ping-pong", "intra-warpgroup-overlap", "lazy-rescale",
                   "producer-warpgroup"):
        for shapes in (prefill + ["--batch=8"], append):
            cases.append((switch, shapes, ["--" + switch + "=false"]))
    cases.append(("two-value-stages",
                  ["--prefixes=4096", "--lengths=64", "--head-dims=64,128"],
                  ["--two-value-stages"]))
    cases.append(("two-value-stages",
                  prefill[:2] + ["--head-dims=64", "--batch=8"],
                  ["--two-value-stages"]))
    # The rule before chose 3 chunks at 16 heads and 2 at 128 (now 2 and 1).
    for chunks in ("3", "2"):
        cases.append(("split-rule-s" + chunks,
                      ["--mla", "--batch=64", "--prefixes=4096"],
                      ["--split-kv=" + chunks]))
    if a.cases:
        wanted = a.cases.split(",")
        unknown = set(wanted) - {name for name, _, _ in cases}
        if unknown:
            p.error("unknown case(s): " + ", ".join(sorted(unknown)))
        cases = [c for c in cases if c[0] in wanted]
    status = 0
    for name, shapes, other_flags in cases:
        print("==", name, " ".join(shapes), "| other:", " ".join(other_flags),
              flush=True)
        base, base_out, rc1 = run(bench, common + shapes)
        other, other_out, rc2 = run(bench, common + shapes + other_flags)
        print(base_out.rstrip())
        print("-- other")
        print(other_out.rstrip())
        status |= rc1 | rc2
        for key, ms in base.items():
            if key in other and ms > 0:
                print("ratio %-18s %-28s default %8.4f other %8.4f speedup %.3f"
                      % (name, key, ms, other[key], other[key] / ms),
                      flush=True)
    return 1 if status else 0


if __name__ == "__main__":
    sys.exit(main())
