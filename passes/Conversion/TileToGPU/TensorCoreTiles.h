//===- TensorCoreTiles.h - tile ops on tensor cores -------------*- C++ -*-===//
//
// The f16/bf16 lowering of the GPU tile ops: K and V blocks staged with
// cp.async (16 bytes per copy, zero-filled past the block's keys), Q.K^T
// and P.V as mma.sync.m16n8k16 with f32 accumulation, operands read with
// ldmatrix. Ownership is the scalar lowering's (GpuEmitter.h): the mma
// accumulator fragment of each lane is exactly the score and accumulator
// entries that lane owns, so the mask, the online softmax and the epilogue
// are shared with the scalar lowering.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_PASSES_CONVERSION_TENSORCORETILES_H
#define KVATTN_PASSES_CONVERSION_TENSORCORETILES_H

#include "passes/Conversion/TileToGPU/GpuEmitter.h"

namespace mlir {
namespace kvattn {

/// Copies rows [start, start + cols) of `source[batch, head]` (through
/// `blockTable` when paged) into the 16-bit `stage` [BN, width] with
/// cp.async, 8 elements (16 bytes) per copy; rows past `cols` are zero
/// filled and read nothing. Commits the copies as one group unless
/// `commit` is false. With `keyValid` ([B, S] i1), the rows of invalid keys
/// are zero-filled too.
/// An FP8 `source` (read with its `scale`) is converted to the stage's type
/// as it is staged, by plain loads and stores (an empty group is committed
/// when `commit`): cp.async copies bytes, it cannot convert.
void emitAsyncStage(GpuEmitter &e, Value source, Value blockTable, Value batch,
                    Value head, Value start, Value cols, Value stage,
                    bool commit = true, Value keyValid = Value(),
                    Value scale = Value());
/// Waits until at most `pending` committed groups of this thread are in
/// flight.
void emitAsyncWait(GpuEmitter &e, int32_t pending);
/// The sync point of a tile.qk or tile.softmax_update whose stage arrives
/// by cp.async, as its kvattn.stage_sync says (-kvattn-assign-tile-layouts,
/// StageSync.cpp): the wait, the proxy fence, the barrier.
void emitStageSync(GpuEmitter &e, StageSyncAttr sync);
/// A tile.qk's copies and sync point on a kernel whose stages arrive by
/// cp.async (its kvattn.stage_sync): the barrier before its copies, its own
/// K block (pipeline_depth 1), the sync point, then the V block of the
/// paired tile.softmax_update `prefetch` (null: none).
void emitQKStageCopies(GpuEmitter &e, TileQKOp op, TileSoftmaxOp prefetch);

/// A 16-bit view of a tile in shared memory: the tile itself when it has
/// that type already, else a view of the same bytes (the output staged
/// through the tensor-core query tile, which -kvattn-assign-tile-layouts
/// typed as the query: the output's type too, by the op's verifier).
Value halfView(GpuEmitter &e, Value f32Tile, Type elt);

/// The column at which element (row, col) of a 16-bit shared tile
/// [rows, width] is stored: its 16-byte chunk XORed with the row modulo
/// min(8, width / 8) (bank-conflict-free ldmatrix). Every access of the
/// 16-bit tiles goes through it.
Value swizzledCol(GpuEmitter &e, Value tile, Value row, Value col);

/// The memref type of Threads::qFragments for a query tile of head dim
/// `d` and 16-bit type `elt`: [mmaTiles * d / 16][4] operand registers
/// (m16 tile t's k step kk at t * d / 16 + kk).
MemRefType queryFragmentsType(MLIRContext *ctx, int64_t d, Type elt,
                              int64_t mmaTiles = 1);

/// Loads the warp's A fragments of the 16-bit query tile `q16` (all D / 16
/// k steps of each m16 tile, ldmatrix.x4 each) into Threads::qFragments,
/// after the barrier that published the tile.
void emitLoadQueryFragments(GpuEmitter &e, Value q16);

/// tile.qk on tensor cores. Stages the K block (cp.async), unless
/// tile.prefetch already issued it (`e.t.prefetchKeys`); when `prefetch`
/// is the tile.softmax_update of the same block, also starts its V block
/// so that it loads while Q.K^T runs.
void lowerQKOnTensorCores(GpuEmitter &e, TileQKOp op, TileSoftmaxOp prefetch);

/// tile.prefetch on tensor cores: the announced K block's cp.async copies
/// (none when cols = 0) and a commit, which keeps the copy groups of every
/// iteration in step. Placed after a tile.qk, whose last barrier freed the
/// K stage.
void lowerPrefetchOnTensorCores(GpuEmitter &e, TilePrefetchOp op);

/// The P.V update of tile.softmax_update on tensor cores:
/// acc[r, :] = alpha[k] * acc[r, :] + P[r, :] . V for the lane's rows
/// (k = 0 .. rowsPerLane - 1), on the lane's accumulator registers; each V
/// fragment feeds the mma of every m16 tile of the warp. P is the lane's own
/// probabilities (its score registers, or its entries of the score tile),
/// rounded to the operand type; V comes from the value stage.
void emitPVOnTensorCores(GpuEmitter &e, TileSoftmaxOp op, Value stage,
                         ArrayRef<Value> alpha);

//===----------------------------------------------------------------------===//
// sm_90a: wgmma (WgmmaTiles.cpp)
//===----------------------------------------------------------------------===//

/// The memref indices of element (row, col) of a 16-bit shared tile in the
/// wgmma lowering's panelled layout (WgmmaLayout.h): 64-column panels of
/// 128-byte rows, chunks swizzled as wgmma's 128-byte swizzle reads them.
/// For a 64-column tile it is (row, swizzledCol(row, col)).
SmallVector<Value, 2> panelIndices(GpuEmitter &e, Value tile, Value row,
                                   Value col);

/// fence.proxy.async.shared::cta: this thread's generic-proxy writes of
/// shared memory (stores, landed cp.async) before later wgmma reads.
void emitProxyFence(GpuEmitter &e);

/// tile.qk on sm_90a: the K block staged as on mma.sync (cp.async, one
/// step ahead), then D / 16 wgmma.mma_async m64n{BN}k16 SS per warpgroup
/// (Q and K from shared memory), into the lane's score registers. With a
/// value split (the latent form) only the score warpgroup of each row group
/// computes them (Threads::scoreShares).
void lowerQKWithWgmma(GpuEmitter &e, TileQKOp op, TileSoftmaxOp prefetch);

/// The P.V update of tile.softmax_update on sm_90a: BN / 16
/// wgmma.mma_async m64n{Dv}k16 RS (P from the lane's probability
/// registers, V from the stage, or from the shared address `vAddress` (i64)
/// when given: the TMA ring's stage) on the rescaled accumulator registers.
/// With score shares the other warpgroups take the score warpgroup's
/// probabilities through the shared exchange, one barrier after it
/// published them.
void emitPVWithWgmma(GpuEmitter &e, TileSoftmaxOp op, Value stage,
                     ArrayRef<Value> alpha, Value vAddress = Value());

/// Intra-warpgroup overlap (Threads::overlapPV, docs/gpu-lowering.md
/// "Intra-warpgroup overlap"). emitDeferPV: the tile.softmax_update's
/// probabilities, packed as the RS wgmma's A registers, and its block start
/// kept for the next tile.qk (which issues the P.V after its Q.K^T) or the
/// tile.store. emitWaitForDeferredPV: in the next softmax, the P.V retired
/// (wgmma.wait_group 0), the accumulator fenced, its V stage released.
/// emitFlushDeferredPV: the tile.store's P.V of the last block, if any.
void emitDeferPV(GpuEmitter &e, TileSoftmaxOp op);
void emitWaitForDeferredPV(GpuEmitter &e);
void emitFlushDeferredPV(GpuEmitter &e);

/// Ping-pong (Threads::pingPong, docs/gpu-lowering.md "Ping-pong"): the two
/// consumer warpgroups pass a turn at the tensor cores through named
/// barriers 2 and 3 (warpgroup g waits on 2 + g, the other arrives there).
/// A turn is one warpgroup's P.V of a block and its Q.K^T of the next:
/// emitPingPongWait before a P.V's wgmma, emitPingPongPass after a Q.K^T's
/// are issued. emitPingPongStart (after the query tile's barrier) makes
/// warpgroup 1 wait for warpgroup 0's first Q.K^T; emitPingPongEnd (before
/// the store) gives warpgroup 1 its last turn. Every wait then meets
/// exactly one arrival.
void emitPingPongStart(GpuEmitter &e);
void emitPingPongWait(GpuEmitter &e);
void emitPingPongPass(GpuEmitter &e);
void emitPingPongEnd(GpuEmitter &e);

/// The TMA ring (kvattn.tma; docs/gpu-lowering.md, "Hopper (sm_90a)"):
/// thread 0 initialises the mbarriers (full: count 1; empty: one arrival
/// per warp), fences them for the async proxy, and the CTA synchronises.
void emitTmaRingInit(GpuEmitter &e);
/// Issues block [start, start + cols) of ring `ring` (0 K, 1 V) for kv head
/// `head` of cache batch `batch` of `source` (through `blockTable` when
/// paged: the page-block's page from the table) when cols > 0: thread 0 waits
/// until the next stage is empty (the consumers' arrivals of its previous use),
/// arrives on its full barrier expecting the boxes' bytes, and issues one
/// TMA box of 64 columns x block-n rows per panel; every thread counts it.
void emitTmaIssue(GpuEmitter &e, int ring, Value source, Value blockTable,
                  Value batch, Value head, Value start, Value cols);
/// Waits (every thread) until the oldest block of `ring` not yet consumed
/// (the one at key `start`) has landed; returns its stage (index).
Value emitTmaAcquire(GpuEmitter &e, int ring, Value start);
/// The shared address (i64) of stage `stage` of `ring`.
Value tmaStageAddress(GpuEmitter &e, int ring, Value stage);
/// After the wgmma reads of the acquired stage retired (wait_group 0):
/// lane 0 of each warp arrives on its empty barrier; every thread counts it.
void emitTmaRelease(GpuEmitter &e, int ring, Value start);
/// The stage (index) of `ring` that holds the block at key `start`.
Value tmaBlockStage(GpuEmitter &e, int ring, Value start);
/// Zeroes the first `dv` columns of rows [cols, block-n) of stage `stage`
/// of `ring` (the V ring, or the latent form's K ring: its V columns)
/// with generic stores, then fence.proxy.async and a CTA barrier, when
/// cols < block-n: the slots past a block's keys may hold NaN or Inf,
/// which a zero probability would not cancel in P.V.
void emitZeroValueTail(GpuEmitter &e, int ring, Value stage, Value cols,
                       int64_t bn, int64_t dv);

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_PASSES_CONVERSION_TENSORCORETILES_H
