//===- KVAttnOps.td - kvattn operations --------------------*- tablegen -*-===//

#ifndef KVATTN_DIALECT_KVATTNOPS_TD
#define KVATTN_DIALECT_KVATTNOPS_TD

include "kvattn/Dialect/KVAttnAttrs.td"
include "kvattn/Dialect/KVAttnBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/TilingInterface.td"

//===----------------------------------------------------------------------===//
// kvattn.attention
//===----------------------------------------------------------------------===//

def KVAttn_AttentionOp : KVAttn_Op<"attention",
    [Pure, AttrSizedOperandSegments,
     DeclareOpInterfaceMethods<ReifyRankedShapedTypeOpInterface, ["reifyResultShapes"]>,
     DeclareOpInterfaceMethods<TilingInterface,
       ["getLoopIteratorTypes", "getIterationDomain", "getTiledImplementation",
        "getResultTilePosition", "getIterationDomainTileFromResultTile",
        "generateResultTileValue"]>]> {
  let summary = "attention with explicit query and key positions";
  let description = [{
    Scaled dot-product attention in which every query row and key column has
    a logical position in the whole sequence. For batch `b`, query head `h`,
    query row `i` and key column `j`:

    * kv head `g = h / (Hq / Hkv)` (GQA; MQA is `Hkv = 1`);
    * query position `qp(b, i)` and key position `kp(b, j)`:
      - offset form: `qp = q_offset[b] + i`, `kp = k_offset[b] + j`
        (`k_offset` defaults to 0);
      - explicit form: `qp = q_pos[b, i]`, `kp = k_pos[b, j]`;
    * `valid(b, j) = j < kv_len[b] && key_valid[b, j]` (each term only when
      its operand is present);
    * `allowed(b, h, i, j) = valid(b, j) && (!causal || kp <= qp)
      && (!window || qp - kp < window)
      && (!window_right || kp - qp <= window_right) && mask[b, h, i, j]`
      (`window` bounds the keys before the query, `window_right` those
      after it: FlashAttention's `window_size = (window - 1, window_right)`;
      `window_right` does not combine with `causal`, which allows none);
    * `s = scale * dot(q[b, h, i], k[b, g, j])`, then with `softcap`:
      `s = softcap * tanh(s / softcap)`, then a float `mask` is added, then
      with `alibi_slopes` (f32 `[Hq]`) the ALiBi bias
      `-alibi_slopes[h] * |qp - kp|` (`alibi_slopes[h] * (kp - qp)` for the
      keys up to the query; FlashAttention's `alibi_slopes`);
    * `out[b, h, i] = sum over allowed j of softmax(s)_j * v[b, g, j]`, and
      `lse[b, h, i] = log(sum over allowed j of exp(s_j))` (natural log, f32).
    * With `sinks` (f32 `[Hq]`, gpt-oss's attention sinks) every row's
      softmax denominator also holds `exp(sinks[h])`, a logit that
      contributes no value: `out = sum_j exp(s_j) v_j / (exp(sinks[h]) +
      sum_j exp(s_j))` and `lse = log(exp(sinks[h]) + sum_j exp(s_j))`.

    Forbidden keys are excluded from the normalisation, never multiplied by
    zero. A row with no allowed key has `out = 0` and `lse = -inf` (with
    `sinks`: `out = 0` and `lse = sinks[h]`).
    Accumulation is in f32 (or wider) whatever the element type; `out` has
    the element type of `query`. `scale` defaults to `1 / sqrt(D)`.

    **Rotary embedding (RoPE).** With `rope = #kvattn.rope<...>` the op
    rotates its query inside the kernel, row `(b, i)` at its own position
    `qp(b, i)`, in f32, before the products (the formula is the attribute's;
    `rotary_dim <= D`). The keys are not rotated here: `kvattn.append` with
    `rope` rotated them when it wrote them, at their own positions, and
    recorded those positions (its `rope_pos` result). Passing that record as
    `k_rope_pos [B, S]` binds the cached keys to their rotation: every valid
    key must be attended at the position it was rotated at,
    `kp(b, j) == k_rope_pos[b, j]`; the verifier checks it when both are
    constants, the reference and the runtime before anything runs, naming
    the batch, the slot and both positions. `query_rotated` declares a query
    that arrives rotated (a framework applied RoPE); `rope` would rotate it
    again and is refused with it. A query read from keys rotated by
    `kvattn.append` with `rope` must itself be rotated: by `rope` with the
    same attribute, or declared `query_rotated`. `k_rope_pos` needs
    positions and is not taken with `block_table` or `q_start`.

    **RoPE from tables.** A `rope` without `theta` takes the cosines and
    sines from `rotary_cos` and `rotary_sin` (FlashAttention's layout
    `[P, rotary_dim / 2]`, row = position, f32, f16 or bf16, widened to
    f32): query row `(b, i)` uses row `qp(b, i)` of each. Both tables or
    neither, of one type; a `rope` with `theta` takes neither. A position
    outside the table (`qp >= P`) is an error, named by the verifier when
    the positions are constants, otherwise by whoever runs the op ("rotary_cos:
    position p of batch b, row i is outside the table's P rows"). Keys
    written by `kvattn.append` with tables meet a query rotated by the
    same tables (the same SSA values).

    ```mlir
    %o = kvattn.attention %q, %k, %v q_offset(%qo : tensor<2xi32>) causal
        rope = <rotary_dim = 64>
        rotary_cos(%cos : tensor<4096x32xf32>)
        rotary_sin(%sin : tensor<4096x32xf32>)
        : tensor<2x8x4x128xbf16>, tensor<2x2x4096x128xbf16>,
          tensor<2x2x4096x128xbf16> -> tensor<2x8x4x128xbf16>
    ```

    Shapes: `query [B, Hq, L, D]`, `key [B, Hkv, S, D]`,
    `value [B, Hkv, S, Dv]`, `out [B, Hq, L, Dv]`, `lse [B, Hq, L]`;
    `q_offset`, `k_offset`, `kv_len`: `[B]`; `q_pos [B, L]`; `k_pos` and
    `key_valid`: `[B, S]`; `mask`: broadcastable to `[B, Hq, L, S]` (rank 2 to
    4, aligned on the right, each dimension 1 or the full size). Dynamic
    dimensions are allowed everywhere; static ones are checked.

    Positions are required as soon as they matter: `causal`, `window`,
    `window_right` or `alibi_slopes` need
    `q_offset` or `q_pos`/`k_pos`. The offset and explicit forms are
    exclusive. Run-time values (offsets, lengths, positions) are checked by
    whoever executes the op: the reference and the runtime reject negative
    positions and `kv_len` outside `[0, S]`.

    **Paged KV.** With `block_table`, `key` and `value` are caches of pages,
    `[num_pages, page_size, Hkv, D]` and `[num_pages, page_size, Hkv, Dv]`,
    shared by all sequences, and `block_table [B, max_pages]` (i32/i64)
    lists each sequence's pages in logical order. The logical keys of batch
    `b` are `key[block_table[b, j / page_size], j % page_size, g]` for
    `j < S = max_pages * page_size`, and everything above applies to them
    unchanged (`k_pos`, `key_valid` and the mask index the logical keys).
    `kv_len` is required: keys at and past `kv_len[b]` are not read. The
    table's rules (docs/semantics.md): every entry is `-1` or a page id in
    `[0, num_pages)`, nothing but `-1` after the first `-1`, no page twice in
    one sequence, and `kv_len[b] <= (pages of b) * page_size`. The verifier
    checks them when the table (and `kv_len`) are constants; otherwise the
    reference and the runtime check them before anything reads a page.
    Physical page order never changes the result.

    **Ragged batches (varlen).** With `q_start [B + 1]` (i32/i64, like
    FlashAttention's `cu_seqlens_q`) the queries of `B` sequences are
    packed along the rows: `query [1, Hq, T, D]`, `out [1, Hq, T, Dv]`,
    `lse [1, Hq, T]`. Sequence `b` owns rows `q_start[b] .. q_start[b+1]-1`
    (`L_b = q_start[b+1] - q_start[b]` rows, possibly 0), and its row
    `q_start[b] + i` is row `i` of a `kvattn.attention` of batch `b` alone:
    position `q_offset[b] + i`, the keys of batch `b` (`key [B, Hkv, S, D]`,
    or pages through `block_table [B, max_pages]`), `k_offset[b]`,
    `kv_len[b]`, `key_valid[b, :]`. One op thus serves decode tokens
    (`L_b = 1`) next to prefill chunks of other sequences, each with its
    own cache length. Rules: `q_start[0] = 0`, non-decreasing,
    `q_start[B] = T`; with `q_offset` and `kv_len` the rows are tokens of
    the sequence's cache, so its last row must find its own key:
    `q_offset[b] + L_b <= k_offset[b] + kv_len[b]`. The verifier checks them
    when the operands are constants; the reference and the runtime check
    them before anything runs, naming the slot, the value and the batch.
    The explicit form (`q_pos`/`k_pos`) and `mask` index rows per batch and
    are refused with `q_start`; use `q_offset` and `key_valid`.

    **Tree masks (speculative decoding).** With `tree_parents [T]`
    (i32/i64; needs `q_start` and `q_offset`) the `L_b` rows of sequence `b`
    are draft tokens forming a tree (EAGLE/Medusa/MTP drafts):
    `tree_parents[q_start[b] + i]` is the local row of draft token `i`'s
    parent, `-1` for a root (a child of the cache), otherwise in `[0, i)`.
    The draft tokens are the last `L_b` keys of the sequence (key
    `kv_len[b] - L_b + a` is draft token `a`) and follow the cached prefix
    (`q_offset[b] = k_offset[b] + kv_len[b] - L_b`). Draft token `i` sits
    at position `q_offset[b] + depth(i)` (a root at depth 0), and so does
    its key; a draft key `a` is allowed for row `i` only when `a` is `i` or
    an ancestor of `i` (and by the usual rules, with these positions);
    cache keys follow the usual rules. A chain (`parents = -1, 0, 1, ...`)
    is plain causal attention. The verifier checks the rules on constant
    operands, the reference and the runtime on run-time values. Not with
    `k_start` or `cache_batch_idx` yet.

    **Ragged keys (`k_start`).** With `k_start [B + 1]` (i32/i64, like
    FlashAttention's `cu_seqlens_k`) the keys of the `B` sequences are
    packed along the rows of one buffer: `key [1, Hkv, N, D]`,
    `value [1, Hkv, N, Dv]`. Batch `b`'s key `j` is row `k_start[b] + j`,
    for `j < kv_len[b]` (`kv_len` defaults to `k_start[b+1] - k_start[b]`),
    and everything above applies to these keys (`k_offset[b] + j` is its
    position). Rules: `k_start[0] >= 0`, non-decreasing, `k_start[B] <= N`,
    `kv_len[b] <= k_start[b+1] - k_start[b]`. Rows no batch owns are never
    read. It combines with `q_start` (both ragged) and with the plain
    query `[B, Hq, L, D]`; not with `block_table`, `cache_batch_idx`,
    `q_pos`/`k_pos`, `mask` or `key_valid` (indexed `[B, S]`).

    **A batch-to-cache map (`cache_batch_idx`).** With `cache_batch_idx
    [B]` (i32/i64, FlashAttention's kvcache API) `key` and `value` are
    `[C, Hkv, S, D|Dv]`, `C` cache rows in any number, and batch `b` reads
    cache row `cache_batch_idx[b]`; every per-batch operand (`q_offset`,
    `k_offset`, `kv_len`, `k_pos`, `mask`, ...) stays indexed by `b`.
    Rules: `0 <= cache_batch_idx[b] < C`; two batches may read the same
    row. Not with `block_table`, `k_start` or `key_valid`.

    **FP8 KV caches.** `key` and `value` may be FP8 caches, `f8E4M3FN` or
    `f8E5M2` (both of one format), with f32 scales `k_scale` and `v_scale`
    (vLLM's, SGLang's and FlashInfer's names): the attention reads
    `f32(code) * scale` (the reference's dequantisation, docs/semantics.md)
    and the query stays f32, f16 or bf16 (`out` has its type). A scale is
    per tensor (`[1]` or rank 0), per KV head (`[Hkv]`), or per token and
    head: the cache's shape without its last dimension (`[B, Hkv, S]`;
    paged `[num_pages, page_size, Hkv]`; with `k_start` `[1, Hkv, N]`;
    with `cache_batch_idx` `[C, Hkv, S]`), so that a cache row and its
    scale share their indices. Every scale must be positive and finite
    (checked when constant here, at run time by the reference and the
    runtime). An FP8 cache needs its scale; a scale needs an FP8 cache.

    **Interfaces.** The op is `Pure` and reifies its result shapes. It
    implements `TilingInterface` over its parallel dimensions `[B, Hq, L]`
    (batch, query heads, query rows), so upstream tiling drivers
    (`transform.structured.tile_using_forall`, `scf::tileUsingSCF`) can
    distribute it: a tile reads the matching slices of every operand, the
    kv heads of its query heads (the head tile must divide or be a multiple
    of the GQA group `Hq / Hkv`), the whole key range, and moves its
    query positions (`q_offset + row offset`, or a slice of `q_pos`).

    Example: two new tokens appended to a cache that holds three (the 2x5
    example of the semantics page); queries sit at positions 3 and 4.

    ```mlir
    %out = kvattn.attention %q, %k, %v q_offset(%pos : tensor<1xi32>) causal
        : tensor<1x1x2x8xf32>, tensor<1x1x5x8xf32>, tensor<1x1x5x8xf32>
        -> tensor<1x1x2x8xf32>
    ```
  }];

  let arguments = (ins
    KVAttn_FloatTensor:$query,
    KVAttn_KvTensor:$key,
    // Absent in the latent form (value_dim): V is then the first value_dim
    // columns of key.
    Optional<KVAttn_KvTensor>:$value,
    Optional<KVAttn_IndexTensor>:$q_offset,
    Optional<KVAttn_IndexTensor>:$k_offset,
    Optional<KVAttn_IndexTensor>:$q_pos,
    Optional<KVAttn_IndexTensor>:$k_pos,
    Optional<KVAttn_IndexTensor>:$kv_len,
    Optional<KVAttn_BoolTensor>:$key_valid,
    Optional<KVAttn_MaskTensor>:$mask,
    Optional<KVAttn_IndexTensor>:$block_table,
    Optional<KVAttn_IndexTensor>:$q_start,
    // f32 [Hq]; any ranked tensor here, so that the verifier can name the
    // operand and its rule.
    Optional<AnyRankedTensor>:$sinks,
    Optional<AnyRankedTensor>:$alibi_slopes,
    // [B, S] i32/i64: the positions the cached keys were rotated at.
    Optional<KVAttn_IndexTensor>:$k_rope_pos,
    // Ragged keys (FlashAttention's cu_seqlens_k) and a batch-to-cache map
    // (FlashAttention's cache_batch_idx): kvattn/Support/KeyRows.h.
    Optional<KVAttn_IndexTensor>:$k_start,
    Optional<KVAttn_IndexTensor>:$cache_batch_idx,
    UnitAttr:$causal,
    OptionalAttr<I64Attr>:$window,
    OptionalAttr<F32Attr>:$softcap,
    OptionalAttr<F32Attr>:$scale,
    OptionalAttr<I64Attr>:$window_right,
    // Speculative decoding: per packed row its parent's local index in its
    // sequence's draft-token tree (-1: a root). Needs q_start and q_offset.
    Optional<KVAttn_IndexTensor>:$tree_parents,
    OptionalAttr<KVAttn_RopeAttr>:$rope,
    UnitAttr:$query_rotated,
    // FP8 K / V: the f32 dequantisation scales (any ranked tensor here, so
    // that the verifier can name the operand and its rule).
    Optional<AnyRankedTensor>:$k_scale,
    Optional<AnyRankedTensor>:$v_scale,
    // The latent form (DeepSeek MLA): V is the first value_dim columns of
    // key; no value operand.
    OptionalAttr<I64Attr>:$value_dim,
    // RoPE from tables (FlashAttention's rotary_cos / rotary_sin):
    // [P, rotary_dim / 2] f32/f16/bf16, row = position; with a `rope`
    // without theta. Any ranked tensor here, so that the verifier can name
    // the operand and its rule.
    Optional<AnyRankedTensor>:$rotary_cos,
    Optional<AnyRankedTensor>:$rotary_sin
  );
  let results = (outs
    KVAttn_FloatTensor:$out,
    Optional<KVAttn_LseTensor>:$lse
  );

  let assemblyFormat = [{
    $query `,` $key (`,` $value^)?
    (`value_dim` `=` $value_dim^)?
    (`q_start` `(` $q_start^ `:` type($q_start) `)`)?
    (`k_start` `(` $k_start^ `:` type($k_start) `)`)?
    (`cache_batch_idx` `(` $cache_batch_idx^ `:` type($cache_batch_idx) `)`)?
    (`q_offset` `(` $q_offset^ `:` type($q_offset) `)`)?
    (`k_offset` `(` $k_offset^ `:` type($k_offset) `)`)?
    (`q_pos` `(` $q_pos^ `:` type($q_pos) `)`)?
    (`k_pos` `(` $k_pos^ `:` type($k_pos) `)`)?
    (`kv_len` `(` $kv_len^ `:` type($kv_len) `)`)?
    (`key_valid` `(` $key_valid^ `:` type($key_valid) `)`)?
    (`mask` `(` $mask^ `:` type($mask) `)`)?
    (`block_table` `(` $block_table^ `:` type($block_table) `)`)?
    (`sinks` `(` $sinks^ `:` type($sinks) `)`)?
    (`alibi_slopes` `(` $alibi_slopes^ `:` type($alibi_slopes) `)`)?
    (`k_rope_pos` `(` $k_rope_pos^ `:` type($k_rope_pos) `)`)?
    (`tree_parents` `(` $tree_parents^ `:` type($tree_parents) `)`)?
    (`k_scale` `(` $k_scale^ `:` type($k_scale) `)`)?
    (`v_scale` `(` $v_scale^ `:` type($v_scale) `)`)?
    (`causal` $causal^)?
    (`window` `=` $window^)?
    (`window_right` `=` $window_right^)?
    (`softcap` `=` $softcap^)?
    (`scale` `=` $scale^)?
    (`rope` `=` $rope^)?
    (`rotary_cos` `(` $rotary_cos^ `:` type($rotary_cos) `)`)?
    (`rotary_sin` `(` $rotary_sin^ `:` type($rotary_sin) `)`)?
    (`query_rotated` $query_rotated^)?
    attr-dict `:` type($query) `,` type($key) (`,` type($value)^)?
    `->` type($out) (`,` type($lse)^)?
  }];

  let hasVerifier = 1;

  let builders = [
    // Result types inferred: out [B, Hq, L, Dv] of the query's element type,
    // and lse [B, Hq, L] f32 when `withLse`. A null `value` with
    // `extras.valueDim` builds the latent form.
    OpBuilder<(ins "::mlir::Value":$query, "::mlir::Value":$key,
      "::mlir::Value":$value, "bool":$withLse,
      CArg<"const ::mlir::kvattn::AttentionExtras &", "{}">:$extras)>
  ];

  let extraClassDeclaration = [{
    /// The result types for `query` and `value`: out [B, Hq, L, Dv] of the
    /// query's element type, and lse [B, Hq, L] f32 when `withLse`.
    static ::llvm::SmallVector<::mlir::Type>
    inferResultTypes(::mlir::Value query, ::mlir::Value value, bool withLse);
    /// The same for an explicit Dv (the latent form's value_dim).
    static ::llvm::SmallVector<::mlir::Type>
    inferResultTypes(::mlir::Value query, int64_t valueDim, bool withLse);
    /// True for the latent form (DeepSeek MLA): no value operand, V is the
    /// first value_dim columns of key.
    bool isLatent() { return getValueDim().has_value(); }
    /// The operand V is read from: value, or key in the latent form.
    ::mlir::TypedValue<::mlir::RankedTensorType> getValueSource() {
      return getValue() ? getValue() : getKey();
    }
    /// Dv: value_dim in the latent form, else the value's last dim.
    int64_t getValueHeadDim() {
      if (std::optional<int64_t> dv = getValueDim())
        return *dv;
      return getValue().getType().getDimSize(3);
    }
    /// The optional operands and attributes, for rebuilding the op.
    ::mlir::kvattn::AttentionExtras getExtras();
    /// True when positions are given as per-batch offsets.
    bool hasOffsetPositions() { return static_cast<bool>(getQOffset()); }
    /// True when positions are given as explicit position tensors.
    bool hasExplicitPositions() { return static_cast<bool>(getQPos()); }
    /// True when key and value are paged caches read through block_table.
    bool isPaged() { return static_cast<bool>(getBlockTable()); }
    /// True for a ragged batch: packed query rows with per-sequence starts
    /// q_start [B + 1].
    bool isVarlen() { return static_cast<bool>(getQStart()); }
    /// The q_start rules, when q_start (and q_offset, kv_len) are
    /// constants.
    ::mlir::LogicalResult verifyConstantQueryStarts();
    /// The tree_parents rules, when tree_parents and q_start (and
    /// q_offset, kv_len) are constants.
    ::mlir::LogicalResult verifyConstantTreeParents();
    /// The k_start and cache_batch_idx rules (kvattn/Support/KeyRows.h),
    /// when those operands (and kv_len) are constants.
    ::mlir::LogicalResult verifyConstantKeyRows();
    /// True with ragged keys: one packed K/V buffer and per-batch starts.
    bool hasKeyStarts() { return static_cast<bool>(getKStart()); }
    /// True with a batch-to-cache map.
    bool hasCacheBatchIdx() { return static_cast<bool>(getCacheBatchIdx()); }
    /// Logical key count S (max_pages * page_size when paged); dynamic
    /// when unknown.
    int64_t getLogicalKeyLength();
    /// The kv-head dimension of key and value (1, or 2 when paged).
    unsigned getKeyHeadDim() { return isPaged() ? 2 : 1; }
    /// The block-table rules, when the table is a constant.
    ::mlir::LogicalResult verifyConstantBlockTable();
    /// The RoPE rules: rotary_dim <= D, no double rotation, keys rotated
    /// like the query, the k_rope_pos record (checked when constant), the
    /// rotary_cos / rotary_sin tables.
    ::mlir::LogicalResult verifyRope(int64_t d, int64_t b, int64_t s);
    /// True when RoPE's cosines and sines come from rotary_cos/rotary_sin.
    bool hasRotaryTables() { return static_cast<bool>(getRotaryCos()); }
    /// The FP8 rules: an FP8 cache needs k_scale and v_scale (f32, per
    /// tensor, per KV head or per token and head), a scale needs an FP8
    /// cache, constant scales are positive and finite.
    ::mlir::LogicalResult verifyKvScales();
    /// The latent-form rules: value_dim <=> no value operand,
    /// 1 <= value_dim <= D, no v_scale.
    ::mlir::LogicalResult verifyLatentForm();
    /// True when key and value are an FP8 cache (f8E4M3FN or f8E5M2).
    bool hasFp8Cache() {
      return ::mlir::isa<::mlir::Float8E4M3FNType, ::mlir::Float8E5M2Type>(
          getKey().getType().getElementType());
    }
    /// The softmax scale: the `scale` attribute, or 1/sqrt(D) when absent.
    /// Returns std::nullopt when D is dynamic and no scale is given.
    std::optional<double> getEffectiveScale();
  }];
}

//===----------------------------------------------------------------------===//
// kvattn.sdpa
//===----------------------------------------------------------------------===//

def KVAttn_SdpaOp : KVAttn_Op<"sdpa",
    [Pure, DeclareOpInterfaceMethods<ReifyRankedShapedTypeOpInterface, ["reifyResultShapes"]>]> {
  let summary = "framework scaled dot-product attention (PyTorch meaning)";
  let description = [{
    `torch.nn.functional.scaled_dot_product_attention` with dropout 0, as a
    framework front end emits it. Shapes: `query [B, Hq, L, D]`,
    `key [B, Hkv, S, D]`, `value [B, Hkv, S, Dv]`, result `[B, Hq, L, Dv]`.
    `Hq % Hkv == 0`; when `Hq != Hkv` query head `h` reads kv head
    `h / (Hq / Hkv)` (torch's `enable_gqa=True`).

    * `mask`: optional, broadcastable to `[B, Hq, L, S]` (rank 2 to 4,
      right-aligned, each dimension 1 or the full size). `i1`: true means
      allowed. Float: added to the scaled scores (`-inf` excludes a key).
    * `causal = upper_left` is torch's `is_causal=True`: key `j` is allowed
      for query row `i` when `j <= i`, whatever `S` is.
      `causal = lower_right` is torch's `causal_lower_right` bias:
      `j <= i + S - L`. `mask` and `causal` are exclusive, as in torch.
    * `scale` defaults to `1 / sqrt(D)`.
    * `window = W` (needs `causal`): a sliding window over the causal
      positions, as frameworks' `sliding_window` / FlashAttention's
      `window_size = (W - 1, 0)`: key `j` is allowed for row `i` only when
      `p(i) - j < W`, `p(i)` the row's causal position (`i` upper-left,
      `i + S - L` lower-right), so each row sees at most its last `W` keys.
    * `softcap = c` (Gemma-2's attention logit soft-capping): the scaled
      scores become `c * tanh(s / c)` before the mask is added.
    * An optional second result `lse [B, Hq, L]` (f32, natural log) is the
      log-sum-exp of each row's allowed scores (`-inf` for a row without
      any), as FlashAttention returns it.

    Row semantics differ from torch in one documented place: a row with no
    allowed key yields 0 (torch's math backend yields NaN).

    When `L` new tokens are appended to a cache that already holds keys,
    `upper_left` is almost always a bug: the appended rows see only the first
    keys. `-kvattn-resolve-cached-append` rewrites this op into
    `kvattn.attention` with positions made explicit and warns about it.
  }];

  let arguments = (ins
    KVAttn_FloatTensor:$query,
    KVAttn_FloatTensor:$key,
    KVAttn_FloatTensor:$value,
    Optional<KVAttn_MaskTensor>:$mask,
    OptionalAttr<KVAttn_CausalAlignmentAttr>:$causal,
    OptionalAttr<I64Attr>:$window,
    OptionalAttr<F32Attr>:$softcap,
    OptionalAttr<F32Attr>:$scale
  );
  let results = (outs
    KVAttn_FloatTensor:$out,
    Optional<KVAttn_LseTensor>:$lse
  );

  let assemblyFormat = [{
    $query `,` $key `,` $value
    (`mask` `(` $mask^ `:` type($mask) `)`)?
    (`causal` `=` $causal^)?
    (`window` `=` $window^)?
    (`softcap` `=` $softcap^)?
    (`scale` `=` $scale^)?
    attr-dict `:` type($query) `,` type($key) `,` type($value)
    `->` type($out) (`,` type($lse)^)?
  }];

  let hasVerifier = 1;

  let builders = [
    // Result types inferred as for kvattn.attention.
    OpBuilder<(ins "::mlir::Value":$query, "::mlir::Value":$key,
      "::mlir::Value":$value, "bool":$withLse,
      CArg<"::mlir::Value", "{}">:$mask,
      CArg<"std::optional<::mlir::kvattn::CausalAlignment>", "std::nullopt">:$causal,
      CArg<"std::optional<double>", "std::nullopt">:$scale)>
  ];
}

//===----------------------------------------------------------------------===//
// kvattn.append
//===----------------------------------------------------------------------===//

def KVAttn_AppendOp : KVAttn_Op<"append",
    [Pure, AttrSizedOperandSegments, InferTypeOpAdaptor,
     DeclareOpInterfaceMethods<ReifyRankedShapedTypeOpInterface, ["reifyResultShapes"]>]> {
  let summary = "write new K or V rows into a static or paged cache";
  let description = [{
    Writes the `L` rows of `update [B, H, L, D]` into `cache [B, H, C, D]`
    at per-batch sequence positions `pos [B]`: for every batch `b`,
    `result[b, :, pos[b] + t, :] = update[b, :, t, :]` for `t < L`; every
    other slot keeps its cache value. The cache already holds `pos[b]` tokens
    of batch `b`, so after the write it holds `pos[b] + L`; slots at and
    beyond that length are not real keys.

    `pos[b] + L <= C` must hold at run time; the reference and the runtime
    reject a write past the capacity, naming the batch and the position.

    ```mlir
    %k2 = kvattn.append %k_new into %k_cache at %pos
        : tensor<2x2x4x64xf16> into tensor<2x2x1024x64xf16>, tensor<2xi32>
    ```

    **Paged KV.** With `block_table [B, max_pages]` (i32/i64), `cache` is a
    cache of pages `[num_pages, page_size, H, D]` shared by all sequences,
    in the layout that `kvattn.attention` reads through the same table.
    Token `p = pos[b] + t` (`t < L`) of batch `b` goes to row
    `p % page_size` of page `block_table[b, p / page_size]`:
    `result[block_table[b, p / page_size], p % page_size, :, :] =
    update[b, :, t, :]`; every other row of every page keeps its value.

    The table follows the rules of paged attention (docs/semantics.md):
    every entry `-1` or a page id in `[0, num_pages)`, nothing but `-1`
    after the first `-1`, no page twice in one sequence. The written tokens
    must lie in the sequence's pages, `0 <= pos[b]` and
    `pos[b] + L <= (pages of b) * page_size`, and no two sequences may write
    the same row of a shared page. The verifier checks the table when it is
    a constant, and the writes too when `pos` is also a constant; otherwise
    the reference (and kvattn-run before compiled code) checks them, each
    error naming the batch, the slot and the value.

    **Padding tokens.** With `skip_padding` (paged only) a token whose
    table entry is `-1` is a padding token: it writes nothing and is not an
    error (vLLM's slot `-1`, the tokens a CUDA graph pads a batch with). The
    written tokens must then lie in the table's slots, `pos[b] + L <=
    max_pages * page_size`, and padding tokens take no part in the
    shared-row rule; every other rule is unchanged (a page id outside
    `[0, num_pages)` other than `-1`, or a negative `pos`, is still an
    error). One token per sequence through a one-column table is how
    `kvattn.torch.concat_and_cache_mla` writes a padded batch:

    ```mlir
    %c2 = kvattn.append %rows into %cache at %pos
        block_table(%bt : tensor<?x1xi32>) skip_padding
        : tensor<?x1x1x576xbf16> into tensor<?x64x1x576xbf16>, tensor<?xi64>
    ```

    **Rotary embedding (RoPE).** With `rope = #kvattn.rope<...>` the
    update is rotated in f32 before the write, token `t` of batch `b` at its
    position `pos[b] + t`, and cast to the cache's element type at the write
    (the attribute's formula; `rotary_dim <= D`). With `rope_pos(%rec)`
    (`[B, C]` i32/i64, needs `rope` and a static cache) the op also returns
    the record updated: `rope_pos_result[b, pos[b] + t] = pos[b] + t`, every
    other slot kept. `kvattn.attention` takes it as `k_rope_pos` and refuses
    keys attended at any other position. A `rope` without `theta` takes the
    cosines and sines of token `(b, t)` from row `pos[b] + t` of
    `rotary_cos` and `rotary_sin` (`[P, rotary_dim / 2]`, f32/f16/bf16, as
    on `kvattn.attention`); a position at or past `P` is an error.

    ```mlir
    %k2, %k2_pos = kvattn.append %k_new into %k_cache at %pos
        rope = #kvattn.rope<rotary_dim = 64, theta = 10000.0>
        rope_pos(%k_pos : tensor<2x1024xi32>)
        : tensor<2x2x4x64xf16> into tensor<2x2x1024x64xf16>, tensor<2xi32>
    ```

    ```mlir
    %kp2 = kvattn.append %k_new into %k_pages at %pos
        block_table(%bt : tensor<2x8xi32>)
        : tensor<2x2x1x64xf16> into tensor<64x16x2x64xf16>, tensor<2xi32>
    ```

    **FP8 caches.** A cache of `f8E4M3FN` or `f8E5M2` codes takes an
    f32, f16 or bf16 update and quantises it with `kv_scale(%s)`, the f32
    scales that `kvattn.attention` reads the cache with (`k_scale` or
    `v_scale` there; given by the caller, as vLLM, SGLang and FlashInfer
    give them): element `x` of token `t` of batch `b`, head `h`, becomes
    `code = RN_satfinite(f32(x) / scale)` with the scale of the cache row
    it is written to (docs/semantics.md, "FP8 KV caches": round to nearest
    even, finite values beyond the largest finite value and infinities
    saturate to it, NaN becomes the NaN code `0x7F`). With `rope` the
    rotated f32 value is quantised (no rounding in between). A scale is per
    tensor (`[1]` or rank 0), per head (`[H]`) or per token and head: the
    cache's shape without its last dimension (`[B, H, C]`; paged
    `[num_pages, page_size, H]`), the scale of a written row at that row's
    indices. An FP8 cache needs `kv_scale`; a scale needs an FP8 cache;
    constant scales must be positive and finite.

    ```mlir
    %k2 = kvattn.append %k_new into %k_cache at %pos
        kv_scale(%k_scale : tensor<1xf32>)
        : tensor<2x2x1x64xbf16> into tensor<2x2x1024x64xf8E4M3FN>,
          tensor<2xi32>
    ```
  }];

  let arguments = (ins
    KVAttn_FloatTensor:$update,
    KVAttn_KvTensor:$cache,
    KVAttn_IndexTensor:$pos,
    Optional<KVAttn_IndexTensor>:$block_table,
    // [B, C] i32/i64: the positions the cached keys were rotated at.
    Optional<KVAttn_IndexTensor>:$rope_pos,
    OptionalAttr<KVAttn_RopeAttr>:$rope,
    // FP8 cache: the f32 scales the update is quantised with (any ranked
    // tensor here, so that the verifier can name the operand and its rule).
    Optional<AnyRankedTensor>:$kv_scale,
    // RoPE from tables: [P, rotary_dim / 2] f32/f16/bf16, row = position.
    Optional<AnyRankedTensor>:$rotary_cos,
    Optional<AnyRankedTensor>:$rotary_sin,
    // Paged: a token whose block-table entry is -1 is padding, not written.
    UnitAttr:$skip_padding
  );
  let results = (outs KVAttn_KvTensor:$result,
                      Optional<KVAttn_IndexTensor>:$rope_pos_result);

  let assemblyFormat = [{
    $update `into` $cache `at` $pos
    (`block_table` `(` $block_table^ `:` type($block_table) `)`)?
    (`skip_padding` $skip_padding^)?
    (`rope` `=` $rope^)?
    (`rotary_cos` `(` $rotary_cos^ `:` type($rotary_cos) `)`)?
    (`rotary_sin` `(` $rotary_sin^ `:` type($rotary_sin) `)`)?
    (`rope_pos` `(` $rope_pos^ `:` type($rope_pos) `)`)?
    (`kv_scale` `(` $kv_scale^ `:` type($kv_scale) `)`)?
    attr-dict `:` type($update) `into` type($cache) `,` type($pos)
  }];

  let hasVerifier = 1;

  let extraClassDeclaration = [{
    /// True when the cache is a cache of pages written through block_table.
    bool isPaged() { return static_cast<bool>(getBlockTable()); }
    /// True when the cache holds FP8 codes (f8E4M3FN or f8E5M2): the
    /// update is quantised with kv_scale.
    bool hasFp8Cache() {
      return ::mlir::isa<::mlir::Float8E4M3FNType, ::mlir::Float8E5M2Type>(
          getCache().getType().getElementType());
    }
    /// The FP8 rules: an FP8 cache needs kv_scale (f32, per tensor, per
    /// head or per token and head), a scale needs an FP8 cache, constant
    /// scales are positive and finite.
    ::mlir::LogicalResult verifyKvScale();
    /// The block-table and write rules, when the table (and pos) are
    /// constants.
    ::mlir::LogicalResult verifyConstantBlockTable();
    /// True when RoPE's cosines and sines come from rotary_cos/rotary_sin.
    bool hasRotaryTables() { return static_cast<bool>(getRotaryCos()); }
  }];
}


//===----------------------------------------------------------------------===//
// kvattn.merge
//===----------------------------------------------------------------------===//

def KVAttn_MergeOp : KVAttn_Op<"merge",
    [Pure, DeclareOpInterfaceMethods<ReifyRankedShapedTypeOpInterface, ["reifyResultShapes"]>]> {
  let summary = "merge partial attention states in a fixed order";
  let description = [{
    Merges `N` partial attention states, each the `(out, lse)` of the same
    queries over a disjoint part of the keys (a KV chunk of split-KV, or the
    keys held by another GPU), into the state over all of them:

    ```
    lse = log(sum_n exp(lse_parts[n]))
    out = sum_n exp(lse_parts[n] - lse) * out_parts[n]
    ```

    Shapes: `out_parts [N, B, Hq, L, Dv]` f32, `lse_parts [N, B, Hq, L]`
    f32; results `out [B, Hq, L, Dv]` (f32, f16 or bf16) and
    `lse [B, Hq, L]` f32 (natural log).

    The parts are combined in index order `n = 0 .. N-1`, never in
    completion order, with a running maximum, so the same inputs give
    bitwise-identical results. `(0, -inf)` is the identity: a part with
    `lse = -inf` (no allowed key) contributes nothing, and merging only
    empty parts gives `(0, -inf)`, never NaN (`-inf - -inf` is not
    evaluated). Accumulation is f32 or wider.
  }];
  let arguments = (ins
    RankedTensorOf<[F32]>:$out_parts,
    RankedTensorOf<[F32]>:$lse_parts
  );
  let results = (outs KVAttn_FloatTensor:$out, KVAttn_LseTensor:$lse);
  let assemblyFormat = [{
    $out_parts `,` $lse_parts attr-dict `:` type($out_parts) `,`
    type($lse_parts) `->` type($out) `,` type($lse)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// kvattn.cascade
//===----------------------------------------------------------------------===//

def KVAttn_CascadeOp : KVAttn_Op<"cascade", [Pure, AttrSizedOperandSegments]> {
  let summary = "shared-prefix (cascade) attention of a ragged batch";
  let description = [{
    Attention of `B` sequences that share a prefix (a system prompt, beam
    search): sequence `b`'s keys are the `P` shared prefix keys
    `prefix_key[0, g, 0 .. P)` at positions `0 .. P - 1`, followed by its
    own suffix keys `key[b, g, j]`, `j < kv_len[b]`, at positions `P + j`.
    Its query rows are the packed rows `q_start[b] .. q_start[b + 1] - 1` of
    `query [1, Hq, T, D]`; row `i` of `b` sits at position
    `P + q_offset[b] + i`. Positions are explicit and `q_offset` counts from
    the end of the prefix, so the prefix lies before every query: every
    query row sees all of it (causal or not), and a negative `q_offset` is
    refused like any negative offset.

    The result is exactly `kvattn.attention` of each sequence's rows over
    its prefix + suffix keys (`causal`, `scale`, `softcap` as there; GQA
    `Hq % Hkv == 0`). `-kvattn-expand-cascade` computes it as (a) ONE
    attention of all `T` rows over the prefix (so the prefix K/V is read
    once per KV head and row block, not once per sequence; mask-free),
    (b) the ragged attention of each sequence's rows over its suffix, and
    (c) `kvattn.merge` of the two states (natural-log LSE, `(0, -inf)` for
    an empty part), in that fixed order.

    Shapes: `query [1, Hq, T, D]`, `prefix_key [1, Hkv, P, D]`,
    `prefix_value [1, Hkv, P, Dv]`, `key [B, Hkv, S, D]`,
    `value [B, Hkv, S, Dv]`, `q_start [B + 1]`, `q_offset [B]`,
    `kv_len [B]` (i32/i64); `out [1, Hq, T, Dv]` in the query's type and an
    optional `lse [1, Hq, T]` f32. The prefix and the suffixes share one
    element type. A sliding window would cut the prefix row by row (no
    longer one mask-free attention for all rows): there is none.

    Paged K/V (docs/semantics.md, "Paged KV"), each level on its own:
    with `prefix_pages(%pp)` (`[prefix_max_pages]` i32/i64) and
    `prefix_len(%n)` (`[1]`) the prefix caches are page pools
    `prefix_key [num_pages, page_size, Hkv, D]` /
    `prefix_value [num_pages, page_size, Hkv, Dv]` and the prefix is the
    `P = prefix_len[0]` keys of pages `prefix_pages[0], [1], ...` (the
    block table of one sequence: ids in `[0, num_pages)`, a `-1` tail, no
    page twice, `P <= pages * page_size`); with `block_table(%bt)`
    (`[B, max_pages]`) the suffix caches are page pools
    `key`/`value [num_pages, page_size, Hkv, D|Dv]` mapped per sequence as
    in `kvattn.attention` (`kv_len[b] <= pages(b) * page_size`). Both may
    name the same pool (a prefix cached once in the serving engine's
    pages). Constant tables are checked by the verifier.

    ```mlir
    %o, %lse = kvattn.cascade %q, %pk, %pv, %k, %v q_start(%qs : tensor<17xi32>)
        q_offset(%qo : tensor<16xi32>) kv_len(%kl : tensor<16xi32>) causal
        : tensor<1x8x16x64xbf16>, tensor<1x2x4096x64xbf16>,
          tensor<1x2x4096x64xbf16>, tensor<16x2x300x64xbf16>,
          tensor<16x2x300x64xbf16>
        -> tensor<1x8x16x64xbf16>, tensor<1x8x16xf32>
    ```
  }];
  let arguments = (ins
    KVAttn_FloatTensor:$query,
    KVAttn_FloatTensor:$prefix_key,
    KVAttn_FloatTensor:$prefix_value,
    KVAttn_FloatTensor:$key,
    KVAttn_FloatTensor:$value,
    KVAttn_IndexTensor:$q_start,
    KVAttn_IndexTensor:$q_offset,
    KVAttn_IndexTensor:$kv_len,
    Optional<KVAttn_IndexTensor>:$prefix_pages,
    Optional<KVAttn_IndexTensor>:$prefix_len,
    Optional<KVAttn_IndexTensor>:$block_table,
    UnitAttr:$causal,
    OptionalAttr<F32Attr>:$softcap,
    OptionalAttr<F32Attr>:$scale
  );
  let results = (outs
    KVAttn_FloatTensor:$out,
    Optional<KVAttn_LseTensor>:$lse
  );
  let assemblyFormat = [{
    $query `,` $prefix_key `,` $prefix_value `,` $key `,` $value
    `q_start` `(` $q_start `:` type($q_start) `)`
    `q_offset` `(` $q_offset `:` type($q_offset) `)`
    `kv_len` `(` $kv_len `:` type($kv_len) `)`
    (`prefix_pages` `(` $prefix_pages^ `:` type($prefix_pages) `)`)?
    (`prefix_len` `(` $prefix_len^ `:` type($prefix_len) `)`)?
    (`block_table` `(` $block_table^ `:` type($block_table) `)`)?
    (`causal` $causal^)?
    (`softcap` `=` $softcap^)?
    (`scale` `=` $scale^)?
    attr-dict `:` type($query) `,` type($prefix_key) `,`
    type($prefix_value) `,` type($key) `,` type($value)
    `->` type($out) (`,` type($lse)^)?
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The shared prefix is paged (prefix_pages, prefix_len).
    bool isPrefixPaged() { return static_cast<bool>(getPrefixPages()); }
    /// The suffixes are paged (block_table).
    bool isPaged() { return static_cast<bool>(getBlockTable()); }
  private:
    ::mlir::LogicalResult verifyConstantTables();
  public:
  }];
}

include "kvattn/Dialect/KVAttnTileOps.td"

#endif // KVATTN_DIALECT_KVATTNOPS_TD
