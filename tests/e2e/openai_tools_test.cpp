// Tool calling through the official openai npm client (tests/npm/
// openai_tools.mjs), once per tool-call format, each with a real template of
// that family over stories260K: tool_choice required and named force the call
// (its arguments constrained to the tool's schema, so greedy decoding makes a
// deterministic round trip out of a model that otherwise writes gibberish),
// the call goes back with a tool result, and the model answers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::openai_tools_test {

using Json = nlohmann::json;

struct Family {
  const char* name;      // the format's name
  const char* template_file;
};

// Its name in test listings (gtest would print the struct's bytes).
void PrintTo(const Family& f, std::ostream* os) { *os << f.name; }

class OpenAiTools : public ::testing::TestWithParam<Family> {};

// One forced call: its shape, and its arguments valid against its tool's
// schema (an enum). `tool` empty: either tool (tool_choice required).
void expect_call(const Json& call, const std::string& tool, bool mistral_ids) {
  EXPECT_EQ(call["finish_reason"], "tool_calls") << call;
  EXPECT_TRUE(call["content"].is_null()) << call;
  ASSERT_EQ(call["tool_calls"].size(), 1u) << call;
  const Json& c = call["tool_calls"][0];
  EXPECT_EQ(c["type"], "function");
  if (!tool.empty()) { EXPECT_EQ(c["name"], tool); }
  const bool weather = c["name"] == "get_weather";
  ASSERT_TRUE(weather || c["name"] == "get_time") << c;
  const std::string key = weather ? "city" : "zone";
  const std::vector<std::string> allowed = weather ? std::vector<std::string>{"Paris", "Lima"}
                                                   : std::vector<std::string>{"UTC", "CET"};
  const std::string id = c["id"];
  if (mistral_ids) {
    // Mistral's template refuses any other id in the next turn.
    EXPECT_EQ(id.size(), 9u) << id;
    for (char ch : id) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(ch))) << id;
  } else {
    EXPECT_EQ(id.rfind("call_", 0), 0u) << id;
  }
  const Json args = Json::parse(c["arguments"].get<std::string>());
  ASSERT_TRUE(args.is_object()) << args;
  EXPECT_EQ(args.size(), 1u) << args;
  ASSERT_TRUE(args.contains(key)) << args;
  EXPECT_NE(std::find(allowed.begin(), allowed.end(), args[key].get<std::string>()), allowed.end()) << args;
}

void expect_answer(const Json& answer) {
  // The final answer after the tool result: words (gibberish from this
  // model), no call, no error.
  EXPECT_TRUE(answer["content"].is_string()) << answer;
  EXPECT_TRUE(answer["tool_calls"].empty()) << answer;
  EXPECT_TRUE(answer["finish_reason"] == "length" || answer["finish_reason"] == "stop") << answer;
}

TEST_P(OpenAiTools, RoundTripStreamedAndNot) {
  const Family f = GetParam();
  const std::string script = std::string(KVLM_SOURCE_DIR) + "/tests/npm/openai_tools.mjs";
  ASSERT_TRUE(test::have_program("node")) << "node is required (scripts/setup.sh installs it)";
  ASSERT_TRUE(std::filesystem::exists(std::string(KVLM_SOURCE_DIR) + "/tests/npm/node_modules/openai"))
      << "tests/npm/node_modules/openai is missing: run scripts/setup.sh (npm ci --prefix tests/npm)";
  test::ServerProcess server({"-m", test::shared_path("models/stories260K.gguf"), "--chat-template-file",
                              test::shared_path(std::string("templates/") + f.template_file), "-t", "1"});
  ASSERT_GT(server.port(), 0);
  const test::CommandResult r = test::run_program({"node", script, server.url()});
  ASSERT_EQ(r.exit_code, 0) << r.err << server.err_so_far();
  const Json j = Json::parse(r.out);
  const bool mistral = std::string(f.name) == "mistral";
  for (const char* run : {"required", "required_stream"}) {
    SCOPED_TRACE(run);
    expect_call(j[run]["call"], "", mistral);
    expect_answer(j[run]["answer"]);
  }
  for (const char* run : {"named", "named_stream"}) {
    SCOPED_TRACE(run);
    expect_call(j[run]["call"], "get_time", mistral);
    expect_answer(j[run]["answer"]);
  }
  // Greedy: streaming and not make the same call and the same answer (but
  // Mistral's template and the generic tool results write the call ids,
  // which are random, into the next prompt).
  EXPECT_EQ(j["required"]["call"]["tool_calls"][0]["arguments"], j["required_stream"]["call"]["tool_calls"][0]["arguments"]);
  if (!mistral && std::string(f.name) != "generic") {
    EXPECT_EQ(j["required"]["answer"]["content"], j["required_stream"]["answer"]["content"]);
    EXPECT_EQ(j["named"]["answer"]["content"], j["named_stream"]["answer"]["content"]);
  }
  // tool_choice none: nothing is parsed.
  EXPECT_TRUE(j["none"]["tool_calls"].empty()) << j["none"];
  EXPECT_NE(j["none"]["finish_reason"], "tool_calls");
  // The KV pool is whole again.
  EXPECT_EQ(test::server_metric(server, "kvlm_kv_blocks_used"), 0);
}

INSTANTIATE_TEST_SUITE_P(Formats, OpenAiTools,
                         ::testing::Values(Family{"hermes", "Qwen-Qwen2.5-7B-Instruct.jinja"},
                                           Family{"llama3", "meta-llama-Llama-3.1-8B-Instruct.jinja"},
                                           Family{"mistral", "mistralai-Mistral-Nemo-Instruct-2407.jinja"},
                                           Family{"deepseek", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"},
                                           Family{"generic", "google-gemma-2-2b-it.jinja"}),
                         [](const ::testing::TestParamInfo<Family>& info) { return std::string(info.param.name); });

}  // namespace kvlm::openai_tools_test
