// `hopattn script FILE`: many bench commands in one process, so that a device session's A/B rows
// pay the process start and the CUDA context once instead of once a row.
#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

#include "cli_args.hpp"
#include "commands.hpp"

namespace hopattn::cli {

int run_script(const std::string& path, std::ostream& out) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    file.open(path);
    if (!file) throw UsageError("script: cannot read " + path);
    in = &file;
  }
  int status = 0;
  std::string line;
  for (int number = 1; std::getline(*in, line); ++number) {
    std::istringstream words(line);
    std::vector<std::string> args{"hopattn"};
    for (std::string w; words >> w;) args.push_back(w);
    if (args.size() == 1 || args[1][0] == '#') continue;
    out << "# line " << number << ": " << line << "\n";
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    try {
      const Command cmd = parse_command(static_cast<int>(argv.size()), argv.data());
      if (cmd.kind != Command::Kind::kBench) {
        throw UsageError("script: each line is a bench command (bench FAMILY [flags])");
      }
      status = std::max(status, run_bench(cmd.family, cmd.flags, out));
    } catch (const UsageError& e) {
      out << "# error: " << e.what() << "\n";
      status = std::max(status, 2);
    } catch (const std::exception& e) {
      out << "# error: " << e.what() << "\n";
      status = std::max(status, 1);
    }
    out.flush();
  }
  return status;
}

}  // namespace hopattn::cli
