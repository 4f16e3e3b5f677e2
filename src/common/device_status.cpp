#include "common/device_status.hpp"

#include "hopattn/error.hpp"

namespace hopattn {

const char* status_family_name(StatusFamily family) {
  switch (family) {
    case StatusFamily::kFwd:
      return "attention_fwd";
    case StatusFamily::kBwd:
      return "attention_bwd";
    case StatusFamily::kDecode:
      return "decode";
    case StatusFamily::kMla:
      return "mla";
    case StatusFamily::kBatch:
      return "BatchAttention.run";
    case StatusFamily::kMerge:
      return "merge_states";
  }
  return "an unknown family";
}

std::string describe_status(const DeviceStatus& s) {
  if (s.tag == 0) return {};
  using detail::concat;
  const std::string head =
      concat("hopattn.check_errors: ", status_family_name(status_family(s.tag)), ": request ",
             s.request, ": ");
  const std::string at = s.position >= 0 ? concat(" entry ", s.position) : std::string();
  // Offsets arrays: `size` says what the bound is, `then` what the kernel did.
  const auto offsets = [&](const char* name, const char* size, const char* then) {
    return concat(name, at, " = ", s.value, ": expected non-decreasing offsets in 0..", s.bound,
                  " (", size, "); ", then);
  };
  std::string what;
  switch (status_index(s.tag)) {
    case StatusIndex::kPage:
      what = concat("page table", at, " = ", s.value, ": expected a page index in [0, ", s.bound,
                    ") (the pages of the pool); its keys were read as zeros");
      break;
    case StatusIndex::kKvLen:
      what = concat("kv_lens = ", s.value, ": expected 0..", s.bound,
                    " (the tokens its page list holds); the kernel read at most those");
      break;
    case StatusIndex::kPageIndptr:
      what = offsets("page_indptr", "the size of page_indices", "the request read no keys");
      break;
    case StatusIndex::kCuSeqlensQ:
      what = offsets("cu_seqlens_q", "the rows of q", "the request was skipped");
      break;
    case StatusIndex::kCuSeqlensK:
      what = offsets("cu_seqlens_k", "the rows of k", "the request read no keys");
      break;
    case StatusIndex::kSharedKvLen:
      what = concat("shared_kv_lens = ", s.value, ": expected 0..", s.bound,
                    " (the shortest kv_len among its beams); the kernel clamped it");
      break;
    default:
      what = concat("index kind ", static_cast<uint32_t>(status_index(s.tag)), ", value ", s.value,
                    ", bound ", s.bound);
      break;
  }
  return head + what + " (outputs of this launch are not valid)";
}

}  // namespace hopattn
