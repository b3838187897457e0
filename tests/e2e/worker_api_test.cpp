// SGLang's worker API, which its router (SGLang Model Gateway) and vLLM's
// router read from each worker: /server_info names the model the router
// files the worker under and the pool's size, /model_info its kind, and
// /get_load the load its least-load policies compare, read here while an
// overload burst keeps requests waiting.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::worker_api_test {

using Json = nlohmann::json;

Json get_json(const test::ServerProcess& server, const std::string& path, const std::string& key = "") {
  httplib::Client c("127.0.0.1", server.port());
  httplib::Headers headers;
  if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);
  auto r = c.Get(path, headers);
  EXPECT_TRUE(r && r->status == 200) << path << ": " << (r ? r->body : "no answer");
  return r && r->status == 200 ? Json::parse(r->body) : Json();
}

TEST(WorkerApi, ServerAndModelInfoNameTheServedModelAndThePool) {
  test::ServerProcess server({"-m", test::shared_path("models/synth-tiny-F32.gguf"), "-t", "1", "--max-seqs", "3",
                              "--served-model-name", "tiny", "--kv-mem", "4194304"});
  const std::string metrics = test::metrics_text(server);
  const double block_size = test::metric_sample(metrics, "kvlm_kv_block_size_tokens");
  const double blocks = test::metric_sample(metrics, "kvlm_kv_blocks_capacity");
  ASSERT_GT(block_size, 0);
  for (const char* path : {"/server_info", "/get_server_info"}) {
    const Json info = get_json(server, path);
    EXPECT_EQ(info.value("served_model_name", ""), "tiny") << path;
    EXPECT_EQ(info.value("dp_size", 0), 1);
    EXPECT_EQ(info.value("page_size", 0), block_size);
    EXPECT_EQ(info.value("max_total_tokens", 0), block_size * blocks);
    EXPECT_EQ(info.value("max_running_requests", 0), 3);
    EXPECT_GT(info.value("context_length", 0), 0);
  }
  for (const char* path : {"/model_info", "/get_model_info"}) {
    const Json info = get_json(server, path);
    EXPECT_EQ(info.value("model_type", ""), "llama") << path;
    EXPECT_EQ(info.value("is_generation", false), true);
  }
}

TEST(WorkerApi, GetLoadCountsWaitingAndRunningRequestsUnderABurst) {
  test::ServerProcess server({"-m", test::shared_path("models/synth-tiny-F32.gguf"), "-t", "1", "--max-seqs", "2"});
  const Json idle = get_json(server, "/get_load");
  ASSERT_TRUE(idle.is_array() && idle.size() == 1) << idle.dump();
  EXPECT_EQ(idle[0].value("dp_rank", -1), 0);
  EXPECT_EQ(idle[0].value("num_reqs", -1), 0);
  EXPECT_EQ(idle[0].value("num_tokens", -1), 0);
  std::vector<std::thread> burst = test::completion_burst(server, 6, 48);
  // Two run, the rest wait: poll until a reading sees both.
  Json load;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    load = get_json(server, "/get_load");
    if (load.is_array() && load[0].value("num_waiting_reqs", 0) > 0 && load[0].value("num_tokens", 0) > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GT(load[0].value("num_waiting_reqs", 0), 0) << load.dump();
  EXPECT_GT(load[0].value("num_reqs", 0), load[0].value("num_waiting_reqs", 0)) << "a request runs beside those waiting";
  EXPECT_LE(load[0].value("num_reqs", 0), 6);
  const int64_t page = get_json(server, "/server_info").value("page_size", 1);
  EXPECT_EQ(load[0].value("num_tokens", 0) % page, 0) << "whole KV blocks";
  for (std::thread& t : burst) t.join();
  EXPECT_EQ(get_json(server, "/get_load")[0].value("num_reqs", -1), 0);
}

// cached_tokens of a greedy completion of `prompt`.
int64_t cached_tokens(const test::ServerProcess& server, const std::string& prompt) {
  httplib::Client c("127.0.0.1", server.port());
  const Json body = {{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}};
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
  if (!r || r->status != 200) return -1;
  return Json::parse(r->body)["usage"]["prompt_tokens_details"].value("cached_tokens", -1);
}

// How many hashes the KV events' opening snapshot lists (what a router
// starts from), read off the stream's first line.
size_t snapshot_size(const test::ServerProcess& server) {
  httplib::Client c("127.0.0.1", server.port());
  std::string text;
  c.Get("/v1/kv/events", [&](const char* data, size_t n) {
    text.append(data, n);
    return text.find('\n', text.find("\"snapshot\"")) == std::string::npos;  // stop after the snapshot's line
  });
  const size_t at = text.find("data: ");
  const size_t end = text.find('\n', at);
  if (at == std::string::npos || end == std::string::npos) {
    ADD_FAILURE() << "no snapshot: " << text.substr(0, 300);
    return 0;
  }
  return Json::parse(text.substr(at + 6, end - at - 6))["hashes"].size();
}

TEST(WorkerApi, FlushCacheEmptiesThePrefixCacheWhenIdle) {
  test::ServerProcess server({"-m", test::shared_path("models/synth-tiny-F32.gguf"), "-t", "1", "--kv-events"});
  std::string prompt;
  for (int i = 0; i < 12; ++i) prompt += "Once upon a time there was a cat. ";
  EXPECT_EQ(cached_tokens(server, prompt), 0);
  ASSERT_GT(cached_tokens(server, prompt), 0) << "the second time comes from the prefix cache";
  httplib::Client c("127.0.0.1", server.port());
  ASSERT_GT(snapshot_size(server), 0);
  for (const char* path : {"/flush_cache", "/reset_prefix_cache"}) {
    auto r = c.Post(path, "", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << path << ": " << r->body;
    EXPECT_EQ(snapshot_size(server), 0) << "a router's new reader of the KV events sees none held";
    EXPECT_EQ(cached_tokens(server, prompt), 0) << "after " << path << " nothing is cached";
    EXPECT_GT(cached_tokens(server, prompt), 0) << "and the cache fills again";
  }
}

// A request that holds blocks when the flush is served: 400, nothing
// forgotten. The request may end before the flush reaches the engine (then
// 200 is right), so it is tried until one flush lands while it runs.
TEST(WorkerApi, FlushCacheIsRefusedWhileRequestsHoldBlocks) {
  test::ServerProcess server({"-m", test::shared_path("models/synth-tiny-F32.gguf"), "-t", "1"});
  bool refused = false;
  for (int attempt = 0; attempt < 20 && !refused; ++attempt) {
    std::atomic<bool> started{false};
    std::thread stream([&] {
      httplib::Client c("127.0.0.1", server.port());
      c.set_read_timeout(60);
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.headers = {{"Content-Type", "application/json"}};
      req.body = R"({"prompt":"Once upon a time","max_tokens":480,"ignore_eos":true,"stream":true})";
      req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
        started = true;
        return true;
      };
      c.send(req);
    });
    while (!started) std::this_thread::sleep_for(std::chrono::microseconds(200));
    httplib::Client c("127.0.0.1", server.port());
    auto r = c.Post("/flush_cache", "", "application/json");
    ASSERT_TRUE(r);
    if (r->status == 400) {
      refused = true;
      EXPECT_NE(r->body.find("requests hold KV blocks"), std::string::npos) << r->body;
    } else {
      EXPECT_EQ(r->status, 200) << r->body;
    }
    stream.join();
  }
  EXPECT_TRUE(refused) << "no flush landed while a request ran in 20 tries";
}

TEST(WorkerApi, UnderTheApiKeys) {
  test::ServerProcess server({"-m", test::shared_path("models/synth-tiny-F32.gguf"), "-t", "1", "--api-key", "sk-w"});
  httplib::Client c("127.0.0.1", server.port());
  for (const char* path : {"/server_info", "/get_server_info", "/model_info", "/get_model_info", "/get_load"}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << path;
    EXPECT_EQ(get_json(server, path, "sk-w").is_null(), false) << path;
  }
}

}  // namespace kvlm::worker_api_test
