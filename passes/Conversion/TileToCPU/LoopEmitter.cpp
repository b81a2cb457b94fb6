//===- LoopEmitter.cpp - the tile ops' shared semantics -------------------===//
//
// The scores, masks, query rows and the merge of partial states as loops
// and scalar arithmetic: one definition, used by the CPU lowerings
// (TileToLoops, TileToVectors), -kvattn-lower-merge and the GPU lowering.
// The IR these build must not depend on the C++ compiler's argument
// evaluation order: values that create ops are named locals.
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/TileToCPU/LoopEmitter.h"

namespace mlir {
namespace kvattn {

Value emitScaledScore(Emitter &e, TileQKOp op, Value dot, double unit) {
  double scale = op.getScale().convertToDouble();
  std::optional<APFloat> softcap = op.getSoftcap();
  if (!softcap)
    return e.mulf(dot, e.f32(scale * unit));
  double cap = softcap->convertToDouble();
  // (In GCC's argument evaluation order, as everywhere in this file.)
  Value scaled = e.mulf(dot, e.f32(scale / cap));
  Value tanh = math::TanhOp::create(e.b, scaled);
  Value capUnit = e.f32(cap * unit);
  return e.mulf(capUnit, tanh);
}

Value emitScore(Emitter &e, TileQKOp op, Value r,
                function_ref<Value(Value)> loadKey, double unit) {
  Value q = op.getQTile();
  Value d = e.tileDim(q, 1);
  Value dot = e.reduce(e.idx(0), d, e.f32(0), [&](Value x, Value acc) {
    Value k = loadKey(x);
    Value qx = e.load(q, {r, x});
    return e.addf(acc, e.mulf(qx, k, true), true);
  });
  return emitScaledScore(e, op, dot, unit);
}

SmallVector<Value> maskIndices(Emitter &e, Value mask, Value b, Value h,
                               Value i, Value j) {
  auto type = cast<MemRefType>(mask.getType());
  Value full[4] = {b, h, i, j};
  SmallVector<Value> indices;
  for (int64_t d = 0; d < type.getRank(); ++d)
    indices.push_back(type.getDimSize(d) == 1 ? e.idx(0)
                                              : full[4 - type.getRank() + d]);
  return indices;
}

QueryRow queryRowOf(Emitter &e, Value head, Value start,
                    std::optional<int64_t> group, Value r) {
  Value t = e.add(start, r);
  if (!group || *group == 1)
    return {head, t};
  Value g = e.idx(*group);
  return {e.add(head, e.b.createOrFold<arith::RemUIOp>(t, g)),
          e.b.createOrFold<arith::DivUIOp>(t, g)};
}

/// Walks the draft-token tree of a tile.mask from local row `x` towards its
/// root while the row is above `stop` and not -1 (each parent clamped into
/// [-1, row - 1], so the walk ends): the row reached and the steps taken.
static std::pair<Value, Value> walkTree(Emitter &e, TileMaskOp op, Value x,
                                        Value stop) {
  using P = arith::CmpIPredicate;
  Type index = e.b.getIndexType();
  Value zero = e.idx(0), one = e.idx(1), none = e.idx(-1);
  auto loop = scf::WhileOp::create(
      e.b, TypeRange{index, index}, ValueRange{x, zero},
      [&](OpBuilder &nested, Location loc, ValueRange args) {
        ImplicitLocOpBuilder cb(loc, nested);
        Value above = arith::CmpIOp::create(cb, P::sgt, args[0], stop);
        Value inTree = arith::CmpIOp::create(cb, P::sge, args[0], zero);
        Value more = arith::AndIOp::create(cb, above, inTree);
        scf::ConditionOp::create(cb, more, args);
      },
      [&](OpBuilder &nested, Location loc, ValueRange args) {
        ImplicitLocOpBuilder wb(loc, nested);
        Emitter we{wb};
        Value slot = we.add(op.getTreeRow0(), args[0]);
        Value parent = we.loadIndex(op.getTreeParents(), slot);
        Value below = we.sub(args[0], one);
        Value capped = arith::MinSIOp::create(wb, parent, below);
        Value next = arith::MaxSIOp::create(wb, capped, none);
        Value steps = we.add(args[1], one);
        scf::YieldOp::create(wb, ValueRange{next, steps});
      });
  return {loop.getResult(0), loop.getResult(1)};
}

/// The local row of tile row `r` in its sequence (GQA packing undone).
static Value treeRow(Emitter &e, TileMaskOp op, Value r) {
  return queryRowOf(e, op.getHead(), op.getQStart(), op.getGroup(), r).row;
}

Value emitQueryPosition(Emitter &e, TileMaskOp op, Value r) {
  std::optional<int64_t> group = op.getGroup();
  if (op.getTreeParents()) {
    // qp = q_base + depth(i): the walk to the root takes depth + 1 steps.
    Value steps = walkTree(e, op, treeRow(e, op, r), e.idx(-1)).second;
    Value depth = e.sub(steps, e.idx(1));
    return e.add(op.getQBase(), depth);
  }
  if (op.getQBase()) {
    if (!group || *group == 1)
      return e.add(op.getQBase(), r);
    // Packed: q_base is the position of query row 0.
    return e.add(op.getQBase(),
                 queryRowOf(e, op.getHead(), op.getQStart(), group, r).row);
  }
  if (op.getQPos())
    return e.loadIndex(
        op.getQPos(),
        {op.getBatch(),
         queryRowOf(e, op.getHead(), op.getQStart(), group, r).row});
  return {};
}

Value emitMaskedScore(Emitter &e, TileMaskOp op, Value r, Value qp, Value c,
                      double unit, Value score) {
  using P = arith::CmpIPredicate;
  Value j = e.add(op.getKStart(), c);
  Value allowed = e.cmpi(P::slt, j, op.getKvLen());
  if (Value valid = op.getKeyValid())
    allowed = e.andi(allowed, e.load(valid, {op.getBatch(), j}));
  Value kp;
  if (op.getCausal() || op.getWindow() || op.getWindowRight() ||
      op.getAlibiSlopes())
    kp = op.getKBase() ? e.add(op.getKBase(), c)
                       : e.loadIndex(op.getKPos(), {op.getBatch(), j});
  if (op.getTreeParents()) {
    // A draft key a = j - draft_base is allowed for row i only when it is i
    // or an ancestor, at kp = qp - (depth(i) - depth(a)); a cache key walks
    // nowhere (its target row i + 1 is above i).
    Value i = treeRow(e, op, r);
    Value isDraft = e.cmpi(P::sge, j, op.getTreeDraftBase());
    Value a = e.sub(j, op.getTreeDraftBase());
    Value target = arith::SelectOp::create(e.b, isDraft, a, e.add(i, e.idx(1)));
    auto [reached, steps] = walkTree(e, op, i, target);
    Value isCache = e.cmpi(P::slt, j, op.getTreeDraftBase());
    Value ancestor = e.cmpi(P::eq, reached, target);
    allowed = e.andi(allowed, arith::OrIOp::create(e.b, isCache, ancestor));
    if (kp)
      kp = arith::SelectOp::create(e.b, isDraft, e.sub(qp, steps), kp);
  }
  if (op.getCausal() || op.getWindow() || op.getWindowRight()) {
    if (op.getCausal())
      allowed = e.andi(allowed, e.cmpi(P::sle, kp, qp));
    if (std::optional<int64_t> w = op.getWindow()) {
      Value width = e.idx(*w);
      Value distance = e.sub(qp, kp);
      allowed = e.andi(allowed, e.cmpi(P::slt, distance, width));
    }
    if (std::optional<int64_t> right = op.getWindowRight()) {
      Value ahead = e.sub(kp, qp);
      allowed = e.andi(allowed, e.cmpi(P::sle, ahead, e.idx(*right)));
    }
  }
  Value s = score ? score : e.load(op.getScores(), {r, c});
  if (Value mask = op.getMask()) {
    QueryRow q = queryRowOf(e, op.getHead(), op.getQStart(), op.getGroup(), r);
    Value m =
        e.load(mask, maskIndices(e, mask, op.getBatch(), q.head, q.row, j));
    if (isa<FloatType>(m.getType())) {
      if (!m.getType().isF32())
        m = arith::ExtFOp::create(e.b, e.b.getF32Type(), m);
      s = e.addf(s, unit == 1.0 ? m : e.mulf(m, e.f32(unit)));
    } else {
      allowed = e.andi(allowed, m);
    }
  }
  if (Value slopes = op.getAlibiSlopes()) {
    // ALiBi: -slope * (|qp - kp| - d), relative to the batch's reference
    // distance d (tile.mask), the difference exact in integers: small
    // whatever the positions, so exact in f32.
    QueryRow q = queryRowOf(e, op.getHead(), op.getQStart(), op.getGroup(), r);
    Value slope = e.load(slopes, q.head);
    Value diff = e.sub(qp, kp);
    Value negated = e.sub(e.idx(0), diff);
    Value distance = arith::MaxSIOp::create(e.b, diff, negated);
    Value relative = e.sub(distance, op.getAlibiRef());
    Value wide = arith::IndexCastOp::create(e.b, e.b.getI64Type(), relative);
    Value f = arith::SIToFPOp::create(e.b, e.b.getF32Type(), wide);
    Value bias = e.mulf(arith::NegFOp::create(e.b, slope), f);
    s = e.addf(s, unit == 1.0 ? bias : e.mulf(bias, e.f32(unit)));
  }
  return arith::SelectOp::create(e.b, allowed, s, e.negInf());
}

namespace merge_detail {
Value isEmpty(Emitter &e, Value l) {
  return arith::CmpFOp::create(e.b, arith::CmpFPredicate::OEQ, l, e.negInf());
}

Value partWeight(Emitter &e, Value l, Value peak) {
  return math::ExpOp::create(e.b, arith::SubFOp::create(e.b, l, peak));
}

Value asTypeOf(Emitter &e, Value scalar, Value like) {
  if (auto vector = dyn_cast<VectorType>(like.getType()))
    return vector::BroadcastOp::create(e.b, vector, scalar);
  return scalar;
}

Value accumulatePart(Emitter &e, Value acc, Value l, Value peak, Value v) {
  // (Named locals here and below: the IR order must not depend on the
  // compiler's argument evaluation order; this is GCC's.)
  Value w = asTypeOf(e, partWeight(e, l, peak), v);
  Value added = e.addf(acc, e.mulf(w, v));
  Value empty = isEmpty(e, l);
  return arith::SelectOp::create(e.b, empty, acc, added);
}

Value normalise(Emitter &e, Value weighted, Value peak, Value sum) {
  Value merged =
      arith::DivFOp::create(e.b, weighted, asTypeOf(e, sum, weighted));
  Value zero = asTypeOf(e, e.f32(0), weighted);
  Value empty = isEmpty(e, peak);
  return arith::SelectOp::create(e.b, empty, zero, merged);
}

Value peakStep(Emitter &e, Value m, Value l) {
  return arith::MaximumFOp::create(e.b, m, l);
}

Value sumStep(Emitter &e, Value s, Value l, Value peak) {
  Value w = partWeight(e, l, peak);
  Value added = e.addf(s, w);
  Value empty = isEmpty(e, l);
  return arith::SelectOp::create(e.b, empty, s, added);
}

Value rowLse(Emitter &e, Value peak, Value sum) {
  Value log = math::LogOp::create(e.b, sum);
  Value lse = e.addf(peak, log);
  Value negInf = e.negInf();
  Value empty = isEmpty(e, peak);
  return arith::SelectOp::create(e.b, empty, negInf, lse);
}

} // namespace merge_detail

Value emitLogAddExp(Emitter &e, Value a, Value b) {
  Value hi = arith::MaximumFOp::create(e.b, a, b);
  Value aFirst = arith::CmpFOp::create(e.b, arith::CmpFPredicate::OGE, a, b);
  Value lo = arith::SelectOp::create(e.b, aFirst, b, a);
  Value rest =
      math::ExpOp::create(e.b, arith::SubFOp::create(e.b, lo, hi).getResult());
  Value onePlus = e.addf(e.f32(1), rest);
  Value log = math::LogOp::create(e.b, onePlus);
  Value l = e.addf(hi, log);
  Value empty = merge_detail::isEmpty(e, hi);
  return arith::SelectOp::create(e.b, empty, e.negInf(), l);
}

Value emitAlibiShift(Emitter &e, Value slopes, Value ref, Value head) {
  if (!slopes)
    return {};
  Type f64 = e.b.getF64Type();
  Value slope = e.load(slopes, head);
  Value wide = arith::IndexCastOp::create(e.b, e.b.getI64Type(), ref);
  Value f = arith::SIToFPOp::create(e.b, f64, wide);
  Value negSlope = arith::NegFOp::create(e.b, slope);
  Value negSlope64 = arith::ExtFOp::create(e.b, f64, negSlope);
  return arith::MulFOp::create(e.b, negSlope64, f);
}

/// f32(x + shift) and f32(x - shift) for an f32 `x` and ALiBi's f64 shift:
/// one rounding, so that a sink close to a large shift keeps its digits.
static Value withShift(Emitter &e, Value x, Value shift, bool subtract) {
  Value wide = arith::ExtFOp::create(e.b, e.b.getF64Type(), x);
  Value sum = subtract ? arith::SubFOp::create(e.b, wide, shift).getResult()
                       : arith::AddFOp::create(e.b, wide, shift).getResult();
  return arith::TruncFOp::create(e.b, e.b.getF32Type(), sum);
}

/// The merged row of parts relative to ALiBi's constant `shift`: merged
/// as they are (without a sink) for the keys' lse; with a sink, merged
/// again with the sink relative to the shift (the output's weights) and
/// the lse from the sink and the keys' absolute lse.
template <typename Merge>
static MergedRow mergeShifted(Emitter &e, Value sink, Value shift,
                              Merge merge) {
  using namespace merge_detail;
  MergedRow keys = merge(Value());
  Value keysLse = withShift(e, keys.lse, shift, /*subtract=*/false);
  keysLse =
      arith::SelectOp::create(e.b, isEmpty(e, keys.lse), e.negInf(), keysLse);
  if (!sink) {
    keys.lse = keysLse;
    return keys;
  }
  Value relative = withShift(e, sink, shift, /*subtract=*/true);
  MergedRow row = merge(relative);
  row.lse = emitLogAddExp(e, sink, keysLse);
  return row;
}

MergedRow emitMergedRow(Emitter &e, Value lseParts, Value b, Value h, Value i,
                        Value sink, Value shift) {
  if (shift)
    return mergeShifted(e, sink, shift, [&](Value z) {
      return emitMergedRow(e, lseParts, b, h, i, z);
    });
  using namespace merge_detail;
  Value n = e.dimOf(lseParts, 0);
  MergedRow row;
  row.peak = e.reduce(e.idx(0), n, e.negInf(), [&](Value p, Value m) {
    return peakStep(e, m, e.load(lseParts, {p, b, h, i}));
  });
  if (sink)
    row.peak = peakStep(e, row.peak, sink);
  row.sum = e.reduce(e.idx(0), n, e.f32(0), [&](Value p, Value s) {
    return sumStep(e, s, e.load(lseParts, {p, b, h, i}), row.peak);
  });
  if (sink)
    row.sum = sumStep(e, row.sum, sink, row.peak);
  row.lse = rowLse(e, row.peak, row.sum);
  return row;
}

MergedRow emitMergedRow(ArrayRef<Value> lses, Emitter &e, Value sink,
                        Value shift) {
  if (shift)
    return mergeShifted(e, sink, shift,
                        [&](Value z) { return emitMergedRow(lses, e, z); });
  using namespace merge_detail;
  MergedRow row;
  row.peak = e.negInf();
  for (Value l : lses)
    row.peak = peakStep(e, row.peak, l);
  if (sink)
    row.peak = peakStep(e, row.peak, sink);
  row.sum = e.f32(0);
  for (Value l : lses)
    row.sum = sumStep(e, row.sum, l, row.peak);
  if (sink)
    row.sum = sumStep(e, row.sum, sink, row.peak);
  row.lse = rowLse(e, row.peak, row.sum);
  return row;
}

RowNormalisation emitRowNormalisation(Emitter &e, Value rowMax, Value sum,
                                      Value sink, double unit, Value shift) {
  if (shift) {
    // ALiBi: the state is relative to the constant `shift`, and so is the
    // sink in the normalisation of out; the lse is taken from the sink and
    // the keys' absolute lse (emitRowLse).
    Value relative =
        sink ? withShift(e, sink, shift, /*subtract=*/true) : Value();
    RowNormalisation n = emitRowNormalisation(e, rowMax, sum, relative, unit);
    n.shift = shift;
    n.sink = sink;
    n.natural = unit == 1.0 ? rowMax : e.mulf(rowMax, e.f32(unit));
    n.sum = sum;
    return n;
  }
  RowNormalisation n;
  // A NaN max is not -inf, so NaN propagates through acc / sum.
  n.noKey =
      arith::CmpFOp::create(e.b, arith::CmpFPredicate::OEQ, rowMax, e.negInf());
  if (!sink) {
    n.inv = arith::DivFOp::create(e.b, e.f32(1), sum);
    n.peak = unit == 1.0 ? rowMax : e.mulf(rowMax, e.f32(unit));
    n.total = sum;
    n.empty = n.noKey;
    return n;
  }
  // (Named locals: the IR order must not depend on the compiler's argument
  // evaluation order.)
  Value natural = unit == 1.0 ? rowMax : e.mulf(rowMax, e.f32(unit));
  Value peak = arith::MaximumFOp::create(e.b, natural, sink);
  Value keys = math::ExpOp::create(
      e.b, arith::SubFOp::create(e.b, natural, peak).getResult());
  Value sinkWeight = math::ExpOp::create(
      e.b, arith::SubFOp::create(e.b, sink, peak).getResult());
  Value scaled = e.mulf(keys, sum);
  Value total = e.addf(scaled, sinkWeight);
  n.inv = arith::DivFOp::create(e.b, keys, total);
  n.peak = peak;
  n.total = total;
  n.empty =
      arith::CmpFOp::create(e.b, arith::CmpFPredicate::OEQ, peak, e.negInf());
  return n;
}

Value emitRowLse(Emitter &e, const RowNormalisation &n) {
  if (n.shift) {
    Value log = math::LogOp::create(e.b, n.sum);
    Value relative = e.addf(n.natural, log);
    Value keys = withShift(e, relative, n.shift, /*subtract=*/false);
    keys = arith::SelectOp::create(e.b, n.noKey, e.negInf(), keys);
    return n.sink ? emitLogAddExp(e, n.sink, keys) : keys;
  }
  Value l = e.addf(n.peak, math::LogOp::create(e.b, n.total));
  return arith::SelectOp::create(e.b, n.empty, e.negInf(), l);
}

Value loadSink(Emitter &e, Value sinks, Value head) {
  return sinks ? e.load(sinks, head) : Value();
}

Value emitMergedOut(Emitter &e, Value outParts, Value lseParts,
                    const MergedRow &row, Value b, Value h, Value i, Value x) {
  using namespace merge_detail;
  Value n = e.dimOf(lseParts, 0);
  Value weighted = e.reduce(e.idx(0), n, e.f32(0), [&](Value p, Value a) {
    Value l = e.load(lseParts, {p, b, h, i});
    Value v = e.load(outParts, {p, b, h, i, x});
    return accumulatePart(e, a, l, row.peak, v);
  });
  return normalise(e, weighted, row.peak, row.sum);
}

Value truncTo(Emitter &e, Value v, Type type) {
  return type.isF32() ? v : arith::TruncFOp::create(e.b, type, v).getResult();
}

} // namespace kvattn
} // namespace mlir
