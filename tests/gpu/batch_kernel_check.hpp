// The batch family's CUDA path (BatchAttention with a CUDA device) against the same step run by a
// second BatchAttention on the CPU (fp32 tensors holding the very values the GPU reads: the 16-bit
// values, or the decoded fp8 e4m3 codes; the same k / v scales; its output is not rounded to 16
// bits). Used by batch_kernel_test.cpp.
//
// A step's buffers are built for a Geometry (rows of q / out / lse, pages of the pools, rows and
// width of the block table) that may exceed what the step needs, so that steps of different
// compositions can be written into the same device buffers (the CUDA graph test). Every pool slot
// no request owns, the poison page every unused block-table entry points at, and every q row past
// the step's tokens hold NaN (0xff bytes: NaN in bf16, fp16, fp32 and fp8 e4m3); out / lse are
// poisoned the same way before each run, so a row the kernel never writes, or a read past kv_len
// or through a wrong page, shows up.
//
// Long steps check a sample of rows: row i of a request (q_len, kv_len) is, for a causal mask (or
// a window with right = 0), the same attention as a request (1, kv_len - q_len + 1 + i) over the
// same pages, and without any mask the same as (1, kv_len). The reference then runs only those
// one-row requests; every other row of the GPU result is still checked to be written and finite.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda_stream.hpp"
#include "device_buffer.hpp"
#include "gpu_test_support.hpp"
#include "hopattn/batch.hpp"
#include "plan/batch_plan.hpp"
#include "support/host_tensor.hpp"

namespace hopattn::testing::batch_check {

struct StepSpec {
  std::string name;
  DType dtype = DType::kBF16;  // q and out
  // K / V: dtype, or fp8 e4m3 (run), or e5m2 / int8 (only the rejection tests use those).
  DType cache_dtype = DType::kBF16;
  int kv_heads = 2, group = 4, head_dim = 128, page_size = 16;
  KVLayout layout = KVLayout::kNHD;
  bool causal = true;
  Window window{};
  float softcap = 0.f;
  bool sinks = false;  // fp32 [Hq] in [-1, 2); head 0's is -inf
  // The cache's dequantization (real = stored * scale), the same for the GPU and the reference.
  // per_head_scales: fp32 [kv_heads] tensors of distinct values derived from k_scale / v_scale
  // (make_host_step) go with the scalars, which they override.
  float k_scale = 1.f, v_scale = 1.f;
  bool per_head_scales = false;
  // fp8 caches: codes of every finite value (up to 448 in magnitude), not only those below 2
  // (pair it with small scales: see e4m3_table in batch_kernel_check.cpp).
  bool fp8_all_codes = false;
  int num_ctas = 0;
  std::vector<int32_t> q_lens, kv_lens;  // the step (kv_lens include the q tokens)
  int sample_rows = 0;     // > 0: requests with more q tokens are checked on this many rows
  int request_stride = 1;  // the reference checks every request_stride-th request
  int max_batch = 0, max_tokens = 0;  // the BatchAttention's limits; 0 = the step's own
  int pad_rows = 3;                   // q / out / lse rows past the step's tokens
  // The K/V pools at the start of their device allocations (the kernel then gathers them);
  // else 1 MB of the allocation precedes them and the paged TMA path runs.
  bool pool_at_allocation_start = false;
  // The side-lane kernel (BatchAttentionVariants::side_decodes): decodes of <= 8 rows on the
  // producer's warps 2 and 3 beside the prefill tiles; kAuto: where the planner picks it.
  plan::BatchOverlap side_lane = plan::BatchOverlap::kAuto;
  // Prefill and decode items on separate CTAs (BatchAttentionVariants::partition_decodes);
  // kAuto: where the planner picks it.
  plan::BatchOverlap partition = plan::BatchOverlap::kAuto;
  // The concurrent form (BatchAttentionVariants::concurrent_decodes): off unless a test asks, so
  // that the other tests keep running the single plan their switches pick.
  plan::BatchOverlap concurrent = plan::BatchOverlap::kOff;
  // The concurrent form's decode kernel (BatchAttentionVariants::concurrent_decode_kernel).
  DecodeKernel concurrent_decode_kernel = DecodeKernel::kAuto;
  // The concurrent form's tail (BatchAttentionVariants::concurrent_tail; 0: off).
  int concurrent_tail_milli = 0;
  // The concurrent form's SM order (BatchAttentionVariants::concurrent_sm_order; empty: none).
  // Where the card has as many SMs as the grid has CTAs, the check also reads the launch's claims:
  // every prefill list claimed once, at least the decodes' SMs' CTAs counted.
  std::vector<int> concurrent_sm_order;
  // The order from the card's GPCs instead (BatchAttentionVariants::concurrent_sm_spread).
  bool concurrent_sm_gpc = false;

  int q_heads() const { return kv_heads * group; }
  int batch() const { return static_cast<int>(q_lens.size()); }
  int total_q() const;
};

std::string describe(const StepSpec& s);
BatchAttentionConfig config_of(const StepSpec& s, Device device);
Device cuda_device();  // the current CUDA device

struct Geometry {
  int64_t rows = 0, pages = 0, table_rows = 0, table_width = 1;
};
Geometry geometry_of(const StepSpec& s);
Geometry cover(const Geometry& a, const Geometry& b);  // large enough for both

// Host buffers of one step; cu_t / kv_t / table have geometry.table_rows rows, of which the
// step's first B are meaningful (leading() views of them go into BatchArgs).
struct HostStep {
  StepSpec spec;
  Geometry geometry;
  std::vector<int32_t> cu, kv;
  PagePlan pages;
  HostTensor q, k, v, out, lse, cu_t, kv_t, table, sinks;
  HostTensor k_scale, v_scale;  // fp32 [kv_heads] with spec.per_head_scales, else absent
  double vmax = 0;              // largest |V| of the cache (dequantized: times its v scale)
  int batch() const { return spec.batch(); }
  int total_q() const { return cu.back(); }
};
std::unique_ptr<HostStep> make_host_step(const StepSpec& s, const Geometry& g,
                                         std::mt19937_64& rng);

// The first n entries (rows) of dim 0.
TensorView leading(const TensorView& t, int64_t n);

// The CPU reference on the rows it checks: out fp32 [n, Hq, D] and lse [n, Hq] for GPU rows
// `rows` (ascending).
struct Reference {
  std::vector<int64_t> rows;
  HostTensor out, lse;
  double seconds = 0;
};
Reference cpu_reference(const HostStep& h, std::mt19937_64& rng);

// A device copy of a host tensor (absent tensors stay absent); put() uploads again in place.
struct DeviceCopy {
  std::unique_ptr<DeviceTensor> t;
  TensorView view;
  void put(const HostTensor& h, size_t front = 0);
};

struct Outputs {
  HostTensor out, lse;
};

// Device copies of a step's buffers; upload() writes another step of the same geometry into them.
class DeviceStep {
 public:
  explicit DeviceStep(const HostStep& h) { upload(h); }
  void upload(const HostStep& h);
  BatchArgs args(const HostStep& h, Workspace ws) const;
  void poison_outputs();
  Outputs download(const HostStep& h) const;

 private:
  DeviceCopy q_, k_, v_, out_, lse_, cu_, kv_, table_, sinks_, k_scale_, v_scale_;
};

// A zeroed device workspace of `bytes`.
struct DeviceWorkspace {
  explicit DeviceWorkspace(size_t bytes);
  DeviceAllocation buffer;
  Workspace ws;
};

enum class PlanMode {
  kUploadArrays,   // plan(int32*, int32*, B, workspace, stream)
  kUploadTensors,  // plan(TensorView, TensorView, workspace, stream)
  kPlain,          // plan(int32*, int32*, B): run() uploads
};
const char* plan_mode_name(PlanMode m);
void plan_step(BatchAttention& ba, const HostStep& h, PlanMode mode, Workspace ws,
               const CudaStream& stream);

// Poisons out / lse, runs, waits, downloads.
Outputs run_once(const BatchAttention& ba, DeviceStep& dev, const HostStep& h, Workspace ws,
                 const CudaStream& stream);

struct Verdict {
  int64_t checked = 0;      // elements compared with the reference
  int64_t bad = 0;          // beyond the bound, or NaN
  int64_t bad_lse = 0;      // beyond 1e-3, or -inf on one side only, or NaN
  int64_t unwritten = 0;    // elements of the step's rows that are NaN / Inf (poison left)
  int64_t pad_written = 0;  // rows past the step's tokens that are not poison any more
  double tol = 0, max_err = 0, max_lse_err = 0;
  std::string first;
};
// Output bound 4 u vmax (u: the unit roundoff of q's 16-bit dtype, vmax: HostStep::vmax), lse
// 1e-3: see the test file.
Verdict judge(const HostStep& h, const Outputs& got, const Reference& ref);
// EXPECTs on the verdict, naming `what`.
void expect_good(const Verdict& v, const std::string& what);
bool bitwise_equal(const Outputs& a, const Outputs& b);
// "[ batch ] name: ..." on stdout.
void print_line(const HostStep& h, const BatchPlanSummary& p, const Verdict& v,
                const Reference& ref, const char* extra);

// The whole check of one step on a fresh BatchAttention: reference, plan (mode), two runs
// (the first against the reference, the second bitwise equal). Returns what plan() made.
BatchPlanSummary check_step(const StepSpec& s, PlanMode mode);

}  // namespace hopattn::testing::batch_check
