#include "report.hpp"

#include <algorithm>
#include <cstdio>

namespace hopattn::cli {
namespace {

void print_details(const std::vector<Row>& rows, std::ostream& out) {
  bool any = false;
  for (const Row& r : rows) {
    if (r.detail.empty()) continue;
    out << (any ? "" : "\nDetails:\n") << "  " << r.detail << '\n';
    any = true;
  }
}

// Each ratio group's rows against its first timed row: time(row) / time(first).
void print_ratios(const std::vector<Row>& rows, std::ostream& out) {
  std::vector<std::string> groups;
  for (const Row& r : rows) {
    if (!r.ratio_group.empty() &&
        std::find(groups.begin(), groups.end(), r.ratio_group) == groups.end()) {
      groups.push_back(r.ratio_group);
    }
  }
  for (const std::string& g : groups) {
    const Row* base = nullptr;
    std::vector<const Row*> others;
    for (const Row& r : rows) {
      if (r.ratio_group != g || !r.time_ms || *r.time_ms <= 0) continue;
      if (base == nullptr) {
        base = &r;
      } else {
        others.push_back(&r);
      }
    }
    if (base == nullptr || others.empty()) continue;
    const std::string name = base->family + " " + base->impl;
    out << "\n"
        << name << " vs the alternatives on " << base->shape << ": time of each / time of " << name
        << " (> 1: " << name << " is faster)\n";
    for (const Row* r : others) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2fx", *r->time_ms / *base->time_ms);
      out << "  " << r->impl << ": " << buf << '\n';
    }
  }
}

}  // namespace

int run_and_report(const std::string& title, const std::vector<RunRequest>& requests, bool csv,
                   std::ostream& out) {
  std::vector<Row> rows;
  {
    Progress progress(title, static_cast<int>(requests.size()));
    for (RunRequest r : requests) {
      r.progress = &progress;
      rows.push_back(run_row(r));
      progress.step_done();
    }
  }
  print_table(out, rows, csv);
  if (csv) return std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.failed; });

  std::vector<std::string> notes;
  int ok = 0, failed = 0, other = 0;
  for (const Row& r : rows) {
    if (!r.note.empty() && std::find(notes.begin(), notes.end(), r.note) == notes.end()) {
      notes.push_back(r.note);
    }
    (r.failed ? failed : r.status == "OK" ? ok : other) += 1;
  }
  if (!notes.empty()) {
    out << "\nChecked against:\n";
    for (const std::string& n : notes) out << "  " << n << '\n';
  }
  print_details(rows, out);
  print_ratios(rows, out);
  out << '\n'
      << rows.size() << (rows.size() == 1 ? " row: " : " rows: ") << ok << " OK, " << failed
      << " failed, " << other << " not run or unchecked\n";
  return failed > 0 ? 1 : 0;
}

}  // namespace hopattn::cli
