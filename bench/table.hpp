// The result table: one row per (family, implementation), printed aligned for people or as CSV.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace hopattn::cli {

struct Row {
  std::string family;
  std::string impl;  // "kernel", "naive-ref", "cpu-ref"
  std::string shape;
  std::string device;  // "NVIDIA H200", "CPU"
  std::optional<double> time_ms;
  std::optional<double> host_us;  // GPU rows: host time of one call's enqueue (Timing)
  std::optional<double> rate;     // per second, in rate_unit
  std::string rate_unit;          // "FLOP/s" or "B/s"; printed with a T/G/M prefix (CSV: T)
  std::optional<double> max_err;
  std::string status;  // "OK", "FAIL: ...", "no GPU kernel yet", ...
  bool failed = false;
  std::string note;    // what the row was checked against (printed under the table)
  std::string detail;  // more about the run (batch: plan() host time), printed under the table
  // Rows of one non-empty group are printed as time ratios to the group's first row (batch: the
  // alternatives to BatchAttention on the same step).
  std::string ratio_group;
};

void print_table(std::ostream& os, const std::vector<Row>& rows, bool csv);

}  // namespace hopattn::cli
