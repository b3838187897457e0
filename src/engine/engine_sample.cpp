// Sampling a step's batch on the compute threads (engine.h, sample_batch).
//
// Every sequence's rows are independent: its own logits rows, its own Sampler
// (and random stream), its own grammar matcher and scratch. So sequences are
// split over the compute threads, each writing only its own result slot, and
// the engine thread applies the slots afterwards in the order of out.seqs —
// the order the serial loop had. The tokens are the same whatever the thread
// count or split; only the time to reach them changes.
#include <algorithm>
#include <deque>
#include <exception>
#include <new>

#include <fmt/format.h>

#include "backend/thread_pool.h"
#include "backend/threads.h"
#include "engine/engine.h"
#include "engine/engine_live.h"
#include "engine/output_processor.h"
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
  // Its sampled tokens: one, or with proposals the accepted ones and the one
  // drawn after them (verify_seq). A failed request's: one placeholder,
  // never computed, ended in postprocess.
  std::vector<int32_t> tokens;
  std::vector<SampledLogprobs> logprobs;  // aligned with tokens
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

int32_t num_rows(const ScheduledSeq& s) { return s.num_prompt_logits + (s.sample ? 1 + s.num_spec_tokens : 0); }

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
    // What every constrained request shares is built here, before the fork.
    if (s.sample) output_->prepare(slots[i].live->output);
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
    if (slot.error) {
      batch.failed.emplace_back(s.id, sampling_failure(slot.error));
      slot.tokens.assign(1, 0);
      slot.logprobs.assign(1, {});
    }
    batch.num_tokens.push_back(static_cast<int32_t>(slot.tokens.size()));
    batch.tokens.insert(batch.tokens.end(), slot.tokens.begin(), slot.tokens.end());
    for (SampledLogprobs& lp : slot.logprobs) batch.logprobs.push_back(std::move(lp));
  }
  return batch;
}

// On a compute thread: reads the step's logits and this sequence's Request,
// writes only its Live's sampler and output state, and `slot`. Throws
// nothing: a failure is kept in the slot for the engine thread.
void Engine::sample_seq(const ScheduledSeq& s, std::span<const float> logits, SeqSample& slot) {
  const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
  auto row_logits = [&](size_t r) { return logits.subspan((slot.first_row + r) * vocab, vocab); };
  Live& live = *slot.live;
  const Request& r = *slot.request;
  try {
    slot.next_prompt_position = live.next_prompt_position;
    for (int32_t i = 0; i < s.num_prompt_logits; ++i) {
      const int32_t pos = s.row_position(s.first_prompt_logit_row + i);  // its logits predict token pos + 1
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
    if (s.num_spec_tokens > 0) return verify_seq(s, logits, slot);
    const std::span<const float> row = row_logits(static_cast<size_t>(s.num_prompt_logits));
    if (config_.fault_hook) config_.fault_hook(s.id, live.stats.num_generated_tokens);
    int32_t token = 0;
    std::deque<int32_t>& forced = live.output.forced;
    if (forced.empty()) {
      token = live.sampler.sample(output_->draw_logits(live.output, row), r.tokens);
    } else {
      // A forced token (a thinking section's marker) draws as a sampled one
      // does: a resumed request skips one draw per token it replays.
      live.sampler.sample(row, r.tokens);
      token = forced.front();
      forced.pop_front();
    }
    slot.tokens.push_back(token);
    slot.logprobs.emplace_back();
    if (live.logprobs >= 0) slot.logprobs.back() = token_logprobs(row, token, live.logprobs);
  } catch (...) {
    slot.error = std::current_exception();
  }
}

// Speculative decoding: rows 0..k of the sequence's sampling rows follow its
// last token and each of its k proposals. Row i is sampled as ordinary
// decoding samples it (grammar mask, penalties over the tokens before it,
// the same sampler and random stream), with proposal i tried first
// (Sampler::sample's draft); the first token that differs from its proposal
// ends the run. So the tokens are those decoding without proposals gives
// (greedy), or follow its distribution (sampling). The grammar is advanced
// here past each token a later row depends on (SeqOutput::num_grammar_advanced).
void Engine::verify_seq(const ScheduledSeq& s, std::span<const float> logits, SeqSample& slot) {
  const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
  Live& live = *slot.live;
  const Request& r = *slot.request;
  const int32_t k = s.num_spec_tokens;
  const std::span<const int32_t> drafts = std::span<const int32_t>(s.new_tokens).last(static_cast<size_t>(k));
  std::vector<int32_t> history(r.tokens);  // the penalties' view before each row
  SeqOutput& output = live.output;
  output.num_grammar_advanced = 0;
  output.grammar_done = false;
  for (int32_t i = 0; i <= k; ++i) {
    const auto row = logits.subspan((slot.first_row + static_cast<size_t>(s.num_prompt_logits + i)) * vocab, vocab);
    if (config_.fault_hook) config_.fault_hook(s.id, live.stats.num_generated_tokens + i);
    const std::span<const float> draw_from = output_->draw_logits(output, row);  // no thinking section here
    const std::optional<int32_t> draft = i < k ? std::optional<int32_t>(drafts[i]) : std::nullopt;
    const int32_t token = live.sampler.sample(draw_from, history, draft);
    slot.tokens.push_back(token);
    slot.logprobs.emplace_back();
    if (live.logprobs >= 0) slot.logprobs.back() = token_logprobs(row, token, live.logprobs);
    if (!draft || token != *draft) return;
    // A token that ends the request ends the run: no later row is output.
    const auto& stops = r.stop_token_ids;
    if (std::find(stops.begin(), stops.end(), token) != stops.end()) return;
    if (output.matcher) {
      ++output.num_grammar_advanced;
      if (output_->advance(output, token)) {
        output.grammar_done = true;
        return;
      }
    }
    history.push_back(token);
  }
}

}  // namespace kvlm
