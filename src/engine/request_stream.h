// The per-request channel between the engine thread (producer) and the
// caller (consumer): token ids and text deltas as they are sampled, then one
// final event with the finish reason and the request's statistics.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/strong_id.h"
#include "runner/sampler.h"
#include "sched/request.h"

namespace kvlm {

struct RequestStats {
  int32_t num_prompt_tokens = 0;
  int32_t num_cached_tokens = 0;     // prompt tokens served by the prefix cache or KV chunks (not recomputed)
  int32_t num_chunk_reused_tokens = 0;      // of those, KV chunk tokens
  int32_t num_chunk_recomputed_tokens = 0;  // KV chunk tokens found cached but recomputed (the blend)
  int32_t num_generated_tokens = 0;
  int32_t num_preemptions = 0;
  int32_t peak_resident_tokens = 0;  // most KV tokens the request held at once (its budget's effect)
  double queue_s = 0;                // arrival -> first scheduled
  double ttft_s = 0;                 // arrival -> first generated token
  double e2e_s = 0;                  // arrival -> finished
  std::vector<double> itl_s;         // gaps between consecutive generated tokens
  std::string stop_string;           // the stop string that ended the request ("": none did)
  std::vector<float> embedding;      // an embedding request's pooled vector (GenerateRequest::pooling)
};

struct StreamEvent {
  std::vector<int32_t> tokens;       // newly generated token ids
  std::string text;                  // newly complete text (stop strings held back)
  bool finished = false;
  std::optional<FinishReason> finish_reason;  // set with finished
  std::optional<Error> error;        // set if the request failed (finished too)
  // With GenerateRequest::logprobs >= 0: one entry per generated token whose
  // text is part of the output (an end-of-generation token has none).
  std::vector<SampledLogprobs> logprobs;
  // With GenerateRequest::prompt_logprobs: prompt tokens 1.. in order (the
  // first token has no logprob), all in the event of the first token.
  std::vector<SampledLogprobs> prompt_logprobs;
  // The first event of a resumed request (GenerateRequest::num_replayed):
  // `tokens` are the replayed ones and `text` what they release, which the
  // client already has. Never merged with the events after it.
  bool replayed = false;
};

class RequestStream {
 public:
  explicit RequestStream(RequestId id) : id_(id) {}
  RequestId id() const { return id_; }

  // Consumer side. Blocks until an event is available; returns nullopt once
  // the final event has been taken.
  std::optional<StreamEvent> next();
  // Like next() but gives up after `timeout` (returns nullopt; check done()).
  std::optional<StreamEvent> next_for(std::chrono::milliseconds timeout);
  // The next event if one is waiting; never blocks.
  std::optional<StreamEvent> try_next();
  // Called after every event the producer adds (on the producer's side,
  // under the stream's lock: keep it short and never call back into the
  // stream), and once at once if events are waiting: how an event-driven
  // reader learns that there is something to take. Empty: none. Once this
  // returns, the previous listener is never called again.
  void set_listener(std::function<void()> listener);
  bool done() const;
  // Final statistics; complete once the final event has been produced.
  RequestStats stats() const;

  // Producer side (engine thread).
  void push(std::vector<int32_t> tokens, std::string text, std::vector<SampledLogprobs> logprobs = {},
            std::vector<SampledLogprobs> prompt_logprobs = {});
  // The replayed event of a resumed request; call before anything else.
  void push_replayed(std::vector<int32_t> tokens, std::string text);
  void finish(FinishReason reason, RequestStats stats, std::string final_text = {});
  void fail(Error error);

 private:
  std::optional<StreamEvent> pop_locked();
  void notify_locked();
  const RequestId id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
  bool final_produced_ = false;
  bool final_taken_ = false;
  RequestStats stats_;
  std::function<void()> listener_;
};

}  // namespace kvlm
