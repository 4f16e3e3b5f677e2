// Checks shared by the validators of every entry point. A Checker names the entry point and the
// device the call runs on; each method throws hopattn::Error with the library's one message form,
// "hopattn.<function>: <argument>: expected <what>, got <what>", and builds that message only on
// failure, so validating a good call costs a few comparisons per tensor (it runs on every launch).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "api/validate.hpp"
#include "hopattn/error.hpp"
#include "hopattn/options.hpp"

namespace hopattn::validate {

inline constexpr int64_t kMaxHeadDim = 1024;   // CPU reference: any Dqk, Dv in 1..kMaxHeadDim
inline constexpr int64_t kMaxPageSize = 256;   // DESIGN.md: any page_size 1..256
inline constexpr int64_t kTmaAlignBytes = 16;  // TMA: global address and strides, in bytes

// A shape to compare a tensor against.
class Shape {
 public:
  Shape(std::initializer_list<int64_t> dims);
  static Shape of(const TensorView& t);
  // A copy with dimension `dim` (negative: from the back) set to `size`.
  Shape with(int dim, int64_t size) const;
  Shape without_last() const;
  bool matches(const TensorView& t) const;
  std::string str() const;

 private:
  Shape() = default;
  std::array<int64_t, TensorView::kMaxRank> dims_{};
  int rank_ = 0;
};

// A set of accepted dtypes, with an optional note for the message ("q's dtype").
class DTypes {
 public:
  DTypes(std::initializer_list<DType> types, const char* note = nullptr);
  bool contains(DType t) const { return (mask_ >> static_cast<unsigned>(t)) & 1u; }
  std::string str() const;  // "bf16, fp16 or fp32 (note)"

 private:
  uint32_t mask_ = 0;
  const char* note_ = nullptr;
};

// "96" when Dqk == Dv, else "(Dqk 192, Dv 64)": how head dims read in messages.
std::string head_dims_string(int64_t dqk, int64_t dv);

// Where the pages of a paged KV cache are and how big they are.
struct PagePool {
  int64_t num_pages = 0;
  int64_t page_size = 0;
  int64_t num_heads = 1;
  int64_t head_dim = 0;
};

// What a set of row offsets must agree with.
struct OffsetsRule {
  int64_t rows;                 // the last offset is at most this: the rows of `rows_of`
  std::string_view rows_of;     // "q"
  int64_t batch = -1;           // B, when an earlier argument fixed it (-1: any)
  std::string_view batch_from;  // that argument
  int max_len = 0;              // > 0: every length (offset difference) is at most this
  std::string_view max_name;    // "max_seqlen_q"
};

// A tensor argument and the name it goes by in messages.
struct Arg {
  const TensorView* t;
  std::string_view name;
};

// Whether two elements of `t` can be one address: zero strides (numpy stride tricks, torch
// expand) or strides that interleave. Conservative: with the dims sorted by |stride|, each stride
// must exceed the farthest offset the smaller dims reach, which every dense or sliced layout
// meets; an exotic layout that fails it while still disjoint is reported as overlapping.
bool overlaps_itself(const TensorView& t);
// Whether a and b can share memory: their byte spans intersect, unless they are two views of one
// layout (same shape, strides and element size, as dk and dv sliced out of one packed dkv
// buffer) that together, as one tensor with an extra dim of 2, do not overlap themselves.
bool may_share_memory(const TensorView& a, const TensorView& b);

class Checker {
 public:
  // `function`: the public entry point ("decode"). `anchor` (named `anchor_name`, e.g. q) fixes
  // the device the whole call runs on; it must be defined.
  Checker(const char* function, const TensorView& anchor, const char* anchor_name,
          DeviceValues values = DeviceValues::kUnread);

  bool on_cuda() const { return device_.is_cuda(); }
  // Index values (cu_seqlens, page tables, lengths; sinks and per-head scales too) are read only
  // when they are in host memory: reading device memory would synchronize the device, which no
  // entry point may do. Debug mode passes host copies of a CUDA call's ones (kHostCopies).
  bool reads_index_values() const { return !on_cuda() || values_ == DeviceValues::kHostCopies; }

  [[noreturn]] void fail(ErrorKind kind, std::string_view arg, const std::string& expected,
                         const std::string& given) const;
  template <typename Given>
  [[noreturn]] void fail(ErrorKind kind, std::string_view arg, const std::string& expected,
                         const Given& given) const {
    fail(kind, arg, expected, detail::concat(given));
  }
  // For checks whose expected and given texts are constants or numbers (nothing to format
  // unless the check fails).
  template <typename Expected, typename Given>
  void require(bool ok, ErrorKind kind, std::string_view arg, const Expected& expected,
               const Given& given) const {
    if (!ok) fail(kind, arg, detail::concat(expected), detail::concat(given));
  }

  // ---- tensors
  // Present, with non-negative sizes, an element count and byte offsets that fit in int64, and
  // a data pointer when it has elements.
  void defined(const TensorView& t, std::string_view arg) const;
  // On the anchor's device: one call runs on one device.
  void same_device(const TensorView& t, std::string_view arg) const;
  void dtype(const TensorView& t, std::string_view arg, const DTypes& allowed) const;
  // `dims` describes the expected dimensions: "[B, q_len, Hq, D]".
  void rank(const TensorView& t, std::string_view arg, int rank, std::string_view dims) const;
  // `why` says where the expected shape comes from: "q's shape with Dv last".
  void shape(const TensorView& t, std::string_view arg, const Shape& expected,
             std::string_view why) const;
  // The full check of one tensor: defined, on the call's device, dtype, shape.
  void tensor(const TensorView& t, std::string_view arg, const DTypes& dtypes,
              const Shape& expected, std::string_view why) const;
  // The same for an optional tensor: nothing to check when it is undefined.
  void optional_tensor(const TensorView& t, std::string_view arg, const DTypes& dtypes,
                       const Shape& expected, std::string_view why) const;
  // An int32 index tensor of the given rank on the call's device.
  void index_tensor(const TensorView& t, std::string_view arg, int rank,
                    std::string_view dims) const;
  // Element types of attention inputs and outputs: bf16, fp16; fp32 too on CPU (precise tests).
  DTypes attention_dtypes() const;
  // CUDA only: tensors the kernels read or write by TMA need a unit innermost stride and 16-byte
  // aligned strides and base address. CPU calls accept any strides.
  void tma_layout(const TensorView& t, std::string_view arg) const;

  // ---- sizes
  // A sequence or token dimension of `count` `what` ("keys"): token counts are int32 everywhere
  // (cu_seqlens, kv_lens, the kernels' indices), so a larger one is refused here.
  void token_count(int64_t count, std::string_view arg, std::string_view what) const;
  // GQA: any Hq that Hkv divides. `k_arg` names the tensor Hkv comes from.
  void heads(int64_t hq, int64_t hkv, std::string_view k_arg) const;
  // The CPU reference's bound on head dims; CUDA sets are checked by each family.
  void head_dims_in_range(int64_t dqk, int64_t dv) const;
  // max_seqlen_q / max_seqlen_k of varlen calls: >= 0 (0 = unknown), and > 0 on CUDA, where the
  // kernels size their grids from these host bounds instead of reading lengths from the device.
  void max_seqlen(int value, std::string_view arg) const;
  // Row offsets (cu_seqlens, CSR indptr): int32 [B + 1]; on host also 0 first, non-decreasing,
  // last <= the rows they index and, when a bound is given, every length <= it. Returns B.
  int64_t offsets(const TensorView& t, std::string_view arg, const OffsetsRule& rule) const;

  // ---- paged KV
  // A page pool: rank 4, [P, page_size, H, D] (NHD) or [P, H, page_size, D] (HND), or for MLA
  // rank 3 [P, page_size, D]; page_size in 1..256.
  PagePool page_pool(const TensorView& t, std::string_view arg, KVLayout layout,
                     int rank = 4) const;
  // The page table of `batch` requests (block table or CSR, plus kv_lens [B]). On host also: every
  // kv_len in 0..(pages the request has) * page_size (and <= `max_kv_len` when > 0), and every
  // entry of the page slots that hold its tokens a page of the pool. Pages wholly left of a
  // sliding window are checked too: a kernel may touch whole pages near the window's edge, so
  // evicted slots must still name some valid page (a shared null page, say).
  // `batch_from` names the argument that fixed B.
  void page_table(const PageTable& pages, int64_t batch, std::string_view batch_from,
                  const PagePool& pool, int max_kv_len = 0, std::string_view max_name = {}) const;

  // Outputs the call writes: each defined one overlaps neither itself, nor another output, nor
  // any input (kernels read inputs while writing outputs, in no order a caller can rely on).
  // Inputs may share memory with each other (k and v may be one tensor). Only addresses and
  // strides are compared, so the rule holds for CUDA tensors too.
  void outputs_disjoint(std::initializer_list<Arg> outputs,
                        std::initializer_list<Arg> inputs) const {
    outputs_disjoint(outputs.begin(), outputs.end(), inputs.begin(), inputs.end());
  }
  template <size_t N>
  void outputs_disjoint(std::initializer_list<Arg> outputs,
                        const std::array<Arg, N>& inputs) const {
    outputs_disjoint(outputs.begin(), outputs.end(), inputs.data(), inputs.data() + N);
  }

  // ---- values the host can read (CPU tensors; CUDA ones would need a sync: README, Safety)
  // Sinks: optional fp32 [Hq]; on host each a finite logit or -inf (that head has no sink). NaN
  // would make every row of its head NaN, +inf empty every row of all its keys.
  void sinks(const TensorView& t, int64_t hq) const;
  // Per-head KV scales `arg`: on host each finite and > 0, the rule of the per-tensor value.
  void positive_values(const TensorView& t, std::string_view arg) const;
  // A KV dequantization scale: a finite value > 0, or per-head fp32 [Hkv] values (overriding it)
  // under the same rule.
  void kv_scale(const KVScale& s, std::string_view arg, int64_t hkv) const;

  // ---- options
  void window(const Window& w) const;
  void softcap(float softcap) const;
  void scale(const std::optional<float>& scale) const;
  // Scratch memory: at least `required` bytes (the public *_workspace_size() of the call).
  void workspace(const Workspace& ws, size_t required) const;

 private:
  void outputs_disjoint(const Arg* outputs, const Arg* outputs_end, const Arg* inputs,
                        const Arg* inputs_end) const;

  const char* function_;  // a literal: nothing is built unless a check fails
  Device device_;
  const char* anchor_name_;
  DeviceValues values_;
};

}  // namespace hopattn::validate
