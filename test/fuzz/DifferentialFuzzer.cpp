//===- DifferentialFuzzer.cpp - random attention vs the reference ---------===//
//
//   kvattn-fuzz-diff [--seed N] [--iterations N] [--seconds S] [--save DIR]
//
//   kvattn-fuzz-diff --target=gpu-emu [...]
//
// Structured, differential fuzzing of the CPU path, or with --target=gpu-emu
// of the GPU kernels on the emulated GPU (a chip drawn from sm_80, sm_86,
// sm_89, sm_90 and sm_90a per case; memcheck and racecheck on, a report
// fails the case): each iteration draws a
// random valid configuration (batch, heads and GQA ratio, L, S including 0,
// D, Dv, element type, offset or explicit positions, k_offset, kv_len, key
// validity, general masks, causal, window, softcap, scale, lse, tile
// sizes, split-KV, paged K/V, GQA packing; or a ragged batch of
// speculative-decoding trees: q_start, tree_parents; query and key rows of
// one large value, 10^3 to 10^10, whose scores dwarf the others'), builds
// the
// kvattn.attention,
// compiles it with kvattn-to-cpu (or for the drawn chip) and compares the
// results with the scalar reference (the tolerances of --check). On the
// GPU a configuration the compiler refuses by name is counted, not failed
// (the refusals are printed at the end). One GPU case in three runs
// through a plan (kvattn-run --plan: device validation, bounds above the
// run's sizes, device or host metadata, outputs filled with NaN), the
// path of serving engines. A mismatch is shrunk (smaller
// sizes while it still fails) and printed as an attention_case.py command line,
// the form of the regression tests in test/Numerics; with --save it is also
// written to DIR.
//
//===----------------------------------------------------------------------===//

#include "kvattn/CPU/CpuRunner.h"
#include "kvattn/Evaluator/Evaluator.h"
#include "kvattn/GPU/GpuExecutor.h"
#include "kvattn/Registration/Registration.h"
#include "kvattn/Runtime/EmulatedGpu.h"
#include "kvattn/Support/Compare.h"
#include "kvattn/Support/Random.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <sstream>

namespace cl = llvm::cl;
using mlir::kvattn::ElementType;
using mlir::kvattn::HostTensor;

static cl::opt<uint64_t> seed("seed", cl::init(1));
static cl::opt<int64_t> iterations("iterations", cl::init(100));
static cl::opt<double>
    seconds("seconds", cl::desc("Stop after this many seconds"), cl::init(0));
static cl::opt<std::string> saveDir("save", cl::init(""));
static cl::opt<bool> printCases(
    "print-cases",
    cl::desc("Print each case's flags to stderr before running it (the case "
             "a crash stops on is the last printed)"),
    cl::init(false));
enum class Target { Cpu, GpuEmu };
static cl::opt<Target> target(
    "target", cl::desc("the path compared with the reference"),
    cl::init(Target::Cpu),
    cl::values(clEnumValN(Target::Cpu, "cpu", "the CPU JIT (default)"),
               clEnumValN(Target::GpuEmu, "gpu-emu",
                          "the GPU kernels on the emulated GPU, a chip drawn "
                          "per case")));

namespace {

struct Config {
  std::string dtype = "f32";
  int64_t B = 1, Hq = 1, Hkv = 1, L = 1, S = 1, D = 16, Dv = 16;
  bool explicitPositions = false, causal = false, lse = false;
  int64_t window = 0;       // 0: none
  int64_t windowRight = -1; // -1: none (two-sided windows, not causal)
  double softcap = 0, scale = 0;
  /// Attention sinks and ALiBi slopes, Hq values each (empty: none).
  std::vector<double> sinks, alibi;
  bool hasOffsets = false, hasKOffset = false, hasKvLen = false,
       hasKeyValid = false;
  std::vector<int64_t> qOffset, kOffset, qPos, kPos, kvLen, keyValid;
  std::string mask; // "", "bool", "float"
  /// Paged K/V: pages [numPages, pageSize, Hkv, D], S = maxPages * pageSize;
  /// 0: a plain [B, Hkv, S, D] cache.
  int64_t pageSize = 0, numPages = 0;
  std::vector<int64_t> blockTable; // [B, S / pageSize]
  bool packGqa = true;
  int64_t blockM = 64, blockN = 64, splitKv = 1;
  /// The CPU lowering: vectorised (at a width) or scalar; threads.
  bool vectorize = true;
  int64_t vectorWidth = 0, threads = 1;
  uint64_t dataSeed = 0;
  /// Generated Q, K, V lie in [-magnitude, magnitude): small scales are
  /// compared; 1e19 and above must be refused by the reference (scores
  /// that could overflow f32) unless no key is visible.
  double magnitude = 1;
  /// Positions near the 2^62 limit (i64 offsets; explicit positions from
  /// a base just below it).
  bool nearLimit = false;
  /// Dynamic B / L / S in the IR's types (bit 0, 1, 2).
  unsigned dynamicDims = 0;
  /// An option beyond its limit: compilation must fail with a named error.
  bool optionOverLimit = false;
  /// A ragged batch of draft-token trees: sequence b has qLens[b] <= L
  /// rows (T = their sum), the last qLens[b] of its kv_len[b] keys, and
  /// treeParents [T] (-1 or an earlier local row).
  bool tree = false;
  std::vector<int64_t> qLens, treeParents;
  /// Rows of Q (arg 0) or K (arg 1) set to one value after generation
  /// (kvattn-run's --fill): a row is D consecutive elements in both layouts.
  struct Fill {
    int arg;
    int64_t row;
    double value;
  };
  std::vector<Fill> fills;
  /// An FP8 KV cache ("" or f8E4M3FN / f8E5M2) with k_scale and v_scale
  /// per tensor, per KV head or per token ("tensor", "head", "token"),
  /// their values attention_case.py's (kvScaleValues).
  std::string kvDtype, kvScales = "tensor";
  /// The FP8 cache's generated values lie in [-fp8Magnitude,
  /// fp8Magnitude) before rounding to codes (0: magnitude's range), and
  /// its scales are attention_case.py's times kvScaleFactor (a power of
  /// two: exact): codes over the format's range under scales of about
  /// amax / 448 (as engines calibrate them), or scales far above 1.
  double fp8Magnitude = 0, kvScaleFactor = 1;
  /// The latent form (DeepSeek MLA): no value operand, V the first Dv
  /// columns of the key cache (value_dim = Dv <= D).
  bool latent = false;
  /// A serving step (attention_case.py --append): each sequence's L new
  /// tokens (k_new, v_new [B, Hkv, L, D]) are first written into the
  /// cache at q_offset (kvattn.append), and the attention reads the
  /// written caches, kv_len = q_offset + L; the caches are results too.
  bool append = false;
  /// Shared-prefix attention (kvattn.cascade, attention_case.py --prefix):
  /// the ragged batch of `tree` without its parents, over a prefix of
  /// `prefix` keys [1, Hkv, P, D] that every sequence sees first (args 1
  /// and 2), then its own suffix [B, Hkv, S, D] (args 3 and 4); -1: none.
  int64_t prefix = -1;
  /// Ragged keys (k_start, FlashAttention's cu_seqlens_k): K and V one
  /// packed buffer [1, Hkv, N, D]; sequence b owns kLens[b] <= S rows
  /// after kGap unowned ones (and kGap at the end).
  bool packedKeys = false;
  int64_t kGap = 0;
  std::vector<int64_t> kLens, kStart;
  /// A batch-to-cache map (cache_batch_idx): K and V [cacheRows, Hkv, S,
  /// D], batch b reading row cacheBatchIdx[b] (repeats allowed).
  bool cacheMap = false;
  int64_t cacheRows = 0;
  std::vector<int64_t> cacheBatchIdx;
  /// --target=gpu-emu: the chip compiled for (the emulated device's
  /// capability follows it), the multiprocessors it reports (split-KV and
  /// packing decisions), split-KV (0: the compiler's choice), lazy
  /// rescaling.
  std::string chip;
  int64_t sms = 132, gpuSplitKv = 0;
  bool lazyRescale = true;
  /// Compiled once with the IR's dynamic dimensions, as a serving engine
  /// does (kvattn-run --specialize-shapes=false: split-KV chosen at run
  /// time), instead of for the inputs' shapes.
  bool keepDynamicShapes = false;
  /// Run the function through one plan (kvattn-run --plan,
  /// GpuExecutor::runFunctionThroughPlan: planModule and rt::Plan, the
  /// path of serving engines, the C API's kvattn_plan_* and kvattn.torch)
  /// instead of launching each op's kernels: None, with the metadata in
  /// device buffers (validated on the device) or on the host; the plan's
  /// bounds exceed the run's B, L and S by planSlack, and it runs planRuns
  /// times (each into outputs filled with NaN).
  enum class Plan { None, Device, Host } plan = Plan::None;
  int64_t planSlack = 0, planRuns = 1;
};

int64_t packedRows(const Config &c) {
  int64_t t = 0;
  for (int64_t n : c.qLens)
    t += n;
  return t;
}

/// K's shape without its head dim: [numPages, pageSize, Hkv] paged, else
/// [rows, Hkv, keys] with one packed row of N keys (ragged keys), the
/// cache map's rows, or B.
std::vector<int64_t> cacheShape(const Config &c) {
  if (c.pageSize)
    return {c.numPages, c.pageSize, c.Hkv};
  if (c.packedKeys)
    return {1, c.Hkv, c.kStart.empty() ? 0 : c.kStart.back() + c.kGap};
  return {c.cacheMap ? c.cacheRows : c.B, c.Hkv, c.S};
}

/// The rows of a Q (arg 0) or K (arg 1) tensor of the config (D elements
/// each in both layouts).
int64_t rowsOf(const Config &c, int arg) {
  if (arg == 0)
    return c.Hq * (c.tree ? packedRows(c) : c.B * c.L);
  if (c.prefix >= 0) // a cascade's argument 1: the prefix keys
    return c.Hkv * c.prefix;
  std::vector<int64_t> shape = cacheShape(c);
  return shape[0] * shape[1] * shape[2];
}

/// The config's fills on rows that exist (shrinking changes the sizes).
std::vector<Config::Fill> fillsOf(const Config &c) {
  std::vector<Config::Fill> out;
  for (Config::Fill f : c.fills)
    if (int64_t rows = rowsOf(c, f.arg)) {
      f.row %= rows;
      out.push_back(f);
    }
  return out;
}

/// An FP8 cache's scale tensor: its shape for the granularity and
/// attention_case.py's values, 0.25 + ((i * step + 1) % 8) * 0.25 (step 5
/// for k_scale, 3 for v_scale) times kvScaleFactor: distinct, so that a
/// path that ignored them or read the wrong one would answer differently.
std::pair<std::vector<int64_t>, std::vector<double>>
kvScaleValues(const Config &c, int step) {
  std::vector<int64_t> shape = c.kvScales == "tensor" ? std::vector<int64_t>{1}
                               : c.kvScales == "head"
                                   ? std::vector<int64_t>{c.Hkv}
                                   : cacheShape(c);
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  std::vector<double> values;
  for (int64_t i = 0; i < n; ++i)
    values.push_back((0.25 + double((i * step + 1) % 8) * 0.25) *
                     c.kvScaleFactor);
  return {shape, values};
}

constexpr int64_t kLimit = int64_t(1) << 62;

std::string join(const std::vector<int64_t> &v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

/// The emulated device's compute capability for the config's chip.
std::string emuSm(const Config &c) { return c.chip.substr(3, 2); }

/// The same case as attention_case.py flags.
std::string asFlags(const Config &c) {
  std::ostringstream os;
  os << "--dtype " << c.dtype << " --Hq " << c.Hq << " --Hkv " << c.Hkv
     << " --S " << c.S << " --D " << c.D << " --Dv " << c.Dv;
  if (c.prefix >= 0)
    os << " --q-lens " << join(c.qLens) << " --prefix " << c.prefix;
  else if (c.tree)
    os << " --q-lens " << join(c.qLens) << " --tree-parents=" // (-1 first)
       << join(c.treeParents);
  else
    os << " --B " << c.B << " --L " << c.L;
  auto list = [&](const char *flag, const std::vector<int64_t> &v) {
    if (!v.empty())
      os << " " << flag << " " << join(v);
  };
  if (c.packedKeys)
    os << " --k-lens " << join(c.kLens) << " --k-gap " << c.kGap;
  if (c.cacheMap)
    os << " --cache-batch-idx " << join(c.cacheBatchIdx) << " --cache-rows "
       << c.cacheRows;
  list("--q-offset", c.qOffset);
  list("--k-offset", c.kOffset);
  // Explicit positions over L = 0 or S = 0: tensors of no elements,
  // spelled --q-pos= (attention_case.py's empty list).
  if (c.explicitPositions)
    os << " --q-pos=" << join(c.qPos) << " --k-pos=" << join(c.kPos);
  if (c.nearLimit && !c.qOffset.empty())
    os << " --offset-type i64";
  list("--kv-len", c.kvLen);
  if (c.hasKeyValid) // (S = 0: --key-valid=, no elements)
    os << " --key-valid=" << join(c.keyValid);
  if (c.pageSize) {
    os << " --page-size " << c.pageSize << " --num-pages " << c.numPages;
    list("--block-table", c.blockTable);
  }
  if (!c.mask.empty())
    os << " --mask " << c.mask;
  if (c.causal)
    os << " --causal";
  if (c.window)
    os << " --window " << c.window;
  if (c.windowRight >= 0)
    os << " --window-right " << c.windowRight;
  auto floats = [&](const char *flag, const std::vector<double> &v) {
    if (v.empty())
      return;
    os << " " << flag << " ";
    for (size_t i = 0; i < v.size(); ++i)
      os << (i ? "," : "") << v[i];
  };
  floats("--sinks", c.sinks);
  floats("--alibi", c.alibi);
  if (c.softcap)
    os << " --softcap " << c.softcap;
  if (c.scale)
    os << " --scale " << c.scale;
  if (c.lse)
    os << " --lse";
  if (c.latent)
    os << " --latent";
  if (c.append)
    os << " --append";
  if (!c.kvDtype.empty())
    os << " --kv-dtype " << c.kvDtype << " --kv-scales " << c.kvScales;
  if (c.kvScaleFactor != 1)
    os << " --kv-scale-factor " << c.kvScaleFactor;
  if (c.chip.empty())
    os << " -- --target=cpu";
  else
    os << " -- --target=gpu-emu --chip=" << c.chip;
  os << " --check --seed " << c.dataSeed;
  if (c.magnitude != 1)
    os << " --magnitude " << c.magnitude;
  if (c.fp8Magnitude)
    os << " --fp8-magnitude " << c.fp8Magnitude;
  for (const Config::Fill &f : fillsOf(c))
    os << " --fill=" << f.arg << "=" << f.row * c.D << ":" << c.D << ":"
       << f.value;
  if (!c.chip.empty()) {
    if (c.gpuSplitKv)
      os << " --split-kv " << c.gpuSplitKv;
    if (!c.packGqa)
      os << " --pack-gqa=false";
    if (!c.lazyRescale)
      os << " --lazy-rescale=false";
    if (c.nearLimit)
      os << " --index-bitwidth=64";
    if (c.keepDynamicShapes)
      os << " --specialize-shapes=false";
    if (c.plan != Config::Plan::None)
      os << " --plan=" << (c.plan == Config::Plan::Device ? "device" : "host")
         << " --plan-slack=" << c.planSlack << " --plan-runs=" << c.planRuns;
    os << "   (env KVATTN_EMU_SM=" << emuSm(c) << " KVATTN_EMU_SMS=" << c.sms
       << ")";
  } else {
    os << " --block-m " << c.blockM << " --block-n " << c.blockN
       << " --split-kv " << c.splitKv;
    if (!c.packGqa)
      os << " --pack-gqa=false";
    os << " --vectorize=" << (c.vectorize ? "true" : "false")
       << " --vector-width=" << c.vectorWidth << " --num-threads=" << c.threads;
  }
  if (c.dynamicDims)
    os << "   (the failing IR had dynamic" << (c.dynamicDims & 1 ? " B" : "")
       << (c.dynamicDims & 2 ? " L" : "") << (c.dynamicDims & 4 ? " S" : "")
       << ")";
  return os.str();
}

/// Fills in the per-batch operands for the current sizes and flags.
void drawOperands(Config &c, std::mt19937_64 &rng) {
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  auto increasing = [&](int64_t n) {
    std::vector<int64_t> v;
    int64_t p = uniform(0, 5);
    if (c.nearLimit) // the last position at most 2^62
      p += kLimit - 3 * n - 5;
    for (int64_t i = 0; i < n; ++i)
      v.push_back(p += uniform(1, 3));
    return v;
  };
  c.qOffset.clear();
  c.kOffset.clear();
  c.qPos.clear();
  c.kPos.clear();
  c.kvLen.clear();
  c.keyValid.clear();
  c.blockTable.clear();
  c.qLens.clear();
  c.treeParents.clear();
  c.kLens.clear();
  c.kStart.clear();
  c.cacheBatchIdx.clear();
  if (c.tree) {
    // Each sequence's draft tokens are the last of its keys; the roots
    // follow the cached prefix (q_offset = k_offset + kv_len - L_b).
    for (int64_t b = 0; b < c.B; ++b) {
      const int64_t rows = uniform(0, std::min(c.L, c.S));
      const int64_t len = uniform(rows, c.S);
      const int64_t kOff = c.hasKOffset ? uniform(0, 8) : 0;
      c.qLens.push_back(rows);
      c.kvLen.push_back(len);
      if (c.hasKOffset)
        c.kOffset.push_back(kOff);
      c.qOffset.push_back(kOff + len - rows);
      for (int64_t i = 0; i < rows; ++i)
        c.treeParents.push_back(
            i == 0 || uniform(0, 3) == 0 ? -1 : uniform(0, i - 1));
    }
    if (c.hasKeyValid)
      for (int64_t i = 0; i < c.B * c.S; ++i)
        c.keyValid.push_back(uniform(0, 4) != 0);
    return;
  }
  if (c.pageSize) // whole pages of logical keys; kv_len bounds the reads
    c.S = (c.S + c.pageSize - 1) / c.pageSize * c.pageSize;
  if (c.explicitPositions) {
    for (int64_t b = 0; b < c.B; ++b) {
      auto q = increasing(c.L), k = increasing(c.S);
      // Not monotone: valid for the reference and the CPU path; the GPU
      // runtime requires increasing positions (docs/runtime.md).
      if (c.chip.empty() && uniform(0, 3) == 0)
        std::shuffle(k.begin(), k.end(), rng);
      c.qPos.insert(c.qPos.end(), q.begin(), q.end());
      c.kPos.insert(c.kPos.end(), k.begin(), k.end());
    }
  } else if (c.hasOffsets) {
    // Near the limit: the last query and key positions within 2^62.
    const int64_t base = c.nearLimit ? kLimit - c.L - c.S - 16 : 0;
    for (int64_t b = 0; b < c.B; ++b) {
      c.qOffset.push_back(base + uniform(0, c.S + 8));
      if (c.hasKOffset)
        c.kOffset.push_back(base + uniform(0, 8));
    }
  }
  if (c.packedKeys) {
    // Sequence b owns kLens[b] <= S rows after kGap unowned ones; kv_len,
    // if any, within them (with a gap, attention_case.py's default: the
    // lengths themselves).
    int64_t row = 0;
    for (int64_t b = 0; b < c.B; ++b) {
      c.kLens.push_back(uniform(0, c.S));
      row += c.kGap;
      c.kStart.push_back(row);
      row += c.kLens.back();
    }
    c.kStart.push_back(row);
    if (c.kGap)
      c.hasKvLen = true;
    if (c.hasKvLen)
      for (int64_t b = 0; b < c.B; ++b)
        c.kvLen.push_back(c.kGap && uniform(0, 1) ? c.kLens[b]
                                                  : uniform(0, c.kLens[b]));
  } else if (c.hasKvLen) {
    for (int64_t b = 0; b < c.B; ++b)
      c.kvLen.push_back(uniform(0, c.S));
  }
  if (c.append) {
    // The new tokens fit the capacity: q_offset + L <= S (shrinking may
    // have made S < L).
    c.L = std::min(c.L, c.S);
    for (int64_t b = 0; b < c.B; ++b) {
      c.qOffset[b] = uniform(0, c.S - c.L);
      c.kvLen[b] = c.qOffset[b] + c.L;
    }
  }
  if (c.cacheMap) {
    c.cacheRows = c.B + uniform(0, 2);
    for (int64_t b = 0; b < c.B; ++b)
      c.cacheBatchIdx.push_back(uniform(0, c.cacheRows - 1));
  }
  if (c.hasKeyValid)
    for (int64_t i = 0; i < c.B * c.S; ++i)
      c.keyValid.push_back(uniform(0, 4) != 0);
  if (c.pageSize) {
    // Each sequence takes the pages its kv_len needs, sometimes more, from a
    // random permutation of the cache's pages; then the -1 tail.
    const int64_t maxPages = c.S / c.pageSize;
    c.numPages = c.B * maxPages + uniform(0, 3);
    std::vector<int64_t> free(c.numPages);
    std::iota(free.begin(), free.end(), 0);
    std::shuffle(free.begin(), free.end(), rng);
    for (int64_t b = 0; b < c.B; ++b) {
      int64_t need = (c.kvLen[b] + c.pageSize - 1) / c.pageSize;
      int64_t active = need + uniform(0, maxPages - need);
      for (int64_t slot = 0; slot < maxPages; ++slot) {
        c.blockTable.push_back(slot < active ? free.back() : -1);
        if (slot < active)
          free.pop_back();
      }
    }
  }
}

/// Cases drawn in MLA's decode shape (draw).
int64_t mlaCases = 0;

Config draw(std::mt19937_64 &rng) {
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  auto pick = [&](std::initializer_list<int64_t> xs) {
    return *(xs.begin() + uniform(0, xs.size() - 1));
  };
  Config c;
  const char *dtypes[] = {"f32", "f16", "bf16"};
  c.dtype = dtypes[uniform(0, 2)];
  c.B = uniform(1, 3);
  c.Hkv = uniform(1, 2);
  c.Hq = c.Hkv * pick({1, 2, 4});
  c.L = uniform(0, 9) == 0 ? 0 : uniform(1, 40);
  c.S = uniform(0, 9) == 0 ? 0 : uniform(1, 150);
  c.D = pick({8, 16, 24, 40, 64, 64, 128});
  c.Dv = uniform(0, 2) ? c.D : pick({8, 16, 32});
  // One case in eight: the latent form, V the key's first Dv <= D columns.
  if (uniform(0, 7) == 0) {
    c.latent = true;
    c.Dv = std::min(c.Dv, c.D);
  }
  c.explicitPositions = uniform(0, 3) == 0;
  c.causal = uniform(0, 9) < 7;
  c.window = uniform(0, 3) == 0 ? uniform(1, c.S + 5) : 0;
  c.windowRight =
      !c.causal && uniform(0, 2) == 0 ? uniform(0, c.S + 5) : int64_t(-1);
  c.softcap = uniform(0, 4) == 0 ? pick({1, 5, 30}) : 0;
  c.scale = uniform(0, 4) == 0 ? pick({1, 2}) * 0.25 : 0;
  c.lse = uniform(0, 1);
  c.hasOffsets = !c.explicitPositions &&
                 (c.causal || c.window || c.windowRight >= 0 || uniform(0, 1));
  c.hasKOffset = c.hasOffsets && uniform(0, 3) == 0;
  // Sinks around the scores (exact in binary); ALiBi where positions are.
  if (uniform(0, 4) == 0)
    for (int64_t h = 0; h < c.Hq; ++h)
      c.sinks.push_back(0.5 * static_cast<double>(uniform(-4, 8)));
  if ((c.hasOffsets || c.explicitPositions) && uniform(0, 4) == 0) {
    const double slopes[] = {0.5, 0.25, 0.0625, 0.0078125, 0.0};
    for (int64_t h = 0; h < c.Hq; ++h)
      c.alibi.push_back(slopes[uniform(0, 4)]);
  }
  c.hasKeyValid = uniform(0, 3) == 0;
  c.hasKvLen = uniform(0, 1);
  if (uniform(0, 4) == 0)
    c.mask = uniform(0, 1) ? "bool" : "float";
  c.blockM = pick({1, 8, 16, 32, 64, 128});
  c.blockN = pick({1, 8, 16, 32, 64});
  c.splitKv = pick({1, 1, 2, 3, 7});
  c.packGqa = uniform(0, 3) != 0;
  c.vectorize = uniform(0, 4) != 0;
  c.vectorWidth = pick({0, 0, 1, 2, 4, 8, 16});
  c.threads = pick({1, 1, 2});
  if (uniform(0, 3) == 0) {
    c.pageSize = pick({1, 2, 4, 16});
    c.hasKvLen = true; // paged attention needs kv_len
  }
  c.magnitude = pick({1, 1, 1, 2, 4});
  if (c.dtype != "f16" && uniform(0, 11) == 0) // f16 cannot hold them
    c.magnitude = uniform(0, 1) ? 1e19 : 1e30;
  // One case in five: an FP8 KV cache (not with inputs of 1e19 and more,
  // which FP8 cannot hold).
  if (c.magnitude < 1e19 && uniform(0, 4) == 0) {
    c.kvDtype = uniform(0, 1) ? "f8E4M3FN" : "f8E5M2";
    const char *granularity[] = {"tensor", "head", "token"};
    c.kvScales = granularity[uniform(0, 2)];
    // One in three: codes over the format's range (e4m3 to 448, e5m2 to
    // 57,344) under scales of 2^-9 / 2^-16 times [0.25, 2]; one in six:
    // scales of 1,024 times those.
    if (const int regime = uniform(0, 5); regime < 2) {
      const bool e4m3 = c.kvDtype == "f8E4M3FN";
      c.fp8Magnitude = e4m3 ? 448 : 57344;
      c.kvScaleFactor = e4m3 ? 0x1p-9 : 0x1p-16;
    } else if (regime == 2) {
      c.kvScaleFactor = 1024;
    }
  }
  c.nearLimit = uniform(0, 7) == 0;
  c.dynamicDims = uniform(0, 2) == 0 ? uniform(1, 7) : 0;
  // One case in six: a ragged batch of draft-token trees (offset form, no
  // mask, plain caches, static sizes).
  if (uniform(0, 5) == 0) {
    c.tree = true;
    c.explicitPositions = false;
    c.hasOffsets = c.hasKvLen = true;
    c.windowRight = -1;
    c.mask = "";
    c.pageSize = 0;
    c.nearLimit = false;
    c.dynamicDims = 0;
    if (c.alibi.empty() && uniform(0, 4) == 0)
      c.alibi.assign(c.Hq, 0.25);
  }
  // One ragged batch in three: shared-prefix attention instead of trees
  // (kvattn.cascade: causal, softcap, scale and lse only).
  if (c.tree && uniform(0, 2) == 0) {
    c.prefix = pick({0, 1, 16, 64, 200});
    c.window = 0;
    c.sinks.clear();
    c.alibi.clear();
    c.hasKeyValid = c.hasKOffset = false;
    c.kvDtype = "";
    c.fp8Magnitude = 0;
    c.kvScaleFactor = 1;
    c.latent = false;
  }
  // One case in eight each, where they apply: ragged keys (no pages,
  // trees, explicit positions, masks, key validity) and a batch-to-cache
  // map (no pages, trees, key validity); both with static sizes.
  if (!c.tree && !c.pageSize && !c.explicitPositions && c.mask.empty() &&
      uniform(0, 7) == 0) {
    c.packedKeys = true;
    c.kGap = pick({0, 0, 1, 3});
    c.hasKeyValid = false;
    c.dynamicDims = 0;
  } else if (!c.tree && !c.pageSize && uniform(0, 7) == 0) {
    c.cacheMap = true;
    c.hasKeyValid = false;
    c.dynamicDims = 0;
  }
  if (uniform(0, 29) == 0) {
    c.optionOverLimit = true;
    if (uniform(0, 1))
      c.blockM = 257;
    else
      c.splitKv = 257;
  }
  if (target == Target::GpuEmu) {
    const char *chips[] = {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"};
    c.chip = chips[uniform(0, 4)];
    c.sms = pick({132, 132, 8, 1});
    c.gpuSplitKv = uniform(0, 3) == 0 ? uniform(1, 3) : 0;
    c.lazyRescale = uniform(0, 3) != 0;
    c.keepDynamicShapes = uniform(0, 2) == 0;
    c.optionOverLimit = false; // the CPU path's options
    // One case in three through a plan.
    if (uniform(0, 2) == 0) {
      c.plan = uniform(0, 1) ? Config::Plan::Device : Config::Plan::Host;
      c.planSlack = pick({0, 1, 3});
      c.planRuns = uniform(0, 3) == 0 ? 2 : 1;
    }
  }
  // One case in six (not with trees, ragged keys, cache maps, explicit
  // positions or positions near 2^62): a serving step that appends its
  // new tokens first.
  if (!c.tree && !c.packedKeys && !c.cacheMap && !c.explicitPositions &&
      !c.nearLimit && uniform(0, 5) == 0) {
    c.append = true;
    c.hasOffsets = c.hasKvLen = true;
    c.hasKOffset = false;
    c.dynamicDims = 0;
  }
  // One case in twenty: DeepSeek MLA's decode (the latent kernels proper:
  // D = 576 = 512 latent + 64 rotary, Dv = 512, one latent head under 16
  // or 128 query heads, paged by 64 half the time); the latent cases above
  // are small and take the generic kernels.
  if (!c.tree && c.magnitude < 1e19 && uniform(0, 19) == 0) {
    c.latent = true;
    c.dtype = uniform(0, 3) ? "bf16" : "f16";
    c.D = 576;
    c.Dv = 512;
    c.Hkv = 1;
    c.Hq = pick({16, 16, 128});
    c.L = pick({1, 1, 1, 2});
    c.S = uniform(1, 300);
    c.mask = "";
    if (!c.packedKeys && !c.cacheMap)
      c.pageSize = uniform(0, 1) ? 64 : 0;
    c.hasKvLen = c.hasKvLen || c.pageSize;
    // One sink and slope per query head.
    if (!c.sinks.empty())
      c.sinks.resize(c.Hq, c.sinks.front());
    if (!c.alibi.empty())
      c.alibi.resize(c.Hq, c.alibi.front());
    ++mlaCases;
  }
  c.dataSeed = rng();
  drawOperands(c, rng);
  // One case in four: a query row or two of one large value, and key rows
  // of one value half the time (their scores tie exactly), far beyond
  // ordinary scores (f16 holds at most 65,504).
  if (c.magnitude < 1e19 && uniform(0, 3) == 0) {
    const bool half = c.dtype == "f16";
    const double queries[] = {1e3, 1e6, 5e8, 1e10}, keys[] = {100, 1e4};
    auto sign = [&] { return uniform(0, 1) ? 1.0 : -1.0; };
    for (int64_t n = uniform(1, 2); n > 0; --n)
      c.fills.push_back(
          {0, static_cast<int64_t>(rng() >> 1),
           sign() * (half ? pick({300, 60000}) : queries[uniform(0, 3)])});
    if (uniform(0, 1)) {
      // (e4m3 holds at most 448.)
      const double key = !c.kvDtype.empty() ? 100
                         : half             ? pick({300, 60000})
                                            : keys[uniform(0, 1)];
      for (int64_t n = uniform(1, 2); n > 0; --n)
        c.fills.push_back({1, static_cast<int64_t>(rng() >> 1), key});
    }
  }
  return c;
}

std::string tensorType(std::vector<int64_t> shape, const std::string &elt) {
  std::string s = "tensor<";
  for (int64_t d : shape)
    s += (d < 0 ? std::string("?") : std::to_string(d)) + "x";
  return s + elt + ">";
}

/// The IR of a config: q, k, v, [mask] as arguments; integer operands as
/// arguments too (run-time values).
std::string buildIR(const Config &c, std::vector<HostTensor> &intArgs,
                    std::vector<int> &intArgIndex) {
  // The IR's sizes: -1 spells a dynamic dimension ("?"); the arguments
  // keep the concrete shapes.
  const int64_t B = c.dynamicDims & 1 ? -1 : c.B,
                L = c.dynamicDims & 2 ? -1 : c.L,
                S = c.dynamicDims & 4 ? -1 : c.S;
  std::vector<int64_t> kvShape = {B, c.Hkv, S};
  if (c.pageSize || c.packedKeys || c.cacheMap) // static sizes
    kvShape = cacheShape(c);
  auto withDim = [&](int64_t d) {
    std::vector<int64_t> shape = kvShape;
    shape.push_back(d);
    return shape;
  };
  // A ragged batch packs its T rows into one [1, Hq, T, D] query.
  const int64_t qb = c.tree ? 1 : B, ql = c.tree ? packedRows(c) : L;
  const std::string &cacheType = c.kvDtype.empty() ? c.dtype : c.kvDtype;
  std::string q = tensorType({qb, c.Hq, ql, c.D}, c.dtype),
              k = tensorType(withDim(c.D), cacheType),
              v = tensorType(withDim(c.Dv), cacheType),
              out = tensorType({qb, c.Hq, ql, c.Dv}, c.dtype),
              lse = tensorType({qb, c.Hq, ql}, "f32");
  std::string sig = "%q: " + q + ", %k: " + k + (c.latent ? "" : ", %v: " + v),
              groups;
  int arg = c.latent ? 2 : 3;
  // A cascade's prefix before the suffixes.
  const std::string pk = tensorType({1, c.Hkv, c.prefix, c.D}, c.dtype),
                    pv = tensorType({1, c.Hkv, c.prefix, c.Dv}, c.dtype);
  if (c.prefix >= 0) {
    sig = "%q: " + q + ", %pk: " + pk + ", %pv: " + pv + ", %k: " + k +
          ", %v: " + v;
    arg = 5;
  }
  // A step's new tokens (the query's element type).
  const std::string kNew = tensorType({B, c.Hkv, L, c.D}, c.dtype),
                    vNew = tensorType({B, c.Hkv, L, c.Dv}, c.dtype);
  if (c.append) {
    sig += ", %k_new: " + kNew + (c.latent ? "" : ", %v_new: " + vNew);
    arg += c.latent ? 1 : 2;
  }
  std::map<std::string, std::string> typeOf; // operand types by name
  auto add = [&](const char *name, bool present,
                 const std::vector<int64_t> &values, std::vector<int64_t> shape,
                 const char *elt) {
    if (!present)
      return;
    std::vector<int64_t> typeShape = shape;
    for (size_t d = 0; d < shape.size(); ++d)
      if ((d == 0 && B < 0) ||
          (std::string(name) == "q_pos" && d == 1 && L < 0) ||
          ((std::string(name) == "k_pos" || std::string(name) == "key_valid") &&
           d == 1 && S < 0))
        typeShape[d] = -1;
    std::string ty = tensorType(typeShape, elt);
    sig += std::string(", %") + name + ": " + ty;
    groups += std::string(" ") + name + "(%" + name + " : " + ty + ")";
    typeOf[name] = ty;
    HostTensor t(std::string(elt) == "i1"    ? ElementType::I1
                 : std::string(elt) == "i32" ? ElementType::I32
                                             : ElementType::I64,
                 shape);
    for (size_t i = 0; i < values.size(); ++i)
      t.setInt(i, values[i]);
    intArgs.push_back(std::move(t));
    intArgIndex.push_back(arg++);
  };
  const char *offsetType = c.nearLimit ? "i64" : "i32";
  std::vector<int64_t> starts = {0};
  for (int64_t n : c.qLens)
    starts.push_back(starts.back() + n);
  add("q_start", c.tree, starts, {c.B + 1}, "i32");
  add("k_start", c.packedKeys, c.kStart, {c.B + 1}, "i32");
  add("cache_batch_idx", c.cacheMap, c.cacheBatchIdx, {c.B}, "i32");
  add("q_offset", c.hasOffsets, c.qOffset, {c.B}, offsetType);
  add("k_offset", c.hasKOffset, c.kOffset, {c.B}, offsetType);
  add("q_pos", c.explicitPositions, c.qPos, {c.B, c.L}, "i64");
  add("k_pos", c.explicitPositions, c.kPos, {c.B, c.S}, "i64");
  add("kv_len", c.hasKvLen, c.kvLen, {c.B}, "i32");
  add("key_valid", c.hasKeyValid, c.keyValid, {c.B, c.S}, "i1");
  if (!c.mask.empty()) {
    std::string ty =
        tensorType({B, 1, L, S}, c.mask == "bool" ? "i1" : c.dtype);
    sig += ", %mask: " + ty;
    groups += " mask(%mask : " + ty + ")";
    ++arg;
  }
  // After the mask: the op's assembly order.
  add("block_table", c.pageSize != 0, c.blockTable,
      {c.B, c.pageSize ? c.S / c.pageSize : 0}, "i32");
  // Sinks and ALiBi slopes: f32 [Hq], passed like the integer operands.
  // f32 operands passed like the integer ones: sinks and ALiBi slopes
  // [Hq], an FP8 cache's scales (typeShape: the IR's, dynamic dims -1; a
  // token granularity over S = 0 holds no values).
  auto addFloats = [&](const char *name, const std::vector<double> &values,
                       const std::vector<int64_t> &shape,
                       const std::vector<int64_t> &typeShape) {
    std::string ty = tensorType(typeShape, "f32");
    sig += std::string(", %") + name + ": " + ty;
    groups += std::string(" ") + name + "(%" + name + " : " + ty + ")";
    typeOf[name] = ty;
    HostTensor t(ElementType::F32, shape);
    for (size_t i = 0; i < values.size(); ++i)
      t.setDouble(i, values[i]);
    intArgs.push_back(std::move(t));
    intArgIndex.push_back(arg++);
  };
  if (!c.sinks.empty()) // (empty: none)
    addFloats("sinks", c.sinks, {c.Hq}, {c.Hq});
  if (!c.alibi.empty())
    addFloats("alibi_slopes", c.alibi, {c.Hq}, {c.Hq});
  add("tree_parents", c.tree && c.prefix < 0, c.treeParents, {packedRows(c)},
      "i32");
  if (!c.kvDtype.empty())
    for (auto [name, step] :
         {std::pair<const char *, int>{"k_scale", 5}, {"v_scale", 3}}) {
      if (c.latent && step == 3) // k_scale dequantises the latent cache
        continue;
      auto [shape, values] = kvScaleValues(c, step);
      std::vector<int64_t> typeShape = shape;
      if (c.kvScales == "token" && !c.pageSize) {
        if (B < 0)
          typeShape[0] = -1;
        if (S < 0)
          typeShape[2] = -1;
      }
      addFloats(name, values, shape, typeShape);
    }
  std::string attrs;
  if (c.causal)
    attrs += " causal";
  if (c.window)
    attrs += " window = " + std::to_string(c.window);
  if (c.windowRight >= 0)
    attrs += " window_right = " + std::to_string(c.windowRight);
  if (c.softcap)
    attrs += " softcap = " + std::to_string(c.softcap);
  if (c.scale)
    attrs += " scale = " + std::to_string(c.scale);
  std::string results = out + (c.lse ? ", " + lse : "");
  std::string names = c.lse ? "%o, %l" : "%o";
  // A step's writes (attention_case.py --append), then the attention over
  // the written caches, which are results too.
  std::string appends, returned = names, returnedTypes = results;
  if (c.append)
    for (auto [cache, update, scale] :
         {std::tuple<std::string, std::string, std::string>{"k", "k_new",
                                                            "k_scale"},
          {"v", "v_new", "v_scale"}}) {
      if (cache == "v" && c.latent)
        continue;
      const std::string &cacheType = cache == "k" ? k : v;
      appends += "  %" + cache + "_w = kvattn.append %" + update + " into %" +
                 cache + " at %q_offset";
      if (c.pageSize)
        appends += " block_table(%block_table : " + typeOf["block_table"] + ")";
      if (!c.kvDtype.empty())
        appends += " kv_scale(%" + scale + " : " + typeOf[scale] + ")";
      appends += " : " + (cache == "k" ? kNew : vNew) + " into " + cacheType +
                 ", " + typeOf["q_offset"] + "\n";
      returned += ", %" + cache + "_w";
      returnedTypes += ", " + cacheType;
    }
  const std::string key = c.append ? "%k_w" : "%k",
                    value = c.append ? "%v_w" : "%v";
  if (c.prefix >= 0)
    return "func.func @main(" + sig + ") -> (" + results + ") {\n  " + names +
           " = kvattn.cascade %q, %pk, %pv, %k, %v" + groups + attrs + " : " +
           q + ", " + pk + ", " + pv + ", " + k + ", " + v + " -> " + results +
           "\n  return " + names + " : " + results + "\n}\n";
  const std::string operands =
      c.latent ? "%q, " + key + " value_dim = " + std::to_string(c.Dv)
               : "%q, " + key + ", " + value;
  return "func.func @main(" + sig + ") -> (" + returnedTypes + ") {\n" +
         appends + "  " + names + " = kvattn.attention " + operands + groups +
         attrs + " : " + q + ", " + k + (c.latent ? "" : ", " + v) + " -> " +
         results + "\n  return " + returned + " : " + returnedTypes + "\n}\n";
}

/// Result `r`'s magnitudes (kvattn-run --check's): an lse (result 1 with
/// lse) mixes no values, its values' factor stays the inputs' magnitude.
mlir::kvattn::OperandMagnitudes
resultMagnitudes(const Config &c, size_t r,
                 mlir::kvattn::OperandMagnitudes magnitudes) {
  if (c.lse && r == 1)
    magnitudes.value = c.magnitude;
  return magnitudes;
}

/// The results against the reference's, with --check's tolerances.
std::string compareResults(const Config &c, const std::vector<HostTensor> &got,
                           const std::vector<HostTensor> &expected,
                           const mlir::kvattn::OperandMagnitudes &magnitudes) {
  if (got.size() != expected.size())
    return std::to_string(got.size()) + " results, the reference has " +
           std::to_string(expected.size());
  for (size_t r = 0; r < expected.size(); ++r) {
    mlir::kvattn::Comparison cmp = mlir::kvattn::compare(
        got[r], expected[r],
        mlir::kvattn::toleranceFor(expected[r].elementType(),
                                   resultMagnitudes(c, r, magnitudes)));
    if (!cmp.pass())
      return "out" + std::to_string(r) + ": " + std::to_string(cmp.mismatches) +
             " mismatches, max_abs_err " + std::to_string(cmp.maxAbsErr);
  }
  return "";
}

/// A case with rows of one large value (fills): each query row r's scores
/// are known only to delta_r = D * 2^-24 * scale * |q_r|_1 * max|K| in
/// f32 (the reference's are exact), so a row is compared as closely as
/// its conditioning allows: lse within the base tolerance plus delta_r;
/// the output within the base tolerance plus (exp(2 delta_r) - 1) max|V|
/// while delta_r < 0.05, else (weights undetermined) only finite and
/// inside the values' range, a convex combination's bound. Rows without
/// fills have delta_r of ordinary scores: the usual comparison. Non-finite
/// expected values (empty rows' lse) must be matched exactly.
std::string
compareConditioned(const Config &c, const std::vector<HostTensor> &args,
                   const std::vector<HostTensor> &got,
                   const std::vector<HostTensor> &expected,
                   const mlir::kvattn::OperandMagnitudes &magnitudes) {
  if (got.size() != expected.size())
    return std::to_string(got.size()) + " results, the reference has " +
           std::to_string(expected.size());
  // (The latent form's V is columns of K: K's bound holds for it.)
  const HostTensor &q = args[0], &k = args[1], &v = args[c.latent ? 1 : 2];
  // (An FP8 cache's codes count dequantised: operandMagnitudes.)
  double kMax = 0, vMax = 0;
  if (!c.kvDtype.empty()) {
    kMax = magnitudes.key;
    vMax = magnitudes.value;
  } else {
    for (int64_t i = 0; i < k.numElements(); ++i)
      kMax = std::max(kMax, std::fabs(k.getDouble(i)));
    for (int64_t i = 0; i < v.numElements(); ++i)
      vMax = std::max(vMax, std::fabs(v.getDouble(i)));
  }
  for (size_t a = 3; c.prefix >= 0 && a < 5; ++a) // a cascade's suffixes
    for (int64_t i = 0; i < args[a].numElements(); ++i)
      (a == 3 ? kMax : vMax) =
          std::max(a == 3 ? kMax : vMax, std::fabs(args[a].getDouble(i)));
  if (c.append) { // the step's new tokens are keys and values too
    const size_t caches = c.latent ? 2 : 3;
    const HostTensor &kNew = args[caches], &vNew = args[c.latent ? 2 : 4];
    for (int64_t i = 0; i < kNew.numElements(); ++i)
      kMax = std::max(kMax, std::fabs(kNew.getDouble(i)));
    for (int64_t i = 0; i < vNew.numElements(); ++i)
      vMax = std::max(vMax, std::fabs(vNew.getDouble(i)));
  }
  const double scale = c.scale ? c.scale : 1.0 / std::sqrt(double(c.D));
  const int64_t rows = q.numElements() / std::max<int64_t>(c.D, 1);
  std::vector<double> delta(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double l1 = 0;
    for (int64_t d = 0; d < c.D; ++d)
      l1 += std::fabs(q.getDouble(r * c.D + d));
    delta[r] = c.D * 0x1p-24 * scale * l1 * kMax;
  }
  for (size_t out = 0; out < expected.size(); ++out) {
    const HostTensor &g = got[out], &e = expected[out];
    if (g.numElements() != e.numElements())
      return "out" + std::to_string(out) + ": " +
             std::to_string(g.numElements()) + " elements, the reference has " +
             std::to_string(e.numElements());
    const mlir::kvattn::Tolerance base = mlir::kvattn::toleranceFor(
        e.elementType(), resultMagnitudes(c, out, magnitudes));
    if (out >= (c.lse ? 2u : 1u)) { // a step's caches: no scores in them
      if (!mlir::kvattn::compare(g, e, base).pass())
        return "out" + std::to_string(out) + ": the cache after the step " +
               "differs from the reference's";
      continue;
    }
    const int64_t width = out == 0 ? c.Dv : 1; // out, then lse
    for (int64_t i = 0; i < e.numElements(); ++i) {
      const double want = e.getDouble(i), have = g.getDouble(i);
      const double dr = delta[i / width];
      bool ok;
      if (!std::isfinite(want))
        ok = std::isnan(want) ? std::isnan(have) : have == want;
      else if (!std::isfinite(have))
        ok = false;
      else if (out == 1)
        ok = std::fabs(have - want) <=
             base.atol + base.rtol * std::fabs(want) + dr;
      else if (dr < 0.05)
        ok = std::fabs(have - want) <= base.atol + base.rtol * std::fabs(want) +
                                           std::expm1(2 * dr) * vMax;
      else
        ok = std::fabs(have) <= vMax * (1 + base.rtol) + base.atol;
      if (!ok)
        return "out" + std::to_string(out) + "[" + std::to_string(i) +
               "]: got " + std::to_string(have) + ", want " +
               std::to_string(want) + " (row's score uncertainty " +
               std::to_string(dr) + ")";
    }
  }
  return "";
}

/// --target=gpu-emu: the emulated driver, opened once; refusals by message.
mlir::kvattn::EmulatedGpu emulator;
std::map<std::string, int64_t> refusals;

/// The compile options of a config's GPU case.
mlir::kvattn::PtxOptions gpuOptions(const Config &c) {
  mlir::kvattn::PtxOptions options;
  options.chip = c.chip;
  options.image = mlir::kvattn::DeviceImage::LlvmIR;
  options.splitKv = c.gpuSplitKv;
  options.packGqa = c.packGqa;
  options.lazyRescale = c.lazyRescale;
  options.useKernelCache = false; // random kernels: nothing to reuse
  // Positions near 2^62 need 64-bit index arithmetic (a 32-bit kernel
  // refuses them at launch, by name).
  if (c.nearLimit)
    options.indexBitwidth = 64;
  return options;
}

/// Compiles and runs the config's function for its chip on the emulated
/// GPU (GpuExecutor, or through a plan). A compiler refusal is counted in
/// `refusals` and passes; a launch error, a memcheck or racecheck report or
/// a mismatch fails.
std::string
runOnEmulatedGpu(mlir::func::FuncOp func, const Config &c,
                 const std::vector<HostTensor> &args,
                 const std::vector<HostTensor> &expected,
                 const mlir::kvattn::OperandMagnitudes &magnitudes) {
  // The device's capability and multiprocessors, read at each query.
  ::setenv("KVATTN_EMU_SM", emuSm(c).c_str(), 1);
  ::setenv("KVATTN_EMU_SMS", std::to_string(c.sms).c_str(), 1);
  const mlir::kvattn::PtxOptions options = gpuOptions(c);
  std::unique_ptr<mlir::kvattn::GpuExecutor> gpu;
  if (mlir::kvattn::Status s = mlir::kvattn::GpuExecutor::create(options, gpu);
      s.isError())
    return "the emulated GPU: " + s.message();
  gpu->setKeepDynamicShapes(c.keepDynamicShapes);
  mlir::kvattn::AttentionExecutor executor =
      [&](mlir::Operation *op, const std::vector<const HostTensor *> &in,
          std::vector<HostTensor> &out) { return gpu->run(op, in, out); };
  std::vector<HostTensor> got;
  gpu->beginFunction();
  using PlanMetadata = mlir::kvattn::GpuExecutor::PlanMetadata;
  mlir::kvattn::Status ran =
      c.plan == Config::Plan::None
          ? mlir::kvattn::evaluateFunction(func, args, got, executor)
          : gpu->runFunctionThroughPlan(func, args, got,
                                        c.plan == Config::Plan::Device
                                            ? PlanMetadata::Device
                                            : PlanMetadata::Host,
                                        c.planSlack, c.planRuns);
  mlir::kvattn::Status freed = gpu->endFunction();
  if (std::string reports = emulator.takeReports(); !reports.empty())
    return "the emulated GPU reported:\n" + reports;
  if (ran.isError()) {
    const std::string &m = ran.message();
    // Faults fail launches with CUDA's error names; anything else is the
    // compiler or the launch's validation declining the configuration, by
    // name (through a plan: only planning, which compiles, may decline).
    if (m.find("CUDA_ERROR") != std::string::npos ||
        (c.plan != Config::Plan::None && m.rfind("planning @", 0) != 0))
      return "run failed: " + m;
    ++refusals[m.substr(0, m.find('\n'))];
    return "";
  }
  if (freed.isError())
    return "freeing failed: " + freed.message();
  return c.fills.empty()
             ? compareResults(c, got, expected, magnitudes)
             : compareConditioned(c, args, got, expected, magnitudes);
}

/// Runs one config; returns a non-empty failure description on mismatch.
std::string runCase(mlir::MLIRContext &context, const Config &c) {
  std::vector<HostTensor> intArgs;
  std::vector<int> intIndex;
  std::string ir = buildIR(c, intArgs, intIndex);
  auto module = mlir::parseSourceString<mlir::ModuleOp>(ir, &context);
  if (!module)
    return "generated IR does not parse:\n" + ir;
  auto func = module->lookupSymbol<mlir::func::FuncOp>("main");

  // Q, K, V exactly as kvattn-run --seed generates them, masks with the
  // pattern of attention_case.py: the printed regression replays the case.
  std::vector<HostTensor> args;
  size_t nextInt = 0;
  for (auto [i, type] : llvm::enumerate(func.getArgumentTypes())) {
    auto tensor = mlir::cast<mlir::RankedTensorType>(type);
    if (nextInt < intIndex.size() && intIndex[nextInt] == static_cast<int>(i)) {
      args.push_back(intArgs[nextInt++]);
      continue;
    }
    std::vector<int64_t> kvShape = cacheShape(c);
    // q, k, v (no v in the latent form), a step's k_new and v_new, then
    // the mask.
    const size_t caches = c.latent ? 2 : 3;
    const size_t tensors =
        c.prefix >= 0 ? 5 : caches + (c.append ? caches - 1 : 0);
    std::vector<int64_t> shape =
        i == 0 && c.tree ? std::vector<int64_t>{1, c.Hq, packedRows(c), c.D}
        : i == 0         ? std::vector<int64_t>{c.B, c.Hq, c.L, c.D}
        : i >= tensors   ? std::vector<int64_t>{c.B, 1, c.L, c.S}
        : i >= caches
            ? std::vector<int64_t>{c.B, c.Hkv, c.L, i == caches ? c.D : c.Dv}
            : kvShape;
    if (i == 1 || (i == 2 && !c.latent))
      shape.push_back(i == 1 ? c.D : c.Dv);
    if (c.prefix >= 0 && i >= 1 && i < 5) // a cascade's K/V: static types
      shape.assign(tensor.getShape().begin(), tensor.getShape().end());
    HostTensor t(*mlir::kvattn::toElementType(tensor.getElementType()), shape);
    if (i < tensors) {
      // (An FP8 cache's codes from fp8Magnitude's range: kvattn-run's
      // --fp8-magnitude.)
      const double m =
          mlir::kvattn::isFp8Type(t.elementType()) && c.fp8Magnitude > 0
              ? c.fp8Magnitude
              : c.magnitude;
      for (int64_t n = 0; n < t.numElements(); ++n)
        t.setDouble(n, mlir::kvattn::seededValue(c.dataSeed, i, n) * m);
      for (const Config::Fill &f : fillsOf(c))
        if (f.arg == static_cast<int>(i))
          for (int64_t d = 0; d < c.D; ++d)
            t.setDouble(f.row * c.D + d, f.value);
    } else { // the [B, 1, L, S] mask
      int64_t n = 0;
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t r = 0; r < c.L; ++r)
          for (int64_t j = 0; j < c.S; ++j, ++n) {
            bool keep = (3 * r + 5 * j + b) % 7 != 0;
            if (t.elementType() == ElementType::I1)
              t.setInt(n, keep);
            else
              t.setDouble(n, keep ? ((j % 5) - 2) * 0.25 : -INFINITY);
          }
    }
    args.push_back(std::move(t));
  }

  // What the tolerances grow with (before compilation lowers the module).
  const mlir::kvattn::OperandMagnitudes magnitudes =
      mlir::kvattn::operandMagnitudes(func, args, c.magnitude);
  std::vector<HostTensor> expected, got;
  if (mlir::kvattn::Status s =
          mlir::kvattn::evaluateFunction(func, args, expected);
      s.isError()) {
    // Huge inputs: the reference refuses what could overflow f32 (the
    // documented range), by name.
    if (c.magnitude >= 1e19 &&
        s.message().find("may overflow f32") != std::string::npos)
      return "";
    return "the reference rejected a valid case: " + s.message();
  }
  if (!c.chip.empty())
    return runOnEmulatedGpu(func, c, args, expected, magnitudes);
  mlir::kvattn::CpuCompileOptions options;
  options.blockM = c.blockM;
  options.blockN = c.blockN;
  options.splitKv = c.splitKv;
  options.packGqa = c.packGqa;
  options.vectorize = c.vectorize;
  options.vectorWidth = c.vectorWidth;
  options.threads = c.threads;
  options.optLevel = 1;
  std::unique_ptr<mlir::kvattn::CpuProgram> program;
  mlir::kvattn::Status compiled =
      mlir::kvattn::CpuProgram::compile(*module, "main", options, program);
  if (c.optionOverLimit)
    return compiled.isError() && compiled.message().find(
                                     "is above the limit") != std::string::npos
               ? ""
               : "an option beyond its limit was not refused by name: " +
                     (compiled.isError() ? compiled.message()
                                         : std::string("compiled"));
  if (compiled.isError())
    return "compilation failed: " + compiled.message();
  if (mlir::kvattn::Status s = program->run(args, got); s.isError())
    return "run failed: " + s.message();
  return c.fills.empty()
             ? compareResults(c, got, expected, magnitudes)
             : compareConditioned(c, args, got, expected, magnitudes);
}

/// Greedy shrinking: smaller sizes and fewer features while it still fails.
Config shrink(mlir::MLIRContext &context, Config c, std::mt19937_64 &rng) {
  bool progress = true;
  while (progress) {
    progress = false;
    for (int field = 0; field < 10; ++field) {
      Config t = c;
      switch (field) {
      case 0:
        t.B = std::max<int64_t>(1, c.B - 1);
        break;
      case 1:
        t.L = c.L / 2;
        break;
      case 2:
        t.S = c.S / 2;
        if (c.prefix > 0)
          t.prefix = c.prefix / 2;
        break;
      case 3:
        t.Hq = t.Hkv;
        break;
      case 4:
        t.Hkv = 1;
        t.Hq = c.Hq / c.Hkv;
        break;
      case 5:
        t.D = 8;
        if (t.latent) // value_dim <= D
          t.Dv = std::min(t.Dv, t.D);
        break;
      case 6:
        t.Dv = t.D;
        break;
      case 7:
        t.softcap = 0;
        t.scale = 0;
        break;
      case 8:
        t.mask = "";
        break;
      case 9:
        t.tree = false;
        t.prefix = -1;
        t.lse = false;
        t.window = 0;
        t.windowRight = -1;
        t.sinks.clear();
        t.alibi.clear();
        break;
      }
      if (t.window > t.S + 5)
        t.window = t.S + 5;
      // One sink and slope per query head (fields 3 and 4 change Hq).
      if (!t.sinks.empty())
        t.sinks.resize(t.Hq, t.sinks.front());
      if (!t.alibi.empty())
        t.alibi.resize(t.Hq, t.alibi.front());
      std::mt19937_64 again(t.dataSeed);
      drawOperands(t, again);
      bool smaller = t.B != c.B || t.L != c.L || t.S != c.S || t.Hq != c.Hq ||
                     t.D != c.D || t.Dv != c.Dv || t.softcap != c.softcap ||
                     t.mask != c.mask || t.lse != c.lse ||
                     t.window != c.window || t.windowRight != c.windowRight ||
                     t.sinks != c.sinks || t.alibi != c.alibi ||
                     t.tree != c.tree || t.prefix != c.prefix;
      if (smaller && !runCase(context, t).empty()) {
        c = t;
        progress = true;
      }
    }
  }
  return c;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(argc, argv, "kvattn differential fuzzer\n");
  mlir::registerAllPasses();
  mlir::kvattn::registerAllKVAttnPasses();
  mlir::DialectRegistry registry;
  mlir::kvattn::registerAllKVAttnDialects(registry);
  mlir::MLIRContext context(registry);
  context.disableMultithreading();

  if (target == Target::GpuEmu)
    if (mlir::kvattn::Status s = mlir::kvattn::EmulatedGpu::open(
            mlir::kvattn::emulatedDriverPath(), emulator);
        s.isError()) {
      llvm::errs() << "kvattn-fuzz-diff: --target=gpu-emu: " << s.message()
                   << "\n";
      return 1;
    }
  std::mt19937_64 rng(seed);
  struct {
    int64_t huge = 0, nearLimit = 0, dynamic = 0, overLimit = 0,
            splitOrPaged = 0, trees = 0, fills = 0, fp8 = 0, fp8Codes = 0,
            fp8LargeScales = 0, latent = 0, packedKeys = 0, cacheMap = 0,
            plans = 0, appends = 0, cascades = 0;
  } drawn;
  auto start = std::chrono::steady_clock::now();
  int64_t done = 0;
  for (; done < iterations; ++done) {
    if (seconds > 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                .count() > seconds)
      break;
    Config c = draw(rng);
    if (printCases)
      llvm::errs() << "case " << done << ": " << asFlags(c) << "\n";
    std::string failure = runCase(context, c);
    drawn.huge += c.magnitude >= 1e19;
    drawn.nearLimit += c.nearLimit;
    drawn.dynamic += c.dynamicDims != 0;
    drawn.overLimit += c.optionOverLimit;
    drawn.splitOrPaged += c.splitKv > 1 || c.pageSize;
    drawn.trees += c.tree && c.prefix < 0;
    drawn.fills += !c.fills.empty();
    drawn.fp8 += !c.kvDtype.empty();
    drawn.fp8Codes += c.fp8Magnitude > 0;
    drawn.fp8LargeScales += c.kvScaleFactor > 1;
    drawn.latent += c.latent;
    drawn.packedKeys += c.packedKeys;
    drawn.cacheMap += c.cacheMap;
    drawn.plans += c.plan != Config::Plan::None;
    drawn.appends += c.append;
    drawn.cascades += c.prefix >= 0;
    if (failure.empty())
      continue;
    llvm::outs() << "MISMATCH (iteration " << done << "): " << failure
                 << "\n  case: " << asFlags(c) << "\n";
    Config small = shrink(context, c, rng);
    std::string flags = asFlags(small);
    llvm::outs() << "  shrunk: " << runCase(context, small)
                 << "\n  regression: attention_case.py " << flags << "\n";
    if (!saveDir.empty()) {
      std::ofstream f(saveDir + "/failure-" + std::to_string(seed) + "-" +
                      std::to_string(done) + ".txt");
      f << flags << "\n";
    }
    return 1;
  }
  llvm::outs() << "kvattn-fuzz-diff: " << done
               << " random cases matched the reference ("
               << (target == Target::GpuEmu ? "gpu-emu" : "cpu") << ", seed "
               << seed << "); among them " << drawn.huge
               << " with inputs up to 1e19-1e30 (refused by name or no key "
                  "visible), "
               << drawn.nearLimit << " with positions near 2^62, "
               << drawn.dynamic << " with dynamic B/L/S, " << drawn.overLimit
               << " with an option beyond its limit (refused), "
               << drawn.splitOrPaged << " split-KV or paged, " << drawn.trees
               << " ragged batches of draft-token trees, " << drawn.fills
               << " with rows of one large value, " << drawn.fp8
               << " with an FP8 cache (" << drawn.fp8Codes
               << " with codes over the format, " << drawn.fp8LargeScales
               << " with scales above 1,000), " << drawn.latent
               << " in the latent form, " << drawn.packedKeys
               << " with ragged keys (k_start), " << drawn.cacheMap
               << " with a batch-to-cache map, " << drawn.appends
               << " serving steps appending their new tokens, "
               << drawn.cascades << " with a shared prefix (kvattn.cascade), "
               << mlaCases
               << " in MLA's decode shape (D 576, Dv 512, 16 or 128 heads)\n";
  if (target == Target::GpuEmu) {
    int64_t refused = 0;
    for (const auto &[message, n] : refusals)
      refused += n;
    llvm::outs() << "  on the emulated GPU (" << drawn.plans
                 << " through plans); " << refused
                 << " configurations refused by the compiler:\n";
    for (const auto &[message, n] : refusals)
      llvm::outs() << "    " << n << " x " << message << "\n";
  }
  return 0;
}
