#include "support/host_tensor.hpp"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace hopattn::testing {

HostTensor::HostTensor(DType dtype, std::vector<int64_t> shape) : shape_(std::move(shape)) {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  bytes_.assign(static_cast<size_t>(std::max<int64_t>(n, 1)) * dtype_size(dtype), 0);
  view_ = TensorView(bytes_.data(), dtype, static_cast<int>(shape_.size()), shape_.data(), nullptr);
}

std::vector<double> HostTensor::to_double() const {
  std::vector<double> out(numel());
  for (int64_t i = 0; i < numel(); ++i) out[i] = get(i);
  return out;
}

void HostTensor::fill_uniform(std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < numel(); ++i) set(i, dist(rng));
}

void HostTensor::fill_bytes(uint8_t byte) { std::memset(bytes_.data(), byte, bytes_.size()); }

std::vector<double> gather(const TensorView& t) {
  std::vector<double> out;
  out.reserve(static_cast<size_t>(t.numel()));
  for_each_offset(t, [&](int64_t offset) { out.push_back(load_element(t, offset)); });
  return out;
}

HostTensor int_tensor(const std::vector<int32_t>& values, std::vector<int64_t> shape) {
  if (shape.empty()) shape = {static_cast<int64_t>(values.size())};
  HostTensor t(DType::kInt32, shape);
  std::memcpy(t.data(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

uint64_t test_seed() {
  if (const char* env = std::getenv("HOPATTN_SEED")) return std::strtoull(env, nullptr, 10);
  return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

std::string seed_trace(uint64_t seed) {
  return "seed " + std::to_string(seed) + " (rerun with HOPATTN_SEED=" + std::to_string(seed) + ")";
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::quiet_NaN();
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(a[i] - b[i]);
    if (std::isnan(d)) return d;
    m = std::max(m, d);
  }
  return m;
}

double rel_l2(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::quiet_NaN();
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  if (std::isnan(num)) return num;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

bool all_finite(const std::vector<double>& a) {
  for (double x : a) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

}  // namespace hopattn::testing
