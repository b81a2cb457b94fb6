//===- Status.h - error values without exceptions ---------------*- C++ -*-===//
//
// LLVM is built without exceptions, so every fallible kvattn function that
// must not depend on LLVM (the reference, .npy I/O, the runtime) returns a
// Status: success, or a message that names what was wrong.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_SUPPORT_STATUS_H
#define KVATTN_SUPPORT_STATUS_H

#include <string>
#include <utility>

namespace mlir {
namespace kvattn {

class [[nodiscard]] Status {
public:
  /// A successful status.
  static Status ok() { return Status(); }
  /// A failure carrying a human-readable message.
  static Status error(std::string message) {
    Status s;
    s.failed_ = true;
    s.message_ = std::move(message);
    return s;
  }

  bool isOk() const { return !failed_; }
  bool isError() const { return failed_; }
  explicit operator bool() const { return isOk(); }
  const std::string &message() const { return message_; }

  /// Prefixes the message with context, e.g. "reading q.npy: ".
  Status withContext(const std::string &context) const {
    if (isOk())
      return *this;
    return error(context + ": " + message_);
  }

private:
  Status() = default;
  bool failed_ = false;
  std::string message_;
};

} // namespace kvattn
} // namespace mlir

/// Returns early from the enclosing function when `expr` fails.
#define KVATTN_RETURN_IF_ERROR(expr)                                           \
  do {                                                                         \
    ::mlir::kvattn::Status kvattnStatus_ = (expr);                             \
    if (kvattnStatus_.isError())                                               \
      return kvattnStatus_;                                                    \
  } while (false)

#endif // KVATTN_SUPPORT_STATUS_H
