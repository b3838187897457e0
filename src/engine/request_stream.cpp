#include "engine/request_stream.h"

namespace kvlm {

std::optional<StreamEvent> RequestStream::pop_locked() {
  if (events_.empty()) return std::nullopt;
  StreamEvent ev = std::move(events_.front());
  events_.pop_front();
  if (ev.finished) final_taken_ = true;
  return ev;
}

std::optional<StreamEvent> RequestStream::next() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !events_.empty() || final_taken_; });
  return pop_locked();
}

std::optional<StreamEvent> RequestStream::next_for(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !events_.empty() || final_taken_; });
  return pop_locked();
}

std::optional<StreamEvent> RequestStream::try_next() {
  std::lock_guard lock(mu_);
  return pop_locked();
}

void RequestStream::set_listener(std::function<void()> listener) {
  std::lock_guard lock(mu_);
  listener_ = std::move(listener);
  if (!events_.empty()) notify_locked();
}

void RequestStream::notify_locked() {
  if (listener_) listener_();
}

bool RequestStream::done() const {
  std::lock_guard lock(mu_);
  return final_taken_;
}

RequestStats RequestStream::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void RequestStream::push(std::vector<int32_t> tokens, std::string text, std::vector<SampledLogprobs> logprobs,
                         std::vector<SampledLogprobs> prompt_logprobs) {
  {
    std::lock_guard lock(mu_);
    if (final_produced_) return;
    // Coalesce with a pending event so a slow reader gets fewer, larger events.
    if (!events_.empty() && !events_.back().finished && !events_.back().replayed) {
      auto& back = events_.back();
      back.tokens.insert(back.tokens.end(), tokens.begin(), tokens.end());
      back.text += text;
      back.logprobs.insert(back.logprobs.end(), logprobs.begin(), logprobs.end());
      back.prompt_logprobs.insert(back.prompt_logprobs.end(), prompt_logprobs.begin(), prompt_logprobs.end());
    } else {
      events_.push_back(StreamEvent{std::move(tokens), std::move(text), false, std::nullopt, std::nullopt,
                                    std::move(logprobs), std::move(prompt_logprobs)});
    }
    notify_locked();
  }
  cv_.notify_all();
}

void RequestStream::push_replayed(std::vector<int32_t> tokens, std::string text) {
  {
    std::lock_guard lock(mu_);
    StreamEvent ev;
    ev.tokens = std::move(tokens);
    ev.text = std::move(text);
    ev.replayed = true;
    events_.push_back(std::move(ev));
    notify_locked();
  }
  cv_.notify_all();
}

void RequestStream::finish(FinishReason reason, RequestStats stats, std::string final_text) {
  {
    std::lock_guard lock(mu_);
    if (final_produced_) return;
    final_produced_ = true;
    stats_ = std::move(stats);
    events_.push_back(StreamEvent{{}, std::move(final_text), true, reason, std::nullopt, {}, {}});
    notify_locked();
  }
  cv_.notify_all();
}

void RequestStream::fail(Error error) {
  {
    std::lock_guard lock(mu_);
    if (final_produced_) return;
    final_produced_ = true;
    events_.push_back(StreamEvent{{}, {}, true, std::nullopt, std::move(error), {}, {}});
    notify_locked();
  }
  cv_.notify_all();
}

}  // namespace kvlm
