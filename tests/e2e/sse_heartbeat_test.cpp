// SSE keep-alive comments while a long prompt is computed: they are exactly
// ": keep-alive\n\n" (a stray NUL after one made clients drop the next event,
// the first token), and the streamed text equals the plain response's.
#include <gtest/gtest.h>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::sse_heartbeat_test {

using Json = nlohmann::json;

TEST(SseHeartbeat, KeepAlivesBeforeTheFirstTokenLoseNothing) {
  // F32 weights and one thread: the prompt takes many heartbeats of 1 ms.
  test::ServerProcess server({"-m", test::shared_path("models/synth-tiny-F32.gguf"), "-t", "1", "--sse-heartbeat-ms",
                              "1", "--no-prefix-cache"});
  const std::string prompt = test::read_file(test::shared_path("text/tinystories_sample.txt")).substr(0, 700);
  Json body = {{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}};
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(60);
  auto plain = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(plain);
  ASSERT_EQ(plain->status, 200) << plain->body;
  const std::string want = Json::parse(plain->body)["choices"][0]["text"];

  body["stream"] = true;
  auto streamed = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(streamed);
  const std::string& sse = streamed->body;
  EXPECT_EQ(sse.find('\0'), std::string::npos) << "a NUL byte in the event stream";
  EXPECT_NE(sse.find(": keep-alive\n\n"), std::string::npos) << "the prompt was meant to outlast a heartbeat";
  // Every event, as a client splits them: blank-line separated, "data: " first.
  std::string text;
  for (size_t begin = 0, end; (end = sse.find("\n\n", begin)) != std::string::npos; begin = end + 2) {
    const std::string event = sse.substr(begin, end - begin);
    if (event.rfind("data: {", 0) == 0) text += Json::parse(event.substr(6))["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, want);
}

}  // namespace kvlm::sse_heartbeat_test
