// Structured outputs over real HTTP on stories260K: 50 random JSON Schemas
// (seeded generator over the supported keywords) whose outputs, stopped by
// the grammar, validate under python3-jsonschema; guided_regex outputs that
// PCRE2 matches in full; guided_choice outputs that are one of the choices;
// n > 1, chat, batch invariance and preemption with a grammar; and the 400s.

#include <gtest/gtest.h>

#include <future>
#include <random>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::constrained_test {

using Json = nlohmann::ordered_json;

std::pair<int, Json> post(const test::ServerProcess& server, const std::string& path, const Json& body) {
  httplib::Client cli("127.0.0.1", server.port());
  cli.set_read_timeout(std::chrono::seconds(120));
  auto r = cli.Post(path, body.dump(), "application/json");
  EXPECT_TRUE(r) << "no response from " << path;
  if (!r) return {0, Json()};
  return {r->status, Json::parse(r->body)};
}

// Random schemas over the supported keywords, bounded so that every document
// they allow is short (the model must stop by itself: the grammar ends).
class SchemaGen {
 public:
  explicit SchemaGen(uint32_t seed) : rng_(seed) {}

  Json schema() {
    Json s = value(0);
    if (pick(4) == 0) {  // through $defs and $ref
      Json root = {{"$defs", {{"item", s}}}, {"$ref", "#/$defs/item"}};
      return root;
    }
    return s;
  }

 private:
  int pick(int n) { return static_cast<int>(rng_() % static_cast<uint32_t>(n)); }

  Json value(int depth) {
    const int kind = pick(depth >= 2 ? 9 : 12);
    switch (kind) {
      case 0: return string();
      case 1: {
        Json s = {{"type", "integer"}};
        const int lo = pick(200) - 100;
        if (pick(2)) s["minimum"] = lo;
        if (pick(2)) s["maximum"] = lo + pick(500);
        return s;
      }
      case 2: {
        Json s = {{"type", "number"}};
        if (pick(2)) s["minimum"] = (pick(100) - 50) / 4.0;
        if (pick(2)) s["exclusiveMaximum"] = 20 + pick(50) / 3.0;
        return s;
      }
      case 3: return {{"type", "boolean"}};
      case 4: return {{"type", "null"}};
      case 5: return {{"enum", Json::array({"red", 7, nullptr, "a \"quoted\" word"})}};
      case 6: return {{"const", {{"k", Json::array({1, "x"})}}}};
      case 7: return {{"type", Json::array({"string", "null"})}, {"maxLength", 4}};
      case 8: return {{"type", "string"}, {"pattern", "^[a-z]{1,6}-[0-9]{2}$"}};
      case 9: case 10: return object(depth);
      default: return array(depth);
    }
  }

  Json string() {
    Json s = {{"type", "string"}};
    const int min = pick(3);
    s["minLength"] = min;
    s["maxLength"] = min + pick(10);
    return s;
  }

  Json object(int depth) {
    Json props = Json::object();
    Json required = Json::array();
    const int n = 1 + pick(3);
    for (int i = 0; i < n; ++i) {
      const std::string name = std::string(1, static_cast<char>('a' + i)) + std::to_string(pick(100));
      props[name] = value(depth + 1);
      if (pick(3)) required.push_back(name);
    }
    Json s = {{"type", "object"}, {"properties", props}, {"required", required}, {"additionalProperties", false}};
    return s;
  }

  Json array(int depth) {
    Json s = {{"type", "array"}, {"items", value(depth + 1)}};
    const int min = pick(2);
    s["minItems"] = min;
    s["maxItems"] = min + pick(3);
    if (pick(3) == 0) {
      s = {{"anyOf", Json::array({s, {{"type", "boolean"}}})}};
    }
    return s;
  }

  std::mt19937 rng_;
};

// The pool is whole once the engine has published its last step (a response
// can arrive just before that).
void expect_pool_whole(const test::ServerProcess& server) {
  for (int i = 0; i < 500 && test::server_metric(server, "kvlm_kv_blocks_used") != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(test::server_metric(server, "kvlm_kv_blocks_used"), 0);
}

std::vector<std::string> server_args() {
  return {"-m", test::shared_path("models/stories260K.gguf"), "--chat-template-file",
          test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"), "-t", "1"};
}

Json schema_body(const Json& schema, int seed) {
  return {{"prompt", "Once upon a time"}, {"max_tokens", 2000}, {"seed", seed}, {"temperature", 1.0},
          {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "t"}, {"schema", schema}, {"strict", true}}}}}};
}

// Runs the python3-jsonschema validator over the cases; "" when all pass.
std::string validate(const Json& cases) {
  const std::string path = test::write_temp_file("constrained_cases.json", cases.dump());
  auto r = test::run_program({"python3", std::string(KVLM_SOURCE_DIR) + "/tests/e2e/validate_json_schema.py", path});
  return r.exit_code == 0 ? "" : r.out + r.err;
}

TEST(Constrained, FiftyRandomSchemasValidate) {
  test::ServerProcess server(server_args());
  SchemaGen gen(2026);
  Json cases = Json::array();
  for (int i = 0; i < 50; ++i) {
    const Json schema = gen.schema();
    auto [status, j] = post(server, "/v1/completions", schema_body(schema, i));
    ASSERT_EQ(status, 200) << j << "\nschema " << schema;
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop") << "schema " << schema << " output " << j;
    cases.push_back({{"schema", schema}, {"output", j["choices"][0]["text"]}});
  }
  EXPECT_EQ(validate(cases), "");
  expect_pool_whole(server);
}

TEST(Constrained, RegexChoiceChatAndChoices) {
  test::ServerProcess server(server_args());
  const std::vector<std::string> patterns = {"[A-Z][a-z]{2,8}( [a-z]{1,8}){2,5}\\.", "(yes|no|maybe)!{0,2}",
                                             "\\d{3}-\\d{4}", "[a-f0-9]{8}", "(ab|cd)+e?x{2}"};
  for (size_t i = 0; i < patterns.size(); ++i) {
    auto [status, j] = post(server, "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 200},
                                                         {"seed", i}, {"guided_regex", patterns[i]}});
    ASSERT_EQ(status, 200) << j;
    const std::string text = j["choices"][0]["text"];
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop") << patterns[i] << ": " << text;
    EXPECT_TRUE(test::pcre_full_match(patterns[i], text)) << patterns[i] << ": '" << text << "'";
  }
  const Json colors = Json::array({"red", "green", "light blue"});
  auto [status, j] = post(server, "/v1/chat/completions",
                          {{"messages", {{{"role", "user"}, {"content", "Pick a color."}}}}, {"guided_choice", colors},
                           {"n", 3}, {"seed", 9}});
  ASSERT_EQ(status, 200) << j;
  ASSERT_EQ(j["choices"].size(), 3u);
  for (const Json& c : j["choices"]) {
    const std::string text = c["message"]["content"];
    EXPECT_NE(std::find(colors.begin(), colors.end(), Json(text)), colors.end()) << text;
    EXPECT_EQ(c["finish_reason"], "stop");
  }
  // Streamed: the deltas add up to one of the choices.
  httplib::Client cli("127.0.0.1", server.port());
  Json body = {{"messages", {{{"role", "user"}, {"content", "Pick a color."}}}}, {"guided_choice", colors},
               {"stream", true}, {"seed", 4}};
  auto r = cli.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  std::string streamed, reason;
  for (const std::string& d : test::sse_data(r->body)) {
    if (d == "[DONE]") continue;
    const Json chunk = Json::parse(d);
    for (const Json& c : chunk["choices"]) {
      if (c["delta"].contains("content")) streamed += c["delta"]["content"].get<std::string>();
      if (c["finish_reason"].is_string()) reason = c["finish_reason"];
    }
  }
  EXPECT_NE(std::find(colors.begin(), colors.end(), Json(streamed)), colors.end()) << streamed;
  EXPECT_EQ(reason, "stop");
  expect_pool_whole(server);
}

// Eight greedy constrained requests at once in a pool that holds about two of
// them: they are batched together, chunked and preempted, and each output equals the
// same request run alone (the matcher survives preemption; masks do not
// depend on the batch).
TEST(Constrained, BatchedAndPreemptedEqualAlone) {
  std::vector<std::string> args = server_args();
  // A step budget of 4 tokens also chunks every prompt's prefill.
  for (const char* a : {"--ctx", "160", "--block-size", "16", "--max-batched-tokens", "4"}) args.push_back(a);
  test::ServerProcess server(args);
  const Json schema = Json::parse(R"({"type":"object","properties":{"story":{"type":"string","minLength":40,"maxLength":60},
      "n":{"type":"integer"},"ok":{"type":"boolean"}},"required":["story","n","ok"],"additionalProperties":false})");
  auto body = [&](int i) {
    Json b = schema_body(schema, 0);
    b["temperature"] = 0;
    b["max_tokens"] = 150;
    b["prompt"] = "Once upon a time " + std::to_string(i);
    return b;
  };
  std::vector<std::string> alone;
  for (int i = 0; i < 8; ++i) {
    auto [status, j] = post(server, "/v1/completions", body(i));
    ASSERT_EQ(status, 200) << j;
    alone.push_back(j["choices"][0]["text"]);
  }
  const double preempted_before = test::server_metric(server, "kvlm_preemptions_total");
  std::vector<std::future<std::pair<int, Json>>> batched;
  for (int i = 0; i < 8; ++i)
    batched.push_back(std::async(std::launch::async, [&, i] { return post(server, "/v1/completions", body(i)); }));
  for (int i = 0; i < 8; ++i) {
    auto [status, j] = batched[i].get();
    ASSERT_EQ(status, 200) << j;
    EXPECT_EQ(j["choices"][0]["text"], alone[i]) << "request " << i;
  }
  EXPECT_GT(test::server_metric(server, "kvlm_preemptions_total"), preempted_before);
  expect_pool_whole(server);
}

// The mask changes what is drawn, not what is reported: logprobs stay the
// model's own (a masked-and-renormalised row would give the only allowed
// token log-probability 0).
TEST(Constrained, LogprobsStayTheModels) {
  test::ServerProcess server(server_args());
  const Json base = {{"prompt", "Once upon a time"}, {"max_tokens", 1}, {"temperature", 0}, {"logprobs", 5}};
  auto [s1, free] = post(server, "/v1/completions", base);
  ASSERT_EQ(s1, 200) << free;
  Json constrained = base;
  constrained["guided_regex"] = ",";
  auto [s2, forced] = post(server, "/v1/completions", constrained);
  ASSERT_EQ(s2, 200) << forced;
  EXPECT_EQ(forced["choices"][0]["text"], ",");
  const Json& top = free["choices"][0]["logprobs"]["top_logprobs"][0];
  ASSERT_TRUE(top.contains(",")) << top;
  const double lp = forced["choices"][0]["logprobs"]["token_logprobs"][0].get<double>();
  EXPECT_NEAR(lp, top[","].get<double>(), 1e-5);
  EXPECT_LT(lp, -1e-3);
}

TEST(Constrained, BadConstraintsAre400sNamingTheProblem) {
  test::ServerProcess server(server_args());
  auto expect_400 = [&](const Json& extra, const std::string& param, const std::string& words) {
    Json body = {{"prompt", "x"}, {"max_tokens", 4}};
    for (const auto& [k, v] : extra.items()) body[k] = v;
    auto [status, j] = post(server, "/v1/completions", body);
    EXPECT_EQ(status, 400) << j;
    EXPECT_EQ(j["error"]["param"], param) << j;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(words), std::string::npos) << j;
  };
  expect_400({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"strict", true}, {"schema",
             {{"type", "object"}, {"properties", {{"a", {{"not", Json::object()}}}}}}}}}}}},
             "response_format.json_schema.schema", "unsupported keyword 'not' at /properties/a");
  expect_400({{"response_format", {{"type", "xml"}}}}, "response_format.type", "json_schema");
  expect_400({{"guided_regex", "(a"}}, "guided_regex", "regex:");
  expect_400({{"guided_choice", Json::array()}}, "guided_choice", "non-empty");
  expect_400({{"guided_regex", "a"}, {"guided_choice", {"b"}}}, "guided_choice", "cannot be used together");
  expect_400({{"guided_json", "{not json"}}, "guided_json", "JSON Schema");
}

}  // namespace kvlm::constrained_test

namespace kvlm::constrained_test {

// The official openai npm client's own parse helper reads the constrained
// answer (tests/npm/structured_outputs.mjs).
TEST(Constrained, OpenAiClientParsesJsonSchemaAnswers) {
  const std::string script = std::string(KVLM_SOURCE_DIR) + "/tests/npm/structured_outputs.mjs";
  ASSERT_TRUE(test::have_program("node")) << "node is required (scripts/setup.sh installs it)";
  test::ServerProcess server(server_args());
  auto r = test::run_program({"node", script, server.url()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["parsed"]["finish_reason"], "stop") << j;
  EXPECT_EQ(j["parsed"]["parsed"], Json::parse(j["parsed"]["content"].get<std::string>()));
  EXPECT_EQ(validate(Json::array({{{"schema", j["schema"]}, {"output", j["parsed"]["content"]}}})), "");
  EXPECT_TRUE(j["choice"] == "yes" || j["choice"] == "no") << j;
  EXPECT_EQ(j["error"]["status"], 400) << j;
  EXPECT_EQ(j["error"]["param"], "response_format.json_schema.schema") << j;
  EXPECT_NE(j["error"]["message"].get<std::string>().find("'if'"), std::string::npos) << j;
}

}  // namespace kvlm::constrained_test
