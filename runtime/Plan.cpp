//===- Plan.cpp - plan once, run every serving step -----------------------===//

#include "kvattn/Runtime/Plan.h"
#include "kvattn/Support/Decimal.h"
#include "kvattn/Support/KeyRows.h"
#include "kvattn/Support/StatusWord.h"
#include "kvattn/Support/TreeParents.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <set>

namespace mlir {
namespace kvattn {
namespace rt {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

bool isNumber(const std::string &dim) {
  return !dim.empty() && std::isdigit(static_cast<unsigned char>(dim[0]));
}

/// Bytes of a workspace (f32 elements) at the bound sizes (a run-time
/// split's N at its bound, the rule's max). Every dimension it depends on
/// must be bounded (> 0) and the product must fit: a run within the bounds
/// then stays inside it.
Status boundBytes(const KernelInfo &k, const ParamInfo &p, const Sizes &bounds,
                  size_t &bytes) {
  const std::string what =
      "planning the split-KV workspace '" + p.name + "' of '" + k.name + "': ";
  int64_t n = 1;
  std::string spelled;
  for (const std::string &dim : p.shape) {
    int64_t size;
    if (isNumber(dim)) {
      std::optional<int64_t> parsed = parseDecimal(dim);
      if (!parsed)
        return Status::error(what + "dimension '" + dim +
                             "' does not fit in 64 bits");
      size = *parsed;
    } else if (dim == "N") {
      size = std::max<int64_t>(k.splitRule.maxSplits, 1);
    } else {
      size = sizeByName(bounds, dim);
      if (size < 0 && dim != "B+1")
        return Status::error(what + "unknown size '" + dim + "'");
      if (size == 0)
        return Status::error(what + "its size depends on " + dim +
                             ", which the bounds leave unbounded (0): give " +
                             dim + " a positive bound (max_sizes)");
    }
    spelled += (spelled.empty() ? "" : " x ") + str(size);
    if (__builtin_mul_overflow(n, size, &n))
      return Status::error(what + spelled + "... elements overflow 64 bits: " +
                           "lower the bounds");
  }
  if (__builtin_mul_overflow(static_cast<uint64_t>(n), uint64_t(4), &bytes))
    return Status::error(what + spelled +
                         " f32 elements overflow 64 bits of bytes: lower the "
                         "bounds");
  return Status::ok();
}

const char *paramName(int64_t id) {
  switch (id) {
  case kParamQOffset:
    return "q_offset";
  case kParamKOffset:
    return "k_offset";
  case kParamQPos:
    return "q_pos";
  case kParamKPos:
    return "k_pos";
  case kParamKvLen:
    return "kv_len";
  case kParamPos:
    return "pos";
  case kParamKeyValid:
    return "key_valid";
  case kParamQStart:
    return "q_start";
  case kParamKStart:
    return "k_start";
  case kParamCacheBatchIdx:
    return "cache_batch_idx";
  case kParamKScale:
    return "k_scale";
  case kParamVScale:
    return "v_scale";
  case kParamTreeParents:
    return "tree_parents";
  case kParamKRopePos:
    return "k_rope_pos";
  case kParamRotaryCos:
    return "rotary_cos";
  case kParamRotarySin:
    return "rotary_sin";
  case kParamPrefixPages:
    return "prefix_pages";
  case kParamPrefixLen:
    return "prefix_len";
  default:
    return "block_table";
  }
}

/// The status word's initial state: no rule, the largest key (0x7f bytes,
/// above every key a validation kernel forms), no values.
Status clearWord(Runtime &rt, DevicePtr status) {
  KVATTN_RETURN_IF_ERROR(rt.fill(status, 0, kStatusWords * 8));
  return rt.fill(status + kStatusKey * 8, 0x7f, 8);
}

} // namespace

std::string describeViolation(const std::array<int64_t, 16> &w,
                              const std::vector<std::string> &kernels) {
  const int64_t ordinal = w[kStatusKernel];
  const std::string kernel =
      ordinal >= 0 && ordinal < static_cast<int64_t>(kernels.size())
          ? kernels[ordinal]
          : "kernel " + str(ordinal);
  const std::string where = "launch of '" + kernel + "': ";
  const int64_t b = w[kStatusBatch], index = w[kStatusIndex],
                v = w[kStatusValue], aux = w[kStatusAux], size = w[kStatusSize],
                aux2 = w[kStatusAux2];
  const std::string name = paramName(w[kStatusParam]);
  const bool perKey = name == "q_pos" || name == "k_pos" || name == "key_valid";
  const std::string at = name + (perKey ? "[" + str(b) + ", " + str(index) + "]"
                                        : "[" + str(b) + "]");
  // A cascade's paged prefix: one sequence's table, named without a batch
  // (checkBlockTable's flat view).
  const bool prefixTable = name == "prefix_pages" || name == "prefix_len";
  const std::string batch = prefixTable ? "" : " (batch " + str(b) + ")";
  const std::string table =
      prefixTable ? std::string("prefix_pages") : "block_table[" + str(b) + "]";
  const std::string slot = table + "[" + str(index) + "] = " + str(v);
  switch (w[kStatusRule]) {
  case kRuleKvLenRange:
    return where + at + " = " + str(v) + " is outside [0, S = " + str(size) +
           "]" + batch;
  case kRuleNotBoolean:
    return where + at + " = " + str(v) + " is not 0 or 1" + batch;
  case kRuleNegative:
    return where + at + " = " + str(v) + " is negative" + batch;
  case kRuleTooLarge:
    return where + at + " = " + str(v) +
           " is out of range (above 2^62, batch " + str(b) + ")";
  case kRuleIndex32Position:
    return where + at + " = " + str(v) + kIndex32PositionRule + " (batch " +
           str(b) + ")" + kIndex32Advice;
  case kRuleNotIncreasing:
    return where + at + " = " + str(v) + " does not increase (previous " +
           str(aux) + ", batch " + str(b) +
           "): explicit positions must be strictly increasing";
  case kRulePageRange:
    return where + slot + ": page id out of range [0, " + str(size) + ")" +
           batch;
  case kRuleAfterEmpty:
    return where + slot + " follows the -1 at slot " + str(aux) +
           ": the -1 tail must be canonical" + batch;
  case kRuleRepeatedPage:
    return where + slot + ": page " + str(v) + " is already used at slot " +
           str(aux) + " of the same sequence" + batch;
  case kRuleKvLenPages:
    return where + name + "[" + str(b) + "] = " + str(v) +
           " does not fit the " + str(aux) + " page(s) of " + table +
           " (page_size " + str(size) + ", at most " + str(aux * size) +
           " tokens)" + batch;
  case kRuleAppendRange:
    return where + "pos[" + str(b) + "] = " + str(v) + " writes rows [" +
           str(v) + ", " + str(v + aux) +
           ") outside the cache capacity C = " + str(size) + batch;
  case kRuleAppendNegative:
    return where + "pos[" + str(b) + "] = " + str(v) + " is negative" + batch;
  case kRuleAppendPages: {
    const int64_t capacity = aux * size, token = std::max(v, capacity);
    return where + "pos[" + str(b) + "] = " + str(v) +
           " with L = " + str(aux2) + " does not fit the " + str(aux) +
           " page(s) of block_table[" + str(b) + "] (page_size " + str(size) +
           ", at most " + str(capacity) + " tokens): token " + str(token) +
           " falls in slot " + str(size ? token / size : 0) + batch;
  }
  case kRuleAppendSharedRow:
    return where + slot + ": token " + str(aux2) + " writes row " +
           str(size ? aux2 % size : 0) + " of page " + str(v) +
           ", which batch " + str(aux) + " also writes" + batch;
  // The q_start rules: checkQueryStarts' messages.
  case kRuleQStartFirst:
    return where + "q_start[0] = " + str(v) +
           " must be 0: the first sequence starts the packed query (batch 0)";
  case kRuleQStartDecrease:
    return where + "q_start[" + str(index) + "] = " + str(v) +
           " is below q_start[" + str(index - 1) + "] = " + str(aux) +
           ": sequence starts must not decrease" + batch;
  case kRuleQStartPastRows:
    return where + "q_start[" + str(index) + "] = " + str(v) +
           " is past the packed query rows T = " + str(size) + batch;
  case kRuleQStartLast:
    return where + "q_start[" + str(index) + "] = " + str(v) +
           " must equal the packed query rows T = " + str(size) +
           ": the last entry closes batch " + str(b) + batch;
  case kRuleQStartCache: {
    // index: k_offset[b], value: q_offset[b], aux/aux2: q_start[b], [b + 1],
    // size: kv_len[b].
    const int64_t rows = aux2 - aux;
    return where + "q_offset[" + str(b) + "] = " + str(v) +
           " with L = " + str(rows) + " row(s) (q_start[" + str(b) +
           "] = " + str(aux) + " .. q_start[" + str(b + 1) +
           "] = " + str(aux2) + ") puts the last query at position " +
           str(v + rows - 1) + ", past the last cached key at position " +
           str(index + size - 1) + " (kv_len[" + str(b) + "] = " + str(size) +
           "): the rows of a sequence must be tokens of its cache" + batch;
  }
  // Where the keys live: kvattn/Support/KeyRows.h's messages.
  case kRuleKStartNegative:
    return where + keyStartNegativeMessage(v);
  case kRuleKStartDecrease:
    return where + keyStartDecreaseMessage(b, aux, v);
  case kRuleKStartPastRows:
    return where + keyStartPastRowsMessage(b, v, size);
  case kRuleKStartKvLen:
    return where + keyStartKvLenMessage(b, index, aux, v);
  case kRuleCacheIndexRange:
    return where + cacheBatchIndexRangeMessage(b, v, size);
  // An FP8 cache's scales: the element's index and its f32 bits.
  case kRuleKvScaleNotPositive:
  case kRuleKvScaleNaN:
  case kRuleKvScaleInf: {
    float f;
    const uint32_t bits = static_cast<uint32_t>(v);
    std::memcpy(&f, &bits, sizeof(f));
    char text[32];
    std::snprintf(text, sizeof(text), "%g", static_cast<double>(f));
    return where + name + "[" + str(index) + "] = " + text + kKvScaleRule;
  }
  // Draft-token trees: kvattn/Support/TreeParents.h's messages.
  case kRuleTreeParent:
    return where + treeParentMessage(aux, v, index, b);
  case kRuleTreeKvLen:
    return where + treeKvLenMessage(b, v, size);
  case kRuleTreeQOffset:
    return where + treeQOffsetMessage(b, v, aux, size, aux2);
  // RoPE's record: the slot, the recorded position, the key's position.
  case kRuleKRopePos:
    return where + kRopePosMessage(b, index, v, aux);
  // RoPE's tables: the row, its position, the tables' rows.
  case kRuleRotaryQueryPosition:
  case kRuleRotaryKeyPosition:
    return where + rotaryTableMessage(b, index, v, size);
  default:
    return where + "the device recorded violation " + str(w[kStatusRule]) +
           " (batch " + str(b) + ")";
  }
}

Status
Plan::create(Runtime &runtime, const std::string &image,
             const Manifest &manifest, const Sizes &bounds,
             std::unique_ptr<Plan> &plan,
             const std::vector<std::map<std::string, std::string>> &names) {
  std::unique_ptr<Plan> p(new Plan(runtime));
  p->manifest_ = manifest;
  p->bounds_ = bounds;
  if (manifest.kernels.empty())
    return Status::error("planning: the manifest has no kernel");
  if (!names.empty() && names.size() != manifest.kernels.size())
    return Status::error("planning: " + str(names.size()) +
                         " buffer name maps for " +
                         str(manifest.kernels.size()) + " kernels");
  p->names_ = names;
  p->names_.resize(manifest.kernels.size());
  for (const char *name : {"B", "Hq", "Hkv", "L", "S", "num_pages", "page_size",
                           "max_pages", "cache_rows"})
    if (sizeByName(bounds, name) < 0)
      return Status::error("planning: the bound " + std::string(name) + " = " +
                           str(sizeByName(bounds, name)) +
                           " is negative (0: unbounded, where no workspace "
                           "depends on it)");
  // One buffer namespace per plan: two attentions would both read `query`
  // and write `out`.
  std::vector<std::string> attentions;
  for (const KernelInfo &k : manifest.kernels)
    if (k.kind == "attention" || k.kind == "attention_varlen")
      attentions.push_back(k.name);
  if (attentions.size() > 1)
    return Status::error(
        "planning: the module has " + str(attentions.size()) +
        " attention kernels ('" + attentions[0] + "', '" + attentions[1] + "'" +
        (attentions.size() > 2 ? ", ..." : "") +
        "): a plan binds its buffers by name (query, key, value, out, "
        "q_offset, kv_len, ...), so both would read and write the same "
        "buffers; plan each attention separately");
  // Planning queues fills (the status word): a capture would record them.
  bool capturing = false;
  KVATTN_RETURN_IF_ERROR(runtime.isCapturing(kCurrentStream, capturing));
  if (capturing)
    return Status::error(
        "planning: the runtime's stream is being captured into a CUDA graph; "
        "planning allocates and clears the status word, which a graph would "
        "record and replay: create plans before beginning the capture");
  bool validated = false;
  for (const KernelInfo &k : manifest.kernels)
    for (const ParamInfo &param : k.params)
      validated |= param.name == "status";
  if (!validated)
    return Status::error(
        "planning: the kernels were compiled without device validation (no "
        "'status' parameter): compile with PtxOptions::deviceValidation");
  // The validation kernels, once each (a kernel launched twice has its
  // validation launched twice: the same kernel, the same ordinal), in
  // ordinal order: what status() names. One whose signature (metadata,
  // element types, shapes, sizes) equals an earlier one's checks the same
  // rules on the same values (e.g. the V append's after the K append's:
  // one run's kernels share one set of sizes) and is not launched: the
  // earlier one records the violation first, as the host check does.
  std::set<std::string> validatorNames, signatures;
  for (size_t i = 0; i < manifest.kernels.size(); ++i) {
    const KernelInfo &k = manifest.kernels[i];
    if (k.kind != "validate") {
      p->kernels_.push_back(i);
      continue;
    }
    if (!validatorNames.insert(k.name).second)
      continue;
    std::string name = k.name;
    const std::string suffix = "_validate";
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      name.resize(name.size() - suffix.size());
    p->checked_.push_back(name);
    std::string signature;
    for (const ParamInfo &param : k.params) {
      signature += param.name + ":" + param.kind + ":" + param.elementType;
      for (const std::string &d : param.shape)
        signature += "," + d;
      signature += ";";
    }
    if (signatures.insert(signature).second)
      p->validators_.push_back(i);
  }
  KVATTN_RETURN_IF_ERROR(runtime.loadModule(image, p->module_));
  KVATTN_RETURN_IF_ERROR(runtime.allocate(kStatusWords * 8, p->status_));
  p->workspaceBytes_ = kStatusWords * 8;
  KVATTN_RETURN_IF_ERROR(clearWord(runtime, p->status_));
  std::set<std::string> seen;
  for (size_t i = 0; i < manifest.kernels.size(); ++i)
    for (const ParamInfo &param : manifest.kernels[i].params) {
      if (param.kind != "pointer" || param.name == "status" ||
          !seen.insert(p->bound(i, param.name)).second)
        continue;
      if (param.name == "out_parts" || param.name == "lse_parts") {
        size_t bytes = 0;
        KVATTN_RETURN_IF_ERROR(
            boundBytes(manifest.kernels[i], param, bounds, bytes));
        DevicePtr ptr = 0;
        KVATTN_RETURN_IF_ERROR(
            runtime.allocate(bytes, ptr)
                .withContext("planning the split-KV workspace '" + param.name +
                             "'"));
        p->workspaces_[param.name] = ptr;
        if (__builtin_add_overflow(p->workspaceBytes_, bytes,
                                   &p->workspaceBytes_))
          return Status::error("planning: the workspaces overflow 64 bits of "
                               "bytes: lower the bounds");
        continue;
      }
      p->parameters_.push_back(p->bound(i, param.name));
    }
  // Tensor maps (sm_90a kernels): slots of encoded maps per parameter,
  // re-encoded only when a run's buffers or sizes change.
  p->mapSlots_.resize(manifest.kernels.size());
  for (size_t i = 0; i < manifest.kernels.size(); ++i) {
    const KernelInfo &k = manifest.kernels[i];
    p->mapSlots_[i].resize(k.params.size());
    for (size_t j = 0; j < k.params.size(); ++j)
      if (k.params[j].kind == "tensor_maps") {
        KVATTN_RETURN_IF_ERROR(
            runtime
                .createTensorMapSlots(k.params[j], kTensorMapSlots,
                                      p->mapSlots_[i][j])
                .withContext("planning the tensor maps of '" + k.name + "'"));
        p->workspaceBytes_ +=
            kTensorMapSlots * k.params[j].maps.size() * kTensorMapBytes;
      }
  }
  plan = std::move(p);
  return Status::ok();
}

Plan::~Plan() {
  mapSlots_.clear(); // (waits for the launches that read them)
  for (auto &entry : workspaces_)
    (void)runtime_.release(entry.second);
  if (status_) {
    // Pending runs read the word: let them finish first.
    (void)runtime_.synchronize();
    (void)runtime_.release(status_);
  }
}

const std::string &Plan::bound(size_t index, const std::string &param) const {
  auto it = names_[index].find(param);
  return it == names_[index].end() ? param : it->second;
}

bool Plan::hasParameter(size_t index, const std::string &param) const {
  if (index >= manifest_.kernels.size())
    return false;
  for (const ParamInfo &p : manifest_.kernels[index].params)
    if (p.name == param)
      return true;
  return false;
}

Status Plan::launchKernel(size_t index, const Sizes &sizes,
                          const std::map<std::string, DevicePtr> &buffers,
                          int64_t phase, uint64_t stream) {
  const KernelInfo &k = manifest_.kernels[index];
  // This call's own parameters: concurrent runs share nothing here.
  std::vector<uint64_t> values;
  values.reserve(k.params.size());
  // A run-time split's N, from this run's sizes (host integers).
  Sizes withSplit = kernelSizes(k, sizes);
  withSplit.N = splitCount(k, withSplit, runtime_.multiprocessorCount());
  std::vector<size_t> mapsRead; // (param index, slot) pairs
  for (size_t j = 0; j < k.params.size(); ++j) {
    const ParamInfo &p = k.params[j];
    if (p.kind == "scalar") {
      values.push_back(static_cast<uint64_t>(
          p.name == "phase" ? phase : sizeByName(withSplit, p.name)));
      continue;
    }
    if (p.kind == "tensor_maps") {
      DevicePtr address = 0;
      size_t slot = 0;
      KVATTN_RETURN_IF_ERROR(runtime_.stageTensorMaps(
          *mapSlots_[index][j], k, p, withSplit, mapBuffers(index, buffers),
          stream, address, slot));
      values.push_back(address);
      mapsRead.push_back(j);
      mapsRead.push_back(slot);
      continue;
    }
    if (p.name == "status") {
      values.push_back(status_);
      continue;
    }
    auto w = workspaces_.find(p.name);
    if (w != workspaces_.end()) {
      values.push_back(w->second);
      continue;
    }
    auto it = buffers.find(bound(index, p.name));
    values.push_back(it == buffers.end() ? 0 : it->second);
  }
  KVATTN_RETURN_IF_ERROR(
      runtime_.launchPacked(*module_, k, sizes, values, stream));
  for (size_t i = 0; i < mapsRead.size(); i += 2)
    KVATTN_RETURN_IF_ERROR(runtime_.tensorMapsRead(
        *mapSlots_[index][mapsRead[i]], mapsRead[i + 1], stream));
  return Status::ok();
}

std::map<std::string, DevicePtr>
Plan::mapBuffers(size_t index,
                 const std::map<std::string, DevicePtr> &buffers) const {
  std::map<std::string, DevicePtr> byParam;
  for (const ParamInfo &p : manifest_.kernels[index].params) {
    if (p.kind != "pointer")
      continue;
    auto w = workspaces_.find(p.name);
    if (w != workspaces_.end()) {
      byParam[p.name] = w->second;
      continue;
    }
    auto it = buffers.find(bound(index, p.name));
    if (it != buffers.end())
      byParam[p.name] = it->second;
  }
  return byParam;
}

static Status checkBounds(const Sizes &sizes, const Sizes &bounds) {
  for (const char *name : {"B", "Hq", "Hkv", "L", "S", "num_pages", "page_size",
                           "max_pages", "cache_rows", "P", "prefix_num_pages",
                           "prefix_page_size", "prefix_max_pages"}) {
    int64_t v = sizeByName(sizes, name), bound = sizeByName(bounds, name);
    if (bound > 0 && v > bound)
      return Status::error("plan run: " + std::string(name) + " = " + str(v) +
                           " exceeds the plan's bound " + str(bound));
  }
  return Status::ok();
}

/// The launch arguments of kernel `k`: its own buffers out of `buffers`,
/// the plan's status word and workspaces.
static LaunchArgs
argsFor(const KernelInfo &k, const std::map<std::string, std::string> &names,
        const Sizes &sizes, const std::map<std::string, DevicePtr> &buffers,
        DevicePtr status, const std::map<std::string, DevicePtr> &workspaces,
        int64_t numSms) {
  LaunchArgs args;
  args.sizes = kernelSizes(k, sizes);
  args.sizes.N = splitCount(k, args.sizes, numSms);
  args.metadataOnDevice = true;
  for (const ParamInfo &p : k.params) {
    if (p.kind != "pointer")
      continue;
    if (p.name == "status") {
      args.buffers[p.name] = status;
    } else if (workspaces.count(p.name)) {
      args.buffers[p.name] = workspaces.at(p.name);
    } else {
      auto name = names.find(p.name);
      auto it = buffers.find(name == names.end() ? p.name : name->second);
      if (it != buffers.end())
        args.buffers[p.name] = it->second;
    }
  }
  return args;
}

Status Plan::run(const Sizes &sizes,
                 const std::map<std::string, DevicePtr> &buffers,
                 uint64_t streamArg) {
  // One stream for every launch of the run, whatever setStream does
  // meanwhile on another thread.
  const uint64_t stream =
      streamArg == kCurrentStream ? runtime_.stream() : streamArg;
  KVATTN_RETURN_IF_ERROR(checkBounds(sizes, bounds_));
  for (const auto &entry : buffers)
    if (std::find(parameters_.begin(), parameters_.end(), entry.first) ==
        parameters_.end())
      return Status::error("plan run: the plan has no parameter '" +
                           entry.first + "'");
  // Every check before the first launch: a refused run queues nothing.
  for (size_t i = 0; i < manifest_.kernels.size(); ++i) {
    const KernelInfo &k = manifest_.kernels[i];
    KVATTN_RETURN_IF_ERROR(validateLaunch(
        k, argsFor(k, names_[i], sizes, buffers, status_, workspaces_,
                   runtime_.multiprocessorCount())));
    for (const ParamInfo &p : k.params)
      for (const TensorMapInfo &map : p.maps) {
        TensorMapArgs unused;
        KVATTN_RETURN_IF_ERROR(tensorMapArguments(
            k, map, kernelSizes(k, sizes), mapBuffers(i, buffers), unused));
      }
  }
  for (size_t v : validators_) {
    KVATTN_RETURN_IF_ERROR(launchKernel(v, sizes, buffers, 0, stream));
    KVATTN_RETURN_IF_ERROR(launchKernel(v, sizes, buffers, 1, stream));
  }
  for (size_t k : kernels_)
    KVATTN_RETURN_IF_ERROR(launchKernel(k, sizes, buffers, 0, stream));
  return Status::ok();
}

Status Plan::runWithHostMetadata(
    const Sizes &sizes, const std::map<std::string, DevicePtr> &buffers,
    const std::map<std::string, std::vector<int64_t>> &metadata,
    uint64_t streamArg) {
  const uint64_t stream =
      streamArg == kCurrentStream ? runtime_.stream() : streamArg;
  KVATTN_RETURN_IF_ERROR(checkBounds(sizes, bounds_));
  // Every name one the plan has (a typo such as `kv_lenn` is not ignored),
  // and none given twice.
  auto known = [&](const std::string &name) {
    return std::find(parameters_.begin(), parameters_.end(), name) !=
           parameters_.end();
  };
  for (const auto &entry : buffers)
    if (!known(entry.first))
      return Status::error("plan run: the plan has no parameter '" +
                           entry.first + "'");
  for (const auto &entry : metadata) {
    if (!known(entry.first))
      return Status::error("plan run: the plan has no parameter '" +
                           entry.first + "' (given as metadata)");
    if (buffers.count(entry.first))
      return Status::error("plan run: '" + entry.first +
                           "' is given both as a device buffer and as host "
                           "metadata");
  }
  // A graph would replay the ring slots' addresses, which later runs
  // rewrite (even a run whose metadata equals the last one's, which queues
  // no copy): refused before anything is queued.
  bool capturing = false;
  KVATTN_RETURN_IF_ERROR(runtime_.isCapturing(stream, capturing));
  if (capturing)
    return Status::error(
        "plan run: host metadata cannot be captured: the stream is being "
        "captured into a CUDA graph, which would replay the address of a "
        "metadata slot that later runs rewrite; pass the metadata as device "
        "buffers (Plan::run, kvattn_plan_run) to capture");
  std::vector<LaunchArgs> all;
  for (size_t k : kernels_) {
    const KernelInfo &info = manifest_.kernels[k];
    LaunchArgs args = argsFor(info, names_[k], sizes, buffers, status_,
                              workspaces_, runtime_.multiprocessorCount());
    args.metadataOnDevice = false;
    for (const ParamInfo &p : info.params) {
      auto m = metadata.find(bound(k, p.name));
      // RoPE's record: an append writes it in place (a device buffer); an
      // attention's check of it reads the key positions, which are on the
      // host here.
      if (p.name == "k_rope_pos" && info.kind == "append" &&
          m != metadata.end())
        return Status::error("plan run: '" + m->first + "' is written in " +
                             "place by '" + info.name +
                             "': pass it as a device buffer");
      if (p.name == "k_rope_pos" && info.kind != "append" &&
          m == metadata.end() && buffers.count(bound(k, p.name)))
        return Status::error(
            "plan run: '" + bound(k, p.name) + "' (RoPE's record) is a " +
            "device buffer while the metadata is on the host: its check " +
            "compares it with the key positions, so both live in one place; " +
            "pass the metadata as device buffers (validated on the device) " +
            "or the record as host metadata");
      if (m != metadata.end()) {
        args.buffers.erase(p.name);
        args.metadata[p.name] = m->second;
      }
    }
    KVATTN_RETURN_IF_ERROR(validateLaunch(info, args));
    all.push_back(std::move(args));
  }
  for (size_t i = 0; i < kernels_.size(); ++i)
    KVATTN_RETURN_IF_ERROR(runtime_.launch(
        *module_, manifest_.kernels[kernels_[i]], all[i], stream));
  return Status::ok();
}

Status Plan::status() {
  KVATTN_RETURN_IF_ERROR(runtime_.synchronize());
  std::array<int64_t, 16> words{};
  KVATTN_RETURN_IF_ERROR(
      runtime_.copyToHost(words.data(), status_, sizeof(words)));
  if (words[kStatusRule] == kRuleNone)
    return Status::ok();
  return Status::error(describeViolation(words, checked_));
}

Status Plan::clearStatus() { return clearWord(runtime_, status_); }

} // namespace rt
} // namespace kvattn
} // namespace mlir
