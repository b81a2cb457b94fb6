//===- Manifest.cpp - read a launch manifest ------------------------------===//

#include "Json.h"
#include "kvattn/Runtime/Runtime.h"

#include <cctype>
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

/// A `tensor_maps` parameter's `maps` (docs/kernel-abi.md, "Tensor maps"):
/// the fields of each map; what needs the other parameters is
/// checkTensorMaps.
Status tensorMaps(const JsonValue &pj, ParamInfo &p, const std::string &pw) {
  const JsonValue *maps;
  KVATTN_RETURN_IF_ERROR(field(pj, "maps", JsonValue::Kind::Array, maps, pw));
  if (maps->array.empty())
    return Status::error("manifest: " + pw + " has no maps");
  for (size_t m = 0; m < maps->array.size(); ++m) {
    const JsonValue &mj = maps->array[m];
    std::string mw = pw + " map " + std::to_string(m);
    if (mj.kind != JsonValue::Kind::Object)
      return Status::error("manifest: " + mw + " is not an object");
    TensorMapInfo map;
    KVATTN_RETURN_IF_ERROR(text(mj, "name", map.name, mw));
    mw = pw + " tensor map '" + map.name + "'";
    KVATTN_RETURN_IF_ERROR(text(mj, "buffer", map.buffer, mw));
    const JsonValue *dims, *box;
    KVATTN_RETURN_IF_ERROR(field(mj, "dims", JsonValue::Kind::Array, dims, mw));
    KVATTN_RETURN_IF_ERROR(field(mj, "box", JsonValue::Kind::Array, box, mw));
    if (dims->array.empty() || dims->array.size() > 5)
      return Status::error("manifest: " + mw + " has " +
                           std::to_string(dims->array.size()) +
                           " dims (a tensor map has 1 to 5)");
    if (box->array.size() != dims->array.size())
      return Status::error(
          "manifest: " + mw + " has " + std::to_string(box->array.size()) +
          " box sizes for " + std::to_string(dims->array.size()) + " dims");
    for (size_t i = 0; i < dims->array.size(); ++i) {
      const JsonValue &d = dims->array[i], &b = box->array[i];
      if (d.kind != JsonValue::Kind::Number ||
          d.number != std::floor(d.number) || d.number < 0 || d.number > 7)
        return Status::error("manifest: " + mw + " dims[" + std::to_string(i) +
                             "] is not a buffer dimension index");
      if (b.kind != JsonValue::Kind::Number ||
          b.number != std::floor(b.number) || b.number < 1 || b.number > 256)
        return Status::error("manifest: " + mw + " box[" + std::to_string(i) +
                             "] must be an integer in [1, 256]");
      map.dims.push_back(static_cast<int>(d.number));
      map.box.push_back(static_cast<uint32_t>(b.number));
    }
    std::string swizzle, fill;
    KVATTN_RETURN_IF_ERROR(text(mj, "swizzle", swizzle, mw));
    if (swizzle == "none")
      map.swizzleBytes = 0;
    else if (swizzle == "32B" || swizzle == "64B" || swizzle == "128B")
      map.swizzleBytes = std::stoi(swizzle);
    else
      return Status::error("manifest: " + mw + " has swizzle \"" + swizzle +
                           "\" (\"none\", \"32B\", \"64B\" or \"128B\")");
    KVATTN_RETURN_IF_ERROR(text(mj, "element_type", map.elementType, mw));
    if (map.elementType != "f16" && map.elementType != "bf16" &&
        map.elementType != "f32")
      return Status::error("manifest: " + mw + " has element type '" +
                           map.elementType + "' (f16, bf16 or f32)");
    KVATTN_RETURN_IF_ERROR(text(mj, "oob_fill", fill, mw));
    if (fill != "zero" && fill != "nan")
      return Status::error("manifest: " + mw + " has oob_fill \"" + fill +
                           "\" (\"zero\" or \"nan\")");
    map.nanFill = fill == "nan";
    // What cuTensorMapEncodeTiled requires of the inner box row.
    const unsigned inner = map.box[0] * (map.elementType == "f32" ? 4u : 2u);
    if (inner % 16)
      return Status::error("manifest: " + mw +
                           " box[0] = " + std::to_string(map.box[0]) + " " +
                           map.elementType + " is " + std::to_string(inner) +
                           " bytes, not a multiple of 16");
    if (map.swizzleBytes && inner > unsigned(map.swizzleBytes))
      return Status::error(
          "manifest: " + mw + " swizzle " + swizzle +
          " does not allow its box: box[0] = " + std::to_string(map.box[0]) +
          " " + map.elementType + " is " + std::to_string(inner) +
          " bytes, more than the swizzle's " + swizzle);
    p.maps.push_back(std::move(map));
  }
  return Status::ok();
}

/// Each map's buffer is a pointer parameter of the kernel with the map's
/// element type; its dims index that buffer's dimensions, each once; a
/// static dimension is at least the box, or 0 (an empty tensor, from which
/// nothing is loaded: its map is left zero, as at run time).
Status checkTensorMaps(const KernelInfo &info, const std::string &where) {
  for (const ParamInfo &p : info.params)
    for (const TensorMapInfo &map : p.maps) {
      const std::string mw =
          where + " param '" + p.name + "' tensor map '" + map.name + "'";
      const ParamInfo *buffer = nullptr;
      for (const ParamInfo &q : info.params)
        if (q.kind == "pointer" && q.name == map.buffer)
          buffer = &q;
      if (!buffer)
        return Status::error("manifest: " + mw + " describes '" + map.buffer +
                             "', which is no pointer parameter of the kernel");
      if (buffer->elementType != map.elementType)
        return Status::error("manifest: " + mw + " has element type '" +
                             map.elementType + "' but '" + map.buffer +
                             "' is '" + buffer->elementType + "'");
      std::vector<bool> seen(buffer->shape.size(), false);
      for (size_t i = 0; i < map.dims.size(); ++i) {
        const size_t d = static_cast<size_t>(map.dims[i]);
        if (d >= buffer->shape.size() || seen[d])
          return Status::error(
              "manifest: " + mw + " dims[" + std::to_string(i) +
              "] = " + std::to_string(d) +
              (d >= buffer->shape.size()
                   ? " is not a dimension of '" + map.buffer + "' (rank " +
                         std::to_string(buffer->shape.size()) + ")"
                   : " names a dimension of '" + map.buffer + "' twice"));
        seen[d] = true;
        const std::string &dim = buffer->shape[d];
        const uint64_t size =
            !dim.empty() && std::isdigit(static_cast<unsigned char>(dim[0])) &&
                    dim.size() < 10
                ? uint64_t(std::stoll(dim))
                : 0;
        if (size != 0 && size < map.box[i])
          return Status::error("manifest: " + mw + " box[" + std::to_string(i) +
                               "] = " + std::to_string(map.box[i]) +
                               " is larger than the tensor: '" + map.buffer +
                               "' dimension " + std::to_string(d) + " is " +
                               dim);
      }
    }
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
      if (p.kind == "tensor_maps") {
        KVATTN_RETURN_IF_ERROR(tensorMaps(pj, p, pw));
        info.params.push_back(std::move(p));
        continue;
      }
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
    KVATTN_RETURN_IF_ERROR(checkTensorMaps(info, where));
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
           kind->string != "validate" && kind->string != "cascade_prefix" &&
           kind->string != "cascade_merge" && kind->string != "merge_varlen"))
        return Status::error("manifest: " + where +
                             " has a kind other than \"attention\", "
                             "\"attention_varlen\", \"merge\", "
                             "\"merge_varlen\", \"append\", \"validate\", "
                             "\"cascade_prefix\" or \"cascade_merge\"");
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
    // Optional: an append whose -1 pages are padding.
    if (const JsonValue *skip = kj.get("skip_padding")) {
      if (skip->kind != JsonValue::Kind::Bool || info.kind != "append")
        return Status::error("manifest: " + where +
                             " has a 'skip_padding' that is not a boolean of "
                             "an \"append\" kernel");
      info.skipPadding = skip->boolean;
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
