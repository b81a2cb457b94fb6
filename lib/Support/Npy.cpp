//===- Npy.cpp - NumPy .npy files -----------------------------------------===//

#include "kvattn/Support/Npy.h"

#include "kvattn/Support/Decimal.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <unistd.h>

namespace mlir {
namespace kvattn {

namespace {
struct DescrEntry {
  const char *descr;
  ElementType type;
};
} // namespace

// Little-endian spellings ('<'), native ('=') and byte-order-free ('|').
static const DescrEntry kDescrs[] = {
    {"<f4", ElementType::F32}, {"=f4", ElementType::F32},
    {"<f2", ElementType::F16}, {"=f2", ElementType::F16},
    {"<f8", ElementType::F64}, {"=f8", ElementType::F64},
    {"|b1", ElementType::I1},  {"<i4", ElementType::I32},
    {"=i4", ElementType::I32}, {"<i8", ElementType::I64},
    {"=i8", ElementType::I64},
};

static const char *descrFor(ElementType type) {
  switch (type) {
  case ElementType::F32:
  case ElementType::BF16:     // NumPy has no bfloat16: written as float32.
  case ElementType::F8E4M3FN: // Nor FP8: the decoded values as float32.
  case ElementType::F8E5M2:
    return "<f4";
  case ElementType::F16:
    return "<f2";
  case ElementType::F64:
    return "<f8";
  case ElementType::I1:
    return "|b1";
  case ElementType::I32:
    return "<i4";
  case ElementType::I64:
    return "<i8";
  }
  return "<f4";
}

/// Finds the value text after `'key':` in a header dict.
static bool findValue(const std::string &header, const std::string &key,
                      size_t &pos) {
  size_t k = header.find("'" + key + "'");
  if (k == std::string::npos)
    return false;
  size_t colon = header.find(':', k);
  if (colon == std::string::npos)
    return false;
  pos = colon + 1;
  while (pos < header.size() &&
         std::isspace(static_cast<unsigned char>(header[pos])))
    ++pos;
  return pos < header.size();
}

Status parseNpy(const std::string &bytes, HostTensor &result) {
  static const char kMagic[] = "\x93NUMPY";
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, 6) != 0)
    return Status::error("not a .npy file (bad magic string)");
  unsigned major = static_cast<unsigned char>(bytes[6]);
  size_t headerLen, headerStart;
  if (major == 1) {
    headerLen =
        static_cast<unsigned char>(bytes[8]) |
        (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12)
      return Status::error("truncated .npy header");
    headerLen = 0;
    for (int i = 3; i >= 0; --i)
      headerLen = (headerLen << 8) | static_cast<unsigned char>(bytes[8 + i]);
    headerStart = 12;
  } else {
    return Status::error("unsupported .npy version " + std::to_string(major));
  }
  if (bytes.size() < headerStart + headerLen)
    return Status::error("truncated .npy header");
  std::string header = bytes.substr(headerStart, headerLen);

  size_t pos;
  if (!findValue(header, "descr", pos) || header[pos] != '\'')
    return Status::error("the .npy header has no 'descr'");
  size_t end = header.find('\'', pos + 1);
  if (end == std::string::npos)
    return Status::error("malformed 'descr' in the .npy header");
  std::string descr = header.substr(pos + 1, end - pos - 1);
  const DescrEntry *entry = nullptr;
  for (const DescrEntry &e : kDescrs)
    if (descr == e.descr)
      entry = &e;
  if (!entry)
    return Status::error("unsupported .npy dtype '" + descr +
                         "' (supported: <f4 <f2 <f8 |b1 <i4 <i8; bf16 "
                         "travels as <f4)");

  if (!findValue(header, "fortran_order", pos))
    return Status::error("the .npy header has no 'fortran_order'");
  if (header.compare(pos, 4, "True") == 0)
    return Status::error("Fortran-ordered .npy arrays are not supported; "
                         "save with np.ascontiguousarray");

  if (!findValue(header, "shape", pos) || header[pos] != '(')
    return Status::error("the .npy header has no 'shape' tuple");
  size_t close = header.find(')', pos);
  if (close == std::string::npos)
    return Status::error("malformed 'shape' in the .npy header");
  std::vector<int64_t> shape;
  std::string tuple = header.substr(pos + 1, close - pos - 1);
  std::stringstream ss(tuple);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t first = item.find_first_not_of(" \t");
    if (first == std::string::npos)
      continue; // The trailing comma of a 1-tuple.
    size_t last = item.find_last_not_of(" \tL");
    std::string digits = item.substr(first, last - first + 1);
    if (digits.empty() ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      return Status::error("malformed dimension '" + item +
                           "' in the .npy shape");
    std::optional<int64_t> dim = parseDecimal(digits);
    if (!dim)
      return Status::error("dimension '" + digits +
                           "' in the .npy shape does not fit in 64 bits");
    shape.push_back(*dim);
  }

  // Check the size before allocating anything: a corrupt header must not
  // turn into a huge allocation.
  size_t dataStart = headerStart + headerLen;
  uint64_t expectedBytes = elementTypeSize(entry->type);
  for (int64_t d : shape)
    if (__builtin_mul_overflow(expectedBytes, static_cast<uint64_t>(d),
                               &expectedBytes))
      return Status::error("the .npy shape overflows 64 bits");
  if (bytes.size() - dataStart < expectedBytes)
    return Status::error("truncated .npy data: expected " +
                         std::to_string(expectedBytes) + " bytes, found " +
                         std::to_string(bytes.size() - dataStart));
  HostTensor tensor(entry->type, shape);
  if (bytes.size() - dataStart < tensor.byteSize())
    return Status::error("truncated .npy data: expected " +
                         std::to_string(tensor.byteSize()) + " bytes for " +
                         tensor.shapeString() + ", found " +
                         std::to_string(bytes.size() - dataStart));
  if (tensor.byteSize()) // an empty tensor has no storage to copy into
    std::memcpy(tensor.mutableData(), bytes.data() + dataStart, tensor.byteSize());
  if (entry->type == ElementType::I1) {
    for (size_t i = 0; i < tensor.byteSize(); ++i)
      if (tensor.data()[i] > 1)
        return Status::error("bool .npy element " + std::to_string(i) +
                             " is neither 0 nor 1");
  }
  result = std::move(tensor);
  return Status::ok();
}

Status readNpy(const std::string &path, HostTensor &result) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Status::error("cannot open '" + path + "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parseNpy(buffer.str(), result).withContext("reading '" + path + "'");
}

Status readNpyAs(const std::string &path, ElementType type,
                 HostTensor &result) {
  HostTensor raw;
  KVATTN_RETURN_IF_ERROR(readNpy(path, raw));
  if (raw.elementType() == type) {
    result = std::move(raw);
    return Status::ok();
  }
  return raw.convertTo(type, result).withContext("reading '" + path + "'");
}

std::string serializeNpy(const HostTensor &tensor) {
  std::string dict = std::string("{'descr': '") +
                     descrFor(tensor.elementType()) +
                     "', 'fortran_order': False, 'shape': (";
  for (int64_t d : tensor.shape())
    dict += std::to_string(d) + ", ";
  if (tensor.rank() > 1)
    dict.erase(dict.size() - 2); // NumPy spells (2, 3) but (2,) for rank 1.
  else if (tensor.rank() == 1)
    dict.erase(dict.size() - 1);
  dict += "), }";
  // Pad with spaces so that the data starts at a multiple of 64 bytes.
  size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';

  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>((dict.size() >> 8) & 0xff);
  out += dict;
  if (tensor.elementType() == ElementType::BF16 ||
      isFp8Type(tensor.elementType())) {
    HostTensor widened;
    Status s = tensor.convertTo(ElementType::F32, widened);
    (void)s; // bf16 / FP8 -> f32 always succeeds.
    out.append(reinterpret_cast<const char *>(widened.data()),
               widened.byteSize());
  } else {
    out.append(reinterpret_cast<const char *>(tensor.data()),
               tensor.byteSize());
  }
  return out;
}

Status writeNpy(const std::string &path, const HostTensor &tensor) {
  std::string bytes = serializeNpy(tensor);
  // Every write and the close are checked, with the system's reason (a
  // full disk fails the write or the close, never leaves a short file
  // behind a success).
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0)
    return Status::error("cannot open '" + path +
                         "' for writing: " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      std::string why = n < 0 ? std::strerror(errno) : "nothing written";
      ::close(fd);
      return Status::error("writing '" + path + "' failed: " + why);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0)
    return Status::error("writing '" + path +
                         "' failed: " + std::strerror(errno));
  return Status::ok();
}

} // namespace kvattn
} // namespace mlir
