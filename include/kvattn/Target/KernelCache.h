//===- KernelCache.h - compiled kernels cached on disk ----------*- C++ -*-===//
//
// compileToPtx's on-disk cache (docs/runtime.md, "Kernel cache"): one file
// per compiled module, named by a SHA-256 key over everything that decides
// the result -- the module's IR (without locations), every PTX option, the
// libdevice file, LLVM's version and a hash of kvattn's own compiler sources
// taken at build time. Entries are written to a temporary file and renamed
// into place (atomic on POSIX file systems), so concurrent processes never
// see a partial entry; each entry carries a checksum, and one that does not
// read back whole (truncated, corrupted, another format) is recompiled and
// replaced.
//
// The directory is $KVATTN_CACHE_DIR, else $XDG_CACHE_HOME/kvattn, else
// $HOME/.cache/kvattn; KVATTN_CACHE_DIR=off turns the cache off.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_TARGET_KERNELCACHE_H
#define KVATTN_TARGET_KERNELCACHE_H

#include "kvattn/Support/Status.h"
#include "kvattn/Target/Ptx.h"

#include <optional>
#include <string>

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace mlir {
namespace kvattn {

/// Bumped whenever the entry layout changes: older entries then read as
/// corrupt and are replaced.
constexpr int kKernelCacheFormat = 3;

class KernelCache {
public:
  /// The cache the environment selects (see above); std::nullopt when it is
  /// off or no directory can be named.
  static std::optional<KernelCache> fromEnvironment();
  explicit KernelCache(std::string directory)
      : directory_(std::move(directory)) {}

  const std::string &directory() const { return directory_; }

  /// The key of compiling `module` with `options` (and the libdevice file
  /// they select): 64 hex digits.
  static std::string key(mlir::ModuleOp module, const PtxOptions &options);

  enum class Lookup { Hit, Miss, Corrupt };
  /// Reads the entry of `key` into `result` (Hit), or says there is none
  /// (Miss) or that it did not read back whole (Corrupt: `result` is left
  /// unchanged and the caller should compile and store again).
  Lookup lookup(const std::string &key, PtxModule &result) const;

  /// Writes `module` as the entry of `key`: a temporary file in the
  /// directory (created if needed), then an atomic rename.
  Status store(const std::string &key, const PtxModule &module) const;

  /// The entry's path.
  std::string pathOf(const std::string &key) const;

private:
  std::string directory_;
};

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_TARGET_KERNELCACHE_H
