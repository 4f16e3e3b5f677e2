#include "reference/kv_locator.hpp"

namespace hopattn::reference {

int64_t KVLocator::page_size() const {
  if (mode_ != Mode::kPaged) return 0;
  return pages_.layout == KVLayout::kNHD ? t_.size(1) : t_.size(2);
}

int64_t KVLocator::num_heads() const {
  if (mode_ == Mode::kPaged) return pages_.layout == KVLayout::kNHD ? t_.size(2) : t_.size(1);
  return t_.size(-2);
}

int64_t KVLocator::page_of(int64_t b, int64_t t) const {
  const int64_t slot = t / page_size();
  if (pages_.block_table.defined()) return index_at(pages_.block_table, b, slot);
  return index_at(pages_.indices, index_at(pages_.indptr, b) + slot);
}

int64_t KVLocator::offset(int64_t b, int64_t t, int64_t h, int64_t d) const {
  switch (mode_) {
    case Mode::kDense:
      return b * t_.stride(0) + t * t_.stride(1) + h * t_.stride(2) + d * t_.stride(3);
    case Mode::kVarlen:
      return (index_at(cu_, b) + t) * t_.stride(0) + h * t_.stride(1) + d * t_.stride(2);
    case Mode::kPaged: {
      const int64_t page = page_of(b, t);
      const int64_t slot = t % page_size();
      if (pages_.layout == KVLayout::kNHD) {
        return page * t_.stride(0) + slot * t_.stride(1) + h * t_.stride(2) + d * t_.stride(3);
      }
      return page * t_.stride(0) + h * t_.stride(1) + slot * t_.stride(2) + d * t_.stride(3);
    }
  }
  return 0;
}

}  // namespace hopattn::reference
