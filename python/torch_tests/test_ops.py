"""kvattn.torch's ops on the CPU (kvattn's JIT CPU path) against a float64
attention written with torch; run by lit (test/python/torch.test) with the
PyTorch environment of scripts/setup.sh. Tolerances: f32 1e-5 absolute
(kvattn accumulates in f32, the reference in f64; values are O(1)); bf16
inputs and outputs 2e-2 absolute (bf16 keeps 8 bits of mantissa: one
rounding of an O(1) output is up to 4e-3, and the f32 reference sees the
same rounded inputs)."""

import math

import pytest
import torch

import kvattn
import kvattn.torch as kt
from kvattn._device import host_view

TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}


def reference(q, k, v, q_offset, kv_len, causal=True, window=0, softcap=0.0,
              scale=None, sinks=None, alibi_slopes=None, window_right=None):
    """float64 attention over [B, H, S, D] tensors with explicit positions:
    row i of batch b at q_offset[b] + i; keys j < kv_len[b] valid. ALiBi
    adds -slope[h] * |qp - kp| to the scores; with sinks, the row's
    denominator holds exp(sinks[h]) too (no value)."""
    q, k, v = (t.double() for t in (q, k, v))
    B, Hq, L, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    scale = 1 / math.sqrt(D) if scale is None else scale
    out = torch.zeros(B, Hq, L, v.shape[3], dtype=torch.float64)
    for b in range(B):
        kk = k[b].repeat_interleave(Hq // Hkv, 0)
        vv = v[b].repeat_interleave(Hq // Hkv, 0)
        s = q[b] @ kk.transpose(-1, -2) * scale
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        qp = int(q_offset[b]) + torch.arange(L)[:, None]
        kp = torch.arange(S)[None, :]
        if alibi_slopes is not None:
            s = s - alibi_slopes.double()[:, None, None] * \
                (qp - kp).abs().double()
        allowed = kp < int(kv_len[b])
        if causal:
            allowed = allowed & (kp <= qp)
        if window:
            allowed = allowed & (qp - kp < window)
        if window_right is not None:
            allowed = allowed & (kp - qp <= window_right)
        s = s.masked_fill(~allowed, -math.inf)
        if sinks is not None:
            z = sinks.double()[:, None, None].expand(Hq, L, 1)
            p = torch.softmax(torch.cat([s, z], -1), -1)[..., :-1]
        else:
            p = torch.softmax(s, -1).nan_to_num(0.0)
        out[b] = p @ vv
    return out


def make(B=2, Hq=8, Hkv=2, L=3, S=11, D=16, Dv=None, dtype=torch.float32,
         seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hq, L, D, generator=g).to(dtype)
    k = torch.randn(B, Hkv, S, D, generator=g).to(dtype)
    v = torch.randn(B, Hkv, S, Dv or D, generator=g).to(dtype)
    return q, k, v


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16,
                                   torch.float16])
def test_attention_lower_right_gqa(dtype):
    q, k, v = make(dtype=dtype)
    kv_len = torch.tensor([11, 7])
    out = kt.attention(q, k, v, kv_len=kv_len)
    assert out.dtype == dtype and out.shape == (2, 8, 3, 16)
    want = reference(q, k, v, kv_len - 3, kv_len)
    assert (out.double() - want).abs().max() < TOL[dtype]
    # A misaligned (upper-left) mask gives another answer: the test can
    # fail.
    wrong = reference(q, k, v, [0, 0], kv_len)
    assert (out.double() - wrong).abs().max() > 0.1


def test_explicit_offsets_window_softcap_scale_dv():
    q, k, v = make(L=4, S=13, D=16, Dv=8, seed=1)
    out = kt.attention(q, k, v, q_offset=[5, 9], kv_len=[9, 13], window=4,
                       softcap=2.5, scale=0.3)
    want = reference(q, k, v, [5, 9], [9, 13], window=4, softcap=2.5,
                     scale=0.3)
    assert out.shape == (2, 8, 4, 8)
    assert (out.double() - want).abs().max() < 1e-5
    nowin = reference(q, k, v, [5, 9], [9, 13], softcap=2.5, scale=0.3)
    assert (out.double() - nowin).abs().max() > 0.05


def test_window_size_as_flash_attention():
    """window_size = (left, right), FlashAttention's: a two-sided window
    around each query position (not causal), a right bound alone, and the
    causal (left, 0); f32 against the float64 reference, each far from the
    answer without its bound. torch.compile sees the op's window_right."""
    q, k, v = make(L=4, S=13, D=16, seed=3)
    kw = dict(q_offset=[5, 2], kv_len=[12, 13])
    out = kt.attention(q, k, v, causal=False, window_size=(2, 3), **kw)
    want = reference(q, k, v, [5, 2], [12, 13], causal=False, window=3,
                     window_right=3)
    assert (out.double() - want).abs().max() < 1e-5
    left_only = reference(q, k, v, [5, 2], [12, 13], causal=False, window=3,
                          window_right=100)
    assert (out.double() - left_only).abs().max() > 0.05
    out = kt.attention(q, k, v, causal=False, window_size=(-1, 1), **kw)
    want = reference(q, k, v, [5, 2], [12, 13], causal=False,
                     window_right=1)
    assert (out.double() - want).abs().max() < 1e-5
    out = kt.attention(q, k, v, window_size=(3, 0), **kw)
    want = reference(q, k, v, [5, 2], [12, 13], window=4)
    assert (out.double() - want).abs().max() < 1e-5
    f = torch.compile(lambda q, k, v: kt.attention(
        q, k, v, causal=False, window_size=(2, 3), **kw), fullgraph=True)
    want = reference(q, k, v, [5, 2], [12, 13], causal=False, window=3,
                     window_right=3)
    assert (f(q, k, v).double() - want).abs().max() < 1e-5


@pytest.mark.parametrize("kw, message", [
    (dict(window_size=(2, 3)), r"window_size = \(2, 3\) with causal=True"),
    (dict(causal=False, window_size=(2, -1)),
     r"window_size = \(2, -1\) without causal"),
    (dict(window=4, window_size=(3, 0)), r"give window or window_size"),
    (dict(window_size=(2,)), r"window_size must be \(left, right\)"),
    (dict(causal=False, window_size=(-2, 1)), r"window_size\[0\]"),
])
def test_window_size_misuse(kw, message):
    q, k, v = make(seed=4)
    with pytest.raises(kvattn.KVAttnError, match=message):
        kt.attention(q, k, v, **kw)


def test_not_causal_and_all_masked_row():
    q, k, v = make(seed=2)
    out = kt.attention(q, k, v, causal=False, kv_len=[5, 11])
    want = reference(q, k, v, [0, 0], [5, 11], causal=False)
    assert (out.double() - want).abs().max() < 1e-5
    # Row 0 of batch 0 at position -1: no key allowed -> 0.
    out = kt.attention(q, k, v, q_offset=[0, 2], kv_len=[5, 11])
    want = reference(q, k, v, [0, 2], [5, 11])
    assert (out.double() - want).abs().max() < 1e-5


def test_boolean_mask():
    q, k, v = make(seed=9)
    g = torch.Generator().manual_seed(3)
    mask = torch.rand(2, 1, 3, 11, generator=g) > 0.3
    mask[..., 0] = True
    out = kt.attention(q, k, v, mask=mask, causal=False)
    qd, kd, vd = (t.double() for t in (q, k, v))
    s = qd @ kd.repeat_interleave(4, 1).transpose(-1, -2) / 4.0
    p = torch.softmax(s.masked_fill(~mask, -math.inf), -1)
    want = p @ vd.repeat_interleave(4, 1)
    assert (out.double() - want).abs().max() < 1e-5
    # The mask and the positions together (per-head mask, causal).
    mask_h = torch.rand(2, 8, 3, 11, generator=g) > 0.3
    out = kt.attention(q, k, v, mask=mask_h, kv_len=[11, 9])
    s = s.masked_fill(~mask_h, -math.inf)
    qp = torch.tensor([8, 6])[:, None, None, None] + \
        torch.arange(3)[None, None, :, None]
    kp = torch.arange(11)[None, None, None, :]
    s = s.masked_fill((kp > qp) | (kp >= torch.tensor([11, 9])[
        :, None, None, None]), -math.inf)
    want = torch.softmax(s, -1).nan_to_num(0.0) @ vd.repeat_interleave(4, 1)
    assert (out.double() - want).abs().max() < 1e-5
    with pytest.raises(kvattn.KVAttnError, match="mask has shape"):
        kt.attention(q, k, v, mask=mask[..., :5])
    with pytest.raises(kvattn.KVAttnError, match="mask has dtype"):
        kt.attention(q, k, v, mask=mask.float())


def test_bshd_layout_by_strides():
    q, k, v = make(seed=3)
    qs, ks, vs = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    out = kt.attention(qs, ks, vs, kv_len=[11, 7], layout="bshd")
    assert out.shape == (2, 3, 8, 16)
    ref = kt.attention(q, k, v, kv_len=[11, 7])
    assert torch.equal(out.transpose(1, 2), ref)
    # A [B, H, S, D] view of [B, S, H, D] memory (strides, no copy) is the
    # same attention.
    view = kt.attention(qs.transpose(1, 2), ks.transpose(1, 2),
                        vs.transpose(1, 2), kv_len=[11, 7])
    assert torch.equal(view, ref)


def test_out_is_written_in_place_zero_copy_bf16():
    q, k, v = make(dtype=torch.bfloat16, seed=4)
    out = torch.full((2, 8, 3, 16), float("nan"), dtype=torch.bfloat16)
    ptr = out.data_ptr()
    got = kt.attention(q, k, v, out=out)
    assert got is out and out.data_ptr() == ptr
    assert not out.isnan().any()
    assert torch.equal(out, kt.attention(q, k, v))
    # DLPack reads a bf16 tensor's own memory: the same address.
    assert host_view(q).ptr == q.data_ptr() and host_view(q).dtype == "bf16"
    # A strided out (a [B, S, H, D] buffer seen as [B, H, S, D]) is filled.
    buf = torch.zeros(2, 3, 8, 16, dtype=torch.bfloat16)
    kt.attention(q, k, v, out=buf.transpose(1, 2))
    assert torch.equal(buf.transpose(1, 2), out)


def test_program_cache_per_signature():
    kt.clear_program_cache()
    for L, S, B in ((3, 11, 2), (1, 12, 2), (5, 20, 1), (1, 21, 1)):
        q, k, v = make(B=B, L=L, S=S, seed=5)
        kt.attention(q, k, v)
    info = kt.program_cache_info()
    assert info == {"hits": 3, "misses": 1, "size": 1}
    q, k, v = make(seed=5)
    kt.attention(q, k, v, window=2)  # another signature
    assert kt.program_cache_info()["size"] == 2


def test_append_in_place_and_successive_appends_match_a_full_forward():
    """Chunks 3+2+3, 1+7, 5+1+2 appended to a growing cache: each chunk's
    rows equal the same rows of one full forward over 8 tokens."""
    B, Hq, Hkv, D, S = 2, 8, 2, 16, 12
    q, k, v = make(B=B, Hq=Hq, Hkv=Hkv, L=8, S=8, D=D, seed=6)
    full = kt.attention(q, k, v)  # prefill: q_offset = 0
    for chunks in ((3, 2, 3), (1, 7), (5, 1, 2)):
        kc = torch.full((B, Hkv, S, D), float("nan"))
        vc = torch.full((B, Hkv, S, D), float("nan"))
        start = 0
        for n in chunks:
            rows = slice(start, start + n)
            ptr = kc.data_ptr()
            kt.append(kc, k[:, :, rows], start)
            kt.append(vc, v[:, :, rows], [start, start])
            assert kc.data_ptr() == ptr
            out = kt.attention(q[:, :, rows], kc, vc, kv_len=start + n)
            assert (out - full[:, :, rows]).abs().max() < 1e-5, chunks
            start += n
        assert torch.equal(kc[:, :, :8], k)
        assert kc[:, :, 8:].isnan().all()  # slots past the writes untouched


def test_torch_compile_fullgraph_and_opcheck():
    q, k, v = make(seed=7)

    def f(q, k, v, kv):
        return kt.attention(q * 2, k, v, kv_len=kv).sum(-1)

    kv = torch.tensor([11, 6])
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    assert torch.allclose(compiled(q, k, v, kv), f(q, k, v, kv), atol=1e-6)
    torch.library.opcheck(torch.ops.kvattn.attention.default,
                          (q, k, v, None, kv, None, True, 0, 0.0, None,
                           "bhsd"))
    cache = torch.zeros(2, 2, 11, 16)
    torch.library.opcheck(torch.ops.kvattn.append.default,
                          (cache, k[:, :, :2].contiguous(),
                           torch.tensor([1, 3]), "bhsd"))
    out = torch.empty(2, 8, 3, 16)
    torch.library.opcheck(torch.ops.kvattn.attention_out.default,
                          (q, k, v, None, kv, None, True, 0, 0.0, None,
                           "bhsd", out))


def test_fake_kernel_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q = torch.empty(2, 5, 8, 64, dtype=torch.bfloat16)
        k = torch.empty(2, 40, 2, 64, dtype=torch.bfloat16)
        v = torch.empty(2, 40, 2, 32, dtype=torch.bfloat16)
        out = torch.ops.kvattn.attention(q, k, v, None, None, None, True, 0,
                                         0.0, None, "bshd")
        assert out.shape == (2, 5, 8, 32) and out.dtype == torch.bfloat16


@pytest.mark.parametrize("call, message", [
    (lambda q, k, v: kt.attention(q.double(), k, v),
     "query has dtype torch.float64"),
    (lambda q, k, v: kt.attention(q, k.half(), v),
     "key has dtype torch.float16, query torch.float32"),
    (lambda q, k, v: kt.attention(q, k.to("meta"), v),
     "key is on meta, query on cpu"),
    (lambda q, k, v: kt.attention(q[0], k, v), "query must have 4 dims"),
    (lambda q, k, v: kt.attention(q, k[:1], v), "batch sizes differ"),
    (lambda q, k, v: kt.attention(q[:, :3], k, v),
     "query heads Hq = 3 must be a multiple of kv heads Hkv = 2"),
    (lambda q, k, v: kt.attention(q, k, v[..., ::2]),
     "value: the head dim is not contiguous"),
    (lambda q, k, v: kt.attention(q, k, v, layout="bsdh"),
     "layout must be"),
    (lambda q, k, v: kt.attention(q, k, v, kv_len=[12, 3]),
     r"kv_len\[0\] = 12 is outside \[0, S = 11\]"),
    (lambda q, k, v: kt.attention(q, k, v, q_offset=[-1, 0]),
     r"q_offset\[0\] = -1 is negative"),
    (lambda q, k, v: kt.attention(q, k, v, kv_len=[3]),
     "kv_len has 1 values for a batch of 2"),
    (lambda q, k, v: kt.attention(q, k, v, kv_len=torch.tensor([3., 4.])),
     "kv_len has dtype torch.float32"),
    (lambda q, k, v: kt.attention(q, k, v, window=-2), "window = -2"),
    (lambda q, k, v: kt.attention(q, k, v, causal=False, window=2),
     "a sliding window needs causal=True"),
    (lambda q, k, v: kt.attention(q, k, v, scale=0.0), "scale = 0.0"),
    (lambda q, k, v: kt.attention(q, k, v, out=torch.empty(2, 8, 3, 15)),
     r"out has shape \(2, 8, 3, 15\)"),
    (lambda q, k, v: kt.attention(q, k, v, out=torch.empty(
        2, 8, 3, 16, dtype=torch.bfloat16)), "out has dtype torch.bfloat16"),
    (lambda q, k, v: kt.attention("q", k, v),
     "query must be a torch.Tensor"),
    (lambda q, k, v: kt.append(k.clone(), k[:, :, :4], [8, 0]),
     r"pos\[0\] = 8 writes rows \[8, 12\) outside the cache capacity "
     "C = 11"),
    (lambda q, k, v: kt.append(k.clone(), k[:, :1, :4], 0),
     "does not fit cache"),
    (lambda q, k, v: kt.append(k.clone(), q[:, :2].double(), 0),
     "update has dtype torch.float64"),
])
def test_misuse_is_a_kvattn_error(call, message):
    q, k, v = make(seed=8)
    with pytest.raises(kvattn.KVAttnError, match=message):
        call(q, k, v)
