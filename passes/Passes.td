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

    * keys produced by `kvattn.append` of L rows at per-batch positions
      `pos` into a static cache: `kv_len = pos + L` (the slots past the
      write are no tokens, kvattn.append's contract) and, for lower-right,
      `q_offset = pos` (the queries are the appended rows);
    * keys that are a `tensor.concat` along the sequence axis of a cache of
      length P and the L new rows, or a `tensor.insert_slice` of them at P
      that ends the buffer: lower-right gives `q_offset = P`, static or
      dynamic;
    * otherwise lower-right gives `q_offset = max(S - L, 0)` (and
      `k_offset = max(L - S, 0)`), upper-left `q_offset = 0`.

    An `i1` mask that depends only on the key, `[B, 1, 1, S]`, becomes key
    validity; every other mask (and every float mask: its finite values are
    biases) is carried as the general mask operand.

    The lint: an `upper_left` causal SDPA whose keys come from a cache append
    with a possibly non-empty cache almost always hides the cached-append
    bug: the appended rows see only the first keys. The pass keeps the
    faithful (upper-left) meaning and emits a warning that says so and how
    to fix it. With `fix-upper-left-appends=true` it rewrites the op to the
    lower-right positions instead and emits a remark.

    RoPE applied by the framework (HF transformers' `apply_rotary_pos_emb`,
    GPT-J's interleaved form, partial rotary; cos/sin from positions and a
    constant inv_freq, or gathered from tables at the positions) on the
    query, and on the new keys of the `kvattn.append` that feeds the SDPA,
    becomes `rope = #kvattn.rope<...>` on `kvattn.attention` (the
    un-rotated query, at its own positions) and on the append (the
    un-rotated keys, at theirs) when the positions the framework rotated at
    provably equal those of the resolved ops (`fuse-rope`, default on).
    When they provably differ the pass warns, naming both (a RoPE/cache
    position mismatch), and leaves the rotation as written; when unknown it
    leaves it silently. The meaning is the same in every case
    (docs/passes.md).
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
    Option<"fuseRope", "fuse-rope", "bool", /*default=*/"true",
           "Move RoPE that the framework applied to the query and to the "
           "appended keys into kvattn.attention and kvattn.append "
           "(#kvattn.rope), where the positions it was applied at provably "
           "are the positions the resolved ops use">,
  ];
}


def RaiseSdpaPass : Pass<"kvattn-raise-sdpa"> {
  let summary = "Raise scaled dot-product attention written in linalg or "
                "TOSA to kvattn.sdpa";
  let description = [{
    Recognises SDPA in upstream dialects and rewrites it into `kvattn.sdpa`
    (or, for a causal mask at an offset that `kvattn.sdpa` cannot say,
    `kvattn.attention` with `q_offset`), so that
    `-kvattn-resolve-cached-append` and the kvattn pipelines can take it.
    Starting from the P·V product, the pass walks back through:

    * the softmax over the key (last) dimension: `linalg.softmax`, its
      decomposed linalg form (row max, `exp(x - max)`, row sum, divide or
      multiply by the reciprocal), or the TOSA form (`tosa.reduce_max`,
      `tosa.sub`, `tosa.exp`, `tosa.reduce_sum`, `tosa.reciprocal`,
      `tosa.mul`);
    * an optional mask: an added float tensor (kept as the general mask), a
      select with `-inf` by an `i1` tensor (kept as the general mask), or a
      causal condition `key <= query + c` computed from `linalg.index` /
      `tensor.generate` indices or given as a constant triangle, or a
      constant ALiBi bias `-slope_h * |i + c - j|` per head (with or without
      `-inf` where `j > i + c`; a constant, or computed from `linalg.index`
      and constants alone, evaluated at compile time), which becomes
      `kvattn.attention ... q_offset(c) alibi_slopes(...)` (causal with the
      `-inf` part);
    * optional constant splat scales, on the scores or on Q (their product
      becomes `scale`; no scale means `scale = 1.0`, never the default
      `1 / sqrt(D)`);
    * the Q·Kᵀ product: a linalg contraction (`linalg.matmul`,
      `linalg.batch_matmul`, with or without `indexing_maps`, a
      `linalg.generic`) or `tosa.matmul`, with a transpose of K looked
      through.

    Ranks 2 to 4 are accepted (`[batch..., L, D]`); lower ranks gain unit
    leading dimensions around the kvattn op. The causal offset `c` maps to
    `causal = upper_left` when `c = 0`, `causal = lower_right` when
    `c = S - L` (both static, no other mask), and otherwise to
    `kvattn.attention ... q_offset(c) causal` (a dynamic `c`, such as a
    cache position argument, included): the offset is a position, never a
    guess from shapes. A chain that looks like attention but differs in a
    way that matters (softmax or a reduction over another dimension, a mask
    broadcast on the wrong axis, a scale that is not a constant splat, a
    scale applied after the mask, a transpose that does not swap the last
    two dimensions, non-zero inits or zero points) is left unchanged with a
    remark that says why.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::kvattn::KVAttnDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::tensor::TensorDialect",
  ];
  let options = [
    Option<"remarks", "remarks", "bool", /*default=*/"true",
           "Emit a remark on every attention-shaped chain that is not "
           "raised, saying why">,
  ];
}

def LowerAppendPass : Pass<"kvattn-lower-append"> {
  let summary = "Lower kvattn.append to per-batch tensor.insert_slice";
  let description = [{
    Rewrites `kvattn.append %new into %cache at %pos` into a loop over the
    batch that inserts `new[b]` into `cache[b]` at sequence offset `pos[b]`
    (`scf.for` carrying the cache tensor, `tensor.insert_slice`), which
    bufferizes in place. The write bounds (`0 <= pos[b] <= C - L`) are a
    run-time precondition that the caller validates (kvattn-run does so
    with the reference before running compiled code).

    The paged form (`block_table`) becomes a loop over the batch and the
    `L` new tokens: token `p = pos[b] + t` goes to row `p % page_size` of
    page `block_table[b, p / page_size]`, as the `[H, D]` slice
    `update[b, :, t, :]` inserted into `[1, 1, H, D]` of the pages. Both
    loops carry the pages tensor, so the writes bufferize in place. The
    table rules and `pos[b] + L <= pages(b) * page_size` are, likewise, a
    precondition (the verifier checks constants; kvattn-run runs the
    reference first).

    With `rope` the update is first rotated (a `tensor.generate`, f32, cast
    to the cache's type: passes/RotaryEmbedding.h) and with `rope_pos` the
    record is written token by token.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::math::MathDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect",
    "::mlir::vector::VectorDialect",
  ];
}

def TilePass : Pass<"kvattn-tile", "::mlir::ModuleOp"> {
  let summary = "Tile kvattn.attention into a Triton-style program";
  let description = [{
    Rewrites every `kvattn.attention` into the target-independent tile
    program (docs/tile-program.md):

    * a grid of program instances, `scf.forall` over
      (batch x query head, query block of `block-m` rows);
    * per program, the visible KV-block range computed at run time from the
      positions: the causal upper bound from the block's largest query
      position, the window lower bound from its smallest, `kv_len`; blocks
      outside it are never loaded;
    * each visible block classified as *full* (every query of the program
      may see every key: no mask arithmetic) or *partial*
      (`kvattn.tile.mask`, under `scf.if`);
    * an `scf.for` over the visible blocks doing `kvattn.tile.qk`, the mask
      on partial blocks, and `kvattn.tile.softmax_update` (online softmax
      in f32); `kvattn.tile.store` writes `out` (and `lse`).

    The explicit-position form loads every block below `kv_len` and masks
    each (positions need not be monotone). Operands are taken as buffers
    (`bufferization.to_buffer`) and results are fresh allocations returned
    as tensors, ready for One-Shot Bufferize.

    GQA packing (`pack-gqa`, on by default): for few query rows
    (`L < block-m`) and `G = Hq / Hkv > 1`, the grid runs over
    (batch x kv head, block of `block-m` packed rows), packed row `t` being
    query row `t / G` of head `kv_head * G + t % G`; the tile ops carry
    `group = G`. Each K/V block is then loaded once per group instead of once
    per query head.

    `num-warps` and `num-stages` are recorded on the grid
    (`kvattn.tile_config`, with `group` and `split_kv`) for the GPU
    lowering. With `stats=true` each program adds its loaded, masked and
    skipped block counts and the bytes of K and V it reads to the public
    global `@kvattn_tile_stats` (memref<4xi64>): the very values that bound
    its loop.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect",
    "::mlir::kvattn::KVAttnDialect",
  ];
  let options = [
    Option<"blockM", "block-m", "int64_t", /*default=*/"64",
           "Query rows per program (BM); 0: chosen per op (16, 32 or 64 "
           "rows: the fewest warps that hold its rows)">,
    Option<"blockN", "block-n", "int64_t", /*default=*/"64",
           "Keys per KV block (BN); 0: 64 for D <= 128, else 32; 32 for "
           "one-warp programs (block-m 16) with D > 64; 128 with wgmma for "
           "whole-warpgroup programs at D = Dv = 64">,
    Option<"numWarps", "num-warps", "int64_t", /*default=*/"0",
           "Warps per program (recorded for the GPU lowering); 0: "
           "block-m / 16">,
    Option<"numStages", "num-stages", "int64_t", /*default=*/"2",
           "Software-pipeline depth of K/V loads: >= 2 announces each KV "
           "block one step ahead (kvattn.tile.prefetch) for the GPU "
           "lowering; 1: no prefetch">,
    Option<"stats", "stats", "bool", /*default=*/"false",
           "Count loaded, masked and skipped KV blocks in "
           "@kvattn_tile_stats">,
    Option<"splitKv", "split-kv", "int64_t", /*default=*/"1",
           "Split each program's visible KV range into this many chunks, "
           "each a program instance writing a partial state, merged in "
           "chunk order by kvattn.merge (CPU path); 0 chooses from the "
           "number of programs and num-sms">,
    Option<"numSms", "num-sms", "int64_t", /*default=*/"132",
           "Multiprocessors of the target device, for split-kv=0 "
           "(132: H100/H200)">,
    Option<"splitMinKeys", "split-min-keys", "int64_t", /*default=*/"0",
           "split-kv=0: the fewest keys a chunk may cover (0: one KV block); "
           "below it a chunk's merge costs more than its parallelism gains">,
    Option<"splitWarpsPerSm", "split-warps-per-sm", "int64_t",
           /*default=*/"0",
           "split-kv=0: enough chunks for this many resident warps per "
           "multiprocessor (0: two programs per multiprocessor)">,
    Option<"packGqa", "pack-gqa", "bool", /*default=*/"true",
           "GQA packing: when L < block-m and Hq/Hkv > 1 (static), one "
           "program takes the query rows of all heads that share a kv head, "
           "so each K/V block is read once per group">,
    Option<"maxPosition", "max-position", "int64_t",
           /*default=*/"4611686018427387904",
           "The largest position the kernels compute (2^62; the GPU "
           "pipeline sets 2^31 - 2 for 32-bit index arithmetic): a window "
           "above it admits every earlier key and is emitted as "
           "max-position + 1, which the index arithmetic holds">,
    Option<"maxWarpRows", "max-warp-rows", "int64_t", /*default=*/"16",
           "The most query rows per warp of the automatic block choice (16 "
           "or 32). 32 (the GPU pipeline on tensor cores): programs of more "
           "than 64 rows with 16-bit K/V and D = Dv <= 128 take 128 rows on "
           "4 warps, two m16 tiles per "
           "warp (block-m = 32 x num-warps), where two such programs fit "
           "shared-memory-per-sm">,
    Option<"sharedMemoryPerSm", "shared-memory-per-sm", "int64_t",
           /*default=*/"0",
           "Shared memory per multiprocessor in bytes (0: no limit): "
           "max-warp-rows=32 takes 128-row programs only where two of them "
           "(and 1 KB reserved each) fit">,
    Option<"wgmma", "wgmma", "bool", /*default=*/"false",
           "sm_90a's wgmma lowering (the GPU pipeline for chip=sm_90a on "
           "tensor cores): automatic programs of up to two warpgroups "
           "(128 rows on 16-row warps) at D and Dv multiples of 64 up to "
           "256 with 16-bit K/V in Q's type, and with block-n = 0 128-key "
           "blocks at D, Dv <= 128, 96 or 64 above">,
    Option<"tensorCores", "tensor-cores", "bool", /*default=*/"false",
           "The GPU's tensor-core lowering runs the programs (the GPU "
           "pipeline sets it with its tensor-cores): automatic blocks of "
           "16-bit K/V with 128 < D <= 256 and 64 rows or more take 64 keys "
           "(the scores then stay in registers) and 128 rows on 8 warps "
           "where one such program fits shared-memory-per-sm">,
  ];
}

def LowerTileToLoopsPass : Pass<"kvattn-lower-tile-to-loops"> {
  let summary = "Lower the tile ops to scalar loops (the CPU lowering)";
  let description = [{
    Expands `kvattn.tile.*` into `scf.for` nests over `memref.load` and
    `memref.store`, f32 arithmetic and `math.exp`/`math.log`/`math.tanh`,
    exactly as each op's description defines it. The loops over the head
    dimension are innermost and unit-stride so LLVM vectorises them.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect",
  ];
}


def AssignVectorLayoutsPass : Pass<"kvattn-assign-vector-layouts"> {
  let summary = "Write the vector layouts of the CPU tile programs' tiles";
  let description = [{
    Tags every tile of the CPU tile programs (the `memref.alloca` defining
    it, or the function argument it is) with the `#kvattn.vector_layout`
    -kvattn-lower-tile-to-vectors lowers it in, from the tile ops that use
    it:

    * the query tile (`tile.load_q`, `tile.qk`), the scores (`tile.qk`,
      `tile.mask`, `tile.softmax_update`) and the running maximum and sum
      (`tile.init`, `tile.softmax_update`): `rows`, stored transposed with
      vectors of `width` query rows, the widest power of two up to
      `vector-width` that divides the tile's rows; with `few_rows =
      few-rows` (programs of at most that many rows hold them row-major,
      decided at run time);
    * the accumulator (`tile.init`, `tile.softmax_update`, `tile.store`):
      `columns`, vectors over the value dimension of the widest power of
      two up to `vector-width` that divides it.

    A tile that two uses give different layouts is an error by name; so is a
    tile that is neither an op's result nor a function's argument.
    Tiles that already have a layout keep it (an embedder's choice, which
    the lowering checks).
  }];
  let options = [
    Option<"vectorWidth", "vector-width", "int64_t", /*default=*/"0",
           "f32 lanes per vector at most: 1, 2, 4, 8 or 16 (0: the host's "
           "widest, 16 with AVX-512)">,
    Option<"fewRows", "few-rows", "int64_t", /*default=*/"8",
           "Programs of at most this many rows run the few-rows form (dot "
           "products along D); 0: every program runs the column form; at "
           "most 64">,
  ];
  let dependentDialects = ["::mlir::kvattn::KVAttnDialect"];
}

def LowerTileToVectorsPass : Pass<"kvattn-lower-tile-to-vectors"> {
  let summary = "Lower the tile ops to register-tiled vector code (the fast "
                "CPU lowering)";
  let description = [{
    The CPU lowering of `-kvattn-tile`'s program in SIMD form. The query
    tile and the score tile are kept transposed (`[D][BM]`, `[BN][BM]`), so
    that vectors run over *query rows* where the work is per row:

    * `tile.qk` is a sum of outer products, `scores[c, r..r+W) +=
      key[c, d] * q[d, r..r+W)`, register-tiled over a few keys and a few
      row vectors with one broadcast key element per FMA;
    * the online softmax is vertical: the row maxima and sums of `W` rows
      are one vector each, with no horizontal reductions;
    * `tile.mask` is vectorised for the offset form (causal, window,
      `kv_len`, `key_valid`); explicit positions and general masks are
      applied element by element.

    Programs of few rows (at most `few-rows`, 8 by default: a decode step's
    GQA group) run the *few-rows form* instead, chosen at run time from the
    program's row count, the same test in every op of a program: the query
    and score tiles are row-major, `tile.qk` computes dot products along `D`
    (16 accumulators, one per (row, key) pair of a register tile of 16 keys
    x 1 row, 8 x 2 or 4 x 4, each a vector over 16 elements of `D`, reduced
    by a transpose of the 16 accumulators into one vector of 16 scores), and
    the softmax statistics and the mask run with vectors over keys. Vectors
    over rows would leave most lanes idle there (4 of 16 for a GQA group of
    4). This form's vectors have 16 lanes whatever `vector-width` is (LLVM
    splits them on narrower hosts), so its results do not depend on it.

    `P.V` runs on the row-major accumulator with vectors over the value
    dimension, `acc[r, x..x+V) = alpha[r] * acc[r, x..x+V) + sum_c p[c, r] *
    value[c, x..x+V)`, register-tiled over rows and value chunks and only
    over the op's rows (full vectors even for a decode step's few rows);
    each FMA is masked by `p != 0`, so the value of a forbidden key never
    reaches a row (the op's contract).

    Every sum runs in the order the scalar lowering uses (over `d`, then
    over `c`, one row per lane), so the result does not depend on the
    vector width. `math.exp` and `math.tanh` are expanded into polynomial
    approximations (MLIR's), which vectorise. Init, merge and prefetch use
    the scalar lowering (their tiles' layout does not matter).

    The layouts and widths are not chosen here: each tile's
    `#kvattn.vector_layout` (-kvattn-assign-vector-layouts, which the
    kvattn-to-cpu pipeline runs just before) says which form and width
    (`W`, `V`) it is lowered in. A tile op whose tile has no layout, or whose
    tiles' layouts disagree (the query, scores, maximum and sum of a program
    share one `rows` layout; the accumulator is `columns`; a width divides
    the dimension its vectors run along) is refused by name before anything
    is rewritten.
  }];
  let options = [
    Option<"pagedBlocks", "paged-blocks", "bool", /*default=*/"true",
           "Paged caches: a block that a loop reads more than once (P.V "
           "over several row tiles, Q.K^T over several row groups) is first "
           "copied into a contiguous [BN, D] scratch, and tile.prefetch "
           "prefetches the next block's rows; both with one block-table "
           "lookup per page (false: every read goes through the table, "
           "tile.prefetch is dropped)">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect",
  ];
}

def OutlineTileProgramsPass
    : Pass<"kvattn-outline-tile-programs", "::mlir::ModuleOp"> {
  let summary = "Outline each tile program into a GPU kernel";
  let description = [{
    Moves the body of every tiled `scf.forall` (the program of one
    `kvattn.attention`, see -kvattn-tile) into a `gpu.func` kernel of the
    `gpu.module @kvattn_kernels`, and replaces the forall with the
    `gpu.launch_func` that runs it: one thread block per program
    (grid x = B * Hq, grid y = ceil(L / block-m)), `32 * num-warps` threads,
    the program's tiles in dynamic shared memory.

    The kernel ABI is bare pointers and scalars: one pointer per operand
    buffer in the fixed order query, key, value, q_offset, k_offset, q_pos,
    k_pos, kv_len, key_valid, mask, out, lse (absent operands are left out),
    then the sizes B, Hq, Hkv, L, S (64-bit). Inside, the [B, H, S, D] views
    are rebuilt from the sizes (`memref.reinterpret_cast`); the pointers are
    typed `memref<1xT>` in the signature so that the bare-pointer calling
    convention applies. The kernel carries its ABI (`kvattn.params`), its
    tile configuration and its dynamic shared memory size
    (`kvattn.dynamic_smem_bytes`) for the launch manifest.

    With `tensor-cores` (default) a program whose K/V types and shapes allow
    it (f16/bf16, D % 16 == 0, Dv % 8 == 0, block-n % 16 == 0) is marked
    `kvattn.tensor_cores`: -kvattn-lower-tile-to-gpu then lowers it on
    tensor cores with the scores in registers, which is why the decision,
    and the shared memory it implies, is taken here. With `wgmma` (the
    sm_90a pipeline) such a program that fits the wgmma lowering (whole
    warpgroups of 16-row warps, D and Dv multiples of 64 up to 256, scores
    in registers;
    `canUseWgmma`) is also marked `kvattn.wgmma`: Q.K^T and P.V become
    warpgroup `wgmma.mma_async`; other programs keep `mma.sync`.

    With `heaviest-first` (default) a wgmma attention kernel's query blocks
    are numbered from the last (`gridDim.y - 1 - blockIdx.y`): a longest-
    processing-time-first order for causal prefill, whose last query blocks
    read the most keys (docs/gpu-lowering.md, "Program order"). Any order
    computes the same result; merge and mma.sync kernels keep theirs.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::LLVM::LLVMDialect",
  ];
  let options = [
    Option<"tensorCores", "tensor-cores", "bool", /*default=*/"true",
           "Lower eligible f16/bf16 programs on tensor cores (mma.sync, "
           "ldmatrix, cp.async, scores and accumulators in registers)">,
    Option<"wgmma", "wgmma", "bool", /*default=*/"false",
           "Lower the tensor-core programs that fit it with sm_90a's "
           "wgmma.mma_async (kvattn.wgmma)">,
    Option<"producerWarpgroup", "producer-warpgroup", "bool",
           /*default=*/"true",
           "Give the kernels whose K/V arrive by TMA a producer warpgroup "
           "that issues every box (false: the consumers' thread 0 issues "
           "them, no register reallocation)">,
    Option<"heaviestFirst", "heaviest-first", "bool", /*default=*/"true",
           "Number a wgmma attention kernel's query blocks from the last "
           "(program y = gridDim.y - 1 - blockIdx.y): under a lower-right "
           "causal mask the last blocks see the most keys, and the GPU "
           "starts blocks in increasing blockIdx, so the longest programs "
           "start first and the launch's tail is shorter">,
    Option<"twoValueStages", "two-value-stages", "bool", /*default=*/"false",
           "Give the TMA kernels with a producer warpgroup two V stages "
           "wherever they fit in 227 KB (their registers bind them to one "
           "CTA per multiprocessor: the second V stage costs no occupancy "
           "and lets them take the intra-warpgroup overlap; false: one V "
           "stage where two would fit fewer programs by shared memory)">,
  ];
}

def AppendToGPUPass : Pass<"kvattn-append-to-gpu", "::mlir::ModuleOp"> {
  let summary = "Lower kvattn.append (plain and paged) to a GPU copy kernel";
  let description = [{
    Replaces every `kvattn.append` with a `gpu.launch_func` of a kernel of
    the `gpu.module @kvattn_kernels` that writes the update rows into the
    cache in place (docs/gpu-lowering.md, "The cache write"). The op's
    result becomes the cache buffer itself (`bufferization.to_tensor` of
    the buffer the kernel wrote), so a following `kvattn.attention` reads
    the updated cache; kernels run in program order on one stream.

    Grid: one warp per new token `(b, t)` of the `B * L` tokens, 4 warps
    (4 tokens) per thread block, grid x = ceil(B * L / 4). A warp copies its
    token's `H * D` elements in 16-byte vectors (8 x f16/bf16, 4 x f32; the
    widest that divides D), lanes on consecutive chunks. Paged: the warp
    looks up `block_table[b, p / page_size]` once (a warp-uniform load) and
    writes row `p % page_size` of that page. A token whose position is
    outside the cache (`p < 0`, `p >= S`, a slot past `max_pages`, a page id
    outside `[0, num_pages)`) is skipped: the runtime rejects such metadata
    before the launch, and the kernel never writes out of bounds.

    An FP8 cache (`kv_scale`): each value is converted to f32 (rotated
    first with `rope`), divided by the scale of the cache row it goes to and
    quantised, `RN_satfinite` (docs/semantics.md, "FP8 KV caches"): with
    `cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32`, two values a convert, when
    `hardware-fp8` is set (sm_89 with PTX 8.1 and sm_90+: kvattn-to-ptx sets
    it from the chip), else in integer arithmetic (sm_80; bit-exact with
    the conversion). The 16-byte update vector becomes 8 (bf16/f16) or 4
    (f32) code bytes, stored as one vector.

    The kernel ABI (docs/kernel-abi.md): pointers `update, cache, pos[,
    block_table][, k_rope_pos][, k_scale]` (an FP8 cache's scales as
    `k_scale` whichever cache it is: a plan binds the V append's to
    `v_scale`), then the sizes `B, Hkv, L, S` (`S` the capacity; paged:
    `max_pages * page_size`, followed by `num_pages, page_size,
    max_pages`); `kvattn.tile_config` has `kind = append`.
  }];
  let options = [
    Option<"hardwareFp8", "hardware-fp8", "bool", /*default=*/"false",
           "Quantise an FP8 cache's new rows with "
           "cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 (sm_89 with PTX 8.1, sm_90 "
           "and later; kvattn-to-ptx sets it from the chip) instead of the "
           "software quantisation (sm_80)">
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect",
    "::mlir::NVVM::NVVMDialect",
  ];
}

def AssignTileLayoutsPass : Pass<"kvattn-assign-tile-layouts"> {
  let summary = "Write the roles and fragment layouts of the GPU kernels' "
                "tiles";
  let description = [{
    On each outlined attention kernel (a `gpu.func` with a
    `kvattn.tile_config` of kind attention or attention_varlen), tags every
    scratch tile of its tile program (`memref.alloca`) with what it holds,
    `kvattn.tile_role` (`query`, `accumulator`, `scores`, `row_stats`), and
    the tiles whose entries live in the lanes' registers with the fragment
    layout they follow, `kvattn.fragment_layout`: the accumulator and the
    scores take the accumulator fragment of `mma.sync.m16n8k16` (one or two
    m16 tiles per warp: `block_m = 32 x num_warps` gives two), or of
    `wgmma.mma_async.m64nNk16` on kernels marked `kvattn.wgmma`; on
    `mma.sync` kernels the query tile is the A operand. The scalar lowering
    owns its entries as the mma.sync accumulator does, so its kernels get
    that layout too. A tile that no tile op uses, or that two uses give
    different roles, is an error.

    It also writes the kernel's schedule, `kvattn.gpu_schedule`: the
    tensor-core mode (`scalar`, `mma_sync`, `wgmma`: the outlining's
    `kvattn.tensor_cores` / `kvattn.wgmma`), the pipeline depth (2: each K
    block issued one step ahead by the program's `tile.prefetch`, on tensor
    cores), the TMA rings' stages (`kvattn.tma` kernels), whether the
    scores and the query fragments stay in registers, the producer
    warpgroup's warps (the outlining's block past num_warps) and whether the
    softmax rescales lazily (`lazy-rescale` and the lane's data registers); and on the tile ops
    which op issues which copy: `kvattn.value_prefetch = id` on a `tile.qk`
    and the `tile.softmax_update` of the same KV block (the qk issues its V
    block after its barrier), `kvattn.key_prefetch = id` on a
    `tile.prefetch` and the `tile.softmax_update` that issues it after its
    own barrier (tensor cores without TMA). Last, where the K/V blocks
    arrive by cp.async (tensor cores without the TMA ring), an analysis of
    the program's copies, stage reads and barriers gives each `tile.qk` and
    `tile.softmax_update` the waits and barriers its stage needs,
    `kvattn.stage_sync` (docs/gpu-lowering.md, "Stage synchronisation").
    -kvattn-lower-tile-to-gpu reads these attributes, obeys them, and
    refuses a kernel without them (docs/gpu-lowering.md, "Tile roles,
    fragment layouts and the schedule").
  }];
  let options = [
    Option<"valuePrefetch", "value-prefetch", "bool", /*default=*/"true",
           "On tensor cores, let each tile.qk issue the V block of its "
           "tile.softmax_update (false: the softmax issues it itself)">,
    Option<"keyPrefetch", "key-prefetch", "bool", /*default=*/"true",
           "On tensor cores, issue each K block one step ahead where the "
           "program has tile.prefetch (pipeline_depth = 2; false: 1, each "
           "tile.qk loads its own)">,
    Option<"queryInRegisters", "query-in-registers", "bool",
           /*default=*/"true",
           "On mma.sync, keep each warp's query A fragments in registers "
           "where they fit (false: read from the query tile per k step)">,
    Option<"lazyRescale", "lazy-rescale", "bool", /*default=*/"true",
           "On tensor cores, rescale a warp's accumulator only when one of "
           "its rows took a new maximum, where the lane's data registers "
           "leave room (lazy_rescale; false: every block)">,
    Option<"pingPong", "ping-pong", "bool", /*default=*/"true",
           "On sm_90a, let the two consumer warpgroups of a kernel with a "
           "producer warpgroup take turns at the tensor cores (ping_pong; "
           "false: each issues its wgmma when ready)">,
    Option<"intraWarpgroupOverlap", "intra-warpgroup-overlap", "bool",
           /*default=*/"true",
           "On sm_90a, issue each block's P.V after the next block's Q.K^T "
           "so that it runs during that block's softmax, in kernels with a "
           "producer warpgroup and two V stages (intra_warpgroup_overlap; "
           "peels the KV loop's first block; false: P.V after its softmax)">,
  Option<"twoValueStages", "two-value-stages", "bool", /*default=*/"false",
           "As -kvattn-outline-tile-programs' two-value-stages (the two "
           "passes must agree: the lowering refuses shared memory other than "
           "the launch's)">,
  ];
  let dependentDialects = ["::mlir::kvattn::KVAttnDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::scf::SCFDialect"];
}

def LowerTileToGPUPass : Pass<"kvattn-lower-tile-to-gpu"> {
  let summary = "Lower the tile ops of outlined kernels to threads, warps "
                "and shared memory";
  let description = [{
    The GPU lowering of the tile program (docs/gpu-lowering.md). Warp `w`
    owns query rows [16w, 16w + 16) of the tile; lane `l` owns rows
    16w + l/4 and 16w + l/4 + 8 and, in every score or accumulator row, the
    columns 8j + 2(l % 4) and 8j + 2(l % 4) + 1: the accumulator layout of
    `mma.sync.m16n8k16`, so tensor-core fragments can replace the scalar
    inner products without changing who owns what. Tiles and one K/V
    staging block live in dynamic shared memory; row maxima and sums are
    reduced across the four lanes of a row with warp shuffles; blocks are
    loaded cooperatively by all threads between barriers.

    Kernels marked `kvattn.tensor_cores` (by the outlining) run `Q.K^T` and
    `P.V` on tensor cores (`mma.sync.m16n8k16`, f32 accumulation, operands
    through `ldmatrix`) with each lane's scores, probabilities and
    accumulator entries in registers, and stage K and V with `cp.async`
    into separate swizzled buffers, each block loading while the previous
    computation runs.
  }];
  let options = [
    Option<"wideTileAddressBases", "wide-tile-address-bases", "bool",
           /*default=*/"true",
           "Address the K/V operands of the 128-row D = 128 programs (32-row "
           "warps, the query read per block) through thread-constant bases "
           "too (kvattn-to-ptx, every chip); false keeps the per-access "
           "address arithmetic there">,
    Option<"hardwareFp8", "hardware-fp8", "bool", /*default=*/"false",
           "Convert FP8 K/V codes with cvt.rn.f16x2.{e4m3x2,e5m2x2} (sm_89 "
           "and later; kvattn-to-ptx sets it from the chip) instead of the "
           "software decode (sm_80)">
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::LLVM::LLVMDialect",
    "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::nvgpu::NVGPUDialect",
    "::mlir::NVVM::NVVMDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect",
  ];
}


def VerifyTargetPass : Pass<"kvattn-verify-target", "::mlir::ModuleOp"> {
  let summary = "Check that every GPU module targets a chip kvattn supports";
  let description = [{
    kvattn's kernels use `mma.sync` m16n8k16 (bf16), `ldmatrix` and
    `cp.async`, which need sm_80 or newer. A `gpu.module` whose
    `#nvvm.target` names another chip, or a chip LLVM's NVPTX back end does
    not know, is an error naming the module and the chip, before code
    generation (which would otherwise abort with "Cannot select"). So is a
    kernel whose `kvattn.dynamic_smem_bytes` exceeds the shared memory one
    block may use on the chip (163 KB on sm_80/87, 227 KB on sm_90/100/110,
    99 KB elsewhere). Runs right after `nvvm-attach-target` in
    `kvattn-to-ptx`.

    With `check-chip`, it checks the `chip` option instead, before any
    target is attached: `kvattn-to-ptx` runs it first, so that
    `nvvm-attach-target` (whose verifier crashes on an empty chip name)
    never sees a chip kvattn refuses.
  }];
  let options = [
    Option<"checkChip", "check-chip", "bool", /*default=*/"false",
           "Check the `chip` option rather than the modules' targets">,
    Option<"chip", "chip", "std::string", /*default=*/"\"\"",
           "The chip to check with check-chip">,
  ];
}

def ExternDynamicSharedMemoryPass
    : Pass<"kvattn-extern-dynamic-shared-memory", "::mlir::gpu::GPUModuleOp"> {
  let summary = "Give the dynamic shared memory symbol external linkage";
  let description = [{
    `gpu.dynamic_shared_memory` lowers to an `internal` zero-size global in
    the shared address space; LLVM's NVPTX back end demotes such a global
    to a 1-byte static `.shared` variable of the kernel, so every tile
    beyond byte 0 would be addressed past the static allocation. With
    external linkage it becomes `.extern .shared .b8 name[]`, the dynamic
    shared memory the launch provides. Runs on the LLVM dialect, after
    convert-gpu-to-nvvm.
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
}


def DeviceValidationPass
    : Pass<"kvattn-device-validation", "::mlir::ModuleOp"> {
  let summary = "Status word and metadata validation kernels for device-"
                "resident metadata";
  let description = [{
    For metadata that lives on the device (a serving plan's run, a CUDA
    graph; docs/kernel-abi.md, "The status word"): every kernel of
    `@kvattn_kernels` takes one more pointer, `status` (i64[16], after the
    other pointers), and computes and writes nothing when `status[0] != 0`;
    every kernel that reads metadata gets a validation kernel
    `<name>_validate` (kind "validate", one block of threads per batch
    entry) launched before it, which checks the metadata against the
    runtime's rules (runtime/Validation.cpp, kvattn/Support/BlockTable.h)
    and records the first violation in the status word, with the host's
    message text. Runs after the kernels are built (the end of the GPU
    kernel pipeline with PtxOptions::deviceValidation).
  }];
  let options = [
    Option<"indexBitwidth", "index-bitwidth", "unsigned", /*default=*/"64",
           "Bits of the kernels' index arithmetic (as -kvattn-gpu-to-nvvm "
           "will lower them): with 32, the positions an offset or position "
           "value gives must stay below 2^31 - 1">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::LLVM::LLVMDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
  ];
}

def GpuToNVVMPass : Pass<"kvattn-gpu-to-nvvm", "::mlir::ModuleOp"> {
  let summary = "Lower the kernels' gpu.modules to NVVM with one index width";
  let description = [{
    One conversion of every `gpu.module` to the LLVM/NVVM dialects, with ONE
    `LLVMTypeConverter` whose index type has `index-bitwidth` bits (32 by
    default): the patterns of GPU->NVVM (thread ids, barriers, shuffles,
    libdevice math, dynamic shared memory, gpu.func with bare pointers),
    NVGPU->NVVM (ldmatrix, mma.sync, cp.async), memref, arith, cf, func,
    index, ub and vector -> LLVM, applied in one partial conversion per
    `gpu.module`. The separate convert-nvgpu-to-nvvm and
    convert-gpu-to-nvvm passes each made their own converter, so with a
    32-bit index the values crossing between them stayed behind
    `unrealized_conversion_cast`s between i32 and i64.

    The kernel ABI does not change with the index width
    (docs/kernel-abi.md): before the conversion every `index` parameter of
    a kernel becomes `i64` (a `.param .u64`) and is cast to `index` once at
    the kernel's entry (a truncation to i32 with a 32-bit index); the
    host's `gpu.launch_func` operands are cast to `i64` to match. Pointers
    stay 64-bit: a load or store is a GEP of the base pointer by an i32
    element offset, which LLVM sign-extends to 64 bits before scaling it by
    the element size, so the byte offset cannot overflow; the element
    offsets are exact when every buffer has fewer than 2^31 elements, which
    the runtime checks before launching a 32-bit kernel.

    A loop's `#llvm.loop_annotation` survives: -convert-scf-to-cf carries an
    scf.for's `llvm.loop_annotation` (kvattn::kLoopAnnotationAttr) to the
    latch's cf.br, which the cf lowering leaves on llvm.br as a discardable
    attribute that the translation to LLVM IR ignores; the pass makes it
    the branch's `loop_annotation` (`!llvm.loop` metadata).
  }];
  let options = [
    Option<"indexBitwidth", "index-bitwidth", "unsigned", /*default=*/"32",
           "Bits of the kernels' index arithmetic: 32 (buffers of fewer "
           "than 2^31 elements) or 64">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::LLVM::LLVMDialect",
    "::mlir::NVVM::NVVMDialect",
  ];
}

def GpuModuleToPtxPass : Pass<"kvattn-gpu-module-to-ptx", "::mlir::ModuleOp"> {
  let summary = "Compile each NVVM-targeted gpu.module to PTX or device IR "
                "with kvattn's short LLVM pipeline";
  let description = [{
    What `gpu-module-to-binary` does for an `#nvvm.target` (translation to
    LLVM IR, libdevice linked, LLVM's optimiser, the NVPTX back end; one
    `gpu.binary` per `gpu.module`, same name, same `#gpu.object`), with
    two differences (on the standard shapes, 10-30 % less time in LLVM's
    optimiser and 15-30 % less in the back end than O3):

    - `llvm-pipeline=kvattn` (the default) runs a shorter LLVM pipeline
      than `default<O3>`: O3's function simplification and late loop
      passes (SROA after the full unrolling of the fragment loops, GVN,
      DSE, LICM, O3's loop unrolling, ...) without what does nothing for
      kvattn's kernels (the CGSCC inliner walk and attribute inference:
      there are no calls but libdevice's, inlined by always-inline; the
      vectorizers), instcombine run once where O3 iterates it; then the
      NVPTX back end at O2 (early CSE instead of GVN in its IR passes). On
      the standard shapes the emulator counts the same or fewer
      instructions per KV block than with O3, but for paged append
      (+1.2 %; docs/runtime.md, "Kernel cache").
      `llvm-pipeline=standard` runs LLVM's `default<On>` and the back end
      at `On`, `n` the target's `O`, exactly as `gpu-module-to-binary`
      does.
    - libdevice (the target's `link` files) is only read when the module
      calls a `__nv_*` function.

    `format=isa` gives PTX (`assembly`), `format=llvm` the optimised
    device LLVM IR as bitcode (`offload`), the emulated GPU's input.
  }];
  let options = [
    Option<"format", "format", "std::string", /*default=*/"\"isa\"",
           "isa (PTX text) or llvm (the optimised device bitcode)">,
    Option<"llvmPipeline", "llvm-pipeline", "std::string",
           /*default=*/"\"kvattn\"",
           "kvattn (the shorter pipeline, back end at O2) or standard "
           "(default<On> and the back end at On, n the target's O)">,
  ];
  let dependentDialects = ["::mlir::gpu::GPUDialect"];
}

def ExpandCascadePass : Pass<"kvattn-expand-cascade"> {
  let summary = "Expand kvattn.cascade into two attentions and a merge";
  let description = [{
    Rewrites shared-prefix attention (`kvattn.cascade`) as (a) ONE
    `kvattn.attention` of all packed query rows over the shared prefix (one
    batch: the prefix K/V is read once per KV head and row block, not once
    per sequence; no mask, as the prefix lies before every query), (b) the
    ragged `kvattn.attention` of each sequence's rows over its own suffix
    (`q_start`, `q_offset`, `kv_len`, causal as the cascade), and (c)
    `kvattn.merge` of the two states, prefix first (f32 parts: 16-bit
    outputs are widened, exactly, by `arith.extf`).
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::tensor::TensorDialect",
  ];
}

def LowerMergePass : Pass<"kvattn-lower-merge"> {
  let summary = "Lower kvattn.merge to loops over buffers (CPU)";
  let description = [{
    Rewrites `kvattn.merge` into loops that visit the parts of each query
    row in index order: the largest finite lse, the sum of exp(lse_n - max),
    the rescaled outputs; parts with lse = -inf are skipped, so merging
    empty parts gives (0, -inf). Operands are taken as buffers and the
    results returned as fresh tensors, as -kvattn-tile does.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
  ];
}

def OrderConstantGlobalsPass
    : Pass<"kvattn-order-constant-globals", "::mlir::ModuleOp"> {
  let summary = "Give the module's constant memref.globals one order and "
                "one set of names";
  let description = [{
    One-shot bufferization creates a `memref.global` constant for every
    distinct constant tensor of a module (`@__constant_1xi32`,
    `@__constant_1xi32_0`, ...). With several functions it visits them in
    an order that follows pointer-keyed maps, so the globals' order, and the
    suffixes that tell apart distinct constants of one type, changed from
    run to run (the same program, another text). This pass sorts the
    private constant globals by their type and value, renames them
    `__constant_<type>_<k>` in that order (updating every
    `memref.get_global`) and puts them first in the module: the output of
    `kvattn-to-cpu` is the same text on every run.
  }];
  let dependentDialects = ["::mlir::memref::MemRefDialect"];
}

#endif // KVATTN_PASSES_PASSES_TD
