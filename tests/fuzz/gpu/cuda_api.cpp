#include "cuda_api.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/args_mirror.hpp"
#include "gpu/hopper_test_util.hpp"
#include "hopattn/api.hpp"
#include "hopattn/batch.hpp"
#include "hopattn/error.hpp"

namespace hopattn::fuzz {
namespace {

using testing::add;
using testing::DeviceScratch;
using testing::map;
using testing::ViewMirror;

// Exits with the case line: after a fault the context cannot run another case.
[[noreturn]] void fatal(const Case& c, const std::string& what) {
  std::fprintf(stderr, "FATAL: %s\n  case:   %s\n  replay: hopattn_gpu_fuzz_tests --replay='%s'\n",
               what.c_str(), describe(c).c_str(), describe(c).c_str());
  std::fflush(stderr);
  std::_Exit(3);
}

void sync_checked(const Case& c, const char* what) {
  testing::hopper::sync_or_die(nullptr, what, 60.0);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    fatal(c,
          std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
  }
}

int largest(const std::vector<int64_t>& v) {
  return v.empty() ? 0 : int(*std::max_element(v.begin(), v.end()));
}

// A bwd case's backward kernel is handed the reference's forward (out, lse), the one public_api()'s
// backward reads: the backward's contract is the gradients given the out and lse it is handed
// (DESIGN.md), and where dS = P (dP - D) cancels they move far more than those inputs' rounding
// (bwd seed 900718, fp16, one-key and few-key rows: one ulp of out moves dq by up to ~70x the
// kernel tolerance). The forward kernel runs after it, on poisoned out and lse, so the fwd parts
// are still the kernel's own.
void run_attn(HostProblem& p, ViewMirror& m) {
  testing::fwd_bwd::Bundle& t = *p.bundle;
  const bool bwd = p.c.family == Family::kBwd;
  if (bwd) attention_fwd(t.fwd, p.c.attn.opts);  // the CPU reference, into the host out and lse
  add(m, t.fwd);
  if (bwd) add(m, t.bwd);
  m.upload();
  FwdArgs df = map(m, t.fwd);
  // The host bounds CUDA needs for varlen and paged calls (the CPU reference takes 0).
  if (t.fwd.q.rank() == 3) {
    df.max_seqlen_q = std::max({df.max_seqlen_q, largest(p.c.attn.spec.q_lens), 1});
    df.max_seqlen_k = std::max({df.max_seqlen_k, largest(p.c.attn.spec.kv_lens), 1});
  }
  if (bwd) {
    m.upload(t.fwd.out);
    m.upload(t.fwd.lse);
    BwdArgs db = map(m, t.bwd, df);
    const DeviceScratch ws(attention_bwd_workspace_size(db, p.c.attn.opts));
    db.workspace = ws.ws;
    attention_bwd(db, p.c.attn.opts);
    sync_checked(p.c, "attention_bwd");
    m.poison(t.fwd.out);
    m.poison(t.fwd.lse);
  }
  attention_fwd(df, p.c.attn.opts);
  sync_checked(p.c, "attention_fwd");
  check_errors();
}

void run_decode(HostProblem& p, ViewMirror& m) {
  add(m, p.decode->args);
  m.upload();
  DecodeArgs d = map(m, p.decode->args);
  const DeviceScratch ws(decode_workspace_size(d, p.decode->opts));
  d.workspace = ws.ws;
  decode(d, p.decode->opts);
  sync_checked(p.c, "decode");
  check_errors();
}

void run_mla(HostProblem& p, ViewMirror& m) {
  add(m, p.mla->args);
  m.upload();
  MlaArgs d = map(m, p.mla->args);
  d.max_seqlen_q = std::max(d.max_seqlen_q, 1);
  const DeviceScratch ws(mla_workspace_size(d, p.mla->opts));
  d.workspace = ws.ws;
  mla(d, p.mla->opts);
  sync_checked(p.c, "mla");
  check_errors();
}

void run_merge(HostProblem& p, ViewMirror& m) {
  const MergeRun& r = *p.merge;
  if (p.c.merge.n_way) {
    add(m, r.many);
    m.upload();
    merge_states_n(map(m, r.many));
  } else {
    add(m, r.two);
    m.upload();
    merge_states(map(m, r.two));
  }
  sync_checked(p.c, "merge");
}

// One BatchAttention on the current device for the case's limits; the step planned from the
// host lengths with the plan uploaded into a zeroed workspace, then one run.
void run_batch(HostProblem& p, ViewMirror& m) {
  const testing::batch_case::BatchStep& s = *p.batch;
  add(m, s.args);
  m.upload();
  BatchArgs d = map(m, s.args);
  int device = 0;
  testing::check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  BatchAttentionConfig cfg = testing::batch_case::config_of(p.c.batch.c);
  cfg.device = Device{DeviceType::kCUDA, device};
  BatchAttention ba(cfg);
  const DeviceScratch ws(ba.workspace_size());
  d.workspace = ws.ws;
  ba.plan(s.cu.data(), s.kv.data(), int(s.kv.size()), d.workspace, nullptr);
  ba.run(d);
  sync_checked(p.c, "batch");
  check_errors();
}

Outputs run_cuda(HostProblem& p) {
  ViewMirror m;
  switch (p.c.family) {
    case Family::kFwd:
    case Family::kBwd:
      run_attn(p, m);
      break;
    case Family::kDecode:
      run_decode(p, m);
      break;
    case Family::kMla:
      run_mla(p, m);
      break;
    case Family::kMerge:
      run_merge(p, m);
      break;
    case Family::kBatch:
      run_batch(p, m);
      break;
  }
  m.download();
  return read_outputs(p);
}

// What the CUDA path leaves to the CPU by design: kNotImplemented (head dims, paged backward),
// and the CUDA-only rules of the validators (16-bit q, TMA strides and alignment), whose messages
// say "on CUDA" or "CPU only".
bool declines(const Error& e) {
  if (e.kind() == ErrorKind::kNotImplemented) return true;
  const std::string what = e.what();
  return (e.kind() == ErrorKind::kType || e.kind() == ErrorKind::kValue) &&
         (what.find("on CUDA") != std::string::npos || what.find("CPU only") != std::string::npos);
}

}  // namespace

Implementation cuda_api() { return {"public API (CUDA kernels)", run_cuda, declines}; }

}  // namespace hopattn::fuzz
