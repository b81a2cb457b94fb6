//===- DeviceValidation.cpp - status word and validation kernels ----------===//
//
// For metadata that lives on the device (a plan's run, a CUDA graph) the
// host cannot check the values without waiting for the device. This pass
// makes the device do it:
//
// - every kernel of @kvattn_kernels gets a `status` pointer (i64[16], after
//   its other pointers) and does nothing when status[0] != 0;
// - every kernel that reads metadata (q_offset, k_offset, q_pos, k_pos,
//   kv_len, key_valid, block_table, q_start, pos) gets a validation kernel
//   `<name>_validate` (kind "validate"; its metadata pointers, `status`, the
//   kernel's sizes, `phase`) that checks the rules of
//   runtime/Validation.cpp and kvattn/Support/BlockTable.h and records the
//   first violation, in the host check's order, in the status word (kernels in
//   launch order, then the values by parameter name, q_start, the block table).
//
// The validation kernel runs twice (phase 0, then phase 1, on one stream):
// phase 0 takes the minimum of the violations' order keys (an atomic min on
// status[1]); in phase 1 the one thread whose violation has that key writes
// its batch, slot and values and then status[0] (the rule). Both phases do
// nothing when status[0] is already set: the first violation stays until
// the host clears the word. Grid: one block of 128 threads per batch.
//
// The kernel is written as MLIR text (it is small and reads like the rules)
// and parsed into the module.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Dialect/KVAttnAttrs.h"
#include "kvattn/Passes/DeviceValidation.h"
#include "kvattn/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/Parser/Parser.h"

#include <algorithm>
#include <map>

using namespace mlir;

namespace mlir {
namespace kvattn {
#define GEN_PASS_DEF_DEVICEVALIDATIONPASS
#include "kvattn/Passes/Passes.h.inc"

namespace {

constexpr int64_t kThreads = 128;

std::string str(int64_t v) { return std::to_string(v); }

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
      {"q_start", kParamQStart}};
  auto it = ids.find(name);
  return it == ids.end() ? -1 : it->second;
}

std::string typeText(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  return s;
}

/// MLIR text of the validation kernel's body, one SSA value at a time.
class Body {
public:
  std::string text;

  std::string fresh() { return "%v" + str(next_++); }
  std::string emit(const std::string &rhs) {
    std::string v = fresh();
    text += "  " + v + " = " + rhs + "\n";
    return v;
  }
  void line(const std::string &l) { text += "  " + l + "\n"; }

  std::string i64(int64_t v) {
    return emit("arith.constant " + str(v) + " : i64");
  }
  std::string idx(int64_t v) {
    return emit("arith.constant " + str(v) + " : index");
  }
  std::string toI64(const std::string &x) {
    return emit("arith.index_cast " + x + " : index to i64");
  }
  std::string bin(const char *op, const std::string &a, const std::string &b,
                  const char *type = "i64") {
    return emit(std::string("arith.") + op + " " + a + ", " + b + " : " + type);
  }
  std::string cmp(const char *pred, const std::string &a, const std::string &b,
                  const char *type = "i64") {
    return emit(std::string("arith.cmpi ") + pred + ", " + a + ", " + b +
                " : " + type);
  }
  std::string sel(const std::string &c, const std::string &a,
                  const std::string &b) {
    return emit("arith.select " + c + ", " + a + ", " + b + " : i64");
  }
  std::string andI1(const std::string &a, const std::string &b) {
    return emit("arith.andi " + a + ", " + b + " : i1");
  }
  std::string orI1(const std::string &a, const std::string &b) {
    return emit("arith.ori " + a + ", " + b + " : i1");
  }

private:
  int next_ = 0;
};

/// The validation kernel of `kernel` as a gpu.module's text, or "" when the
/// kernel reads no metadata.
std::string validationKernelText(gpu::GPUFuncOp kernel, int ordinal,
                                 const std::string &name, bool index32) {
  std::vector<Param> params = readParams(kernel);
  const bool append = getTileConfig(kernel).getKind() == KernelKind::append;

  // Signature: the checked metadata pointers, status, the sizes, phase.
  std::string signature;
  std::map<std::string, std::string> arg, eltOf;
  std::vector<std::string> metadata;
  for (const Param &p : params)
    if (p.kind == "pointer" && paramId(p.name) >= 0) {
      arg[p.name] = "%m_" + p.name;
      eltOf[p.name] = typeText(p.elementType);
      // key_valid (i1) is read as the bytes it is stored in (an i1 load of
      // a byte other than 0 or 1 is undefined, and the rule must see the
      // whole byte, unsigned, like the host's): the kernel takes it as a
      // pointer (the same bare pointer in the kernel ABI) and indexes it in
      // 64 bits, whatever the kernels' index width.
      signature +=
          "%m_" + p.name +
          (eltOf[p.name] == "i1" ? std::string(": !llvm.ptr, ")
                                 : ": memref<1x" + eltOf[p.name] + ">, ");
      metadata.push_back(p.name);
    }
  if (metadata.empty())
    return "";
  signature += "%status: memref<16xi64>";
  std::map<std::string, std::string> size;
  for (const Param &p : params)
    if (p.kind == "scalar") {
      size[p.name] = "%s_" + p.name;
      signature += ", %s_" + p.name + ": index";
    }
  signature += ", %phase: index";
  const bool paged = arg.count("block_table");

  Body b;
  std::string c0 = b.idx(0), c1 = b.idx(1), cT = b.idx(kThreads);
  std::string z = b.i64(0), m1 = b.i64(-1);
  std::string word = b.emit("memref.load %status[" + c0 + "] : memref<16xi64>");
  std::string clean = b.cmp("eq", word, z);
  b.line("scf.if " + clean + " {");
  std::string bid = b.emit("gpu.block_id x");
  std::string tid = b.emit("gpu.thread_id x");
  std::string bi = b.toI64(bid);
  std::string phase0 = b.cmp("eq", "%phase", c0, "index");
  std::string first = b.cmp("eq", tid, c0, "index");
  auto sz = [&](const std::string &n) { return size.at(n); };
  auto szI64 = [&](const std::string &n) { return b.toI64(sz(n)); };

  // Dynamic views of the metadata.
  std::map<std::string, std::string> view;
  for (const std::string &m : metadata) {
    if (eltOf[m] == "i1")
      continue;
    std::string rows = m == "q_pos" ? b.bin("muli", sz("B"), sz("L"), "index")
                       : m == "k_pos" || m == "key_valid"
                           ? b.bin("muli", sz("B"), sz("S"), "index")
                       : m == "block_table"
                           ? b.bin("muli", sz("B"), sz("max_pages"), "index")
                       : m == "q_start" ? b.bin("addi", sz("B"), c1, "index")
                                        : sz("B");
    view[m] = b.emit("memref.reinterpret_cast " + arg[m] +
                     " to offset: [0], sizes: [" + rows +
                     "], strides: [1] : memref<1x" + eltOf[m] +
                     "> to memref<?x" + eltOf[m] + ">");
  }
  auto load = [&](const std::string &m, const std::string &at) {
    if (eltOf[m] == "i1") {
      std::string at64 = b.toI64(at);
      std::string ptr = b.emit("llvm.getelementptr " + arg[m] + "[" + at64 +
                               "] : (!llvm.ptr, i64) -> !llvm.ptr, i8");
      std::string byte = b.emit("llvm.load " + ptr + " : !llvm.ptr -> i8");
      return b.emit("arith.extui " + byte + " : i8 to i64");
    }
    std::string v = b.emit("memref.load " + view[m] + "[" + at +
                           "] : memref<?x" + eltOf[m] + ">");
    return eltOf[m] == "i64"
               ? v
               : b.emit("arith.extsi " + v + " : " + eltOf[m] + " to i64");
  };
  // Records a violation (rule != 0) with its order key.
  auto report = [&](const std::string &rule, const std::string &key,
                    const std::string &index, const std::string &value,
                    const std::string &aux, const std::string &sizeValue,
                    const std::string &aux2, int param) {
    std::string bad = b.cmp("ne", rule, z);
    b.line("scf.if " + bad + " {");
    b.line("scf.if " + phase0 + " {");
    b.emit("memref.atomic_rmw mins " + key + ", %status[" + c1 +
           "] : (i64, memref<16xi64>) -> i64");
    b.line("} else {");
    std::string current =
        b.emit("memref.load %status[" + c1 + "] : memref<16xi64>");
    std::string mine = b.cmp("eq", current, key);
    b.line("scf.if " + mine + " {");
    auto store = [&](const std::string &v, int word) {
      b.line("memref.store " + v + ", %status[" + b.idx(word) +
             "] : memref<16xi64>");
    };
    store(bi, kStatusBatch);
    store(index, kStatusIndex);
    store(value, kStatusValue);
    store(aux, kStatusAux);
    store(sizeValue, kStatusSize);
    store(b.i64(param), kStatusParam);
    store(b.i64(ordinal), kStatusKernel);
    store(aux2, kStatusAux2);
    store(rule, kStatusRule); // last: what the other kernels read
    b.line("}");
    b.line("}");
    b.line("}");
  };
  // Order key: this kernel's ordinal (the host checks kernels in launch
  // order), the rule group (parameters by name, q_start 14, the table 15),
  // the position inside the group.
  auto groupKey = [&](int group, const std::string &position) {
    return b.bin("addi",
                 b.i64((int64_t(ordinal) << 52) | (int64_t(group) << 48)),
                 position);
  };
  // The number of pages of sequence `bIdx` (entries other than -1).
  auto pageCount = [&](const std::string &bIdx) {
    std::string row = b.bin("muli", bIdx, sz("max_pages"), "index");
    std::string count = b.fresh(), j = b.fresh(), c = b.fresh();
    b.line(count + " = scf.for " + j + " = " + c0 + " to " + sz("max_pages") +
           " step " + c1 + " iter_args(" + c + " = " + z + ") -> (i64) {");
    std::string e = load("block_table", b.bin("addi", row, j, "index"));
    std::string used =
        b.emit("arith.extui " + b.cmp("ne", e, m1) + " : i1 to i64");
    b.line("scf.yield " + b.bin("addi", c, used) + " : i64");
    b.line("}");
    return count;
  };
  // The block-table rules of checkBlockTable, one thread per slot.
  auto tableRules = [&](int group) {
    std::string M = sz("max_pages");
    std::string row = b.bin("muli", bid, M, "index");
    std::string s = b.fresh();
    b.line("scf.for " + s + " = " + tid + " to " + M + " step " + cT + " {");
    std::string page = load("block_table", b.bin("addi", row, s, "index"));
    std::string scan = b.fresh(), j = b.fresh(), fe = b.fresh(), fd = b.fresh();
    b.line(scan + ":2 = scf.for " + j + " = " + c0 + " to " + s + " step " +
           c1 + " iter_args(" + fe + " = " + m1 + ", " + fd + " = " + m1 +
           ") -> (i64, i64) {");
    std::string pj = load("block_table", b.bin("addi", row, j, "index"));
    std::string ji = b.toI64(j);
    std::string fe2 =
        b.sel(b.andI1(b.cmp("slt", fe, z), b.cmp("eq", pj, m1)), ji, fe);
    std::string fd2 =
        b.sel(b.andI1(b.cmp("slt", fd, z), b.cmp("eq", pj, page)), ji, fd);
    b.line("scf.yield " + fe2 + ", " + fd2 + " : i64, i64");
    b.line("}");
    std::string firstEmpty = scan + "#0", firstSame = scan + "#1";
    std::string np = szI64("num_pages");
    std::string range = b.orI1(b.cmp("slt", page, z), b.cmp("sge", page, np));
    std::string afterEmpty = b.cmp("sge", firstEmpty, z);
    std::string rule = b.sel(b.cmp("eq", page, m1), z,
                             b.sel(range, b.i64(kRulePageRange),
                                   b.sel(afterEmpty, b.i64(kRuleAfterEmpty),
                                         b.sel(b.cmp("sge", firstSame, z),
                                               b.i64(kRuleRepeatedPage), z))));
    std::string aux = b.sel(afterEmpty, firstEmpty, firstSame);
    std::string si = b.toI64(s);
    std::string Mp1 = b.bin("addi", szI64("max_pages"), b.i64(1));
    std::string key =
        groupKey(group, b.bin("addi", b.bin("muli", bi, Mp1), si));
    report(rule, key, si, page, aux, np, z, kParamBlockTable);
    b.line("}");
  };

  // The q_start rules of checkQueryStarts, thread 0 of block b: q_start[0]
  // (key 0), then per batch the decrease (1 + 2b) and the packed rows
  // (2 + 2b), q_start[B] (2B + 1), then each sequence's rows against its
  // cache (2B + 2 + b).
  auto queryStartRules = [&](int group) {
    b.line("scf.if " + first + " {");
    std::string B = szI64("B"), T = szI64("L");
    std::string lo = load("q_start", bid);
    std::string hi = load("q_start", b.bin("addi", bid, c1, "index"));
    std::string next = b.bin("addi", bi, b.i64(1));
    std::string isFirst = b.cmp("eq", bi, z);
    std::string isLast = b.cmp("eq", next, B);
    report(
        b.sel(b.andI1(isFirst, b.cmp("ne", lo, z)), b.i64(kRuleQStartFirst), z),
        groupKey(group, z), z, lo, z, T, z, kParamQStart);
    std::string twoB = b.bin("muli", bi, b.i64(2));
    report(b.sel(b.cmp("slt", hi, lo), b.i64(kRuleQStartDecrease), z),
           groupKey(group, b.bin("addi", twoB, b.i64(1))), next, hi, lo, T, z,
           kParamQStart);
    report(b.sel(b.cmp("sgt", hi, T), b.i64(kRuleQStartPastRows), z),
           groupKey(group, b.bin("addi", twoB, b.i64(2))), next, hi, lo, T, z,
           kParamQStart);
    std::string twoBB = b.bin("muli", B, b.i64(2));
    report(
        b.sel(b.andI1(isLast, b.cmp("ne", hi, T)), b.i64(kRuleQStartLast), z),
        groupKey(group, b.bin("addi", twoBB, b.i64(1))), next, hi, lo, T, z,
        kParamQStart);
    if (arg.count("q_offset") && arg.count("kv_len")) {
      std::string qOff = load("q_offset", bid);
      std::string kOff = arg.count("k_offset") ? load("k_offset", bid) : z;
      std::string len = load("kv_len", bid);
      std::string rows = b.bin("subi", hi, lo);
      std::string past =
          b.cmp("sgt", b.bin("addi", qOff, rows), b.bin("addi", kOff, len));
      std::string rule = b.sel(b.andI1(b.cmp("ne", rows, z), past),
                               b.i64(kRuleQStartCache), z);
      report(rule,
             groupKey(group, b.bin("addi", b.bin("addi", twoBB, b.i64(2)), bi)),
             kOff, qOff, lo, len, hi, kParamQStart);
    }
    b.line("}");
  };

  if (!append) {
    // The values, per parameter in the host check's order (by name).
    std::vector<std::string> names;
    for (const std::string &m : metadata)
      if (m != "block_table" && m != "q_start")
        names.push_back(m);
    std::sort(names.begin(), names.end());
    for (size_t g = 0; g < names.size(); ++g) {
      const std::string &m = names[g];
      std::string R = m == "q_pos"                       ? sz("L")
                      : m == "k_pos" || m == "key_valid" ? sz("S")
                                                         : c1;
      std::string j = b.fresh();
      b.line("scf.for " + j + " = " + tid + " to " + R + " step " + cT + " {");
      std::string n = b.bin("addi", b.bin("muli", bid, R, "index"), j, "index");
      std::string v = load(m, n);
      std::string ji = b.toI64(j);
      std::string rule, aux = z;
      if (m == "kv_len") {
        std::string S = szI64("S");
        rule = b.sel(b.orI1(b.cmp("slt", v, z), b.cmp("sgt", v, S)),
                     b.i64(kRuleKvLenRange), z);
      } else if (m == "key_valid") {
        rule = b.sel(b.cmp("ugt", v, b.i64(1)), b.i64(kRuleNotBoolean), z);
      } else {
        std::string neg = b.cmp("slt", v, z);
        std::string big = b.cmp("sgt", v, b.i64(int64_t(1) << 62));
        // 32-bit kernels: the last position the value gives (q_offset + L
        // - 1, k_offset + S - 1, or the position) must stay below 2^31 - 1
        // (the kernels form it plus one; kIndex32PositionLimit).
        std::string wide = b.emit("arith.constant false");
        if (index32) {
          std::string extent = m == "q_offset"   ? szI64("L")
                               : m == "k_offset" ? szI64("S")
                                                 : b.i64(1);
          extent = b.emit("arith.maxsi " + extent + ", " + b.i64(1) + " : i64");
          std::string last = b.bin("subi", b.bin("addi", v, extent), b.i64(1));
          wide = b.cmp("sge", last, b.i64(kIndex32PositionLimit));
        }
        std::string notIncreasing = b.emit("arith.constant false");
        if (m == "q_pos" || m == "k_pos") {
          std::string later = b.cmp("sgt", j, c0, "index");
          std::string prevAt =
              b.emit("arith.select " + later + ", " +
                     b.bin("subi", n, c1, "index") + ", " + n + " : index");
          aux = load(m, prevAt);
          notIncreasing = b.andI1(later, b.cmp("sle", v, aux));
        }
        rule = b.sel(
            neg, b.i64(kRuleNegative),
            b.sel(big, b.i64(kRuleTooLarge),
                  b.sel(wide, b.i64(kRuleIndex32Position),
                        b.sel(notIncreasing, b.i64(kRuleNotIncreasing), z))));
      }
      std::string key = groupKey(static_cast<int>(g), b.toI64(n));
      report(rule, key, ji, v, aux, size.count("S") ? szI64("S") : z, z,
             paramId(m));
      b.line("}");
    }
    if (arg.count("q_start"))
      queryStartRules(14);
    if (paged) {
      tableRules(15);
      if (arg.count("kv_len")) {
        b.line("scf.if " + first + " {");
        std::string active = pageCount(bid);
        std::string len = load("kv_len", bid);
        std::string ps = szI64("page_size");
        std::string capacity = b.bin("muli", active, ps);
        std::string rule =
            b.sel(b.orI1(b.cmp("slt", len, z), b.cmp("sgt", len, capacity)),
                  b.i64(kRuleKvLenPages), z);
        std::string Mp1 = b.bin("addi", szI64("max_pages"), b.i64(1));
        std::string key = groupKey(
            15, b.bin("addi", b.bin("muli", bi, Mp1), szI64("max_pages")));
        report(rule, key, z, len, active, ps, z, kParamKvLen);
        b.line("}");
      }
    }
  } else if (!paged) {
    // reference::append: rows [pos, pos + L) inside the capacity S.
    b.line("scf.if " + first + " {");
    std::string p = load("pos", bid);
    std::string L = szI64("L"), S = szI64("S");
    std::string rule =
        b.sel(b.orI1(b.cmp("slt", p, z), b.cmp("sgt", p, b.bin("subi", S, L))),
              b.i64(kRuleAppendRange), z);
    report(rule, groupKey(0, bi), z, p, L, S, z, kParamPos);
    b.line("}");
  } else {
    tableRules(1);
    // checkPagedWrite: pos >= 0, the tokens in the pages, no row written by
    // two sequences.
    std::string L = szI64("L"), ps = szI64("page_size");
    std::string Lp1 = b.bin("addi", L, b.i64(1));
    std::string base = b.bin("muli", bi, Lp1);
    b.line("scf.if " + first + " {");
    {
      std::string active = pageCount(bid);
      std::string p = load("pos", bid);
      std::string capacity = b.bin("muli", active, ps);
      std::string rule =
          b.sel(b.cmp("slt", p, z), b.i64(kRuleAppendNegative),
                b.sel(b.cmp("sgt", b.bin("addi", p, L), capacity),
                      b.i64(kRuleAppendPages), z));
      report(rule, groupKey(2, base), z, p, active, ps, L, kParamPos);
    }
    b.line("}");
    std::string t = b.fresh();
    b.line("scf.for " + t + " = " + tid + " to " + sz("L") + " step " + cT +
           " {");
    std::string M = sz("max_pages"), Mi = szI64("max_pages");
    std::string p = load("pos", bid);
    std::string ti = b.toI64(t);
    std::string token = b.bin("addi", p, ti);
    std::string slot = b.bin("divsi", token, ps);
    std::string row = b.bin("remsi", token, ps);
    std::string ok = b.andI1(b.cmp("sge", p, z), b.cmp("slt", slot, Mi));
    std::string safeSlot =
        b.emit("arith.index_cast " + b.sel(ok, slot, z) + " : i64 to index");
    std::string page =
        load("block_table",
             b.bin("addi", b.bin("muli", bid, M, "index"), safeSlot, "index"));
    std::string other = b.fresh(), b2 = b.fresh(), w = b.fresh();
    b.line(other + " = scf.for " + b2 + " = " + c0 + " to " + bid + " step " +
           c1 + " iter_args(" + w + " = " + m1 + ") -> (i64) {");
    {
      std::string p2 = load("pos", b2);
      std::string b2i = b.toI64(b2);
      std::string inner = b.fresh(), s2 = b.fresh(), w2 = b.fresh();
      b.line(inner + " = scf.for " + s2 + " = " + c0 + " to " + M + " step " +
             c1 + " iter_args(" + w2 + " = " + w + ") -> (i64) {");
      std::string e =
          load("block_table",
               b.bin("addi", b.bin("muli", b2, M, "index"), s2, "index"));
      std::string t2 = b.bin("addi", b.bin("muli", b.toI64(s2), ps), row);
      std::string hit =
          b.andI1(b.andI1(b.cmp("eq", e, page), b.cmp("slt", w2, z)),
                  b.andI1(b.cmp("sge", t2, p2),
                          b.cmp("slt", t2, b.bin("addi", p2, L))));
      b.line("scf.yield " + b.sel(hit, b2i, w2) + " : i64");
      b.line("}");
      b.line("scf.yield " + inner + " : i64");
    }
    b.line("}");
    std::string shared =
        b.andI1(b.andI1(ok, b.cmp("sge", page, z)), b.cmp("sge", other, z));
    std::string rule = b.sel(shared, b.i64(kRuleAppendSharedRow), z);
    std::string key =
        groupKey(2, b.bin("addi", base, b.bin("addi", ti, b.i64(1))));
    report(rule, key, slot, page, other, ps, token, kParamBlockTable);
    b.line("}");
  }
  b.line("}");

  return "gpu.module @validation {\n  gpu.func @" + name + "(" + signature +
         ") kernel attributes {known_block_size = array<i32: " + str(kThreads) +
         ", 1, 1>} {\n" + b.text + "  gpu.return\n  }\n}\n";
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
  b.setInsertionPointToStart(&entry);
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
    if (!statusIndex.count(kernel)) {
      // The validation kernel reads the signature before the guard.
      std::string name = kernel.getName().str() + "_validate";
      std::string text =
          validationKernelText(kernel, ordinal, name, indexBitwidth == 32);
      if (!text.empty()) {
        OwningOpRef<ModuleOp> parsed =
            parseSourceString<ModuleOp>(text, ParserConfig(ctx));
        if (!parsed) {
          kernel.emitOpError() << "kvattn-device-validation: the validation "
                                  "kernel does not parse:\n"
                               << text;
          return signalPassFailure();
        }
        auto source = parsed->lookupSymbol<gpu::GPUModuleOp>("validation");
        auto func = source.lookupSymbol<gpu::GPUFuncOp>(name);
        OpBuilder mb = OpBuilder::atBlockEnd(gpuModule.getBody());
        auto validator = cast<gpu::GPUFuncOp>(mb.clone(*func));
        validator->setAttr(gpu::GPUDialect::getKernelFuncAttrName(),
                           UnitAttr::get(ctx));
        // Its ABI for the manifest.
        SmallVector<KernelParamAttr> params;
        for (auto [p, a] : llvm::zip(before, getKernelParams(kernel)))
          if (p.kind == "pointer" && paramId(p.name) >= 0)
            params.push_back(a);
        params.push_back(statusParam(ctx, ParamAccess::write));
        for (const Param &p : before)
          if (p.kind == "scalar")
            params.push_back(KernelParamAttr::getScalar(ctx, p.name));
        params.push_back(KernelParamAttr::getScalar(ctx, "phase"));
        setKernelParams(validator, params);
        auto i64 = [&](int64_t v) {
          return IntegerAttr::get(IntegerType::get(ctx, 64), v);
        };
        setTileConfig(
            validator,
            TileConfigAttr::get(ctx, KernelKind::validate, /*block_m=*/1,
                                /*block_n=*/0, /*num_warps=*/kThreads / 32,
                                /*num_stages=*/1, /*split_kv=*/1, /*group=*/1,
                                /*vector_width=*/0, SplitRuleAttr(),
                                FlatSymbolRefAttr::get(kernel.getNameAttr())));
        validator->setAttr("kvattn.dynamic_smem_bytes", i64(0));
        validator->setAttr("kvattn.validator_ordinal", i64(ordinal));
        ++ordinal;
      }
      FailureOr<unsigned> at = guardKernel(kernel);
      if (failed(at))
        return signalPassFailure();
      statusIndex[kernel] = *at;
    }

    // The host side: one status buffer per function, the validation launch
    // before the kernel's, the status operand.
    Operation *func = launch->getParentOfType<FunctionOpInterface>();
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
      for (auto [p, v] : llvm::zip(before, operands)) {
        if (p.kind == "pointer" && paramId(p.name) >= 0)
          vOperands.push_back(
              isa<LLVM::LLVMPointerType>(
                  validator.getArgumentTypes()[vOperands.size()])
                  ? bytePointer(hb, v)
                  : v);
        if (p.name == "B")
          batch = v;
      }
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
