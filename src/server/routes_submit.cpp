// Submitting a validated generation to the engine: its limits checked
// against the context, its choices (or best_of candidates) submitted and
// registered for a drain, then the answer handed to routes_choices.cpp
// (one body) or routes_stream.cpp (SSE).
#include <climits>

#include <fmt/format.h>

#include "common/error.h"
#include "common/hash.h"
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
  if (o.kv_sinks) b.num_sinks = *o.kv_sinks;
  if (o.kv_recent) b.num_recent = *o.kv_recent;
  if (o.kv_shift) b.shift = *o.kv_shift;
  return b;
}

// The engine request of `gen` (its prompt moved out), or nullopt after
// answering 400: a prompt or max_tokens past the context.
std::optional<GenerateRequest> engine_request(const Engine& engine, Generation& gen, httplib::Response& res) {
  const auto num_prompt = static_cast<int32_t>(gen.prompt.size());
  const KvBudget budget = request_budget(engine, gen.options);
  // With a budget and kv_shift, positions stay inside the budget: no context end.
  const int32_t limit = budget.enabled() && budget.shift ? INT32_MAX : engine.max_model_len();
  const char* prompt_param = gen.chat ? "messages" : "prompt";
  if (num_prompt >= limit) {
    send_error(res, {400, fmt::format("This model's maximum context length is {} tokens. However, your prompt has {} tokens; "
                                      "leave room for at least one generated token.", limit, num_prompt),
                     std::string(prompt_param)});
    return std::nullopt;
  }
  int32_t max_tokens = gen.options.max_tokens.value_or(
      limit == INT32_MAX ? std::max(engine.max_model_len() - num_prompt, 16) : limit - num_prompt);
  if (num_prompt + max_tokens > limit) {
    if (gen.options.max_tokens) {
      send_error(res, {400, fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens "
                                        "({} in the {}, {} in the completion). Please reduce the length.",
                                        limit, num_prompt + max_tokens, num_prompt, prompt_param, max_tokens),
                       std::string("max_tokens")});
      return std::nullopt;
    }
    max_tokens = limit - num_prompt;
  }
  GenerateRequest g;
  g.prompt_tokens = std::move(gen.prompt);
  g.sampling = gen.options.sampling;
  g.max_tokens = max_tokens;
  g.stop = gen.options.stop;
  g.ignore_eos = gen.options.ignore_eos;
  g.logprobs = gen.options.logprobs;
  // best_of ranks candidates by their tokens' log-probabilities: ask for them
  // (the answer drops them again unless the client asked too).
  if (gen.options.best_of > gen.options.n) g.logprobs = std::max(g.logprobs, 0);
  g.prompt_logprobs = gen.echo && gen.options.logprobs >= 0;
  g.kv_budget = budget;
  // A forced tool call wins over response_format: the reply is the call.
  g.constraint = gen.constraint ? gen.constraint : gen.options.constraint;
  g.render_special = gen.tool_calls.has_value();
  if (gen.options.cache_salt) {
    const Hash128 h = hash128(gen.options.cache_salt->data(), gen.options.cache_salt->size());
    g.cache_salt = h.lo | 1;  // never 0, which means "shared"
  }
  return g;
}

// Submits best_of (or n) candidates and registers them for a drain; nullopt
// after answering the engine's refusal.
std::optional<Submitted> submit_choices(ServerContext& ctx, const Generation& gen, GenerateRequest g,
                                        InFlightRequests::Ticket& ticket, httplib::Response& res) {
  Submitted sub;
  sub.num_prompt = static_cast<int32_t>(g.prompt_tokens.size());
  // The echoed prompt's other tokens come back as prompt logprobs.
  if (gen.echo && !g.prompt_tokens.empty()) sub.echoed_first = g.prompt_tokens[0];
  try {
    sub.streams = ctx.engine.submit_n(std::move(g), std::max(gen.options.best_of, gen.options.n));
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

void run_generation(ServerContext& ctx, Generation gen, const httplib::Request& req, httplib::Response& res) {
  // Registered before looking at draining(): a drain waits for us or we refuse.
  std::shared_ptr<InFlightRequests::Ticket> ticket = ctx.in_flight.enter();
  if (ctx.in_flight.draining()) {
    res.set_header("Connection", "close");
    send_error(res, {503, "the server is shutting down; send the request to another replica", std::nullopt,
                     "server_error"});
    return;
  }
  std::optional<GenerateRequest> g = engine_request(ctx.engine, gen, res);
  if (!g) return;
  g->timeout_s = ctx.request_timeout_s;
  std::unique_lock admission(ctx.admission_mu);  // limits.cpp: check and submit as one
  if (refuse_when_queue_full(ctx, std::max(gen.options.best_of, gen.options.n), res)) return;
  std::optional<Submitted> sub = submit_choices(ctx, gen, std::move(*g), *ticket, res);
  admission.unlock();
  if (!sub) return;
  if (!gen.options.stream) return answer_whole(ctx, gen, *sub, req, res);
  answer_stream(ctx, std::move(gen), std::move(*sub), std::move(ticket), res);
}

}  // namespace kvlm
