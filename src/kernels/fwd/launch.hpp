// Host entry of the fwd kernel family (no CUDA headers: included by src/api/dispatch.cpp).
#pragma once

#include <string>

#include "hopattn/options.hpp"

namespace hopattn::kernels::fwd {

// Launch variants kept to be timed against the default (the benchmark sets them; the public API
// runs the defaults).
struct LaunchOptions {
  // Paged KV by TMA boxes where the page size allows them. false: the cp.async gather for every
  // page size, to time one loader against the other or to tell a TMA problem from anything else.
  bool paged_tma = true;
  // Which tile the dense and varlen calls run (configs.hpp): kAuto the wide instance
  // (kFwdWideConfigs) where plan/fwd_tiles.hpp says (its key floor; 192-row tiles under a
  // causal diagonal only on dense calls), else the base row; kBase and kWide force one (kWide
  // falls back to the base row where the head dims have no wide instance or K/V are paged).
  enum class KVTiles { kAuto, kBase, kWide };
  KVTiles kv_tiles = KVTiles::kAuto;
  // The order of the persistent walk over a dense call's tiles: kAuto the rule of
  // plan/fwd_order.hpp (128-row tiles) or plan/fwd_walk_replay.hpp (192-row tiles), kPlain the
  // longest-first walk, kPaired units of m-blocks n - 1 - k and k (any mask and m-block count; an
  // odd count walks one empty m-block). Varlen and paged calls always walk plain (their lengths
  // live on the device).
  enum class Walk { kAuto, kPlain, kPaired };
  Walk walk = Walk::kAuto;
  // K/V bytes of one L2 section of the walk ((batch, head) pairs whose tiles run side by side,
  // tile_scheduler.cuh), in KiB; 0: plan::fwd_section_bytes (plan/fwd_order.hpp).
  int l2_section_kb = 0;
};

// Throws hopattn::Error(kNotImplemented) naming the first feature of this call that the CUDA
// kernel does not provide (head dims, host-resident index tensors, unaligned strides, ...).
void check_supported(const FwdArgs& args, const AttentionOptions& opts);

// Which KV loader a call runs, for tests and diagnostics: "contiguous" (dense and varlen), "paged
// TMA, boxes of N slots" or "paged gather". It encodes the tensor maps the loader needs, so a
// driver that refuses the page maps shows here as the fallback ("paged gather" for a page size
// TMA could serve), as does paged_tma = false. Launches nothing.
std::string kv_load_path(const FwdArgs& args, const LaunchOptions& launch = {});

// Whether a call runs the wide-KV-tile instance (LaunchOptions::kv_tiles); launches nothing.
bool runs_wide_tiles(const FwdArgs& args, const AttentionOptions& opts,
                     const LaunchOptions& launch = {});

// Runs the forward kernel on `stream` (the current device must hold the tensors, or the
// tensors' device is made current for the launch). Arguments must have passed
// validate::attention_fwd; unsupported ones throw as check_supported does.
void run(const FwdArgs& args, const AttentionOptions& opts, Stream stream,
         const LaunchOptions& launch = {});

}  // namespace hopattn::kernels::fwd
