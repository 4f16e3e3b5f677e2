// A one-line progress bar on stderr for runs longer than a second or so; drawn only when stderr
// is a terminal, and redrawn by a ticker thread so the clock moves during long single calls.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace hopattn::cli {

class Progress {
 public:
  // `total` steps (rows of the tour, iterations of a benchmark).
  Progress(std::string title, int total);
  ~Progress();  // clears the line
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // What the current step is doing, and how far into it (0..1) the bar should show.
  void set_detail(std::string detail, double within_step = 0.0);
  void step_done();

 private:
  void draw();
  void ticker();

  const bool enabled_;
  const std::string title_;
  const int total_;
  const std::chrono::steady_clock::time_point start_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool drawn_ = false;
  int done_ = 0;
  double within_ = 0.0;
  std::string detail_;
  std::thread thread_;
};

}  // namespace hopattn::cli
