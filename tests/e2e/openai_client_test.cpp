// The official openai npm client (tests/npm, installed by scripts/setup.sh)
// against `kvlm serve`: models, completions, chat, streamed chat with usage,
// n = 3 choices, and an error it can read.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::openai_client_test {

TEST(OpenAiClient, SpeaksToKvlmServe) {
  const std::string script = std::string(KVLM_SOURCE_DIR) + "/tests/npm/openai_client.mjs";
  ASSERT_TRUE(test::have_program("node")) << "node is required (scripts/setup.sh installs it)";
  ASSERT_TRUE(std::filesystem::exists(std::string(KVLM_SOURCE_DIR) + "/tests/npm/node_modules/openai"))
      << "tests/npm/node_modules/openai is missing: run scripts/setup.sh (npm ci --prefix tests/npm)";
  test::ServerProcess server({"-m", test::shared_path("models/stories260K.gguf"), "--chat-template-file",
                              test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"), "-t", "1"});
  ASSERT_GT(server.port(), 0);
  auto r = test::run_program({"node", script, server.url()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["models"], nlohmann::json::array({"llama"}));
  EXPECT_EQ(j["completion"]["text"], ", there was a little girl named Lily. She loved to play outsid");
  EXPECT_EQ(j["completion"]["finish_reason"], "length");
  EXPECT_EQ(j["completion"]["usage"]["completion_tokens"], 20);
  EXPECT_EQ(j["chat"]["role"], "assistant");
  EXPECT_FALSE(j["chat"]["content"].get<std::string>().empty());
  // Streaming and non-streaming chat agree, and the usage chunk arrives.
  EXPECT_EQ(j["chat_stream"]["content"], j["chat"]["content"]);
  EXPECT_EQ(j["chat_stream"]["finish_reason"], "length");
  EXPECT_EQ(j["chat_stream"]["usage"]["completion_tokens"], 16);
  EXPECT_EQ(j["chat_stream"]["usage"]["prompt_tokens"], j["chat"]["usage"]["prompt_tokens"]);
  // The second chat request reused the first one's prompt blocks.
  EXPECT_GT(j["chat_stream"]["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
  // n: 3 gives three choices, indexed 0..2 (choices_test.cpp checks each
  // against the single request with seed + i).
  EXPECT_EQ(j["n3"]["indices"], nlohmann::json::array({0, 1, 2}));
  ASSERT_EQ(j["n3"]["texts"].size(), 3u);
  for (const auto& t : j["n3"]["texts"]) EXPECT_FALSE(t.get<std::string>().empty());
  EXPECT_EQ(j["n3"]["usage"]["completion_tokens"], 36);
  EXPECT_EQ(j["n3"]["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(j["error"]["status"], 400);
  EXPECT_EQ(j["error"]["param"], "temperature");
}

}  // namespace kvlm::openai_client_test
