// Where token t of request b, head h, feature d lives in a K or V tensor: contiguous (dense
// [B, S, H, D]), varlen ([total, H, D] + cu_seqlens) or paged (NHD/HND pools + a block table or
// CSR page list). All address math in int64. Index tensors must be host-resident.
#pragma once

#include <cstdint>

#include "common/element_access.hpp"
#include "hopattn/options.hpp"

namespace hopattn::reference {

class KVLocator {
 public:
  enum class Mode { kDense, kVarlen, kPaged };

  // Dense: tensor [B, S, H, D].
  static KVLocator dense(const TensorView& t) { return KVLocator(Mode::kDense, t, {}, {}); }
  // Varlen: tensor [total, H, D], cu_seqlens int32 [B + 1].
  static KVLocator varlen(const TensorView& t, const TensorView& cu_seqlens) {
    return KVLocator(Mode::kVarlen, t, cu_seqlens, {});
  }
  // Paged: pool [P, page_size, H, D] (NHD) or [P, H, page_size, D] (HND).
  static KVLocator paged(const TensorView& pool, const PageTable& pages) {
    return KVLocator(Mode::kPaged, pool, {}, pages);
  }

  Mode mode() const { return mode_; }
  const TensorView& tensor() const { return t_; }
  int64_t page_size() const;
  int64_t num_heads() const;
  int64_t head_dim() const { return t_.size(-1); }
  // Physical page holding token t of request b (paged mode only).
  int64_t page_of(int64_t b, int64_t t) const;
  // Element offset of (request b, token t, head h, feature d).
  int64_t offset(int64_t b, int64_t t, int64_t h, int64_t d) const;

 private:
  KVLocator(Mode mode, const TensorView& t, const TensorView& cu, const PageTable& pages)
      : mode_(mode), t_(t), cu_(cu), pages_(pages) {}
  Mode mode_;
  TensorView t_;
  TensorView cu_;
  PageTable pages_;
};

// Integer element i of a host int32 index tensor (cu_seqlens, kv_lens, ...), honoring its stride.
inline int64_t index_at(const TensorView& t, int64_t i) {
  return t.data_as<const int32_t>()[i * t.stride(0)];
}
inline int64_t index_at(const TensorView& t, int64_t i, int64_t j) {
  return t.data_as<const int32_t>()[i * t.stride(0) + j * t.stride(1)];
}

// Dequantization scale of KV head h of a cache (real = stored * scale): the per-head tensor when
// given, else the per-tensor value.
inline double kv_scale(const KVScale& s, int64_t kv_head) {
  if (s.per_head.defined()) return load_element(s.per_head, kv_head * s.per_head.stride(0));
  return s.value;
}

}  // namespace hopattn::reference
