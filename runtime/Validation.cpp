//===- Validation.cpp - check launch arguments before a launch ------------===//

#include "kvattn/Runtime/Runtime.h"
#include "kvattn/Support/BlockTable.h"
#include "kvattn/Support/Decimal.h"
#include "kvattn/Support/KeyRows.h"
#include "kvattn/Support/Limits.h"
#include "kvattn/Support/QueryStarts.h"
#include "kvattn/Support/Schedule.h"
#include "kvattn/Support/StatusWord.h"
#include "kvattn/Support/TreeParents.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <set>

namespace mlir {
namespace kvattn {
namespace rt {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

/// 2^31: what a kernel with 32-bit index arithmetic addresses at most
/// (element offsets, sizes and positions stay below it).
constexpr int64_t kIndex32Limit = int64_t(1) << 31;

/// The size each dimension of an operand stands for ("" for a head dim).
/// A ragged batch (`varlen`): the query, out and lse are packed, their
/// dim 0 (1) stands for no size and L for the packed rows T; q_start has
/// B + 1 entries.
std::vector<std::string> symbolicShape(const std::string &role, size_t rank,
                                       bool paged, bool varlen = false,
                                       bool packedKeys = false,
                                       bool cacheRows = false,
                                       bool prefixPaged = false) {
  // Ragged keys: K and V are one packed buffer [1, Hkv, N, D] (S = N); a
  // batch-to-cache map: [cache_rows, Hkv, S, D].
  if (packedKeys && (role == "key" || role == "value"))
    return {"", "Hkv", "S", ""};
  if (cacheRows && (role == "key" || role == "value"))
    return {"cache_rows", "Hkv", "S", ""};
  // A cascade's shared prefix [1, Hkv, P, D] (kind "cascade_prefix"), or
  // its pool read through the one-sequence table [1, prefix_max_pages] of
  // prefix_len [1] keys.
  if (role == "prefix_key" || role == "prefix_value")
    return prefixPaged ? std::vector<std::string>{"prefix_num_pages",
                                                  "prefix_page_size", "Hkv", ""}
                       : std::vector<std::string>{"", "Hkv", "P", ""};
  if (role == "prefix_pages")
    return {"prefix_max_pages"};
  if (role == "prefix_len")
    return {""};
  if (role == "k_start")
    return {"B+1"};
  if (role == "cache_batch_idx")
    return {"B"};
  if (role == "tree_parents") // [T]: per packed row
    return {"L"};
  if (varlen && (role == "query" || role == "out"))
    return {"", "Hq", "L", ""};
  if (varlen && role == "lse")
    return {"", "Hq", "L"};
  // A cascade's suffix kernel writes the packed rows' part [2, 1, Hq, T],
  // a ragged batch's split its chunks' [N, 1, Hq, T].
  if (varlen && role == "out_parts")
    return {"", "", "Hq", "L", ""};
  if (varlen && role == "lse_parts")
    return {"", "", "Hq", "L"};
  if (role == "q_start")
    return {"B+1"};
  if (role == "query" || role == "out")
    return {"B", "Hq", "L", ""};
  if (role == "key" || role == "value")
    return paged ? std::vector<std::string>{"num_pages", "page_size", "Hkv", ""}
                 : std::vector<std::string>{"B", "Hkv", "S", ""};
  if (role == "block_table")
    return {"B", "max_pages"};
  // An append kernel: update [B, Hkv, L, D] written into the cache at pos.
  if (role == "update")
    return {"B", "Hkv", "L", ""};
  if (role == "cache")
    return paged ? std::vector<std::string>{"num_pages", "page_size", "Hkv", ""}
                 : std::vector<std::string>{"B", "Hkv", "S", ""};
  if (role == "pos")
    return {"B"};
  // RoPE's record of a plain cache (an append with rope_pos writes it).
  if (role == "k_rope_pos")
    return {"B", "S"};
  // RoPE's tables [P, R/2]: static (the kernel compiles the rows in).
  if (role == "rotary_cos" || role == "rotary_sin")
    return {"", ""};
  // The status word of device validation: i64[16], static.
  if (role == "status")
    return {""};
  if (role == "q_offset" || role == "k_offset" || role == "kv_len")
    return {"B"};
  if (role == "q_pos")
    return {"B", "L"};
  if (role == "k_pos" || role == "key_valid")
    return {"B", "S"};
  if (role == "lse")
    return {"B", "Hq", "L"};
  if (role == "out_parts")
    return {"", "B", "Hq", "L", ""};
  if (role == "lse_parts")
    return {"", "B", "Hq", "L"};
  if (role == "sinks" || role == "alibi_slopes")
    return {"Hq"};
  // An FP8 cache's scales: per tensor [1] (or rank 0), per KV head [Hkv],
  // per token and head the cache's shape without D.
  if (role == "k_scale" || role == "v_scale") {
    if (rank <= 1)
      return std::vector<std::string>(rank, "Hkv");
    std::vector<std::string> rows =
        symbolicShape("key", 4, paged, varlen, packedKeys, cacheRows);
    rows.pop_back();
    return rows;
  }
  std::vector<std::string> full = {"B", "Hq", "L", "S"}; // mask
  return std::vector<std::string>(full.end() - std::min(rank, full.size()),
                                  full.end());
}

/// Whether parameter `name` of a kernel is metadata (integers the runtime
/// validates, from the host or on the device). RoPE's record is an
/// attention's metadata (checked, never read by the kernel) and an append's
/// output (written in place).
bool isMetadata(const std::string &name, bool append) {
  return name == "q_offset" || name == "k_offset" || name == "q_pos" ||
         name == "k_pos" || name == "kv_len" || name == "key_valid" ||
         name == "block_table" || name == "pos" || name == "q_start" ||
         name == "k_start" || name == "cache_batch_idx" ||
         name == "tree_parents" || name == "prefix_pages" ||
         name == "prefix_len" || (!append && name == "k_rope_pos");
}

} // namespace

/// RoPE's tables (rules 29 and 30, the reference's check): the position of
/// every rotated row (an attention's query row q_offset[b] + i or
/// q_pos[b, i], a ragged batch's rows i < L_b; an append's token
/// pos[b] + t) below the tables' `rows`.
static Status validateRotaryRows(const std::string &where,
                                 const LaunchArgs &args, bool append,
                                 int64_t rows) {
  const Sizes &s = args.sizes;
  auto values = [&](const char *name) -> const std::vector<int64_t> * {
    auto it = args.metadata.find(name);
    return it == args.metadata.end() ? nullptr : &it->second;
  };
  const std::vector<int64_t> *qPos = append ? nullptr : values("q_pos");
  const std::vector<int64_t> *offset = values(append ? "pos" : "q_offset");
  const std::vector<int64_t> *qStart = append ? nullptr : values("q_start");
  for (int64_t b = 0; b < s.B; ++b) {
    const int64_t count = qStart ? (*qStart)[b + 1] - (*qStart)[b] : s.L;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t position = qPos     ? (*qPos)[b * s.L + i]
                               : offset ? (*offset)[b] + i
                                        : i;
      if (position >= rows)
        return Status::error(where + rotaryTableMessage(b, i, position, rows));
    }
  }
  return Status::ok();
}

/// The write rules of an append kernel, with the reference's messages
/// (reference::append, reference::appendPaged): plain, every batch writes
/// rows [pos, pos + L) inside the capacity S; paged, the table rules, then
/// the write rules of kvattn/Support/BlockTable.h (`skipPadding`: a token on
/// a -1 entry is padding, the tokens within the table's slots).
static Status validateAppend(const std::string &where, const LaunchArgs &args,
                             bool paged, bool skipPadding) {
  const Sizes &s = args.sizes;
  const std::vector<int64_t> &pos = args.metadata.at("pos");
  if (!paged) {
    for (int64_t b = 0; b < s.B; ++b) {
      const int64_t p = pos[b];
      if (p < 0 || p > s.S - s.L)
        return Status::error(where + "pos[" + str(b) + "] = " + str(p) +
                             " writes rows [" + str(p) + ", " + str(p + s.L) +
                             ") outside the cache capacity C = " + str(s.S) +
                             " (batch " + str(b) + ")");
    }
    return Status::ok();
  }
  const std::vector<int64_t> &table = args.metadata.at("block_table");
  BlockTableView view;
  view.batch = s.B;
  view.maxPages = s.maxPages;
  view.page = [&](int64_t b, int64_t slot) {
    return table[b * s.maxPages + slot];
  };
  if (Status st = checkBlockTable(view, s.numPages, s.pageSize); !st)
    return Status::error(where + st.message());
  if (Status st = checkPagedWrite(
          view, [&](int64_t b) -> std::optional<int64_t> { return pos[b]; },
          s.L, s.pageSize, skipPadding);
      !st)
    return Status::error(where + st.message());
  return Status::ok();
}

int64_t sizeByName(const Sizes &s, const std::string &name) {
  if (name == "B")
    return s.B;
  if (name == "Hq")
    return s.Hq;
  if (name == "Hkv")
    return s.Hkv;
  if (name == "L")
    return s.L;
  if (name == "S")
    return s.S;
  if (name == "num_pages")
    return s.numPages;
  if (name == "page_size")
    return s.pageSize;
  if (name == "max_pages")
    return s.maxPages;
  if (name == "B+1") // q_start of a ragged batch
    return s.B + 1;
  if (name == "N") // a run-time split's chunks
    return s.N;
  if (name == "cache_rows") // K/V rows of a batch-to-cache map
    return s.cacheRows;
  if (name == "P") // a cascade's shared prefix keys
    return s.P;
  if (name == "prefix_num_pages") // a paged prefix's pool and table
    return s.prefixNumPages;
  if (name == "prefix_page_size")
    return s.prefixPageSize;
  if (name == "prefix_max_pages")
    return s.prefixMaxPages;
  return -1;
}

Sizes kernelSizes(const KernelInfo &kernel, const Sizes &sizes) {
  // The prefix kernel, or the validation kernel of a paged prefix's (the
  // only kernels with a prefix_pages parameter): B = 1.
  const bool prefix = kernel.kind == "cascade_prefix" ||
                      (kernel.kind == "validate" &&
                       std::any_of(kernel.params.begin(), kernel.params.end(),
                                   [](const ParamInfo &p) {
                                     return p.name == "prefix_pages";
                                   }));
  if (!prefix && kernel.kind != "cascade_merge")
    return sizes;
  Sizes s = sizes;
  s.B = 1;
  if (!prefix || s.P != 0)
    return s;
  // A paged prefix: the logical keys of its table (validateLaunch checks
  // the sizes; saturated here, refused there).
  for (const ParamInfo &p : kernel.params)
    if (p.name == "prefix_pages") {
      if (__builtin_mul_overflow(s.prefixMaxPages, s.prefixPageSize, &s.P))
        s.P = INT64_MAX;
      return s;
    }
  // A static prefix [1, Hkv, P, D]: its length is the manifest's.
  for (const ParamInfo &p : kernel.params)
    if (p.kind == "pointer" && p.name == "prefix_key" && p.shape.size() == 4 &&
        !p.shape[2].empty() && std::isdigit(p.shape[2][0]))
      s.P = std::stoll(p.shape[2]);
  return s;
}

int64_t splitCount(const KernelInfo &kernel, const Sizes &s, int64_t numSms) {
  const KernelInfo::SplitRule &r = kernel.splitRule;
  if (r.maxSplits <= 0)
    return std::max<int64_t>(kernel.splitKv, 1);
  const int64_t g = std::max<int64_t>(r.group, 1);
  const int64_t bm = std::max<int64_t>(r.blockM, 1);
  // The sizes are the caller's and the rule the manifest's (any int64, not
  // yet checked against the buffers): saturate instead of overflowing.
  using schedule::saturatingMul;
  // A ragged batch (its attention and its merge): the grid's programs,
  // (Hq / G) x (floor(G * T / BM) + B) with L = T and B the sequences.
  if (kernel.kind == "attention_varlen" || kernel.kind == "merge_varlen")
    return schedule::splitRule(schedule::varlenPrograms(s.Hq, g, s.L, bm, s.B),
                               std::max<int64_t>(s.S, 0), r.blockN,
                               r.programsPerSm, numSms, r.minKeys, r.maxSplits);
  const int64_t rows = saturatingMul(g, std::max<int64_t>(s.L, 0));
  const int64_t blocks = rows / bm + (rows % bm != 0);
  const int64_t programs = saturatingMul(
      saturatingMul(std::max<int64_t>(s.B, 0), std::max<int64_t>(s.Hq, 0) / g),
      blocks);
  return schedule::splitRule(programs, std::max<int64_t>(s.S, 0), r.blockN,
                             r.programsPerSm, numSms, r.minKeys, r.maxSplits);
}

Status validateLaunch(const KernelInfo &kernel, const LaunchArgs &args) {
  const Sizes &s = args.sizes;
  const std::string where = "launch of '" + kernel.name + "': ";
  bool paged = false, varlen = false, packedKeys = false, cacheRows = false,
       prefixPaged = false;
  for (const ParamInfo &p : kernel.params) {
    paged |= p.name == "block_table";
    prefixPaged |= p.name == "prefix_pages";
    varlen |= p.name == "q_start";
    packedKeys |= p.name == "k_start";
    cacheRows |= p.name == "cache_batch_idx";
  }
  // A cache write (kind "append") has no query heads: Hq is not checked.
  const bool append = kernel.kind == "append";
  for (const char *name : {"B", "Hq", "Hkv", "L", "S", "cache_rows"})
    if (sizeByName(s, name) < 0)
      return Status::error(where + "size " + name + " = " +
                           str(sizeByName(s, name)) + " is negative");
  if (paged) {
    if (s.numPages < 0 || s.pageSize <= 0 || s.maxPages < 0)
      return Status::error(where +
                           "paged sizes num_pages = " + str(s.numPages) +
                           ", page_size = " + str(s.pageSize) +
                           ", max_pages = " + str(s.maxPages) +
                           " (page_size must be positive, the others "
                           "non-negative)");
    int64_t logical = 0;
    if (__builtin_mul_overflow(s.maxPages, s.pageSize, &logical))
      return Status::error(where +
                           "max_pages * page_size = " + str(s.maxPages) +
                           " * " + str(s.pageSize) + " overflows 64 bits");
    if (s.S != logical)
      return Status::error(where + "S = " + str(s.S) +
                           " must be max_pages * page_size = " + str(logical) +
                           " (the logical key count of a paged cache)");
  }
  if (prefixPaged) {
    // A cascade's paged prefix: one sequence of prefix_len keys.
    if (s.prefixNumPages < 0 || s.prefixPageSize <= 0 || s.prefixMaxPages < 0)
      return Status::error(
          where +
          "paged prefix sizes prefix_num_pages = " + str(s.prefixNumPages) +
          ", prefix_page_size = " + str(s.prefixPageSize) +
          ", prefix_max_pages = " + str(s.prefixMaxPages) +
          " (prefix_page_size must be positive, the others non-negative)");
    int64_t logical = 0;
    if (__builtin_mul_overflow(s.prefixMaxPages, s.prefixPageSize, &logical))
      return Status::error(where + "prefix_max_pages * prefix_page_size = " +
                           str(s.prefixMaxPages) + " * " +
                           str(s.prefixPageSize) + " overflows 64 bits");
    if (s.P != logical)
      return Status::error(
          where + "P = " + str(s.P) +
          " must be prefix_max_pages * prefix_page_size = " + str(logical) +
          " (the logical key count of a paged prefix)");
  }
  const bool index32 = kernel.indexBits == 32;
  if (index32)
    for (const char *name :
         {"B", "Hq", "Hkv", "L", "S", "num_pages", "page_size", "max_pages",
          "cache_rows", "P", "prefix_num_pages", "prefix_page_size",
          "prefix_max_pages"})
      if (sizeByName(s, name) >= kIndex32Limit)
        return Status::error(where + "size " + name + " = " +
                             str(sizeByName(s, name)) + " is 2^31 or more" +
                             kIndex32Advice);
  if (!append && (s.Hkv == 0 ? s.Hq != 0 : s.Hq % s.Hkv != 0))
    return Status::error(where + "query heads Hq = " + str(s.Hq) +
                         " must be a multiple of kv heads Hkv = " + str(s.Hkv));

  std::set<std::string> known;
  for (const ParamInfo &p : kernel.params) {
    known.insert(p.name);
    if (p.kind != "pointer")
      continue;
    // A ragged batch's merge takes no q_start but its packed rows.
    std::vector<std::string> symbolic = symbolicShape(
        p.name, p.shape.size(), paged, varlen || kernel.kind == "merge_varlen",
        packedKeys, cacheRows, prefixPaged);
    if (symbolic.size() != p.shape.size())
      return Status::error(where + "the manifest gives '" + p.name + "' " +
                           str(p.shape.size()) + " dimensions");
    int64_t elements = 1;
    for (size_t d = 0; d < p.shape.size(); ++d) {
      const std::string &dim = p.shape[d];
      int64_t size;
      if (!dim.empty() && std::isdigit(static_cast<unsigned char>(dim[0]))) {
        std::optional<int64_t> parsed = parseDecimal(dim);
        if (!parsed)
          return Status::error(where + "'" + p.name + "' dim " + str(d) +
                               " ('" + dim +
                               "') is not a size that fits "
                               "in 64 bits");
        size = *parsed;
        // A static dimension of the kernel must match the run-time size it
        // stands for (head dims and broadcast mask dims stand for none).
        int64_t actual = sizeByName(s, symbolic[d]);
        bool broadcast =
            (p.name == "mask" || p.name == "k_scale" || p.name == "v_scale") &&
            size == 1;
        if (actual >= 0 && !broadcast && actual != size)
          return Status::error(where + "'" + p.name + "' dim " + str(d) +
                               " is compiled as " + dim + " but " +
                               symbolic[d] + " = " + str(actual));
      } else {
        size = sizeByName(s, dim);
        if (size < 0)
          return Status::error(where + "the manifest gives '" + p.name +
                               "' an unknown size '" + dim + "'");
      }
      // Saturates: only the comparisons with 2^31 and the metadata
      // lengths read it.
      if (__builtin_mul_overflow(elements, size, &elements))
        elements = INT64_MAX;
    }
    if (index32 && elements >= kIndex32Limit)
      return Status::error(
          where + "'" + p.name + "' has " +
          (elements == INT64_MAX ? std::string("over 2^63") : str(elements)) +
          " elements, 2^31 or more" + kIndex32Advice);
    if (isMetadata(p.name, append) && args.metadataOnDevice) {
      // A device pointer, aligned to its elements.
      auto it = args.buffers.find(p.name);
      if (it == args.buffers.end() || (it->second == 0 && elements != 0))
        return Status::error(where + "missing device metadata '" + p.name +
                             "'");
      const uint64_t align = p.elementType == "i64" ? 8 : 4;
      if (it->second % align != 0) {
        char address[32];
        std::snprintf(address, sizeof(address), "0x%llx",
                      static_cast<unsigned long long>(it->second));
        return Status::error(where + "device metadata '" + p.name + "' at " +
                             address + " is not " + str(align) +
                             "-byte aligned");
      }
    } else if (isMetadata(p.name, append)) {
      auto it = args.metadata.find(p.name);
      if (it == args.metadata.end())
        return Status::error(where + "missing metadata '" + p.name + "'");
      if (static_cast<int64_t>(it->second.size()) != elements)
        return Status::error(where + "'" + p.name + "' has " +
                             str(it->second.size()) + " values, expected " +
                             str(elements));
    } else {
      auto it = args.buffers.find(p.name);
      // A run-time split of one chunk writes out itself: its attention
      // kernel does not touch the parts, which may be absent.
      const bool unusedParts = kernel.splitRule.maxSplits > 0 &&
                               kernel.kind != "merge" &&
                               kernel.kind != "merge_varlen" && s.N == 1 &&
                               (p.name == "out_parts" || p.name == "lse_parts");
      if (unusedParts && it == args.buffers.end())
        continue;
      if (it == args.buffers.end() || (it->second == 0 && elements != 0))
        return Status::error(where + "missing device buffer '" + p.name + "'");
      // cp.async and vector loads move 16 bytes at a time (cudaMalloc
      // returns 256-byte aligned memory; a view into a tensor may not be).
      if (it->second % 16 != 0) {
        char address[32];
        std::snprintf(address, sizeof(address), "0x%llx",
                      static_cast<unsigned long long>(it->second));
        return Status::error(where + "device buffer '" + p.name + "' at " +
                             address + " is not 16-byte aligned");
      }
    }
  }
  for (const auto &entry : args.buffers)
    if (!known.count(entry.first))
      return Status::error(where + "the kernel has no parameter '" +
                           entry.first + "'");
  for (const auto &entry : args.metadata)
    if (!known.count(entry.first))
      return Status::error(where + "the kernel has no parameter '" +
                           entry.first + "'");

  // Device-resident values are checked on the device (Plan::run).
  if (args.metadataOnDevice)
    return Status::ok();
  // Values, per batch.
  for (const auto &[name, values] : args.metadata) {
    if (name == "block_table" || name == "q_start" || name == "k_start" ||
        name == "cache_batch_idx" || name == "tree_parents" ||
        name == "k_rope_pos" || name == "prefix_pages" ||
        name == "prefix_len" || (append && name == "pos"))
      continue; // below, with kv_len; an append's positions and the
                // starts of a ragged batch below too
    const int64_t rowLength = name == "q_pos"                            ? s.L
                              : (name == "k_pos" || name == "key_valid") ? s.S
                                                                         : 1;
    for (size_t n = 0; n < values.size(); ++n) {
      int64_t v = values[n];
      int64_t b = rowLength ? static_cast<int64_t>(n) / rowLength : 0;
      // Per-key values are named [b, i] whatever the row length (L = 1
      // too), as the device check names them (describeViolation).
      const bool perKey =
          name == "q_pos" || name == "k_pos" || name == "key_valid";
      std::string at =
          name + (perKey ? "[" + str(b) + ", " +
                               str(static_cast<int64_t>(n) % rowLength) + "]"
                         : "[" + str(b) + "]");
      if (name == "kv_len") {
        if (v < 0 || v > s.S)
          return Status::error(where + at + " = " + str(v) +
                               " is outside [0, S = " + str(s.S) + "] (batch " +
                               str(b) + ")");
      } else if (name == "key_valid") {
        if (v != 0 && v != 1)
          return Status::error(where + at + " = " + str(v) +
                               " is not 0 or 1 (batch " + str(b) + ")");
      } else {
        if (v < 0)
          return Status::error(where + at + " = " + str(v) +
                               " is negative (batch " + str(b) + ")");
        if (v > limits::kMaxPosition)
          return Status::error(where + at + " = " + str(v) +
                               " is out of range (above 2^62, batch " + str(b) +
                               ")");
        // The last position an offset gives (q_offset + L - 1, k_offset +
        // S - 1), or the position itself: a 32-bit kernel forms it plus
        // one (the end of a causal key range), which must stay below 2^31.
        const int64_t extent = name == "q_offset"   ? s.L
                               : name == "k_offset" ? s.S
                                                    : 1;
        if (index32 &&
            v + std::max<int64_t>(extent, 1) - 1 >= kIndex32PositionLimit)
          return Status::error(where + at + " = " + str(v) +
                               kIndex32PositionRule + " (batch " + str(b) +
                               ")" + kIndex32Advice);
        bool explicitPositions = name == "q_pos" || name == "k_pos";
        if (explicitPositions && static_cast<int64_t>(n) % rowLength != 0 &&
            v <= values[n - 1])
          return Status::error(where + at + " = " + str(v) +
                               " does not increase (previous " +
                               str(values[n - 1]) + ", batch " + str(b) +
                               "): explicit positions must be strictly "
                               "increasing");
      }
    }
  }
  // RoPE's tables: every rotated row's position within their P rows, after
  // every other rule (rules 29 and 30 of device validation, last too).
  auto rotaryRows = [&]() -> Status {
    for (const ParamInfo &p : kernel.params) {
      if (p.name != "rotary_cos" || p.shape.empty())
        continue;
      std::optional<int64_t> rows = parseDecimal(p.shape[0]);
      if (!rows)
        return Status::error(where + "'rotary_cos' needs a static row count");
      return validateRotaryRows(where, args, append, *rows);
    }
    return Status::ok();
  };
  if (append) {
    KVATTN_RETURN_IF_ERROR(
        validateAppend(where, args, paged, kernel.skipPadding));
    return rotaryRows();
  }
  auto perBatch =
      [&](const char *name) -> std::function<std::optional<int64_t>(int64_t)> {
    auto it = args.metadata.find(name);
    if (it == args.metadata.end())
      return nullptr;
    const std::vector<int64_t> *values = &it->second;
    return
        [values](int64_t b) -> std::optional<int64_t> { return (*values)[b]; };
  };
  // Where each batch's keys live (kvattn/Support/KeyRows.h), before the
  // q_start rules that read the lengths (the reference's order).
  std::function<std::optional<int64_t>(int64_t)> effectiveKvLen =
      perBatch("kv_len");
  if (packedKeys) {
    const std::vector<int64_t> *starts = &args.metadata.at("k_start");
    KeyStartsView view;
    view.batch = s.B;
    view.start = [starts](int64_t slot) { return (*starts)[slot]; };
    view.rows = s.S;
    view.kvLen = perBatch("kv_len");
    if (Status st = checkKeyStarts(view); !st)
      return Status::error(where + st.message());
    effectiveKvLen = [view](int64_t b) -> std::optional<int64_t> {
      return keyRowCount(view, b);
    };
  }
  if (cacheRows) {
    const std::vector<int64_t> &index = args.metadata.at("cache_batch_idx");
    CacheBatchIndexView view;
    view.batch = s.B;
    view.index = [&](int64_t b) { return index[b]; };
    view.cacheRows = s.cacheRows;
    if (Status st = checkCacheBatchIndex(view); !st)
      return Status::error(where + st.message());
  }
  if (varlen) {
    // The reference's rules and messages (kvattn/Support/QueryStarts.h).
    const std::vector<int64_t> &starts = args.metadata.at("q_start");
    QueryStartsView view;
    view.batch = s.B;
    view.start = [&](int64_t slot) { return starts[slot]; };
    view.rows = s.L;
    view.qOffset = perBatch("q_offset");
    view.kOffset = perBatch("k_offset");
    view.kvLen = effectiveKvLen;
    if (Status st = checkQueryStarts(view); !st)
      return Status::error(where + st.message());
    // The draft-token trees (kvattn/Support/TreeParents.h), right after the
    // starts as in the reference.
    auto parents = args.metadata.find("tree_parents");
    if (parents != args.metadata.end()) {
      const std::vector<int64_t> *values = &parents->second;
      TreeParentsView tree;
      tree.batch = s.B;
      tree.start = view.start;
      tree.parent = [values](int64_t row) { return (*values)[row]; };
      tree.qOffset = view.qOffset;
      tree.kOffset = view.kOffset;
      tree.kvLen = effectiveKvLen;
      tree.keys = s.S;
      if (Status st = checkTreeParents(tree); !st)
        return Status::error(where + st.message());
    }
  }
  if (paged) {
    const std::vector<int64_t> &table = args.metadata.at("block_table");
    auto kvLen = args.metadata.find("kv_len");
    if (kvLen == args.metadata.end())
      return Status::error(where + "a paged kernel needs kv_len");
    BlockTableView view;
    view.batch = s.B;
    view.maxPages = s.maxPages;
    view.page = [&](int64_t b, int64_t slot) {
      return table[b * s.maxPages + slot];
    };
    view.kvLen = [&](int64_t b) -> std::optional<int64_t> {
      return kvLen->second[b];
    };
    if (Status st = checkBlockTable(view, s.numPages, s.pageSize); !st)
      return Status::error(where + st.message());
  }
  if (prefixPaged) {
    // The reference's rules and messages for the prefix's pages (one
    // sequence; prefix_len within its pages).
    const std::vector<int64_t> &pages = args.metadata.at("prefix_pages");
    const std::vector<int64_t> &length = args.metadata.at("prefix_len");
    BlockTableView view;
    view.batch = 1;
    view.maxPages = s.prefixMaxPages;
    view.page = [&](int64_t, int64_t slot) { return pages[slot]; };
    view.kvLen = [&](int64_t) -> std::optional<int64_t> { return length[0]; };
    view.name = "prefix_pages";
    view.lengthName = "prefix_len";
    view.flat = true;
    if (Status st = checkBlockTable(view, s.prefixNumPages, s.prefixPageSize);
        !st)
      return Status::error(where + st.message());
  }
  // RoPE's record (the reference's check, last): every valid key attended
  // at the position it was rotated at, k_pos[b, j] or k_offset[b] + j. (The
  // verifier refuses it beside block_table, q_start, k_start and
  // cache_batch_idx: a [B, S] record of a static cache.)
  if (auto record = args.metadata.find("k_rope_pos");
      record != args.metadata.end()) {
    auto values = [&](const char *name) -> const std::vector<int64_t> * {
      auto it = args.metadata.find(name);
      return it == args.metadata.end() ? nullptr : &it->second;
    };
    const std::vector<int64_t> *kvLen = values("kv_len"),
                               *kOffset = values("k_offset"),
                               *kPos = values("k_pos"),
                               *keyValid = values("key_valid");
    for (int64_t b = 0; b < s.B; ++b) {
      const int64_t keys = kvLen ? (*kvLen)[b] : s.S;
      for (int64_t j = 0; j < keys; ++j) {
        const int64_t n = b * s.S + j;
        if (keyValid && (*keyValid)[n] == 0)
          continue;
        const int64_t position =
            kPos ? (*kPos)[n] : (kOffset ? (*kOffset)[b] : 0) + j;
        if (record->second[n] != position)
          return Status::error(
              where + kRopePosMessage(b, j, record->second[n], position));
      }
    }
  }
  return rotaryRows();
}

} // namespace rt
} // namespace kvattn
} // namespace mlir
