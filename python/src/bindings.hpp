// Registration functions of the _C module, one per source file.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "hopattn/options.hpp"

namespace hopattn::python {

namespace nb = nanobind;

void bind_batch(nb::module_& m);      // batch.cpp
void bind_families(nb::module_& m);   // families.cpp
void bind_support(nb::module_& m);    // support.cpp
void bind_torch_api(nb::module_& m);  // torch_api.cpp

// batch.cpp's entries of the torch extension's table (torch_api.hpp, TorchApi::batch_object).
bool batch_object(void* attention, void* workspace, const void** object, Workspace* ws);

}  // namespace hopattn::python
