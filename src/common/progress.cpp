#include "common/progress.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <unistd.h>

namespace kvlm {
namespace {

constexpr int kBarWidth = 30;
// Redraws at most this often: a terminal is slow and the work is not.
constexpr auto kRedrawEvery = std::chrono::milliseconds(100);

}  // namespace

bool ProgressBar::enabled() {
  const char* term = std::getenv("TERM");
  return ::isatty(STDERR_FILENO) == 1 && !(term && std::strcmp(term, "dumb") == 0);
}

ProgressBar::ProgressBar(std::string label, int64_t total, std::string unit)
    : enabled_(enabled()), label_(std::move(label)), unit_(std::move(unit)), total_(std::max<int64_t>(total, 1)),
      start_(std::chrono::steady_clock::now()) {
  std::lock_guard lock(mu_);
  draw_locked(true);
}

ProgressBar::~ProgressBar() {
  if (!enabled_) return;
  std::fputs("\r\033[K", stderr);  // back to an empty line for what follows
  std::fflush(stderr);
}

void ProgressBar::advance(int64_t n) {
  std::lock_guard lock(mu_);
  const bool was_done = done_ >= total_;
  done_ += n;
  draw_locked(!was_done && done_ >= total_);  // the last step is always drawn, once
}

void ProgressBar::set(int64_t done) {
  std::lock_guard lock(mu_);
  const bool was_done = done_ >= total_;
  done_ = done;
  draw_locked(!was_done && done_ >= total_);
}

void ProgressBar::set_note(std::string note) {
  std::lock_guard lock(mu_);
  note_ = std::move(note);
}

void ProgressBar::draw_locked(bool force) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - last_draw_ < kRedrawEvery) return;
  last_draw_ = now;
  const double frac = std::clamp(static_cast<double>(done_) / total_, 0.0, 1.0);
  const int filled = static_cast<int>(frac * kBarWidth);
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  std::string eta;
  if (done_ > 0 && done_ < total_) eta = fmt::format(" ETA {:.0f} s", elapsed / done_ * (total_ - done_));
  const std::string line = fmt::format("\r\033[K{} [{}{}] {:3.0f}% {}/{}{}{}{}{}", label_, std::string(filled, '#'),
                                       std::string(kBarWidth - filled, '.'), 100 * frac, done_, total_,
                                       unit_.empty() ? "" : " ", unit_, eta, note_.empty() ? "" : "  " + note_);
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

}  // namespace kvlm
