// Hostile input against `kvlm serve` over real HTTP on loopback: each class of
// request that once killed the server or got a 500 for the client's mistake,
// then a bounded generator of malformed requests (KVLM_HOSTILE_COUNT of them,
// 300 by default). After every batch the server must still answer /health and
// hold no KV block.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "hostile_gen.h"
#include "hostile_util.h"
#include "support/test_support.h"

namespace kvlm::hostile_server_test {

using Json = nlohmann::json;

// U+FFFD, what the server writes for bytes that are not UTF-8.
const std::string kReplacement = "\xEF\xBF\xBD";

class HostileServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new test::ServerProcess({"-m", test::shared_path("models/stories260K.gguf"), "--chat-template-file",
                                       test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"), "-t", "1",
                                       "--max-model-len", "256"});
  }
  static void TearDownTestSuite() {
    auto r = server_->stop();
    // SIGTERM ends it cleanly; a sanitizer report or a crash would not.
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.find("AddressSanitizer"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("runtime error:"), std::string::npos) << r.err;
    delete server_;
    server_ = nullptr;
  }
  static int port() { return server_->port(); }
  static test::RawResponse post(const std::string& path, const std::string& body) {
    return test::raw_request(port(), test::http_post(path, body));
  }
  static Json error_of(const test::RawResponse& r) {
    Json j = Json::parse(r.body, nullptr, false);
    EXPECT_TRUE(j.is_object() && j.contains("error")) << r.head << "\n" << test::shown(r.body);
    return j.is_object() && j.contains("error") ? j["error"] : Json::object();
  }
  // The invariant after any request: alive, and every KV block back in the pool.
  static void expect_whole() {
    auto health = test::raw_request(port(), test::http_get("/health"));
    ASSERT_EQ(health.status, 200) << "the server stopped answering";
    std::string metrics;
    for (int i = 0; i < 500; ++i) {
      metrics = test::raw_request(port(), test::http_get("/metrics")).body;
      if (metrics.find("\nkvlm_kv_blocks_used{model_name=\"llama\"} 0\n") != std::string::npos) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "KV blocks still held:\n" << metrics;
  }
  static test::ServerProcess* server_;
};
test::ServerProcess* HostileServerTest::server_ = nullptr;

TEST_F(HostileServerTest, InvalidUtf8InAPathIsA404WithValidJson) {
  ASSERT_GT(port(), 0);
  for (const std::string path : {"/%FF", "/v1/models/%80", "/\xE9", "/v1/%C3%28", "/%ED%A0%80", "/%C0%AF", "/%00x",
                                 "/%F4%90%80%80", "/\xF0\x9F\x98"}) {
    for (const char* method : {"GET", "POST"}) {
      SCOPED_TRACE(std::string(method) + " " + test::shown(path));
      auto r = test::raw_request(port(), std::string(method) + " " + path +
                                             " HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
      // 405: GET /v1/models/{id} exists, so POST there is the wrong method.
      EXPECT_TRUE(r.status == 404 || r.status == 400 || r.status == 405) << r.head;
      EXPECT_FALSE(error_of(r).value("message", "").empty());
    }
  }
  expect_whole();
}

TEST_F(HostileServerTest, ByteTokensInOutputBecomeReplacementCharacters) {
  // Token 200 is <0xC5>, the first byte of a two-byte character.
  auto r = post("/detokenize", R"({"tokens":[200]})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body)["content"], kReplacement);
  // Streaming echo: the first chunk carries the broken prompt.
  r = post("/v1/completions", R"({"prompt":[1,200],"echo":true,"stream":true,"max_tokens":3,"logprobs":1})");
  ASSERT_EQ(r.status, 200) << r.body;
  const auto events = test::sse_payloads(r.body);
  ASSERT_GE(events.size(), 2u) << r.body;
  EXPECT_EQ(events.back(), "[DONE]");
  for (size_t i = 0; i + 1 < events.size(); ++i) EXPECT_TRUE(Json::accept(events[i])) << test::shown(events[i]);
  EXPECT_NE(Json::parse(events[0])["choices"][0]["text"].get<std::string>().find(kReplacement), std::string::npos);
  // Non-streaming echo, chat streaming, and tokenize pieces of multi-byte text.
  r = post("/v1/completions", R"({"prompt":[200,201,1],"echo":true,"max_tokens":2,"logprobs":0})");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(Json::accept(r.body)) << test::shown(r.body);
  r = post("/tokenize", R"({"content":"héllo wörld ☃ 😀","with_pieces":true})");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(Json::accept(r.body)) << test::shown(r.body);
  r = post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"\u00c5\u2603"}],"max_tokens":3,"stream":true,"logprobs":true,"top_logprobs":3})");
  EXPECT_EQ(r.status, 200) << r.body;
  for (const auto& e : test::sse_payloads(r.body)) EXPECT_TRUE(e == "[DONE]" || Json::accept(e)) << test::shown(e);
  // Broken UTF-8 in a request body is the client's fault: 400, not a 500.
  r = post("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"\xC5\xFF\"}]}");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_TRUE(Json::accept(r.body)) << test::shown(r.body);
  expect_whole();
}

TEST_F(HostileServerTest, DeepNestingIsRefusedWhileParsing) {
  auto deep = [](size_t n) { return std::string(n, '[') + std::string(n, ']'); };
  auto r = post("/v1/completions", deep(300000));
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(error_of(r).value("message", "").find("nested deeper than 64"), std::string::npos) << r.body;
  const std::string msg = R"({"role":"user","content":"hi","x":)";
  for (const std::string& body :
       {R"({"messages":[)" + msg + deep(5000) + "}]}", R"({"messages":[{"role":"user","content":"hi"}],"tools":)" + deep(100) + "}",
        R"({"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"k":)" + deep(3000) + "}}"}) {
    r = post("/v1/chat/completions", body);
    EXPECT_EQ(r.status, 400) << r.body;
  }
  // 64 levels are fine (refused for what they mean, not for their depth).
  r = post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"chat_template_kwargs":{"k":)" + deep(62) + "}}");
  EXPECT_EQ(r.status, 200) << r.body;
  expect_whole();
}

TEST_F(HostileServerTest, WrongTypesAndRangesAre400sNamingTheField) {
  struct Case {
    std::string path, body, param;
  };
  const std::vector<Case> cases = {
      {"/tokenize", R"({"content":"hi","add_special":1})", "add_special"},
      {"/tokenize", R"({"content":"hi","with_pieces":"yes"})", "with_pieces"},
      {"/tokenize", R"({"content":7})", "content"},
      {"/detokenize", R"({"tokens":[1.5]})", "tokens"},
      {"/detokenize", R"({"tokens":[18446744073709551615]})", "tokens"},
      {"/v1/completions", R"({"prompt":"x","temperature":1e400})", ""},
      {"/v1/completions", R"({"prompt":"x","max_tokens":-1e400})", ""},
      {"/v1/completions", R"({"prompt":[1e400]})", ""},
      {"/v1/completions", R"({"prompt":[4294967297]})", "prompt"},
      {"/v1/completions", R"({"prompt":"x","logit_bias":{"4294967297":1}})", "logit_bias"},
      {"/v1/completions", R"({"prompt":"x","logit_bias":{"-1":1}})", "logit_bias"},
      {"/v1/completions", R"({"prompt":"x","logit_bias":{"1":1e300}})", "logit_bias"},
      {"/v1/completions", R"({"prompt":"x","logit_bias":{"600":1}})", ""},  // past the 512-token vocabulary
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"top_logprobs":"2"})", "top_logprobs"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    auto r = post(c.path, c.body);
    EXPECT_EQ(r.status, 400) << r.body;
    const Json e = error_of(r);
    if (!c.param.empty()) {
      EXPECT_EQ(e.value("param", Json()).dump(), Json(c.param).dump()) << r.body;
    }
  }
  expect_whole();
}

TEST_F(HostileServerTest, MalformedRequestLineClosesTheConnection) {
  for (const std::string bytes : {"GARBAGE\r\nConnection: close\r\n\r\n", "GET /\r\nConnection: close\r\n\r\n",
                                  "\xff\xfe /\r\nConnection: close\r\n\r\n"}) {
    SCOPED_TRACE(test::shown(bytes));
    auto r = test::raw_request(port(), bytes, 10000);
    EXPECT_EQ(r.status, 400) << r.head;
    EXPECT_TRUE(r.closed);
    EXPECT_LT(r.seconds, 5.0) << "the server held the connection";
  }
  expect_whole();
}

TEST_F(HostileServerTest, HugePromptIsRefusedBeforeTokenizing) {
  std::string prompt;
  prompt.reserve(30u << 20);
  while (prompt.size() < (30u << 20)) prompt += "Once upon a time, a cat sat. ";
  const auto start = std::chrono::steady_clock::now();
  auto r = post("/v1/completions", Json{{"prompt", prompt}, {"max_tokens", 1}}.dump());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.status, 400) << test::shown(r.body);
  EXPECT_NE(r.body.find("maximum context length is 256"), std::string::npos) << test::shown(r.body);
  r = post("/tokenize", Json{{"content", prompt}}.dump());
  EXPECT_EQ(r.status, 400) << test::shown(r.body);
  std::printf("two 30 MiB prompts refused in %.2f s\n", s);
  expect_whole();
}

// The generator: KVLM_HOSTILE_COUNT malformed requests (default 300). Every
// answer is a well-formed HTTP response below 500, or (for broken framing) a
// closed connection; the server lives through all of them.
TEST_F(HostileServerTest, RandomMalformedRequestsNeverKillTheServerOrGet5xx) {
  ASSERT_GT(port(), 0);
  const int count = test::hostile_count(300);
  int by_class[6] = {0, 0, 0, 0, 0, 0};  // no answer, 1xx..5xx
  double slowest = 0;
  std::string slowest_request;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < count; ++i) {
    const test::HostileRequest h = test::hostile_request(/*seed=*/9, static_cast<uint64_t>(i));
    const auto r = test::raw_request(port(), h.bytes, 20000, h.half_close);
    ASSERT_TRUE(r.connected) << "request " << i << " (" << h.kind << "): the server is gone after " << test::shown(h.bytes);
    ++by_class[r.status / 100 <= 5 ? r.status / 100 : 0];
    if (r.seconds > slowest) {
      slowest = r.seconds;
      slowest_request = h.kind + ": " + test::shown(h.bytes);
    }
    EXPECT_LT(r.status, 500) << "request " << i << " (" << h.kind << "): " << test::shown(h.bytes) << "\n-> "
                             << r.head << "\n" << test::shown(r.body);
    if (h.kind != "framing") {
      EXPECT_GT(r.status, 0) << "request " << i << " (" << h.kind << ") got no answer: " << test::shown(h.bytes);
    }
    if (i % 100 == 99) expect_whole();
  }
  expect_whole();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%d hostile requests in %.1f s: %d unanswered, %d 2xx, %d 4xx, %d 5xx; slowest %.2f s: %s\n", count, s,
              by_class[0], by_class[2], by_class[4], by_class[5], slowest, slowest_request.substr(0, 200).c_str());
}

}  // namespace kvlm::hostile_server_test
