// Helpers of the KV tier server tests (kv_tier_*_test.cpp): a long prompt on
// stories260K, one greedy completion with its cached tokens, and waiting
// for the tier writes that go behind.
#pragma once

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::test {

inline std::string tier_model() { return shared_path("models/stories260K.gguf"); }

// About 600 tokens of story (stories260K's vocabulary is small): ~37 full blocks of 16.
inline std::string long_prompt(int variant = 0) {
  std::string text = read_file(shared_path("text/tinystories_sample.txt"));
  return text.substr(static_cast<size_t>(variant) * 1500, 1200);
}

struct Answer {
  int status = 0;
  std::string text;
  int cached = -1;
  int prompt_tokens = 0;
  double seconds = 0;  // the request's wall time
  int full_blocks() const { return (prompt_tokens - 1) / 16; }  // what a hit can cover
};

// A greedy completion of `prompt` (cache_salt `salt` unless empty).
inline Answer complete(const ServerProcess& s, const std::string& prompt, const std::string& salt = "",
                       int max_tokens = 12) {
  httplib::Client c("127.0.0.1", s.port());
  c.set_read_timeout(60);
  nlohmann::json body = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
  if (!salt.empty()) body["cache_salt"] = salt;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  Answer a;
  a.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r) return a;
  a.status = r->status;
  const nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  if (a.status == 200) {
    a.text = j["choices"][0]["text"];
    a.cached = j["usage"]["prompt_tokens_details"]["cached_tokens"];
    a.prompt_tokens = j["usage"]["prompt_tokens"];
  }
  return a;
}

// A tier series of the stories260K server ("llama").
inline std::string tier_series(const std::string& name, const std::string& tier, const std::string& more = "") {
  return name + R"({model_name="llama",tier=")" + tier + "\"" + more + "}";
}

// Writes go behind on the I/O thread: wait (bounded) until `n` blocks are down.
inline void wait_written(const ServerProcess& s, const std::string& tier, double n) {
  const std::string series = tier_series("kvlm_kv_tier_blocks_written_total", tier);
  for (int i = 0; i < 500 && server_metric(s, series) < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GE(server_metric(s, series), n) << "the " << tier << " tier never got the blocks";
}

inline std::vector<std::string> server_args(std::vector<std::string> tier_flags) {
  std::vector<std::string> a = {"-m", tier_model(), "-t", "1"};
  a.insert(a.end(), tier_flags.begin(), tier_flags.end());
  return a;
}

// The answer with no tier and an empty cache.
inline Answer cold(const std::string& prompt) {
  ServerProcess s(server_args({"--no-prefix-cache"}));
  return complete(s, prompt);
}

}  // namespace kvlm::test
