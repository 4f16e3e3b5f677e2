// "[2, 3, 4]": the text of a shape, as TensorView::shape_string and the validators' messages
// write it.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>

namespace hopattn {

inline std::string dims_string(const int64_t* dims, int rank) {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < rank; ++i) os << (i ? ", " : "") << dims[i];
  os << ']';
  return os.str();
}

}  // namespace hopattn
