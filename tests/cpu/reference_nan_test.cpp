// NaN propagation in the references of fwd, bwd, decode and mla (DESIGN.md): NaN in q, in a
// visible key or value, or in a per-head KV scale reaches exactly the rows that read it (out and
// lse NaN, as torch SDPA gives), and is never reported as an empty row (out 0, lse -inf). Masked
// keys and slots past kv_len stay out of the result. The naive oracles agree on every case.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "naive_decode.hpp"
#include "naive_fwd_bwd.hpp"
#include "reference/reference.hpp"
#include "support/host_tensor.hpp"

namespace hopattn::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr DType kFP32 = DType::kFP32;

// Values in [-1, 1) of both signs, so that an infinite scale gives NaN logits (inf - inf).
HostTensor random_tensor(std::vector<int64_t> shape, uint64_t seed) {
  HostTensor t(kFP32, std::move(shape));
  std::mt19937_64 rng(seed);
  t.fill_uniform(rng, -1.0, 1.0);
  return t;
}

std::string nan_pattern(const std::vector<double>& x) {
  std::string s;
  for (double v : x) s += std::isnan(v) ? 'N' : std::isinf(v) ? 'I' : '.';
  return s;
}

// got and want NaN in the same places, and close where finite.
::testing::AssertionResult same_values(const std::vector<double>& got,
                                       const std::vector<double>& want, const char* what) {
  if (nan_pattern(got) != nan_pattern(want)) {
    return ::testing::AssertionFailure()
           << what << ": NaN/inf pattern " << nan_pattern(got) << ", want " << nan_pattern(want);
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isfinite(want[i]) && std::fabs(got[i] - want[i]) > 1e-5 * (1 + std::fabs(want[i]))) {
      return ::testing::AssertionFailure()
             << what << "[" << i << "] = " << got[i] << ", want " << want[i];
    }
    if (std::isinf(want[i]) && got[i] != want[i]) {
      return ::testing::AssertionFailure()
             << what << "[" << i << "] = " << got[i] << ", want " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// ------------------------------------------------------------------------------------ fwd, bwd

// Dense B = 1: q [1, 2, hq, 4], k/v [1, 3, hkv, 4]; causal, so query 0 sees keys 0..1 and
// query 1 sees keys 0..2 (bottom-right alignment).
struct Dense {
  int64_t hq, hkv;
  HostTensor q, k, v, out, lse, dout, dq, dk, dv;
  AttentionOptions opts;
  Dense(int64_t hq_, int64_t hkv_)
      : hq(hq_),
        hkv(hkv_),
        q(random_tensor({1, 2, hq_, 4}, 1)),
        k(random_tensor({1, 3, hkv_, 4}, 2)),
        v(random_tensor({1, 3, hkv_, 4}, 3)),
        out(kFP32, {1, 2, hq_, 4}),
        lse(kFP32, {1, 2, hq_}),
        dout(random_tensor({1, 2, hq_, 4}, 4)),
        dq(kFP32, {1, 2, hq_, 4}),
        dk(kFP32, {1, 3, hkv_, 4}),
        dv(kFP32, {1, 3, hkv_, 4}) {
    opts.causal = true;
  }
  FwdArgs fwd() const {
    FwdArgs a;
    a.q = q, a.k = k, a.v = v, a.out = out, a.lse = lse;
    return a;
  }
  BwdArgs bwd() const {
    BwdArgs b;
    b.fwd = fwd();
    b.dout = dout, b.dq = dq, b.dk = dk, b.dv = dv;
    return b;
  }
  textbook::Config config() const {
    textbook::Config c;
    c.hq = hq, c.hkv = hkv, c.dqk = 4, c.dv = 4, c.scale = 0.5, c.causal = true;
    return c;
  }
  textbook::Request request() const {
    return {2, 3, q.to_double(), k.to_double(), v.to_double(), dout.to_double()};
  }
  void expect_textbook_forward_agrees() const {
    const textbook::Forward want = textbook::forward(config(), request(), {});
    EXPECT_TRUE(same_values(out.to_double(), want.out, "out"));
    EXPECT_TRUE(same_values(lse.to_double(), want.lse, "lse"));
  }
};

TEST(ReferenceNaN, FwdNaNInQueryRowGivesNaNRowOnly) {
  Dense p(2, 1);
  p.q.set(0 * 8 + 0 * 4 + 2, kNaN);  // query 0, head 0
  reference::attention_fwd(p.fwd(), p.opts);
  EXPECT_EQ(nan_pattern(p.lse.to_double()), "N...");
  EXPECT_EQ(nan_pattern(p.out.to_double()), "NNNN............");
  p.expect_textbook_forward_agrees();
}

TEST(ReferenceNaN, FwdNaNKeyReachesOnlyTheQueriesThatSeeIt) {
  Dense p(2, 1);
  p.k.set(2 * 4 + 1, kNaN);  // key 2: masked for query 0 (causal), visible to query 1
  reference::attention_fwd(p.fwd(), p.opts);
  EXPECT_EQ(nan_pattern(p.lse.to_double()), "..NN");
  p.expect_textbook_forward_agrees();
}

TEST(ReferenceNaN, FwdAllKeysNaNForOneKvHead) {
  Dense p(2, 2);
  for (int64_t j = 0; j < 3; ++j) {
    for (int64_t d = 0; d < 4; ++d) p.k.set((j * 2 + 1) * 4 + d, kNaN);  // kv head 1
  }
  reference::attention_fwd(p.fwd(), p.opts);
  EXPECT_EQ(nan_pattern(p.lse.to_double()), ".N.N");
  p.expect_textbook_forward_agrees();
}

TEST(ReferenceNaN, FwdNaNValueOfAVisibleKeyReachesOut) {
  Dense p(1, 1);
  p.v.set(2 * 4 + 3, kNaN);  // value of key 2, feature 3: only query 1 sees it
  reference::attention_fwd(p.fwd(), p.opts);
  EXPECT_EQ(nan_pattern(p.lse.to_double()), "..");
  EXPECT_EQ(nan_pattern(p.out.to_double()), ".......N");
  p.expect_textbook_forward_agrees();
}

TEST(ReferenceNaN, FwdRowWithoutKeysIsStillEmpty) {
  Dense p(1, 1);
  FwdArgs a = p.fwd();
  const HostTensor no_keys(kFP32, {1, 0, 1, 4});
  a.k = no_keys;
  a.v = no_keys;
  reference::attention_fwd(a, p.opts);
  EXPECT_EQ(p.lse.to_double(), std::vector<double>(2, -kInf));
  EXPECT_EQ(p.out.to_double(), std::vector<double>(8, 0.0));
}

TEST(ReferenceNaN, FwdNaNOutsideEveryWindowStaysOut) {
  Dense p(1, 1);
  p.opts.causal = false;
  p.opts.window = {0, 0};  // query i sees key i + 1 only
  p.k.set(0, kNaN);
  p.v.set(0, kNaN);
  reference::attention_fwd(p.fwd(), p.opts);
  EXPECT_EQ(nan_pattern(p.out.to_double()), "........");
  EXPECT_EQ(nan_pattern(p.lse.to_double()), "..");
}

TEST(ReferenceNaN, BwdNaNQueryRowGivesNaNGradientsNotZeros) {
  Dense p(1, 1);
  p.q.set(1, kNaN);                           // query 0 (sees keys 0..1)
  reference::attention_fwd(p.fwd(), p.opts);  // the backward reads the out and lse it saved
  const BwdArgs b = p.bwd();
  reference::attention_bwd(b, p.opts);
  const textbook::Backward want = textbook::backward(p.config(), p.request(), {});
  EXPECT_EQ(nan_pattern(p.dq.to_double()), "NNNN....");
  EXPECT_EQ(nan_pattern(p.dk.to_double()), "NNNNNNNN....") << "key 2 is masked for query 0";
  EXPECT_EQ(nan_pattern(p.dv.to_double()), "NNNNNNNN....");
  EXPECT_TRUE(same_values(p.dq.to_double(), want.dq, "dq"));
  EXPECT_TRUE(same_values(p.dk.to_double(), want.dk, "dk"));
  EXPECT_TRUE(same_values(p.dv.to_double(), want.dv, "dv"));
}

// ------------------------------------------------------------------------------------ decode

// q [1, 1, 2, 4] against kv_len 6 in two NHD pages of 4 slots (2 kv heads); slots 6, 7 are past
// kv_len and hold NaN.
struct Decode {
  HostTensor q = random_tensor({1, 1, 2, 4}, 5);
  HostTensor k = random_tensor({2, 4, 2, 4}, 6);
  HostTensor v = random_tensor({2, 4, 2, 4}, 7);
  HostTensor out{kFP32, {1, 1, 2, 4}}, lse{kFP32, {1, 1, 2}};
  HostTensor table = int_tensor({0, 1}, {1, 2});
  HostTensor kv_lens = int_tensor({6});
  HostTensor k_scale{kFP32, {2}}, v_scale{kFP32, {2}};
  DecodeOptions opts;
  Decode() {
    for (int64_t i = (4 + 2) * 8; i < (4 + 4) * 8; ++i) {
      k.set(i, kNaN);  // page 1, slots 2..3: past kv_len
      v.set(i, kNaN);
    }
    k_scale.set(0, 1.0), k_scale.set(1, 1.0), v_scale.set(0, 1.0), v_scale.set(1, 1.0);
  }
  DecodeArgs args() const {
    DecodeArgs a;
    a.q = q, a.k_cache = k, a.v_cache = v, a.out = out, a.lse = lse;
    a.pages.block_table = table;
    a.pages.kv_lens = kv_lens;
    a.k_scale.per_head = k_scale;
    a.v_scale.per_head = v_scale;
    return a;
  }
  // The same problem for naive::decode (dequantized keys in logical order).
  naive::DecodeProblem naive_problem() const {
    naive::DecodeProblem p;
    p.batch = 1, p.q_len = 1, p.q_heads = 2, p.kv_heads = 2, p.head_dim = 4;
    p.kv_lens = {6};
    p.q = q.to_double();
    p.causal = opts.causal;
    p.window_left = opts.window.left;
    p.scale = opts.scale ? *opts.scale : 0.5;
    p.k.assign(1, std::vector<std::vector<std::vector<double>>>(2));
    p.v = p.k;
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t t = 0; t < 6; ++t) {
        std::vector<double> kr(4), vr(4);
        for (int64_t d = 0; d < 4; ++d) {
          const int64_t off = ((t / 4) * 4 + t % 4) * 8 + h * 4 + d;
          kr[d] = k.get(off) * k_scale.get(h);
          vr[d] = v.get(off) * v_scale.get(h);
        }
        p.k[0][h].push_back(kr);
        p.v[0][h].push_back(vr);
      }
    }
    return p;
  }
  void expect_naive_agrees() const {
    std::vector<double> want_out, want_lse;
    naive::decode(naive_problem(), want_out, want_lse);
    EXPECT_TRUE(same_values(out.to_double(), want_out, "out"));
    EXPECT_TRUE(same_values(lse.to_double(), want_lse, "lse"));
  }
};

TEST(ReferenceNaN, DecodeNaNQueryHead) {
  Decode p;
  p.q.set(4 + 2, kNaN);  // head 1
  reference::decode(p.args(), p.opts);
  EXPECT_EQ(nan_pattern(p.lse.to_double()), ".N");
  EXPECT_EQ(nan_pattern(p.out.to_double()), "....NNNN");
  p.expect_naive_agrees();
}

TEST(ReferenceNaN, DecodeNaNOrInfinitePerHeadKeyScale) {
  for (double bad : {kNaN, kInf}) {
    Decode p;
    p.k_scale.set(0, bad);
    reference::decode(p.args(), p.opts);
    EXPECT_EQ(nan_pattern(p.lse.to_double()), "N.") << "k_scale " << bad;
    EXPECT_EQ(nan_pattern(p.out.to_double()), "NNNN....") << "k_scale " << bad;
    p.expect_naive_agrees();
  }
}

TEST(ReferenceNaN, DecodeNaNOutsideTheWindowOrPastKvLenStaysOut) {
  Decode p;
  p.opts.window = {2, -1};  // the query (token 5) sees tokens 3..5
  for (int64_t d = 0; d < 4; ++d) {
    p.k.set(0 * 8 + d, kNaN);  // token 0, head 0
    p.v.set(0 * 8 + d, kNaN);
  }
  reference::decode(p.args(), p.opts);
  EXPECT_EQ(nan_pattern(p.out.to_double()), "........");
  EXPECT_EQ(nan_pattern(p.lse.to_double()), "..");
  p.expect_naive_agrees();
}

TEST(ReferenceNaN, DecodeNaNValueOfAVisibleKeyWithZeroWeight) {
  // Key 1 of head 0 gets a logit of about -1e4 below the others: its probability underflows to
  // exactly 0, and 0 * NaN is still NaN (torch SDPA gives NaN here too).
  Decode p;
  p.opts.scale = 1e4f;
  for (int64_t d = 0; d < 4; ++d) {
    p.q.set(d, 1.0);
    for (int64_t t = 0; t < 6; ++t) p.k.set(((t / 4) * 4 + t % 4) * 8 + d, t == 1 ? -1.0 : 1.0);
  }
  p.v.set(1 * 8 + 2, kNaN);  // token 1, head 0, feature 2
  reference::decode(p.args(), p.opts);
  EXPECT_EQ(nan_pattern(p.out.to_double()), "..N.....");
  EXPECT_EQ(nan_pattern(p.lse.to_double()), "..");
  p.expect_naive_agrees();
}

// ------------------------------------------------------------------------------------ mla

// Two queries (causal: query 0 sees keys 0..1, query 1 keys 0..2) of one head against kv_len 3
// in a page of 4 slots; slot 3 is past kv_len and holds NaN.
struct Mla {
  HostTensor q_nope = random_tensor({2, 1, kMlaLatentDim}, 8);
  HostTensor q_pe = random_tensor({2, 1, kMlaRopeDim}, 9);
  HostTensor ckv = random_tensor({1, 4, kMlaLatentDim}, 10);
  HostTensor kpe = random_tensor({1, 4, kMlaRopeDim}, 11);
  HostTensor out{kFP32, {2, 1, kMlaLatentDim}}, lse{kFP32, {2, 1}};
  HostTensor cu = int_tensor({0, 2}), table = int_tensor({0}, {1, 1}), kv_lens = int_tensor({3});
  Mla() {
    ckv.set(3 * kMlaLatentDim + 5, kNaN);
    kpe.set(3 * kMlaRopeDim + 5, kNaN);
  }
  MlaArgs args() const {
    MlaArgs a;
    a.q_nope = q_nope, a.q_pe = q_pe, a.ckv = ckv, a.kpe = kpe, a.out = out, a.lse = lse;
    a.cu_seqlens_q = cu;
    a.pages.block_table = table;
    a.pages.kv_lens = kv_lens;
    return a;
  }
  // Per query: the naive row over [q_nope, q_pe] . [ckv, kpe] with values ckv.
  void expect_naive_agrees() const {
    std::vector<std::vector<double>> keys(3), values(3);
    for (int64_t j = 0; j < 3; ++j) {
      for (int64_t d = 0; d < kMlaLatentDim; ++d) keys[j].push_back(ckv.get(j * kMlaLatentDim + d));
      values[j] = keys[j];
      for (int64_t d = 0; d < kMlaRopeDim; ++d) keys[j].push_back(kpe.get(j * kMlaRopeDim + d));
    }
    std::vector<double> want_out, want_lse;
    for (int64_t i = 0; i < 2; ++i) {
      std::vector<double> q;
      for (int64_t d = 0; d < kMlaLatentDim; ++d) q.push_back(q_nope.get(i * kMlaLatentDim + d));
      for (int64_t d = 0; d < kMlaRopeDim; ++d) q.push_back(q_pe.get(i * kMlaRopeDim + d));
      const std::vector<char> allowed = {1, 1, char(i == 1)};
      const naive::RowResult r =
          naive::attend_row(q, keys, values, allowed, 1.0 / 24.0, 0.0, nullptr, kMlaLatentDim);
      want_out.insert(want_out.end(), r.out.begin(), r.out.end());
      want_lse.push_back(r.lse);
    }
    EXPECT_TRUE(same_values(out.to_double(), want_out, "out"));
    EXPECT_TRUE(same_values(lse.to_double(), want_lse, "lse"));
  }
};

TEST(ReferenceNaN, MlaNaNQueryRow) {
  Mla p;
  p.q_pe.set(7, kNaN);  // query 0
  reference::mla(p.args(), MlaOptions{});
  EXPECT_EQ(nan_pattern(p.lse.to_double()), "N.");
  p.expect_naive_agrees();
}

TEST(ReferenceNaN, MlaNaNKeyReachesOnlyTheQueriesThatSeeIt) {
  Mla p;
  p.kpe.set(2 * kMlaRopeDim, kNaN);  // key 2: masked for query 0
  reference::mla(p.args(), MlaOptions{});
  EXPECT_EQ(nan_pattern(p.lse.to_double()), ".N");
  p.expect_naive_agrees();
  Mla clean;
  reference::mla(clean.args(), MlaOptions{});
  EXPECT_EQ(nan_pattern(clean.lse.to_double()), "..") << "slot 3 is past kv_len";
  EXPECT_EQ(nan_pattern(clean.out.to_double()), std::string(2 * kMlaLatentDim, '.'));
}

}  // namespace
}  // namespace hopattn::testing
