//===- NpyTest.cpp - .npy read/write --------------------------------------===//

#include "kvattn/Support/Npy.h"
#include "kvattn/Support/Float16.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace mlir::kvattn;

namespace {

std::string tempPath(const std::string &name) {
  const char *dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/kvattn-npy-test-" + name;
}

HostTensor iota(ElementType type, std::vector<int64_t> shape, double step) {
  HostTensor t(type, std::move(shape));
  for (int64_t i = 0; i < t.numElements(); ++i) {
    if (isFloatType(type))
      t.setDouble(i, step * static_cast<double>(i) - 3.0);
    else
      t.setInt(i, type == ElementType::I1 ? i % 2 : 7 * i - 11);
  }
  return t;
}

void expectSame(const HostTensor &a, const HostTensor &b) {
  ASSERT_EQ(a.elementType(), b.elementType());
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numElements(); ++i)
    EXPECT_EQ(a.getDouble(i), b.getDouble(i)) << "element " << i;
}

} // namespace

TEST(Npy, RoundTripsEveryDtype) {
  for (ElementType type :
       {ElementType::F32, ElementType::F16, ElementType::F64, ElementType::I1,
        ElementType::I32, ElementType::I64}) {
    HostTensor t = iota(type, {2, 3, 5}, 0.375);
    std::string path = tempPath(std::string(elementTypeName(type)) + ".npy");
    ASSERT_TRUE(writeNpy(path, t).isOk());
    HostTensor back;
    Status s = readNpy(path, back);
    ASSERT_TRUE(s.isOk()) << s.message();
    expectSame(t, back);
    std::remove(path.c_str());
  }
}

TEST(Npy, RankZeroAndRankOne) {
  for (std::vector<int64_t> shape :
       {std::vector<int64_t>{}, std::vector<int64_t>{4},
        std::vector<int64_t>{0, 3}}) {
    HostTensor t = iota(ElementType::F32, shape, 1.5);
    HostTensor back;
    ASSERT_TRUE(parseNpy(serializeNpy(t), back).isOk());
    expectSame(t, back);
  }
  // NumPy spells a 1-tuple "(4,)".
  std::string bytes = serializeNpy(iota(ElementType::F32, {4}, 1.0));
  EXPECT_NE(bytes.find("'shape': (4,)"), std::string::npos);
  // The data starts on a 64-byte boundary.
  EXPECT_EQ((bytes.size() - 16) % 64, 0u);
}

TEST(Npy, BFloat16TravelsAsFloat32) {
  HostTensor t(ElementType::BF16, {3});
  t.setDouble(0, 1.0);
  t.setDouble(1, -2.5);
  t.setDouble(2, 1.0 + 3 * std::ldexp(1.0, -8)); // rounds to 1 + 2^-6
  std::string bytes = serializeNpy(t);
  EXPECT_NE(bytes.find("'descr': '<f4'"), std::string::npos);
  HostTensor asF32;
  ASSERT_TRUE(parseNpy(bytes, asF32).isOk());
  EXPECT_EQ(asF32.elementType(), ElementType::F32);
  EXPECT_EQ(asF32.getDouble(2), 1.0 + std::ldexp(1.0, -6));

  // Reading a float32 file as bf16 rounds to nearest even.
  HostTensor f32(ElementType::F32, {2});
  f32.setDouble(0, 1.0 + std::ldexp(1.0, -8));     // tie -> 1.0
  f32.setDouble(1, 1.0 + 3 * std::ldexp(1.0, -8)); // tie -> 1 + 2^-6
  std::string path = tempPath("bf16.npy");
  ASSERT_TRUE(writeNpy(path, f32).isOk());
  HostTensor bf;
  ASSERT_TRUE(readNpyAs(path, ElementType::BF16, bf).isOk());
  EXPECT_EQ(bf.elementType(), ElementType::BF16);
  EXPECT_EQ(bf.getDouble(0), 1.0);
  EXPECT_EQ(bf.getDouble(1), 1.0 + std::ldexp(1.0, -6));
  std::remove(path.c_str());
}

TEST(Npy, RejectsBadFiles) {
  HostTensor t;
  Status s = parseNpy("not numpy at all", t);
  EXPECT_NE(s.message().find("bad magic"), std::string::npos);

  std::string good = serializeNpy(iota(ElementType::F32, {2, 2}, 1.0));
  s = parseNpy(good.substr(0, good.size() - 4), t);
  EXPECT_NE(s.message().find("truncated .npy data"), std::string::npos)
      << s.message();

  std::string fortran = good;
  fortran.replace(fortran.find("False"), 5, "True ");
  s = parseNpy(fortran, t);
  EXPECT_NE(s.message().find("Fortran"), std::string::npos) << s.message();

  std::string bigEndian = good;
  bigEndian.replace(bigEndian.find("<f4"), 3, ">f4");
  s = parseNpy(bigEndian, t);
  EXPECT_NE(s.message().find("unsupported .npy dtype '>f4'"), std::string::npos)
      << s.message();

  s = readNpy(tempPath("does-not-exist.npy"), t);
  EXPECT_NE(s.message().find("cannot open"), std::string::npos);

  // A 25-digit dimension (issue 14, defect 3: std::stoll threw and the
  // process aborted). The header keeps its length: "(2, 2)" becomes a
  // tuple of the same width plus padding the parser skips.
  std::string huge = good;
  size_t shape = huge.find("(2, 2)");
  ASSERT_NE(shape, std::string::npos);
  std::string digits = "(9999999999999999999999999, 2)";
  size_t pad = huge.find('\n') - (shape + 6);
  ASSERT_GE(pad, digits.size() - 6) << "the header has no room";
  huge.replace(shape, digits.size(), digits);
  s = parseNpy(huge, t);
  EXPECT_NE(s.message().find("dimension '9999999999999999999999999' in the "
                             ".npy shape does not fit in 64 bits"),
            std::string::npos)
      << s.message();
}

TEST(Npy, ConversionRules) {
  HostTensor ints = iota(ElementType::I64, {3}, 0);
  HostTensor out;
  EXPECT_TRUE(ints.convertTo(ElementType::I32, out).isOk());
  EXPECT_EQ(out.getInt(2), 3);
  Status s = ints.convertTo(ElementType::F32, out);
  EXPECT_NE(s.message().find("float <-> integer"), std::string::npos);
  HostTensor big(ElementType::I64, {1});
  big.setInt(0, int64_t(1) << 40);
  s = big.convertTo(ElementType::I32, out);
  EXPECT_NE(s.message().find("does not fit in i32"), std::string::npos);
}
