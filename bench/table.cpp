#include "table.hpp"

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <sstream>

namespace hopattn::cli {
namespace {

std::string format_time(const std::optional<double>& ms) {
  if (!ms) return "-";
  char buf[32];
  if (*ms >= 1000) {
    std::snprintf(buf, sizeof buf, "%.2f s", *ms / 1000);
  } else if (*ms >= 1) {
    std::snprintf(buf, sizeof buf, "%.3f ms", *ms);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f us", *ms * 1000);
  }
  return buf;
}

std::string format_rate(const Row& r) {
  if (!r.rate) return "-";
  const double v = *r.rate;
  const char* prefix = v >= 1e12 ? "T" : v >= 1e9 ? "G" : "M";
  const double scaled = v >= 1e12 ? v * 1e-12 : v >= 1e9 ? v * 1e-9 : v * 1e-6;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.4g %s%s", scaled, prefix, r.rate_unit.c_str());
  return buf;
}

std::string format_err(const std::optional<double>& e) {
  if (!e) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", *e);
  return buf;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace

void print_table(std::ostream& os, const std::vector<Row>& rows, bool csv) {
  if (csv) {
    os << "family,impl,shape,device,time_ms,rate,rate_unit,max_err,status,host_us\n";
    for (const Row& r : rows) {
      os << r.family << ',' << r.impl << ',' << csv_field(r.shape) << ',' << csv_field(r.device)
         << ',' << (r.time_ms ? std::to_string(*r.time_ms) : "") << ','
         << (r.rate ? std::to_string(*r.rate * 1e-12) : "") << ",T" << r.rate_unit << ','
         << (r.max_err ? format_err(r.max_err) : "") << ',' << csv_field(r.status) << ','
         << (r.host_us ? std::to_string(*r.host_us) : "") << '\n';
    }
    return;
  }
  const std::vector<std::string> header = {"family", "impl", "shape",   "device",
                                           "time",   "rate", "max err", "status"};
  std::vector<std::vector<std::string>> cells;
  for (const Row& r : rows) {
    cells.push_back({r.family, r.impl, r.shape, r.device, format_time(r.time_ms), format_rate(r),
                     format_err(r.max_err), r.status});
  }
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& row : cells) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& v) {
    for (size_t c = 0; c < v.size(); ++c) {
      os << (c ? "  " : "");
      // Numbers right-aligned, text left-aligned; the last column is not padded.
      const bool numeric = c >= 4 && c <= 6;
      if (c + 1 == v.size()) {
        os << v[c];
      } else {
        os << (numeric ? std::right : std::left) << std::setw(static_cast<int>(width[c])) << v[c];
      }
    }
    os << std::left << '\n';
  };
  line(header);
  std::vector<std::string> rule;
  for (size_t w : width) rule.emplace_back(w, '-');
  line(rule);
  for (const auto& row : cells) line(row);
}

}  // namespace hopattn::cli
