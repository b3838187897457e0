// Requests into the engine: validation, admission (a tier lookup or the
// scheduler), and n choices of one prompt that share its KV (engine.h).
#include <algorithm>

#include "common/error.h"
#include "engine/engine.h"
#include "engine/engine_live.h"
#include "kv/block_hash.h"
#include "model/lora.h"
#include "model/model.h"
#include "runner/model_runner.h"
#include "sched/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {

uint64_t request_extra_key(const GenerateRequest& g) {
  // An adapter's blocks hold its own K/V: hashed apart from the base's and
  // every other adapter's (an identical adapter loaded again shares them).
  return g.lora ? adapter_extra_key(g.lora->identity, g.cache_salt) : g.cache_salt;
}

std::unique_ptr<Request> Engine::make_request(GenerateRequest& g, KvBudget& budget) const {
  const int32_t num_prompt = static_cast<int32_t>(g.prompt_tokens.size());
  if (num_prompt == 0) throw_error(ErrorCode::kInvalidArgument, "the prompt is empty");
  budget = checked_budget(g.kv_budget.value_or(config_.kv_budget));
  if (g.pooling != Pooling::kNone) {
    if (g.max_tokens != 1 || g.num_replayed != 0)
      throw_error(ErrorCode::kInvalidArgument, "an embedding request generates one token and replays none");
    budget = KvBudget{};  // every prompt token's state counts: nothing may be evicted
  }
  if (num_prompt >= max_model_len_ && !(budget.enabled() && budget.shift))
    throw_error(ErrorCode::kOutOfRange,
                "the prompt has {} tokens; the context holds {} (prompt and at least one generated token)",
                num_prompt, max_model_len_);
  if (g.max_tokens < 1) throw_error(ErrorCode::kInvalidArgument, "max_tokens {} must be at least 1", g.max_tokens);
  if (g.num_replayed < 0 || g.num_replayed >= num_prompt)
    throw_error(ErrorCode::kInvalidArgument, "{} replayed output tokens need a prompt of more tokens than that ({})",
                g.num_replayed, num_prompt);
  g.sampling.validate();
  if (g.logprobs > kMaxLogprobs)
    throw_error(ErrorCode::kInvalidArgument, "logprobs {} must be at most {}", g.logprobs, kMaxLogprobs);
  const int32_t vocab = model_->config().vocab_size;
  for (int32_t t : g.prompt_tokens)
    if (t < 0 || t >= vocab) throw_error(ErrorCode::kInvalidArgument, "token id {} is outside the vocabulary [0, {})", t, vocab);
  for (const auto& [id, bias] : g.sampling.logit_bias)
    if (id < 0 || id >= vocab)
      throw_error(ErrorCode::kInvalidArgument, "logit_bias: token id {} is outside the vocabulary [0, {})", id, vocab);

  auto request = std::make_unique<Request>();
  request->tokens = g.prompt_tokens;
  request->num_prompt_tokens = num_prompt;
  request->max_tokens = g.max_tokens;
  request->cache_salt = request_extra_key(g);
  request->lora = g.lora.get();
  request->prompt_logits = g.prompt_logprobs;
  request->pooling = g.pooling;
  request->kv_budget = budget;
  request->arrival_s = clock_.now_s();
  set_kv_chunks(g, *request);
  if (!g.ignore_eos)
    for (int32_t id = 0; id < vocab; ++id)
      if (tokenizer_->is_end_of_generation(id)) request->stop_token_ids.push_back(id);
  return request;
}

void Engine::set_kv_chunks(const GenerateRequest& g, Request& request) const {
  const auto num_prompt = static_cast<int32_t>(g.prompt_tokens.size());
  if (g.prompt_logprobs_from < 0 || g.prompt_logprobs_from >= num_prompt)
    throw_error(ErrorCode::kInvalidArgument, "prompt_logprobs_from {} is outside the prompt's {} tokens",
                g.prompt_logprobs_from, num_prompt);
  request.prompt_logits_from = g.prompt_logprobs ? g.prompt_logprobs_from : 0;
  const double share = g.kv_blend_recompute < 0 ? config_.kv_blend_recompute : g.kv_blend_recompute;
  if (!(share >= 0 && share <= 1))
    throw_error(ErrorCode::kInvalidArgument, "kv_blend_recompute {} must be between 0 and 1", share);
  int32_t end = 0;
  for (const TokenSpan& c : g.kv_chunks) {
    if (c.begin < end || c.end <= c.begin || c.end > num_prompt)
      throw_error(ErrorCode::kInvalidArgument,
                  "kv_chunks: [{}, {}) must be a non-empty span of the prompt's {} tokens, after the chunk before it",
                  c.begin, c.end, num_prompt);
    end = c.end;
  }
  // Hints: where the model or the request cannot blend, the prompt is
  // computed as usual (GenerateRequest::kv_chunks).
  if (!blends_kv_chunks_ || request.kv_budget.enabled() || request.computes_whole_prompt()) return;
  for (const TokenSpan& c : g.kv_chunks)
    if (!request.prompt_logits || c.end <= request.prompt_logits_from) request.kv_chunks.push_back({c.begin, c.end});
  if (tokenizer_->add_bos() && tokenizer_->bos_id()) request.kv_chunk_prefix = {*tokenizer_->bos_id()};
  request.kv_blend_recompute = share;
}

std::unique_ptr<Request> Engine::make_companion(const Request& parent, const KvChunk& chunk) const {
  const auto tokens = std::span<const int32_t>(parent.tokens).subspan(chunk.begin, chunk.end - chunk.begin);
  std::vector<int32_t> prompt = kv_chunk_prompt(parent.kv_chunk_prefix, tokens, config_.block_size);
  if (prompt.empty()) return nullptr;
  auto r = std::make_unique<Request>();
  r->tokens = std::move(prompt);
  r->num_prompt_tokens = static_cast<int32_t>(r->tokens.size());
  r->max_tokens = 1;  // its prompt's KV is all it is for
  r->cache_salt = kv_chunk_extra_key(parent.cache_salt);
  r->lora = parent.lora;
  r->arrival_s = parent.arrival_s;
  return r;
}

std::vector<std::shared_ptr<RequestStream>> Engine::submit_n(GenerateRequest g, int32_t n) {
  std::vector<GenerateRequest> one;
  one.push_back(std::move(g));
  return submit_batch(std::move(one), n);
}

namespace {

// For each prompt, the earlier prompt it should wait for: the one sharing
// the longest prefix of whole KV blocks with it (at least one). None for a
// prompt that wants its prompt logprobs: it computes its prompt in full.
std::vector<std::optional<size_t>> prompt_leaders(const std::vector<GenerateRequest>& requests, int32_t block_size) {
  std::vector<std::optional<size_t>> leaders(requests.size());
  for (size_t i = 1; i < requests.size(); ++i) {
    if (requests[i].prompt_logprobs || requests[i].pooling == Pooling::kMean) continue;
    const std::vector<int32_t>& a = requests[i].prompt_tokens;
    size_t best = 0;
    for (size_t j = 0; j < i; ++j) {
      // Another salt or adapter shares no block, whatever the tokens.
      if (requests[j].cache_salt != requests[i].cache_salt || requests[j].lora != requests[i].lora) continue;
      const std::vector<int32_t>& b = requests[j].prompt_tokens;
      const auto mismatch = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
      const auto shared = static_cast<size_t>(mismatch.first - a.begin());
      // A cached block is only used when a token is left to compute after it.
      const size_t blocks = std::min(shared, a.size() - 1) / static_cast<size_t>(block_size);
      if (blocks > best) {
        best = blocks;
        leaders[i] = j;
      }
    }
  }
  return leaders;
}

}  // namespace

std::vector<std::shared_ptr<RequestStream>> Engine::submit_batch(std::vector<GenerateRequest> requests, int32_t n) {
  if (n < 1 || n > 128) throw_error(ErrorCode::kInvalidArgument, "n {} must be between 1 and 128", n);
  if (requests.empty()) throw_error(ErrorCode::kInvalidArgument, "no prompt to submit");
  for (const GenerateRequest& g : requests)
    if (g.num_replayed > 0 && (n > 1 || requests.size() > 1))
      throw_error(ErrorCode::kInvalidArgument, "a resumed generation has one choice of one prompt (n is {})", n);
  // Every choice is validated before any is queued.
  struct Choice {
    std::unique_ptr<Request> request;
    GenerateRequest g;
    KvBudget budget;
  };
  std::vector<Choice> choices;
  for (const GenerateRequest& g : requests) {
    for (int32_t i = 0; i < n; ++i) {
      Choice c{nullptr, g, {}};
      c.g.sampling.seed = g.sampling.seed + static_cast<uint64_t>(i);  // the twin rule of docs/server.md "n and best_of"
      c.request = make_request(c.g, c.budget);
      choices.push_back(std::move(c));
    }
  }
  const auto leaders = config_.prefix_caching ? prompt_leaders(requests, config_.block_size)
                                              : std::vector<std::optional<size_t>>(requests.size());
  std::vector<std::shared_ptr<RequestStream>> streams;
  {
    std::lock_guard lock(mu_);
    if (stopping_) throw_error(ErrorCode::kUnavailable, "the engine is shutting down");
    std::vector<RequestId> firsts;  // each prompt's first choice
    for (size_t k = 0; k < choices.size(); ++k) {
      auto& [request, c, budget] = choices[k];
      const size_t prompt = k / static_cast<size_t>(n);
      request->id = RequestId(next_request_id_++);
      std::optional<RequestId> after;
      if (k % static_cast<size_t>(n) != 0) {
        after = firsts[prompt];
      } else {
        if (leaders[prompt]) after = firsts[*leaders[prompt]];
        firsts.push_back(request->id);
      }
      if (k % static_cast<size_t>(n) == 0) queue_companions(*request, c);
      auto stream = std::make_shared<RequestStream>(request->id);
      auto live = std::make_unique<Live>(stream, *tokenizer_, c, request->arrival_s);
      if (c.num_replayed > 0) replay_output(*live, *request, c.num_replayed);
      live->stats.num_prompt_tokens = request->num_prompt_tokens;
      live->kv_budget = budget;
      metrics_.num_prompt_tokens += request->num_prompt_tokens;
      ++num_unfinished_;
      inbox_.push_back({std::move(request), std::move(live), after});
      streams.push_back(std::move(stream));
    }
  }
  cv_.notify_all();
  return streams;
}

void Engine::queue_companions(const Request& parent, const GenerateRequest& g) {
  for (size_t k = 0; k < parent.kv_chunks.size(); ++k) {
    std::unique_ptr<Request> r = make_companion(parent, parent.kv_chunks[k]);
    if (!r) continue;
    r->id = RequestId(next_request_id_++);
    GenerateRequest quiet;  // greedy, one token, nobody reads its stream
    quiet.lora = g.lora;
    auto live = std::make_unique<Live>(std::make_shared<RequestStream>(r->id), *tokenizer_, quiet, r->arrival_s);
    live->companion_of = parent.id;
    live->companion_chunk = k;
    inbox_.push_back({std::move(r), std::move(live), std::nullopt});
  }
}

void Engine::replay_output(Live& live, const Request& request, int32_t num_replayed) const {
  const auto tokens = std::span<const int32_t>(request.tokens).last(static_cast<size_t>(num_replayed));
  std::string text = output_->replay(live.output, tokens, request.stop_token_ids);
  live.sampler.skip_draws(num_replayed);
  live.stream->push_replayed(std::vector<int32_t>(tokens.begin(), tokens.end()), std::move(text));
}

void Engine::admit(std::unique_ptr<Request> request) {
  const RequestId id = request->id;
  try {
    if (tiers_.begin_lookup(request, scheduler_->kv_manager())) return;
    scheduler_->add_request(std::move(request));
  } catch (const Error& e) {
    release_followers(id);
    fail_live(id, e);
  }
}

void Engine::take_tier_loads() {
  if (!tiers_.enabled()) return;
  for (std::unique_ptr<Request>& request : tiers_.take_ready(scheduler_->kv_manager(), runner_->storage()))
    admit_after_lookup(std::move(request));
}

void Engine::admit_after_lookup(std::unique_ptr<Request> request) {
  const RequestId id = request->id;
  try {
    scheduler_->add_request(std::move(request));
  } catch (const Error& e) {
    fail_live(id, e);
  }
}

void Engine::release_followers(RequestId first) {
  auto it = followers_.find(first);
  if (it == followers_.end()) return;
  std::vector<std::unique_ptr<Request>> waiting = std::move(it->second);
  followers_.erase(it);
  for (auto& r : waiting) admit(std::move(r));
}

void Engine::drop_follower(RequestId id) {
  for (auto& [first, waiting] : followers_)
    std::erase_if(waiting, [&](const std::unique_ptr<Request>& r) { return r->id == id; });
}

}  // namespace kvlm
