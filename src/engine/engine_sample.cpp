// Sampling a step's batch on the compute threads (engine.h, sample_batch).
//
// Every sequence's rows are independent: its own logits rows, its own Sampler
// (and random stream), its own grammar matcher and scratch. So sequences are
// split over the compute threads, each writing only its own result slot, and
// the engine thread applies the slots afterwards in the order of out.seqs —
// the order the serial loop had. The tokens are the same whatever the thread
// count or split; only the time to reach them changes.
#include <algorithm>
#include <exception>
#include <new>

#include <fmt/format.h>

#include "backend/thread_pool.h"
#include "backend/threads.h"
#include "constrain/token_mask.h"
#include "engine/engine.h"
#include "engine/engine_live.h"
#include "model/model.h"
#include "sched/scheduler.h"

namespace kvlm {

struct Engine::SeqSample {
  // Filled by the engine thread before the fork.
  Live* live = nullptr;
  const Request* request = nullptr;
  size_t first_row = 0;  // of this sequence's rows in the step's logits
  // Filled by the one compute thread that runs this sequence.
  std::vector<SampledLogprobs> prompt_logprobs;  // to append to live->prompt_logprobs
  int32_t next_prompt_position = 0;
  std::exception_ptr prompt_error;  // fails the whole step, as it did serially
  int32_t token = 0;  // a failed request's placeholder: never computed, ended in postprocess
  SampledLogprobs logprobs;
  std::exception_ptr error;  // sampling threw: fails this request alone
};

namespace {

// The message a request whose sampling threw ends with. What is no
// std::exception is rethrown: it fails the step, as it always did.
std::string sampling_failure(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::bad_alloc&) {
    return "out of memory while generating this request";
  } catch (const std::exception& e) {
    return fmt::format("generating this request failed: {}", e.what());
  }
}

int32_t num_rows(const ScheduledSeq& s) { return s.num_prompt_logits + (s.sample ? 1 : 0); }

}  // namespace

Engine::SampledBatch Engine::sample_batch(const SchedulerOutput& out, std::span<const float> logits) {
  const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
  std::vector<SeqSample> slots(out.seqs.size());
  std::vector<size_t> work;  // indices into out.seqs of sequences with rows
  size_t row = 0;
  for (size_t i = 0; i < out.seqs.size(); ++i) {
    const ScheduledSeq& s = out.seqs[i];
    slots[i].live = live_.at(s.id).get();
    slots[i].request = scheduler_->find(s.id);
    slots[i].first_row = row;
    row += static_cast<size_t>(num_rows(s));
    if (num_rows(s) == 0) continue;
    work.push_back(i);
    // The trie is shared by every constrained request: built here, before the fork.
    if (s.sample && slots[i].live->matcher && !token_index_)
      token_index_ = constrain::TokenIndex::from_tokenizer(*tokenizer_);
  }
  // Tasks of whole sequences, about sample_logits_per_task logits each: a
  // handful of rows over a small vocabulary is faster without the fork.
  const int64_t num_logits = static_cast<int64_t>(row * vocab);
  const int64_t num_tasks = std::clamp<int64_t>(num_logits / std::max<int64_t>(config_.sample_logits_per_task, 1), 1,
                                                std::min<int64_t>(static_cast<int64_t>(work.size()), num_threads() * 4));
  const int64_t num_work = static_cast<int64_t>(work.size());
  parallel_for(num_tasks, [&](int64_t task, int) {
    for (int64_t k = task * num_work / num_tasks; k < (task + 1) * num_work / num_tasks; ++k)
      sample_seq(out.seqs[work[k]], logits, slots[work[k]]);
  });

  SampledBatch batch;
  for (size_t i = 0; i < out.seqs.size(); ++i) {
    const ScheduledSeq& s = out.seqs[i];
    SeqSample& slot = slots[i];
    if (slot.prompt_error) std::rethrow_exception(slot.prompt_error);
    if (!slot.prompt_logprobs.empty()) {
      for (SampledLogprobs& lp : slot.prompt_logprobs) slot.live->prompt_logprobs.push_back(std::move(lp));
      slot.live->next_prompt_position = slot.next_prompt_position;
    }
    if (!s.sample) continue;
    if (slot.error) batch.failed.emplace_back(s.id, sampling_failure(slot.error));
    batch.tokens.push_back(slot.token);
    batch.logprobs.push_back(std::move(slot.logprobs));
  }
  return batch;
}

// On a compute thread: reads the step's logits and this sequence's Request,
// writes only its Live's sampler, matcher and scratch, and `slot`. Throws
// nothing: a failure is kept in the slot for the engine thread.
void Engine::sample_seq(const ScheduledSeq& s, std::span<const float> logits, SeqSample& slot) {
  const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
  auto row_logits = [&](size_t r) { return logits.subspan((slot.first_row + r) * vocab, vocab); };
  Live& live = *slot.live;
  const Request& r = *slot.request;
  try {
    slot.next_prompt_position = live.next_prompt_position;
    for (int32_t i = 0; i < s.num_prompt_logits; ++i) {
      const int32_t pos = s.num_computed + i;  // its logits predict token pos + 1
      // Rows past the prompt exist for entropy policies only.
      if (!r.prompt_logits || pos >= r.num_prompt_tokens - 1 || pos != slot.next_prompt_position) continue;
      slot.prompt_logprobs.push_back(
          token_logprobs(row_logits(static_cast<size_t>(i)), r.tokens[pos + 1], std::max(live.logprobs, 0)));
      slot.next_prompt_position = pos + 1;
    }
  } catch (...) {
    slot.prompt_error = std::current_exception();
    return;
  }
  if (!s.sample) return;
  try {
    const std::span<const float> row = row_logits(static_cast<size_t>(s.num_prompt_logits));
    if (config_.fault_hook) config_.fault_hook(s.id, live.stats.num_generated_tokens);
    const std::span<const float> draw_from = live.matcher ? constrained_logits(live, row) : row;
    slot.token = live.sampler.sample(draw_from, r.tokens);
    if (live.logprobs >= 0) slot.logprobs = token_logprobs(row, slot.token, live.logprobs);
  } catch (...) {
    slot.error = std::current_exception();
  }
}

}  // namespace kvlm
