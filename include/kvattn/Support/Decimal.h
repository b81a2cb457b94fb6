//===- Decimal.h - decimal integers -----------------------------*- C++ -*-===//
//
// std::stoll throws (and LLVM's builds abort on exceptions) on a number
// that does not fit: untrusted text (.npy headers, manifests) is parsed here
// instead.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_SUPPORT_DECIMAL_H
#define KVATTN_SUPPORT_DECIMAL_H

#include <cstdint>
#include <optional>
#include <string>

namespace mlir {
namespace kvattn {

/// The value of `text` if it is a non-empty run of decimal digits whose
/// value fits in int64_t; nothing otherwise.
inline std::optional<int64_t> parseDecimal(const std::string &text) {
  if (text.empty())
    return std::nullopt;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9')
      return std::nullopt;
    int digit = c - '0';
    if (value > (INT64_MAX - digit) / 10)
      return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

} // namespace kvattn
} // namespace mlir

#endif // KVATTN_SUPPORT_DECIMAL_H
