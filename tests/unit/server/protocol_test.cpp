// OpenAI request parsing and validation, response shapes, and the engine's
// histograms as Prometheus text.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "server/metrics_text.h"
#include "wire/openai/protocol.h"

namespace kvlm::openai {
namespace {

template <typename T>
const RequestError* error_of(const std::variant<T, RequestError>& v) {
  return std::get_if<RequestError>(&v);
}

TEST(Protocol, CompletionDefaultsFollowOpenAi) {
  auto v = parse_completion_request(Json::parse(R"({"model":"m","prompt":"hi"})"));
  ASSERT_FALSE(error_of(v)) << error_of(v)->message;
  const auto& r = std::get<CompletionRequest>(v);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(std::get<std::string>(r.prompts[0]), "hi");
  EXPECT_EQ(r.options.max_tokens, 16);
  EXPECT_EQ(r.options.sampling.temperature, 1.f);
  EXPECT_EQ(r.options.sampling.top_p, 1.f);
  EXPECT_EQ(r.options.sampling.top_k, 0);
  EXPECT_EQ(r.options.sampling.min_p, 0.f);
  EXPECT_FALSE(r.options.stream);
}

TEST(Protocol, ChoicesAndBestOf) {
  auto v = parse_completion_request(Json::parse(R"({"prompt":"hi"})"));
  ASSERT_FALSE(error_of(v));
  EXPECT_EQ(std::get<CompletionRequest>(v).options.n, 1);
  EXPECT_EQ(std::get<CompletionRequest>(v).options.best_of, 1);
  v = parse_completion_request(Json::parse(R"({"prompt":"hi","n":3,"best_of":5})"));
  ASSERT_FALSE(error_of(v)) << error_of(v)->message;
  EXPECT_EQ(std::get<CompletionRequest>(v).options.n, 3);
  EXPECT_EQ(std::get<CompletionRequest>(v).options.best_of, 5);
  // best_of == n streams: nothing has to be picked.
  v = parse_completion_request(Json::parse(R"({"prompt":"hi","n":2,"best_of":2,"stream":true})"));
  ASSERT_FALSE(error_of(v)) << error_of(v)->message;
  auto c = parse_chat_request(Json::parse(R"({"messages":[{"role":"user","content":"x"}],"n":16})"));
  ASSERT_FALSE(error_of(c)) << error_of(c)->message;
  EXPECT_EQ(std::get<ChatRequest>(c).options.n, 16);
  EXPECT_EQ(std::get<ChatRequest>(c).options.best_of, 16);
}

TEST(Protocol, PromptShapes) {
  using Ids = std::vector<int32_t>;
  auto prompts = [](const char* body) { return std::get<CompletionRequest>(parse_completion_request(Json::parse(body))).prompts; };
  EXPECT_EQ(std::get<Ids>(prompts(R"({"prompt":[1,2,3]})").at(0)), (Ids{1, 2, 3}));
  EXPECT_EQ(std::get<Ids>(prompts(R"({"prompt":[[4,5]]})").at(0)), (Ids{4, 5}));
  // Lists of prompts, as OpenAI takes them: one choice each (times n).
  const auto many = prompts(R"({"prompt":["a","b"]})");
  ASSERT_EQ(many.size(), 2u);
  EXPECT_EQ(std::get<std::string>(many[1]), "b");
  const auto lists = prompts(R"({"prompt":[[1,2],[3]],"n":2})");
  ASSERT_EQ(lists.size(), 2u);
  EXPECT_EQ(std::get<Ids>(lists[1]), (Ids{3}));
  struct Case {
    const char* body;
    const char* param;
  };
  for (Case c : {Case{R"({"prompt":[1,-2]})", "prompt"}, Case{R"({"prompt":["a",""]})", "prompt[1]"},
                 Case{R"({"prompt":[[1],[]]})", "prompt[1]"}, Case{R"({"prompt":["a",[1],7]})", "prompt"},
                 Case{R"({"prompt":["a","b"],"return_token_ids":true})", nullptr},
                 Case{R"({"prompt":["a","b"],"stream":true,"resume_token_ids":[5]})", "prompt"},
                 Case{R"({"prompt":[]})", "prompt"}, Case{R"({"prompt":["a","b"],"best_of":16,"n":16,)"
                                                         R"("logprobs":0,"echo":false,"max_tokens":1,"seed":1,"temperature":0,"top_p":1,"stop":null,"user":"u"})",
                                                         nullptr}}) {
    auto v = parse_completion_request(Json::parse(c.body));
    if (!c.param) {
      EXPECT_FALSE(error_of(v)) << c.body;
      continue;
    }
    ASSERT_TRUE(error_of(v)) << c.body;
    EXPECT_EQ(error_of(v)->param, c.param) << c.body;
  }
  // At most kMaxCandidates candidates in all.
  Json too_many = {{"prompt", Json::array()}, {"best_of", 2}};
  for (int i = 0; i <= kMaxCandidates / 2; ++i) too_many["prompt"].push_back("p");
  ASSERT_TRUE(error_of(parse_completion_request(too_many)));
}

TEST(Protocol, MaxTokensZeroScoresThePrompt) {
  auto v = parse_completion_request(Json::parse(R"({"prompt":"hi","echo":true,"logprobs":0,"max_tokens":0})"));
  ASSERT_FALSE(error_of(v)) << error_of(v)->message;
  EXPECT_EQ(std::get<CompletionRequest>(v).options.max_tokens, 0);
  auto chat = parse_chat_request(Json::parse(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})"));
  ASSERT_TRUE(error_of(chat));
  EXPECT_EQ(error_of(chat)->param, "max_tokens");
}

TEST(Protocol, ValidationNamesTheParameter) {
  struct Case {
    const char* body;
    const char* param;
  };
  for (Case c : {Case{R"({"prompt":"x","temperature":"hot"})", "temperature"},
                 Case{R"({"prompt":"x","top_p":0})", "top_p"}, Case{R"({"prompt":"x","max_tokens":-1})", "max_tokens"},
                 Case{R"({"prompt":"x","stop":[1]})", "stop"}, Case{R"({"prompt":"x","n":17})", "n"},
                 Case{R"({"prompt":"x","n":0})", "n"}, Case{R"({"prompt":"x","n":2,"best_of":1})", "best_of"},
                 Case{R"({"prompt":"x","best_of":3,"stream":true})", "best_of"},
                 Case{R"({"prompt":"x","best_of":17})", "best_of"},
                 Case{R"({"prompt":"x","logprobs":21})", "logprobs"}, Case{R"({"prompt":"x","echo":1})", "echo"},
                 Case{R"({"prompt":"x","stream_options":{"include_usage":true}})", "stream_options"},
                 Case{R"({"prompt":"x","logit_bias":{"a":1}})", "logit_bias"},
                 Case{R"({"prompt":"x","presence_penalty":3})", "presence_penalty"}}) {
    auto v = parse_completion_request(Json::parse(c.body));
    ASSERT_TRUE(error_of(v)) << c.body;
    EXPECT_EQ(error_of(v)->status, 400);
    EXPECT_EQ(error_of(v)->param, c.param) << c.body << ": " << error_of(v)->message;
  }
  // Falsy values of unsupported options are accepted (clients send defaults).
  EXPECT_FALSE(error_of(parse_completion_request(Json::parse(R"({"prompt":"x","echo":false,"logprobs":null})"))));
}

TEST(Protocol, ChatMessagesAndExtras) {
  auto v = parse_chat_request(Json::parse(
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
          "max_completion_tokens":7,"tools":[{"type":"function","function":{"name":"f"}}],"chat_template_kwargs":{"enable_thinking":false},
          "stop":"\n","logit_bias":{"5":-100}})"));
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(v)) << std::get<RequestError>(v).message;
  const auto& r = std::get<ChatRequest>(v);
  EXPECT_EQ(r.messages[0]["content"], "a\nb");
  EXPECT_EQ(r.options.max_tokens, 7);
  EXPECT_FALSE(r.options.max_tokens == 16);
  EXPECT_EQ(r.template_extra["enable_thinking"], false);
  EXPECT_TRUE(r.template_extra.contains("tools"));
  EXPECT_EQ(r.options.stop, std::vector<std::string>{"\n"});
  ASSERT_EQ(r.options.sampling.logit_bias.size(), 1u);
  EXPECT_EQ(r.options.sampling.logit_bias[0].first, 5);

  auto image = parse_chat_request(Json::parse(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})"));
  ASSERT_TRUE(std::holds_alternative<RequestError>(image));
  EXPECT_EQ(std::get<RequestError>(image).param, "messages[0].content");
}

// The template's extra variables: tools and documents, which a
// chat_template_kwargs of the same name overrides.
TEST(Protocol, ChatTemplateKwargsWinOverToolsAndDocuments) {
  auto v = parse_chat_request(Json::parse(
      R"({"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f"}}],
          "documents":[{"text":"d"}],"chat_template_kwargs":{"documents":"mine","x":1}})"));
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(v)) << std::get<RequestError>(v).message;
  const Json& extra = std::get<ChatRequest>(v).template_extra;
  EXPECT_EQ(extra["documents"], "mine");
  EXPECT_EQ(extra["x"], 1);
  EXPECT_EQ(extra["tools"][0]["function"]["name"], "f");
  EXPECT_EQ(extra.size(), 3u);
}

TEST(Protocol, MessageRolesAndEmptyAssistantTurns) {
  auto v = parse_chat_request(Json::parse(R"({"messages":[{"role":"developer","content":"Be brief."},
      {"role":"user","content":"hi"},{"role":"assistant","content":null},{"role":"user","content":"again"}]})"));
  ASSERT_FALSE(error_of(v)) << error_of(v)->message;
  const Json& m = std::get<ChatRequest>(v).messages;
  EXPECT_EQ(m[0]["role"], "system");  // templates know system, not developer
  EXPECT_EQ(m[2]["content"], "");
  auto bad = parse_chat_request(Json::parse(R"({"messages":[{"role":"user","content":"a"},{"role":"robot","content":"b"}]})"));
  ASSERT_TRUE(error_of(bad));
  EXPECT_EQ(error_of(bad)->param, "messages[1].role");
  EXPECT_EQ(error_of(bad)->code, "invalid_value");
  EXPECT_NE(error_of(bad)->message.find("robot"), std::string::npos);
}

TEST(Protocol, OutputsKvlmCannotGiveAreRefusedWithOpenAisCodes) {
  struct Case {
    const char* extra;
    const char* param;
    const char* code;
  };
  for (Case c : {Case{R"("audio":{"voice":"alloy","format":"wav"})", "audio", "unsupported_parameter"},
                 Case{R"("modalities":["text","audio"])", "modalities", "unsupported_value"},
                 Case{R"("web_search_options":{})", "web_search_options", "unsupported_parameter"},
                 Case{R"("best_of":2)", "best_of", "unsupported_parameter"},
                 Case{R"("temperature":"hot")", "temperature", "invalid_type"},
                 Case{R"("n":17)", "n", "invalid_value"}}) {
    auto v = parse_chat_request(Json::parse(std::string(R"({"messages":[{"role":"user","content":"x"}],)") + c.extra + "}"));
    ASSERT_TRUE(error_of(v)) << c.extra;
    EXPECT_EQ(error_of(v)->param, c.param) << c.extra;
    EXPECT_EQ(error_of(v)->code, c.code) << c.extra;
  }
  // Service features with no effect on the output are accepted.
  EXPECT_FALSE(error_of(parse_chat_request(Json::parse(R"({"messages":[{"role":"user","content":"x"}],"modalities":["text"],
      "store":false,"metadata":{"a":"b"},"service_tier":"auto","user":"u","prediction":{"type":"content","content":"x"},
      "reasoning_effort":"low"})"))));
}

TEST(Protocol, LegacyFunctionsAreToolsAnsweredAsFunctionCall) {
  const std::string fns = R"("functions":[{"name":"get_weather","parameters":{"type":"object"}},{"name":"ping"}])";
  auto v = parse_chat_request(Json::parse(R"({"messages":[{"role":"user","content":"hi"},
      {"role":"assistant","content":null,"function_call":{"name":"get_weather","arguments":"{}"}},
      {"role":"function","name":"get_weather","content":"sunny"}],)" + fns + R"(,"function_call":{"name":"ping"}})"));
  ASSERT_FALSE(error_of(v)) << error_of(v)->message;
  const auto& r = std::get<ChatRequest>(v);
  EXPECT_TRUE(r.legacy_functions);
  EXPECT_FALSE(r.parallel_tool_calls);
  EXPECT_EQ(r.tools.size(), 2u);
  EXPECT_EQ(r.tools[1]["function"]["name"], "ping");
  EXPECT_EQ(r.tool_choice.kind, ToolChoice::Kind::kNamed);
  EXPECT_EQ(r.tool_choice.name, "ping");
  // The history in the tool API's words, the call and its result paired by id.
  const std::string id = r.messages[1]["tool_calls"][0]["id"];
  EXPECT_EQ(id.size(), 9u);
  EXPECT_EQ(r.messages[2]["role"], "tool");
  EXPECT_EQ(r.messages[2]["tool_call_id"], id);
  for (const char* choice : {R"("none")", R"("auto")"}) {
    auto c = parse_chat_request(Json::parse(R"({"messages":[{"role":"user","content":"hi"}],)" + fns +
                                            R"(,"function_call":)" + choice + "}"));
    ASSERT_FALSE(error_of(c)) << choice;
  }
  for (const char* body : {R"({"messages":[{"role":"user","content":"hi"}],"function_call":"auto"})",
                           R"({"messages":[{"role":"user","content":"hi"}],"functions":[{"name":"f"}],"function_call":{"name":"g"}})",
                           R"({"messages":[{"role":"user","content":"hi"}],"functions":[{"name":"f"}],"tools":[]})"}) {
    ASSERT_TRUE(error_of(parse_chat_request(Json::parse(body)))) << body;
  }
  Json call = chat_tool_calls_choice(0, "", Json::parse(R"([{"id":"x","type":"function","function":{"name":"f","arguments":"{}"}}])"),
                                     nullptr, CallStyle::kFunctionCall, false);
  EXPECT_EQ(call["message"]["function_call"]["name"], "f");
  EXPECT_FALSE(call["message"].contains("tool_calls"));
  EXPECT_EQ(call["finish_reason"], "function_call");
}

TEST(Protocol, ResponseShapes) {
  Usage u{5, 3, 2};
  Json c = chat_response("chatcmpl-1", 7, "m", "hello", "stop", u);
  EXPECT_EQ(c["choices"][0]["message"]["content"], "hello");
  EXPECT_EQ(c["usage"]["total_tokens"], 8);
  EXPECT_EQ(c["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
  Json first = chat_chunk("chatcmpl-1", 7, "m", "", "", true);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  Json last = chat_chunk("chatcmpl-1", 7, "m", "", "length", false);
  EXPECT_FALSE(last["choices"][0]["delta"].contains("content"));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(usage_chunk("x", 1, "m", true, u)["choices"].empty());
  RequestError e(404, "nope", std::string("model"));
  EXPECT_EQ(error_json(e)["error"]["param"], "model");
  EXPECT_NE(new_id("cmpl"), new_id("cmpl"));
}

TEST(Protocol, LogprobsParametersAndShapes) {
  auto c = parse_completion_request(Json::parse(R"({"prompt":"x","logprobs":3})"));
  ASSERT_FALSE(error_of(c));
  EXPECT_EQ(std::get<CompletionRequest>(c).options.logprobs, 3);
  EXPECT_EQ(std::get<CompletionRequest>(parse_completion_request(Json::parse(R"({"prompt":"x"})"))).options.logprobs, -1);
  const std::string msgs = R"("messages":[{"role":"user","content":"hi"}])";
  auto chat = parse_chat_request(Json::parse("{" + msgs + R"(,"logprobs":true,"top_logprobs":2})"));
  ASSERT_FALSE(error_of(chat));
  EXPECT_EQ(std::get<ChatRequest>(chat).options.logprobs, 2);
  EXPECT_EQ(std::get<ChatRequest>(parse_chat_request(Json::parse("{" + msgs + R"(,"logprobs":true})"))).options.logprobs, 0);
  auto bad = parse_chat_request(Json::parse("{" + msgs + R"(,"top_logprobs":2})"));
  ASSERT_TRUE(error_of(bad));
  EXPECT_EQ(error_of(bad)->param, "top_logprobs");
  bad = parse_chat_request(Json::parse("{" + msgs + R"(,"logprobs":3})"));
  ASSERT_TRUE(error_of(bad));
  EXPECT_EQ(error_of(bad)->param, "logprobs");

  // Half of a UTF-8 character is spelled as bytes; whole ones stay text.
  EXPECT_EQ(token_text("\xe2\x80"), "bytes:\\xe2\\x80");
  EXPECT_EQ(token_text(" caf\xc3\xa9"), " caf\xc3\xa9");
  std::vector<LogprobEntry> entries = {{{" a", -0.5f}, {{" a", -0.5f}, {" b", -1.5f}}}, {{"\xe2\x80", -2.f}, {}}};
  int64_t offset = 10;
  Json j = completion_logprobs(entries, &offset);
  EXPECT_EQ(offset, 14);
  EXPECT_EQ(j["tokens"], Json::array({" a", "bytes:\\xe2\\x80"}));
  EXPECT_EQ(j["token_logprobs"][0], -0.5f);
  EXPECT_EQ(j["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(j["top_logprobs"][1].size(), 1u);  // the chosen token is always there
  EXPECT_EQ(j["text_offset"], Json::array({10, 12}));
  Json ch = chat_logprobs(entries);
  ASSERT_EQ(ch["content"].size(), 2u);
  EXPECT_EQ(ch["content"][0]["token"], " a");
  EXPECT_EQ(ch["content"][0]["top_logprobs"][1]["token"], " b");
  EXPECT_EQ(ch["content"][1]["bytes"], Json::array({0xe2, 0x80}));
  EXPECT_TRUE(ch["content"][1]["top_logprobs"].empty());
  EXPECT_NO_THROW(ch.dump());
}

TEST(Histogram, BucketsAndQuantiles) {
  Histogram h({0.1, 0.2, 0.4});
  for (double v : {0.05, 0.15, 0.15, 0.3, 5.0}) h.observe(v);
  EXPECT_EQ(h.count(), 5u);
  EXPECT_EQ(h.cumulative_count(0), 1u);
  EXPECT_EQ(h.cumulative_count(1), 3u);
  EXPECT_EQ(h.cumulative_count(2), 4u);
  EXPECT_NEAR(h.sum(), 5.65, 1e-12);
  EXPECT_NEAR(h.quantile(0.5), 0.1 + 0.1 * (2.5 - 1) / 2, 1e-12);
  EXPECT_EQ(h.quantile(1.0), 0.4);  // the +Inf bucket reports the last bound
}

TEST(MetricsText, ExposesCountersAndHistograms) {
  EngineMetrics m;
  m.num_kv_blocks = 10;
  m.num_kv_blocks_used = 4;
  m.num_requests_aborted = 2;
  m.ttft_s.observe(0.003);
  const std::string text = prometheus_text(m, "my \"model\"");
  EXPECT_NE(text.find("kvlm_kv_usage_ratio{model_name=\"my \\\"model\\\"\"} 0.4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("kvlm_requests_finished_total{model_name=\"my \\\"model\\\"\",finished_reason=\"abort\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("kvlm_time_to_first_token_seconds_bucket{model_name=\"my \\\"model\\\"\",le=\"0.0025\"} 0\n"),
            std::string::npos);
  EXPECT_NE(text.find("kvlm_time_to_first_token_seconds_bucket{model_name=\"my \\\"model\\\"\",le=\"0.005\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("# TYPE kvlm_preemptions_total counter\n"), std::string::npos);
}

TEST(Protocol, SpeculativeIsOnUnlessTheRequestSaysFalse) {
  auto on = parse_completion_request(Json::parse(R"({"prompt":"hi"})"));
  EXPECT_TRUE(std::get<CompletionRequest>(on).options.speculative);
  auto off = parse_completion_request(Json::parse(R"({"prompt":"hi","speculative":false})"));
  ASSERT_FALSE(error_of(off));
  EXPECT_FALSE(std::get<CompletionRequest>(off).options.speculative);
  auto bad = parse_completion_request(Json::parse(R"({"prompt":"hi","speculative":"no"})"));
  EXPECT_TRUE(error_of(bad));
}

TEST(MetricsText, ExposesSpeculativeDecoding) {
  EngineMetrics m;
  m.num_spec_proposed = 12;
  m.num_spec_accepted = 7;
  m.spec_tokens_per_step[3] = 2;
  m.spec_tokens_per_step[15] = 1;
  const std::string text = prometheus_text(m, "m");
  EXPECT_NE(text.find("kvlm_spec_proposed_tokens_total{model_name=\"m\"} 12\n"), std::string::npos) << text;
  EXPECT_NE(text.find("kvlm_spec_accepted_tokens_total{model_name=\"m\"} 7\n"), std::string::npos);
  EXPECT_NE(text.find("kvlm_spec_tokens_per_step_total{model_name=\"m\",tokens=\"3\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("kvlm_spec_tokens_per_step_total{model_name=\"m\",tokens=\"15+\"} 1\n"), std::string::npos);
}

TEST(Protocol, ToolsAndToolChoice) {
  const std::string tools = R"("tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}])";
  const std::string msgs = R"("messages":[{"role":"user","content":"hi"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},
      {"role":"tool","tool_call_id":"call_1","content":"sunny"}])";
  auto v = parse_chat_request(Json::parse("{" + msgs + "," + tools +
                                          R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}},"parallel_tool_calls":false})"));
  ASSERT_FALSE(error_of(v)) << error_of(v)->message;
  const auto& r = std::get<ChatRequest>(v);
  EXPECT_EQ(r.tool_choice.kind, ToolChoice::Kind::kNamed);
  EXPECT_EQ(r.tool_choice.name, "get_weather");
  EXPECT_FALSE(r.parallel_tool_calls);
  EXPECT_EQ(r.tools.size(), 1u);
  EXPECT_FALSE(r.template_extra.contains("tool_choice"));  // as Hugging Face: templates see tools only
  struct Case {
    std::string body, param;
  };
  const std::string user = R"("messages":[{"role":"user","content":"hi"}])";
  const std::vector<Case> cases = {
      {"{" + user + R"(,"tools":{}})", "tools"},
      {"{" + user + R"(,"tools":[{"type":"retrieval"}]})", "tools[0].type"},
      {"{" + user + R"(,"tools":[{"type":"function","function":{"name":"a b"}}]})", "tools[0].function.name"},
      {"{" + user + R"(,"tools":[{"type":"function","function":{"name":"f","parameters":[]}}]})", "tools[0].function.parameters"},
      {"{" + user + R"(,"tools":[{"type":"function","function":{"name":"f","strict":true,"parameters":{"not":{}}}}]})",
       "tools[0].function.parameters"},
      {"{" + user + R"(,"tools":[{"type":"function","function":{"name":"f","strict":"yes"}}]})", "tools[0].function.strict"},
      {"{" + user + R"(,"tool_choice":"required"})", "tool_choice"},
      {"{" + user + "," + tools + R"(,"tool_choice":"sometimes"})", "tool_choice"},
      {"{" + user + "," + tools + R"(,"tool_choice":{"type":"function","function":{"name":"nope"}}})", "tool_choice"},
      {"{" + user + "," + tools + R"(,"parallel_tool_calls":"yes"})", "parallel_tool_calls"},
      {R"({"messages":[{"role":"tool","content":"x"}]})", "messages[0].tool_call_id"},
      {R"({"messages":[{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f","arguments":{}}}]}]})",
       "messages[0].tool_calls[0].function.arguments"},
      {R"({"messages":[{"role":"user","tool_calls":[]}]})", "messages[0].tool_calls"},
  };
  for (const Case& c : cases) {
    // A strict schema the grammar cannot enforce is refused when it compiles.
    auto e = parse_chat_request(Json::parse(c.body));
    if (!error_of(e))
      if (auto refused = compile_grammars(std::get<ChatRequest>(e))) e = *refused;
    ASSERT_TRUE(error_of(e)) << c.body;
    EXPECT_EQ(error_of(e)->status, 400);
    EXPECT_EQ(error_of(e)->param, c.param) << c.body << ": " << error_of(e)->message;
  }
}

// Parsing reads structured output and strict tools without compiling them;
// compile_grammars() compiles, and its refusals name the field as parsing's do.
TEST(Protocol, ParsingCompilesNoGrammarAndCompilingRefusesWhatCannotCompile) {
  const std::string user = R"("messages":[{"role":"user","content":"hi"}])";
  auto regex = parse_chat_request(Json::parse("{" + user + R"(,"guided_regex":"(unclosed"})"));
  ASSERT_FALSE(error_of(regex));
  auto& r = std::get<ChatRequest>(regex);
  ASSERT_TRUE(r.options.constraint_spec);
  EXPECT_EQ(r.options.constraint_spec->kind, ConstraintSpec::Kind::kRegex);
  EXPECT_EQ(r.options.constraint, nullptr);
  auto refused = compile_grammars(r);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400);
  EXPECT_EQ(refused->param, "guided_regex");

  auto schema = parse_completion_request(Json::parse(
      R"({"prompt":"x","response_format":{"type":"json_schema","json_schema":{"schema":{"type":"object"}}}})"));
  ASSERT_FALSE(error_of(schema));
  auto& c = std::get<CompletionRequest>(schema);
  EXPECT_EQ(c.options.constraint, nullptr);
  EXPECT_FALSE(compile_grammars(c));
  EXPECT_NE(c.options.constraint, nullptr);

  auto text = parse_chat_request(Json::parse("{" + user + R"(,"response_format":{"type":"text"}})"));
  ASSERT_FALSE(error_of(text));
  EXPECT_FALSE(std::get<ChatRequest>(text).options.constraint_spec);
}

}  // namespace
}  // namespace kvlm::openai
