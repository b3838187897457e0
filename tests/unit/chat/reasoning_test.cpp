// Thinking apart from the answer (chat/reasoning.h), on outputs written the
// way DeepSeek-R1 (opened by its template) and Qwen3 (opened by the model)
// write them, whole and in every split into pieces.
#include <gtest/gtest.h>

#include "chat/reasoning.h"

namespace kvlm {
namespace {

ReasoningPiece split(const std::vector<std::string>& pieces, bool opened) {
  ReasoningSplitter s(ReasoningMarkers{}, opened);
  ReasoningPiece out;
  for (const std::string& p : pieces) {
    ReasoningPiece got = s.push(p);
    out.reasoning += got.reasoning;
    out.content += got.content;
  }
  ReasoningPiece rest = s.finish();
  out.reasoning += rest.reasoning;
  out.content += rest.content;
  return out;
}

// The output whole, and cut into pieces at every byte pair: the same split.
void expect_split(const std::string& output, bool opened, const std::string& reasoning, const std::string& content) {
  SCOPED_TRACE(output);
  ReasoningPiece whole = split({output}, opened);
  EXPECT_EQ(whole.reasoning, reasoning);
  EXPECT_EQ(whole.content, content);
  for (size_t i = 0; i <= output.size(); ++i) {
    for (size_t j = i; j <= output.size(); j += 3) {
      ReasoningPiece cut = split({output.substr(0, i), output.substr(i, j - i), output.substr(j)}, opened);
      EXPECT_EQ(cut.reasoning, reasoning) << i << " " << j;
      EXPECT_EQ(cut.content, content) << i << " " << j;
    }
  }
}

TEST(ReasoningSplitter, OpenedByThePrompt) {
  // DeepSeek-R1: the prompt ends with "<think>\n"; the model closes it.
  expect_split("Okay, the user asks.\nLet me think.\n</think>\n\nParis.", true, "Okay, the user asks.\nLet me think.", "Paris.");
  expect_split("</think>\n\nOnly an answer.", true, "", "Only an answer.");
  // Cut while thinking: all of it is thinking, but for a close marker begun
  // at the very end (markup being written).
  expect_split("Still thinking </thi", true, "Still thinking", "");
  expect_split("Still thinking </thinking", true, "Still thinking </thinking", "");
  // A marker inside the answer is the answer's.
  expect_split("a</think>b</think>c", true, "a", "b</think>c");
}

TEST(ReasoningSplitter, OpenedByTheModel) {
  // Qwen3: the model writes <think> itself, or answers at once.
  expect_split("<think>\nHmm.\n</think>\n\n{\"a\": 1}", false, "Hmm.", "{\"a\": 1}");
  expect_split("\n<think>\n\n</think>\n\nHi", false, "", "Hi");
  expect_split("Hello <think> there", false, "", "Hello <think> there");
  expect_split("  <thin", false, "", "  <thin");  // ended before the marker was known
  expect_split("  Hi", false, "", "  Hi");
}

TEST(ReasoningSplitter, MarkersAndPrompts) {
  EXPECT_TRUE(detect_reasoning_markers("{{'<｜Assistant｜><think>\\n'}}").has_value());
  EXPECT_FALSE(detect_reasoning_markers("{{ '<|im_start|>assistant\\n' }}").has_value());
  const ReasoningMarkers m;
  EXPECT_TRUE(prompt_opens_reasoning("<｜Assistant｜><think>\n", m));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n", m));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n", m));
}

}  // namespace
}  // namespace kvlm
