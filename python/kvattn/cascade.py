"""Shared-prefix (cascade) attention (kvattn.cascade, docs/semantics.md)
from kvattn's own kernels.

Many sequences share a prefix (a system prompt, beam search): sequence b is
the shared prefix of P keys followed by its own suffix of `suffix_len[b]`
keys, and its `L_b` query rows (packed rows `q_start[b] .. q_start[b+1]-1`
of a ragged batch) are the last `L_b` tokens of prefix + suffix (lower-right:
row i of b sits at position `P + suffix_len[b] - L_b + i`). Attention over
prefix + suffix is computed as three launches of existing kernels:

(a) every query row of every sequence over the prefix K/V, as ONE batch
    (B = 1, the T packed rows are its rows): the prefix K/V is read once per
    KV-head program row block, not once per sequence. The prefix lies
    entirely before every query (suffix_len[b] >= L_b), so with `causal` it
    is mask-free and needs no positions: the kernel runs non-causal;
(b) each sequence's rows over its own suffix (a ragged batch, q_start,
    kv_len = suffix_len, q_offset = suffix_len - L_b: the positions relative
    to the suffix's first key, which is all causality depends on);
(c) `kvattn.merge` of the two states (natural-log LSE; a part with no key
    is (0, -inf), the identity).

On the CPU the op is compiled whole by kvattn-to-cpu (-kvattn-expand-cascade);
on a GPU by kvattn-to-ptx: (a) and (b) store their f32 states into the two
parts of a workspace and a merge kernel combines them on the device (one
GpuProgram, three launches).

A window would cut the prefix per row: refused. The result equals plain
attention over prefix + suffix (tests/test_cascade.py, float64 reference).
"""

from . import KVAttnError, KVAttnValueError, compile as _compile


def _np():
    import numpy
    return numpy


_PREFIX = """
func.func @prefix(%q: tensor<1x{hq}x{t}x{d}x{ty}>,
                  %k: tensor<1x{hkv}x{p}x{d}x{ty}>,
                  %v: tensor<1x{hkv}x{p}x{dv}x{ty}>)
    -> (tensor<1x{hq}x{t}x{dv}x{ty}>, tensor<1x{hq}x{t}xf32>) {{
  %o, %lse = kvattn.attention %q, %k, %v scale = {scale:.17e}
      : tensor<1x{hq}x{t}x{d}x{ty}>, tensor<1x{hkv}x{p}x{d}x{ty}>,
        tensor<1x{hkv}x{p}x{dv}x{ty}>
      -> tensor<1x{hq}x{t}x{dv}x{ty}>, tensor<1x{hq}x{t}xf32>
  return %o, %lse : tensor<1x{hq}x{t}x{dv}x{ty}>, tensor<1x{hq}x{t}xf32>
}}
"""

_SUFFIX = """
func.func @suffix(%q: tensor<1x{hq}x{t}x{d}x{ty}>,
                  %k: tensor<{b}x{hkv}x{s}x{d}x{ty}>,
                  %v: tensor<{b}x{hkv}x{s}x{dv}x{ty}>,
                  %qs: tensor<{b1}xi64>, %qo: tensor<{b}xi64>,
                  %kl: tensor<{b}xi64>)
    -> (tensor<1x{hq}x{t}x{dv}x{ty}>, tensor<1x{hq}x{t}xf32>) {{
  %o, %lse = kvattn.attention %q, %k, %v q_start(%qs : tensor<{b1}xi64>)
      q_offset(%qo : tensor<{b}xi64>) kv_len(%kl : tensor<{b}xi64>){causal}
      scale = {scale:.17e}
      : tensor<1x{hq}x{t}x{d}x{ty}>, tensor<{b}x{hkv}x{s}x{d}x{ty}>,
        tensor<{b}x{hkv}x{s}x{dv}x{ty}>
      -> tensor<1x{hq}x{t}x{dv}x{ty}>, tensor<1x{hq}x{t}xf32>
  return %o, %lse : tensor<1x{hq}x{t}x{dv}x{ty}>, tensor<1x{hq}x{t}xf32>
}}
"""

_CASCADE = """
func.func @cascade(%q: tensor<1x{hq}x{t}x{d}x{ty}>,
                   %pk: tensor<1x{hkv}x{p}x{d}x{ty}>,
                   %pv: tensor<1x{hkv}x{p}x{dv}x{ty}>,
                   %k: tensor<{b}x{hkv}x{s}x{d}x{ty}>,
                   %v: tensor<{b}x{hkv}x{s}x{dv}x{ty}>,
                   %qs: tensor<{b1}xi64>, %qo: tensor<{b}xi64>,
                   %kl: tensor<{b}xi64>)
    -> (tensor<1x{hq}x{t}x{dv}x{ty}>, tensor<1x{hq}x{t}xf32>) {{
  %o, %lse = kvattn.cascade %q, %pk, %pv, %k, %v
      q_start(%qs : tensor<{b1}xi64>) q_offset(%qo : tensor<{b}xi64>)
      kv_len(%kl : tensor<{b}xi64>){causal} scale = {scale:.17e}
      : tensor<1x{hq}x{t}x{d}x{ty}>, tensor<1x{hkv}x{p}x{d}x{ty}>,
        tensor<1x{hkv}x{p}x{dv}x{ty}>, tensor<{b}x{hkv}x{s}x{d}x{ty}>,
        tensor<{b}x{hkv}x{s}x{dv}x{ty}>
      -> tensor<1x{hq}x{t}x{dv}x{ty}>, tensor<1x{hq}x{t}xf32>
  return %o, %lse : tensor<1x{hq}x{t}x{dv}x{ty}>, tensor<1x{hq}x{t}xf32>
}}
"""

_PAGED = """
func.func @cascade(%q: tensor<1x{hq}x{t}x{d}x{ty}>,
                   %k: tensor<{n}x{ps}x{hkv}x{d}x{ty}>,
                   %v: tensor<{n}x{ps}x{hkv}x{dv}x{ty}>,
                   %qs: tensor<{b1}xi64>, %qo: tensor<{b}xi64>,
                   %kl: tensor<{b}xi64>, %pp: tensor<{pm}xi64>,
                   %pl: tensor<1xi64>, %bt: tensor<{b}x{m}xi64>)
    -> (tensor<1x{hq}x{t}x{dv}x{ty}>, tensor<1x{hq}x{t}xf32>) {{
  %o, %lse = kvattn.cascade %q, %k, %v, %k, %v
      q_start(%qs : tensor<{b1}xi64>) q_offset(%qo : tensor<{b}xi64>)
      kv_len(%kl : tensor<{b}xi64>) prefix_pages(%pp : tensor<{pm}xi64>)
      prefix_len(%pl : tensor<1xi64>) block_table(%bt : tensor<{b}x{m}xi64>)
      {causal} scale = {scale:.17e}
      : tensor<1x{hq}x{t}x{d}x{ty}>, tensor<{n}x{ps}x{hkv}x{d}x{ty}>,
        tensor<{n}x{ps}x{hkv}x{dv}x{ty}>, tensor<{n}x{ps}x{hkv}x{d}x{ty}>,
        tensor<{n}x{ps}x{hkv}x{dv}x{ty}>
      -> tensor<1x{hq}x{t}x{dv}x{ty}>, tensor<1x{hq}x{t}xf32>
  return %o, %lse : tensor<1x{hq}x{t}x{dv}x{ty}>, tensor<1x{hq}x{t}xf32>
}}
"""

_MERGE = """
func.func @merge(%o: tensor<2x1x{hq}x{t}x{dv}xf32>,
                 %lse: tensor<2x1x{hq}x{t}xf32>)
    -> (tensor<1x{hq}x{t}x{dv}xf32>, tensor<1x{hq}x{t}xf32>) {{
  %m, %ml = kvattn.merge %o, %lse
      : tensor<2x1x{hq}x{t}x{dv}xf32>, tensor<2x1x{hq}x{t}xf32>
      -> tensor<1x{hq}x{t}x{dv}xf32>, tensor<1x{hq}x{t}xf32>
  return %m, %ml : tensor<1x{hq}x{t}x{dv}xf32>, tensor<1x{hq}x{t}xf32>
}}
"""

_TYPES = {"float32": "f32", "float16": "f16", "uint16": "bf16"}


def prefix_ir(dtype, hq, hkv, t, p, d, dv, scale):
    """(a): all T packed query rows over the shared prefix [1, Hkv, P, D]."""
    return _PREFIX.format(hq=hq, hkv=hkv, t=t, p=p, d=d, dv=dv, ty=dtype,
                          scale=scale)


def suffix_ir(dtype, hq, hkv, t, b, s, d, dv, scale, causal=True):
    """(b): each sequence's rows over its own suffix (a ragged batch)."""
    return _SUFFIX.format(hq=hq, hkv=hkv, t=t, b=b, b1=b + 1, s=s, d=d, dv=dv,
                          ty=dtype, scale=scale,
                          causal=" causal" if causal else "")


def cascade_ir(dtype, hq, hkv, t, p, b, s, d, dv, scale, causal=True):
    """The kvattn.cascade op itself (the CPU path compiles it whole:
    -kvattn-expand-cascade, then the two attentions and the merge)."""
    return _CASCADE.format(hq=hq, hkv=hkv, t=t, p=p, b=b, b1=b + 1, s=s, d=d,
                           dv=dv, ty=dtype, scale=scale,
                           causal=" causal" if causal else "")


def paged_cascade_ir(dtype, hq, hkv, t, b, num_pages, page_size,
                     prefix_max_pages, max_pages, d, dv, scale, causal=True):
    """A paged kvattn.cascade: the prefix (prefix_pages, prefix_len) and the
    suffixes (block_table) in one page pool [num_pages, page_size, Hkv,
    D|Dv]."""
    return _PAGED.format(hq=hq, hkv=hkv, t=t, b=b, b1=b + 1, n=num_pages,
                         ps=page_size, pm=prefix_max_pages, m=max_pages, d=d,
                         dv=dv, ty=dtype, scale=scale,
                         causal="causal" if causal else "")


def merge_state(out_a, lse_a, out_b, lse_b):
    """kvattn.merge of two states [1, Hq, T, Dv] / [1, Hq, T] (f32, natural
    log LSE) on the CPU JIT path: (out, lse) over both key sets."""
    np = _np()
    out_a, out_b = (np.asarray(x, np.float32) for x in (out_a, out_b))
    lse_a, lse_b = (np.asarray(x, np.float32) for x in (lse_a, lse_b))
    if out_a.shape != out_b.shape or lse_a.shape != lse_b.shape or \
            out_a.ndim != 4 or out_a.shape[:3] != lse_a.shape or \
            out_a.shape[0] != 1:
        raise KVAttnValueError(
            f"merge_state takes two states out [1, Hq, T, Dv], lse [1, Hq, "
            f"T] of the same shapes, got {out_a.shape}/{lse_a.shape} and "
            f"{out_b.shape}/{lse_b.shape}")
    _, hq, t, dv = out_a.shape
    program = _program(("merge", hq, t, dv), lambda: _compile(
        _MERGE.format(hq=hq, t=t, dv=dv)))
    return program.run(np.stack([out_a, out_b]), np.stack([lse_a, lse_b]))


_programs = {}


def _program(key, build):
    if key not in _programs:
        _programs[key] = build()
    return _programs[key]



def _shared_type(fn, what, arrays):
    """The MLIR element type of the query and the caches, which share one
    dtype of _TYPES."""
    dtypes = {x.dtype.name for x in arrays}
    if len(dtypes) != 1 or next(iter(dtypes)) not in _TYPES:
        raise KVAttnValueError(
            f"{fn}: query and {what} share one dtype of {sorted(_TYPES)} "
            f"(uint16: bf16 bits), got {sorted(dtypes)}")
    return _TYPES[arrays[0].dtype.name]


def _suffix_offsets(q_start, suffix_len):
    """Each sequence's q_offset from the end of the prefix: its rows are the
    last tokens of its suffix (suffix_len - L_b), refused by name where the
    suffix is shorter than the rows."""
    np = _np()
    rows = np.diff(q_start)
    short = np.nonzero(suffix_len < rows)[0]
    if short.size:
        i = int(short[0])
        raise KVAttnValueError(
            f"suffix_len[{i}] = {suffix_len[i]} is below the {rows[i]} query "
            f"row(s) of sequence {i}: the queries are the last tokens of "
            "the suffix, so the prefix lies before every query (batch "
            f"{i})")
    return suffix_len - rows


def _packed_query_shape(q):
    """[1, Hq, T, D]: the packed rows of a cascade's sequences."""
    if q.ndim != 4 or q.shape[0] != 1:
        raise KVAttnValueError(f"query must be [1, Hq, T, D] (packed rows), "
                               f"got {q.shape}")
    return q.shape

def cascade_attention(query, q_start, prefix_key, prefix_value, suffix_key,
                      suffix_value, suffix_len, causal=True, window=None,
                      scale=None, target="cpu", runtime=None):
    """Shared-prefix attention (module docstring). query [1, Hq, T, D]
    (packed rows of B sequences, q_start [B + 1]); prefix K/V [1, Hkv, P,
    D|Dv] shared by all; suffix K/V [B, Hkv, S, D|Dv] with suffix_len [B]
    valid keys each (>= the sequence's rows). f32 NumPy arrays, or bf16 as
    uint16 bit patterns (kvattn.to_bf16), or f16. target "cpu" or "gpu"
    (runtime: an emulated or real one): the kvattn.cascade op compiled whole
    (on a GPU the merge runs on the device). Returns (out [1, Hq, T, Dv]
    f32, lse [1, Hq, T] f32, natural log); on the CPU 16-bit inputs give
    parts rounded to their type before the merge (as the expanded
    attentions write them), on a GPU the parts stay f32."""
    np = _np()
    if window is not None:
        raise KVAttnValueError(
            "cascade_attention: a window would cut the shared prefix per "
            "row (it is no longer one mask-free attention for all rows); "
            "run plain attention over prefix + suffix with the window")
    q, pk, pv, sk, sv = (np.asarray(x) for x in (query, prefix_key,
                                                 prefix_value, suffix_key,
                                                 suffix_value))
    ty = _shared_type("cascade_attention", "K/V", (q, pk, pv, sk, sv))
    _, hq, t, d = _packed_query_shape(q)
    if pk.ndim != 4 or pk.shape[0] != 1 or pk.shape[3] != d or \
            pv.shape[:3] != pk.shape[:3]:
        raise KVAttnValueError(f"prefix key/value must be [1, Hkv, P, D|Dv] "
                               f"with D = {d}, got {pk.shape}, {pv.shape}")
    _, hkv, p, _ = pk.shape
    dv = pv.shape[3]
    qs = np.asarray(q_start, np.int64)
    lens = np.asarray(suffix_len, np.int64)
    b = len(qs) - 1
    if sk.ndim != 4 or sk.shape[:2] != (b, hkv) or sk.shape[3] != d or \
            sv.shape[:3] != sk.shape[:3] or sv.shape[3] != dv:
        raise KVAttnValueError(
            f"suffix key/value must be [B = {b}, Hkv = {hkv}, S, D|Dv], got "
            f"{sk.shape}, {sv.shape}")
    if lens.shape != (b,):
        raise KVAttnValueError(f"suffix_len must have B = {b} entries, got "
                               f"{lens.shape}")
    qo = _suffix_offsets(qs, lens)
    s = sk.shape[2]
    scale = float(scale) if scale is not None else 1.0 / float(np.sqrt(d))
    if target == "cpu":
        # kvattn.cascade compiled whole by kvattn-to-cpu.
        whole = _program(("cascade", ty, hq, hkv, t, p, b, s, d, dv, scale,
                          causal),
                         lambda: _compile(cascade_ir(ty, hq, hkv, t, p, b, s,
                                                     d, dv, scale, causal)))
        out, lse = whole.run(q, pk, pv, sk, sv, qs, qo, lens)
        from . import from_bf16
        return (from_bf16(out) if ty == "bf16" else
                np.asarray(out, np.float32)), lse
    # A GPU target: kvattn.cascade compiled whole by kvattn-to-ptx: the
    # prefix kernel (B = 1, every row over the prefix), the ragged suffix
    # kernel, each writing its f32 state into one part of a workspace, and
    # the merge kernel, on the device.
    whole = _program(("cascade-gpu", ty, hq, hkv, t, p, b, s, d, dv, scale,
                      causal, target, id(runtime)),
                     lambda: _compile(cascade_ir(ty, hq, hkv, t, p, b, s, d,
                                                 dv, scale, causal),
                                      target=target, runtime=runtime))
    out, lse = whole.run(query=q, prefix_key=pk, prefix_value=pv, key=sk,
                         value=sv, q_start=qs, q_offset=qo, kv_len=lens)
    from . import from_bf16
    return (from_bf16(out) if ty == "bf16" else
            np.asarray(out, np.float32)), lse


def paged_cascade_attention(query, q_start, key_pages, value_pages,
                            prefix_pages, prefix_len, block_table, suffix_len,
                            causal=True, scale=None, target="cpu",
                            runtime=None):
    """Shared-prefix attention over a paged KV cache (kvattn.cascade with
    prefix_pages, prefix_len and block_table, docs/semantics.md): one page
    pool key_pages/value_pages [num_pages, page_size, Hkv, D|Dv] holds the
    shared prefix, the first prefix_len keys of pages prefix_pages
    [prefix_max_pages] (-1 tail), and each sequence's suffix of
    suffix_len[b] keys through block_table [B, max_pages]. query [1, Hq, T,
    D] packed rows of B sequences (q_start [B + 1]), the last tokens of
    their suffixes. dtypes as cascade_attention. The tables are checked
    before anything runs (ids in range, a -1 tail, no page twice, the
    lengths within the pages; errors name the table, the slot and the
    value). target "cpu" or "gpu" (runtime: an emulated or real one; the
    prefix kernel reads the pool through prefix_pages, the suffix kernel
    through block_table, the merge runs on the device; the tables are
    checked by the runtime before the launch). Returns (out [1, Hq, T, Dv]
    f32, lse [1, Hq, T] f32)."""
    np = _np()
    q, kp, vp = (np.asarray(x) for x in (query, key_pages, value_pages))
    ty = _shared_type("paged_cascade_attention", "K/V pages", (q, kp, vp))
    _, hq, t, d = _packed_query_shape(q)
    if kp.ndim != 4 or kp.shape[3] != d or vp.ndim != 4 or \
            vp.shape[:3] != kp.shape[:3]:
        raise KVAttnValueError(
            f"key/value pages must be [num_pages, page_size, Hkv, D|Dv] with "
            f"D = {d}, got {kp.shape}, {vp.shape}")
    num_pages, page_size, hkv, _ = kp.shape
    dv = vp.shape[3]
    qs = np.asarray(q_start, np.int64)
    lens = np.asarray(suffix_len, np.int64)
    pages = np.asarray(prefix_pages, np.int64)
    plen = np.asarray(prefix_len, np.int64).reshape(1)
    table = np.asarray(block_table, np.int64)
    b = len(qs) - 1
    if pages.ndim != 1 or table.ndim != 2 or table.shape[0] != b or \
            lens.shape != (b,):
        raise KVAttnValueError(
            f"prefix_pages must be [prefix_max_pages], block_table [B = {b}, "
            f"max_pages] and suffix_len [B], got {pages.shape}, "
            f"{table.shape}, {lens.shape}")
    qo = _suffix_offsets(qs, lens)
    scale = float(scale) if scale is not None else 1.0 / float(np.sqrt(d))
    key = ("paged", ty, hq, hkv, t, b, num_pages, page_size, pages.shape[0],
           table.shape[1], d, dv, scale, causal, target, id(runtime))
    ir = paged_cascade_ir(ty, hq, hkv, t, b, num_pages, page_size,
                          pages.shape[0], table.shape[1], d, dv, scale, causal)
    if target == "cpu":
        whole = _program(key, lambda: _compile(ir))
        out, lse = whole.run(q, kp, vp, qs, qo, lens, pages, plen, table)
    else:
        # kvattn-to-ptx's three kernels; the one pool is bound as the
        # prefix's and the suffixes'.
        whole = _program(key, lambda: _compile(ir, target=target,
                                               runtime=runtime))
        out, lse = whole.run(query=q, prefix_key=kp, prefix_value=vp,
                             key=kp, value=vp, q_start=qs, q_offset=qo,
                             kv_len=lens, prefix_pages=pages,
                             prefix_len=plen, block_table=table)
    from . import from_bf16
    return (from_bf16(out) if ty == "bf16" else
            np.asarray(out, np.float32)), lse


__all__ = ["cascade_attention", "cascade_ir", "merge_state",
           "paged_cascade_attention", "paged_cascade_ir", "prefix_ir",
           "suffix_ir",
           "KVAttnError"]
