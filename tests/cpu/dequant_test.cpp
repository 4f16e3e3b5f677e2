// Dequantization of 8-bit KV caches through reference::decode, on a cache small enough that the
// result is known exactly: one key, so every query's softmax weight is exactly 1, out is the
// dequantized value row and lse is the (one) logit. Every 8-bit code appears as a value and as a
// key entry; expected values come from the format definitions, written out here by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "reference/reference.hpp"
#include "support/host_tensor.hpp"

namespace hopattn::testing {
namespace {

constexpr int kKVHeads = 2, kGroup = 8, kQHeads = kKVHeads * kGroup, kQLen = 16, kDim = 256;

// OCP e4m3fn: bias 7, subnormals m * 2^-9, 0x7f / 0xff are NaN.
double e4m3_value(uint8_t code) {
  const int e = (code >> 3) & 0xf, m = code & 7;
  const double mag = e == 0 ? m * std::ldexp(1.0, -9) : (1 + m / 8.0) * std::ldexp(1.0, e - 7);
  return code & 0x80 ? -mag : mag;
}

// OCP e5m2: bias 15, subnormals m * 2^-16, exponent 31 is inf / NaN.
double e5m2_value(uint8_t code) {
  const int e = (code >> 2) & 0x1f, m = code & 3;
  const double mag = e == 0 ? m * std::ldexp(1.0, -16) : (1 + m / 4.0) * std::ldexp(1.0, e - 15);
  return code & 0x80 ? -mag : mag;
}

// The cache byte at feature d: the code d itself, except codes that are not finite numbers of
// the format (or int8's -128, outside the symmetric range), which become 0.
uint8_t code_at(DType dtype, int d) {
  const uint8_t c = static_cast<uint8_t>(d);
  switch (dtype) {
    case DType::kFP8E4M3:
      return (c & 0x7f) == 0x7f ? 0 : c;
    case DType::kFP8E5M2:
      return ((c >> 2) & 0x1f) == 0x1f ? 0 : c;
    default:
      return c == 0x80 ? 0 : c;
  }
}

double code_value(DType dtype, uint8_t code) {
  switch (dtype) {
    case DType::kFP8E4M3:
      return e4m3_value(code);
    case DType::kFP8E5M2:
      return e5m2_value(code);
    default:
      return static_cast<int8_t>(code);
  }
}

struct Dequantized {
  std::vector<double> out;  // [q_len][Hq][D]
  std::vector<double> lse;  // [q_len][Hq]
};

// Query (i, h) of KV head hk = h / 8 is one-hot at feature hk * 128 + i * 8 + h % 8, so the 256
// queries read every key entry once; softmax scale 1, causal off (one key, 16 queries).
Dequantized decode_one_key(DType dtype, const float k_scale[2], const float v_scale[2],
                           bool per_head) {
  HostTensor k(dtype, {1, 1, kKVHeads, kDim}), v(dtype, {1, 1, kKVHeads, kDim});
  for (int h = 0; h < kKVHeads; ++h) {
    for (int d = 0; d < kDim; ++d) {
      static_cast<uint8_t*>(k.data())[h * kDim + d] = code_at(dtype, d);
      static_cast<uint8_t*>(v.data())[h * kDim + d] = code_at(dtype, d);
    }
  }
  HostTensor q(DType::kFP32, {1, kQLen, kQHeads, kDim});
  for (int64_t i = 0; i < q.numel(); ++i) q.set(i, 0.0);
  for (int i = 0; i < kQLen; ++i) {
    for (int h = 0; h < kQHeads; ++h) {
      const int d = (h / kGroup) * 128 + i * kGroup + h % kGroup;
      q.set((int64_t(i) * kQHeads + h) * kDim + d, 1.0);
    }
  }
  HostTensor table = int_tensor({0}, {1, 1}), lens = int_tensor({1});
  HostTensor ks(DType::kFP32, {kKVHeads}), vs(DType::kFP32, {kKVHeads});
  HostTensor out(DType::kFP32, {1, kQLen, kQHeads, kDim}), lse(DType::kFP32, {1, kQLen, kQHeads});
  out.fill_bytes(0xff);
  lse.fill_bytes(0xff);

  DecodeArgs args;
  args.q = q;
  args.k_cache = k;
  args.v_cache = v;
  args.pages.block_table = table;
  args.pages.kv_lens = lens;
  if (per_head) {
    for (int h = 0; h < kKVHeads; ++h) {
      ks.set(h, k_scale[h]);
      vs.set(h, v_scale[h]);
    }
    args.k_scale.per_head = ks;
    args.v_scale.per_head = vs;
  } else {
    args.k_scale.value = k_scale[0];
    args.v_scale.value = v_scale[0];
  }
  args.out = out;
  args.lse = lse;
  DecodeOptions opts;
  opts.causal = false;
  opts.scale = 1.f;
  reference::decode(args, opts);

  Dequantized r;
  r.out = out.to_double();
  r.lse = lse.to_double();
  return r;
}

void check_dtype(DType dtype, bool per_head) {
  SCOPED_TRACE(::testing::Message() << dtype << (per_head ? " per-head" : " per-tensor"));
  const float k_scale[2] = {0.25f, per_head ? 3.0f : 0.25f};
  const float v_scale[2] = {0.75f, per_head ? 0.125f : 0.75f};
  const Dequantized r = decode_one_key(dtype, k_scale, v_scale, per_head);
  for (int i = 0; i < kQLen; ++i) {
    for (int h = 0; h < kQHeads; ++h) {
      const int hk = h / kGroup;
      for (int d = 0; d < kDim; ++d) {
        // Exact in fp32: values have at most 7 significant bits, scales at most 2.
        const double want = code_value(dtype, code_at(dtype, d)) * v_scale[hk];
        ASSERT_EQ(r.out[(size_t(i) * kQHeads + h) * kDim + d], want)
            << "value code 0x" << std::hex << d << std::dec << " query " << i << " head " << h;
      }
      const int d = hk * 128 + i * kGroup + h % kGroup;
      const double want = code_value(dtype, code_at(dtype, d)) * k_scale[hk];
      ASSERT_EQ(r.lse[size_t(i) * kQHeads + h], want)
          << "key code 0x" << std::hex << d << std::dec << " query " << i << " head " << h;
    }
  }
}

// The value row of query 0, head 0 (KV head 0) at feature `code`, divided by its scale.
double value_of(const Dequantized& r, int code, double v_scale) { return r.out[code] / v_scale; }

TEST(DequantReference, E4M3EveryCode) {
  check_dtype(DType::kFP8E4M3, false);
  check_dtype(DType::kFP8E4M3, true);
}

TEST(DequantReference, E5M2EveryCode) {
  check_dtype(DType::kFP8E5M2, false);
  check_dtype(DType::kFP8E5M2, true);
}

TEST(DequantReference, Int8EveryValue) {
  check_dtype(DType::kInt8, false);
  check_dtype(DType::kInt8, true);
}

TEST(DequantReference, TabulatedValues) {
  const float ks[2] = {1.f, 1.f}, vs[2] = {0.5f, 0.5f};
  const Dequantized e4m3 = decode_one_key(DType::kFP8E4M3, ks, vs, false);
  EXPECT_EQ(value_of(e4m3, 0x38, 0.5), 1.0);
  EXPECT_EQ(value_of(e4m3, 0x7e, 0.5), 448.0);
  EXPECT_EQ(value_of(e4m3, 0x01, 0.5), 0.001953125);  // 2^-9, smallest subnormal
  EXPECT_EQ(value_of(e4m3, 0x08, 0.5), 0.015625);     // 2^-6, smallest normal
  EXPECT_EQ(value_of(e4m3, 0xb8, 0.5), -1.0);
  EXPECT_EQ(value_of(e4m3, 0xfe, 0.5), -448.0);
  const Dequantized e5m2 = decode_one_key(DType::kFP8E5M2, ks, vs, false);
  EXPECT_EQ(value_of(e5m2, 0x3c, 0.5), 1.0);
  EXPECT_EQ(value_of(e5m2, 0x7b, 0.5), 57344.0);
  EXPECT_EQ(value_of(e5m2, 0x01, 0.5), 1.52587890625e-05);  // 2^-16
  EXPECT_EQ(value_of(e5m2, 0x04, 0.5), 6.103515625e-05);    // 2^-14
  EXPECT_EQ(value_of(e5m2, 0xc0, 0.5), -2.0);
  const Dequantized i8 = decode_one_key(DType::kInt8, ks, vs, false);
  EXPECT_EQ(value_of(i8, 0x7f, 0.5), 127.0);
  EXPECT_EQ(value_of(i8, 0x81, 0.5), -127.0);
  EXPECT_EQ(value_of(i8, 0xff, 0.5), -1.0);
  EXPECT_EQ(value_of(i8, 0x05, 0.5), 5.0);
}

}  // namespace
}  // namespace hopattn::testing
