#include "report.hpp"

#include <algorithm>

namespace hopattn::cli {

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
  out << '\n'
      << rows.size() << (rows.size() == 1 ? " row: " : " rows: ") << ok << " OK, " << failed
      << " failed, " << other << " not run or unchecked\n";
  return failed > 0 ? 1 : 0;
}

}  // namespace hopattn::cli
