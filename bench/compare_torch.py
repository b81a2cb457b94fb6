#!/usr/bin/env python3
"""kvattn against PyTorch SDPA on the same GPU, in the same run.

For cached append (L new tokens after P cached ones, lower-right causal,
bf16, GQA Hq/Hkv = 32/8) it runs every shape through

  * torch.nn.functional.scaled_dot_product_attention with
    torch.nn.attention.bias.causal_lower_right(L, S): the flash backend where
    it takes the shape, else what torch picks -- the backend that ran is read
    from the profiler's kernel names and printed;
  * kvattn: the IR compiled by the C API (libkvattn_c.so, ctypes), launched
    on the torch tensors' device pointers on torch's current stream.

It checks kvattn's output against torch's (max abs error), times both with
torch.cuda.Event (warm-up calls, then the median of --repeats, an L2 flush
before each call) and prints one table with the speed ratio, plus the
device-to-device copy bandwidth measured in the same run. See
docs/benchmarks.md. Needs a CUDA GPU, PyTorch >= 2.2 (enable_gqa from 2.5,
else K/V are expanded with repeat_interleave) and a built libkvattn_c.so.
"""

import argparse
import math
import os
import statistics
import sys

# The kvattn package of this checkout (python/kvattn), else an installed one.
sys.path.insert(1, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "python"))
import kvattn  # noqa: E402  (ctypes and NumPy, no torch)
from kvattn import capi as kvattn_capi  # noqa: E402

HQ, HKV = 32, 8
LENGTHS = [1, 8, 64, 512, 2048]
PREFIXES = [0, 4096, 32768]
HEAD_DIMS = [64, 128]


def int_list(text):
    return [int(v) for v in text.split(",") if v]


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="ratio = torch_ms / kvattn_ms: > 1 means kvattn is faster.")
    p.add_argument("--lib", help="libkvattn_c.so (default: BUILD/lib/)")
    p.add_argument("--build-dir",
                   help="kvattn build directory (default: $KVATTN_BUILD_DIR "
                        "or build/)")
    p.add_argument("--quick", action="store_true",
                   help="L in {1, 512}, P = 4096, D = 128")
    p.add_argument("--lengths", type=int_list,
                   help="new tokens L (default 1,8,64,512,2048)")
    p.add_argument("--prefixes", type=int_list,
                   help="cached tokens P (default 0,4096,32768)")
    p.add_argument("--head-dims", type=int_list,
                   help="head dims D (default 64,128)")
    p.add_argument("--batch", type=int, default=0,
                   help="batch size (default 0: sized to fill the GPU like "
                        "kvattn-bench)")
    p.add_argument("--chip", default=None,
                   help="kvattn's chip (default: the device's default, sm_90a "
                        "on an H100/H200, the wgmma kernels; sm_90 there: the "
                        "mma.sync kernels)")
    p.add_argument("--block-m", type=int, default=0,
                   help="query rows per kvattn program, for the batch size "
                        "(default 0: the compiler's choice per shape)")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--flush-mib", type=int, default=256,
                   help="MiB zeroed before each timed call (L2 flush)")
    p.add_argument("--copy-mib", type=int, default=1024,
                   help="MiB copied device-to-device for the bandwidth")
    return p.parse_args(argv)


def build_ir(b, p, l, d, elt="bf16"):
    """The IR kvattn-bench builds: one lower-right causal kvattn.attention."""
    s = p + l
    q = f"tensor<{b}x{HQ}x{l}x{d}x{elt}>"
    kv = f"tensor<{b}x{HKV}x{s}x{d}x{elt}>"
    return (f"func.func @main(%q: {q}, %k: {kv}, %v: {kv}, "
            f"%pos: tensor<{b}xi32>) -> {q} {{\n"
            f"  %o = kvattn.attention %q, %k, %v q_offset(%pos : "
            f"tensor<{b}xi32>) causal : {q}, {kv}, {kv} -> {q}\n"
            f"  return %o : {q}\n}}\n")


def allowed_pairs(p, l):
    s = p + l
    return sum(min(s, p + i + 1) for i in range(l))


def programs_per_batch(l, block_m):
    """Programs of one batch entry as the compiler tiles them (Tile.cpp):
    GQA packing for L < 64 (the query heads of a kv head in one program)
    and, with block_m = 0, the fewest 16-row warps that hold the rows."""
    group = HQ // HKV if l < 64 else 1
    rows = group * l
    if not block_m:
        block_m = next((m for m in (16, 32) if rows <= m), 64)
    return HQ // group * math.ceil(rows / block_m)


def batch_to_fill(p, l, d, sms, block_m, memory_bytes):
    """kvattn-bench's rule: >= 4 programs per SM, capped by memory (here
    with room for torch's expanded K/V, 4 x Hkv heads)."""
    programs = max(1, programs_per_batch(l, block_m))
    b = max(1, math.ceil(4 * sms / programs))
    per_batch = 2 * d * (2 * HQ * l + 2 * HKV * (p + l) * 5)
    # kvattn's kernels index with 32 bits (the manifest's index_bits): each
    # tensor below 2^31 elements.
    index_cap = ((1 << 31) - 1) // (HKV * (p + l) * d)
    return max(1, min(b, int(memory_bytes // per_batch), index_cap))


def backend_of(torch, fn):
    """The SDPA backend that ran, from the CUDA kernels one call launched."""
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        names = [e.key.lower() for e in prof.key_averages()]
    except Exception as e:  # no CUPTI, profiler disabled, ...
        return f"unknown ({type(e).__name__})"
    if any("cudnn" in n for n in names):
        return "cudnn"
    if any("flash" in n for n in names):
        return "flash"
    if any("fmha" in n or "efficient" in n or "cutlass" in n for n in names):
        return "efficient"
    return "math"


def time_ms(torch, fn, warmup, repeats, flush):
    """Median device time of fn() with CUDA events on the current stream;
    `flush` is zeroed before each call (outside the timed interval)."""
    for _ in range(warmup):
        flush.zero_()
        fn()
    events = [(torch.cuda.Event(enable_timing=True),
               torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for start, end in events:
        flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events)


def torch_attention(torch, q, k, v, l, s):
    """The best SDPA call torch offers for this shape: (fn, label).

    Tries the flash backend first (sdpa_kernel only steers the L == S case:
    causal_lower_right dispatches to flash by itself when flash takes the
    shape), with native GQA (enable_gqa) and then with K/V expanded to Hq
    heads; else the first variant that runs, as torch picks it."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right
    mask = causal_lower_right(l, s)
    expanded = {}

    def native(flash):
        def fn():
            if flash:
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    return F.scaled_dot_product_attention(
                        q, k, v, attn_mask=mask, enable_gqa=True)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                  enable_gqa=True)
        return fn

    def expand(flash):
        def fn():
            if "k" not in expanded:
                expanded["k"] = k.repeat_interleave(HQ // HKV, dim=1)
                expanded["v"] = v.repeat_interleave(HQ // HKV, dim=1)
            ke, ve = expanded["k"], expanded["v"]
            if flash:
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    return F.scaled_dot_product_attention(q, ke, ve,
                                                          attn_mask=mask)
            return F.scaled_dot_product_attention(q, ke, ve, attn_mask=mask)
        return fn

    first, notes = None, []
    for name, fn in (("gqa", native(True)), ("expand", expand(True)),
                     ("gqa", native(False)), ("expand", expand(False))):
        try:
            fn()
            torch.cuda.synchronize()
        except (RuntimeError, TypeError, ValueError) as e:
            notes.append(f"{name}: {str(e).splitlines()[0][:60]}")
            continue
        backend = backend_of(torch, fn)
        if backend == "flash" or first is None:
            first = (fn, f"{backend}/{name}", name)
        if backend == "flash":
            break
    if first is None:
        raise RuntimeError("no SDPA variant ran: " + "; ".join(notes))
    if first[2] == "gqa":
        expanded.clear()  # K/V expanded for a variant that is not used
    return first[0], first[1]


def cudnn_attention(torch, q, k, v, l, s):
    """torch's cuDNN SDPA backend (cuDNN's fused flash attention, Hopper
    kernels on an H100/H200) where it computes the same thing: L == S (no
    cached prefix), where is_causal's upper-left triangle is the lower-right
    one. K/V expanded to Hq heads outside the timing (native GQA is not
    taken by that backend everywhere). None where it does not run."""
    if l != s:
        return None
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    ke = k.repeat_interleave(HQ // HKV, dim=1)
    ve = v.repeat_interleave(HQ // HKV, dim=1)

    def fn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, ke, ve, is_causal=True)
    try:
        fn()
        torch.cuda.synchronize()
    except (RuntimeError, TypeError, ValueError):
        return None
    return fn if backend_of(torch, fn) == "cudnn" else None


def main(argv=None):
    args = parse_args(argv)
    try:
        import torch
    except ImportError:
        print("compare_torch.py: error: PyTorch is not installed "
              "(python3 -c 'import torch' fails)", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("compare_torch.py: error: torch.cuda.is_available() is False: "
              "no GPU or no driver", file=sys.stderr)
        return 1
    lengths = args.lengths or ([1, 512] if args.quick else LENGTHS)
    prefixes = args.prefixes or ([4096] if args.quick else PREFIXES)
    head_dims = args.head_dims or ([128] if args.quick else HEAD_DIMS)

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    props = torch.cuda.get_device_properties(dev)
    major, minor = torch.cuda.get_device_capability(dev)
    chip = f"sm_{major}{minor}"
    sms = props.multi_processor_count
    free, _ = torch.cuda.mem_get_info(dev)

    lib = args.lib or (kvattn_capi.default_library(args.build_dir)
                       if args.build_dir else None)
    if lib:
        os.environ["KVATTN_LIBRARY"] = lib
    rt = kvattn.Runtime(driver="cuda")
    stream = torch.cuda.current_stream(dev)
    rt.set_stream(stream.cuda_stream)
    chip = args.chip or rt.chip

    print(f"compare_torch.py: {props.name}, kvattn for {chip}, {sms} SMs, torch "
          f"{torch.__version__}; bf16, Hq/Hkv = {HQ}/{HKV}, lower-right causal")
    print(f"timing: torch.cuda.Event, median of {args.repeats} after "
          f"{args.warmup} warm-up calls, {args.flush_mib} MiB zeroed before "
          "each call (L2 flush)")
    flush = torch.empty(max(1, args.flush_mib) << 20, dtype=torch.int8,
                        device=dev)
    nbytes = args.copy_mib << 20
    src = torch.ones(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    copy_ms = time_ms(torch, lambda: dst.copy_(src), args.warmup,
                      args.repeats, flush[:1])
    copy_gbs = 2 * nbytes / (copy_ms * 1e6)
    del src, dst
    print(f"copy: device-to-device {args.copy_mib} MiB in {copy_ms:.3f} ms: "
          f"{copy_gbs:.1f} GB/s (2 x bytes / time)")
    print("ratio = torch_ms / kvattn_ms (speed): > 1 means kvattn is faster")
    print("cudnn: torch's cuDNN backend where L == S (is_causal), its time and "
          "cudnn_ms / kvattn_ms; '-' elsewhere")
    header = (f"{'B':>4} {'P':>6} {'L':>5} {'D':>4} {'torch backend':<16} "
              f"{'torch_ms':>9} {'kvattn_ms':>9} {'ratio':>6} "
              f"{'TF/s torch':>10} {'TF/s kvattn':>11} {'kvattn GB/s':>11} "
              f"{'%copy':>5} {'max_err':>8} {'cudnn_ms':>9} {'ratio':>6}")
    print(header)
    status = 0
    for d in head_dims:
        for p in prefixes:
            for l in lengths:
                s = p + l
                b = args.batch or batch_to_fill(p, l, d, sms, args.block_m,
                                                0.3 * free)
                row = f"{b:>4} {p:>6} {l:>5} {d:>4} "
                try:
                    gen = torch.Generator(device=dev).manual_seed(1)

                    def rand(*shape):
                        return (torch.rand(*shape, generator=gen, device=dev,
                                           dtype=torch.float32) - 0.5
                                ).to(torch.bfloat16)
                    q = rand(b, HQ, l, d)
                    k = rand(b, HKV, s, d)
                    v = rand(b, HKV, s, d)
                    out = torch.empty_like(q)
                    ref_fn, backend = torch_attention(torch, q, k, v, l, s)
                    ref = ref_fn()

                    # Every kernel of the manifest (a split-KV decode's
                    # merge too) with its workspaces, bound once.
                    program = kvattn.GpuProgram(build_ir(b, p, l, d),
                                                runtime=rt, chip=chip)
                    launch = program.bound_launch(
                        dict(B=b, Hq=HQ, Hkv=HKV, L=l, S=s),
                        {"query": q.data_ptr(), "key": k.data_ptr(),
                         "value": v.data_ptr(), "out": out.data_ptr()},
                        {"q_offset": [p] * b})
                    launch()
                    torch.cuda.synchronize()
                    err = (out.float() - ref.float()).abs().max().item()

                    t_torch = time_ms(torch, ref_fn, args.warmup,
                                      args.repeats, flush)
                    t_kv = time_ms(torch, launch, args.warmup,
                                   args.repeats, flush)
                    program.close()
                    cudnn_fn = cudnn_attention(torch, q, k, v, l, s)
                    t_cudnn = (time_ms(torch, cudnn_fn, args.warmup,
                                       args.repeats, flush)
                               if cudnn_fn else None)
                    cudnn_fn = None
                except (RuntimeError, kvattn_capi.KVAttnError) as e:
                    print(row + f"error: {str(e).splitlines()[0]}",
                          flush=True)
                    status = 1
                    torch.cuda.empty_cache()
                    continue
                flops = 4.0 * d * allowed_pairs(p, l) * HQ * b
                kv_gbs = 2 * 2 * b * HKV * s * d / (t_kv * 1e6)
                share = f"{100 * kv_gbs / copy_gbs:.0f}%" if l <= 8 else "-"
                print(row + f"{backend:<16} {t_torch:>9.4f} {t_kv:>9.4f} "
                      f"{t_torch / t_kv:>6.2f} {flops / (t_torch * 1e9):>10.1f} "
                      f"{flops / (t_kv * 1e9):>11.1f} {kv_gbs:>11.1f} "
                      f"{share:>5} {err:>8.2e} " +
                      (f"{t_cudnn:>9.4f} {t_cudnn / t_kv:>6.2f}" if t_cudnn
                       else f"{'-':>9} {'-':>6}"), flush=True)
                del q, k, v, out, ref, ref_fn
                torch.cuda.empty_cache()
    rt.close()
    return status


if __name__ == "__main__":
    sys.exit(main())
