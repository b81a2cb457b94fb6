//===- KVAttnTileOps.td - the tile program's data ops -----*- tablegen -*-===//
//
// The tile program (produced by -kvattn-tile) is control in scf/arith plus
// these data ops. Each works on the tile of ONE program instance: a block of
// `rows <= BM` query rows of one (batch, query head) and a block of
// `cols <= BN` keys of its kv head. Tiles live in small f32 scratch buffers
// (`memref<BMxBN>` scores, `memref<BMxD>` queries, `memref<BM>` running max
// and sum, `memref<BMxDv>` accumulator); the operands in global layout are
// the op's memrefs [B, H, S, D]. Their meaning is defined here once; the CPU
// lowering (-kvattn-lower-tile-to-loops) turns them into loops, a GPU
// lowering maps the same tiles onto warps and fragments.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_DIALECT_KVATTNTILEOPS_TD
#define KVATTN_DIALECT_KVATTNTILEOPS_TD

include "kvattn/Dialect/KVAttnBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def KVAttn_F32Tile : MemRefRankOf<[F32], [2]>;
def KVAttn_F32Row : MemRefRankOf<[F32], [1]>;
// The query tile: f32, or the query's 16-bit type where the tensor-core GPU
// kernels keep it as the mma operand (-kvattn-assign-tile-layouts).
def KVAttn_QueryTile : MemRefRankOf<[F32, F16, BF16], [2]>;
def KVAttn_GlobalTensor : MemRefRankOf<[F32, F16, BF16], [4]>;
// K and V in global layout: those types, or an FP8 cache read with a scale.
def KVAttn_KvGlobalTensor
    : MemRefRankOf<[F32, F16, BF16, F8E4M3FN, F8E5M2], [4]>;
// The f32 scales of an FP8 cache: [1] or rank 0 (per tensor), [Hkv] (per
// KV head), or the cache's shape without its last dimension (per token and
// head).
def KVAttn_KvScaleMemRef : MemRefOf<[F32]>;
def KVAttn_IndexMemRef : MemRefOf<[I32, I64]>;
// RoPE's tables rotary_cos / rotary_sin [P, rotary_dim / 2].
def KVAttn_RotaryTableMemRef : MemRefRankOf<[F32, F16, BF16], [2]>;

def KVAttn_TileInitOp : KVAttn_Op<"tile.init"> {
  let summary = "initialise the online-softmax state of a program";
  let description = [{
    `max[r] = -inf`, `sum[r] = 0`, `acc[r, :] = 0` for every row of the
    tile.
  }];
  let arguments = (ins
    Arg<KVAttn_F32Row, "", [MemWrite]>:$max,
    Arg<KVAttn_F32Row, "", [MemWrite]>:$sum,
    Arg<KVAttn_F32Tile, "", [MemWrite]>:$acc);
  let assemblyFormat = [{
    $max `,` $sum `,` $acc attr-dict `:` type($max) `,` type($sum) `,` type($acc)
  }];
  let hasVerifier = 1;
}

def KVAttn_TileLoadQOp : KVAttn_Op<"tile.load_q", [AttrSizedOperandSegments]> {
  let summary = "load a block of query rows into the query tile";
  let description = [{
    `q_tile[r, d] = f32(query[batch, head, start + r, d])` for `r < rows`;
    rows `rows <= r < BM` are set to 0. `q_tile` is `[BM, D]`, in f32, or in
    the query's own 16-bit type (the tensor-core GPU kernels, whose tile
    holds the mma's A operand: -kvattn-assign-tile-layouts retypes it), or
    in f16 for a bf16 query without `rope` over an FP8 cache staged in f16:
    row `r` then holds `f16(query row · 2^-s)`, `s = 0` unless a value of
    the row would not be finite in f16, and the GPU lowering multiplies the
    row's dot products in `tile.qk` by `2^s`.

    With `group = G` the tile packs the `G` query heads that share one kv
    head (GQA packing): `start` counts packed rows, and tile row `r` is
    packed row `t = start + r`, which is query row `t / G` of head
    `head + t % G` (`head` is the group's first head). The same rule holds
    for `tile.mask` and `tile.store` with `group`.

    With `rope = #kvattn.rope<...>` each row is rotated as it is loaded, at
    its query position, in f32 (the attribute's formula), and rounded to the
    query's element type unless the attribute says `f32_query`. Tile row `r`
    is the sequence's query row `i = (pos_row + r) / G` (`G` = `group`, or
    1), at position `qp = q_base + i` (offset form: `q_base` is the
    sequence's `q_offset`) or `qp = q_pos[batch, i]` (explicit form). A
    `rope` without theta reads the row's cosines and sines at row `qp` of
    `rotary_cos` and `rotary_sin` (`[P, rotary_dim / 2]`, widened to f32);
    the caller guarantees `qp < P` (kvattn.attention's checks run before).
  }];
  let arguments = (ins
    Arg<KVAttn_GlobalTensor, "", [MemRead]>:$query,
    Index:$batch, Index:$head, Index:$start, Index:$rows,
    Arg<KVAttn_QueryTile, "", [MemWrite]>:$q_tile,
    Optional<Index>:$pos_row, Optional<Index>:$q_base,
    Arg<Optional<KVAttn_IndexMemRef>, "", [MemRead]>:$q_pos,
    OptionalAttr<I64Attr>:$group,
    OptionalAttr<KVAttn_RopeAttr>:$rope,
    Arg<Optional<KVAttn_RotaryTableMemRef>, "", [MemRead]>:$rotary_cos,
    Arg<Optional<KVAttn_RotaryTableMemRef>, "", [MemRead]>:$rotary_sin);
  let assemblyFormat = [{
    $query `[` $batch `,` $head `,` $start `]` `rows` `(` $rows `)`
    (`group` `=` $group^)?
    (`rope` `=` $rope^)?
    (`rotary_cos` `(` $rotary_cos^ `:` type($rotary_cos) `)`)?
    (`rotary_sin` `(` $rotary_sin^ `:` type($rotary_sin) `)`)?
    (`pos_row` `(` $pos_row^ `)`)?
    (`q_base` `(` $q_base^ `)`)?
    (`q_pos` `(` $q_pos^ `:` type($q_pos) `)`)?
    `into` $q_tile attr-dict `:` type($query) `,`
    type($q_tile)
  }];
  let hasVerifier = 1;
}

def KVAttn_TileQKOp : KVAttn_Op<"tile.qk", [AttrSizedOperandSegments]> {
  let summary = "scores of a query tile against a block of keys";
  let description = [{
    For `r < rows`, `c < cols`:
    `s = scale * sum_d q_tile[r, d] * f32(key[batch, kv_head, start + c, d])`,
    then with `softcap`: `s = softcap * tanh(s / softcap)`;
    `scores[r, c] = s`. Columns `cols <= c < BN` of those rows are set to
    `-inf`, so a block that runs past the end of the keys never contributes;
    rows `rows <= r < BM` are left unspecified (no later op reads them).
    `scores` is `[BM, BN]`. Accumulation in f32.

    With `pages(%block_table)` the key is a paged cache
    `[num_pages, page_size, Hkv, D]` and key row `j = start + c` is
    `key[block_table[batch, j / page_size], j % page_size, kv_head, :]`;
    the caller guarantees `start + cols <= kv_len`, so only valid table
    entries are read.

    With an FP8 `key` (`f8E4M3FN`, `f8E5M2`) `kv_scale(%s)` (f32) is
    required and `f32(key[...])` reads `f32(code) * s[...]`: `s[0]` per
    tensor (`[1]` or rank 0), `s[kv_head]` per KV head (`[Hkv]`), or per
    token and head the element of `s` at the key row's indices without the
    last (`[B, Hkv, S]`, paged `[num_pages, page_size, Hkv]`).
  }];
  let arguments = (ins
    Arg<KVAttn_QueryTile, "", [MemRead]>:$q_tile,
    Arg<KVAttn_KvGlobalTensor, "", [MemRead]>:$key,
    Index:$batch, Index:$kv_head, Index:$start, Index:$rows, Index:$cols,
    Arg<KVAttn_F32Tile, "", [MemWrite]>:$scores,
    Arg<Optional<KVAttn_IndexMemRef>, "", [MemRead]>:$block_table,
    Arg<Optional<KVAttn_KvScaleMemRef>, "", [MemRead]>:$kv_scale,
    F32Attr:$scale, OptionalAttr<F32Attr>:$softcap);
  let assemblyFormat = [{
    $q_tile `,` $key `[` $batch `,` $kv_head `,` $start `]`
    (`pages` `(` $block_table^ `:` type($block_table) `)`)?
    (`kv_scale` `(` $kv_scale^ `:` type($kv_scale) `)`)?
    `size` `(` $rows `,` $cols `)`
    `into` $scores `scale` `=` $scale (`softcap` `=` $softcap^)? attr-dict
    `:` type($q_tile) `,` type($key) `,` type($scores)
  }];
  let hasVerifier = 1;
}

def KVAttn_TileMaskOp : KVAttn_Op<"tile.mask", [AttrSizedOperandSegments]> {
  let summary = "apply the position mask to a boundary block";
  let description = [{
    Only emitted for *partial* blocks: blocks where some query of the tile
    may not see some key. For `r < rows`, `c < cols`, with query row
    `i = q_start + r` and key `j = k_start + c`:

    * positions: offset form `qp = q_base + r`, `kp = k_base + c` (the
      bases already include `q_offset[b] + q_start` and
      `k_offset[b] + k_start`); explicit form `qp = q_pos[batch, i]`,
      `kp = k_pos[batch, j]`;
    * the key is allowed when `j < kv_len`, `key_valid[batch, j]` (if
      given), `kp <= qp` (if `causal`), `qp - kp < window` (if `window`),
      `kp - qp <= window_right` (if `window_right`), and
      `mask[batch, head, i, j]` is true (an i1 mask, broadcast);
    * a forbidden key's score becomes `-inf`; a float `mask` is added to the
      allowed scores instead (with the same broadcasting), and with
      `alibi(%slopes, %ref)` (f32 `[Hq]`, an index `d >= 0`) the ALiBi
      bias `-slopes[head'] * |qp - kp|` of the row's query head `head'`
      (this needs positions; a program with ALiBi masks every block),
      **relative to `d`**: softmax is invariant to a per-row constant, so
      the score receives `-slopes[head'] * f32(|qp - kp| - d)`, the
      difference taken exactly in integers, and `tile.store` / `tile.merge`
      given the same `alibi(%slopes, %ref)` add the constant
      `-slopes[head'] * d` (in f64) back into the lse. `d` is the batch's
      (kvattn-tile: the distance of its first query's position to the range
      of its first and last keys' positions), the same in every block,
      program and split-KV chunk of the batch, so that the f32 argument
      stays small and exact (a query near 2^62 over keys near 0).

    With `group = G` (GQA packing, see `tile.load_q`) row `r` is query row
    `i = (q_start + r) / G` of head `head + (q_start + r) % G`; in the offset
    form `q_base` is then the position of query row 0 (`q_offset[b]`) and
    `qp = q_base + i`.
    With `tree(%parents, %row0, %draft_base)` (speculative decoding, offset
    form) the sequence's rows are draft tokens of a tree: local row `i`'s
    parent is `parents[row0 + i]` (-1: a root; values outside
    `[-1, i)` are clamped into it, so the walk always ends), `q_base` is the
    position of local row 0 whatever `q_start` and `group`, and
    `qp = q_base + depth(i)`. Key `j >= draft_base` is draft token
    `a = j - draft_base`: it is allowed only when `a` is `i` or one of its
    ancestors, and its position is `kp = qp - (depth(i) - depth(a))` for the
    causal, window and ALiBi rules; keys below `draft_base` keep
    `kp = k_base + c`.
  }];
  let arguments = (ins
    Arg<KVAttn_F32Tile, "", [MemRead, MemWrite]>:$scores,
    Index:$batch, Index:$head, Index:$q_start, Index:$k_start,
    Index:$rows, Index:$cols, Index:$kv_len,
    Optional<Index>:$q_base, Optional<Index>:$k_base,
    Optional<KVAttn_IndexMemRef>:$q_pos, Optional<KVAttn_IndexMemRef>:$k_pos,
    Optional<MemRefOf<[I1]>>:$key_valid,
    Optional<MemRefOf<[I1, F32, F16, BF16]>>:$mask,
    UnitAttr:$causal, OptionalAttr<I64Attr>:$window,
    OptionalAttr<I64Attr>:$group, OptionalAttr<I64Attr>:$window_right,
    Optional<MemRefRankOf<[F32], [1]>>:$alibi_slopes,
    Optional<Index>:$alibi_ref,
    Optional<MemRefRankOf<[I32, I64], [1]>>:$tree_parents,
    Optional<Index>:$tree_row0, Optional<Index>:$tree_draft_base);
  let assemblyFormat = [{
    $scores `[` $batch `,` $head `,` $q_start `,` $k_start `]`
    `size` `(` $rows `,` $cols `)` `kv_len` `(` $kv_len `)`
    (`offsets` `(` $q_base^ `,` $k_base `)`)?
    (`positions` `(` $q_pos^ `,` $k_pos `:` type($q_pos) `,` type($k_pos) `)`)?
    (`key_valid` `(` $key_valid^ `:` type($key_valid) `)`)?
    (`mask` `(` $mask^ `:` type($mask) `)`)?
    (`alibi` `(` $alibi_slopes^ `,` $alibi_ref `:` type($alibi_slopes)
      `)`)?
    (`tree` `(` $tree_parents^ `,` $tree_row0 `,` $tree_draft_base `:`
      type($tree_parents) `)`)?
    (`causal` $causal^)? (`window` `=` $window^)?
    (`window_right` `=` $window_right^)? (`group` `=` $group^)?
    attr-dict `:` type($scores)
  }];
  let hasVerifier = 1;
}

def KVAttn_TileSoftmaxOp : KVAttn_Op<"tile.softmax_update",
                                     [AttrSizedOperandSegments]> {
  let summary = "online-softmax update with one block of values";
  let description = [{
    For every row `r < rows` of the tile, with the block's scores
    `s[c] = scores[r, c]` (`-inf` for forbidden keys):

    ```
    m_new = max(max[r], max_c s[c])
    if m_new == -inf: continue          // nothing allowed yet in this row
    alpha = exp(max[r] - m_new)         // 0 when max[r] == -inf
    p[c] = exp(s[c] - m_new)            // 0 for forbidden keys
    sum[r] = alpha * sum[r] + sum_c p[c]
    acc[r, :] = alpha * acc[r, :] + sum_{c < cols, p[c] != 0} p[c] * f32(value[batch, kv_head, start + c, :])
    max[r] = m_new
    ```

    In f32. A NaN score propagates to its row (the maximum is NaN-aware).
    Keys with `p[c] == 0` (forbidden ones) are skipped rather than
    multiplied by zero, so a NaN or infinite value at a forbidden key never
    reaches the row.

    With `pages(%block_table)` the value is a paged cache, read as in
    `kvattn.tile.qk`. With `key_valid(%valid)` (`[B, S]`) the values of keys
    whose validity is false are never read: targets that multiply every
    value row by its probability (tensor cores) use zeros in their place,
    so a NaN or infinite value of an invalid key cannot reach a row.

    `all_allowed(%full)` (an `i1`) states, when `%full` is true, that the
    block is full: every key of `[start, start + cols)` is owned, valid and
    allowed for every row `< rows`, so no score was forbidden by a mask.
    A target may then multiply every value by its probability instead of
    testing it for 0 (the CPU lowering does; the result differs only for a
    non-finite value at an allowed key whose weight underflows, which then
    propagates as in the reference). `-kvattn-tile` passes its full-block
    test; a block with `%full` false, or without the operand, is lowered
    as above.

    An FP8 `value` is read with `kv_scale(%s)` as in `kvattn.tile.qk`.

    With `latent` (the latent form of `kvattn.attention`, DeepSeek MLA)
    `value` is the key cache itself, `[.., D]` with `D >= Dv`, and the value
    row of key `j` is its first `Dv` columns (`Dv` = `acc`'s columns):
    `value[batch, kv_head, j, 0 .. Dv-1]`; the other columns are never read.
  }];
  let arguments = (ins
    Arg<KVAttn_F32Tile, "", [MemRead]>:$scores,
    Arg<KVAttn_KvGlobalTensor, "", [MemRead]>:$value,
    Index:$batch, Index:$kv_head, Index:$start, Index:$rows, Index:$cols,
    Arg<KVAttn_F32Row, "", [MemRead, MemWrite]>:$max,
    Arg<KVAttn_F32Row, "", [MemRead, MemWrite]>:$sum,
    Arg<KVAttn_F32Tile, "", [MemRead, MemWrite]>:$acc,
    Arg<Optional<KVAttn_IndexMemRef>, "", [MemRead]>:$block_table,
    Arg<Optional<MemRefOf<[I1]>>, "", [MemRead]>:$key_valid,
    Optional<I1>:$all_allowed,
    Arg<Optional<KVAttn_KvScaleMemRef>, "", [MemRead]>:$kv_scale,
    UnitAttr:$latent);
  let assemblyFormat = [{
    $scores `,` $value `[` $batch `,` $kv_head `,` $start `]`
    (`latent` $latent^)?
    (`pages` `(` $block_table^ `:` type($block_table) `)`)?
    (`kv_scale` `(` $kv_scale^ `:` type($kv_scale) `)`)?
    (`key_valid` `(` $key_valid^ `:` type($key_valid) `)`)?
    (`all_allowed` `(` $all_allowed^ `)`)?
    `size` `(` $rows `,` $cols `)` `state` `(` $max `,` $sum `,` $acc `)`
    attr-dict `:` type($scores) `,` type($value) `,` type($max) `,`
    type($sum) `,` type($acc)
  }];
  let hasVerifier = 1;
}

def KVAttn_TileStoreOp : KVAttn_Op<"tile.store", [AttrSizedOperandSegments]> {
  let summary = "the epilogue: normalise and write a program's rows";
  let description = [{
    For `r < rows`, `i = start + r`: when `max[r] == -inf` (no allowed key)
    `out[batch, head, i, :] = 0` and `lse[batch, head, i] = -inf`;
    otherwise `out[batch, head, i, :] = acc[r, :] / sum[r]` converted to
    `out`'s element type (round to nearest even) and
    `lse[batch, head, i] = max[r] + log(sum[r])` (natural log).

    With `group = G` (GQA packing, see `tile.load_q`) row `r` is query row
    `(start + r) / G` of head `head + (start + r) % G`.

    With `sinks(%sinks)` (f32 `[Hq]`, attention sinks) the row's sink
    `z = sinks[head']` (`head'` the row's query head) joins the denominator
    and contributes no value: with `m = max(max[r], z)`,
    `sum' = exp(max[r] - m) * sum[r] + exp(z - m)`,
    `out = acc[r, :] * exp(max[r] - m) / sum'` and `lse = m + log(sum')`;
    a row without allowed keys gets `out = 0`, `lse = z` (`-inf` only when
    `z = -inf` too).

    With `alibi(%slopes, %ref)` (ALiBi, see `tile.mask`: the state's
    scores are relative to the row's constant
    `c = -slopes[head'] * ref`, in f64) the row's keys have
    `lse_keys = max[r] + log(sum[r]) + c` (`-inf` without allowed keys),
    the sink joins as `z - c` in the normalisation of `out`, and
    `lse = hi + log(1 + exp(lo - hi))` for `hi`, `lo` the larger and the
    smaller of `z` and `lse_keys` (so that a large `c` does not round the
    sink's own logit away). A split-KV chunk (no sinks) stores its raw,
    relative state without it, and `tile.merge` adds it; a chunk of a
    ragged batch, whose merge does not know a row's sequence, stores its
    part with it (`lse_keys`, absolute) and its merge takes no `alibi`.
  }];
  let arguments = (ins
    Arg<KVAttn_F32Row, "", [MemRead]>:$max,
    Arg<KVAttn_F32Row, "", [MemRead]>:$sum,
    Arg<KVAttn_F32Tile, "", [MemRead]>:$acc,
    Arg<KVAttn_GlobalTensor, "", [MemWrite]>:$out,
    Arg<Optional<MemRefRankOf<[F32], [3]>>, "", [MemWrite]>:$lse,
    Index:$batch, Index:$head, Index:$start, Index:$rows,
    OptionalAttr<I64Attr>:$group,
    Arg<Optional<MemRefRankOf<[F32], [1]>>, "", [MemRead]>:$sinks,
    Arg<Optional<MemRefRankOf<[F32], [1]>>, "", [MemRead]>:$alibi_slopes,
    Optional<Index>:$alibi_ref);
  let assemblyFormat = [{
    `state` `(` $max `,` $sum `,` $acc `)` `into` $out
    (`lse` `(` $lse^ `:` type($lse) `)`)?
    (`sinks` `(` $sinks^ `:` type($sinks) `)`)?
    (`alibi` `(` $alibi_slopes^ `,` $alibi_ref `:` type($alibi_slopes)
      `)`)?
    `[` $batch `,` $head `,` $start `]` `rows` `(` $rows `)`
    (`group` `=` $group^)? attr-dict
    `:` type($max) `,` type($sum) `,` type($acc) `,` type($out)
  }];
  let hasVerifier = 1;
}

def KVAttn_TileMergeOp : KVAttn_Op<"tile.merge", [AttrSizedOperandSegments]> {
  let summary = "merge the split-KV partial states of a block of rows";
  let description = [{
    The epilogue of split-KV: the partial states `out_parts [N, B, Hq, L,
    Dv]` and `lse_parts [N, B, Hq, L]` (f32, one part per KV chunk) of rows
    `i = start + r`, `r < rows`, of `(batch, head)` are merged with the
    arithmetic of `kvattn.merge`: parts in index order `n = 0 .. N-1`, the
    largest lse first, parts with `lse = -inf` skipped, so that an all-empty
    row gives `out = 0`, `lse = -inf` and never NaN. `out` receives the
    merged output converted to its element type (round to nearest even),
    `lse` (optional) the merged natural-log lse.

    With `sinks(%sinks)` (f32 `[Hq]`) the head's sink joins the merge once,
    as one more part with `lse = sinks[head]` and a zero output (the parts
    are the chunks' raw states, without it): a row whose parts are all
    empty gets `out = 0`, `lse = sinks[head]`.

    With `alibi(%slopes, %ref)` the parts are the chunks' relative states
    (see `tile.mask`, `tile.store`): they merge as they are, the sink joins
    as `sinks[head] - c` for the output's weights
    (`c = -slopes[head] * ref`, f64) and the lse is that of `tile.store`,
    from `z` and the merged parts' lse plus `c`.
  }];
  let arguments = (ins
    Arg<MemRefRankOf<[F32], [5]>, "", [MemRead]>:$out_parts,
    Arg<MemRefRankOf<[F32], [4]>, "", [MemRead]>:$lse_parts,
    Arg<KVAttn_GlobalTensor, "", [MemWrite]>:$out,
    Arg<Optional<MemRefRankOf<[F32], [3]>>, "", [MemWrite]>:$lse,
    Index:$batch, Index:$head, Index:$start, Index:$rows,
    Arg<Optional<MemRefRankOf<[F32], [1]>>, "", [MemRead]>:$sinks,
    Arg<Optional<MemRefRankOf<[F32], [1]>>, "", [MemRead]>:$alibi_slopes,
    Optional<Index>:$alibi_ref);
  let assemblyFormat = [{
    $out_parts `,` $lse_parts `[` $batch `,` $head `,` $start `]`
    `rows` `(` $rows `)` `into` $out (`lse` `(` $lse^ `:` type($lse) `)`)?
    (`sinks` `(` $sinks^ `:` type($sinks) `)`)?
    (`alibi` `(` $alibi_slopes^ `,` $alibi_ref `:` type($alibi_slopes)
      `)`)?
    attr-dict `:` type($out_parts) `,` type($lse_parts) `,` type($out)
  }];
  let hasVerifier = 1;
}

def KVAttn_TilePrefetchOp : KVAttn_Op<"tile.prefetch"> {
  let summary = "announce the KV block the next tile.qk will read";
  let description = [{
    A schedule hint with no effect on values: the next `kvattn.tile.qk` of
    this program reads rows `start .. start + cols` of `key[batch, kv_head]`
    (through `pages(%block_table)` when paged, as in `tile.qk`), so a target
    may start loading them now. The GPU lowering does (`cp.async` into the
    K staging block while the current block's softmax runs); the CPU
    lowering drops the op. `cols = 0` announces that there is no next
    block. The tile pass emits one before the KV loop and one after each
    `tile.qk` when `num-stages >= 2`.
  }];
  // No declared memory effects: the op is kept where the schedule put it
  // (an op with only read effects and no result would be dead code).
  let arguments = (ins
    KVAttn_KvGlobalTensor:$key,
    Index:$batch, Index:$kv_head, Index:$start, Index:$cols,
    Optional<KVAttn_IndexMemRef>:$block_table);
  let assemblyFormat = [{
    $key `[` $batch `,` $kv_head `,` $start `]`
    (`pages` `(` $block_table^ `:` type($block_table) `)`)?
    `size` `(` $cols `)` attr-dict `:` type($key)
  }];
  let hasVerifier = 1;
}

def KVAttn_TileKeyRecordOp : KVAttn_Op<"tile.key_record"> {
  let summary = "name the RoPE record the program's keys are checked against";
  let description = [{
    The keys this program reads were rotated by RoPE at the positions in
    `record[B, S]` (`kvattn.attention`'s `k_rope_pos`), and the program
    attends each key at its own position: the two must agree for every
    valid key (docs/semantics.md, "The RoPE record"). The program reads no
    value of the record; the agreement is a precondition that is checked
    before the program runs: on the host by the reference's checks, on the
    GPU with device validation by the attention kernel's validation kernel
    (rule 28 of the status word, docs/kernel-abi.md).

    The op keeps the record among the program's operands, so that the
    outlined kernel takes it as a parameter (role `k_rope_pos`) for its
    validation kernel to read. -kvattn-outline-tile-programs drops it once
    the parameter exists; the CPU lowerings drop it. The tile pass emits one
    at the start of the program when the attention has `k_rope_pos`.

    ```mlir
    kvattn.tile.key_record %record : memref<2x4096xi32>
    ```
  }];
  // No declared memory effects: an op with only read effects and no result
  // would be dead code, and the record would leave the kernel's parameters.
  let arguments = (ins MemRefRankOf<[I32, I64], [2]>:$record);
  let assemblyFormat = "$record attr-dict `:` type($record)";
}

#endif // KVATTN_DIALECT_KVATTNTILEOPS_TD
