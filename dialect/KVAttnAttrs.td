//===- KVAttnAttrs.td - kvattn attributes ------------------*- tablegen -*-===//
//
// The metadata the passes leave on the tile programs and kernels, typed:
//
//   kvattn.role        on the op that defines a program's buffer (-kvattn-tile,
//                      -kvattn-append-to-gpu, -kvattn-device-validation): which
//                      operand it is, the kernel parameter it becomes;
//   kvattn.tile_config on a tile program (scf.forall) and the kernel outlined
//                      from it: the schedule the launch manifest records;
//   kvattn.params      on a kernel: its parameters in order, each a
//                      #kvattn.param, what the launch manifest is written from
//                      (docs/kernel-abi.md).
//
// Each is read and written through one accessor (KVAttnAttrs.h), and the
// dialect verifies the discardable attributes wherever they appear.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_DIALECT_KVATTNATTRS_TD
#define KVATTN_DIALECT_KVATTNATTRS_TD

include "kvattn/Dialect/KVAttnBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

class KVAttn_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<KVAttn_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def KVAttn_BufferRole : I32EnumAttr<"BufferRole",
    "the operand of a tile program or kernel a buffer holds", [
      I32EnumAttrCase<"query", 0>,
      I32EnumAttrCase<"key", 1>,
      I32EnumAttrCase<"value", 2>,
      I32EnumAttrCase<"q_offset", 3>,
      I32EnumAttrCase<"k_offset", 4>,
      I32EnumAttrCase<"q_pos", 5>,
      I32EnumAttrCase<"k_pos", 6>,
      I32EnumAttrCase<"kv_len", 7>,
      I32EnumAttrCase<"key_valid", 8>,
      I32EnumAttrCase<"mask", 9>,
      I32EnumAttrCase<"block_table", 10>,
      I32EnumAttrCase<"q_start", 11>,
      I32EnumAttrCase<"out", 12>,
      I32EnumAttrCase<"lse", 13>,
      I32EnumAttrCase<"out_parts", 14>,
      I32EnumAttrCase<"lse_parts", 15>,
      I32EnumAttrCase<"update", 16>,
      I32EnumAttrCase<"cache", 17>,
      I32EnumAttrCase<"pos", 18>,
      I32EnumAttrCase<"status", 19>,
      I32EnumAttrCase<"sinks", 20>,
      I32EnumAttrCase<"alibi_slopes", 21>,
      I32EnumAttrCase<"tree_parents", 22>,
      I32EnumAttrCase<"k_start", 23>,
      I32EnumAttrCase<"cache_batch_idx", 24>,
      I32EnumAttrCase<"k_scale", 25>,
      I32EnumAttrCase<"v_scale", 26>,
      I32EnumAttrCase<"rotary_cos", 27>,
      I32EnumAttrCase<"rotary_sin", 28>,
      I32EnumAttrCase<"k_rope_pos", 29>]> {
  let cppNamespace = "::mlir::kvattn";
  let genSpecializedAttr = 0;
}

def KVAttn_KernelKind : I32EnumAttr<"KernelKind",
    "what a tile program or kernel computes (the launch manifest's kind)", [
      I32EnumAttrCase<"attention", 0>,
      I32EnumAttrCase<"attention_varlen", 1>,
      I32EnumAttrCase<"merge", 2>,
      I32EnumAttrCase<"append", 3>,
      I32EnumAttrCase<"validate", 4>]> {
  let cppNamespace = "::mlir::kvattn";
  let genSpecializedAttr = 0;
}

def KVAttn_ParamKind : I32EnumAttr<"ParamKind",
    "a kernel parameter: a bare pointer to a buffer, an i64 size or the "
    "device address of the launch's TMA tensor maps", [
      I32EnumAttrCase<"pointer", 0>,
      I32EnumAttrCase<"scalar", 1>,
      I32EnumAttrCase<"tensor_maps", 2>]> {
  let cppNamespace = "::mlir::kvattn";
  let genSpecializedAttr = 0;
}

def KVAttn_TileRole : I32EnumAttr<"TileRole",
    "what a scratch tile of a tile program holds (kvattn.tile_role)", [
      I32EnumAttrCase<"query", 0>,
      I32EnumAttrCase<"accumulator", 1>,
      I32EnumAttrCase<"scores", 2>,
      I32EnumAttrCase<"row_stats", 3>,
      I32EnumAttrCase<"stage", 4>]> {
  let cppNamespace = "::mlir::kvattn";
  let genSpecializedAttr = 0;
}

def KVAttn_MmaShape : I32EnumAttr<"MmaShape",
    "the tensor-core instruction whose register fragments a layout follows", [
      I32EnumAttrCase<"mma_m16n8k16", 0>,
      I32EnumAttrCase<"wgmma_m64nNk16", 1>]> {
  let cppNamespace = "::mlir::kvattn";
  let genSpecializedAttr = 0;
}

def KVAttn_FragmentOperand : I32EnumAttr<"FragmentOperand",
    "which operand's register fragment of the instruction a layout is", [
      I32EnumAttrCase<"accumulator", 0>,
      I32EnumAttrCase<"a_operand", 1>,
      I32EnumAttrCase<"b_operand", 2>]> {
  let cppNamespace = "::mlir::kvattn";
  let genSpecializedAttr = 0;
}

def KVAttn_VectorAxis : I32EnumAttr<"VectorAxis",
    "the tile dimension a CPU vector runs along", [
      I32EnumAttrCase<"rows", 0>,
      I32EnumAttrCase<"columns", 1>]> {
  let cppNamespace = "::mlir::kvattn";
  let genSpecializedAttr = 0;
}

def KVAttn_TensorCoreMode : I32EnumAttr<"TensorCoreMode",
    "how a GPU kernel computes Q.K^T and P.V", [
      I32EnumAttrCase<"scalar", 0>,
      I32EnumAttrCase<"mma_sync", 1>,
      I32EnumAttrCase<"wgmma", 2>]> {
  let cppNamespace = "::mlir::kvattn";
  let genSpecializedAttr = 0;
}

def KVAttn_ParamAccess : I32EnumAttr<"ParamAccess",
    "whether a kernel reads or writes a pointer parameter's buffer", [
      I32EnumAttrCase<"read", 0>,
      I32EnumAttrCase<"write", 1>]> {
  let cppNamespace = "::mlir::kvattn";
  let genSpecializedAttr = 0;
}

//===----------------------------------------------------------------------===//
// kvattn.role
//===----------------------------------------------------------------------===//

def KVAttn_BufferRoleAttr
    : EnumAttr<KVAttn_Dialect, KVAttn_BufferRole, "role"> {
  let summary = "the operand a buffer holds (kvattn.role)";
  let description = [{
    Marks the op that defines a tile program's buffer (`bufferization.to_buffer`
    of an operand, `memref.alloc` of a result or of split-KV partial states):

    ```mlir
    %q = bufferization.to_buffer %arg0 read_only {kvattn.role = #kvattn.role<query>}
        : tensor<2x8x100x64xf16> to memref<2x8x100x64xf16>
    ```

    -kvattn-outline-tile-programs names the kernel parameters after the roles
    and derives their symbolic shapes from them.
  }];
  let assemblyFormat = "`<` $value `>`";
}

//===----------------------------------------------------------------------===//
// kvattn.tile_config
//===----------------------------------------------------------------------===//

def KVAttn_SplitRuleAttr : KVAttn_Attr<"SplitRule", "split_rule"> {
  let summary = "how the runtime chooses a split-KV chunk count";
  let description = [{
    On both kernels of a split whose chunk count is chosen at run time
    (`split_kv = 0`): the runtime computes the count N from the sizes, the
    device's multiprocessors and this rule (docs/kernel-abi.md, "Run-time
    split"): `max` chunks at most, the attention's `block_m`, `block_n` and
    `group`, `programs_per_sm` resident programs per multiprocessor, chunks of
    at least `min_keys` keys, `num_sms` multiprocessors planned for (0: the
    device's).
  }];
  let parameters = (ins "int64_t":$max, "int64_t":$block_m,
                        "int64_t":$block_n, "int64_t":$group,
                        "int64_t":$programs_per_sm, "int64_t":$min_keys,
                        "int64_t":$num_sms);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def KVAttn_TileConfigAttr : KVAttn_Attr<"TileConfig", "tile_config"> {
  let summary = "a tile program's schedule (kvattn.tile_config)";
  let description = [{
    Written by -kvattn-tile on each program (`scf.forall`), carried to the
    kernel outlined from it, and recorded in the launch manifest:

    ```mlir
    } {kvattn.tile_config = #kvattn.tile_config<kind = attention, block_m = 64,
        block_n = 64, num_warps = 4, num_stages = 2>}
    ```

    `kind`: attention, attention_varlen (ragged batch), merge (a split's
    merge), append (a cache write), validate (a validation kernel, with the
    kernel it `validates`). `block_m` query rows (tokens for append) per
    program, `block_n` keys per KV block (0 when there are none),
    `num_warps` (1 to 32), `num_stages`, `split_kv` KV chunks (1: none, 0:
    chosen at run time by `split_rule`), `group` query heads per program
    (GQA packing), `vector_width` elements per access of an append kernel.
  }];
  let parameters = (ins
    EnumParameter<KVAttn_KernelKind>:$kind,
    "int64_t":$block_m,
    "int64_t":$block_n,
    "int64_t":$num_warps,
    "int64_t":$num_stages,
    DefaultValuedParameter<"int64_t", "1">:$split_kv,
    DefaultValuedParameter<"int64_t", "1">:$group,
    DefaultValuedParameter<"int64_t", "0">:$vector_width,
    OptionalParameter<"::mlir::kvattn::SplitRuleAttr">:$split_rule,
    OptionalParameter<"::mlir::FlatSymbolRefAttr">:$validates);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

//===----------------------------------------------------------------------===//
// kvattn.params
//===----------------------------------------------------------------------===//

def KVAttn_KernelParamAttr : KVAttn_Attr<"KernelParam", "param"> {
  let summary = "one kernel parameter (an element of kvattn.params)";
  let description = [{
    A kernel takes each buffer as a bare pointer and then its sizes as
    integers (docs/kernel-abi.md). `kvattn.params` on the kernel lists them in
    order, as the launch manifest does:

    ```mlir
    kvattn.params = [
      #kvattn.param<name = "query", kind = pointer, element_type = f16,
                    shape = ["B", 8, "L", 64]>,
      #kvattn.param<name = "out", kind = pointer, element_type = f16,
                    shape = ["B", 8, "L", 64], access = write>,
      #kvattn.param<name = "B", kind = scalar, element_type = i64>]
    ```

    A pointer has a `shape` (each dim a non-negative integer or the name of
    the size it is) and an `access` (read by default); a scalar is an i64
    and has neither. A `tensor_maps` parameter (element type i64, the
    address of the encoded maps: docs/kernel-abi.md, "Tensor maps") has
    `maps`, one dictionary per map: `name`, `buffer` (a pointer
    parameter), `dims` and `box` (i64 arrays, innermost first), `swizzle`
    ("none", "32B", "64B", "128B"), `element_type` and `oob_fill` ("zero"
    or "nan").
  }];
  let parameters = (ins
    StringRefParameter<"the parameter's name">:$name,
    EnumParameter<KVAttn_ParamKind>:$kind,
    "::mlir::Type":$element_type,
    OptionalParameter<"::mlir::ArrayAttr">:$shape,
    DefaultValuedParameter<"::mlir::kvattn::ParamAccess",
                           "::mlir::kvattn::ParamAccess::read">:$access,
    OptionalParameter<"::mlir::ArrayAttr">:$maps);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// A pointer parameter; `shape` holds integers and size names.
    static KernelParamAttr getPointer(::mlir::MLIRContext *context,
                                      ::llvm::StringRef name,
                                      ::mlir::Type elementType,
                                      ::mlir::ArrayAttr shape,
                                      ParamAccess access);
    /// An i64 size parameter.
    static KernelParamAttr getScalar(::mlir::MLIRContext *context,
                                     ::llvm::StringRef name);
    /// A tensor_maps parameter with its maps (dictionaries).
    static KernelParamAttr getTensorMaps(::mlir::MLIRContext *context,
                                         ::llvm::StringRef name,
                                         ::mlir::ArrayAttr maps);
    bool isPointer() const { return getKind() == ParamKind::pointer; }
    bool isWritten() const { return getAccess() == ParamAccess::write; }
  }];
}

//===----------------------------------------------------------------------===//
// kvattn.rope
//===----------------------------------------------------------------------===//

def KVAttn_RopeAttr : KVAttn_Attr<"Rope", "rope"> {
  let summary = "a rotary position embedding (RoPE) applied inside an op";
  let description = [{
    The rotary embedding that `kvattn.attention` applies to its query and
    `kvattn.append` to the keys it writes, each at the op's own positions
    (the query positions `qp`, the written tokens' `pos[b] + t`):

    ```mlir
    #kvattn.rope<rotary_dim = 64, theta = 10000.0>
    #kvattn.rope<rotary_dim = 32, theta = 500000.0, interleaved, f32_query>
    ```

    For a vector `x[0 .. D)` at position `p`, with `R = rotary_dim` (even,
    `2 <= R <= D`: partial rotary when `R < D`, the dimensions from `R` on
    pass through) and pair `k < R / 2`:

    * with `theta`: `inv_freq[k] = f32(theta ^ (-2k / R))`, `angle =
      f32(f32(p) * inv_freq[k])` (f32 arithmetic, as frameworks compute
      their tables), `c = cos(angle)`, `s = sin(angle)`;
    * without `theta` the op's tables give them (FlashAttention's
      `rotary_cos` / `rotary_sin`, `[P, R / 2]`, row = position; any
      frequency scaling, linear, NTK, YaRN or Llama 3, is in the tables):
      `c = f32(rotary_cos[p, k])`, `s = f32(rotary_sin[p, k])`;
    * GPT-NeoX halves (default): the pair is `(x[k], x[k + R/2])`;
      `interleaved` (GPT-J): the pair is `(x[2k], x[2k + 1])`;
    * `(a, b) -> (a c - b s, b c + a s)`, in f32.

    ```mlir
    #kvattn.rope<rotary_dim = 64>                 // angles from the tables
    #kvattn.rope<rotary_dim = 64, interleaved>
    ```

    An op whose `rope` has no `theta` takes `rotary_cos` and `rotary_sin`;
    one whose `rope` has a `theta` takes neither (the ops' verifiers).

    The rotated keys are cast to the cache's element type where they are
    written. The rotated query is cast to the query's element type before
    the products (what a framework that rotates, then calls attention,
    computes), unless `f32_query`: then it stays f32 (nothing is rounded
    between the rotation and the product).
  }];
  // theta: an f64 FloatAttr, null when the op's cos/sin tables give the
  // angles' cosines and sines.
  let parameters = (ins "int64_t":$rotary_dim,
                        OptionalParameter<"::mlir::FloatAttr">:$theta,
                        "bool":$interleaved, "bool":$f32_query);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// inv_freq[k] as the semantics define it (f32 of theta^(-2k/R)); only
    /// with theta.
    float getInvFreq(int64_t k) const;
    /// theta, or std::nullopt when the op's tables give cos and sin.
    std::optional<double> getThetaValue() const {
      if (!getTheta())
        return std::nullopt;
      return getTheta().getValueAsDouble();
    }
    /// True when the op's rotary_cos / rotary_sin tables give the angles'
    /// cosines and sines (no theta).
    bool usesTables() const { return !getTheta(); }
  }];
}

//===----------------------------------------------------------------------===//
// kvattn.tile_role and kvattn.fragment_layout (-kvattn-assign-tile-layouts)
//===----------------------------------------------------------------------===//

def KVAttn_TileRoleAttr
    : EnumAttr<KVAttn_Dialect, KVAttn_TileRole, "tile_role"> {
  let summary = "what a scratch tile of a GPU kernel holds (kvattn.tile_role)";
  let description = [{
    Written by -kvattn-assign-tile-layouts on each `memref.alloca` of an
    outlined kernel's tile program, read by -kvattn-lower-tile-to-gpu (which
    refuses a kernel whose tiles have none):

    ```mlir
    %acc = memref.alloca() {kvattn.tile_role = #kvattn.tile_role<accumulator>,
        kvattn.fragment_layout = #kvattn.fragment_layout<mma_m16n8k16,
            rows_per_lane = 2, tiles_per_warp = 1, accumulator>} : memref<64x64xf32>
    ```

    `query`: the tile of `tile.load_q` (on tensor cores the pass retypes it
    to the query's 16-bit type, the mma's operand); `accumulator`: the `acc`
    of `tile.init` (each lane's entries in registers); `scores`: the scores
    of `tile.qk` (registers when the schedule keeps them there);
    `row_stats`: the running max and sum of `tile.init` (registers on tensor
    cores); `stage`: a K/V staging tile (the lowering creates today's stages
    itself, from the shared memory layout).
  }];
  let assemblyFormat = "`<` $value `>`";
}

def KVAttn_FragmentLayoutAttr
    : KVAttn_Attr<"FragmentLayout", "fragment_layout"> {
  let summary = "which lane of a warp holds which element of a tile";
  let description = [{
    The register fragment of a tensor-core instruction that a tile's
    entries follow (docs/gpu-lowering.md, "The thread mapping"): the lane
    that owns each element, and so the private registers a lane keeps.

    ```mlir
    #kvattn.fragment_layout<mma_m16n8k16, rows_per_lane = 4, tiles_per_warp = 2, accumulator>
    #kvattn.fragment_layout<wgmma_m64nNk16, rows_per_lane = 2, tiles_per_warp = 1, accumulator>
    ```

    * `mma_m16n8k16`: `mma.sync.aligned.m16n8k16`'s fragments. A warp owns
      `16 * tiles_per_warp` rows (1 or 2 m16 tiles stacked); lane `l` holds
      rows `l / 4 + 8k`, `k < rows_per_lane` (= 2 per tile) and, in each
      8-column slice, columns `2 (l % 4) + {0, 1}`. The accumulator (C/D)
      and the A operand (`a0a1`, `a2a3`, ... over two slices) have this row
      ownership; the B operand (`b0b1`, `b2b3`: columns `l / 4`, rows
      `2 (l % 4) + {0, 1}` and `+ 8` of a k16 x n8 slice) too, transposed.
    * `wgmma_m64nNk16`: `wgmma.mma_async`'s m64 accumulator: the warpgroup's
      four warps own 16 rows each, per warp the m16n8 pattern over the N / 8
      slices (`rows_per_lane = 2`, `tiles_per_warp = 1`). Its A operand in
      registers (RS) has the same ownership; its B operand is read from
      shared memory, never from registers.

    The verifier checks those shapes. The GPU lowering builds its
    `FragmentLayout` (passes/Conversion/TileToGPU/FragmentLayout.h) from the
    accumulator's attribute.
  }];
  let parameters = (ins EnumParameter<KVAttn_MmaShape>:$shape,
                        "int64_t":$rows_per_lane,
                        "int64_t":$tiles_per_warp,
                        EnumParameter<KVAttn_FragmentOperand>:$operand);
  let assemblyFormat = [{
    `<` $shape `,` `rows_per_lane` `=` $rows_per_lane `,`
        `tiles_per_warp` `=` $tiles_per_warp `,` $operand `>`
  }];
  let genVerifyDecl = 1;
}

def KVAttn_VectorLayoutAttr : KVAttn_Attr<"VectorLayout", "vector_layout"> {
  let summary = "which vector lane of a CPU program holds which element of a tile";
  let description = [{
    The CPU's counterpart of `#kvattn.fragment_layout`: how the vectorised
    CPU lowering (-kvattn-lower-tile-to-vectors) stores a scratch tile and
    which lane of which vector register holds each element. Written by
    -kvattn-assign-vector-layouts on each tile of a program (the defining
    `memref.alloca`, or a function argument's attribute), read by the
    lowering, which refuses a tile without one:

    ```mlir
    %q = memref.alloca() {kvattn.vector_layout =
        #kvattn.vector_layout<rows, width = 16, few_rows = 8>} : memref<64x128xf32>
    %acc = memref.alloca() {kvattn.vector_layout =
        #kvattn.vector_layout<columns, width = 16>} : memref<64x128xf32>
    ```

    * `rows`: vectors run over the tile's rows (query rows). The tile
      `[R, C]` is stored transposed (`[C][R]` in its buffer), and element
      `(r, c)` is lane `r % width` of the vector `(c, r / width)`: Q.K^T is
      a sum of outer products with one broadcast key element per FMA, the
      online softmax of `width` rows is vertical. A 1-D row tile (the
      running maximum and sum) has lane `r % width` of vector `r / width`.
      `few_rows = n` (> 0): a program of at most `n` rows (tested at run
      time, the same test in every op of the program) holds the tile
      row-major instead, with vectors of 16 lanes along its columns (the
      few-rows form of a decode step's GQA group).
    * `columns`: the tile is row-major and vectors run along a row: element
      `(r, c)` is lane `c % width` of the vector `(r, c / width)` (the P.V
      accumulator: vectors over the value dimension).

    `width` is a power of two from 1 to 16 (f32 lanes); `few_rows` is 0 to
    64, and 0 on a `columns` layout.
  }];
  let parameters = (ins EnumParameter<KVAttn_VectorAxis>:$axis,
                        "int64_t":$width,
                        DefaultValuedParameter<"int64_t", "0">:$few_rows);
  let assemblyFormat = [{
    `<` $axis `,` `width` `=` $width (`,` `few_rows` `=` $few_rows^)? `>`
  }];
  let genVerifyDecl = 1;
}

//===----------------------------------------------------------------------===//
// kvattn.gpu_schedule, kvattn.value_prefetch, kvattn.key_prefetch
//===----------------------------------------------------------------------===//

def KVAttn_GpuScheduleAttr : KVAttn_Attr<"GpuSchedule", "gpu_schedule"> {
  let summary = "the schedule of a GPU attention kernel (kvattn.gpu_schedule)";
  let description = [{
    Written by -kvattn-assign-tile-layouts on each outlined attention kernel,
    obeyed by -kvattn-lower-tile-to-gpu (docs/gpu-lowering.md, "Tile roles,
    fragment layouts and the schedule"):

    ```mlir
    kvattn.gpu_schedule = #kvattn.gpu_schedule<mode = mma_sync,
        pipeline_depth = 2, scores_in_registers = true,
        query_in_registers = true>
    ```

    `mode`: how Q.K^T and P.V run (`scalar` FMAs, `mma_sync`
    m16n8k16, `wgmma` m64nNk16). `pipeline_depth`: K blocks in flight, 1
    (each `tile.qk` loads its own) or 2 (each `tile.prefetch` issues the
    next block one step ahead). `tma_key_stages` / `tma_value_stages`: the
    stages of the K and V rings of TMA (0: no TMA; wgmma kernels only; a
    K ring without a V ring is the latent form's, whose V is the K stage).
    `scores_in_registers`: the lanes keep their scores and probabilities in
    registers (the score tile gets no shared memory; tensor cores only).
    `query_in_registers`: each warp keeps its query A fragments in registers
    across the KV loop (mma.sync only). `producer_warps`: the warps of a
    producer warpgroup after the consumers' (0, or 4 on a TMA kernel: it
    issues every K/V box, docs/gpu-lowering.md "The producer warpgroup as
    built"). `lazy_rescale`: a row keeps its running maximum while a block
    raises it by at most 2^8, and a warp rescales its accumulator only when
    one of its rows took a new one (tensor cores only; docs/gpu-lowering.md
    "Lazy rescaling"). `ping_pong`: the two consumer warpgroups of a TMA
    kernel take turns at the tensor cores (named barriers: one's `P.V` and
    next `Q.K^T` while the other computes its softmax; wgmma kernels with a
    producer warpgroup only; docs/gpu-lowering.md "Ping-pong").
    `intra_warpgroup_overlap`: a block's `P.V` is issued after the next
    block's `Q.K^T` and runs during that block's softmax (the tile program's
    first KV block peeled off its loop; `kvattn.pending_pv` on the `tile.qk`
    ops that issue the previous block's `P.V`; wgmma kernels with a producer
    warpgroup and two V stages, not the latent form; docs/gpu-lowering.md
    "Intra-warpgroup overlap").
  }];
  let parameters = (ins
    EnumParameter<KVAttn_TensorCoreMode>:$mode,
    "int64_t":$pipeline_depth,
    DefaultValuedParameter<"int64_t", "0">:$tma_key_stages,
    DefaultValuedParameter<"int64_t", "0">:$tma_value_stages,
    DefaultValuedParameter<"bool", "false">:$scores_in_registers,
    DefaultValuedParameter<"bool", "false">:$query_in_registers,
    DefaultValuedParameter<"int64_t", "0">:$producer_warps,
    DefaultValuedParameter<"bool", "false">:$lazy_rescale,
    DefaultValuedParameter<"bool", "false">:$ping_pong,
    DefaultValuedParameter<"bool", "false">:$intra_warpgroup_overlap);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

//===----------------------------------------------------------------------===//
// kvattn.shared_memory, kvattn.shared_offset
//===----------------------------------------------------------------------===//

def KVAttn_SharedMemoryAttr : KVAttn_Attr<"SharedMemory", "shared_memory"> {
  let summary = "a GPU attention kernel's shared memory "
                "(kvattn.shared_memory)";
  let description = [{
    Written by -kvattn-assign-tile-layouts on each outlined attention kernel
    beside `kvattn.shared_offset` on each scratch tile it places in shared
    memory; -kvattn-lower-tile-to-gpu builds its views at these byte offsets
    (docs/gpu-lowering.md, "Shared memory"):

    ```mlir
    kvattn.shared_memory = #kvattn.shared_memory<bytes = 163904,
        key_stage = 32768, value_stage = 65536, key_stage1 = 98304,
        value_stage1 = 131072, barriers = 163840>
    ```

    `bytes`: the kernel's dynamic shared memory (its
    `kvattn.dynamic_smem_bytes`). `key_stage`: the K staging block (the one
    K/V block of the scalar lowering). `value_stage`: V's own staging block
    (16-bit K/V with 16-byte rows). `key_stage1`, `value_stage1`,
    `barriers`: the TMA ring's second stages and its eight mbarriers
    (`value_stage1` equals `value_stage` with one V stage, `key_stage1` in
    the latent form). `exchange`, `exchange_probs`: a wgmma value split's
    row maxima and probabilities (the latent form). Absent fields print
    nothing (-1). The verifier checks every offset lies in `bytes`.
  }];
  let parameters = (ins
    "int64_t":$bytes,
    "int64_t":$key_stage,
    DefaultValuedParameter<"int64_t", "-1">:$value_stage,
    DefaultValuedParameter<"int64_t", "-1">:$key_stage1,
    DefaultValuedParameter<"int64_t", "-1">:$value_stage1,
    DefaultValuedParameter<"int64_t", "-1">:$barriers,
    DefaultValuedParameter<"int64_t", "-1">:$exchange,
    DefaultValuedParameter<"int64_t", "-1">:$exchange_probs);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

//===----------------------------------------------------------------------===//
// kvattn.stage_sync
//===----------------------------------------------------------------------===//

def KVAttn_StageSyncAttr : KVAttn_Attr<"StageSync", "stage_sync"> {
  let summary = "where a tile op waits for the K/V stage it reads "
                "(kvattn.stage_sync)";
  let description = [{
    Written by -kvattn-assign-tile-layouts on each `tile.qk` and
    `tile.softmax_update` of a tensor-core kernel whose K/V blocks arrive by
    `cp.async` (mma.sync, and wgmma without the TMA ring), from an analysis
    of the program's stage reads and copies (docs/gpu-lowering.md, "Stage
    synchronisation"); -kvattn-lower-tile-to-gpu emits what it says at the
    op's sync point: before the op reads its stage and issues the copies
    the schedule pairs with it (`kvattn.value_prefetch`,
    `kvattn.key_prefetch`), after the copies it issues itself.

    ```mlir
    kvattn.tile.qk ... {kvattn.stage_sync = #kvattn.stage_sync<wait_copies = 0, barrier = true>}
    ```

    `barrier_before_copies`: a CTA barrier before the op's own copies (a
    stage they overwrite was read by other threads since the last barrier).
    `wait_copies = N`: `cp.async.wait_group N`, the copy groups that may
    still be in flight (the stage's group is older); absent (-1): no wait.
    `proxy_fence`: `fence.proxy.async` after the wait (wgmma reads the
    stage through the async proxy). `barrier`: a CTA barrier after them
    (the stage, copied by every thread, is visible to every thread; the
    reads before it are done before the copies issued after it). An op
    whose stage is already waited for and published has none
    (`#kvattn.stage_sync<>`).
  }];
  let parameters = (ins
    DefaultValuedParameter<"bool", "false">:$barrier_before_copies,
    DefaultValuedParameter<"int64_t", "-1">:$wait_copies,
    DefaultValuedParameter<"bool", "false">:$proxy_fence,
    DefaultValuedParameter<"bool", "false">:$barrier);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // KVATTN_DIALECT_KVATTNATTRS_TD
