// The load generator behind `kvlm bench serve`: streaming /v1/completions
// requests to any OpenAI-compatible server over HTTP, with the time of every
// chunk, so TTFT, inter-token latency and end-to-end latency are measured as
// a client sees them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvlm::apps {

struct LoadOptions {
  std::string url;           // http://host:port, with or without a trailing /v1
  std::string api_key;       // sent as "Authorization: Bearer KEY" when set
  std::string model;         // the "model" field; empty: none is sent
  int num_requests = 32;
  int concurrency = 8;       // closed loop: this many requests in flight
  double rate = 0;           // > 0: open loop, Poisson arrivals at this many requests/s
  int gen_len = 64;          // max_tokens, with ignore_eos so every request generates it all
  double timeout_s = 600;    // per request
  uint64_t seed = 1;         // arrival times under --rate
};

struct RequestResult {
  bool ok = false;
  std::string error;               // why not ok: HTTP status and message, a transport error, a cut stream
  double ttft_s = 0;               // send -> first chunk with text
  double e2e_s = 0;                // send -> [DONE]
  std::vector<double> itl_s;       // gaps between consecutive chunks with text
  int64_t num_prompt_tokens = 0;   // from the usage chunk (0 if the server sends none)
  int64_t num_generated_tokens = 0;  // from the usage chunk, else the chunks with text
  int64_t num_text_chunks = 0;
};

struct LoadResult {
  std::vector<RequestResult> requests;  // in request order
  double wall_s = 0;
};

// Prompts of `prompt_len` words each; the first `shared_prefix` words are
// the same in all. Words come from `dataset_path` (its lines in order,
// request i starting at line i) or, without one, are drawn from a list of
// common English words with `seed`. Throws Error(kNotFound) for a missing
// dataset, Error(kInvalidArgument) for one without words.
std::vector<std::string> make_prompts(int num_prompts, int prompt_len, int shared_prefix,
                                      const std::string& dataset_path, uint64_t seed);

// Tokens per word of `sample` as the server's POST /tokenize counts them
// (kvlm and llama.cpp's {"content": ...} form), or nullopt when the server
// has no such route: then a prompt's length in words is all we know.
std::optional<double> tokens_per_word(const LoadOptions& options, const std::string& sample);

// The first model id of GET /v1/models, or "" when the server lists none.
std::string first_model(const LoadOptions& options);

// Sends one request per prompt and waits for all. Failures of single
// requests are results, not exceptions.
LoadResult run_load(const LoadOptions& options, const std::vector<std::string>& prompts);

}  // namespace kvlm::apps
