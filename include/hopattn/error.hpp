// hopattn::Error: the one exception type of the library. Every message says what was expected and
// what was given, so a caller can fix the call without reading the source.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace hopattn {

// Lets bindings map errors onto their language's exception kinds (ValueError, TypeError, ...).
enum class ErrorKind {
  kValue,           // a shape, size, index or length is wrong
  kType,            // a dtype or device is wrong
  kNotImplemented,  // valid request, but no code path exists for it (yet)
  kRuntime,         // a CUDA call failed
  kDeviceIndex,     // a kernel met an out-of-range device-resident index (check_errors)
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

namespace detail {
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}
}  // namespace detail

// Throws `Error` with "<where>: expected <expected>, got <given>" unless `ok`.
template <typename Expected, typename Given>
void check(bool ok, ErrorKind kind, const std::string& where, const Expected& expected,
           const Given& given) {
  if (!ok) {
    throw Error(kind, detail::concat(where, ": expected ", expected, ", got ", given));
  }
}

}  // namespace hopattn
