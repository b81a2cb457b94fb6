//===- Json.h - a small JSON reader for the launch manifest -----*- C++ -*-===//
//
// Just enough JSON for manifests: objects, arrays, strings (with the
// standard escapes), numbers, true/false/null. No dependencies.
//
//===----------------------------------------------------------------------===//

#ifndef KVATTN_RUNTIME_JSON_H
#define KVATTN_RUNTIME_JSON_H

#include "kvattn/Support/Status.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mlir {
namespace kvattn {
namespace rt {

struct JsonValue {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<JsonValue> array;
  std::map<std::string, JsonValue> object;

  const JsonValue *get(const std::string &key) const {
    auto it = object.find(key);
    return it == object.end() ? nullptr : &it->second;
  }
};

/// Parses `text`; errors give the byte offset.
Status parseJson(const std::string &text, JsonValue &value);

} // namespace rt
} // namespace kvattn
} // namespace mlir

#endif // KVATTN_RUNTIME_JSON_H
