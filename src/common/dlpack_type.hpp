// Readable names of DLPack element types ("int64", "float64", "bfloat16"), for error messages
// about tensors hopattn cannot take: "got int64" says what to fix, a DLDataType dump does not.
#pragma once

#include <string>

#include "hopattn/dlpack.h"

namespace hopattn {

inline std::string dlpack_type_name(DLDataType t) {
  std::string base;
  switch (t.code) {
    case kDLInt:
      base = "int";
      break;
    case kDLUInt:
      base = "uint";
      break;
    case kDLFloat:
      base = "float";
      break;
    case kDLBfloat:
      base = "bfloat";
      break;
    case kDLComplex:
      base = "complex";
      break;
    case kDLBool:
      base = "bool";
      break;
    case kDLFloat8_e4m3fn:
      base = "float8_e4m3fn";
      break;
    case kDLFloat8_e5m2:
      base = "float8_e5m2";
      break;
    default:
      return "DLPack type code " + std::to_string(int(t.code)) + " of " + std::to_string(t.bits) +
             " bits";
  }
  // Types whose name carries no width get it appended, unless it is the usual one.
  const bool sized = base != "bool" && base.rfind("float8", 0) != 0;
  std::string name = sized ? base + std::to_string(t.bits) : base;
  if (!sized && t.bits != 8) name += " of " + std::to_string(t.bits) + " bits";
  if (t.lanes != 1) name += "x" + std::to_string(t.lanes);
  return name;
}

}  // namespace hopattn
