// The check of the fwd kernel against the CPU reference (fwd_kernel_check.cpp), shared by the fwd
// GPU test files (fwd_kernel_test.cpp: dense and varlen; fwd_paged_test.cpp: paged KV and
// out-of-range rows). check_case() builds fresh seeded random inputs for a case, runs
// hopattn::attention_fwd on the device twice, and checks the error bound, NaN, LSE, guard regions
// and bitwise reruns (the rule is stated at the top of fwd_kernel_check.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hopattn/options.hpp"
#include "kernels/fwd/launch.hpp"

namespace hopattn::testing::fwd_check {

struct FwdCase {
  DType dtype = DType::kBF16;
  int hq = 1, hkv = 1, d = 128;
  int dv = 0;  // 0: same as d
  bool varlen = false;
  std::vector<int> q_lens, kv_lens;  // per request; dense: all equal
  AttentionOptions opts;
  bool sinks = false;
  bool packed_qkv = false;  // q, k, v are head slices of one [.., Hq + 2 Hkv, D] buffer
  double qk_range = 2.0;    // q, k uniform in [-qk_range, qk_range); v in [-1, 1)

  // Varlen only: K and V rows of requests with q_len 0, and `extra_kv_rows` rows after the last
  // request, hold NaN (K) and Inf (V). A kernel that reads a neighbour's rows past a sequence's
  // end without zeroing them turns P = 0 times those into NaN.
  bool poison_idle_requests = false;
  int extra_kv_rows = 0;

  // Paged KV (page_size > 0; q is varlen): pools [P, page_size, Hkv, D] (NHD) or
  // [P, Hkv, page_size, D] (HND), pages relabelled by a random permutation, addressed by a block
  // table or CSR. Every slot that holds no token (the tail of a request's last page, unused
  // pages) is NaN.
  int page_size = 0;
  KVLayout layout = KVLayout::kNHD;
  bool csr = false;
  // Paged: the pools start their device allocations (as a framework's own cache tensor does);
  // else 1 MB of the allocation precedes them (a pool carved from a larger cache). Both take the
  // same loader (an earlier map design faulted for the first placement only).
  bool pool_at_allocation_start = false;

  // The kernel's launch variant (kernels::fwd::LaunchOptions): e.g. the wide KV tiles forced on
  // shapes the automatic rule would run with the base row.
  kernels::fwd::LaunchOptions launch;

  int batch() const { return static_cast<int>(q_lens.size()); }
  int d_v() const { return dv > 0 ? dv : d; }
  bool paged() const { return page_size > 0; }
  std::string describe() const;
};

FwdCase dense_case(DType dtype, int batch, int q_len, int kv_len, int hkv, int group, bool causal);
FwdCase varlen_case(DType dtype, std::vector<int> q_lens, std::vector<int> kv_lens, int hkv,
                    int group, bool causal);

// Empty when the GPU tests can run here; otherwise why not.
std::string skip_reason();

// Runs one case (EXPECTs inside; GTEST_SKIP where the CPU reference lacks a feature).
void check_case(const FwdCase& c, uint64_t seed);

// Runs hopattn::attention_fwd once on the case's device tensors, checking nothing: for the tests
// of the errors it raises.
void run_once(const FwdCase& c);

// One device-resident index of a case made bad after its tensors are built (the safety tests):
// request 0's first page id past the pool or negative, request 0's kv_len past its pages,
// cu_seqlens_q's last entry past q's rows, CSR indptr's last entry past page_indices, varlen
// cu_seqlens_k's last entry past k's rows.
enum class BadIndex { kPageId, kNegativePageId, kKvLen, kCuSeqlensQ, kCsrIndptr, kCuSeqlensK };

// Runs hopattn::attention_fwd once with that index bad, checking nothing (the caller checks
// hopattn::check_errors); returns the bad value written.
int64_t run_with_bad_index(const FwdCase& c, BadIndex bad);

// The KV loader the kernel picks for the case's device tensors (kernels::fwd::kv_load_path).
std::string kv_load_path(const FwdCase& c, const kernels::fwd::LaunchOptions& launch = {});

// Whether the kernel runs the case with its wide-KV-tile instance (kernels::fwd::runs_wide_tiles
// over the case's device tensors and c.launch).
bool runs_wide_tiles(const FwdCase& c);

}  // namespace hopattn::testing::fwd_check
