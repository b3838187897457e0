// Requests into the engine: validation, admission (a tier lookup or the
// scheduler), and n choices of one prompt that share its KV (engine.h).
#include "common/error.h"
#include "engine/engine.h"
#include "engine/engine_live.h"
#include "model/model.h"
#include "sched/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {

std::unique_ptr<Request> Engine::make_request(GenerateRequest& g, KvBudget& budget) const {
  const int32_t num_prompt = static_cast<int32_t>(g.prompt_tokens.size());
  if (num_prompt == 0) throw_error(ErrorCode::kInvalidArgument, "the prompt is empty");
  budget = checked_budget(g.kv_budget.value_or(config_.kv_budget));
  if (num_prompt >= max_model_len_ && !(budget.enabled() && budget.shift))
    throw_error(ErrorCode::kOutOfRange,
                "the prompt has {} tokens; the context holds {} (prompt and at least one generated token)",
                num_prompt, max_model_len_);
  if (g.max_tokens < 1) throw_error(ErrorCode::kInvalidArgument, "max_tokens {} must be at least 1", g.max_tokens);
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
  request->cache_salt = g.cache_salt;
  request->prompt_logits = g.prompt_logprobs;
  request->kv_budget = budget;
  request->arrival_s = clock_.now_s();
  if (!g.ignore_eos)
    for (int32_t id = 0; id < vocab; ++id)
      if (tokenizer_->is_end_of_generation(id)) request->stop_token_ids.push_back(id);
  return request;
}

std::vector<std::shared_ptr<RequestStream>> Engine::submit_n(GenerateRequest g, int32_t n) {
  if (n < 1 || n > 128) throw_error(ErrorCode::kInvalidArgument, "n {} must be between 1 and 128", n);
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::pair<std::unique_ptr<Request>, GenerateRequest>> choices;
  KvBudget budget;
  const uint64_t seed = g.sampling.seed;
  for (int32_t i = 0; i < n; ++i) {
    GenerateRequest c = g;
    c.sampling.seed = seed + static_cast<uint64_t>(i);  // the README's twin rule
    std::unique_ptr<Request> r = make_request(c, budget);
    choices.emplace_back(std::move(r), std::move(c));
  }
  {
    std::lock_guard lock(mu_);
    if (stopping_) throw_error(ErrorCode::kUnavailable, "the engine is shutting down");
    std::optional<RequestId> first;
    for (auto& [request, c] : choices) {
      request->id = RequestId(next_request_id_++);
      auto stream = std::make_shared<RequestStream>(request->id);
      auto live = std::make_unique<Live>(stream, *tokenizer_, c, request->arrival_s);
      live->stats.num_prompt_tokens = request->num_prompt_tokens;
      live->kv_budget = budget;
      metrics_.num_prompt_tokens += request->num_prompt_tokens;
      ++num_unfinished_;
      const RequestId id = request->id;
      inbox_.push_back({std::move(request), std::move(live), first});
      if (!first) first = id;
      streams.push_back(std::move(stream));
    }
  }
  cv_.notify_all();
  return streams;
}

void Engine::admit(std::unique_ptr<Request> request) {
  const RequestId id = request->id;
  try {
    if (begin_tier_lookup(request)) return;
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
