#include "api/validate_common.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "common/dims_string.hpp"
#include "common/element_access.hpp"
#include "reference/kv_locator.hpp"

namespace hopattn::validate {

using detail::concat;
using reference::index_at;

namespace {

std::string shape_of(const TensorView& t) { return "shape " + t.shape_string(); }

std::string indexed(std::string_view arg, int64_t i) { return concat(arg, "[", i, "]"); }

std::string strides_of(const TensorView& t) {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < t.rank(); ++i) os << (i ? ", " : "") << t.stride(i);
  os << ']';
  return os.str();
}

struct Extent {
  int64_t size;
  int64_t stride;  // |stride| in elements
};

// The overlap rule of overlaps_itself() on (size, |stride|) pairs; arithmetic that overflows
// counts as overlapping.
bool extents_overlap(Extent* dims, int n) {
  for (int i = 1; i < n; ++i) {  // insertion sort by stride: n <= kMaxRank + 1
    for (int j = i; j > 0 && dims[j].stride < dims[j - 1].stride; --j)
      std::swap(dims[j], dims[j - 1]);
  }
  int64_t reach = 0;  // the farthest offset the dims sorted so far reach
  for (int i = 0; i < n; ++i) {
    if (dims[i].size <= 1) continue;  // a size-1 dim never moves, whatever its stride
    if (dims[i].stride <= reach) return true;
    int64_t span = 0;
    if (__builtin_mul_overflow(dims[i].size - 1, dims[i].stride, &span) ||
        __builtin_add_overflow(reach, span, &reach)) {
      return true;
    }
  }
  return false;
}

int fill_extents(const TensorView& t, Extent* dims) {
  for (int i = 0; i < t.rank(); ++i) {
    const int64_t s = t.stride(i);
    dims[i] = {t.size(i), s < 0 ? -s : s};
  }
  return t.rank();
}

// [first byte, last byte] of t (numel > 0); false when an offset overflows int64.
bool byte_span(const TensorView& t, intptr_t* lo, intptr_t* hi) {
  int64_t low = 0, high = 0;
  for (int i = 0; i < t.rank(); ++i) {
    int64_t reach = 0;
    if (__builtin_mul_overflow(t.size(i) - 1, t.stride(i), &reach) ||
        __builtin_add_overflow(reach < 0 ? low : high, reach, reach < 0 ? &low : &high)) {
      return false;
    }
  }
  const int64_t elem = dtype_size(t.dtype());
  if (__builtin_mul_overflow(low, elem, &low) || __builtin_mul_overflow(high, elem, &high) ||
      __builtin_add_overflow(high, elem - 1, &high)) {
    return false;
  }
  const auto base = reinterpret_cast<intptr_t>(t.data());
  return !__builtin_add_overflow(base, low, lo) && !__builtin_add_overflow(base, high, hi);
}

bool same_layout(const TensorView& a, const TensorView& b) {
  if (a.rank() != b.rank() || dtype_size(a.dtype()) != dtype_size(b.dtype())) return false;
  for (int i = 0; i < a.rank(); ++i) {
    if (a.size(i) != b.size(i) || a.stride(i) != b.stride(i)) return false;
  }
  return true;
}

}  // namespace

bool overlaps_itself(const TensorView& t) {
  if (t.numel() == 0) return false;
  Extent dims[TensorView::kMaxRank];
  return extents_overlap(dims, fill_extents(t, dims));
}

bool may_share_memory(const TensorView& a, const TensorView& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  intptr_t a_lo, a_hi, b_lo, b_hi;
  if (!byte_span(a, &a_lo, &a_hi) || !byte_span(b, &b_lo, &b_hi)) return true;
  if (a_hi < b_lo || b_hi < a_lo) return false;
  if (!same_layout(a, b)) return true;
  const int64_t elem = dtype_size(a.dtype());
  const int64_t delta = reinterpret_cast<intptr_t>(b.data()) - reinterpret_cast<intptr_t>(a.data());
  if (delta == 0 || delta % elem != 0) return true;
  Extent dims[TensorView::kMaxRank + 1];
  const int n = fill_extents(a, dims);
  dims[n] = {2, (delta < 0 ? -delta : delta) / elem};
  return extents_overlap(dims, n + 1);
}

// ------------------------------------------------------------------------------------ Shape

Shape::Shape(std::initializer_list<int64_t> dims) : rank_(static_cast<int>(dims.size())) {
  int i = 0;
  for (int64_t d : dims) dims_[i++] = d;
}

Shape Shape::of(const TensorView& t) {
  Shape s;
  s.rank_ = t.rank();
  for (int i = 0; i < t.rank(); ++i) s.dims_[i] = t.size(i);
  return s;
}

Shape Shape::with(int dim, int64_t size) const {
  Shape s = *this;
  const int i = dim < 0 ? dim + rank_ : dim;
  if (i >= 0 && i < rank_) s.dims_[i] = size;
  return s;
}

Shape Shape::without_last() const {
  Shape s = *this;
  s.rank_ = rank_ > 0 ? rank_ - 1 : 0;
  return s;
}

bool Shape::matches(const TensorView& t) const {
  if (t.rank() != rank_) return false;
  for (int i = 0; i < rank_; ++i) {
    if (t.size(i) != dims_[i]) return false;
  }
  return true;
}

std::string Shape::str() const { return dims_string(dims_.data(), rank_); }

// ------------------------------------------------------------------------------------ DTypes

DTypes::DTypes(std::initializer_list<DType> types, const char* note) : note_(note) {
  for (DType t : types) mask_ |= 1u << static_cast<unsigned>(t);
}

std::string DTypes::str() const {
  std::ostringstream os;
  int count = 0;
  for (unsigned bit = 0; bit < 32; ++bit) count += (mask_ >> bit) & 1u;
  int written = 0;
  for (unsigned bit = 0; bit < 32; ++bit) {
    if (!((mask_ >> bit) & 1u)) continue;
    if (written > 0) os << (written == count - 1 ? " or " : ", ");
    os << dtype_name(static_cast<DType>(bit));
    ++written;
  }
  if (note_ != nullptr) os << " (" << note_ << ")";
  return os.str();
}

std::string head_dims_string(int64_t dqk, int64_t dv) {
  return dqk == dv ? std::to_string(dqk) : concat("(Dqk ", dqk, ", Dv ", dv, ")");
}

// ------------------------------------------------------------------------------------ Checker

Checker::Checker(const char* function, const TensorView& anchor, const char* anchor_name,
                 DeviceValues values)
    : function_(function), device_(anchor.device()), anchor_name_(anchor_name), values_(values) {
  defined(anchor, anchor_name);
}

void Checker::fail(ErrorKind kind, std::string_view arg, const std::string& expected,
                   const std::string& given) const {
  check(false, kind, concat("hopattn.", function_, ": ", arg), expected, given);
  std::abort();  // unreachable: check(false, ...) always throws
}

void Checker::defined(const TensorView& t, std::string_view arg) const {
  if (!t.defined()) fail(ErrorKind::kValue, arg, "a tensor", "none");
  int64_t numel = 1;
  for (int i = 0; i < t.rank(); ++i) {
    if (t.size(i) < 0) fail(ErrorKind::kValue, arg, "non-negative sizes", shape_of(t));
    if (__builtin_mul_overflow(numel, t.size(i), &numel)) {
      fail(ErrorKind::kValue, arg, "an element count that fits in int64", shape_of(t));
    }
  }
  if (numel == 0) return;
  if (t.data() == nullptr) {
    fail(ErrorKind::kValue, arg, "a data pointer", concat("null for ", shape_of(t)));
  }
  // Every address computation (reference and kernels) is int64: the farthest element must have
  // a byte offset, and an address, that int64 holds.
  intptr_t lo, hi;
  if (!byte_span(t, &lo, &hi)) {
    fail(ErrorKind::kValue, arg, "strides whose byte offsets fit in int64",
         concat("strides ", strides_of(t), " for ", shape_of(t)));
  }
}

void Checker::token_count(int64_t count, std::string_view arg, std::string_view what) const {
  if (count > std::numeric_limits<int32_t>::max()) {
    fail(ErrorKind::kValue, arg,
         concat("at most ", std::numeric_limits<int32_t>::max(), " ", what,
                " (token counts are int32)"),
         count);
  }
}

void Checker::same_device(const TensorView& t, std::string_view arg) const {
  if (t.device() != device_) {
    fail(ErrorKind::kType, arg, concat("a tensor on ", device_, " (", anchor_name_, "'s device)"),
         concat(t.device()));
  }
}

void Checker::dtype(const TensorView& t, std::string_view arg, const DTypes& allowed) const {
  if (!allowed.contains(t.dtype())) {
    fail(ErrorKind::kType, arg, allowed.str(), dtype_name(t.dtype()));
  }
}

void Checker::rank(const TensorView& t, std::string_view arg, int rank,
                   std::string_view dims) const {
  if (t.rank() != rank) fail(ErrorKind::kValue, arg, concat("rank ", rank, " ", dims), shape_of(t));
}

void Checker::shape(const TensorView& t, std::string_view arg, const Shape& expected,
                    std::string_view why) const {
  if (!expected.matches(t)) {
    fail(ErrorKind::kValue, arg, concat("shape ", expected.str(), " (", why, ")"), shape_of(t));
  }
}

void Checker::tensor(const TensorView& t, std::string_view arg, const DTypes& dtypes,
                     const Shape& expected, std::string_view why) const {
  defined(t, arg);
  same_device(t, arg);
  dtype(t, arg, dtypes);
  shape(t, arg, expected, why);
}

void Checker::optional_tensor(const TensorView& t, std::string_view arg, const DTypes& dtypes,
                              const Shape& expected, std::string_view why) const {
  if (t.defined()) tensor(t, arg, dtypes, expected, why);
}

void Checker::index_tensor(const TensorView& t, std::string_view arg, int rank,
                           std::string_view dims) const {
  defined(t, arg);
  same_device(t, arg);
  dtype(t, arg, DTypes({DType::kInt32}));
  this->rank(t, arg, rank, dims);
}

DTypes Checker::attention_dtypes() const {
  if (on_cuda()) return DTypes({DType::kBF16, DType::kFP16}, "fp32 on CPU only");
  return DTypes({DType::kBF16, DType::kFP16, DType::kFP32});
}

void Checker::tma_layout(const TensorView& t, std::string_view arg) const {
  if (!on_cuda() || t.rank() == 0 || t.numel() == 0) return;
  // Strides of size-1 dimensions are never used for addressing, so frameworks leave them
  // arbitrary; they are not held to the rule.
  if (t.size(-1) > 1 && t.stride(-1) != 1) {
    fail(ErrorKind::kValue, arg, "innermost stride 1 on CUDA (TMA)",
         concat("stride ", t.stride(-1)));
  }
  const int64_t elem = dtype_size(t.dtype());
  for (int i = 0; i < t.rank() - 1; ++i) {
    if (t.size(i) > 1 && (t.stride(i) * elem) % kTmaAlignBytes != 0) {
      fail(ErrorKind::kValue, arg,
           concat("stride(", i, ") a multiple of ", kTmaAlignBytes / elem, " elements (",
                  kTmaAlignBytes, " bytes) on CUDA (TMA)"),
           t.stride(i));
    }
  }
  if (reinterpret_cast<uintptr_t>(t.data()) % kTmaAlignBytes != 0) {
    fail(ErrorKind::kValue, arg,
         concat("a data pointer aligned to ", kTmaAlignBytes, " bytes on CUDA (TMA)"), t.data());
  }
}

// ------------------------------------------------------------------------------------ sizes

void Checker::heads(int64_t hq, int64_t hkv, std::string_view k_arg) const {
  if (hq < 1) fail(ErrorKind::kValue, anchor_name_, "Hq >= 1 query heads", concat("Hq = ", hq));
  if (hkv < 1 || hq % hkv != 0) {
    fail(ErrorKind::kValue, k_arg, concat("a KV head count Hkv >= 1 that divides Hq = ", hq),
         concat("Hkv = ", hkv));
  }
}

void Checker::head_dims_in_range(int64_t dqk, int64_t dv) const {
  if (dqk < 1 || dqk > kMaxHeadDim || dv < 1 || dv > kMaxHeadDim) {
    fail(ErrorKind::kValue, "head_dim", concat("Dqk and Dv in 1..", kMaxHeadDim),
         head_dims_string(dqk, dv));
  }
}

void Checker::max_seqlen(int value, std::string_view arg) const {
  require(value >= 0, ErrorKind::kValue, arg, ">= 0", value);
  require(value > 0 || !on_cuda(), ErrorKind::kValue, arg,
          "> 0 on CUDA (the host bound the kernel's grid is sized from)", value);
}

int64_t Checker::offsets(const TensorView& t, std::string_view arg, const OffsetsRule& rule) const {
  index_tensor(t, arg, 1, "[B + 1]");
  if (rule.batch >= 0 && t.size(0) != rule.batch + 1) {
    fail(ErrorKind::kValue, arg,
         concat("shape [", rule.batch + 1, "] ([B + 1] with B = ", rule.batch, " from ",
                rule.batch_from, ")"),
         shape_of(t));
  }
  if (t.size(0) < 1) fail(ErrorKind::kValue, arg, "shape [B + 1] with B >= 0", shape_of(t));
  const int64_t batch = t.size(0) - 1;
  if (!reads_index_values()) return batch;

  int64_t prev = index_at(t, 0);
  if (prev != 0) fail(ErrorKind::kValue, indexed(arg, 0), "0", prev);
  for (int64_t i = 1; i <= batch; ++i) {
    const int64_t cur = index_at(t, i);
    if (cur < prev) {
      fail(ErrorKind::kValue, indexed(arg, i),
           concat(">= ", arg, "[", i - 1, "] = ", prev, " (non-decreasing)"), cur);
    }
    if (rule.max_len > 0 && cur - prev > rule.max_len) {
      fail(ErrorKind::kValue, arg, concat("lengths <= ", rule.max_name, " = ", rule.max_len),
           concat(cur - prev, " (", arg, "[", i, "] - ", arg, "[", i - 1, "])"));
    }
    prev = cur;
  }
  if (prev > rule.rows) {
    fail(ErrorKind::kValue, indexed(arg, batch),
         concat("<= ", rule.rows, " (the rows of ", rule.rows_of, ")"), prev);
  }
  return batch;
}

// ------------------------------------------------------------------------------------ paged KV

PagePool Checker::page_pool(const TensorView& t, std::string_view arg, KVLayout layout,
                            int rank) const {
  PagePool pool;
  if (rank == 3) {
    this->rank(t, arg, 3, "[num_pages, page_size, D]");
    pool = {t.size(0), t.size(1), 1, t.size(2)};
  } else if (layout == KVLayout::kNHD) {
    this->rank(t, arg, 4, "[num_pages, page_size, Hkv, D] (NHD)");
    pool = {t.size(0), t.size(1), t.size(2), t.size(3)};
  } else {
    this->rank(t, arg, 4, "[num_pages, Hkv, page_size, D] (HND)");
    pool = {t.size(0), t.size(2), t.size(1), t.size(3)};
  }
  if (pool.page_size < 1 || pool.page_size > kMaxPageSize) {
    fail(ErrorKind::kValue, arg, concat("page_size in 1..", kMaxPageSize), concat(pool.page_size));
  }
  return pool;
}

void Checker::page_table(const PageTable& pages, int64_t batch, std::string_view batch_from,
                         const PagePool& pool, int max_kv_len, std::string_view max_name) const {
  const bool by_table = pages.block_table.defined();
  const bool by_csr = pages.indptr.defined() || pages.indices.defined();
  if (by_table == by_csr) {
    fail(ErrorKind::kValue, "page_table",
         "a block table [B, max_pages] or page_indptr + page_indices (CSR)",
         by_table ? "both" : "neither");
  }
  index_tensor(pages.kv_lens, "kv_lens", 1, "[B]");
  if (pages.kv_lens.size(0) != batch) {
    fail(ErrorKind::kValue, "kv_lens", concat("shape [", batch, "] ([B] from ", batch_from, ")"),
         shape_of(pages.kv_lens));
  }
  const TensorView& table = pages.block_table;
  if (by_table) {
    index_tensor(table, "page_table", 2, "[B, max_pages]");
    if (table.size(0) != batch) {
      fail(ErrorKind::kValue, "page_table",
           concat("shape [", batch, ", max_pages] ([B] from ", batch_from, ")"), shape_of(table));
    }
  } else {
    index_tensor(pages.indices, "page_indices", 1, "[page_indptr[B]]");
    offsets(pages.indptr, "page_indptr",
            {pages.indices.size(0), "page_indices", batch, batch_from, 0, {}});
  }
  if (!reads_index_values()) return;

  for (int64_t b = 0; b < batch; ++b) {
    const int64_t kv_len = index_at(pages.kv_lens, b);
    if (kv_len < 0) fail(ErrorKind::kValue, indexed("kv_lens", b), ">= 0", concat(kv_len));
    if (max_kv_len > 0 && kv_len > max_kv_len) {
      fail(ErrorKind::kValue, indexed("kv_lens", b), concat("<= ", max_name, " = ", max_kv_len),
           kv_len);
    }
    const int64_t first = by_table ? 0 : index_at(pages.indptr, b);
    const int64_t slots = by_table ? table.size(1) : index_at(pages.indptr, b + 1) - first;
    if (kv_len > slots * pool.page_size) {
      fail(ErrorKind::kValue, indexed("kv_lens", b),
           concat("<= ", slots * pool.page_size, " (",
                  by_table ? "page_table rows hold " : "page_indptr gives this request ", slots,
                  " pages of ", pool.page_size, " tokens)"),
           kv_len);
    }
    const int64_t used = (kv_len + pool.page_size - 1) / pool.page_size;
    for (int64_t s = 0; s < used; ++s) {
      const int64_t page = by_table ? index_at(table, b, s) : index_at(pages.indices, first + s);
      if (page < 0 || page >= pool.num_pages) {
        if (by_table) {
          fail(ErrorKind::kValue, concat("page_table[", b, "][", s, "]"),
               concat("a page index in [0, ", pool.num_pages, ")"), page);
        }
        fail(ErrorKind::kValue, indexed("page_indices", first + s),
             concat("a page index in [0, ", pool.num_pages, ") (request ", b, ", page ", s, ")"),
             page);
      }
    }
  }
}

void Checker::outputs_disjoint(const Arg* outputs, const Arg* outputs_end, const Arg* inputs,
                               const Arg* inputs_end) const {
  for (const Arg* out = outputs; out != outputs_end; ++out) {
    const TensorView& t = *out->t;
    if (!t.defined()) continue;
    if (overlaps_itself(t)) {
      fail(ErrorKind::kValue, out->name,
           "an output whose elements do not overlap (no zero or overlapping strides)",
           concat("strides ", strides_of(t), " for ", shape_of(t)));
    }
    for (const Arg* other = outputs; other != out; ++other) {
      if (other->t->defined() && may_share_memory(t, *other->t)) {
        fail(ErrorKind::kValue, out->name,
             concat("memory disjoint from ", other->name, " (outputs may not overlap)"),
             concat("a view sharing memory with ", other->name));
      }
    }
    for (const Arg* in = inputs; in != inputs_end; ++in) {
      if (in->t->defined() && may_share_memory(t, *in->t)) {
        fail(ErrorKind::kValue, out->name,
             concat("memory disjoint from the input ", in->name, " (no output may alias an input)"),
             concat("a view sharing memory with ", in->name));
      }
    }
  }
}

// ------------------------------------------------------------------------------------ values

void Checker::sinks(const TensorView& t, int64_t hq) const {
  optional_tensor(t, "sinks", DTypes({DType::kFP32}), {hq}, "[Hq]");
  if (!t.defined() || !reads_index_values()) return;
  for (int64_t h = 0; h < hq; ++h) {
    const double s = load_element(t, h * t.stride(0));
    if (std::isnan(s) || s == std::numeric_limits<double>::infinity()) {
      fail(ErrorKind::kValue, indexed("sinks", h), "a finite logit or -inf (no sink)", s);
    }
  }
}

void Checker::positive_values(const TensorView& t, std::string_view arg) const {
  if (!t.defined() || !reads_index_values()) return;
  for (int64_t i = 0; i < t.size(0); ++i) {
    const double v = load_element(t, i * t.stride(0));
    if (!(std::isfinite(v) && v > 0))
      fail(ErrorKind::kValue, indexed(arg, i), "a finite value > 0", v);
  }
}

void Checker::kv_scale(const KVScale& s, std::string_view arg, int64_t hkv) const {
  if (!(std::isfinite(s.value) && s.value > 0.f)) {
    fail(ErrorKind::kValue, arg, "a finite value > 0", s.value);
  }
  optional_tensor(s.per_head, arg, DTypes({DType::kFP32}), {hkv}, "per-head scales [Hkv]");
  positive_values(s.per_head, arg);
}

// ------------------------------------------------------------------------------------ options

void Checker::window(const Window& w) const {
  if (w.left < -1 || w.right < -1) {
    fail(ErrorKind::kValue, "window", "left and right >= -1 (-1 = unbounded)",
         concat("(", w.left, ", ", w.right, ")"));
  }
}

void Checker::softcap(float softcap) const {
  require(std::isfinite(softcap) && softcap >= 0.f, ErrorKind::kValue, "softcap",
          "a finite value >= 0 (0 = off)", softcap);
}

void Checker::scale(const std::optional<float>& scale) const {
  if (scale && !(std::isfinite(*scale) && *scale != 0.f)) {
    fail(ErrorKind::kValue, "scale", "a finite nonzero value (or none: 1/sqrt(head dim))", *scale);
  }
}

void Checker::workspace(const Workspace& ws, size_t required) const {
  if (ws.bytes < required) {
    fail(ErrorKind::kValue, "workspace", concat(">= ", required, " bytes"),
         concat(ws.bytes, " bytes"));
  }
  if (required > 0 && ws.data == nullptr) {
    fail(ErrorKind::kValue, "workspace", concat("a buffer of ", required, " bytes"),
         "a null pointer");
  }
}

}  // namespace hopattn::validate
