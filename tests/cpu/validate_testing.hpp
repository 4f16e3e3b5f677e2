// Shared pieces of the validator tests: views that reinterpret test tensors (another device, dtype,
// shape, strides, offset), a keeper for tensors made up mid-test, and an assertion that a call
// throws hopattn::Error of a given kind with a given message fragment.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "hopattn/error.hpp"
#include "hopattn/tensor_view.hpp"
#include "support/host_tensor.hpp"

namespace hopattn::testing {

inline constexpr Device kCuda0{DeviceType::kCUDA, 0};

// `t` with its fields replaced; validators never dereference CUDA memory, so host buffers can
// stand in for device tensors.
inline TensorView remade(const TensorView& t, void* data, DType dtype, std::vector<int64_t> shape,
                         std::vector<int64_t> strides, Device device) {
  return TensorView(data, dtype, static_cast<int>(shape.size()), shape.data(), strides.data(),
                    device);
}

inline std::vector<int64_t> shape_of(const TensorView& t) {
  std::vector<int64_t> s(t.rank());
  for (int i = 0; i < t.rank(); ++i) s[i] = t.size(i);
  return s;
}

inline std::vector<int64_t> strides_of(const TensorView& t) {
  std::vector<int64_t> s(t.rank());
  for (int i = 0; i < t.rank(); ++i) s[i] = t.stride(i);
  return s;
}

inline TensorView on_device(const TensorView& t, Device device) {
  if (!t.defined()) return t;
  return remade(t, t.data(), t.dtype(), shape_of(t), strides_of(t), device);
}

inline TensorView on_cuda(const TensorView& t) { return on_device(t, kCuda0); }

inline TensorView with_dtype(const TensorView& t, DType dtype) {
  return remade(t, t.data(), dtype, shape_of(t), strides_of(t), t.device());
}

// Contiguous view of another shape over the same data (only for tensors validators do not read).
inline TensorView with_shape(const TensorView& t, std::vector<int64_t> shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * shape[i + 1];
  }
  return remade(t, t.data(), t.dtype(), std::move(shape), std::move(strides), t.device());
}

inline TensorView with_strides(const TensorView& t, std::vector<int64_t> strides) {
  return remade(t, t.data(), t.dtype(), shape_of(t), std::move(strides), t.device());
}

// The same view starting `bytes` further on (misaligns the data pointer).
inline TensorView shifted(const TensorView& t, int64_t bytes) {
  return remade(t, static_cast<char*>(t.data()) + bytes, t.dtype(), shape_of(t), strides_of(t),
                t.device());
}

// The bytes of a contiguous host tensor, to show that a rejected call left an output untouched.
inline std::vector<uint8_t> bytes_of(const TensorView& t) {
  const auto* begin = static_cast<const uint8_t*>(t.data());
  return std::vector<uint8_t>(begin, begin + t.numel() * dtype_size(t.dtype()));
}

// Fills a contiguous host tensor with a recognizable pattern (NaN for every float type).
inline void poison(const TensorView& t) {
  std::memset(t.data(), 0xff, static_cast<size_t>(t.numel() * dtype_size(t.dtype())));
}

// Owns tensors a test makes while mutating arguments, keeping their views valid.
class TensorKeeper {
 public:
  TensorView keep(HostTensor t) {
    held_.push_back(std::move(t));
    return held_.back().view();
  }
  TensorView make(DType dtype, std::vector<int64_t> shape) {
    return keep(HostTensor(dtype, std::move(shape)));
  }
  TensorView ints(const std::vector<int32_t>& values, std::vector<int64_t> shape = {}) {
    return keep(int_tensor(values, std::move(shape)));
  }
  // fp32 [values.size()] (per-head scales, sinks).
  TensorView floats(const std::vector<double>& values) {
    HostTensor t(DType::kFP32, {static_cast<int64_t>(values.size())});
    for (size_t i = 0; i < values.size(); ++i) t.set(static_cast<int64_t>(i), values[i]);
    return keep(std::move(t));
  }

 private:
  std::deque<HostTensor> held_;
};

// Success when `call` throws hopattn::Error of `kind` whose message contains `fragment`.
template <typename Call>
::testing::AssertionResult throws_error(Call&& call, ErrorKind kind, const std::string& fragment) {
  try {
    call();
  } catch (const Error& e) {
    const std::string message = e.what();
    if (e.kind() != kind) {
      return ::testing::AssertionFailure()
             << "wrong ErrorKind " << static_cast<int>(e.kind()) << " (expected "
             << static_cast<int>(kind) << ") for message: " << message;
    }
    if (message.find(fragment) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "message \"" << message << "\" lacks \"" << fragment << "\"";
    }
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-hopattn exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw (expected \"" << fragment << "\")";
}

// Success when `call` returns without throwing; a failure shows the message.
template <typename Call>
::testing::AssertionResult passes(Call&& call) {
  try {
    call();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw: " << e.what();
  }
  return ::testing::AssertionSuccess();
}

// One mutation of a valid argument set and the error it must raise.
template <typename Args, typename Options>
struct Rejection {
  const char* name;
  void (*mutate)(TensorKeeper& keep, Args& args, Options& opts);
  ErrorKind kind;
  const char* fragment;
};

}  // namespace hopattn::testing
