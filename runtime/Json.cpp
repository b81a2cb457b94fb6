//===- Json.cpp - a small JSON reader for the launch manifest -------------===//

#include "Json.h"

#include <cctype>
#include <cstdlib>

namespace mlir {
namespace kvattn {
namespace rt {

namespace {

class Parser {
public:
  explicit Parser(const std::string &text) : s(text) {}

  Status parse(JsonValue &v) {
    KVATTN_RETURN_IF_ERROR(value(v, 0));
    skip();
    if (pos != s.size())
      return fail("trailing characters");
    return Status::ok();
  }

private:
  Status fail(const std::string &what) {
    return Status::error("invalid JSON at byte " + std::to_string(pos) + ": " +
                         what);
  }
  void skip() {
    while (pos < s.size() && std::isspace(static_cast<unsigned char>(s[pos])))
      ++pos;
  }
  bool consume(char c) {
    skip();
    if (pos < s.size() && s[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  }

  Status value(JsonValue &v, int depth) {
    if (depth > 64)
      return fail("nesting too deep");
    skip();
    if (pos >= s.size())
      return fail("unexpected end");
    char c = s[pos];
    if (c == '{')
      return object(v, depth);
    if (c == '[')
      return array(v, depth);
    if (c == '"') {
      v.kind = JsonValue::Kind::String;
      return string(v.string);
    }
    if (s.compare(pos, 4, "true") == 0) {
      pos += 4;
      v.kind = JsonValue::Kind::Bool;
      v.boolean = true;
      return Status::ok();
    }
    if (s.compare(pos, 5, "false") == 0) {
      pos += 5;
      v.kind = JsonValue::Kind::Bool;
      return Status::ok();
    }
    if (s.compare(pos, 4, "null") == 0) {
      pos += 4;
      return Status::ok();
    }
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) {
      const char *begin = s.c_str() + pos;
      char *end = nullptr;
      v.kind = JsonValue::Kind::Number;
      v.number = std::strtod(begin, &end);
      if (end == begin)
        return fail("bad number");
      pos += static_cast<size_t>(end - begin);
      return Status::ok();
    }
    return fail(std::string("unexpected '") + c + "'");
  }

  Status string(std::string &out) {
    ++pos; // opening quote
    while (pos < s.size() && s[pos] != '"') {
      char c = s[pos++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos >= s.size())
        return fail("unterminated escape");
      char e = s[pos++];
      switch (e) {
      case '"':
      case '\\':
      case '/':
        out += e;
        break;
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'u': {
        if (pos + 4 > s.size())
          return fail("short \\u escape");
        unsigned code = std::strtoul(s.substr(pos, 4).c_str(), nullptr, 16);
        pos += 4;
        if (code < 0x80) {
          out += static_cast<char>(code);
        } else if (code < 0x800) {
          out += static_cast<char>(0xc0 | (code >> 6));
          out += static_cast<char>(0x80 | (code & 0x3f));
        } else {
          out += static_cast<char>(0xe0 | (code >> 12));
          out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
          out += static_cast<char>(0x80 | (code & 0x3f));
        }
        break;
      }
      default:
        return fail(std::string("bad escape \\") + e);
      }
    }
    if (pos >= s.size())
      return fail("unterminated string");
    ++pos; // closing quote
    return Status::ok();
  }

  Status array(JsonValue &v, int depth) {
    ++pos;
    v.kind = JsonValue::Kind::Array;
    if (consume(']'))
      return Status::ok();
    do {
      v.array.emplace_back();
      KVATTN_RETURN_IF_ERROR(value(v.array.back(), depth + 1));
    } while (consume(','));
    if (!consume(']'))
      return fail("expected ',' or ']'");
    return Status::ok();
  }

  Status object(JsonValue &v, int depth) {
    ++pos;
    v.kind = JsonValue::Kind::Object;
    if (consume('}'))
      return Status::ok();
    do {
      skip();
      if (pos >= s.size() || s[pos] != '"')
        return fail("expected a key");
      std::string key;
      KVATTN_RETURN_IF_ERROR(string(key));
      if (!consume(':'))
        return fail("expected ':'");
      KVATTN_RETURN_IF_ERROR(value(v.object[key], depth + 1));
    } while (consume(','));
    if (!consume('}'))
      return fail("expected ',' or '}'");
    return Status::ok();
  }

  const std::string &s;
  size_t pos = 0;
};

} // namespace

Status parseJson(const std::string &text, JsonValue &value) {
  value = JsonValue();
  return Parser(text).parse(value);
}

} // namespace rt
} // namespace kvattn
} // namespace mlir
