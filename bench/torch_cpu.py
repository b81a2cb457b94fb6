#!/usr/bin/env python3
"""kvattn.torch on the CPU against the C API and torch's own SDPA, in the
same run, on the same tensors and threads.

Prints two tables (docs/benchmarks.md, "kvattn.torch on the CPU"):

  1. per-call overhead: the median time of torch.ops.kvattn.attention (via
     kvattn.torch.attention: argument checks, the dispatcher, DLPack, the
     program cache, kvattn_cpu_run) against a bare ctypes call of
     kvattn_cpu_run on the same compiled program and buffers, on a shape
     whose attention costs next to nothing (B = Hq = Hkv = L = 1, S = 16,
     D = 16): the difference is what the torch op adds per call;
  2. decode and append steps (f32, GQA Hq/Hkv = 32/8, D = 128, lower-right
     causal over P cached tokens): the torch op, the bare C API call, and
     torch.nn.functional.scaled_dot_product_attention with a lower-right
     bias (torch.nn.attention.bias.causal_lower_right, enable_gqa), with the
     speed ratio sdpa_ms / kvattn_ms (> 1: kvattn faster) and the max abs
     difference of the outputs;
  3. the serving plan (kvattn.torch.Plan, torch.ops.kvattn.plan_run, its
     CPU path) on a paged cache (page_size 16, the pages of each sequence
     scattered over the pool): the per-step overhead of the op over a bare
     kvattn_cpu_run of the plan's program on the same buffers (the tiny
     shape of table 1), the part of it that is the run's host checks (what
     the device path pays per step in Python before kvattn_plan_run), and
     decode steps on the shapes of table 2 against the bare C API call and
     SDPA with a lower-right bias over the same cache made contiguous;
  4. the cache writes of a decode step: kt.append of one token against
     torch writing the same rows (a slice copy_), and a paged plan step
     with its appends against the step without them and SDPA.

Wall-clock medians of --repeats calls after --warmup; both libraries use
--threads threads (torch.set_num_threads; kvattn's OpenMP grid). These are
CPU measurements of this machine, not estimates. Needs the PyTorch
environment of scripts/setup.sh (build/torch-venv/bin/python) and a built
libkvattn_c.so.
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(1, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "python"))


def median_ms(fn, warmup, repeats):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def bare_capi_call(kt, out, q, k, v, qo, kv, **attrs):
    """A zero-argument function calling kvattn_cpu_run on the program the
    torch op uses, with the host tensors built once."""
    from kvattn import capi
    B, Hq, L, D = q.shape
    Hkv = k.shape[1]
    key = kt._signature("f32", (B, Hq, Hkv, L, k.shape[2], D, v.shape[3]),
                        True, 0, 0.0, None, None, "cpu")
    program = kt._programs[key]
    keep = []
    inputs = [kt._host_tensor(n, t, keep)[0] for n, t in
              (("q", q), ("k", k), ("v", v), ("qo", qo), ("kv", kv))]
    array = (capi.HostTensor * len(inputs))(*inputs)
    result = kt._host_tensor("out", out, keep)[0]
    error = capi.ctypes.c_void_p()
    run = program.api.lib.kvattn_cpu_run
    handle, byref = program.handle, capi.ctypes.byref

    def call():
        if run(handle, array, len(inputs), byref(result), 1, byref(error)):
            raise RuntimeError(program.api._take(error.value))
    call.keep = (keep, array, result)
    return call


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--quick", action="store_true",
                   help="small shapes, few repeats (a smoke run)")
    args = p.parse_args(argv)

    import torch
    import torch.nn.functional as F
    from torch.nn.attention.bias import causal_lower_right

    import kvattn.torch as kt

    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    repeats = 3 if args.quick else args.repeats
    warmup = 1 if args.quick else args.warmup
    torch.manual_seed(0)

    print(f"kvattn.torch on the CPU: {args.threads} thread(s), median of "
          f"{repeats} calls after {warmup}; torch {torch.__version__}")
    print()
    print("1. per-call overhead (B = Hq = Hkv = L = 1, S = 16, D = 16, f32)")
    q, k, v = (torch.randn(1, 1, n, 16) for n in (1, 16, 16))
    out = torch.empty(1, 1, 1, 16)
    qo, kv = torch.tensor([15]), torch.tensor([16])
    kt.attention(q, k, v, out=out)  # compiles the program
    bare = bare_capi_call(kt, out, q, k, v, qo, kv)
    n = 20 if args.quick else 2000
    op_ms = median_ms(lambda: kt.attention(q, k, v, out=out), warmup * 10,
                      n) * 1e3
    capi_ms = median_ms(bare, warmup * 10, n) * 1e3
    print(f"   {'torch op (kvattn.torch.attention, out=)':44s} {op_ms:9.1f} us")
    print(f"   {'bare C API call (kvattn_cpu_run, ctypes)':44s} "
          f"{capi_ms:9.1f} us")
    print(f"   {'overhead of the torch op':44s} {op_ms - capi_ms:9.1f} us")

    print()
    hq, hkv, d = (8, 2, 64) if args.quick else (32, 8, 128)
    print(f"2. steps (f32, B = 1, Hq/Hkv = {hq}/{hkv}, D = {d}, lower-right "
          "causal over P cached tokens)")
    shapes = ([(1, 128), (8, 256)] if args.quick else
              [(1, 512), (1, 4096), (16, 4096), (64, 4096), (512, 512)])
    head = (f"   {'L':>4} {'P':>5} {'torch op ms':>12} {'C API ms':>10} "
            f"{'SDPA ms':>10} {'SDPA/op':>8} {'max |diff|':>11}")
    print(head)
    for L, P in shapes:
        S = P + L
        Hq, Hkv, D = hq, hkv, d
        q = torch.randn(1, Hq, L, D)
        k, v = torch.randn(1, Hkv, S, D), torch.randn(1, Hkv, S, D)
        out = torch.empty(1, Hq, L, D)
        qo, kv = torch.tensor([P]), torch.tensor([S])
        kt.attention(q, k, v, out=out)
        bare = bare_capi_call(kt, out, q, k, v, qo, kv)
        bias = causal_lower_right(L, S)
        op = median_ms(lambda: kt.attention(q, k, v, out=out), warmup,
                       repeats)
        capi_ms = median_ms(bare, warmup, repeats)
        sdpa = median_ms(lambda: F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias, enable_gqa=True), warmup, repeats)
        diff = (kt.attention(q, k, v) - F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias, enable_gqa=True)).abs().max().item()
        print(f"   {L:>4} {P:>5} {op:12.3f} {capi_ms:10.3f} {sdpa:10.3f} "
              f"{sdpa / op:8.2f} {diff:11.2e}")
    print()
    print("SDPA/op > 1: the kvattn torch op is faster than torch's SDPA with "
          "a lower-right bias on these shapes.")
    print()
    plan_tables(kt, torch, F, causal_lower_right, args.quick, warmup,
                repeats)
    print()
    append_tables(kt, torch, F, args.quick, warmup, repeats)


def bare_plan_call(plan, tensors):
    """kvattn_cpu_run on a CPU plan's program with the host tensors built
    once (the plan's own argument order)."""
    from kvattn import capi
    from kvattn.torch import serving
    keep = []
    names = ["query", "key", "value", "q_offset", "kv_len", "block_table"]
    inputs = [serving._host_tensor(tensors[n], keep) for n in names]
    array = (capi.HostTensor * len(inputs))(*inputs)
    result = serving._host_tensor(tensors["out"], keep)
    error = capi.ctypes.c_void_p()
    run = plan.program.api.lib.kvattn_cpu_run
    handle, byref = plan.program.handle, capi.ctypes.byref

    def call():
        if run(handle, array, len(inputs), byref(result), 1, byref(error)):
            raise RuntimeError(plan.program.api._take(error.value))
    call.keep = (keep, array, result)
    return call


def paged_step(torch, Hq, Hkv, D, P, L, page=16):
    """A paged decode/append step over P cached tokens: the pool holds the
    sequence's pages in reverse order between free pages."""
    S = P + L
    pages = (S + page - 1) // page
    pool = 2 * pages + 1
    ids = list(range(pool - 1, 0, -2))[:pages]
    k = torch.randn(1, Hkv, pages * page, 128 if D is None else D)
    v = torch.randn_like(k)
    kp = torch.zeros(pool, page, Hkv, k.shape[-1])
    vp = torch.zeros_like(kp)
    for slot, pid in enumerate(ids):
        kp[pid] = k[0, :, slot * page:(slot + 1) * page].transpose(0, 1)
        vp[pid] = v[0, :, slot * page:(slot + 1) * page].transpose(0, 1)
    i32 = torch.int32
    t = dict(query=torch.randn(1, Hq, L, k.shape[-1]), key=kp, value=vp,
             q_offset=torch.tensor([P], dtype=i32),
             kv_len=torch.tensor([S], dtype=i32),
             block_table=torch.tensor([ids], dtype=i32),
             out=torch.empty(1, Hq, L, k.shape[-1]))
    return t, k[:, :, :S].contiguous(), v[:, :, :S].contiguous()


def plan_tables(kt, torch, F, causal_lower_right, quick, warmup, repeats):
    print("3. serving plan (kvattn.torch.Plan -> torch.ops.kvattn.plan_run, "
          "CPU path; paged, page_size 16)")
    plan = kt.Plan(dtype=torch.float32, num_query_heads=1, num_kv_heads=1,
                   head_dim=16, page_size=16)
    t, _, _ = paged_step(torch, 1, 1, 16, 15, 1)
    run = lambda: plan.run(t["query"], t["key"], t["value"],  # noqa: E731
                           t["q_offset"], t["kv_len"],
                           block_table=t["block_table"], out=t["out"])
    run()
    bare = bare_plan_call(plan, t)
    n = 20 if quick else 2000
    op_us = median_ms(run, warmup * 10, n) * 1e3
    capi_us = median_ms(bare, warmup * 10, n) * 1e3
    check_us = median_ms(lambda: plan._check(t), warmup * 10, n) * 1e3
    print("   per step, B = Hq = Hkv = L = 1, D = 16, 16 tokens (one page):")
    print(f"   {'plan op (Plan.run, out=)':44s} {op_us:9.1f} us")
    print(f"   {'bare C API call (kvattn_cpu_run, ctypes)':44s} "
          f"{capi_us:9.1f} us")
    print(f"   {'overhead of the plan op':44s} {op_us - capi_us:9.1f} us")
    print(f"   {'  of which the host checks (Plan._check)':44s} {check_us:9.1f} us")
    plan.close()
    hq, hkv, d = (8, 2, 64) if quick else (32, 8, 128)
    shapes = ([(1, 128), (8, 256)] if quick else
              [(1, 512), (1, 4096), (16, 4096)])
    plan = kt.Plan(dtype=torch.float32, num_query_heads=hq,
                   num_kv_heads=hkv, head_dim=d, page_size=16)
    print(f"   steps (f32, B = 1, Hq/Hkv = {hq}/{hkv}, D = {d}):")
    print(f"   {'L':>4} {'P':>5} {'plan op ms':>12} {'C API ms':>10} "
          f"{'SDPA ms':>10} {'SDPA/op':>8} {'max |diff|':>11}")
    for L, P in shapes:
        t, k, v = paged_step(torch, hq, hkv, d, P, L)
        q = t["query"]
        run = lambda: plan.run(q, t["key"], t["value"],  # noqa: E731
                               t["q_offset"], t["kv_len"],
                               block_table=t["block_table"], out=t["out"])
        run()
        bare = bare_plan_call(plan, t)
        bias = causal_lower_right(L, P + L)
        op = median_ms(run, warmup, repeats)
        capi_ms = median_ms(bare, warmup, repeats)
        sdpa = median_ms(lambda: F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias, enable_gqa=True), warmup, repeats)
        run()
        diff = (t["out"] - F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias, enable_gqa=True)).abs().max().item()
        print(f"   {L:>4} {P:>5} {op:12.3f} {capi_ms:10.3f} {sdpa:10.3f} "
              f"{sdpa / op:8.2f} {diff:11.2e}")
    plan.close()


def append_tables(kt, torch, F, quick, warmup, repeats):
    """Table 4: the cache writes of a decode step. kt.append of one token
    against torch writing the same rows (a slice copy_), and a paged plan
    step with its appends (append=True: K and V written, then attention)
    against the same plan step without them and torch's SDPA over the
    written caches."""
    print("4. cache writes (f32, B = 1, one new token per step)")
    hkv, hq, d = (2, 8, 64) if quick else (8, 32, 128)
    sizes = [256, 1024] if quick else [4096, 16384]
    print(f"   kt.append into [1, {hkv}, S, {d}] against "
          "cache[:, :, p:p + 1].copy_(update):")
    print(f"   {'S':>6} {'MB':>6} {'kt.append ms':>13} {'torch ms':>9} "
          f"{'torch/op':>9}")
    for S in sizes:
        cache = torch.randn(1, hkv, S, d)
        update = torch.randn(1, hkv, 1, d)
        want = cache.clone()
        want[:, :, S - 1:S] = update
        op = median_ms(lambda: kt.append(cache, update, S - 1), warmup,
                       repeats)
        assert torch.equal(cache, want), "kt.append wrote other rows"
        ref = median_ms(lambda: cache[:, :, S - 1:S].copy_(update), warmup,
                        repeats)
        print(f"   {S:>6} {cache.numel() * 4 / 1e6:6.1f} {op:13.3f} "
              f"{ref:9.4f} {ref / op:9.3f}")
    print(f"   paged plan steps (Hq/Hkv = {hq}/{hkv}, D = {d}, page 16): "
          "with the appends, without, and SDPA over the written caches")
    print(f"   {'P':>6} {'append ms':>10} {'plain ms':>9} {'SDPA ms':>8} "
          f"{'plain/append':>13} {'SDPA/append':>12} {'max |diff|':>11}")
    plain = kt.Plan(dtype=torch.float32, num_query_heads=hq,
                    num_kv_heads=hkv, head_dim=d, page_size=16)
    with_append = kt.Plan(dtype=torch.float32, num_query_heads=hq,
                          num_kv_heads=hkv, head_dim=d, page_size=16,
                          append=True)
    for P in sizes:
        t, k, v = paged_step(torch, hq, hkv, d, P, 1)
        new_k, new_v = k[:, :, P:P + 1].clone(), v[:, :, P:P + 1].clone()
        step = lambda: with_append.run(  # noqa: E731
            t["query"], t["key"], t["value"], t["q_offset"], t["kv_len"],
            block_table=t["block_table"], update_k=new_k, update_v=new_v,
            out=t["out"])
        bare = lambda: plain.run(  # noqa: E731
            t["query"], t["key"], t["value"], t["q_offset"], t["kv_len"],
            block_table=t["block_table"], out=t["out"])
        append_ms = median_ms(step, warmup, repeats)
        plain_ms = median_ms(bare, warmup, repeats)
        sdpa = median_ms(lambda: F.scaled_dot_product_attention(
            t["query"], k, v, enable_gqa=True), warmup, repeats)
        step()
        diff = (t["out"] - F.scaled_dot_product_attention(
            t["query"], k, v, enable_gqa=True)).abs().max().item()
        print(f"   {P:>6} {append_ms:10.3f} {plain_ms:9.3f} {sdpa:8.3f} "
              f"{plain_ms / append_ms:13.2f} {sdpa / append_ms:12.2f} "
              f"{diff:11.2e}")
    plain.close()
    with_append.close()


if __name__ == "__main__":
    main()
