//===- Fingerprint.cpp - the C API's cache identity -----------------------===//
//
// kvattn_cache_*: the fingerprint of a cached prefix (host or device
// buffers) and its check (kvattn/Support/CacheFingerprint.h).
//
//===----------------------------------------------------------------------===//

#include "CAPI.h"

#include "kvattn/Support/CacheFingerprint.h"

#include "llvm/ADT/StringRef.h"

using mlir::kvattn::CachePrefix;
using mlir::kvattn::Sha256Digest;
using mlir::kvattn::Status;
using namespace mlir::kvattn::capi;

namespace {

/// A Support error under the C function's name ("kvattn_cache_fingerprint:
/// length = ..." rather than "cache fingerprint: length = ...").
Status named(const std::string &what, const Status &s) {
  if (!s.isError())
    return s;
  llvm::StringRef message = s.message();
  message.consume_front("cache fingerprint: ");
  return Status::error(what + message.str());
}

/// The Support library's description of a caller's struct (struct_size
/// rule; errors start with `what`).
Status readPrefix(const std::string &what, const kvattn_cache_prefix *given,
                  CachePrefix &prefix) {
  if (!given)
    return Status::error(what + "null prefix");
  kvattn_cache_prefix p;
  kvattn_cache_prefix_init(&p);
  if (Status s = readVersioned(what + "prefix", "kvattn_cache_prefix_init",
                               sizeof(kvattn_cache_prefix), *given, p);
      s.isError())
    return s;
  if (!p.dtype)
    return Status::error(what + "prefix.dtype is null (\"f32\", \"f16\" or "
                                "\"bf16\")");
  std::optional<mlir::kvattn::ElementType> dtype =
      mlir::kvattn::parseElementType(p.dtype);
  if (!dtype)
    return Status::error(what + "prefix.dtype '" + p.dtype +
                         "' is not f32, f16 or bf16");
  prefix.dtype = *dtype;
  prefix.numKvHeads = p.num_kv_heads;
  prefix.headDim = p.head_dim;
  prefix.valueHeadDim = p.value_head_dim;
  prefix.length = p.length;
  prefix.batch = p.batch;
  prefix.batchSize = p.batch_size;
  prefix.capacity = p.capacity;
  prefix.pageSize = p.page_size;
  prefix.numPages = p.num_pages;
  prefix.maxPages = p.max_pages;
  prefix.pageTable = p.block_table_row;
  prefix.positions = p.positions;
  if (p.length > 0 && p.page_size > 0 && !p.block_table_row)
    return Status::error(what + "prefix.block_table_row is null");
  prefix.rope = p.rope ? p.rope : "";
  prefix.keyBytes = p.key_bytes;
  prefix.valueBytes = p.value_bytes;
  return named(what, mlir::kvattn::checkCachePrefix(prefix));
}

int writeDigest(const Sha256Digest &d, uint8_t *digest) {
  std::memcpy(digest, d.data(), d.size());
  return 0;
}

} // namespace

extern "C" {

void kvattn_cache_prefix_init(kvattn_cache_prefix *prefix) {
  if (!prefix)
    return;
  std::memset(prefix, 0, sizeof(*prefix));
  prefix->struct_size = sizeof(*prefix);
}

int kvattn_cache_fingerprint(const kvattn_cache_prefix *given, const void *key,
                             const void *value, uint8_t digest[32],
                             char **error) {
  const std::string what = "kvattn_cache_fingerprint: ";
  if (!digest)
    return report(Status::error(what + "null digest"), error);
  CachePrefix prefix;
  if (int failed = report(readPrefix(what, given, prefix), error))
    return failed;
  Sha256Digest d;
  if (int failed = report(
          named(what, mlir::kvattn::cacheFingerprint(prefix, key, value, d)),
          error))
    return failed;
  return writeDigest(d, digest);
}

int kvattn_runtime_cache_fingerprint(kvattn_runtime *runtime,
                                     const kvattn_cache_prefix *given,
                                     uint64_t key, uint64_t value,
                                     uint8_t digest[32], char **error) {
  const std::string what = "kvattn_runtime_cache_fingerprint: ";
  if (!runtime || !digest)
    return report(
        Status::error(what + "null " + (runtime ? "digest" : "runtime")),
        error);
  CachePrefix prefix;
  if (int failed = report(readPrefix(what, given, prefix), error))
    return failed;
  if (prefix.length > 0 && (!key || !value))
    return report(Status::error(what + "null key or value buffer"), error);
  if (int failed = report(runtime->runtime->synchronize(), error))
    return failed;
  Sha256Digest d;
  Status s = mlir::kvattn::cacheFingerprint(
      prefix,
      [&](bool isValue, uint64_t offset, uint64_t bytes, void *dst) {
        return runtime->runtime->copyToHost(
            dst, (isValue ? value : key) + offset, bytes);
      },
      d);
  if (int failed = report(named(what, s), error))
    return failed;
  return writeDigest(d, digest);
}

int kvattn_cache_check_fingerprint(const kvattn_cache_prefix *given,
                                   const uint8_t actual[32],
                                   const uint8_t expected[32], char **error) {
  const std::string what = "kvattn_cache_check_fingerprint: ";
  if (!actual || !expected)
    return report(Status::error(what + "null digest"), error);
  CachePrefix prefix;
  if (int failed = report(readPrefix(what, given, prefix), error))
    return failed;
  Sha256Digest a, e;
  std::memcpy(a.data(), actual, a.size());
  std::memcpy(e.data(), expected, e.size());
  return report(mlir::kvattn::checkFingerprint(prefix, a, e), error);
}

} // extern "C"
