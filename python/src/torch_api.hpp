// The C++ entry points that the optional torch extension (python/torch_ext, `hopattn._torch_C`)
// calls, as a table of plain function pointers handed over in a capsule by `hopattn._C`. The
// extension does not link the library: the kernels (and the device status word that
// check_errors() reads) exist once, in _C. Both modules include this header from one build, and
// the extension refuses a table whose version or struct sizes differ from its own.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hopattn/api.hpp"
#include "hopattn/batch.hpp"
#include "hopattn/dlpack.h"
#include "hopattn/options.hpp"

namespace hopattn::python {

// What a failed call reports: the hopattn::ErrorKind (as int) and the message, so the caller
// raises the same Python exception as the _C bindings (ValueError, TypeError, ...).
struct ApiError {
  int kind = 0;
  char message[2048] = {};
};

struct TorchApi {
  static constexpr uint32_t kVersion = 2;
  uint32_t version;
  uint32_t sizes[7];  // sizeof TensorView, FwdArgs, BwdArgs, DecodeArgs, MlaArgs, ApiError,
                      // BatchArgs
  // A view of a DLPack tensor (TensorView::from_dlpack); false, with nothing reported, when the
  // tensor is not one hopattn takes (the caller then takes the generic path, which says why).
  bool (*view)(const DLTensor& t, TensorView* out);
  // Each returns true when it ran (or, for *_size, answered) and false with `error` filled.
  // decode / mla: `*needed` is the workspace bytes the call needs; when the workspace given is
  // smaller, nothing runs (the caller allocates and calls again).
  bool (*attention_fwd)(const FwdArgs&, const AttentionOptions&, Stream, ApiError*);
  bool (*attention_bwd_workspace_size)(const BwdArgs&, const AttentionOptions&, size_t* bytes,
                                       ApiError*);
  bool (*attention_bwd)(const BwdArgs&, const AttentionOptions&, Stream, ApiError*);
  bool (*decode)(const DecodeArgs&, const DecodeOptions&, Stream, size_t* needed, ApiError*);
  bool (*mla)(const MlaArgs&, const MlaOptions&, Stream, size_t* needed, ApiError*);
  bool (*merge_states)(const MergeArgs&, Stream, ApiError*);
  bool (*merge_states_n)(const MergeNArgs&, Stream, ApiError*);
  // BatchAttention.run: `batch_object` (GIL held) finds the hopattn::BatchAttention of a
  // _C.BatchAttention and the Workspace of a _C.Workspace or None (an empty one); false when
  // either is of another type. The caller holds both Python objects for the call, so the pointer
  // stays valid while `batch_run` runs on it (GIL released).
  bool (*batch_object)(void* attention, void* workspace, const void** object, Workspace* ws);
  bool (*batch_run)(const void* object, const BatchArgs&, Stream, ApiError*);
};

inline void torch_api_sizes(uint32_t* sizes) {
  sizes[0] = sizeof(TensorView);
  sizes[1] = sizeof(FwdArgs);
  sizes[2] = sizeof(BwdArgs);
  sizes[3] = sizeof(DecodeArgs);
  sizes[4] = sizeof(MlaArgs);
  sizes[5] = sizeof(ApiError);
  sizes[6] = sizeof(BatchArgs);
}

// The capsule's name.
inline constexpr const char* kTorchApiCapsule = "hopattn._C.torch_api";

}  // namespace hopattn::python
