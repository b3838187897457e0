// The chat page in headless Chromium (tests/npm/web_chat.mjs drives it over
// the DevTools protocol): a typed message gets a streamed reply with its
// stats, the live panel fills from /v1/status, Stop cancels on the server,
// the API key is asked for once; a model without a chat template gets
// plain completion.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "e2e/router_fleet.h"
#include "support/test_support.h"

namespace kvlm::web_chat_test {

using Json = nlohmann::json;

std::string script() { return std::string(KVLM_SOURCE_DIR) + "/tests/npm/web_chat.mjs"; }

void require_tools() {
  ASSERT_TRUE(test::have_program("node")) << "node is required (scripts/setup.sh installs it)";
  ASSERT_TRUE(test::have_program("chromium")) << "chromium is required (scripts/setup.sh installs it)";
  ASSERT_TRUE(std::filesystem::exists(std::string(KVLM_SOURCE_DIR) + "/tests/npm/node_modules/ws"))
      << "tests/npm/node_modules/ws is missing: run scripts/setup.sh (npm ci --prefix tests/npm)";
}

TEST(WebChat, StreamsRepliesWithTheirStats) {
  require_tools();
  test::ServerProcess server({"-m", test::shared_path("models/stories260K.gguf"), "--chat-template-file",
                              test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"), "-t", "1",
                              "--api-key", "page-key"});
  ASSERT_GT(server.port(), 0);
  // KVLM_WEB_SCREENSHOT=docs/web-chat.png keeps the picture (how docs/web-chat.png is made).
  const char* keep = std::getenv("KVLM_WEB_SCREENSHOT");
  const std::string shot = keep ? keep : test::temp_dir() + "/web-chat.png";
  auto r = test::run_program({"node", script(), "--url", server.url() + "/", "--key", "page-key", "--screenshot", shot,
                              "--message", "Tell me a story about a cat.", "--follow-up", "And then?"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_NE(j["header"].get<std::string>().find("model llama"), std::string::npos) << r.out;
  EXPECT_NE(j["header"].get<std::string>().find("context 2048 tokens"), std::string::npos) << r.out;
  EXPECT_NE(j["header"].get<std::string>().find("chat"), std::string::npos) << r.out;
  // The reply streamed in, and its stats came from the usage chunk.
  EXPECT_FALSE(j["reply"].get<std::string>().empty()) << r.out;
  EXPECT_EQ(j["messages"], 4);  // two turns
  const Json& st = j["stats"];
  EXPECT_EQ(st["completionTokens"], "24") << r.out;  // max tokens set on the page (greedy, stories260K runs on)
  EXPECT_GT(std::stoi(st["promptTokens"].get<std::string>()), 10) << r.out;
  EXPECT_NE(st["ttftMs"], "?");
  EXPECT_NE(st["tokensPerS"], "?");
  EXPECT_EQ(st["cachedTokens"], "0");
  EXPECT_NE(j["stats_text"].get<std::string>().find("tokens/s"), std::string::npos);
  // The second turn re-sends the first: its prompt starts in the prefix cache.
  EXPECT_GT(std::stoi(j["follow_up_stats"]["cachedTokens"].get<std::string>()), 0) << r.out;
  EXPECT_GT(std::stoi(j["follow_up_stats"]["promptTokens"].get<std::string>()),
            std::stoi(st["promptTokens"].get<std::string>()));
  // The live panel shows the pool and the cache's hits.
  EXPECT_NE(j["panel"]["kv"].get<std::string>().find(" / 8192"), std::string::npos) << r.out;
  EXPECT_NE(j["panel"]["hits"], "0.0 %") << r.out;
  // The key was asked for once, and a reload did not ask again.
  EXPECT_EQ(j["dialogs"], Json::array({"prompt"})) << r.out;
  EXPECT_EQ(j["dialogs_after_reload"], 1);
  EXPECT_EQ(test::read_file(shot).substr(1, 3), "PNG");
}

// A model slow enough and a context long enough (4096) that a 3,500-token
// reply is still running when Stop is pressed. The shared llama-2-tiny-random
// was not: a Zen 5 core generated its 3,500 tokens before the click landed.
// This one reads an 83 MiB F32 embedding table as its output head every
// token (about 100-350 tokens/s on one thread), so the reply would take
// seconds.
std::string make_slow_model() {
  const std::string path = test::temp_dir() + "/slow-f32.gguf";
  const auto r = test::run_kvlm({"make-model", "--type", "F32", "--dim", "512", "--layers", "2", "--heads", "8",
                                 "--ffn", "1024", "--ctx", "4096", "--tied", "--vocab-from",
                                 test::shared_path("vocab/ggml-vocab-llama-spm.gguf"), "-o", path, "-t", "1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return path;
}

TEST(WebChat, StopCancelsTheRequestOnTheServer) {
  require_tools();
  test::ServerProcess server({"-m", make_slow_model(), "--chat-template-file",
                              test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"), "-t", "1"});
  ASSERT_GT(server.port(), 0);
  auto r = test::run_program({"node", script(), "--url", server.url() + "/", "--stop", "3500"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["stopped"]["stopped"], "true") << r.out;  // the page says so
  // The server cancelled it: an abort, every block back, far fewer tokens than asked.
  const std::string name = "{model_name=\"random llama\"";  // the file's general.name
  std::string text;
  for (int i = 0; i < 300; ++i) {
    text = test::run_program({"curl", "-sS", server.url() + "/metrics"}).out;
    if (test::metric_sample(text, "kvlm_requests_running" + name + "}") == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GE(test::metric_sample(text, "kvlm_requests_finished_total" + name + ",finished_reason=\"abort\"}"), 1) << text;
  EXPECT_EQ(test::metric_sample(text, "kvlm_kv_blocks_used" + name + "}"), 0) << text;
  EXPECT_LT(test::metric_sample(text, "kvlm_generation_tokens_total" + name + "}"), 3500) << text;
}

TEST(WebChat, ModelWithoutTemplateGetsPlainCompletion) {
  require_tools();
  test::ServerProcess server({"-m", test::shared_path("models/stories260K.gguf"), "-t", "1"});
  ASSERT_GT(server.port(), 0);
  auto r = test::run_program({"node", script(), "--url", server.url() + "/", "--message", "Once upon a time"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_NE(j["header"].get<std::string>().find("completion (no chat template)"), std::string::npos) << r.out;
  // Greedy continuation of the prompt, as the CompletionMatchesTheGreedyGolden server test has it.
  EXPECT_EQ(j["reply"].get<std::string>().rfind(", there was a little girl named Lily.", 0), 0u) << r.out;
  EXPECT_EQ(j["stats"]["completionTokens"], "24");
  EXPECT_EQ(j["dialogs"], Json::array());
}

}  // namespace kvlm::web_chat_test

namespace kvlm::web_chat_test {

// The page as kvlm router serves it, over two workers: the same page, its
// header from the workers' model, a streamed reply, a follow-up routed back
// to the worker that holds its first turn (cached tokens), the panel summed
// over the fleet.
TEST(WebChat, WorksThroughTheRouter) {
  require_tools();
  test::Fleet fleet({.num_workers = 2, .worker_args = {"--api-key", "page-key"},
                     .router_args = {"--api-key", "page-key"}});
  auto r = test::run_program({"node", script(), "--url", "http://127.0.0.1:" + std::to_string(fleet.router_port()) + "/",
                              "--key", "page-key", "--screenshot", test::temp_dir() + "/web-chat-router.png",
                              "--message", "Tell me a story about a cat.", "--follow-up", "And then?"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_NE(j["header"].get<std::string>().find("model llama"), std::string::npos) << r.out;
  EXPECT_NE(j["header"].get<std::string>().find("chat"), std::string::npos) << r.out;
  EXPECT_FALSE(j["reply"].get<std::string>().empty()) << r.out;
  EXPECT_EQ(j["stats"]["completionTokens"], "24") << r.out;
  EXPECT_GT(std::stoi(j["follow_up_stats"]["cachedTokens"].get<std::string>()), 0) << r.out;
  EXPECT_NE(j["panel"]["kv"].get<std::string>().find(" / 16384"), std::string::npos) << "two pools: " << r.out;
}

}  // namespace kvlm::web_chat_test
