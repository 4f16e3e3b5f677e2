// hopattn: the demo tour of every attention family and per-family benchmarks.
#include <iostream>

#include "cli_args.hpp"
#include "commands.hpp"

int main(int argc, char** argv) {
  using namespace hopattn::cli;
  try {
    const Command cmd = parse_command(argc, argv);
    switch (cmd.kind) {
      case Command::Kind::kHelp:
        std::cout << main_help();
        return 0;
      case Command::Kind::kBenchHelp:
        std::cout << bench_help();
        return 0;
      case Command::Kind::kBench:
        return run_bench(cmd.family, cmd.flags, std::cout);
      case Command::Kind::kTour:
        return run_tour(cmd.flags, std::cout);
      case Command::Kind::kScript:
        return run_script(cmd.script, std::cout);
    }
  } catch (const UsageError& e) {
    std::cerr << "hopattn: " << e.what() << "\n(see hopattn --help)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "hopattn: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
