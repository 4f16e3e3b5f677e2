// The commands of the CLI. Each prints a table (and notes) to `out` and returns the exit
// code: 0 every row passed or has no GPU kernel yet, 1 a row failed.
#pragma once

#include <ostream>
#include <string>

#include "cli_args.hpp"

namespace hopattn::cli {

inline constexpr uint64_t kDefaultSeed = 20260;

int run_tour(const BenchFlags& flags, std::ostream& out);
int run_bench(Family family, const BenchFlags& flags, std::ostream& out);
// `hopattn script FILE`: every line of FILE (or standard input for "-") a bench command, all in
// this one process; returns the worst line's exit code.
int run_script(const std::string& path, std::ostream& out);

}  // namespace hopattn::cli
