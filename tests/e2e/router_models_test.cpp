// kvlm router over workers that serve different models: a request goes to
// a worker that serves the model it names (the workers say which in their
// /v1/status), generation and the routes answered by any worker alike.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "router_fleet.h"
#include "support/test_support.h"

namespace kvlm::router_models_test {

using test::Json;

// Until the router knows every worker's models (or 10 s).
bool wait_for_models(int router_port, size_t num_workers) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    const Json status = test::http_get(router_port, "/v1/status").json();
    size_t known = 0;
    for (const Json& w : status.value("workers", Json::array())) known += w.value("models", Json()).is_array();
    if (known == num_workers) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST(RouterModels, EachRequestGoesToAWorkerServingItsModel) {
  const std::string stories = test::shared_path("models/stories260K.gguf");
  const std::string tiny = test::shared_path("models/synth-tiny-F32.gguf");
  test::ServerProcess a({"-m", stories, "--served-model-name", "stories", "-t", "1"});
  test::ServerProcess b({"-m", tiny, "--served-model-name", "tiny", "-t", "1"});
  test::ServerProcess router({"--workers", a.url() + "," + b.url(), "--policy", "round-robin"}, "router");
  ASSERT_TRUE(wait_for_models(router.port(), 2)) << test::http_get(router.port(), "/v1/status").body;
  for (int i = 0; i < 8; ++i) {
    const std::string model = i % 2 ? "tiny" : "stories";
    const Json body = {{"model", model}, {"prompt", "Once upon a time"}, {"max_tokens", 8}, {"temperature", 0}};
    const test::HttpAnswer routed = test::http_post(router.port(), "/v1/completions", body);
    ASSERT_EQ(routed.status, 200) << "request " << i << ": " << routed.body;
    const test::HttpAnswer direct = test::http_post(i % 2 ? b.port() : a.port(), "/v1/completions", body);
    EXPECT_EQ(test::visible_answer(routed.json()), test::visible_answer(direct.json())) << "request " << i;
    // Routes any worker answers go to one serving the model too.
    const test::HttpAnswer tokens = test::http_post(router.port(), "/tokenize", {{"model", model}, {"content", "hi"}});
    EXPECT_EQ(tokens.status, 200) << tokens.body;
    EXPECT_EQ(test::http_get(router.port(), "/v1/models/" + model).status, 200);
  }
}

}  // namespace kvlm::router_models_test
