// reference::merge_states / merge_states_n: partial states computed by the naive attention over
// disjoint key ranges must merge into the state of the whole range; empty states carry no
// weight; hand-computed merges at magnitudes where an unshifted e^lse would overflow.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "naive_attention.hpp"
#include "reference/reference.hpp"
#include "support/host_tensor.hpp"

namespace hopattn::testing {
namespace {

constexpr double kNegInf = -naive::kInf;

// Attention rows given directly by their logits: logits [T][H][n], values [T][H][n][D].
struct Rows {
  int T = 0, H = 0, D = 0, n = 0;
  std::vector<double> logits, values;

  Rows(int t, int h, int d, int keys, double offset, std::mt19937_64& rng)
      : T(t), H(h), D(d), n(keys) {
    std::normal_distribution<double> normal(0.0, 2.0);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (int i = 0; i < T * H * n; ++i) logits.push_back(offset + normal(rng));
    for (int i = 0; i < T * H * n * D; ++i) values.push_back(u(rng));
  }

  // The state (o, lse) of row (t, h) over keys [lo, hi): a one-feature query q = 1 against keys
  // holding the logits, so the naive attention's logit is the logit itself.
  naive::RowResult state(int t, int h, int lo, int hi) const {
    std::vector<std::vector<double>> k(n), v(n);
    std::vector<char> allowed(n);
    for (int j = 0; j < n; ++j) {
      const size_t row = (size_t(t) * H + h) * n + j;
      k[j] = {logits[row]};
      v[j].assign(values.begin() + row * D, values.begin() + (row + 1) * D);
      allowed[j] = lo <= j && j < hi;
    }
    return naive::attend_row({1.0}, k, v, allowed, 1.0, 0.0, nullptr, D);
  }
};

// An owning tensor seen through a view whose last dimension is padded by `pad` elements.
struct Padded {
  HostTensor buf;
  TensorView view;
  Padded(DType dtype, std::vector<int64_t> shape, int pad) {
    std::vector<int64_t> full = shape;
    full.back() += pad;
    buf = HostTensor(dtype, full);
    buf.fill_bytes(0xff);
    std::vector<int64_t> strides(shape.size());
    int64_t s = 1;
    for (int i = int(shape.size()) - 1; i >= 0; --i) {
      strides[i] = s;
      s *= full[i];
    }
    view = TensorView(buf.data(), dtype, int(shape.size()), shape.data(), strides.data());
  }
};

// Relative error allowed for merging states stored in `dtype`: the inputs' own rounding (fp32 lse
// included, which perturbs the weights by about 2^-24 |lse|).
double input_tolerance(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return std::ldexp(1.0, -8);
    case DType::kFP16:
      return std::ldexp(1.0, -10);
    default:
      return 1e-6;
  }
}

struct Merged {
  std::vector<double> out, lse;  // [T][H][D], [T][H]
};

// Two-way merge of states over [0, split) and [split, n) of every row.
Merged merge_two(const Rows& r, int split, DType dtype, int pad, bool swap = false) {
  Padded oa(dtype, {r.T, r.H, r.D}, pad), ob(dtype, {r.T, r.H, r.D}, pad);
  Padded la(DType::kFP32, {r.T, r.H}, pad), lb(DType::kFP32, {r.T, r.H}, pad);
  Padded out(dtype, {r.T, r.H, r.D}, pad), lse(DType::kFP32, {r.T, r.H}, pad);
  for (int t = 0; t < r.T; ++t) {
    for (int h = 0; h < r.H; ++h) {
      const naive::RowResult a = r.state(t, h, 0, split), b = r.state(t, h, split, r.n);
      for (int d = 0; d < r.D; ++d) {
        store_element(oa.view, oa.view.offset({t, h, d}), a.out[d]);
        store_element(ob.view, ob.view.offset({t, h, d}), b.out[d]);
      }
      store_element(la.view, la.view.offset({t, h}), a.lse);
      store_element(lb.view, lb.view.offset({t, h}), b.lse);
    }
  }
  MergeArgs args;
  args.o_a = swap ? ob.view : oa.view;
  args.lse_a = swap ? lb.view : la.view;
  args.o_b = swap ? oa.view : ob.view;
  args.lse_b = swap ? la.view : lb.view;
  args.out = out.view;
  args.lse = lse.view;
  reference::merge_states(args);
  Merged m;
  for (int t = 0; t < r.T; ++t) {
    for (int h = 0; h < r.H; ++h) {
      for (int d = 0; d < r.D; ++d) {
        m.out.push_back(load_element(out.view, out.view.offset({t, h, d})));
      }
      m.lse.push_back(load_element(lse.view, lse.view.offset({t, h})));
    }
  }
  return m;
}

// n-way merge of the states over [bounds[k], bounds[k + 1]) of every row.
Merged merge_splits(const Rows& r, const std::vector<int>& bounds, DType dtype, int pad) {
  const int n = int(bounds.size()) - 1;
  Padded o(dtype, {r.T, n, r.H, r.D}, pad), l(DType::kFP32, {r.T, n, r.H}, pad);
  Padded out(dtype, {r.T, r.H, r.D}, pad), lse(DType::kFP32, {r.T, r.H}, pad);
  for (int t = 0; t < r.T; ++t) {
    for (int k = 0; k < n; ++k) {
      for (int h = 0; h < r.H; ++h) {
        const naive::RowResult s = r.state(t, h, bounds[k], bounds[k + 1]);
        for (int d = 0; d < r.D; ++d) store_element(o.view, o.view.offset({t, k, h, d}), s.out[d]);
        store_element(l.view, l.view.offset({t, k, h}), s.lse);
      }
    }
  }
  MergeNArgs args;
  args.o = o.view;
  args.lse = l.view;
  args.out = out.view;
  args.lse_out = lse.view;
  reference::merge_states_n(args);
  Merged m;
  for (int t = 0; t < r.T; ++t) {
    for (int h = 0; h < r.H; ++h) {
      for (int d = 0; d < r.D; ++d) {
        m.out.push_back(load_element(out.view, out.view.offset({t, h, d})));
      }
      m.lse.push_back(load_element(lse.view, lse.view.offset({t, h})));
    }
  }
  return m;
}

// The merged state against the naive state of the whole key range of every row.
void expect_whole(const Rows& r, const Merged& m, DType dtype) {
  std::vector<double> out, lse;
  for (int t = 0; t < r.T; ++t) {
    for (int h = 0; h < r.H; ++h) {
      const naive::RowResult w = r.state(t, h, 0, r.n);
      out.insert(out.end(), w.out.begin(), w.out.end());
      lse.push_back(w.lse);
    }
  }
  // |o| <= max |v| <= 1, so an absolute tolerance is the natural one for out. The fp32 rounding
  // of the partial lse values (2^-24 |lse| each) shifts the weights by as much, relatively.
  for (size_t i = 0; i < out.size(); ++i) {
    const double lse_rounding = 2.5e-7 * std::max(1.0, std::fabs(lse[i / r.D]));
    const double tol =
        input_tolerance(dtype) + lse_rounding + naive::storage_tolerance(dtype, out[i]);
    ASSERT_NEAR(m.out[i], out[i], tol) << "out " << i;
  }
  for (size_t i = 0; i < lse.size(); ++i) {
    ASSERT_NEAR(m.lse[i], lse[i], 4e-7 * std::max(1.0, std::fabs(lse[i]))) << "lse " << i;
  }
}

TEST(MergeReference, SplitRangeMergesIntoWholeRange) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  for (DType dtype : {DType::kFP32, DType::kBF16, DType::kFP16}) {
    for (double offset : {0.0, 800.0, -800.0}) {  // e^800 overflows a double: must be shifted
      const Rows r(7, 3, 40, 57, offset, rng);
      for (int split : {0, 1, 20, 56, 57}) {
        SCOPED_TRACE(::testing::Message() << dtype << " offset " << offset << " split " << split);
        expect_whole(r, merge_two(r, split, dtype, split % 2 ? 3 : 0), dtype);
      }
    }
  }
}

TEST(MergeReference, NWaySplitsWithEmptyOnesMergeIntoWholeRange) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  for (DType dtype : {DType::kFP32, DType::kBF16}) {
    const Rows r(5, 4, 24, 61, 10.0, rng);
    for (int n : {1, 2, 5, 8}) {
      std::vector<int> bounds{0, 61};
      std::uniform_int_distribution<int> cut(0, 61);
      while (int(bounds.size()) < n + 1) bounds.push_back(cut(rng));
      if (n >= 5) {  // empty splits: at the front, repeated in the middle, at the back
        bounds[2] = 0;
        bounds[3] = bounds[4];
        bounds.back() = 61;
      }
      std::sort(bounds.begin(), bounds.end());
      SCOPED_TRACE(::testing::Message() << dtype << " n " << n);
      expect_whole(r, merge_splits(r, bounds, dtype, n % 2), dtype);
    }
  }
}

TEST(MergeReference, EmptyStates) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  const int T = 3, H = 2, D = 16;
  for (DType dtype : {DType::kFP32, DType::kBF16}) {
    // An empty state's o is normally 0; here it holds other finite data, which must not leak.
    Padded oa(dtype, {T, H, D}, 0), ob(dtype, {T, H, D}, 0);
    Padded la(DType::kFP32, {T, H}, 0), lb(DType::kFP32, {T, H}, 0);
    for (int64_t i = 0; i < T * H * D; ++i) {
      oa.buf.set(i, u(rng));
      ob.buf.set(i, u(rng));
    }
    for (int64_t i = 0; i < T * H; ++i) {
      la.buf.set(i, kNegInf);
      lb.buf.set(i, 5.0 * u(rng));
    }
    for (int variant = 0; variant < 3; ++variant) {
      SCOPED_TRACE(::testing::Message() << dtype << " variant " << variant);
      Padded out(dtype, {T, H, D}, 0), lse(DType::kFP32, {T, H}, 0);
      MergeArgs args;
      args.o_a = oa.view;
      args.lse_a = la.view;
      args.o_b = variant == 0 ? oa.view : ob.view;  // 0: both empty
      args.lse_b = variant == 0 ? la.view : lb.view;
      if (variant == 2) {  // empty second
        std::swap(args.o_a, args.o_b);
        std::swap(args.lse_a, args.lse_b);
      }
      args.out = out.view;
      args.lse = lse.view;
      reference::merge_states(args);
      for (int64_t i = 0; i < T * H; ++i) {
        EXPECT_EQ(lse.buf.get(i), variant == 0 ? kNegInf : lb.buf.get(i)) << i;
        for (int d = 0; d < D; ++d) {
          const int64_t e = i * D + d;
          ASSERT_EQ(out.buf.get(e), variant == 0 ? 0.0 : ob.buf.get(e)) << e;
        }
      }
    }
    // n-way: all empty, and one full among empties, at every position.
    for (int full = -1; full < 4; ++full) {
      Padded o(dtype, {T, 4, H, D}, 0), l(DType::kFP32, {T, 4, H}, 0);
      Padded out(dtype, {T, H, D}, 0), lse(DType::kFP32, {T, H}, 0);
      for (int64_t i = 0; i < o.buf.numel(); ++i) o.buf.set(i, u(rng));
      for (int64_t i = 0; i < l.buf.numel(); ++i) {
        l.buf.set(i, (i / H) % 4 == full ? 3.0 * u(rng) : kNegInf);
      }
      MergeNArgs args;
      args.o = o.view;
      args.lse = l.view;
      args.out = out.view;
      args.lse_out = lse.view;
      reference::merge_states_n(args);
      for (int t = 0; t < T; ++t) {
        for (int h = 0; h < H; ++h) {
          const int64_t src = (t * 4 + std::max(full, 0)) * H + h;
          EXPECT_EQ(lse.buf.get(t * H + h), full < 0 ? kNegInf : l.buf.get(src));
          for (int d = 0; d < D; ++d) {
            ASSERT_EQ(out.buf.get((t * H + h) * D + d), full < 0 ? 0.0 : o.buf.get(src * D + d))
                << "full split " << full;
          }
        }
      }
    }
  }
}

TEST(MergeReference, SymmetricAndConsistentWithNWay) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  const Rows r(6, 3, 32, 40, 0.0, rng);
  const Merged ab = merge_two(r, 17, DType::kFP32, 0);
  const Merged ba = merge_two(r, 17, DType::kFP32, 2, /*swap=*/true);
  EXPECT_EQ(ab.out, ba.out);
  EXPECT_EQ(ab.lse, ba.lse);
  const Merged n2 = merge_splits(r, {0, 17, 40}, DType::kFP32, 1);
  EXPECT_EQ(ab.out, n2.out);
  EXPECT_EQ(ab.lse, n2.lse);
  // A single state merges into itself.
  const Merged n1 = merge_splits(r, {0, 40}, DType::kFP32, 0);
  const Merged whole = merge_two(r, 40, DType::kFP32, 0);  // [0, 40) and the empty [40, 40)
  EXPECT_EQ(n1.out, whole.out);
  EXPECT_EQ(n1.lse, whole.lse);
}

// lse pairs whose merge is known in closed form: log(e^a + e^b) = a + log(1 + e^{b-a}).
TEST(MergeReference, HandComputedAtExtremeMagnitudes) {
  struct Case {
    float a, b;
    double lse, wa;
  };
  const double softplus_m1 = 0.31326168751822286;  // log(1 + e^-1)
  const double sigmoid_1 = 0.7310585786300049;     // 1 / (1 + e^-1)
  const Case cases[] = {
      {1000.f, 999.f, 1000.0 + softplus_m1, sigmoid_1},
      {999.f, 1000.f, 1000.0 + softplus_m1, 1.0 - sigmoid_1},
      {-1000.f, -1000.f, -1000.0 + std::log(2.0), 0.5},
      {1000.f, -INFINITY, 1000.0, 1.0},
      {0.f, 0.f, std::log(2.0), 0.5},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "lse_a " << c.a << " lse_b " << c.b);
    HostTensor oa(DType::kFP32, {1, 1, 2}), ob(DType::kFP32, {1, 1, 2});
    HostTensor la(DType::kFP32, {1, 1}), lb(DType::kFP32, {1, 1});
    HostTensor out(DType::kFP32, {1, 1, 2}), lse(DType::kFP32, {1, 1});
    oa.set(0, 1.0);
    oa.set(1, -0.5);
    ob.set(0, -3.0);
    ob.set(1, 0.25);
    la.set(0, c.a);
    lb.set(0, c.b);
    out.fill_bytes(0xff);
    lse.fill_bytes(0xff);
    reference::merge_states({oa, la, ob, lb, out, lse});
    EXPECT_NEAR(lse.get(0), c.lse, 1e-4);  // fp32 at |lse| = 1000: ulp 6e-5
    EXPECT_NEAR(out.get(0), c.wa * 1.0 + (1 - c.wa) * -3.0, 1e-6);
    EXPECT_NEAR(out.get(1), c.wa * -0.5 + (1 - c.wa) * 0.25, 1e-6);
  }
}

}  // namespace
}  // namespace hopattn::testing
