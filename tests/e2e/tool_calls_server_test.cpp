// Tool calling over raw HTTP (curl), the cases the openai client round trip
// (openai_tools_test.cpp) does not cover: a call cut off by max_tokens is a
// call with its arguments so far, a named tool_choice is one call, a reply
// cut inside its calls keeps the whole ones, streamed arguments come in
// pieces, Llama 3.2's pythonic calls, unforced gibberish is plain content
// (never a 500), strict and non-strict schemas, n = 2 forced calls streamed
// with their choice index, a schema the grammar compiler refuses is a 400,
// and the tools reach the template.
#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::tool_calls_server_test {

using Json = nlohmann::json;

std::pair<int, std::string> post(const std::string& url, const Json& body) {
  const test::CommandResult r = test::run_program({"curl", "-sS", "-N", "-w", "\n%{http_code}", "-H",
                                                   "Content-Type: application/json", "--data-binary", body.dump(), url});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const size_t nl = r.out.rfind('\n');
  return {std::stoi(r.out.substr(nl + 1)), r.out.substr(0, nl)};
}

const Json kTools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Lima"]}},
                   "required": ["city"], "additionalProperties": false}}}])");

class ToolCallsServer : public test::ServerSuite<ToolCallsServer> {
 public:
  static std::vector<std::string> server_args() {
    return {"-m", test::shared_path("models/stories260K.gguf"), "--chat-template-file", test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"), "-t", "1"};
  }
  static std::string url() { return server_->url() + "/v1/chat/completions"; }
  static Json request(Json extra) {
    Json body = {{"messages", Json::array({Json{{"role", "user"}, {"content", "Weather in Paris?"}}})},
                 {"tools", kTools}, {"temperature", 0}};
    body.update(extra);
    return body;
  }
};

// The call of choice 0 of a chat response (or stream): its name and
// arguments, content, finish reason.
struct Answer {
  std::string name, arguments, reason;
  Json content;
  bool has_call = false;
};
Answer answer_of(const std::string& body, bool streamed) {
  Answer a;
  if (!streamed) {
    const Json c = Json::parse(body)["choices"][0];
    a.reason = c["finish_reason"];
    a.content = c["message"]["content"];
    if (c["message"].contains("tool_calls")) {
      EXPECT_EQ(c["message"]["tool_calls"].size(), 1u) << body;
      a.has_call = true;
      a.name = c["message"]["tool_calls"][0]["function"]["name"];
      a.arguments = c["message"]["tool_calls"][0]["function"]["arguments"];
    }
    return a;
  }
  std::string content;
  for (const std::string& d : test::sse_data(body)) {
    if (d == "[DONE]") continue;
    const Json c = Json::parse(d)["choices"][0];
    if (c["delta"].contains("content")) content += c["delta"]["content"].get<std::string>();
    if (c["delta"].contains("tool_calls")) {
      a.has_call = true;
      const Json& f = c["delta"]["tool_calls"][0]["function"];
      if (f.contains("name")) a.name += f["name"].get<std::string>();
      a.arguments += f["arguments"].get<std::string>();
    }
    if (!c["finish_reason"].is_null()) a.reason = c["finish_reason"];
  }
  a.content = content;
  return a;
}

TEST_F(ToolCallsServer, ACallCutByMaxTokensIsACallWithItsArgumentsSoFar) {
  // Forced calls cut at every length until the call ends by itself: each is
  // finish_reason "length" with no markup in content and, once its name is
  // written, the call with the arguments so far (a prefix of the next cut's).
  std::string previous;
  int num_named = 0;
  for (int max_tokens = 1; max_tokens < 200; ++max_tokens) {
    SCOPED_TRACE(max_tokens);
    auto [status, body] = post(url(), request({{"tool_choice", "required"}, {"parallel_tool_calls", false},
                                                {"max_tokens", max_tokens}}));
    ASSERT_EQ(status, 200) << body;
    const Answer a = answer_of(body, false);
    if (a.reason == "tool_calls") {
      ASSERT_TRUE(a.has_call) << body;
      EXPECT_EQ(a.arguments.rfind(previous, 0), 0u) << a.arguments << " after " << previous;
      break;
    }
    ASSERT_EQ(a.reason, "length") << body;
    EXPECT_TRUE(a.content.is_null() || a.content == "") << body;
    if (!a.has_call) continue;
    ++num_named;
    EXPECT_EQ(a.name, "get_weather") << body;
    // The grammar writes {"city":"Paris"} or Lima, compact: the cut is a prefix.
    const std::string args = a.arguments;
    EXPECT_TRUE(std::string(R"({"city":"Paris"})").rfind(args, 0) == 0 ||
                std::string(R"({"city":"Lima"})").rfind(args, 0) == 0) << args;
    EXPECT_EQ(args.rfind(previous, 0), 0u) << args << " after " << previous;
    previous = args;
    // Streamed, the same call in deltas (greedy: the same output).
    auto [s2, streamed] = post(url(), request({{"tool_choice", "required"}, {"parallel_tool_calls", false},
                                                {"max_tokens", max_tokens}, {"stream", true}}));
    ASSERT_EQ(s2, 200) << streamed;
    const Answer b = answer_of(streamed, true);
    EXPECT_EQ(b.reason, "length");
    EXPECT_EQ(b.name, a.name);
    EXPECT_EQ(b.arguments, a.arguments);
    EXPECT_EQ(b.content, "") << streamed;
  }
  EXPECT_GT(num_named, 0);
}

// Every call of choice 0 (tool_calls, or the stream's deltas joined by
// index): its name and arguments.
struct Calls {
  std::vector<std::string> names, arguments;
  std::string reason;
};
Calls calls_of(const std::string& body, bool streamed) {
  Calls out;
  if (!streamed) {
    const Json c = Json::parse(body)["choices"][0];
    out.reason = c["finish_reason"];
    for (const Json& tc : c["message"].value("tool_calls", Json::array())) {
      out.names.push_back(tc["function"]["name"]);
      out.arguments.push_back(tc["function"]["arguments"]);
    }
    return out;
  }
  for (const std::string& d : test::sse_data(body)) {
    if (d == "[DONE]") continue;
    const Json c = Json::parse(d)["choices"][0];
    if (!c["finish_reason"].is_null()) out.reason = c["finish_reason"];
    for (const Json& tc : c["delta"].value("tool_calls", Json::array())) {
      const size_t k = tc["index"];
      if (k >= out.names.size()) {
        out.names.resize(k + 1);
        out.arguments.resize(k + 1);
      }
      if (tc["function"].contains("name")) out.names[k] += tc["function"]["name"].get<std::string>();
      out.arguments[k] += tc["function"].value("arguments", "");
    }
  }
  return out;
}

TEST_F(ToolCallsServer, ANamedChoiceIsExactlyOneCallEvenWithParallelCallsLeftOn) {
  // parallel_tool_calls left at its default (true): a named function is one
  // call of it, as OpenAI answers, not calls until max_tokens. ignore_eos:
  // only the grammar can end the reply.
  const Json named = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  for (bool streamed : {false, true}) {
    SCOPED_TRACE(streamed);
    auto [status, body] = post(url(), request({{"tool_choice", named}, {"max_tokens", 300}, {"ignore_eos", true},
                                                {"stream", streamed}}));
    ASSERT_EQ(status, 200) << body;
    const Calls c = calls_of(body, streamed);
    EXPECT_EQ(c.reason, "tool_calls") << body;
    ASSERT_EQ(c.names, std::vector<std::string>{"get_weather"}) << body;
    const Json args = Json::parse(c.arguments[0]);
    EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Lima") << body;
  }
}

TEST_F(ToolCallsServer, ACutReplyKeepsItsCompleteCalls) {
  // required with parallel calls: the grammar asks for call after call
  // (ignore_eos), so max_tokens cuts the reply inside one; every call
  // before it is whole, streamed or not (greedy: the same calls).
  const Json body = request({{"tool_choice", "required"}, {"max_tokens", 150}, {"ignore_eos", true}});
  auto [status, whole_body] = post(url(), body);
  ASSERT_EQ(status, 200) << whole_body;
  Json streamed_request = body;
  streamed_request["stream"] = true;
  auto [status2, streamed_body] = post(url(), streamed_request);
  ASSERT_EQ(status2, 200) << streamed_body;
  const Calls whole = calls_of(whole_body, false), streamed = calls_of(streamed_body, true);
  EXPECT_EQ(whole.reason, "length") << whole_body;
  EXPECT_EQ(streamed.reason, "length") << streamed_body;
  ASSERT_GE(whole.names.size(), 2u) << whole_body;
  for (size_t k = 0; k + 1 < whole.names.size(); ++k) {
    SCOPED_TRACE(k);
    EXPECT_EQ(whole.names[k], "get_weather");
    const Json args = Json::parse(whole.arguments[k]);
    EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Lima") << whole_body;
  }
  EXPECT_EQ(streamed.names, whole.names);
  EXPECT_EQ(streamed.arguments, whole.arguments);
}

TEST_F(ToolCallsServer, StreamedArgumentsArriveInPiecesAsTheyAreWritten) {
  // A long argument (the grammar spells it out, a few bytes a token): its
  // arguments come in several deltas, not whole at the end, and add up to
  // the whole answer's.
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "take_note",
      "parameters": {"type": "object", "properties": {"text": {"type": "string",
        "enum": ["the quick brown fox jumps over the lazy dog and runs far away"]}},
                     "required": ["text"], "additionalProperties": false}}}])");
  const Json body = request({{"tools", tools}, {"tool_choice", "required"}, {"parallel_tool_calls", false}, {"max_tokens", 400}});
  auto [status, whole] = post(url(), body);
  ASSERT_EQ(status, 200) << whole;
  Json streamed_body = body;
  streamed_body["stream"] = true;
  auto [status2, streamed] = post(url(), streamed_body);
  ASSERT_EQ(status2, 200) << streamed;
  int num_pieces = 0;
  for (const std::string& d : test::sse_data(streamed)) {
    if (d == "[DONE]") continue;
    for (const Json& tc : Json::parse(d)["choices"][0]["delta"].value("tool_calls", Json::array()))
      if (tc["function"].value("arguments", "") != "") ++num_pieces;
  }
  // How many depends on how fast the stream is read (a slow reader gets
  // merged events); one would mean the call was held back whole.
  EXPECT_GT(num_pieces, 1) << streamed;
  const Calls a = calls_of(whole, false), b = calls_of(streamed, true);
  EXPECT_EQ(a.reason, "tool_calls") << whole;
  EXPECT_EQ(b.reason, "tool_calls") << streamed;
  ASSERT_EQ(a.arguments.size(), 1u) << whole;
  EXPECT_EQ(b.arguments, a.arguments);
  EXPECT_EQ(Json::parse(a.arguments[0])["text"], "the quick brown fox jumps over the lazy dog and runs far away");
}

// Llama 3.2's zero-shot tool prompt, cut to what matters: its model answers
// a call as a Python list, [get_weather(city="Paris")].
constexpr const char* kLlama32Style = R"({%- if tools %}<|start_header_id|>system<|end_header_id|>

Answer a call in the format [func_name1(params_name1=params_value1, params_name2=params_value2...)]
{{ tools | tojson }}<|eot_id|>{% endif %}{%- for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>

{{ m.content }}<|eot_id|>{% endfor %}{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>

{% endif %})";

TEST(ToolCallsPythonic, ANamedCallIsWrittenAsPythonAndAnsweredAsJson) {
  const std::string tmpl = test::write_temp_file("llama32_style.jinja", kLlama32Style);
  test::ServerProcess server({"-m", test::shared_path("models/stories260K.gguf"), "--chat-template-file", tmpl, "-t", "1"});
  ASSERT_GT(server.port(), 0);
  const Json named = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  const Json body = {{"messages", Json::array({Json{{"role", "user"}, {"content", "Weather in Paris?"}}})},
                     {"tools", kTools}, {"tool_choice", named}, {"temperature", 0}, {"max_tokens", 200}};
  for (bool streamed : {false, true}) {
    SCOPED_TRACE(streamed);
    Json b = body;
    b["stream"] = streamed;
    auto [status, text] = post(server.url() + "/v1/chat/completions", b);
    ASSERT_EQ(status, 200) << text;
    const Calls c = calls_of(text, streamed);
    EXPECT_EQ(c.reason, "tool_calls") << text;
    ASSERT_EQ(c.names, std::vector<std::string>{"get_weather"}) << text;
    const Json args = Json::parse(c.arguments[0]);
    EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Lima") << text;
  }
}

TEST_F(ToolCallsServer, UnforcedGibberishIsContent) {
  auto [status, body] = post(url(), request({{"max_tokens", 24}}));
  ASSERT_EQ(status, 200) << body;
  const Json choice = Json::parse(body)["choices"][0];
  EXPECT_FALSE(choice["message"].contains("tool_calls")) << body;
  EXPECT_EQ(choice["finish_reason"], "length");
}

TEST_F(ToolCallsServer, TwoChoicesStreamTheirCallsWithTheirIndex) {
  auto [status, body] = post(url(), request({{"tool_choice", "required"}, {"parallel_tool_calls", false},
                                              {"n", 2}, {"temperature", 1}, {"seed", 5}, {"max_tokens", 200},
                                              {"stream", true}}));
  ASSERT_EQ(status, 200) << body;
  std::map<int, std::string> names, args, reasons;
  for (const std::string& d : test::sse_data(body)) {
    if (d == "[DONE]") continue;
    const Json c = Json::parse(d)["choices"][0];
    const int index = c["index"];
    if (c["delta"].contains("tool_calls")) {
      const Json& tc = c["delta"]["tool_calls"][0];
      EXPECT_EQ(tc["index"], 0);
      if (tc.contains("id")) {
        EXPECT_EQ(tc["type"], "function");
        names[index] += tc["function"]["name"].get<std::string>();
      }
      args[index] += tc["function"]["arguments"].get<std::string>();
    }
    if (!c["finish_reason"].is_null()) reasons[index] = c["finish_reason"];
  }
  for (int i : {0, 1}) {
    SCOPED_TRACE(i);
    EXPECT_EQ(names[i], "get_weather");
    EXPECT_EQ(reasons[i], "tool_calls");
    const Json a = Json::parse(args[i]);
    EXPECT_TRUE(a["city"] == "Paris" || a["city"] == "Lima") << args[i];
  }
  EXPECT_EQ(test::server_metric(*server_, "kvlm_kv_blocks_used"), 0);
}

TEST_F(ToolCallsServer, AStrictSchemaTheGrammarCannotEnforceIsA400UnderEveryToolChoice) {
  Json tools = kTools;
  tools[0]["function"]["parameters"] = Json::parse(R"({"type": "object", "not": {"type": "string"}})");
  tools[0]["function"]["strict"] = true;
  for (const Json& choice : {Json("required"), Json("auto"), Json("none")}) {
    auto [status, body] = post(url(), request({{"tools", tools}, {"tool_choice", choice}, {"max_tokens", 2}}));
    EXPECT_EQ(status, 400) << body;
    const Json e = Json::parse(body)["error"];
    EXPECT_EQ(e["param"], "tools[0].function.parameters") << body;
    EXPECT_NE(e["message"].get<std::string>().find("unsupported keyword 'not'"), std::string::npos) << body;
  }
}

TEST_F(ToolCallsServer, ANonStrictSchemaKeepsWhatTheGrammarCannotEnforceUnenforced) {
  // uniqueItems, multipleOf, not, patternProperties: accepted, the rest of
  // the schema still constrains the forced call.
  Json tools = kTools;
  tools[0]["function"]["parameters"] = Json::parse(R"({"type": "object", "properties": {
      "city": {"type": "string", "enum": ["Paris", "Lima"], "not": {"const": "Rome"}},
      "days": {"type": "array", "items": {"type": "integer", "multipleOf": 2, "minimum": 0, "maximum": 9},
               "uniqueItems": true, "maxItems": 2}},
      "patternProperties": {"^x": {"type": "string"}}, "required": ["city", "days"], "additionalProperties": false})");
  for (const Json& choice : {Json("required"), Json("auto"), Json("none")}) {
    auto [status, body] = post(url(), request({{"tools", tools}, {"tool_choice", choice}, {"max_tokens", 400},
                                                {"parallel_tool_calls", false}}));
    ASSERT_EQ(status, 200) << body;
    if (choice != "required") continue;
    const Json m = Json::parse(body)["choices"][0]["message"];
    ASSERT_EQ(m["tool_calls"].size(), 1u) << body;
    const Json args = Json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>());
    EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Lima") << args;
    EXPECT_LE(args["days"].size(), 2u) << args;
  }
}

TEST_F(ToolCallsServer, AFunctionWithoutParametersTakesNone) {
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "ping"}}])");
  auto [status, body] = post(url(), request({{"tools", tools}, {"tool_choice", "required"}, {"max_tokens", 40},
                                              {"parallel_tool_calls", false}}));
  ASSERT_EQ(status, 200) << body;
  const Json m = Json::parse(body)["choices"][0]["message"];
  ASSERT_EQ(m["tool_calls"].size(), 1u) << body;
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "ping");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{}");
}

TEST_F(ToolCallsServer, ToolsReachTheTemplate) {
  // Qwen's template writes the tools into its system turn; none does too, as OpenAI.
  auto [s1, with] = post(url(), request({{"max_tokens", 1}, {"tool_choice", "none"}}));
  Json plain = request({{"max_tokens", 1}});
  plain.erase("tools");
  auto [s2, without] = post(url(), plain);
  ASSERT_EQ(s1, 200) << with;
  ASSERT_EQ(s2, 200) << without;
  EXPECT_GT(Json::parse(with)["usage"]["prompt_tokens"].get<int>(),
            Json::parse(without)["usage"]["prompt_tokens"].get<int>() + 100);
}

TEST_F(ToolCallsServer, ControlTokensAreWrittenWhenToolsMayBeCalled) {
  // Tool-call markers can be control tokens ([TOOL_CALLS], <|python_tag|>),
  // which plain chat writes as nothing. Forced here: stories260K's <unk> (id 0).
  Json bias = {{"logit_bias", {{"0", 100}}}, {"max_tokens", 2}};
  auto [s1, with] = post(url(), request(bias));
  Json plain = request(bias);
  plain.erase("tools");
  auto [s2, without] = post(url(), plain);
  ASSERT_EQ(s1, 200) << with;
  ASSERT_EQ(s2, 200) << without;
  EXPECT_EQ(Json::parse(with)["choices"][0]["message"]["content"], "<unk><unk>") << with;
  EXPECT_EQ(Json::parse(without)["choices"][0]["message"]["content"], "") << without;
}

}  // namespace kvlm::tool_calls_server_test
