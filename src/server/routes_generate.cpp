// POST /v1/completions and /v1/chat/completions: validate, build the prompt,
// submit its choices to the engine, then answer with one JSON body
// (routes_choices.cpp) or an SSE stream (routes_stream.cpp).
#include <climits>
#include <ctime>

#include <fmt/format.h>

#include "common/error.h"
#include "common/hash.h"
#include "engine/engine.h"
#include "server/openai/json_text.h"
#include "server/routes.h"
#include "server/routes_choices.h"
#include "tokenizer/chat_prompt.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {
namespace {

using openai::Json;

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
  g.constraint = gen.options.constraint;
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

void run(ServerContext& ctx, Generation gen, const httplib::Request& req, httplib::Response& res) {
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
  std::optional<Submitted> sub = submit_choices(ctx, gen, std::move(*g), *ticket, res);
  if (!sub) return;
  if (!gen.options.stream) return answer_whole(ctx, gen, *sub, req, res);
  answer_stream(ctx, std::move(gen), std::move(*sub), std::move(ticket), res);
}

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

// A prompt of more bytes (or ids) than the context can hold tokens of is
// refused before tokenizing or decoding it: the answer run() would give after
// spending seconds on a 32 MiB prompt, at no cost.
bool refuse_long_prompt(const ServerContext& ctx, httplib::Response& res, size_t num_bytes, size_t num_ids,
                        const char* param) {
  const auto limit = static_cast<size_t>(ctx.engine.max_model_len());
  if (num_bytes <= ctx.max_prompt_bytes && num_ids < limit) return false;
  send_error(res, {400, fmt::format("This model's maximum context length is {} tokens. However, your {} is longer "
                                    "({} bytes, {} token ids).", limit, param, num_bytes, num_ids),
                   std::string(param)});
  return true;
}

// The bytes of every message's text: a lower bound of the rendered prompt's.
size_t message_bytes(const openai::Json& messages) {
  size_t n = 0;
  for (const openai::Json& m : messages)
    if (const auto it = m.find("content"); it != m.end() && it->is_string()) n += it->get_ref<const std::string&>().size();
  return n;
}

}  // namespace

void handle_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
  auto parsed = openai::parse_completion_request(*body);
  if (auto* e = std::get_if<openai::RequestError>(&parsed)) return send_error(res, *e);
  auto& r = std::get<openai::CompletionRequest>(parsed);
  Generation gen{false, openai::new_id("cmpl"), unix_now(), std::move(r.options), {}, r.echo, {}};
  if (auto* text = std::get_if<std::string>(&r.prompt)) {
    if (refuse_long_prompt(ctx, res, text->size(), 0, "prompt")) return;
    gen.prompt = ctx.engine.tokenizer().encode(*text, /*add_special=*/true, /*parse_special=*/true);
    if (gen.echo) gen.prompt_text = *text;
  } else {
    gen.prompt = std::get<std::vector<int32_t>>(r.prompt);
    if (refuse_long_prompt(ctx, res, 0, gen.prompt.size(), "prompt")) return;
    if (gen.echo) {
      try {
        gen.prompt_text = ctx.engine.tokenizer().decode(gen.prompt);
      } catch (const Error& e) {
        return send_error(res, {400, e.what(), std::string("prompt")});
      }
    }
  }
  run(ctx, std::move(gen), req, res);
}

void handle_chat_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
  auto parsed = openai::parse_chat_request(*body);
  if (auto* e = std::get_if<openai::RequestError>(&parsed)) return send_error(res, *e);
  auto& r = std::get<openai::ChatRequest>(parsed);
  if (!ctx.chat_template) return send_error(res, {400, ctx.chat_template_error, std::string("messages")});
  if (refuse_long_prompt(ctx, res, message_bytes(r.messages), 0, "messages")) return;
  Generation gen{true, openai::new_id("chatcmpl"), unix_now(), std::move(r.options), {}, false, {}};
  try {
    gen.prompt = encode_chat(ctx.engine.tokenizer(), *ctx.chat_template, r.messages, /*add_generation_prompt=*/true,
                             r.template_extra);
  } catch (const Error& e) {
    // The template's own words, e.g. "System role not supported".
    return send_error(res, {400, e.what(), std::string("messages")});
  }
  run(ctx, std::move(gen), req, res);
}

}  // namespace kvlm
