//===- Passes.td - kvattn passes ---------------------------*- tablegen -*-===//

#ifndef KVATTN_PASSES_PASSES_TD
#define KVATTN_PASSES_PASSES_TD

include "mlir/Pass/PassBase.td"

def ResolveCachedAppendPass : Pass<"kvattn-resolve-cached-append"> {
  let summary = "Rewrite framework SDPA over a KV cache into position-explicit "
                "attention, and lint upper-left cached appends";
  let description = [{
    Rewrites every `kvattn.sdpa` into `kvattn.attention` with the query and
    key positions made explicit, preserving the op's meaning exactly:

    * keys and values produced by `kvattn.append` into a cache of capacity C
      at per-batch positions `pos` (the cache already holds `pos[b]` tokens
      and L new ones are written): a causal SDPA becomes
      `q_offset = pos + (shift)`, and every SDPA gets `kv_len = pos + L`, so
      unused cache slots are invalid keys;
    * keys and values that are a `tensor.concat` (or `tensor.insert_slice`)
      of a cache of length P and the L new rows along the sequence axis:
      `q_offset = P`, static or dynamic;
    * otherwise `lower_right` gives `q_offset = S - L` and `upper_left`
      `q_offset = 0`.

    A mask that depends only on the key (`[B, 1, 1, S]` or `[1, 1, 1, S]`
    or rank-2 `[1, S]`) becomes key validity (`i1`) or stays an additive
    mask; any other mask is carried as the general mask operand.

    The lint: an `upper_left` causal SDPA whose keys come from a cache append
    with a possibly non-empty cache almost always hides the cached-append
    bug: the appended rows see only the first keys. The pass keeps the
    faithful (upper-left) meaning and emits a warning that says so and how
    to fix it. With `fix-upper-left-appends=true` it rewrites the op to the
    lower-right positions instead and emits a remark.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::tensor::TensorDialect",
  ];
  let options = [
    Option<"fixUpperLeftAppends", "fix-upper-left-appends", "bool",
           /*default=*/"false",
           "Rewrite upper-left causal SDPA over a cache append to lower-right "
           "positions (and emit a remark) instead of keeping the upper-left "
           "meaning with a warning">,
  ];
}

#endif // KVATTN_PASSES_PASSES_TD
