// Runs a list of rows under one progress bar and prints the table, the notes on what each row
// was checked against, and a one-line summary.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "runner.hpp"

namespace hopattn::cli {

// Returns the exit code: 1 when a row failed, else 0.
int run_and_report(const std::string& title, const std::vector<RunRequest>& requests, bool csv,
                   std::ostream& out);

}  // namespace hopattn::cli
