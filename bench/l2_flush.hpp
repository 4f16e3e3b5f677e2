// How the L2 is emptied before a timed GPU call (device_flush.cu; CLI --l2-flush, --warm-l2).
#pragma once

namespace hopattn::cli {

// kWrite overwrites a buffer twice the L2's size (the tables' method): it leaves the L2 full of
// dirty lines, which the timed call's misses write back. kRead reads one: clean lines, as the
// weight-reading kernels before a model's attention leave the L2. kNone keeps the L2 warm.
enum class L2Flush { kNone, kWrite, kRead };

}  // namespace hopattn::cli
