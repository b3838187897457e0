// Thinking sections (GenerateRequest::thinking): the grammar waits for the
// close marker, a budget forces the close, a forced open starts the
// section, and a resumed request replays forced markers as the run wrote
// them. The answers are checked by their shape (the markers and the
// grammar), never by what the model happens to think.
#include <gtest/gtest.h>

#include "constrain/constraint.h"
#include "engine/engine.h"
#include "engine/thinking_tracker.h"
#include "model/model.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::thinking_test {

TEST(ThinkingTracker, FindsTheCloseMarkerAcrossTokensAndCountsTheThinking) {
  ThinkingTracker t("</think>", true, -1);
  EXPECT_EQ(t.push("Let me "), "");
  EXPECT_EQ(t.push("see.</th"), "");
  EXPECT_EQ(t.push("ink>\n{"), "\n{");
  EXPECT_FALSE(t.thinking());
  EXPECT_EQ(t.num_tokens(), 3);
  EXPECT_EQ(t.push("\"a\""), "\"a\"");
  ThinkingTracker budget("</think>", true, 2);
  budget.push("a");
  EXPECT_FALSE(budget.budget_spent());
  budget.push("b");
  EXPECT_TRUE(budget.budget_spent());
  EXPECT_FALSE(ThinkingTracker("</think>", false, 0).budget_spent());  // not thinking: nothing to close
}

std::unique_ptr<Engine> make_engine() {
  auto model = Model::load(test::shared_path("models/stories260K.gguf"));
  auto tok = Tokenizer::from_metadata(model->gguf().metadata());
  return std::make_unique<Engine>(std::move(model), std::move(tok), EngineConfig{});
}

GenerateRequest thinking_request(const Engine& engine, int32_t budget) {
  const Tokenizer& tok = engine.tokenizer();
  GenerateRequest g;
  g.prompt_tokens = tok.encode("Once upon a time, there was a little", true, false);
  g.max_tokens = 40;
  g.sampling.temperature = 0.8f;
  g.sampling.seed = 5;
  g.thinking = GenerateRequest::Thinking{.close = "</think>", .opened = true, .open_tokens = {},
                                         .close_tokens = tok.encode("\n</think>\n\n", false, true), .budget = budget};
  return g;
}

struct Output {
  std::vector<int32_t> tokens;
  std::string text;
  std::optional<FinishReason> reason;
};

Output drain(RequestStream& s) {
  Output out;
  while (auto ev = s.next()) {
    if (ev->error) ADD_FAILURE() << ev->error->what();
    if (ev->replayed) continue;
    out.tokens.insert(out.tokens.end(), ev->tokens.begin(), ev->tokens.end());
    out.text += ev->text;
    if (ev->finished) out.reason = ev->finish_reason;
  }
  return out;
}

TEST(EngineThinking, ABudgetForcesTheCloseAndTheGrammarHoldsAfterIt) {
  auto engine = make_engine();
  GenerateRequest g = thinking_request(*engine, 6);
  g.constraint = constrain::choice_program({"yes", "no"});
  const Output out = drain(*engine->submit(g));
  const size_t close = out.text.find("</think>");
  ASSERT_NE(close, std::string::npos) << out.text;
  // Six thinking tokens, the forced marker, then exactly an answer of the grammar.
  const std::vector<int32_t> forced = g.thinking->close_tokens;
  ASSERT_GE(out.tokens.size(), 6 + forced.size());
  EXPECT_TRUE(std::equal(forced.begin(), forced.end(), out.tokens.begin() + 6));
  std::string answer = out.text.substr(close + 8);
  answer.erase(0, answer.find_first_not_of(" \n"));
  EXPECT_TRUE(answer == "yes" || answer == "no") << out.text;
  EXPECT_EQ(out.reason, FinishReason::kStop);
}

TEST(EngineThinking, WithoutAGrammarTheAnswerIsFreeAndMaxTokensCountsBoth) {
  auto engine = make_engine();
  GenerateRequest g = thinking_request(*engine, 3);
  g.ignore_eos = true;
  const Output out = drain(*engine->submit(g));
  EXPECT_EQ(out.tokens.size(), 40u);
  EXPECT_NE(out.text.find("</think>"), std::string::npos) << out.text;
  EXPECT_EQ(out.reason, FinishReason::kLength);
}

TEST(EngineThinking, AForcedOpenStartsTheSection) {
  auto engine = make_engine();
  GenerateRequest g = thinking_request(*engine, 2);
  g.thinking->opened = false;
  g.thinking->open_tokens = engine->tokenizer().encode("<think>\n", false, true);
  g.constraint = constrain::choice_program({"yes", "no"});
  const Output out = drain(*engine->submit(g));
  // (SentencePiece writes the space it prefixes the marker with.)
  EXPECT_EQ(out.text.find_first_not_of(' '), out.text.find("<think>")) << out.text;
  EXPECT_NE(out.text.find("</think>"), std::string::npos) << out.text;
}

TEST(EngineThinking, AResumedRequestReplaysTheForcedMarkers) {
  auto engine = make_engine();
  GenerateRequest g = thinking_request(*engine, 4);
  g.constraint = constrain::choice_program({"yes", "no"});
  const Output full = drain(*engine->submit(g));
  ASSERT_GT(full.tokens.size(), 8u);
  for (int32_t k : {2, 5, 7, static_cast<int32_t>(full.tokens.size()) - 1}) {
    GenerateRequest r = g;
    r.prompt_tokens.insert(r.prompt_tokens.end(), full.tokens.begin(), full.tokens.begin() + k);
    r.num_replayed = k;
    r.max_tokens -= k;
    const Output rest = drain(*engine->submit(r));
    std::vector<int32_t> joined(full.tokens.begin(), full.tokens.begin() + k);
    joined.insert(joined.end(), rest.tokens.begin(), rest.tokens.end());
    EXPECT_EQ(joined, full.tokens) << "cut " << k;
  }
}

}  // namespace kvlm::thinking_test
