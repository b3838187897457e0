// Submitting a validated generation to the engine: its limits checked
// against the context, its choices (or best_of candidates) submitted and
// registered for a drain, then answered by answer_driver.cpp in the API's
// format.
#include <climits>

#include <fmt/format.h>

#include "common/error.h"
#include "kv/block_hash.h"
#include "kv/kv_scorer.h"
#include "engine/engine.h"
#include "server/routes.h"
#include "server/routes_choices.h"

namespace kvlm {
namespace {

// The server's --kv-* defaults with the request's own kv_* fields over them.
KvBudget request_budget(const Engine& engine, const openai::GenerationOptions& o) {
  KvBudget b = engine.config().kv_budget;
  if (o.kv_budget) b.budget_tokens = *o.kv_budget;
  if (o.kv_policy) b.policy = *o.kv_policy;
  // learned:NAME runs only a policy the server loaded (--kv-policy learned:FILE).
  if (o.kv_policy == KvPolicyKind::kLearned && (!b.scorer || b.scorer->weights().name != o.kv_learned_name))
    throw_error(ErrorCode::kInvalidArgument, "kv_policy learned:{} is not loaded here{}", o.kv_learned_name,
                b.scorer ? fmt::format(" (this server has learned:{})", b.scorer->weights().name)
                         : " (start the server with --kv-policy learned:FILE)");
  if (o.kv_sinks) b.num_sinks = *o.kv_sinks;
  if (o.kv_recent) b.num_recent = *o.kv_recent;
  if (o.kv_shift) b.shift = *o.kv_shift;
  return b;
}

// The 400 of a prompt (and max_tokens) past the context: code
// context_length_exceeded, as OpenAI answers it.
void send_too_long(http::Response& res, std::string message, const char* param) {
  openai::RequestError e{400, std::move(message), std::string(param)};
  e.code = "context_length_exceeded";
  send_error(res, e);
}

// The engine request of one prompt of `gen`, or nullopt after answering 400:
// a prompt or max_tokens past the context.
std::optional<GenerateRequest> engine_request(const Engine& engine, const Generation& gen,
                                              std::vector<int32_t> prompt, std::vector<TokenSpan> chunks,
                                              http::Response& res) {
  const auto num_prompt = static_cast<int32_t>(prompt.size());
  KvBudget budget;
  try {
    budget = request_budget(engine, gen.options);
  } catch (const Error& e) {
    send_error(res, {400, e.what(), std::string("kv_policy")});
    return std::nullopt;
  }
  // With a budget and kv_shift, positions stay inside the budget: no context end.
  const int32_t limit = budget.enabled() && budget.shift ? INT32_MAX : engine.max_model_len();
  const char* prompt_param = gen.chat ? "messages" : "prompt";
  if (num_prompt >= limit) {
    send_too_long(res, fmt::format("This model's maximum context length is {} tokens. However, your prompt has {} "
                                   "tokens; leave room for at least one generated token.", limit, num_prompt),
                  prompt_param);
    return std::nullopt;
  }
  int32_t max_tokens = gen.options.max_tokens.value_or(
      limit == INT32_MAX ? std::max(engine.max_model_len() - num_prompt, 16) : limit - num_prompt);
  if (num_prompt + max_tokens > limit) {
    if (gen.options.max_tokens) {
      send_too_long(res, fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                                     "tokens ({} in the {}, {} in the completion). Please reduce the length.",
                                     limit, num_prompt + max_tokens, num_prompt, prompt_param, max_tokens),
                    "max_tokens");
      return std::nullopt;
    }
    max_tokens = limit - num_prompt;
  }
  GenerateRequest g;
  g.prompt_tokens = std::move(prompt);
  // A resumed stream: its output so far follows the prompt, and max_tokens
  // (which counts it) leaves the rest. Nothing left: max_tokens 0, which
  // run_generation answers without the engine.
  const std::vector<int32_t>& resumed = gen.options.resume_token_ids;
  g.prompt_tokens.insert(g.prompt_tokens.end(), resumed.begin(), resumed.end());
  g.num_replayed = static_cast<int32_t>(resumed.size());
  g.sampling = gen.options.sampling;
  // prompt_only: one token to sample, which the answer leaves out.
  g.max_tokens = gen.prompt_only ? 1 : std::max(max_tokens - g.num_replayed, 0);
  g.stop = gen.options.stop;
  g.ignore_eos = gen.options.ignore_eos;
  g.speculative = gen.options.speculative;
  g.logprobs = gen.options.logprobs;
  // best_of ranks candidates by their tokens' log-probabilities: ask for them
  // (the answer drops them again unless the client asked too).
  if (gen.options.best_of > gen.options.n) g.logprobs = std::max(g.logprobs, 0);
  g.prompt_logprobs = gen.echo && gen.options.logprobs >= 0;
  g.kv_budget = budget;
  // A forced tool call wins over response_format: the reply is the call.
  g.constraint = gen.constraint ? gen.constraint : gen.options.constraint;
  g.render_special = gen.tool_calls.has_value();
  g.thinking = gen.thinking;
  if (gen.options.cache_salt) g.cache_salt = cache_salt_key(*gen.options.cache_salt);
  g.lora = gen.lora;
  g.kv_chunks = std::move(chunks);
  g.kv_blend_recompute = gen.options.kv_blend_recompute.value_or(-1);
  return g;
}

// Submits best_of (or n) candidates of every prompt at once and registers
// them for a drain; nullopt after answering the engine's refusal.
std::optional<Submitted> submit_choices(ServerContext& ctx, const Generation& gen, std::vector<GenerateRequest> gs,
                                        InFlightRequests::Ticket& ticket, http::Response& res) {
  Submitted sub;
  sub.num_candidates = std::max(gen.options.best_of, gen.options.n);
  sub.num_replayed = gs[0].num_replayed;
  for (const GenerateRequest& g : gs) {
    const int32_t num_prompt = static_cast<int32_t>(g.prompt_tokens.size()) - g.num_replayed;
    sub.num_prompt.push_back(num_prompt);
    // The echoed prompt's other tokens come back as prompt logprobs.
    sub.echoed_first.push_back(gen.echo ? std::optional<int32_t>(g.prompt_tokens[0]) : std::nullopt);
    if (gen.options.return_token_ids)
      sub.prompt_tokens.emplace_back(g.prompt_tokens.begin(), g.prompt_tokens.begin() + num_prompt);
  }
  try {
    sub.streams = ctx.engine.submit_batch(std::move(gs), sub.num_candidates);
  } catch (const Error& e) {
    send_error(res, error_for(e));
    return std::nullopt;
  }
  std::vector<RequestId> ids;
  for (const auto& s : sub.streams) ids.push_back(s->id());
  if (!ticket.set_requests(ids)) cancel_all(ctx.engine, sub);  // the drain's deadline has passed
  return sub;
}

}  // namespace

void run_generation(ServerContext& ctx, Generation gen, const http::Request& req, http::Response& res) {
  // Registered before looking at draining(): a drain waits for us or we refuse.
  std::shared_ptr<InFlightRequests::Ticket> ticket = ctx.in_flight.enter();
  if (ctx.in_flight.draining()) {
    res.set_header("Connection", "close");
    send_shutting_down(res, "the server is shutting down; send the request to another replica");
    return;
  }
  gen.prompt_only = !gen.chat && gen.options.max_tokens == 0;
  std::vector<GenerateRequest> gs;
  for (size_t i = 0; i < gen.prompts.size(); ++i) {
    std::vector<TokenSpan> chunks = i < gen.prompt_chunks.size() ? gen.prompt_chunks[i] : std::vector<TokenSpan>{};
    std::optional<GenerateRequest> g = engine_request(ctx.engine, gen, std::move(gen.prompts[i]), std::move(chunks), res);
    if (!g) return;
    ctx.sampling_defaults.apply(gen.options.given, g->sampling);
    g->timeout_s = ctx.request_timeout_s;
    gs.push_back(std::move(*g));
  }
  if (gs[0].num_replayed > 0 && gs[0].max_tokens == 0)
    return answer_resumed_at_length(gen, static_cast<int32_t>(gs[0].prompt_tokens.size()) - gs[0].num_replayed, res);
  const auto num_candidates = static_cast<int32_t>(gs.size()) * std::max(gen.options.best_of, gen.options.n);
  // The first prompt's tokens and key, for the slot its first choice runs in.
  std::vector<int32_t> slot_tokens = gs[0].prompt_tokens;
  const uint64_t slot_key = request_extra_key(gs[0]);
  std::unique_lock admission(ctx.admission_mu);  // limits.cpp: check and submit as one
  if (refuse_when_queue_full(ctx, num_candidates, res)) return;
  std::optional<Submitted> sub = submit_choices(ctx, gen, std::move(gs), *ticket, res);
  admission.unlock();
  if (!sub) return;
  if (ctx.slots) sub->slot = ctx.slots->claim(sub->streams[0]->id(), std::move(slot_tokens), slot_key);
  const FormatMaker format = gen.writer ? writer_format : openai_format;
  answer_generation(ctx, req, std::move(gen), std::move(*sub), std::move(ticket), format, res);
}

}  // namespace kvlm
