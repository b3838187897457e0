// The load generator behind `kvlm bench serve`: streaming /v1/completions
// requests to any OpenAI-compatible server over HTTP, with the time of every
// chunk, so TTFT, inter-token latency and end-to-end latency are measured as
// a client sees them.
#pragma once

#include <cstddef>
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
  // usage.prompt_tokens_details.cached_tokens: prompt tokens the server's
  // prefix cache served; nullopt where it does not say (vLLM without
  // --enable-prompt-tokens-details, for one).
  std::optional<int64_t> num_cached_tokens;
  int64_t num_generated_tokens = 0;  // from the usage chunk, else the chunks with text
  int64_t num_text_chunks = 0;
  std::string text;                // the generated text, chunks joined (multi-turn workloads send it back)
};

struct LoadResult {
  std::vector<RequestResult> requests;  // in request order
  double wall_s = 0;
};

// One request of a run: where its result goes in LoadResult::requests.
struct LoadRequest {
  size_t slot = 0;
  std::string prompt;
  std::string user;  // OpenAI's `user` (a conversation's; a router's session key); "" for none
};

// Where a run's requests come from, in the order they are sent. Called from
// several threads at once: implementations lock what they share.
class RequestSource {
 public:
  virtual ~RequestSource() = default;
  // How many requests the run sends in all (the slots are 0 .. this - 1).
  virtual size_t num_requests() const = 0;
  // The next request to send, each slot once; nullopt when none is left.
  // May block until an earlier request's finish() makes one ready.
  virtual std::optional<LoadRequest> next() = 0;
  // The request in `slot` ended with `result` (ok or not).
  virtual void finish(size_t slot, const RequestResult& result) = 0;
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

// Sends every request of `source` and waits for all: closed loop (at most
// options.concurrency in flight) or, with options.rate > 0, open loop (one
// request an arrival; an arrival that finds none ready waits for one, so
// later arrivals may come in a burst). Failures of single requests are
// results, not exceptions.
LoadResult run_load(const LoadOptions& options, RequestSource& source);
// The same over a fixed list: request i sends prompts[i].
LoadResult run_load(const LoadOptions& options, const std::vector<std::string>& prompts);

}  // namespace kvlm::apps
