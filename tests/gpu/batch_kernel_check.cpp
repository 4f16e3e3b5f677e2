#include "batch_kernel_check.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>

#include "api/launch_variants.hpp"
#include "common/numeric.hpp"
#include "kernels/batch/sm_placement.hpp"
#include "plan/batch_plan_layout.hpp"
#include "plan/batch_workspace.hpp"

namespace hopattn::testing::batch_check {
namespace {

constexpr uint8_t kPoison = 0xff;  // NaN in bf16, fp16, fp32 and fp8 e4m3 (checked: e4m3_table)
constexpr int kTable = 4096;       // values of a fill table (12-bit indices)

// kTable random values of a 16-bit dtype in [lo, hi), as raw bit patterns.
std::vector<uint16_t> value_table(DType dtype, std::mt19937_64& rng, double lo, double hi,
                                  double* max_abs) {
  HostTensor t(dtype, {kTable});
  t.fill_uniform(rng, lo, hi);
  std::vector<uint16_t> bits(kTable);
  std::memcpy(bits.data(), t.view().data(), kTable * sizeof(uint16_t));
  for (int i = 0; i < kTable && max_abs != nullptr; ++i) {
    *max_abs = std::max(*max_abs, std::fabs(t.get(i)));
  }
  return bits;
}

// kTable fp8 e4m3 codes, each code of a set in turn (the set is small: every code 16 to 32 times).
// The set is every finite code (all bytes but the NaN codes 0x7f and 0xff) or, by default, those
// below 2 in magnitude; both hold both signs, the zeros 0x00 / 0x80 and the subnormals 0x01..0x07
// / 0x81..0x87. The default keeps the logits of order 1 as in the 16-bit cases (|q| < 2, rms
// logit ~0.7): with every code, |K| up to 448 makes the softmax one-hot at scale 1 (so a wrong k
// scale would hardly show), and a softcap's tanh.approx error would be scaled up to the bound.
std::vector<uint8_t> e4m3_table(bool all_codes, double* max_abs) {
  if (!std::isnan(numeric::e4m3_to_float(kPoison))) {
    throw Error(ErrorKind::kValue, "batch test: the poison byte is not an e4m3 NaN");
  }
  std::vector<uint8_t> codes;
  for (int c = 0; c < 256; ++c) {
    const double v = numeric::e4m3_to_float(static_cast<uint8_t>(c));
    if (std::isnan(v) || (!all_codes && std::fabs(v) >= 2.0)) continue;
    codes.push_back(static_cast<uint8_t>(c));
    *max_abs = std::max(*max_abs, std::fabs(v));
  }
  std::vector<uint8_t> table(kTable);
  for (int i = 0; i < kTable; ++i) table[i] = codes[i % codes.size()];
  return table;
}

// xorshift64: five 12-bit table indices a draw (the 8k-token caches hold ~10^9 elements; a
// distribution object per element would take most of the test's time).
class FastIndex {
 public:
  explicit FastIndex(uint64_t seed) : s_(seed | 1) {}
  uint32_t next() {
    if (left_ == 0) {
      s_ ^= s_ << 13;
      s_ ^= s_ >> 7;
      s_ ^= s_ << 17;
      bits_ = s_;
      left_ = 5;
    }
    const uint32_t i = static_cast<uint32_t>(bits_ & (kTable - 1));
    bits_ >>= 12;
    --left_;
    return i;
  }

 private:
  uint64_t s_, bits_ = 0;
  int left_ = 0;
};

// The slots requests own get table values (16-bit patterns or fp8 codes: Code is the pool's
// element), the rest stays poison.
template <class Code>
void fill_pool(HostTensor& pool, const HostStep& h, const std::vector<Code>& values,
               uint64_t seed) {
  const StepSpec& s = h.spec;
  if (dtype_size(pool.dtype()) != sizeof(Code)) {
    throw Error(ErrorKind::kValue, "batch test: fill_pool's table does not match the pool");
  }
  pool.fill_bytes(kPoison);
  auto* base = static_cast<Code*>(pool.data());
  const TensorView v = pool.view();
  const int64_t d = v.size(3);
  FastIndex idx(seed);
  for (int b = 0; b < s.batch(); ++b) {
    for (int64_t t = 0; t < h.kv[b]; ++t) {
      const int64_t page = h.pages.page(b, t), slot = t % s.page_size;
      for (int64_t head = 0; head < s.kv_heads; ++head) {
        Code* row = base + pool_offset(v, s.layout, page, slot, head, 0);
        for (int64_t i = 0; i < d; ++i) row[i] = values[idx.next()];
      }
    }
  }
}

std::vector<int64_t> pool_shape(const StepSpec& s, int64_t pages, int64_t dim) {
  return s.layout == KVLayout::kNHD ? std::vector<int64_t>{pages, s.page_size, s.kv_heads, dim}
                                    : std::vector<int64_t>{pages, s.kv_heads, s.page_size, dim};
}

// fp32 [kv_heads]: base * (first + step * (h % 8)) for head h. The steps used keep the values
// positive and distinct over 8 heads (the cases' most) with at most 4 significant bits each, so
// that with the cases' power-of-two bases an fp8 code (4 bits) times its scale is still exact in
// bf16 (8 bits), whether the kernel applies the scale in fp32 or to the widened codes.
HostTensor head_scales(int kv_heads, float base, double first, double step) {
  HostTensor t(DType::kFP32, {kv_heads});
  for (int h = 0; h < kv_heads; ++h) t.set(h, base * (first + step * (h % 8)));
  return t;
}

double largest_v_scale(const HostStep& h) {
  if (!h.spec.per_head_scales) return std::fabs(h.spec.v_scale);
  double m = 0;
  for (int64_t i = 0; i < h.v_scale.numel(); ++i) m = std::max(m, std::fabs(h.v_scale.get(i)));
  return m;
}

// The step's k / v scale as BatchArgs takes it, the per-head tensor (the host or the device copy
// of HostStep::k_scale / v_scale) only with spec.per_head_scales. The scalar goes along with the
// per-head tensor, which overrides it (options.hpp): with a base other than 1, a kernel that
// applied both would be off by the base.
KVScale kv_scale_arg(const StepSpec& s, float value, const TensorView& per_head) {
  return KVScale{value, s.per_head_scales ? per_head : TensorView()};
}

bool sampling_allowed(const StepSpec& s) {
  const bool unmasked = !s.causal && s.window.left < 0 && s.window.right < 0;
  return s.causal || s.window.right == 0 || unmasked;
}

// Keys of the one-row request equivalent to row i of (q_len, kv_len) (see the header).
int32_t single_row_kv(const StepSpec& s, int32_t q_len, int32_t kv_len, int32_t i) {
  if (s.causal || s.window.right == 0) return kv_len - q_len + 1 + i;
  return kv_len;
}

double unit_roundoff(DType t) {
  return t == DType::kFP16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
}

bool all_poison(const void* p, size_t bytes) {
  const auto* c = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < bytes; ++i) {
    if (c[i] != kPoison) return false;
  }
  return true;
}

}  // namespace

int StepSpec::total_q() const {
  int t = 0;
  for (int q : q_lens) t += q;
  return t;
}

std::string describe(const StepSpec& s) {
  std::ostringstream os;
  os << s.name << ": Hkv " << s.kv_heads << " group " << s.group << " D " << s.head_dim << " page "
     << s.page_size << (s.layout == KVLayout::kNHD ? " NHD " : " HND ") << dtype_name(s.dtype)
     << " kv " << dtype_name(s.cache_dtype) << (s.causal ? " causal" : " full") << " window ("
     << s.window.left << ", " << s.window.right << ") softcap " << s.softcap
     << (s.sinks ? " sinks" : "") << " k_scale " << s.k_scale << " v_scale " << s.v_scale
     << (s.per_head_scales ? " (bases of per-head scales)" : "")
     << (s.fp8_all_codes ? " all fp8 codes" : "") << " ctas " << s.num_ctas << " B " << s.batch()
     << " total_q " << s.total_q()
     << (s.side_lane == plan::BatchOverlap::kOn    ? " side lane"
         : s.side_lane == plan::BatchOverlap::kOff ? " no side lane"
                                                   : "")
     << (s.partition == plan::BatchOverlap::kOn    ? " partition"
         : s.partition == plan::BatchOverlap::kOff ? " no partition"
                                                   : "");
  if (s.batch() <= 24) {
    os << " step (q/kv):";
    for (int b = 0; b < s.batch(); ++b) os << ' ' << s.q_lens[b] << '/' << s.kv_lens[b];
  }
  return os.str();
}

BatchAttentionConfig config_of(const StepSpec& s, Device device) {
  BatchAttentionConfig c;
  c.num_qo_heads = s.q_heads();
  c.num_kv_heads = s.kv_heads;
  c.head_dim = s.head_dim;
  c.page_size = s.page_size;
  c.kv_layout = s.layout;
  c.causal = s.causal;
  c.window = s.window;
  c.softcap = s.softcap;
  c.max_batch = s.max_batch > 0 ? s.max_batch : std::max(1, s.batch());
  c.max_tokens = s.max_tokens > 0 ? s.max_tokens : std::max(16, s.total_q());
  c.device = device;
  c.num_ctas = s.num_ctas;
  return c;
}

Device cuda_device() {
  int d = 0;
  check_cuda(cudaGetDevice(&d), "cudaGetDevice");
  return Device{DeviceType::kCUDA, d};
}

Geometry geometry_of(const StepSpec& s) {
  Geometry g;
  g.rows = s.total_q() + s.pad_rows;
  g.table_rows = std::max(1, s.batch());
  g.pages = 1;  // the poison page
  for (int32_t kv : s.kv_lens) {
    const int64_t n = (kv + s.page_size - 1) / s.page_size;
    g.pages += n;
    g.table_width = std::max(g.table_width, n);
  }
  return g;
}

Geometry cover(const Geometry& a, const Geometry& b) {
  return {std::max(a.rows, b.rows), std::max(a.pages, b.pages),
          std::max(a.table_rows, b.table_rows), std::max(a.table_width, b.table_width)};
}

std::unique_ptr<HostStep> make_host_step(const StepSpec& s, const Geometry& g,
                                         std::mt19937_64& rng) {
  auto h = std::make_unique<HostStep>();
  h->spec = s;
  h->geometry = g;
  h->cu.assign(1, 0);
  for (int q : s.q_lens) h->cu.push_back(h->cu.back() + q);
  h->kv = s.kv_lens;
  h->pages = PagePlan::fresh(h->kv, s.page_size);
  h->pages.shuffle(rng);
  if (h->pages.num_pages > g.pages || s.batch() > g.table_rows || h->total_q() > g.rows) {
    throw Error(ErrorKind::kValue, "batch test: the geometry is too small for " + describe(s));
  }
  const int64_t hq = s.q_heads(), d = s.head_dim;

  h->q = HostTensor(s.dtype, {g.rows, hq, d});
  h->q.fill_bytes(kPoison);
  {
    const std::vector<uint16_t> qv = value_table(s.dtype, rng, -2.0, 2.0, nullptr);
    auto* base = static_cast<uint16_t*>(h->q.data());
    FastIndex idx(rng());
    for (int64_t i = 0; i < int64_t{h->total_q()} * hq * d; ++i) base[i] = qv[idx.next()];
  }
  h->out = HostTensor(s.dtype, {g.rows, hq, d});
  h->lse = HostTensor(DType::kFP32, {g.rows, hq});
  h->out.fill_bytes(kPoison);
  h->lse.fill_bytes(kPoison);

  if (s.per_head_scales) {
    h->k_scale = head_scales(s.kv_heads, s.k_scale, 0.5, 0.125);   // base * 0.5 .. 1.375
    h->v_scale = head_scales(s.kv_heads, s.v_scale, 1.5, -0.125);  // base * 1.5 .. 0.625
  }
  h->k = HostTensor(s.cache_dtype, pool_shape(s, g.pages, d));
  h->v = HostTensor(s.cache_dtype, pool_shape(s, g.pages, d));
  if (dtype_size(s.cache_dtype) == 2) {
    const std::vector<uint16_t> kt = value_table(s.cache_dtype, rng, -1.0, 1.0, nullptr);
    const std::vector<uint16_t> vt = value_table(s.cache_dtype, rng, -1.0, 1.0, &h->vmax);
    fill_pool(h->k, *h, kt, rng());
    fill_pool(h->v, *h, vt, rng());
  } else if (s.cache_dtype == DType::kFP8E4M3) {
    const std::vector<uint8_t> codes = e4m3_table(s.fp8_all_codes, &h->vmax);
    fill_pool(h->k, *h, codes, rng());
    fill_pool(h->v, *h, codes, rng());
  } else {  // e5m2 and int8 caches only reach the rejection tests: any finite bytes
    h->k.fill_uniform(rng, -1.0, 1.0);
    h->v.fill_uniform(rng, -1.0, 1.0);
  }
  h->vmax *= largest_v_scale(*h);

  std::vector<int32_t> cu_full(g.table_rows + 1, h->total_q()), kv_full(g.table_rows, 0);
  std::copy(h->cu.begin(), h->cu.end(), cu_full.begin());
  std::copy(h->kv.begin(), h->kv.end(), kv_full.begin());
  h->cu_t = int_tensor(cu_full);
  h->kv_t = int_tensor(kv_full);
  std::vector<int32_t> table(g.table_rows * g.table_width, h->pages.poison_page);
  for (int b = 0; b < s.batch(); ++b) {
    std::copy(h->pages.pages_of[b].begin(), h->pages.pages_of[b].end(),
              table.begin() + b * g.table_width);
  }
  h->table = int_tensor(table, {g.table_rows, g.table_width});
  if (s.sinks) {
    h->sinks = HostTensor(DType::kFP32, {hq});
    h->sinks.fill_uniform(rng, -1.0, 2.0);
    if (hq > 1) h->sinks.set(0, -std::numeric_limits<double>::infinity());
  }
  return h;
}

TensorView leading(const TensorView& t, int64_t n) {
  int64_t shape[TensorView::kMaxRank], strides[TensorView::kMaxRank];
  for (int i = 0; i < t.rank(); ++i) shape[i] = t.size(i), strides[i] = t.stride(i);
  shape[0] = n;
  return TensorView(t.data(), t.dtype(), t.rank(), shape, strides, t.device());
}

Reference cpu_reference(const HostStep& h, std::mt19937_64& rng) {
  const auto start = std::chrono::steady_clock::now();
  const StepSpec& s = h.spec;
  const int64_t hq = s.q_heads(), d = s.head_dim, ps = s.page_size;
  // The reference's requests: whole requests, or one-row requests for sampled rows.
  std::vector<int32_t> ref_q, ref_kv;
  std::vector<int> ref_of;  // the GPU request behind each reference request
  Reference ref;
  for (int b = 0; b < s.batch(); ++b) {
    const int32_t q_len = s.q_lens[b], kv_len = h.kv[b];
    if (q_len == 0 || b % s.request_stride != 0) continue;
    if (s.sample_rows == 0 || q_len <= s.sample_rows) {
      ref_q.push_back(q_len);
      ref_kv.push_back(kv_len);
      ref_of.push_back(b);
      for (int32_t i = 0; i < q_len; ++i) ref.rows.push_back(h.cu[b] + i);
      continue;
    }
    if (!sampling_allowed(s)) {
      throw Error(ErrorKind::kValue, "batch test: rows of " + s.name +
                                         " cannot be sampled (a mask with right > 0 or "
                                         "non-causal with a left window); check every row");
    }
    std::set<int32_t> rows{0, 1, 2, q_len - 3, q_len - 2, q_len - 1};
    std::uniform_int_distribution<int32_t> pick(0, q_len - 1);
    while (static_cast<int>(rows.size()) < s.sample_rows) rows.insert(pick(rng));
    for (int32_t i : rows) {
      ref_q.push_back(1);
      ref_kv.push_back(single_row_kv(s, q_len, kv_len, i));
      ref_of.push_back(b);
      ref.rows.push_back(h.cu[b] + i);
    }
  }
  const int64_t n = static_cast<int64_t>(ref.rows.size());
  const int rb = static_cast<int>(ref_q.size());
  ref.out = HostTensor(DType::kFP32, {n, hq, d});
  ref.lse = HostTensor(DType::kFP32, {n, hq});
  if (n == 0) return ref;

  // Pages the reference requests read, renumbered into a compact fp32 pool (+ a poison page).
  std::vector<int32_t> page_map(h.geometry.pages, -1), used;
  int64_t width = 1;
  for (int r = 0; r < rb; ++r) {
    const int64_t np = (ref_kv[r] + ps - 1) / ps;
    width = std::max(width, np);
    for (int64_t i = 0; i < np; ++i) {
      const int32_t p = h.pages.pages_of[ref_of[r]][i];
      if (page_map[p] < 0) page_map[p] = static_cast<int32_t>(used.size()), used.push_back(p);
    }
  }
  const int32_t poison_page = static_cast<int32_t>(used.size());
  HostTensor k32(DType::kFP32, pool_shape(s, poison_page + 1, d));
  HostTensor v32(DType::kFP32, pool_shape(s, poison_page + 1, d));
  for (auto [src, dst] : {std::pair{&h.k, &k32}, std::pair{&h.v, &v32}}) {
    dst->fill_bytes(kPoison);
    const TensorView from = src->view(), to = dst->view();
    auto* out = static_cast<float*>(to.data());
    for (size_t np = 0; np < used.size(); ++np) {
      for (int64_t slot = 0; slot < ps; ++slot) {
        for (int64_t head = 0; head < s.kv_heads; ++head) {
          const int64_t a = pool_offset(from, s.layout, used[np], slot, head, 0);
          const int64_t z = pool_offset(to, s.layout, static_cast<int64_t>(np), slot, head, 0);
          for (int64_t i = 0; i < d; ++i) out[z + i] = float(load_element(from, a + i));
        }
      }
    }
  }
  std::vector<int32_t> table(rb * width, poison_page), cu(1, 0);
  for (int r = 0; r < rb; ++r) {
    const int64_t np = (ref_kv[r] + ps - 1) / ps;
    for (int64_t i = 0; i < np; ++i)
      table[r * width + i] = page_map[h.pages.pages_of[ref_of[r]][i]];
    cu.push_back(cu.back() + ref_q[r]);
  }
  HostTensor q32(DType::kFP32, {n, hq, d});
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < hq * d; ++i) q32.set(r * hq * d + i, h.q.get(ref.rows[r] * hq * d + i));
  }
  const HostTensor table_t = int_tensor(table, {rb, width});
  const HostTensor cu_t = int_tensor(cu), kv_t = int_tensor(ref_kv);

  StepSpec rs = s;
  rs.q_lens = ref_q;
  rs.kv_lens = ref_kv;
  rs.max_batch = rb;
  rs.max_tokens = static_cast<int>(n);
  BatchAttention cpu(config_of(rs, Device{}));
  cpu.plan(cu.data(), ref_kv.data(), rb);
  BatchArgs a;
  a.q = q32;
  a.k_cache = k32;
  a.v_cache = v32;
  a.cu_seqlens_q = cu_t;
  a.kv_lens = kv_t;
  a.page_table = table_t;
  a.sinks = h.sinks.view();
  a.k_scale = kv_scale_arg(s, s.k_scale, h.k_scale);
  a.v_scale = kv_scale_arg(s, s.v_scale, h.v_scale);
  a.out = ref.out;
  a.lse = ref.lse;
  cpu.run(a);
  ref.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return ref;
}

void DeviceCopy::put(const HostTensor& h, size_t front) {
  if (!h.view().defined()) return;
  if (!t) {
    t = std::make_unique<DeviceTensor>(h, front);
    view = t->mirror(h.view());
  } else {
    t->upload(h);  // same geometry: same byte count
  }
}

void DeviceStep::upload(const HostStep& h) {
  q_.put(h.q);
  const size_t front = h.spec.pool_at_allocation_start ? 0 : size_t{1} << 20;
  k_.put(h.k, front);
  v_.put(h.v, front);
  out_.put(h.out);
  lse_.put(h.lse);
  cu_.put(h.cu_t);
  kv_.put(h.kv_t);
  table_.put(h.table);
  sinks_.put(h.sinks);
  k_scale_.put(h.k_scale);
  v_scale_.put(h.v_scale);
}

BatchArgs DeviceStep::args(const HostStep& h, Workspace ws) const {
  BatchArgs a;
  a.q = q_.view;
  a.k_cache = k_.view;
  a.v_cache = v_.view;
  a.cu_seqlens_q = leading(cu_.view, h.batch() + 1);
  a.kv_lens = leading(kv_.view, h.batch());
  a.page_table = leading(table_.view, h.batch());
  a.sinks = h.spec.sinks ? sinks_.view : TensorView();
  a.k_scale = kv_scale_arg(h.spec, h.spec.k_scale, k_scale_.view);
  a.v_scale = kv_scale_arg(h.spec, h.spec.v_scale, v_scale_.view);
  a.out = out_.view;
  a.lse = lse_.view;
  a.workspace = ws;
  return a;
}

void DeviceStep::poison_outputs() {
  out_.t->poison();
  lse_.t->poison();
}

Outputs DeviceStep::download(const HostStep& h) const {
  Outputs o{HostTensor(h.out.dtype(), h.out.shape()), HostTensor(DType::kFP32, h.lse.shape())};
  out_.t->download(o.out);
  lse_.t->download(o.lse);
  return o;
}

DeviceWorkspace::DeviceWorkspace(size_t bytes) : buffer(bytes) {
  check_cuda(cudaMemset(buffer.data(), 0, bytes > 0 ? bytes : 16), "cudaMemset(workspace)");
  ws = {buffer.data(), bytes};
}

const char* plan_mode_name(PlanMode m) {
  switch (m) {
    case PlanMode::kUploadArrays:
      return "plan(arrays, workspace, stream)";
    case PlanMode::kUploadTensors:
      return "plan(tensors, workspace, stream)";
    case PlanMode::kPlain:
      return "plan(arrays), run uploads";
  }
  return "?";
}

void plan_step(BatchAttention& ba, const HostStep& h, PlanMode mode, Workspace ws,
               const CudaStream& stream) {
  switch (mode) {
    case PlanMode::kUploadArrays:
      ba.plan(h.cu.data(), h.kv.data(), h.batch(), ws, stream.api());
      break;
    case PlanMode::kUploadTensors:
      ba.plan(leading(h.cu_t, h.batch() + 1), leading(h.kv_t, h.batch()), ws, stream.api());
      break;
    case PlanMode::kPlain:
      ba.plan(h.cu.data(), h.kv.data(), h.batch());
      break;
  }
}

Outputs run_once(const BatchAttention& ba, DeviceStep& dev, const HostStep& h, Workspace ws,
                 const CudaStream& stream) {
  dev.poison_outputs();
  ba.run(dev.args(h, ws), stream.api());
  stream.sync("BatchAttention.run");
  return dev.download(h);
}

Verdict judge(const HostStep& h, const Outputs& got, const Reference& ref) {
  const StepSpec& s = h.spec;
  const int64_t hq = s.q_heads(), d = s.head_dim, rows = h.geometry.rows;
  Verdict v;
  v.tol = 4.0 * unit_roundoff(s.dtype) * std::max(h.vmax, 1e-3);
  auto note = [&](const std::string& what) {
    if (v.first.empty()) v.first = what;
  };
  const size_t out_row = static_cast<size_t>(hq * d) * dtype_size(s.dtype);
  const auto* out_bytes = static_cast<const uint8_t*>(got.out.view().data());
  const auto* lse_bytes = static_cast<const uint8_t*>(got.lse.view().data());
  for (int64_t r = 0; r < rows; ++r) {
    if (r >= h.total_q()) {
      if (!all_poison(out_bytes + r * out_row, out_row) ||
          !all_poison(lse_bytes + r * hq * 4, hq * 4)) {
        if (v.pad_written++ == 0) note("row " + std::to_string(r) + " past the step was written");
      }
      continue;
    }
    for (int64_t i = 0; i < hq * d; ++i) {
      if (!std::isfinite(got.out.get(r * hq * d + i)) && v.unwritten++ == 0) {
        note("out row " + std::to_string(r) + " holds NaN / Inf (element " + std::to_string(i) +
             ")");
      }
    }
    for (int64_t i = 0; i < hq; ++i) {
      const double l = got.lse.get(r * hq + i);
      if ((std::isnan(l) || l == std::numeric_limits<double>::infinity()) && v.unwritten++ == 0) {
        note("lse row " + std::to_string(r) + " holds " + std::to_string(l));
      }
    }
  }
  for (size_t n = 0; n < ref.rows.size(); ++n) {
    const int64_t r = ref.rows[n];
    for (int64_t i = 0; i < hq * d; ++i) {
      const double g = got.out.get(r * hq * d + i), w = ref.out.get(n * hq * d + i);
      const double err = std::fabs(g - w);
      ++v.checked;
      if (!(err <= v.tol)) {
        if (v.bad++ == 0) {
          std::ostringstream os;
          os << "out[" << r << "][" << i / d << "][" << i % d << "] = " << g << ", want " << w;
          note(os.str());
        }
      }
      if (std::isnan(err) || err > v.max_err) v.max_err = err;
    }
    for (int64_t i = 0; i < hq; ++i) {
      const double g = got.lse.get(r * hq + i), w = ref.lse.get(n * hq + i);
      const bool ok = std::isinf(w) ? g == w : std::fabs(g - w) <= 1e-3;
      if (!ok && v.bad_lse++ == 0) {
        std::ostringstream os;
        os << "lse[" << r << "][" << i << "] = " << g << ", want " << w;
        note(os.str());
      }
      if (std::isfinite(w)) v.max_lse_err = std::max(v.max_lse_err, std::fabs(g - w));
    }
  }
  return v;
}

void expect_good(const Verdict& v, const std::string& what) {
  EXPECT_EQ(v.unwritten, 0) << what
                            << ": elements of the step's rows left NaN / Inf; first: " << v.first;
  EXPECT_EQ(v.pad_written, 0) << what
                              << ": rows past the step's tokens were written; first: " << v.first;
  EXPECT_EQ(v.bad, 0) << what << ": " << v.bad << " of " << v.checked << " outputs beyond " << v.tol
                      << " (max err " << v.max_err << "); first: " << v.first;
  EXPECT_EQ(v.bad_lse, 0) << what << ": " << v.bad_lse
                          << " lse values beyond 1e-3; first: " << v.first;
}

bool bitwise_equal(const Outputs& a, const Outputs& b) {
  const size_t out_bytes = static_cast<size_t>(a.out.numel()) * dtype_size(a.out.dtype());
  const size_t lse_bytes = static_cast<size_t>(a.lse.numel()) * sizeof(float);
  return a.out.numel() == b.out.numel() && a.lse.numel() == b.lse.numel() &&
         std::memcmp(a.out.view().data(), b.out.view().data(), out_bytes) == 0 &&
         std::memcmp(a.lse.view().data(), b.lse.view().data(), lse_bytes) == 0;
}

void print_line(const HostStep& h, const BatchPlanSummary& p, const Verdict& v,
                const Reference& ref, const char* extra) {
  std::printf(
      "[ batch ] %s%s: B %d total_q %d items %d merges %d max splits %d; %zu rows checked, "
      "max err %.3g (tol %.3g), lse max err %.3g; reference %.2f s\n",
      h.spec.name.c_str(), extra, p.batch, p.total_q, p.num_items, p.num_merges, p.num_splits_max,
      ref.rows.size(), v.max_err, v.tol, v.max_lse_err, ref.seconds);
}

// The second run's claims (placement.cuh): each of the groups x P prefill slots claimed, no bit
// past them, and at least as many CTAs counted on the order's decode SMs as it has; and the ranks
// a permutation of the SMs (the GPC probe's order, or the one given). Only where the launch was
// placed: a grid of one CTA a card's SM.
void expect_placed(const BatchAttention& ba, const StepSpec& s) {
  const kernels::batch::SmPlacement* placement =
      internal::BatchAttentionVariants::concurrent_sm_placement(ba);
  ASSERT_NE(placement, nullptr) << s.name << ": no SM placement made";
  const int sms = placement->sms();
  const int ctas = s.num_ctas != 0 ? s.num_ctas : plan::kBatchDefaultCtas;
  if (sms != ctas) return;  // not placed: the grid is not one CTA an SM of this card
  std::vector<int16_t> ranks(static_cast<size_t>(sms));
  ASSERT_EQ(cudaMemcpy(ranks.data(), placement->ranks(), sizeof(int16_t) * ranks.size(),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  std::vector<int> seen(static_cast<size_t>(sms), 0);
  for (int i = 0; i < sms; ++i) {
    const int r = ranks[static_cast<size_t>(i)];
    ASSERT_TRUE(r >= 0 && r < sms) << s.name << ": SM " << i << " has rank " << r;
    ++seen[static_cast<size_t>(r)];
    if (!s.concurrent_sm_order.empty()) {
      EXPECT_EQ(s.concurrent_sm_order[static_cast<size_t>(r)], i) << s.name << ": rank of SM " << i;
    }
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), sms) << s.name << ": ranks not a permutation";
  const int slots = plan::batch_plan_groups(s.kv_heads, ctas) * ba.planned().concurrent_ctas;
  std::vector<uint32_t> words(1 + (sms + 31) / 32);
  ASSERT_EQ(cudaMemcpy(words.data(), placement->claims(), sizeof(uint32_t) * words.size(),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_GE(words[0], static_cast<uint32_t>(sms - slots)) << s.name << ": decode SMs counted";
  for (int w = 1; w < static_cast<int>(words.size()); ++w) {
    for (int b = 0; b < 32; ++b) {
      const int slot = (w - 1) * 32 + b;
      EXPECT_EQ((words[w] >> b) & 1u, slot < slots ? 1u : 0u) << s.name << ": slot " << slot;
    }
  }
}

BatchPlanSummary check_step(const StepSpec& s, PlanMode mode) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  SCOPED_TRACE(describe(s) + ", " + plan_mode_name(mode));
  std::mt19937_64 rng(seed);
  const auto h = make_host_step(s, geometry_of(s), rng);
  const Reference ref = cpu_reference(*h, rng);

  BatchAttention ba(config_of(s, cuda_device()));
  internal::BatchAttentionVariants::side_decodes(ba, s.side_lane);
  internal::BatchAttentionVariants::partition_decodes(
      ba, s.partition, plan::BatchPlanLimits{}.decode_cta_rate_milli);
  internal::BatchAttentionVariants::concurrent_decodes(
      ba, s.concurrent, plan::BatchPlanLimits{}.concurrent_rate_milli);
  internal::BatchAttentionVariants::concurrent_decode_kernel(ba, s.concurrent_decode_kernel);
  internal::BatchAttentionVariants::concurrent_tail(ba, s.concurrent_tail_milli);
  internal::BatchAttentionVariants::concurrent_sm_order(ba, s.concurrent_sm_order);
  if (s.concurrent_sm_gpc) internal::BatchAttentionVariants::concurrent_sm_spread(ba);
  DeviceStep dev(*h);
  const DeviceWorkspace ws(ba.workspace_size());
  const CudaStream stream;
  plan_step(ba, *h, mode, ws.ws, stream);
  const Outputs first = run_once(ba, dev, *h, ws.ws, stream);
  const Outputs second = run_once(ba, dev, *h, ws.ws, stream);
  const Verdict v = judge(*h, first, ref);
  expect_good(v, s.name);
  EXPECT_TRUE(bitwise_equal(first, second)) << s.name << ": a second run differs bitwise";
  if (!s.concurrent_sm_order.empty() || s.concurrent_sm_gpc) expect_placed(ba, s);
  print_line(*h, ba.planned(), v, ref, "");
  return ba.planned();
}

}  // namespace hopattn::testing::batch_check
