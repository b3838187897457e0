// Reasoning models (DeepSeek-R1 and its distills, Qwen3, QwQ) think before
// they answer, between markers their chat template knows: <think> ...
// </think>. A template that opens the section in the generation prompt
// (R1's ends with "<｜Assistant｜><think>\n") has the output start inside it;
// others (Qwen3's) leave it to the model to open. The server answers the
// thinking apart from the answer (message.reasoning_content, as vLLM and
// llama.cpp do): ReasoningSplitter reads an output, streamed or whole, into
// the two.
//
//   ReasoningSplitter s(*markers, /*opened=*/true);
//   for (text piece : output) { ReasoningPiece p = s.push(piece); send(p.reasoning, p.content); }
//   ReasoningPiece rest = s.finish();
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kvlm {

struct ReasoningMarkers {
  std::string open = "<think>";
  std::string close = "</think>";
};

// The markers a template's model thinks between, read off its source
// (nullopt: the template shows none, the model does not think).
std::optional<ReasoningMarkers> detect_reasoning_markers(std::string_view template_source);
// Whether a rendered prompt ends inside a thinking section: its text ends
// with the open marker (space after it aside). A prompt that opened and
// closed it (Qwen3 with enable_thinking false) has not.
bool prompt_opens_reasoning(std::string_view prompt_text, const ReasoningMarkers& m);
// Whether it ends right after the close marker (space aside): the template
// closed the section itself, turning thinking off (Qwen3's enable_thinking false).
bool prompt_closes_reasoning(std::string_view prompt_text, const ReasoningMarkers& m);

struct ReasoningPiece {
  std::string reasoning;
  std::string content;
};

// Splits an output into its thinking and its answer. The thinking is the
// text between the markers (the output's start when `opened`), without the
// space around it; the answer is what follows the close marker, without
// its leading space. An output that does not open the section (and was not
// opened) is all answer. A marker split over pieces is held back until it
// is known, so no part of one is ever given out (one cut off at the end of
// the output is dropped, as markup being written).
class ReasoningSplitter {
 public:
  ReasoningSplitter(ReasoningMarkers markers, bool opened)
      : markers_(std::move(markers)), phase_(opened ? Phase::kThinking : Phase::kBefore) {}

  ReasoningPiece push(std::string_view text);
  // The output has ended: what was held back.
  ReasoningPiece finish();
  // The answer has begun (the close marker came, or the output never thought).
  bool answering() const { return phase_ == Phase::kAnswer; }

 private:
  enum class Phase { kBefore, kThinking, kAnswer };
  void think(ReasoningPiece& out);
  void answer(ReasoningPiece& out);

  ReasoningMarkers markers_;
  Phase phase_;
  std::string held_;              // text read but not given out yet
  bool reasoning_begun_ = false;  // some thinking was given out (its leading space is dropped before)
  bool answer_begun_ = false;     // some answer was given out after thinking
};

}  // namespace kvlm
