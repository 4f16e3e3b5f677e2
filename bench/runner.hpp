// Runs one row of the table: builds a family's workload, runs it once on the chosen
// implementation, checks that result, then times it. Each family implements Workload in its own
// file (family_*.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cli_args.hpp"
#include "compare.hpp"
#include "progress.hpp"
#include "shape.hpp"
#include "table.hpp"

namespace hopattn::cli {

// A family's inputs and outputs on the host, plus device copies once uploaded.
class Workload {
 public:
  virtual ~Workload() = default;
  // Readies the inputs on one side: on the device, uploads everything; on either side, computes
  // inputs that come from another operation (bwd: the forward's out and lse).
  virtual void prepare(bool device) = 0;
  // Fills the outputs on one side with 0xff bytes (NaN), so unwritten elements fail the check.
  virtual void poison_outputs(bool device) = 0;
  // One call: the public API on host tensors (kCpu), on device tensors (kKernel), or the naive
  // GPU reference (kNaive).
  virtual void run(Impl impl) = 0;
  // After run(kCpu): the result against an independent computation of the same math.
  virtual Check check_cpu() = 0;
  // After a GPU run: the downloaded result against the CPU reference on a subset of it.
  virtual Check check_gpu() = 0;
  // What check_cpu / check_gpu compare against, for the notes under the table.
  virtual std::string cpu_check_note() const = 0;
  virtual std::string gpu_check_note() const = 0;
  // After the runs: anything worth a line under the table (batch: plan() time), or "".
  virtual std::string detail() const { return ""; }
};

std::unique_ptr<Workload> make_fwd_workload(const Shape& s, uint64_t seed);
std::unique_ptr<Workload> make_bwd_workload(const Shape& s, uint64_t seed);
std::unique_ptr<Workload> make_decode_workload(const Shape& s, uint64_t seed);
std::unique_ptr<Workload> make_mla_workload(const Shape& s, uint64_t seed);
// On the CPU the merged states come from a forward over two halves of the keys (checked against
// the forward over all of them); on the GPU they are random.
std::unique_ptr<Workload> make_merge_workload(const Shape& s, uint64_t seed, bool cpu);
// s.batch_impl says which calls run() makes; all three fill the same out / lse.
std::unique_ptr<Workload> make_batch_workload(const Shape& s, uint64_t seed);

struct RunRequest {
  Shape shape;
  Impl impl = Impl::kCpu;  // kKernel, kNaive or kCpu
  int warmup = 1;
  int iters = 3;
  bool check = true;
  L2Flush l2_flush = L2Flush::kWrite;  // GPU: before each timed call (--l2-flush, --warm-l2)
  int chain = 1;                       // GPU: calls a timed iteration, back to back (--chain)
  SmHoldSpec hold;                     // GPU: SMs held around each call (--hold-sms, --free-sms)
  uint64_t seed = 0;
  Progress* progress = nullptr;
};

// Never throws for a failing kernel or check: the row's status says what happened.
Row run_row(const RunRequest& request);

// Whether the naive GPU reference covers a family (fwd and decode).
bool has_naive(Family f);

}  // namespace hopattn::cli
