#!/usr/bin/env python3
"""Compiles SGLang's Triton attention kernels ahead of time, without a GPU.

Run by fetch.py in a subprocess whose PYTHONPATH holds the pinned `triton`
package.  SGLang's two kernel files are loaded from the downloaded wheel;
their imports of torch and of SGLang's runtime helpers are answered by small
stand-ins defined here (only what module import needs: no kernel code is
replaced).  Each kernel is compiled with `triton.compile(ASTSource(...),
target=GPUTarget("cuda", CC, 32))`, with the constexprs SGLang's launcher
passes for the shape, the launcher's num_warps/num_stages, and the 16-byte
divisibility Triton's JIT would infer for pointers and strides.

    triton_aot.py SGLANG_DIR KERNEL CC OUT_PREFIX HEAD_DIM
writes OUT_PREFIX.cubin and OUT_PREFIX.json (the kernel's metadata).
"""
import importlib.util
import json
import sys
import types


class _Anything(types.ModuleType):
    """A module whose every attribute is a harmless callable / value."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name == "is_cuda":
            return lambda *a, **k: True
        if name.startswith(("is_", "_is_", "get_bool_env", "is_hip")):
            return lambda *a, **k: False
        return _Value(name)


class _Value:
    def __init__(self, name):
        self.name = name

    def __call__(self, *a, **k):
        return _Value(self.name)

    def __getattr__(self, name):
        if name == "get":
            return lambda *a, **k: False
        return _Value(name)

    def __bool__(self):
        return False


def install_stubs(cc):
    torch = _Anything("torch")
    torch.cuda = _Anything("torch.cuda")
    torch.cuda.get_device_capability = lambda *a, **k: (cc // 10, cc % 10)
    torch.version = types.SimpleNamespace(hip=None, cuda="13.0")
    torch.Tensor = type("Tensor", (), {})
    torch.dtype = type("dtype", (), {})
    sys.modules["torch"] = torch
    sys.modules["torch.cuda"] = torch.cuda
    for name in ("sglang", "sglang.srt", "sglang.kernels",
                 "sglang.kernels.ops", "sglang.kernels.ops.attention"):
        m = types.ModuleType(name)
        m.__path__ = []
        sys.modules[name] = m
    for name in ("sglang.srt.environ", "sglang.srt.utils",
                 "sglang.kernels.ops.attention.score_mod"):
        sys.modules[name] = _Anything(name)
    sys.modules["sglang.kernels.ops.attention.score_mod"].unpack_aux_tensors \
        = lambda *a, **k: (None, 0, 0, 0)


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def compile_kernel(fn, args, num_warps, num_stages, cc):
    """args: {name: ("*bf16"|"i32"|"fp32", div16) or ("constexpr", value)}."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    sig, const, attrs = {}, {}, {}
    for idx, name in enumerate(fn.arg_names):
        kind, val = args.get(name, ("constexpr", None))
        if kind == "constexpr":
            sig[name] = "constexpr"
            const[name] = val
        else:
            sig[name] = kind
            if val:
                attrs[(idx,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", cc, 32),
                          options={"num_warps": num_warps,
                                   "num_stages": num_stages})


def extend_args(d, block_m, block_n):
    p = lambda: ("*bf16", True)
    i32 = lambda div=False: ("i32", div)
    a = {n: p() for n in ("Q_Extend", "K_Extend", "V_Extend", "O_Extend",
                           "K_Buffer", "V_Buffer")}
    a.update({n: ("*i32", True) for n in ("qo_indptr", "kv_indptr",
                                          "kv_indices")})
    a.update({n: ("fp32", False) for n in ("sm_scale", "k_scale", "v_scale")})
    a["kv_group_num"] = i32()
    for n in ("stride_qbs", "stride_qh", "stride_kbs", "stride_kh",
              "stride_vbs", "stride_vh", "stride_obs", "stride_oh",
              "stride_buf_kbs", "stride_buf_kh", "stride_buf_vbs",
              "stride_buf_vh", "stride_buf_kpage", "stride_buf_ktok",
              "stride_buf_vpage", "stride_buf_vtok"):
        a[n] = i32(True)
    a["compact_batch_size"] = i32()
    for n, v in dict(SLIDING_WINDOW_SIZE=-1, logit_cap=0.0,
                     xai_temperature_len=-1, Lq=d, Lv=d, BLOCK_DMODEL=d,
                     BLOCK_DPE=0, BLOCK_DV=d, BLOCK_M=block_m, BLOCK_N=block_n,
                     BLOCK_N_PREFIX=block_n, USE_CUSTOM_MASK=False,
                     IS_CAUSAL=True, SKIP_PREFIX_CUSTOM_MASK=True,
                     STORE_LSE=False, SKIP_PREFIX=False, SKIP_EXTEND=False,
                     STORE_TRANSPOSE=False, HAS_SINK=False,
                     USE_COMPACT_TILE_GRID=False, USE_EXP2=False,
                     USE_FP8_PREFIX=False, USE_FP8_EXTEND=False, FP8_MAX=1.0,
                     IS_GFX1250=False, PAGE_SIZE=1, IDENTITY_KV_INDICES=False,
                     SCORE_MOD=None, Aux0=None, aux0_stride_t=0,
                     aux0_stride_h=0, aux0_len=0).items():
        a[n] = ("constexpr", v)
    return a


def decode_args(d, block_n, block_h, hq, group, min_block_kv):
    a = {n: ("*bf16", True) for n in ("Q", "K_Buffer", "V_Buffer")}
    a.update({n: ("*i32", True) for n in ("kv_indptr", "kv_indices",
                                          "num_kv_splits")})
    a.update({n: ("*fp32", True) for n in ("Att_Out", "Att_Lse")})
    a["sm_scale_withk"] = ("fp32", False)
    for n in ("stride_qbs", "stride_qh", "stride_buf_kbs", "stride_buf_kh",
              "stride_buf_vbs", "stride_buf_vh", "stride_buf_kpage",
              "stride_buf_ktok", "stride_buf_vpage", "stride_buf_vtok",
              "stride_mid_ob", "stride_mid_oh", "stride_mid_os"):
        a[n] = ("i32", True)
    for n, v in dict(kv_group_num=group, q_head_num=hq, BLOCK_DMODEL=d,
                     BLOCK_DPE=0, BLOCK_DV=d, BLOCK_N=block_n,
                     BLOCK_H=block_h, MIN_BLOCK_KV=min_block_kv, logit_cap=0.0,
                     xai_temperature_len=-1, Lk=d, Lv=d, HAS_MLA=False,
                     USE_PDL=False, IS_GFX1250=False, PAGE_SIZE=1,
                     SCORE_MOD=None, Aux0=None, aux0_stride_t=0,
                     aux0_stride_h=0, aux0_len=0, forced_kv_splits=0,
                     USE_FORCED=False, uneven_batch=None,
                     ROTATE_BATCH=False).items():
        a[n] = ("constexpr", v)
    return a


def main():
    sgl, kernel, cc, out, d = sys.argv[1:6]
    cc, d = int(cc), int(d)
    install_stubs(cc)
    base = sgl + "/sglang/kernels/ops/attention/"
    dec = load(base + "decode_attention.py",
               "sglang.kernels.ops.attention.decode_attention")
    if kernel == "extend":
        ext = load(base + "extend_attention.py",
                   "sglang.kernels.ops.attention.extend_attention")
        bd, _, _, bm, bn, warps = \
            ext._get_block_sizes_for_extend_attention(d, d)
        k = compile_kernel(ext._fwd_kernel, extend_args(d, bm, bn), warps, 1,
                           cc)
        meta = dict(block_m=bm, block_n=bn, num_warps=warps, num_stages=1)
    elif kernel == "decode":
        # decode_attention_fwd_grouped's stage 1 (GQA): BLOCK 32 keys,
        # BLOCK_H 16 heads, 4 warps, 2 stages (the CUDA branch).
        bh = dec._GROUPED_BLOCK_H
        k = compile_kernel(dec._fwd_grouped_kernel_stage1,
                           decode_args(d, 32, bh, 32, 4, dec._MIN_BLOCK_KV),
                           4, 2, cc)
        meta = dict(block_m=bh, block_n=32, num_warps=4, num_stages=2)
    else:
        raise SystemExit("triton_aot.py: unknown kernel " + kernel)
    with open(out + ".cubin", "wb") as f:
        f.write(k.asm["cubin"])
    meta.update(name=k.metadata.name, shared=k.metadata.shared,
                registers=getattr(k, "n_regs", None))
    with open(out + ".json", "w") as f:
        json.dump(meta, f)


if __name__ == "__main__":
    main()
