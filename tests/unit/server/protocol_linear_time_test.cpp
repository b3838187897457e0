// Per-request lists and maps are read in linear time. Each test parses a
// list long enough that the quadratic code it replaced would take minutes,
// while the linear code takes a fraction of a second: no timing is
// asserted here; ctest runs this suite as one test, ProtocolLinearTime.All,
// under a TIMEOUT (tests/CMakeLists.txt) that a quadratic regression
// overruns. Measured before the fixes (2-core VM, through kvlm serve):
// logit_bias of 100,000 ids 15.2 s and 200,000 37.7 s; chat_template_kwargs
// of 80,000 keys 9.3 s. Run alone (without ctest) a regression is only slow.
#include <gtest/gtest.h>

#include <string>

#include <fmt/format.h>

#include "server/routes_tools.h"
#include "wire/anthropic/messages.h"
#include "wire/openai/json_text.h"
#include "wire/openai/protocol.h"

namespace kvlm::openai {
namespace {

constexpr int kNumEntries = 400000;  // 16x the work of 100,000 if quadratic: minutes, not seconds

// {"<prefix>0": <value>, "<prefix>1": ..., ...} with `n` members, as JSON text.
std::string wide_object(const std::string& prefix, int n, const std::string& value) {
  std::string s = "{";
  for (int i = 0; i < n; ++i) s += fmt::format("{}\"{}{}\":{}", i ? "," : "", prefix, i, value);
  return s + "}";
}

// 287 s with nlohmann's own parser (json_text.cpp), 0.3 s now.
TEST(ProtocolLinearTime, LogitBiasOfManyIds) {
  const Json body = parse_json(R"({"prompt":"x","logit_bias":)" + wide_object("", kNumEntries, "-1.5") + "}");
  auto v = parse_completion_request(body);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(v)) << std::get<RequestError>(v).message;
  const auto& bias = std::get<CompletionRequest>(v).options.sampling.logit_bias;
  ASSERT_EQ(bias.size(), static_cast<size_t>(kNumEntries));
  EXPECT_EQ(bias.back().first, kNumEntries - 1) << "in the body's order";
  EXPECT_EQ(bias.back().second, -1.5f);
}

// 205 s when the kwargs were added to the template's variables one by one.
TEST(ProtocolLinearTime, ChatTemplateKwargsOfManyKeys) {
  const Json body = parse_json(R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":)" +
                               wide_object("k", kNumEntries, "true") + "}");
  auto v = parse_chat_prompt(body);
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(v)) << std::get<RequestError>(v).message;
  const Json& extra = std::get<ChatRequest>(v).template_extra;
  EXPECT_EQ(extra.size(), static_cast<size_t>(kNumEntries));
}

// A model may write a call with many arguments; Anthropic's answer holds
// them as the tool_use block's input object (212 s with nlohmann's parser).
TEST(ProtocolLinearTime, AnthropicToolUseInputOfManyArguments) {
  ChoiceAnswer a;
  a.calls.push_back({"call_1", "f", wide_object("a", kNumEntries, "1")});
  const Json message = anthropic::MessageWriter("msg_1", "m").whole(a, {}, {});
  EXPECT_EQ(message["content"][0]["input"].size(), static_cast<size_t>(kNumEntries));
}

// The pythonic format's keyword arguments: each property was looked up in
// the required list, here 500,000 names that are not properties (a lenient
// schema may list them) before the 40,000 that are: 2 * 10^10 comparisons
// (74 s for 20,000 after 1,000,000). The required ones were also chained
// two nesting levels each, which overflowed the compiler's stack at 40,000.
TEST(ProtocolLinearTime, PythonicArgumentsOfManyRequiredProperties) {
  constexpr int kNumProperties = 40000, kNumOthers = 500000;
  std::string required = "[";
  for (int i = 0; i < kNumOthers; ++i) required += fmt::format("\"r{}\",", i);
  for (int i = 0; i < kNumProperties; ++i) required += fmt::format("{}\"p{}\"", i ? "," : "", i);
  const std::string schema = R"({"type":"object","properties":)" +
                             wide_object("p", kNumProperties, R"({"const":1})") + R"(,"required":)" +
                             required + "]}";
  const Json body = parse_json(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"required",)"
                               R"("tools":[{"type":"function","function":{"name":"f","parameters":)" + schema + "}}]}");
  auto v = parse_chat_prompt(body);
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(v)) << std::get<RequestError>(v).message;
  EXPECT_NE(tool_call_constraint(ToolCallFormat::kPythonic, std::get<ChatRequest>(v)), nullptr);
}

}  // namespace
}  // namespace kvlm::openai
