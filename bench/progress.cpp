#include "progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace hopattn::cli {
namespace {

constexpr double kShowAfterSeconds = 1.0;  // short runs never flash a bar
constexpr int kBarWidth = 24;

}  // namespace

Progress::Progress(std::string title, int total)
    : enabled_(isatty(STDERR_FILENO) == 1),
      title_(std::move(title)),
      total_(total > 0 ? total : 1),
      start_(std::chrono::steady_clock::now()) {
  if (enabled_) thread_ = std::thread([this] { ticker(); });
}

Progress::~Progress() {
  if (!enabled_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  if (drawn_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  }
}

void Progress::set_detail(std::string detail, double within_step) {
  std::lock_guard<std::mutex> lock(mutex_);
  detail_ = std::move(detail);
  within_ = within_step;
}

void Progress::step_done() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++done_;
  within_ = 0.0;
}

void Progress::ticker() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(200));
    if (!stop_) draw();
  }
}

// Called with mutex_ held.
void Progress::draw() {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (elapsed < kShowAfterSeconds) return;
  const int filled = static_cast<int>((done_ + within_) * kBarWidth / total_);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kBarWidth, '.');
  std::fprintf(stderr, "\r\033[K%s [%s] %d/%d %5.1fs  %s", title_.c_str(), bar.c_str(), done_,
               total_, elapsed, detail_.substr(0, 60).c_str());
  std::fflush(stderr);
  drawn_ = true;
}

}  // namespace hopattn::cli
