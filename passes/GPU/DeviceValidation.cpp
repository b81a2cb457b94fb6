//===- DeviceValidation.cpp - status word and validation kernels ----------===//
//
// For metadata that lives on the device (a plan's run, a CUDA graph) the
// host cannot check the values without waiting for the device. This pass
// makes the device do it:
//
// - every kernel of @kvattn_kernels gets a `status` pointer (i64[16], after
//   its other pointers) and does nothing when status[0] != 0;
// - every kernel that reads metadata (q_offset, k_offset, q_pos, k_pos,
//   kv_len, key_valid, block_table, q_start, pos, ..., RoPE's record
//   k_rope_pos) gets a validation kernel
//   `<name>_validate` (kind "validate"; its metadata pointers, `status`, the
//   kernel's sizes, `phase`) that checks the rules of
//   runtime/Validation.cpp and kvattn/Support/BlockTable.h and records the
//   first violation, in the host check's order, in the status word (kernels in
//   launch order, then the values by parameter name, q_start, the block table).
//
// RoPE's record (k_rope_pos) is an attention's metadata and an append's
// output: when an append of the same function writes the record the
// attention reads, the attention's validation kernel (which runs before the
// append) also takes the append's `pos` and checks the slots the append
// writes as it will write them.
//
// The validation kernel runs twice (phase 0, then phase 1, on one stream):
// phase 0 takes the minimum of the violations' order keys (an atomic min on
// status[1]); in phase 1 the one thread whose violation has that key writes
// its batch, slot and values and then status[0] (the rule). Both phases do
// nothing when status[0] is already set: the first violation stays until
// the host clears the word. Grid: one block of 128 threads per batch.
//
// The kernel is built with an OpBuilder, one op per statement in named
// locals (KernelEmitter): its op order is the order the rules are written in,
// whatever order a C++ compiler evaluates function arguments in.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Passes/DeviceValidation.h"
#include "kvattn/Dialect/KVAttnAttrs.h"
#include "kvattn/Passes/Passes.h"
#include "passes/GPU/KernelAbi.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/ADT/DenseSet.h"

#include <algorithm>
#include <limits>
#include <map>

using namespace mlir;

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_DEVICEVALIDATIONPASS
#include "kvattn/Passes/Passes.h.inc"

namespace {

constexpr int64_t kThreads = 128;

/// One kernel parameter, from `kvattn.params`.
struct Param {
  std::string name, kind;
  Type elementType;
};

std::vector<Param> readParams(gpu::GPUFuncOp kernel) {
  std::vector<Param> params;
  for (KernelParamAttr p : getKernelParams(kernel))
    params.push_back({p.getName().str(), stringifyParamKind(p.getKind()).str(),
                      p.getElementType()});
  return params;
}

/// The status word's parameter: read by the guarded kernels, written by the
/// validation kernels.
KernelParamAttr statusParam(MLIRContext *ctx, ParamAccess access) {
  Builder b(ctx);
  return KernelParamAttr::getPointer(
      ctx, "status", b.getI64Type(),
      b.getArrayAttr({b.getI64IntegerAttr(kStatusWords)}), access);
}

/// The metadata a validation kernel checks.
int paramId(const std::string &name) {
  static const std::map<std::string, int> ids = {
      {"q_offset", kParamQOffset},
      {"k_offset", kParamKOffset},
      {"q_pos", kParamQPos},
      {"k_pos", kParamKPos},
      {"kv_len", kParamKvLen},
      {"pos", kParamPos},
      {"block_table", kParamBlockTable},
      {"key_valid", kParamKeyValid},
      {"q_start", kParamQStart},
      {"k_start", kParamKStart},
      {"cache_batch_idx", kParamCacheBatchIdx},
      {"k_scale", kParamKScale},
      {"v_scale", kParamVScale},
      {"tree_parents", kParamTreeParents},
      {"k_rope_pos", kParamKRopePos},
      {"prefix_pages", kParamPrefixPages},
      {"prefix_len", kParamPrefixLen}};
  auto it = ids.find(name);
  return it == ids.end() ? -1 : it->second;
}

/// Whether a validation kernel checks pointer parameter `name` of a kernel:
/// its metadata. RoPE's record is an attention's metadata; an append writes
/// it (the attention after it checks it).
bool isValidated(const std::string &name, bool appendKernel) {
  return paramId(name) >= 0 && !(appendKernel && name == "k_rope_pos");
}

/// Builds the validation kernel's ops. Every method creates its ops when it
/// is called and takes only values already built, so callers build one op
/// (or one helper's ops) per statement, in named locals: the kernel's op
/// order is the statements' order, not the C++ compiler's order of
/// evaluating arguments.
class KernelEmitter {
public:
  explicit KernelEmitter(ImplicitLocOpBuilder &b) : b(b) {}

  ImplicitLocOpBuilder &b;

  Value i64(int64_t v) {
    return arith::ConstantIntOp::create(b, b.getI64Type(), v);
  }
  Value idx(int64_t v) { return arith::ConstantIndexOp::create(b, v); }
  Value falseValue() {
    return arith::ConstantIntOp::create(b, b.getI1Type(), 0);
  }
  Value toI64(Value x) {
    return arith::IndexCastOp::create(b, b.getI64Type(), x);
  }
  Value toIndex(Value x) {
    return arith::IndexCastOp::create(b, b.getIndexType(), x);
  }
  Value add(Value x, Value y) { return arith::AddIOp::create(b, x, y); }
  Value sub(Value x, Value y) { return arith::SubIOp::create(b, x, y); }
  Value mul(Value x, Value y) { return arith::MulIOp::create(b, x, y); }
  Value cmp(arith::CmpIPredicate p, Value x, Value y) {
    return arith::CmpIOp::create(b, p, x, y);
  }
  Value sel(Value c, Value x, Value y) {
    return arith::SelectOp::create(b, c, x, y);
  }
  Value both(Value x, Value y) { return arith::AndIOp::create(b, x, y); }
  Value either(Value x, Value y) { return arith::OrIOp::create(b, x, y); }

  /// `then` inside `scf.if cond`.
  void ifThen(Value cond, function_ref<void()> then) {
    auto op = scf::IfOp::create(b, cond, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(op.thenBlock()->getTerminator());
    then();
  }
  /// `then` and `otherwise` in the two regions of `scf.if cond`.
  void ifThenElse(Value cond, function_ref<void()> then,
                  function_ref<void()> otherwise) {
    auto op = scf::IfOp::create(b, cond, /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(op.thenBlock()->getTerminator());
    then();
    b.setInsertionPoint(op.elseBlock()->getTerminator());
    otherwise();
  }
  /// `scf.for iv = lb to ub step step`; `body` returns what it yields (one
  /// value per init).
  ValueRange loop(Value lb, Value ub, Value step, ValueRange inits,
                  function_ref<SmallVector<Value>(Value, ValueRange)> body) {
    auto op = scf::ForOp::create(b, lb, ub, step, inits);
    OpBuilder::InsertionGuard guard(b);
    Block *block = op.getBody();
    if (!block->empty() && block->back().hasTrait<OpTrait::IsTerminator>())
      block->back().erase();
    b.setInsertionPointToEnd(block);
    SmallVector<Value> yielded =
        body(op.getInductionVar(), op.getRegionIterArgs());
    scf::YieldOp::create(b, yielded);
    return op.getResults();
  }
};

/// The validation kernel of `kernel` (the rules of runtime/Validation.cpp
/// and kvattn/Support/BlockTable.h over its metadata), built at the end of
/// `gpuModule`; null when the kernel reads no metadata. `appendPos`: the
/// `pos` parameter of the append that writes the attention's RoPE record
/// earlier in the same launch sequence (null: none), which the validation
/// kernel takes after the kernel's metadata: it runs before that append, so
/// the record's slots [pos[b], pos[b] + L) are checked as the append will
/// write them (slot j rotated at position j).
gpu::GPUFuncOp buildValidationKernel(gpu::GPUModuleOp gpuModule,
                                     gpu::GPUFuncOp kernel, int ordinal,
                                     StringRef name, bool index32,
                                     KernelParamAttr appendPos) {
  using arith::CmpIPredicate;
  MLIRContext *ctx = kernel.getContext();
  std::vector<Param> params = readParams(kernel);
  const bool append = getTileConfig(kernel).getKind() == KernelKind::append;
  // An append whose -1 pages are padding (checkPagedWrite's skipPadding).
  const bool skipPadding = append && kernel->hasAttr(kSkipPaddingAttr);

  // Signature: the checked metadata pointers (their entries as the kernel
  // has them), status, the sizes, phase. key_valid (i1) is read as the bytes
  // it is stored in (an i1 load of a byte other than 0 or 1 is undefined,
  // and the rule must see the whole byte, unsigned, like the host's): the
  // kernel takes it as a pointer (the same bare pointer in the kernel ABI)
  // and indexes it in 64 bits, whatever the kernels' index width.
  KernelSignature signature(ctx);
  std::vector<std::string> metadata, sizeNames;
  std::map<std::string, Type> eltOf;
  std::map<std::string, ArrayAttr> shapeOf;
  std::map<std::string, Value> scaleCount;
  for (auto [p, entry] : llvm::zip(params, getKernelParams(kernel))) {
    if (p.kind == "pointer" && isValidated(p.name, append)) {
      metadata.push_back(p.name);
      eltOf[p.name] = p.elementType;
      shapeOf[p.name] = entry.getShape();
      signature.addPointer(entry,
                           p.elementType.isInteger(1)
                               ? Type(LLVM::LLVMPointerType::get(ctx))
                               : Type(MemRefType::get({1}, p.elementType)));
    }
  }
  if (appendPos) {
    metadata.push_back("pos");
    eltOf["pos"] = appendPos.getElementType();
    shapeOf["pos"] = appendPos.getShape();
    signature.addPointer(appendPos,
                         MemRefType::get({1}, appendPos.getElementType()));
  }
  if (metadata.empty())
    return {};
  // RoPE's tables: their row count P, static (the kernel compiles it in).
  std::optional<int64_t> tableRows;
  for (KernelParamAttr p : getKernelParams(kernel))
    if (p.getName() == "rotary_cos" && !p.getShape().empty())
      if (auto rows = dyn_cast<IntegerAttr>(p.getShape()[0]))
        tableRows = rows.getInt();
  signature.addPointer(
      statusParam(ctx, ParamAccess::write),
      MemRefType::get({kStatusWords}, IntegerType::get(ctx, 64)));
  for (const Param &p : params)
    if (p.kind == "scalar") {
      sizeNames.push_back(p.name);
      signature.addSize(p.name);
    }
  signature.addSize("phase");
  gpu::GPUFuncOp validator = createKernel(
      gpuModule, kernel.getLoc(), name, signature,
      TileConfigAttr::get(ctx, KernelKind::validate, /*block_m=*/1,
                          /*block_n=*/0, /*num_warps=*/kThreads / 32,
                          /*num_stages=*/1, /*split_kv=*/1, /*group=*/1,
                          /*vector_width=*/0, SplitRuleAttr(),
                          FlatSymbolRefAttr::get(kernel.getNameAttr())),
      /*dynamicSharedMemoryBytes=*/0);
  validator->setAttr("kvattn.validator_ordinal",
                     IntegerAttr::get(IntegerType::get(ctx, 64), ordinal));

  Block &entry = validator.getBody().front();
  std::map<std::string, Value> arg, size;
  for (auto [i, m] : llvm::enumerate(metadata))
    arg[m] = entry.getArgument(i);
  const Value status = entry.getArgument(metadata.size());
  for (auto [i, n] : llvm::enumerate(sizeNames))
    size[n] = entry.getArgument(metadata.size() + 1 + i);
  const Value phase = entry.getArguments().back();
  const bool paged = arg.count("block_table");
  // The names of a page table's parameters and sizes: a paged cache's, or
  // a cascade's paged prefix's (checkBlockTable's rules, the same codes).
  struct PageTable {
    const char *table, *length, *maxPages, *numPages, *pageSize;
    int tableParam, lengthParam;
  };
  const PageTable cacheTable = {"block_table", "kv_len",    "max_pages",
                                "num_pages",   "page_size", kParamBlockTable,
                                kParamKvLen};
  const PageTable prefixTable = {"prefix_pages",     "prefix_len",
                                 "prefix_max_pages", "prefix_num_pages",
                                 "prefix_page_size", kParamPrefixPages,
                                 kParamPrefixLen};

  ImplicitLocOpBuilder b(kernel.getLoc(), ctx);
  b.setInsertionPointToStart(&entry);
  KernelEmitter e(b);
  auto sz = [&](const std::string &n) { return size.at(n); };
  auto szI64 = [&](const std::string &n) { return e.toI64(sz(n)); };

  Value c0 = e.idx(0);
  Value c1 = e.idx(1);
  Value cT = e.idx(kThreads);
  Value z = e.i64(0);
  Value m1 = e.i64(-1);
  Value word = memref::LoadOp::create(b, status, ValueRange{c0});
  Value clean = e.cmp(CmpIPredicate::eq, word, z);
  e.ifThen(clean, [&] {
    Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value bi = e.toI64(bid);
    Value phase0 = e.cmp(CmpIPredicate::eq, phase, c0);
    Value first = e.cmp(CmpIPredicate::eq, tid, c0);

    // Dynamic views of the metadata.
    std::map<std::string, Value> view;
    for (const std::string &m : metadata) {
      Type elt = eltOf[m];
      if (elt.isInteger(1))
        continue;
      if (m == "k_scale" || m == "v_scale") {
        // An FP8 cache's scales: as many elements as their manifest shape
        // says (numbers, or sizes by name).
        Value count = c1;
        for (Attribute dim : shapeOf[m]) {
          Value n = isa<IntegerAttr>(dim)
                        ? e.idx(cast<IntegerAttr>(dim).getInt())
                        : sz(cast<StringAttr>(dim).str());
          count = e.mul(count, n);
        }
        scaleCount[m] = count;
        view[m] = memref::ReinterpretCastOp::create(
            b, MemRefType::get({ShapedType::kDynamic}, elt), arg[m],
            b.getIndexAttr(0), ArrayRef<OpFoldResult>{count},
            ArrayRef<OpFoldResult>{b.getIndexAttr(1)});
        continue;
      }
      Value rows;
      if (m == "q_pos")
        rows = e.mul(sz("B"), sz("L"));
      else if (m == "k_pos" || m == "key_valid" || m == "k_rope_pos")
        rows = e.mul(sz("B"), sz("S"));
      else if (m == "block_table")
        rows = e.mul(sz("B"), sz("max_pages"));
      else if (m == "q_start" || m == "k_start")
        rows = e.add(sz("B"), c1);
      else if (m == "tree_parents")
        rows = sz("L");
      else
        rows = sz("B");
      view[m] = memref::ReinterpretCastOp::create(
          b, MemRefType::get({ShapedType::kDynamic}, elt), arg[m],
          b.getIndexAttr(0), ArrayRef<OpFoldResult>{rows},
          ArrayRef<OpFoldResult>{b.getIndexAttr(1)});
    }
    // Element `at` of metadata `m`, as i64.
    auto load = [&](const std::string &m, Value at) -> Value {
      Type elt = eltOf[m];
      if (elt.isInteger(1)) {
        Value at64 = e.toI64(at);
        Value ptr = LLVM::GEPOp::create(b, LLVM::LLVMPointerType::get(ctx),
                                        b.getI8Type(), arg[m],
                                        ArrayRef<LLVM::GEPArg>{at64});
        Value byte = LLVM::LoadOp::create(b, b.getI8Type(), ptr);
        return arith::ExtUIOp::create(b, b.getI64Type(), byte);
      }
      Value v = memref::LoadOp::create(b, view[m], ValueRange{at});
      if (elt.isInteger(64))
        return v;
      return arith::ExtSIOp::create(b, b.getI64Type(), v);
    };
    // Records a violation (rule != 0) with its order key: phase 0 takes the
    // least key, phase 1 the thread whose key it is writes the word.
    auto report = [&](Value rule, Value key, Value index, Value value,
                      Value aux, Value sizeValue, Value aux2, int param) {
      Value bad = e.cmp(CmpIPredicate::ne, rule, z);
      e.ifThen(bad, [&] {
        e.ifThenElse(
            phase0,
            [&] {
              memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::mins, key,
                                          status, ValueRange{c1});
            },
            [&] {
              Value current = memref::LoadOp::create(b, status, ValueRange{c1});
              Value mine = e.cmp(CmpIPredicate::eq, current, key);
              e.ifThen(mine, [&] {
                auto store = [&](Value v, int at) {
                  Value atIndex = e.idx(at);
                  memref::StoreOp::create(b, v, status, ValueRange{atIndex});
                };
                store(bi, kStatusBatch);
                store(index, kStatusIndex);
                store(value, kStatusValue);
                store(aux, kStatusAux);
                store(sizeValue, kStatusSize);
                Value paramValue = e.i64(param);
                store(paramValue, kStatusParam);
                Value kernelValue = e.i64(ordinal);
                store(kernelValue, kStatusKernel);
                store(aux2, kStatusAux2);
                store(rule, kStatusRule); // last: what the other kernels read
              });
            });
      });
    };
    // Order key: this kernel's ordinal (the host checks kernels in launch
    // order), the rule group (parameters by name, q_start 14, the table 15),
    // the position inside the group.
    auto groupKey = [&](int group, Value position) {
      Value base = e.i64((int64_t(ordinal) << 52) | (int64_t(group) << 48));
      return e.add(base, position);
    };
    // A rule code, or 0 where `violated` is false.
    auto ruleIf = [&](Value violated, int64_t rule, Value otherwise) {
      Value code = e.i64(rule);
      return e.sel(violated, code, otherwise);
    };
    // The number of pages of sequence `bIdx` (entries other than -1).
    auto pageCount = [&](Value bIdx, const PageTable &t) {
      Value row = e.mul(bIdx, sz(t.maxPages));
      return e.loop(c0, sz(t.maxPages), c1, ValueRange{z},
                    [&](Value j, ValueRange count) -> SmallVector<Value> {
                      Value at = e.add(row, j);
                      Value entry = load(t.table, at);
                      Value isPage = e.cmp(CmpIPredicate::ne, entry, m1);
                      Value used =
                          arith::ExtUIOp::create(b, b.getI64Type(), isPage);
                      return {e.add(count[0], used)};
                    })[0];
    };
    // The block-table rules of checkBlockTable, one thread per slot.
    auto tableRules = [&](int group, const PageTable &t) {
      Value slots = sz(t.maxPages);
      Value row = e.mul(bid, slots);
      e.loop(
          tid, slots, cT, {}, [&](Value s, ValueRange) -> SmallVector<Value> {
            Value at = e.add(row, s);
            Value page = load(t.table, at);
            // The first -1 and the first repeat of `page` before slot s.
            ValueRange scan = e.loop(
                c0, s, c1, ValueRange{m1, m1},
                [&](Value j, ValueRange firsts) -> SmallVector<Value> {
                  Value atJ = e.add(row, j);
                  Value pj = load(t.table, atJ);
                  Value ji = e.toI64(j);
                  Value noEmptyYet = e.cmp(CmpIPredicate::slt, firsts[0], z);
                  Value isEmpty = e.cmp(CmpIPredicate::eq, pj, m1);
                  Value firstEmptyHere = e.both(noEmptyYet, isEmpty);
                  Value firstEmpty = e.sel(firstEmptyHere, ji, firsts[0]);
                  Value noSameYet = e.cmp(CmpIPredicate::slt, firsts[1], z);
                  Value isSame = e.cmp(CmpIPredicate::eq, pj, page);
                  Value firstSameHere = e.both(noSameYet, isSame);
                  Value firstSame = e.sel(firstSameHere, ji, firsts[1]);
                  return {firstEmpty, firstSame};
                });
            Value firstEmpty = scan[0], firstSame = scan[1];
            Value np = szI64(t.numPages);
            Value negative = e.cmp(CmpIPredicate::slt, page, z);
            Value tooLarge = e.cmp(CmpIPredicate::sge, page, np);
            Value outside = e.either(negative, tooLarge);
            Value afterEmpty = e.cmp(CmpIPredicate::sge, firstEmpty, z);
            Value repeated = e.cmp(CmpIPredicate::sge, firstSame, z);
            Value ruleRepeated = ruleIf(repeated, kRuleRepeatedPage, z);
            Value ruleAfter = ruleIf(afterEmpty, kRuleAfterEmpty, ruleRepeated);
            Value ruleRange = ruleIf(outside, kRulePageRange, ruleAfter);
            Value unused = e.cmp(CmpIPredicate::eq, page, m1);
            Value rule = e.sel(unused, z, ruleRange);
            Value aux = e.sel(afterEmpty, firstEmpty, firstSame);
            Value si = e.toI64(s);
            Value maxPages = szI64(t.maxPages);
            Value one = e.i64(1);
            Value stride = e.add(maxPages, one);
            Value rowKey = e.mul(bi, stride);
            Value position = e.add(rowKey, si);
            Value key = groupKey(group, position);
            report(rule, key, si, page, aux, np, z, t.tableParam);
            return {};
          });
    };

    // The q_start rules of checkQueryStarts, thread 0 of block b: q_start[0]
    // (key 0), then per batch the decrease (1 + 2b) and the packed rows
    // (2 + 2b), q_start[B] (2B + 1), then each sequence's rows against its
    // cache (2B + 2 + b).
    auto queryStartRules = [&](int group) {
      e.ifThen(first, [&] {
        Value B = szI64("B");
        Value T = szI64("L");
        Value lo = load("q_start", bid);
        Value bidNext = e.add(bid, c1);
        Value hi = load("q_start", bidNext);
        Value one = e.i64(1);
        Value two = e.i64(2);
        Value next = e.add(bi, one);
        Value isFirst = e.cmp(CmpIPredicate::eq, bi, z);
        Value isLast = e.cmp(CmpIPredicate::eq, next, B);
        {
          Value notZero = e.cmp(CmpIPredicate::ne, lo, z);
          Value violated = e.both(isFirst, notZero);
          Value rule = ruleIf(violated, kRuleQStartFirst, z);
          Value key = groupKey(group, z);
          report(rule, key, z, lo, z, T, z, kParamQStart);
        }
        Value twoB = e.mul(bi, two);
        {
          Value decreases = e.cmp(CmpIPredicate::slt, hi, lo);
          Value rule = ruleIf(decreases, kRuleQStartDecrease, z);
          Value position = e.add(twoB, one);
          Value key = groupKey(group, position);
          report(rule, key, next, hi, lo, T, z, kParamQStart);
        }
        {
          Value pastRows = e.cmp(CmpIPredicate::sgt, hi, T);
          Value rule = ruleIf(pastRows, kRuleQStartPastRows, z);
          Value position = e.add(twoB, two);
          Value key = groupKey(group, position);
          report(rule, key, next, hi, lo, T, z, kParamQStart);
        }
        Value twoBB = e.mul(B, two);
        {
          Value notRows = e.cmp(CmpIPredicate::ne, hi, T);
          Value violated = e.both(isLast, notRows);
          Value rule = ruleIf(violated, kRuleQStartLast, z);
          Value position = e.add(twoBB, one);
          Value key = groupKey(group, position);
          report(rule, key, next, hi, lo, T, z, kParamQStart);
        }
        if (arg.count("q_offset") &&
            (arg.count("kv_len") || arg.count("k_start"))) {
          Value qOff = load("q_offset", bid);
          Value kOff = arg.count("k_offset") ? load("k_offset", bid) : z;
          // The lengths, or with ragged keys each sequence's rows.
          Value len;
          if (arg.count("kv_len")) {
            len = load("kv_len", bid);
          } else {
            Value kLo = load("k_start", bid);
            Value kHi = load("k_start", bidNext);
            len = e.sub(kHi, kLo);
          }
          Value rows = e.sub(hi, lo);
          Value queryEnd = e.add(qOff, rows);
          Value cacheEnd = e.add(kOff, len);
          Value past = e.cmp(CmpIPredicate::sgt, queryEnd, cacheEnd);
          Value hasRows = e.cmp(CmpIPredicate::ne, rows, z);
          Value violated = e.both(hasRows, past);
          Value rule = ruleIf(violated, kRuleQStartCache, z);
          Value sequences = e.add(twoBB, two);
          Value position = e.add(sequences, bi);
          Value key = groupKey(group, position);
          report(rule, key, kOff, qOff, lo, len, hi, kParamQStart);
        }
      });
    };

    // The k_start rules of checkKeyStarts, thread 0 of block b: k_start[0]
    // (key 0), per batch the decrease (1 + 2b) and the packed rows N = S
    // (2 + 2b), then each kv_len against the sequence's rows (2B + 1 + b).
    auto keyStartRules = [&](int group) {
      e.ifThen(first, [&] {
        Value B = szI64("B");
        Value N = szI64("S");
        Value lo = load("k_start", bid);
        Value bidNext = e.add(bid, c1);
        Value hi = load("k_start", bidNext);
        Value one = e.i64(1);
        Value two = e.i64(2);
        Value next = e.add(bi, one);
        {
          Value isFirst = e.cmp(CmpIPredicate::eq, bi, z);
          Value negative = e.cmp(CmpIPredicate::slt, lo, z);
          Value violated = e.both(isFirst, negative);
          Value rule = ruleIf(violated, kRuleKStartNegative, z);
          Value key = groupKey(group, z);
          report(rule, key, z, lo, z, N, z, kParamKStart);
        }
        Value twoB = e.mul(bi, two);
        {
          Value decreases = e.cmp(CmpIPredicate::slt, hi, lo);
          Value rule = ruleIf(decreases, kRuleKStartDecrease, z);
          Value position = e.add(twoB, one);
          Value key = groupKey(group, position);
          report(rule, key, next, hi, lo, N, z, kParamKStart);
        }
        {
          Value pastRows = e.cmp(CmpIPredicate::sgt, hi, N);
          Value rule = ruleIf(pastRows, kRuleKStartPastRows, z);
          Value position = e.add(twoB, two);
          Value key = groupKey(group, position);
          report(rule, key, next, hi, lo, N, z, kParamKStart);
        }
        if (arg.count("kv_len")) {
          Value len = load("kv_len", bid);
          Value owned = e.sub(hi, lo);
          Value tooLong = e.cmp(CmpIPredicate::sgt, len, owned);
          Value rule = ruleIf(tooLong, kRuleKStartKvLen, z);
          Value twoBB = e.mul(B, two);
          Value base = e.add(twoBB, one);
          Value position = e.add(base, bi);
          Value key = groupKey(group, position);
          report(rule, key, len, hi, lo, N, z, kParamKStart);
        }
      });
    };

    // The cache_batch_idx rule of checkCacheBatchIndex (reads: a row may
    // repeat), thread 0 of block b (key b).
    auto cacheIndexRules = [&](int group) {
      e.ifThen(first, [&] {
        Value row = load("cache_batch_idx", bid);
        Value C = szI64("cache_rows");
        Value negative = e.cmp(CmpIPredicate::slt, row, z);
        Value tooLarge = e.cmp(CmpIPredicate::sge, row, C);
        Value outside = e.either(negative, tooLarge);
        Value rule = ruleIf(outside, kRuleCacheIndexRange, z);
        Value key = groupKey(group, bi);
        report(rule, key, z, row, z, C, z, kParamCacheBatchIdx);
      });
    };

    // The tree rules of checkTreeParents, block b over its sequence's packed
    // rows q_start[b] .. q_start[b + 1] - 1, in the q_start group after its
    // rules (the host checks the trees right after the starts): per row its
    // parent (one thread per row, key 2^40 + row + 2b), then thread 0 the
    // draft tokens against kv_len (2^40 + q_start[b + 1] + 2b) and q_offset
    // against k_offset + kv_len - L_b (one more). The rows read are clamped
    // into [0, T): a bad q_start is reported first and must not fault here.
    auto treeRules = [&](int group) {
      Value T = szI64("L");
      Value lo = load("q_start", bid);
      Value bidNext = e.add(bid, c1);
      Value hi = load("q_start", bidNext);
      Value one = e.i64(1);
      Value two = e.i64(2);
      Value twoB = e.mul(bi, two);
      Value base = e.i64(int64_t(1) << 40);
      Value seqBase = e.add(base, twoB);
      Value loAbove = arith::MaxSIOp::create(b, lo, z);
      Value loC = arith::MinSIOp::create(b, loAbove, T);
      Value hiAbove = arith::MaxSIOp::create(b, hi, loC);
      Value hiC = arith::MinSIOp::create(b, hiAbove, T);
      Value loIdx = e.toIndex(loC);
      Value hiIdx = e.toIndex(hiC);
      Value startIdx = e.add(loIdx, tid);
      e.loop(startIdx, hiIdx, cT, {},
             [&](Value rowIdx, ValueRange) -> SmallVector<Value> {
               Value row = e.toI64(rowIdx);
               Value parent = load("tree_parents", rowIdx);
               Value local = e.sub(row, lo);
               Value isRoot = e.cmp(CmpIPredicate::eq, parent, m1);
               Value notNegative = e.cmp(CmpIPredicate::sge, parent, z);
               Value before = e.cmp(CmpIPredicate::slt, parent, local);
               Value earlier = e.both(notNegative, before);
               Value fine = e.either(isRoot, earlier);
               Value code = e.i64(kRuleTreeParent);
               Value rule = e.sel(fine, z, code);
               Value position = e.add(seqBase, row);
               Value key = groupKey(group, position);
               report(rule, key, local, parent, row, T, z, kParamTreeParents);
               return {};
             });
      e.ifThen(first, [&] {
        Value rows = e.sub(hi, lo);
        Value hasRows = e.cmp(CmpIPredicate::sgt, rows, z);
        Value len = arg.count("kv_len") ? load("kv_len", bid) : szI64("S");
        Value seqKey = e.add(seqBase, hi);
        {
          Value fewer = e.cmp(CmpIPredicate::slt, len, rows);
          Value violated = e.both(hasRows, fewer);
          Value rule = ruleIf(violated, kRuleTreeKvLen, z);
          Value key = groupKey(group, seqKey);
          report(rule, key, z, len, z, rows, z, kParamTreeParents);
        }
        if (arg.count("q_offset")) {
          Value qOff = load("q_offset", bid);
          Value kOff = arg.count("k_offset") ? load("k_offset", bid) : z;
          Value cacheEnd = e.add(kOff, len);
          Value root = e.sub(cacheEnd, rows);
          Value moved = e.cmp(CmpIPredicate::ne, qOff, root);
          Value enough = e.cmp(CmpIPredicate::sge, len, rows);
          Value holds = e.both(hasRows, enough);
          Value violated = e.both(holds, moved);
          Value rule = ruleIf(violated, kRuleTreeQOffset, z);
          Value position = e.add(seqKey, one);
          Value key = groupKey(group, position);
          report(rule, key, z, qOff, kOff, len, rows, kParamTreeParents);
        }
      });
    };

    // An FP8 cache's scales (group g): every element positive and finite,
    // the threads of block 0 (key: the element).
    auto scaleRules = [&](int g, const std::string &m) {
      Value block0 = e.cmp(CmpIPredicate::eq, bi, z);
      e.ifThen(block0, [&] {
        e.loop(
            tid, scaleCount[m], cT, {},
            [&](Value n, ValueRange) -> SmallVector<Value> {
              Value v = memref::LoadOp::create(b, view[m], ValueRange{n});
              Value zero = arith::ConstantOp::create(b, b.getF32FloatAttr(0));
              Value inf = arith::ConstantOp::create(
                  b, b.getF32FloatAttr(std::numeric_limits<float>::infinity()));
              Value negInf = arith::NegFOp::create(b, inf);
              Value isNan =
                  arith::CmpFOp::create(b, arith::CmpFPredicate::UNO, v, v);
              Value isPosInf =
                  arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, v, inf);
              Value isNegInf = arith::CmpFOp::create(
                  b, arith::CmpFPredicate::OEQ, v, negInf);
              Value isInf = e.either(isPosInf, isNegInf);
              Value notPositive =
                  arith::CmpFOp::create(b, arith::CmpFPredicate::OLE, v, zero);
              Value ruleSign = ruleIf(notPositive, kRuleKvScaleNotPositive, z);
              Value ruleInf = ruleIf(isInf, kRuleKvScaleInf, ruleSign);
              Value rule = ruleIf(isNan, kRuleKvScaleNaN, ruleInf);
              Value bits = arith::BitcastOp::create(b, b.getI32Type(), v);
              Value bits64 = arith::ExtUIOp::create(b, b.getI64Type(), bits);
              Value n64 = e.toI64(n);
              Value key = groupKey(g, n64);
              Value count64 = e.toI64(scaleCount[m]);
              report(rule, key, n64, bits64, z, count64, z, paramId(m));
              return {};
            });
      });
    };

    // RoPE's record (the reference's check of k_rope_pos), block b over
    // its valid keys j < min(kv_len[b], S) (a bad kv_len is reported first
    // and must not fault here), one thread per key (key b * S + j): the
    // recorded position must be the key's position, k_pos[b, j] or
    // k_offset[b] + j. Keys with key_valid 0 are no keys.
    auto ropeRecordRules = [&](int group) {
      Value S = szI64("S");
      Value len = arg.count("kv_len") ? load("kv_len", bid) : S;
      Value lenAbove = arith::MaxSIOp::create(b, len, z);
      Value keys = arith::MinSIOp::create(b, lenAbove, S);
      Value keysIdx = e.toIndex(keys);
      Value kOff = arg.count("k_offset") ? load("k_offset", bid) : z;
      Value rowStart = e.mul(bid, sz("S"));
      e.loop(tid, keysIdx, cT, {},
             [&](Value j, ValueRange) -> SmallVector<Value> {
               Value n = e.add(rowStart, j);
               Value ji = e.toI64(j);
               Value recorded = load("k_rope_pos", n);
               if (arg.count("pos")) {
                 // The append before the attention writes slot j of
                 // [pos[b], pos[b] + L) as position j.
                 Value from = load("pos", bid);
                 Value L = szI64("L");
                 Value to = e.add(from, L);
                 Value atOrAfter = e.cmp(CmpIPredicate::sge, ji, from);
                 Value before = e.cmp(CmpIPredicate::slt, ji, to);
                 Value written = e.both(atOrAfter, before);
                 recorded = e.sel(written, ji, recorded);
               }
               Value position;
               if (arg.count("k_pos"))
                 position = load("k_pos", n);
               else
                 position = e.add(kOff, ji);
               Value violated = e.cmp(CmpIPredicate::ne, recorded, position);
               if (arg.count("key_valid")) {
                 Value valid = load("key_valid", n);
                 Value isKey = e.cmp(CmpIPredicate::ne, valid, z);
                 violated = e.both(isKey, violated);
               }
               Value rule = ruleIf(violated, kRuleKRopePos, z);
               Value n64 = e.toI64(n);
               Value key = groupKey(group, n64);
               report(rule, key, ji, recorded, position, S, z, kParamKRopePos);
               return {};
             });
    };

    // RoPE's tables (rules 29, 30: the reference's check, after every
    // other rule of the kernel): block b over its rotated rows, one thread
    // per row, each row's position below the tables' P rows. An
    // attention's query rows (q_offset[b] + i, q_pos[b, i]; a ragged
    // batch's rows q_start[b] .. q_start[b + 1] - 1, clamped into [0, T):
    // a bad q_start is reported first and must not fault here) or an
    // append's tokens pos[b] + t. Key 2^44 + the row's packed index, in
    // group 15 after the block table's entries.
    auto rotaryRules = [&](int group) {
      Value P = e.i64(*tableRows);
      Value L = szI64("L");
      Value lo = e.mul(bi, L);
      Value hi = e.add(lo, L);
      if (!append && arg.count("q_start")) {
        Value loRaw = load("q_start", bid);
        Value bidNext = e.add(bid, c1);
        Value hiRaw = load("q_start", bidNext);
        Value loAbove = arith::MaxSIOp::create(b, loRaw, z);
        lo = arith::MinSIOp::create(b, loAbove, L);
        Value hiAbove = arith::MaxSIOp::create(b, hiRaw, lo);
        hi = arith::MinSIOp::create(b, hiAbove, L);
      }
      Value count = e.sub(hi, lo);
      Value countIdx = e.toIndex(count);
      Value start = append                  ? load("pos", bid)
                    : arg.count("q_offset") ? load("q_offset", bid)
                                            : z;
      Value base = e.i64(int64_t(1) << 44);
      Value rowsBase = e.add(base, lo);
      e.loop(tid, countIdx, cT, {},
             [&](Value i, ValueRange) -> SmallVector<Value> {
               Value ii = e.toI64(i);
               Value position;
               if (!append && arg.count("q_pos")) {
                 Value rowStart = e.mul(bid, sz("L"));
                 Value at = e.add(rowStart, i);
                 position = load("q_pos", at);
               } else {
                 position = e.add(start, ii);
               }
               Value outside = e.cmp(CmpIPredicate::sge, position, P);
               Value rule = ruleIf(outside,
                                   append ? kRuleRotaryKeyPosition
                                          : kRuleRotaryQueryPosition,
                                   z);
               Value packed = e.add(rowsBase, ii);
               Value key = groupKey(group, packed);
               report(rule, key, ii, position, z, P, z, kParamRotaryCos);
               return {};
             });
    };

    // The values of one parameter (offsets, positions, lengths, validity),
    // one thread per element of the row, in group `g`.
    auto valueRules = [&](int g, const std::string &m) {
      Value R = m == "q_pos"                       ? sz("L")
                : m == "k_pos" || m == "key_valid" ? sz("S")
                                                   : c1;
      e.loop(tid, R, cT, {}, [&](Value j, ValueRange) -> SmallVector<Value> {
        Value rowStart = e.mul(bid, R);
        Value n = e.add(rowStart, j);
        Value v = load(m, n);
        Value ji = e.toI64(j);
        Value rule, aux = z;
        if (m == "kv_len") {
          Value S = szI64("S");
          Value negative = e.cmp(CmpIPredicate::slt, v, z);
          Value pastS = e.cmp(CmpIPredicate::sgt, v, S);
          Value outside = e.either(negative, pastS);
          rule = ruleIf(outside, kRuleKvLenRange, z);
        } else if (m == "key_valid") {
          Value one = e.i64(1);
          Value notBool = e.cmp(CmpIPredicate::ugt, v, one);
          rule = ruleIf(notBool, kRuleNotBoolean, z);
        } else {
          Value negative = e.cmp(CmpIPredicate::slt, v, z);
          Value limit = e.i64(int64_t(1) << 62);
          Value tooLarge = e.cmp(CmpIPredicate::sgt, v, limit);
          // 32-bit kernels: the last position the value gives (q_offset +
          // L - 1, k_offset + S - 1, or the position) must stay below
          // 2^31 - 1 (the kernels form it plus one; kIndex32PositionLimit).
          Value wide;
          if (index32) {
            Value extent = m == "q_offset"   ? szI64("L")
                           : m == "k_offset" ? szI64("S")
                                             : e.i64(1);
            Value one = e.i64(1);
            Value atLeastOne = arith::MaxSIOp::create(b, extent, one);
            Value end = e.add(v, atLeastOne);
            Value last = e.sub(end, one);
            Value limit32 = e.i64(kIndex32PositionLimit);
            wide = e.cmp(CmpIPredicate::sge, last, limit32);
          } else {
            wide = e.falseValue();
          }
          Value notIncreasing;
          if (m == "q_pos" || m == "k_pos") {
            Value later = e.cmp(CmpIPredicate::sgt, j, c0);
            Value before = e.sub(n, c1);
            Value prevAt = e.sel(later, before, n);
            aux = load(m, prevAt);
            Value notAbove = e.cmp(CmpIPredicate::sle, v, aux);
            notIncreasing = e.both(later, notAbove);
          } else {
            notIncreasing = e.falseValue();
          }
          Value ruleOrder = ruleIf(notIncreasing, kRuleNotIncreasing, z);
          Value ruleWide = ruleIf(wide, kRuleIndex32Position, ruleOrder);
          Value ruleLarge = ruleIf(tooLarge, kRuleTooLarge, ruleWide);
          rule = ruleIf(negative, kRuleNegative, ruleLarge);
        }
        Value position = e.toI64(n);
        Value key = groupKey(g, position);
        Value sizeValue = size.count("S") ? szI64("S") : z;
        report(rule, key, ji, v, aux, sizeValue, z, paramId(m));
        return {};
      });
    };

    if (!append) {
      // The values, per parameter in the host check's order (by name).
      std::vector<std::string> names;
      for (const std::string &m : metadata)
        if (m != "block_table" && m != "q_start" && m != "k_start" &&
            m != "prefix_pages" && m != "prefix_len" &&
            m != "cache_batch_idx" && m != "tree_parents" && m != "k_scale" &&
            m != "v_scale" && m != "k_rope_pos" &&
            m != "pos") // (an append's pos: its own validation checks it)
          names.push_back(m);
      std::sort(names.begin(), names.end());
      for (size_t g = 0; g < names.size(); ++g)
        valueRules(static_cast<int>(g), names[g]);
      // An FP8 cache's scales (groups 10, 11: after the values).
      if (arg.count("k_scale"))
        scaleRules(10, "k_scale");
      if (arg.count("v_scale"))
        scaleRules(11, "v_scale");
      // RoPE's record, after the values it compares and the scales (the
      // reference's order). Group 12 is k_start's, which the verifier
      // refuses beside k_rope_pos (as it does block_table, q_start and
      // cache_batch_idx: no group after this one meets it).
      if (arg.count("k_rope_pos"))
        ropeRecordRules(12);
      // Where the keys live, before q_start (the host check's order).
      if (arg.count("k_start"))
        keyStartRules(12);
      if (arg.count("cache_batch_idx"))
        cacheIndexRules(13);
      if (arg.count("q_start"))
        queryStartRules(14);
      if (arg.count("tree_parents"))
        treeRules(14);
      // The table (a cascade's prefix kernel has its prefix's alone).
      for (const PageTable *t : {&cacheTable, &prefixTable}) {
        if (!arg.count(t->table))
          continue;
        tableRules(15, *t);
        if (!arg.count(t->length))
          continue;
        // checkBlockTable's kv_len rule: the tokens within the pages.
        e.ifThen(first, [&] {
          Value active = pageCount(bid, *t);
          Value len = load(t->length, bid);
          Value ps = szI64(t->pageSize);
          Value capacity = e.mul(active, ps);
          Value negative = e.cmp(CmpIPredicate::slt, len, z);
          Value pastPages = e.cmp(CmpIPredicate::sgt, len, capacity);
          Value outside = e.either(negative, pastPages);
          Value rule = ruleIf(outside, kRuleKvLenPages, z);
          Value maxPages = szI64(t->maxPages);
          Value one = e.i64(1);
          Value stride = e.add(maxPages, one);
          Value rowKey = e.mul(bi, stride);
          Value position = e.add(rowKey, maxPages);
          Value key = groupKey(15, position);
          report(rule, key, z, len, active, ps, z, t->lengthParam);
        });
      }
    } else if (!paged) {
      // reference::append: rows [pos, pos + L) inside the capacity S.
      e.ifThen(first, [&] {
        Value p = load("pos", bid);
        Value L = szI64("L");
        Value S = szI64("S");
        Value negative = e.cmp(CmpIPredicate::slt, p, z);
        Value room = e.sub(S, L);
        Value pastRoom = e.cmp(CmpIPredicate::sgt, p, room);
        Value outside = e.either(negative, pastRoom);
        Value rule = ruleIf(outside, kRuleAppendRange, z);
        Value key = groupKey(0, bi);
        report(rule, key, z, p, L, S, z, kParamPos);
      });
    } else {
      tableRules(1, cacheTable);
      // checkPagedWrite: pos >= 0, the tokens in the pages (with skip_padding
      // in the table's slots: a token on a -1 entry is padding), no row
      // written by two sequences (a padding token writes none: page < 0).
      Value L = szI64("L");
      Value ps = szI64("page_size");
      Value one = e.i64(1);
      Value rowsPlusOne = e.add(L, one);
      Value base = e.mul(bi, rowsPlusOne);
      e.ifThen(first, [&] {
        Value active =
            skipPadding ? szI64("max_pages") : pageCount(bid, cacheTable);
        Value p = load("pos", bid);
        Value capacity = e.mul(active, ps);
        Value negative = e.cmp(CmpIPredicate::slt, p, z);
        Value end = e.add(p, L);
        Value pastPages = e.cmp(CmpIPredicate::sgt, end, capacity);
        Value rulePages = ruleIf(pastPages, kRuleAppendPages, z);
        Value rule = ruleIf(negative, kRuleAppendNegative, rulePages);
        Value key = groupKey(2, base);
        report(rule, key, z, p, active, ps, L, kParamPos);
      });
      e.loop(
          tid, sz("L"), cT, {}, [&](Value t, ValueRange) -> SmallVector<Value> {
            Value M = sz("max_pages");
            Value Mi = szI64("max_pages");
            Value p = load("pos", bid);
            Value ti = e.toI64(t);
            Value token = e.add(p, ti);
            Value slot = arith::DivSIOp::create(b, token, ps);
            Value row = arith::RemSIOp::create(b, token, ps);
            Value started = e.cmp(CmpIPredicate::sge, p, z);
            Value inTable = e.cmp(CmpIPredicate::slt, slot, Mi);
            Value ok = e.both(started, inTable);
            Value safeSlot64 = e.sel(ok, slot, z);
            Value safeSlot = e.toIndex(safeSlot64);
            Value tableRow = e.mul(bid, M);
            Value at = e.add(tableRow, safeSlot);
            Value page = load("block_table", at);
            // The first earlier sequence whose tokens include this page's row.
            Value other = e.loop(
                c0, bid, c1, ValueRange{m1},
                [&](Value b2, ValueRange found) -> SmallVector<Value> {
                  Value p2 = load("pos", b2);
                  Value b2i = e.toI64(b2);
                  Value end2 = e.add(p2, L);
                  Value otherRow = e.mul(b2, M);
                  ValueRange inner = e.loop(
                      c0, M, c1, ValueRange{found[0]},
                      [&](Value s2, ValueRange w) -> SmallVector<Value> {
                        Value at2 = e.add(otherRow, s2);
                        Value entry = load("block_table", at2);
                        Value s2i = e.toI64(s2);
                        Value slotStart = e.mul(s2i, ps);
                        Value token2 = e.add(slotStart, row);
                        Value samePage = e.cmp(CmpIPredicate::eq, entry, page);
                        Value notFound = e.cmp(CmpIPredicate::slt, w[0], z);
                        Value candidate = e.both(samePage, notFound);
                        Value fromStart = e.cmp(CmpIPredicate::sge, token2, p2);
                        Value beforeEnd =
                            e.cmp(CmpIPredicate::slt, token2, end2);
                        Value written = e.both(fromStart, beforeEnd);
                        Value hit = e.both(candidate, written);
                        return {e.sel(hit, b2i, w[0])};
                      });
                  return {inner[0]};
                })[0];
            Value isPage = e.cmp(CmpIPredicate::sge, page, z);
            Value okPage = e.both(ok, isPage);
            Value hasOther = e.cmp(CmpIPredicate::sge, other, z);
            Value shared = e.both(okPage, hasOther);
            Value rule = ruleIf(shared, kRuleAppendSharedRow, z);
            Value oneMore = e.add(ti, one);
            Value position = e.add(base, oneMore);
            Value key = groupKey(2, position);
            report(rule, key, slot, page, other, ps, token, kParamBlockTable);
            return {};
          });
    }
    // RoPE's tables, last (the host checks them last too).
    if (tableRows)
      rotaryRules(15);
  });
  gpu::ReturnOp::create(b);
  return validator;
}

struct DeviceValidationPass
    : impl::DeviceValidationPassBase<DeviceValidationPass> {
  using Base::Base;
  void runOnOperation() override;
};

/// The host's operand for a validation kernel's byte-pointer parameter
/// (key_valid): the buffer's address as an !llvm.ptr. The host function
/// only orders and binds the launches (the runtime passes the device
/// pointer of the manifest's parameter), so this is its type, not code
/// that runs.
Value bytePointer(ImplicitLocOpBuilder &b, Value memref) {
  Value address =
      memref::ExtractAlignedPointerAsIndexOp::create(b, memref).getResult();
  Value wide = arith::IndexCastOp::create(b, b.getI64Type(), address);
  return LLVM::IntToPtrOp::create(b, LLVM::LLVMPointerType::get(b.getContext()),
                                  wide);
}

/// Adds the `status` argument before the sizes and makes the body run only
/// when status[0] == 0; returns the argument's index.
FailureOr<unsigned> guardKernel(gpu::GPUFuncOp kernel) {
  MLIRContext *ctx = kernel.getContext();
  std::vector<Param> params = readParams(kernel);
  unsigned at = 0;
  while (at < params.size() && params[at].kind == "pointer")
    ++at;
  if (!kernel.getBody().hasOneBlock())
    return kernel.emitOpError()
           << "kvattn-device-validation: expected a single-block kernel";
  auto statusType = MemRefType::get({kStatusWords}, IntegerType::get(ctx, 64));
  (void)kernel.insertArgument(at, statusType, DictionaryAttr(),
                              kernel.getLoc());
  Block &entry = kernel.getBody().front();
  Value status = entry.getArgument(at);
  ImplicitLocOpBuilder b(kernel.getLoc(), ctx);
  // The kernel's private arrays (static memref.alloca: accumulators,
  // scores, row statistics) stay in the entry block, before the guard:
  // LLVM promotes only entry-block allocas to registers. Inside the guard
  // they stayed in local memory, and a wgmma's results were stored there
  // before the wait that retires them (the emulator's racecheck).
  SmallVector<Operation *> privateArrays;
  for (Operation &op : entry.without_terminator())
    if (auto alloca = dyn_cast<memref::AllocaOp>(op);
        alloca && alloca->getNumOperands() == 0)
      privateArrays.push_back(alloca);
  for (Operation *alloca : privateArrays)
    alloca->moveBefore(&entry, entry.begin());
  b.setInsertionPoint(&entry, std::next(entry.begin(), privateArrays.size()));
  Value c0 = arith::ConstantIndexOp::create(b, 0);
  Value word = memref::LoadOp::create(b, status, ValueRange{c0});
  Value zero = arith::ConstantIntOp::create(b, b.getI64Type(), 0);
  Value clean = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, word, zero);
  auto guard = scf::IfOp::create(b, clean, /*withElseRegion=*/false);
  Block *then = guard.thenBlock();
  then->getOperations().splice(
      Block::iterator(then->getTerminator()), entry.getOperations(),
      std::next(guard->getIterator()), Block::iterator(entry.getTerminator()));

  SmallVector<KernelParamAttr> attrs = getKernelParams(kernel);
  attrs.insert(attrs.begin() + at, statusParam(ctx, ParamAccess::read));
  setKernelParams(kernel, attrs);
  return at;
}

void DeviceValidationPass::runOnOperation() {
  ModuleOp module = getOperation();
  MLIRContext *ctx = &getContext();
  // As a number: the Option itself would print as a character.
  const unsigned bits = indexBitwidth;
  if (bits != 32 && bits != 64) {
    module.emitError() << "kvattn-device-validation: index bitwidth " << bits
                       << " is not supported (32 or 64)";
    return signalPassFailure();
  }
  auto gpuModule = module.lookupSymbol<gpu::GPUModuleOp>("kvattn_kernels");
  if (!gpuModule)
    return;
  SmallVector<gpu::LaunchFuncOp> launches;
  module.walk([&](gpu::LaunchFuncOp launch) {
    if (launch.getKernelModuleName() == gpuModule.getSymName())
      launches.push_back(launch);
  });
  // RoPE's record written in place by an append launch and then read by an
  // attention (a decode step with rope_pos): the attention's validation
  // kernel runs before the append (validation kernels run first), so it
  // takes the append's pos and checks the slots the append writes as it
  // will write them. The record is the same buffer on both launches (the
  // attention's through the append result's to_tensor / to_buffer).
  auto operandNamed = [&](gpu::LaunchFuncOp launch, gpu::GPUFuncOp kernel,
                          StringRef name) -> Value {
    for (auto [p, v] :
         llvm::zip(readParams(kernel), launch.getKernelOperands()))
      if (p.name == name)
        return v;
    return Value();
  };
  auto recordBuffer = [](Value v) -> Value {
    if (auto cast = v.getDefiningOp<memref::ReinterpretCastOp>())
      v = cast.getSource();
    if (auto toBuffer = v.getDefiningOp<bufferization::ToBufferOp>())
      if (auto toTensor =
              toBuffer.getTensor().getDefiningOp<bufferization::ToTensorOp>())
        v = toTensor.getBuffer();
    return v;
  };
  struct RecordWriter {
    Value pos;
    KernelParamAttr param;
  };
  llvm::DenseMap<Value, RecordWriter> writerOf;
  for (gpu::LaunchFuncOp launch : launches) {
    auto kernel =
        gpuModule.lookupSymbol<gpu::GPUFuncOp>(launch.getKernelName());
    if (!kernel || !hasKernelParams(kernel) ||
        getTileConfig(kernel).getKind() != KernelKind::append)
      continue;
    Value record = operandNamed(launch, kernel, "k_rope_pos");
    if (!record)
      continue;
    if (writerOf.count(recordBuffer(record))) {
      launch.emitOpError()
          << "kvattn-device-validation: RoPE's record is written by two "
             "appends before it is read: the attention's validation checks "
             "the writes of one (write the record with one append per "
             "function)";
      return signalPassFailure();
    }
    for (KernelParamAttr p : getKernelParams(kernel))
      if (p.getName() == "pos")
        writerOf[recordBuffer(record)] = {operandNamed(launch, kernel, "pos"),
                                          p};
  }
  auto writerFor = [&](gpu::LaunchFuncOp launch,
                       gpu::GPUFuncOp kernel) -> std::optional<RecordWriter> {
    if (getTileConfig(kernel).getKind() == KernelKind::append)
      return std::nullopt;
    Value record = operandNamed(launch, kernel, "k_rope_pos");
    if (!record)
      return std::nullopt;
    auto it = writerOf.find(recordBuffer(record));
    if (it == writerOf.end())
      return std::nullopt;
    return it->second;
  };

  // The metadata buffers that validation kernels launched earlier in each
  // host function check. A kernel that reads only such buffers needs no
  // validation kernel of its own: it runs after them and only while the
  // status word is clear. A split-KV merge that reads ALiBi's positions
  // (q_pos, k_pos, kv_len) is one: its checks would be its attention's,
  // and with static sizes it has no S among its scalars to make them with.
  llvm::DenseMap<Operation *, llvm::DenseSet<Value>> checkedOf;
  auto metadataOf = [&](gpu::LaunchFuncOp launch, gpu::GPUFuncOp kernel) {
    const bool append = getTileConfig(kernel).getKind() == KernelKind::append;
    SmallVector<Value> buffers;
    for (auto [p, v] :
         llvm::zip(readParams(kernel), launch.getKernelOperands()))
      if (p.kind == "pointer" && isValidated(p.name, append))
        buffers.push_back(recordBuffer(v));
    return buffers;
  };
  // Kernels given no validation kernel because their first launch's
  // metadata was checked already; every other launch of them must be too.
  llvm::DenseSet<Operation *> covered;

  // The status buffer of each host function (what the launches pass).
  llvm::DenseMap<Operation *, Value> statusOf;
  llvm::DenseMap<Operation *, unsigned> statusIndex;
  int ordinal = 0;
  for (gpu::LaunchFuncOp launch : launches) {
    auto kernel =
        gpuModule.lookupSymbol<gpu::GPUFuncOp>(launch.getKernelName());
    if (!kernel || !hasKernelParams(kernel))
      continue;
    std::vector<Param> before = readParams(kernel);
    std::optional<RecordWriter> writer = writerFor(launch, kernel);
    Operation *func = launch->getParentOfType<FunctionOpInterface>();
    llvm::DenseSet<Value> &checked = checkedOf[func];
    const SmallVector<Value> metadata = metadataOf(launch, kernel);
    const bool checkedBefore =
        !writer && !metadata.empty() &&
        llvm::all_of(metadata, [&](Value v) { return checked.contains(v); });
    if (!statusIndex.count(kernel)) {
      // The validation kernel reads the signature before the guard.
      std::string name = kernel.getName().str() + "_validate";
      if (checkedBefore)
        covered.insert(kernel);
      else if (buildValidationKernel(
                   gpuModule, kernel, ordinal, name, indexBitwidth == 32,
                   writer ? writer->param : KernelParamAttr()))
        ++ordinal;
      FailureOr<unsigned> at = guardKernel(kernel);
      if (failed(at))
        return signalPassFailure();
      statusIndex[kernel] = *at;
    } else if (covered.contains(kernel) && !checkedBefore) {
      launch.emitOpError()
          << "kvattn-device-validation: kernel '" << kernel.getName()
          << "' reads metadata that no earlier validation kernel of this "
             "function checks, but was given no validation kernel (another "
             "launch of it reads only checked metadata): compile the two "
             "functions separately";
      return signalPassFailure();
    }

    // The host side: one status buffer per function, the validation launch
    // before the kernel's, the status operand.
    if (!statusOf.count(func)) {
      ImplicitLocOpBuilder fb(launch.getLoc(), ctx);
      fb.setInsertionPointToStart(&func->getRegion(0).front());
      Value status = memref::AllocOp::create(
          fb, MemRefType::get({kStatusWords}, fb.getI64Type()));
      setBufferRole(status.getDefiningOp(), BufferRole::status);
      statusOf[func] = status;
    }
    Value status = statusOf[func];
    SmallVector<Value> operands(launch.getKernelOperands());
    if (auto validator = gpuModule.lookupSymbol<gpu::GPUFuncOp>(
            kernel.getName().str() + "_validate")) {
      ImplicitLocOpBuilder hb(launch.getLoc(), launch);
      SmallVector<Value> vOperands;
      Value batch;
      const bool append = getTileConfig(kernel).getKind() == KernelKind::append;
      for (auto [p, v] : llvm::zip(before, operands)) {
        if (p.kind == "pointer" && isValidated(p.name, append))
          vOperands.push_back(
              isa<LLVM::LLVMPointerType>(
                  validator.getArgumentTypes()[vOperands.size()])
                  ? bytePointer(hb, v)
                  : v);
        if (p.name == "B")
          batch = v;
      }
      if (writer)
        vOperands.push_back(writer->pos);
      vOperands.push_back(status);
      for (auto [p, v] : llvm::zip(before, operands))
        if (p.kind == "scalar")
          vOperands.push_back(v);
      Value zero = arith::ConstantIndexOp::create(hb, 0);
      vOperands.push_back(zero);
      Value one = arith::ConstantIndexOp::create(hb, 1);
      gpu::LaunchFuncOp::create(
          hb, hb.getLoc(), validator, gpu::KernelDim3{batch, one, one},
          gpu::KernelDim3{arith::ConstantIndexOp::create(hb, kThreads), one,
                          one},
          arith::ConstantIntOp::create(hb, hb.getI32Type(), 0), vOperands);
      checked.insert(metadata.begin(), metadata.end());
    }
    operands.insert(operands.begin() + statusIndex[kernel], status);
    launch.getKernelOperandsMutable().assign(operands);
  }
}

} // namespace

std::unique_ptr<Pass> createDeviceValidationPass(unsigned indexBitwidth) {
  DeviceValidationPassOptions options;
  options.indexBitwidth = indexBitwidth;
  return createDeviceValidationPass(options);
}

} // namespace kvattn
} // namespace mlir
