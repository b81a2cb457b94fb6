//===- KVAttnBase.td - kvattn dialect definition ----------*- tablegen -*-===//
//
// The kvattn dialect: attention over a KV cache with explicit positions.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_DIALECT_KVATTNBASE_TD
#define KVATTN_DIALECT_KVATTNBASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def KVAttn_Dialect : Dialect {
  let name = "kvattn";
  let cppNamespace = "::mlir::kvattn";
  // Tiling kvattn.attention (TilingInterface) slices tensors, shifts
  // offsets with arith and folds tile offsets with affine.apply.
  let dependentDialects = ["::mlir::affine::AffineDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect"];
  // The typed metadata of KVAttnAttrs.td, and their verifier wherever they
  // appear as discardable attributes (kvattn.role, kvattn.tile_config,
  // kvattn.params).
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  // kvattn.vector_layout on a function argument (a CPU tile passed in).
  let hasRegionArgAttrVerify = 1;
  let extraClassDeclaration = [{
    /// The attributes of KVAttnAttrs.td (KVAttnAttrs.cpp).
    void registerAttributes();
  }];
  let summary = "Attention over a KV cache with explicit query/key positions";
  let description = [{
    The `kvattn` dialect describes scaled dot-product attention whose causal
    structure is stated in positions rather than inferred from tensor shapes.

    Two levels live side by side:

    * framework-facing ops (`kvattn.sdpa`, `kvattn.append`) keep the meaning
      of the framework call they model, PyTorch's
      `scaled_dot_product_attention` and a static KV-cache write;
    * the position-explicit op `kvattn.attention` carries per-batch query and
      key positions (offsets or explicit position tensors), the number of
      valid keys, key validity, and causal / sliding-window / softcap
      attributes. Its meaning is defined by the semantics contract in
      `docs/semantics.md`, implemented literally by the scalar reference
      (`lib/Reference`).

    The cached-append bug (a causal triangle aligned to the first key when
    queries are the *suffix* of the key sequence) cannot be expressed at the
    second level: a causal `kvattn.attention` must say where its queries are.
  }];
}

class KVAttn_Op<string mnemonic, list<Trait> traits = []>
    : Op<KVAttn_Dialect, mnemonic, traits>;

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

// Element types of Q, K, V and of the attention output.
def KVAttn_FloatTensor : RankedTensorOf<[F32, F16, BF16]>;
// Element types of K and V in kvattn.attention: those of Q, or an FP8 cache
// (f8E4M3FN, f8E5M2) with k_scale / v_scale.
def KVAttn_KvTensor : RankedTensorOf<[F32, F16, BF16, F8E4M3FN, F8E5M2]>;
// Per-batch positions, offsets and lengths.
def KVAttn_IndexTensor : RankedTensorOf<[I32, I64]>;
// Key validity: true means the key is a real token.
def KVAttn_BoolTensor : RankedTensorOf<[I1]>;
// A general mask: i1 (true = allowed) or float (additive bias).
def KVAttn_MaskTensor : RankedTensorOf<[I1, F32, F16, BF16]>;
// Log-sum-exp of each query row, natural log, always f32.
def KVAttn_LseTensor : RankedTensorOf<[F32]>;

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def KVAttn_CausalAlignment_UpperLeft
    : I32EnumAttrCase<"upper_left", 0>;
def KVAttn_CausalAlignment_LowerRight
    : I32EnumAttrCase<"lower_right", 1>;

def KVAttn_CausalAlignmentAttr : I32EnumAttr<"CausalAlignment",
    "alignment of the causal triangle of a framework SDPA call",
    [KVAttn_CausalAlignment_UpperLeft, KVAttn_CausalAlignment_LowerRight]> {
  let cppNamespace = "::mlir::kvattn";
}

#endif // KVATTN_DIALECT_KVATTNBASE_TD
