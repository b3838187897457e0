#include "chat/reasoning.h"

#include <algorithm>

namespace kvlm {
namespace {

constexpr std::string_view kSpace = " \t\r\n";

// `s` without its leading space (an empty view at its end when all space).
std::string_view trim_left(std::string_view s) {
  const size_t first = s.find_first_not_of(kSpace);
  return s.substr(first == std::string_view::npos ? s.size() : first);
}

// Where a proper prefix of `marker` ends `text` (npos: none does).
size_t partial_marker(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(marker.size() - 1, text.size()); n > 0; --n)
    if (text.substr(text.size() - n) == marker.substr(0, n)) return text.size() - n;
  return std::string_view::npos;
}

}  // namespace

std::optional<ReasoningMarkers> detect_reasoning_markers(std::string_view src) {
  if (src.find("<think>") == std::string_view::npos && src.find("</think>") == std::string_view::npos)
    return std::nullopt;
  return ReasoningMarkers{};
}

namespace {

// Whether `text` ends with `marker`, space after it aside.
bool ends_with_marker(std::string_view text, std::string_view marker) {
  const size_t last = text.find_last_not_of(kSpace);
  if (last == std::string_view::npos) return false;
  const std::string_view body = text.substr(0, last + 1);
  return body.size() >= marker.size() && body.substr(body.size() - marker.size()) == marker;
}

}  // namespace

bool prompt_opens_reasoning(std::string_view prompt_text, const ReasoningMarkers& m) {
  return ends_with_marker(prompt_text, m.open);
}

bool prompt_closes_reasoning(std::string_view prompt_text, const ReasoningMarkers& m) {
  return ends_with_marker(prompt_text, m.close);
}

ReasoningPiece ReasoningSplitter::push(std::string_view text) {
  held_.append(text);
  ReasoningPiece out;
  if (phase_ == Phase::kBefore) {
    const std::string_view start = trim_left(held_);
    if (start.substr(0, markers_.open.size()) == markers_.open) {
      held_.erase(0, held_.size() - start.size() + markers_.open.size());
      phase_ = Phase::kThinking;
    } else if (std::string_view(markers_.open).substr(0, start.size()) == start) {
      return out;  // only space, or the open marker's beginning: not known yet
    } else {
      phase_ = Phase::kAnswer;
      answer_begun_ = true;  // no thinking: the answer is the output as written
    }
  }
  if (phase_ == Phase::kThinking) think(out);
  if (phase_ == Phase::kAnswer) answer(out);
  return out;
}

void ReasoningSplitter::think(ReasoningPiece& out) {
  const size_t close = held_.find(markers_.close);
  // Given out now: up to the close marker, else up to a partial one at the
  // end; space before either waits (it may be the space before the marker).
  const size_t stop = close != std::string::npos ? close : std::min(held_.size(), partial_marker(held_, markers_.close));
  std::string_view thought = std::string_view(held_).substr(0, stop);
  const size_t last = thought.find_last_not_of(kSpace);
  thought = thought.substr(0, last == std::string_view::npos ? 0 : last + 1);
  if (!reasoning_begun_) thought = trim_left(thought);
  reasoning_begun_ = reasoning_begun_ || !thought.empty();
  out.reasoning += thought;
  const size_t consumed = static_cast<size_t>(thought.end() - held_.data());
  if (close == std::string::npos) {
    held_.erase(0, consumed);
    return;
  }
  held_.erase(0, close + markers_.close.size());
  phase_ = Phase::kAnswer;
}

void ReasoningSplitter::answer(ReasoningPiece& out) {
  if (!answer_begun_) {
    const std::string_view start = trim_left(held_);
    if (start.empty()) {
      held_.clear();  // the space after the close marker
      return;
    }
    held_.erase(0, held_.size() - start.size());
    answer_begun_ = true;
  }
  out.content += held_;
  held_.clear();
}

ReasoningPiece ReasoningSplitter::finish() {
  ReasoningPiece out;
  switch (phase_) {
    case Phase::kBefore: out.content = std::move(held_); break;  // space, or an open marker begun
    case Phase::kThinking: {
      // Cut while thinking: the thought so far; a close marker begun at its
      // very end is markup being written, not thought.
      std::string_view rest = reasoning_begun_ ? std::string_view(held_) : trim_left(held_);
      rest = rest.substr(0, std::min(rest.size(), partial_marker(rest, markers_.close)));
      const size_t last = rest.find_last_not_of(kSpace);
      out.reasoning = std::string(rest.substr(0, last == std::string_view::npos ? 0 : last + 1));
      break;
    }
    case Phase::kAnswer: break;  // only the space after the marker can be held
  }
  held_.clear();
  return out;
}

}  // namespace kvlm
