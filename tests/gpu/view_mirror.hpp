// Device twins of host views: add() every view of a call (inputs and outputs), upload(), then
// map() each one. The memory the views cover is copied as it lies (same strides, same offset
// from a 256-byte boundary, so the device views are aligned as the host ones are); views sharing
// memory (k and v halves of one buffer, a combined MLA cache) share it on the device too. Outputs
// are poisoned with 0xff bytes (NaN in bf16/fp16/fp32) on upload; download() copies them back
// into the host memory (upload(v) and poison(v): one view), snapshot() hands out their
// device bytes (bitwise reruns).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "device_buffer.hpp"
#include "hopattn/options.hpp"
#include "hopattn/tensor_view.hpp"

namespace hopattn::testing {

class ViewMirror {
 public:
  void add(const TensorView& v, bool output) {
    if (!v.defined()) return;
    const auto [lo, hi] = span(v);
    spans_.push_back({lo, hi, output});
  }

  void upload() {
    std::sort(spans_.begin(), spans_.end(),
              [](const Span& a, const Span& b) { return a.lo < b.lo; });
    for (const Span& s : spans_) {
      if (!regions_.empty() && s.lo < regions_.back().hi) {
        Region& r = regions_.back();
        r.hi = std::max(r.hi, s.hi);
        r.inputs |= !s.output;
        r.outputs |= s.output;
      } else {
        regions_.push_back({s.lo, s.hi, !s.output, s.output, nullptr, {}});
      }
    }
    for (Region& r : regions_) {
      if (r.inputs && r.outputs) {
        throw std::logic_error("ViewMirror: an output shares memory with an input");
      }
      const uintptr_t shift = r.lo % 256;
      r.buffer = DeviceAllocation(size_t(r.hi - r.lo) + shift + 16);
      r.device = static_cast<char*>(r.buffer.data()) + shift;
      if (!r.outputs) {
        check_cuda(cudaMemcpy(r.device, reinterpret_cast<const void*>(r.lo), size_t(r.hi - r.lo),
                              cudaMemcpyHostToDevice),
                   "cudaMemcpy(host to device)");
      }
    }
    poison_outputs();
  }

  // Every byte of one added view's memory on the device 0xff.
  void poison(const TensorView& v) const {
    if (!v.defined()) return;
    const auto [lo, hi] = span(v);
    if (hi != lo) check_cuda(cudaMemset(device_of(lo, hi), 0xff, size_t(hi - lo)), "cudaMemset");
  }

  // Every byte of the outputs' memory 0xff (NaN in bf16/fp16/fp32).
  void poison_outputs() const {
    for (const Region& r : regions_) {
      if (r.outputs) check_cuda(cudaMemset(r.device, 0xff, size_t(r.hi - r.lo)), "cudaMemset");
    }
  }

  // The bytes of every output region on the device, in address order of the host memory.
  std::vector<std::vector<uint8_t>> snapshot() const {
    std::vector<std::vector<uint8_t>> bytes;
    for (const Region& r : regions_) {
      if (!r.outputs) continue;
      bytes.emplace_back(size_t(r.hi - r.lo));
      check_cuda(
          cudaMemcpy(bytes.back().data(), r.device, bytes.back().size(), cudaMemcpyDeviceToHost),
          "cudaMemcpy(device to host)");
    }
    return bytes;
  }

  TensorView map(const TensorView& v) const {
    if (!v.defined()) return {};
    const uintptr_t at = reinterpret_cast<uintptr_t>(v.data());
    for (const Region& r : regions_) {
      if (at >= r.lo && at < std::max(r.hi, r.lo + 1)) {
        int64_t shape[TensorView::kMaxRank], strides[TensorView::kMaxRank];
        for (int d = 0; d < v.rank(); ++d) {
          shape[d] = v.size(d);
          strides[d] = v.stride(d);
        }
        int device = 0;
        check_cuda(cudaGetDevice(&device), "cudaGetDevice");
        return TensorView(r.device + (at - r.lo), v.dtype(), v.rank(), shape, strides,
                          Device{DeviceType::kCUDA, device});
      }
    }
    throw std::logic_error("ViewMirror: a view was never added to the mirror");
  }

  void add(const PageTable& p) {
    for (const TensorView* t : {&p.block_table, &p.indptr, &p.indices, &p.kv_lens}) add(*t, false);
  }

  PageTable map(const PageTable& p) const {
    PageTable d = p;
    d.block_table = map(p.block_table);
    d.indptr = map(p.indptr);
    d.indices = map(p.indices);
    d.kv_lens = map(p.kv_lens);
    return d;
  }

  // The host bytes one added view covers, to its device twin (an output handed to a later call
  // as an input: the GPU fuzz gives the backward kernel the reference's forward).
  void upload(const TensorView& v) const {
    if (!v.defined()) return;
    const auto [lo, hi] = span(v);
    if (hi == lo) return;
    check_cuda(cudaMemcpy(device_of(lo, hi), reinterpret_cast<const void*>(lo), size_t(hi - lo),
                          cudaMemcpyHostToDevice),
               "cudaMemcpy(host to device)");
  }

  // Copies the outputs back into the host memory they mirror.
  void download() const {
    for (const Region& r : regions_) {
      if (!r.outputs || r.hi == r.lo) continue;
      check_cuda(cudaMemcpy(reinterpret_cast<void*>(r.lo), r.device, size_t(r.hi - r.lo),
                            cudaMemcpyDeviceToHost),
                 "cudaMemcpy(device to host)");
    }
  }

 private:
  struct Span {
    uintptr_t lo, hi;
    bool output;
  };
  struct Region {
    uintptr_t lo, hi;
    bool inputs, outputs;
    char* device;
    DeviceAllocation buffer;
  };

  // The device address of the bytes [lo, hi) of an added view's memory.
  char* device_of(uintptr_t lo, uintptr_t hi) const {
    for (const Region& r : regions_) {
      if (lo >= r.lo && hi <= r.hi) return r.device + (lo - r.lo);
    }
    throw std::logic_error("ViewMirror: a view was never added to the mirror");
  }

  // Bytes [lo, hi) the view's elements occupy; empty views keep their address (hi == lo).
  static std::pair<uintptr_t, uintptr_t> span(const TensorView& v) {
    const uintptr_t base = reinterpret_cast<uintptr_t>(v.data());
    if (v.numel() == 0) return {base, base};
    int64_t lo = 0, hi = 0;
    for (int d = 0; d < v.rank(); ++d) {
      const int64_t reach = v.stride(d) * (v.size(d) - 1);
      (reach < 0 ? lo : hi) += reach;
    }
    const int64_t bytes = int64_t(dtype_size(v.dtype()));
    return {base + lo * bytes, base + (hi + 1) * bytes};
  }

  std::vector<Span> spans_;
  std::vector<Region> regions_;
};

}  // namespace hopattn::testing
