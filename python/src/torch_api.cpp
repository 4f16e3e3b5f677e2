// hopattn._C.torch_api(): the capsule of entry points the optional torch extension calls
// (torch_api.hpp). Each entry runs on its tensors' device (DeviceGuard) and turns exceptions into
// an ApiError, since C++ exceptions do not cross the two modules' boundary (each keeps its runtime
// symbols private).
#include "torch_api.hpp"

#include <cstring>
#include <exception>

#include "bindings.hpp"
#include "hopattn/error.hpp"
#include "tensors.hpp"

namespace hopattn::python {
namespace {

void report(ApiError* error, int kind, const char* message) {
  error->kind = kind;
  std::strncpy(error->message, message, sizeof(error->message) - 1);
  error->message[sizeof(error->message) - 1] = '\0';
}

// Runs `fn`, reporting its exception; true when it returned.
template <typename Fn>
bool guarded(ApiError* error, Fn&& fn) {
  try {
    fn();
    return true;
  } catch (const Error& e) {
    report(error, static_cast<int>(e.kind()), e.what());
  } catch (const std::exception& e) {
    report(error, static_cast<int>(ErrorKind::kRuntime), e.what());
  }
  return false;
}

bool view(const DLTensor& t, TensorView* out) {
  try {
    *out = TensorView::from_dlpack(t);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// The entries take the bounds as the bindings do (0: read from the host index tensors).
bool fwd(const FwdArgs& given, const AttentionOptions& o, Stream s, ApiError* e) {
  return guarded(e, [&] {
    FwdArgs a = given;
    read_host_bounds(a);
    DeviceGuard device(a.q.device());
    attention_fwd(a, o, s);
  });
}

bool bwd_size(const BwdArgs& given, const AttentionOptions& o, size_t* bytes, ApiError* e) {
  return guarded(e, [&] {
    BwdArgs a = given;
    read_host_bounds(a.fwd);
    *bytes = attention_bwd_workspace_size(a, o);
  });
}

bool bwd(const BwdArgs& given, const AttentionOptions& o, Stream s, ApiError* e) {
  return guarded(e, [&] {
    BwdArgs a = given;
    read_host_bounds(a.fwd);
    DeviceGuard device(a.fwd.q.device());
    attention_bwd(a, o, s);
  });
}

bool dec(const DecodeArgs& a, const DecodeOptions& o, Stream s, size_t* needed, ApiError* e) {
  return guarded(e, [&] {
    *needed = decode_workspace_size(a, o);
    if (a.workspace.bytes < *needed) return;
    DeviceGuard device(a.q.device());
    decode(a, o, s);
  });
}

bool latent(const MlaArgs& given, const MlaOptions& o, Stream s, size_t* needed, ApiError* e) {
  return guarded(e, [&] {
    MlaArgs a = given;
    read_host_bounds(a);
    *needed = mla_workspace_size(a, o);
    if (a.workspace.bytes < *needed) return;
    DeviceGuard device(a.q_nope.device());
    mla(a, o, s);
  });
}

bool merge(const MergeArgs& a, Stream s, ApiError* e) {
  return guarded(e, [&] {
    DeviceGuard device(a.o_a.device());
    merge_states(a, s);
  });
}

bool merge_n(const MergeNArgs& a, Stream s, ApiError* e) {
  return guarded(e, [&] {
    DeviceGuard device(a.o.device());
    merge_states_n(a, s);
  });
}

bool batch(const void* object, const BatchArgs& a, Stream s, ApiError* e) {
  return guarded(e, [&] {
    DeviceGuard device(a.q.device());
    static_cast<const BatchAttention*>(object)->run(a, s);
  });
}

TorchApi make_api() {
  TorchApi api{};
  api.version = TorchApi::kVersion;
  torch_api_sizes(api.sizes);
  api.view = view;
  api.attention_fwd = fwd;
  api.attention_bwd_workspace_size = bwd_size;
  api.attention_bwd = bwd;
  api.decode = dec;
  api.mla = latent;
  api.merge_states = merge;
  api.merge_states_n = merge_n;
  api.batch_object = batch_object;
  api.batch_run = batch;
  return api;
}

const TorchApi kApi = make_api();

}  // namespace

void bind_torch_api(nb::module_& m) {
  m.def(
      "torch_api", [] { return nb::capsule(static_cast<const void*>(&kApi), kTorchApiCapsule); },
      "The entry points of the optional torch extension (hopattn._torch_C), in a capsule.");
}

}  // namespace hopattn::python
