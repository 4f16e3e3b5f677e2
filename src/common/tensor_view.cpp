#include "hopattn/tensor_view.hpp"

#include "common/dims_string.hpp"
#include "common/dlpack_type.hpp"
#include "hopattn/error.hpp"

namespace hopattn {

std::ostream& operator<<(std::ostream& os, const Device& d) {
  return d.is_cuda() ? os << "cuda:" << d.index : os << "cpu";
}

TensorView::TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device)
    : data_(data), dtype_(dtype), device_(device), rank_(static_cast<int>(shape.size())) {
  check(rank_ <= kMaxRank, ErrorKind::kValue, "TensorView", "rank <= 6", rank_);
  int i = 0;
  for (int64_t s : shape) shape_[i++] = s;
  set_contiguous_strides();
}

TensorView::TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape,
                       std::initializer_list<int64_t> strides, Device device)
    : data_(data), dtype_(dtype), device_(device), rank_(static_cast<int>(shape.size())) {
  check(rank_ <= kMaxRank, ErrorKind::kValue, "TensorView", "rank <= 6", rank_);
  check(strides.size() == shape.size(), ErrorKind::kValue, "TensorView strides",
        detail::concat(shape.size(), " strides"), strides.size());
  int i = 0;
  for (int64_t s : shape) shape_[i++] = s;
  i = 0;
  for (int64_t s : strides) strides_[i++] = s;
}

TensorView::TensorView(void* data, DType dtype, int rank, const int64_t* shape,
                       const int64_t* strides, Device device)
    : data_(data), dtype_(dtype), device_(device), rank_(rank) {
  check(rank >= 0 && rank <= kMaxRank, ErrorKind::kValue, "TensorView", "rank in 0..6", rank);
  for (int i = 0; i < rank; ++i) shape_[i] = shape[i];
  if (strides == nullptr) {
    set_contiguous_strides();
  } else {
    for (int i = 0; i < rank; ++i) strides_[i] = strides[i];
  }
}

void TensorView::set_contiguous_strides() {
  int64_t s = 1;
  for (int i = rank_ - 1; i >= 0; --i) {
    strides_[i] = s;
    s *= shape_[i];
  }
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= shape_[i];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t s = 1;
  for (int i = rank_ - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != s) return false;
    s *= shape_[i];
  }
  return true;
}

int64_t TensorView::offset(std::initializer_list<int64_t> index) const {
  int64_t off = 0;
  int i = 0;
  for (int64_t x : index) off += x * strides_[i++];
  return off;
}

std::string TensorView::shape_string() const { return dims_string(shape_.data(), rank_); }

namespace {

DType dtype_from_dlpack(DLDataType t) {
  const std::string given = dlpack_type_name(t);
  check(t.lanes == 1, ErrorKind::kType, "from_dlpack", "one lane per element", given);
  if (t.code == kDLBfloat && t.bits == 16) return DType::kBF16;
  if (t.code == kDLFloat && t.bits == 16) return DType::kFP16;
  if (t.code == kDLFloat && t.bits == 32) return DType::kFP32;
  if (t.code == kDLFloat8_e4m3fn && t.bits == 8) return DType::kFP8E4M3;
  if (t.code == kDLFloat8_e5m2 && t.bits == 8) return DType::kFP8E5M2;
  if (t.code == kDLInt && t.bits == 8) return DType::kInt8;
  if (t.code == kDLInt && t.bits == 32) return DType::kInt32;
  if ((t.code == kDLBool || t.code == kDLUInt) && t.bits == 8) return DType::kBool;
  throw Error(ErrorKind::kType,
              "from_dlpack: expected bf16, fp16, fp32, float8_e4m3fn, float8_e5m2, int8, int32 "
              "or bool, got " +
                  given);
}

}  // namespace

TensorView TensorView::from_dlpack(const DLTensor& t) {
  Device device;
  if (t.device.device_type == kDLCPU || t.device.device_type == kDLCUDAHost) {
    device = {DeviceType::kCPU, 0};
  } else if (t.device.device_type == kDLCUDA) {
    device = {DeviceType::kCUDA, t.device.device_id};
  } else {
    throw Error(ErrorKind::kType, detail::concat("from_dlpack: expected a CPU or CUDA tensor, got "
                                                 "DLDeviceType ",
                                                 int(t.device.device_type)));
  }
  const DType dtype = dtype_from_dlpack(t.dtype);
  char* data = static_cast<char*>(t.data) + t.byte_offset;
  return TensorView(data, dtype, t.ndim, t.shape, t.strides, device);
}

}  // namespace hopattn
