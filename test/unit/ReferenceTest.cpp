//===- ReferenceTest.cpp - the scalar reference
//----------------------------===//
//
// Each test asserts values that follow from the semantics contract by hand,
// chosen (distinct values, zero logits) so that a wrong mask, a wrong
// alignment or a masked-by-multiplication key gives a different number.
//
//===----------------------------------------------------------------------===//

#include "kvattn/Reference/Reference.h"
#include "kvattn/Reference/Fp8KvCache.h"
#include "kvattn/Support/Random.h"
#include "lib/Reference/MagnitudeScan.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

using namespace mlir::kvattn;
using namespace mlir::kvattn::reference;

namespace {

const double kInf = std::numeric_limits<double>::infinity();

HostTensor tensor(ElementType type, std::vector<int64_t> shape,
                  std::vector<double> values = {}) {
  HostTensor t(type, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i)
    t.setDouble(static_cast<int64_t>(i), values[i]);
  return t;
}

HostTensor ints(std::vector<int64_t> shape, std::vector<int64_t> values) {
  HostTensor t(ElementType::I32, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i)
    t.setInt(static_cast<int64_t>(i), values[i]);
  return t;
}

/// The seeds' 2x5 example: P = 3 cached keys, L = 2 new queries, D = 1,
/// q = 0 (so every logit is 0) and values 10, 20, 30, 40, 50.
struct TwoByFive {
  HostTensor q = tensor(ElementType::F32, {1, 1, 2, 1}, {0, 0});
  HostTensor k = tensor(ElementType::F32, {1, 1, 5, 1}, {1, 2, 3, 4, 5});
  HostTensor v = tensor(ElementType::F32, {1, 1, 5, 1}, {10, 20, 30, 40, 50});
};

std::vector<double> values(const HostTensor &t) {
  std::vector<double> out;
  for (int64_t i = 0; i < t.numElements(); ++i)
    out.push_back(t.getDouble(i));
  return out;
}

AttentionResult run(const AttentionOperands &ops,
                    const AttentionAttributes &attrs) {
  AttentionResult r;
  Status s = attention(ops, attrs, r);
  EXPECT_TRUE(s.isOk()) << s.message();
  return r;
}

std::string errorOf(const AttentionOperands &ops,
                    const AttentionAttributes &attrs) {
  AttentionResult r;
  Status s = attention(ops, attrs, r);
  EXPECT_TRUE(s.isError());
  return s.message();
}

} // namespace

TEST(Reference, TwoByFiveLowerRightGives25And30) {
  TwoByFive ex;
  HostTensor offset = ints({1}, {3}); // the queries sit at positions 3, 4
  AttentionOperands ops{&ex.q, &ex.k, &ex.v};
  ops.qOffset = &offset;
  AttentionResult r = run(ops, {/*causal=*/true});
  // Row 0 sees keys 0..3 (mean of 10..40), row 1 all five keys.
  EXPECT_EQ(values(r.out), (std::vector<double>{25, 30}));
  // Zero logits: lse = log(number of allowed keys).
  EXPECT_DOUBLE_EQ(r.lse.getDouble(0), std::log(4.0));
  EXPECT_DOUBLE_EQ(r.lse.getDouble(1), std::log(5.0));
}

TEST(Reference, TwoByFiveUpperLeftGives10And15) {
  TwoByFive ex;
  HostTensor offset = ints({1}, {0}); // upper-left: positions 0, 1
  AttentionOperands ops{&ex.q, &ex.k, &ex.v};
  ops.qOffset = &offset;
  AttentionResult r = run(ops, {/*causal=*/true});
  EXPECT_EQ(values(r.out), (std::vector<double>{10, 15}));
}

TEST(Reference, SdpaAlignments) {
  TwoByFive ex;
  HostTensor out;
  SdpaAttributes attrs;
  attrs.causal = CausalAlignment::LowerRight;
  ASSERT_TRUE(sdpa({&ex.q, &ex.k, &ex.v}, attrs, out).isOk());
  EXPECT_EQ(values(out), (std::vector<double>{25, 30}));
  attrs.causal = CausalAlignment::UpperLeft;
  ASSERT_TRUE(sdpa({&ex.q, &ex.k, &ex.v}, attrs, out).isOk());
  EXPECT_EQ(values(out), (std::vector<double>{10, 15}));
  attrs.causal = CausalAlignment::None;
  ASSERT_TRUE(sdpa({&ex.q, &ex.k, &ex.v}, attrs, out).isOk());
  EXPECT_EQ(values(out), (std::vector<double>{30, 30}));
}

TEST(Reference, SdpaWindowSoftcapAndLse) {
  // Zero scores, values 10..50: each row averages the keys it sees.
  TwoByFive ex;
  HostTensor out, lse;
  SdpaAttributes attrs;
  attrs.causal = CausalAlignment::LowerRight;
  attrs.window = 2;
  // Rows at positions 3 and 4 see their last two keys: 30, 40 and 40, 50.
  ASSERT_TRUE(
      sdpa({&ex.q, &ex.k, &ex.v}, attrs, out, Compute::Values, &lse).isOk());
  EXPECT_EQ(values(out), (std::vector<double>{35, 45}));
  EXPECT_NEAR(lse.getDouble(0), std::log(2.0), 1e-12);
  EXPECT_NEAR(lse.getDouble(1), std::log(2.0), 1e-12);
  // Upper-left: rows at positions 0 and 1.
  attrs.causal = CausalAlignment::UpperLeft;
  ASSERT_TRUE(sdpa({&ex.q, &ex.k, &ex.v}, attrs, out).isOk());
  EXPECT_EQ(values(out), (std::vector<double>{10, 15}));
  // A window needs causal; a soft cap must be positive.
  attrs.causal = CausalAlignment::None;
  EXPECT_NE(sdpa({&ex.q, &ex.k, &ex.v}, attrs, out)
                .message()
                .find("window needs causal"),
            std::string::npos);
  SdpaAttributes capped;
  capped.softcap = -1.0;
  EXPECT_NE(sdpa({&ex.q, &ex.k, &ex.v}, capped, out).message().find("softcap"),
            std::string::npos);
  // Soft-capped scores: s = 1 * 10 and 1 * 0 become tanh(10) and 0.
  HostTensor q = tensor(ElementType::F32, {1, 1, 1, 1}, {1});
  HostTensor k = tensor(ElementType::F32, {1, 1, 2, 1}, {10, 0});
  HostTensor v = tensor(ElementType::F32, {1, 1, 2, 1}, {1, 0});
  capped.softcap = 1.0;
  capped.scale = 1.0;
  ASSERT_TRUE(sdpa({&q, &k, &v}, capped, out, Compute::Values, &lse).isOk());
  const double e = std::exp(std::tanh(10.0));
  EXPECT_NEAR(out.getDouble(0), e / (e + 1), 1e-12);
  EXPECT_NEAR(lse.getDouble(0), std::log(e + 1), 1e-12);
}

TEST(Reference, SdpaOverLogicalCache) {
  // A cache of capacity 5 holding 3 keys (kv_len = 3) with one new query:
  // lower-right puts it after the 3 logical keys, so it sees 10, 20, 30.
  TwoByFive ex;
  HostTensor q = tensor(ElementType::F32, {1, 1, 1, 1}, {0});
  HostTensor len = ints({1}, {3});
  SdpaOperands ops{&q, &ex.k, &ex.v};
  ops.kvLen = &len;
  SdpaAttributes attrs;
  attrs.causal = CausalAlignment::LowerRight;
  HostTensor out;
  ASSERT_TRUE(sdpa(ops, attrs, out).isOk());
  EXPECT_EQ(values(out), (std::vector<double>{20}));
}

TEST(Reference, SdpaMasks) {
  TwoByFive ex;
  // Boolean mask [L, S]: true = allowed.
  HostTensor allowed =
      tensor(ElementType::I1, {2, 5}, {1, 0, 1, 0, 0, /**/ 0, 0, 0, 1, 1});
  HostTensor out;
  ASSERT_TRUE(sdpa({&ex.q, &ex.k, &ex.v, &allowed}, {}, out).isOk());
  EXPECT_EQ(values(out), (std::vector<double>{20, 45}));
  // Additive mask [1, 1, 1, 5]: -inf excludes, finite values are biases.
  HostTensor bias = tensor(ElementType::F32, {1, 1, 1, 5},
                           {-kInf, std::log(3.0), 0, -kInf, -kInf});
  ASSERT_TRUE(sdpa({&ex.q, &ex.k, &ex.v, &bias}, {}, out).isOk());
  // Weights 3 : 1 on values 20 and 30 (log 3 is stored as f32: 1e-6).
  EXPECT_NEAR(out.getDouble(0), (3 * 20 + 30) / 4.0, 1e-6);
  // mask and causal are exclusive.
  SdpaAttributes causal;
  causal.causal = CausalAlignment::LowerRight;
  Status s = sdpa({&ex.q, &ex.k, &ex.v, &allowed}, causal, out);
  EXPECT_NE(s.message().find("exclusive"), std::string::npos);
}

TEST(Reference, PaddingAtAnOldPositionIsExcluded) {
  // The query at position 4 may see every key by causality; key 0 is
  // padding and stays excluded: mean of 20..50.
  TwoByFive ex;
  HostTensor q = tensor(ElementType::F32, {1, 1, 1, 1}, {0});
  HostTensor offset = ints({1}, {4});
  HostTensor valid = tensor(ElementType::I1, {1, 5}, {0, 1, 1, 1, 1});
  AttentionOperands ops{&q, &ex.k, &ex.v};
  ops.qOffset = &offset;
  ops.keyValid = &valid;
  AttentionResult r = run(ops, {/*causal=*/true});
  EXPECT_EQ(values(r.out), (std::vector<double>{35}));
}

TEST(Reference, ForbiddenKeysAreExcludedNotZeroed) {
  // Two zero logits, values 10 and 1000, the second key forbidden. Zeroing
  // the forbidden logit instead of excluding it would give (10 + 1000) / 2.
  HostTensor q = tensor(ElementType::F32, {1, 1, 1, 1}, {0});
  HostTensor k = tensor(ElementType::F32, {1, 1, 2, 1}, {1, 1});
  HostTensor v = tensor(ElementType::F32, {1, 1, 2, 1}, {10, 1000});
  HostTensor len = ints({1}, {1});
  AttentionOperands ops{&q, &k, &v};
  ops.kvLen = &len;
  AttentionResult r = run(ops, {});
  EXPECT_EQ(r.out.getDouble(0), 10);

  // The wrong method, for the record: softmax over both logits (the
  // forbidden one multiplied by zero) is 505.
  double zeroed[2] = {0.0 * 1.0, 0.0};
  double w0 = std::exp(zeroed[0]), w1 = std::exp(zeroed[1]);
  EXPECT_EQ((w0 * 10 + w1 * 1000) / (w0 + w1), 505);
}

TEST(Reference, AllMaskedRowGivesZeroAndMinusInf) {
  TwoByFive ex;
  HostTensor len = ints({1}, {0});
  AttentionOperands ops{&ex.q, &ex.k, &ex.v};
  ops.kvLen = &len;
  AttentionResult r = run(ops, {});
  EXPECT_EQ(values(r.out), (std::vector<double>{0, 0}));
  EXPECT_EQ(r.lse.getDouble(0), -kInf);
  EXPECT_EQ(r.lse.getDouble(1), -kInf);

  // Causality alone can empty a row: keys start at position 10.
  HostTensor qOff = ints({1}, {3}), kOff = ints({1}, {10});
  AttentionOperands shifted{&ex.q, &ex.k, &ex.v};
  shifted.qOffset = &qOff;
  shifted.kOffset = &kOff;
  r = run(shifted, {/*causal=*/true});
  EXPECT_EQ(values(r.out), (std::vector<double>{0, 0}));
  EXPECT_EQ(r.lse.getDouble(1), -kInf);
}

TEST(Reference, SlidingWindow) {
  // Query at position 4 with window 2 sees positions 3 and 4: 40 and 50.
  TwoByFive ex;
  HostTensor q = tensor(ElementType::F32, {1, 1, 1, 1}, {0});
  HostTensor offset = ints({1}, {4});
  AttentionOperands ops{&q, &ex.k, &ex.v};
  ops.qOffset = &offset;
  AttentionAttributes attrs{/*causal=*/true, /*window=*/2};
  EXPECT_EQ(run(ops, attrs).out.getDouble(0), 45);
  // Window without causality also bounds from below only: position 4 with
  // window 3 sees 2, 3, 4 (keys after the query are not blocked).
  attrs = {/*causal=*/false, /*window=*/3};
  EXPECT_EQ(run(ops, attrs).out.getDouble(0), 40);
}

TEST(Reference, SoftcapAndScale) {
  // D = 1, q = 1, keys 2 and 0, scale 1: logits 2 and 0; softcap 1 turns
  // them into tanh(2) and 0.
  HostTensor q = tensor(ElementType::F32, {1, 1, 1, 1}, {1});
  HostTensor k = tensor(ElementType::F32, {1, 1, 2, 1}, {2, 0});
  HostTensor v = tensor(ElementType::F32, {1, 1, 2, 1}, {1, 0});
  AttentionOperands ops{&q, &k, &v};
  AttentionAttributes attrs;
  attrs.scale = 1.0;
  attrs.softcap = 1.0;
  double e = std::exp(std::tanh(2.0));
  AttentionResult r = run(ops, attrs);
  EXPECT_NEAR(r.out.getDouble(0), e / (e + 1), 1e-15);
  EXPECT_NEAR(r.lse.getDouble(0), std::log(e + 1), 1e-15);

  // Default scale 1/sqrt(D): D = 4, q = k0 = ones, k1 = 0: logits 2 and 0.
  HostTensor q4 = tensor(ElementType::F32, {1, 1, 1, 4}, {1, 1, 1, 1});
  HostTensor k4 =
      tensor(ElementType::F32, {1, 1, 2, 4}, {1, 1, 1, 1, 0, 0, 0, 0});
  AttentionOperands ops4{&q4, &k4, &v};
  double e2 = std::exp(2.0);
  EXPECT_NEAR(run(ops4, {}).out.getDouble(0), e2 / (e2 + 1), 1e-15);
}

TEST(Reference, ValueHeadDimDiffersFromKeyHeadDim) {
  // D = 2, Dv = 3, zero logits over two keys: the mean of the value rows.
  HostTensor q = tensor(ElementType::F32, {1, 1, 1, 2}, {0, 0});
  HostTensor k = tensor(ElementType::F32, {1, 1, 2, 2}, {1, 2, 3, 4});
  HostTensor v = tensor(ElementType::F32, {1, 1, 2, 3}, {1, 2, 3, 5, 6, 7});
  AttentionResult r = run({&q, &k, &v}, {});
  EXPECT_EQ(r.out.shape(), (std::vector<int64_t>{1, 1, 1, 3}));
  EXPECT_EQ(values(r.out), (std::vector<double>{3, 4, 5}));
}

TEST(Reference, LatentFormReadsValuesFromTheKeysFirstColumns) {
  // DeepSeek MLA's latent form: no value, V = the key's first Dv = 2 of its
  // D = 3 columns. Zero query: the mean of the keys' first two columns; the
  // third column (the rotary part) is never a value.
  HostTensor q = tensor(ElementType::F32, {1, 2, 1, 3}, {0, 0, 0, 0, 0, 0});
  HostTensor k =
      tensor(ElementType::F32, {1, 1, 2, 3}, {1, 2, 100, 3, 4, -100});
  AttentionOperands ops;
  ops.query = &q;
  ops.key = &k;
  ops.latentValueDim = 2;
  AttentionResult r = run(ops, {});
  EXPECT_EQ(r.out.shape(), (std::vector<int64_t>{1, 2, 1, 2}));
  EXPECT_EQ(values(r.out), (std::vector<double>{2, 3, 2, 3}));
  // The same as an explicit value holding those columns.
  HostTensor v;
  ASSERT_TRUE(latentValue(k, 2, v).isOk());
  EXPECT_EQ(values(v), (std::vector<double>{1, 2, 3, 4}));
  AttentionResult plain = run({&q, &k, &v}, {});
  EXPECT_EQ(values(plain.out), values(r.out));
  // A value given with the latent form, Dv above D or below 1.
  AttentionOperands both = ops;
  both.value = &v;
  EXPECT_NE(errorOf(both, {}).find("declares the latent form"),
            std::string::npos);
  ops.latentValueDim = 4;
  EXPECT_NE(errorOf(ops, {}).find("value_dim = 4 must be in [1, D = 3]"),
            std::string::npos);
  ops.latentValueDim = -1;
  EXPECT_NE(errorOf(ops, {}).find("value_dim = -1 must be in [1, D = 3]"),
            std::string::npos);
}

TEST(Reference, GroupedQueryHeadsReadTheirKvHead) {
  // Hq = 4, Hkv = 2: heads 0, 1 read kv head 0, heads 2, 3 kv head 1.
  HostTensor q = tensor(ElementType::F32, {1, 4, 1, 1}, {0, 0, 0, 0});
  HostTensor k = tensor(ElementType::F32, {1, 2, 1, 1}, {1, 1});
  HostTensor v = tensor(ElementType::F32, {1, 2, 1, 1}, {7, 9});
  AttentionResult r = run({&q, &k, &v}, {});
  EXPECT_EQ(values(r.out), (std::vector<double>{7, 7, 9, 9}));
}

TEST(Reference, ExplicitPositions) {
  // The query at position 10; keys at 2, 8, 12, 9 (not monotone): causal
  // allows 2, 8 and 9, i.e. values 10, 20 and 40.
  TwoByFive ex;
  HostTensor q = tensor(ElementType::F32, {1, 1, 1, 1}, {0});
  HostTensor k = tensor(ElementType::F32, {1, 1, 4, 1}, {1, 1, 1, 1});
  HostTensor v = tensor(ElementType::F32, {1, 1, 4, 1}, {10, 20, 30, 40});
  HostTensor qPos = ints({1, 1}, {10}), kPos = ints({1, 4}, {2, 8, 12, 9});
  AttentionOperands ops{&q, &k, &v};
  ops.qPos = &qPos;
  ops.kPos = &kPos;
  AttentionResult r = run(ops, {/*causal=*/true});
  EXPECT_NEAR(r.out.getDouble(0), 70.0 / 3.0, 1e-12);
}

TEST(Reference, NaNPropagatesToItsRowOnly) {
  // A NaN key poisons the rows that may see it, and no other row.
  TwoByFive ex;
  ex.k.setDouble(4, std::nan(""));
  HostTensor q = tensor(ElementType::F32, {1, 1, 2, 1}, {1, 1});
  HostTensor offset = ints({1}, {3});
  AttentionOperands ops{&q, &ex.k, &ex.v};
  ops.qOffset = &offset;
  AttentionResult r = run(ops, {/*causal=*/true});
  EXPECT_FALSE(std::isnan(r.out.getDouble(0))); // position 3: key 4 hidden
  EXPECT_TRUE(std::isnan(r.out.getDouble(1)));  // position 4 sees key 4
}

/// Successive appends to one growing cache give the rows of the full
/// forward: chunks 3+2+3, 1+7 and 5+1+2, GQA 8/2, batch 2 where the second
/// sequence already holds 5 more tokens than the first (a different P per
/// batch in every call).
TEST(Reference, SuccessiveAppendsEqualTheFullForward) {
  const int64_t B = 2, Hq = 8, Hkv = 2, D = 4, Dv = 3, T = 8;
  const int64_t history[B] = {0, 5};
  const int64_t S = T + 5; // capacity: the longer sequence
  auto fill = [](HostTensor &t, double salt) {
    for (int64_t i = 0; i < t.numElements(); ++i)
      t.setDouble(i, std::sin(0.7 * static_cast<double>(i) + salt));
  };
  // The whole sequences: q for every position, k and v in a static cache.
  HostTensor qAll(ElementType::F32, {B, Hq, S, D});
  HostTensor k(ElementType::F32, {B, Hkv, S, D});
  HostTensor v(ElementType::F32, {B, Hkv, S, Dv});
  fill(qAll, 0.1);
  fill(k, 0.2);
  fill(v, 0.3);

  // Full forward: every position of each sequence at once.
  HostTensor zero = ints({B}, {0, 0});
  HostTensor fullLen = ints({B}, {history[0] + T, history[1] + T});
  AttentionOperands full{&qAll, &k, &v};
  full.qOffset = &zero;
  full.kvLen = &fullLen;
  AttentionResult expected = run(full, {/*causal=*/true});

  for (std::vector<int64_t> chunks :
       {std::vector<int64_t>{3, 2, 3}, std::vector<int64_t>{1, 7},
        std::vector<int64_t>{5, 1, 2}}) {
    int64_t done = 0;
    for (int64_t L : chunks) {
      HostTensor q(ElementType::F32, {B, Hq, L, D});
      HostTensor offset(ElementType::I32, {B}), len(ElementType::I32, {B});
      for (int64_t b = 0; b < B; ++b) {
        int64_t P = history[b] + done;
        offset.setInt(b, P);
        len.setInt(b, P + L);
        for (int64_t h = 0; h < Hq; ++h)
          for (int64_t i = 0; i < L; ++i)
            for (int64_t x = 0; x < D; ++x)
              q.setDouble(q.flatIndex({b, h, i, x}),
                          qAll.getDouble(qAll.flatIndex({b, h, P + i, x})));
      }
      AttentionOperands step{&q, &k, &v};
      step.qOffset = &offset;
      step.kvLen = &len;
      AttentionResult got = run(step, {/*causal=*/true});
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hq; ++h)
          for (int64_t i = 0; i < L; ++i) {
            int64_t p = history[b] + done + i;
            for (int64_t x = 0; x < Dv; ++x)
              EXPECT_NEAR(
                  got.out.getDouble(got.out.flatIndex({b, h, i, x})),
                  expected.out.getDouble(expected.out.flatIndex({b, h, p, x})),
                  1e-12)
                  << "batch " << b << " head " << h << " position " << p;
            EXPECT_NEAR(
                got.lse.getDouble(got.lse.flatIndex({b, h, i})),
                expected.lse.getDouble(expected.lse.flatIndex({b, h, p})),
                1e-12);
          }
      done += L;
    }
    EXPECT_EQ(done, T);
  }
}

TEST(Reference, RejectsBadRuntimeValues) {
  TwoByFive ex;
  AttentionOperands ops{&ex.q, &ex.k, &ex.v};
  HostTensor len = ints({1}, {6});
  ops.kvLen = &len;
  EXPECT_NE(errorOf(ops, {}).find("kv_len[0] = 6 is outside [0, S = 5]"),
            std::string::npos);

  AttentionOperands neg{&ex.q, &ex.k, &ex.v};
  HostTensor offset = ints({1}, {-2});
  neg.qOffset = &offset;
  EXPECT_NE(errorOf(neg, {true}).find("q_offset[0] = -2 is negative"),
            std::string::npos);

  AttentionOperands noPositions{&ex.q, &ex.k, &ex.v};
  EXPECT_NE(errorOf(noPositions, {true}).find("need query and key positions"),
            std::string::npos);

  HostTensor badV = tensor(ElementType::F32, {1, 1, 4, 1});
  AttentionOperands shapes{&ex.q, &ex.k, &badV};
  EXPECT_NE(errorOf(shapes, {}).find("value must have shape [B, Hkv, S, Dv]"),
            std::string::npos);

  HostTensor q3 = tensor(ElementType::F32, {1, 3, 2, 1});
  HostTensor k2 = tensor(ElementType::F32, {1, 2, 5, 1});
  HostTensor v2 = tensor(ElementType::F32, {1, 2, 5, 1});
  AttentionOperands gqa{&q3, &k2, &v2};
  EXPECT_NE(errorOf(gqa, {}).find("multiple of kv heads"), std::string::npos);
}

TEST(Reference, Append) {
  HostTensor cache =
      tensor(ElementType::F32, {2, 1, 4, 1}, {1, 2, 3, 4, /**/ 5, 6, 7, 8});
  HostTensor update =
      tensor(ElementType::F32, {2, 1, 2, 1}, {-1, -2, /**/ -3, -4});
  HostTensor pos = ints({2}, {1, 2});
  HostTensor out;
  ASSERT_TRUE(append(cache, update, pos, out).isOk());
  EXPECT_EQ(values(out), (std::vector<double>{1, -1, -2, 4, 5, 6, -3, -4}));

  HostTensor tooFar = ints({2}, {1, 3});
  Status s = append(cache, update, tooFar, out);
  EXPECT_NE(s.message().find("pos[1] = 3 writes rows [3, 5) outside the "
                             "cache capacity C = 4"),
            std::string::npos)
      << s.message();
}

TEST(Reference, MergeIdentityAndNaNFreedom) {
  // Two empty parts (lse = -inf, outputs garbage) merge to (0, -inf).
  HostTensor out = tensor(ElementType::F32, {2, 1, 1, 1, 2}, {7, 8, 9, 10});
  HostTensor lse = tensor(ElementType::F32, {2, 1, 1, 1}, {-kInf, -kInf});
  AttentionResult r;
  ASSERT_TRUE(merge(out, lse, r).isOk());
  EXPECT_EQ(values(r.out), (std::vector<double>{0, 0}));
  EXPECT_EQ(r.lse.getDouble(0), -kInf);
  // An empty part next to a real one changes nothing.
  lse.setDouble(1, 0.5);
  ASSERT_TRUE(merge(out, lse, r).isOk());
  EXPECT_EQ(values(r.out), (std::vector<double>{9, 10}));
  EXPECT_DOUBLE_EQ(r.lse.getDouble(0), 0.5);
}

TEST(Reference, MergeOfZeroPartsIsTheIdentity) {
  // No part at all (issue 14, defect 8: the reference gave lse = 0): every
  // row is (0, -inf), the documented identity the compiled paths give.
  HostTensor out(ElementType::F32, {0, 1, 2, 1, 3});
  HostTensor lse(ElementType::F32, {0, 1, 2, 1});
  AttentionResult r;
  ASSERT_TRUE(merge(out, lse, r).isOk());
  EXPECT_EQ(values(r.out), (std::vector<double>{0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(values(r.lse), (std::vector<double>{-kInf, -kInf}));
}

TEST(Reference, MergeOfKeyRangesEqualsTheWhole) {
  // The 2x5 example split into keys {0, 1, 2} and {3, 4}: the merged
  // states are the full ones (25 and 30, lse log 4 and log 5).
  TwoByFive ex;
  HostTensor offset = ints({1}, {3});
  AttentionOperands ops{&ex.q, &ex.k, &ex.v};
  ops.qOffset = &offset;
  AttentionResult full = run(ops, {/*causal=*/true});

  HostTensor outParts(ElementType::F32, {2, 1, 1, 2, 1});
  HostTensor lseParts(ElementType::F32, {2, 1, 1, 2});
  for (int p = 0; p < 2; ++p) {
    int64_t start = p == 0 ? 0 : 3, size = p == 0 ? 3 : 2;
    HostTensor k(ElementType::F32, {1, 1, size, 1}),
        v(ElementType::F32, {1, 1, size, 1});
    for (int64_t j = 0; j < size; ++j) {
      k.setDouble(j, ex.k.getDouble(start + j));
      v.setDouble(j, ex.v.getDouble(start + j));
    }
    HostTensor kOffset = ints({1}, {start});
    AttentionOperands part{&ex.q, &k, &v};
    part.qOffset = &offset;
    part.kOffset = &kOffset;
    AttentionResult r = run(part, {/*causal=*/true});
    for (int64_t i = 0; i < 2; ++i) {
      outParts.setDouble(p * 2 + i, r.out.getDouble(i));
      lseParts.setDouble(p * 2 + i, r.lse.getDouble(i));
    }
  }
  AttentionResult merged;
  ASSERT_TRUE(merge(outParts, lseParts, merged).isOk());
  EXPECT_NEAR(merged.out.getDouble(0), 25, 1e-5);
  EXPECT_NEAR(merged.out.getDouble(1), 30, 1e-5);
  EXPECT_NEAR(merged.lse.getDouble(0), full.lse.getDouble(0), 1e-6);
  EXPECT_NEAR(merged.lse.getDouble(1), full.lse.getDouble(1), 1e-6);
}

//===----------------------------------------------------------------------===//
// Paged KV: block-table validation and the gather to the logical layout
//===----------------------------------------------------------------------===//

namespace {

std::string validateMessage(const HostTensor &table, const HostTensor &kvLen,
                            int64_t numPages, int64_t pageSize) {
  Status s = validateBlockTable(table, kvLen, numPages, pageSize);
  EXPECT_TRUE(s.isError()) << "the block table was accepted";
  return s.isError() ? s.message() : "";
}

/// Distinct seeded values for a [B, Hkv, S, D] tensor.
HostTensor seeded(std::vector<int64_t> shape, uint64_t arg) {
  HostTensor t(ElementType::F32, std::move(shape));
  for (int64_t i = 0; i < t.numElements(); ++i)
    t.setDouble(i, seededValue(/*seed=*/7, arg, i));
  return t;
}

} // namespace

TEST(PagedKV, ValidBlockTablesAreAccepted) {
  // Sequence 1 shares page 0 with sequence 0 (a shared prefix): allowed.
  HostTensor table = ints({2, 3}, {2, 0, -1, 0, 1, 3});
  HostTensor kvLen = ints({2}, {5, 12});
  Status s = validateBlockTable(table, kvLen, /*numPages=*/4, /*pageSize=*/4);
  EXPECT_TRUE(s.isOk()) << s.message();
  // kv_len 0 with no pages at all.
  HostTensor empty = ints({1, 2}, {-1, -1});
  HostTensor zero = ints({1}, {0});
  s = validateBlockTable(empty, zero, 4, 4);
  EXPECT_TRUE(s.isOk()) << s.message();
}

TEST(PagedKV, BadBlockTablesNameBatchSlotAndValue) {
  HostTensor kvLen = ints({2}, {4, 4});
  EXPECT_EQ(validateMessage(ints({2, 2}, {0, -1, 1, 7}), kvLen, 4, 4),
            "block_table[1][1] = 7: page id out of range [0, 4) (batch 1)");
  EXPECT_EQ(validateMessage(ints({2, 2}, {-3, -1, 1, -1}), kvLen, 4, 4),
            "block_table[0][0] = -3: page id out of range [0, 4) (batch 0)");
  EXPECT_EQ(validateMessage(ints({2, 3}, {0, -1, 2, 1, -1, -1}), kvLen, 4, 4),
            "block_table[0][2] = 2 follows the -1 at slot 1: the -1 tail "
            "must be canonical (batch 0)");
  EXPECT_EQ(validateMessage(ints({2, 2}, {0, -1, 3, 3}), kvLen, 4, 4),
            "block_table[1][1] = 3: page 3 is already used at slot 0 of the "
            "same sequence (batch 1)");
  EXPECT_EQ(
      validateMessage(ints({2, 2}, {0, -1, 1, 2}), ints({2}, {5, 8}), 4, 4),
      "kv_len[0] = 5 does not fit the 1 page(s) of block_table[0] "
      "(page_size 4, at most 4 tokens) (batch 0)");
  EXPECT_EQ(
      validateMessage(ints({2, 2}, {0, -1, 1, 2}), ints({2}, {4, -1}), 4, 4),
      "kv_len[1] = -1 does not fit the 2 page(s) of block_table[1] "
      "(page_size 4, at most 8 tokens) (batch 1)");
  // Shapes and types.
  EXPECT_NE(validateMessage(ints({2}, {0, 1}), kvLen, 4, 4)
                .find("block_table must have shape [B, max_pages]"),
            std::string::npos);
  EXPECT_NE(
      validateMessage(ints({2, 2}, {0, -1, 1, -1}), ints({3}, {1, 1, 1}), 4, 4)
          .find("kv_len must have shape [B]"),
      std::string::npos);
  EXPECT_NE(validateMessage(tensor(ElementType::F32, {1, 1}, {0}),
                            ints({1}, {1}), 4, 4)
                .find("block_table must be an i32 or i64 tensor"),
            std::string::npos);
}

// The physical page order never changes results: for page sizes 1, 16 and
// 64, ragged kv_len and L = 1, 4 and 16 new queries at the end of each
// sequence, attention over the gathered pages of a randomly permuted cache
// is bitwise the attention over the contiguous cache.
TEST(PagedKV, PagePermutationsGiveTheContiguousResult) {
  const int64_t b = 3, hq = 4, hkv = 2, d = 8, maxTokens = 130;
  const std::vector<int64_t> lens = {130, 1, 67};
  std::mt19937 rng(1234);
  for (int64_t pageSize : {1, 16, 64}) {
    const int64_t maxPages = (maxTokens + pageSize - 1) / pageSize,
                  s = maxPages * pageSize;
    HostTensor k = seeded({b, hkv, s, d}, 1), v = seeded({b, hkv, s, d}, 2);
    // Zero the keys past kv_len, as the gather leaves them.
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t hi = 0; hi < hkv; ++hi)
        for (int64_t t = lens[bi]; t < s; ++t)
          for (int64_t x = 0; x < d; ++x) {
            k.setDouble(k.flatIndex({bi, hi, t, x}), 0);
            v.setDouble(v.flatIndex({bi, hi, t, x}), 0);
          }
    // Scatter the used logical pages over a shuffled pool with spare pages.
    std::vector<int64_t> used;
    for (int64_t bi = 0; bi < b; ++bi)
      used.push_back((lens[bi] + pageSize - 1) / pageSize);
    const int64_t numPages =
        std::accumulate(used.begin(), used.end(), int64_t{0}) + 3;
    std::vector<int64_t> pool(numPages);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    HostTensor table = ints({b, maxPages}, {});
    HostTensor kPages(ElementType::F32, {numPages, pageSize, hkv, d}),
        vPages(ElementType::F32, {numPages, pageSize, hkv, d});
    int64_t next = 0;
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t slot = 0; slot < maxPages; ++slot) {
        int64_t page = slot < used[bi] ? pool[next++] : -1;
        table.setInt(bi * maxPages + slot, page);
        if (page < 0)
          continue;
        for (int64_t r = 0; r < pageSize; ++r)
          for (int64_t hi = 0; hi < hkv; ++hi)
            for (int64_t x = 0; x < d; ++x) {
              int64_t t = slot * pageSize + r;
              kPages.setDouble(kPages.flatIndex({page, r, hi, x}),
                               k.getDouble(k.flatIndex({bi, hi, t, x})));
              vPages.setDouble(vPages.flatIndex({page, r, hi, x}),
                               v.getDouble(v.flatIndex({bi, hi, t, x})));
            }
      }
    HostTensor kvLen = ints({b}, lens);
    HostTensor kGathered, vGathered;
    ASSERT_TRUE(gatherPages(kPages, table, kvLen, kGathered).isOk());
    ASSERT_TRUE(gatherPages(vPages, table, kvLen, vGathered).isOk());
    ASSERT_EQ(kGathered.shapeString(), k.shapeString());
    EXPECT_EQ(std::memcmp(kGathered.data(), k.data(), k.byteSize()), 0)
        << "page size " << pageSize;
    EXPECT_EQ(std::memcmp(vGathered.data(), v.data(), v.byteSize()), 0)
        << "page size " << pageSize;

    for (int64_t l : {1, 4, 16}) {
      HostTensor q = seeded({b, hq, l, d}, 3);
      std::vector<int64_t> offsets;
      for (int64_t len : lens)
        offsets.push_back(std::max<int64_t>(len - l, 0));
      HostTensor qOffset = ints({b}, offsets);
      AttentionOperands contiguous{&q, &k, &v},
          paged{&q, &kGathered, &vGathered};
      contiguous.qOffset = paged.qOffset = &qOffset;
      contiguous.kvLen = paged.kvLen = &kvLen;
      AttentionResult expected = run(contiguous, {/*causal=*/true}),
                      actual = run(paged, {/*causal=*/true});
      EXPECT_EQ(values(actual.out), values(expected.out))
          << "page size " << pageSize << ", L = " << l;
      EXPECT_EQ(values(actual.lse), values(expected.lse))
          << "page size " << pageSize << ", L = " << l;
      // A gather that ignores the block table (identity page order) reads
      // other sequences' keys: the result must differ.
      if (pageSize == 16 && l == 4) {
        HostTensor identity = ints({b, maxPages}, {});
        int64_t page = 0;
        for (int64_t bi = 0; bi < b; ++bi)
          for (int64_t slot = 0; slot < maxPages; ++slot)
            identity.setInt(bi * maxPages + slot,
                            slot < used[bi] ? page++ : -1);
        HostTensor kWrong;
        ASSERT_TRUE(gatherPages(kPages, identity, kvLen, kWrong).isOk());
        AttentionOperands wrong = paged;
        wrong.key = &kWrong;
        EXPECT_NE(values(run(wrong, {true}).out), values(expected.out));
      }
    }
  }
}

// The paged append writes token pos[b] + t to its page and row and nothing
// else: gathered, the pages equal a plain append; every other row is
// untouched. Page sizes 1, 4 and 16, ragged positions, a permuted pool.
TEST(PagedKV, AppendPagedEqualsThePlainAppend) {
  const int64_t b = 2, h = 2, d = 4, l = 5;
  const std::vector<int64_t> pos = {3, 11};
  std::mt19937 rng(99);
  for (int64_t pageSize : {1, 4, 16}) {
    const int64_t maxPages = (11 + l + pageSize - 1) / pageSize,
                  numPages = 2 * maxPages + 1;
    std::vector<int64_t> pool(numPages);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    HostTensor table = ints({b, maxPages}, {});
    int64_t next = 0;
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t slot = 0; slot < maxPages; ++slot) {
        const bool used = slot * pageSize < pos[bi] + l;
        table.setInt(bi * maxPages + slot, used ? pool[next++] : -1);
      }
    HostTensor pages = seeded({numPages, pageSize, h, d}, 1);
    HostTensor update = seeded({b, h, l, d}, 2);
    HostTensor posT = ints({b}, pos), written;
    Status s = appendPaged(pages, update, posT, table, written);
    ASSERT_TRUE(s.isOk()) << s.message();

    // The same write into the gathered (plain) cache.
    HostTensor lens = ints({b}, {pos[0] + l, pos[1] + l});
    HostTensor plain, expected, actual;
    ASSERT_TRUE(gatherPages(pages, table, lens, plain).isOk());
    ASSERT_TRUE(append(plain, update, posT, expected).isOk());
    ASSERT_TRUE(gatherPages(written, table, lens, actual).isOk());
    EXPECT_EQ(std::memcmp(actual.data(), expected.data(), actual.byteSize()), 0)
        << "page size " << pageSize;
    // Rows no token was written to keep their values.
    int64_t changed = 0;
    for (int64_t i = 0; i < pages.numElements(); ++i)
      changed += pages.getDouble(i) != written.getDouble(i);
    EXPECT_EQ(changed, b * l * h * d) << "page size " << pageSize;
  }
}

TEST(PagedKV, BadPagedAppendsNameBatchSlotAndValue) {
  HostTensor pages = seeded({4, 4, 1, 2}, 1), update = seeded({2, 1, 2, 2}, 2);
  auto message = [&](std::vector<int64_t> table, std::vector<int64_t> pos) {
    HostTensor result;
    Status s =
        appendPaged(pages, update, ints({2}, pos), ints({2, 2}, table), result);
    EXPECT_TRUE(s.isError()) << "the paged append was accepted";
    return s.isError() ? s.message() : "";
  };
  EXPECT_EQ(message({0, 1, 2, -1}, {1, 3}),
            "pos[1] = 3 with L = 2 does not fit the 1 page(s) of "
            "block_table[1] (page_size 4, at most 4 tokens): token 4 falls in "
            "slot 1 (batch 1)");
  EXPECT_EQ(message({0, 1, 2, -1}, {-2, 0}),
            "pos[0] = -2 is negative (batch 0)");
  EXPECT_EQ(message({0, 1, 2, 4}, {0, 0}),
            "block_table[1][1] = 4: page id out of range [0, 4) (batch 1)");
  EXPECT_EQ(message({-1, 1, 2, 3}, {0, 0}),
            "block_table[0][1] = 1 follows the -1 at slot 0: the -1 tail "
            "must be canonical (batch 0)");
  // Page 0 shared by both sequences: reading it is fine, writing one row
  // from both is not.
  EXPECT_EQ(message({0, 1, 0, 2}, {2, 3}),
            "block_table[1][0] = 0: token 3 writes row 3 of page 0, which "
            "batch 0 also writes (batch 1)");
  HostTensor ok;
  Status s = appendPaged(pages, update, ints({2}, {4, 4}),
                         ints({2, 2}, {0, 1, 0, 2}), ok);
  EXPECT_TRUE(s.isOk()) << s.message();
}

// skip_padding (vLLM's slot -1): a token whose table entry is -1 writes
// nothing; every other rule still holds.
TEST(PagedKV, SkipPaddingSkipsTokensOnMinusOneEntries) {
  HostTensor pages = seeded({3, 4, 1, 2}, 1), update = seeded({4, 1, 1, 2}, 2);
  // Tokens 0 and 2 write slot 3 of page 0 and slot 1 of page 2; tokens 1
  // and 3 are padding.
  HostTensor table = ints({4, 1}, {0, -1, 2, -1});
  HostTensor written;
  Status s = appendPaged(pages, update, ints({4}, {3, 0, 1, 3}), table, written,
                         /*skipPadding=*/true);
  ASSERT_TRUE(s.isOk()) << s.message();
  // Exactly the rows of the two real tokens changed, to their update rows.
  for (int64_t page = 0; page < 3; ++page)
    for (int64_t row = 0; row < 4; ++row)
      for (int64_t x = 0; x < 2; ++x) {
        const int64_t at = (page * 4 + row) * 2 + x;
        double want = pages.getDouble(at);
        if (page == 0 && row == 3)
          want = update.getDouble(0 * 2 + x);
        if (page == 2 && row == 1)
          want = update.getDouble(2 * 2 + x);
        EXPECT_EQ(written.getDouble(at), want)
            << "page " << page << " row " << row;
      }
  // Without the flag the padding tokens are refused, as before.
  s = appendPaged(pages, update, ints({4}, {3, 0, 1, 3}), table, written);
  EXPECT_EQ(s.message(), "pos[1] = 0 with L = 1 does not fit the 0 page(s) "
                         "of block_table[1] (page_size 4, at most 0 tokens): "
                         "token 0 falls in slot 0 (batch 1)");
  auto message = [&](std::vector<int64_t> tbl, std::vector<int64_t> pos) {
    HostTensor result;
    Status st = appendPaged(pages, update, ints({4}, pos), ints({4, 1}, tbl),
                            result, /*skipPadding=*/true);
    EXPECT_TRUE(st.isError()) << "the padded append was accepted";
    return st.isError() ? st.message() : "";
  };
  EXPECT_EQ(message({0, -2, 2, -1}, {3, 0, 1, 3}),
            "block_table[1][0] = -2: page id out of range [0, 3) (batch 1)");
  EXPECT_EQ(message({0, -1, 2, -1}, {3, -2, 1, 3}),
            "pos[1] = -2 is negative (batch 1)");
  EXPECT_EQ(message({0, -1, 2, -1}, {3, 4, 1, 3}),
            "pos[1] = 4 with L = 1 does not fit the 1 page(s) of "
            "block_table[1] (page_size 4, at most 4 tokens): token 4 falls in "
            "slot 1 (batch 1)");
  EXPECT_EQ(message({0, -1, 0, -1}, {3, 3, 3, 3}),
            "block_table[2][0] = 0: token 3 writes row 3 of page 0, which "
            "batch 0 also writes (batch 2)");
}

// The checks of a paged cache read the pages in place (the CPU path's
// check-only run, every call): the table's errors, and the f32 range over
// the rows keys own only (not the rest of a last page, not unused pages),
// with the gathered caches' result.
TEST(Reference, PagedChecksReadThePagesInPlace) {
  // Pages [4, 2, 2, 8]: sequence 0 holds keys 0, 1 in page 3 and key 2 in
  // row 0 of page 1; its slot 2 is -1. Every unowned element is 1e38.
  HostTensor q =
      tensor(ElementType::F32, {1, 2, 1, 8}, std::vector<double>(16, -2e19));
  HostTensor k =
      tensor(ElementType::F32, {4, 2, 2, 8}, std::vector<double>(128, 1e38));
  HostTensor v =
      tensor(ElementType::F32, {4, 2, 2, 8}, std::vector<double>(128, 1e38));
  auto own = [&](int64_t page, int64_t row, double value) {
    for (int64_t i = 0; i < 16; ++i) {
      k.setDouble((page * 2 + row) * 16 + i, value);
      v.setDouble((page * 2 + row) * 16 + i, 1.0);
    }
  };
  own(3, 0, 1.0);
  own(3, 1, 1.0);
  own(1, 0, 1.0);
  k.setDouble((1 * 2 + 0) * 16 + 8 + 3, 2e19); // key 2, head 1
  HostTensor table = ints({1, 3}, {3, 1, -1});
  HostTensor len = ints({1}, {3});
  HostTensor qo = ints({1}, {2});
  AttentionOperands ops;
  ops.query = &q;
  ops.key = &k;
  ops.value = &v;
  ops.qOffset = &qo;
  ops.kvLen = &len;
  ops.blockTable = &table;
  AttentionResult r;
  Status s = attention(ops, {}, r, Compute::ChecksOnly);
  ASSERT_TRUE(s.isError());
  EXPECT_NE(s.message().find("scores may overflow f32: max|q| = 2e+19, "
                             "max|k| = 2e+19"),
            std::string::npos)
      << s.message();
  // The same check over the gathered caches.
  HostTensor kLogical, vLogical;
  ASSERT_TRUE(gatherPages(k, table, len, kLogical).isOk());
  ASSERT_TRUE(gatherPages(v, table, len, vLogical).isOk());
  AttentionOperands gathered = ops;
  gathered.key = &kLogical;
  gathered.value = &vLogical;
  gathered.blockTable = nullptr;
  Status g = attention(gathered, {}, r, Compute::ChecksOnly);
  EXPECT_EQ(g.message(), s.message());
  // Key 2 invalid: its row is not checked, and the rest is in range.
  HostTensor valid(ElementType::I1, {1, 6});
  for (int64_t j : {0, 1})
    valid.setInt(j, 1);
  ops.keyValid = &valid;
  s = attention(ops, {}, r, Compute::ChecksOnly);
  EXPECT_TRUE(s.isOk()) << s.message();
  // The table's own errors, and no values from pages.
  HostTensor bad = ints({1, 3}, {3, 4, -1});
  ops.blockTable = &bad;
  s = attention(ops, {}, r, Compute::ChecksOnly);
  EXPECT_EQ(s.message(),
            "block_table[0][1] = 4: page id out of range [0, 4) (batch 0)");
  ops.blockTable = &table;
  s = attention(ops, {}, r, Compute::Values);
  EXPECT_NE(s.message().find("gather the pages first"), std::string::npos)
      << s.message();
  ops.kvLen = nullptr;
  s = attention(ops, {}, r, Compute::ChecksOnly);
  EXPECT_EQ(s.message(), "block_table (paged K/V) needs kv_len");
}

// An FP8 cache's range check in place (codes and scales: the compiled
// paths' per-call validation) decides as the check over its dequantised
// copy, message for message: random codes of both formats (NaN and +Inf
// codes included), scales per tensor, per KV head and per row spanning
// 1e30..1e37 around the bound, plain and paged, with and without key
// validity flags, the latent form (V as K's first columns).
TEST(Reference, Fp8RangeCheckInPlaceAsOverTheDequantisedCopy) {
  std::mt19937_64 rng(29);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int64_t B = 2, Hkv = 2, S = 12, D = 8, pageSize = 4, pages = 7;
  int decided[2] = {0, 0};
  for (int trial = 0; trial < 240; ++trial) {
    const ElementType type =
        trial % 2 ? ElementType::F8E5M2 : ElementType::F8E4M3FN;
    const bool paged = trial % 4 >= 2, valid = trial % 8 >= 4;
    const int granularity = (trial / 8) % 3; // tensor, head, row
    // The latent form: V is K's first 5 of 8 columns (k_scale's codes).
    const bool latent = (trial / 24) % 2;
    const std::vector<int64_t> shape =
        paged ? std::vector<int64_t>{pages, pageSize, Hkv, D}
              : std::vector<int64_t>{B, Hkv, S, D};
    HostTensor k(type, shape), v(type, shape);
    for (HostTensor *t : {&k, &v})
      for (int64_t i = 0; i < t->numElements(); ++i)
        t->mutableData()[i] = static_cast<uint8_t>(uniform(0, 255));
    const std::vector<int64_t> rows(shape.begin(), shape.begin() + 3);
    const std::vector<int64_t> scaleShape =
        granularity == 0   ? std::vector<int64_t>{1}
        : granularity == 1 ? std::vector<int64_t>{Hkv}
                           : rows;
    HostTensor ks(ElementType::F32, scaleShape),
        vs(ElementType::F32, scaleShape);
    for (HostTensor *t : {&ks, &vs})
      for (int64_t i = 0; i < t->numElements(); ++i)
        t->setDouble(i, std::pow(10.0, 30 + 7 * uniform(0, 1000) / 1000.0));
    HostTensor q = tensor(ElementType::F32, {B, 4, 1, D},
                          std::vector<double>(B * 4 * D, 0.5));
    HostTensor len = ints({B}, {S, uniform(1, S)});
    HostTensor table = ints({B, 3}, {6, 2, 4, 0, 5, 1});
    HostTensor keyValid(ElementType::I1, {B, S});
    for (int64_t i = 0; i < keyValid.numElements(); ++i)
      keyValid.setInt(i, uniform(0, 3) != 0);
    const int headDim = paged ? 2 : 1;
    KvScaleGranularity g;
    ASSERT_TRUE(checkKvCacheScale(k, headDim, "k_scale", ks, g).isOk());
    HostTensor kd, vd;
    ASSERT_TRUE(dequantizeKvCache(k, headDim, "k_scale", ks, kd).isOk());
    ASSERT_TRUE(dequantizeKvCache(v, headDim, "v_scale", vs, vd).isOk());
    AttentionOperands inPlace;
    inPlace.query = &q;
    inPlace.key = &k;
    inPlace.value = &v;
    inPlace.keyScale = &ks;
    inPlace.valueScale = latent ? &ks : &vs;
    if (latent) {
      inPlace.value = nullptr;
      inPlace.latentValueDim = 5;
    }
    inPlace.kvLen = &len;
    if (paged)
      inPlace.blockTable = &table;
    if (valid)
      inPlace.keyValid = &keyValid;
    AttentionOperands copy = inPlace;
    copy.key = &kd;
    copy.value = latent ? nullptr : &vd;
    copy.keyScale = copy.valueScale = nullptr;
    AttentionResult r;
    Status a = attention(inPlace, {}, r, Compute::ChecksOnly);
    Status b = attention(copy, {}, r, Compute::ChecksOnly);
    ASSERT_EQ(a.isOk(), b.isOk())
        << "trial " << trial << ": " << a.message() << " / " << b.message();
    EXPECT_EQ(a.message(), b.message()) << "trial " << trial;
    ++decided[a.isOk()];
  }
  // Both outcomes occur (the scales straddle the bound).
  EXPECT_GT(decided[0], 20);
  EXPECT_GT(decided[1], 20);
  // Computing takes the dequantised caches only.
  HostTensor q =
      tensor(ElementType::F32, {1, 1, 1, 8}, std::vector<double>(8, 1.0));
  HostTensor k(ElementType::F8E4M3FN, {1, 1, 2, 8}),
      scale(ElementType::F32, {1});
  scale.setDouble(0, 1.0);
  AttentionOperands ops;
  ops.query = &q;
  ops.key = &k;
  ops.value = &k;
  ops.keyScale = ops.valueScale = &scale;
  AttentionResult r;
  Status s = attention(ops, {}, r, Compute::Values);
  EXPECT_NE(s.message().find("dequantise them first"), std::string::npos)
      << s.message();
}

// The range check reads f32, f16 and bf16 by their bit patterns (the CPU
// path runs it over the whole cache on every call): the largest finite
// magnitude counts, signs do not, non-finite values and slots past kv_len
// are ignored; views of caller memory are read in place.
TEST(Reference, RangeCheckOverBitPatterns) {
  for (ElementType type : {ElementType::F32, ElementType::BF16}) {
    // q = -2e19, k = 2e19 at key 1 (key 0 holds +inf, key 3 past kv_len
    // holds 1e38): the bound 2e19 * 2e19 * 8 * log2(e) * max(1, scale)
    // is above FLT_MAX.
    HostTensor q = tensor(type, {1, 1, 1, 8}, std::vector<double>(8, -2e19));
    HostTensor k = tensor(type, {1, 1, 4, 8});
    HostTensor v = tensor(type, {1, 1, 4, 8});
    k.setDouble(0, kInf);
    k.setDouble(8 + 5, 2e19);
    k.setDouble(24, 1e38);
    HostTensor len = ints({1}, {3});
    HostTensor qo = ints({1}, {2});
    AttentionOperands ops;
    ops.query = &q;
    ops.key = &k;
    ops.value = &v;
    ops.qOffset = &qo;
    ops.kvLen = &len;
    std::string error = errorOf(ops, {});
    EXPECT_NE(error.find("scores may overflow f32: max|q| = 2e+19, max|k| = "
                         "2e+19"),
              std::string::npos)
        << error;
    // 1e10 is within range, and read through a view of the same bytes.
    HostTensor small = tensor(type, {1, 1, 1, 8}, std::vector<double>(8, 1e10));
    HostTensor view;
    ASSERT_TRUE(
        HostTensor::view(type, small.shape(), small.data(), view).isOk());
    EXPECT_TRUE(view.isView());
    EXPECT_EQ(view.data(), small.data());
    ops.query = &view;
    k.setDouble(8 + 5, 1e10);
    AttentionResult r;
    Status s = attention(ops, {}, r);
    EXPECT_TRUE(s.isOk()) << s.message();
  }
  HostTensor none;
  Status s = HostTensor::view(ElementType::F32, {2}, nullptr, none);
  EXPECT_EQ(s.message(), "a view of a 2xf32 tensor over a null pointer");
}

// A view is read-only memory: writing a view (or a copy of one, which shares
// its memory) through any of the writers gives the written tensor its own
// bytes first; the memory it viewed, and the other copies, are unchanged.
TEST(HostTensorView, WritesNeverReachTheViewedMemory) {
  const std::vector<float> caller = {1, 2, 3, 4};
  const auto *bytes = reinterpret_cast<const uint8_t *>(caller.data());
  auto viewOf = [&] {
    HostTensor v;
    EXPECT_TRUE(HostTensor::view(ElementType::F32, {4}, bytes, v).isOk());
    return v;
  };
  HostTensor a = viewOf();
  HostTensor copy = a; // Shares the caller's memory.
  EXPECT_EQ(copy.data(), bytes);
  a.setDouble(1, 20);
  EXPECT_FALSE(a.isView());
  EXPECT_NE(a.data(), bytes);
  EXPECT_EQ(a.getDouble(0), 1);
  EXPECT_EQ(a.getDouble(1), 20);
  EXPECT_EQ(copy.getDouble(1), 2);
  EXPECT_TRUE(copy.isView());

  HostTensor b = viewOf();
  b.setInt(2, 30);
  HostTensor c = viewOf();
  c.mutableData()[12] = 0; // The low byte of 4.0f: still 4.
  std::memset(c.mutableData(), 0, 4);
  EXPECT_EQ(b.getDouble(2), 30);
  EXPECT_EQ(c.getDouble(0), 0);
  EXPECT_EQ(caller, (std::vector<float>{1, 2, 3, 4}));

  // An empty view stays writable (nothing to write) and owns nothing.
  HostTensor empty;
  ASSERT_TRUE(HostTensor::view(ElementType::F32, {0}, bytes, empty).isOk());
  (void)empty.mutableData();
  EXPECT_EQ(empty.byteSize(), 0u);
}

// A paged cascade (prefix_pages + prefix_len, block_table) is the cascade
// of the gathered caches: the prefix's 21 keys in 3 pages of 8 (the last
// partly used), the suffixes of 5 and 12 keys in 1 and 2 pages, all in one
// pool of permuted pages whose unowned slots hold NaN. Errors of the
// prefix's table name prefix_pages and prefix_len.
TEST(PagedKV, CascadeOverPagesEqualsTheContiguousCascade) {
  const int64_t hq = 4, hkv = 2, d = 4, ps = 8, p = 21, s = 12;
  std::mt19937 rng(35);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  auto random = [&](std::vector<int64_t> shape) {
    HostTensor t(ElementType::F32, std::move(shape));
    for (int64_t i = 0; i < t.numElements(); ++i)
      t.setDouble(i, uniform(rng));
    return t;
  };
  HostTensor q = random({1, hq, 4, d});
  HostTensor pk = random({1, hkv, p, d}), pv = random({1, hkv, p, d});
  HostTensor k = random({2, hkv, s, d}), v = random({2, hkv, s, d});
  HostTensor qStart = ints({3}, {0, 1, 4}), qOffset = ints({2}, {4, 9}),
             kvLen = ints({2}, {5, 12});
  // The pool: NaN wherever no key lives.
  const int64_t pages = 8;
  HostTensor kPool(ElementType::F32, {pages, ps, hkv, d}),
      vPool(ElementType::F32, {pages, ps, hkv, d});
  for (int64_t i = 0; i < kPool.numElements(); ++i) {
    kPool.setDouble(i, std::nan(""));
    vPool.setDouble(i, std::nan(""));
  }
  // Key j of batch b of `from` into row j % ps of page `page`.
  auto place = [&](const HostTensor &from, int64_t b, int64_t j,
                   HostTensor &pool, int64_t page) {
    for (int64_t g = 0; g < hkv; ++g)
      for (int64_t x = 0; x < d; ++x)
        pool.setDouble(pool.flatIndex({page, j % ps, g, x}),
                       from.getDouble(from.flatIndex({b, g, j, x})));
  };
  HostTensor prefixPages = ints({4}, {6, 2, 5, -1}), prefixLen = ints({1}, {p});
  HostTensor table = ints({2, 2}, {0, -1, 7, 3});
  for (int64_t j = 0; j < p; ++j) {
    place(pk, 0, j, kPool, prefixPages.getInt(j / ps));
    place(pv, 0, j, vPool, prefixPages.getInt(j / ps));
  }
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t j = 0; j < kvLen.getInt(b); ++j) {
      place(k, b, j, kPool, table.getInt(b * 2 + j / ps));
      place(v, b, j, vPool, table.getInt(b * 2 + j / ps));
    }
  CascadeOperands plain;
  plain.query = &q;
  plain.prefixKey = &pk;
  plain.prefixValue = &pv;
  plain.key = &k;
  plain.value = &v;
  plain.qStart = &qStart;
  plain.qOffset = &qOffset;
  plain.kvLen = &kvLen;
  AttentionAttributes attrs;
  attrs.causal = true;
  AttentionResult want, got;
  ASSERT_TRUE(cascade(plain, attrs, want).isOk());
  CascadeOperands paged = plain;
  paged.prefixKey = &kPool;
  paged.prefixValue = &vPool;
  paged.key = &kPool;
  paged.value = &vPool;
  paged.prefixPages = &prefixPages;
  paged.prefixLen = &prefixLen;
  paged.blockTable = &table;
  Status status = cascade(paged, attrs, got);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(values(got.out), values(want.out));
  EXPECT_EQ(values(got.lse), values(want.lse));
  for (double x : values(got.out))
    EXPECT_FALSE(std::isnan(x));
  // Each level alone.
  for (bool prefixPaged : {true, false}) {
    CascadeOperands one = plain;
    if (prefixPaged) {
      one.prefixKey = &kPool;
      one.prefixValue = &vPool;
      one.prefixPages = &prefixPages;
      one.prefixLen = &prefixLen;
    } else {
      one.key = &kPool;
      one.value = &vPool;
      one.blockTable = &table;
    }
    AttentionResult r;
    ASSERT_TRUE(cascade(one, attrs, r).isOk());
    EXPECT_EQ(values(r.out), values(want.out));
  }
  // The prefix's table under its own names.
  HostTensor tooLong = ints({1}, {25});
  paged.prefixLen = &tooLong;
  status = cascade(paged, attrs, got);
  ASSERT_TRUE(status.isError());
  EXPECT_EQ(status.message(), "prefix_len[0] = 25 does not fit the 3 page(s) "
                              "of prefix_pages (page_size 8, at most 24 "
                              "tokens)");
  HostTensor twice = ints({4}, {6, 2, 6, -1});
  paged.prefixLen = &prefixLen;
  paged.prefixPages = &twice;
  status = cascade(paged, attrs, got);
  ASSERT_TRUE(status.isError());
  EXPECT_EQ(status.message(), "prefix_pages[2] = 6: page 6 is already used "
                              "at slot 0 of the same sequence");
  paged.prefixPages = &prefixPages;
  paged.prefixLen = nullptr;
  status = cascade(paged, attrs, got);
  ASSERT_TRUE(status.isError());
  EXPECT_EQ(status.message(),
            "cascade: prefix_pages and prefix_len go together");
}

namespace {

/// The definition: the largest bit pattern below `inf` of the elements,
/// sign cleared, one at a time.
uint32_t naiveBitsMax(const uint8_t *p, int64_t n, int width, uint32_t inf) {
  const uint32_t signMask = width == 4   ? 0x7fffffffu
                            : width == 2 ? 0x7fffu
                                         : 0x7fu;
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, p + i * width, width);
    bits &= signMask;
    if (bits < inf)
      m = std::max(m, bits);
  }
  return m;
}

} // namespace

// The range check's scan (the host's AVX2 loop where it has one, 128
// elements a step): every element counts wherever it falls — in a vector
// lane, a step's fourth vector, the scalar tail — at any alignment, and
// no NaN or infinity (either sign) does.
TEST(MagnitudeScan, EveryLaneAndTheTailCountNonFiniteValuesDoNot) {
  std::mt19937 rng(31);
  struct Format {
    int width;
    uint32_t inf;
  };
  // f32, bf16, f16, e4m3fn (0x7f is its NaN), e5m2 (0x7c its +Inf).
  for (Format f : {Format{4, 0x7f800000u}, Format{2, 0x7f80u},
                   Format{2, 0x7c00u}, Format{1, 0x7fu}, Format{1, 0x7cu}}) {
    const uint32_t signBit = 1u << (8 * f.width - 1);
    for (int64_t n : {0, 1, 7, 31, 32, 127, 128, 129, 300, 1031}) {
      for (int offset : {0, 1, 3}) {
        std::vector<uint8_t> buffer(offset + n * f.width + 1);
        uint8_t *p = buffer.data() + offset;
        auto put = [&](int64_t i, uint32_t bits) {
          std::memcpy(p + i * f.width, &bits, f.width);
        };
        // Small finite values of either sign, NaNs and infinities.
        for (int64_t i = 0; i < n; ++i) {
          uint32_t bits = rng() % (f.inf / 4);
          if (rng() % 8 == 0)
            bits = f.inf + rng() % (signBit - f.inf); // NaN or Inf
          put(i, bits | (rng() % 2 ? signBit : 0));
        }
        ASSERT_EQ(finiteMagnitudeBitsMax(p, n, f.width, f.inf),
                  naiveBitsMax(p, n, f.width, f.inf))
            << "width " << f.width << ", n " << n << ", offset " << offset;
        // The largest finite value, planted at each position in turn,
        // negative at odd ones; a NaN is never taken for it.
        const uint32_t largest = f.inf - 1;
        for (int64_t i = 0; i < n; ++i) {
          uint32_t saved = 0;
          std::memcpy(&saved, p + i * f.width, f.width);
          put(i, largest | (i % 2 ? signBit : 0));
          ASSERT_EQ(finiteMagnitudeBitsMax(p, n, f.width, f.inf), largest)
              << "width " << f.width << ", n " << n << ", at " << i;
          put(i, saved);
        }
      }
    }
  }
}
