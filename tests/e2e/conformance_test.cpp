// Conformance: the unmodified official openai npm client and LangChain JS
// (tests/npm/conformance.mjs, run once) against one `kvlm serve` of a
// random-weight model (synth-tiny) with Qwen2.5's chat template, an API key,
// two model names and a CORS origin. Each test checks one area of what the
// clients got. Nothing here depends on what the random weights write: the
// checks compare answers of the same model, or read what a grammar forces.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::conformance_test {

using Json = nlohmann::json;

class Conformance : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = std::make_unique<test::ServerProcess>(std::vector<std::string>{
        "-m", test::shared_path("models/synth-tiny-Q8_0.gguf"), "--chat-template-file",
        test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"), "-t", "1",
        // The tools' system prompt of Qwen's template outgrows the file's 512.
        "--max-model-len", "2048", "--api-key", "sk-conformance", "--served-model-name", "kvlm-tiny",
        "--served-model-name", "gpt-4o-mini", "--cors-origin", "http://app.example"});
    const std::string script = std::string(KVLM_SOURCE_DIR) + "/tests/npm/conformance.mjs";
    if (!test::have_program("node")) {
      error_ = "node is required (scripts/setup.sh installs it)";
    } else if (!std::filesystem::exists(std::string(KVLM_SOURCE_DIR) + "/tests/npm/node_modules/@langchain/openai")) {
      error_ = "tests/npm/node_modules/@langchain/openai is missing: run scripts/setup.sh (npm ci --prefix tests/npm)";
    } else {
      const test::CommandResult r = test::run_program({"node", script, server_->url(), "sk-conformance"});
      if (r.exit_code != 0) {
        error_ = r.err + server_->err_so_far();
      } else {
        out_ = Json::parse(r.out);
      }
    }
  }
  static void TearDownTestSuite() { server_.reset(); }
  void SetUp() override { ASSERT_TRUE(error_.empty()) << error_; }
  // One case's output; the error a client threw shows in the failure.
  static const Json& at(const char* name) { return out_[name]; }
  // A case that must have thrown: its class, status, code and param.
  static void expect_thrown(const char* name, const char* cls, int status, const Json& code, const Json& param) {
    SCOPED_TRACE(name);
    const Json& e = at(name);
    EXPECT_EQ(e.value("thrown", ""), cls) << e;
    EXPECT_EQ(e["status"], status) << e;
    EXPECT_EQ(e["code"], code) << e;
    EXPECT_EQ(e["param"], param) << e;
  }
  static std::unique_ptr<test::ServerProcess> server_;
  static Json out_;
  static std::string error_;
};
std::unique_ptr<test::ServerProcess> Conformance::server_;
Json Conformance::out_;
std::string Conformance::error_;

size_t num_code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// The zod schema both clients were given: {name (<= 8 characters), age
// (integer 0..120), pet (cat or dog)}, nothing else.
void expect_person(const Json& p) {
  ASSERT_TRUE(p.is_object()) << p;
  EXPECT_EQ(p.size(), 3u) << p;
  ASSERT_TRUE(p["name"].is_string()) << p;
  EXPECT_LE(num_code_points(p["name"]), 8u) << p;
  ASSERT_TRUE(p["age"].is_number_integer()) << p;
  EXPECT_GE(p["age"].get<int>(), 0);
  EXPECT_LE(p["age"].get<int>(), 120);
  EXPECT_TRUE(p["pet"] == "cat" || p["pet"] == "dog") << p;
}

// Whether `args` is {key: v} with v one of `values`.
bool one_arg_of(const Json& args, const std::string& key, std::initializer_list<const char*> values) {
  if (!args.is_object() || args.size() != 1 || !args.contains(key)) return false;
  for (const char* v : values)
    if (args[key] == v) return true;
  return false;
}

// One forced call: `name` (empty: either tool) with an argument its enum allows.
void expect_call(const Json& facts, const std::string& name, const std::string& finish = "tool_calls") {
  EXPECT_EQ(facts["finish_reason"], finish) << facts;
  EXPECT_TRUE(facts["content"].is_null()) << facts;
  ASSERT_EQ(facts["tool_calls"].size(), 1u) << facts;
  const Json& c = facts["tool_calls"][0];
  EXPECT_EQ(c["type"], "function");
  EXPECT_EQ(c["id"].get<std::string>().rfind("call_", 0), 0u) << c;
  if (!name.empty()) { EXPECT_EQ(c["name"], name) << c; }
  const Json args = Json::parse(c["arguments"].get<std::string>());
  if (c["name"] == "get_weather") {
    EXPECT_TRUE(one_arg_of(args, "city", {"Paris", "Lima"})) << args;
  } else {
    EXPECT_TRUE(one_arg_of(args, "zone", {"UTC", "CET"})) << args;
  }
}

TEST_F(Conformance, ModelNamesAliasesAndUnknownModels) {
  EXPECT_EQ(at("models")["ids"], Json::array({"kvlm-tiny", "gpt-4o-mini"}));
  EXPECT_EQ(at("models")["retrieved"], "gpt-4o-mini");
  expect_thrown("model_retrieve_unknown", "NotFoundError", 404, "model_not_found", "model");
  expect_thrown("chat_unknown_model", "NotFoundError", 404, "model_not_found", "model");
  EXPECT_EQ(at("chat_without_model"), "kvlm-tiny");
  EXPECT_EQ(at("chat_alias"), "gpt-4o-mini");
}

TEST_F(Conformance, ChatAndStreamingWithUsage) {
  const Json& chat = at("chat");
  EXPECT_EQ(chat["role"], "assistant") << chat;
  EXPECT_EQ(chat["object"], "chat.completion");
  // Greedy: the stream says what the whole answer said, and counts it alike.
  const Json& stream = at("chat_stream");
  EXPECT_EQ(stream["content"], chat["content"]) << stream;
  EXPECT_EQ(stream["finish_reason"], chat["finish_reason"]);
  EXPECT_EQ(stream["usage"]["completion_tokens"], chat["usage"]["completion_tokens"]);
  EXPECT_EQ(stream["usage"]["prompt_tokens"], chat["usage"]["prompt_tokens"]);
  EXPECT_GT(stream["chunks"].get<int>(), 1);
  const Json& lc = at("lc_stream");
  EXPECT_EQ(lc["content"], at("lc_invoke")["content"]) << lc;
  EXPECT_EQ(lc["usage"]["output_tokens"], at("lc_invoke")["usage"]["output_tokens"]) << lc;
  EXPECT_TRUE(at("lc_invoke")["content"].is_string());
}

TEST_F(Conformance, ChoicesAndLogprobs) {
  EXPECT_EQ(at("chat_n")["indices"], Json::array({0, 1, 2}));
  ASSERT_EQ(at("chat_n")["contents"].size(), 3u);
  for (const char* name : {"chat_logprobs", "lc_logprobs"}) {
    SCOPED_TRACE(name);
    const Json& lp = at(name);
    EXPECT_GT(lp["num_tokens"].get<int>(), 0) << lp;
    for (const Json& n : lp["num_top"]) EXPECT_EQ(n, 2);
  }
  EXPECT_LE(at("chat_logprobs")["num_tokens"], at("chat_logprobs")["completion_tokens"]);
  const Json& c = at("completion_logprobs");
  EXPECT_GT(c["num_tokens"].get<int>(), 0) << c;
  for (const Json& n : c["num_top"]) EXPECT_TRUE(n == 2 || n == 3) << c;  // the two likeliest and the chosen one
}

TEST_F(Conformance, MessageRolesAndEmptyAssistantTurns) {
  expect_thrown("unknown_role", "BadRequestError", 400, "invalid_value", "messages[0].role");
  EXPECT_TRUE(at("null_assistant_and_developer").is_string()) << at("null_assistant_and_developer");
}

TEST_F(Conformance, AListOfPromptsAnswersAsEachPromptAlone) {
  const Json& singles = at("completion_singles");
  ASSERT_EQ(singles.size(), 2u) << singles;
  const Json& list = at("completion_list");
  ASSERT_EQ(list["choices"].size(), 4u) << list;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(list["choices"][i]["index"], i);
    // OpenAI's order: prompt 0's n choices, then prompt 1's (greedy: alike).
    EXPECT_EQ(list["choices"][i]["text"], singles[i / 2]["text"]) << i;
    EXPECT_EQ(at("completion_list_stream")["texts"][std::to_string(i)], singles[i / 2]["text"]) << i;
  }
  for (const char* name : {"completion_list", "completion_list_stream"}) {
    const Json& usage = at(name)["usage"];
    EXPECT_EQ(usage["prompt_tokens"], singles[0]["usage"]["prompt_tokens"].get<int>() +
                                          singles[1]["usage"]["prompt_tokens"].get<int>()) << name;
    EXPECT_EQ(usage["completion_tokens"], 2 * (singles[0]["usage"]["completion_tokens"].get<int>() +
                                               singles[1]["usage"]["completion_tokens"].get<int>())) << name;
  }
  const Json& ids = at("completion_token_lists");
  ASSERT_EQ(ids.size(), 2u) << ids;
  EXPECT_EQ(ids[1]["index"], 1);
  // LangChain's completion class sends its prompts as one list.
  EXPECT_EQ(at("lc_completions"), Json::array({Json::array({singles[0]["text"]}), Json::array({singles[1]["text"]})}));
}

TEST_F(Conformance, ScoringReturnsThePromptWithItsLogprobs) {
  const Json& s = at("score");
  const Json& lps = s["token_logprobs"];
  ASSERT_EQ(lps.size(), 6u) << s;
  EXPECT_TRUE(lps[0].is_null());
  // The last token's score is the logprob the model gave it while generating.
  EXPECT_NEAR(lps[5].get<double>(), s["generated_logprob"].get<double>(), 1e-4) << s;
  EXPECT_EQ(s["usage"]["completion_tokens"], 0);
  EXPECT_EQ(s["usage"]["prompt_tokens"], 6);
  EXPECT_EQ(s["finish_reason"], "length");
  const Json& t = at("score_text");
  EXPECT_EQ(t["text"], t["prompt"]);
  ASSERT_EQ(t["tokens"].size(), t["usage"]["prompt_tokens"].get<size_t>()) << t;
  EXPECT_TRUE(t["top_logprobs"][0].is_null());
  const Json& offsets = t["text_offset"];
  for (size_t i = 1; i < offsets.size(); ++i) EXPECT_LE(offsets[i - 1], offsets[i]) << t;
  // Each offset is where the token's text starts: the last is " was".
  EXPECT_EQ(t["prompt"].get<std::string>().substr(offsets.back().get<size_t>()), t["tokens"].back().get<std::string>()) << t;
}

TEST_F(Conformance, ToolCallsAutoRequiredNamedAndStreamed) {
  for (const char* name : {"tools_auto", "tools_auto_stream"}) {
    SCOPED_TRACE(name);
    expect_call(at(name), "get_weather");
    EXPECT_EQ(at(name)["tool_calls"][0]["arguments"], R"({"city":"Paris"})");
  }
  for (const char* name : {"tools_required", "tools_required_stream"}) {
    SCOPED_TRACE(name);
    expect_call(at(name), "");
  }
  for (const char* name : {"tools_named", "tools_named_stream"}) {
    SCOPED_TRACE(name);
    expect_call(at(name), "get_time");
  }
  EXPECT_EQ(at("tools_required")["tool_calls"][0]["arguments"], at("tools_required_stream")["tool_calls"][0]["arguments"]);
  // The call's result goes back; the model answers in words.
  EXPECT_TRUE(at("tools_round_trip")["content"].is_string()) << at("tools_round_trip");
  EXPECT_TRUE(at("tools_round_trip")["tool_calls"].empty());
  // LangChain binds a tool and gets its call.
  const Json& lc = at("lc_tools");
  ASSERT_EQ(lc["tool_calls"].size(), 1u) << lc;
  EXPECT_EQ(lc["tool_calls"][0]["name"], "get_weather");
  EXPECT_TRUE(one_arg_of(lc["tool_calls"][0]["args"], "city", {"Paris", "Lima"})) << lc;
}

TEST_F(Conformance, ToolSchemasWithoutParametersOrWithKeywordsTheGrammarCannotEnforce) {
  ASSERT_EQ(at("tools_no_parameters")["tool_calls"].size(), 1u) << at("tools_no_parameters");
  EXPECT_EQ(at("tools_no_parameters")["tool_calls"][0]["arguments"], "{}");
  EXPECT_TRUE(at("tools_loose_auto")["finish_reason"].is_string()) << at("tools_loose_auto");
  const Json& loose = at("tools_loose_required");
  ASSERT_EQ(loose["tool_calls"].size(), 1u) << loose;
  const Json args = Json::parse(loose["tool_calls"][0]["arguments"].get<std::string>());
  ASSERT_TRUE(args["days"].is_array()) << args;
  EXPECT_LE(args["days"].size(), 2u);
  for (const Json& d : args["days"]) EXPECT_TRUE(d.is_number_integer() && d >= 0 && d <= 9) << args;
  expect_thrown("tools_strict_refused", "BadRequestError", 400, nullptr, "tools[0].function.parameters");
  EXPECT_NE(at("tools_strict_refused")["message"].get<std::string>().find("patternProperties"), std::string::npos);
}

TEST_F(Conformance, ACallCutByMaxTokensIsACallWithItsArgumentsSoFar) {
  int num_named = 0;
  for (const Json& cut : at("tools_cut")) {
    SCOPED_TRACE(cut["max_tokens"].dump());
    for (const char* how : {"whole", "streamed"}) {
      const Json& f = cut[how];
      if (f["finish_reason"] == "tool_calls") continue;  // it ended before max_tokens
      EXPECT_EQ(f["finish_reason"], "length") << f;
      EXPECT_TRUE(f["content"].is_null()) << f;  // never the call's markup
      if (f["tool_calls"].empty()) continue;     // cut before its name
      ASSERT_EQ(f["tool_calls"].size(), 1u) << f;
      EXPECT_EQ(f["tool_calls"][0]["name"], "get_weather");
      const std::string args = f["tool_calls"][0]["arguments"];
      EXPECT_TRUE(std::string(R"({"city":"Paris"})").rfind(args, 0) == 0 ||
                  std::string(R"({"city":"Lima"})").rfind(args, 0) == 0) << args;
      num_named += 1;
    }
    EXPECT_EQ(cut["whole"]["tool_calls"].size(), cut["streamed"]["tool_calls"].size());
    if (!cut["whole"]["tool_calls"].empty() && !cut["streamed"]["tool_calls"].empty()) {
      EXPECT_EQ(cut["whole"]["tool_calls"][0]["arguments"], cut["streamed"]["tool_calls"][0]["arguments"]);
    }
  }
  EXPECT_GT(num_named, 0) << at("tools_cut");
}

TEST_F(Conformance, LegacyFunctionsAnswerWithFunctionCall) {
  const Json& f = at("functions");
  EXPECT_EQ(f["finish_reason"], "function_call") << f;
  EXPECT_TRUE(f["tool_calls"].empty());
  ASSERT_TRUE(f["function_call"].is_object()) << f;
  EXPECT_EQ(f["function_call"]["name"], "get_weather");
  const Json args = Json::parse(f["function_call"]["arguments"].get<std::string>());
  EXPECT_TRUE(one_arg_of(args, "city", {"Paris", "Lima"})) << args;
  const Json& s = at("functions_stream");
  EXPECT_EQ(s["name"], "get_weather");
  EXPECT_EQ(s["arguments"], f["function_call"]["arguments"]);
  EXPECT_EQ(s["finish_reason"], "function_call");
  EXPECT_TRUE(at("functions_history")["finish_reason"].is_string()) << at("functions_history");
}

TEST_F(Conformance, StructuredOutputsParseAndWithStructuredOutput) {
  const Json& p = at("parse_zod");
  EXPECT_EQ(p["finish_reason"], "stop") << p;
  expect_person(p["parsed"]);
  EXPECT_EQ(p["parsed"], Json::parse(p["content"].get<std::string>()));
  const Json& t = at("parse_zod_tool");
  EXPECT_EQ(t["name"], "record") << t;
  EXPECT_EQ(t["finish_reason"], "tool_calls");
  expect_person(t["parsed_arguments"]);
  for (const char* name : {"lc_structured_jsonSchema", "lc_structured_functionCalling"}) {
    SCOPED_TRACE(name);
    expect_person(at(name));
  }
}

TEST_F(Conformance, ErrorsRaiseTheClientsErrorClasses) {
  expect_thrown("error_key", "AuthenticationError", 401, "invalid_api_key", nullptr);
  expect_thrown("lc_error", "AuthenticationError", 401, "invalid_api_key", nullptr);
  expect_thrown("error_value", "BadRequestError", 400, "invalid_value", "temperature");
  expect_thrown("error_type", "BadRequestError", 400, "invalid_type", "n");
  expect_thrown("error_context", "BadRequestError", 400, "context_length_exceeded", "prompt");
  expect_thrown("error_max_tokens", "BadRequestError", 400, "context_length_exceeded", "max_tokens");
  expect_thrown("error_unsupported", "BadRequestError", 400, "unsupported_parameter", "suffix");
  expect_thrown("error_route", "NotFoundError", 404, nullptr, nullptr);
}

TEST_F(Conformance, CorsForTheAllowedOriginOnly) {
  const Json& pre = at("cors_preflight");
  EXPECT_EQ(pre["status"], 204) << pre;
  EXPECT_EQ(pre["allow_origin"], "http://app.example");
  const std::string headers = pre["allow_headers"];
  for (const char* h : {"Authorization", "Content-Type", "x-stainless-os"}) EXPECT_NE(headers.find(h), std::string::npos) << h;
  EXPECT_NE(pre["allow_methods"].get<std::string>().find("POST"), std::string::npos);
  EXPECT_EQ(at("cors_stream")["status"], 200);
  EXPECT_EQ(at("cors_stream")["allow_origin"], "http://app.example");
  EXPECT_EQ(at("cors_stream")["content_type"], "text/event-stream");
  EXPECT_EQ(at("cors_error")["status"], 401);
  EXPECT_EQ(at("cors_error")["allow_origin"], "http://app.example");
  EXPECT_TRUE(at("cors_other_origin")["allow_origin"].is_null()) << at("cors_other_origin");
}

}  // namespace kvlm::conformance_test
