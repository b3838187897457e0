// /v1/embeddings through the official openai npm client (base64, as it asks
// by default, and floats), kvlm embed, and kvlm router: the same input gives
// the same vector bits alone, in a batch of 16, as floats or base64, from
// the CLI and through a router; bad requests get OpenAI's errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "e2e/router_fleet.h"
#include "support/test_support.h"

namespace kvlm::embeddings_test {

using Json = nlohmann::json;
const std::string kText = "Once upon a time, there was a cat.";

// The float32 bytes of a JSON array of numbers, as hex (what the npm script prints).
std::string hex_of(const Json& values) {
  std::string out;
  for (const Json& v : values) {
    const float f = v.get<float>();
    unsigned char b[4];
    std::memcpy(b, &f, 4);
    for (unsigned char c : b) out += fmt::format("{:02x}", c);
  }
  return out;
}

Json post(int port, const Json& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60);
  auto r = c.Post("/v1/embeddings", body.dump(), "application/json");
  if (!r) return {{"http_status", 0}};
  Json j = Json::parse(r->body, nullptr, false);
  j["http_status"] = r->status;
  return j;
}

TEST(Embeddings, TheOpenAiClientGetsTheSameBitsAloneInABatchAndAsBase64) {
  const std::string script = std::string(KVLM_SOURCE_DIR) + "/tests/npm/openai_embeddings.mjs";
  ASSERT_TRUE(test::have_program("node")) << "node is required (scripts/setup.sh installs it)";
  ASSERT_TRUE(std::filesystem::exists(std::string(KVLM_SOURCE_DIR) + "/tests/npm/node_modules/openai"))
      << "tests/npm/node_modules/openai is missing: run scripts/setup.sh";
  test::ServerProcess server({"-m", test::shared_path("models/stories260K.gguf"), "-t", "1"});
  ASSERT_GT(server.port(), 0);
  auto r = test::run_program({"node", script, server.url()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["alone"]["object"], "list");
  EXPECT_EQ(j["alone"]["model"], "llama");
  EXPECT_EQ(j["alone"]["index"], 0);
  EXPECT_EQ(j["alone"]["dim"], 64);  // stories260K's width
  EXPECT_EQ(j["alone"]["usage"]["prompt_tokens"], 12);
  EXPECT_EQ(j["alone"]["usage"]["total_tokens"], 12);
  const std::string alone = j["alone"]["vector"];
  EXPECT_EQ(alone.size(), 64u * 8);
  EXPECT_EQ(j["float_vector"], alone) << "floats and base64 carry the same bits";
  ASSERT_EQ(j["batch"]["vectors"].size(), 16u);
  EXPECT_EQ(j["batch"]["vectors"][5], alone) << "in a batch of 16";
  EXPECT_NE(j["batch"]["vectors"][4], alone);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(j["batch"]["indices"][i], i);
  EXPECT_EQ(j["tokens_vector"].get<std::string>().size(), 64u * 8);
  EXPECT_EQ(j["dimensions"]["status"], 400);
  EXPECT_EQ(j["dimensions"]["param"], "dimensions");
  EXPECT_EQ(j["unknown_model"]["status"], 404);
  EXPECT_EQ(j["unknown_model"]["code"], "model_not_found");
  EXPECT_EQ(j["empty"]["status"], 400);
  EXPECT_EQ(j["empty"]["param"], "input");

  // kvlm embed computes the same vector.
  auto cli = test::run_kvlm({"embed", "-m", test::shared_path("models/stories260K.gguf"), "-t", "1", "-p", kText});
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  const Json line = Json::parse(cli.out);
  EXPECT_EQ(line["tokens"], 12);
  EXPECT_EQ(hex_of(line["embedding"]), alone);
}

TEST(Embeddings, MeanPoolingLongInputsAndBadBodies) {
  test::ServerProcess last({"-m", test::shared_path("models/stories260K.gguf"), "-t", "1", "--max-model-len", "64"});
  test::ServerProcess mean(
      {"-m", test::shared_path("models/stories260K.gguf"), "-t", "1", "--max-model-len", "64", "--pooling", "mean"});
  const Json body = {{"input", kText}, {"encoding_format", "float"}};
  const Json a = post(last.port(), body), b = post(mean.port(), body);
  ASSERT_EQ(a["http_status"], 200) << a.dump();
  ASSERT_EQ(b["http_status"], 200) << b.dump();
  const Json& va = a["data"][0]["embedding"];
  const Json& vb = b["data"][0]["embedding"];
  EXPECT_NE(va, vb) << "mean and last pooling differ";
  double norm = 0;
  for (const Json& x : vb) norm += x.get<double>() * x.get<double>();
  EXPECT_NEAR(norm, 1.0, 1e-5);
  auto cli = test::run_kvlm({"embed", "-m", test::shared_path("models/stories260K.gguf"), "-t", "1", "--pooling",
                             "mean", "-p", kText});
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_EQ(hex_of(Json::parse(cli.out)["embedding"]), hex_of(vb));

  std::string long_text;
  for (int i = 0; i < 60; ++i) long_text += "the cat sat. ";
  const Json too_long = post(last.port(), {{"input", Json::array({"short", long_text})}});
  EXPECT_EQ(too_long["http_status"], 400);
  EXPECT_EQ(too_long["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(too_long["error"]["param"], "input[1]");
  // Refused by its bytes before tokenizing, or by its tokens: the message says which.
  const std::string huge(64 * 1024, 'a');
  const Json by_bytes = post(last.port(), {{"input", huge}});
  EXPECT_NE(by_bytes["error"]["message"].get<std::string>().find("(65536 bytes)"), std::string::npos) << by_bytes.dump();
  const Json by_tokens = post(last.port(), {{"input", Json(std::vector<int>(100, 5))}});
  EXPECT_NE(by_tokens["error"]["message"].get<std::string>().find("(100 tokens)"), std::string::npos) << by_tokens.dump();
  for (const Json& bad : {Json{{"input", 5}}, Json{{"input", Json::array()}}, Json{{"model", "llama"}},
                          Json{{"input", "x"}, {"encoding_format", "int8"}}, Json{{"input", Json::array({-3})}}}) {
    const Json e = post(last.port(), bad);
    EXPECT_EQ(e["http_status"], 400) << bad.dump();
    EXPECT_TRUE(e["error"]["message"].is_string()) << e.dump();
  }
  // The server goes on, and every block went back to the pool.
  EXPECT_EQ(post(last.port(), body)["data"][0]["embedding"], va);
  EXPECT_EQ(test::server_metric(last, "kvlm_kv_blocks_used"), 0);
}

TEST(Embeddings, ThroughTheRouterAsFromAWorker) {
  test::Fleet fleet({.num_workers = 2});
  const Json body = {{"input", Json::array({kText, "hello"})}, {"encoding_format", "float"}};
  const Json direct = post(fleet.worker_port(0), body);
  ASSERT_EQ(direct["http_status"], 200) << direct.dump();
  for (int i = 0; i < 3; ++i) {  // round-robin: both workers answer
    const Json routed = post(fleet.router_port(), body);
    ASSERT_EQ(routed["http_status"], 200) << routed.dump();
    EXPECT_EQ(routed["data"], direct["data"]);
    EXPECT_EQ(routed["usage"], direct["usage"]);
  }
}

}  // namespace kvlm::embeddings_test
