//===- Sha256.h - SHA-256 (FIPS 180-4) --------------------------*- C++ -*-===//
//
// The digest of kvattn's cache fingerprints. Plain C++ (KVAttnSupport links
// neither LLVM nor a crypto library; the runtime links it alone).
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_SUPPORT_SHA256_H
#define KVATTN_SUPPORT_SHA256_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace mlir {
namespace kvattn {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
public:
  Sha256();
  void update(const void *data, size_t bytes);
  /// The digest of everything updated so far; the object is spent after.
  Sha256Digest finish();

private:
  void compress(const uint8_t *block);

  uint32_t state[8];
  uint8_t buffer[64];
  size_t buffered = 0;
  uint64_t totalBytes = 0;
};

/// Lower-case hexadecimal, 64 characters.
std::string toHex(const Sha256Digest &digest);

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_SUPPORT_SHA256_H
