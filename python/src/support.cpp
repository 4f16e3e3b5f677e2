// Probes for the support matrix: each builds one small, otherwise valid call of a family with the
// asked-for dtype / head dim / page size / feature, runs the family's validator on it (for a CPU
// or a CUDA device) and returns None when the validator accepts it, else its message. The matrix
// is therefore what the library's own checks accept, not a hand-written list.
//
// Nothing is launched and no device memory is touched: the validators read index values only
// for host tensors, and only check the addresses and strides of CUDA ones. Every view still points
// at real, zeroed host memory (with valid index values), so even a read would be harmless.
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/validate.hpp"
#include "bindings.hpp"
#include "hopattn/api.hpp"
#include "hopattn/error.hpp"

namespace hopattn::python {

using namespace nb::literals;

namespace {

DType dtype_named(const std::string& name) {
  static const std::pair<const char*, DType> kNames[] = {
      {"bf16", DType::kBF16},        {"fp16", DType::kFP16},        {"fp32", DType::kFP32},
      {"fp8_e4m3", DType::kFP8E4M3}, {"fp8_e5m2", DType::kFP8E5M2}, {"int8", DType::kInt8},
  };
  for (const auto& [n, t] : kNames) {
    if (name == n) return t;
  }
  throw Error(ErrorKind::kValue,
              "probe dtype: expected bf16, fp16, fp32, fp8_e4m3, fp8_e5m2 or "
              "int8, got \"" +
                  name + "\"");
}

Device device_named(const std::string& name) {
  if (name == "cpu") return {DeviceType::kCPU, 0};
  if (name == "cuda") return {DeviceType::kCUDA, 0};
  throw Error(ErrorKind::kValue,
              "probe device: expected \"cpu\" or \"cuda\", got \"" + name + "\"");
}

// Zeroed host blocks, 256-byte aligned (TMA checks look at addresses), alive for one probe.
class Arena {
 public:
  explicit Arena(Device device) : device_(device) {}

  TensorView tensor(DType dtype, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return view(allocate(static_cast<size_t>(n) * dtype_size(dtype)), dtype, shape);
  }

  TensorView index(const std::vector<int32_t>& values, std::vector<int64_t> shape) {
    return filled(values, DType::kInt32, shape);
  }

  TensorView floats(const std::vector<float>& values, std::vector<int64_t> shape) {
    return filled(values, DType::kFP32, shape);
  }

  // Same shape and dtype as `t`, fresh memory.
  TensorView like(const TensorView& t) {
    std::vector<int64_t> shape(static_cast<size_t>(t.rank()));
    for (int i = 0; i < t.rank(); ++i) shape[i] = t.size(i);
    return tensor(t.dtype(), shape);
  }

  Workspace workspace(size_t bytes) { return {bytes ? allocate(bytes) : nullptr, bytes}; }

 private:
  void* allocate(size_t bytes) {
    constexpr size_t kAlign = 256;
    blocks_.push_back(std::make_unique<unsigned char[]>(bytes + kAlign));
    const auto base = reinterpret_cast<uintptr_t>(blocks_.back().get());
    unsigned char* p = blocks_.back().get() + ((kAlign - base % kAlign) % kAlign);
    std::memset(p, 0, bytes);
    return p;
  }

  template <typename T>
  TensorView filled(const std::vector<T>& values, DType dtype, const std::vector<int64_t>& shape) {
    void* p = allocate(values.size() * sizeof(T));
    if (!values.empty()) std::memcpy(p, values.data(), values.size() * sizeof(T));
    return view(p, dtype, shape);
  }

  TensorView view(void* data, DType dtype, const std::vector<int64_t>& shape) {
    return TensorView(data, dtype, static_cast<int>(shape.size()), shape.data(), nullptr, device_);
  }

  Device device_;
  std::vector<std::unique_ptr<unsigned char[]>> blocks_;
};

// Workspace sizes (host functions of the shapes, in every build) throw for calls the kernels do
// not take (decode: a head dim, too many beams); the validators call the same sizing function
// last. A probe then gives no workspace, and a validator failing with the sizing's own message
// has accepted everything else: that is the argument contract we report.
template <typename Size, typename Validate>
void validate_sized(Arena& arena, Workspace& workspace, Size&& size, Validate&& validate) {
  std::string sizing_error;
  try {
    workspace = arena.workspace(size());
  } catch (const Error& e) {
    sizing_error = e.what();
  }
  try {
    validate();
  } catch (const Error& e) {
    if (sizing_error.empty() || sizing_error != e.what()) throw;
  }
}

template <typename Fn>
nb::object verdict(Fn&& validate) {
  try {
    validate();
  } catch (const Error& e) {
    return nb::str(e.what());
  }
  return nb::none();
}

// A paged cache for `batch` requests of `kv_len` tokens: pools, block table (request b owns pages
// b*per .. b*per+per-1) and kv_lens.
struct Pages {
  PageTable table;
  int64_t num_pages = 0;
};

Pages make_pages(Arena& arena, int64_t batch, int64_t kv_len, int64_t page_size,
                 const std::string& layout) {
  const int64_t per = (kv_len + page_size - 1) / page_size;
  std::vector<int32_t> block(static_cast<size_t>(batch * per));
  for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<int32_t>(i);
  Pages p;
  p.num_pages = batch * per;
  p.table.block_table = arena.index(block, {batch, per});
  p.table.kv_lens = arena.index(std::vector<int32_t>(batch, static_cast<int32_t>(kv_len)), {batch});
  p.table.layout = layout == "HND" ? KVLayout::kHND : KVLayout::kNHD;
  return p;
}

std::vector<int64_t> pool_shape(const Pages& p, int64_t page_size, int64_t heads, int64_t dim) {
  return p.table.layout == KVLayout::kNHD
             ? std::vector<int64_t>{p.num_pages, page_size, heads, dim}
             : std::vector<int64_t>{p.num_pages, heads, page_size, dim};
}

// ---------------------------------------------------------------- attention (fwd and bwd)
nb::object probe_attention(const std::string& device, const std::string& dtype_name, int dqk,
                           int dv, int hq, int hkv, const std::string& mode, int page_size,
                           const std::string& kv_layout, bool causal, int window_left,
                           int window_right, float softcap, bool sinks, bool backward,
                           bool deterministic) {
  return verdict([&] {
    Arena arena(device_named(device));
    const DType dtype = dtype_named(dtype_name);
    const int64_t sq = 3, sk = 5;
    FwdArgs f;
    if (mode == "dense") {
      f.q = arena.tensor(dtype, {1, sq, hq, dqk});
      f.k = arena.tensor(dtype, {1, sk, hkv, dqk});
      f.v = arena.tensor(dtype, {1, sk, hkv, dv});
      f.out = arena.tensor(dtype, {1, sq, hq, dv});
      f.lse = arena.tensor(DType::kFP32, {1, sq, hq});
    } else {
      f.q = arena.tensor(dtype, {sq, hq, dqk});
      f.out = arena.tensor(dtype, {sq, hq, dv});
      f.lse = arena.tensor(DType::kFP32, {sq, hq});
      f.cu_seqlens_q = arena.index({0, static_cast<int32_t>(sq)}, {2});
      f.max_seqlen_q = sq;
      f.max_seqlen_k = sk;
      if (mode == "paged") {
        const Pages p = make_pages(arena, 1, sk, page_size, kv_layout);
        f.pages = p.table;
        f.k = arena.tensor(dtype, pool_shape(p, page_size, hkv, dqk));
        f.v = arena.tensor(dtype, pool_shape(p, page_size, hkv, dv));
      } else {
        f.k = arena.tensor(dtype, {sk, hkv, dqk});
        f.v = arena.tensor(dtype, {sk, hkv, dv});
        f.cu_seqlens_k = arena.index({0, static_cast<int32_t>(sk)}, {2});
      }
    }
    if (sinks) f.sinks = arena.tensor(DType::kFP32, {hq});
    AttentionOptions o;
    o.causal = causal;
    o.window = {window_left, window_right};
    o.softcap = softcap;
    o.deterministic = deterministic;
    if (!backward) {
      validate::attention_fwd(f, o);
      return;
    }
    BwdArgs b;
    b.fwd = f;
    b.dout = arena.like(f.out);
    b.dq = arena.like(f.q);
    b.dk = arena.like(f.k);
    b.dv = arena.like(f.v);
    if (sinks) b.dsinks = arena.tensor(DType::kFP32, {hq});
    validate_sized(
        arena, b.workspace, [&] { return attention_bwd_workspace_size(b, o); },
        [&] { validate::attention_bwd(b, o); });
  });
}

// ---------------------------------------------------------------- decode
nb::object probe_decode(const std::string& device, const std::string& q_dtype,
                        const std::string& kv_dtype, int head_dim, int hq, int hkv, int q_len,
                        int page_size, const std::string& kv_layout, bool causal, int window_left,
                        int window_right, float softcap, bool sinks, bool per_head_scales,
                        bool tree_mask, int beam_width, bool shared_prefix, int num_splits) {
  return verdict([&] {
    Arena arena(device_named(device));
    const DType qt = dtype_named(q_dtype), kt = dtype_named(kv_dtype);
    const int64_t batch = beam_width, kv_len = q_len + 4;
    const Pages p = make_pages(arena, batch, kv_len, page_size, kv_layout);
    DecodeArgs a;
    a.q = arena.tensor(qt, {batch, q_len, hq, head_dim});
    a.k_cache = arena.tensor(kt, pool_shape(p, page_size, hkv, head_dim));
    a.v_cache = arena.tensor(kt, pool_shape(p, page_size, hkv, head_dim));
    a.pages = p.table;
    a.out = arena.tensor(qt, {batch, q_len, hq, head_dim});
    a.lse = arena.tensor(DType::kFP32, {batch, q_len, hq});
    if (sinks) a.sinks = arena.tensor(DType::kFP32, {hq});
    if (per_head_scales) {
      a.k_scale.per_head = arena.floats(std::vector<float>(hkv, 1.f), {hkv});
      a.v_scale.per_head = arena.floats(std::vector<float>(hkv, 1.f), {hkv});
    }
    if (tree_mask) a.tree_mask = arena.tensor(DType::kBool, {batch, q_len, q_len});
    if (shared_prefix) a.shared_kv_lens = arena.index({2}, {1});  // 2 tokens shared by the beams
    DecodeOptions o;
    o.causal = causal;
    o.window = {window_left, window_right};
    o.softcap = softcap;
    o.beam_width = beam_width;
    o.num_splits = num_splits;
    validate_sized(
        arena, a.workspace, [&] { return decode_workspace_size(a, o); },
        [&] { validate::decode(a, o); });
  });
}

// ---------------------------------------------------------------- mla, merge
nb::object probe_mla(const std::string& device, const std::string& dtype_name, int heads, int q_len,
                     int page_size, bool causal, const std::string& kv_dtype_name) {
  return verdict([&] {
    Arena arena(device_named(device));
    const DType dtype = dtype_named(dtype_name);
    const DType kv_dtype = kv_dtype_name.empty() ? dtype : dtype_named(kv_dtype_name);
    const int64_t kv_len = q_len + 4;
    const Pages p = make_pages(arena, 1, kv_len, page_size, "NHD");
    MlaArgs a;
    a.q_nope = arena.tensor(dtype, {q_len, heads, kMlaLatentDim});
    a.q_pe = arena.tensor(dtype, {q_len, heads, kMlaRopeDim});
    a.ckv = arena.tensor(kv_dtype, {p.num_pages, page_size, kMlaLatentDim});
    a.kpe = arena.tensor(kv_dtype, {p.num_pages, page_size, kMlaRopeDim});
    a.cu_seqlens_q = arena.index({0, q_len}, {2});
    a.max_seqlen_q = q_len;
    a.pages = p.table;
    a.out = arena.tensor(dtype, {q_len, heads, kMlaLatentDim});
    a.lse = arena.tensor(DType::kFP32, {q_len, heads});
    MlaOptions o;
    o.causal = causal;
    validate::mla(a, o);
  });
}

nb::object probe_merge(const std::string& device, const std::string& dtype_name, int head_dim,
                       int n) {
  return verdict([&] {
    Arena arena(device_named(device));
    const DType dtype = dtype_named(dtype_name);
    const int64_t tokens = 3, heads = 2;
    if (n == 2) {
      MergeArgs a;
      a.o_a = arena.tensor(dtype, {tokens, heads, head_dim});
      a.o_b = arena.tensor(dtype, {tokens, heads, head_dim});
      a.lse_a = arena.tensor(DType::kFP32, {tokens, heads});
      a.lse_b = arena.tensor(DType::kFP32, {tokens, heads});
      a.out = arena.tensor(dtype, {tokens, heads, head_dim});
      a.lse = arena.tensor(DType::kFP32, {tokens, heads});
      validate::merge_states(a);
      return;
    }
    MergeNArgs a;
    a.o = arena.tensor(dtype, {tokens, n, heads, head_dim});
    a.lse = arena.tensor(DType::kFP32, {tokens, n, heads});
    a.out = arena.tensor(dtype, {tokens, heads, head_dim});
    a.lse_out = arena.tensor(DType::kFP32, {tokens, heads});
    validate::merge_states_n(a);
  });
}

}  // namespace

void bind_support(nb::module_& m) {
  m.def("probe_attention", &probe_attention, "device"_a, "dtype"_a, "head_dim_qk"_a, "head_dim_v"_a,
        "hq"_a, "hkv"_a, "mode"_a, "page_size"_a, "kv_layout"_a, "causal"_a, "window_left"_a,
        "window_right"_a, "softcap"_a, "sinks"_a, "backward"_a, "deterministic"_a,
        "None when attention_fwd/bwd's validator accepts this configuration, else its message.");
  m.def("probe_decode", &probe_decode, "device"_a, "q_dtype"_a, "kv_dtype"_a, "head_dim"_a, "hq"_a,
        "hkv"_a, "q_len"_a, "page_size"_a, "kv_layout"_a, "causal"_a, "window_left"_a,
        "window_right"_a, "softcap"_a, "sinks"_a, "per_head_scales"_a, "tree_mask"_a,
        "beam_width"_a, "shared_prefix"_a, "num_splits"_a,
        "None when decode's validator accepts this configuration, else its message.");
  m.def("probe_mla", &probe_mla, "device"_a, "dtype"_a, "heads"_a, "q_len"_a, "page_size"_a,
        "causal"_a, "kv_dtype"_a = "",
        "None when mla's validator accepts this configuration (kv_dtype empty: q's), else its "
        "message.");
  m.def("probe_merge", &probe_merge, "device"_a, "dtype"_a, "head_dim"_a, "n"_a,
        "None when merge_states (n = 2) or merge_states_n's validator accepts this, else its "
        "message.");
}

}  // namespace hopattn::python
