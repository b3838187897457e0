// The server's grammar and body limits over real HTTP: a schema
// repeated compiles once, a grammar too large alone is a cached 400 naming
// the field, a compilation that finds no free slot is a 503 with
// Retry-After and a code naming the limit, a body too large once parsed is a
// 413 naming --body-mem, and /metrics shows each of them.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::grammar_limits_server_test {

using Json = nlohmann::json;

constexpr int64_t kGrammarMem = 64 << 20;
constexpr int64_t kBodyMem = 16 << 20;

class GrammarLimitsServer : public ::testing::Test {
 protected:
  // One compilation at a time and no waiting for it: a second compilation
  // while one runs is refused at once.
  GrammarLimitsServer()
      : server_({"-m", test::shared_path("models/stories260K.gguf"), "-t", "1", "--grammar-mem",
                 std::to_string(kGrammarMem), "--grammar-compilations", "1", "--grammar-wait-ms", "0", "--body-mem",
                 std::to_string(kBodyMem)}),
        cli_("127.0.0.1", server_.port()) {
    cli_.set_read_timeout(120);
  }

  httplib::Result post(const Json& body) { return cli_.Post("/v1/completions", body.dump(), "application/json"); }
  double metric(const std::string& series) { return test::metric_sample(test::metrics_text(server_), series); }

  static Json with_schema(const Json& schema) {
    return {{"prompt", "Once upon a time"}, {"max_tokens", 2}, {"temperature", 0},
            {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "s"}, {"schema", schema}}}}}};
  }
  static Json small_schema() {
    return {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}, {"required", {"a"}}};
  }
  // An object of 300 optional properties with min/maxProperties: counting
  // them multiplies the states past any limit (a slow refusal).
  static Json counted_properties(const std::string& salt) {
    Json props = Json::object();
    for (int k = 0; k < 300; ++k) props[fmt::format("{}k{}", salt, k)] = {{"type", "integer"}};
    return {{"type", "object"}, {"properties", props}, {"minProperties", 1}, {"maxProperties", 299}};
  }

  test::ServerProcess server_;
  httplib::Client cli_;
};

TEST_F(GrammarLimitsServer, ARepeatedSchemaCompilesOnceWithinTheBudget) {
  ASSERT_GT(server_.port(), 0);
  for (int i = 0; i < 2; ++i) {
    auto r = post(with_schema(small_schema()));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
  }
  // Key order and spacing do not make another grammar.
  auto r = cli_.Post("/v1/completions",
                     R"({"max_tokens":2,"prompt":"Once upon a time","response_format":{"type":"json_schema",)"
                     R"("json_schema":{"name":"s","schema":{"required":["a"],"type":"object",)"
                     R"("properties":{"a":{"type":"integer"}}}}}})",
                     "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(metric("kvlm_grammar_compilations_total"), 1);
  EXPECT_EQ(metric("kvlm_grammar_cache_hits_total"), 2);
  EXPECT_EQ(metric("kvlm_grammar_cache_entries"), 1);
  EXPECT_GT(metric("kvlm_grammar_memory_bytes"), 0);
  EXPECT_LT(metric("kvlm_grammar_memory_bytes"), 1 << 20);
  EXPECT_EQ(metric("kvlm_grammar_memory_budget_bytes"), static_cast<double>(kGrammarMem));
  EXPECT_EQ(metric("kvlm_grammar_compilations_running"), 0);
  EXPECT_EQ(metric("kvlm_grammar_compilations_waiting"), 0);
  EXPECT_GT(metric("process_resident_memory_bytes"), 0);
  EXPECT_GE(metric("kvlm_heap_trims_total"), 0);
}

TEST_F(GrammarLimitsServer, AGrammarTooLargeAloneIsACached400) {
  ASSERT_GT(server_.port(), 0);
  const Json body = with_schema(counted_properties("x"));
  for (int i = 0; i < 2; ++i) {
    auto r = post(body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    const Json error = Json::parse(r->body)["error"];
    EXPECT_EQ(error.value("param", ""), "response_format.json_schema.schema") << r->body;
    EXPECT_NE(error.value("message", "").find("too large"), std::string::npos) << r->body;
  }
  const std::string too_large = "kvlm_grammar_refused_total{model_name=\"llama\",reason=\"too_large\"}";
  EXPECT_EQ(metric(too_large), 2);
  EXPECT_EQ(metric("kvlm_grammar_cache_hits_total"), 1) << "the second refusal came from the cache";
  EXPECT_EQ(metric("kvlm_grammar_compilations_total"), 0);
  // The refused compilation gave back what it held but the cached refusal.
  EXPECT_LT(metric("kvlm_grammar_memory_bytes"), 1 << 20);
}

TEST_F(GrammarLimitsServer, ACompilationWithoutASlotIsA503NamingTheLimit) {
  ASSERT_GT(server_.port(), 0);
  // While a slow compilation holds the only slot (seen on /metrics), a
  // request for another grammar may not wait (--grammar-wait-ms 0). Tried
  // a few times: on a loaded machine the slow one may end before it is seen.
  bool seen_running = false;
  for (int attempt = 0; attempt < 5 && !seen_running; ++attempt) {
    auto slow = std::async(std::launch::async, [&, attempt] {
      httplib::Client c("127.0.0.1", server_.port());
      c.set_read_timeout(120);
      return c.Post("/v1/completions", with_schema(counted_properties(fmt::format("s{}", attempt))).dump(),
                    "application/json");
    });
    while (slow.wait_for(std::chrono::milliseconds(2)) != std::future_status::ready)
      if (metric("kvlm_grammar_compilations_running") == 1) {
        seen_running = true;
        break;
      }
    if (!seen_running) continue;
    Json schema = small_schema();
    schema["properties"][fmt::format("b{}", attempt)] = {{"type", "string"}};
    auto r = post(with_schema(schema));
    ASSERT_TRUE(r);
    // The slow one may have ended between the look and this request.
    if (slow.wait_for(std::chrono::seconds(0)) == std::future_status::ready && r->status == 200) {
      seen_running = false;
      continue;
    }
    EXPECT_EQ(r->status, 503) << r->body;
    EXPECT_TRUE(r->has_header("Retry-After"));
    const Json error = Json::parse(r->body)["error"];
    EXPECT_EQ(error.value("code", ""), "grammar_compilations_busy") << r->body;
    EXPECT_NE(error.value("message", "").find("--grammar-compilations 1"), std::string::npos) << r->body;
    auto done = slow.get();
    ASSERT_TRUE(done);
    EXPECT_EQ(done->status, 400) << done->body;
  }
  ASSERT_TRUE(seen_running) << "the slow compilation was never seen running";
  EXPECT_GE(metric("kvlm_grammar_refused_total{model_name=\"llama\",reason=\"busy\"}"), 1);
  // Refused for time, the grammar is not cached: it compiles when retried.
  auto r = post(with_schema(small_schema()));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

TEST_F(GrammarLimitsServer, ABodyTooLargeOnceParsedIsA413NamingTheLimit) {
  ASSERT_GT(server_.port(), 0);
  // 2 MB of text, about 60 MB once parsed: small numbers in a long array
  // are what JSON parsing amplifies most.
  std::string prompt = "[0";
  for (int i = 0; i < 1000000; ++i) prompt += ",0";
  auto r = cli_.Post("/v1/completions", R"({"max_tokens":1,"prompt":)" + prompt + "]}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413) << r->body;
  EXPECT_NE(Json::parse(r->body)["error"].value("message", "").find("--body-mem"), std::string::npos) << r->body;
  EXPECT_EQ(metric("kvlm_body_memory_bytes"), 0);
  EXPECT_EQ(metric("kvlm_body_memory_budget_bytes"), static_cast<double>(kBodyMem));
  auto ok = post({{"prompt", "Once upon a time"}, {"max_tokens", 2}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

}  // namespace kvlm::grammar_limits_server_test
