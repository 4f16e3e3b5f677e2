// Python objects -> hopattn::TensorView through DLPack (nanobind's ndarray import), without copies.
// Any object with __dlpack__ (torch, JAX, CuPy, numpy) or a DLPack capsule is accepted. A pair
// (array, "dtype name") reinterprets the array's bytes as that hopattn dtype: frameworks that
// cannot export bf16 or fp8 through DLPack (numpy + ml_dtypes) pass a same-width integer view.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <vector>

#include "hopattn/options.hpp"
#include "hopattn/tensor_view.hpp"

namespace hopattn::python {

namespace nb = nanobind;

// Holds the imported arrays alive for the duration of one call (their DLPack deleters run when
// this goes out of scope, after the C++ call returned).
class TensorImporter {
 public:
  // None -> an undefined view. `name` appears in error messages.
  TensorView input(nb::handle obj, const char* name);
  // Outputs must be writable (a read-only numpy array is rejected).
  TensorView output(nb::handle obj, const char* name);
  // Index tensors (cu_seqlens, page tables, lengths) are int32: any other integer type (torch's
  // default int64, say) is named as such instead of failing the generic dtype import.
  TensorView index(nb::handle obj, const char* name);

 private:
  TensorView import(nb::handle obj, const char* name, bool writable, bool int32_only = false);
  std::vector<nb::ndarray<nb::ro>> inputs_;
  std::vector<nb::ndarray<>> outputs_;
};

// The view of a contiguous 1-D host int32 array given by its address and length, through the same
// checks as an imported index tensor (TensorImporter::index). Nothing keeps the memory alive: the
// caller holds the array for the call, and the callee reads it before returning.
TensorView host_int32_view(uintptr_t address, int64_t length, const char* name);

// "NHD" or "HND" (ValueError otherwise).
KVLayout layout_named(const std::string& kv_layout);

// hopattn.mla's schedule= name ("auto", "seesaw", "one-consumer" or "narrow") as
// MlaOptions::schedule.
MlaSchedule mla_schedule_named(const std::string& schedule);

// A page table given from Python: a block table [B, max_pages] or a pair (page_indptr,
// page_indices) of CSR arrays; plus kv_lens and the layout name ("NHD" or "HND"). Imported as
// index tensors (TensorImporter::index).
PageTable import_pages(TensorImporter& tensors, nb::handle page_table, nb::handle kv_lens,
                       const std::string& kv_layout);

// Runs the call on `device` (cudaSetDevice, restored afterwards) when it is a CUDA device, so a
// tensor on cuda:1 runs there whatever the caller's current device. No-op for CPU tensors.
class DeviceGuard {
 public:
  explicit DeviceGuard(Device device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Python passes streams as integers (cudaStream_t addresses; 0 = the legacy default stream).
inline Stream as_stream(uintptr_t handle) { return reinterpret_cast<Stream>(handle); }

// Largest difference of consecutive entries of a host int32 cu_seqlens [B + 1], or 0 when the
// tensor is absent, on a CUDA device, or not int32 rank 1 (the validators then say what is wrong).
int max_seqlen_from_host(const TensorView& cu_seqlens);

// The bounds a CPU caller may leave out (0), read from the host index tensors: max_seqlen_q from
// cu_seqlens_q; max_seqlen_k from kv_lens (paged) or cu_seqlens_k. Only 0 means "not given": a
// negative bound reaches the validator, which rejects it. CUDA callers must give them (reading
// device memory would synchronize), so on CUDA tensors they stay 0 and the validator says so.
void read_host_bounds(FwdArgs& a);
void read_host_bounds(MlaArgs& a);  // max_seqlen_q <= 0: from cu_seqlens_q

// Caller-owned workspace from a byte tensor (any dtype; its size in bytes counts). None -> empty.
Workspace import_workspace(TensorImporter& tensors, nb::handle obj);

}  // namespace hopattn::python
