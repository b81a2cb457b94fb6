//===- Manifest.cpp - read a launch manifest ------------------------------===//

#include "Json.h"
#include "kvattn/Runtime/Runtime.h"

#include <cmath>

namespace mlir {
namespace kvattn {
namespace rt {

namespace {

Status field(const JsonValue &object, const std::string &key,
             JsonValue::Kind kind, const JsonValue *&out,
             const std::string &where) {
  out = object.get(key);
  if (!out || out->kind != kind)
    return Status::error("manifest: " + where + " has no valid \"" + key +
                         "\"");
  return Status::ok();
}

Status integer(const JsonValue &object, const std::string &key, int64_t &out,
               const std::string &where) {
  const JsonValue *v;
  KVATTN_RETURN_IF_ERROR(field(object, key, JsonValue::Kind::Number, v, where));
  if (v->number != std::floor(v->number) || v->number < 0)
    return Status::error("manifest: " + where + " \"" + key +
                         "\" is not a non-negative integer");
  out = static_cast<int64_t>(v->number);
  return Status::ok();
}

Status text(const JsonValue &object, const std::string &key, std::string &out,
            const std::string &where) {
  const JsonValue *v;
  KVATTN_RETURN_IF_ERROR(field(object, key, JsonValue::Kind::String, v, where));
  out = v->string;
  return Status::ok();
}

} // namespace

Status parseManifest(const std::string &json, Manifest &manifest) {
  JsonValue root;
  KVATTN_RETURN_IF_ERROR(parseJson(json, root).withContext("manifest"));
  if (root.kind != JsonValue::Kind::Object)
    return Status::error("manifest: not a JSON object");
  std::string format;
  KVATTN_RETURN_IF_ERROR(text(root, "format", format, "the manifest"));
  if (format != "kvattn-launch-manifest")
    return Status::error("manifest: format is \"" + format +
                         "\", expected \"kvattn-launch-manifest\"");
  int64_t version;
  KVATTN_RETURN_IF_ERROR(integer(root, "version", version, "the manifest"));
  if (version != 1 && version != 2)
    return Status::error("manifest: version " + std::to_string(version) +
                         " is not supported (this runtime reads versions 1 "
                         "and 2)");
  manifest = Manifest();
  manifest.version = static_cast<int>(version);
  KVATTN_RETURN_IF_ERROR(text(root, "chip", manifest.chip, "the manifest"));
  KVATTN_RETURN_IF_ERROR(
      text(root, "ptx_file", manifest.ptxFile, "the manifest"));
  // Optional: manifests written before 32-bit kernels have 64-bit indices.
  if (root.get("index_bits")) {
    int64_t bits;
    KVATTN_RETURN_IF_ERROR(integer(root, "index_bits", bits, "the manifest"));
    if (bits != 32 && bits != 64)
      return Status::error("manifest: \"index_bits\" is " +
                           std::to_string(bits) + " (must be 32 or 64)");
    manifest.indexBits = static_cast<int>(bits);
  }
  const JsonValue *kernels;
  KVATTN_RETURN_IF_ERROR(
      field(root, "kernels", JsonValue::Kind::Array, kernels, "the manifest"));
  for (size_t k = 0; k < kernels->array.size(); ++k) {
    const JsonValue &kj = kernels->array[k];
    std::string where = "kernel " + std::to_string(k);
    if (kj.kind != JsonValue::Kind::Object)
      return Status::error("manifest: " + where + " is not an object");
    KernelInfo info;
    info.indexBits = manifest.indexBits;
    KVATTN_RETURN_IF_ERROR(text(kj, "name", info.name, where));
    where = "kernel '" + info.name + "'";
    const JsonValue *params, *block, *tile;
    KVATTN_RETURN_IF_ERROR(
        field(kj, "params", JsonValue::Kind::Array, params, where));
    for (size_t i = 0; i < params->array.size(); ++i) {
      const JsonValue &pj = params->array[i];
      std::string pw = where + " param " + std::to_string(i);
      if (pj.kind != JsonValue::Kind::Object)
        return Status::error("manifest: " + pw + " is not an object");
      ParamInfo p;
      int64_t index;
      KVATTN_RETURN_IF_ERROR(integer(pj, "index", index, pw));
      if (index != static_cast<int64_t>(i))
        return Status::error("manifest: " + pw + " has index " +
                             std::to_string(index));
      KVATTN_RETURN_IF_ERROR(text(pj, "name", p.name, pw));
      KVATTN_RETURN_IF_ERROR(text(pj, "kind", p.kind, pw));
      KVATTN_RETURN_IF_ERROR(text(pj, "element_type", p.elementType, pw));
      if (p.kind == "pointer") {
        const JsonValue *shape;
        KVATTN_RETURN_IF_ERROR(
            field(pj, "shape", JsonValue::Kind::Array, shape, pw));
        for (const JsonValue &d : shape->array) {
          if (d.kind == JsonValue::Kind::String)
            p.shape.push_back(d.string);
          else if (d.kind == JsonValue::Kind::Number && d.number >= 0)
            p.shape.push_back(std::to_string(static_cast<int64_t>(d.number)));
          else
            return Status::error("manifest: " + pw + " has a bad dimension");
        }
        KVATTN_RETURN_IF_ERROR(text(pj, "access", p.access, pw));
      } else if (p.kind != "scalar") {
        return Status::error("manifest: " + pw + " has kind \"" + p.kind +
                             "\"");
      }
      info.params.push_back(std::move(p));
    }
    KVATTN_RETURN_IF_ERROR(
        field(kj, "block", JsonValue::Kind::Object, block, where));
    KVATTN_RETURN_IF_ERROR(integer(*block, "x", info.blockX, where + " block"));
    KVATTN_RETURN_IF_ERROR(integer(kj, "dynamic_shared_memory_bytes",
                                   info.dynamicSharedMemoryBytes, where));
    KVATTN_RETURN_IF_ERROR(
        field(kj, "tile", JsonValue::Kind::Object, tile, where));
    KVATTN_RETURN_IF_ERROR(integer(*tile, "block_m", info.blockM, where));
    KVATTN_RETURN_IF_ERROR(integer(*tile, "block_n", info.blockN, where));
    KVATTN_RETURN_IF_ERROR(integer(*tile, "num_warps", info.numWarps, where));
    KVATTN_RETURN_IF_ERROR(integer(*tile, "num_stages", info.numStages, where));
    // Optional (older manifests have none): query heads per program.
    if (tile->get("group"))
      KVATTN_RETURN_IF_ERROR(integer(*tile, "group", info.group, where));
    if (tile->get("split_kv"))
      KVATTN_RETURN_IF_ERROR(integer(*tile, "split_kv", info.splitKv, where));
    if (const JsonValue *kind = kj.get("kind")) {
      if (kind->kind != JsonValue::Kind::String ||
          (kind->string != "attention" && kind->string != "merge" &&
           kind->string != "append" && kind->string != "attention_varlen" &&
           kind->string != "validate"))
        return Status::error("manifest: " + where +
                             " has a kind other than \"attention\", "
                             "\"merge\" or \"append\"");
      info.kind = kind->string;
    }
    // Version 2: a run-time split's rule (split_kv 0 on its attention
    // kernel, a scalar N on both of its kernels).
    if (const JsonValue *split = kj.get("split")) {
      if (version < 2 || split->kind != JsonValue::Kind::Object)
        return Status::error("manifest: " + where +
                             " has a 'split' rule, which needs version 2 and "
                             "an object");
      KernelInfo::SplitRule &r = info.splitRule;
      const std::string sw = where + " split";
      KVATTN_RETURN_IF_ERROR(integer(*split, "max", r.maxSplits, sw));
      KVATTN_RETURN_IF_ERROR(integer(*split, "block_m", r.blockM, sw));
      KVATTN_RETURN_IF_ERROR(integer(*split, "block_n", r.blockN, sw));
      KVATTN_RETURN_IF_ERROR(integer(*split, "group", r.group, sw));
      KVATTN_RETURN_IF_ERROR(
          integer(*split, "programs_per_sm", r.programsPerSm, sw));
      KVATTN_RETURN_IF_ERROR(integer(*split, "min_keys", r.minKeys, sw));
      KVATTN_RETURN_IF_ERROR(integer(*split, "num_sms", r.numSms, sw));
      if (r.maxSplits < 1 || r.maxSplits > 65535 || r.blockM < 1 ||
          r.blockN < 1 || r.group < 1 || r.programsPerSm < 1 || r.minKeys < 0)
        return Status::error("manifest: " + where +
                             " has an invalid split rule (max in [1, 65535], "
                             "block_m, block_n, group, programs_per_sm >= 1, "
                             "min_keys >= 0)");
      bool hasN = false;
      for (const ParamInfo &p : info.params)
        hasN |= p.kind == "scalar" && p.name == "N";
      if (!hasN)
        return Status::error("manifest: " + where +
                             " has a split rule but no scalar 'N'");
    }
    if (info.splitKv == 0 && info.splitRule.maxSplits == 0)
      return Status::error("manifest: " + where +
                           " has split_kv 0 (chosen at run time) but no "
                           "'split' rule");
    if (info.splitKv < 0)
      return Status::error("manifest: " + where + " has split_kv " +
                           std::to_string(info.splitKv) + " (must be >= 1)");
    if (info.group < 1)
      return Status::error("manifest: " + where + " has group " +
                           std::to_string(info.group) + " (must be >= 1)");
    if (info.blockM <= 0 || info.blockX <= 0 || info.blockX > 1024)
      return Status::error("manifest: " + where +
                           " has an invalid block or tile size");
    manifest.kernels.push_back(std::move(info));
  }
  if (manifest.kernels.empty())
    return Status::error("manifest: no kernels");
  return Status::ok();
}

} // namespace rt
} // namespace kvattn
} // namespace mlir
