// The check behind the fwd GPU tests (fwd_kernel_check.hpp): the fwd kernel
// (hopattn::attention_fwd on CUDA tensors) against the CPU reference
// (hopattn::reference::attention_fwd, double accumulation) on fresh seeded random data.
//
// Error bound (FlashAttention's rule): max |out - ref| <= 2 * max |emul - ref| + u * max |ref|,
// where `emul` is a plain 16-bit attention computed here on the host (S = Q K^T accumulated in
// fp32 and rounded to the dtype, softmax in fp32, P rounded to the dtype, O = P V accumulated in
// fp32 and rounded), and u is the dtype's unit roundoff (2^-8 bf16, 2^-11 fp16), which covers the
// final rounding of O when emul happens to be exact (kv_len 1). LSE: |lse - ref| <= 1e-3, and
// exactly -inf for rows that see no key. NaN never passes. Outputs are poisoned (0xff = NaN)
// before every run, including a guard region after each output that must stay untouched; every
// case runs twice and the two outputs must be bitwise identical.
#include "fwd_kernel_check.hpp"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "api/launch_variants.hpp"
#include "common/element_access.hpp"
#include "common/numeric.hpp"
#include "gpu_test_support.hpp"
#include "hopattn/api.hpp"
#include "hopattn/error.hpp"
#include "hopper_test_util.hpp"
#include "kernels/fwd/launch.hpp"
#include "reference/attend.hpp"
#include "reference/reference.hpp"
#include "support/host_tensor.hpp"

namespace hopattn::testing::fwd_check {

std::string FwdCase::describe() const {
  std::string s = std::string(dtype_name(dtype)) + (varlen ? " varlen" : " dense") + " d " +
                  std::to_string(d) + "/" + std::to_string(d_v()) + " hq " + std::to_string(hq) +
                  " hkv " + std::to_string(hkv) + " lens";
  for (int b = 0; b < batch() && b < 6; ++b) {
    s += " " + std::to_string(q_lens[b]) + "x" + std::to_string(kv_lens[b]);
  }
  if (batch() > 6) s += " ... (" + std::to_string(batch()) + " requests)";
  if (opts.causal) s += " causal";
  if (opts.window.left >= 0 || opts.window.right >= 0) {
    s += " window " + std::to_string(opts.window.left) + "," + std::to_string(opts.window.right);
  }
  if (opts.softcap > 0) s += " softcap " + std::to_string(opts.softcap);
  if (opts.scale) s += " scale " + std::to_string(*opts.scale);
  if (sinks) s += " sinks";
  if (opts.pack_gqa) s += *opts.pack_gqa ? " gqa-packed" : " gqa-unpacked";
  if (packed_qkv) s += " packed-qkv";
  if (poison_idle_requests || extra_kv_rows > 0) s += " NaN/Inf neighbour rows";
  if (launch.kv_tiles != kernels::fwd::LaunchOptions::KVTiles::kAuto) {
    s += launch.kv_tiles == kernels::fwd::LaunchOptions::KVTiles::kWide ? " wide-tiles"
                                                                        : " base-tiles";
  }
  if (paged()) {
    s += " paged " + std::to_string(page_size) + (layout == KVLayout::kNHD ? " NHD" : " HND") +
         (csr ? " CSR" : " block-table");
  }
  return s;
}

FwdCase dense_case(DType dtype, int batch, int q_len, int kv_len, int hkv, int group, bool causal) {
  FwdCase c;
  c.dtype = dtype;
  c.hkv = hkv;
  c.hq = hkv * group;
  c.q_lens.assign(batch, q_len);
  c.kv_lens.assign(batch, kv_len);
  c.opts.causal = causal;
  return c;
}

FwdCase varlen_case(DType dtype, std::vector<int> q_lens, std::vector<int> kv_lens, int hkv,
                    int group, bool causal) {
  FwdCase c;
  c.dtype = dtype;
  c.varlen = true;
  c.hkv = hkv;
  c.hq = hkv * group;
  c.q_lens = std::move(q_lens);
  c.kv_lens = std::move(kv_lens);
  c.opts.causal = causal;
  return c;
}

namespace {

using namespace hopattn::testing::hopper;  // NOLINT: test helpers

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr size_t kGuardBytes = 4096;

// ---------------------------------------------------------------------------- buffers
// Host bytes and a device copy with a poisoned guard region after the end, and `front` bytes of
// the allocation before the tensor (paged pools: 1 MB by default, as a pool carved from a larger
// cache has; 0 puts the pool at the start of its allocation, as a framework's cache tensor is).
struct Mirrored {
  HostTensor host;
  size_t front = 0;
  DeviceBuffer<uint8_t> dev;

  Mirrored(DType dtype, std::vector<int64_t> shape, size_t front_bytes = 0)
      : host(dtype, std::move(shape)),
        front(front_bytes),
        dev(front_bytes + static_cast<size_t>(host.numel()) * dtype_size(host.dtype()) +
            kGuardBytes) {}
  uint8_t* device_data() const { return dev.get() + front; }

  size_t bytes() const { return static_cast<size_t>(host.numel()) * dtype_size(host.dtype()); }
  void upload() {
    cuda_check(cudaMemcpy(device_data(), host.data(), bytes(), cudaMemcpyHostToDevice), "upload");
  }
  void poison() { dev.fill_bytes(0xFF); }
  // Device bytes back into `host`; false when the guard after the end was written.
  bool download() {
    std::vector<uint8_t> all(bytes() + kGuardBytes);
    cuda_check(cudaMemcpy(all.data(), device_data(), all.size(), cudaMemcpyDeviceToHost),
               "download");
    std::memcpy(host.data(), all.data(), bytes());
    return std::all_of(all.begin() + bytes(), all.end(), [](uint8_t b) { return b == 0xFF; });
  }
  std::vector<uint8_t> raw() const {
    const auto* p = static_cast<const uint8_t*>(const_cast<HostTensor&>(host).data());
    return std::vector<uint8_t>(p, p + bytes());
  }
  // Views with the same element offset and strides on host and device.
  TensorView view(bool device, int64_t offset, const std::vector<int64_t>& shape,
                  const std::vector<int64_t>& strides) const {
    const int esize = dtype_size(host.dtype());
    uint8_t* base =
        device ? device_data() : static_cast<uint8_t*>(const_cast<HostTensor&>(host).data());
    return TensorView(base + offset * esize, host.dtype(), static_cast<int>(shape.size()),
                      shape.data(), strides.data(),
                      device ? Device{DeviceType::kCUDA, 0} : Device{});
  }
  TensorView whole(bool device) const {
    const std::vector<int64_t>& shape = host.shape();
    std::vector<int64_t> strides(shape.size(), 1);
    for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) {
      strides[i] = strides[i + 1] * shape[i + 1];
    }
    return view(device, 0, shape, strides);
  }
};

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * shape[i + 1];
  return s;
}

// All tensors of one case, host and device.
struct Tensors {
  const FwdCase& c;
  int total_q = 0, total_k = 0;
  std::vector<int> cu_q, cu_k;
  std::unique_ptr<Mirrored> qkv_storage, q_storage, k_storage, v_storage, out, lse, sinks;
  std::unique_ptr<Mirrored> cu_q_t, cu_k_t;
  std::unique_ptr<Mirrored> block_table, indptr, indices, kv_lens_t;  // paged
  PagePlan plan;                                                      // paged
  TensorView q[2], k[2], v[2];                                        // [0] host, [1] device

  explicit Tensors(const FwdCase& fc, std::mt19937_64& rng) : c(fc) {
    cu_q.push_back(0);
    cu_k.push_back(0);
    for (int b = 0; b < c.batch(); ++b) {
      cu_q.push_back(cu_q.back() + c.q_lens[b]);
      cu_k.push_back(cu_k.back() + c.kv_lens[b]);
    }
    total_q = cu_q.back();
    total_k = cu_k.back() + c.extra_kv_rows;
    if (c.paged()) {
      make_pools(rng);
    } else {
      make_qkv(rng);
    }
    make_outputs(rng);
  }

  // Index tensor on both sides from int32 values.
  static std::unique_ptr<Mirrored> index_tensor(const HostTensor& values) {
    auto m = std::make_unique<Mirrored>(DType::kInt32, values.shape());
    std::memcpy(m->host.data(), const_cast<HostTensor&>(values).data(), m->bytes());
    m->upload();
    return m;
  }

  // Paged: q varlen; K and V in shuffled pages, NaN in every slot that holds no token.
  void make_pools(std::mt19937_64& rng) {
    const int64_t D = c.d, DV = c.d_v(), ps = c.page_size;
    plan = PagePlan::fresh(std::vector<int32_t>(c.kv_lens.begin(), c.kv_lens.end()), c.page_size);
    plan.shuffle(rng);
    const auto pool_shape = [&](int64_t dim) {
      return c.layout == KVLayout::kNHD ? std::vector<int64_t>{plan.num_pages, ps, c.hkv, dim}
                                        : std::vector<int64_t>{plan.num_pages, c.hkv, ps, dim};
    };
    q_storage = std::make_unique<Mirrored>(c.dtype, std::vector<int64_t>{total_q, c.hq, D});
    const size_t front = c.pool_at_allocation_start ? 0 : size_t{1} << 20;
    k_storage = std::make_unique<Mirrored>(c.dtype, pool_shape(D), front);
    v_storage = std::make_unique<Mirrored>(c.dtype, pool_shape(DV), front);
    q_storage->host.fill_uniform(rng, -c.qk_range, c.qk_range);
    k_storage->host.fill_bytes(0xff);
    v_storage->host.fill_bytes(0xff);
    const TensorView kh = k_storage->whole(false), vh = v_storage->whole(false);
    std::uniform_real_distribution<double> qk(-c.qk_range, c.qk_range), unit(-1.0, 1.0);
    for (int b = 0; b < c.batch(); ++b) {
      for (int j = 0; j < c.kv_lens[b]; ++j) {
        for (int h = 0; h < c.hkv; ++h) {
          const int32_t page = plan.page(b, j);
          for (int d = 0; d < D; ++d) {
            store_element(kh, pool_offset(kh, c.layout, page, j % ps, h, d), qk(rng));
          }
          for (int d = 0; d < DV; ++d) {
            store_element(vh, pool_offset(vh, c.layout, page, j % ps, h, d), unit(rng));
          }
        }
      }
    }
    for (Mirrored* m : {q_storage.get(), k_storage.get(), v_storage.get()}) m->upload();
    for (int side = 0; side < 2; ++side) {
      q[side] = q_storage->whole(side == 1);
      k[side] = k_storage->whole(side == 1);
      v[side] = v_storage->whole(side == 1);
    }
    if (c.csr) {
      indptr = index_tensor(plan.csr_indptr());
      indices = index_tensor(plan.csr_indices());
    } else {
      block_table = index_tensor(plan.block_table());
    }
    kv_lens_t = index_tensor(int_tensor(std::vector<int32_t>(c.kv_lens.begin(), c.kv_lens.end())));
  }

  void make_qkv(std::mt19937_64& rng) {
    const int64_t B = c.batch(), D = c.d, DV = c.d_v();
    const int64_t sq = c.varlen ? 0 : c.q_lens[0], sk = c.varlen ? 0 : c.kv_lens[0];
    const auto rows_shape = [&](int64_t rows_dense, int64_t total, int64_t heads, int64_t dim) {
      return c.varlen ? std::vector<int64_t>{total, heads, dim}
                      : std::vector<int64_t>{B, rows_dense, heads, dim};
    };
    if (c.packed_qkv) {
      const int64_t ht = c.hq + 2 * c.hkv;
      qkv_storage = std::make_unique<Mirrored>(c.dtype, rows_shape(sq, total_q, ht, D));
      const std::vector<int64_t> st = contiguous_strides(qkv_storage->host.shape());
      qkv_storage->host.fill_uniform(rng, -c.qk_range, c.qk_range);  // v shares q/k's range
      for (int side = 0; side < 2; ++side) {
        const bool dev = side == 1;
        q[side] = qkv_storage->view(dev, 0, rows_shape(sq, total_q, c.hq, D), st);
        k[side] = qkv_storage->view(dev, c.hq * D, rows_shape(sk, total_k, c.hkv, D), st);
        v[side] = qkv_storage->view(dev, (c.hq + c.hkv) * D, rows_shape(sk, total_k, c.hkv, D), st);
      }
      qkv_storage->upload();
    } else {
      q_storage = std::make_unique<Mirrored>(c.dtype, rows_shape(sq, total_q, c.hq, D));
      k_storage = std::make_unique<Mirrored>(c.dtype, rows_shape(sk, total_k, c.hkv, D));
      v_storage = std::make_unique<Mirrored>(c.dtype, rows_shape(sk, total_k, c.hkv, DV));
      q_storage->host.fill_uniform(rng, -c.qk_range, c.qk_range);
      k_storage->host.fill_uniform(rng, -c.qk_range, c.qk_range);
      v_storage->host.fill_uniform(rng, -1.0, 1.0);
      poison_neighbour_rows();
      for (Mirrored* m : {q_storage.get(), k_storage.get(), v_storage.get()}) m->upload();
      for (int side = 0; side < 2; ++side) {
        q[side] = q_storage->whole(side == 1);
        k[side] = k_storage->whole(side == 1);
        v[side] = v_storage->whole(side == 1);
      }
    }
  }

  // Varlen: NaN in K and Inf in V for the rows no query of this case may see.
  void poison_neighbour_rows() {
    const TensorView kh = k_storage->whole(false), vh = v_storage->whole(false);
    const auto poison_rows = [&](int first, int count) {
      for (int r = first; r < first + count; ++r) {
        for (int h = 0; h < c.hkv; ++h) {
          for (int d = 0; d < c.d; ++d) store_element(kh, kh.offset({r, h, d}), NAN);
          for (int d = 0; d < c.d_v(); ++d) store_element(vh, vh.offset({r, h, d}), INFINITY);
        }
      }
    };
    for (int b = 0; b < c.batch() && c.poison_idle_requests; ++b) {
      if (c.q_lens[b] == 0) poison_rows(cu_k[b], c.kv_lens[b]);
    }
    poison_rows(cu_k.back(), c.extra_kv_rows);
  }

  void make_outputs(std::mt19937_64& rng) {
    const int64_t B = c.batch(), DV = c.d_v();
    const bool varlen = c.varlen || c.paged();
    const int64_t sq = varlen ? 0 : c.q_lens[0];
    const auto rows_shape = [&](int64_t rows_dense, int64_t total, int64_t heads, int64_t dim) {
      return varlen ? std::vector<int64_t>{total, heads, dim}
                    : std::vector<int64_t>{B, rows_dense, heads, dim};
    };
    out = std::make_unique<Mirrored>(c.dtype, rows_shape(sq, total_q, c.hq, DV));
    lse = std::make_unique<Mirrored>(DType::kFP32, varlen ? std::vector<int64_t>{total_q, c.hq}
                                                          : std::vector<int64_t>{B, sq, c.hq});
    if (c.sinks) {
      sinks = std::make_unique<Mirrored>(DType::kFP32, std::vector<int64_t>{c.hq});
      sinks->host.fill_uniform(rng, -2.0, 3.0);
      if (c.hq > 1) sinks->host.set(1, 40.0);  // far above every logit: tests the rescaling
      sinks->upload();
    }
    if (varlen) {
      cu_q_t = index_tensor(int_tensor(std::vector<int32_t>(cu_q.begin(), cu_q.end())));
      cu_k_t = index_tensor(int_tensor(std::vector<int32_t>(cu_k.begin(), cu_k.end())));
    }
  }

  FwdArgs args(bool device, const TensorView& out_view, const TensorView& lse_view) const {
    const int side = device ? 1 : 0;
    FwdArgs a;
    a.q = q[side];
    a.k = k[side];
    a.v = v[side];
    a.out = out_view;
    a.lse = lse_view;
    if (c.varlen || c.paged()) {
      a.cu_seqlens_q = cu_q_t->whole(device);
      if (!c.paged()) a.cu_seqlens_k = cu_k_t->whole(device);
      a.max_seqlen_q = std::max(1, *std::max_element(c.q_lens.begin(), c.q_lens.end()));
      a.max_seqlen_k = std::max(1, *std::max_element(c.kv_lens.begin(), c.kv_lens.end()));
    }
    if (c.paged()) {
      a.pages.layout = c.layout;
      a.pages.kv_lens = kv_lens_t->whole(device);
      if (c.csr) {
        a.pages.indptr = indptr->whole(device);
        a.pages.indices = indices->whole(device);
      } else {
        a.pages.block_table = block_table->whole(device);
      }
    }
    if (sinks) a.sinks = sinks->whole(device);
    return a;
  }

  // Element access in (request, position, head, dim) coordinates.
  double at(const TensorView& t, int b, int i, int h, int d, bool kv) const {
    if (kv && c.paged()) {
      return load_element(t, pool_offset(t, c.layout, plan.page(b, i), i % c.page_size, h, d));
    }
    const int row = (kv ? cu_k[b] : cu_q[b]) + i;
    const int64_t off = rows_varlen() ? t.offset({row, h, d}) : t.offset({b, i, h, d});
    return load_element(t, off);
  }
  bool rows_varlen() const { return c.varlen || c.paged(); }
  int64_t out_offset(const TensorView& t, int b, int i, int h, int d) const {
    return rows_varlen() ? t.offset({cu_q[b] + i, h, d}) : t.offset({b, i, h, d});
  }
  int64_t lse_offset(const TensorView& t, int b, int i, int h) const {
    return rows_varlen() ? t.offset({cu_q[b] + i, h}) : t.offset({b, i, h});
  }
};

// ---------------------------------------------------------------------------- 16-bit emulation
double round_to(DType dtype, double x) {
  const float f = static_cast<float>(x);
  return dtype == DType::kBF16 ? numeric::bf16_to_float(numeric::float_to_bf16(f))
                               : numeric::fp16_to_float(numeric::float_to_fp16(f));
}

// out[b][i][h][:] of a plain 16-bit attention for one (request, q head).
void emulate_head(const Tensors& t, const TensorView& out, int b, int h) {
  const FwdCase& c = t.c;
  const double scale = reference::default_scale(c.opts.scale, c.d);
  const int kvh = h / (c.hq / c.hkv);
  const int q_len = c.q_lens[b], kv_len = c.kv_lens[b];
  const int dv = c.d_v();
  std::vector<float> kk(static_cast<size_t>(kv_len) * c.d), vv(static_cast<size_t>(kv_len) * dv);
  for (int j = 0; j < kv_len; ++j) {
    for (int d = 0; d < c.d; ++d)
      kk[j * c.d + d] = static_cast<float>(t.at(t.k[0], b, j, kvh, d, true));
    for (int d = 0; d < dv; ++d)
      vv[j * dv + d] = static_cast<float>(t.at(t.v[0], b, j, kvh, d, true));
  }
  const double sink = c.sinks ? t.sinks->host.get(h) : -kInf;
  std::vector<float> qq(c.d), logit(kv_len), p(kv_len), o(dv);
  std::vector<char> visible(kv_len);
  for (int i = 0; i < q_len; ++i) {
    for (int d = 0; d < c.d; ++d) qq[d] = static_cast<float>(t.at(t.q[0], b, i, h, d, false));
    float m = static_cast<float>(sink);
    for (int j = 0; j < kv_len; ++j) {
      visible[j] = reference::key_visible(i, j, q_len, kv_len, c.opts.causal, c.opts.window);
      if (!visible[j]) continue;
      float s = 0.f;
      for (int d = 0; d < c.d; ++d) s += qq[d] * kk[j * c.d + d];
      float l = static_cast<float>(round_to(c.dtype, s)) * static_cast<float>(scale);
      if (c.opts.softcap > 0) l = c.opts.softcap * std::tanh(l / c.opts.softcap);
      logit[j] = l;
      m = std::max(m, l);
    }
    float denom = c.sinks ? std::exp(static_cast<float>(sink) - m) : 0.f;
    for (int j = 0; j < kv_len; ++j) {
      p[j] = visible[j] ? std::exp(logit[j] - m) : 0.f;
      denom += p[j];
    }
    std::fill(o.begin(), o.end(), 0.f);
    for (int j = 0; j < kv_len && denom > 0.f; ++j) {
      if (!visible[j]) continue;
      const float pj = static_cast<float>(round_to(c.dtype, p[j] / denom));
      for (int d = 0; d < dv; ++d) o[d] += pj * vv[j * dv + d];
    }
    for (int d = 0; d < dv; ++d) {
      store_element(out, t.out_offset(out, b, i, h, d), round_to(c.dtype, o[d]));
    }
  }
}

// All heads of all requests, spread over the host's cores (each task writes its own rows).
void emulate_16bit(const Tensors& t, const TensorView& out) {
  const int tasks = t.c.batch() * t.c.hq;
  std::atomic<int> next{0};
  const auto worker = [&] {
    for (int task = next++; task < tasks; task = next++) {
      emulate_head(t, out, task / t.c.hq, task % t.c.hq);
    }
  };
  const int threads = std::max(1, std::min<int>(tasks, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
}

// ---------------------------------------------------------------------------- the check
struct KernelRun {
  std::vector<uint8_t> out_bytes, lse_bytes;
  bool guards_intact = true;
};

KernelRun run_kernel(Tensors& t) {
  t.out->poison();
  t.lse->poison();
  internal::attention_fwd(t.args(true, t.out->whole(true), t.lse->whole(true)), t.c.opts, nullptr,
                          t.c.launch);
  sync_or_die(nullptr, "hopattn fwd kernel");
  KernelRun r;
  r.guards_intact = t.out->download();
  r.guards_intact = t.lse->download() && r.guards_intact;
  r.out_bytes = t.out->raw();
  r.lse_bytes = t.lse->raw();
  return r;
}

}  // namespace

void check_case(const FwdCase& c, uint64_t seed) {
  SCOPED_TRACE(c.describe());
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937_64 rng(seed);
  Tensors t(c, rng);

  // Reference in fp32 storage (double math inside), before the kernel runs.
  Mirrored ref_out(DType::kFP32, t.out->host.shape()), ref_lse(DType::kFP32, t.lse->host.shape());
  try {
    reference::attention_fwd(t.args(false, ref_out.whole(false), ref_lse.whole(false)), c.opts);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kNotImplemented) GTEST_SKIP() << "CPU reference: " << e.what();
    throw;
  }
  Mirrored emul_out(DType::kFP32, t.out->host.shape());
  emulate_16bit(t, emul_out.whole(false));

  const KernelRun first = run_kernel(t);
  EXPECT_TRUE(first.guards_intact) << "the kernel wrote past the end of out or lse";

  const TensorView got_out = t.out->whole(false), got_lse = t.lse->whole(false);
  const TensorView want_out = ref_out.whole(false), want_lse = ref_lse.whole(false);
  const TensorView emul = emul_out.whole(false);
  double err = 0, err_emul = 0, ref_max = 0;
  int64_t nan_count = 0;
  struct Worst {
    double err = -1;
    int b = 0, i = 0, h = 0, d = 0;
    double got = 0, want = 0;
  } worst;
  for (int b = 0; b < c.batch(); ++b) {
    for (int i = 0; i < c.q_lens[b]; ++i) {
      for (int h = 0; h < c.hq; ++h) {
        for (int d = 0; d < c.d_v(); ++d) {
          const int64_t off = t.out_offset(got_out, b, i, h, d);
          const double g = load_element(got_out, off), w = load_element(want_out, off);
          const double e = std::fabs(g - w);
          if (!std::isfinite(g)) ++nan_count;
          if (!(e <= worst.err)) worst = {std::isnan(e) ? kInf : e, b, i, h, d, g, w};
          err = std::isnan(e) ? kInf : std::max(err, e);
          err_emul = std::max(err_emul, std::fabs(load_element(emul, off) - w));
          ref_max = std::max(ref_max, std::fabs(w));
        }
      }
    }
  }
  const double u = c.dtype == DType::kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  const double bound = 2 * err_emul + u * ref_max;
  EXPECT_EQ(nan_count, 0) << "non-finite outputs (unwritten rows stay 0xff = NaN)";
  EXPECT_LE(err, bound) << "max |out - ref| = " << err << " vs bound 2 * " << err_emul << " + "
                        << u * ref_max << "; worst at request " << worst.b << " row " << worst.i
                        << " head " << worst.h << " dim " << worst.d << ": got " << worst.got
                        << ", want " << worst.want;
  if (!(err <= bound) || nan_count > 0) {
    // Which 64-row slices (one consumer warpgroup's rows within a 128-row tile) are wrong.
    std::map<std::tuple<int, int, int>, int> bad;
    for (int b = 0; b < c.batch(); ++b) {
      for (int i = 0; i < c.q_lens[b]; ++i) {
        for (int h = 0; h < c.hq; ++h) {
          for (int d = 0; d < c.d_v(); ++d) {
            const int64_t off = t.out_offset(got_out, b, i, h, d);
            const double e = std::fabs(load_element(got_out, off) - load_element(want_out, off));
            if (!(e <= bound)) ++bad[{b, h, i / 64}];
          }
        }
      }
    }
    int shown = 0;
    for (const auto& [key, n] : bad) {
      if (++shown > 12) break;
      std::printf("  bad elements: request %d head %d rows %d..%d: %d\n", std::get<0>(key),
                  std::get<1>(key), 64 * std::get<2>(key), 64 * std::get<2>(key) + 63, n);
    }
  }

  int lse_bad = 0;
  for (int b = 0; b < c.batch(); ++b) {
    for (int i = 0; i < c.q_lens[b]; ++i) {
      for (int h = 0; h < c.hq; ++h) {
        const int64_t off = t.lse_offset(got_lse, b, i, h);
        const double g = load_element(got_lse, off), w = load_element(want_lse, off);
        const bool ok = w == -kInf ? g == -kInf : std::fabs(g - w) <= 1e-3;
        if (!ok && ++lse_bad <= 5) {
          ADD_FAILURE() << "lse at request " << b << " row " << i << " head " << h << ": got " << g
                        << ", want " << w;
        }
      }
    }
  }
  EXPECT_EQ(lse_bad, 0) << "lse mismatches";

  const KernelRun second = run_kernel(t);
  EXPECT_TRUE(first.out_bytes == second.out_bytes && first.lse_bytes == second.lse_bytes)
      << "two runs on the same input gave different bits";
}

std::string skip_reason() { return gpu_skip_reason(); }

std::string kv_load_path(const FwdCase& c, const kernels::fwd::LaunchOptions& launch) {
  std::mt19937_64 rng(1);
  Tensors t(c, rng);
  return kernels::fwd::kv_load_path(t.args(true, t.out->whole(true), t.lse->whole(true)), launch);
}

bool runs_wide_tiles(const FwdCase& c) {
  std::mt19937_64 rng(1);
  Tensors t(c, rng);
  return kernels::fwd::runs_wide_tiles(t.args(true, t.out->whole(true), t.lse->whole(true)), c.opts,
                                       c.launch);
}

void run_once(const FwdCase& c) {
  std::mt19937_64 rng(1);
  Tensors t(c, rng);
  attention_fwd(t.args(true, t.out->whole(true), t.lse->whole(true)), c.opts, nullptr);
}

int64_t run_with_bad_index(const FwdCase& c, BadIndex bad) {
  std::mt19937_64 rng(1);
  Tensors t(c, rng);
  const auto set = [](Mirrored& m, int64_t i, int64_t v) {
    static_cast<int32_t*>(m.host.data())[i] = static_cast<int32_t>(v);
    m.upload();
    return v;
  };
  int64_t value = 0;
  switch (bad) {
    case BadIndex::kPageId:
      value = c.csr ? set(*t.indices, 0, t.plan.num_pages + 5)
                    : set(*t.block_table, 0, t.plan.num_pages + 5);
      break;
    case BadIndex::kNegativePageId:
      value = c.csr ? set(*t.indices, 0, -3) : set(*t.block_table, 0, -3);
      break;
    case BadIndex::kKvLen:
      value = set(*t.kv_lens_t, 0, int64_t{c.kv_lens[0]} + 1000 * c.page_size);
      break;
    case BadIndex::kCuSeqlensQ:
      value = set(*t.cu_q_t, c.batch(), t.total_q + 7);
      break;
    case BadIndex::kCsrIndptr:
      value = set(*t.indptr, c.batch(), t.indices->host.numel() + 9);
      break;
    case BadIndex::kCuSeqlensK:
      value = set(*t.cu_k_t, c.batch(), t.total_k + 11);
      break;
  }
  attention_fwd(t.args(true, t.out->whole(true), t.lse->whole(true)), c.opts, nullptr);
  return value;
}

}  // namespace hopattn::testing::fwd_check
