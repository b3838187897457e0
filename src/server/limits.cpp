// The server's admission limits (server.h ServerConfig): the 503 they answer,
// the queue check before a generation request is submitted, the memory a
// request's parsed body takes, and the answers to refused grammars.
#include <fmt/format.h>

#include "common/memory_budget.h"
#include "constrain/grammar_cache.h"
#include "engine/engine.h"
#include "server/routes.h"
#include "wire/http/body_memory.h"
#include "wire/openai/json_text.h"

namespace kvlm {

bool refuse_when_queue_full(ServerContext& ctx, int32_t num_choices, http::Response& res) {
  if (ctx.max_queued_requests < 0) return false;
  // Requests past max_seqs wait; an idle engine takes any request (even one
  // whose choices alone exceed the cap), so a big `n` is never refused forever.
  const int32_t num_unfinished = ctx.engine.num_unfinished();
  const int64_t capacity = static_cast<int64_t>(ctx.engine.config().max_seqs) + ctx.max_queued_requests;
  if (num_unfinished == 0 || num_unfinished + num_choices <= capacity) return false;
  ++ctx.num_rejected_queue;
  send_overloaded(res, ctx.retry_after_s,
                  fmt::format("the server is busy: {} requests are running or waiting and at most {} may wait "
                              "(--max-queued-requests); retry later",
                              num_unfinished, ctx.max_queued_requests),
                  "queue_full");
  return true;
}

int64_t take_body_memory(ServerContext& ctx, const http::Request& req, http::Response& res) {
  return take_body_memory(*ctx.body_memory, ctx.retry_after_s, ctx.num_rejected_body_memory, req, res);
}

void send_grammar_refusal(const ServerContext& ctx, http::Response& res, const constrain::GrammarLimitError& e,
                          const std::string& param) {
  using constrain::GrammarLimit;
  if (e.limit() == GrammarLimit::kTooLarge) return send_error(res, {400, fmt::format("'{}': {}", param, e.what()), param});
  const constrain::GrammarLimits& l = ctx.grammars->limits();
  const bool memory = e.limit() == GrammarLimit::kMemory;
  const std::string limit = memory ? fmt::format("--grammar-mem {} MiB", l.memory_bytes >> 20)
                                   : fmt::format("--grammar-compilations {}, --grammar-wait-ms {}", l.max_compilations,
                                                 l.max_wait.count());
  send_overloaded(res, ctx.retry_after_s, fmt::format("{} ({})", e.what(), limit),
                  memory ? "grammar_memory_exhausted" : "grammar_compilations_busy");
}

}  // namespace kvlm
