// A progress bar on stderr for long work (model loading, perplexity,
// benchmarks), drawn only when stderr is a terminal: logs and pipes get
// nothing extra. Thread-safe: workers may call advance() concurrently.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace kvlm {

class ProgressBar {
 public:
  // Whether bars are drawn at all: stderr is a terminal (isatty) and TERM is
  // not "dumb".
  static bool enabled();

  // `total` units of work (> 0); `unit` names them ("MiB", "chunks").
  ProgressBar(std::string label, int64_t total, std::string unit = "");
  ~ProgressBar();  // erases the bar
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void advance(int64_t n = 1);
  void set(int64_t done);
  // Text after the counts, e.g. the perplexity so far.
  void set_note(std::string note);

 private:
  void draw_locked(bool force);

  const bool enabled_;
  const std::string label_, unit_;
  const int64_t total_;
  const std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  int64_t done_ = 0;
  std::string note_;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace kvlm
